/* Compiled while loops and conditionals (loop.h): each loop's condition and body, and each
 * conditional's branch, extracted into a module of its own whose entry takes the loop state as
 * array parameters (a tuple of them passed to a call of the original computation, which inlining
 * and simplification dissolve), compiled by the whole pipeline. Linear in the module per level of
 * nesting: a computation is copied once per loop level it sits under, at most CC_LOOP_MAX_DEPTH
 * times. */
#include "executable_internal.h"
#include "loop.h"

/* Appends the array leaves of shape s (depth first) as parameters of c and builds s's value
 * from them; tuple nesting is walked with an explicit stack. */
enum { MAX_TUPLE_NEST = 64 };

static ot_status build_state(ot_computation *c, const ot_ir_shape *s, int64_t *nparam,
                             ot_instr **out) {
    if (s->kind == OT_IR_ARRAY) {
        ot_instr *p = ot_build_parameter(c, (*nparam)++, s->array, NULL);
        if (!p) return ot_module_status(c->module);
        *out = p;
        return OT_OK;
    }
    if (s->kind != OT_IR_TUPLE)
        return ot_error(OT_ERR_UNIMPLEMENTED, "loop: a token in the loop state");
    struct frame {
        const ot_ir_shape *s;
        int k;
        ot_instr **el;
    } st[MAX_TUPLE_NEST];
    int sp = 0;
    ot_status r = OT_OK;
    ot_instr *done = NULL;
    st[sp++] = (struct frame){s, 0, ot_calloc((size_t)(s->ntuple ? s->ntuple : 1), sizeof(void *))};
    if (!st[0].el) return ot_error(OT_ERR_OUT_OF_MEMORY, "loop: out of memory");
    while (sp > 0 && r == OT_OK) {
        struct frame *f = &st[sp - 1];
        if (f->k == f->s->ntuple) {
            ot_instr *t = ot_build_tuple(c, f->el, f->s->ntuple);
            ot_free(f->el);
            sp--;
            if (!t) {
                r = ot_module_status(c->module);
                break;
            }
            if (sp == 0)
                done = t;
            else
                st[sp - 1].el[st[sp - 1].k++] = t;
            continue;
        }
        const ot_ir_shape *e = &f->s->tuple[f->k];
        if (e->kind == OT_IR_ARRAY) {
            ot_instr *p = ot_build_parameter(c, (*nparam)++, e->array, NULL);
            if (!p)
                r = ot_module_status(c->module);
            else
                f->el[f->k++] = p;
        } else if (e->kind != OT_IR_TUPLE) {
            r = ot_error(OT_ERR_UNIMPLEMENTED, "loop: a token in the loop state");
        } else if (sp == MAX_TUPLE_NEST) {
            r = ot_error(OT_ERR_UNIMPLEMENTED, "loop: state tuples nested over %d deep",
                         MAX_TUPLE_NEST);
        } else {
            ot_instr **el = ot_calloc((size_t)(e->ntuple ? e->ntuple : 1), sizeof(void *));
            if (!el)
                r = ot_error(OT_ERR_OUT_OF_MEMORY, "loop: out of memory");
            else
                st[sp++] = (struct frame){e, 0, el};
        }
    }
    while (sp > 0) ot_free(st[--sp].el);
    if (r == OT_OK) *out = done;
    return r;
}

/* Computation f (one parameter: the loop state) as a module of its own whose entry takes the
 * state's array leaves, compiled at depth. With `in_place` and a state of arrays (or a tuple of
 * them), each output leaf is donated from the parameter leaf in its place (input/output
 * aliasing): the body then updates the state in its own buffers where buffer assignment finds
 * that safe (a dynamic-update-slice of a scan's output writes only the update, an elementwise
 * update writes over its operand, an element passed through is not copied), and through a
 * temporary and a copy at the end where it does not. */
static ot_status compile_part(const ot_computation *f, const ot_compile_options *o, int depth,
                              bool in_place, ot_executable **out) {
    *out = NULL;
    if (f->nparams != 1)
        return ot_error(OT_ERR_INTERNAL, "loop: %s takes %d parameters", f->name, f->nparams);
    ot_module *m = NULL;
    OT_CHECK(ir_module_extract(f, &m));
    ot_computation *fc = ot_module_entry(m);
    const ot_instr *p = NULL;
    for (const ot_instr *i = fc->first; i; i = i->next)
        if (i->opcode == OT_OP_PARAMETER) p = i;
    ot_computation *c = ot_module_add_computation(m, "loop.entry");
    ot_status s = c ? OT_OK : ot_module_status(m);
    ot_instr *state = NULL, *call = NULL;
    int64_t np = 0;
    if (s == OT_OK && !p) s = ot_error(OT_ERR_INTERNAL, "loop: %s has no parameter", f->name);
    if (s == OT_OK) s = build_state(c, &p->shape, &np, &state);
    if (s == OT_OK) {
        call = ot_build(c, OT_OP_CALL, &state, 1, NULL, &fc, 1, NULL, NULL);
        if (!call) s = ot_module_status(m);
    }
    if (s == OT_OK) {
        ot_computation_set_root(c, call);
        ot_module_set_entry(m, c);
        s = ot_module_status(m);
    }
    bool flat = p && (p->shape.kind == OT_IR_ARRAY || p->shape.kind == OT_IR_TUPLE);
    for (int j = 0; flat && p->shape.kind == OT_IR_TUPLE && j < p->shape.ntuple; j++)
        flat = p->shape.tuple[j].kind == OT_IR_ARRAY;
    for (int64_t j = 0; s == OT_OK && in_place && flat && j < np; j++) {
        ot_io_alias a;
        memset(&a, 0, sizeof a);
        a.noutput_index = p->shape.kind == OT_IR_TUPLE ? 1 : 0;
        a.output_index[0] = j;
        a.param_number = j;
        s = ot_module_add_alias(m, &a);
    }
    ot_compile_options so = *o;
    so.dump_dir = so.dump_after = NULL; /* the dumps are the top-level module's */
    if (s == OT_OK) s = cc_compile_at(m, &so, depth, out);
    ot_module_free(m);
    return s;
}

/* Branch f compiled once per executable (by_comp: computation -> its executable, NULL when its
 * compile failed; kept in e->branch_exes); NULL when it does not compile. */
static ot_executable *branch_exe(ot_executable *e, const ot_computation *f,
                                 const ot_compile_options *o, int depth, ir_ptr_map *by_comp,
                                 int64_t *cap) {
    if (ir_ptr_map_get(by_comp, f)) { /* the entry is the index + 1 in e->branch_exes */
        intptr_t at = (intptr_t)ir_ptr_map_get(by_comp, f) - 1;
        return at >= 0 ? e->branch_exes[at] : NULL;
    }
    ot_executable *x = NULL;
    ot_status s = compile_part(f, o, depth + 1, false, &x);
    if (s == OT_OK && e->nbranch_exes == *cap) {
        int64_t nc = *cap ? 2 * *cap : 8;
        ot_executable **g = ot_realloc(e->branch_exes, (size_t)nc * sizeof *g);
        if (!g)
            s = ot_error(OT_ERR_OUT_OF_MEMORY, "conditional: out of memory");
        else {
            e->branch_exes = g;
            *cap = nc;
        }
    }
    if (s != OT_OK) {
        ot_log(OT_LOG_DEBUG, "branch %s: %s; its conditionals run in the evaluator", f->name,
               ot_last_error());
        ot_executable_free(x);
        if (ir_ptr_map_put(by_comp, f, (void *)(intptr_t)-1) != OT_OK) ot_clear_error();
        return NULL;
    }
    e->branch_exes[e->nbranch_exes++] = x;
    if (ir_ptr_map_put(by_comp, f, (void *)(intptr_t)e->nbranch_exes) != OT_OK) ot_clear_error();
    return x;
}

/* Kernel k, a conditional: its branches compiled (shared with the executable's other
 * conditionals that call the same computation) and checked against the kernel's leaves. */
static void compile_cond(ot_executable *e, int64_t k, const ot_compile_options *o, int depth,
                         ir_ptr_map *by_comp, int64_t *cap) {
    const ot_kernel *kn = &e->k[k];
    const ot_instr *c = kn->instr;
    int nb = c->ncalled;
    if (nb < 1 || c->noperands != nb + 1) return;
    if (kn->ninputs < 1) return;
    const ot_slot *sel = &e->s[kn->inputs[0]];
    if (ot_shape_numel_unchecked(&sel->shape) != 1 ||
        (sel->shape.dtype != OT_PRED && sel->shape.dtype != OT_S32))
        return;
    if (!e->conds) {
        e->conds = ot_calloc((size_t)e->nk, sizeof *e->conds);
        if (!e->conds) return;
    }
    ot_executable **br = ot_calloc((size_t)nb, sizeof *br);
    int *leaf0 = ot_calloc((size_t)nb, sizeof *leaf0);
    bool ok = br && leaf0;
    int at = 1; /* the selector is leaf 0 */
    for (int b = 0; ok && b < nb; b++) {
        br[b] = branch_exe(e, c->called[b], o, depth, by_comp, cap);
        ok = br[b] && ot_executable_output_count(br[b]) == kn->noutputs;
        if (ok) {
            leaf0[b] = at;
            at += ot_executable_param_count(br[b]);
        }
    }
    if (ok && at != kn->ninputs) {
        ot_log(OT_LOG_DEBUG,
               "conditional %s: branch parameters differ from its operands; it "
               "runs in the evaluator",
               kn->name);
        ok = false;
    }
    if (!ok) {
        ot_free(br);
        ot_free(leaf0);
        return;
    }
    e->conds[k] = (cc_cond){br, leaf0, nb};
}

/* The leaves (the first 64) that body b passes through unchanged: output q donated from
 * parameter q, written by no kernel but the copy of that parameter into itself (which the
 * runtime skips), and no kernel's output placed over the parameter. */
static uint64_t invariant_leaves(const ot_executable *b) {
    uint64_t m = 0;
    int n = b->nout < b->nparams ? b->nout : b->nparams;
    for (int q = 0; q < n && q < 64; q++) {
        int32_t os = b->out_slot[q], ps = b->param_slot[q];
        bool ok = os == ps || b->s[os].alias_param == q;
        for (int64_t k = 0; ok && k < b->nk; k++) {
            const ot_kernel *kn = &b->k[k];
            if (kn->in_place_input >= 0 && kn->in_place_input < kn->ninputs &&
                kn->inputs[kn->in_place_input] == ps)
                ok = false;
            for (int j = 0; ok && j < kn->noutputs; j++) {
                if (kn->outputs[j] == ps) ok = false;
                if (kn->outputs[j] == os && os != ps)
                    ok = kn->kind == OT_KERNEL_COPY && !kn->instr && kn->ninputs == 1 &&
                         kn->inputs[0] == ps;
            }
        }
        if (ok) m |= (uint64_t)1 << q;
    }
    return m;
}

/* The output leaves (the first 64) of kernel k that are temps no kernel of e reads (read: per
 * slot, whether some kernel reads it; NULL: not known, none reported). */
static uint64_t unread_leaves(const ot_executable *e, int64_t k, const bool *read) {
    const ot_kernel *kn = &e->k[k];
    uint64_t m = 0;
    for (int q = 0; read && q < kn->noutputs && q < 64; q++) {
        int32_t os = kn->outputs[q];
        if (e->s[os].kind == OT_SLOT_TEMP && !read[os]) m |= (uint64_t)1 << q;
    }
    return m;
}

void cc_compile_loops(ot_executable *e, const ot_compile_options *o, int depth) {
    if (depth >= CC_LOOP_MAX_DEPTH) return;
    /* conditionals: each branch computation compiled once per executable */
    ir_ptr_map by_comp = {0};
    int64_t cap = 0;
    for (int64_t k = 0; k < e->nk; k++)
        if (e->k[k].opcode == OT_OP_CONDITIONAL && e->k[k].instr)
            compile_cond(e, k, o, depth, &by_comp, &cap);
    ir_ptr_map_free(&by_comp);
    /* loops with the same condition and body share one compiled pair: each computation is
     * compiled once per executable, however many while instructions run it */
    ir_ptr_map by_body = {0};
    bool *read = NULL; /* per slot: read by some kernel (made at the first while kernel) */
    for (int64_t k = 0; k < e->nk; k++) {
        const ot_kernel *kn = &e->k[k];
        if (kn->opcode != OT_OP_WHILE || !kn->instr) continue;
        if (!e->loops) {
            e->loops = ot_calloc((size_t)e->nk, sizeof *e->loops);
            if (!e->loops) {
                ot_log(OT_LOG_DEBUG, "loop: out of memory; while loops run in the evaluator");
                break;
            }
        }
        if (!read && (read = ot_calloc((size_t)(e->ns ? e->ns : 1), sizeof *read)) != NULL)
            for (int64_t j = 0; j < e->nk; j++)
                for (int i = 0; i < e->k[j].ninputs; i++) read[e->k[j].inputs[i]] = true;
        const ot_instr *w = kn->instr;
        cc_loop *seen = ir_ptr_map_get(&by_body, w->called[1]);
        if (seen && seen->cond_src == w->called[0] && seen->ninputs == kn->ninputs) {
            e->loops[k] = *seen;
            e->loops[k].shared = true;
            e->loops[k].unread = unread_leaves(e, k, read);
            continue;
        }
        cc_loop l = {NULL, NULL, w->called[0], kn->ninputs, false, 0, 0};
        ot_status s = compile_part(w->called[0], o, depth + 1, false, &l.cond);
        if (s == OT_OK) s = compile_part(w->called[1], o, depth + 1, true, &l.body);
        /* the kernel's leaves are the executables' parameters and the body's outputs */
        if (s == OT_OK && (ot_executable_param_count(l.cond) != kn->ninputs ||
                           ot_executable_param_count(l.body) != kn->ninputs ||
                           ot_executable_output_count(l.body) != kn->noutputs ||
                           kn->ninputs != kn->noutputs || ot_executable_output_count(l.cond) != 1))
            s = ot_error(OT_ERR_INTERNAL, "loop %s: compiled signature differs", kn->name);
        if (s == OT_OK) {
            const ot_slot *ps = ot_executable_slot(l.cond, ot_executable_output_slot(l.cond, 0));
            if (ps->shape.dtype != OT_PRED || ot_shape_numel_unchecked(&ps->shape) != 1)
                s = ot_error(OT_ERR_INTERNAL, "loop %s: condition is not a pred", kn->name);
        }
        if (s != OT_OK) {
            ot_log(OT_LOG_DEBUG, "loop %s: %s; it runs in the evaluator", kn->name,
                   ot_last_error());
            ot_executable_free(l.cond);
            ot_executable_free(l.body);
            continue;
        }
        l.invariant = invariant_leaves(l.body);
        l.unread = unread_leaves(e, k, read);
        e->loops[k] = l;
        if (!seen && ir_ptr_map_put(&by_body, w->called[1], &e->loops[k]) != OT_OK)
            ot_clear_error(); /* (not shared then: compiled again for the next one) */
    }
    ir_ptr_map_free(&by_body);
    ot_free(read);
}

void cc_free_loops(ot_executable *e) {
    if (e->conds) {
        for (int64_t k = 0; k < e->nk; k++) {
            ot_free(e->conds[k].branch);
            ot_free(e->conds[k].leaf0);
        }
        ot_free(e->conds);
        e->conds = NULL;
    }
    for (int64_t q = 0; q < e->nbranch_exes; q++) ot_executable_free(e->branch_exes[q]);
    ot_free(e->branch_exes);
    e->branch_exes = NULL;
    e->nbranch_exes = 0;
    if (!e->loops) return;
    for (int64_t k = 0; k < e->nk; k++) {
        if (e->loops[k].shared) continue;
        ot_executable_free(e->loops[k].cond);
        ot_executable_free(e->loops[k].body);
    }
    ot_free(e->loops);
    e->loops = NULL;
}

const cc_loop *cc_executable_loop(const ot_executable *e, int k) {
    if (!e->loops || k < 0 || k >= e->nk || !e->loops[k].body) return NULL;
    return &e->loops[k];
}

const cc_cond *cc_executable_cond(const ot_executable *e, int k) {
    if (!e->conds || k < 0 || k >= e->nk || !e->conds[k].branch) return NULL;
    return &e->conds[k];
}
