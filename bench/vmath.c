/* The library's own f32 math functions (ot_tanhf, ot_erff, ... in src/exec/expf_poly.h, shared by
 * the reference evaluator and generated code): accuracy over every f32 input, and throughput
 * against glibc's float function.
 *
 *   bench_vmath ulp [--fn F] [--threads N] [--json]   every one of the 2^32 inputs against F() in
 *                                                      double
 *   bench_vmath speed [--fn F] [--n N] [--reps R] [--json]   elements/s on N floats (16M), one
 *                                                              thread
 *
 * F is tanh (the default), erf, log, log1p, expm1, sin or cos. ulp: the reference is glibc's double
 * function (within 1 ulp of double, 2^-29 of a float ulp), so the error in float ulps printed (|got
 * - ref| / ulp(ref), ulp of the float binade of ref) is exact to about 1e-8 ulp; "correctly
 * rounded" counts inputs whose result equals ref rounded to float (that rounding is wrong only
 * where ref lies within 2^-53 of a float midpoint: rare, and it moves a count, not the maximum);
 * also how often and how far it differs from glibc's float function. NaN inputs must come back as a
 * quiet NaN with their sign, and each function's special values (±0, ±inf, its saturation and
 * x-itself ranges) are checked exactly. speed: medians of R passes over the same array, the
 * library's function and glibc's interleaved pass by pass, on inputs in the range the suite's
 * programs give it. Built with the generated code's flags (-O3 -march=native -fno-math-errno
 * -ffp-contract=off), so the loop is what a native fusion gets. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/expf_poly.h"

OT_EXPF_DEF
OT_TANHF_DEF
OT_ERFF_DEF
OT_LOGF_DEF
OT_EXPM1F_DEF
OT_SINCOSF_DEF

/* one function under test: the library's, glibc's float one, the double reference, its exact
 * special values (special() returns 1 and sets *want when x is one), and the speed test's range */
typedef struct vfn {
    const char *name;
    float (*ot)(float);
    float (*libm)(float);
    double (*ref)(double);
    int (*special)(float x, float *want);
    float lo, hi;
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
    return ot_sinf(x);
}

static float ot_cosf_fn(float x) {
    return ot_cosf(x);
}

/* sin: x itself below 2^-12 (±0 kept), NaN at ±inf */
static int sin_special(float x, float *want) {
    if (fabsf(x) < 0x1p-12f || isinf(x)) {
        *want = isinf(x) ? NAN : x;
        return 1;
    }
    return 0;
}

/* cos: 1 below 2^-12, NaN at ±inf */
static int cos_special(float x, float *want) {
    if (fabsf(x) < 0x1p-12f || isinf(x)) {
        *want = isinf(x) ? NAN : 1.0f;
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

static const vfn fns[] = {
    {"tanh", ot_tanhf_fn, tanhf, tanh, tanh_special, -6.0f, 6.0f}, /* GELU's tanh sees this */
    {"erf", ot_erff_fn, erff, erf, erf_special, -4.0f, 4.0f},      /* exact GELU's x/sqrt(2) */
    {"log", ot_logf_fn, logf, log, log_special, 0.0f, 16.0f},
    {"log1p", ot_log1pf_fn, log1pf, log1p, log1p_special, -1.0f, 16.0f},
    {"expm1", ot_expm1f_fn, expm1f, expm1, expm1_special, -10.0f, 10.0f},
    {"sin", ot_sinf_fn, sinf, sin, sin_special, -100.0f, 100.0f}, /* rotary embeddings' angles */
    {"cos", ot_cosf_fn, cosf, cos, cos_special, -100.0f, 100.0f},
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

typedef struct part {
    uint64_t lo, hi;
    double worst;
    uint32_t worst_x;
    uint64_t exact, bad_special, differ_libm, numbers; /* numbers: inputs with a number result */
    uint32_t far_libm; /* the largest distance from glibc's tanhf, in representable floats */
} part;

static void *ulp_part(void *arg) {
    part *p = arg;
    for (uint64_t i = p->lo; i < p->hi; i++) {
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
        printf("{\"fn\": \"%s\", \"inputs\": %llu, \"max_ulp\": %.4f, \"worst_x\": \"%a\", "
               "\"correctly_rounded\": %llu, \"non_nan\": %llu, \"bad_special\": %llu, "
               "\"differ_libm\": %llu, \"far_libm_ulp\": %u}\n",
               fn_cur->name, (unsigned long long)total, all.worst, (double)wx,
               (unsigned long long)all.exact, (unsigned long long)nonnan,
               (unsigned long long)all.bad_special, (unsigned long long)all.differ_libm,
               all.far_libm);
        return all.bad_special ? 1 : 0;
    }
    printf("ot_%sf over all 2^32 inputs: max error %.4f ulp at x = %a (%.9g): got %a, %s %a\n",
           fn_cur->name, all.worst, (double)wx, (double)wx, (double)fn_cur->ot(wx), fn_cur->name,
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

/* noinline: each loop is compiled (and vectorized) on its own, as in a native fusion */
__attribute__((noinline)) static void loop_ot_tanh(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ot_tanhf(x[i]);
}

__attribute__((noinline)) static void loop_ot_erf(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ot_erff(x[i]);
}

__attribute__((noinline)) static void loop_ot_log(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ot_logf(x[i]);
}

__attribute__((noinline)) static void loop_ot_log1p(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ot_log1pf(x[i]);
}

__attribute__((noinline)) static void loop_ot_expm1(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ot_expm1f(x[i]);
}

__attribute__((noinline)) static void loop_ot_sin(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ot_sinf(x[i]);
}

__attribute__((noinline)) static void loop_ot_cos(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ot_cosf(x[i]);
}

/* glibc's function through a pointer: a call per element either way (it does not vectorize) */
__attribute__((noinline)) static void loop_libm(const float *x, float *y, int64_t n) {
    float (*f)(float) = fn_cur->libm;
    for (int64_t i = 0; i < n; i++) y[i] = f(x[i]);
}

static void loop_ot(const float *x, float *y, int64_t n) {
    if (fn_cur->ot == ot_erff_fn)
        loop_ot_erf(x, y, n);
    else if (fn_cur->ot == ot_logf_fn)
        loop_ot_log(x, y, n);
    else if (fn_cur->ot == ot_log1pf_fn)
        loop_ot_log1p(x, y, n);
    else if (fn_cur->ot == ot_expm1f_fn)
        loop_ot_expm1(x, y, n);
    else if (fn_cur->ot == ot_sinf_fn)
        loop_ot_sin(x, y, n);
    else if (fn_cur->ot == ot_cosf_fn)
        loop_ot_cos(x, y, n);
    else
        loop_ot_tanh(x, y, n);
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
    loop_ot(x, y, n); /* warm-up: page in y */
    loop_libm(x, y, n);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        loop_ot(x, y, n);
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
        printf("%s f32, %lld elements, 1 thread, median of %d: ot_%sf %.1f Melem/s (%.2f ms), "
               "glibc %sf %.1f Melem/s (%.2f ms), ratio %.2fx\n",
               fn_cur->name, (long long)n, reps, fn_cur->name, (double)n / mo * 1e-6, mo * 1e3,
               fn_cur->name, (double)n / ml * 1e-6, ml * 1e3, ml / mo);
    free(x);
    free(y);
    free(to);
    free(tl);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_vmath ulp [--fn F] [--threads N] [--json] | speed [--fn F] "
                        " [--n N] [--reps R] [--json]\n");
        return 2;
    }
    int threads = 2, reps = 11, json = 0;
    int64_t n = 1 << 24;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = 1;
            continue;
        }
        if (i + 1 >= argc) return 2;
        if (!strcmp(argv[i], "--fn")) {
            const char *f = argv[++i];
            fn_cur = NULL;
            for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++)
                if (!strcmp(f, fns[k].name)) fn_cur = &fns[k];
            if (!fn_cur) return 2;
        } else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n"))
            n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[++i]);
        else
            return 2;
    }
    if (!strcmp(argv[1], "ulp")) return run_ulp(threads, json);
    if (!strcmp(argv[1], "speed")) return run_speed(n, reps, json);
    return 2;
}
