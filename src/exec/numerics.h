/* What the compiler and generated code (src/codegen) must agree on with the reference kernels for
 * results to be bit-identical: which ops run under FTZ/DAZ and how an f32 result flushes, the
 * rounding to narrow float formats, conversions, integer element loads, and the canonical
 * summation order of float reductions. exec_internal.h includes it; other folders include this
 * header, never exec_internal.h. Pure functions: safe from any thread. */
#ifndef OT_EXEC_NUMERICS_H
#define OT_EXEC_NUMERICS_H

#include "ir/op_traits.h"
#include "optitpu/ir.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Integer or pred element as int64 (signed dtypes sign-extend, unsigned zero-extend: u64 keeps
 * its bits). */
int64_t ex_ld_i(ot_dtype t, const void *p, int64_t i);
/* Mantissa bits of a float dtype (f16 10, bf16 7, f32 23, f64 52; 0 for other dtypes):
 * reduce-precision's rounding position. */
int ex_mantissa_bits(ot_dtype t);
/* Rounds a double to the nearest value of a binary format with ebits exponent and mbits mantissa
 * bits (subnormals kept, overflow to infinity, NaN stays NaN). */
double ex_round_format(double x, int ebits, int mbits);

/* Ops whose f32/f64 arithmetic runs under FTZ/DAZ in XLA's CPU backend; abs, negate, copy,
 * sign and is-finite are bit operations (and, or, integer tests) and keep subnormals. maximum
 * and minimum read their operands through DAZ (x86's MAXPS/MINPS in the lowering of
 * llvm.maximum/minimum), so a subnormal operand counts as a signed zero and the result is never
 * subnormal: flushing inputs and result gives exactly that. Which ops keep subnormals is the
 * op trait table's IR_OP_KEEPS_SUBNORMALS column (src/ir/opcode.c); the reference kernels and
 * generated code (src/codegen) both ask this one function, so they flush the same ops. */
static inline bool ex_ftz_applies(ot_opcode op) {
    return !(ir_op_traits(op) & IR_OP_KEEPS_SUBNORMALS);
}
/* An f32 result from its double value r under FTZ, as x86 gives it: tininess is detected after
 * rounding to 24 bits with an unbounded exponent, so anything below 2^-126 - 2^-151 flushes —
 * including [2^-126 - 2^-150, 2^-126 - 2^-151), which rounding at subnormal precision would lift
 * to FLT_MIN. Used where that band can be reached: products and quotients of normal floats (a sum
 * of two is exact there) and f64 -> f32 converts. r is exact for a product and for a convert; a
 * quotient's double value is within 2^-53 of the exact one, and no quotient of two floats falls
 * that close to the threshold without equalling it. */
static inline float ex_tiny_f(double r) {
    /* integer operations only, so the fast kernels' loops around it still vectorize */
    uint64_t u;
    memcpy(&u, &r, 8);
    uint64_t z = (u & 0x7fffffffffffffffull) < 0x380ffffff0000000ull ? 0x7fffffffffffffffull : 0u;
    u &= ~z;
    double v;
    memcpy(&v, &u, 8);
    return (float)v;
}

/* Converts n elements of dtype from to dtype to as XLA's CPU backend does (float to integer:
 * NaN -> 0, out-of-range values saturate, otherwise truncation; docs/exec.md). */
ot_status ex_convert(ot_dtype from, ot_dtype to, const void *x, void *y, int64_t n);

/* The canonical summation order (docs/exec.md, "Reductions"). A single-input reduce whose reducer
 * is a float add (f32 or f64, add of its two parameters) and whose input's last non-unit
 * dimension is reduced combines each output's n reduced elements x[0..n) (row-major over the
 * reduced dims) in blocks of EX_RED_BLOCK: within a block, the whole groups of EX_RED_LANES
 * elements go to lanes (lane l starts at the group's element l and folds element l of every
 * later group), the lanes combine by a fixed pairwise tree (lane l with lane l + s, for s =
 * LANES/2 .. 1) and the accumulator folds the tree's result; the elements past the last whole
 * group fold into the accumulator one by one. The accumulator starts at the init value. Every
 * other reduce folds x[0..n) one by one from init. The reference evaluator, the fast
 * reduce kernels (fast_reduce.c) and generated code all use this order, so they agree bit for bit.
 * A complex sum (c64, c128) takes the same order on each component, with the same condition
 * (complex.c: ex_csum_*).
 */
#define EX_RED_LANES 16
#define EX_RED_BLOCK 4096
bool ex_reduce_lanes(const ot_instr *reduce);
/* Whether the reduce reduces its operand's last non-unit dimension (the lane order's dims). */
bool ex_reduce_last_dim(const ot_instr *reduce);
/* A sum of bf16 or f16 values (a one-input reduce whose reducer adds its two parameters in that
 * type, with a scalar init of it) accumulates in f32 and rounds once to its type: its operand and
 * init convert to f32, the f32 reduce of the same dims sums them (in the order above) and the
 * result converts back. The compiler rewrites such a reduce into exactly that
 * convert(reduce(convert)) (widen_sums, src/compiler/compile.c) and the reference evaluator
 * computes it so. Why: a one-by-one sum in bf16 stops growing once the sum is 256 times its addends
 * (4096 bf16 ones sum to 256); XLA's CPU backend, allowed excess precision by default, is far
 * closer to the exact sum, and JAX emits such reduces for every gradient of a bf16 broadcast (bias
 * gradients). */
bool ex_reduce_widens(const ot_instr *reduce);
/* The scan windows of reduce-window, which JAX's cumsum, cumprod, cummax and cummin lower to on
 * CPU: along one dim of n >= 2 elements the window is n wide with stride 1 and n - 1 of padding
 * below (a prefix scan: output k folds x_0 .. x_k) or above (a suffix scan, as
 * lax.cumsum(..., reverse=True) and the gradient of every cumsum: x_k .. x_{n-1}), without
 * dilation or reversal; 1 wide with stride 1 and no padding along every other dim. Returns that
 * dim (*suffix: the padding is above), else -1.
 * A reduce-window folds each output's window from init in row-major order of the window index,
 * except a suffix scan, which folds from the far end: x_{n-1}, x_{n-2}, .., x_k (docs/exec.md,
 * "reduce-window"). Both scans then run in n steps, acc_k = f(acc_{k-1}, x_k) or f(acc_{k+1},
 * x_k), and lax.cumsum(x, reverse=True) has the bits of flip(cumsum(flip(x))). */
int ex_window_scan_dim(const ot_window *w, const ot_shape *is, bool *suffix);
/* True when `reduce` is a one-input reduce (operand and init of its result's dtype, a scalar
 * init) of exactly the trailing dims of its operand, each once: *rows gets the product of the
 * kept dims, *len that of the reduced ones (a row fusion's rows and row length). */
bool ex_reduce_rows(const ot_instr *reduce, int64_t *rows, int64_t *len);
/* True when gather g takes whole rows of its operand [V, ...] (an embedding lookup, x[ids]):
 * one start index per element of the indices (dims without index_vector_dim, which is implied or
 * of size 1), of an integer dtype below 64 bits or s64, mapped to operand dim 0, which is
 * collapsed; slice sizes [1, the other dims whole]; the offset dims the result's trailing ones
 * and no batching dims. The result is then indices dims + operand dims 1..; each start clamps
 * into [0, V - 1] as HLO clamps it (the reference's clamp64). */
bool ex_gather_rows(const ot_instr *g);

#endif /* OT_EXEC_NUMERICS_H */
