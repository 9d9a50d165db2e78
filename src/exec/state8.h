/* exec's interface for 8-bit block-wise optimizer state (tpu_optim.h, OT_TPU_STATE_INT8):
 * bitsandbytes' dynamic quantization map (Dettmers et al., 2022) and the fused block-wise
 * optimizer update kernel, a custom-call the optimizer module builds (src/optim/tpu_optim.c).
 *
 * The kernel (custom-call target EX_STATE8_TARGET) updates a flat f32 parameter whose state
 * slots are kept as one u8 code per element and one f32 absmax per block of EX_STATE8_BLOCK
 * elements, in one pass over memory: per block it decodes the slots (map[code] * absmax), runs
 * the optimizer's element update in f32, writes the parameter, and quantizes each new slot
 * (absmax = max |s| of the block, 1 for an all-zero block; code = the first index of the
 * smallest |s / absmax - map[k]|, bitsandbytes' argmin). Its results are bit for bit those of
 * the same update built as graph code (dequantize, the optimizer's graph, quantize: the
 * reference semantics, src/optim/state_quant.c), which the tests check.
 *
 * Operands: p f32[L], g f32[L], then per slot codes u8[L] and absmax f32[L / 256], then the
 * rule's rank-0 f32 scalars (and sgd's rank-0 pred `first`); L a multiple of 256. Result: the
 * tuple (p' f32[L], then per slot codes' u8[L], absmax' f32[L / 256]). backend_config: the rule
 * and its flags, comma-separated, then "maps=" one letter per slot (s signed, u unsigned):
 *   "adam[,maximize][,wd_coupled|,wd_decoupled],maps=su": scalars 1-b1, b2, 1-b2,
 *       sqrt(1 - b2^t), eps, -lr / (1 - b1^t), w (wd, or 1 - lr wd decoupled, else unused)
 *       (torch.optim.Adam / AdamW, src/optim/builtins.c adam_common);
 *   "lion[,wd],maps=s": scalars 1-b1, b1, 1-b2, b2, wd, -lr (optax.lion);
 *   "sgd[,maximize][,wd][,nesterov],maps=s": scalars momentum, 1-dampening, wd, -lr, then
 *       pred first (step == 1) (torch.optim.SGD with momentum).
 * Anything else is INVALID_ARGUMENT naming what is wrong (the kernel also runs on HLO text). */
#ifndef OT_EXEC_STATE8_H
#define OT_EXEC_STATE8_H

#include <stdbool.h>

#define EX_STATE8_TARGET "optitpu.state8_update"
#define EX_STATE8_BLOCK  256

/* The sorted 256-entry map, create_dynamic_map(signed, 7, 8) (unsigned: 8 magnitude bits). */
void ex_q8_map(bool is_signed, float out[256]);

#endif
