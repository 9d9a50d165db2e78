/* The LAPACK custom calls that JAX's CPU lowering emits for jnp.linalg and jax.scipy.linalg
 * (jaxlib's typed-FFI targets "lapack_<t><routine>_ffi", t = s for f32, d for f64): what each
 * target takes and returns, parsed once here, so that shape inference (ir/infer.c: a module
 * naming one with the wrong operands or results is refused when it is built or parsed) and the
 * kernel (src/exec/lapack.c) read the same description.
 *
 * Every matrix operand is [batch..., rows, cols] (logical, row-major in optitpu whatever layout
 * the text states: XLA passes these column-major, {0,1} or {1,2,0}, and the kernel converts);
 * the batch dimensions lead and are the same in every operand and result. With B = the batch
 * dimensions and k = min(m, n):
 *   potrf  a[B,n,n]                 -> (a[B,n,n], info s32[B])              uplo
 *   getrf  a[B,m,n]                 -> (a[B,m,n], ipiv s32[B,k], info s32[B])
 *   geqrf  a[B,m,n]                 -> (a[B,m,n], tau[B,k])
 *   orgqr  a[B,m,n], tau[B,t]       -> a[B,m,n]            (m >= n >= t)
 *   syevd  a[B,n,n]                 -> (v[B,n,n], w[B,n], info s32[B])      mode V|N, uplo
 *   gesdd, gesvd  a[B,m,n]          -> (a[B,m,n], s[B,k], u[B,m,m|k], vt[B,n|k,n], info s32[B])
 *                                      mode A (u m x m, vt n x n) | S (m x k, k x n) |
 *                                      N (either shape; u and vt are not computed)
 *   trsm   a[B,p,p], b[B,m,n]       -> x[B,m,n]            side L (p = m) | R (p = n), uplo,
 *                                      trans_x N|T|C, diag N|U
 * backend_config is the MLIR dictionary XLA prints, "{uplo = 76 : ui8, ...}", each flag a
 * character code; a flag the routine needs and the text lacks is an error. Complex dtypes
 * (lapack_c*, lapack_z*) and the other lapack_* targets (geev, gees, gehrd, sytrd, ...) are not
 * described: lapack_target_known says whether a target is one of these kinds. */
#ifndef OT_IR_LAPACK_CALL_H
#define OT_IR_LAPACK_CALL_H

#include "optitpu/ir.h"

#include <stdbool.h>

typedef enum ir_lapack_op {
    IR_LAPACK_POTRF,
    IR_LAPACK_GETRF,
    IR_LAPACK_GEQRF,
    IR_LAPACK_ORGQR,
    IR_LAPACK_SYEVD,
    IR_LAPACK_GESDD,
    IR_LAPACK_GESVD,
    IR_LAPACK_TRSM,
} ir_lapack_op;

typedef struct ir_lapack_call {
    ir_lapack_op op;
    ot_dtype dtype; /* OT_F32 or OT_F64 */
    /* the flags as LAPACK's character arguments ('L', 'U', 'N', ...); 0 where unused */
    char uplo, side, trans, diag, mode;
} ir_lapack_call;

/* Whether target names a jaxlib LAPACK kernel at all ("lapack_" prefix). */
bool ir_lapack_target_known(const char *target);

/* Parses target and backend_config (may be NULL) into *out. *is_lapack is false (and OT_OK)
 * for a target this header does not describe; INVALID_ARGUMENT names a bad or missing flag.
 * Pure; thread-safe. */
ot_status ir_lapack_parse(const char *target, const char *backend_config, ir_lapack_call *out,
                          bool *is_lapack);

/* Checks the operand shapes and the result shape against the table above; SHAPE_MISMATCH or
 * INVALID_ARGUMENT says which operand or result is wrong and what was expected. */
ot_status ir_lapack_check(const ir_lapack_call *c, const ot_ir_shape *const *operands, int n,
                          const ot_ir_shape *result);

/* The operand whose memory the first result may take (trsm's b, every other routine's a: the
 * same shape): the kernel reads each matrix of it before it writes that matrix of the result
 * (src/exec/lapack.c), as XLA's output_to_operand_aliasing declares. */
int ir_lapack_in_place_operand(const ir_lapack_call *c);

#endif /* OT_IR_LAPACK_CALL_H */
