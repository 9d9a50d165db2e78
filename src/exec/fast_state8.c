/* The fast twin of the 8-bit block-wise optimizer update (state8.h; reference: state8.c):
 * blocks of 256 elements split over the pool, each decoded into f32 arrays that stay in L1, the
 * element update as vector code under the CPU's FTZ/DAZ modes (the reference's flushing, as the
 * generated code's hardware mode, src/codegen), and the codes found by table instead of the
 * exact quantizer's decade and neighbour search. With AVX-512 VBMI the decode looks the map up
 * by byte permutes over its four byte planes instead of a gather (on AMD Zen 4 a 16-lane gather
 * costs about 6.6 ns even from L1, the decode of 16 values by permutes about 1.3 ns).
 *
 * The code of a finite value is a non-decreasing (positive side) or non-increasing (negative
 * side) step function of its magnitude a = |x / absmax| <= 1 with steps wider than 2^-7 of
 * a binade. So a table over buckets of a's bits (exponent and the top 7 mantissa bits, from
 * 2^-24 to 1) holds, per bucket, the code at its first value, the code at its last, and the
 * first 16-bit offset at which the second holds (found by bisection with the exact quantizer);
 * below 2^-24 every magnitude has zero's code. The table is built once per process and checked
 * as it is built (at most one step per bucket, zero's code below the first); where a check
 * fails, or a block is not finite (absmax NaN or infinite), the block takes the exact quantizer.
 * tests/test_state8.c compares the table with the exact quantizer over a dense sweep of floats
 * and the kernel with the reference kernel over many shapes, steps and thread counts. */
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
S8_TVBMI static void decode_vbmi(const uint8_t *c, bool sgn, float a, float *x) {
    const __m512 va = _mm512_set1_ps(a);
    const __m512i perm = _mm512_load_si512((const void *)g_dperm);
    __m512i T[4][4];
    for (int k = 0; k < 4; k++)
        for (int q = 0; q < 4; q++)
            T[k][q] = _mm512_load_si512((const void *)(g_planes[sgn][k] + 64 * q));
    for (int e = 0; e < EX_STATE8_BLOCK; e += 64) {
        __m512i idx = _mm512_permutexvar_epi8(perm, _mm512_loadu_si512((const void *)(c + e)));
        __mmask64 top = _mm512_movepi8_mask(idx);
        __m512i pl[4];
        for (int k = 0; k < 4; k++)
            pl[k] = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(T[k][0], idx, T[k][1]),
                                           _mm512_permutex2var_epi8(T[k][2], idx, T[k][3]));
        __m512i w0 = _mm512_unpacklo_epi8(pl[0], pl[1]), w1 = _mm512_unpackhi_epi8(pl[0], pl[1]);
        __m512i w2 = _mm512_unpacklo_epi8(pl[2], pl[3]), w3 = _mm512_unpackhi_epi8(pl[2], pl[3]);
        __m512i d[4] = {_mm512_unpacklo_epi16(w0, w2), _mm512_unpackhi_epi16(w0, w2),
                        _mm512_unpacklo_epi16(w1, w3), _mm512_unpackhi_epi16(w1, w3)};
        for (int q = 0; q < 4; q++)
            _mm512_storeu_ps(x + e + 16 * q, _mm512_mul_ps(_mm512_castsi512_ps(d[q]), va));
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

/* One block's codes of x[] / am (am finite and nonzero, the table checked) and one block's
 * decode, by the fastest version the CPU has. */
static void quantize(const float *x, float am, bool sgn, uint8_t *co) {
#ifdef S8_HAVE_512
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

/* The kernel's block quantizer and decode in the caller's floating-point modes (tests). */
bool ex_q8_quantize_fast(const float *x, float am, bool sgn, uint8_t *co) {
    pthread_once(&g_qtab_once, qtab_init);
    if (!g_qtab_ok) return false;
    quantize(x, am, sgn, co);
    return true;
}
void ex_q8_decode_fast(const uint8_t *c, bool sgn, float a, float *x) {
    pthread_once(&g_qtab_once, qtab_init);
    decode(c, sgn, ex_q8_table(sgn), a, x);
}

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
            float am = bitsf(mb);
            uint8_t *restrict co = r->co[j] + e0;
            if (mb >= 0x7f800000u || !g_qtab_ok) { /* the exact quantizer, the reference's absmax */
                am = 0.0f;
                for (int e = 0; e < EX_STATE8_BLOCK; e++) am = max_f(am, fabsf(x[j][e]), z);
                if (am == 0.0f) am = 1.0f;
                r->amo[j][b] = am;
                for (int e = 0; e < EX_STATE8_BLOCK; e++)
                    co[e] = ex_q8_code_exact(r->map[j], div_f(x[j][e], am, z), k->sgn[j], z);
                continue;
            }
            if (am == 0.0f) am = 1.0f;
            r->amo[j][b] = am;
            quantize(x[j], am, k->sgn[j], co);
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
    pthread_once(&g_qtab_once, qtab_init);
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
