/* Element types, and f16/bf16 <-> f32 conversion with round-to-nearest-even. */
#include "optitpu/core.h"

#include "core/half.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtype_info[] = {
    [OT_PRED] = {"pred", 1}, [OT_S8] = {"s8", 1},   [OT_S16] = {"s16", 2},    [OT_S32] = {"s32", 4},
    [OT_S64] = {"s64", 8},   [OT_U8] = {"u8", 1},   [OT_U16] = {"u16", 2},    [OT_U32] = {"u32", 4},
    [OT_U64] = {"u64", 8},   [OT_F16] = {"f16", 2}, [OT_BF16] = {"bf16", 2},  [OT_F32] = {"f32", 4},
    [OT_F64] = {"f64", 8},   [OT_C64] = {"c64", 8}, [OT_C128] = {"c128", 16},
};
_Static_assert(sizeof(dtype_info) / sizeof(dtype_info[0]) == OT_DTYPE_COUNT,
               "dtype table out of sync with ot_dtype");

static bool valid(ot_dtype t) {
    return t >= 0 && t < OT_DTYPE_COUNT;
}

const char *ot_dtype_name(ot_dtype t) {
    return valid(t) ? dtype_info[t].name : "invalid";
}

size_t ot_dtype_size(ot_dtype t) {
    return valid(t) ? dtype_info[t].size : 0;
}

ot_dtype ot_dtype_from_name(const char *name, size_t len) {
    /* every name is 2-4 bytes; compare against the table only within that range (the parser calls
     * this for every shape it reads) */
    if (len < 2 || len > 4) return OT_DTYPE_INVALID;
    for (int i = 0; i < OT_DTYPE_COUNT; i++)
        if (dtype_info[i].name[0] == name[0] && strncmp(dtype_info[i].name, name, len) == 0 &&
            dtype_info[i].name[len] == '\0')
            return (ot_dtype)i;
    return OT_DTYPE_INVALID;
}

bool ot_dtype_is_float(ot_dtype t) {
    return t == OT_F16 || t == OT_BF16 || t == OT_F32 || t == OT_F64;
}

bool ot_dtype_is_signed_int(ot_dtype t) {
    return t == OT_S8 || t == OT_S16 || t == OT_S32 || t == OT_S64;
}

bool ot_dtype_is_unsigned_int(ot_dtype t) {
    return t == OT_U8 || t == OT_U16 || t == OT_U32 || t == OT_U64;
}

bool ot_dtype_is_integer(ot_dtype t) {
    return ot_dtype_is_signed_int(t) || ot_dtype_is_unsigned_int(t);
}

bool ot_dtype_is_complex(ot_dtype t) {
    return t == OT_C64 || t == OT_C128;
}

ot_dtype ot_dtype_complex_part(ot_dtype t) {
    return t == OT_C64 ? OT_F32 : t == OT_C128 ? OT_F64 : OT_DTYPE_INVALID;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t ot_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return (uint16_t)(u >> 16);
}

float ot_bf16_to_f32(uint16_t b) {
    return bits_f32((uint32_t)b << 16);
}

uint16_t ot_f32_to_f16(float f) {
    return ot_half_from_f32(f);
}

float ot_f16_to_f32(uint16_t h) {
    return ot_half_to_f32(h);
}
