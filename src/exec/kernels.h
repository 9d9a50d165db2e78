/* Fast kernels: native implementations of dot (OpenBLAS GEMM), convolution (im2col + GEMM),
 * transpose (cache-blocked), reduce (parallel, fixed partition) and plain elementwise ops
 * (written straight into their output slot), each with the reference kernel of src/exec as its
 * twin. The kernel-list interpreter (execute.c) offers every kernel here first; a kernel not
 * covered (dtype, shape, aliasing) runs the reference kernel instead. */
#ifndef OT_EXEC_KERNELS_H
#define OT_EXEC_KERNELS_H

#include "optitpu/compiler.h"
#include "optitpu/core.h"

#include <stdbool.h>
#include <stddef.h>

/* Per-run state: the pool kernels split over, the FTZ/DAZ mode, and one scratch buffer that grows
 * to the largest need of the run (so a run allocates at most once per larger need, never per
 * kernel). */
typedef struct rt_fast_ctx {
    ot_threadpool *pool;   /* size 1: everything on the calling thread */
    bool use_default_pool; /* pool NULL: ot_threadpool_default(), created at the first kernel
                              large enough to need it (small programs never start threads) */
    bool ftz;              /* flush f32/f64 subnormals (the evaluator's default) */
    char *scratch;
    size_t cap;
    int64_t fast_run; /* kernels run by a fast kernel (statistics for tests) */
} rt_fast_ctx;

/* pool NULL: the process-wide default pool. */
void rt_fast_ctx_init(rt_fast_ctx *c, ot_threadpool *pool, bool keep_denormals);
void rt_fast_ctx_release(rt_fast_ctx *c);

/* Runs instruction i natively when a fast kernel covers it: in[k] / ins[k] are its (flattened)
 * input leaves, out[k] / outs[k] its output leaves. *done false (and OT_OK): not covered, run the
 * reference kernel. An error (out of memory for scratch) leaves *done true. */
ot_status rt_fast_kernel(rt_fast_ctx *c, const ot_instr *i, int nin, void *const *in,
                         const ot_slot *const *ins, int nout, void *const *out,
                         const ot_slot *const *outs, bool *done);

/* Transposes an array of rank r with dims `dims` and element size es: result dim k is input dim
 * perm[k]. Blocked for cache (tiles over the two dims that are innermost in input and output),
 * split over the pool for large arrays. src and dst must not overlap. */
void rt_transpose(rt_fast_ctx *c, size_t es, int r, const int64_t *dims, const int64_t *perm,
                  const void *src, void *dst);

#endif
