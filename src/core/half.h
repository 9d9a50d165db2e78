/* f16 <-> f32 conversion (IEEE binary16, round to nearest even), the library's one definition:
 * ot_f32_to_f16 / ot_f16_to_f32 (src/core/dtype.c) are these, inline kernels that convert whole
 * arrays (the fast dot's f16 results) call them so that the compiler vectorizes their loops, and
 * native code (src/codegen/emit.c: ot_f2h, ot_h2f) pastes the same steps. Branch-free: no step
 * depends on a comparison other than through a select, which the vectorizer turns into blends.
 * The same bits for every input whether or not the CPU's FTZ / DAZ modes are set (checked over
 * all 2^32 floats and all 2^16 halves): the only float steps are |f| + 0.5, which rounds a value
 * below the f16 normal range to its multiple of 2^-24 (the units land in the low bits of 0.5's
 * mantissa; an f32 subnormal, read as zero under DAZ, rounds to zero either way), and the exact
 * product m * 2^-24 that widens an f16 subnormal (a normal float). NaNs keep sign and payload;
 * narrowing sets the quiet bit, widening does not. Pure functions: safe from any thread. */
#ifndef OT_CORE_HALF_H
#define OT_CORE_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint16_t ot_half_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t a = u & 0x7fffffffu, s = (u >> 16) & 0x8000u;
    uint32_t r = a - 0x38000000u; /* rebias the exponent 127 -> 15, round the 13 dropped bits */
    uint32_t v = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    float af, sf;
    memcpy(&af, &a, 4);
    sf = af + 0.5f;
    uint32_t sub;
    memcpy(&sub, &sf, 4);
    sub -= 0x3f000000u;
    v = a < 0x38800000u ? sub : v;                              /* subnormal or zero */
    v = a >= 0x477ff000u ? 0x7c00u : v;                         /* rounds to >= 65520 */
    v = a > 0x7f800000u ? (0x7e00u | ((a >> 13) & 0x3ffu)) : v; /* NaN, quieted */
    return (uint16_t)(s | v);
}

static inline float ot_half_to_f32(uint16_t h) {
    uint32_t a = h & 0x7fffu, s = (uint32_t)(h & 0x8000u) << 16;
    float sf = (float)(int32_t)a * 5.9604644775390625e-08f; /* subnormal: m * 2^-24, exact */
    uint32_t sub;
    memcpy(&sub, &sf, 4);
    uint32_t nrm = (a << 13) + (a >= 0x7c00u ? 0x70000000u : 0x38000000u); /* inf/NaN: 255 */
    uint32_t m = 0u - (uint32_t)(a < 0x400u);
    uint32_t u = s | (sub & m) | (nrm & ~m);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
