/* What src/ir offers the compiler's passes beyond the public API: the module's edit count, the
 * storage recycling of removed instructions, visit stamps, the pass cache, and orders computed
 * once for several walks of an unedited module. Included by ir_internal.h and
 * compiler_internal.h. */
#ifndef OT_IR_PASSES_H
#define OT_IR_PASSES_H

#include "optitpu/ir.h"

#include <stddef.h>
#include <stdint.h>

/* The module's edit count (see struct ot_module), and its pass cache: set replaces (and frees
 * through the previous free function) what was there; NULL clears it. */
uint64_t ir_module_edits(const ot_module *m);
/* Makes the storage of the instructions removed so far available to instructions created from
 * now on. Call it only where nothing holds pointers to removed instructions (between passes). */
void ir_module_recycle(ot_module *m);
/* Reserves k fresh visit stamps (ot_instr.visit_) and returns the value just below them: stamps
 * left by earlier traversals are all smaller, so nothing needs resetting first. */
uint64_t ir_visit_stamps(ot_module *m, uint64_t k);
void ir_module_set_pass_cache(ot_module *m, void *p, void (*free_fn)(void *));
void *ir_module_pass_cache(const ot_module *m);

/* A module's computations callees first (ot_module_post_order) and each one's post order
 * (ot_computation_post_order), computed once for several walks of an unedited module: compile
 * clones the source and prints it for the fingerprint, which would otherwise find both orders
 * twice. */
typedef struct ir_module_orders {
    ot_computation **comps;
    int ncomps;
    ot_instr ***po;
    int64_t *npo;
} ir_module_orders;
ot_status ir_module_orders_build(const ot_module *m, ir_module_orders *o);
void ir_module_orders_free(ir_module_orders *o);
/* ot_module_clone and ir_hlo_print_stream over orders built for m (NULL: they find them). */
ot_status ir_module_clone_ordered(const ot_module *src, const ir_module_orders *o, ot_module **out);
/* ot_hlo_print's text handed to sink in pieces (a 64 KiB buffer reused) instead of built as one
 * string; a sink error stops the printing and is returned. */
ot_status ir_hlo_print_stream(const ot_module *m, const ot_hlo_print_options *opts,
                              const ir_module_orders *orders,
                              ot_status (*sink)(void *ctx, const char *p, size_t n), void *ctx);

#endif /* OT_IR_PASSES_H */
