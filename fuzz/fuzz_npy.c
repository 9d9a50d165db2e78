/* libFuzzer target for the .npy reader: any input either parses or fails with a message; a parsed
 * tensor serializes and parses back to the same shape and bytes; nothing leaks.
 * Seeds: tests/data/npy (CI passes that directory). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optitpu/core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int64_t live0 = ot_alloc_live();
    ot_clear_error();
    ot_tensor t;
    ot_status s = ot_npy_parse(data, size, &t);
    if (s == OT_OK) {
        if (t.nbytes > size) abort(); /* data can never be larger than the input */
        void *buf = NULL;
        size_t len = 0;
        /* optitpu never writes bf16, and the reader never yields it */
        if (ot_npy_serialize(&t, &buf, &len) != OT_OK) abort();
        ot_tensor u;
        if (ot_npy_parse(buf, len, &u) != OT_OK) abort();
        if (!ot_shape_equal(&t.shape, &u.shape) || t.nbytes != u.nbytes ||
            (t.nbytes && memcmp(t.data, u.data, t.nbytes) != 0))
            abort();
        ot_tensor_release(&u);
        ot_free(buf);
        ot_tensor_release(&t);
    } else if (ot_last_error()[0] == '\0' || t.data != NULL) {
        abort(); /* every failure says why and leaves the tensor empty */
    }
    if (ot_alloc_live() != live0) abort();
    return 0;
}
