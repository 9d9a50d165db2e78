/* exec internals: element access, the elementwise kernels over flat arrays, scalar functions
 * compiled from called computations, and the evaluator context. */
#ifndef OT_EXEC_INTERNAL_H
#define OT_EXEC_INTERNAL_H

#include "optitpu/exec.h"

#include <math.h>
#include <string.h>

/* ---- element access -------------------------------------------------------------------- */

/* Floating-point element i of a float array as a double (exact for every float dtype). */
double ex_ld_f(ot_dtype t, const void *p, int64_t i);
/* Stores v rounded once (nearest-even) to dtype t (a float dtype). */
void ex_st_f(ot_dtype t, void *p, int64_t i, double v);
/* Integer or pred element as int64 (signed dtypes sign-extend, unsigned zero-extend: u64 keeps
 * its bits). */
int64_t ex_ld_i(ot_dtype t, const void *p, int64_t i);
/* Stores the low bits of v (two's complement wrap), pred as v != 0. */
void ex_st_i(ot_dtype t, void *p, int64_t i, int64_t v);
/* Raw bits of element i (zero-extended), and the reverse. */
uint64_t ex_ld_bits(size_t elsize, const void *p, int64_t i);
void ex_st_bits(size_t elsize, void *p, int64_t i, uint64_t v);
/* Rounds a double to the nearest value of a binary format with ebits exponent and mbits mantissa
 * bits (subnormals kept, overflow to infinity, NaN stays NaN). */
double ex_round_format(double x, int ebits, int mbits);
/* Mantissa bits of a float dtype (f16 10, bf16 7, f32 23, f64 52). */
int ex_mantissa_bits(ot_dtype t);

/* Flush f32/f64 subnormals to zero in arithmetic (XLA CPU's FTZ/DAZ). Set per evaluation from
 * ot_eval_options.keep_denormals by the public entry points (thread-local; default on). */
extern _Thread_local bool ex_ftz;
/* Ops whose f32/f64 arithmetic runs under FTZ/DAZ in XLA's CPU backend; abs, negate, copy,
 * sign and is-finite are bit operations (and, or, integer tests) and keep subnormals. maximum
 * and minimum read their operands through DAZ (x86's MAXPS/MINPS in the lowering of
 * llvm.maximum/minimum), so a subnormal operand counts as a signed zero and the result is never
 * subnormal: flushing inputs and result gives exactly that. The reference kernels and generated
 * code (src/codegen) both ask this one function, so they flush the same ops. */
static inline bool ex_ftz_applies(ot_opcode op) {
    switch (op) {
    case OT_OP_ABS:
    case OT_OP_NEGATE:
    case OT_OP_COPY:
    case OT_OP_SIGN:
    case OT_OP_IS_FINITE: return false;
    default: return true;
    }
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

/* ---- elementwise kernels over n elements (flat, same shapes) ---------------------------- */

/* Unary ops abs..copy (is-finite writes pred). in: the operand dtype, out: the result dtype. */
ot_status ex_unary(ot_opcode op, ot_dtype in, ot_dtype out, const void *x, void *y, int64_t n);
/* Binary ops add..shift-right-logical (not compare); a, b, y of dtype t. */
ot_status ex_binary(ot_opcode op, ot_dtype t, const void *a, const void *b, void *y, int64_t n);
/* Compare into pred. */
ot_status ex_compare(ot_cmp_dir dir, ot_cmp_type type, ot_dtype t, const void *a, const void *b,
                     uint8_t *y, int64_t n);
ot_status ex_convert(ot_dtype from, ot_dtype to, const void *x, void *y, int64_t n);
ot_status ex_reduce_precision(ot_dtype t, int ebits, int mbits, const void *x, void *y, int64_t n);
/* select: pred stride 0 (scalar) or 1; clamp: lo/hi strides 0 or 1. */
void ex_select(const uint8_t *p, int64_t pstride, const void *a, const void *b, void *y,
               size_t elsize, int64_t n);
ot_status ex_clamp(ot_dtype t, const void *lo, int64_t lostride, const void *x, const void *hi,
                   int64_t histride, void *y, int64_t n);

/* ---- evaluator ------------------------------------------------------------------------- */

typedef struct ex_ctx {
    ot_eval_options opts;
    int64_t depth;
} ex_ctx;

/* Evaluates a computation: args[i] for parameter i (copied). */
ot_status ex_eval_computation(ex_ctx *x, const ot_computation *c, const ot_value *const *args,
                              int nargs, ot_value *out);
/* One instruction over its operand values. */
ot_status ex_eval_instr(ex_ctx *x, const ot_instr *i, const ot_value *const *ops, ot_value *out);

/* A called computation applied to scalars (reducers, comparators, scatter and select functions,
 * map): a straight-line program over 8-byte slots when every instruction is a scalar
 * elementwise op (no allocation per call), else the general evaluator. */
typedef struct ex_scalar_fn ex_scalar_fn;
ot_status ex_scalar_fn_new(ex_ctx *x, const ot_computation *c, ex_scalar_fn **out);
void ex_scalar_fn_free(ex_scalar_fn *f);
/* args[k]: pointer to one element of the k-th parameter's dtype; outs[k]: where to write the k-th
 * result (the root, or the elements of a root tuple). */
ot_status ex_scalar_fn_call(ex_scalar_fn *f, const void *const *args, void *const *outs);
/* The same for a predicate function returning pred. */
ot_status ex_scalar_fn_pred(ex_scalar_fn *f, const void *const *args, bool *out);

/* ---- kernels by op family (each fills *out, allocating it) ------------------------------ */

ot_status ex_kernel_shape(ex_ctx *x, const ot_instr *i, const ot_value *const *ops, ot_value *out);
ot_status ex_kernel_gather(const ot_instr *i, const ot_value *const *ops, ot_value *out);
ot_status ex_kernel_scatter(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                            ot_value *out);
ot_status ex_kernel_reduce(ex_ctx *x, const ot_instr *i, const ot_value *const *ops, ot_value *out);
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
 */
#define EX_RED_LANES 16
#define EX_RED_BLOCK 4096
bool ex_reduce_lanes(const ot_instr *reduce);
/* True when `reduce` is a one-input reduce (operand and init of its result's dtype, a scalar
 * init) of exactly the trailing dims of its operand, each once: *rows gets the product of the
 * kept dims, *len that of the reduced ones (a row fusion's rows and row length). */
bool ex_reduce_rows(const ot_instr *reduce, int64_t *rows, int64_t *len);
ot_status ex_kernel_reduce_window(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                                  ot_value *out);
ot_status ex_kernel_select_and_scatter(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                                       ot_value *out);
ot_status ex_kernel_sort(ex_ctx *x, const ot_instr *i, const ot_value *const *ops, ot_value *out);
ot_status ex_kernel_topk(const ot_instr *i, const ot_value *const *ops, ot_value *out);
ot_status ex_kernel_map(ex_ctx *x, const ot_instr *i, const ot_value *const *ops, ot_value *out);
ot_status ex_kernel_dot(const ot_instr *i, const ot_value *const *ops, ot_value *out);
ot_status ex_kernel_convolution(const ot_instr *i, const ot_value *const *ops, ot_value *out);
ot_status ex_kernel_rng(const ot_instr *i, const ot_value *const *ops, ot_value *out);
ot_status ex_kernel_collective(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                               ot_value *out);

/* Helpers. */
static inline const ot_shape *ex_arr(const ot_value *v) {
    return &v->array.shape;
}
/* Advances a row-major multi-index over dims; false after the last one. */
static inline bool ex_next_index(int64_t *idx, const int64_t *dims, int rank) {
    for (int d = rank - 1; d >= 0; d--) {
        if (++idx[d] < dims[d]) return true;
        idx[d] = 0;
    }
    return false;
}
/* The accumulation dtype of a float dtype (f16/bf16/f32: f32; f64: f64). */
static inline bool ex_is_f64(ot_dtype t) {
    return t == OT_F64;
}
/* Names an instruction in error messages. */
#define EX_NAME(i) ((i)->name ? (i)->name : "?")

#endif /* OT_EXEC_INTERNAL_H */
