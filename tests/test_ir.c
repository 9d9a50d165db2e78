/* IR data model, builder (sticky error), shape inference, verifier and edits. */
#include "ot_test.h"

#include "optitpu/ir.h"
#include "../src/ir/ir_internal.h"
#include "../src/ir/attr_schema.h"
#include "../src/ir/op_traits.h"

static ot_shape shp(ot_dtype t, int rank, const int64_t *d) {
    ot_shape s;
    ot_shape_make(&s, t, rank, d);
    return s;
}
#define SH(t, ...)                                                                                 \
    shp(t, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static ot_computation *add_reducer(ot_module *m, ot_dtype t, const char *name) {
    ot_computation *r = ot_module_add_computation(m, name);
    ot_instr *a = ot_build_parameter(r, 0, ot_shape_scalar(t), "a");
    ot_instr *b = ot_build_parameter(r, 1, ot_shape_scalar(t), "b");
    ot_computation_set_root(r, ot_build_binary(r, OT_OP_ADD, a, b));
    return r;
}

static ot_computation *lt_comparator(ot_module *m, ot_dtype t, int nops) {
    ot_computation *r = ot_module_add_computation(m, "lt");
    ot_instr *p[8];
    for (int i = 0; i < 2 * nops; i++) p[i] = ot_build_parameter(r, i, ot_shape_scalar(t), NULL);
    ot_computation_set_root(r, ot_build_compare(r, p[0], p[1], OT_CMP_LT, OT_CMP_TYPE_DEFAULT));
    return r;
}

static void test_opcode_table(void) {
    EXPECT_INT_EQ(OT_OP_COUNT > 80, 1);
    for (int op = 0; op < OT_OP_COUNT; op++) {
        const char *n = ot_opcode_name((ot_opcode)op);
        EXPECT_INT_EQ(ot_opcode_from_name(n, strlen(n)), op);
    }
    EXPECT_STR_EQ(ot_opcode_name(OT_OP_CLZ), "count-leading-zeros");
    EXPECT_STR_EQ(ot_opcode_name(OT_OP_EXPM1), "exponential-minus-one");
    EXPECT_INT_EQ(ot_opcode_from_name("infeed", 6), OT_OP_INVALID);
    EXPECT_INT_EQ(ot_opcode_from_name("fft", 3), OT_OP_FFT);
    EXPECT_TRUE(ot_opcode_is_known_hlo("infeed", 6));
    EXPECT_TRUE(!ot_opcode_is_known_hlo("frobnicate", 10));
    EXPECT_INT_EQ(ot_opcode_from_name("add-x", 3), OT_OP_ADD);
    EXPECT_STR_EQ(ot_opcode_name((ot_opcode)999), "<invalid>");
    EXPECT_TRUE(ot_opcode_is_commutative(OT_OP_ADD));
    EXPECT_TRUE(!ot_opcode_is_commutative(OT_OP_SUBTRACT));
    EXPECT_TRUE(ot_opcode_is_elementwise(OT_OP_SELECT));
    EXPECT_TRUE(!ot_opcode_is_elementwise(OT_OP_DOT));
    EXPECT_INT_EQ(ot_cmp_type_resolve(OT_CMP_TYPE_DEFAULT, OT_F32), OT_CMP_TYPE_FLOAT);
    EXPECT_INT_EQ(ot_cmp_type_resolve(OT_CMP_TYPE_DEFAULT, OT_S8), OT_CMP_TYPE_SIGNED);
    EXPECT_INT_EQ(ot_cmp_type_resolve(OT_CMP_TYPE_DEFAULT, OT_PRED), OT_CMP_TYPE_UNSIGNED);
}

/* The trait table's dtype columns (src/ir/op_traits.h) and shape inference's dtype rules are
 * stated apart (inference words its own errors): they must agree for every elementwise op. */
static void test_op_traits_agree_with_inference(void) {
    ot_module *m = ot_module_new(NULL);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *f = ot_build_parameter(c, 0, SH(OT_F32, 2), "f");
    ot_instr *s = ot_build_parameter(c, 1, SH(OT_S32, 2), "s");
    for (int op = OT_OP_ABS; op <= OT_OP_SHIFT_RIGHT_LOGICAL; op++) {
        if (op == OT_OP_COPY) continue;
        bool unary = ot_opcode_is_elementwise_unary((ot_opcode)op);
        ot_instr *fo[2] = {f, f}, *so[2] = {s, s};
        ot_ir_shape out;
        bool f_ok =
            ot_infer_shape(m, (ot_opcode)op, fo, unary ? 1 : 2, NULL, NULL, 0, NULL, &out) == OT_OK;
        bool s_ok =
            ot_infer_shape(m, (ot_opcode)op, so, unary ? 1 : 2, NULL, NULL, 0, NULL, &out) == OT_OK;
        unsigned t = ir_op_traits((ot_opcode)op);
        if (f_ok == ((t & IR_OP_NO_FLOAT) != 0) || s_ok == ((t & IR_OP_FLOAT_ONLY) != 0))
            fprintf(stderr, "  %s: traits %u, f32 %d, s32 %d\n", ot_opcode_name((ot_opcode)op), t,
                    f_ok, s_ok);
        EXPECT_TRUE(f_ok == !(t & IR_OP_NO_FLOAT));
        EXPECT_TRUE(s_ok == !(t & IR_OP_FLOAT_ONLY));
    }
    EXPECT_INT_EQ(ir_op_traits(OT_OP_INVALID), 0);
    EXPECT_TRUE(ir_op_traits(OT_OP_MAP) & IR_OP_EXPENSIVE);
    EXPECT_TRUE(!(ir_op_traits(OT_OP_ADD) & IR_OP_EXPENSIVE));
    ot_module_free(m);
}

/* The attribute schema (src/ir/attr_schema.h): every op's rows fit its index and name distinct
 * attributes, lookups find each row for each op that carries it, rows of ot_attrs fields point
 * at the field, and the deep copy keeps every field an op's rows fill. */
static void test_attr_schema(void) {
    for (int op = 0; op < OT_OP_COUNT; op++) {
        int n;
        const uint8_t *rows = ir_attr_op_rows((ot_opcode)op, &n);
        EXPECT_TRUE(n > 0 && n <= IR_ATTR_OP_MAX);
        for (int k = 0; k < n; k++) {
            const ir_attr_row *r = &ir_attr_rows[rows[k]];
            if (!r->name) continue;
            int pos = -1;
            const ir_attr_row *f = ir_attr_lookup((ot_opcode)op, r->name, strlen(r->name), &pos);
            if (!(r->flags & IR_AF_PRINT_FALLBACK) || f) {
                if (f != r)
                    fprintf(stderr, "  %s: '%s' found as another row\n",
                            ot_opcode_name((ot_opcode)op), r->name);
                EXPECT_TRUE(f == r && pos == k);
            }
        }
    }
    for (int k = 0; k < ir_attr_nrows; k++) {
        const ir_attr_row *r = &ir_attr_rows[k];
        if (r->field >= IR_F_COUNT || r->field == IR_F_DOT || r->field == IR_F_GATHER ||
            r->field == IR_F_SCATTER)
            continue;
        EXPECT_INT_EQ(r->off, ir_attr_fields[r->field].off);
    }
    EXPECT_TRUE(ir_attr_lookup(OT_OP_ADD, "to_apply", 8, &(int){0}) == NULL);
    EXPECT_TRUE(ir_attr_lookup_any("to_apply", 8) != NULL);
    EXPECT_TRUE(ir_attr_lookup_any("frobnicate", 10) == NULL);
    /* a builder copy keeps what the op's rows name: topk's is_stable and largest */
    ot_module *m = ot_module_new(NULL);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SH(OT_F32, 2, 8), "x");
    ot_attrs a = {0};
    a.index = 3;
    a.largest = true;
    a.is_stable = true;
    a.channel_id = 7; /* not topk's: dropped */
    ot_ir_shape ts[2] = {ot_ir_shape_array(SH(OT_F32, 2, 3)), ot_ir_shape_array(SH(OT_S32, 2, 3))};
    ot_ir_shape hint = {.kind = OT_IR_TUPLE, .ntuple = 2, .tuple = ts};
    ot_instr *t = ot_build(c, OT_OP_TOPK, &x, 1, &a, NULL, 0, &hint, "t");
    ASSERT_TRUE(t);
    EXPECT_INT_EQ(t->attrs->index, 3);
    EXPECT_TRUE(t->attrs->largest && t->attrs->is_stable);
    EXPECT_INT_EQ(t->attrs->channel_id, 0);
    ot_module_free(m);
}

static void test_build_axpy(void) {
    ot_module *m = ot_module_new("axpy");
    ASSERT_TRUE(m);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_shape v = SH(OT_F32, 1024);
    ot_instr *a = ot_build_parameter(c, 0, ot_shape_scalar(OT_F32), "a");
    ot_instr *x = ot_build_parameter(c, 1, v, "x");
    ot_instr *y = ot_build_parameter(c, 2, v, "y");
    ot_instr *ab = ot_build_broadcast(c, a, v, NULL, 0);
    ot_instr *ax = ot_build_binary(c, OT_OP_MULTIPLY, ab, x);
    ot_instr *r = ot_build_binary(c, OT_OP_ADD, ax, y);
    ot_computation_set_root(c, r);
    ot_module_set_entry(m, c);
    EXPECT_OK(ot_module_finalize(m));
    ASSERT_TRUE(r);
    EXPECT_INT_EQ(r->shape.array.dims[0], 1024);
    EXPECT_INT_EQ(x->nusers, 1);
    EXPECT_TRUE(x->users[0] == ax);
    EXPECT_INT_EQ(c->nparams, 3);
    EXPECT_INT_EQ(ot_module_instr_count(m), 6);
    EXPECT_TRUE(ot_computation_find_instr(c, "x") == x);
    EXPECT_TRUE(ot_module_find_computation(m, "main") == c);
    EXPECT_STR_EQ(r->name, "add.5");
    /* x*x: one user entry however many slots */
    ot_instr *xx = ot_build_binary(c, OT_OP_MULTIPLY, x, x);
    ASSERT_TRUE(xx);
    EXPECT_INT_EQ(x->nusers, 2);
    EXPECT_OK(ot_module_verify(m));
    ot_module_free(m);
}

static void test_sticky_error(void) {
    ot_module *m = ot_module_new(NULL);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SH(OT_F32, 2, 3), "x");
    ot_instr *y = ot_build_parameter(c, 1, SH(OT_F32, 2, 4), "y");
    ot_instr *bad = ot_build_binary(c, OT_OP_ADD, x, y);
    EXPECT_TRUE(bad == NULL);
    EXPECT_STATUS(ot_module_status(m), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STR_CONTAINS(ot_last_error(), "add");
    EXPECT_STR_CONTAINS(ot_last_error(), "operand 1 (y)");
    EXPECT_STR_CONTAINS(ot_last_error(), "dimension 1");
    /* later calls are harmless and the first error wins */
    ot_instr *n = ot_build_unary(c, OT_OP_NEGATE, bad);
    EXPECT_TRUE(n == NULL);
    EXPECT_TRUE(ot_build_unary(c, OT_OP_EXP, x) == NULL);
    ot_computation_set_root(c, NULL);
    EXPECT_STATUS(ot_module_finalize(m), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STR_CONTAINS(ot_last_error(), "operand 1 (y)");
    ot_module_free(m);

    /* a NULL operand without an earlier error is recorded */
    m = ot_module_new(NULL);
    c = ot_module_add_computation(m, "main");
    ot_instr *ops[2] = {NULL, NULL};
    EXPECT_TRUE(ot_build(c, OT_OP_ADD, ops, 2, NULL, NULL, 0, NULL, NULL) == NULL);
    EXPECT_STATUS(ot_module_status(m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "operand 0 is NULL");
    ot_module_free(m);

    /* no entry, no root */
    m = ot_module_new(NULL);
    c = ot_module_add_computation(m, "main");
    ot_build_parameter(c, 0, SH(OT_F32, 2), "x");
    EXPECT_STATUS(ot_module_finalize(m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "no entry");
    ot_module_set_entry(m, c);
    EXPECT_STATUS(ot_module_finalize(m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "no root");
    /* parameter numbers must be dense */
    ot_instr *p2 = ot_build_parameter(c, 2, SH(OT_F32, 2), "z");
    ot_computation_set_root(c, p2);
    EXPECT_STATUS(ot_module_finalize(m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "parameter 1 is missing");
    /* a duplicate parameter number is a builder error */
    EXPECT_TRUE(ot_build_parameter(c, 2, SH(OT_F32, 2), "w") == NULL);
    EXPECT_STATUS(ot_module_status(m), OT_ERR_ALREADY_EXISTS);
    ot_module_free(m);
}

/* Builds one op on fresh parameters and returns the result (module kept in *mm). */
static void expect_shape(const ot_instr *i, const char *want) {
    char buf[256];
    if (!i) {
        EXPECT_STR_EQ("(null)", want);
        fprintf(stderr, "    last error: %s\n", ot_last_error());
        return;
    }
    ot_ir_shape_format(&i->shape, buf, sizeof buf);
    EXPECT_STR_EQ(buf, want);
}

static void test_infer_shape_ops(void) {
    ot_module *m = ot_module_new(NULL);
    ot_computation *sum = add_reducer(m, OT_F32, "sum");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SH(OT_F32, 2, 3, 4), "x");
    ot_instr *zero = ot_build_constant_scalar(c, OT_F32, 0.0);
    expect_shape(zero, "f32[]");
    /* dot_general: batch, lhs free, rhs free */
    ot_instr *l = ot_build_parameter(c, 1, SH(OT_F32, 8, 5, 6), "l");
    ot_instr *r = ot_build_parameter(c, 2, SH(OT_F32, 8, 6, 7), "r");
    ot_dot_dims dn = {.nbatch = 1,
                      .ncontract = 1,
                      .lhs_batch = {0},
                      .rhs_batch = {0},
                      .lhs_contract = {2},
                      .rhs_contract = {1}};
    expect_shape(ot_build_dot(c, l, r, &dn, OT_PRECISION_DEFAULT, OT_PRECISION_HIGHEST),
                 "f32[8,5,7]");
    /* reduce removes its dimensions */
    int64_t rd[] = {1};
    expect_shape(ot_build_reduce(c, &x, &zero, 1, rd, 1, sum), "f32[2,4]");
    /* broadcast with a dimension map */
    int64_t bd[] = {0, 2};
    ot_instr *v = ot_build_parameter(c, 3, SH(OT_F32, 2, 4), "v");
    expect_shape(ot_build_broadcast(c, v, SH(OT_F32, 2, 3, 4), bd, 2), "f32[2,3,4]");
    expect_shape(ot_build_reshape(c, x, SH(OT_F32, 6, 4)), "f32[6,4]");
    int64_t perm[] = {2, 0, 1};
    expect_shape(ot_build_transpose(c, x, perm, 3), "f32[4,2,3]");
    int64_t st[] = {0, 1, 0}, li[] = {2, 3, 4}, sd[] = {1, 1, 3};
    expect_shape(ot_build_slice(c, x, st, li, sd), "f32[2,2,2]");
    ot_pad_dim pc[] = {{1, 1, 0}, {-1, 0, 1}, {0, 0, 0}};
    expect_shape(ot_build_pad(c, x, zero, pc), "f32[4,4,4]");
    ot_instr *cc[] = {x, x};
    expect_shape(ot_build_concatenate(c, cc, 2, 1), "f32[2,6,4]");
    int64_t rv[] = {0, 2};
    expect_shape(ot_build_reverse(c, x, rv, 2), "f32[2,3,4]");
    expect_shape(ot_build_convert(c, x, OT_BF16), "bf16[2,3,4]");
    expect_shape(ot_build_bitcast_convert(c, x, OT_U8), "u8[2,3,4,4]");
    expect_shape(ot_build_unary(c, OT_OP_IS_FINITE, x), "pred[2,3,4]");
    expect_shape(ot_build_compare(c, x, x, OT_CMP_GE, OT_CMP_TYPE_TOTALORDER), "pred[2,3,4]");
    expect_shape(ot_build_iota(c, SH(OT_S32, 5, 2), 1), "s32[5,2]");
    ot_instr *i0 = ot_build_constant_scalar(c, OT_S32, 1);
    ot_instr *idx[] = {i0, i0, i0};
    int64_t dsz[] = {1, 2, 2};
    ot_instr *ds = ot_build_dynamic_slice(c, x, idx, dsz);
    expect_shape(ds, "f32[1,2,2]");
    expect_shape(ot_build_dynamic_update_slice(c, x, ds, idx), "f32[2,3,4]");
    /* reduce-window: floor((in + lo + hi - d(k-1) - 1)/stride) + 1 */
    ot_window w = {.rank = 3};
    for (int i = 0; i < 3; i++)
        w.dims[i] =
            (ot_window_dim){.size = 1, .stride = 1, .window_dilation = 1, .base_dilation = 1};
    w.dims[2] = (ot_window_dim){
        .size = 2, .stride = 2, .pad_lo = 1, .pad_hi = 0, .window_dilation = 1, .base_dilation = 1};
    expect_shape(ot_build_reduce_window(c, &x, &zero, 1, &w, sum), "f32[2,3,2]");
    /* convolution NHWC x HWIO -> NHWC with stride 2, padding 1, dilation 2 */
    ot_instr *img = ot_build_parameter(c, 4, SH(OT_F32, 1, 9, 9, 4), "img");
    ot_instr *ker = ot_build_parameter(c, 5, SH(OT_F32, 3, 3, 4, 8), "ker");
    ot_conv_dims cd = {.nspatial = 2,
                       .input_batch = 0,
                       .input_feature = 3,
                       .input_spatial = {1, 2},
                       .kernel_input_feature = 2,
                       .kernel_output_feature = 3,
                       .kernel_spatial = {0, 1},
                       .output_batch = 0,
                       .output_feature = 3,
                       .output_spatial = {1, 2}};
    ot_window cw = {.rank = 2};
    for (int i = 0; i < 2; i++)
        cw.dims[i] = (ot_window_dim){.size = 3,
                                     .stride = 2,
                                     .pad_lo = 1,
                                     .pad_hi = 1,
                                     .window_dilation = 2,
                                     .base_dilation = 1};
    /* (9 + 2 - 2*2 - 1)/2 + 1 = 4 */
    expect_shape(ot_build_convolution(c, img, ker, &cw, &cd, 1, 1), "f32[1,4,4,8]");
    /* depthwise: feature_group_count = 4, kernel I = 1 */
    ot_instr *dker = ot_build_parameter(c, 6, SH(OT_F32, 3, 3, 1, 4), "dker");
    expect_shape(ot_build_convolution(c, img, dker, &cw, &cd, 4, 1), "f32[1,4,4,4]");
    /* gather: rows of a table */
    ot_instr *tab = ot_build_parameter(c, 7, SH(OT_F32, 10, 16), "tab");
    ot_instr *ids = ot_build_parameter(c, 8, SH(OT_S32, 5, 1), "ids");
    ot_gather_dims gd = {.noffset = 1,
                         .offset_dims = {1},
                         .ncollapsed = 1,
                         .collapsed_slice_dims = {0},
                         .nstart_index_map = 1,
                         .start_index_map = {0},
                         .index_vector_dim = 1,
                         .nslice_sizes = 2,
                         .slice_sizes = {1, 16}};
    expect_shape(ot_build_gather(c, tab, ids, &gd), "f32[5,16]");
    /* scatter-add rows back */
    ot_instr *upd = ot_build_parameter(c, 9, SH(OT_F32, 5, 16), "upd");
    ot_scatter_dims sdn = {.nupdate_window = 1,
                           .update_window_dims = {1},
                           .ninserted = 1,
                           .inserted_window_dims = {0},
                           .nscatter_to_operand = 1,
                           .scatter_dims_to_operand_dims = {0},
                           .index_vector_dim = 1};
    expect_shape(ot_build_scatter(c, &tab, 1, ids, &upd, &sdn, sum), "f32[10,16]");
    /* sort two operands -> tuple */
    ot_computation *lt = lt_comparator(m, OT_F32, 2);
    ot_instr *so[] = {x, x};
    expect_shape(ot_build_sort(c, so, 2, 2, true, lt), "(f32[2,3,4], f32[2,3,4])");
    ot_instr *tup = ot_build_tuple(c, so, 2);
    expect_shape(ot_build_get_tuple_element(c, tup, 1), "f32[2,3,4]");
    /* rng-bit-generator */
    ot_instr *state = ot_build_parameter(c, 10, SH(OT_U64, 2), "state");
    expect_shape(ot_build_rng_bit_generator(c, state, SH(OT_U32, 3, 3), OT_RNG_THREE_FRY),
                 "(u64[2], u32[3,3])");
    /* collectives */
    ot_module_set_replica_count(m, 4);
    int64_t gsz[] = {2, 2}, gid[] = {0, 1, 2, 3};
    const ot_replica_groups *g = ot_replica_groups_make(m, 2, gsz, gid);
    expect_shape(ot_build_all_gather(c, v, 0, g, 0, false), "f32[4,4]");
    expect_shape(ot_build_reduce_scatter(c, v, 1, NULL, 0, false, sum), "f32[2,1]");
    expect_shape(ot_build_all_reduce(c, &v, 1, g, 1, true, sum), "f32[2,4]");
    int64_t perm_d[] = {2, 2};
    int64_t tp[] = {1, 0};
    const ot_replica_groups *gi = ot_replica_groups_iota(m, 2, 2, perm_d, 2, tp, 2);
    ASSERT_TRUE(gi);
    EXPECT_INT_EQ(gi->ids[0], 0);
    EXPECT_INT_EQ(gi->ids[1], 2);
    EXPECT_INT_EQ(gi->ids[2], 1);
    EXPECT_INT_EQ(gi->ids[3], 3);
    expect_shape(ot_build_all_to_all(c, v, 1, gi, 0), "f32[2,4]");
    int64_t pairs[] = {0, 1, 1, 2};
    expect_shape(ot_build_collective_permute(c, v, pairs, 2, 0), "f32[2,4]");
    expect_shape(ot_build_replica_id(c), "u32[]");
    ot_ir_shape ccs = ot_ir_shape_array(SH(OT_F32, 3));
    expect_shape(ot_build_custom_call(c, "my_target", &x, 1, &ccs, "{}", true), "f32[3]");
    ot_computation_set_root(c, tup);
    ot_module_set_entry(m, c);
    EXPECT_OK(ot_module_finalize(m));
    ot_module_free(m);
}

static void test_control_flow(void) {
    ot_module *m = ot_module_new(NULL);
    /* while (i < 10) i = i + 1 over (s32[], f32[4]) */
    ot_ir_shape el[2] = {ot_ir_shape_scalar(OT_S32), ot_ir_shape_array(SH(OT_F32, 4))};
    ot_ir_shape st = {.kind = OT_IR_TUPLE, .ntuple = 2, .tuple = el};
    ot_computation *cond = ot_module_add_computation(m, "cond");
    ot_instr *cp = ot_build_parameter_ir(cond, 0, &st, "s");
    ot_instr *ci = ot_build_get_tuple_element(cond, cp, 0);
    ot_computation_set_root(cond,
                            ot_build_compare(cond, ci, ot_build_constant_scalar(cond, OT_S32, 10),
                                             OT_CMP_LT, OT_CMP_TYPE_DEFAULT));
    ot_computation *body = ot_module_add_computation(m, "body");
    ot_instr *bp = ot_build_parameter_ir(body, 0, &st, "s");
    ot_instr *bi = ot_build_get_tuple_element(body, bp, 0);
    ot_instr *bv = ot_build_get_tuple_element(body, bp, 1);
    ot_instr *n1 = ot_build_binary(body, OT_OP_ADD, bi, ot_build_constant_scalar(body, OT_S32, 1));
    ot_instr *bt[] = {n1, ot_build_binary(body, OT_OP_ADD, bv, bv)};
    ot_computation_set_root(body, ot_build_tuple(body, bt, 2));
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *init = ot_build_parameter_ir(c, 0, &st, "init");
    ot_instr *w = ot_build_while(c, cond, body, init);
    expect_shape(w, "(s32[], f32[4])");
    /* a body with the wrong result shape is named */
    ot_computation *bad_body = ot_module_add_computation(m, "bad_body");
    ot_instr *bb = ot_build_parameter_ir(bad_body, 0, &st, "s");
    ot_computation_set_root(bad_body, ot_build_get_tuple_element(bad_body, bb, 1));
    /* conditional on a pred with two branches */
    ot_computation *br0 = ot_module_add_computation(m, "br0");
    ot_instr *x0 = ot_build_parameter(br0, 0, SH(OT_F32, 4), "x");
    ot_computation_set_root(br0, ot_build_unary(br0, OT_OP_NEGATE, x0));
    ot_computation *br1 = ot_module_add_computation(m, "br1");
    ot_instr *x1 = ot_build_parameter(br1, 0, SH(OT_F32, 4), "x");
    ot_computation_set_root(br1, ot_build_unary(br1, OT_OP_EXP, x1));
    ot_instr *p = ot_build_parameter(c, 1, ot_shape_scalar(OT_PRED), "p");
    ot_instr *arg = ot_build_get_tuple_element(c, w, 1);
    ot_computation *brs[] = {br0, br1};
    ot_instr *args[] = {arg, arg};
    ot_instr *cnd = ot_build_conditional(c, p, brs, args, 2);
    expect_shape(cnd, "f32[4]");
    ot_instr *call = ot_build_call(c, br0, &cnd, 1);
    expect_shape(call, "f32[4]");
    ot_computation_set_root(c, call);
    ot_module_set_entry(m, c);
    EXPECT_OK(ot_module_finalize(m));
    ot_computation **order;
    int n;
    ASSERT_OK(ot_module_post_order(m, &order, &n));
    EXPECT_INT_EQ(n, 6);
    EXPECT_TRUE(order[n - 1] == c || order[n - 1] == bad_body);
    ot_free(order);
    EXPECT_TRUE(ot_build_while(c, cond, bad_body, init) == NULL);
    EXPECT_STATUS(ot_module_status(m), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STR_CONTAINS(ot_last_error(), "body computation bad_body returns f32[4]");
    ot_module_free(m);
}

static void test_infer_errors(void) {
    struct {
        const char *want;
    } cases[] = {
        {"reshape: operand 0 (x) f32[2,3] has 6 elements, result f32[7] has 7"},
        {"dot: contracting dimension 0: lhs dimension 1 (size 3) != rhs dimension 0 (size 4)"},
        {"broadcast: operand dimension 1 (size 3) maps to result dimension 1 of size 5"},
        {"slice: dimension 1: [0:4] is outside operand 0 (x) f32[2,3]"},
        {"transpose: dimensions repeats dimension 0"},
        {"reduce: dimensions[0] = 2 is outside [0, 2)"},
        {"concatenate: operand 1 (y) f32[4,3] and operand 0 (x) f32[2,3] differ"},
        {"pad: dimension 0: padding -3_0_0 gives a negative size (-1)"},
        {"get-tuple-element: operand 0 (x) must be a tuple"},
        {"convolution: input feature size 3"},
        {"select: operand 0 (x) must be pred, not f32"},
        {"sqrt: operand 0 (i) must be floating point, not s32"},
        {"reduce-precision: exponent_bits=0 mantissa_bits=3 out of range"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ot_module *m = ot_module_new(NULL);
        ot_computation *sum = add_reducer(m, OT_F32, "sum");
        ot_computation *c = ot_module_add_computation(m, "main");
        ot_instr *x = ot_build_parameter(c, 0, SH(OT_F32, 2, 3), "x");
        ot_instr *y = ot_build_parameter(c, 1, SH(OT_F32, 4, 3), "y");
        ot_instr *i = ot_build_parameter(c, 2, SH(OT_S32, 2), "i");
        ot_instr *zero = ot_build_constant_scalar(c, OT_F32, 0);
        ot_instr *r = NULL;
        switch (k) {
        case 0: r = ot_build_reshape(c, x, SH(OT_F32, 7)); break;
        case 1: {
            ot_dot_dims dn = {.ncontract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
            r = ot_build_dot(c, x, y, &dn, 0, 0);
            break;
        }
        case 2: {
            int64_t bd[] = {0, 1};
            r = ot_build_broadcast(c, x, SH(OT_F32, 2, 5), bd, 2);
            break;
        }
        case 3: {
            int64_t s[] = {0, 0}, l[] = {2, 4};
            r = ot_build_slice(c, x, s, l, NULL);
            break;
        }
        case 4: {
            int64_t p[] = {0, 0};
            r = ot_build_transpose(c, x, p, 2);
            break;
        }
        case 5: {
            int64_t d[] = {2};
            r = ot_build_reduce(c, &x, &zero, 1, d, 1, sum);
            break;
        }
        case 6: {
            ot_instr *xs[] = {x, y};
            r = ot_build_concatenate(c, xs, 2, 1);
            break;
        }
        case 7: {
            ot_pad_dim pd[] = {{-3, 0, 0}, {0, 0, 0}};
            r = ot_build_pad(c, x, zero, pd);
            break;
        }
        case 8: r = ot_build_get_tuple_element(c, x, 0); break;
        case 9: {
            ot_instr *in = ot_build_parameter(c, 3, SH(OT_F32, 1, 5, 3), "in");
            ot_instr *kr = ot_build_parameter(c, 4, SH(OT_F32, 3, 2, 4), "kr");
            ot_conv_dims cd = {.nspatial = 1,
                               .input_batch = 0,
                               .input_feature = 2,
                               .input_spatial = {1},
                               .kernel_input_feature = 1,
                               .kernel_output_feature = 2,
                               .kernel_spatial = {0},
                               .output_batch = 0,
                               .output_feature = 2,
                               .output_spatial = {1}};
            ot_window w = {
                .rank = 1,
                .dims = {{.size = 3, .stride = 1, .window_dilation = 1, .base_dilation = 1}}};
            r = ot_build_convolution(c, in, kr, &w, &cd, 1, 1);
            break;
        }
        case 10: r = ot_build_select(c, x, x, x); break;
        case 11: r = ot_build_unary(c, OT_OP_SQRT, i); break;
        case 12: r = ot_build_reduce_precision(c, x, 0, 3); break;
        }
        EXPECT_TRUE(r == NULL);
        EXPECT_TRUE(ot_module_status(m) != OT_OK);
        EXPECT_STR_CONTAINS(ot_last_error(), cases[k].want);
        ot_module_free(m);
    }
}

static ot_module *build_chain(ot_computation **out_c, ot_instr **out_x) {
    ot_module *m = ot_module_new("chain");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SH(OT_F32, 8), "x");
    ot_instr *e = ot_build_unary(c, OT_OP_EXP, x);
    ot_instr *n = ot_build_unary(c, OT_OP_NEGATE, e);
    ot_instr *a = ot_build_binary(c, OT_OP_ADD, n, e);
    ot_computation_set_root(c, a);
    ot_module_set_entry(m, c);
    *out_c = c;
    *out_x = x;
    return m;
}

static void test_edits(void) {
    ot_computation *c;
    ot_instr *x;
    ot_module *m = build_chain(&c, &x);
    ASSERT_OK(ot_module_finalize(m));
    ot_instr *e = x->users[0];
    ot_instr *n = e->users[0];
    ot_instr *a = c->root;
    EXPECT_INT_EQ(e->nusers, 2);
    /* replace exp(x) by log(x) everywhere */
    ot_instr *lg = ot_build_unary(c, OT_OP_LOG, x);
    ASSERT_OK(ot_instr_replace_all_uses(e, lg));
    EXPECT_INT_EQ(e->nusers, 0);
    EXPECT_INT_EQ(lg->nusers, 2);
    EXPECT_TRUE(a->operands[1] == lg && n->operands[0] == lg);
    EXPECT_OK(ot_module_verify(m)); /* list order is not topological now; verify still holds */
    ASSERT_OK(ot_instr_remove(e));
    EXPECT_INT_EQ(x->nusers, 1);
    EXPECT_OK(ot_module_verify(m));
    /* bad edits change nothing */
    EXPECT_STATUS(ot_instr_remove(lg), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STATUS(ot_instr_remove(a), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STATUS(ot_instr_remove(x), OT_ERR_FAILED_PRECONDITION);
    ot_instr *r8 = ot_build_reshape(c, x, SH(OT_F32, 2, 4));
    EXPECT_STATUS(ot_instr_replace_all_uses(lg, r8), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STATUS(ot_instr_replace_operand(a, 0, r8), OT_ERR_SHAPE_MISMATCH);
    EXPECT_OK(ot_module_verify(m));
    /* replace the root: the root moves */
    ot_instr *cp = ot_build_copy(c, a);
    ASSERT_OK(ot_instr_replace_all_uses(a, cp));
    EXPECT_TRUE(c->root == cp);
    EXPECT_INT_EQ(a->nusers, 1); /* cp still uses a */
    EXPECT_OK(ot_module_verify(m));
    /* replace one operand slot */
    ASSERT_OK(ot_instr_replace_operand(a, 0, x));
    EXPECT_INT_EQ(n->nusers, 0);
    ASSERT_OK(ot_instr_remove_with_dead_operands(n));
    EXPECT_TRUE(ot_computation_find_instr(c, n->name) == NULL);
    ASSERT_OK(ot_instr_remove_with_dead_operands(r8));
    EXPECT_OK(ot_module_verify(m));
    EXPECT_INT_EQ(c->ninstrs, 4); /* x, log, add, copy */
    /* post order puts operands first */
    ot_instr **order;
    int64_t no;
    ASSERT_OK(ot_computation_post_order(c, &order, &no));
    EXPECT_INT_EQ(no, 4);
    EXPECT_TRUE(order[0] == x && order[3] == cp);
    ot_free(order);
    ot_module_free(m);
}

/* A copy into another module shares each distinct attribute set among the copies that hold it
 * (content equal: a broadcast's or reduce's dimensions, a constant's value) and keeps apart
 * sets that differ, even only in how they print (no replica groups and an empty list). */
static void test_clone_shares_attribute_sets(void) {
    ot_module *m = ot_module_new("attrs");
    ot_computation *sum = add_reducer(m, OT_F32, "sum");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_module_set_entry(m, c);
    ot_instr *x = ot_build_parameter(c, 0, SH(OT_F32, 8), "x");
    ot_shape s48;
    ASSERT_OK(ot_shape_make(&s48, OT_F32, 2, (int64_t[]){4, 8}));
    ot_instr *b1 = ot_build_broadcast(c, x, s48, (int64_t[]){1}, 1);
    ot_instr *b2 =
        ot_build_broadcast(c, ot_build_unary(c, OT_OP_NEGATE, x), s48, (int64_t[]){1}, 1);
    ot_instr *z = ot_build_constant_scalar(c, OT_F32, 0);
    ot_instr *r1 = ot_build_reduce(c, &b1, &z, 1, (int64_t[]){0}, 1, sum);
    ot_instr *r2 = ot_build_reduce(c, &b2, &z, 1, (int64_t[]){0}, 1, sum);
    ot_instr *k2a = ot_build_constant_scalar(c, OT_F32, 2);
    ot_instr *k2b = ot_build_constant_scalar(c, OT_F32, 2);
    ot_instr *k3 = ot_build_constant_scalar(c, OT_F32, 3);
    const ot_replica_groups *none = ot_replica_groups_make(m, 0, NULL, NULL);
    ASSERT_TRUE(none != NULL);
    ot_instr *a1 = ot_build_all_reduce(c, &r1, 1, NULL, 1, false, sum);
    ot_instr *a2 = ot_build_all_reduce(c, &r2, 1, none, 1, false, sum);
    ot_instr *outs[] = {a1, a2, k2a, k2b, k3};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 5));
    ASSERT_OK(ot_module_finalize(m));
    ASSERT_TRUE(b1->attrs != b2->attrs && k2a->attrs != k2b->attrs); /* the builder copies */
    char *want = ot_hlo_print(m, NULL);
    ASSERT_TRUE(want != NULL);
    ot_module *m2 = NULL;
    ASSERT_OK(ot_module_clone(m, &m2));
    ot_computation *c2 = ot_module_entry(m2);
    ot_instr *orig[] = {b1, b2, r1, r2, k2a, k2b, k3, a1, a2}, *cp[9];
    for (int k = 0; k < 9; k++) {
        cp[k] = ot_computation_find_instr(c2, orig[k]->name);
        ASSERT_TRUE(cp[k] != NULL);
        ASSERT_TRUE(cp[k]->attrs != orig[k]->attrs);
    }
    ot_module_free(m);                         /* the copy's sets live in its own arena */
    EXPECT_TRUE(cp[0]->attrs == cp[1]->attrs); /* broadcasts, dimensions {1} */
    EXPECT_TRUE(cp[2]->attrs == cp[3]->attrs); /* reduces, dimensions {0} */
    EXPECT_TRUE(cp[4]->attrs == cp[5]->attrs); /* constants 2 */
    EXPECT_TRUE(cp[6]->attrs != cp[4]->attrs); /* constant 3 */
    EXPECT_TRUE(*(const float *)cp[6]->attrs->literal->data == 3.0f);
    EXPECT_TRUE(cp[7]->attrs != cp[8]->attrs); /* no groups, an empty list */
    EXPECT_OK(ot_module_verify(m2));
    char *got = ot_hlo_print(m2, NULL);
    ASSERT_TRUE(got != NULL);
    EXPECT_STR_EQ(got, want);
    ot_free(got);
    ot_free(want);
    ot_module_free(m2);
}

static void test_clone(void) {
    ot_computation *c;
    ot_instr *x;
    ot_module *m = build_chain(&c, &x);
    ot_computation *sum = add_reducer(m, OT_F32, "sum");
    ot_instr *z = ot_build_constant_scalar(c, OT_F32, 0);
    int64_t d[] = {0};
    ot_instr *red = ot_build_reduce(c, &c->root, &z, 1, d, 1, sum);
    ot_computation_set_root(c, red);
    ASSERT_OK(ot_module_finalize(m));
    ot_computation *cl;
    ASSERT_OK(ot_computation_clone(c, ".v2", &cl));
    EXPECT_STR_EQ(cl->name, "main.v2");
    EXPECT_INT_EQ(cl->ninstrs, c->ninstrs);
    EXPECT_TRUE(cl->root && cl->root != c->root && cl->root->opcode == OT_OP_REDUCE);
    EXPECT_TRUE(cl->root->called[0] == sum);
    EXPECT_INT_EQ(cl->nparams, 1);
    EXPECT_OK(ot_module_verify(m));
    ot_module *m2;
    ASSERT_OK(ot_module_clone(m, &m2));
    EXPECT_OK(ot_module_verify(m2));
    EXPECT_INT_EQ(ot_module_instr_count(m2), ot_module_instr_count(m));
    EXPECT_INT_EQ(ot_module_computation_count(m2), 3);
    EXPECT_TRUE(ot_module_entry(m2) && ot_module_entry(m2) != c);
    EXPECT_TRUE(ot_module_entry(m2)->root->called[0] == ot_module_find_computation(m2, "sum"));
    /* instruction clone with new operands */
    ot_computation *main2 = ot_module_entry(m2);
    ot_instr *x2 = main2->params[0];
    ot_instr *e2 = ot_computation_find_instr(main2, x2->users[0]->name);
    ot_instr *ec;
    ASSERT_OK(ot_instr_clone(main2, e2, &x2, NULL, &ec));
    EXPECT_TRUE(ec->opcode == e2->opcode && ec->operands[0] == x2);
    EXPECT_TRUE(ot_instr_attrs_equal(ec, e2));
    ASSERT_OK(ot_instr_remove(ec));
    EXPECT_OK(ot_module_verify(m2));
    /* removing a called computation is refused; an unused one goes */
    EXPECT_STATUS(ot_module_remove_computation(m, sum), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STATUS(ot_module_remove_computation(m, c), OT_ERR_FAILED_PRECONDITION);
    ASSERT_OK(ot_module_remove_computation(m, cl));
    EXPECT_STATUS(ot_module_remove_computation(m, sum), OT_ERR_FAILED_PRECONDITION);
    EXPECT_OK(ot_module_verify(m));
    ot_module_free(m2);
    ot_module_free(m);
}

static void test_many_users(void) {
    /* one producer, many consumers: every edit stays O(1) and links stay exact */
    ot_module *m = ot_module_new(NULL);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SH(OT_F32, 4), "x");
    enum { N = 5000 };
    static ot_instr *us[N];
    for (int i = 0; i < N; i++) us[i] = ot_build_unary(c, OT_OP_NEGATE, x);
    ot_instr *t = ot_build_tuple(c, us, N);
    ot_computation_set_root(c, t);
    ot_module_set_entry(m, c);
    ASSERT_OK(ot_module_finalize(m));
    EXPECT_INT_EQ(x->nusers, N);
    /* redirect every other consumer to a new producer, then drop the rest */
    ot_instr *y = ot_build_unary(c, OT_OP_EXP, x);
    for (int i = 0; i < N; i += 2) ASSERT_OK(ot_instr_replace_operand(us[i], 0, y));
    EXPECT_INT_EQ(x->nusers, N / 2 + 1);
    EXPECT_INT_EQ(y->nusers, N / 2);
    EXPECT_OK(ot_module_verify(m));
    ot_instr *z = ot_build_unary(c, OT_OP_LOG, x);
    for (int i = 1; i < N; i += 2) ASSERT_OK(ot_instr_replace_operand(t, i, z));
    for (int i = 1; i < N; i += 2) ASSERT_OK(ot_instr_remove(us[i]));
    EXPECT_INT_EQ(x->nusers, 2);
    EXPECT_OK(ot_module_verify(m));
    ot_module_free(m);
}

/* The user index of a wide instruction (positions in its users array, hashed by user) through
 * removals in scrambled order, which shift probe chains and move the last user into each freed
 * position, and additions past each rebuild: after every step each user is found, each removed
 * one is not, and the users array holds exactly the users left. */
static void test_users_index(void) {
    ot_module *m = ot_module_new(NULL);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SH(OT_F32, 4), "x");
    enum { N = 1500 };
    static ot_instr *us[N];
    static bool in[N];
    for (int i = 0; i < N; i++) {
        us[i] = ot_build_unary(c, OT_OP_NEGATE, x);
        in[i] = true;
    }
    ASSERT_OK(ot_module_status(m));
    EXPECT_TRUE(x->uidx_ != NULL);
    int left = N, bad = 0;
    uint64_t r = 12345;
    for (int step = 0; step < 2 * N && !bad; step++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int k = (int)((r >> 33) % N);
        if (in[k]) {
            ir_users_remove(x, us[k]);
            left--;
        } else {
            ASSERT_OK(ir_users_add(x, us[k]));
            left++;
        }
        in[k] = !in[k];
        if (x->nusers != left) bad++;
        if (step % 50 == 0 || step > 2 * N - 50)
            for (int i = 0; i < N; i++) bad += ir_users_contains(x, us[i]) != in[i];
    }
    EXPECT_INT_EQ(bad, 0);
    int seen = 0;
    for (int j = 0; j < x->nusers; j++)
        for (int i = 0; i < N; i++)
            if (x->users[j] == us[i]) seen += in[i] ? 1 : 1000;
    EXPECT_INT_EQ(seen, left);
    /* removing a user that is not there changes nothing */
    for (int i = 0; i < N; i++)
        if (!in[i]) {
            ir_users_remove(x, us[i]);
            break;
        }
    EXPECT_INT_EQ(x->nusers, left);
    ot_module_free(m); /* (the users no longer match the operands: not verified) */
}

/* Bytes requested from the allocator (the arena's chunks included), counted by a hook. */
static int64_t g_requested;
static void *counting_realloc(void *ud, void *ptr, size_t size) {
    (void)ud;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    g_requested += (int64_t)size;
    return realloc(ptr, size);
}

static void test_merge_duplicates_memory(void) {
    /* CSE-style: N duplicates merged into one instruction one replace_all_uses at a time. Each
     * merge grows the survivor's user list; growing it by exactly one entry each time would
     * abandon an array per merge (N^2 / 2 pointers: 100 MB at N = 5000). */
    ot_module *m = ot_module_new(NULL);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SH(OT_F32, 4), "x");
    enum { N = 5000 };
    static ot_instr *dup[N], *use[N];
    for (int i = 0; i < N; i++) {
        dup[i] = ot_build_unary(c, OT_OP_NEGATE, x);
        use[i] = ot_build_unary(c, OT_OP_EXP, dup[i]);
    }
    ot_computation_set_root(c, ot_build_tuple(c, use, N));
    ot_module_set_entry(m, c);
    ASSERT_OK(ot_module_finalize(m));
    g_requested = 0;
    ot_set_allocator(counting_realloc, NULL);
    for (int i = 1; i < N; i++) {
        ot_status s = ot_instr_replace_all_uses(dup[i], dup[0]);
        if (s == OT_OK) s = ot_instr_remove(dup[i]);
        if (s != OT_OK) {
            ot_set_allocator(NULL, NULL);
            ASSERT_OK(s);
        }
    }
    ot_set_allocator(NULL, NULL);
    EXPECT_INT_EQ(dup[0]->nusers, N);
    EXPECT_TRUE(g_requested < 4 * 1024 * 1024);
    EXPECT_OK(ot_module_verify(m));
    ot_module_free(m);
}

static void test_names_small_and_large(void) {
    /* names stay unique and findable below and above the size where a computation gets its
     * name index, and across removals */
    ot_module *m = ot_module_new(NULL);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SH(OT_F32, 4), "x");
    ot_instr *a = ot_build_unary(c, OT_OP_NEGATE, x);
    ot_instr *b = ot_build(c, OT_OP_NEGATE, &x, 1, NULL, NULL, 0, NULL, "n");
    ot_instr *b2 = ot_build(c, OT_OP_NEGATE, &x, 1, NULL, NULL, 0, NULL, "n"); /* renamed */
    ASSERT_TRUE(a && b && b2);
    EXPECT_STR_EQ(b2->name, "n.1");
    EXPECT_TRUE(ot_computation_find_instr(c, "n") == b);
    EXPECT_TRUE(ot_computation_find_instr(c, "n.1") == b2);
    EXPECT_TRUE(ot_computation_find_instr(c, a->name) == a);
    EXPECT_TRUE(ot_computation_find_instr(c, "nope") == NULL);
    ot_instr *cl = NULL, *cl2 = NULL;
    ASSERT_OK(ot_instr_clone(c, b, &x, NULL, &cl));
    ASSERT_OK(ot_instr_clone(c, b, &x, NULL, &cl2));
    EXPECT_STR_EQ(cl->name, "n.clone");
    EXPECT_STR_EQ(cl2->name, "n.clone.1");
    ot_instr *dupn = NULL;
    EXPECT_STATUS(ot_instr_clone(c, b, &x, "n", &dupn), OT_ERR_ALREADY_EXISTS);
    /* a removed name is free again */
    ASSERT_OK(ot_instr_remove(cl));
    EXPECT_TRUE(ot_computation_find_instr(c, "n.clone") == NULL);
    ASSERT_OK(ot_instr_clone(c, b, &x, "n.clone", &cl));
    EXPECT_TRUE(ot_computation_find_instr(c, "n.clone") == cl);
    /* grow well past the small size: every earlier name is still found, and still taken */
    ot_instr *prev = x;
    for (int k = 0; k < 100; k++) prev = ot_build_binary(c, OT_OP_ADD, prev, x);
    EXPECT_TRUE(ot_computation_find_instr(c, "n") == b);
    EXPECT_TRUE(ot_computation_find_instr(c, "n.clone") == cl);
    EXPECT_TRUE(ot_computation_find_instr(c, prev->name) == prev);
    EXPECT_STATUS(ot_instr_clone(c, b, &x, "n.1", &dupn), OT_ERR_ALREADY_EXISTS);
    ot_instr *b3 = ot_build(c, OT_OP_NEGATE, &x, 1, NULL, NULL, 0, NULL, "n");
    ASSERT_TRUE(b3 != NULL);
    EXPECT_STR_EQ(b3->name, "n.2");
    ot_computation_set_root(c, prev);
    ot_module_set_entry(m, c);
    EXPECT_OK(ot_module_finalize(m));
    ot_module *m2 = NULL;
    ASSERT_OK(ot_module_clone(m, &m2));
    ot_computation *c2 = ot_module_entry(m2);
    EXPECT_TRUE(ot_computation_find_instr(c2, "n.2") != NULL);
    EXPECT_OK(ot_module_verify(m2));
    ot_module_free(m2);
    ot_module_free(m);
}

static ot_status build_for_fault(void) {
    ot_module *m = ot_module_new("f");
    if (!m) return OT_ERR_OUT_OF_MEMORY;
    ot_computation *sum = add_reducer(m, OT_F32, "sum");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SH(OT_F32, 64, 8), "x");
    ot_instr *z = ot_build_constant_scalar(c, OT_F32, 0);
    ot_instr *prev = x;
    for (int i = 0; i < 40; i++) prev = ot_build_binary(c, OT_OP_ADD, prev, x);
    int64_t d[] = {1};
    ot_instr *r = ot_build_reduce(c, &prev, &z, 1, d, 1, sum);
    int64_t gsz[] = {1};
    int64_t gid[] = {0};
    const ot_replica_groups *g = ot_replica_groups_make(m, 1, gsz, gid);
    r = ot_build_all_reduce(c, &r, 1, g, 0, false, sum);
    ot_computation_set_root(c, r);
    ot_module_set_entry(m, c);
    ot_status s = ot_module_finalize(m);
    ot_module *m2 = NULL;
    if (s == OT_OK) s = ot_module_clone(m, &m2);
    ot_computation *cl = NULL;
    if (s == OT_OK) s = ot_computation_clone(c, NULL, &cl);
    if (s == OT_OK && cl) s = ot_computation_verify(cl);
    ot_module_free(m2);
    ot_module_free(m);
    return s;
}

static void test_made_names_never_collide(void) {
    /* explicit names shaped like made ones ("<opcode>.<n>"): made names skip past them, in the
     * module and in its clone (which builds no name index), and stay unique without one; a
     * name with a huge number leaves ids alone and made names are looked up instead */
    for (int huge = 0; huge < 2; huge++) {
        ot_module *m = ot_module_new(NULL);
        ot_computation *c = ot_module_add_computation(m, "main");
        ot_instr *x = ot_build_parameter(c, 0, SH(OT_F32, 4), "x");
        const char *taken = huge ? "negate.999999999999" : "negate.40";
        ot_instr *e = ot_build(c, OT_OP_NEGATE, &x, 1, NULL, NULL, 0, NULL, taken);
        ASSERT_TRUE(e != NULL);
        ot_instr *prev = e;
        for (int k = 0; k < 60; k++) prev = ot_build_unary(c, OT_OP_NEGATE, prev);
        ot_computation_set_root(c, prev);
        ot_module_set_entry(m, c);
        ASSERT_OK(ot_module_finalize(m));
        ot_module *m2 = NULL;
        ASSERT_OK(ot_module_clone(m, &m2));
        ot_computation *c2 = ot_module_entry(m2);
        ot_instr *p2 = c2->root;
        for (int k = 0; k < 60; k++) p2 = ot_build_unary(c2, OT_OP_NEGATE, p2);
        ot_computation_set_root(c2, p2);
        for (ot_module *mm = m; mm; mm = mm == m ? m2 : NULL) {
            ot_computation *cc = ot_module_entry(mm);
            EXPECT_OK(ot_module_verify(mm));
            /* every name once: each finds its own instruction */
            int n = 0;
            for (ot_instr *i = cc->first; i; i = i->next, n++)
                EXPECT_TRUE(ot_computation_find_instr(cc, i->name) == i);
            EXPECT_INT_EQ(n, cc->ninstrs);
            EXPECT_TRUE(ot_computation_find_instr(cc, taken) != NULL);
            EXPECT_OK(ot_module_verify(mm));
        }
        ot_module_free(m2);
        ot_module_free(m);
    }
}

static void test_cycles_detected(void) {
    /* an edit that closes a cycle is caught by the verifier */
    ot_computation *c;
    ot_instr *x;
    ot_module *m = build_chain(&c, &x);
    ASSERT_OK(ot_module_finalize(m));
    ot_instr *e = x->users[0], *n = e->users[0];
    ASSERT_OK(ot_instr_replace_operand(e, 0, n)); /* e = exp(neg(e)) */
    EXPECT_STATUS(ot_module_verify(m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "cycle");
    ot_module_free(m);
    /* mutual recursion through call: a calls b, b calls a */
    m = ot_module_new(NULL);
    ot_computation *a = ot_module_add_computation(m, "a");
    ot_instr *pa = ot_build_parameter(a, 0, ot_shape_scalar(OT_F32), "p");
    ot_computation_set_root(a, pa);
    ot_computation *b = ot_module_add_computation(m, "b");
    ot_instr *pb = ot_build_parameter(b, 0, ot_shape_scalar(OT_F32), "p");
    ot_computation_set_root(b, ot_build_call(b, a, &pb, 1));
    ot_computation_set_root(a, ot_build_call(a, b, &pa, 1));
    ot_computation *e2 = ot_module_add_computation(m, "main");
    ot_instr *pe = ot_build_parameter(e2, 0, ot_shape_scalar(OT_F32), "p");
    ot_computation_set_root(e2, ot_build_call(e2, a, &pe, 1));
    ot_module_set_entry(m, e2);
    EXPECT_STATUS(ot_module_finalize(m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "recursive call");
    ot_module_free(m);
}

static ot_instr *map_to(void *ctx, const ot_instr *o) {
    ot_instr **pair = ctx; /* pair[0] -> pair[1] */
    return o == pair[0] ? pair[1] : NULL;
}

static void test_outline_move_and_map(void) {
    /* outline y = exp(x + x) of main into a computation by hand, as fusion does: move the
     * members, give them a parameter, then rewire main's readers in one go */
    ot_module *m = ot_module_new(NULL);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, SH(OT_F32, 4), "x");
    ot_instr *a = ot_build_binary(c, OT_OP_ADD, x, x);
    ot_instr *y = ot_build(c, OT_OP_EXP, &a, 1, NULL, NULL, 0, NULL, "p.1");
    enum { N = 40 };
    ot_instr *rs[N];
    for (int i = 0; i < N; i++) rs[i] = i % 2 ? y : x; /* a tuple reading y in 20 slots */
    ot_instr *t = ot_build_tuple(c, rs, N);
    ot_computation_set_root(c, t);
    ot_module_set_entry(m, c);
    ASSERT_OK(ot_module_finalize(m));
    ot_computation *f = ot_module_add_computation(m, "f");
    ot_instr *fp = ot_build_parameter(f, 0, SH(OT_F32, 4), "p.1"); /* y's name, taken */
    /* a parameter does not move; an instruction cannot move into its own computation */
    EXPECT_STATUS(ir_instr_move(x, f), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ir_instr_move(a, c), OT_ERR_INVALID_ARGUMENT);
    int64_t nmain = c->ninstrs;
    ASSERT_OK(ir_instr_move(a, f));
    ASSERT_OK(ir_instr_move(y, f));
    EXPECT_TRUE(a->parent == f && y->parent == f);
    EXPECT_STR_EQ(y->name, "p.1.1"); /* renamed on the clash */
    EXPECT_TRUE(ot_computation_find_instr(f, "p.1.1") == y);
    EXPECT_TRUE(ot_computation_find_instr(c, "p.1") == NULL);
    EXPECT_INT_EQ(c->ninstrs, nmain - 2);
    EXPECT_INT_EQ(f->ninstrs, 3);
    EXPECT_TRUE(f->first == fp && f->last == y);
    ASSERT_OK(ot_instr_replace_operand(a, 0, fp));
    ASSERT_OK(ot_instr_replace_operand(a, 1, fp));
    EXPECT_INT_EQ(x->nusers, 1); /* the tuple only */
    ot_computation_set_root(f, y);
    ot_instr *call = ot_build_call(c, f, &x, 1);
    ASSERT_TRUE(call != NULL);
    /* bad targets: another computation's instruction, another shape; nothing changes */
    ot_instr *pair[2] = {y, y};
    EXPECT_STATUS(ir_instr_map_operands(t, map_to, (ot_instr *[]){y, fp}), OT_ERR_INVALID_ARGUMENT);
    ot_instr *s = ot_build_constant_scalar(c, OT_F32, 1);
    EXPECT_STATUS(ir_instr_map_operands(t, map_to, (ot_instr *[]){y, s}), OT_ERR_SHAPE_MISMATCH);
    EXPECT_TRUE(t->operands[1] == y && y->nusers == 1 && call->nusers == 0);
    pair[1] = call;
    ASSERT_OK(ir_instr_map_operands(t, map_to, pair));
    for (int i = 0; i < N; i++) EXPECT_TRUE(t->operands[i] == (i % 2 ? call : x));
    EXPECT_INT_EQ(y->nusers, 0);
    EXPECT_INT_EQ(call->nusers, 1);
    EXPECT_INT_EQ(x->nusers, 2); /* the tuple and the call, once each */
    ASSERT_OK(ot_instr_remove(s));
    EXPECT_OK(ot_module_verify(m));
    /* mapping to what is there already changes nothing */
    pair[0] = x;
    pair[1] = x;
    ASSERT_OK(ir_instr_map_operands(t, map_to, pair));
    EXPECT_INT_EQ(x->nusers, 2);
    EXPECT_OK(ot_module_verify(m));
    ot_module_free(m);
}

static void test_alloc_failure(void) {
    int64_t live = ot_alloc_live();
    int ok_at = 0;
    for (int n = 1; n < 2000; n++) {
        ot_alloc_fail_after(n);
        ot_status s = build_for_fault();
        ot_alloc_fail_after(0);
        EXPECT_INT_EQ(ot_alloc_live(), live);
        if (s == OT_OK) {
            ok_at = n;
            break;
        }
        EXPECT_TRUE(s == OT_ERR_OUT_OF_MEMORY);
    }
    EXPECT_TRUE(ok_at > 1);
}

OT_TEST_MAIN(OT_TEST(test_opcode_table), OT_TEST(test_op_traits_agree_with_inference),
             OT_TEST(test_attr_schema), OT_TEST(test_build_axpy), OT_TEST(test_sticky_error),
             OT_TEST(test_infer_shape_ops), OT_TEST(test_control_flow), OT_TEST(test_infer_errors),
             OT_TEST(test_edits), OT_TEST(test_clone), OT_TEST(test_clone_shares_attribute_sets),
             OT_TEST(test_many_users), OT_TEST(test_users_index),
             OT_TEST(test_merge_duplicates_memory), OT_TEST(test_names_small_and_large),
             OT_TEST(test_made_names_never_collide), OT_TEST(test_cycles_detected),
             OT_TEST(test_outline_move_and_map), OT_TEST(test_alloc_failure))
