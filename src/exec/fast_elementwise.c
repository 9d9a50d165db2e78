/* The fast elementwise kernels (kernels.h): plain unary, binary, compare and convert ops with
 * no scalar operand, written straight into the output leaf (in place allowed). f32/f64 add,
 * subtract, multiply, divide, maximum and minimum run as typed loops with the reference's FTZ and
 * NaN rules; the rest run the reference loops of elementwise.c. Bitwise the reference. */
#include "exec/fast_internal.h"

#define TYPED_LOOP(T, F)                                                                           \
    do {                                                                                           \
        const T *x = a, *w = b;                                                                    \
        T *o = y;                                                                                  \
        if (z)                                                                                     \
            for (int64_t e = 0; e < n; e++) o[e] = F(x[e], w[e], true);                            \
        else                                                                                       \
            for (int64_t e = 0; e < n; e++) o[e] = F(x[e], w[e], false);                           \
    } while (0)

/* The f32/f64 arithmetic binary ops as typed loops, with the reference's FTZ and NaN rules
 * (elementwise.c): the same bits as ex_binary without its per-element dtype dispatch. */
static bool typed_binary(ot_opcode op, ot_dtype t, ot_dtype ta, ot_dtype tb, bool z, const void *a,
                         const void *b, void *y, int64_t n) {
    if (ta != t || tb != t || (t != OT_F32 && t != OT_F64)) return false;
    bool f = t == OT_F32;
    switch (op) {
    case OT_OP_ADD:
        if (f)
            TYPED_LOOP(float, add_f);
        else
            TYPED_LOOP(double, add_d);
        return true;
    case OT_OP_SUBTRACT:
        if (f)
            TYPED_LOOP(float, sub_f);
        else
            TYPED_LOOP(double, sub_d);
        return true;
    case OT_OP_MULTIPLY:
        if (f)
            TYPED_LOOP(float, mul_f);
        else
            TYPED_LOOP(double, mul_d);
        return true;
    case OT_OP_DIVIDE:
        if (f)
            TYPED_LOOP(float, div_f);
        else
            TYPED_LOOP(double, div_d);
        return true;
    case OT_OP_MAXIMUM:
        if (f)
            TYPED_LOOP(float, max_f);
        else
            TYPED_LOOP(double, max_d);
        return true;
    case OT_OP_MINIMUM:
        if (f)
            TYPED_LOOP(float, min_f);
        else
            TYPED_LOOP(double, min_d);
        return true;
    default: return false;
    }
}

ot_status ex_fast_elementwise(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                              const ex_leaf *ins, void *out, const ex_leaf *os, bool *done) {
    ot_opcode op = i->opcode;
    int64_t n = ot_shape_numel_unchecked(os->shape);
    /* the reference loops read element e of every input before writing element e: an output
     * that is exactly an input's buffer (in place) is fine, a partial overlap is not */
    for (int k = 0; k < nin; k++)
        if (in[k] != out && ex_overlaps(out, os->nbytes, in[k], ins[k].nbytes)) return OT_OK;
    for (int k = 0; k < nin; k++)
        if (ot_shape_numel_unchecked(ins[k].shape) != n) return OT_OK; /* scalar operands */
    if (nin == 2 && typed_binary(op, os->shape->dtype, ins[0].shape->dtype, ins[1].shape->dtype,
                                 c->ftz, in[0], in[1], out, n)) {
        *done = true;
        c->fast_run++;
        return OT_OK;
    }
    bool ftz = ex_ftz;
    ex_ftz = c->ftz;
    ot_status st = OT_OK;
    if (ot_opcode_is_elementwise_unary(op) && nin == 1) {
        st = ex_unary(op, ins[0].shape->dtype, os->shape->dtype, in[0], out, n);
    } else if (op == OT_OP_COMPARE && nin == 2) {
        st = ex_compare(i->attrs->cmp_dir, i->attrs->cmp_type, ins[0].shape->dtype, in[0], in[1],
                        out, n);
    } else if (ot_opcode_is_elementwise_binary(op) && nin == 2) {
        st = ex_binary(op, os->shape->dtype, in[0], in[1], out, n);
    } else if (op == OT_OP_CONVERT && nin == 1) {
        st = ex_convert(ins[0].shape->dtype, os->shape->dtype, in[0], out, n);
    } else {
        ex_ftz = ftz;
        return OT_OK;
    }
    ex_ftz = ftz;
    *done = true;
    if (st == OT_OK) c->fast_run++;
    return st;
}
