/* rng-bit-generator: XLA's counter-based generators (three-fry 2x32 and philox 4x32). */
#include "exec/exec_internal.h"

ot_status ex_kernel_rng(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    (void)ops;
    (void)out;
    return ot_error(OT_ERR_UNIMPLEMENTED, "%s: rng-bit-generator is not implemented yet",
                    EX_NAME(i));
}
