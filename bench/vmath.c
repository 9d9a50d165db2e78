/* The library's f32 and f64 math functions, shared by the reference evaluator and generated code:
 * its own polynomials (ot_tanhf, ot_erff, ... and f64 ot_expd, ot_expm1d, ot_logd, ot_tanhd,
 * ot_cbrtd, ot_erfd in src/exec/expf_poly.h) and SLEEF's functions (src/exec/vmath.h): accuracy,
 * and throughput against glibc's scalar function.
 *
 *   bench_vmath ulp [--fn F] [--threads N] [--stride K] [--json]   f32 unary F: every one of
 *                                                      the 2^32 inputs (or every K-th bit pattern)
 *                                                      against F() in double
 *   bench_vmath ulp --fn F --dtype f64 | --fn pow|atan2 [--n N] [--json]   a sample: N (16M)
 *                                                      random inputs and the edge cases, against
 *                                                      F() in long double (f64) or double (f32)
 *   bench_vmath speed [--fn F] [--dtype f32|f64] [--n N] [--reps R] [--json]   elements/s on N
 *                                                      elements (16M), one thread
 *   bench_vmath variants [--n N] [--json]   every SLEEF function's finz (FMA) vector variants
 *                                            against its scalar purecfma one and its cinz (no
 *                                            FMA) ones against purec, bit for bit after the
 *                                            fix-ups, on N sampled inputs (16M) with the edge
 *                                            cases (AVX-512 builds)
 *
 * F (f32) is tanh (the default), erf, log, log1p, expm1, pow (the library's polynomials), sin, cos,
 * tan, cbrt or atan2 (SLEEF); F (f64) is exp, expm1, log, log1p, tanh, cbrt, erf or logistic
 * (the library's), sin, cos, tan, pow or atan2 (SLEEF). ulp: the error in ulps printed (|got - ref|
 * / ulp(ref), ulp of the binade of ref) is exact to about 1e-8 ulp (f32 against double) or 1e-3 ulp
 * (f64 against x87 long double); "correctly rounded" counts inputs whose result equals ref rounded;
 * also how often and how far it differs from glibc's function. NaN inputs must come back as a quiet
 * NaN with their sign; f32 unary special values (±0, ±inf, saturation and x-itself ranges) are
 * checked exactly; the sampled runs compare the edge cases (±0, ±inf, NaN, subnormals, the largest
 * and smallest normals, ±1, ±0.5, ±2, integers and half-integers for pow's sign rules) with glibc's
 * result (C99 Annex F) and print every difference. speed: medians of R passes over the same array,
 * the library's function and glibc's interleaved pass by pass, on inputs in the range the suite's
 * programs give it. Built with the generated code's flags (-O3 -march=native
 * -mprefer-vector-width=512 -fno-math-errno -ffp-contract=off), and SLEEF's functions declared as
 * generated code declares them (src/codegen/emit.c: a SIMD function whose clones wrap SLEEF's
 * vector variants), so each loop is what a native fusion gets. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/expf_poly.h"
#include "exec/vmath.h"

OT_VMATH_OWN_DEFS(OT_VMATH_DEF_TEXT)

/* SLEEF's finz (FMA) scalar variant, a SIMD function whose clones wrap the vector variants, as
 * src/codegen/emit.c writes them into generated code for a target with FMA and AVX2 (elsewhere
 * the loops here call the scalar variant) */
#if defined(__x86_64__) && defined(__FMA__) && defined(__AVX2__) && defined(__GNUC__) &&           \
    !defined(__clang__)
#define BV_VEC  1
#define BV_SIMD __attribute__((simd("notinbranch")))
#else
#define BV_VEC 0
#define BV_SIMD
#endif
#define BV_DECL_(name, stem, arity, T) BV_DECL##arity##_(name, stem, T)
#define BV_DECL1_(name, stem, T)                                                                   \
    T ot_vmraw_##name(T) __asm__("Sleef_finz_" #stem "1_u10purecfma") __attribute__((const))       \
    BV_SIMD;
#define BV_DECL2_(name, stem, T)                                                                   \
    T ot_vmraw_##name(T, T) __asm__("Sleef_finz_" #stem "1_u10purecfma") __attribute__((const))    \
    BV_SIMD;
OT_VMATH_LIST(BV_DECL_)
/* f64 pow as generated code calls it: on AVX-512, ot_powd as a SIMD function whose clones are
 * OT_POWD_V8_DEF (defined at the end of this file); elsewhere ot_powd inlined */
#if BV_VEC && defined(__AVX512F__) && defined(__AVX512DQ__)
#define BV_PD_VEC 1
double ot_powd_call_(double, double) __asm__("ot_powd_s_") __attribute__((const)) BV_SIMD;
#else
#define BV_PD_VEC 0
OT_POWD_CALL_INLINE
#endif
OT_VMATH_DEF

#if BV_VEC
typedef float bv_f16 __attribute__((vector_size(64)));
typedef float bv_f8 __attribute__((vector_size(32)));
typedef float bv_f4 __attribute__((vector_size(16)));
typedef double bv_d8 __attribute__((vector_size(64)));
typedef double bv_d4 __attribute__((vector_size(32)));
typedef double bv_d2 __attribute__((vector_size(16)));
#if defined(__AVX512F__)
#define BV_E(...) __VA_ARGS__
#else
#define BV_E(...)
#endif
/* the clone of isa I with L lanes of vector type V for SLEEF variant VAR of width W */
#define BV_W1_(I, L, V, stem, W, VAR)                                                              \
    V Sleef_finz_##stem##W##_u10##VAR(V);                                                          \
    V _ZGV##I##N##L##v_Sleef_finz_##stem##1_u10purecfma(V x) {                                     \
        return Sleef_finz_##stem##W##_u10##VAR(x);                                                 \
    }
#define BV_W2_(I, L, V, stem, W, VAR)                                                              \
    V Sleef_finz_##stem##W##_u10##VAR(V, V);                                                       \
    V _ZGV##I##N##L##vv_Sleef_finz_##stem##1_u10purecfma(V a, V b) {                               \
        return Sleef_finz_##stem##W##_u10##VAR(a, b);                                              \
    }
#define BV_WRAP_(name, stem, arity, T) BV_WRAP_##T(stem, arity)
#define BV_WRAP_float(stem, a)                                                                     \
    BV_E(BV_W##a##_(e, 16, bv_f16, stem, 16, avx512f))                                             \
    BV_W##a##_(d, 8, bv_f8, stem, 8, avx2) BV_W##a##_(b, 4, bv_f4, stem, 4, avx2128)
#define BV_WRAP_double(stem, a)                                                                    \
    BV_E(BV_W##a##_(e, 8, bv_d8, stem, 8, avx512f))                                                \
    BV_W##a##_(d, 4, bv_d4, stem, 4, avx2) BV_W##a##_(b, 2, bv_d2, stem, 2, avx2128)
OT_VMATH_LIST(BV_WRAP_)
#endif

/* one function under test: the library's, glibc's float one, the double reference, its exact
 * special values (special() returns 1 and sets *want when x is one), and the speed test's range */
typedef struct vfn {
    const char *name;
    float (*ot)(float);
    float (*libm)(float);
    double (*ref)(double);
    int (*special)(float x, float *want);
    float lo, hi;
    void (*loop)(const float *x, float *y, int64_t n); /* ot over an array, vectorized */
} vfn;

static float ot_tanhf_fn(float x) {
    return ot_tanhf(x);
}

static float ot_erff_fn(float x) {
    return ot_erff(x);
}

static float ot_logf_fn(float x) {
    return ot_logf(x);
}

static float ot_log1pf_fn(float x) {
    return ot_log1pf(x);
}

static float ot_expm1f_fn(float x) {
    return ot_expm1f(x);
}

static float ot_sinf_fn(float x) {
    return ot_vm_sinf(x);
}

static float ot_cosf_fn(float x) {
    return ot_vm_cosf(x);
}

static float ot_tanf_fn(float x) {
    return ot_vm_tanf(x);
}

static float ot_cbrtf_fn(float x) {
    return ot_vm_cbrtf(x);
}

/* sin and tan: ±0 kept, the default NaN at ±inf */
static int sin_special(float x, float *want) {
    if (x == 0 || isinf(x)) {
        *want = isinf(x) ? NAN : x;
        return 1;
    }
    return 0;
}

/* cos: 1 at ±0, the default NaN at ±inf */
static int cos_special(float x, float *want) {
    if (x == 0 || isinf(x)) {
        *want = isinf(x) ? NAN : 1.0f;
        return 1;
    }
    return 0;
}

/* cbrt: ±0 and ±inf kept */
static int cbrt_special(float x, float *want) {
    if (x == 0 || isinf(x)) {
        *want = x;
        return 1;
    }
    return 0;
}

/* expm1: x itself below 2^-25 (±0 kept), -1 from -25 and at -inf, +inf at +inf */
static int expm1_special(float x, float *want) {
    if (fabsf(x) < 0x1p-25f || x <= -25.0f || x == INFINITY) {
        *want = fabsf(x) < 0x1p-25f ? x : x == INFINITY ? x : -1.0f;
        return 1;
    }
    return 0;
}

/* tanh rounds to x below 2^-12 and to ±1 at ±inf */
static int tanh_special(float x, float *want) {
    if (fabsf(x) < 0x1p-12f || isinf(x)) {
        *want = isinf(x) ? copysignf(1.0f, x) : x;
        return 1;
    }
    return 0;
}

/* erf: ±0 kept, ±1 at ±inf and from 4 on (erf rounds to 1 from 3.8325) */
static int erf_special(float x, float *want) {
    if (x == 0 || fabsf(x) >= 4.0f) {
        *want = x == 0 ? x : copysignf(1.0f, x);
        return 1;
    }
    return 0;
}

/* log: -inf at ±0, +0 at 1, +inf at +inf, the default NaN below 0 */
static int log_special(float x, float *want) {
    if (x == 0 || x == 1 || x < 0 || isinf(x)) {
        *want = x == 0 ? -INFINITY : x == 1 ? 0.0f : x < 0 ? NAN : x;
        return 1;
    }
    return 0;
}

/* log1p: ±0 kept (and x itself below 2^-24), -inf at -1, +inf at +inf, NaN below -1 */
static int log1p_special(float x, float *want) {
    if (fabsf(x) < 0x1p-24f || x <= -1 || isinf(x)) {
        *want = fabsf(x) < 0x1p-24f ? x : x == -1 ? -INFINITY : x < -1 ? NAN : x;
        return 1;
    }
    return 0;
}

/* noinline: each loop is compiled (and vectorized) on its own, as in a native fusion; flatten:
 * the function inlined as in a generated kernel (in this file, with many callers, GCC's
 * unit-growth limit left ot_erff a call: a scalar loop) */
#define BV_LOOP(fn, call)                                                                          \
    __attribute__((noinline, flatten)) static void loop_##fn(const float *x, float *y,             \
                                                             int64_t n) {                          \
        for (int64_t i = 0; i < n; i++) y[i] = call(x[i]);                                         \
    }
BV_LOOP(tanh, ot_tanhf)
BV_LOOP(erf, ot_erff)
BV_LOOP(log, ot_logf)
BV_LOOP(log1p, ot_log1pf)
BV_LOOP(expm1, ot_expm1f)
BV_LOOP(sin, ot_vm_sinf)
BV_LOOP(cos, ot_vm_cosf)
BV_LOOP(tan, ot_vm_tanf)
BV_LOOP(cbrt, ot_vm_cbrtf)

static const vfn fns[] = {
    {"tanh", ot_tanhf_fn, tanhf, tanh, tanh_special, -6.0f, 6.0f, loop_tanh}, /* GELU's tanh */
    {"erf", ot_erff_fn, erff, erf, erf_special, -4.0f, 4.0f, loop_erf}, /* exact GELU's x/sqrt(2) */
    {"log", ot_logf_fn, logf, log, log_special, 0.0f, 16.0f, loop_log},
    {"log1p", ot_log1pf_fn, log1pf, log1p, log1p_special, -1.0f, 16.0f, loop_log1p},
    {"expm1", ot_expm1f_fn, expm1f, expm1, expm1_special, -10.0f, 10.0f, loop_expm1},
    {"sin", ot_sinf_fn, sinf, sin, sin_special, -100.0f, 100.0f, loop_sin}, /* rotary angles */
    {"cos", ot_cosf_fn, cosf, cos, cos_special, -100.0f, 100.0f, loop_cos},
    {"tan", ot_tanf_fn, tanf, tan, sin_special, -1.5f, 1.5f, loop_tan},
    {"cbrt", ot_cbrtf_fn, cbrtf, cbrt, cbrt_special, -1000.0f, 1000.0f, loop_cbrt},
};
static const vfn *fn_cur = &fns[0];

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* the ulp of the float binade holding |r| (subnormal spacing below FLT_MIN) */
static double ulp_at(double r) {
    int e;
    frexp(fabs(r), &e);
    return ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}

static uint64_t g_stride = 1; /* --stride K: every K-th bit pattern (1: all of them) */

typedef struct part {
    uint64_t lo, hi;
    double worst;
    uint32_t worst_x;
    uint64_t exact, bad_special, differ_libm, numbers; /* numbers: inputs with a number result */
    uint32_t far_libm; /* the largest distance from glibc's tanhf, in representable floats */
} part;

static void *ulp_part(void *arg) {
    part *p = arg;
    for (uint64_t i = p->lo; i < p->hi; i += g_stride) {
        uint32_t u = (uint32_t)i;
        float x = from_bits(u), y = fn_cur->ot(x), want;
        uint32_t uy = to_bits(y);
        if (isnan(x)) {
            if (!isnan(y) || !(uy & 0x400000u) || (uy & 0x80000000u) != (u & 0x80000000u))
                p->bad_special++;
            continue;
        }
        double r = fn_cur->ref((double)x);
        if (fn_cur->special(x, &want) && (isnan(want) ? !isnan(y) : uy != to_bits(want)))
            p->bad_special++;
        if (isnan(y)) { /* NaN where the function is NaN: checked above */
            if (!isnan(r)) p->bad_special++;
            continue;
        }
        p->numbers++;
        if ((float)r == y) p->exact++;
        uint32_t ul = to_bits(fn_cur->libm(x));
        if (ul != uy) {
            p->differ_libm++;
            uint32_t d = ul > uy ? ul - uy : uy - ul; /* the same sign where both are numbers */
            if (d > p->far_libm) p->far_libm = d;
        }
        /* an overflow to inf where the function rounds to inf: no error */
        double err = isinf(y) && (float)r == y ? 0.0 : fabs((double)y - r) / ulp_at(r);
        if (err > p->worst) {
            p->worst = err;
            p->worst_x = u;
        }
    }
    return NULL;
}

static int run_ulp(int threads, int json) {
    if (threads < 1 || threads > 64) threads = 2;
    part ps[64];
    pthread_t th[64];
    uint64_t total = 1ull << 32;
    for (int t = 0; t < threads; t++) {
        memset(&ps[t], 0, sizeof ps[t]);
        ps[t].lo = total * (uint64_t)t / (uint64_t)threads;
        ps[t].lo += (g_stride - ps[t].lo % g_stride) % g_stride; /* multiples of the stride */
        ps[t].hi = total * (uint64_t)(t + 1) / (uint64_t)threads;
        if (pthread_create(&th[t], NULL, ulp_part, &ps[t]) != 0) return 1;
    }
    part all = {0};
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        if (ps[t].worst > all.worst) {
            all.worst = ps[t].worst;
            all.worst_x = ps[t].worst_x;
        }
        all.exact += ps[t].exact;
        all.numbers += ps[t].numbers;
        all.bad_special += ps[t].bad_special;
        all.differ_libm += ps[t].differ_libm;
        if (ps[t].far_libm > all.far_libm) all.far_libm = ps[t].far_libm;
    }
    float wx = from_bits(all.worst_x);
    uint64_t nonnan = all.numbers; /* x and f(x) not NaN */
    if (json) {
        printf("{\"fn\": \"%s\", \"stride\": %llu, \"max_ulp\": %.4f, \"worst_x\": \"%a\", "
               "\"correctly_rounded\": %llu, \"non_nan\": %llu, \"bad_special\": %llu, "
               "\"differ_libm\": %llu, \"far_libm_ulp\": %u}\n",
               fn_cur->name, (unsigned long long)g_stride, all.worst, (double)wx,
               (unsigned long long)all.exact, (unsigned long long)nonnan,
               (unsigned long long)all.bad_special, (unsigned long long)all.differ_libm,
               all.far_libm);
        return all.bad_special ? 1 : 0;
    }
    printf("optitpu %sf over %s: max error %.4f ulp at x = %a (%.9g): got %a, %s %a\n",
           fn_cur->name, g_stride == 1 ? "all 2^32 inputs" : "every --stride-th bit pattern",
           all.worst, (double)wx, (double)wx, (double)fn_cur->ot(wx), fn_cur->name,
           fn_cur->ref((double)wx));
    printf("correctly rounded on %llu of %llu inputs with a number result (%.4f %%); special "
           "values wrong: "
           "%llu\n",
           (unsigned long long)all.exact, (unsigned long long)nonnan,
           100.0 * (double)all.exact / (double)nonnan, (unsigned long long)all.bad_special);
    printf("differs from glibc's %sf on %llu inputs (%.4f %%), by at most %u ulp\n", fn_cur->name,
           (unsigned long long)all.differ_libm, 100.0 * (double)all.differ_libm / (double)nonnan,
           all.far_libm);
    return all.bad_special ? 1 : 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* glibc's function through a pointer: a call per element either way (it does not vectorize) */
__attribute__((noinline)) static void loop_libm(const float *x, float *y, int64_t n) {
    float (*f)(float) = fn_cur->libm;
    for (int64_t i = 0; i < n; i++) y[i] = f(x[i]);
}

static int run_speed(int64_t n, int reps, int json) {
    if (n < 1 || reps < 1 || reps > 1000) return 2;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    double *to = malloc((size_t)reps * sizeof *to), *tl = malloc((size_t)reps * sizeof *tl);
    if (!x || !y || !to || !tl) return 1;
    uint64_t g = 0x9e3779b97f4a7c15ull;
    double lo = fn_cur->lo, w = (double)fn_cur->hi - lo;
    for (int64_t i = 0; i < n; i++) { /* uniform in [lo, hi) */
        g = g * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(g >> 40) * 0x1p-24 * w + lo);
    }
    fn_cur->loop(x, y, n); /* warm-up: page in y */
    loop_libm(x, y, n);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        fn_cur->loop(x, y, n);
        double t1 = now_s();
        loop_libm(x, y, n);
        double t2 = now_s();
        to[r] = t1 - t0;
        tl[r] = t2 - t1;
    }
    qsort(to, (size_t)reps, sizeof *to, cmp_d);
    qsort(tl, (size_t)reps, sizeof *tl, cmp_d);
    double mo = to[reps / 2], ml = tl[reps / 2];
    if (json)
        printf("{\"fn\": \"%s\", \"n\": %lld, \"reps\": %d, \"ot_melem_s\": %.1f, "
               "\"libm_melem_s\": %.1f, \"ratio\": %.2f}\n",
               fn_cur->name, (long long)n, reps, (double)n / mo * 1e-6, (double)n / ml * 1e-6,
               ml / mo);
    else
        printf("%s f32, %lld elements, 1 thread, median of %d: optitpu %sf %.1f Melem/s (%.2f ms), "
               "glibc %sf %.1f Melem/s (%.2f ms), ratio %.2fx\n",
               fn_cur->name, (long long)n, reps, fn_cur->name, (double)n / mo * 1e-6, mo * 1e3,
               fn_cur->name, (double)n / ml * 1e-6, ml * 1e3, ml / mo);
    free(x);
    free(y);
    free(to);
    free(tl);
    return 0;
}

/* ---- sampled: f32 pow and atan2, the f64 functions ----------------------------------------- */

/* one sampled function: ours and glibc's (computed in the function's type, returned widened),
 * the long double reference, the speed test's ranges (the second operand's for pow and atan2),
 * and its loops */
typedef struct sfn {
    const char *name;
    int f64, arity;
    double (*ot)(double, double);
    double (*libm)(double, double);
    long double (*ref)(long double, long double);
    double lo, hi, lo2, hi2;
    void (*loop)(const void *a, const void *b, void *y, int64_t n);
    void (*loop_libm)(const void *a, const void *b, void *y, int64_t n);
} sfn;

#define BV_S1(nm, T, otf, lf, rf)                                                                  \
    static double s_ot_##nm(double a, double b) {                                                  \
        (void)b;                                                                                   \
        return (double)otf((T)a);                                                                  \
    }                                                                                              \
    static double s_lm_##nm(double a, double b) {                                                  \
        (void)b;                                                                                   \
        return (double)lf((T)a);                                                                   \
    }                                                                                              \
    static long double s_rf_##nm(long double a, long double b) {                                   \
        (void)b;                                                                                   \
        return rf(a);                                                                              \
    }                                                                                              \
    __attribute__((noinline, flatten)) static void s_lo_##nm(const void *a, const void *b,         \
                                                             void *y, int64_t n) {                 \
        (void)b;                                                                                   \
        const T *x = a;                                                                            \
        T *o = y;                                                                                  \
        for (int64_t i = 0; i < n; i++) o[i] = otf(x[i]);                                          \
    }                                                                                              \
    __attribute__((noinline)) static void s_ll_##nm(const void *a, const void *b, void *y,         \
                                                    int64_t n) {                                   \
        (void)b;                                                                                   \
        T (*volatile f)(T) = lf; /* a call per element, as glibc's float loops above */            \
        T (*g)(T) = f;                                                                             \
        const T *x = a;                                                                            \
        T *o = y;                                                                                  \
        for (int64_t i = 0; i < n; i++) o[i] = g(x[i]);                                            \
    }
#define BV_S2(nm, T, otf, lf, rf)                                                                  \
    static double s_ot_##nm(double a, double b) {                                                  \
        return (double)otf((T)a, (T)b);                                                            \
    }                                                                                              \
    static double s_lm_##nm(double a, double b) {                                                  \
        return (double)lf((T)a, (T)b);                                                             \
    }                                                                                              \
    static long double s_rf_##nm(long double a, long double b) {                                   \
        return rf(a, b);                                                                           \
    }                                                                                              \
    __attribute__((noinline, flatten)) static void s_lo_##nm(const void *a, const void *b,         \
                                                             void *y, int64_t n) {                 \
        const T *x = a, *x2 = b;                                                                   \
        T *o = y;                                                                                  \
        for (int64_t i = 0; i < n; i++) o[i] = otf(x[i], x2[i]);                                   \
    }                                                                                              \
    __attribute__((noinline)) static void s_ll_##nm(const void *a, const void *b, void *y,         \
                                                    int64_t n) {                                   \
        T (*volatile f)(T, T) = lf;                                                                \
        T (*g)(T, T) = f;                                                                          \
        const T *x = a, *x2 = b;                                                                   \
        T *o = y;                                                                                  \
        for (int64_t i = 0; i < n; i++) o[i] = g(x[i], x2[i]);                                     \
    }
/* f32 pow compared with powf(double) as the reference: its double result is within 2^-29 ulp */
static long double powl_d(long double a, long double b) {
    return (long double)pow((double)a, (double)b);
}
static long double atan2l_d(long double a, long double b) {
    return (long double)atan2((double)a, (double)b);
}
static long double logistic_l(long double x) {
    return 1.0L / (1.0L + expl(-x));
}
BV_S2(powf, float, ot_vm_powf1, powf, powl_d)
BV_S2(atan2f, float, ot_vm_atan2f, atan2f, atan2l_d)
BV_S1(exp, double, ot_expd, exp, expl)
BV_S1(expm1, double, ot_expm1d, expm1, expm1l)
BV_S1(log, double, ot_logd, log, logl)
BV_S1(log1p, double, ot_log1pd, log1p, log1pl)
BV_S1(tanh, double, ot_tanhd, tanh, tanhl)
BV_S1(erf, double, ot_erfd, erf, erfl)
BV_S1(sin, double, ot_vm_sin, sin, sinl)
BV_S1(cos, double, ot_vm_cos, cos, cosl)
BV_S1(tan, double, ot_vm_tan, tan, tanl)
BV_S1(cbrt, double, ot_cbrtd, cbrt, cbrtl)
BV_S2(pow, double, ot_vm_pow1, pow, powl)
BV_S2(atan2, double, ot_vm_atan2, atan2, atan2l)
static double logistic_glibc(double x) {
    return 1.0 / (1.0 + exp(-x));
}
/* f64 logistic as generated code computes it (src/codegen/emit.c) */
static inline double logistic_ot(double x) {
    return 1.0 / (1.0 + ot_expd(-x));
}
BV_S1(logistic, double, logistic_ot, logistic_glibc, logistic_l)

#define BV_SE(nm, f64, ar, lo, hi, lo2, hi2)                                                       \
    { #nm, f64, ar, s_ot_##nm, s_lm_##nm, s_rf_##nm, lo, hi, lo2, hi2, s_lo_##nm, s_ll_##nm }
static const sfn sfns[] = {
    {"pow", 0, 2, s_ot_powf, s_lm_powf, s_rf_powf, 0, 10, -4, 4, s_lo_powf, s_ll_powf},
    {"atan2", 0, 2, s_ot_atan2f, s_lm_atan2f, s_rf_atan2f, -10, 10, -10, 10, s_lo_atan2f,
     s_ll_atan2f},
    BV_SE(exp, 1, 1, -50, 50, 0, 0),
    BV_SE(expm1, 1, 1, -10, 10, 0, 0),
    BV_SE(log, 1, 1, 0, 16, 0, 0),
    BV_SE(log1p, 1, 1, -1, 16, 0, 0),
    BV_SE(tanh, 1, 1, -6, 6, 0, 0),
    BV_SE(erf, 1, 1, -4, 4, 0, 0),
    BV_SE(sin, 1, 1, -100, 100, 0, 0),
    BV_SE(cos, 1, 1, -100, 100, 0, 0),
    BV_SE(tan, 1, 1, -1.5, 1.5, 0, 0),
    BV_SE(cbrt, 1, 1, -1000, 1000, 0, 0),
    BV_SE(pow, 1, 2, 0, 10, -4, 4),
    BV_SE(atan2, 1, 2, -10, 10, -10, 10),
    BV_SE(logistic, 1, 1, -20, 20, 0, 0),
};
static const sfn *sfn_cur;

static uint64_t rng(uint64_t *g) {
    *g = *g * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t z = *g ^ (*g >> 29);
    return z * 0xbf58476d1ce4e5b9ull ^ (z >> 32);
}

/* a sample input: half uniform in [lo, hi), a quarter any bit pattern of the type, a quarter a
 * random sign and exponent (every binade equally) */
static double sample(uint64_t *g, int f64, double lo, double hi) {
    uint64_t r = rng(g);
    switch (r & 3) {
    case 0:
    case 1: return lo + (double)(r >> 11) * 0x1p-53 * (hi - lo);
    case 2:
        if (f64) {
            double d;
            uint64_t u = rng(g);
            memcpy(&d, &u, 8);
            return d;
        } else {
            float f;
            uint32_t u = (uint32_t)(r >> 32);
            memcpy(&f, &u, 4);
            return f;
        }
    default: {
        int span = f64 ? 2098 : 276, lo_e = f64 ? -1074 : -149;
        double m = 1.0 + (double)(rng(g) >> 12) * 0x1p-52;
        double v = ldexp(m, lo_e + (int)((r >> 8) % (uint64_t)span));
        v = f64 ? v : (double)(float)v;
        return (r >> 7) & 1 ? -v : v;
    }
    }
}

static int is_nan_d(double v) {
    return v != v;
}

/* the ulp of the binade of |r| in the function's type */
static double ulp_t(long double r, int f64) {
    int e;
    frexpl(fabsl(r), &e);
    int p = f64 ? 53 : 24, mn = f64 ? -1074 : -149;
    return ldexp(1.0, e - p < mn ? mn : e - p);
}

static int run_ulp_sampled(int64_t n, int json) {
    const sfn *f = sfn_cur;
    int f64 = f->f64;
    /* edge cases: each against glibc's result (C99 Annex F), all pairs for two operands */
    static const double edge[] = {0.0,      -0.0,   INFINITY, -INFINITY, NAN,     -NAN,    1.0,
                                  -1.0,     0.5,    -0.5,     2.0,       -2.0,    3.0,     -3.0,
                                  2.5,      -2.5,   1e-310,   -1e-310,   5e-324,  DBL_MIN, DBL_MAX,
                                  -DBL_MAX, 1e-40,  -1e-40,   FLT_MIN,   FLT_MAX, 710.0,   -745.5,
                                  89.0,     -104.0, 1e300,    0x1p-30};
    int ne = (int)(sizeof edge / sizeof edge[0]), printed = 0;
    int64_t edge_n = 0, edge_diff = 0;
    for (int i = 0; i < ne; i++)
        for (int j = 0; j < (f->arity == 2 ? ne : 1); j++) {
            double a = f64 ? edge[i] : (double)(float)edge[i];
            double b = f64 ? edge[j] : (double)(float)edge[j];
            double got = f->ot(a, b), lib = f->libm(a, b);
            edge_n++;
            /* a special value is one of NaN, ±inf, ±0; a finite nonzero result of the other
             * sign counts too. Ordinary results differ by rounding: the sample measures those */
            int sg = is_nan_d(got) || isinf(got) || got == 0,
                sl = is_nan_d(lib) || isinf(lib) || lib == 0;
            int same = (is_nan_d(got) && is_nan_d(lib)) || memcmp(&got, &lib, 8) == 0 ||
                       (!sg && !sl && signbit(got) == signbit(lib));
            if (!same) {
                edge_diff++;
                if (!json && printed++ < 40 && f->arity == 2)
                    printf("edge: %s(%a, %a) = %a, glibc %a\n", f->name, a, b, got, lib);
                else if (!json && printed <= 40)
                    printf("edge: %s(%a) = %a, glibc %a\n", f->name, a, got, lib);
            }
            if (is_nan_d(a) && !is_nan_d(got)) {
                if (!(f->arity == 2 && got == 1.0)) edge_diff++; /* pow(NaN, 0) = 1 */
            }
        }
    uint64_t g = 0x243f6a8885a308d3ull;
    double worst = 0, worst_a = 0, worst_b = 0, worst_normal = 0;
    int64_t numbers = 0, exact = 0, differ = 0, bad_nan = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = sample(&g, f64, f->lo, f->hi);
        double b = f->arity == 2 ? sample(&g, f64, f->lo2, f->hi2) : 0.0;
        if (!f64) { /* f32 operands: the reference takes the same floats */
            a = (double)(float)a;
            b = (double)(float)b;
        }
        double got = f->ot(a, b);
        long double r = f->ref((long double)a, (long double)b);
        if (is_nan_d(got) || isnan(r)) {
            if (is_nan_d(got) != (int)isnan(r)) bad_nan++;
            continue;
        }
        numbers++;
        double lib = f->libm(a, b);
        if (memcmp(&got, &lib, 8) != 0) differ++;
        double rr = f64 ? (double)r : (double)(float)r;
        if (rr == got) exact++;
        double err =
            isinf(got) && rr == got ? 0.0 : (double)(fabsl((long double)got - r) / ulp_t(r, f64));
        if (err > worst) {
            worst = err;
            worst_a = a;
            worst_b = b;
        }
        /* results the default flush-to-zero rules keep: the exact value normal */
        if (err > worst_normal && fabsl(r) >= (f64 ? (long double)DBL_MIN : (long double)FLT_MIN))
            worst_normal = err;
    }
    if (json) {
        printf("{\"fn\": \"%s\", \"dtype\": \"%s\", \"samples\": %lld, \"max_ulp\": %.4f, "
               "\"worst_a\": \"%a\", \"worst_b\": \"%a\", \"correctly_rounded\": %lld, "
               "\"numbers\": %lld, \"differ_libm\": %lld, \"nan_mismatch\": %lld, "
               "\"edge_cases\": %lld, \"edge_differ_libm\": %lld, \"max_ulp_normal\": %.4f}\n",
               f->name, f64 ? "f64" : "f32", (long long)n, worst, worst_a, worst_b,
               (long long)exact, (long long)numbers, (long long)differ, (long long)bad_nan,
               (long long)edge_n, (long long)edge_diff, worst_normal);
    } else {
        char at[80];
        if (f->arity == 2)
            snprintf(at, sizeof at, "(%a, %a)", worst_a, worst_b);
        else
            snprintf(at, sizeof at, "%a", worst_a);
        printf("%s %s over %lld sampled inputs: max error %.4f ulp at x = %s; correctly rounded "
               "on %lld of %lld (%.3f %%); differs from glibc on %lld (%.3f %%); NaN where the "
               "reference is not (or not where it is): %lld\n",
               f->name, f64 ? "f64" : "f32", (long long)n, worst, at, (long long)exact,
               (long long)numbers, 100.0 * (double)exact / (double)(numbers ? numbers : 1),
               (long long)differ, 100.0 * (double)differ / (double)(numbers ? numbers : 1),
               (long long)bad_nan);
        printf("max error where the exact result is normal: %.4f ulp\n", worst_normal);
        printf("edge cases: %lld, %lld special values (NaN, ±inf, ±0, sign) differ from glibc's "
               "(NaN bits aside)\n",
               (long long)edge_n, (long long)edge_diff);
    }
    return 0;
}

static int run_speed_sampled(int64_t n, int reps, int json) {
    const sfn *f = sfn_cur;
    size_t es = f->f64 ? 8 : 4;
    if (n < 1 || reps < 1 || reps > 1000) return 2;
    char *a = malloc((size_t)n * es), *b = malloc((size_t)n * es), *y = malloc((size_t)n * es);
    double *to = malloc((size_t)reps * sizeof *to), *tl = malloc((size_t)reps * sizeof *tl);
    if (!a || !b || !y || !to || !tl) return 1;
    uint64_t g = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; i++) { /* uniform in the ranges */
        double va = f->lo + (double)(rng(&g) >> 11) * 0x1p-53 * (f->hi - f->lo);
        double vb = f->lo2 + (double)(rng(&g) >> 11) * 0x1p-53 * (f->hi2 - f->lo2);
        if (f->f64) {
            ((double *)a)[i] = va;
            ((double *)b)[i] = vb;
        } else {
            ((float *)a)[i] = (float)va;
            ((float *)b)[i] = (float)vb;
        }
    }
    f->loop(a, b, y, n); /* warm-up */
    f->loop_libm(a, b, y, n);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        f->loop(a, b, y, n);
        double t1 = now_s();
        f->loop_libm(a, b, y, n);
        double t2 = now_s();
        to[r] = t1 - t0;
        tl[r] = t2 - t1;
    }
    qsort(to, (size_t)reps, sizeof *to, cmp_d);
    qsort(tl, (size_t)reps, sizeof *tl, cmp_d);
    double mo = to[reps / 2], ml = tl[reps / 2];
    const char *dt = f->f64 ? "f64" : "f32";
    if (json)
        printf("{\"fn\": \"%s\", \"dtype\": \"%s\", \"n\": %lld, \"reps\": %d, \"ot_melem_s\": "
               "%.1f, \"libm_melem_s\": %.1f, \"ratio\": %.2f}\n",
               f->name, dt, (long long)n, reps, (double)n / mo * 1e-6, (double)n / ml * 1e-6,
               ml / mo);
    else
        printf("%s %s, %lld elements, 1 thread, median of %d: optitpu %.1f Melem/s (%.2f ms), "
               "glibc %.1f Melem/s (%.2f ms), ratio %.2fx\n",
               f->name, dt, (long long)n, reps, (double)n / mo * 1e-6, mo * 1e3,
               (double)n / ml * 1e-6, ml * 1e3, ml / mo);
    free(a);
    free(b);
    free(y);
    free(to);
    free(tl);
    return 0;
}

/* ---- variants: SLEEF's deterministic classes agree across vector widths ---------------------- */

#if BV_VEC && defined(__AVX512F__)
/* every variant of a class on the same inputs, compared bit for bit with the class's scalar one
 * after the fix-ups both sides apply (OT_VMATH_DEF: raw, only NaN bits differ: log's AVX-512
 * variants give another NaN for a negative x, cbrt's cinz ones for a NaN x): finz (scalar
 * purecfma, AVX2 128-bit, AVX2, AVX-512) and cinz (scalar purec, SSE4, AVX, AVX-512 without
 * FMA); counts the inputs on which any differs */
#define BV_VAR_DECL_(name, stem, arity, T) BV_VAR_DECL_##T(stem, arity)
#define BV_VD_(T, V, stem, W, VAR, args)   V Sleef_##stem##W##_u10##VAR args;
#define BV_VAR_DECL_float(stem, a)                                                                 \
    BV_VD_(float, bv_f4, finz_##stem, 4, avx2128, BV_ARGS##a(bv_f4))                               \
    BV_VD_(float, bv_f16, cinz_##stem, 16, avx512fnofma, BV_ARGS##a(bv_f16))                       \
    BV_VD_(float, bv_f8, cinz_##stem, 8, avx, BV_ARGS##a(bv_f8))                                   \
    BV_VD_(float, bv_f4, cinz_##stem, 4, sse4, BV_ARGS##a(bv_f4))                                  \
    BV_VD_(float, float, cinz_##stem, 1, purec, BV_ARGS##a(float))
#define BV_VAR_DECL_double(stem, a)                                                                \
    BV_VD_(double, bv_d2, finz_##stem, 2, avx2128, BV_ARGS##a(bv_d2))                              \
    BV_VD_(double, bv_d8, cinz_##stem, 8, avx512fnofma, BV_ARGS##a(bv_d8))                         \
    BV_VD_(double, bv_d4, cinz_##stem, 4, avx, BV_ARGS##a(bv_d4))                                  \
    BV_VD_(double, bv_d2, cinz_##stem, 2, sse4, BV_ARGS##a(bv_d2))                                 \
    BV_VD_(double, double, cinz_##stem, 1, purec, BV_ARGS##a(double))
#define BV_ARGS1(V) (V)
#define BV_ARGS2(V) (V, V)
OT_VMATH_LIST(BV_VAR_DECL_)

/* one check: lanes L of vector type V from variant F against the scalar S on x[i..i+16) */
#define BV_CHK1(T, V, L, F, S)                                                                     \
    for (int o = 0; o < 16; o += L) {                                                              \
        V va, vr;                                                                                  \
        memcpy(&va, x + o, sizeof va);                                                             \
        vr = F(va);                                                                                \
        for (int l = 0; l < L; l++) {                                                              \
            T s = OT_VM_FIX_(T)(x[o + l], x[o + l], S(x[o + l]));                                  \
            T v = OT_VM_FIX_(T)(x[o + l], x[o + l], vr[l]);                                        \
            if (memcmp(&s, &v, sizeof s)) bad = 1;                                                 \
        }                                                                                          \
    }
#define BV_CHK2(T, V, L, F, S)                                                                     \
    for (int o = 0; o < 16; o += L) {                                                              \
        V va, vb, vr;                                                                              \
        memcpy(&va, x + o, sizeof va);                                                             \
        memcpy(&vb, y + o, sizeof vb);                                                             \
        vr = F(va, vb);                                                                            \
        for (int l = 0; l < L; l++) {                                                              \
            T s = OT_VM_FIX_(T)(x[o + l], y[o + l], S(x[o + l], y[o + l]));                        \
            T v = OT_VM_FIX_(T)(x[o + l], y[o + l], vr[l]);                                        \
            if (memcmp(&s, &v, sizeof s)) bad = 1;                                                 \
        }                                                                                          \
    }
#define BV_VAR_FN_(name, stem, arity, T) BV_VAR_FN_##T(name, stem, arity)
#define BV_VAR_FN_float(name, stem, a)                                                             \
    static int64_t var_##name(const float *x, const float *y, int64_t n16) {                       \
        int64_t differ = 0;                                                                        \
        (void)y;                                                                                   \
        for (int64_t k = 0; k < n16; k++, x += 16, y += 16) {                                      \
            int bad = 0;                                                                           \
            BV_CHK##a(float, bv_f16, 16, Sleef_finz_##stem##16_u10avx512f,                         \
                      Sleef_finz_##stem##1_u10purecfma)                                            \
                BV_CHK##a(float, bv_f8, 8, Sleef_finz_##stem##8_u10avx2,                           \
                          Sleef_finz_##stem##1_u10purecfma)                                        \
                    BV_CHK##a(float, bv_f4, 4, Sleef_finz_##stem##4_u10avx2128,                    \
                              Sleef_finz_##stem##1_u10purecfma)                                    \
                        BV_CHK##a(float, bv_f16, 16, Sleef_cinz_##stem##16_u10avx512fnofma,        \
                                  Sleef_cinz_##stem##1_u10purec)                                   \
                            BV_CHK##a(float, bv_f8, 8, Sleef_cinz_##stem##8_u10avx,                \
                                      Sleef_cinz_##stem##1_u10purec)                               \
                                BV_CHK##a(float, bv_f4, 4, Sleef_cinz_##stem##4_u10sse4,           \
                                          Sleef_cinz_##stem##1_u10purec) differ += bad;            \
        }                                                                                          \
        return differ;                                                                             \
    }
#define BV_VAR_FN_double(name, stem, a)                                                            \
    static int64_t var_##name(const double *x, const double *y, int64_t n16) {                     \
        int64_t differ = 0;                                                                        \
        (void)y;                                                                                   \
        for (int64_t k = 0; k < n16; k++, x += 16, y += 16) {                                      \
            int bad = 0;                                                                           \
            BV_CHK##a(double, bv_d8, 8, Sleef_finz_##stem##8_u10avx512f,                           \
                      Sleef_finz_##stem##1_u10purecfma)                                            \
                BV_CHK##a(double, bv_d4, 4, Sleef_finz_##stem##4_u10avx2,                          \
                          Sleef_finz_##stem##1_u10purecfma)                                        \
                    BV_CHK##a(double, bv_d2, 2, Sleef_finz_##stem##2_u10avx2128,                   \
                              Sleef_finz_##stem##1_u10purecfma)                                    \
                        BV_CHK##a(double, bv_d8, 8, Sleef_cinz_##stem##8_u10avx512fnofma,          \
                                  Sleef_cinz_##stem##1_u10purec)                                   \
                            BV_CHK##a(double, bv_d4, 4, Sleef_cinz_##stem##4_u10avx,               \
                                      Sleef_cinz_##stem##1_u10purec)                               \
                                BV_CHK##a(double, bv_d2, 2, Sleef_cinz_##stem##2_u10sse4,          \
                                          Sleef_cinz_##stem##1_u10purec) differ += bad;            \
        }                                                                                          \
        return differ;                                                                             \
    }
/* the scalar variants, declared without the simd attribute (the ones above carry it) */
#define BV_SC_DECL_(name, stem, arity, T) BV_SC_DECL##arity##_(stem, T)
#define BV_SC_DECL1_(stem, T)             T Sleef_finz_##stem##1_u10purecfma(T);
#define BV_SC_DECL2_(stem, T)             T Sleef_finz_##stem##1_u10purecfma(T, T);
OT_VMATH_LIST(BV_SC_DECL_)
OT_VMATH_LIST(BV_VAR_FN_)

/* inputs: the sample mix of the ulp runs, the edge cases first */
static int run_variants(int64_t n, int json) {
    int64_t n16 = (n + 15) / 16, m = n16 * 16;
    double *xd = malloc((size_t)m * 8), *yd = malloc((size_t)m * 8);
    float *xf = malloc((size_t)m * 4), *yf = malloc((size_t)m * 4);
    if (!xd || !yd || !xf || !yf) return 1;
    static const double edge[] = {0.0,   -0.0,    INFINITY, -INFINITY, NAN,    1.0,     -1.0,
                                  0.5,   2.0,     -2.5,     1e-310,    5e-324, DBL_MIN, DBL_MAX,
                                  1e-40, FLT_MAX, 710.0,    -745.5,    89.0,   -104.0,  1e300};
    uint64_t g = 0x13198a2e03707344ull;
    for (int64_t i = 0; i < m; i++) {
        int e = (int)(sizeof edge / sizeof edge[0]);
        xd[i] = i < e ? edge[i] : sample(&g, 1, -100, 100);
        yd[i] = i < e * e ? edge[i % e] : sample(&g, 1, -4, 4);
        xf[i] = i < e ? (float)edge[i] : (float)sample(&g, 0, -100, 100);
        yf[i] = i < e * e ? (float)edge[i % e] : (float)sample(&g, 0, -4, 4);
        if (i >= e && i < e * e) { /* all pairs of edge cases for pow and atan2 */
            xd[i] = edge[i / e];
            xf[i] = (float)edge[i / e];
        }
    }
    int64_t total = 0;
#define BV_RUN_(name, stem, arity, T)                                                              \
    {                                                                                              \
        int64_t d = BV_RUN_##T(name);                                                              \
        total += d;                                                                                \
        if (json)                                                                                  \
            printf("{\"fn\": \"%s\", \"inputs\": %lld, \"differ\": %lld}\n", #name, (long long)m,  \
                   (long long)d);                                                                  \
        else                                                                                       \
            printf("%-7s %lld inputs: %lld on which a finz or cinz vector variant differs from "   \
                   "its class's scalar one\n",                                                     \
                   #name, (long long)m, (long long)d);                                             \
    }
#define BV_RUN_float(name)  var_##name(xf, yf, n16)
#define BV_RUN_double(name) var_##name(xd, yd, n16)
    OT_VMATH_LIST(BV_RUN_)
    free(xd);
    free(yd);
    free(xf);
    free(yf);
    return total ? 1 : 0;
}
#else
static int run_variants(int64_t n, int json) {
    (void)n;
    (void)json;
    fprintf(stderr, "bench_vmath variants: needs a build for AVX-512 with FMA (GCC)\n");
    return 77;
}
#endif

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_vmath ulp [--fn F] [--threads N] [--json] | speed [--fn F] "
                        " [--n N] [--reps R] [--json]\n");
        return 2;
    }
    int threads = 2, reps = 11, json = 0, f64 = 0;
    const char *fname = "tanh";
    int64_t n = 1 << 24;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = 1;
            continue;
        }
        if (i + 1 >= argc) return 2;
        if (!strcmp(argv[i], "--fn")) {
            fname = argv[++i];
        } else if (!strcmp(argv[i], "--dtype")) {
            const char *d = argv[++i];
            if (strcmp(d, "f32") && strcmp(d, "f64")) return 2;
            f64 = !strcmp(d, "f64");
        } else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--stride")) {
            long long k = atoll(argv[++i]);
            g_stride = k > 0 ? (uint64_t)k : 1;
        } else if (!strcmp(argv[i], "--n"))
            n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[++i]);
        else
            return 2;
    }
    if (!strcmp(argv[1], "variants")) return run_variants(n, json);
    /* f32 unary: the 2^32 harness; f32 pow/atan2 and every f64 function: sampled */
    fn_cur = NULL;
    sfn_cur = NULL;
    for (size_t k = 0; !f64 && k < sizeof fns / sizeof fns[0]; k++)
        if (!strcmp(fname, fns[k].name)) fn_cur = &fns[k];
    for (size_t k = 0; !fn_cur && k < sizeof sfns / sizeof sfns[0]; k++)
        if (!strcmp(fname, sfns[k].name) && sfns[k].f64 == f64) sfn_cur = &sfns[k];
    if (!fn_cur && !sfn_cur) {
        fprintf(stderr, "bench_vmath: no %s function %s\n", f64 ? "f64" : "f32", fname);
        return 2;
    }
    if (!strcmp(argv[1], "ulp")) return fn_cur ? run_ulp(threads, json) : run_ulp_sampled(n, json);
    if (!strcmp(argv[1], "speed"))
        return fn_cur ? run_speed(n, reps, json) : run_speed_sampled(n, reps, json);
    return 2;
}

#if BV_PD_VEC
#define OT_VM_W __attribute__((visibility("hidden")))
OT_POWD_V8_DEF
#endif
