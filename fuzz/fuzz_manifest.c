/* libFuzzer target for the checkpoint manifest parser (manifest.json): any input parses or fails
 * with a message and no handle; a parsed manifest's fields are within their documented ranges;
 * nothing leaks. The self-digest check runs too, but a fuzzer rarely gets past it, so the field
 * validation is also run with the digest check off. Seeds: fuzz/corpus/manifest. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optitpu/ft.h"

static void check(const ot_ckpt_manifest *m) {
    if (m->step < 0 || m->format_version != OT_CKPT_FORMAT_VERSION) abort();
    if (m->rng_words && !m->rng_state) abort();
    for (size_t i = 0; i < m->nfiles; i++) {
        const ot_ckpt_file_entry *f = &m->files[i];
        if (!f->path || strchr(f->path, '/') || f->shard < 0 || f->shard >= f->shards) abort();
        if (strlen(f->path) < 13 || strcmp(f->path + strlen(f->path) - 12, ".safetensors") != 0)
            abort();
    }
    for (size_t i = 0; i < m->nmetrics; i++) {
        double v;
        if (!ot_ckpt_manifest_metric(m, m->metrics[i].name, &v)) abort();
    }
    if (!m->optimizer_json || m->optimizer_json[0] != '{') abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int64_t live0 = ot_alloc_live();
    for (int digest = 0; digest < 2; digest++) {
        ot_clear_error();
        ot_ckpt_manifest *m = NULL;
        ot_status s = ot_ckpt_manifest_parse(data, size, digest == 1, &m);
        if (s == OT_OK) {
            check(m);
            ot_ckpt_manifest_free(m);
        } else if (m || ot_last_error()[0] == '\0') {
            abort();
        }
    }
    if (ot_alloc_live() != live0) abort();
    return 0;
}
