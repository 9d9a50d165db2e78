/* tpu_optim flat mode: every tensor of a dtype in one flat buffer, the update built once over
 * it. Bit-identical to the per-tensor mode for elementwise optimizers (mixed shapes and dtypes,
 * a scalar and a 3-D tensor, several steps and replicas, clipping and loss scaling); the
 * refused combinations; bad input through the per-tensor views. */
#include "ot_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optitpu/optim.h"
#include "optitpu/runtime.h"
#include "optitpu/tpu_optim.h"

#define NT    6
#define NREP  2
#define STEPS 6

static ot_shape shapes[NT];
static int ngroups_plain = 2; /* flat groups without parameter groups or masks */

static void make_shapes(void) {
    ot_shape_make(&shapes[0], OT_F32, 0, NULL);                 /* scalar */
    ot_shape_make(&shapes[1], OT_F32, 1, (int64_t[]){7});       /* odd vector */
    ot_shape_make(&shapes[2], OT_F64, 2, (int64_t[]){5, 9});    /* f64 matrix */
    ot_shape_make(&shapes[3], OT_F32, 3, (int64_t[]){3, 4, 5}); /* 3-D */
    ot_shape_make(&shapes[4], OT_F64, 1, (int64_t[]){33});      /* f64 vector */
    ot_shape_make(&shapes[5], OT_F32, 2, (int64_t[]){16, 17});  /* past a lane block */
    ngroups_plain = 2;
}

/* bf16 and f16 tensors (f32 masters) beside f32 ones: groups bf16, f16, f32 */
static void make_shapes_masters(void) {
    ot_shape_make(&shapes[0], OT_BF16, 0, NULL);
    ot_shape_make(&shapes[1], OT_BF16, 1, (int64_t[]){7});
    ot_shape_make(&shapes[2], OT_F16, 3, (int64_t[]){3, 4, 5});
    ot_shape_make(&shapes[3], OT_F32, 2, (int64_t[]){5, 9});
    ot_shape_make(&shapes[4], OT_BF16, 1, (int64_t[]){33});
    ot_shape_make(&shapes[5], OT_F16, 2, (int64_t[]){16, 17});
    ngroups_plain = 3;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 11;
}

/* A deterministic value in [-a, a) for tensor k, element e, replica r, step i. */
static double val(uint64_t seed, double a) {
    uint64_t s = seed;
    lcg(&s);
    lcg(&s);
    return a * ((double)(lcg(&s) % 2000001) / 1000000.0 - 1.0);
}

static void fill(ot_tensor *t, uint64_t seed, double a) {
    int64_t n = ot_shape_numel_unchecked(&t->shape);
    for (int64_t e = 0; e < n; e++) {
        double v = val(seed * 1000003ULL + (uint64_t)e, a);
        if (t->shape.dtype == OT_F32)
            ((float *)t->data)[e] = (float)v;
        else if (t->shape.dtype == OT_BF16)
            ((uint16_t *)t->data)[e] = ot_f32_to_bf16((float)v);
        else if (t->shape.dtype == OT_F16)
            ((uint16_t *)t->data)[e] = ot_f32_to_f16((float)v);
        else
            ((double *)t->data)[e] = v;
    }
}

static ot_optimizer *make_opt(const char *name) {
    ot_optimizer *o = NULL;
    if (strncmp(name, "lookahead", 9) == 0) { /* lookahead: around nadam; lookahead_lamb */
        ot_optimizer *in = NULL, *w = NULL;
        if (ot_optimizer_new(name[9] ? "lamb" : "nadam", &in) != OT_OK) return NULL;
        ot_status st = ot_optimizer_new_lookahead(in, 3, 0.5, &w);
        ot_optimizer_free(in);
        return st == OT_OK ? w : NULL;
    }
    if (ot_optimizer_new(name, &o) != OT_OK) return NULL;
    if (strcmp(name, "sgd") == 0) {
        ot_optimizer_set(o, "momentum", 0.9);
        ot_optimizer_set(o, "nesterov", 1);
        ot_optimizer_set(o, "weight_decay", 1e-3);
    } else if (strcmp(name, "adamw") == 0) {
        ot_optimizer_set(o, "amsgrad", 1);
    } else if (strcmp(name, "rmsprop") == 0) {
        ot_optimizer_set(o, "centered", 1);
        ot_optimizer_set(o, "momentum", 0.5);
    } else if (strcmp(name, "lamb") == 0) {
        ot_optimizer_set(o, "weight_decay", 1e-2);
    } else if (strcmp(name, "lars") == 0) {
        ot_optimizer_set(o, "weight_decay", 1e-3);
        ot_optimizer_set(o, "nesterov", 1);
        ot_optimizer_set(o, "trust_coefficient", 0.02);
    }
    return o;
}

static bool bits_equal(const ot_tensor *a, const ot_tensor *b) {
    return ot_shape_equal(&a->shape, &b->shape) && a->nbytes == b->nbytes &&
           memcmp(a->data, b->data, a->nbytes) == 0;
}

/* Runs `name` with options `mode` (0 plain, 1 value + torch norm clipping, 2 optax norm
 * clipping, 3 loss scaling with an inf gradient on replica 0 at step 3, 4 parameter groups, 5
 * weight-decay and trust-ratio masks with clipping) in both modes and compares parameters after
 * every step and the state at the end, bit for bit; the gaps between tensors stay zero. */
static void compare_modes(const char *name, int mode) {
    ot_optimizer *o = make_opt(name);
    ASSERT_TRUE(o != NULL);
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    if (mode == 1) {
        to.clip_grad_value = 0.8;
        to.clip_grad_norm = 0.5;
    } else if (mode == 2) {
        to.clip_grad_norm = 0.5;
        to.clip_norm_optax = true;
    } else if (mode == 3) {
        to.loss_scaling = true;
        to.init_scale = 1024.0;
        to.growth_interval = 2;
    }
    /* mode 4: parameter groups — SGD for tensors 1 and 4, lr scales, no weight decay on tensor 0
     * (optimizers with weight decay), clipping; groups by dtype, optimizer, masks and scale:
     * {0}, {1}, {2}, {3, 5}, {4} */
    ot_optimizer *sgd = make_opt("sgd");
    ASSERT_TRUE(sgd != NULL);
    const ot_optimizer *groups[NT] = {NULL, sgd, NULL, NULL, sgd, NULL};
    double lrs[NT] = {2.0, 1.0, 0.5, 1.0, 1.0, 1.0};
    bool wdm[NT] = {false, true, true, true, true, true};
    double wd;
    bool has_wd = ot_optimizer_get(o, "weight_decay", &wd) == OT_OK;
    if (mode == 4) {
        to.param_optimizers = groups;
        to.lr_scale = lrs;
        if (has_wd) to.weight_decay_mask = wdm;
        to.clip_grad_norm = 0.5;
    }
    /* mode 5: masks only — no weight decay on tensor 0, no trust ratio on the "biases" 1 and 4
     * (optimizers with a trust ratio: LARS's trust_ratio_mask), value and norm clipping */
    bool trm[NT] = {true, false, true, true, false, true};
    double tr;
    bool has_tr = ot_optimizer_get(o, "trust_ratio", &tr) == OT_OK;
    int ngroups_want = mode == 4 ? 5 : ngroups_plain;
    if (mode == 5) {
        if (has_wd) to.weight_decay_mask = wdm;
        if (has_tr) to.trust_ratio_mask = trm;
        to.clip_grad_value = 0.8;
        to.clip_grad_norm = 0.5;
        ngroups_want = has_tr ? 5 : has_wd ? 3 : 2; /* {0} {1} {3,5} {2} {4} */
    }
    ot_tpu_optimizer *tp = NULL, *tf = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &tp));
    to.flat = true;
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &tf));
    EXPECT_INT_EQ(ot_tpu_optimizer_flat_group_count(tf), ngroups_want);
    EXPECT_INT_EQ(ot_tpu_optimizer_flat_group_count(tp), 0);
    EXPECT_INT_EQ(ot_tpu_optimizer_compile_count(tf), 1);
    ot_device *dev[NREP] = {0};
    ot_buffer *pb[NREP][NT] = {{0}}, *gb[NREP][NT] = {{0}};
    for (int r = 0; r < NREP; r++) {
        ASSERT_OK(ot_host_device_create(r, 0, &dev[r]));
        ASSERT_OK(ot_tpu_optimizer_add_replica(tp, dev[r]));
        ASSERT_OK(ot_tpu_optimizer_add_replica(tf, dev[r]));
        for (int k = 0; k < NT; k++) {
            ot_tensor h = {0};
            ASSERT_OK(ot_tensor_alloc(&h, &shapes[k]));
            fill(&h, 7 + 131 * (uint64_t)k + 17 * (uint64_t)r, 1.0);
            ASSERT_OK(ot_buffer_from_host(dev[r], &h, &pb[r][k]));
            ASSERT_OK(ot_tpu_optimizer_write_param(tf, dev[r], k, &h));
            ASSERT_OK(ot_buffer_alloc(dev[r], &shapes[k], &gb[r][k]));
            ot_tensor_release(&h);
        }
    }
    bool diverged = false;
    for (int i = 1; i <= STEPS && !diverged; i++) {
        double lr = 1e-2 * (1.0 + 0.5 * cos(0.7 * i));
        for (int r = 0; r < NREP; r++) {
            for (int k = 0; k < NT; k++) {
                ot_tensor h = {0};
                ASSERT_OK(ot_tensor_alloc(&h, &shapes[k]));
                fill(&h, 100000 + 977 * (uint64_t)i + 131 * (uint64_t)k + 17 * (uint64_t)r,
                     mode == 3 ? 1024.0 * 0.3 : 0.3);
                if (mode == 3 && r == 0 && i == 3 && k == 3) ((float *)h.data)[5] = INFINITY;
                ASSERT_OK(ot_buffer_write_bytes(gb[r][k], 0, h.data, (int64_t)h.nbytes));
                ASSERT_OK(ot_tpu_optimizer_write_grad(tf, dev[r], k, &h));
                ot_tensor_release(&h);
            }
            ASSERT_OK(ot_tpu_optimizer_step(tp, dev[r], pb[r], gb[r], i, lr, NULL));
            ASSERT_OK(ot_tpu_optimizer_step_flat(tf, dev[r], i, lr, NULL));
            for (int k = 0; k < NT; k++) {
                ot_tensor a = {0}, b = {0};
                ASSERT_OK(ot_buffer_to_host(pb[r][k], &a));
                ASSERT_OK(ot_tpu_optimizer_read_param(tf, dev[r], k, &b));
                if (!bits_equal(&a, &b)) {
                    OT_T_FAIL_("%s mode %d: replica %d tensor %d differs after step %d", name, mode,
                               r, k, i);
                    diverged = true;
                }
                ot_tensor_release(&a);
                ot_tensor_release(&b);
            }
            double s1, s2;
            bool k1, k2;
            ASSERT_OK(ot_tpu_optimizer_loss_scale(tp, dev[r], &s1, &k1));
            ASSERT_OK(ot_tpu_optimizer_loss_scale(tf, dev[r], &s2, &k2));
            EXPECT_TRUE(s1 == s2 && k1 == k2);
            if (mode == 3 && r == 0) EXPECT_TRUE(k2 == (i == 3));
        }
    }
    /* the flat state holds each tensor's state "<k>.<slot>" at its view of the group's
     * "flat<g>.<dtype>.<slot>" */
    int nps = ot_tpu_optimizer_state_count(tp), nfs = ot_tpu_optimizer_state_count(tf);
    EXPECT_INT_EQ(nfs, ngroups_want == 2 && ngroups_plain == 2 ? 2 * (nps / NT) : nfs);
    for (int r = 0; r < NREP; r++)
        for (int i = 0; i < nps; i++) {
            const char *pn = ot_tpu_optimizer_state_name(tp, i);
            int k = atoi(pn);
            const char *slot = strchr(pn, '.') + 1;
            ot_tpu_flat_view v;
            ASSERT_OK(ot_tpu_optimizer_flat_view(tf, k, &v));
            EXPECT_TRUE(v.offset % OT_TPU_FLAT_ALIGN == 0);
            char want[128];
            snprintf(want, sizeof want, "flat%d.%s.%s", v.group, ot_dtype_name(v.dtype), slot);
            int fi = -1;
            for (int j = 0; j < nfs; j++)
                if (!strcmp(ot_tpu_optimizer_state_name(tf, j), want)) fi = j;
            if (fi < 0) {
                OT_T_FAIL_("%s mode %d: no flat state %s", name, mode, want);
                continue;
            }
            ot_tensor ps = {0}, fs = {0};
            ASSERT_OK(ot_tpu_optimizer_get_state(tp, dev[r], i, &ps));
            ASSERT_OK(ot_tpu_optimizer_get_state(tf, dev[r], fi, &fs));
            size_t es = ot_dtype_size(fs.shape.dtype); /* f32 for a master */
            if (fs.shape.rank == 0)                    /* a scalar slot: one per group */
                EXPECT_TRUE(bits_equal(&fs, &ps));
            else
                EXPECT_TRUE(v.count * (int64_t)es == (int64_t)ps.nbytes &&
                            memcmp((char *)fs.data + v.offset * (int64_t)es, ps.data, ps.nbytes) ==
                                0);
            ot_tensor_release(&ps);
            ot_tensor_release(&fs);
        }
    /* the gaps between tensors (parameters and state) are still zero */
    for (int r = 0; r < NREP; r++)
        for (int g = 0; g < ot_tpu_optimizer_flat_group_count(tf); g++) {
            ot_buffer *fp = NULL;
            ASSERT_OK(ot_tpu_optimizer_flat_buffers(tf, dev[r], g, &fp, NULL));
            ot_tensor h[1 + OT_OPTIM_MAX_STATE];
            memset(h, 0, sizeof h);
            int nh = 1;
            ASSERT_OK(ot_buffer_to_host(fp, &h[0]));
            char pre[32];
            snprintf(pre, sizeof pre, "flat%d.", g);
            for (int j = 0; j < nfs && nh < 1 + OT_OPTIM_MAX_STATE; j++) {
                ot_shape ss;
                ASSERT_OK(ot_tpu_optimizer_state_shape(tf, j, &ss));
                if (!strncmp(ot_tpu_optimizer_state_name(tf, j), pre, strlen(pre)) && ss.rank == 1)
                    ASSERT_OK(ot_tpu_optimizer_get_state(tf, dev[r], j, &h[nh++]));
            }
            int64_t len = ot_shape_numel_unchecked(&h[0].shape);
            bool *used = calloc((size_t)len, 1);
            ASSERT_TRUE(used != NULL);
            for (int k = 0; k < NT; k++) {
                ot_tpu_flat_view v;
                ASSERT_OK(ot_tpu_optimizer_flat_view(tf, k, &v));
                for (int64_t e = 0; v.group == g && e < v.count; e++) used[v.offset + e] = true;
            }
            int64_t nonzero = 0;
            for (int q = 0; q < nh; q++) {
                for (int64_t e = 0; e < len; e++)
                    if (!used[e]) {
                        ot_dtype qd = h[q].shape.dtype;
                        nonzero += qd == OT_F32   ? ((float *)h[q].data)[e] != 0.0f
                                   : qd == OT_F64 ? ((double *)h[q].data)[e] != 0.0
                                                  : ((uint16_t *)h[q].data)[e] != 0;
                    }
                ot_tensor_release(&h[q]);
            }
            free(used);
            if (nonzero)
                OT_T_FAIL_("%s mode %d: replica %d group %d: %lld gap elements not zero", name,
                           mode, r, g, (long long)nonzero);
        }
    for (int r = 0; r < NREP; r++)
        for (int k = 0; k < NT; k++) {
            ot_buffer_free(pb[r][k]);
            ot_buffer_free(gb[r][k]);
        }
    ot_tpu_optimizer_free(tp);
    ot_tpu_optimizer_free(tf);
    for (int r = 0; r < NREP; r++) ot_device_free(dev[r]);
    ot_optimizer_free(o);
    ot_optimizer_free(sgd);
}

static const char *const elementwise[] = {"sgd",      "adam",  "adamw", "rmsprop", "adagrad",
                                          "adadelta", "radam", "nadam", "lion",    "lookahead"};
/* Trust ratios from per-tensor norms: updated segment by segment in flat mode. */
static const char *const segmented[] = {"lamb", "lars", "lookahead_lamb"};

static void test_bitwise_plain(void) {
    make_shapes();
    for (size_t i = 0; i < sizeof elementwise / sizeof *elementwise; i++)
        compare_modes(elementwise[i], 0);
}

static void test_bitwise_clipping_and_loss_scaling(void) {
    make_shapes();
    for (size_t i = 0; i < sizeof elementwise / sizeof *elementwise; i++)
        for (int mode = 1; mode <= 5; mode++) compare_modes(elementwise[i], mode);
}

static void test_bitwise_trust_ratio(void) {
    make_shapes();
    for (size_t i = 0; i < sizeof segmented / sizeof *segmented; i++)
        for (int mode = 0; mode <= 5; mode++) compare_modes(segmented[i], mode);
}

/* bf16/f16 tensors with f32 masters in flat mode, bit-identical to the per-tensor mode
 * (masters compared as state "<k>.master" against "flat<g>.<dtype>.master"). */
static void test_bitwise_masters(void) {
    make_shapes_masters();
    const char *names[] = {"adam", "sgd", "nadam", "lamb", "lars"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        for (int mode = 0; mode <= 3; mode++) compare_modes(names[i], mode);
    make_shapes();
}

/* One f32 group, no clipping: the whole Adam update is one kernel. */
static void test_one_kernel(void) {
    ot_shape s[40];
    for (int k = 0; k < 40; k++) ot_shape_make(&s[k], OT_F32, 2, (int64_t[]){k + 1, 13});
    ot_optimizer *o = make_opt("adam");
    ASSERT_TRUE(o != NULL);
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    ot_tpu_optimizer *tp = NULL, *tf = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, s, 40, &to, &tp));
    to.flat = true;
    ASSERT_OK(ot_tpu_optimizer_create(o, s, 40, &to, &tf));
    int kp = ot_executable_kernel_count(ot_tpu_optimizer_executable(tp));
    int kf = ot_executable_kernel_count(ot_tpu_optimizer_executable(tf));
    EXPECT_INT_EQ(kf, 1);
    EXPECT_TRUE(kp >= 40);
    ot_tpu_optimizer_free(tp);
    ot_tpu_optimizer_free(tf);
    ot_optimizer_free(o);
}

/* LAMB over 40 tensors in flat mode: the moments and the update are one loop each over the flat
 * buffers; what remains per tensor is its two norms (a slice of the parameters and of the
 * update, each reduced) and its ratio. Counts as measured (218 flat, 163 per tensor): the
 * slices are kernels of their own (the compiler does not fuse a slice into a reduce). */
static void test_trust_ratio_kernels(void) {
    ot_shape s[40];
    for (int k = 0; k < 40; k++) ot_shape_make(&s[k], OT_F32, 2, (int64_t[]){k + 1, 13});
    ot_optimizer *o = make_opt("lamb");
    ASSERT_TRUE(o != NULL);
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.flat = true;
    ot_tpu_optimizer *tf = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, s, 40, &to, &tf));
    const ot_executable *e = ot_tpu_optimizer_executable(tf);
    int kf = ot_executable_kernel_count(e);
    EXPECT_TRUE(kf <= 6 * 40);
    /* no kernel other than the slices reads a whole flat buffer more than twice per tensor:
     * the elementwise work over the flat length happens in a few kernels */
    int64_t len = 0, nflat = 0;
    ot_tpu_flat_view v;
    ASSERT_OK(ot_tpu_optimizer_flat_view(tf, 39, &v));
    len = v.offset + v.count;
    for (int k = 0; k < kf; k++) {
        const ot_kernel *kk = ot_executable_kernel(e, k);
        if (kk->flops >= len) nflat++;
    }
    EXPECT_TRUE(nflat >= 1 && nflat <= 3);
    ot_tpu_optimizer_free(tf);
    ot_optimizer_free(o);
}

static void test_refused(void) {
    make_shapes();
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.flat = true;
    ot_tpu_optimizer *t = (ot_tpu_optimizer *)&to;
    const char *refused[] = {"adafactor", "adafactor_torch"};
    for (size_t i = 0; i < 2; i++) {
        ot_optimizer *o = NULL;
        ASSERT_OK(ot_optimizer_new(refused[i], &o));
        if (!strcmp(refused[i], "adafactor")) ot_optimizer_set(o, "min_dim_size_to_factor", 2);
        EXPECT_STATUS(ot_tpu_optimizer_create(o, shapes, NT, &to, &t), OT_ERR_UNIMPLEMENTED);
        EXPECT_TRUE(t == NULL);
        EXPECT_STR_CONTAINS(ot_last_error(), refused[i]);
        ot_optimizer_free(o);
    }
    ot_optimizer *adam = make_opt("adam"), *sgd = make_opt("sgd");
    ASSERT_TRUE(adam && sgd);
    /* a group of adafactor is refused too */
    ot_optimizer *af = NULL;
    ASSERT_OK(ot_optimizer_new("adafactor_torch", &af));
    const ot_optimizer *groups[NT] = {NULL, NULL, NULL, af};
    to.param_optimizers = groups;
    EXPECT_STATUS(ot_tpu_optimizer_create(adam, shapes, NT, &to, &t), OT_ERR_UNIMPLEMENTED);
    EXPECT_STR_CONTAINS(ot_last_error(), "adafactor_torch");
    to.param_optimizers = NULL;
    ot_optimizer_free(af);
    ot_optimizer_free(adam);
    ot_optimizer_free(sgd);
}

static void test_bad_input(void) {
    make_shapes();
    ot_optimizer *o = make_opt("adam");
    ASSERT_TRUE(o != NULL);
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    ot_tpu_optimizer *tp = NULL, *tf = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &tp));
    to.flat = true;
    ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &tf));
    ot_device *d = NULL, *d2 = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ASSERT_OK(ot_host_device_create(1, 0, &d2));
    ASSERT_OK(ot_tpu_optimizer_add_replica(tp, d));
    ASSERT_OK(ot_tpu_optimizer_add_replica(tf, d));
    /* each mode's step refuses the other's */
    EXPECT_STATUS(ot_tpu_optimizer_step_flat(tp, d, 1, 0.1, NULL), OT_ERR_FAILED_PRECONDITION);
    ot_buffer *none[NT] = {0};
    EXPECT_STATUS(ot_tpu_optimizer_step(tf, d, none, none, 1, 0.1, NULL),
                  OT_ERR_FAILED_PRECONDITION);
    EXPECT_STATUS(ot_tpu_optimizer_step_flat(tf, d2, 1, 0.1, NULL), OT_ERR_NOT_FOUND);
    EXPECT_STATUS(ot_tpu_optimizer_step_flat(tf, d, 0, 0.1, NULL), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_tpu_optimizer_step_flat(tf, d, 1, NAN, NULL), OT_ERR_INVALID_ARGUMENT);
    ot_tpu_flat_view v;
    EXPECT_STATUS(ot_tpu_optimizer_flat_view(tf, NT, &v), OT_ERR_OUT_OF_RANGE);
    EXPECT_STATUS(ot_tpu_optimizer_flat_view(tp, 0, &v), OT_ERR_FAILED_PRECONDITION);
    ot_buffer *fp = NULL, *fg = NULL;
    EXPECT_STATUS(ot_tpu_optimizer_flat_buffers(tf, d, 2, &fp, &fg), OT_ERR_OUT_OF_RANGE);
    ASSERT_OK(ot_tpu_optimizer_flat_buffers(tf, d, 0, &fp, &fg));
    ASSERT_TRUE(fp && fg);
    /* a gradient of the wrong shape is refused and writes nothing */
    ot_tensor g = {0}, before = {0}, after = {0};
    ASSERT_OK(ot_tensor_alloc(&g, &shapes[3]));
    fill(&g, 5, 1.0);
    ASSERT_OK(ot_buffer_to_host(fg, &before));
    EXPECT_STATUS(ot_tpu_optimizer_write_grad(tf, d, 1, &g), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STATUS(ot_tpu_optimizer_write_grad(tf, d, -1, &g), OT_ERR_OUT_OF_RANGE);
    EXPECT_STATUS(ot_tpu_optimizer_write_grad(tf, d2, 3, &g), OT_ERR_NOT_FOUND);
    EXPECT_STATUS(ot_tpu_optimizer_write_grad(tp, d, 3, &g), OT_ERR_FAILED_PRECONDITION);
    ASSERT_OK(ot_buffer_to_host(fg, &after));
    EXPECT_TRUE(bits_equal(&before, &after));
    ot_tensor_release(&after);
    /* the view is where the data goes: tensor 3's elements at its offset, padding stays 0 */
    ASSERT_OK(ot_tpu_optimizer_write_grad(tf, d, 3, &g));
    ASSERT_OK(ot_tpu_optimizer_flat_view(tf, 3, &v));
    ASSERT_OK(ot_buffer_to_host(fg, &after));
    EXPECT_TRUE(memcmp((float *)after.data + v.offset, g.data, g.nbytes) == 0);
    for (int64_t e = v.offset + v.count; e < v.offset + 64; e++)
        EXPECT_TRUE(((float *)after.data)[e] == 0.0f);
    ot_tensor_release(&after);
    /* byte ranges of a buffer */
    int64_t nb = (int64_t)before.nbytes;
    char tmp[8] = {0};
    EXPECT_STATUS(ot_buffer_write_bytes(fg, nb - 4, tmp, 8), OT_ERR_OUT_OF_RANGE);
    EXPECT_STATUS(ot_buffer_read_bytes(fg, -1, tmp, 4), OT_ERR_OUT_OF_RANGE);
    EXPECT_STATUS(ot_buffer_read_bytes(fg, 0, NULL, 4), OT_ERR_INVALID_ARGUMENT);
    ASSERT_OK(ot_buffer_read_bytes(fg, nb - 4, tmp, 4));
    ot_tensor_release(&before);
    ot_tensor_release(&g);
    /* a step: the parameter handle is replaced, the gradient buffer is the same */
    ASSERT_OK(ot_tpu_optimizer_step_flat(tf, d, 1, 0.1, NULL));
    ot_buffer *fp2 = NULL, *fg2 = NULL;
    ASSERT_OK(ot_tpu_optimizer_flat_buffers(tf, d, 0, &fp2, &fg2));
    EXPECT_TRUE(fg2 == fg);
    ot_tpu_profile prof;
    ASSERT_OK(ot_tpu_optimizer_profile(tf, &prof));
    EXPECT_INT_EQ(prof.steps, 1);
    EXPECT_INT_EQ(prof.failed_steps, 4);
    ot_tpu_optimizer_free(tp);
    ot_tpu_optimizer_free(tf);
    ot_device_free(d);
    ot_device_free(d2);
    ot_optimizer_free(o);
}

/* Allocation failures anywhere in a flat create, add_replica and step leak nothing; a failed
 * create leaves *out NULL. */
static void test_alloc_failures(void) {
    make_shapes();
    ot_optimizer *o = make_opt("nadam");
    ASSERT_TRUE(o != NULL);
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.flat = true;
    to.clip_grad_norm = 1.0;
    ot_device *d = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    { /* one step first: what the runtime sets up once per process (its thread pool) is not
       * the wrapper's */
        ot_tpu_optimizer *w = NULL;
        ASSERT_OK(ot_tpu_optimizer_create(o, shapes, NT, &to, &w));
        ASSERT_OK(ot_tpu_optimizer_add_replica(w, d));
        ASSERT_OK(ot_tpu_optimizer_step_flat(w, d, 1, 0.1, NULL));
        ot_tpu_optimizer_free(w);
    }
    bool done = false;
    for (int n = 1; n < 40000 && !done; n += (n < 300 ? 1 : 97)) {
        int64_t live = ot_alloc_live();
        ot_alloc_fail_after(n);
        ot_tpu_optimizer *t = NULL;
        ot_status s = ot_tpu_optimizer_create(o, shapes, NT, &to, &t);
        if (s == OT_OK) s = ot_tpu_optimizer_add_replica(t, d);
        if (s == OT_OK) s = ot_tpu_optimizer_step_flat(t, d, 1, 0.1, NULL);
        ot_alloc_fail_after(0);
        if (s == OT_OK) done = true;
        if (t == NULL) EXPECT_TRUE(s != OT_OK);
        ot_tpu_optimizer_free(t);
        if (ot_alloc_live() != live)
            OT_T_FAIL_("failing allocation %d: %lld allocations leaked (%s)", n,
                       (long long)(ot_alloc_live() - live), s == OT_OK ? "ok" : ot_last_error());
    }
    EXPECT_TRUE(done);
    ot_device_free(d);
    ot_optimizer_free(o);
}

OT_TEST_MAIN(OT_TEST(test_bitwise_plain), OT_TEST(test_bitwise_clipping_and_loss_scaling),
             OT_TEST(test_bitwise_trust_ratio), OT_TEST(test_bitwise_masters),
             OT_TEST(test_one_kernel), OT_TEST(test_trust_ratio_kernels), OT_TEST(test_refused),
             OT_TEST(test_bad_input), OT_TEST(test_alloc_failures))
