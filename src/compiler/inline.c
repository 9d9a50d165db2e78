/* Call inlining (XLA's CallInliner): every `call` in a computation reachable from the entry is
 * replaced by a copy of its callee's instructions, the callee's parameters bound to the call's
 * operands, so the passes after it (simplification, CSE, fusion) see through the call.
 * Inlining runs top-down from the computations that stay (the entry and every computation some
 * other op than `call` refers to: loop bodies, branches, reducers, fusions): a call is replaced by
 * a copy of its callee as written, and the calls that copy holds are inlined in turn from a
 * worklist. The work is the size of what stays: a callee reached only through calls is never
 * inlined into itself first (bottom-up, a chain of d nested calls copied d·(d+1)/2 instructions).
 * Callees left without callers are removed by DCE. */
#include "compiler_internal.h"

#include <stdio.h>

/* Copies callee's instructions into c in front of nothing in particular (they are appended; the
 * compiler re-emits lists in order), callee parameter k bound to call->operands[k], and makes
 * every use of the call a use of the copied root. The copies of the callee's own calls are pushed
 * on work[0..*nwork). */
static ot_status inline_one(ot_computation *c, ot_instr *call, ot_instr ***work, int64_t *nwork,
                            int64_t *workcap) {
    ot_computation *callee = call->called[0];
    if (!callee->root)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "inline %s: callee %s has no root", call->name,
                        callee->name);
    ot_instr **po = NULL;
    int64_t n = 0;
    OT_CHECK(cc_post_order(callee, &po, &n));
    ot_instr **copy = ot_malloc((size_t)(n ? n : 1) * sizeof *copy);
    ot_instr *ops_small[16], **ops = ops_small;
    int opcap = 16;
    ot_status s = OT_OK;
    if (!copy) s = ot_error(OT_ERR_OUT_OF_MEMORY, "inline: out of memory");
    for (int64_t k = 0; k < n && s == OT_OK; k++) {
        ot_instr *x = po[k];
        x->mark = k;
        if (x->opcode == OT_OP_PARAMETER) {
            int64_t p = x->attrs->index;
            if (p < 0 || p >= call->noperands) {
                s = ot_error(OT_ERR_INVALID_ARGUMENT,
                             "inline %s: callee %s parameter %lld has no operand", call->name,
                             callee->name, (long long)p);
                break;
            }
            copy[k] = call->operands[p];
            continue;
        }
        if (x->noperands > opcap) {
            ot_instr **no = ot_malloc((size_t)x->noperands * sizeof *no);
            if (!no) {
                s = ot_error(OT_ERR_OUT_OF_MEMORY, "inline: out of memory");
                break;
            }
            if (ops != ops_small) ot_free(ops);
            ops = no;
            opcap = x->noperands;
        }
        for (int q = 0; q < x->noperands; q++) ops[q] = copy[x->operands[q]->mark];
        /* "<name>.<call id>": distinct for every call, so copies of a callee inlined many
         * times do not walk a chain of taken ".clone.N" names */
        char nm[256];
        snprintf(nm, sizeof nm, "%.200s.%lld", x->name, (long long)call->id);
        s = ot_instr_clone(c, x, ops, nm, &copy[k]);
        if (s == OT_OK && x->opcode == OT_OP_CALL && x->ncalled == 1 &&
            (s = cc_grow(work, workcap, *nwork + 1, sizeof **work)) == OT_OK)
            (*work)[(*nwork)++] = copy[k];
    }
    ot_instr *root = s == OT_OK && n ? copy[callee->root->mark] : NULL;
    if (s == OT_OK && !root) s = ot_error(OT_ERR_INTERNAL, "inline %s: no copied root", call->name);
    if (s == OT_OK) s = ot_instr_replace_all_uses(call, root);
    if (s == OT_OK && call->nusers == 0 && c->root != call) s = ot_instr_remove(call);
    if (ops != ops_small) ot_free(ops);
    ot_free(copy);
    ot_free(po);
    return s;
}

ot_status ot_pass_inline(ot_module *m, bool *changed) {
    bool ch = false;
    if (changed) *changed = false;
    if (ir_module_call_count(m) == 0) return OT_OK; /* nothing to inline: no walk */
    ot_computation **reach = NULL;
    int nreach = 0;
    OT_CHECK(cc_reachable(m, NULL, 0, &reach, &nreach));
    ot_instr **work = NULL;
    int64_t nwork = 0, cap = 0;
    ot_status s = OT_OK;
    /* Inlining copies a callee once per call, so calls nested d deep, each calling twice, grow
     * a module 2^d times: the size after inlining of every computation is found first (callees
     * first, one walk of every reachable list), and when one that stays would exceed
     * OT_INLINE_MAX_INSTRUCTIONS the pass refuses instead of exhausting memory. */
    int64_t *size = ot_calloc((size_t)(nreach ? nreach : 1), sizeof *size);
    bool *stays = ot_calloc((size_t)(nreach ? nreach : 1), sizeof *stays);
    cc_ptrmap index = {0};
    if (!size || !stays) s = ot_error(OT_ERR_OUT_OF_MEMORY, "inline: out of memory");
    const int64_t cap_n = OT_INLINE_MAX_INSTRUCTIONS;
    for (int k = 0; k < nreach && s == OT_OK; k++) {
        int64_t n = 0;
        for (const ot_instr *i = reach[k]->first; i; i = i->next) {
            n++;
            if (i->opcode == OT_OP_CALL && i->ncalled == 1) {
                int64_t j = cc_ptrmap_get(&index, i->called[0]);
                if (j >= 0) n += size[j];
                if (n > cap_n) n = cap_n;
                continue;
            }
            for (int q = 0; q < i->ncalled; q++) { /* callees first: already indexed */
                int64_t j = cc_ptrmap_get(&index, i->called[q]);
                if (j >= 0) stays[j] = true;
            }
        }
        size[k] = n;
        s = cc_ptrmap_put(&index, reach[k], k);
    }
    if (s == OT_OK && nreach) stays[nreach - 1] = true; /* the entry */
    for (int k = 0; k < nreach && s == OT_OK; k++)
        if (stays[k] && size[k] >= cap_n)
            s = ot_error(OT_ERR_RESOURCE_EXHAUSTED,
                         "inline: computation %s would hold at least %lld instructions once its "
                         "calls are inlined (OT_INLINE_MAX_INSTRUCTIONS): calls nested too deep, "
                         "each callee copied once per call",
                         reach[k]->name, (long long)cap_n);
    ot_free(size);
    cc_ptrmap_free(&index);
    for (int k = 0; k < nreach && s == OT_OK; k++) {
        if (!stays[k]) continue;
        ot_computation *c = reach[k];
        nwork = 0;
        for (ot_instr *i = c->first; i && s == OT_OK; i = i->next) {
            if (i->opcode != OT_OP_CALL || i->ncalled != 1) continue;
            s = cc_grow(&work, &cap, nwork + 1, sizeof *work);
            if (s == OT_OK) work[nwork++] = i;
        }
        while (nwork > 0 && s == OT_OK) {
            ot_instr *call = work[--nwork];
            s = inline_one(c, call, &work, &nwork, &cap);
            if (s == OT_OK) ch = true;
        }
    }
    ot_free(stays);
    ot_free(work);
    ot_free(reach);
    if (changed) *changed = ch;
    return s;
}
