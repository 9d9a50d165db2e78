/* tpu_optim sharded mode (ZeRO-1): N in-process devices each update their block of the flat
 * parameters with their block of the reduce-scattered gradients and hold only that block's state;
 * after several steps the parameters are bit for bit those of the unsharded update of the tree
 * (or direct) all-reduced gradients, for 2-5 devices and several elementwise optimizers (bf16
 * state too). The layout, the state's size and names, and the refusals (an optimizer coupling
 * elements, a non-f32 parameter, int8 state, clipping by norm; a communicator of another size;
 * the shard calls outside sharded mode). */
#include "ot_test.h"

#include <stdatomic.h>
#include <string.h>

#include "optitpu/collectives.h"
#include "optitpu/optim.h"
#include "optitpu/runtime.h"
#include "optitpu/tpu_optim.h"

#define NT    4
#define STEPS 5
#define HEAD  16

static ot_shape shapes[NT];
static int64_t sizes[NT], total;

static void make_shapes(void) {
    ot_shape_make(&shapes[0], OT_F32, 2, (int64_t[]){9, 13});
    ot_shape_make(&shapes[1], OT_F32, 1, (int64_t[]){7});
    ot_shape_make(&shapes[2], OT_F32, 0, NULL);
    ot_shape_make(&shapes[3], OT_F32, 3, (int64_t[]){3, 5, 11});
    total = 0;
    for (int k = 0; k < NT; k++) total += sizes[k] = ot_shape_numel_unchecked(&shapes[k]);
}

/* Member r's gradient of element e at step i, and the initial parameters: inexact values. */
static float grad_of(int r, int64_t e, int i) {
    uint32_t s = (uint32_t)(r * 7919 + i * 104729) ^ (uint32_t)(e * 2654435761u);
    s = s * 1664525u + 1013904223u;
    s ^= s >> 13;
    return (float)((double)(s % 2000001u) / 1000000.0 - 1.0) * (e % 5 ? 0.01f : 3.0f);
}
static float param0(int64_t e) {
    return (float)(e % 17) * 0.03f - 0.2f;
}

typedef struct job {
    const char *opt;
    int n;
    ot_coll_algo algo;
    ot_tpu_state_format fmt;
    ot_backend *be;
    ot_tpu_optimizer *sharded;
    int64_t len;
    float *params[8]; /* each member's flat parameters after the sharded steps */
    float *ref;       /* the unsharded run's parameters, flat (HEAD offset) */
    atomic_int errors;
} job;

/* The sharded steps of member `rank`. */
static ot_status member(void *ud, int rank, ot_comm *c) {
    job *j = ud;
    int64_t n = j->n, len = j->len, off[NT];
    OT_CHECK(ot_tpu_optimizer_shard_layout(j->sharded, NULL, NULL, off));
    float *g = ot_calloc((size_t)(n * len), sizeof(float));
    float *p = j->params[rank];
    float *red = ot_malloc((size_t)len * sizeof(float));
    if (!g || !red) return OT_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < NT; k++)
        for (int64_t e = 0; e < sizes[k]; e++) p[off[k] + e] = param0(off[k] - HEAD + e);
    ot_coll_options co = ot_coll_options_default();
    co.algo = j->algo;
    ot_device *d = ot_backend_device(j->be, rank);
    ot_status s = OT_OK;
    for (int i = 1; s == OT_OK && i <= STEPS; i++) {
        for (int k = 0; k < NT; k++)
            for (int64_t e = 0; e < sizes[k]; e++)
                g[off[k] + e] = grad_of(rank, off[k] - HEAD + e, i);
        s = ot_tpu_optimizer_step_sharded(j->sharded, d, c, &co, g, red, p, i, 0.01, NULL);
    }
    if (s != OT_OK) atomic_fetch_add(&j->errors, 1);
    ot_free(g);
    ot_free(red);
    return s;
}

/* The unsharded reference: the members' gradients all-reduced by the same algorithm on an
 * n-member pod, then one unsharded update of the whole tensors. */
typedef struct refjob {
    job *j;
    float **g; /* [n] flat gradients of the step, reduced in place */
} refjob;

static ot_status ref_member(void *ud, int rank, ot_comm *c) {
    refjob *rj = ud;
    ot_coll_options co = ot_coll_options_default();
    co.algo = rj->j->algo;
    return ot_comm_allreduce(c, rj->g[rank], rj->g[rank], (size_t)total, OT_F32, OT_REDOP_SUM, &co);
}

static void reference(job *j) {
    ot_optimizer *o;
    ASSERT_OK(ot_optimizer_new(j->opt, &o));
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.state_format = j->fmt;
    ot_tpu_optimizer *t;
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &t));
    ot_device *d = ot_backend_device(j->be, 0);
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, d));
    ot_buffer *p[NT], *gb[NT];
    int64_t pos = 0;
    for (int k = 0; k < NT; k++, pos += sizes[k - 1]) {
        ot_tensor h;
        ASSERT_OK(ot_tensor_alloc(&h, &shapes[k]));
        for (int64_t e = 0; e < sizes[k]; e++) ((float *)h.data)[e] = param0(pos + e);
        ASSERT_OK(ot_buffer_from_host(d, &h, &p[k]));
        ot_tensor_release(&h);
    }
    float *g[8];
    for (int r = 0; r < j->n; r++) ASSERT_TRUE((g[r] = ot_malloc((size_t)total * sizeof(float))));
    refjob rj = {j, g};
    for (int i = 1; i <= STEPS; i++) {
        for (int r = 0; r < j->n; r++)
            for (int64_t e = 0; e < total; e++) g[r][e] = grad_of(r, e, i);
        ASSERT_OK(ot_local_run(j->n, ref_member, &rj, NULL));
        pos = 0;
        for (int k = 0; k < NT; k++) {
            ot_tensor h;
            ot_tensor_borrow(&h, &shapes[k], g[0] + pos);
            ASSERT_OK(ot_buffer_from_host(d, &h, &gb[k]));
            pos += sizes[k];
        }
        ASSERT_OK(ot_tpu_optimizer_step(t, d, p, gb, i, 0.01, NULL));
        for (int k = 0; k < NT; k++) ot_buffer_free(gb[k]);
    }
    pos = 0;
    for (int k = 0; k < NT; k++) {
        ASSERT_OK(ot_buffer_read_bytes(p[k], 0, j->ref + pos, sizes[k] * 4));
        pos += sizes[k];
        ot_buffer_free(p[k]);
    }
    for (int r = 0; r < j->n; r++) ot_free(g[r]);
    ot_tpu_optimizer_free(t);
    ot_optimizer_free(o);
}

static void run_case(const char *opt, int n, ot_coll_algo algo, ot_tpu_state_format fmt) {
    make_shapes();
    job j = {.opt = opt, .n = n, .algo = algo, .fmt = fmt};
    ot_backend_options bo = ot_backend_options_default();
    bo.devices = n;
    ASSERT_OK(ot_backend_create(&bo, &j.be));
    ot_optimizer *o;
    ASSERT_OK(ot_optimizer_new(opt, &o));
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.shard_devices = n;
    to.shard_head = HEAD;
    to.state_format = fmt;
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &j.sharded));
    int devs = 0;
    ASSERT_OK(ot_tpu_optimizer_shard_layout(j.sharded, &devs, &j.len, NULL));
    EXPECT_INT_EQ(devs, n);
    EXPECT_TRUE(j.len % 16 == 0 && j.len * n >= HEAD + total && (j.len - 16) * n < HEAD + total);
    EXPECT_INT_EQ(ot_tpu_optimizer_param_count(j.sharded), 1);
    /* each device's state: the block's slots, block-shaped */
    int ns = ot_tpu_optimizer_state_count(j.sharded);
    EXPECT_INT_EQ(ns, ot_optimizer_state_count(o));
    for (int i = 0; i < ns; i++) {
        ot_shape sh;
        ASSERT_OK(ot_tpu_optimizer_state_shape(j.sharded, i, &sh));
        EXPECT_TRUE(sh.rank == 0 || (sh.rank == 1 && sh.dims[0] == j.len));
        EXPECT_TRUE(!strncmp(ot_tpu_optimizer_state_name(j.sharded, i), "0.", 2));
    }
    for (int r = 0; r < n; r++) {
        ASSERT_OK(ot_tpu_optimizer_add_replica(j.sharded, ot_backend_device(j.be, r)));
        ASSERT_TRUE((j.params[r] = ot_calloc((size_t)(n * j.len), sizeof(float))));
    }
    ASSERT_TRUE((j.ref = ot_malloc((size_t)total * sizeof(float))));
    ASSERT_OK(ot_local_run(n, member, &j, NULL));
    EXPECT_INT_EQ(atomic_load(&j.errors), 0);
    reference(&j);
    int bad = 0;
    for (int r = 0; r < n; r++)
        bad += memcmp(j.params[r] + HEAD, j.ref, (size_t)total * sizeof(float)) != 0;
    if (bad)
        fprintf(stderr, "  %s on %d devices (%s): %d members differ from the unsharded update\n",
                opt, n, ot_coll_algo_name(algo), bad);
    EXPECT_INT_EQ(bad, 0);
    for (int r = 0; r < n; r++) ot_free(j.params[r]);
    ot_free(j.ref);
    ot_tpu_optimizer_free(j.sharded);
    ot_optimizer_free(o);
    ot_backend_free(j.be);
}

static void test_bit_identical(void) {
    run_case("adam", 2, OT_ALGO_TREE, OT_TPU_STATE_F32);
    run_case("adam", 3, OT_ALGO_TREE, OT_TPU_STATE_F32);
    run_case("adamw", 4, OT_ALGO_DIRECT, OT_TPU_STATE_F32);
    run_case("nadam", 5, OT_ALGO_TREE, OT_TPU_STATE_F32); /* a scalar slot in every block */
    run_case("lion", 4, OT_ALGO_TREE, OT_TPU_STATE_BF16);
    run_case("sgd", 3, OT_ALGO_DIRECT, OT_TPU_STATE_F32);
}

/* The member count must be the shard count: every member's call fails before any collective. */
static ot_status wrong_size(void *ud, int rank, ot_comm *c) {
    ot_tpu_optimizer *t = ud;
    float x[64] = {0};
    (void)rank;
    ot_status s = ot_tpu_optimizer_shard_reduce(t, c, NULL, x, x);
    return s == OT_ERR_INVALID_ARGUMENT && strstr(ot_last_error(), "the communicator has 2 members")
               ? OT_OK
               : OT_ERR_INTERNAL;
}

static void test_refused(void) {
    make_shapes();
    ot_optimizer *o;
    ot_tpu_optimizer *t = NULL;
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.shard_devices = 4;
    const char *coupled[] = {"lamb", "lars", "adafactor"};
    for (size_t i = 0; i < 3; i++) {
        ASSERT_OK(ot_optimizer_new(coupled[i], &o));
        EXPECT_INT_EQ(ot_tpu_optimizer_create(o, shapes, NT, &to, &t), OT_ERR_INVALID_ARGUMENT);
        EXPECT_STR_CONTAINS(ot_last_error(), "needs an elementwise optimizer");
        EXPECT_TRUE(t == NULL);
        ot_optimizer_free(o);
    }
    ASSERT_OK(ot_optimizer_new("adam", &o));
    to.state_format = OT_TPU_STATE_INT8;
    EXPECT_INT_EQ(ot_tpu_optimizer_create(o, shapes, NT, &to, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "does not take int8 state");
    to.state_format = OT_TPU_STATE_F32;
    to.clip_grad_norm = 1.0;
    EXPECT_INT_EQ(ot_tpu_optimizer_create(o, shapes, NT, &to, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "does not take clipping by global norm");
    to.clip_grad_norm = 0;
    to.shard_devices = -2;
    EXPECT_INT_EQ(ot_tpu_optimizer_create(o, shapes, NT, &to, &t), OT_ERR_INVALID_ARGUMENT);
    to.shard_devices = 4;
    ot_shape bf[NT];
    memcpy(bf, shapes, sizeof bf);
    bf[1].dtype = OT_BF16;
    EXPECT_INT_EQ(ot_tpu_optimizer_create(o, bf, NT, &to, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "parameter 1 is bf16");
    /* a communicator of 2 for an update sharded over 4 */
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &t));
    EXPECT_OK(ot_local_run(2, wrong_size, t, NULL));
    ot_tpu_optimizer_free(t);
    /* not sharded: the shard calls are FAILED_PRECONDITION */
    to.shard_devices = 1;
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &t));
    int64_t len;
    EXPECT_INT_EQ(ot_tpu_optimizer_shard_layout(t, NULL, &len, NULL), OT_ERR_FAILED_PRECONDITION);
    ot_tpu_optimizer_free(t);
    ot_optimizer_free(o);
}

OT_TEST_MAIN(OT_TEST(test_bit_identical), OT_TEST(test_refused))
