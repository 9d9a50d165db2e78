/* Internal: the built-in optimizer table. */
#ifndef OT_OPTIM_INTERNAL_H
#define OT_OPTIM_INTERNAL_H

#include "optitpu/optim.h"

/* The built-in vtable of that name, or NULL. */
const ot_optimizer_vtable *ot_optim_builtin(const char *name);
/* The wrapped optimizer of a Lookahead (NULL for others) and Lookahead's vtable. */
const ot_optimizer *ot_optim_inner(const ot_optimizer *o);
const ot_optimizer_vtable *ot_optim_lookahead_vtable(void);
/* The view vtable (ot_tpu_optimizer_as_optimizer): every entry delegates to the inner copy. */
const ot_optimizer_vtable *ot_optim_view_vtable(void);
/* A view of a copy of inner. */
ot_status ot_optim_new_view(const ot_optimizer *inner, ot_optimizer **out);
/* Sets hyper-parameter name to 0 in o or, when o has none, in its wrapped optimizer (recursively);
 * *found tells whether one was set. */
ot_status ot_optim_zero_hparam(ot_optimizer *o, const char *name, bool *found);

/* The optimizer whose host callback runs o's update (o, or the one a view delegates to), or
 * NULL when o's update is a graph. */
const ot_optimizer *ot_optim_host_target(const ot_optimizer *o);
/* Runs o's host callback on the given memory (dtype and shapes already checked). */
ot_status ot_optim_host_call(const ot_optimizer *o, const ot_shape *ps, void *param,
                             const void *grad, void *const *state, int64_t step, double lr);

/* The fused 8-bit state kernel's rule for o's update (exec/state8.h): adam and adamw (torch's
 * form, without amsgrad), lion, sgd with momentum, on f32. Writes the rule and its flags to cfg
 * (the backend_config without maps=) and its scalar operands, built from in->step and in->lr in
 * in->c as o's graph computes them, to sc[0..*nsc); false (nothing built) for other optimizers. */
bool ot_optim_state8_supported(const ot_optimizer *o); /* whether the rule below exists for o */
bool ot_optim_state8_rule(const ot_optimizer *o, const ot_optim_inputs *in, char *cfg, size_t cap,
                          ot_instr **sc, int *nsc);

#endif
