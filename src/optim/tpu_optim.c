/* The device optimizer (tpu_optim.h): one compiled update for every parameter, per-device
 * replicas of the state, donation of parameters and state. */
#include "optitpu/tpu_optim.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "exec/numerics.h"
#include "exec/state8.h"
#include "optim_internal.h"
#include "state_quant.h"

typedef struct replica {
    ot_device *dev;
    ot_buffer **state;           /* nstate buffers on dev */
    bool *master_ready;          /* [nparams]: the f32 master was set or taken from the parameter */
    double scale;                /* loss scale for the next step */
    int64_t tracker;             /* clean steps since the scale last changed */
    bool skipped;                /* the last step found inf/NaN gradients and changed nothing */
    ot_buffer **fparam, **fgrad; /* flat mode: [ngroups], owned by the wrapper */
    ot_buffer *shard_p, *shard_g; /* sharded mode: the device's parameter and gradient blocks */
    /* their memory once shard_blocks handed it out (resident: the update keeps it in place) */
    float *shard_pdata, *shard_gdata;
    /* sharded mode: the pod's reductions for the next step (shard_update computes them, the
     * update reads them as inputs): the gradients' sum of squares (clip_grad_norm) and whether
     * any unscaled gradient element is inf/NaN (loss scaling) */
    double shard_ss;
    bool shard_found, shard_ss_set;
    /* sharded trust ratios: every element's tensor's pod-wide sums of squares of the parameter
     * and of the update (f32[block_len] on the device, the update's inputs), and the host
     * scratch they are made in (2 * block_len) */
    ot_buffer *shard_p2, *shard_u2;
    float *shard_sq;
    /* the last shard_update's thread CPU ns copying blocks between host and device, and in the
     * pod's collectives (ot_tpu_optimizer_shard_times) */
    int64_t shard_copy_ns, shard_comm_ns;
} replica;

struct ot_tpu_optimizer {
    ot_optimizer *base;  /* a copy of the optimizer given to create (what a view shows) */
    ot_optimizer **popt; /* [nparams] private copies: parameter k's optimizer (its group's) */
    int *slots;          /* [nparams] parameter k's optimizer state slots */
    double *lr_scale;    /* [nparams] parameter k's lr = the step's lr * lr_scale[k] */
    int nparams, nstate;
    ot_shape *pshape; /* [nparams] */
    ot_shape *wshape; /* [nparams] the update's shape: f32 for bf16/f16 parameters */
    bool *master;     /* [nparams] an f32 master copy is kept (bf16/f16 parameters) */
    int *soff;        /* [nparams] index of parameter k's first state tensor */
    ot_shape *sshape; /* [nstate] */
    char **sname;     /* [nstate] "<k>.<slot>" */
    double *sinit;    /* [nstate] initial value */
    ot_tpu_optimizer_options opts;
    ot_executable *exe; /* shared, read-only after create; NULL for a host callback */
    bool host;          /* every parameter's optimizer is a host callback: no executable */
    int64_t compiles;
    pthread_mutex_t mu; /* guards reps / nreps / cap and prof's step figures */
    ot_tpu_profile prof;
    replica **reps;
    int nreps, cap;
    /* flat mode: one group per dtype and hyper-parameter group; tensor k at element poff[k]
     * of group pgroup[k]; the module's units are the groups (ushape [length]) instead of the
     * tensors; [ngroups] arrays */
    bool flat;
    int ngroups;
    int *pgroup;
    int64_t *poff;
    ot_shape *ushape;
    ot_shape *uwshape; /* [ngroups] the update's shape: f32 for a bf16/f16 group (its master) */
    int *uslots, *usoff;
    bool *umaster;
    double *ulr;
    ot_optimizer **upopt; /* borrowed from popt */
    bool *useg;  /* [ngroups] the group's optimizer reduces over its tensors (lamb, lars): its
                  * update is built tensor by tensor over segments of the flat buffers */
    bool *ucomp; /* [ngroups] the group's array state slots are stored compressed
                  * (opts.state_format) and widened to f32 for the update */
    /* int8 state: per state tensor, the index of its absmax tensor (a slot's codes), or -1;
     * whether its codes use the signed map */
    int *sabs;
    bool *ssigned;
    /* sharded mode (opts.shard_devices > 1): the module updates one f32[shard_len] block; the
     * flat vector's parameter k starts at shard_poff[k] ([shard_nparams]) */
    int shard_n, shard_nparams;
    int64_t shard_len, *shard_poff;
    /* sharded mode with clipping by norm or loss scaling: the module takes the pod's sum of
     * squares (f64, clip_grad_norm) and found_inf (pred, loss_scaling) as inputs after step, lr
     * and inv_scale, instead of reducing its block alone (shard_ss / shard_found) */
    bool shard_ext;
    /* sharded lamb/lars: the update takes every element's tensor's sums of squares of the
     * parameter and of its update as inputs (after shard_ext's); exe_u computes that update
     * (before the trust ratio) from the same inputs, so the pod can sum its squares first */
    bool shard_trust;
    ot_executable *exe_u;
    int64_t *shard_psize; /* [shard_nparams] each parameter's elements */
    /* the sum of squares' pieces (shard_norm_plan): a member sends the first shard_edge elements
     * of its block to the members before it (blocks of the canonical summation order that
     * straddle members), and contributes at most shard_items f64 partial sums */
    int64_t shard_edge, shard_items;
};

/* What the module updates: the tensors, or (flat mode) the flat groups. */
typedef struct plan {
    int n;
    const ot_shape *pshape, *wshape;
    const bool *master;
    ot_optimizer *const *popt;
    const int *slots, *soff;
    const double *lr_scale;
} plan;

static plan make_plan(const ot_tpu_optimizer *t) {
    if (t->flat)
        return (plan){t->ngroups, t->ushape, t->uwshape, t->umaster,
                      t->upopt,   t->uslots, t->usoff,   t->ulr};
    return (plan){t->nparams, t->pshape, t->wshape, t->master,
                  t->popt,    t->slots,  t->soff,   t->lr_scale};
}

ot_tpu_optimizer_options ot_tpu_optimizer_options_default(void) {
    ot_tpu_optimizer_options o = {.donate = true,
                                  .clip_grad_norm = 0.0,
                                  .clip_grad_value = 0.0,
                                  .clip_norm_optax = false,
                                  .compile = NULL,
                                  .loss_scaling = false,
                                  .init_scale = 65536.0,
                                  .growth_factor = 2.0,
                                  .backoff_factor = 0.5,
                                  .growth_interval = 2000,
                                  .param_optimizers = NULL,
                                  .lr_scale = NULL,
                                  .weight_decay_mask = NULL,
                                  .trust_ratio_mask = NULL,
                                  .flat = false,
                                  .state_format = OT_TPU_STATE_F32,
                                  .state_stochastic_rounding = false,
                                  .state_seed = 0,
                                  .state_int8_unfused = false,
                                  .state_int8_min_size = OT_TPU_INT8_MIN_SIZE,
                                  .shard_devices = 0,
                                  .shard_head = 0};
    return o;
}

/* ---- module ---------------------------------------------------------------------------------- */

/* sum of g*g over every element, in f64: an f64 scalar node. */
static ot_instr *sum_sq_f64(ot_computation *c, ot_computation *add, ot_instr *g) {
    if (!g) return NULL; /* a failed build (out of memory): the module's status says so */
    ot_instr *g64 = g->shape.array.dtype == OT_F64 ? g : ot_build_convert(c, g, OT_F64);
    ot_instr *sq = ot_build_binary(c, OT_OP_MULTIPLY, g64, g64);
    int rank = g->shape.array.rank;
    if (rank == 0) return sq;
    int64_t dims[OT_MAX_RANK];
    for (int d = 0; d < rank; d++) dims[d] = d;
    ot_instr *zero = ot_build_constant_scalar(c, OT_F64, 0.0);
    return ot_build_reduce(c, &sq, &zero, 1, dims, rank, add);
}

/* The update module while build_module makes it; the phases below add to it in order. */
typedef struct mbuild {
    const ot_tpu_optimizer *t;
    plan P;
    int n;   /* units: tensors, or flat groups */
    bool ls; /* loss scaling */
    ot_module *m;
    ot_computation *c, *add, *lor; /* the update; add_f64 (clip_grad_norm); or_pred (ls) */
    ot_computation *max32;         /* max_f32 (int8 state: block absmax) */
    ot_instr **outs, **grads, **prm, **st;
    int64_t *segoff; /* [nparams] flat lamb/lars: a group's tensors' segments */
    ot_shape *segshape;
    ot_instr *step, *lr, *inv_scale;
    ot_instr *found;              /* ls: any non-finite gradient element */
    ot_instr *ext_ss, *ext_found; /* t->shard_ext: the pod's sum of squares and found_inf */
    ot_instr *ext_p2, *ext_u2;    /* t->shard_trust: the tensors' sums of squares, per element */
    bool u_only;                  /* the module of exe_u: its output is the trust ratio's update */
    ot_instr *u;                  /* u_only: that update */
} mbuild;

/* The reductions' bodies: or_pred (found_inf) and add_f64 (the global norm). */
static void add_reducers(mbuild *b) {
    ot_module *m = b->m;
    if (b->ls) {
        ot_shape pb = ot_shape_scalar(OT_PRED);
        b->lor = ot_module_add_computation(m, "or_pred");
        ot_instr *x = ot_build_parameter(b->lor, 0, pb, "a");
        ot_instr *y = ot_build_parameter(b->lor, 1, pb, "b");
        ot_computation_set_root(b->lor, ot_build_binary(b->lor, OT_OP_OR, x, y));
    }
    if (b->t->opts.state_format == OT_TPU_STATE_INT8) {
        ot_shape sc = ot_shape_scalar(OT_F32);
        b->max32 = ot_module_add_computation(m, "max_f32");
        ot_instr *x = ot_build_parameter(b->max32, 0, sc, "a");
        ot_instr *y = ot_build_parameter(b->max32, 1, sc, "b");
        ot_computation_set_root(b->max32, ot_build_binary(b->max32, OT_OP_MAXIMUM, x, y));
    }
    if (b->t->opts.clip_grad_norm > 0) {
        ot_shape sc = ot_shape_scalar(OT_F64);
        b->add = ot_module_add_computation(m, "add_f64");
        ot_instr *x = ot_build_parameter(b->add, 0, sc, "a");
        ot_instr *y = ot_build_parameter(b->add, 1, sc, "b");
        ot_computation_set_root(b->add, ot_build_binary(b->add, OT_OP_ADD, x, y));
    }
}

/* The update's parameters: params, grads, state, step, lr and (ls) inv_scale. */
static ot_status add_parameters(mbuild *b) {
    const ot_tpu_optimizer *t = b->t;
    ot_computation *c = b->c;
    int n = b->n;
    char nm[64];
    for (int k = 0; k < n; k++) {
        snprintf(nm, sizeof nm, t->flat ? "flat_param.%d" : "param.%d", k);
        b->prm[k] = ot_build_parameter(c, k, b->P.pshape[k], nm);
    }
    for (int k = 0; k < n; k++) {
        snprintf(nm, sizeof nm, t->flat ? "flat_grad.%d" : "grad.%d", k);
        b->grads[k] = ot_build_parameter(c, n + k, b->P.pshape[k], nm);
    }
    for (int i = 0; i < t->nstate; i++)
        b->st[i] = ot_build_parameter(c, 2 * n + i, t->sshape[i], NULL);
    ot_shape sc = ot_shape_scalar(OT_F64);
    b->step = ot_build_parameter(c, 2 * n + t->nstate, sc, "step");
    b->lr = ot_build_parameter(c, 2 * n + t->nstate + 1, sc, "lr");
    b->inv_scale =
        b->ls ? ot_build_parameter(c, 2 * n + t->nstate + 2, ot_shape_scalar(OT_F32), "inv_scale")
              : NULL;
    int64_t next = 2 * n + t->nstate + 2 + b->ls;
    if (t->shard_ext && t->opts.clip_grad_norm > 0)
        b->ext_ss = ot_build_parameter(c, next++, sc, "pod_sum_sq");
    if (t->shard_ext && b->ls)
        b->ext_found = ot_build_parameter(c, next++, ot_shape_scalar(OT_PRED), "pod_found_inf");
    if (t->shard_trust && !b->u_only) {
        b->ext_p2 = ot_build_parameter(c, next++, b->P.pshape[0], "pod_param_sq");
        b->ext_u2 = ot_build_parameter(c, next, b->P.pshape[0], "pod_update_sq");
    }
    return ot_module_status(b->m);
}

/* bf16/f16 gradients are widened to f32; with loss scaling they are unscaled (g * 1/scale, in
 * f32 as torch's GradScaler) and found_inf is any non-finite element among them. */
static void widen_unscale(mbuild *b) {
    ot_computation *c = b->c;
    for (int k = 0; k < b->n; k++) {
        ot_dtype wd = b->P.wshape[k].dtype;
        if (b->P.master[k]) b->grads[k] = ot_build_convert(c, b->grads[k], OT_F32);
        if (!b->ls) continue;
        ot_instr *is = wd == OT_F32 ? b->inv_scale : ot_build_convert(c, b->inv_scale, wd);
        b->grads[k] = ot_build_binary(c, OT_OP_MULTIPLY, b->grads[k],
                                      ot_build_broadcast(c, is, b->P.wshape[k], NULL, 0));
        if (b->ext_found) { /* sharded: the pod's found_inf, not the block's */
            b->found = b->ext_found;
            continue;
        }
        ot_instr *bad =
            ot_build_unary(c, OT_OP_NOT, ot_build_unary(c, OT_OP_IS_FINITE, b->grads[k]));
        int rank = b->P.wshape[k].rank;
        if (rank > 0) {
            int64_t dims[OT_MAX_RANK];
            for (int d = 0; d < rank; d++) dims[d] = d;
            ot_instr *no = ot_build_constant_scalar(c, OT_PRED, 0);
            bad = ot_build_reduce(c, &bad, &no, 1, dims, rank, b->lor);
        }
        b->found = b->found ? ot_build_binary(c, OT_OP_OR, b->found, bad) : bad;
    }
}

/* clip_grad_value: every gradient clamped to [-v, v]. */
static void clip_value(mbuild *b) {
    ot_computation *c = b->c;
    double v = b->t->opts.clip_grad_value;
    for (int k = 0; k < b->n && v > 0; k++) {
        ot_dtype dt = b->P.wshape[k].dtype;
        ot_shape ws = b->P.wshape[k];
        ot_instr *lo = ot_build_broadcast(c, ot_build_constant_scalar(c, dt, -v), ws, NULL, 0);
        ot_instr *hi = ot_build_broadcast(c, ot_build_constant_scalar(c, dt, v), ws, NULL, 0);
        b->grads[k] = ot_build_clamp(c, lo, b->grads[k], hi);
    }
}

/* The 2-norm of every gradient element together (an f64 scalar). */
static ot_instr *global_norm(mbuild *b) {
    const ot_tpu_optimizer *t = b->t;
    ot_computation *c = b->c;
    /* sharded: the pod's sum of squares, summed on the host in this order (shard_sum_sq) */
    if (b->ext_ss) return ot_build_unary(c, OT_OP_SQRT, b->ext_ss);
    ot_instr *ss = NULL;
    for (int k = 0; k < b->n && !t->flat; k++) {
        ot_instr *x = sum_sq_f64(c, b->add, b->grads[k]);
        ss = ss ? ot_build_binary(c, OT_OP_ADD, ss, x) : x;
    }
    /* flat mode: tensor by tensor as above (a segmented reduction: each tensor's segment sliced
     * out of its group and reshaped to its shape), so the sum is bit-identical */
    for (int k = 0; k < t->nparams && t->flat; k++) {
        int64_t st0 = t->poff[k], lim = st0 + ot_shape_numel_unchecked(&t->pshape[k]);
        int64_t one = 1;
        ot_instr *seg = ot_build_slice(c, b->grads[t->pgroup[k]], &st0, &lim, &one);
        ot_shape ts = t->pshape[k]; /* f32 for a bf16/f16 tensor: its widened gradient */
        ts.dtype = b->P.wshape[t->pgroup[k]].dtype;
        ot_instr *x = sum_sq_f64(c, b->add, ot_build_reshape(c, seg, ts));
        ss = ss ? ot_build_binary(c, OT_OP_ADD, ss, x) : x;
    }
    return ot_build_unary(c, OT_OP_SQRT, ss);
}

/* optax.clip_by_global_norm: g unchanged when total < max_norm, else (g / total) * max_norm
 * with total and max_norm rounded to the gradient dtype. */
static void clip_norm_optax(mbuild *b, ot_instr *total) {
    ot_computation *c = b->c;
    double max_norm = b->t->opts.clip_grad_norm;
    ot_instr *keep = ot_build_compare(c, total, ot_build_constant_scalar(c, OT_F64, max_norm),
                                      OT_CMP_LT, OT_CMP_TYPE_DEFAULT);
    for (int k = 0; k < b->n; k++) {
        ot_dtype dt = b->P.wshape[k].dtype;
        ot_shape ws = b->P.wshape[k], ps = ws;
        ps.dtype = OT_PRED;
        ot_instr *tk = dt == OT_F64 ? total : ot_build_convert(c, total, dt);
        ot_instr *scaled = ot_build_binary(
            c, OT_OP_MULTIPLY,
            ot_build_binary(c, OT_OP_DIVIDE, b->grads[k], ot_build_broadcast(c, tk, ws, NULL, 0)),
            ot_build_broadcast(c, ot_build_constant_scalar(c, dt, max_norm), ws, NULL, 0));
        b->grads[k] =
            ot_build_select(c, ot_build_broadcast(c, keep, ps, NULL, 0), b->grads[k], scaled);
    }
}

/* clip_grad_norm: torch clip_grad_norm_ (coef = min(1, max_norm / (total + 1e-6))), or optax's
 * (clip_norm_optax). */
static ot_status clip_norm(mbuild *b) {
    const ot_tpu_optimizer *t = b->t;
    ot_computation *c = b->c;
    if (t->opts.clip_grad_norm <= 0) return OT_OK;
    ot_instr *total = global_norm(b);
    if (t->opts.clip_norm_optax) {
        clip_norm_optax(b, total);
        return ot_module_status(b->m);
    }
    ot_instr *coef = ot_build_binary(
        c, OT_OP_DIVIDE, ot_build_constant_scalar(c, OT_F64, t->opts.clip_grad_norm),
        ot_build_binary(c, OT_OP_ADD, total, ot_build_constant_scalar(c, OT_F64, 1e-6)));
    if (coef) /* NULL: a failed build (out of memory); the module's status says so */
        coef = ot_build_binary(c, OT_OP_MINIMUM, coef, ot_build_constant_scalar(c, OT_F64, 1.0));
    for (int k = 0; k < b->n && coef; k++) {
        ot_dtype dt = b->P.wshape[k].dtype;
        ot_instr *ck = dt == OT_F64 ? coef : ot_build_convert(c, coef, dt);
        b->grads[k] = ot_build_binary(c, OT_OP_MULTIPLY, b->grads[k],
                                      ot_build_broadcast(c, ck, b->P.wshape[k], NULL, 0));
    }
    return ot_module_status(b->m);
}

/* A u32 constant broadcast to shape s. */
static ot_instr *u32_const(ot_computation *c, uint32_t v, ot_shape s) {
    return ot_build_broadcast(c, ot_build_constant_scalar(c, OT_U32, (double)v), s, NULL, 0);
}

/* Stochastic rounding's random bits: a counter-based hash of (seed, group, slot) folded into a
 * key, the step and the element index (murmur3's 32-bit finalizer over idx * golden + key ^
 * step * c2): deterministic for a seed, independent of threads and replicas. The same function
 * is ot_tpu_sr_bits (tests) and scripts/optim_state_ref.py. */
static ot_instr *sr_bits(mbuild *b, ot_shape s, uint32_t key) {
    ot_computation *c = b->c;
    ot_shape us = s;
    us.dtype = OT_U32;
    /* the row-major linear index: an iota over the element count, reshaped */
    int64_t ne = ot_shape_numel_unchecked(&s);
    ot_shape ls;
    if (ot_shape_make(&ls, OT_U32, 1, &ne) != OT_OK) return NULL;
    ot_instr *idx = ot_build_reshape(c, ot_build_iota(c, ls, 0), us);
    ot_instr *st = ot_build_broadcast(c, ot_build_convert(c, b->step, OT_U32), us, NULL, 0);
    ot_instr *h = ot_build_binary(c, OT_OP_MULTIPLY, idx, u32_const(c, 0x9E3779B1u, us));
    h = ot_build_binary(c, OT_OP_ADD, h, u32_const(c, key, us));
    h = ot_build_binary(c, OT_OP_XOR, h,
                        ot_build_binary(c, OT_OP_MULTIPLY, st, u32_const(c, 0x85EBCA77u, us)));
    static const uint32_t mul[2] = {0x7FEB352Du, 0x846CA68Bu};
    static const uint32_t sh[3] = {16, 15, 16};
    for (int r = 0; r < 3; r++) {
        h = ot_build_binary(
            c, OT_OP_XOR, h,
            ot_build_binary(c, OT_OP_SHIFT_RIGHT_LOGICAL, h, u32_const(c, sh[r], us)));
        if (r < 2) h = ot_build_binary(c, OT_OP_MULTIPLY, h, u32_const(c, mul[r], us));
    }
    return h;
}

uint32_t ot_tpu_sr_bits(uint32_t key, int64_t step, int64_t idx) {
    uint32_t h = (uint32_t)idx * 0x9E3779B1u + key;
    h ^= (uint32_t)step * 0x85EBCA77u;
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    return h;
}

uint32_t ot_tpu_sr_key(uint64_t seed, int g, int j) {
    uint64_t z = seed ^ ((uint64_t)(uint32_t)g << 32) ^ (uint64_t)(uint32_t)(j * 0x9E37u + 1u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL; /* splitmix64's finalizer */
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return (uint32_t)(z ^ (z >> 31));
}

/* Slot j of flat group k, computed in f32 (x), stored in the group's compressed format. */
static ot_instr *compress_state(mbuild *b, ot_instr *x, int k, int j) {
    ot_computation *c = b->c;
    const ot_tpu_optimizer *t = b->t;
    ot_instr *rne = ot_build_convert(c, x, OT_BF16);
    if (!t->opts.state_stochastic_rounding || !x) return rne;
    ot_shape s = x->shape.array, us = s, ps = s;
    us.dtype = OT_U32;
    ps.dtype = OT_PRED;
    /* bits + 16 random bits, the top half kept: rounds the magnitude up with probability
     * low16 / 65536. The top half of a finite value's sum is the bf16 value exactly (what
     * converting it with the low half cleared gives, an overflow included: the infinity), so it
     * is taken as the bits (a shift, a narrowing and a bitcast: no rounding code per element) */
    ot_instr *r16 = ot_build_binary(c, OT_OP_SHIFT_RIGHT_LOGICAL,
                                    sr_bits(b, s, ot_tpu_sr_key(t->opts.state_seed, k, j)),
                                    u32_const(c, 16, us));
    ot_instr *bits = ot_build_binary(c, OT_OP_ADD, ot_build_bitcast_convert(c, x, OT_U32), r16);
    bits = ot_build_binary(c, OT_OP_SHIFT_RIGHT_LOGICAL, bits, u32_const(c, 16, us));
    ot_instr *sr = ot_build_bitcast_convert(c, ot_build_convert(c, bits, OT_U16), OT_BF16);
    ot_instr *fin = ot_build_unary(c, OT_OP_IS_FINITE, x);
    (void)ps;
    return ot_build_select(c, fin, sr, rne);
}

/* int8 state: unit k's update as the fused block kernel (exec/state8.h) when its optimizer has
 * one and the unit is an f32 parameter whose array slots are all int8; *done false otherwise
 * (the graph path: dequantize, the optimizer's graph, quantize, the same bits). */
static ot_status build_update_state8(mbuild *b, int k, ot_optim_inputs *in, bool *done) {
    const ot_tpu_optimizer *t = b->t;
    const plan *P = &b->P;
    ot_computation *c = b->c;
    int n = b->n, o0 = P->soff[k], S = P->slots[k];
    *done = false;
    if (!t->sabs || (t->opts.state_int8_unfused && t->flat) || P->master[k] || S < 1 || S > 2)
        return OT_OK;
    char maps[4] = {0};
    for (int j = 0; j < S; j++) {
        if (t->sabs[o0 + j] < 0) return OT_OK;
        maps[j] = t->ssigned[o0 + j] ? 's' : 'u';
    }
    /* the slots' maps must be the kernel's (adam: exp_avg signed, exp_avg_sq unsigned) */
    const char *nm = ot_optimizer_name(P->popt[k]);
    if (strcmp(maps, !strcmp(nm, "adam") || !strcmp(nm, "adamw") ? "su" : "s") != 0) return OT_OK;
    char rule[64], cfg[80];
    ot_instr *ops[2 + 2 * 2 + 8];
    int nsc = 0;
    if (!ot_optim_state8_rule(P->popt[k], in, rule, sizeof rule, ops + 2 + 2 * S, &nsc))
        return OT_OK;
    snprintf(cfg, sizeof cfg, "%s,maps=%s", rule, maps);
    /* per tensor: the parameter and gradient flattened and padded with zeros to the codes'
     * whole blocks (a zero parameter, gradient and state stay zero: adam, lion, sgd) */
    int64_t nel = ot_shape_numel_unchecked(&in->param->shape.array);
    int64_t len = t->sshape[o0].dims[0];
    ot_shape fs;
    OT_CHECK(ot_shape_make(&fs, OT_F32, 1, &nel));
    ot_instr *flatp[2] = {in->param, in->grad};
    for (int q = 0; q < 2 && !t->flat; q++) {
        flatp[q] = ot_build_reshape(c, flatp[q], fs);
        if (len != nel) {
            ot_pad_dim pd = {.lo = 0, .hi = len - nel, .interior = 0};
            flatp[q] = ot_build_pad(c, flatp[q], ot_build_constant_scalar(c, OT_F32, 0.0), &pd);
        }
    }
    ops[0] = flatp[0];
    ops[1] = flatp[1];
    ot_ir_shape el[1 + 2 * 2];
    el[0] = ops[0]->shape;
    for (int j = 0; j < S; j++) {
        ops[2 + 2 * j] = b->st[o0 + j];
        ops[3 + 2 * j] = b->st[t->sabs[o0 + j]];
        el[1 + 2 * j] = ops[2 + 2 * j]->shape;
        el[2 + 2 * j] = ops[3 + 2 * j]->shape;
    }
    ot_ir_shape tup;
    memset(&tup, 0, sizeof tup);
    tup.kind = OT_IR_TUPLE;
    tup.ntuple = 1 + 2 * S;
    tup.tuple = el;
    ot_instr *cc =
        ot_build_custom_call(c, EX_STATE8_TARGET, ops, 2 + 2 * S + nsc, &tup, cfg, false);
    b->outs[k] = ot_build_get_tuple_element(c, cc, 0);
    if (!t->flat) { /* back to the tensor's elements and shape */
        if (len != nel) {
            int64_t st = 0, lim = nel, stride = 1;
            b->outs[k] = ot_build_slice(c, b->outs[k], &st, &lim, &stride);
        }
        b->outs[k] = ot_build_reshape(c, b->outs[k], in->param->shape.array);
    }
    for (int j = 0; j < S; j++) {
        b->outs[n + o0 + j] = ot_build_get_tuple_element(c, cc, 1 + 2 * j);
        b->outs[n + t->sabs[o0 + j]] = ot_build_get_tuple_element(c, cc, 2 + 2 * j);
    }
    *done = true;
    return ot_module_status(b->m);
}

/* Unit k's update by its optimizer: outs[k] (the parameter) and its state outputs. */
static ot_status build_update(mbuild *b, int k) {
    const ot_tpu_optimizer *t = b->t;
    const plan *P = &b->P;
    ot_computation *c = b->c;
    int n = b->n, o0 = P->soff[k], S = P->slots[k];
    ot_instr *w = P->master[k] ? b->st[o0 + S] : b->prm[k]; /* the f32 master, or the parameter */
    ot_instr *lrk = P->lr_scale[k] == 1.0
                        ? b->lr
                        : ot_build_binary(c, OT_OP_MULTIPLY, b->lr,
                                          ot_build_constant_scalar(c, OT_F64, P->lr_scale[k]));
    ot_optim_inputs in = {.c = c, .param = w, .grad = b->grads[k], .step = b->step, .lr = lrk};
    for (int j = 0; j < S; j++) in.state[j] = b->st[o0 + j];
    bool comp = t->ucomp && t->ucomp[k];
    if (comp) {
        bool fused;
        OT_CHECK(build_update_state8(b, k, &in, &fused));
        if (fused) return OT_OK;
        if (t->sabs && !t->flat) /* create admits only what the kernel takes */
            return ot_error(OT_ERR_INTERNAL, "parameter %d: no fused int8 update", k);
    }
    for (int j = 0; j < S && comp; j++) { /* compressed slots: the update reads them in f32 */
        int q = o0 + j;
        if (t->sabs && t->sabs[q] >= 0)
            in.state[j] = ot_quant8_dequantize(c, in.state[j], b->st[t->sabs[q]], t->ssigned[q]);
        else if (t->sshape[q].dtype != P->wshape[k].dtype)
            in.state[j] = ot_build_convert(c, in.state[j], P->wshape[k].dtype);
    }
    /* flat group of lamb/lars: per-tensor norms over its tensors' segments */
    ot_optim_segments sg = {0, b->segoff, b->segshape};
    for (int q = 0; t->flat && t->useg[k] && q < t->nparams; q++) {
        if (t->pgroup[q] != k) continue;
        b->segoff[sg.n] = t->poff[q];
        b->segshape[sg.n] = t->pshape[q];
        b->segshape[sg.n++].dtype = P->wshape[k].dtype;
    }
    if (t->flat && t->useg[k]) in.seg = &sg;
    in.trust_p2 = b->ext_p2; /* sharded lamb/lars: the pod's norms */
    in.trust_u2 = b->ext_u2;
    if (b->u_only) in.trust_u = &b->u;
    ot_optim_outputs r;
    ot_status s = ot_optimizer_build(P->popt[k], &in, &r);
    if (s != OT_OK) return ot_error_wrap(s, t->flat ? "flat group %d" : "parameter %d", k);
    b->outs[k] = P->master[k] ? ot_build_convert(c, r.param, P->pshape[k].dtype) : r.param;
    for (int j = 0; j < S; j++) b->outs[n + o0 + j] = r.state[j];
    for (int j = 0; j < S && comp; j++) {
        int q = o0 + j;
        if (t->sabs && t->sabs[q] >= 0) {
            OT_CHECK(ot_quant8_quantize(c, b->max32, r.state[j], t->ssigned[q], &b->outs[n + q],
                                        &b->outs[n + t->sabs[q]]));
        } else if (t->sshape[q].dtype != P->wshape[k].dtype) {
            b->outs[n + q] = compress_state(b, r.state[j], k, j);
        }
    }
    if (P->master[k]) b->outs[n + o0 + S] = r.param;
    return ot_module_status(b->m);
}

/* The root tuple (with loss scaling a step with inf/NaN gradients changes nothing, and
 * found_inf is the last output), the entry, the donation aliases; finalized. */
static ot_status finish_module(mbuild *b) {
    const ot_tpu_optimizer *t = b->t;
    ot_computation *c = b->c;
    int n = b->n;
    if (b->u_only) { /* exe_u: the update before the trust ratio, nothing donated */
        if (!b->u)
            return ot_error(OT_ERR_INTERNAL, "optimizer module: the update has no trust ratio");
        ot_computation_set_root(c, ot_build_tuple(c, &b->u, 1));
        ot_module_set_entry(b->m, c);
        return ot_module_finalize(b->m);
    }
    if (b->ls) {
        for (int q = 0; q < n + t->nstate; q++) {
            ot_instr *old = q < n ? b->prm[q] : b->st[q - n];
            ot_shape ps = old->shape.array;
            ps.dtype = OT_PRED;
            b->outs[q] =
                ot_build_select(c, ot_build_broadcast(c, b->found, ps, NULL, 0), old, b->outs[q]);
        }
        b->outs[n + t->nstate] = b->found;
    }
    ot_computation_set_root(c, ot_build_tuple(c, b->outs, n + t->nstate + (b->ls ? 1 : 0)));
    ot_module_set_entry(b->m, c);
    for (int q = 0; q < n + t->nstate && t->opts.donate; q++) {
        ot_io_alias a;
        memset(&a, 0, sizeof a);
        a.noutput_index = 1;
        a.output_index[0] = q;
        a.param_number = q < n ? q : n + q; /* state q - n is parameter 2n + (q - n) */
        a.must_alias = true;
        OT_CHECK(ot_module_add_alias(b->m, &a));
    }
    return ot_module_finalize(b->m);
}

static ot_status build_module(const ot_tpu_optimizer *t, bool u_only, ot_module **out) {
    *out = NULL;
    mbuild b = {.t = t, .P = make_plan(t), .ls = t->opts.loss_scaling, .u_only = u_only};
    b.n = b.P.n;
    b.m = ot_module_new("tpu_optimizer");
    if (!b.m) return ot_error(OT_ERR_OUT_OF_MEMORY, "optimizer module");
    add_reducers(&b);
    b.c = ot_module_add_computation(b.m, "update");
    b.outs = ot_calloc((size_t)(b.n + t->nstate) + 2, sizeof *b.outs);
    b.grads = ot_calloc((size_t)b.n + 1, sizeof *b.grads);
    b.prm = ot_calloc((size_t)b.n + 1, sizeof *b.prm);
    b.st = ot_calloc((size_t)t->nstate + 1, sizeof *b.st);
    b.segoff = ot_calloc((size_t)t->nparams, sizeof *b.segoff);
    b.segshape = ot_calloc((size_t)t->nparams, sizeof *b.segshape);
    ot_status s = OT_OK;
    if (!b.outs || !b.grads || !b.prm || !b.st || !b.segoff || !b.segshape)
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "optimizer module");
    if (s == OT_OK) s = add_parameters(&b);
    if (s == OT_OK) {
        widen_unscale(&b);
        clip_value(&b);
        s = clip_norm(&b);
    }
    for (int k = 0; k < b.n && s == OT_OK; k++) s = build_update(&b, k);
    if (s == OT_OK) s = finish_module(&b);
    ot_free(b.outs);
    ot_free(b.grads);
    ot_free(b.prm);
    ot_free(b.st);
    ot_free(b.segoff);
    ot_free(b.segshape);
    if (s != OT_OK) {
        ot_module_free(b.m);
        return s;
    }
    *out = b.m;
    return OT_OK;
}

/* ---- create / free --------------------------------------------------------------------------- */

static void replica_free(ot_tpu_optimizer *t, replica *r) {
    if (!r) return;
    for (int i = 0; r->state && i < t->nstate; i++) ot_buffer_free(r->state[i]);
    for (int g = 0; g < t->ngroups; g++) {
        if (r->fparam) ot_buffer_free(r->fparam[g]);
        if (r->fgrad) ot_buffer_free(r->fgrad[g]);
    }
    ot_free(r->fparam);
    ot_free(r->fgrad);
    ot_buffer_free(r->shard_p);
    ot_buffer_free(r->shard_g);
    ot_buffer_free(r->shard_p2);
    ot_buffer_free(r->shard_u2);
    ot_free(r->shard_sq);
    ot_free(r->state);
    ot_free(r->master_ready);
    ot_free(r);
}

void ot_tpu_optimizer_free(ot_tpu_optimizer *t) {
    if (!t) return;
    for (int r = 0; r < t->nreps; r++) replica_free(t, t->reps[r]);
    ot_free(t->reps);
    ot_free(t->shard_poff);
    ot_free(t->shard_psize);
    for (int i = 0; t->sname && i < t->nstate; i++) ot_free(t->sname[i]);
    ot_free(t->sname);
    ot_free(t->sinit);
    ot_free(t->sshape);
    ot_free(t->pshape);
    ot_free(t->wshape);
    ot_free(t->master);
    ot_free(t->soff);
    ot_free(t->pgroup);
    ot_free(t->poff);
    ot_free(t->ushape);
    ot_free(t->uwshape);
    ot_free(t->uslots);
    ot_free(t->usoff);
    ot_free(t->umaster);
    ot_free(t->ulr);
    ot_free(t->upopt);
    ot_free(t->useg);
    ot_free(t->ucomp);
    ot_free(t->sabs);
    ot_free(t->ssigned);
    ot_executable_free(t->exe);
    ot_executable_free(t->exe_u);
    for (int k = 0; t->popt && k < t->nparams; k++) ot_optimizer_free(t->popt[k]);
    ot_optimizer_free(t->base);
    ot_free(t->popt);
    ot_free(t->slots);
    ot_free(t->lr_scale);
    pthread_mutex_destroy(&t->mu);
    ot_free(t);
}

/* Whether o's update of a dtype-dt parameter is elementwise: built over a 1-D probe, every
 * instruction that reads a non-scalar is elementwise of the probe's shape, and every other
 * non-scalar is a parameter or a broadcast scalar (so updating tensors back to back in one
 * flat buffer computes exactly what updating each does). A scalar state slot (NAdam's
 * mu_product) is then computed from scalars only (step, lr, constants, itself): every
 * tensor's copy is the same, and the group keeps one. */
static ot_status flat_check_elementwise(const ot_optimizer *o, ot_dtype dt, bool segmented,
                                        bool trust) {
    ot_shape ps, sc = ot_shape_scalar(OT_F64);
    OT_CHECK(ot_shape_make(&ps, dt, 1, (int64_t[]){37}));
    ot_module *m = ot_module_new("flat_probe");
    if (!m) return ot_error(OT_ERR_OUT_OF_MEMORY, "flat probe");
    ot_computation *c = ot_module_add_computation(m, "probe");
    int S = ot_optimizer_state_count(o);
    ot_optim_inputs in = {.c = c};
    /* segmented: two tensors ([4, 5] at 0, [13] at 24) in the probe; whatever reads the flat
     * probe is then elementwise or a slice (a segment), and only a broadcast scalar or a
     * concatenation of segments becomes flat again */
    ot_shape segs[2];
    int64_t segoff[2] = {0, 24};
    ot_optim_segments sg = {2, segoff, segs};
    OT_CHECK(ot_shape_make(&segs[0], dt, 2, (int64_t[]){4, 5}));
    OT_CHECK(ot_shape_make(&segs[1], dt, 1, (int64_t[]){13}));
    if (segmented) in.seg = &sg;
    in.param = ot_build_parameter(c, 0, ps, "p");
    in.grad = ot_build_parameter(c, 1, ps, "g");
    ot_status s = OT_OK;
    const char *why = NULL;
    for (int j = 0; j < S && s == OT_OK && !why; j++) {
        ot_shape ss;
        s = ot_optimizer_state_shape(o, j, &ps, &ss);
        if (s == OT_OK && !ot_shape_equal(&ss, &ps) && ss.rank != 0)
            why = "keeps state of another shape";
        in.state[j] = ot_build_parameter(c, 2 + j, ss, NULL);
    }
    in.step = ot_build_parameter(c, 2 + S, sc, "step");
    in.lr = ot_build_parameter(c, 3 + S, sc, "lr");
    if (trust) { /* the norms given per element (sharded lamb/lars) */
        in.trust_p2 = ot_build_parameter(c, 4 + S, ps, "p2");
        in.trust_u2 = ot_build_parameter(c, 5 + S, ps, "u2");
    }
    ot_optim_outputs r;
    if (s == OT_OK && !why) s = ot_module_status(m);
    if (s == OT_OK && !why) s = ot_optimizer_build(o, &in, &r);
    ot_instr **po = NULL;
    int64_t npo = 0;
    if (s == OT_OK && !why) {
        ot_instr *outs[OT_OPTIM_MAX_STATE + 1];
        outs[0] = r.param;
        for (int j = 0; j < S; j++) outs[1 + j] = r.state[j];
        ot_computation_set_root(c, ot_build_tuple(c, outs, 1 + S));
        s = ot_module_status(m);
        if (s == OT_OK) s = ot_computation_post_order(c, &po, &npo);
    }
    for (int64_t i = 0; s == OT_OK && !why && i < npo; i++) {
        const ot_instr *x = po[i];
        if (x == c->root || x->opcode == OT_OP_PARAMETER) continue;
        if (segmented) {
            bool flat_in = false, any_in = false;
            for (int q = 0; q < x->noperands; q++) {
                const ot_ir_shape *qs = &x->operands[q]->shape;
                if (!ot_ir_shape_is_array(qs) || qs->array.rank > 0) any_in = true;
                if (ot_ir_shape_is_array(qs) && ot_shape_equal(&qs->array, &ps)) flat_in = true;
            }
            bool flat_out = ot_ir_shape_is_array(&x->shape) && ot_shape_equal(&x->shape.array, &ps);
            if (flat_in &&
                !(x->opcode == OT_OP_SLICE || (ot_opcode_is_elementwise(x->opcode) && flat_out)))
                why = ot_opcode_name(x->opcode);
            else if (!flat_in && flat_out && x->opcode != OT_OP_CONCATENATE &&
                     !(x->opcode == OT_OP_BROADCAST && !any_in))
                why = ot_opcode_name(x->opcode);
            continue;
        }
        bool vec_in = false;
        for (int q = 0; q < x->noperands; q++)
            if (!ot_ir_shape_is_array(&x->operands[q]->shape) ||
                x->operands[q]->shape.array.rank > 0)
                vec_in = true;
        bool vec_out =
            !ot_ir_shape_is_array(&x->shape) || x->shape.array.rank > 0 || x->ncalled > 0;
        if (vec_in && !(ot_opcode_is_elementwise(x->opcode) && x->shape.array.rank == 1 &&
                        x->shape.array.dims[0] == 37))
            why = ot_opcode_name(x->opcode);
        else if (!vec_in && vec_out && x->opcode != OT_OP_BROADCAST)
            why = ot_opcode_name(x->opcode);
    }
    ot_free(po);
    ot_module_free(m);
    if (s != OT_OK) return ot_error_wrap(s, "flat probe of optimizer '%s'", ot_optimizer_name(o));
    if (why)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "ot_tpu_optimizer_create: flat mode: optimizer '%s' is not elementwise "
                        "(its update %s%s) and cannot be updated segment by segment (only an "
                        "optimizer whose state has its tensors' shapes and whose reductions read "
                        "segments, as lamb and lars); use the per-tensor mode",
                        ot_optimizer_name(o), strchr(why, ' ') ? "" : "uses ", why);
    return OT_OK;
}

/* Whether group g (length len) can be updated tensor by tensor over segments of its flat
 * buffers: every state slot of every tensor of the group has that tensor's shape, and every slot
 * of the group's flat shape is the flat shape (lamb, lars; not adafactor's factored moments). */
static bool flat_segmentable(const ot_tpu_optimizer *t, const ot_shape *ps, int g, ot_dtype dt,
                             int64_t len) {
    ot_shape fs, ss;
    if (ot_shape_make(&fs, dt, 1, &len) != OT_OK) return false;
    int S = ot_optimizer_state_count(t->upopt[g]);
    for (int j = 0; j < S; j++)
        if (ot_optimizer_state_shape(t->upopt[g], j, &fs, &ss) != OT_OK ||
            !ot_shape_equal(&ss, &fs))
            return false;
    for (int k = 0; k < t->nparams; k++) {
        if (t->pgroup[k] != g) continue;
        for (int j = 0; j < ot_optimizer_state_count(t->popt[k]); j++)
            if (ot_optimizer_state_shape(t->popt[k], j, &ps[k], &ss) != OT_OK ||
                !ot_shape_equal(&ss, &ps[k]))
                return false;
    }
    return true;
}

/* int8 state: slots that never go negative take the unsigned map (as bitsandbytes' state2) */
static bool slot_unsigned(const char *name) {
    static const char *const u[] = {"exp_avg_sq", "max_exp_avg_sq", "square_avg",
                                    "sum",        "acc_delta",      "nu"};
    for (size_t k = 0; name && k < sizeof u / sizeof *u; k++)
        if (strcmp(name, u[k]) == 0) return true;
    return false;
}

/* Whether slot j of optimizer o (shape ss, for an update of shape ws) is stored compressed:
 * the array slots shaped like the update, not a per-parameter scalar (NAdam's mu_product). */
static bool slot_compressed(const ot_optimizer *o, int j, const ot_shape *ss, const ot_shape *ws) {
    const ot_optimizer_vtable *vt = ot_optimizer_vtable_of(o);
    if (vt->state_is_scalar && vt->state_is_scalar(o, j)) return false;
    return ot_shape_equal(ss, ws);
}

/* The flat layout: a group per dtype and hyper-parameter group (the same param_optimizers
 * entry, masks and lr_scale), in order of first appearance, each tensor at an offset aligned
 * to OT_TPU_FLAT_ALIGN elements; the groups' update and state. */
static ot_status flat_layout(ot_tpu_optimizer *t, const ot_shape *ps,
                             const ot_tpu_optimizer_options *op) {
    int n = t->nparams;
    t->pgroup = ot_calloc((size_t)n, sizeof *t->pgroup);
    t->poff = ot_calloc((size_t)n, sizeof *t->poff);
    t->ushape = ot_calloc((size_t)n, sizeof *t->ushape);
    t->uwshape = ot_calloc((size_t)n, sizeof *t->uwshape);
    t->uslots = ot_calloc((size_t)n, sizeof *t->uslots);
    t->usoff = ot_calloc((size_t)n, sizeof *t->usoff);
    t->umaster = ot_calloc((size_t)n, sizeof *t->umaster);
    t->ulr = ot_calloc((size_t)n, sizeof *t->ulr);
    t->upopt = ot_calloc((size_t)n, sizeof *t->upopt);
    t->useg = ot_calloc((size_t)n, sizeof *t->useg);
    t->ucomp = ot_calloc((size_t)n, sizeof *t->ucomp);
    /* int8 state: blocks of OT_TPU_INT8_BLOCK never straddle two tensors */
    int64_t al = op->state_format == OT_TPU_STATE_INT8 ? OT_TPU_INT8_BLOCK : OT_TPU_FLAT_ALIGN;
    int *first = ot_calloc((size_t)n, sizeof *first); /* group g's first tensor */
    int64_t *len = ot_calloc((size_t)n, sizeof *len);
    ot_status s = OT_OK;
    if (!t->pgroup || !t->poff || !t->ushape || !t->uwshape || !t->uslots || !t->usoff ||
        !t->umaster || !t->ulr || !t->upopt || !t->useg || !t->ucomp || !first || !len) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer");
        goto done;
    }
#define GROUP_OPT(k) (op->param_optimizers ? op->param_optimizers[k] : NULL)
#define WD_MASK(k)   (op->weight_decay_mask ? op->weight_decay_mask[k] : true)
#define TR_MASK(k)   (op->trust_ratio_mask ? op->trust_ratio_mask[k] : true)
    for (int k = 0; k < n; k++) {
        int g = 0;
        for (; g < t->ngroups; g++) {
            int f = first[g];
            if (ps[f].dtype == ps[k].dtype && GROUP_OPT(f) == GROUP_OPT(k) &&
                WD_MASK(f) == WD_MASK(k) && TR_MASK(f) == TR_MASK(k) &&
                t->lr_scale[f] == t->lr_scale[k])
                break;
        }
        if (g == t->ngroups) {
            first[g] = k;
            t->upopt[g] = t->popt[k];
            t->ulr[g] = t->lr_scale[k];
            t->ngroups++;
        }
        t->pgroup[k] = g;
        t->poff[k] = len[g];
        int64_t ne = ot_shape_numel_unchecked(&ps[k]);
        len[g] += (ne + al - 1) / al * al;
    }
#undef GROUP_OPT
#undef WD_MASK
#undef TR_MASK
    int nstate = 0;
    for (int g = 0; g < t->ngroups && s == OT_OK; g++) {
        if (len[g] == 0) len[g] = al; /* every tensor empty */
        ot_dtype pdt = ps[first[g]].dtype;
        /* a bf16/f16 group keeps an f32 master: its update is built in f32 */
        t->umaster[g] = pdt == OT_BF16 || pdt == OT_F16;
        ot_dtype dt = t->umaster[g] ? OT_F32 : pdt;
        s = ot_shape_make(&t->ushape[g], pdt, 1, &len[g]);
        if (s == OT_OK) s = ot_shape_make(&t->uwshape[g], dt, 1, &len[g]);
        if (s == OT_OK) s = flat_check_elementwise(t->upopt[g], dt, false, false);
        if (s == OT_ERR_UNIMPLEMENTED && flat_segmentable(t, ps, g, dt, len[g])) {
            s = flat_check_elementwise(t->upopt[g], dt, true, false);
            t->useg[g] = s == OT_OK;
        }
        t->uslots[g] = ot_optimizer_state_count(t->upopt[g]);
        nstate += t->uslots[g] + (t->umaster[g] ? 1 : 0);
        if (s == OT_OK && op->state_format != OT_TPU_STATE_F32) {
            if (dt != OT_F32)
                s = ot_error(OT_ERR_INVALID_ARGUMENT,
                             "ot_tpu_optimizer_create: state format %s is not supported for "
                             "the %s group %d (compressed state needs an f32 update: f32, bf16 "
                             "or f16 parameters)",
                             op->state_format == OT_TPU_STATE_INT8 ? "int8" : "bf16",
                             ot_dtype_name(dt), g);
            t->ucomp[g] = true;
        }
        for (int j = 0; s == OT_OK && op->state_format == OT_TPU_STATE_INT8 && j < t->uslots[g];
             j++) { /* one absmax tensor per quantized slot */
            ot_shape ss;
            s = ot_optimizer_state_shape(t->upopt[g], j, &t->uwshape[g], &ss);
            if (s == OT_OK && slot_compressed(t->upopt[g], j, &ss, &t->uwshape[g])) nstate++;
        }
    }
    t->nstate = nstate;
done:
    ot_free(first);
    ot_free(len);
    return s;
}

static ot_status shard_create(const ot_optimizer *o, const ot_shape *ps, int nparams,
                              const ot_tpu_optimizer_options *op, ot_tpu_optimizer **out);

/* create; shard_ext: the module takes the pod's reductions as inputs (sharded mode's block
 * update, shard_create); shard_trust: also the trust ratios' sums, and exe_u is compiled. */
static ot_status create_impl(const ot_optimizer *o, const ot_shape *param_shapes, int nparams,
                             const ot_tpu_optimizer_options *opts, bool shard_ext, bool shard_trust,
                             ot_tpu_optimizer **out);

ot_status ot_tpu_optimizer_create(const ot_optimizer *o, const ot_shape *param_shapes, int nparams,
                                  const ot_tpu_optimizer_options *opts, ot_tpu_optimizer **out) {
    return create_impl(o, param_shapes, nparams, opts, false, false, out);
}

static ot_status create_impl(const ot_optimizer *o, const ot_shape *param_shapes, int nparams,
                             const ot_tpu_optimizer_options *opts, bool shard_ext, bool shard_trust,
                             ot_tpu_optimizer **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_create: out is NULL");
    *out = NULL;
    if (!o || (nparams > 0 && !param_shapes))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_create: NULL argument");
    if (nparams <= 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_create: %d parameters", nparams);
    ot_tpu_optimizer_options op = opts ? *opts : ot_tpu_optimizer_options_default();
    if (op.shard_devices < 0 || op.shard_head < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "ot_tpu_optimizer_create: shard_devices %d, shard_head %lld (>= 0)",
                        op.shard_devices, (long long)op.shard_head);
    if (op.state_int8_min_size < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "ot_tpu_optimizer_create: state_int8_min_size %lld (>= 0)",
                        (long long)op.state_int8_min_size);
    if (op.shard_devices > 1) return shard_create(o, param_shapes, nparams, &op, out);
    if (op.loss_scaling &&
        (!(op.init_scale > 0) || !isfinite(op.init_scale) || !(op.growth_factor >= 1) ||
         !isfinite(op.growth_factor) || !(op.backoff_factor > 0 && op.backoff_factor <= 1) ||
         op.growth_interval < 1))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "ot_tpu_optimizer_create: loss scaling needs init_scale > 0, "
                        "growth_factor >= 1, 0 < backoff_factor <= 1, growth_interval >= 1");
    if (op.state_format != OT_TPU_STATE_F32 && op.state_format != OT_TPU_STATE_BF16 &&
        op.state_format != OT_TPU_STATE_INT8)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "ot_tpu_optimizer_create: unknown state format %d (f32, bf16, int8)",
                        (int)op.state_format);
    if (!isfinite(op.clip_grad_norm) || op.clip_grad_norm < 0 || !isfinite(op.clip_grad_value) ||
        op.clip_grad_value < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "ot_tpu_optimizer_create: clip_grad_norm %g, clip_grad_value %g (> 0 "
                        "clips, 0 is off)",
                        op.clip_grad_norm, op.clip_grad_value);
    for (int k = 0; k < nparams; k++) {
        ot_dtype dt = param_shapes[k].dtype;
        if (dt != OT_F32 && dt != OT_F64 && dt != OT_BF16 && dt != OT_F16)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "ot_tpu_optimizer_create: parameter %d has dtype %s (f32, f64, or "
                            "bf16/f16 with an f32 master)",
                            k, ot_dtype_name(dt));
        ot_shape chk;
        OT_CHECK(ot_shape_make(&chk, dt, param_shapes[k].rank, param_shapes[k].dims));
    }
    ot_tpu_optimizer *t = ot_calloc(1, sizeof *t);
    if (!t) return ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer");
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        ot_free(t);
        return ot_error(OT_ERR_INTERNAL, "tpu optimizer: mutex");
    }
    ot_status s = OT_OK;
    t->opts = op;
    t->shard_ext = shard_ext;
    t->shard_trust = shard_trust;
    t->opts.compile = NULL; /* not kept: the caller's pointers may not outlive create */
    t->opts.param_optimizers = NULL;
    t->opts.lr_scale = NULL;
    t->opts.weight_decay_mask = NULL;
    t->opts.trust_ratio_mask = NULL;
    t->nparams = nparams;
    t->popt = ot_calloc((size_t)nparams, sizeof *t->popt);
    t->slots = ot_calloc((size_t)nparams, sizeof *t->slots);
    t->lr_scale = ot_calloc((size_t)nparams, sizeof *t->lr_scale);
    if (!t->popt || !t->slots || !t->lr_scale) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer");
        goto fail;
    }
    OT_CHECK_GOTO(ot_optimizer_clone(o, &t->base), s, fail);
    t->nstate = 0;
    for (int k = 0; k < nparams; k++) {
        const ot_optimizer *src =
            op.param_optimizers && op.param_optimizers[k] ? op.param_optimizers[k] : o;
        OT_CHECK_GOTO(ot_optimizer_clone(src, &t->popt[k]), s, fail);
        if (op.weight_decay_mask && !op.weight_decay_mask[k]) {
            bool found = false;
            OT_CHECK_GOTO(ot_optim_zero_hparam(t->popt[k], "weight_decay", &found), s, fail);
            OT_CHECK_GOTO(ot_optim_zero_hparam(t->popt[k], "weight_decay_rate", &found), s, fail);
            if (!found) {
                s = ot_error(OT_ERR_INVALID_ARGUMENT,
                             "ot_tpu_optimizer_create: weight_decay_mask[%d] is false but "
                             "optimizer '%s' has no weight decay",
                             k, ot_optimizer_name(t->popt[k]));
                goto fail;
            }
        }
        if (op.trust_ratio_mask && !op.trust_ratio_mask[k]) {
            bool found = false;
            OT_CHECK_GOTO(ot_optim_zero_hparam(t->popt[k], "trust_ratio", &found), s, fail);
            if (!found) {
                s = ot_error(OT_ERR_INVALID_ARGUMENT,
                             "ot_tpu_optimizer_create: trust_ratio_mask[%d] is false but "
                             "optimizer '%s' has no trust ratio",
                             k, ot_optimizer_name(t->popt[k]));
                goto fail;
            }
        }
        t->slots[k] = ot_optimizer_state_count(t->popt[k]);
        t->lr_scale[k] = op.lr_scale ? op.lr_scale[k] : 1.0;
        if (!isfinite(t->lr_scale[k]) || t->lr_scale[k] < 0) {
            s = ot_error(OT_ERR_INVALID_ARGUMENT,
                         "ot_tpu_optimizer_create: lr_scale[%d] = %g (finite, >= 0)", k,
                         t->lr_scale[k]);
            goto fail;
        }
        ot_dtype dt = param_shapes[k].dtype;
        t->nstate += t->slots[k] + (dt == OT_BF16 || dt == OT_F16 ? 1 : 0);
        if (op.state_format == OT_TPU_STATE_INT8 && !op.flat && t->slots[k] > 0 &&
            ot_shape_numel_unchecked(&param_shapes[k]) >= op.state_int8_min_size) {
            /* per tensor, int8 state is the fused kernel's only (exec/state8.h): every slot is
             * an array (codes padded to whole blocks) with its absmax after the tensor's slots */
            if (dt != OT_F32 || !ot_optim_state8_supported(t->popt[k]) ||
                (op.param_optimizers && op.param_optimizers[k] &&
                 ot_optimizer_is_host(op.param_optimizers[k]))) {
                s = ot_error(OT_ERR_INVALID_ARGUMENT,
                             "ot_tpu_optimizer_create: int8 state in per-tensor mode takes f32 "
                             "parameters updated by adam or adamw (torch's form, no amsgrad), "
                             "lion or sgd with momentum (parameter %d: %s '%s'); flat mode "
                             "(options.flat) takes any elementwise optimizer",
                             k, ot_dtype_name(dt), ot_optimizer_name(t->popt[k]));
                goto fail;
            }
            t->nstate += t->slots[k];
        }
        bool h = ot_optimizer_is_host(t->popt[k]);
        if (k == 0) t->host = h;
        if (h != t->host) {
            s = ot_error(OT_ERR_INVALID_ARGUMENT,
                         "ot_tpu_optimizer_create: parameter %d's optimizer '%s' is %s but "
                         "parameter 0's is %s (host callbacks and update graphs do not mix in "
                         "one wrapper)",
                         k, ot_optimizer_name(t->popt[k]), h ? "a host callback" : "a graph",
                         t->host ? "a host callback" : "a graph");
            goto fail;
        }
        if (h && (op.loss_scaling || dt == OT_BF16 || dt == OT_F16)) {
            s = ot_error(OT_ERR_INVALID_ARGUMENT,
                         "ot_tpu_optimizer_create: host callback optimizer '%s': loss scaling "
                         "and bf16/f16 parameters (f32 masters) need an update graph",
                         ot_optimizer_name(t->popt[k]));
            goto fail;
        }
    }
    t->flat = op.flat;
    if (t->flat) {
        if (t->host) {
            s = ot_error(OT_ERR_UNIMPLEMENTED,
                         "ot_tpu_optimizer_create: flat mode: host callback optimizer '%s' (flat "
                         "mode needs an update graph)",
                         ot_optimizer_name(t->popt[0]));
            goto fail;
        }
        OT_CHECK_GOTO(flat_layout(t, param_shapes, &op), s, fail);
    }
    t->pshape = ot_calloc((size_t)nparams, sizeof *t->pshape);
    t->wshape = ot_calloc((size_t)nparams, sizeof *t->wshape);
    t->master = ot_calloc((size_t)nparams, sizeof *t->master);
    t->soff = ot_calloc((size_t)nparams, sizeof *t->soff);
    t->sshape = ot_calloc((size_t)t->nstate + 1, sizeof *t->sshape);
    t->sname = ot_calloc((size_t)t->nstate + 1, sizeof *t->sname);
    t->sinit = ot_calloc((size_t)t->nstate + 1, sizeof *t->sinit);
    if (!t->pshape || !t->sshape || !t->sname || !t->sinit || !t->wshape || !t->master ||
        !t->soff) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer");
        goto fail;
    }
    int i = 0;
    for (int k = 0; k < nparams; k++) {
        t->pshape[k] = param_shapes[k];
        t->wshape[k] = param_shapes[k];
    }
    for (int k = 0; k < nparams && t->flat; k++) { /* every tensor's state is its shape */
        for (int j = 0; j < t->slots[k]; j++) {
            ot_shape ss;
            OT_CHECK_GOTO(ot_optimizer_state_shape(t->popt[k], j, &t->pshape[k], &ss), s, fail);
            if (!ot_shape_equal(&ss, &t->pshape[k]) && ss.rank != 0) {
                s = ot_error(OT_ERR_UNIMPLEMENTED,
                             "ot_tpu_optimizer_create: flat mode: optimizer '%s' keeps state "
                             "'%s' of another shape than parameter %d (not elementwise)",
                             ot_optimizer_name(t->popt[k]), ot_optimizer_state_name(t->popt[k], j),
                             k);
                goto fail;
            }
        }
    }
    bool int8 = op.state_format == OT_TPU_STATE_INT8;
    if (int8 && (!(t->sabs = ot_calloc((size_t)t->nstate + 1, sizeof *t->sabs)) ||
                 !(t->ssigned = ot_calloc((size_t)t->nstate + 1, sizeof *t->ssigned)))) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer");
        goto fail;
    }
    for (int q = 0; int8 && q < t->nstate; q++) t->sabs[q] = -1;
    for (int g = 0; g < t->ngroups; g++) { /* the flat state: slot j of group g */
        const ot_optimizer *og = t->upopt[g];
        const ot_optimizer_vtable *vt = ot_optimizer_vtable_of(og);
        t->usoff[g] = i;
        for (int j = 0; j < t->uslots[g] + (t->umaster[g] ? 1 : 0); j++, i++) {
            const char *sn = "master"; /* after the slots: the f32 master, set at first step */
            if (j < t->uslots[g]) {
                OT_CHECK_GOTO(ot_optimizer_state_shape(og, j, &t->uwshape[g], &t->sshape[i]), s,
                              fail);
                if (t->ucomp[g] && slot_compressed(og, j, &t->sshape[i], &t->uwshape[g]))
                    t->sshape[i].dtype = int8 ? OT_U8 : OT_BF16;
                t->sinit[i] = vt->state_init ? vt->state_init(og, j) : 0.0;
                sn = ot_optimizer_state_name(og, j);
            } else {
                t->sshape[i] = t->uwshape[g];
            }
            char buf[160];
            snprintf(buf, sizeof buf, "flat%d.%s.%s", g, ot_dtype_name(t->ushape[g].dtype),
                     sn ? sn : "?");
            if (!(t->sname[i] = ot_strdup(buf))) {
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer");
                goto fail;
            }
        }
        for (int j = 0; int8 && j < t->uslots[g]; j++) { /* the quantized slots' absmax */
            int q = t->usoff[g] + j;
            if (t->sshape[q].dtype != OT_U8) continue;
            int64_t nb = t->sshape[q].dims[0] / OT_TPU_INT8_BLOCK;
            OT_CHECK_GOTO(ot_shape_make(&t->sshape[i], OT_F32, 1, &nb), s, fail);
            t->sinit[i] = t->sinit[q];
            t->sabs[q] = i;
            t->ssigned[q] = !slot_unsigned(ot_optimizer_state_name(og, j));
            char buf[192];
            snprintf(buf, sizeof buf, "%s.absmax", t->sname[q]);
            if (!(t->sname[i++] = ot_strdup(buf))) {
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer");
                goto fail;
            }
        }
    }
    if (!t->flat && op.state_format != OT_TPU_STATE_F32 &&
        !(t->ucomp = ot_calloc((size_t)nparams, sizeof *t->ucomp))) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer");
        goto fail;
    }
    for (int k = 0; k < nparams && !t->flat; k++) {
        t->wshape[k] = param_shapes[k];
        t->master[k] = param_shapes[k].dtype == OT_BF16 || param_shapes[k].dtype == OT_F16;
        if (t->master[k]) t->wshape[k].dtype = OT_F32;
        if (t->ucomp && t->wshape[k].dtype != OT_F32) {
            s = ot_error(OT_ERR_INVALID_ARGUMENT,
                         "ot_tpu_optimizer_create: state format bf16 is not supported for the "
                         "f64 parameter %d (compressed state needs an f32 update: f32, bf16 or "
                         "f16 parameters)",
                         k);
            goto fail;
        }
        /* int8 per tensor: tensors under state_int8_min_size elements keep f32 state */
        if (t->ucomp)
            t->ucomp[k] = !int8 || (t->slots[k] > 0 && ot_shape_numel_unchecked(&param_shapes[k]) >=
                                                           op.state_int8_min_size);
        t->soff[k] = i;
        const ot_optimizer *ok = t->popt[k];
        const ot_optimizer_vtable *vt = ot_optimizer_vtable_of(ok);
        /* int8: the codes of the tensor's elements flattened, padded to whole blocks */
        int64_t nel = ot_shape_numel_unchecked(&t->wshape[k]);
        int64_t padded = (nel + OT_TPU_INT8_BLOCK - 1) / OT_TPU_INT8_BLOCK * OT_TPU_INT8_BLOCK;
        for (int j = 0; j <= t->slots[k]; j++, i++) {
            const char *sn;
            if (j < t->slots[k]) {
                OT_CHECK_GOTO(ot_optimizer_state_shape(ok, j, &t->wshape[k], &t->sshape[i]), s,
                              fail);
                if (t->ucomp && t->ucomp[k] &&
                    slot_compressed(ok, j, &t->sshape[i], &t->wshape[k])) {
                    t->sshape[i].dtype = OT_BF16;
                    if (int8)
                        OT_CHECK_GOTO(ot_shape_make(&t->sshape[i], OT_U8, 1, &padded), s, fail);
                }
                sn = ot_optimizer_state_name(ok, j);
                t->sinit[i] = vt->state_init ? vt->state_init(ok, j) : 0.0;
            } else if (t->master[k]) {
                t->sshape[i] = t->wshape[k];
                sn = "master";
            } else {
                i--; /* no master: no extra slot */
                continue;
            }
            char buf[160];
            snprintf(buf, sizeof buf, "%d.%s", k, sn ? sn : "?");
            t->sname[i] = ot_strdup(buf);
            if (!t->sname[i]) {
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer");
                goto fail;
            }
        }
        for (int j = 0; int8 && j < t->slots[k]; j++) { /* the slots' absmax */
            int q = t->soff[k] + j;
            if (t->sshape[q].dtype != OT_U8) continue;
            int64_t nb = padded / OT_TPU_INT8_BLOCK;
            OT_CHECK_GOTO(ot_shape_make(&t->sshape[i], OT_F32, 1, &nb), s, fail);
            t->sinit[i] = t->sinit[q];
            t->sabs[q] = i;
            t->ssigned[q] = !slot_unsigned(ot_optimizer_state_name(ok, j));
            char buf[192];
            snprintf(buf, sizeof buf, "%s.absmax", t->sname[q]);
            if (!(t->sname[i++] = ot_strdup(buf))) {
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer");
                goto fail;
            }
        }
    }
    for (int k = 0; k < nparams && !t->flat; k++) {
        int64_t pb = (int64_t)ot_shape_nbytes_unchecked(&t->pshape[k]);
        t->prof.param_bytes += pb;
        t->prof.grad_bytes += pb;
    }
    for (int g = 0; g < t->ngroups; g++) { /* flat: the groups, padding included */
        int64_t pb = (int64_t)ot_shape_nbytes_unchecked(&t->ushape[g]);
        t->prof.param_bytes += pb;
        t->prof.grad_bytes += pb;
    }
    for (int q = 0; q < t->nstate; q++)
        t->prof.state_bytes += (int64_t)ot_shape_nbytes_unchecked(&t->sshape[q]);
    t->prof.bytes_per_step = 2 * t->prof.param_bytes + t->prof.grad_bytes + 2 * t->prof.state_bytes;
    t->prof.compiled = !t->host;
    if (t->host)
        t->prof.host_transfer_bytes_per_step =
            2 * t->prof.param_bytes + t->prof.grad_bytes + 2 * t->prof.state_bytes;
    if (!t->host) { /* a host callback bypasses the compile pipeline: nothing to build */
        double c0 = (1e-9 * (double)ot_now_ns());
        ot_module *m = NULL;
        OT_CHECK_GOTO(build_module(t, false, &m), s, fail);
        ot_compile_options co = op.compile ? *op.compile : ot_compile_options_default();
        s = ot_compile_cached(m, &co, op.compile_cache, &t->exe, &t->prof.compile_cache_hit);
        ot_module_free(m);
        if (s != OT_OK) goto fail;
        t->compiles = 1;
        if (shard_trust) { /* the update before the trust ratio, for the pod's norms */
            bool hit = false;
            OT_CHECK_GOTO(build_module(t, true, &m), s, fail);
            s = ot_compile_cached(m, &co, op.compile_cache, &t->exe_u, &hit);
            ot_module_free(m);
            if (s != OT_OK) goto fail;
            t->compiles = 2;
        }
        t->prof.compiles = t->compiles;
        t->prof.compile_seconds = (1e-9 * (double)ot_now_ns()) - c0;
        t->prof.executable_bytes = ot_executable_total_bytes(t->exe);
    }
    *out = t;
    return OT_OK;
fail:
    ot_tpu_optimizer_free(t);
    return s;
}

int64_t ot_tpu_optimizer_compile_count(const ot_tpu_optimizer *t) {
    return t ? t->compiles : 0;
}
const ot_executable *ot_tpu_optimizer_executable(const ot_tpu_optimizer *t) {
    return t ? t->exe : NULL;
}
int ot_tpu_optimizer_param_count(const ot_tpu_optimizer *t) {
    return t ? t->nparams : 0;
}
int ot_tpu_optimizer_state_count(const ot_tpu_optimizer *t) {
    return t ? t->nstate : 0;
}
const char *ot_tpu_optimizer_state_name(const ot_tpu_optimizer *t, int i) {
    return t && i >= 0 && i < t->nstate ? t->sname[i] : NULL;
}
ot_status ot_tpu_optimizer_state_shape(const ot_tpu_optimizer *t, int i, ot_shape *out) {
    if (!t || !out)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_state_shape: NULL argument");
    if (i < 0 || i >= t->nstate)
        return ot_error(OT_ERR_OUT_OF_RANGE, "tpu optimizer: no state tensor %d (%d)", i,
                        t->nstate);
    *out = t->sshape[i];
    return OT_OK;
}

/* ---- replicas -------------------------------------------------------------------------------- */

static replica *find_replica(ot_tpu_optimizer *t, const ot_device *d) {
    replica *r = NULL;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->nreps && !r; i++)
        if (t->reps[i]->dev == d) r = t->reps[i];
    pthread_mutex_unlock(&t->mu);
    return r;
}

int ot_tpu_optimizer_replica_count(const ot_tpu_optimizer *t) {
    if (!t) return 0;
    pthread_mutex_lock((pthread_mutex_t *)&t->mu);
    int n = t->nreps;
    pthread_mutex_unlock((pthread_mutex_t *)&t->mu);
    return n;
}

static ot_status fill_state(const ot_tpu_optimizer *t, int i, ot_tensor *out) {
    OT_CHECK(ot_tensor_alloc(out, &t->sshape[i]));
    int64_t n = ot_shape_numel_unchecked(&t->sshape[i]);
    double v = t->sinit[i];
    if (t->sshape[i].dtype == OT_U8) { /* int8 codes: v is 0 (the zero code) or the block's
                                        * absmax (1.0, code 255 in both maps) */
        uint8_t z = t->ssigned[i] ? 127 : 0;
        memset(out->data, v == 0 ? z : 255, (size_t)n);
        return OT_OK;
    }
    bool absmax = false;
    for (int q = 0; t->sabs && q < t->nstate && !absmax; q++) absmax = t->sabs[q] == i;
    if (absmax) v = v == 0 ? 1.0 : fabs(v);
    for (int64_t e = 0; e < n; e++) {
        if (t->sshape[i].dtype == OT_F32)
            ((float *)out->data)[e] = (float)v;
        else if (t->sshape[i].dtype == OT_BF16)
            ((uint16_t *)out->data)[e] = ot_f32_to_bf16((float)v);
        else
            ((double *)out->data)[e] = v;
    }
    return OT_OK;
}

ot_status ot_tpu_optimizer_add_replica(ot_tpu_optimizer *t, ot_device *d) {
    if (!t || !d)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_add_replica: NULL argument");
    if (find_replica(t, d))
        return ot_error(OT_ERR_ALREADY_EXISTS, "tpu optimizer: device %d already has a replica",
                        ot_device_index(d));
    replica *r = ot_calloc(1, sizeof *r);
    ot_status s = OT_OK;
    if (!r || !(r->state = ot_calloc((size_t)t->nstate + 1, sizeof *r->state)) ||
        !(r->master_ready = ot_calloc((size_t)t->nparams, sizeof *r->master_ready))) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer replica");
        goto fail;
    }
    r->dev = d;
    r->scale = t->opts.loss_scaling ? t->opts.init_scale : 1.0;
    for (int i = 0; i < t->nstate; i++) {
        ot_tensor h = {0};
        OT_CHECK_GOTO(fill_state(t, i, &h), s, fail);
        s = ot_buffer_from_host(d, &h, &r->state[i]);
        ot_tensor_release(&h);
        if (s != OT_OK) {
            s = ot_error_wrap(s, "tpu optimizer: state '%s' on device %d", t->sname[i],
                              ot_device_index(d));
            goto fail;
        }
    }
    if (t->ngroups > 0 && (!(r->fparam = ot_calloc((size_t)t->ngroups, sizeof *r->fparam)) ||
                           !(r->fgrad = ot_calloc((size_t)t->ngroups, sizeof *r->fgrad)))) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer replica");
        goto fail;
    }
    for (int g = 0; g < t->ngroups; g++) { /* flat parameters and gradients: zeros */
        ot_tensor h = {0};
        OT_CHECK_GOTO(ot_tensor_alloc(&h, &t->ushape[g]), s, fail);
        memset(h.data, 0, h.nbytes);
        s = ot_buffer_from_host(d, &h, &r->fparam[g]);
        if (s == OT_OK) s = ot_buffer_from_host(d, &h, &r->fgrad[g]);
        ot_tensor_release(&h);
        if (s != OT_OK) {
            s = ot_error_wrap(s, "tpu optimizer: flat group %d on device %d", g,
                              ot_device_index(d));
            goto fail;
        }
    }
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->nreps; i++)
        if (t->reps[i]->dev == d) {
            pthread_mutex_unlock(&t->mu);
            s = ot_error(OT_ERR_ALREADY_EXISTS, "tpu optimizer: device %d already has a replica",
                         ot_device_index(d));
            goto fail;
        }
    if (t->nreps == t->cap) {
        int nc = t->cap ? 2 * t->cap : 4;
        replica **nr = ot_realloc(t->reps, (size_t)nc * sizeof *nr);
        if (!nr) {
            pthread_mutex_unlock(&t->mu);
            s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer replica");
            goto fail;
        }
        t->reps = nr;
        t->cap = nc;
    }
    t->reps[t->nreps++] = r;
    pthread_mutex_unlock(&t->mu);
    return OT_OK;
fail:
    replica_free(t, r);
    return s;
}

/* ---- step ------------------------------------------------------------------------------------ */

static ot_status check_buf(const ot_tpu_optimizer *t, const ot_buffer *b, const ot_device *d,
                           const ot_shape *want, const char *what, int k) {
    if (!b) return ot_error(OT_ERR_INVALID_ARGUMENT, "tpu optimizer: %s %d is NULL", what, k);
    if (ot_buffer_donated(b))
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "tpu optimizer: %s %d was donated to an earlier execution", what, k);
    if (ot_buffer_device(b) != d)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "tpu optimizer: %s %d lives on device %d, not device %d", what, k,
                        ot_device_index(ot_buffer_device(b)), ot_device_index(d));
    if (!ot_shape_equal(ot_buffer_shape(b), want)) {
        char w[96], g[96];
        ot_shape_format(want, w, sizeof w);
        ot_shape_format(ot_buffer_shape(b), g, sizeof g);
        return ot_error(OT_ERR_SHAPE_MISMATCH, "tpu optimizer: %s %d is %s, expected %s", what, k,
                        g, w);
    }
    (void)t;
    return OT_OK;
}

/* The f32 master of unit k (parameter, or flat group) from the bf16/f16 parameter itself. */
static ot_status init_master(ot_tpu_optimizer *t, replica *r, int k, const ot_buffer *param) {
    int i = t->flat ? t->usoff[k] + t->uslots[k] : t->soff[k] + t->slots[k];
    ot_dtype pdt = t->flat ? t->ushape[k].dtype : t->pshape[k].dtype;
    ot_tensor h = {0}, w = {0};
    OT_CHECK(ot_buffer_to_host(param, &h));
    ot_status s = ot_tensor_alloc(&w, &t->sshape[i]);
    if (s == OT_OK) {
        int64_t ne = ot_shape_numel_unchecked(&t->sshape[i]);
        const uint16_t *src = h.data;
        float *dst = w.data;
        for (int64_t e = 0; e < ne; e++)
            dst[e] = pdt == OT_BF16 ? ot_bf16_to_f32(src[e]) : ot_f16_to_f32(src[e]);
        ot_buffer *b = NULL;
        s = ot_buffer_from_host(r->dev, &w, &b);
        if (s == OT_OK) {
            ot_buffer_free(r->state[i]);
            r->state[i] = b;
            r->master_ready[k] = true;
        }
    }
    ot_tensor_release(&h);
    ot_tensor_release(&w);
    return s;
}

/* A host-callback step: everything copied to the host, clipped as the compiled update clips,
 * each parameter's callback run on those copies, the results uploaded as new buffers; the
 * caller's handles and the replica's state are replaced only when all of that succeeded. */
static ot_status host_step(ot_tpu_optimizer *t, replica *r, ot_buffer **params,
                           ot_buffer *const *grads, int64_t step, double lr) {
    int n = t->nparams, ns = t->nstate;
    ot_tensor *hp = ot_calloc((size_t)n, sizeof *hp), *hg = ot_calloc((size_t)n, sizeof *hg);
    ot_tensor *hs = ot_calloc((size_t)ns + 1, sizeof *hs);
    ot_buffer **nb = ot_calloc((size_t)(n + ns), sizeof *nb);
    ot_status s = OT_OK;
    if (!hp || !hg || !hs || !nb) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer host step");
        goto done;
    }
    for (int k = 0; k < n && s == OT_OK; k++) {
        s = ot_buffer_to_host(params[k], &hp[k]);
        if (s == OT_OK) s = ot_buffer_to_host(grads[k], &hg[k]);
    }
    for (int i = 0; i < ns && s == OT_OK; i++) s = ot_buffer_to_host(r->state[i], &hs[i]);
    if (s != OT_OK) goto done;
    /* clipping: by value (v rounded to the dtype), then torch's clip_grad_norm_ with the sum of
     * squares and coef in f64, coef rounded to the gradient dtype */
    double ss = 0;
    for (int k = 0; k < n; k++) {
        int64_t ne = ot_shape_numel_unchecked(&t->pshape[k]);
        bool f32 = t->pshape[k].dtype == OT_F32;
        float *gf = hg[k].data;
        double *gd = hg[k].data;
        double v = t->opts.clip_grad_value;
        for (int64_t e = 0; e < ne; e++) {
            if (v > 0 && f32)
                gf[e] = fminf(fmaxf(gf[e], -(float)v), (float)v);
            else if (v > 0)
                gd[e] = fmin(fmax(gd[e], -v), v);
            double x = f32 ? (double)gf[e] : gd[e];
            ss += x * x;
        }
    }
    double mx = t->opts.clip_grad_norm, total = sqrt(ss);
    if (mx > 0 && !(t->opts.clip_norm_optax && total < mx)) {
        double coef = fmin(mx / (total + 1e-6), 1.0);
        bool ox = t->opts.clip_norm_optax; /* (g / total) * max_norm in the gradient dtype */
        for (int k = 0; k < n; k++) {
            int64_t ne = ot_shape_numel_unchecked(&t->pshape[k]);
            for (int64_t e = 0; e < ne; e++) {
                float *gf = (float *)hg[k].data + e;
                double *gd = (double *)hg[k].data + e;
                if (t->pshape[k].dtype == OT_F32)
                    *gf = ox ? (*gf / (float)total) * (float)mx : *gf * (float)coef;
                else
                    *gd = ox ? (*gd / total) * mx : *gd * coef;
            }
        }
    }
    for (int k = 0; k < n; k++) {
        void *sp[OT_OPTIM_MAX_STATE] = {0};
        for (int j = 0; j < t->slots[k]; j++) sp[j] = hs[t->soff[k] + j].data;
        double lrk = t->lr_scale[k] == 1.0 ? lr : lr * t->lr_scale[k];
        s = ot_optim_host_call(t->popt[k], &t->pshape[k], hp[k].data, hg[k].data, sp, step, lrk);
        if (s != OT_OK) {
            s = ot_error_wrap(s, "tpu optimizer step %lld, parameter %d", (long long)step, k);
            goto done;
        }
    }
    for (int q = 0; q < n + ns && s == OT_OK; q++)
        s = ot_buffer_from_host(r->dev, q < n ? &hp[q] : &hs[q - n], &nb[q]);
    if (s != OT_OK) goto done;
    for (int k = 0; k < n; k++) { /* commit */
        ot_buffer_free(params[k]);
        params[k] = nb[k];
        nb[k] = NULL;
    }
    for (int i = 0; i < ns; i++) {
        ot_buffer_free(r->state[i]);
        r->state[i] = nb[n + i];
        nb[n + i] = NULL;
    }
done:
    for (int k = 0; hp && hg && k < n; k++) {
        ot_tensor_release(&hp[k]);
        ot_tensor_release(&hg[k]);
    }
    for (int i = 0; hs && i < ns; i++) ot_tensor_release(&hs[i]);
    for (int q = 0; nb && q < n + ns; q++) ot_buffer_free(nb[q]);
    ot_free(hp);
    ot_free(hg);
    ot_free(hs);
    ot_free(nb);
    return s;
}

static ot_status exec_module(ot_tpu_optimizer *t, replica *r, ot_device *d, int nu,
                             ot_buffer **params, ot_buffer *const *grads, int64_t step, double lr,
                             const ot_run_options *ro, ot_buffer **u_out);
static ot_status exec_update(ot_tpu_optimizer *t, replica *r, ot_device *d, int nu,
                             ot_buffer **params, ot_buffer *const *grads, int64_t step, double lr,
                             const ot_run_options *ro) {
    return exec_module(t, r, d, nu, params, grads, step, lr, ro, NULL);
}

/* The checks both step forms make first: step and lr in range, a replica on d. */
static ot_status check_step(ot_tpu_optimizer *t, ot_device *d, int64_t step, double lr,
                            replica **out) {
    if (step < 1)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "tpu optimizer: step %lld (the first is 1)",
                        (long long)step);
    if (!isfinite(lr) || lr < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "tpu optimizer: learning rate %g", lr);
    replica *r = find_replica(t, d);
    if (!r)
        return ot_error(OT_ERR_NOT_FOUND, "tpu optimizer: device %d has no replica",
                        ot_device_index(d));
    *out = r;
    return OT_OK;
}

static ot_status step_impl(ot_tpu_optimizer *t, ot_device *d, ot_buffer **params,
                           ot_buffer *const *grads, int64_t step, double lr,
                           const ot_run_options *ro) {
    if (!t || !d || !params || !grads)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_step: NULL argument");
    if (t->flat)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "ot_tpu_optimizer_step: the wrapper is in flat mode (its buffers are its "
                        "own): use ot_tpu_optimizer_step_flat");
    replica *r = NULL; /* set on success (initialized for GCC's flow analysis) */
    OT_CHECK(check_step(t, d, step, lr, &r));
    int n = t->nparams;
    for (int k = 0; k < n; k++) {
        OT_CHECK(check_buf(t, params[k], d, &t->pshape[k], "parameter", k));
        OT_CHECK(check_buf(t, grads[k], d, &t->pshape[k], "gradient", k));
        for (int j = 0; j < n; j++)
            if ((j != k && params[j] == params[k]) || grads[j] == params[k])
                return ot_error(OT_ERR_INVALID_ARGUMENT,
                                "tpu optimizer: parameter %d's buffer is also passed as %s %d", k,
                                grads[j] == params[k] ? "gradient" : "parameter", j);
    }
    for (int i = 0; i < t->nstate; i++)
        if (!r->state[i] || ot_buffer_donated(r->state[i]))
            return ot_error(OT_ERR_FAILED_PRECONDITION,
                            "tpu optimizer: state '%s' of device %d was lost by a failed step",
                            t->sname[i], ot_device_index(d));
    if (t->host) return host_step(t, r, params, grads, step, lr);
    return exec_update(t, r, d, n, params, grads, step, lr, ro);
}

/* Executes the compiled update on replica r: the module's nu units (tensors, or flat groups)
 * in pb (replaced by the new handles) and gb (read only). u_out (sharded lamb/lars): exe_u
 * instead, its update (before the trust ratio) a new buffer in *u_out (the caller's) and nothing
 * else changed. */
static ot_status exec_module(ot_tpu_optimizer *t, replica *r, ot_device *d, int nu,
                             ot_buffer **params, ot_buffer *const *grads, int64_t step, double lr,
                             const ot_run_options *ro, ot_buffer **u_out) {
    int n = nu;
    bool ls = t->opts.loss_scaling;
    bool xss = t->shard_ext && t->opts.clip_grad_norm > 0, xfound = t->shard_ext && ls;
    bool xtrust = t->shard_trust && !u_out;
    int base = 2 * n + t->nstate + 2;
    int nin = base + ls + xss + xfound + 2 * xtrust, nout = u_out ? 1 : n + t->nstate + ls;
    ot_buffer **in = ot_calloc((size_t)nin, sizeof *in);
    ot_buffer **out = ot_calloc((size_t)nout, sizeof *out);
    ot_buffer *sb = NULL, *lb = NULL, *ib = NULL, *xb = NULL, *fb = NULL;
    ot_status s = OT_OK;
    if (!in || !out) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer step");
        goto done;
    }
    /* f32 masters not set with set_state start as the (widened) parameter */
    for (int k = 0; k < n; k++)
        if ((t->flat ? t->umaster[k] : t->master[k]) && !r->master_ready[k]) {
            OT_CHECK_GOTO(init_master(t, r, k, params[k]), s, done);
        }
    ot_shape sc = ot_shape_scalar(OT_F64);
    double stepv = (double)step, lrv = lr;
    ot_tensor ts, tl;
    ot_tensor_borrow(&ts, &sc, &stepv);
    ot_tensor_borrow(&tl, &sc, &lrv);
    OT_CHECK_GOTO(ot_buffer_from_host(d, &ts, &sb), s, done);
    OT_CHECK_GOTO(ot_buffer_from_host(d, &tl, &lb), s, done);
    if (ls) { /* 1/scale in f32, as torch's GradScaler (the reciprocal taken in f64) */
        float inv = (float)(1.0 / r->scale);
        ot_shape s32 = ot_shape_scalar(OT_F32);
        ot_tensor ti;
        ot_tensor_borrow(&ti, &s32, &inv);
        OT_CHECK_GOTO(ot_buffer_from_host(d, &ti, &ib), s, done);
        in[2 * n + t->nstate + 2] = ib;
    }
    if (xss) { /* sharded: the pod's sum of squares and found_inf (shard_update) */
        ot_tensor tx;
        ot_tensor_borrow(&tx, &sc, &r->shard_ss);
        OT_CHECK_GOTO(ot_buffer_from_host(d, &tx, &xb), s, done);
        in[base + ls] = xb;
    }
    if (xfound) {
        uint8_t f = r->shard_found;
        ot_shape sp = ot_shape_scalar(OT_PRED);
        ot_tensor tf;
        ot_tensor_borrow(&tf, &sp, &f);
        OT_CHECK_GOTO(ot_buffer_from_host(d, &tf, &fb), s, done);
        in[base + ls + xss] = fb;
    }
    if (xtrust) { /* sharded lamb/lars: the pod's sums of squares (shard_update) */
        in[base + ls + xss + xfound] = r->shard_p2;
        in[base + ls + xss + xfound + 1] = r->shard_u2;
    }
    for (int k = 0; k < n; k++) {
        in[k] = params[k];
        in[n + k] = grads[k];
    }
    for (int i = 0; i < t->nstate; i++) in[2 * n + i] = r->state[i];
    in[2 * n + t->nstate] = sb;
    in[2 * n + t->nstate + 1] = lb;
    s = ot_device_execute(d, u_out ? t->exe_u : t->exe, in, nin, out, nout, ro, NULL);
    if (s != OT_OK) {
        s = ot_error_wrap(s, "tpu optimizer step %lld on device %d", (long long)step,
                          ot_device_index(d));
        goto done;
    }
    if (u_out) {
        *u_out = out[0];
        goto done;
    }
    for (int k = 0; k < n; k++) {
        ot_buffer_free(params[k]); /* donated: only the handle; else the old memory too */
        params[k] = out[k];
    }
    for (int i = 0; i < t->nstate; i++) {
        ot_buffer_free(r->state[i]);
        r->state[i] = out[n + i];
    }
    if (ls) { /* torch GradScaler.update */
        ot_tensor f = {0};
        s = ot_buffer_to_host(out[n + t->nstate], &f);
        ot_buffer_free(out[n + t->nstate]);
        if (s != OT_OK) goto done;
        r->skipped = ((const uint8_t *)f.data)[0] != 0;
        ot_tensor_release(&f);
        if (r->skipped) {
            r->scale *= t->opts.backoff_factor;
            r->tracker = 0;
        } else if (++r->tracker == t->opts.growth_interval) {
            r->scale *= t->opts.growth_factor;
            r->tracker = 0;
        }
    }
done:
    ot_buffer_free(sb);
    ot_buffer_free(lb);
    ot_buffer_free(ib);
    ot_buffer_free(xb);
    ot_buffer_free(fb);
    ot_free(in);
    ot_free(out);
    return s;
}

static void record_step(ot_tpu_optimizer *t, ot_status s, double dt);

ot_status ot_tpu_optimizer_step(ot_tpu_optimizer *t, ot_device *d, ot_buffer **params,
                                ot_buffer *const *grads, int64_t step, double lr,
                                const ot_run_options *ro) {
    double t0 = (1e-9 * (double)ot_now_ns());
    ot_status s = step_impl(t, d, params, grads, step, lr, ro);
    double dt = (1e-9 * (double)ot_now_ns()) - t0;
    if (t) record_step(t, s, dt);
    return s;
}

static ot_status step_flat_impl(ot_tpu_optimizer *t, ot_device *d, int64_t step, double lr,
                                const ot_run_options *ro) {
    if (!t || !d)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_step_flat: NULL argument");
    if (!t->flat)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "ot_tpu_optimizer_step_flat: the wrapper is not in flat mode (options."
                        "flat): use ot_tpu_optimizer_step");
    replica *r = NULL; /* set on success (initialized for GCC's flow analysis) */
    OT_CHECK(check_step(t, d, step, lr, &r));
    for (int i = 0; i < t->nstate; i++)
        if (!r->state[i] || ot_buffer_donated(r->state[i]))
            return ot_error(OT_ERR_FAILED_PRECONDITION,
                            "tpu optimizer: state '%s' of device %d was lost by a failed step",
                            t->sname[i], ot_device_index(d));
    for (int g = 0; g < t->ngroups; g++)
        if (!r->fparam[g] || ot_buffer_donated(r->fparam[g]))
            return ot_error(OT_ERR_FAILED_PRECONDITION,
                            "tpu optimizer: flat parameters of group %d on device %d were lost "
                            "by a failed step",
                            g, ot_device_index(d));
    return exec_update(t, r, d, t->ngroups, r->fparam, r->fgrad, step, lr, ro);
}

ot_status ot_tpu_optimizer_step_flat(ot_tpu_optimizer *t, ot_device *d, int64_t step, double lr,
                                     const ot_run_options *ro) {
    double t0 = (1e-9 * (double)ot_now_ns());
    ot_status s = step_flat_impl(t, d, step, lr, ro);
    double dt = (1e-9 * (double)ot_now_ns()) - t0;
    if (t) record_step(t, s, dt);
    return s;
}

/* ---- flat views ------------------------------------------------------------------------------ */

int ot_tpu_optimizer_flat_group_count(const ot_tpu_optimizer *t) {
    return t && t->flat ? t->ngroups : 0;
}

ot_status ot_tpu_optimizer_flat_view(const ot_tpu_optimizer *t, int k, ot_tpu_flat_view *out) {
    if (!t || !out)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_flat_view: NULL argument");
    if (!t->flat) return ot_error(OT_ERR_FAILED_PRECONDITION, "tpu optimizer: not in flat mode");
    if (k < 0 || k >= t->nparams)
        return ot_error(OT_ERR_OUT_OF_RANGE, "tpu optimizer: no tensor %d (%d)", k, t->nparams);
    out->group = t->pgroup[k];
    out->dtype = t->pshape[k].dtype;
    out->offset = t->poff[k];
    out->count = ot_shape_numel_unchecked(&t->pshape[k]);
    return OT_OK;
}

ot_status ot_tpu_optimizer_flat_buffers(ot_tpu_optimizer *t, ot_device *d, int g, ot_buffer **param,
                                        ot_buffer **grad) {
    if (!t || !d)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_flat_buffers: NULL argument");
    if (!t->flat) return ot_error(OT_ERR_FAILED_PRECONDITION, "tpu optimizer: not in flat mode");
    if (g < 0 || g >= t->ngroups)
        return ot_error(OT_ERR_OUT_OF_RANGE, "tpu optimizer: no flat group %d (%d)", g, t->ngroups);
    replica *r = find_replica(t, d);
    if (!r)
        return ot_error(OT_ERR_NOT_FOUND, "tpu optimizer: device %d has no replica",
                        ot_device_index(d));
    if (param) *param = r->fparam[g];
    if (grad) *grad = r->fgrad[g];
    return OT_OK;
}

/* Tensor k's segment of device d's flat parameter (which 0) or gradient (1) buffer. */
static ot_status flat_segment(ot_tpu_optimizer *t, ot_device *d, int k, int which, const char *fn,
                              ot_buffer **b, int64_t *off, int64_t *nbytes) {
    if (!t || !d) return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
    if (!t->flat)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "%s: the wrapper is not in flat mode", fn);
    if (k < 0 || k >= t->nparams)
        return ot_error(OT_ERR_OUT_OF_RANGE, "%s: no tensor %d (%d)", fn, k, t->nparams);
    replica *r = find_replica(t, d);
    if (!r)
        return ot_error(OT_ERR_NOT_FOUND, "%s: device %d has no replica", fn, ot_device_index(d));
    *b = which == 0 ? r->fparam[t->pgroup[k]] : r->fgrad[t->pgroup[k]];
    size_t es = ot_dtype_size(t->pshape[k].dtype);
    *off = t->poff[k] * (int64_t)es;
    *nbytes = (int64_t)ot_shape_nbytes_unchecked(&t->pshape[k]);
    return OT_OK;
}

static ot_status flat_write(ot_tpu_optimizer *t, ot_device *d, int k, int which,
                            const ot_tensor *in, const char *fn) {
    ot_buffer *b = NULL;
    int64_t off = 0, nb = 0;
    OT_CHECK(flat_segment(t, d, k, which, fn, &b, &off, &nb));
    if (!in) return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: NULL tensor", fn);
    if (!ot_shape_equal(&in->shape, &t->pshape[k])) {
        char w[96], g[96];
        ot_shape_format(&t->pshape[k], w, sizeof w);
        ot_shape_format(&in->shape, g, sizeof g);
        return ot_error(OT_ERR_SHAPE_MISMATCH, "%s: tensor %d is %s, got %s", fn, k, w, g);
    }
    return ot_buffer_write_bytes(b, off, in->data, nb);
}

ot_status ot_tpu_optimizer_write_grad(ot_tpu_optimizer *t, ot_device *d, int k,
                                      const ot_tensor *in) {
    return flat_write(t, d, k, 1, in, "ot_tpu_optimizer_write_grad");
}

ot_status ot_tpu_optimizer_write_param(ot_tpu_optimizer *t, ot_device *d, int k,
                                       const ot_tensor *in) {
    return flat_write(t, d, k, 0, in, "ot_tpu_optimizer_write_param");
}

ot_status ot_tpu_optimizer_read_param(ot_tpu_optimizer *t, ot_device *d, int k, ot_tensor *out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_read_param: NULL out");
    memset(out, 0, sizeof *out);
    ot_buffer *b = NULL;
    int64_t off = 0, nb = 0;
    OT_CHECK(flat_segment(t, d, k, 0, "ot_tpu_optimizer_read_param", &b, &off, &nb));
    OT_CHECK(ot_tensor_alloc(out, &t->pshape[k]));
    ot_status s = ot_buffer_read_bytes(b, off, out->data, nb);
    if (s != OT_OK) ot_tensor_release(out);
    return s;
}

static void record_step(ot_tpu_optimizer *t, ot_status s, double dt) {
    pthread_mutex_lock(&t->mu);
    ot_tpu_profile *p = &t->prof;
    if (s != OT_OK) {
        p->failed_steps++;
    } else {
        p->last_step_seconds = dt;
        p->min_step_seconds = p->steps == 0 ? dt : fmin(p->min_step_seconds, dt);
        p->max_step_seconds = fmax(p->max_step_seconds, dt);
        p->total_step_seconds += dt;
        p->steps++;
    }
    pthread_mutex_unlock(&t->mu);
}

ot_status ot_tpu_optimizer_as_optimizer(const ot_tpu_optimizer *t, ot_optimizer **out) {
    if (!out)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_as_optimizer: out is NULL");
    *out = NULL;
    if (!t) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_as_optimizer: NULL wrapper");
    return ot_optim_new_view(t->base, out);
}

ot_status ot_tpu_optimizer_profile(const ot_tpu_optimizer *t, ot_tpu_profile *out) {
    if (!t || !out)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_profile: NULL argument");
    pthread_mutex_lock((pthread_mutex_t *)&t->mu);
    *out = t->prof;
    pthread_mutex_unlock((pthread_mutex_t *)&t->mu);
    return OT_OK;
}

/* ---- state import / export ------------------------------------------------------------------- */

ot_status ot_tpu_optimizer_get_state(ot_tpu_optimizer *t, ot_device *d, int i, ot_tensor *out) {
    if (!t || !d || !out)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_get_state: NULL argument");
    if (i < 0 || i >= t->nstate)
        return ot_error(OT_ERR_OUT_OF_RANGE, "tpu optimizer: no state tensor %d (%d)", i,
                        t->nstate);
    replica *r = find_replica(t, d);
    if (!r)
        return ot_error(OT_ERR_NOT_FOUND, "tpu optimizer: device %d has no replica",
                        ot_device_index(d));
    return ot_buffer_to_host(r->state[i], out);
}

ot_status ot_tpu_optimizer_set_state(ot_tpu_optimizer *t, ot_device *d, int i,
                                     const ot_tensor *in) {
    if (!t || !d || !in)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_set_state: NULL argument");
    if (i < 0 || i >= t->nstate)
        return ot_error(OT_ERR_OUT_OF_RANGE, "tpu optimizer: no state tensor %d (%d)", i,
                        t->nstate);
    replica *r = find_replica(t, d);
    if (!r)
        return ot_error(OT_ERR_NOT_FOUND, "tpu optimizer: device %d has no replica",
                        ot_device_index(d));
    if (!ot_shape_equal(&in->shape, &t->sshape[i])) {
        char w[96], g[96];
        ot_shape_format(&t->sshape[i], w, sizeof w);
        ot_shape_format(&in->shape, g, sizeof g);
        return ot_error(OT_ERR_SHAPE_MISMATCH, "tpu optimizer: state '%s' is %s, got %s",
                        t->sname[i], w, g);
    }
    ot_buffer *b = NULL;
    OT_CHECK(ot_buffer_from_host(d, in, &b));
    ot_buffer_free(r->state[i]);
    r->state[i] = b;
    for (int k = 0; k < t->nparams; k++)
        if (t->master[k] && i == t->soff[k] + t->slots[k]) r->master_ready[k] = true;
    for (int g = 0; g < t->ngroups; g++)
        if (t->umaster[g] && i == t->usoff[g] + t->uslots[g]) r->master_ready[g] = true;
    return OT_OK;
}

ot_status ot_tpu_optimizer_loss_scale(ot_tpu_optimizer *t, ot_device *d, double *scale,
                                      bool *last_skipped) {
    if (!t || !d || !scale)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_loss_scale: NULL argument");
    replica *r = find_replica(t, d);
    if (!r)
        return ot_error(OT_ERR_NOT_FOUND, "tpu optimizer: device %d has no replica",
                        ot_device_index(d));
    *scale = r->scale;
    if (last_skipped) *last_skipped = r->skipped;
    return OT_OK;
}

/* ---- sharded mode (tpu_optim.h) -------------------------------------------------------------- */

/* ---- the pod's sums of squares (clipping by global norm, trust ratios) ----
 *
 * The unsharded update reduces each tensor's squares in the canonical summation order
 * (docs/exec.md, "Reductions"; EX_RED_LANES, EX_RED_BLOCK): the gradients' in f64 for the global
 * norm (the tensors' sums then added in parameter order), lamb's and lars's parameter and update
 * in f32 for their trust ratios. A tensor's sum folds, from 0, a sequence of items: for each
 * block of EX_RED_BLOCK elements from the tensor's start, the pairwise tree of its lanes over the
 * block's whole groups; then the elements past the last whole group one by one. Sharded, the
 * item's owner is the member holding its first element: it computes the item's value (a tree
 * whose block runs into later members reads their first shard_edge elements, all-gathered), the
 * values are all-gathered and every member folds them in the unsharded order — the same sums,
 * bit for bit, on every member. f32 arithmetic is done in f64 and rounded once (exact for a
 * product; for a sum f64's 53 bits are more than 2 * 24 + 2, so the double rounding is
 * innocuous), with the executor's flush of subnormal inputs and results (docs/exec.md,
 * "Denormals"). */
typedef struct sq_item {
    int64_t a, b; /* elements [a, b) of the tensor */
} sq_item;

/* The item after position *pos of a tensor of n elements (*pos starts at 0); false at the end. */
static bool sq_next(int64_t n, int64_t *pos, sq_item *it) {
    int64_t r = *pos;
    if (r >= n) return false;
    it->a = r;
    it->b = r + 1;
    if (r % EX_RED_BLOCK == 0 && r + EX_RED_LANES <= n) {
        int64_t re = r + EX_RED_BLOCK < n ? r + EX_RED_BLOCK : n;
        it->b = r + (re - r) / EX_RED_LANES * EX_RED_LANES;
    }
    *pos = it->b;
    return true;
}

/* The items each member owns (the most of any member: shard_items) and the elements of a
 * member's block that an earlier member's item reads (shard_edge). */
static ot_status shard_norm_plan(ot_tpu_optimizer *t) {
    int64_t len = t->shard_len;
    int64_t *cnt = ot_calloc((size_t)t->shard_n, sizeof *cnt);
    if (!cnt) return ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer: shard layout");
    t->shard_edge = t->shard_items = 0;
    for (int k = 0; k < t->shard_nparams; k++) {
        int64_t pos = 0, base = t->shard_poff[k];
        sq_item it;
        while (sq_next(t->shard_psize[k], &pos, &it)) {
            int64_t own = (base + it.a) / len, past = base + it.b - (own + 1) * len;
            cnt[own]++;
            if (past > len) past = len;
            if (past > t->shard_edge) t->shard_edge = past;
        }
    }
    for (int m = 0; m < t->shard_n; m++)
        if (cnt[m] > t->shard_items) t->shard_items = cnt[m];
    ot_free(cnt);
    return OT_OK;
}

/* f32 as the executor computes it: a subnormal input read as zero, then the operation in f64
 * rounded once with a subnormal result flushed. */
static float sq_daz(float x) {
    return fabsf(x) < FLT_MIN ? 0.0f * x : x;
}
static float sq_mul32(float a, float b) {
    return ex_tiny_f((double)sq_daz(a) * (double)sq_daz(b));
}
static float sq_add32(float a, float b) {
    return ex_tiny_f((double)sq_daz(a) + (double)sq_daz(b));
}

/* A vector whose squares the pod sums: this member's block (mine; its first element is flat
 * element lo), and the first shard_edge elements of every member's block (member q's at
 * edge + q * estride, all-gathered). inv: 1/scale (gradients with loss scaling) or 0; clip:
 * clip_grad_value as f32, or 0; wide: summed in f64 (the global norm) or f32 (trust ratios). */
typedef struct sq_src {
    const ot_tpu_optimizer *t;
    int64_t lo;
    const float *mine, *edge;
    int64_t estride;
    float inv, clip;
    bool wide;
} sq_src;

/* Flat element i as the update sees it: unscaled (f32 multiply) and clamped. */
static float sq_at(const sq_src *q, int64_t i) {
    int64_t len = q->t->shard_len, j = i - q->lo;
    float x = sq_daz(j < len ? q->mine[j] : q->edge[(i / len) * q->estride + i % len]);
    if (q->inv != 0) x = sq_mul32(x, q->inv);
    if (q->clip > 0) x = x < -q->clip ? -q->clip : x > q->clip ? q->clip : x;
    return x;
}

/* Element i's square (f64: exact) and the reducer's add. */
static double sq_of(const sq_src *q, int64_t i) {
    float x = sq_at(q, i);
    return q->wide ? (double)x * (double)x : (double)sq_mul32(x, x);
}
static double sq_plus(const sq_src *q, double a, double b) {
    return q->wide ? a + b : (double)sq_add32((float)a, (float)b);
}

/* A tree of lanes over n contiguous elements of this member's block read as they are (no
 * unscaling, no clamping): sq_value's operations without its per-element dispatch, so the lanes'
 * loop vectorizes. f32 (trust ratios) and f64 (the global norm). */
static double sq_tree32(const float *x, int64_t n) {
    float lane[EX_RED_LANES];
    for (int l = 0; l < EX_RED_LANES; l++) {
        float v = sq_daz(x[l]);
        lane[l] = sq_mul32(v, v);
    }
    for (int64_t r = EX_RED_LANES; r < n; r += EX_RED_LANES)
        for (int l = 0; l < EX_RED_LANES; l++) {
            float v = sq_daz(x[r + l]);
            lane[l] = sq_add32(lane[l], sq_mul32(v, v));
        }
    for (int w = EX_RED_LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) lane[l] = sq_add32(lane[l], lane[l + w]);
    return lane[0];
}
static double sq_tree64(const float *x, int64_t n) {
    double lane[EX_RED_LANES];
    for (int l = 0; l < EX_RED_LANES; l++) {
        double v = sq_daz(x[l]);
        lane[l] = v * v;
    }
    for (int64_t r = EX_RED_LANES; r < n; r += EX_RED_LANES)
        for (int l = 0; l < EX_RED_LANES; l++) {
            double v = sq_daz(x[r + l]);
            lane[l] += v * v;
        }
    for (int w = EX_RED_LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) lane[l] += lane[l + w];
    return lane[0];
}

/* One item's value: a tree of lanes, or an element's square. */
static double sq_value(const sq_src *q, int64_t base, sq_item it) {
    if (it.b - it.a == 1) return sq_of(q, base + it.a);
    int64_t j = base + it.a - q->lo;
    if (q->inv == 0 && !(q->clip > 0) && j + (it.b - it.a) <= q->t->shard_len)
        return q->wide ? sq_tree64(q->mine + j, it.b - it.a) : sq_tree32(q->mine + j, it.b - it.a);
    double lane[EX_RED_LANES];
    for (int l = 0; l < EX_RED_LANES; l++) lane[l] = sq_of(q, base + it.a + l);
    for (int64_t r = it.a + EX_RED_LANES; r < it.b; r += EX_RED_LANES)
        for (int l = 0; l < EX_RED_LANES; l++)
            lane[l] = sq_plus(q, lane[l], sq_of(q, base + r + l));
    for (int w = EX_RED_LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) lane[l] = sq_plus(q, lane[l], lane[l + w]);
    return lane[0];
}

/* The calling thread's CPU time (the sharded update's split, shard_times). */
static int64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

/* The gather only copies, so any algorithm gives the same bits: coll's algorithm when it has an
 * all-gather, else in shared memory direct (each member copies every block once: one exchange
 * and one barrier, where the ring hands n - 1 pieces on, a rendezvous each), else the
 * communicator's choice. */
static ot_coll_options shard_gather_options(const ot_comm *comm, const ot_coll_options *coll) {
    ot_coll_options ag = coll ? *coll : ot_coll_options_default();
    if (!ot_coll_algo_supported(comm, OT_COLL_ALLGATHER, ag.algo))
        ag.algo = ot_coll_algo_supported(comm, OT_COLL_ALLGATHER, OT_ALGO_DIRECT) ? OT_ALGO_DIRECT
                                                                                  : OT_ALGO_AUTO;
    return ag;
}

/* The pod's sums of squares of nv vectors (src[v].mine: this member's blocks), tensor by
 * tensor: sums[v * shard_nparams + k], the same bits on every member and as the unsharded
 * update's reductions. flag: this member's part of a pod-wide OR, *any its result (NULL: none).
 * *comm_ns gets the CPU time of its all-gathers added. A collective: every member calls it in
 * the same order. */
static ot_status shard_sums(ot_tpu_optimizer *t, ot_comm *comm, sq_src *src, int nv, double *sums,
                            bool flag, bool *any, int64_t *comm_ns) {
    int n = t->shard_n, np = t->shard_nparams, me = ot_comm_rank(comm);
    int64_t len = t->shard_len, E = nv ? t->shard_edge : 0, I = t->shard_items, C = nv * I + 1;
    float *send = E ? ot_malloc((size_t)(nv * E) * sizeof *send) : NULL;
    float *edge = E ? ot_malloc((size_t)(n * nv * E) * sizeof *edge) : NULL;
    double *mine = ot_calloc((size_t)C, sizeof *mine);
    double *all = ot_malloc((size_t)(n * C) * sizeof *all);
    int64_t *at = ot_calloc((size_t)n, sizeof *at); /* the fold: each owner's next item */
    ot_status s = OT_OK;
    if (!mine || !all || !at || (E && (!send || !edge))) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer: the pod's sums of squares");
        goto done;
    }
    ot_coll_options ag = shard_gather_options(comm, NULL);
    for (int v = 0; v < nv && E; v++) memcpy(send + v * E, src[v].mine, (size_t)E * sizeof *send);
    int64_t c0 = thread_cpu_ns();
    if (E) s = ot_comm_allgather(comm, send, edge, (size_t)(nv * E), OT_F32, &ag);
    *comm_ns += thread_cpu_ns() - c0;
    for (int v = 0; s == OT_OK && v < nv; v++) {
        src[v].t = t;
        src[v].lo = me * len;
        src[v].edge = edge ? edge + v * E : NULL;
        src[v].estride = nv * E;
        int64_t c = 0;
        for (int k = 0; k < np; k++) {
            int64_t pos = 0, base = t->shard_poff[k];
            sq_item it;
            while (sq_next(t->shard_psize[k], &pos, &it))
                if ((base + it.a) / len == me) mine[v * I + c++] = sq_value(&src[v], base, it);
        }
    }
    mine[C - 1] = flag;
    c0 = thread_cpu_ns();
    if (s == OT_OK) s = ot_comm_allgather(comm, mine, all, (size_t)C, OT_F64, &ag);
    *comm_ns += thread_cpu_ns() - c0;
    if (s != OT_OK) goto done;
    /* every member folds the items in the unsharded order: tensor by tensor, each tensor's
     * items from 0, owner by owner in the order each owner listed them */
    for (int v = 0; v < nv; v++) {
        memset(at, 0, (size_t)n * sizeof *at);
        for (int k = 0; k < np; k++) {
            int64_t pos = 0, base = t->shard_poff[k];
            double acc = 0;
            sq_item it;
            while (sq_next(t->shard_psize[k], &pos, &it)) {
                int64_t own = (base + it.a) / len;
                acc = sq_plus(&src[v], acc, all[own * C + v * I + at[own]++]);
            }
            sums[v * np + k] = acc;
        }
    }
    if (any) {
        *any = false;
        for (int m = 0; m < n; m++) *any |= all[m * C + C - 1] != 0;
    }
done:
    ot_free(send);
    ot_free(edge);
    ot_free(mine);
    ot_free(all);
    ot_free(at);
    return s;
}

/* The pod's reductions for replica r's next update (shard_ext): the sum of squares of every
 * parameter's gradient (clip_grad_norm) and found_inf (loss scaling), from this member's block
 * of the reduced gradients. A collective. */
static ot_status shard_reductions(ot_tpu_optimizer *t, replica *r, ot_comm *comm,
                                  const float *reduced) {
    int np = t->shard_nparams;
    int64_t len = t->shard_len, lo = ot_comm_rank(comm) * len;
    bool clip = t->opts.clip_grad_norm > 0;
    sq_src q = {.mine = reduced, .wide = true};
    if (t->opts.loss_scaling) q.inv = (float)(1.0 / r->scale); /* as exec_module */
    if (t->opts.clip_grad_value > 0) q.clip = (float)t->opts.clip_grad_value;
    /* found_inf over this member's elements of the parameters (not the head, not padding) */
    bool found = false;
    for (int k = 0; q.inv != 0 && k < np && !found; k++) {
        int64_t base = t->shard_poff[k], end = base + t->shard_psize[k];
        int64_t a = base > lo ? base : lo, b = end < lo + len ? end : lo + len;
        for (int64_t i = a; i < b && !found; i++)
            found = !isfinite(sq_mul32(reduced[i - lo], q.inv));
    }
    double *sums = ot_calloc((size_t)np, sizeof *sums);
    if (!sums) return ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer: the pod's sum of squares");
    bool any = false;
    ot_status s = shard_sums(t, comm, &q, clip ? 1 : 0, sums, found, &any, &r->shard_comm_ns);
    double ss = 0;
    for (int k = 0; k < np; k++) ss = k ? ss + sums[k] : sums[k];
    if (s == OT_OK) {
        r->shard_ss = ss;
        r->shard_ss_set = clip;
        r->shard_found = any;
    }
    ot_free(sums);
    return s;
}

/* Sharded lamb/lars: the update before its trust ratio (exe_u) on this member's block, then the
 * pod's sums of squares of the parameters and of that update per tensor, handed to the update
 * as every element's tensor's sums (r->shard_p2, shard_u2; 0 on the head and the padding). On a
 * device whose memory is the host's the sums read exe_u's output and are written into the
 * update's inputs in place; elsewhere through the host scratch (copies: shard_copy_ns).
 * A collective. */
static ot_status shard_trust_sums(ot_tpu_optimizer *t, replica *r, ot_device *d, ot_comm *comm,
                                  const float *mine, int64_t step, double lr,
                                  const ot_run_options *ro) {
    int np = t->shard_nparams;
    int64_t len = t->shard_len, lo = ot_comm_rank(comm) * len;
    int64_t bytes = len * (int64_t)sizeof(float);
    ot_status s = OT_OK;
    if (!r->shard_p2) s = ot_buffer_alloc(d, &t->pshape[0], &r->shard_p2);
    if (s == OT_OK && !r->shard_u2) s = ot_buffer_alloc(d, &t->pshape[0], &r->shard_u2);
    if (s != OT_OK) return s;
    float *p2 = ot_buffer_host_data_mut(r->shard_p2), *u2 = ot_buffer_host_data_mut(r->shard_u2);
    ot_buffer *ub = NULL;
    s = exec_module(t, r, d, 1, &r->shard_p, &r->shard_g, step, lr, ro, &ub);
    const float *u = s == OT_OK ? ot_buffer_host_data(ub) : NULL;
    bool host = p2 && u2 && u;
    if (s == OT_OK && !host && !r->shard_sq &&
        !(r->shard_sq = ot_malloc((size_t)(3 * len) * sizeof(float))))
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer: trust ratio scratch");
    if (s == OT_OK && !host) {
        int64_t c0 = thread_cpu_ns();
        s = ot_buffer_read_bytes(ub, 0, r->shard_sq, bytes);
        r->shard_copy_ns += thread_cpu_ns() - c0;
        u = r->shard_sq;
    }
    if (!host && r->shard_sq) {
        p2 = r->shard_sq + len;
        u2 = p2 + len;
    }
    double *sums = ot_calloc((size_t)(2 * np), sizeof *sums);
    if (s == OT_OK && !sums) s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer: trust ratios");
    sq_src q[2] = {{.mine = mine}, {.mine = u}};
    if (s == OT_OK) s = shard_sums(t, comm, q, 2, sums, false, NULL, &r->shard_comm_ns);
    ot_buffer_free(ub);
    if (s == OT_OK) { /* the tensors lie back to back: zeros before the first and after the last */
        int64_t pos = lo;
        for (int k = 0; k < np; k++) {
            int64_t base = t->shard_poff[k], end = base + t->shard_psize[k];
            int64_t a = base > lo ? base : lo, b = end < lo + len ? end : lo + len;
            if (a >= b) continue;
            for (int64_t i = pos; i < a; i++) p2[i - lo] = u2[i - lo] = 0;
            float ps = (float)sums[k], us = (float)sums[np + k];
            for (int64_t i = a; i < b; i++) {
                p2[i - lo] = ps;
                u2[i - lo] = us;
            }
            pos = b;
        }
        for (int64_t i = pos; i < lo + len; i++) p2[i - lo] = u2[i - lo] = 0;
    }
    if (s == OT_OK && !host) {
        int64_t c0 = thread_cpu_ns();
        s = ot_buffer_write_bytes(r->shard_p2, 0, p2, bytes);
        if (s == OT_OK) s = ot_buffer_write_bytes(r->shard_u2, 0, u2, bytes);
        r->shard_copy_ns += thread_cpu_ns() - c0;
    }
    ot_free(sums);
    return s;
}

/* The layout and the refusals, then the wrapper of one f32[block_len] tensor. */
static ot_status shard_create(const ot_optimizer *o, const ot_shape *ps, int nparams,
                              const ot_tpu_optimizer_options *op, ot_tpu_optimizer **out) {
    int n = op->shard_devices;
    bool int8 = op->state_format == OT_TPU_STATE_INT8;
    const char *why =
        int8 && !ot_optimizer_is_host(o) && !ot_optim_state8_supported(o)
            ? "int8 state with this optimizer (the fused int8 kernel's: adam, adamw without "
              "amsgrad, lion, sgd with momentum; bf16 state shards with any)"
        : op->state_format == OT_TPU_STATE_BF16 && op->state_stochastic_rounding
            ? "stochastic rounding (its random bits are drawn per tensor and element; a device's "
              "block would draw other bits than the unsharded update)"
        : op->param_optimizers || op->lr_scale || op->weight_decay_mask || op->trust_ratio_mask
            ? "parameter groups or masks"
        : op->flat                ? "flat mode"
        : ot_optimizer_is_host(o) ? "a host callback optimizer"
                                  : NULL;
    if (why)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "ot_tpu_optimizer_create: the sharded update (shard_devices %d) does not "
                        "take %s",
                        n, why);
    for (int k = 0; k < nparams; k++) {
        if (ps[k].dtype != OT_F32)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "ot_tpu_optimizer_create: the sharded update takes f32 parameters; "
                            "parameter %d is %s",
                            k, ot_dtype_name(ps[k].dtype));
    }
    /* elementwise; or elementwise once its trust ratio's norms are given (lamb, lars) */
    bool trust = flat_check_elementwise(o, OT_F32, false, false) != OT_OK;
    if (trust && flat_check_elementwise(o, OT_F32, false, true) != OT_OK)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "ot_tpu_optimizer_create: the sharded update needs an elementwise "
                        "optimizer (or one coupling elements by a trust ratio only, as lamb and "
                        "lars): '%s' couples elements across a tensor otherwise (factored "
                        "moments), so a block of the flat parameters cannot update alone",
                        ot_optimizer_name(o));
    ot_clear_error();
    /* int8: the head and every tensor start on a quantization block and the devices' blocks are
     * whole quantization blocks, so each quantization block is one tensor's, as unsharded */
    int64_t al = int8 ? OT_TPU_INT8_BLOCK : 1, blk = int8 ? OT_TPU_INT8_BLOCK : 16;
    int64_t *poff = ot_calloc((size_t)nparams, sizeof *poff);
    int64_t *psize = ot_calloc((size_t)nparams, sizeof *psize);
    if (!poff || !psize) {
        ot_free(poff);
        ot_free(psize);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer: shard layout");
    }
    int64_t end = (op->shard_head + al - 1) / al * al;
    for (int64_t k = 0; k < nparams; k++) {
        poff[k] = end;
        end = (end + (psize[k] = ot_shape_numel_unchecked(&ps[k])) + al - 1) / al * al;
    }
    int64_t len = ((end + n - 1) / n + blk - 1) / blk * blk;
    ot_tpu_optimizer_options in = *op;
    in.shard_devices = 0;
    in.shard_head = 0;
    in.state_int8_min_size = 1; /* the block's codes whatever its length */
    ot_shape bs;
    ot_status s = ot_shape_make(&bs, OT_F32, 1, &len);
    if (s == OT_OK)
        s = create_impl(o, &bs, 1, &in, op->clip_grad_norm > 0 || op->loss_scaling, trust, out);
    if (s != OT_OK) {
        ot_free(poff);
        ot_free(psize);
        return s;
    }
    ot_tpu_optimizer *t = *out;
    t->opts.shard_devices = n;
    t->opts.shard_head = op->shard_head;
    t->shard_n = n;
    t->shard_nparams = nparams;
    t->shard_len = len;
    t->shard_poff = poff;
    t->shard_psize = psize;
    if (t->shard_ext || t->shard_trust) s = shard_norm_plan(t);
    if (s != OT_OK) {
        ot_tpu_optimizer_free(t);
        *out = NULL;
    }
    return s;
}

ot_status ot_tpu_optimizer_shard_layout(const ot_tpu_optimizer *t, int *devices, int64_t *block_len,
                                        int64_t *param_offset) {
    if (!t) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_shard_layout: NULL");
    if (!t->shard_n)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "ot_tpu_optimizer_shard_layout: not in sharded mode (shard_devices)");
    if (devices) *devices = t->shard_n;
    if (block_len) *block_len = t->shard_len;
    if (param_offset)
        memcpy(param_offset, t->shard_poff, (size_t)t->shard_nparams * sizeof *param_offset);
    return OT_OK;
}

/* Sharded mode and a communicator of shard_devices members. */
static ot_status shard_check(const ot_tpu_optimizer *t, const ot_comm *comm, const char *fn) {
    if (!t || !comm) return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
    if (!t->shard_n)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "%s: not in sharded mode (shard_devices)", fn);
    if (ot_comm_size(comm) != t->shard_n)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "%s: the communicator has %d members; the update is sharded over %d", fn,
                        ot_comm_size(comm), t->shard_n);
    return OT_OK;
}

ot_status ot_tpu_optimizer_shard_reduce(ot_tpu_optimizer *t, ot_comm *comm,
                                        const ot_coll_options *coll, const float *grads,
                                        float *reduced) {
    OT_CHECK(shard_check(t, comm, "ot_tpu_optimizer_shard_reduce"));
    if (!grads || !reduced)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_shard_reduce: NULL buffer");
    return ot_comm_reduce_scatter(comm, grads, reduced, (size_t)t->shard_len, OT_F32, OT_REDOP_SUM,
                                  coll);
}

/* The device's blocks, allocated on the first update (zero: the padding stays zero). */
static ot_status shard_alloc(ot_tpu_optimizer *t, replica *r, ot_device *d) {
    ot_status s = OT_OK;
    int64_t bytes = t->shard_len * (int64_t)sizeof(float);
    for (int i = 0; i < 2 && s == OT_OK; i++) {
        ot_buffer **b = i ? &r->shard_g : &r->shard_p;
        if (*b) continue;
        s = ot_buffer_alloc(d, &t->pshape[0], b);
        float *z = s == OT_OK ? ot_calloc((size_t)t->shard_len, sizeof *z) : NULL;
        if (s == OT_OK && !z) s = ot_error(OT_ERR_OUT_OF_MEMORY, "tpu optimizer: shard blocks");
        if (s == OT_OK) s = ot_buffer_write_bytes(*b, 0, z, bytes);
        ot_free(z);
    }
    return s;
}

/* The update of replica r's blocks on the device, whose values reduced and mine hold in host
 * memory (the pod's reductions are computed from them): the pod's sums, then the step, which
 * donates the parameter block (its memory moves to the new handle). */
static ot_status shard_update_impl(ot_tpu_optimizer *t, replica *r, ot_device *d, ot_comm *comm,
                                   const float *reduced, const float *mine, int64_t step, double lr,
                                   const ot_run_options *ro) {
    ot_status s = OT_OK;
    if (t->shard_ext) s = shard_reductions(t, r, comm, reduced);
    if (s == OT_OK && t->shard_trust) s = shard_trust_sums(t, r, d, comm, mine, step, lr, ro);
    if (s == OT_OK) s = ot_tpu_optimizer_step(t, d, &r->shard_p, &r->shard_g, step, lr, ro);
    return s;
}

/* shard_update's checks: sharded mode, the communicator, the arguments, a replica on d. */
static ot_status shard_replica(ot_tpu_optimizer *t, ot_device *d, ot_comm *comm, bool ok,
                               const char *fn, replica **out) {
    OT_CHECK(shard_check(t, comm, fn));
    if (!d || !ok) return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
    *out = find_replica(t, d);
    if (!*out)
        return ot_error(OT_ERR_NOT_FOUND, "%s: device %d has no replica (add_replica)", fn,
                        ot_device_index(d));
    return OT_OK;
}

/* Host vectors: each step writes the device's blocks from them and reads the parameter block
 * back, so the host parameters are always what is updated. */
ot_status ot_tpu_optimizer_shard_update(ot_tpu_optimizer *t, ot_device *d, ot_comm *comm,
                                        const float *reduced, float *params, int64_t step,
                                        double lr, const ot_run_options *ro) {
    replica *r = NULL;
    OT_CHECK(shard_replica(t, d, comm, reduced && params, "ot_tpu_optimizer_shard_update", &r));
    int64_t bytes = t->shard_len * (int64_t)sizeof(float);
    float *mine = params + (size_t)ot_comm_rank(comm) * (size_t)t->shard_len;
    r->shard_copy_ns = r->shard_comm_ns = 0;
    ot_status s = shard_alloc(t, r, d);
    int64_t c0 = thread_cpu_ns();
    if (s == OT_OK) s = ot_buffer_write_bytes(r->shard_p, 0, mine, bytes);
    if (s == OT_OK) s = ot_buffer_write_bytes(r->shard_g, 0, reduced, bytes);
    r->shard_copy_ns += thread_cpu_ns() - c0;
    if (s == OT_OK) s = shard_update_impl(t, r, d, comm, reduced, mine, step, lr, ro);
    c0 = thread_cpu_ns();
    if (s == OT_OK) s = ot_buffer_read_bytes(r->shard_p, 0, mine, bytes);
    r->shard_copy_ns += thread_cpu_ns() - c0;
    return s;
}

ot_status ot_tpu_optimizer_shard_blocks(ot_tpu_optimizer *t, ot_device *d, float **param,
                                        float **grad) {
    if (!t || !d) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_shard_blocks: NULL");
    if (!t->shard_n)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "ot_tpu_optimizer_shard_blocks: not in sharded mode (shard_devices)");
    if (!t->opts.donate)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "ot_tpu_optimizer_shard_blocks: donation is off, so every update would "
                        "write the parameter block to new memory");
    replica *r = find_replica(t, d);
    if (!r)
        return ot_error(OT_ERR_NOT_FOUND,
                        "ot_tpu_optimizer_shard_blocks: device %d has no replica (add_replica)",
                        ot_device_index(d));
    if (!r->shard_pdata) {
        OT_CHECK(shard_alloc(t, r, d));
        float *p = ot_buffer_host_data_mut(r->shard_p), *g = ot_buffer_host_data_mut(r->shard_g);
        if (!p || !g)
            return ot_error(OT_ERR_FAILED_PRECONDITION,
                            "ot_tpu_optimizer_shard_blocks: device %d (%s) keeps its memory "
                            "apart from the host's: use shard_update's host vectors",
                            ot_device_index(d), ot_device_kind(d));
        r->shard_pdata = p;
        r->shard_gdata = g;
    }
    if (param) *param = r->shard_pdata;
    if (grad) *grad = r->shard_gdata;
    return OT_OK;
}

ot_status ot_tpu_optimizer_shard_param_view(ot_tpu_optimizer *t, ot_device *d, float *mem) {
    OT_CHECK(ot_tpu_optimizer_shard_blocks(t, d, NULL, NULL));
    replica *r = find_replica(t, d);
    ot_buffer *v = NULL;
    if (!mem) { /* its own memory again, with the values */
        OT_CHECK(ot_buffer_alloc(d, &t->pshape[0], &v));
        ot_status s = ot_buffer_copy(v, r->shard_p);
        if (s != OT_OK) {
            ot_buffer_free(v);
            return s;
        }
        ot_buffer_free(r->shard_p);
        r->shard_p = v;
        r->shard_pdata = ot_buffer_host_data_mut(v);
        return OT_OK;
    }
    OT_CHECK(ot_buffer_view_host(d, &t->pshape[0], mem, &v));
    ot_buffer_free(r->shard_p);
    r->shard_p = v;
    r->shard_pdata = mem;
    return OT_OK;
}

ot_status ot_tpu_optimizer_shard_update_blocks(ot_tpu_optimizer *t, ot_device *d, ot_comm *comm,
                                               int64_t step, double lr, const ot_run_options *ro) {
    replica *r = NULL;
    OT_CHECK(shard_replica(t, d, comm, true, "ot_tpu_optimizer_shard_update_blocks", &r));
    if (!r->shard_pdata)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "ot_tpu_optimizer_shard_update_blocks: device %d's blocks were not "
                        "handed out (ot_tpu_optimizer_shard_blocks)",
                        ot_device_index(d));
    r->shard_copy_ns = r->shard_comm_ns = 0;
    ot_status s = shard_update_impl(t, r, d, comm, r->shard_gdata, r->shard_pdata, step, lr, ro);
    /* donated: the parameter block's memory moved to the new handle (device.c) */
    if (s == OT_OK && ot_buffer_host_data_mut(r->shard_p) != r->shard_pdata)
        s = ot_error(OT_ERR_INTERNAL, "tpu optimizer: the resident parameter block moved");
    return s;
}

ot_status ot_tpu_optimizer_shard_times(ot_tpu_optimizer *t, const ot_device *d, int64_t *copy_ns,
                                       int64_t *comm_ns) {
    if (!t || !d || !copy_ns || !comm_ns)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_shard_times: NULL argument");
    replica *r = find_replica(t, d);
    if (!r)
        return ot_error(OT_ERR_NOT_FOUND, "ot_tpu_optimizer_shard_times: device %d has no replica",
                        ot_device_index(d));
    *copy_ns = r->shard_copy_ns;
    *comm_ns = r->shard_comm_ns;
    return OT_OK;
}

ot_status ot_tpu_optimizer_shard_grad_norm(ot_tpu_optimizer *t, ot_device *d, double *norm,
                                           double *sum_sq) {
    if (!t || !d || !norm)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_shard_grad_norm: NULL argument");
    if (!t->shard_n || !(t->opts.clip_grad_norm > 0))
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "ot_tpu_optimizer_shard_grad_norm: not a sharded update clipping by "
                        "global norm");
    replica *r = find_replica(t, d);
    if (!r)
        return ot_error(OT_ERR_NOT_FOUND,
                        "ot_tpu_optimizer_shard_grad_norm: device %d has no "
                        "replica",
                        ot_device_index(d));
    if (!r->shard_ss_set)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "ot_tpu_optimizer_shard_grad_norm: device %d has not updated yet",
                        ot_device_index(d));
    *norm = sqrt(r->shard_ss); /* the update's sqrt of the same sum */
    if (sum_sq) *sum_sq = r->shard_ss;
    return OT_OK;
}

ot_status ot_tpu_optimizer_shard_gather(ot_tpu_optimizer *t, ot_comm *comm,
                                        const ot_coll_options *coll, float *params) {
    OT_CHECK(shard_check(t, comm, "ot_tpu_optimizer_shard_gather"));
    if (!params)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_tpu_optimizer_shard_gather: NULL buffer");
    float *mine = params + (size_t)ot_comm_rank(comm) * (size_t)t->shard_len;
    ot_coll_options ag = shard_gather_options(comm, coll);
    return ot_comm_allgather(comm, mine, params, (size_t)t->shard_len, OT_F32, &ag);
}

ot_status ot_tpu_optimizer_step_sharded(ot_tpu_optimizer *t, ot_device *d, ot_comm *comm,
                                        const ot_coll_options *coll, const float *grads,
                                        float *reduced, float *params, int64_t step, double lr,
                                        const ot_run_options *ro) {
    OT_CHECK(shard_check(t, comm, "ot_tpu_optimizer_step_sharded"));
    float *own = NULL;
    if (!reduced && !(reduced = own = ot_malloc((size_t)t->shard_len * sizeof(float))))
        return ot_error(OT_ERR_OUT_OF_MEMORY, "ot_tpu_optimizer_step_sharded: block");
    ot_status s = ot_tpu_optimizer_shard_reduce(t, comm, coll, grads, reduced);
    if (s == OT_OK) s = ot_tpu_optimizer_shard_update(t, d, comm, reduced, params, step, lr, ro);
    if (s == OT_OK) s = ot_tpu_optimizer_shard_gather(t, comm, coll, params);
    ot_free(own);
    return s;
}
