/* e^x for f32, shared by the reference evaluator (src/exec/elementwise.c) and generated code
 * (src/codegen/emit.c pastes this text into its preamble), so both give the same bits.
 *
 * Evaluated in double: |x| above 200 is clamped to ±200 (the result is 0 or inf either way;
 * NaN passes), k = round(x / ln 2) by adding 1.5·2^52, r = x - k·ln 2 with ln 2 split in two so
 * that k·hi is exact (|r| <= 0.347), e^r by its Taylor polynomial of degree 11 (truncation below
 * 7e-15 relative), times 2^k built from the exponent bits, rounded to float once. The double
 * result is within about 1e-14 relative of e^x, so the float is the correctly rounded value
 * unless e^x lies that close to a rounding boundary: over every 7th f32 bit pattern (613M
 * inputs) it differs from glibc 2.36's expf on 24,465 and is never the farther of the two from
 * e^x. Unlike a libm call the loop around it vectorizes: no branches (the clamp is an integer
 * select), no tables. */
#ifndef OT_EXPF_POLY_H
#define OT_EXPF_POLY_H

#define OT_EXPF_DEF                                                                                \
    static inline float ot_expf(float x) {                                                         \
        union {                                                                                    \
            float f;                                                                               \
            uint32_t u;                                                                            \
        } xb = {x};                                                                                \
        uint32_t ax = xb.u & 0x7fffffffu;                                                          \
        xb.u = ax > 0x43480000u && ax <= 0x7f800000u ? (xb.u & 0x80000000u) | 0x43480000u : xb.u;  \
        double xd = (double)xb.f;                                                                  \
        double t = xd * 0x1.71547652b82fep0 + 0x1.8p52;                                            \
        double kd = t - 0x1.8p52;                                                                  \
        double r = (xd - kd * 0x1.62e42fefa3000p-1) - kd * 0x1.3de6af278ece6p-42;                  \
        double p = 0x1.ae64567f544e4p-26;                                                          \
        p = p * r + 0x1.27e4fb7789f5cp-22;                                                         \
        p = p * r + 0x1.71de3a556c734p-19;                                                         \
        p = p * r + 0x1.a01a01a01a01ap-16;                                                         \
        p = p * r + 0x1.a01a01a01a01ap-13;                                                         \
        p = p * r + 0x1.6c16c16c16c17p-10;                                                         \
        p = p * r + 0x1.1111111111111p-7;                                                          \
        p = p * r + 0x1.5555555555555p-5;                                                          \
        p = p * r + 0x1.5555555555555p-3;                                                          \
        p = p * r + 0x1.0p-1;                                                                      \
        p = p * r + 1.0;                                                                           \
        p = p * r + 1.0;                                                                           \
        union {                                                                                    \
            double d;                                                                              \
            uint64_t u;                                                                            \
        } tb = {t}, sb;                                                                            \
        sb.u = (tb.u + 1023u) << 52;                                                               \
        return (float)(p * sb.d);                                                                  \
    }

#endif
