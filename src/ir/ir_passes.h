/* What src/ir offers the layers above it (the compiler's passes, autodiff) beyond the public API:
 * the module's edit count, the storage recycling of removed instructions, visit stamps, the pass
 * cache, orders computed once for several walks of an unedited module, and a pointer map. Included
 * by ir_internal.h, compiler_internal.h and autodiff. Not thread-safe: one thread edits a module.
 */
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
/* Moves x (live, not a parameter) to the end of dst, a computation of the same module, under its
 * name (or "<name>.<k>", the first free one, when dst has it already); operands, users and
 * the source computation's root are left as they are: the caller rewires the edges that cross
 * the two computations (ot_instr_replace_operand) before anything else reads the module. Fusion
 * outlines the members of a cluster this way instead of cloning them and removing the
 * originals. On failure (out of memory) nothing changed. */
ot_status ir_instr_move(ot_instr *x, ot_computation *dst);
/* Replaces each operand o of y by map(ctx, o) where that is not NULL and not o: an instruction of
 * y's computation with o's shape. Each users list changes once per distinct instruction, in time
 * linear in y's operand count (replacing operand by operand scans the list per slot: quadratic
 * for a tuple of many outputs). On failure nothing changed. Uses visit stamps. */
ot_status ir_instr_map_operands(ot_instr *y, ot_instr *(*map)(void *ctx, const ot_instr *o),
                                void *ctx);
/* Live `call` instructions in the module, all computations: inlining has nothing to do at 0. */
int64_t ir_module_call_count(const ot_module *m);
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
/* Writes nothing to m (its visit state is an array of its own), so one thread may build the
 * orders while others read m. */
ot_status ir_module_orders_build(const ot_module *m, ir_module_orders *o);
void ir_module_orders_free(ir_module_orders *o);
/* ot_module_clone and ir_hlo_print_stream over orders built for m (NULL: they find them). */
ot_status ir_module_clone_ordered(const ot_module *src, const ir_module_orders *o, ot_module **out);
/* As the order of ir_module_clone_ordered: the computations in definition order, each one's
 * instructions in list order, without a walk to find an order. When callees are defined before
 * their callers and every list has definitions before uses, that is exactly the post order;
 * otherwise the clone is OT_ERR_FAILED_PRECONDITION (nothing is returned) and the caller clones
 * over orders. The clone writes nothing to src, so it may run beside ir_module_orders_build. */
extern const ir_module_orders ir_orders_lists;
#define IR_ORDERS_LISTS (&ir_orders_lists)
/* A new module holding a copy of c (its entry, named as c) and of the computations it calls,
 * directly or through them, callees first: what the compiler needs to compile a loop body or
 * condition as a program of its own. Time and memory linear in what is copied (a walk with an
 * explicit stack, no recursion). The module configuration (replicas, aliases) is not copied. */
ot_status ir_module_extract(const ot_computation *c, ot_module **out);
/* A parameter of c with the shape of an instruction of c's module (so known to be valid: no
 * inference), named "parameter.<id>". */
ot_status ir_param_known(ot_computation *c, int64_t number, const ot_ir_shape *shape,
                         ot_instr **out);
/* ot_hlo_print's text handed to sink in pieces (a 64 KiB buffer reused) instead of built as one
 * string; a sink error stops the printing and is returned. */
ot_status ir_hlo_print_stream(const ot_module *m, const ot_hlo_print_options *opts,
                              const ir_module_orders *orders,
                              ot_status (*sink)(void *ctx, const char *p, size_t n), void *ctx);

/* Pointer -> pointer map (open addressing, no deletion). */
typedef struct ir_ptr_map {
    struct ir_ptr_slot {
        const void *k;
        void *v;
    } * slots;
    uint64_t cap, n;
} ir_ptr_map;
ot_status ir_ptr_map_put(ir_ptr_map *m, const void *k, void *v);
void *ir_ptr_map_get(const ir_ptr_map *m, const void *k);
void ir_ptr_map_free(ir_ptr_map *m);

#endif /* OT_IR_PASSES_H */
