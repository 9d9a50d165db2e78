/* optim: every built-in update graph run for 100 steps through the reference evaluator on the
 * fixtures' initial parameters and gradient sequence (tests/data/optim), compared every step with
 * torch.optim's trajectory within the case's suggested_tolerance (4x the f32-vs-f64 deviation of
 * torch itself; floors rtol 1e-6, atol 1e-7); bad input. */
#include "ot_test.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "optitpu/exec.h"
#include "optitpu/optim.h"

#define OPT_DIR OT_SOURCE_DIR "/tests/data/optim/"
#define NP      4
#define STEPS   100

static const char *const pnames[NP] = {"scalar", "vector", "matrix", "tensor3"};

static bool load(const char *rel, ot_tensor *t) {
    char path[512];
    snprintf(path, sizeof path, OPT_DIR "%s", rel);
    return ot_npy_read_file(path, t) == OT_OK;
}

/* row t of a [STEPS, ...] tensor as a borrowed tensor of the parameter's shape */
static void row(const ot_tensor *all, const ot_shape *s, int t, ot_tensor *out) {
    size_t nb = ot_shape_nbytes_unchecked(s);
    ot_tensor_borrow(out, s, (char *)all->data + (size_t)t * nb);
}

/* The fixture file of optax state slot j for parameter pname: the case's "state.<path>" entry
 * whose flattened optax path ends in <leaf>_<pname>, leaf the optax name of the slot (exactly
 * one must match). NULL when none or several do. */
static const char *optax_state_file(json_t *c, const ot_optimizer *o, int j, const char *pname) {
    const char *sn = ot_optimizer_state_name(o, j);
    const char *opt = ot_optimizer_name(o);
    static const char *const map[][2] = {
        {"exp_avg", "mu"},   {"exp_avg_sq", "nu"},         {"max_exp_avg_sq", "nu_max"},
        {"grad_avg", "mu"},  {"momentum_buffer", "trace"}, {"sum", "sum_of_squares"},
        {"acc_delta", "e_x"}};
    const char *leaf = sn;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(sn, map[i][0]) == 0) leaf = map[i][1];
    if (strcmp(sn, "square_avg") == 0) leaf = strcmp(opt, "adadelta") == 0 ? "e_g" : "nu";
    char want[128];
    snprintf(want, sizeof want, "%s_%s", leaf, pname);
    size_t wl = strlen(want);
    const char *found = NULL;
    int hits = 0;
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(c, "files"), key, v) {
        if (strncmp(key, "state.", 6) != 0) continue;
        const char *path = key + 6;
        size_t pl = strlen(path);
        if (strcmp(path, want) == 0 ||
            (pl > wl && path[pl - wl - 1] == '_' && strcmp(path + pl - wl, want) == 0)) {
            found = json_string_value(json_object_get(v, "file"));
            hits++;
        }
    }
    return hits == 1 ? found : NULL;
}

static int cases_run;

static void run_case(json_t *c, const char *opt) {
    const char *name = json_string_value(json_object_get(c, "name"));
    bool optax = strcmp(json_string_value(json_object_get(c, "framework")), "optax") == 0;
    ot_optimizer *o = NULL;
    ASSERT_OK(ot_optimizer_new(opt, &o));
    double flag;
    if (optax && ot_optimizer_get(o, "optax", &flag) == OT_OK)
        EXPECT_OK(ot_optimizer_set(o, "optax", 1)); /* optax's expression order */
    if (strcmp(json_string_value(json_object_get(c, "optimizer")), "amsgrad") == 0)
        EXPECT_OK(ot_optimizer_set(o, "amsgrad", 1));
    json_t *hp = json_object_get(c, "hyperparams");
    const char *k;
    json_t *v;
    bool wd_mask = false, tr_mask = false;
    json_object_foreach(hp, k, v) {
        if (json_is_string(v)) { /* "MASK": decay / trust ratio only on matrix and tensor3 */
            EXPECT_STR_EQ(json_string_value(v), "MASK");
            if (strcmp(k, "trust_ratio_mask") == 0)
                tr_mask = true;
            else
                wd_mask = true;
        } else if (json_is_null(v)) { /* optax's "none" (adafactor momentum) */
        } else if (strcmp(k, "eps") == 0 && json_is_array(v)) { /* torch Adafactor (eps1, eps2) */
            json_t *e1 = json_array_get(v, 0);
            EXPECT_OK(ot_optimizer_set(o, "eps1", json_is_null(e1) ? 0 : json_number_value(e1)));
            EXPECT_OK(ot_optimizer_set(o, "eps2", json_number_value(json_array_get(v, 1))));
        } else if (strcmp(k, "betas") == 0) {
            EXPECT_OK(ot_optimizer_set(o, "beta1", json_real_value(json_array_get(v, 0))));
            EXPECT_OK(ot_optimizer_set(o, "beta2", json_real_value(json_array_get(v, 1))));
        } else {
            /* optax names: learning_rate, b1, b2 */
            const char *tk = !optax                            ? k
                             : strcmp(k, "learning_rate") == 0 ? "lr"
                             : strcmp(k, "b1") == 0            ? "beta1"
                             : strcmp(k, "b2") == 0            ? "beta2"
                             : strcmp(k, "decay") == 0         ? "alpha" /* rmsprop */
                                                               : k;
            double x = json_is_boolean(v) ? (json_is_true(v) ? 1.0 : 0.0) : json_number_value(v);
            EXPECT_OK(ot_optimizer_set(o, tk, x));
        }
    }
    json_t *adw = json_object_get(c, "add_decayed_weights"); /* optax: g + wd p first */
    if (adw) EXPECT_OK(ot_optimizer_set(o, "weight_decay", json_number_value(adw)));
    json_t *la = json_object_get(c, "lookahead");
    if (la) { /* optax.lookahead around the optimizer */
        ot_optimizer *w = NULL;
        ASSERT_OK(ot_optimizer_new_lookahead(
            o, (int64_t)json_integer_value(json_object_get(la, "sync_period")),
            json_number_value(json_object_get(la, "slow_step_size")), &w));
        ot_optimizer_free(o);
        o = w;
    }
    /* a mask is a parameter group: scalar and vector get weight_decay 0 (and no trust ratio) */
    ot_optimizer *om = NULL;
    ASSERT_OK(ot_optimizer_clone(o, &om));
    if (wd_mask) EXPECT_OK(ot_optimizer_set(om, "weight_decay", 0));
    if (tr_mask) EXPECT_OK(ot_optimizer_set(om, "trust_ratio", 0));
    json_t *tol = json_object_get(c, "suggested_tolerance");
    double rtol = json_number_value(json_object_get(tol, "rtol"));
    double atol = json_number_value(json_object_get(tol, "atol"));
    rtol = fmin(rtol, 2.5e-4); /* some suggested bounds (optax's f32-vs-f64 drift) are loose */
    json_t *clip = json_object_get(c, "clip_global_norm");
    double max_norm = clip ? json_number_value(json_object_get(clip, "max_norm")) : 0;
    json_t *cv = json_object_get(c, "clip_value");
    float clipv = cv ? (float)json_number_value(json_object_get(cv, "max_abs")) : 0.0f;
    char rel[256];
    snprintf(rel, sizeof rel, "%s/lr.npy", name);
    ot_tensor lr = {0};
    ASSERT_TRUE(load(rel, &lr));

    int ns = ot_optimizer_state_count(o);
    ot_tensor p[NP] = {0}, g[NP] = {0}, want[NP] = {0}, st[NP][OT_OPTIM_MAX_STATE];
    ot_tensor swant[NP][OT_OPTIM_MAX_STATE];
    memset(st, 0, sizeof st);
    memset(swant, 0, sizeof swant);
    ot_module *m[NP] = {0};
    bool ok = true;
    for (int i = 0; i < NP && ok; i++) {
        snprintf(rel, sizeof rel, "inputs/param0_%s.npy", pnames[i]);
        ok = load(rel, &p[i]);
        snprintf(rel, sizeof rel, "inputs/grad_%s.npy", pnames[i]);
        ok = ok && load(rel, &g[i]);
        snprintf(rel, sizeof rel, "%s/param_%s.npy", name, pnames[i]);
        ok = ok && load(rel, &want[i]);
        for (int j = 0; ok && j < ns; j++) {
            ok = ot_optimizer_state_alloc(o, j, &p[i].shape, &st[i][j]) == OT_OK;
            if (optax) {
                const char *f = optax_state_file(c, o, j, pnames[i]);
                snprintf(rel, sizeof rel, "%s/%s", name, f ? f : "(no unique state file)");
            } else {
                snprintf(rel, sizeof rel, "%s/state_%s_%s.npy", name, ot_optimizer_state_name(o, j),
                         pnames[i]);
            }
            /* torch's Adafactor keeps no tensor for the slots a shape does not use (here [1]
             * placeholders): nothing to compare */
            bool placeholder = st[i][j].shape.rank == 1 && st[i][j].shape.dims[0] == 1 &&
                               !ot_shape_equal(&st[i][j].shape, &p[i].shape);
            if (!load(rel, &swant[i][j]) && !placeholder) ok = false;
        }
        ok = ok && ot_optimizer_build_module(i < 2 ? om : o, &p[i].shape, &m[i]) == OT_OK;
    }
    EXPECT_TRUE(ok);
    double max_rel = 0, max_abs = 0;
    int bad = 0;
    ot_shape sc;
    ot_shape_make(&sc, OT_F64, 0, NULL);
    for (int t = 0; ok && t < STEPS && !bad; t++) {
        ot_tensor gt[NP];
        float gbuf[NP][64];
        double coef = 1.0;
        float cbuf[NP][64]; /* clipped by value first (clamp to [-v, v]) */
        ot_tensor graw[NP];
        for (int i = 0; i < NP; i++) {
            row(&g[i], &p[i].shape, t, &graw[i]);
            if (clipv <= 0) continue;
            for (int64_t e = 0; e < ot_shape_numel_unchecked(&p[i].shape); e++)
                cbuf[i][e] = fminf(fmaxf(((float *)graw[i].data)[e], -clipv), clipv);
            ot_tensor_borrow(&graw[i], &p[i].shape, cbuf[i]);
        }
        if (max_norm > 0) { /* torch clip_grad_norm_: coef = min(1, max / (norm + 1e-6)) */
            double ss = 0;
            for (int i = 0; i < NP; i++) {
                ot_tensor r = graw[i];
                for (int64_t e = 0; e < ot_shape_numel_unchecked(&p[i].shape); e++)
                    ss += (double)((float *)r.data)[e] * ((float *)r.data)[e];
            }
            if (!optax)
                coef = fmin(1.0, max_norm / (sqrt(ss) + 1e-6));
            else /* optax clip_by_global_norm: (g / norm) * max_norm when norm > max_norm, f32 */
                coef = sqrt(ss) > max_norm ? -(double)(float)sqrt(ss) : 1.0;
        }
        for (int i = 0; i < NP; i++) {
            ot_tensor r = graw[i];
            int64_t n = ot_shape_numel_unchecked(&p[i].shape);
            for (int64_t e = 0; e < n; e++) {
                float x = ((float *)r.data)[e];
                if (coef < 0) /* optax: the norm rounded to f32, divide then scale */
                    gbuf[i][e] = (x / (float)-coef) * (float)max_norm;
                else
                    gbuf[i][e] = max_norm > 0 ? x * (float)coef : x;
            }
            ot_tensor_borrow(&gt[i], &p[i].shape, gbuf[i]);
        }
        double stepv = t + 1, lrv = ((double *)lr.data)[t];
        for (int i = 0; i < NP && !bad; i++) {
            ot_tensor args[4 + OT_OPTIM_MAX_STATE];
            args[0] = p[i];
            args[1] = gt[i];
            for (int j = 0; j < ns; j++) args[2 + j] = st[i][j];
            ot_tensor_borrow(&args[2 + ns], &sc, &stepv);
            ot_tensor_borrow(&args[3 + ns], &sc, &lrv);
            ot_value r = ot_value_empty();
            if (ot_evaluate_tensors(m[i], args, 4 + ns, NULL, &r) != OT_OK) {
                printf("  %s: %s\n", name, ot_last_error());
                bad = 1;
                break;
            }
            memcpy(p[i].data, ot_value_leaf(&r, 0)->array.data, p[i].nbytes);
            for (int j = 0; j < ns; j++)
                memcpy(st[i][j].data, ot_value_leaf(&r, 1 + j)->array.data, st[i][j].nbytes);
            ot_value_release(&r);
            for (int j = -1; j < ns; j++) {
                if (j >= 0 && !swant[i][j].data) continue; /* a placeholder slot */
                const ot_tensor *got = j < 0 ? &p[i] : &st[i][j];
                ot_tensor w;
                row(j < 0 ? &want[i] : &swant[i][j], &got->shape, t, &w);
                for (int64_t e = 0; e < ot_shape_numel_unchecked(&got->shape); e++) {
                    double a = ((float *)got->data)[e], b = ((float *)w.data)[e];
                    double d = fabs(a - b);
                    max_abs = fmax(max_abs, d);
                    if (fabs(b) > 1e-3) max_rel = fmax(max_rel, d / fabs(b));
                    if (!(d <= atol + rtol * fabs(b))) {
                        printf("  %s step %d %s %s[%lld]: %.9g vs fixture %.9g\n", name, t,
                               pnames[i], j < 0 ? "param" : ot_optimizer_state_name(o, j),
                               (long long)e, a, b);
                        bad = 1;
                        break;
                    }
                }
            }
        }
    }
    EXPECT_TRUE(!bad);
    if (ok && !bad) cases_run++;
    printf("  %-34s rtol %.2g atol %.2g: max rel %.3g max abs %.3g %s\n", name, rtol, atol, max_rel,
           max_abs, bad ? "FAIL" : "ok");
    for (int i = 0; i < NP; i++) {
        ot_module_free(m[i]);
        ot_tensor_release(&p[i]);
        ot_tensor_release(&g[i]);
        ot_tensor_release(&want[i]);
        for (int j = 0; j < OT_OPTIM_MAX_STATE; j++) {
            ot_tensor_release(&st[i][j]);
            ot_tensor_release(&swant[i][j]);
        }
    }
    ot_tensor_release(&lr);
    ot_optimizer_free(o);
    ot_optimizer_free(om);
}

static void test_torch_trajectories(void) {
    json_error_t je;
    json_t *root = json_load_file(OPT_DIR "index.json", 0, &je);
    ASSERT_TRUE(root != NULL);
    size_t idx;
    json_t *c;
    cases_run = 0;
    json_array_foreach(json_object_get(root, "cases"), idx, c) {
        const char *fw = json_string_value(json_object_get(c, "framework"));
        const char *opt = json_string_value(json_object_get(c, "optimizer"));
        ot_optimizer *probe = NULL;
        /* Every single-precision case: torch's with the torch-form built-ins, optax's with the
         * "optax" convention where the built-in has one (adam, adamw, amsgrad, rmsprop, adagrad,
         * radam, nadam), with the optax-formula built-ins (lion, lamb, lars, adafactor), and
         * with the torch form where both libraries compute the same expressions (sgd with
         * add_decayed_weights, adadelta). torch's Adafactor is the built-in adafactor_torch. */
        if (strcmp(fw, "torch") == 0 && strcmp(opt, "adafactor") == 0) opt = "adafactor_torch";
        if (strcmp(opt, "amsgrad") == 0) opt = "adam"; /* optax.amsgrad: adam with amsgrad 1 */
        if ((strcmp(fw, "torch") == 0 &&
             (strcmp(opt, "lion") == 0 || strcmp(opt, "lamb") == 0 || strcmp(opt, "lars") == 0)) ||
            json_object_get(c, "param_groups") || json_object_get(c, "mixed_precision") ||
            ot_optimizer_new(opt, &probe) != OT_OK)
            continue;
        ot_optimizer_free(probe);
        run_case(c, opt);
    }
    ot_clear_error();
    EXPECT_INT_EQ(cases_run, 35); /* 17 torch + 18 optax */
    json_decref(root);
}

static void test_bad_input(void) {
    ot_optimizer *o = NULL;
    EXPECT_STATUS(ot_optimizer_new("adamax_nope", &o), OT_ERR_NOT_FOUND);
    EXPECT_TRUE(o == NULL);
    ASSERT_OK(ot_optimizer_new("adam", &o));
    EXPECT_STATUS(ot_optimizer_set(o, "betas", 0.9), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "no hyper-parameter 'betas'");
    EXPECT_STATUS(ot_optimizer_set(o, "lr", NAN), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "NaN");
    EXPECT_STATUS(ot_optimizer_set(o, "beta2", 1.5), OT_ERR_INVALID_ARGUMENT);
    double b2 = 0;
    EXPECT_OK(ot_optimizer_get(o, "beta2", &b2));
    EXPECT_NEAR(b2, 0.999, 0); /* refused value not kept */
    EXPECT_STATUS(ot_optimizer_get(o, "momentum", &b2), OT_ERR_NOT_FOUND);
    EXPECT_STATUS(ot_optimizer_set(o, "amsgrad", 0.5), OT_ERR_INVALID_ARGUMENT);

    ot_shape s3, s4, si;
    ot_shape_make(&s3, OT_F32, 1, (int64_t[]){3});
    ot_shape_make(&s4, OT_F32, 1, (int64_t[]){4});
    ot_shape_make(&si, OT_S32, 1, (int64_t[]){3});
    ot_tensor p, g, gi, st[2];
    ASSERT_OK(ot_tensor_alloc(&p, &s3));
    ASSERT_OK(ot_tensor_alloc(&g, &s4));
    ASSERT_OK(ot_tensor_alloc(&gi, &si));
    ASSERT_OK(ot_optimizer_state_alloc(o, 0, &s3, &st[0]));
    ASSERT_OK(ot_optimizer_state_alloc(o, 1, &s3, &st[1]));
    for (int i = 0; i < 3; i++) ((float *)p.data)[i] = 1.0f + (float)i;
    EXPECT_STATUS(ot_optimizer_step_reference(o, &p, &g, st, 2, 1e-3), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STATUS(ot_optimizer_step_reference(o, &p, &gi, st, 2, 1e-3), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STATUS(ot_optimizer_step_reference(o, &p, &p, st, 1, 1e-3), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_optimizer_step_reference(o, &p, &p, st, 2, NAN), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "learning rate");
    EXPECT_TRUE(((float *)p.data)[0] == 1.0f && ((float *)p.data)[2] == 3.0f); /* untouched */
    EXPECT_INT_EQ(ot_optimizer_step_count(o), 0);
    /* a good step moves every element by lr (Adam's first step is lr * sign(g)) */
    ot_tensor gg;
    ASSERT_OK(ot_tensor_alloc(&gg, &s3));
    for (int i = 0; i < 3; i++) ((float *)gg.data)[i] = i == 1 ? -2.0f : 0.5f;
    EXPECT_OK(ot_optimizer_step_reference(o, &p, &gg, st, 2, 0.1));
    EXPECT_NEAR(((float *)p.data)[0], 0.9, 1e-6);
    EXPECT_NEAR(((float *)p.data)[1], 2.1, 1e-6);
    EXPECT_INT_EQ(ot_optimizer_step_count(o), 1);
    /* a non-float parameter cannot be built */
    ot_module *m = NULL;
    EXPECT_STATUS(ot_optimizer_build_module(o, &si, &m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(m == NULL);
    ot_tensor_release(&p);
    ot_tensor_release(&g);
    ot_tensor_release(&gg);
    ot_tensor_release(&gi);
    ot_tensor_release(&st[0]);
    ot_tensor_release(&st[1]);
    ot_optimizer_free(o);
    ot_optimizer_free(NULL);
}

/* The first step of (a copy of) o on p = 0 with gradient g (lr 1): the new parameter. */
static double one_step(const ot_optimizer *o0, float g) {
    ot_optimizer *o = NULL;
    if (ot_optimizer_clone(o0, &o) != OT_OK) return NAN;
    ot_shape s;
    ot_shape_make(&s, OT_F32, 0, NULL);
    ot_tensor p, gt, st[OT_OPTIM_MAX_STATE];
    int ns = ot_optimizer_state_count(o);
    ot_tensor_alloc(&p, &s);
    ot_tensor_alloc(&gt, &s);
    *(float *)gt.data = g;
    for (int j = 0; j < ns; j++) ot_optimizer_state_alloc(o, j, &s, &st[j]);
    double r =
        ot_optimizer_step_reference(o, &p, &gt, st, ns, 1.0) == OT_OK ? *(float *)p.data : NAN;
    ot_tensor_release(&p);
    ot_tensor_release(&gt);
    for (int j = 0; j < ns; j++) ot_tensor_release(&st[j]);
    ot_optimizer_free(o);
    return r;
}

/* optax's conventions change the numbers where they should: eps_root inside the square root,
 * rmsprop's eps inside it, and they are refused where they mean nothing. */
static void test_optax_convention(void) {
    ot_optimizer *o = NULL;
    ASSERT_OK(ot_optimizer_new("adam", &o));
    /* first step: u = g / (sqrt(g^2 + eps_root) + eps); g = 1e-4, eps_root = 1e-8: 1/sqrt(2) */
    EXPECT_NEAR(one_step(o, 1e-4f), -1.0 / (1.0 + 1e-4), 1e-5);
    EXPECT_STATUS(ot_optimizer_set(o, "eps_root", 1e-8), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "needs optax = 1");
    EXPECT_STATUS(ot_optimizer_set(o, "optax", 2), OT_ERR_INVALID_ARGUMENT);
    ASSERT_OK(ot_optimizer_set(o, "optax", 1));
    EXPECT_NEAR(one_step(o, 1e-4f), -1.0 / (1.0 + 1e-4), 1e-5); /* eps_root 0: as torch */
    ASSERT_OK(ot_optimizer_set(o, "eps_root", 1e-8));
    EXPECT_NEAR(one_step(o, 1e-4f), -1e-4 / (sqrt(2e-8) + 1e-8), 1e-5);
    ot_optimizer_free(o);
    /* rmsprop: nu = 0.1 g^2 = 1e-9; torch g / (sqrt(nu) + eps), optax g / sqrt(nu + eps) */
    ASSERT_OK(ot_optimizer_new("rmsprop", &o));
    ASSERT_OK(ot_optimizer_set(o, "alpha", 0.9));
    EXPECT_NEAR(one_step(o, 1e-4f), -1e-4 / (sqrt(1e-9) + 1e-8), 1e-5);
    ASSERT_OK(ot_optimizer_set(o, "optax", 1));
    EXPECT_NEAR(one_step(o, 1e-4f), -1e-4 / sqrt(1e-9 + 1e-8), 1e-5);
    ot_optimizer_free(o);
    /* adagrad: optax has no lr_decay; nadam's optax form has no mu_product slot */
    ASSERT_OK(ot_optimizer_new("adagrad", &o));
    ASSERT_OK(ot_optimizer_set(o, "lr_decay", 0.1));
    EXPECT_STATUS(ot_optimizer_set(o, "optax", 1), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "lr_decay");
    ot_optimizer_free(o);
    ASSERT_OK(ot_optimizer_new("nadam", &o));
    EXPECT_INT_EQ(ot_optimizer_state_count(o), 3);
    ASSERT_OK(ot_optimizer_set(o, "optax", 1));
    EXPECT_INT_EQ(ot_optimizer_state_count(o), 2);
    ot_optimizer_free(o);
}

static void test_lookahead_bad_input(void) {
    ot_optimizer *in = NULL, *w = NULL, *w2 = NULL;
    ASSERT_OK(ot_optimizer_new("adam", &in));
    EXPECT_STATUS(ot_optimizer_new_lookahead(in, 0, 0.5, &w), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "sync_period");
    EXPECT_STATUS(ot_optimizer_new_lookahead(in, 5, 1.5, &w), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_optimizer_new_lookahead(NULL, 5, 0.5, &w), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(w == NULL);
    ASSERT_OK(ot_optimizer_set(in, "amsgrad", 1));
    ASSERT_OK(ot_optimizer_new_lookahead(in, 5, 0.5, &w)); /* 3 + slow = 4 slots */
    EXPECT_INT_EQ(ot_optimizer_state_count(w), 4);
    EXPECT_STR_EQ(ot_optimizer_state_name(w, 3), "slow");
    EXPECT_STATUS(ot_optimizer_new_lookahead(w, 5, 0.5, &w2), OT_ERR_INVALID_ARGUMENT);
    ot_optimizer *c = NULL; /* a clone owns its own copy of the inner optimizer */
    ASSERT_OK(ot_optimizer_clone(w, &c));
    ot_optimizer_free(w);
    ot_shape s;
    ot_shape_make(&s, OT_F32, 1, (int64_t[]){3});
    ot_module *m = NULL;
    EXPECT_OK(ot_optimizer_build_module(c, &s, &m));
    ot_module_free(m);
    ot_optimizer_free(c);
    ot_optimizer_free(in);
}

static void test_alloc_failures(void) {
    ot_shape s;
    ot_shape_make(&s, OT_F32, 2, (int64_t[]){5, 3});
    int64_t live = ot_alloc_live();
    for (int n = 1; n < 10000; n++) {
        ot_optimizer *o = NULL;
        ot_module *m = NULL;
        ot_alloc_fail_after(n);
        ot_status st = ot_optimizer_new("rmsprop", &o);
        if (st == OT_OK) st = ot_optimizer_set(o, "centered", 1);
        if (st == OT_OK) st = ot_optimizer_set(o, "momentum", 0.9);
        if (st == OT_OK) st = ot_optimizer_build_module(o, &s, &m);
        ot_alloc_fail_after(0);
        ot_module_free(m);
        ot_optimizer_free(o);
        EXPECT_INT_EQ(ot_alloc_live(), live);
        if (st == OT_OK) break;
        EXPECT_INT_EQ(st, OT_ERR_OUT_OF_MEMORY);
    }
}

/* A user optimizer through the same vtable: p -= lr * sign(g), with no state. */
static int no_state(const ot_optimizer *o) {
    (void)o;
    return 0;
}
static const char *no_name(const ot_optimizer *o, int i) {
    (void)o;
    (void)i;
    return "";
}
static ot_status signsgd_build(const ot_optimizer *o, const ot_optim_inputs *in,
                               ot_optim_outputs *out) {
    (void)o;
    ot_shape s = in->param->shape.array;
    ot_instr *lr = ot_build_broadcast(in->c, ot_build_convert(in->c, in->lr, s.dtype), s, NULL, 0);
    out->param = ot_build_binary(
        in->c, OT_OP_SUBTRACT, in->param,
        ot_build_binary(in->c, OT_OP_MULTIPLY, lr, ot_build_unary(in->c, OT_OP_SIGN, in->grad)));
    return OT_OK;
}

static void test_custom_optimizer(void) {
    static const char *const names[] = {"lr"};
    static const double defs[] = {0.1};
    const ot_optimizer_vtable bad = {"broken", 1,    names, defs, NULL, no_state,
                                     no_name,  NULL, NULL,  NULL, NULL};
    ot_optimizer *o = NULL;
    EXPECT_STATUS(ot_optimizer_new_custom(&bad, &o), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(o == NULL);
    static const ot_optimizer_vtable vt = {"signsgd", 1,    names,         defs, NULL, no_state,
                                           no_name,   NULL, signsgd_build, NULL, NULL};
    ASSERT_OK(ot_optimizer_new_custom(&vt, &o));
    EXPECT_STR_EQ(ot_optimizer_name(o), "signsgd");
    ot_shape s;
    ot_shape_make(&s, OT_F32, 1, (int64_t[]){3});
    ot_tensor p, g;
    ASSERT_OK(ot_tensor_alloc(&p, &s));
    ASSERT_OK(ot_tensor_alloc(&g, &s));
    float gv[3] = {3.0f, -0.5f, 0.0f};
    memcpy(g.data, gv, sizeof gv);
    EXPECT_OK(ot_optimizer_step_reference(o, &p, &g, NULL, 0, 0.25));
    EXPECT_NEAR(((float *)p.data)[0], -0.25, 0);
    EXPECT_NEAR(((float *)p.data)[1], 0.25, 0);
    EXPECT_NEAR(((float *)p.data)[2], 0.0, 0);
    EXPECT_INT_EQ(ot_optimizer_step_count(o), 1);
    ot_tensor_release(&p);
    ot_tensor_release(&g);
    ot_optimizer_free(o);
}

/* ---- host-callback optimizers -----------------------------------------------------------------
 */

/* torch's SGD with momentum (dampening 0) in C, in the graph's operation order. */
typedef struct cb_ctl {
    int64_t fail_at; /* fail at this step (0: never), after scribbling over param and state */
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
static ot_status sgdm_host(const ot_optim_host_args *a) {
    cb_ctl *c = a->user;
    if (c) c->calls++;
    if (a->dtype != OT_F32 || a->nstate != 1 || a->state_count[0] != a->count)
        return ot_error(OT_ERR_INTERNAL, "sgdm_host: unexpected arguments");
    float mu = (float)ot_optimizer_hparam(a->opt, "momentum"), nlr = (float)-a->lr;
    float *p = a->param, *b = a->state[0];
    const float *g = a->grad;
    if (c && c->fail_at == a->step) {
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

static void test_host_callback(void) {
    ot_optimizer *h = NULL, *g = NULL, *w = NULL;
    EXPECT_STATUS(ot_optimizer_new_host(&sgdm_vt, NULL, NULL, &h), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(h == NULL);
    cb_ctl ctl = {0, 0};
    ASSERT_OK(ot_optimizer_new_host(&sgdm_vt, sgdm_host, &ctl, &h));
    EXPECT_TRUE(ot_optimizer_is_host(h));
    ASSERT_OK(ot_optimizer_new("sgd", &g));
    EXPECT_TRUE(!ot_optimizer_is_host(g));
    ASSERT_OK(ot_optimizer_set(g, "momentum", 0.9));
    /* no update graph: build refused, Lookahead refused */
    ot_shape s;
    ot_shape_make(&s, OT_F32, 2, (int64_t[]){5, 3});
    ot_module *m = NULL;
    EXPECT_STATUS(ot_optimizer_build_module(h, &s, &m), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STR_CONTAINS(ot_last_error(), "host callback");
    EXPECT_STATUS(ot_optimizer_new_lookahead(h, 5, 0.5, &w), OT_ERR_INVALID_ARGUMENT);
    /* 30 steps on the fixture's matrix: the same numbers as the built-in sgd graph */
    ot_tensor p0 = {0}, gall = {0};
    ASSERT_TRUE(load("inputs/param0_matrix.npy", &p0));
    ASSERT_TRUE(load("inputs/grad_matrix.npy", &gall));
    ot_tensor ph, pg, sh, sg;
    ASSERT_OK(ot_tensor_alloc(&ph, &p0.shape));
    ASSERT_OK(ot_tensor_alloc(&pg, &p0.shape));
    memcpy(ph.data, p0.data, p0.nbytes);
    memcpy(pg.data, p0.data, p0.nbytes);
    ASSERT_OK(ot_optimizer_state_alloc(h, 0, &p0.shape, &sh));
    ASSERT_OK(ot_optimizer_state_alloc(g, 0, &p0.shape, &sg));
    int differ = 0;
    for (int t = 0; t < 30; t++) {
        ot_tensor gt;
        row(&gall, &p0.shape, t, &gt);
        double lr = 0.05 / (1 + t);
        ASSERT_OK(ot_optimizer_step_reference(h, &ph, &gt, &sh, 1, lr));
        ASSERT_OK(ot_optimizer_step_reference(g, &pg, &gt, &sg, 1, lr));
        differ += memcmp(ph.data, pg.data, ph.nbytes) != 0 || memcmp(sh.data, sg.data, sh.nbytes);
    }
    EXPECT_INT_EQ(differ, 0);
    EXPECT_INT_EQ(ctl.calls, 30);
    EXPECT_INT_EQ(ot_optimizer_step_count(h), 30);
    /* a failing callback (after writing garbage into its arguments) changes nothing */
    ot_tensor pc, sc;
    ASSERT_OK(ot_tensor_alloc(&pc, &p0.shape));
    ASSERT_OK(ot_tensor_alloc(&sc, &p0.shape));
    memcpy(pc.data, ph.data, ph.nbytes);
    memcpy(sc.data, sh.data, sh.nbytes);
    ctl.fail_at = 31;
    ot_tensor gt;
    row(&gall, &p0.shape, 30, &gt);
    EXPECT_STATUS(ot_optimizer_step_reference(h, &ph, &gt, &sh, 1, 0.01), OT_ERR_INTERNAL);
    EXPECT_STR_CONTAINS(ot_last_error(), "refusing step 31");
    EXPECT_STR_CONTAINS(ot_last_error(), "host callback failed at step 31");
    EXPECT_TRUE(memcmp(pc.data, ph.data, ph.nbytes) == 0 &&
                memcmp(sc.data, sh.data, sh.nbytes) == 0);
    EXPECT_INT_EQ(ot_optimizer_step_count(h), 30);
    /* bad input is refused before the callback runs */
    int calls = ctl.calls;
    EXPECT_STATUS(ot_optimizer_step_reference(h, &ph, &gt, &sh, 1, NAN), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_optimizer_step_reference(h, &ph, &gt, &sh, 0, 0.01), OT_ERR_INVALID_ARGUMENT);
    EXPECT_INT_EQ(ctl.calls, calls);
    ctl.fail_at = 0;
    EXPECT_OK(ot_optimizer_step_reference(h, &ph, &gt, &sh, 1, 0.01)); /* and it recovers */
    EXPECT_INT_EQ(ot_optimizer_step_count(h), 31);
    ot_optimizer *hc = NULL; /* a clone keeps the callback and its user data */
    ASSERT_OK(ot_optimizer_clone(h, &hc));
    EXPECT_TRUE(ot_optimizer_is_host(hc));
    ot_optimizer_free(hc);
    ot_tensor_release(&p0);
    ot_tensor_release(&gall);
    ot_tensor_release(&ph);
    ot_tensor_release(&pg);
    ot_tensor_release(&sh);
    ot_tensor_release(&sg);
    ot_tensor_release(&pc);
    ot_tensor_release(&sc);
    ot_optimizer_free(h);
    ot_optimizer_free(g);
}

OT_TEST_MAIN(OT_TEST(test_host_callback), OT_TEST(test_custom_optimizer),
             OT_TEST(test_torch_trajectories), OT_TEST(test_bad_input),
             OT_TEST(test_optax_convention), OT_TEST(test_lookahead_bad_input),
             OT_TEST(test_alloc_failures))
