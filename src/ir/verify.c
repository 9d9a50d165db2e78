/* The verifier: links, acyclicity, parameters, roots, shapes and each op's invariants. Linear in
 * the number of instructions and operand slots (stamps indexed by instruction id, no scans of
 * user lists). */
#include "ir_internal.h"

typedef struct vctx vctx;
static ot_status check_call_graph(const ot_module *m, const vctx *v);

/* Operand lists longer than WIDE (a 100,000-operand tuple or concatenate) are not scanned per
 * link: the (user, operand) pairs of such instructions go into a hash set, and their duplicate
 * operands are found with stamps, so the verifier stays linear in the operand slots. */
enum { WIDE = 16 };

typedef struct pairset {
    struct pslot {
        int64_t user, operand; /* ids + 1; 0: empty */
    } * slot;
    uint64_t cap, n;
} pairset;

static uint64_t pair_hash(int64_t a, int64_t b) {
    uint64_t x = (uint64_t)a * 0x9e3779b97f4a7c15ull ^ (uint64_t)b;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 29);
}

static ot_status pairset_add(pairset *ps, int64_t user, int64_t operand) {
    if ((ps->n + 1) * 2 > ps->cap) {
        uint64_t nc = ps->cap ? ps->cap * 2 : 256;
        struct pslot *ns = ot_calloc(nc, sizeof *ns);
        if (!ns) return ot_error(OT_ERR_OUT_OF_MEMORY, "verify: out of memory");
        for (uint64_t j = 0; j < ps->cap; j++) {
            if (!ps->slot[j].user) continue;
            uint64_t p = pair_hash(ps->slot[j].user, ps->slot[j].operand) & (nc - 1);
            while (ns[p].user) p = (p + 1) & (nc - 1);
            ns[p] = ps->slot[j];
        }
        ot_free(ps->slot);
        ps->slot = ns;
        ps->cap = nc;
    }
    uint64_t p = pair_hash(user + 1, operand + 1) & (ps->cap - 1);
    while (ps->slot[p].user) {
        if (ps->slot[p].user == user + 1 && ps->slot[p].operand == operand + 1) return OT_OK;
        p = (p + 1) & (ps->cap - 1);
    }
    ps->slot[p] = (struct pslot){user + 1, operand + 1};
    ps->n++;
    return OT_OK;
}

static bool pairset_has(const pairset *ps, int64_t user, int64_t operand) {
    if (!ps->cap) return false;
    uint64_t p = pair_hash(user + 1, operand + 1) & (ps->cap - 1);
    while (ps->slot[p].user) {
        if (ps->slot[p].user == user + 1 && ps->slot[p].operand == operand + 1) return true;
        p = (p + 1) & (ps->cap - 1);
    }
    return false;
}

struct vctx {
    const ot_module *m;
    int64_t *stamp;  /* by instruction id */
    int64_t *ostamp; /* by instruction id: a wide instruction's operands seen (allocated once
                      * one is met) */
    pairset wide;    /* (user, operand) pairs of the wide instructions of the computation */
    int64_t nstamp;
    /* call graph edges (caller, callee) gathered while walking the instructions */
    const ot_computation **edges;
    int64_t nedges, edges_cap;
    bool infer; /* infer every shape again and compare (false: the caller just did exactly that) */
};

static ot_status add_edge(vctx *v, const ot_computation *a, const ot_computation *b) {
    if (v->nedges + 2 > v->edges_cap) {
        int64_t ncap = v->edges_cap ? v->edges_cap * 2 : 64;
        const ot_computation **ne = ot_realloc(v->edges, (size_t)ncap * sizeof *ne);
        if (!ne) return ot_error(OT_ERR_OUT_OF_MEMORY, "verify: out of memory");
        v->edges = ne;
        v->edges_cap = ncap;
    }
    v->edges[v->nedges++] = a;
    v->edges[v->nedges++] = b;
    return OT_OK;
}

static ot_status verify_comp(vctx *v, const ot_computation *c) {
    const ot_module *m = v->m;
    if (c->module != m) return ot_error(OT_ERR_INTERNAL, "computation %s: wrong module", c->name);
    /* One pass in list order checks the list, the links both ways, called computations and every
     * shape; it also notes whether the list order is topological (each operand seen before its
     * user), which proves acyclicity without a separate depth-first search. */
    ot_module *mm = (ot_module *)m;
    const uint64_t seen = mm->epoch + 1;
    mm->epoch += 2;
    bool topo = true;
    int64_t count = 0, pairs = 0, entries = 0;
    int seen_params = 0;
    ot_instr *prev = NULL;
    /* The user checks read each user's operand list: in a large computation those are cache misses
     * in an order the hardware cannot guess, so they are prefetched a few instructions ahead
     * (first the users array, then the users it names). */
    if (v->wide.n) memset(v->wide.slot, 0, v->wide.cap * sizeof *v->wide.slot);
    v->wide.n = 0;
    for (const ot_instr *w = c->first; w; w = w->next) {
        if (w->noperands <= WIDE || w->id < 0 || w->id >= v->nstamp) continue;
        if (!v->ostamp) {
            v->ostamp = ot_calloc((size_t)v->nstamp, sizeof *v->ostamp);
            if (!v->ostamp) return ot_error(OT_ERR_OUT_OF_MEMORY, "verify: out of memory");
        }
        for (int k = 0; k < w->noperands; k++) {
            const ot_instr *o = w->operands[k];
            if (o && o->id >= 0 && o->id < v->nstamp) OT_CHECK(pairset_add(&v->wide, w->id, o->id));
        }
    }
    const ot_instr *ahead = c->first, *near = c->first;
    for (int k = 0; k < 8 && ahead; k++) ahead = ahead->next;
    for (int k = 0; k < 4 && near; k++) near = near->next;
    for (ot_instr *u = c->first; u; u = u->next) {
        if (ahead) {
            if (ahead->nusers) ir_prefetch(ahead->users);
            ahead = ahead->next;
        }
        if (near) {
            for (int k = 0; k < near->nusers && k < 4; k++) {
                ir_prefetch(&near->users[k]->operands);
                ir_prefetch(&near->users[k]->dead_);
            }
            near = near->next;
        }
        if (++count > c->ninstrs)
            return ot_error(OT_ERR_INTERNAL, "computation %s: list longer than its count %lld",
                            c->name, (long long)c->ninstrs);
        if (u->prev != prev || u->parent != c || u->dead_)
            return ot_error(OT_ERR_INTERNAL, "computation %s: broken list at %s", c->name, u->name);
        if (u->id < 0 || u->id >= v->nstamp)
            return ot_error(OT_ERR_INTERNAL, "%s: id %lld out of range", u->name, (long long)u->id);
        if (u->opcode == OT_OP_PARAMETER) seen_params++;
        /* user entries: real, distinct, live users */
        for (int k = 0; k < u->nusers; k++) {
            const ot_instr *w = u->users[k];
            if (!w || w->dead_ || w->parent != c)
                return ot_error(OT_ERR_INTERNAL, "%s: user %d is not a live instruction of %s",
                                u->name, k, c->name);
            bool found = false;
            if (w->noperands > WIDE && w->id >= 0 && w->id < v->nstamp)
                found = pairset_has(&v->wide, w->id, u->id);
            else
                for (int j = 0; j < w->noperands && !found; j++) found = w->operands[j] == u;
            if (!found)
                return ot_error(OT_ERR_INTERNAL, "%s lists %s as a user, which does not use it",
                                u->name, w->name);
            if (v->stamp[w->id] == u->id + 1)
                return ot_error(OT_ERR_INTERNAL, "%s lists user %s twice", u->name, w->name);
            v->stamp[w->id] = u->id + 1;
            entries++;
        }
        /* operands: live, same computation; distinct (user, operand) pairs are counted */
        for (int k = 0; k < u->noperands; k++) {
            const ot_instr *o = u->operands[k];
            if (!o || o->dead_ || o->parent != c)
                return ot_error(OT_ERR_INVALID_ARGUMENT,
                                "%s: operand %d is not a live instruction of %s", u->name, k,
                                c->name);
            bool dup = false;
            if (u->noperands > WIDE && v->ostamp && o->id >= 0 && o->id < v->nstamp) {
                dup = v->ostamp[o->id] == u->id + 1;
                v->ostamp[o->id] = u->id + 1;
            } else {
                for (int j = 0; j < k && !dup; j++) dup = u->operands[j] == o;
            }
            if (!dup) pairs++;
            if (o->visit_ != seen) topo = false;
        }
        for (int k = 0; k < u->ncalled; k++) {
            const ot_computation *cc = u->called[k];
            if (!cc || cc->module != m || ot_module_find_computation(m, cc->name) != cc)
                return ot_error(OT_ERR_INVALID_ARGUMENT,
                                "%s: called computation %d is not in the module", u->name, k);
            if (cc->is_entry)
                return ot_error(OT_ERR_INVALID_ARGUMENT, "%s calls the entry computation %s",
                                u->name, cc->name);
            OT_CHECK(add_edge(v, c, cc));
        }
        /* shape and op invariants: infer again and compare */
        if (v->infer) {
            ot_ir_shape s;
            ot_status st = ir_infer(mm, u->opcode, u->operands, u->noperands, u->attrs, u->called,
                                    u->ncalled, &u->shape, &s);
            if (st != OT_OK) return ot_error_wrap(st, "verify %s in %s", u->name, c->name);
        }
        u->visit_ = seen;
        prev = u;
    }
    if (count != c->ninstrs || c->last != prev)
        return ot_error(OT_ERR_INTERNAL, "computation %s: count %lld, list has %lld", c->name,
                        (long long)c->ninstrs, (long long)count);
    const ir_name_index *names = c->names_;
    /* the index, where one has been built, holds each instruction once */
    if (names && (names->n != (uint64_t)c->ninstrs ||
                  (c->root && ot_computation_find_instr(c, c->root->name) != c->root)))
        return ot_error(OT_ERR_INTERNAL, "computation %s: name index out of sync", c->name);
    if (!c->root)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "computation %s has no root instruction", c->name);
    if (c->root->parent != c || c->root->dead_)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "computation %s: root %s is not one of its instructions", c->name,
                        c->root->name);
    for (int k = 0; k < c->nparams; k++) {
        const ot_instr *p = c->params[k];
        if (!p)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "computation %s: parameter %d is missing (numbers must be 0..%d)",
                            c->name, k, c->nparams - 1);
        if (p->opcode != OT_OP_PARAMETER || p->attrs->index != k || p->parent != c || p->dead_)
            return ot_error(OT_ERR_INTERNAL, "computation %s: parameter table broken at %d",
                            c->name, k);
    }
    if (seen_params != c->nparams)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "computation %s: %d parameter instructions, parameter table has %d",
                        c->name, seen_params, c->nparams);
    if (pairs != entries)
        return ot_error(OT_ERR_INTERNAL, "computation %s: %lld operand links but %lld user entries",
                        c->name, (long long)pairs, (long long)entries);
    if (!topo) { /* the list is not in definition order (after edits): prove acyclicity */
        ot_instr **order = NULL;
        int64_t n = 0;
        OT_CHECK(ot_computation_post_order(c, &order, &n));
        ot_free(order);
        if (n != c->ninstrs)
            return ot_error(OT_ERR_INTERNAL, "computation %s: post order has %lld of %lld", c->name,
                            (long long)n, (long long)c->ninstrs);
    }
    return OT_OK;
}

ot_status ot_computation_verify(const ot_computation *c) {
    vctx v = {c->module, NULL, NULL, {0}, c->module->next_id, NULL, 0, 0, true};
    v.stamp = ot_calloc((size_t)(v.nstamp ? v.nstamp : 1), sizeof *v.stamp);
    if (!v.stamp) return ot_error(OT_ERR_OUT_OF_MEMORY, "verify: out of memory");
    ot_status s = verify_comp(&v, c);
    ot_free(v.stamp);
    ot_free(v.ostamp);
    ot_free(v.wide.slot);
    ot_free(v.edges);
    return s;
}

ot_status ot_module_verify(const ot_module *m) {
    return ir_module_verify(m, true);
}

ot_status ir_module_verify(const ot_module *m, bool infer) {
    if (!m) return ot_error(OT_ERR_INVALID_ARGUMENT, "verify: module is NULL");
    if (m->err) return ot_module_status(m);
    if (!m->entry)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "module %s has no entry computation", m->name);
    /* verified, and unedited since (finalize, then compile: one walk, not two) */
    if (m->verified_edits == m->edits + 1) return OT_OK;
    int64_t total = 0;
    vctx v = {m, NULL, NULL, {0}, m->next_id, NULL, 0, 0, infer};
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
    ot_free(v.ostamp);
    ot_free(v.wide.slot);
    if (s == OT_OK) s = check_call_graph(m, &v);
    ot_free(v.edges);
    if (s != OT_OK) return s;
    if (entries != 1 || !m->entry->is_entry)
        return ot_error(OT_ERR_INTERNAL, "module %s: %d computations marked entry", m->name,
                        entries);
    if (total != m->ninstrs)
        return ot_error(OT_ERR_INTERNAL,
                        "module %s: instruction count %lld, computations hold %lld", m->name,
                        (long long)m->ninstrs, (long long)total);
    ((ot_module *)m)->verified_edits = m->edits + 1;
    return OT_OK;
}

/* No recursion through called computations: DFS over the gathered call edges. */
static ot_status check_call_graph(const ot_module *m, const vctx *v) {
    int n = m->ncomps;
    if (v->nedges == 0) return OT_OK;
    ir_ptr_map idx = {0};
    int64_t *first = ot_calloc((size_t)n + 1, sizeof *first); /* CSR of edges by caller */
    int64_t *adj = ot_malloc((size_t)(v->nedges / 2) * sizeof *adj);
    signed char *state = ot_calloc((size_t)n, 1);
    int64_t *stack = ot_malloc((size_t)n * 2 * sizeof *stack);
    ot_status s = OT_OK;
    if (!first || !adj || !state || !stack) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "verify: out of memory");
        goto out;
    }
    for (int k = 0; k < n && s == OT_OK; k++)
        s = ir_ptr_map_put(&idx, m->comps[k], (void *)(intptr_t)(k + 1));
    if (s != OT_OK) goto out;
    for (int64_t e = 0; e < v->nedges; e += 2) first[(intptr_t)ir_ptr_map_get(&idx, v->edges[e])]++;
    for (int k = 0; k < n; k++) first[k + 1] += first[k];
    /* fill: stack[0..n) serves as the running position of each caller's block */
    for (int k = 0; k < n; k++) stack[k] = first[k];
    for (int64_t e = 0; e < v->nedges; e += 2) {
        int64_t a = (intptr_t)ir_ptr_map_get(&idx, v->edges[e]) - 1;
        adj[stack[a]++] = (intptr_t)ir_ptr_map_get(&idx, v->edges[e + 1]) - 1;
    }
    for (int r = 0; r < n && s == OT_OK; r++) {
        if (state[r]) continue;
        int64_t sp = 0;
        stack[sp++] = r;
        stack[sp++] = first[r];
        state[r] = 1;
        while (sp && s == OT_OK) {
            int64_t c = stack[sp - 2], k = stack[sp - 1];
            if (k < first[c + 1]) {
                stack[sp - 1] = k + 1;
                int64_t d = adj[k];
                if (state[d] == 1) {
                    s = ot_error(OT_ERR_INVALID_ARGUMENT, "recursive call: %s calls %s",
                                 m->comps[c]->name, m->comps[d]->name);
                } else if (state[d] == 0) {
                    state[d] = 1;
                    stack[sp++] = d;
                    stack[sp++] = first[d];
                }
            } else {
                state[c] = 2;
                sp -= 2;
            }
        }
    }
out:
    ir_ptr_map_free(&idx);
    ot_free(first);
    ot_free(adj);
    ot_free(state);
    ot_free(stack);
    return s;
}
