/* Native code for loop fusions (docs/codegen.md): what the other folders may call. The compiler
 * describes an executable's kernels (cg_kernel_desc) and builds a cg_program as its last stage;
 * the runtime runs kernels through it. Codegen knows nothing of executables: it reads the fused
 * computations from the IR and the buffer facts the compiler hands it.
 *
 * Ownership: a program owns copies of everything it keeps from the descriptions (the IR they
 * point at is only read during cg_program_build) and its loaded shared objects; cg_program_free
 * releases them. Thread safety: building is serialized process-wide (the compiler's identity
 * is cached per process); a built program is read-only and may be run from any thread. */
#ifndef OT_CODEGEN_H
#define OT_CODEGEN_H

#include "optitpu/core.h"
#include "optitpu/ir.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct cg_program cg_program;

/* Kernel k of the program as the compiler sees it. fused NULL: not a candidate (not a fusion,
 * or its buffers share memory in a way one loop cannot handle); the interpreter runs it. */
typedef struct cg_kernel_desc {
    const ot_computation *fused; /* the fusion's computation (read during the build only) */
    const char *name;            /* for messages and the generated source's comments */
    int ninputs, noutputs;       /* tuple operands and results flattened into their leaves */
    const int *alias;            /* per input: the output whose memory it is (in place), or -1 */
    const int64_t *in_bytes, *out_bytes; /* per input / output: its buffer's size */
    uint64_t linear; /* bit q (q < 64): element e of every output depends only on element e of
                        input q (the compiler's fusion analysis), so any range of the loop
                        reads input q only in that range */
} cg_kernel_desc;

typedef enum cg_mode {
    CG_AUTO, /* native code when one fusion reaches the size threshold (OPTITPU_CODEGEN=0: off) */
    CG_ON,   /* every supported fusion, whatever its size */
    CG_OFF,
} cg_mode;

typedef struct cg_options {
    cg_mode mode;
    int64_t unit_bytes; /* C per shared object; 0: OPTITPU_CODEGEN_UNIT_BYTES, else 128 KiB */
    const char *cc;     /* compiler path or name on PATH; NULL: OPTITPU_CC, else cc */
    bool all_sizes;     /* AUTO without the size threshold (the run-time tier-up of a module of
                           small fusions, compiler/native.h); no effect on ON and OFF */
} cg_options;

/* Generates C for the supported fusions among k[0..nk) (program kernel i is k[i]), compiles the
 * units missing from the disk cache and loads them. *out NULL with OT_OK: nothing to run
 * natively (off, no compiler found, no supported fusion, or in AUTO every fusion below the size
 * threshold). An error (a failed compile, I/O, memory) leaves *out NULL; the caller decides
 * whether to fall back. */
ot_status cg_program_build(const cg_kernel_desc *k, int nk, const cg_options *o, cg_program **out);
void cg_program_free(cg_program *p); /* NULL is a no-op */

/* What the build did. */
typedef struct cg_stats {
    int nnative;            /* kernels with native code */
    int nunits;             /* shared objects holding them */
    int ncompiled, ncached; /* units compiled by the C compiler / loaded from the disk cache */
    uint64_t cc_cpu_ns;     /* the compiler processes' CPU time (user + system) */
} cg_stats;
void cg_program_stats(const cg_program *p, cg_stats *out); /* p NULL: all zero */

/* Calls fn once per unit compiled (not loaded from the cache): its name ("codegen unit 3: 15
 * kernels (64..78), 89 KB of C, cc cpu 0.736 s"), the compiler's start and end (ot_now_ns) and
 * the unit's bytes of C. A non-OK return stops the walk and is returned. */
typedef ot_status (*cg_report_fn)(void *ctx, const char *name, uint64_t t0_ns, uint64_t t1_ns,
                                  int64_t c_bytes);
ot_status cg_program_report(const cg_program *p, cg_report_fn fn, void *ctx);

/* Whether kernel k has native code. */
bool cg_native(const cg_program *p, int k);
/* Whether cg_run splits kernel k's native loop over the pool (more iterations than one piece;
 * from inside a pool task it never does). */
bool cg_splits(const cg_program *p, int k);

/* Iterations per piece of kernel k's loop that cg_run hands a pool of `threads` threads: the
 * fixed partition (elements or rows per piece; at least a cache line of columns for a column
 * reduce), a column reduce's in one piece per thread. 0 when k has no native code. */
int64_t cg_piece(const cg_program *p, int k, int threads);

/* Runs kernel k natively when it has native code and its buffers are laid out as compiled for,
 * split over pool (NULL: the default pool): returns true with the kernel done. False: the caller
 * interprets it. */
bool cg_run(const cg_program *p, int k, void *const *in, void *const *out, ot_threadpool *pool);

/* A native loop run over part of its iteration space by another kernel (an output fusion: the
 * fast dot applies the loop to each block of rows of its result right after computing it). */
typedef struct cg_range {
    void (*fn)(void *const *in, void *const *out, int64_t b, int64_t e);
    void *const *in, *const *out; /* borrowed: they outlive the runs */
    int64_t per;                  /* elements per iteration: 1, or one row of the last dim */
} cg_range;
/* Whether kernel k can run piecewise over its input q: it has native code, the elementwise loop
 * (no reduce) over numel elements of every output, input q read only at each element's own
 * index (cg_kernel_desc.linear) and its buffers laid out as compiled for (as cg_run checks).
 * On true *r runs it: cg_range_run(r, b, e) computes elements [b, e) of every output, b and e
 * multiples of the last dim's size (whole rows); every range once, in any order, equals
 * cg_run. */
bool cg_range_of(const cg_program *p, int k, int q, int64_t numel, void *const *in,
                 void *const *out, cg_range *r);
static inline void cg_range_run(const cg_range *r, int64_t b, int64_t e) {
    r->fn(r->in, r->out, b / r->per, e / r->per);
}

#endif
