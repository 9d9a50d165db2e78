/* The fast twin of the 8-bit block-wise optimizer update (state8.h; reference: state8.c):
 * blocks of 256 elements split over the pool, each decoded into f32 arrays that stay in L1, the
 * element update as vector code under the CPU's FTZ/DAZ modes (the reference's flushing, as the
 * generated code's hardware mode, src/codegen), and the codes found without the exact
 * quantizer's divisions and neighbour search. Memory gathers are slow (on AMD Zen 4 a 16-lane
 * gather costs about 6.6 ns even from L1, a permute over two registers about 0.4 ns), so with
 * AVX-512 VBMI the decode and the quantizer look tables up by byte permutes over their four byte
 * planes (two 128-byte lookups per plane and 64 values, then unpacking into 32-bit lanes).
 *
 * The estimate quantizer (AVX-512 VBMI): the code of a finite xn = x / absmax is a
 * non-decreasing step function, with steps of one code, of an order-preserving key of xn's bits,
 * so it is fixed by the 255 keys where it steps (found by bisection with the exact quantizer).
 * Per decade piece of |xn| (found by the binade, then one comparison), a fused multiply-add and
 * a floor estimate the code as c or c - 1; one comparison of the key with the threshold at the
 * estimate finishes it. The estimate is monotone in the key wherever the piece and the sign are
 * constant, so checking it at both ends of every run where the piece and the exact code are
 * constant checks every value; that is done when it is first used.
 *
 * The reciprocal quantizer (AVX-512 VBMI and DQ, blocks with an absmax in [2^-125, 2^125]; see
 * rcp_init): the product x * (1 / am) instead of the quotient, and a line per piece of |xn| whose
 * rounding is the magnitude index wherever the line's value is far enough from a half-integer to
 * absorb the product's error and the line's miss at the thresholds (both bounded when the tables
 * are built); 64 values with one closer take the estimate quantizer.
 *
 * The table quantizer (without VBMI): the code is also a step function of the magnitude
 * a = |xn| <= 1 on each side, with steps wider than 2^-7 of a binade. So a table over buckets of
 * a's bits (exponent and the top 7 mantissa bits, from 2^-24 to 1) holds, per bucket, the code at
 * its first value, the code at its last, and the first 16-bit offset at which the second holds
 * (found by bisection with the exact quantizer); below 2^-24 every magnitude has zero's code. It
 * is checked as it is built (at most one step per bucket, zero's code below the first).
 *
 * Where a check fails, or a block is not finite (absmax NaN or infinite), the block takes the
 * exact quantizer. tests/test_state8.c compares both quantizers with the exact one over a dense
 * sweep of floats (ties at midpoints, zeros, subnormals), the decode over every code, and the
 * kernel with the reference kernel over many shapes, steps and thread counts. */
#include "exec/state8_internal.h"

#include <pthread.h>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#define S8_CLONES
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && __GNUC__ >= 11 &&            \
    !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#undef S8_CLONES
#define S8_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

/* AVX-512 kernels for the decode, the block maximum and the table quantizer (below) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__)
#include <immintrin.h>
#define S8_HAVE_512 1
#define S8_T512     __attribute__((target("avx512f"), noinline))
#define S8_TVBMI    __attribute__((target("avx512f,avx512bw,avx512vbmi"), noinline))
#define S8_TRCP     __attribute__((target("avx512f,avx512dq,avx512bw,avx512vbmi"), noinline))
#define S8_INL_VBMI                                                                                \
    static inline __attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline))
#define S8_INL_RCP                                                                                 \
    static inline __attribute__((target("avx512f,avx512dq,avx512bw,avx512vbmi"), always_inline))
static bool g_512, g_vbmi;
#endif

#define Q_BASE 103u                            /* first exponent: 2^-24 */
#define Q_MB   7u                              /* mantissa bits per bucket */
#define Q_SH   (23u - Q_MB)                    /* the bits within a bucket */
#define Q_FR   ((1u << Q_SH) - 1u)             /* their mask */
#define Q_NB   (((127u - Q_BASE) << Q_MB) + 1) /* buckets up to and including 1.0 */

/* [0] unsigned, [1] signed positive, [2] signed negative: lo | hi << 8 | offset << 16 */
static uint32_t g_qtab[3][Q_NB];
static bool g_qtab_ok;
static _Alignas(64) uint8_t g_planes[2][4][256]; /* [signed][k]: byte k of map[c] */
static _Alignas(64) uint8_t g_dperm[64];         /* the byte-permute decode's order of 64 codes */
static pthread_once_t g_qtab_once = PTHREAD_ONCE_INIT;

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void qtab_init(void) {
    bool ok = true;
    for (int t = 0; t < 3 && ok; t++) {
        bool sgn = t > 0;
        float sg = t == 2 ? -1.0f : 1.0f;
        const float *map = ex_q8_table(sgn);
        uint8_t zero = ex_q8_code_exact(map, 0.0f, sgn, true);
        for (uint32_t b = 0; b < Q_NB && ok; b++) {
            uint32_t first = (Q_BASE << 23) + (b << Q_SH), last = first | Q_FR;
            if (b == Q_NB - 1) last = first; /* 1.0 itself */
            uint8_t lo = ex_q8_code_exact(map, sg * bitsf(first), sgn, true);
            uint8_t hi = ex_q8_code_exact(map, sg * bitsf(last), sgn, true);
            uint32_t off = 0; /* lo == hi: the bucket has one code */
            if (lo != hi) {
                ok = lo + 1 == hi || hi + 1 == lo;
                uint32_t l = first, h = last; /* code(l) == lo, code(h) == hi */
                while (h - l > 1) {
                    uint32_t m = l + (h - l) / 2;
                    if (ex_q8_code_exact(map, sg * bitsf(m), sgn, true) == lo)
                        l = m;
                    else
                        h = m;
                }
                off = h & Q_FR;
                /* one step: the codes on either side of it are lo and hi (sampled; the tests
                 * sweep the floats around every map value and midpoint) */
                for (uint32_t q = first; ok && q <= last; q += 0x7ff)
                    ok = ex_q8_code_exact(map, sg * bitsf(q), sgn, true) == (q < h ? lo : hi);
            }
            if (b == 0) ok = ok && lo == hi && lo == zero && (t != 2 || lo == zero);
            g_qtab[t][b] = (uint32_t)lo | (uint32_t)hi << 8 | off << 16;
        }
        /* below 2^-24 (subnormals too): zero's code */
        for (uint32_t q = 1; ok && q < (Q_BASE << 23); q = q * 3 + 1)
            ok = ex_q8_code_exact(map, sg * bitsf(q), sgn, true) == zero;
    }
    g_qtab_ok = ok;
}

static pthread_once_t g_init_once = PTHREAD_ONCE_INIT;
static bool g_est_ok; /* the estimate quantizer passed its checks (AVX-512 VBMI only) */
static bool g_rcp_ok; /* the reciprocal quantizer passed its checks (AVX-512 VBMI and DQ) */
#ifdef S8_HAVE_512
static void est_init(void);
static void rcp_init(void);
#endif
/* The byte planes of the map, the CPU's features, and the estimate quantizer's checks. */
static void s8_init(void) {
    for (int t = 0; t < 2; t++) {
        const float *map = ex_q8_table(t == 1);
        for (int c = 0; c < 256; c++) {
            uint32_t u;
            memcpy(&u, &map[c], 4);
            for (int k = 0; k < 4; k++) g_planes[t][k][c] = (uint8_t)(u >> (8 * k));
        }
    }
    /* unpacking byte planes interleaves 4 lanes of 16: byte l 16 + q 4 + i of the permuted
     * codes ends up as float q 16 + l 4 + i */
    for (int l = 0; l < 4; l++)
        for (int q = 0; q < 4; q++)
            for (int i = 0; i < 4; i++) g_dperm[l * 16 + q * 4 + i] = (uint8_t)(q * 16 + l * 4 + i);
#ifdef S8_HAVE_512
    __builtin_cpu_init();
    g_512 = __builtin_cpu_supports("avx512f");
    g_vbmi = g_512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi");
    if (g_vbmi) est_init();
    if (g_est_ok && __builtin_cpu_supports("avx512dq")) rcp_init();
#endif
}

/* Whether the table quantizer is in use (tests). */
bool ex_q8_fast_table_ok(void) {
    pthread_once(&g_qtab_once, qtab_init);
    return g_qtab_ok;
}

/* The table's code of xn (finite, |xn| <= 1). */
uint8_t ex_q8_code_table(float xn, bool sgn) {
    uint32_t b;
    memcpy(&b, &xn, 4);
    uint32_t ab = b & 0x7fffffffu;
    uint32_t t = sgn ? 1u + ((b >> 31) & (ab != 0)) : 0u;
    uint32_t idx = ab >> Q_SH;
    idx = idx < (Q_BASE << Q_MB) ? (Q_BASE << Q_MB) : idx;
    idx -= Q_BASE << Q_MB;
    idx = idx < Q_NB - 1 ? idx : Q_NB - 1;
    uint32_t ent = g_qtab[t][idx];
    return (uint8_t)((ab & Q_FR) >= (ent >> 16) ? (ent >> 8) & 0xffu : ent & 0xffu);
}

#ifdef S8_HAVE_512
/* ---- the estimate quantizer ----------------------------------------------------------------- */

/* The order-preserving key of xn's bits: |xn|'s bits for the unsigned map; for the signed one the
 * negatives complemented and the positives with the sign bit set (the map is sorted). The exact
 * code is a non-decreasing step function of the key with steps of one code, so it is fixed by
 * g_qk[s][c], the least key whose code is c + 1 (c < 255; [255] pads). */
static uint32_t q8_key(uint32_t b, bool sgn) {
    return sgn ? b ^ ((uint32_t)((int32_t)b >> 31) | 0x80000000u) : b & 0x7fffffffu;
}
static float q8_unkey(uint32_t k, bool sgn) {
    return bitsf(!sgn ? k : k >= 0x80000000u ? k & 0x7fffffffu : ~k);
}
static uint32_t g_qk[2][256];
static _Alignas(64) uint8_t g_qkp[2][4][256]; /* byte planes of g_qk */
/* per map, per decade piece i: the slope g_ps, the intercepts g_pbias (positive side at i,
 * negative at i + 8), g_pb the bits of the least |xn| of piece i + 1 (padded with all ones); g_pe:
 * the piece of the least value of each binade 2^(e - 127), e = 96..127 */
static _Alignas(64) float g_ps[2][16], g_pbias[2][16];
static _Alignas(64) uint32_t g_pb[2][16], g_pe[2][32];

static uint8_t code_of_key(const float *map, uint32_t k, bool sgn, bool z) {
    return ex_q8_code_exact(map, q8_unkey(k, sgn), sgn, z);
}

/* The estimate of the code of xn (bits b), as the vector code computes it: a code c such that
 * the exact code is c or c + 1 (where est_init's checks passed). */
static int q8_estimate(uint32_t b, int t) {
    uint32_t a = b & 0x7fffffffu;
    bool neg = t == 1 && (b >> 31);
    uint32_t e = a >> 23;
    e = (e < 96u ? 96u : e) - 96u;
    uint32_t i = g_pe[t][e];
    i += a >= g_pb[t][i] ? 1u : 0u;
    float phi = fmaf(bitsf(a), g_ps[t][i], g_pbias[t][i + (neg ? 8u : 0u)]);
    int m = (int)floorf(phi);
    int c = t == 1 ? (neg ? 127 - m : 127 + m) : m;
    return c < 0 ? 0 : c > 254 ? 254 : c;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void est_init(void) {
    bool ok = true;
    for (int t = 0; t < 2 && ok; t++) {
        bool sgn = t == 1;
        const float *map = ex_q8_table(sgn);
        uint32_t kmin = sgn ? q8_key(0xbf800000u, true) : 0u; /* key(-1), key(0) */
        uint32_t kmax = q8_key(0x3f800000u, sgn);             /* key(1) */
        ok = code_of_key(map, kmin, sgn, true) == 0 && code_of_key(map, kmax, sgn, true) == 255;
        uint32_t prev = kmin;
        for (int c = 0; c < 255 && ok; c++) { /* bisection: code(lo) <= c < code(hi) */
            uint32_t lo = prev, hi = kmax;
            while (hi - lo > 1) {
                uint32_t m = lo + (hi - lo) / 2;
                if (code_of_key(map, m, sgn, true) > c)
                    hi = m;
                else
                    lo = m;
            }
            g_qk[t][c] = hi;
            ok = code_of_key(map, hi, sgn, true) == c + 1 &&
                 code_of_key(map, hi - 1, sgn, true) == c;
            prev = hi;
        }
        g_qk[t][255] = 0xffffffffu;
        /* the code constant between thresholds (sampled; the tests sweep far more floats) */
        for (int c = 0; c <= 255 && ok; c++) {
            uint32_t a = c ? g_qk[t][c - 1] : kmin, b = c < 255 ? g_qk[t][c] - 1 : kmax;
            for (uint32_t q = 0; q <= 32 && ok; q++) {
                uint32_t k = a + (uint32_t)(((uint64_t)(b - a) * q) / 32);
                ok = code_of_key(map, k, sgn, true) == c && code_of_key(map, k, sgn, false) == c;
            }
        }
        /* the magnitude thresholds on the positive side: tau[m], the least |xn| of magnitude
         * index m (signed: code 127 + m; unsigned: code m) */
        float tau[256];
        int nm = sgn ? 128 : 255;
        for (int m = 1; m <= nm && ok; m++) tau[m] = q8_unkey(g_qk[t][(sgn ? 126 : -1) + m], sgn);
        /* decade i holds the indices [first(i), first(i + 1)); its piece starts halfway between
         * the thresholds of its first index and the one before (the wide gap between decades) */
        int first[8];
        for (int i = 0; i < 8; i++) first[i] = sgn ? 1 << i : (2 << i) - 1;
        first[7] = nm + 1;
        memset(g_pb[t], 0xff, sizeof g_pb[t]);
        for (int i = 1; i < 7; i++) {
            float mid = (tau[first[i] - 1] + tau[first[i]]) / 2;
            memcpy(&g_pb[t][i - 1], &mid, 4);
        }
        for (int i = 0; i < 7; i++) {
            int f = first[i], n = first[i + 1] - f; /* n thresholds, the last decade with 1.0 */
            if (i == 6) n--;
            double w = n >= 3 ? ((double)tau[f + n - 1] - tau[f + 1]) / (n - 2)
                              : pow(10.0, i - 6) * 0.9 / n;
            int an = f + n / 2;
            g_ps[t][i] = (float)(1.0 / w);
            g_pbias[t][i] = (float)(an - 0.5 - (double)g_ps[t][i] * tau[an]);
            g_pbias[t][i + 8] = g_pbias[t][i] + 1.0f;
        }
        for (uint32_t e = 0; e < 32; e++) {
            uint32_t lo = (e + 96u) << 23, hi = lo | 0x7fffffu, i = 0;
            while (i < 6 && lo >= g_pb[t][i]) i++;
            g_pe[t][e] = i;
            ok = ok && (i >= 6 || hi < g_pb[t][i + 1]); /* at most one boundary in a binade */
        }
        /* the estimate is monotone in the key within a piece and a side, the code constant
         * between thresholds: checking both ends of every such run checks every key */
        uint32_t pts[1100];
        int np = 0;
        pts[np++] = kmin;
        pts[np++] = kmax;
        for (int c = 0; c < 255; c++) pts[np++] = g_qk[t][c], pts[np++] = g_qk[t][c] - 1;
        for (int i = 0; i < 6; i++)
            for (int s = 0; s < (sgn ? 2 : 1); s++) {
                uint32_t k = q8_key(g_pb[t][i] | (s ? 0x80000000u : 0u), sgn);
                pts[np++] = k, pts[np++] = k - 1, pts[np++] = k + 1;
            }
        if (sgn) { /* -0 and +0: the sides meet */
            pts[np++] = 0x7fffffffu;
            pts[np++] = 0x80000000u;
        }
        qsort(pts, (size_t)np, sizeof *pts, cmp_u32);
        for (int q = 0; q < np && ok; q++) {
            if (pts[q] < kmin || pts[q] > kmax) continue;
            float xn = q8_unkey(pts[q], sgn);
            uint32_t b;
            memcpy(&b, &xn, 4);
            int c = q8_estimate(b, t), want = code_of_key(map, pts[q], sgn, true);
            ok = (c == want || c + 1 == want) && code_of_key(map, pts[q], sgn, false) == want;
        }
        for (int k = 0; k < 4; k++)
            for (int c = 0; c < 256; c++) g_qkp[t][k][c] = (uint8_t)(g_qk[t][c] >> (8 * k));
    }
    g_est_ok = ok;
}

/* ---- the reciprocal quantizer ----------------------------------------------------------------
 *
 * The code of xn = x / am from xn' = x * (1 / am) (a product instead of a division; xn' is
 * within 2 ulps of xn) and a line per piece of |xn|, without a threshold lookup. On each side
 * (sign) the exact magnitude index (code - 127, 127 - code, or the code) is a step function of
 * a = |xn| with steps of one at thresholds tau[m]. The pieces split [0, 1] halfway between
 * consecutive thresholds (or at a bucket's start, below): one piece per threshold that does not
 * follow a decade's regular spacing (each decade's first, the one below 1.0) and one per run of
 * regular ones; on piece j
 * psi = a * g_rs[j] + g_rb[j] (one fused multiply-add) puts the thresholds near m - 0.5, so that
 * m = rint(psi) is the index wherever psi is far enough from a half-integer:
 * |psi - rint(psi)| <= 0.5 - B. rcp_init finds, per side and piece, how close to a half-integer
 * psi comes at the thresholds and the piece's ends (psi is monotone in a, the index constant
 * between thresholds, so these points bound every value), adds how far xn' moves psi from xn,
 * and sets B above the largest such need; values inside the band (rare: about 2 B of them) take
 * the estimate quantizer, 64 at a time. The piece of a comes from its bucket (the exponent and
 * top two mantissa bits of a's bits plus a per-map offset: a byte lookup over 128 buckets) and
 * one comparison with the next piece boundary (the offset is chosen so that a bucket holds at
 * most one). */
static _Alignas(64) float g_rs[2][16], g_rb[2][16];
static _Alignas(64) uint32_t g_rpb[2][16];
static _Alignas(64) uint8_t g_rpq[2][128]; /* the piece at the start of each bucket */
static uint32_t g_roff[2];                 /* the buckets' offset (see rcp_init) */
static float g_rband[2]; /* 0.5 - B: the largest |psi - rint(psi)| taken without a check */
static bool g_force_est; /* ex_q8_force_estimate */

/* the exact magnitude index of a (bits, <= 1.0) on side neg of map t */
static int rcp_index(const float *map, uint32_t a, int t, bool neg) {
    float xn = bitsf(a | (neg ? 0x80000000u : 0u));
    int c = ex_q8_code_exact(map, xn, t == 1, true);
    /* the kernel serves both modes: a value whose code depends on them fails the checks */
    if (c != ex_q8_code_exact(map, xn, t == 1, false)) return -1000;
    return t == 0 ? c : neg ? 127 - c : c - 127;
}

static void rcp_init(void) {
    bool ok = true;
    for (int t = 0; t < 2 && ok; t++) {
        const float *map = ex_q8_table(t == 1);
        const int nm = t ? 128 : 255, nsides = t ? 2 : 1;
        uint32_t tau[2][257]; /* [side][m]: the least a (bits) whose index is m or more */
        for (int sd = 0; sd < nsides && ok; sd++) {
            int cap = t && sd ? 127 : nm; /* the largest index on this side */
            ok = rcp_index(map, 0, t, sd) == 0 && rcp_index(map, 0x3f800000u, t, sd) == cap;
            uint32_t prev = 0;
            for (int m = 1; m <= cap && ok; m++) {
                uint32_t lo = prev, hi = 0x3f800000u; /* index(lo) < m <= index(hi) */
                while (hi - lo > 1) {
                    uint32_t mid = lo + (hi - lo) / 2;
                    if (rcp_index(map, mid, t, sd) >= m)
                        hi = mid;
                    else
                        lo = mid;
                }
                tau[sd][m] = hi;
                ok = rcp_index(map, hi, t, sd) == m && rcp_index(map, hi - 1, t, sd) == m - 1;
                prev = hi;
            }
        }
        if (!ok) break;
        /* the pieces, by the positive side's thresholds: [pm0[j], pm1[j]] */
        bool irregular[257] = {false};
        for (int i = 0; i < 7; i++) irregular[t ? 1 << i : (2 << i) - 1] = true;
        irregular[nm] = true;
        int pm0[16], pm1[16], np = 0;
        for (int m = 1; m <= nm && ok; m++) {
            if (np > 0 && !irregular[m] && !irregular[pm1[np - 1]]) {
                pm1[np - 1] = m;
                continue;
            }
            ok = np < 16;
            if (ok) pm0[np] = pm1[np] = m, np++;
        }
        if (!ok) break;
        /* The boundaries between pieces: halfway between their thresholds, or a bucket's first
         * value inside the gap where the neighbouring lines stay a quarter from the next
         * half-integer, which needs no comparison. A bucket is
         * (bits(a) + g_roff[t]) >> 21, a quarter of a binade moved down by the offset: the least
         * multiple of 2^15 below 2^21 that leaves at most one boundary inside every bucket, so one
         * comparison finds the piece. */
        bool placed = false;
        for (uint32_t ko = 0; ko < 64 && ok && !placed; ko++) {
            const uint32_t off = ko << 15;
            memset(g_rpb[t], 0xff, sizeof g_rpb[t]);
            for (int j = 0; j + 1 < np; j++) {
                double t0 = bitsf(tau[0][pm1[j]]), t1 = bitsf(tau[0][pm0[j + 1]]);
                float mid = (float)((t0 + t1) / 2);
                memcpy(&g_rpb[t][j], &mid, 4);
                /* a regular run's line reaches the next half-integer one spacing past its end */
                double w0 = pm1[j] > pm0[j]
                                ? 0.75 * (t0 - bitsf(tau[0][pm0[j]])) / (pm1[j] - pm0[j])
                                : t1 - t0;
                double w1 = pm1[j + 1] > pm0[j + 1] ? 0.75 * (bitsf(tau[0][pm1[j + 1]]) - t1) /
                                                          (pm1[j + 1] - pm0[j + 1])
                                                    : t1 - t0;
                for (uint32_t k = 0; k < 2; k++) {
                    double edge_d = bitsf(((((g_rpb[t][j] + off) >> 21) + k) << 21) - off);
                    if (edge_d > t0 + (t1 - t0) / 8 && edge_d < t1 - (t1 - t0) / 8 &&
                        edge_d - t0 <= w0 && t1 - edge_d <= w1) {
                        g_rpb[t][j] = ((((g_rpb[t][j] + off) >> 21) + k) << 21) - off;
                        break;
                    }
                }
                ok = ok && g_rpb[t][j] > tau[0][pm1[j]] && g_rpb[t][j] < tau[0][pm0[j + 1]];
            }
            /* the piece at the start of each bucket from 2^-31 (below: the first bucket) to 1 */
            placed = true;
            for (uint32_t q = 0; q < 128 && ok; q++) {
                uint32_t lo = ((q + 384u) << 21) - off, hi = lo + 0x1fffffu, i = 0, in = 0;
                for (int j = 0; j + 1 < np; j++) {
                    i += g_rpb[t][j] <= lo;
                    in += g_rpb[t][j] > lo && g_rpb[t][j] <= hi;
                }
                g_rpq[t][q] = (uint8_t)i;
                ok = q > 0 || i == 0;
                placed = placed && in <= 1;
            }
            g_roff[t] = off;
        }
        ok = ok && placed;
        /* the lines through the pieces' thresholds */
        double lo_d[16], hi_d[16];
        for (int j = 0; j < np; j++) {
            lo_d[j] = j ? bitsf(g_rpb[t][j - 1]) : 0.0;
            hi_d[j] = j + 1 < np ? bitsf(g_rpb[t][j]) : 1.0;
            double t0 = bitsf(tau[0][pm0[j]]), t1 = bitsf(tau[0][pm1[j]]), s;
            if (pm1[j] > pm0[j])
                s = (pm1[j] - pm0[j]) / (t1 - t0);
            else
                s = 0.5 / fmax(t0 - lo_d[j], hi_d[j] - t0);
            g_rs[t][j] = (float)s;
            g_rb[t][j] = (float)(pm0[j] - 0.5 - s * t0);
        }
        for (int j = np; j < 16; j++) g_rs[t][j] = g_rb[t][j] = 0.0f;
        /* per side and piece: the least B that keeps every value with |psi(xn') - m| <= 0.5 - B
         * at index m. xn' is within 2 ulps of the exact quotient xn (4 steps of its bits across a
         * binade), so over the piece's values extended by 8 steps, psi(xn) is within delta of
         * psi(xn'): the slope times 4 ulps of the piece's largest value (and the flushed tail),
         * and the two roundings of psi (< 256: half an ulp of 2^-16 each). */
        double need = 0.0;
        for (int sd = 0; sd < nsides && ok; sd++) {
            int cap = t && sd ? 127 : nm;
            for (int j = 0; j < np; j++) {
                uint32_t lo = j ? g_rpb[t][j - 1] : 0u,
                         hi = j + 1 < np ? g_rpb[t][j] - 1 : 0x3f800000u;
                lo = lo >= 8u ? lo - 8u : 0u;
                hi = hi + 8u < 0x3f800000u ? hi + 8u : 0x3f800000u;
                float s = g_rs[t][j], b = g_rb[t][j];
#define PSI(bits) ((double)fmaf(bitsf(bits), s, b))
                double req = 0.0;
                for (int m = 1; m <= cap; m++)
                    if (tau[sd][m] > lo && tau[sd][m] <= hi) {
                        req = fmax(req, PSI(tau[sd][m] - 1) - (m - 0.5));
                        req = fmax(req, (m - 0.5) - PSI(tau[sd][m]));
                    }
                int mlo = rcp_index(map, lo, t, sd), mhi = rcp_index(map, hi, t, sd);
                if (!(t == 0 && mlo == 0)) req = fmax(req, (mlo - 0.5) - PSI(lo));
                if (mhi != cap) req = fmax(req, PSI(hi) - (mhi + 0.5));
#undef PSI
                double delta = s * (4.0 * 0x1p-23 * bitsf(hi) + 0x1p-125) + 0x1p-15;
                need = fmax(need, req + delta);
            }
        }
        double B = need * 1.25 + 0x1p-20;
        ok = ok && B < 1.0 / 16;
        float band = (float)(0.5 - B);
        if ((double)band > 0.5 - B) band = nextafterf(band, 0.0f);
        g_rband[t] = band;
    }
    g_rcp_ok = ok;
}
#endif

typedef struct s8_run {
    ex_s8 k;
    bool z;
    const float *p, *g;
    const uint8_t *codes[EX_S8_MAX_SLOTS];
    const float *am[EX_S8_MAX_SLOTS];
    float *po;
    uint8_t *co[EX_S8_MAX_SLOTS];
    float *amo[EX_S8_MAX_SLOTS];
    const float *map[EX_S8_MAX_SLOTS];
} s8_run;

/* The codes of one block's slot values x[] (absmax am, finite and nonzero) by the table. */
S8_CLONES static void quantize_block(const float *restrict x, float am, bool sgn,
                                     uint8_t *restrict co) {
    const uint32_t *restrict tab = g_qtab[0];
    for (int e = 0; e < EX_STATE8_BLOCK; e++) {
        float xn = x[e] / am;
        uint32_t b;
        memcpy(&b, &xn, 4);
        uint32_t ab = b & 0x7fffffffu;
        uint32_t t = sgn ? 1u + ((b >> 31) & (ab != 0 ? 1u : 0u)) : 0u;
        uint32_t idx = ab >> Q_SH;
        idx = idx < (Q_BASE << Q_MB) ? (Q_BASE << Q_MB) : idx;
        idx -= Q_BASE << Q_MB;
        idx = idx < Q_NB - 1 ? idx : Q_NB - 1;
        uint32_t ent = tab[t * Q_NB + idx];
        co[e] = (uint8_t)((ab & Q_FR) >= (ent >> 16) ? (ent >> 8) & 0xffu : ent & 0xffu);
    }
}

/* AVX-512 versions of the decode, the block maximum and the table quantizer (gathers from the
 * map and the table; GCC's generic tuning would not gather), chosen at run time; the same
 * arithmetic as the C loops (a product, a quotient under the same FTZ/DAZ modes), so the same
 * bits. */
#ifdef S8_HAVE_512

S8_T512 static void decode_512(const uint8_t *c, const float *map, float a, float *x) {
    const __m512 va = _mm512_set1_ps(a);
    for (int e = 0; e < EX_STATE8_BLOCK; e += 16) {
        __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c + e)));
        __m512 v = _mm512_i32gather_ps(idx, map, 4);
        _mm512_storeu_ps(x + e, _mm512_mul_ps(v, va));
    }
}

/* The map's values of 256 codes times a by byte permutes: per 64 codes, each of the 4 byte planes
 * of the map is two 128-byte lookups (vpermi2b) chosen by the code's top bit, then unpacking
 * interleaves the planes into floats (the codes permuted first so the floats come out in order).
 * The product is the gather version's, so the same bits. */
/* The map's byte planes for dec64 (16 registers) and the decode's code order. */
typedef struct dec_tab {
    __m512i T[4][4], perm;
} dec_tab;
S8_INL_VBMI dec_tab dec_load(bool sgn) {
    dec_tab d;
    d.perm = _mm512_load_si512((const void *)g_dperm);
    for (int k = 0; k < 4; k++)
        for (int q = 0; q < 4; q++)
            d.T[k][q] = _mm512_load_si512((const void *)(g_planes[sgn][k] + 64 * q));
    return d;
}
/* 64 codes' map values times a, in order, as 4 vectors of 16. */
S8_INL_VBMI void dec64(const dec_tab *t, const uint8_t *c, __m512 va, __m512 out[4]) {
    __m512i idx = _mm512_permutexvar_epi8(t->perm, _mm512_loadu_si512((const void *)c));
    __mmask64 top = _mm512_movepi8_mask(idx);
    __m512i pl[4];
    for (int k = 0; k < 4; k++)
        pl[k] = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(t->T[k][0], idx, t->T[k][1]),
                                       _mm512_permutex2var_epi8(t->T[k][2], idx, t->T[k][3]));
    __m512i w0 = _mm512_unpacklo_epi8(pl[0], pl[1]), w1 = _mm512_unpackhi_epi8(pl[0], pl[1]);
    __m512i w2 = _mm512_unpacklo_epi8(pl[2], pl[3]), w3 = _mm512_unpackhi_epi8(pl[2], pl[3]);
    out[0] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_unpacklo_epi16(w0, w2)), va);
    out[1] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_unpackhi_epi16(w0, w2)), va);
    out[2] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_unpacklo_epi16(w1, w3)), va);
    out[3] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_unpackhi_epi16(w1, w3)), va);
}

/* The map's values of 256 codes times a by byte permutes: per 64 codes, each of the 4 byte planes
 * of the map is two 128-byte lookups (vpermi2b) chosen by the code's top bit, then unpacking
 * interleaves the planes into floats (the codes permuted first so the floats come out in order).
 * The product is the gather version's, so the same bits. */
S8_TVBMI static void decode_vbmi(const uint8_t *c, bool sgn, float a, float *x) {
    const __m512 va = _mm512_set1_ps(a);
    const dec_tab t = dec_load(sgn);
    for (int e = 0; e < EX_STATE8_BLOCK; e += 64) {
        __m512 d[4];
        dec64(&t, c + e, va, d);
        for (int q = 0; q < 4; q++) _mm512_storeu_ps(x + e + 16 * q, d[q]);
    }
}

/* The codes of x[] / am by the estimate (see est_init): per 16 values the key, the decade piece
 * (the binade's piece by a permute, then one comparison with the next boundary), a fused
 * multiply-add and a floor for the magnitude index, and the code estimate c; per 64, the
 * thresholds g_qk[c] by byte permutes over their 4 byte planes (as the decode); the code is c plus
 * whether the key reaches that threshold. */
S8_TVBMI static void quantize_est_512(const float *x, float am, bool sgn, uint8_t *co, int n) {
    const int t = sgn ? 1 : 0;
    const __m512 va = _mm512_set1_ps(am);
    const __m512i keep = _mm512_set1_epi32(sgn ? -1 : 0x7fffffff),
                  flip = _mm512_set1_epi32(sgn ? 0x7fffffff : 0),
                  set = _mm512_set1_epi32(sgn ? (int)0x80000000u : 0);
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), e96 = _mm512_set1_epi32(96);
    const __m512i one = _mm512_set1_epi32(1), eight = _mm512_set1_epi32(8);
    const __m512i mid = _mm512_set1_epi32(sgn ? 127 : 0), lo = _mm512_setzero_si512(),
                  hi = _mm512_set1_epi32(254);
    const __m512i pe0 = _mm512_load_si512(g_pe[t]), pe1 = _mm512_load_si512(g_pe[t] + 16);
    const __m512i pb = _mm512_load_si512(g_pb[t]); /* the next piece's boundary */
    const __m512 ps = _mm512_load_ps(g_ps[t]), pbias = _mm512_load_ps(g_pbias[t]);
    const __m512i perm = _mm512_load_si512((const void *)g_dperm);
    __m512i T[4][4];
    for (int k = 0; k < 4; k++)
        for (int q = 0; q < 4; q++)
            T[k][q] = _mm512_load_si512((const void *)(g_qkp[t][k] + 64 * q));
    for (int e = 0; e < n; e += 64) {
        __m512i key[4], c[4];
        for (int q = 0; q < 4; q++) {
            __m512i b = _mm512_castps_si512(_mm512_div_ps(_mm512_loadu_ps(x + e + 16 * q), va));
            key[q] = _mm512_xor_si512(
                _mm512_and_si512(b, keep),
                _mm512_or_si512(_mm512_and_si512(_mm512_srai_epi32(b, 31), flip), set));
            __m512i a = _mm512_and_si512(b, absm);
            __mmask16 neg = sgn ? _mm512_cmplt_epi32_mask(b, lo) : 0;
            __m512i ex = _mm512_sub_epi32(_mm512_max_epu32(_mm512_srli_epi32(a, 23), e96), e96);
            __m512i i = _mm512_permutex2var_epi32(pe0, ex, pe1);
            i = _mm512_mask_add_epi32(
                i, _mm512_cmpge_epu32_mask(a, _mm512_permutexvar_epi32(i, pb)), i, one);
            __m512 phi = _mm512_fmadd_ps(
                _mm512_castsi512_ps(a), _mm512_permutexvar_ps(i, ps),
                _mm512_permutexvar_ps(_mm512_mask_or_epi32(i, neg, i, eight), pbias));
            __m512i m = _mm512_cvt_roundps_epi32(phi, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
            __m512i cq = _mm512_mask_sub_epi32(_mm512_add_epi32(mid, m), neg, mid, m);
            c[q] = _mm512_min_epi32(_mm512_max_epi32(cq, lo), hi);
        }
        /* the thresholds at c: the 64 estimates as bytes, reordered for the unpacking */
        __m512i cb = _mm512_castsi128_si512(_mm512_cvtepi32_epi8(c[0]));
        cb = _mm512_inserti32x4(cb, _mm512_cvtepi32_epi8(c[1]), 1);
        cb = _mm512_inserti32x4(cb, _mm512_cvtepi32_epi8(c[2]), 2);
        cb = _mm512_inserti32x4(cb, _mm512_cvtepi32_epi8(c[3]), 3);
        __m512i idx = _mm512_permutexvar_epi8(perm, cb);
        __mmask64 top = _mm512_movepi8_mask(idx);
        __m512i pl[4];
        for (int k = 0; k < 4; k++)
            pl[k] = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(T[k][0], idx, T[k][1]),
                                           _mm512_permutex2var_epi8(T[k][2], idx, T[k][3]));
        __m512i w0 = _mm512_unpacklo_epi8(pl[0], pl[1]), w1 = _mm512_unpackhi_epi8(pl[0], pl[1]);
        __m512i w2 = _mm512_unpacklo_epi8(pl[2], pl[3]), w3 = _mm512_unpackhi_epi8(pl[2], pl[3]);
        __m512i th[4] = {_mm512_unpacklo_epi16(w0, w2), _mm512_unpackhi_epi16(w0, w2),
                         _mm512_unpacklo_epi16(w1, w3), _mm512_unpackhi_epi16(w1, w3)};
        for (int q = 0; q < 4; q++) {
            __m512i code =
                _mm512_mask_add_epi32(c[q], _mm512_cmpge_epu32_mask(key[q], th[q]), c[q], one);
            _mm_storeu_si128((__m128i *)(co + e + 16 * q), _mm512_cvtepi32_epi8(code));
        }
    }
}

/* The reciprocal quantizer's constants for one map (18 registers). */
typedef struct rcp_tab {
    __m512 band, rs, rb, lo;
    __m512i off, one, mid, sign, pq0, pq1, pb, order;
    bool sgn;
} rcp_tab;
S8_INL_RCP rcp_tab rcp_load(bool sgn) {
    const int t = sgn ? 1 : 0;
    rcp_tab k;
    k.band = _mm512_set1_ps(g_force_est ? -1.0f : g_rband[t]);
    k.lo = _mm512_set1_ps(0x1p-31f); /* bits 384 << 21: the table's first bucket */
    k.sgn = sgn;
    k.off = _mm512_set1_epi32((int)g_roff[t]);
    k.one = _mm512_set1_epi32(1);
    k.mid = _mm512_set1_epi32(sgn ? 127 : 0);
    k.sign = _mm512_set1_epi32(sgn ? (int)0x80000000u : 0);
    k.pq0 = _mm512_load_si512((const void *)g_rpq[t]);
    k.pq1 = _mm512_load_si512((const void *)(g_rpq[t] + 64));
    k.pb = _mm512_load_si512(g_rpb[t]);
    k.rs = _mm512_load_ps(g_rs[t]);
    k.rb = _mm512_load_ps(g_rb[t]);
    k.order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return k;
}
/* 16 values' codes (as 32-bit lanes; vr = 1 / am): the product's magnitude a (raised to 2^-31,
 * in piece 0 below the first threshold: the same index, and a psi the checks cover), its bucket
 * and piece, the line, the index rounded to nearest with the value's sign (rint is odd), the code;
 * *worst takes the largest |psi - rint(psi)|. */
S8_INL_RCP __m512i rcp16(const rcp_tab *k, __m512 xv, __m512 vr, __m512 *worst) {
    __m512i a = _mm512_castps_si512(_mm512_range_ps(_mm512_mul_ps(xv, vr), k->lo, 0x0b));
    __m512i bk = _mm512_srli_epi32(_mm512_add_epi32(a, k->off), 21);
    __m512i i = _mm512_permutex2var_epi8(k->pq0, bk, k->pq1);
    i = _mm512_mask_add_epi32(i, _mm512_cmpge_epu32_mask(a, _mm512_permutexvar_epi32(i, k->pb)), i,
                              k->one);
    __m512 psi = _mm512_fmadd_ps(_mm512_castsi512_ps(a), _mm512_permutexvar_ps(i, k->rs),
                                 _mm512_permutexvar_ps(i, k->rb));
    *worst = _mm512_range_ps(*worst,
                             _mm512_reduce_ps(psi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                             0x0b); /* max |.|, sign cleared */
    if (!k->sgn)
        return _mm512_cvt_roundps_epi32(psi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* psi with x's sign (signed map): rint is odd, so the index comes out signed */
    psi = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(psi),
                                                        _mm512_castps_si512(xv), k->sign, 0xd8));
    return _mm512_add_epi32(
        k->mid, _mm512_cvt_roundps_epi32(psi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* 64 codes from rcp16's four results: packing with unsigned saturation clamps them to [0, 255]
 * (a negative value's index 128 at |xn'| near 1 makes -1: code 0). */
S8_INL_RCP void rcp_store64(const rcp_tab *k, const __m512i c[4], uint8_t *co) {
    __m512i w =
        _mm512_packus_epi16(_mm512_packus_epi32(c[0], c[1]), _mm512_packus_epi32(c[2], c[3]));
    _mm512_storeu_si512((void *)co, _mm512_permutexvar_epi32(k->order, w));
}

/* The codes of x[] / am by the reciprocal quantizer (see rcp_init; am in [2^-125, 2^125], so
 * 1 / am and every product are finite): rcp16 per 16 values; per 64, the estimate quantizer
 * where the largest |psi - rint(psi)| is inside the band. The bucket lookup permutes bytes: the
 * dword (a >> 21) holds the bucket (+ 384) in its low byte, whose low 7 bits index the table, and
 * its other bytes look up garbage above bit 3, which the dword permutes by the piece ignore. */
S8_TRCP static void quantize_rcp_512(const float *x, float am, bool sgn, uint8_t *co, int n) {
    const rcp_tab k = rcp_load(sgn);
    const __m512 vr = _mm512_set1_ps(1.0f / am);
    for (int e = 0; e < n; e += 64) {
        __m512 worst = _mm512_setzero_ps();
        __m512i c[4];
        for (int q = 0; q < 4; q++) c[q] = rcp16(&k, _mm512_loadu_ps(x + e + 16 * q), vr, &worst);
        if (_mm512_cmp_ps_mask(worst, k.band, _CMP_GT_OQ))
            quantize_est_512(x + e, am, sgn, co + e, 64);
        else
            rcp_store64(&k, c, co + e);
    }
}

S8_T512 static uint32_t maxbits_512(const float *x, uint32_t sub) {
    const __m512i mask = _mm512_set1_epi32(0x7fffffff), vs = _mm512_set1_epi32((int)sub);
    __m512i m = _mm512_setzero_si512();
    for (int e = 0; e < EX_STATE8_BLOCK; e += 16) {
        __m512i ab = _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + e)), mask);
        __mmask16 keep = _mm512_cmpge_epu32_mask(ab, vs);
        m = _mm512_max_epu32(m, _mm512_maskz_mov_epi32(keep, ab));
    }
    return (uint32_t)_mm512_reduce_max_epu32(m);
}

S8_T512 static void quantize_512(const float *x, float am, bool sgn, uint8_t *co) {
    const __m512 va = _mm512_set1_ps(am);
    const __m512i mask = _mm512_set1_epi32(0x7fffffff), lo15 = _mm512_set1_epi32((int)Q_FR);
    const __m512i base = _mm512_set1_epi32((int)(Q_BASE << Q_MB)),
                  top = _mm512_set1_epi32(Q_NB - 1);
    const __m512i ff = _mm512_set1_epi32(0xff), zero = _mm512_setzero_si512();
    const __m512i pos = _mm512_set1_epi32(sgn ? (int)Q_NB : 0);
    const __m512i negt = _mm512_set1_epi32(sgn ? 2 * (int)Q_NB : 0);
    for (int e = 0; e < EX_STATE8_BLOCK; e += 16) {
        __m512i b = _mm512_castps_si512(_mm512_div_ps(_mm512_loadu_ps(x + e), va));
        __m512i ab = _mm512_and_si512(b, mask);
        __mmask16 neg = _mm512_cmplt_epi32_mask(b, zero) & _mm512_cmpneq_epi32_mask(ab, zero);
        __m512i t = _mm512_mask_blend_epi32(neg, pos, negt);
        __m512i idx = _mm512_sub_epi32(_mm512_max_epu32(_mm512_srli_epi32(ab, Q_SH), base), base);
        idx = _mm512_add_epi32(_mm512_min_epu32(idx, top), t);
        __m512i ent = _mm512_i32gather_epi32(idx, (const void *)g_qtab[0], 4);
        __mmask16 ge =
            _mm512_cmpge_epu32_mask(_mm512_and_si512(ab, lo15), _mm512_srli_epi32(ent, 16));
        __m512i code = _mm512_mask_blend_epi32(ge, _mm512_and_si512(ent, ff),
                                               _mm512_and_si512(_mm512_srli_epi32(ent, 8), ff));
        _mm_storeu_si128((__m128i *)(co + e), _mm512_cvtepi32_epi8(code));
    }
}
#endif

/* Whether a checked quantizer is in use: the estimate (AVX-512 VBMI), else the table. */
static bool quantizer_ok(void) {
    return g_est_ok || g_qtab_ok;
}
/* Initialization: the table only where the estimate is not in use. */
static void init_all(void) {
    pthread_once(&g_init_once, s8_init);
    if (!g_est_ok) pthread_once(&g_qtab_once, qtab_init);
}

/* One block's codes of x[] / am (am finite and nonzero, quantizer_ok()) and one block's decode,
 * by the fastest version the CPU has. */
static void quantize(const float *x, float am, bool sgn, uint8_t *co) {
#ifdef S8_HAVE_512
    if (g_rcp_ok && am >= 0x1p-125f && am <= 0x1p125f) {
        quantize_rcp_512(x, am, sgn, co, EX_STATE8_BLOCK);
        return;
    }
    if (g_est_ok) {
        quantize_est_512(x, am, sgn, co, EX_STATE8_BLOCK);
        return;
    }
    if (g_512) {
        quantize_512(x, am, sgn, co);
        return;
    }
#endif
    quantize_block(x, am, sgn, co);
}
static inline void decode(const uint8_t *c, bool sgn, const float *map, float a, float *x) {
#ifdef S8_HAVE_512
    if (g_vbmi) {
        decode_vbmi(c, sgn, a, x);
        return;
    }
    if (g_512) {
        decode_512(c, map, a, x);
        return;
    }
#endif
    for (int e = 0; e < EX_STATE8_BLOCK; e++) x[e] = map[c[e]] * a;
}

/* Which quantizer the kernel uses: 3 the reciprocal (its blocks with an absmax in [2^-125,
 * 2^125]; the others the estimate), 2 the estimate, 1 the table, 0 the exact one;
 * *est_possible: whether the CPU and build have what the reciprocal and the estimate need
 * (tests). */
int ex_q8_fast_quantizer(bool *est_possible) {
    init_all();
#ifdef S8_HAVE_512
    *est_possible = g_vbmi && __builtin_cpu_supports("avx512dq");
#else
    *est_possible = false;
#endif
    return g_rcp_ok ? 3 : g_est_ok ? 2 : g_qtab_ok ? 1 : 0;
}

void ex_q8_force_estimate(bool force) {
#ifdef S8_HAVE_512
    g_force_est = force;
#else
    (void)force;
#endif
}

/* The kernel's block quantizer and decode in the caller's floating-point modes (tests). */
bool ex_q8_quantize_fast(const float *x, float am, bool sgn, uint8_t *co) {
    init_all();
    if (!quantizer_ok()) return false;
    quantize(x, am, sgn, co);
    return true;
}
void ex_q8_decode_fast(const uint8_t *c, bool sgn, float a, float *x) {
    init_all();
    decode(c, sgn, ex_q8_table(sgn), a, x);
}

/* Slot j of block b (values x[]): stores the absmax from mb (the largest |x|'s bits, a subnormal
 * as zero under FTZ) and returns it, for a checked quantizer to find the codes; or, where the
 * block holds an infinity or a NaN or no quantizer passed its checks, the exact quantizer with
 * the reference's absmax writes both, and it returns 0. */
static float block_absmax(const s8_run *r, int j, int64_t b, const float *x, uint32_t mb) {
    const bool z = r->z, sgn = r->k.sgn[j];
    if (mb >= 0x7f800000u || !quantizer_ok()) {
        float am = 0.0f;
        for (int e = 0; e < EX_STATE8_BLOCK; e++) am = max_f(am, fabsf(x[e]), z);
        if (am == 0.0f) am = 1.0f;
        r->amo[j][b] = am;
        uint8_t *co = r->co[j] + b * EX_STATE8_BLOCK;
        for (int e = 0; e < EX_STATE8_BLOCK; e++)
            co[e] = ex_q8_code_exact(r->map[j], div_f(x[e], am, z), sgn, z);
        return 0.0f;
    }
    float am = mb ? bitsf(mb) : 1.0f;
    r->amo[j][b] = am;
    return am;
}

#ifdef S8_HAVE_512
/* Adam's element update (ex_s8_element, the same operations in the same order) on 16 elements
 * under the CPU's FTZ/DAZ modes; s0, s1 the moments in and out. */
S8_INL_RCP __m512 adam16(const ex_s8 *k, __m512 p, __m512 g, __m512 *s0, __m512 *s1) {
    const float *c = k->sc;
    if (k->maximize)
        g = _mm512_castsi512_ps(
            _mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32((int)0x80000000u)));
    if (k->wd_coupled) g = _mm512_add_ps(g, _mm512_mul_ps(_mm512_set1_ps(c[6]), p));
    if (k->wd_decoupled) p = _mm512_mul_ps(p, _mm512_set1_ps(c[6]));
    __m512 m = _mm512_add_ps(*s0, _mm512_mul_ps(_mm512_set1_ps(c[0]), _mm512_sub_ps(g, *s0)));
    __m512 v = _mm512_add_ps(_mm512_mul_ps(*s1, _mm512_set1_ps(c[1])),
                             _mm512_mul_ps(_mm512_set1_ps(c[2]), _mm512_mul_ps(g, g)));
    __m512 den =
        _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), _mm512_set1_ps(c[3])), _mm512_set1_ps(c[4]));
    *s0 = m;
    *s1 = v;
    return _mm512_add_ps(p, _mm512_mul_ps(_mm512_set1_ps(c[5]), _mm512_div_ps(m, den)));
}

/* Adam's blocks [b0, b1) as a software pipeline (AVX-512 VBMI and DQ, the reciprocal quantizer
 * checked): while block b is decoded and updated, 16 elements at a time, the codes of block b - 1
 * (whose absmax is known) are found between its updates, so the update's divisions and square
 * root (one unit, about a third of the step) run beside the quantizer's permutes and arithmetic
 * instead of after them; the block maximum is kept in registers during the update. Each block's
 * values wait in a 2 KB buffer per slot until the next block's pass. Blocks whose absmax is
 * outside the reciprocal quantizer's range, or that hold an infinity or a NaN, are quantized at
 * once as run_blocks does; the bits are run_blocks' (the same functions on the same values). */
S8_TRCP static void run_adam_pipelined(const s8_run *r, int64_t b0, int64_t b1) {
    const ex_s8 kk = r->k;
    const uint32_t sub = r->z ? 0x00800000u : 0u;
    _Alignas(64) float buf[2][2][EX_STATE8_BLOCK]; /* [which][slot] */
    const dec_tab dt0 = dec_load(kk.sgn[0]), dt1 = dec_load(kk.sgn[1]);
    const rcp_tab rt0 = rcp_load(kk.sgn[0]), rt1 = rcp_load(kk.sgn[1]);
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    int cur = 0;
    int64_t pend = -1; /* the block whose codes the next pass finds */
    float pam[2] = {1.0f, 1.0f};
    for (int64_t b = b0; b < b1; b++) {
        const int64_t e0 = b * EX_STATE8_BLOCK;
        const float *p = r->p + e0, *g = r->g + e0; /* po may be p (in place) */
        float *po = r->po + e0;
        float *x0 = buf[cur][0], *x1 = buf[cur][1];
        const float *y0 = buf[cur ^ 1][0], *y1 = buf[cur ^ 1][1];
        const __m512 va0 = _mm512_set1_ps(r->am[0][b]), va1 = _mm512_set1_ps(r->am[1][b]);
        const __m512 vr0 = _mm512_set1_ps(1.0f / pam[0]), vr1 = _mm512_set1_ps(1.0f / pam[1]);
        uint8_t *pc0 = pend >= 0 ? r->co[0] + pend * EX_STATE8_BLOCK : NULL;
        uint8_t *pc1 = pend >= 0 ? r->co[1] + pend * EX_STATE8_BLOCK : NULL;
        __m512i mx0 = _mm512_setzero_si512(), mx1 = _mm512_setzero_si512();
        for (int e = 0; e < EX_STATE8_BLOCK; e += 64) {
            __m512 d[4]; /* decoded into the buffer, updated there */
            dec64(&dt0, r->codes[0] + e0 + e, va0, d);
            for (int q = 0; q < 4; q++) _mm512_store_ps(x0 + e + 16 * q, d[q]);
            dec64(&dt1, r->codes[1] + e0 + e, va1, d);
            for (int q = 0; q < 4; q++) _mm512_store_ps(x1 + e + 16 * q, d[q]);
            __m512 w0 = _mm512_setzero_ps(), w1 = _mm512_setzero_ps();
            __m512i c0[4], c1[4];
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                const int o = e + 16 * q;
                __m512 m = _mm512_load_ps(x0 + o), v = _mm512_load_ps(x1 + o);
                __m512 np = adam16(&kk, _mm512_loadu_ps(p + o), _mm512_loadu_ps(g + o), &m, &v);
                _mm512_storeu_ps(po + o, np);
                _mm512_store_ps(x0 + o, m);
                _mm512_store_ps(x1 + o, v);
                mx0 = _mm512_max_epu32(mx0, _mm512_and_si512(_mm512_castps_si512(m), absm));
                mx1 = _mm512_max_epu32(mx1, _mm512_and_si512(_mm512_castps_si512(v), absm));
                if (pend >= 0) {
                    c0[q] = rcp16(&rt0, _mm512_load_ps(y0 + o), vr0, &w0);
                    c1[q] = rcp16(&rt1, _mm512_load_ps(y1 + o), vr1, &w1);
                }
            }
            if (pend >= 0) {
                if (_mm512_cmp_ps_mask(w0, rt0.band, _CMP_GT_OQ))
                    quantize_est_512(y0 + e, pam[0], kk.sgn[0], pc0 + e, 64);
                else
                    rcp_store64(&rt0, c0, pc0 + e);
                if (_mm512_cmp_ps_mask(w1, rt1.band, _CMP_GT_OQ))
                    quantize_est_512(y1 + e, pam[1], kk.sgn[1], pc1 + e, 64);
                else
                    rcp_store64(&rt1, c1, pc1 + e);
            }
        }
        /* this block's absmax; the largest of values that all count as zero is zero */
        bool later = true;
        for (int j = 0; j < 2; j++) {
            uint32_t mb = (uint32_t)_mm512_reduce_max_epu32(j ? mx1 : mx0);
            float am = block_absmax(r, j, b, buf[cur][j], mb < sub ? 0u : mb);
            pam[j] = am;
            later = later && am >= 0x1p-125f && am <= 0x1p125f;
        }
        if (later) {
            pend = b;
            cur ^= 1;
            continue;
        }
        for (int j = 0; j < 2; j++) /* now, by the fastest quantizer that takes the block */
            if (pam[j] != 0.0f) quantize(buf[cur][j], pam[j], kk.sgn[j], r->co[j] + e0);
        pend = -1;
    }
    if (pend >= 0)
        for (int j = 0; j < 2; j++)
            quantize_rcp_512(buf[cur ^ 1][j], pam[j], kk.sgn[j], r->co[j] + pend * EX_STATE8_BLOCK,
                             EX_STATE8_BLOCK);
}
#endif

#define S8_LOOP2(RULE)                                                                             \
    do {                                                                                           \
        float *restrict x0 = x[0], *restrict x1 = x[1];                                            \
        for (int e = 0; e < EX_STATE8_BLOCK; e++) {                                                \
            float s[2] = {x0[e], x1[e]};                                                           \
            po[e] = ex_s8_element(&kk, RULE, false, z, p[e], g[e], s);                             \
            x0[e] = s[0];                                                                          \
            x1[e] = s[1];                                                                          \
        }                                                                                          \
    } while (0)
#define S8_LOOP1(RULE)                                                                             \
    do {                                                                                           \
        float *restrict x0 = x[0];                                                                 \
        for (int e = 0; e < EX_STATE8_BLOCK; e++) {                                                \
            float s[1] = {x0[e]};                                                                  \
            po[e] = ex_s8_element(&kk, RULE, false, z, p[e], g[e], s);                             \
            x0[e] = s[0];                                                                          \
        }                                                                                          \
    } while (0)

/* Blocks [b0, b1): decode, update, write the parameter; then per slot absmax and codes. */
S8_CLONES static void run_blocks(const s8_run *r, int64_t b0, int64_t b1) {
    const ex_s8 *k = &r->k;
    const ex_s8 kk = r->k; /* a local copy: the stores cannot alias its scalars */
    const bool z = r->z;
    float x[EX_S8_MAX_SLOTS][EX_STATE8_BLOCK];
    for (int64_t b = b0; b < b1; b++) {
        const int64_t e0 = b * EX_STATE8_BLOCK;
        const float *p = r->p + e0, *g = r->g + e0; /* po may be p (in place) */
        float *po = r->po + e0;
        for (int j = 0; j < k->nslots; j++) {
            const uint8_t *restrict c = r->codes[j] + e0;
            const float *restrict map = r->map[j];
            const float a = r->am[j][b];
            decode(c, k->sgn[j], map, a, x[j]);
        }
        /* the update: one loop per rule (a constant rule, so the switch folds and it vectorizes) */
        switch (k->rule) {
        case EX_S8_ADAM: S8_LOOP2(EX_S8_ADAM); break;
        case EX_S8_LION: S8_LOOP1(EX_S8_LION); break;
        default: S8_LOOP1(EX_S8_SGD); break;
        }
        for (int j = 0; j < k->nslots; j++) {
            /* max |x| on the bits (the order of non-negative floats; an integer reduction
             * vectorizes), a subnormal counting as zero under FTZ (the reference's DAZ maximum);
             * bits from 0x7f800000 on: an infinity or a NaN */
            const uint32_t sub = z ? 0x00800000u : 0u;
            uint32_t mb = 0;
#ifdef S8_HAVE_512
            if (g_512)
                mb = maxbits_512(x[j], sub);
            else
#endif
                for (int e = 0; e < EX_STATE8_BLOCK; e++) {
                    uint32_t ab;
                    memcpy(&ab, &x[j][e], 4);
                    ab &= 0x7fffffffu;
                    ab = ab < sub ? 0u : ab;
                    mb = ab > mb ? ab : mb;
                }
            float am = block_absmax(r, j, b, x[j], mb);
            if (am != 0.0f) quantize(x[j], am, k->sgn[j], r->co[j] + e0);
        }
    }
}

static void range(void *arg, int64_t b0, int64_t b1, int ith) {
    (void)ith;
    const s8_run *r = arg;
#if defined(__x86_64__) && defined(__SSE2__)
    unsigned csr = _mm_getcsr();
    if (r->z) _mm_setcsr(csr | 0x8040u); /* FTZ | DAZ: the reference's flushing */
    __asm__ volatile("" ::: "memory");
#ifdef S8_HAVE_512
    if (r->k.rule == EX_S8_ADAM && g_rcp_ok)
        run_adam_pipelined(r, b0, b1);
    else
#endif
        run_blocks(r, b0, b1);
    __asm__ volatile("" ::: "memory");
    _mm_setcsr(csr);
#else
    /* no FTZ/DAZ modes to rely on: the reference arithmetic, block by block */
    const ex_s8 *k = &r->k;
    for (int64_t b = b0; b < b1; b++) {
        int64_t e0 = b * EX_STATE8_BLOCK;
        float x[EX_S8_MAX_SLOTS][EX_STATE8_BLOCK];
        for (int e = 0; e < EX_STATE8_BLOCK; e++) {
            float s[EX_S8_MAX_SLOTS];
            for (int j = 0; j < k->nslots; j++)
                s[j] = mul_f(r->map[j][r->codes[j][e0 + e]], r->am[j][b], r->z);
            r->po[e0 + e] = ex_s8_element(k, k->rule, true, r->z, r->p[e0 + e], r->g[e0 + e], s);
            for (int j = 0; j < k->nslots; j++) x[j][e] = s[j];
        }
        for (int j = 0; j < k->nslots; j++) {
            float am = 0.0f;
            for (int e = 0; e < EX_STATE8_BLOCK; e++) am = max_f(am, fabsf(x[j][e]), r->z);
            if (am == 0.0f) am = 1.0f;
            r->amo[j][b] = am;
            for (int e = 0; e < EX_STATE8_BLOCK; e++)
                r->co[j][e0 + e] =
                    ex_q8_code_exact(r->map[j], div_f(x[j][e], am, r->z), k->sgn[j], r->z);
        }
    }
#endif
}

ot_status ex_fast_state8(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                         const ex_leaf *ins, int nout, void *const *out, const ex_leaf *outs,
                         bool *done) {
    (void)ins;
    (void)outs;
    *done = false;
    s8_run r;
    if (ex_s8_parse(i, &r.k) != OT_OK) return OT_OK; /* the reference kernel says what is wrong */
    if (nin != i->noperands || nout != 1 + 2 * r.k.nslots) return OT_OK;
    init_all();
    ex_s8_read_scalars(&r.k, (const void *const *)(in + 2 + 2 * r.k.nslots));
    r.z = c->ftz;
    r.p = in[0];
    r.g = in[1];
    r.po = out[0];
    for (int j = 0; j < r.k.nslots; j++) {
        r.codes[j] = in[2 + 2 * j];
        r.am[j] = in[3 + 2 * j];
        r.co[j] = out[1 + 2 * j];
        r.amo[j] = out[2 + 2 * j];
        r.map[j] = ex_q8_table(r.k.sgn[j]);
    }
    /* a block reads its inputs before it writes: in place is safe block by block, but a
     * partial overlap between different buffers is not */
    int64_t L = r.k.len;
    for (int a = 0; a < nin; a++)
        for (int o = 0; o < nout; o++) {
            bool same = in[a] == out[o];
            if (!same && ex_overlaps(in[a], ins[a].nbytes, out[o], outs[o].nbytes)) return OT_OK;
        }
    int64_t bytes = L * (8 + 2 * r.k.nslots) + 8;
    ex_par_for(c, r.k.nblocks, bytes, range, &r);
    *done = true;
    return OT_OK;
}
