/* libFuzzer target for executable files: any input either loads or fails with CORRUPT_DATA (or
 * OUT_OF_MEMORY) and a message; nothing leaks. A loaded executable serializes back to the same
 * bytes. Each input is tried twice: as it is, and with the header (magic, version, length,
 * checksum) repaired so that mutations reach the body decoder instead of the checksum.
 * Seeds: fuzz/corpus/executable. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optitpu/compiler.h"

static void try_one(const uint8_t *data, size_t size) {
    ot_clear_error();
    ot_executable *e = NULL;
    ot_status s = ot_executable_deserialize(data, size, &e);
    if (s == OT_OK) {
        void *buf = NULL;
        size_t len = 0;
        if (ot_executable_serialize(e, &buf, &len) != OT_OK) abort();
        if (len != size || memcmp(buf, data, size) != 0) abort();
        ot_free(buf);
        ot_executable_free(e);
    } else if (e != NULL || ot_last_error()[0] == '\0' ||
               (s != OT_ERR_CORRUPT_DATA && s != OT_ERR_OUT_OF_MEMORY)) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* a loaded executable gets native code (the C compiler run per input with a large fusion):
     * not what this target exercises */
    static bool native_off;
    if (!native_off) setenv("OPTITPU_CODEGEN", "0", 1);
    native_off = true;
    int64_t live0 = ot_alloc_live();
    try_one(data, size);
    if (size >= 56) {
        uint8_t *cp = malloc(size);
        if (!cp) return 0;
        memcpy(cp, data, size);
        memcpy(cp, "OPTITPUX", 8);
        cp[8] = 1;
        cp[9] = cp[10] = cp[11] = 0;
        uint64_t blen = size - 56;
        for (int k = 0; k < 8; k++) cp[16 + k] = (uint8_t)(blen >> (8 * k));
        if (ot_sha256_digest(cp + 56, size - 56, cp + 24) == OT_OK) try_one(cp, size);
        free(cp);
    }
    if (ot_alloc_live() != live0) abort();
    return 0;
}
