/* XLA's four collective group modes on 2 replicas x 4 partitions (8 devices, global device id
 * g = replica * 4 + partition): cross-replica (no channel_id), cross-partition (channel_id on
 * all-to-all and collective-permute), cross-replica-and-partition (channel_id on all-reduce /
 * all-gather / reduce-scatter without use_global_device_ids: groups list replicas, each with all
 * its partitions, replica-major) and flattened ids (use_global_device_ids=true). One module with
 * every mode runs through ot_evaluate on 8 threads (the exec communicator hook over the local
 * pod) and through compile -> execute on 8 host devices; every device's results are checked
 * against values written out per op below. Bad groups and pairs fail clearly. */
#include "optitpu/collectives.h"
#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#define R    2
#define P    4
#define NDEV (R * P)
#define NOUT 13

static const char k_module[] =
    "HloModule modes, replica_count=2, num_partitions=4\n"
    "\n"
    "add {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n"
    "}\n"
    "\n"
    "ENTRY main {\n"
    "  x = f32[4] parameter(0)\n"
    "  k = f32[] constant(1000)\n"
    "  kb = f32[4] broadcast(k), dimensions={}\n"
    "  x2 = f32[4] add(x, kb)\n"
    "  ar_cr = f32[4] all-reduce(x), replica_groups={}, to_apply=add\n"
    "  ar_rap = f32[4] all-reduce(x), channel_id=1, replica_groups={{0},{1}}, to_apply=add\n"
    "  ag_rap = f32[32] all-gather(x), channel_id=2, replica_groups={{1,0}}, dimensions={0}\n"
    "  ag_flat = f32[8] all-gather(x), channel_id=3, use_global_device_ids=true, "
    "replica_groups={{0,5},{1,4},{2,7},{3,6}}, dimensions={0}\n"
    "  rs_rap = f32[1] reduce-scatter(x), channel_id=4, replica_groups={{0},{1}}, "
    "dimensions={0}, to_apply=add\n"
    "  a2a_cp = f32[4] all-to-all(x), channel_id=5, replica_groups={{0,1},{2,3}}, "
    "dimensions={0}\n"
    "  a2a_cr = f32[4] all-to-all(x), replica_groups={{1,0}}, dimensions={0}\n"
    "  a2a_t = (f32[4], f32[4]) all-to-all(x, x2), channel_id=6, replica_groups={{0,3},{1,2}}\n"
    "  t0 = f32[4] get-tuple-element(a2a_t), index=0\n"
    "  t1 = f32[4] get-tuple-element(a2a_t), index=1\n"
    "  cp_part = f32[4] collective-permute(x), channel_id=7, "
    "source_target_pairs={{0,1},{1,2},{2,3},{3,0}}\n"
    "  cp_rep = f32[4] collective-permute(x), source_target_pairs={{0,1}}\n"
    "  rid = u32[] replica-id()\n"
    "  pid = u32[] partition-id()\n"
    "  ROOT r = (f32[4], f32[4], f32[32], f32[8], f32[1], f32[4], f32[4], f32[4], f32[4], "
    "f32[4], f32[4], u32[], u32[]) tuple(ar_cr, ar_rap, ag_rap, ag_flat, rs_rap, a2a_cp, a2a_cr, "
    "t0, t1, cp_part, cp_rep, rid, pid)\n"
    "}\n";

/* Device g's input: x[k] = 10 g + k. */
static float X(int g, int k) {
    return (float)(10 * g + k);
}

/* The expected output `o` of device (r, p) into w (n elements); integers as floats. */
static int expected(int o, int r, int p, float *w) {
    int g = r * P + p;
    switch (o) {
    case 0: /* cross-replica all-reduce: replicas 0 and 1 of this partition */
        for (int k = 0; k < 4; k++) w[k] = X(p, k) + X(P + p, k);
        return 4;
    case 1: /* cross-replica-and-partition, group {r}: the 4 partitions of this replica */
        for (int k = 0; k < 4; k++)
            w[k] = X(4 * r, k) + X(4 * r + 1, k) + X(4 * r + 2, k) + X(4 * r + 3, k);
        return 4;
    case 2: { /* cross-replica-and-partition all-gather, group {1,0}: devices 4..7 then 0..3 */
        static const int order[8] = {4, 5, 6, 7, 0, 1, 2, 3};
        for (int j = 0; j < 8; j++)
            for (int k = 0; k < 4; k++) w[4 * j + k] = X(order[j], k);
        return 32;
    }
    case 3: { /* flattened ids {0,5},{1,4},{2,7},{3,6} */
        static const int grp[4][2] = {{0, 5}, {1, 4}, {2, 7}, {3, 6}};
        for (int q = 0; q < 4; q++)
            if (grp[q][0] == g || grp[q][1] == g)
                for (int k = 0; k < 4; k++) {
                    w[k] = X(grp[q][0], k);
                    w[4 + k] = X(grp[q][1], k);
                }
        return 8;
    }
    case 4: /* reduce-scatter over this replica's 4 partitions: block p of the sum */
        w[0] = X(4 * r, p) + X(4 * r + 1, p) + X(4 * r + 2, p) + X(4 * r + 3, p);
        return 1;
    case 5: { /* cross-partition all-to-all, partition groups {0,1},{2,3} of this replica */
        int m0 = 4 * r + (p / 2) * 2, m1 = m0 + 1, pos = p % 2;
        w[0] = X(m0, 2 * pos), w[1] = X(m0, 2 * pos + 1);
        w[2] = X(m1, 2 * pos), w[3] = X(m1, 2 * pos + 1);
        return 4;
    }
    case 6: { /* cross-replica all-to-all, replica group {1,0} of this partition */
        int m0 = P + p, m1 = p, pos = r == 1 ? 0 : 1;
        w[0] = X(m0, 2 * pos), w[1] = X(m0, 2 * pos + 1);
        w[2] = X(m1, 2 * pos), w[3] = X(m1, 2 * pos + 1);
        return 4;
    }
    case 7:
    case 8: { /* tuple all-to-all over partitions {0,3},{1,2}: result j = member j's operand
               * [pos] (operand 0 is x, operand 1 is x + 1000) */
        int a = (p == 0 || p == 3) ? 0 : 1, b = a == 0 ? 3 : 2;
        int pos = p == a ? 0 : 1;
        int member = 4 * r + (o == 7 ? a : b);
        for (int k = 0; k < 4; k++) w[k] = X(member, k) + (pos ? 1000.0f : 0.0f);
        return 4;
    }
    case 9: /* cross-partition permute, ring p-1 -> p within the replica */
        for (int k = 0; k < 4; k++) w[k] = X(4 * r + (p + 3) % 4, k);
        return 4;
    case 10: /* cross-replica permute 0 -> 1: replica 1 gets replica 0's, replica 0 zeros */
        for (int k = 0; k < 4; k++) w[k] = r == 1 ? X(p, k) : 0.0f;
        return 4;
    default: return 0;
    }
}

/* Checks device g's result leaves (host arrays) against the expectations. */
static int check_device(int g, const void *const *leaf, const int64_t *nbytes, char *why,
                        size_t whyn) {
    int r = g / P, p = g % P;
    for (int o = 0; o < NOUT - 2; o++) {
        float w[32];
        int n = expected(o, r, p, w);
        if (nbytes[o] != (int64_t)n * 4 || memcmp(leaf[o], w, (size_t)n * 4)) {
            const float *got = leaf[o];
            snprintf(why, whyn, "device %d output %d: got %g %g..., want %g %g...", g, o,
                     nbytes[o] >= 4 ? got[0] : -1.0, nbytes[o] >= 8 ? got[1] : -1.0, w[0],
                     n > 1 ? w[1] : -1.0f);
            return 1;
        }
    }
    if (*(const uint32_t *)leaf[11] != (uint32_t)r || *(const uint32_t *)leaf[12] != (uint32_t)p) {
        snprintf(why, whyn, "device %d: replica-id / partition-id wrong", g);
        return 1;
    }
    return 0;
}

static ot_status fill_input(int g, ot_tensor *t) {
    ot_shape s;
    OT_CHECK(ot_shape_make(&s, OT_F32, 1, (int64_t[]){4}));
    OT_CHECK(ot_tensor_alloc(t, &s));
    for (int k = 0; k < 4; k++) ((float *)t->data)[k] = X(g, k);
    return OT_OK;
}

/* ---- through ot_evaluate: the exec hook over the local pod ------------------------------ */

typedef struct pod_adapter {
    ot_comm *comm;
    char scratch[NDEV * 256];
} pod_adapter;

/* Every device runs every collective; an all-gather of everyone's bytes, then the group's
 * members picked in group order. */
static ot_status pod_exchange(void *ctx, const int64_t *ids, int n, const void *send, size_t bytes,
                              void *recv) {
    pod_adapter *a = ctx;
    if (bytes > 256) return ot_error(OT_ERR_INTERNAL, "test adapter: %zu bytes", bytes);
    if (bytes == 0) return ot_comm_barrier(a->comm, NULL);
    OT_CHECK(ot_comm_allgather(a->comm, send, a->scratch, bytes, OT_U8, NULL));
    for (int k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= NDEV)
            return ot_error(OT_ERR_INTERNAL, "test adapter: device %lld", (long long)ids[k]);
        memcpy((char *)recv + (size_t)k * bytes, a->scratch + (size_t)ids[k] * bytes, bytes);
    }
    return OT_OK;
}

typedef struct exec_run {
    const ot_module *m;
    int bad[NDEV];
    char why[NDEV][256];
} exec_run;

static ot_status exec_device(void *ud, int g, ot_comm *c) {
    exec_run *x = ud;
    pod_adapter *a = calloc(1, sizeof *a);
    if (!a) return ot_error(OT_ERR_OUT_OF_MEMORY, "test: out of memory");
    a->comm = c;
    ot_exec_comm ec = {a, g / P, g % P, R, P, pod_exchange};
    ot_eval_options o = ot_eval_options_default();
    o.comm = &ec;
    ot_tensor in;
    ot_status st = fill_input(g, &in);
    ot_value res = ot_value_empty();
    if (st == OT_OK) st = ot_evaluate_tensors(x->m, &in, 1, &o, &res);
    if (st == OT_OK) {
        const void *leaf[NOUT];
        int64_t nb[NOUT];
        if (ot_value_leaf_count(&res) != NOUT) {
            x->bad[g] = 1;
            snprintf(x->why[g], sizeof x->why[g], "device %d: %d leaves", g,
                     ot_value_leaf_count(&res));
        } else {
            for (int q = 0; q < NOUT; q++) {
                leaf[q] = ot_value_leaf(&res, q)->array.data;
                nb[q] = (int64_t)ot_value_leaf(&res, q)->array.nbytes;
            }
            x->bad[g] = check_device(g, leaf, nb, x->why[g], sizeof x->why[g]);
        }
    } else {
        x->bad[g] = 1;
        snprintf(x->why[g], sizeof x->why[g], "device %d: %s", g, ot_last_error());
    }
    ot_value_release(&res);
    ot_tensor_release(&in);
    free(a);
    return st;
}

static ot_module *parse_text(const char *text) {
    ot_module *m = NULL;
    if (ot_hlo_parse(text, strlen(text), NULL, &m) != OT_OK) {
        fprintf(stderr, "  parse: %s\n", ot_last_error());
        return NULL;
    }
    return m;
}

static void test_modes_exec(void) {
    ot_module *m = parse_text(k_module);
    ASSERT_TRUE(m != NULL);
    exec_run x;
    memset(&x, 0, sizeof x);
    x.m = m;
    ot_status st[NDEV];
    EXPECT_OK(ot_local_run(NDEV, exec_device, &x, st));
    for (int g = 0; g < NDEV; g++) {
        EXPECT_OK(st[g]);
        if (x.bad[g]) fprintf(stderr, "  %s\n", x.why[g]);
        EXPECT_INT_EQ(x.bad[g], 0);
    }
    ot_module_free(m);
}

/* ---- through the runtime: compile, 8 host devices --------------------------------------- */

typedef struct rt_run {
    ot_executable *exe;
    ot_device *dev[NDEV];
    int bad[NDEV];
    char why[NDEV][256];
} rt_run;

static ot_status rt_device(void *ud, int g, ot_comm *c) {
    rt_run *x = ud;
    ot_tensor in;
    OT_CHECK(fill_input(g, &in));
    ot_buffer *bin = NULL, *out[NOUT] = {0};
    ot_status st = ot_buffer_from_host(x->dev[g], &in, &bin);
    ot_tensor_release(&in);
    ot_run_options ro = ot_run_options_default();
    ro.comm = c;
    if (st == OT_OK) st = ot_device_execute(x->dev[g], x->exe, &bin, 1, out, NOUT, &ro, NULL);
    if (st != OT_OK) {
        x->bad[g] = 1;
        snprintf(x->why[g], sizeof x->why[g], "device %d: %s", g, ot_last_error());
    }
    ot_tensor host[NOUT];
    memset(host, 0, sizeof host);
    const void *leaf[NOUT];
    int64_t nb[NOUT];
    for (int q = 0; q < NOUT && st == OT_OK; q++) {
        st = ot_buffer_to_host(out[q], &host[q]);
        leaf[q] = host[q].data;
        nb[q] = (int64_t)host[q].nbytes;
    }
    if (st == OT_OK) x->bad[g] = check_device(g, leaf, nb, x->why[g], sizeof x->why[g]);
    for (int q = 0; q < NOUT; q++) {
        ot_tensor_release(&host[q]);
        ot_buffer_free(out[q]);
    }
    ot_buffer_free(bin);
    return st;
}

static void test_modes_runtime(void) {
    int64_t live0 = ot_alloc_live();
    ot_module *m = parse_text(k_module);
    ASSERT_TRUE(m != NULL);
    for (int level = 0; level <= 2; level += 2) {
        rt_run x;
        memset(&x, 0, sizeof x);
        ot_compile_options o = ot_compile_options_default();
        o.opt_level = level;
        ASSERT_OK(ot_compile(m, &o, &x.exe));
        EXPECT_INT_EQ(ot_executable_output_count(x.exe), NOUT);
        for (int g = 0; g < NDEV; g++) ASSERT_OK(ot_host_device_create(g, 0, &x.dev[g]));
        ot_status st[NDEV];
        EXPECT_OK(ot_local_run(NDEV, rt_device, &x, st));
        for (int g = 0; g < NDEV; g++) {
            EXPECT_OK(st[g]);
            if (x.bad[g]) fprintf(stderr, "  -O%d %s\n", level, x.why[g]);
            EXPECT_INT_EQ(x.bad[g], 0);
            ot_device_free(x.dev[g]);
        }
        ot_executable_free(x.exe);
    }
    ot_module_free(m);
    EXPECT_INT_EQ(ot_alloc_live(), live0);
}

/* ---- bad groups and pairs --------------------------------------------------------------- */

static ot_status never_exchange(void *ctx, const int64_t *ids, int n, const void *send,
                                size_t bytes, void *recv) {
    (void)ctx, (void)ids, (void)n, (void)send, (void)bytes, (void)recv;
    return ot_error(OT_ERR_INTERNAL, "test: exchange reached");
}

static void expect_refused(const char *instr, const char *what) {
    char text[1024];
    snprintf(text, sizeof text,
             "HloModule bad, replica_count=2, num_partitions=4\n"
             "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
             "  ROOT s = f32[] add(a, b)\n}\n"
             "ENTRY main {\n  x = f32[4] parameter(0)\n  ROOT y = %s\n}\n",
             instr);
    ot_module *m = parse_text(text);
    ASSERT_TRUE(m != NULL);
    ot_exec_comm ec = {NULL, 1, 2, R, P, never_exchange};
    ot_eval_options o = ot_eval_options_default();
    o.comm = &ec;
    ot_tensor in;
    ASSERT_OK(fill_input(6, &in));
    ot_value res = ot_value_empty();
    EXPECT_STATUS(ot_evaluate_tensors(m, &in, 1, &o, &res), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), what);
    EXPECT_STR_CONTAINS(ot_last_error(), "y");
    EXPECT_TRUE(res.kind == OT_IR_TOKEN);
    ot_tensor_release(&in);
    ot_module_free(m);
}

static void test_modes_refused(void) {
    int64_t live0 = ot_alloc_live();
    /* XLA: use_global_device_ids without a channel id is an invalid combination */
    expect_refused("f32[4] all-reduce(x), use_global_device_ids=true, replica_groups={{0,1,2,3,4,"
                   "5,6,7}}, to_apply=add",
                   "needs a channel_id");
    /* flattened ids need explicit groups */
    expect_refused("f32[4] all-reduce(x), channel_id=1, use_global_device_ids=true, "
                   "replica_groups={}, to_apply=add",
                   "needs explicit replica_groups");
    /* this device (replica 1, partition 2) is in no group */
    expect_refused("f32[4] all-reduce(x), channel_id=1, replica_groups={{0}}, to_apply=add",
                   "replica 1 is in none of the replica groups");
    expect_refused("f32[4] all-to-all(x), channel_id=1, replica_groups={{0,1},{3,4}}, "
                   "dimensions={0}",
                   "partition 2 is in none");
    /* ids outside the mode's id space */
    expect_refused("f32[4] all-to-all(x), channel_id=1, replica_groups={{0,1},{2,5}}, "
                   "dimensions={0}",
                   "id 5 in replica_groups is outside the 4 partitions");
    expect_refused("f32[4] collective-permute(x), channel_id=1, source_target_pairs={{4,2}}",
                   "outside the 4 partitions");
    expect_refused("f32[4] collective-permute(x), source_target_pairs={{0,2}}",
                   "outside the 2 replicas");
    EXPECT_INT_EQ(ot_alloc_live(), live0);
}

OT_TEST_MAIN(OT_TEST(test_modes_exec), OT_TEST(test_modes_runtime), OT_TEST(test_modes_refused))
