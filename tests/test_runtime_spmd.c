/* The multi-device corpus (tests/data/jax_spmd): XLA's per-partition programs (num_partitions=8,
 * collectives with replica_groups, use_global_device_ids, source_target_pairs) compiled -O2 and
 * run on 8 host devices, one thread each, collectives through the local communicator. Row p of
 * input_i.npy is partition p's parameter i; row p of expected_j.npy its result j; every case is
 * exact, and every case must pass. */
#include "optitpu/collectives.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#include <jansson.h>

#ifndef OT_SOURCE_DIR
#define OT_SOURCE_DIR "."
#endif

#define NP 8

#define MAXIO 16

typedef struct spmd_case {
    ot_executable *exe;
    ot_device *dev[NP];
    int nin, nout;
    ot_tensor in[MAXIO], exp[MAXIO]; /* [NP, ...] */
    bool ok[NP];
    char why[NP][256];
} spmd_case;

/* Row p of a [NP, ...] tensor as a tensor of the remaining dims (borrowed). */
static void row(const ot_tensor *t, int p, ot_tensor *out) {
    ot_shape s = t->shape;
    s.rank = t->shape.rank - 1;
    for (int k = 0; k < s.rank; k++) s.dims[k] = t->shape.dims[k + 1];
    size_t rb = t->nbytes / NP;
    ot_tensor_borrow(out, &s, (char *)t->data + (size_t)p * rb);
}

static ot_status run_partition(void *ud, int rank, ot_comm *c) {
    spmd_case *x = ud;
    ot_buffer *in[MAXIO] = {0}, *out[MAXIO] = {0};
    ot_status s = OT_OK;
    for (int k = 0; k < x->nin && s == OT_OK; k++) {
        ot_tensor r;
        row(&x->in[k], rank, &r);
        s = ot_buffer_from_host(x->dev[rank], &r, &in[k]);
    }
    ot_run_options ro = ot_run_options_default();
    ro.comm = c;
    if (s == OT_OK)
        s = ot_device_execute(x->dev[rank], x->exe, in, x->nin, out, x->nout, &ro, NULL);
    x->ok[rank] = s == OT_OK;
    if (s != OT_OK) snprintf(x->why[rank], sizeof x->why[rank], "%s", ot_last_error());
    for (int k = 0; k < x->nout && s == OT_OK; k++) {
        ot_tensor got, want;
        s = ot_buffer_to_host(out[k], &got);
        if (s != OT_OK) break;
        row(&x->exp[k], rank, &want);
        if (!ot_shape_equal(&got.shape, &want.shape) || memcmp(got.data, want.data, got.nbytes)) {
            x->ok[rank] = false;
            snprintf(x->why[rank], sizeof x->why[rank], "output %d differs", k);
        }
        ot_tensor_release(&got);
    }
    for (int k = 0; k < MAXIO; k++) {
        ot_buffer_free(in[k]);
        ot_buffer_free(out[k]);
    }
    return s;
}

static void test_spmd_corpus(void) {
    json_error_t je;
    json_t *root = json_load_file(OT_SOURCE_DIR "/tests/data/jax_spmd/cases.json", 0, &je);
    ASSERT_TRUE(root != NULL);
    json_t *cases = json_object_get(root, "cases");
    int pass = 0, fail = 0;
    int64_t live0 = ot_alloc_live();
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t *k = json_array_get(cases, ci);
        const char *name = json_string_value(json_object_get(k, "name"));
        EXPECT_INT_EQ(json_integer_value(json_object_get(k, "partitions")), NP);
        char dir[1024], path[1200];
        snprintf(dir, sizeof dir, OT_SOURCE_DIR "/tests/data/jax_spmd/%s", name);
        spmd_case x;
        memset(&x, 0, sizeof x);
        snprintf(path, sizeof path, "%s/%s", dir,
                 json_string_value(json_object_get(k, "module_spmd")));
        ot_module *m = NULL;
        bool ok = ot_hlo_parse_file(path, NULL, &m) == OT_OK;
        ot_compile_options o = ot_compile_options_default();
        if (ok) ok = ot_compile(m, &o, &x.exe) == OT_OK;
        json_t *ins = json_object_get(k, "inputs"), *outs = json_object_get(k, "outputs");
        x.nin = (int)json_array_size(ins);
        x.nout = (int)json_array_size(outs);
        for (int j = 0; ok && j < x.nin; j++) {
            snprintf(path, sizeof path, "%s/%s", dir,
                     json_string_value(json_object_get(json_array_get(ins, j), "file")));
            ok = ot_npy_read_file(path, &x.in[j]) == OT_OK;
        }
        for (int j = 0; ok && j < x.nout; j++) {
            snprintf(path, sizeof path, "%s/%s", dir,
                     json_string_value(json_object_get(json_array_get(outs, j), "file")));
            ok = ot_npy_read_file(path, &x.exp[j]) == OT_OK;
        }
        for (int p = 0; ok && p < NP; p++) ok = ot_host_device_create(p, 0, &x.dev[p]) == OT_OK;
        if (!ok) printf("FAIL %s: %s\n", name, ot_last_error());
        if (ok) {
            ot_status st[NP];
            ot_local_run(NP, run_partition, &x, st);
            for (int p = 0; p < NP; p++)
                if (!x.ok[p]) {
                    if (ok) printf("FAIL %s: partition %d: %s\n", name, p, x.why[p]);
                    ok = false;
                }
        }
        if (ok)
            pass++;
        else
            fail++, ot_test_failures_++;
        for (int p = 0; p < NP; p++) ot_device_free(x.dev[p]);
        for (int j = 0; j < MAXIO; j++) {
            ot_tensor_release(&x.in[j]);
            ot_tensor_release(&x.exp[j]);
        }
        ot_executable_free(x.exe);
        ot_module_free(m);
    }
    EXPECT_INT_EQ(ot_alloc_live(), live0);
    printf("spmd corpus on %d devices: %d pass, %d fail\n", NP, pass, fail);
    /* every case of the corpus (13 when this was written) runs exactly */
    EXPECT_INT_EQ(json_array_size(cases), 13);
    EXPECT_INT_EQ(pass, (long long)json_array_size(cases));
    EXPECT_INT_EQ(fail, 0);
    ot_test_assertions_++;
    json_decref(root);
}

OT_TEST_MAIN(OT_TEST(test_spmd_corpus))
