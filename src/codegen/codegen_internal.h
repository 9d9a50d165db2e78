/* Native code for loop fusions, inside src/codegen: C source generated per fusion, compiled by
 * the system C compiler into a shared object, cached on disk and loaded with dlopen (see
 * docs/codegen.md). Other folders use codegen/codegen.h; the program's layout is here for
 * emit.c, program.c and the tests that inspect it. */
#ifndef OT_CODEGEN_INTERNAL_H
#define OT_CODEGEN_INTERNAL_H

#include "codegen/codegen.h"
#include "core/core_util.h" /* ot_strbuf: the generated source is built in one */

#include <stdarg.h>
#include <string.h>

/* Appends "void <fname>(void *const *in, void *const *out, int64_t b, int64_t e)" computing
 * elements [b, e) of the loop fusion kd (output elements of a reduce-rooted fusion, each *work
 * input elements) to src. Returns OT_OK, or OT_ERR_UNIMPLEMENTED with the
 * reason when the fusion holds something the generator does not emit (the interpreter then runs
 * it); *numel gets the iteration space, *min_iters the fewest iterations a piece of the
 * parallel partition may hold. *nblk > 0: the kernel also has the block form of a lane-ordered
 * sum of few long rows, "void <fname>_tree(in, out, void *part, b, e)" (the lane trees of blocks
 * [b, e) of numel * nblk, each into part[q]) and "<fname>_fold" (outputs [b, e) from the trees;
 * part holds numel * nblk elements of the output's type); see emit_reduce_blocks. */
ot_status cg_emit_fusion(const cg_kernel_desc *kd, const char *fname, ot_strbuf *src,
                         int64_t *numel, int64_t *work, int64_t *min_iters, int64_t *nblk,
                         bool *cols);

/* The helper functions every generated file starts with. */
void cg_emit_preamble(ot_strbuf *src);

/* Appends to a unit's source the vector wrappers (the GNU vector ABI clones) of the SLEEF
 * functions that its kernels, the text from offset `from` on, call (src/exec/vmath.h). */
void cg_emit_vmath_wrappers(ot_strbuf *src, size_t from);

/* ---- the native program ---------------------------------------------------------------------- */

typedef void (*cg_fn)(void *const *in, void *const *out, int64_t b, int64_t e);
typedef void (*cg_part_fn)(void *const *in, void *const *out, void *part, int64_t b, int64_t e);

typedef struct cg_entry {
    cg_fn fn;      /* NULL: this kernel is interpreted */
    int64_t numel; /* iteration space (output elements of a reduce) */
    int64_t chunk; /* iterations per piece of the fixed partition */
    int nin, nout;
    int *alias; /* per input: the output whose memory it is, or -1 */
    int64_t *in_bytes, *out_bytes;
    int unit;        /* the unit holding its code */
    uint64_t linear; /* cg_kernel_desc.linear */
    int64_t per;     /* elements of each output per iteration (1, or a row of the last dim) in the
                        elementwise loop; 0 for the reduction forms */
    int64_t nblk;    /* > 0: the block form (cg_emit_fusion), blocks per output */
    bool cols;       /* the column form (cg_emit_fusion): each piece reads every reduced row */
    cg_part_fn tree, fold; /* its two functions */
} cg_entry;

/* A unit: consecutive native kernels compiled into one shared object. */
typedef struct cg_unit {
    void *handle;          /* dlopen handle */
    int first, last;       /* kernel indices (the native ones between them belong to it) */
    int nkernels;          /* native kernels */
    int64_t c_bytes;       /* generated C of its kernels (the preamble aside) */
    bool from_cache;       /* loaded from the disk cache: nothing compiled */
    uint64_t t0_ns, t1_ns; /* when its compiler started and was reaped (0: not compiled) */
    uint64_t cpu_ns;       /* the compiler's CPU time */
} cg_unit;

struct cg_program {
    int nk;
    cg_entry *k;
    int nnative;
    cg_unit *units;
    int nunits;
    uint8_t key[32]; /* the first unit's cache key */
    bool from_cache; /* every unit came from the cache */
};

#endif
