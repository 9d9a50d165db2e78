/* Op traits that src/compiler, src/exec and src/codegen ask about beyond the public op classes:
 * one bit each per opcode, from the trait table in src/ir/opcode.c, where each op's row states
 * them once (ot_opcode_is_commutative reads the same table). ir/infer.c still spells out the
 * dtype rules behind FLOAT_ONLY and NO_FLOAT with its own messages; tests/test_ir.c checks they
 * agree. */
#ifndef OT_IR_OP_TRAITS_H
#define OT_IR_OP_TRAITS_H

#include "optitpu/ir.h"

enum {
    IR_OP_COMMUTATIVE = 1u << 0, /* binary; operands may swap: add multiply maximum minimum and
                                  * or xor */
    IR_OP_EXPENSIVE = 1u << 1,   /* costs a lot per element (fusion never duplicates it):
                                  * transcendentals, divide, remainder, power, atan2, map */
    IR_OP_FLOAT_ONLY = 1u << 2,  /* elementwise, defined on floating-point operands only */
    IR_OP_NO_FLOAT = 1u << 3,    /* elementwise bit operation, not defined on floating point */
};

/* The IR_OP_* bits of op; 0 outside the enum. */
unsigned ir_op_traits(ot_opcode op);

#endif /* OT_IR_OP_TRAITS_H */
