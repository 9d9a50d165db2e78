/* The convenience builders: each fills ot_attrs and calls ot_build (sticky error). */
#include "ir_internal.h"

#include <math.h>

#define MODULE_OK(c) ((c) && (c)->module->err == OT_OK)

static ot_ir_shape dtype_hint(ot_dtype t) {
    ot_ir_shape h = ot_ir_shape_scalar(t);
    h.array.rank = -1;
    return h;
}

ot_instr *ot_build_parameter_ir(ot_computation *c, int64_t number, const ot_ir_shape *shape,
                                const char *name) {
    ot_attrs a = {0};
    a.index = number;
    return ot_build(c, OT_OP_PARAMETER, NULL, 0, &a, NULL, 0, shape, name);
}

ot_instr *ot_build_parameter(ot_computation *c, int64_t number, ot_shape shape, const char *name) {
    ot_ir_shape s = ot_ir_shape_array(shape);
    return ot_build_parameter_ir(c, number, &s, name);
}

ot_instr *ot_build_constant(ot_computation *c, ot_shape shape, const void *data) {
    if (!MODULE_OK(c)) return NULL;
    int64_t nb;
    if (ot_shape_nbytes(&shape, &nb) != OT_OK) {
        ir_record(c->module, OT_ERR_INVALID_ARGUMENT);
        return NULL;
    }
    if (nb && !data) {
        ir_fail(c->module, OT_ERR_INVALID_ARGUMENT, "constant: data is NULL");
        return NULL;
    }
    ot_literal l = {false, nb, data};
    ot_attrs a = {0};
    a.literal = &l;
    ot_ir_shape s = ot_ir_shape_array(shape);
    return ot_build(c, OT_OP_CONSTANT, NULL, 0, &a, NULL, 0, &s, NULL);
}

ot_instr *ot_build_constant_scalar(ot_computation *c, ot_dtype t, double v) {
    union {
        uint8_t u8;
        int8_t s8;
        int16_t s16;
        int32_t s32;
        int64_t s64;
        uint16_t u16;
        uint32_t u32;
        uint64_t u64;
        float f32;
        double f64;
        float c64[2];
        double c128[2];
    } u;
    memset(&u, 0, sizeof u);
    switch (t) {
    case OT_PRED: u.u8 = v != 0; break;
    case OT_S8: u.s8 = (int8_t)v; break;
    case OT_S16: u.s16 = (int16_t)v; break;
    case OT_S32: u.s32 = (int32_t)v; break;
    case OT_S64: u.s64 = (int64_t)v; break;
    case OT_U8: u.u8 = (uint8_t)v; break;
    case OT_U16: u.u16 = (uint16_t)v; break;
    case OT_U32: u.u32 = (uint32_t)v; break;
    case OT_U64: u.u64 = (uint64_t)v; break;
    case OT_F16: u.u16 = ot_f32_to_f16((float)v); break;
    case OT_BF16: u.u16 = ot_f32_to_bf16((float)v); break;
    case OT_F32: u.f32 = (float)v; break;
    case OT_F64: u.f64 = v; break;
    case OT_C64: u.c64[0] = (float)v; break; /* imaginary part zero */
    case OT_C128: u.c128[0] = v; break;
    default:
        if (MODULE_OK(c))
            ir_fail(c->module, OT_ERR_INVALID_ARGUMENT, "constant: invalid dtype %d", (int)t);
        return NULL;
    }
    return ot_build_constant(c, ot_shape_scalar(t), &u);
}

ot_instr *ot_build_iota(ot_computation *c, ot_shape shape, int64_t iota_dimension) {
    ot_attrs a = {0};
    a.index = iota_dimension;
    ot_ir_shape s = ot_ir_shape_array(shape);
    return ot_build(c, OT_OP_IOTA, NULL, 0, &a, NULL, 0, &s, NULL);
}

ot_instr *ot_build_unary(ot_computation *c, ot_opcode op, ot_instr *x) {
    if (MODULE_OK(c) && !ot_opcode_is_elementwise_unary(op)) {
        ir_fail(c->module, OT_ERR_INVALID_ARGUMENT, "%s is not a unary elementwise op",
                ot_opcode_name(op));
        return NULL;
    }
    if (!x) return NULL;
    return ot_build(c, op, &x, 1, NULL, NULL, 0, NULL, NULL);
}

ot_instr *ot_build_binary(ot_computation *c, ot_opcode op, ot_instr *a, ot_instr *b) {
    if (MODULE_OK(c) && (!ot_opcode_is_elementwise_binary(op) || op == OT_OP_COMPARE)) {
        ir_fail(c->module, OT_ERR_INVALID_ARGUMENT,
                "%s is not a binary elementwise op (use ot_build_compare for compare)",
                ot_opcode_name(op));
        return NULL;
    }
    if (!a || !b) return NULL;
    ot_instr *ops[2] = {a, b};
    return ot_build(c, op, ops, 2, NULL, NULL, 0, NULL, NULL);
}

ot_instr *ot_build_compare(ot_computation *c, ot_instr *a, ot_instr *b, ot_cmp_dir dir,
                           ot_cmp_type type) {
    if (!a || !b) return NULL;
    ot_attrs at = {0};
    at.cmp_dir = dir;
    at.cmp_type = type;
    ot_instr *ops[2] = {a, b};
    return ot_build(c, OT_OP_COMPARE, ops, 2, &at, NULL, 0, NULL, NULL);
}

static ot_instr *build_n(ot_computation *c, ot_opcode op, ot_instr *const *ops, int n,
                         const ot_attrs *a, ot_computation *const *called, int ncalled,
                         const ot_ir_shape *hint) {
    for (int i = 0; i < n; i++)
        if (!ops[i]) return NULL;
    return ot_build(c, op, ops, n, a, called, ncalled, hint, NULL);
}

ot_instr *ot_build_select(ot_computation *c, ot_instr *p, ot_instr *t, ot_instr *f) {
    ot_instr *ops[3] = {p, t, f};
    return build_n(c, OT_OP_SELECT, ops, 3, NULL, NULL, 0, NULL);
}

ot_instr *ot_build_clamp(ot_computation *c, ot_instr *lo, ot_instr *x, ot_instr *hi) {
    ot_instr *ops[3] = {lo, x, hi};
    return build_n(c, OT_OP_CLAMP, ops, 3, NULL, NULL, 0, NULL);
}

ot_instr *ot_build_convert(ot_computation *c, ot_instr *x, ot_dtype to) {
    ot_ir_shape h = dtype_hint(to);
    return build_n(c, OT_OP_CONVERT, &x, 1, NULL, NULL, 0, &h);
}

ot_instr *ot_build_bitcast_convert(ot_computation *c, ot_instr *x, ot_dtype to) {
    ot_ir_shape h = dtype_hint(to);
    return build_n(c, OT_OP_BITCAST_CONVERT, &x, 1, NULL, NULL, 0, &h);
}

ot_instr *ot_build_reduce_precision(ot_computation *c, ot_instr *x, int exponent_bits,
                                    int mantissa_bits) {
    ot_attrs a = {0};
    a.exponent_bits = exponent_bits;
    a.mantissa_bits = mantissa_bits;
    return build_n(c, OT_OP_REDUCE_PRECISION, &x, 1, &a, NULL, 0, NULL);
}

ot_instr *ot_build_broadcast(ot_computation *c, ot_instr *x, ot_shape shape, const int64_t *dims,
                             int ndims) {
    ot_attrs a = {0};
    a.dims = dims;
    a.ndims = ndims;
    ot_ir_shape s = ot_ir_shape_array(shape);
    return build_n(c, OT_OP_BROADCAST, &x, 1, &a, NULL, 0, &s);
}

ot_instr *ot_build_reshape(ot_computation *c, ot_instr *x, ot_shape shape) {
    ot_ir_shape s = ot_ir_shape_array(shape);
    return build_n(c, OT_OP_RESHAPE, &x, 1, NULL, NULL, 0, &s);
}

ot_instr *ot_build_transpose(ot_computation *c, ot_instr *x, const int64_t *perm, int n) {
    ot_attrs a = {0};
    a.dims = perm;
    a.ndims = n;
    return build_n(c, OT_OP_TRANSPOSE, &x, 1, &a, NULL, 0, NULL);
}

ot_instr *ot_build_slice(ot_computation *c, ot_instr *x, const int64_t *start, const int64_t *limit,
                         const int64_t *stride) {
    if (!x || !MODULE_OK(c)) return NULL;
    if (x->shape.kind != OT_IR_ARRAY) return build_n(c, OT_OP_SLICE, &x, 1, NULL, NULL, 0, NULL);
    ot_slice_dim sd[OT_MAX_RANK];
    for (int i = 0; i < x->shape.array.rank; i++) {
        sd[i].start = start[i];
        sd[i].limit = limit[i];
        sd[i].stride = stride ? stride[i] : 1;
    }
    ot_attrs a = {0};
    a.slice = sd;
    return build_n(c, OT_OP_SLICE, &x, 1, &a, NULL, 0, NULL);
}

ot_instr *ot_build_dynamic_slice(ot_computation *c, ot_instr *x, ot_instr *const *indices,
                                 const int64_t *sizes) {
    if (!x || !MODULE_OK(c)) return NULL;
    int r = x->shape.kind == OT_IR_ARRAY ? x->shape.array.rank : 0;
    ot_instr *ops[1 + OT_MAX_RANK];
    ops[0] = x;
    for (int i = 0; i < r; i++) ops[1 + i] = indices[i];
    ot_attrs a = {0};
    a.dims = sizes;
    a.ndims = r;
    return build_n(c, OT_OP_DYNAMIC_SLICE, ops, 1 + r, &a, NULL, 0, NULL);
}

ot_instr *ot_build_dynamic_update_slice(ot_computation *c, ot_instr *x, ot_instr *update,
                                        ot_instr *const *indices) {
    if (!x || !MODULE_OK(c)) return NULL;
    int r = x->shape.kind == OT_IR_ARRAY ? x->shape.array.rank : 0;
    ot_instr *ops[2 + OT_MAX_RANK];
    ops[0] = x;
    ops[1] = update;
    for (int i = 0; i < r; i++) ops[2 + i] = indices[i];
    return build_n(c, OT_OP_DYNAMIC_UPDATE_SLICE, ops, 2 + r, NULL, NULL, 0, NULL);
}

ot_instr *ot_build_concatenate(ot_computation *c, ot_instr *const *xs, int n, int64_t dimension) {
    ot_attrs a = {0};
    a.index = dimension;
    return build_n(c, OT_OP_CONCATENATE, xs, n, &a, NULL, 0, NULL);
}

ot_instr *ot_build_pad(ot_computation *c, ot_instr *x, ot_instr *value, const ot_pad_dim *config) {
    ot_attrs a = {0};
    a.padding = config;
    ot_instr *ops[2] = {x, value};
    return build_n(c, OT_OP_PAD, ops, 2, &a, NULL, 0, NULL);
}

ot_instr *ot_build_reverse(ot_computation *c, ot_instr *x, const int64_t *dims, int n) {
    ot_attrs a = {0};
    a.dims = dims;
    a.ndims = n;
    return build_n(c, OT_OP_REVERSE, &x, 1, &a, NULL, 0, NULL);
}

ot_instr *ot_build_gather(ot_computation *c, ot_instr *x, ot_instr *indices,
                          const ot_gather_dims *dn) {
    ot_attrs a = {0};
    a.gather = dn;
    ot_instr *ops[2] = {x, indices};
    return build_n(c, OT_OP_GATHER, ops, 2, &a, NULL, 0, NULL);
}

ot_instr *ot_build_scatter(ot_computation *c, ot_instr *const *operands, int n, ot_instr *indices,
                           ot_instr *const *updates, const ot_scatter_dims *dn,
                           ot_computation *update_fn) {
    if (!MODULE_OK(c)) return NULL;
    if (n < 1 || n > OT_MAX_RANK) {
        ir_fail(c->module, OT_ERR_INVALID_ARGUMENT, "scatter: %d operands (1..%d)", n, OT_MAX_RANK);
        return NULL;
    }
    ot_instr *ops[2 * OT_MAX_RANK + 1];
    for (int i = 0; i < n; i++) {
        ops[i] = operands[i];
        ops[n + 1 + i] = updates[i];
    }
    ops[n] = indices;
    ot_attrs a = {0};
    a.scatter = dn;
    return build_n(c, OT_OP_SCATTER, ops, 2 * n + 1, &a, &update_fn, 1, NULL);
}

ot_instr *ot_build_copy(ot_computation *c, ot_instr *x) {
    return build_n(c, OT_OP_COPY, &x, 1, NULL, NULL, 0, NULL);
}

static ot_instr *build_reduce_like(ot_computation *c, ot_opcode op, ot_instr *const *inputs,
                                   ot_instr *const *inits, int n, const ot_attrs *a,
                                   ot_computation *reducer) {
    if (!MODULE_OK(c)) return NULL;
    if (n < 1 || n > OT_MAX_RANK) {
        ir_fail(c->module, OT_ERR_INVALID_ARGUMENT, "%s: %d inputs (1..%d)", ot_opcode_name(op), n,
                OT_MAX_RANK);
        return NULL;
    }
    ot_instr *ops[2 * OT_MAX_RANK];
    for (int i = 0; i < n; i++) {
        ops[i] = inputs[i];
        ops[n + i] = inits[i];
    }
    return build_n(c, op, ops, 2 * n, a, &reducer, 1, NULL);
}

ot_instr *ot_build_reduce(ot_computation *c, ot_instr *const *inputs, ot_instr *const *inits, int n,
                          const int64_t *dims, int ndims, ot_computation *reducer) {
    ot_attrs a = {0};
    a.dims = dims;
    a.ndims = ndims;
    return build_reduce_like(c, OT_OP_REDUCE, inputs, inits, n, &a, reducer);
}

ot_instr *ot_build_reduce_window(ot_computation *c, ot_instr *const *inputs, ot_instr *const *inits,
                                 int n, const ot_window *w, ot_computation *reducer) {
    ot_attrs a = {0};
    a.window = w;
    return build_reduce_like(c, OT_OP_REDUCE_WINDOW, inputs, inits, n, &a, reducer);
}

ot_instr *ot_build_select_and_scatter(ot_computation *c, ot_instr *operand, ot_instr *source,
                                      ot_instr *init, const ot_window *w, ot_computation *select,
                                      ot_computation *scatter) {
    ot_attrs a = {0};
    a.window = w;
    ot_instr *ops[3] = {operand, source, init};
    ot_computation *called[2] = {select, scatter};
    return build_n(c, OT_OP_SELECT_AND_SCATTER, ops, 3, &a, called, 2, NULL);
}

ot_instr *ot_build_sort(ot_computation *c, ot_instr *const *xs, int n, int64_t dimension,
                        bool is_stable, ot_computation *comparator) {
    ot_attrs a = {0};
    a.index = dimension;
    a.is_stable = is_stable;
    return build_n(c, OT_OP_SORT, xs, n, &a, &comparator, 1, NULL);
}

ot_instr *ot_build_dot(ot_computation *c, ot_instr *lhs, ot_instr *rhs, const ot_dot_dims *dn,
                       ot_precision lp, ot_precision rp) {
    ot_attrs a = {0};
    a.dot = dn;
    if (lp != OT_PRECISION_DEFAULT || rp != OT_PRECISION_DEFAULT) {
        a.nprecision = 2;
        a.precision[0] = lp;
        a.precision[1] = rp;
    }
    ot_instr *ops[2] = {lhs, rhs};
    return build_n(c, OT_OP_DOT, ops, 2, &a, NULL, 0, NULL);
}

ot_instr *ot_build_convolution(ot_computation *c, ot_instr *lhs, ot_instr *rhs, const ot_window *w,
                               const ot_conv_dims *dn, int64_t fgc, int64_t bgc) {
    ot_attrs a = {0};
    a.window = w;
    a.conv = dn;
    a.feature_group_count = fgc;
    a.batch_group_count = bgc;
    ot_instr *ops[2] = {lhs, rhs};
    return build_n(c, OT_OP_CONVOLUTION, ops, 2, &a, NULL, 0, NULL);
}

ot_instr *ot_build_tuple(ot_computation *c, ot_instr *const *xs, int n) {
    return build_n(c, OT_OP_TUPLE, xs, n, NULL, NULL, 0, NULL);
}

ot_instr *ot_build_get_tuple_element(ot_computation *c, ot_instr *t, int64_t index) {
    ot_attrs a = {0};
    a.index = index;
    return build_n(c, OT_OP_GET_TUPLE_ELEMENT, &t, 1, &a, NULL, 0, NULL);
}

ot_instr *ot_build_call(ot_computation *c, ot_computation *callee, ot_instr *const *args, int n) {
    return build_n(c, OT_OP_CALL, args, n, NULL, &callee, 1, NULL);
}

ot_instr *ot_build_while(ot_computation *c, ot_computation *cond, ot_computation *body,
                         ot_instr *init) {
    ot_computation *called[2] = {cond, body};
    return build_n(c, OT_OP_WHILE, &init, 1, NULL, called, 2, NULL);
}

ot_instr *ot_build_conditional(ot_computation *c, ot_instr *branch_index,
                               ot_computation *const *branches, ot_instr *const *args, int n) {
    if (!MODULE_OK(c)) return NULL;
    if (n < 1 || n > 1024) {
        ir_fail(c->module, OT_ERR_INVALID_ARGUMENT, "conditional: %d branches (1..1024)", n);
        return NULL;
    }
    ot_instr **ops = ot_malloc((size_t)(n + 1) * sizeof *ops);
    if (!ops) {
        ir_fail(c->module, OT_ERR_OUT_OF_MEMORY, "conditional: out of memory");
        return NULL;
    }
    ops[0] = branch_index;
    for (int i = 0; i < n; i++) ops[1 + i] = args[i];
    ot_instr *r = build_n(c, OT_OP_CONDITIONAL, ops, n + 1, NULL, branches, n, NULL);
    ot_free(ops);
    return r;
}

ot_instr *ot_build_opt_barrier(ot_computation *c, ot_instr *x) {
    return build_n(c, OT_OP_OPT_BARRIER, &x, 1, NULL, NULL, 0, NULL);
}

ot_instr *ot_build_all_reduce(ot_computation *c, ot_instr *const *xs, int n,
                              const ot_replica_groups *groups, int64_t channel_id,
                              bool use_global_device_ids, ot_computation *reducer) {
    ot_attrs a = {0};
    a.groups = groups;
    a.channel_id = channel_id;
    a.use_global_device_ids = use_global_device_ids;
    return build_n(c, OT_OP_ALL_REDUCE, xs, n, &a, &reducer, 1, NULL);
}

ot_instr *ot_build_all_gather(ot_computation *c, ot_instr *x, int64_t dimension,
                              const ot_replica_groups *groups, int64_t channel_id,
                              bool use_global_device_ids) {
    ot_attrs a = {0};
    a.index = dimension;
    a.groups = groups;
    a.channel_id = channel_id;
    a.use_global_device_ids = use_global_device_ids;
    return build_n(c, OT_OP_ALL_GATHER, &x, 1, &a, NULL, 0, NULL);
}

ot_instr *ot_build_reduce_scatter(ot_computation *c, ot_instr *x, int64_t dimension,
                                  const ot_replica_groups *groups, int64_t channel_id,
                                  bool use_global_device_ids, ot_computation *reducer) {
    ot_attrs a = {0};
    a.index = dimension;
    a.groups = groups;
    a.channel_id = channel_id;
    a.use_global_device_ids = use_global_device_ids;
    return build_n(c, OT_OP_REDUCE_SCATTER, &x, 1, &a, &reducer, 1, NULL);
}

ot_instr *ot_build_all_to_all(ot_computation *c, ot_instr *x, int64_t split_dimension,
                              const ot_replica_groups *groups, int64_t channel_id) {
    ot_attrs a = {0};
    a.index = split_dimension;
    a.groups = groups;
    a.channel_id = channel_id;
    return build_n(c, OT_OP_ALL_TO_ALL, &x, 1, &a, NULL, 0, NULL);
}

ot_instr *ot_build_collective_permute(ot_computation *c, ot_instr *x, const int64_t *pairs,
                                      int npairs, int64_t channel_id) {
    ot_attrs a = {0};
    a.pairs = pairs;
    a.npairs = npairs;
    a.channel_id = channel_id;
    return build_n(c, OT_OP_COLLECTIVE_PERMUTE, &x, 1, &a, NULL, 0, NULL);
}

ot_instr *ot_build_replica_id(ot_computation *c) {
    return ot_build(c, OT_OP_REPLICA_ID, NULL, 0, NULL, NULL, 0, NULL, NULL);
}

ot_instr *ot_build_partition_id(ot_computation *c) {
    return ot_build(c, OT_OP_PARTITION_ID, NULL, 0, NULL, NULL, 0, NULL, NULL);
}

ot_instr *ot_build_rng_bit_generator(ot_computation *c, ot_instr *state, ot_shape shape,
                                     ot_rng_algorithm alg) {
    if (!state || !MODULE_OK(c)) return NULL;
    ot_attrs a = {0};
    a.rng_algorithm = alg;
    ot_ir_shape el[2] = {state->shape, ot_ir_shape_array(shape)};
    ot_ir_shape h;
    memset(&h, 0, sizeof h);
    h.kind = OT_IR_TUPLE;
    h.ntuple = 2;
    h.tuple = el;
    return build_n(c, OT_OP_RNG_BIT_GENERATOR, &state, 1, &a, NULL, 0, &h);
}

ot_instr *ot_build_custom_call(ot_computation *c, const char *target, ot_instr *const *args, int n,
                               const ot_ir_shape *shape, const char *backend_config,
                               bool has_side_effect) {
    ot_attrs a = {0};
    a.custom_call_target = target;
    a.backend_config = backend_config;
    a.has_side_effect = has_side_effect;
    return build_n(c, OT_OP_CUSTOM_CALL, args, n, &a, NULL, 0, shape);
}
