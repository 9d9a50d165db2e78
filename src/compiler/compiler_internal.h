/* Compiler internals shared by the src/compiler sources. */
#ifndef OT_COMPILER_INTERNAL_H
#define OT_COMPILER_INTERNAL_H

#include "ir/ir_passes.h"
#include "optitpu/compiler.h"

#include <string.h>

/* Grows *p (element size sz) to hold at least need elements; *cap updated. */
ot_status cc_grow(void *pp, int64_t *cap, int64_t need, size_t sz);

/* Pointer -> int64 map (open addressing, no deletion); get returns -1 when absent. */
typedef struct cc_ptrmap {
    struct cc_ptrslot {
        const void *k;
        int64_t v;
    } * slots;
    uint64_t cap, n;
} cc_ptrmap;
ot_status cc_ptrmap_put(cc_ptrmap *m, const void *k, int64_t v);
int64_t cc_ptrmap_get(const cc_ptrmap *m, const void *k);
void cc_ptrmap_free(cc_ptrmap *m);

/* Every computation reachable from the entry (entry included), callees first; ot_malloc'd. The
 * entry's instructions are visited in entry_order[0..nentry) when it is given (a schedule: the
 * order serialization writes them in, so a reader finds the same computation order), else in
 * instruction-list order. */
ot_status cc_reachable(const ot_module *m, ot_instr *const *entry_order, int64_t nentry,
                       ot_computation ***out, int *n);

/* Every computation reachable from the entry, callees first, each with its post order
 * (cc_post_order), found in one walk: the called computations are read from the post-order
 * arrays instead of a second walk over the instruction lists. A pass may edit computation k
 * while it holds the orders: the other computations' orders stay valid. */
typedef struct cc_orders {
    ot_computation **comps;
    int n;
    ot_instr ***po;
    int64_t *npo;
    uint64_t edits; /* the module's edit count when built */
} cc_orders;
ot_status cc_orders_build(const ot_module *m, cc_orders *o);
void cc_orders_free(cc_orders *o);

/* Orders shared by consecutive passes: a pass takes the orders (the ones the previous pass gave
 * back when the module has not been edited since, else cc_orders_build) and gives them back when
 * done; they are kept for the next pass only if the module is still unedited, i.e. exactly what
 * cc_orders_build would return again. The module's edit count (src/ir) counts every change that
 * can change a post order: instructions created or removed, operands replaced, computations added
 * or removed, the entry. */
ot_status cc_orders_take(ot_module *m, cc_orders *o);
void cc_orders_give(ot_module *m, cc_orders *o);
/* Keeps, as the orders of m, each computation's list, for a module whose lists are known to be
 * in post order (a clone made in post order): no walk of the operands. */
ot_status cc_orders_keep_lists(ot_module *m);
/* The entry computation's post order (cc_post_order(entry)), from the kept orders when valid. */
ot_status cc_entry_post_order(ot_module *m, ot_instr ***out, int64_t *n);

/* ot_computation_post_order's order (same traversal, fresh visit stamps as the visit state);
 * unlike it, it checks only that operands are in c, not that they are live (passes call it on
 * modules they keep consistent). Marks are left alone. */
ot_status cc_post_order(const ot_computation *c, ot_instr ***out, int64_t *n);

/* ot_schedule_entry given the entry's post order (cc_post_order), which it takes over (freed
 * also on failure). */
ot_status cc_schedule_post_order(ot_instr **po, int64_t np, bool minimize_memory, ot_instr ***order,
                                 int64_t *n);

/* Array numel of an instruction (0 for tuples/tokens). */
int64_t cc_numel(const ot_instr *i);
/* Row fusion (rowfuse.c), run at the end of the fusion pass. */
/* Whether input fusion R can take part in row fusion: as a row producer (*producer; every reduce
 * a row sum the row kernel generates, one of a parameter), or with a root that is such a sum.
 * The fusion pass asks while R's members are in cache, and offers cc_row_fuse only those. */
bool cc_row_candidate(const ot_instr *R, bool *producer);
/* inputs: the entry's input (reduce-rooted) fusions, the candidates, in the order to try them
 * (the fusion pass knows them: those it found and those it made); producer[j] false: inputs[j]
 * is no row producer (NULL: any may be) */
ot_status cc_row_fuse(ot_module *m, int max_io, ot_instr *const *inputs, const bool *producer,
                      int64_t ninputs, bool *changed);

/* A fused computation's operation count and the parameters (bit j, j < 64) that every path to
 * its outputs reads elementwise at the same index (so an output may overwrite that parameter's
 * buffer). Kept in fc until fc changes: the fusion pass finds them while fc is in cache. */
void cc_fusion_analysis(ot_computation *fc, int64_t *flops, uint64_t *linear);
/* cc_fusion_analysis for a fused computation just made, while its members are in cache. */
void cc_fusion_note(ot_computation *fc);

/* Test hooks of the fusion pass (not thread-safe; only tests set them). no_search: the
 * reachability searches answer "no cycle" without looking, so that the exact check after
 * clustering alone must keep the fused graph acyclic; splits counts the clusters that check
 * split, in every run. */
typedef struct cc_fuse_test_hooks {
    bool no_search;
    int64_t splits;
} cc_fuse_test_hooks;
extern cc_fuse_test_hooks cc_fuse_test;

/* Constant folding needs the reference evaluator (exec); false until it is built. */
bool cc_fold_available(void);

/* SHA-256 over the canonical encoding of the module, the options and the target. */
ot_status cc_fingerprint(const ot_module *m, const ot_compile_options *o,
                         const ir_module_orders *orders, uint8_t out[32]);

#endif
