/* Fast kernels' shared pieces (kernels.h says what the fast kernels are): the pool split, the
 * run's scratch, GEMM through OpenBLAS, the reference's scalar float arithmetic as inline
 * functions, and one entry per fast kernel. Each entry returns OT_OK with *done false when it
 * does not cover the instruction (the reference kernel then runs), OT_OK with *done true when its
 * result is in the output, or an error (out of memory for scratch) with *done true. The bits of
 * every fast kernel are independent of the thread count. */
#ifndef OT_EXEC_FAST_INTERNAL_H
#define OT_EXEC_FAST_INTERNAL_H

#include "exec/exec_internal.h"
#include "exec/kernels.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* Below this many bytes touched a kernel runs on the calling thread without waking the pool. */
#define EX_INLINE_BYTES ((int64_t)1 << 18)

/* Scratch of at least `bytes` (64-byte aligned) in c; contents are not kept across calls. */
ot_status ex_scratch(ex_kernel_ctx *c, size_t bytes, void **out);
/* Splits [0, n) over c's pool with a fixed partition (fn(arg, begin, end, thread)), or runs it on
 * the calling thread when it touches under EX_INLINE_BYTES bytes. */
void ex_par_for(ex_kernel_ctx *c, int64_t n, int64_t bytes, ot_range_fn fn, void *arg);
/* The same, items [0, n) handed out one at a time to whichever thread is free (for few large
 * items whose results do not depend on which thread computes them). */
void ex_par_for_dynamic(ex_kernel_ctx *c, int64_t n, int64_t bytes, ot_range_fn fn, void *arg);
/* The most threads ex_par_for / ex_par_for_dynamic will run work of `bytes` on (1 when it runs
 * inline): what per-thread scratch (indexed by the range function's thread number) is sized by. */
int ex_par_threads(ex_kernel_ctx *c, int64_t bytes);

/* fft (fft.c): every fft dtype, groups of lines split over the pool. */
ot_status ex_fast_fft(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                      void *out, const ex_leaf *os, bool *done);
/* Elementwise ops on complex values (fast_complex.c): the reference's arithmetic, ranges of
 * elements split over the pool. */
ot_status ex_fast_complex(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                          const ex_leaf *ins, void *out, const ex_leaf *os, bool *done);
/* Complex sums (fast_complex.c): reduces whose reduced and kept non-unit dims do not interleave,
 * split over the pool with the reference's order (complex.c: ex_csum_*). */
ot_status ex_fast_complex_reduce(ex_kernel_ctx *c, const ot_instr *i, void *const *in,
                                 const ex_leaf *ins, void *out, const ex_leaf *os, bool *done);
/* The fft's plan cache (fft.c): drops every entry no call holds (thread-safe); and how many plan
 * tables were made since the process started (tests: a cached length makes none). */
void ex_fft_cache_clear(void);
int64_t ex_fft_tables_made(void);
/* Tests: the fft's baseline instances (plain x86-64 code) in place of its AVX-512 ones on a CPU
 * with AVX-512; set between runs only. */
void ex_fft_force_baseline(bool on);

static inline size_t ex_align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}
static inline bool ex_overlaps(const void *a, int64_t na, const void *b, int64_t nb) {
    if (na <= 0 || nb <= 0) return false;
    const char *pa = a, *pb = b;
    return pa < pb + nb && pb < pa + na;
}

/* bf16 x bf16 dots under FTZ (fast_dot.c): whether their pairs run by vdpbf16ps (else widened,
 * by the f32 kernel: the same bits), decided once per process; *t_dp and *t_fma (either may be
 * NULL): the fastest of a few timed register blocks of each kind that decided it, ns (0 where no
 * measurement decided: OPTITPU_DPBF16 set, a CPU without AVX512_BF16, or not x86-64).
 * Thread-safe. */
bool ex_dot_bf16_dp(uint64_t *t_dp, uint64_t *t_fma);

/* 8-bit integer dots on AMX tiles (fast_dot_amx.c), which the fast dot (fast_dot.c) hands an
 * s8 / u8 x s8 / u8 dot into s32 or s64 whose partial sums int32 holds exactly (K times the
 * largest product below 2^31): exact sums, the reference's bits at any split. The operands are
 * row-major matrices, transposed or not, batch element b's at element offsets aoff[b], boff[b];
 * the result [nb, M, N] row-major. */
typedef struct ex_amx_dot {
    ot_dtype ad, bd, od;
    int64_t nb, M, N, K;
    const void *a, *b;
    void *out;
    bool ta, tb;      /* A stored [K, M], B stored [N, K] */
    int64_t lda, ldb; /* leading dimensions (elements) */
    const int64_t *aoff, *boff;
} ex_amx_dot;
/* Whether this process runs such dots on AMX: the CPU has AMX-TILE and AMX-INT8, the OS grants
 * the tile state (Linux: arch_prctl, requested here once per process) and OPTITPU_AMX is not 0.
 * Decided once; thread-safe. */
bool ex_amx_int8(void);
/* A dot of these dtypes and contraction length that ex_amx_dot_run computes (ex_amx_int8 too). */
bool ex_amx_int8_dot(ot_dtype a, ot_dtype b, ot_dtype o, int64_t K);
/* The scratch ex_amx_dot_run needs (the packed operands), and its compute tasks. */
size_t ex_amx_dot_scratch(const ex_amx_dot *d);
int64_t ex_amx_dot_tasks(const ex_amx_dot *d);
/* Computes the dot over c's pool, with scratch of ex_amx_dot_scratch bytes (64-byte aligned);
 * runs c->epilogue (if any) on each block of results as it is finished. */
void ex_amx_dot_run(ex_kernel_ctx *c, const ex_amx_dot *d, void *scratch);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* The AVX-512 kernels' target (the own GEMM, the transpose's 16 x 16 blocks), and whether this CPU
 * runs it (ex_avx512: what libgcc found at load, no cost worth caching). */
#define EX_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
bool ex_avx512(void);

/* The 16 x 16 block r[i] (lane k) transposed in place: r[k] lane i (bits moved, never rounded).
 * Four rounds of 16 shuffles: pairs of rows interleaved (unpack ps, then pd), then 128-bit lanes
 * exchanged. */
EX_AVX512 static inline void ex_tr16_ps(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* u[4i + c], lane block j: element 4j + c of rows 4i..4i+3 */
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
        __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    for (int c = 0; c < 4; c++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
        __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
        __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        __m512 w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
        r[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
        r[4 + c] = _mm512_shuffle_f32x4(v1, w1, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
    }
}

/* The 8 x 8 block r[i] (lane k) transposed in place: r[k] lane i. Pairs of rows interleaved,
 * then 128-bit lanes exchanged twice. */
EX_AVX512 static inline void ex_tr8_pd(__m512d r[8]) {
    __m512d t[8], u[8];
    for (int i = 0; i < 4; i++) { /* t[2i] lane pair j: (r[2i][2j], r[2i+1][2j]); t[2i+1]: odd */
        t[2 * i] = _mm512_unpacklo_pd(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_pd(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) /* rows 4h..4h+3: u[4h + c], c < 4, columns c, c + 4 */
        for (int o = 0; o < 2; o++) {
            u[4 * h + o] = _mm512_shuffle_f64x2(t[4 * h + o], t[4 * h + 2 + o], 0x88);
            u[4 * h + 2 + o] = _mm512_shuffle_f64x2(t[4 * h + o], t[4 * h + 2 + o], 0xdd);
        }
    /* u[c] (c < 4) holds columns: c = 0: 0, 4; 1: 1, 5; 2: 2, 6; 3: 3, 7 as pairs of rows 0..3 */
    for (int c = 0; c < 4; c++) {
        r[c] = _mm512_shuffle_f64x2(u[c], u[4 + c], 0x88);
        r[4 + c] = _mm512_shuffle_f64x2(u[c], u[4 + c], 0xdd);
    }
}
#endif

/* Transposes an array of rank r with dims `dims` and element size es: result dim k is input dim
 * perm[k]. Blocked for cache (tiles over the input's innermost contiguous dims and the output's
 * last), split over the pool for large arrays. src and dst must not overlap. */
void ex_transpose(ex_kernel_ctx *c, size_t es, int r, const int64_t *dims, const int64_t *perm,
                  const void *src, void *dst);
/* Tests: the last-level cache size ex_transpose assumes (0: the machine's, read again), which
 * decides when a transpose keeping its rows streams them in the input's order; set between runs
 * only. */
void ex_transpose_set_llc(int64_t bytes);

/* C[b] (M x N) = op(A[b]) (M x K) * op(B[b]) (K x N) for b < nb, row-major, f32 or f64, through
 * OpenBLAS on one thread per tile of a grid fixed by the shape (fast_dot.c). */
typedef struct ex_gemm {
    ot_dtype t;
    int64_t nb, M, N, K;
    bool ta, tb;
    const void *a, *b;
    void *c;
    int64_t tm, tn;  /* tiles along M and N */
    bool ftz;        /* flush subnormal results, each tile right after its GEMM (still in cache) */
    ot_dtype ad, bd; /* the operands' dtypes: t, or with the own f32 GEMM (fast_dot.c) bf16 or
                        f16, widened to f32 as they are packed */
} ex_gemm;
void ex_run_gemm(ex_kernel_ctx *c, ex_gemm *g);
/* y = A x (fast_gemv.c): f32 A [M, K] stored row by row (row stride lda >= K), x [K] and y [M]
 * contiguous, y not overlapping A or x. Each y[i] is the sum of A[i, k] x[k] in an order fixed
 * by K alone (16 lane sums by fma in k order, then a fixed tree), so the bits do not depend on
 * the thread count; within 2 K u sum |a||x| of the reference's chain, as OpenBLAS's sgemv which
 * it replaces. Rows in fixed blocks of EX_GEMV_TASK over c's pool; c->epilogue (when set) applied
 * to each block and epilogue_done set. Under c->ftz the CPU's FTZ | DAZ modes. False (nothing
 * written) on a CPU without AVX-512. */
bool ex_gemv_rows(ex_kernel_ctx *c, const float *a, int64_t lda, const float *x, float *y,
                  int64_t M, int64_t K);
#define EX_GEMV_TASK 32 /* ex_gemv_rows: rows per task of the pool */
/* Operands and result of one dtype, f32 or f64: what the GEMM kernels take. */
static inline bool ex_gemm_dtype(ot_dtype a, ot_dtype b, ot_dtype o) {
    return a == b && b == o && (o == OT_F32 || o == OT_F64);
}
/* Subnormal f32/f64 values of y[0..n) to zero of the same sign (the reference's FTZ). */
void ex_flush_out(ot_dtype t, void *y, int64_t n);

/* The reference's scalar arithmetic: add and multiply flush inputs and result under FTZ;
 * maximum and minimum are IEEE 754-2019 (NaN propagates, -0 < +0) on DAZ inputs (a subnormal
 * counts as a signed zero). */
static inline float fz_f(float v, bool ftz) {
    return ftz && v != 0 && fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v;
}
static inline double fz_d(double v, bool ftz) {
    return ftz && v != 0 && fabs(v) < DBL_MIN ? copysign(0.0, v) : v;
}
/* A sum under FTZ (the fast reduce, the fast scatter) runs its loops with the CPU's flush-to-zero
 * and denormals-are-zero modes set (x86 MXCSR, as generated code and XLA's CPU client do) and plain
 * adds: an add reads subnormal operands as signed zeros and flushes a subnormal sum to a signed
 * zero, exactly the reference's software flushing of its operands and result (a sum below the
 * normal range is exact, so the hardware's tininess rule and rounding-then-flushing agree). The
 * mode is set and restored by each piece of work on its own thread; the empty asm statements keep
 * the loops' loads and stores between the switches. */
#if defined(__x86_64__) && defined(__SSE2__)
#include <xmmintrin.h>
#define EX_HW_FTZ 1
static inline unsigned ex_hw_ftz_on(void) {
    unsigned c = _mm_getcsr();
    _mm_setcsr(c | 0x8040u); /* FTZ | DAZ */
    __asm__ volatile("" ::: "memory");
    return c;
}
static inline void ex_hw_ftz_off(unsigned c) {
    __asm__ volatile("" ::: "memory");
    _mm_setcsr(c);
}
#else
#define EX_HW_FTZ 0
static inline unsigned ex_hw_ftz_on(void) {
    return 0;
}
static inline void ex_hw_ftz_off(unsigned c) {
    (void)c;
}
#endif

static inline float add_f(float a, float b, bool z) {
    return fz_f(fz_f(a, z) + fz_f(b, z), z);
}
static inline double add_d(double a, double b, bool z) {
    return fz_d(fz_d(a, z) + fz_d(b, z), z);
}
static inline float mul_f(float a, float b, bool z) {
    if (!z) return a * b;
    return ex_tiny_f((double)fz_f(a, z) * (double)fz_f(b, z)); /* tininess as the reference */
}
static inline double mul_d(double a, double b, bool z) {
    return fz_d(fz_d(a, z) * fz_d(b, z), z);
}
static inline double max_d(double a, double b, bool z) {
    a = fz_d(a, z), b = fz_d(b, z); /* DAZ, as the reference (subnormals count as signed zeros) */
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    if (a == b) return signbit(a) ? b : a;
    return a > b ? a : b;
}
static inline double min_d(double a, double b, bool z) {
    a = fz_d(a, z), b = fz_d(b, z); /* DAZ, as the reference (subnormals count as signed zeros) */
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    if (a == b) return signbit(a) ? a : b;
    return a < b ? a : b;
}
/* A float NaN with its quiet bit set: the reference computes f32 maximum/minimum in double, and
 * the conversion to double quiets a signalling NaN (payload kept). */
static inline float quiet_f(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u |= 0x400000u;
    memcpy(&v, &u, 4);
    return v;
}
static inline float max_f(float a, float b, bool z) {
    a = fz_f(a, z), b = fz_f(b, z); /* DAZ, as the reference (subnormals count as signed zeros) */
    if (isnan(a)) return quiet_f(a);
    if (isnan(b)) return quiet_f(b);
    if (a == b) return signbit(a) ? b : a;
    return a > b ? a : b;
}
static inline float min_f(float a, float b, bool z) {
    a = fz_f(a, z), b = fz_f(b, z); /* DAZ, as the reference (subnormals count as signed zeros) */
    if (isnan(a)) return quiet_f(a);
    if (isnan(b)) return quiet_f(b);
    if (a == b) return signbit(a) ? a : b;
    return a < b ? a : b;
}

static inline float sub_f(float a, float b, bool z) {
    return fz_f(fz_f(a, z) - fz_f(b, z), z);
}
static inline double sub_d(double a, double b, bool z) {
    return fz_d(fz_d(a, z) - fz_d(b, z), z);
}
static inline float div_f(float a, float b, bool z) {
    if (!z) return a / b;
    return ex_tiny_f((double)fz_f(a, z) / (double)fz_f(b, z)); /* tininess as the reference */
}
static inline double div_d(double a, double b, bool z) {
    return fz_d(fz_d(a, z) / fz_d(b, z), z);
}

/* ---- the fast kernels (instruction i; in/ins its input leaves, out/os its one output) ------- */

/* The 8-bit block-wise optimizer update (exec/state8.h): several outputs, in place allowed. */
ot_status ex_fast_state8(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                         const ex_leaf *ins, int nout, void *const *out, const ex_leaf *outs,
                         bool *done);
/* Its table quantizer (tests): whether the table passed its checks, and one value's code; the
 * kernel's block quantizer (256 codes of x[] / am, am finite and nonzero; false when the table
 * failed its checks) and decode (map[c[e]] * a), the versions the CPU takes, in the caller's
 * floating-point modes. */
bool ex_q8_fast_table_ok(void);
uint8_t ex_q8_code_table(float xn, bool sgn);
bool ex_q8_quantize_fast(const float *x, float am, bool sgn, uint8_t *co);
int ex_q8_fast_quantizer(bool *est_possible); /* 2 estimate, 1 table, 0 exact */
void ex_q8_decode_fast(const uint8_t *c, bool sgn, float a, float *x);
/* Tests: with force, the reciprocal quantizer hands every 64 values to the estimate quantizer (as
 * it does those near a code boundary), so that path is taken on any data; set between runs only
 * (not thread-safe). */
void ex_q8_force_estimate(bool force);

ot_status ex_fast_dot(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                      void *out, const ex_leaf *os, bool *done);
ot_status ex_fast_conv(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                       void *out, const ex_leaf *os, bool *done);
#ifdef OT_HAVE_DNNL
/* The convolution through oneDNN where it covers it (fast_conv_dnnl.c); ex_fast_conv tries it
 * first. */
ot_status ex_fast_conv_dnnl(ex_kernel_ctx *c, const ot_instr *i, void *const *in,
                            const ex_leaf *ins, void *out, const ex_leaf *os, bool *done);
#endif
ot_status ex_fast_transpose(ex_kernel_ctx *c, const ot_instr *i, void *const *in,
                            const ex_leaf *ins, void *out, const ex_leaf *os, bool *done);
ot_status ex_fast_reduce(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                         void *out, const ex_leaf *os, bool *done);
/* A fusion that is one reduce of a parameter from a parameter or a scalar constant. */
ot_status ex_fast_reduce_fusion(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                                const ex_leaf *ins, void *out, const ex_leaf *os, bool *done);
/* A reduce of (values, indices) by JAX's argmax/argmin reducer (f32/f64 values, s32/s64
 * indices; two outputs, neither overlapping an input). */
ot_status ex_fast_argreduce(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                            const ex_leaf *ins, int nout, void *const *out, const ex_leaf *outs,
                            bool *done);
ot_status ex_fast_elementwise(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                              const ex_leaf *ins, void *out, const ex_leaf *os, bool *done);
ot_status ex_fast_gather(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                         void *out, const ex_leaf *os, bool *done);
/* reduce-window of one input and select-and-scatter (fast_window.c). */
ot_status ex_fast_reduce_window(ex_kernel_ctx *c, const ot_instr *i, void *const *in,
                                const ex_leaf *ins, void *out, const ex_leaf *os, bool *done);
ot_status ex_fast_select_and_scatter(ex_kernel_ctx *c, const ot_instr *i, void *const *in,
                                     const ex_leaf *ins, void *out, const ex_leaf *os, bool *done);
/* jaxlib's LAPACK custom calls (lapack.c): the matrices of a batch split over the pool, each
 * computed as the reference kernel computes it. */
ot_status ex_fast_lapack(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                         const ex_leaf *ins, int nout, void *const *out, const ex_leaf *outs,
                         bool *fast);
/* A sort whose comparator orders keys of its first operand (the others permuted as it), and
 * topk (fast_sort.c). */
ot_status ex_fast_sort(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                       const ex_leaf *ins, int nout, void *const *out, const ex_leaf *outs,
                       bool *done);
ot_status ex_fast_topk(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                       const ex_leaf *ins, int nout, void *const *out, const ex_leaf *outs,
                       bool *done);
/* Slice, dynamic-slice, dynamic-update-slice, concatenate, pad, broadcast and reverse as copies
 * of contiguous runs (fast_shape.c); a dynamic-update-slice's out may be exactly in[0]'s memory. */
ot_status ex_fast_shape(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                        const ex_leaf *ins, void *out, const ex_leaf *os, bool *done);
/* out may be exactly in[0]'s memory (the scatter updates in place). */
ot_status ex_fast_scatter(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                          void *out, const ex_leaf *os, bool *done);

#endif
