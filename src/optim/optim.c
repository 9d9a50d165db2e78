/* Optimizer context, validation, module building and the reference step (optim.h). */
#include "optitpu/optim.h"

#include <math.h>
#include <string.h>

#include "optitpu/exec.h"
#include "optim_internal.h"

struct ot_optimizer {
    const ot_optimizer_vtable *vt;
    double hp[OT_OPTIM_MAX_HPARAMS];
    int64_t steps;
    ot_optimizer *inner;   /* a wrapped optimizer (Lookahead, a view), owned */
    ot_optim_host_fn host; /* a host-callback optimizer's update (NULL: a graph) */
    void *user;
};

const ot_optimizer *ot_optim_inner(const ot_optimizer *o) {
    return o ? o->inner : NULL;
}

static ot_status check_vtable(const ot_optimizer_vtable *vt, bool host) {
    if (!vt || !vt->name || (!host && !vt->build) || !vt->state_count || !vt->state_name)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "optimizer vtable needs name, %sstate_count and state_name",
                        host ? "" : "build, ");
    if (vt->nhparams < 0 || vt->nhparams > OT_OPTIM_MAX_HPARAMS ||
        (vt->nhparams > 0 && (!vt->hparam_names || !vt->hparam_defaults)))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "optimizer '%s': %d hyper-parameters (at most %d, with names and defaults)",
                        vt->name, vt->nhparams, OT_OPTIM_MAX_HPARAMS);
    return OT_OK;
}

ot_status ot_optimizer_new_custom(const ot_optimizer_vtable *vt, ot_optimizer **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_new: out is NULL");
    *out = NULL;
    OT_CHECK(check_vtable(vt, false));
    ot_optimizer *o = ot_calloc(1, sizeof *o);
    if (!o) return ot_error(OT_ERR_OUT_OF_MEMORY, "optimizer '%s'", vt->name);
    o->vt = vt;
    for (int i = 0; i < vt->nhparams; i++) o->hp[i] = vt->hparam_defaults[i];
    *out = o;
    return OT_OK;
}

ot_status ot_optimizer_new_host(const ot_optimizer_vtable *vt, ot_optim_host_fn fn, void *user,
                                ot_optimizer **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_new_host: out is NULL");
    *out = NULL;
    if (!fn)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_new_host: the callback is NULL");
    OT_CHECK(check_vtable(vt, true));
    ot_optimizer *o = ot_calloc(1, sizeof *o);
    if (!o) return ot_error(OT_ERR_OUT_OF_MEMORY, "optimizer '%s'", vt->name);
    o->vt = vt;
    o->host = fn;
    o->user = user;
    for (int i = 0; i < vt->nhparams; i++) o->hp[i] = vt->hparam_defaults[i];
    *out = o;
    return OT_OK;
}

const ot_optimizer *ot_optim_host_target(const ot_optimizer *o) {
    for (; o; o = o->inner) /* through views to the optimizer they show */
        if (o->host)
            return o;
        else if (o->vt != ot_optim_view_vtable())
            return NULL;
    return NULL;
}

ot_status ot_optim_new_view(const ot_optimizer *inner, ot_optimizer **out) {
    *out = NULL;
    ot_optimizer *o = NULL;
    OT_CHECK(ot_optimizer_new_custom(ot_optim_view_vtable(), &o));
    ot_status s = ot_optimizer_clone(inner, &o->inner);
    if (s != OT_OK) {
        ot_optimizer_free(o);
        return s;
    }
    *out = o;
    return OT_OK;
}

bool ot_optimizer_is_host(const ot_optimizer *o) {
    return ot_optim_host_target(o) != NULL;
}

ot_status ot_optim_host_call(const ot_optimizer *o, const ot_shape *ps, void *param,
                             const void *grad, void *const *state, int64_t step, double lr) {
    const ot_optimizer *h = ot_optim_host_target(o);
    if (!h)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "optimizer '%s' has no host callback",
                        o ? o->vt->name : "(null)");
    ot_optim_host_args a;
    memset(&a, 0, sizeof a);
    a.opt = h;
    a.user = h->user;
    a.dtype = ps->dtype;
    a.shape = ps;
    a.count = ot_shape_numel_unchecked(ps);
    a.param = param;
    a.grad = grad;
    a.nstate = h->vt->state_count(h);
    for (int i = 0; i < a.nstate; i++) {
        ot_shape ss;
        OT_CHECK(ot_optimizer_state_shape(h, i, ps, &ss));
        a.state[i] = state[i];
        a.state_count[i] = ot_shape_numel_unchecked(&ss);
    }
    a.step = step;
    a.lr = lr;
    ot_status s = h->host(&a);
    if (s != OT_OK)
        return ot_error_wrap(s, "optimizer '%s': host callback failed at step %lld", h->vt->name,
                             (long long)step);
    return OT_OK;
}

ot_status ot_optimizer_new(const char *name, ot_optimizer **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_new: out is NULL");
    *out = NULL;
    if (!name) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_new: name is NULL");
    const ot_optimizer_vtable *vt = ot_optim_builtin(name);
    if (!vt)
        return ot_error(OT_ERR_NOT_FOUND,
                        "unknown optimizer '%s' (built-in: sgd adam adamw rmsprop adagrad adadelta "
                        "radam nadam lion lamb lars adafactor)",
                        name);
    return ot_optimizer_new_custom(vt, out);
}

ot_status ot_optimizer_clone(const ot_optimizer *o, ot_optimizer **out) {
    if (!o || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_clone: NULL argument");
    *out = NULL;
    ot_optimizer *c = ot_calloc(1, sizeof *c);
    if (!c) return ot_error(OT_ERR_OUT_OF_MEMORY, "optimizer '%s'", o->vt->name);
    *c = *o;
    c->inner = NULL;
    if (o->inner) {
        ot_status s = ot_optimizer_clone(o->inner, &c->inner);
        if (s != OT_OK) {
            ot_free(c);
            return s;
        }
    }
    *out = c;
    return OT_OK;
}

void ot_optimizer_free(ot_optimizer *o) {
    if (!o) return;
    ot_optimizer_free(o->inner);
    ot_free(o);
}

ot_status ot_optimizer_new_lookahead(const ot_optimizer *inner, int64_t sync_period,
                                     double slow_step_size, ot_optimizer **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_new_lookahead: out is NULL");
    *out = NULL;
    if (!inner) return ot_error(OT_ERR_INVALID_ARGUMENT, "lookahead: the inner optimizer is NULL");
    if (ot_optimizer_is_host(inner))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "lookahead: '%s' is a host callback (no update graph to wrap)",
                        inner->vt->name);
    int ns = inner->vt->state_count(inner);
    if (ns + 1 > OT_OPTIM_MAX_STATE)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "lookahead: '%s' has %d state slots; with the slow weights at most %d",
                        inner->vt->name, ns, OT_OPTIM_MAX_STATE);
    ot_optimizer *o = NULL;
    OT_CHECK(ot_optimizer_new_custom(ot_optim_lookahead_vtable(), &o));
    ot_status s = ot_optimizer_clone(inner, &o->inner);
    if (s == OT_OK) s = ot_optimizer_set(o, "sync_period", (double)sync_period);
    if (s == OT_OK) s = ot_optimizer_set(o, "slow_step_size", slow_step_size);
    if (s != OT_OK) {
        ot_optimizer_free(o);
        return s;
    }
    *out = o;
    return OT_OK;
}

const char *ot_optimizer_name(const ot_optimizer *o) {
    return o ? o->vt->name : NULL;
}
const ot_optimizer_vtable *ot_optimizer_vtable_of(const ot_optimizer *o) {
    return o ? o->vt : NULL;
}

static int hp_index(const ot_optimizer *o, const char *name) {
    for (int i = 0; name && i < o->vt->nhparams; i++)
        if (strcmp(o->vt->hparam_names[i], name) == 0) return i;
    return -1;
}

ot_status ot_optimizer_set(ot_optimizer *o, const char *name, double value) {
    if (!o) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_set: optimizer is NULL");
    int i = hp_index(o, name);
    if (i < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "optimizer '%s' has no hyper-parameter '%s'",
                        o->vt->name, name ? name : "(null)");
    if (isnan(value))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "optimizer '%s': %s is NaN", o->vt->name, name);
    double old = o->hp[i];
    o->hp[i] = value;
    if (o->vt->validate) {
        ot_status s = o->vt->validate(o);
        if (s != OT_OK) {
            o->hp[i] = old;
            return s;
        }
    }
    return OT_OK;
}

ot_status ot_optim_zero_hparam(ot_optimizer *o, const char *name, bool *found) {
    for (; o; o = o->inner)
        if (hp_index(o, name) >= 0) {
            *found = true;
            return ot_optimizer_set(o, name, 0.0);
        }
    return OT_OK;
}

ot_status ot_optimizer_get(const ot_optimizer *o, const char *name, double *value) {
    if (!o || !value) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_get: NULL argument");
    int i = hp_index(o, name);
    if (i < 0)
        return ot_error(OT_ERR_NOT_FOUND, "optimizer '%s' has no hyper-parameter '%s'", o->vt->name,
                        name ? name : "(null)");
    *value = o->hp[i];
    return OT_OK;
}

double ot_optimizer_hparam(const ot_optimizer *o, const char *name) {
    int i = hp_index(o, name);
    return i < 0 ? 0.0 : o->hp[i];
}

int ot_optimizer_state_count(const ot_optimizer *o) {
    return o ? o->vt->state_count(o) : 0;
}

const char *ot_optimizer_state_name(const ot_optimizer *o, int i) {
    if (!o || i < 0 || i >= o->vt->state_count(o)) return NULL;
    return o->vt->state_name(o, i);
}

ot_status ot_optimizer_state_shape(const ot_optimizer *o, int i, const ot_shape *s, ot_shape *out) {
    if (!o || !s || !out)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_state_shape: NULL argument");
    if (i < 0 || i >= o->vt->state_count(o))
        return ot_error(OT_ERR_OUT_OF_RANGE, "optimizer '%s' has no state slot %d", o->vt->name, i);
    if (o->vt->state_shape) return o->vt->state_shape(o, i, s, out);
    *out = *s;
    if (o->vt->state_is_scalar && o->vt->state_is_scalar(o, i))
        ot_shape_make(out, s->dtype, 0, NULL);
    return OT_OK;
}

ot_status ot_optimizer_state_alloc(const ot_optimizer *o, int i, const ot_shape *s0,
                                   ot_tensor *out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_state_alloc: NULL argument");
    ot_shape ss;
    OT_CHECK(ot_optimizer_state_shape(o, i, s0, &ss));
    const ot_shape *s = &ss;
    if (s->dtype != OT_F32 && s->dtype != OT_F64)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "optimizer state: dtype %s (f32 or f64 only)",
                        ot_dtype_name(s->dtype));
    OT_CHECK(ot_tensor_alloc(out, s));
    double v = o->vt->state_init ? o->vt->state_init(o, i) : 0.0;
    int64_t n = ot_shape_numel_unchecked(s);
    for (int64_t k = 0; k < n; k++) {
        if (s->dtype == OT_F32)
            ((float *)out->data)[k] = (float)v;
        else
            ((double *)out->data)[k] = v;
    }
    return OT_OK;
}

int64_t ot_optimizer_step_count(const ot_optimizer *o) {
    return o ? o->steps : 0;
}
void ot_optimizer_advance(ot_optimizer *o) {
    if (o) o->steps++;
}

static bool is_f64_scalar(const ot_instr *i) {
    return i && i->shape.kind == OT_IR_ARRAY && i->shape.array.rank == 0 &&
           i->shape.array.dtype == OT_F64;
}

ot_status ot_optimizer_build(const ot_optimizer *o, const ot_optim_inputs *in,
                             ot_optim_outputs *out) {
    if (!o || !in || !out || !in->c)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_build: NULL argument");
    memset(out, 0, sizeof *out);
    const char *nm = o->vt->name;
    if (ot_optimizer_is_host(o))
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "optimizer '%s' is a host callback: it has no update graph", nm);
    if (!in->param || !in->grad || in->param->shape.kind != OT_IR_ARRAY ||
        in->grad->shape.kind != OT_IR_ARRAY)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "optimizer '%s': param and grad must be arrays",
                        nm);
    const ot_shape *ps = &in->param->shape.array;
    if (ps->dtype != OT_F32 && ps->dtype != OT_F64)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "optimizer '%s': parameter dtype %s (f32 or f64; keep an f32 master copy)",
                        nm, ot_dtype_name(ps->dtype));
    if (!ot_shape_equal(ps, &in->grad->shape.array))
        return ot_error(OT_ERR_SHAPE_MISMATCH,
                        "optimizer '%s': gradient shape/dtype differs from the parameter's", nm);
    int ns = o->vt->state_count(o);
    for (int i = 0; i < ns; i++) {
        ot_shape ss;
        OT_CHECK(ot_optimizer_state_shape(o, i, ps, &ss));
        if (!in->state[i] || in->state[i]->shape.kind != OT_IR_ARRAY ||
            !ot_shape_equal(&ss, &in->state[i]->shape.array))
            return ot_error(OT_ERR_SHAPE_MISMATCH,
                            "optimizer '%s': state '%s' missing or not of its shape", nm,
                            o->vt->state_name(o, i));
    }
    if (!is_f64_scalar(in->step) || !is_f64_scalar(in->lr))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "optimizer '%s': step and lr must be f64 scalars",
                        nm);
    OT_CHECK(o->vt->build(o, in, out));
    OT_CHECK(ot_module_status(in->c->module));
    if (!out->param)
        return ot_error(OT_ERR_INTERNAL, "optimizer '%s': builder produced no parameter", nm);
    for (int i = 0; i < ns; i++)
        if (!out->state[i])
            return ot_error(OT_ERR_INTERNAL, "optimizer '%s': builder produced no state '%s'", nm,
                            o->vt->state_name(o, i));
    return OT_OK;
}

ot_status ot_optimizer_build_module(const ot_optimizer *o, const ot_shape *s, ot_module **out) {
    if (!o || !s || !out)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_build_module: NULL argument");
    *out = NULL;
    if (ot_optimizer_is_host(o))
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "optimizer '%s' is a host callback: it has no update graph", o->vt->name);
    ot_module *m = ot_module_new(o->vt->name);
    if (!m) return ot_error(OT_ERR_OUT_OF_MEMORY, "optimizer module");
    ot_computation *c = ot_module_add_computation(m, "update");
    ot_optim_inputs in = {.c = c};
    int ns = o->vt->state_count(o);
    ot_shape scalar;
    ot_shape_make(&scalar, OT_F64, 0, NULL);
    in.param = ot_build_parameter(c, 0, *s, "param");
    in.grad = ot_build_parameter(c, 1, *s, "grad");
    for (int i = 0; i < ns; i++) {
        ot_shape ss;
        ot_status e = ot_optimizer_state_shape(o, i, s, &ss);
        if (e != OT_OK) {
            ot_module_free(m);
            return e;
        }
        in.state[i] = ot_build_parameter(c, 2 + i, ss, NULL);
    }
    in.step = ot_build_parameter(c, 2 + ns, scalar, "step");
    in.lr = ot_build_parameter(c, 3 + ns, scalar, "lr");
    ot_status st = ot_module_status(m);
    if (st == OT_OK && !in.param) st = ot_error(OT_ERR_OUT_OF_MEMORY, "optimizer module");
    ot_optim_outputs res;
    if (st == OT_OK) st = ot_optimizer_build(o, &in, &res);
    if (st == OT_OK) {
        ot_instr *outs[1 + OT_OPTIM_MAX_STATE];
        outs[0] = res.param;
        for (int i = 0; i < ns; i++) outs[1 + i] = res.state[i];
        ot_computation_set_root(c, ot_build_tuple(c, outs, 1 + ns));
        ot_module_set_entry(m, c);
        st = ot_module_finalize(m);
    }
    if (st != OT_OK) {
        ot_module_free(m);
        return st;
    }
    *out = m;
    return OT_OK;
}

ot_status ot_optimizer_step_reference(ot_optimizer *o, ot_tensor *param, const ot_tensor *grad,
                                      ot_tensor *state, int nstate, double lr) {
    if (!o || !param || !grad || (nstate > 0 && !state))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_optimizer_step_reference: NULL argument");
    const char *nm = o->vt->name;
    if (isnan(lr) || lr < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "optimizer '%s': learning rate %g", nm, lr);
    if (!ot_shape_equal(&param->shape, &grad->shape))
        return ot_error(OT_ERR_SHAPE_MISMATCH,
                        "optimizer '%s': gradient %s rank %d differs from parameter %s rank %d", nm,
                        ot_dtype_name(grad->shape.dtype), grad->shape.rank,
                        ot_dtype_name(param->shape.dtype), param->shape.rank);
    int ns = o->vt->state_count(o);
    if (nstate != ns)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "optimizer '%s': %d state tensors given, needs %d",
                        nm, nstate, ns);
    for (int i = 0; i < ns; i++) {
        ot_shape ss;
        OT_CHECK(ot_optimizer_state_shape(o, i, &param->shape, &ss));
        if (!ot_shape_equal(&ss, &state[i].shape))
            return ot_error(OT_ERR_SHAPE_MISMATCH,
                            "optimizer '%s': state '%s' does not match the parameter", nm,
                            o->vt->state_name(o, i));
    }
    if (ot_optimizer_is_host(o)) { /* the callback runs on copies: nothing changes on failure */
        if (param->shape.dtype != OT_F32 && param->shape.dtype != OT_F64)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "optimizer '%s': parameter dtype %s (f32 or f64)", nm,
                            ot_dtype_name(param->shape.dtype));
        ot_tensor cp[1 + OT_OPTIM_MAX_STATE];
        memset(cp, 0, sizeof cp);
        ot_status st = OT_OK;
        for (int i = 0; i <= ns && st == OT_OK; i++) {
            const ot_tensor *src = i == 0 ? param : &state[i - 1];
            st = ot_tensor_alloc(&cp[i], &src->shape);
            if (st == OT_OK) memcpy(cp[i].data, src->data, src->nbytes);
        }
        void *sp[OT_OPTIM_MAX_STATE] = {0};
        for (int i = 0; i < ns; i++) sp[i] = cp[1 + i].data;
        if (st == OT_OK)
            st = ot_optim_host_call(o, &param->shape, cp[0].data, grad->data, sp, o->steps + 1, lr);
        if (st == OT_OK) {
            memcpy(param->data, cp[0].data, param->nbytes);
            for (int i = 0; i < ns; i++) memcpy(state[i].data, cp[1 + i].data, state[i].nbytes);
            o->steps++;
        }
        for (int i = 0; i <= ns; i++) ot_tensor_release(&cp[i]);
        return st;
    }
    ot_module *m = NULL;
    OT_CHECK(ot_optimizer_build_module(o, &param->shape, &m));
    ot_tensor args[4 + OT_OPTIM_MAX_STATE];
    ot_shape sc;
    ot_shape_make(&sc, OT_F64, 0, NULL);
    double stepv = (double)(o->steps + 1);
    args[0] = *param;
    args[1] = *grad;
    for (int i = 0; i < ns; i++) args[2 + i] = state[i];
    ot_tensor_borrow(&args[2 + ns], &sc, &stepv);
    ot_tensor_borrow(&args[3 + ns], &sc, &lr);
    ot_value r = ot_value_empty();
    ot_status st = ot_evaluate_tensors(m, args, 4 + ns, NULL, &r);
    ot_module_free(m);
    OT_CHECK(st);
    if (ot_value_leaf_count(&r) != 1 + ns) {
        ot_value_release(&r);
        return ot_error(OT_ERR_INTERNAL, "optimizer '%s': update returned the wrong arity", nm);
    }
    memcpy(param->data, ot_value_leaf(&r, 0)->array.data, param->nbytes);
    for (int i = 0; i < ns; i++)
        memcpy(state[i].data, ot_value_leaf(&r, 1 + i)->array.data, state[i].nbytes);
    ot_value_release(&r);
    o->steps++;
    return OT_OK;
}
