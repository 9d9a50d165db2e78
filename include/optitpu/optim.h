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
 * are hyper-parameters with values 0 or 1; torch's betas are "beta1" and "beta2". With the flag
 * "optax" = 1, adam, adamw (amsgrad), rmsprop, adagrad, radam and nadam follow optax's
 * transformation chain and expression order instead (bias-corrected moments, eps_root inside the
 * square root, rmsprop's eps inside it and momentum after the learning rate, adamw's u + wd*p,
 * optax.nadam); "eps_root" (adam, adamw, radam, nadam) needs optax = 1.
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

/* Tensors laid back to back in one 1-D buffer (the device optimizer's flat mode): tensor i of
 * shape[i] (row-major) starts at element offset[i]; elements outside every tensor are gaps. */
typedef struct ot_optim_segments {
    int n;
    const int64_t *offset;
    const ot_shape *shape;
} ot_optim_segments;

/* The nodes an update graph is built from (all in computation c). */
typedef struct ot_optim_inputs {
    ot_computation *c;
    ot_instr *param, *grad;              /* same floating shape */
    ot_instr *state[OT_OPTIM_MAX_STATE]; /* ot_optimizer_state_count of them, param's shape */
    ot_instr *step;                      /* f64 scalar: t >= 1 */
    ot_instr *lr;                        /* f64 scalar */
    /* NULL, or param is a 1-D flat buffer of these segments: a builder that reduces over its
     * tensor (lamb's and lars's trust ratios) reduces over each segment (sliced out, reshaped
     * to its tensor's shape) and gives that segment's elements the result; gap elements get a
     * trust ratio of 0. Elementwise builders ignore it. */
    const ot_optim_segments *seg;
    /* Norms reduced elsewhere (the device optimizer's sharded mode, where a tensor spans
     * devices): NULL, or arrays of param's shape and dtype holding, for every element, its
     * tensor's sum of squares of the parameter (trust_p2) and of the update the trust ratio
     * scales (trust_u2); a builder with a trust ratio (lamb, lars) takes its norms from them
     * instead of reducing (seg is then ignored). trust_u: NULL, or where such a builder stores
     * that update (before the ratio), for whoever sums its squares. */
    ot_instr *trust_p2, *trust_u2;
    ot_instr **trust_u;
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
    /* The shape of state slot i for a parameter of shape param (Adafactor's factored rows and
     * columns). NULL: state_is_scalar decides. */
    ot_status (*state_shape)(const ot_optimizer *o, int i, const ot_shape *param, ot_shape *out);
} ot_optimizer_vtable;

/* Built-ins: "sgd", "adam", "adamw", "rmsprop", "adagrad", "adadelta", "radam", "nadam", "lion",
 * "lamb", "lars", "adafactor" (the last four with optax's formulas). NOT_FOUND otherwise. */
OT_API ot_status ot_optimizer_new(const char *name, ot_optimizer **out);
/* An optimizer from a user vtable (kept by pointer: it must outlive the optimizer). */
OT_API ot_status ot_optimizer_new_custom(const ot_optimizer_vtable *vt, ot_optimizer **out);
OT_API void ot_optimizer_free(ot_optimizer *o);
/* Lookahead (optax.lookahead; Zhang et al. 2019) wrapping a copy of inner (its hyper-parameters
 * as they are now): inner updates the fast weights (the parameter) every step; every
 * sync_period-th step (t % sync_period == 0) the slow weights move slow += slow_step_size *
 * (fast - slow) and the fast weights are set to them. State: inner's slots, then "slow" (the
 * parameter's shape, taken from the parameter on step 1). Hyper-parameters "sync_period" (an
 * integer >= 1) and "slow_step_size" (0..1). At most OT_OPTIM_MAX_STATE - 1 inner slots. */
OT_API ot_status ot_optimizer_new_lookahead(const ot_optimizer *inner, int64_t sync_period,
                                            double slow_step_size, ot_optimizer **out);
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

/* ---------------------------------------------------------------------------------------------
 * Host-callback optimizers: for updates no graph expresses. The update of one parameter is a
 * plain C function on host memory; it BYPASSES THE COMPILE PIPELINE (no module, no executable,
 * no fusion). ot_optimizer_step_reference calls it directly; ot_tpu_optimizer copies each
 * replica's parameters, gradients and state to the host, calls it per parameter and uploads the
 * results (its profile says so: ot_tpu_optimizer_profile's `compiled` is false).
 * The callback runs on private copies: when it returns an error (or any step fails), the
 * caller's parameters and state are left exactly as they were, whatever it wrote.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_optim_host_args {
    const ot_optimizer *opt; /* hyper-parameters: ot_optimizer_hparam(opt, name) */
    void *user;              /* the user pointer given to ot_optimizer_new_host */
    ot_dtype dtype;          /* f32 or f64: the parameter, the gradient and every state slot */
    const ot_shape *shape;   /* the parameter's */
    int64_t count;           /* elements of param and grad */
    void *param;             /* count elements, updated in place */
    const void *grad;        /* count elements (after the wrapper's clipping, if any) */
    int nstate;              /* ot_optimizer_state_count(opt) */
    void *state[OT_OPTIM_MAX_STATE];         /* slot i, updated in place */
    int64_t state_count[OT_OPTIM_MAX_STATE]; /* elements of slot i */
    int64_t step;                            /* t >= 1, the step being taken */
    double lr;                               /* this parameter's learning rate */
} ot_optim_host_args;

/* Returns OT_OK, or an error (ot_error(...)) that fails the step with nothing changed. */
typedef ot_status (*ot_optim_host_fn)(const ot_optim_host_args *a);

/* A host-callback optimizer: vt gives the name, hyper-parameters, validate and the state slots
 * (state_count, state_name, state_init, state_is_scalar, state_shape) exactly as for a graph
 * optimizer; vt->build is not used (may be NULL). fn and user are kept by pointer. Such an
 * optimizer has no update graph: ot_optimizer_build / _build_module return
 * FAILED_PRECONDITION, and Lookahead cannot wrap it (INVALID_ARGUMENT). */
OT_API ot_status ot_optimizer_new_host(const ot_optimizer_vtable *vt, ot_optim_host_fn fn,
                                       void *user, ot_optimizer **out);
/* True when o's update is a host callback (also for a view that delegates to one). */
OT_API bool ot_optimizer_is_host(const ot_optimizer *o);

/* ---------------------------------------------------------------------------------------------
 * Learning-rate schedules, evaluated on the host in f64: ot_lr_schedule_lr(s, t) is the learning
 * rate in force at step index t (0 for the first step). Formulas follow optax (the same
 * expression order), with the torch scheduler each one reproduces named beside it; torch's
 * "chainable" schedulers (ExponentialLR, CosineAnnealingLR, LinearLR, PolynomialLR) update the
 * lr recursively and so differ from these closed forms in the last bits (docs/optim.md gives the
 * measured deviation). Constructors allocate (*out freed with ot_lr_schedule_free; NULL is a
 * no-op); bad arguments are INVALID_ARGUMENT. A finished schedule is read-only: evaluate it from
 * any number of threads.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_lr_schedule ot_lr_schedule;

OT_API void ot_lr_schedule_free(ot_lr_schedule *s);
OT_API double ot_lr_schedule_lr(const ot_lr_schedule *s, int64_t t); /* t < 0 counts as 0 */
OT_API const char *ot_lr_schedule_kind(const ot_lr_schedule *s);     /* "constant", "cosine", ... */

/* value at every step (optax.constant_schedule). */
OT_API ot_status ot_lr_schedule_constant(double value, ot_lr_schedule **out);
/* init times scales[i] for every boundaries[i] <= t, multiplied in order (optax
 * piecewise_constant_schedule; torch MultiStepLR with every scale = gamma). n <= 64. */
OT_API ot_status ot_lr_schedule_piecewise_constant(double init, const int64_t *boundaries,
                                                   const double *scales, int n,
                                                   ot_lr_schedule **out);
/* init * gamma^floor(t / step_size) (torch StepLR). */
OT_API ot_status ot_lr_schedule_step(double init, int64_t step_size, double gamma,
                                     ot_lr_schedule **out);
/* optax.exponential_decay: init until transition_begin, then init * rate^((t - begin) /
 * transition_steps) (floor of the exponent when staircase), bounded by end_value (NaN: none).
 * torch ExponentialLR(gamma) is (init, 1, gamma, 0, false, NaN). */
OT_API ot_status ot_lr_schedule_exponential(double init, int64_t transition_steps,
                                            double decay_rate, int64_t transition_begin,
                                            bool staircase, double end_value, ot_lr_schedule **out);
/* optax.polynomial_schedule: (init - end) * (1 - c / T)^power + end with c = clip(t - begin, 0,
 * T); linear is power 1 (optax.linear_schedule; torch LinearLR(start, end, total) is
 * (base*start, base*end, total, 0); torch PolynomialLR(total, power) is (base, 0, power, total)).
 */
OT_API ot_status ot_lr_schedule_polynomial(double init, double end, double power,
                                           int64_t transition_steps, int64_t transition_begin,
                                           ot_lr_schedule **out);
OT_API ot_status ot_lr_schedule_linear(double init, double end, int64_t transition_steps,
                                       int64_t transition_begin, ot_lr_schedule **out);
/* optax.cosine_decay_schedule(init, decay_steps, alpha = end / init, exponent): init *
 * ((1 - alpha) * (0.5 * (1 + cos(pi * min(t, T) / T)))^exponent + alpha) (torch
 * CosineAnnealingLR(T_max, eta_min) is (base, eta_min, T_max, 1)). */
OT_API ot_status ot_lr_schedule_cosine(double init, double end, int64_t decay_steps,
                                       double exponent, ot_lr_schedule **out);
/* optax.warmup_cosine_decay_schedule: linear from init to peak over warmup_steps, then cosine
 * from peak to end until decay_steps (counted from 0, warmup included). */
OT_API ot_status ot_lr_schedule_warmup_cosine(double init, double peak, int64_t warmup_steps,
                                              int64_t decay_steps, double end, double exponent,
                                              ot_lr_schedule **out);
/* torch CosineAnnealingWarmRestarts: eta_min + (base - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2,
 * periods T_0, T_0 * T_mult, ... */
OT_API ot_status ot_lr_schedule_cosine_restarts(double base, double eta_min, int64_t t0,
                                                int64_t t_mult, ot_lr_schedule **out);
/* One-cycle with cosine annealing from peak/div_factor up to peak, then down to
 * peak/(div_factor*final_div_factor). torch_convention: torch OneCycleLR (peak at step
 * pct_start*total - 1, the end at total - 1); else optax.cosine_onecycle_schedule (peak at
 * int(pct_start*total), end at total). */
OT_API ot_status ot_lr_schedule_onecycle(int64_t total_steps, double peak, double pct_start,
                                         double div_factor, double final_div_factor,
                                         bool torch_convention, ot_lr_schedule **out);
/* optax.join_schedules / torch SequentialLR: children[0] before boundaries[0], children[i] at
 * t - boundaries[i-1] from boundaries[i-1] on. Takes over the n children (also on failure);
 * n - 1 boundaries, increasing. */
OT_API ot_status ot_lr_schedule_join(ot_lr_schedule **children, int n, const int64_t *boundaries,
                                     ot_lr_schedule **out);
/* optax.sgdr_schedule: n warmup-cosine cycles (init, peak, warmup, decay_steps, end each) joined
 * at the cumulative decay_steps. */
OT_API ot_status ot_lr_schedule_sgdr(const double *init, const double *peak, const int64_t *warmup,
                                     const int64_t *decay_steps, const double *end, int n,
                                     ot_lr_schedule **out);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_OPTIM_H */
