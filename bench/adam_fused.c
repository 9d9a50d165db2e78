/* Adam-style fused update through compile → execute against a hand-written fused C loop doing
 * the same math with the same threads, in the same run, beside the STREAM triad figure.
 *
 *   m' = b1*m + (1-b1)*g;  v' = b2*v + (1-b2)*g*g;  p' = p - lr * m' / (sqrt(v') + eps)
 *
 * optitpu: an HLO module with p, m, v donated (input_output_alias), compiled at -O2 into one
 * multi-output loop fusion that runs as native code (src/codegen), executed on a host device with
 * each step's outputs fed back as the next step's inputs (no copies, no allocation per step).
 * Baseline: the same update as one C loop over the same four arrays, split statically over the
 * same thread pool (ot_threadpool_default, OPTITPU_THREADS), compiled with the generated code's
 * flags (-O3 -march=native -fno-math-errno -ffp-contract=off). A second hand-written loop runs
 * under XLA's FTZ/DAZ as the generated code does (the CPU's modes on x86; its results are checked
 * to be bit-identical to the compiled module's). Both move 28 bytes per
 * parameter (read p, g, m, v; write p, m, v); GB/s = 28 N / step time. Medians over --reps steps
 * after two warm-up steps, optitpu and baseline interleaved rep by rep. ratio = optitpu /
 * hand-written (goal >= 0.8).
 *
 *   bench_adam_fused [--json] [--reps N] [--sizes 16M,128M] [--no-limits]
 * (--no-limits: no STREAM measurement, no rows against it)
 */
#include "optitpu/optitpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const float B1 = 0.9f, B2 = 0.999f, C1 = 0.1f, C2 = 0.001f, LR = 0.001f, EPS = 1e-8f;

typedef struct hand {
    float *p, *g, *m, *v;
} hand;

static void hand_range(void *ctx, int64_t b, int64_t e, int ith) {
    (void)ith;
    hand *h = ctx;
    float *restrict p = h->p, *restrict m = h->m, *restrict v = h->v;
    const float *restrict g = h->g;
    for (int64_t i = b; i < e; i++) {
        float mn = B1 * m[i] + C1 * g[i];
        float vn = B2 * v[i] + C2 * (g[i] * g[i]);
        m[i] = mn;
        v[i] = vn;
        p[i] = p[i] - LR * (mn / (sqrtf(vn) + EPS));
    }
}

/* The same update under XLA's CPU FTZ/DAZ semantics, as the generated code runs it: with the
 * CPU's flush-to-zero and denormals-are-zero modes set (x86 MXCSR) around the loop. Elsewhere,
 * flushing in software (a zero exponent field keeps only the sign). */
#if defined(__x86_64__)
#include <xmmintrin.h>
#define ftz(v) (v)
#else
static inline float ftz(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u &= ~((u & 0x7f800000u) == 0 ? 0x7fffffffu : 0u);
    memcpy(&v, &u, 4);
    return v;
}
#endif

/* Bit-identical to the compiled module. */
static void hand_range_ftz(void *ctx, int64_t b, int64_t e, int ith) {
    (void)ith;
    hand *h = ctx;
    float *restrict p = h->p, *restrict m = h->m, *restrict v = h->v;
    const float *restrict g = h->g;
#if defined(__x86_64__)
    const unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u);
    __asm__ volatile("" ::: "memory");
#endif
    for (int64_t i = b; i < e; i++) {
        float gi = ftz(g[i]);
        float mn = ftz(ftz(B1 * ftz(m[i])) + ftz(C1 * gi));
        float vn = ftz(ftz(B2 * ftz(v[i])) + ftz(C2 * ftz(gi * gi)));
        m[i] = mn;
        v[i] = vn;
        p[i] = ftz(ftz(p[i]) - ftz(LR * ftz(mn / ftz(sqrtf(vn) + EPS))));
    }
#if defined(__x86_64__)
    __asm__ volatile("" ::: "memory");
    _mm_setcsr(csr);
#endif
}

static char *adam_hlo(int64_t n) {
    size_t cap = 4096;
    char *t = malloc(cap);
    if (!t) return NULL;
    char s[64];
    snprintf(s, sizeof s, "f32[%lld]", (long long)n);
    snprintf(t, cap,
             "HloModule adam, input_output_alias={ {0}: (0, {}, may-alias), {1}: (2, {}, "
             "may-alias), {2}: (3, {}, may-alias) }\n"
             "ENTRY main {\n"
             "  p = %s parameter(0)\n  g = %s parameter(1)\n  m = %s parameter(2)\n"
             "  v = %s parameter(3)\n"
             "  b1 = f32[] constant(0.9)\n  b2 = f32[] constant(0.999)\n"
             "  c1 = f32[] constant(0.1)\n  c2 = f32[] constant(0.001)\n"
             "  lr = f32[] constant(0.001)\n  eps = f32[] constant(1e-08)\n"
             "  B1 = %s broadcast(b1), dimensions={}\n  B2 = %s broadcast(b2), dimensions={}\n"
             "  C1 = %s broadcast(c1), dimensions={}\n  C2 = %s broadcast(c2), dimensions={}\n"
             "  LR = %s broadcast(lr), dimensions={}\n  EPS = %s broadcast(eps), dimensions={}\n"
             "  m1 = %s multiply(B1, m)\n  gm = %s multiply(C1, g)\n  mn = %s add(m1, gm)\n"
             "  v1 = %s multiply(B2, v)\n  gg = %s multiply(g, g)\n  gv = %s multiply(C2, gg)\n"
             "  vn = %s add(v1, gv)\n  sq = %s sqrt(vn)\n  de = %s add(sq, EPS)\n"
             "  up = %s divide(mn, de)\n  lu = %s multiply(LR, up)\n  pn = %s subtract(p, lu)\n"
             "  ROOT t = (%s, %s, %s) tuple(pn, mn, vn)\n}\n",
             s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s);
    return t;
}

static void init(float *x, int64_t n, float scale, uint32_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = scale * ((float)(seed >> 8) / 16777216.0f + 0.01f);
    }
}

static int bench_size(int64_t n, int reps, bool json, const ot_bench_limits *lim) {
    double triad = lim->triad_gbs;
    int rc = 1;
    char *text = adam_hlo(n);
    ot_module *mod = NULL;
    ot_executable *exe = NULL;
    ot_device *dev = NULL;
    ot_buffer *buf[4] = {0};
    hand h = {0}, hf = {0};
    double *ours = calloc((size_t)reps, sizeof *ours), *base = calloc((size_t)reps, sizeof *base);
    double *basef = calloc((size_t)reps, sizeof *basef);
    ot_tensor t = {0};
    if (!text || !ours || !base || !basef) goto done;
    if (ot_hlo_parse(text, strlen(text), NULL, &mod) != OT_OK || ot_compile(mod, NULL, &exe) ||
        ot_host_device_create(0, 0, &dev) != OT_OK)
        goto fail;
    /* inputs: p, g, m, v */
    int64_t dims[1] = {n};
    ot_shape sh;
    if (ot_shape_make(&sh, OT_F32, 1, dims) != OT_OK || ot_tensor_alloc(&t, &sh) != OT_OK)
        goto fail;
    for (int k = 0; k < 4; k++) {
        init(t.data, n, k == 3 ? 0.01f : 1.0f, 17u + (uint32_t)k);
        if (ot_buffer_from_host(dev, &t, &buf[k]) != OT_OK) goto fail;
    }
    ot_tensor_release(&t);
    h.p = ot_stream_alloc((size_t)n * 4);
    h.g = ot_stream_alloc((size_t)n * 4);
    h.m = ot_stream_alloc((size_t)n * 4);
    h.v = ot_stream_alloc((size_t)n * 4);
    hf.p = ot_stream_alloc((size_t)n * 4);
    hf.g = ot_stream_alloc((size_t)n * 4);
    hf.m = ot_stream_alloc((size_t)n * 4);
    hf.v = ot_stream_alloc((size_t)n * 4);
    if (!h.p || !h.g || !h.m || !h.v || !hf.p || !hf.g || !hf.m || !hf.v) goto done;
    ot_threadpool *pool = ot_threadpool_default();
    init(h.p, n, 1.0f, 17u);
    init(h.g, n, 1.0f, 18u);
    init(h.m, n, 1.0f, 19u);
    init(h.v, n, 0.01f, 20u);
    init(hf.p, n, 1.0f, 17u);
    init(hf.g, n, 1.0f, 18u);
    init(hf.m, n, 1.0f, 19u);
    init(hf.v, n, 0.01f, 20u);
    for (int r = -2; r < reps; r++) {
        uint64_t t0 = ot_now_ns();
        ot_buffer *out[3] = {0};
        if (ot_device_execute(dev, exe, buf, 4, out, 3, NULL, NULL) != OT_OK) goto fail;
        uint64_t t1 = ot_now_ns();
        /* p, m, v were donated: their handles are spent, the outputs hold the memory */
        ot_buffer_free(buf[0]);
        ot_buffer_free(buf[2]);
        ot_buffer_free(buf[3]);
        buf[0] = out[0];
        buf[2] = out[1];
        buf[3] = out[2];
        uint64_t t2 = ot_now_ns();
        ot_parallel_for(pool, n, 0, OT_SCHEDULE_STATIC, hand_range, &h);
        uint64_t t3 = ot_now_ns();
        ot_parallel_for(pool, n, 0, OT_SCHEDULE_STATIC, hand_range_ftz, &hf);
        uint64_t t4 = ot_now_ns();
        if (r >= 0) {
            ours[r] = 28.0 * (double)n / (double)(t1 - t0);
            base[r] = 28.0 * (double)n / (double)(t3 - t2);
            basef[r] = 28.0 * (double)n / (double)(t4 - t3);
        }
    }
    /* both computed the same steps from the same start: compare p (exact match is not required:
     * the reference semantics flush subnormals, the plain loop does not) */
    if (ot_buffer_to_host(buf[0], &t) != OT_OK) goto fail;
    double maxrel = 0;
    for (int64_t i = 0; i < n; i += 4099) {
        double a = ((float *)t.data)[i], b = h.p[i];
        double rel = fabs(a - b) / (fabs(b) > 1e-30 ? fabs(b) : 1e-30);
        if (rel > maxrel) maxrel = rel;
    }
    bool bitwise = memcmp(t.data, hf.p, (size_t)n * 4) == 0;
    ot_tensor_release(&t);
    if (!bitwise) {
        fprintf(stderr, "adam_fused: results differ from the hand-written FTZ loop\n");
        goto done;
    }
    if (maxrel > 1e-5) {
        fprintf(stderr, "adam_fused: results differ from the hand-written loop (rel %g)\n", maxrel);
        goto done;
    }
    double mo = ot_bench_median(ours, (size_t)reps), mb = ot_bench_median(base, (size_t)reps);
    double mf = ot_bench_median(basef, (size_t)reps);
    /* every label names its thread count: the module's kernels and both loops ran on the default
     * pool, STREAM on lim->threads (the same pool size) */
    int nth = ot_threadpool_size(pool);
    const char *ths = nth == 1 ? "" : "s";
    char cname[96], cbase[96], cftz[96], ctriad[96], cloop[96];
    snprintf(cname, sizeof cname, "adam f32 %lldM, %d thread%s", (long long)(n >> 20), nth, ths);
    snprintf(cbase, sizeof cbase, "hand-written fused C loop, %d thread%s", nth, ths);
    snprintf(cftz, sizeof cftz, "hand-written loop, same FTZ, %d thread%s", nth, ths);
    snprintf(ctriad, sizeof ctriad, "STREAM triad, %d thread%s", lim->threads,
             lim->threads == 1 ? "" : "s");
    snprintf(cloop, sizeof cloop, "hand-written loop vs triad, %d thread%s", nth, ths);
    ot_bench_row r1 = {.bench = "adam_fused",
                       .case_name = cname,
                       .metric = "GB/s",
                       .value = mo,
                       .baseline = cbase,
                       .baseline_value = mb,
                       .ratio = mo / mb};
    ot_bench_print(&r1, json);
    ot_bench_row r2 = {.bench = "adam_fused",
                       .case_name = cname,
                       .metric = "GB/s",
                       .value = mo,
                       .baseline = ctriad,
                       .baseline_value = triad,
                       .ratio = mo / triad};
    if (lim->triad_gbs > 0) ot_bench_print(&r2, json);
    ot_bench_row r4 = {.bench = "adam_fused",
                       .case_name = cname,
                       .metric = "GB/s",
                       .value = mo,
                       .baseline = cftz,
                       .baseline_value = mf,
                       .ratio = mo / mf};
    ot_bench_print(&r4, json);
    ot_bench_row r3 = {.bench = "adam_fused",
                       .case_name = cloop,
                       .metric = "GB/s",
                       .value = mb,
                       .baseline = ctriad,
                       .baseline_value = triad,
                       .ratio = mb / triad};
    if (lim->triad_gbs > 0) ot_bench_print(&r3, json);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "adam_fused: %s\n", ot_last_error());
done:
    ot_tensor_release(&t);
    for (int k = 0; k < 4; k++) ot_buffer_free(buf[k]);
    ot_aligned_free(h.p);
    ot_aligned_free(h.g);
    ot_aligned_free(h.m);
    ot_aligned_free(h.v);
    ot_aligned_free(hf.p);
    ot_aligned_free(hf.g);
    ot_aligned_free(hf.m);
    ot_aligned_free(hf.v);
    free(basef);
    free(ours);
    free(base);
    ot_executable_free(exe);
    ot_device_free(dev);
    ot_module_free(mod);
    free(text);
    return rc;
}

int main(int argc, char **argv) {
    bool json = false, limits = true;
    int reps = 7;
    const char *sizes = "16M,128M";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--no-limits") == 0) {
            limits = false;
        } else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            sizes = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_adam_fused [--json] [--reps N] [--sizes 16M,128M] "
                            "[--no-limits]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    ot_bench_limits_options lo = ot_bench_limits_options_default();
    lo.what = OT_BENCH_LIMIT_STREAM;
    ot_bench_limits lim = {0};
    if (limits && ot_bench_limits_measure(&lo, &lim) != OT_OK) {
        fprintf(stderr, "adam_fused: %s\n", ot_last_error());
        return 1;
    }
    ot_bench_print_header(json);
    int rc = 0;
    for (const char *s = sizes; *s;) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (*end == 'M' || *end == 'm') {
            v <<= 20;
            end++;
        } else if (*end == 'K' || *end == 'k') {
            v <<= 10;
            end++;
        }
        if (v <= 0) {
            fprintf(stderr, "adam_fused: bad size list %s\n", sizes);
            return 2;
        }
        rc |= bench_size(v, reps, json, &lim);
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') break;
    }
    return rc;
}
