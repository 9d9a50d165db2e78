/* Learning-rate schedules against the 18 torch / optax schedule fixtures (tests/data/optim/
 * schedules, 200 steps each, built from each fixture's definition in index.json), bad input. */
#include "ot_test.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "optitpu/optim.h"

#define OPT_DIR OT_SOURCE_DIR "/tests/data/optim/"

static double num(json_t *o, const char *k) {
    return json_number_value(json_object_get(o, k));
}
static int64_t inum(json_t *o, const char *k) {
    return (int64_t)llround(json_number_value(json_object_get(o, k)));
}

/* A schedule from a torch scheduler definition (the base lr is def.base_lr). */
static ot_status from_torch(json_t *d, double base, ot_lr_schedule **out) {
    const char *cls = json_string_value(json_object_get(d, "class"));
    if (strcmp(cls, "StepLR") == 0)
        return ot_lr_schedule_step(base, inum(d, "step_size"), num(d, "gamma"), out);
    if (strcmp(cls, "MultiStepLR") == 0) {
        json_t *ms = json_object_get(d, "milestones");
        int64_t b[16];
        double sc[16];
        int n = (int)json_array_size(ms);
        for (int i = 0; i < n; i++) {
            b[i] = (int64_t)json_integer_value(json_array_get(ms, (size_t)i));
            sc[i] = num(d, "gamma");
        }
        return ot_lr_schedule_piecewise_constant(base, b, sc, n, out);
    }
    if (strcmp(cls, "ExponentialLR") == 0)
        return ot_lr_schedule_exponential(base, 1, num(d, "gamma"), 0, false, NAN, out);
    if (strcmp(cls, "LinearLR") == 0)
        return ot_lr_schedule_linear(base * num(d, "start_factor"), base * num(d, "end_factor"),
                                     inum(d, "total_iters"), 0, out);
    if (strcmp(cls, "CosineAnnealingLR") == 0)
        return ot_lr_schedule_cosine(base, num(d, "eta_min"), inum(d, "T_max"), 1.0, out);
    if (strcmp(cls, "CosineAnnealingWarmRestarts") == 0)
        return ot_lr_schedule_cosine_restarts(base, num(d, "eta_min"), inum(d, "T_0"),
                                              inum(d, "T_mult"), out);
    if (strcmp(cls, "OneCycleLR") == 0)
        return ot_lr_schedule_onecycle(inum(d, "total_steps"), num(d, "max_lr"),
                                       num(d, "pct_start"), num(d, "div_factor"),
                                       num(d, "final_div_factor"), true, out);
    if (strcmp(cls, "PolynomialLR") == 0)
        return ot_lr_schedule_polynomial(base, 0.0, num(d, "power"), inum(d, "total_iters"), 0,
                                         out);
    if (strcmp(cls, "SequentialLR") == 0) {
        json_t *ss = json_object_get(d, "schedulers"), *ms = json_object_get(d, "milestones");
        ot_lr_schedule *kids[8] = {0};
        int64_t b[8];
        int n = (int)json_array_size(ss);
        for (int i = 0; i < n; i++) {
            ot_status s = from_torch(json_array_get(ss, (size_t)i), base, &kids[i]);
            if (s != OT_OK) {
                for (int j = 0; j < i; j++) ot_lr_schedule_free(kids[j]);
                return s;
            }
            if (i + 1 < n) b[i] = (int64_t)json_integer_value(json_array_get(ms, (size_t)i));
        }
        return ot_lr_schedule_join(kids, n, b, out);
    }
    return ot_error(OT_ERR_NOT_FOUND, "no torch scheduler %s", cls);
}

static ot_status from_optax(json_t *d, ot_lr_schedule **out) {
    const char *fn = json_string_value(json_object_get(d, "function"));
    if (strcmp(fn, "optax.constant_schedule") == 0)
        return ot_lr_schedule_constant(num(d, "value"), out);
    if (strcmp(fn, "optax.piecewise_constant_schedule") == 0) {
        json_t *bs = json_object_get(d, "boundaries_and_scales");
        int64_t b[16];
        double sc[16];
        int n = 0;
        const char *k;
        json_t *v;
        json_object_foreach(bs, k, v) {
            b[n] = atoll(k);
            sc[n++] = json_number_value(v);
        }
        return ot_lr_schedule_piecewise_constant(num(d, "init_value"), b, sc, n, out);
    }
    if (strcmp(fn, "optax.exponential_decay") == 0) {
        json_t *ev = json_object_get(d, "end_value");
        return ot_lr_schedule_exponential(num(d, "init_value"), inum(d, "transition_steps"),
                                          num(d, "decay_rate"), inum(d, "transition_begin"),
                                          json_is_true(json_object_get(d, "staircase")),
                                          ev ? json_number_value(ev) : NAN, out);
    }
    if (strcmp(fn, "optax.linear_schedule") == 0)
        return ot_lr_schedule_linear(num(d, "init_value"), num(d, "end_value"),
                                     inum(d, "transition_steps"), inum(d, "transition_begin"), out);
    if (strcmp(fn, "optax.polynomial_schedule") == 0)
        return ot_lr_schedule_polynomial(num(d, "init_value"), num(d, "end_value"), num(d, "power"),
                                         inum(d, "transition_steps"), inum(d, "transition_begin"),
                                         out);
    if (strcmp(fn, "optax.warmup_cosine_decay_schedule") == 0)
        return ot_lr_schedule_warmup_cosine(num(d, "init_value"), num(d, "peak_value"),
                                            inum(d, "warmup_steps"), inum(d, "decay_steps"),
                                            num(d, "end_value"), 1.0, out);
    if (strcmp(fn, "optax.sgdr_schedule") == 0) {
        json_t *ks = json_object_get(d, "cosine_kwargs");
        double in[8], pk[8], en[8];
        int64_t wu[8], ds[8];
        int n = (int)json_array_size(ks);
        for (int i = 0; i < n; i++) {
            json_t *k = json_array_get(ks, (size_t)i);
            in[i] = num(k, "init_value");
            pk[i] = num(k, "peak_value");
            en[i] = num(k, "end_value");
            wu[i] = inum(k, "warmup_steps");
            ds[i] = inum(k, "decay_steps");
        }
        return ot_lr_schedule_sgdr(in, pk, wu, ds, en, n, out);
    }
    if (strcmp(fn, "optax.cosine_onecycle_schedule") == 0)
        return ot_lr_schedule_onecycle(inum(d, "transition_steps"), num(d, "peak_value"),
                                       num(d, "pct_start"), num(d, "div_factor"),
                                       num(d, "final_div_factor"), false, out);
    return ot_error(OT_ERR_NOT_FOUND, "no optax schedule %s", fn);
}

static void test_fixture_schedules(void) {
    json_error_t je;
    json_t *root = json_load_file(OPT_DIR "index.json", 0, &je);
    ASSERT_TRUE(root != NULL);
    size_t idx;
    json_t *c;
    int run = 0, exact = 0;
    json_array_foreach(json_object_get(root, "schedules"), idx, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *d = json_object_get(c, "definition");
        bool torch = strncmp(name, "torch_", 6) == 0;
        ot_lr_schedule *s = NULL;
        ot_status st = torch ? from_torch(d, num(d, "base_lr"), &s) : from_optax(d, &s);
        EXPECT_OK(st);
        if (st != OT_OK) continue;
        char path[512];
        snprintf(path, sizeof path, OPT_DIR "%s",
                 json_string_value(json_object_get(json_object_get(c, "lr"), "file")));
        ot_tensor want = {0};
        ASSERT_OK(ot_npy_read_file(path, &want));
        int64_t n = ot_shape_numel_unchecked(&want.shape);
        double max_rel = 0;
        int ulps = 0;
        for (int64_t t = 0; t < n; t++) {
            double w = ((double *)want.data)[t], g = ot_lr_schedule_lr(s, t);
            double rel = w == 0 ? fabs(g) : fabs(g - w) / fabs(w);
            max_rel = fmax(max_rel, rel);
            if (g != w) {
                int64_t a, b;
                memcpy(&a, &g, 8);
                memcpy(&b, &w, 8);
                int64_t u = a > b ? a - b : b - a;
                if (u > ulps) ulps = (int)(u > 1000000 ? 1000000 : u);
            }
        }
        /* closed forms: exact up to a few ulp of libm's cos/pow against numpy/XLA; torch's
         * chainable schedulers accumulate a rounding per step */
        double bound = 1e-14;
        EXPECT_TRUE(max_rel <= bound);
        printf("  %-36s %-16s max rel %.3g (%d ulp)%s\n", name, ot_lr_schedule_kind(s), max_rel,
               ulps, max_rel <= bound ? "" : "  FAIL");
        exact += max_rel == 0;
        run++;
        ot_tensor_release(&want);
        ot_lr_schedule_free(s);
    }
    EXPECT_INT_EQ(run, 18);
    printf("  %d of %d schedules bit-identical\n", exact, run);
    json_decref(root);
}

static void test_schedule_bad_input(void) {
    ot_lr_schedule *s = NULL;
    EXPECT_STATUS(ot_lr_schedule_constant(NAN, &s), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(s == NULL);
    EXPECT_STATUS(ot_lr_schedule_step(0.1, 0, 0.5, &s), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_lr_schedule_cosine(0.1, 0, 0, 1, &s), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_lr_schedule_warmup_cosine(0, 0.1, 10, 10, 0, 1, &s), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_lr_schedule_onecycle(100, 0.1, 1.5, 25, 1e4, false, &s),
                  OT_ERR_INVALID_ARGUMENT);
    int64_t b[2] = {10, 5};
    double sc[2] = {0.5, 0.5};
    EXPECT_STATUS(ot_lr_schedule_piecewise_constant(0.1, b, sc, 2, &s), OT_ERR_INVALID_ARGUMENT);
    /* a join that fails frees its children (leak-checked under ASan) */
    ot_lr_schedule *kids[2] = {NULL, NULL};
    ASSERT_OK(ot_lr_schedule_constant(1, &kids[0]));
    EXPECT_STATUS(ot_lr_schedule_join(kids, 2, b, &s), OT_ERR_INVALID_ARGUMENT);
    /* values at the edges */
    ASSERT_OK(ot_lr_schedule_warmup_cosine(0.0, 1.0, 10, 110, 0.0, 1.0, &s));
    EXPECT_NEAR(ot_lr_schedule_lr(s, -5), 0.0, 0);
    EXPECT_NEAR(ot_lr_schedule_lr(s, 5), 0.5, 1e-15);
    EXPECT_NEAR(ot_lr_schedule_lr(s, 10), 1.0, 0);
    EXPECT_NEAR(ot_lr_schedule_lr(s, 60), 0.5, 1e-15);
    EXPECT_NEAR(ot_lr_schedule_lr(s, 1000000), 0.0, 0);
    EXPECT_STR_EQ(ot_lr_schedule_kind(s), "warmup_cosine");
    ot_lr_schedule_free(s);
    ASSERT_OK(ot_lr_schedule_cosine_restarts(1.0, 0.0, 10, 1, &s));
    EXPECT_NEAR(ot_lr_schedule_lr(s, 10000000005LL), ot_lr_schedule_lr(s, 5),
                0); /* t_mult 1: O(1) */
    ot_lr_schedule_free(s);
    ot_lr_schedule_free(NULL);
}

OT_TEST_MAIN(OT_TEST(test_fixture_schedules), OT_TEST(test_schedule_bad_input))
