/* Error-feedback residuals out of and into a gradient aggregator: members whose aggregators are
 * replaced mid-run by new ones given the old residuals (a checkpoint and a resume) produce the
 * same bits as members that never stopped, for every compression; the calls refuse what does not
 * fit. */
#include "ot_test.h"

#include <stdbool.h>

#include "optitpu/collectives.h"
#include "optitpu/pod.h"

#define N     2
#define ELEMS 700
#define STEPS 6

typedef struct rcase {
    ot_grad_compress c;
    int cut;   /* the step before which the aggregators are replaced (0: never) */
    bool drop; /* the new aggregators start from zero residuals instead */
    float out[N][STEPS][ELEMS];
} rcase;

static float gv(int rank, int i, int step) {
    uint32_t h = (uint32_t)(rank * 7919 + i * 31 + step * 1299709) * 0x9e3779b1u;
    h ^= h >> 15;
    return ((float)(h % 20001) - 10000.0f) / 997.0f;
}

static ot_status run_rank(void *ud, int rank, ot_comm *c) {
    rcase *rc = ud;
    ot_grad_aggregator_options o = ot_grad_aggregator_options_default();
    o.compress = rc->c;
    o.op = OT_REDOP_SUM;
    o.topk_fraction = 0.05;
    size_t n = ELEMS;
    ot_grad_aggregator *a;
    OT_CHECK(ot_grad_aggregator_create(c, 1, &n, &o, &a));
    float g[ELEMS], saved[ELEMS];
    float *bufs[1] = {g};
    ot_status s = OT_OK;
    for (int step = 0; step < STEPS && s == OT_OK; step++) {
        if (step == rc->cut && step > 0) {
            s = ot_grad_residual_get(a, saved, ELEMS);
            ot_grad_aggregator_free(a);
            a = NULL;
            if (s == OT_OK) s = ot_grad_aggregator_create(c, 1, &n, &o, &a);
            if (s == OT_OK && !rc->drop) s = ot_grad_residual_set(a, saved, ELEMS);
        }
        for (int i = 0; i < ELEMS; i++) g[i] = gv(rank, i, step);
        if (s == OT_OK) s = ot_grad_aggregate(a, bufs);
        memcpy(rc->out[rank][step], g, sizeof g);
    }
    ot_grad_aggregator_free(a);
    return s;
}

static void test_resume_bit_identical(void) {
    ot_grad_compress kinds[] = {OT_COMPRESS_BF16, OT_COMPRESS_F16, OT_COMPRESS_INT8,
                                OT_COMPRESS_TOPK};
    static rcase a, b, z;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        ot_local_world *w;
        ot_status st[N];
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        memset(&z, 0, sizeof z);
        a.c = b.c = z.c = kinds[k];
        b.cut = z.cut = 3;
        z.drop = true;
        ASSERT_OK(ot_local_world_create(N, &w));
        ASSERT_OK(ot_local_world_run(w, run_rank, &a, st));
        ot_local_world_free(w);
        ASSERT_OK(ot_local_world_create(N, &w));
        ASSERT_OK(ot_local_world_run(w, run_rank, &b, st));
        ot_local_world_free(w);
        EXPECT_TRUE(memcmp(a.out, b.out, sizeof a.out) == 0);
        /* without the residuals the results differ: the test can tell */
        ASSERT_OK(ot_local_world_create(N, &w));
        ASSERT_OK(ot_local_world_run(w, run_rank, &z, st));
        ot_local_world_free(w);
        EXPECT_TRUE(memcmp(a.out, z.out, sizeof a.out) != 0);
    }
}

static ot_status refuse_rank(void *ud, int rank, ot_comm *c) {
    (void)ud;
    (void)rank;
    size_t n = 10;
    float r[10];
    ot_grad_aggregator *plain, *comp;
    ot_grad_aggregator_options o = ot_grad_aggregator_options_default();
    OT_CHECK(ot_grad_aggregator_create(c, 1, &n, &o, &plain));
    o.compress = OT_COMPRESS_INT8;
    OT_CHECK(ot_grad_aggregator_create(c, 1, &n, &o, &comp));
    ot_status s1 = ot_grad_residual_get(plain, r, 10);
    ot_status s2 = ot_grad_residual_get(comp, r, 9);
    ot_status s3 = ot_grad_residual_set(comp, r, 11);
    ot_status s4 = ot_grad_residual_get(comp, r, 10);
    ot_grad_aggregator_free(plain);
    ot_grad_aggregator_free(comp);
    if (s1 != OT_ERR_FAILED_PRECONDITION || s2 != OT_ERR_INVALID_ARGUMENT ||
        s3 != OT_ERR_INVALID_ARGUMENT || s4 != OT_OK)
        return ot_error(OT_ERR_INTERNAL, "statuses %d %d %d %d", s1, s2, s3, s4);
    for (int i = 0; i < 10; i++)
        if (r[i] != 0) return ot_error(OT_ERR_INTERNAL, "a new residual is not zero");
    return OT_OK;
}

static void test_refusals(void) {
    ot_local_world *w;
    ot_status st[1];
    ASSERT_OK(ot_local_world_create(1, &w));
    EXPECT_OK(ot_local_world_run(w, refuse_rank, NULL, st));
    ot_local_world_free(w);
}

OT_TEST_MAIN(OT_TEST(test_resume_bit_identical), OT_TEST(test_refusals))
