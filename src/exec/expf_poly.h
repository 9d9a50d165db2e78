/* e^x, tanh, erf, log, log1p, expm1 and pow for f32 and e^x, e^x - 1, log, log1p, tanh, cbrt and
 * erf for f64, shared by the reference evaluator (src/exec/elementwise.c) and generated code
 * (src/codegen/emit.c pastes this text into its preamble), so both give the same bits.
 *
 * Evaluated in float with fused multiply-adds (fmaf: one rounding each, by definition, so a
 * libm call and the FMA instruction give the same bits): x is clamped to [-200, 89] (below, the
 * result is 0; above, inf; a NaN becomes -200 or 89, and the result is the NaN quieted, decided
 * from x), two integer minimums on the bits, k = round(x / ln 2) by adding 1.5·2^23,
 * r = x - k·ln 2 with ln 2 in two parts (|r| <= 0.347), e^r by a degree-7 polynomial
 * (Cephes' expf coefficients, Horner with fmaf), then 2^k applied with integer operations on the
 * bits: the exponent field for a normal result, else the significand shifted right with
 * round-to-nearest-even (a subnormal), 0 below, inf above. No step produces or consumes a
 * subnormal float, so the result does not depend on the CPU's FTZ/DAZ modes (generated code may
 * run under them); the caller flushes a subnormal result where its rules say so.
 *
 * Accuracy (every f32 input, glibc 2.36): at most 0.895 ulp from e^x, at most 1 ulp from glibc's
 * expf, equal to it on all but about 0.24 % of inputs. The loop around it vectorizes: no
 * branches, no tables; on AVX-512, 16 lanes per vector with about 20 operations.
 *
 * The clamp to [-200, 89] (it was ±200, which gave the same bits) bounds the result's biased
 * exponent e to [-163, 255], which ot_expf_ftz's selection relies on: every f32 input gives the
 * same bits as before, with and without FTZ/DAZ set (checked over all 2^32 inputs). */
#ifndef OT_EXPF_POLY_H
#define OT_EXPF_POLY_H

/* ot_expf_core_(x, &p, &e, &ki, &nan): p = e^r (a normal float in [0.7, 1.42]), ki = k, e = the
 * biased exponent of p·2^k (<= 0: subnormal or zero, >= 255: inf) */
#define OT_EXPF_DEF                                                                                \
    static inline float ot_expf_core_(float x, int32_t *e_out, int32_t *k_out) {                   \
        union {                                                                                    \
            float f;                                                                               \
            uint32_t u;                                                                            \
        } xb = {x}, tb, pb, sh = {0x1.8p23f};                                                      \
        uint32_t ux = xb.u;                                                                        \
        ux = ux < 0xc3480000u ? ux : 0xc3480000u; /* below -200 (as bits: -NaN too): -200 */       \
        int32_t sx = (int32_t)ux;                 /* above 89 (+NaN too): 89, a signed minimum */  \
        xb.u = (uint32_t)(sx < 0x42b20000 ? sx : 0x42b20000);                                      \
        float t = fmaf(xb.f, 0x1.715476p0f, 0x1.8p23f);                                            \
        float k = t - 0x1.8p23f;                                                                   \
        float r = fmaf(k, -0x1.62e43p-1f, xb.f);                                                   \
        r = fmaf(k, 0x1.05c61p-29f, r);                                                            \
        float p = 0x1.a0d2cep-13f;                                                                 \
        p = fmaf(p, r, 0x1.6e879cp-10f);                                                           \
        p = fmaf(p, r, 0x1.11121p-7f);                                                             \
        p = fmaf(p, r, 0x1.555382p-5f);                                                            \
        p = fmaf(p, r, 0x1.555554p-3f);                                                            \
        p = fmaf(p, r, 0x1p-1f);                                                                   \
        p = fmaf(p, r, 1.0f);                                                                      \
        p = fmaf(p, r, 1.0f);                                                                      \
        tb.f = t;                                                                                  \
        pb.f = p;                                                                                  \
        *k_out = (int32_t)(tb.u - sh.u);                                                           \
        *e_out = (int32_t)(pb.u >> 23) + *k_out;                                                   \
        return p;                                                                                  \
    }                                                                                              \
    static inline float ot_expf(float x) {                                                         \
        int32_t e, ki;                                                                             \
        union {                                                                                    \
            float f;                                                                               \
            uint32_t u;                                                                            \
        } xb = {x}, pb = {ot_expf_core_(x, &e, &ki)};                                              \
        uint32_t m = (pb.u & 0x7fffffu) | 0x800000u;                                               \
        int32_t s = 1 - e;                                                                         \
        uint32_t sc = s < 1 ? 1u : s > 25 ? 25u : (uint32_t)s;                                     \
        uint32_t q = m >> sc, rem = m & ((1u << sc) - 1u), half = 1u << (sc - 1u);                 \
        uint32_t sub = q + (rem > half || (rem == half && (q & 1u)) ? 1u : 0u);                    \
        uint32_t res = e >= 255 ? 0x7f800000u                                                      \
                       : e >= 1 ? pb.u + ((uint32_t)ki << 23)                                      \
                       : s > 25 ? 0u                                                               \
                                : sub;                                                             \
        xb.u = (xb.u & 0x7fffffffu) > 0x7f800000u ? xb.u | 0x400000u : res;                        \
        return xb.f;                                                                               \
    }                                                                                              \
    /* ot_expf with a subnormal result flushed to +0: only p·2^-126 with p's significand all      \
     * ones rounds up to FLT_MIN, every other result below FLT_MIN is flushed. n = p's bits plus   \
     * k in the exponent field: the result's bits when e is in [1, 254]; for e = 255, inf's bits   \
     * or more; for e = 0, p's significand (the sign and exponent fields 0); for e in [-163, -1],  \
     * the field wraps and n is negative as an int32. So: negative -> 0, at most inf's bits,       \
     * then below 0x7fffff -> 0 and 0x7fffff -> FLT_MIN (six vector operations, no compare of      \
     * e). */                                                                                      \
    static inline float ot_expf_ftz(float x) {                                                     \
        int32_t e, ki;                                                                             \
        union {                                                                                    \
            float f;                                                                               \
            uint32_t u;                                                                            \
        } xb = {x}, pb = {ot_expf_core_(x, &e, &ki)};                                              \
        /* ki + 0x4b400000 is t's bits (0x4b400000 << 23 wraps to 0, so the sum shifts to          \
         * ki << 23): the compiler then shifts t's bits without subtracting first */               \
        int32_t n = (int32_t)(pb.u + (((uint32_t)ki + 0x4b400000u) << 23));                        \
        uint32_t m = n > 0 ? (uint32_t)n : 0u;                                                     \
        m = m < 0x7f800000u ? m : 0x7f800000u;                                                     \
        uint32_t res = m >= 0x7fffffu ? (m > 0x800000u ? m : 0x800000u) : 0u;                      \
        xb.u = x != x ? xb.u | 0x400000u : res;                                                    \
        return xb.f;                                                                               \
    }

/* tanh for f32 (ot_tanhf, needs OT_EXPF_DEF's ot_expf_core_ before it), branch-free like
 * ot_expf. With a = |x| clamped to [2^-12, 10] by two integer comparisons on the bits (a NaN's
 * bits clamp to 10): for a < 0.625, Cephes' tanhf polynomial a + a·z·P(z), z = a², P of degree 4
 * (Horner with fmaf); otherwise 1 - 2/(e^(2a) + 1), with e^(2a) from ot_expf_core_ (2a is in
 * [1.25, 20], so its result is p·2^k with k added to the exponent field, never subnormal or
 * infinite); |x| < 2^-12 gives x itself (tanh(x) rounds to x there; this keeps ±0, and a
 * subnormal x, which the caller flushes where its rules say so); the sign is x's, a NaN comes
 * back quieted. At 10 and beyond the result is ±1 (tanh(x) rounds to 1 from 9.01). For a zero or
 * normal x no step produces or reads a subnormal float, so the result does not depend on the
 * CPU's FTZ/DAZ modes, and a tanh of a zero or normal x is never subnormal (nothing to flush).
 * Accuracy over every f32 input: docs/exec.md (bench/ulp_check.c measures it). */
#define OT_TANHF_DEF                                                                               \
    static inline float ot_tanhf(float x) {                                                        \
        union {                                                                                    \
            float f;                                                                               \
            uint32_t u;                                                                            \
        } xb = {x}, ab, cb, eb, rb;                                                                \
        ab.u = xb.u & 0x7fffffffu;                                                                 \
        uint32_t c = ab.u < 0x39800000u ? 0x39800000u : ab.u; /* at least 2^-12 */                 \
        cb.u = c < 0x41200000u ? c : 0x41200000u;             /* at most 10 (NaN too) */           \
        float a = cb.f, z = a * a;                                                                 \
        float p = -5.70498872745e-3f;                                                              \
        p = fmaf(p, z, 2.06390887954e-2f);                                                         \
        p = fmaf(p, z, -5.37397155531e-2f);                                                        \
        p = fmaf(p, z, 1.33314422036e-1f);                                                         \
        p = fmaf(p, z, -3.33332819422e-1f);                                                        \
        float small = fmaf(p * z, a, a);                                                           \
        int32_t e, k;                                                                              \
        eb.f = ot_expf_core_(a + a, &e, &k);                                                       \
        eb.u += (uint32_t)k << 23;                                                                 \
        float large = 1.0f - 2.0f / (eb.f + 1.0f);                                                 \
        rb.f = a < 0.625f ? small : large;                                                         \
        rb.u = ab.u < 0x39800000u ? ab.u : rb.u;                                                   \
        rb.u |= xb.u & 0x80000000u;                                                                \
        rb.u = ab.u > 0x7f800000u ? xb.u | 0x400000u : rb.u;                                       \
        return rb.f;                                                                               \
    }

/* erf for f32 (ot_erff, needs OT_EXPF_DEF's ot_expf_core_ before it), branch-free like ot_expf:
 * both halves are computed and one selected. With a = |x| clamped to at most 4 by an integer
 * minimum on the bits (a NaN's bits clamp to 4):
 *   a < 1: a + a·P(z), z = a², P of degree 6 (erf(a)/a - 1 near 2/sqrt(pi) - 1; Horner with
 *          fmaf); z is computed from a raised to at least 2^-30 (z is then never subnormal, and
 *          P(2^-60) rounds to P(0));
 *   a >= 1: 1 - e^(-a²)·Q(a - 2.5), Q of degree 8 approximating erfc(a)·e^(a²) on [1, 3.92];
 *          a² = h + l exactly (l = fmaf(a, a, -h)), e^(-h) = p·2^k from ot_expf_core_ (h is in
 *          [1, 16]: never subnormal), e^(-a²) = e^(-h)·(1 - l) to well under an ulp, and 2^k
 *          goes into the exponent field of p·Q·(1 - l) (at least 2^-28: normal). erf(a) rounds
 *          to 1 from 3.8325 on, so a clamped to 4 gives ±1 for every larger |x| and ±inf.
 * The coefficients are weighted least-squares fits iterated towards minimax (Lawson) against
 * scipy's erf and erfcx: P within 1.2e-9 of erf(a)/a - 1, Q·e^(-a²) within 0.04 ulp of 1 of
 * erfc(a). ±0 gives ±0; a subnormal x gives its correctly rounded erf (the caller flushes a
 * subnormal operand where its rules say so); the sign is x's; a NaN comes back quieted. For a
 * zero or normal x no step produces or reads a subnormal float, so the result does not depend on
 * the CPU's FTZ/DAZ modes, and the erf of a zero or normal x is never subnormal (|erf(x)| >= |x|
 * below 1). Accuracy over every f32 input: docs/exec.md (bench_vmath ulp --fn erf). */
#define OT_ERFF_DEF                                                                                \
    static inline float ot_erff(float x) {                                                         \
        union {                                                                                    \
            float f;                                                                               \
            uint32_t u;                                                                            \
        } xb = {x}, ab, cb, zb, eb, rb;                                                            \
        ab.u = xb.u & 0x7fffffffu;                                                                 \
        cb.u = ab.u < 0x40800000u ? ab.u : 0x40800000u; /* at most 4 (NaN too) */                  \
        zb.u = cb.u < 0x30800000u ? 0x30800000u : cb.u; /* at least 2^-30 for z */                 \
        float a = cb.f, z = zb.f * zb.f;                                                           \
        float p = 0x1.4ae4cep-14f;                                                                 \
        p = fmaf(p, z, -0x1.a485ecp-11f);                                                          \
        p = fmaf(p, z, 0x1.5419f4p-8f);                                                            \
        p = fmaf(p, z, -0x1.b7fbb4p-6f);                                                           \
        p = fmaf(p, z, 0x1.ce2d2p-4f);                                                             \
        p = fmaf(p, z, -0x1.81273ep-2f);                                                           \
        p = fmaf(p, z, 0x1.06eba8p-3f);                                                            \
        float small = fmaf(a, p, a);                                                               \
        float l = a < 1.0f ? 1.0f : a, s = l - 2.5f;                                               \
        float q = 0x1.c0224p-14f;                                                                  \
        q = fmaf(q, s, 0x1.d7fe4cp-13f);                                                           \
        q = fmaf(q, s, 0x1.1cdb7cp-11f);                                                           \
        q = fmaf(q, s, -0x1.5a9ddap-11f);                                                          \
        q = fmaf(q, s, 0x1.2dcb2ep-9f);                                                            \
        q = fmaf(q, s, -0x1.0a7a48p-7f);                                                           \
        q = fmaf(q, s, 0x1.983384p-6f);                                                            \
        q = fmaf(q, s, -0x1.30816ep-4f);                                                           \
        q = fmaf(q, s, 0x1.afbbe6p-3f);                                                            \
        float h = l * l, lo = fmaf(l, l, -h);                                                      \
        int32_t e, k;                                                                              \
        float m = ot_expf_core_(-h, &e, &k) * q;                                                   \
        eb.f = fmaf(-m, lo, m);                                                                    \
        eb.u += (uint32_t)k << 23;                                                                 \
        rb.f = a < 1.0f ? small : 1.0f - eb.f;                                                     \
        rb.u |= xb.u & 0x80000000u;                                                                \
        rb.u = ab.u > 0x7f800000u ? xb.u | 0x400000u : rb.u;                                       \
        return rb.f;                                                                               \
    }

/* log and log1p for f32 (ot_logf, ot_log1pf), branch-free like ot_expf. ot_logf_core_(ub, ...)
 * takes the bits ub of a positive finite normal float m·2^k, m in [sqrt(1/2), sqrt(2)), and
 * returns f²·(f·P(f)) with f = m - 1 (exact) and P of degree 8 (Cephes' logf coefficients, Horner
 * with fmaf); m comes from integer operations on the bits (musl's offset trick: adding
 * 1 - sqrt(1/2)'s offset to the exponent field makes k one shift, ot_logf_k_). ot_logf_sum_ adds
 * -f²/2, f and k·ln 2 in two parts (0.693359375, exact in 9 bits, and -2.12194440e-4). ot_logf
 * reads a subnormal x as its significand M (the normal float M·2^-23, built from bits) times
 * 2^-126, so it takes no float step on x itself: the result does not depend on FTZ/DAZ, and a
 * subnormal x (kept denormals) gets its logarithm. Special values: ±0 -> -inf, +inf -> +inf,
 * x < 0 (-inf too) -> the default NaN 0xffc00000 (what glibc and the x86 invalid operation
 * give), a NaN comes back quieted. ot_log1pf(x) = log(u) + (x - (u - 1))/u with u = 1 + x
 * rounded: the quotient corrects u's rounding to first order (u is 0 or at least 2^-24, never
 * subnormal, and the correction is 0 or at least 2^-48 in magnitude); |x| < 2^-24 gives x itself
 * (log1p rounds to x there; this keeps ±0 and a subnormal x, which the caller flushes where its
 * rules say so), -1 -> -inf, x < -1 -> the default NaN, +inf -> +inf, NaN quieted. Neither result
 * is ever subnormal for a zero or normal x. Accuracy over every f32 input: docs/exec.md
 * (bench_vmath ulp --fn log, --fn log1p). */
#define OT_LOGF_DEF                                                                                \
    static inline float ot_logf_core_(uint32_t ub, float *f_out, float *z_out) {                   \
        union {                                                                                    \
            float f;                                                                               \
            uint32_t u;                                                                            \
        } mb;                                                                                      \
        mb.u = ((ub + 0x4afb0du) & 0x7fffffu) + 0x3f3504f3u;                                       \
        float f = mb.f - 1.0f, z = f * f;                                                          \
        float p = 7.0376836292e-2f;                                                                \
        p = fmaf(p, f, -1.1514610310e-1f);                                                         \
        p = fmaf(p, f, 1.1676998740e-1f);                                                          \
        p = fmaf(p, f, -1.2420140846e-1f);                                                         \
        p = fmaf(p, f, 1.4249322787e-1f);                                                          \
        p = fmaf(p, f, -1.6668057665e-1f);                                                         \
        p = fmaf(p, f, 2.0000714765e-1f);                                                          \
        p = fmaf(p, f, -2.4999993993e-1f);                                                         \
        p = fmaf(p, f, 3.3333331174e-1f);                                                          \
        *f_out = f;                                                                                \
        *z_out = z;                                                                                \
        return (f * z) * p;                                                                        \
    }                                                                                              \
    /* k of ub's split, as a float: the exponent after the offset, minus the bias, put into the    \
     * significand of 1.5·2^23 and that subtracted (exact; an int-to-float conversion would do,   \
     * but gcc counts it as a possible trap and then does not if-convert the loop) */              \
    static inline float ot_logf_k_(uint32_t ub, int32_t bias) {                                    \
        union {                                                                                    \
            float f;                                                                               \
            uint32_t u;                                                                            \
        } kb;                                                                                      \
        kb.u = 0x4b400000u + (((ub + 0x4afb0du) >> 23) - (uint32_t)bias);                          \
        return kb.f - 0x1.8p23f;                                                                   \
    }                                                                                              \
    static inline float ot_logf_sum_(float y, float f, float z, float k) {                         \
        y = fmaf(k, -2.12194440e-4f, y);                                                           \
        y = fmaf(-0.5f, z, y);                                                                     \
        return fmaf(k, 0.693359375f, f + y);                                                       \
    }                                                                                              \
    static inline float ot_logf(float x) {                                                         \
        union {                                                                                    \
            float f;                                                                               \
            uint32_t u;                                                                            \
        } xb = {x}, sb, rb;                                                                        \
        uint32_t ux = xb.u;                                                                        \
        /* a subnormal's significand M as the normal float M·2^-23 (exact), so x = sb·2^-126 */  \
        sb.u = 0x3f800000u | (ux & 0x7fffffu);                                                     \
        sb.f -= 1.0f;                                                                              \
        uint32_t ub = ux < 0x800000u ? sb.u : ux;                                                  \
        int32_t bias = ux < 0x800000u ? 127 + 126 : 127;                                           \
        float f, z, y = ot_logf_core_(ub, &f, &z);                                                 \
        rb.f = ot_logf_sum_(y, f, z, ot_logf_k_(ub, bias));                                        \
        rb.u = ux == 0x7f800000u ? ux : rb.u;                /* +inf */                            \
        rb.u = (ux & 0x7fffffffu) == 0 ? 0xff800000u : rb.u; /* ±0: -inf */                       \
        rb.u = ux > 0x80000000u ? 0xffc00000u : rb.u;        /* below 0: the default NaN */        \
        rb.u = (ux & 0x7fffffffu) > 0x7f800000u ? ux | 0x400000u : rb.u;                           \
        return rb.f;                                                                               \
    }                                                                                              \
    /* log1p(x) = log(u) + (x - (u - 1)) / u with u = 1 + x rounded (the quotient corrects         \
     * u's rounding error to first order) */                                                       \
    static inline float ot_log1pf(float x) {                                                       \
        union {                                                                                    \
            float f;                                                                               \
            uint32_t u;                                                                            \
        } xb = {x}, ub, rb;                                                                        \
        float u = 1.0f + x;                                                                        \
        ub.f = u;                                                                                  \
        float c = (x - (u - 1.0f)) / u;                                                            \
        float f, z, y = ot_logf_core_(ub.u, &f, &z);                                               \
        rb.f = ot_logf_sum_(y + c, f, z, ot_logf_k_(ub.u, 127));                                   \
        rb.u = xb.u == 0x7f800000u ? xb.u : rb.u;                /* +inf */                        \
        rb.u = x == -1.0f ? 0xff800000u : rb.u;                  /* -1: -inf */                    \
        rb.u = x < -1.0f ? 0xffc00000u : rb.u;                   /* below -1: the default NaN */   \
        rb.u = (xb.u & 0x7fffffffu) < 0x33800000u ? xb.u : rb.u; /* |x| < 2^-24: x itself */       \
        rb.u = (xb.u & 0x7fffffffu) > 0x7f800000u ? xb.u | 0x400000u : rb.u;                       \
        return rb.f;                                                                               \
    }

/* e^x - 1 for f32 (ot_expm1f), branch-free. x is clamped to [-25, 89] by integer minimums on the
 * bits as in ot_expf (below -25 the result rounds to -1, above 88.73 it is inf; a NaN's result is
 * decided from x), k = round(x / ln 2), r = x - k·ln 2 in two fmaf steps (|r| <= 0.347; r = x
 * exactly when k = 0), e^r - 1 = r + r²·P(r), P of degree 5 (a weighted least-squares fit
 * iterated towards minimax, within 2.4e-10 of (e^r - 1 - r)/r² relative to e^r - 1), then
 * e^x - 1 = 2^k·(e^r - 1) + (2^k - 1) with one fmaf, 2^k - 1 being exact for k in [-24, 24];
 * below, (2^k·(e^r - 1) + 2^k) - 1 (the fmaf's rounding is far below 1's ulp); above, where
 * 2^k - 1 is not a float, 2^k·((e^r - 1) - 2^-k) + 2^k (2^-k taken as 2^-50 from k = 50 on, where
 * it no longer matters; the inner subtraction's rounding costs under a quarter of an ulp).
 * k = 128 takes 2^127 and doubles the result (exact, or the overflow to inf that rounding would
 * give).
 * |x| < 2^-25 gives x itself (e^x - 1 rounds to x there; this keeps ±0 and a subnormal x, which
 * the caller flushes where its rules say so); a NaN comes back quieted. Only for such tiny x,
 * whose result is x, can a step produce a subnormal (r²), so the result does not depend on the
 * CPU's FTZ/DAZ modes, and it is never subnormal for a zero or normal x. Accuracy over every f32
 * input: docs/exec.md (bench_vmath ulp --fn expm1). */
#define OT_EXPM1F_DEF                                                                              \
    static inline float ot_expm1f(float x) {                                                       \
        union {                                                                                    \
            float f;                                                                               \
            uint32_t u;                                                                            \
        } xb = {x}, cb, tb, sb = {0x1.8p23f}, rb;                                                  \
        uint32_t ux = xb.u < 0xc1c80000u ? xb.u : 0xc1c80000u; /* below -25 (-NaN too): -25 */     \
        int32_t sx = (int32_t)ux;                              /* above 89 (+NaN too): 89 */       \
        cb.u = (uint32_t)(sx < 0x42b20000 ? sx : 0x42b20000);                                      \
        float t = fmaf(cb.f, 0x1.715476p0f, 0x1.8p23f);                                            \
        float k = t - 0x1.8p23f;                                                                   \
        float r = fmaf(k, -0x1.62e43p-1f, cb.f);                                                   \
        r = fmaf(k, 0x1.05c61p-29f, r);                                                            \
        float p = 0x1.a032bep-13f;                                                                 \
        p = fmaf(p, r, 0x1.6d71f4p-10f);                                                           \
        p = fmaf(p, r, 0x1.11118ap-7f);                                                            \
        p = fmaf(p, r, 0x1.5554b2p-5f);                                                            \
        p = fmaf(p, r, 0x1.555554p-3f);                                                            \
        p = fmaf(p, r, 0x1p-1f);                                                                   \
        float em = fmaf(r * r, p, r);                                                              \
        tb.f = t;                                                                                  \
        int32_t ki = (int32_t)(tb.u - sb.u);                                                       \
        tb.u = (uint32_t)((ki < 127 ? ki : 127) + 127) << 23;                                      \
        float mid = fmaf(tb.f, em, tb.f - 1.0f);                                                   \
        float low = fmaf(tb.f, em, tb.f) - 1.0f;                                                   \
        cb.u = (uint32_t)(127 - (ki < 50 ? ki : 50)) << 23; /* 2^-k, for k in [25, 50] */          \
        float high = fmaf(tb.f, em - cb.f, tb.f);                                                  \
        rb.f = ki < -24 ? low : ki <= 24 ? mid : ki > 127 ? high * 2.0f : high;                    \
        rb.u = (xb.u & 0x7fffffffu) < 0x33000000u ? xb.u : rb.u; /* |x| < 2^-25: x itself */       \
        rb.u = (xb.u & 0x7fffffffu) > 0x7f800000u ? xb.u | 0x400000u : rb.u;                       \
        return rb.f;                                                                               \
    }

/* e^x for f64 (ot_expd), branch-free like ot_expf, evaluated in double with fma (one rounding
 * each, so the C library's fma and the FMA instruction give the same bits). x is clamped to
 * [-746, 710] by two integer minimums on the bits (below, the result is 0; above, inf; a NaN
 * becomes one of the two, and the result is the NaN quieted, decided from x), k = round(x / ln 2)
 * by adding 1.5·2^52, r = x - k·ln 2 with ln 2 in two parts: rh = x - k·L1 (L1 = ln 2 rounded: k
 * has at most 11 bits, so rh is exact), r = rh - k·L2. e^r = 1 + r + r²·Q(r), Q of degree 9 (a
 * Chebyshev fit of (e^r - 1 - r)/r² on |r| <= ln 2 / 2, within 1.1e-16), summed as
 * (1 + rh) + (the rounding error of 1 + rh, exact by Fast2Sum) + (r²·Q - k·L2), so the only
 * roundings that reach the result are the last sum's and a few below 2^-55. 2^k is applied as
 * two exact powers of two, 2^(k >> 1) and 2^(k - (k >> 1)), built in the exponent field (both in
 * [-538, 513]): the second product rounds once, also to a subnormal, 0 or inf. Subnormal results
 * and the multiplications that make them need the CPU's FTZ/DAZ modes off (f64 math never runs
 * under them: the caller flushes in software). Accuracy (bench_vmath ulp --fn exp --dtype f64):
 * docs/vmath.md. */
#define OT_EXPD_DEF                                                                                \
    static inline double ot_expd(double x) {                                                       \
        union {                                                                                    \
            double f;                                                                              \
            uint64_t u;                                                                            \
        } xb = {x}, cb, tb, s1, s2, rb, sh = {0x1.8p52};                                           \
        uint64_t ux = xb.u < 0xc087500000000000ull ? xb.u : 0xc087500000000000ull; /* -746 */      \
        int64_t sx = (int64_t)ux; /* 710, +NaN too */                                              \
        cb.u = (uint64_t)(sx < 0x4086300000000000ll ? sx : 0x4086300000000000ll);                  \
        double t = fma(cb.f, 0x1.71547652b82fep0, 0x1.8p52);                                       \
        double k = t - 0x1.8p52;                                                                   \
        double rh = fma(k, -0x1.62e42fefa39efp-1, cb.f);                                           \
        double r = fma(k, -0x1.abc9e3b39803fp-56, rh);                                             \
        double q = 0x1.af389eea54156p-26;                                                          \
        q = fma(q, r, 0x1.28917c9f3a495p-22);                                                      \
        q = fma(q, r, 0x1.71de0db2eb873p-19);                                                      \
        q = fma(q, r, 0x1.a019b914881bap-16);                                                      \
        q = fma(q, r, 0x1.a01a01a7c2f2cp-13);                                                      \
        q = fma(q, r, 0x1.6c16c17889f3cp-10);                                                      \
        q = fma(q, r, 0x1.11111111109b5p-7);                                                       \
        q = fma(q, r, 0x1.5555555553d68p-5);                                                       \
        q = fma(q, r, 0x1.5555555555556p-3);                                                       \
        q = fma(q, r, 0x1.0000000000001p-1);                                                       \
        double c = fma(k, -0x1.abc9e3b39803fp-56, (r * r) * q);                                    \
        double u = 1.0 + rh;                                                                       \
        double p = u + (((1.0 - u) + rh) + c);                                                     \
        tb.f = t;                                                                                  \
        int64_t ki = (int64_t)(tb.u - sh.u), k1 = ki >> 1;                                         \
        s1.u = (uint64_t)(k1 + 1023) << 52;                                                        \
        s2.u = (uint64_t)(ki - k1 + 1023) << 52;                                                   \
        rb.f = p * s1.f * s2.f;                                                                    \
        uint64_t nan = 0u - (uint64_t)((xb.u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull);    \
        rb.u = (rb.u & ~nan) | ((xb.u | (1ull << 51)) & nan);                                      \
        return rb.f;                                                                               \
    }

/* log for f64 (ot_logd), branch-free like ot_logf, evaluated in double with fma. A subnormal x is
 * scaled by 2^54 first (a multiplication: f64 math never runs under the FTZ/DAZ modes) and 54
 * taken off k. x = m·2^k with m in [sqrt(1/2), sqrt(2)) by integer operations on the bits (the
 * offset trick of ot_logf), k converted by adding it to 1.5·2^52's bits. With f = m - 1 (exact),
 * s = f / (2 + f), z = s²: log(1 + f) = f - f²/2 + s·(f²/2 + z·P(z)), P of degree 6 (a Chebyshev
 * fit of (log((1 + s)/(1 - s)) - 2s)/s³ on z <= 0.0295, within 3.1e-16), so s's rounding only
 * reaches the small term; it is computed as k·L1 - ((g - (s·(g + z·2P) + k·2·L2))·0.5 - f) with
 * g = f² (the halving folded into the coefficients: the same roundings as with f²/2) and ln 2 in
 * two parts, L1 = 0x1.62e42feep-1 (k·L1 exact) and L2 the rest. Special values: ±0 -> -inf,
 * +inf -> +inf (x + x), x < 0 (-inf too) -> the default NaN 0xfff8000000000000, a NaN comes back
 * quieted (x + x): selected when x is not a positive finite number, the unsigned test
 * bits(x) - 1 >= 0x7fefffffffffffff. Accuracy (bench_vmath ulp --fn log --dtype f64):
 * docs/vmath.md. */
#define OT_LOGD_DEF                                                                                \
    static inline double ot_logd_sum_(double f, double k, double t) {                              \
        double s = f / (2.0 + f), z = s * s;                                                       \
        double p = 0x1.2b584c6b42d6p-2;                                                            \
        p = fma(p, z, 0x1.39fe604146b74p-2);                                                       \
        p = fma(p, z, 0x1.7462b4ac441afp-2);                                                       \
        p = fma(p, z, 0x1.c71c62e57c3c4p-2);                                                       \
        p = fma(p, z, 0x1.2492492df14bcp-1);                                                       \
        p = fma(p, z, 0x1.99999999952e2p-1);                                                       \
        p = fma(p, z, 0x1.5555555555558p+0);                                                       \
        double g = f * f;                                                                          \
        double w = g - fma(s, fma(z, p, g), fma(k, 0x1.a39ef35793c76p-32, t));                     \
        return fma(k, 0x1.62e42feep-1, -fma(w, 0.5, -f));                                          \
    }                                                                                              \
    static inline double ot_logd(double x) {                                                       \
        union {                                                                                    \
            double f;                                                                              \
            uint64_t u;                                                                            \
        } xb = {x}, cb, mb, kb, rb, sb, dn = {.u = 0xfff8000000000000ull},                         \
          ni = {.u = 0xfff0000000000000ull};                                                       \
        uint64_t sub = 0u - (uint64_t)(xb.u < 0x0010000000000000ull);                              \
        cb.u = (0x4350000000000000ull & sub) | (0x3ff0000000000000ull & ~sub); /* 2^54 or 1 */     \
        mb.f = x * cb.f;                                                                           \
        uint64_t ix = mb.u, tmp = ix - 0x3fe6a09e667f3bcdull;                                      \
        kb.u = ((0x4337ffffffffffcaull & sub) | (0x4338000000000000ull & ~sub)) +                  \
               (uint64_t)((int64_t)tmp >> 52);                                                     \
        double k = kb.f - 0x1.8p52;                                                                \
        mb.u = ix - (tmp & 0xfff0000000000000ull);                                                 \
        rb.f = ot_logd_sum_(mb.f - 1.0, k, 0.0);                                                   \
        sb.f = x + x; /* +inf; a NaN quieted */                                                    \
        uint64_t neg = 0u - (uint64_t)(x < 0), zero = 0u - (uint64_t)(x == 0);                     \
        uint64_t spec = 0u - (uint64_t)(xb.u - 1u >= 0x7fefffffffffffffull);                       \
        sb.u = (sb.u & ~neg & ~zero) | (dn.u & neg) | (ni.u & zero);                               \
        rb.u = (rb.u & ~spec) | (sb.u & spec);                                                     \
        return rb.f;                                                                               \
    }

/* log(1 + x) for f64 (ot_log1pd, needs OT_LOGD_DEF before it): u = 1 + x rounded and its error c
 * (TwoSum: 1 + x = u + c exactly); u = m·2^k as in ot_logd (u is 0 or at least 2^-53: never
 * subnormal), and log(1 + x) = log(m + c·2^-k) + k·ln 2 = ot_logd_sum_ of f = m - 1 with the
 * correction c·2^-k/m (2^-k built in the exponent field, k capped at 1022, where the correction
 * is far below an ulp). Special values: -1 -> -inf, x < -1 (-inf too) -> the default NaN,
 * +inf -> +inf (x + x), a NaN quieted (x + x), |x| < 2^-54 -> x itself (log1p rounds to x; this
 * keeps ±0 and a subnormal x). Accuracy (bench_vmath ulp --fn log1p --dtype f64): docs/vmath.md. */
#define OT_LOG1PD_DEF                                                                              \
    static inline double ot_log1pd(double x) {                                                     \
        union {                                                                                    \
            double f;                                                                              \
            uint64_t u;                                                                            \
        } xb = {x}, mb, kb, sc, rb, sb, dn = {.u = 0xfff8000000000000ull},                         \
          ni = {.u = 0xfff0000000000000ull};                                                       \
        double u = 1.0 + x, bb = u - x;                                                            \
        double c = (x - (u - bb)) + (1.0 - bb);                                                    \
        mb.f = u;                                                                                  \
        uint64_t ix = mb.u, tmp = ix - 0x3fe6a09e667f3bcdull;                                      \
        int64_t ki = (int64_t)tmp >> 52;                                                           \
        kb.u = 0x4338000000000000ull + (uint64_t)ki;                                               \
        sc.u = (uint64_t)(1023 - (ki < 1022 ? ki : 1022)) << 52; /* 2^-k */                        \
        mb.u = ix - (tmp & 0xfff0000000000000ull);                                                 \
        rb.f = ot_logd_sum_(mb.f - 1.0, kb.f - 0x1.8p52, (c * sc.f) / (0.5 * mb.f));               \
        sb.f = x + x; /* +inf; a NaN quieted */                                                    \
        uint64_t ax = xb.u & 0x7fffffffffffffffull;                                                \
        uint64_t neg = 0u - (uint64_t)(x < -1.0), m1 = 0u - (uint64_t)(x == -1.0);                 \
        uint64_t spec = neg | m1 | (0u - (uint64_t)(ax >= 0x7ff0000000000000ull));                 \
        uint64_t tiny = 0u - (uint64_t)(ax < 0x3c90000000000000ull);                               \
        sb.u = (sb.u & ~neg & ~m1) | (dn.u & neg) | (ni.u & m1);                                   \
        rb.u = (rb.u & ~spec & ~tiny) | (sb.u & spec) | (xb.u & tiny);                             \
        return rb.f;                                                                               \
    }

/* e^x - 1 for f64 (ot_expm1d), branch-free like ot_expm1f, evaluated in double with fma. x is
 * clamped to [-40, 710] by integer minimums on the bits (below -37.5 the result rounds to -1,
 * above 709.79 it is inf; a NaN's result is decided from x), k = round(x / ln 2) and
 * rh = x - k·L1 exactly as in ot_expd, d = -k·L2 (r = rh + d). e^rh - 1 = rh + c0 with
 * c0 = rh²/2 + rh³·Q(rh), rh² exact as r2h + r2l, Q of degree 9 (a Chebyshev fit of
 * (e^r - 1 - r - r²/2)/r³ on |r| <= ln 2 / 2, within 1.9e-17 after rounding the coefficients);
 * then e^r - 1 = eh + el with eh = rh + c0 and el its rounding error plus d·(1 + eh) (Fast2Sum:
 * |rh| > |c0|). e^x - 1 = 2^k·(eh + el) + (2^k - 1): u = 2^k - 1 (exact for k < 54; from 54 on
 * u = 2^k and the -1 joins the low part) and v = 2^k·eh (exact) are summed by Fast2Sum (|u| >=
 * |v|), the error and 2^k·el added, and the result rounded once more for the sum, so it is within
 * about 0.7 ulp. k is capped at 1023 and the result doubled for k = 1024 (exact, or the overflow
 * to inf). |x| < 2^-54 gives x itself (e^x - 1 rounds to x; this keeps ±0 and a subnormal x); a
 * NaN comes back quieted. Accuracy (bench_vmath ulp --fn expm1 --dtype f64): docs/vmath.md. */
#define OT_EXPM1D_DEF                                                                              \
    static inline double ot_expm1d_core_(double x, double *lo, double *sc) {                       \
        union {                                                                                    \
            double f;                                                                              \
            uint64_t u;                                                                            \
        } xb = {x}, cb, tb, tk, sk, sh = {0x1.8p52};                                               \
        uint64_t ux = xb.u < 0xc044000000000000ull ? xb.u : 0xc044000000000000ull; /* -40 */       \
        int64_t sx = (int64_t)ux; /* 710, +NaN too */                                              \
        cb.u = (uint64_t)(sx < 0x4086300000000000ll ? sx : 0x4086300000000000ll);                  \
        double t = fma(cb.f, 0x1.71547652b82fep0, 0x1.8p52);                                       \
        double k = t - 0x1.8p52;                                                                   \
        double rh = fma(k, -0x1.62e42fefa39efp-1, cb.f);                                           \
        double q = 0x1.1f66d957d0ef0p-29;                                                          \
        q = fma(q, rh, 0x1.af389eea54156p-26);                                                     \
        q = fma(q, rh, 0x1.27e4e1f71bcbbp-22);                                                     \
        q = fma(q, rh, 0x1.71de0db2eb873p-19);                                                     \
        q = fma(q, rh, 0x1.a01a01a47a5abp-16);                                                     \
        q = fma(q, rh, 0x1.a01a01a7c2f2cp-13);                                                     \
        q = fma(q, rh, 0x1.6c16c16c167e2p-10);                                                     \
        q = fma(q, rh, 0x1.11111111109b5p-7);                                                      \
        q = fma(q, rh, 0x1.5555555555555p-5);                                                      \
        q = fma(q, rh, 0x1.5555555555556p-3);                                                      \
        double r2h = rh * rh, r2l = fma(rh, rh, -r2h);                                             \
        double c0 = fma(0.5, r2h, fma(r2h * rh, q, 0.5 * r2l));                                    \
        double eh = rh + c0, d = k * -0x1.abc9e3b39803fp-56;                                       \
        double el = ((rh - eh) + c0) + fma(d, eh, d);                                              \
        tb.f = t;                                                                                  \
        int64_t ki = (int64_t)(tb.u - sh.u), kc = ki < 1023 ? ki : 1023;                           \
        tk.u = (uint64_t)(kc + 1023) << 52;                                                        \
        sk.u = (uint64_t)(ki - kc + 1023) << 52; /* 1, or 2 for k = 1024 */                        \
        double one = ki < 54 ? 1.0 : 0.0;                                                          \
        double u = tk.f - one, v = tk.f * eh;                                                      \
        double a = u + v, e = v - (a - u);                                                         \
        *lo = fma(tk.f, el, e) - (1.0 - one);                                                      \
        *sc = sk.f;                                                                                \
        return a;                                                                                  \
    }                                                                                              \
    static inline double ot_expm1d(double x) {                                                     \
        union {                                                                                    \
            double f;                                                                              \
            uint64_t u;                                                                            \
        } xb = {x}, rb;                                                                            \
        double lo, sc, hi = ot_expm1d_core_(x, &lo, &sc);                                          \
        rb.f = (hi + lo) * sc;                                                                     \
        uint64_t ax = xb.u & 0x7fffffffffffffffull;                                                \
        uint64_t tiny = 0u - (uint64_t)(ax < 0x3c90000000000000ull); /* |x| < 2^-54: x itself */   \
        uint64_t nan = 0u - (uint64_t)(ax > 0x7ff0000000000000ull);                                \
        rb.u = (rb.u & ~tiny & ~nan) | (xb.u & tiny) | ((xb.u | (1ull << 51)) & nan);              \
        return rb.f;                                                                               \
    }

/* tanh for f64 (ot_tanhd, needs OT_EXPM1D_DEF before it), branch-free: with a = |x| capped at 20
 * by an integer minimum on the bits (tanh rounds to 1 from 19.1; a NaN's result is decided from
 * x), E = e^(2a) - 1 = hi + lo from ot_expm1d_core_ (before its last rounding), D = E + 2 = dh + dl
 * by TwoSum, q = hi/dh and tanh(a) = E/D = q + (hi - q·dh + lo - q·dl)/dh (fma for the exact
 * remainder), then x's sign; a NaN comes back quieted. ±0 and subnormal x give themselves (E = 2a
 * exactly there). Two divisions; accuracy (bench_vmath ulp --fn tanh --dtype f64): docs/vmath.md.
 */
#define OT_TANHD_DEF                                                                               \
    static inline double ot_tanhd(double x) {                                                      \
        union {                                                                                    \
            double f;                                                                              \
            uint64_t u;                                                                            \
        } xb = {x}, ab, rb;                                                                        \
        ab.u = xb.u & 0x7fffffffffffffffull;                                                       \
        ab.u = ab.u < 0x4034000000000000ull ? ab.u : 0x4034000000000000ull; /* 20, NaN too */      \
        double lo, sc, hi = ot_expm1d_core_(ab.f + ab.f, &lo, &sc);                                \
        double dh = hi + 2.0, bb = dh - hi;                                                        \
        double dl = ((hi - (dh - bb)) + (2.0 - bb)) + lo;                                          \
        double q = hi / dh;                                                                        \
        rb.f = q + (fma(-q, dh, hi) + fma(-q, dl, lo)) / dh;                                       \
        rb.u |= xb.u & 0x8000000000000000ull;                                                      \
        uint64_t nan = 0u - (uint64_t)((xb.u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull);    \
        rb.u = (rb.u & ~nan) | ((xb.u | (1ull << 51)) & nan);                                      \
        (void)sc;                                                                                  \
        return rb.f;                                                                               \
    }

/* cbrt for f64 (ot_cbrtd), branch-free, evaluated in double with fma. A subnormal |x| is scaled by
 * 2^54 first (a multiplication: f64 math never runs under the FTZ/DAZ modes) and 54 taken off its
 * exponent e; |x| = m·2^e with m in [1, 2), e = 3q + r (r in {0, 1, 2}; q = round((e - 1)/3) by
 * adding 1.5·2^52), t = m·2^r in [1, 8) exactly. y0 = P(m - 1.5)·2^(r/3), P of degree 9 (a
 * Chebyshev interpolant of cbrt on [1, 2], within 2^-30 relative), then one Newton step with the
 * residual formed exactly: y0² = h + l (l = fma(y0, y0, -h)), d = y0³ - t = fma(h, y0, -t) + l·y0
 * and y = y0 - d/(3h). Newton squares the relative error (to about 2^-60), and the correction is
 * about 2^-30 of y, so the one rounding of the last subtraction dominates: within 0.505 ulp
 * (bench_vmath ulp --fn cbrt --dtype f64). q goes into the exponent field of y (in [1, 2]), and
 * x's sign onto the result. ±0, ±inf and NaN give x (a NaN quieted); no result is subnormal
 * (cbrt(2^-1074) = 2^-358) or overflows. One division. */
#define OT_CBRTD_DEF                                                                               \
    static inline double ot_cbrtd(double x) {                                                      \
        union {                                                                                    \
            double f;                                                                              \
            uint64_t u;                                                                            \
        } xb = {x}, ab, sb, eb, qb, mb, rb;                                                        \
        uint64_t sign = xb.u & 0x8000000000000000ull, ax = xb.u ^ sign;                            \
        ab.u = ax;                                                                                 \
        sb.f = ab.f * 0x1p54;                                                                      \
        uint64_t sub = 0u - (uint64_t)(ax < 0x0010000000000000ull);                                \
        uint64_t as = (sb.u & sub) | (ax & ~sub);                                                  \
        eb.u = 0x4338000000000000ull + (as >> 52) - 1023u - (sub & 54u); /* 1.5·2^52 + e */       \
        double e = eb.f - 0x1.8p52;                                                                \
        qb.f = fma(e - 1.0, 0x1.5555555555555p-2, 0x1.8p52);                                       \
        double q = qb.f - 0x1.8p52, r = fma(q, -3.0, e);                                           \
        mb.u = (as & 0x000fffffffffffffull) | 0x3ff0000000000000ull;                               \
        double m = mb.f;                                                                           \
        /* 2^r and 2^(r/3) as polynomials in r (no selection: GCC 12 if-converts a double          \
         * select for AVX-512 but not for AVX2); 2^r is exact, 2^(r/3) within 2^-52 */             \
        double t = m * fma(r * (r - 1.0), 0.5, 1.0 + r);                                           \
        double c = fma(r, fma(r - 1.0, 0x1.14b8b22289260p-5, 0x1.0a28be635ca2cp-2), 1.0);          \
        double u = m - 1.5, p = 0x1.066f318cccccdp-11;                                             \
        p = fma(p, u, -0x1.cb07ae999999ap-11);                                                     \
        p = fma(p, u, 0x1.47c64f6133336p-10);                                                      \
        p = fma(p, u, -0x1.3020e35526669p-9);                                                      \
        p = fma(p, u, 0x1.2a45be51e4f33p-8);                                                       \
        p = fma(p, u, -0x1.3107249bf9999p-7);                                                      \
        p = fma(p, u, 0x1.57069fc93b703p-6);                                                       \
        p = fma(p, u, -0x1.cf15e126ffcc0p-5);                                                      \
        p = fma(p, u, 0x1.047c701da370ep-2);                                                       \
        p = fma(p, u, 0x1.250bfe18a641cp+0);                                                       \
        double y0 = p * c;                                                                         \
        double h = y0 * y0, l = fma(y0, y0, -h);                                                   \
        double d = fma(h, y0, -t) + l * y0;                                                        \
        rb.f = y0 - d / (3.0 * h);                                                                 \
        rb.u += (qb.u - 0x4338000000000000ull) << 52;                                              \
        rb.u |= sign;                                                                              \
        uint64_t keep = 0u - (uint64_t)((ax == 0) | (ax >= 0x7ff0000000000000ull));                \
        uint64_t nan = 0u - (uint64_t)(ax > 0x7ff0000000000000ull);                                \
        rb.u = (rb.u & ~keep) | (xb.u & keep) | ((1ull << 51) & nan);                              \
        return rb.f;                                                                               \
    }

/* erf for f64 (ot_erfd, needs OT_EXPD_DEF before it), branch-free: every piece is computed and
 * one selected by masks on the bits. With a = |x| capped at 6 by an integer minimum on the bits
 * (erf rounds to 1 from 5.93; a NaN's result is decided from x), z = a²:
 *   a < 0.84375:        a + a·P(z), P of degree 11 (erf(a)/a - 1);
 *   0.84375 <= a < 1.25: erf(1) + M(a - 1), M of degree 14 (erf(1 + s) - erf(1), erf(1) the
 *                        double nearest it), so the large part is a constant;
 *   1.25 <= a:          1 - e^-a²·Q(a), e^-a² = ot_expd(-z)·(1 - l) with a² = z + l exactly,
 *                        Q ≈ erfc(a)·e^(a²) of degree 18 on [1.25, 3] and 14 on [3, 6] (both
 *                        evaluated), the last step one fma.
 * The coefficients are Chebyshev interpolants (computed in long double against glibc's erfl and
 * erfcl). Then x's sign; ±0 give ±0, a subnormal x its erf (a + a·P rounded once), ±inf ±1, a
 * NaN comes back quieted. Always inlined: GCC's size limits otherwise keep it a call, and the
 * loop around it would not vectorize. Accuracy (bench_vmath ulp --fn erf --dtype f64):
 * docs/vmath.md. */
#define OT_ERFD_DEF                                                                                \
    static inline __attribute__((always_inline)) double ot_erfd(double x) {                        \
        union {                                                                                    \
            double f;                                                                              \
            uint64_t u;                                                                            \
        } xb = {x}, ab, rb, sb, mb, lb, qa, qb;                                                    \
        uint64_t sign = xb.u & 0x8000000000000000ull, ax = xb.u ^ sign;                            \
        ab.u = ax < 0x4018000000000000ull ? ax : 0x4018000000000000ull; /* at most 6 (NaN too) */  \
        double a = ab.f, z = a * a;                                                                \
        double ps = -0x1.e819249e508dap-31;                                                        \
        ps = fma(ps, z, 0x1.e811a66fb2e08p-27);                                                    \
        ps = fma(ps, z, -0x1.5e19eac9ce527p-23);                                                   \
        ps = fma(ps, z, 0x1.b9c9b66e8aa9p-20);                                                     \
        ps = fma(ps, z, -0x1.f4d0bc2c7d397p-17);                                                   \
        ps = fma(ps, z, 0x1.f9a3175e4d258p-14);                                                    \
        ps = fma(ps, z, -0x1.c02db39d08b23p-11);                                                   \
        ps = fma(ps, z, 0x1.565bcd0cd7dep-8);                                                      \
        ps = fma(ps, z, -0x1.b82ce312811f5p-6);                                                    \
        ps = fma(ps, z, 0x1.ce2f21a042ab1p-4);                                                     \
        ps = fma(ps, z, -0x1.812746b0379e6p-2);                                                    \
        ps = fma(ps, z, 0x1.06eba8214db69p-3);                                                     \
        sb.f = fma(a, ps, a);                                                                      \
        double s = a - 1.0;                                                                        \
        double pm = 0x1.4beed008a880fp-16;                                                         \
        pm = fma(pm, s, 0x1.3cb24705701a9p-16);                                                    \
        pm = fma(pm, s, -0x1.a2d4650ca066ep-13);                                                   \
        pm = fma(pm, s, 0x1.6684c4cb8fc9p-14);                                                     \
        pm = fma(pm, s, 0x1.41760343a0d4dp-10);                                                    \
        pm = fma(pm, s, -0x1.ee30b5e589758p-10);                                                   \
        pm = fma(pm, s, -0x1.39114608beb15p-8);                                                    \
        pm = fma(pm, s, 0x1.f096fd5af34c7p-7);                                                     \
        pm = fma(pm, s, 0x1.2e45a564b973p-8);                                                      \
        pm = fma(pm, s, -0x1.1b614b0f4d061p-4);                                                    \
        pm = fma(pm, s, 0x1.1b614b0f527eap-4);                                                     \
        pm = fma(pm, s, 0x1.1b614b0f527fbp-3);                                                     \
        pm = fma(pm, s, -0x1.a911f096fbc26p-2);                                                    \
        pm = fma(pm, s, 0x1.a911f096fbc26p-2);                                                     \
        pm = fma(pm, s, -0x1.c9b7addaf50ddp-56);                                                   \
        mb.f = 0x1.af767a741088bp-1 + pm;                                                          \
        double ua = a - 2.125, ub = a - 4.5;                                                       \
        double pa = 0x1.fdfefd7d27c6ep-35;                                                         \
        pa = fma(pa, ua, -0x1.13ea1cce39bf4p-32);                                                  \
        pa = fma(pa, ua, 0x1.d645a7c88ff45p-31);                                                   \
        pa = fma(pa, ua, -0x1.e5e162a116feep-29);                                                  \
        pa = fma(pa, ua, 0x1.f729ee1a96948p-27);                                                   \
        pa = fma(pa, ua, -0x1.f3e20d90285e3p-25);                                                  \
        pa = fma(pa, ua, 0x1.e535ff6b985f7p-23);                                                   \
        pa = fma(pa, ua, -0x1.cca092e0977adp-21);                                                  \
        pa = fma(pa, ua, 0x1.aaad287e5d02fp-19);                                                   \
        pa = fma(pa, ua, -0x1.8104a89acd919p-17);                                                  \
        pa = fma(pa, ua, 0x1.51e08639d8845p-15);                                                   \
        pa = fma(pa, ua, -0x1.1fc890f17604cp-13);                                                  \
        pa = fma(pa, ua, 0x1.dab55d6fcc466p-12);                                                   \
        pa = fma(pa, ua, -0x1.7a1819266965ap-10);                                                  \
        pa = fma(pa, ua, 0x1.21decee0eddcbp-8);                                                    \
        pa = fma(pa, ua, -0x1.aa2443aac6597p-7);                                                   \
        pa = fma(pa, ua, 0x1.2adaf7aaf55dep-5);                                                    \
        pa = fma(pa, ua, -0x1.8d6f73d5aa127p-4);                                                   \
        pa = fma(pa, ua, 0x1.f0fd28fdc20abp-3);                                                    \
        double pb = 0x1.b95e55355752ep-37;                                                         \
        pb = fma(pb, ub, -0x1.40e60791438b1p-34);                                                  \
        pb = fma(pb, ub, 0x1.58aaeb87b8336p-32);                                                   \
        pb = fma(pb, ub, -0x1.e5014f63204f3p-30);                                                  \
        pb = fma(pb, ub, 0x1.5cfb111b97cd4p-27);                                                   \
        pb = fma(pb, ub, -0x1.dee8f08698c28p-25);                                                  \
        pb = fma(pb, ub, 0x1.43509a4026eccp-22);                                                   \
        pb = fma(pb, ub, -0x1.aef266fbb0efep-20);                                                  \
        pb = fma(pb, ub, 0x1.1ad6b3d9849d1p-17);                                                   \
        pb = fma(pb, ub, -0x1.6d54ca00f5c0ap-15);                                                  \
        pb = fma(pb, ub, 0x1.d00785bb2248bp-13);                                                   \
        pb = fma(pb, ub, -0x1.218ed9073074p-10);                                                   \
        pb = fma(pb, ub, 0x1.62c12cb612493p-8);                                                    \
        pb = fma(pb, ub, -0x1.aa3eb6a96f0f7p-6);                                                   \
        pb = fma(pb, ub, 0x1.f5b2a049cf4c6p-4);                                                    \
        qa.f = pa;                                                                                 \
        qb.f = pb;                                                                                 \
        uint64_t m3 = 0u - (uint64_t)(ab.u < 0x4008000000000000ull); /* a < 3: piece A */          \
        qa.u = (qa.u & m3) | (qb.u & ~m3);                                                         \
        double l = fma(a, a, -z); /* a² = z + l exactly; e^-a² = e^-z·(1 - l) */                \
        double e = ot_expd(-z);                                                                    \
        e = fma(-l, e, e);                                                                         \
        lb.f = fma(-e, qa.f, 1.0);                                                                 \
        uint64_t m1 = 0u - (uint64_t)(ab.u < 0x3feb000000000000ull);         /* 0.84375 */         \
        uint64_t m2 = ~m1 & (0u - (uint64_t)(ab.u < 0x3ff4000000000000ull)); /* 1.25 */            \
        rb.u = (sb.u & m1) | (mb.u & m2) | (lb.u & ~m1 & ~m2);                                     \
        rb.u |= sign;                                                                              \
        uint64_t nan = 0u - (uint64_t)(ax > 0x7ff0000000000000ull);                                \
        rb.u = (rb.u & ~nan) | ((xb.u | (1ull << 51)) & nan);                                      \
        return rb.f;                                                                               \
    }

/* x^y for f32 (ot_powf), branch-free, evaluated in float with fmaf (16 lanes per AVX-512 vector;
 * the double evaluation it replaced ran two 8-lane halves), with every special value of pow, so
 * the caller applies no fix-up (ot_vm_powf1 in src/exec/vmath.h calls it as it is).
 *
 * log2|x| as a float pair th + tl (relative error about 2^-37): |x| = m·2^k with m in
 * [sqrt(1/2), sqrt(2)) (a subnormal x scaled by 2^23 first, exactly), u = m - 1 (exact),
 * s = u/(2 + u) as sh + sl (sh the correctly rounded quotient; the remainder u - sh·(2 + u) formed
 * exactly with fmaf, the rounding error of 2 + u included, and divided by 2 + u as a product with
 * (1 - sh)/2), log2 m = s·M(z), z = s² = zh + zl, M = 2/ln 2 + z·(C + z·R(z)) with 2/ln 2 and C in
 * two parts and R of degree 2 (a least-squares fit, M within 2^-37 relative), the leading products
 * split exactly with fmaf, then k added (Fast2Sum). Its terms need a float pair because the first
 * one after 2s, s³·2/(3 ln 2), is up to 2^-6.6 of the sum: each float rounding there costs up to
 * 2^-30.6 relative, almost 1 ulp of the result when |y·log2|x|| is near 128 (without s's
 * remainder in z's low part: 2.9 ulp, measured).
 * w = y·log2|x| as wh + wl (the product split exactly with fmaf); y capped at ±2^40 first by
 * integer minimums on the bits (nothing changes for a finite nonzero result, and (-1)^±inf =
 * 1 comes out of 0·y). wh is clamped to [-160, 160] and wl to [-1, 1] the same way (a NaN too),
 * n = round(wh), r = (wh - n) + wl (|r| <= 0.5 + 2^-16 for every result that is not 0 or inf; its
 * one rounding costs at most 0.17 ulp), 2^r = 1 + r·Q(r), Q of degree 5 (a least-squares fit, 2^r
 * within 2^-28 relative), and 2^n applied as two exact powers of two, (2^r·2^(n - n/2))·2^(n/2):
 * the second product rounds once, which gives the overflow to inf, subnormal results and 0.
 * Accuracy (docs/vmath.md): at most 0.95 ulp on the inputs measured (16.8M sampled pairs, every
 * x for several y).
 *
 * Special values as C99's powf and XLA's: pow(x, ±0) = pow(1, y) = 1 for every x and y, NaN
 * included; otherwise a NaN operand gives that NaN quieted (x's of two); x = ±0 gives +0 for
 * y > 0 and +inf for y < 0, x = ±inf the reverse (k = -inf for ±0 and +inf for ±inf make w
 * infinite, then clamped); a negative x (-0 and -inf included) gives the sign of (-1)^y for an
 * integer y (every |y| >= 2^24 is an even integer, and so are ±inf for this rule) and the default
 * NaN 0xffc00000 for a finite negative x and a non-integer y; (-1)^±inf = 1. y's integrality and
 * parity come from |y| capped at 2^24, truncated to an integer and converted back. No step reads or
 * produces a subnormal float except a subnormal x (scaled first) and the last product, and the
 * function never runs under the hardware FTZ/DAZ modes (docs/exec.md, Denormals): the caller
 * flushes. Every selection is a mask or a select on integer conditions and no a·b + c is written
 * outside fmaf, so the loop vectorizes for AVX2 as for AVX-512 with the same bits; always inlined,
 * as ot_erfd: GCC's size limits would otherwise keep it a call and the loop around it scalar. */
#define OT_POWF_DEF                                                                                \
    static inline __attribute__((always_inline)) float ot_powf(float x, float y) {                 \
        union {                                                                                    \
            float f;                                                                               \
            uint32_t u;                                                                            \
        } xb = {x}, yb = {y}, mb, sb, kb, cb, rb;                                                  \
        uint32_t ax = xb.u & 0x7fffffffu, ay = yb.u & 0x7fffffffu;                                 \
        mb.u = ax;                                                                                 \
        sb.f = mb.f * 0x1p23f;                                                                     \
        uint32_t sub = 0u - (uint32_t)(ax < 0x00800000u);                                          \
        uint32_t ix = (sb.u & sub) | (ax & ~sub), tmp = ix - 0x3f3504f3u;                          \
        int32_t ki = ((int32_t)tmp >> 23) - (int32_t)(sub & 23u);                                  \
        mb.u = ix - (tmp & 0xff800000u);                                                           \
        kb.f = (float)ki;                                                                          \
        uint32_t xz = 0u - (uint32_t)(ax == 0), xi = 0u - (uint32_t)(ax == 0x7f800000u);           \
        kb.u = (kb.u & ~xz & ~xi) | (0xff800000u & xz) | (0x7f800000u & xi);                       \
        float k = kb.f, u = mb.f - 1.0f;                                                           \
        float d = 2.0f + u, dl = u - (d - 2.0f);                                                   \
        float sh = u / d;                                                                          \
        float rho = fmaf(-sh, d, u);                                                               \
        rho = fmaf(-sh, dl, rho);                                                                  \
        float sl2 = fmaf(-sh, rho, rho); /* 2·sl */                                               \
        float zh = sh * sh;                                                                        \
        float zl = fmaf(sh, sh, -zh);                                                              \
        zl = fmaf(sh, sl2, zl);                                                                    \
        float r2 = fmaf(0x1.5c1778p-2f, zh, 0x1.a59af2p-2f);                                       \
        r2 = fmaf(r2, zh, 0x1.27775cp-1f);                                                         \
        float p = 0x1.ec709ep-1f * zh, pl = fmaf(0x1.ec709ep-1f, zh, -p);                          \
        float mh = 0x1.715476p+1f + p;                                                             \
        float ml = ((0x1.715476p+1f - mh) + p) + 0x1.4ae0cp-25f;                                   \
        ml = ml + pl;                                                                              \
        ml = fmaf(-0x1.53fa92p-26f, zh, ml);                                                       \
        ml = fmaf(0x1.ec709ep-1f, zl, ml);                                                         \
        ml = fmaf(zh * zh, r2, ml);                                                                \
        float lh = sh * mh;                                                                        \
        float ll = fmaf(sh, mh, -lh);                                                              \
        ll = fmaf(sh, ml, ll);                                                                     \
        ll = fmaf(0.5f * sl2, mh, ll);                                                             \
        float ln = lh + ll;                                                                        \
        ll = (lh - ln) + ll;                                                                       \
        float th = k + ln;                                                                         \
        float tl = ((k - th) + ln) + ll;                                                           \
        cb.u = yb.u < 0xd3800000u ? yb.u : 0xd3800000u; /* -2^40 */                                \
        int32_t sy = (int32_t)cb.u;                                                                \
        cb.u = (uint32_t)(sy < 0x53800000 ? sy : 0x53800000); /* 2^40 */                           \
        float yc = cb.f;                                                                           \
        float wh = yc * th;                                                                        \
        float wl = fmaf(yc, th, -wh);                                                              \
        wl = fmaf(yc, tl, wl);                                                                     \
        cb.f = wh;                                                                                 \
        cb.u = cb.u < 0xc3200000u ? cb.u : 0xc3200000u; /* -160 */                                 \
        int32_t sw = (int32_t)cb.u;                                                                \
        cb.u = (uint32_t)(sw < 0x43200000 ? sw : 0x43200000); /* 160 */                            \
        float wc = cb.f;                                                                           \
        cb.f = wl;                                                                                 \
        cb.u = cb.u < 0xbf800000u ? cb.u : 0xbf800000u; /* -1 */                                   \
        int32_t sl = (int32_t)cb.u;                                                                \
        cb.u = (uint32_t)(sl < 0x3f800000 ? sl : 0x3f800000); /* 1 */                              \
        float t = wc + 0x1.8p23f, n = t - 0x1.8p23f;                                               \
        float r = (wc - n) + cb.f;                                                                 \
        float q = 0x1.408260p-13f;                                                                 \
        q = fmaf(q, r, 0x1.5f0a6cp-10f);                                                           \
        q = fmaf(q, r, 0x1.3b2f44p-7f);                                                            \
        q = fmaf(q, r, 0x1.c6af78p-5f);                                                            \
        q = fmaf(q, r, 0x1.ebfbdap-3f);                                                            \
        q = fmaf(q, r, 0x1.62e430p-1f);                                                            \
        mb.f = fmaf(r, q, 1.0f);                                                                   \
        sb.f = t;                                                                                  \
        int32_t ni = (int32_t)(sb.u - 0x4b400000u), n1 = ni >> 1, n2 = ni - n1;                    \
        mb.u += (uint32_t)n1 << 23;                                                                \
        sb.u = (uint32_t)(n2 + 127) << 23;                                                         \
        rb.f = mb.f * sb.f;                                                                        \
        uint32_t yc24 = ay < 0x4b800000u ? ay : 0x4b800000u; /* |y|, at most 2^24 */               \
        cb.u = yc24;                                                                               \
        int32_t yi = (int32_t)cb.f;                                                                \
        cb.f = (float)yi;                                                                          \
        uint32_t yint = 0u - (uint32_t)(cb.u == yc24);                                             \
        rb.u |= xb.u & ((uint32_t)yi << 31) & yint; /* x's sign for an odd y */                    \
        rb.u = ((xb.u - 0x80000001u < 0x7f7fffffu) & ~yint) ? 0xffc00000u : rb.u;                  \
        rb.u = ay > 0x7f800000u ? yb.u | 0x400000u : rb.u;                                         \
        rb.u = ax > 0x7f800000u ? xb.u | 0x400000u : rb.u;                                         \
        rb.u = ((xb.u == 0x3f800000u) | (ay == 0)) ? 0x3f800000u : rb.u;                           \
        return rb.f;                                                                               \
    }

/* x^y for f64 (ot_powd), branch-free, the design of glibc's pow (log with a table of 1/c and
 * log c, exp with a table of 2^(j/N), Szabolcs Nagy's) with tables of 16 entries, so that a
 * vector of 8 doubles looks each one up with one permutation of two registers (ot_powd_v8 below).
 * Shared by the reference (ot_vm_pow1, src/exec/vmath.h) and generated code.
 *
 * log|x| as lh + ll (relative error about 2^-64): |x| = z·2^k with z in [0x1.65555p-1,
 * 0x1.65555p0) (a subnormal x scaled by 2^52 first, exactly), i = the 4 bits of z's position in
 * that range, c = 1/invc[i] the middle of z's sixteenth (exactly 1 for the one holding 1, so
 * near x = 1 nothing cancels), z/c - 1 = r + pl exactly (r = z·invc - 1, pl the product's
 * rounding error from fma), log|x| = k·ln 2 + log c + log1p(r) + pl/(1 + r), with ln 2 and log c
 * in two parts (the high parts multiples of 2^-42, so k·ln2hi + logc is exact), log1p(r) =
 * r - r²/2 + r³·Q(r), |r| < 0.0298, Q of degree 8 (weighted least squares iterated to minimax,
 * 2^-66 relative), the sums carried as double pairs (Fast2Sum), r³·Q too (it reaches 2^-15).
 * Both polynomials are evaluated by Estrin's scheme: the vector clone's speed is bound by the
 * length of its dependency chain more than by its operation count.
 * e^(eh + el) with eh + el = y·(lh + ll) (the product split exactly with fma): k =
 * round(eh·16/ln 2), s = eh - k·ln 2/16 + el (|s| < 0.0217), e^s = 1 + s + s²·P(s), P of degree 5
 * (2^-65 relative), times 2^(j/16) (a table value and its relative rounding error, j = k mod
 * 16), times 2^(k/16 - j/16) as two exact powers of two, the second product rounded once
 * (overflow to inf, subnormal results within one subnormal ulp, 0), |y| capped at 2^70, eh at
 * ±1000 and el at ±1 (nothing changes for a result that is neither 0 nor inf). Accuracy
 * (docs/vmath.md): 0.55 ulp where the result is normal on bench_vmath's sample, 0.87 on
 * pairs chosen near x = 1 with |y·ln x| near 700.
 *
 * Special values as C99's pow and XLA's, and as ot_powf: pow(x, ±0) = pow(1, y) = 1 for every x
 * and y, NaN included; a NaN operand gives that NaN quieted (x's of two); ±0 gives +0 for y > 0
 * and +inf for y < 0, ±inf the reverse; a negative x (-0 and -inf included) the sign of (-1)^y for
 * an integer y (every |y| >= 2^53 and ±inf are even) and the default NaN 0xfff8000000000000 for a
 * finite x < 0 and a non-integer y; pow(-1, ±inf) = 1. Zeros, infinities and NaNs of x go through
 * the arithmetic as 1 and are replaced at the end. No step reads or produces a subnormal double
 * except a subnormal x (scaled first) and the last product; the function never runs under the
 * hardware FTZ/DAZ modes (docs/exec.md, Denormals): the caller flushes. */
#define OT_POWD_DEF                                                                                   \
    static const double ot_powd_tab_[5][16] __attribute__((aligned(64))) = {                          \
        {0x1.66c617ec77f0cp+0, 0x1.57b8690f1c529p+0, 0x1.49e11753c5e5ap+0, 0x1.3d1c17e93d6b1p+0,      \
         0x1.314abf6b7673dp+0, 0x1.2652cace679a4p+0, 0x1.1c1d9bb364f1dp+0, 0x1.12979c18939f0p+0,      \
         0x1.09afc0735ecb4p+0, 0x1.0000000000000p+0, 0x1.e6a75324438c2p-1, 0x1.cb5d578a1e58bp-1,      \
         0x1.b2f93bce0a1edp-1, 0x1.9d0ac88e2a17ep-1, 0x1.8937521144e5ap-1, 0x1.7734c925ef877p-1},     \
        {-0x1.599d720457000p-2, -0x1.2db8fae0e4000p-2, -0x1.03a26b89bb000p-2,                         \
         -0x1.b66a91b2e8000p-3, -0x1.68a28053dc000p-3, -0x1.1db316e910000p-3,                         \
         -0x1.aad1c3e40c000p-4, -0x1.1f2b632280000p-4, -0x1.303f9f0110000p-5, 0x0.0p+0,               \
         0x1.9feca668e8000p-5, 0x1.bc55e64efc000p-4, 0x1.4de794184e000p-3, 0x1.b7dbfa98d2000p-3,      \
         0x1.0e4ceb8837000p-2, 0x1.3e4f2c78f0000p-2},                                                 \
        {-0x1.38d95d84bc997p-45, -0x1.01bd521c7e1ebp-48, -0x1.fd0327da0d27bp-45,                      \
         -0x1.2bb34adb8ad1bp-45, -0x1.c3757e9a73d68p-45, 0x1.d6045c8c712dbp-46,                       \
         0x1.d4536c13de489p-45, 0x1.7076e416c8201p-44, -0x1.5531ce99e34e5p-44, 0x0.0p+0,              \
         -0x1.80c6f2339e946p-44, -0x1.49d46b3db5e9dp-46, -0x1.1a4fb1ef4914bp-44,                      \
         0x1.235538e7a2998p-45, -0x1.811b4e62021b0p-48, 0x1.f20bbd124b395p-44},                       \
        {0x1.0000000000000p+0, 0x1.fb5586cf9890fp-1, 0x1.f72b83c7d517bp-1, 0x1.f387a6e756238p-1,      \
         0x1.f06fe0a31b715p-1, 0x1.edea64c123422p-1, 0x1.ebfdad5362a27p-1, 0x1.eab07dd485429p-1,      \
         0x1.ea09e667f3bcdp-1, 0x1.ea11473eb0187p-1, 0x1.eace5422aa0dbp-1, 0x1.ec49182a3f090p-1,      \
         0x1.ee89f995ad3adp-1, 0x1.f199bdd85529cp-1, 0x1.f5818dcfba487p-1, 0x1.fa4afa2a490dap-1},     \
        {0x0.0p+0, 0x1.79aa65d837b6dp-54, -0x1.01b15eaa59348p-55, 0x1.68efde3a8a894p-54,              \
         0x1.34d754db0abb6p-55, 0x1.59f48a72a4c6dp-55, 0x1.690cebb7aafb0p-56,                         \
         0x1.063e1e21c5409p-54, -0x1.3b3efbf5e2228p-54, -0x1.b32dcb94da51dp-56,                       \
         0x1.db72fc1f0eab4p-55, 0x1.1affc2b91ce27p-56, 0x1.c1a7792cb3387p-55,                         \
         0x1.36eae30af0cb3p-56, 0x1.4a385a63d07a7p-56, -0x1.ff7128fd391f0p-55}};                      \
    /* log|x| as lh + ll for the bits ix of a positive normal finite double, k0 subtracted from */    \
    /* its exponent */                                                                                \
    static inline __attribute__((always_inline)) double ot_powd_log_(uint64_t ix, int64_t k0,         \
                                                                     double *ll_out) {                \
        union {                                                                                       \
            double f;                                                                                 \
            uint64_t u;                                                                               \
        } zb;                                                                                         \
        uint64_t tmp = ix - 0x3fe6555500000000ull;                                                    \
        uint64_t i = (tmp >> 48) & 15u;                                                               \
        int64_t k = ((int64_t)tmp >> 52) - k0;                                                        \
        zb.u = ix - (tmp & (0xfffull << 52));                                                         \
        double z = zb.f, kd = (double)k;                                                              \
        double invc = ot_powd_tab_[0][i], logc = ot_powd_tab_[1][i], logct = ot_powd_tab_[2][i];      \
        double p = z * invc, pl = fma(z, invc, -p), r = p - 1.0; /* z/c - 1 = r + pl exactly */       \
        double t1 = fma(kd, 0x1.62e42fefa3800p-1, logc);         /* exact */                          \
        double t2 = t1 + r;                                                                           \
        double lo1 = fma(kd, 0x1.ef35793c76730p-45, logct);                                           \
        double lo2 = (t1 - t2) + r;                                                                   \
        double ar = -0.5 * r, ar2 = r * ar, ar3 = r * ar2;                                            \
        double hi = t2 + ar2;                                                                         \
        double lo3 = fma(ar, r, -ar2);                                                                \
        double lo4 = (t2 - hi) + ar2;                                                                 \
        double lo5 = fma(pl, fma(r, 1.0 - r, -1.0) * r, pl); /* pl/(1 + r) */                         \
        double rr = r * r, r4 = rr * rr; /* Q by Estrin's scheme: a shorter dependency chain */       \
        double q0 = fma(0x1.ffffffffffdbep-2, r, -0x1.5555555555556p-1);                              \
        double q1 = fma(0x1.55555558ed56fp-2, r, -0x1.9999999997c9ep-2);                              \
        double q2 = fma(0x1.ffffbf9e7aec2p-3, r, -0x1.2492493717557p-2);                              \
        double q3 = fma(0x1.9a8f66b6624e4p-3, r, -0x1.c71bbf3fa4e8dp-3);                              \
        q2 = fma(-0x1.75ebc036abdbfp-3, r4, fma(q3, rr, q2));                                         \
        double q = fma(q2, r4, fma(q1, rr, q0));                                                      \
        /* r³·Q as p3 + its exact rounding error: the error matters (2^-70 of up to 2^-5.6), and    \
         * p3's use in an fma keeps a compiler that contracts a·b + c from fusing p3's additions     \
         */                                                                                           \
        double p3 = ar3 * q, p3l = fma(ar3, q, -p3), h3 = hi + p3, lo6 = (hi - h3) + p3;              \
        double lo = (((lo1 + lo2) + (lo3 + lo4)) + (lo5 + p3l)) + lo6;                                \
        double lh = h3 + lo;                                                                          \
        *ll_out = (h3 - lh) + lo;                                                                     \
        return lh;                                                                                    \
    }                                                                                                 \
    /* e^(eh + el) as (s + s·t)·2^(n2) with 2^(n2)·s's bits from the table and k = round(eh·16/ln \
     * 2) */                                                                                          \
    static inline __attribute__((always_inline)) double ot_powd_exp_(double eh, double el,            \
                                                                     uint64_t *kb_out) {              \
        union {                                                                                       \
            double f;                                                                                 \
            uint64_t u;                                                                               \
        } kb;                                                                                         \
        kb.f = fma(eh, 0x1.71547652b82fep+4, 0x1.8p52);                                               \
        double kf = kb.f - 0x1.8p52;                                                                  \
        double s = fma(kf, -0x1.62e42fefa0000p-5, eh);                                                \
        s = fma(kf, -0x1.cf79abc9e3b3ap-44, s);                                                       \
        s = s + el;                                                                                   \
        double ss = s * s; /* P by Estrin's scheme */                                                 \
        double e0 = fma(0x1.555555555552dp-3, s, 0x1.0000000000004p-1);                               \
        double e1 = fma(0x1.11111114bbd1ap-7, s, 0x1.555555547d1c5p-5);                               \
        double e2 = fma(0x1.a015c86c51bb3p-13, s, 0x1.6c184889b058bp-10);                             \
        double e = fma(fma(e2, ss, e1), ss, e0);                                                      \
        *kb_out = kb.u;                                                                               \
        return fma(ss, e, s + ot_powd_tab_[4][kb.u & 15u]);                                           \
    }                                                                                                 \
    static inline __attribute__((always_inline)) double ot_powd(double x, double y) {                 \
        union {                                                                                       \
            double f;                                                                                 \
            uint64_t u;                                                                               \
        } xb = {x}, yb = {y}, ab, sb, tb, rb;                                                         \
        uint64_t ax = xb.u & 0x7fffffffffffffffull, ay = yb.u & 0x7fffffffffffffffull;                \
        ab.u = ax;                                                                                    \
        sb.f = ab.f * 0x1p52;                                                                         \
        uint64_t sub = 0u - (uint64_t)(ax < 0x0010000000000000ull);                                   \
        uint64_t spec = 0u - (uint64_t)((ax == 0) | (ax >= 0x7ff0000000000000ull));                   \
        uint64_t ix = (sb.u & sub) | (ax & ~sub);                                                     \
        ix = (0x3ff0000000000000ull & spec) | (ix & ~spec);                                           \
        double ll, lh = ot_powd_log_(ix, (int64_t)(sub & 52u), &ll);                                  \
        double yc = y > -0x1p70 ? y : -0x1p70;                                                        \
        yc = yc < 0x1p70 ? yc : 0x1p70;                                                               \
        double eh = yc * lh, el = fma(yc, lh, -eh);                                                   \
        el = fma(yc, ll, el);                                                                         \
        eh = eh > -1000.0 ? eh : -1000.0;                                                             \
        eh = eh < 1000.0 ? eh : 1000.0;                                                               \
        el = el > -1.0 ? el : -1.0;                                                                   \
        el = el < 1.0 ? el : 1.0;                                                                     \
        uint64_t kb;                                                                                  \
        double t = ot_powd_exp_(eh, el, &kb);                                                         \
        int64_t n = (int64_t)(kb - 0x4338000000000000ull) >> 4, n2 = n - (n >> 1);                    \
        sb.f = ot_powd_tab_[3][kb & 15u];                                                             \
        sb.u += (kb << 48) - ((uint64_t)n2 << 52);                                                    \
        tb.u = (uint64_t)(n2 + 1023) << 52;                                                           \
        rb.f = fma(sb.f, t, sb.f) * tb.f;                                                             \
        /* y's integrality and parity from |y| (every |y| >= 2^53 and inf are even integers) */       \
        ab.u = ay;                                                                                    \
        double h = ab.f * 0.5;                                                                        \
        uint64_t yint = 0u - (uint64_t)(__builtin_trunc(ab.f) == ab.f);                               \
        uint64_t yodd = yint & (0u - (uint64_t)(__builtin_trunc(h) != h));                            \
        uint64_t xinf = 0u - (uint64_t)(ax == 0x7ff0000000000000ull);                                 \
        uint64_t xzi = (0u - (uint64_t)(ax == 0)) | xinf;                                             \
        uint64_t big = 0u - ((yb.u >> 63) ^ (xinf & 1u)); /* ±0 to y < 0, ±inf to y > 0: inf */     \
        rb.u = (0x7ff0000000000000ull & big & xzi) | (rb.u & ~xzi);                                   \
        rb.u |= xb.u & 0x8000000000000000ull & yodd;                                                  \
        uint64_t nan =                                                                                \
            (0u - (uint64_t)(xb.u - 0x8000000000000001ull < 0x7fefffffffffffffull)) & ~yint;          \
        rb.u = (0xfff8000000000000ull & nan) | (rb.u & ~nan);                                         \
        uint64_t yn = 0u - (uint64_t)(ay > 0x7ff0000000000000ull);                                    \
        rb.u = ((yb.u | (1ull << 51)) & yn) | (rb.u & ~yn);                                           \
        uint64_t xn = 0u - (uint64_t)(ax > 0x7ff0000000000000ull);                                    \
        rb.u = ((xb.u | (1ull << 51)) & xn) | (rb.u & ~xn);                                           \
        uint64_t one = 0u - (uint64_t)((xb.u == 0x3ff0000000000000ull) | (ay == 0));                  \
        rb.u = (0x3ff0000000000000ull & one) | (rb.u & ~one);                                         \
        return rb.f;                                                                                  \
    }

/* ot_powd on 8 lanes, AVX-512 (F and DQ) with GCC's generic vectors and builtins: the GNU vector
 * ABI clone _ZGVeN8vv_ot_powd_s_ of the scalar function ot_powd_s_ (generated code and bench_vmath
 * declare ot_powd with that name as a SIMD function; src/codegen/emit.c, cg_emit_vmath_wrappers).
 * The same operations as ot_powd, lane by lane, so the same bits: each table lookup is one
 * vpermt2pd on the table's two 8-value halves (GCC writes C's table loads as gathers, which this
 * design cannot afford), each capping pair of comparisons one vrangepd (equal for numbers; a NaN
 * y's result is replaced anyway). A vector whose x are all positive, normal and finite, whose y
 * are finite, and whose |eh| are below 704 skips the selections and clamps that change nothing
 * for it and applies 2^n in one step (the same result, which is normal); any other vector takes
 * every step. The 4- and 2-lane clones pad their lanes and call it; the scalar symbol is ot_powd.
 * Needs OT_VM_W (the clones' visibility) and OT_POWD_DEF before it. */
#define OT_POWD_V8_DEF                                                                             \
    typedef double ot_pv_d __attribute__((vector_size(64)));                                       \
    typedef unsigned long long ot_pv_u __attribute__((vector_size(64)));                           \
    typedef long long ot_pv_i __attribute__((vector_size(64)));                                    \
    static inline __attribute__((always_inline)) ot_pv_d ot_pv_k_(double c) {                      \
        return (ot_pv_d){c, c, c, c, c, c, c, c};                                                  \
    }                                                                                              \
    static inline __attribute__((always_inline)) ot_pv_d ot_pv_fma_(ot_pv_d a, ot_pv_d b,          \
                                                                    ot_pv_d c) {                   \
        return __builtin_ia32_vfmaddpd512_mask(a, b, c, (unsigned char)-1, 4);                     \
    }                                                                                              \
    /* table t at the low 4 bits of each lane of i: one vpermt2pd on the table's two halves */     \
    static inline __attribute__((always_inline)) ot_pv_d ot_pv_tab_(int t, ot_pv_u i) {            \
        ot_pv_d lo, hi;                                                                            \
        __builtin_memcpy(&lo, &ot_powd_tab_[t][0], sizeof lo);                                     \
        __builtin_memcpy(&hi, &ot_powd_tab_[t][8], sizeof hi);                                     \
        return __builtin_shuffle(lo, hi, i);                                                       \
    }                                                                                              \
    /* sign(a)·min(|a|, c): one vrangepd, the scalar's two comparisons for a number a */          \
    static inline __attribute__((always_inline)) ot_pv_d ot_pv_clamp_(ot_pv_d a, double c) {       \
        return __builtin_ia32_rangepd512_mask(a, ot_pv_k_(c), 2, (ot_pv_d){0}, (unsigned char)-1,  \
                                              4);                                                  \
    }                                                                                              \
    static inline __attribute__((always_inline)) ot_pv_u ot_pv_sel_(ot_pv_u m, ot_pv_u a,          \
                                                                    ot_pv_u b) {                   \
        return (a & m) | (b & ~m);                                                                 \
    }                                                                                              \
    static inline __attribute__((always_inline)) ot_pv_d ot_powd_log_v_(ot_pv_u ix, ot_pv_i k0,    \
                                                                        ot_pv_d *ll_out) {         \
        ot_pv_u tmp = ix - 0x3fe6555500000000ull;                                                  \
        ot_pv_u i = tmp >> 48;                                                                     \
        ot_pv_i k = ((ot_pv_i)tmp >> 52) - k0;                                                     \
        ot_pv_d z = (ot_pv_d)(ix - (tmp & (0xfffull << 52)));                                      \
        ot_pv_d kd = __builtin_convertvector(k, ot_pv_d);                                          \
        ot_pv_d invc = ot_pv_tab_(0, i), logc = ot_pv_tab_(1, i), logct = ot_pv_tab_(2, i);        \
        ot_pv_d p = z * invc, pl = ot_pv_fma_(z, invc, -p), r = p - 1.0;                           \
        ot_pv_d t1 = ot_pv_fma_(kd, ot_pv_k_(0x1.62e42fefa3800p-1), logc);                         \
        ot_pv_d t2 = t1 + r;                                                                       \
        ot_pv_d lo1 = ot_pv_fma_(kd, ot_pv_k_(0x1.ef35793c76730p-45), logct);                      \
        ot_pv_d lo2 = (t1 - t2) + r;                                                               \
        ot_pv_d ar = -0.5 * r, ar2 = r * ar, ar3 = r * ar2;                                        \
        ot_pv_d hi = t2 + ar2;                                                                     \
        ot_pv_d lo3 = ot_pv_fma_(ar, r, -ar2);                                                     \
        ot_pv_d lo4 = (t2 - hi) + ar2;                                                             \
        ot_pv_d lo5 = ot_pv_fma_(pl, ot_pv_fma_(r, 1.0 - r, ot_pv_k_(-1.0)) * r, pl);              \
        ot_pv_d rr = r * r, r4 = rr * rr;                                                          \
        ot_pv_d q0 =                                                                               \
            ot_pv_fma_(ot_pv_k_(0x1.ffffffffffdbep-2), r, ot_pv_k_(-0x1.5555555555556p-1));        \
        ot_pv_d q1 =                                                                               \
            ot_pv_fma_(ot_pv_k_(0x1.55555558ed56fp-2), r, ot_pv_k_(-0x1.9999999997c9ep-2));        \
        ot_pv_d q2 =                                                                               \
            ot_pv_fma_(ot_pv_k_(0x1.ffffbf9e7aec2p-3), r, ot_pv_k_(-0x1.2492493717557p-2));        \
        ot_pv_d q3 =                                                                               \
            ot_pv_fma_(ot_pv_k_(0x1.9a8f66b6624e4p-3), r, ot_pv_k_(-0x1.c71bbf3fa4e8dp-3));        \
        q2 = ot_pv_fma_(ot_pv_k_(-0x1.75ebc036abdbfp-3), r4, ot_pv_fma_(q3, rr, q2));              \
        ot_pv_d q = ot_pv_fma_(q2, r4, ot_pv_fma_(q1, rr, q0));                                    \
        ot_pv_d p3 = ar3 * q, p3l = ot_pv_fma_(ar3, q, -p3), h3 = hi + p3, lo6 = (hi - h3) + p3;   \
        ot_pv_d lo = (((lo1 + lo2) + (lo3 + lo4)) + (lo5 + p3l)) + lo6;                            \
        ot_pv_d lh = h3 + lo;                                                                      \
        *ll_out = (h3 - lh) + lo;                                                                  \
        return lh;                                                                                 \
    }                                                                                              \
    static inline __attribute__((always_inline)) ot_pv_d ot_powd_exp_v_(ot_pv_d eh, ot_pv_d el,    \
                                                                        ot_pv_u *kb_out) {         \
        ot_pv_d kb = ot_pv_fma_(eh, ot_pv_k_(0x1.71547652b82fep+4), ot_pv_k_(0x1.8p52));           \
        ot_pv_d kf = kb - 0x1.8p52;                                                                \
        ot_pv_d s = ot_pv_fma_(kf, ot_pv_k_(-0x1.62e42fefa0000p-5), eh);                           \
        s = ot_pv_fma_(kf, ot_pv_k_(-0x1.cf79abc9e3b3ap-44), s);                                   \
        s = s + el;                                                                                \
        ot_pv_d ss = s * s;                                                                        \
        ot_pv_d e0 =                                                                               \
            ot_pv_fma_(ot_pv_k_(0x1.555555555552dp-3), s, ot_pv_k_(0x1.0000000000004p-1));         \
        ot_pv_d e1 =                                                                               \
            ot_pv_fma_(ot_pv_k_(0x1.11111114bbd1ap-7), s, ot_pv_k_(0x1.555555547d1c5p-5));         \
        ot_pv_d e2 =                                                                               \
            ot_pv_fma_(ot_pv_k_(0x1.a015c86c51bb3p-13), s, ot_pv_k_(0x1.6c184889b058bp-10));       \
        ot_pv_d e = ot_pv_fma_(ot_pv_fma_(e2, ss, e1), ss, e0);                                    \
        *kb_out = (ot_pv_u)kb;                                                                     \
        return ot_pv_fma_(ss, e, s + ot_pv_tab_(4, (ot_pv_u)kb));                                  \
    }                                                                                              \
    OT_VM_W ot_pv_d _ZGVeN8vv_ot_powd_s_(ot_pv_d x, ot_pv_d y) {                                   \
        ot_pv_d ll, lh, eh, el, t, sc;                                                             \
        ot_pv_u kb;                                                                                \
        /* every x positive, normal and finite and every y finite: ot_powd's selections change     \
         * nothing; and every |eh| < 704 (0x4086...): neither do its clamps, and the result is     \
         * normal, so 2^n goes into the exponent in one step (the same bits) */                    \
        unsigned char sp = __builtin_ia32_fpclasspd512_mask(x, 0xff, (unsigned char)-1) |          \
                           __builtin_ia32_fpclasspd512_mask(y, 0x99, (unsigned char)-1);           \
        ot_pv_d yc = ot_pv_clamp_(y, 0x1p70);                                                      \
        if (sp == 0) {                                                                             \
            lh = ot_powd_log_v_((ot_pv_u)x, (ot_pv_i){0}, &ll);                                    \
            eh = yc * lh;                                                                          \
            el = ot_pv_fma_(yc, ll, ot_pv_fma_(yc, lh, -eh));                                      \
            ot_pv_i ae = (ot_pv_i)((ot_pv_u)eh & 0x7fffffffffffffffull);                           \
            if (__builtin_ia32_cmpq512_mask(ae, (ot_pv_i){0} + 0x4086000000000000ll, 1,            \
                                            (unsigned char)-1) == 0xff) {                          \
                t = ot_powd_exp_v_(eh, el, &kb);                                                   \
                sc = (ot_pv_d)((ot_pv_u)ot_pv_tab_(3, kb) + (kb << 48));                           \
                return ot_pv_fma_(sc, t, sc);                                                      \
            }                                                                                      \
        }                                                                                          \
        ot_pv_u xu = (ot_pv_u)x, yu = (ot_pv_u)y;                                                  \
        ot_pv_u ax = xu & 0x7fffffffffffffffull, ay = yu & 0x7fffffffffffffffull;                  \
        ot_pv_u sub = (ot_pv_u)(ax < 0x0010000000000000ull);                                       \
        ot_pv_u spec = (ot_pv_u)((ax == 0) | (ax >= 0x7ff0000000000000ull));                       \
        ot_pv_u ix = ot_pv_sel_(sub, (ot_pv_u)((ot_pv_d)ax * 0x1p52), ax);                         \
        ix = ot_pv_sel_(spec, (ot_pv_u){0} + 0x3ff0000000000000ull, ix);                           \
        lh = ot_powd_log_v_(ix, (ot_pv_i)(sub & 52u), &ll);                                        \
        eh = yc * lh;                                                                              \
        el = ot_pv_fma_(yc, ll, ot_pv_fma_(yc, lh, -eh));                                          \
        eh = ot_pv_clamp_(eh, 1000.0);                                                             \
        el = ot_pv_clamp_(el, 1.0);                                                                \
        t = ot_powd_exp_v_(eh, el, &kb);                                                           \
        ot_pv_i n = (ot_pv_i)(kb - 0x4338000000000000ull) >> 4, n2 = n - (n >> 1);                 \
        sc = (ot_pv_d)((ot_pv_u)ot_pv_tab_(3, kb) + (kb << 48) - ((ot_pv_u)n2 << 52));             \
        ot_pv_u rb = (ot_pv_u)(ot_pv_fma_(sc, t, sc) * (ot_pv_d)((ot_pv_u)(n2 + 1023) << 52));     \
        ot_pv_d ya = (ot_pv_d)ay, h = ya * 0.5;                                                    \
        ot_pv_u yint =                                                                             \
            (ot_pv_u)(__builtin_ia32_rndscalepd_mask(ya, 0x0b, ya, (unsigned char)-1, 4) == ya);   \
        ot_pv_u yodd =                                                                             \
            yint &                                                                                 \
            (ot_pv_u)(__builtin_ia32_rndscalepd_mask(h, 0x0b, h, (unsigned char)-1, 4) != h);      \
        ot_pv_u xinf = (ot_pv_u)(ax == 0x7ff0000000000000ull);                                     \
        ot_pv_u xzi = (ot_pv_u)(ax == 0) | xinf;                                                   \
        ot_pv_u big = (ot_pv_u){0} - ((yu >> 63) ^ (xinf & 1u));                                   \
        rb = ot_pv_sel_(xzi, 0x7ff0000000000000ull & big, rb);                                     \
        rb |= xu & 0x8000000000000000ull & yodd;                                                   \
        ot_pv_u nan = (ot_pv_u)(xu - 0x8000000000000001ull < 0x7fefffffffffffffull) & ~yint;       \
        rb = ot_pv_sel_(nan, (ot_pv_u){0} + 0xfff8000000000000ull, rb);                            \
        rb = ot_pv_sel_((ot_pv_u)(ay > 0x7ff0000000000000ull), yu | (1ull << 51), rb);             \
        rb = ot_pv_sel_((ot_pv_u)(ax > 0x7ff0000000000000ull), xu | (1ull << 51), rb);             \
        ot_pv_u one = (ot_pv_u)((xu == 0x3ff0000000000000ull) | (ay == 0));                        \
        rb = ot_pv_sel_(one, (ot_pv_u){0} + 0x3ff0000000000000ull, rb);                            \
        return (ot_pv_d)rb;                                                                        \
    }                                                                                              \
    /* the 4- and 2-lane clones (GCC calls them in a loop's remainder) pad with 1^1 */             \
    typedef double ot_pv_d4 __attribute__((vector_size(32)));                                      \
    typedef double ot_pv_d2 __attribute__((vector_size(16)));                                      \
    static inline ot_pv_d ot_powd_pad_(const double *v, int n) {                                   \
        ot_pv_d r = ot_pv_k_(1.0);                                                                 \
        for (int i = 0; i < n; i++) r[i] = v[i];                                                   \
        return r;                                                                                  \
    }                                                                                              \
    OT_VM_W ot_pv_d4 _ZGVdN4vv_ot_powd_s_(ot_pv_d4 x, ot_pv_d4 y) {                                \
        ot_pv_d r = _ZGVeN8vv_ot_powd_s_(ot_powd_pad_((const double *)&x, 4),                      \
                                         ot_powd_pad_((const double *)&y, 4));                     \
        return (ot_pv_d4){r[0], r[1], r[2], r[3]};                                                 \
    }                                                                                              \
    OT_VM_W ot_pv_d4 _ZGVcN4vv_ot_powd_s_(ot_pv_d4 x, ot_pv_d4 y) {                                \
        return _ZGVdN4vv_ot_powd_s_(x, y);                                                         \
    }                                                                                              \
    OT_VM_W ot_pv_d2 _ZGVbN2vv_ot_powd_s_(ot_pv_d2 x, ot_pv_d2 y) {                                \
        ot_pv_d r = _ZGVeN8vv_ot_powd_s_(ot_powd_pad_((const double *)&x, 2),                      \
                                         ot_powd_pad_((const double *)&y, 2));                     \
        return (ot_pv_d2){r[0], r[1]};                                                             \
    }                                                                                              \
    /* the scalar function itself */                                                               \
    OT_VM_W double ot_powd_s_def_(double x, double y) __asm__("ot_powd_s_");                       \
    double ot_powd_s_def_(double x, double y) {                                                    \
        return ot_powd(x, y);                                                                      \
    }

/* Every function above, in the order each needs the ones before it: X(def) per definition. The
 * reference (elementwise.c), generated code's preamble (emit.c) and bench_vmath expand this one
 * list, so a new function is added here once. */
#define OT_VMATH_OWN_DEFS(X)                                                                       \
    X(OT_EXPF_DEF)                                                                                 \
    X(OT_TANHF_DEF)                                                                                \
    X(OT_ERFF_DEF)                                                                                 \
    X(OT_LOGF_DEF)                                                                                 \
    X(OT_EXPM1F_DEF)                                                                               \
    X(OT_EXPD_DEF)                                                                                 \
    X(OT_LOGD_DEF)                                                                                 \
    X(OT_LOG1PD_DEF)                                                                               \
    X(OT_EXPM1D_DEF)                                                                               \
    X(OT_TANHD_DEF)                                                                                \
    X(OT_CBRTD_DEF)                                                                                \
    X(OT_ERFD_DEF)                                                                                 \
    X(OT_POWF_DEF)                                                                                 \
    X(OT_POWD_DEF)
/* X for OT_VMATH_OWN_DEFS in C source: the definition itself */
#define OT_VMATH_DEF_TEXT(def) def

#endif
