/* The fast dot (kernels.h): a GEMM over operands viewed as row-major matrices — on x86-64 with
 * AVX-512 by a kernel of its own (sg_*: each element one fma chain in k order, B packed once and
 * shared by the pool's threads) for f32, bf16 / f16 operands (widened as they are packed) and f64
 * (sd_*: 8 lanes), otherwise OpenBLAS on one thread per tile of a grid fixed by the shape. Either
 * way the bits do not depend on the thread count. Every product of the own kernel is the
 * reference dot's (linalg.c: fma in k order) bit for bit. The products it leaves to OpenBLAS —
 * f32 with fewer than 12 rows, fewer than 8 columns, or at most 16 columns and a row-major lhs;
 * f64 with fewer than 12 rows or at most 8 columns; any on a CPU without AVX-512 — differ from
 * the reference by the order and rounding of each sum (OpenBLAS's kernels are its own, and its
 * threads run under FTZ | DAZ), within 2 K u sum |a||b|: the own kernel ran those shapes at 0.1
 * to 0.5 of the OpenBLAS tile grid (packing and idle lanes; bench_dot's "narrow" cases). An f32
 * matrix x vector whose matrix rows run along k (A x) goes to ex_gemv_rows (fast_gemv.c): an order
 * of its own, fixed by K, within the same bound. */
#include "exec/fast_internal.h"

#include "core/half.h"

#include <cblas.h>
#undef I /* <complex.h>, pulled in by cblas.h */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define GEMM_CSR_FTZ 1 /* subnormals flushed by the FPU's FTZ | DAZ modes during the GEMM */
#else
#define GEMM_CSR_FTZ 0
#endif

static bool listed(int64_t v, const int64_t *l, int n) {
    for (int k = 0; k < n; k++)
        if (l[k] == v) return true;
    return false;
}

/* Each batch element's operand matrix in memory: a row-major matrix with leading dimension ld
 * (transposed or not, as ex_gemm's ta / tb say) at the offset sum_j idx_j * bstride[j] of the
 * batch index (idx_0, ..., idx_{nbd-1}), the batch dims in the dot's listed order. */
typedef struct gemm_view {
    int64_t ld;
    int nbd;
    int64_t bdim[OT_MAX_RANK], bstride[OT_MAX_RANK]; /* sizes and element strides */
} gemm_view;

/* Batch elements stored one after the other, each rows x cols. */
static void view_dense(gemm_view *v, int64_t nb, int64_t rows, int64_t cols, int64_t ld) {
    v->ld = ld < 1 ? 1 : ld;
    v->nbd = 1;
    v->bdim[0] = nb;
    v->bstride[0] = rows * cols;
}

/* The stride of dims g[0..n) of s (row-major strides st) merged into one index in that order,
 * when they can be (each non-unit dim's stride is the next non-unit dim's stride times its
 * extent); *any when every extent is 1 (one element: any stride). False when they cannot. */
static bool merged(const ot_shape *s, const int64_t *st, const int64_t *g, int n, int64_t *stride,
                   bool *any) {
    int64_t last = -1;
    for (int k = 0; k < n; k++) {
        int64_t d = g[k];
        if (s->dims[d] == 1) continue;
        if (last >= 0 && st[last] != st[d] * s->dims[d]) return false;
        last = d;
    }
    *any = last < 0;
    *stride = last < 0 ? 0 : st[last];
    return true;
}

/* Operand s as batch (dims bat[0..nb)) x free (fr[0..nf), merged in that order: `rows` in all)
 * x contracting (con[0..nc), merged in listed order: `cols` in all) matrices without a copy: the
 * free and contracting dims each merge into one index, one of them of stride 1 (*trans: the
 * contracting one does not), and the other's stride a valid BLAS leading dimension. Batch dims
 * may lie anywhere (attention's [batch, seq, heads, dim] with batch dims 0 and 2). False when the
 * operand has to be copied into that order first. */
static bool view_of(const ot_shape *s, const int64_t *bat, int nb, const int64_t *fr, int nf,
                    const int64_t *con, int nc, int64_t rows, int64_t cols, bool *trans,
                    gemm_view *v) {
    int64_t st[OT_MAX_RANK], acc = 1;
    for (int d = s->rank - 1; d >= 0; d--) {
        st[d] = acc;
        acc *= s->dims[d];
    }
    int64_t fs, cs;
    bool fany, cany;
    if (!merged(s, st, fr, nf, &fs, &fany) || !merged(s, st, con, nc, &cs, &cany)) return false;
    int64_t lo_r = cols > 1 ? cols : 1, lo_c = rows > 1 ? rows : 1;
    if (cany || cs == 1) { /* [rows, cols] rows apart by ld */
        *trans = false;
        v->ld = fany ? lo_r : fs;
        if (v->ld < lo_r) return false;
    } else if (fany || fs == 1) { /* [cols, rows] */
        *trans = true;
        v->ld = cs;
        if (v->ld < lo_c) return false;
    } else {
        return false;
    }
    if (v->ld > INT_MAX) return false;
    v->nbd = nb;
    for (int j = 0; j < nb; j++) {
        v->bdim[j] = s->dims[bat[j]];
        v->bstride[j] = st[bat[j]];
    }
    return true;
}

/* Element offset of batch element b (row-major over v's batch dims) in v. */
static int64_t view_offset(const gemm_view *v, int64_t b) {
    int64_t off = 0;
    for (int j = v->nbd - 1; j >= 0; j--) {
        off += (b % v->bdim[j]) * v->bstride[j];
        b /= v->bdim[j];
    }
    return off;
}

/* Subnormal results to zero of the same sign (the reference's FTZ), on the bits and without
 * branches so the loop vectorizes: a zero exponent field keeps only the sign. */
void ex_flush_out(ot_dtype t, void *y, int64_t n) {
    if (t == OT_F32) {
        uint32_t *p = y;
        for (int64_t e = 0; e < n; e++) p[e] &= (p[e] & 0x7f800000u) ? 0xffffffffu : 0x80000000u;
    } else {
        uint64_t *p = y;
        for (int64_t e = 0; e < n; e++)
            p[e] &= (p[e] & 0x7ff0000000000000ull) ? ~0ull : 0x8000000000000000ull;
    }
}

/* C[b] (M x N) = op(A[b]) (M x K) * op(B[b]) (K x N) for b < nb, row-major, through BLAS.
 * OpenBLAS runs single-threaded (its threaded GEMM gives different bits for different thread
 * counts); the pool splits the work instead, over batch elements x a grid of rm x rn tiles of C
 * chosen from the shape alone (gemm_grid). Every tile is one sgemm/dgemm over the whole K, so
 * each element's sum is the same whichever thread computes its tile: bits never depend on the
 * thread count. */
typedef struct gemm_run {
    const ex_gemm *g;
    int64_t rm, rn; /* rows and columns of a tile (the last ones in M and N may be smaller) */
    const gemm_view *va, *vb; /* where each batch element's A and B lie */
    int64_t per;              /* work items (batch elements x tiles) per task of the pool */
} gemm_run;

/* A tile of one row or one column through OpenBLAS's gemv: a matrix x vector (one sgemm call of
 * 1024 x 1 x 1024 took 4x the time of sgemv here: its gemm path packs the matrix). The tile's
 * result is zeroed first: with beta 0 some OpenBLAS versions scale y (0 x NaN) instead of
 * overwriting it. */
static void blas_gemv(const ex_gemm *g, const char *a, int lda, const char *bb, int ldb, char *c,
                      int ldc, int64_t mm, int64_t nn) {
    bool col = nn == 1; /* y = op(A) x, x B's column; else y = op(B)^T x, x A's row */
    int K = (int)g->K, n = (int)(col ? mm : nn), incy = col ? ldc : 1;
    int incx = col ? (g->tb ? 1 : ldb) : (g->ta ? lda : 1);
    const char *mat = col ? a : bb, *x = col ? bb : a;
    int ld = col ? lda : ldb;
    /* the matrix as stored: [n, K] (NoTrans) or [K, n] (Trans) */
    bool stored_nk = col ? !g->ta : g->tb;
    CBLAS_TRANSPOSE tr = stored_nk ? CblasNoTrans : CblasTrans;
    int rows = stored_nk ? n : K, cols = stored_nk ? K : n;
    size_t es = ot_dtype_size(g->t);
    for (int i = 0; i < n; i++) memset(c + (size_t)i * (size_t)incy * es, 0, es);
    if (g->t == OT_F32)
        cblas_sgemv(CblasRowMajor, tr, rows, cols, 1.0f, (const float *)mat, ld, (const float *)x,
                    incx, 0.0f, (float *)c, incy);
    else
        cblas_dgemv(CblasRowMajor, tr, rows, cols, 1.0, (const double *)mat, ld, (const double *)x,
                    incx, 0.0, (double *)c, incy);
}

static void gemm_tiles(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const gemm_run *run = arg;
    const ex_gemm *g = run->g;
    size_t es = ot_dtype_size(g->t);
    int lda = (int)run->va->ld, ldb = (int)run->vb->ld, ldc = (int)g->N;
    if (ldc < 1) ldc = 1;
    int64_t items = g->nb * g->tm * g->tn, w1 = end * run->per < items ? end * run->per : items;
    for (int64_t w = begin * run->per; w < w1; w++) {
        int64_t b = w / (g->tm * g->tn), t = w % (g->tm * g->tn);
        int64_t m0 = (t / g->tn) * run->rm, n0 = (t % g->tn) * run->rn;
        int64_t mm = g->M - m0 < run->rm ? g->M - m0 : run->rm;
        int64_t nn = g->N - n0 < run->rn ? g->N - n0 : run->rn;
        const char *a = (const char *)g->a + (size_t)view_offset(run->va, b) * es;
        const char *bb = (const char *)g->b + (size_t)view_offset(run->vb, b) * es;
        char *c = (char *)g->c + (size_t)(b * g->M * g->N + m0 * g->N + n0) * es;
        a += (size_t)(g->ta ? m0 : m0 * lda) * es;
        bb += (size_t)(g->tb ? n0 * ldb : n0) * es;
        if (g->K == 0) {
            for (int64_t r = 0; r < mm; r++)
                memset(c + (size_t)(r * g->N) * es, 0, (size_t)nn * es);
            continue;
        }
#if GEMM_CSR_FTZ
        /* Under the reference's FTZ: the FPU flushes every subnormal input (DAZ) and result (FTZ)
         * of the GEMM, as the reference's arithmetic does, instead of a pass over C afterwards
         * (a quarter of a K = 10 GEMM's time). This thread's mode is restored after the call. */
        unsigned int csr = _mm_getcsr();
        if (g->ftz) _mm_setcsr(csr | 0x8040u);
#endif
        if (mm == 1 || nn == 1) {
            blas_gemv(g, a, lda, bb, ldb, c, ldc, mm, nn);
        } else if (g->t == OT_F32)
            cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                        g->tb ? CblasTrans : CblasNoTrans, (int)mm, (int)nn, (int)g->K, 1.0f,
                        (const float *)a, lda, (const float *)bb, ldb, 0.0f, (float *)c, ldc);
        else
            cblas_dgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                        g->tb ? CblasTrans : CblasNoTrans, (int)mm, (int)nn, (int)g->K, 1.0,
                        (const double *)a, lda, (const double *)bb, ldb, 0.0, (double *)c, ldc);
#if GEMM_CSR_FTZ
        if (g->ftz) _mm_setcsr(csr);
#else
        if (g->ftz)
            for (int64_t r = 0; r < mm; r++) ex_flush_out(g->t, c + (size_t)(r * g->N) * es, nn);
#endif
    }
}

/* The tile grid, from the shape alone (never the thread count: see gemm_tiles).
 * Aim: GEMM_TARGET work items in all (batch elements x tiles) so that any pool of up to about 8
 * threads gets an even share, each tile at least GEMM_MIN_TILE multiply-adds (below that a
 * tile's own packing and call overhead outweigh the parallelism; the whole GEMM stays one tile).
 * Batch elements count first: a batch of >= GEMM_TARGET elements keeps each element whole.
 * Otherwise each element is cut into about t tiles. Every tile packs its rows of A and its
 * columns of B again (K x (tm N + tn M) packed in all), so the grid is the tm x tn with
 * about t tiles that packs least, i.e. tiles about as square as M and N allow; tile sides are
 * multiples of 16 (the kernels' vector widths and register blocks divide 16) and at least 64
 * rows or columns. A narrow N (< 128) is never split (column tiles would be narrower than the
 * kernels' packing panels); M alone carries the split. */
#define GEMM_TARGET   8
#define GEMM_MIN_TILE ((int64_t)1 << 19)
/* A product with one row or one column (a matrix x vector, typically once per step of a loop)
 * does one multiply-add per element of its matrix: memory-bound, about 60 us for a 4 MiB matrix
 * on one thread here. Handing half of it to the pool cost more than it saved (1024 x 1024 x 1
 * per step of a fori_loop: min 1.7 ms per 31 products on one thread, 4.5 ms split on two, this
 * machine loaded): such a product is split only when its matrix has at least this many bytes. */
#define GEMV_SPLIT_BYTES ((int64_t)16 << 20)

/* A product of one row or one column (all batch elements) below GEMV_SPLIT_BYTES of matrix. */
static bool gemv_inline(const ex_gemm *g) {
    int64_t e = (int64_t)ot_dtype_size(g->t);
    return (g->M == 1 || g->N == 1) && g->nb * g->M * g->N * g->K * e < GEMV_SPLIT_BYTES;
}

static int64_t cdiv(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

static int64_t side(int64_t n, int64_t parts) { /* n cut in `parts`: rounded up to 16, >= 64 */
    int64_t s = (cdiv(n, parts) + 15) / 16 * 16;
    return s < 64 ? 64 : s;
}

static void gemm_grid(ex_gemm *g, gemm_run *run) {
    run->g = g;
    run->per = 1;
    run->rm = g->M > 0 ? g->M : 1;
    run->rn = g->N > 0 ? g->N : 1;
    int64_t mnk = g->M * g->N * (g->K ? g->K : 1);
    int64_t t = g->nb >= GEMM_TARGET ? 1 : cdiv(GEMM_TARGET, g->nb);
    if (mnk / GEMM_MIN_TILE < t) t = mnk / GEMM_MIN_TILE;
    if (gemv_inline(g)) t = 1;
    if (t > 1) {
        int64_t best_cost = -1, best_n = 0;
        /* pm rows of tiles x enough columns for t; sides rounded up may give fewer tiles: the
         * grid with the most tiles up to t wins, then the least packed volume tm N + tn M */
        for (int64_t pm = 1; pm <= t; pm++) {
            int64_t pn = cdiv(t, pm);
            if (g->N < 128 && pn > 1) continue;
            int64_t rm = side(g->M, pm), rn = pn > 1 ? side(g->N, pn) : g->N;
            int64_t tm = cdiv(g->M, rm), tn = cdiv(g->N, rn);
            int64_t n = tm * tn < t ? tm * tn : t, cost = tm * g->N + tn * g->M;
            if (n > best_n || (n == best_n && cost < best_cost)) {
                best_n = n;
                best_cost = cost;
                run->rm = rm;
                run->rn = rn;
            }
        }
    }
    g->tm = cdiv(g->M, run->rm);
    g->tn = cdiv(g->N, run->rn);
}

/* ---- f32 GEMM of our own (x86-64 with AVX-512) -------------------------------------------
 * OpenBLAS on one thread per tile packs each tile's share of A and B again (about 20 % more CPU
 * than one call on the suite's 2 x 4 grids), and its own threading changes the bits with the
 * thread count. This kernel packs each product's B once, shared by all threads (in slices of
 * a k block x a task's columns, by the first task that needs each: one pass over the pool per
 * product, no pass to pack B before it), and computes
 * every element of C as one chain of fused multiply-adds over k = 0, 1, ..., K-1 starting from 0
 * (carried through C between blocks of k): its bits depend on the operands alone, not on the
 * thread count, the split of the work or the blocking, so the split can follow the pool's size.
 * It is the reference's chain (linalg.c) bit for bit: the GEMM asks no FTZ/DAZ of the FPU (partial
 * sums underflow gradually), under FTZ the operands are flushed as they are packed (sg_load) and
 * a transposed A is read in place only where it holds no subnormal (sg_rows_normal: about a tenth
 * of such a product's time, against a third for packing it), and each finished sum is flushed
 * and a NaN made canonical in registers as it is stored (sg_fix).
 * Register blocks: 12 rows x 32 columns (24 zmm accumulators), or 24 x 16 for N <= 16 (the
 * N = 10 products). K is cut into blocks of SG_KC k, except that K <= SG_KC1 is one block (257 is
 * not 256 + 1). A is packed a row block (sg_mcmax rows) x a k block at a time (in L2): a
 * row-major A of a product cut into several column blocks once, shared by the tasks as B is
 * (sg_claim_a), otherwise per thread, except a transposed A under tasks of few columns, read
 * where it lies; with one k block, a thread's next task on the same rows keeps the rows it
 * packed. Each register block
 * streams one packed B panel (a k block x nr) against its rows of A. Packing is vectorized: rows
 * copied 16 floats at a time, a transposing pack (row-major A, transposed B) through 16 x 16
 * register transposes. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SG_OWN    1
#define SG_AVX512 EX_AVX512
#define SG_KC     256                 /* k per block */
#define SG_KC1    320                 /* K up to this is one block */
#define SG_MC     96                  /* a multiple of both register blocks' rows */
#define SG_MC2    192                 /* SG_MC for one row-major A (sg_mcmax) */
#define SG_BPACK  ((int64_t)16 << 20) /* packed B held at once (bytes); batches in groups */
#define SG_APACK  ((int64_t)16 << 20) /* shared packed A at most (bytes) */
#define SG_DIRECT 4                   /* tasks of at most this many panels read A in place */

/* Masks of the first n (0..16) lanes. */
static inline __mmask16 sg_lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* The register blocks: c[0..nq) x [0..nj) (row stride ldc) = (load ? c : 0) + the sum over
 * k < kc of a[i + k * ld] * bp[k * bs + j], each element's chain of fmas in k order: A packed
 * (ld = mr) or a transposed operand read where it lies (ld = its leading dimension); bp a packed
 * B panel of bs (nr) floats per k. Each kernel computes R rows (R >= nq; the rows past nq of a
 * packed A are zero, and are neither loaded nor stored) and V vectors of 16 columns, the last
 * one loaded and stored through the mask m (the columns past nj): an edge of C is written in
 * place, computing at most 3 rows and 15 columns that are not stored, instead of a whole
 * 12 x 32 block through a buffer. Reading a row-major A in place instead of packing it (mr rows
 * ld apart, every k) was 10x slower on a 4 KiB ld: the rows share one set of the L1 cache. */
#define SG_R4(X)  X(0) X(1) X(2) X(3)
#define SG_R8(X)  SG_R4(X) X(4) X(5) X(6) X(7)
#define SG_R12(X) SG_R8(X) X(8) X(9) X(10) X(11)
#define SG_R16(X) SG_R12(X) X(12) X(13) X(14) X(15)
#define SG_R24(X) SG_R16(X) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)

/* The finished sums of an f32 product as the reference stores them (fix, on the last k block):
 * SG_FIX_NAN a NaN made the canonical quiet NaN 0x7fc00000 (which NaN an fma propagates depends
 * on its operand order); SG_FIX_FTZ also a subnormal flushed to a zero of its sign. In registers,
 * before the store, one classification per vector (the lanes to change are rare): a pass over C
 * afterwards took half a K = 10 product's time, a compare and a blend per kind a fifth. */
enum { SG_FIX_NONE, SG_FIX_NAN, SG_FIX_FTZ };
SG_AVX512 static __attribute__((noinline)) __m512 sg_fix_lanes(__m512 v, __mmask16 f) {
    __m512i u = _mm512_castps_si512(v);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & f;
    u = _mm512_mask_and_epi32(u, f & ~nan, u, _mm512_set1_epi32((int)0x80000000u));
    u = _mm512_mask_mov_epi32(u, nan, _mm512_set1_epi32(0x7fc00000));
    return _mm512_castsi512_ps(u);
}
SG_AVX512 static inline __m512 sg_fix(__m512 v, int fix) {
    if (fix == SG_FIX_NONE) return v;
    /* classes: 0x01 quiet NaN, 0x80 signalling NaN, 0x20 subnormal */
    __mmask16 f =
        fix == SG_FIX_FTZ ? _mm512_fpclass_ps_mask(v, 0xa1) : _mm512_fpclass_ps_mask(v, 0x81);
    return f ? sg_fix_lanes(v, f) : v;
}

/* R x 32: two zmm of columns per row, the second masked */
#define SG_UKR2(NAME, ROWS, FMA, TARGET)                                                           \
    TARGET static void NAME(int64_t kc, const float *restrict a, int64_t ld,                       \
                            const float *restrict bp, int64_t bs, float *c, int64_t ldc,           \
                            bool load, int64_t nq, __mmask16 m, int fix) {                         \
        ROWS(SG_DECL2)                                                                             \
        for (int64_t k = 0; k < kc; k++) {                                                         \
            __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);                          \
            ROWS(FMA)                                                                              \
            a += ld;                                                                               \
            bp += bs;                                                                              \
        }                                                                                          \
        ROWS(SG_STORE2)                                                                            \
    }
#define SG_DECL2(i)                                                                                \
    __m512 c##i##a = _mm512_setzero_ps(), c##i##b = _mm512_setzero_ps();                           \
    if (load && (i) < nq) {                                                                        \
        c##i##a = _mm512_loadu_ps(c + (i)*ldc);                                                    \
        c##i##b = _mm512_maskz_loadu_ps(m, c + (i)*ldc + 16);                                      \
    }
#define SG_FMA2(i)                                                                                 \
    {                                                                                              \
        __m512 x = _mm512_set1_ps(a[i]);                                                           \
        c##i##a = _mm512_fmadd_ps(x, b0, c##i##a);                                                 \
        c##i##b = _mm512_fmadd_ps(x, b1, c##i##b);                                                 \
    }
#define SG_STORE2(i)                                                                               \
    if ((i) < nq) {                                                                                \
        _mm512_storeu_ps(c + (i)*ldc, sg_fix(c##i##a, fix));                                       \
        _mm512_mask_storeu_ps(c + (i)*ldc + 16, m, sg_fix(c##i##b, fix));                          \
    }

/* R x 16: one zmm of columns per row, masked (N <= 16, and the last <= 16 columns of a wider C) */
#define SG_UKR1(NAME, ROWS, FMA, TARGET)                                                           \
    TARGET static void NAME(int64_t kc, const float *restrict a, int64_t ld,                       \
                            const float *restrict bp, int64_t bs, float *c, int64_t ldc,           \
                            bool load, int64_t nq, __mmask16 m, int fix) {                         \
        ROWS(SG_DECL1)                                                                             \
        for (int64_t k = 0; k < kc; k++) {                                                         \
            __m512 b0 = _mm512_load_ps(bp);                                                        \
            ROWS(FMA)                                                                              \
            a += ld;                                                                               \
            bp += bs;                                                                              \
        }                                                                                          \
        ROWS(SG_STORE1)                                                                            \
    }
#define SG_DECL1(i)                                                                                \
    __m512 c##i = load && (i) < nq ? _mm512_maskz_loadu_ps(m, c + (i)*ldc) : _mm512_setzero_ps();
#define SG_FMA1(i) c##i = _mm512_fmadd_ps(_mm512_set1_ps(a[i]), b0, c##i);
#define SG_STORE1(i)                                                                               \
    if ((i) < nq) _mm512_mask_storeu_ps(c + (i)*ldc, m, sg_fix(c##i, fix));
/* The eight register blocks of one kind: P##_ukr_{4,8,12}x32 and P##_ukr_{4,8,12,16,24}x16, and
 * their row of sg_ukrs (by width, then rows: 4, 8, 12, 16, 24; R x 32 stops at 12 rows) */
#define SG_UKRS(P, FMA2, FMA1, TARGET)                                                             \
    SG_UKR2(P##_ukr_4x32, SG_R4, FMA2, TARGET)                                                     \
    SG_UKR2(P##_ukr_8x32, SG_R8, FMA2, TARGET)                                                     \
    SG_UKR2(P##_ukr_12x32, SG_R12, FMA2, TARGET)                                                   \
    SG_UKR1(P##_ukr_4x16, SG_R4, FMA1, TARGET)                                                     \
    SG_UKR1(P##_ukr_8x16, SG_R8, FMA1, TARGET)                                                     \
    SG_UKR1(P##_ukr_12x16, SG_R12, FMA1, TARGET)                                                   \
    SG_UKR1(P##_ukr_16x16, SG_R16, FMA1, TARGET)                                                   \
    SG_UKR1(P##_ukr_24x16, SG_R24, FMA1, TARGET)
#define SG_UKR_ROW(P)                                                                              \
    {                                                                                              \
        {P##_ukr_4x32, P##_ukr_8x32, P##_ukr_12x32, P##_ukr_12x32, P##_ukr_12x32}, {               \
            P##_ukr_4x16, P##_ukr_8x16, P##_ukr_12x16, P##_ukr_16x16, P##_ukr_24x16                \
        }                                                                                          \
    }
SG_UKRS(sg, SG_FMA2, SG_FMA1, SG_AVX512)

/* The same blocks over bf16 pairs (SG_PAIR, under FTZ): each packed "float" of A and B holds the
 * bf16 elements k = 2p (low half) and 2p + 1 (high half) of one row or column, and vdpbf16ps adds
 * both products to each lane, 2p + 1 first, every step an fma whose result is flushed (inputs read
 * through DAZ): the reference's ACC_F32_PAIR chain (src/exec/linalg.c), bit for bit. */
#define SG_AVX512BF __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16")))
#define SGP_FMA2(i)                                                                                \
    {                                                                                              \
        __m512bh x = (__m512bh)_mm512_set1_ps(a[i]);                                               \
        c##i##a = _mm512_dpbf16_ps(c##i##a, x, (__m512bh)b0);                                      \
        c##i##b = _mm512_dpbf16_ps(c##i##b, x, (__m512bh)b1);                                      \
    }
#define SGP_FMA1(i) c##i = _mm512_dpbf16_ps(c##i, (__m512bh)_mm512_set1_ps(a[i]), (__m512bh)b0);
SG_UKRS(sgp, SGP_FMA2, SGP_FMA1, SG_AVX512BF)

typedef void (*sg_ukr_fn)(int64_t, const float *restrict, int64_t, const float *restrict, int64_t,
                          float *, int64_t, bool, int64_t, __mmask16, int);
/* by kind (f32, bf16 pairs by vdpbf16ps), width (R x 32, R x 16), rows */
static const sg_ukr_fn sg_ukrs[2][2][5] = {SG_UKR_ROW(sg), SG_UKR_ROW(sgp)};

/* The register block for nq rows (<= mr) x nj columns (<= the panel's nr = bs) at c: the
 * narrowest kernel that covers them (rows in steps of 4, or 8 past 16; columns in steps of 16);
 * pair: the bf16-pair kernels (vdpbf16ps) */
static void sg_ukr(int64_t kc, const float *a, int64_t ld, const float *bp, int64_t bs, float *c,
                   int64_t ldc, bool load, int64_t nq, int64_t nj, int fix, bool pair) {
    int rows = nq <= 4 ? 0 : nq <= 8 ? 1 : nq <= 12 ? 2 : nq <= 16 ? 3 : 4;
    sg_ukrs[pair][nj <= 16][rows](kc, a, ld, bp, bs, c, ldc, load, nq,
                                  sg_lanes(nj > 16 ? nj - 16 : nj), fix);
}

bool ex_avx512(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma");
}

/* One register block (12 x 32) over KC pairs of kind dp (vdpbf16ps), or over their 2 KC elements
 * widened (SG_SWAP: the f32 kernel under the FPU's FTZ | DAZ, as sg_block runs it), on small
 * L1-resident operands, trials times alternately: each kind's fastest call in *t_dp and *t_fma
 * (ns). */
SG_AVX512 static void sg_pair_time(int trials, uint64_t *t_dp, uint64_t *t_fma) {
    enum { KC = 128, REPS = 16 };
    float *buf = ot_aligned_alloc(64, sizeof(float) * (2 * KC * 12 + 2 * KC * 32 + 12 * 32));
    if (!buf) return;
    float *a = buf, *b = buf + 2 * KC * 12, *c = b + 2 * KC * 32;
    for (int i = 0; i < 2 * KC * 12 + 2 * KC * 32; i++) { /* pairs of bf16 1.0 and 0.5, or */
        uint32_t v = i % 3 ? 0x3f803f00u : 0x3f003f80u;   /* those values widened: normal sums */
        memcpy(&buf[i], &v, 4);
    }
    *t_dp = *t_fma = UINT64_MAX;
    for (int t = 0; t < trials; t++)
        for (int dp = 1; dp >= 0; dp--) {
            unsigned csr = dp ? 0 : ex_hw_ftz_on();
            uint64_t t0 = ot_now_ns();
            for (int r = 0; r < REPS; r++)
                sg_ukrs[dp][0][2](dp ? KC : 2 * KC, a, 12, b, 32, c, 32, r > 0, 12, 0xffff,
                                  SG_FIX_NONE);
            uint64_t dt = ot_now_ns() - t0;
            if (!dp) ex_hw_ftz_off(csr);
            uint64_t *best = dp ? t_dp : t_fma;
            if (dt < *best) *best = dt;
        }
    ot_aligned_free(buf);
}

/* bf16 x bf16 products under FTZ: vdpbf16ps (two products per lane per instruction) or the f32
 * kernel over the pairs widened (SG_SWAP), whichever runs a register block faster on this CPU,
 * measured once per process (both give the same bits). AVX512_BF16 does not make the instruction
 * the faster: here (a 2-vCPU Xeon with AMX) vdpbf16ps issues once per two cycles against two fmas
 * per cycle, a register block of it took 29.4 us against 16.4 us for the widened pairs (21.3 us for
 * the two-fma pair kernels that unpacked the pairs in the inner loop before them), and a
 * 1000 x 3072 x 768 dot + GELU on two threads with the CPUs held ran in 21.3 ms with the unpacking
 * pair kernels, 19.3 ms widened (docs/benchmarks.md). OPTITPU_DPBF16=0 or 1 sets the kind instead
 * (measurement, and the tests of either kind on a CPU that has both). */
static atomic_int g_dp_known; /* 0 not yet decided, 1 widened pairs, 2 vdpbf16ps */
static atomic_ullong g_dp_ns, g_fma_ns;

static bool sg_dpbf16(void) {
    int k = atomic_load_explicit(&g_dp_known, memory_order_acquire);
    if (!k) {
        const char *e = getenv("OPTITPU_DPBF16");
        bool cpu = ex_avx512() && __builtin_cpu_supports("avx512bf16");
        if (!cpu || (e && !strcmp(e, "0"))) {
            k = 1;
        } else if (e && !strcmp(e, "1")) {
            k = 2;
        } else {
            uint64_t td = 0, tf = 0;
            sg_pair_time(7, &td, &tf);
            atomic_store_explicit(&g_dp_ns, td, memory_order_relaxed);
            atomic_store_explicit(&g_fma_ns, tf, memory_order_relaxed);
            k = td < tf ? 2 : 1;
        }
        atomic_store_explicit(&g_dp_known, k, memory_order_release);
    }
    return k == 2;
}

bool ex_dot_bf16_dp(uint64_t *t_dp, uint64_t *t_fma) {
    bool dp = sg_dpbf16();
    if (t_dp) *t_dp = atomic_load_explicit(&g_dp_ns, memory_order_relaxed);
    if (t_fma) *t_fma = atomic_load_explicit(&g_fma_ns, memory_order_relaxed);
    return dp;
}

/* An operand as the packing reads it: f32, or bf16 / f16 widened to f32 as it is read (exact;
 * every f16 value is a normal f32), so a 16-bit operand needs no widened copy; with daz a
 * subnormal f32 or bf16 reads as a zero of its sign, as the reference widens it under FTZ (the
 * GEMM itself runs without DAZ: its partial sums underflow gradually, as the reference's). */
typedef struct sg_src {
    const void *p;
    ot_dtype t;
    bool daz;
} sg_src;

static inline int64_t sg_es(sg_src s) {
    return s.t == OT_F64 ? 8 : s.t == OT_F32 ? 4 : s.t == OT_S8 || s.t == OT_U8 ? 1 : 2;
}

/* The address of element off (a prefetch's: computed as an integer, it may lie past the
 * operand, and a prefetch never faults) */
static inline const char *sg_at(sg_src s, int64_t off) {
    return (const char *)((uintptr_t)s.p + (uintptr_t)(off * sg_es(s)));
}

/* Lanes m of the 16 elements at element off, as f32 (the others zero; never read) */
SG_AVX512 static inline __m512 sg_load(sg_src s, int64_t off, __mmask16 m) {
    __m512i u;
    if (s.t == OT_S8 || s.t == OT_U8) { /* 8-bit integers: exact in f32 (int8_dot_bound) */
        __m128i q = _mm_maskz_loadu_epi8(m, (const int8_t *)s.p + off);
        return _mm512_cvtepi32_ps(s.t == OT_S8 ? _mm512_cvtepi8_epi32(q) : _mm512_cvtepu8_epi32(q));
    }
    if (s.t == OT_F32) {
        __m512 v = _mm512_maskz_loadu_ps(m, (const float *)s.p + off);
        if (!s.daz) return v;
        u = _mm512_castps_si512(v);
    } else {
        __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)s.p + off);
        if (s.t == OT_F16) return _mm512_cvtph_ps(h);
        u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
        if (!s.daz) return _mm512_castsi512_ps(u);
    }
    /* a zero exponent field (zero or subnormal) keeps only the sign */
    __mmask16 sub = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    return _mm512_castsi512_ps(
        _mm512_mask_and_epi32(u, sub, u, _mm512_set1_epi32((int)0x80000000u)));
}

/* ---- f64: the same GEMM on 8 lanes, each element the reference's chain -------------------
 * An f64 product (N > 8) runs the driver below with panels of 16 doubles and these
 * kernels: every element of C is the reference's sum (src/exec/linalg.c ACC_F64_FMA): one chain
 * of fmas in k order from 0, the partial sums underflowing gradually (the GEMM runs without
 * FTZ/DAZ), the operands flushed as they are packed under FTZ (sd_load), the finished sums
 * flushed and a NaN made the canonical quiet NaN in registers as they are stored (sd_fix). */
static inline __mmask8 sd_lanes(int64_t n) {
    return n >= 8 ? (__mmask8)0xff : (__mmask8)((1u << n) - 1u);
}

/* Lanes m of the 8 doubles at element off (the others zero); with daz a subnormal reads as a
 * zero of its sign */
SG_AVX512 static inline __m512d sd_load(sg_src s, int64_t off, __mmask8 m) {
    __m512i u = _mm512_castpd_si512(_mm512_maskz_loadu_pd(m, (const double *)s.p + off));
    if (s.daz) {
        __mmask8 sub = _mm512_testn_epi64_mask(u, _mm512_set1_epi64(0x7ff0000000000000ll));
        u = _mm512_mask_and_epi64(u, sub, u, _mm512_set1_epi64((long long)0x8000000000000000ull));
    }
    return _mm512_castsi512_pd(u);
}

/* sg_fix's f64 twin: a NaN made 0x7ff8000000000000, under SG_FIX_FTZ a subnormal flushed to a
 * zero of its sign, in registers as stored (a pass over C afterwards, half_finish, had taken a
 * sixth of a K = 77 product's time) */
SG_AVX512 static __attribute__((noinline)) __m512d sd_fix_lanes(__m512d v, __mmask8 f) {
    __m512i u = _mm512_castpd_si512(v);
    __mmask8 nan = _mm512_cmp_pd_mask(v, v, _CMP_UNORD_Q) & f;
    u = _mm512_mask_and_epi64(u, f & ~nan, u, _mm512_set1_epi64((long long)0x8000000000000000ull));
    u = _mm512_mask_mov_epi64(u, nan, _mm512_set1_epi64(0x7ff8000000000000ll));
    return _mm512_castsi512_pd(u);
}
SG_AVX512 static inline __m512d sd_fix(__m512d v, int fix) {
    if (fix == SG_FIX_NONE) return v;
    /* classes: 0x01 quiet NaN, 0x80 signalling NaN, 0x20 subnormal */
    __mmask8 f =
        fix == SG_FIX_FTZ ? _mm512_fpclass_pd_mask(v, 0xa1) : _mm512_fpclass_pd_mask(v, 0x81);
    return f ? sd_fix_lanes(v, f) : v;
}

/* R x 16: two zmm of columns per row, the second masked */
#define SD_UKR2(NAME, ROWS)                                                                        \
    SG_AVX512 static void NAME(int64_t kc, const double *restrict a, int64_t ld,                   \
                               const double *restrict bp, int64_t bs, double *c, int64_t ldc,      \
                               bool load, int64_t nq, __mmask8 m, int fix) {                       \
        ROWS(SD_DECL2)                                                                             \
        for (int64_t k = 0; k < kc; k++) {                                                         \
            __m512d b0 = _mm512_load_pd(bp), b1 = _mm512_load_pd(bp + 8);                          \
            ROWS(SD_MA2)                                                                           \
            a += ld;                                                                               \
            bp += bs;                                                                              \
        }                                                                                          \
        ROWS(SD_STORE2)                                                                            \
    }
#define SD_DECL2(i)                                                                                \
    __m512d c##i##a = _mm512_setzero_pd(), c##i##b = _mm512_setzero_pd();                          \
    if (load && (i) < nq) {                                                                        \
        c##i##a = _mm512_loadu_pd(c + (i)*ldc);                                                    \
        c##i##b = _mm512_maskz_loadu_pd(m, c + (i)*ldc + 8);                                       \
    }
#define SD_MA2(i)                                                                                  \
    {                                                                                              \
        __m512d x = _mm512_set1_pd(a[i]);                                                          \
        c##i##a = _mm512_fmadd_pd(x, b0, c##i##a);                                                 \
        c##i##b = _mm512_fmadd_pd(x, b1, c##i##b);                                                 \
    }
#define SD_STORE2(i)                                                                               \
    if ((i) < nq) {                                                                                \
        _mm512_storeu_pd(c + (i)*ldc, sd_fix(c##i##a, fix));                                       \
        _mm512_mask_storeu_pd(c + (i)*ldc + 8, m, sd_fix(c##i##b, fix));                           \
    }
SD_UKR2(sd_ukr_4x16, SG_R4)
SD_UKR2(sd_ukr_8x16, SG_R8)
SD_UKR2(sd_ukr_12x16, SG_R12)

/* R x 8: one zmm of columns per row, masked (the last <= 8 columns of C) */
#define SD_UKR1(NAME, ROWS)                                                                        \
    SG_AVX512 static void NAME(int64_t kc, const double *restrict a, int64_t ld,                   \
                               const double *restrict bp, int64_t bs, double *c, int64_t ldc,      \
                               bool load, int64_t nq, __mmask8 m, int fix) {                       \
        ROWS(SD_DECL1)                                                                             \
        for (int64_t k = 0; k < kc; k++) {                                                         \
            __m512d b0 = _mm512_load_pd(bp);                                                       \
            ROWS(SD_MA1)                                                                           \
            a += ld;                                                                               \
            bp += bs;                                                                              \
        }                                                                                          \
        ROWS(SD_STORE1)                                                                            \
    }
#define SD_DECL1(i)                                                                                \
    __m512d c##i = load && (i) < nq ? _mm512_maskz_loadu_pd(m, c + (i)*ldc) : _mm512_setzero_pd();
#define SD_MA1(i) c##i = _mm512_fmadd_pd(_mm512_set1_pd(a[i]), b0, c##i);
#define SD_STORE1(i)                                                                               \
    if ((i) < nq) _mm512_mask_storeu_pd(c + (i)*ldc, m, sd_fix(c##i, fix));
SD_UKR1(sd_ukr_4x8, SG_R4)
SD_UKR1(sd_ukr_8x8, SG_R8)
SD_UKR1(sd_ukr_12x8, SG_R12)

/* sg_ukr's f64 twin: nq rows (<= mr = 12) x nj columns (<= the panel's nr = bs = 16) */
static void sd_ukr(int64_t kc, const double *a, int64_t ld, const double *bp, int64_t bs, double *c,
                   int64_t ldc, bool load, int64_t nq, int64_t nj, int fix) {
    if (nj > 8) {
        __mmask8 m = sd_lanes(nj - 8);
        if (nq <= 4)
            sd_ukr_4x16(kc, a, ld, bp, bs, c, ldc, load, nq, m, fix);
        else if (nq <= 8)
            sd_ukr_8x16(kc, a, ld, bp, bs, c, ldc, load, nq, m, fix);
        else
            sd_ukr_12x16(kc, a, ld, bp, bs, c, ldc, load, nq, m, fix);
        return;
    }
    __mmask8 m = sd_lanes(nj);
    if (nq <= 4)
        sd_ukr_4x8(kc, a, ld, bp, bs, c, ldc, load, nq, m, fix);
    else if (nq <= 8)
        sd_ukr_8x8(kc, a, ld, bp, bs, c, ldc, load, nq, m, fix);
    else
        sd_ukr_12x8(kc, a, ld, bp, bs, c, ldc, load, nq, m, fix);
}

/* sg_pack_rows for f64: d[k * w + i] = src[i * lds + k], rows in [n, w) zero, 8 x 8 blocks */
SG_AVX512 static void sd_pack_rows(sg_src src, int64_t off, int64_t lds, int64_t n, int64_t w,
                                   int64_t kc, double *d) {
    for (int64_t i0 = 0; i0 < w; i0 += 8) {
        int64_t nl = w - i0 < 8 ? w - i0 : 8, nv = n - i0 < 0 ? 0 : n - i0 < nl ? n - i0 : nl;
        __mmask8 st = sd_lanes(nl);
        for (int64_t k0 = 0; k0 < kc; k0 += 8) {
            int64_t nk = kc - k0 < 8 ? kc - k0 : 8, pk = k0 + 64, pr = i0;
            if (pk >= kc) { /* prefetch 8 blocks ahead, as sg_pack_rows */
                pk -= kc;
                pr += nl;
            }
            for (int i = 0; i < nl; i++)
                _mm_prefetch(sg_at(src, off + (pr + i) * lds + pk), _MM_HINT_T0);
            __m512d r[8];
            for (int i = 0; i < 8; i++)
                r[i] = i < nv ? sd_load(src, off + (i0 + i) * lds + k0, sd_lanes(nk))
                              : _mm512_setzero_pd();
            ex_tr8_pd(r);
            for (int k = 0; k < nk; k++) _mm512_mask_storeu_pd(d + (k0 + k) * w + i0, st, r[k]);
        }
    }
}

/* sg_pack_cols for f64: columns [0, n) of kc rows into micro-panels of w columns */
SG_AVX512 static void sd_pack_cols(sg_src src, int64_t off, int64_t lds, int64_t n, int64_t w,
                                   int64_t kc, double *d) {
    int64_t np = cdiv(n, w);
    for (int64_t k = 0; k < kc; k++) {
        for (int64_t j = 0; j < n; j += 8)
            _mm_prefetch(sg_at(src, off + (k + 8) * lds + j), _MM_HINT_T0);
        int64_t s = off + k * lds;
        for (int64_t q = 0; q < np; q++)
            for (int64_t j = 0; j < w; j += 8) {
                int64_t c = q * w + j;
                _mm512_mask_storeu_pd(d + (q * kc + k) * w + j, sd_lanes(w - j),
                                      sd_load(src, s + c, sd_lanes(n - c < 0 ? 0 : n - c)));
            }
    }
}

typedef struct sg_run {
    const ex_gemm *g;
    const gemm_view *va, *vb;
    sg_src sa, sb;   /* the operands as packed (A read in place only when f32) */
    int64_t es;      /* bytes per element of the GEMM: 4 (f32) or 8 (f64) */
    int mr, nr;      /* register block: 12 x 2 vectors or 24 x 1 (f32 16 lanes, f64 8) */
    int64_t np;      /* B panels of nr columns per batch element */
    int64_t b0, nbg; /* this group's batch elements [b0, b0 + nbg) */
    char *bp;        /* the group's packed B: [element][panel][k][nr], zero past N */
    char *tb;        /* per thread, apb bytes apart: 64 bytes holding the key of the rows of A
                        packed (sg_tasks), SG_MC2 x SG_KC1 elements of packed A, then with own_b
                        the element's packed B */
    size_t apb;
    bool own_b; /* each task one batch element, its B packed by its thread */
    bool pair;  /* bf16 pairs by vdpbf16ps (SG_PAIR): K, k are pairs; kel the elements of K */
    bool swap;  /* bf16 pairs widened (SG_SWAP): K, k are elements, each pair packed high first */
    int64_t kel;
    bool direct;            /* A read where it lies (whole micro-panels) instead of packed */
    int fix;                /* sg_fix on the last k block: an f32 product's finished sums */
    const ex_epilogue *epi; /* the output fusion, applied to each finished row block (or NULL) */
    atomic_int_least64_t *rowdone; /* with epi and cb > 1: tasks finished per row block */
    int64_t mc, rb;  /* rows per row block (at most sg_mcmax, a multiple of mr), row blocks */
    int64_t cb, pcb; /* column blocks (panels split evenly: sg_p0), the most panels in one */
    int64_t nkb, kc; /* k blocks, and k per block (the last may be shorter) */
    atomic_int
        *bstate;        /* shared B: per (element, column block, k block) of the group, whether
                           its slice of packed B is SG_B_UNPACKED, SG_B_BUSY (being packed), SG_B_DONE */
    char *ash;          /* shared A (or NULL): the group's packed A, [element][row block][k][mc] as
                           sg_pack_a writes a row block's k block (mc x kc at k0 * mc) */
    atomic_int *astate; /* shared A: per (element, row block, k block), as bstate */
} sg_run;

enum { SG_B_UNPACKED, SG_B_BUSY, SG_B_DONE };

/* SG_SWAP: a bf16 x bf16 product under FTZ (the reference's pairs chain, ACC_F32_PAIR: k + 1's
 * product added before k's, each step an fma flushed by FTZ, operands read through DAZ) as the
 * f32 GEMM over the elements widened as packed, each pair (k, k + 1), k even, in the order
 * k + 1, k (with K odd the last element alone), run under the FPU's FTZ | DAZ: the same fmas in
 * the same order as the pair kernels, so the same bits, at the f32 kernel's rate (no unpacking of
 * the pairs in the inner loop; twice the packed bytes). Element k of a block [0, kc) that starts
 * at an even k (blocks are SG_KC = 256 long) reads element sg_swap_k(k). */
static inline int64_t sg_swap_k(bool swap, int64_t k, int64_t kc) {
    return swap && (k ^ 1) < kc ? k ^ 1 : k;
}

/* Rows i < w of a row-major source (src, rows lds apart) over k [0, kc) into d as [k][w]
 * (d[k * w + i] = src[i * lds + k]), rows in [n, w) zero: the transposing pack of a row-major A
 * (w = mr) and of a transposed B (w = nr), 16 x 16 blocks through registers. */
SG_AVX512 static void sg_pack_rows(sg_src src, int64_t off, int64_t lds, int64_t n, int64_t w,
                                   int64_t kc, bool swap, float *d) {
    for (int64_t i0 = 0; i0 < w; i0 += 16) {
        int64_t nl = w - i0 < 16 ? w - i0 : 16, nv = n - i0 < 0 ? 0 : n - i0 < nl ? n - i0 : nl;
        __mmask16 st = sg_lanes(nl);
        for (int64_t k0 = 0; k0 < kc; k0 += 16) {
            int64_t nk = kc - k0 < 16 ? kc - k0 : 16;
            __mmask16 ld = sg_lanes(nk);
            __m512 r[16];
            /* 4 blocks ahead: these rows further on, or the next rows' start (the address is
             * computed as an integer: it may lie past the operand, and a prefetch never faults).
             * The loads below wait on memory otherwise: one thread's attention PV spent 23 % of
             * its time here, 4 % less CPU with this. */
            int64_t pk = k0 + 64, pr = i0;
            if (pk >= kc) {
                pk -= kc;
                pr += nl;
            }
            for (int i = 0; i < nl; i++)
                _mm_prefetch(sg_at(src, off + (pr + i) * lds + pk), _MM_HINT_T0);
            for (int i = 0; i < 16; i++)
                r[i] = i < nv ? sg_load(src, off + (i0 + i) * lds + k0, ld) : _mm512_setzero_ps();
            if (swap) { /* lanes 2p and 2p + 1 exchanged; with nk odd the last lane stays */
                __m512i ix = _mm512_xor_si512(
                    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                    _mm512_set1_epi32(1));
                if (nk & 1)
                    ix = _mm512_mask_set1_epi32(ix, (__mmask16)(1u << (nk - 1)), (int)nk - 1);
                for (int i = 0; i < nv; i++) r[i] = _mm512_permutexvar_ps(ix, r[i]);
            }
            ex_tr16_ps(r);
            for (int k = 0; k < nk; k++) _mm512_mask_storeu_ps(d + (k0 + k) * w + i0, st, r[k]);
        }
    }
}

/* Columns [0, n) of kc rows of a row-major source (src, rows lds apart) into micro-panels of w
 * columns, each [k][w] (panel q at d + q * kc * w), columns past n zero: the copying pack of a
 * transposed A. Row by row across the panels (one pass over each row's lines, not one per
 * panel), each row's lines prefetched 8 rows ahead: the rows lie lds apart, often 4 KiB or more,
 * where the hardware's prefetch does not follow. */
SG_AVX512 static void sg_pack_cols(sg_src src, int64_t off, int64_t lds, int64_t n, int64_t w,
                                   int64_t kc, bool swap, float *d) {
    int64_t np = cdiv(n, w), step = 64 / sg_es(src); /* elements per cache line */
    for (int64_t k = 0; k < kc; k++) {
        for (int64_t j = 0; j < n; j += step)
            _mm_prefetch(sg_at(src, off + (k + 8) * lds + j), _MM_HINT_T0);
        int64_t s = off + sg_swap_k(swap, k, kc) * lds;
        for (int64_t q = 0; q < np; q++)
            for (int64_t j = 0; j < w; j += 16) {
                int64_t c = q * w + j;
                _mm512_mask_storeu_ps(d + (q * kc + k) * w + j, sg_lanes(w - j),
                                      sg_load(src, s + c, sg_lanes(n - c < 0 ? 0 : n - c)));
            }
    }
}

/* ---- bf16 pairs (SG_PAIR) ----
 * A packed "float" holds the bf16 elements k = 2p (low half) and 2p + 1 (high half) of a row of A
 * or a column of B, in the f32 GEMM's places with p for k. With K odd the last pair's high half
 * is -0 (0x8000) in A and +0 in B: their product -0 leaves any sum as it is (x + -0 = x, -0
 * included), so the lone last element is added alone, as the reference adds it. */
#define SGP_PAD_A ((uint16_t)0x8000)
#define SGP_PAD_B ((uint16_t)0)

/* Rows i < n of a row-major bf16 source (src at element off, rows lds elements apart, kel
 * elements each), pairs [p0, p0 + pc), into d as [p][w] (d[p * w + i]), rows in [n, w) zero: a
 * row-major A (w = mr) and a transposed B (w = nr), 16 rows x 16 pairs through registers. */
SG_AVX512 static void sgp_pack_rows(const uint16_t *src, int64_t off, int64_t lds, int64_t n,
                                    int64_t w, int64_t p0, int64_t pc, int64_t kel, uint16_t pad,
                                    float *d) {
    for (int64_t i0 = 0; i0 < w; i0 += 16) {
        int64_t nl = w - i0 < 16 ? w - i0 : 16, nv = n - i0 < 0 ? 0 : n - i0 < nl ? n - i0 : nl;
        __mmask16 st = sg_lanes(nl);
        for (int64_t q0 = 0; q0 < pc; q0 += 16) {
            int64_t nk = pc - q0 < 16 ? pc - q0 : 16, e0 = 2 * (p0 + q0);
            int64_t ne = kel - e0 < 2 * nk ? kel - e0 : 2 * nk; /* elements present */
            __mmask32 ld = ne >= 32 ? (__mmask32)0xffffffffu : (((__mmask32)1 << ne) - 1);
            int64_t pk = e0 + 128, pr = i0; /* prefetch 4 blocks ahead, as sg_pack_rows */
            if (pk >= kel) {
                pk -= kel;
                pr += nl;
            }
            for (int i = 0; i < nl; i++) /* the address as an integer: it may lie past src */
                _mm_prefetch(
                    (const char *)((uintptr_t)src + (uintptr_t)((off + (pr + i) * lds + pk) * 2)),
                    _MM_HINT_T0);
            __m512 r[16];
            for (int i = 0; i < 16; i++) {
                __m512i v = _mm512_setzero_si512();
                if (i < nv) {
                    v = _mm512_maskz_loadu_epi16(ld, src + off + (i0 + i) * lds + e0);
                    if (ne < 2 * nk) /* K odd: the last pair's high half */
                        v = _mm512_mask_mov_epi16(v, (__mmask32)1 << ne,
                                                  _mm512_set1_epi16((short)pad));
                }
                r[i] = _mm512_castsi512_ps(v);
            }
            ex_tr16_ps(r);
            for (int k = 0; k < nk; k++) _mm512_mask_storeu_ps(d + (q0 + k) * w + i0, st, r[k]);
        }
    }
}

/* Columns [0, n) of a bf16 source whose rows are k (src at element off = row 0, rows lds elements
 * apart, kel rows), pairs [p0, p0 + pc), rows 2p and 2p + 1 interleaved into micro-panels of w
 * columns, each [p][w], panel q at d + q * ps, columns past n zero: a transposed A (ps = pc * w)
 * and a row-major B (ps = K pairs * nr). */
SG_AVX512 static void sgp_pack_cols(const uint16_t *src, int64_t off, int64_t lds, int64_t n,
                                    int64_t w, int64_t p0, int64_t pc, int64_t kel, uint16_t pad,
                                    float *d, int64_t ps) {
    int64_t np = cdiv(n, w);
    for (int64_t p = 0; p < pc; p++) {
        int64_t k = 2 * (p0 + p);
        bool lone = k + 1 >= kel;
        const uint16_t *r0 = src + off + k * lds, *r1 = lone ? r0 : r0 + lds;
        for (int64_t j = 0; j < n; j += 32) { /* the rows 4 pairs ahead (may lie past src) */
            uintptr_t ahead = (uintptr_t)src + (uintptr_t)((off + (k + 8) * lds + j) * 2);
            _mm_prefetch((const char *)ahead, _MM_HINT_T0);
            _mm_prefetch((const char *)(ahead + (uintptr_t)(lds * 2)), _MM_HINT_T0);
        }
        for (int64_t q = 0; q < np; q++)
            for (int64_t j = 0; j < w; j += 16) {
                int64_t c = q * w + j;
                __mmask16 m = sg_lanes(n - c < 0 ? 0 : n - c);
                __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r0 + c));
                __m512i hi = lone ? _mm512_set1_epi32(pad)
                                  : _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r1 + c));
                __m512i v = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
                _mm512_mask_storeu_ps(d + q * ps + p * w + j, sg_lanes(w - j),
                                      _mm512_castsi512_ps(v));
            }
    }
}

/* Panels [p0, p1) of batch element b's B, k [k0, k0 + kc), into their places in bp (the
 * element's packed B: panel p at bp + p * K * nr, [k][nr], zero past N). A row-major B is read
 * row by row across the panels: one stream of B instead of one per panel. */
SG_AVX512 static void sg_pack_b(const sg_run *r, int64_t b, int64_t p0, int64_t p1, int64_t k0,
                                int64_t kc, char *bpc) {
    const ex_gemm *g = r->g;
    int64_t K = g->K, N = g->N, nr = r->nr, ldb = r->vb->ld, off = view_offset(r->vb, b);
    if (g->t == OT_F64) {
        double *bp = (double *)bpc;
        if (g->tb) {
            for (int64_t p = p0; p < p1; p++) {
                int64_t j0 = p * nr, nj = N - j0 < nr ? N - j0 : nr;
                sd_pack_rows(r->sb, off + j0 * ldb + k0, ldb, nj, nr, kc,
                             bp + p * K * nr + k0 * nr);
            }
            return;
        }
        for (int64_t k = k0; k < k0 + kc; k++) {
            int64_t s = off + k * ldb;
            double *d = bp + p0 * K * nr + k * nr;
            for (int64_t j = p0 * nr; j < p1 * nr; j += 8) {
                _mm512_store_pd(d + j % nr, sd_load(r->sb, s + j, sd_lanes(N - j < 0 ? 0 : N - j)));
                if (j % nr == nr - 8) d += K * nr;
            }
        }
        return;
    }
    float *bp = (float *)bpc;
    if (r->pair) { /* k0, kc, K in pairs */
        const uint16_t *src = g->b;
        if (g->tb) {
            for (int64_t p = p0; p < p1; p++) {
                int64_t j0 = p * nr, nj = N - j0 < nr ? N - j0 : nr;
                sgp_pack_rows(src, off + j0 * ldb, ldb, nj, nr, k0, kc, r->kel, SGP_PAD_B,
                              bp + p * K * nr + k0 * nr);
            }
        } else {
            int64_t c1 = p1 * nr < N ? p1 * nr : N;
            sgp_pack_cols(src, off + p0 * nr, ldb, c1 - p0 * nr, nr, k0, kc, r->kel, SGP_PAD_B,
                          bp + p0 * K * nr + k0 * nr, K * nr);
        }
        return;
    }
    if (g->tb) {
        for (int64_t p = p0; p < p1; p++) {
            int64_t j0 = p * nr, nj = N - j0 < nr ? N - j0 : nr;
            sg_pack_rows(r->sb, off + j0 * ldb + k0, ldb, nj, nr, kc, r->swap,
                         bp + p * K * nr + k0 * nr);
        }
        return;
    }
    for (int64_t k = k0; k < k0 + kc; k++) {
        int64_t s = off + sg_swap_k(r->swap, k, K) * ldb;
        float *d = bp + p0 * K * nr + k * nr;
        for (int64_t j = p0 * nr; j < p1 * nr; j += 16) {
            _mm512_store_ps(d + j % nr, sg_load(r->sb, s + j, sg_lanes(N - j < 0 ? 0 : N - j)));
            if (j % nr == nr - 16) d += K * nr;
        }
    }
}

/* rows [i0, i0 + mi) x k [k0, k0 + kc) of A (the batch element's at element aoff) into
 * micro-panels of mr rows, each [k][mr], rows past mi zero */
static void sg_pack_a(const sg_run *r, int64_t aoff, char *ap, int64_t i0, int64_t mi, int64_t k0,
                      int64_t kc) {
    int64_t lda = r->va->ld, mr = r->mr;
    bool f64 = r->g->t == OT_F64;
    if (r->pair) { /* k0, kc in pairs */
        const uint16_t *src = r->g->a;
        if (r->g->ta) {
            sgp_pack_cols(src, aoff + i0, lda, mi, mr, k0, kc, r->kel, SGP_PAD_A, (float *)ap,
                          kc * mr);
            return;
        }
        for (int64_t q = 0; q < mi; q += mr) {
            int64_t nq = mi - q < mr ? mi - q : mr;
            sgp_pack_rows(src, aoff + (i0 + q) * lda, lda, nq, mr, k0, kc, r->kel, SGP_PAD_A,
                          (float *)ap + q * kc);
        }
        return;
    }
    if (r->g->ta) { /* row k of A^T across the micro-panels: one stream instead of one per panel */
        if (f64)
            sd_pack_cols(r->sa, aoff + k0 * lda + i0, lda, mi, mr, kc, (double *)ap);
        else
            sg_pack_cols(r->sa, aoff + k0 * lda + i0, lda, mi, mr, kc, r->swap, (float *)ap);
        return;
    }
    for (int64_t q = 0; q < mi; q += mr) {
        int64_t nq = mi - q < mr ? mi - q : mr;
        if (f64)
            sd_pack_rows(r->sa, aoff + (i0 + q) * lda + k0, lda, nq, mr, kc, (double *)ap + q * kc);
        else
            sg_pack_rows(r->sa, aoff + (i0 + q) * lda + k0, lda, nq, mr, kc, r->swap,
                         (float *)ap + q * kc);
    }
}

/* The first panel of column block q: the np panels split into cb blocks whose sizes differ by at
 * most one (rounding each block up to cdiv(np, cb) panels left the RNN step's 9 panels in 3
 * tasks of 3, 3 and 2 + 1 column: two threads at 0.8 of an even share). */
static inline int64_t sg_p0(const sg_run *r, int64_t q) {
    return q * r->np / r->cb;
}

/* Shared B: the slice (column block q, k [k0, k0 + kc)) of batch element b's packed B (at bp),
 * packed by the first task that needs it; a task that finds another thread packing it waits
 * (spinning briefly, then yielding the CPU). Each slice is packed once, so its bits do not depend
 * on which thread packs it. */
static void sg_need_b(const sg_run *r, int64_t b, int64_t q, int64_t k0, int64_t kc, char *bp) {
    atomic_int *st = &r->bstate[((b - r->b0) * r->cb + q) * r->nkb + k0 / r->kc];
    int s = atomic_load_explicit(st, memory_order_acquire);
    if (s == SG_B_DONE) return;
    if (s == SG_B_UNPACKED && atomic_compare_exchange_strong(st, &s, SG_B_BUSY)) {
        sg_pack_b(r, b, sg_p0(r, q), sg_p0(r, q + 1), k0, kc, bp);
        atomic_store_explicit(st, SG_B_DONE, memory_order_release);
        return;
    }
    for (int spin = 0; atomic_load_explicit(st, memory_order_acquire) != SG_B_DONE; spin++) {
        if (spin < 4096)
            _mm_pause();
        else
            sched_yield();
    }
}

/* Shared A: the packed slice (row block rr, k [k0, k0 + kc)) of batch element b, packed by the
 * first task that needs it, as sg_need_b packs B. A task claims it before it needs its B slice and
 * waits for it after: two tasks on the same rows (different column blocks) start together, and
 * the one that finds A being packed packs its own B meanwhile. */
static char *sg_ash(const sg_run *r, int64_t b, int64_t rr, int64_t k0) {
    return r->ash + (((b - r->b0) * r->rb + rr) * r->mc * r->g->K + k0 * r->mc) * r->es;
}

static atomic_int *sg_astate(const sg_run *r, int64_t b, int64_t rr, int64_t k0) {
    return &r->astate[((b - r->b0) * r->rb + rr) * r->nkb + k0 / r->kc];
}

/* Claims the slice: true when this task is to pack it (its state now SG_B_BUSY) */
static bool sg_claim_a(const sg_run *r, int64_t b, int64_t rr, int64_t k0) {
    atomic_int *st = sg_astate(r, b, rr, k0);
    int s = atomic_load_explicit(st, memory_order_acquire);
    return s == SG_B_UNPACKED && atomic_compare_exchange_strong(st, &s, SG_B_BUSY);
}

static void sg_wait_a(const sg_run *r, int64_t b, int64_t rr, int64_t k0) {
    atomic_int *st = sg_astate(r, b, rr, k0);
    for (int spin = 0; atomic_load_explicit(st, memory_order_acquire) != SG_B_DONE; spin++) {
        if (spin < 4096)
            _mm_pause();
        else
            sched_yield();
    }
}

/* Whether rows [m0, m0 + mi) x k [k0, k0 + kc) of batch element b's transposed f32 A ([K, M],
 * rows va->ld apart) hold no subnormal: then reading them in place (r->direct) gives what packing
 * them with daz would. A task reads each k block just before it multiplies it (into cache): one
 * classification per 16 elements against N / 16 multiply-adds per element. */
SG_AVX512 static bool sg_rows_normal(const sg_run *r, int64_t b, int64_t m0, int64_t mi, int64_t k0,
                                     int64_t kc) {
    const float *a = (const float *)r->g->a + view_offset(r->va, b) + m0;
    __mmask16 any = 0;
    for (int64_t k = k0; k < k0 + kc; k++) {
        const float *row = a + k * r->va->ld;
        for (int64_t i = 0; i < mi; i += 16) /* class 0x20: subnormal */
            any |= _mm512_fpclass_ps_mask(_mm512_maskz_loadu_ps(sg_lanes(mi - i), row + i), 0x20);
    }
    return !any;
}

/* One task: rows [m0, m1) (at most sg_mcmax) of C x B panels [p0, p1) of batch element b, whose
 * packed B is at bp (cq >= 0: a shared B, the panels column block cq, each slice packed on first
 * need; else packed beforehand). A is packed a k block at a time (not at all when apk: one k
 * block, its rows already packed at ap by this thread's last task), or with r->direct (a transposed
 * A, tasks of few panels: they would spend about as long packing their rows as multiplying them)
 * read where it lies; a last micro-panel of fewer than mr rows is always packed (zero rows below
 * it). */
static void sg_block(const sg_run *r, int64_t b, char *bp, int64_t m0, int64_t m1, int64_t p0,
                     int64_t p1, int64_t cq, char *ap, bool apk) {
    const ex_gemm *g = r->g;
    int64_t K = g->K, N = g->N, mr = r->mr, nr = r->nr, lda = r->va->ld, mi = m1 - m0, es = r->es;
    int64_t full = mi / mr * mr; /* rows in whole micro-panels */
    int64_t aoff = view_offset(r->va, b);
    char *cb = (char *)g->c + b * g->M * N * es;
    for (int64_t k0 = 0; k0 < K; k0 += r->kc) {
        int64_t kc = K - k0 < r->kc ? K - k0 : r->kc;
        /* under FTZ a transposed A is read in place only where it holds no subnormal (the GEMM
         * runs without DAZ; the packing flushes them): either way the same values */
        bool direct = r->direct && (!r->sa.daz || sg_rows_normal(r, b, m0, full, k0, kc));
        if (r->ash) { /* shared A (never with direct) */
            int64_t rr = m0 / r->mc;
            ap = sg_ash(r, b, rr, k0);
            bool mine = sg_claim_a(r, b, rr, k0);
            if (mine) {
                sg_pack_a(r, aoff, ap, m0, mi, k0, kc);
                atomic_store_explicit(sg_astate(r, b, rr, k0), SG_B_DONE, memory_order_release);
            }
            if (cq >= 0) sg_need_b(r, b, cq, k0, kc, bp);
            if (!mine) sg_wait_a(r, b, rr, k0);
        } else if (cq >= 0)
            sg_need_b(r, b, cq, k0, kc, bp);
        if (r->ash || apk) {
            /* the rows this thread's last task packed: one k block, the same rows */
        } else if (!direct)
            sg_pack_a(r, aoff, ap, m0, mi, k0, kc);
        else if (full < mi) /* the short micro-panel, at its place in a packed block */
            sg_pack_a(r, aoff, ap + full * kc * es, m0 + full, mi - full, k0, kc);
        /* SG_SWAP's f32 fmas flush as vdpbf16ps with the FPU's FTZ | DAZ (packing reads no
         * float arithmetic; the output fusion runs after the mode is restored) */
        bool hw = r->swap;
        unsigned csr = hw ? ex_hw_ftz_on() : 0;
        for (int64_t p = p0; p < p1; p++) {
            int64_t j0 = p * nr, nj = N - j0 < nr ? N - j0 : nr;
            const char *bk = bp + (p * K * nr + k0 * nr) * es;
            for (int64_t q = 0; q < mi; q += mr) {
                int64_t nq = mi - q < mr ? mi - q : mr;
                const char *x = ap + q * kc * es; /* packed: A(i, k) at x[i + k * mr] */
                int64_t ld = mr;
                if (direct && nq == mr) { /* transposed A in place: A(i, k) at x[i + k * lda] */
                    x = (const char *)g->a + (aoff + k0 * lda + m0 + q) * es;
                    ld = lda;
                }
                char *cq0 = cb + ((m0 + q) * N + j0) * es;
                if (es == 8)
                    sd_ukr(kc, (const double *)x, ld, (const double *)bk, nr, (double *)cq0, N,
                           k0 > 0, nq, nj, k0 + kc == K ? r->fix : SG_FIX_NONE);
                else
                    sg_ukr(kc, (const float *)x, ld, (const float *)bk, nr, (float *)cq0, N, k0 > 0,
                           nq, nj, k0 + kc == K ? r->fix : SG_FIX_NONE, r->pair);
            }
        }
        if (hw) ex_hw_ftz_off(csr);
    }
}

/* The output fusion over rows [m0, m1) of element b, whole rows just finished. */
static void sg_epilogue(const sg_run *r, int64_t b, int64_t m0, int64_t m1) {
    const ex_gemm *g = r->g;
    int64_t base = b * g->M * g->N;
    r->epi->fn(r->epi->ctx, base + m0 * g->N, base + m1 * g->N);
}

/* Shared B (own_b false): task w is a block of rows x a block of panels of element
 * b0 + w / (rb * cb), its slices of B packed on first need (sg_need_b). own_b: task w is element b0
 * + w whole, its B packed into this thread's buffer first (many small products: no pass between).
 */
static void sg_tasks(void *arg, int64_t begin, int64_t end, int ith) {
    const sg_run *r = arg;
    const ex_gemm *g = r->g;
    char *tb = r->tb + (size_t)ith * r->apb;
    int64_t *akey = (int64_t *)tb; /* which rows ap holds (element x row block), or -1 */
    char *ap = tb + 64;
    /* the caller's MXCSR: no FTZ/DAZ asked of the GEMM (its partial sums underflow gradually, as
     * the reference's; operands are flushed as packed, sums as stored or by half_finish) */
    for (int64_t w = begin; w < end; w++) {
        if (r->own_b) {
            char *bp = tb + 64 + ex_align64((size_t)(SG_MC2 * SG_KC1 * r->es));
            sg_pack_b(r, r->b0 + w, 0, r->np, 0, g->K, bp);
            for (int64_t m0 = 0; m0 < g->M; m0 += r->mc) {
                int64_t m1 = m0 + r->mc < g->M ? m0 + r->mc : g->M;
                sg_block(r, r->b0 + w, bp, m0, m1, 0, r->np, -1, ap, false);
                if (r->epi) sg_epilogue(r, r->b0 + w, m0, m1);
            }
            continue;
        }
        int64_t b = w / (r->rb * r->cb), rr = w / r->cb % r->rb, q = w % r->cb;
        int64_t m0 = rr * r->mc, m1 = m0 + r->mc < g->M ? m0 + r->mc : g->M;
        int64_t p0 = sg_p0(r, q), p1 = sg_p0(r, q + 1);
        if (p0 >= p1) continue;
        int64_t key = b * r->rb + rr;
        sg_block(r, r->b0 + b, r->bp + b * r->np * g->K * r->nr * r->es, m0, m1, p0, p1, q, ap,
                 r->nkb == 1 && *akey == key);
        *akey = key;
        /* the output fusion runs on whole rows: the last of the row block's cb tasks to finish
         * runs it (its own columns still in cache) */
        if (r->epi && (r->cb == 1 || atomic_fetch_add(&r->rowdone[b * r->rb + rr], 1) == r->cb - 1))
            sg_epilogue(r, r->b0 + b, m0, m1);
    }
}

/* Where this kernel runs: f32 products of at least one register block of rows. A narrow N
 * (<= 16) with a row-major A stays with OpenBLAS: packing A's rows costs about as much as the
 * few columns' multiply-adds there (512 x 10 x 1024 on one thread, vectorized packing: 41-44
 * against 65-68 GFLOP/s for OpenBLAS on the tile grid); with a transposed A, read in place, it
 * runs here. Narrower products (M < 12, N < 8: matrix x vector, vector x matrix) ran here at 0.1
 * to 0.5 of the tile grid (bench_dot's "narrow" cases, 2 threads), so they stay with OpenBLAS
 * too, whose sums differ from the reference's (the file's head). */
static bool sg_use(const ex_gemm *g) {
    return g->t == OT_F32 && g->M >= 12 && g->N >= 8 && g->K >= 1 && (g->N > 16 || g->ta) &&
           ex_avx512();
}

/* Where the f64 kernels run: products of at least one register block of rows and more than one
 * vector (8) of columns, whose fma chains are the reference's sums bit for bit. Narrower ones
 * (matrix x vector, vector x matrix, N <= 8) stay with OpenBLAS on the tile grid (bits of its
 * own, still independent of the thread count): there the own GEMM spends more on packing and
 * idle lanes than on multiply-adds (one thread, CPU time, against the tile grid: 300 x 1 x 270 at
 * 0.27x, 1 x 300 x 270 at 0.34x, 1000 x 8 x 333 at 0.6x). K = 0 (zeros) goes to gemm_tiles. */
static bool sd_use(const ex_gemm *g) {
    return g->t == OT_F64 && g->M >= 12 && g->N > 8 && g->K >= 1 && ex_avx512();
}

/* panel width: f32 one vector of columns (16) when N fits in it, else two; f64 (N > 8) two */
static int sg_nr(const ex_gemm *g) {
    if (g->t == OT_F64) return 16;
    return g->N <= 16 ? 16 : 32;
}

/* packed B of one batch element, bytes */
static int64_t sg_bpack(const ex_gemm *g) {
    int64_t nr = sg_nr(g);
    return cdiv(g->N, nr) * nr * g->K * (int64_t)ot_dtype_size(g->t);
}

/* Each thread packs whole batch elements' B itself when there are at least 2 per thread and
 * each is small (no shared pass, no waiting between passes) */
static bool sg_own_b(const ex_gemm *g, int threads) {
    return g->nb >= 2 * (int64_t)threads && sg_bpack(g) <= ((int64_t)1 << 20);
}

/* batch elements whose packed B is held at once (shared B) */
static int64_t sg_group(const ex_gemm *g) {
    int64_t gb = SG_BPACK / sg_bpack(g);
    return gb < 1 ? 1 : gb > g->nb ? g->nb : gb;
}

/* k per block (the last block may be shorter), and the blocks */
static int64_t sg_kc(const ex_gemm *g) {
    return g->K <= SG_KC1 ? g->K : SG_KC;
}

static int64_t sg_nkb(const ex_gemm *g) {
    return cdiv(g->K, sg_kc(g));
}

/* per-thread scratch: the key of the rows packed, packed A, and with own_b the element's
 * packed B */
static size_t sg_thread_bytes(const ex_gemm *g, int threads) {
    return 64 + ex_align64((size_t)SG_MC2 * SG_KC1 * ot_dtype_size(g->t)) +
           (sg_own_b(g, threads) ? ex_align64((size_t)sg_bpack(g)) : 0);
}

/* Rows per row block at most: SG_MC2 for one f32 product (no batch) with a row-major A of more
 * than SG_MC2 rows, at least 512 columns and several k blocks, else SG_MC. Fewer rows left too
 * few tasks (129 x 333 x 1000 at 0.78 against 0.83 of OpenBLAS), and 1024 x 256 x 1024 (8
 * panels) ran at 0.90 against 0.97 (bench_dot, two threads, CPUs held).
 * There A's rows are packed by a transposing pack, once and shared (sg_share_a), and each packed
 * B panel streamed from L2 / L3 is used by twice as many register blocks: 512 x 1024 x 1024 on
 * two threads 3.97 -> 3.72 ms (min of 30 runs, median of 5 alternating runs, CPUs held). A
 * transposed A (copied as packed, per task) ran slower with 192 rows: 1024 x 1024 x 512,
 * 3.54 -> 3.87 ms. */
static int64_t sg_mcmax(const ex_gemm *g) {
    bool f32 = g->t == OT_F32 && g->ad == OT_F32 && g->bd == OT_F32;
    bool big = g->M > SG_MC2 && g->N >= 512 && g->K > SG_KC1;
    return f32 && !g->ta && g->nb == 1 && big ? SG_MC2 : SG_MC;
}

/* Rows per row block: M in cdiv(M, sg_mcmax) blocks of about equal size, each rounded up to whole
 * register blocks (mr rows; 24 for f32 with N <= 16, else 12): 129 rows are 72 + 57, not
 * 96 + 33, whose two tasks left one thread idle a third of the time. */
static int64_t sg_mc(const ex_gemm *g) {
    int64_t mr = g->t == OT_F32 && sg_nr(g) == 16 ? 24 : 12, rb = cdiv(g->M, sg_mcmax(g));
    int64_t mc = cdiv(cdiv(g->M, rb), mr) * mr;
    return mc > sg_mcmax(g) ? sg_mcmax(g) : mc;
}

/* column blocks of a shared B: at most one per 2 panels */
static int64_t sg_max_cb(const ex_gemm *g) {
    int64_t np = cdiv(g->N, sg_nr(g));
    return np / 2 > 1 ? np / 2 : 1;
}

/* the output fusion's counters of finished tasks, one per row block of a group */
static size_t sg_rowdone_bytes(const ex_gemm *g) {
    return ex_align64((size_t)(sg_group(g) * cdiv(g->M, sg_mcmax(g))) *
                      sizeof(atomic_int_least64_t));
}

static size_t sg_bstate_bytes(const ex_gemm *g) {
    return ex_align64((size_t)(sg_group(g) * sg_max_cb(g) * sg_nkb(g)) * sizeof(atomic_int));
}

/* the counters: the output fusion's, the shared B's slice states, the shared A's */
static size_t sg_counter_bytes(const ex_gemm *g) {
    size_t aslices = (size_t)(sg_group(g) * cdiv(g->M, sg_mcmax(g)) * sg_nkb(g));
    return sg_rowdone_bytes(g) + sg_bstate_bytes(g) + ex_align64(aslices * sizeof(atomic_int));
}

/* packed A of one batch element (whole row blocks), bytes */
static int64_t sg_apack(const ex_gemm *g) {
    int64_t mc = sg_mc(g);
    return cdiv(g->M, mc) * mc * g->K * (int64_t)ot_dtype_size(g->t);
}

/* Whether A may be packed once and shared by the tasks (sg_claim_a) instead of per task: one f32
 * product's row-major A (sg_mcmax; its transposing pack costs about as much as a tenth of the
 * multiply-adds) beside a shared B, the group's packed A at most SG_APACK. sg_gemm shares it when
 * the rows are cut into column blocks, each of which would pack them again: 512 x 1024 x 1024 on
 * two threads had its A packed 6 times. A transposed A is copied as packed, cheaply: shared, 1024 x
 * 1024 x 512 ran at 3.83 against 3.54 ms packed per task. */
static bool sg_share_a(const ex_gemm *g, int threads) {
    return sg_mcmax(g) == SG_MC2 && !sg_own_b(g, threads) && sg_group(g) * sg_apack(g) <= SG_APACK;
}

static size_t sg_ashared_bytes(const ex_gemm *g, int threads) {
    return sg_share_a(g, threads) ? ex_align64((size_t)(sg_group(g) * sg_apack(g))) : 0;
}

/* the shared packed B: the group's elements (0 with own_b) */
static size_t sg_shared_bytes(const ex_gemm *g, int threads) {
    return sg_own_b(g, threads) ? 0 : ex_align64((size_t)(sg_group(g) * sg_bpack(g)));
}

/* kept: the shared packed B lives elsewhere (a loop's copy, sg_gemm's bkeep) */
static size_t sg_scratch_bytes(const ex_gemm *g, int threads, bool kept) {
    return (kept ? 0 : sg_shared_bytes(g, threads)) + sg_counter_bytes(g) +
           sg_ashared_bytes(g, threads) + (size_t)threads * sg_thread_bytes(g, threads);
}

/* Column blocks of a shared B for a group of nbg batch elements: about 8 tasks per thread
 * (handed out dynamically: even shares on a shared machine), each at least 2 panels wide. */
static int64_t sg_cb(const ex_gemm *g, int64_t nbg, int threads) {
    int64_t cb = 1, want = 8 * (int64_t)threads, maxcb = sg_max_cb(g), rb = cdiv(g->M, sg_mc(g));
    if (nbg * rb < want) cb = cdiv(want, nbg * rb);
    return cb > maxcb ? maxcb : cb;
}

/* The tasks of the first pass over the pool (one batch group) */
static int64_t sg_first_tasks(const ex_gemm *g, int threads) {
    if (sg_own_b(g, threads)) return g->nb;
    int64_t gb = sg_group(g), nbg = g->nb < gb ? g->nb : gb;
    return nbg * cdiv(g->M, sg_mc(g)) * sg_cb(g, nbg, threads);
}

/* scratch: sg_scratch_bytes(g, threads, bkeep != NULL), threads >= the pool's threads that will
 * run it */
/* kel > 0: bf16 pairs by vdpbf16ps (SG_PAIR): g->K is the pairs, kel the elements; swap: bf16
 * pairs widened (SG_SWAP), g->K the elements */
/* bkeep (NULL: none): where the shared packed B of the whole product (one group) is kept between
 * calls with the same B (a loop's invariant operand, ex_loop_buffer): packed there when it is not
 * ready, else read as it is (every slice already done) */
static void sg_gemm(ex_kernel_ctx *c, const ex_gemm *g, const gemm_view *va, const gemm_view *vb,
                    char *scratch, int threads, int64_t kel, bool swap, ex_loop_entry *bkeep) {
    sg_run r = {.g = g,
                .pair = kel > 0,
                .swap = swap,
                .kel = kel,
                .va = va,
                .vb = vb,
                .sa = {g->a, g->ad, c->ftz},
                .sb = {g->b, g->bd, c->ftz},
                .es = (int64_t)ot_dtype_size(g->t),
                .nr = sg_nr(g),
                .own_b = sg_own_b(g, threads),
                .epi = c->epilogue};
    /* f32 and f64 operands: the sums finished in registers (16-bit operands: half_finish) */
    if ((g->t == OT_F32 && g->ad == OT_F32 && g->bd == OT_F32) || g->t == OT_F64)
        r.fix = c->ftz ? SG_FIX_FTZ : SG_FIX_NAN;
    r.mr = r.nr * r.es == 128 ? 12 : 24; /* two vectors of columns: 12 rows, else 24 */
    r.np = cdiv(g->N, r.nr);
    r.apb = sg_thread_bytes(g, threads);
    int64_t gb = r.own_b ? g->nb : sg_group(g);
    size_t shared = bkeep ? 0 : sg_shared_bytes(g, threads);
    r.bp = bkeep ? bkeep->buf : scratch;
    r.rowdone = (atomic_int_least64_t *)(scratch + shared);
    r.bstate = (atomic_int *)(scratch + shared + sg_rowdone_bytes(g));
    r.astate = (atomic_int *)(scratch + shared + sg_rowdone_bytes(g) + sg_bstate_bytes(g));
    char *ash = scratch + shared + sg_counter_bytes(g);
    bool share_a = sg_share_a(g, threads);
    r.nkb = sg_nkb(g);
    r.kc = sg_kc(g);
    r.tb = ash + sg_ashared_bytes(g, threads);
    r.mc = sg_mc(g);
    r.rb = cdiv(g->M, r.mc);
    /* a transposed f32 A may be read where it lies (under FTZ only where it holds no subnormal:
     * sg_block) */
    bool ta32 = g->ta && g->ad == OT_F32;
    for (r.b0 = 0; r.b0 < g->nb; r.b0 += gb) {
        r.nbg = g->nb - r.b0 < gb ? g->nb - r.b0 : gb;
        int64_t work = r.nbg * g->M * g->N * g->K;
        for (int t = 0; t < threads; t++) *(int64_t *)(r.tb + (size_t)t * r.apb) = -1;
        if (r.own_b) {
            r.direct = ta32 && r.np <= SG_DIRECT;
            ex_par_for_dynamic(c, r.nbg, work * 4, sg_tasks, &r);
            continue;
        }
        /* about 8 tasks per thread (handed out dynamically: even shares on a shared machine),
         * each at least 2 panels wide: the more columns a task spans, the fewer times its rows
         * of A are packed */
        int64_t cb = sg_cb(g, r.nbg, threads);
        r.cb = cb;
        r.pcb = cdiv(r.np, cb);
        r.direct = ta32 && r.pcb <= SG_DIRECT;
        r.ash = share_a && cb > 1 && !r.direct ? ash : NULL;
        if (r.ash)
            for (int64_t q = 0; q < r.nbg * r.rb * r.nkb; q++)
                atomic_init(&r.astate[q], SG_B_UNPACKED);
        if (r.epi && r.cb > 1)
            for (int64_t q = 0; q < r.nbg * r.rb; q++) atomic_init(&r.rowdone[q], 0);
        int b0 = bkeep && bkeep->ready ? SG_B_DONE : SG_B_UNPACKED;
        for (int64_t q = 0; q < r.nbg * r.cb * r.nkb; q++) atomic_init(&r.bstate[q], b0);
        /* one pass over the pool: B is packed by the tasks, slice by slice as they need it (the
         * first tasks take different column blocks, so the threads pack different slices) */
        ex_par_for_dynamic(c, r.nbg * r.rb * r.cb, work * 4, sg_tasks, &r);
    }
    if (bkeep) bkeep->ready = true; /* every task has packed or found each slice it needs */
}

/* ---- 16-bit float operands (bf16, f16) -------------------------------------------------------
 * A dot of bf16 or f16 operands (either, mixed) into f32, bf16 or f16 runs the own f32 GEMM, the
 * operands widened to f32 by its packing as they are packed (sg_load: exact; under FTZ a
 * subnormal bf16 reads as zero, as the reference's widening does; every f16 value is a normal
 * f32), no widened copy. The product of two such values has at most 22 significant bits, so the
 * GEMM's fma chain over k adds each exact product with one rounding: the reference's ACC_F32_FMA
 * chain (src/exec/linalg.c), bit for bit, provided the partial sums underflow gradually as in the
 * reference — the GEMM runs without FTZ/DAZ (ftz false) and the finished f32 sums are flushed
 * afterwards, with a NaN made the canonical quiet NaN, then rounded to the result dtype
 * (half_finish). That pass runs on each finished block of rows through the GEMM's output-fusion
 * hook, before the fused loop's own (if any). bf16 x bf16 under FTZ is the reference's pairs
 * chain instead (ACC_F32_PAIR): the GEMM packs pairs of k (SG_PAIR, sgp_*) and runs vdpbf16ps,
 * two products per lane and instruction, or (SG_SWAP: the faster here, and without AVX512_BF16)
 * packs the elements widened, each pair's k + 1 first, and runs the f32 kernel under the FPU's
 * FTZ | DAZ; half_finish then only makes NaNs canonical and rounds. */
static bool half_float(ot_dtype t) {
    return t == OT_BF16 || t == OT_F16;
}

static bool half_dot_dtype(ot_dtype a, ot_dtype b, ot_dtype o) {
    return half_float(a) && half_float(b) && (o == OT_F32 || half_float(o));
}

/* bf16 x bf16 under FTZ: the reference's pairs (src/exec/linalg.c ACC_F32_PAIR) */
static bool sg_pair_dot(ot_dtype a, ot_dtype b, bool ftz) {
    return ftz && a == OT_BF16 && b == OT_BF16;
}

/* ---- 8-bit integer operands (quantized products: int8 x int8 -> int32) ----------------------
 * Where the process runs AMX (ex_amx_int8) every such dot within int32's bound runs on tiles
 * instead (fast_dot_amx.c). s8 x s8 on a CPU with AVX512_VNNI runs its own kernel (qd_gemm,
 * below); other s8 / u8 operands into s32 or s64 run the own f32 GEMM, widened by its packing
 * (sg_load).
 * Every product is an integer of magnitude at most 2^14 (s8 x s8; 2^15 mixed, 2^16 u8 x u8), so
 * while K times that stays at most 2^24 every partial sum of the fma chain is an integer f32
 * holds exactly: the finished sum is the exact sum, which the reference's 64-bit integer
 * accumulation also gives (no wrap below 2^63), converted to the result (half_finish). Longer
 * contractions stay with the reference. */
static int64_t int8_dot_bound(ot_dtype a, ot_dtype b) {
    int64_t ma = a == OT_S8 ? 128 : 255, mb = b == OT_S8 ? 128 : 255; /* largest magnitudes */
    return ((int64_t)1 << 24) / (ma * mb);
}

static bool int8_dot_dtype(ot_dtype a, ot_dtype b, ot_dtype o, int64_t K) {
    return (a == OT_S8 || a == OT_U8) && (b == OT_S8 || b == OT_U8) &&
           (o == OT_S32 || o == OT_S64) && K <= int8_dot_bound(a, b);
}

/* The finishing pass over the GEMM's f32 sums (an output-fusion hook: elements [b, e) of the
 * result, row-major, right after the GEMM finished them): flushed under FTZ, a NaN made the
 * canonical quiet NaN, rounded to the result dtype (nearest even: ot_f32_to_bf16 and
 * ot_f32_to_f16, which give what the reference's store gives for an f32 value), then the fused
 * loop's own hook (next) on the same elements. */
typedef struct half_fin {
    const float *acc; /* the GEMM's sums; for an f32 result, the result itself */
    void *out;
    ot_dtype t;
    bool ftz;
    const ex_epilogue *next;
} half_fin;

/* f16 results of half_finish: each sum flushed (keep), a NaN made canonical, rounded by
 * core/half.h's branch-free narrowing — a loop the compiler vectorizes, where a call per element
 * had taken as long as a tenth of the GEMM (f16 4096 x 768 x 256). */
static inline __attribute__((always_inline)) void
half_round_f16_body(const uint32_t *a, uint16_t *p, int64_t b, int64_t e, uint32_t keep) {
    for (int64_t i = b; i < e; i++) {
        uint32_t u = a[i] & ((a[i] & 0x7f800000u) ? 0xffffffffu : keep);
        u = (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : u;
        float v;
        memcpy(&v, &u, 4);
        p[i] = ot_half_from_f32(v);
    }
}
static void half_round_f16(const uint32_t *a, uint16_t *p, int64_t b, int64_t e, uint32_t keep) {
    half_round_f16_body(a, p, b, e, keep);
}
SG_AVX512 static void half_round_f16_avx512(const uint32_t *a, uint16_t *p, int64_t b, int64_t e,
                                            uint32_t keep) {
    half_round_f16_body(a, p, b, e, keep);
}

static void half_finish(const void *ctx, int64_t b, int64_t e) {
    const half_fin *h = ctx;
    const uint32_t *a = (const uint32_t *)h->acc;
    uint32_t keep = h->ftz ? 0x80000000u : 0xffffffffu; /* what a zero exponent field keeps */
    if (h->t == OT_S32 || h->t == OT_S64) { /* integer sums, exact in f32 (int8_dot_bound) */
        const float *f = h->acc;
        if (h->t == OT_S32)
            for (int64_t i = b; i < e; i++) ((int32_t *)h->out)[i] = (int32_t)f[i];
        else
            for (int64_t i = b; i < e; i++) ((int64_t *)h->out)[i] = (int64_t)f[i];
    } else if (h->t == OT_F32) {
        uint32_t *p = h->out;
        for (int64_t i = b; i < e; i++) {
            uint32_t u = a[i] & ((a[i] & 0x7f800000u) ? 0xffffffffu : keep);
            p[i] = (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : u;
        }
    } else if (h->t == OT_BF16) { /* the canonical NaN rounds to 0x7fc0 like any value */
        uint16_t *p = h->out;
        for (int64_t i = b; i < e; i++) {
            uint32_t u = a[i] & ((a[i] & 0x7f800000u) ? 0xffffffffu : keep);
            u = (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : u;
            p[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        }
    } else if (ex_avx512()) {
        half_round_f16_avx512(a, h->out, b, e, keep);
    } else {
        half_round_f16(a, h->out, b, e, keep);
    }
    if (h->next) h->next->fn(h->next->ctx, b, e);
}

/* ---- vector x matrix (f32: M = 1, or N = 1 with a transposed A) -------------------------------
 * A product with one row (x @ B, B [K, N]) or one column of a transposed A (A^T x, A stored
 * [K, M]) reads its matrix once, each of the matrix's K rows holding the results' elements side
 * by side: SV_V vectors of 16 results take one row of k at a time, one fma each, nothing packed.
 * Each element of the result is the reference's chain (fma over k in order from 0; under FTZ the
 * operands read as flushed, sg_load, and the finished sum fixed by sg_fix), bit for bit, as the
 * own GEMM's, where OpenBLAS's gemv sums in an order of its own. The other skinny form (A x with
 * A [M, K]: each result's k side by side) runs ex_gemv_rows (fast_gemv.c) in an order of its own
 * (f32, one batch element; else OpenBLAS): keeping the reference's order there takes a 16 x 16
 * register transpose per 16 k of 16 results, measured at 0.3-0.5 of OpenBLAS's speed (1024 x
 * 1024, one thread, CPU time). The vector is first copied contiguous
 * (flushed under FTZ). Tasks: batch elements x blocks of 16 SV_V results; a matrix under
 * GEMV_SPLIT_BYTES runs on the calling thread (why: gemm_grid). */
#define SV_V 8 /* vectors of results per task */

typedef struct sv_run {
    const float *m; /* the matrix of batch element 0 */
    const gemm_view *vm;
    int64_t ld;       /* the matrix's leading dimension */
    const float *x;   /* the vectors, K floats per batch element */
    float *y;         /* the results, R per batch element */
    int64_t K, R, nt; /* contraction, results and tasks per batch element */
    bool daz;
    int fix;
    const ex_epilogue *epi;
} sv_run;

/* results [0, n) (n <= 16 SV_V) of one batch element: row k of the matrix at k ld */
SG_AVX512 static void sv_lanes(const sv_run *r, const float *m, const float *x, float *y,
                               int64_t n) {
    sg_src s = {m, OT_F32, r->daz};
    __m512 acc[SV_V];
    __mmask16 mk[SV_V];
    int nv = (int)cdiv(n, 16);
    for (int v = 0; v < SV_V; v++) {
        acc[v] = _mm512_setzero_ps();
        mk[v] = sg_lanes(n - 16 * v < 0 ? 0 : n - 16 * v);
    }
    for (int64_t k = 0, off = 0; k < r->K; k++, off += r->ld) {
        __m512 xb = _mm512_set1_ps(x[k]);
        for (int v = 0; v < SV_V; v++)
            if (v < nv) acc[v] = _mm512_fmadd_ps(sg_load(s, off + 16 * v, mk[v]), xb, acc[v]);
    }
    for (int v = 0; v < nv; v++) _mm512_mask_storeu_ps(y + 16 * v, mk[v], sg_fix(acc[v], r->fix));
}

static void sv_tasks(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const sv_run *r = arg;
    for (int64_t w = begin; w < end; w++) {
        int64_t b = w / r->nt, i0 = (w % r->nt) * 16 * SV_V;
        int64_t i1 = i0 + 16 * SV_V < r->R ? i0 + 16 * SV_V : r->R;
        sv_lanes(r, r->m + view_offset(r->vm, b) + i0, r->x + b * r->K, r->y + b * r->R + i0,
                 i1 - i0);
        if (r->epi) r->epi->fn(r->epi->ctx, b * r->R + i0, b * r->R + i1);
    }
}

/* Whether sv_gemv runs g (its operands as they will be read: lcopy / rcopy, copied into
 * row-major order first): f32 operands and result, one row (B not transposed) or one column (A
 * transposed), not both (a dot of two vectors: one chain, OpenBLAS's sdot is faster), an AVX-512
 * CPU. */
static bool sv_use(const ex_gemm *g, bool lcopy, bool rcopy) {
    bool lanes =
        (g->M == 1 && g->N > 1 && (!g->tb || rcopy)) || (g->N == 1 && g->M > 1 && g->ta && !lcopy);
    return lanes && g->t == OT_F32 && g->ad == OT_F32 && g->bd == OT_F32 && g->K >= 1 &&
           ex_avx512();
}

/* scratch: g->nb * g->K floats (the vectors) */
static void sv_gemv(ex_kernel_ctx *c, const ex_gemm *g, const gemm_view *va, const gemm_view *vb,
                    float *xs) {
    /* N = 1: the matrix is A (stored [K, M]), the vector B's column; else the matrix is B
     * ([K, N]), the vector A's row */
    bool col = g->N == 1;
    const gemm_view *vm = col ? va : vb, *vx = col ? vb : va;
    const float *xsrc = col ? g->b : g->a;
    int64_t xstride = col ? (g->tb ? 1 : vb->ld) : (g->ta ? va->ld : 1);
    uint32_t keep = c->ftz ? 0x80000000u : 0xffffffffu; /* what a zero exponent field keeps */
    for (int64_t b = 0; b < g->nb; b++) {
        const uint32_t *src = (const uint32_t *)xsrc + view_offset(vx, b);
        uint32_t *d = (uint32_t *)xs + b * g->K;
        for (int64_t k = 0; k < g->K; k++) {
            uint32_t u = src[k * xstride];
            d[k] = u & ((u & 0x7f800000u) ? 0xffffffffu : keep);
        }
    }
    sv_run r = {.m = col ? g->a : g->b,
                .vm = vm,
                .ld = vm->ld,
                .x = xs,
                .y = g->c,
                .K = g->K,
                .R = col ? g->M : g->N,
                .daz = c->ftz,
                .fix = c->ftz ? SG_FIX_FTZ : SG_FIX_NAN,
                .epi = c->epilogue};
    r.nt = cdiv(r.R, 16 * SV_V);
    ex_par_for(c, g->nb * r.nt, gemv_inline(g) ? 0 : g->nb * r.R * g->K * 4, sv_tasks, &r);
}

/* ---- s8 x s8 by VNNI (vpdpbusd) --------------------------------------------------------------
 * An s8 x s8 dot into s32 or s64 within int8_dot_bound, on a CPU with AVX512_VNNI: vpdpbusd
 * multiplies unsigned bytes by signed bytes, four pairs of k per 32-bit lane, and adds them to
 * the lane in int32. A is offset to unsigned (a + 128, packed four k per 32 bits, rows
 * contiguous) and B packed four k per 32-bit lane of each column (k past K zero); then
 * sum (a + 128) b - 128 sum b = sum a b. Every partial sum is an integer below
 * 255 x 128 x K <= 2^25 in magnitude: exact in int32, so the result is the exact sum, the
 * reference's (64-bit integer sums) bit for bit, whatever the order or the split. It replaces the
 * f32 GEMM on widened operands there (16 products per fma against 64 per vpdpbusd). Tasks:
 * strips of QD_NR columns (the strip's packed B, K x QD_NR bytes, stays in L1 while every block
 * of QD_MR rows streams past it). */
#define QD_MR   8
#define QD_NR   32
#define QD_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

static bool qd_cpu(void) {
    return ex_avx512() && __builtin_cpu_supports("avx512vnni");
}

static bool qd_use(ot_dtype a, ot_dtype b, ot_dtype o, int64_t K) {
    return a == OT_S8 && b == OT_S8 && (o == OT_S32 || o == OT_S64) && K <= int8_dot_bound(a, b) &&
           qd_cpu();
}

typedef struct qd_run {
    const ex_gemm *g;
    const gemm_view *va, *vb;
    int64_t kq, np; /* k quads; N rounded up to QD_NR */
    uint32_t *ap;   /* per batch element: M x kq (a + 128, four k per word) */
    uint32_t *bp;   /* per batch element: kq x np (four k of one column per word) */
    int32_t *cs;    /* per batch element: 128 x the column's sum of B */
    ot_dtype ot;
    void *out;
    const ex_epilogue *epi;
} qd_run;

/* Packing tasks: per batch element, QD_PACK_ROWS rows of A, then QD_PACK_COLS columns of B. */
#define QD_PACK_ROWS 64
#define QD_PACK_COLS 256

static void qd_pack_a(const qd_run *q, int64_t b, int64_t m0, int64_t m1) {
    const ex_gemm *g = q->g;
    const int8_t *a = (const int8_t *)g->a + view_offset(q->va, b);
    int64_t ld = q->va->ld;
    for (int64_t m = m0; m < m1; m++) {
        uint8_t *d = (uint8_t *)(q->ap + (b * g->M + m) * q->kq);
        if (!g->ta)
            for (int64_t k = 0; k < g->K; k++) d[k] = (uint8_t)a[m * ld + k] ^ 0x80u; /* + 128 */
        else
            for (int64_t k = 0; k < g->K; k++) d[k] = (uint8_t)a[k * ld + m] ^ 0x80u;
        for (int64_t k = g->K; k < q->kq * 4; k++) d[k] = 0x80u;
    }
}

static void qd_pack_b(const qd_run *q, int64_t b, int64_t n0, int64_t n1) {
    const ex_gemm *g = q->g;
    const int8_t *bm = (const int8_t *)g->b + view_offset(q->vb, b);
    int64_t ld = q->vb->ld, nv = g->N < n1 ? g->N : n1; /* columns [nv, n1): zero */
    uint32_t *bp = q->bp + b * q->kq * q->np;
    int32_t *cs = q->cs + b * q->np;
    for (int64_t n = n0; n < n1; n++) cs[n] = 0;
    for (int64_t kq = 0; kq < q->kq; kq++) {
        uint32_t *d = bp + kq * q->np;
        if (!g->tb && kq * 4 + 4 <= g->K) { /* four rows of B, read along n */
            const int8_t *r0 = bm + (kq * 4) * ld, *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld;
            for (int64_t n = n0; n < nv; n++) {
                d[n] = (uint32_t)(uint8_t)r0[n] | (uint32_t)(uint8_t)r1[n] << 8 |
                       (uint32_t)(uint8_t)r2[n] << 16 | (uint32_t)(uint8_t)r3[n] << 24;
                cs[n] += r0[n] + r1[n] + r2[n] + r3[n];
            }
        } else {
            for (int64_t n = n0; n < nv; n++) {
                uint32_t word = 0;
                for (int j = 0; j < 4; j++) {
                    int64_t k = kq * 4 + j;
                    int8_t v = k < g->K ? (g->tb ? bm[n * ld + k] : bm[k * ld + n]) : 0;
                    cs[n] += v;
                    word |= (uint32_t)(uint8_t)v << (8 * j);
                }
                d[n] = word;
            }
        }
        for (int64_t n = nv; n < n1; n++) d[n] = 0;
    }
    for (int64_t n = n0; n < n1; n++) cs[n] *= 128;
}

static void qd_pack(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const qd_run *q = arg;
    const ex_gemm *g = q->g;
    int64_t ta = cdiv(g->M, QD_PACK_ROWS), tb = cdiv(q->np, QD_PACK_COLS);
    for (int64_t w = begin; w < end; w++) {
        int64_t b = w / (ta + tb), t = w % (ta + tb);
        if (t < ta) {
            int64_t m0 = t * QD_PACK_ROWS;
            qd_pack_a(q, b, m0, m0 + QD_PACK_ROWS < g->M ? m0 + QD_PACK_ROWS : g->M);
        } else {
            int64_t n0 = (t - ta) * QD_PACK_COLS;
            qd_pack_b(q, b, n0, n0 + QD_PACK_COLS < q->np ? n0 + QD_PACK_COLS : q->np);
        }
    }
}

/* rows [m0, m0 + NR) x columns [n0, n0 + QD_NR) of batch element b: NR rows x two vectors of
 * int32 sums in registers */
QD_VNNI static inline __attribute__((always_inline)) void
qd_block(const qd_run *q, int64_t b, int64_t m0, const int NR, int64_t n0) {
    const ex_gemm *g = q->g;
    const uint32_t *ap = q->ap + (b * g->M + m0) * q->kq, *bp = q->bp + b * q->kq * q->np + n0;
    __m512i acc[QD_MR][2];
    for (int r = 0; r < NR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
    for (int64_t kq = 0; kq < q->kq; kq++) {
        __m512i b0 = _mm512_loadu_si512(bp + kq * q->np);
        __m512i b1 = _mm512_loadu_si512(bp + kq * q->np + 16);
        for (int r = 0; r < NR; r++) {
            __m512i a = _mm512_set1_epi32((int)ap[r * q->kq + kq]);
            acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], a, b0);
            acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], a, b1);
        }
    }
    const int32_t *cs = q->cs + b * q->np + n0;
    __m512i c0 = _mm512_loadu_si512(cs), c1 = _mm512_loadu_si512(cs + 16);
    int64_t nn = g->N - n0 < QD_NR ? g->N - n0 : QD_NR;
    __mmask16 k0 = sg_lanes(nn), k1 = sg_lanes(nn - 16 < 0 ? 0 : nn - 16);
    for (int r = 0; r < NR; r++) {
        __m512i v0 = _mm512_sub_epi32(acc[r][0], c0), v1 = _mm512_sub_epi32(acc[r][1], c1);
        int64_t at = (b * g->M + m0 + r) * g->N + n0;
        if (q->ot == OT_S32) {
            _mm512_mask_storeu_epi32((int32_t *)q->out + at, k0, v0);
            _mm512_mask_storeu_epi32((int32_t *)q->out + at + 16, k1, v1);
        } else {
            int64_t *o = (int64_t *)q->out + at;
            _mm512_mask_storeu_epi64(o, (__mmask8)k0,
                                     _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v0)));
            _mm512_mask_storeu_epi64(o + 8, (__mmask8)(k0 >> 8),
                                     _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v0, 1)));
            _mm512_mask_storeu_epi64(o + 16, (__mmask8)k1,
                                     _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v1)));
            _mm512_mask_storeu_epi64(o + 24, (__mmask8)(k1 >> 8),
                                     _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v1, 1)));
        }
    }
}

/* a strip: every full block of QD_MR rows, then the rows left one at a time */
QD_VNNI static void qd_strip(const qd_run *q, int64_t b, int64_t n0) {
    int64_t M = q->g->M, m0 = 0;
    for (; m0 + QD_MR <= M; m0 += QD_MR) qd_block(q, b, m0, QD_MR, n0);
    for (; m0 < M; m0++) qd_block(q, b, m0, 1, n0);
}

static void qd_tasks(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const qd_run *q = arg;
    int64_t ns = q->np / QD_NR;
    for (int64_t w = begin; w < end; w++) {
        int64_t b = w / ns, n0 = (w % ns) * QD_NR;
        qd_strip(q, b, n0);
    }
}

static void qd_epilogue(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const qd_run *q = arg;
    int64_t n = q->g->nb * q->g->M * q->g->N;
    q->epi->fn(q->epi->ctx, begin * 4096, end * 4096 < n ? end * 4096 : n);
}

static int64_t qd_scratch_bytes(const ex_gemm *g) {
    int64_t kq = cdiv(g->K, 4), np = cdiv(g->N, QD_NR) * QD_NR;
    return (int64_t)ex_align64((size_t)(g->nb * g->M * kq * 4)) +
           (int64_t)ex_align64((size_t)(g->nb * kq * np * 4)) +
           (int64_t)ex_align64((size_t)(g->nb * np * 4));
}

static void qd_gemm(ex_kernel_ctx *c, const ex_gemm *g, const gemm_view *va, const gemm_view *vb,
                    char *scratch, ot_dtype ot, void *out) {
    qd_run q = {.g = g, .va = va, .vb = vb, .ot = ot, .out = out, .epi = c->epilogue};
    q.kq = cdiv(g->K, 4);
    q.np = cdiv(g->N, QD_NR) * QD_NR;
    q.ap = (uint32_t *)scratch;
    q.bp = (uint32_t *)(scratch + ex_align64((size_t)(g->nb * g->M * q.kq * 4)));
    q.cs = (int32_t *)((char *)q.bp + ex_align64((size_t)(g->nb * q.kq * q.np * 4)));
    int64_t packed = g->nb * (g->M + q.np) * q.kq * 4;
    ex_par_for(c, g->nb * (cdiv(g->M, QD_PACK_ROWS) + cdiv(q.np, QD_PACK_COLS)), packed, qd_pack,
               &q);
    ex_par_for(c, g->nb * (q.np / QD_NR), g->nb * g->M * g->N * g->K, qd_tasks, &q);
    if (q.epi) {
        int64_t n = g->nb * g->M * g->N;
        ex_par_for(c, cdiv(n, 4096), n * 8, qd_epilogue, &q);
    }
}
#else
#define SG_OWN 0
bool ex_dot_bf16_dp(uint64_t *t_dp, uint64_t *t_fma) {
    if (t_dp) *t_dp = 0;
    if (t_fma) *t_fma = 0;
    return false;
}
#endif

/* OpenBLAS's pthreads build starts nproc - 1 worker threads when it is loaded, and an idle
 * worker spins in sched_yield for its timeout (2^28 cycles, about 0.1 s) before it sleeps. The
 * library gives OpenBLAS one thread per call (below), so in its process those workers only take
 * cores from the library's own pool: a program's first runs after start-up (an `optitpu run` of a
 * few runs, a training job's first steps) ran on half the cores of a 2-core machine (attention
 * b4 h8 s256 at 2 threads: 5.0 against 2.8 ms a run). So when the library is loaded OpenBLAS is
 * set to one thread, as the library's first BLAS call would set it, and its workers are stopped
 * with the routine OpenBLAS's own fork handler uses (weak: serial builds have neither the workers
 * nor the routine). In that order: this OpenBLAS (0.3.21) starts its workers again in any
 * openblas_set_num_threads call that finds them stopped, so the library never calls it again
 * while the count is 1 (an application that sets more threads gets its workers back). */
extern int blas_thread_shutdown_(void) __attribute__((weak));

__attribute__((constructor)) static void blas_stop_idle_workers(void) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    if (blas_thread_shutdown_) blas_thread_shutdown_();
}

static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

static void blas_one_thread(void) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

static void run_gemm(ex_kernel_ctx *c, ex_gemm *g, const gemm_view *va, const gemm_view *vb) {
    /* once per process (concurrent first calls from several devices set it once); again only if
     * the application changed it since */
    pthread_once(&g_blas_once, blas_one_thread);
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    gemm_run run;
    gemm_grid(g, &run);
    run.va = va;
    run.vb = vb;
    /* "bytes" for the inline decision: the multiply-adds, scaled so ~64K of them stay inline */
    int64_t work = g->nb * g->M * g->N * (g->K ? g->K : 1);
    int64_t items = g->nb * g->tm * g->tn;
    /* handed out dynamically: a thread that the OS preempts (a shared machine) or that runs a
     * smaller edge tile takes fewer tiles; the bits do not depend on who computes which. Items
     * far below GEMM_MIN_TILE (a batch of tiny products: 64 x 4 x 64 x 64, 0.3 us each) go in
     * runs of consecutive items, about 4 runs per pool thread: one by one, the first
     * thread had claimed most of them before a second one woke (0.77 of the calls split in
     * halves). */
    run.per = 1;
    int threads = ex_par_threads(c, gemv_inline(g) ? 0 : work * 4);
    if (threads > 1 && items > 4 * (int64_t)threads && work / items < GEMM_MIN_TILE / 4)
        run.per = cdiv(items, 4 * (int64_t)threads);
    ex_par_for_dynamic(c, cdiv(items, run.per), gemv_inline(g) ? 0 : work * 4, gemm_tiles, &run);
}

void ex_run_gemm(ex_kernel_ctx *c, ex_gemm *g) {
    gemm_view va, vb;
    view_dense(&va, g->nb, g->M, g->K, g->ta ? g->M : g->K);
    view_dense(&vb, g->nb, g->K, g->N, g->tb ? g->K : g->N);
    run_gemm(c, g, &va, &vb);
}

/* A dot's operands as batch x free x contracting: the dims of each kind and their products. */
typedef struct {
    int64_t lbat[OT_MAX_RANK], rbat[OT_MAX_RANK], lfree[OT_MAX_RANK], rfree[OT_MAX_RANK];
    int nlf, nrf;
    int64_t NB, M, N, K;
} dot_layout;

static void dot_layout_of(const ot_dot_dims *dn, const ot_shape *ls, const ot_shape *rs,
                          dot_layout *L) {
    int nb = dn->nbatch, nc = dn->ncontract;
    L->nlf = L->nrf = 0;
    L->NB = L->M = L->N = L->K = 1;
    for (int b = 0; b < nb; b++) {
        L->lbat[b] = dn->lhs_batch[b];
        L->rbat[b] = dn->rhs_batch[b];
        L->NB *= ls->dims[dn->lhs_batch[b]];
    }
    for (int d = 0; d < ls->rank; d++)
        if (!listed(d, dn->lhs_batch, nb) && !listed(d, dn->lhs_contract, nc)) {
            L->lfree[L->nlf++] = d;
            L->M *= ls->dims[d];
        }
    for (int d = 0; d < rs->rank; d++)
        if (!listed(d, dn->rhs_batch, nb) && !listed(d, dn->rhs_contract, nc)) {
            L->rfree[L->nrf++] = d;
            L->N *= rs->dims[d];
        }
    for (int k = 0; k < nc; k++) L->K *= ls->dims[dn->lhs_contract[k]];
}

/* Whether ex_gemv_rows (fast_gemv.c) runs g: one f32 matrix x vector of the other skinny form,
 * the matrix's rows along the contraction (A [M, K] x B's column, or B stored [N, K] x A's row),
 * one batch element. g->ta / g->tb as the operands will be read (after any copy). */
static bool gv_use(const ex_gemm *g) {
    bool form = (g->N == 1 && g->M > 1 && !g->ta) || (g->M == 1 && g->N > 1 && g->tb);
    return form && g->nb == 1 && g->K >= 1 && g->t == OT_F32 && g->ad == OT_F32 &&
           g->bd == OT_F32 && ex_avx512();
}

/* ---- integer operands (one-hot products, counts, index arithmetic) ---------------------------
 * The reference (linalg.c) sums the products of the operands widened to 64 bits modulo 2^64 and
 * truncates the sum to the result type. Modulo 2^w a product or a sum depends only on its
 * operands' low w bits, so for a result of at most 32 bits, 32-bit wrapping arithmetic on the
 * operands' low halves gives the stored bits exactly (64-bit for a 64-bit result), in any order
 * and for any split of K: the blocks and the pool's split below cannot change a bit. Each operand
 * is read where it lies when it is K-outer (A as [K, M], B as [K, N]) in a type of the
 * accumulator's width, else first copied into that order (ex_transpose) and widened. A task folds
 * a block of ID_MB rows against a block of ID_NB columns over one chunk of K: for each k, a row of
 * B times each A[k, m], added into the tile of the block's sums (vector lanes along n); the
 * chunks' sums are added at the end. It replaces the reference's one 64-bit dot product per
 * result element after copying both operands widened (the [100000, 10] x [100000, 10] one-hot
 * product of a confusion matrix: 26 ms on one thread, now 0.9 ms; xla_compare --group wild). */
#define ID_MB    16
#define ID_NB    256
#define ID_KC    4096 /* the shortest chunk of K a task folds */
#define ID_TASKS 16   /* tasks wanted before K is cut into chunks */

/* Integer multiply-adds: the same bits at any vector width, so x86-64 GCC builds the task loop
 * for AVX-512, AVX2 and the baseline, and the loader picks the widest the CPU has. */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && __GNUC__ >= 11 &&            \
    !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define ID_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ID_CLONES
#endif

static bool id_int(ot_dtype t) {
    return t != OT_PRED && !ot_dtype_is_float(t) && !ot_dtype_is_complex(t) && ot_dtype_size(t) > 0;
}
static bool id_dtype(ot_dtype a, ot_dtype b, ot_dtype o) {
    return id_int(a) && id_int(b) && id_int(o);
}

typedef struct id_run {
    int64_t nb, M, N, K, lda, ldb; /* A [K, M] with leading dim lda, B [K, N] with ldb */
    int64_t mbs, nbs, nkc, kc;     /* row blocks, column blocks, chunks of K, chunk length */
    const int64_t *aoff, *boff;    /* per batch element: its offset in A and in B */
    const void *a, *b;             /* in the accumulator's type */
    void *part;                    /* [nkc][nb][M][N] sums */
} id_run;

static void id_layout(const id_run *r, int64_t t, int64_t *b, int64_t *m0, int64_t *n0,
                      int64_t *q) {
    *n0 = t % r->nbs * ID_NB;
    t /= r->nbs;
    *m0 = t % r->mbs * ID_MB;
    t /= r->mbs;
    *b = t % r->nb;
    *q = t / r->nb;
}

#define DEFINE_ID(T, W)                                                                            \
    static ID_CLONES void id_tasks_##W(void *arg, int64_t begin, int64_t end, int ith) {           \
        (void)ith;                                                                                 \
        const id_run *r = arg;                                                                     \
        T tile[ID_MB * ID_NB];                                                                     \
        for (int64_t t = begin; t < end; t++) {                                                    \
            int64_t b, m0, n0, q;                                                                  \
            id_layout(r, t, &b, &m0, &n0, &q);                                                     \
            int64_t mn = r->M - m0 < ID_MB ? r->M - m0 : ID_MB;                                    \
            int64_t nn = r->N - n0 < ID_NB ? r->N - n0 : ID_NB;                                    \
            int64_t k0 = q * r->kc, k1 = k0 + r->kc < r->K ? k0 + r->kc : r->K;                    \
            memset(tile, 0, sizeof tile);                                                          \
            const T *a = (const T *)r->a + r->aoff[b] + m0;                                        \
            const T *bb = (const T *)r->b + r->boff[b] + n0;                                       \
            for (int64_t k = k0; k < k1; k++) {                                                    \
                const T *ar = a + k * r->lda, *br = bb + k * r->ldb;                               \
                for (int64_t m = 0; m < mn; m++) {                                                 \
                    T x = ar[m], *acc = tile + m * ID_NB;                                          \
                    for (int64_t n = 0; n < nn; n++) acc[n] += x * br[n];                          \
                }                                                                                  \
            }                                                                                      \
            T *out = (T *)r->part + ((q * r->nb + b) * r->M + m0) * r->N + n0;                     \
            for (int64_t m = 0; m < mn; m++)                                                       \
                memcpy(out + m * r->N, tile + m * ID_NB, (size_t)nn * sizeof(T));                  \
        }                                                                                          \
    }
DEFINE_ID(uint32_t, 32)
DEFINE_ID(uint64_t, 64)

#if SG_OWN
/* 32-bit sums of at most 16 columns (a confusion matrix, class counts): a block's rows in
 * registers, one masked load of B's row and a broadcast multiply-add per row and k (the loop
 * above spends a vector and a scalar tail on a 10-column row, 5x slower). The same sums. */
EX_AVX512 static void id_tasks_n16(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const id_run *r = arg;
    __mmask16 nm = (__mmask16)((1u << r->N) - 1u);
    for (int64_t t = begin; t < end; t++) {
        int64_t b, m0, n0, q;
        id_layout(r, t, &b, &m0, &n0, &q);
        int mn = (int)(r->M - m0 < ID_MB ? r->M - m0 : ID_MB);
        int64_t k0 = q * r->kc, k1 = k0 + r->kc < r->K ? k0 + r->kc : r->K;
        const uint32_t *a = (const uint32_t *)r->a + r->aoff[b] + m0;
        const uint32_t *bb = (const uint32_t *)r->b + r->boff[b];
        __m512i acc[ID_MB];
        for (int m = 0; m < ID_MB; m++) acc[m] = _mm512_setzero_si512();
        for (int64_t k = k0; k < k1; k++) {
            __m512i br = _mm512_maskz_loadu_epi32(nm, bb + k * r->ldb);
            const uint32_t *ar = a + k * r->lda;
            for (int m = 0; m < mn; m++)
                acc[m] =
                    _mm512_add_epi32(acc[m], _mm512_mullo_epi32(_mm512_set1_epi32((int)ar[m]), br));
        }
        uint32_t *out = (uint32_t *)r->part + ((q * r->nb + b) * r->M + m0) * r->N;
        for (int m = 0; m < mn; m++) _mm512_mask_storeu_epi32(out + m * r->N, nm, acc[m]);
    }
}
#endif

static void id_plan(id_run *r) {
    r->mbs = cdiv(r->M, ID_MB);
    r->nbs = cdiv(r->N, ID_NB);
    int64_t mn = r->nb * r->mbs * r->nbs;
    r->nkc = 1;
    if (mn < ID_TASKS) r->nkc = cdiv(ID_TASKS, mn);
    if (r->nkc > cdiv(r->K, ID_KC)) r->nkc = cdiv(r->K, ID_KC);
    if (r->nkc < 1) r->nkc = 1;
    r->kc = cdiv(r->K, r->nkc);
    r->nkc = r->K ? cdiv(r->K, r->kc) : 1;
    if (r->kc < 1) r->kc = 1;
}

/* Copies operand s (dtype st, dims `dims`) into [batch][K][free] order (perm: its batch, then
 * contracting, then free dims) in the accumulator's type (w bits): through ex_transpose, then
 * widened or cut to w bits where the sizes differ. */
static void id_pack(ex_kernel_ctx *c, ot_dtype st, const ot_shape *s, const int64_t *perm,
                    const void *src, void *tmp, void *dst, int w) {
    size_t es = ot_dtype_size(st);
    int64_t n = ot_shape_numel_unchecked(s);
    if (es * 8 == (size_t)w) {
        ex_transpose(c, es, s->rank, s->dims, perm, src, dst);
        return;
    }
    ex_transpose(c, es, s->rank, s->dims, perm, src, tmp);
    for (int64_t e = 0; e < n; e++) {
        uint64_t v = (uint64_t)ex_ld_i(st, tmp, e); /* sign- or zero-extended, as the reference */
        if (w == 32)
            ((uint32_t *)dst)[e] = (uint32_t)v;
        else
            ((uint64_t *)dst)[e] = v;
    }
}

static ot_status id_dot(ex_kernel_ctx *c, const ot_instr *i, const dot_layout *L, void *const *in,
                        const ex_leaf *ins, void *out, const ex_leaf *os, bool *done) {
    const ot_dot_dims *dn = i->attrs->dot;
    const ot_shape *ls = ins[0].shape, *rs = ins[1].shape;
    ot_dtype odt = os->shape->dtype;
    int w = ot_dtype_size(odt) > 4 ? 64 : 32;
    size_t ts = (size_t)w / 8;
    if (ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes) ||
        ex_overlaps(out, os->nbytes, in[1], ins[1].nbytes))
        return OT_OK;
    *done = true;
    c->fast_run++;
    int64_t NB = L->NB, M = L->M, N = L->N, K = L->K, nout = NB * M * N;
    if (nout == 0) return OT_OK;
    id_run r = {.nb = NB, .M = M, .N = N, .K = K};
    id_plan(&r);
    gemm_view va, vb;
    bool ta = false, tb = true;
    int nb = dn->nbatch, nc = dn->ncontract;
    bool la = view_of(ls, L->lbat, nb, L->lfree, L->nlf, dn->lhs_contract, nc, M, K, &ta, &va) &&
              ta && ot_dtype_size(ls->dtype) == ts;
    bool lb = view_of(rs, L->rbat, nb, dn->rhs_contract, nc, L->rfree, L->nrf, K, N, &tb, &vb) &&
              !tb && ot_dtype_size(rs->dtype) == ts;
    int64_t lnum = ot_shape_numel_unchecked(ls), rnum = ot_shape_numel_unchecked(rs);
    size_t abytes = la ? 0 : ex_align64((size_t)lnum * ts),
           bbytes = lb ? 0 : ex_align64((size_t)rnum * ts);
    size_t tbytes = 0; /* the transposed copy before widening, when the sizes differ */
    if (!la && ot_dtype_size(ls->dtype) != ts)
        tbytes = ex_align64((size_t)lnum * ot_dtype_size(ls->dtype));
    if (!lb && ot_dtype_size(rs->dtype) != ts) {
        size_t rb = ex_align64((size_t)rnum * ot_dtype_size(rs->dtype));
        if (rb > tbytes) tbytes = rb;
    }
    size_t obytes = ex_align64((size_t)NB * 2 * sizeof(int64_t));
    size_t pbytes = ex_align64((size_t)(r.nkc * nout) * ts);
    void *sc = NULL;
    OT_CHECK(ex_scratch(c, abytes + bbytes + tbytes + obytes + pbytes, &sc));
    char *p = sc;
    int64_t *off = (int64_t *)(void *)p;
    p += obytes;
    r.part = p;
    p += pbytes;
    r.aoff = off;
    r.boff = off + NB;
    if (la) {
        r.a = in[0];
        r.lda = va.ld;
        for (int64_t b = 0; b < NB; b++) off[b] = view_offset(&va, b);
    } else {
        int64_t perm[OT_MAX_RANK];
        int n = 0;
        for (int k = 0; k < nb; k++) perm[n++] = L->lbat[k];
        for (int k = 0; k < nc; k++) perm[n++] = dn->lhs_contract[k];
        for (int k = 0; k < L->nlf; k++) perm[n++] = L->lfree[k];
        id_pack(c, ls->dtype, ls, perm, in[0], p + abytes + bbytes, p, w);
        r.a = p;
        r.lda = M;
        for (int64_t b = 0; b < NB; b++) off[b] = b * K * M;
    }
    if (lb) {
        r.b = in[1];
        r.ldb = vb.ld;
        for (int64_t b = 0; b < NB; b++) off[NB + b] = view_offset(&vb, b);
    } else {
        int64_t perm[OT_MAX_RANK];
        int n = 0;
        for (int k = 0; k < nb; k++) perm[n++] = L->rbat[k];
        for (int k = 0; k < nc; k++) perm[n++] = dn->rhs_contract[k];
        for (int k = 0; k < L->nrf; k++) perm[n++] = L->rfree[k];
        id_pack(c, rs->dtype, rs, perm, in[1], p + abytes + bbytes, p + abytes, w);
        r.b = p + abytes;
        r.ldb = N;
        for (int64_t b = 0; b < NB; b++) off[NB + b] = b * K * N;
    }
    ot_range_fn fn = w == 32 ? id_tasks_32 : id_tasks_64;
#if SG_OWN
    if (w == 32 && N <= 16 && ex_avx512()) fn = id_tasks_n16;
#endif
    ex_par_for(c, r.nkc * NB * r.mbs * r.nbs, (int64_t)(NB * M * N) * K * (int64_t)ts, fn, &r);
    /* the chunks' sums added, each truncated to the result type */
    for (int64_t e = 0; e < nout; e++) {
        uint64_t v = 0;
        for (int64_t q = 0; q < r.nkc; q++)
            v += w == 32 ? ((const uint32_t *)r.part)[q * nout + e]
                         : ((const uint64_t *)r.part)[q * nout + e];
        ex_st_i(odt, out, e, (int64_t)v);
    }
    return OT_OK;
}

bool ex_fast_dot_splits(const ot_instr *i, int threads) {
    if (!i || i->opcode != OT_OP_DOT || i->noperands != 2 || !i->attrs || !i->attrs->dot ||
        threads < 2 || i->shape.kind != OT_IR_ARRAY || i->operands[0]->shape.kind != OT_IR_ARRAY ||
        i->operands[1]->shape.kind != OT_IR_ARRAY)
        return false;
    const ot_dot_dims *dn = i->attrs->dot;
    const ot_shape *ls = &i->operands[0]->shape.array, *rs = &i->operands[1]->shape.array;
    ot_dtype odt = i->shape.array.dtype;
    dot_layout L;
    dot_layout_of(dn, ls, rs, &L);
    if (ex_amx_int8_dot(ls->dtype, rs->dtype, odt, L.K)) { /* ex_amx_dot_run's inline rule */
        ex_amx_dot ad = {.nb = L.NB, .M = L.M, .N = L.N, .K = L.K};
        return L.NB * L.M * L.N * L.K / 16 >= EX_INLINE_BYTES && ex_amx_dot_tasks(&ad) > 1;
    }
#if SG_OWN
    bool i8 = int8_dot_dtype(ls->dtype, rs->dtype, odt, L.K) && ex_avx512(); /* own GEMM's */
#else
    bool i8 = false;
#endif
    if (id_dtype(ls->dtype, rs->dtype, odt) && !i8) {
        id_run r = {.nb = L.NB, .M = L.M, .N = L.N, .K = L.K}; /* id_dot's tasks */
        id_plan(&r);
        int64_t w = ot_dtype_size(odt) > 4 ? 8 : 4;
        return L.NB * L.M * L.N * L.K * w >= EX_INLINE_BYTES && r.nkc * L.NB * r.mbs * r.nbs > 1;
    }
#if SG_OWN
    bool half =
        half_dot_dtype(ls->dtype, rs->dtype, odt) || int8_dot_dtype(ls->dtype, rs->dtype, odt, L.K);
#else
    bool half = false;
#endif
    if (!(half || ex_gemm_dtype(ls->dtype, rs->dtype, odt))) return false; /* the reference's */
    if (L.M > INT_MAX || L.N > INT_MAX || L.K > INT_MAX || L.NB * L.M * L.N == 0) return false;
    /* the runtime's inline rule (ex_par_for_dynamic): the multiply-adds x 4 as "bytes" */
    if (L.NB * L.M * L.N * L.K * 4 < EX_INLINE_BYTES) return false;
    ex_gemm g = {.t = half ? OT_F32 : odt,
                 .nb = L.NB,
                 .M = L.M,
                 .N = L.N,
                 .K = L.K,
                 .ad = ls->dtype,
                 .bd = rs->dtype};
    gemm_view va;
    if (!view_of(ls, L.lbat, dn->nbatch, L.lfree, L.nlf, dn->lhs_contract, dn->ncontract, L.M, L.K,
                 &g.ta, &va))
        g.ta = false; /* copied into (batch, free, contracting) order first */
#if SG_OWN
    if (half && !ex_avx512()) return false; /* the reference's */
    if (sg_pair_dot(ls->dtype, rs->dtype, ex_ftz) && sg_dpbf16()) g.K = cdiv(g.K, 2);
    if (half || sd_use(&g) || sg_use(&g)) return sg_first_tasks(&g, threads) > 1;
#endif
    gemm_view vb;
    if (!view_of(rs, L.rbat, dn->nbatch, dn->rhs_contract, dn->ncontract, L.rfree, L.nrf, L.K, L.N,
                 &g.tb, &vb))
        g.tb = false;
    if (gv_use(&g)) return g.M * g.N > EX_GEMV_TASK; /* more than one block of rows */
    if (gemv_inline(&g)) return false;
    gemm_run run;
    gemm_grid(&g, &run);
    return g.nb * g.tm * g.tn > 1;
}

ot_status ex_fast_dot(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                      void *out, const ex_leaf *os, bool *done) {
    const ot_dot_dims *dn = i->attrs->dot;
    const ot_shape *ls = ins[0].shape, *rs = ins[1].shape;
    ot_dtype odt = os->shape->dtype;
    if (!dn) return OT_OK;
    dot_layout L;
    dot_layout_of(dn, ls, rs, &L);
#if SG_OWN
    /* the own GEMM, widening 16-bit floats or 8-bit integers as it packs */
    bool half =
        half_dot_dtype(ls->dtype, rs->dtype, odt) || int8_dot_dtype(ls->dtype, rs->dtype, odt, L.K);
#else
    bool half = false;
#endif
    /* 8-bit integers on AMX tiles (fast_dot_amx.c): exact int32 sums, any K int32 holds */
    bool adot = ex_amx_int8_dot(ls->dtype, rs->dtype, odt, L.K);
    if (adot) half = false;
#if SG_OWN
    bool own8 = half && ex_avx512(); /* 8-bit integers in the own f32 GEMM (or VNNI) */
#else
    bool own8 = false;
#endif
    if (!adot && !own8 && id_dtype(ls->dtype, rs->dtype, odt))
        return id_dot(c, i, &L, in, ins, out, os, done);
    if (!(half || adot || ex_gemm_dtype(ls->dtype, rs->dtype, odt))) return OT_OK;
    const int64_t *lbat = L.lbat, *rbat = L.rbat, *lfree = L.lfree, *rfree = L.rfree;
    int nb = dn->nbatch, nlf = L.nlf, nrf = L.nrf, nc = dn->ncontract;
    int64_t NB = L.NB, M = L.M, N = L.N, K = L.K;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX) return OT_OK; /* BLAS takes int sizes */
    if (ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes) ||
        ex_overlaps(out, os->nbytes, in[1], ins[1].nbytes))
        return OT_OK;
    ex_gemm g = {.t = half ? OT_F32 : odt,
                 .nb = NB,
                 .M = M,
                 .N = N,
                 .K = K,
                 .a = in[0],
                 .b = in[1],
                 .c = out,
                 .ad = ls->dtype,
                 .bd = rs->dtype};
#if SG_OWN
    /* 16-bit operands: only the own GEMM gives the reference's bits (not OpenBLAS); it takes
     * any shape (fewer rows or columns than a register block go through its edge blocks) */
    if (half && (NB * M * N == 0 || K == 0 || !ex_avx512())) return OT_OK;
    bool qdot = half && qd_use(ls->dtype, rs->dtype, odt, K);
    /* bf16 x bf16 under FTZ: the pairs' chain (ACC_F32_PAIR) */
    bool pair = half && sg_pair_dot(ls->dtype, rs->dtype, c->ftz);
#endif
    *done = true;
    if (NB * M * N == 0) return OT_OK;
    size_t les = ot_dtype_size(ls->dtype), res = ot_dtype_size(rs->dtype); /* copies */
    gemm_view va, vb;
    /* each operand read where it lies when its dims allow (view_of: A as [M, K] or transposed
     * [K, M], B as [K, N] or transposed [N, K]), else copied into the (batch, free, contracting)
     * order for A and (batch, contracting, free) for B */
    bool lcopy = !view_of(ls, lbat, nb, lfree, nlf, dn->lhs_contract, nc, M, K, &g.ta, &va);
    bool rcopy = !view_of(rs, rbat, nb, dn->rhs_contract, nc, rfree, nrf, K, N, &g.tb, &vb);
#if SG_OWN
    /* f32 and f64: the own GEMM's fma chains are the reference's sums, bit for bit */
    bool gemv = !half && sv_use(&g, lcopy, rcopy);
    bool exact = half || gemv || sd_use(&g) || sg_use(&g);
#else
    bool exact = false;
#endif
    int64_t lnum = ot_shape_numel_unchecked(ls), rnum = ot_shape_numel_unchecked(rs);
    size_t need = 0, lbytes = ex_align64((size_t)lnum * les),
           rbytes = ex_align64((size_t)rnum * res), gbytes = 0, hbytes = 0;
    if (lcopy) need += lbytes;
    if (rcopy) need += rbytes;
    ex_amx_dot ad = {.ad = ls->dtype, .bd = rs->dtype, .od = odt, .nb = NB, .M = M, .N = N, .K = K};
    size_t obytes = ex_align64((size_t)NB * 2 * sizeof(int64_t)); /* ad's batch offsets */
    if (adot) {
        gbytes = ex_amx_dot_scratch(&ad) + obytes;
        need += gbytes;
    }
#if SG_OWN
    if (qdot) {
        gbytes = (size_t)qd_scratch_bytes(&g);
        need += gbytes;
    } else
#endif
        if (half && odt != OT_F32) { /* the f32 sums, rounded to the result by half_finish */
        hbytes = ex_align64((size_t)(NB * M * N) * 4);
        need += hbytes;
    }
    /* the FPU's FTZ | DAZ for the OpenBLAS calls only: the own GEMM's partial sums underflow
     * gradually (as the reference's), its operands flushed as packed and its finished sums as
     * stored (f32: sg_fix) or by half_finish */
    g.ftz = c->ftz && !exact;
    char *gscratch = NULL;
    float *xscratch = NULL;
#if SG_OWN
    int threads = 1;
    bool own = exact;
    ex_gemm gk = g; /* the GEMM's view: with vdpbf16ps pairs, K counts them */
    bool dp = pair && sg_dpbf16();
    if (dp) gk.K = cdiv(K, 2);
    ex_loop_entry *bkeep = NULL;
    if (gemv) {
        gbytes = ex_align64((size_t)(NB * K) * 4);
        need += gbytes;
    } else if (own && !qdot) {
        threads = ex_par_threads(c, NB * M * N * K * 4);
        /* B that no iteration of the loop running this dot writes, read where it lies: its
         * packed copy is kept for the loop's next iterations (one group, a shared B) */
        if (!rcopy && !sg_own_b(&gk, threads) && sg_group(&gk) >= gk.nb)
            bkeep = ex_loop_buffer(c, i, in[1], sg_shared_bytes(&gk, threads));
        gbytes = sg_scratch_bytes(&gk, threads, bkeep != NULL);
        need += gbytes;
    }
#endif
    /* ex_gemv_rows: the vector gathered contiguous when it is strided (K floats at the end) */
    size_t xbytes = 0;
    if (!half && ex_gemm_dtype(ls->dtype, rs->dtype, odt) && odt == OT_F32 && NB == 1 &&
        ((N == 1 && M > 1) || (M == 1 && N > 1))) {
        xbytes = ex_align64((size_t)K * 4);
        need += xbytes;
    }
    if (need) {
        void *sc = NULL;
        OT_CHECK(ex_scratch(c, need, &sc));
        char *p = sc;
        if (hbytes) {
            g.c = p;
            p += hbytes;
        }
        if (lcopy) {
            int64_t perm[OT_MAX_RANK];
            int n = 0;
            for (int k = 0; k < nb; k++) perm[n++] = lbat[k];
            for (int k = 0; k < nlf; k++) perm[n++] = lfree[k];
            for (int k = 0; k < nc; k++) perm[n++] = dn->lhs_contract[k];
            ex_transpose(c, les, ls->rank, ls->dims, perm, g.a, p);
            g.a = p;
            g.ta = false;
            view_dense(&va, NB, M, K, K);
            p += lbytes;
        }
        if (rcopy) {
            int64_t perm[OT_MAX_RANK];
            int n = 0;
            for (int k = 0; k < nb; k++) perm[n++] = rbat[k];
            for (int k = 0; k < nc; k++) perm[n++] = dn->rhs_contract[k];
            for (int k = 0; k < nrf; k++) perm[n++] = rfree[k];
            ex_transpose(c, res, rs->rank, rs->dims, perm, g.b, p);
            g.b = p;
            g.tb = false;
            view_dense(&vb, NB, K, N, N);
            p += rbytes;
        }
        if (gbytes) gscratch = p;
        p += gbytes;
        xscratch = xbytes ? (float *)(void *)p : NULL;
    }
    if (adot) { /* exact integer sums, stored as the result */
        int64_t *off = (int64_t *)(void *)gscratch;
        for (int64_t b = 0; b < NB; b++) {
            off[b] = view_offset(&va, b);
            off[NB + b] = view_offset(&vb, b);
        }
        ad.a = g.a;
        ad.b = g.b;
        ad.out = out;
        ad.ta = g.ta;
        ad.tb = g.tb;
        ad.lda = va.ld;
        ad.ldb = vb.ld;
        ad.aoff = off;
        ad.boff = off + NB;
        ex_amx_dot_run(c, &ad, gscratch + obytes);
        c->epilogue_done = c->epilogue != NULL;
        c->fast_run++;
        return OT_OK;
    }
#if SG_OWN
    if (qdot) { /* exact integer sums, stored as the result */
        qd_gemm(c, &g, &va, &vb, gscratch, odt, out);
        c->epilogue_done = c->epilogue != NULL;
        c->fast_run++;
        return OT_OK;
    }
    if (gemv) { /* one row or column: the sums finished as stored (sg_fix) */
        sv_gemv(c, &g, &va, &vb, (float *)gscratch);
        c->epilogue_done = c->epilogue != NULL;
        c->fast_run++;
        return OT_OK;
    }
    if (own && !half) { /* f32, f64: the sums finished as stored (sg_fix, sd_fix) */
        sg_gemm(c, &g, &va, &vb, gscratch, threads, 0, false, bkeep);
        c->epilogue_done = c->epilogue != NULL;
        c->fast_run++;
        return OT_OK;
    }
    if (own) {
        half_fin fin = {g.c, out, odt, c->ftz, c->epilogue};
        ex_epilogue hook = {half_finish, &fin};
        c->epilogue = &hook;
        gk.a = g.a; /* the operands as copied, if they were */
        gk.b = g.b;
        gk.c = g.c;
        gk.ta = g.ta;
        gk.tb = g.tb;
        sg_gemm(c, &gk, &va, &vb, gscratch, threads, dp ? K : 0, pair && !dp, bkeep);
        c->epilogue = fin.next;
        c->epilogue_done = c->epilogue != NULL;
        c->fast_run++;
        return OT_OK;
    }
#endif
    (void)gscratch;
    if (xscratch && gv_use(&g)) {
        /* the matrix's rows along K: A [M, K] x B's column, or B stored [N, K] x A's row */
        bool col = N == 1;
        const float *mat = col ? g.a : g.b, *x = col ? g.b : g.a;
        int64_t ld = col ? va.ld : vb.ld, xs = col ? (g.tb ? 1 : vb.ld) : (g.ta ? va.ld : 1);
        if (xs != 1) {
            for (int64_t k = 0; k < K; k++) xscratch[k] = x[k * xs];
            x = xscratch;
        }
        if (ex_gemv_rows(c, mat, ld, x, g.c, col ? M : N, K)) {
            c->fast_run++;
            return OT_OK;
        }
    }
    run_gemm(c, &g, &va, &vb);
    c->fast_run++;
    return OT_OK;
}
