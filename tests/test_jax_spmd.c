/* The multi-device JAX corpus (tests/data/jax_spmd): XLA's per-partition programs (8 partitions,
 * collectives with replica groups, channel ids, global device ids, source-target pairs) run on 8
 * threads, one per partition, with the exec communicator hook over a shared-memory exchange;
 * every partition's results must equal XLA's exactly. */
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "ot_test.h"

#include <jansson.h>
#include <pthread.h>

#ifndef OT_SOURCE_DIR
#define OT_SOURCE_DIR "."
#endif

#define MAXP 8

typedef struct world {
    pthread_barrier_t bar;
    const void *send[MAXP];
} world;

typedef struct device {
    world *w;
    int p;
} device;

/* Everyone publishes its buffer, waits, copies the group's buffers, waits again (so no buffer
 * is reused while a peer still reads it). Every partition runs the same program, so all reach
 * the same exchanges in the same order. */
static ot_status shm_exchange(void *ctx, const int64_t *ids, int n, const void *send, size_t bytes,
                              void *recv) {
    device *d = ctx;
    d->w->send[d->p] = send;
    pthread_barrier_wait(&d->w->bar);
    for (int k = 0; k < n; k++)
        if (bytes) memcpy((char *)recv + (size_t)k * bytes, d->w->send[ids[k]], bytes);
    pthread_barrier_wait(&d->w->bar);
    return OT_OK;
}

typedef struct job {
    const ot_module *m;
    device dev;
    int nparts;
    ot_value *args; /* this partition's inputs */
    int nargs;
    ot_value result;
    ot_status st;
    char err[512];
} job;

static void *run_partition(void *arg) {
    job *j = arg;
    ot_exec_comm c = {&j->dev, 0, j->dev.p, 1, j->nparts, shm_exchange};
    ot_eval_options o = ot_eval_options_default();
    o.comm = &c;
    j->st = ot_evaluate(j->m, j->args, j->nargs, &o, &j->result);
    if (j->st != OT_OK) snprintf(j->err, sizeof j->err, "%s", ot_last_error());
    return NULL;
}

/* Row p of a [P, ...] tensor as a value (bf16 relabelled from u16 when the index says so). */
static ot_status load_rows(const char *dir, const json_t *e, ot_tensor *t) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(e, "file")));
    OT_CHECK(ot_npy_read_file(path, t));
    const char *dt = json_string_value(json_object_get(e, "dtype"));
    if (ot_dtype_from_name(dt, strlen(dt)) == OT_BF16 && t->shape.dtype == OT_U16)
        t->shape.dtype = OT_BF16;
    return OT_OK;
}

static ot_status row_value(const ot_tensor *t, int p, ot_value *out) {
    ot_shape s;
    OT_CHECK(ot_shape_make(&s, t->shape.dtype, t->shape.rank - 1, t->shape.dims + 1));
    ot_tensor row;
    OT_CHECK(ot_tensor_borrow(&row, &s,
                              (char *)t->data + (size_t)p * (size_t)ot_shape_nbytes_unchecked(&s)));
    return ot_value_from_tensor(out, &row);
}

static void test_spmd_corpus(void) {
    char idx[1024];
    snprintf(idx, sizeof idx, "%s/tests/data/jax_spmd/cases.json", OT_SOURCE_DIR);
    json_t *root = json_load_file(idx, 0, NULL);
    ASSERT_TRUE(root != NULL);
    json_t *cases = json_object_get(root, "cases");
    int pass = 0, fail = 0;
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        const json_t *k = json_array_get(cases, ci);
        const char *name = json_string_value(json_object_get(k, "name"));
        int P = (int)json_integer_value(json_object_get(k, "partitions"));
        char dir[1024], path[1200], why[600] = "";
        snprintf(dir, sizeof dir, "%s/tests/data/jax_spmd/%s", OT_SOURCE_DIR, name);
        snprintf(path, sizeof path, "%s/%s", dir,
                 json_string_value(json_object_get(k, "module_spmd")));
        if (P < 1 || P > MAXP) {
            printf("FAIL %s: %d partitions\n", name, P);
            fail++;
            continue;
        }
        ot_module *m = NULL;
        if (ot_hlo_parse_file(path, NULL, &m) != OT_OK) {
            printf("FAIL %s: parse: %s\n", name, ot_last_error());
            fail++;
            continue;
        }
        const json_t *ins = json_object_get(k, "inputs"), *outs = json_object_get(k, "outputs");
        int ni = (int)json_array_size(ins), no = (int)json_array_size(outs);
        ot_tensor tin[16], tout[16];
        memset(tin, 0, sizeof tin);
        memset(tout, 0, sizeof tout);
        bool ok = ni <= 16 && no <= 16;
        for (int q = 0; ok && q < ni; q++)
            ok = load_rows(dir, json_array_get(ins, q), &tin[q]) == OT_OK;
        for (int q = 0; ok && q < no; q++)
            ok = load_rows(dir, json_array_get(outs, q), &tout[q]) == OT_OK;
        world w;
        pthread_barrier_init(&w.bar, NULL, (unsigned)P);
        job jobs[MAXP];
        pthread_t th[MAXP];
        for (int p = 0; ok && p < P; p++) {
            jobs[p] = (job){m,  {&w, p},          P,     calloc((size_t)ni + 1, sizeof(ot_value)),
                            ni, ot_value_empty(), OT_OK, ""};
            for (int q = 0; q < ni; q++) row_value(&tin[q], p, &jobs[p].args[q]);
        }
        for (int p = 0; ok && p < P; p++) pthread_create(&th[p], NULL, run_partition, &jobs[p]);
        for (int p = 0; ok && p < P; p++) pthread_join(th[p], NULL);
        bool result_is_tuple = json_is_true(json_object_get(k, "result_is_tuple"));
        for (int p = 0; ok && p < P; p++) {
            if (jobs[p].st != OT_OK) {
                snprintf(why, sizeof why, "partition %d: %s", p, jobs[p].err);
                ok = false;
                break;
            }
            for (int q = 0; q < no && ok; q++) {
                const ot_value *r = &jobs[p].result;
                const ot_value *leaf =
                    result_is_tuple && r->kind == OT_IR_TUPLE ? &r->tuple[q] : (q == 0 ? r : NULL);
                ot_value want;
                row_value(&tout[q], p, &want);
                if (!leaf || !ot_value_equal(leaf, &want)) {
                    snprintf(why, sizeof why, "partition %d output %d differs", p, q);
                    ok = false;
                }
                ot_value_release(&want);
            }
        }
        if (ok) {
            pass++;
        } else {
            fail++;
            printf("FAIL %s: %s\n", name, why[0] ? why : "could not load");
        }
        for (int p = 0; p < P; p++) {
            if (!jobs[p].args) continue;
            for (int q = 0; q < ni; q++) ot_value_release(&jobs[p].args[q]);
            free(jobs[p].args);
            ot_value_release(&jobs[p].result);
        }
        pthread_barrier_destroy(&w.bar);
        for (int q = 0; q < ni; q++) ot_tensor_release(&tin[q]);
        for (int q = 0; q < no; q++) ot_tensor_release(&tout[q]);
        ot_module_free(m);
    }
    printf("spmd corpus: %d cases pass, %d fail\n", pass, fail);
    EXPECT_INT_EQ(fail, 0);
    EXPECT_INT_EQ(json_array_size(cases), 13);
    EXPECT_INT_EQ(pass, (long long)json_array_size(cases));
    json_decref(root);
}

OT_TEST_MAIN(OT_TEST(test_spmd_corpus))
