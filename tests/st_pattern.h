/* The deterministic tensor contents shared with scripts/safetensors_interop.py (pattern()). */
#ifndef OT_ST_PATTERN_H
#define OT_ST_PATTERN_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "optitpu/safetensors.h"

static inline void st_pattern(ot_st_dtype dt, uint64_t n, uint64_t salt, uint8_t *out) {
    size_t size = ot_st_dtype_size(dt);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t x = i * 0x9E3779B97F4A7C15ull + 0x0123456789ABCDEFull + salt * 0x51ED27ull;
        x ^= x >> 29;
        if (dt == OT_ST_BOOL) {
            out[i] = (uint8_t)(x & 1);
        } else {
            for (size_t b = 0; b < size; b++) out[i * size + b] = (uint8_t)(x >> (8 * b));
        }
    }
}

/* Reads a whole file into a malloc'd buffer of exactly its size (so ASan sees over-reads). */
static inline uint8_t *st_read_file(const char *path, size_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return b;
}

#endif
