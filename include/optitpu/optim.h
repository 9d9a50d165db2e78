/*
 * optitpu optim: optimizer update rules as IR graphs (PyTorch's hyper-parameters and defaults).
 *
 * An optimizer is a const vtable (ot_optimizer_vtable) plus a context (ot_optimizer: its
 * hyper-parameter values and step count). For one parameter it declares its state slots (names as
 * torch.optim's state dict spells them; dtype = the parameter's) and builds the update graph from
 * IR nodes: param, grad, state..., step (f64 scalar, the step number t >= 1 being taken) and lr
 * (f64 scalar). step and lr are runtime parameters, never constants: one compiled update serves
 * every step and every learning rate (schedules need no recompile).
 *
 * Usage:
 *
 *     ot_optimizer *o;
 *     OT_CHECK(ot_optimizer_new("adamw", &o));
 *     OT_CHECK(ot_optimizer_set(o, "weight_decay", 0.1));      // unknown name: INVALID_ARGUMENT
 *     ot_module *m;
 *     OT_CHECK(ot_optimizer_build_module(o, &param_shape, &m)); // (p, g, s0.., step, lr) -> tuple
 *     ... compile or evaluate m once; each step feed step = t and lr = lr_t ...
 *     ot_module_free(m);
 *     ot_optimizer_free(o);
 *
 * ot_optimizer_step_reference runs one step through the reference evaluator (exec) on host
 * tensors: it validates shapes, dtypes and lr first and leaves parameters and state untouched on
 * any failure.
 *
 * Ownership: ot_optimizer_new allocates; ot_optimizer_free releases (NULL is a no-op). Modules
 * returned belong to the caller. Thread safety: an optimizer may be read (build) from many threads;
 * set/step need exclusive access.
 *
 * Conventions (docs/optim.md): gradients are clipped by the caller; weight decay is torch's
 * (coupled L2 for sgd/adam/rmsprop/adagrad/adadelta, decoupled p *= 1 - lr*wd for adamw); booleans
 * are hyper-parameters with values 0 or 1; torch's betas are "beta1" and "beta2".
 */
#ifndef OPTITPU_OPTIM_H
#define OPTITPU_OPTIM_H

#include "optitpu/core.h"
#include "optitpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OT_OPTIM_MAX_STATE   4
#define OT_OPTIM_MAX_HPARAMS 16

typedef struct ot_optimizer ot_optimizer;

/* The nodes an update graph is built from (all in computation c). */
typedef struct ot_optim_inputs {
    ot_computation *c;
    ot_instr *param, *grad;              /* same floating shape */
    ot_instr *state[OT_OPTIM_MAX_STATE]; /* ot_optimizer_state_count of them, param's shape */
    ot_instr *step;                      /* f64 scalar: t >= 1 */
    ot_instr *lr;                        /* f64 scalar */
} ot_optim_inputs;

/* What a builder produces: the new parameter and new state values. */
typedef struct ot_optim_outputs {
    ot_instr *param;
    ot_instr *state[OT_OPTIM_MAX_STATE];
} ot_optim_outputs;

typedef struct ot_optimizer_vtable {
    const char *name;
    int nhparams; /* <= OT_OPTIM_MAX_HPARAMS */
    const char *const *hparam_names;
    const double *hparam_defaults;
    /* Checks the hyper-parameter values (ranges); NULL: none. */
    ot_status (*validate)(const ot_optimizer *o);
    /* State slots, which may depend on hyper-parameters (<= OT_OPTIM_MAX_STATE). */
    int (*state_count)(const ot_optimizer *o);
    const char *(*state_name)(const ot_optimizer *o, int i);
    /* Initial value of every element of state slot i (0 for most). NULL: 0. */
    double (*state_init)(const ot_optimizer *o, int i);
    /* Builds the update graph; errors are recorded on the module (builder sticky error). */
    ot_status (*build)(const ot_optimizer *o, const ot_optim_inputs *in, ot_optim_outputs *out);
    /* True when state slot i is one scalar per parameter (rank 0, the parameter's dtype) rather
     * than an array of the parameter's shape (NAdam's mu_product). NULL: every slot is an array. */
    bool (*state_is_scalar)(const ot_optimizer *o, int i);
} ot_optimizer_vtable;

/* Built-ins: "sgd", "adam", "adamw", "rmsprop", "adagrad", "adadelta", "radam", "nadam", "lion".
 * NOT_FOUND otherwise. */
OT_API ot_status ot_optimizer_new(const char *name, ot_optimizer **out);
/* An optimizer from a user vtable (kept by pointer: it must outlive the optimizer). */
OT_API ot_status ot_optimizer_new_custom(const ot_optimizer_vtable *vt, ot_optimizer **out);
OT_API void ot_optimizer_free(ot_optimizer *o);
/* A new optimizer with o's vtable, hyper-parameter values and step count. */
OT_API ot_status ot_optimizer_clone(const ot_optimizer *o, ot_optimizer **out);
OT_API const char *ot_optimizer_name(const ot_optimizer *o);
OT_API const ot_optimizer_vtable *ot_optimizer_vtable_of(const ot_optimizer *o);

/* Hyper-parameters by PyTorch name. set: INVALID_ARGUMENT for an unknown name, a NaN, or a value
 * the optimizer refuses (the old value is kept). get: NOT_FOUND for an unknown name. */
OT_API ot_status ot_optimizer_set(ot_optimizer *o, const char *name, double value);
OT_API ot_status ot_optimizer_get(const ot_optimizer *o, const char *name, double *value);
/* The value, or the default when name is unknown (for builders). */
OT_API double ot_optimizer_hparam(const ot_optimizer *o, const char *name);

OT_API int ot_optimizer_state_count(const ot_optimizer *o);
OT_API const char *ot_optimizer_state_name(const ot_optimizer *o, int i); /* NULL out of range */
/* The shape of state slot i for a parameter of shape s (s itself, or a rank-0 scalar). */
OT_API ot_status ot_optimizer_state_shape(const ot_optimizer *o, int i, const ot_shape *s,
                                          ot_shape *out);
/* Allocates state slot i for a parameter of shape s, filled with its initial value. */
OT_API ot_status ot_optimizer_state_alloc(const ot_optimizer *o, int i, const ot_shape *s,
                                          ot_tensor *out);

/* Steps taken so far (by ot_optimizer_step_reference or ot_optimizer_advance). */
OT_API int64_t ot_optimizer_step_count(const ot_optimizer *o);
OT_API void ot_optimizer_advance(ot_optimizer *o);

/* Builds the update graph for one parameter from caller nodes (checks them: floating param, grad
 * of the same shape and dtype, every state node present with that shape, f64 scalar step/lr). */
OT_API ot_status ot_optimizer_build(const ot_optimizer *o, const ot_optim_inputs *in,
                                    ot_optim_outputs *out);
/* A finalized module for a parameter of shape s: parameters 0 param, 1 grad, 2.. state, then
 * step and lr (f64 scalars); root tuple (new param, new state...). */
OT_API ot_status ot_optimizer_build_module(const ot_optimizer *o, const ot_shape *s,
                                           ot_module **out);

/* One step on host tensors through the reference evaluator, with lr and step = count + 1:
 * replaces *param and state[i] contents in place and advances the step count. On any error
 * (shape/dtype mismatch, NaN or negative lr, evaluation failure) nothing is changed. */
OT_API ot_status ot_optimizer_step_reference(ot_optimizer *o, ot_tensor *param,
                                             const ot_tensor *grad, ot_tensor *state, int nstate,
                                             double lr);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_OPTIM_H */
