/* The fused 8-bit block-wise optimizer update (src/exec/state8.h): its fast kernel against its
 * reference kernel and both against the same update built as graph code (dequantize, the
 * optimizer's graph, quantize: options.state_int8_unfused), bit for bit, parameters and every
 * state tensor after every step, over adam, adamw, lion and sgd with their flags, several flat
 * groups, 1, 2, 3 and 8 threads; the fast kernel's table and block quantizers against the exact
 * one over a dense sweep of floats, its decode over every code; and the kernel's refusals of a
 * bad configuration. */
#include "ot_test.h"

#include <math.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/state8_internal.h"
#include "exec/state8.h"
#include "optitpu/exec.h"
#include "optitpu/optim.h"
#include "optitpu/runtime.h"
#include "optitpu/tpu_optim.h"

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
/* a deterministic value in [-a, a) */
static float val(uint64_t seed, double a) {
    return (float)(a * ((double)(mix(seed) >> 11) / 4503599627370496.0 - 1.0));
}

/* The table quantizer gives the exact quantizer's code for every 1021st float bit pattern in
 * [0, 1] and its negation, for both maps, and every float near each map value and midpoint. */
static void test_table_quantizer(void) {
    ASSERT_TRUE(ex_q8_fast_table_ok());
    int64_t bad = 0, n = 0;
    for (int sg = 0; sg < 2; sg++) {
        const float *map = ex_q8_table(sg == 1);
        for (uint32_t u = 0; u <= 0x3f800000u; u += 1021) {
            for (int neg = 0; neg < 2; neg++) {
                uint32_t b = u | (neg ? 0x80000000u : 0u);
                float x;
                memcpy(&x, &b, 4);
                n++;
                if (ex_q8_code_table(x, sg == 1) != ex_q8_code_exact(map, x, sg == 1, true) &&
                    bad++ < 5)
                    fprintf(stderr, "map %d: x %.9g: table %d, exact %d\n", sg, x,
                            ex_q8_code_table(x, sg == 1), ex_q8_code_exact(map, x, sg == 1, true));
            }
        }
        for (int c = 0; c < 256; c++) {
            float pts[2] = {map[c], c < 255 ? (map[c] + map[c + 1]) / 2 : map[c]};
            for (int q = 0; q < 2; q++) {
                uint32_t b;
                memcpy(&b, &pts[q], 4);
                for (int d = -400; d <= 400; d++) {
                    uint32_t v = b + (uint32_t)d;
                    float x;
                    memcpy(&x, &v, 4);
                    if (!(fabsf(x) <= 1.0f)) continue;
                    n++;
                    if (ex_q8_code_table(x, sg == 1) != ex_q8_code_exact(map, x, sg == 1, true))
                        bad++;
                }
            }
        }
    }
    fprintf(stderr, "table quantizer: %lld of %lld values differ\n", (long long)bad, (long long)n);
    EXPECT_INT_EQ(bad, 0);
}

/* The kernel's block quantizer (256 values at a time, divided by an absmax of 1, so exactly the
 * values, without flushing) gives the exact quantizer's code (flushing or not) for every 1021st
 * float in [-1, 1], every float within 400 of each map value and midpoint (ties), zeros, subnormals
 * and tiny values; the kernel's decode (byte permutes, a gather or C, as the CPU takes) gives
 * map[c] * a for every code. */
static void check_block(const float *x, int n, bool sgn, int64_t *bad, int64_t *count) {
    const float *map = ex_q8_table(sgn);
    float buf[EX_STATE8_BLOCK];
    uint8_t co[EX_STATE8_BLOCK];
    for (int e = 0; e < EX_STATE8_BLOCK; e++) buf[e] = e < n ? x[e] : 0.0f;
    ASSERT_TRUE(ex_q8_quantize_fast(buf, 1.0f, sgn, co));
    for (int e = 0; e < n; e++) {
        /* the kernel's table serves both modes: the exact code is the same flushing or not */
        uint8_t want = ex_q8_code_exact(map, x[e], sgn, false);
        uint8_t want_z = ex_q8_code_exact(map, x[e], sgn, true);
        *count += 1;
        if ((co[e] != want || want_z != want) && (*bad)++ < 5)
            fprintf(stderr, "map %d: x %.9g: block quantizer %d, exact %d (flushing %d)\n", sgn,
                    x[e], co[e], want, want_z);
    }
}

static void test_block_quantizer_decode(void) {
    bool est_possible = false;
    int which = ex_q8_fast_quantizer(&est_possible);
    fprintf(stderr, "the kernel's quantizer: %s\n",
            which == 3   ? "reciprocal"
            : which == 2 ? "estimate"
            : which == 1 ? "table"
                         : "exact");
    EXPECT_TRUE(which == 3 || (!est_possible && which == 1)); /* every check passed */
    int64_t bad = 0, n = 0;
    float x[EX_STATE8_BLOCK];
    int nx = 0;
#define PUSH(v)                                                                                    \
    do {                                                                                           \
        x[nx++] = (v);                                                                             \
        if (nx == EX_STATE8_BLOCK) check_block(x, nx, sg == 1, &bad, &n), nx = 0;                  \
    } while (0)
    for (int sg = 0; sg < 2; sg++) {
        const float *map = ex_q8_table(sg == 1);
        for (uint32_t u = 0; u <= 0x3f800000u; u += 1021)
            for (int neg = 0; neg < 2; neg++) {
                uint32_t b = u | (neg ? 0x80000000u : 0u);
                float v;
                memcpy(&v, &b, 4);
                PUSH(v);
            }
        for (int c = 0; c < 256; c++) {
            float pts[2] = {map[c], c < 255 ? (map[c] + map[c + 1]) / 2 : map[c]};
            for (int q = 0; q < 2; q++) {
                uint32_t b;
                memcpy(&b, &pts[q], 4);
                for (int d = -400; d <= 400; d++) {
                    uint32_t w = b + (uint32_t)d;
                    float v;
                    memcpy(&v, &w, 4);
                    if (fabsf(v) <= 1.0f) PUSH(v);
                }
            }
        }
        /* zeros, subnormals, the smallest normals, 1 */
        for (uint32_t q = 0; q < 0x01000000u; q = q * 5 + 1)
            for (int neg = 0; neg < 2; neg++) {
                uint32_t b = q | (neg ? 0x80000000u : 0u);
                float v;
                memcpy(&v, &b, 4);
                PUSH(v);
            }
        PUSH(1.0f);
        PUSH(-1.0f);
        PUSH(-0.0f);
        if (nx) check_block(x, nx, sg == 1, &bad, &n), nx = 0;
        /* the decode: every code, in a shuffled order */
        uint8_t c[EX_STATE8_BLOCK];
        float d[EX_STATE8_BLOCK];
        for (int e = 0; e < EX_STATE8_BLOCK; e++) c[e] = (uint8_t)(e * 167 + 13);
        const float a = 0.37f;
        ex_q8_decode_fast(c, sg == 1, a, d);
        for (int e = 0; e < EX_STATE8_BLOCK; e++) {
            float want = map[c[e]] * a;
            n++;
            if (memcmp(&want, &d[e], 4) != 0 && bad++ < 5)
                fprintf(stderr, "map %d: decode of %d: %.9g, want %.9g\n", sg, c[e], d[e], want);
        }
    }
#undef PUSH
    fprintf(stderr, "block quantizer and decode: %lld of %lld values differ\n", (long long)bad,
            (long long)n);
    EXPECT_INT_EQ(bad, 0);
}

/* The block quantizer with an absmax other than 1 (the reciprocal quantizer multiplies by 1 / am,
 * within 2 ulps of the quotient): values at and within 6 ulps of am times every map value, every
 * midpoint and every threshold of the exact quantizer, both signs, with absmaxes from 2^-125 to
 * 2^125 and beyond (the estimate's range), give the exact code of x / am, in the caller's
 * floating-point modes and under FTZ/DAZ (the kernel's, against the flushing exact code). */
static void test_block_quantizer_absmax(void) {
    const float ams[] = {1.0f,     0.37f,    3.1e-7f, 1.0000001f, 7.7e12f,  0x1p-125f,
                         0x1p125f, 2.5e-38f, 1.5e38f, 0.9999999f, 123.456f, 5.9604645e-8f};
    int64_t bad = 0, n = 0;
    for (int sg = 0; sg < 2; sg++) {
        const float *map = ex_q8_table(sg == 1);
        /* the exact thresholds: the least x in [0, 1] whose code differs from the one below */
        float pts[1100];
        int np = 0;
        for (int c = 0; c < 256; c++) {
            pts[np++] = map[c];
            if (c < 255) pts[np++] = (map[c] + map[c + 1]) / 2;
        }
        for (int neg = 0; neg < 2; neg++) {
            uint32_t l = 0, h = 0x3f800000u;
            uint32_t sb = neg ? 0x80000000u : 0u;
            while (l < h) { /* every step of the code on this side, by bisection from below */
                float xl, xh;
                uint32_t lb = l | sb, hb = h | sb;
                memcpy(&xl, &lb, 4);
                memcpy(&xh, &hb, 4);
                uint8_t cl = ex_q8_code_exact(map, xl, sg == 1, false);
                if (cl == ex_q8_code_exact(map, xh, sg == 1, false) || np >= 1090) break;
                uint32_t a = l, b = h; /* code(a) == cl != code(b) */
                while (b - a > 1) {
                    uint32_t m = a + (b - a) / 2, mb = m | sb;
                    float xm;
                    memcpy(&xm, &mb, 4);
                    if (ex_q8_code_exact(map, xm, sg == 1, false) == cl)
                        a = m;
                    else
                        b = m;
                }
                float th;
                memcpy(&th, &b, 4);
                pts[np++] = th;
                l = b;
            }
        }
        for (size_t ai = 0; ai < sizeof ams / sizeof *ams; ai++) {
            const float am = ams[ai];
            float x[EX_STATE8_BLOCK];
            uint8_t co[EX_STATE8_BLOCK];
            int nx = 0;
            for (int q = 0; q <= np; q++) {
                for (int d = -6; d <= 6; d++)
                    for (int neg = 0; neg < 2; neg++) {
                        float v = q < np ? pts[q] * am : am;
                        uint32_t b;
                        memcpy(&b, &v, 4);
                        b += (uint32_t)d;
                        memcpy(&v, &b, 4);
                        if (!(fabsf(v) <= am)) continue;
                        x[nx++] = neg ? -v : v;
                        if (nx < EX_STATE8_BLOCK && !(q == np && d == 6 && neg == 1)) continue;
                        for (int z = 0; z < 2; z++) {
#if defined(__x86_64__)
                            unsigned csr = _mm_getcsr();
                            if (z) _mm_setcsr(csr | 0x8040u); /* the kernel's FTZ | DAZ */
#else
                            if (z) break;
#endif
                            bool got = ex_q8_quantize_fast(x, am, sg == 1, co);
#if defined(__x86_64__)
                            _mm_setcsr(csr);
#endif
                            ASSERT_TRUE(got);
                            for (int e = 0; e < nx; e++) {
                                uint8_t want =
                                    ex_q8_code_exact(map, div_f(x[e], am, z), sg == 1, z);
                                n++;
                                if (co[e] != want && bad++ < 5)
                                    fprintf(stderr,
                                            "map %d, ftz %d: x %.9g, am %.9g: block quantizer %d, "
                                            "exact %d\n",
                                            sg, z, x[e], am, co[e], want);
                            }
                        }
                        nx = 0;
                    }
            }
        }
    }
    fprintf(stderr, "block quantizer with absmaxes: %lld of %lld values differ\n", (long long)bad,
            (long long)n);
    EXPECT_INT_EQ(bad, 0);
}

typedef struct ocase {
    const char *name, *opt;
    const char *hp[4];
    double hv[4];
} ocase;

static const ocase cases[] = {
    {"adam", "adam", {NULL}, {0}},
    {"adam maximize coupled wd", "adam", {"maximize", "weight_decay"}, {1, 0.05}},
    {"adamw", "adamw", {"weight_decay", "beta2"}, {0.1, 0.99}},
    {"lion", "lion", {"weight_decay"}, {0}},
    {"lion wd", "lion", {"weight_decay", "beta1"}, {0.02, 0.8}},
    {"sgd momentum", "sgd", {"momentum", "dampening"}, {0.9, 0.1}},
    {"sgd nesterov wd maximize",
     "sgd",
     {"momentum", "nesterov", "weight_decay", "maximize"},
     {0.8, 1, 0.01, 1}},
};

#define NT 5
static const int64_t lens[NT] = {1, 7, 300, 1000, 5000};

static ot_optimizer *make_opt(const ocase *c) {
    ot_optimizer *o = NULL;
    if (ot_optimizer_new(c->opt, &o) != OT_OK) return NULL;
    for (int k = 0; k < 4 && c->hp[k]; k++)
        if (ot_optimizer_set(o, c->hp[k], c->hv[k]) != OT_OK) return NULL;
    return o;
}

/* The differences between wrapper t's parameters and state and the graph code's (r): bitwise,
 * except that two NaNs are equal and a block whose absmax is NaN in both holds codes that encode
 * nothing (every value of it decodes to NaN), which are not compared. */
static int64_t compare_n(ot_tpu_optimizer *t, ot_tpu_optimizer *r, ot_device *dev,
                         const int64_t *len, int nt) {
    int64_t d = 0;
    for (int k = 0; k < nt; k++) {
        ot_tensor a = {0}, b = {0};
        if (ot_tpu_optimizer_read_param(t, dev, k, &a) != OT_OK ||
            ot_tpu_optimizer_read_param(r, dev, k, &b) != OT_OK)
            return -1;
        for (int64_t e = 0; e < len[k]; e++) {
            float x = ((float *)a.data)[e], y = ((float *)b.data)[e];
            d += memcmp(&x, &y, 4) != 0 && !(isnan(x) && isnan(y));
        }
        ot_tensor_release(&a);
        ot_tensor_release(&b);
    }
    int ns = ot_tpu_optimizer_state_count(r);
    for (int q = 0; q < ns; q++) {
        ot_tensor a = {0}, b = {0}, am = {0};
        if (ot_tpu_optimizer_get_state(t, dev, q, &a) != OT_OK ||
            ot_tpu_optimizer_get_state(r, dev, q, &b) != OT_OK || a.nbytes != b.nbytes)
            return -1;
        if (b.shape.dtype == OT_U8) { /* codes: their absmax is the state named NAME.absmax */
            char want[256];
            snprintf(want, sizeof want, "%s.absmax", ot_tpu_optimizer_state_name(r, q));
            for (int z = 0; z < ns; z++)
                if (strcmp(ot_tpu_optimizer_state_name(r, z), want) == 0 &&
                    ot_tpu_optimizer_get_state(r, dev, z, &am) != OT_OK)
                    return -1;
            if (!am.data) return -1;
            for (size_t e = 0; e < b.nbytes; e++)
                d += ((uint8_t *)a.data)[e] != ((uint8_t *)b.data)[e] &&
                     !isnan(((float *)am.data)[e / 256]);
        } else {
            for (size_t e = 0; e < b.nbytes / 4; e++) {
                float x = ((float *)a.data)[e], y = ((float *)b.data)[e];
                d += memcmp(&x, &y, 4) != 0 && !(isnan(x) && isnan(y));
            }
        }
        ot_tensor_release(&a);
        ot_tensor_release(&b);
        ot_tensor_release(&am);
    }
    return d;
}
static int64_t compare(ot_tpu_optimizer *t, ot_tpu_optimizer *r, ot_device *dev) {
    return compare_n(t, r, dev, lens, NT);
}

/* Per case: the graph-code wrapper and fused wrappers stepped with 1, 2, 3 and 8 threads and with
 * the reference kernels, 6 steps with a changing lr (and an infinite gradient element at step 4
 * in one tensor, which makes its block NaN; in another, blocks of zero gradients, subnormal
 * gradients and a NaN gradient at step 5): every wrapper's parameters and state equal the graph
 * code's after every step (compare()). */
static void test_fused_matches_graph(void) {
    ot_shape sh[NT];
    for (int k = 0; k < NT; k++) ot_shape_make(&sh[k], OT_F32, 1, &lens[k]);
    ot_threadpool *pools[4] = {NULL};
    const int nth[4] = {1, 2, 3, 8};
    for (int q = 0; q < 4; q++) ASSERT_OK(ot_threadpool_create(nth[q], &pools[q]));
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const ocase *c = &cases[ci];
        ot_device *dev = NULL;
        ASSERT_OK(ot_host_device_create(0, 0, &dev));
        ot_optimizer *o = make_opt(c);
        ASSERT_TRUE(o != NULL);
        enum { NW = 6 }; /* graph, fused x 4 pools, fused reference kernels */
        ot_tpu_optimizer *t[NW] = {NULL};
        for (int w = 0; w < NW; w++) {
            ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
            to.flat = true;
            to.state_format = OT_TPU_STATE_INT8;
            to.state_int8_unfused = w == 0;
            ASSERT_OK(ot_tpu_optimizer_create(o, sh, NT, &to, &t[w]));
            ASSERT_OK(ot_tpu_optimizer_add_replica(t[w], dev));
        }
        int64_t diffs = 0;
        for (int step = 1; step <= 6; step++) {
            for (int k = 0; k < NT; k++) {
                ot_tensor g = {0}, p = {0};
                ASSERT_OK(ot_tensor_alloc(&g, &sh[k]));
                ASSERT_OK(ot_tensor_alloc(&p, &sh[k]));
                for (int64_t e = 0; e < lens[k]; e++) {
                    /* gradients over a few decades, some exactly zero */
                    double sc = pow(10.0, -(double)((e * 7 + k) % 5));
                    float gv = val(31u * (uint64_t)step + 1009u * (uint64_t)k + (uint64_t)e, sc);
                    ((float *)g.data)[e] = e % 11 == 3 ? 0.0f : gv;
                    /* tensor 4: whole blocks of zeros (the state's absmax 0) for 3 steps,
                     * subnormal gradients, and a NaN at step 5 */
                    if (k == 4 && e < 768 && step <= 3) ((float *)g.data)[e] = 0.0f;
                    if (k == 4 && e >= 1000 && e < 1300)
                        ((float *)g.data)[e] = (e % 2 ? 1e-39f : -3e-41f) * (float)(e % 7 + 1);
                    if (k == 4 && e == 3000 && step == 5) ((float *)g.data)[e] = NAN;
                    ((float *)p.data)[e] = val(77u * (uint64_t)k + (uint64_t)e, 1.0);
                }
                if (step == 4 && k == 3) ((float *)g.data)[500] = INFINITY;
                for (int w = 0; w < NW; w++) {
                    if (step == 1) ASSERT_OK(ot_tpu_optimizer_write_param(t[w], dev, k, &p));
                    ASSERT_OK(ot_tpu_optimizer_write_grad(t[w], dev, k, &g));
                }
                ot_tensor_release(&g);
                ot_tensor_release(&p);
            }
            double lr = 0.01 / step;
            for (int w = 0; w < NW; w++) {
                ot_run_options ro = ot_run_options_default();
                if (w >= 1 && w <= 4) ro.pool = pools[w - 1];
                ro.reference_kernels = w == 5;
                ASSERT_OK(ot_tpu_optimizer_step_flat(t[w], dev, step, lr, &ro));
            }
            for (int w = 1; w < NW; w++) {
                int64_t d = compare(t[w], t[0], dev);
                if (d && diffs == 0)
                    fprintf(stderr,
                            "%s: wrapper %d differs from the graph code at step %d (%lld)\n",
                            c->name, w, step, (long long)d);
                diffs += d != 0;
            }
        }
        EXPECT_INT_EQ(diffs, 0);
        for (int w = 0; w < NW; w++) ot_tpu_optimizer_free(t[w]);
        ot_optimizer_free(o);
        ot_device_free(dev);
    }
    for (int q = 0; q < 4; q++) ot_threadpool_free(pools[q]);
}

/* The fast kernel's pipelined Adam pass (the codes of a block found during the next block's
 * update) across every way a block leaves the pipeline: the state set before the first step with
 * each block's absmax from a list that puts neighbouring blocks on different quantizer paths (in
 * the reciprocal quantizer's range; below 2^-125, normal and subnormal; above 2^125; infinite,
 * which makes the block NaN; NaN; zero), so that blocks wait, flush and restart the pipeline;
 * adam and adamw with maximize over 21 blocks in two flat tensors, 4 steps, 1, 2 and 3 threads,
 * and once with every 64 values handed to the estimate quantizer (the path of values near a code
 * boundary): parameters and state equal the graph code's after every step. */
static void test_fused_pipeline_edges(void) {
    enum { NP = 2, NW = 5 }; /* graph code, fused x 3 pools, fused with the estimate forced */
    const int64_t plen[NP] = {19 * 256 - 5, 300};
    ot_shape sh[NP];
    for (int k = 0; k < NP; k++) ot_shape_make(&sh[k], OT_F32, 1, &plen[k]);
    static const float ams[] = {1e-3f, 2e-39f, 0.5f, 1e-38f, 3e38f, 1e-3f, INFINITY,
                                0.02f, NAN,    0.0f, 1e-20f, 2.0f,  1e-30f};
    const int nam = (int)(sizeof ams / sizeof *ams);
    ot_threadpool *pools[3] = {NULL};
    for (int q = 0; q < 3; q++) ASSERT_OK(ot_threadpool_create(q + 1, &pools[q]));
    const ocase adams[2] = {cases[0], cases[2]};
    for (int ci = 0; ci < 2; ci++) {
        ot_device *dev = NULL;
        ASSERT_OK(ot_host_device_create(0, 0, &dev));
        ot_optimizer *o = make_opt(&adams[ci]);
        ASSERT_TRUE(o != NULL);
        if (ci == 1) ASSERT_OK(ot_optimizer_set(o, "maximize", 1));
        ot_tpu_optimizer *t[NW] = {NULL};
        for (int w = 0; w < NW; w++) {
            ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
            to.flat = true;
            to.state_format = OT_TPU_STATE_INT8;
            to.state_int8_unfused = w == 0;
            ASSERT_OK(ot_tpu_optimizer_create(o, sh, NP, &to, &t[w]));
            ASSERT_OK(ot_tpu_optimizer_add_replica(t[w], dev));
        }
        int64_t diffs = 0;
        for (int step = 1; step <= 4; step++) {
            for (int k = 0; k < NP; k++) {
                ot_tensor g = {0}, p = {0};
                ASSERT_OK(ot_tensor_alloc(&g, &sh[k]));
                ASSERT_OK(ot_tensor_alloc(&p, &sh[k]));
                for (int64_t e = 0; e < plen[k]; e++) {
                    double sc = pow(10.0, -(double)((e * 3 + k) % 6));
                    ((float *)g.data)[e] =
                        val(41u * (uint64_t)step + 7u * (uint64_t)k + (uint64_t)e, sc);
                    ((float *)p.data)[e] = val(13u * (uint64_t)k + (uint64_t)e, 1.0);
                }
                for (int w = 0; w < NW; w++) {
                    if (step == 1) ASSERT_OK(ot_tpu_optimizer_write_param(t[w], dev, k, &p));
                    ASSERT_OK(ot_tpu_optimizer_write_grad(t[w], dev, k, &g));
                }
                ot_tensor_release(&g);
                ot_tensor_release(&p);
            }
            if (step == 1) { /* the state: random codes, absmax per block from the list */
                int ns = ot_tpu_optimizer_state_count(t[0]);
                for (int q = 0; q < ns; q++) {
                    ot_shape ss;
                    ASSERT_OK(ot_tpu_optimizer_state_shape(t[0], q, &ss));
                    const char *name = ot_tpu_optimizer_state_name(t[0], q);
                    bool is_am = strstr(name, ".absmax") != NULL;
                    if (ss.dtype != OT_U8 && !is_am) continue;
                    ot_tensor st = {0};
                    ASSERT_OK(ot_tensor_alloc(&st, &ss));
                    for (size_t e = 0; e < (is_am ? st.nbytes / 4 : st.nbytes); e++) {
                        if (is_am)
                            ((float *)st.data)[e] = ams[(e + (size_t)q * 5) % (size_t)nam];
                        else
                            ((uint8_t *)st.data)[e] = (uint8_t)mix(e * 977u + (uint64_t)q);
                    }
                    for (int w = 0; w < NW; w++)
                        ASSERT_OK(ot_tpu_optimizer_set_state(t[w], dev, q, &st));
                    ot_tensor_release(&st);
                }
            }
            double lr = 0.01 / step;
            for (int w = 0; w < NW; w++) {
                ot_run_options ro = ot_run_options_default();
                if (w >= 1) ro.pool = pools[w == 4 ? 0 : w - 1];
                ex_q8_force_estimate(w == 4);
                ASSERT_OK(ot_tpu_optimizer_step_flat(t[w], dev, step, lr, &ro));
                ex_q8_force_estimate(false);
            }
            for (int w = 1; w < NW; w++) {
                int64_t d = compare_n(t[w], t[0], dev, plen, NP);
                if (d && diffs == 0)
                    fprintf(stderr,
                            "%s: wrapper %d differs from the graph code at step %d (%lld)\n",
                            adams[ci].name, w, step, (long long)d);
                diffs += d != 0;
            }
        }
        EXPECT_INT_EQ(diffs, 0);
        for (int w = 0; w < NW; w++) ot_tpu_optimizer_free(t[w]);
        ot_optimizer_free(o);
        ot_device_free(dev);
    }
    for (int q = 0; q < 3; q++) ot_threadpool_free(pools[q]);
}

/* The fused update is one pass: adam over 40 tensors compiles to few kernels (the custom call
 * and the scalar prologue), and moves the same bytes per step as before. */
static void test_fused_kernel_count(void) {
    ot_shape sh[40];
    for (int k = 0; k < 40; k++) ot_shape_make(&sh[k], OT_F32, 2, (int64_t[]){k + 1, 13});
    ot_optimizer *o = NULL;
    ASSERT_OK(ot_optimizer_new("adam", &o));
    int64_t kernels[2] = {0, 0};
    for (int w = 0; w < 2; w++) {
        ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
        to.flat = true;
        to.state_format = OT_TPU_STATE_INT8;
        to.state_int8_unfused = w == 1;
        ot_tpu_optimizer *t = NULL;
        ASSERT_OK(ot_tpu_optimizer_create(o, sh, 40, &to, &t));
        const ot_executable *e = ot_tpu_optimizer_executable(t);
        ASSERT_TRUE(e != NULL);
        kernels[w] = ot_executable_kernel_count(e);
        ot_tpu_optimizer_free(t);
    }
    fprintf(stderr, "int8 adam kernels: fused %lld, graph code %lld\n", (long long)kernels[0],
            (long long)kernels[1]);
    EXPECT_TRUE(kernels[0] <= 3 && kernels[0] < kernels[1]);
    ot_optimizer_free(o);
}

/* Per-tensor int8 state (each tensor's codes flattened and padded to whole blocks) gives the
 * flat mode's bits: a flat tensor starts at a block and its gap is zero, so the blocks hold the
 * same elements. adamw, lion and sgd over tensors of OT_TPU_INT8_MIN_SIZE elements and more
 * (64x64, 4097, 3x40x50, 64x65, 5000), 5 steps: parameters, codes of the tensor's elements and
 * absmax equal. */
static void test_per_tensor_matches_flat(void) {
    enum { N = 5 };
    ot_shape sh[N];
    ot_shape_make(&sh[0], OT_F32, 2, (int64_t[]){64, 64});
    ot_shape_make(&sh[1], OT_F32, 1, (int64_t[]){4097});
    ot_shape_make(&sh[2], OT_F32, 3, (int64_t[]){3, 40, 50});
    ot_shape_make(&sh[3], OT_F32, 2, (int64_t[]){64, 65});
    ot_shape_make(&sh[4], OT_F32, 1, (int64_t[]){5000});
    const int ci[3] = {2, 4, 6}; /* adamw, lion wd, sgd nesterov wd maximize */
    for (int q = 0; q < 3; q++) {
        const ocase *c = &cases[ci[q]];
        ot_device *dev = NULL;
        ASSERT_OK(ot_host_device_create(0, 0, &dev));
        ot_optimizer *o = make_opt(c);
        ASSERT_TRUE(o != NULL);
        ot_tpu_optimizer *t[2] = {NULL, NULL}; /* per tensor, flat */
        for (int w = 0; w < 2; w++) {
            ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
            to.flat = w == 1;
            to.state_format = OT_TPU_STATE_INT8;
            ASSERT_OK(ot_tpu_optimizer_create(o, sh, N, &to, &t[w]));
            ASSERT_OK(ot_tpu_optimizer_add_replica(t[w], dev));
        }
        ot_buffer *pb[N], *gb[N];
        int64_t diffs = 0;
        for (int k = 0; k < N; k++) {
            int64_t ne = ot_shape_numel_unchecked(&sh[k]);
            ot_tensor p = {0};
            ASSERT_OK(ot_tensor_alloc(&p, &sh[k]));
            for (int64_t e = 0; e < ne; e++)
                ((float *)p.data)[e] = val(77u * (uint64_t)k + (uint64_t)e, 1.0);
            ASSERT_OK(ot_tpu_optimizer_write_param(t[1], dev, k, &p));
            ASSERT_OK(ot_buffer_from_host(dev, &p, &pb[k]));
            ot_tensor_release(&p);
        }
        for (int step = 1; step <= 5; step++) {
            for (int k = 0; k < N; k++) {
                int64_t ne = ot_shape_numel_unchecked(&sh[k]);
                ot_tensor g = {0};
                ASSERT_OK(ot_tensor_alloc(&g, &sh[k]));
                for (int64_t e = 0; e < ne; e++)
                    ((float *)g.data)[e] =
                        val(31u * (uint64_t)step + 1009u * (uint64_t)k + (uint64_t)e, 0.1);
                ASSERT_OK(ot_tpu_optimizer_write_grad(t[1], dev, k, &g));
                ASSERT_OK(ot_buffer_from_host(dev, &g, &gb[k]));
                ot_tensor_release(&g);
            }
            ASSERT_OK(ot_tpu_optimizer_step(t[0], dev, pb, gb, step, 0.01, NULL));
            ASSERT_OK(ot_tpu_optimizer_step_flat(t[1], dev, step, 0.01, NULL));
            for (int k = 0; k < N; k++) {
                ot_buffer_free(gb[k]);
                ot_tensor a = {0}, b = {0};
                ASSERT_OK(ot_buffer_to_host(pb[k], &a));
                ASSERT_OK(ot_tpu_optimizer_read_param(t[1], dev, k, &b));
                diffs += memcmp(a.data, b.data, a.nbytes) != 0;
                ot_tensor_release(&a);
                ot_tensor_release(&b);
            }
        }
        /* per tensor k: slots k*S.., then their absmax; flat: slots, then absmax */
        int S = ot_optimizer_state_count(o);
        for (int k = 0; k < N; k++) {
            ot_tpu_flat_view v;
            ASSERT_OK(ot_tpu_optimizer_flat_view(t[1], k, &v));
            for (int j = 0; j < 2 * S; j++) {
                ot_tensor a = {0}, b = {0};
                ASSERT_OK(ot_tpu_optimizer_get_state(t[0], dev, 2 * S * k + j, &a));
                ASSERT_OK(ot_tpu_optimizer_get_state(t[1], dev, j, &b));
                if (j < S)
                    diffs += memcmp(a.data, (uint8_t *)b.data + v.offset, (size_t)v.count) != 0;
                else
                    diffs += memcmp(a.data, (float *)b.data + v.offset / 256, a.nbytes) != 0;
                ot_tensor_release(&a);
                ot_tensor_release(&b);
            }
        }
        if (diffs)
            fprintf(stderr, "%s: per tensor differs from flat (%lld)\n", c->name, (long long)diffs);
        EXPECT_INT_EQ(diffs, 0);
        for (int k = 0; k < N; k++) ot_buffer_free(pb[k]);
        ot_tpu_optimizer_free(t[0]);
        ot_tpu_optimizer_free(t[1]);
        ot_optimizer_free(o);
        ot_device_free(dev);
    }
}

/* Per tensor, a tensor under OT_TPU_INT8_MIN_SIZE elements keeps f32 state (and any optimizer):
 * nadam over [7] and adam over [7] and [64, 64] name and type their state so. */
static void test_per_tensor_small_f32(void) {
    ot_shape sh[2];
    ot_shape_make(&sh[0], OT_F32, 1, (int64_t[]){7});
    ot_shape_make(&sh[1], OT_F32, 2, (int64_t[]){64, 64});
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.state_format = OT_TPU_STATE_INT8;
    ot_optimizer *o = NULL;
    ASSERT_OK(ot_optimizer_new("nadam", &o));
    ot_tpu_optimizer *t = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, sh, 1, &to, &t));
    EXPECT_INT_EQ(ot_tpu_optimizer_state_count(t), 3); /* exp_avg, exp_avg_sq, mu_product */
    ot_tpu_optimizer_free(t);
    ot_optimizer_free(o);
    ASSERT_OK(ot_optimizer_new("adam", &o));
    ASSERT_OK(ot_tpu_optimizer_create(o, sh, 2, &to, &t));
    EXPECT_INT_EQ(ot_tpu_optimizer_state_count(t), 6); /* 2 f32, 2 codes, 2 absmax */
    EXPECT_TRUE(strcmp(ot_tpu_optimizer_state_name(t, 4), "1.exp_avg.absmax") == 0);
    ot_device *dev = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &dev));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, dev));
    const ot_dtype want[6] = {OT_F32, OT_F32, OT_U8, OT_U8, OT_F32, OT_F32};
    for (int q = 0; q < 6; q++) {
        ot_tensor x = {0};
        ASSERT_OK(ot_tpu_optimizer_get_state(t, dev, q, &x));
        EXPECT_INT_EQ(x.shape.dtype, want[q]);
        ot_tensor_release(&x);
    }
    ot_tpu_optimizer_free(t);
    ot_optimizer_free(o);
    ot_device_free(dev);
}

/* A custom call with a bad configuration or operands: INVALID_ARGUMENT naming it. */
static void test_refusals(void) {
    static const char *const bad[] = {"",
                                      "adam",
                                      "adam,maps=s",
                                      "adam,maps=sx",
                                      "adam,wd,maps=su",
                                      "adam,maps=su,",
                                      "rmsprop,maps=s",
                                      "adam,maps=su,maximize"};
    for (size_t q = 0; q < sizeof bad / sizeof *bad; q++) {
        ot_module *m = ot_module_new("bad");
        ot_computation *c = ot_module_add_computation(m, "main");
        ot_shape f, u, a;
        ot_shape_make(&f, OT_F32, 1, (int64_t[]){256});
        ot_shape_make(&u, OT_U8, 1, (int64_t[]){256});
        ot_shape_make(&a, OT_F32, 1, (int64_t[]){1});
        ot_instr *ops[13];
        int n = 0;
        ops[n++] = ot_build_parameter(c, 0, f, "p");
        ops[n++] = ot_build_parameter(c, 1, f, "g");
        for (int j = 0; j < 2; j++) {
            ops[n++] = ot_build_parameter(c, 2 + 2 * j, u, NULL);
            ops[n++] = ot_build_parameter(c, 3 + 2 * j, a, NULL);
        }
        for (int k = 0; k < 7; k++) ops[n++] = ot_build_constant_scalar(c, OT_F32, 0.5);
        ot_ir_shape el[5] = {ot_ir_shape_array(f), ot_ir_shape_array(u), ot_ir_shape_array(a),
                             ot_ir_shape_array(u), ot_ir_shape_array(a)};
        ot_ir_shape tup;
        memset(&tup, 0, sizeof tup);
        tup.kind = OT_IR_TUPLE;
        tup.ntuple = 5;
        tup.tuple = el;
        ot_computation_set_root(
            c, ot_build_custom_call(c, EX_STATE8_TARGET, ops, n, &tup, bad[q], false));
        ot_module_set_entry(m, c);
        ASSERT_OK(ot_module_finalize(m));
        ot_tensor in[6];
        ot_tensor_alloc(&in[0], &f);
        ot_tensor_alloc(&in[1], &f);
        ot_tensor_alloc(&in[2], &u);
        ot_tensor_alloc(&in[3], &a);
        ot_tensor_alloc(&in[4], &u);
        ot_tensor_alloc(&in[5], &a);
        ot_value args[6], out = ot_value_empty();
        for (int k = 0; k < 6; k++) ASSERT_OK(ot_value_from_tensor(&args[k], &in[k]));
        ot_status st = ot_evaluate(m, args, 6, NULL, &out);
        EXPECT_INT_EQ(st, OT_ERR_INVALID_ARGUMENT);
        EXPECT_TRUE(strstr(ot_last_error(), EX_STATE8_TARGET) != NULL);
        ot_value_release(&out);
        for (int k = 0; k < 6; k++) {
            ot_value_release(&args[k]);
            ot_tensor_release(&in[k]);
        }
        ot_module_free(m);
    }
}

OT_TEST_MAIN(OT_TEST(test_table_quantizer), OT_TEST(test_block_quantizer_decode),
             OT_TEST(test_block_quantizer_absmax), OT_TEST(test_fused_matches_graph),
             OT_TEST(test_fused_pipeline_edges), OT_TEST(test_fused_kernel_count),
             OT_TEST(test_per_tensor_matches_flat), OT_TEST(test_per_tensor_small_f32),
             OT_TEST(test_refusals))
