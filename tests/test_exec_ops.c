/* Reference kernels, one test per op family beyond the elementwise ones (test_exec.c): data
 * movement, gather/scatter, windows, sort/topk/map, dot and convolution variants, control flow,
 * collectives over a test communicator, rng known answers, empty shapes. Expectations are
 * computed by hand. */
#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "optitpu/runtime.h"
#include "optitpu/ir.h"
#include "ot_test.h"
#include "../src/ir/op_traits.h"

static ot_shape shp(ot_dtype t, int rank, const int64_t *dims) {
    ot_shape s;
    ot_shape_make(&s, t, rank, dims);
    return s;
}

#define SHP(t, ...)                                                                                \
    shp(t, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static ot_value val(ot_shape s, const void *data) {
    ot_value v;
    ot_value_alloc_array(&v, &s);
    if (data && v.array.nbytes) memcpy(v.array.data, data, v.array.nbytes);
    return v;
}

static ot_status run(ot_module *m, ot_value *args, int nargs, const ot_eval_options *o,
                     ot_value *out) {
    *out = ot_value_empty();
    ot_status s = ot_module_finalize(m);
    if (s == OT_OK) s = ot_evaluate(m, args, nargs, o, out);
    ot_module_free(m);
    for (int k = 0; k < nargs; k++) ot_value_release(&args[k]);
    return s;
}

static ot_computation *scalar_fn(ot_module *m, const char *name, ot_opcode op, ot_dtype t) {
    ot_computation *r = ot_module_add_computation(m, name);
    ot_instr *a = ot_build_parameter(r, 0, ot_shape_scalar(t), "a");
    ot_instr *b = ot_build_parameter(r, 1, ot_shape_scalar(t), "b");
    ot_computation_set_root(r, ot_build_binary(r, op, a, b));
    return r;
}

static void expect_f32(const ot_value *v, const float *want, int64_t n) {
    ASSERT_TRUE(v->kind == OT_IR_ARRAY && v->array.shape.dtype == OT_F32);
    ASSERT_TRUE(ot_shape_numel_unchecked(&v->array.shape) == n);
    const float *g = v->array.data;
    for (int64_t i = 0; i < n; i++)
        if (g[i] != want[i]) {
            EXPECT_NEAR(g[i], want[i], 0);
            return;
        }
}

static void expect_s32(const ot_value *v, const int32_t *want, int64_t n) {
    ASSERT_TRUE(v->kind == OT_IR_ARRAY && v->array.shape.dtype == OT_S32);
    ASSERT_TRUE(ot_shape_numel_unchecked(&v->array.shape) == n);
    const int32_t *g = v->array.data;
    for (int64_t i = 0; i < n; i++)
        if (g[i] != want[i]) {
            EXPECT_INT_EQ(g[i], want[i]);
            return;
        }
}

/* x: f32[2,3] = 0..5 */
static const float X23[6] = {0, 1, 2, 3, 4, 5};

/* ---- data movement --------------------------------------------------------------------- */

static void test_broadcast_transpose_reshape_reverse(void) {
    ot_module *m = ot_module_new("m");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SHP(OT_F32, 2, 3), "x");
    ot_instr *v = ot_build_parameter(c, 1, SHP(OT_F32, 3), "v");
    ot_instr *bc = ot_build_broadcast(c, v, SHP(OT_F32, 2, 3), (int64_t[]){1}, 1);
    ot_instr *tr = ot_build_transpose(c, x, (int64_t[]){1, 0}, 2);
    ot_instr *rs = ot_build_reshape(c, x, SHP(OT_F32, 3, 2));
    ot_instr *rv = ot_build_reverse(c, x, (int64_t[]){0, 1}, 2);
    ot_instr *ob = ot_build_opt_barrier(c, ot_build_copy(c, x));
    ot_instr *outs[5] = {bc, tr, rs, rv, ob};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 5));
    ot_module_set_entry(m, c);
    ot_value a[2] = {val(SHP(OT_F32, 2, 3), X23), val(SHP(OT_F32, 3), (float[]){7, 8, 9})}, r;
    ASSERT_OK(run(m, a, 2, NULL, &r));
    expect_f32(&r.tuple[0], (float[]){7, 8, 9, 7, 8, 9}, 6);
    expect_f32(&r.tuple[1], (float[]){0, 3, 1, 4, 2, 5}, 6);
    expect_f32(&r.tuple[2], X23, 6);
    EXPECT_INT_EQ(r.tuple[2].array.shape.dims[0], 3);
    expect_f32(&r.tuple[3], (float[]){5, 4, 3, 2, 1, 0}, 6);
    expect_f32(&r.tuple[4], X23, 6);
    ot_value_release(&r);
}

static void test_slice_concat_pad(void) {
    ot_module *m = ot_module_new("m");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SHP(OT_F32, 2, 3), "x");
    ot_instr *sl = ot_build_slice(c, x, (int64_t[]){0, 0}, (int64_t[]){2, 3}, (int64_t[]){1, 2});
    ot_instr *cc[2] = {x, x};
    ot_instr *cat = ot_build_concatenate(c, cc, 2, 1);
    ot_instr *pv = ot_build_constant_scalar(c, OT_F32, -1);
    /* dim 0: lo 1, hi -1 (crop), interior 0; dim 1: lo -1 (crop), hi 1, interior 1 */
    ot_pad_dim pd[2] = {{1, -1, 0}, {-1, 1, 1}};
    ot_instr *pad = ot_build_pad(c, x, pv, pd);
    ot_instr *outs[3] = {sl, cat, pad};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 3));
    ot_module_set_entry(m, c);
    ot_value a[1] = {val(SHP(OT_F32, 2, 3), X23)}, r;
    ASSERT_OK(run(m, a, 1, NULL, &r));
    expect_f32(&r.tuple[0], (float[]){0, 2, 3, 5}, 4);
    expect_f32(&r.tuple[1], (float[]){0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}, 12);
    /* padded dim 1 before crop: 0 -1 1 -1 2 -1 (lo -1 removes the first, hi adds -1):
     * [-1, 1, -1, 2, -1]; dim 0: a row of -1 then row 0 (row 1 cropped) */
    ASSERT_TRUE(r.tuple[2].array.shape.dims[0] == 2 && r.tuple[2].array.shape.dims[1] == 5);
    expect_f32(&r.tuple[2], (float[]){-1, -1, -1, -1, -1, -1, 1, -1, 2, -1}, 10);
    ot_value_release(&r);
}

static void test_dynamic_slice_clamps(void) {
    ot_module *m = ot_module_new("m");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SHP(OT_F32, 2, 3), "x");
    ot_instr *i0 = ot_build_parameter(c, 1, ot_shape_scalar(OT_S32), "i");
    ot_instr *j0 = ot_build_parameter(c, 2, ot_shape_scalar(OT_S32), "j");
    ot_instr *idx[2] = {i0, j0};
    ot_instr *ds = ot_build_dynamic_slice(c, x, idx, (int64_t[]){1, 2});
    ot_instr *up = ot_build_constant(c, SHP(OT_F32, 1, 2), (float[]){9, 9});
    ot_instr *dus = ot_build_dynamic_update_slice(c, x, up, idx);
    ot_instr *outs[2] = {ds, dus};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 2));
    ot_module_set_entry(m, c);
    /* starts (5, -3) clamp to (1, 0) */
    int32_t i = 5, j = -3;
    ot_value a[3] = {val(SHP(OT_F32, 2, 3), X23), val(ot_shape_scalar(OT_S32), &i),
                     val(ot_shape_scalar(OT_S32), &j)},
             r;
    ASSERT_OK(run(m, a, 3, NULL, &r));
    expect_f32(&r.tuple[0], (float[]){3, 4}, 2);
    expect_f32(&r.tuple[1], (float[]){0, 1, 2, 9, 9, 5}, 6);
    ot_value_release(&r);
}

static void test_gather_scatter(void) {
    /* gather rows [2, 0, 1] of a [3,2] table (the take pattern), and clamped index 7 -> row 1 */
    ot_module *m = ot_module_new("m");
    ot_computation *add = scalar_fn(m, "add", OT_OP_ADD, OT_F32);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *t = ot_build_parameter(c, 0, SHP(OT_F32, 3, 2), "t");
    ot_instr *ix = ot_build_parameter(c, 1, SHP(OT_S32, 4, 1), "ix");
    ot_gather_dims g;
    memset(&g, 0, sizeof g);
    g.noffset = 1;
    g.offset_dims[0] = 1;
    g.ncollapsed = 1;
    g.collapsed_slice_dims[0] = 0;
    g.nstart_index_map = 1;
    g.start_index_map[0] = 0;
    g.index_vector_dim = 1;
    g.nslice_sizes = 2;
    g.slice_sizes[0] = 1;
    g.slice_sizes[1] = 2;
    ot_instr *ga = ot_build_gather(c, t, ix, &g);
    /* scatter-add of rows into the table at the same indices (out-of-range index 7 skipped),
     * applied in index order */
    ot_scatter_dims sd;
    memset(&sd, 0, sizeof sd);
    sd.nupdate_window = 1;
    sd.update_window_dims[0] = 1;
    sd.ninserted = 1;
    sd.inserted_window_dims[0] = 0;
    sd.nscatter_to_operand = 1;
    sd.scatter_dims_to_operand_dims[0] = 0;
    sd.index_vector_dim = 1;
    ot_instr *upd = ot_build_parameter(c, 2, SHP(OT_F32, 4, 2), "u");
    ot_instr *sc = ot_build_scatter(c, &t, 1, ix, &upd, &sd, add);
    ot_instr *outs[2] = {ga, sc};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 2));
    ot_module_set_entry(m, c);
    int32_t ixd[4] = {2, 0, 7, 2};
    float ud[8] = {1, 1, 10, 10, 100, 100, 1000, 1000};
    ot_value a[3] = {val(SHP(OT_F32, 3, 2), X23), val(SHP(OT_S32, 4, 1), ixd),
                     val(SHP(OT_F32, 4, 2), ud)},
             r;
    ASSERT_OK(run(m, a, 3, NULL, &r));
    expect_f32(&r.tuple[0], (float[]){4, 5, 0, 1, 4, 5, 4, 5}, 8);
    expect_f32(&r.tuple[1], (float[]){10, 11, 2, 3, 1005, 1006}, 6);
    ot_value_release(&r);
}

/* A gather of 700 windows of 3 from a [64, 40] table (more than one batch of source positions,
 * evaluator src/exec/shape_ops.c), with indices below 0 and past the end clamped: every element
 * against the rule written out. */
static void test_gather_many(void) {
    enum { R = 64, C = 40, N = 700, W = 3 };
    ot_module *m = ot_module_new("m");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *t = ot_build_parameter(c, 0, SHP(OT_F32, R, C), "t");
    ot_instr *ix = ot_build_parameter(c, 1, SHP(OT_S32, N, 2), "ix");
    ot_gather_dims g;
    memset(&g, 0, sizeof g);
    g.noffset = 1;
    g.offset_dims[0] = 1;
    g.ncollapsed = 1;
    g.collapsed_slice_dims[0] = 0;
    g.nstart_index_map = 2;
    g.start_index_map[0] = 0;
    g.start_index_map[1] = 1;
    g.index_vector_dim = 1;
    g.nslice_sizes = 2;
    g.slice_sizes[0] = 1;
    g.slice_sizes[1] = W;
    ot_computation_set_root(c, ot_build_gather(c, t, ix, &g));
    ot_module_set_entry(m, c);
    static float tab[R * C];
    static int32_t idx[N * 2];
    static float want[N * W];
    for (int k = 0; k < R * C; k++) tab[k] = (float)k;
    uint32_t s = 12345;
    for (int e = 0; e < N; e++) {
        s = s * 1103515245u + 12345u;
        idx[2 * e] = (int32_t)((s >> 8) % (R + 20)) - 10;
        idx[2 * e + 1] = (int32_t)((s >> 20) % (C + 20)) - 10;
        int r = idx[2 * e] < 0 ? 0 : idx[2 * e] > R - 1 ? R - 1 : idx[2 * e];
        int q = idx[2 * e + 1] < 0 ? 0 : idx[2 * e + 1] > C - W ? C - W : idx[2 * e + 1];
        for (int w = 0; w < W; w++) want[e * W + w] = tab[r * C + q + w];
    }
    ot_value a[2] = {val(SHP(OT_F32, R, C), tab), val(SHP(OT_S32, N, 2), idx)}, r;
    ASSERT_OK(run(m, a, 2, NULL, &r));
    expect_f32(&r, want, N * W);
    ot_value_release(&r);
}

static void test_scatter_order_overwrite(void) {
    /* an update function that returns the new value: the last update in index order wins */
    ot_module *m = ot_module_new("m");
    ot_computation *take = ot_module_add_computation(m, "take");
    ot_build_parameter(take, 0, ot_shape_scalar(OT_S32), "a");
    ot_computation_set_root(take, ot_build_parameter(take, 1, ot_shape_scalar(OT_S32), "b"));
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SHP(OT_S32, 3), "x");
    ot_instr *ix = ot_build_parameter(c, 1, SHP(OT_S32, 3), "ix");
    ot_instr *u = ot_build_parameter(c, 2, SHP(OT_S32, 3), "u");
    ot_scatter_dims sd;
    memset(&sd, 0, sizeof sd);
    sd.ninserted = 1;
    sd.inserted_window_dims[0] = 0;
    sd.nscatter_to_operand = 1;
    sd.scatter_dims_to_operand_dims[0] = 0;
    sd.index_vector_dim = 1; /* == rank of indices: scalar indices */
    ot_computation_set_root(c, ot_build_scatter(c, &x, 1, ix, &u, &sd, take));
    ot_module_set_entry(m, c);
    ot_value a[3] = {val(SHP(OT_S32, 3), (int32_t[]){0, 0, 0}),
                     val(SHP(OT_S32, 3), (int32_t[]){1, 1, -1}),
                     val(SHP(OT_S32, 3), (int32_t[]){5, 6, 7})},
             r;
    ASSERT_OK(run(m, a, 3, NULL, &r));
    expect_s32(&r, (int32_t[]){0, 6, 0}, 3);
    ot_value_release(&r);
}

/* ---- reductions and windows ------------------------------------------------------------ */

static void test_reduce_variadic_argmax(void) {
    /* (value, index) max-reduce with ties to the lower index: XLA's argmax pattern */
    ot_module *m = ot_module_new("m");
    ot_computation *r = ot_module_add_computation(m, "argmax");
    ot_instr *av = ot_build_parameter(r, 0, ot_shape_scalar(OT_F32), "av");
    ot_instr *ai = ot_build_parameter(r, 1, ot_shape_scalar(OT_S32), "ai");
    ot_instr *bv = ot_build_parameter(r, 2, ot_shape_scalar(OT_F32), "bv");
    ot_instr *bi = ot_build_parameter(r, 3, ot_shape_scalar(OT_S32), "bi");
    ot_instr *gt = ot_build_compare(r, av, bv, OT_CMP_GT, OT_CMP_TYPE_DEFAULT);
    ot_instr *eq = ot_build_compare(r, av, bv, OT_CMP_EQ, OT_CMP_TYPE_DEFAULT);
    ot_instr *lt = ot_build_compare(r, ai, bi, OT_CMP_LT, OT_CMP_TYPE_DEFAULT);
    ot_instr *take_a = ot_build_binary(r, OT_OP_OR, gt, ot_build_binary(r, OT_OP_AND, eq, lt));
    ot_instr *res[2] = {ot_build_select(r, take_a, av, bv), ot_build_select(r, take_a, ai, bi)};
    ot_computation_set_root(r, ot_build_tuple(r, res, 2));
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SHP(OT_F32, 2, 4), "x");
    ot_instr *io = ot_build_iota(c, SHP(OT_S32, 2, 4), 1);
    ot_instr *in[2] = {x, io};
    ot_instr *init[2] = {ot_build_constant_scalar(c, OT_F32, -INFINITY),
                         ot_build_constant_scalar(c, OT_S32, 0)};
    ot_computation_set_root(c, ot_build_reduce(c, in, init, 2, (int64_t[]){1}, 1, r));
    ot_module_set_entry(m, c);
    float xd[8] = {1, 5, 5, 2, -1, -3, -1, -2};
    ot_value a[1] = {val(SHP(OT_F32, 2, 4), xd)}, out;
    ASSERT_OK(run(m, a, 1, NULL, &out));
    expect_f32(&out.tuple[0], (float[]){5, -1}, 2);
    expect_s32(&out.tuple[1], (int32_t[]){1, 0}, 2);
    ot_value_release(&out);
}

static void test_reduce_order_and_empty(void) {
    /* f32 sum in row-major order from the init: 1e8 + 1 + ... stays exact per step */
    ot_module *m = ot_module_new("m");
    ot_computation *add = scalar_fn(m, "add", OT_OP_ADD, OT_F32);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SHP(OT_F32, 4), "x");
    ot_instr *e = ot_build_parameter(c, 1, SHP(OT_F32, 0, 3), "e");
    ot_instr *z = ot_build_constant_scalar(c, OT_F32, 0);
    ot_instr *s = ot_build_reduce(c, &x, &z, 1, (int64_t[]){0}, 1, add);
    ot_instr *se = ot_build_reduce(c, &e, &z, 1, (int64_t[]){0}, 1, add);
    ot_instr *outs[2] = {s, se};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 2));
    ot_module_set_entry(m, c);
    /* sequential: ((0 + 1e8) + 1) + 1 ... each +1 is lost in f32 (ulp at 1e8 is 8) */
    float xd[4] = {1e8f, 1, 1, -1e8f};
    ot_value a[2] = {val(SHP(OT_F32, 4), xd), val(SHP(OT_F32, 0, 3), NULL)}, r;
    ASSERT_OK(run(m, a, 2, NULL, &r));
    expect_f32(&r.tuple[0], (float[]){0}, 1);
    expect_f32(&r.tuple[1], (float[]){0, 0, 0}, 3); /* empty reduction gives the init */
    ot_value_release(&r);
}

static ot_window win1(int64_t size, int64_t stride, int64_t lo, int64_t hi, int64_t wdil,
                      int64_t bdil) {
    ot_window w;
    memset(&w, 0, sizeof w);
    w.rank = 1;
    w.dims[0] = (ot_window_dim){size, stride, lo, hi, wdil, bdil, false};
    return w;
}

static void test_reduce_window_and_select_and_scatter(void) {
    ot_module *m = ot_module_new("m");
    ot_computation *mx = scalar_fn(m, "max", OT_OP_MAXIMUM, OT_F32);
    ot_computation *add = scalar_fn(m, "add", OT_OP_ADD, OT_F32);
    ot_computation *ge = ot_module_add_computation(m, "ge");
    {
        ot_instr *a = ot_build_parameter(ge, 0, ot_shape_scalar(OT_F32), "a");
        ot_instr *b = ot_build_parameter(ge, 1, ot_shape_scalar(OT_F32), "b");
        ot_computation_set_root(ge, ot_build_compare(ge, a, b, OT_CMP_GE, OT_CMP_TYPE_DEFAULT));
    }
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SHP(OT_F32, 5), "x");
    ot_instr *ninf = ot_build_constant_scalar(c, OT_F32, -INFINITY);
    ot_instr *zero = ot_build_constant_scalar(c, OT_F32, 0);
    /* max pool size 2 stride 2 with padding (0, 1): [max(x0,x1), max(x2,x3), max(x4, pad)] */
    ot_window w = win1(2, 2, 0, 1, 1, 1);
    ot_instr *rw = ot_build_reduce_window(c, &x, &ninf, 1, &w, mx);
    /* sum window 2, stride 1, base dilation 2 (holes), padding 0: positions of the dilated
     * input [x0 _ x1 _ x2 _ x3 _ x4] -> each window covers one real element */
    ot_window wd = win1(2, 1, 0, 0, 1, 2);
    ot_instr *rd = ot_build_reduce_window(c, &x, &zero, 1, &wd, add);
    /* window dilation 2: windows {0,2}, {1,3}, {2,4} */
    ot_window ww = win1(2, 1, 0, 0, 2, 1);
    ot_instr *rwd = ot_build_reduce_window(c, &x, &zero, 1, &ww, add);
    ot_instr *src = ot_build_parameter(c, 1, SHP(OT_F32, 3), "src");
    ot_instr *ss = ot_build_select_and_scatter(c, x, src, zero, &w, ge, add);
    ot_instr *outs[4] = {rw, rd, rwd, ss};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 4));
    ot_module_set_entry(m, c);
    float xd[5] = {1, 3, 3, 2, -7};
    ot_value a[2] = {val(SHP(OT_F32, 5), xd), val(SHP(OT_F32, 3), (float[]){10, 20, 30})}, r;
    ASSERT_OK(run(m, a, 2, NULL, &r));
    expect_f32(&r.tuple[0], (float[]){3, 3, -7}, 3);
    expect_f32(&r.tuple[1], (float[]){1, 3, 3, 3, 3, 2, 2, -7}, 8);
    expect_f32(&r.tuple[2], (float[]){4, 5, -4}, 3);
    /* select ge keeps the first of equal maxima: 3 at index 1 (window 0), 3 at index 2 */
    expect_f32(&r.tuple[3], (float[]){0, 10, 20, 0, 30}, 5);
    ot_value_release(&r);
}

static ot_computation *lt_comparator(ot_module *m, ot_dtype t, ot_cmp_type ty, int nkeys) {
    ot_computation *r = ot_module_add_computation(m, "lt");
    ot_instr *p[4];
    for (int k = 0; k < 2 * nkeys; k++)
        p[k] = ot_build_parameter(r, k, ot_shape_scalar(k < 2 ? t : OT_S32), NULL);
    ot_computation_set_root(r, ot_build_compare(r, p[0], p[1], OT_CMP_LT, ty));
    return r;
}

static void test_sort_stable_multi_operand(void) {
    ot_module *m = ot_module_new("m");
    ot_computation *lt = lt_comparator(m, OT_F32, OT_CMP_TYPE_TOTALORDER, 2);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *k = ot_build_parameter(c, 0, SHP(OT_F32, 2, 4), "k");
    ot_instr *io = ot_build_iota(c, SHP(OT_S32, 2, 4), 1);
    ot_instr *xs[2] = {k, io};
    ot_computation_set_root(c, ot_build_sort(c, xs, 2, 1, true, lt));
    ot_module_set_entry(m, c);
    float kd[8] = {NAN, 1, -0.0f, 0.0f, 2, 2, 1, 2};
    ot_value a[1] = {val(SHP(OT_F32, 2, 4), kd)}, r;
    ASSERT_OK(run(m, a, 1, NULL, &r));
    const float *v = r.tuple[0].array.data;
    EXPECT_TRUE(v[0] == 0 && signbit(v[0])); /* -0 < +0 < 1 < NaN in total order */
    EXPECT_TRUE(v[1] == 0 && !signbit(v[1]));
    EXPECT_TRUE(v[2] == 1 && isnan(v[3]));
    expect_s32(&r.tuple[1], (int32_t[]){2, 3, 1, 0, 2, 0, 1, 3}, 8); /* equal keys keep order */
    ot_value_release(&r);
}

static void test_topk_and_map(void) {
    ot_module *m = ot_module_new("m");
    ot_computation *mul = scalar_fn(m, "mul", OT_OP_MULTIPLY, OT_S32);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SHP(OT_F32, 5), "x");
    ot_attrs at;
    memset(&at, 0, sizeof at);
    at.index = 3;
    at.largest = true;
    ot_instr *tk = ot_build(c, OT_OP_TOPK, &x, 1, &at, NULL, 0, NULL, "topk");
    ot_instr *i = ot_build_parameter(c, 1, SHP(OT_S32, 3), "i");
    ot_instr *mi[2] = {i, i};
    ot_instr *mp = ot_build(c, OT_OP_MAP, mi, 2, &(ot_attrs){.ndims = 1, .dims = (int64_t[]){0}},
                            &mul, 1, NULL, "map");
    ot_instr *outs[2] = {tk, mp};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 2));
    ot_module_set_entry(m, c);
    ot_value a[2] = {val(SHP(OT_F32, 5), (float[]){3, 9, 3, -1, 9}),
                     val(SHP(OT_S32, 3), (int32_t[]){-2, 3, 65536})},
             r;
    ASSERT_OK(run(m, a, 2, NULL, &r));
    expect_f32(&r.tuple[0].tuple[0], (float[]){9, 9, 3}, 3);
    expect_s32(&r.tuple[0].tuple[1], (int32_t[]){1, 4, 0}, 3);
    expect_s32(&r.tuple[1], (int32_t[]){4, 9, 0}, 3); /* 65536^2 wraps to 0 */
    ot_value_release(&r);
}

/* ---- dot and convolution --------------------------------------------------------------- */

static void test_dot_general_batch_and_bf16(void) {
    ot_module *m = ot_module_new("m");
    ot_computation *c = ot_module_add_computation(m, "main");
    /* lhs [b=2, k=3, i=1], rhs [b=2, j=2, k=3] -> [2, 1, 2] */
    ot_instr *l = ot_build_parameter(c, 0, SHP(OT_F32, 2, 3, 1), "l");
    ot_instr *rr = ot_build_parameter(c, 1, SHP(OT_F32, 2, 2, 3), "r");
    ot_dot_dims dn;
    memset(&dn, 0, sizeof dn);
    dn.nbatch = 1;
    dn.ncontract = 1;
    dn.lhs_contract[0] = 1;
    dn.rhs_contract[0] = 2;
    ot_instr *d = ot_build_dot(c, l, rr, &dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT);
    /* bf16 x bf16 -> f32 accumulates in f32: 256 + 1 + 1 = 258 (bf16 steps would lose them) */
    ot_instr *bl = ot_build_parameter(c, 2, SHP(OT_BF16, 3), "bl");
    ot_dot_dims dv;
    memset(&dv, 0, sizeof dv);
    dv.ncontract = 1;
    ot_ir_shape f32hint = {.kind = OT_IR_ARRAY, .array = {.dtype = OT_F32, .rank = -1}};
    ot_instr *bl2[2] = {bl, bl};
    ot_instr *bd = ot_build(c, OT_OP_DOT, bl2, 2, &(ot_attrs){.dot = &dv}, NULL, 0, &f32hint, "bd");
    ot_instr *bdb = ot_build_dot(c, bl, bl, &dv, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT);
    /* integer dot wraps: s8 x s8 -> s8 */
    ot_instr *il = ot_build_parameter(c, 3, SHP(OT_S8, 2), "il");
    ot_instr *id = ot_build_dot(c, il, il, &dv, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT);
    ot_instr *outs[4] = {d, bd, bdb, id};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 4));
    ot_module_set_entry(m, c);
    float ld[6] = {1, 2, 3, 4, 5, 6};
    float rd[12] = {1, 0, 0, 0, 1, 1, 1, 1, 1, 2, 0, 0};
    uint16_t bv[3] = {0x4180, 0x3f80, 0x3f80}; /* 16, 1, 1 -> 256 + 1 + 1 */
    int8_t iv[2] = {10, 10};
    ot_value a[4] = {val(SHP(OT_F32, 2, 3, 1), ld), val(SHP(OT_F32, 2, 2, 3), rd),
                     val(SHP(OT_BF16, 3), bv), val(SHP(OT_S8, 2), iv)},
             r;
    ASSERT_OK(run(m, a, 4, NULL, &r));
    expect_f32(&r.tuple[0], (float[]){1, 5, 15, 8}, 4);
    expect_f32(&r.tuple[1], (float[]){258}, 1);
    EXPECT_INT_EQ(*(uint16_t *)r.tuple[2].array.data, 0x4381); /* 258 in bf16 rounds to 258 */
    EXPECT_INT_EQ(*(int8_t *)r.tuple[3].array.data, -56);      /* 200 wraps */
    ot_value_release(&r);
}

static ot_instr *conv(ot_computation *c, ot_instr *l, ot_instr *k, const ot_window *w, int64_t fg,
                      int64_t bg) {
    /* layouts b0f / 0io -> b0f */
    ot_conv_dims d;
    memset(&d, 0, sizeof d);
    d.nspatial = 1;
    d.input_batch = 0;
    d.input_spatial[0] = 1;
    d.input_feature = 2;
    d.kernel_spatial[0] = 0;
    d.kernel_input_feature = 1;
    d.kernel_output_feature = 2;
    d.output_batch = 0;
    d.output_spatial[0] = 1;
    d.output_feature = 2;
    return ot_build_convolution(c, l, k, w, &d, fg, bg);
}

static void test_convolution_variants(void) {
    ot_module *m = ot_module_new("m");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SHP(OT_F32, 1, 4, 1), "x"); /* [1, 4, 1] */
    ot_instr *k = ot_build_parameter(c, 1, SHP(OT_F32, 2, 1, 1), "k"); /* [2, 1, 1] */
    ot_window w = win1(2, 1, 0, 0, 1, 1);
    ot_instr *valid = conv(c, x, k, &w, 1, 1);
    ot_window wp = win1(2, 2, 1, 1, 1, 1); /* stride 2, pad 1 each side */
    ot_instr *padded = conv(c, x, k, &wp, 1, 1);
    ot_window wl = win1(2, 1, 0, 0, 1, 2); /* lhs dilation 2 (transposed-conv form) */
    ot_instr *ldil = conv(c, x, k, &wl, 1, 1);
    ot_window wr = win1(2, 1, 0, 0, 2, 1); /* rhs dilation 2 */
    ot_instr *rdil = conv(c, x, k, &wr, 1, 1);
    ot_window wv = w;
    wv.dims[0].reversal = true;
    ot_instr *rev = conv(c, x, k, &wv, 1, 1);
    /* feature groups: 2 input features, 2 groups, kernel [1, 1, 2] (depthwise scale) */
    ot_instr *x2 = ot_build_parameter(c, 2, SHP(OT_F32, 1, 2, 2), "x2");
    ot_instr *k2 = ot_build_parameter(c, 3, SHP(OT_F32, 1, 1, 2), "k2");
    ot_window w1 = win1(1, 1, 0, 0, 1, 1);
    ot_instr *grp = conv(c, x2, k2, &w1, 2, 1);
    /* batch groups: batch 2 split into 2 groups, one output feature each */
    ot_instr *x3 = ot_build_parameter(c, 4, SHP(OT_F32, 2, 2, 1), "x3");
    ot_instr *k3 = ot_build_parameter(c, 5, SHP(OT_F32, 1, 1, 2), "k3");
    ot_instr *bgc = conv(c, x3, k3, &w1, 1, 2);
    ot_instr *outs[7] = {valid, padded, ldil, rdil, rev, grp, bgc};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 7));
    ot_module_set_entry(m, c);
    ot_value a[6] = {val(SHP(OT_F32, 1, 4, 1), (float[]){1, 2, 3, 4}),
                     val(SHP(OT_F32, 2, 1, 1), (float[]){10, 1}),
                     val(SHP(OT_F32, 1, 2, 2), (float[]){1, 2, 3, 4}),
                     val(SHP(OT_F32, 1, 1, 2), (float[]){10, 100}),
                     val(SHP(OT_F32, 2, 2, 1), (float[]){1, 2, 3, 4}),
                     val(SHP(OT_F32, 1, 1, 2), (float[]){10, 100})},
             r;
    ASSERT_OK(run(m, a, 6, NULL, &r));
    expect_f32(&r.tuple[0], (float[]){12, 23, 34}, 3);
    expect_f32(&r.tuple[1], (float[]){1, 23, 40}, 3); /* [0 1][2 3][4 0] */
    /* dilated input [1 0 2 0 3 0 4]: windows (1,0) (0,2) (2,0) (0,3) (3,0) (0,4) */
    expect_f32(&r.tuple[2], (float[]){10, 2, 20, 3, 30, 4}, 6);
    expect_f32(&r.tuple[3], (float[]){13, 24}, 2);     /* taps 0 and 2 */
    expect_f32(&r.tuple[4], (float[]){21, 32, 43}, 3); /* kernel read reversed */
    expect_f32(&r.tuple[5], (float[]){10, 200, 30, 400}, 4);
    /* output feature 0 sees batch 0, feature 1 sees batch 1 */
    expect_f32(&r.tuple[6], (float[]){10, 300, 20, 400}, 4);
    ot_value_release(&r);
}

/* ---- control flow ---------------------------------------------------------------------- */

static void test_call_conditional(void) {
    ot_module *m = ot_module_new("m");
    ot_computation *neg = ot_module_add_computation(m, "neg");
    ot_computation_set_root(
        neg, ot_build_unary(neg, OT_OP_NEGATE, ot_build_parameter(neg, 0, SHP(OT_F32, 2), "p")));
    ot_computation *dbl = ot_module_add_computation(m, "dbl");
    {
        ot_instr *p = ot_build_parameter(dbl, 0, SHP(OT_F32, 2), "p");
        ot_computation_set_root(dbl, ot_build_binary(dbl, OT_OP_ADD, p, p));
    }
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SHP(OT_F32, 2), "x");
    ot_instr *bi = ot_build_parameter(c, 1, ot_shape_scalar(OT_S32), "b");
    ot_instr *pr = ot_build_parameter(c, 2, ot_shape_scalar(OT_PRED), "p");
    ot_instr *cl = ot_build_call(c, dbl, &x, 1);
    ot_computation *br[2] = {neg, dbl};
    ot_instr *args[2] = {x, cl};
    ot_instr *cs = ot_build_conditional(c, bi, br, args, 2);
    ot_instr *cp = ot_build_conditional(c, pr, br, args, 2);
    ot_instr *outs[2] = {cs, cp};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 2));
    ot_module_set_entry(m, c);
    ASSERT_OK(ot_module_finalize(m));
    int32_t idx[3] = {0, 1, 9};
    float want0[3][2] = {{-1, -2}, {4, 8}, {4, 8}}; /* out of range -> the last branch */
    for (int t = 0; t < 3; t++) {
        uint8_t p = t == 0 ? 0 : 1;
        ot_value a[3] = {val(SHP(OT_F32, 2), (float[]){1, 2}),
                         val(ot_shape_scalar(OT_S32), &idx[t]), val(ot_shape_scalar(OT_PRED), &p)},
                 r;
        ASSERT_OK(ot_evaluate(m, a, 3, NULL, &r));
        expect_f32(&r.tuple[0], want0[t], 2);
        /* pred: true -> branch 0 (negate x), false -> branch 1 (double the call result) */
        expect_f32(&r.tuple[1], p ? (float[]){-1, -2} : (float[]){4, 8}, 2);
        ot_value_release(&r);
        for (int k = 0; k < 3; k++) ot_value_release(&a[k]);
    }
    ot_module_free(m);
}

/* ---- collectives ----------------------------------------------------------------------- */

/* A test communicator for device `replica_id` of 2: the peer contributes its own buffer with
 * every byte pattern of an f32 / s32 value doubled (peer value = 2 * ours + 1 for s32, 10 * ours
 * for f32), standing in for the other replica. */
typedef struct fake_comm {
    ot_dtype dt;
    int calls;
} fake_comm;

static ot_status fake_exchange(void *ctx, const int64_t *ids, int n, const void *send, size_t bytes,
                               void *recv) {
    fake_comm *f = ctx;
    f->calls++;
    for (int k = 0; k < n; k++) {
        char *dst = (char *)recv + (size_t)k * bytes;
        memcpy(dst, send, bytes);
        if (ids[k] != 0) { /* we are replica 0; others send a transformed copy */
            if (f->dt == OT_F32)
                for (size_t e = 0; e < bytes / 4; e++) ((float *)dst)[e] *= 10.0f * (float)ids[k];
        }
    }
    return OT_OK;
}

static void test_collectives(void) {
    ot_module *m = ot_module_new("m");
    ot_module_set_replica_count(m, 2);
    ot_computation *add = scalar_fn(m, "add", OT_OP_ADD, OT_F32);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SHP(OT_F32, 2), "x");
    ot_instr *ar = ot_build_all_reduce(c, &x, 1, NULL, 0, false, add);
    ot_instr *ag = ot_build_all_gather(c, x, 0, NULL, 0, false);
    ot_instr *rs = ot_build_reduce_scatter(c, x, 0, NULL, 0, false, add);
    ot_instr *a2a = ot_build_all_to_all(c, x, 0, NULL, 0);
    ot_instr *cp = ot_build_collective_permute(c, x, (int64_t[]){1, 0, 0, 1}, 2, 0);
    ot_instr *rid = ot_build_replica_id(c);
    ot_instr *pid = ot_build_partition_id(c);
    ot_instr *outs[7] = {ar, ag, rs, a2a, cp, rid, pid};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 7));
    ot_module_set_entry(m, c);
    ASSERT_OK(ot_module_finalize(m));
    /* two replicas; we are replica 0, replica 1 holds 10 * our values */
    fake_comm fc = {OT_F32, 0};
    ot_exec_comm comm = {&fc, 0, 0, 2, 1, fake_exchange};
    ot_eval_options o = ot_eval_options_default();
    o.comm = &comm;
    ot_value a[1] = {val(SHP(OT_F32, 2), (float[]){1, 2})}, r;
    ASSERT_OK(ot_evaluate(m, a, 1, &o, &r));
    expect_f32(&r.tuple[0], (float[]){11, 22}, 2);
    expect_f32(&r.tuple[1], (float[]){1, 2, 10, 20}, 4);
    expect_f32(&r.tuple[2], (float[]){11}, 1);
    expect_f32(&r.tuple[3], (float[]){1, 10}, 2);
    expect_f32(&r.tuple[4], (float[]){10, 20}, 2); /* from replica 1 (pair 1 -> 0) */
    EXPECT_INT_EQ(*(uint32_t *)r.tuple[5].array.data, 0);
    EXPECT_INT_EQ(fc.calls, 5);
    ot_value_release(&r);
    /* no communicator: a group of 2 needs one */
    EXPECT_STATUS(ot_evaluate(m, a, 1, NULL, &r), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STR_CONTAINS(ot_last_error(), "needs a communicator");
    ot_value_release(&a[0]);
    ot_module_free(m);

    /* single device: identities, replica-id 0 */
    m = ot_module_new("m1");
    add = scalar_fn(m, "add", OT_OP_ADD, OT_F32);
    c = ot_module_add_computation(m, "main");
    x = ot_build_parameter(c, 0, SHP(OT_F32, 2), "x");
    ot_instr *o1[3] = {ot_build_all_reduce(c, &x, 1, NULL, 0, false, add),
                       ot_build_all_gather(c, x, 0, NULL, 0, false), ot_build_replica_id(c)};
    ot_computation_set_root(c, ot_build_tuple(c, o1, 3));
    ot_module_set_entry(m, c);
    ot_value b[1] = {val(SHP(OT_F32, 2), (float[]){1, 2})};
    ASSERT_OK(run(m, b, 1, NULL, &r));
    expect_f32(&r.tuple[0], (float[]){1, 2}, 2);
    expect_f32(&r.tuple[1], (float[]){1, 2}, 2);
    ot_value_release(&r);
}

/* ---- rng known answers (Random123 test vectors through XLA's state layout) ------------- */

static void test_rng_known_answers(void) {
    ot_module *m = ot_module_new("m");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *s2 = ot_build_parameter(c, 0, SHP(OT_U64, 2), "s2");
    ot_instr *s3 = ot_build_parameter(c, 1, SHP(OT_U64, 3), "s3");
    ot_instr *tf = ot_build_rng_bit_generator(c, s2, SHP(OT_U32, 2), OT_RNG_THREE_FRY);
    /* u32[2,3] splits along dim 0: (0, j) and (1, j) are the two words of counter j */
    ot_instr *tf23 = ot_build_rng_bit_generator(c, s2, SHP(OT_U32, 2, 3), OT_RNG_THREE_FRY);
    ot_instr *ph = ot_build_rng_bit_generator(c, s3, SHP(OT_U32, 4), OT_RNG_PHILOX);
    ot_instr *outs[3] = {tf, ph, tf23};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 3));
    ot_module_set_entry(m, c);
    ot_value a[2] = {val(SHP(OT_U64, 2), (uint64_t[]){0, 0}),
                     val(SHP(OT_U64, 3), (uint64_t[]){0, UINT64_MAX, 0})},
             r;
    ASSERT_OK(run(m, a, 2, NULL, &r));
    /* threefry2x32_20(key 0, counter 0) = 6b200159 99ba4efe */
    const uint32_t *t = r.tuple[0].tuple[1].array.data;
    EXPECT_U64_EQ(t[0], 0x6b200159u);
    EXPECT_U64_EQ(t[1], 0x99ba4efeu);
    EXPECT_U64_EQ(((uint64_t *)r.tuple[0].tuple[0].array.data)[1], 1);
    const uint32_t *t23 = r.tuple[2].tuple[1].array.data;
    EXPECT_U64_EQ(t23[0], 0x6b200159u);
    EXPECT_U64_EQ(t23[3], 0x99ba4efeu);
    EXPECT_U64_EQ(((uint64_t *)r.tuple[2].tuple[0].array.data)[1], 3);
    /* philox counter (2^64 - 1, 0) then carries into the high word */
    const uint64_t *ns = r.tuple[1].tuple[0].array.data;
    EXPECT_U64_EQ(ns[1], 0);
    EXPECT_U64_EQ(ns[2], 1);
    ot_value_release(&r);

    m = ot_module_new("m");
    c = ot_module_add_computation(m, "main");
    s3 = ot_build_parameter(c, 0, SHP(OT_U64, 3), "s3");
    ot_computation_set_root(c, ot_build_rng_bit_generator(c, s3, SHP(OT_U32, 4), OT_RNG_PHILOX));
    ot_module_set_entry(m, c);
    ot_value b[1] = {val(SHP(OT_U64, 3), (uint64_t[]){0, 0, 0})};
    ASSERT_OK(run(m, b, 1, NULL, &r));
    /* philox4x32_10(key 0, counter 0) = 6627e8d5 e169c58d bc57ac4c 9b00dbd8 */
    const uint32_t *p = r.tuple[1].array.data;
    EXPECT_U64_EQ(p[0], 0x6627e8d5u);
    EXPECT_U64_EQ(p[1], 0xe169c58du);
    EXPECT_U64_EQ(p[2], 0xbc57ac4cu);
    EXPECT_U64_EQ(p[3], 0x9b00dbd8u);
    ot_value_release(&r);
}

/* ---- empty shapes ---------------------------------------------------------------------- */

static void test_empty_shapes(void) {
    ot_module *m = ot_module_new("m");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SHP(OT_F32, 0, 3), "x");
    ot_instr *e = ot_build_unary(c, OT_OP_EXP, x);
    ot_instr *t = ot_build_transpose(c, e, (int64_t[]){1, 0}, 2);
    ot_instr *cc[2] = {x, x};
    ot_instr *cat = ot_build_concatenate(c, cc, 2, 0);
    ot_dot_dims dn;
    memset(&dn, 0, sizeof dn);
    dn.ncontract = 1;
    dn.lhs_contract[0] = 0;
    dn.rhs_contract[0] = 0;
    /* contracting over an empty dim: zeros */
    ot_instr *d = ot_build_dot(c, x, x, &dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT);
    ot_instr *outs[3] = {t, cat, d};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 3));
    ot_module_set_entry(m, c);
    ot_value a[1] = {val(SHP(OT_F32, 0, 3), NULL)}, r;
    ASSERT_OK(run(m, a, 1, NULL, &r));
    EXPECT_INT_EQ(r.tuple[0].array.shape.dims[0], 3);
    EXPECT_INT_EQ(r.tuple[0].array.nbytes, 0);
    EXPECT_INT_EQ(r.tuple[1].array.nbytes, 0);
    expect_f32(&r.tuple[2], (float[]){0, 0, 0, 0, 0, 0, 0, 0, 0}, 9);
    ot_value_release(&r);
}

static void test_denormals(void) {
    /* XLA CPU flushes f32 subnormals in arithmetic; keep_denormals gives IEEE results */
    ot_module *m = ot_module_new("m");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SHP(OT_F32, 2), "x");
    ot_instr *h = ot_build_constant_scalar(c, OT_F32, 0.5);
    ot_instr *hb = ot_build_broadcast(c, h, SHP(OT_F32, 2), NULL, 0);
    ot_instr *mu = ot_build_binary(c, OT_OP_MULTIPLY, x, hb);
    ot_instr *ng = ot_build_unary(c, OT_OP_NEGATE, x);
    ot_instr *outs[2] = {mu, ng};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 2));
    ot_module_set_entry(m, c);
    ASSERT_OK(ot_module_finalize(m));
    float tiny = 1e-38f; /* normal; half of it is subnormal */
    float sub = 1e-40f;
    ot_value a[1] = {val(SHP(OT_F32, 2), (float[]){tiny, sub})}, r;
    ASSERT_OK(ot_evaluate(m, a, 1, NULL, &r));
    EXPECT_TRUE(((float *)r.tuple[0].array.data)[0] == 0);
    EXPECT_TRUE(((float *)r.tuple[0].array.data)[1] == 0);
    EXPECT_TRUE(((float *)r.tuple[1].array.data)[1] == -sub); /* negate keeps the bits */
    ot_value_release(&r);
    ot_eval_options o = ot_eval_options_default();
    o.keep_denormals = true;
    ASSERT_OK(ot_evaluate(m, a, 1, &o, &r));
    EXPECT_TRUE(((float *)r.tuple[0].array.data)[0] == tiny * 0.5f);
    EXPECT_TRUE(((float *)r.tuple[0].array.data)[0] != 0);
    ot_value_release(&r);
    ot_value_release(&a[0]);
    ot_module_free(m);
}

/* The op trait table's IR_OP_KEEPS_SUBNORMALS column, which says where the flush-to-zero mode
 * leaves results alone: under FTZ an op with it gives the IEEE answer on a subnormal operand; any
 * other float unary op reads the operand as zero (DAZ) and flushes its result. */
static void test_ftz_column(void) {
    float sub = 1e-40f, zero = 0;
    ot_eval_options keep = ot_eval_options_default();
    keep.keep_denormals = true;
    int kept = 0;
    for (int op = OT_OP_ABS; op <= OT_OP_COPY; op++) {
        unsigned t = ir_op_traits((ot_opcode)op);
        if (t & IR_OP_NO_FLOAT) continue;
        ot_module *m = ot_module_new("m");
        ot_computation *c = ot_module_add_computation(m, "main");
        ot_instr *x = ot_build_parameter(c, 0, SHP(OT_F32, 1), "x");
        ot_computation_set_root(c, ot_build_unary(c, (ot_opcode)op, x));
        ot_module_set_entry(m, c);
        ASSERT_OK(ot_module_finalize(m));
        ot_value a[1] = {val(SHP(OT_F32, 1), &sub)}, z[1] = {val(SHP(OT_F32, 1), &zero)};
        ot_value ftz, ieee, daz;
        ASSERT_OK(ot_evaluate(m, a, 1, NULL, &ftz));
        ASSERT_OK(ot_evaluate(m, a, 1, &keep, &ieee));
        ASSERT_OK(ot_evaluate(m, z, 1, NULL, &daz));
        const ot_value *want = t & IR_OP_KEEPS_SUBNORMALS ? &ieee : &daz;
        bool same = ftz.array.nbytes == want->array.nbytes &&
                    !memcmp(ftz.array.data, want->array.data, (size_t)want->array.nbytes);
        if (!same) fprintf(stderr, "  %s: FTZ result differs\n", ot_opcode_name((ot_opcode)op));
        EXPECT_TRUE(same);
        kept += (t & IR_OP_KEEPS_SUBNORMALS) != 0;
        ot_value_release(&ftz);
        ot_value_release(&ieee);
        ot_value_release(&daz);
        ot_value_release(&a[0]);
        ot_value_release(&z[0]);
        ot_module_free(m);
    }
    EXPECT_INT_EQ(kept, 5); /* abs negate sign copy is-finite */
}

/* FTZ/DAZ beyond arithmetic, as XLA's CPU code runs under MXCSR FTZ+DAZ: compare (fcmp) and
 * maximum/minimum/clamp read subnormal operands as signed zeros, f32 <-> f64 converts and
 * float -> pred flush too; TOTALORDER compare, select and converts to bf16 move bits and keep
 * subnormals. keep_denormals gives the IEEE answers. The runtime's fast kernels (typed
 * maximum/minimum loops) give the same bits as the reference. */
static const char k_daz[] =
    "HloModule daz\n"
    "ENTRY main {\n"
    "  x = f32[4] parameter(0)\n"
    "  y = f32[4] parameter(1)\n"
    "  d = f64[2] parameter(2)\n"
    "  one = f32[] constant(1)\n"
    "  ones = f32[4] broadcast(one), dimensions={}\n"
    "  eq = pred[4] compare(x, y), direction=EQ\n"
    "  lt = pred[4] compare(y, x), direction=LT\n"
    "  tot = pred[4] compare(x, y), direction=EQ, type=TOTALORDER\n"
    "  mx = f32[4] maximum(x, y)\n"
    "  mn = f32[4] minimum(x, y)\n"
    "  sel = f32[4] select(eq, x, y)\n"
    "  cv64 = f64[4] convert(x)\n"
    "  cvp = pred[4] convert(x)\n"
    "  cv32 = f32[2] convert(d)\n"
    "  cvbf = bf16[4] convert(x)\n"
    "  cl = f32[4] clamp(y, x, ones)\n"
    "  ROOT r = (pred[4], pred[4], pred[4], f32[4], f32[4], f32[4], f64[4], pred[4], f32[2], "
    "bf16[4], f32[4]) tuple(eq, lt, tot, mx, mn, sel, cv64, cvp, cv32, cvbf, cl)\n"
    "}\n";

static void expect_bits(const ot_value *v, const void *want, size_t nbytes, const char *what) {
    ot_test_assertions_++;
    if (v->kind != OT_IR_ARRAY || v->array.nbytes != nbytes ||
        memcmp(v->array.data, want, nbytes)) {
        OT_T_FAIL_("%s: bits differ", what);
        for (size_t k = 0; k < v->array.nbytes && k < 32; k++)
            fprintf(stderr, "%02x%s", ((const uint8_t *)v->array.data)[k],
                    k + 1 < nbytes ? "" : "\n");
        fprintf(stderr, "\n");
    }
}

static void test_denormals_compare_minmax_convert(void) {
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(k_daz, strlen(k_daz), NULL, &m));
    float sub = 1e-40f, tiny = 2e-38f;  /* sub is subnormal, tiny normal (FLT_MIN 1.18e-38) */
    double dsub = -1e-310, d39 = 1e-39; /* an f64 subnormal; an f64 that is an f32 subnormal */
    ot_value a[3] = {val(SHP(OT_F32, 4), (float[]){sub, -sub, 0.0f, tiny}),
                     val(SHP(OT_F32, 4), (float[]){0.0f, 0.0f, sub, sub}),
                     val(SHP(OT_F64, 2), (double[]){dsub, d39})},
             r;
    /* XLA CPU (FTZ/DAZ) */
    ASSERT_OK(ot_evaluate(m, a, 3, NULL, &r));
    expect_bits(&r.tuple[0], (uint8_t[]){1, 1, 1, 0}, 4, "compare EQ");
    expect_bits(&r.tuple[1], (uint8_t[]){0, 0, 0, 1}, 4, "compare LT");
    expect_bits(&r.tuple[2], (uint8_t[]){0, 0, 0, 0}, 4, "compare EQ TOTALORDER");
    expect_bits(&r.tuple[3], (float[]){0.0f, 0.0f, 0.0f, tiny}, 16, "maximum");
    expect_bits(&r.tuple[4], (float[]){0.0f, -0.0f, 0.0f, 0.0f}, 16, "minimum");
    expect_bits(&r.tuple[5], (float[]){sub, -sub, 0.0f, sub}, 16, "select");
    expect_bits(&r.tuple[6], (double[]){0.0, -0.0, 0.0, (double)tiny}, 32, "convert f32->f64");
    expect_bits(&r.tuple[7], (uint8_t[]){0, 0, 0, 1}, 4, "convert f32->pred");
    expect_bits(&r.tuple[8], (float[]){-0.0f, 0.0f}, 8, "convert f64->f32");
    expect_bits(&r.tuple[9], (uint16_t[]){0x0001, 0x8001, 0, 0x00da}, 8, "convert f32->bf16");
    expect_bits(&r.tuple[10], (float[]){0.0f, 0.0f, 0.0f, tiny}, 16, "clamp");

    /* the runtime's kernels give the same bits: at -O0 the fast maximum/minimum loops, at -O2
     * the fused loop (native code when codegen takes it) */
    for (int level = 0; level <= 2; level += 2) {
        ot_compile_options co = ot_compile_options_default();
        co.opt_level = level;
        ot_executable *e = NULL;
        ASSERT_OK(ot_compile(m, &co, &e));
        ot_device *dev = NULL;
        ASSERT_OK(ot_host_device_create(0, 0, &dev));
        ot_buffer *in[3] = {0}, *out[11] = {0};
        for (int k = 0; k < 3; k++) ASSERT_OK(ot_buffer_from_host(dev, &a[k].array, &in[k]));
        ot_run_result rr;
        ASSERT_OK(ot_device_execute(dev, e, in, 3, out, 11, NULL, &rr));
        if (level == 0) EXPECT_TRUE(rr.fast_kernels_run > 0);
        for (int q = 0; q < 11; q++) {
            ot_tensor t;
            ASSERT_OK(ot_buffer_to_host(out[q], &t));
            expect_bits(&r.tuple[q], t.data, t.nbytes,
                        level ? "runtime -O2 equals the reference"
                              : "runtime -O0 equals the reference");
            ot_tensor_release(&t);
            ot_buffer_free(out[q]);
        }
        for (int k = 0; k < 3; k++) ot_buffer_free(in[k]);
        ot_device_free(dev);
        ot_executable_free(e);
    }
    ot_value_release(&r);

    /* IEEE gradual underflow */
    ot_eval_options o = ot_eval_options_default();
    o.keep_denormals = true;
    ASSERT_OK(ot_evaluate(m, a, 3, &o, &r));
    expect_bits(&r.tuple[0], (uint8_t[]){0, 0, 0, 0}, 4, "IEEE compare EQ");
    expect_bits(&r.tuple[1], (uint8_t[]){1, 0, 0, 1}, 4, "IEEE compare LT");
    expect_bits(&r.tuple[3], (float[]){sub, 0.0f, sub, tiny}, 16, "IEEE maximum");
    expect_bits(&r.tuple[4], (float[]){0.0f, -sub, 0.0f, sub}, 16, "IEEE minimum");
    expect_bits(&r.tuple[5], (float[]){0.0f, 0.0f, sub, sub}, 16, "IEEE select");
    expect_bits(&r.tuple[6], (double[]){(double)sub, -(double)sub, 0.0, (double)tiny}, 32,
                "IEEE convert f32->f64");
    expect_bits(&r.tuple[7], (uint8_t[]){1, 1, 0, 1}, 4, "IEEE convert f32->pred");
    expect_bits(&r.tuple[8], (float[]){-0.0f, (float)d39}, 8, "IEEE convert f64->f32");
    EXPECT_TRUE((float)d39 != 0.0f);
    expect_bits(&r.tuple[10], (float[]){sub, 0.0f, sub, tiny}, 16, "IEEE clamp");
    ot_value_release(&r);
    for (int k = 0; k < 3; k++) ot_value_release(&a[k]);
    ot_module_free(m);
}

OT_TEST_MAIN(OT_TEST(test_broadcast_transpose_reshape_reverse), OT_TEST(test_slice_concat_pad),
             OT_TEST(test_dynamic_slice_clamps), OT_TEST(test_gather_scatter),
             OT_TEST(test_gather_many), OT_TEST(test_scatter_order_overwrite),
             OT_TEST(test_reduce_variadic_argmax), OT_TEST(test_reduce_order_and_empty),
             OT_TEST(test_reduce_window_and_select_and_scatter),
             OT_TEST(test_sort_stable_multi_operand), OT_TEST(test_topk_and_map),
             OT_TEST(test_dot_general_batch_and_bf16), OT_TEST(test_convolution_variants),
             OT_TEST(test_call_conditional), OT_TEST(test_collectives),
             OT_TEST(test_rng_known_answers), OT_TEST(test_empty_shapes), OT_TEST(test_denormals),
             OT_TEST(test_denormals_compare_minmax_convert), OT_TEST(test_ftz_column))
