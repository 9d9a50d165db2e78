/* Reference kernels and the evaluator: hand-computed expectations for every opcode, including
 * edge cases (NaN, -0.0, infinities, integer overflow, empty shapes), bad inputs and
 * allocation-failure cleanup. */
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "ot_test.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------------------- */

static ot_shape shp(ot_dtype t, int rank, const int64_t *dims) {
    ot_shape s;
    ot_shape_make(&s, t, rank, dims);
    return s;
}

static ot_shape vec(ot_dtype t, int64_t n) {
    return shp(t, 1, (int64_t[]){n});
}

static ot_value val(ot_shape s, const void *data) {
    ot_value v;
    ot_value_alloc_array(&v, &s);
    if (data && v.array.nbytes) memcpy(v.array.data, data, v.array.nbytes);
    return v;
}

/* Finalizes m and evaluates its entry on args; the module is freed. */
static ot_status run(ot_module *m, ot_value *args, int nargs, ot_value *out) {
    *out = ot_value_empty();
    ot_status s = ot_module_finalize(m);
    if (s == OT_OK) s = ot_evaluate(m, args, nargs, NULL, out);
    ot_module_free(m);
    for (int k = 0; k < nargs; k++) ot_value_release(&args[k]);
    return s;
}

/* One unary op over a vector. */
static ot_status run_unary(ot_opcode op, ot_shape in, const void *x, ot_value *out) {
    ot_module *m = ot_module_new("u");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *p = ot_build_parameter(c, 0, in, "x");
    ot_computation_set_root(c, ot_build_unary(c, op, p));
    ot_module_set_entry(m, c);
    ot_value a[1] = {val(in, x)};
    return run(m, a, 1, out);
}

static ot_status run_binary(ot_opcode op, ot_shape in, const void *x, const void *y,
                            ot_value *out) {
    ot_module *m = ot_module_new("b");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *p = ot_build_parameter(c, 0, in, "x");
    ot_instr *q = ot_build_parameter(c, 1, in, "y");
    ot_computation_set_root(c, ot_build_binary(c, op, p, q));
    ot_module_set_entry(m, c);
    ot_value a[2] = {val(in, x), val(in, y)};
    return run(m, a, 2, out);
}

static const float *F(const ot_value *v) {
    return (const float *)v->array.data;
}

static bool same_f(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && !signbit(a) == !signbit(b);
}

#define EXPECT_F(a, b)                                                                             \
    do {                                                                                           \
        ot_test_assertions_++;                                                                     \
        float fa_ = (a), fb_ = (b);                                                                \
        if (!same_f(fa_, fb_)) OT_T_FAIL_("%s == %s: %.9g != %.9g", #a, #b, fa_, fb_);             \
    } while (0)

/* A scalar binary computation (reducers, scatter updates). */
static ot_computation *scalar_fn(ot_module *m, const char *name, ot_opcode op, ot_dtype t) {
    ot_computation *r = ot_module_add_computation(m, name);
    ot_instr *a = ot_build_parameter(r, 0, ot_shape_scalar(t), "a");
    ot_instr *b = ot_build_parameter(r, 1, ot_shape_scalar(t), "b");
    ot_computation_set_root(r, ot_build_binary(r, op, a, b));
    return r;
}

/* ---- elementwise ----------------------------------------------------------------------- */

static void test_max_min_nan_signed_zero(void) {
    float x[] = {NAN, 1.0f, -0.0f, 0.0f, -INFINITY, 2.0f};
    float y[] = {1.0f, NAN, 0.0f, -0.0f, 3.0f, 2.0f};
    ot_value r;
    ASSERT_OK(run_binary(OT_OP_MAXIMUM, vec(OT_F32, 6), x, y, &r));
    EXPECT_TRUE(isnan(F(&r)[0]) && isnan(F(&r)[1]));
    EXPECT_F(F(&r)[2], 0.0f);
    EXPECT_F(F(&r)[3], 0.0f);
    EXPECT_F(F(&r)[4], 3.0f);
    EXPECT_F(F(&r)[5], 2.0f);
    ot_value_release(&r);
    ASSERT_OK(run_binary(OT_OP_MINIMUM, vec(OT_F32, 6), x, y, &r));
    EXPECT_TRUE(isnan(F(&r)[0]) && isnan(F(&r)[1]));
    EXPECT_F(F(&r)[2], -0.0f);
    EXPECT_F(F(&r)[3], -0.0f);
    EXPECT_F(F(&r)[4], -INFINITY);
    ot_value_release(&r);
}

static void test_float_arith(void) {
    float x[] = {1.0f, -1.0f, 0.0f, INFINITY, 5.5f, -7.0f};
    float y[] = {0.0f, 0.0f, 0.0f, INFINITY, 2.0f, 3.0f};
    ot_value r;
    ASSERT_OK(run_binary(OT_OP_DIVIDE, vec(OT_F32, 6), x, y, &r));
    EXPECT_F(F(&r)[0], INFINITY);
    EXPECT_F(F(&r)[1], -INFINITY);
    EXPECT_TRUE(isnan(F(&r)[2]) && isnan(F(&r)[3]));
    EXPECT_F(F(&r)[4], 2.75f);
    ot_value_release(&r);
    ASSERT_OK(run_binary(OT_OP_REMAINDER, vec(OT_F32, 6), x, y, &r));
    EXPECT_F(F(&r)[4], 1.5f);
    EXPECT_F(F(&r)[5], -1.0f); /* sign of the dividend (fmod) */
    EXPECT_TRUE(isnan(F(&r)[0]));
    ot_value_release(&r);
    float px[] = {1.0f, NAN, 2.0f, -8.0f, 0.0f, 2.0f};
    float py[] = {NAN, 0.0f, 10.0f, 1.0f / 3.0f, -1.0f, -1.0f};
    ASSERT_OK(run_binary(OT_OP_POWER, vec(OT_F32, 6), px, py, &r));
    EXPECT_F(F(&r)[0], 1.0f);
    EXPECT_F(F(&r)[1], 1.0f);
    EXPECT_F(F(&r)[2], 1024.0f);
    EXPECT_TRUE(isnan(F(&r)[3]));
    EXPECT_F(F(&r)[4], INFINITY);
    EXPECT_F(F(&r)[5], 0.5f);
    ot_value_release(&r);
    float ax[] = {1.0f, -1.0f, 0.0f, -0.0f, 0.0f, 1.0f};
    float ay[] = {1.0f, -1.0f, -1.0f, -1.0f, 0.0f, 0.0f};
    ASSERT_OK(run_binary(OT_OP_ATAN2, vec(OT_F32, 6), ax, ay, &r));
    EXPECT_NEAR(F(&r)[0], 0.78539816, 1e-6);
    EXPECT_NEAR(F(&r)[1], -2.3561945, 1e-6);
    EXPECT_NEAR(F(&r)[2], 3.14159265, 1e-6);
    EXPECT_NEAR(F(&r)[3], -3.14159265, 1e-6);
    EXPECT_F(F(&r)[4], 0.0f);
    ot_value_release(&r);
}

static void test_unary_float(void) {
    float x[] = {-2.5f, -0.5f, 0.5f, 1.5f, 2.5f, -0.0f, NAN, INFINITY};
    ot_shape s = vec(OT_F32, 8);
    ot_value r;
    ASSERT_OK(run_unary(OT_OP_ROUND_NEAREST_EVEN, s, x, &r));
    float ne[] = {-2.0f, -0.0f, 0.0f, 2.0f, 2.0f, -0.0f, NAN, INFINITY};
    for (int k = 0; k < 8; k++) EXPECT_F(F(&r)[k], ne[k]);
    ot_value_release(&r);
    ASSERT_OK(run_unary(OT_OP_ROUND_NEAREST_AFZ, s, x, &r));
    float afz[] = {-3.0f, -1.0f, 1.0f, 2.0f, 3.0f, -0.0f, NAN, INFINITY};
    for (int k = 0; k < 8; k++) EXPECT_F(F(&r)[k], afz[k]);
    ot_value_release(&r);
    ASSERT_OK(run_unary(OT_OP_SIGN, s, x, &r));
    float sg[] = {-1.0f, -1.0f, 1.0f, 1.0f, 1.0f, -0.0f, NAN, 1.0f};
    for (int k = 0; k < 8; k++) EXPECT_F(F(&r)[k], sg[k]);
    ot_value_release(&r);
    ASSERT_OK(run_unary(OT_OP_FLOOR, s, x, &r));
    EXPECT_F(F(&r)[0], -3.0f);
    EXPECT_F(F(&r)[2], 0.0f);
    ot_value_release(&r);
    ASSERT_OK(run_unary(OT_OP_CEIL, s, x, &r));
    EXPECT_F(F(&r)[1], -0.0f);
    ot_value_release(&r);
    ASSERT_OK(run_unary(OT_OP_ABS, s, x, &r));
    EXPECT_F(F(&r)[5], 0.0f);
    EXPECT_F(F(&r)[0], 2.5f);
    ot_value_release(&r);
    ASSERT_OK(run_unary(OT_OP_NEGATE, s, x, &r));
    EXPECT_F(F(&r)[5], 0.0f);
    ot_value_release(&r);
    ASSERT_OK(run_unary(OT_OP_IS_FINITE, s, x, &r));
    EXPECT_INT_EQ(r.array.shape.dtype, OT_PRED);
    const uint8_t *b = r.array.data;
    EXPECT_TRUE(b[0] == 1 && b[5] == 1 && b[6] == 0 && b[7] == 0);
    ot_value_release(&r);

    float t[] = {0.0f, 1.0f, -1.0f, 4.0f, -INFINITY, INFINITY, 100.0f, -100.0f};
    struct {
        ot_opcode op;
        double (*ref)(double);
    } fns[] = {{OT_OP_EXP, exp}, {OT_OP_EXPM1, expm1}, {OT_OP_TANH, tanh}, {OT_OP_SIN, sin},
               {OT_OP_COS, cos}, {OT_OP_ERF, erf},     {OT_OP_CBRT, cbrt}, {OT_OP_TAN, tan},
               {OT_OP_LOG, log}, {OT_OP_LOG1P, log1p}, {OT_OP_SQRT, sqrt}};
    for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++) {
        ASSERT_OK(run_unary(fns[f].op, s, t, &r));
        for (int k = 0; k < 8; k++) {
            double want = fns[f].ref(t[k]);
            float got = F(&r)[k];
            if (isnan(want))
                EXPECT_TRUE(isnan(got));
            else if (isinf(want) || fabs(want) > 3.4e38)
                EXPECT_F(got, (float)want);
            else
                EXPECT_NEAR(got, want, 1e-6 * fmax(1.0, fabs(want)));
        }
        ot_value_release(&r);
    }
    ASSERT_OK(run_unary(OT_OP_LOGISTIC, s, t, &r));
    EXPECT_F(F(&r)[0], 0.5f);
    EXPECT_F(F(&r)[4], 0.0f);
    EXPECT_F(F(&r)[5], 1.0f);
    EXPECT_NEAR(F(&r)[1], 0.7310586, 1e-6);
    ot_value_release(&r);
    ASSERT_OK(run_unary(OT_OP_RSQRT, s, t, &r));
    EXPECT_F(F(&r)[0], INFINITY);
    EXPECT_F(F(&r)[3], 0.5f);
    EXPECT_TRUE(isnan(F(&r)[2]));
    ot_value_release(&r);
}

static void test_int_division(void) {
    int32_t x[] = {7, -7, 7, INT32_MIN, INT32_MIN, 5, -5, 0};
    int32_t y[] = {2, 2, 0, -1, 0, -3, 0, 0};
    ot_value r;
    ASSERT_OK(run_binary(OT_OP_DIVIDE, vec(OT_S32, 8), x, y, &r));
    const int32_t *q = r.array.data;
    int32_t wq[] = {3, -3, -1, INT32_MIN, -1, -1, -1, -1};
    for (int k = 0; k < 8; k++) EXPECT_INT_EQ(q[k], wq[k]);
    ot_value_release(&r);
    ASSERT_OK(run_binary(OT_OP_REMAINDER, vec(OT_S32, 8), x, y, &r));
    q = r.array.data;
    int32_t wr[] = {1, -1, 7, 0, INT32_MIN, 2, -5, 0};
    for (int k = 0; k < 8; k++) EXPECT_INT_EQ(q[k], wr[k]);
    ot_value_release(&r);
    uint8_t ux[] = {200, 7, 0, 255};
    uint8_t uy[] = {0, 2, 0, 16};
    ASSERT_OK(run_binary(OT_OP_DIVIDE, vec(OT_U8, 4), ux, uy, &r));
    const uint8_t *u = r.array.data;
    EXPECT_INT_EQ(u[0], 255);
    EXPECT_INT_EQ(u[1], 3);
    EXPECT_INT_EQ(u[2], 255);
    EXPECT_INT_EQ(u[3], 15);
    ot_value_release(&r);
    ASSERT_OK(run_binary(OT_OP_REMAINDER, vec(OT_U8, 4), ux, uy, &r));
    u = r.array.data;
    EXPECT_INT_EQ(u[0], 200);
    EXPECT_INT_EQ(u[3], 15);
    ot_value_release(&r);
}

static void test_int_overflow_and_bits(void) {
    int8_t x[] = {127, -128, -128, 100, 3, -1};
    int8_t y[] = {1, -1, 2, 100, 2, 3};
    ot_value r;
    ASSERT_OK(run_binary(OT_OP_ADD, vec(OT_S8, 6), x, y, &r));
    const int8_t *v = r.array.data;
    EXPECT_INT_EQ(v[0], -128);
    EXPECT_INT_EQ(v[1], 127);
    EXPECT_INT_EQ(v[3], -56);
    ot_value_release(&r);
    ASSERT_OK(run_binary(OT_OP_MULTIPLY, vec(OT_S8, 6), x, y, &r));
    v = r.array.data;
    EXPECT_INT_EQ(v[1], -128);
    EXPECT_INT_EQ(v[2], 0);
    EXPECT_INT_EQ(v[3], 16);
    ot_value_release(&r);
    ASSERT_OK(run_binary(OT_OP_POWER, vec(OT_S8, 6), x, y, &r));
    v = r.array.data;
    EXPECT_INT_EQ(v[4], 9);
    EXPECT_INT_EQ(v[5], -1);
    EXPECT_INT_EQ(v[1], 0); /* negative exponent: 0 unless the base is 1 */
    ot_value_release(&r);
    /* XLA CPU uses the low 6 exponent bits: 3^64 -> 3^0 = 1 (s32), -1^-1 -> 0, 1^-5 -> 1 */
    int32_t pb[] = {3, 3, -1, 1, 2, -2};
    int32_t pe[] = {64, 65, -1, -5, 31, 3};
    ASSERT_OK(run_binary(OT_OP_POWER, vec(OT_S32, 6), pb, pe, &r));
    const int32_t *pv = r.array.data;
    int32_t pw[] = {1, 3, 0, 1, INT32_MIN, -8};
    for (int k = 0; k < 6; k++) EXPECT_INT_EQ(pv[k], pw[k]);
    ot_value_release(&r);
    uint8_t ub[] = {2, 1, 3}, ue[] = {200, 255, 5}; /* 200 and 255 have the sign bit set */
    ASSERT_OK(run_binary(OT_OP_POWER, vec(OT_U8, 3), ub, ue, &r));
    const uint8_t *uv = r.array.data;
    EXPECT_INT_EQ(uv[0], 0);
    EXPECT_INT_EQ(uv[1], 1);
    EXPECT_INT_EQ(uv[2], 243);
    ot_value_release(&r);
    ASSERT_OK(run_unary(OT_OP_ABS, vec(OT_S8, 6), x, &r));
    v = r.array.data;
    EXPECT_INT_EQ(v[1], -128); /* |INT_MIN| wraps */
    ot_value_release(&r);
    ASSERT_OK(run_unary(OT_OP_NEGATE, vec(OT_S8, 6), x, &r));
    v = r.array.data;
    EXPECT_INT_EQ(v[1], -128);
    EXPECT_INT_EQ(v[0], -127);
    ot_value_release(&r);

    uint32_t bx[] = {0, 1, 0xffffffffu, 0x00f00000u};
    ASSERT_OK(run_unary(OT_OP_POPCNT, vec(OT_U32, 4), bx, &r));
    const uint32_t *w = r.array.data;
    EXPECT_INT_EQ(w[0], 0);
    EXPECT_INT_EQ(w[2], 32);
    EXPECT_INT_EQ(w[3], 4);
    ot_value_release(&r);
    ASSERT_OK(run_unary(OT_OP_CLZ, vec(OT_U32, 4), bx, &r));
    w = r.array.data;
    EXPECT_INT_EQ(w[0], 32);
    EXPECT_INT_EQ(w[1], 31);
    EXPECT_INT_EQ(w[2], 0);
    EXPECT_INT_EQ(w[3], 8);
    ot_value_release(&r);
    int16_t cx[] = {0, 1, -1};
    ASSERT_OK(run_unary(OT_OP_CLZ, vec(OT_S16, 3), cx, &r));
    const int16_t *c16 = r.array.data;
    EXPECT_INT_EQ(c16[0], 16);
    EXPECT_INT_EQ(c16[1], 15);
    EXPECT_INT_EQ(c16[2], 0);
    ot_value_release(&r);
    ASSERT_OK(run_unary(OT_OP_NOT, vec(OT_S16, 3), cx, &r));
    c16 = r.array.data;
    EXPECT_INT_EQ(c16[0], -1);
    EXPECT_INT_EQ(c16[2], 0);
    ot_value_release(&r);
    uint8_t px[] = {0, 1};
    ASSERT_OK(run_unary(OT_OP_NOT, vec(OT_PRED, 2), px, &r));
    EXPECT_INT_EQ(((uint8_t *)r.array.data)[0], 1);
    EXPECT_INT_EQ(((uint8_t *)r.array.data)[1], 0);
    ot_value_release(&r);
}

static void test_shifts(void) {
    int32_t x[] = {1, 1, -8, -8, -8, 0x40000000, 5, -1};
    int32_t y[] = {31, 32, 1, 40, -1, 1, 0, 31};
    ot_value r;
    ASSERT_OK(run_binary(OT_OP_SHIFT_LEFT, vec(OT_S32, 8), x, y, &r));
    const int32_t *v = r.array.data;
    EXPECT_INT_EQ(v[0], INT32_MIN);
    EXPECT_INT_EQ(v[1], 0);
    EXPECT_INT_EQ(v[3], 0);
    EXPECT_INT_EQ(v[4], 0);
    EXPECT_INT_EQ(v[5], INT32_MIN);
    ot_value_release(&r);
    ASSERT_OK(run_binary(OT_OP_SHIFT_RIGHT_ARITHMETIC, vec(OT_S32, 8), x, y, &r));
    v = r.array.data;
    EXPECT_INT_EQ(v[2], -4);
    EXPECT_INT_EQ(v[3], -1);
    EXPECT_INT_EQ(v[4], -1);
    EXPECT_INT_EQ(v[1], 0);
    EXPECT_INT_EQ(v[7], -1);
    ot_value_release(&r);
    ASSERT_OK(run_binary(OT_OP_SHIFT_RIGHT_LOGICAL, vec(OT_S32, 8), x, y, &r));
    v = r.array.data;
    EXPECT_INT_EQ(v[2], 0x7ffffffc);
    EXPECT_INT_EQ(v[3], 0);
    EXPECT_INT_EQ(v[7], 1);
    ot_value_release(&r);
    uint32_t a[] = {0xffu, 0xffu, 0xffu};
    uint32_t b[] = {0xffu, 0xf0u, 0x0fu};
    ASSERT_OK(run_binary(OT_OP_XOR, vec(OT_U32, 3), a, b, &r));
    EXPECT_INT_EQ(((uint32_t *)r.array.data)[1], 0x0f);
    ot_value_release(&r);
    ASSERT_OK(run_binary(OT_OP_AND, vec(OT_U32, 3), a, b, &r));
    EXPECT_INT_EQ(((uint32_t *)r.array.data)[1], 0xf0);
    ot_value_release(&r);
    ASSERT_OK(run_binary(OT_OP_OR, vec(OT_U32, 3), b, b, &r));
    EXPECT_INT_EQ(((uint32_t *)r.array.data)[2], 0x0f);
    ot_value_release(&r);
}

static ot_status run_compare(ot_shape s, const void *x, const void *y, ot_cmp_dir d, ot_cmp_type t,
                             ot_value *out) {
    ot_module *m = ot_module_new("c");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *p = ot_build_parameter(c, 0, s, "x");
    ot_instr *q = ot_build_parameter(c, 1, s, "y");
    ot_computation_set_root(c, ot_build_compare(c, p, q, d, t));
    ot_module_set_entry(m, c);
    ot_value a[2] = {val(s, x), val(s, y)};
    return run(m, a, 2, out);
}

static void test_compare(void) {
    float x[] = {NAN, 1.0f, -0.0f, -NAN, 1.0f, -INFINITY};
    float y[] = {NAN, NAN, 0.0f, -INFINITY, 2.0f, -INFINITY};
    ot_value r;
    ASSERT_OK(run_compare(vec(OT_F32, 6), x, y, OT_CMP_EQ, OT_CMP_TYPE_DEFAULT, &r));
    const uint8_t *b = r.array.data;
    uint8_t eq[] = {0, 0, 1, 0, 0, 1};
    for (int k = 0; k < 6; k++) EXPECT_INT_EQ(b[k], eq[k]);
    ot_value_release(&r);
    ASSERT_OK(run_compare(vec(OT_F32, 6), x, y, OT_CMP_NE, OT_CMP_TYPE_FLOAT, &r));
    b = r.array.data;
    EXPECT_INT_EQ(b[0], 1);
    EXPECT_INT_EQ(b[1], 1);
    EXPECT_INT_EQ(b[2], 0);
    ot_value_release(&r);
    ASSERT_OK(run_compare(vec(OT_F32, 6), x, y, OT_CMP_LT, OT_CMP_TYPE_TOTALORDER, &r));
    b = r.array.data;
    uint8_t lt[] = {0, 1, 1, 1, 1, 0}; /* 1 < NaN; -0 < +0; -NaN < -inf */
    for (int k = 0; k < 6; k++) EXPECT_INT_EQ(b[k], lt[k]);
    ot_value_release(&r);
    ASSERT_OK(run_compare(vec(OT_F32, 6), x, y, OT_CMP_EQ, OT_CMP_TYPE_TOTALORDER, &r));
    b = r.array.data;
    EXPECT_INT_EQ(b[0], 1); /* same NaN bits are equal in total order */
    EXPECT_INT_EQ(b[2], 0);
    ot_value_release(&r);
    int32_t ix[] = {-1, 3};
    int32_t iy[] = {1, 3};
    ASSERT_OK(run_compare(vec(OT_S32, 2), ix, iy, OT_CMP_LT, OT_CMP_TYPE_DEFAULT, &r));
    EXPECT_INT_EQ(((uint8_t *)r.array.data)[0], 1);
    ot_value_release(&r);
    uint32_t ux[] = {0xffffffffu, 3}, uy[] = {1, 3};
    ASSERT_OK(run_compare(vec(OT_U32, 2), ux, uy, OT_CMP_LT, OT_CMP_TYPE_DEFAULT, &r));
    EXPECT_INT_EQ(((uint8_t *)r.array.data)[0], 0);
    EXPECT_INT_EQ(((uint8_t *)r.array.data)[1], 0);
    ot_value_release(&r);
    ASSERT_OK(run_compare(vec(OT_S32, 2), ix, iy, OT_CMP_GE, OT_CMP_TYPE_DEFAULT, &r));
    EXPECT_INT_EQ(((uint8_t *)r.array.data)[1], 1);
    ot_value_release(&r);
}

static ot_status run_convert(ot_shape in, const void *x, ot_dtype to, ot_value *out) {
    ot_module *m = ot_module_new("cv");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *p = ot_build_parameter(c, 0, in, "x");
    ot_computation_set_root(c, ot_build_convert(c, p, to));
    ot_module_set_entry(m, c);
    ot_value a[1] = {val(in, x)};
    return run(m, a, 1, out);
}

static void test_convert(void) {
    float x[] = {NAN, 1e10f, -1e10f, 2.9f, -2.9f, INFINITY, -0.5f, 127.5f};
    ot_value r;
    ASSERT_OK(run_convert(vec(OT_F32, 8), x, OT_S32, &r));
    const int32_t *v = r.array.data;
    int32_t want[] = {0, INT32_MAX, INT32_MIN, 2, -2, INT32_MAX, 0, 127};
    for (int k = 0; k < 8; k++) EXPECT_INT_EQ(v[k], want[k]);
    ot_value_release(&r);
    ASSERT_OK(run_convert(vec(OT_F32, 8), x, OT_U8, &r));
    const uint8_t *u = r.array.data;
    uint8_t wu[] = {0, 255, 0, 2, 0, 255, 0, 127};
    for (int k = 0; k < 8; k++) EXPECT_INT_EQ(u[k], wu[k]);
    ot_value_release(&r);
    ASSERT_OK(run_convert(vec(OT_F32, 8), x, OT_PRED, &r));
    u = r.array.data;
    EXPECT_INT_EQ(u[0], 1); /* NaN != 0 */
    EXPECT_INT_EQ(u[6], 1);
    ot_value_release(&r);
    ASSERT_OK(run_convert(vec(OT_F32, 8), x, OT_S64, &r));
    EXPECT_INT_EQ(((int64_t *)r.array.data)[1], 10000000000ll);
    ot_value_release(&r);
    /* f32 -> bf16 and f16: round to nearest even, overflow to inf, NaN kept */
    float h[] = {1.0f + 1.0f / 256.0f,
                 1.0f + 3.0f / 256.0f,
                 70000.0f,
                 NAN,
                 -0.0f,
                 65504.0f,
                 65520.0f,
                 1e-8f};
    ASSERT_OK(run_convert(vec(OT_F32, 8), h, OT_BF16, &r));
    const uint16_t *b = r.array.data;
    EXPECT_INT_EQ(b[0], 0x3f80); /* tie to even: 1.0 */
    EXPECT_INT_EQ(b[1], 0x3f82);
    EXPECT_TRUE((b[3] & 0x7f80) == 0x7f80 && (b[3] & 0x7f));
    EXPECT_INT_EQ(b[4], 0x8000);
    ot_value_release(&r);
    ASSERT_OK(run_convert(vec(OT_F32, 8), h, OT_F16, &r));
    b = r.array.data;
    EXPECT_INT_EQ(b[2], 0x7c00);
    EXPECT_INT_EQ(b[5], 0x7bff);
    EXPECT_INT_EQ(b[6], 0x7c00); /* 65520 rounds up to inf */
    EXPECT_INT_EQ(b[7], 0x0000); /* below half the smallest subnormal */
    ot_value_release(&r);
    /* f64 -> f16 rounds once (no double rounding through f32) */
    double d[] = {1.0 + 1.0 / 2048.0 + 1e-12, 2049.0};
    ASSERT_OK(run_convert(vec(OT_F64, 2), d, OT_F16, &r));
    b = r.array.data;
    EXPECT_INT_EQ(b[0], 0x3c01);
    EXPECT_INT_EQ(b[1], 0x6800); /* 2049 ties to 2048 */
    ot_value_release(&r);
    /* s32 -> f32 beyond 2^24, and s64 -> f32 (one rounding) */
    int32_t i[] = {16777217, -16777219};
    ASSERT_OK(run_convert(vec(OT_S32, 2), i, OT_F32, &r));
    EXPECT_F(F(&r)[0], 16777216.0f);
    EXPECT_F(F(&r)[1], -16777220.0f);
    ot_value_release(&r);
    int64_t l[] = {(1ll << 60) + (1ll << 36) + 1, INT64_MIN};
    ASSERT_OK(run_convert(vec(OT_S64, 2), l, OT_F32, &r));
    EXPECT_F(F(&r)[0], (float)((1ll << 60) + (1ll << 37)));
    EXPECT_F(F(&r)[1], -9.223372e18f);
    ot_value_release(&r);
    uint64_t ul[] = {UINT64_MAX};
    ASSERT_OK(run_convert(vec(OT_U64, 1), ul, OT_F32, &r));
    EXPECT_F(F(&r)[0], 18446744073709551616.0f);
    ot_value_release(&r);
    int32_t t[] = {300, -1};
    ASSERT_OK(run_convert(vec(OT_S32, 2), t, OT_S8, &r));
    EXPECT_INT_EQ(((int8_t *)r.array.data)[0], 44); /* integer narrowing wraps */
    EXPECT_INT_EQ(((int8_t *)r.array.data)[1], -1);
    ot_value_release(&r);
    ASSERT_OK(run_convert(vec(OT_S32, 2), t, OT_U32, &r));
    EXPECT_U64_EQ(((uint32_t *)r.array.data)[1], 0xffffffffu);
    ot_value_release(&r);
}

static void test_bf16_arith_rounds_once(void) {
    /* bf16 add computed in f32, rounded once: 1 + 2^-8 ties to 1, 1 + 3*2^-8 -> 1 + 2^-6 */
    uint16_t x[] = {0x3f80, 0x3f80, 0x7f80};
    uint16_t y[] = {0x3b80, 0x3c40, 0xff80}; /* 2^-8, 3 * 2^-8, -inf */
    ot_value r;
    ASSERT_OK(run_binary(OT_OP_ADD, vec(OT_BF16, 3), x, y, &r));
    const uint16_t *b = r.array.data;
    EXPECT_INT_EQ(b[0], 0x3f80);
    EXPECT_INT_EQ(b[1], 0x3f82);
    EXPECT_TRUE((b[2] & 0x7f80) == 0x7f80 && (b[2] & 0x7f));
    ot_value_release(&r);
}

static void test_reduce_precision(void) {
    float x[] = {1.0f + 1.0f / 2048.0f,
                 1.0f + 3.0f / 2048.0f,
                 1e-6f,
                 70000.0f,
                 NAN,
                 -INFINITY,
                 -1e-30f,
                 65504.0f};
    ot_shape s = vec(OT_F32, 8);
    ot_module *m = ot_module_new("rp");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *p = ot_build_parameter(c, 0, s, "x");
    ot_computation_set_root(c, ot_build_reduce_precision(c, p, 5, 10)); /* f16 */
    ot_module_set_entry(m, c);
    ot_value a[1] = {val(s, x)}, r;
    ASSERT_OK(run(m, a, 1, &r));
    EXPECT_F(F(&r)[0], 1.0f);
    EXPECT_F(F(&r)[1], 1.0f + 2.0f / 1024.0f);
    EXPECT_F(F(&r)[2], 0.0f); /* below the f16 normal range: flushed to zero */
    EXPECT_F(F(&r)[3], INFINITY);
    EXPECT_TRUE(isnan(F(&r)[4]));
    EXPECT_F(F(&r)[5], -INFINITY);
    EXPECT_F(F(&r)[6], -0.0f);
    EXPECT_F(F(&r)[7], 65504.0f);
    ot_value_release(&r);
}

static void test_select_clamp(void) {
    ot_shape s = vec(OT_F32, 4);
    ot_module *m = ot_module_new("sc");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *p = ot_build_parameter(c, 0, vec(OT_PRED, 4), "p");
    ot_instr *x = ot_build_parameter(c, 1, s, "x");
    ot_instr *y = ot_build_parameter(c, 2, s, "y");
    ot_instr *lo = ot_build_constant_scalar(c, OT_F32, -1.0);
    ot_instr *hi = ot_build_constant_scalar(c, OT_F32, 1.0);
    ot_instr *sel = ot_build_select(c, p, x, y);
    ot_instr *cl = ot_build_clamp(c, lo, sel, hi);
    ot_instr *outs[2] = {sel, cl};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 2));
    ot_module_set_entry(m, c);
    uint8_t pd[] = {1, 0, 1, 0};
    float xd[] = {5.0f, 0.0f, NAN, 0.0f}, yd[] = {0.0f, -3.0f, 0.0f, 0.25f};
    ot_value a[3] = {val(vec(OT_PRED, 4), pd), val(s, xd), val(s, yd)}, r;
    ASSERT_OK(run(m, a, 3, &r));
    ASSERT_TRUE(r.kind == OT_IR_TUPLE && r.ntuple == 2);
    EXPECT_F(F(&r.tuple[0])[0], 5.0f);
    EXPECT_F(F(&r.tuple[0])[1], -3.0f);
    EXPECT_F(F(&r.tuple[1])[0], 1.0f);
    EXPECT_F(F(&r.tuple[1])[1], -1.0f);
    EXPECT_TRUE(isnan(F(&r.tuple[1])[2]));
    EXPECT_F(F(&r.tuple[1])[3], 0.25f);
    ot_value_release(&r);
}

static void test_bitcast_convert_iota(void) {
    ot_module *m = ot_module_new("bc");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *io = ot_build_iota(c, shp(OT_F32, 2, (int64_t[]){2, 3}), 1);
    ot_instr *bc = ot_build_bitcast_convert(c, io, OT_U32);
    ot_instr *io2 = ot_build_iota(c, shp(OT_S32, 2, (int64_t[]){2, 3}), 0);
    ot_instr *outs[2] = {bc, io2};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 2));
    ot_module_set_entry(m, c);
    ot_value r;
    ASSERT_OK(run(m, NULL, 0, &r));
    const uint32_t *u = r.tuple[0].array.data;
    EXPECT_U64_EQ(u[0], 0);
    EXPECT_U64_EQ(u[1], 0x3f800000u);
    EXPECT_U64_EQ(u[5], 0x40000000u);
    const int32_t *s = r.tuple[1].array.data;
    EXPECT_INT_EQ(s[2], 0);
    EXPECT_INT_EQ(s[3], 1);
    ot_value_release(&r);
}

/* ---- bad input ------------------------------------------------------------------------- */

static ot_module *axpy(void) {
    ot_module *m = ot_module_new("axpy");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_shape v = vec(OT_F32, 3);
    ot_instr *a = ot_build_parameter(c, 0, v, "a");
    ot_instr *x = ot_build_parameter(c, 1, v, "x");
    ot_computation_set_root(c, ot_build_binary(c, OT_OP_ADD, a, x));
    ot_module_set_entry(m, c);
    ot_module_finalize(m);
    return m;
}

static void test_bad_args(void) {
    ot_module *m = axpy();
    float d[3] = {1, 2, 3};
    ot_value a[2] = {val(vec(OT_F32, 3), d), val(vec(OT_F32, 4), NULL)}, r;
    EXPECT_STATUS(ot_evaluate(m, a, 1, NULL, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "takes 2 arguments, got 1");
    EXPECT_STATUS(ot_evaluate(m, a, 2, NULL, &r), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STR_CONTAINS(ot_last_error(), "parameter 1 (x) expects f32[3], got f32[4]");
    EXPECT_INT_EQ(r.kind, OT_IR_TOKEN);
    ot_value_release(&a[1]);
    a[1] = val(vec(OT_S32, 3), NULL);
    EXPECT_STATUS(ot_evaluate(m, a, 2, NULL, &r), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STR_CONTAINS(ot_last_error(), "got s32[3]");
    ot_value_release(&a[1]);
    ot_value_tuple(&a[1], 0);
    EXPECT_STATUS(ot_evaluate(m, a, 2, NULL, &r), OT_ERR_SHAPE_MISMATCH);
    ot_value_release(&a[1]);
    a[1] = val(vec(OT_F32, 3), d);
    ASSERT_OK(ot_evaluate(m, a, 2, NULL, &r));
    EXPECT_F(F(&r)[2], 6.0f);
    ot_value_release(&r);
    EXPECT_STATUS(ot_evaluate(NULL, a, 2, NULL, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_evaluate(m, NULL, 2, NULL, &r), OT_ERR_INVALID_ARGUMENT);
    ot_value_release(&a[0]);
    ot_value_release(&a[1]);
    ot_module_free(m);
}

static void test_elided_constant_and_custom_call(void) {
    ot_module *m = ot_module_new("el");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_literal lit = {true, 0, NULL};
    ot_attrs at;
    memset(&at, 0, sizeof at);
    at.literal = &lit;
    ot_ir_shape hs = ot_ir_shape_array(vec(OT_F32, 4));
    ot_instr *k = ot_build(c, OT_OP_CONSTANT, NULL, 0, &at, NULL, 0, &hs, "big");
    ot_computation_set_root(c, ot_build_unary(c, OT_OP_NEGATE, k));
    ot_module_set_entry(m, c);
    ot_value r;
    EXPECT_STATUS(run(m, NULL, 0, &r), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STR_CONTAINS(ot_last_error(), "constant big is elided");

    m = ot_module_new("cc");
    c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, vec(OT_F32, 2), "x");
    ot_ir_shape cs = ot_ir_shape_array(vec(OT_F32, 2));
    ot_computation_set_root(c, ot_build_custom_call(c, "MyKernel", &x, 1, &cs, NULL, false));
    ot_module_set_entry(m, c);
    ot_value a[1] = {val(vec(OT_F32, 2), NULL)};
    EXPECT_STATUS(run(m, a, 1, &r), OT_ERR_UNIMPLEMENTED);
    EXPECT_STR_CONTAINS(ot_last_error(), "MyKernel");
}

/* A module with a while loop, a reduce and a dot: evaluation under allocation failures leaks
 * nothing and fails cleanly. */
/* f32 exp is the library's own polynomial (src/exec/expf_poly.h, also in generated code): on a
 * spread of 2^20 f32 bit patterns (every f32 input was checked once, see the header) it is within
 * 0.9 ulp of e^x and 1 ulp of glibc's expf, equal to glibc's on all but a few in a hundred here,
 * and the special values are exact: 0 and inf at the thresholds, NaN quieted, subnormal results
 * rounded once when the evaluator keeps them and flushed when it does not. */
static double ulp_of(double e) {
    int ee;
    frexp(e, &ee);
    return ldexp(1.0, ee - 24 < -149 ? -149 : ee - 24);
}

static void test_expf_poly(void) {
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x);
    ASSERT_TRUE(x);
    uint64_t g = 0x9e3779b97f4a7c15ull;
    static const float sp[] = {
        0.0f,      -0.0f,       INFINITY,   -INFINITY, NAN,        1.0f,          -1.0f,
        88.72283f, 88.7229f,    -87.33654f, -103.9f,   -104.0f,    1e30f,         -1e30f,
        1e-30f,    -1e-30f,     200.0f,     -200.0f,   200.00002f, 0.5f,          -87.33655f,
        -95.0f,    -103.27893f, -103.2789f, 0x1p-24f,  -0x1p-25f,  0x1.ab04ecp+4f};
    int nsp = (int)(sizeof sp / sizeof sp[0]);
    for (int j = 0; j < N; j++) {
        g = g * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t b = (uint32_t)(g >> 32);
        if (j % 4 == 1) b = (b & 0x80000000u) | (0x3c000000u + b % 0x7800000u); /* 2^-7 .. 2^8 */
        if (j % 4 == 2) b = 0xc2ae0000u + b % 0x100000u; /* -87 .. -104: subnormal results */
        memcpy(&x[j], &b, 4);
        if (j < nsp) x[j] = sp[j];
    }
    /* exact too: the clamp's bounds (89 and -200, as bits) and beyond, and NaNs of both signs,
     * quiet and signalling, whose clamped value is 89 or -200 */
    static const uint32_t sp2[] = {0x42b20000u, 0x42b1ffffu, 0x42b20001u, 0x43160000u, 0x7f7fffffu,
                                   0xc3480000u, 0xc3480001u, 0xc347ffffu, 0xff7fffffu, 0x80000001u,
                                   0x00000001u, 0xffc00001u, 0x7f800001u, 0xff800001u};
    int nsp2 = (int)(sizeof sp2 / sizeof sp2[0]);
    for (int k = 0; k < nsp2; k++) memcpy(&x[nsp + k], &sp2[k], 4);
    for (int keep = 0; keep < 2; keep++) {
        ot_value r = ot_value_empty();
        ot_shape s = vec(OT_F32, N);
        ot_module *m = ot_module_new("expf");
        ot_computation *c = ot_module_add_computation(m, "main");
        ot_instr *p = ot_build_parameter(c, 0, s, "x");
        ot_computation_set_root(c, ot_build_unary(c, OT_OP_EXP, p));
        ot_module_set_entry(m, c);
        ot_value a[1] = {val(s, x)};
        ot_eval_options o = {0};
        o.keep_denormals = keep == 1;
        ASSERT_OK(ot_module_finalize(m));
        ASSERT_OK(ot_evaluate(m, a, 1, &o, &r));
        ot_value_release(&a[0]);
        ot_module_free(m);
        int64_t differ = 0, far = 0, subn = 0;
        double worst = 0;
        for (int j = 0; j < N; j++) {
            float got = F(&r)[j], lib = expf(x[j]);
            /* without keep_denormals the evaluator flushes subnormal results: compare glibc's
             * the same way */
            if (!keep && fabsf(lib) < FLT_MIN) lib = copysignf(0.0f, lib);
            uint32_t ug, ul;
            memcpy(&ug, &got, 4);
            memcpy(&ul, &lib, 4);
            if (isnan(x[j])) {
                EXPECT_TRUE(isnan(got) && (ug & 0x400000u));
                continue;
            }
            if (got != 0 && fabsf(got) < FLT_MIN) subn++;
            double ex = exp((double)x[j]);
            if (ex < 0x1p128 && (keep || ex >= 0x1p-126)) {
                double err = fabs((double)got - ex) / ulp_of(ex);
                if (err > worst) worst = err;
            }
            if (ug == ul) continue;
            differ++;
            if ((ug > ul ? ug - ul : ul - ug) > 1) {
                if (far++ < 5)
                    OT_T_FAIL_("exp(%a) = %a, glibc %a", (double)x[j], (double)got, (double)lib);
            }
            if (j < 20 || (j >= nsp && j < nsp + nsp2)) /* the listed specials: exact */
                OT_T_FAIL_("exp(%a) = %a, glibc %a", (double)x[j], (double)got, (double)lib);
        }
        EXPECT_INT_EQ(far, 0);
        EXPECT_TRUE(worst < 0.9);
        EXPECT_TRUE(differ < N / 20);
        if (keep)
            EXPECT_TRUE(subn > N / 8);
        else
            EXPECT_INT_EQ(subn, 0);
        ot_value_release(&r);
    }
    free(x);
}

/* f32 tanh is the library's own branch-free function too (ot_tanhf in src/exec/expf_poly.h, also
 * in generated code; bench_vmath ulp measured 1.371 ulp at most over every f32 input): on a spread
 * of 2^20 inputs (a third of them in the polynomial's range, a third around its 0.625 switch and
 * the saturation at 9) it is within 1.4 ulp of tanh in double and equals tanh rounded on all but a
 * few in a hundred; the special values are exact: ±0, x itself below 2^-12, ±1 from 10 on and at
 * ±inf, NaN quieted with its sign, a subnormal x kept with keep_denormals and flushed to a signed
 * zero without. */
static void test_tanhf_poly(void) {
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x);
    ASSERT_TRUE(x);
    uint64_t g = 0x2545f4914f6cdd1dull;
    static const float sp[] = {0.0f,      -0.0f,      INFINITY,     -INFINITY, 10.0f,
                               -10.0f,    1e30f,      -1e30f,       0x1p-12f,  -0x1.fffffep-13f,
                               0x1p-126f, -0x1p-126f, 1e-30f,       0.625f,    -0.625f,
                               9.0f,      9.1f,       0.099609375f, 0x1p-149f, -0x1.fffffcp-127f};
    int nsp = (int)(sizeof sp / sizeof sp[0]);
    for (int j = 0; j < N; j++) {
        g = g * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t b = (uint32_t)(g >> 32);
        if (j % 3 == 1) b = (b & 0x80000000u) | (0x39800000u + b % 0x5a00000u); /* 2^-12 .. 0.7 */
        memcpy(&x[j], &b, 4);
        if (j % 3 == 2) x[j] = (float)((double)(b >> 8) * 0x1p-24 * 20.0 - 10.0); /* -10 .. 10 */
        if (j < nsp) x[j] = sp[j];
    }
    static const uint32_t nans[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff800001u};
    for (int k = 0; k < 4; k++) memcpy(&x[nsp + k], &nans[k], 4);
    for (int keep = 0; keep < 2; keep++) {
        ot_value r = ot_value_empty();
        ot_shape s = vec(OT_F32, N);
        ot_module *m = ot_module_new("tanhf");
        ot_computation *c = ot_module_add_computation(m, "main");
        ot_instr *p = ot_build_parameter(c, 0, s, "x");
        ot_computation_set_root(c, ot_build_unary(c, OT_OP_TANH, p));
        ot_module_set_entry(m, c);
        ot_value a[1] = {val(s, x)};
        ot_eval_options o = {0};
        o.keep_denormals = keep == 1;
        ASSERT_OK(ot_module_finalize(m));
        ASSERT_OK(ot_evaluate(m, a, 1, &o, &r));
        ot_value_release(&a[0]);
        ot_module_free(m);
        int64_t differ = 0;
        double worst = 0;
        for (int j = 0; j < N; j++) {
            float xj = x[j], got = F(&r)[j];
            uint32_t ux, ug;
            memcpy(&ux, &xj, 4);
            memcpy(&ug, &got, 4);
            if (isnan(xj)) {
                EXPECT_TRUE(isnan(got) && ug == (ux | 0x400000u));
                continue;
            }
            float want; /* the exact special values */
            bool special = true;
            if (xj != 0 && fabsf(xj) < FLT_MIN)
                want = keep ? xj : copysignf(0.0f, xj);
            else if (fabsf(xj) < 0x1p-12f)
                want = xj;
            else if (fabsf(xj) >= 10.0f)
                want = copysignf(1.0f, xj);
            else
                special = false;
            uint32_t uw;
            memcpy(&uw, &want, 4);
            if (special && ug != uw)
                OT_T_FAIL_("tanh(%a) = %a, want %a", (double)xj, (double)got, (double)want);
            if (special) continue;
            double ex = tanh((double)xj), err = fabs((double)got - ex) / ulp_of(ex);
            if (err > worst) worst = err;
            if ((float)ex != got) differ++;
        }
        EXPECT_TRUE(worst < 1.4);
        EXPECT_TRUE(differ < N / 50);
        ot_value_release(&r);
    }
    free(x);
}

/* f32 erf is the library's own branch-free function (ot_erff in src/exec/expf_poly.h, also in
 * generated code; bench_vmath ulp --fn erf measured 1.187 ulp at most over every f32 input): on a
 * spread of 2^20 inputs (a third around the polynomial's range below 1 and its switch at 1, a
 * third in [-4.5, 4.5]) it is within 1.2 ulp of erf in double and equals erf rounded on all but a
 * few in a hundred (a subnormal x with keep_denormals included); the special values are exact:
 * ±0, ±1 from 4 on and at ±inf, NaN quieted with its sign and payload, a signed zero for a
 * subnormal x without keep_denormals. */
static void test_erff_poly(void) {
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x);
    ASSERT_TRUE(x);
    uint64_t g = 0x9e3779b97f4a7c15ull;
    static const float sp[] = {0.0f,   -0.0f,    INFINITY,       -INFINITY, 4.0f,
                               -4.0f,  3.9f,     -3.8325f,       1e30f,     -1e30f,
                               1.0f,   -1.0f,    0x1.fffffep-1f, 0x1p-126f, -0x1p-126f,
                               1e-30f, 0x1p-30f, 0x1p-31f,       0x1p-149f, -0x1.fffffcp-127f};
    int nsp = (int)(sizeof sp / sizeof sp[0]);
    for (int j = 0; j < N; j++) {
        g = g * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t b = (uint32_t)(g >> 32);
        if (j % 3 == 1) b = (b & 0x80000000u) | (0x3c000000u + b % 0x3c00000u); /* 2^-7 .. 2 */
        memcpy(&x[j], &b, 4);
        if (j % 3 == 2) x[j] = (float)((double)(b >> 8) * 0x1p-24 * 9.0 - 4.5); /* -4.5 .. 4.5 */
        if (j < nsp) x[j] = sp[j];
    }
    static const uint32_t nans[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff800001u};
    for (int k = 0; k < 4; k++) memcpy(&x[nsp + k], &nans[k], 4);
    for (int keep = 0; keep < 2; keep++) {
        ot_value r = ot_value_empty();
        ot_shape s = vec(OT_F32, N);
        ot_module *m = ot_module_new("erff");
        ot_computation *c = ot_module_add_computation(m, "main");
        ot_instr *p = ot_build_parameter(c, 0, s, "x");
        ot_computation_set_root(c, ot_build_unary(c, OT_OP_ERF, p));
        ot_module_set_entry(m, c);
        ot_value a[1] = {val(s, x)};
        ot_eval_options o = {0};
        o.keep_denormals = keep == 1;
        ASSERT_OK(ot_module_finalize(m));
        ASSERT_OK(ot_evaluate(m, a, 1, &o, &r));
        ot_value_release(&a[0]);
        ot_module_free(m);
        int64_t differ = 0;
        double worst = 0;
        for (int j = 0; j < N; j++) {
            float xj = x[j], got = F(&r)[j];
            uint32_t ux, ug;
            memcpy(&ux, &xj, 4);
            memcpy(&ug, &got, 4);
            if (isnan(xj)) {
                EXPECT_TRUE(isnan(got) && ug == (ux | 0x400000u));
                continue;
            }
            float want; /* the exact special values */
            bool special = true;
            if (!keep && xj != 0 && fabsf(xj) < FLT_MIN)
                want = copysignf(0.0f, xj);
            else if (xj == 0)
                want = xj;
            else if (fabsf(xj) >= 4.0f)
                want = copysignf(1.0f, xj);
            else
                special = false;
            uint32_t uw;
            memcpy(&uw, &want, 4);
            if (special && ug != uw)
                OT_T_FAIL_("erf(%a) = %a, want %a", (double)xj, (double)got, (double)want);
            if (special) continue;
            double ex = erf((double)xj), err = fabs((double)got - ex) / ulp_of(ex);
            if (err > worst) worst = err;
            if ((float)ex != got) differ++;
        }
        EXPECT_TRUE(worst < 1.2);
        EXPECT_TRUE(differ < N / 25);
        ot_value_release(&r);
    }
    free(x);
}

/* f32 log and log1p are the library's own branch-free functions (ot_logf, ot_log1pf in
 * src/exec/expf_poly.h, also in generated code; bench_vmath ulp measured 0.827 and 0.850 ulp at
 * most over every f32 input): on a spread of 2^20 inputs (a third of the bit patterns of
 * positive floats, subnormals included, a third near 1 (log) or 0 (log1p), a third in [-1.5, 20))
 * each is within 0.9 ulp of the function in double and equals it rounded on all but a few in a
 * hundred (2-3 % here, where inputs crowd near 1 or 0); the special values are exact: -inf at ±0
 * (log) and -1 (log1p), x itself for log1p below 2^-24, +inf at +inf, the default NaN 0xffc00000
 * below the domain, NaN quieted with its sign and payload, a subnormal x's log with keep_denormals
 * and -inf (log) or a signed zero (log1p) without. */
static void test_logf_poly(void) {
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x);
    ASSERT_TRUE(x);
    static const float sp[] = {0.0f,     -0.0f,    INFINITY,  -INFINITY,       1.0f,
                               -1.0f,    2.0f,     0.5f,      0x1.6a09e6p-1f,  0x1.6a09e8p-1f,
                               -2.0f,    FLT_MAX,  0x1p-126f, -0x1p-126f,      0x1p-149f,
                               0x1p-24f, 0x1p-25f, -0x1p-25f, 0x1.fffffep-25f, -0x1.fffffcp-127f};
    int nsp = (int)(sizeof sp / sizeof sp[0]);
    for (int op = 0; op < 2; op++) {
        bool l1p = op == 1;
        uint64_t g = 0x2545f4914f6cdd1dull + (uint64_t)op;
        for (int j = 0; j < N; j++) {
            g = g * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t b = (uint32_t)(g >> 32);
            if (j % 3 == 0) b &= 0x7fffffffu; /* positive: every binade, subnormals too */
            if (j % 3 == 1) /* near 1 (log) or around 0 (log1p): 2^-30 .. 0.5 of both signs */
                b = (b & 0x80000000u) | (0x30800000u + b % 0xe800000u);
            memcpy(&x[j], &b, 4);
            if (j % 3 == 1 && !l1p) x[j] = 1.0f + x[j];
            if (j % 3 == 2) x[j] = (float)((double)(b >> 8) * 0x1p-24 * 21.5 - 1.5);
            if (j < nsp) x[j] = sp[j];
        }
        static const uint32_t nans[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff800001u};
        for (int k = 0; k < 4; k++) memcpy(&x[nsp + k], &nans[k], 4);
        for (int keep = 0; keep < 2; keep++) {
            ot_value r = ot_value_empty();
            ot_shape s = vec(OT_F32, N);
            ot_module *m = ot_module_new("logf");
            ot_computation *c = ot_module_add_computation(m, "main");
            ot_instr *p = ot_build_parameter(c, 0, s, "x");
            ot_computation_set_root(c, ot_build_unary(c, l1p ? OT_OP_LOG1P : OT_OP_LOG, p));
            ot_module_set_entry(m, c);
            ot_value a[1] = {val(s, x)};
            ot_eval_options o = {0};
            o.keep_denormals = keep == 1;
            ASSERT_OK(ot_module_finalize(m));
            ASSERT_OK(ot_evaluate(m, a, 1, &o, &r));
            ot_value_release(&a[0]);
            ot_module_free(m);
            int64_t differ = 0, numbers = 0;
            double worst = 0;
            for (int j = 0; j < N; j++) {
                float xj = x[j], got = F(&r)[j];
                uint32_t ux, ug;
                memcpy(&ux, &xj, 4);
                memcpy(&ug, &got, 4);
                if (isnan(xj)) {
                    EXPECT_TRUE(isnan(got) && ug == (ux | 0x400000u));
                    continue;
                }
                float xf = !keep && xj != 0 && fabsf(xj) < FLT_MIN ? copysignf(0.0f, xj) : xj;
                uint32_t want = 0; /* the exact special values, as bits */
                bool special = true;
                float lim = l1p ? -1.0f : 0.0f;
                if (xf < lim)
                    want = 0xffc00000u;
                else if (xf == lim)
                    want = 0xff800000u;
                else if (isinf(xf))
                    want = 0x7f800000u;
                else if (l1p && fabsf(xf) < 0x1p-24f)
                    memcpy(&want, &xf, 4);
                else
                    special = false;
                if (special && ug != want)
                    OT_T_FAIL_("%s(%a) = %a, want bits %08x", l1p ? "log1p" : "log", (double)xj,
                               (double)got, want);
                if (special) continue;
                double ex = l1p ? log1p((double)xj) : log((double)xj);
                double err = fabs((double)got - ex) / ulp_of(ex);
                if (err > worst) worst = err;
                numbers++;
                if ((float)ex != got) differ++;
            }
            EXPECT_TRUE(worst < 0.9);
            EXPECT_TRUE(numbers > N / 2);
            EXPECT_TRUE(differ < numbers / 25);
            ot_value_release(&r);
        }
    }
    free(x);
}

/* f32 sin and cos are SLEEF's deterministic u10 functions (src/exec/vmath.h, also in generated
 * code; docs/vmath.md has their accuracy): on a spread of 2^20 inputs (a third of all bit patterns,
 * huge ones included, a third with |x| in [2^-14, 4), a third in [-1000, 1000), where rotary
 * embeddings' angles lie) each is within 1 ulp of the function in double and equals it rounded on
 * at least nine inputs in ten; the special values are exact: ±0 gives ±0 (sin) and 1 (cos), the
 * default NaN 0xffc00000 at ±inf, NaN quieted with its sign and payload, a signed zero (sin) or 1
 * (cos) for a subnormal x without keep_denormals. The fixed inputs also take multiples of pi/2 and
 * the largest floats. */
static void test_sincosf_sleef(void) {
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x);
    ASSERT_TRUE(x);
    static const float sp[] = {
        0.0f,       -0.0f,      INFINITY,   -INFINITY,      0x1p-12f,       -0x1.fffffep-13f,
        0x1p-126f,  -0x1p-149f, 0x1p20f,    0x1.fffffep19f, -0x1p20f,       FLT_MAX,
        -FLT_MAX,   1.5707964f, 3.1415927f, -4.712389f,     0x1.99bc5cp74f, 0x1.5fdbbep119f,
        6.2831855f, 102.10176f};
    int nsp = (int)(sizeof sp / sizeof sp[0]);
    for (int op = 0; op < 2; op++) {
        bool is_cos = op == 1;
        uint64_t g = 0x9e3779b97f4a7c15ull + (uint64_t)op;
        for (int j = 0; j < N; j++) {
            g = g * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t b = (uint32_t)(g >> 32);
            if (j % 3 == 1) b = (b & 0x80000000u) | (0x38800000u + b % 0x8000000u); /* 2^-14..4 */
            memcpy(&x[j], &b, 4);
            if (j % 3 == 2) x[j] = (float)((double)(b >> 8) * 0x1p-24 * 2000.0 - 1000.0);
            if (j < nsp) x[j] = sp[j];
        }
        static const uint32_t nans[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff800001u};
        for (int k = 0; k < 4; k++) memcpy(&x[nsp + k], &nans[k], 4);
        for (int keep = 0; keep < 2; keep++) {
            ot_value r = ot_value_empty();
            ot_shape s = vec(OT_F32, N);
            ot_module *m = ot_module_new("sincosf");
            ot_computation *c = ot_module_add_computation(m, "main");
            ot_instr *p = ot_build_parameter(c, 0, s, "x");
            ot_computation_set_root(c, ot_build_unary(c, is_cos ? OT_OP_COS : OT_OP_SIN, p));
            ot_module_set_entry(m, c);
            ot_value a[1] = {val(s, x)};
            ot_eval_options o = {0};
            o.keep_denormals = keep == 1;
            ASSERT_OK(ot_module_finalize(m));
            ASSERT_OK(ot_evaluate(m, a, 1, &o, &r));
            ot_value_release(&a[0]);
            ot_module_free(m);
            int64_t differ = 0, numbers = 0;
            double worst = 0;
            for (int j = 0; j < N; j++) {
                float xj = x[j], got = F(&r)[j];
                uint32_t ux, ug;
                memcpy(&ux, &xj, 4);
                memcpy(&ug, &got, 4);
                if (isnan(xj)) {
                    EXPECT_TRUE(isnan(got) && ug == (ux | 0x400000u));
                    continue;
                }
                float xf = !keep && xj != 0 && fabsf(xj) < FLT_MIN ? copysignf(0.0f, xj) : xj;
                uint32_t want = 0; /* the exact special values, as bits */
                bool special = true;
                if (isinf(xf)) {
                    want = 0xffc00000u;
                } else if (xf == 0) {
                    float w = is_cos ? 1.0f : xf;
                    memcpy(&want, &w, 4);
                } else {
                    special = false;
                }
                if (special && ug != want)
                    OT_T_FAIL_("%s(%a) = %a, want bits %08x", is_cos ? "cos" : "sin", (double)xj,
                               (double)got, want);
                if (special) continue;
                double ex = is_cos ? cos((double)xf) : sin((double)xf);
                double err = fabs((double)got - ex) / ulp_of(ex);
                if (err > worst) worst = err;
                numbers++;
                if ((float)ex != got) differ++;
            }
            EXPECT_TRUE(worst < 1.0); /* measured 0.82 (sin), 0.93 (cos) */
            EXPECT_TRUE(numbers > N / 2);
            EXPECT_TRUE(differ < numbers / 10); /* measured 3.1 % (sin), 6.3 % (cos) */
            ot_value_release(&r);
        }
    }
    free(x);
}

/* The SLEEF functions' special values and edge cases (src/exec/vmath.h, docs/vmath.md), with
 * denormals kept: on ±0, ±inf, NaNs, subnormals, the largest and smallest normals, ±0.5 ... ±3,
 * the overflow thresholds and log1p's large arguments (all pairs of them for pow and atan2), in
 * f32 (sin, cos, tan, cbrt, pow, atan2) and f64 (every function), each result is glibc's where
 * glibc's is NaN, ±inf or ±0 (a NaN operand's NaN quieted, the first of two; NaN from numbers the
 * default NaN), and within 2 ulps of it otherwise (each is within 1 ulp of the exact value); but
 * f64 tan of 2^-1074 is 0 (one subnormal ulp off), and f64 pow overflows to inf from
 * results of 0x1.ffffc57ca8781p+1023 on, 2^-18 below DBL_MAX (SLEEF's overflow threshold). f64
 * exp is the library's ot_expd (src/exec/expf_poly.h), checked here too: up to the true overflow
 * (x = 709.782712...) and through the subnormal results (-745.5 gives 0), and so are f64 expm1,
 * log, log1p (finite up to DBL_MAX) and tanh. */
static double ulp_t(double v, bool f64) {
    int e;
    frexp(v, &e);
    return f64 ? ldexp(1.0, e - 53 < -1074 ? -1074 : e - 53)
               : ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}

static void test_vmath_edges(void) {
    static const double edge[] = {0.0,        -0.0,
                                  INFINITY,   -INFINITY,
                                  NAN,        -NAN,
                                  1.0,        -1.0,
                                  0.5,        -0.5,
                                  2.0,        -2.0,
                                  3.0,        -3.0,
                                  2.5,        -2.5,
                                  1e-310,     -1e-310,
                                  5e-324,     DBL_MIN,
                                  DBL_MAX,    -DBL_MAX,
                                  1e-40,      FLT_MIN,
                                  FLT_MAX,    710.0,
                                  -745.5,     89.0,
                                  -104.0,     1e300,
                                  1e307,      1.5e308,
                                  0x1p-30,    100.0,
                                  -1000.5,    0x1p-60,
                                  709.782712, 709.7827128933839,
                                  709.5,      -708.5,
                                  -744.5,     -745.1};
    enum { NE = sizeof edge / sizeof edge[0] };
    typedef struct {
        ot_opcode op;
        bool f64;
        double (*d)(double);
        double (*d2)(double, double);
        float (*f)(float);
        float (*f2)(float, float);
    } vcase;
    static const vcase cases[] = {
        {OT_OP_SIN, false, NULL, NULL, sinf, NULL},
        {OT_OP_COS, false, NULL, NULL, cosf, NULL},
        {OT_OP_TAN, false, NULL, NULL, tanf, NULL},
        {OT_OP_CBRT, false, NULL, NULL, cbrtf, NULL},
        {OT_OP_POWER, false, NULL, NULL, NULL, powf},
        {OT_OP_ATAN2, false, NULL, NULL, NULL, atan2f},
        {OT_OP_EXP, true, exp, NULL, NULL, NULL},
        {OT_OP_EXPM1, true, expm1, NULL, NULL, NULL},
        {OT_OP_LOG, true, log, NULL, NULL, NULL},
        {OT_OP_LOG1P, true, log1p, NULL, NULL, NULL},
        {OT_OP_TANH, true, tanh, NULL, NULL, NULL},
        {OT_OP_ERF, true, erf, NULL, NULL, NULL},
        {OT_OP_SIN, true, sin, NULL, NULL, NULL},
        {OT_OP_COS, true, cos, NULL, NULL, NULL},
        {OT_OP_TAN, true, tan, NULL, NULL, NULL},
        {OT_OP_CBRT, true, cbrt, NULL, NULL, NULL},
        {OT_OP_POWER, true, NULL, pow, NULL, NULL},
        {OT_OP_ATAN2, true, NULL, atan2, NULL, NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const vcase *k = &cases[c];
        bool bin = k->d2 || k->f2;
        int n = bin ? NE * NE : NE;
        ot_dtype dt = k->f64 ? OT_F64 : OT_F32;
        double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
        float *af = malloc((size_t)n * sizeof *af), *bf = malloc((size_t)n * sizeof *bf);
        ASSERT_TRUE(a && b && af && bf);
        for (int j = 0; j < n; j++) {
            a[j] = bin ? edge[j / NE] : edge[j];
            b[j] = bin ? edge[j % NE] : 0.0;
            af[j] = (float)a[j];
            bf[j] = (float)b[j];
        }
        ot_shape s = vec(dt, n);
        ot_module *m = ot_module_new("vmath_edges");
        ot_computation *cp = ot_module_add_computation(m, "main");
        ot_instr *p0 = ot_build_parameter(cp, 0, s, "a"), *root;
        if (bin)
            root = ot_build_binary(cp, k->op, p0, ot_build_parameter(cp, 1, s, "b"));
        else
            root = ot_build_unary(cp, k->op, p0);
        ot_computation_set_root(cp, root);
        ot_module_set_entry(m, cp);
        ot_value args[2] = {val(s, k->f64 ? (void *)a : (void *)af),
                            val(s, k->f64 ? (void *)b : (void *)bf)};
        ot_eval_options o = {0};
        o.keep_denormals = true;
        ot_value r = ot_value_empty();
        ASSERT_OK(ot_module_finalize(m));
        ASSERT_OK(ot_evaluate(m, args, bin ? 2 : 1, &o, &r));
        for (int j = 0; j < n; j++) {
            double x = k->f64 ? a[j] : (double)af[j], y = k->f64 ? b[j] : (double)bf[j];
            double got = k->f64 ? ((const double *)r.array.data)[j]
                                : (double)((const float *)r.array.data)[j];
            double lib = k->d    ? k->d(x)
                         : k->d2 ? k->d2(x, y)
                         : k->f  ? (double)k->f((float)x)
                                 : (double)k->f2((float)x, (float)y);
            bool special = isnan(lib) || isinf(lib) || lib == 0;
            bool ok;
            if (isnan(lib))
                ok = isnan(got);
            else if (special)
                ok = got == lib && signbit(got) == signbit(lib);
            else
                ok = signbit(got) == signbit(lib) && fabs(got - lib) <= 2 * ulp_t(lib, k->f64);
            if (!ok && k->f64 && x == 5e-324 && k->op == OT_OP_TAN)
                ok = got == 0; /* SLEEF: one subnormal ulp off */
            if (!ok && k->f64 && k->op == OT_OP_POWER && isinf(got) &&
                fabs(lib) >= 0x1.ffffc57ca8781p+1023)
                ok = signbit(got) == signbit(lib); /* SLEEF's early overflow, docs/vmath.md */
            if (!ok)
                OT_T_FAIL_("%s %s(%a, %a) = %a, glibc %a", k->f64 ? "f64" : "f32",
                           ot_opcode_name(k->op), x, y, got, lib);
        }
        ot_value_release(&r);
        ot_value_release(&args[0]);
        ot_value_release(&args[1]);
        ot_module_free(m);
        free(a);
        free(b);
        free(af);
        free(bf);
    }
}

/* The library's own f64 exp, expm1, log, log1p, tanh, cbrt and erf and f32 pow
 * (src/exec/expf_poly.h, also in generated code) in the reference, with denormals kept: on 2^16
 * inputs each (a third uniform in the range programs use, a third of any sign and binade, a third
 * near the function's small arguments: |x| in [2^-60, 2^-20] and, for log, within 2^-20 of 1),
 * every result within one ulp of the long double function (docs/vmath.md has the measured maxima,
 * 0.50-0.83 ulp), cbrt within 0.51 ulp (its Newton step's residual is formed exactly), erf within
 * 0.85 ulp; f32 pow on the same number of pairs against pow in double, a quarter of them with x
 * in [sqrt(1/2), sqrt(2)) and |y·log2 x| up to 126, where the low part of ot_powf's log2 matters
 * (without the remainder of s in z's low part: 2.4 ulp). Fails without log1p's correction for the
 * rounding of 1 + x (1.4 ulp near |x| = 2^-53). */
static void test_vmath_own_ulp(void) {
    enum { N = 1 << 16 };
    static const struct {
        ot_opcode op;
        long double (*ref)(long double);
        double lo, hi, bound; /* bound: the largest error accepted, in ulps */
    } fns[] = {{OT_OP_EXP, expl, -745, 710, 1.0}, {OT_OP_EXPM1, expm1l, -40, 710, 1.0},
               {OT_OP_LOG, logl, 0, 1e6, 1.0},    {OT_OP_LOG1P, log1pl, -1, 1e6, 1.0},
               {OT_OP_TANH, tanhl, -20, 20, 1.0}, {OT_OP_CBRT, cbrtl, -1000, 1000, 0.51},
               {OT_OP_ERF, erfl, -6, 6, 0.85}};
    double *x = malloc(N * sizeof *x), *y = calloc(N, sizeof *y); /* y: the unused second operand */
    float *xf = malloc(N * sizeof *xf), *yf = malloc(N * sizeof *yf);
    ASSERT_TRUE(x && y && xf && yf);
    uint64_t g = 0x9e3779b97f4a7c15ull;
    for (size_t f = 0; f <= sizeof fns / sizeof fns[0]; f++) {
        bool pw = f == sizeof fns / sizeof fns[0]; /* f32 pow */
        for (int j = 0; j < N; j++) {
            g = g * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(g >> 11) * 0x1p-53, v;
            int e = (int)((g >> 3) % 41) - 60; /* 2^-60 .. 2^-20 */
            if (pw && j % 4 == 3) { /* |x| near 1, |y log2 x| up to 126: log2's low part */
                xf[j] = (float)(0x1.6a09e6p-1 * (1.0 + u));
                double w = (double)((g >> 40) % 126 + 1) * ((g >> 39) & 1 ? -1 : 1);
                double l = log2((double)xf[j]);
                yf[j] = l == 0 ? 1.0f : (float)(w / l);
                continue;
            }
            if (pw) {
                xf[j] = (float)(j % 4 == 1 ? ldexp(1.0 + u, (int)(g % 200) - 100) : 10.0 * u);
                yf[j] = (float)(j % 4 == 2 ? (double)((int)(g >> 40) % 61 - 30) : 8.0 * u - 4.0);
                continue;
            }
            if (j % 3 == 0)
                v = fns[f].lo + u * (fns[f].hi - fns[f].lo);
            else if (j % 3 == 1)
                v = ldexp(1.0 + u, (int)(g % 2000) - 1000) * ((g >> 2) & 1 ? -1 : 1);
            else
                v = fns[f].op == OT_OP_LOG ? 1.0 + ldexp(u - 0.5, -20)
                                           : ldexp(1.0 + u, e) * ((g >> 2) & 1 ? -1 : 1);
            x[j] = v;
        }
        ot_shape s = vec(pw ? OT_F32 : OT_F64, N);
        ot_module *m = ot_module_new("vmath_own");
        ot_computation *cp = ot_module_add_computation(m, "main");
        ot_instr *p0 = ot_build_parameter(cp, 0, s, "a");
        ot_computation_set_root(
            cp, pw ? ot_build_binary(cp, OT_OP_POWER, p0, ot_build_parameter(cp, 1, s, "b"))
                   : ot_build_unary(cp, fns[f].op, p0));
        ot_module_set_entry(m, cp);
        ot_value args[2] = {val(s, pw ? (void *)xf : (void *)x),
                            val(s, pw ? (void *)yf : (void *)y)};
        ot_eval_options o = {0};
        o.keep_denormals = true; /* subnormal results as computed */
        ot_value r = ot_value_empty();
        ASSERT_OK(ot_module_finalize(m));
        ASSERT_OK(ot_evaluate(m, args, pw ? 2 : 1, &o, &r));
        ot_module_free(m);
        ot_value_release(&args[0]);
        ot_value_release(&args[1]);
        double worst = 0;
        int at = -1;
        for (int j = 0; j < N; j++) {
            long double want =
                pw ? (long double)pow((double)xf[j], (double)yf[j]) : fns[f].ref((long double)x[j]);
            double got =
                pw ? (double)((const float *)r.array.data)[j] : ((const double *)r.array.data)[j];
            double wt = pw ? (double)(float)want : (double)want; /* inf beyond the range */
            if (isnan(want) || isinf(wt)) {
                if (!(isnan(want) ? isnan(got) : got == wt)) worst = 1e9, at = j;
                continue;
            }
            int ex;
            frexpl(want, &ex);
            int p = pw ? 24 : 53, mn = pw ? -149 : -1074;
            long double ulp = ldexpl(1.0L, ex - p < mn ? mn : ex - p);
            double err = (double)(fabsl((long double)got - want) / ulp);
            if (err > worst) worst = err, at = j;
        }
        if (worst > (pw ? 1.0 : fns[f].bound))
            OT_T_FAIL_("%s %s: %.3f ulp at x = %a", pw ? "f32" : "f64",
                       ot_opcode_name(pw ? OT_OP_POWER : fns[f].op), worst,
                       at < 0 ? 0.0
                       : pw   ? (double)xf[at]
                              : x[at]);
        ot_value_release(&r);
    }
    free(x);
    free(y);
    free(xf);
    free(yf);
}

/* f32 pow's special values (ot_powf, src/exec/expf_poly.h, also in generated code), in the
 * reference with denormals kept, on all pairs of pow's edge operands: ±0, ±inf, NaNs (quiet with
 * payloads, signalling, both signs), ±1, subnormals, FLT_MIN/MAX, values next to 1, and y's parity
 * cases (odd integers 2^23 + 1 and 2^24 - 1, the even 2^24 and beyond, 2^23 - 0.5, ±2^31). pow(x,
 * ±0) and pow(1, y) are 1 for every operand, NaN included; otherwise a NaN operand gives that NaN
 * quieted, x's of two; a NaN from numbers (a finite negative x, a non-integer y) is 0xffc00000;
 * ±0, ±inf and signs are glibc's powf's (C99 Annex F) bit for bit, and every other result is
 * within one ulp of pow in double. Fails with |y| capped at 2^23 for its parity (2^23 + 1 read
 * as even) or without the ±0/±inf cases (pow(-0, 1/3) = 2^-51). */
static void test_powf_special(void) {
    static const uint32_t xs[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00123,
                                  0xffc00456, 0x7f800001, 0x3f800000, 0xbf800000, 0x3f000000,
                                  0xbf000000, 0x40000000, 0xc0000000, 0xc0400000, 0x00000001,
                                  0x80000001, 0x00800000, 0x80800000, 0x7f7fffff, 0xff7fffff,
                                  0x3f800001, 0x3f7fffff, 0xbf800001, 0x41000000, 0xc1000000,
                                  0x40600000, 0xc0600000, 0x1e3ce508, 0x60ad78ec, 0x007fffff};
    static const uint32_t ys[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00789, 0xffa00001, 0x3f800000,
        0xbf800000, 0x40000000, 0xc0000000, 0x40400000, 0xc0400000, 0x3f000000, 0xbf000000,
        0x3fc00000, 0xbfc00000, 0x4b000001, 0xcb000001, 0x4b7fffff, 0xcb7fffff, 0x4b800000,
        0x4b800001, 0x4affffff, 0xcafffffe, 0x4f000000, 0xcf000000, 0x00000001, 0x80000001,
        0x7f7fffff, 0xff7fffff, 0x42fffae1, 0xc3158000, 0x43000000, 0xc3160000, 0x3eaaaaab,
        0x501502f9, 0xd01502f9};
    enum { NX = sizeof xs / sizeof xs[0], NY = sizeof ys / sizeof ys[0], N = NX * NY };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    ASSERT_TRUE(a && b);
    for (int j = 0; j < N; j++) {
        memcpy(&a[j], &xs[j / NY], 4);
        memcpy(&b[j], &ys[j % NY], 4);
    }
    ot_shape s = vec(OT_F32, N);
    ot_module *m = ot_module_new("powf_special");
    ot_computation *cp = ot_module_add_computation(m, "main");
    ot_computation_set_root(cp, ot_build_binary(cp, OT_OP_POWER, ot_build_parameter(cp, 0, s, "a"),
                                                ot_build_parameter(cp, 1, s, "b")));
    ot_module_set_entry(m, cp);
    ot_value args[2] = {val(s, a), val(s, b)};
    ot_eval_options o = {0};
    o.keep_denormals = true;
    ot_value r = ot_value_empty();
    ASSERT_OK(ot_module_finalize(m));
    ASSERT_OK(ot_evaluate(m, args, 2, &o, &r));
    const float *got = r.array.data;
    int bad = 0;
    for (int j = 0; j < N; j++) {
        float x = a[j], y = b[j], lib = powf(x, y);
        uint32_t xb = xs[j / NY], yb = ys[j % NY], gb, want = 0;
        memcpy(&gb, &got[j], 4);
        bool exact = true; /* want holds the bits, else the result is checked against pow */
        if (y == 0 || xb == 0x3f800000u)
            want = 0x3f800000u;
        else if (isnan(x))
            want = xb | 0x400000u;
        else if (isnan(y))
            want = yb | 0x400000u;
        else if (isnan(lib))
            want = 0xffc00000u;
        else if (isinf(lib) || lib == 0)
            memcpy(&want, &lib, 4);
        else
            exact = false;
        bool ok = exact ? gb == want : false;
        if (!exact) {
            double ref = pow((double)x, (double)y);
            int e;
            frexp(ref, &e);
            double ulp = ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
            ok = signbit(got[j]) == signbit(lib) && fabs((double)got[j] - ref) <= ulp;
        }
        if (!ok && bad++ < 10)
            OT_T_FAIL_("f32 pow(%a [%08x], %a [%08x]) = %a [%08x], want %08x (glibc %a)", (double)x,
                       xb, (double)y, yb, (double)got[j], gb, want, (double)lib);
    }
    ot_value_release(&r);
    ot_value_release(&args[0]);
    ot_value_release(&args[1]);
    ot_module_free(m);
    free(a);
    free(b);
}

/* f64 pow's special values and accuracy (ot_powd, src/exec/expf_poly.h, also in generated code)
 * in the reference with denormals kept. All pairs of pow's edge operands (±0, ±inf, NaNs quiet
 * with payloads and signalling, both signs, ±1, subnormals, DBL_MIN/MAX, values next to 1, y's
 * parity cases: the odd 2^53 - 1 and 2^52 + 1, the even 2^53 and beyond, 2^52 - 0.5): pow(x, ±0)
 * and pow(1, y) are 1 for every operand, NaN included; otherwise a NaN operand gives that NaN
 * quieted, x's of two; a NaN from numbers is 0xfff8000000000000; ±0, ±inf and signs are glibc's
 * pow's (C99 Annex F) bit for bit, every other result within one ulp of powl. Then 2^18 sampled
 * pairs (x in (0, 10] with y in [-4, 4], x next to 1 with |y| up to 2^16, any x with y·ln x up to
 * ±750, negative x with integer y) within 0.9 ulp of powl (the subnormal ulp below DBL_MIN). Fails
 * without the pl/(1 + r) term of log (12 ulps near x = 1.02, y·ln x = 700) or with |y|'s parity
 * read below 2^53. */
static void test_pow_special(void) {
    static const uint64_t xs[] = {
        0x0000000000000000ull, 0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
        0x7ff8000000000123ull, 0xfff8000000000456ull, 0x7ff0000000000001ull, 0x3ff0000000000000ull,
        0xbff0000000000000ull, 0x3fe0000000000000ull, 0xbfe0000000000000ull, 0x4000000000000000ull,
        0xc000000000000000ull, 0xc008000000000000ull, 0x0000000000000001ull, 0x8000000000000001ull,
        0x0010000000000000ull, 0x8010000000000000ull, 0x7fefffffffffffffull, 0xffefffffffffffffull,
        0x3ff0000000000001ull, 0x3fefffffffffffffull, 0xbff0000000000001ull, 0x4020000000000000ull,
        0xc020000000000000ull, 0x400c000000000000ull, 0xc00c000000000000ull, 0x000fffffffffffffull,
        0x3ff0a3d70a3d70a4ull, 0x40862e42fefa39efull};
    static const uint64_t ys[] = {
        0x0000000000000000ull, 0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
        0x7ff8000000000789ull, 0xfff4000000000001ull, 0x3ff0000000000000ull, 0xbff0000000000000ull,
        0x4000000000000000ull, 0xc000000000000000ull, 0x4008000000000000ull, 0xc008000000000000ull,
        0x3fe0000000000000ull, 0xbfe0000000000000ull, 0x3ff8000000000000ull, 0xbff8000000000000ull,
        0x433fffffffffffffull, 0xc33fffffffffffffull, 0x4330000000000001ull, 0xc330000000000001ull,
        0x4340000000000000ull, 0x4340000000000001ull, 0x432fffffffffffffull, 0x0000000000000001ull,
        0x8000000000000001ull, 0x7fefffffffffffffull, 0xffefffffffffffffull, 0x408f400000000000ull,
        0xc08f400000000000ull, 0x3fd5555555555555ull, 0x43e0000000000000ull, 0xc3e0000000000000ull};
    enum { NX = sizeof xs / sizeof xs[0], NY = sizeof ys / sizeof ys[0], NE = NX * NY };
    enum { NS = 1 << 18, N = NE + NS };
    double *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    ASSERT_TRUE(a && b);
    for (int j = 0; j < NE; j++) {
        memcpy(&a[j], &xs[j / NY], 8);
        memcpy(&b[j], &ys[j % NY], 8);
    }
    uint64_t g = 12345;
    for (int j = NE; j < N; j++) {
        g = g * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(g >> 11) * 0x1p-53, w = (double)((g >> 3) & 0xffff) * 0x1p-16;
        switch (j % 4) {
        case 0: a[j] = 10 * (1 - u), b[j] = 8 * w - 4; break;
        case 1: a[j] = 1 + ldexp(u - 0.5, -(int)(g % 16)), b[j] = ldexp(2 * w - 1, 16); break;
        case 2:
            a[j] = ldexp(0.5 + u, (int)(g % 2000) - 1000);
            b[j] = (2 * w - 1) * 750 / log(a[j]);
            break;
        default: a[j] = -20 * u, b[j] = (double)((int)(g % 41) - 20); break;
        }
    }
    ot_shape s = vec(OT_F64, N);
    ot_module *m = ot_module_new("pow_special");
    ot_computation *cp = ot_module_add_computation(m, "main");
    ot_computation_set_root(cp, ot_build_binary(cp, OT_OP_POWER, ot_build_parameter(cp, 0, s, "a"),
                                                ot_build_parameter(cp, 1, s, "b")));
    ot_module_set_entry(m, cp);
    ot_value args[2] = {val(s, a), val(s, b)};
    ot_eval_options o = {0};
    o.keep_denormals = true;
    ot_value r = ot_value_empty();
    ASSERT_OK(ot_module_finalize(m));
    ASSERT_OK(ot_evaluate(m, args, 2, &o, &r));
    const double *got = r.array.data;
    int bad = 0;
    double maxu = 0;
    for (int j = 0; j < N; j++) {
        double x = a[j], y = b[j], lib = pow(x, y);
        uint64_t xb, yb, gb, want = 0;
        memcpy(&xb, &x, 8);
        memcpy(&yb, &y, 8);
        memcpy(&gb, &got[j], 8);
        bool exact = true; /* want holds the bits, else the result is checked against powl */
        if (y == 0 || xb == 0x3ff0000000000000ull)
            want = 0x3ff0000000000000ull;
        else if (isnan(x))
            want = xb | (1ull << 51);
        else if (isnan(y))
            want = yb | (1ull << 51);
        else if (isnan(lib))
            want = 0xfff8000000000000ull;
        else if (isinf(lib) || lib == 0)
            memcpy(&want, &lib, 8);
        else
            exact = false;
        bool ok = exact ? gb == want : false;
        if (!exact) {
            long double ref = powl(x, y);
            int e;
            frexpl(ref, &e);
            long double ulp = ldexpl(1.0L, e - 53 < -1074 ? -1074 : e - 53);
            double err = (double)(fabsl((long double)got[j] - ref) / ulp);
            ok = signbit(got[j]) == signbit(lib) && err <= (j < NE ? 1.0 : 0.9);
            if (j >= NE && err > maxu) maxu = err;
        }
        if (!ok && bad++ < 10)
            OT_T_FAIL_(
                "f64 pow(%a [%016llx], %a [%016llx]) = %a [%016llx], want %016llx (glibc %a)", x,
                (unsigned long long)xb, y, (unsigned long long)yb, got[j], (unsigned long long)gb,
                (unsigned long long)want, lib);
    }
    EXPECT_TRUE(maxu > 0.3); /* the sample reached results that are not correctly rounded */
    ot_value_release(&r);
    ot_value_release(&args[0]);
    ot_value_release(&args[1]);
    ot_module_free(m);
    free(a);
    free(b);
}

/* f32 expm1 is the library's own branch-free function (ot_expm1f in src/exec/expf_poly.h, also in
 * generated code; bench_vmath ulp --fn expm1 measured its maximum over every f32 input, in
 * docs/exec.md): on a spread of 2^20 inputs (a third of all bit patterns, a third with |x| in
 * [2^-30, 1), a third in [-30, 90)) it is within 1.4 ulp of expm1 in double and equals it rounded
 * on all but a few in a hundred; the special values are exact: x itself below 2^-25 (±0 kept),
 * -1 from -25 and at -inf, +inf from 88.73 and at +inf, NaN quieted with its sign and payload, a
 * signed zero for a subnormal x without keep_denormals. */
static void test_expm1f_poly(void) {
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x);
    ASSERT_TRUE(x);
    static const float sp[] = {
        0.0f,        -0.0f, INFINITY, -INFINITY, -25.0f,           -24.9f,    88.72283f, 88.7229f,
        89.0f,       1e30f, -1e30f,   0x1p-25f,  -0x1.fffffep-26f, 0x1p-126f, 0x1p-149f, 0.3465735f,
        -0.3465736f, 17.0f, -17.0f,   1.0f};
    int nsp = (int)(sizeof sp / sizeof sp[0]);
    uint64_t g = 0x853c49e6748fea9bull;
    for (int j = 0; j < N; j++) {
        g = g * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t b = (uint32_t)(g >> 32);
        if (j % 3 == 1) b = (b & 0x80000000u) | (0x30800000u + b % 0xe800000u); /* 2^-30 .. 1 */
        memcpy(&x[j], &b, 4);
        if (j % 3 == 2) x[j] = (float)((double)(b >> 8) * 0x1p-24 * 120.0 - 30.0);
        if (j < nsp) x[j] = sp[j];
    }
    static const uint32_t nans[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff800001u};
    for (int k = 0; k < 4; k++) memcpy(&x[nsp + k], &nans[k], 4);
    for (int keep = 0; keep < 2; keep++) {
        ot_value r = ot_value_empty();
        ot_shape s = vec(OT_F32, N);
        ot_module *m = ot_module_new("expm1f");
        ot_computation *c = ot_module_add_computation(m, "main");
        ot_instr *p = ot_build_parameter(c, 0, s, "x");
        ot_computation_set_root(c, ot_build_unary(c, OT_OP_EXPM1, p));
        ot_module_set_entry(m, c);
        ot_value a[1] = {val(s, x)};
        ot_eval_options o = {0};
        o.keep_denormals = keep == 1;
        ASSERT_OK(ot_module_finalize(m));
        ASSERT_OK(ot_evaluate(m, a, 1, &o, &r));
        ot_value_release(&a[0]);
        ot_module_free(m);
        int64_t differ = 0;
        double worst = 0;
        for (int j = 0; j < N; j++) {
            float xj = x[j], got = F(&r)[j];
            uint32_t ux, ug;
            memcpy(&ux, &xj, 4);
            memcpy(&ug, &got, 4);
            if (isnan(xj)) {
                EXPECT_TRUE(isnan(got) && ug == (ux | 0x400000u));
                continue;
            }
            float xf = !keep && xj != 0 && fabsf(xj) < FLT_MIN ? copysignf(0.0f, xj) : xj, want;
            bool special = true;
            if (fabsf(xf) < 0x1p-25f)
                want = xf;
            else if (xf <= -25.0f)
                want = -1.0f;
            else if (xf >= 88.7229f)
                want = INFINITY;
            else
                special = false;
            uint32_t uw;
            memcpy(&uw, &want, 4);
            if (special && ug != uw)
                OT_T_FAIL_("expm1(%a) = %a, want %a", (double)xj, (double)got, (double)want);
            if (special) continue;
            double ex = expm1((double)xj);
            double err = isinf(got) && (float)ex == got ? 0.0 : fabs((double)got - ex) / ulp_of(ex);
            if (err > worst) worst = err;
            if ((float)ex != got) differ++;
        }
        EXPECT_TRUE(worst < 1.4);
        EXPECT_TRUE(differ < N / 25);
        ot_value_release(&r);
    }
    free(x);
}

/* ---- the canonical summation order (exec_internal.h, ex_reduce_lanes) -------------------- */

/* The order written out: blocks of 4096; a block's whole groups of 16 in lanes, the lanes'
 * pairwise tree, the accumulator (from init) folds the tree, then the tail one by one. */
static float lane_sum(const float *x, int64_t n, float init) {
    float acc = init;
    int64_t r = 0;
    for (int64_t rb = 0; rb + 16 <= n; rb += 4096) {
        int64_t re = rb + 4096 < n ? rb + 4096 : n;
        re = rb + (re - rb) / 16 * 16;
        float lane[16];
        for (int l = 0; l < 16; l++) lane[l] = x[rb + l];
        for (int64_t g = rb + 16; g < re; g += 16)
            for (int l = 0; l < 16; l++) lane[l] += x[g + l];
        for (int w = 8; w >= 1; w /= 2)
            for (int l = 0; l < w; l++) lane[l] += lane[l + w];
        acc += lane[0];
        r = re;
    }
    for (; r < n; r++) acc += x[r];
    return acc;
}

static float seq_sum(const float *x, int64_t n, float init) {
    float acc = init;
    for (int64_t r = 0; r < n; r++) acc += x[r];
    return acc;
}

/* reduce(x[rows, n], init) over dims (add(a, b), or add(b, a) when swapped) */
static ot_status run_sum(const float *x, int rank, const int64_t *dims, const int64_t *rd, int nrd,
                         float init, bool swapped, ot_value *out) {
    ot_module *m = ot_module_new("sum");
    ot_computation *f = ot_module_add_computation(m, "add");
    ot_instr *a = ot_build_parameter(f, 0, ot_shape_scalar(OT_F32), "a");
    ot_instr *b = ot_build_parameter(f, 1, ot_shape_scalar(OT_F32), "b");
    ot_computation_set_root(f, swapped ? ot_build_binary(f, OT_OP_ADD, b, a)
                                       : ot_build_binary(f, OT_OP_ADD, a, b));
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_shape s = shp(OT_F32, rank, dims);
    ot_instr *p = ot_build_parameter(c, 0, s, "x");
    ot_instr *iv = ot_build_constant_scalar(c, OT_F32, init);
    ot_computation_set_root(c, ot_build_reduce(c, &p, &iv, 1, rd, nrd, f));
    ot_module_set_entry(m, c);
    ot_value args[1] = {val(s, x)};
    return run(m, args, 1, out);
}

static void test_reduce_lane_order(void) {
    static const int64_t ns[] = {1, 5, 15, 16, 17, 33, 150, 4096, 4099, 4096 + 16 * 3 + 5, 9000};
    uint64_t g = 0x5eed;
    bool order_matters = false;
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int64_t n = ns[k];
        float *x = malloc((size_t)(2 * n) * sizeof *x);
        ASSERT_TRUE(x);
        for (int64_t j = 0; j < 2 * n; j++) { /* magnitudes over 2^-10 .. 2^10: order shows */
            g = g * 6364136223846793005ull + 1442695040888963407ull;
            float u = (float)((g >> 40) & 0xffffff) / 16777216.0f - 0.5f;
            x[j] = ldexpf(u, (int)((g >> 20) % 21) - 10);
        }
        for (int sw = 0; sw < 2; sw++) {
            ot_value r; /* rows: the last dim reduced, lane order */
            ASSERT_OK(run_sum(x, 2, (int64_t[]){2, n}, (int64_t[]){1}, 1, 0.75f, sw, &r));
            for (int row = 0; row < 2; row++) {
                float want = lane_sum(x + row * n, n, 0.75f);
                EXPECT_F(F(&r)[row], want);
                if (want != seq_sum(x + row * n, n, 0.75f)) order_matters = true;
            }
            ot_value_release(&r);
        }
        /* all elements of [2, n]: one sequence of 2n in row-major order */
        ot_value r;
        ASSERT_OK(run_sum(x, 2, (int64_t[]){2, n}, (int64_t[]){0, 1}, 2, -0.0f, false, &r));
        EXPECT_F(F(&r)[0], lane_sum(x, 2 * n, -0.0f));
        ot_value_release(&r);
        /* a column reduce (the last dim kept) stays one by one from init, in row-major order */
        ASSERT_OK(run_sum(x, 2, (int64_t[]){n, 2}, (int64_t[]){0}, 1, 0.0f, false, &r));
        for (int col = 0; col < 2; col++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < n; j++) acc += x[j * 2 + col];
            EXPECT_F(F(&r)[col], acc);
        }
        ot_value_release(&r);
        /* reduced dims {0, 2} of [2, 3, m]: element (a, c) of each output is at k = a * m + c */
        if (n % 3 == 0) {
            int64_t m3 = n / 3;
            ASSERT_OK(run_sum(x, 3, (int64_t[]){2, 3, m3}, (int64_t[]){0, 2}, 2, 0.0f, false, &r));
            for (int b = 0; b < 3; b++) {
                float *seq = malloc((size_t)(2 * m3) * sizeof *seq);
                ASSERT_TRUE(seq);
                for (int a = 0; a < 2; a++)
                    for (int64_t c = 0; c < m3; c++) seq[a * m3 + c] = x[(a * 3 + b) * m3 + c];
                EXPECT_F(F(&r)[b], lane_sum(seq, 2 * m3, 0.0f));
                free(seq);
            }
            ot_value_release(&r);
        }
        free(x);
    }
    EXPECT_TRUE(order_matters); /* the data tells the two orders apart */
}

/* reduce(x, init) over dims of a bf16 or f16 x (bits in x16) with an add in that type */
static ot_status run_sum16(ot_dtype t, const uint16_t *x16, int rank, const int64_t *dims,
                           const int64_t *rd, int nrd, float init, ot_value *out) {
    ot_module *m = ot_module_new("sum16");
    ot_computation *f = scalar_fn(m, "add", OT_OP_ADD, t);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_shape s = shp(t, rank, dims);
    ot_instr *p = ot_build_parameter(c, 0, s, "x");
    ot_instr *iv = ot_build_constant_scalar(c, t, init);
    ot_computation_set_root(c, ot_build_reduce(c, &p, &iv, 1, rd, nrd, f));
    ot_module_set_entry(m, c);
    ot_value args[1] = {val(s, x16)};
    return run(m, args, 1, out);
}

/* bf16 and f16 sums accumulate in f32 and round once (exec/numerics.h, ex_reduce_widens): rows in
 * the lane order, columns one by one, of positive values, where a sum in the narrow type one
 * element after another stops growing (4096 bf16 ones would sum to 256, 3000 f16 ones to 2048). */
static void test_reduce_widened_sums(void) {
    static const int64_t ns[] = {1, 17, 300, 3000, 4096, 9000};
    for (int dt = 0; dt < 2; dt++) {
        ot_dtype t = dt ? OT_F16 : OT_BF16;
        uint16_t (*narrow)(float) = dt ? ot_f32_to_f16 : ot_f32_to_bf16;
        float (*wide)(uint16_t) = dt ? ot_f16_to_f32 : ot_bf16_to_f32;
        uint64_t g = 0x77 + (uint64_t)dt;
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            int64_t n = ns[k];
            uint16_t *x16 = malloc((size_t)(2 * n) * sizeof *x16);
            float *x = malloc((size_t)(2 * n) * sizeof *x);
            ASSERT_TRUE(x16 && x);
            for (int64_t j = 0; j < 2 * n; j++) { /* in [0.25, 1.25) */
                g = g * 6364136223846793005ull + 1442695040888963407ull;
                x16[j] = narrow(0.25f + (float)((g >> 40) & 0xffffff) / 16777216.0f);
                x[j] = wide(x16[j]);
            }
            ot_value r; /* rows: the lane order */
            ASSERT_OK(run_sum16(t, x16, 2, (int64_t[]){2, n}, (int64_t[]){1}, 1, 0.5f, &r));
            const uint16_t *got = r.array.data;
            for (int row = 0; row < 2; row++)
                EXPECT_INT_EQ(got[row], narrow(lane_sum(x + row * n, n, 0.5f)));
            ot_value_release(&r);
            /* columns: one by one from init */
            ASSERT_OK(run_sum16(t, x16, 2, (int64_t[]){n, 2}, (int64_t[]){0}, 1, 0.0f, &r));
            got = r.array.data;
            for (int col = 0; col < 2; col++) {
                float acc = 0.0f;
                for (int64_t j = 0; j < n; j++) acc += x[j * 2 + col];
                EXPECT_INT_EQ(got[col], narrow(acc));
            }
            ot_value_release(&r);
            /* ones: the exact count */
            for (int64_t j = 0; j < n; j++) x16[j] = narrow(1.0f);
            ASSERT_OK(run_sum16(t, x16, 1, (int64_t[]){n}, (int64_t[]){0}, 1, 0.0f, &r));
            EXPECT_INT_EQ(((const uint16_t *)r.array.data)[0], narrow((float)n));
            ot_value_release(&r);
            free(x16);
            free(x);
        }
    }
}

static ot_module *loop_module(void) {
    ot_module *m = ot_module_new("loop");
    ot_computation *add = scalar_fn(m, "add", OT_OP_ADD, OT_F32);
    ot_shape v = vec(OT_F32, 4);
    ot_ir_shape st_el[2] = {ot_ir_shape_scalar(OT_S32), ot_ir_shape_array(v)};
    (void)st_el;
    /* cond: i < 3 */
    ot_computation *cond = ot_module_add_computation(m, "cond");
    ot_computation *body = ot_module_add_computation(m, "body");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, v, "x");
    ot_instr *i0 = ot_build_constant_scalar(c, OT_S32, 0);
    ot_instr *init_el[2] = {i0, x};
    ot_instr *init = ot_build_tuple(c, init_el, 2);
    ot_ir_shape tshape = init ? init->shape : ot_ir_shape_scalar(OT_S32);
    ot_instr *cp = ot_build_parameter_ir(cond, 0, &tshape, "s");
    ot_computation_set_root(cond, ot_build_compare(cond, ot_build_get_tuple_element(cond, cp, 0),
                                                   ot_build_constant_scalar(cond, OT_S32, 3),
                                                   OT_CMP_LT, OT_CMP_TYPE_DEFAULT));
    ot_instr *bp = ot_build_parameter_ir(body, 0, &tshape, "s");
    ot_instr *bi = ot_build_get_tuple_element(body, bp, 0);
    ot_instr *bx = ot_build_get_tuple_element(body, bp, 1);
    ot_instr *nb[2] = {
        ot_build_binary(body, OT_OP_ADD, bi, ot_build_constant_scalar(body, OT_S32, 1)),
        ot_build_binary(body, OT_OP_MULTIPLY, bx, bx)};
    ot_computation_set_root(body, ot_build_tuple(body, nb, 2));
    ot_instr *w = ot_build_while(c, cond, body, init);
    ot_instr *wx = ot_build_get_tuple_element(c, w, 1);
    ot_instr *zero = ot_build_constant_scalar(c, OT_F32, 0.0);
    ot_instr *red = ot_build_reduce(c, &wx, &zero, 1, (int64_t[]){0}, 1, add);
    ot_dot_dims dn;
    memset(&dn, 0, sizeof dn);
    dn.ncontract = 1;
    dn.lhs_contract[0] = 0;
    dn.rhs_contract[0] = 0;
    ot_instr *dot = ot_build_dot(c, wx, x, &dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT);
    ot_instr *outs[3] = {red, dot, w};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 3));
    ot_module_set_entry(m, c);
    return m;
}

static void test_while_reduce_dot(void) {
    ot_module *m = loop_module();
    ASSERT_OK(ot_module_finalize(m));
    float d[4] = {1.0f, 2.0f, -1.0f, 0.5f};
    ot_value a[1] = {val(vec(OT_F32, 4), d)}, r;
    ASSERT_OK(ot_evaluate(m, a, 1, NULL, &r));
    /* x^8 = 1, 256, 1, 1/256 */
    EXPECT_F(F(&r.tuple[0])[0], 1.0f + 256.0f + 1.0f + 1.0f / 256.0f);
    EXPECT_F(F(&r.tuple[1])[0], 1.0f + 512.0f - 1.0f + 1.0f / 512.0f);
    EXPECT_INT_EQ(*(int32_t *)r.tuple[2].tuple[0].array.data, 3);
    ot_value_release(&r);
    ot_eval_options o = ot_eval_options_default();
    o.max_while_iterations = 2;
    EXPECT_STATUS(ot_evaluate(m, a, 1, &o, &r), OT_ERR_OUT_OF_RANGE);
    EXPECT_STR_CONTAINS(ot_last_error(), "more than 2 iterations");
    ot_value_release(&a[0]);
    ot_module_free(m);
}

static void test_alloc_failure_cleanup(void) {
    ot_module *m = loop_module();
    ASSERT_OK(ot_module_finalize(m));
    float d[4] = {1.0f, 2.0f, -1.0f, 0.5f};
    ot_value a[1] = {val(vec(OT_F32, 4), d)};
    int64_t base = ot_alloc_live();
    bool succeeded = false;
    for (int64_t n = 1; n < 1000 && !succeeded; n++) {
        ot_value r;
        ot_alloc_fail_after(n);
        ot_status s = ot_evaluate(m, a, 1, NULL, &r);
        ot_alloc_fail_after(0);
        if (s == OT_OK) {
            succeeded = true;
            ot_value_release(&r);
        } else {
            EXPECT_INT_EQ(s, OT_ERR_OUT_OF_MEMORY);
            EXPECT_INT_EQ(r.kind, OT_IR_TOKEN);
        }
        EXPECT_INT_EQ(ot_alloc_live(), base);
    }
    EXPECT_TRUE(succeeded);
    ot_value_release(&a[0]);
    ot_module_free(m);
}

/* A tuple that is both the root and read by its only get-tuple-element user keeps its elements
 * (the evaluator moves elements out of a dying tuple, never out of the root). */
static void test_tuple_root_and_gte(void) {
    ot_module *m = ot_module_new("t");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, vec(OT_F32, 2), "x");
    ot_instr *el[2] = {x, ot_build_unary(c, OT_OP_NEGATE, x)};
    ot_instr *t = ot_build_tuple(c, el, 2);
    ot_instr *g = ot_build_get_tuple_element(c, t, 1);
    ot_instr *el2[2] = {g, g};
    ot_build_tuple(c, el2, 2); /* dead: not needed by the root */
    ot_computation_set_root(c, t);
    ot_module_set_entry(m, c);
    float d[2] = {1, -2};
    ot_value a[1] = {val(vec(OT_F32, 2), d)}, r;
    ASSERT_OK(run(m, a, 1, &r));
    ASSERT_TRUE(r.kind == OT_IR_TUPLE && r.ntuple == 2);
    ASSERT_TRUE(r.tuple[1].kind == OT_IR_ARRAY);
    EXPECT_F(F(&r.tuple[1])[1], 2.0f);
    ot_value_release(&r);

    /* the same with the get-tuple-element reachable from the root */
    m = ot_module_new("t2");
    c = ot_module_add_computation(m, "main");
    x = ot_build_parameter(c, 0, vec(OT_F32, 2), "x");
    ot_instr *e2[2] = {x, ot_build_unary(c, OT_OP_NEGATE, x)};
    t = ot_build_tuple(c, e2, 2);
    g = ot_build_get_tuple_element(c, t, 1);
    ot_instr *e3[2] = {t, g};
    ot_computation_set_root(c, ot_build_tuple(c, e3, 2));
    ot_module_set_entry(m, c);
    a[0] = val(vec(OT_F32, 2), d);
    ASSERT_OK(run(m, a, 1, &r));
    ASSERT_TRUE(r.tuple[0].kind == OT_IR_TUPLE && r.tuple[0].tuple[1].kind == OT_IR_ARRAY);
    EXPECT_F(F(&r.tuple[0].tuple[1])[0], -1.0f);
    EXPECT_F(F(&r.tuple[1])[0], -1.0f);
    ot_value_release(&r);
}

static void test_evaluate_instr(void) {
    ot_module *m = axpy();
    ot_computation *c = ot_module_entry(m);
    float d1[3] = {1, 2, 3}, d2[3] = {10, 20, 30};
    ot_value ops[2] = {val(vec(OT_F32, 3), d1), val(vec(OT_F32, 3), d2)}, r;
    ASSERT_OK(ot_evaluate_instr(c->root, ops, 2, NULL, &r));
    EXPECT_F(F(&r)[1], 22.0f);
    ot_value_release(&r);
    EXPECT_STATUS(ot_evaluate_instr(c->root, ops, 1, NULL, &r), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_evaluate_instr(c->params[0], NULL, 0, NULL, &r), OT_ERR_INVALID_ARGUMENT);
    ot_value_release(&ops[1]);
    ops[1] = val(vec(OT_F32, 2), NULL);
    EXPECT_STATUS(ot_evaluate_instr(c->root, ops, 2, NULL, &r), OT_ERR_SHAPE_MISMATCH);
    ot_value_release(&ops[0]);
    ot_value_release(&ops[1]);
    ot_module_free(m);
}

OT_TEST_MAIN(OT_TEST(test_max_min_nan_signed_zero), OT_TEST(test_float_arith),
             OT_TEST(test_unary_float), OT_TEST(test_int_division),
             OT_TEST(test_int_overflow_and_bits), OT_TEST(test_shifts), OT_TEST(test_compare),
             OT_TEST(test_convert), OT_TEST(test_bf16_arith_rounds_once),
             OT_TEST(test_reduce_precision), OT_TEST(test_select_clamp),
             OT_TEST(test_bitcast_convert_iota), OT_TEST(test_bad_args),
             OT_TEST(test_elided_constant_and_custom_call), OT_TEST(test_while_reduce_dot),
             OT_TEST(test_reduce_lane_order), OT_TEST(test_reduce_widened_sums),
             OT_TEST(test_expf_poly), OT_TEST(test_tanhf_poly), OT_TEST(test_erff_poly),
             OT_TEST(test_logf_poly), OT_TEST(test_expm1f_poly), OT_TEST(test_sincosf_sleef),
             OT_TEST(test_vmath_edges), OT_TEST(test_vmath_own_ulp), OT_TEST(test_powf_special),
             OT_TEST(test_pow_special), OT_TEST(test_alloc_failure_cleanup),
             OT_TEST(test_evaluate_instr), OT_TEST(test_tuple_root_and_gte))
