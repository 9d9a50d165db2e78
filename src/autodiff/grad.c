/* Reverse-mode automatic differentiation: the driver. The input module is cloned; calls and
 * fusions in the entry are inlined and get-tuple-element of a tuple forwarded; instructions are
 * marked forward (depend on a wrt parameter through floating values) and needed (forward, and a
 * differentiated output depends on them); then, in reverse post order, each needed instruction's
 * rule (rules.c) adds its operands' adjoints, accumulated with add. The root becomes a tuple of
 * the primal outputs followed by the wrt parameters' adjoints. */
#include "autodiff_internal.h"

#include "ir/ir_passes.h"
#include "ir/op_traits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ot_grad_options ot_grad_options_default(void) {
    ot_grad_options o = {.loss_index = -1};
    return o;
}

void ad_acc(ad_ctx *ad, ot_instr *x, ot_instr *g) {
    if (!g) return;
    ad_slot *s = ad_slot_of(ad, x);
    if (!s || !s->need) return;
    s->adj = s->adj ? ot_build_binary(ad->c, OT_OP_ADD, s->adj, g) : g;
}

ot_instr *ad_full(ad_ctx *ad, ot_dtype t, double v, const ot_shape *s) {
    ot_instr *k = ot_build_constant_scalar(ad->c, t, v);
    if (!s || s->rank == 0) return k;
    ot_shape r = *s;
    r.dtype = t;
    return ot_build_broadcast(ad->c, k, r, NULL, 0);
}

/* A scalar computation (x, y) -> op(x, y) (compare with dir when op is COMPARE), made once per
 * dtype and cached. */
ot_computation *ad_binary_fn(ad_ctx *ad, ot_computation **cache, ot_dtype t, ot_opcode op,
                             ot_cmp_dir dir, const char *name) {
    if (*cache) return *cache;
    char nm[64];
    snprintf(nm, sizeof nm, "%s.%s", name, ot_dtype_name(t));
    ot_computation *f = ot_module_add_computation(ad->m, nm);
    if (!f) return NULL;
    ot_instr *x = ot_build_parameter(f, 0, ot_shape_scalar(t), "x");
    ot_instr *y = ot_build_parameter(f, 1, ot_shape_scalar(t), "y");
    ot_instr *r;
    if (op == OT_OP_COMPARE)
        r = ot_build_compare(f, x, y, dir, OT_CMP_TYPE_DEFAULT);
    else if (op == OT_OP_PARAMETER)
        r = y;
    else
        r = ot_build_binary(f, op, x, y);
    ot_computation_set_root(f, r);
    if (ot_module_status(ad->m) != OT_OK) return NULL;
    *cache = f;
    return f;
}

/* ---- preparation: inlining and tuple forwarding ---------------------------------------------- */

/* Copies callee's instructions into c with its parameters bound to args; *root gets the copy of
 * its root. Names are "<name>.<tag>" (made unique when taken). */
static ot_status clone_into(ot_computation *c, const ot_computation *callee, ot_instr *const *args,
                            int nargs, int64_t tag, ot_instr **root) {
    *root = NULL;
    ot_instr **order = NULL;
    int64_t n = 0;
    OT_CHECK(ot_computation_post_order(callee, &order, &n));
    ir_ptr_map map = {0};
    ot_status s = OT_OK;
    ot_instr *ops[64];
    ot_instr **opv = NULL;
    for (int64_t k = 0; k < n && s == OT_OK; k++) {
        ot_instr *ci = order[k];
        ot_instr *ni = NULL;
        if (ci->opcode == OT_OP_PARAMETER) {
            if (ci->attrs->index < 0 || ci->attrs->index >= nargs) {
                s = ot_error(OT_ERR_INTERNAL, "inline %s: parameter %lld has no argument",
                             callee->name, (long long)ci->attrs->index);
                break;
            }
            ni = args[ci->attrs->index];
        } else {
            ot_instr **o = ops;
            if (ci->noperands > 64) {
                ot_free(opv);
                opv = ot_malloc((size_t)ci->noperands * sizeof *opv);
                if (!opv) {
                    s = ot_error(OT_ERR_OUT_OF_MEMORY, "autodiff: out of memory");
                    break;
                }
                o = opv;
            }
            for (int q = 0; q < ci->noperands; q++) o[q] = ir_ptr_map_get(&map, ci->operands[q]);
            char nm[256];
            snprintf(nm, sizeof nm, "%.200s.%lld", ci->name, (long long)tag);
            s = ot_instr_clone(c, ci, o, ot_computation_find_instr(c, nm) ? NULL : nm, &ni);
        }
        if (s == OT_OK) s = ir_ptr_map_put(&map, ci, ni);
    }
    *root = s == OT_OK ? ir_ptr_map_get(&map, callee->root) : NULL;
    ir_ptr_map_free(&map);
    ot_free(opv);
    ot_free(order);
    OT_CHECK(s);
    if (!*root) return ot_error(OT_ERR_INTERNAL, "inline %s: no root", callee->name);
    return OT_OK;
}

/* ---- loops with a static trip count ------------------------------------------------------------
 */

static bool const_int(const ot_instr *i, int64_t *v) {
    if (i->opcode != OT_OP_CONSTANT || i->shape.kind != OT_IR_ARRAY || i->shape.array.rank != 0)
        return false;
    const ot_literal *l = i->attrs->literal;
    if (!l || l->elided || !l->data) return false;
    switch (i->shape.array.dtype) {
    case OT_S8: *v = *(const int8_t *)l->data; return true;
    case OT_S16: *v = *(const int16_t *)l->data; return true;
    case OT_S32: *v = *(const int32_t *)l->data; return true;
    case OT_S64: *v = *(const int64_t *)l->data; return true;
    default: return false; /* unsigned counters: not recognized */
    }
}

/* k when x is get-tuple-element(parameter 0, k), else -1. */
static int64_t param_elem(const ot_instr *x) {
    if (x->opcode == OT_OP_GET_TUPLE_ELEMENT && x->operands[0]->opcode == OT_OP_PARAMETER &&
        x->operands[0]->attrs->index == 0)
        return x->attrs->index;
    return -1;
}

static bool holds(int64_t a, int64_t b, ot_cmp_dir d) {
    switch (d) {
    case OT_CMP_EQ: return a == b;
    case OT_CMP_NE: return a != b;
    case OT_CMP_LT: return a < b;
    case OT_CMP_LE: return a <= b;
    case OT_CMP_GT: return a > b;
    default: return a >= b;
    }
}

#define MAX_UNROLLED_INSTRS 2000000

/* The trip count of a loop whose condition compares an integer counter (a tuple element that
 * starts from a constant and that the body steps by a constant) with a constant: the form JAX's
 * fori_loop and scan produce. */
static bool trip_count(const ot_instr *w, int64_t *out) {
    const ot_computation *cond = w->called[0], *body = w->called[1];
    int64_t limit = MAX_UNROLLED_INSTRS / (body->ninstrs > 0 ? body->ninstrs : 1);
    /* XLA's own analysis, as optimized modules carry it:
     * backend_config={"known_trip_count":{"n":"6"},...} */
    const char *bc = w->attrs->backend_config, *kt;
    if (bc && (kt = strstr(bc, "\"known_trip_count\""))) {
        const char *nk = strstr(kt, "\"n\"");
        if (nk) {
            nk += 3;
            while (*nk == ':' || *nk == ' ' || *nk == '"') nk++;
            char *end;
            long long n = strtoll(nk, &end, 10);
            if (end != nk && n >= 0 && n <= limit) {
                *out = n;
                return true;
            }
        }
    }
    const ot_instr *init = w->operands[0], *r = cond->root, *br = body->root;
    if (!r || r->opcode != OT_OP_COMPARE || !br || br->opcode != OT_OP_TUPLE ||
        init->opcode != OT_OP_TUPLE)
        return false;
    ot_cmp_dir dir = r->attrs->cmp_dir;
    int64_t k, bound, v, step;
    if ((k = param_elem(r->operands[0])) >= 0 && const_int(r->operands[1], &bound)) {
    } else if ((k = param_elem(r->operands[1])) >= 0 && const_int(r->operands[0], &bound)) {
        static const ot_cmp_dir flip[] = {OT_CMP_EQ, OT_CMP_NE, OT_CMP_GT,
                                          OT_CMP_GE, OT_CMP_LT, OT_CMP_LE};
        dir = flip[dir];
    } else {
        return false;
    }
    if (k >= init->noperands || k >= br->noperands || !const_int(init->operands[k], &v))
        return false;
    const ot_instr *nx = br->operands[k];
    if (nx->opcode == OT_OP_ADD && param_elem(nx->operands[0]) == k &&
        const_int(nx->operands[1], &step)) {
    } else if (nx->opcode == OT_OP_ADD && param_elem(nx->operands[1]) == k &&
               const_int(nx->operands[0], &step)) {
    } else if (nx->opcode == OT_OP_SUBTRACT && param_elem(nx->operands[0]) == k &&
               const_int(nx->operands[1], &step)) {
        step = -step;
    } else {
        return false;
    }
    int64_t n = 0;
    while (holds(v, bound, dir)) {
        if (++n > limit || step == 0) return false;
        v += step;
    }
    *out = n;
    return true;
}

/* Replaces a call or fusion by a copy of its callee's instructions, or a while loop with a static
 * trip count by that many copies of its body. */
static ot_status inline_one(ot_computation *c, ot_instr *i, int64_t trips, int64_t *tag) {
    ot_instr *root = NULL;
    if (i->opcode == OT_OP_WHILE) {
        root = i->operands[0];
        for (int64_t t = 0; t < trips; t++) {
            ot_instr *state = root;
            OT_CHECK(clone_into(c, i->called[1], &state, 1, (*tag)++, &root));
        }
    } else {
        OT_CHECK(clone_into(c, i->called[0], i->operands, i->noperands, (*tag)++, &root));
    }
    OT_CHECK(ot_instr_replace_all_uses(i, root));
    return ot_instr_remove(i);
}

/* The first while loop in c that depends on a source and has a static trip count. */
static ot_status find_loop(ot_computation *c, ot_instr *const *src, int nsrc, ot_instr **loop,
                           int64_t *trips) {
    *loop = NULL;
    bool any = false;
    for (ot_instr *i = c->first; i && !any; i = i->next) any = i->opcode == OT_OP_WHILE;
    if (!any) return OT_OK;
    ot_instr **order = NULL;
    int64_t n = 0;
    OT_CHECK(ot_computation_post_order(c, &order, &n));
    for (int64_t k = 0; k < n; k++) order[k]->mark = 0;
    for (int k = 0; k < nsrc; k++) src[k]->mark = 1;
    for (int64_t k = 0; k < n && !*loop; k++) {
        ot_instr *i = order[k];
        for (int q = 0; q < i->noperands && !i->mark; q++) i->mark = i->operands[q]->mark;
        if (i->opcode == OT_OP_WHILE && i->mark && trip_count(i, trips)) *loop = i;
    }
    for (int64_t k = 0; k < n; k++) order[k]->mark = 0;
    ot_free(order);
    return OT_OK;
}

static ot_status prepare(ot_computation *c, ot_instr *const *src, int nsrc, int64_t *tag) {
    for (bool again = true; again;) {
        again = false;
        for (ot_instr *i = c->first; i; i = i->next)
            if ((i->opcode == OT_OP_CALL || i->opcode == OT_OP_FUSION) && i->ncalled == 1) {
                OT_CHECK(inline_one(c, i, 0, tag));
                again = true;
                break;
            }
        if (again) continue;
        ot_instr *loop;
        int64_t trips = 0;
        OT_CHECK(find_loop(c, src, nsrc, &loop, &trips));
        if (loop) {
            OT_CHECK(inline_one(c, loop, trips, tag));
            again = true;
        }
    }
    ot_instr **order = NULL;
    int64_t n = 0;
    OT_CHECK(ot_computation_post_order(c, &order, &n));
    ot_status s = OT_OK;
    for (int64_t k = 0; k < n && s == OT_OK; k++) {
        ot_instr *i = order[k];
        if (i->opcode != OT_OP_GET_TUPLE_ELEMENT || i->operands[0]->opcode != OT_OP_TUPLE) continue;
        ot_instr *e = i->operands[0]->operands[i->attrs->index];
        s = ot_instr_replace_all_uses(i, e);
        if (s == OT_OK) s = ot_instr_remove(i), order[k] = NULL;
    }
    /* inlining appended the callees' instructions after their users: put the list back in
     * definition order (the post order), which evaluation and printing follow */
    if (s == OT_OK) {
        ot_instr *prev = NULL;
        c->first = NULL;
        for (int64_t k = 0; k < n; k++) {
            ot_instr *i = order[k];
            if (!i) continue;
            i->prev = prev;
            i->next = NULL;
            if (prev)
                prev->next = i;
            else
                c->first = i;
            prev = i;
        }
        c->last = prev;
    }
    ot_free(order);
    return s;
}

/* Removes instructions nothing uses (never the root, parameters or side-effecting ones). */
static ot_status dce(ot_computation *c) {
    for (bool again = true; again;) {
        again = false;
        for (ot_instr *i = c->last, *p; i; i = p) {
            p = i->prev;
            if (i->nusers || i == c->root || i->opcode == OT_OP_PARAMETER ||
                ot_instr_has_side_effect(i))
                continue;
            OT_CHECK(ot_instr_remove(i));
            again = true;
        }
    }
    return OT_OK;
}

/* ---- outputs ----------------------------------------------------------------------------------
 */

typedef struct leaves {
    ot_instr **v;
    int n, cap;
} leaves;

static ot_status leaves_push(leaves *l, ot_instr *x) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        ot_instr **v = ot_realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return ot_error(OT_ERR_OUT_OF_MEMORY, "autodiff: out of memory");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return OT_OK;
}

/* The elements of a tuple-shaped instruction (its operands when it is a tuple instruction,
 * get-tuple-elements otherwise). */
static ot_instr *element(ot_computation *c, ot_instr *t, int k) {
    if (t->opcode == OT_OP_TUPLE) return t->operands[k];
    return ot_build_get_tuple_element(c, t, k);
}

/* Array leaves, depth first (tokens skipped). */
static ot_status flatten(ot_module *m, ot_computation *c, ot_instr *x, leaves *l) {
    if (!x) return ot_module_status(m);
    if (x->shape.kind == OT_IR_ARRAY) return leaves_push(l, x);
    if (x->shape.kind != OT_IR_TUPLE) return OT_OK;
    for (int k = 0; k < x->shape.ntuple; k++) OT_CHECK(flatten(m, c, element(c, x, k), l));
    return OT_OK;
}

/* ---- the reverse pass over one computation ----------------------------------------------------
 */

/* Marks c's instructions forward from the sources and needed back from the seeds, adds each seed
 * value to its instruction's adjoint and applies the rules in reverse post order; adj_out[k]
 * gets src[k]'s adjoint (NULL: zero). */
static ot_status ad_reverse(ad_ctx *parent, ot_computation *c, ot_instr *const *src, int nsrc,
                            ot_instr *const *seed_at, ot_instr *const *seed_val, int nseed,
                            ot_instr **adj_out) {
    ad_ctx ad = *parent;
    ad.c = c;
    ot_instr **order = NULL;
    int64_t n = 0;
    OT_CHECK(ot_computation_post_order(c, &order, &n));
    ad.slots = ot_calloc((size_t)(n ? n : 1), sizeof *ad.slots);
    ad.nslots = n;
    ot_status s = OT_OK;
    if (!ad.slots) {
        ot_free(order);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "autodiff: out of memory");
    }
    for (int64_t k = 0; k < n; k++) order[k]->mark = k + 1;
    for (int k = 0; k < nsrc; k++) {
        ad_slot *sl = ad_slot_of(&ad, src[k]);
        if (!sl) continue;
        sl->src = true;
        sl->fwd = src[k]->shape.kind == OT_IR_ARRAY && ot_dtype_is_float(src[k]->shape.array.dtype);
    }
    for (int64_t k = 0; k < n; k++) {
        ot_instr *i = order[k];
        ad_slot *sl = &ad.slots[k];
        if (sl->fwd || sl->src || i->opcode == OT_OP_PARAMETER) continue;
        bool any = false;
        for (int q = 0; q < i->noperands && !any; q++) {
            ad_slot *o = ad_slot_of(&ad, i->operands[q]);
            any = o && o->fwd;
        }
        if (!any) continue;
        if (ir_instr_complex(i)) { /* refused rather than a gradient silently cut off here */
            s = ot_error(OT_ERR_UNIMPLEMENTED,
                         "autodiff: %s (%s) carries a gradient through complex values, which is "
                         "not implemented",
                         i->name ? i->name : "?", ot_opcode_name(i->opcode));
            break;
        }
        if (i->shape.kind == OT_IR_ARRAY)
            sl->fwd = ot_dtype_is_float(i->shape.array.dtype);
        else
            sl->fwd = i->shape.kind == OT_IR_TUPLE;
    }
    for (int k = 0; k < nseed; k++) {
        ot_instr *o = seed_at[k];
        if (o->shape.kind != OT_IR_ARRAY || !ot_dtype_is_float(o->shape.array.dtype)) continue;
        ad_slot *sl = ad_slot_of(&ad, o);
        if (sl && sl->fwd) sl->need = true;
    }
    for (int64_t k = n - 1; k >= 0; k--) {
        ot_instr *i = order[k];
        ad_slot *sl = &ad.slots[k];
        if (!sl->fwd || sl->need) continue;
        for (int u = 0; u < i->nusers && !sl->need; u++) {
            ad_slot *us = ad_slot_of(&ad, i->users[u]);
            sl->need = us && us->need;
        }
    }
    for (int k = 0; k < nseed && s == OT_OK; k++) {
        ot_instr *o = seed_at[k];
        if (o->shape.kind != OT_IR_ARRAY || !ot_dtype_is_float(o->shape.array.dtype)) continue;
        ad_acc(&ad, o, seed_val[k]);
    }
    for (int64_t k = n - 1; k >= 0 && s == OT_OK; k--) {
        ot_instr *i = order[k];
        ad_slot *sl = &ad.slots[k];
        if (!sl->need || sl->src || i->opcode == OT_OP_PARAMETER) continue;
        s = ad_rule(&ad, i, sl->adj);
        if (s == OT_OK) s = ot_module_status(ad.m);
    }
    for (int k = 0; k < nsrc; k++) {
        ad_slot *sl = ad_slot_of(&ad, src[k]);
        adj_out[k] = s == OT_OK && sl ? sl->adj : NULL;
    }
    for (int64_t k = 0; k < n; k++) {
        order[k]->mark = 0;
        ot_free(ad.slots[k].elem);
    }
    ot_free(ad.slots);
    ot_free(order);
    return s;
}

/* ---- conditional -------------------------------------------------------------------------------
 */

/* Leaves of a conditional operand or result: the array itself, or a tuple's array elements. */
static int leaf_count(const ot_ir_shape *s) {
    if (s->kind == OT_IR_ARRAY) return 1;
    if (s->kind != OT_IR_TUPLE) return -1;
    for (int k = 0; k < s->ntuple; k++)
        if (s->tuple[k].kind != OT_IR_ARRAY) return -1;
    return s->ntuple;
}
static const ot_shape *leaf_shape(const ot_ir_shape *s, int k) {
    return s->kind == OT_IR_ARRAY ? &s->array : &s->tuple[k].array;
}

/* Branch b's reverse computation: parameter (operand_b, cotangent) -> a tuple with an element per
 * leaf of every branch's operand: this branch's adjoints, zeros for the others. */
static ot_status branch_vjp(ad_ctx *ad, ot_instr *i, int b, ot_instr *ct, ot_computation **out) {
    ot_instr *arg = i->operands[1 + b];
    const ot_computation *br = i->called[b];
    char nm[256];
    snprintf(nm, sizeof nm, "%.200s.vjp", br->name);
    ot_computation *v = ot_module_add_computation(ad->m, nm);
    if (!v) return ot_module_status(ad->m);
    ot_ir_shape pel[2] = {arg->shape, ct->shape};
    ot_ir_shape ps = {.kind = OT_IR_TUPLE, .ntuple = 2, .tuple = pel};
    ot_instr *p = ot_build_parameter_ir(v, 0, &ps, "operand_cotangent");
    ot_instr *a = ot_build_get_tuple_element(v, p, 0);
    ot_instr *cv = ot_build_get_tuple_element(v, p, 1);
    int na = leaf_count(&arg->shape);
    ot_instr *src[OT_MAX_RANK * 8], *targ = a;
    if (na > (int)(sizeof src / sizeof src[0]))
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "autodiff: conditional %s: an operand with %d "
                        "elements",
                        i->name, na);
    if (arg->shape.kind == OT_IR_TUPLE) {
        for (int k = 0; k < na; k++) src[k] = ot_build_get_tuple_element(v, a, k);
        targ = ot_build_tuple(v, src, na);
    } else {
        src[0] = a;
    }
    OT_CHECK(ot_module_status(ad->m));
    ot_instr *root = NULL;
    OT_CHECK(clone_into(v, br, &targ, 1, (*ad->tag)++, &root));
    ot_computation_set_root(v, root);
    OT_CHECK(ot_module_status(ad->m));
    OT_CHECK(prepare(v, src, na, ad->tag));
    root = v->root;
    int nr = leaf_count(&root->shape);
    ot_instr *seed_at[OT_MAX_RANK * 8], *seed_val[OT_MAX_RANK * 8], *adj[OT_MAX_RANK * 8];
    if (nr < 0 || nr > (int)(sizeof seed_at / sizeof seed_at[0]))
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "autodiff: conditional %s: a branch result that is not an array or a "
                        "tuple of at most %d arrays",
                        i->name, (int)(sizeof seed_at / sizeof seed_at[0]));
    for (int k = 0; k < nr; k++) {
        seed_at[k] = root->shape.kind == OT_IR_TUPLE ? element(v, root, k) : root;
        seed_val[k] = root->shape.kind == OT_IR_TUPLE ? ot_build_get_tuple_element(v, cv, k) : cv;
    }
    OT_CHECK(ot_module_status(ad->m));
    OT_CHECK(ad_reverse(ad, v, src, na, seed_at, seed_val, nr, adj));
    /* the result: every branch's operand leaves */
    ad_ctx vad = *ad;
    vad.c = v;
    leaves res = {0};
    ot_status s = OT_OK;
    for (int q = 0; q < i->ncalled && s == OT_OK; q++) {
        const ot_ir_shape *as = &i->operands[1 + q]->shape;
        int nq = leaf_count(as);
        for (int k = 0; k < nq && s == OT_OK; k++) {
            const ot_shape *ls = leaf_shape(as, k);
            ot_instr *e = q == b && adj[k] ? adj[k] : ad_full(&vad, ls->dtype, 0, ls);
            s = e ? leaves_push(&res, e) : ot_module_status(ad->m);
        }
    }
    if (s == OT_OK) ot_computation_set_root(v, ot_build_tuple(v, res.v, res.n));
    ot_free(res.v);
    OT_CHECK(s);
    OT_CHECK(ot_module_status(ad->m));
    OT_CHECK(dce(v));
    *out = v;
    return OT_OK;
}

ot_status ad_rule_conditional(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_computation *c = ad->c;
    ad_slot *sl = ad_slot_of(ad, i);
    int nres = leaf_count(&i->shape);
    if (nres < 0 || nres > OT_MAX_RANK * 8)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "autodiff: no reverse-mode rule for conditional (%s): its result is not "
                        "an array or a tuple of arrays",
                        i->name);
    for (int b = 0; b < i->ncalled; b++) {
        const ot_instr *arg = i->operands[1 + b];
        if (leaf_count(&arg->shape) < 0 ||
            (arg->shape.kind == OT_IR_TUPLE && arg->opcode != OT_OP_TUPLE))
            return ot_error(OT_ERR_UNIMPLEMENTED,
                            "autodiff: no reverse-mode rule for conditional (%s): operand %d is "
                            "not an array or a tuple instruction of arrays",
                            i->name, 1 + b);
    }
    /* the cotangent of the result (zeros for elements with none) */
    ot_instr *ct = g;
    if (i->shape.kind == OT_IR_TUPLE) {
        ot_instr *el[OT_MAX_RANK * 8];
        for (int k = 0; k < nres; k++) {
            const ot_shape *ls = leaf_shape(&i->shape, k);
            el[k] = sl && sl->elem && sl->elem[k] ? sl->elem[k] : ad_full(ad, ls->dtype, 0, ls);
        }
        ct = ot_build_tuple(c, el, nres);
    }
    OT_CHECK(ot_module_status(ad->m));
    ot_computation *v[64];
    ot_instr *ops[64];
    if (i->ncalled > 64)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "autodiff: conditional %s has %d branches (64 at most)", i->name,
                        i->ncalled);
    for (int b = 0; b < i->ncalled; b++) {
        OT_CHECK(branch_vjp(ad, i, b, ct, &v[b]));
        ot_instr *pair[2] = {i->operands[1 + b], ct};
        ops[b] = ot_build_tuple(c, pair, 2);
    }
    ot_instr *rc = ot_build_conditional(c, i->operands[0], v, ops, i->ncalled);
    OT_CHECK(ot_module_status(ad->m));
    int off = 0;
    for (int b = 0; b < i->ncalled; b++) {
        ot_instr *arg = i->operands[1 + b];
        int na = leaf_count(&arg->shape);
        for (int k = 0; k < na; k++) {
            ot_instr *t = arg->shape.kind == OT_IR_TUPLE ? arg->operands[k] : arg;
            ad_acc(ad, t, ot_build_get_tuple_element(c, rc, off + k));
        }
        off += na;
    }
    return OT_OK;
}

/* ---- sort
 * ----------------------------------------------------------------------------------------
 */

ot_status ad_rule_sort(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_computation *c = ad->c;
    ad_slot *sl = ad_slot_of(ad, i);
    int n = i->noperands;
    const ot_computation *cmp = i->called[0];
    int64_t d = i->attrs->index;
    if (n + 1 > OT_MAX_RANK)
        return ot_error(OT_ERR_UNIMPLEMENTED, "autodiff: sort %s of %d operands (%d at most)",
                        i->name, n, OT_MAX_RANK - 1);
    ot_shape is = i->operands[0]->shape.array;
    is.dtype = OT_S32;
    /* the comparator with two more (ignored) s32 parameters for the iota */
    char nm[256];
    snprintf(nm, sizeof nm, "%.200s.with_iota", cmp->name);
    ot_computation *f = ot_module_add_computation(ad->m, nm);
    if (!f) return ot_module_status(ad->m);
    ot_instr *fp[2 * OT_MAX_RANK];
    for (int k = 0; k < 2 * n; k++)
        fp[k] = ot_build_parameter_ir(f, k, &cmp->params[k]->shape, cmp->params[k]->name);
    ot_build_parameter(f, 2 * n, ot_shape_scalar(OT_S32), "iota.lhs");
    ot_build_parameter(f, 2 * n + 1, ot_shape_scalar(OT_S32), "iota.rhs");
    OT_CHECK(ot_module_status(ad->m));
    ot_instr *froot = NULL;
    OT_CHECK(clone_into(f, cmp, fp, 2 * n, (*ad->tag)++, &froot));
    ot_computation_set_root(f, froot);
    ot_instr *ops[OT_MAX_RANK];
    for (int k = 0; k < n; k++) ops[k] = i->operands[k];
    ops[n] = ot_build_iota(c, is, d);
    ot_instr *st = ot_build_sort(c, ops, n + 1, d, i->attrs->is_stable, f);
    ot_instr *perm = ot_build_get_tuple_element(c, st, n);
    OT_CHECK(ot_module_status(ad->m));
    for (int k = 0; k < n; k++) {
        ot_instr *gk = n == 1 ? g : sl && sl->elem ? sl->elem[k] : NULL;
        ad_slot *xs = ad_slot_of(ad, i->operands[k]);
        if (!gk || !xs || !xs->need) continue;
        ot_dtype t = i->operands[k]->shape.array.dtype;
        ot_computation **cache = &ad->fns->unperm_fn[t];
        if (!*cache) {
            snprintf(nm, sizeof nm, "grad_unpermute.%s", ot_dtype_name(t));
            ot_computation *u = ot_module_add_computation(ad->m, nm);
            if (!u) return ot_module_status(ad->m);
            ot_instr *a = ot_build_parameter(u, 0, ot_shape_scalar(OT_S32), "a");
            ot_instr *b = ot_build_parameter(u, 1, ot_shape_scalar(OT_S32), "b");
            ot_build_parameter(u, 2, ot_shape_scalar(t), "x");
            ot_build_parameter(u, 3, ot_shape_scalar(t), "y");
            ot_computation_set_root(u, ot_build_compare(u, a, b, OT_CMP_LT, OT_CMP_TYPE_DEFAULT));
            OT_CHECK(ot_module_status(ad->m));
            *cache = u;
        }
        ot_instr *pair[2] = {perm, gk};
        ot_instr *back = ot_build_sort(c, pair, 2, d, false, *cache);
        ad_acc(ad, i->operands[k], ot_build_get_tuple_element(c, back, 1));
    }
    return ot_module_status(ad->m);
}

/* ---- the driver -------------------------------------------------------------------------------
 */

static ot_status check_wrt(const ot_computation *e, const int64_t *wrt, int nwrt) {
    if (nwrt < 0) return ot_error(OT_ERR_INVALID_ARGUMENT, "autodiff: nwrt is %d", nwrt);
    if (nwrt > 0 && !wrt) return ot_error(OT_ERR_INVALID_ARGUMENT, "autodiff: wrt is NULL");
    for (int k = 0; k < nwrt; k++) {
        int64_t p = wrt[k];
        if (p < 0 || p >= e->nparams || !e->params[p])
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "autodiff: wrt[%d] = %lld is out of range (the entry %s has %d "
                            "parameters)",
                            k, (long long)p, e->name, e->nparams);
        for (int q = 0; q < k; q++)
            if (wrt[q] == p)
                return ot_error(OT_ERR_INVALID_ARGUMENT,
                                "autodiff: wrt[%d] = %lld duplicates wrt[%d]", k, (long long)p, q);
        const ot_instr *pi = e->params[p];
        if (pi->shape.kind != OT_IR_ARRAY || !ot_dtype_is_float(pi->shape.array.dtype)) {
            char b[128];
            ot_ir_shape_format(&pi->shape, b, sizeof b);
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "autodiff: wrt[%d] = %lld: parameter %s is %s, not a floating-point "
                            "array",
                            k, (long long)p, pi->name, b);
        }
    }
    return OT_OK;
}

/* Builds the reverse pass. vjp: cotangent parameters per root leaf; else loss_index as in
 * ot_grad_options. */
static ot_status differentiate(const ot_module *src, const int64_t *wrt, int nwrt, bool vjp,
                               int loss_index, ot_module **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "autodiff: out is NULL");
    *out = NULL;
    if (!src) return ot_error(OT_ERR_INVALID_ARGUMENT, "autodiff: module is NULL");
    const ot_computation *se = ot_module_entry(src);
    if (!se) return ot_error(OT_ERR_INVALID_ARGUMENT, "autodiff: the module has no entry");
    OT_CHECK(check_wrt(se, wrt, nwrt));
    if (!se->root) return ot_error(OT_ERR_INVALID_ARGUMENT, "autodiff: the entry has no root");
    if (!vjp) {
        const ot_ir_shape *rs = &se->root->shape;
        if (loss_index < -1)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "autodiff: loss_index %d is invalid",
                            loss_index);
        if (loss_index >= 0 && rs->kind != OT_IR_TUPLE)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "autodiff: loss_index %d but the entry root is not a tuple",
                            loss_index);
        if (loss_index >= 0 && loss_index >= rs->ntuple)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "autodiff: loss_index %d is out of range (the root tuple has %d "
                            "elements)",
                            loss_index, rs->ntuple);
        const ot_ir_shape *ls = loss_index >= 0 ? &rs->tuple[loss_index] : rs;
        if (ls->kind != OT_IR_ARRAY || ls->array.rank != 0 || !ot_dtype_is_float(ls->array.dtype)) {
            char b[128];
            ot_ir_shape_format(ls, b, sizeof b);
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "autodiff: the loss (%s) is %s, not a floating-point scalar",
                            loss_index >= 0 ? "root tuple element" : "entry root", b);
        }
    }

    ot_module *m = NULL;
    OT_CHECK(ot_module_clone(src, &m));
    /* the outputs change: the entry layout and input/output aliases no longer apply */
    ot_module_clear_entry_contract(m);
    ot_computation *c = ot_module_entry(m);
    ad_fns fns;
    memset(&fns, 0, sizeof fns);
    int64_t tag = 0;
    ad_ctx ad;
    memset(&ad, 0, sizeof ad);
    ad.m = m;
    ad.c = c;
    ad.fns = &fns;
    ad.tag = &tag;
    leaves outs = {0}, seeds = {0};
    ot_status s = OT_OK;
    ot_instr **srcs = ot_calloc((size_t)(nwrt ? nwrt : 1), sizeof *srcs);
    ot_instr **grads = ot_calloc((size_t)(nwrt ? nwrt : 1), sizeof *grads);
    if (!srcs || !grads) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "autodiff: out of memory");
        goto done;
    }
    for (int k = 0; k < nwrt; k++) srcs[k] = c->params[wrt[k]];
    s = prepare(c, srcs, nwrt, &tag);
    if (s != OT_OK) goto done;

    /* outputs of the new root, and the values seeded with a cotangent */
    ot_instr *root = c->root;
    if (vjp) {
        s = flatten(m, c, root, &outs);
    } else if (root->shape.kind == OT_IR_TUPLE) {
        for (int k = 0; k < root->shape.ntuple && s == OT_OK; k++) {
            ot_instr *e = element(c, root, k);
            s = e ? leaves_push(&outs, e) : ot_module_status(m);
        }
    } else {
        s = leaves_push(&outs, root);
    }
    if (s != OT_OK) goto done;
    int64_t nparams = c->nparams;
    if (vjp) {
        for (int k = 0; k < outs.n && s == OT_OK; k++) {
            char nm[48];
            snprintf(nm, sizeof nm, "cotangent.%d", k);
            ot_instr *p = ot_build_parameter(c, nparams + k, outs.v[k]->shape.array, nm);
            s = p ? leaves_push(&seeds, p) : ot_module_status(m);
        }
    } else {
        ot_instr *loss = outs.v[loss_index >= 0 ? loss_index : 0];
        ot_instr *one = ot_build_constant_scalar(c, loss->shape.array.dtype, 1.0);
        s = one ? leaves_push(&seeds, one) : ot_module_status(m);
    }
    if (s != OT_OK) goto done;

    /* the reverse pass from the wrt parameters */
    if (vjp) {
        s = ad_reverse(&ad, c, srcs, nwrt, outs.v, seeds.v, outs.n, grads);
    } else {
        ot_instr *loss = outs.v[loss_index >= 0 ? loss_index : 0];
        s = ad_reverse(&ad, c, srcs, nwrt, &loss, seeds.v, 1, grads);
    }
    if (s != OT_OK) goto done;

    /* the new root: outputs, then gradients */
    for (int k = 0; k < nwrt; k++) {
        ot_instr *p = c->params[wrt[k]];
        if (!grads[k]) grads[k] = ad_full(&ad, p->shape.array.dtype, 0, &p->shape.array);
    }
    for (int k = 0; k < nwrt && s == OT_OK; k++) s = leaves_push(&outs, grads[k]);
    if (s != OT_OK) goto done;
    ot_instr *nr = ot_build_tuple(c, outs.v, outs.n);
    ot_computation_set_root(c, nr);
    s = ot_module_status(m);
    if (s == OT_OK) s = dce(c);
    if (s == OT_OK) s = ot_module_finalize(m);

done:
    /* anything but these means a rule built an invalid graph */
    if (s != OT_OK && s != OT_ERR_OUT_OF_MEMORY && s != OT_ERR_UNIMPLEMENTED &&
        s != OT_ERR_INTERNAL)
        s = ot_error_wrap(OT_ERR_INTERNAL, "autodiff built an invalid graph");
    for (ot_instr *i = c ? c->first : NULL; i; i = i->next) i->mark = 0;
    ot_free(srcs);
    ot_free(grads);
    ot_free(outs.v);
    ot_free(seeds.v);
    if (s != OT_OK) {
        ot_module_free(m);
        return s;
    }
    *out = m;
    return OT_OK;
}

ot_status ot_grad(const ot_module *m, const int64_t *wrt, int nwrt, const ot_grad_options *o,
                  ot_module **out) {
    ot_grad_options d = o ? *o : ot_grad_options_default();
    return differentiate(m, wrt, nwrt, false, d.loss_index, out);
}

ot_status ot_vjp(const ot_module *m, const int64_t *wrt, int nwrt, ot_module **out) {
    return differentiate(m, wrt, nwrt, true, -1, out);
}
