/* Reverse-mode autodiff (ot_grad, ot_vjp): every rule checked against central finite differences
 * in f64, error cases, and allocation failures.
 *
 * The check: for a module f and random inputs x (fixed seed), ot_vjp with a random cotangent c
 * gives the gradient of phi(x) = sum(c * f(x)) over all floating output leaves; each gradient
 * element is compared with (phi(x + h e) - phi(x - h e)) / 2h, h = 1e-6 * max(1, |x|), within
 * |fd - ad| <= 1e-6 * max(1, |ad|) (the truncation error of the central difference is O(h^2) and
 * the rounding error about 1e-16 * |phi| / h, both well below that). Inputs are drawn away from
 * the kinks of piecewise functions (the tests say where). */
#include "ot_test.h"

#include "optitpu/autodiff.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"

#include <math.h>

#define FD_TOL 1e-6

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static double urand(void) { /* [0, 1), xorshift64* */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (double)((g_rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

static ot_shape shp(ot_dtype t, int rank, const int64_t *dims) {
    ot_shape s;
    ot_shape_make(&s, t, rank, dims);
    return s;
}
#define S64(...) shp(OT_F64, (int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), (int64_t[]){__VA_ARGS__})
#define SCALAR64 ot_shape_scalar(OT_F64)

/* An f64 argument uniform in [lo, hi). */
static ot_value arg_uniform(ot_shape s, double lo, double hi) {
    ot_value v;
    ot_value_alloc_array(&v, &s);
    double *d = v.array.data;
    int64_t n = ot_shape_numel_unchecked(&s);
    for (int64_t i = 0; i < n; i++) d[i] = lo + (hi - lo) * urand();
    return v;
}
/* Magnitude in [0.5, 1.5) with a random sign: away from 0 (abs, sign, divide). */
static ot_value arg_signed(ot_shape s) {
    ot_value v = arg_uniform(s, 0.5, 1.5);
    double *d = v.array.data;
    for (int64_t i = 0; i < ot_shape_numel_unchecked(&s); i++)
        if (urand() < 0.5) d[i] = -d[i];
    return v;
}
static ot_value arg_int(ot_dtype t, int rank, const int64_t *dims, const int64_t *vals) {
    ot_shape s = shp(t, rank, dims);
    ot_value v;
    ot_value_alloc_array(&v, &s);
    for (int64_t i = 0; i < ot_shape_numel_unchecked(&s); i++) {
        if (t == OT_S32)
            ((int32_t *)v.array.data)[i] = (int32_t)vals[i];
        else
            ((int64_t *)v.array.data)[i] = vals[i];
    }
    return v;
}

/* sum over floating leaves of c * f(x) */
static double phi(const ot_module *m, const ot_value *args, int nargs, const ot_value *cts,
                  bool *ok) {
    ot_value r;
    if (ot_evaluate(m, args, nargs, NULL, &r) != OT_OK) {
        *ok = false;
        return 0;
    }
    double s = 0;
    for (int l = 0; l < ot_value_leaf_count(&r); l++) {
        const ot_value *v = ot_value_leaf(&r, l);
        if (v->array.shape.dtype != OT_F64) continue;
        const double *a = v->array.data, *c = cts[l].array.data;
        for (int64_t i = 0; i < ot_shape_numel_unchecked(&v->array.shape); i++) s += a[i] * c[i];
    }
    ot_value_release(&r);
    return s;
}

static int g_checks;

/* Checks ot_vjp(m, wrt) against finite differences; takes ownership of m and args. */
static void check_vjp(const char *what, ot_module *m, ot_value *args, int nargs, const int64_t *wrt,
                      int nwrt) {
    g_checks++;
    ot_test_assertions_++;
    ot_status st = ot_module_finalize(m);
    if (st != OT_OK) {
        OT_T_FAIL_("%s: building the forward module: %s", what, ot_last_error());
        goto out;
    }
    ot_value r;
    if (ot_evaluate(m, args, nargs, NULL, &r) != OT_OK) {
        OT_T_FAIL_("%s: forward: %s", what, ot_last_error());
        goto out;
    }
    int nl = ot_value_leaf_count(&r);
    ot_value *all = calloc((size_t)(nargs + nl), sizeof *all);
    for (int k = 0; k < nargs; k++) ot_value_copy(&all[k], &args[k]);
    for (int l = 0; l < nl; l++) {
        const ot_value *v = ot_value_leaf(&r, l);
        if (v->array.shape.dtype == OT_F64)
            all[nargs + l] = arg_uniform(v->array.shape, -1, 1);
        else
            ot_value_alloc_array(&all[nargs + l], &v->array.shape);
    }
    ot_module *g = NULL;
    st = ot_vjp(m, wrt, nwrt, &g);
    if (st != OT_OK) {
        OT_T_FAIL_("%s: ot_vjp: %s (%s)", what, ot_status_str(st), ot_last_error());
    } else {
        ot_value gr;
        st = ot_evaluate(g, all, nargs + nl, NULL, &gr);
        if (st != OT_OK) {
            OT_T_FAIL_("%s: evaluating the vjp module: %s", what, ot_last_error());
        } else if (gr.kind != OT_IR_TUPLE || gr.ntuple != nl + nwrt) {
            OT_T_FAIL_("%s: vjp result has %d elements, want %d", what, gr.ntuple, nl + nwrt);
        } else {
            for (int l = 0; l < nl; l++)
                if (!ot_value_equal(&gr.tuple[l], ot_value_leaf(&r, l)))
                    OT_T_FAIL_("%s: primal output %d differs", what, l);
            for (int k = 0; k < nwrt; k++) {
                ot_value *x = &all[wrt[k]];
                const ot_value *gk = &gr.tuple[nl + k];
                if (!ot_shape_equal(&gk->array.shape, &x->array.shape)) {
                    OT_T_FAIL_("%s: gradient %d has the wrong shape", what, k);
                    continue;
                }
                double *xd = x->array.data;
                const double *gd = gk->array.data;
                int bad = 0;
                for (int64_t e = 0; e < ot_shape_numel_unchecked(&x->array.shape); e++) {
                    double x0 = xd[e], h = 1e-6 * fmax(1, fabs(x0));
                    bool ok = true;
                    xd[e] = x0 + h;
                    double fp = phi(m, all, nargs, all + nargs, &ok);
                    xd[e] = x0 - h;
                    double fm = phi(m, all, nargs, all + nargs, &ok);
                    xd[e] = x0;
                    double fd = (fp - fm) / (2 * h);
                    if (!ok || !(fabs(fd - gd[e]) <= FD_TOL * fmax(1, fabs(gd[e])))) {
                        if (bad++ < 3)
                            OT_T_FAIL_("%s: d/d param %lld [%lld]: autodiff %.12g, finite "
                                       "differences %.12g",
                                       what, (long long)wrt[k], (long long)e, gd[e], fd);
                    }
                }
            }
            /* the result prints and parses back */
            char *text = ot_hlo_print(g, NULL);
            ot_module *back = NULL;
            if (!text || ot_hlo_parse(text, strlen(text), NULL, &back) != OT_OK)
                OT_T_FAIL_("%s: the vjp module does not print/parse: %s", what, ot_last_error());
            ot_module_free(back);
            ot_free(text);
        }
        ot_value_release(&gr);
    }
    ot_module_free(g);
    for (int k = 0; k < nargs + nl; k++) ot_value_release(&all[k]);
    free(all);
    ot_value_release(&r);
out:
    for (int k = 0; k < nargs; k++) ot_value_release(&args[k]);
    ot_module_free(m);
}

/* A module with parameters of the given shapes; the caller builds the root. */
static ot_module *new_mod(ot_computation **c, ot_instr **p, int np, const ot_shape *shapes) {
    ot_module *m = ot_module_new("f");
    *c = ot_module_add_computation(m, "main");
    for (int k = 0; k < np; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "p%d", k);
        p[k] = ot_build_parameter(*c, k, shapes[k], nm);
    }
    ot_module_set_entry(m, *c);
    return m;
}

static ot_computation *scalar_fn(ot_module *m, ot_dtype t, ot_opcode op, const char *name) {
    ot_computation *f = ot_module_add_computation(m, name);
    ot_instr *a = ot_build_parameter(f, 0, ot_shape_scalar(t), "a");
    ot_instr *b = ot_build_parameter(f, 1, ot_shape_scalar(t), "b");
    ot_computation_set_root(f, ot_build_binary(f, op, a, b));
    return f;
}

/* ---- elementwise ------------------------------------------------------------------------------
 */

static void test_unary(void) {
    static const struct {
        ot_opcode op;
        double lo, hi; /* input range (inside the domain, away from kinks) */
        bool signed_;
    } cases[] = {
        {OT_OP_NEGATE, -2, 2, false},
        {OT_OP_ABS, 0, 0, true},
        {OT_OP_EXP, -2, 2, false},
        {OT_OP_EXPM1, -2, 2, false},
        {OT_OP_LOG, 0.3, 3, false},
        {OT_OP_LOG1P, -0.5, 3, false},
        {OT_OP_SQRT, 0.3, 3, false},
        {OT_OP_RSQRT, 0.3, 3, false},
        {OT_OP_CBRT, 0, 0, true},
        {OT_OP_TANH, -2, 2, false},
        {OT_OP_LOGISTIC, -3, 3, false},
        {OT_OP_SIN, -3, 3, false},
        {OT_OP_COS, -3, 3, false},
        {OT_OP_TAN, -1.2, 1.2, false},
        {OT_OP_ERF, -2, 2, false},
        {OT_OP_COPY, -2, 2, false},
        {OT_OP_SIGN, 0, 0, true},
        {OT_OP_FLOOR, 0.1, 0.9, false},
        {OT_OP_CEIL, 0.1, 0.9, false},
        {OT_OP_ROUND_NEAREST_AFZ, 0.1, 0.4, false},
        {OT_OP_ROUND_NEAREST_EVEN, 0.6, 0.9, false},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ot_computation *c;
        ot_instr *p[1];
        ot_shape s = S64(3, 4);
        ot_module *m = new_mod(&c, p, 1, &s);
        /* f(x) * x so that even a zero-derivative op leaves a gradient to compare */
        ot_instr *f = ot_build_unary(c, cases[k].op, p[0]);
        ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, f, p[0]));
        ot_value a = cases[k].signed_ ? arg_signed(s) : arg_uniform(s, cases[k].lo, cases[k].hi);
        check_vjp(ot_opcode_name(cases[k].op), m, &a, 1, (int64_t[]){0}, 1);
    }
}

static void test_binary(void) {
    static const struct {
        ot_opcode op;
        double lo0, hi0, lo1, hi1;
    } cases[] = {
        {OT_OP_ADD, -2, 2, -2, 2},         {OT_OP_SUBTRACT, -2, 2, -2, 2},
        {OT_OP_MULTIPLY, -2, 2, -2, 2},    {OT_OP_DIVIDE, -2, 2, 0.5, 2},
        {OT_OP_POWER, 0.3, 2, -2, 2},      {OT_OP_MAXIMUM, -2, 2, -2, 2},
        {OT_OP_MINIMUM, -2, 2, -2, 2},     {OT_OP_ATAN2, -2, 2, -2, 2},
        {OT_OP_REMAINDER, 1, 7, 0.7, 1.3},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ot_computation *c;
        ot_instr *p[2];
        ot_shape s[2] = {S64(2, 5), S64(2, 5)};
        ot_module *m = new_mod(&c, p, 2, s);
        ot_computation_set_root(c, ot_build_binary(c, cases[k].op, p[0], p[1]));
        ot_value a[2] = {arg_uniform(s[0], cases[k].lo0, cases[k].hi0),
                         arg_uniform(s[1], cases[k].lo1, cases[k].hi1)};
        check_vjp(ot_opcode_name(cases[k].op), m, a, 2, (int64_t[]){0, 1}, 2);
    }
    /* x * x: both operand slots of one instruction accumulate */
    ot_computation *c;
    ot_instr *p[1];
    ot_shape s = S64(4);
    ot_module *m = new_mod(&c, p, 1, &s);
    ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, p[0], p[0]));
    ot_value a = arg_uniform(s, -2, 2);
    check_vjp("x*x", m, &a, 1, (int64_t[]){0}, 1);
}

/* Ties in maximum/minimum: JAX splits the adjoint equally (1/2 each). */
static void test_max_ties(void) {
    ot_computation *c;
    ot_instr *p[2];
    ot_shape s[2] = {S64(3), S64(3)};
    ot_module *m = new_mod(&c, p, 2, s);
    ot_computation_set_root(c, ot_build_binary(c, OT_OP_MAXIMUM, p[0], p[1]));
    ASSERT_OK(ot_module_finalize(m));
    ot_module *g = NULL;
    ASSERT_OK(ot_vjp(m, (int64_t[]){0, 1}, 2, &g));
    double x[3] = {1, 2, 3}, y[3] = {1, 5, 0}, ct[3] = {4, 4, 4};
    ot_tensor t[3];
    for (int k = 0; k < 3; k++) ot_tensor_borrow(&t[k], &s[0], k == 0 ? x : k == 1 ? y : ct);
    ot_value r;
    ASSERT_OK(ot_evaluate_tensors(g, t, 3, NULL, &r));
    const double *gx = r.tuple[1].array.data, *gy = r.tuple[2].array.data;
    EXPECT_NEAR(gx[0], 2, 0);
    EXPECT_NEAR(gy[0], 2, 0);
    EXPECT_NEAR(gx[1], 0, 0);
    EXPECT_NEAR(gy[1], 4, 0);
    EXPECT_NEAR(gx[2], 4, 0);
    EXPECT_NEAR(gy[2], 0, 0);
    ot_value_release(&r);
    ot_module_free(g);
    ot_module_free(m);
}

static void test_select_clamp_convert(void) {
    {
        ot_computation *c;
        ot_instr *p[2];
        ot_shape s[2] = {S64(3, 3), S64(3, 3)};
        ot_module *m = new_mod(&c, p, 2, s);
        ot_instr *pr = ot_build_compare(c, p[0], p[1], OT_CMP_LT, OT_CMP_TYPE_DEFAULT);
        ot_instr *sq = ot_build_binary(c, OT_OP_MULTIPLY, p[0], p[0]);
        ot_computation_set_root(c, ot_build_select(c, pr, sq, p[1]));
        ot_value a[2] = {arg_uniform(s[0], -2, 2), arg_uniform(s[1], -2, 2)};
        check_vjp("select/compare", m, a, 2, (int64_t[]){0, 1}, 2);
    }
    {
        ot_computation *c;
        ot_instr *p[3];
        ot_shape s[3] = {S64(8), S64(8), S64(8)};
        ot_module *m = new_mod(&c, p, 3, s);
        ot_computation_set_root(c, ot_build_clamp(c, p[0], p[1], p[2]));
        ot_value a[3] = {arg_uniform(s[0], -1, 0), arg_uniform(s[1], -2, 2),
                         arg_uniform(s[2], 0, 1)};
        check_vjp("clamp", m, a, 3, (int64_t[]){0, 1, 2}, 3);
    }
    {
        ot_computation *c;
        ot_instr *p[3];
        ot_shape s[3] = {SCALAR64, S64(8), SCALAR64};
        ot_module *m = new_mod(&c, p, 3, s);
        ot_computation_set_root(c, ot_build_clamp(c, p[0], p[1], p[2]));
        ot_value a[3] = {arg_uniform(s[0], -1, -0.5), arg_uniform(s[1], -2, 2),
                         arg_uniform(s[2], 0.5, 1)};
        check_vjp("clamp scalar bounds", m, a, 3, (int64_t[]){0, 1, 2}, 3);
    }
    {
        /* convert f64 -> f64 carries the gradient; s32 -> f64 carries none */
        ot_computation *c;
        ot_instr *p[2];
        ot_shape s[2] = {S64(4), shp(OT_S32, 1, (int64_t[]){4})};
        ot_module *m = new_mod(&c, p, 2, s);
        ot_instr *xi = ot_build_convert(c, p[1], OT_F64); /* no gradient through integers */
        ot_instr *x = ot_build_convert(c, p[0], OT_F64);
        ot_computation_set_root(
            c, ot_build_binary(c, OT_OP_MULTIPLY, ot_build_unary(c, OT_OP_SIN, x), xi));
        ot_value a[2] = {arg_uniform(s[0], -2, 2),
                         arg_int(OT_S32, 1, (int64_t[]){4}, (int64_t[]){1, -2, 3, 4})};
        check_vjp("convert", m, a, 2, (int64_t[]){0}, 1);
    }
}

/* ---- shape ops --------------------------------------------------------------------------------
 */

static void test_shape_ops(void) {
    { /* broadcast [3] -> [2,3,4] at dim 1, and a transposing broadcast [4,2] -> [2,3,4] */
        ot_computation *c;
        ot_instr *p[2];
        ot_shape s[2] = {S64(3), S64(4, 2)};
        ot_module *m = new_mod(&c, p, 2, s);
        ot_instr *b0 = ot_build_broadcast(c, p[0], S64(2, 3, 4), (int64_t[]){1}, 1);
        ot_instr *b1 = ot_build_broadcast(c, p[1], S64(2, 3, 4), (int64_t[]){2, 0}, 2);
        ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, b0, b1));
        ot_value a[2] = {arg_uniform(s[0], -1, 1), arg_uniform(s[1], -1, 1)};
        check_vjp("broadcast", m, a, 2, (int64_t[]){0, 1}, 2);
    }
    { /* reshape, transpose */
        ot_computation *c;
        ot_instr *p[1];
        ot_shape s = S64(2, 3, 4);
        ot_module *m = new_mod(&c, p, 1, &s);
        ot_instr *t = ot_build_transpose(c, p[0], (int64_t[]){2, 0, 1}, 3);
        ot_instr *r = ot_build_reshape(c, t, S64(8, 3));
        ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, r, r));
        ot_value a = arg_uniform(s, -1, 1);
        check_vjp("transpose/reshape", m, &a, 1, (int64_t[]){0}, 1);
    }
    { /* strided slice, concatenate, reverse */
        ot_computation *c;
        ot_instr *p[2];
        ot_shape s[2] = {S64(5, 7), S64(2, 7)};
        ot_module *m = new_mod(&c, p, 2, s);
        ot_instr *sl =
            ot_build_slice(c, p[0], (int64_t[]){1, 0}, (int64_t[]){5, 7}, (int64_t[]){2, 3});
        ot_instr *cc = ot_build_concatenate(c, (ot_instr *[]){p[0], p[1], p[0]}, 3, 0);
        ot_instr *rv = ot_build_reverse(c, cc, (int64_t[]){0, 1}, 2);
        ot_instr *sq = ot_build_binary(c, OT_OP_MULTIPLY, rv, rv);
        ot_computation_set_root(c, ot_build_tuple(c, (ot_instr *[]){sl, sq}, 2));
        ot_value a[2] = {arg_uniform(s[0], -1, 1), arg_uniform(s[1], -1, 1)};
        check_vjp("slice/concatenate/reverse", m, a, 2, (int64_t[]){0, 1}, 2);
    }
    { /* pad with low/high/interior and negative padding; the padding value is differentiated */
        ot_computation *c;
        ot_instr *p[2];
        ot_shape s[2] = {S64(3, 4), SCALAR64};
        ot_module *m = new_mod(&c, p, 2, s);
        ot_pad_dim cfg[2] = {{1, 2, 1}, {-1, 2, 2}};
        ot_instr *pd = ot_build_pad(c, p[0], p[1], cfg);
        ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, pd, pd));
        ot_value a[2] = {arg_uniform(s[0], -1, 1), arg_uniform(s[1], -1, 1)};
        check_vjp("pad", m, a, 2, (int64_t[]){0, 1}, 2);
    }
    { /* dynamic-slice and dynamic-update-slice (indices clamped into range) */
        ot_computation *c;
        ot_instr *p[4];
        ot_shape s[4] = {S64(5, 6), S64(2, 3), ot_shape_scalar(OT_S32), ot_shape_scalar(OT_S32)};
        ot_module *m = new_mod(&c, p, 4, s);
        ot_instr *ds =
            ot_build_dynamic_slice(c, p[0], (ot_instr *[]){p[2], p[3]}, (int64_t[]){3, 2});
        ot_instr *du = ot_build_dynamic_update_slice(c, p[0], p[1], (ot_instr *[]){p[3], p[2]});
        ot_computation_set_root(
            c,
            ot_build_tuple(c, (ot_instr *[]){ds, ot_build_binary(c, OT_OP_MULTIPLY, du, du)}, 2));
        ot_value a[4] = {arg_uniform(s[0], -1, 1), arg_uniform(s[1], -1, 1),
                         arg_int(OT_S32, 0, NULL, (int64_t[]){1}),
                         arg_int(OT_S32, 0, NULL, (int64_t[]){9})};
        check_vjp("dynamic-slice/update", m, a, 4, (int64_t[]){0, 1}, 2);
    }
}

/* ---- reductions and dot -----------------------------------------------------------------------
 */

static void test_reduce(void) {
    static const ot_opcode ops[] = {OT_OP_ADD, OT_OP_MAXIMUM, OT_OP_MINIMUM, OT_OP_MULTIPLY};
    for (size_t k = 0; k < 4; k++) {
        ot_computation *c;
        ot_instr *p[1];
        ot_shape s = S64(3, 4, 2);
        ot_module *m = new_mod(&c, p, 1, &s);
        ot_computation *f = scalar_fn(m, OT_F64, ops[k], "red");
        double init = ops[k] == OT_OP_ADD        ? 0
                      : ops[k] == OT_OP_MULTIPLY ? 1
                      : ops[k] == OT_OP_MAXIMUM  ? -INFINITY
                                                 : INFINITY;
        ot_instr *z = ot_build_constant_scalar(c, OT_F64, init);
        ot_instr *r1 = ot_build_reduce(c, &p[0], &z, 1, (int64_t[]){2, 0}, 2, f);
        ot_instr *r2 = ot_build_reduce(c, &p[0], &z, 1, (int64_t[]){1}, 1, f);
        ot_computation_set_root(c, ot_build_tuple(c, (ot_instr *[]){r1, r2}, 2));
        ot_value a = arg_uniform(s, 0.5, 1.5);
        char what[64];
        snprintf(what, sizeof what, "reduce %s", ot_opcode_name(ops[k]));
        check_vjp(what, m, &a, 1, (int64_t[]){0}, 1);
    }
    { /* sum with a differentiated init value */
        ot_computation *c;
        ot_instr *p[2];
        ot_shape s[2] = {S64(3, 4), SCALAR64};
        ot_module *m = new_mod(&c, p, 2, s);
        ot_computation *f = scalar_fn(m, OT_F64, OT_OP_ADD, "add");
        ot_instr *r = ot_build_reduce(c, &p[0], &p[1], 1, (int64_t[]){1}, 1, f);
        ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, r, r));
        ot_value a[2] = {arg_uniform(s[0], -1, 1), arg_uniform(s[1], -1, 1)};
        check_vjp("reduce add init", m, a, 2, (int64_t[]){0, 1}, 2);
    }
    { /* a product with a zero element: the others' product, not prod / x */
        ot_computation *c;
        ot_instr *p[1];
        ot_shape s = S64(2, 3);
        ot_module *m = new_mod(&c, p, 1, &s);
        ot_computation *f = scalar_fn(m, OT_F64, OT_OP_MULTIPLY, "mul");
        ot_instr *one = ot_build_constant_scalar(c, OT_F64, 1);
        ot_computation_set_root(c, ot_build_reduce(c, &p[0], &one, 1, (int64_t[]){1}, 1, f));
        ot_value a = arg_uniform(s, 0.5, 1.5);
        ((double *)a.array.data)[1] = 0;
        check_vjp("reduce multiply with a zero", m, &a, 1, (int64_t[]){0}, 1);
    }
}

static void test_dot(void) {
    static const struct {
        int rl, rr;
        int64_t ld[4], rd[4];
        ot_dot_dims dn;
    } cases[] = {
        /* matmul [3,4] x [4,5] */
        {2,
         2,
         {3, 4},
         {4, 5},
         {.nbatch = 0, .ncontract = 1, .lhs_contract = {1}, .rhs_contract = {0}}},
        /* vector dot */
        {1, 1, {6}, {6}, {.ncontract = 1, .lhs_contract = {0}, .rhs_contract = {0}}},
        /* matvec */
        {2, 1, {3, 4}, {4}, {.ncontract = 1, .lhs_contract = {1}, .rhs_contract = {0}}},
        /* batch matmul [2,3,4] x [2,4,5] */
        {3,
         3,
         {2, 3, 4},
         {2, 4, 5},
         {.nbatch = 1,
          .ncontract = 1,
          .lhs_batch = {0},
          .rhs_batch = {0},
          .lhs_contract = {2},
          .rhs_contract = {1}}},
        /* two contracting dims in a different order, batch dims not leading */
        {3,
         4,
         {4, 3, 2},
         {2, 5, 4, 3},
         {.nbatch = 1,
          .ncontract = 2,
          .lhs_batch = {2},
          .rhs_batch = {0},
          .lhs_contract = {1, 0},
          .rhs_contract = {3, 2}}},
        /* two batch dims, outer product (no contraction) */
        {4,
         3,
         {2, 3, 4, 2},
         {3, 2, 5},
         {.nbatch = 2, .ncontract = 0, .lhs_batch = {1, 3}, .rhs_batch = {0, 1}}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ot_computation *c;
        ot_instr *p[2];
        ot_shape s[2] = {shp(OT_F64, cases[k].rl, cases[k].ld),
                         shp(OT_F64, cases[k].rr, cases[k].rd)};
        ot_module *m = new_mod(&c, p, 2, s);
        ot_computation_set_root(c, ot_build_dot(c, p[0], p[1], &cases[k].dn, OT_PRECISION_DEFAULT,
                                                OT_PRECISION_DEFAULT));
        ot_value a[2] = {arg_uniform(s[0], -1, 1), arg_uniform(s[1], -1, 1)};
        char what[32];
        snprintf(what, sizeof what, "dot case %zu", k);
        check_vjp(what, m, a, 2, (int64_t[]){0, 1}, 2);
    }
}

/* ---- convolution, windows, gather/scatter ---------------------------------------------------- */

static ot_window win(int rank, const int64_t *size, const int64_t *stride, const int64_t *lo,
                     const int64_t *hi, const int64_t *base, const int64_t *wdil) {
    ot_window w;
    memset(&w, 0, sizeof w);
    w.rank = rank;
    for (int d = 0; d < rank; d++) {
        w.dims[d].size = size[d];
        w.dims[d].stride = stride ? stride[d] : 1;
        w.dims[d].pad_lo = lo ? lo[d] : 0;
        w.dims[d].pad_hi = hi ? hi[d] : 0;
        w.dims[d].base_dilation = base ? base[d] : 1;
        w.dims[d].window_dilation = wdil ? wdil[d] : 1;
    }
    return w;
}

static void conv_case(const char *what, ot_shape xs, ot_shape ks, const ot_window *w,
                      const ot_conv_dims *dn, int64_t fgc, int64_t bgc) {
    ot_computation *c;
    ot_instr *p[2];
    ot_shape s[2] = {xs, ks};
    ot_module *m = new_mod(&c, p, 2, s);
    ot_instr *y = ot_build_convolution(c, p[0], p[1], w, dn, fgc, bgc);
    ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, y, y));
    ot_value a[2] = {arg_uniform(xs, -1, 1), arg_uniform(ks, -1, 1)};
    check_vjp(what, m, a, 2, (int64_t[]){0, 1}, 2);
}

static void test_convolution(void) {
    /* NCHW / OIHW: strides, asymmetric padding, kernel dilation */
    ot_conv_dims nchw = {.nspatial = 2,
                         .input_batch = 0,
                         .input_feature = 1,
                         .input_spatial = {2, 3},
                         .kernel_output_feature = 0,
                         .kernel_input_feature = 1,
                         .kernel_spatial = {2, 3},
                         .output_batch = 0,
                         .output_feature = 1,
                         .output_spatial = {2, 3}};
    ot_window w1 = win(2, (int64_t[]){3, 2}, (int64_t[]){2, 1}, (int64_t[]){1, 0},
                       (int64_t[]){1, 2}, NULL, (int64_t[]){1, 2});
    conv_case("conv nchw stride/pad/rhs dilation", S64(2, 3, 6, 5), S64(4, 3, 3, 2), &w1, &nchw, 1,
              1);
    /* a small CNN layer: 3x3 'same' */
    ot_window w2 =
        win(2, (int64_t[]){3, 3}, NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1}, NULL, NULL);
    conv_case("conv 3x3 same", S64(2, 1, 5, 5), S64(2, 1, 3, 3), &w2, &nchw, 1, 1);
    /* NHWC / HWIO, input dilation (transposed convolution), two feature groups */
    ot_conv_dims nhwc = {.nspatial = 2,
                         .input_batch = 0,
                         .input_feature = 3,
                         .input_spatial = {1, 2},
                         .kernel_output_feature = 3,
                         .kernel_input_feature = 2,
                         .kernel_spatial = {0, 1},
                         .output_batch = 0,
                         .output_feature = 3,
                         .output_spatial = {1, 2}};
    ot_window w3 = win(2, (int64_t[]){2, 2}, (int64_t[]){1, 2}, (int64_t[]){1, 0},
                       (int64_t[]){0, 1}, (int64_t[]){2, 1}, NULL);
    conv_case("conv nhwc lhs dilation feature groups", S64(1, 4, 4, 4), S64(2, 2, 2, 6), &w3, &nhwc,
              2, 1);
    /* 1-D with two batch groups */
    ot_conv_dims bsf = {.nspatial = 1,
                        .input_batch = 0,
                        .input_feature = 2,
                        .input_spatial = {1},
                        .kernel_output_feature = 2,
                        .kernel_input_feature = 1,
                        .kernel_spatial = {0},
                        .output_batch = 0,
                        .output_feature = 2,
                        .output_spatial = {1}};
    ot_window w4 = win(1, (int64_t[]){3}, NULL, (int64_t[]){1}, NULL, NULL, NULL);
    conv_case("conv 1d batch groups", S64(4, 7, 2), S64(3, 2, 6), &w4, &bsf, 1, 2);
}

static void test_reduce_window(void) {
    { /* sum: strides, padding, base and window dilation */
        ot_computation *c;
        ot_instr *p[1];
        ot_shape s = S64(5, 6);
        ot_module *m = new_mod(&c, p, 1, &s);
        ot_computation *add = scalar_fn(m, OT_F64, OT_OP_ADD, "add");
        ot_window w = win(2, (int64_t[]){2, 3}, (int64_t[]){1, 2}, (int64_t[]){1, 0},
                          (int64_t[]){0, 1}, (int64_t[]){2, 1}, (int64_t[]){1, 2});
        ot_instr *z = ot_build_constant_scalar(c, OT_F64, 0);
        ot_instr *r = ot_build_reduce_window(c, &p[0], &z, 1, &w, add);
        ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, r, r));
        ot_value a = arg_uniform(s, -1, 1);
        check_vjp("reduce-window add", m, &a, 1, (int64_t[]){0}, 1);
    }
    static const ot_opcode ops[2] = {OT_OP_MAXIMUM, OT_OP_MINIMUM};
    for (int k = 0; k < 2; k++) { /* pooling: padded, and overlapping windows */
        ot_computation *c;
        ot_instr *p[1];
        ot_shape s = S64(2, 5, 6);
        ot_module *m = new_mod(&c, p, 1, &s);
        ot_computation *f = scalar_fn(m, OT_F64, ops[k], "f");
        ot_instr *z = ot_build_constant_scalar(c, OT_F64, k == 0 ? -INFINITY : INFINITY);
        ot_window w1 = win(3, (int64_t[]){1, 2, 2}, (int64_t[]){1, 2, 2}, (int64_t[]){0, 0, 1},
                           (int64_t[]){0, 1, 1}, NULL, NULL);
        ot_window w2 = win(3, (int64_t[]){1, 3, 2}, (int64_t[]){1, 1, 1}, NULL, NULL, NULL, NULL);
        ot_instr *r1 = ot_build_reduce_window(c, &p[0], &z, 1, &w1, f);
        ot_instr *r2 = ot_build_reduce_window(c, &p[0], &z, 1, &w2, f);
        ot_computation_set_root(c, ot_build_tuple(c, (ot_instr *[]){r1, r2}, 2));
        ot_value a = arg_uniform(s, -1, 1);
        check_vjp(k == 0 ? "max pooling" : "min pooling", m, &a, 1, (int64_t[]){0}, 1);
    }
}

static void test_gather_scatter(void) {
    { /* rows, with a repeated index and indices out of range (XLA clamps them) */
        ot_computation *c;
        ot_instr *p[2];
        ot_shape s[2] = {S64(5, 3), shp(OT_S32, 1, (int64_t[]){5})};
        ot_module *m = new_mod(&c, p, 2, s);
        ot_gather_dims gd = {.noffset = 1,
                             .offset_dims = {1},
                             .ncollapsed = 1,
                             .collapsed_slice_dims = {0},
                             .nstart_index_map = 1,
                             .start_index_map = {0},
                             .index_vector_dim = 1,
                             .nslice_sizes = 2,
                             .slice_sizes = {1, 3}};
        ot_instr *gt = ot_build_gather(c, p[0], p[1], &gd);
        ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, gt, gt));
        ot_value a[2] = {arg_uniform(s[0], -1, 1),
                         arg_int(OT_S32, 1, (int64_t[]){5}, (int64_t[]){0, 4, 2, 4, 9})};
        check_vjp("gather rows", m, a, 2, (int64_t[]){0}, 1);
    }
    { /* windows at 2-d start points (index vector in dimension 1), clamped at the edge */
        ot_computation *c;
        ot_instr *p[2];
        ot_shape s[2] = {S64(4, 5), shp(OT_S64, 2, (int64_t[]){3, 2})};
        ot_module *m = new_mod(&c, p, 2, s);
        ot_gather_dims gd = {.noffset = 2,
                             .offset_dims = {1, 2},
                             .nstart_index_map = 2,
                             .start_index_map = {0, 1},
                             .index_vector_dim = 1,
                             .nslice_sizes = 2,
                             .slice_sizes = {2, 3}};
        ot_instr *gt = ot_build_gather(c, p[0], p[1], &gd);
        ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, gt, gt));
        ot_value a[2] = {arg_uniform(s[0], -1, 1),
                         arg_int(OT_S64, 2, (int64_t[]){3, 2}, (int64_t[]){0, 1, 3, 4, -1, 2})};
        check_vjp("gather windows", m, a, 2, (int64_t[]){0}, 1);
    }
    static const ot_opcode comb[2] = {OT_OP_ADD, OT_OP_PARAMETER};
    for (int k = 0; k < 2; k++) {
        /* rows with a repeated index and one out of range (skipped by XLA's scatter) */
        ot_computation *c;
        ot_instr *p[3];
        ot_shape s[3] = {S64(5, 3), shp(OT_S32, 1, (int64_t[]){4}), S64(4, 3)};
        ot_module *m = new_mod(&c, p, 3, s);
        ot_computation *f;
        if (comb[k] == OT_OP_ADD) {
            f = scalar_fn(m, OT_F64, OT_OP_ADD, "add");
        } else {
            f = ot_module_add_computation(m, "replace");
            ot_build_parameter(f, 0, SCALAR64, "a");
            ot_computation_set_root(f, ot_build_parameter(f, 1, SCALAR64, "b"));
        }
        ot_scatter_dims sd = {.nupdate_window = 1,
                              .update_window_dims = {1},
                              .ninserted = 1,
                              .inserted_window_dims = {0},
                              .nscatter_to_operand = 1,
                              .scatter_dims_to_operand_dims = {0},
                              .index_vector_dim = 1};
        ot_instr *sc = ot_build_scatter(c, &p[0], 1, p[1], &p[2], &sd, f);
        ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, sc, sc));
        ot_value a[3] = {arg_uniform(s[0], -1, 1),
                         arg_int(OT_S32, 1, (int64_t[]){4}, (int64_t[]){3, 0, 3, 7}),
                         arg_uniform(s[2], -1, 1)};
        check_vjp(k == 0 ? "scatter add" : "scatter replace (duplicates)", m, a, 3,
                  (int64_t[]){0, 2}, 2);
    }
}

/* A fori-loop (counter from a constant, stepped by 1, compared with a constant) is unrolled; a
 * loop whose count is not static is UNIMPLEMENTED when on the path, and left alone when not. */
static ot_module *loop_module(bool static_count) {
    ot_computation *c;
    ot_instr *p[3];
    ot_shape s[3] = {S64(3), S64(3), ot_shape_scalar(OT_S32)};
    ot_module *m = new_mod(&c, p, 3, s);
    ot_ir_shape el[3] = {ot_ir_shape_scalar(OT_S32), ot_ir_shape_array(S64(3)),
                         ot_ir_shape_array(S64(3))};
    ot_ir_shape st = {.kind = OT_IR_TUPLE, .ntuple = 3, .tuple = el};
    ot_computation *body = ot_module_add_computation(m, "body");
    ot_instr *bp = ot_build_parameter_ir(body, 0, &st, "s");
    ot_instr *bi = ot_build_get_tuple_element(body, bp, 0);
    ot_instr *bx = ot_build_get_tuple_element(body, bp, 1);
    ot_instr *bw = ot_build_get_tuple_element(body, bp, 2);
    ot_instr *nx = ot_build_binary(
        body, OT_OP_ADD,
        ot_build_binary(body, OT_OP_MULTIPLY, ot_build_unary(body, OT_OP_SIN, bx), bw), bx);
    ot_instr *ni = ot_build_binary(body, OT_OP_ADD, bi, ot_build_constant_scalar(body, OT_S32, 1));
    ot_computation_set_root(body, ot_build_tuple(body, (ot_instr *[]){ni, nx, bw}, 3));
    ot_computation *cond = ot_module_add_computation(m, "cond");
    ot_instr *cp = ot_build_parameter_ir(cond, 0, &st, "s");
    ot_instr *ci = ot_build_get_tuple_element(cond, cp, 0);
    ot_instr *lim = ot_build_constant_scalar(cond, OT_S32, 4);
    ot_computation_set_root(cond, ot_build_compare(cond, ci, lim, OT_CMP_LT, OT_CMP_TYPE_DEFAULT));
    /* not static: the counter starts from a parameter */
    ot_instr *i0 = static_count ? ot_build_constant_scalar(c, OT_S32, 0) : p[2];
    ot_instr *init = ot_build_tuple(c, (ot_instr *[]){i0, p[0], p[1]}, 3);
    ot_instr *w = ot_build_while(c, cond, body, init);
    ot_computation_set_root(
        c, ot_build_tuple(c, (ot_instr *[]){ot_build_get_tuple_element(c, w, 1), p[2]}, 2));
    return m;
}

static void test_while(void) {
    ot_shape s = S64(3);
    ot_value a[3] = {arg_uniform(s, -1, 1), arg_uniform(s, -1, 1),
                     arg_int(OT_S32, 0, NULL, (int64_t[]){7})};
    check_vjp("fori loop, 4 trips", loop_module(true), a, 3, (int64_t[]){0, 1}, 2);

    ot_module *m = loop_module(false);
    ASSERT_OK(ot_module_finalize(m));
    ot_module *g = NULL;
    EXPECT_STATUS(ot_vjp(m, (int64_t[]){0}, 1, &g), OT_ERR_UNIMPLEMENTED);
    EXPECT_STR_CONTAINS(ot_last_error(), "no reverse-mode rule for while");
    EXPECT_STR_CONTAINS(ot_last_error(), "static trip count");
    ot_module_free(m);
}

/* conditional: each branch is differentiated in its own computation; operands that are tuples,
 * arrays, a pred selector, and an index out of range (XLA runs the last branch). */
static ot_module *cond_module(bool pred) {
    ot_computation *c;
    ot_instr *p[3];
    ot_shape s[3] = {S64(3), S64(3), ot_shape_scalar(pred ? OT_PRED : OT_S32)};
    ot_module *m = new_mod(&c, p, 3, s);
    ot_ir_shape el[2] = {ot_ir_shape_array(S64(3)), ot_ir_shape_array(S64(3))};
    ot_ir_shape pair = {.kind = OT_IR_TUPLE, .ntuple = 2, .tuple = el};
    /* b0: (a, b) -> (sin(a) * b, a + b) */
    ot_computation *b0 = ot_module_add_computation(m, "b0");
    ot_instr *t0 = ot_build_parameter_ir(b0, 0, &pair, "t");
    ot_instr *a0 = ot_build_get_tuple_element(b0, t0, 0),
             *c0 = ot_build_get_tuple_element(b0, t0, 1);
    ot_computation_set_root(
        b0, ot_build_tuple(b0,
                           (ot_instr *[]){ot_build_binary(b0, OT_OP_MULTIPLY,
                                                          ot_build_unary(b0, OT_OP_SIN, a0), c0),
                                          ot_build_binary(b0, OT_OP_ADD, a0, c0)},
                           2));
    /* b1: (a, b) -> (a * a, exp(b)) through a call */
    ot_computation *sq = ot_module_add_computation(m, "sq");
    ot_instr *sx = ot_build_parameter(sq, 0, S64(3), "x");
    ot_computation_set_root(sq, ot_build_binary(sq, OT_OP_MULTIPLY, sx, sx));
    ot_computation *b1 = ot_module_add_computation(m, "b1");
    ot_instr *t1 = ot_build_parameter_ir(b1, 0, &pair, "t");
    ot_instr *a1 = ot_build_get_tuple_element(b1, t1, 0),
             *c1 = ot_build_get_tuple_element(b1, t1, 1);
    ot_computation_set_root(b1, ot_build_tuple(b1,
                                               (ot_instr *[]){ot_build_call(b1, sq, &a1, 1),
                                                              ot_build_unary(b1, OT_OP_EXP, c1)},
                                               2));
    /* b2: x -> (-x, x * x) */
    ot_computation *b2 = ot_module_add_computation(m, "b2");
    ot_instr *x2 = ot_build_parameter(b2, 0, S64(3), "x");
    ot_computation_set_root(
        b2, ot_build_tuple(b2,
                           (ot_instr *[]){ot_build_unary(b2, OT_OP_NEGATE, x2),
                                          ot_build_binary(b2, OT_OP_MULTIPLY, x2, x2)},
                           2));
    ot_instr *args[3] = {ot_build_tuple(c, (ot_instr *[]){p[0], p[1]}, 2),
                         ot_build_tuple(c, (ot_instr *[]){p[1], p[0]}, 2), p[0]};
    ot_computation *br[3] = {b0, b1, b2};
    ot_instr *cd = ot_build_conditional(c, p[2], br, args, pred ? 2 : 3);
    ot_instr *o0 = ot_build_get_tuple_element(c, cd, 0);
    ot_instr *o1 = ot_build_get_tuple_element(c, cd, 1);
    ot_computation_set_root(
        c, ot_build_tuple(c, (ot_instr *[]){ot_build_binary(c, OT_OP_MULTIPLY, o0, p[1]), o1}, 2));
    return m;
}

static void test_conditional(void) {
    static const int64_t sel[] = {0, 1, 2, 7, -1};
    for (int k = 0; k < 5; k++) {
        ot_shape s = S64(3);
        ot_value a[3] = {arg_uniform(s, -1, 1), arg_uniform(s, -1, 1),
                         arg_int(OT_S32, 0, NULL, &sel[k])};
        char what[48];
        snprintf(what, sizeof what, "conditional, branch index %lld", (long long)sel[k]);
        check_vjp(what, cond_module(false), a, 3, (int64_t[]){0, 1}, 2);
    }
    for (int k = 0; k < 2; k++) {
        ot_shape s = S64(3), ps = ot_shape_scalar(OT_PRED);
        ot_value a[3] = {arg_uniform(s, -1, 1), arg_uniform(s, -1, 1)};
        ot_value_alloc_array(&a[2], &ps);
        *(uint8_t *)a[2].array.data = (uint8_t)k;
        check_vjp(k ? "conditional, pred true" : "conditional, pred false", cond_module(true), a, 3,
                  (int64_t[]){1, 0}, 2);
    }
}

/* (keys, values) sorted by keys along dimension 0 -> (differences of the sorted keys, sin of the
 * sorted values) */
static ot_module *sort_kv_module(void) {
    ot_computation *c;
    ot_instr *p[2];
    ot_shape s[2] = {S64(6, 2), S64(6, 2)};
    ot_module *m = new_mod(&c, p, 2, s);
    ot_computation *lt = ot_module_add_computation(m, "lt");
    ot_instr *ka = ot_build_parameter(lt, 0, SCALAR64, "ka");
    ot_instr *kb = ot_build_parameter(lt, 1, SCALAR64, "kb");
    ot_build_parameter(lt, 2, SCALAR64, "va");
    ot_build_parameter(lt, 3, SCALAR64, "vb");
    ot_computation_set_root(lt, ot_build_compare(lt, ka, kb, OT_CMP_LT, OT_CMP_TYPE_DEFAULT));
    ot_instr *st = ot_build_sort(c, p, 2, 0, false, lt);
    ot_instr *k0 = ot_build_get_tuple_element(c, st, 0);
    ot_instr *v0 = ot_build_get_tuple_element(c, st, 1);
    ot_instr *d = ot_build_binary(
        c, OT_OP_SUBTRACT,
        ot_build_slice(c, k0, (int64_t[]){1, 0}, (int64_t[]){6, 2}, (int64_t[]){1, 1}),
        ot_build_slice(c, k0, (int64_t[]){0, 0}, (int64_t[]){5, 2}, (int64_t[]){1, 1}));
    ot_computation_set_root(
        c, ot_build_tuple(c, (ot_instr *[]){d, ot_build_unary(c, OT_OP_SIN, v0)}, 2));
    return m;
}

/* sort: one operand along a dimension, and keys with values (the gradient follows the
 * permutation). Random inputs have no ties. */
static void test_sort(void) {
    {
        ot_computation *c;
        ot_instr *p[2];
        ot_shape s[2] = {S64(3, 5), S64(3, 5)};
        ot_module *m = new_mod(&c, p, 2, s);
        ot_computation *lt = ot_module_add_computation(m, "lt");
        ot_instr *la = ot_build_parameter(lt, 0, SCALAR64, "a");
        ot_instr *lb = ot_build_parameter(lt, 1, SCALAR64, "b");
        ot_computation_set_root(lt, ot_build_compare(lt, la, lb, OT_CMP_GT, OT_CMP_TYPE_DEFAULT));
        ot_instr *st = ot_build_sort(c, &p[0], 1, 1, true, lt);
        ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, st, p[1]));
        ot_value a[2] = {arg_uniform(s[0], -1, 1), arg_uniform(s[1], -1, 1)};
        check_vjp("sort descending along dim 1", m, a, 2, (int64_t[]){0, 1}, 2);
    }
    {
        ot_shape s = S64(6, 2);
        ot_value a[2] = {arg_uniform(s, -1, 1), arg_uniform(s, -1, 1)};
        check_vjp("sort keys and values", sort_kv_module(), a, 2, (int64_t[]){0, 1}, 2);
    }
}

/* ---- a model: MLP with softmax cross-entropy through ot_grad ----------------------------------
 */

/* (w1 [4,8], b1 [8], w2 [8,3], b2 [3], x [5,4], onehot [5,3]) ->
 * (logits, loss = mean(-sum(onehot * log_softmax(relu(x w1 + b1) w2 + b2)))) */
static ot_module *mlp(int act) {
    ot_computation *c;
    ot_instr *p[6];
    ot_shape s[6] = {S64(4, 8), S64(8), S64(8, 3), S64(3), S64(5, 4), S64(5, 3)};
    ot_module *m = new_mod(&c, p, 6, s);
    ot_computation *add = scalar_fn(m, OT_F64, OT_OP_ADD, "add");
    ot_computation *max = scalar_fn(m, OT_F64, OT_OP_MAXIMUM, "max");
    ot_dot_dims mm = {.ncontract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
    ot_instr *h = ot_build_dot(c, p[4], p[0], &mm, 0, 0);
    h = ot_build_binary(c, OT_OP_ADD, h, ot_build_broadcast(c, p[1], S64(5, 8), (int64_t[]){1}, 1));
    if (act == 0) {
        h = ot_build_binary(
            c, OT_OP_MAXIMUM, h,
            ot_build_broadcast(c, ot_build_constant_scalar(c, OT_F64, 0), S64(5, 8), NULL, 0));
    } else if (act == 1) {
        h = ot_build_unary(c, OT_OP_TANH, h);
    } else { /* GELU (tanh form): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
        ot_instr *x3 =
            ot_build_binary(c, OT_OP_MULTIPLY, h, ot_build_binary(c, OT_OP_MULTIPLY, h, h));
        ot_instr *k1 = ot_build_broadcast(c, ot_build_constant_scalar(c, OT_F64, 0.044715),
                                          S64(5, 8), NULL, 0);
        ot_instr *k2 = ot_build_broadcast(
            c, ot_build_constant_scalar(c, OT_F64, 0.7978845608028654), S64(5, 8), NULL, 0);
        ot_instr *half =
            ot_build_broadcast(c, ot_build_constant_scalar(c, OT_F64, 0.5), S64(5, 8), NULL, 0);
        ot_instr *one =
            ot_build_broadcast(c, ot_build_constant_scalar(c, OT_F64, 1), S64(5, 8), NULL, 0);
        ot_instr *in = ot_build_binary(
            c, OT_OP_MULTIPLY, k2,
            ot_build_binary(c, OT_OP_ADD, h, ot_build_binary(c, OT_OP_MULTIPLY, k1, x3)));
        ot_instr *t = ot_build_binary(c, OT_OP_ADD, one, ot_build_unary(c, OT_OP_TANH, in));
        h = ot_build_binary(c, OT_OP_MULTIPLY, half, ot_build_binary(c, OT_OP_MULTIPLY, h, t));
    }
    ot_instr *lg = ot_build_dot(c, h, p[2], &mm, 0, 0);
    lg = ot_build_binary(c, OT_OP_ADD, lg,
                         ot_build_broadcast(c, p[3], S64(5, 3), (int64_t[]){1}, 1));
    ot_instr *ninf = ot_build_constant_scalar(c, OT_F64, -INFINITY);
    ot_instr *zero = ot_build_constant_scalar(c, OT_F64, 0);
    ot_instr *mx = ot_build_reduce(c, &lg, &ninf, 1, (int64_t[]){1}, 1, max);
    ot_instr *sh = ot_build_binary(c, OT_OP_SUBTRACT, lg,
                                   ot_build_broadcast(c, mx, S64(5, 3), (int64_t[]){0}, 1));
    ot_instr *ex = ot_build_unary(c, OT_OP_EXP, sh);
    ot_instr *se = ot_build_reduce(c, &ex, &zero, 1, (int64_t[]){1}, 1, add);
    ot_instr *ls = ot_build_binary(
        c, OT_OP_SUBTRACT, sh,
        ot_build_broadcast(c, ot_build_unary(c, OT_OP_LOG, se), S64(5, 3), (int64_t[]){0}, 1));
    ot_instr *pl = ot_build_binary(c, OT_OP_MULTIPLY, p[5], ls);
    ot_instr *tot = ot_build_reduce(c, &pl, &zero, 1, (int64_t[]){0, 1}, 2, add);
    ot_instr *loss = ot_build_binary(c, OT_OP_DIVIDE, ot_build_unary(c, OT_OP_NEGATE, tot),
                                     ot_build_constant_scalar(c, OT_F64, 5));
    ot_computation_set_root(c, ot_build_tuple(c, (ot_instr *[]){lg, loss}, 2));
    return m;
}

static ot_value *mlp_args(void) {
    static ot_value a[6];
    ot_shape s[6] = {S64(4, 8), S64(8), S64(8, 3), S64(3), S64(5, 4), S64(5, 3)};
    for (int k = 0; k < 5; k++) a[k] = arg_uniform(s[k], -1, 1);
    ot_value_alloc_array(&a[5], &s[5]);
    for (int r = 0; r < 5; r++) ((double *)a[5].array.data)[r * 3 + r % 3] = 1;
    return a;
}

static void test_mlp(void) {
    for (int act = 0; act < 3; act++) {
        ot_module *m = mlp(act);
        ot_value *a = mlp_args();
        check_vjp(act == 0   ? "mlp relu"
                  : act == 1 ? "mlp tanh"
                             : "mlp gelu",
                  m, a, 6, (int64_t[]){0, 1, 2, 3}, 4);
    }
    /* ot_grad with loss_index 1: (logits, loss, dw1, db1, dw2, db2); each gradient equals the
     * vjp with cotangent (0, 1) */
    ot_module *m = mlp(0);
    ASSERT_OK(ot_module_finalize(m));
    ot_value *a = mlp_args();
    ot_grad_options o = ot_grad_options_default();
    EXPECT_INT_EQ(o.loss_index, -1);
    o.loss_index = 1;
    ot_module *g = NULL, *v = NULL;
    ASSERT_OK(ot_grad(m, (int64_t[]){2, 0}, 2, &o, &g));
    ASSERT_OK(ot_vjp(m, (int64_t[]){2, 0}, 2, &v));
    ot_value r, rv, all[8];
    ASSERT_OK(ot_evaluate(g, a, 6, NULL, &r));
    EXPECT_INT_EQ(r.ntuple, 4);
    for (int k = 0; k < 6; k++) all[k] = a[k];
    ot_value_alloc_array(&all[6], &r.tuple[0].array.shape);
    ot_shape sc = SCALAR64;
    ot_value_alloc_array(&all[7], &sc);
    *(double *)all[7].array.data = 1;
    ASSERT_OK(ot_evaluate(v, all, 8, NULL, &rv));
    EXPECT_TRUE(ot_value_equal(&r.tuple[2], &rv.tuple[2]));
    EXPECT_TRUE(ot_value_equal(&r.tuple[3], &rv.tuple[3]));
    EXPECT_TRUE(ot_value_equal(&r.tuple[1], &rv.tuple[1]));
    ot_value_release(&r);
    ot_value_release(&rv);
    ot_value_release(&all[6]);
    ot_value_release(&all[7]);
    for (int k = 0; k < 6; k++) ot_value_release(&a[k]);
    ot_module_free(g);
    ot_module_free(v);
    ot_module_free(m);
}

/* ---- errors -----------------------------------------------------------------------------------
 */

static void test_errors(void) {
    ot_computation *c;
    ot_instr *p[3];
    ot_shape s[3] = {S64(3), shp(OT_S32, 1, (int64_t[]){3}), S64(3)};
    ot_module *m = new_mod(&c, p, 3, s);
    ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, p[0], p[2]));
    ASSERT_OK(ot_module_finalize(m));
    ot_module *g = (ot_module *)1;
    /* the root is not a scalar */
    EXPECT_STATUS(ot_grad(m, (int64_t[]){0}, 1, NULL, &g), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "not a floating-point scalar");
    EXPECT_TRUE(g == NULL);
    ot_grad_options o = ot_grad_options_default();
    o.loss_index = 0;
    EXPECT_STATUS(ot_grad(m, (int64_t[]){0}, 1, &o, &g), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "not a tuple");
    EXPECT_STATUS(ot_vjp(m, (int64_t[]){3}, 1, &g), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "wrt[0] = 3 is out of range");
    EXPECT_STATUS(ot_vjp(m, (int64_t[]){-1}, 1, &g), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_vjp(m, (int64_t[]){0, 2, 0}, 3, &g), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "wrt[2] = 0 duplicates wrt[0]");
    EXPECT_STATUS(ot_vjp(m, (int64_t[]){1}, 1, &g), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "not a floating-point array");
    EXPECT_STATUS(ot_vjp(m, NULL, 1, &g), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_vjp(NULL, NULL, 0, &g), OT_ERR_INVALID_ARGUMENT);
    ot_module_free(m);

    /* loss_index out of range, and a loss that is not floating */
    m = new_mod(&c, p, 3, s);
    ot_computation *add = scalar_fn(m, OT_S32, OT_OP_ADD, "add");
    ot_instr *z = ot_build_constant_scalar(c, OT_S32, 0);
    ot_instr *isum = ot_build_reduce(c, &p[1], &z, 1, (int64_t[]){0}, 1, add);
    ot_computation_set_root(c, ot_build_tuple(c, (ot_instr *[]){p[0], isum}, 2));
    ASSERT_OK(ot_module_finalize(m));
    o.loss_index = 2;
    EXPECT_STATUS(ot_grad(m, (int64_t[]){0}, 1, &o, &g), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "loss_index 2 is out of range");
    o.loss_index = 1;
    EXPECT_STATUS(ot_grad(m, (int64_t[]){0}, 1, &o, &g), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "s32[]");
    ot_module_free(m);

    /* an op with no rule on the path: UNIMPLEMENTED naming it; off the path it is fine */
    m = new_mod(&c, p, 3, s);
    ot_ir_shape cs = ot_ir_shape_array(S64(3));
    ot_instr *cc = ot_build_custom_call(c, "my_op", &p[0], 1, &cs, NULL, false);
    ot_instr *cc2 = ot_build_custom_call(c, "other", &p[2], 1, &cs, NULL, false);
    ot_computation_set_root(c, ot_build_tuple(c, (ot_instr *[]){cc, cc2}, 2));
    ASSERT_OK(ot_module_finalize(m));
    EXPECT_STATUS(ot_vjp(m, (int64_t[]){0}, 1, &g), OT_ERR_UNIMPLEMENTED);
    EXPECT_STR_CONTAINS(ot_last_error(), "custom-call");
    EXPECT_STR_CONTAINS(ot_last_error(), "my_op");
    EXPECT_TRUE(g == NULL);
    ot_module_free(m);

    /* a collective on the path */
    m = new_mod(&c, p, 3, s);
    ot_computation *sum = scalar_fn(m, OT_F64, OT_OP_ADD, "sum");
    ot_computation_set_root(c, ot_build_all_reduce(c, &p[0], 1, NULL, 0, false, sum));
    ASSERT_OK(ot_module_finalize(m));
    EXPECT_STATUS(ot_vjp(m, (int64_t[]){0}, 1, &g), OT_ERR_UNIMPLEMENTED);
    EXPECT_STR_CONTAINS(ot_last_error(), "no reverse-mode rule for all-reduce");
    /* wrt p2 only: the all-reduce is off the path and p2's gradient is zero */
    ASSERT_OK(ot_vjp(m, (int64_t[]){2}, 1, &g));
    ot_module_free(g);
    ot_module_free(m);
}

/* Parameters that do not reach the loss get zeros; integer paths carry nothing; calls are
 * inlined. */
static void test_structure(void) {
    ot_computation *c;
    ot_instr *p[3];
    ot_shape s[3] = {S64(3), S64(3), S64(2)};
    ot_module *m = new_mod(&c, p, 3, s);
    ot_computation *f = ot_module_add_computation(m, "f");
    ot_instr *fa = ot_build_parameter(f, 0, S64(3), "a");
    ot_instr *fb = ot_build_parameter(f, 1, S64(3), "b");
    ot_instr *prod = ot_build_binary(f, OT_OP_MULTIPLY, fa, fb);
    ot_computation_set_root(
        f, ot_build_tuple(f, (ot_instr *[]){prod, ot_build_unary(f, OT_OP_EXP, fa)}, 2));
    ot_instr *call = ot_build_call(c, f, (ot_instr *[]){p[0], p[1]}, 2);
    ot_instr *e0 = ot_build_get_tuple_element(c, call, 0);
    ot_instr *e1 = ot_build_get_tuple_element(c, call, 1);
    /* through s32 and back: no gradient */
    ot_instr *viaint = ot_build_convert(c, ot_build_convert(c, p[1], OT_S32), OT_F64);
    ot_instr *sum = ot_build_binary(c, OT_OP_ADD, ot_build_binary(c, OT_OP_ADD, e0, e1), viaint);
    ot_computation_set_root(c, sum);
    ot_module_set_entry(m, c);
    ot_value a[3] = {arg_uniform(s[0], -1, 1), arg_uniform(s[1], -1, 1), arg_uniform(s[2], -1, 1)};
    check_vjp("call + tuple + integer path + unused param", m, a, 3, (int64_t[]){0, 1, 2}, 3);
}

/* A module with a convolution, max pooling, a gather and a scatter on the gradient path. */
static ot_module *cnn_like(void) {
    ot_computation *c;
    ot_instr *p[3];
    ot_shape s[3] = {S64(1, 1, 6, 6), S64(2, 1, 3, 3), shp(OT_S32, 1, (int64_t[]){2})};
    ot_module *m = new_mod(&c, p, 3, s);
    ot_conv_dims nchw = {.nspatial = 2,
                         .input_batch = 0,
                         .input_feature = 1,
                         .input_spatial = {2, 3},
                         .kernel_output_feature = 0,
                         .kernel_input_feature = 1,
                         .kernel_spatial = {2, 3},
                         .output_batch = 0,
                         .output_feature = 1,
                         .output_spatial = {2, 3}};
    ot_window w = win(2, (int64_t[]){3, 3}, NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1}, NULL, NULL);
    ot_instr *y = ot_build_convolution(c, p[0], p[1], &w, &nchw, 1, 1); /* [1,2,6,6] */
    ot_computation *max = scalar_fn(m, OT_F64, OT_OP_MAXIMUM, "max");
    ot_computation *add = scalar_fn(m, OT_F64, OT_OP_ADD, "add");
    ot_window pw = win(4, (int64_t[]){1, 1, 2, 2}, (int64_t[]){1, 1, 2, 2}, NULL, NULL, NULL, NULL);
    ot_instr *ninf = ot_build_constant_scalar(c, OT_F64, -INFINITY);
    ot_instr *pool = ot_build_reduce_window(c, &y, &ninf, 1, &pw, max); /* [1,2,3,3] */
    ot_instr *flat = ot_build_reshape(c, pool, S64(6, 3));
    ot_gather_dims gd = {.noffset = 1,
                         .offset_dims = {1},
                         .ncollapsed = 1,
                         .collapsed_slice_dims = {0},
                         .nstart_index_map = 1,
                         .start_index_map = {0},
                         .index_vector_dim = 1,
                         .nslice_sizes = 2,
                         .slice_sizes = {1, 3}};
    ot_instr *rows = ot_build_gather(c, flat, p[2], &gd); /* [2,3] */
    ot_scatter_dims sd = {.nupdate_window = 1,
                          .update_window_dims = {1},
                          .ninserted = 1,
                          .inserted_window_dims = {0},
                          .nscatter_to_operand = 1,
                          .scatter_dims_to_operand_dims = {0},
                          .index_vector_dim = 1};
    ot_instr *sc = ot_build_scatter(c, &flat, 1, p[2], &rows, &sd, add);
    ot_instr *z = ot_build_constant_scalar(c, OT_F64, 0);
    ot_instr *sq = ot_build_binary(c, OT_OP_MULTIPLY, sc, sc);
    ot_computation_set_root(c, ot_build_reduce(c, &sq, &z, 1, (int64_t[]){0, 1}, 2, add));
    return m;
}

/* Every allocation failing in turn: OUT_OF_MEMORY, nothing leaked, then success. */
static void test_alloc_failures(void) {
    for (int which = 0; which < 5; which++) {
        ot_module *m = which == 0   ? mlp(2)
                       : which == 1 ? loop_module(true)
                       : which == 2 ? cnn_like()
                       : which == 3 ? cond_module(false)
                                    : sort_kv_module();
        ASSERT_OK(ot_module_finalize(m));
        int64_t live = ot_alloc_live();
        ot_grad_options o = ot_grad_options_default();
        o.loss_index = 1;
        int ok_at = 0;
        for (int n = 1; n < 100000; n++) {
            ot_module *g = NULL;
            ot_alloc_fail_after(n);
            ot_status s = which == 0   ? ot_grad(m, (int64_t[]){0, 1, 2, 3}, 4, &o, &g)
                          : which != 2 ? ot_vjp(m, (int64_t[]){0, 1}, 2, &g)
                                       : ot_grad(m, (int64_t[]){0, 1}, 2, NULL, &g);
            ot_alloc_fail_after(0);
            if (s == OT_OK) {
                ok_at = n;
                ot_module_free(g);
                break;
            }
            if (s != OT_ERR_OUT_OF_MEMORY || g != NULL) {
                OT_T_FAIL_("module %d, allocation %d failing: %s (%s)", which, n, ot_status_str(s),
                           ot_last_error());
                break;
            }
            if (ot_alloc_live() != live) {
                OT_T_FAIL_("module %d, allocation %d failing leaked %lld", which, n,
                           (long long)(ot_alloc_live() - live));
                break;
            }
        }
        EXPECT_TRUE(ok_at > 1);
        EXPECT_INT_EQ(ot_alloc_live(), live);
        ot_module_free(m);
    }
    /* and the CNN-like module's gradient is right */
    ot_shape s[3] = {S64(1, 1, 6, 6), S64(2, 1, 3, 3), shp(OT_S32, 1, (int64_t[]){2})};
    ot_value a[3] = {arg_uniform(s[0], -1, 1), arg_uniform(s[1], -1, 1),
                     arg_int(OT_S32, 1, (int64_t[]){2}, (int64_t[]){4, 1})};
    check_vjp("conv + max pool + gather + scatter", cnn_like(), a, 3, (int64_t[]){0, 1}, 2);
}

static void test_leaks(void) {
    int64_t live = ot_alloc_live();
    ot_module *m = mlp(1);
    ot_value *a = mlp_args();
    check_vjp("mlp leak check", m, a, 6, (int64_t[]){0, 1, 2, 3, 4}, 5);
    EXPECT_INT_EQ(ot_alloc_live(), live);
}

OT_TEST_MAIN(OT_TEST(test_unary), OT_TEST(test_binary), OT_TEST(test_max_ties),
             OT_TEST(test_select_clamp_convert), OT_TEST(test_shape_ops), OT_TEST(test_reduce),
             OT_TEST(test_dot), OT_TEST(test_convolution), OT_TEST(test_reduce_window),
             OT_TEST(test_gather_scatter), OT_TEST(test_while), OT_TEST(test_conditional),
             OT_TEST(test_sort), OT_TEST(test_mlp), OT_TEST(test_errors), OT_TEST(test_structure),
             OT_TEST(test_alloc_failures), OT_TEST(test_leaks))
