/* Vector math from SLEEF (Debian libsleef-dev, the library PyTorch's vectorized CPU math uses) for
 * the f32 and f64 functions the library does not compute with its own polynomials
 * (src/exec/expf_poly.h: the f32 exp family and pow, f64 exp, expm1, log, log1p, tanh, cbrt, erf
 * and pow, with f64 logistic through exp): f32 sin, cos, tan, cbrt and atan2; f64 sin, cos, tan
 * and atan2. docs/vmath.md has the accuracy and speed of each.
 *
 * Bit-identical twins: SLEEF's deterministic variants give the same bits in every vector width
 * of one class: "finz" (with FMA: the scalar purecfma, AVX2 128/256-bit, AVX-512) and "cinz"
 * (without FMA: the scalar purec, SSE4, AVX, AVX-512 without FMA). The reference evaluator
 * (src/exec/vmath.c) calls the scalar variant of the class the CPU has (finz where it has FMA);
 * generated code (src/codegen/emit.c, cg_emit_preamble) declares the same scalar function as a
 * SIMD function (GCC's simd attribute: the GNU vector ABI), so the vectorizer calls 16-, 8- or
 * 4-lane clones, thin wrappers around SLEEF's vector variants of the same class; -march=native
 * defines __FMA__ exactly when the CPU has it, so both sides pick the same class.
 *
 * Special values, the same on both sides (OT_VMATH_DEF): a NaN operand gives that NaN quieted
 * (of two NaN operands the first); a NaN produced from non-NaN operands (sin(inf), log(-1),
 * pow(-2, 0.5)) is the default NaN (sign set, quiet bit only: what x86 produces); pow(1, y) and
 * pow(x, 0) are 1 for every x and y, NaN included (as XLA's CPU backend). Everything else
 * (±0, ±inf, subnormal operands and results) is SLEEF's, which follows C99 Annex F; the caller
 * flushes subnormal operands and results where the FTZ rules say so, in software (these
 * functions never run under the hardware FTZ/DAZ modes: SLEEF's internal steps are not
 * specified under them). */
#ifndef OT_VMATH_H
#define OT_VMATH_H

/* X(name, stem, arity, T): the C library's name, SLEEF's function stem (its name without the
 * lane count and accuracy: Sleef_finz_<stem>16_u10avx512f), operand count, type. All are the
 * u10 variants (at most 1.0 ulp, SLEEF's documented bound). */
#define OT_VMATH_LIST(X)                                                                           \
    X(sinf, sinf, 1, float)                                                                        \
    X(cosf, cosf, 1, float)                                                                        \
    X(tanf, tanf, 1, float)                                                                        \
    X(cbrtf, cbrtf, 1, float)                                                                      \
    X(atan2f, atan2f, 2, float)                                                                    \
    X(sin, sind, 1, double)                                                                        \
    X(cos, cosd, 1, double)                                                                        \
    X(tan, tand, 1, double)                                                                        \
    X(atan2, atan2d, 2, double)

/* The functions both sides call, ot_vm_<name>, around the raw SLEEF call ot_vmraw_<name> each
 * side declares (the reference: OT_VMATH_REF_DECLS, defined in src/exec/vmath.c; generated code:
 * cg_emit_preamble). The selections after the call are masks on the bits, not conditionals: GCC
 * 12 does not if-convert a loop that holds a call, and a branch left in it stops vectorization.
 * pow's 1 rule compares bits: a == 1 exactly, b == ±0 (pow's operands arrive flushed, so a
 * subnormal b that DAZ would read as 0 is already 0 where the rules flush it). */
#define OT_VMATH_FIX_(L)                                                                           \
    L float ot_vm_fixf_(float a, float b, float r) {                                               \
        union {                                                                                    \
            float f;                                                                               \
            uint32_t u;                                                                            \
        } ab = {a}, bb = {b}, rb = {r};                                                            \
        uint32_t an = 0u - (uint32_t)((ab.u & 0x7fffffffu) > 0x7f800000u);                         \
        uint32_t bn = ~an & (0u - (uint32_t)((bb.u & 0x7fffffffu) > 0x7f800000u));                 \
        uint32_t rn = ~an & ~bn & (0u - (uint32_t)((rb.u & 0x7fffffffu) > 0x7f800000u));           \
        uint32_t keep = ~an & ~bn & ~rn;                                                           \
        rb.u = ((ab.u | 0x400000u) & an) | ((bb.u | 0x400000u) & bn) | (0xffc00000u & rn) |        \
               (rb.u & keep);                                                                      \
        return rb.f;                                                                               \
    }                                                                                              \
    L double ot_vm_fixd_(double a, double b, double r) {                                           \
        union {                                                                                    \
            double f;                                                                              \
            uint64_t u;                                                                            \
        } ab = {a}, bb = {b}, rb = {r};                                                            \
        uint64_t m = 0x7fffffffffffffffull, inf = 0x7ff0000000000000ull, q = 1ull << 51;           \
        uint64_t an = 0u - (uint64_t)((ab.u & m) > inf);                                           \
        uint64_t bn = ~an & (0u - (uint64_t)((bb.u & m) > inf));                                   \
        uint64_t rn = ~an & ~bn & (0u - (uint64_t)((rb.u & m) > inf));                             \
        uint64_t keep = ~an & ~bn & ~rn;                                                           \
        rb.u =                                                                                     \
            ((ab.u | q) & an) | ((bb.u | q) & bn) | (0xfff8000000000000ull & rn) | (rb.u & keep);  \
        return rb.f;                                                                               \
    }
#define OT_VMATH_FN_(name, stem, arity, T) OT_VMATH_FN##arity##_(name, T)
#define OT_VMATH_FN1_(name, T)                                                                     \
    static inline T ot_vm_##name(T x) {                                                            \
        return OT_VM_FIX_(T)(x, x, ot_vmraw_##name(x));                                            \
    }
#define OT_VMATH_FN2_(name, T)                                                                     \
    static inline T ot_vm_##name(T a, T b) {                                                       \
        return OT_VM_FIX_(T)(a, b, ot_vmraw_##name(a, b));                                         \
    }
#define OT_VM_FIX_(T)     OT_VM_FIX_##T##_
#define OT_VM_FIX_float_  ot_vm_fixf_
#define OT_VM_FIX_double_ ot_vm_fixd_
/* ot_vm_sinf ... ot_vm_atan2, then pow: the library's ot_powf and ot_powd (src/exec/expf_poly.h),
 * which apply the same NaN and 1 rules themselves. f64 pow calls ot_powd_call_: in the reference
 * (and generated code without AVX-512) ot_powd inlined, OT_POWD_CALL_INLINE; in generated code for
 * AVX-512, ot_powd declared a SIMD function, whose 8-lane clone is ot_powd's vector twin
 * (OT_POWD_V8_DEF; src/codegen/emit.c). */
#define OT_POWD_CALL_INLINE                                                                        \
    static inline __attribute__((always_inline)) double ot_powd_call_(double a, double b) {        \
        return ot_powd(a, b);                                                                      \
    }
#define OT_VMATH_DEF                                                                               \
    OT_VMATH_FIX_(static inline)                                                                   \
    OT_VMATH_LIST(OT_VMATH_FN_)                                                                    \
    static inline __attribute__((always_inline)) float ot_vm_powf1(float a, float b) {             \
        return ot_powf(a, b);                                                                      \
    }                                                                                              \
    static inline double ot_vm_pow1(double a, double b) {                                          \
        return ot_powd_call_(a, b);                                                                \
    }

/* The reference's raw calls (src/exec/vmath.c): SLEEF's scalar finz purecfma variant on a CPU
 * with FMA, its cinz purec variant otherwise. */
#define OT_VMATH_REF_DECL_(name, stem, arity, T) OT_VMATH_REF_DECL##arity##_(name, T)
#define OT_VMATH_REF_DECL1_(name, T)             T ot_vmraw_##name(T x);
#define OT_VMATH_REF_DECL2_(name, T)             T ot_vmraw_##name(T a, T b);
#define OT_VMATH_REF_DECLS                       OT_VMATH_LIST(OT_VMATH_REF_DECL_)

#endif
