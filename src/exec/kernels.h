/* exec's kernel interface for the layers above it (the runtime's execution loop): one entry,
 * ex_kernel_run, runs one kernel — an instruction over memory the caller bound — by its fast
 * kernel when one covers it, else by its reference kernel.
 *
 * Kernels, all in src/exec: the reference kernels (the evaluator's per-op code: elementwise.c,
 * linalg.c, reduce.c, shape_ops.c, ...) and their fast twins in the fast_*.c files: dot through
 * OpenBLAS GEMM (fast_dot.c), convolution by im2col + GEMM (fast_conv.c), cache-blocked transpose
 * (fast_transpose.c), data movement as copies of contiguous runs (fast_shape.c: slice,
 * dynamic-slice, dynamic-update-slice, concatenate, pad, broadcast, reverse), parallel reductions
 * (fast_reduce.c), typed elementwise loops (fast_elementwise.c), gather (fast_gather.c),
 * add/overwrite scatter (fast_scatter.c) and pooling: reduce-window and select-and-scatter
 * (fast_window.c), each writing straight into its output leaf.
 * A kernel a fast twin does not cover (dtype, shape, aliasing) runs the reference kernel, which
 * evaluates on borrowed views of the inputs and copies its result into the outputs. Generated
 * native code for loop fusions is a compile stage (src/codegen); the runtime offers a fusion to
 * it before calling here.
 *
 * Thread safety: a context belongs to one run on one thread at a time; ex_kernel_run splits a
 * large fast kernel over the context's pool and returns when it is done. */
#ifndef OT_EXEC_KERNELS_H
#define OT_EXEC_KERNELS_H

#include "optitpu/core.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"

#include <stdbool.h>
#include <stddef.h>

/* Scratch buffers kept between runs (of one executable): up to EX_SCRATCH_SLOTS buffers of at
 * most EX_SCRATCH_KEEP bytes each, so that a run whose kernels need tens of MB of scratch (im2col)
 * does not map and fault in fresh pages every time. All zero (static or calloc'd memory) is an
 * empty cache. Thread-safe: runs on different threads take and return buffers concurrently (one
 * atomic exchange per slot, no lock); a buffer is used by one run at a time. The owner frees the
 * buffers with ex_scratch_cache_clear when no run uses the cache any more. */
#define EX_SCRATCH_SLOTS 4
#define EX_SCRATCH_KEEP  ((size_t)256 << 20)
typedef struct ex_scratch_cache {
    _Atomic(void *) slot[EX_SCRATCH_SLOTS];
} ex_scratch_cache;

/* Frees every buffer the cache holds; no run may be using it. */
void ex_scratch_cache_clear(ex_scratch_cache *sc);
/* A buffer of at least bytes bytes (64-byte aligned, contents undefined): a kept one that holds
 * it (the first found), else a new one; NULL when out of memory (no error set). Thread-safe. */
void *ex_scratch_cache_take(ex_scratch_cache *sc, size_t bytes);
/* Gives back p (from ex_scratch_cache_take; NULL: nothing): kept in a free slot of sc when it
 * has at most EX_SCRATCH_KEEP bytes, else freed; sc NULL frees it (a failed run keeps nothing,
 * as the kernel scratch). Thread-safe. */
void ex_scratch_cache_give(ex_scratch_cache *sc, void *p);

/* Per-run kernel context: the pool kernels split over, the FTZ/DAZ mode, the reference kernels'
 * options, and one scratch buffer that grows to the largest need of the run (so a run allocates
 * at most once per larger need, never per kernel), taken from and returned to a scratch cache
 * when one is attached. */
/* An output fusion: a loop applied to elements [b, e) (row-major linear indices) of a kernel's
 * result right after the kernel has computed them, while they are in cache. */
typedef struct ex_epilogue {
    void (*fn)(const void *ctx, int64_t b, int64_t e);
    const void *ctx;
} ex_epilogue;

typedef struct ex_kernel_ctx {
    ot_threadpool *pool;         /* size 1: everything on the calling thread */
    bool use_default_pool;       /* pool NULL: ot_threadpool_default(), created at the first kernel
                                    large enough to need it (small programs never start threads) */
    bool ftz;                    /* flush f32/f64 subnormals (the evaluator's default) */
    bool reference_only;         /* every kernel is the reference kernel (reference_kernels) */
    const ot_eval_options *eval; /* the reference kernels' options (while limit, poll, comm);
                                    borrowed, outlives the run */
    char *scratch;
    size_t cap;
    ex_scratch_cache *cache; /* where the scratch comes from and goes back to (NULL: none) */
    int64_t fast_run;        /* kernels run by a fast kernel (statistics for tests) */
    /* Set by the caller for one dot or convolution (NULL otherwise): the fast dot's own f32 GEMM
     * and the oneDNN convolution (forward and input-gradient readings, output written in place
     * with its images outermost) apply it to every block of their result and set
     * epilogue_done; any other path leaves epilogue_done false and the caller runs the loop
     * itself. */
    const ex_epilogue *epilogue;
    bool epilogue_done;
    struct ex_loop_cache *loop; /* set by a compiled while loop for its body's run, else NULL */
} ex_kernel_ctx;

/* What a compiled while loop's body keeps across its iterations (src/runtime/execute.c,
 * run_loop): the loop state's buffers that no iteration writes (leaves the body passes through
 * unchanged: weights, a scan's inputs), and per dot a packed copy of such a buffer, made in the
 * first iteration and read by the others (fast_dot.c) instead of packing the same operand again
 * each iteration. The copy holds exactly what packing would write, so results do not change.
 * Owned by one execution of the loop: built before its first iteration, freed after its last
 * (ex_loop_cache_free); at most EX_LOOP_CACHE_MAX bytes of copies. Used by one thread at a time
 * (the one that runs the body's kernels). */
#define EX_LOOP_CACHE_MAX ((size_t)64 << 20)
typedef struct ex_loop_entry {
    const void *key, *src; /* the kernel's instruction, the buffer it packed */
    char *buf;
    size_t bytes;
    bool ready; /* buf holds the packed copy */
} ex_loop_entry;
typedef struct ex_loop_cache {
    void *const *inv; /* the buffers no iteration writes (borrowed) */
    int ninv;
    ex_loop_entry *e;
    int n, cap;
    size_t total;
} ex_loop_cache;

/* An empty cache over the ninv invariant buffers inv (borrowed: they outlive the cache). */
void ex_loop_cache_init(ex_loop_cache *lc, void *const *inv, int ninv);
void ex_loop_cache_free(ex_loop_cache *lc);
/* Whether p is one of c's loop's invariant buffers (false without a loop). */
bool ex_loop_invariant(const ex_kernel_ctx *c, const void *p);
/* The buffer of `bytes` kept for kernel `key`'s packed copy of invariant buffer src: its entry
 * (ready false until the kernel has filled it and set it), or NULL when there is no loop, src is
 * not invariant, or the cache's limit or memory is exhausted (the kernel then packs as usual). */
ex_loop_entry *ex_loop_buffer(ex_kernel_ctx *c, const void *key, const void *src, size_t bytes);

/* pool NULL: the process-wide default pool. eval NULL: ot_eval_options_default(). The FTZ mode
 * follows eval->keep_denormals. reference_only: never a fast kernel. */
void ex_kernel_ctx_init(ex_kernel_ctx *c, ot_threadpool *pool, const ot_eval_options *eval,
                        bool reference_only);
/* Attaches cache sc (borrowed; outlives the context): c takes a buffer from it now, if it holds
 * one, and ex_kernel_ctx_release returns c's scratch to it. sc NULL detaches: the scratch is then
 * freed at release (a failed run's caller may detach so that failures leave nothing behind). */
void ex_kernel_ctx_set_cache(ex_kernel_ctx *c, ex_scratch_cache *sc);
/* Returns the scratch to the attached cache (freed when the cache is full or the buffer is over
 * EX_SCRATCH_KEEP bytes), or frees it; the context may be initialized again. */
void ex_kernel_ctx_release(ex_kernel_ctx *c);

/* One leaf of a kernel's operands or results: an array of `shape` (borrowed) in nbytes bytes. */
typedef struct ex_leaf {
    const ot_shape *shape;
    int64_t nbytes;
} ex_leaf;

/* Runs instruction i over in[k] (ins[k] its leaf: the operands' array leaves, flattened in
 * operand order, tuples depth-first) into out[k] (outs[k]: the result's leaves). i NULL: a copy
 * kernel, the one input's bytes moved into the one output (same size; may be the same memory).
 * A fast kernel when one covers i and c->reference_only is false (*fast set true), else the
 * reference kernel. Inputs are read in place; an output may be exactly an input's memory (an
 * in-place update). name names the kernel in error messages. Errors: the kernel's own (the
 * reference evaluator's messages, wrapped with name), OUT_OF_MEMORY for scratch or a result
 * value, INTERNAL when the leaves do not match the instruction's operands or result. */
ot_status ex_kernel_run(ex_kernel_ctx *c, const ot_instr *i, const char *name, int nin,
                        void *const *in, const ex_leaf *ins, int nout, void *const *out,
                        const ex_leaf *outs, bool *fast);

/* Below this many bytes touched (a dot: a quarter of it in multiply-adds) a fast kernel runs on
 * the calling thread without waking the pool. */
int64_t ex_inline_bytes(void);

/* Whether the fast dot kernel splits instruction i over a pool of `threads` threads (more than
 * one task in its first pass, multiply-adds x 4 from ex_inline_bytes); ot_host_dot_splits. */
bool ex_fast_dot_splits(const ot_instr *i, int threads);

#endif
