/* tpu_optim sharded mode (ZeRO-1): N in-process devices each update their block of the flat
 * parameters with their block of the reduce-scattered gradients and hold only that block's state;
 * after several steps the parameters are bit for bit those of the unsharded update of the tree
 * (or direct) all-reduced gradients, for 2-5 devices and several elementwise optimizers (bf16
 * state too; int8 state on 2-8 devices: the unsharded int8 update of every tensor). The layout,
 * the state's size and names, and the refusals (an optimizer coupling elements, a non-f32
 * parameter, int8 state without the fused kernel, stochastic rounding, flat mode; a communicator
 * of another size; the shard calls outside sharded mode). The resident blocks (shard_blocks,
 * shard_update_blocks) give the same bits with nothing copied. */
#include "ot_test.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "optitpu/collectives.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/optim.h"
#include "optitpu/runtime.h"
#include "optitpu/tpu_optim.h"

#define NT    4
#define STEPS 5
#define HEAD  16

static ot_shape shapes[NT];
static int64_t sizes[NT], total, lpos[NT]; /* lpos: tensor k's first element of `total` */

/* big: a last tensor of 13,515 elements, so the canonical summation order's blocks of 4096
 * straddle the members' blocks (the global norm's sum of squares) */
static void make_shapes(bool big) {
    ot_shape_make(&shapes[0], OT_F32, 2, (int64_t[]){9, 13});
    ot_shape_make(&shapes[1], OT_F32, 1, (int64_t[]){7});
    ot_shape_make(&shapes[2], OT_F32, 0, NULL);
    ot_shape_make(&shapes[3], OT_F32, 3, (int64_t[]){3, 5, big ? 901 : 11});
    total = 0;
    for (int k = 0; k < NT; k++) {
        lpos[k] = total;
        total += sizes[k] = ot_shape_numel_unchecked(&shapes[k]);
    }
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

/* What a case adds to the optimizer's options. */
typedef struct extra {
    double clip_norm, clip_value;
    bool optax, loss_scaling;
    bool inf_step; /* loss scaling: member 0's gradient of the last element is inf at step 3 */
    bool big;
    /* the resident blocks (shard_blocks, shard_update_blocks): the reduce-scatter writes the
     * device's gradient block, the all-gather reads its parameter block */
    bool blocks;
    double momentum; /* sgd's */
} extra;

typedef struct job {
    const char *opt;
    int n;
    ot_coll_algo algo;
    ot_tpu_state_format fmt;
    extra x;
    ot_backend *be;
    ot_tpu_optimizer *sharded;
    int64_t len;
    float *params[8];         /* each member's flat parameters after the sharded steps */
    float *ref;               /* the unsharded run's parameters, flat (HEAD offset) */
    double ref_ss[STEPS + 1]; /* the sum of squares of each step's all-reduced gradients */
    double ss[8][STEPS + 1];  /* each member's, from shard_grad_norm */
    atomic_int errors;
} job;

/* Member r's gradient of element e (of `total`) at step i under case x. */
static float grad_case(const extra *x, int r, int64_t e, int i) {
    if (x->inf_step && i == 3 && r == 0 && e == total - 1) return INFINITY;
    /* big: magnitudes over 12 octaves, so that the lanes' sums differ widely and a wrong order
     * of summing them shows in the bits */
    float big = x->big ? (float)(1 << (e % 13)) : 1.0f;
    return grad_of(r, e, i) * big * (x->loss_scaling ? 512.0f : 1.0f);
}

static ot_tpu_optimizer_options case_options(const job *j) {
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.state_format = j->fmt;
    to.clip_grad_norm = j->x.clip_norm;
    to.clip_grad_value = j->x.clip_value;
    to.clip_norm_optax = j->x.optax;
    to.loss_scaling = j->x.loss_scaling;
    to.init_scale = 512;
    to.growth_interval = 2;
    to.state_int8_min_size = 1; /* unsharded int8: every tensor's state, as the sharded update */
    return to;
}

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
        for (int64_t e = 0; e < sizes[k]; e++) p[off[k] + e] = param0(lpos[k] + e);
    ot_coll_options co = ot_coll_options_default();
    co.algo = j->algo;
    ot_device *d = ot_backend_device(j->be, rank);
    ot_status s = OT_OK;
    float *pb = NULL, *gb = NULL;
    if (j->x.blocks) {
        /* before the blocks are handed out there is nothing to update in place */
        if (ot_tpu_optimizer_shard_update_blocks(j->sharded, d, c, 1, 0.01, NULL) !=
            OT_ERR_FAILED_PRECONDITION)
            atomic_fetch_add(&j->errors, 1);
        s = ot_tpu_optimizer_shard_blocks(j->sharded, d, &pb, &gb);
        if (s == OT_OK) memcpy(pb, p + rank * len, (size_t)len * sizeof(float));
    }
    for (int i = 1; s == OT_OK && i <= STEPS; i++) {
        for (int k = 0; k < NT; k++)
            for (int64_t e = 0; e < sizes[k]; e++)
                g[off[k] + e] = grad_case(&j->x, rank, lpos[k] + e, i);
        if (j->x.blocks) {
            s = ot_tpu_optimizer_shard_reduce(j->sharded, c, &co, g, gb);
            if (s == OT_OK)
                s = ot_tpu_optimizer_shard_update_blocks(j->sharded, d, c, i, 0.01, NULL);
            if (s == OT_OK) s = ot_comm_allgather(c, pb, p, (size_t)len, OT_F32, NULL);
        } else {
            s = ot_tpu_optimizer_step_sharded(j->sharded, d, c, &co, g, red, p, i, 0.01, NULL);
        }
        /* the update's split: some copying always; collectives exactly when it sums squares
         * over the pod (trust ratios, clipping by norm, loss scaling's found_inf) */
        int64_t cp = -1, cm = -1;
        bool coll = !strcmp(j->opt, "lamb") || !strcmp(j->opt, "lars") || j->x.clip_norm > 0 ||
                    j->x.loss_scaling;
        if (s == OT_OK) s = ot_tpu_optimizer_shard_times(j->sharded, d, &cp, &cm);
        /* resident blocks on a host device: nothing copied */
        if (s == OT_OK && (cp < 0 || cm < 0 || (cm > 0) != coll || (j->x.blocks && cp != 0))) {
            fprintf(stderr, "  member %d step %d: shard_times copy %lld comm %lld ns\n", rank, i,
                    (long long)cp, (long long)cm);
            atomic_fetch_add(&j->errors, 1);
        }
        double nr;
        if (s == OT_OK && j->x.clip_norm > 0)
            s = ot_tpu_optimizer_shard_grad_norm(j->sharded, d, &nr, &j->ss[rank][i]);
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

/* The sum of squares of the reduced gradients g (flat, tensor by tensor) as the unsharded update
 * computes it for the global norm: each tensor's squares summed in f64 by a reduce over all its
 * dims, the sums added in parameter order; evaluated by the reference evaluator. */
static void sum_sq_of(const float *g, double *ss_out) {
    ot_module *m = ot_module_new("sum_sq");
    ot_computation *add = ot_module_add_computation(m, "add_f64");
    ot_shape sc = ot_shape_scalar(OT_F64);
    ot_computation_set_root(add,
                            ot_build_binary(add, OT_OP_ADD, ot_build_parameter(add, 0, sc, "a"),
                                            ot_build_parameter(add, 1, sc, "b")));
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *ss = NULL;
    ot_tensor in[NT];
    int64_t pos = 0;
    for (int k = 0; k < NT; k++) {
        ot_tensor_borrow(&in[k], &shapes[k], (void *)(g + pos));
        pos += sizes[k];
        ot_instr *x = ot_build_convert(c, ot_build_parameter(c, k, shapes[k], NULL), OT_F64);
        x = ot_build_binary(c, OT_OP_MULTIPLY, x, x);
        if (shapes[k].rank > 0) {
            int64_t dims[OT_MAX_RANK];
            for (int d = 0; d < shapes[k].rank; d++) dims[d] = d;
            ot_instr *zero = ot_build_constant_scalar(c, OT_F64, 0.0);
            x = ot_build_reduce(c, &x, &zero, 1, dims, shapes[k].rank, add);
        }
        ss = ss ? ot_build_binary(c, OT_OP_ADD, ss, x) : x;
    }
    ot_computation_set_root(c, ss);
    ot_module_set_entry(m, c);
    ot_value r;
    ASSERT_OK(ot_module_finalize(m));
    ASSERT_OK(ot_evaluate_tensors(m, in, NT, NULL, &r));
    memcpy(ss_out, ot_value_leaf(&r, 0)->array.data, sizeof *ss_out);
    ot_value_release(&r);
    ot_module_free(m);
}

/* The optimizer of case j. */
static void case_optimizer(const job *j, ot_optimizer **o) {
    ASSERT_OK(ot_optimizer_new(j->opt, o));
    if (j->x.momentum > 0) ASSERT_OK(ot_optimizer_set(*o, "momentum", j->x.momentum));
}

static void reference(job *j) {
    ot_optimizer *o;
    case_optimizer(j, &o);
    ot_tpu_optimizer_options to = case_options(j);
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
            for (int64_t e = 0; e < total; e++) g[r][e] = grad_case(&j->x, r, e, i);
        ASSERT_OK(ot_local_run(j->n, ref_member, &rj, NULL));
        sum_sq_of(g[0], &j->ref_ss[i]);
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

static void run_case_x(const char *opt, int n, ot_coll_algo algo, ot_tpu_state_format fmt,
                       extra x) {
    make_shapes(x.big);
    job j = {.opt = opt, .n = n, .algo = algo, .fmt = fmt, .x = x};
    ot_backend_options bo = ot_backend_options_default();
    bo.devices = n;
    ASSERT_OK(ot_backend_create(&bo, &j.be));
    ot_optimizer *o;
    case_optimizer(&j, &o);
    ot_tpu_optimizer_options to = case_options(&j);
    to.shard_devices = n;
    to.shard_head = HEAD;
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &j.sharded));
    int devs = 0;
    int64_t off[NT];
    ASSERT_OK(ot_tpu_optimizer_shard_layout(j.sharded, &devs, &j.len, off));
    EXPECT_INT_EQ(devs, n);
    /* the tensors back to back after the head; int8: each on a quantization block, and the
     * devices' blocks whole quantization blocks */
    bool int8 = fmt == OT_TPU_STATE_INT8;
    int64_t al = int8 ? OT_TPU_INT8_BLOCK : 1, blk = int8 ? OT_TPU_INT8_BLOCK : 16;
    int64_t end = (HEAD + al - 1) / al * al;
    for (int k = 0; k < NT; k++) {
        EXPECT_INT_EQ(off[k], end);
        end = (end + sizes[k] + al - 1) / al * al;
    }
    EXPECT_TRUE(j.len % blk == 0 && j.len * n >= end && (j.len - blk) * n < end);
    EXPECT_INT_EQ(ot_tpu_optimizer_param_count(j.sharded), 1);
    /* each device's state: the block's slots, block-shaped (int8: u8 codes, then each code
     * slot's absmax per quantization block) */
    int ns = ot_tpu_optimizer_state_count(j.sharded), arrays = 0;
    for (int i = 0; i < ns; i++) {
        ot_shape sh;
        ASSERT_OK(ot_tpu_optimizer_state_shape(j.sharded, i, &sh));
        const char *nm = ot_tpu_optimizer_state_name(j.sharded, i);
        bool absmax = strstr(nm, ".absmax") != NULL;
        arrays += sh.rank == 1 && !absmax;
        EXPECT_TRUE(sh.rank == 0 ||
                    (sh.rank == 1 && sh.dims[0] == (absmax ? j.len / OT_TPU_INT8_BLOCK : j.len)));
        EXPECT_TRUE(sh.rank == 0 || absmax || sh.dtype == (int8 ? OT_U8 : fmt ? OT_BF16 : OT_F32));
        EXPECT_TRUE(absmax == (int8 && i >= ot_optimizer_state_count(o)));
        EXPECT_TRUE(!strncmp(nm, "0.", 2));
    }
    EXPECT_INT_EQ(ns, ot_optimizer_state_count(o) + (int8 ? arrays : 0));
    for (int r = 0; r < n; r++) {
        ASSERT_OK(ot_tpu_optimizer_add_replica(j.sharded, ot_backend_device(j.be, r)));
        ASSERT_TRUE((j.params[r] = ot_calloc((size_t)(n * j.len), sizeof(float))));
    }
    ASSERT_TRUE((j.ref = ot_malloc((size_t)total * sizeof(float))));
    int64_t cp, cm;
    EXPECT_STATUS(ot_tpu_optimizer_shard_times(j.sharded, NULL, &cp, &cm), OT_ERR_INVALID_ARGUMENT);
    ASSERT_OK(ot_local_run(n, member, &j, NULL));
    EXPECT_INT_EQ(atomic_load(&j.errors), 0);
    reference(&j);
    int bad = 0;
    for (int r = 0; r < n; r++)
        for (int k = 0; k < NT; k++)
            bad += memcmp(j.params[r] + off[k], j.ref + lpos[k],
                          (size_t)sizes[k] * sizeof(float)) != 0;
    if (bad)
        fprintf(stderr,
                "  %s on %d devices (%s; clip norm %g%s, value %g, loss scaling %d%s, %s): %d "
                "members differ from the unsharded update\n",
                opt, n, ot_coll_algo_name(algo), x.clip_norm, x.optax ? " optax" : "", x.clip_value,
                x.loss_scaling, x.inf_step ? " with inf" : "", x.big ? "big" : "small", bad);
    EXPECT_INT_EQ(bad, 0);
    /* the norm's sum of squares itself, bit for bit (the update sees the norm rounded to f32, and
     * the square root maps neighbouring sums to one norm): without loss scaling and clipping by
     * value, that of the raw reduced gradients */
    for (int r = 0; r < n && x.clip_norm > 0 && !x.loss_scaling && !(x.clip_value > 0); r++) {
        for (int i = 1; i <= STEPS; i++) {
            if (memcmp(&j.ss[r][i], &j.ref_ss[i], sizeof(double)))
                fprintf(stderr, "  member %d step %d: sum of squares %.17g, unsharded %.17g\n", r,
                        i, j.ss[r][i], j.ref_ss[i]);
            EXPECT_TRUE(!memcmp(&j.ss[r][i], &j.ref_ss[i], sizeof(double)));
        }
        double nr = 0, ss = 0;
        ASSERT_OK(
            ot_tpu_optimizer_shard_grad_norm(j.sharded, ot_backend_device(j.be, r), &nr, &ss));
        EXPECT_TRUE(nr == sqrt(ss));
    }
    if (x.loss_scaling) { /* every member's scale as the unsharded run's: 512 -> 1024 -> 2048 */
        for (int r = 0; r < n; r++) {
            double sc;
            bool skipped;
            ASSERT_OK(
                ot_tpu_optimizer_loss_scale(j.sharded, ot_backend_device(j.be, r), &sc, &skipped));
            EXPECT_TRUE(sc == (x.inf_step ? 1024.0 : 2048.0) && !skipped);
        }
    }
    for (int r = 0; r < n; r++) ot_free(j.params[r]);
    ot_free(j.ref);
    ot_tpu_optimizer_free(j.sharded);
    ot_optimizer_free(o);
    ot_backend_free(j.be);
}

static void run_case(const char *opt, int n, ot_coll_algo algo, ot_tpu_state_format fmt) {
    run_case_x(opt, n, algo, fmt, (extra){0});
}

static void test_bit_identical(void) {
    run_case("adam", 2, OT_ALGO_TREE, OT_TPU_STATE_F32);
    run_case("adam", 3, OT_ALGO_TREE, OT_TPU_STATE_F32);
    run_case("adamw", 4, OT_ALGO_DIRECT, OT_TPU_STATE_F32);
    run_case("nadam", 5, OT_ALGO_TREE, OT_TPU_STATE_F32); /* a scalar slot in every block */
    run_case("lion", 4, OT_ALGO_TREE, OT_TPU_STATE_BF16);
    run_case("sgd", 3, OT_ALGO_DIRECT, OT_TPU_STATE_F32);
}

/* lamb's and lars's trust ratios: each tensor's norms of the parameter and of the update are
 * the pod's, reduced in the unsharded order (tensors straddling members, blocks of 4096 too). */
static void test_trust_ratio(void) {
    extra big = {.big = true};
    extra all = {.clip_norm = 1.0, .loss_scaling = true, .inf_step = true, .big = true};
    run_case("lamb", 2, OT_ALGO_TREE, OT_TPU_STATE_F32);
    run_case("lars", 3, OT_ALGO_DIRECT, OT_TPU_STATE_F32);
    run_case_x("lamb", 4, OT_ALGO_TREE, OT_TPU_STATE_F32, big);
    run_case_x("lars", 5, OT_ALGO_TREE, OT_TPU_STATE_F32, big);
    run_case_x("lamb", 3, OT_ALGO_TREE, OT_TPU_STATE_BF16, all);
}

/* The resident blocks: the same bits as the unsharded update (and so as the host vectors'). */
static void test_resident_blocks(void) {
    run_case_x("adam", 3, OT_ALGO_TREE, OT_TPU_STATE_F32, (extra){.blocks = true});
    run_case_x("lamb", 2, OT_ALGO_TREE, OT_TPU_STATE_F32, (extra){.big = true, .blocks = true});
    run_case_x("lars", 4, OT_ALGO_DIRECT, OT_TPU_STATE_F32, (extra){.big = true, .blocks = true});
    run_case_x(
        "adamw", 5, OT_ALGO_TREE, OT_TPU_STATE_BF16,
        (extra){
            .clip_norm = 1.0, .loss_scaling = true, .inf_step = true, .big = true, .blocks = true});
    /* refused: donation off (every update would move the block), outside sharded mode */
    make_shapes(false);
    ot_backend *be;
    ot_backend_options bo = ot_backend_options_default();
    bo.devices = 1;
    ASSERT_OK(ot_backend_create(&bo, &be));
    ot_device *d = ot_backend_device(be, 0);
    ot_optimizer *o;
    ASSERT_OK(ot_optimizer_new("adam", &o));
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.shard_devices = 2;
    to.donate = false;
    ot_tpu_optimizer *t;
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &t));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, d));
    float *pb = NULL;
    EXPECT_STATUS(ot_tpu_optimizer_shard_blocks(t, d, &pb, NULL), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STR_CONTAINS(ot_last_error(), "donation is off");
    ot_tpu_optimizer_free(t);
    to.donate = true;
    to.shard_devices = 0;
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &t));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, d));
    EXPECT_STATUS(ot_tpu_optimizer_shard_blocks(t, d, &pb, NULL), OT_ERR_FAILED_PRECONDITION);
    ot_tpu_optimizer_free(t);
    ot_optimizer_free(o);
    ot_backend_free(be);
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
    make_shapes(false);
    ot_optimizer *o;
    ot_tpu_optimizer *t = NULL;
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.shard_devices = 4;
    ASSERT_OK(ot_optimizer_new("adafactor", &o)); /* factored moments */
    EXPECT_INT_EQ(ot_tpu_optimizer_create(o, shapes, NT, &to, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "needs an elementwise optimizer");
    EXPECT_TRUE(t == NULL);
    ot_optimizer_free(o);
    /* a trust ratio is not refused: the update and the one before the ratio, compiled once each */
    ASSERT_OK(ot_optimizer_new("lamb", &o));
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &t));
    EXPECT_INT_EQ(ot_tpu_optimizer_compile_count(t), 2);
    ot_tpu_optimizer_free(t);
    t = NULL;
    ot_optimizer_free(o);
    ASSERT_OK(ot_optimizer_new("adam", &o));
    to.state_format = OT_TPU_STATE_INT8;            /* int8: the fused kernel's optimizers */
    const char *no8[] = {"lamb", "rmsprop", "sgd"}; /* sgd: without momentum */
    for (int i = 0; i < 3; i++) {
        ot_optimizer *x;
        ASSERT_OK(ot_optimizer_new(no8[i], &x));
        EXPECT_INT_EQ(ot_tpu_optimizer_create(x, shapes, NT, &to, &t), OT_ERR_INVALID_ARGUMENT);
        EXPECT_STR_CONTAINS(ot_last_error(), "does not take int8 state with this optimizer");
        ot_optimizer_free(x);
    }
    to.state_format = OT_TPU_STATE_BF16; /* stochastic rounding: bits drawn per tensor element */
    to.state_stochastic_rounding = true;
    EXPECT_INT_EQ(ot_tpu_optimizer_create(o, shapes, NT, &to, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "does not take stochastic rounding");
    to.state_stochastic_rounding = false;
    to.state_format = OT_TPU_STATE_F32;
    to.state_int8_min_size = -1;
    EXPECT_INT_EQ(ot_tpu_optimizer_create(o, shapes, NT, &to, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "state_int8_min_size -1");
    to.state_int8_min_size = OT_TPU_INT8_MIN_SIZE;
    to.flat = true;
    EXPECT_INT_EQ(ot_tpu_optimizer_create(o, shapes, NT, &to, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "does not take flat mode");
    to.flat = false;
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

/* Clipping by global norm (torch's and optax's formulas, after clipping by value) and loss
 * scaling: the norm's sum of squares and found_inf are the pod's, reduced in the unsharded
 * order. */
static void test_global(void) {
    extra torch = {.clip_norm = 1.0}, optax = {.clip_norm = 0.5, .optax = true};
    extra big = {.clip_norm = 1.0, .big = true}, both = {.clip_norm = 2.0, .clip_value = 0.02};
    extra ls = {.loss_scaling = true}, lsinf = {.loss_scaling = true, .inf_step = true};
    extra all = {.clip_norm = 1.0, .loss_scaling = true, .inf_step = true, .big = true};
    run_case_x("adam", 2, OT_ALGO_TREE, OT_TPU_STATE_F32, torch);
    run_case_x("adamw", 3, OT_ALGO_DIRECT, OT_TPU_STATE_F32, optax);
    run_case_x("adam", 4, OT_ALGO_TREE, OT_TPU_STATE_F32, both);
    run_case_x("adam", 5, OT_ALGO_TREE, OT_TPU_STATE_F32, big);
    run_case_x("sgd", 3, OT_ALGO_TREE, OT_TPU_STATE_F32, big);
    run_case_x("adam", 4, OT_ALGO_TREE, OT_TPU_STATE_F32, ls);
    run_case_x("lion", 3, OT_ALGO_DIRECT, OT_TPU_STATE_BF16, lsinf);
    run_case_x("adamw", 5, OT_ALGO_TREE, OT_TPU_STATE_F32, all);
}

/* int8 state: each device holds its blocks' codes and absmax; the parameters are the unsharded
 * int8 update's (every tensor quantized) for 2-8 devices, a device with padding only, tensors
 * straddling devices, clipping and loss scaling, the resident blocks. */
static void test_int8(void) {
    extra mom = {.momentum = 0.9};
    extra big = {.big = true};
    extra all = {.clip_norm = 1.0, .loss_scaling = true, .inf_step = true, .big = true};
    run_case("adam", 2, OT_ALGO_TREE, OT_TPU_STATE_INT8);
    run_case("adamw", 3, OT_ALGO_DIRECT, OT_TPU_STATE_INT8);
    run_case("adam", 8, OT_ALGO_TREE, OT_TPU_STATE_INT8); /* devices 5-7: padding only */
    run_case("lion", 4, OT_ALGO_TREE, OT_TPU_STATE_INT8);
    run_case_x("sgd", 3, OT_ALGO_TREE, OT_TPU_STATE_INT8, mom);
    run_case_x("adam", 5, OT_ALGO_TREE, OT_TPU_STATE_INT8, big);
    run_case_x("adamw", 4, OT_ALGO_TREE, OT_TPU_STATE_INT8, all);
    run_case_x("adam", 3, OT_ALGO_DIRECT, OT_TPU_STATE_INT8, (extra){.big = true, .blocks = true});
}

OT_TEST_MAIN(OT_TEST(test_bit_identical), OT_TEST(test_global), OT_TEST(test_trust_ratio),
             OT_TEST(test_resident_blocks), OT_TEST(test_refused), OT_TEST(test_int8))
