/* Loop-invariant code motion for while loops (XLA's WhileLoopInvariantCodeMotion): a value of a
 * while body that depends only on constants, iotas and state elements the body passes through
 * unchanged is computed once before the loop and enters the body as an extra state element,
 * which the body passes through (the compiled loop then never writes that buffer: cc_loop's
 * `invariant`). Only what a kernel would otherwise write to memory every iteration moves: a
 * value whose computation does real work (anything beyond iota, broadcast, reshape, transpose,
 * convert and constants), or a cheap one that an unfusing user reads (a variadic reduce's index
 * operand, a dot, a gather: it is materialized every iteration); a cheap value only fused
 * consumers read is recomputed in registers, cheaper than a read from memory. Values are
 * identical: the same instructions run on the same operands, once instead of per iteration. */
#include "compiler_internal.h"

#include <stdlib.h>

/* The loop state stays within what cc_loop tracks per leaf (bits of a uint64_t). */
#define LICM_MAX_LEAVES 64
/* Hoisted values live for the whole loop: at most this many bytes per loop. */
#define LICM_MAX_BYTES ((int64_t)64 << 20)

enum { INV_NO = 0, INV_CHEAP = 1, INV_WORK = 2 };

static bool cheap_op(ot_opcode op) {
    return op == OT_OP_CONSTANT || op == OT_OP_IOTA || op == OT_OP_BROADCAST ||
           op == OT_OP_RESHAPE || op == OT_OP_TRANSPOSE || op == OT_OP_CONVERT ||
           op == OT_OP_GET_TUPLE_ELEMENT;
}

/* Ops the body may compute before the loop when their operands are invariant: pure array ops. */
static bool movable_op(const ot_instr *i) {
    if (!ot_ir_shape_is_array(&i->shape) || ot_instr_has_side_effect(i)) return false;
    switch (i->opcode) {
    case OT_OP_IOTA:
    case OT_OP_BROADCAST:
    case OT_OP_RESHAPE:
    case OT_OP_TRANSPOSE:
    case OT_OP_SLICE:
    case OT_OP_CONCATENATE:
    case OT_OP_PAD:
    case OT_OP_REVERSE: return true;
    default: return i->opcode != OT_OP_MAP && ot_opcode_is_elementwise(i->opcode);
    }
}

/* Whether user u reads its operands element by element inside a fused kernel (elementwise ops,
 * changes of shape, a single-array reduce): then a cheap operand costs nothing to recompute. */
static bool fuses_operands(const ot_instr *u) {
    if (u->opcode == OT_OP_REDUCE) return u->noperands == 2;
    return u->opcode == OT_OP_BROADCAST || u->opcode == OT_OP_RESHAPE ||
           u->opcode == OT_OP_TRANSPOSE || u->opcode == OT_OP_SLICE ||
           (u->opcode != OT_OP_MAP && ot_opcode_is_elementwise(u->opcode));
}

/* Whether state element k of body b comes back unchanged: the root's operand k is
 * get-tuple-element(parameter, k). */
static bool passes_through(const ot_computation *b, int64_t k) {
    const ot_instr *r = b->root->operands[k];
    return r->opcode == OT_OP_GET_TUPLE_ELEMENT && r->operands[0] == b->params[0] &&
           r->attrs->index == k;
}

/* Hoists what loop w's body computes from invariants into its state; *changed when it did. */
static ot_status hoist_loop(ot_instr *w, bool *changed) {
    ot_computation *c = w->parent, *cond = w->called[0], *b = w->called[1];
    ot_instr *p = b->nparams == 1 ? b->params[0] : NULL;
    if (!p || cond->nparams != 1 || !b->root || b->root->opcode != OT_OP_TUPLE ||
        p->shape.kind != OT_IR_TUPLE)
        return OT_OK;
    const int n = p->shape.ntuple;
    if (b->root->noperands != n || n >= LICM_MAX_LEAVES) return OT_OK;
    for (int k = 0; k < n; k++)
        if (!ot_ir_shape_is_array(&p->shape.tuple[k])) return OT_OK;

    ot_instr **po = NULL;
    int64_t npo = 0;
    OT_CHECK(ot_computation_post_order(b, &po, &npo));
    for (int64_t j = 0; j < npo; j++) po[j]->mark = INV_NO;
    for (int64_t j = 0; j < npo; j++) {
        ot_instr *i = po[j];
        if (i->opcode == OT_OP_GET_TUPLE_ELEMENT && i->operands[0] == p) {
            if (passes_through(b, i->attrs->index)) i->mark = INV_CHEAP;
            continue;
        }
        if (i->opcode == OT_OP_CONSTANT) {
            i->mark = INV_CHEAP;
            continue;
        }
        if (!movable_op(i)) continue;
        int m = cheap_op(i->opcode) ? INV_CHEAP : INV_WORK;
        for (int o = 0; o < i->noperands && m != INV_NO; o++)
            m = i->operands[o]->mark == INV_NO
                    ? INV_NO
                    : (i->operands[o]->mark > m ? i->operands[o]->mark : m);
        i->mark = m;
    }
    /* The frontier: invariant values (not constants, not bare state elements) that a variant
     * instruction reads, and that are worth a buffer. */
    ot_instr **hoist = ot_malloc(sizeof *hoist * (size_t)(npo ? npo : 1));
    if (!hoist) {
        ot_free(po);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "licm: out of memory");
    }
    int nh = 0;
    int64_t bytes = 0;
    for (int64_t j = 0; j < npo && n + nh < LICM_MAX_LEAVES; j++) {
        ot_instr *i = po[j];
        if (i->mark == INV_NO || i->opcode == OT_OP_CONSTANT ||
            i->opcode == OT_OP_GET_TUPLE_ELEMENT)
            continue;
        bool frontier = false, materialized = false;
        for (int u = 0; u < i->nusers; u++)
            if (i->users[u]->mark == INV_NO) {
                frontier = true;
                if (!fuses_operands(i->users[u])) materialized = true;
            }
        if (!frontier || (i->mark == INV_CHEAP && !materialized)) continue;
        int64_t nb = ot_ir_shape_nbytes(&i->shape);
        if (bytes + nb > LICM_MAX_BYTES) continue;
        bytes += nb;
        hoist[nh++] = i;
    }
    ot_status s = OT_OK;
    if (nh == 0) goto done;

    /* Copy the invariant instructions hoisted values need in front of the loop, in post order:
     * a state element reads the loop's init. user_data maps a body instruction to its copy. */
    ot_instr *init = w->operands[0];
    for (int64_t j = 0; j < npo; j++) po[j]->user_data = NULL;
    /* which invariant instructions the hoisted values reach: walk back from them (reverse post
     * order visits users before operands, so one pass marks every needed operand) */
    for (int h = 0; h < nh; h++) hoist[h]->user_data = hoist[h];
    for (int64_t j = npo - 1; j >= 0; j--)
        if (po[j]->user_data)
            for (int o = 0; o < po[j]->noperands; o++)
                po[j]->operands[o]->user_data = po[j]->operands[o];
    for (int64_t j = 0; j < npo && s == OT_OK; j++) {
        ot_instr *i = po[j];
        if (!i->user_data || i == p) continue;
        ot_instr *copy = NULL;
        if (i->opcode == OT_OP_GET_TUPLE_ELEMENT) {
            copy = ot_build_get_tuple_element(c, init, i->attrs->index);
            if (!copy) s = ot_module_status(c->module);
        } else {
            ot_instr *ops[8], **opv = ops;
            if (i->noperands > 8 && !(opv = ot_malloc(sizeof *opv * (size_t)i->noperands))) {
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "licm: out of memory");
                break;
            }
            for (int o = 0; o < i->noperands; o++) opv[o] = i->operands[o]->user_data;
            s = ot_instr_clone(c, i, opv, NULL, &copy);
            if (opv != ops) ot_free(opv);
        }
        i->user_data = copy;
    }
    if (s != OT_OK) goto done;

    /* The new state: the old elements, then the hoisted values. */
    ot_instr **elems = ot_malloc(sizeof *elems * (size_t)(n + nh));
    if (!elems) {
        s = ot_error(OT_ERR_OUT_OF_MEMORY, "licm: out of memory");
        goto done;
    }
    for (int k = 0; k < n && s == OT_OK; k++)
        if (!(elems[k] = ot_build_get_tuple_element(c, init, k))) s = ot_module_status(c->module);
    for (int h = 0; h < nh; h++) elems[n + h] = hoist[h]->user_data;
    ot_instr *init2 = s == OT_OK ? ot_build_tuple(c, elems, n + nh) : NULL;
    if (!init2) {
        ot_free(elems);
        if (s == OT_OK) s = ot_module_status(c->module);
        goto done;
    }
    /* Both computations take the wider state (the tuple shape lives in the module's arena);
     * inside the body each hoisted value becomes its state element, passed through. */
    p->shape = init2->shape;
    cond->params[0]->shape = init2->shape;
    for (int k = 0; k < n; k++) elems[k] = b->root->operands[k];
    for (int h = 0; h < nh && s == OT_OK; h++) {
        ot_instr *g = ot_build_get_tuple_element(b, p, n + h);
        if (!g)
            s = ot_module_status(c->module);
        else if ((s = ot_instr_replace_all_uses(hoist[h], g)) == OT_OK)
            elems[n + h] = g;
    }
    ot_instr *root2 = s == OT_OK ? ot_build_tuple(b, elems, n + nh) : NULL;
    ot_free(elems);
    if (!root2) {
        if (s == OT_OK) s = ot_module_status(c->module);
        goto done;
    }
    ot_computation_set_root(b, root2);
    ot_instr *w2 = ot_build_while(c, cond, b, init2);
    ot_instr **outs = w2 ? ot_malloc(sizeof *outs * (size_t)n) : NULL;
    if (!outs) {
        s = w2 ? ot_error(OT_ERR_OUT_OF_MEMORY, "licm: out of memory")
               : ot_module_status(c->module);
        goto done;
    }
    for (int k = 0; k < n && s == OT_OK; k++)
        if (!(outs[k] = ot_build_get_tuple_element(c, w2, k))) s = ot_module_status(c->module);
    ot_instr *back = s == OT_OK ? ot_build_tuple(c, outs, n) : NULL;
    ot_free(outs);
    if (!back) {
        if (s == OT_OK) s = ot_module_status(c->module);
        goto done;
    }
    /* the old loop's users read the new one's first n elements (simplify folds the tuple) */
    if ((s = ot_instr_replace_all_uses(w, back)) == OT_OK) s = ot_instr_remove(w);
    *changed = true;
done:
    ot_free(hoist);
    ot_free(po);
    return s;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return (x > y) - (x < y);
}

/* How many instructions call c: the calls sorted (n log n), counted by the range of c. */
static int64_t callers(void **calls, int64_t n, const ot_computation *c) {
    void *const key = (void *)c;
    void **hit = bsearch(&key, calls, (size_t)n, sizeof *calls, cmp_ptr);
    if (!hit) return 0;
    void **lo = hit, **hi = hit;
    while (lo > calls && lo[-1] == key) lo--;
    while (hi + 1 < calls + n && hi[1] == key) hi++;
    return hi - lo + 1;
}

ot_status ot_pass_licm(ot_module *m, bool *changed) {
    bool ignored;
    if (!changed) changed = &ignored;
    if (!m) return ot_error(OT_ERR_INVALID_ARGUMENT, "licm: NULL module");
    *changed = false;
    const int nc = ot_module_computation_count(m);
    /* A body or condition another instruction also calls keeps its signature: count callers. */
    int64_t ncalls = 0;
    for (int k = 0; k < nc; k++)
        for (ot_instr *i = ot_module_computation(m, k)->first; i; i = i->next) ncalls += i->ncalled;
    void **calls = ot_malloc(sizeof *calls * (size_t)(ncalls ? ncalls : 1));
    if (!calls) return ot_error(OT_ERR_OUT_OF_MEMORY, "licm: out of memory");
    int64_t q = 0;
    for (int k = 0; k < nc; k++)
        for (ot_instr *i = ot_module_computation(m, k)->first; i; i = i->next)
            for (int j = 0; j < i->ncalled; j++) calls[q++] = i->called[j];
    qsort(calls, (size_t)ncalls, sizeof *calls, cmp_ptr);
    ot_status s = OT_OK;
    for (int k = 0; k < nc && s == OT_OK; k++) {
        ot_computation *c = ot_module_computation(m, k);
        /* the rebuilt loop is appended to c and would only be walked again */
        ot_instr *last = c->last;
        for (ot_instr *i = c->first, *next; i && s == OT_OK; i = next) {
            next = i == last ? NULL : i->next;
            if (i->opcode != OT_OP_WHILE || i->called[0] == i->called[1] ||
                callers(calls, ncalls, i->called[0]) != 1 ||
                callers(calls, ncalls, i->called[1]) != 1)
                continue;
            s = hoist_loop(i, changed);
        }
    }
    ot_free(calls);
    return s;
}
