/* Pass manager (named passes, fixed-point groups, statistics, verify-each, dumps), the shared
 * helpers, dead-code elimination and common-subexpression elimination. */
#include "compiler_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

ot_status cc_grow(void *pp, int64_t *cap, int64_t need, size_t sz) {
    void **p = pp;
    if (need <= *cap) return OT_OK;
    int64_t nc = *cap ? *cap : 8;
    while (nc < need) nc *= 2;
    void *np = ot_realloc(*p, (size_t)nc * sz);
    if (!np) return ot_error(OT_ERR_OUT_OF_MEMORY, "compiler: out of memory");
    *p = np;
    *cap = nc;
    return OT_OK;
}

static uint64_t ptr_hash(const void *p) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

ot_status cc_ptrmap_put(cc_ptrmap *m, const void *k, int64_t v) {
    if ((m->n + 1) * 2 > m->cap) {
        uint64_t nc = m->cap ? m->cap * 2 : 64;
        struct cc_ptrslot *ns = ot_calloc(nc, sizeof *ns);
        if (!ns) return ot_error(OT_ERR_OUT_OF_MEMORY, "compiler: out of memory");
        for (uint64_t j = 0; j < m->cap; j++) {
            if (!m->slots[j].k) continue;
            uint64_t p = ptr_hash(m->slots[j].k) & (nc - 1);
            while (ns[p].k) p = (p + 1) & (nc - 1);
            ns[p] = m->slots[j];
        }
        ot_free(m->slots);
        m->slots = ns;
        m->cap = nc;
    }
    uint64_t p = ptr_hash(k) & (m->cap - 1);
    while (m->slots[p].k && m->slots[p].k != k) p = (p + 1) & (m->cap - 1);
    if (!m->slots[p].k) m->n++;
    m->slots[p].k = k;
    m->slots[p].v = v;
    return OT_OK;
}

int64_t cc_ptrmap_get(const cc_ptrmap *m, const void *k) {
    if (!m->cap) return -1;
    uint64_t p = ptr_hash(k) & (m->cap - 1);
    while (m->slots[p].k) {
        if (m->slots[p].k == k) return m->slots[p].v;
        p = (p + 1) & (m->cap - 1);
    }
    return -1;
}

void cc_ptrmap_free(cc_ptrmap *m) {
    ot_free(m->slots);
    memset(m, 0, sizeof *m);
}

ot_status cc_post_order(const ot_computation *c, ot_instr ***out, int64_t *n) {
    *out = NULL;
    *n = 0;
    int64_t cnt = c->ninstrs ? c->ninstrs : 1;
    ot_instr **order = ot_malloc((size_t)cnt * sizeof *order);
    struct pframe {
        ot_instr *i;
        int k;
    } *st = ot_malloc((size_t)cnt * sizeof *st);
    if (!order || !st) {
        ot_free(order);
        ot_free(st);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "post order: out of memory");
    }
    /* visit stamps instead of marks reset first: resetting took a walk of the list, which in a
     * large computation misses the cache on every instruction (as much as the rest together) */
    const uint64_t on = ir_visit_stamps(c->module, 2) + 1, done = on + 1;
    int64_t no = 0;
    ot_status s = OT_OK;
    for (ot_instr *r = c->first; r && s == OT_OK; r = r->next) {
        if (r->visit_ == on || r->visit_ == done) continue;
        int64_t sp = 0;
        st[sp++] = (struct pframe){r, 0};
        r->visit_ = on;
        while (sp) {
            struct pframe *f = &st[sp - 1];
            if (f->k < f->i->noperands) {
                ot_instr *o = f->i->operands[f->k++];
                if (o->parent != c) {
                    s = ot_error(OT_ERR_INTERNAL, "post order: %s uses %s from another computation",
                                 f->i->name, o->name);
                    break;
                }
                if (o->visit_ == on) {
                    s = ot_error(OT_ERR_INVALID_ARGUMENT, "computation %s has a cycle through %s",
                                 c->name, o->name);
                    break;
                }
                if (o->visit_ == done) continue;
                o->visit_ = on;
                st[sp++] = (struct pframe){o, 0};
            } else {
                f->i->visit_ = done;
                order[no++] = f->i;
                sp--;
            }
        }
    }
    ot_free(st);
    if (s != OT_OK) {
        ot_free(order);
        return s;
    }
    *out = order;
    *n = no;
    return OT_OK;
}

int64_t cc_numel(const ot_instr *i) {
    if (i->shape.kind != OT_IR_ARRAY) return 0;
    return ot_shape_numel_unchecked(&i->shape.array);
}

ot_status cc_reachable(const ot_module *m, ot_instr *const *entry_order, int64_t nentry,
                       ot_computation ***out, int *n) {
    *out = NULL;
    *n = 0;
    ot_computation *entry = ot_module_entry(m);
    if (!entry) return ot_error(OT_ERR_INVALID_ARGUMENT, "module has no entry computation");
    /* depth-first from the entry over called computations; a computation is emitted after
     * everything it calls (callees first) */
    int cap = ot_module_computation_count(m) + 1;
    ot_computation **order = ot_malloc((size_t)cap * sizeof *order);
    struct frame {
        ot_computation *c;
        ot_instr *i;
        int k;
        int64_t j; /* the entry's frame with entry_order: the index of i in it */
    } *st = ot_malloc((size_t)cap * sizeof *st);
    cc_ptrmap seen = {0};
    ot_status s = OT_OK;
    int no = 0, sp = 0;
    if (!order || !st) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "compiler: out of memory");
        goto out;
    }
    if ((s = cc_ptrmap_put(&seen, entry, 1)) != OT_OK) goto out;
    if (entry_order && nentry == 0) entry_order = NULL;
    st[sp++] = (struct frame){entry, entry_order ? entry_order[0] : entry->first, 0, 0};
    while (sp && s == OT_OK) {
        struct frame *f = &st[sp - 1];
        bool ordered = sp == 1 && entry_order;
        while (f->i && f->k >= f->i->ncalled) {
            f->i = !ordered ? f->i->next : ++f->j < nentry ? entry_order[f->j] : NULL;
            f->k = 0;
        }
        if (!f->i) {
            order[no++] = f->c;
            sp--;
            continue;
        }
        ot_computation *x = f->i->called[f->k++];
        if (cc_ptrmap_get(&seen, x) >= 0) continue;
        if (sp == cap || no == cap) {
            s = ot_error(OT_ERR_INTERNAL, "reachable computations: more than the module holds");
            break;
        }
        if ((s = cc_ptrmap_put(&seen, x, 1)) != OT_OK) break;
        st[sp++] = (struct frame){x, x->first, 0, 0};
    }
out:
    cc_ptrmap_free(&seen);
    ot_free(st);
    if (s != OT_OK) {
        ot_free(order);
        return s;
    }
    *out = order;
    *n = no;
    return OT_OK;
}

void cc_orders_free(cc_orders *o) {
    for (int k = 0; k < o->n; k++) ot_free(o->po[k]);
    ot_free(o->comps);
    ot_free(o->po);
    ot_free(o->npo);
    memset(o, 0, sizeof *o);
}

/* A computation's list as an array: its post order when the list is in topological order. */
static ot_status list_order(const ot_computation *c, ot_instr ***out, int64_t *n) {
    *n = 0;
    *out = ot_malloc((size_t)(c->ninstrs ? c->ninstrs : 1) * sizeof **out);
    if (!*out) return ot_error(OT_ERR_OUT_OF_MEMORY, "orders: out of memory");
    for (ot_instr *i = c->first; i && *n < c->ninstrs; i = i->next) (*out)[(*n)++] = i;
    return OT_OK;
}

static ot_status orders_build(const ot_module *m, bool lists, cc_orders *o) {
    ot_status (*order)(const ot_computation *, ot_instr ***, int64_t *) =
        lists ? list_order : cc_post_order;
    memset(o, 0, sizeof *o);
    o->edits = ir_module_edits(m);
    ot_computation *entry = ot_module_entry(m);
    if (!entry) return ot_error(OT_ERR_INVALID_ARGUMENT, "module has no entry computation");
    int cap = ot_module_computation_count(m) + 1;
    struct frame {
        ot_computation *c;
        ot_instr **po;
        int64_t npo, j; /* scanning po[j] */
        int k;          /* its called[k] */
    } *st = ot_malloc((size_t)cap * sizeof *st);
    o->comps = ot_malloc((size_t)cap * sizeof *o->comps);
    o->po = ot_calloc((size_t)cap, sizeof *o->po);
    o->npo = ot_malloc((size_t)cap * sizeof *o->npo);
    cc_ptrmap seen = {0};
    ot_status s = OT_OK;
    int sp = 0;
    if (!st || !o->comps || !o->po || !o->npo) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "compiler: out of memory");
        goto out;
    }
    if ((s = cc_ptrmap_put(&seen, entry, 1)) != OT_OK) goto out;
    st[0] = (struct frame){entry, NULL, 0, 0, 0};
    if ((s = order(entry, &st[0].po, &st[0].npo)) != OT_OK) goto out;
    sp = 1;
    while (sp && s == OT_OK) {
        struct frame *f = &st[sp - 1];
        while (f->j < f->npo && f->k >= f->po[f->j]->ncalled) {
            f->j++;
            f->k = 0;
        }
        if (f->j == f->npo) { /* every callee emitted: emit this one */
            o->comps[o->n] = f->c;
            o->po[o->n] = f->po;
            o->npo[o->n] = f->npo;
            o->n++;
            sp--;
            continue;
        }
        ot_computation *x = f->po[f->j]->called[f->k++];
        if (cc_ptrmap_get(&seen, x) >= 0) continue;
        if (sp == cap || o->n + sp >= cap) {
            s = ot_error(OT_ERR_INTERNAL, "reachable computations: more than the module holds");
            break;
        }
        if ((s = cc_ptrmap_put(&seen, x, 1)) != OT_OK) break;
        st[sp] = (struct frame){x, NULL, 0, 0, 0};
        if ((s = order(x, &st[sp].po, &st[sp].npo)) != OT_OK) break;
        sp++;
    }
out:
    for (int k = 0; k < sp; k++) ot_free(st[k].po);
    ot_free(st);
    cc_ptrmap_free(&seen);
    if (s != OT_OK) cc_orders_free(o);
    return s;
}

ot_status cc_orders_build(const ot_module *m, cc_orders *o) {
    return orders_build(m, false, o);
}

static void orders_cache_free(void *p) {
    if (!p) return;
    cc_orders_free(p);
    ot_free(p);
}

#ifndef NDEBUG
/* Debug builds: kept orders are exactly what cc_orders_build finds (cc_orders_keep_lists and
 * CSE keep orders across edits). */
static void orders_check(const ot_module *m, const cc_orders *c) {
    cc_orders f;
    if (cc_orders_build(m, &f) != OT_OK) return;
    bool same = f.n == c->n;
    for (int k = 0; same && k < f.n; k++) {
        same = f.comps[k] == c->comps[k] && f.npo[k] == c->npo[k];
        for (int64_t j = 0; same && j < f.npo[k]; j++) same = f.po[k][j] == c->po[k][j];
    }
    cc_orders_free(&f);
    assert(same && "kept orders differ from the post orders");
}
#endif

/* The kept orders if the module is unedited since they were built; NULL otherwise (stale ones
 * are dropped). */
static cc_orders *orders_kept(ot_module *m) {
    cc_orders *c = ir_module_pass_cache(m);
    if (c && c->edits == ir_module_edits(m)) {
#ifndef NDEBUG
        orders_check(m, c);
#endif
        return c;
    }
    ir_module_set_pass_cache(m, NULL, NULL);
    return NULL;
}

ot_status cc_orders_take(ot_module *m, cc_orders *o) {
    cc_orders *c = orders_kept(m);
    if (!c) return cc_orders_build(m, o);
    *o = *c;
    memset(c, 0, sizeof *c);
    ir_module_set_pass_cache(m, NULL, NULL);
    return OT_OK;
}

void cc_orders_give(ot_module *m, cc_orders *o) {
    if (o->comps && o->edits == ir_module_edits(m)) {
        cc_orders *c = ot_malloc(sizeof *c);
        if (c) { /* else the next pass builds them again */
            *c = *o;
            memset(o, 0, sizeof *o);
            ir_module_set_pass_cache(m, c, orders_cache_free);
            return;
        }
    }
    cc_orders_free(o);
}

ot_status cc_orders_keep_lists(ot_module *m) {
    cc_orders o;
    OT_CHECK(orders_build(m, true, &o));
    cc_orders_give(m, &o);
    return OT_OK;
}

ot_status cc_entry_post_order(ot_module *m, ot_instr ***out, int64_t *n) {
    ot_computation *entry = ot_module_entry(m);
    if (!entry) return ot_error(OT_ERR_INVALID_ARGUMENT, "module has no entry computation");
    cc_orders *c = orders_kept(m);
    for (int k = 0; c && k < c->n; k++) {
        if (c->comps[k] != entry) continue;
        *out = c->po[k];
        *n = c->npo[k];
        c->po[k] = NULL; /* taken */
        ir_module_set_pass_cache(m, NULL, NULL);
        return OT_OK;
    }
    return cc_post_order(entry, out, n);
}

/* ---------------------------------------------------------------------------------------------
 * Pass manager
 * ------------------------------------------------------------------------------------------- */

typedef struct pm_entry {
    char *name;
    ot_pass_fn fn; /* NULL: a group header */
    void *ctx;
    int group;     /* index of the group header entry, or -1 */
    int max_iter;  /* group headers */
    int group_end; /* group headers: one past the last member */
    bool idempotent;
    /* while running: whether it ran, the change count after its last run, what that run did */
    bool ran, last_changed;
    uint64_t seq_after;
} pm_entry;

struct ot_pass_manager {
    pm_entry *e;
    int64_t n, cap;
    int open_group; /* -1 when none */
    bool verify_each;
    char *dump_dir, *dump_after;
    int dump_seq;
    ot_pass_stat *st;
    int64_t nst, stcap;
    uint64_t change_seq; /* runs that changed the module so far */
};

ot_pass_manager *ot_pass_manager_new(void) {
    ot_pass_manager *pm = ot_calloc(1, sizeof *pm);
    if (!pm) {
        ot_error(OT_ERR_OUT_OF_MEMORY, "pass manager: out of memory");
        return NULL;
    }
    pm->open_group = -1;
    return pm;
}

void ot_pass_manager_free(ot_pass_manager *pm) {
    if (!pm) return;
    for (int64_t k = 0; k < pm->n; k++) ot_free(pm->e[k].name);
    for (int64_t k = 0; k < pm->nst; k++) ot_free((char *)pm->st[k].name);
    ot_free(pm->e);
    ot_free(pm->st);
    ot_free(pm->dump_dir);
    ot_free(pm->dump_after);
    ot_free(pm);
}

static ot_status pm_push(ot_pass_manager *pm, const char *name, ot_pass_fn fn, void *ctx,
                         int max_iter) {
    if (!pm || !name || !*name)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "pass manager: NULL manager or empty name");
    OT_CHECK(cc_grow(&pm->e, &pm->cap, pm->n + 1, sizeof *pm->e));
    char *nm = ot_strdup(name);
    if (!nm) return ot_error(OT_ERR_OUT_OF_MEMORY, "pass manager: out of memory");
    pm->e[pm->n] = (pm_entry){nm, fn, ctx, pm->open_group, max_iter, 0, false, false, false, 0};
    pm->n++;
    return OT_OK;
}

ot_status ot_pass_manager_add(ot_pass_manager *pm, const char *name, ot_pass_fn fn, void *ctx) {
    if (!fn)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "pass manager: pass '%s' has no function",
                        name ? name : "");
    return pm_push(pm, name, fn, ctx, 0);
}

ot_status ot_pass_manager_add_idempotent(ot_pass_manager *pm, const char *name, ot_pass_fn fn,
                                         void *ctx) {
    OT_CHECK(ot_pass_manager_add(pm, name, fn, ctx));
    pm->e[pm->n - 1].idempotent = true;
    return OT_OK;
}

ot_status ot_pass_manager_begin_fixed_point(ot_pass_manager *pm, const char *name,
                                            int max_iterations) {
    if (pm && pm->open_group >= 0)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "pass manager: fixed-point groups do not nest (group '%s' is open)",
                        pm->e[pm->open_group].name);
    if (max_iterations < 1)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "pass manager: max_iterations must be >= 1");
    OT_CHECK(pm_push(pm, name, NULL, NULL, max_iterations));
    pm->open_group = (int)pm->n - 1;
    return OT_OK;
}

ot_status ot_pass_manager_end_fixed_point(ot_pass_manager *pm) {
    if (!pm || pm->open_group < 0)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "pass manager: no fixed-point group is open");
    pm->e[pm->open_group].group_end = (int)pm->n;
    pm->open_group = -1;
    return OT_OK;
}

void ot_pass_manager_set_verify_each(ot_pass_manager *pm, bool on) {
    if (pm) pm->verify_each = on;
}

ot_status ot_pass_manager_set_dump(ot_pass_manager *pm, const char *dir, const char *after) {
    if (!pm) return ot_error(OT_ERR_INVALID_ARGUMENT, "pass manager is NULL");
    char *d = dir ? ot_strdup(dir) : NULL, *a = after ? ot_strdup(after) : NULL;
    if ((dir && !d) || (after && !a)) {
        ot_free(d);
        ot_free(a);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "pass manager: out of memory");
    }
    ot_free(pm->dump_dir);
    ot_free(pm->dump_after);
    pm->dump_dir = d;
    pm->dump_after = a;
    return OT_OK;
}

ot_status ot_pass_manager_record(ot_pass_manager *pm, const ot_pass_stat *st) {
    OT_CHECK(cc_grow(&pm->st, &pm->stcap, pm->nst + 1, sizeof *pm->st));
    char *nm = ot_strdup(st->name ? st->name : "");
    if (!nm) return ot_error(OT_ERR_OUT_OF_MEMORY, "pass manager: out of memory");
    pm->st[pm->nst] = *st;
    pm->st[pm->nst].name = nm;
    pm->nst++;
    return OT_OK;
}

int ot_pass_manager_stat_count(const ot_pass_manager *pm) {
    return pm ? (int)pm->nst : 0;
}

const ot_pass_stat *ot_pass_manager_stat(const ot_pass_manager *pm, int i) {
    return pm && i >= 0 && i < pm->nst ? &pm->st[i] : NULL;
}

static ot_status write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return ot_error(OT_ERR_IO, "dump %s: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    return ok ? OT_OK : ot_error(OT_ERR_IO, "dump %s: write failed", path);
}

/* Writes "<dir>/<NN>.<pass>.hlo" (HLO text) and ".dot" (Graphviz, entry computation). */
static ot_status pm_dump(ot_pass_manager *pm, const ot_module *m, const char *pass) {
    char path[4096];
    int seq = pm->dump_seq++;
    char *text = ot_hlo_print(m, NULL);
    if (!text) return ot_error(OT_ERR_OUT_OF_MEMORY, "dump after %s: out of memory", pass);
    snprintf(path, sizeof path, "%s/%02d.%s.hlo", pm->dump_dir, seq, pass);
    ot_status s = write_file(path, text);
    ot_free(text);
    if (s != OT_OK) return s;
    char *dot = ot_ir_to_dot(m, NULL);
    if (!dot) return ot_error(OT_ERR_OUT_OF_MEMORY, "dump after %s: out of memory", pass);
    snprintf(path, sizeof path, "%s/%02d.%s.dot", pm->dump_dir, seq, pass);
    s = write_file(path, dot);
    ot_free(dot);
    return s;
}

static ot_status pm_run_one(ot_pass_manager *pm, pm_entry *e, int iter, ot_module *m,
                            bool *changed) {
    ot_pass_stat st = {e->name, iter, 0, ot_module_instr_count(m), 0, false};
    uint64_t t0 = ot_now_ns();
    bool ch = false;
    ot_status s = e->fn(m, e->ctx, &ch);
    /* the next passes may build in the storage of what this one removed */
    ir_module_recycle(m);
    st.time_ns = ot_now_ns() - t0;
    st.instrs_after = ot_module_instr_count(m);
    st.changed = ch;
    if (s != OT_OK) return ot_error_wrap(s, "pass %s", e->name);
    OT_CHECK(ot_pass_manager_record(pm, &st));
    if (pm->verify_each) {
        s = ot_module_verify(m);
        /* a module the pass broke is a compiler bug (INTERNAL); running out of memory while
         * verifying is just that */
        if (s != OT_OK)
            return ot_error_wrap(s == OT_ERR_OUT_OF_MEMORY ? s : OT_ERR_INTERNAL, "after pass %s",
                                 e->name);
    }
    if (pm->dump_dir &&
        (!pm->dump_after || !strcmp(pm->dump_after, "all") || !strcmp(pm->dump_after, e->name)))
        OT_CHECK(pm_dump(pm, m, e->name));
    if (ch) pm->change_seq++;
    e->ran = true;
    e->last_changed = ch;
    e->seq_after = pm->change_seq;
    *changed = *changed || ch;
    return OT_OK;
}

ot_status ot_pass_manager_run(ot_pass_manager *pm, ot_module *m) {
    if (!pm || !m) return ot_error(OT_ERR_INVALID_ARGUMENT, "pass manager run: NULL argument");
    if (pm->open_group >= 0)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "pass manager: group '%s' was not ended",
                        pm->e[pm->open_group].name);
    if (pm->dump_dir) {
        if (mkdir(pm->dump_dir, 0777) != 0 && errno != EEXIST)
            return ot_error(OT_ERR_IO, "dump directory %s: %s", pm->dump_dir, strerror(errno));
    }
    for (int64_t k = 0; k < pm->n; k++) pm->e[k].ran = false;
    for (int64_t k = 0; k < pm->n;) {
        pm_entry *e = &pm->e[k];
        if (e->fn) {
            bool ch = false;
            OT_CHECK(pm_run_one(pm, e, 0, m, &ch));
            k++;
            continue;
        }
        /* fixed-point group */
        int it = 0;
        for (; it < e->max_iter; it++) {
            bool ch = false;
            for (int64_t j = k + 1; j < e->group_end; j++) {
                pm_entry *x = &pm->e[j];
                /* the module is what this pass left (or saw unchanged): it would do nothing */
                if (x->ran && x->seq_after == pm->change_seq && (!x->last_changed || x->idempotent))
                    continue;
                OT_CHECK(pm_run_one(pm, x, it, m, &ch));
            }
            if (!ch) break;
        }
        k = e->group_end > k ? e->group_end : k + 1;
    }
    ir_module_set_pass_cache(m, NULL, NULL); /* orders kept by the last passes */
    return OT_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Dead-code elimination
 * ------------------------------------------------------------------------------------------- */

static ot_status dce_computation(ot_computation *c, ot_instr **po, int64_t n, bool *changed,
                                 bool *removed_call) {
    /* users come after operands in post order: walk backwards propagating liveness, a fresh visit
     * stamp meaning live (no walk to clear marks first) */
    const uint64_t live = ir_visit_stamps(c->module, 1) + 1;
    c->root->visit_ = live;
    for (int64_t k = n - 1; k >= 0; k--) {
        ot_instr *i = po[k];
        if (i->opcode == OT_OP_PARAMETER || ot_instr_has_side_effect(i)) i->visit_ = live;
        if (i->visit_ != live) continue;
        for (int j = 0; j < i->noperands; j++) i->operands[j]->visit_ = live;
    }
    ot_status s = OT_OK;
    for (int64_t k = n - 1; k >= 0 && s == OT_OK; k--) {
        if (po[k]->visit_ == live) continue;
        if (po[k]->ncalled) *removed_call = true;
        s = ot_instr_remove(po[k]);
        if (s == OT_OK) *changed = true;
    }
    return s;
}

ot_status ot_pass_dce(ot_module *m, bool *changed) {
    bool ch = false;
    if (changed) *changed = false;
    ot_computation *entry = ot_module_entry(m);
    if (!entry) return ot_error(OT_ERR_INVALID_ARGUMENT, "dce: no entry computation");
    if (!entry->root)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "no outputs declared (entry computation %s has "
                        "no root)",
                        entry->name);
    cc_orders ord;
    OT_CHECK(cc_orders_take(m, &ord));
    ot_status s = OT_OK;
    bool removed_call = false;
    for (int k = ord.n - 1; k >= 0 && s == OT_OK; k--)
        s = dce_computation(ord.comps[k], ord.po[k], ord.npo[k], &ch, &removed_call);
    /* reachability changes only when an instruction calling a computation went */
    if (s == OT_OK && !removed_call && ord.n == ot_module_computation_count(m)) {
        cc_orders_give(m, &ord);
        if (changed) *changed = ch;
        return OT_OK;
    }
    cc_orders_free(&ord);
    OT_CHECK(s);
    /* computations no longer reachable, all at once (one walk over what stays) */
    int gone = 0;
    OT_CHECK(ot_module_remove_unreachable(m, &gone));
    if (gone) ch = true;
    if (changed) *changed = ch;
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * Common-subexpression elimination: one hash table per computation over (opcode, attributes,
 * called computations, operands; integer commutative operands sorted by id; constant values).
 *
 * Called computations are compared by structure, as XLA's CSE compares them: JAX gives every
 * reduce its own copy of its reducer (region_0, region_1, ... each `add` or `maximum` of two
 * parameters), so the row max that softmax and log_softmax both take of one array were two
 * reduces of one operand calling two computations, and neither they nor the exp(x - max) above
 * them merged. Each computation, once its own instructions are merged (callees first), gets a
 * representative: the first earlier computation of the same structure, else itself; equal
 * representatives make called computations equal.
 * ------------------------------------------------------------------------------------------- */

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

/* mix changes only the low bits of h when the last value mixed in is an operand id close to
 * others: an inlined chain's instructions got one tag and neighbouring home slots, a run each
 * probe walked (8k instructions: 5.3M probes). murmur3's fmix64 spreads every bit over the word
 * before the table reads it. */
static uint64_t fmix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

/* The representatives: computation -> the index in ord.comps of its representative. */
typedef struct cse_reps {
    const cc_orders *ord;
    cc_ptrmap rep;
    struct cse_slot {
        uint64_t h;
        int at; /* index in ord.comps + 1; 0: empty */
    } * tab;    /* representatives by structural hash */
    uint64_t cap;
} cse_reps;

static const ot_computation *cse_rep(const cse_reps *r, const ot_computation *c) {
    int64_t k = cc_ptrmap_get(&r->rep, c);
    return k >= 0 ? r->ord->comps[k] : c;
}

/* Operands match in either order only where the two orders give the same bits: integers and
 * predicates. A float add, multiply, maximum or minimum of two NaNs returns the first one
 * (x86's rule, which the reference kernels keep), so merging `a*b` into `b*a` turned a
 * 0x7fc00000 into 0xffc00000 on random graphs (seed 2493). */
static bool cse_commutes(const ot_instr *i) {
    return ot_opcode_is_commutative(i->opcode) && i->noperands == 2 &&
           i->shape.kind == OT_IR_ARRAY && !ot_dtype_is_float(i->shape.array.dtype) &&
           !ot_dtype_is_complex(i->shape.array.dtype);
}

static uint64_t cse_hash(const cse_reps *r, const ot_instr *i) {
    uint64_t h = mix(0x1234, (uint64_t)i->opcode);
    h = mix(h, (uint64_t)i->shape.kind);
    if (i->shape.kind == OT_IR_ARRAY) {
        h = mix(h, (uint64_t)i->shape.array.dtype);
        for (int k = 0; k < i->shape.array.rank; k++) h = mix(h, (uint64_t)i->shape.array.dims[k]);
    }
    h = mix(h, ot_instr_attrs_hash(i));
    if (cse_commutes(i)) {
        uint64_t a = (uint64_t)i->operands[0]->id, b = (uint64_t)i->operands[1]->id;
        h = mix(h, a < b ? a : b);
        h = mix(h, a < b ? b : a);
    } else {
        for (int k = 0; k < i->noperands; k++) h = mix(h, (uint64_t)i->operands[k]->id);
    }
    for (int k = 0; k < i->ncalled; k++) h = mix(h, (uint64_t)cse_rep(r, i->called[k])->id);
    return fmix(h);
}

/* Everything but the operands and the called computations. */
static bool cse_same_op(const ot_instr *a, const ot_instr *b) {
    if (a->opcode != b->opcode || a->noperands != b->noperands || a->ncalled != b->ncalled)
        return false;
    if (!ot_ir_shape_equal(&a->shape, &b->shape)) return false;
    if (a->shape.kind == OT_IR_ARRAY && a->shape.array.dtype != b->shape.array.dtype) return false;
    return ot_instr_attrs_equal(a, b);
}

static bool cse_equal(const cse_reps *r, const ot_instr *a, const ot_instr *b) {
    if (!cse_same_op(a, b)) return false;
    if (cse_commutes(a)) {
        bool same = a->operands[0] == b->operands[0] && a->operands[1] == b->operands[1];
        bool swap = a->operands[0] == b->operands[1] && a->operands[1] == b->operands[0];
        if (!same && !swap) return false;
    } else {
        for (int k = 0; k < a->noperands; k++)
            if (a->operands[k] != b->operands[k]) return false;
    }
    for (int k = 0; k < a->ncalled; k++)
        if (cse_rep(r, a->called[k]) != cse_rep(r, b->called[k])) return false;
    return true;
}

static bool cse_candidate(const ot_instr *i) {
    if (i->opcode == OT_OP_PARAMETER || ot_instr_has_side_effect(i)) return false;
    if (i->opcode == OT_OP_CONSTANT && i->attrs->literal && i->attrs->literal->elided) return false;
    return true;
}

/* Computation k's structural hash over its post order (each instruction's mark set to its
 * position in it); false when it must keep its own identity (an instruction with a side effect
 * or a constant of unknown value). */
static bool comp_hash(const cse_reps *r, int k, uint64_t *out) {
    const ot_computation *c = r->ord->comps[k];
    ot_instr *const *po = r->ord->po[k];
    int64_t n = r->ord->npo[k];
    if (!c->root || n != c->ninstrs) return false;
    uint64_t h = mix(0x5eed, (uint64_t)n);
    h = mix(h, (uint64_t)c->nparams);
    for (int64_t j = 0; j < n; j++) {
        ot_instr *x = po[j];
        if (x->opcode != OT_OP_PARAMETER && !cse_candidate(x)) return false;
        x->mark = j;
        h = mix(h, ot_instr_attrs_hash(x));
        if (x->shape.kind == OT_IR_ARRAY) {
            h = mix(h, (uint64_t)x->shape.array.dtype);
            for (int d = 0; d < x->shape.array.rank; d++)
                h = mix(h, (uint64_t)x->shape.array.dims[d]);
        }
        for (int q = 0; q < x->noperands; q++) h = mix(h, (uint64_t)x->operands[q]->mark);
        for (int q = 0; q < x->ncalled; q++) h = mix(h, (uint64_t)cse_rep(r, x->called[q])->id);
    }
    *out = fmix(mix(h, (uint64_t)c->root->mark));
    return true;
}

/* Computations a and b (indices in ord, marks set by comp_hash) compute the same thing: the same
 * instructions in the same post order, operands at the same positions, equal callees. */
static bool comp_equal(const cse_reps *r, int a, int b) {
    const cc_orders *o = r->ord;
    const ot_computation *ca = o->comps[a], *cb = o->comps[b];
    if (o->npo[a] != o->npo[b] || ca->nparams != cb->nparams || ca->root->mark != cb->root->mark)
        return false;
    for (int64_t j = 0; j < o->npo[a]; j++) {
        const ot_instr *x = o->po[a][j], *y = o->po[b][j];
        if (!cse_same_op(x, y)) return false;
        for (int q = 0; q < x->noperands; q++)
            if (x->operands[q]->mark != y->operands[q]->mark) return false;
        for (int q = 0; q < x->ncalled; q++)
            if (cse_rep(r, x->called[q]) != cse_rep(r, y->called[q])) return false;
    }
    return true;
}

/* Computation k's representative, after its instructions were merged. */
static ot_status comp_represent(cse_reps *r, int k) {
    if (!r->tab) {
        r->cap = 16;
        while (r->cap < (uint64_t)r->ord->n * 2) r->cap *= 2;
        r->tab = ot_calloc(r->cap, sizeof *r->tab);
        if (!r->tab) return ot_error(OT_ERR_OUT_OF_MEMORY, "cse: out of memory");
    }
    uint64_t h;
    int rep = k;
    if (comp_hash(r, k, &h)) {
        uint64_t p = h & (r->cap - 1);
        while (r->tab[p].at && !(r->tab[p].h == h && comp_equal(r, r->tab[p].at - 1, k)))
            p = (p + 1) & (r->cap - 1);
        if (r->tab[p].at)
            rep = r->tab[p].at - 1;
        else
            r->tab[p] = (struct cse_slot){h, k + 1};
    }
    return cc_ptrmap_put(&r->rep, r->ord->comps[k], rep);
}

/* Where each merged instruction of one computation went: fwd[k] for the instruction at position
 * k of the post order (its mark while the computation is merged), NULL when kept. */
typedef struct cse_fwd {
    ot_instr *const *orig; /* the post order as it came */
    ot_instr **fwd;
    int64_t n;
} cse_fwd;

static ot_instr *cse_forward(void *ctx, const ot_instr *o) {
    const cse_fwd *f = ctx;
    int64_t k = o->mark;
    return k >= 0 && k < f->n && f->orig[k] == o ? f->fwd[k] : NULL;
}

/* Merges within one computation. *inorder: whether po is the list's order (the list then stays
 * in topological order, and po with the removed instructions taken out, *n, is its post
 * order). *dropped: a removed instruction called another computation than its equal (which may
 * now be unreachable).
 * A merged instruction's users are not redirected when it is found equal (that scans each
 * user's operands once per merge: quadratic for one tuple of many merged values); each
 * instruction instead reads its operands through the merges once, when it is reached in post
 * order, before it is hashed, and the merged instructions are removed at the end. */
static ot_status cse_computation(const cse_reps *r, ot_instr **po, int64_t *np, bool *changed,
                                 bool *inorder, bool *dropped) {
    int64_t n = *np;
    if (n >= (int64_t)UINT32_MAX)
        return ot_error(OT_ERR_OUT_OF_RANGE, "cse: too many instructions");
    /* Slots hold the upper half of the hash beside the instruction's position in po (+1; 0 is
     * empty): probing compares tags, and only a matching tag reads the instruction (a probe
     * that read every instruction it passed would miss the cache at each one). */
    struct slot {
        uint32_t tag, at;
    };
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap *= 2;
    struct slot *tab = ot_calloc(cap, sizeof *tab);
    ot_instr **orig = ot_malloc((size_t)(n ? n : 1) * sizeof *orig);
    ot_instr **fwd = ot_calloc((size_t)(n ? n : 1), sizeof *fwd);
    ot_instr **merged = ot_malloc((size_t)(n ? n : 1) * sizeof *merged);
    ot_instr **eprev = ot_malloc((size_t)(n ? n : 1) * sizeof *eprev);
    if (!tab || !orig || !fwd || !merged || !eprev) {
        ot_free(eprev);
        ot_free(tab);
        ot_free(orig);
        ot_free(fwd);
        ot_free(merged);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "cse: out of memory");
    }
    for (int64_t k = 0; k < n; k++) {
        orig[k] = po[k];
        po[k]->mark = k;
    }
    cse_fwd f = {orig, fwd, n};
    ot_status s = OT_OK;
    int64_t kept = 0, nmerged = 0;
    for (int64_t k = 0; k < n && s == OT_OK; k++) {
        ot_instr *i = po[k];
        /* the list is po when each one's predecessor, past the merged ones (still linked: one
         * step through eprev), is the last one kept */
        if (*inorder) {
            ot_instr *pv = i->prev;
            if (pv && cse_forward(&f, pv)) pv = eprev[pv->mark];
            *inorder = pv == (kept ? po[kept - 1] : NULL);
            eprev[k] = pv; /* where a merged i leaves the list's order: the next one's check */
        }
        po[kept++] = i; /* (a kept instruction's place never changes again) */
        bool fwd_any = false;
        for (int q = 0; q < i->noperands && !fwd_any; q++)
            fwd_any = cse_forward(&f, i->operands[q]) != NULL;
        if (fwd_any && (s = ir_instr_map_operands(i, cse_forward, &f)) != OT_OK) break;
        if (!cse_candidate(i)) continue;
        uint64_t h = cse_hash(r, i);
        uint32_t tag = (uint32_t)(h >> 32);
        uint64_t p = h & (cap - 1);
        ot_instr *hit = NULL;
        while (tab[p].at) {
            if (tab[p].tag == tag && cse_equal(r, po[tab[p].at - 1], i)) {
                hit = po[tab[p].at - 1];
                break;
            }
            p = (p + 1) & (cap - 1);
        }
        if (!hit) {
            tab[p] = (struct slot){tag, (uint32_t)kept};
            continue;
        }
        for (int q = 0; q < i->ncalled; q++) *dropped = *dropped || i->called[q] != hit->called[q];
        fwd[k] = hit;
        merged[nmerged++] = i;
        *changed = true;
        kept--;
    }
    /* the merged instructions' users are forwarded, but for instructions outside the post order
     * (unreachable from the root) and the root itself */
    for (int64_t j = 0; j < nmerged && s == OT_OK; j++) {
        ot_instr *i = merged[j];
        s = ot_instr_replace_all_uses(i, fwd[i->mark]);
        if (s == OT_OK) s = ot_instr_remove(i);
    }
    if (s == OT_OK) *np = kept;
    ot_free(tab);
    ot_free(orig);
    ot_free(fwd);
    ot_free(merged);
    ot_free(eprev);
    return s;
}

ot_status ot_pass_cse(ot_module *m, bool *changed) {
    bool ch = false;
    if (changed) *changed = false;
    cc_orders ord;
    OT_CHECK(cc_orders_take(m, &ord));
    cse_reps reps = {.ord = &ord};
    ot_status s = OT_OK;
    bool inorder = true, dropped = false;
    /* callees first: a computation's callees have their representatives when it is merged */
    for (int k = 0; k < ord.n && s == OT_OK; k++) {
        s = cse_computation(&reps, ord.po[k], &ord.npo[k], &ch, &inorder, &dropped);
        if (s == OT_OK) s = comp_represent(&reps, k);
    }
    cc_ptrmap_free(&reps.rep);
    ot_free(reps.tab);
    /* Merging keeps a list in topological order (a user is redirected to an earlier equal
     * instruction); a list in topological order is its own post order, so the orders without the
     * removed instructions are exactly what cc_orders_build would find again, unless a removed
     * instruction called a computation its equal does not (that one may no longer be
     * reachable). */
    if (s == OT_OK && ch && inorder && !dropped) ord.edits = ir_module_edits(m);
    cc_orders_give(m, &ord);
    if (changed) *changed = ch;
    return s;
}
