/* tpu_optim: the compiled whole-model optimizer against ot_optimizer_step_reference (bitwise),
 * one compile over many steps and learning rates, donation, two replicas stepping from two
 * threads, global-norm clipping against a host computation, state export/import, bad input. */
#include "ot_test.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "optitpu/optim.h"
#include "optitpu/runtime.h"
#include "optitpu/tpu_optim.h"

#define OPT_DIR OT_SOURCE_DIR "/tests/data/optim/"
#define NP      4
#define STEPS   100

static const char *const pnames[NP] = {"scalar", "vector", "matrix", "tensor3"};

typedef struct fixture {
    ot_tensor p0[NP];   /* initial parameters */
    ot_tensor g[NP];    /* [STEPS, ...] gradients */
    ot_shape shape[NP]; /* parameter shapes */
} fixture;

static bool load_fixture(fixture *f) {
    memset(f, 0, sizeof *f);
    char path[512];
    for (int i = 0; i < NP; i++) {
        snprintf(path, sizeof path, OPT_DIR "inputs/param0_%s.npy", pnames[i]);
        if (ot_npy_read_file(path, &f->p0[i]) != OT_OK) return false;
        snprintf(path, sizeof path, OPT_DIR "inputs/grad_%s.npy", pnames[i]);
        if (ot_npy_read_file(path, &f->g[i]) != OT_OK) return false;
        f->shape[i] = f->p0[i].shape;
    }
    return true;
}

static void free_fixture(fixture *f) {
    for (int i = 0; i < NP; i++) {
        ot_tensor_release(&f->p0[i]);
        ot_tensor_release(&f->g[i]);
    }
}

/* gradient of parameter i at step index t (0-based) as a borrowed tensor */
static void grad_row(const fixture *f, int i, int t, ot_tensor *out) {
    size_t nb = ot_shape_nbytes_unchecked(&f->shape[i]);
    ot_tensor_borrow(out, &f->shape[i], (char *)f->g[i].data + (size_t)t * nb);
}

static double lr_at(int t) { /* a schedule that changes every step */
    return 1e-2 * (1.0 + 0.5 * cos(0.3 * t)) / (1.0 + 0.01 * t);
}

static bool tensor_bits_equal(const ot_tensor *a, const ot_tensor *b) {
    return ot_shape_equal(&a->shape, &b->shape) && a->nbytes == b->nbytes &&
           memcmp(a->data, b->data, a->nbytes) == 0;
}

static bool buffer_equals(const ot_buffer *b, const ot_tensor *want) {
    ot_tensor h = {0};
    if (ot_buffer_to_host(b, &h) != OT_OK) return false;
    bool eq = tensor_bits_equal(&h, want);
    ot_tensor_release(&h);
    return eq;
}

static ot_optimizer *make_opt(const char *name) {
    ot_optimizer *o = NULL;
    if (strcmp(name, "lookahead") == 0) { /* Lookahead(sync 3, 0.5) around NAdam */
        ot_optimizer *in = NULL, *w = NULL;
        if (ot_optimizer_new("nadam", &in) != OT_OK) return NULL;
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
    } else if (strcmp(name, "lamb") == 0 || strcmp(name, "lars") == 0) {
        ot_optimizer_set(o, "weight_decay", 1e-2);
    } else if (strcmp(name, "adafactor_torch") == 0) {
        ot_optimizer_set(o, "weight_decay", 1e-2);
    } else if (strcmp(name, "adafactor") == 0) {
        ot_optimizer_set(o, "min_dim_size_to_factor", 2); /* matrix and tensor3 factored */
    } else if (strcmp(name, "rmsprop") == 0) {
        ot_optimizer_set(o, "centered", 1);
        ot_optimizer_set(o, "momentum", 0.5);
    }
    return o;
}

/* Host-side clipped gradients at step t, torch clip_grad_norm_ with sums in f64 (max_norm 0: off).
 */
static void host_grads(const fixture *f, int t, double max_norm, float buf[NP][64], ot_tensor *gt) {
    double coef = 1.0;
    if (max_norm > 0) {
        double ss = 0;
        for (int i = 0; i < NP; i++) {
            ot_tensor r;
            grad_row(f, i, t, &r);
            for (int64_t e = 0; e < ot_shape_numel_unchecked(&f->shape[i]); e++)
                ss += (double)((float *)r.data)[e] * ((float *)r.data)[e];
        }
        coef = fmin(1.0, max_norm / (sqrt(ss) + 1e-6));
    }
    for (int i = 0; i < NP; i++) {
        ot_tensor r;
        grad_row(f, i, t, &r);
        int64_t n = ot_shape_numel_unchecked(&f->shape[i]);
        for (int64_t e = 0; e < n; e++)
            buf[i][e] = max_norm > 0 ? ((float *)r.data)[e] * (float)coef : ((float *)r.data)[e];
        ot_tensor_borrow(&gt[i], &f->shape[i], buf[i]);
    }
}

/* Runs `steps` steps of optimizer `name` through the wrapper on one host device and through
 * ot_optimizer_step_reference per parameter, comparing parameters and every state tensor bitwise
 * after every step. */
static void run_against_reference(const char *name, double clip, bool donate, int steps) {
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    ot_optimizer *o = make_opt(name);
    ASSERT_TRUE(o != NULL);
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.clip_grad_norm = clip;
    to.donate = donate;
    ot_tpu_optimizer *t = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, f.shape, NP, &to, &t));
    EXPECT_INT_EQ(ot_tpu_optimizer_compile_count(t), 1);
    int S = ot_optimizer_state_count(o);
    EXPECT_INT_EQ(ot_tpu_optimizer_state_count(t), NP * S);
    ot_device *d = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, d));

    /* host reference */
    ot_optimizer *ref[NP] = {0};
    ot_tensor hp[NP] = {0}, hs[NP][OT_OPTIM_MAX_STATE];
    memset(hs, 0, sizeof hs);
    ot_buffer *pb[NP] = {0}, *gb[NP] = {0};
    for (int i = 0; i < NP; i++) {
        ASSERT_OK(ot_optimizer_clone(o, &ref[i]));
        ASSERT_OK(ot_tensor_alloc(&hp[i], &f.shape[i]));
        memcpy(hp[i].data, f.p0[i].data, hp[i].nbytes);
        for (int j = 0; j < S; j++)
            ASSERT_OK(ot_optimizer_state_alloc(o, j, &f.shape[i], &hs[i][j]));
        ASSERT_OK(ot_buffer_from_host(d, &f.p0[i], &pb[i]));
    }
    int mismatches = 0;
    for (int s = 0; s < steps && mismatches == 0; s++) {
        float buf[NP][64];
        ot_tensor gt[NP], graw[NP];
        host_grads(&f, s, clip, buf, gt);
        for (int i = 0; i < NP; i++) {
            grad_row(&f, i, s, &graw[i]);
            ASSERT_OK(ot_buffer_from_host(d, &graw[i], &gb[i]));
        }
        double lr = lr_at(s);
        ASSERT_OK(ot_tpu_optimizer_step(t, d, pb, gb, s + 1, lr, NULL));
        for (int i = 0; i < NP; i++) {
            ot_buffer_free(gb[i]);
            ASSERT_OK(ot_optimizer_step_reference(ref[i], &hp[i], &gt[i], hs[i], S, lr));
            if (!buffer_equals(pb[i], &hp[i])) {
                mismatches++;
                fprintf(stderr, "  %s: step %d parameter %s differs\n", name, s + 1, pnames[i]);
            }
            for (int j = 0; j < S; j++) {
                ot_tensor st = {0};
                ASSERT_OK(ot_tpu_optimizer_get_state(t, d, i * S + j, &st));
                if (!tensor_bits_equal(&st, &hs[i][j])) {
                    mismatches++;
                    fprintf(stderr, "  %s: step %d state %s differs\n", name, s + 1,
                            ot_tpu_optimizer_state_name(t, i * S + j));
                }
                ot_tensor_release(&st);
            }
        }
    }
    EXPECT_INT_EQ(mismatches, 0);
    EXPECT_INT_EQ(ot_tpu_optimizer_compile_count(t), 1); /* never recompiled for step or lr */
    for (int i = 0; i < NP; i++) {
        ot_buffer_free(pb[i]);
        ot_tensor_release(&hp[i]);
        for (int j = 0; j < S; j++) ot_tensor_release(&hs[i][j]);
        ot_optimizer_free(ref[i]);
    }
    ot_tpu_optimizer_free(t);
    ot_device_free(d);
    ot_optimizer_free(o);
    free_fixture(&f);
}

static void test_trajectory_adam(void) {
    run_against_reference("adam", 0, true, STEPS);
}
static void test_trajectory_others(void) {
    /* sgd (nesterov, a state copied on step 1), adamw+amsgrad (3 slots), rmsprop centered with
     * momentum, nadam (a rank-0 state slot), adagrad (a non-zero initial state possible) */
    const char *names[] = {"sgd",  "adamw", "rmsprop", "nadam",     "adagrad",         "radam",
                           "lion", "lamb",  "lars",    "adafactor", "adafactor_torch", "lookahead"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        run_against_reference(names[k], 0, true, 30);
}
static void test_trajectory_no_donation(void) {
    run_against_reference("adam", 0, false, 20);
}
static void test_clipping(void) {
    /* max_norm small enough that the coefficient is < 1 on every step, and large (no-op) */
    run_against_reference("adam", 0.05, true, 40);
    run_against_reference("sgd", 1e6, true, 10);
}

static void test_names_and_executable(void) {
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    ot_optimizer *o = make_opt("adam");
    ot_tpu_optimizer *t = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, f.shape, NP, NULL, &t));
    EXPECT_INT_EQ(ot_tpu_optimizer_state_count(t), 2 * NP);
    EXPECT_STR_EQ(ot_tpu_optimizer_state_name(t, 0), "0.exp_avg");
    EXPECT_STR_EQ(ot_tpu_optimizer_state_name(t, 1), "0.exp_avg_sq");
    EXPECT_STR_EQ(ot_tpu_optimizer_state_name(t, 7), "3.exp_avg_sq");
    EXPECT_TRUE(ot_tpu_optimizer_state_name(t, 8) == NULL);
    ot_shape ss;
    ASSERT_OK(ot_tpu_optimizer_state_shape(t, 7, &ss));
    EXPECT_TRUE(ot_shape_equal(&ss, &f.shape[3]));
    const ot_executable *e = ot_tpu_optimizer_executable(t);
    EXPECT_INT_EQ(ot_executable_param_count(e), 2 * NP + 2 * NP + 2);
    EXPECT_INT_EQ(ot_executable_output_count(e), NP + 2 * NP);
    for (int q = 0; q < ot_executable_output_count(e); q++) { /* every output is donated */
        int64_t want = q < NP ? q : NP + q;
        EXPECT_INT_EQ(ot_executable_slot(e, ot_executable_output_slot(e, q))->alias_param, want);
    }
    ot_tpu_optimizer_free(t);

    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.donate = false;
    ASSERT_OK(ot_tpu_optimizer_create(o, f.shape, NP, &to, &t));
    e = ot_tpu_optimizer_executable(t);
    for (int q = 0; q < ot_executable_output_count(e); q++)
        EXPECT_INT_EQ(ot_executable_slot(e, ot_executable_output_slot(e, q))->alias_param, -1);
    ot_tpu_optimizer_free(t);
    ot_optimizer_free(o);
    free_fixture(&f);
}

/* Donation: with it, a step allocates only the step/lr scalars and the arena on the device; the
 * updated parameters and state live in the memory of the old ones. Without it every output is a
 * new allocation (n + state more per step). */
static int64_t allocs_per_step(bool donate, int64_t *in_use_change) {
    fixture f;
    if (!load_fixture(&f)) return -1;
    ot_optimizer *o = make_opt("adam");
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.donate = donate;
    ot_tpu_optimizer *t = NULL;
    ot_device *d = NULL;
    int64_t per = -1;
    if (ot_tpu_optimizer_create(o, f.shape, NP, &to, &t) != OT_OK ||
        ot_host_device_create(0, 0, &d) != OT_OK || ot_tpu_optimizer_add_replica(t, d) != OT_OK)
        goto out;
    ot_buffer *pb[NP] = {0}, *gb[NP] = {0};
    for (int i = 0; i < NP; i++) {
        ot_tensor gr;
        grad_row(&f, i, 0, &gr);
        ot_buffer_from_host(d, &f.p0[i], &pb[i]);
        ot_buffer_from_host(d, &gr, &gb[i]);
    }
    ot_tpu_optimizer_step(t, d, pb, gb, 1, 1e-3, NULL); /* warm the pool */
    ot_mem_stats a, b;
    ot_device_memory(d, &a);
    for (int s = 2; s <= 11; s++)
        if (ot_tpu_optimizer_step(t, d, pb, gb, s, 1e-3, NULL) != OT_OK) goto free_bufs;
    ot_device_memory(d, &b);
    per = (b.alloc_count - a.alloc_count) / 10;
    *in_use_change = b.in_use - a.in_use;
free_bufs:
    for (int i = 0; i < NP; i++) {
        ot_buffer_free(pb[i]);
        ot_buffer_free(gb[i]);
    }
out:
    ot_tpu_optimizer_free(t);
    ot_device_free(d);
    ot_optimizer_free(o);
    free_fixture(&f);
    return per;
}

static void test_donation(void) {
    int64_t du = 1, nu = 1;
    int64_t with = allocs_per_step(true, &du);
    int64_t without = allocs_per_step(false, &nu);
    ASSERT_TRUE(with >= 0 && without >= 0);
    EXPECT_INT_EQ(without - with, NP + 2 * NP); /* 4 params + 8 adam states */
    EXPECT_TRUE(with <= 3);                     /* step, lr, arena */
    EXPECT_INT_EQ(du, 0);
    EXPECT_INT_EQ(nu, 0);
}

/* ---- two replicas, two threads ------------------------------------------------------------- */

typedef struct worker {
    ot_tpu_optimizer *t;
    ot_device *d;
    const fixture *f;
    ot_buffer *pb[NP];
    ot_status st;
} worker;

static void *worker_run(void *arg) {
    worker *w = arg;
    w->st = OT_OK;
    for (int s = 0; s < STEPS && w->st == OT_OK; s++) {
        ot_buffer *gb[NP] = {0};
        for (int i = 0; i < NP && w->st == OT_OK; i++) {
            ot_tensor gr;
            grad_row(w->f, i, s, &gr);
            w->st = ot_buffer_from_host(w->d, &gr, &gb[i]);
        }
        if (w->st == OT_OK)
            w->st = ot_tpu_optimizer_step(w->t, w->d, w->pb, gb, s + 1, lr_at(s), NULL);
        for (int i = 0; i < NP; i++) ot_buffer_free(gb[i]);
    }
    return NULL;
}

static void test_two_replicas_threads(void) {
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    ot_optimizer *o = make_opt("adamw");
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.clip_grad_norm = 0.1;
    ot_tpu_optimizer *t = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, f.shape, NP, &to, &t));
    ot_device *d[2] = {0};
    worker w[2];
    memset(w, 0, sizeof w);
    for (int r = 0; r < 2; r++) {
        ASSERT_OK(ot_host_device_create(r, 0, &d[r]));
        ASSERT_OK(ot_tpu_optimizer_add_replica(t, d[r]));
        w[r].t = t;
        w[r].d = d[r];
        w[r].f = &f;
        for (int i = 0; i < NP; i++) ASSERT_OK(ot_buffer_from_host(d[r], &f.p0[i], &w[r].pb[i]));
    }
    EXPECT_INT_EQ(ot_tpu_optimizer_replica_count(t), 2);
    EXPECT_STATUS(ot_tpu_optimizer_add_replica(t, d[1]), OT_ERR_ALREADY_EXISTS);
    pthread_t th[2];
    for (int r = 0; r < 2; r++) ASSERT_TRUE(pthread_create(&th[r], NULL, worker_run, &w[r]) == 0);
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    EXPECT_OK(w[0].st);
    EXPECT_OK(w[1].st);
    for (int i = 0; i < NP; i++) {
        ot_tensor a = {0};
        ASSERT_OK(ot_buffer_to_host(w[0].pb[i], &a));
        EXPECT_TRUE(buffer_equals(w[1].pb[i], &a));
        EXPECT_TRUE(!tensor_bits_equal(&a, &f.p0[i])); /* it moved */
        ot_tensor_release(&a);
    }
    for (int i = 0; i < ot_tpu_optimizer_state_count(t); i++) {
        ot_tensor a = {0}, b = {0};
        ASSERT_OK(ot_tpu_optimizer_get_state(t, d[0], i, &a));
        ASSERT_OK(ot_tpu_optimizer_get_state(t, d[1], i, &b));
        EXPECT_TRUE(tensor_bits_equal(&a, &b));
        ot_tensor_release(&a);
        ot_tensor_release(&b);
    }
    EXPECT_INT_EQ(ot_tpu_optimizer_compile_count(t), 1);
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < NP; i++) ot_buffer_free(w[r].pb[i]);
    ot_tpu_optimizer_free(t);
    for (int r = 0; r < 2; r++) ot_device_free(d[r]);
    ot_optimizer_free(o);
    free_fixture(&f);
}

/* ---- state export / import ----------------------------------------------------------------- */

static void test_state_roundtrip(void) {
    /* replica B imports replica A's state after 10 steps and both continue identically */
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    ot_optimizer *o = make_opt("nadam");
    ot_tpu_optimizer *t = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, f.shape, NP, NULL, &t));
    ot_device *d[2] = {0};
    ot_buffer *pb[2][NP] = {{0}};
    for (int r = 0; r < 2; r++) {
        ASSERT_OK(ot_host_device_create(r, 0, &d[r]));
        ASSERT_OK(ot_tpu_optimizer_add_replica(t, d[r]));
        for (int i = 0; i < NP; i++) ASSERT_OK(ot_buffer_from_host(d[r], &f.p0[i], &pb[r][i]));
    }
    for (int s = 0; s < 20; s++) {
        if (s == 10) { /* copy A's parameters and state into B */
            for (int i = 0; i < NP; i++) ASSERT_OK(ot_buffer_copy(pb[1][i], pb[0][i]));
            for (int i = 0; i < ot_tpu_optimizer_state_count(t); i++) {
                ot_tensor h = {0};
                ASSERT_OK(ot_tpu_optimizer_get_state(t, d[0], i, &h));
                ASSERT_OK(ot_tpu_optimizer_set_state(t, d[1], i, &h));
                ot_tensor_release(&h);
            }
        }
        for (int r = 0; r < 2; r++) {
            if (r == 1 && s < 10) continue; /* B idles for the first 10 steps */
            ot_buffer *gb[NP];
            for (int i = 0; i < NP; i++) {
                ot_tensor gr;
                grad_row(&f, i, s, &gr);
                ASSERT_OK(ot_buffer_from_host(d[r], &gr, &gb[i]));
            }
            ASSERT_OK(ot_tpu_optimizer_step(t, d[r], pb[r], gb, s + 1, lr_at(s), NULL));
            for (int i = 0; i < NP; i++) ot_buffer_free(gb[i]);
        }
    }
    for (int i = 0; i < NP; i++) {
        ot_tensor a = {0};
        ASSERT_OK(ot_buffer_to_host(pb[0][i], &a));
        EXPECT_TRUE(buffer_equals(pb[1][i], &a));
        ot_tensor_release(&a);
    }
    /* a state of the wrong shape is refused and changes nothing */
    ot_tensor before = {0}, bad = {0}, after = {0};
    ASSERT_OK(ot_tpu_optimizer_get_state(t, d[0], 3, &before));
    ASSERT_OK(ot_tensor_alloc(&bad, &f.shape[0]));
    EXPECT_STATUS(ot_tpu_optimizer_set_state(t, d[0], 3, &bad), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STATUS(ot_tpu_optimizer_set_state(t, d[0], 99, &bad), OT_ERR_OUT_OF_RANGE);
    EXPECT_STATUS(ot_tpu_optimizer_get_state(t, d[0], -1, &after), OT_ERR_OUT_OF_RANGE);
    ASSERT_OK(ot_tpu_optimizer_get_state(t, d[0], 3, &after));
    EXPECT_TRUE(tensor_bits_equal(&before, &after));
    ot_tensor_release(&before);
    ot_tensor_release(&bad);
    ot_tensor_release(&after);
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < NP; i++) ot_buffer_free(pb[r][i]);
    ot_tpu_optimizer_free(t);
    for (int r = 0; r < 2; r++) ot_device_free(d[r]);
    ot_optimizer_free(o);
    free_fixture(&f);
}

/* ---- torch fixtures through the device optimizer ------------------------------------------- */

/* A torch case run by the wrapper: clipping by the wrapper's options, the learning rate from
 * ot_lr_schedule (the fixtures' warmup-cosine) or constant; parameters compared after every step
 * with the case's suggested tolerance. */
static void run_fixture_case(json_t *root, const char *want_name) {
    json_t *c = NULL, *x;
    size_t idx;
    json_array_foreach(json_object_get(root, "cases"), idx, x) {
        if (strcmp(json_string_value(json_object_get(x, "name")), want_name) == 0) c = x;
    }
    ASSERT_TRUE(c != NULL);
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    ot_optimizer *o = NULL;
    bool optax = strcmp(json_string_value(json_object_get(c, "framework")), "optax") == 0;
    ASSERT_OK(ot_optimizer_new(json_string_value(json_object_get(c, "optimizer")), &o));
    double flag;
    if (optax && ot_optimizer_get(o, "optax", &flag) == OT_OK)
        EXPECT_OK(ot_optimizer_set(o, "optax", 1));
    const char *k, *k2;
    json_t *v;
    double lr0 = 0;
    /* optax's masks: decay and trust ratio on matrix and tensor3 only */
    static const bool mask[NP] = {false, false, true, true};
    bool wd_mask = false, tr_mask = false;
    json_object_foreach(json_object_get(c, "hyperparams"), k, v) {
        if (json_is_string(v)) { /* "MASK" */
            if (strcmp(k, "trust_ratio_mask") == 0)
                tr_mask = true;
            else
                wd_mask = true;
        } else if (optax && strcmp(k, "learning_rate") == 0) {
            lr0 = json_number_value(v);
            EXPECT_OK(ot_optimizer_set(o, "lr", lr0));
        } else if (optax && (strcmp(k, "b1") == 0 || strcmp(k, "b2") == 0)) {
            EXPECT_OK(ot_optimizer_set(o, k[1] == '1' ? "beta1" : "beta2", json_number_value(v)));
        } else if (optax && strcmp(k, "decay") == 0) { /* rmsprop */
            EXPECT_OK(ot_optimizer_set(o, "alpha", json_number_value(v)));
        } else if (strcmp(k, "betas") == 0) {
            EXPECT_OK(ot_optimizer_set(o, "beta1", json_real_value(json_array_get(v, 0))));
            EXPECT_OK(ot_optimizer_set(o, "beta2", json_real_value(json_array_get(v, 1))));
        } else {
            EXPECT_OK(ot_optimizer_set(
                o, k, json_is_boolean(v) ? json_is_true(v) : json_number_value(v)));
            if (strcmp(k, "lr") == 0) lr0 = json_number_value(v);
        }
    }
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    /* parameter groups: a group's own hyper-parameters and its lr relative to the base lr */
    ot_optimizer *gopt[NP] = {0};
    const ot_optimizer *popt[NP] = {0};
    double lrs_k[NP] = {1, 1, 1, 1};
    json_t *groups = json_object_get(c, "param_groups"), *grp;
    json_array_foreach(groups, idx, grp) {
        json_t *pn;
        size_t pi;
        json_array_foreach(json_object_get(grp, "params"), pi, pn) {
            int pk = 0;
            while (pk < NP && strcmp(pnames[pk], json_string_value(pn)) != 0) pk++;
            ASSERT_TRUE(pk < NP);
            ASSERT_OK(ot_optimizer_clone(o, &gopt[pk]));
            json_object_foreach(grp, k2, v) {
                if (strcmp(k2, "params") == 0) continue;
                if (strcmp(k2, "lr") == 0) lrs_k[pk] = json_number_value(v) / lr0;
                EXPECT_OK(ot_optimizer_set(gopt[pk], k2, json_number_value(v)));
            }
            popt[pk] = gopt[pk];
        }
    }
    if (groups) {
        to.param_optimizers = popt;
        to.lr_scale = lrs_k;
    }
    if (wd_mask) to.weight_decay_mask = mask;
    if (tr_mask) to.trust_ratio_mask = mask;
    json_t *cn = json_object_get(c, "clip_global_norm"), *cv = json_object_get(c, "clip_value");
    if (cn) to.clip_grad_norm = json_number_value(json_object_get(cn, "max_norm"));
    to.clip_norm_optax = cn && optax;                        /* optax.clip_by_global_norm */
    json_t *adw = json_object_get(c, "add_decayed_weights"); /* optax: g + wd p first */
    if (adw) EXPECT_OK(ot_optimizer_set(o, "weight_decay", json_number_value(adw)));
    if (cv) to.clip_grad_value = json_number_value(json_object_get(cv, "max_abs"));
    ot_lr_schedule *sch = NULL;
    if (json_object_get(c, "lr_schedule"))
        ASSERT_OK(ot_lr_schedule_warmup_cosine(0.1 * lr0, lr0, 10, 100, 0.01 * lr0, 1.0, &sch));
    else
        ASSERT_OK(ot_lr_schedule_constant(lr0, &sch));
    json_t *tol = json_object_get(c, "suggested_tolerance");
    double rtol = json_number_value(json_object_get(tol, "rtol"));
    double atol = json_number_value(json_object_get(tol, "atol"));
    rtol = fmin(rtol, 1e-4); /* optax's f32-vs-f64 drift makes some suggested bounds loose */
    char path[512];
    ot_tensor want[NP] = {0}, lrs = {0};
    for (int i = 0; i < NP; i++) {
        snprintf(path, sizeof path, OPT_DIR "%s/param_%s.npy", want_name, pnames[i]);
        ASSERT_OK(ot_npy_read_file(path, &want[i]));
    }
    snprintf(path, sizeof path, OPT_DIR "%s/lr.npy", want_name);
    ASSERT_OK(ot_npy_read_file(path, &lrs));
    ot_tpu_optimizer *t = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, f.shape, NP, &to, &t));
    ot_device *d = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, d));
    ot_buffer *pb[NP], *gb[NP];
    for (int i = 0; i < NP; i++) ASSERT_OK(ot_buffer_from_host(d, &f.p0[i], &pb[i]));
    int bad = 0;
    double max_rel = 0, lr_rel = 0;
    for (int s = 0; s < STEPS && !bad; s++) {
        double lr = ot_lr_schedule_lr(sch, s);
        double lw = ((double *)lrs.data)[s];
        lr_rel = fmax(lr_rel, fabs(lr - lw) / lw);
        for (int i = 0; i < NP; i++) {
            ot_tensor gr;
            grad_row(&f, i, s, &gr);
            ASSERT_OK(ot_buffer_from_host(d, &gr, &gb[i]));
        }
        ASSERT_OK(ot_tpu_optimizer_step(t, d, pb, gb, s + 1, lr, NULL));
        for (int i = 0; i < NP; i++) {
            ot_buffer_free(gb[i]);
            ot_tensor h = {0};
            ASSERT_OK(ot_buffer_to_host(pb[i], &h));
            int64_t n = ot_shape_numel_unchecked(&f.shape[i]);
            const float *w = (const float *)want[i].data + (size_t)s * (size_t)n;
            for (int64_t e = 0; e < n; e++) {
                double a = ((float *)h.data)[e], b = w[e];
                if (fabs(b) > 1e-3) max_rel = fmax(max_rel, fabs(a - b) / fabs(b));
                if (!(fabs(a - b) <= atol + rtol * fabs(b))) {
                    fprintf(stderr, "  %s step %d %s[%lld]: %.9g vs %.9g\n", want_name, s + 1,
                            pnames[i], (long long)e, a, b);
                    bad = 1;
                    break;
                }
            }
            ot_tensor_release(&h);
        }
    }
    EXPECT_INT_EQ(bad, 0);
    /* lr.npy is the generator's own closed form of optax's warmup-cosine (another expression
     * order): equal up to the last bits */
    EXPECT_TRUE(lr_rel <= 1e-14);
    printf("  %-32s device optimizer: max rel %.3g (bound rtol %.2g), lr vs lr.npy %.2g\n",
           want_name, max_rel, rtol, lr_rel);
    for (int i = 0; i < NP; i++) {
        ot_buffer_free(pb[i]);
        ot_tensor_release(&want[i]);
    }
    ot_tensor_release(&lrs);
    ot_tpu_optimizer_free(t);
    ot_device_free(d);
    ot_lr_schedule_free(sch);
    ot_optimizer_free(o);
    for (int i = 0; i < NP; i++) ot_optimizer_free(gopt[i]);
    free_fixture(&f);
}

/* Steps a wrapper of o (options to) 5 times from the fixture's start; parameters out[NP]. */
static void run_five(const ot_optimizer *o, const ot_tpu_optimizer_options *to, ot_tensor *out) {
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    ot_tpu_optimizer *t = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, f.shape, NP, to, &t));
    ot_device *d = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, d));
    ot_buffer *pb[NP], *gb[NP];
    for (int i = 0; i < NP; i++) ASSERT_OK(ot_buffer_from_host(d, &f.p0[i], &pb[i]));
    for (int s = 0; s < 5; s++) {
        for (int i = 0; i < NP; i++) {
            ot_tensor gr;
            grad_row(&f, i, s, &gr);
            ASSERT_OK(ot_buffer_from_host(d, &gr, &gb[i]));
        }
        ASSERT_OK(ot_tpu_optimizer_step(t, d, pb, gb, s + 1, 1e-2, NULL));
        for (int i = 0; i < NP; i++) ot_buffer_free(gb[i]);
    }
    for (int i = 0; i < NP; i++) {
        ASSERT_OK(ot_buffer_to_host(pb[i], &out[i]));
        ot_buffer_free(pb[i]);
    }
    ot_tpu_optimizer_free(t);
    ot_device_free(d);
    free_fixture(&f);
}

/* weight_decay_mask is exactly a parameter group with weight decay 0, also inside a Lookahead;
 * a mask for a hyper-parameter the optimizer lacks is refused. */
static void test_masks(void) {
    ot_optimizer *aw = NULL, *aw0 = NULL, *la = NULL, *la0 = NULL;
    ASSERT_OK(ot_optimizer_new("adamw", &aw));
    ASSERT_OK(ot_optimizer_set(aw, "weight_decay", 0.1));
    ASSERT_OK(ot_optimizer_clone(aw, &aw0));
    ASSERT_OK(ot_optimizer_set(aw0, "weight_decay", 0));
    ASSERT_OK(ot_optimizer_new_lookahead(aw, 2, 0.5, &la));
    ASSERT_OK(ot_optimizer_new_lookahead(aw0, 2, 0.5, &la0));
    static const bool mask[NP] = {false, true, false, true};
    ot_tpu_optimizer_options tm = ot_tpu_optimizer_options_default();
    tm.weight_decay_mask = mask;
    ot_tpu_optimizer_options tg = ot_tpu_optimizer_options_default();
    const ot_optimizer *groups[NP] = {la0, NULL, la0, NULL};
    tg.param_optimizers = groups;
    ot_tensor a[NP] = {0}, b[NP] = {0}, c[NP] = {0};
    run_five(la, &tm, a);
    run_five(la, &tg, b);
    run_five(la, NULL, c); /* unmasked: every parameter decays */
    for (int i = 0; i < NP; i++) {
        EXPECT_TRUE(tensor_bits_equal(&a[i], &b[i]));
        EXPECT_TRUE(tensor_bits_equal(&a[i], &c[i]) == mask[i]);
        ot_tensor_release(&a[i]);
        ot_tensor_release(&b[i]);
        ot_tensor_release(&c[i]);
    }
    /* adamw has no trust ratio */
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    ot_tpu_optimizer *t = NULL;
    ot_tpu_optimizer_options bad = ot_tpu_optimizer_options_default();
    bad.trust_ratio_mask = mask;
    EXPECT_STATUS(ot_tpu_optimizer_create(aw, f.shape, NP, &bad, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "trust_ratio_mask[0]");
    EXPECT_TRUE(t == NULL);
    free_fixture(&f);
    ot_optimizer_free(aw);
    ot_optimizer_free(aw0);
    ot_optimizer_free(la);
    ot_optimizer_free(la0);
}

static void test_torch_fixtures(void) {
    json_error_t je;
    json_t *root = json_load_file(OPT_DIR "index.json", 0, &je);
    ASSERT_TRUE(root != NULL);
    run_fixture_case(root, "torch_adam");            /* clip by norm, warmup-cosine schedule */
    run_fixture_case(root, "torch_adamw");           /* decoupled wd, clip, schedule */
    run_fixture_case(root, "torch_adam_clip_value"); /* clip by value */
    run_fixture_case(root, "torch_sgd_momentum_dampening_wd");
    run_fixture_case(root, "torch_adamw_param_groups"); /* two groups: own lr and wd */
    /* optax's conventions ("optax" 1) and masks through the device optimizer */
    run_fixture_case(root, "optax_adamw_masked");    /* weight_decay_mask */
    run_fixture_case(root, "optax_adam_eps_root");   /* eps inside the square root */
    run_fixture_case(root, "optax_adam_clip_value"); /* clip by value */
    run_fixture_case(root, "optax_nadam");
    run_fixture_case(root, "optax_rmsprop");
    /* with optax's clipping by global norm (clip_norm_optax) and the warmup-cosine schedule */
    run_fixture_case(root, "optax_adam");
    run_fixture_case(root, "optax_adamw");
    run_fixture_case(root, "optax_radam");
    run_fixture_case(root, "optax_rmsprop_centered_momentum");
    run_fixture_case(root, "optax_sgd_nesterov_wd");
    run_fixture_case(root, "optax_lamb"); /* weight_decay_mask */
    run_fixture_case(root, "optax_lars"); /* weight_decay_mask and trust_ratio_mask */
    json_decref(root);
}

/* ---- mixed precision ------------------------------------------------------------------------ */

static bool load_case(const char *cs, const char *file, ot_tensor *t) {
    char path[512];
    snprintf(path, sizeof path, OPT_DIR "%s/%s", cs, file);
    return ot_npy_read_file(path, t) == OT_OK;
}

/* torch_amp_f16_gradscaler_adam (f16 model copy, f32 masters, GradScaler with growth interval
 * 10, clipping by norm 5 after unscaling, inf/NaN injected at steps 12, 13, 47, 80) and
 * torch_bf16_master_adamw (bf16 copy, f32 masters, AdamW) through the device optimizer: the loss
 * scale before each step and the skipped steps exactly as torch's, masters and Adam state within
 * rtol 1e-4 / atol 1e-5 (torch_adam's own suggested bound is 4.3e-5 / 8.5e-6; the f32 update
 * differs from torch's FMA kernels in the last bits), the half copy within one ulp of the half
 * dtype (a master differing in its last f32 bits may round the other way). */
static void run_mixed_case(const char *cs, bool f16) {
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    ot_dtype hd = f16 ? OT_F16 : OT_BF16;
    ot_optimizer *o = NULL;
    ASSERT_OK(ot_optimizer_new(f16 ? "adam" : "adamw", &o));
    if (!f16) ASSERT_OK(ot_optimizer_set(o, "weight_decay", 0.01));
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    if (f16) {
        to.loss_scaling = true;
        to.init_scale = 65536;
        to.growth_factor = 2;
        to.backoff_factor = 0.5;
        to.growth_interval = 10;
        to.clip_grad_norm = 5.0;
    }
    ot_shape hs[NP];
    for (int i = 0; i < NP; i++) {
        hs[i] = f.shape[i];
        hs[i].dtype = hd;
    }
    ot_tpu_optimizer *t = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, hs, NP, &to, &t));
    EXPECT_INT_EQ(ot_tpu_optimizer_state_count(t), 3 * NP);
    EXPECT_STR_EQ(ot_tpu_optimizer_state_name(t, 2), "0.master");
    ot_device *d = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, d));
    ot_tensor want[NP] = {0}, whalf[NP] = {0}, gh[NP] = {0}, wm[NP] = {0}, wv[NP] = {0};
    ot_tensor lr = {0}, scale = {0}, skipped = {0};
    char fn[128];
    ot_buffer *pb[NP], *gb[NP];
    for (int i = 0; i < NP; i++) {
        snprintf(fn, sizeof fn, "param_%s.npy", pnames[i]);
        ASSERT_TRUE(load_case(cs, fn, &want[i]));
        snprintf(fn, sizeof fn, "param_%s_%s.npy", f16 ? "f16" : "bf16", pnames[i]);
        ASSERT_TRUE(load_case(cs, fn, &whalf[i]));
        snprintf(fn, sizeof fn, "grad_%s_%s.npy", f16 ? "f16" : "bf16", pnames[i]);
        ASSERT_TRUE(load_case(cs, fn, &gh[i]));
        snprintf(fn, sizeof fn, "state_exp_avg_%s.npy", pnames[i]);
        ASSERT_TRUE(load_case(cs, fn, &wm[i]));
        snprintf(fn, sizeof fn, "state_exp_avg_sq_%s.npy", pnames[i]);
        ASSERT_TRUE(load_case(cs, fn, &wv[i]));
        /* the half copy starts as the f32 weights rounded; the master as the f32 weights */
        ot_tensor h;
        ASSERT_OK(ot_tensor_alloc(&h, &hs[i]));
        int64_t n = ot_shape_numel_unchecked(&hs[i]);
        for (int64_t e = 0; e < n; e++) {
            float x = ((float *)f.p0[i].data)[e];
            ((uint16_t *)h.data)[e] = f16 ? ot_f32_to_f16(x) : ot_f32_to_bf16(x);
        }
        ASSERT_OK(ot_buffer_from_host(d, &h, &pb[i]));
        ot_tensor_release(&h);
        ASSERT_OK(ot_tpu_optimizer_set_state(t, d, 3 * i + 2, &f.p0[i]));
    }
    ASSERT_TRUE(load_case(cs, "lr.npy", &lr));
    if (f16) {
        ASSERT_TRUE(load_case(cs, "scale.npy", &scale));
        ASSERT_TRUE(load_case(cs, "skipped.npy", &skipped));
    }
    int bad = 0, nskipped = 0;
    int64_t taken = 0;
    double max_rel = 0;
    for (int s = 0; s < STEPS && !bad; s++) {
        double sc = 0;
        bool sk = false;
        ASSERT_OK(ot_tpu_optimizer_loss_scale(t, d, &sc, NULL));
        if (f16 && sc != ((float *)scale.data)[s]) {
            fprintf(stderr, "  %s step %d: loss scale %g, torch %g\n", cs, s, sc,
                    ((float *)scale.data)[s]);
            bad = 1;
        }
        for (int i = 0; i < NP; i++) {
            size_t nb = ot_shape_nbytes_unchecked(&hs[i]);
            ot_tensor gr;
            ot_tensor_borrow(&gr, &hs[i], (char *)gh[i].data + (size_t)s * nb);
            ASSERT_OK(ot_buffer_from_host(d, &gr, &gb[i]));
        }
        ASSERT_OK(ot_tpu_optimizer_step(t, d, pb, gb, taken + 1, ((double *)lr.data)[s], NULL));
        for (int i = 0; i < NP; i++) ot_buffer_free(gb[i]);
        ASSERT_OK(ot_tpu_optimizer_loss_scale(t, d, &sc, &sk));
        if (f16 && sk != (((uint8_t *)skipped.data)[s] != 0)) {
            fprintf(stderr, "  %s step %d: skipped %d, torch %d\n", cs, s, sk,
                    ((uint8_t *)skipped.data)[s]);
            bad = 1;
        }
        nskipped += sk;
        if (!sk) taken++;
        for (int i = 0; i < NP && !bad; i++) {
            int64_t n = ot_shape_numel_unchecked(&f.shape[i]);
            ot_tensor got[3], half = {0};
            memset(got, 0, sizeof got);
            for (int j = 0; j < 3; j++)
                ASSERT_OK(ot_tpu_optimizer_get_state(t, d, 3 * i + (j + 2) % 3, &got[j]));
            const ot_tensor *ref[3] = {&want[i], &wm[i], &wv[i]}; /* master, exp_avg, sq */
            for (int j = 0; j < 3; j++)
                for (int64_t e = 0; e < n; e++) {
                    double a = ((float *)got[j].data)[e];
                    double b = ((float *)ref[j]->data)[(size_t)s * (size_t)n + (size_t)e];
                    if (fabs(b) > 1e-3) max_rel = fmax(max_rel, fabs(a - b) / fabs(b));
                    if (!(fabs(a - b) <= 1e-5 + 1e-4 * fabs(b))) {
                        fprintf(stderr, "  %s step %d %s slot %d [%lld]: %.9g vs %.9g\n", cs, s,
                                pnames[i], j, (long long)e, a, b);
                        bad = 1;
                        break;
                    }
                }
            ASSERT_OK(ot_buffer_to_host(pb[i], &half));
            for (int64_t e = 0; e < n; e++) {
                int a = ((uint16_t *)half.data)[e];
                int b = ((uint16_t *)whalf[i].data)[(size_t)s * (size_t)n + (size_t)e];
                if (abs(a - b) > 1) {
                    fprintf(stderr, "  %s step %d %s half [%lld]: %#x vs %#x\n", cs, s, pnames[i],
                            (long long)e, a, b);
                    bad = 1;
                    break;
                }
            }
            ot_tensor_release(&half);
            for (int j = 0; j < 3; j++) ot_tensor_release(&got[j]);
        }
    }
    EXPECT_INT_EQ(bad, 0);
    int want_skipped = 0; /* torch's: the four injected steps and the early f16 overflows */
    for (int s = 0; f16 && s < STEPS; s++) want_skipped += ((uint8_t *)skipped.data)[s] != 0;
    EXPECT_INT_EQ(nskipped, want_skipped);
    if (f16) EXPECT_TRUE(want_skipped >= 4);
    printf("  %-32s device optimizer: %d skipped, max rel %.3g\n", cs, nskipped, max_rel);
    for (int i = 0; i < NP; i++) {
        ot_buffer_free(pb[i]);
        ot_tensor_release(&want[i]);
        ot_tensor_release(&whalf[i]);
        ot_tensor_release(&gh[i]);
        ot_tensor_release(&wm[i]);
        ot_tensor_release(&wv[i]);
    }
    ot_tensor_release(&lr);
    ot_tensor_release(&scale);
    ot_tensor_release(&skipped);
    ot_tpu_optimizer_free(t);
    ot_device_free(d);
    ot_optimizer_free(o);
    free_fixture(&f);
}

static void test_mixed_precision(void) {
    run_mixed_case("torch_amp_f16_gradscaler_adam", true);
    run_mixed_case("torch_bf16_master_adamw", false);

    /* a master never set starts as the widened parameter; the half copy is the master rounded */
    ot_optimizer *o = NULL;
    ASSERT_OK(ot_optimizer_new("sgd", &o));
    ot_shape s;
    ot_shape_make(&s, OT_BF16, 1, (int64_t[]){3});
    ot_tpu_optimizer *t = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, &s, 1, NULL, &t));
    EXPECT_INT_EQ(ot_tpu_optimizer_state_count(t), 1);
    EXPECT_STR_EQ(ot_tpu_optimizer_state_name(t, 0), "0.master");
    ot_device *d = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, d));
    float pv[3] = {1.5f, -2.25f, 3.0f}, gv[3] = {1.0f, 1.0f, -1.0f};
    ot_tensor h;
    ASSERT_OK(ot_tensor_alloc(&h, &s));
    ot_buffer *pb = NULL, *gb = NULL;
    for (int e = 0; e < 3; e++) ((uint16_t *)h.data)[e] = ot_f32_to_bf16(pv[e]);
    ASSERT_OK(ot_buffer_from_host(d, &h, &pb));
    for (int e = 0; e < 3; e++) ((uint16_t *)h.data)[e] = ot_f32_to_bf16(gv[e]);
    ASSERT_OK(ot_buffer_from_host(d, &h, &gb));
    ot_tensor_release(&h);
    ASSERT_OK(ot_tpu_optimizer_step(t, d, &pb, &gb, 1, 1.0 / 1024, NULL));
    ot_tensor m = {0}, p = {0};
    ASSERT_OK(ot_tpu_optimizer_get_state(t, d, 0, &m));
    ASSERT_OK(ot_buffer_to_host(pb, &p));
    for (int e = 0; e < 3; e++) {
        float want = pv[e] - gv[e] / 1024; /* exact in f32, not in bf16 */
        EXPECT_TRUE(((float *)m.data)[e] == want);
        EXPECT_INT_EQ(((uint16_t *)p.data)[e], ot_f32_to_bf16(want));
    }
    ot_tensor_release(&m);
    ot_tensor_release(&p);
    ot_buffer_free(pb);
    ot_buffer_free(gb);
    ot_tpu_optimizer_free(t);
    ot_device_free(d);
    ot_optimizer_free(o);
}

/* ---- bad input ----------------------------------------------------------------------------- */

static void test_errors_change_nothing(void) {
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    ot_optimizer *o = make_opt("adam");
    ot_tpu_optimizer *t = NULL;
    ot_shape bad_shapes[NP];
    memcpy(bad_shapes, f.shape, sizeof bad_shapes);
    bad_shapes[2].dtype = OT_S32;
    EXPECT_STATUS(ot_tpu_optimizer_create(o, bad_shapes, NP, NULL, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(t == NULL);
    EXPECT_STATUS(ot_tpu_optimizer_create(o, f.shape, 0, NULL, &t), OT_ERR_INVALID_ARGUMENT);
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.clip_grad_norm = NAN;
    EXPECT_STATUS(ot_tpu_optimizer_create(o, f.shape, NP, &to, &t), OT_ERR_INVALID_ARGUMENT);
    to = ot_tpu_optimizer_options_default();
    to.clip_grad_value = -1;
    EXPECT_STATUS(ot_tpu_optimizer_create(o, f.shape, NP, &to, &t), OT_ERR_INVALID_ARGUMENT);
    ASSERT_OK(ot_tpu_optimizer_create(o, f.shape, NP, NULL, &t));
    ot_device *d = NULL, *other = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ASSERT_OK(ot_host_device_create(1, 0, &other));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, d));
    ot_buffer *pb[NP], *gb[NP], *orig[NP];
    for (int i = 0; i < NP; i++) {
        ot_tensor gr;
        grad_row(&f, i, 0, &gr);
        ASSERT_OK(ot_buffer_from_host(d, &f.p0[i], &pb[i]));
        ASSERT_OK(ot_buffer_from_host(d, &gr, &gb[i]));
        orig[i] = pb[i];
    }
    ot_tensor s0 = {0};
    ASSERT_OK(ot_tpu_optimizer_get_state(t, d, 0, &s0));

    EXPECT_STATUS(ot_tpu_optimizer_step(t, d, pb, gb, 0, 1e-3, NULL), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "step 0");
    EXPECT_STATUS(ot_tpu_optimizer_step(t, d, pb, gb, 1, NAN, NULL), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_tpu_optimizer_step(t, d, pb, gb, 1, -1.0, NULL), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_tpu_optimizer_step(t, other, pb, gb, 1, 1e-3, NULL), OT_ERR_NOT_FOUND);
    /* a gradient of the wrong shape */
    ot_buffer *wrong = NULL;
    ASSERT_OK(ot_buffer_from_host(d, &f.p0[1], &wrong));
    ot_buffer *keep = gb[2];
    gb[2] = wrong;
    EXPECT_STATUS(ot_tpu_optimizer_step(t, d, pb, gb, 1, 1e-3, NULL), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STR_CONTAINS(ot_last_error(), "gradient 2");
    gb[2] = keep;
    /* a parameter of the wrong shape */
    keep = pb[3];
    pb[3] = wrong;
    EXPECT_STATUS(ot_tpu_optimizer_step(t, d, pb, gb, 1, 1e-3, NULL), OT_ERR_SHAPE_MISMATCH);
    pb[3] = keep;
    ot_buffer_free(wrong);
    /* a gradient on another device */
    ot_buffer *far = NULL;
    ot_tensor gr;
    grad_row(&f, 1, 0, &gr);
    ASSERT_OK(ot_buffer_from_host(other, &gr, &far));
    keep = gb[1];
    gb[1] = far;
    EXPECT_STATUS(ot_tpu_optimizer_step(t, d, pb, gb, 1, 1e-3, NULL), OT_ERR_INVALID_ARGUMENT);
    gb[1] = keep;
    ot_buffer_free(far);
    /* a parameter passed as its own gradient */
    keep = gb[0];
    gb[0] = pb[0];
    EXPECT_STATUS(ot_tpu_optimizer_step(t, d, pb, gb, 1, 1e-3, NULL), OT_ERR_INVALID_ARGUMENT);
    gb[0] = keep;
    /* nothing changed: same handles, live, same contents, same state */
    for (int i = 0; i < NP; i++) {
        EXPECT_TRUE(pb[i] == orig[i]);
        EXPECT_TRUE(!ot_buffer_donated(pb[i]));
        EXPECT_TRUE(buffer_equals(pb[i], &f.p0[i]));
    }
    ot_tensor s1 = {0};
    ASSERT_OK(ot_tpu_optimizer_get_state(t, d, 0, &s1));
    EXPECT_TRUE(tensor_bits_equal(&s0, &s1));
    ot_tensor_release(&s1);
    /* and a good step still works and replaces the handles */
    ASSERT_OK(ot_tpu_optimizer_step(t, d, pb, gb, 1, 1e-3, NULL));
    for (int i = 0; i < NP; i++) EXPECT_TRUE(!buffer_equals(pb[i], &f.p0[i]));
    ot_tensor_release(&s0);
    for (int i = 0; i < NP; i++) {
        ot_buffer_free(pb[i]);
        ot_buffer_free(gb[i]);
    }
    EXPECT_STATUS(ot_tpu_optimizer_add_replica(t, d), OT_ERR_ALREADY_EXISTS);
    ot_tpu_optimizer_free(t);
    ot_device_free(d);
    ot_device_free(other);
    ot_optimizer_free(o);
    free_fixture(&f);
}

/* Every allocation failure during create / add_replica / step is reported and leaks nothing. */
static void test_alloc_failures(void) {
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    ot_optimizer *o = make_opt("adam");
    bool done = false;
    for (int n = 1; n < 20000 && !done; n += (n < 200 ? 1 : 97)) {
        int64_t live = ot_alloc_live();
        ot_alloc_fail_after(n);
        ot_tpu_optimizer *t = NULL;
        ot_status s = ot_tpu_optimizer_create(o, f.shape, NP, NULL, &t);
        ot_alloc_fail_after(0);
        if (s == OT_OK) {
            done = true;
            ot_tpu_optimizer_free(t);
        } else {
            EXPECT_TRUE(t == NULL);
        }
        EXPECT_INT_EQ(ot_alloc_live(), live);
    }
    EXPECT_TRUE(done);
    ot_optimizer_free(o);
    free_fixture(&f);
}

/* ---- host-callback optimizers -----------------------------------------------------------------
 */

typedef struct cb_ctl {
    int64_t fail_at; /* fail at this step for parameter 2 (0: never), after scribbling */
    int calls;
} cb_ctl;
static int one_slot(const ot_optimizer *o) {
    (void)o;
    return 1;
}
static const char *mb_name(const ot_optimizer *o, int i) {
    (void)o;
    (void)i;
    return "momentum_buffer";
}
/* torch's SGD with momentum in C (any dtype-f32 shape) */
static ot_status sgdm_host(const ot_optim_host_args *a) {
    cb_ctl *c = a->user;
    c->calls++;
    float mu = (float)ot_optimizer_hparam(a->opt, "momentum"), nlr = (float)-a->lr;
    float *p = a->param, *b = a->state[0];
    const float *g = a->grad;
    if (c->fail_at == a->step && a->count == 15) {
        for (int64_t e = 0; e < a->count; e++) p[e] = b[e] = 12345.0f;
        return ot_error(OT_ERR_INTERNAL, "sgdm_host: refusing step %lld", (long long)a->step);
    }
    for (int64_t e = 0; e < a->count; e++) {
        float buf = a->step == 1 ? g[e] : b[e] * mu + 1.0f * g[e];
        b[e] = buf;
        p[e] = p[e] + nlr * buf;
    }
    return OT_OK;
}
static const char *const sgdm_names[] = {"lr", "momentum"};
static const double sgdm_defaults[] = {1e-3, 0.9};
static const ot_optimizer_vtable sgdm_vt = {
    "sgdm_host", 2, sgdm_names, sgdm_defaults, NULL, one_slot, mb_name, NULL, NULL, NULL, NULL};

/* The wrapper runs a host callback per parameter on host copies (clipping as the compiled update
 * does): bit for bit ot_optimizer_step_reference with the same clipping; a failing callback
 * changes nothing; mixing with graphs, loss scaling and half parameters are refused. */
static void test_host_callback(void) {
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    cb_ctl ctl = {0, 0};
    ot_optimizer *h = NULL, *adam = NULL;
    ASSERT_OK(ot_optimizer_new_host(&sgdm_vt, sgdm_host, &ctl, &h));
    ASSERT_OK(ot_optimizer_new("adam", &adam));
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.clip_grad_norm = 2.0;
    ot_tpu_optimizer *t = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(h, f.shape, NP, &to, &t));
    EXPECT_TRUE(ot_tpu_optimizer_executable(t) == NULL);
    EXPECT_INT_EQ(ot_tpu_optimizer_compile_count(t), 0);
    EXPECT_INT_EQ(ot_tpu_optimizer_state_count(t), NP);
    ot_device *d = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, d));
    ot_optimizer *ref[NP] = {0};
    ot_tensor hp[NP] = {0}, hs[NP] = {0};
    ot_buffer *pb[NP] = {0}, *gb[NP] = {0};
    for (int i = 0; i < NP; i++) {
        ASSERT_OK(ot_optimizer_clone(h, &ref[i]));
        ASSERT_OK(ot_tensor_alloc(&hp[i], &f.shape[i]));
        memcpy(hp[i].data, f.p0[i].data, hp[i].nbytes);
        ASSERT_OK(ot_optimizer_state_alloc(h, 0, &f.shape[i], &hs[i]));
        ASSERT_OK(ot_buffer_from_host(d, &f.p0[i], &pb[i]));
    }
    int mismatches = 0;
    for (int s = 0; s < 30; s++) {
        float buf[NP][64];
        ot_tensor gt[NP], graw[NP];
        host_grads(&f, s, 2.0, buf, gt);
        for (int i = 0; i < NP; i++) {
            grad_row(&f, i, s, &graw[i]);
            ASSERT_OK(ot_buffer_from_host(d, &graw[i], &gb[i]));
        }
        if (s == 10) { /* step 11 fails for the matrix: nothing changes anywhere */
            ctl.fail_at = 11;
            ot_buffer *keep[NP];
            memcpy(keep, pb, sizeof keep);
            EXPECT_STATUS(ot_tpu_optimizer_step(t, d, pb, gb, s + 1, lr_at(s), NULL),
                          OT_ERR_INTERNAL);
            EXPECT_STR_CONTAINS(ot_last_error(), "parameter 2");
            EXPECT_STR_CONTAINS(ot_last_error(), "refusing step 11");
            for (int i = 0; i < NP; i++) {
                EXPECT_TRUE(pb[i] == keep[i]);
                EXPECT_TRUE(buffer_equals(pb[i], &hp[i]));
                ot_tensor st = {0};
                ASSERT_OK(ot_tpu_optimizer_get_state(t, d, i, &st));
                EXPECT_TRUE(tensor_bits_equal(&st, &hs[i]));
                ot_tensor_release(&st);
            }
            ctl.fail_at = 0;
        }
        double lr = lr_at(s);
        ASSERT_OK(ot_tpu_optimizer_step(t, d, pb, gb, s + 1, lr, NULL));
        for (int i = 0; i < NP; i++) {
            ot_buffer_free(gb[i]);
            ASSERT_OK(ot_optimizer_step_reference(ref[i], &hp[i], &gt[i], &hs[i], 1, lr));
            mismatches += !buffer_equals(pb[i], &hp[i]);
            ot_tensor st = {0};
            ASSERT_OK(ot_tpu_optimizer_get_state(t, d, i, &st));
            mismatches += !tensor_bits_equal(&st, &hs[i]);
            ot_tensor_release(&st);
        }
    }
    EXPECT_INT_EQ(mismatches, 0);
    EXPECT_INT_EQ(ot_tpu_optimizer_compile_count(t), 0);
    /* bad input before the callback: nothing runs */
    int calls = ctl.calls;
    EXPECT_STATUS(ot_tpu_optimizer_step(t, d, pb, gb, 0, 0.1, NULL), OT_ERR_INVALID_ARGUMENT);
    EXPECT_INT_EQ(ctl.calls, calls);
    for (int i = 0; i < NP; i++) {
        ot_buffer_free(pb[i]);
        ot_tensor_release(&hp[i]);
        ot_tensor_release(&hs[i]);
        ot_optimizer_free(ref[i]);
    }
    ot_tpu_optimizer_free(t);
    /* host callbacks and graphs do not mix; loss scaling and half parameters need a graph */
    const ot_optimizer *groups[NP] = {NULL, adam, NULL, NULL};
    ot_tpu_optimizer_options mix = ot_tpu_optimizer_options_default();
    mix.param_optimizers = groups;
    EXPECT_STATUS(ot_tpu_optimizer_create(h, f.shape, NP, &mix, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "do not mix");
    ot_tpu_optimizer_options ls = ot_tpu_optimizer_options_default();
    ls.loss_scaling = true;
    EXPECT_STATUS(ot_tpu_optimizer_create(h, f.shape, NP, &ls, &t), OT_ERR_INVALID_ARGUMENT);
    ot_shape half[NP];
    memcpy(half, f.shape, sizeof half);
    half[1].dtype = OT_BF16;
    EXPECT_STATUS(ot_tpu_optimizer_create(h, half, NP, NULL, &t), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(t == NULL);
    ot_device_free(d);
    ot_optimizer_free(h);
    ot_optimizer_free(adam);
    free_fixture(&f);
}

/* ---- the wrapper's profile --------------------------------------------------------------------
 */

static void check_bytes(const ot_tpu_optimizer *t, const ot_shape *shapes, int n,
                        const ot_tpu_profile *p) {
    int64_t pb = 0, sb = 0;
    for (int k = 0; k < n; k++) pb += (int64_t)ot_shape_nbytes_unchecked(&shapes[k]);
    for (int q = 0; q < ot_tpu_optimizer_state_count(t); q++) {
        ot_shape s;
        ASSERT_OK(ot_tpu_optimizer_state_shape(t, q, &s));
        sb += (int64_t)ot_shape_nbytes_unchecked(&s);
    }
    EXPECT_INT_EQ(p->param_bytes, pb);
    EXPECT_INT_EQ(p->grad_bytes, pb);
    EXPECT_INT_EQ(p->state_bytes, sb);
    EXPECT_INT_EQ(p->bytes_per_step, 2 * pb + pb + 2 * sb);
}

static void test_profile(void) {
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    ot_optimizer *adam = NULL;
    ASSERT_OK(ot_optimizer_new("adam", &adam));
    ot_tpu_optimizer *t = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(adam, f.shape, NP, NULL, &t));
    ot_tpu_profile p;
    EXPECT_STATUS(ot_tpu_optimizer_profile(NULL, &p), OT_ERR_INVALID_ARGUMENT);
    ASSERT_OK(ot_tpu_optimizer_profile(t, &p));
    EXPECT_TRUE(p.compiled);
    EXPECT_INT_EQ(p.compiles, 1);
    EXPECT_TRUE(p.compile_seconds > 0 && p.compile_seconds < 120);
    EXPECT_INT_EQ(p.steps, 0);
    /* Adam over 47 f32 elements: p read+written, g read, m and v read+written: 28 B each */
    EXPECT_INT_EQ(p.bytes_per_step, 47 * 28);
    check_bytes(t, f.shape, NP, &p);
    EXPECT_INT_EQ(p.host_transfer_bytes_per_step, 0);
    /* the compiled kernels move at least that (plus step and lr) */
    printf("  adam profile: bytes_per_step %lld, executable_bytes %lld, compile %.3f s\n",
           (long long)p.bytes_per_step, (long long)p.executable_bytes, p.compile_seconds);
    EXPECT_TRUE(p.executable_bytes >= p.bytes_per_step + 16);
    EXPECT_TRUE(p.executable_bytes <= p.bytes_per_step + 256); /* fused: no intermediates */
    ot_device *d = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, d));
    ot_buffer *pb[NP], *gb[NP];
    for (int i = 0; i < NP; i++) {
        ASSERT_OK(ot_buffer_from_host(d, &f.p0[i], &pb[i]));
        ot_tensor gr;
        grad_row(&f, i, 0, &gr);
        ASSERT_OK(ot_buffer_from_host(d, &gr, &gb[i]));
    }
    for (int s = 1; s <= 5; s++) ASSERT_OK(ot_tpu_optimizer_step(t, d, pb, gb, s, 1e-3, NULL));
    EXPECT_STATUS(ot_tpu_optimizer_step(t, d, pb, gb, 6, NAN, NULL), OT_ERR_INVALID_ARGUMENT);
    ASSERT_OK(ot_tpu_optimizer_profile(t, &p));
    EXPECT_INT_EQ(p.steps, 5);
    EXPECT_INT_EQ(p.failed_steps, 1);
    EXPECT_INT_EQ(p.compiles, 1);
    EXPECT_TRUE(p.min_step_seconds > 0 && p.min_step_seconds <= p.last_step_seconds &&
                p.last_step_seconds <= p.max_step_seconds);
    EXPECT_TRUE(p.total_step_seconds >= 5 * p.min_step_seconds * 0.999999 &&
                p.total_step_seconds <= 5 * p.max_step_seconds * 1.000001);
    for (int i = 0; i < NP; i++) {
        ot_buffer_free(pb[i]);
        ot_buffer_free(gb[i]);
    }
    ot_tpu_optimizer_free(t);
    /* bf16 parameters: 2-byte parameters and gradients, f32 masters in the state */
    ot_shape half[NP];
    memcpy(half, f.shape, sizeof half);
    half[2].dtype = OT_BF16;
    ASSERT_OK(ot_tpu_optimizer_create(adam, half, NP, NULL, &t));
    ASSERT_OK(ot_tpu_optimizer_profile(t, &p));
    check_bytes(t, half, NP, &p);
    EXPECT_INT_EQ(p.state_bytes, 47 * 8 + 15 * 4); /* m, v for all, a master for the matrix */
    ot_tpu_optimizer_free(t);
    /* host callbacks: nothing compiled; what crosses between device and host per step */
    cb_ctl ctl = {0, 0};
    ot_optimizer *h = NULL;
    ASSERT_OK(ot_optimizer_new_host(&sgdm_vt, sgdm_host, &ctl, &h));
    ASSERT_OK(ot_tpu_optimizer_create(h, f.shape, NP, NULL, &t));
    ASSERT_OK(ot_tpu_optimizer_profile(t, &p));
    EXPECT_TRUE(!p.compiled);
    EXPECT_INT_EQ(p.compiles, 0);
    EXPECT_TRUE(p.compile_seconds == 0);
    EXPECT_INT_EQ(p.executable_bytes, 0);
    check_bytes(t, f.shape, NP, &p);
    EXPECT_INT_EQ(p.host_transfer_bytes_per_step, 47 * 4 * 5); /* p, g, buf down; p, buf up */
    ot_tpu_optimizer_free(t);
    ot_device_free(d);
    ot_optimizer_free(h);
    ot_optimizer_free(adam);
    free_fixture(&f);
}

/* ---- wrappers compose ---------------------------------------------------------------------------
 */

/* Steps a wrapper of o (options to) `steps` times from the fixture's start with a changing lr;
 * parameters into p[NP] and state into st (ot_tpu_optimizer_state_count of them, <= 64). */
static void run_n(const ot_optimizer *o, const ot_tpu_optimizer_options *to, int steps,
                  ot_tensor *p, ot_tensor *st, int *nstate) {
    *nstate = -1;
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    ot_tpu_optimizer *t = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(o, f.shape, NP, to, &t));
    ot_device *d = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, d));
    ot_buffer *pb[NP], *gb[NP];
    for (int i = 0; i < NP; i++) ASSERT_OK(ot_buffer_from_host(d, &f.p0[i], &pb[i]));
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < NP; i++) {
            ot_tensor gr;
            grad_row(&f, i, s, &gr);
            ASSERT_OK(ot_buffer_from_host(d, &gr, &gb[i]));
        }
        ASSERT_OK(ot_tpu_optimizer_step(t, d, pb, gb, s + 1, lr_at(s), NULL));
        for (int i = 0; i < NP; i++) ot_buffer_free(gb[i]);
    }
    for (int i = 0; i < NP; i++) {
        ASSERT_OK(ot_buffer_to_host(pb[i], &p[i]));
        ot_buffer_free(pb[i]);
    }
    int ns = ot_tpu_optimizer_state_count(t);
    for (int q = 0; q < ns; q++) ASSERT_OK(ot_tpu_optimizer_get_state(t, d, q, &st[q]));
    *nstate = ns;
    ot_tpu_optimizer_free(t);
    ot_device_free(d);
    free_fixture(&f);
}

/* a and b run 30 steps with options to: every parameter and state tensor bit for bit equal */
static void expect_same_run(const ot_optimizer *a, const ot_optimizer *b,
                            const ot_tpu_optimizer_options *to, const char *what) {
    ot_tensor pa[NP] = {0}, pb[NP] = {0}, sa[64] = {0}, sb[64] = {0};
    int na, nb;
    run_n(a, to, 30, pa, sa, &na);
    run_n(b, to, 30, pb, sb, &nb);
    EXPECT_INT_EQ(na, nb);
    int differ = 0;
    for (int i = 0; i < NP; i++) differ += !tensor_bits_equal(&pa[i], &pb[i]);
    for (int q = 0; q < na && q < nb; q++) differ += !tensor_bits_equal(&sa[q], &sb[q]);
    if (differ) fprintf(stderr, "  %s: %d tensors differ\n", what, differ);
    EXPECT_INT_EQ(differ, 0);
    for (int i = 0; i < NP; i++) {
        ot_tensor_release(&pa[i]);
        ot_tensor_release(&pb[i]);
    }
    for (int q = 0; q < 64; q++) {
        ot_tensor_release(&sa[q]);
        ot_tensor_release(&sb[q]);
    }
}

/* ot_tpu_optimizer_as_optimizer: tpu(tpu(adam)) == tpu(adam), Lookahead(tpu(nadam)) ==
 * Lookahead(nadam), tpu(tpu(host callback)) == tpu(host callback), bit for bit. */
static void test_wrappers_compose(void) {
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    ot_optimizer *adam = NULL, *v1 = NULL, *v2 = NULL;
    ASSERT_OK(ot_optimizer_new("adamw", &adam));
    ASSERT_OK(ot_optimizer_set(adam, "amsgrad", 1));
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.clip_grad_norm = 1.0;
    ot_tpu_optimizer *t1 = NULL, *t2 = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(adam, f.shape, NP, &to, &t1));
    EXPECT_STATUS(ot_tpu_optimizer_as_optimizer(NULL, &v1), OT_ERR_INVALID_ARGUMENT);
    ASSERT_OK(ot_tpu_optimizer_as_optimizer(t1, &v1));
    EXPECT_STR_EQ(ot_optimizer_name(v1), "tpu_optimizer");
    EXPECT_INT_EQ(ot_optimizer_state_count(v1), 3);
    EXPECT_STR_EQ(ot_optimizer_state_name(v1, 2), "max_exp_avg_sq");
    ot_tpu_optimizer_free(t1);                                     /* the view keeps its own copy */
    ASSERT_OK(ot_tpu_optimizer_create(v1, f.shape, NP, &to, &t2)); /* tpu(tpu(adamw)) */
    ASSERT_OK(ot_tpu_optimizer_as_optimizer(t2, &v2));             /* and one level more */
    ot_tpu_optimizer_free(t2);
    expect_same_run(adam, v1, &to, "tpu(tpu(adamw))");
    expect_same_run(adam, v2, &to, "tpu(tpu(tpu(adamw)))");
    /* masks reach through the view into the optimizer it shows */
    static const bool mask[NP] = {false, false, true, true};
    ot_tpu_optimizer_options tm = to;
    tm.weight_decay_mask = mask;
    expect_same_run(adam, v2, &tm, "masked tpu(tpu(tpu(adamw)))");
    /* Lookahead(tpu(nadam)) == Lookahead(nadam) */
    ot_optimizer *nadam = NULL, *vn = NULL, *la = NULL, *lav = NULL;
    ASSERT_OK(ot_optimizer_new("nadam", &nadam));
    ASSERT_OK(ot_tpu_optimizer_create(nadam, f.shape, NP, NULL, &t1));
    ASSERT_OK(ot_tpu_optimizer_as_optimizer(t1, &vn));
    ot_tpu_optimizer_free(t1);
    ASSERT_OK(ot_optimizer_new_lookahead(nadam, 3, 0.5, &la));
    ASSERT_OK(ot_optimizer_new_lookahead(vn, 3, 0.5, &lav));
    expect_same_run(la, lav, NULL, "Lookahead(tpu(nadam))");
    /* and through the reference evaluator: one step of the view == one step of nadam */
    ot_tensor p1, p2, g, s1[3], s2[3];
    ASSERT_OK(ot_tensor_alloc(&p1, &f.shape[2]));
    ASSERT_OK(ot_tensor_alloc(&p2, &f.shape[2]));
    memcpy(p1.data, f.p0[2].data, p1.nbytes);
    memcpy(p2.data, f.p0[2].data, p2.nbytes);
    grad_row(&f, 2, 0, &g);
    for (int j = 0; j < 3; j++) {
        ASSERT_OK(ot_optimizer_state_alloc(nadam, j, &f.shape[2], &s1[j]));
        ASSERT_OK(ot_optimizer_state_alloc(vn, j, &f.shape[2], &s2[j]));
    }
    ASSERT_OK(ot_optimizer_step_reference(nadam, &p1, &g, s1, 3, 0.01));
    ASSERT_OK(ot_optimizer_step_reference(vn, &p2, &g, s2, 3, 0.01));
    EXPECT_TRUE(tensor_bits_equal(&p1, &p2));
    for (int j = 0; j < 3; j++) {
        EXPECT_TRUE(tensor_bits_equal(&s1[j], &s2[j]));
        ot_tensor_release(&s1[j]);
        ot_tensor_release(&s2[j]);
    }
    ot_tensor_release(&p1);
    ot_tensor_release(&p2);
    /* a host-callback wrapper's view is a host callback too */
    cb_ctl ctl = {0, 0};
    ot_optimizer *h = NULL, *vh = NULL, *w = NULL;
    ASSERT_OK(ot_optimizer_new_host(&sgdm_vt, sgdm_host, &ctl, &h));
    ASSERT_OK(ot_tpu_optimizer_create(h, f.shape, NP, &to, &t1));
    ASSERT_OK(ot_tpu_optimizer_as_optimizer(t1, &vh));
    ot_tpu_optimizer_free(t1);
    EXPECT_TRUE(ot_optimizer_is_host(vh));
    EXPECT_STATUS(ot_optimizer_new_lookahead(vh, 3, 0.5, &w), OT_ERR_INVALID_ARGUMENT);
    expect_same_run(h, vh, &to, "tpu(tpu(host callback))");
    /* the host path clips as the compiled update does, in both conventions: the C SGD callback
     * equals the built-in sgd graph */
    ot_optimizer *sgd = NULL;
    ASSERT_OK(ot_optimizer_new("sgd", &sgd));
    ASSERT_OK(ot_optimizer_set(sgd, "momentum", 0.9));
    expect_same_run(sgd, h, &to, "sgd graph vs host callback, torch clipping");
    ot_tpu_optimizer_options tox = to;
    tox.clip_norm_optax = true;
    tox.clip_grad_value = 0.4;
    expect_same_run(sgd, h, &tox, "sgd graph vs host callback, optax clipping");
    ot_optimizer_free(sgd);
    ot_optimizer_free(h);
    ot_optimizer_free(vh);
    ot_optimizer_free(nadam);
    ot_optimizer_free(vn);
    ot_optimizer_free(la);
    ot_optimizer_free(lav);
    ot_optimizer_free(adam);
    ot_optimizer_free(v1);
    ot_optimizer_free(v2);
    free_fixture(&f);
}

/* A host-callback step failing at any allocation (downloads, uploads, bookkeeping) leaves the
 * caller's handles, the parameters and the state as they were, and leaks nothing. */
static void test_host_step_alloc_failures(void) {
    fixture f;
    ASSERT_TRUE(load_fixture(&f));
    cb_ctl ctl = {0, 0};
    ot_optimizer *h = NULL;
    ASSERT_OK(ot_optimizer_new_host(&sgdm_vt, sgdm_host, &ctl, &h));
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.clip_grad_norm = 1.0;
    ot_tpu_optimizer *t = NULL;
    ASSERT_OK(ot_tpu_optimizer_create(h, f.shape, NP, &to, &t));
    ot_device *d = NULL;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ASSERT_OK(ot_tpu_optimizer_add_replica(t, d));
    ot_buffer *pb[NP], *gb[NP];
    for (int i = 0; i < NP; i++) {
        ASSERT_OK(ot_buffer_from_host(d, &f.p0[i], &pb[i]));
        ot_tensor gr;
        grad_row(&f, i, 0, &gr);
        ASSERT_OK(ot_buffer_from_host(d, &gr, &gb[i]));
    }
    ASSERT_OK(ot_tpu_optimizer_step(t, d, pb, gb, 1, 0.01, NULL));
    ot_tensor before[NP], sbefore[NP];
    for (int i = 0; i < NP; i++) {
        ASSERT_OK(ot_buffer_to_host(pb[i], &before[i]));
        ASSERT_OK(ot_tpu_optimizer_get_state(t, d, i, &sbefore[i]));
    }
    bool done = false;
    int failures = 0;
    for (int n = 1; n < 2000 && !done; n++) {
        int64_t live = ot_alloc_live();
        ot_buffer *keep[NP];
        memcpy(keep, pb, sizeof keep);
        ot_alloc_fail_after(n);
        ot_status s = ot_tpu_optimizer_step(t, d, pb, gb, 2, 0.01, NULL);
        ot_alloc_fail_after(0);
        if (s == OT_OK) {
            done = true;
            break;
        }
        failures++;
        EXPECT_INT_EQ(s, OT_ERR_OUT_OF_MEMORY);
        EXPECT_INT_EQ(ot_alloc_live(), live);
        for (int i = 0; i < NP; i++) {
            EXPECT_TRUE(pb[i] == keep[i]);
            EXPECT_TRUE(buffer_equals(pb[i], &before[i]));
            ot_tensor st = {0};
            ASSERT_OK(ot_tpu_optimizer_get_state(t, d, i, &st));
            EXPECT_TRUE(tensor_bits_equal(&st, &sbefore[i]));
            ot_tensor_release(&st);
        }
    }
    EXPECT_TRUE(done);
    EXPECT_TRUE(failures > 10);
    ot_tpu_profile p;
    ASSERT_OK(ot_tpu_optimizer_profile(t, &p));
    EXPECT_INT_EQ(p.steps, 2);
    EXPECT_INT_EQ(p.failed_steps, failures);
    for (int i = 0; i < NP; i++) {
        ot_tensor_release(&before[i]);
        ot_tensor_release(&sbefore[i]);
        ot_buffer_free(pb[i]);
        ot_buffer_free(gb[i]);
    }
    ot_tpu_optimizer_free(t);
    ot_device_free(d);
    ot_optimizer_free(h);
    free_fixture(&f);
}

OT_TEST_MAIN(OT_TEST(test_wrappers_compose), OT_TEST(test_profile), OT_TEST(test_host_callback),
             OT_TEST(test_names_and_executable), OT_TEST(test_trajectory_adam),
             OT_TEST(test_trajectory_others), OT_TEST(test_trajectory_no_donation),
             OT_TEST(test_clipping), OT_TEST(test_torch_fixtures), OT_TEST(test_masks),
             OT_TEST(test_mixed_precision), OT_TEST(test_donation),
             OT_TEST(test_two_replicas_threads), OT_TEST(test_state_roundtrip),
             OT_TEST(test_errors_change_nothing), OT_TEST(test_alloc_failures),
             OT_TEST(test_host_step_alloc_failures))
