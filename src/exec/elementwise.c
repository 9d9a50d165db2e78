/* Reference elementwise kernels with XLA CPU semantics (see docs/exec.md for each rule).
 *
 * Floats: f32 ops are computed in float, f64 in double, f16 and bf16 in float and rounded once to
 * the result dtype. Integers wrap (two's complement) and are computed on 64-bit values, then
 * truncated. Every kernel is a plain loop with a switch per element: clarity over speed. */
#include "exec/exec_internal.h"
#include "exec/expf_poly.h"
#include "exec/vmath.h"
#include "ir/op_traits.h"

#include <float.h>

/* ---- element access -------------------------------------------------------------------- */

int ex_mantissa_bits(ot_dtype t) {
    switch (t) {
    case OT_F16: return 10;
    case OT_BF16: return 7;
    case OT_F32: return 23;
    case OT_F64: return 52;
    default: return 0;
    }
}

double ex_ld_f(ot_dtype t, const void *p, int64_t i) {
    switch (t) {
    case OT_F16: return ot_f16_to_f32(((const uint16_t *)p)[i]);
    case OT_BF16: return ot_bf16_to_f32(((const uint16_t *)p)[i]);
    case OT_F32: return ((const float *)p)[i];
    case OT_F64: return ((const double *)p)[i];
    default: return (double)ex_ld_i(t, p, i);
    }
}

double ex_round_format(double x, int ebits, int mbits) {
    if (isnan(x) || isinf(x) || x == 0) return x;
    int emax = (1 << (ebits - 1)) - 1, emin = 1 - emax;
    int e;
    frexp(x, &e); /* |x| = f * 2^e, f in [0.5, 1): the unbiased exponent is e - 1 */
    int E = e - 1 < emin ? emin : e - 1;
    double q = ldexp(1.0, E - mbits); /* the spacing of representable values around x */
    double r = nearbyint(x / q) * q;  /* x / q is exact: a power-of-two scaling */
    double maxf = ldexp(2.0 - ldexp(1.0, -mbits), emax);
    if (fabs(r) > maxf) return copysign(INFINITY, x);
    return r;
}

void ex_st_f(ot_dtype t, void *p, int64_t i, double v) {
    switch (t) {
    case OT_F16:
        /* round once in the f16 format; the exact result then converts to f16 exactly */
        ((uint16_t *)p)[i] = ot_f32_to_f16((float)ex_round_format(v, 5, 10));
        break;
    case OT_BF16: ((uint16_t *)p)[i] = ot_f32_to_bf16((float)ex_round_format(v, 8, 7)); break;
    case OT_F32: ((float *)p)[i] = (float)v; break;
    case OT_F64: ((double *)p)[i] = v; break;
    default: ex_st_i(t, p, i, (int64_t)v); break;
    }
}

int64_t ex_ld_i(ot_dtype t, const void *p, int64_t i) {
    switch (t) {
    case OT_PRED: return ((const uint8_t *)p)[i] != 0;
    case OT_S8: return ((const int8_t *)p)[i];
    case OT_S16: return ((const int16_t *)p)[i];
    case OT_S32: return ((const int32_t *)p)[i];
    case OT_S64: return ((const int64_t *)p)[i];
    case OT_U8: return ((const uint8_t *)p)[i];
    case OT_U16: return ((const uint16_t *)p)[i];
    case OT_U32: return ((const uint32_t *)p)[i];
    case OT_U64: return (int64_t)((const uint64_t *)p)[i];
    default: return 0;
    }
}

void ex_st_i(ot_dtype t, void *p, int64_t i, int64_t v) {
    uint64_t u = (uint64_t)v;
    switch (t) {
    case OT_PRED: ((uint8_t *)p)[i] = v != 0; break;
    case OT_S8:
    case OT_U8: ((uint8_t *)p)[i] = (uint8_t)u; break;
    case OT_S16:
    case OT_U16: ((uint16_t *)p)[i] = (uint16_t)u; break;
    case OT_S32:
    case OT_U32: ((uint32_t *)p)[i] = (uint32_t)u; break;
    case OT_S64:
    case OT_U64: ((uint64_t *)p)[i] = u; break;
    default: break;
    }
}

uint64_t ex_ld_bits(size_t elsize, const void *p, int64_t i) {
    switch (elsize) {
    case 1: return ((const uint8_t *)p)[i];
    case 2: return ((const uint16_t *)p)[i];
    case 4: return ((const uint32_t *)p)[i];
    default: return ((const uint64_t *)p)[i];
    }
}

void ex_st_bits(size_t elsize, void *p, int64_t i, uint64_t v) {
    switch (elsize) {
    case 1: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case 2: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case 4: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((uint64_t *)p)[i] = v; break;
    }
}

static int bit_width(ot_dtype t) {
    return t == OT_PRED ? 1 : (int)ot_dtype_size(t) * 8;
}

/* Sign-extends or zero-extends the low `bits` of v as dtype t reads them. */
static int64_t norm_int(ot_dtype t, uint64_t v) {
    int w = bit_width(t);
    if (t == OT_PRED) return v != 0;
    if (w == 64) return (int64_t)v;
    uint64_t mask = (1ull << w) - 1;
    v &= mask;
    if (ot_dtype_is_signed_int(t) && (v >> (w - 1))) v |= ~mask;
    return (int64_t)v;
}

static int64_t int_min(ot_dtype t) {
    int w = bit_width(t);
    return w == 64 ? INT64_MIN : -(int64_t)(1ull << (w - 1));
}

static int64_t int_max(ot_dtype t) {
    int w = bit_width(t);
    return w == 64 ? INT64_MAX : (int64_t)((1ull << (w - 1)) - 1);
}

_Thread_local bool ex_ftz = true;

static inline float ftz_f(float v) {
    return ex_ftz && v != 0 && fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v;
}

static inline double ftz_d(double v) {
    return ex_ftz && v != 0 && fabs(v) < DBL_MIN ? copysign(0.0, v) : v;
}

/* DAZ for an operand of dtype t widened to double: f64 below DBL_MIN, every narrower float below
 * FLT_MIN (f16/bf16 are computed in f32: a bf16 subnormal is an f32 subnormal, an f16 subnormal
 * is a normal f32 and stays). */
static inline double daz_wide(ot_dtype t, double v) {
    if (!ex_ftz || v == 0 || isnan(v)) return v;
    double lim = t == OT_F64 ? DBL_MIN : (double)FLT_MIN;
    return fabs(v) < lim ? copysign(0.0, v) : v;
}

/* ---- unary ----------------------------------------------------------------------------- */

OT_VMATH_OWN_DEFS(OT_VMATH_DEF_TEXT)
OT_VMATH_REF_DECLS
OT_POWD_CALL_INLINE
OT_VMATH_DEF

static float logistic_f(float x) {
    /* 1 / (1 + exp(-x)), saturating cleanly at both ends */
    return 1.0f / (1.0f + ot_expf(-x));
}

static double logistic_d(double x) {
    return 1.0 / (1.0 + ot_expd(-x)); /* as generated code computes it */
}

static float sign_f(float x) {
    if (isnan(x) || x == 0) return x;
    return x < 0 ? -1.0f : 1.0f;
}

static double sign_d(double x) {
    if (isnan(x) || x == 0) return x;
    return x < 0 ? -1.0 : 1.0;
}

static float unary_f32(ot_opcode op, float x) {
    switch (op) {
    case OT_OP_ABS: return fabsf(x);
    case OT_OP_NEGATE: return -x;
    case OT_OP_SIGN: return sign_f(x);
    case OT_OP_FLOOR: return floorf(x);
    case OT_OP_CEIL: return ceilf(x);
    case OT_OP_ROUND_NEAREST_AFZ: return roundf(x);
    case OT_OP_ROUND_NEAREST_EVEN: return nearbyintf(x);
    case OT_OP_EXP: return ex_ftz ? ot_expf_ftz(x) : ot_expf(x); /* the same bits, flushed */
    case OT_OP_EXPM1: return ot_expm1f(x);
    case OT_OP_LOG: return ot_logf(x);
    case OT_OP_LOG1P: return ot_log1pf(x);
    case OT_OP_SQRT: return sqrtf(x);
    case OT_OP_RSQRT: return 1.0f / sqrtf(x);
    case OT_OP_CBRT: return ot_vm_cbrtf(x);
    case OT_OP_TANH: return ot_tanhf(x);
    case OT_OP_LOGISTIC: return logistic_f(x);
    case OT_OP_SIN: return ot_vm_sinf(x);
    case OT_OP_COS: return ot_vm_cosf(x);
    case OT_OP_TAN: return ot_vm_tanf(x);
    case OT_OP_ERF: return ot_erff(x);
    default: return x; /* copy */
    }
}

static double unary_f64(ot_opcode op, double x) {
    switch (op) {
    case OT_OP_ABS: return fabs(x);
    case OT_OP_NEGATE: return -x;
    case OT_OP_SIGN: return sign_d(x);
    case OT_OP_FLOOR: return floor(x);
    case OT_OP_CEIL: return ceil(x);
    case OT_OP_ROUND_NEAREST_AFZ: return round(x);
    case OT_OP_ROUND_NEAREST_EVEN: return nearbyint(x);
    case OT_OP_EXP: return ot_expd(x);
    case OT_OP_EXPM1: return ot_expm1d(x);
    case OT_OP_LOG: return ot_logd(x);
    case OT_OP_LOG1P: return ot_log1pd(x);
    case OT_OP_SQRT: return sqrt(x);
    case OT_OP_RSQRT: return 1.0 / sqrt(x);
    case OT_OP_CBRT: return ot_cbrtd(x);
    case OT_OP_TANH: return ot_tanhd(x);
    case OT_OP_LOGISTIC: return logistic_d(x);
    case OT_OP_SIN: return ot_vm_sin(x);
    case OT_OP_COS: return ot_vm_cos(x);
    case OT_OP_TAN: return ot_vm_tan(x);
    case OT_OP_ERF: return ot_erfd(x);
    default: return x;
    }
}

static int64_t unary_int(ot_opcode op, ot_dtype t, int64_t v) {
    int w = bit_width(t);
    uint64_t u = (uint64_t)v;
    if (w < 64) u &= (1ull << w) - 1;
    switch (op) {
    case OT_OP_ABS: return ot_dtype_is_signed_int(t) && v < 0 ? (int64_t)(0 - (uint64_t)v) : v;
    case OT_OP_NEGATE: return (int64_t)(0 - (uint64_t)v);
    case OT_OP_SIGN:
        if (ot_dtype_is_signed_int(t)) return v < 0 ? -1 : v > 0;
        return v != 0;
    case OT_OP_NOT: return t == OT_PRED ? !v : (int64_t) ~(uint64_t)v;
    case OT_OP_POPCNT: return __builtin_popcountll(u);
    case OT_OP_CLZ: return u == 0 ? w : __builtin_clzll(u) - (64 - w);
    default: return v; /* copy */
    }
}

/* f32 exp, logistic, tanh, erf, log, log1p and expm1 over an array, with unary_f32's
 * functions and flushing: built for AVX-512 and AVX2 beside the baseline (GCC target_clones, chosen
 * at load, as the runtime's reduce rows), where fmaf is the FMA instruction and the loop
 * vectorizes; the baseline build calls glibc's fmaf for each fmaf. fmaf rounds once by definition,
 * so every clone gives the same bits (and no a * b + c is written outside fmaf, so nothing can be
 * contracted). */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && __GNUC__ >= 11 &&            \
    !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define EX_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EX_CLONES
#endif

static inline float daz_f32(float v) {
    return v != 0 && fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v;
}

EX_CLONES static void expf_array(const float *x, float *y, int64_t n, bool ftz, ot_opcode op) {
    if (op == OT_OP_TANH) {
        /* the tanh of a zero or normal float is never subnormal: only the input flushes */
        if (ftz)
            for (int64_t i = 0; i < n; i++) y[i] = ot_tanhf(daz_f32(x[i]));
        else
            for (int64_t i = 0; i < n; i++) y[i] = ot_tanhf(x[i]);
    } else if (op == OT_OP_ERF) { /* the same for erf, log and log1p */
        if (ftz)
            for (int64_t i = 0; i < n; i++) y[i] = ot_erff(daz_f32(x[i]));
        else
            for (int64_t i = 0; i < n; i++) y[i] = ot_erff(x[i]);
    } else if (op == OT_OP_LOG) {
        if (ftz)
            for (int64_t i = 0; i < n; i++) y[i] = ot_logf(daz_f32(x[i]));
        else
            for (int64_t i = 0; i < n; i++) y[i] = ot_logf(x[i]);
    } else if (op == OT_OP_LOG1P) {
        if (ftz)
            for (int64_t i = 0; i < n; i++) y[i] = ot_log1pf(daz_f32(x[i]));
        else
            for (int64_t i = 0; i < n; i++) y[i] = ot_log1pf(x[i]);
    } else if (op == OT_OP_EXPM1) {
        if (ftz)
            for (int64_t i = 0; i < n; i++) y[i] = ot_expm1f(daz_f32(x[i]));
        else
            for (int64_t i = 0; i < n; i++) y[i] = ot_expm1f(x[i]);
    } else if (ftz && op == OT_OP_LOGISTIC) {
        for (int64_t i = 0; i < n; i++) y[i] = daz_f32(logistic_f(daz_f32(x[i])));
    } else if (ftz) {
        for (int64_t i = 0; i < n; i++) y[i] = ot_expf_ftz(daz_f32(x[i]));
    } else if (op == OT_OP_LOGISTIC) {
        for (int64_t i = 0; i < n; i++) y[i] = logistic_f(x[i]);
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = ot_expf(x[i]);
    }
}

ot_status ex_unary(ot_opcode op, ot_dtype in, ot_dtype out, const void *x, void *y, int64_t n) {
    if (op == OT_OP_COPY) {
        if (n) memcpy(y, x, (size_t)n * ot_dtype_size(in));
        return OT_OK;
    }
    if ((op == OT_OP_EXP || op == OT_OP_LOGISTIC || op == OT_OP_TANH || op == OT_OP_ERF ||
         op == OT_OP_LOG || op == OT_OP_LOG1P || op == OT_OP_EXPM1) &&
        in == OT_F32 && out == OT_F32) {
        expf_array(x, y, n, ex_ftz, op);
        return OT_OK;
    }
    if (ot_dtype_is_float(in)) {
        if (ir_op_traits(op) & IR_OP_NO_FLOAT)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "%s is not defined for %s", ot_opcode_name(op),
                            ot_dtype_name(in));
        for (int64_t i = 0; i < n; i++) {
            double v = ex_ld_f(in, x, i);
            if (op == OT_OP_IS_FINITE) {
                ((uint8_t *)y)[i] = isfinite(v) ? 1 : 0;
            } else if (ex_is_f64(in)) {
                ex_st_f(out, y, i,
                        ex_ftz_applies(op) ? ftz_d(unary_f64(op, ftz_d(v))) : unary_f64(op, v));
            } else {
                ex_st_f(out, y, i,
                        ex_ftz_applies(op) ? ftz_f(unary_f32(op, ftz_f((float)v)))
                                           : unary_f32(op, (float)v));
            }
        }
        return OT_OK;
    }
    if (ir_op_traits(op) & IR_OP_FLOAT_ONLY)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%s is not defined for %s", ot_opcode_name(op),
                        ot_dtype_name(in));
    for (int64_t i = 0; i < n; i++) ex_st_i(out, y, i, unary_int(op, in, ex_ld_i(in, x, i)));
    return OT_OK;
}

/* ---- binary ---------------------------------------------------------------------------- */

/* IEEE 754-2019 maximum/minimum: NaN if either is NaN, -0 < +0. */
static double fmax_nan(double a, double b) {
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    if (a == b) return signbit(a) ? b : a;
    return a > b ? a : b;
}

static double fmin_nan(double a, double b) {
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    if (a == b) return signbit(a) ? a : b;
    return a < b ? a : b;
}

static float binary_f32(ot_opcode op, float a, float b) {
    switch (op) {
    case OT_OP_ADD: return a + b;
    case OT_OP_SUBTRACT: return a - b;
    case OT_OP_MULTIPLY: return a * b;
    case OT_OP_DIVIDE: return a / b;
    case OT_OP_REMAINDER: return fmodf(a, b);
    case OT_OP_POWER: return ot_vm_powf1(a, b);
    case OT_OP_MAXIMUM: return (float)fmax_nan(a, b);
    case OT_OP_MINIMUM: return (float)fmin_nan(a, b);
    case OT_OP_ATAN2: return ot_vm_atan2f(a, b);
    default: return NAN;
    }
}

static double binary_f64(ot_opcode op, double a, double b) {
    switch (op) {
    case OT_OP_ADD: return a + b;
    case OT_OP_SUBTRACT: return a - b;
    case OT_OP_MULTIPLY: return a * b;
    case OT_OP_DIVIDE: return a / b;
    case OT_OP_REMAINDER: return fmod(a, b);
    case OT_OP_POWER: return ot_vm_pow1(a, b);
    case OT_OP_MAXIMUM: return fmax_nan(a, b);
    case OT_OP_MINIMUM: return fmin_nan(a, b);
    case OT_OP_ATAN2: return ot_vm_atan2(a, b);
    default: return NAN;
    }
}

/* Integer power as XLA's CPU backend emits it (ElementalIrEmitter::EmitIntegerPow): square and
 * multiply over the low 6 bits of the exponent only (2^64 overflows anyway), wrapping; when the
 * exponent is negative as a signed number the result is 1 for base 1, else 0. */
static int64_t int_pow(ot_dtype t, int64_t a, int64_t b) {
    if (t == OT_PRED) return a || !b;
    int w = bit_width(t);
    uint64_t mask = w == 64 ? ~0ull : (1ull << w) - 1;
    uint64_t base = (uint64_t)a, e = (uint64_t)b & mask, r = 1;
    for (int k = 0; k < 6; k++) {
        if (e & 1) r *= base;
        base *= base;
        e >>= 1;
    }
    bool neg = ((uint64_t)b >> (w - 1)) & 1; /* the sign bit of the exponent's type */
    if (!neg) return (int64_t)r;
    return ((uint64_t)a & mask) == 1 ? 1 : 0;
}

static int64_t binary_int(ot_opcode op, ot_dtype t, int64_t a, int64_t b) {
    bool sgn = ot_dtype_is_signed_int(t);
    int w = bit_width(t);
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    if (!sgn && w < 64) {
        ua &= (1ull << w) - 1;
        ub &= (1ull << w) - 1;
    }
    switch (op) {
    case OT_OP_ADD: return (int64_t)(ua + ub);
    case OT_OP_SUBTRACT: return (int64_t)(ua - ub);
    case OT_OP_MULTIPLY: return (int64_t)(ua * ub);
    case OT_OP_DIVIDE:
        if (t == OT_PRED) return b ? a : 1;
        if (b == 0) return -1; /* all bits set: -1 signed, the maximum unsigned */
        if (sgn) {
            if (a == int_min(t) && b == -1) return a;
            return a / b;
        }
        return (int64_t)(ua / ub);
    case OT_OP_REMAINDER:
        if (t == OT_PRED) return b ? 0 : a;
        if (b == 0) return a;
        if (sgn) {
            if (a == int_min(t) && b == -1) return 0;
            return a % b;
        }
        return (int64_t)(ua % ub);
    case OT_OP_POWER: return int_pow(t, a, b);
    case OT_OP_MAXIMUM:
        if (sgn || t == OT_PRED) return a > b ? a : b;
        return ua > ub ? a : b;
    case OT_OP_MINIMUM:
        if (sgn || t == OT_PRED) return a < b ? a : b;
        return ua < ub ? a : b;
    case OT_OP_AND: return (int64_t)(ua & ub);
    case OT_OP_OR: return (int64_t)(ua | ub);
    case OT_OP_XOR: return (int64_t)(ua ^ ub);
    /* Shift amounts are read as unsigned; an amount >= the bit width gives 0, or the sign fill
     * for an arithmetic right shift. */
    case OT_OP_SHIFT_LEFT: {
        uint64_t amt = ub & (w == 64 ? ~0ull : (1ull << w) - 1);
        return amt >= (uint64_t)w ? 0 : (int64_t)(ua << amt);
    }
    case OT_OP_SHIFT_RIGHT_LOGICAL: {
        uint64_t amt = ub & (w == 64 ? ~0ull : (1ull << w) - 1);
        uint64_t ux = w == 64 ? ua : ua & ((1ull << w) - 1);
        return amt >= (uint64_t)w ? 0 : (int64_t)(ux >> amt);
    }
    case OT_OP_SHIFT_RIGHT_ARITHMETIC: {
        uint64_t amt = ub & (w == 64 ? ~0ull : (1ull << w) - 1);
        int64_t sx = norm_int(sgn ? t
                                  : (w == 8    ? OT_S8
                                     : w == 16 ? OT_S16
                                     : w == 32 ? OT_S32
                                               : OT_S64),
                              ua);
        if (amt >= (uint64_t)w) return sx < 0 ? -1 : 0;
        return sx >> amt;
    }
    default: return 0;
    }
}

ot_status ex_binary(ot_opcode op, ot_dtype t, const void *a, const void *b, void *y, int64_t n) {
    if (ot_dtype_is_float(t)) {
        if (ir_op_traits(op) & IR_OP_NO_FLOAT)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "%s is not defined for %s", ot_opcode_name(op),
                            ot_dtype_name(t));
        for (int64_t i = 0; i < n; i++) {
            double va = ex_ld_f(t, a, i), vb = ex_ld_f(t, b, i);
            if (!ex_ftz_applies(op)) {
                ex_st_f(t, y, i,
                        ex_is_f64(t) ? binary_f64(op, va, vb)
                                     : (double)binary_f32(op, (float)va, (float)vb));
            } else if (ex_is_f64(t)) {
                ex_st_f(t, y, i, ftz_d(binary_f64(op, ftz_d(va), ftz_d(vb))));
            } else if (ex_ftz && (op == OT_OP_MULTIPLY || op == OT_OP_DIVIDE)) {
                double fa = ftz_f((float)va), fb = ftz_f((float)vb);
                ex_st_f(t, y, i, ex_tiny_f(op == OT_OP_MULTIPLY ? fa * fb : fa / fb));
            } else {
                ex_st_f(t, y, i, ftz_f(binary_f32(op, ftz_f((float)va), ftz_f((float)vb))));
            }
        }
        return OT_OK;
    }
    if (ir_op_traits(op) & IR_OP_FLOAT_ONLY)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%s is not defined for %s", ot_opcode_name(op),
                        ot_dtype_name(t));
    for (int64_t i = 0; i < n; i++)
        ex_st_i(t, y, i, binary_int(op, t, ex_ld_i(t, a, i), ex_ld_i(t, b, i)));
    return OT_OK;
}

/* ---- compare --------------------------------------------------------------------------- */

/* A signed key that orders float bit patterns totally: -NaN < -Inf < ... < -0 < +0 < ... < +Inf
 * < +NaN. */
static int64_t total_order_key(ot_dtype t, const void *p, int64_t i) {
    size_t es = ot_dtype_size(t);
    uint64_t u = ex_ld_bits(es, p, i);
    int w = (int)es * 8;
    int64_t s = w == 64 ? (int64_t)u : (int64_t)(u << (64 - w)) >> (64 - w);
    if (s < 0) s ^= (int64_t)(~0ull >> 1);
    return s;
}

static bool cmp_apply(ot_cmp_dir d, int c, bool unordered) {
    if (unordered) return d == OT_CMP_NE;
    switch (d) {
    case OT_CMP_EQ: return c == 0;
    case OT_CMP_NE: return c != 0;
    case OT_CMP_LT: return c < 0;
    case OT_CMP_LE: return c <= 0;
    case OT_CMP_GT: return c > 0;
    case OT_CMP_GE: return c >= 0;
    default: return false;
    }
}

ot_status ex_compare(ot_cmp_dir dir, ot_cmp_type type, ot_dtype t, const void *a, const void *b,
                     uint8_t *y, int64_t n) {
    ot_cmp_type ty = ot_cmp_type_resolve(type, t);
    if (ot_dtype_is_float(t) && ty != OT_CMP_TYPE_FLOAT && ty != OT_CMP_TYPE_TOTALORDER)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "compare type %s is not valid for %s",
                        ot_cmp_type_name(ty), ot_dtype_name(t));
    if (!ot_dtype_is_float(t) && (ty == OT_CMP_TYPE_FLOAT || ty == OT_CMP_TYPE_TOTALORDER))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "compare type %s is not valid for %s",
                        ot_cmp_type_name(ty), ot_dtype_name(t));
    for (int64_t i = 0; i < n; i++) {
        int c = 0;
        bool unordered = false;
        if (ty == OT_CMP_TYPE_FLOAT) {
            /* an fcmp (UCOMISS/CMPPS) reads its operands through DAZ: a subnormal compares as
             * zero; TOTALORDER compares the bits as integers and is not affected */
            double va = daz_wide(t, ex_ld_f(t, a, i)), vb = daz_wide(t, ex_ld_f(t, b, i));
            unordered = isnan(va) || isnan(vb);
            c = va < vb ? -1 : va > vb;
        } else if (ty == OT_CMP_TYPE_TOTALORDER) {
            int64_t ka = total_order_key(t, a, i), kb = total_order_key(t, b, i);
            c = ka < kb ? -1 : ka > kb;
        } else if (ty == OT_CMP_TYPE_UNSIGNED) {
            uint64_t ua = ex_ld_bits(ot_dtype_size(t), a, i),
                     ub = ex_ld_bits(ot_dtype_size(t), b, i);
            c = ua < ub ? -1 : ua > ub;
        } else {
            int64_t va = ex_ld_i(t, a, i), vb = ex_ld_i(t, b, i);
            c = va < vb ? -1 : va > vb;
        }
        y[i] = cmp_apply(dir, c, unordered) ? 1 : 0;
    }
    return OT_OK;
}

/* ---- convert --------------------------------------------------------------------------- */

/* Float to integer as XLA does: NaN -> 0, out-of-range values saturate, otherwise truncation
 * toward zero. */
static int64_t float_to_int(ot_dtype to, double v) {
    if (to == OT_PRED) return v != 0; /* NaN != 0 */
    if (isnan(v)) return 0;
    if (ot_dtype_is_unsigned_int(to)) {
        if (v <= 0) return 0;
        int w = bit_width(to);
        double lim = ldexp(1.0, w); /* 2^w */
        if (v >= lim) return w == 64 ? (int64_t)UINT64_MAX : (int64_t)((1ull << w) - 1);
        return (int64_t)(uint64_t)v;
    }
    double lo = (double)int_min(to), hi = -(double)int_min(to); /* -2^(w-1), 2^(w-1) */
    if (v <= lo) return int_min(to);
    if (v >= hi) return int_max(to);
    return (int64_t)v;
}

/* An integer magnitude as a double that rounds to `to` exactly as the integer would: exact up to
 * 2^53; above, the top 53 bits with a sticky bit (f64 targets use the C conversion, which rounds
 * once). */
static double int_to_double_sticky(uint64_t mag, ot_dtype to) {
    if (to == OT_F64 || mag <= (1ull << 53)) return (double)mag;
    int len = 64 - __builtin_clzll(mag);
    int shift = len - 53;
    uint64_t t = mag >> shift;
    if (mag & ((1ull << shift) - 1)) t |= 1;
    return ldexp((double)t, shift);
}

ot_status ex_convert(ot_dtype from, ot_dtype to, const void *x, void *y, int64_t n) {
    if (from == to) {
        if (n) memcpy(y, x, (size_t)n * ot_dtype_size(from));
        return OT_OK;
    }
    bool ff = ot_dtype_is_float(from), tf = ot_dtype_is_float(to);
    /* FTZ/DAZ in converts, as the x86 instructions XLA's CPU code uses: f32 <-> f64 (CVTSS2SD,
     * CVTSD2SS) read a subnormal source as zero and flush a subnormal f32 result; float -> pred
     * is a compare with zero (subnormal -> false). float -> integer truncates a subnormal to 0
     * either way. Converts to or from f16/bf16 are bit manipulation or half-precision
     * conversions that keep subnormals (XLA rounds f32 -> bf16 with integer arithmetic). */
    bool daz_in = ex_ftz && (from == OT_F32 || from == OT_F64) &&
                  (to == OT_F32 || to == OT_F64 || to == OT_PRED);
    for (int64_t i = 0; i < n; i++) {
        if (ff && tf) {
            double v = ex_ld_f(from, x, i);
            if (daz_in) v = daz_wide(from, v);
            if (daz_in && to == OT_F32)
                ((float *)y)[i] = ex_tiny_f(v); /* CVTSD2SS under FTZ */
            else
                ex_st_f(to, y, i, v); /* one rounding, NaN stays NaN */
        } else if (ff) {
            double v = ex_ld_f(from, x, i);
            ex_st_i(to, y, i, float_to_int(to, daz_in ? daz_wide(from, v) : v));
        } else if (tf) {
            int64_t v = ex_ld_i(from, x, i);
            bool neg = from != OT_U64 && v < 0;
            uint64_t mag = neg ? 0 - (uint64_t)v : (uint64_t)v;
            ex_st_f(to, y, i, neg ? -int_to_double_sticky(mag, to) : int_to_double_sticky(mag, to));
        } else {
            ex_st_i(to, y, i, ex_ld_i(from, x, i));
        }
    }
    return OT_OK;
}

/* ---- reduce-precision (XLA's bit-exact algorithm) -------------------------------------- */

ot_status ex_reduce_precision(ot_dtype t, int ebits, int mbits, const void *x, void *y, int64_t n) {
    if (!ot_dtype_is_float(t))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "reduce-precision needs a float operand, not %s",
                        ot_dtype_name(t));
    if (ebits < 1 || mbits < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "reduce-precision: exponent_bits %d must be >= 1, mantissa_bits %d >= 0",
                        ebits, mbits);
    size_t es = ot_dtype_size(t);
    int nbits = (int)es * 8;
    int sm = ex_mantissa_bits(t), se = nbits - 1 - sm;
    uint64_t all = nbits == 64 ? ~0ull : (1ull << nbits) - 1;
    uint64_t sign_mask = 1ull << (nbits - 1);
    uint64_t exp_mask = ((1ull << se) - 1) << sm;
    for (int64_t i = 0; i < n; i++) {
        uint64_t orig = ex_ld_bits(es, x, i), v = orig;
        bool is_nan = (orig & ~sign_mask & all) > exp_mask;
        if (mbits < sm) {
            uint64_t last = 1ull << (sm - mbits);
            uint64_t bias = (last >> 1) - 1 + ((v & last) >> (sm - mbits));
            v = ((v + bias) & ~(last - 1)) & all;
        }
        if (ebits < se) {
            uint64_t ebias = (1ull << (se - 1)) - 1, rbias = (1ull << (ebits - 1)) - 1;
            uint64_t rmax = ebias + rbias, rmin = ebias - rbias;
            uint64_t xe = v & exp_mask;
            if (xe > (rmax << sm))
                v = (v & sign_mask) | exp_mask;
            else if (xe <= (rmin << sm))
                v = v & sign_mask;
        }
        if (mbits > 0 && is_nan) v = orig;
        ex_st_bits(es, y, i, v);
    }
    return OT_OK;
}

/* ---- select, clamp --------------------------------------------------------------------- */

void ex_select(const uint8_t *p, int64_t pstride, const void *a, const void *b, void *y,
               size_t elsize, int64_t n) {
    const char *ca = a, *cb = b;
    char *cy = y;
    for (int64_t i = 0; i < n; i++)
        memcpy(cy + (size_t)i * elsize, (p[i * pstride] ? ca : cb) + (size_t)i * elsize, elsize);
}

ot_status ex_clamp(ot_dtype t, const void *lo, int64_t lostride, const void *x, const void *hi,
                   int64_t histride, void *y, int64_t n) {
    /* clamp(lo, x, hi) = min(max(x, lo), hi), with the NaN and DAZ rules of maximum and
     * minimum */
    for (int64_t i = 0; i < n; i++) {
        if (ot_dtype_is_float(t)) {
            double v = fmin_nan(
                fmax_nan(daz_wide(t, ex_ld_f(t, x, i)), daz_wide(t, ex_ld_f(t, lo, i * lostride))),
                daz_wide(t, ex_ld_f(t, hi, i * histride)));
            ex_st_f(t, y, i, v);
        } else {
            int64_t v =
                binary_int(OT_OP_MAXIMUM, t, ex_ld_i(t, x, i), ex_ld_i(t, lo, i * lostride));
            v = binary_int(OT_OP_MINIMUM, t, norm_int(t, (uint64_t)v),
                           ex_ld_i(t, hi, i * histride));
            ex_st_i(t, y, i, v);
        }
    }
    return OT_OK;
}
