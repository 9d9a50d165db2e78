/* Gradient aggregation (buckets, mean/sum/weighted, compression with error feedback, LocalSGD),
 * batch coordination (the aggregated gradient equals a one-device full-batch gradient) and slice
 * scheduling (best fit, refusal, merge on free, fragmentation). */
#include "ot_test.h"

#include "optitpu/collectives.h"
#include "optitpu/pod.h"

#include <stdatomic.h>

#define NT 3
static const size_t tsizes[NT] = {5, 1000, 37}; /* 1042 elements */

static float gval(int rank, int t, size_t i, int step) {
    uint32_t h = (uint32_t)(rank * 7919 + t * 104729 + (int)i * 31 + step * 1299709);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return ((float)(h % 20001) - 10000.0f) / 1000.0f;
}

typedef struct gcase {
    ot_grad_aggregator_options o;
    int steps;
    float out[4][NT][1000];
    float want[NT][1000]; /* cumulative exact mean over steps */
    float got[4][NT][1000];
    int nb;
    size_t wire[4];
} gcase;

static ot_status grad_rank(void *ud, int rank, ot_comm *c) {
    gcase *g = ud;
    ot_grad_aggregator *a;
    OT_CHECK(ot_grad_aggregator_create(c, NT, tsizes, &g->o, &a));
    if (rank == 0) g->nb = ot_grad_bucket_count(a);
    float *bufs[NT];
    float store[NT][1000];
    for (int t = 0; t < NT; t++) bufs[t] = store[t];
    ot_status st = OT_OK;
    for (int s = 0; s < g->steps && st == OT_OK; s++) {
        for (int t = 0; t < NT; t++)
            for (size_t i = 0; i < tsizes[t]; i++) store[t][i] = gval(rank, t, i, s);
        st = ot_grad_aggregate(a, bufs);
        for (int t = 0; t < NT; t++)
            for (size_t i = 0; i < tsizes[t]; i++) g->got[rank][t][i] += store[t][i];
        if (s == 0)
            for (int t = 0; t < NT; t++) memcpy(g->out[rank][t], store[t], tsizes[t] * 4);
    }
    g->wire[rank] = ot_grad_last_wire_bytes(a);
    ot_grad_aggregator_free(a);
    return st;
}

static double run_grad(gcase *g, int n, double *max_first_err) {
    memset(g->want, 0, sizeof g->want);
    memset(g->got, 0, sizeof g->got);
    for (int s = 0; s < g->steps; s++)
        for (int t = 0; t < NT; t++)
            for (size_t i = 0; i < tsizes[t]; i++) {
                double sum = 0;
                for (int r = 0; r < n; r++) sum += gval(r, t, i, s);
                g->want[t][i] += (float)(g->o.op == OT_REDOP_MEAN ? sum / n : sum);
            }
    ot_status st = ot_local_run(n, grad_rank, g, NULL);
    EXPECT_OK(st);
    double worst = 0, first = 0;
    for (int t = 0; t < NT; t++)
        for (size_t i = 0; i < tsizes[t]; i++) {
            double e = fabs(g->got[0][t][i] - g->want[t][i]);
            worst = e > worst ? e : worst;
            for (int r = 1; r < n; r++) /* bit-identical on every member */
                if (memcmp(&g->got[r][t][i], &g->got[0][t][i], 4)) worst = 1e30;
            double s0 = 0;
            for (int r = 0; r < n; r++) s0 += gval(r, t, i, 0);
            if (g->o.op == OT_REDOP_MEAN) s0 /= n;
            double e1 = fabs(g->out[0][t][i] - s0);
            first = e1 > first ? e1 : first;
        }
    if (max_first_err) *max_first_err = first;
    return worst;
}

static void test_aggregate_plain(void) {
    static gcase g;
    g.o = ot_grad_aggregator_options_default();
    g.o.bucket_bytes = 256 * 4; /* several buckets; the 1000-element tensor spans five */
    g.steps = 1;
    EXPECT_TRUE(run_grad(&g, 3, NULL) < 1e-5);
    EXPECT_INT_EQ(g.nb, 5);
    EXPECT_INT_EQ(g.wire[0], 1042 * 4);
    g.o.op = OT_REDOP_SUM;
    EXPECT_TRUE(run_grad(&g, 4, NULL) < 1e-4);
}

static void test_compression_with_error_feedback(void) {
    static gcase g;
    struct {
        ot_grad_compress c;
        double first_tol; /* one step alone */
        size_t wire;
    } cs[] = {{OT_COMPRESS_BF16, 0.1, 1042 * 2},
              {OT_COMPRESS_F16, 0.01, 1042 * 2},
              {OT_COMPRESS_INT8, 0.1, 1042 + 3 * 4},
              {OT_COMPRESS_TOPK, 20, (128 + 128 + 5) * 8}}; /* k of 512, 512, 18 */
    for (size_t k = 0; k < sizeof cs / sizeof *cs; k++) {
        g.o = ot_grad_aggregator_options_default();
        g.o.bucket_bytes = 512 * 4;
        g.o.compress = cs[k].c;
        g.o.topk_fraction = 0.25;
        g.steps = 40;
        double first;
        double with_ef = run_grad(&g, 3, &first);
        EXPECT_TRUE(first < cs[k].first_tol);
        if (cs[k].wire)
            EXPECT_INT_EQ(g.wire[0], cs[k].wire);
        else
            EXPECT_TRUE(g.wire[0] < 1042 * 4 / 2); /* 25% of values + their indices */
        g.o.error_feedback = false;
        double without = run_grad(&g, 3, NULL);
        /* error feedback keeps the accumulated update close to the exact one; without it the
         * compression error piles up (top-k drops 75% of every step) */
        if (with_ef >= without || with_ef > 30)
            fprintf(stderr, "  %s: with %g, without %g\n", ot_grad_compress_name(cs[k].c), with_ef,
                    without);
        EXPECT_TRUE(with_ef < without);
    }
}

static void test_weighted_mean(void) {
    static gcase g;
    g.o = ot_grad_aggregator_options_default();
    g.steps = 1;
    /* every member weights its gradient 1/n: the SUM of weighted gradients is the mean */
    g.o.weight = 1.0 / 4;
    g.o.op = OT_REDOP_MEAN; /* ignored once a weight is given */
    double e = run_grad(&g, 4, NULL);
    /* want[] was computed as the plain mean */
    EXPECT_TRUE(e < 1e-5);
}

/* ---- batch coordination: the aggregated gradient equals a one-device full-batch gradient ---- */

#define NS  103
#define DIM 6

typedef struct lin {
    float x[NS][DIM], y[NS], w[DIM];
    int64_t counts[3], start[3];
    float grad[3][DIM];
} lin;

/* mean over samples [lo, lo+n) of (w.x - y) x */
static void sample_grad(const lin *L, int64_t lo, int64_t n, double *g) {
    for (int d = 0; d < DIM; d++) g[d] = 0;
    for (int64_t i = lo; i < lo + n; i++) {
        double p = 0;
        for (int d = 0; d < DIM; d++) p += (double)L->w[d] * L->x[i][d];
        double r = p - L->y[i];
        for (int d = 0; d < DIM; d++) g[d] += r * L->x[i][d];
    }
    for (int d = 0; d < DIM; d++) g[d] /= (double)n;
}

static ot_status lin_rank(void *ud, int rank, ot_comm *c) {
    lin *L = ud;
    /* gradient accumulation over micro-batches of at most 8, each weighted m_j / G */
    int64_t sizes[32];
    double weights[32];
    int nmb;
    OT_CHECK(ot_batch_microbatches(L->counts[rank], 8, NS, sizes, weights, 32, &nmb));
    double acc[DIM] = {0};
    int64_t at = L->start[rank];
    for (int j = 0; j < nmb; j++) {
        double g[DIM];
        sample_grad(L, at, sizes[j], g);
        for (int d = 0; d < DIM; d++) acc[d] += weights[j] * g[d];
        at += sizes[j];
    }
    float *gp = L->grad[rank];
    for (int d = 0; d < DIM; d++) gp[d] = (float)acc[d];
    ot_grad_aggregator_options o = ot_grad_aggregator_options_default();
    o.op = OT_REDOP_SUM; /* the weights already make it the global mean */
    ot_grad_aggregator *a;
    OT_CHECK(ot_grad_aggregator_create(c, 1, (size_t[]){DIM}, &o, &a));
    ot_status st = ot_grad_aggregate(a, &gp);
    ot_grad_aggregator_free(a);
    return st;
}

static void test_batch_full_batch_mean(void) {
    static lin L;
    for (int i = 0; i < NS; i++) {
        for (int d = 0; d < DIM; d++) L.x[i][d] = gval(9, d, (size_t)i, 0) / 10;
        L.y[i] = gval(8, 0, (size_t)i, 1);
    }
    for (int d = 0; d < DIM; d++) L.w[d] = (float)(d + 1) / 7;
    /* uneven devices: throughputs 1 : 2 : 3.5 */
    ASSERT_OK(ot_batch_split(NS, 3, (double[]){1, 2, 3.5}, L.counts));
    EXPECT_INT_EQ(L.counts[0] + L.counts[1] + L.counts[2], NS);
    EXPECT_INT_EQ(L.counts[0], 16); /* 103 * 1/6.5 = 15.8 */
    EXPECT_INT_EQ(L.counts[1], 32);
    EXPECT_INT_EQ(L.counts[2], 55);
    L.start[0] = 0;
    L.start[1] = L.counts[0];
    L.start[2] = L.counts[0] + L.counts[1];
    ASSERT_OK(ot_local_run(3, lin_rank, &L, NULL));
    double full[DIM];
    sample_grad(&L, 0, NS, full);
    for (int r = 0; r < 3; r++)
        for (int d = 0; d < DIM; d++)
            EXPECT_NEAR(L.grad[r][d], full[d], 1e-5 * (1 + fabs(full[d])));
    double w[3];
    ASSERT_OK(ot_batch_weights(L.counts, 3, w));
    EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-12);
    int64_t eq[4];
    ASSERT_OK(ot_batch_split(10, 4, NULL, eq));
    EXPECT_INT_EQ(eq[0], 3);
    EXPECT_INT_EQ(eq[1], 3);
    EXPECT_INT_EQ(eq[2], 2);
    EXPECT_STATUS(ot_batch_split(10, 2, (double[]){0, 0}, eq), OT_ERR_INVALID_ARGUMENT);
    int nmb;
    EXPECT_STATUS(ot_batch_microbatches(100, 1, 100, NULL, NULL, 10, &nmb), OT_ERR_OUT_OF_RANGE);
    EXPECT_INT_EQ(nmb, 100);
}

/* ---- LocalSGD ---- */

static ot_status lsgd_rank(void *ud, int rank, ot_comm *c) {
    float *res = ud;
    float p[4] = {(float)rank, (float)rank * 2, 1, -1};
    for (int64_t step = 0; step < 6; step++) {
        for (int i = 0; i < 4; i++) p[i] += 0.5f * (float)(rank + 1); /* local updates */
        OT_CHECK(ot_localsgd_sync(c, p, 4, step, 3, NULL));
        if (step == 1) res[rank * 8] = p[0]; /* not yet averaged */
    }
    memcpy(res + rank * 8 + 1, p, sizeof p);
    return OT_OK;
}

static void test_localsgd(void) {
    float res[4 * 8] = {0};
    ASSERT_OK(ot_local_run(4, lsgd_rank, res, NULL));
    EXPECT_NEAR(res[0 * 8], 1.0, 0); /* rank 0 after two local steps */
    EXPECT_NEAR(res[3 * 8], 7.0, 0); /* rank 3 */
    for (int r = 1; r < 4; r++)      /* averaged at step 5: identical everywhere */
        EXPECT_TRUE(memcmp(res + r * 8 + 1, res + 1, 16) == 0);
    EXPECT_NEAR(res[1], 1.5 + 7.5, 1e-6); /* mean rank 1.5 + 6 steps * mean 1.25 */
}

/* ---- slices ---- */

static void test_slices_best_fit(void) {
    ot_topology *t;
    ASSERT_OK(ot_topology_preset("mesh-4x4", &t));
    ot_slice_sched *s;
    ASSERT_OK(ot_slice_sched_create(t, &s));
    int a, b, c2, o[3], e[3];
    ASSERT_OK(ot_slice_alloc(s, (int[]){2, 2, 1}, &a, o, e));
    EXPECT_INT_EQ(o[0], 0); /* a corner: most contact with the edges */
    EXPECT_INT_EQ(o[1], 0);
    ASSERT_OK(ot_slice_alloc(s, (int[]){1, 4, 1}, &b, o, e)); /* 4 long: along y at x = 3 or 2 */
    EXPECT_INT_EQ(ot_slice_free_devices(s), 16 - 4 - 4);
    /* a 3x3 cannot fit any more */
    EXPECT_STATUS(ot_slice_alloc(s, (int[]){3, 3, 1}, &c2, NULL, NULL), OT_ERR_OUT_OF_RANGE);
    EXPECT_STR_CONTAINS(ot_last_error(), "largest free box");
    EXPECT_STATUS(ot_slice_alloc(s, (int[]){5, 1, 1}, &c2, NULL, NULL), OT_ERR_INVALID_ARGUMENT);
    double f1 = ot_slice_fragmentation(s);
    EXPECT_TRUE(f1 >= 0 && f1 < 1);
    /* freeing merges: the whole mesh is one free box again */
    ASSERT_OK(ot_slice_release(s, a));
    ASSERT_OK(ot_slice_release(s, b));
    EXPECT_STATUS(ot_slice_release(s, b), OT_ERR_NOT_FOUND);
    int le[3];
    EXPECT_INT_EQ(ot_slice_largest_free(s, le), 16);
    EXPECT_NEAR(ot_slice_fragmentation(s), 0, 0);
    ASSERT_OK(ot_slice_alloc(s, (int[]){4, 4, 1}, &c2, NULL, NULL));
    EXPECT_INT_EQ(ot_slice_owner(s, 5), c2);
    ot_slice_sched_free(s);
    ot_topology_free(t);
}

static void test_slices_torus_packing(void) {
    ot_topology *t;
    ASSERT_OK(ot_topology_preset("v4-8x8x8", &t));
    ot_slice_sched *s;
    ASSERT_OK(ot_slice_sched_create(t, &s));
    /* eight 4x4x4 cubes fill the 8x8x8 exactly with best fit */
    int jobs[8];
    for (int i = 0; i < 8; i++)
        ASSERT_OK(ot_slice_alloc(s, (int[]){4, 4, 4}, &jobs[i], NULL, NULL));
    EXPECT_INT_EQ(ot_slice_free_devices(s), 0);
    int extra;
    EXPECT_STATUS(ot_slice_alloc(s, (int[]){1, 1, 1}, &extra, NULL, NULL), OT_ERR_OUT_OF_RANGE);
    /* free two cubes that are not neighbours, fragmentation > 0; free the rest, 0 */
    ASSERT_OK(ot_slice_release(s, jobs[0]));
    ASSERT_OK(ot_slice_release(s, jobs[7]));
    EXPECT_INT_EQ(ot_slice_free_devices(s), 128);
    double f = ot_slice_fragmentation(s);
    EXPECT_TRUE(f > 0);
    for (int i = 1; i < 7; i++) ASSERT_OK(ot_slice_release(s, jobs[i]));
    EXPECT_NEAR(ot_slice_fragmentation(s), 0, 0);
    /* a 6x8x8 and a 2x8x8 fill it again */
    int j1, j2, o[3], e[3];
    ASSERT_OK(ot_slice_alloc(s, (int[]){6, 8, 8}, &j1, o, e));
    ASSERT_OK(ot_slice_alloc(s, (int[]){2, 8, 8}, &j2, o, e));
    EXPECT_INT_EQ(ot_slice_free_devices(s), 0);
    ot_slice_sched_free(s);
    ot_topology_free(t);
}

static void test_aggregator_alloc_failures(void) {
    ot_local_world *w;
    ot_comm *c;
    ASSERT_OK(ot_local_world_create(1, &w));
    ASSERT_OK(ot_local_world_comm(w, 0, &c));
    int64_t live = ot_alloc_live();
    for (int k = 0; k < OT_COMPRESS_COUNT; k++)
        for (int64_t n = 1; n < 12; n++) {
            ot_grad_aggregator_options o = ot_grad_aggregator_options_default();
            o.compress = (ot_grad_compress)k;
            ot_alloc_fail_after(n);
            ot_grad_aggregator *a = NULL;
            (void)ot_grad_aggregator_create(c, NT, tsizes, &o, &a);
            ot_alloc_fail_after(0);
            ot_grad_aggregator_free(a);
            EXPECT_INT_EQ(ot_alloc_live(), live);
        }
    ot_grad_aggregator_options bad = ot_grad_aggregator_options_default();
    bad.op = OT_REDOP_MAX;
    ot_grad_aggregator *a;
    EXPECT_STATUS(ot_grad_aggregator_create(c, NT, tsizes, &bad, &a), OT_ERR_INVALID_ARGUMENT);
    ot_comm_free(c);
    ot_local_world_free(w);
}

OT_TEST_MAIN(OT_TEST(test_aggregator_alloc_failures), OT_TEST(test_aggregate_plain),
             OT_TEST(test_compression_with_error_feedback), OT_TEST(test_weighted_mean),
             OT_TEST(test_batch_full_batch_mean), OT_TEST(test_localsgd),
             OT_TEST(test_slices_best_fit), OT_TEST(test_slices_torus_packing))
