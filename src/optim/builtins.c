/* Built-in update graphs, following torch.optim's single-tensor (foreach=False) formulas in the
 * same operation order: host-side scalar expressions (bias corrections, step sizes) in f64 inside
 * the graph, rounded to the parameter dtype where torch passes them to its f32 kernels. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "optim_internal.h"

typedef struct gb {
    ot_computation *c;
    ot_shape s;
    ot_dtype t;
} gb;

static ot_instr *bin(gb *b, ot_opcode op, ot_instr *x, ot_instr *y) {
    return ot_build_binary(b->c, op, x, y);
}
static ot_instr *add(gb *b, ot_instr *x, ot_instr *y) {
    return bin(b, OT_OP_ADD, x, y);
}
static ot_instr *sub(gb *b, ot_instr *x, ot_instr *y) {
    return bin(b, OT_OP_SUBTRACT, x, y);
}
static ot_instr *mul(gb *b, ot_instr *x, ot_instr *y) {
    return bin(b, OT_OP_MULTIPLY, x, y);
}
static ot_instr *dvd(gb *b, ot_instr *x, ot_instr *y) {
    return bin(b, OT_OP_DIVIDE, x, y);
}
static ot_instr *sqr(gb *b, ot_instr *x) {
    return ot_build_unary(b->c, OT_OP_SQRT, x);
}
static ot_instr *neg(gb *b, ot_instr *x) {
    return ot_build_unary(b->c, OT_OP_NEGATE, x);
}
/* A host double rounded to the parameter dtype, broadcast to the parameter shape. */
static ot_instr *K(gb *b, double v) {
    return ot_build_broadcast(b->c, ot_build_constant_scalar(b->c, b->t, v), b->s, NULL, 0);
}
/* f64 scalar constant. */
static ot_instr *D(gb *b, double v) {
    return ot_build_constant_scalar(b->c, OT_F64, v);
}
/* An f64 scalar node rounded to the parameter dtype and broadcast. */
static ot_instr *S(gb *b, ot_instr *f64) {
    return ot_build_broadcast(b->c, ot_build_convert(b->c, f64, b->t), b->s, NULL, 0);
}
/* x + alpha * y (torch's add(..., alpha=)). */
static ot_instr *axpy(gb *b, ot_instr *x, double alpha, ot_instr *y) {
    return add(b, x, mul(b, K(b, alpha), y));
}

static gb gb_of(const ot_optim_inputs *in) {
    gb b = {in->c, in->param->shape.array, in->param->shape.array.dtype};
    return b;
}

#define HP(name) ot_optimizer_hparam(o, name)
#define ON(name) (HP(name) != 0.0)

static ot_status check_range(const ot_optimizer *o, const char *name, double lo, double hi) {
    double v = HP(name);
    if (!(v >= lo && v <= hi))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "optimizer '%s': %s = %g outside [%g, %g]",
                        ot_optimizer_name(o), name, v, lo, hi);
    return OT_OK;
}
static ot_status check_bool(const ot_optimizer *o, const char *name) {
    double v = HP(name);
    if (v != 0.0 && v != 1.0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "optimizer '%s': %s = %g (a flag: 0 or 1)",
                        ot_optimizer_name(o), name, v);
    return OT_OK;
}

/* maximize, then coupled L2 weight decay. */
static ot_instr *grad_in(gb *b, const ot_optimizer *o, const ot_optim_inputs *in, bool coupled) {
    ot_instr *g = in->grad;
    if (ON("maximize")) g = neg(b, g);
    if (coupled && HP("weight_decay") != 0.0) g = axpy(b, g, HP("weight_decay"), in->param);
    return g;
}

/* ---- SGD ----------------------------------------------------------------------------------- */

static const char *const sgd_names[] = {"lr",           "momentum", "dampening",
                                        "weight_decay", "nesterov", "maximize"};
static const double sgd_defaults[] = {1e-3, 0, 0, 0, 0, 0};

static ot_status sgd_validate(const ot_optimizer *o) {
    OT_CHECK(check_range(o, "lr", 0, INFINITY));
    OT_CHECK(check_range(o, "momentum", 0, INFINITY));
    OT_CHECK(check_range(o, "weight_decay", 0, INFINITY));
    OT_CHECK(check_bool(o, "nesterov"));
    OT_CHECK(check_bool(o, "maximize"));
    if (ON("nesterov") && (HP("momentum") <= 0 || HP("dampening") != 0))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "optimizer 'sgd': nesterov needs momentum > 0 and zero dampening");
    return OT_OK;
}
static int sgd_nstate(const ot_optimizer *o) {
    return HP("momentum") != 0.0 ? 1 : 0;
}
static const char *sgd_state(const ot_optimizer *o, int i) {
    (void)o;
    (void)i;
    return "momentum_buffer";
}
static ot_status sgd_build(const ot_optimizer *o, const ot_optim_inputs *in,
                           ot_optim_outputs *out) {
    gb b = gb_of(in);
    ot_instr *d = grad_in(&b, o, in, true);
    double mu = HP("momentum");
    if (mu != 0.0) {
        /* torch: the buffer is a copy of d on the first step */
        ot_instr *later = axpy(&b, mul(&b, in->state[0], K(&b, mu)), 1.0 - HP("dampening"), d);
        ot_shape ps = b.s;
        ps.dtype = OT_PRED;
        ot_instr *first = ot_build_broadcast(
            b.c, ot_build_compare(b.c, in->step, D(&b, 1.0), OT_CMP_EQ, OT_CMP_TYPE_DEFAULT), ps,
            NULL, 0);
        ot_instr *buf = ot_build_select(b.c, first, d, later);
        out->state[0] = buf;
        d = ON("nesterov") ? axpy(&b, d, mu, buf) : buf;
    }
    out->param = add(&b, in->param, mul(&b, S(&b, ot_build_unary(b.c, OT_OP_NEGATE, in->lr)), d));
    return OT_OK;
}

/* ---- Adam / AdamW (AMSGrad) ----------------------------------------------------------------- */

static const char *const adam_names[] = {"lr",      "beta1",    "beta2",    "eps",  "weight_decay",
                                         "amsgrad", "maximize", "eps_root", "optax"};
static const double adam_defaults[] = {1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
static const double adamw_defaults[] = {1e-3, 0.9, 0.999, 1e-8, 1e-2, 0, 0, 0, 0};

/* The optax flag and eps_root (eps inside the square root: optax only). */
static ot_status optax_validate(const ot_optimizer *o, bool has_eps_root) {
    OT_CHECK(check_bool(o, "optax"));
    if (!has_eps_root) return OT_OK;
    OT_CHECK(check_range(o, "eps_root", 0, INFINITY));
    if (HP("eps_root") != 0.0 && !ON("optax"))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "optimizer '%s': eps_root = %g needs optax = 1 (torch has no eps inside "
                        "the square root)",
                        ot_optimizer_name(o), HP("eps_root"));
    return OT_OK;
}
/* optax's host-free scalars: 1 - decay^t in the parameter dtype (optax computes decay**count in
 * the dtype of its moments), a rank-0 node. */
static ot_instr *C(gb *b, double v);
static ot_instr *B(gb *b, ot_instr *scalar);
static ot_instr *step_t(gb *b, const ot_optim_inputs *in) {
    return ot_build_convert(b->c, in->step, b->t);
}
static ot_instr *bias_corr(gb *b, const ot_optim_inputs *in, double decay, double extra) {
    ot_instr *t = step_t(b, in);
    if (extra != 0.0) t = add(b, t, C(b, extra));
    return sub(b, C(b, 1.0), bin(b, OT_OP_POWER, C(b, decay), t));
}
/* optax update_moment: (1 - decay) * x + decay * m */
static ot_instr *ema(gb *b, ot_instr *x, ot_instr *m, double decay) {
    return add(b, mul(b, K(b, 1.0 - decay), x), mul(b, K(b, decay), m));
}

static ot_status adam_validate(const ot_optimizer *o) {
    OT_CHECK(check_range(o, "lr", 0, INFINITY));
    OT_CHECK(check_range(o, "beta1", 0, 0.999999999999));
    OT_CHECK(check_range(o, "beta2", 0, 0.999999999999));
    OT_CHECK(check_range(o, "eps", 0, INFINITY));
    OT_CHECK(check_range(o, "weight_decay", 0, INFINITY));
    OT_CHECK(check_bool(o, "amsgrad"));
    OT_CHECK(optax_validate(o, true));
    return check_bool(o, "maximize");
}
static int adam_nstate(const ot_optimizer *o) {
    return ON("amsgrad") ? 3 : 2;
}
static const char *adam_state(const ot_optimizer *o, int i) {
    (void)o;
    static const char *const n[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    return n[i];
}
/* optax.adam / adamw / amsgrad: chain([add_decayed_weights,] scale_by_adam(b1, b2, eps, eps_root)
 * or scale_by_amsgrad, [add_decayed_weights(wd) for adamw,] scale_by_learning_rate(lr)):
 * mu = (1-b1) g + b1 mu, nu = (1-b2) g^2 + b2 nu, mu_hat = mu / (1 - b1^t), nu_hat = nu / (1 -
 * b2^t) (bias corrections in the parameter dtype), [nu_max = max(nu_max, nu_hat)], u = mu_hat /
 * (sqrt(nu_hat + eps_root) + eps), adamw: u += wd p, p += -lr u. */
static ot_status adam_optax(const ot_optimizer *o, const ot_optim_inputs *in, ot_optim_outputs *out,
                            bool decoupled) {
    gb b = gb_of(in);
    double b1 = HP("beta1"), b2 = HP("beta2"), wd = HP("weight_decay");
    ot_instr *g = grad_in(&b, o, in, !decoupled);
    ot_instr *m = ema(&b, g, in->state[0], b1);
    ot_instr *v = ema(&b, mul(&b, g, g), in->state[1], b2);
    ot_instr *mh = dvd(&b, m, B(&b, bias_corr(&b, in, b1, 0)));
    ot_instr *vh = dvd(&b, v, B(&b, bias_corr(&b, in, b2, 0)));
    if (ON("amsgrad")) {
        vh = bin(&b, OT_OP_MAXIMUM, in->state[2], vh);
        out->state[2] = vh;
    }
    ot_instr *u =
        dvd(&b, mh, add(&b, sqr(&b, add(&b, vh, K(&b, HP("eps_root")))), K(&b, HP("eps"))));
    if (decoupled && wd != 0.0) u = add(&b, u, mul(&b, K(&b, wd), in->param));
    out->param = add(&b, in->param, mul(&b, S(&b, neg(&b, in->lr)), u));
    out->state[0] = m;
    out->state[1] = v;
    return OT_OK;
}
static ot_status adam_common(const ot_optimizer *o, const ot_optim_inputs *in,
                             ot_optim_outputs *out, bool decoupled) {
    if (ON("optax")) return adam_optax(o, in, out, decoupled);
    gb b = gb_of(in);
    double b1 = HP("beta1"), b2 = HP("beta2"), wd = HP("weight_decay");
    ot_instr *g = grad_in(&b, o, in, !decoupled);
    ot_instr *p = in->param;
    if (decoupled && wd != 0.0) /* p *= 1 - lr * wd (host f64) */
        p = mul(&b, p, S(&b, sub(&b, D(&b, 1.0), mul(&b, in->lr, D(&b, wd)))));
    /* exp_avg.lerp_(g, 1 - b1); exp_avg_sq.mul_(b2).addcmul_(g, g, value=1 - b2) */
    ot_instr *m = axpy(&b, in->state[0], 1.0 - b1, sub(&b, g, in->state[0]));
    ot_instr *v =
        add(&b, mul(&b, in->state[1], K(&b, b2)), mul(&b, K(&b, 1.0 - b2), mul(&b, g, g)));
    ot_instr *bc1 = sub(&b, D(&b, 1.0), bin(&b, OT_OP_POWER, D(&b, b1), in->step));
    ot_instr *bc2 = sub(&b, D(&b, 1.0), bin(&b, OT_OP_POWER, D(&b, b2), in->step));
    ot_instr *step_size = dvd(&b, in->lr, bc1);
    ot_instr *bc2_sqrt = sqr(&b, bc2);
    ot_instr *vv = v;
    if (ON("amsgrad")) {
        vv = bin(&b, OT_OP_MAXIMUM, in->state[2], v);
        out->state[2] = vv;
    }
    ot_instr *denom = add(&b, dvd(&b, sqr(&b, vv), S(&b, bc2_sqrt)), K(&b, HP("eps")));
    out->param = add(&b, p, mul(&b, S(&b, neg(&b, step_size)), dvd(&b, m, denom)));
    out->state[0] = m;
    out->state[1] = v;
    return OT_OK;
}
static ot_status adam_build(const ot_optimizer *o, const ot_optim_inputs *in,
                            ot_optim_outputs *out) {
    return adam_common(o, in, out, false);
}
static ot_status adamw_build(const ot_optimizer *o, const ot_optim_inputs *in,
                             ot_optim_outputs *out) {
    return adam_common(o, in, out, true);
}

/* ---- RMSprop -------------------------------------------------------------------------------- */

static const char *const rms_names[] = {"lr",       "alpha",    "eps",      "weight_decay",
                                        "momentum", "centered", "maximize", "optax"};
static const double rms_defaults[] = {1e-2, 0.99, 1e-8, 0, 0, 0, 0, 0};

static ot_status rms_validate(const ot_optimizer *o) {
    OT_CHECK(check_range(o, "lr", 0, INFINITY));
    OT_CHECK(check_range(o, "alpha", 0, INFINITY));
    OT_CHECK(check_range(o, "eps", 0, INFINITY));
    OT_CHECK(check_range(o, "momentum", 0, INFINITY));
    OT_CHECK(check_range(o, "weight_decay", 0, INFINITY));
    OT_CHECK(check_bool(o, "centered"));
    OT_CHECK(optax_validate(o, false));
    return check_bool(o, "maximize");
}
/* slots: square_avg, then momentum_buffer (momentum > 0), then grad_avg (centered) */
static int rms_nstate(const ot_optimizer *o) {
    return 1 + (HP("momentum") > 0) + (ON("centered") ? 1 : 0);
}
static const char *rms_state(const ot_optimizer *o, int i) {
    if (i == 0) return "square_avg";
    if (i == 1 && HP("momentum") > 0) return "momentum_buffer";
    return "grad_avg";
}
/* optax.rmsprop(lr, decay = alpha, eps, centered, momentum): chain(scale_by_rms / scale_by_stddev
 * (eps inside the square root: u = g * rsqrt(nu [- mu^2] + eps)), scale_by_learning_rate, trace
 * (momentum, applied after the learning rate: trace = -lr u + momentum trace, p += trace)). */
static ot_status rms_optax(const ot_optimizer *o, const ot_optim_inputs *in,
                           ot_optim_outputs *out) {
    gb b = gb_of(in);
    double alpha = HP("alpha");
    bool mom = HP("momentum") > 0;
    int gi = mom ? 2 : 1;
    ot_instr *g = grad_in(&b, o, in, true);
    ot_instr *nu = ema(&b, mul(&b, g, g), in->state[0], alpha);
    out->state[0] = nu;
    ot_instr *den = nu;
    if (ON("centered")) {
        ot_instr *mu = ema(&b, g, in->state[gi], alpha);
        out->state[gi] = mu;
        den = sub(&b, nu, mul(&b, mu, mu));
    }
    ot_instr *u = mul(&b, ot_build_unary(b.c, OT_OP_RSQRT, add(&b, den, K(&b, HP("eps")))), g);
    u = mul(&b, S(&b, neg(&b, in->lr)), u);
    if (mom) {
        ot_instr *tr = add(&b, u, mul(&b, K(&b, HP("momentum")), in->state[1]));
        out->state[1] = tr;
        u = tr;
    }
    out->param = add(&b, in->param, u);
    return OT_OK;
}
static ot_status rms_build(const ot_optimizer *o, const ot_optim_inputs *in,
                           ot_optim_outputs *out) {
    if (ON("optax")) return rms_optax(o, in, out);
    gb b = gb_of(in);
    double alpha = HP("alpha");
    bool mom = HP("momentum") > 0;
    int gi = mom ? 2 : 1;
    ot_instr *g = grad_in(&b, o, in, true);
    ot_instr *sq =
        add(&b, mul(&b, in->state[0], K(&b, alpha)), mul(&b, K(&b, 1.0 - alpha), mul(&b, g, g)));
    out->state[0] = sq;
    ot_instr *avg;
    if (ON("centered")) {
        ot_instr *ga = axpy(&b, in->state[gi], 1.0 - alpha, sub(&b, g, in->state[gi]));
        out->state[gi] = ga;
        avg = sqr(&b, add(&b, sq, mul(&b, K(&b, -1.0), mul(&b, ga, ga))));
    } else {
        avg = sqr(&b, sq);
    }
    avg = add(&b, avg, K(&b, HP("eps")));
    ot_instr *neglr = S(&b, neg(&b, in->lr));
    if (mom) {
        ot_instr *buf = add(&b, mul(&b, in->state[1], K(&b, HP("momentum"))), dvd(&b, g, avg));
        out->state[1] = buf;
        out->param = add(&b, in->param, mul(&b, neglr, buf));
    } else {
        out->param = add(&b, in->param, mul(&b, neglr, dvd(&b, g, avg)));
    }
    return OT_OK;
}

/* ---- Adagrad -------------------------------------------------------------------------------- */

static const char *const adagrad_names[] = {
    "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps", "maximize", "optax"};
static const double adagrad_defaults[] = {1e-2, 0, 0, 0, 1e-10, 0, 0};

static ot_status adagrad_validate(const ot_optimizer *o) {
    OT_CHECK(check_range(o, "lr", 0, INFINITY));
    OT_CHECK(check_range(o, "lr_decay", 0, INFINITY));
    OT_CHECK(check_range(o, "weight_decay", 0, INFINITY));
    OT_CHECK(check_range(o, "initial_accumulator_value", 0, INFINITY));
    OT_CHECK(check_range(o, "eps", 0, INFINITY));
    OT_CHECK(optax_validate(o, false));
    if (ON("optax") && HP("lr_decay") != 0.0)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "optimizer 'adagrad': lr_decay = %g with optax = 1 (optax.adagrad has no "
                        "lr_decay; use a schedule)",
                        HP("lr_decay"));
    return check_bool(o, "maximize");
}
static int adagrad_nstate(const ot_optimizer *o) {
    (void)o;
    return 1;
}
static const char *adagrad_state(const ot_optimizer *o, int i) {
    (void)o;
    (void)i;
    return "sum";
}
static double adagrad_init(const ot_optimizer *o, int i) {
    (void)i;
    return HP("initial_accumulator_value");
}
static ot_status adagrad_build(const ot_optimizer *o, const ot_optim_inputs *in,
                               ot_optim_outputs *out) {
    gb b = gb_of(in);
    ot_instr *g = grad_in(&b, o, in, true);
    if (ON("optax")) { /* optax scale_by_rss: u = where(sum > 0, rsqrt(sum + eps), 0) * g */
        ot_instr *sum = add(&b, mul(&b, g, g), in->state[0]);
        ot_instr *pos = ot_build_compare(b.c, sum, K(&b, 0.0), OT_CMP_GT, OT_CMP_TYPE_DEFAULT);
        ot_instr *inv = ot_build_select(
            b.c, pos, ot_build_unary(b.c, OT_OP_RSQRT, add(&b, sum, K(&b, HP("eps")))), K(&b, 0.0));
        out->state[0] = sum;
        out->param = add(&b, in->param, mul(&b, S(&b, neg(&b, in->lr)), mul(&b, inv, g)));
        return OT_OK;
    }
    /* clr = lr / (1 + (step - 1) * lr_decay), host f64 */
    ot_instr *clr =
        dvd(&b, in->lr,
            add(&b, D(&b, 1.0), mul(&b, sub(&b, in->step, D(&b, 1.0)), D(&b, HP("lr_decay")))));
    ot_instr *sum = add(&b, in->state[0], mul(&b, g, g));
    ot_instr *std = add(&b, sqr(&b, sum), K(&b, HP("eps")));
    out->state[0] = sum;
    out->param = add(&b, in->param, mul(&b, S(&b, neg(&b, clr)), dvd(&b, g, std)));
    return OT_OK;
}

/* ---- Adadelta ------------------------------------------------------------------------------- */

static const char *const adadelta_names[] = {"lr", "rho", "eps", "weight_decay", "maximize"};
static const double adadelta_defaults[] = {1.0, 0.9, 1e-6, 0, 0};

static ot_status adadelta_validate(const ot_optimizer *o) {
    OT_CHECK(check_range(o, "lr", 0, INFINITY));
    OT_CHECK(check_range(o, "rho", 0, 1));
    OT_CHECK(check_range(o, "eps", 0, INFINITY));
    OT_CHECK(check_range(o, "weight_decay", 0, INFINITY));
    return check_bool(o, "maximize");
}
static int adadelta_nstate(const ot_optimizer *o) {
    (void)o;
    return 2;
}
static const char *adadelta_state(const ot_optimizer *o, int i) {
    (void)o;
    return i == 0 ? "square_avg" : "acc_delta";
}
static ot_status adadelta_build(const ot_optimizer *o, const ot_optim_inputs *in,
                                ot_optim_outputs *out) {
    gb b = gb_of(in);
    double rho = HP("rho");
    ot_instr *eps = K(&b, HP("eps"));
    ot_instr *g = grad_in(&b, o, in, true);
    ot_instr *sq =
        add(&b, mul(&b, in->state[0], K(&b, rho)), mul(&b, K(&b, 1.0 - rho), mul(&b, g, g)));
    ot_instr *std = sqr(&b, add(&b, sq, eps));
    ot_instr *delta = mul(&b, dvd(&b, sqr(&b, add(&b, in->state[1], eps)), std), g);
    ot_instr *acc = add(&b, mul(&b, in->state[1], K(&b, rho)),
                        mul(&b, K(&b, 1.0 - rho), mul(&b, delta, delta)));
    out->state[0] = sq;
    out->state[1] = acc;
    out->param = add(&b, in->param, mul(&b, S(&b, neg(&b, in->lr)), delta));
    return OT_OK;
}

/* ---- RAdam ---------------------------------------------------------------------------------- */

static const char *const radam_names[] = {"lr",       "beta1",        "beta2",
                                          "eps",      "weight_decay", "decoupled_weight_decay",
                                          "maximize", "eps_root",     "optax"};
static const double radam_defaults[] = {1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};

static ot_status radam_validate(const ot_optimizer *o) {
    OT_CHECK(check_range(o, "lr", 0, INFINITY));
    OT_CHECK(check_range(o, "beta1", 0, 0.999999999999));
    OT_CHECK(check_range(o, "beta2", 0, 0.999999999999));
    OT_CHECK(check_range(o, "eps", 0, INFINITY));
    OT_CHECK(check_range(o, "weight_decay", 0, INFINITY));
    OT_CHECK(check_bool(o, "decoupled_weight_decay"));
    OT_CHECK(optax_validate(o, true));
    if (ON("optax") && ON("decoupled_weight_decay"))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "optimizer '%s': decoupled_weight_decay with optax = 1 (optax has no "
                        "decoupled variant of it)",
                        ot_optimizer_name(o));
    return check_bool(o, "maximize");
}
static int two_state(const ot_optimizer *o) {
    (void)o;
    return 2;
}
/* optax.radam: scale_by_radam(b1, b2, eps, eps_root, threshold 5) then -lr; every scalar in the
 * parameter dtype (ro >= 5 selects the rectified update). */
static ot_status radam_optax(const ot_optimizer *o, const ot_optim_inputs *in,
                             ot_optim_outputs *out) {
    gb b = gb_of(in);
    double b1 = HP("beta1"), b2 = HP("beta2");
    ot_instr *g = grad_in(&b, o, in, true);
    ot_instr *m = ema(&b, g, in->state[0], b1);
    ot_instr *v = ema(&b, mul(&b, g, g), in->state[1], b2);
    double ro_inf = 2.0 / (1.0 - b2) - 1.0;
    ot_instr *t = step_t(&b, in);
    ot_instr *b2t = bin(&b, OT_OP_POWER, C(&b, b2), t);
    ot_instr *ro = sub(&b, C(&b, ro_inf),
                       dvd(&b, mul(&b, mul(&b, C(&b, 2.0), t), b2t), sub(&b, C(&b, 1.0), b2t)));
    ot_instr *mh = dvd(&b, m, B(&b, bias_corr(&b, in, b1, 0)));
    ot_instr *vh = dvd(&b, v, B(&b, bias_corr(&b, in, b2, 0)));
    ot_instr *r = sqr(
        &b,
        dvd(&b, mul(&b, mul(&b, sub(&b, ro, C(&b, 4.0)), sub(&b, ro, C(&b, 2.0))), C(&b, ro_inf)),
            mul(&b, C(&b, (ro_inf - 4.0) * (ro_inf - 2.0)), ro)));
    ot_instr *rect = dvd(&b, mul(&b, B(&b, r), mh),
                         add(&b, sqr(&b, add(&b, vh, K(&b, HP("eps_root")))), K(&b, HP("eps"))));
    ot_shape ps = b.s;
    ps.dtype = OT_PRED;
    ot_instr *use = ot_build_broadcast(
        b.c, ot_build_compare(b.c, ro, C(&b, 5.0), OT_CMP_GE, OT_CMP_TYPE_DEFAULT), ps, NULL, 0);
    ot_instr *u = ot_build_select(b.c, use, rect, mh);
    out->param = add(&b, in->param, mul(&b, S(&b, neg(&b, in->lr)), u));
    out->state[0] = m;
    out->state[1] = v;
    return OT_OK;
}
static ot_status radam_build(const ot_optimizer *o, const ot_optim_inputs *in,
                             ot_optim_outputs *out) {
    if (ON("optax")) return radam_optax(o, in, out);
    gb b = gb_of(in);
    double b1 = HP("beta1"), b2 = HP("beta2"), wd = HP("weight_decay");
    bool dec = ON("decoupled_weight_decay");
    ot_instr *g = grad_in(&b, o, in, !dec);
    ot_instr *p = in->param;
    if (dec && wd != 0.0) p = mul(&b, p, S(&b, sub(&b, D(&b, 1.0), mul(&b, in->lr, D(&b, wd)))));
    ot_instr *m = axpy(&b, in->state[0], 1.0 - b1, sub(&b, g, in->state[0]));
    ot_instr *v =
        add(&b, mul(&b, in->state[1], K(&b, b2)), mul(&b, K(&b, 1.0 - b2), mul(&b, g, g)));
    ot_instr *b1t = bin(&b, OT_OP_POWER, D(&b, b1), in->step);
    ot_instr *b2t = bin(&b, OT_OP_POWER, D(&b, b2), in->step);
    ot_instr *bc1 = sub(&b, D(&b, 1.0), b1t), *bc2 = sub(&b, D(&b, 1.0), b2t);
    double rho_inf = 2.0 / (1.0 - b2) - 1.0;
    /* rho_t = rho_inf - 2 * step * b2^step / bc2 (host f64) */
    ot_instr *rho_t =
        sub(&b, D(&b, rho_inf), dvd(&b, mul(&b, mul(&b, D(&b, 2.0), in->step), b2t), bc2));
    ot_instr *rect =
        sqr(&b, dvd(&b,
                    mul(&b, mul(&b, sub(&b, rho_t, D(&b, 4.0)), sub(&b, rho_t, D(&b, 2.0))),
                        D(&b, rho_inf)),
                    mul(&b, D(&b, (rho_inf - 4.0) * (rho_inf - 2.0)), rho_t)));
    /* bias_corrected = exp_avg / bc1; * lr */
    ot_instr *base = mul(&b, dvd(&b, m, S(&b, bc1)), S(&b, in->lr));
    /* adaptive = sqrt(bc2) / (sqrt(v) + eps), as torch's reciprocal() * scalar */
    ot_instr *rec = dvd(&b, K(&b, 1.0), add(&b, sqr(&b, v), K(&b, HP("eps"))));
    ot_instr *adaptive = mul(&b, rec, S(&b, sqr(&b, bc2)));
    ot_instr *rected = mul(&b, mul(&b, base, adaptive), S(&b, rect));
    ot_shape ps = b.s;
    ps.dtype = OT_PRED;
    ot_instr *use = ot_build_broadcast(
        b.c, ot_build_compare(b.c, rho_t, D(&b, 5.0), OT_CMP_GT, OT_CMP_TYPE_DEFAULT), ps, NULL, 0);
    out->param = sub(&b, p, ot_build_select(b.c, use, rected, base));
    out->state[0] = m;
    out->state[1] = v;
    return OT_OK;
}

/* ---- NAdam ---------------------------------------------------------------------------------- */

static const char *const nadam_names[] = {"lr",
                                          "beta1",
                                          "beta2",
                                          "eps",
                                          "weight_decay",
                                          "momentum_decay",
                                          "decoupled_weight_decay",
                                          "maximize",
                                          "eps_root",
                                          "optax"};
static const double nadam_defaults[] = {2e-3, 0.9, 0.999, 1e-8, 0, 4e-3, 0, 0, 0, 0};

static ot_status nadam_validate(const ot_optimizer *o) {
    OT_CHECK(radam_validate(o));
    return check_range(o, "momentum_decay", 0, INFINITY);
}
static int nadam_nstate(const ot_optimizer *o) {
    return ON("optax") ? 2 : 3; /* optax.nadam keeps no momentum-schedule product */
}
static const char *nadam_state(const ot_optimizer *o, int i) {
    (void)o;
    static const char *const n[] = {"exp_avg", "exp_avg_sq", "mu_product"};
    return n[i];
}
static double nadam_init(const ot_optimizer *o, int i) {
    (void)o;
    return i == 2 ? 1.0 : 0.0;
}
static bool nadam_scalar(const ot_optimizer *o, int i) {
    (void)o;
    return i == 2;
}
/* optax.nadam: scale_by_adam(nesterov=True): mu_hat = b1 * (mu / (1 - b1^(t+1))) + (1 - b1) *
 * (g / (1 - b1^t)), u = mu_hat / (sqrt(nu_hat + eps_root) + eps), p += -lr u (no momentum
 * schedule: momentum_decay is not used). */
static ot_status nadam_optax(const ot_optimizer *o, const ot_optim_inputs *in,
                             ot_optim_outputs *out) {
    gb b = gb_of(in);
    double b1 = HP("beta1"), b2 = HP("beta2");
    ot_instr *g = grad_in(&b, o, in, true);
    ot_instr *m = ema(&b, g, in->state[0], b1);
    ot_instr *v = ema(&b, mul(&b, g, g), in->state[1], b2);
    ot_instr *mh = add(&b, mul(&b, K(&b, b1), dvd(&b, m, B(&b, bias_corr(&b, in, b1, 1.0)))),
                       mul(&b, K(&b, 1.0 - b1), dvd(&b, g, B(&b, bias_corr(&b, in, b1, 0)))));
    ot_instr *vh = dvd(&b, v, B(&b, bias_corr(&b, in, b2, 0)));
    ot_instr *u =
        dvd(&b, mh, add(&b, sqr(&b, add(&b, vh, K(&b, HP("eps_root")))), K(&b, HP("eps"))));
    out->param = add(&b, in->param, mul(&b, S(&b, neg(&b, in->lr)), u));
    out->state[0] = m;
    out->state[1] = v;
    return OT_OK;
}
static ot_status nadam_build(const ot_optimizer *o, const ot_optim_inputs *in,
                             ot_optim_outputs *out) {
    if (ON("optax")) return nadam_optax(o, in, out);
    gb b = gb_of(in);
    double b1 = HP("beta1"), b2 = HP("beta2"), wd = HP("weight_decay"), md = HP("momentum_decay");
    bool dec = ON("decoupled_weight_decay");
    ot_instr *g = grad_in(&b, o, in, !dec);
    ot_instr *p = in->param;
    if (dec && wd != 0.0) p = mul(&b, p, S(&b, sub(&b, D(&b, 1.0), mul(&b, in->lr, D(&b, wd)))));
    ot_instr *bc2 = sub(&b, D(&b, 1.0), bin(&b, OT_OP_POWER, D(&b, b2), in->step));
    /* mu = b1 * (1 - 0.5 * 0.96^(step * md)), mu_next with step + 1 (host f64) */
    ot_instr *mu = mul(
        &b, D(&b, b1),
        sub(&b, D(&b, 1.0),
            mul(&b, D(&b, 0.5), bin(&b, OT_OP_POWER, D(&b, 0.96), mul(&b, in->step, D(&b, md))))));
    ot_instr *mu_next = mul(&b, D(&b, b1),
                            sub(&b, D(&b, 1.0),
                                mul(&b, D(&b, 0.5),
                                    bin(&b, OT_OP_POWER, D(&b, 0.96),
                                        mul(&b, add(&b, in->step, D(&b, 1.0)), D(&b, md))))));
    /* mu_product *= mu (a parameter-dtype scalar, as torch's state tensor) */
    ot_instr *mp = mul(&b, in->state[2], ot_build_convert(b.c, mu, b.t));
    ot_instr *mp64 = ot_build_convert(b.c, mp, OT_F64);
    ot_instr *m = axpy(&b, in->state[0], 1.0 - b1, sub(&b, g, in->state[0]));
    ot_instr *v =
        add(&b, mul(&b, in->state[1], K(&b, b2)), mul(&b, K(&b, 1.0 - b2), mul(&b, g, g)));
    ot_instr *denom = add(&b, sqr(&b, dvd(&b, v, S(&b, bc2))), K(&b, HP("eps")));
    ot_instr *mp_next = mul(&b, mp64, mu_next);
    ot_instr *neglr = neg(&b, in->lr);
    ot_instr *c1 = dvd(&b, mul(&b, neglr, sub(&b, D(&b, 1.0), mu)), sub(&b, D(&b, 1.0), mp64));
    ot_instr *c2 = dvd(&b, mul(&b, neglr, mu_next), sub(&b, D(&b, 1.0), mp_next));
    p = add(&b, p, mul(&b, S(&b, c1), dvd(&b, g, denom)));
    out->param = add(&b, p, mul(&b, S(&b, c2), dvd(&b, m, denom)));
    out->state[0] = m;
    out->state[1] = v;
    out->state[2] = mp;
    return OT_OK;
}

/* ---- Lion (optax.lion; torch.optim has none) ------------------------------------------------ */

static const char *const lion_names[] = {"lr", "beta1", "beta2", "weight_decay"};
static const double lion_defaults[] = {1e-4, 0.9, 0.99, 1e-3};

static ot_status lion_validate(const ot_optimizer *o) {
    OT_CHECK(check_range(o, "lr", 0, INFINITY));
    OT_CHECK(check_range(o, "beta1", 0, 1));
    OT_CHECK(check_range(o, "beta2", 0, 1));
    return check_range(o, "weight_decay", 0, INFINITY);
}
static int one_state(const ot_optimizer *o) {
    (void)o;
    return 1;
}
static const char *lion_state(const ot_optimizer *o, int i) {
    (void)o;
    (void)i;
    return "exp_avg";
}
/* optax: u = sign((1-b1) g + b1 mu); mu = (1-b2) g + b2 mu; u += wd p; p += -lr u */
static ot_status lion_build(const ot_optimizer *o, const ot_optim_inputs *in,
                            ot_optim_outputs *out) {
    gb b = gb_of(in);
    double b1 = HP("beta1"), b2 = HP("beta2"), wd = HP("weight_decay");
    ot_instr *g = in->grad, *mu = in->state[0];
    ot_instr *u = ot_build_unary(b.c, OT_OP_SIGN,
                                 add(&b, mul(&b, K(&b, 1.0 - b1), g), mul(&b, K(&b, b1), mu)));
    out->state[0] = add(&b, mul(&b, K(&b, 1.0 - b2), g), mul(&b, K(&b, b2), mu));
    if (wd != 0.0) u = add(&b, u, mul(&b, K(&b, wd), in->param));
    out->param = add(&b, in->param, mul(&b, u, S(&b, neg(&b, in->lr))));
    return OT_OK;
}

/* ---- helpers for optax-style per-tensor reductions ------------------------------------------ */

/* The scalar add computation for dtype t (one per module, made on first use). */
static ot_computation *adder(gb *b) {
    ot_module *m = b->c->module;
    char name[32];
    snprintf(name, sizeof name, "optim_add_%s", ot_dtype_name(b->t));
    ot_computation *a = ot_module_find_computation(m, name);
    if (a) return a;
    a = ot_module_add_computation(m, name);
    ot_shape sc = ot_shape_scalar(b->t);
    ot_instr *x = ot_build_parameter(a, 0, sc, "x");
    ot_instr *y = ot_build_parameter(a, 1, sc, "y");
    ot_computation_set_root(a, ot_build_binary(a, OT_OP_ADD, x, y));
    return a;
}
/* A rank-0 constant of the parameter dtype. */
static ot_instr *C(gb *b, double v) {
    return ot_build_constant_scalar(b->c, b->t, v);
}
/* sum of x over the dims listed (ndims of them); every dim when ndims < 0. */
static ot_instr *reduce_sum(gb *b, ot_instr *x, const int64_t *dims, int ndims) {
    int rank = x->shape.array.rank;
    int64_t all[OT_MAX_RANK];
    if (ndims < 0) {
        for (int d = 0; d < rank; d++) all[d] = d;
        dims = all;
        ndims = rank;
    }
    if (ndims == 0) return x;
    ot_instr *z = C(b, 0.0);
    return ot_build_reduce(b->c, &x, &z, 1, dims, ndims, adder(b));
}
/* sqrt(sum(x^2)) over every element: a scalar. */
static ot_instr *l2norm(gb *b, ot_instr *x) {
    return ot_build_unary(b->c, OT_OP_SQRT, reduce_sum(b, bin(b, OT_OP_MULTIPLY, x, x), NULL, -1));
}
/* sqrt(mean(x^2)): a scalar. */
static ot_instr *rms(gb *b, ot_instr *x) {
    double n = (double)ot_shape_numel_unchecked(&x->shape.array);
    return ot_build_unary(b->c, OT_OP_SQRT,
                          dvd(b, reduce_sum(b, bin(b, OT_OP_MULTIPLY, x, x), NULL, -1), C(b, n)));
}
/* scalar node broadcast to the parameter shape */
static ot_instr *B(gb *b, ot_instr *scalar) {
    return ot_build_broadcast(b->c, scalar, b->s, NULL, 0);
}
/* optax scale_by_trust_ratio's ratio from the norms pn, un: where(pn == 0 | un == 0, 1, tc * pn /
 * (un + eps)); scalars, or (per_element) arrays of the parameter's shape. */
static ot_instr *trust_of(gb *b, ot_instr *pn, ot_instr *un, double tc, double eps,
                          bool per_element) {
    ot_instr *(*k)(gb *, double) = per_element ? K : C;
    ot_instr *tr = dvd(b, mul(b, k(b, tc), pn), add(b, un, k(b, eps)));
    ot_instr *zero = ot_build_binary(
        b->c, OT_OP_OR, ot_build_compare(b->c, pn, k(b, 0.0), OT_CMP_EQ, OT_CMP_TYPE_DEFAULT),
        ot_build_compare(b->c, un, k(b, 0.0), OT_CMP_EQ, OT_CMP_TYPE_DEFAULT));
    return ot_build_select(b->c, zero, k(b, 1.0), tr);
}
/* The ratio of a whole tensor, a scalar. */
static ot_instr *trust_scalar(gb *b, ot_instr *p, ot_instr *u, double tc, double eps) {
    return trust_of(b, l2norm(b, p), l2norm(b, u), tc, eps, false);
}
/* optax scale_by_trust_ratio: u * ratio. Over flat segments (in->seg): each segment's ratio
 * from the norms of its slices of p and u (reshaped to its tensor's shape, so reduced exactly as
 * a tensor of that shape is), broadcast over the segment; 0 in the gaps. */
static ot_instr *trust_ratio(gb *b, const ot_optim_inputs *in, ot_instr *p, ot_instr *u, double tc,
                             double eps) {
    const ot_optim_segments *sg = in->seg;
    if (in->trust_u) *in->trust_u = u;
    if (in->trust_p2 && in->trust_u2) /* the norms' sums given per element */
        return mul(b, u, trust_of(b, sqr(b, in->trust_p2), sqr(b, in->trust_u2), tc, eps, true));
    if (!sg) return mul(b, u, B(b, trust_scalar(b, p, u, tc, eps)));
    int64_t len = b->s.dims[0], pos = 0, one = 1;
    ot_instr **pc = ot_calloc((size_t)(2 * sg->n + 1), sizeof *pc);
    if (!pc) return NULL; /* the builder reports the missing node */
    int np = 0;
    for (int i = 0; i <= sg->n; i++) {
        int64_t ne = i < sg->n ? ot_shape_numel_unchecked(&sg->shape[i]) : 0;
        if (i < sg->n && ne == 0) continue;
        int64_t st0 = i < sg->n ? sg->offset[i] : len, lim = st0 + ne;
        if (st0 > pos) { /* a gap */
            ot_shape gs = b->s;
            gs.dims[0] = st0 - pos;
            pc[np++] = ot_build_broadcast(b->c, C(b, 0.0), gs, NULL, 0);
        }
        if (i == sg->n) break;
        gb bs = {b->c, sg->shape[i], b->t};
        ot_instr *ps = ot_build_reshape(b->c, ot_build_slice(b->c, p, &st0, &lim, &one), bs.s);
        ot_instr *us = ot_build_reshape(b->c, ot_build_slice(b->c, u, &st0, &lim, &one), bs.s);
        ot_shape ss = b->s;
        ss.dims[0] = ne;
        pc[np++] = ot_build_broadcast(b->c, trust_scalar(&bs, ps, us, tc, eps), ss, NULL, 0);
        pos = lim;
    }
    ot_instr *r = np == 1 ? pc[0] : ot_build_concatenate(b->c, pc, np, 0);
    ot_free(pc);
    return mul(b, u, r);
}

/* ---- LAMB (optax.lamb) ---------------------------------------------------------------------- */

static const char *const lamb_names[] = {"lr", "beta1", "beta2", "eps", "eps_root", "weight_decay"};
static const double lamb_defaults[] = {1e-3, 0.9, 0.999, 1e-6, 0.0, 0.0};

static ot_status lamb_validate(const ot_optimizer *o) {
    OT_CHECK(check_range(o, "lr", 0, INFINITY));
    OT_CHECK(check_range(o, "beta1", 0, 0.999999999999));
    OT_CHECK(check_range(o, "beta2", 0, 0.999999999999));
    OT_CHECK(check_range(o, "eps", 0, INFINITY));
    OT_CHECK(check_range(o, "eps_root", 0, INFINITY));
    return check_range(o, "weight_decay", 0, INFINITY);
}
static const char *lamb_state(const ot_optimizer *o, int i) {
    (void)o;
    return i == 0 ? "mu" : "nu";
}
/* chain(scale_by_adam(b1, b2, eps, eps_root), add_decayed_weights(wd), scale_by_trust_ratio(),
 * scale_by_learning_rate(lr)) */
static ot_status lamb_build(const ot_optimizer *o, const ot_optim_inputs *in,
                            ot_optim_outputs *out) {
    gb b = gb_of(in);
    double b1 = HP("beta1"), b2 = HP("beta2"), wd = HP("weight_decay");
    ot_instr *g = in->grad;
    ot_instr *m = add(&b, mul(&b, K(&b, 1.0 - b1), g), mul(&b, K(&b, b1), in->state[0]));
    ot_instr *v =
        add(&b, mul(&b, K(&b, 1.0 - b2), mul(&b, g, g)), mul(&b, K(&b, b2), in->state[1]));
    ot_instr *bc1 = sub(&b, D(&b, 1.0), bin(&b, OT_OP_POWER, D(&b, b1), in->step));
    ot_instr *bc2 = sub(&b, D(&b, 1.0), bin(&b, OT_OP_POWER, D(&b, b2), in->step));
    ot_instr *mh = dvd(&b, m, S(&b, bc1)), *vh = dvd(&b, v, S(&b, bc2));
    ot_instr *u =
        dvd(&b, mh, add(&b, sqr(&b, add(&b, vh, K(&b, HP("eps_root")))), K(&b, HP("eps"))));
    if (wd != 0.0) u = add(&b, u, mul(&b, K(&b, wd), in->param));
    u = trust_ratio(&b, in, in->param, u, 1.0, 0.0);
    out->param = add(&b, in->param, mul(&b, S(&b, neg(&b, in->lr)), u));
    out->state[0] = m;
    out->state[1] = v;
    return OT_OK;
}

/* ---- LARS (optax.lars) ---------------------------------------------------------------------- */

static const char *const lars_names[] = {"lr",       "weight_decay", "trust_coefficient", "eps",
                                         "momentum", "nesterov",     "trust_ratio"};
static const double lars_defaults[] = {1e-3, 0.0, 1e-3, 0.0, 0.9, 0, 1};

static ot_status lars_validate(const ot_optimizer *o) {
    OT_CHECK(check_range(o, "lr", 0, INFINITY));
    OT_CHECK(check_range(o, "weight_decay", 0, INFINITY));
    OT_CHECK(check_range(o, "trust_coefficient", 0, INFINITY));
    OT_CHECK(check_range(o, "eps", 0, INFINITY));
    OT_CHECK(check_range(o, "momentum", 0, INFINITY));
    OT_CHECK(check_bool(o, "nesterov"));
    return check_bool(o, "trust_ratio");
}
static const char *lars_state(const ot_optimizer *o, int i) {
    (void)o;
    (void)i;
    return "trace";
}
/* chain(add_decayed_weights(wd), scale_by_trust_ratio(tc, eps) [trust_ratio], -lr, trace(mom)).
 * A weight-decay / trust-ratio mask is a parameter group with weight_decay 0 / trust_ratio 0. */
static ot_status lars_build(const ot_optimizer *o, const ot_optim_inputs *in,
                            ot_optim_outputs *out) {
    gb b = gb_of(in);
    double wd = HP("weight_decay"), mom = HP("momentum");
    ot_instr *u = in->grad;
    if (wd != 0.0) u = add(&b, u, mul(&b, K(&b, wd), in->param));
    if (ON("trust_ratio"))
        u = trust_ratio(&b, in, in->param, u, HP("trust_coefficient"), HP("eps"));
    u = mul(&b, S(&b, neg(&b, in->lr)), u);
    ot_instr *tr = add(&b, u, mul(&b, K(&b, mom), in->state[0]));
    ot_instr *upd = ON("nesterov") ? add(&b, u, mul(&b, K(&b, mom), tr)) : tr;
    out->param = add(&b, in->param, upd);
    out->state[0] = tr;
    return OT_OK;
}

/* ---- Adafactor (optax.adafactor) ------------------------------------------------------------ */

static const char *const adafactor_names[] = {"lr",
                                              "min_dim_size_to_factor",
                                              "decay_rate",
                                              "decay_offset",
                                              "multiply_by_parameter_scale",
                                              "clipping_threshold",
                                              "eps",
                                              "factored",
                                              "weight_decay_rate"};
static const double adafactor_defaults[] = {1e-2, 128, 0.8, 0, 1, 1.0, 1e-30, 1, 0};

static ot_status adafactor_validate(const ot_optimizer *o) {
    OT_CHECK(check_range(o, "lr", 0, INFINITY));
    OT_CHECK(check_range(o, "min_dim_size_to_factor", 0, 1e18));
    OT_CHECK(check_range(o, "decay_rate", 0, INFINITY));
    OT_CHECK(check_range(o, "decay_offset", 0, 1e18));
    OT_CHECK(check_bool(o, "multiply_by_parameter_scale"));
    OT_CHECK(check_range(o, "clipping_threshold", 0, INFINITY));
    OT_CHECK(check_range(o, "eps", 0, INFINITY));
    OT_CHECK(check_bool(o, "factored"));
    return check_range(o, "weight_decay_rate", 0, INFINITY);
}
static int three_state(const ot_optimizer *o) {
    (void)o;
    return 3;
}
static const char *adafactor_state(const ot_optimizer *o, int i) {
    (void)o;
    static const char *const n[] = {"v_row", "v_col", "v"};
    return n[i];
}
/* optax _factored_dims: (d1, d0) = the second-largest and largest dims (a stable sort), when the
 * rank is >= 2 and the second-largest is >= min_dim_size_to_factor; false otherwise. */
static bool factored_dims(const ot_optimizer *o, const ot_shape *s, int *d1, int *d0) {
    if (!ON("factored") || s->rank < 2) return false;
    int idx[OT_MAX_RANK];
    for (int i = 0; i < s->rank; i++) idx[i] = i;
    for (int i = 1; i < s->rank; i++) /* insertion sort by size, stable */
        for (int j = i; j > 0 && s->dims[idx[j - 1]] > s->dims[idx[j]]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    if ((double)s->dims[idx[s->rank - 2]] < HP("min_dim_size_to_factor")) return false;
    *d1 = idx[s->rank - 2];
    *d0 = idx[s->rank - 1];
    return true;
}
static void drop_dim(const ot_shape *s, int d, ot_shape *out) {
    int64_t dims[OT_MAX_RANK];
    int r = 0;
    for (int i = 0; i < s->rank; i++)
        if (i != d) dims[r++] = s->dims[i];
    ot_shape_make(out, s->dtype, r, dims);
}
static ot_status adafactor_shape(const ot_optimizer *o, int i, const ot_shape *s, ot_shape *out) {
    int d1, d0;
    bool f = factored_dims(o, s, &d1, &d0);
    int64_t one = 1;
    if (f && i == 0)
        drop_dim(s, d0, out);
    else if (f && i == 1)
        drop_dim(s, d1, out);
    else if (!f && i == 2)
        *out = *s;
    else
        ot_shape_make(out, s->dtype, 1, &one); /* unused slot: [1], as optax */
    return OT_OK;
}
/* mean of x over dim d */
static ot_instr *mean_dim(gb *b, ot_instr *x, int d) {
    int64_t dd = d;
    ot_instr *r = reduce_sum(b, x, &dd, 1);
    return dvd(
        b, r,
        ot_build_broadcast(b->c, C(b, (double)x->shape.array.dims[d]), r->shape.array, NULL, 0));
}
/* x (the parameter shape without dim d) broadcast back along d */
static ot_instr *expand(gb *b, ot_instr *x, int d) {
    int64_t map[OT_MAX_RANK];
    int r = 0;
    for (int i = 0; i < b->s.rank; i++)
        if (i != d) map[r++] = i;
    return ot_build_broadcast(b->c, x, b->s, map, r);
}
static ot_instr *Kof(gb *b, ot_instr *like, double v) {
    return ot_build_broadcast(b->c, C(b, v), like->shape.array, NULL, 0);
}
/* chain(scale_by_factored_rms, clip_by_block_rms(threshold), lr, scale_by_param_block_rms(1e-3),
 * add_decayed_weights(wd), scale(-1)) */
static ot_status adafactor_build(const ot_optimizer *o, const ot_optim_inputs *in,
                                 ot_optim_outputs *out) {
    gb b = gb_of(in);
    ot_instr *g = in->grad;
    /* decay_t = 1 - (step - offset)^-decay_rate, in the parameter dtype (optax: f32) */
    ot_instr *t = ot_build_convert(b.c, sub(&b, in->step, D(&b, HP("decay_offset"))), b.t);
    ot_instr *dec = sub(&b, C(&b, 1.0), bin(&b, OT_OP_POWER, t, C(&b, -HP("decay_rate"))));
    ot_instr *omd = sub(&b, C(&b, 1.0), dec);
    ot_instr *gsq = add(&b, mul(&b, g, g), K(&b, HP("eps")));
    int d1 = 0, d0 = 0;
    ot_instr *u;
    if (factored_dims(o, &b.s, &d1, &d0)) {
        ot_instr *mr = mean_dim(&b, gsq, d0), *mc = mean_dim(&b, gsq, d1);
        ot_instr *vr =
            add(&b, mul(&b, ot_build_broadcast(b.c, dec, mr->shape.array, NULL, 0), in->state[0]),
                mul(&b, ot_build_broadcast(b.c, omd, mr->shape.array, NULL, 0), mr));
        ot_instr *vc =
            add(&b, mul(&b, ot_build_broadcast(b.c, dec, mc->shape.array, NULL, 0), in->state[1]),
                mul(&b, ot_build_broadcast(b.c, omd, mc->shape.array, NULL, 0), mc));
        int rd1 = d1 > d0 ? d1 - 1 : d1;
        ot_instr *rcm = mean_dim(&b, vr, rd1); /* keepdims: broadcast back along rd1 */
        int64_t map[OT_MAX_RANK];
        int r = 0;
        for (int i = 0; i < vr->shape.array.rank; i++)
            if (i != rd1) map[r++] = i;
        rcm = ot_build_broadcast(b.c, rcm, vr->shape.array, map, r);
        ot_instr *rf = bin(&b, OT_OP_POWER, dvd(&b, vr, rcm), Kof(&b, vr, -0.5));
        ot_instr *cf = bin(&b, OT_OP_POWER, vc, Kof(&b, vc, -0.5));
        u = mul(&b, mul(&b, g, expand(&b, rf, d0)), expand(&b, cf, d1));
        out->state[0] = vr;
        out->state[1] = vc;
        out->state[2] = in->state[2];
    } else {
        ot_instr *v = add(&b, mul(&b, B(&b, dec), in->state[2]), mul(&b, B(&b, omd), gsq));
        u = mul(&b, g, bin(&b, OT_OP_POWER, v, K(&b, -0.5)));
        out->state[0] = in->state[0];
        out->state[1] = in->state[1];
        out->state[2] = v;
    }
    double thr = HP("clipping_threshold");
    if (thr > 0) /* u / max(1, rms(u) / threshold) */
        u = dvd(&b, u, B(&b, bin(&b, OT_OP_MAXIMUM, C(&b, 1.0), dvd(&b, rms(&b, u), C(&b, thr)))));
    u = mul(&b, S(&b, in->lr), u);
    if (ON("multiply_by_parameter_scale")) { /* u * max-like safe_rms(p, 1e-3) */
        ot_instr *pr = rms(&b, in->param);
        ot_instr *small = ot_build_compare(b.c, pr, C(&b, 1e-3), OT_CMP_LE, OT_CMP_TYPE_DEFAULT);
        u = mul(&b, u, B(&b, ot_build_select(b.c, small, C(&b, 1e-3), pr)));
    }
    if (HP("weight_decay_rate") != 0.0)
        u = add(&b, u, mul(&b, K(&b, HP("weight_decay_rate")), in->param));
    out->param = add(&b, in->param, neg(&b, u));
    return OT_OK;
}

/* ---- Adafactor, torch's (torch.optim.Adafactor) ---------------------------------------------- */

static const char *const tadafactor_names[] = {"lr", "beta2_decay",  "eps1",    "eps2",
                                               "d",  "weight_decay", "maximize"};
/* eps1 0: the parameter dtype's machine epsilon (torch's eps=(None, 1e-3)) */
static const double tadafactor_defaults[] = {1e-2, -0.8, 0, 1e-3, 1.0, 0.0, 0};

static ot_status tadafactor_validate(const ot_optimizer *o) {
    OT_CHECK(check_range(o, "lr", 0, INFINITY));
    OT_CHECK(check_range(o, "beta2_decay", -INFINITY, 0));
    OT_CHECK(check_range(o, "eps1", 0, INFINITY));
    OT_CHECK(check_range(o, "eps2", 0, INFINITY));
    OT_CHECK(check_range(o, "d", 1e-300, INFINITY));
    OT_CHECK(check_range(o, "weight_decay", 0, INFINITY));
    return check_bool(o, "maximize");
}
static const char *tadafactor_state(const ot_optimizer *o, int i) {
    (void)o;
    static const char *const n[] = {"row_var", "col_var", "variance"};
    return n[i];
}
/* rank >= 2: row_var = shape[:-1] + [1], col_var = shape[:-2] + [1, last] (torch's keepdim
 * shapes), variance unused; else variance = the parameter's shape. Unused slots are [1]. */
static ot_status tadafactor_shape(const ot_optimizer *o, int i, const ot_shape *s, ot_shape *out) {
    (void)o;
    int64_t one = 1;
    bool fac = s->rank >= 2;
    *out = *s;
    if (fac && i == 0)
        out->dims[s->rank - 1] = 1;
    else if (fac && i == 1)
        out->dims[s->rank - 2] = 1;
    else if (!fac && i == 2)
        ;
    else
        ot_shape_make(out, s->dtype, 1, &one);
    return OT_OK;
}
/* torch's lerp_(end, w): w < 0.5 ? x + w (end - x) : end - (end - x)(1 - w), w an f64 scalar node
 */
static ot_instr *lerp_s(gb *b, ot_instr *x, ot_instr *end, ot_instr *w64) {
    ot_shape s = x->shape.array;
    ot_instr *w = ot_build_broadcast(b->c, ot_build_convert(b->c, w64, b->t), s, NULL, 0);
    ot_instr *omw =
        ot_build_broadcast(b->c, ot_build_convert(b->c, sub(b, D(b, 1.0), w64), b->t), s, NULL, 0);
    ot_instr *diff = sub(b, end, x);
    ot_instr *lo = add(b, x, mul(b, w, diff)), *hi = sub(b, end, mul(b, diff, omw));
    ot_shape ps = s;
    ps.dtype = OT_PRED;
    ot_instr *small = ot_build_broadcast(
        b->c, ot_build_compare(b->c, w64, D(b, 0.5), OT_CMP_LT, OT_CMP_TYPE_DEFAULT), ps, NULL, 0);
    return ot_build_select(b->c, small, lo, hi);
}
static ot_status tadafactor_build(const ot_optimizer *o, const ot_optim_inputs *in,
                                  ot_optim_outputs *out) {
    gb b = gb_of(in);
    ot_instr *g = ON("maximize") ? neg(&b, in->grad) : in->grad;
    ot_instr *p = in->param;
    double eps1 = HP("eps1");
    if (eps1 == 0.0) eps1 = b.t == OT_F32 ? (double)FLT_EPSILON : DBL_EPSILON;
    /* host scalars (torch: python floats) in f64 */
    ot_instr *omb = bin(&b, OT_OP_POWER, in->step, D(&b, HP("beta2_decay")));
    ot_instr *rho = bin(&b, OT_OP_MINIMUM, in->lr,
                        dvd(&b, D(&b, 1.0), bin(&b, OT_OP_POWER, in->step, D(&b, 0.5))));
    double n = (double)ot_shape_numel_unchecked(&b.s);
    ot_instr *pn = ot_build_convert(b.c, l2norm(&b, p), OT_F64);
    ot_instr *alpha =
        mul(&b, bin(&b, OT_OP_MAXIMUM, D(&b, HP("eps2")), dvd(&b, pn, D(&b, sqrt(n)))), rho);
    if (HP("weight_decay") != 0.0)
        p = mul(&b, p, S(&b, sub(&b, D(&b, 1.0), mul(&b, in->lr, D(&b, HP("weight_decay"))))));
    ot_instr *var;
    int r = b.s.rank;
    if (r >= 2) {
        int64_t last = r - 1, prev = r - 2;
        ot_instr *g2 = mul(&b, g, g);
        /* vector_norm(g, dim)^2 / size: sqrt then square, as torch */
        ot_instr *rs = reduce_sum(&b, g2, &last, 1), *cs = reduce_sum(&b, g2, &prev, 1);
        rs = sqr(&b, rs);
        cs = sqr(&b, cs);
        rs = dvd(&b, mul(&b, rs, rs), Kof(&b, rs, (double)b.s.dims[last]));
        cs = dvd(&b, mul(&b, cs, cs), Kof(&b, cs, (double)b.s.dims[prev]));
        ot_shape rsh = in->state[0]->shape.array, csh = in->state[1]->shape.array;
        rs = ot_build_reshape(b.c, rs, rsh);
        cs = ot_build_reshape(b.c, cs, csh);
        ot_instr *rv = lerp_s(&b, in->state[0], rs, omb);
        ot_instr *cv = lerp_s(&b, in->state[1], cs, omb);
        /* row_var @ col_var: [.., R, 1] x [.., 1, C] is the outer product */
        int64_t map_r[OT_MAX_RANK], map_c[OT_MAX_RANK];
        for (int i = 0; i < r; i++) map_r[i] = map_c[i] = i;
        ot_shape rs2 = rsh, cs2 = csh; /* drop the unit dims for the broadcast */
        int64_t rd[OT_MAX_RANK], cd[OT_MAX_RANK];
        for (int i = 0; i < r - 1; i++) rd[i] = rsh.dims[i];
        for (int i = 0; i < r - 2; i++) cd[i] = csh.dims[i];
        cd[r - 2] = csh.dims[r - 1];
        ot_shape_make(&rs2, b.t, r - 1, rd);
        ot_shape_make(&cs2, b.t, r - 1, cd);
        for (int i = 0; i < r - 1; i++) map_r[i] = i;
        for (int i = 0; i < r - 2; i++) map_c[i] = i;
        map_c[r - 2] = r - 1;
        ot_instr *outer =
            mul(&b, ot_build_broadcast(b.c, ot_build_reshape(b.c, rv, rs2), b.s, map_r, r - 1),
                ot_build_broadcast(b.c, ot_build_reshape(b.c, cv, cs2), b.s, map_c, r - 1));
        /* / clamp(row_var.mean(dim=-2, keepdim), eps1) */
        ot_instr *rm = mean_dim(&b, ot_build_reshape(b.c, rv, rs2), r - 2);
        rm = bin(&b, OT_OP_MAXIMUM, rm, Kof(&b, rm, eps1));
        int64_t map_m[OT_MAX_RANK];
        for (int i = 0; i < r - 2; i++) map_m[i] = i;
        var = dvd(&b, outer, ot_build_broadcast(b.c, rm, b.s, map_m, r - 2));
        out->state[0] = rv;
        out->state[1] = cv;
        out->state[2] = in->state[2];
    } else {
        ot_instr *v = lerp_s(&b, in->state[2], mul(&b, g, g), omb);
        var = v;
        out->state[0] = in->state[0];
        out->state[1] = in->state[1];
        out->state[2] = v;
    }
    ot_instr *u = mul(
        &b, ot_build_unary(b.c, OT_OP_RSQRT, bin(&b, OT_OP_MAXIMUM, var, K(&b, eps1 * eps1))), g);
    ot_instr *un = ot_build_convert(b.c, l2norm(&b, u), OT_F64);
    ot_instr *den = bin(&b, OT_OP_MAXIMUM, D(&b, 1.0), dvd(&b, un, D(&b, sqrt(n) * HP("d"))));
    out->param = add(&b, p, mul(&b, S(&b, neg(&b, dvd(&b, alpha, den))), u));
    return OT_OK;
}

/* ---- table ---------------------------------------------------------------------------------- */

#define NH(a) ((int)(sizeof(a) / sizeof((a)[0])))
static const ot_optimizer_vtable builtins[] = {
    {"sgd", NH(sgd_names), sgd_names, sgd_defaults, sgd_validate, sgd_nstate, sgd_state, NULL,
     sgd_build, NULL, NULL},
    {"adam", NH(adam_names), adam_names, adam_defaults, adam_validate, adam_nstate, adam_state,
     NULL, adam_build, NULL, NULL},
    {"adamw", NH(adam_names), adam_names, adamw_defaults, adam_validate, adam_nstate, adam_state,
     NULL, adamw_build, NULL, NULL},
    {"rmsprop", NH(rms_names), rms_names, rms_defaults, rms_validate, rms_nstate, rms_state, NULL,
     rms_build, NULL, NULL},
    {"adagrad", NH(adagrad_names), adagrad_names, adagrad_defaults, adagrad_validate,
     adagrad_nstate, adagrad_state, adagrad_init, adagrad_build, NULL, NULL},
    {"adadelta", NH(adadelta_names), adadelta_names, adadelta_defaults, adadelta_validate,
     adadelta_nstate, adadelta_state, NULL, adadelta_build, NULL, NULL},
    {"radam", NH(radam_names), radam_names, radam_defaults, radam_validate, two_state, adam_state,
     NULL, radam_build, NULL, NULL},
    {"nadam", NH(nadam_names), nadam_names, nadam_defaults, nadam_validate, nadam_nstate,
     nadam_state, nadam_init, nadam_build, nadam_scalar, NULL},
    {"lion", NH(lion_names), lion_names, lion_defaults, lion_validate, one_state, lion_state, NULL,
     lion_build, NULL, NULL},
    {"lamb", NH(lamb_names), lamb_names, lamb_defaults, lamb_validate, two_state, lamb_state, NULL,
     lamb_build, NULL, NULL},
    {"lars", NH(lars_names), lars_names, lars_defaults, lars_validate, one_state, lars_state, NULL,
     lars_build, NULL, NULL},
    {"adafactor", NH(adafactor_names), adafactor_names, adafactor_defaults, adafactor_validate,
     three_state, adafactor_state, NULL, adafactor_build, NULL, adafactor_shape},
    {"adafactor_torch", NH(tadafactor_names), tadafactor_names, tadafactor_defaults,
     tadafactor_validate, three_state, tadafactor_state, NULL, tadafactor_build, NULL,
     tadafactor_shape},
};

/* ---- the fused 8-bit state kernel's rules (exec/state8.h) ---------------------------------- */

/* The same scalars as the graphs above build (K's constants, S's converts of the f64 host
 * expressions), as rank-0 f32 nodes for the kernel; its element update repeats the graphs'
 * operation order (src/exec/state8_internal.h), and tests/test_tpu_optim_state.c checks both
 * bit for bit. */
bool ot_optim_state8_rule(const ot_optimizer *o, const ot_optim_inputs *in, char *cfg, size_t cap,
                          ot_instr **sc, int *nsc) {
    const ot_optimizer_vtable *vt = ot_optimizer_vtable_of(o);
    ot_computation *c = in->c;
    gb b = {c, ot_shape_scalar(OT_F32), OT_F32};
    *nsc = 0;
    if (in->param->shape.array.dtype != OT_F32) return false;
    if (vt == ot_optim_builtin("adam") ||
        vt == ot_optim_builtin("adamw")) { /* adam, adamw: torch's form */
        bool decoupled = vt == ot_optim_builtin("adamw");
        if (ON("optax") || ON("amsgrad")) return false;
        double b1 = HP("beta1"), b2 = HP("beta2"), wd = HP("weight_decay");
        ot_instr *bc1 = sub(&b, D(&b, 1.0), bin(&b, OT_OP_POWER, D(&b, b1), in->step));
        ot_instr *bc2 = sub(&b, D(&b, 1.0), bin(&b, OT_OP_POWER, D(&b, b2), in->step));
        ot_instr *step_size = dvd(&b, in->lr, bc1);
        sc[0] = C(&b, 1.0 - b1);
        sc[1] = C(&b, b2);
        sc[2] = C(&b, 1.0 - b2);
        sc[3] = ot_build_convert(c, sqr(&b, bc2), OT_F32);
        sc[4] = C(&b, HP("eps"));
        sc[5] = ot_build_convert(c, neg(&b, step_size), OT_F32);
        sc[6] = decoupled && wd != 0.0
                    ? ot_build_convert(c, sub(&b, D(&b, 1.0), mul(&b, in->lr, D(&b, wd))), OT_F32)
                    : C(&b, wd);
        *nsc = 7;
        snprintf(cfg, cap, "adam%s%s", ON("maximize") ? ",maximize" : "",
                 wd == 0.0   ? ""
                 : decoupled ? ",wd_decoupled"
                             : ",wd_coupled");
        return true;
    }
    if (vt == ot_optim_builtin("lion")) { /* lion */
        double b1 = HP("beta1"), b2 = HP("beta2"), wd = HP("weight_decay");
        sc[0] = C(&b, 1.0 - b1);
        sc[1] = C(&b, b1);
        sc[2] = C(&b, 1.0 - b2);
        sc[3] = C(&b, b2);
        sc[4] = C(&b, wd);
        sc[5] = ot_build_convert(c, neg(&b, in->lr), OT_F32);
        *nsc = 6;
        snprintf(cfg, cap, "lion%s", wd != 0.0 ? ",wd" : "");
        return true;
    }
    if (vt == ot_optim_builtin("sgd") && HP("momentum") != 0.0) { /* sgd with momentum */
        double wd = HP("weight_decay");
        sc[0] = C(&b, HP("momentum"));
        sc[1] = C(&b, 1.0 - HP("dampening"));
        sc[2] = C(&b, wd);
        sc[3] = ot_build_convert(c, ot_build_unary(c, OT_OP_NEGATE, in->lr), OT_F32);
        sc[4] = ot_build_compare(c, in->step, D(&b, 1.0), OT_CMP_EQ, OT_CMP_TYPE_DEFAULT);
        *nsc = 5;
        snprintf(cfg, cap, "sgd%s%s%s", ON("maximize") ? ",maximize" : "", wd != 0.0 ? ",wd" : "",
                 ON("nesterov") ? ",nesterov" : "");
        return true;
    }
    return false;
}

bool ot_optim_state8_supported(const ot_optimizer *o) {
    const ot_optimizer_vtable *vt = ot_optimizer_vtable_of(o);
    if (vt == ot_optim_builtin("adam") || vt == ot_optim_builtin("adamw"))
        return !ON("optax") && !ON("amsgrad");
    if (vt == ot_optim_builtin("lion")) return true;
    return vt == ot_optim_builtin("sgd") && HP("momentum") != 0.0;
}

/* ---- Lookahead (optax.lookahead around any optimizer) ---------------------------------------- */

static const char *const lookahead_names[] = {"sync_period", "slow_step_size"};
static const double lookahead_defaults[] = {5, 0.5};

static ot_status lookahead_validate(const ot_optimizer *o) {
    double k = HP("sync_period");
    if (!(k >= 1 && k <= 1e15 && k == floor(k)))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "optimizer 'lookahead': sync_period = %g (an "
                        "integer >= 1)",
                        k);
    return check_range(o, "slow_step_size", 0, 1);
}
static int lookahead_nstate(const ot_optimizer *o) {
    const ot_optimizer *in = ot_optim_inner(o);
    return in ? ot_optimizer_state_count(in) + 1 : 1;
}
static const char *lookahead_state(const ot_optimizer *o, int i) {
    const ot_optimizer *in = ot_optim_inner(o);
    int ns = in ? ot_optimizer_state_count(in) : 0;
    return i < ns ? ot_optimizer_state_name(in, i) : "slow";
}
static double lookahead_init(const ot_optimizer *o, int i) {
    const ot_optimizer *in = ot_optim_inner(o);
    int ns = in ? ot_optimizer_state_count(in) : 0;
    if (i >= ns) return 0.0;
    const ot_optimizer_vtable *vt = ot_optimizer_vtable_of(in);
    return vt->state_init ? vt->state_init(in, i) : 0.0;
}
static ot_status lookahead_shape(const ot_optimizer *o, int i, const ot_shape *s, ot_shape *out) {
    const ot_optimizer *in = ot_optim_inner(o);
    int ns = in ? ot_optimizer_state_count(in) : 0;
    if (i < ns) return ot_optimizer_state_shape(in, i, s, out);
    *out = *s;
    return OT_OK;
}
static ot_status lookahead_build(const ot_optimizer *o, const ot_optim_inputs *in,
                                 ot_optim_outputs *out) {
    const ot_optimizer *inner = ot_optim_inner(o);
    if (!inner)
        return ot_error(
            OT_ERR_INVALID_ARGUMENT,
            "optimizer 'lookahead': no inner optimizer (use ot_optimizer_new_lookahead)");
    gb b = gb_of(in);
    int ns = ot_optimizer_state_count(inner);
    ot_optim_inputs ii = *in;
    ii.state[ns] = NULL;
    ot_optim_outputs io;
    OT_CHECK(ot_optimizer_build(inner, &ii, &io));
    ot_shape ps = b.s;
    ps.dtype = OT_PRED;
    /* the slow weights start as the parameter (step 1) */
    ot_instr *first = ot_build_broadcast(
        b.c, ot_build_compare(b.c, in->step, D(&b, 1.0), OT_CMP_EQ, OT_CMP_TYPE_DEFAULT), ps, NULL,
        0);
    ot_instr *slow = ot_build_select(b.c, first, in->param, in->state[ns]);
    ot_instr *rem = bin(&b, OT_OP_REMAINDER, in->step, D(&b, HP("sync_period")));
    ot_instr *sync = ot_build_broadcast(
        b.c, ot_build_compare(b.c, rem, D(&b, 0.0), OT_CMP_EQ, OT_CMP_TYPE_DEFAULT), ps, NULL, 0);
    ot_instr *moved = add(&b, slow, mul(&b, K(&b, HP("slow_step_size")), sub(&b, io.param, slow)));
    out->param = ot_build_select(b.c, sync, moved, io.param);
    for (int j = 0; j < ns; j++) out->state[j] = io.state[j];
    out->state[ns] = ot_build_select(b.c, sync, moved, slow);
    return OT_OK;
}

static const ot_optimizer_vtable lookahead_vt = {
    "lookahead",      NH(lookahead_names), lookahead_names, lookahead_defaults, lookahead_validate,
    lookahead_nstate, lookahead_state,     lookahead_init,  lookahead_build,    NULL,
    lookahead_shape};

const ot_optimizer_vtable *ot_optim_lookahead_vtable(void) {
    return &lookahead_vt;
}

/* ---- a view: another optimizer's interface, delegating everything to a copy of it ---------- */

static int view_nstate(const ot_optimizer *o) {
    return ot_optimizer_state_count(ot_optim_inner(o));
}
static const char *view_state(const ot_optimizer *o, int i) {
    return ot_optimizer_state_name(ot_optim_inner(o), i);
}
static double view_init(const ot_optimizer *o, int i) {
    const ot_optimizer *in = ot_optim_inner(o);
    const ot_optimizer_vtable *vt = ot_optimizer_vtable_of(in);
    return vt && vt->state_init ? vt->state_init(in, i) : 0.0;
}
static ot_status view_shape(const ot_optimizer *o, int i, const ot_shape *s, ot_shape *out) {
    return ot_optimizer_state_shape(ot_optim_inner(o), i, s, out);
}
static ot_status view_build(const ot_optimizer *o, const ot_optim_inputs *in,
                            ot_optim_outputs *out) {
    return ot_optimizer_build(ot_optim_inner(o), in, out);
}
static const ot_optimizer_vtable view_vt = {
    "tpu_optimizer", 0,         NULL,       NULL, NULL,      view_nstate,
    view_state,      view_init, view_build, NULL, view_shape};

const ot_optimizer_vtable *ot_optim_view_vtable(void) {
    return &view_vt;
}

const ot_optimizer_vtable *ot_optim_builtin(const char *name) {
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (strcmp(builtins[i].name, name) == 0) return &builtins[i];
    return NULL;
}
