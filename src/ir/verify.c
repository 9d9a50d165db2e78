/* The verifier: links, acyclicity, parameters, roots, shapes and each op's invariants. Linear in
 * the number of instructions and operand slots (stamps indexed by instruction id, no scans of
 * user lists). */
#include "ir_internal.h"

typedef struct vctx {
    const ot_module *m;
    int64_t *stamp; /* by instruction id */
    int64_t nstamp;
} vctx;

static ot_status verify_comp(vctx *v, const ot_computation *c) {
    const ot_module *m = v->m;
    if (c->module != m) return ot_error(OT_ERR_INTERNAL, "computation %s: wrong module", c->name);
    /* list structure */
    int64_t count = 0;
    const ot_instr *prev = NULL;
    for (const ot_instr *i = c->first; i; i = i->next) {
        if (++count > c->ninstrs)
            return ot_error(OT_ERR_INTERNAL, "computation %s: list longer than its count %lld",
                            c->name, (long long)c->ninstrs);
        if (i->prev != prev || i->parent != c || i->dead_)
            return ot_error(OT_ERR_INTERNAL, "computation %s: broken list at %s", c->name, i->name);
        if (i->id < 0 || i->id >= v->nstamp)
            return ot_error(OT_ERR_INTERNAL, "%s: id %lld out of range", i->name, (long long)i->id);
        if (ot_computation_find_instr(c, i->name) != i)
            return ot_error(OT_ERR_INTERNAL, "%s: name index out of sync", i->name);
        prev = i;
    }
    if (count != c->ninstrs || c->last != prev)
        return ot_error(OT_ERR_INTERNAL, "computation %s: count %lld, list has %lld", c->name,
                        (long long)c->ninstrs, (long long)count);
    if (!c->root)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "computation %s has no root instruction", c->name);
    if (c->root->parent != c || c->root->dead_)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "computation %s: root %s is not one of its "
                        "instructions",
                        c->name, c->root->name);
    /* parameters */
    int seen_params = 0;
    for (int k = 0; k < c->nparams; k++) {
        const ot_instr *p = c->params[k];
        if (!p)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "computation %s: parameter %d is missing (numbers must be 0..%d)",
                            c->name, k, c->nparams - 1);
        if (p->opcode != OT_OP_PARAMETER || p->attrs.index != k || p->parent != c || p->dead_)
            return ot_error(OT_ERR_INTERNAL, "computation %s: parameter table broken at %d",
                            c->name, k);
    }
    /* links: each user entry is a real, distinct, live user; then counts match */
    int64_t pairs = 0, entries = 0;
    for (const ot_instr *o = c->first; o; o = o->next) {
        for (int k = 0; k < o->nusers; k++) {
            const ot_instr *u = o->users[k];
            if (!u || u->dead_ || u->parent != c)
                return ot_error(OT_ERR_INTERNAL, "%s: user %d is not a live instruction of %s",
                                o->name, k, c->name);
            bool found = false;
            for (int j = 0; j < u->noperands && !found; j++) found = u->operands[j] == o;
            if (!found)
                return ot_error(OT_ERR_INTERNAL, "%s lists %s as a user, which does not use it",
                                o->name, u->name);
            if (v->stamp[u->id] == o->id + 1)
                return ot_error(OT_ERR_INTERNAL, "%s lists user %s twice", o->name, u->name);
            v->stamp[u->id] = o->id + 1;
            entries++;
        }
    }
    for (const ot_instr *u = c->first; u; u = u->next) {
        if (u->opcode == OT_OP_PARAMETER) seen_params++;
        for (int k = 0; k < u->noperands; k++) {
            const ot_instr *o = u->operands[k];
            if (!o || o->dead_ || o->parent != c)
                return ot_error(OT_ERR_INVALID_ARGUMENT,
                                "%s: operand %d is not a live instruction of %s", u->name, k,
                                c->name);
            bool dup = false;
            for (int j = 0; j < k && !dup; j++) dup = u->operands[j] == o;
            if (!dup) pairs++;
        }
        for (int k = 0; k < u->ncalled; k++) {
            const ot_computation *cc = u->called[k];
            if (!cc || cc->module != m || ot_module_find_computation(m, cc->name) != cc)
                return ot_error(OT_ERR_INVALID_ARGUMENT,
                                "%s: called computation %d is not in the module", u->name, k);
            if (cc->is_entry)
                return ot_error(OT_ERR_INVALID_ARGUMENT, "%s calls the entry computation %s",
                                u->name, cc->name);
        }
    }
    if (pairs != entries)
        return ot_error(OT_ERR_INTERNAL, "computation %s: %lld operand links but %lld user entries",
                        c->name, (long long)pairs, (long long)entries);
    if (seen_params != c->nparams)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "computation %s: %d parameter instructions, parameter table has %d",
                        c->name, seen_params, c->nparams);
    /* acyclicity */
    ot_instr **order = NULL;
    int64_t n = 0;
    OT_CHECK(ot_computation_post_order(c, &order, &n));
    ot_free(order);
    if (n != c->ninstrs)
        return ot_error(OT_ERR_INTERNAL, "computation %s: post order has %lld of %lld", c->name,
                        (long long)n, (long long)c->ninstrs);
    /* shapes and op invariants: re-infer every instruction */
    for (const ot_instr *i = c->first; i; i = i->next) {
        ot_ir_shape s;
        const ot_ir_shape *hint = &i->shape;
        ot_status st = ir_infer((ot_module *)m, i->opcode, i->operands, i->noperands, &i->attrs,
                                i->called, i->ncalled, hint, &s);
        if (st != OT_OK) return ot_error_wrap(st, "verify %s in %s", i->name, c->name);
    }
    return OT_OK;
}

ot_status ot_computation_verify(const ot_computation *c) {
    vctx v = {c->module, NULL, c->module->next_id};
    v.stamp = ot_calloc((size_t)(v.nstamp ? v.nstamp : 1), sizeof *v.stamp);
    if (!v.stamp) return ot_error(OT_ERR_OUT_OF_MEMORY, "verify: out of memory");
    ot_status s = verify_comp(&v, c);
    ot_free(v.stamp);
    return s;
}

ot_status ot_module_verify(const ot_module *m) {
    if (!m) return ot_error(OT_ERR_INVALID_ARGUMENT, "verify: module is NULL");
    if (m->err) return ot_module_status(m);
    if (!m->entry)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "module %s has no entry computation", m->name);
    int64_t total = 0;
    vctx v = {m, NULL, m->next_id};
    v.stamp = ot_calloc((size_t)(v.nstamp ? v.nstamp : 1), sizeof *v.stamp);
    if (!v.stamp) return ot_error(OT_ERR_OUT_OF_MEMORY, "verify: out of memory");
    ot_status s = OT_OK;
    int entries = 0;
    for (int k = 0; k < m->ncomps && s == OT_OK; k++) {
        const ot_computation *c = m->comps[k];
        if (c->is_entry) entries++;
        if (ot_module_find_computation(m, c->name) != c)
            s = ot_error(OT_ERR_INTERNAL, "computation %s: name index out of sync", c->name);
        if (s == OT_OK) s = verify_comp(&v, c);
        total += c->ninstrs;
    }
    ot_free(v.stamp);
    if (s != OT_OK) return s;
    if (entries != 1 || !m->entry->is_entry)
        return ot_error(OT_ERR_INTERNAL, "module %s: %d computations marked entry", m->name,
                        entries);
    if (total != m->ninstrs)
        return ot_error(OT_ERR_INTERNAL,
                        "module %s: instruction count %lld, computations hold %lld", m->name,
                        (long long)m->ninstrs, (long long)total);
    /* no recursion through called computations */
    ot_computation **order = NULL;
    int n = 0;
    OT_CHECK(ot_module_post_order(m, &order, &n));
    ot_free(order);
    return OT_OK;
}
