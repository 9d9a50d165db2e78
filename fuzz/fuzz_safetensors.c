/* libFuzzer target for the safetensors reader: any input either parses or fails with a message;
 * a parsed file's tensors all lie inside the input and are found by name; writing them back and
 * parsing again gives the same tensors (dtype, shape, bytes) and metadata; nothing leaks.
 * Seeds: tests/data/safetensors (Python-written files and the reference's accept/reject cases). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optitpu/safetensors.h"

static int same_info(const ot_st_info *a, const ot_st_info *b) {
    if (strcmp(a->name, b->name) != 0 || a->dtype != b->dtype || a->rank != b->rank ||
        a->end - a->begin != b->end - b->begin)
        return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return a->end == a->begin || memcmp(a->data, b->data, a->end - a->begin) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int64_t live0 = ot_alloc_live();
    ot_clear_error();
    ot_safetensors *st = NULL;
    ot_status s = ot_safetensors_parse(data, size, &st);
    if (s != OT_OK) {
        if (st || ot_last_error()[0] == '\0') abort();
        if (ot_alloc_live() != live0) abort();
        return 0;
    }
    size_t n = ot_safetensors_count(st), nm = ot_safetensors_metadata_count(st);
    ot_st_entry *e = malloc((n ? n : 1) * sizeof *e);
    ot_st_kv *kv = malloc((nm ? nm : 1) * sizeof *kv);
    for (size_t i = 0; i < n; i++) {
        const ot_st_info *t = ot_safetensors_at(st, i);
        const uint8_t *p = t->data;
        if (p < data || p + (t->end - t->begin) > data + size) abort();
        if (ot_safetensors_find(st, t->name) == NULL) abort();
        ot_tensor v;
        ot_status vs = ot_safetensors_tensor(st, t->name, &v);
        if (vs == OT_OK && v.data != t->data) abort();
        e[i] = (ot_st_entry){t->name, t->dtype, t->rank, t->dims, t->data};
    }
    for (size_t i = 0; i < nm; i++) kv[i] = ot_safetensors_metadata_at(st, i);
    void *buf = NULL;
    size_t len = 0;
    if (ot_safetensors_serialize(e, n, kv, nm, &buf, &len) != OT_OK) abort();
    ot_safetensors *back = NULL;
    if (ot_safetensors_parse(buf, len, &back) != OT_OK) abort();
    if (ot_safetensors_count(back) != n || ot_safetensors_metadata_count(back) != nm) abort();
    for (size_t i = 0; i < n; i++) {
        const ot_st_info *a = ot_safetensors_at(st, i);
        const ot_st_info *b = ot_safetensors_find(back, a->name);
        if (!b || !same_info(a, b)) abort();
    }
    for (size_t i = 0; i < nm; i++) {
        const char *v = ot_safetensors_metadata_get(back, kv[i].key);
        if (!v || strcmp(v, kv[i].value) != 0) abort();
    }
    ot_safetensors_free(back);
    ot_free(buf);
    free(kv);
    free(e);
    ot_safetensors_free(st);
    if (ot_alloc_live() != live0) abort();
    return 0;
}
