/* Constant folding through the reference evaluator (exec): an instruction whose operands are all
 * constants is evaluated by ot_evaluate_instr and replaced by a constant holding the result.
 * Not folded: parameters, constants, side-effecting instructions (rng, collectives, custom-calls
 * with side effects), bare broadcasts and iotas (they would turn a scalar into a large constant),
 * tuple- and token-shaped results, results over max_elements elements, and anything the
 * evaluator cannot evaluate (the instruction is then left as it is). Folding uses the same
 * arithmetic as execution (the evaluator's defaults, so subnormals flush as at run time): a
 * folded module computes bit-identical results. */
#include "compiler_internal.h"
#include "optitpu/exec.h"

bool cc_fold_available(void) {
    return true;
}

static bool foldable(const ot_instr *i, int64_t max_elements) {
    if (i->shape.kind != OT_IR_ARRAY || ot_instr_has_side_effect(i)) return false;
    switch (i->opcode) {
    case OT_OP_PARAMETER:
    case OT_OP_CONSTANT:
    case OT_OP_BROADCAST:
    case OT_OP_IOTA:
    case OT_OP_CUSTOM_CALL:
    case OT_OP_REPLICA_ID:
    case OT_OP_PARTITION_ID:
    case OT_OP_WHILE: return false;
    default: break;
    }
    if (i->noperands == 0) return false;
    if (cc_numel(i) > max_elements) return false;
    for (int k = 0; k < i->noperands; k++) {
        const ot_instr *o = i->operands[k];
        if (o->opcode != OT_OP_CONSTANT || o->shape.kind != OT_IR_ARRAY || !o->attrs->literal ||
            o->attrs->literal->elided || !o->attrs->literal->data)
            return false;
    }
    return true;
}

static ot_status fold_one(ot_instr *i, bool *folded) {
    *folded = false;
    ot_value ops[16];
    int n = i->noperands;
    if (n > 16) return OT_OK;
    for (int k = 0; k < n; k++) ops[k] = ot_value_empty();
    ot_value out = ot_value_empty();
    ot_status s = OT_OK;
    for (int k = 0; k < n && s == OT_OK; k++) {
        const ot_instr *o = i->operands[k];
        ot_tensor t;
        s = ot_tensor_borrow(&t, &o->shape.array, (void *)o->attrs->literal->data);
        if (s == OT_OK) s = ot_value_from_tensor(&ops[k], &t);
    }
    if (s == OT_OK) {
        ot_eval_options eo = ot_eval_options_default();
        s = ot_evaluate_instr(i, ops, n, &eo, &out);
        if (s != OT_OK && s != OT_ERR_OUT_OF_MEMORY) {
            s = OT_OK; /* not evaluable here: leave it */
            ot_clear_error();
            goto done;
        }
    }
    if (s == OT_OK && out.kind == OT_IR_ARRAY &&
        ot_shape_equal(&out.array.shape, &i->shape.array)) {
        ot_instr *k = ot_build_constant(i->parent, i->shape.array, out.array.data);
        if (!k) {
            s = ot_module_status(i->parent->module);
            if (s == OT_OK) s = ot_error(OT_ERR_INTERNAL, "fold: builder failed");
            goto done;
        }
        s = ot_instr_replace_all_uses(i, k);
        if (s == OT_OK && i->nusers == 0 && i->parent->root != i) s = ot_instr_remove(i);
        if (s == OT_OK) *folded = true;
    }
done:
    for (int k = 0; k < n; k++) ot_value_release(&ops[k]);
    ot_value_release(&out);
    return s;
}

ot_status ot_pass_fold(ot_module *m, int64_t max_elements, bool *changed) {
    if (changed) *changed = false;
    if (max_elements <= 0) max_elements = 1 << 20;
    cc_orders ord;
    OT_CHECK(cc_orders_take(m, &ord));
    ot_status s = OT_OK;
    bool ch = false;
    for (int c = 0; c < ord.n && s == OT_OK; c++) {
        ot_instr **po = ord.po[c];
        for (int64_t k = 0; k < ord.npo[c] && s == OT_OK; k++) {
            if (!foldable(po[k], max_elements)) continue;
            bool f = false;
            s = fold_one(po[k], &f);
            ch = ch || f;
        }
    }
    cc_orders_give(m, &ord);
    if (changed) *changed = ch;
    return s;
}
