/* Constant folding. The evaluation belongs to the reference evaluator (exec); until that exists
 * the pass reports UNIMPLEMENTED and the -O2 pipeline leaves it out. */
#include "compiler_internal.h"

bool cc_fold_available(void) {
    return false;
}

ot_status ot_pass_fold(ot_module *m, int64_t max_elements, bool *changed) {
    (void)m;
    (void)max_elements;
    if (changed) *changed = false;
    return ot_error(OT_ERR_UNIMPLEMENTED,
                    "constant folding: the reference evaluator (exec) is not built yet");
}
