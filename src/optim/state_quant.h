/* Internal: 8-bit block-wise optimizer state as graph code (state_quant.c). */
#ifndef OT_OPTIM_STATE_QUANT_H
#define OT_OPTIM_STATE_QUANT_H

#include <stdbool.h>

#include "optitpu/ir.h"

/* codes (u8[L], L a multiple of OT_TPU_INT8_BLOCK) and absmax (f32[L / 256]) -> f32[L]; the
 * signed or unsigned dynamic map. NULL operands give NULL (a failed build). */
ot_instr *ot_quant8_dequantize(ot_computation *c, ot_instr *codes, ot_instr *absmax, bool sgn);
/* x (f32[L]) -> *codes (u8[L]) and *absmax (f32[L / 256]); max_f32 is a maximum reducer. */
ot_status ot_quant8_quantize(ot_computation *c, ot_computation *max_f32, ot_instr *x, bool sgn,
                             ot_instr **codes, ot_instr **absmax);

#endif
