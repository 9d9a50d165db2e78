/* The fast 8-bit state kernel's block quantizer (src/exec/fast_state8.c: the reciprocal
 * quantizer where the CPU has AVX-512 VBMI and DQ, else the estimate or the table) against the
 * exact quantizer (the graph code's nearest-entry rule, ties included) over every f32 bit pattern
 * in [-1, 1] for the signed map and [0, 1] for the unsigned one (Adam's second moment), with an
 * absmax of 1 (so x / absmax = x * (1 / absmax) = x: the pieces, the lines, the band and the
 * fallback see every value; other absmaxes move x * (1 / absmax) by at most 2 ulps, which the
 * band bounds and test_state8 samples), without FTZ/DAZ and, over the subnormals, with them.
 * About 3.2e9 exact codes: a minute or two, hence the slow label. */
#include "ot_test.h"

#include <string.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "exec/state8_internal.h"

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Patterns [lo, hi] (with the sign bit when neg) in blocks of 256; the count of codes that
 * differ (the first few printed). */
static int64_t sweep(bool sgn, bool neg, uint32_t lo, uint32_t hi, bool z) {
    const float *map = ex_q8_table(sgn);
    float x[EX_STATE8_BLOCK];
    uint8_t co[EX_STATE8_BLOCK];
    int64_t bad = 0;
    for (uint64_t b = lo; b <= hi; b += EX_STATE8_BLOCK) {
        for (int e = 0; e < EX_STATE8_BLOCK; e++) {
            uint64_t u = b + (uint64_t)e > hi ? hi : b + (uint64_t)e;
            x[e] = bitsf((uint32_t)u | (neg ? 0x80000000u : 0u));
        }
        if (!ex_q8_quantize_fast(x, 1.0f, sgn, co)) return -1;
        for (int e = 0; e < EX_STATE8_BLOCK; e++) {
            uint8_t want = ex_q8_code_exact(map, x[e], sgn, z);
            if (co[e] != want && bad++ < 8)
                fprintf(stderr, "%s map, x = %a: code %d, exact %d\n", sgn ? "signed" : "unsigned",
                        (double)x[e], co[e], want);
        }
    }
    return bad;
}

static void test_every_float(void) {
    bool est_possible;
    int which = ex_q8_fast_quantizer(&est_possible);
    fprintf(stderr, "the kernel's quantizer: %s\n",
            which == 3   ? "reciprocal"
            : which == 2 ? "estimate"
            : which == 1 ? "table"
                         : "exact");
    if (which == 0) OT_SKIP("no fast quantizer passed its checks on this CPU");
    int64_t bad = 0;
    for (int sg = 0; sg < 2; sg++)
        for (int neg = 0; neg <= sg; neg++) {
            bad += sweep(sg == 1, neg == 1, 0, 0x3f800000u, false);
#if defined(__x86_64__) && defined(__SSE2__)
            unsigned csr = _mm_getcsr();
            _mm_setcsr(csr | 0x8040u); /* FTZ | DAZ, the kernel's modes under the reference's */
            bad += sweep(sg == 1, neg == 1, 0, 0x00800000u, true);
            _mm_setcsr(csr);
#endif
        }
    EXPECT_INT_EQ(bad, 0);
}

OT_TEST_MAIN(OT_TEST(test_every_float))
