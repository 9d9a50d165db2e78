/* Op traits that src/compiler, src/exec and src/codegen ask about beyond the public op classes:
 * one bit each per opcode, from the trait table in src/ir/opcode.c, where each op's row states
 * them once (ot_opcode_is_commutative and ex_ftz_applies, which the reference kernels and the
 * native code generator both ask, read the same table). ir/infer.c still spells out the
 * dtype rules behind FLOAT_ONLY and NO_FLOAT with its own messages; tests/test_ir.c checks they
 * agree. */
#ifndef OT_IR_OP_TRAITS_H
#define OT_IR_OP_TRAITS_H

#include "optitpu/ir.h"

enum {
    IR_OP_COMMUTATIVE = 1u << 0,      /* binary; operands may swap: add multiply maximum minimum and
                                       * or xor */
    IR_OP_EXPENSIVE = 1u << 1,        /* costs a lot per element (fusion never duplicates it):
                                       * transcendentals, divide, remainder, power, atan2, map */
    IR_OP_FLOAT_ONLY = 1u << 2,       /* elementwise, defined on floating-point operands only */
    IR_OP_NO_FLOAT = 1u << 3,         /* elementwise bit operation, not defined on floating point */
    IR_OP_KEEPS_SUBNORMALS = 1u << 4, /* the flush-to-zero mode leaves its float results as they
                                       * are (sign and bit moves, classification): abs negate
                                       * copy sign is-finite; every other op's results flush */
};

/* The table itself (opcode.c), read inline: the reference kernels ask per element. */
extern const uint8_t ir_op_trait_table[OT_OP_COUNT];

/* The IR_OP_* bits of op; 0 outside the enum. */
static inline unsigned ir_op_traits(ot_opcode op) {
    return (int)op >= 0 && op < OT_OP_COUNT ? ir_op_trait_table[op] : 0;
}

/* Whether i computes on or produces complex values (c64, c128) — a result or operand array leaf
 * of a complex dtype — or is complex, real, imag or fft. Such instructions run as reference
 * kernels only (exec/complex.c, exec/fft.c): fusion and native code leave them out. */
static inline bool ir_instr_complex(const ot_instr *i) {
    if (i->opcode == OT_OP_COMPLEX || i->opcode == OT_OP_REAL || i->opcode == OT_OP_IMAG ||
        i->opcode == OT_OP_FFT)
        return true;
    const ot_ir_shape *s = &i->shape;
    if (s->kind == OT_IR_ARRAY && ot_dtype_is_complex(s->array.dtype)) return true;
    if (s->kind == OT_IR_TUPLE)
        for (int k = 0; k < s->ntuple; k++)
            if (s->tuple[k].kind == OT_IR_ARRAY && ot_dtype_is_complex(s->tuple[k].array.dtype))
                return true;
    for (int k = 0; k < i->noperands; k++) {
        const ot_ir_shape *o = &i->operands[k]->shape;
        if (o->kind == OT_IR_ARRAY && ot_dtype_is_complex(o->array.dtype)) return true;
    }
    return false;
}

#endif /* OT_IR_OP_TRAITS_H */
