/* libFuzzer target for the digits CSV parser: any input either parses into rows whose pixels lie
 * in [0, 1] and labels in 0..9, or fails with a message and an empty data set; nothing leaks.
 * Seeds: fuzz/corpus/digits_csv. */
#include <stdint.h>
#include <stdlib.h>

#include "optitpu/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int64_t live0 = ot_alloc_live();
    ot_clear_error();
    ot_dataset d;
    ot_status s = ot_dataset_parse_digits_csv((const char *)data, size, &d);
    if (s == OT_OK) {
        if (d.n < 1 || d.features != 64 || d.classes != 10) abort();
        for (int64_t i = 0; i < d.n * d.features; i++)
            if (!(d.x[i] >= 0.0f && d.x[i] <= 1.0f)) abort();
        for (int64_t i = 0; i < d.n; i++)
            if (d.y[i] < 0 || d.y[i] > 9) abort();
        ot_dataset_free(&d);
    } else if (ot_last_error()[0] == '\0' || d.x != NULL || d.y != NULL || d.n != 0) {
        abort();
    }
    if (ot_alloc_live() != live0) abort();
    return 0;
}
