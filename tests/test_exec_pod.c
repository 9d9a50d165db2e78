/* Collective ops evaluated on 4 in-process replicas, each on its own thread, with the exec
 * communicator hook implemented over the pod's local shared-memory communicator (an all-gather of
 * bytes): every replica gets the same, hand-computed results. This is the adapter the runtime
 * uses; exec itself does not depend on pod. */
#include "optitpu/collectives.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "ot_test.h"

#define NREP 4

static ot_status pod_exchange(void *ctx, const int64_t *ids, int n, const void *send, size_t bytes,
                              void *recv) {
    ot_comm *c = ctx;
    if (n != ot_comm_size(c))
        return ot_error(OT_ERR_UNIMPLEMENTED, "test adapter: only the all-replica group");
    for (int k = 0; k < n; k++)
        if (ids[k] != k) return ot_error(OT_ERR_UNIMPLEMENTED, "test adapter: group order");
    return ot_comm_allgather(c, send, recv, bytes, OT_U8, NULL);
}

typedef struct run_ctx {
    const ot_module *m;
    ot_value results[NREP];
} run_ctx;

static ot_status replica(void *ud, int rank, ot_comm *c) {
    run_ctx *r = ud;
    ot_exec_comm ec = {c, rank, 0, NREP, 1, pod_exchange};
    ot_eval_options o = ot_eval_options_default();
    o.comm = &ec;
    ot_shape s;
    ot_shape_make(&s, OT_F32, 1, (int64_t[]){4});
    ot_value x;
    OT_CHECK(ot_value_alloc_array(&x, &s));
    float *d = x.array.data;
    for (int k = 0; k < 4; k++) d[k] = (float)((rank + 1) * (k == 0 ? 1 : 10 * k));
    ot_status st = ot_evaluate(r->m, &x, 1, &o, &r->results[rank]);
    ot_value_release(&x);
    return st;
}

static void test_collectives_on_local_pod(void) {
    ot_module *m = ot_module_new("pod");
    ot_module_set_replica_count(m, NREP);
    ot_computation *add = ot_module_add_computation(m, "add");
    {
        ot_instr *a = ot_build_parameter(add, 0, ot_shape_scalar(OT_F32), "a");
        ot_instr *b = ot_build_parameter(add, 1, ot_shape_scalar(OT_F32), "b");
        ot_computation_set_root(add, ot_build_binary(add, OT_OP_ADD, a, b));
    }
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_shape s;
    ot_shape_make(&s, OT_F32, 1, (int64_t[]){4});
    ot_instr *x = ot_build_parameter(c, 0, s, "x");
    ot_instr *outs[6] = {
        ot_build_all_reduce(c, &x, 1, NULL, 0, false, add),
        ot_build_all_gather(c, x, 0, NULL, 0, false),
        ot_build_reduce_scatter(c, x, 0, NULL, 0, false, add),
        ot_build_all_to_all(c, x, 0, NULL, 0),
        ot_build_collective_permute(c, x, (int64_t[]){0, 1, 1, 2, 2, 3, 3, 0}, 4, 0),
        ot_build_replica_id(c)};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 6));
    ot_module_set_entry(m, c);
    ASSERT_OK(ot_module_finalize(m));

    run_ctx r;
    r.m = m;
    for (int k = 0; k < NREP; k++) r.results[k] = ot_value_empty();
    ot_status st[NREP];
    ASSERT_OK(ot_local_run(NREP, replica, &r, st));
    /* replica q holds (q+1) * [1, 10, 20, 30] */
    for (int q = 0; q < NREP; q++) {
        EXPECT_OK(st[q]);
        const ot_value *v = &r.results[q];
        if (v->kind != OT_IR_TUPLE || v->ntuple != 6) {
            EXPECT_TRUE(false);
            continue;
        }
        const float *ar = v->tuple[0].array.data;
        EXPECT_TRUE(ar[0] == 10 && ar[1] == 100 && ar[2] == 200 && ar[3] == 300);
        const float *ag = v->tuple[1].array.data;
        for (int m2 = 0; m2 < NREP; m2++)
            EXPECT_TRUE(ag[4 * m2] == (float)(m2 + 1) && ag[4 * m2 + 3] == 30.0f * (m2 + 1));
        const float *rs = v->tuple[2].array.data;
        float want_rs[4] = {10, 100, 200, 300};
        EXPECT_TRUE(rs[0] == want_rs[q]);
        /* all-to-all: element m comes from replica m's chunk q */
        const float *a2a = v->tuple[3].array.data;
        for (int m2 = 0; m2 < NREP; m2++) {
            float src = (float)((m2 + 1) * (q == 0 ? 1 : 10 * q));
            EXPECT_TRUE(a2a[m2] == src);
        }
        /* permute q-1 -> q */
        const float *cp = v->tuple[4].array.data;
        int from = (q + NREP - 1) % NREP;
        EXPECT_TRUE(cp[0] == (float)(from + 1));
        EXPECT_INT_EQ(*(uint32_t *)v->tuple[5].array.data, q);
        ot_value_release(&r.results[q]);
    }
    ot_module_free(m);
}

OT_TEST_MAIN(OT_TEST(test_collectives_on_local_pod))
