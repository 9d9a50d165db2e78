/* libFuzzer target for the HLO text parser: any input either parses (and verifies) or fails with
 * a located message; a parsed module prints, the print parses back and prints identically (the
 * fixed point); nothing leaks. Seeds: tests/data/hlo (scripts/fuzz.sh passes that directory). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optitpu/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int64_t live0 = ot_alloc_live();
    ot_clear_error();
    ot_module *m = (ot_module *)&live0;
    ot_status s = ot_hlo_parse((const char *)data, size, NULL, &m);
    if (s == OT_OK) {
        char *t1 = ot_hlo_print(m, NULL);
        if (!t1) abort();
        ot_module *m2 = NULL;
        if (ot_hlo_parse(t1, strlen(t1), NULL, &m2) != OT_OK) abort();
        char *t2 = ot_hlo_print(m2, NULL);
        if (!t2 || strcmp(t1, t2) != 0) abort();
        char *dot = ot_ir_to_dot(m, NULL);
        if (!dot) abort();
        ot_free(dot);
        ot_free(t1);
        ot_free(t2);
        ot_module_free(m2);
        ot_module_free(m);
    } else if (m != NULL || strncmp(ot_last_error(), ot_status_str(s), strlen(ot_status_str(s))) ||
               !strstr(ot_last_error(), "<input>:")) {
        abort(); /* every failure is located and leaves no module */
    }
    if (ot_alloc_live() != live0) abort();
    return 0;
}
