/* Internal to src/autodiff: the reverse-pass context shared by the driver (grad.c) and the
 * per-opcode rules (rules.c). */
#ifndef OT_AUTODIFF_INTERNAL_H
#define OT_AUTODIFF_INTERNAL_H

#include "optitpu/autodiff.h"
#include "optitpu/ir.h"

/* Per primal instruction of the entry computation (instr->mark = index + 1; instructions built
 * by the reverse pass have mark 0). */
typedef struct ad_slot {
    ot_instr *adj;   /* accumulated adjoint (same shape and dtype as the instruction), or NULL */
    ot_instr **elem; /* a conditional's tuple result: per-element adjoints (ot_calloc'd), or NULL */
    bool fwd;        /* depends on a source (wrt parameter) through floating-point values */
    bool need;       /* fwd, and some differentiated output depends on it */
    bool src;        /* a source: its adjoint is collected, no rule applied */
} ad_slot;

/* Scalar computations the reverse pass calls (reducers, selectors), made once per module. */
typedef struct ad_fns {
    ot_computation *add_fn[OT_DTYPE_COUNT];     /* scalar (x, y) -> x + y */
    ot_computation *ge_fn[OT_DTYPE_COUNT];      /* scalar (x, y) -> x >= y (select-and-scatter) */
    ot_computation *le_fn[OT_DTYPE_COUNT];      /* scalar (x, y) -> x <= y */
    ot_computation *mul_fn[OT_DTYPE_COUNT];     /* scalar (x, y) -> x * y */
    ot_computation *and_fn;                     /* pred (x, y) -> x and y */
    ot_computation *replace_fn[OT_DTYPE_COUNT]; /* scalar (x, y) -> y */
    ot_computation *unperm_fn[OT_DTYPE_COUNT];  /* sort comparator (s32 a, s32 b, T, T) -> a < b */
} ad_fns;

typedef struct ad_ctx {
    ot_module *m;
    ot_computation *c; /* the computation being differentiated (forward + reverse pass) */
    ad_slot *slots;
    int64_t nslots;
    ad_fns *fns;
    int64_t *tag; /* counter for unique names of inlined copies */
} ad_ctx;

/* The slot of a primal instruction, NULL for one the reverse pass built. */
static inline ad_slot *ad_slot_of(ad_ctx *ad, const ot_instr *i) {
    return (i->mark > 0 && i->mark <= ad->nslots) ? &ad->slots[i->mark - 1] : NULL;
}

/* Adds g to x's adjoint when x needs one (NULL g: nothing). */
void ad_acc(ad_ctx *ad, ot_instr *x, ot_instr *g);

/* Applies i's rule with adjoint g: contributions to i's operands through ad_acc. Returns
 * OT_ERR_UNIMPLEMENTED naming the opcode when i has no rule (g may be NULL to only ask). */
ot_status ad_rule(ad_ctx *ad, ot_instr *i, ot_instr *g);

/* The reverse-mode rule of a conditional (grad.c): each branch gets a computation computing its
 * operand's adjoint from the result's, and one conditional picks it. */
ot_status ad_rule_conditional(ad_ctx *ad, ot_instr *i, ot_instr *g);
/* sort (grad.c): the permutation from sorting an iota along with the operands (JAX's rule); each
 * adjoint is put back in the original order by sorting it by that permutation. */
ot_status ad_rule_sort(ad_ctx *ad, ot_instr *i, ot_instr *g);

/* Builder helpers (NULL after the module's sticky error). */
ot_instr *ad_full(ad_ctx *ad, ot_dtype t, double v, const ot_shape *s);
ot_computation *ad_binary_fn(ad_ctx *ad, ot_computation **cache, ot_dtype t, ot_opcode op,
                             ot_cmp_dir dir, const char *name);

#endif /* OT_AUTODIFF_INTERNAL_H */
