/* 8-bit integer dots on AMX tiles (fast_internal.h: ex_amx_*), x86-64 CPUs with AMX-TILE and
 * AMX-INT8 (Sapphire Rapids and later) under an OS that grants the tile state.
 *
 * One tdpbssd (tdpbsud, tdpbusd, tdpbuud for the u8 forms) multiplies a tile of 16 rows x 64 k
 * of A by a tile of 16 groups of 4 k x 16 columns of B (the VNNI layout: four k of one column in
 * each 32-bit slot) into 16 x 16 int32 sums: 16K multiply-adds per instruction. Every product is
 * an integer of magnitude at most 2^16 and the dots taken here keep K times the largest product
 * below 2^31, so every partial sum is exact in int32 and the result is the exact sum: the
 * reference's (64-bit integer sums) bit for bit, whatever the order, the blocking or the split.
 *
 * Layout: both operands are packed once per product (tasks over the pool) into whole tiles, K
 * padded with zeros to a multiple of 64 and M, N to multiples of 16 — A as [row panel][k block]
 * [16 rows][64 k], B as [column panel][k block][16 k quads][16 columns x 4 k] — so the kernel
 * only ever loads full 1 KiB tiles with a 64-byte stride. Compute tasks are a batch element x 32
 * rows x a group of columns (all N when its packed panels fit in AMX_BGROUP bytes, which keep
 * them in L2), handed out dynamically; a task runs 2 x 2 C tiles at a time (tiles 0-3, A in 4-5,
 * B in 6-7: four tdp per two A and two B loads) over the whole K, then stores them: straight
 * into an s32 result where a tile lies inside it, else through a buffer (edges, s64). Finished
 * rows go to the output-fusion hook (c->epilogue) right away, while they are in cache. */
#include "exec/fast_internal.h"

#include <pthread.h>
#include <stdlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_TARGET __attribute__((target("amx-tile,amx-int8")))
#define AMX_BGROUP ((int64_t)1 << 20) /* packed B one task streams (bytes): L2 */
#define AMX_PACK   4                  /* panels per packing task */

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA  18

/* s8 / u8 operands into s32 / s64 whose partial sums int32 holds exactly */
static bool amx_dot_dtype(ot_dtype a, ot_dtype b, ot_dtype o, int64_t K) {
    if (!((a == OT_S8 || a == OT_U8) && (b == OT_S8 || b == OT_U8) &&
          (o == OT_S32 || o == OT_S64) && K >= 1))
        return false;
    int64_t ma = a == OT_S8 ? 128 : 255, mb = b == OT_S8 ? 128 : 255; /* largest magnitudes */
    return K <= (int64_t)INT32_MAX / (ma * mb);
}

/* Whether the CPU has AMX-TILE and AMX-INT8, the OS enabled the tile state (XCR0 bits 17, 18)
 * and granted it to this process (Linux: arch_prctl ARCH_REQ_XCOMP_PERM, once per process; the
 * grant covers every thread; Linux refuses it while a thread's signal stack is too small for the
 * tile state), and OPTITPU_AMX is not "0". */
static bool g_amx;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void) {
    const char *e = getenv("OPTITPU_AMX");
    if (e && e[0] == '0' && !e[1]) return;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return;               /* AMX-TILE, AMX-INT8 */
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return; /* OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return; /* XTILECFG, XTILEDATA */
#ifdef SYS_arch_prctl
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return;
    g_amx = true;
#endif
}

bool ex_amx_int8(void) {
    pthread_once(&g_amx_once, amx_probe);
    return g_amx;
}

bool ex_amx_int8_dot(ot_dtype a, ot_dtype b, ot_dtype o, int64_t K) {
    return amx_dot_dtype(a, b, o, K) && ex_amx_int8();
}

/* The tile configuration (palette 1): eight tiles of 16 rows x 64 bytes. */
typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

typedef struct amx_run {
    const ex_amx_dot *d;
    int64_t kb, mt, nt; /* k blocks of 64; row and column panels of 16 */
    int64_t gp, ng;     /* column panels per group; groups */
    uint8_t *ap, *bp;   /* packed A (nb x mt x kb tiles), B (nb x nt x kb tiles) */
    const ex_epilogue *epi;
} amx_run;

static int64_t cdiv(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

/* Row panel i of batch element b: tiles [k block][16 rows][64 k], zero past M and K. */
static void amx_pack_a(const amx_run *r, int64_t b, int64_t i) {
    const ex_amx_dot *d = r->d;
    const uint8_t *a = (const uint8_t *)d->a + d->aoff[b];
    uint8_t *p = r->ap + (b * r->mt + i) * r->kb * 1024;
    memset(p, 0, (size_t)(r->kb * 1024));
    int64_t rows = d->M - i * 16 < 16 ? d->M - i * 16 : 16;
    for (int64_t q = 0; q < rows; q++) {
        int64_t m = i * 16 + q;
        if (!d->ta) {
            const uint8_t *src = a + m * d->lda;
            for (int64_t k0 = 0; k0 < d->K; k0 += 64)
                memcpy(p + (k0 / 64) * 1024 + q * 64, src + k0,
                       (size_t)(d->K - k0 < 64 ? d->K - k0 : 64));
        } else {
            for (int64_t k = 0; k < d->K; k++)
                p[(k / 64) * 1024 + q * 64 + k % 64] = a[k * d->lda + m];
        }
    }
}

/* Column panels [j0, j1) of batch element b: tiles [k block][16 quads of k][16 columns x 4 k],
 * zero past N and K. Four rows of k at a time across all the panels, so that each cache line of
 * a row-major B is read once. */
static void amx_pack_b(const amx_run *r, int64_t b, int64_t j0, int64_t j1) {
    const ex_amx_dot *d = r->d;
    const uint8_t *bm = (const uint8_t *)d->b + d->boff[b];
    int64_t ld = d->ldb;
    for (int64_t kq = 0; kq < r->kb * 16; kq++) {
        int64_t k = kq * 4;
        for (int64_t j = j0; j < j1; j++) {
            uint8_t *o = r->bp + ((b * r->nt + j) * r->kb + kq / 16) * 1024 + (kq % 16) * 64;
            int64_t n0 = j * 16, cols = d->N - n0 < 16 ? d->N - n0 : 16;
            if (!d->tb && cols == 16 && k + 4 <= d->K) { /* four rows of 16 bytes interleaved */
                const uint8_t *s = bm + k * ld + n0;
                __m128i r0 = _mm_loadu_si128((const __m128i *)s);
                __m128i r1 = _mm_loadu_si128((const __m128i *)(s + ld));
                __m128i r2 = _mm_loadu_si128((const __m128i *)(s + 2 * ld));
                __m128i r3 = _mm_loadu_si128((const __m128i *)(s + 3 * ld));
                __m128i t0 = _mm_unpacklo_epi8(r0, r1), t1 = _mm_unpackhi_epi8(r0, r1);
                __m128i t2 = _mm_unpacklo_epi8(r2, r3), t3 = _mm_unpackhi_epi8(r2, r3);
                _mm_storeu_si128((__m128i *)o, _mm_unpacklo_epi16(t0, t2));
                _mm_storeu_si128((__m128i *)(o + 16), _mm_unpackhi_epi16(t0, t2));
                _mm_storeu_si128((__m128i *)(o + 32), _mm_unpacklo_epi16(t1, t3));
                _mm_storeu_si128((__m128i *)(o + 48), _mm_unpackhi_epi16(t1, t3));
                continue;
            }
            memset(o, 0, 64);
            for (int64_t n = 0; n < cols; n++)
                for (int64_t t = 0; t < 4 && k + t < d->K; t++)
                    o[n * 4 + t] = d->tb ? bm[(n0 + n) * ld + k + t] : bm[(k + t) * ld + n0 + n];
        }
    }
}

/* The same from a transposed B (stored [N, K]): a tile's row of 16 four-k words is a column of
 * 16 rows' words, so a full tile is a 16 x 16 transpose of 32-bit words (ex_tr16_ps: bits moved,
 * never rounded); tiles at an edge of N or K word by word. */
EX_AVX512 static void amx_pack_bt(const amx_run *r, int64_t b, int64_t j0, int64_t j1) {
    const ex_amx_dot *d = r->d;
    const uint8_t *bm = (const uint8_t *)d->b + d->boff[b];
    int64_t ld = d->ldb;
    for (int64_t j = j0; j < j1; j++) {
        int64_t n0 = j * 16, cols = d->N - n0 < 16 ? d->N - n0 : 16;
        for (int64_t kb = 0; kb < r->kb; kb++) {
            uint8_t *o = r->bp + ((b * r->nt + j) * r->kb + kb) * 1024;
            if (cols == 16 && kb * 64 + 64 <= d->K) {
                __m512 t[16];
                for (int n = 0; n < 16; n++) t[n] = _mm512_loadu_ps(bm + (n0 + n) * ld + kb * 64);
                ex_tr16_ps(t);
                for (int q = 0; q < 16; q++) _mm512_storeu_ps(o + q * 64, t[q]);
                continue;
            }
            memset(o, 0, 1024);
            for (int64_t n = 0; n < cols; n++)
                for (int64_t k = kb * 64; k < d->K && k < kb * 64 + 64; k++)
                    o[((k - kb * 64) / 4) * 64 + n * 4 + k % 4] = bm[(n0 + n) * ld + k];
        }
    }
}

static void amx_pack(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const amx_run *r = arg;
    int64_t ta = cdiv(r->mt, AMX_PACK), tb = cdiv(r->nt, AMX_PACK);
    for (int64_t w = begin; w < end; w++) {
        int64_t b = w / (ta + tb), t = w % (ta + tb);
        if (t < ta) {
            for (int64_t i = t * AMX_PACK; i < r->mt && i < (t + 1) * AMX_PACK; i++)
                amx_pack_a(r, b, i);
        } else {
            int64_t j0 = (t - ta) * AMX_PACK, j1 = j0 + AMX_PACK < r->nt ? j0 + AMX_PACK : r->nt;
            if (r->d->tb && ex_avx512())
                amx_pack_bt(r, b, j0, j1);
            else
                amx_pack_b(r, b, j0, j1);
        }
    }
}

/* C tile (16 x 16 int32 sums, rows m0.., columns n0.. of batch element b) into the result. */
static void amx_put(const amx_run *r, int64_t b, int64_t m0, int64_t n0, const int32_t *t) {
    const ex_amx_dot *d = r->d;
    int64_t rows = d->M - m0 < 16 ? d->M - m0 : 16, cols = d->N - n0 < 16 ? d->N - n0 : 16;
    int64_t at = (b * d->M + m0) * d->N + n0;
    for (int64_t q = 0; q < rows; q++) {
        if (d->od == OT_S32)
            memcpy((int32_t *)d->out + at + q * d->N, t + q * 16, (size_t)cols * 4);
        else
            for (int64_t n = 0; n < cols; n++)
                ((int64_t *)d->out)[at + q * d->N + n] = t[q * 16 + n];
    }
}

/* Stores C tile T (a compile-time tile number) of rows m0, columns n0: in place when it lies
 * inside an s32 result, else into buf[T] (put[T] set), which AMX_PUTS copies into the result once
 * every tile is stored: tile registers do not survive a function call (the ABI's rule). */
#define AMX_STORE(T, m0, n0)                                                                       \
    do {                                                                                           \
        if (d->od == OT_S32 && (m0) + 16 <= d->M && (n0) + 16 <= d->N) {                           \
            _tile_stored(T, (int32_t *)d->out + (b * d->M + (m0)) * d->N + (n0), d->N * 4);        \
        } else {                                                                                   \
            _tile_stored(T, buf[T], 64);                                                           \
            put[T] = true;                                                                         \
        }                                                                                          \
    } while (0)
/* C tiles 0-3 are rows m0, m0, m1, m1 x columns n0, n0 + 16, n0, n0 + 16 */
#define AMX_PUTS(m0, m1, n0)                                                                       \
    for (int t = 0; t < 4; t++)                                                                    \
        if (put[t]) {                                                                              \
            amx_put(r, b, t < 2 ? (m0) : (m1), (n0) + (t & 1) * 16, buf[t]);                       \
            put[t] = false;                                                                        \
        }

/* Rows [m0, m0 + 16 * two_m) x column panels [j0, j1) of batch element b over the whole K, by
 * instruction DP; tiles loaded with the 64-byte stride of the packing. */
#define AMX_BLOCKS(NAME, DP)                                                                       \
    AMX_TARGET static void NAME(const amx_run *r, int64_t b, int64_t i0, bool two_m, int64_t j0,   \
                                int64_t j1) {                                                      \
        const ex_amx_dot *d = r->d;                                                                \
        int32_t buf[4][256];                                                                       \
        bool put[4] = {false, false, false, false};                                                \
        const uint8_t *a0 = r->ap + (b * r->mt + i0) * r->kb * 1024, *a1 = a0 + r->kb * 1024;      \
        int64_t m0 = i0 * 16, m1 = m0 + 16;                                                        \
        int64_t j = j0;                                                                            \
        for (; j + 2 <= j1; j += 2) {                                                              \
            const uint8_t *b0 = r->bp + (b * r->nt + j) * r->kb * 1024, *b1 = b0 + r->kb * 1024;   \
            _tile_zero(0);                                                                         \
            _tile_zero(1);                                                                         \
            _tile_zero(2);                                                                         \
            _tile_zero(3);                                                                         \
            for (int64_t k = 0; k < r->kb; k++) {                                                  \
                _tile_loadd(6, b0 + k * 1024, 64);                                                 \
                _tile_loadd(7, b1 + k * 1024, 64);                                                 \
                _tile_loadd(4, a0 + k * 1024, 64);                                                 \
                DP(0, 4, 6);                                                                       \
                DP(1, 4, 7);                                                                       \
                if (two_m) {                                                                       \
                    _tile_loadd(5, a1 + k * 1024, 64);                                             \
                    DP(2, 5, 6);                                                                   \
                    DP(3, 5, 7);                                                                   \
                }                                                                                  \
            }                                                                                      \
            AMX_STORE(0, m0, j * 16);                                                              \
            AMX_STORE(1, m0, j * 16 + 16);                                                         \
            if (two_m) {                                                                           \
                AMX_STORE(2, m1, j * 16);                                                          \
                AMX_STORE(3, m1, j * 16 + 16);                                                     \
            }                                                                                      \
            AMX_PUTS(m0, m1, j * 16)                                                               \
        }                                                                                          \
        if (j < j1) { /* the last, odd column panel */                                             \
            const uint8_t *b0 = r->bp + (b * r->nt + j) * r->kb * 1024;                            \
            _tile_zero(0);                                                                         \
            _tile_zero(2);                                                                         \
            for (int64_t k = 0; k < r->kb; k++) {                                                  \
                _tile_loadd(6, b0 + k * 1024, 64);                                                 \
                _tile_loadd(4, a0 + k * 1024, 64);                                                 \
                DP(0, 4, 6);                                                                       \
                if (two_m) {                                                                       \
                    _tile_loadd(5, a1 + k * 1024, 64);                                             \
                    DP(2, 5, 6);                                                                   \
                }                                                                                  \
            }                                                                                      \
            AMX_STORE(0, m0, j * 16);                                                              \
            if (two_m) AMX_STORE(2, m1, j * 16);                                                   \
            AMX_PUTS(m0, m1, j * 16)                                                               \
        }                                                                                          \
    }

AMX_BLOCKS(amx_ss, _tile_dpbssd)
AMX_BLOCKS(amx_su, _tile_dpbsud)
AMX_BLOCKS(amx_us, _tile_dpbusd)
AMX_BLOCKS(amx_uu, _tile_dpbuud)

typedef void (*amx_blocks_fn)(const amx_run *, int64_t, int64_t, bool, int64_t, int64_t);

/* Tasks: batch element x pair of row panels x group of column panels. */
AMX_TARGET static void amx_tasks(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const amx_run *r = arg;
    const ex_amx_dot *d = r->d;
    amx_blocks_fn fn =
        d->ad == OT_S8 ? (d->bd == OT_S8 ? amx_ss : amx_su) : (d->bd == OT_S8 ? amx_us : amx_uu);
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
    int64_t mp = cdiv(r->mt, 2);
    for (int64_t w = begin; w < end; w++) {
        int64_t b = w / (mp * r->ng), t = w % (mp * r->ng), i0 = (t / r->ng) * 2, g = t % r->ng;
        int64_t j0 = g * r->gp, j1 = j0 + r->gp < r->nt ? j0 + r->gp : r->nt;
        fn(r, b, i0, i0 + 1 < r->mt, j0, j1);
        if (r->epi) {
            int64_t m0 = i0 * 16, m1 = m0 + 32 < d->M ? m0 + 32 : d->M;
            int64_t n0 = j0 * 16, n1 = j1 * 16 < d->N ? j1 * 16 : d->N;
            if (r->ng == 1)
                r->epi->fn(r->epi->ctx, (b * d->M + m0) * d->N, (b * d->M + m1) * d->N);
            else
                for (int64_t m = m0; m < m1; m++)
                    r->epi->fn(r->epi->ctx, (b * d->M + m) * d->N + n0, (b * d->M + m) * d->N + n1);
        }
    }
    _tile_release(); /* the tile state back to its initial state: nothing to save at a switch */
}

static void amx_shape(const ex_amx_dot *d, amx_run *r) {
    r->kb = cdiv(d->K, 64);
    r->mt = cdiv(d->M, 16);
    r->nt = cdiv(d->N, 16);
    r->gp = AMX_BGROUP / (r->kb * 1024);
    r->gp = r->gp < 2 ? 2 : r->gp & ~(int64_t)1;
    if (r->gp > r->nt) r->gp = r->nt;
    r->ng = cdiv(r->nt, r->gp);
}

size_t ex_amx_dot_scratch(const ex_amx_dot *d) {
    amx_run r;
    amx_shape(d, &r);
    return ex_align64((size_t)(d->nb * r.mt * r.kb * 1024)) +
           ex_align64((size_t)(d->nb * r.nt * r.kb * 1024));
}

int64_t ex_amx_dot_tasks(const ex_amx_dot *d) {
    amx_run r;
    amx_shape(d, &r);
    return d->nb * cdiv(r.mt, 2) * r.ng;
}

void ex_amx_dot_run(ex_kernel_ctx *c, const ex_amx_dot *d, void *scratch) {
    amx_run r = {.d = d, .epi = c->epilogue};
    amx_shape(d, &r);
    r.ap = scratch;
    r.bp = r.ap + ex_align64((size_t)(d->nb * r.mt * r.kb * 1024));
    int64_t packed = d->nb * (r.mt + r.nt) * r.kb * 1024;
    ex_par_for(c, d->nb * (cdiv(r.mt, AMX_PACK) + cdiv(r.nt, AMX_PACK)), packed, amx_pack, &r);
    /* "bytes" for the inline rule: a tdp does 16K multiply-adds in 16 cycles */
    ex_par_for_dynamic(c, ex_amx_dot_tasks(d), d->nb * d->M * d->N * d->K / 16, amx_tasks, &r);
}
#else
bool ex_amx_int8(void) {
    return false;
}
bool ex_amx_int8_dot(ot_dtype a, ot_dtype b, ot_dtype o, int64_t K) {
    (void)a, (void)b, (void)o, (void)K;
    return false;
}
size_t ex_amx_dot_scratch(const ex_amx_dot *d) {
    (void)d;
    return 0;
}
int64_t ex_amx_dot_tasks(const ex_amx_dot *d) {
    (void)d;
    return 0;
}
void ex_amx_dot_run(ex_kernel_ctx *c, const ex_amx_dot *d, void *scratch) {
    (void)c, (void)d, (void)scratch;
}
#endif
