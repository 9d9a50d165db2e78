/* exec internals: element access, the elementwise kernels over flat arrays, scalar functions
 * compiled from called computations, and the evaluator context. */
#ifndef OT_EXEC_INTERNAL_H
#define OT_EXEC_INTERNAL_H

#include "exec/numerics.h"
#include "optitpu/exec.h"

#include <math.h>
#include <string.h>

/* ---- element access -------------------------------------------------------------------- */

/* Floating-point element i of a float array as a double (exact for every float dtype). */
double ex_ld_f(ot_dtype t, const void *p, int64_t i);
/* Stores v rounded once (nearest-even) to dtype t (a float dtype). */
void ex_st_f(ot_dtype t, void *p, int64_t i, double v);
/* Stores the low bits of v (two's complement wrap), pred as v != 0. */
void ex_st_i(ot_dtype t, void *p, int64_t i, int64_t v);
/* Raw bits of element i (zero-extended), and the reverse. */
uint64_t ex_ld_bits(size_t elsize, const void *p, int64_t i);
void ex_st_bits(size_t elsize, void *p, int64_t i, uint64_t v);

/* Flush f32/f64 subnormals to zero in arithmetic (XLA CPU's FTZ/DAZ). Set per evaluation from
 * ot_eval_options.keep_denormals by the public entry points (thread-local; default on). */
extern _Thread_local bool ex_ftz;

/* ---- elementwise kernels over n elements (flat, same shapes) ---------------------------- */

/* Unary ops abs..copy (is-finite writes pred). in: the operand dtype, out: the result dtype. */
ot_status ex_unary(ot_opcode op, ot_dtype in, ot_dtype out, const void *x, void *y, int64_t n);
/* Binary ops add..shift-right-logical (not compare); a, b, y of dtype t. */
ot_status ex_binary(ot_opcode op, ot_dtype t, const void *a, const void *b, void *y, int64_t n);
/* Compare into pred. */
ot_status ex_compare(ot_cmp_dir dir, ot_cmp_type type, ot_dtype t, const void *a, const void *b,
                     uint8_t *y, int64_t n);
ot_status ex_reduce_precision(ot_dtype t, int ebits, int mbits, const void *x, void *y, int64_t n);
/* select: pred stride 0 (scalar) or 1; clamp: lo/hi strides 0 or 1. */
void ex_select(const uint8_t *p, int64_t pstride, const void *a, const void *b, void *y,
               size_t elsize, int64_t n);
ot_status ex_clamp(ot_dtype t, const void *lo, int64_t lostride, const void *x, const void *hi,
                   int64_t histride, void *y, int64_t n);

/* ---- evaluator ------------------------------------------------------------------------- */

typedef struct ex_ctx {
    ot_eval_options opts;
    int64_t depth;      /* computations being evaluated, nested */
    int64_t stack_base; /* the depth at which the current thread's stack took over (eval.c) */
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

/* The 8-bit block-wise optimizer update (exec/state8.h), element by element; z: flush
 * subnormals. */
ot_status ex_kernel_state8(const ot_instr *i, const ot_value *const *ops, bool z, ot_value *out);

ot_status ex_kernel_shape(ex_ctx *x, const ot_instr *i, const ot_value *const *ops, ot_value *out);
ot_status ex_kernel_gather(const ot_instr *i, const ot_value *const *ops, ot_value *out);
ot_status ex_kernel_scatter(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                            ot_value *out);
ot_status ex_kernel_reduce(ex_ctx *x, const ot_instr *i, const ot_value *const *ops, ot_value *out);
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
/* jaxlib's LAPACK custom calls, "lapack_*" targets (src/exec/lapack.c, ir/lapack_call.h);
 * UNIMPLEMENTED for a lapack_* target it does not run (complex dtypes, geev, ...). */
ot_status ex_kernel_lapack(const ot_instr *i, const ot_value *const *ops, ot_value *out);
ot_status ex_kernel_collective(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                               ot_value *out);
/* Complex numbers (complex.c): every instruction ir_instr_complex selects, except the data
 * movers, tuples and control flow (ex_complex_passes_through); UNIMPLEMENTED, naming the op and
 * dtype, for what it does not run. */
ot_status ex_kernel_complex(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                            ot_value *out);
/* The elementwise part of ex_kernel_complex on raw arrays: n elements of each operand in[k] into
 * y (select's predicate may be a scalar); element e of the result depends on element e of the
 * operands only, so ranges of elements may run apart. UNIMPLEMENTED for what it does not run. */
ot_status ex_complex_elementwise(const ot_instr *i, const void *const *in, void *y, int64_t n);
/* Complex sums (complex.c), the primitives of the reference's and the fast kernel's reduce in the
 * canonical order (numerics.h) on each component; t is c64 or c128, values are interleaved
 * components, ftz the run's flush mode. ex_complex_sum: whether reduce i is a complex sum (a
 * reducer that adds its two parameters). A row of n values sums in ex_csum_blocks(n) blocks,
 * whose lane trees ex_csum_block computes (b: the block, tree: one complex value out), folded
 * into the accumulator in block order, then the values from ex_csum_tail(n) on one by one;
 * ex_csum_row does it all. ex_csum_acc: acc[k] += x[k] for k < n (the one-by-one order). */
bool ex_complex_sum(const ot_instr *i);
int64_t ex_csum_blocks(int64_t n);
int64_t ex_csum_tail(int64_t n);
void ex_csum_block(ot_dtype t, const void *x, int64_t n, int64_t b, bool ftz, void *tree);
void ex_csum_acc(ot_dtype t, const void *x, int64_t n, bool ftz, void *acc);
void ex_csum_row(ot_dtype t, const void *x, int64_t n, bool ftz, void *acc);
/* |re + i im| of a c64 value, as the reference and the fast kernel compute it: the square root
 * of re^2 + im^2 summed in double, rounded to float (both squares are exact in double and cannot
 * overflow or underflow there, so the only errors are the sum's and the square root's roundings
 * in double and the final one to float: at most 0.5 ulp plus 2^-28 ulp; glibc's hypotf computes
 * the same). An infinite component gives +inf even beside a NaN, as hypot does. */
static inline float ex_cabs_f32(float re, float im) {
    double x = re, y = im, r = sqrt(x * x + y * y);
    return isinf(re) || isinf(im) ? INFINITY : (float)r;
}
/* Opcodes whose usual kernels move complex values unchanged (movers, tuples, calls, loops), and
 * custom-call, whose targets check their own dtypes. */
bool ex_complex_passes_through(ot_opcode op);
/* The fft instruction i from in to out (fft.c): the lines of each stage on c's pool, or all on
 * the calling thread when c is NULL; the same bits either way. UNIMPLEMENTED for c128/f64. */
struct ex_kernel_ctx;
ot_status ex_fft(struct ex_kernel_ctx *c, const ot_instr *i, const void *in, void *out);

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
