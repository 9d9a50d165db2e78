/* libFuzzer target for the 8-bit optimizer-state custom call's configuration (src/exec/state8.h):
 * the input is the backend_config of an optitpu.state8_update over a 256-element parameter with
 * two slots and seven scalars (adam's operands); the first byte, when the input is not empty,
 * drops that many trailing operands (mod 4) so that counts that do not match reach the check.
 * Evaluating the module either succeeds or fails with INVALID_ARGUMENT naming the target; nothing
 * leaks. Seeds: fuzz/corpus/state8_config. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/state8.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int64_t live0 = ot_alloc_live();
    ot_clear_error();
    int drop = size ? data[0] % 4 : 0;
    char *cfg = malloc(size + 1);
    if (!cfg) return 0;
    if (size) memcpy(cfg, data + 1, size - 1);
    cfg[size ? size - 1 : 0] = 0;
    ot_module *m = ot_module_new("fuzz");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_shape f, u, a;
    ot_shape_make(&f, OT_F32, 1, (int64_t[]){256});
    ot_shape_make(&u, OT_U8, 1, (int64_t[]){256});
    ot_shape_make(&a, OT_F32, 1, (int64_t[]){1});
    ot_instr *ops[13];
    int n = 0;
    ops[n++] = ot_build_parameter(c, 0, f, "p");
    ops[n++] = ot_build_parameter(c, 1, f, "g");
    for (int j = 0; j < 2; j++) {
        ops[n++] = ot_build_parameter(c, 2 + 2 * j, u, NULL);
        ops[n++] = ot_build_parameter(c, 3 + 2 * j, a, NULL);
    }
    for (int k = 0; k < 7; k++) ops[n++] = ot_build_constant_scalar(c, OT_F32, 0.5);
    ot_ir_shape el[5] = {ot_ir_shape_array(f), ot_ir_shape_array(u), ot_ir_shape_array(a),
                         ot_ir_shape_array(u), ot_ir_shape_array(a)};
    ot_ir_shape tup;
    memset(&tup, 0, sizeof tup);
    tup.kind = OT_IR_TUPLE;
    tup.ntuple = 5;
    tup.tuple = el;
    ot_computation_set_root(
        c, ot_build_custom_call(c, EX_STATE8_TARGET, ops, n - drop, &tup, cfg, false));
    ot_module_set_entry(m, c);
    free(cfg);
    if (ot_module_finalize(m) == OT_OK) {
        ot_value args[6];
        const ot_shape *sh[6] = {&f, &f, &u, &a, &u, &a};
        int made = 0;
        for (; made < 6; made++) {
            ot_tensor t;
            if (ot_tensor_alloc(&t, sh[made]) != OT_OK) break;
            ot_status s = ot_value_from_tensor(&args[made], &t);
            ot_tensor_release(&t);
            if (s != OT_OK) break;
        }
        if (made == 6) {
            ot_value out = ot_value_empty();
            ot_status s = ot_evaluate(m, args, 6, NULL, &out);
            if (s != OT_OK &&
                (s != OT_ERR_INVALID_ARGUMENT || !strstr(ot_last_error(), EX_STATE8_TARGET)))
                abort(); /* a bad configuration is refused, naming the custom call */
            ot_value_release(&out);
        }
        for (int k = 0; k < made; k++) ot_value_release(&args[k]);
    }
    ot_module_free(m);
    if (ot_alloc_live() != live0) abort();
    return 0;
}
