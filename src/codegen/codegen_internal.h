/* Native code for loop fusions: C source generated per fusion, compiled by the system C compiler
 * into a shared object, cached on disk and loaded with dlopen (see docs/codegen.md). */
#ifndef OT_CODEGEN_INTERNAL_H
#define OT_CODEGEN_INTERNAL_H

#include "compiler/executable_internal.h"

#include <stdarg.h>

/* A growing string. */
typedef struct cg_buf {
    char *p;
    size_t n, cap;
    bool oom;
} cg_buf;
void cg_buf_printf(cg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cg_buf_free(cg_buf *b);

/* How kernel k reads its inputs: alias[q] = r when input q is the memory of output r (an
 * in-place or donated update), else -1. */
typedef struct cg_kernel_io {
    int ninputs, noutputs;
    const int *alias;
} cg_kernel_io;

/* Appends "void <fname>(void *const *in, void *const *out, int64_t b, int64_t e)" computing
 * elements [b, e) of the loop fusion kn (output elements of a reduce-rooted fusion, each *work
 * input elements) to src. Returns OT_OK, or OT_ERR_UNIMPLEMENTED with the
 * reason when the fusion holds something the generator does not emit (the interpreter then runs
 * it); *numel gets the iteration space. */
ot_status cg_emit_fusion(const ot_kernel *kn, const cg_kernel_io *io, const char *fname,
                         cg_buf *src, int64_t *numel, int64_t *work);

/* The helper functions every generated file starts with. */
void cg_emit_preamble(cg_buf *src);

/* ---- the native program of an executable ------------------------------------------------ */

typedef void (*cg_fn)(void *const *in, void *const *out, int64_t b, int64_t e);

typedef struct cg_entry {
    cg_fn fn;      /* NULL: this kernel is interpreted */
    int64_t numel; /* iteration space (output elements of a reduce) */
    int64_t chunk; /* iterations per piece of the fixed partition */
    int nin, nout;
    int *alias; /* per input: the output whose memory it is, or -1 */
    int64_t *in_bytes, *out_bytes;
} cg_entry;

typedef struct cg_program {
    void *handle; /* dlopen handle */
    int nk;
    cg_entry *k;
    int nnative;
    uint8_t key[32];
    bool from_cache;
} cg_program;

/* The executable's native program: generated, compiled (or loaded from the disk cache) on the
 * first call, then reused; thread-safe. NULL when code generation is off (OPTITPU_CODEGEN=0),
 * no compiler is found, compiling failed (logged) or no kernel qualifies. */
const cg_program *cg_program_get(const ot_executable *exe);
void cg_program_free(cg_program *p);

/* Runs kernel k natively when it has native code and its buffers are laid out as compiled for,
 * split over pool (NULL: the default pool): returns true with the kernel done. False: the caller
 * interprets it. */
bool cg_run(const cg_program *p, int k, void *const *in, void *const *out, ot_threadpool *pool);

/* "fusion-native" / "fusion-interp" for fusions, else the kernel kind's name. */
const char *cg_kind_name(const cg_program *p, int k, const ot_kernel *kn);

#endif
