/* The matrix x vector product with the matrix's rows along the contraction (ex_gemv_rows,
 * fast_internal.h): y = A x for an f32 A [M, K] stored row by row, as XLA's and JAX's `a @ v`
 * (a power iteration's step, a dense layer at batch 1). Each row's sum is 16 lane sums (lane l
 * takes k = l, l + 16, l + 32, ... by fma in order) added in a fixed tree: an order fixed by K
 * alone, so a row's bits do not depend on which rows share its register block, which task holds
 * it or how many threads run. The rows are cut into blocks of EX_GEMV_TASK over the pool by a fixed
 * partition: in a loop the same thread reads the same rows at each step, so a matrix of up to
 * twice a core's L2 stays there across the steps on two threads instead of streaming from L3
 * (OpenBLAS's sgemv ran such products on one thread). */
#include "exec/fast_internal.h"

#define GV_ROWS 8 /* rows per register block: 8 independent fma chains hide the fma latency */

typedef struct gv_run {
    const float *a;
    int64_t lda;
    const float *x;
    float *y;
    int64_t M, K;
    bool ftz;
    const ex_epilogue *epi;
} gv_run;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

/* The 16 lanes' sum: halves added (256, 128, 64, 32 bits), the same tree for every row. */
EX_AVX512 static inline float gv_sum(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* rows [i0, i1): blocks of GV_ROWS, then the rest one by one (each row the same lane sums) */
EX_AVX512 static void gv_rows(const gv_run *r, int64_t i0, int64_t i1) {
    const float *x = r->x;
    int64_t K = r->K, kv = K & ~(int64_t)15, lda = r->lda;
    __mmask16 tail = (__mmask16)((1u << (K & 15)) - 1);
    __m512 xt = _mm512_maskz_loadu_ps(tail, x + kv);
    int64_t i = i0;
    for (; i + GV_ROWS <= i1; i += GV_ROWS) {
        const float *a = r->a + i * lda;
        __m512 acc[GV_ROWS];
        for (int q = 0; q < GV_ROWS; q++) acc[q] = _mm512_setzero_ps();
        for (int64_t k = 0; k < kv; k += 16) {
            __m512 xv = _mm512_loadu_ps(x + k);
            for (int q = 0; q < GV_ROWS; q++)
                acc[q] = _mm512_fmadd_ps(_mm512_loadu_ps(a + q * lda + k), xv, acc[q]);
        }
        if (tail) /* lanes past K keep their sums (a masked fma: no 0 x inf, no -0 + 0) */
            for (int q = 0; q < GV_ROWS; q++)
                acc[q] = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(tail, a + q * lda + kv), xt,
                                               acc[q], tail);
        for (int q = 0; q < GV_ROWS; q++) r->y[i + q] = gv_sum(acc[q]);
    }
    for (; i < i1; i++) {
        const float *a = r->a + i * lda;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t k = 0; k < kv; k += 16)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(x + k), acc);
        if (tail) acc = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(tail, a + kv), xt, acc, tail);
        r->y[i] = gv_sum(acc);
    }
}

static void gv_tasks(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const gv_run *r = arg;
    /* under FTZ the CPU's FTZ | DAZ modes, as the OpenBLAS calls this replaces (fast_dot.c) */
    unsigned csr = r->ftz ? ex_hw_ftz_on() : 0;
    for (int64_t t = begin; t < end; t++) {
        int64_t i0 = t * EX_GEMV_TASK, i1 = i0 + EX_GEMV_TASK < r->M ? i0 + EX_GEMV_TASK : r->M;
        gv_rows(r, i0, i1);
        if (r->epi) r->epi->fn(r->epi->ctx, i0, i1);
    }
    if (r->ftz) ex_hw_ftz_off(csr);
}

bool ex_gemv_rows(ex_kernel_ctx *c, const float *a, int64_t lda, const float *x, float *y,
                  int64_t M, int64_t K) {
    if (!ex_avx512() || M < 1 || K < 1 || lda < K) return false;
    gv_run r = {a, lda, x, y, M, K, c->ftz, c->epilogue};
    ex_par_for(c, (M + EX_GEMV_TASK - 1) / EX_GEMV_TASK, M * K * 4, gv_tasks, &r);
    c->epilogue_done = c->epilogue != NULL;
    return true;
}

#else

bool ex_gemv_rows(ex_kernel_ctx *c, const float *a, int64_t lda, const float *x, float *y,
                  int64_t M, int64_t K) {
    (void)c, (void)a, (void)lda, (void)x, (void)y, (void)M, (void)K;
    return false;
}

#endif
