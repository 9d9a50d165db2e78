/* Compiler: pass manager, every pass on before/after cases (bad cases included), fusion
 * legality, scheduling, buffer assignment, executables, options, serialization, fault injection,
 * and the Adam update compiling into one multi-output in-place kernel. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/compiler_internal.h"
#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "ot_test.h"

static ot_shape vec(int64_t n) {
    ot_shape s;
    ot_shape_make(&s, OT_F32, 1, (int64_t[]){n});
    return s;
}
static ot_shape mat2(ot_dtype t, int64_t a, int64_t b) {
    ot_shape s;
    ot_shape_make(&s, t, 2, (int64_t[]){a, b});
    return s;
}
static ot_instr *bcast(ot_computation *c, ot_instr *x, ot_shape to) {
    return ot_build_broadcast(c, x, to, NULL, 0);
}
static ot_instr *fconst(ot_computation *c, double v, ot_shape to) {
    return bcast(c, ot_build_constant_scalar(c, to.dtype, v), to);
}
static int count_op(const ot_computation *c, ot_opcode op) {
    int n = 0;
    for (const ot_instr *i = c->first; i; i = i->next) n += i->opcode == op;
    return n;
}
static ot_module *new_mod(ot_computation **c) {
    ot_module *m = ot_module_new("t");
    *c = ot_module_add_computation(m, "main");
    ot_module_set_entry(m, *c);
    return m;
}
static ot_computation *add_reducer(ot_module *m, ot_opcode op, ot_dtype t) {
    ot_computation *r = ot_module_add_computation(m, NULL);
    ot_instr *a = ot_build_parameter(r, 0, ot_shape_scalar(t), "a");
    ot_instr *b = ot_build_parameter(r, 1, ot_shape_scalar(t), "b");
    ot_computation_set_root(r, ot_build_binary(r, op, a, b));
    return r;
}

/* ---- pass manager ---- */

static int g_calls;
static ot_status pass_count_down(ot_module *m, void *ctx, bool *changed) {
    (void)m;
    int *left = ctx;
    g_calls++;
    *changed = *left > 0;
    if (*left > 0) (*left)--;
    return OT_OK;
}
static ot_status pass_fails(ot_module *m, void *ctx, bool *changed) {
    (void)m;
    (void)ctx;
    *changed = false;
    return ot_error(OT_ERR_INVALID_ARGUMENT, "deliberate");
}

static int g_once_calls, g_watch_calls;
static ot_status pass_changes_once(ot_module *m, void *ctx, bool *changed) {
    (void)m;
    (void)ctx;
    *changed = g_once_calls++ == 0;
    return OT_OK;
}
static ot_status pass_watch(ot_module *m, void *ctx, bool *changed) {
    (void)m;
    (void)ctx;
    g_watch_calls++;
    *changed = false;
    return OT_OK;
}

/* Runs {once, watch} as a fixed-point group (once idempotent or not); returns the stat count. */
static int run_skip_group(ot_module *m, bool idempotent) {
    ot_pass_manager *pm = ot_pass_manager_new();
    g_once_calls = g_watch_calls = 0;
    EXPECT_OK(ot_pass_manager_begin_fixed_point(pm, "group", 10));
    if (idempotent)
        EXPECT_OK(ot_pass_manager_add_idempotent(pm, "once", pass_changes_once, NULL));
    else
        EXPECT_OK(ot_pass_manager_add(pm, "once", pass_changes_once, NULL));
    EXPECT_OK(ot_pass_manager_add(pm, "watch", pass_watch, NULL));
    EXPECT_OK(ot_pass_manager_end_fixed_point(pm));
    EXPECT_OK(ot_pass_manager_run(pm, m));
    int n = ot_pass_manager_stat_count(pm);
    ot_pass_manager_free(pm);
    return n;
}

static void test_pass_manager(void) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_instr *p = ot_build_parameter(c, 0, vec(4), "p");
    ot_computation_set_root(c, ot_build_unary(c, OT_OP_NEGATE, p));
    ASSERT_OK(ot_module_finalize(m));
    ot_pass_manager *pm = ot_pass_manager_new();
    int left = 2;
    g_calls = 0;
    ASSERT_OK(ot_pass_manager_begin_fixed_point(pm, "group", 10));
    EXPECT_STATUS(ot_pass_manager_begin_fixed_point(pm, "nested", 10), OT_ERR_FAILED_PRECONDITION);
    ASSERT_OK(ot_pass_manager_add(pm, "countdown", pass_count_down, &left));
    ASSERT_OK(ot_pass_manager_end_fixed_point(pm));
    EXPECT_STATUS(ot_pass_manager_end_fixed_point(pm), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STATUS(ot_pass_manager_add(pm, "nofn", (ot_pass_fn)NULL, NULL), OT_ERR_INVALID_ARGUMENT);
    ot_pass_manager_set_verify_each(pm, true);
    ASSERT_OK(ot_pass_manager_run(pm, m));
    EXPECT_INT_EQ(g_calls, 3); /* changed, changed, unchanged */
    EXPECT_INT_EQ(ot_pass_manager_stat_count(pm), 3);
    const ot_pass_stat *st = ot_pass_manager_stat(pm, 2);
    EXPECT_STR_EQ(st->name, "countdown");
    EXPECT_INT_EQ(st->iteration, 2);
    EXPECT_TRUE(!st->changed);
    EXPECT_TRUE(ot_pass_manager_stat(pm, 0)->changed);
    EXPECT_INT_EQ(st->instrs_before, 2);
    EXPECT_TRUE(ot_pass_manager_stat(pm, 3) == NULL);
    ot_pass_manager_free(pm);

    /* skipping: iteration 1 runs `once` again (it changed the module last time), `watch` not
     * (nothing changed since it ran); declared idempotent, `once` is skipped too */
    EXPECT_INT_EQ(run_skip_group(m, false), 3);
    EXPECT_INT_EQ(g_once_calls, 2);
    EXPECT_INT_EQ(g_watch_calls, 1);
    EXPECT_INT_EQ(run_skip_group(m, true), 2);
    EXPECT_INT_EQ(g_once_calls, 1);
    EXPECT_INT_EQ(g_watch_calls, 1);

    pm = ot_pass_manager_new();
    ASSERT_OK(ot_pass_manager_add(pm, "broken", pass_fails, NULL));
    EXPECT_STATUS(ot_pass_manager_run(pm, m), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "broken");
    ot_pass_manager_free(pm);
    ot_pass_manager_free(NULL);
    ot_module_free(m);
}

/* ---- DCE ---- */

static void test_dce(void) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_instr *p = ot_build_parameter(c, 0, vec(4), "p");
    ot_instr *dead = ot_build_unary(c, OT_OP_EXP, p);
    ot_build_unary(c, OT_OP_LOG, dead);
    ot_build_custom_call(c, "effect", &p, 1, &(ot_ir_shape){.kind = OT_IR_TUPLE}, NULL, true);
    ot_computation *unused = add_reducer(m, OT_OP_ADD, OT_F32);
    (void)unused;
    ot_instr *r = ot_build_unary(c, OT_OP_NEGATE, p);
    ot_computation_set_root(c, r);
    ASSERT_OK(ot_module_finalize(m));
    EXPECT_INT_EQ(ot_module_computation_count(m), 2);
    bool ch = false;
    ASSERT_OK(ot_pass_dce(m, &ch));
    EXPECT_TRUE(ch);
    EXPECT_INT_EQ(c->ninstrs, 3); /* parameter, side-effecting custom-call, root */
    EXPECT_INT_EQ(count_op(c, OT_OP_CUSTOM_CALL), 1);
    EXPECT_INT_EQ(count_op(c, OT_OP_EXP), 0);
    EXPECT_INT_EQ(ot_module_computation_count(m), 1);
    ASSERT_OK(ot_module_verify(m));
    ASSERT_OK(ot_pass_dce(m, &ch));
    EXPECT_TRUE(!ch);
    ot_module_free(m);

    /* no outputs declared */
    m = ot_module_new("empty");
    c = ot_module_add_computation(m, "main");
    ot_module_set_entry(m, c);
    EXPECT_STATUS(ot_pass_dce(m, &ch), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "no outputs declared");
    ot_executable *e = NULL;
    EXPECT_STATUS(ot_compile(m, NULL, &e), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "no outputs declared");
    EXPECT_TRUE(e == NULL);
    ot_module_free(m);
}

/* Consecutive passes share one set of post orders while the module is unedited: an edit made
 * between two passes (here from outside any pass) must be seen by the next one. */
static void test_orders_kept_between_passes(void) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_instr *p = ot_build_parameter(c, 0, vec(4), "p");
    ot_computation_set_root(c, ot_build_unary(c, OT_OP_NEGATE, p));
    ASSERT_OK(ot_module_finalize(m));
    bool ch = true;
    ASSERT_OK(ot_pass_dce(m, &ch)); /* nothing to do: its orders are kept */
    EXPECT_TRUE(!ch);
    /* a new dead instruction */
    ot_build_unary(c, OT_OP_EXP, p);
    EXPECT_INT_EQ(c->ninstrs, 3);
    ASSERT_OK(ot_pass_dce(m, &ch));
    EXPECT_TRUE(ch);
    EXPECT_INT_EQ(c->ninstrs, 2);
    EXPECT_INT_EQ(count_op(c, OT_OP_EXP), 0);
    /* two equal instructions after a CSE run that changed nothing */
    ASSERT_OK(ot_pass_cse(m, &ch));
    EXPECT_TRUE(!ch);
    ot_instr *a = ot_build_unary(c, OT_OP_ABS, p), *b = ot_build_unary(c, OT_OP_ABS, p);
    ot_computation_set_root(c, ot_build_binary(c, OT_OP_ADD, a, b));
    ASSERT_OK(ot_pass_cse(m, &ch));
    EXPECT_TRUE(ch);
    EXPECT_INT_EQ(count_op(c, OT_OP_ABS), 1);
    /* a root replaced: the old one is dead */
    ASSERT_OK(ot_pass_dce(m, &ch));
    EXPECT_TRUE(ch); /* the negate */
    ot_instr *old_root = c->root;
    ot_computation_set_root(c, ot_build_unary(c, OT_OP_NEGATE, old_root->operands[0]));
    ASSERT_OK(ot_pass_dce(m, &ch));
    EXPECT_TRUE(ch);
    EXPECT_INT_EQ(count_op(c, OT_OP_ADD), 0);
    EXPECT_INT_EQ(c->ninstrs, 3); /* parameter, abs, negate */
    ASSERT_OK(ot_module_verify(m));
    ot_module_free(m);
}

/* ---- CSE ---- */

static void test_cse(void) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_instr *a = ot_build_parameter(c, 0, vec(4), "a");
    ot_instr *b = ot_build_parameter(c, 1, vec(4), "b");
    ot_instr *x1 = ot_build_binary(c, OT_OP_ADD, a, b);
    ot_instr *x2 = ot_build_binary(c, OT_OP_ADD, a, b);
    ot_instr *s1 = ot_build_binary(c, OT_OP_SUBTRACT, a, b); /* not commutative */
    ot_instr *s2 = ot_build_binary(c, OT_OP_SUBTRACT, b, a);
    ot_instr *k1 = ot_build_constant_scalar(c, OT_F32, 2.0);
    ot_instr *k2 = ot_build_constant_scalar(c, OT_F32, 2.0); /* by value */
    ot_instr *k3 = ot_build_constant_scalar(c, OT_F32, 3.0);
    ot_instr *e1 = ot_build_custom_call(c, "rng", &a, 1, &a->shape, NULL, true);
    ot_instr *e2 = ot_build_custom_call(c, "rng", &a, 1, &a->shape, NULL, true);
    ot_instr *outs[] = {
        x1, x2, s1, s2, bcast(c, k1, vec(4)), bcast(c, k2, vec(4)), bcast(c, k3, vec(4)), e1, e2};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 9));
    ASSERT_OK(ot_module_finalize(m));
    bool ch = false;
    ASSERT_OK(ot_pass_cse(m, &ch));
    EXPECT_TRUE(ch);
    ASSERT_OK(ot_module_verify(m));
    const ot_instr *t = c->root;
    EXPECT_TRUE(t->operands[0] == t->operands[1]);
    EXPECT_TRUE(t->operands[2] != t->operands[3]);
    EXPECT_TRUE(t->operands[4] == t->operands[5]);
    EXPECT_TRUE(t->operands[4] != t->operands[6]);
    EXPECT_TRUE(t->operands[7] != t->operands[8]); /* side effects never merge */
    EXPECT_INT_EQ(count_op(c, OT_OP_CUSTOM_CALL), 2);
    EXPECT_INT_EQ(count_op(c, OT_OP_CONSTANT), 2);
    ASSERT_OK(ot_pass_cse(m, &ch));
    EXPECT_TRUE(!ch);
    ot_module_free(m);
}

/* Commutative operands match in either order for integers only: a float add, multiply, maximum
 * or minimum of two NaNs returns its first operand, so `b*a` is not `a*b` bit for bit (random
 * graph seed 2493: CSE turned an output's 0x7fc00000 into 0xffc00000). */
static void test_cse_commuted_operands(void) {
    static const ot_opcode ops[] = {OT_OP_ADD, OT_OP_MULTIPLY, OT_OP_MAXIMUM, OT_OP_MINIMUM};
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape is;
    ot_shape_make(&is, OT_S32, 1, (int64_t[]){2});
    ot_instr *a = ot_build_parameter(c, 0, vec(2), "a");
    ot_instr *b = ot_build_parameter(c, 1, vec(2), "b");
    ot_instr *i = ot_build_parameter(c, 2, is, "i");
    ot_instr *j = ot_build_parameter(c, 3, is, "j");
    ot_instr *outs[16];
    for (int k = 0; k < 4; k++) {
        outs[4 * k + 0] = ot_build_binary(c, ops[k], a, b);
        outs[4 * k + 1] = ot_build_binary(c, ops[k], b, a);
        outs[4 * k + 2] = ot_build_binary(c, ops[k], i, j);
        outs[4 * k + 3] = ot_build_binary(c, ops[k], j, i);
    }
    ot_computation_set_root(c, ot_build_tuple(c, outs, 16));
    ASSERT_OK(ot_module_finalize(m));
    ot_value args[4], want = ot_value_empty(), got = ot_value_empty();
    const float fa[2] = {NAN, 1.5f}, fb[2] = {-NAN, -2.0f};
    const int32_t ia[2] = {7, -3}, ib[2] = {-9, 4};
    for (int k = 0; k < 4; k++)
        ASSERT_OK(ot_value_alloc_array(&args[k], k < 2 ? &a->shape.array : &is));
    memcpy(args[0].array.data, fa, sizeof fa);
    memcpy(args[1].array.data, fb, sizeof fb);
    memcpy(args[2].array.data, ia, sizeof ia);
    memcpy(args[3].array.data, ib, sizeof ib);
    ASSERT_OK(ot_evaluate(m, args, 4, NULL, &want));
    /* the evaluator itself: the two orders differ in the NaN's sign */
    uint32_t w0, w1;
    memcpy(&w0, ot_value_leaf(&want, 0)->array.data, 4);
    memcpy(&w1, ot_value_leaf(&want, 1)->array.data, 4);
    EXPECT_TRUE(w0 != w1);
    bool ch = false;
    ASSERT_OK(ot_pass_cse(m, &ch));
    EXPECT_TRUE(ch);
    ASSERT_OK(ot_module_verify(m));
    const ot_instr *t = c->root;
    for (int k = 0; k < 4; k++) {
        EXPECT_TRUE(t->operands[4 * k] != t->operands[4 * k + 1]);     /* f32: kept apart */
        EXPECT_TRUE(t->operands[4 * k + 2] == t->operands[4 * k + 3]); /* s32: one */
    }
    ASSERT_OK(ot_evaluate(m, args, 4, NULL, &got));
    EXPECT_TRUE(ot_value_equal(&want, &got));
    for (int k = 0; k < 4; k++) ot_value_release(&args[k]);
    ot_value_release(&want);
    ot_value_release(&got);
    ot_module_free(m);
}

/* Called computations compare by structure: JAX gives each reduce its own reducer copy, so the
 * row max that softmax and log_softmax both take of one array calls two computations. */
static const char *k_cse_regions =
    "HloModule cse_regions\n"
    "add_a {\n  p0 = f32[] parameter(0)\n  p1 = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(p0, p1)\n}\n"
    "add_b {\n  q0 = f32[] parameter(0)\n  q1 = f32[] parameter(1)\n"
    "  ROOT t = f32[] add(q0, q1)\n}\n"
    "max_c {\n  p0 = f32[] parameter(0)\n  p1 = f32[] parameter(1)\n"
    "  ROOT m = f32[] maximum(p0, p1)\n}\n"
    "add_swapped {\n  p0 = f32[] parameter(0)\n  p1 = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(p1, p0)\n}\n"
    "add_scaled {\n  p0 = f32[] parameter(0)\n  p1 = f32[] parameter(1)\n"
    "  k = f32[] constant(2)\n  m = f32[] multiply(p1, k)\n  ROOT s = f32[] add(p0, m)\n}\n"
    "add_scaled3 {\n  p0 = f32[] parameter(0)\n  p1 = f32[] parameter(1)\n"
    "  k = f32[] constant(3)\n  m = f32[] multiply(p1, k)\n  ROOT s = f32[] add(p0, m)\n}\n"
    "outer_1 {\n  x = f32[8] parameter(0)\n  z = f32[] constant(0)\n"
    "  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=add_a\n}\n"
    "outer_2 {\n  y = f32[8] parameter(0)\n  z = f32[] constant(0)\n"
    "  ROOT r = f32[] reduce(y, z), dimensions={0}, to_apply=add_b\n}\n"
    "effect_1 {\n  x = f32[8] parameter(0)\n"
    "  e = f32[8] custom-call(x), custom_call_target=\"fx\", custom_call_has_side_effect=true\n"
    "  ROOT n = f32[8] negate(x)\n}\n"
    "effect_2 {\n  x = f32[8] parameter(0)\n"
    "  e = f32[8] custom-call(x), custom_call_target=\"fx\", custom_call_has_side_effect=true\n"
    "  ROOT n = f32[8] negate(x)\n}\n"
    "ENTRY main {\n"
    "  x = f32[8,16] parameter(0)\n"
    "  z = f32[] constant(0)\n"
    "  r1 = f32[8] reduce(x, z), dimensions={1}, to_apply=add_a\n"
    "  r2 = f32[8] reduce(x, z), dimensions={1}, to_apply=add_b\n"
    "  r3 = f32[8] reduce(x, z), dimensions={1}, to_apply=max_c\n"
    "  r4 = f32[8] reduce(x, z), dimensions={1}, to_apply=add_swapped\n"
    "  r5 = f32[8] reduce(x, z), dimensions={1}, to_apply=add_scaled\n"
    "  r6 = f32[8] reduce(x, z), dimensions={1}, to_apply=add_scaled3\n"
    "  c1 = f32[] call(r1), to_apply=outer_1\n"
    "  c2 = f32[] call(r2), to_apply=outer_2\n"
    "  e1 = f32[8] call(r1), to_apply=effect_1\n"
    "  e2 = f32[8] call(r1), to_apply=effect_2\n"
    "  ROOT t = (f32[8], f32[8], f32[8], f32[8], f32[8], f32[8], f32[], f32[], f32[8], f32[8]) "
    "tuple(r1, r2, r3, r4, r5, r6, c1, c2, e1, e2)\n"
    "}\n";

static void test_cse_called_by_structure(void) {
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(k_cse_regions, strlen(k_cse_regions), NULL, &m));
    ASSERT_OK(ot_module_finalize(m));
    int before = ot_module_computation_count(m);
    bool ch = false;
    ASSERT_OK(ot_pass_cse(m, &ch));
    EXPECT_TRUE(ch);
    ASSERT_OK(ot_pass_dce(m, NULL));
    ASSERT_OK(ot_module_verify(m));
    const ot_instr *t = ot_module_entry(m)->root;
    EXPECT_TRUE(t->operands[0] == t->operands[1]); /* add_a and add_b: one reduce */
    EXPECT_TRUE(t->operands[0] != t->operands[2]); /* maximum */
    EXPECT_TRUE(t->operands[0] != t->operands[3]); /* operands swapped: kept apart */
    EXPECT_TRUE(t->operands[4] != t->operands[5]); /* constants 2 and 3 */
    EXPECT_TRUE(t->operands[6] == t->operands[7]); /* callees equal through their own callees */
    EXPECT_TRUE(t->operands[8] != t->operands[9]); /* side effects: never one computation */
    EXPECT_INT_EQ(count_op(ot_module_entry(m), OT_OP_REDUCE), 5);
    /* add_b and outer_2 are no longer called */
    EXPECT_INT_EQ(ot_module_computation_count(m), before - 2);
    ASSERT_OK(ot_pass_cse(m, &ch));
    EXPECT_TRUE(!ch);
    ot_module_free(m);

    /* the same module run: every output the reference evaluator's, bit for bit */
    ot_module *ref = NULL, *opt = NULL;
    ASSERT_OK(ot_hlo_parse(k_cse_regions, strlen(k_cse_regions), NULL, &ref));
    ASSERT_OK(ot_hlo_parse(k_cse_regions, strlen(k_cse_regions), NULL, &opt));
    ot_shape xs = mat2(OT_F32, 8, 16);
    ot_value arg, want = ot_value_empty(), got = ot_value_empty();
    ASSERT_OK(ot_value_alloc_array(&arg, &xs));
    for (int j = 0; j < 128; j++)
        ((float *)arg.array.data)[j] = (float)((j * 37) % 29) / 8.0f - 1.5f;
    ASSERT_OK(ot_evaluate(ref, &arg, 1, NULL, &want));
    ASSERT_OK(ot_module_finalize(opt));
    ASSERT_OK(ot_pass_cse(opt, NULL));
    ASSERT_OK(ot_pass_dce(opt, NULL));
    ASSERT_OK(ot_evaluate(opt, &arg, 1, NULL, &got));
    EXPECT_TRUE(ot_value_equal(&want, &got));
    ot_value_release(&arg);
    ot_value_release(&want);
    ot_value_release(&got);
    ot_module_free(ref);
    ot_module_free(opt);
}

/* ---- algebraic simplification ---- */

/* Builds root = f(x) in a fresh module, runs simplify + dce, returns the root's opcode after. */
typedef ot_instr *(*build_fn)(ot_computation *c, ot_instr *x);

static ot_opcode simplified_root(ot_dtype t, build_fn f, bool *to_param) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape s = mat2(t, 2, 2);
    ot_instr *x = ot_build_parameter(c, 0, s, "x");
    ot_computation_set_root(c, f(c, x));
    ot_opcode op = OT_OP_INVALID;
    if (ot_module_finalize(m) == OT_OK && ot_pass_simplify(m, NULL) == OT_OK &&
        ot_pass_dce(m, NULL) == OT_OK && ot_module_verify(m) == OT_OK) {
        op = c->root->opcode;
        *to_param = c->root == x;
    }
    ot_module_free(m);
    return op;
}

static ot_instr *f_add_pzero(ot_computation *c, ot_instr *x) {
    return ot_build_binary(c, OT_OP_ADD, x, fconst(c, 0.0, x->shape.array));
}
static ot_instr *f_add_nzero(ot_computation *c, ot_instr *x) {
    return ot_build_binary(c, OT_OP_ADD, fconst(c, -0.0, x->shape.array), x);
}
static ot_instr *f_sub_zero(ot_computation *c, ot_instr *x) {
    return ot_build_binary(c, OT_OP_SUBTRACT, x, fconst(c, 0.0, x->shape.array));
}
static ot_instr *f_sub_self(ot_computation *c, ot_instr *x) {
    return ot_build_binary(c, OT_OP_SUBTRACT, x, x);
}
static ot_instr *f_mul_one(ot_computation *c, ot_instr *x) {
    return ot_build_binary(c, OT_OP_MULTIPLY, fconst(c, 1.0, x->shape.array), x);
}
static ot_instr *f_mul_zero(ot_computation *c, ot_instr *x) {
    return ot_build_binary(c, OT_OP_MULTIPLY, x, fconst(c, 0.0, x->shape.array));
}
static ot_instr *f_div_four(ot_computation *c, ot_instr *x) {
    return ot_build_binary(c, OT_OP_DIVIDE, x, fconst(c, 4.0, x->shape.array));
}
static ot_instr *f_div_three(ot_computation *c, ot_instr *x) {
    return ot_build_binary(c, OT_OP_DIVIDE, x, fconst(c, 3.0, x->shape.array));
}
static ot_instr *f_neg_neg(ot_computation *c, ot_instr *x) {
    return ot_build_unary(c, OT_OP_NEGATE, ot_build_unary(c, OT_OP_NEGATE, x));
}
static ot_instr *f_not_not(ot_computation *c, ot_instr *x) {
    return ot_build_unary(c, OT_OP_NOT, ot_build_unary(c, OT_OP_NOT, x));
}
static ot_instr *f_convert_same(ot_computation *c, ot_instr *x) {
    return ot_build_convert(c, x, x->shape.array.dtype);
}
static ot_instr *f_transpose_twice(ot_computation *c, ot_instr *x) {
    int64_t p[] = {1, 0};
    return ot_build_transpose(c, ot_build_transpose(c, x, p, 2), p, 2);
}
static ot_instr *f_reshape_twice(ot_computation *c, ot_instr *x) {
    ot_shape a, b;
    ot_shape_make(&a, x->shape.array.dtype, 1, (int64_t[]){4});
    ot_shape_make(&b, x->shape.array.dtype, 3, (int64_t[]){1, 2, 2});
    return ot_build_reshape(c, ot_build_reshape(c, x, a), b);
}
static ot_instr *f_reshape_back(ot_computation *c, ot_instr *x) {
    ot_shape a;
    ot_shape_make(&a, x->shape.array.dtype, 1, (int64_t[]){4});
    return ot_build_reshape(c, ot_build_reshape(c, x, a), x->shape.array);
}
static ot_instr *f_broadcast_twice(ot_computation *c, ot_instr *x) {
    ot_shape a, b;
    ot_shape_make(&a, x->shape.array.dtype, 3, (int64_t[]){3, 2, 2});
    ot_shape_make(&b, x->shape.array.dtype, 4, (int64_t[]){5, 3, 2, 2});
    return ot_build_broadcast(c, ot_build_broadcast(c, x, a, (int64_t[]){1, 2}, 2), b,
                              (int64_t[]){1, 2, 3}, 3);
}
static ot_instr *f_full_slice(ot_computation *c, ot_instr *x) {
    return ot_build_slice(c, x, (int64_t[]){0, 0}, (int64_t[]){2, 2}, (int64_t[]){1, 1});
}
static ot_instr *f_part_slice(ot_computation *c, ot_instr *x) {
    return ot_build_slice(c, x, (int64_t[]){0, 0}, (int64_t[]){1, 2}, (int64_t[]){1, 1});
}
static ot_instr *f_select_true(ot_computation *c, ot_instr *x) {
    ot_shape ps = x->shape.array;
    ps.dtype = OT_PRED;
    ot_instr *y = ot_build_unary(c, OT_OP_NEGATE, x);
    return ot_build_select(c, bcast(c, ot_build_constant_scalar(c, OT_PRED, 1), ps), x, y);
}
static ot_instr *f_select_same(ot_computation *c, ot_instr *x) {
    ot_shape ps = x->shape.array;
    ps.dtype = OT_PRED;
    ot_instr *pp = ot_build_compare(c, x, x, OT_CMP_LT, OT_CMP_TYPE_DEFAULT);
    (void)ps;
    return ot_build_select(c, pp, x, x);
}

static void test_simplify(void) {
    bool tp = false;
    /* float: x + (+0.0) stays (it turns -0.0 into +0.0); x + (-0.0) is x */
    EXPECT_INT_EQ(simplified_root(OT_F32, f_add_pzero, &tp), OT_OP_ADD);
    EXPECT_INT_EQ(simplified_root(OT_F32, f_add_nzero, &tp), OT_OP_PARAMETER);
    EXPECT_INT_EQ(simplified_root(OT_S32, f_add_pzero, &tp), OT_OP_PARAMETER);
    EXPECT_INT_EQ(simplified_root(OT_F32, f_sub_zero, &tp), OT_OP_PARAMETER);
    /* x - x and x * 0 are never folded for floats (NaN, inf, -0.0) */
    EXPECT_INT_EQ(simplified_root(OT_F32, f_sub_self, &tp), OT_OP_SUBTRACT);
    EXPECT_INT_EQ(simplified_root(OT_F32, f_mul_zero, &tp), OT_OP_MULTIPLY);
    EXPECT_INT_EQ(simplified_root(OT_F32, f_mul_one, &tp), OT_OP_PARAMETER);
    EXPECT_INT_EQ(simplified_root(OT_S32, f_mul_one, &tp), OT_OP_PARAMETER);
    /* division by a power of two becomes a multiply; by 3 it stays; integers never */
    EXPECT_INT_EQ(simplified_root(OT_F32, f_div_four, &tp), OT_OP_MULTIPLY);
    EXPECT_INT_EQ(simplified_root(OT_F64, f_div_four, &tp), OT_OP_MULTIPLY);
    EXPECT_INT_EQ(simplified_root(OT_F32, f_div_three, &tp), OT_OP_DIVIDE);
    EXPECT_INT_EQ(simplified_root(OT_S32, f_div_four, &tp), OT_OP_DIVIDE);
    EXPECT_INT_EQ(simplified_root(OT_F32, f_neg_neg, &tp), OT_OP_PARAMETER);
    EXPECT_INT_EQ(simplified_root(OT_PRED, f_not_not, &tp), OT_OP_PARAMETER);
    EXPECT_INT_EQ(simplified_root(OT_F32, f_convert_same, &tp), OT_OP_PARAMETER);
    EXPECT_INT_EQ(simplified_root(OT_F32, f_transpose_twice, &tp), OT_OP_PARAMETER);
    EXPECT_INT_EQ(simplified_root(OT_F32, f_reshape_back, &tp), OT_OP_PARAMETER);
    EXPECT_INT_EQ(simplified_root(OT_F32, f_full_slice, &tp), OT_OP_PARAMETER);
    EXPECT_INT_EQ(simplified_root(OT_F32, f_part_slice, &tp), OT_OP_SLICE);
    EXPECT_INT_EQ(simplified_root(OT_F32, f_select_true, &tp), OT_OP_PARAMETER);
    EXPECT_INT_EQ(simplified_root(OT_F32, f_select_same, &tp), OT_OP_PARAMETER);
    EXPECT_TRUE(tp);

    /* reshape(reshape(x)) is one reshape of x; broadcast(broadcast(x)) one broadcast of x */
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_instr *x = ot_build_parameter(c, 0, mat2(OT_F32, 2, 2), "x");
    ot_instr *r = f_reshape_twice(c, x);
    ot_instr *b = f_broadcast_twice(c, x);
    ot_instr *outs[] = {r, b};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 2));
    ASSERT_OK(ot_module_finalize(m));
    ASSERT_OK(ot_pass_simplify(m, NULL));
    ASSERT_OK(ot_pass_dce(m, NULL));
    ASSERT_OK(ot_module_verify(m));
    EXPECT_INT_EQ(count_op(c, OT_OP_RESHAPE), 1);
    EXPECT_INT_EQ(count_op(c, OT_OP_BROADCAST), 1);
    EXPECT_TRUE(c->root->operands[0]->operands[0] == x);
    const ot_instr *bb = c->root->operands[1];
    EXPECT_TRUE(bb->operands[0] == x);
    EXPECT_INT_EQ(bb->attrs->dims[0], 2);
    EXPECT_INT_EQ(bb->attrs->dims[1], 3);
    ot_module_free(m);
}

/* ---- gather through elementwise producers (simplify) ---- */

static const char *k_gather_take_along =
    "HloModule take_along\n"
    "mx {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = f32[] maximum(a, b)\n}\n"
    "ad {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
    "ENTRY main {\n"
    "  x = f32[6,37] parameter(0)\n"
    "  l = s32[6,1,1] parameter(1)\n"
    "  ninf = f32[] constant(-inf)\n"
    "  m = f32[6] reduce(x, ninf), dimensions={1}, to_apply=mx\n"
    "  bm = f32[6,37] broadcast(m), dimensions={0}\n"
    "  s = f32[6,37] subtract(x, bm)\n"
    "  e = f32[6,37] exponential(s)\n"
    "  zero = f32[] constant(0)\n"
    "  se = f32[6] reduce(e, zero), dimensions={1}, to_apply=ad\n"
    "  lse = f32[6] log(se)\n"
    "  bl = f32[6,37] broadcast(lse), dimensions={0}\n"
    "  ls = f32[6,37] subtract(s, bl)\n"
    "  ROOT g = f32[6,1] gather(ls, l), offset_dims={}, collapsed_slice_dims={1}, "
    "start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, "
    "index_vector_dim=2, slice_sizes={1,1}\n"
    "}\n";

static const char *k_gather_windows =
    "HloModule gather_windows\n"
    "ENTRY main {\n"
    "  x = f32[10,4] parameter(0)\n"
    "  i = s32[5,2] parameter(1)\n"
    "  w = f32[10] parameter(2)\n"
    "  z = f32[] constant(0)\n"
    "  bz = f32[10,4] broadcast(z), dimensions={}\n"
    "  p = pred[10,4] compare(x, bz), direction=GT\n"
    "  bw = f32[10,4] broadcast(w), dimensions={0}\n"
    "  y = f32[10,4] multiply(x, bw)\n"
    "  nx = f32[10,4] negate(x)\n"
    "  sel = f32[10,4] select(p, y, nx)\n"
    "  lo = f32[] constant(-3)\n"
    "  hi = f32[] constant(3)\n"
    "  cl = f32[10,4] clamp(lo, sel, hi)\n"
    "  cv = f64[10,4] convert(cl)\n"
    "  ROOT g = f64[5,2,3] gather(cv, i), offset_dims={1,2}, collapsed_slice_dims={}, "
    "start_index_map={0,1}, index_vector_dim=1, slice_sizes={2,3}\n"
    "}\n";

/* slogdet's diagonal as JAX lowers it: the LU masked with NaN per matrix (a per-matrix flag
 * broadcast along the batch, a window dimension the gather takes whole), then its diagonal
 * gathered: the select runs on the diagonal only */
static const char *k_gather_diag =
    "HloModule gather_diag\n"
    "ENTRY main {\n"
    "  x = f32[3,5,5] parameter(0)\n"
    "  v = f32[3] parameter(1)\n"
    "  i = s32[5,2] parameter(2)\n"
    "  z = f32[] constant(0)\n"
    "  bz = f32[3] broadcast(z), dimensions={}\n"
    "  ok = pred[3] compare(v, bz), direction=GE\n"
    "  bok = pred[3,5,5] broadcast(ok), dimensions={0}\n"
    "  nan = f32[] constant(nan)\n"
    "  bnan = f32[3,5,5] broadcast(nan), dimensions={}\n"
    "  m = f32[3,5,5] select(bok, x, bnan)\n"
    "  ROOT g = f32[3,5] gather(m, i), offset_dims={0}, collapsed_slice_dims={1,2}, "
    "start_index_map={1,2}, index_vector_dim=1, slice_sizes={3,1,1}\n"
    "}\n";

/* the same flag broadcast along a window dimension the gather takes in part: not rewritten */
static const char *k_gather_diag_part =
    "HloModule gather_diag_part\n"
    "ENTRY main {\n"
    "  x = f32[3,5,5] parameter(0)\n"
    "  v = f32[3] parameter(1)\n"
    "  i = s32[5,2] parameter(2)\n"
    "  z = f32[] constant(0)\n"
    "  bz = f32[3] broadcast(z), dimensions={}\n"
    "  ok = pred[3] compare(v, bz), direction=GE\n"
    "  bok = pred[3,5,5] broadcast(ok), dimensions={0}\n"
    "  nan = f32[] constant(nan)\n"
    "  bnan = f32[3,5,5] broadcast(nan), dimensions={}\n"
    "  m = f32[3,5,5] select(bok, x, bnan)\n"
    "  ROOT g = f32[2,5] gather(m, i), offset_dims={0}, collapsed_slice_dims={1,2}, "
    "start_index_map={1,2}, index_vector_dim=1, slice_sizes={2,1,1}\n"
    "}\n";

/* exp(x) has another user and the gather reads more than an eighth of it: not rewritten */
static const char *k_gather_shared =
    "HloModule gather_shared\n"
    "ENTRY main {\n"
    "  x = f32[4,4] parameter(0)\n"
    "  i = s32[5,2] parameter(1)\n"
    "  e = f32[4,4] exponential(x)\n"
    "  g = f32[5,2,3] gather(e, i), offset_dims={1,2}, collapsed_slice_dims={}, "
    "start_index_map={0,1}, index_vector_dim=1, slice_sizes={2,3}\n"
    "  ROOT t = (f32[4,4], f32[5,2,3]) tuple(e, g)\n"
    "}\n";

/* the gather has more elements than exp(x): not rewritten (exp would run on more elements) */
static const char *k_gather_grows =
    "HloModule gather_grows\n"
    "ENTRY main {\n"
    "  x = f32[2,2] parameter(0)\n"
    "  i = s32[10,1] parameter(1)\n"
    "  e = f32[2,2] exponential(x)\n"
    "  ROOT g = f32[10,2] gather(e, i), offset_dims={1}, collapsed_slice_dims={0}, "
    "start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}\n"
    "}\n";

/* Parses text, fills the f32 parameters (NaN, infinities, -0 and subnormals among them) and the
 * s32 indices from idx (out-of-range starts included: gather clamps them), runs simplify + DCE
 * and checks that the result is the same, bit for bit, and how many gathers still read an
 * elementwise op. */
static void check_gather_rewrite(const char *text, const int32_t *idx, int nidx,
                                 int want_on_elementwise) {
    ot_module *m = NULL, *m2 = NULL;
    ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &m));
    ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &m2));
    ot_computation *entry = ot_module_entry(m);
    int np = entry->nparams;
    ot_value args[4];
    static const uint32_t special[] = {0x7fc00000u, 0xff800000u, 0x7f800000u, 0x80000000u,
                                       0x00000001u, 0x80400000u, 0x7f7fffffu, 0x42b17218u};
    uint64_t seed = 99;
    for (int k = 0; k < np; k++) {
        ASSERT_OK(ot_value_alloc_array(&args[k], &entry->params[k]->shape.array));
        ot_tensor *t = &args[k].array;
        int64_t ne = ot_shape_numel_unchecked(&t->shape);
        for (int64_t j = 0; j < ne; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            if (t->shape.dtype == OT_S32) {
                ((int32_t *)t->data)[j] = idx[j % nidx];
            } else if ((seed >> 60) == 0) {
                memcpy((float *)t->data + j, &special[(seed >> 40) % 8], 4);
            } else {
                ((float *)t->data)[j] = (float)((int)((seed >> 33) % 2001) - 1000) / 64.0f;
            }
        }
    }
    ot_value ref = ot_value_empty(), got = ot_value_empty();
    ASSERT_OK(ot_evaluate(m, args, np, NULL, &ref));
    ASSERT_OK(ot_module_finalize(m2));
    ASSERT_OK(ot_pass_simplify(m2, NULL));
    ASSERT_OK(ot_pass_dce(m2, NULL));
    ASSERT_OK(ot_module_verify(m2));
    int gathers = 0, on_elementwise = 0;
    for (const ot_instr *i = ot_module_entry(m2)->first; i; i = i->next) {
        if (i->opcode != OT_OP_GATHER) continue;
        gathers++;
        on_elementwise += ot_opcode_is_elementwise(i->operands[0]->opcode);
    }
    EXPECT_TRUE(gathers > 0);
    EXPECT_INT_EQ(on_elementwise, want_on_elementwise);
    ASSERT_OK(ot_evaluate(m2, args, np, NULL, &got));
    EXPECT_TRUE(ot_value_equal(&ref, &got));
    ot_value_release(&ref);
    ot_value_release(&got);
    for (int k = 0; k < np; k++) ot_value_release(&args[k]);
    ot_module_free(m);
    ot_module_free(m2);
}

/* reduce-window(pad(y, v), init) → reduce-window(y, init) with the pad in the window (simplify):
 * applied exactly when v and init are the same zero and the reducer adds; the result must be
 * the reference's bits with -0, NaNs, infinities and subnormals in y (a quarter of y is -0). */
static void check_pad_window(const char *dt, const char *pv, const char *init, const char *red,
                             const char *pad, const char *yd, const char *pd, const char *od,
                             const char *win, bool twice, int want_pads) {
    char text[2048];
    snprintf(text, sizeof text,
             "HloModule pw\nr {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
             "  ROOT c = %s[] %s(a, b)\n}\nENTRY main {\n  y = %s[%s] parameter(0)\n"
             "  v = %s[] constant(%s)\n  z = %s[] constant(%s)\n"
             "  p = %s[%s] pad(y, v), padding=%s\n"
             "  w = %s[%s] reduce-window(p, z), window={%s}, to_apply=r\n"
             "  n = %s[%s] negate(p)\n"
             "  ROOT t = (%s[%s], %s[%s]) tuple(w, %s)\n}\n",
             dt, dt, dt, red, dt, yd, dt, pv, dt, init, dt, pd, pad, dt, od, win, dt, pd, dt, od,
             dt, twice ? pd : od, twice ? "n" : "w");
    if (!twice) { /* no second reader of the pad */
        char *n = strstr(text, "  n = ");
        char *e = n ? strchr(n, '\n') : NULL;
        if (e) memmove(n, e + 1, strlen(e + 1) + 1);
    }
    ot_module *m = NULL, *m2 = NULL;
    ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &m));
    ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &m2));
    ot_computation *entry = ot_module_entry(m);
    ot_value arg;
    ASSERT_OK(ot_value_alloc_array(&arg, &entry->params[0]->shape.array));
    ot_tensor *t = &arg.array;
    int64_t ne = ot_shape_numel_unchecked(&t->shape);
    static const uint32_t special[] = {0x7fc00000u, 0xff800000u, 0x7f800000u, 0x00000001u,
                                       0x80400000u, 0x7f7fffffu, 0x42b17218u, 0x80000000u};
    uint64_t seed = 7;
    for (int64_t j = 0; j < ne; j++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int r = (int)(seed >> 59);
        double val = (double)((int)((seed >> 33) % 2001) - 1000) / 64.0;
        if (t->shape.dtype == OT_S32) {
            ((int32_t *)t->data)[j] = (int32_t)(val * 64);
        } else if (t->shape.dtype == OT_F64) {
            ((double *)t->data)[j] = r < 8 ? -0.0 : val;
        } else if (r < 8) {
            ((float *)t->data)[j] = -0.0f;
        } else if (r == 8) {
            memcpy((float *)t->data + j, &special[(seed >> 40) % 8], 4);
        } else {
            ((float *)t->data)[j] = (float)val;
        }
    }
    ot_value ref = ot_value_empty(), got = ot_value_empty();
    ASSERT_OK(ot_evaluate(m, &arg, 1, NULL, &ref));
    ASSERT_OK(ot_module_finalize(m2));
    ASSERT_OK(ot_pass_simplify(m2, NULL));
    ASSERT_OK(ot_pass_dce(m2, NULL));
    ASSERT_OK(ot_module_verify(m2));
    int pads = count_op(ot_module_entry(m2), OT_OP_PAD);
    if (pads != want_pads) fprintf(stderr, "%s\n", text);
    EXPECT_INT_EQ(pads, want_pads);
    ot_module *m3 = NULL; /* a clone is in post order (the rewrite appended the new op) */
    ASSERT_OK(ot_module_clone(m2, &m3));
    ASSERT_OK(ot_evaluate(m3, &arg, 1, NULL, &got));
    EXPECT_TRUE(ot_value_equal(&ref, &got));
    ot_module_free(m3);
    ot_value_release(&ref);
    ot_value_release(&got);
    ot_value_release(&arg);
    ot_module_free(m);
    ot_module_free(m2);
}

static void test_simplify_pad_window(void) {
    /* JAX's average-pool gradient: interior padding and a low edge as base dilation and padding */
    static const char *const avg_pad = "0_0_0x1_0_1x1_0_1x0_0_0";
    static const char *const avg_win = "size=1x2x2x1";
    check_pad_window("f32", "0", "0", "add", avg_pad, "3,6,5,4", "3,12,10,4", "3,11,9,4", avg_win,
                     false, 0);
    check_pad_window("f32", "-0", "-0", "add", avg_pad, "3,6,5,4", "3,12,10,4", "3,11,9,4", avg_win,
                     false, 0);
    check_pad_window("f64", "0", "0", "add", avg_pad, "3,6,5,4", "3,12,10,4", "3,11,9,4", avg_win,
                     false, 0);
    check_pad_window("s32", "0", "0", "add", avg_pad, "3,6,5,4", "3,12,10,4", "3,11,9,4", avg_win,
                     false, 0);
    /* edges on both sides beside the window's own padding, strides and window dilation */
    check_pad_window("f32", "0", "0", "add", "2_1x0_3x1_1", "5,4,3", "8,7,5", "4,3,5",
                     "size=3x2x2 stride=2x2x1 pad=1_1x0_1x0_1 rhs_dilate=1x2x1", false, 0);
    /* not applied: another pad value, another init, a non-add reducer, negative edges, a pad
     * read twice */
    check_pad_window("f32", "0", "-0", "add", avg_pad, "3,6,5,4", "3,12,10,4", "3,11,9,4", avg_win,
                     false, 1);
    check_pad_window("f32", "1", "1", "add", avg_pad, "3,6,5,4", "3,12,10,4", "3,11,9,4", avg_win,
                     false, 1);
    check_pad_window("f32", "0", "0", "maximum", avg_pad, "3,6,5,4", "3,12,10,4", "3,11,9,4",
                     avg_win, false, 1);
    check_pad_window("f32", "0", "0", "add", "-1_2x0_0", "6,5", "7,5", "6,4", "size=2x2", false, 1);
    check_pad_window("f32", "0", "0", "add", avg_pad, "3,6,5,4", "3,12,10,4", "3,11,9,4", avg_win,
                     true, 1);
}

/* reverse(scan(reverse(x))) along the scan's dim → the opposite scan of x (simplify): applied
 * to prefix and suffix scans (f32 sum, f64 product, s32 maximum) along the last dim and dim 0,
 * bit-identical to the module as written (values of many magnitudes: the fold order shows);
 * not applied where a reverse flips another dim or the scan has a second reader. want: the
 * reverses left. */
static void check_unflip_scan(const char *dt, const char *red, const char *dims, const char *win,
                              const char *pad, int rdim_in, int rdim_out, bool twice,
                              int want_reverses) {
    char text[2048];
    snprintf(text, sizeof text,
             "HloModule us\nr {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
             "  ROOT c = %s[] %s(a, b)\n}\nENTRY main {\n  x = %s[%s] parameter(0)\n"
             "  z = %s[] constant(%s)\n  f = %s[%s] reverse(x), dimensions={%d}\n"
             "  w = %s[%s] reduce-window(f, z), window={size=%s pad=%s}, to_apply=r\n"
             "  g = %s[%s] reverse(w), dimensions={%d}\n"
             "  ROOT t = (%s[%s], %s[%s]) tuple(g, %s)\n}\n",
             dt, dt, dt, red, dt, dims, dt, !strcmp(red, "multiply") ? "1" : "0", dt, dims, rdim_in,
             dt, dims, win, pad, dt, dims, rdim_out, dt, dims, dt, dims, twice ? "w" : "g");
    ot_module *m = NULL, *m2 = NULL;
    ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &m));
    ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &m2));
    ot_value arg;
    ASSERT_OK(ot_value_alloc_array(&arg, &ot_module_entry(m)->params[0]->shape.array));
    ot_tensor *t = &arg.array;
    uint64_t seed = 11;
    for (int64_t j = 0, ne = ot_shape_numel_unchecked(&t->shape); j < ne; j++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int v = (int)((seed >> 33) % 2001) - 1000, e = (int)((seed >> 20) % 24) - 16;
        if (t->shape.dtype == OT_S32)
            ((int32_t *)t->data)[j] = v;
        else if (t->shape.dtype == OT_F64)
            ((double *)t->data)[j] = 1.0 + v / 65536.0;
        else
            ((float *)t->data)[j] = ldexpf((float)v, e);
    }
    ot_value ref = ot_value_empty(), got = ot_value_empty();
    ASSERT_OK(ot_evaluate(m, &arg, 1, NULL, &ref));
    ASSERT_OK(ot_module_finalize(m2));
    ASSERT_OK(ot_pass_simplify(m2, NULL));
    ASSERT_OK(ot_pass_dce(m2, NULL));
    ASSERT_OK(ot_module_verify(m2));
    int revs = count_op(ot_module_entry(m2), OT_OP_REVERSE);
    if (revs != want_reverses) fprintf(stderr, "%s\n", text);
    EXPECT_INT_EQ(revs, want_reverses);
    ot_module *m3 = NULL;
    ASSERT_OK(ot_module_clone(m2, &m3));
    ASSERT_OK(ot_evaluate(m3, &arg, 1, NULL, &got));
    EXPECT_TRUE(ot_value_equal(&ref, &got));
    ot_module_free(m3);
    ot_value_release(&ref);
    ot_value_release(&got);
    ot_value_release(&arg);
    ot_module_free(m);
    ot_module_free(m2);
}

/* Loop-invariant code motion: a while body whose state (i, acc, v, idx) passes v through. Per
 * iteration it adds exp(v) (real work on an invariant: hoisted), multiplies by broadcast(v)
 * (cheap and fused: stays) and takes an argmax whose index operand is broadcast(iota) (cheap,
 * but the variadic reduce would materialize it: hoisted). variant: v changes every iteration,
 * so nothing moves. shared: a second loop calls the same body, whose signature stays. Results
 * equal the module as written. */
static void check_licm(bool variant, bool shared, int want_state, int want_exp_in_body,
                       int want_iota_in_body) {
    char text[4096];
    snprintf(text, sizeof text,
             "HloModule licm\n"
             "am {\n  a = f32[] parameter(0)\n  ai = s32[] parameter(1)\n"
             "  b = f32[] parameter(2)\n  bi = s32[] parameter(3)\n"
             "  ge = pred[] compare(a, b), direction=GE\n  m = f32[] select(ge, a, b)\n"
             "  k = s32[] select(ge, ai, bi)\n  ROOT t = (f32[], s32[]) tuple(m, k)\n}\n"
             "cond {\n  p = (s32[], f32[4,6], f32[6], s32[4,6]) parameter(0)\n"
             "  i = s32[] get-tuple-element(p), index=0\n  n = s32[] constant(5)\n"
             "  ROOT lt = pred[] compare(i, n), direction=LT\n}\n"
             "body {\n  p = (s32[], f32[4,6], f32[6], s32[4,6]) parameter(0)\n"
             "  i = s32[] get-tuple-element(p), index=0\n"
             "  acc = f32[4,6] get-tuple-element(p), index=1\n"
             "  v = f32[6] get-tuple-element(p), index=2\n  one = s32[] constant(1)\n"
             "  i1 = s32[] add(i, one)\n  e = f32[6] exponential(v)\n"
             "  eb = f32[4,6] broadcast(e), dimensions={1}\n"
             "  vb = f32[4,6] broadcast(v), dimensions={1}\n  mul = f32[4,6] multiply(acc, vb)\n"
             "  acc1 = f32[4,6] add(mul, eb)\n"
             "  c3 = f32[4,6,6] broadcast(acc), dimensions={0,2}\n"
             "  io = s32[6] iota(), iota_dimension=0\n"
             "  ib = s32[4,6,6] broadcast(io), dimensions={1}\n"
             "  ninf = f32[] constant(-inf)\n  z = s32[] constant(0)\n"
             "  r = (f32[4,6], s32[4,6]) reduce(c3, ib, ninf, z), dimensions={1}, to_apply=am\n"
             "  idx = s32[4,6] get-tuple-element(r), index=1\n"
             "  vn = f32[6] negate(v)\n"
             "  ROOT t = (s32[], f32[4,6], f32[6], s32[4,6]) tuple(i1, acc1, %s, idx)\n}\n"
             "ENTRY main {\n  a = f32[4,6] parameter(0)\n  v = f32[6] parameter(1)\n"
             "  z = s32[] constant(0)\n  zi = s32[4,6] broadcast(z), dimensions={}\n"
             "  s = (s32[], f32[4,6], f32[6], s32[4,6]) tuple(z, a, v, zi)\n"
             "  w = (s32[], f32[4,6], f32[6], s32[4,6]) while(s), condition=cond, body=body\n"
             "  %s\n  acc = f32[4,6] get-tuple-element(w), index=1\n"
             "  idx = s32[4,6] get-tuple-element(w), index=3\n"
             "  ROOT o = (f32[4,6], s32[4,6]) tuple(acc, idx)\n}\n",
             variant ? "vn" : "v",
             shared ? "w2 = (s32[], f32[4,6], f32[6], s32[4,6]) while(w), condition=cond, body=body"
                    : "");
    ot_module *m = NULL, *m2 = NULL;
    ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &m));
    ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &m2));
    ot_value args[2];
    for (int k = 0; k < 2; k++) {
        ASSERT_OK(ot_value_alloc_array(&args[k], &ot_module_entry(m)->params[k]->shape.array));
        float *d = args[k].array.data;
        for (int64_t j = 0, ne = ot_shape_numel_unchecked(&args[k].array.shape); j < ne; j++)
            d[j] = (float)((j * 7 + k * 3) % 11) / 8.0f - 0.6f;
    }
    ot_value ref = ot_value_empty(), got = ot_value_empty();
    ASSERT_OK(ot_evaluate(m, args, 2, NULL, &ref));
    ASSERT_OK(ot_module_finalize(m2));
    bool changed = false;
    ASSERT_OK(ot_pass_licm(m2, &changed));
    ASSERT_OK(ot_module_verify(m2));
    EXPECT_TRUE(changed == (want_state != 4));
    ASSERT_OK(ot_pass_simplify(m2, NULL));
    ASSERT_OK(ot_pass_dce(m2, NULL));
    ASSERT_OK(ot_module_verify(m2));
    const ot_computation *body = NULL;
    for (const ot_instr *i = ot_module_entry(m2)->first; i; i = i->next)
        if (i->opcode == OT_OP_WHILE) body = i->called[1];
    ASSERT_TRUE(body != NULL);
    EXPECT_INT_EQ(body->params[0]->shape.ntuple, want_state);
    EXPECT_INT_EQ(count_op(body, OT_OP_EXP), want_exp_in_body);
    EXPECT_INT_EQ(count_op(body, OT_OP_IOTA), want_iota_in_body);
    EXPECT_INT_EQ(count_op(body, OT_OP_MULTIPLY), 1);
    ot_module *m3 = NULL; /* in definition order, as the evaluator reads it */
    ASSERT_OK(ot_module_clone(m2, &m3));
    ASSERT_OK(ot_evaluate(m3, args, 2, NULL, &got));
    EXPECT_TRUE(ot_value_equal(&ref, &got));
    ot_value_release(&got);
    ot_module_free(m3);
    /* the whole pipeline, compiled loops included, gives the same values */
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, NULL, &e));
    EXPECT_OK(ot_evaluate(ot_executable_module(e), args, 2, NULL, &got));
    EXPECT_TRUE(ot_value_equal(&ref, &got));
    ot_executable_free(e);
    ot_value_release(&got);
    ot_value_release(&ref);
    for (int k = 0; k < 2; k++) ot_value_release(&args[k]);
    ot_module_free(m);
    ot_module_free(m2);
}

static void test_licm(void) {
    check_licm(false, false, 6, 0, 0); /* broadcast(exp(v)) and broadcast(iota) move */
    check_licm(true, false, 5, 1, 0);  /* v changes: only broadcast(iota) is invariant */
    check_licm(false, true, 4, 1, 1);  /* the body is shared by two loops */
}

static void test_simplify_unflip_scan(void) {
    /* flip(cumsum(flip(x))): JAX's returns-to-go, a prefix scan between flips of its dim */
    check_unflip_scan("f32", "add", "5,700", "1x700", "0_0x699_0", 1, 1, false, 0);
    check_unflip_scan("f32", "add", "300,4", "300x1", "299_0x0_0", 0, 0, false, 0);
    /* flipped suffix scans: the prefix scan */
    check_unflip_scan("f64", "multiply", "3,400", "1x400", "0_0x0_399", 1, 1, false, 0);
    check_unflip_scan("s32", "maximum", "64,9", "64x1", "0_63x0_0", 0, 0, false, 0);
    /* not applied: a reverse of another dim, a scan read twice */
    check_unflip_scan("f32", "add", "5,700", "1x700", "0_0x699_0", 0, 1, false, 2);
    check_unflip_scan("f32", "add", "5,700", "1x700", "0_0x699_0", 1, 1, true, 2);
}

static void test_simplify_gather(void) {
    /* take_along_axis of a log-softmax as JAX lowers it (batched gather): the gather moves to
     * x, the subtractions run on one element per row, broadcasts of the row values become
     * broadcasts to the gathered shape */
    const int32_t rows[] = {-5, 40, 36, 0, INT32_MIN, 17};
    check_gather_rewrite(k_gather_take_along, rows, 6, 0);
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(k_gather_take_along, strlen(k_gather_take_along), NULL, &m));
    ASSERT_OK(ot_module_finalize(m));
    ASSERT_OK(ot_pass_simplify(m, NULL));
    ASSERT_OK(ot_pass_dce(m, NULL));
    ot_computation *c = ot_module_entry(m);
    EXPECT_INT_EQ(count_op(c, OT_OP_GATHER), 1);
    for (const ot_instr *i = c->first; i; i = i->next)
        if (i->opcode == OT_OP_GATHER) EXPECT_TRUE(i->operands[0] == c->params[0]);
    EXPECT_INT_EQ(c->root->opcode, OT_OP_SUBTRACT);
    EXPECT_INT_EQ(c->root->shape.array.rank, 2);
    EXPECT_INT_EQ(c->root->shape.array.dims[0], 6);
    ot_module_free(m);
    /* windows, clamped starts, compare/select/clamp with scalar bounds/convert: pushed down to
     * x * broadcast(w), whose broadcast runs along a non-batching dimension (gathering it would
     * materialize it at x's size), so that multiply stays under its gather */
    const int32_t starts[] = {-1, -1, 9, 3, 8, 1, 100, -100, 3, INT32_MAX};
    check_gather_rewrite(k_gather_windows, starts, 10, 1);
    /* not applied where it would add work */
    check_gather_rewrite(k_gather_shared, starts, 10, 1);
    check_gather_rewrite(k_gather_grows, starts, 10, 1);
    /* a broadcast along a window dimension taken whole is gathered as a broadcast */
    const int32_t diag[] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, -2, 7};
    check_gather_rewrite(k_gather_diag, diag, 12, 0);
    check_gather_rewrite(k_gather_diag_part, diag, 12, 1);
}

/* ---- gather / scatter indices given a unit index vector dim by a reshape ----
 * JAX's `x[ids]` and `.at[ids]` reshape ids [n] to [n, 1] with index_vector_dim 1; simplify
 * reads ids itself (index_vector_dim = its rank: HLO's implied unit dim), with no copy kernel.
 * Each module is simplified (+ DCE) and evaluated against the original on ids with negative and
 * past-the-end values; want: the reshapes left. */
static void check_indices_reshape(const char *text, int want_reshapes) {
    ot_module *m = NULL, *m2 = NULL;
    ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &m));
    ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &m2));
    ot_computation *entry = ot_module_entry(m);
    int np = entry->nparams;
    ot_value args[3], ref = ot_value_empty(), got = ot_value_empty();
    for (int k = 0; k < np; k++) {
        ASSERT_OK(ot_value_alloc_array(&args[k], &entry->params[k]->shape.array));
        int64_t n = ot_shape_numel_unchecked(&args[k].array.shape);
        for (int64_t e = 0; e < n; e++) {
            if (args[k].array.shape.dtype == OT_S32)
                ((int32_t *)args[k].array.data)[e] = (int32_t)((e * 7919) % 23) - 3;
            else
                ((float *)args[k].array.data)[e] = (float)((e * 31) % 17) - 8.0f;
        }
    }
    ASSERT_OK(ot_evaluate(m, args, np, NULL, &ref));
    ASSERT_OK(ot_module_finalize(m2));
    ASSERT_OK(ot_pass_simplify(m2, NULL));
    ASSERT_OK(ot_pass_dce(m2, NULL));
    ASSERT_OK(ot_module_verify(m2));
    ASSERT_OK(ot_evaluate(m2, args, np, NULL, &got));
    EXPECT_TRUE(ot_value_equal(&ref, &got));
    EXPECT_INT_EQ(count_op(ot_module_entry(m2), OT_OP_RESHAPE), want_reshapes);
    for (int k = 0; k < np; k++) ot_value_release(&args[k]);
    ot_value_release(&ref);
    ot_value_release(&got);
    ot_module_free(m);
    ot_module_free(m2);
}

static void test_simplify_indices_reshape(void) {
    /* segment_sum: scatter-add of rows at ids [n] -> [n, 1] */
    check_indices_reshape(
        "HloModule s\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n  u = f32[40,5] parameter(0)\n"
        "  i = s32[40] parameter(1)\n  z = f32[] constant(0)\n"
        "  x = f32[20,5] broadcast(z), dimensions={}\n  k = s32[40,1] reshape(i)\n"
        "  ROOT s = f32[20,5] scatter(x, k, u), update_window_dims={1}, inserted_window_dims={0}, "
        "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n",
        0);
    /* x[ids] of rows, ids [4, 10] -> [4, 10, 1] */
    check_indices_reshape(
        "HloModule g\nENTRY e {\n  x = f32[20,6] parameter(0)\n  i = s32[4,10] parameter(1)\n"
        "  k = s32[4,10,1] reshape(i)\n  ROOT g = f32[4,10,6] gather(x, k), offset_dims={2}, "
        "collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, "
        "slice_sizes={1,6}\n}\n",
        0);
    /* the unit dim is not the index vector dim: kept */
    check_indices_reshape(
        "HloModule g2\nENTRY e {\n  x = f32[20,6] parameter(0)\n  i = s32[10] parameter(1)\n"
        "  k = s32[10,1] reshape(i)\n  ROOT g = f32[10,1,6] gather(x, k), offset_dims={2}, "
        "collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, "
        "slice_sizes={1,6}\n}\n",
        1);
}

/* ---- transposes through reshapes that move no element, transposes of broadcasts ----
 * Each module is simplified (+ DCE) and compared bit for bit with the reference on the
 * original; then the transposes left and the largest one's element count are checked. */
static void check_transposes(const char *body, const char *xdims, int want_transposes,
                             int64_t want_largest) {
    char text[2048];
    snprintf(text, sizeof text, "HloModule tr\nENTRY main {\n  x = f32[%s] parameter(0)\n%s}\n",
             xdims, body);
    ot_module *m = NULL, *m2 = NULL;
    if (ot_hlo_parse(text, strlen(text), NULL, &m) != OT_OK ||
        ot_hlo_parse(text, strlen(text), NULL, &m2) != OT_OK) {
        OT_T_FAIL_("parse: %s", text);
        ot_module_free(m);
        return;
    }
    ot_computation *entry = ot_module_entry(m);
    ot_value arg, ref = ot_value_empty(), got = ot_value_empty();
    ASSERT_OK(ot_value_alloc_array(&arg, &entry->params[0]->shape.array));
    float *d = arg.array.data;
    for (int64_t k = 0; k < ot_shape_numel_unchecked(&arg.array.shape); k++) d[k] = (float)k;
    ASSERT_OK(ot_evaluate(m, &arg, 1, NULL, &ref));
    ASSERT_OK(ot_module_finalize(m2));
    ASSERT_OK(ot_pass_simplify(m2, NULL));
    ASSERT_OK(ot_pass_dce(m2, NULL));
    ASSERT_OK(ot_module_verify(m2));
    ot_module *m3 = NULL; /* a clone is in post order (a rewrite appends its new ops) */
    ASSERT_OK(ot_module_clone(m2, &m3));
    ASSERT_OK(ot_evaluate(m3, &arg, 1, NULL, &got));
    ot_module_free(m3);
    EXPECT_TRUE(ot_value_equal(&ref, &got));
    int n = 0;
    int64_t largest = 0;
    for (const ot_instr *i = ot_module_entry(m2)->first; i; i = i->next) {
        if (i->opcode != OT_OP_TRANSPOSE) continue;
        n++;
        int64_t ne = ot_shape_numel_unchecked(&i->shape.array);
        if (ne > largest) largest = ne;
    }
    EXPECT_INT_EQ(n, want_transposes);
    EXPECT_INT_EQ(largest, want_largest);
    ot_value_release(&arg);
    ot_value_release(&ref);
    ot_value_release(&got);
    ot_module_free(m);
    ot_module_free(m2);
}

static void test_simplify_transpose_reshape(void) {
    /* jnp.linalg.inv's chain after its triangular solves: both transposes cancel */
    check_transposes("  r = f32[3,4,1,5] reshape(x)\n"
                     "  t = f32[3,5,4,1] transpose(r), dimensions={0,3,1,2}\n"
                     "  s = f32[3,5,4] reshape(t)\n"
                     "  ROOT u = f32[3,4,5] transpose(s), dimensions={0,2,1}\n",
                     "3,4,5", 0, 0);
    /* two transposes around a size-1 insertion compose into one */
    check_transposes("  t = f32[4,3,5] transpose(x), dimensions={1,0,2}\n"
                     "  r = f32[4,1,3,5] reshape(t)\n"
                     "  ROOT u = f32[5,1,3,4] transpose(r), dimensions={3,1,2,0}\n",
                     "3,4,5", 1, 60);
    /* a transpose that only moves size-1 dims is a reshape */
    check_transposes("  ROOT u = f32[4,3,1,1] transpose(x), dimensions={1,2,0,3}\n", "1,4,3,1", 0,
                     0);
    /* one transpose behind a size-1 insertion that moves real dims: left as it is */
    check_transposes("  r = f32[3,1,4] reshape(x)\n"
                     "  ROOT u = f32[4,1,3] transpose(r), dimensions={2,1,0}\n",
                     "3,4", 1, 12);
    /* a reshape that regroups dims is not seen through */
    check_transposes("  t = f32[4,3] transpose(x), dimensions={1,0}\n"
                     "  r = f32[2,2,3] reshape(t)\n"
                     "  ROOT u = f32[3,2,2] transpose(r), dimensions={2,0,1}\n",
                     "3,4", 2, 12);
    /* transpose(broadcast(x)): the broadcast's source is transposed instead (20 elements, not
     * 60), or not at all where its dims stay in order */
    check_transposes("  b = f32[3,4,5] broadcast(x), dimensions={1,2}\n"
                     "  ROOT u = f32[3,5,4] transpose(b), dimensions={0,2,1}\n",
                     "4,5", 1, 20);
    check_transposes("  b = f32[3,4,5] broadcast(x), dimensions={1}\n"
                     "  ROOT u = f32[4,5,3] transpose(b), dimensions={1,2,0}\n",
                     "4", 0, 0);
}

/* reduce over size-1 dimensions with an identity init is a reshape (pred and/true, s32 add/0,
 * u8 or/0); with a float add or multiply it is that op on init and the element (the reference's
 * own fold of one element, in the reducer's operand order); neither with another integer init, a
 * float maximum, or a reduced dimension longer than 1. Each result equals the reference's on the
 * original module bit for bit. */
static void reduce_simplified(const char *dt, const char *op, const char *init, const char *xdims,
                              const char *rdims, const char *odims, int *left) {
    char text[1024];
    snprintf(
        text, sizeof text,
        "HloModule r\n"
        "red {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n  ROOT c = %s[] %s(a, b)\n}\n"
        "ENTRY main {\n  x = %s[%s] parameter(0)\n  t = %s[] constant(%s)\n"
        "  ROOT r = %s[%s] reduce(x, t), dimensions={%s}, to_apply=red\n}\n",
        dt, dt, dt, op, dt, xdims, dt, init, dt, odims, rdims);
    ot_module *m = NULL, *m2 = NULL;
    if (ot_hlo_parse(text, strlen(text), NULL, &m) != OT_OK ||
        ot_hlo_parse(text, strlen(text), NULL, &m2) != OT_OK) {
        OT_T_FAIL_("parse: %s", text);
        ot_module_free(m);
        return;
    }
    ot_computation *entry = ot_module_entry(m);
    ot_value arg, ref = ot_value_empty(), got = ot_value_empty();
    ASSERT_OK(ot_value_alloc_array(&arg, &entry->params[0]->shape.array));
    unsigned char *d = arg.array.data;
    for (size_t k = 0; k < arg.array.nbytes; k++) d[k] = (unsigned char)(k * 37 + 11);
    if (strcmp(dt, "pred") == 0)
        for (size_t k = 0; k < arg.array.nbytes; k++) d[k] &= 1;
    ASSERT_OK(ot_evaluate(m, &arg, 1, NULL, &ref));
    ASSERT_OK(ot_module_finalize(m2));
    ASSERT_OK(ot_pass_simplify(m2, NULL));
    ASSERT_OK(ot_pass_dce(m2, NULL));
    ASSERT_OK(ot_module_verify(m2));
    ASSERT_OK(ot_evaluate(m2, &arg, 1, NULL, &got));
    EXPECT_TRUE(ot_value_equal(&ref, &got));
    *left = count_op(ot_module_entry(m2), OT_OP_REDUCE);
    ot_value_release(&arg);
    ot_value_release(&ref);
    ot_value_release(&got);
    ot_module_free(m);
    ot_module_free(m2);
}

static int reduce_left_after_simplify(const char *dt, const char *op, const char *init,
                                      const char *xdims, const char *rdims, const char *odims) {
    int left = -1;
    reduce_simplified(dt, op, init, xdims, rdims, odims, &left);
    return left;
}

static void test_simplify_reduce_size1(void) {
    EXPECT_INT_EQ(reduce_left_after_simplify("pred", "and", "true", "6,1,1", "2", "6,1"), 0);
    EXPECT_INT_EQ(reduce_left_after_simplify("pred", "or", "false", "1,5,1", "0,2", "5"), 0);
    EXPECT_INT_EQ(reduce_left_after_simplify("s32", "add", "0", "4,1", "1", "4"), 0);
    EXPECT_INT_EQ(reduce_left_after_simplify("u8", "or", "0", "3,1", "1", "3"), 0);
    EXPECT_INT_EQ(reduce_left_after_simplify("s32", "and", "-1", "4,1", "1", "4"), 0);
    /* float add / multiply: the op on init */
    EXPECT_INT_EQ(reduce_left_after_simplify("f32", "add", "0", "4,1", "1", "4"), 0);
    EXPECT_INT_EQ(reduce_left_after_simplify("f32", "add", "-0.5", "1,7,1", "0,2", "7"), 0);
    EXPECT_INT_EQ(reduce_left_after_simplify("f64", "multiply", "3", "5,1", "1", "5"), 0);
    EXPECT_INT_EQ(reduce_left_after_simplify("bf16", "add", "0.25", "6,1", "1", "6"), 0);
    /* not the identity, a float maximum, a reduced dimension of 2 */
    EXPECT_INT_EQ(reduce_left_after_simplify("pred", "and", "false", "6,1,1", "2", "6,1"), 1);
    EXPECT_INT_EQ(reduce_left_after_simplify("s32", "add", "1", "4,1", "1", "4"), 1);
    EXPECT_INT_EQ(reduce_left_after_simplify("s32", "and", "0", "4,1", "1", "4"), 1);
    EXPECT_INT_EQ(reduce_left_after_simplify("f32", "maximum", "0", "4,1", "1", "4"), 1);
    EXPECT_INT_EQ(reduce_left_after_simplify("f32", "add", "0", "4,2", "1", "4"), 1);
    EXPECT_INT_EQ(reduce_left_after_simplify("pred", "and", "true", "6,2", "1", "6"), 1);
    EXPECT_INT_EQ(reduce_left_after_simplify("s32", "multiply", "1", "4,1", "1", "4"), 1);
    /* complex: (0, 0) + x is not x when a part of x is -0 (random_ops seed 1010) */
    EXPECT_INT_EQ(reduce_left_after_simplify("c64", "add", "(0, 0)", "4,1", "1", "4"), 1);
}

/* ---- transpose of a dot ---- */

static uint64_t g_dt_seed;
static int64_t dt_rnd(int64_t lo, int64_t hi) { /* [lo, hi] */
    g_dt_seed = g_dt_seed * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (int64_t)((g_dt_seed >> 33) % (uint64_t)(hi - lo + 1));
}
static void dt_shuffle(int64_t *a, int n) {
    for (int k = n - 1; k > 0; k--) {
        int j = (int)dt_rnd(0, k);
        int64_t t = a[k];
        a[k] = a[j];
        a[j] = t;
    }
}

typedef struct dt_case {
    ot_dtype t;
    ot_shape ls, rs;
    ot_dot_dims dn;
    int64_t perm[OT_MAX_RANK];
    int rank;
    bool shared; /* the dot has a second user */
    ot_precision lp, rp;
} dt_case;

static ot_module *dt_module(const dt_case *k) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_instr *l = ot_build_parameter(c, 0, k->ls, "l"), *r = ot_build_parameter(c, 1, k->rs, "r");
    ot_instr *d = ot_build_dot(c, l, r, &k->dn, k->lp, k->rp);
    ot_instr *t = ot_build_transpose(c, d, k->perm, k->rank);
    ot_computation_set_root(c, k->shared ? ot_build_tuple(c, (ot_instr *[]){t, d}, 2) : t);
    if (ot_module_finalize(m) != OT_OK) {
        fprintf(stderr, "dt_module: %s\n", ot_last_error());
        ot_module_free(m);
        return NULL;
    }
    return m;
}

/* Random operands: f32/f64 with NaN, infinities, -0 and subnormals among them, s32 small. */
static void dt_fill(ot_tensor *x) {
    static const uint32_t sp32[] = {0x7fc00000u, 0xff800000u, 0x7f800000u, 0x80000000u,
                                    0x00000001u, 0x80400000u, 0x00000000u, 0x3f800000u};
    int64_t ne = ot_shape_numel_unchecked(&x->shape);
    for (int64_t j = 0; j < ne; j++) {
        int64_t v = dt_rnd(-1000, 1000);
        bool special = dt_rnd(0, 15) == 0;
        if (x->shape.dtype == OT_S32) {
            ((int32_t *)x->data)[j] = (int32_t)v;
        } else if (x->shape.dtype == OT_F32) {
            float f = (float)v / 64.0f;
            if (special) memcpy(&f, &sp32[dt_rnd(0, 7)], 4);
            ((float *)x->data)[j] = f;
        } else {
            double f = (double)v / 64.0;
            if (special) f = dt_rnd(0, 1) ? 0x1p-1060 * (double)v : -0.0;
            ((double *)x->data)[j] = f;
        }
    }
}

/* transpose(dot(a, b)) putting b's free dims before a's (batch dims in place) becomes
 * dot(b, a) with swapped dimension numbers: random dimension-number layouts (batch, contracting
 * and free dims of each operand in random positions, free dims 0..2 on each side), f32, f64 and
 * s32, the reference's result bit for bit the same. Other permutations, and a dot with a second
 * user, keep their transpose. */
static void test_simplify_dot_transpose(void) {
    g_dt_seed = 0x7d07;
    int rewritten = 0, kept = 0;
    for (int cs = 0; cs < 150; cs++) {
        dt_case k;
        memset(&k, 0, sizeof k);
        static const ot_dtype types[] = {OT_F32, OT_F64, OT_S32};
        k.t = types[cs % 3];
        int nb = (int)dt_rnd(0, 2), nc = (int)dt_rnd(1, 2), nlf = (int)dt_rnd(0, 2),
            nrf = (int)dt_rnd(0, 2);
        if (nlf + nrf == 0) nrf = 1;
        int64_t bd[4], cd[4], lfd[4], rfd[4];
        for (int j = 0; j < nb; j++) bd[j] = dt_rnd(1, 3);
        for (int j = 0; j < nc; j++) cd[j] = dt_rnd(1, 5);
        for (int j = 0; j < nlf; j++) lfd[j] = dt_rnd(1, 4);
        for (int j = 0; j < nrf; j++) rfd[j] = dt_rnd(1, 4);
        int lr = nb + nc + nlf, rr = nb + nc + nrf;
        int64_t lpos[OT_MAX_RANK], rpos[OT_MAX_RANK], ld[OT_MAX_RANK], rd[OT_MAX_RANK];
        for (int j = 0; j < lr; j++) lpos[j] = j;
        for (int j = 0; j < rr; j++) rpos[j] = j;
        dt_shuffle(lpos, lr);
        dt_shuffle(rpos, rr);
        k.dn.nbatch = nb;
        k.dn.ncontract = nc;
        for (int j = 0; j < lr; j++) { /* roles: batch, free, contracting */
            int64_t d = lpos[j];
            if (j < nb) {
                ld[d] = bd[j];
                k.dn.lhs_batch[j] = d;
            } else if (j < nb + nlf) {
                ld[d] = lfd[j - nb];
            } else {
                ld[d] = cd[j - nb - nlf];
                k.dn.lhs_contract[j - nb - nlf] = d;
            }
        }
        for (int j = 0; j < rr; j++) { /* roles: batch, contracting, free */
            int64_t d = rpos[j];
            if (j < nb) {
                rd[d] = bd[j];
                k.dn.rhs_batch[j] = d;
            } else if (j < nb + nc) {
                rd[d] = cd[j - nb];
                k.dn.rhs_contract[j - nb] = d;
            } else {
                rd[d] = rfd[j - nb - nc];
            }
        }
        ASSERT_OK(ot_shape_make(&k.ls, k.t, lr, ld));
        ASSERT_OK(ot_shape_make(&k.rs, k.t, rr, rd));
        k.rank = nb + nlf + nrf;
        /* the swapping permutation half the time, else a random one */
        for (int j = 0; j < k.rank; j++)
            k.perm[j] = j < nb ? j : j < nb + nrf ? nb + nlf + (j - nb) : nb + (j - nb - nrf);
        if (dt_rnd(0, 1)) {
            for (int j = 0; j < k.rank; j++) k.perm[j] = j;
            dt_shuffle(k.perm, k.rank);
        }
        k.shared = dt_rnd(0, 5) == 0;
        if (dt_rnd(0, 3) == 0) {
            k.lp = OT_PRECISION_HIGH;
            k.rp = OT_PRECISION_DEFAULT;
        }
        bool identity = true, swaps = nlf > 0 && nrf > 0;
        for (int j = 0; j < k.rank; j++) {
            int64_t want = j < nb ? j : j < nb + nrf ? nb + nlf + (j - nb) : nb + (j - nb - nrf);
            identity &= k.perm[j] == j;
            swaps &= k.perm[j] == want;
        }
        ot_module *m = dt_module(&k), *m2 = dt_module(&k);
        ASSERT_TRUE(m && m2);
        ot_value args[2];
        ASSERT_OK(ot_value_alloc_array(&args[0], &k.ls));
        ASSERT_OK(ot_value_alloc_array(&args[1], &k.rs));
        dt_fill(&args[0].array);
        dt_fill(&args[1].array);
        ASSERT_OK(ot_pass_simplify(m2, NULL));
        ASSERT_OK(ot_pass_dce(m2, NULL));
        ASSERT_OK(ot_module_verify(m2));
        ot_computation *c2 = ot_module_entry(m2);
        int want = identity || (swaps && !k.shared) ? 0 : 1;
        EXPECT_INT_EQ(count_op(c2, OT_OP_TRANSPOSE), want);
        EXPECT_INT_EQ(count_op(c2, OT_OP_DOT), 1);
        if (swaps && !k.shared) {
            rewritten++;
            const ot_instr *d = c2->root;
            EXPECT_TRUE(d->opcode == OT_OP_DOT && d->operands[0]->opcode == OT_OP_PARAMETER &&
                        d->operands[0]->attrs->index == 1);
            if (k.lp != OT_PRECISION_DEFAULT)
                EXPECT_TRUE(d->attrs->nprecision == 2 && d->attrs->precision[1] == k.lp &&
                            d->attrs->precision[0] == k.rp);
        } else if (!identity) {
            kept++;
        }
        ot_value ref = ot_value_empty(), got = ot_value_empty();
        ASSERT_OK(ot_evaluate(m, args, 2, NULL, &ref));
        ASSERT_OK(ot_evaluate(m2, args, 2, NULL, &got));
        bool same = ot_value_equal(&ref, &got);
        if (!same) fprintf(stderr, "dot transpose case %d: results differ\n", cs);
        EXPECT_TRUE(same);
        ot_value_release(&ref);
        ot_value_release(&got);
        ot_value_release(&args[0]);
        ot_value_release(&args[1]);
        ot_module_free(m);
        ot_module_free(m2);
    }
    EXPECT_TRUE(rewritten >= 20 && kept >= 20); /* both branches well covered */
}

/* dot(transpose(x), transpose(y)) → dot(x, y) with mapped dimension numbers: random layouts and
 * permutations, f32/f64/s32, the reference's result bit for bit the same whether or not a
 * transpose folded; folds happen (where the free dims keep their order and the fast dot can read
 * the source in place) and attention's q/k transposes [b, s, h, d] → [b, h, s, d] feeding two
 * dots each are gone after simplify + DCE. */
static void test_simplify_dot_fold_transpose(void) {
    g_dt_seed = 0xf01d;
    int folded = 0, kept = 0;
    for (int cs = 0; cs < 150; cs++) {
        static const ot_dtype types[] = {OT_F32, OT_F64, OT_S32};
        ot_dtype t = types[cs % 3];
        int nb = (int)dt_rnd(0, 2), nc = (int)dt_rnd(1, 2), nlf = (int)dt_rnd(0, 2),
            nrf = (int)dt_rnd(0, 2);
        int64_t bd[4], cd[4], lfd[4], rfd[4];
        for (int j = 0; j < nb; j++) bd[j] = dt_rnd(1, 3);
        for (int j = 0; j < nc; j++) cd[j] = dt_rnd(1, 5);
        for (int j = 0; j < nlf; j++) lfd[j] = dt_rnd(1, 4);
        for (int j = 0; j < nrf; j++) rfd[j] = dt_rnd(1, 4);
        int lr = nb + nc + nlf, rr = nb + nc + nrf;
        /* the dot's operand layouts (roles in random positions) */
        int64_t lpos[OT_MAX_RANK], rpos[OT_MAX_RANK], ld[OT_MAX_RANK], rd[OT_MAX_RANK];
        for (int j = 0; j < lr; j++) lpos[j] = j;
        for (int j = 0; j < rr; j++) rpos[j] = j;
        dt_shuffle(lpos, lr);
        dt_shuffle(rpos, rr);
        ot_dot_dims dn;
        memset(&dn, 0, sizeof dn);
        dn.nbatch = nb;
        dn.ncontract = nc;
        for (int j = 0; j < lr; j++) {
            int64_t d = lpos[j];
            ld[d] = j < nb ? bd[j] : j < nb + nlf ? lfd[j - nb] : cd[j - nb - nlf];
            if (j < nb) dn.lhs_batch[j] = d;
            if (j >= nb + nlf) dn.lhs_contract[j - nb - nlf] = d;
        }
        for (int j = 0; j < rr; j++) {
            int64_t d = rpos[j];
            rd[d] = j < nb ? bd[j] : j < nb + nc ? cd[j - nb] : rfd[j - nb - nc];
            if (j < nb)
                dn.rhs_batch[j] = d;
            else if (j < nb + nc)
                dn.rhs_contract[j - nb] = d;
        }
        /* x, y: the sources; the transposes give the dot's operands: operand dim j = source
         * dim p[j], so the source's dim p[j] has the operand's extent j */
        int64_t pl[OT_MAX_RANK], pr[OT_MAX_RANK], xd[OT_MAX_RANK], yd[OT_MAX_RANK];
        for (int j = 0; j < lr; j++) pl[j] = j;
        for (int j = 0; j < rr; j++) pr[j] = j;
        dt_shuffle(pl, lr);
        dt_shuffle(pr, rr);
        for (int j = 0; j < lr; j++) xd[pl[j]] = ld[j];
        for (int j = 0; j < rr; j++) yd[pr[j]] = rd[j];
        ot_shape xs, ys;
        ASSERT_OK(ot_shape_make(&xs, t, lr, xd));
        ASSERT_OK(ot_shape_make(&ys, t, rr, yd));
        ot_module *mods[2];
        for (int q = 0; q < 2; q++) {
            ot_computation *c;
            mods[q] = new_mod(&c);
            ot_instr *x = ot_build_parameter(c, 0, xs, "x"), *y = ot_build_parameter(c, 1, ys, "y");
            ot_instr *tx = ot_build_transpose(c, x, pl, lr), *ty = ot_build_transpose(c, y, pr, rr);
            ot_computation_set_root(
                c, ot_build_dot(c, tx, ty, &dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT));
            ASSERT_OK(ot_module_finalize(mods[q]));
        }
        ot_value args[2];
        ASSERT_OK(ot_value_alloc_array(&args[0], &xs));
        ASSERT_OK(ot_value_alloc_array(&args[1], &ys));
        dt_fill(&args[0].array);
        dt_fill(&args[1].array);
        ASSERT_OK(ot_pass_simplify(mods[1], NULL));
        ASSERT_OK(ot_pass_dce(mods[1], NULL));
        ASSERT_OK(ot_module_verify(mods[1]));
        ot_computation *c2 = ot_module_entry(mods[1]);
        EXPECT_INT_EQ(count_op(c2, OT_OP_DOT), 1);
        int left = count_op(c2, OT_OP_TRANSPOSE);
        bool idl = true, idr = true;
        for (int j = 0; j < lr; j++) idl &= pl[j] == j;
        for (int j = 0; j < rr; j++) idr &= pr[j] == j;
        int real = !idl + !idr;
        folded += real - left;
        kept += left;
        ot_value ref = ot_value_empty(), got = ot_value_empty();
        ASSERT_OK(ot_evaluate(mods[0], args, 2, NULL, &ref));
        ot_module *m3 = NULL; /* a clone is in post order (a rewrite appends its new ops) */
        ASSERT_OK(ot_module_clone(mods[1], &m3));
        ASSERT_OK(ot_evaluate(m3, args, 2, NULL, &got));
        ot_module_free(m3);
        bool same = ot_value_equal(&ref, &got);
        if (!same) fprintf(stderr, "dot fold transpose case %d: results differ\n", cs);
        EXPECT_TRUE(same);
        ot_value_release(&ref);
        ot_value_release(&got);
        ot_value_release(&args[0]);
        ot_value_release(&args[1]);
        ot_module_free(mods[0]);
        ot_module_free(mods[1]);
    }
    EXPECT_TRUE(folded >= 20 && kept >= 20);

    /* attention: q, k, v [b, s, h, d] transposed to [b, h, s, d]; scores = q k^T, out = p v,
     * and the gradient's k^T-like product: every transpose folds away */
    static const char *k_attn =
        "HloModule attn\n"
        "ENTRY main {\n"
        "  q = f32[2,16,3,8] parameter(0)\n"
        "  k = f32[2,16,3,8] parameter(1)\n"
        "  v = f32[2,16,3,8] parameter(2)\n"
        "  tq = f32[2,3,16,8] transpose(q), dimensions={0,2,1,3}\n"
        "  tk = f32[2,3,16,8] transpose(k), dimensions={0,2,1,3}\n"
        "  tv = f32[2,3,16,8] transpose(v), dimensions={0,2,1,3}\n"
        "  s = f32[2,3,16,16] dot(tq, tk), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, "
        "rhs_batch_dims={0,1}, rhs_contracting_dims={3}\n"
        "  o = f32[2,3,16,8] dot(s, tv), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, "
        "rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n"
        "  g = f32[2,3,16,8] dot(s, tq), lhs_batch_dims={0,1}, lhs_contracting_dims={2}, "
        "rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n"
        "  ROOT r = (f32[2,3,16,8], f32[2,3,16,8]) tuple(o, g)\n"
        "}\n";
    /* through the -O2 pipeline without fusion (a transpose left would stay a kernel of its own) */
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(k_attn, strlen(k_attn), NULL, &m));
    ot_compile_options o = ot_compile_options_default();
    o.disable_passes = "fuse";
    o.verify_each = true;
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, &o, &e));
    const ot_module *cm = ot_executable_module(e);
    EXPECT_INT_EQ(count_op(ot_module_entry(cm), OT_OP_TRANSPOSE), 0);
    EXPECT_INT_EQ(count_op(ot_module_entry(cm), OT_OP_DOT), 3);
    ot_value args[3], ref = ot_value_empty(), got = ot_value_empty();
    for (int k = 0; k < 3; k++) {
        ASSERT_OK(ot_value_alloc_array(&args[k], &ot_module_entry(m)->params[k]->shape.array));
        dt_fill(&args[k].array);
    }
    ASSERT_OK(ot_evaluate(m, args, 3, NULL, &ref));
    ASSERT_OK(ot_evaluate(cm, args, 3, NULL, &got));
    EXPECT_TRUE(ot_value_equal(&ref, &got));
    ot_value_release(&ref);
    ot_value_release(&got);
    for (int k = 0; k < 3; k++) ot_value_release(&args[k]);
    ot_executable_free(e);
    ot_module_free(m);
}

/* ---- call inlining ---- */

static const char *k_nested_calls = "HloModule nested_calls\n"
                                    "\n"
                                    "inner {\n"
                                    "  p = f32[8]{0} parameter(0)\n"
                                    "  ROOT e = f32[8]{0} exponential(p)\n"
                                    "}\n"
                                    "\n"
                                    "mid {\n"
                                    "  a = f32[8]{0} parameter(0)\n"
                                    "  b = f32[8]{0} parameter(1)\n"
                                    "  c1 = f32[8]{0} call(a), to_apply=inner\n"
                                    "  s = f32[8]{0} add(c1, b)\n"
                                    "  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(s, c1)\n"
                                    "}\n"
                                    "\n"
                                    "ENTRY main {\n"
                                    "  x = f32[8]{0} parameter(0)\n"
                                    "  y = f32[8]{0} parameter(1)\n"
                                    "  r = (f32[8]{0}, f32[8]{0}) call(x, y), to_apply=mid\n"
                                    "  g0 = f32[8]{0} get-tuple-element(r), index=0\n"
                                    "  g1 = f32[8]{0} get-tuple-element(r), index=1\n"
                                    "  r2 = f32[8]{0} call(g0), to_apply=inner\n"
                                    "  ROOT o = f32[8]{0} multiply(g1, r2)\n"
                                    "}\n";

/* The same program written without calls: what inlining + simplify + DCE must produce. */
static const char *k_nested_inlined = "HloModule nested_calls\n"
                                      "\n"
                                      "ENTRY main {\n"
                                      "  x = f32[8]{0} parameter(0)\n"
                                      "  y = f32[8]{0} parameter(1)\n"
                                      "  e = f32[8]{0} exponential(x)\n"
                                      "  s = f32[8]{0} add(e, y)\n"
                                      "  e2 = f32[8]{0} exponential(s)\n"
                                      "  ROOT o = f32[8]{0} multiply(e, e2)\n"
                                      "}\n";

static int count_calls_reachable(const ot_module *m) {
    int n = 0;
    for (int k = 0; k < ot_module_computation_count(m); k++)
        n += count_op(ot_module_computation(m, k), OT_OP_CALL);
    return n;
}

/* Structural equality of two entry computations: same opcodes, shapes and operand structure,
 * compared along the post order from the root (names may differ). */
static bool same_graph(const ot_instr *a, const ot_instr *b, int depth) {
    if (depth > 64 || a->opcode != b->opcode || !ot_ir_shape_equal(&a->shape, &b->shape) ||
        a->noperands != b->noperands)
        return false;
    if (a->opcode == OT_OP_PARAMETER) return a->attrs->index == b->attrs->index;
    for (int k = 0; k < a->noperands; k++)
        if (!same_graph(a->operands[k], b->operands[k], depth + 1)) return false;
    return true;
}

static void fill_args(ot_computation *entry, ot_value *args, int n, uint64_t seed) {
    for (int k = 0; k < n; k++) {
        ASSERT_OK(ot_value_alloc_array(&args[k], &entry->params[k]->shape.array));
        ot_tensor *t = &args[k].array;
        int64_t ne = ot_shape_numel_unchecked(&t->shape);
        for (int64_t j = 0; j < ne; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            if (t->shape.dtype == OT_F32)
                ((float *)t->data)[j] = (float)((int)((seed >> 33) % 2001) - 1000) / 256.0f;
            else
                ((int32_t *)t->data)[j] = (int32_t)((seed >> 33) % 7); /* class labels 0..6 */
        }
    }
}

/* Instructions inside fusion kernels (parameters not counted) and control kernels (call). */
static void kernel_mix(const ot_executable *e, int *fused_ops, int *control) {
    *fused_ops = *control = 0;
    for (int k = 0; k < ot_executable_kernel_count(e); k++) {
        const ot_kernel *kn = ot_executable_kernel(e, k);
        if (kn->kind == OT_KERNEL_CONTROL) ++*control;
        if (kn->kind != OT_KERNEL_FUSION) continue;
        const ot_computation *fc = kn->instr->called[0];
        *fused_ops += (int)fc->ninstrs - fc->nparams;
    }
}

/* Compiles m at -O0 and -O2 (and -O2 without the inliner): equal results; at -O2 no call is
 * left, no control kernel runs a callee unfused, and more instructions sit inside fusions than
 * without inlining. */
static void check_inlined_compile(ot_module *m, int nargs, int *kernels_o2) {
    ot_computation *entry = ot_module_entry(m);
    ot_value args[4];
    fill_args(entry, args, nargs, 77);
    ot_value ref = ot_value_empty();
    ASSERT_OK(ot_evaluate(m, args, nargs, NULL, &ref));
    int kernels[3] = {0}, fused[3] = {0}, control[3] = {0};
    for (int v = 0; v < 3; v++) {
        ot_compile_options o = ot_compile_options_default();
        o.opt_level = v == 0 ? 0 : 2;
        if (v == 2) o.disable_passes = "inline";
        o.verify_each = true;
        ot_executable *e = NULL;
        ASSERT_OK(ot_compile(m, &o, &e));
        kernels[v] = ot_executable_kernel_count(e);
        kernel_mix(e, &fused[v], &control[v]);
        if (v == 1) EXPECT_INT_EQ(count_calls_reachable(ot_executable_module(e)), 0);
        if (v != 1) EXPECT_TRUE(count_calls_reachable(ot_executable_module(e)) > 0);
        ot_value got = ot_value_empty();
        EXPECT_OK(ot_evaluate(ot_executable_module(e), args, nargs, NULL, &got));
        if (!ot_value_equal(&ref, &got))
            OT_T_FAIL_("variant %d: results differ from the source", v);
        ot_value_release(&got);
        ot_executable_free(e);
    }
    EXPECT_INT_EQ(control[1], 0);
    EXPECT_TRUE(control[0] > 0 && control[2] > 0);
    EXPECT_TRUE(fused[1] > fused[2]);
    *kernels_o2 = kernels[1];
    ot_value_release(&ref);
    for (int k = 0; k < nargs; k++) ot_value_release(&args[k]);
}

static void test_inline_calls(void) {
    /* before/after: nested calls (a callee calling another, one callee called twice, a tuple
     * result read through get-tuple-element) become the call-free program */
    ot_module *m = NULL, *want = NULL;
    ASSERT_OK(ot_hlo_parse(k_nested_calls, strlen(k_nested_calls), NULL, &m));
    ASSERT_OK(ot_hlo_parse(k_nested_inlined, strlen(k_nested_inlined), NULL, &want));
    bool ch = false;
    ASSERT_OK(ot_pass_inline(m, &ch));
    EXPECT_TRUE(ch);
    ASSERT_OK(ot_module_verify(m));
    ASSERT_OK(ot_pass_simplify(m, NULL));
    ASSERT_OK(ot_pass_dce(m, NULL));
    ASSERT_OK(ot_module_verify(m));
    EXPECT_INT_EQ(ot_module_computation_count(m), 1); /* inner and mid are gone */
    EXPECT_INT_EQ(count_calls_reachable(m), 0);
    EXPECT_TRUE(same_graph(ot_module_entry(m)->root, ot_module_entry(want)->root, 0));
    char *text = ot_hlo_print(m, NULL);
    ASSERT_TRUE(text != NULL);
    EXPECT_TRUE(strstr(text, "call(") == NULL);
    ot_free(text);
    /* nothing left to inline: unchanged */
    ASSERT_OK(ot_pass_inline(m, &ch));
    EXPECT_TRUE(!ch);
    ot_module_free(m);
    ot_module_free(want);

    /* compiled: -O2 fuses through the calls into one loop; -O0 keeps them; results equal */
    ASSERT_OK(ot_hlo_parse(k_nested_calls, strlen(k_nested_calls), NULL, &m));
    int k2 = 0;
    check_inlined_compile(m, 2, &k2);
    EXPECT_INT_EQ(k2, 1);
    ot_module_free(m);

    /* 500 distinct callees, each called once in a chain: all inlined, all removed by DCE */
    ot_computation *c;
    m = new_mod(&c);
    ot_instr *x = ot_build_parameter(c, 0, vec(8), "x");
    for (int k = 0; k < 500; k++) {
        ot_computation *f = ot_module_add_computation(m, NULL);
        ot_instr *p = ot_build_parameter(f, 0, vec(8), "p");
        ot_computation_set_root(f, ot_build_binary(f, k % 2 ? OT_OP_ADD : OT_OP_MULTIPLY, p, p));
        x = ot_build(c, OT_OP_CALL, &x, 1, NULL, &f, 1, NULL, NULL);
    }
    ot_computation_set_root(c, x);
    ot_module_set_entry(m, c);
    ASSERT_OK(ot_module_finalize(m));
    EXPECT_INT_EQ(ot_module_computation_count(m), 501);
    ASSERT_OK(ot_pass_inline(m, &ch));
    ASSERT_OK(ot_pass_dce(m, &ch));
    EXPECT_TRUE(ch);
    ASSERT_OK(ot_module_verify(m));
    EXPECT_INT_EQ(ot_module_computation_count(m), 1);
    EXPECT_INT_EQ(count_op(c, OT_OP_ADD) + count_op(c, OT_OP_MULTIPLY), 500);
    EXPECT_INT_EQ((int)ot_module_instr_count(m), 501);
    ot_module_free(m);

    /* JAX's softmax cross-entropy (log_softmax and take_along_axis as nested calls) */
    ASSERT_OK(ot_hlo_parse_file(OT_SOURCE_DIR "/tests/data/jax/softmax_cross_entropy/module.hlo",
                                NULL, &m));
    EXPECT_TRUE(count_calls_reachable(m) >= 2);
    check_inlined_compile(m, 2, &k2);
    ot_module_free(m);
}

/* ---- fusion ---- */

static ot_module *compiled_fusion(ot_module *m, int max_io) {
    if (ot_module_finalize(m) != OT_OK) return NULL;
    if (ot_pass_fuse(m, max_io, NULL) != OT_OK) return NULL;
    if (ot_pass_dce(m, NULL) != OT_OK) return NULL;
    if (ot_module_verify(m) != OT_OK) return NULL;
    return m;
}

static void test_fuse_elementwise_chain(void) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape s = mat2(OT_F32, 8, 16);
    ot_instr *a = ot_build_parameter(c, 0, s, "a");
    ot_instr *b = ot_build_parameter(c, 1, vec(16), "b");
    ot_instr *bb = ot_build_broadcast(c, b, s, (int64_t[]){1}, 1);
    ot_instr *x = ot_build_binary(c, OT_OP_ADD, a, bb);
    x = ot_build_binary(c, OT_OP_MULTIPLY, x, fconst(c, 3.0, s));
    x = ot_build_convert(c, x, OT_F64);
    ot_shape r = mat2(OT_F64, 16, 8);
    x = ot_build_reshape(c, x, r);
    ot_instr *io = ot_build_iota(c, r, 0);
    x = ot_build_binary(c, OT_OP_ADD, x, io);
    ot_computation_set_root(c, x);
    ASSERT_TRUE(compiled_fusion(m, 0) != NULL);
    EXPECT_INT_EQ(count_op(c, OT_OP_FUSION), 1);
    EXPECT_INT_EQ(c->ninstrs, 3); /* a, b, fusion */
    EXPECT_INT_EQ(c->root->opcode, OT_OP_FUSION);
    EXPECT_INT_EQ(c->root->noperands, 2);
    EXPECT_INT_EQ(c->root->attrs->fusion_kind, OT_FUSION_LOOP);
    ot_module_free(m);
}

/* The operation count and elementwise-read parameters the fusion pass records in a fused
 * computation for the executable are found again once the computation changes. */
static void test_fusion_analysis_follows_edits(void) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_instr *x = ot_build_parameter(c, 0, vec(16), "x");
    ot_instr *b = ot_build_parameter(c, 1, ot_shape_scalar(OT_F32), "b");
    ot_instr *y = ot_build_binary(c, OT_OP_ADD, x, x);
    y = ot_build_binary(c, OT_OP_MULTIPLY, y, bcast(c, b, vec(16)));
    ot_computation_set_root(c, y);
    ASSERT_OK(ot_module_finalize(m));
    bool changed = false;
    ASSERT_OK(ot_pass_fuse(m, 64, &changed));
    ASSERT_TRUE(changed && c->root->opcode == OT_OP_FUSION);
    ot_computation *fc = c->root->called[0];
    int64_t flops = 0;
    uint64_t linear = 0, want = 0;
    for (int j = 0; j < fc->nparams; j++)
        if (fc->params[j]->shape.array.rank == 1) want |= (uint64_t)1 << j; /* x, not b */
    cc_fusion_analysis(fc, &flops, &linear);
    EXPECT_INT_EQ(flops, 32); /* add and multiply, 16 elements each */
    EXPECT_INT_EQ(linear, want);
    /* a new root: one more operation, and x now also reaches a reverse */
    ot_instr *r = ot_build_reverse(fc, fc->root, (int64_t[]){0}, 1);
    ot_computation_set_root(fc, ot_build_binary(fc, OT_OP_SUBTRACT, r, r));
    cc_fusion_analysis(fc, &flops, &linear);
    EXPECT_INT_EQ(flops, 48);
    EXPECT_INT_EQ(linear, 0);
    ot_module_free(m);
}

static void test_fuse_never_list(void) {
    /* dot, convolution, sort, while, side effects and collectives are never fused */
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape s = mat2(OT_F32, 4, 4);
    ot_instr *a = ot_build_parameter(c, 0, s, "a");
    ot_instr *e = ot_build_unary(c, OT_OP_EXP, a);
    ot_dot_dims dn = {0};
    dn.ncontract = 1;
    dn.lhs_contract[0] = 1;
    dn.rhs_contract[0] = 0;
    ot_instr *d = ot_build_dot(c, e, e, &dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT);
    ot_instr *n = ot_build_unary(c, OT_OP_NEGATE, d);
    ot_computation *cmp = ot_module_add_computation(m, "cmp");
    ot_instr *ca = ot_build_parameter(cmp, 0, ot_shape_scalar(OT_F32), "x");
    ot_instr *cb = ot_build_parameter(cmp, 1, ot_shape_scalar(OT_F32), "y");
    ot_computation_set_root(cmp, ot_build_compare(cmp, ca, cb, OT_CMP_LT, OT_CMP_TYPE_DEFAULT));
    ot_instr *so = ot_build_sort(c, &n, 1, 1, false, cmp);
    ot_instr *ab = ot_build_unary(c, OT_OP_ABS, so);
    ot_computation *sum = add_reducer(m, OT_OP_ADD, OT_F32);
    ot_instr *ar = ot_build_all_reduce(c, &ab, 1, NULL, 1, false, sum);
    ot_instr *sq = ot_build_unary(c, OT_OP_SQRT, ar);
    ot_instr *cc = ot_build_custom_call(c, "effect", &sq, 1, &sq->shape, NULL, true);
    ot_computation_set_root(c, ot_build_unary(c, OT_OP_NEGATE, cc));
    ASSERT_TRUE(compiled_fusion(m, 0) != NULL);
    EXPECT_INT_EQ(count_op(c, OT_OP_DOT), 1);
    EXPECT_INT_EQ(count_op(c, OT_OP_SORT), 1);
    EXPECT_INT_EQ(count_op(c, OT_OP_ALL_REDUCE), 1);
    EXPECT_INT_EQ(count_op(c, OT_OP_CUSTOM_CALL), 1);
    EXPECT_INT_EQ(count_op(c, OT_OP_FUSION), 5); /* exp, negate, abs, sqrt, negate */
    for (const ot_instr *i = c->first; i; i = i->next)
        if (i->opcode == OT_OP_FUSION) EXPECT_INT_EQ(i->called[0]->ninstrs, 2);
    ot_module_free(m);
}

static void test_fuse_while_not_fused(void) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape sc = ot_shape_scalar(OT_S32);
    ot_computation *cond = ot_module_add_computation(m, "cond");
    ot_instr *cp = ot_build_parameter(cond, 0, sc, "i");
    ot_computation_set_root(cond,
                            ot_build_compare(cond, cp, ot_build_constant_scalar(cond, OT_S32, 10),
                                             OT_CMP_LT, OT_CMP_TYPE_DEFAULT));
    ot_computation *body = ot_module_add_computation(m, "body");
    ot_instr *bp = ot_build_parameter(body, 0, sc, "i");
    ot_computation_set_root(
        body, ot_build_binary(body, OT_OP_ADD, bp, ot_build_constant_scalar(body, OT_S32, 1)));
    ot_instr *p = ot_build_parameter(c, 0, sc, "p");
    ot_instr *w = ot_build_while(c, cond, body, ot_build_unary(c, OT_OP_NEGATE, p));
    ot_computation_set_root(c, ot_build_unary(c, OT_OP_NEGATE, w));
    ASSERT_TRUE(compiled_fusion(m, 0) != NULL);
    EXPECT_INT_EQ(count_op(c, OT_OP_WHILE), 1);
    EXPECT_INT_EQ(count_op(c, OT_OP_FUSION), 2);
    ot_module_free(m);
}

static void test_fuse_reductions(void) {
    /* row and column reductions as fusion roots, with their elementwise producers */
    for (int dim = 0; dim < 2; dim++) {
        ot_computation *c;
        ot_module *m = new_mod(&c);
        ot_shape s = mat2(OT_F32, 8, 32);
        ot_instr *a = ot_build_parameter(c, 0, s, "a");
        ot_instr *sq = ot_build_binary(c, OT_OP_MULTIPLY, a, a);
        ot_instr *init = ot_build_constant_scalar(c, OT_F32, 0);
        ot_computation *sum = add_reducer(m, OT_OP_ADD, OT_F32);
        int64_t dims[] = {dim};
        ot_instr *r = ot_build_reduce(c, &sq, &init, 1, dims, 1, sum);
        ot_computation_set_root(c, ot_build_unary(c, OT_OP_SQRT, r));
        ASSERT_TRUE(compiled_fusion(m, 0) != NULL);
        const ot_instr *root = c->root;
        ASSERT_TRUE(root->opcode == OT_OP_FUSION);
        if (dim == 1) {
            /* row sums of rows of 32: row fusion takes the per-row sqrt in (one kernel, the sum
             * with its producer and init, then the sqrt of each row's sum) */
            EXPECT_INT_EQ(count_op(c, OT_OP_FUSION), 1);
            EXPECT_INT_EQ(root->noperands, 1);
            EXPECT_INT_EQ(root->called[0]->root->opcode, OT_OP_SQRT);
            EXPECT_INT_EQ(count_op(root->called[0], OT_OP_REDUCE), 1);
            ot_module_free(m);
            continue;
        }
        EXPECT_INT_EQ(count_op(c, OT_OP_FUSION), 2);
        const ot_instr *red = root->operands[0];
        ASSERT_TRUE(red->opcode == OT_OP_FUSION);
        EXPECT_INT_EQ(red->attrs->fusion_kind, OT_FUSION_INPUT);
        EXPECT_INT_EQ(red->called[0]->root->opcode, OT_OP_REDUCE);
        EXPECT_INT_EQ(red->noperands, 1); /* the init constant was fused */
        ot_module_free(m);
    }
}

/* A scalar constant read by more fusions than duplication covers (one init shared by 40 reduces,
 * as CSE leaves it) is copied into each fusion, as XLA fuses constants, not passed to each as a
 * parameter; the original goes once nothing reads it, and the results stay bitwise equal. */
static void test_fuse_wide_constant_copied(void) {
    enum { R = 40 };
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape s = mat2(OT_F32, 8, 32);
    ot_instr *a = ot_build_parameter(c, 0, s, "a");
    ot_instr *init = ot_build_constant_scalar(c, OT_F32, 0.5);
    ot_computation *sum = add_reducer(m, OT_OP_ADD, OT_F32);
    ot_instr *rs[R];
    for (int k = 0; k < R; k++) {
        ot_instr *sq = ot_build_binary(c, OT_OP_MULTIPLY, a, fconst(c, k + 1, s));
        rs[k] = ot_build_reduce(c, &sq, &init, 1, (int64_t[]){k % 2}, 1, sum);
    }
    ot_computation_set_root(c, ot_build_tuple(c, rs, R));
    ASSERT_OK(ot_module_finalize(m));
    ot_value arg;
    ASSERT_OK(ot_value_alloc_array(&arg, &s));
    for (int64_t j = 0; j < 8 * 32; j++) ((float *)arg.array.data)[j] = (float)(j % 17) / 8.0f;
    ot_value ref = ot_value_empty();
    ASSERT_OK(ot_evaluate(m, &arg, 1, NULL, &ref));
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, NULL, &e));
    const ot_computation *entry = ot_module_entry(ot_executable_module(e));
    int fusions = 0, const_operands = 0, in_fusion = 0;
    for (const ot_instr *i = entry->first; i; i = i->next) {
        EXPECT_TRUE(i->opcode != OT_OP_CONSTANT); /* the original is gone */
        if (i->opcode != OT_OP_FUSION) continue;
        fusions++;
        for (int q = 0; q < i->noperands; q++)
            const_operands += i->operands[q]->opcode == OT_OP_CONSTANT;
        const ot_instr *r = i->called[0]->root;
        if (r->opcode == OT_OP_REDUCE && r->operands[1]->opcode == OT_OP_CONSTANT) in_fusion++;
    }
    EXPECT_INT_EQ(fusions, R);
    EXPECT_INT_EQ(const_operands, 0);
    EXPECT_INT_EQ(in_fusion, R);
    ot_value got = ot_value_empty();
    EXPECT_OK(ot_evaluate(ot_executable_module(e), &arg, 1, NULL, &got));
    EXPECT_TRUE(ot_value_equal(&ref, &got));
    ot_value_release(&got);
    ot_value_release(&ref);
    ot_value_release(&arg);
    ot_executable_free(e);
    ot_module_free(m);
}

/* A broadcast zero that a scatter-add starts from and that a fusion downstream of the scatter
 * also reads (Adagrad's gradient of an embedding table: the accumulator compared with 0): the
 * fusion cannot take it as an extra output (the scatter would close a cycle), so the fusion gets
 * its own copy and the broadcast stays in the entry for the scatter alone, which then owns it
 * (and updates it in place) instead of sharing a stored array of zeros with the fusion. */
static void test_fuse_scalar_broadcast_beside_scatter(void) {
    static const char text[] =
        "HloModule t\n"
        "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
        "ENTRY e {\n"
        "  w = f32[50,16] parameter(0)\n  i = s32[30,1] parameter(1)\n"
        "  u = f32[30,16] parameter(2)\n  z = f32[] constant(0)\n"
        "  zb = f32[50,16] broadcast(z), dimensions={}\n"
        "  g = f32[50,16] scatter(zb, i, u), update_window_dims={1}, inserted_window_dims={0}, "
        "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
        "  m = f32[50,16] multiply(g, g)\n"
        "  gt = pred[50,16] compare(m, zb), direction=GT\n"
        "  s = f32[50,16] select(gt, m, zb)\n"
        "  ROOT r = f32[50,16] add(w, s)\n}\n";
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &m));
    ASSERT_TRUE(compiled_fusion(m, 0) != NULL);
    const ot_computation *c = ot_module_entry(m);
    int fusions = 0, stored_bcasts = 0;
    const ot_instr *scatter = NULL;
    for (const ot_instr *i = c->first; i; i = i->next) {
        if (i->opcode == OT_OP_SCATTER) scatter = i;
        if (i->opcode != OT_OP_FUSION) continue;
        fusions++;
        for (int q = 0; q < i->noperands; q++) {
            const ot_instr *o = i->operands[q];
            bool bc = o->opcode == OT_OP_BROADCAST ||
                      (o->opcode == OT_OP_FUSION && o->called[0]->root->opcode == OT_OP_BROADCAST);
            stored_bcasts += bc;
        }
    }
    ASSERT_TRUE(scatter != NULL);
    EXPECT_INT_EQ(fusions, 1);
    EXPECT_INT_EQ(stored_bcasts, 0);                /* the fusion computes its zeros */
    EXPECT_INT_EQ(scatter->operands[0]->nusers, 1); /* the scatter's operand is its own */
    EXPECT_TRUE(scatter->operands[0]->opcode == OT_OP_BROADCAST);
    ot_module_free(m);
}

static void test_fuse_no_duplicate_expensive(void) {
    /* e = exp(a) feeds two reductions (two clusters): exp is computed once, never duplicated
     * (it joins one reduction's fusion as an extra output the other reads); the cheap
     * broadcast of a scalar feeding both is duplicated into each. */
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape s = mat2(OT_F32, 4, 8);
    ot_instr *a = ot_build_parameter(c, 0, s, "a");
    ot_instr *k = ot_build_parameter(c, 1, ot_shape_scalar(OT_F32), "k");
    ot_instr *kb = bcast(c, k, s);
    ot_instr *e = ot_build_unary(c, OT_OP_EXP, ot_build_binary(c, OT_OP_ADD, a, kb));
    ot_instr *init = ot_build_constant_scalar(c, OT_F32, 0);
    ot_computation *sum = add_reducer(m, OT_OP_ADD, OT_F32);
    ot_computation *mx = add_reducer(m, OT_OP_MAXIMUM, OT_F32);
    ot_instr *y1 = ot_build_binary(c, OT_OP_MULTIPLY, e, kb);
    ot_instr *y2 = ot_build_binary(c, OT_OP_SUBTRACT, e, kb);
    ot_instr *r1 = ot_build_reduce(c, &y1, &init, 1, (int64_t[]){1}, 1, sum);
    ot_instr *r2 = ot_build_reduce(c, &y2, &init, 1, (int64_t[]){0}, 1, mx);
    ot_instr *outs[] = {r1, r2};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 2));
    ASSERT_TRUE(compiled_fusion(m, 0) != NULL);
    int exps = 0, bcasts = 0;
    for (int q = 0; q < ot_module_computation_count(m); q++) {
        const ot_computation *x = ot_module_computation(m, q);
        exps += count_op(x, OT_OP_EXP);
        bcasts += count_op(x, OT_OP_BROADCAST);
    }
    EXPECT_INT_EQ(exps, 1);
    EXPECT_TRUE(bcasts >= 2);
    EXPECT_INT_EQ(count_op(c, OT_OP_FUSION), 2);
    ot_module_free(m);
}

/* An expensive op smaller than its consumer's loop joins it where the loop computes it once per
 * row (a layer norm's rsqrt of the row variance broadcast along the row), not where a broadcast
 * along the last dim would compute it again at every element (softmax's log of the sum over a
 * middle axis, [4, 1, 8] read by a [4, 64, 8] loop: its own fusion), nor where that is repeated
 * only a few times (at most EXPENSIVE_REUSE_MAX per element: fused). */
static void test_fuse_expensive_reused_elements(void) {
    for (int form = 0; form < 3; form++) {
        ot_computation *c;
        ot_module *m = new_mod(&c);
        int64_t rows = form == 2 ? 4 : 64;
        ot_shape big, sm;
        ot_shape_make(&big, OT_F32, 3, (int64_t[]){4, rows, 8});
        if (form == 1)
            ot_shape_make(&sm, OT_F32, 2, (int64_t[]){4, rows}); /* per row */
        else
            ot_shape_make(&sm, OT_F32, 2, (int64_t[]){4, 8}); /* per column of each batch */
        ot_instr *x = ot_build_parameter(c, 0, big, "x");
        ot_instr *v = ot_build_parameter(c, 1, sm, "v");
        ot_instr *l = ot_build_unary(c, form == 1 ? OT_OP_RSQRT : OT_OP_LOG, v);
        ot_instr *lb =
            ot_build_broadcast(c, l, big, form == 1 ? (int64_t[]){0, 1} : (int64_t[]){0, 2}, 2);
        ot_computation_set_root(c, ot_build_binary(c, OT_OP_SUBTRACT, x, lb));
        ASSERT_TRUE(compiled_fusion(m, 0) != NULL);
        EXPECT_INT_EQ(count_op(c, OT_OP_FUSION), (form == 0 ? 2 : 1));
        EXPECT_INT_EQ(count_op(c->root->called[0], form == 1 ? OT_OP_RSQRT : OT_OP_LOG),
                      (form == 0 ? 0 : 1));
        ot_module_free(m);
    }
}

/* An expensive op read through a pad joins the pad's loop only where the pad repeats it at most
 * EXPENSIVE_REUSE_MAX times per element (the generated loop computes the pad's operand at a
 * clamped index for every output, padding included): optax.ctc_loss's gradient pads
 * exp(...) * y of [1, 16, 30] to [100, 16, 30] (the exp its own fusion, the multiply in the pad's),
 * while a pad of [4, 16, 30] to [6, 16, 30] keeps the exp. */
static void test_fuse_expensive_padded(void) {
    for (int form = 0; form < 2; form++) {
        ot_computation *c;
        ot_module *m = new_mod(&c);
        int64_t n0 = form == 0 ? 1 : 4, lo = form == 0 ? 99 : 2;
        ot_shape sm;
        ot_shape_make(&sm, OT_F32, 3, (int64_t[]){n0, 16, 30});
        ot_instr *x = ot_build_parameter(c, 0, sm, "x");
        ot_instr *y = ot_build_parameter(c, 1, sm, "y");
        ot_instr *e = ot_build_binary(c, OT_OP_MULTIPLY, ot_build_unary(c, OT_OP_EXP, x), y);
        ot_pad_dim pd[3] = {{lo, 0, 0}, {0, 0, 0}, {0, 0, 0}};
        ot_instr *z = ot_build_constant_scalar(c, OT_F32, 0.0);
        ot_computation_set_root(c, ot_build_pad(c, e, z, pd));
        ASSERT_TRUE(compiled_fusion(m, 0) != NULL);
        EXPECT_INT_EQ(count_op(c, OT_OP_FUSION), form == 0 ? 2 : 1);
        EXPECT_INT_EQ(count_op(c->root->called[0], OT_OP_EXP), form == 0 ? 0 : 1);
        EXPECT_INT_EQ(count_op(c->root->called[0], OT_OP_MULTIPLY), 1);
        ot_module_free(m);
    }
}

static void test_fuse_no_cycle(void) {
    /* x = exp(a) is used by a dot (outside) and by add(x, dot): fusing x into the add's cluster
     * as an extra output would make a cycle through the dot. */
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape s = mat2(OT_F32, 4, 4);
    ot_instr *a = ot_build_parameter(c, 0, s, "a");
    ot_instr *x = ot_build_unary(c, OT_OP_EXP, a);
    ot_dot_dims dn = {0};
    dn.ncontract = 1;
    dn.lhs_contract[0] = 1;
    dn.rhs_contract[0] = 0;
    ot_instr *d = ot_build_dot(c, x, a, &dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT);
    ot_computation_set_root(c, ot_build_binary(c, OT_OP_ADD, x, d));
    ASSERT_TRUE(compiled_fusion(m, 0) != NULL);
    EXPECT_INT_EQ(count_op(c, OT_OP_FUSION), 2);
    EXPECT_INT_EQ(count_op(c, OT_OP_DOT), 1);
    ot_module_free(m);
}

/* x = a + a feeds the root multiply of a loop and a chain of 300 transposes (never fused): the
 * cycle check must follow the whole chain, longer than any fixed search budget. */
static ot_module *long_path_graph(bool chain_into_cluster, ot_instr **xout) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape s = mat2(OT_F32, 4, 4);
    ot_instr *a = ot_build_parameter(c, 0, s, "a");
    ot_instr *b = ot_build_parameter(c, 1, s, "b");
    ot_instr *x = ot_build_binary(c, OT_OP_ADD, a, a);
    ot_instr *t = x;
    for (int k = 0; k < 300; k++) t = ot_build_transpose(c, t, (int64_t[]){1, 0}, 2);
    *xout = x;
    if (chain_into_cluster) {
        /* the chain ends in the loop: x as an extra output of the loop would be a cycle */
        ot_computation_set_root(
            c, ot_build_binary(c, OT_OP_MULTIPLY, x, ot_build_binary(c, OT_OP_ADD, t, b)));
    } else {
        /* the chain ends in the output tuple, listed first so its positions precede the loop's */
        ot_instr *r = ot_build_binary(c, OT_OP_MULTIPLY, x, b);
        ot_instr *outs[] = {t, r};
        ot_computation_set_root(c, ot_build_tuple(c, outs, 2));
    }
    return m;
}

static void test_fuse_long_paths(void) {
    ot_instr *x;
    /* no cycle: x joins the loop as an extra output (one kernel for x and the multiply) */
    ot_module *m = long_path_graph(false, &x);
    ot_computation *c = ot_module_entry(m);
    ASSERT_TRUE(compiled_fusion(m, 0) != NULL);
    EXPECT_INT_EQ(count_op(c, OT_OP_FUSION), 1);
    EXPECT_INT_EQ(count_op(c, OT_OP_TRANSPOSE), 300);
    EXPECT_INT_EQ(count_op(c, OT_OP_ADD), 0);
    EXPECT_INT_EQ(count_op(c, OT_OP_GET_TUPLE_ELEMENT), 2);
    ot_module_free(m);
    /* a cycle through 300 outside instructions: x stays out of the loop it feeds */
    m = long_path_graph(true, &x);
    c = ot_module_entry(m);
    ASSERT_TRUE(compiled_fusion(m, 0) != NULL);
    EXPECT_INT_EQ(count_op(c, OT_OP_FUSION), 2);
    EXPECT_INT_EQ(count_op(c, OT_OP_TRANSPOSE), 300);
    EXPECT_INT_EQ(count_op(c, OT_OP_GET_TUPLE_ELEMENT), 0);
    ot_module_free(m);
    /* both compile and compute what the source computes, at -O0 and -O2 */
    for (int variant = 0; variant < 2; variant++) {
        m = long_path_graph(variant == 1, &x);
        ASSERT_OK(ot_module_finalize(m));
        ot_computation *entry = ot_module_entry(m);
        ot_value args[2];
        for (int k = 0; k < 2; k++) {
            ASSERT_OK(ot_value_alloc_array(&args[k], &entry->params[k]->shape.array));
            for (int j = 0; j < 16; j++)
                ((float *)args[k].array.data)[j] = (float)(j * (k + 1)) - 7.5f;
        }
        ot_value ref = ot_value_empty();
        ASSERT_OK(ot_evaluate(m, args, 2, NULL, &ref));
        for (int lvl = 0; lvl <= 2; lvl += 2) {
            ot_compile_options o = ot_compile_options_default();
            o.opt_level = lvl;
            o.verify_each = true;
            ot_executable *e = NULL;
            ASSERT_OK(ot_compile(m, &o, &e));
            ot_value got = ot_value_empty();
            EXPECT_OK(ot_evaluate(ot_executable_module(e), args, 2, NULL, &got));
            EXPECT_TRUE(ot_value_equal(&ref, &got));
            ot_value_release(&got);
            ot_executable_free(e);
        }
        ot_value_release(&ref);
        for (int k = 0; k < 2; k++) ot_value_release(&args[k]);
        ot_module_free(m);
    }
}

static void test_fuse_multi_output_siblings(void) {
    /* two independent loops over the same input merge into one multi-output fusion */
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_instr *a = ot_build_parameter(c, 0, vec(64), "a");
    ot_instr *b = ot_build_parameter(c, 1, vec(64), "b");
    ot_instr *y1 = ot_build_unary(c, OT_OP_EXP, a);
    ot_instr *y2 = ot_build_binary(c, OT_OP_MULTIPLY, a, b);
    ot_instr *outs[] = {y1, y2};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 2));
    ASSERT_TRUE(compiled_fusion(m, 0) != NULL);
    EXPECT_INT_EQ(count_op(c, OT_OP_FUSION), 1);
    EXPECT_INT_EQ(count_op(c, OT_OP_GET_TUPLE_ELEMENT), 2);
    ot_module_free(m);
}

static void test_fuse_io_limit(void) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_instr *acc = NULL;
    for (int k = 0; k < 80; k++) {
        ot_instr *p = ot_build_parameter(c, k, vec(16), NULL);
        acc = acc ? ot_build_binary(c, OT_OP_ADD, acc, p) : p;
    }
    ot_computation_set_root(c, acc);
    ASSERT_TRUE(compiled_fusion(m, 16) != NULL);
    int nf = 0;
    for (const ot_instr *i = c->first; i; i = i->next) {
        if (i->opcode != OT_OP_FUSION) continue;
        nf++;
        EXPECT_TRUE(i->noperands + 1 <= 16);
    }
    EXPECT_TRUE(nf >= 6);
    ot_module_free(m);
}

/* ---- Adam ---- */

static ot_module *build_adam(int64_t n, bool alias) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape s = vec(n);
    ot_instr *p = ot_build_parameter(c, 0, s, "p");
    ot_instr *g = ot_build_parameter(c, 1, s, "g");
    ot_instr *mm = ot_build_parameter(c, 2, s, "m");
    ot_instr *v = ot_build_parameter(c, 3, s, "v");
    ot_instr *lr = ot_build_parameter(c, 4, ot_shape_scalar(OT_F32), "lr");
    ot_instr *step = ot_build_parameter(c, 5, ot_shape_scalar(OT_S32), "step");
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    ot_instr *m2 =
        ot_build_binary(c, OT_OP_ADD, ot_build_binary(c, OT_OP_MULTIPLY, fconst(c, b1, s), mm),
                        ot_build_binary(c, OT_OP_MULTIPLY, fconst(c, 1 - b1, s), g));
    ot_instr *g2 = ot_build_binary(c, OT_OP_MULTIPLY, g, g);
    ot_instr *v2 =
        ot_build_binary(c, OT_OP_ADD, ot_build_binary(c, OT_OP_MULTIPLY, fconst(c, b2, s), v),
                        ot_build_binary(c, OT_OP_MULTIPLY, fconst(c, 1 - b2, s), g2));
    ot_shape sc = ot_shape_scalar(OT_F32);
    ot_instr *t = ot_build_convert(c, step, OT_F32);
    ot_instr *bc1 = ot_build_binary(
        c, OT_OP_SUBTRACT, ot_build_constant_scalar(c, OT_F32, 1),
        ot_build_binary(c, OT_OP_POWER, ot_build_constant_scalar(c, OT_F32, b1), t));
    ot_instr *bc2 = ot_build_binary(
        c, OT_OP_SUBTRACT, ot_build_constant_scalar(c, OT_F32, 1),
        ot_build_binary(c, OT_OP_POWER, ot_build_constant_scalar(c, OT_F32, b2), t));
    (void)sc;
    ot_instr *mhat = ot_build_binary(c, OT_OP_DIVIDE, m2, bcast(c, bc1, s));
    ot_instr *vhat = ot_build_binary(c, OT_OP_DIVIDE, v2, bcast(c, bc2, s));
    ot_instr *den =
        ot_build_binary(c, OT_OP_ADD, ot_build_unary(c, OT_OP_SQRT, vhat), fconst(c, eps, s));
    ot_instr *upd = ot_build_binary(c, OT_OP_MULTIPLY, bcast(c, lr, s),
                                    ot_build_binary(c, OT_OP_DIVIDE, mhat, den));
    ot_instr *p2 = ot_build_binary(c, OT_OP_SUBTRACT, p, upd);
    ot_instr *outs[] = {p2, m2, v2};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 3));
    if (alias) {
        int64_t pn[] = {0, 2, 3};
        for (int k = 0; k < 3; k++) {
            ot_io_alias a = {0};
            a.noutput_index = 1;
            a.output_index[0] = k;
            a.param_number = pn[k];
            if (ot_module_add_alias(m, &a) != OT_OK) {
                ot_module_free(m);
                return NULL;
            }
        }
    }
    if (ot_module_finalize(m) != OT_OK) {
        ot_module_free(m);
        return NULL;
    }
    return m;
}

static void test_adam_one_kernel_in_place(void) {
    ot_module *m = build_adam(1 << 12, true);
    ASSERT_TRUE(m != NULL);
    ot_executable *e = NULL;
    ot_compile_options o = ot_compile_options_default();
    o.verify_each = true;
    ASSERT_OK(ot_compile(m, &o, &e));
    EXPECT_INT_EQ(ot_executable_kernel_count(e), 1);
    const ot_kernel *k = ot_executable_kernel(e, 0);
    EXPECT_INT_EQ(k->kind, OT_KERNEL_FUSION);
    EXPECT_INT_EQ(k->noutputs, 3);
    EXPECT_INT_EQ(k->ninputs, 6);
    EXPECT_INT_EQ(ot_executable_output_count(e), 3);
    int64_t want[] = {0, 2, 3};
    for (int j = 0; j < 3; j++) {
        const ot_slot *s = ot_executable_slot(e, ot_executable_output_slot(e, j));
        EXPECT_INT_EQ(s->kind, OT_SLOT_OUTPUT);
        EXPECT_INT_EQ(s->alias_param, want[j]);
        bool found = false;
        for (int q = 0; q < k->noutputs; q++)
            found = found || k->outputs[q] == ot_executable_output_slot(e, j);
        EXPECT_TRUE(found);
    }
    EXPECT_INT_EQ(ot_executable_arena_size(e), 0);
    EXPECT_TRUE(k->flops >= 10 * (1 << 12));
    EXPECT_INT_EQ(k->bytes_read, 4 * 4 * (1 << 12) + 4 + 4);
    EXPECT_INT_EQ(k->bytes_written, 3 * 4 * (1 << 12));
    ot_executable_free(e);

    /* without fusion: many kernels, still correct bindings */
    o.fusion = false;
    ASSERT_OK(ot_compile(m, &o, &e));
    EXPECT_TRUE(ot_executable_kernel_count(e) > 10);
    EXPECT_TRUE(ot_executable_arena_size(e) >= ot_executable_peak_live_bytes(e));
    ot_executable_free(e);
    ot_module_free(m);
}

/* ---- schedule and buffers ---- */

static void check_no_overlap(const ot_executable *e) {
    /* temporaries live at the same time never overlap; offsets are 64-byte aligned */
    int nk = ot_executable_kernel_count(e), ns = ot_executable_slot_count(e);
    int *def = calloc((size_t)ns, sizeof *def), *last = calloc((size_t)ns, sizeof *last);
    for (int v = 0; v < ns; v++) def[v] = last[v] = -1;
    for (int k = 0; k < nk; k++) {
        const ot_kernel *kn = ot_executable_kernel(e, k);
        for (int q = 0; q < kn->noutputs; q++) def[kn->outputs[q]] = k;
        for (int q = 0; q < kn->ninputs; q++) last[kn->inputs[q]] = k;
    }
    for (int a = 0; a < ns; a++) {
        const ot_slot *sa = ot_executable_slot(e, a);
        if (sa->kind != OT_SLOT_TEMP) continue;
        EXPECT_INT_EQ(sa->offset % 64, 0);
        EXPECT_TRUE(sa->offset + sa->nbytes <= ot_executable_arena_size(e));
        int ea = last[a] > def[a] ? last[a] : def[a];
        for (int b = a + 1; b < ns; b++) {
            const ot_slot *sb = ot_executable_slot(e, b);
            if (sb->kind != OT_SLOT_TEMP) continue;
            int eb = last[b] > def[b] ? last[b] : def[b];
            bool overlap_t = def[a] < eb && def[b] < ea; /* strictly: reuse at the boundary is
                                                            the in-place case */
            bool overlap_m =
                sa->offset < sb->offset + sb->nbytes && sb->offset < sa->offset + sa->nbytes;
            if (overlap_t && overlap_m) OT_T_FAIL_("slots %d and %d overlap", a, b);
        }
    }
    free(def);
    free(last);
}

static void test_schedule_and_buffers(void) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape s = mat2(OT_F32, 16, 16);
    ot_instr *a = ot_build_parameter(c, 0, s, "a");
    ot_dot_dims dn = {0};
    dn.ncontract = 1;
    dn.lhs_contract[0] = 1;
    dn.rhs_contract[0] = 0;
    ot_instr *x = a, *outs[6];
    for (int k = 0; k < 6; k++) {
        ot_instr *y = ot_build_dot(c, x, a, &dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT);
        ot_instr *z = ot_build_unary(c, OT_OP_TANH, y);
        outs[k] = ot_build_reduce(c, &z, (ot_instr *[]){ot_build_constant_scalar(c, OT_F32, 0)}, 1,
                                  (int64_t[]){0, 1}, 2, add_reducer(m, OT_OP_ADD, OT_F32));
        x = z;
    }
    ot_computation_set_root(c, ot_build_tuple(c, outs, 6));
    ASSERT_OK(ot_module_finalize(m));
    for (int lvl = 0; lvl <= 2; lvl++) {
        ot_compile_options o = ot_compile_options_default();
        o.opt_level = lvl;
        ot_executable *e = NULL;
        ASSERT_OK(ot_compile(m, &o, &e));
        check_no_overlap(e);
        EXPECT_TRUE(ot_executable_arena_size(e) >= ot_executable_peak_live_bytes(e));
        EXPECT_TRUE(ot_executable_peak_live_bytes(e) > 0);
        EXPECT_TRUE(ot_executable_total_flops(e) >= 6 * 2 * 16 * 16 * 16);
        /* the schedule is a topological order: every kernel input is defined earlier */
        int ns = ot_executable_slot_count(e);
        bool *defined = calloc((size_t)ns, 1);
        for (int v = 0; v < ns; v++)
            defined[v] = ot_executable_slot(e, v)->kind == OT_SLOT_PARAMETER ||
                         ot_executable_slot(e, v)->kind == OT_SLOT_CONSTANT;
        for (int k = 0; k < ot_executable_kernel_count(e); k++) {
            const ot_kernel *kn = ot_executable_kernel(e, k);
            for (int q = 0; q < kn->ninputs; q++) EXPECT_TRUE(defined[kn->inputs[q]]);
            for (int q = 0; q < kn->noutputs; q++) defined[kn->outputs[q]] = true;
        }
        free(defined);
        /* deterministic */
        ot_executable *e2 = NULL;
        ASSERT_OK(ot_compile(m, &o, &e2));
        EXPECT_INT_EQ(ot_executable_kernel_count(e2), ot_executable_kernel_count(e));
        EXPECT_INT_EQ(ot_executable_arena_size(e2), ot_executable_arena_size(e));
        for (int k = 0; k < ot_executable_kernel_count(e); k++)
            EXPECT_STR_EQ(ot_executable_kernel(e, k)->name, ot_executable_kernel(e2, k)->name);
        ot_executable_free(e2);
        ot_executable_free(e);
    }
    ot_module_free(m);
}

static void test_in_place_reuse(void) {
    /* without fusion, an elementwise op whose temp operand dies there writes over it */
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_instr *a = ot_build_parameter(c, 0, vec(1000), "a");
    ot_instr *x = ot_build_unary(c, OT_OP_EXP, a);
    x = ot_build_unary(c, OT_OP_NEGATE, x);
    x = ot_build_unary(c, OT_OP_ABS, x);
    ot_computation_set_root(c, ot_build_unary(c, OT_OP_SQRT, x));
    ASSERT_OK(ot_module_finalize(m));
    ot_compile_options o = ot_compile_options_default();
    o.fusion = false;
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, &o, &e));
    EXPECT_INT_EQ(ot_executable_kernel_count(e), 4);
    EXPECT_INT_EQ(ot_executable_kernel(e, 1)->in_place_input, 0);
    EXPECT_INT_EQ(ot_executable_arena_size(e), 4032); /* one 4000-byte buffer, aligned */
    EXPECT_INT_EQ(ot_executable_peak_live_bytes(e), 4032);
    check_no_overlap(e);
    ot_executable_free(e);
    o.opt_level = 0; /* -O0: no in-place reuse */
    ASSERT_OK(ot_compile(m, &o, &e));
    EXPECT_INT_EQ(ot_executable_kernel(e, 1)->in_place_input, -1);
    check_no_overlap(e);
    ot_executable_free(e);
    ot_module_free(m);
}

static void test_outputs_and_donation(void) {
    /* a parameter returned directly gets a copy kernel; a donation whose writer reads the
     * parameter non-elementwise (transpose) writes a temporary and copies at the end */
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape s = mat2(OT_F32, 4, 4);
    ot_instr *a = ot_build_parameter(c, 0, s, "a");
    ot_instr *t = ot_build_transpose(c, a, (int64_t[]){1, 0}, 2);
    ot_instr *outs[] = {t, a};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 2));
    ot_io_alias al = {0};
    al.noutput_index = 1;
    al.output_index[0] = 0;
    al.param_number = 0;
    ASSERT_OK(ot_module_add_alias(m, &al));
    ASSERT_OK(ot_module_finalize(m));
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, NULL, &e));
    int copies = 0;
    for (int k = 0; k < ot_executable_kernel_count(e); k++)
        copies += ot_executable_kernel(e, k)->kind == OT_KERNEL_COPY;
    EXPECT_INT_EQ(copies, 2); /* output-copy of a, donation-copy of the transpose */
    const ot_kernel *last = ot_executable_kernel(e, ot_executable_kernel_count(e) - 1);
    EXPECT_STR_EQ(last->name, "donation-copy");
    EXPECT_INT_EQ(last->outputs[0], ot_executable_output_slot(e, 0));
    EXPECT_INT_EQ(ot_executable_slot(e, ot_executable_output_slot(e, 0))->alias_param, 0);
    check_no_overlap(e);
    ot_executable_free(e);
    ot_module_free(m);

    /* a donation with mismatched shapes is refused */
    m = new_mod(&c);
    a = ot_build_parameter(c, 0, s, "a");
    ot_computation_set_root(c, ot_build_reshape(c, a, vec(16)));
    ASSERT_OK(ot_module_add_alias(m, &al));
    ASSERT_OK(ot_module_finalize(m));
    EXPECT_STATUS(ot_compile(m, NULL, &e), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "differ in shape");
    ot_module_free(m);
}

/* ---- options ---- */

static void test_options(void) {
    ot_module *m = build_adam(256, false);
    ASSERT_TRUE(m != NULL);
    ot_executable *e = NULL;
    ot_compile_options o = ot_compile_options_default();
    o.opt_level = 0;
    ASSERT_OK(ot_compile(m, &o, &e));
    for (int k = 0; k < ot_executable_kernel_count(e); k++)
        EXPECT_TRUE(ot_executable_kernel(e, k)->kind != OT_KERNEL_FUSION);
    EXPECT_STR_EQ(ot_executable_stat(e, 0)->name, "dce");
    ot_executable_free(e);

    o = ot_compile_options_default();
    o.opt_level = 1;
    ASSERT_OK(ot_compile(m, &o, &e));
    EXPECT_INT_EQ(ot_executable_kernel_count(e), 1);
    int n = ot_executable_stat_count(e);
    EXPECT_STR_EQ(ot_executable_stat(e, n - 1)->name, "assign-buffers");
    EXPECT_STR_EQ(ot_executable_stat(e, n - 2)->name, "schedule");
    ot_executable_free(e);

    o = ot_compile_options_default();
    o.disable_passes = "fuse";
    ASSERT_OK(ot_compile(m, &o, &e));
    EXPECT_TRUE(ot_executable_kernel_count(e) > 1);
    ot_executable_free(e);

    o = ot_compile_options_default();
    o.passes = "cse,dce,fuse";
    ASSERT_OK(ot_compile(m, &o, &e));
    EXPECT_INT_EQ(ot_executable_kernel_count(e), 1);
    EXPECT_STR_EQ(ot_executable_stat(e, 0)->name, "cse");
    ot_executable_free(e);

    o.passes = "cse,bogus";
    EXPECT_STATUS(ot_compile(m, &o, &e), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "bogus");
    o = ot_compile_options_default();
    o.opt_level = 3;
    EXPECT_STATUS(ot_compile(m, &o, &e), OT_ERR_INVALID_ARGUMENT);

    /* arena limit: fusion off makes temporaries; a tiny limit fails with the peak */
    o = ot_compile_options_default();
    o.fusion = false;
    o.arena_limit = 64;
    EXPECT_STATUS(ot_compile(m, &o, &e), OT_ERR_OUT_OF_MEMORY);
    EXPECT_STR_CONTAINS(ot_last_error(), "peak of live bytes");
    EXPECT_TRUE(e == NULL);

    o = ot_compile_options_default();
    o.dump_dir = "/nonexistent-dir/x";
    EXPECT_TRUE(ot_compile(m, &o, &e) != OT_OK);
    ot_module_free(m);
}

/* ---- serialization and fingerprints ---- */

static void test_fingerprint(void) {
    ot_module *m1 = build_adam(128, true), *m2 = build_adam(128, true), *m3 = build_adam(64, true);
    ASSERT_TRUE(m1 && m2 && m3);
    uint8_t a[32], b[32], c3[32], d[32];
    ot_compile_options o = ot_compile_options_default();
    ASSERT_OK(ot_compile_fingerprint(m1, &o, a));
    ASSERT_OK(ot_compile_fingerprint(m2, &o, b));
    ASSERT_OK(ot_compile_fingerprint(m3, &o, c3));
    EXPECT_TRUE(memcmp(a, b, 32) == 0);
    EXPECT_TRUE(memcmp(a, c3, 32) != 0);
    o.opt_level = 1;
    ASSERT_OK(ot_compile_fingerprint(m1, &o, d));
    EXPECT_TRUE(memcmp(a, d, 32) != 0);
    o = ot_compile_options_default();
    o.target = "tpu-v4";
    ASSERT_OK(ot_compile_fingerprint(m1, &o, d));
    EXPECT_TRUE(memcmp(a, d, 32) != 0);
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m1, NULL, &e));
    ot_executable_fingerprint(e, d);
    EXPECT_TRUE(memcmp(a, d, 32) == 0);
    ot_executable_free(e);
    ot_module_free(m1);
    ot_module_free(m2);
    ot_module_free(m3);
}

static void test_serialize_roundtrip(void) {
    int64_t live = ot_alloc_live();
    ot_module *m = build_adam(300, true);
    ASSERT_TRUE(m != NULL);
    for (int lvl = 0; lvl <= 2; lvl++) {
        ot_compile_options o = ot_compile_options_default();
        o.opt_level = lvl;
        ot_executable *e = NULL, *e2 = NULL;
        ASSERT_OK(ot_compile(m, &o, &e));
        void *buf = NULL, *buf2 = NULL;
        size_t len = 0, len2 = 0;
        ASSERT_OK(ot_executable_serialize(e, &buf, &len));
        ASSERT_OK(ot_executable_deserialize(buf, len, &e2));
        EXPECT_INT_EQ(ot_executable_kernel_count(e2), ot_executable_kernel_count(e));
        EXPECT_INT_EQ(ot_executable_slot_count(e2), ot_executable_slot_count(e));
        EXPECT_INT_EQ(ot_executable_arena_size(e2), ot_executable_arena_size(e));
        EXPECT_INT_EQ(ot_executable_total_flops(e2), ot_executable_total_flops(e));
        uint8_t f1[32], f2[32];
        ot_executable_fingerprint(e, f1);
        ot_executable_fingerprint(e2, f2);
        EXPECT_TRUE(memcmp(f1, f2, 32) == 0);
        ASSERT_OK(ot_executable_serialize(e2, &buf2, &len2));
        EXPECT_INT_EQ(len2, len);
        EXPECT_TRUE(len == len2 && memcmp(buf, buf2, len) == 0);
        ot_free(buf);
        ot_free(buf2);
        ot_executable_free(e);
        ot_executable_free(e2);
    }
    ot_module_free(m);
    EXPECT_INT_EQ(ot_alloc_live(), live);
}

/* serialize -> deserialize -> serialize gives the same bytes at every level for a module and
 * its compiled schedule; the written entry order is what the reader sees. */
static int roundtrip_module(ot_module *m, const char *what) {
    int bad = 0;
    for (int lvl = 0; lvl <= 2; lvl++) {
        ot_compile_options o = ot_compile_options_default();
        o.opt_level = lvl;
        o.native = OT_NATIVE_OFF; /* the round trip, not native code, is under test */
        ot_executable *e = NULL, *e2 = NULL;
        if (ot_compile(m, &o, &e) != OT_OK) { /* not this test's business */
            ot_clear_error();
            continue;
        }
        void *buf = NULL, *buf2 = NULL;
        size_t len = 0, len2 = 0;
        ot_status s = ot_executable_serialize(e, &buf, &len);
        if (s == OT_OK) s = ot_executable_deserialize(buf, len, &e2);
        if (s == OT_OK) s = ot_executable_serialize(e2, &buf2, &len2);
        if (s != OT_OK || len != len2 || memcmp(buf, buf2, len) != 0) {
            fprintf(stderr, "  round trip of %s at -O%d: %s\n", what, lvl,
                    s != OT_OK ? ot_last_error() : "bytes differ");
            ot_clear_error();
            bad++;
        }
        ot_free(buf);
        ot_free(buf2);
        ot_executable_free(e);
        ot_executable_free(e2);
    }
    return bad;
}

/* A fusion's called computation reached in a different order in the schedule than in the
 * instruction list (a broadcast and a reduce of one parameter, both returned). */
static void test_serialize_roundtrip_schedule_order(void) {
    const char *hlo = "HloModule m\n"
                      "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
                      "  ROOT s = f32[] add(a, b) }\n"
                      "ENTRY e { x = f32[64,32] parameter(0)\n z = f32[] constant(0)\n"
                      "  bc = f32[4,64,32] broadcast(x), dimensions={1,2}\n"
                      "  r = f32[64] reduce(x, z), dimensions={1}, to_apply=add\n"
                      "  ROOT t = (f32[4,64,32], f32[64]) tuple(bc, r) }\n";
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(hlo, strlen(hlo), NULL, &m));
    EXPECT_INT_EQ(roundtrip_module(m, "broadcast + reduce"), 0);
    ot_module_free(m);
}

/* Every module of the JAX corpus and the XLA HLO collection that compiles. */
static void test_serialize_roundtrip_corpus(void) {
    const char *dirs[] = {OT_SOURCE_DIR "/tests/data/jax", OT_SOURCE_DIR "/tests/data/hlo"};
    int nmod = 0, bad = 0;
    setenv("OPTITPU_CODEGEN", "0", 1); /* a loaded executable builds native code under AUTO */
    for (int d = 0; d < 2; d++) {
        DIR *dp = opendir(dirs[d]);
        ASSERT_TRUE(dp != NULL);
        struct dirent *de;
        while ((de = readdir(dp))) {
            if (de->d_name[0] == '.') continue;
            char path[1024];
            size_t nl = strlen(de->d_name);
            if (d == 0)
                snprintf(path, sizeof path, "%s/%s/module.hlo", dirs[d], de->d_name);
            else if (nl > 4 && !strcmp(de->d_name + nl - 4, ".hlo"))
                snprintf(path, sizeof path, "%s/%s", dirs[d], de->d_name);
            else
                continue;
            ot_module *m = NULL;
            if (ot_hlo_parse_file(path, NULL, &m) != OT_OK) { /* not a module this build reads */
                ot_clear_error();
                continue;
            }
            nmod++;
            bad += roundtrip_module(m, path);
            ot_module_free(m);
        }
        closedir(dp);
    }
    unsetenv("OPTITPU_CODEGEN");
    EXPECT_TRUE(nmod > 500);
    EXPECT_INT_EQ(bad, 0);
}

/* A module with every attribute kind the compiler keeps (topk, sort, gather, scatter, pad,
 * slice, windows, dot precision, convolution, compare type, reduce-precision, rng, collectives,
 * pairs, ...): compiled without fusion (-O0: every instruction keeps its own attributes), its
 * executable round-trips byte for byte, each attribute encoded by the schema's field table and
 * decoded back, and topk keeps is_stable through compilation. */
static const char k_every_attr[] =
    "HloModule every_attr\n"
    "\n"
    "add {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(a, b)\n"
    "}\n"
    "\n"
    "lt {\n"
    "  p0 = f32[] parameter(0)\n"
    "  p1 = f32[] parameter(1)\n"
    "  ROOT c = pred[] compare(p0, p1), direction=LT, type=TOTALORDER\n"
    "}\n"
    "\n"
    "ENTRY main {\n"
    "  x = f32[4,8] parameter(0)\n"
    "  idx = s32[2,1] parameter(1)\n"
    "  upd = f32[2,8] parameter(2)\n"
    "  img = f32[1,6,6,2] parameter(3)\n"
    "  ker = f32[3,3,2,4] parameter(4)\n"
    "  rs = u64[2] parameter(5)\n"
    "  rng = (u64[2], u32[8]) rng-bit-generator(rs), algorithm=rng_philox\n"
    "  rb = u32[8] get-tuple-element(rng), index=1\n"
    "  ar = f32[4,8] all-reduce(x), replica_groups={{0}}, channel_id=3, to_apply=add\n"
    "  cp = f32[4,8] collective-permute(x), channel_id=4, source_target_pairs={{0,0}}\n"
    "  ag = f32[4,8] all-gather(x), replica_groups=[1,1]<=[1], dimensions={0}\n"
    "  top = (f32[4,3], s32[4,3]) topk(x), k=3, largest=true, is_stable=true\n"
    "  t0 = f32[4,3] get-tuple-element(top), index=0\n"
    "  srt = f32[4,8] sort(x), dimensions={1}, is_stable=true, to_apply=lt\n"
    "  g = f32[2,8] gather(x, idx), offset_dims={1}, collapsed_slice_dims={0}, "
    "start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}, indices_are_sorted=true\n"
    "  sc = f32[4,8] scatter(x, idx, upd), update_window_dims={1}, inserted_window_dims={0}, "
    "scatter_dims_to_operand_dims={0}, index_vector_dim=1, unique_indices=true, to_apply=add\n"
    "  z = f32[] constant(0)\n"
    "  pd = f32[6,12] pad(x, z), padding=1_1x2_2\n"
    "  sl = f32[2,4] slice(x), slice={[0:4:2], [1:8:2]}\n"
    "  rw = f32[4,4] reduce-window(x, z), window={size=1x2 stride=1x2}, to_apply=add\n"
    "  xt = f32[8,4] transpose(x), dimensions={1,0}\n"
    "  d = f32[4,4] dot(x, xt), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
    "operand_precision={high,highest}\n"
    "  cv = f32[1,4,4,4] convolution(img, ker), window={size=3x3}, dim_labels=b01f_01io->b01f\n"
    "  cmp = pred[4,8] compare(x, srt), direction=GE, type=TOTALORDER\n"
    "  rp = f32[4,8] reduce-precision(x), exponent_bits=5, mantissa_bits=10\n"
    "  cc = f32[8,8] concatenate(x, x), dimensions={0}\n"
    "  io = s32[4,8] iota(), iota_dimension=1\n"
    "  i0 = s32[] constant(1)\n"
    "  ds = f32[2,8] dynamic-slice(x, i0, i0), dynamic_slice_sizes={2,8}\n"
    "  bc = f32[3,4,8] broadcast(x), dimensions={1,2}\n"
    "  r = f32[4] reduce(x, z), dimensions={1}, to_apply=add\n"
    "  ROOT out = (f32[4,3], f32[4,8], f32[2,8], f32[4,8], f32[6,12], f32[2,4], f32[4,4], "
    "f32[4,4], f32[1,4,4,4], pred[4,8], f32[4,8], f32[8,8], s32[4,8], f32[2,8], f32[3,4,8], "
    "f32[4], u32[8], f32[4,8], f32[4,8], f32[4,8]) tuple(t0, srt, g, sc, pd, sl, rw, d, cv, cmp, "
    "rp, cc, io, ds, bc, r, rb, ar, cp, ag)\n"
    "}\n";

static void test_serialize_every_attribute(void) {
    int64_t live = ot_alloc_live();
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(k_every_attr, strlen(k_every_attr), NULL, &m));
    ot_compile_options o = ot_compile_options_default();
    o.opt_level = 0;
    ot_executable *e = NULL, *e2 = NULL;
    ASSERT_OK(ot_compile(m, &o, &e));
    void *buf = NULL, *buf2 = NULL;
    size_t len = 0, len2 = 0;
    ASSERT_OK(ot_executable_serialize(e, &buf, &len));
    ASSERT_OK(ot_executable_deserialize(buf, len, &e2));
    ASSERT_OK(ot_executable_serialize(e2, &buf2, &len2));
    EXPECT_TRUE(len == len2 && memcmp(buf, buf2, len) == 0);
    char *text = ot_hlo_print(ot_executable_module(e2), NULL);
    ASSERT_TRUE(text != NULL);
    EXPECT_TRUE(strstr(text, "k=3, largest=true, is_stable=true") != NULL);
    EXPECT_TRUE(strstr(text, "operand_precision={high,highest}") != NULL);
    EXPECT_TRUE(strstr(text, "source_target_pairs={{0,0}}") != NULL);
    ot_free(text);
    ot_free(buf);
    ot_free(buf2);
    ot_executable_free(e);
    ot_executable_free(e2);
    ot_module_free(m);
    EXPECT_INT_EQ(ot_alloc_live(), live);
}

static void test_serialize_bad_files(void) {
    int64_t live = ot_alloc_live();
    ot_module *m = build_adam(32, true);
    ASSERT_TRUE(m != NULL);
    ot_executable *e = NULL, *bad = NULL;
    ASSERT_OK(ot_compile(m, NULL, &e));
    void *buf = NULL;
    size_t len = 0;
    ASSERT_OK(ot_executable_serialize(e, &buf, &len));
    uint8_t *b = buf, *cp = malloc(len);

    EXPECT_STATUS(ot_executable_deserialize(buf, 5, &bad), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "truncated");
    memcpy(cp, b, len);
    cp[0] = 'X';
    EXPECT_STATUS(ot_executable_deserialize(cp, len, &bad), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "magic");
    memcpy(cp, b, len);
    cp[8] = 99;
    EXPECT_STATUS(ot_executable_deserialize(cp, len, &bad), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "version");
    EXPECT_STATUS(ot_executable_deserialize(buf, len - 1, &bad), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "length");
    memcpy(cp, b, len);
    cp[len / 2] ^= 0x40;
    EXPECT_STATUS(ot_executable_deserialize(cp, len, &bad), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "checksum");
    /* a changed body with a recomputed checksum: the stored arena no longer matches */
    memcpy(cp, b, len);
    size_t tail = len - 8; /* last field: flops of the last kernel */
    cp[tail] ^= 1;
    ASSERT_OK(ot_sha256_digest(cp + 56, len - 56, cp + 24));
    EXPECT_STATUS(ot_executable_deserialize(cp, len, &bad), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "differs from the recomputed program");
    EXPECT_TRUE(bad == NULL);
    /* every truncation is refused cleanly */
    for (size_t cut = 0; cut < len; cut += 7) {
        ot_status s = ot_executable_deserialize(buf, cut, &bad);
        EXPECT_INT_EQ(s, OT_ERR_CORRUPT_DATA);
    }
    /* file round trip */
    char path[] = "/tmp/ot_exe_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    ASSERT_OK(ot_executable_save(e, path));
    ASSERT_OK(ot_executable_load(path, &bad));
    EXPECT_INT_EQ(ot_executable_kernel_count(bad), ot_executable_kernel_count(e));
    ot_executable_free(bad);
    bad = NULL;
    remove(path);
    EXPECT_STATUS(ot_executable_load(path, &bad), OT_ERR_IO);
    /* a well-formed body with values no writer produces (found by the fuzzer) */
    EXPECT_STATUS(ot_executable_load(OT_SOURCE_DIR "/tests/data/compiler/noncanonical.otx", &bad),
                  OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "canonical");
    EXPECT_TRUE(bad == NULL);
    free(cp);
    ot_free(buf);
    ot_executable_free(e);
    ot_module_free(m);
    EXPECT_INT_EQ(ot_alloc_live(), live);
}

/* A chain of over 20000 instructions (large enough that the fingerprint is hashed beside the
 * clone) with a reduction every 100 links. reducer_first: the reducer is defined before main;
 * late_operand: an early link then reads an instruction built last, so main's list is out of
 * topological order. */
static ot_module *big_chain(bool reducer_first, bool late_operand) {
    ot_module *m = ot_module_new("t");
    ot_computation *r = reducer_first ? add_reducer(m, OT_OP_ADD, OT_F32) : NULL;
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_module_set_entry(m, c);
    if (!r) r = add_reducer(m, OT_OP_ADD, OT_F32);
    ot_instr *x = ot_build_parameter(c, 0, vec(8), "x");
    ot_instr *zero = ot_build_constant_scalar(c, OT_F32, 0);
    ot_instr *h = x, *first = NULL;
    for (int k = 0; k < 21000; k++) {
        if (k % 100 == 99) {
            ot_instr *sum = ot_build_reduce(c, &h, &zero, 1, (int64_t[]){0}, 1, r);
            h = ot_build_binary(c, OT_OP_ADD, h, bcast(c, sum, vec(8)));
        } else {
            h = ot_build_binary(c, k % 2 ? OT_OP_MULTIPLY : OT_OP_ADD, h, x);
        }
        if (!first) first = h;
    }
    if (late_operand) {
        ot_instr *late = ot_build_unary(c, OT_OP_NEGATE, x);
        if (ot_instr_replace_operand(first, 1, late) != OT_OK) return NULL;
    }
    ot_computation_set_root(c, h);
    if (ot_module_finalize(m) != OT_OK) {
        ot_module_free(m);
        return NULL;
    }
    return m;
}

/* A large module compiles to the same executable module and fingerprint whether its lists are
 * in order (the clone follows them) or not (the clone follows the post orders): the same as a
 * copy printed and parsed back, whose lists are its post orders. */
static void test_clone_order_of_large_modules(void) {
    const bool cases[3][2] = {{true, false}, {false, false}, {true, true}};
    for (int k = 0; k < 3; k++) {
        ot_module *m = big_chain(cases[k][0], cases[k][1]);
        ASSERT_TRUE(m != NULL);
        char *text = ot_hlo_print(m, NULL);
        ASSERT_TRUE(text != NULL);
        ot_module *copy = NULL;
        ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &copy));
        ot_free(text);
        ot_executable *e = NULL, *ec = NULL;
        ASSERT_OK(ot_compile(m, NULL, &e));
        ASSERT_OK(ot_compile(copy, NULL, &ec));
        char *t1 = ot_hlo_print(ot_executable_module(e), NULL);
        char *t2 = ot_hlo_print(ot_executable_module(ec), NULL);
        ASSERT_TRUE(t1 && t2);
        EXPECT_TRUE(strcmp(t1, t2) == 0);
        EXPECT_INT_EQ(ot_executable_kernel_count(e), ot_executable_kernel_count(ec));
        uint8_t a[32], b[32], want[32];
        ot_executable_fingerprint(e, a);
        ot_executable_fingerprint(ec, b);
        ASSERT_OK(ot_compile_fingerprint(m, NULL, want));
        EXPECT_TRUE(memcmp(a, want, 32) == 0);
        EXPECT_TRUE(memcmp(b, want, 32) == 0);
        ot_free(t1);
        ot_free(t2);
        ot_executable_free(e);
        ot_executable_free(ec);
        ot_module_free(copy);
        ot_module_free(m);
    }
}

/* ---- fault injection ---- */

static void test_compile_alloc_failures(void) {
    ot_module *m = build_adam(64, true);
    ASSERT_TRUE(m != NULL);
    int64_t live = ot_alloc_live();
    int ok_at = 0;
    for (int n = 1; n < 20000; n++) {
        ot_executable *e = NULL;
        ot_alloc_fail_after(n);
        ot_status s = ot_compile(m, NULL, &e);
        ot_alloc_fail_after(0);
        if (s == OT_OK) {
            ok_at = n;
            ot_executable_free(e);
            break;
        }
        EXPECT_TRUE(e == NULL);
        EXPECT_INT_EQ(s, OT_ERR_OUT_OF_MEMORY);
        EXPECT_INT_EQ(ot_alloc_live(), live);
        if (s != OT_ERR_OUT_OF_MEMORY) {
            fprintf(stderr, "  allocation %d: %s\n", n, ot_last_error());
            break;
        }
    }
    EXPECT_TRUE(ok_at > 1);
    EXPECT_INT_EQ(ot_alloc_live(), live);
    /* loading under allocation failures */
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, NULL, &e));
    void *buf = NULL;
    size_t len = 0;
    ASSERT_OK(ot_executable_serialize(e, &buf, &len));
    ot_executable_free(e);
    live = ot_alloc_live();
    ok_at = 0;
    for (int n = 1; n < 20000; n++) {
        ot_executable *x = NULL;
        ot_alloc_fail_after(n);
        ot_status s = ot_executable_deserialize(buf, len, &x);
        ot_alloc_fail_after(0);
        if (s == OT_OK) {
            ok_at = n;
            ot_executable_free(x);
            break;
        }
        if (s != OT_ERR_OUT_OF_MEMORY) fprintf(stderr, "n=%d: %s\n", n, ot_last_error());
        EXPECT_INT_EQ(s, OT_ERR_OUT_OF_MEMORY);
        EXPECT_INT_EQ(ot_alloc_live(), live);
        if (s != OT_ERR_OUT_OF_MEMORY) {
            fprintf(stderr, "  allocation %d: %s\n", n, ot_last_error());
            break;
        }
    }
    EXPECT_TRUE(ok_at > 1);
    ot_free(buf);
    ot_module_free(m);
}

/* ---- constant folding ---- */

static void test_fold(void) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_instr *p = ot_build_parameter(c, 0, vec(4), "p");
    float k4[4] = {1, 2, 3, 4};
    ot_instr *a = ot_build_constant(c, vec(4), k4);
    ot_instr *sum = ot_build_binary(c, OT_OP_ADD, a, a); /* folds: 2,4,6,8 */
    ot_instr *sq = ot_build_unary(c, OT_OP_SQRT, sum);   /* folds next round */
    ot_instr *init = ot_build_constant_scalar(c, OT_F32, 0);
    ot_instr *red = ot_build_reduce(c, &a, &init, 1, (int64_t[]){0}, 1,
                                    add_reducer(m, OT_OP_ADD, OT_F32)); /* folds: 10 */
    ot_instr *bc = bcast(c, red, vec(4)); /* a bare broadcast: never folded */
    ot_instr *x = ot_build_binary(c, OT_OP_MULTIPLY, p, sq);
    ot_instr *y = ot_build_binary(c, OT_OP_ADD, x, bc);
    ot_computation_set_root(c, y);
    ASSERT_OK(ot_module_finalize(m));
    bool ch = false;
    ASSERT_OK(ot_pass_fold(m, 1 << 20, &ch));
    EXPECT_TRUE(ch);
    ASSERT_OK(ot_pass_fold(m, 1 << 20, &ch));
    ASSERT_OK(ot_pass_dce(m, NULL));
    ASSERT_OK(ot_module_verify(m));
    EXPECT_INT_EQ(count_op(c, OT_OP_SQRT), 0);
    EXPECT_INT_EQ(count_op(c, OT_OP_REDUCE), 0);
    EXPECT_INT_EQ(count_op(c, OT_OP_BROADCAST), 1);
    const ot_instr *mul = c->root->operands[0];
    ASSERT_TRUE(mul->opcode == OT_OP_MULTIPLY && mul->operands[1]->opcode == OT_OP_CONSTANT);
    const float *v = mul->operands[1]->attrs->literal->data;
    EXPECT_TRUE(v[0] == sqrtf(2) && v[3] == sqrtf(8));
    const ot_instr *b = c->root->operands[1];
    ASSERT_TRUE(b->opcode == OT_OP_BROADCAST && b->operands[0]->opcode == OT_OP_CONSTANT);
    EXPECT_TRUE(*(const float *)b->operands[0]->attrs->literal->data == 10.0f);
    ot_module_free(m);

    /* one pass folds a whole chain, whichever operand of a user turns constant last: here u's
     * first operand is a constant from the start, the second one only once v is folded */
    m = new_mod(&c);
    ot_instr *c2 = ot_build_constant_scalar(c, OT_F32, 2);
    ot_instr *a1 = ot_build_constant_scalar(c, OT_F32, 1);
    ot_instr *v1 = ot_build_unary(c, OT_OP_NEGATE, a1);
    ot_instr *u1 = ot_build_binary(c, OT_OP_ADD, c2, v1);
    ot_computation_set_root(c, ot_build_binary(c, OT_OP_MULTIPLY, u1, u1));
    ASSERT_OK(ot_module_finalize(m));
    ASSERT_OK(ot_pass_fold(m, 1 << 20, &ch));
    EXPECT_TRUE(ch);
    ASSERT_OK(ot_pass_dce(m, NULL));
    ASSERT_OK(ot_module_verify(m));
    EXPECT_INT_EQ(c->root->opcode, OT_OP_CONSTANT);
    EXPECT_TRUE(*(const float *)c->root->attrs->literal->data == 1.0f);
    EXPECT_INT_EQ(c->ninstrs, 1);
    ot_module_free(m);

    /* the size cap: a result over max_elements stays */
    m = new_mod(&c);
    float big[64] = {0};
    ot_instr *k = ot_build_constant(c, vec(64), big);
    ot_computation_set_root(c, ot_build_unary(c, OT_OP_EXP, k));
    ASSERT_OK(ot_module_finalize(m));
    ASSERT_OK(ot_pass_fold(m, 32, &ch));
    EXPECT_TRUE(!ch);
    EXPECT_INT_EQ(c->root->opcode, OT_OP_EXP);
    ASSERT_OK(ot_pass_fold(m, 64, &ch));
    EXPECT_TRUE(ch);
    EXPECT_INT_EQ(c->root->opcode, OT_OP_CONSTANT);
    ot_module_free(m);

    /* side effects are never folded */
    m = new_mod(&c);
    uint64_t st[2] = {1, 2};
    ot_shape ss;
    ot_shape_make(&ss, OT_U64, 1, (int64_t[]){2});
    ot_instr *rs = ot_build_constant(c, ss, st);
    ot_shape bits;
    ot_shape_make(&bits, OT_U32, 1, (int64_t[]){8});
    ot_computation_set_root(c, ot_build_rng_bit_generator(c, rs, bits, OT_RNG_PHILOX));
    ASSERT_OK(ot_module_finalize(m));
    ASSERT_OK(ot_pass_fold(m, 1 << 20, &ch));
    EXPECT_TRUE(!ch);
    ot_module_free(m);
}

/* ---- HLO text in, dumps out ---- */

static const char *k_hlo = "HloModule axpy\n"
                           "\n"
                           "ENTRY main {\n"
                           "  a = f32[] parameter(0)\n"
                           "  x = f32[1024] parameter(1)\n"
                           "  y = f32[1024] parameter(2)\n"
                           "  one = f32[] constant(1)\n"
                           "  two = f32[] constant(2)\n"
                           "  half = f32[] divide(one, two)\n"
                           "  ab = f32[1024] broadcast(a), dimensions={}\n"
                           "  ax = f32[1024] multiply(ab, x)\n"
                           "  xa = f32[1024] multiply(x, ab)\n"
                           "  s = f32[1024] add(ax, xa)\n"
                           "  hb = f32[1024] broadcast(half), dimensions={}\n"
                           "  t = f32[1024] multiply(s, hb)\n"
                           "  ROOT r = f32[1024] add(t, y)\n"
                           "}\n";

static void test_hlo_text_and_dumps(void) {
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(k_hlo, strlen(k_hlo), NULL, &m));
    char dir[] = "/tmp/ot_dump_XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    ot_compile_options o = ot_compile_options_default();
    o.dump_dir = dir;
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, &o, &e));
    EXPECT_INT_EQ(ot_executable_kernel_count(e), 1);
    /* cse merged a*x and x*a; fold computed 1/2; fusion made one loop */
    const ot_kernel *k = ot_executable_kernel(e, 0);
    EXPECT_INT_EQ(k->ninputs, 3);
    char *text = ot_hlo_print(ot_executable_module(e), NULL);
    ASSERT_TRUE(text != NULL);
    EXPECT_STR_CONTAINS(text, "fusion(");
    EXPECT_STR_CONTAINS(text, "constant(0.5)");
    /* the compiled module prints and parses back */
    ot_module *back = NULL;
    EXPECT_OK(ot_hlo_parse(text, strlen(text), NULL, &back));
    ot_module_free(back);
    ot_free(text);
    ot_executable_free(e);
    char path[256];
    snprintf(path, sizeof path, "%s/00.inline.hlo", dir); /* the first pass of -O2 */
    FILE *f0 = fopen(path, "r");
    EXPECT_TRUE(f0 != NULL);
    if (f0) fclose(f0);
    snprintf(path, sizeof path, "%s/01.licm.hlo", dir); /* the fixed-point group's first */
    FILE *fl = fopen(path, "r");
    EXPECT_TRUE(fl != NULL);
    if (fl) fclose(fl);
    snprintf(path, sizeof path, "%s/02.simplify.hlo", dir);
    FILE *f = fopen(path, "r");
    EXPECT_TRUE(f != NULL);
    if (f) fclose(f);
    int files = 0;
    for (int seq = 0; seq < 64; seq++) {
        const char *names[] = {"inline", "licm", "simplify", "cse", "fold", "dce", "fuse"};
        for (int q = 0; q < 7; q++) {
            for (int ext = 0; ext < 2; ext++) {
                snprintf(path, sizeof path, "%s/%02d.%s.%s", dir, seq, names[q],
                         ext ? "dot" : "hlo");
                if (remove(path) == 0) files++;
            }
        }
    }
    EXPECT_TRUE(files >= 10);
    EXPECT_INT_EQ(files % 2, 0);
    /* only after one pass */
    o.dump_after = "fuse";
    ASSERT_OK(ot_compile(m, &o, &e));
    ot_executable_free(e);
    files = 0;
    for (int seq = 0; seq < 64; seq++) {
        snprintf(path, sizeof path, "%s/%02d.fuse.hlo", dir, seq);
        if (remove(path) == 0) files++;
        snprintf(path, sizeof path, "%s/%02d.fuse.dot", dir, seq);
        remove(path);
    }
    EXPECT_INT_EQ(files, 1);
    rmdir(dir);
    ot_module_free(m);
}

/* ---- random graphs: -O0 and -O2 evaluate identically ---- */

static uint64_t rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* An f32 or s32 array of shape sh, filled from the generator: floats (k - 1000) / scale for k
 * in 0..2000, integers in -100..99. */
static ot_status alloc_filled(ot_value *v, const ot_shape *sh, float scale, uint64_t *s) {
    OT_CHECK(ot_value_alloc_array(v, sh));
    ot_tensor *t = &v->array;
    int64_t n = ot_shape_numel_unchecked(&t->shape);
    for (int64_t j = 0; j < n; j++) {
        if (t->shape.dtype == OT_F32)
            ((float *)t->data)[j] = (float)((int)(rnd(s) % 2001) - 1000) / scale;
        else
            ((int32_t *)t->data)[j] = (int32_t)(rnd(s) % 200) - 100;
    }
    return OT_OK;
}

/* A random graph of elementwise ops, broadcasts, reshapes and reductions over f32[4,8] and
 * s32[4,8], with constants that give simplify and fold work (x*1, x+0, x/4, constant
 * subexpressions) and repeated subexpressions for CSE. */
static ot_module *random_graph(uint64_t seed) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape fs = mat2(OT_F32, 4, 8), is = mat2(OT_S32, 4, 8);
    ot_computation *fsum = add_reducer(m, OT_OP_ADD, OT_F32);
    ot_computation *fmax = add_reducer(m, OT_OP_MAXIMUM, OT_F32);
    ot_computation *isum = add_reducer(m, OT_OP_ADD, OT_S32);
    ot_instr *fv[64], *iv[64];
    int nf = 0, ni = 0;
    fv[nf++] = ot_build_parameter(c, 0, fs, "f0");
    fv[nf++] = ot_build_parameter(c, 1, fs, "f1");
    iv[ni++] = ot_build_parameter(c, 2, is, "i0");
    iv[ni++] = ot_build_parameter(c, 3, is, "i1");
    ot_instr *row = ot_build_parameter(c, 4, vec(8), "row");
    static const ot_opcode fbin[] = {OT_OP_ADD,     OT_OP_SUBTRACT, OT_OP_MULTIPLY,
                                     OT_OP_MAXIMUM, OT_OP_MINIMUM,  OT_OP_DIVIDE};
    static const ot_opcode fun[] = {OT_OP_NEGATE, OT_OP_ABS, OT_OP_TANH, OT_OP_EXP, OT_OP_FLOOR};
    static const ot_opcode ibin[] = {OT_OP_ADD,     OT_OP_SUBTRACT, OT_OP_MULTIPLY,
                                     OT_OP_MAXIMUM, OT_OP_AND,      OT_OP_XOR};
    for (int step = 0; step < 40; step++) {
        ot_instr *a = fv[rnd(&seed) % nf], *b = fv[rnd(&seed) % nf];
        ot_instr *ia = iv[rnd(&seed) % ni], *ib = iv[rnd(&seed) % ni];
        ot_instr *x = NULL, *y = NULL;
        switch (rnd(&seed) % 12) {
        case 0: x = ot_build_binary(c, fbin[rnd(&seed) % 6], a, b); break;
        case 1: x = ot_build_unary(c, fun[rnd(&seed) % 5], a); break;
        case 2: x = ot_build_binary(c, OT_OP_MULTIPLY, a, fconst(c, 1.0, fs)); break;
        case 3: x = ot_build_binary(c, OT_OP_DIVIDE, a, fconst(c, 4.0, fs)); break;
        case 4:
            x = ot_build_binary(c, OT_OP_ADD, a, ot_build_broadcast(c, row, fs, (int64_t[]){1}, 1));
            break;
        case 5: {
            ot_instr *init = ot_build_constant_scalar(c, OT_F32, 0);
            int64_t d = (int64_t)(rnd(&seed) % 2);
            ot_instr *r = ot_build_reduce(c, &a, &init, 1, &d, 1, rnd(&seed) % 2 ? fsum : fmax);
            x = ot_build_broadcast(c, r, fs, (int64_t[]){1 - d}, 1);
            break;
        }
        case 6: {
            ot_instr *p = ot_build_compare(c, a, b, OT_CMP_LT, OT_CMP_TYPE_DEFAULT);
            x = ot_build_select(c, p, a, b);
            break;
        }
        case 7: x = ot_build_convert(c, ia, OT_F32); break;
        case 8: y = ot_build_binary(c, ibin[rnd(&seed) % 6], ia, ib); break;
        case 9: y = ot_build_convert(c, ot_build_unary(c, OT_OP_FLOOR, a), OT_S32); break;
        case 10: {
            ot_instr *init = ot_build_constant_scalar(c, OT_S32, 0);
            ot_instr *r = ot_build_reduce(c, &ia, &init, 1, (int64_t[]){0}, 1, isum);
            y = ot_build_broadcast(c, r, is, (int64_t[]){1}, 1);
            break;
        }
        default: {
            /* a constant subexpression and a reshape round trip */
            ot_instr *k = ot_build_binary(c, OT_OP_ADD, ot_build_constant_scalar(c, OT_F32, 0.5),
                                          ot_build_constant_scalar(c, OT_F32, 0.25));
            ot_instr *r = ot_build_reshape(c, a, mat2(OT_F32, 8, 4));
            x = ot_build_binary(c, OT_OP_MULTIPLY, ot_build_reshape(c, r, fs), bcast(c, k, fs));
            break;
        }
        }
        if (x && nf < 64) fv[nf++] = x;
        if (y && ni < 64) iv[ni++] = y;
    }
    ot_instr *outs[] = {fv[nf - 1], fv[nf - 2], fv[nf / 2], iv[ni - 1], iv[ni / 2]};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 5));
    if (ot_module_finalize(m) != OT_OK) {
        ot_module_free(m);
        return NULL;
    }
    return m;
}

static void test_random_graphs_O0_O2(void) {
    for (uint64_t seed = 1; seed <= 60; seed++) {
        ot_module *m = random_graph(seed);
        ASSERT_TRUE(m != NULL);
        uint64_t s = seed * 7919;
        ot_value args[5];
        ot_computation *entry = ot_module_entry(m);
        for (int k = 0; k < 5; k++)
            ASSERT_OK(alloc_filled(&args[k], &entry->params[k]->shape.array, 256.0f, &s));
        ot_value ref = ot_value_empty();
        ASSERT_OK(ot_evaluate(m, args, 5, NULL, &ref));
        for (int lvl = 0; lvl <= 2; lvl += 2) {
            ot_compile_options o = ot_compile_options_default();
            o.opt_level = lvl;
            o.verify_each = true;
            ot_executable *e = NULL;
            ASSERT_OK(ot_compile(m, &o, &e));
            ot_value got = ot_value_empty();
            EXPECT_OK(ot_evaluate(ot_executable_module(e), args, 5, NULL, &got));
            /* every rewrite is exact: bitwise equal, floats included (0 ulp) */
            if (!ot_value_equal(&ref, &got))
                OT_T_FAIL_("seed %llu -O%d: results differ", (unsigned long long)seed, lvl);
            ot_value_release(&got);
            ot_executable_free(e);
        }
        ot_value_release(&ref);
        for (int k = 0; k < 5; k++) ot_value_release(&args[k]);
        ot_module_free(m);
    }
}

/* ---- graph shapes that once broke fusion: residual chains, random multi-use DAGs ---- */

/* Inputs for m's entry parameters (f32 or s32 arrays, seeded), the reference result, then -O2
 * (verified after every pass): the compiled module evaluates to the same bits. Returns the
 * executable's kernel count (-1 on failure) and, in *max_fused, the largest fused computation's
 * instruction count. */
static int exact_at_O2(ot_module *m, uint64_t seed, int64_t *max_fused, double *compile_s) {
    ot_computation *entry = ot_module_entry(m);
    int np = entry->nparams;
    ot_value *args = calloc((size_t)np, sizeof *args);
    if (!args) return -1;
    int kernels = -1;
    for (int k = 0; k < np; k++)
        if (alloc_filled(&args[k], &entry->params[k]->shape.array, 1024.0f, &seed) != OT_OK)
            goto out;
    ot_value ref = ot_value_empty(), got = ot_value_empty();
    EXPECT_OK(ot_evaluate(m, args, np, NULL, &ref));
    ot_compile_options o = ot_compile_options_default();
    o.verify_each = true;
    ot_executable *e = NULL;
    uint64_t t0 = ot_now_ns();
    ot_status st = ot_compile(m, &o, &e);
    if (compile_s) *compile_s = (double)(ot_now_ns() - t0) * 1e-9;
    EXPECT_OK(st);
    if (st == OT_OK) {
        EXPECT_OK(ot_evaluate(ot_executable_module(e), args, np, NULL, &got));
        if (!ot_value_equal(&ref, &got))
            OT_T_FAIL_("seed %llu: results differ", (unsigned long long)seed);
        kernels = ot_executable_kernel_count(e);
        const ot_module *em = ot_executable_module(e);
        *max_fused = 0;
        for (int q = 0; q < ot_module_computation_count(em); q++) {
            const ot_computation *x = ot_module_computation(em, q);
            if (strncmp(x->name, "fused_computation", 17) != 0) continue;
            int64_t body = 0; /* members: parameters and a root tuple aside */
            for (const ot_instr *i = x->first; i; i = i->next)
                body += i->opcode != OT_OP_PARAMETER && !(i == x->root && i->opcode == OT_OP_TUPLE);
            if (body > *max_fused) *max_fused = body;
        }
    }
    ot_value_release(&got);
    ot_value_release(&ref);
    ot_executable_free(e);
out:
    for (int k = 0; k < np; k++) ot_value_release(&args[k]);
    free(args);
    return kernels;
}

/* x_i = op(x_{i-1}, x_{i-back}) over f32[16]: a residual stack or an unrolled recurrence. The
 * fusion analysis once walked every path through it (Fibonacci many: 50 instructions never
 * compiled) and fusion copied whole chains into the clusters reading their ends. */
static ot_module *residual_chain(int n, int back) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_instr **x = malloc((size_t)n * sizeof *x);
    x[0] = ot_build_parameter(c, 0, vec(16), "x0");
    x[1] = ot_build_parameter(c, 1, vec(16), "x1");
    static const ot_opcode ops[] = {OT_OP_ADD, OT_OP_MULTIPLY, OT_OP_SUBTRACT, OT_OP_MAXIMUM};
    for (int i = 2; i < n; i++)
        x[i] = ot_build_binary(c, ops[i % 4], x[i - 1], x[i - back > 0 ? i - back : 0]);
    ot_computation_set_root(c, ot_build_unary(c, OT_OP_TANH, x[n - 1]));
    free(x);
    ot_module_finalize(m);
    return m;
}

static void test_fuse_residual_chain(void) {
    for (int back = 2; back <= 3; back++) {
        for (int n = 50; n <= 5000; n *= 10) {
            ot_module *m = residual_chain(n, back);
            int64_t biggest = 0;
            double secs = 0;
            int kernels = exact_at_O2(m, (uint64_t)n * 31 + (uint64_t)back, &biggest, &secs);
            /* a guard against blow-ups only (2.5 ms here for 5,000) */
            EXPECT_TRUE(secs < 5.0);
            EXPECT_TRUE(kernels >= 1 && kernels <= n / 64 + 2);
            EXPECT_TRUE(biggest <= OT_FUSION_MAX_INSTRUCTIONS);
            ot_module_free(m);
        }
    }
}

/* A chain of cheap unary ops: one cluster would take all of it, so the size cap splits it. */
static void test_fuse_size_capped(void) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_instr *x = ot_build_parameter(c, 0, vec(16), "x");
    for (int i = 0; i < 3 * OT_FUSION_MAX_INSTRUCTIONS; i++)
        x = ot_build_unary(c, i % 2 ? OT_OP_NEGATE : OT_OP_ABS, x);
    ot_computation_set_root(c, x);
    ot_module_finalize(m);
    int64_t biggest = 0;
    int kernels = exact_at_O2(m, 5, &biggest, NULL);
    EXPECT_INT_EQ(biggest, OT_FUSION_MAX_INSTRUCTIONS);
    EXPECT_INT_EQ(kernels, 3);
    ot_module_free(m);
}

/* A chain of cheap ops over x read at two depths, each read feeding an output of its own
 * (threefry's rounds: one output taps the chain, the next round goes on from it): the two
 * output loops run as one fusion computing the chain once and storing both outputs, however
 * deep the tap (copies of the chain into two loops stop at a depth and split it, storing
 * intermediates), and the results are the reference's bits. */
static ot_module *tapped_chain(int n, int tap, bool three) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_shape s = mat2(OT_F32, 37, 29);
    ot_instr *x = ot_build_parameter(c, 0, s, "x");
    ot_instr *y = ot_build_parameter(c, 1, s, "y");
    ot_instr *k = bcast(c, ot_build_parameter(c, 2, ot_shape_scalar(OT_F32), "k"), s);
    static const ot_opcode ops[] = {OT_OP_ADD, OT_OP_MULTIPLY, OT_OP_SUBTRACT, OT_OP_MAXIMUM};
    ot_instr *outs[3], *t = NULL, *t2 = NULL;
    for (int i = 0; i < n; i++) {
        x = ot_build_binary(c, ops[i % 4], x, i % 3 ? y : k);
        if (i == tap) t = x;
        if (i == tap / 2) t2 = x;
    }
    outs[0] = ot_build_binary(c, OT_OP_ADD, t, k);
    outs[1] = ot_build_binary(c, OT_OP_MULTIPLY, x, k);
    outs[2] = ot_build_binary(c, OT_OP_SUBTRACT, t2, y);
    ot_computation_set_root(c, ot_build_tuple(c, outs, three ? 3 : 2));
    ot_module_finalize(m);
    return m;
}

static void test_fuse_tapped_chain(void) {
    static const int shapes[][2] = {{6, 1}, {10, 2}, {16, 5}, {24, 3}, {40, 20}};
    for (int q = 0; q < 5; q++) {
        for (int three = 0; three <= 1; three++) {
            ot_module *m = tapped_chain(shapes[q][0], shapes[q][1], three);
            int64_t biggest = 0;
            int kernels = exact_at_O2(m, (uint64_t)q * 7 + (uint64_t)three, &biggest, NULL);
            if (kernels != 1)
                fprintf(stderr, "chain %d tap %d%s: %d kernels\n", shapes[q][0], shapes[q][1],
                        three ? " (three outputs)" : "", kernels);
            EXPECT_INT_EQ(kernels, 1);
            /* computed once: the chain and the outputs, no copies */
            EXPECT_TRUE(biggest <= shapes[q][0] + 4 + (three ? 1 : 0));
            ot_module_free(m);
        }
    }
}

/* Calls nested 40 deep, each level calling the one below twice: 2^40 instructions once
 * inlined. Inlining refuses with RESOURCE_EXHAUSTED naming its limit, at once. */
static void test_inline_size_limit(void) {
    ot_module *m = ot_module_new("t");
    ot_computation *below = ot_module_add_computation(m, "f0");
    ot_instr *p = ot_build_parameter(below, 0, vec(16), "x");
    ot_computation_set_root(below, ot_build_unary(below, OT_OP_NEGATE, p));
    for (int d = 1; d <= 40; d++) {
        char name[16];
        snprintf(name, sizeof name, "f%d", d);
        ot_computation *f = ot_module_add_computation(m, name);
        ot_instr *x = ot_build_parameter(f, 0, vec(16), "x");
        ot_instr *a = ot_build_call(f, below, &x, 1);
        ot_instr *b = ot_build_call(f, below, &a, 1);
        ot_computation_set_root(f, b);
        below = f;
    }
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_module_set_entry(m, c);
    ot_instr *x = ot_build_parameter(c, 0, vec(16), "x");
    ot_computation_set_root(c, ot_build_call(c, below, &x, 1));
    ASSERT_OK(ot_module_finalize(m));
    uint64_t t0 = ot_now_ns();
    EXPECT_STATUS(ot_pass_inline(m, NULL), OT_ERR_RESOURCE_EXHAUSTED);
    EXPECT_STR_CONTAINS(ot_last_error(), "OT_INLINE_MAX_INSTRUCTIONS");
    EXPECT_TRUE(ot_now_ns() - t0 < 1000000000ull);
    ot_executable *e = NULL;
    EXPECT_STATUS(ot_compile(m, NULL, &e), OT_ERR_RESOURCE_EXHAUSTED);
    ot_module_free(m);
}

/* A random DAG over f32[16]: unary and binary ops whose operands favour recent values (so
 * values are read several times, near and far), reductions and dots broadcast back. */
static ot_module *random_dag(uint64_t seed, int n) {
    ot_computation *c;
    ot_module *m = new_mod(&c);
    ot_computation *sum = add_reducer(m, OT_OP_ADD, OT_F32);
    ot_instr **v = malloc((size_t)(n + 2) * sizeof *v);
    int nv = 0;
    v[nv++] = ot_build_parameter(c, 0, vec(16), "p0");
    v[nv++] = ot_build_parameter(c, 1, vec(16), "p1");
    static const ot_opcode un[] = {OT_OP_EXP, OT_OP_SIN, OT_OP_TANH, OT_OP_ABS, OT_OP_NEGATE};
    static const ot_opcode bin[] = {OT_OP_ADD, OT_OP_MULTIPLY, OT_OP_SUBTRACT, OT_OP_MAXIMUM,
                                    OT_OP_MINIMUM};
    while (nv < n) {
        int pick[2];
        for (int j = 0; j < 2; j++) {
            uint64_t r = rnd(&seed);
            int back = r % 4 ? (int)(rnd(&seed) % 6) : (int)(rnd(&seed) % (uint64_t)nv);
            pick[j] = nv - 1 - (back < nv ? back : nv - 1);
        }
        uint64_t kind = rnd(&seed) % 22;
        ot_instr *x;
        if (kind >= 20) {
            /* a dot (never fused) of two values, broadcast back: paths leaving the clusters */
            ot_dot_dims dn = {0};
            dn.ncontract = 1;
            ot_instr *d = ot_build_dot(c, v[pick[0]], v[pick[1]], &dn, OT_PRECISION_DEFAULT,
                                       OT_PRECISION_DEFAULT);
            x = ot_build_broadcast(c, d, vec(16), NULL, 0);
        } else if (kind < 7) {
            x = ot_build_unary(c, un[rnd(&seed) % 5], v[pick[0]]);
        } else if (kind < 17) {
            x = ot_build_binary(c, bin[rnd(&seed) % 5], v[pick[0]], v[pick[1]]);
        } else {
            ot_instr *init = ot_build_constant_scalar(c, OT_F32, 0);
            ot_instr *in = v[pick[0]];
            ot_instr *r = ot_build_reduce(c, &in, &init, 1, (int64_t[]){0}, 1, sum);
            x = ot_build_broadcast(c, r, vec(16), NULL, 0);
        }
        v[nv++] = x;
    }
    ot_instr *outs[] = {v[nv - 1], v[nv - 2], v[nv / 2], v[nv - 7]};
    ot_computation_set_root(c, ot_build_tuple(c, outs, 4));
    free(v);
    ot_module_finalize(m);
    return m;
}

/* A scalar constant read by a scalar loss (sum * 1e-3) and, through a broadcast, by a gradient's
 * row sum that is a sibling of the loss's row sum (the shape of a log-softmax value_and_grad):
 * the constant stays in the entry, copied into each fusion, instead of becoming the loss
 * cluster's output, which closed a cycle (row sums -> loss -> constant -> row sums) once the two
 * row sums merged, and the cycle check then split the clusters into single kernels (a stored
 * array of 1e-3 among them). Two fusions, no split, the same bits as the reference. */
static void test_fuse_shared_scalar_constant(void) {
    static const char text[] =
        "HloModule t\n"
        "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
        "ENTRY e {\n"
        "  x = f32[64,300] parameter(0)\n  k = f32[] constant(0.001)\n  z = f32[] constant(0)\n"
        "  e = f32[64,300] exponential(x)\n"
        "  r1 = f32[64] reduce(e, z), dimensions={1}, to_apply=add\n"
        "  s = f32[] reduce(r1, z), dimensions={0}, to_apply=add\n"
        "  loss = f32[] multiply(s, k)\n"
        "  kb = f32[64,300] broadcast(k), dimensions={}\n"
        "  g = f32[64,300] multiply(x, kb)\n"
        "  r2 = f32[64] reduce(g, z), dimensions={1}, to_apply=add\n"
        "  ROOT t = (f32[], f32[64]) tuple(loss, r2)\n}\n";
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &m));
    int64_t before = cc_fuse_test.splits;
    ASSERT_OK(ot_pass_fuse(m, 0, NULL));
    ASSERT_OK(ot_pass_dce(m, NULL));
    ASSERT_OK(ot_module_verify(m));
    EXPECT_INT_EQ(cc_fuse_test.splits, before);
    const ot_computation *c = ot_module_entry(m);
    EXPECT_INT_EQ(count_op(c, OT_OP_FUSION), 2);
    EXPECT_INT_EQ(count_op(c, OT_OP_CONSTANT), 0);
    for (const ot_instr *i = c->first; i; i = i->next)
        if (i->opcode == OT_OP_FUSION) EXPECT_TRUE(i->noperands > 0); /* no stored constant */
    ot_module_free(m);
    ASSERT_OK(ot_hlo_parse(text, strlen(text), NULL, &m));
    int64_t biggest = 0;
    EXPECT_INT_EQ(exact_at_O2(m, 7, &biggest, NULL), 2);
    ot_module_free(m);
}

static void test_fuse_random_dags(void) {
    for (uint64_t seed = 1; seed <= 40; seed++) {
        ot_module *m = random_dag(seed, 100 + (int)(seed * 37 % 400));
        int64_t biggest = 0;
        EXPECT_TRUE(exact_at_O2(m, seed, &biggest, NULL) > 0);
        ot_module_free(m);
    }
}

/* With the reachability searches off, every multi-output join and sibling merge is taken; the
 * exact check after clustering must then split what would close a cycle, and the result must
 * verify (acyclic) and evaluate to the same bits. */
static void test_fuse_cycle_check_alone(void) {
    int64_t before = cc_fuse_test.splits;
    cc_fuse_test.no_search = true;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        ot_module *m = seed % 2 ? random_dag(seed, 200) : random_graph(seed);
        int64_t biggest = 0;
        EXPECT_TRUE(exact_at_O2(m, seed, &biggest, NULL) > 0);
        ot_module_free(m);
    }
    cc_fuse_test.no_search = false;
    EXPECT_TRUE(cc_fuse_test.splits > before); /* the check had cycles to break */
}

/* Removed instructions' storage: never reused within the pass that removed them (it may still
 * compare pointers it holds), reused by the passes after it. */
typedef struct reuse_ctx {
    ot_instr *removed, *removed2;
    bool same_pass_reused, next_pass_reused;
} reuse_ctx;

static ot_status pass_remove_one(ot_module *m, void *ctx, bool *changed) {
    reuse_ctx *r = ctx;
    ot_computation *c = ot_module_entry(m);
    ot_instr *root = c->root, *b = root->operands[1];
    ot_instr *a = root->operands[0];
    OT_CHECK(ot_instr_replace_all_uses(b, a));
    OT_CHECK(ot_instr_remove(b));
    r->removed = b;
    ot_instr *x = c->params[0];
    ot_instr *n = ot_build_unary(c, OT_OP_EXP, x);
    if (!n) return ot_module_status(m);
    r->same_pass_reused = n == b;
    OT_CHECK(ot_instr_remove(n));
    r->removed2 = n;
    *changed = true;
    return OT_OK;
}

static ot_status pass_build_one(ot_module *m, void *ctx, bool *changed) {
    reuse_ctx *r = ctx;
    ot_computation *c = ot_module_entry(m);
    ot_instr *x = c->params[0];
    ot_instr *n = ot_build_unary(c, OT_OP_LOG, x);
    if (!n) return ot_module_status(m);
    r->next_pass_reused = n == r->removed || n == r->removed2;
    ot_instr *t = ot_build_binary(c, OT_OP_ADD, c->root, n);
    if (!t) return ot_module_status(m);
    ot_computation_set_root(c, t);
    *changed = true;
    return ot_module_status(m);
}

static void test_removed_storage_reused_between_passes(void) {
    ot_module *m = ot_module_new(NULL);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_shape v;
    ot_shape_make(&v, OT_F32, 1, (int64_t[]){4});
    ot_instr *x = ot_build_parameter(c, 0, v, "x");
    ot_instr *a = ot_build_unary(c, OT_OP_NEGATE, x);
    ot_instr *b = ot_build_unary(c, OT_OP_NEGATE, x);
    ot_computation_set_root(c, ot_build_binary(c, OT_OP_ADD, a, b));
    ot_module_set_entry(m, c);
    ASSERT_OK(ot_module_finalize(m));
    reuse_ctx r = {0};
    ot_pass_manager *pm = ot_pass_manager_new();
    ASSERT_OK(ot_pass_manager_add(pm, "remove", pass_remove_one, &r));
    ASSERT_OK(ot_pass_manager_add(pm, "build", pass_build_one, &r));
    ASSERT_OK(ot_pass_manager_run(pm, m));
    EXPECT_TRUE(!r.same_pass_reused);
    EXPECT_TRUE(r.next_pass_reused);
    EXPECT_OK(ot_module_verify(m));
    EXPECT_INT_EQ(ot_module_instr_count(m), 5);
    ot_pass_manager_free(pm);
    ot_module_free(m);
}

OT_TEST_MAIN(OT_TEST(test_pass_manager), OT_TEST(test_removed_storage_reused_between_passes),
             OT_TEST(test_dce), OT_TEST(test_orders_kept_between_passes), OT_TEST(test_cse),
             OT_TEST(test_cse_commuted_operands), OT_TEST(test_cse_called_by_structure),
             OT_TEST(test_simplify), OT_TEST(test_simplify_gather),
             OT_TEST(test_simplify_indices_reshape), OT_TEST(test_simplify_transpose_reshape),
             OT_TEST(test_simplify_pad_window), OT_TEST(test_simplify_reduce_size1),
             OT_TEST(test_simplify_dot_transpose), OT_TEST(test_simplify_dot_fold_transpose),
             OT_TEST(test_inline_calls), OT_TEST(test_fuse_elementwise_chain),
             OT_TEST(test_fusion_analysis_follows_edits), OT_TEST(test_fuse_never_list),
             OT_TEST(test_fuse_while_not_fused), OT_TEST(test_fuse_reductions),
             OT_TEST(test_fuse_wide_constant_copied), OT_TEST(test_fuse_no_duplicate_expensive),
             OT_TEST(test_fuse_scalar_broadcast_beside_scatter),
             OT_TEST(test_fuse_shared_scalar_constant),
             OT_TEST(test_fuse_expensive_reused_elements), OT_TEST(test_fuse_no_cycle),
             OT_TEST(test_fuse_long_paths), OT_TEST(test_fuse_multi_output_siblings),
             OT_TEST(test_fuse_io_limit), OT_TEST(test_adam_one_kernel_in_place),
             OT_TEST(test_schedule_and_buffers), OT_TEST(test_in_place_reuse),
             OT_TEST(test_outputs_and_donation), OT_TEST(test_options), OT_TEST(test_fingerprint),
             OT_TEST(test_clone_order_of_large_modules), OT_TEST(test_serialize_roundtrip),
             OT_TEST(test_serialize_roundtrip_schedule_order),
             OT_TEST(test_serialize_roundtrip_corpus), OT_TEST(test_serialize_every_attribute),
             OT_TEST(test_serialize_bad_files), OT_TEST(test_compile_alloc_failures),
             OT_TEST(test_fold), OT_TEST(test_hlo_text_and_dumps),
             OT_TEST(test_random_graphs_O0_O2), OT_TEST(test_fuse_residual_chain),
             OT_TEST(test_fuse_tapped_chain), OT_TEST(test_fuse_size_capped),
             OT_TEST(test_fuse_random_dags), OT_TEST(test_fuse_cycle_check_alone),
             OT_TEST(test_inline_size_limit), OT_TEST(test_simplify_unflip_scan),
             OT_TEST(test_licm), OT_TEST(test_fuse_expensive_padded))
