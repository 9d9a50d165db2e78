/* The fft instruction (FFT, IFFT, RFFT, IRFFT over the 1 to 3 innermost dimensions) on c64/f32
 * and c128/f64, by its own mixed-radix FFT that transforms many lines at once, one line per
 * vector lane (the method of pocketfft/ducc for multi-line transforms; docs/exec.md).
 *
 * A length n is planned as passes of radix 4, 2, 3, 5 and any odd prime up to FFT_MAX_RADIX
 * (pocketfft's decimation-in-frequency Stockham passes, ping-ponging between two buffers, the
 * twiddles computed in double from the first octant), or, where a large prime factor would make
 * that slow, by Bluestein's chirp-z algorithm through a transform of a 2^a 3^b 5^c length >= 2n-1;
 * so every length is O(n log n). Real transforms of even n go through a complex transform of n/2
 * and the standard split (fft_lanes.h: rfft_post, irfft_pre); odd n through the complex one.
 *
 * Lines are taken FL at a time (16 f32 / 8 f64 lanes of 64-byte vectors) into a lane-major
 * scratch, transformed there and stored back; a group short of FL lines pads with zero lanes.
 * One routine serves the reference kernel (no pool: every group on the calling thread) and its
 * fast twin (groups split over the run's pool): each line gets the same lane-wise arithmetic
 * wherever it lands, so the bits never depend on the thread count. A multi-dimensional transform
 * is 1-D transforms along each axis: the last axis first (RFFT: real to complex there, then
 * complex along the others; IRFFT: complex along the others first, complex to real last). IFFT
 * and IRFFT scale by 1/N (N = the product of fft_length) in their last stage, as XLA does. Plans
 * are read-only while the groups run and kept between calls in a bounded cache (tables_get). */
#include "exec/fast_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* no fused multiply-adds: the instances' bits stay equal */
#endif

enum { FFT_MAX_RADIX = 127, FFT_MAX_FACTORS = 64 };

/* One pass: radix p over l1 blocks of ido; tw: exp(+2 pi i j l1 i / n) for j in 1..p-1, i in
 * 1..ido-1 at [2 ((j-1)(ido-1) + i-1)]; rt (p > 5): exp(+2 pi i r / p), r < p. */
typedef struct fft_factor {
    int p;
    int64_t l1, ido;
    double *tw, *rt;
} fft_factor;

typedef struct fft_plan {
    int64_t n;
    int nf;
    fft_factor f[FFT_MAX_FACTORS];
    int64_t m;            /* Bluestein: the inner length (0: the passes above) */
    struct fft_plan *sub; /* Bluestein: the plan of m */
    double *bk, *bkf;     /* Bluestein: exp(i pi k^2 / n), k < n; the kernel's transform / m */
    double *mem;
    int64_t bytes; /* held by the plan and its sub-plan (the cache's measure) */
} fft_plan;

/* The values of work space a transform of p needs beside its n values. */
static int64_t fft_plan_work(const fft_plan *p) {
    return p->m ? 2 * p->m : p->n;
}

enum { FFT_STAGE_COMPLEX, FFT_STAGE_RFFT, FFT_STAGE_IRFFT };

typedef struct fft_job {
    int kind, fwd;
    const fft_plan *plan; /* complex: of n; real stages: of n/2 (even n) or n */
    int64_t n;            /* the line length (real stages: fft_length) */
    int64_t s;            /* complex: the stride of the axis, in elements */
    int64_t lines;
    void *work;       /* the complex work array */
    const void *rin;  /* RFFT: the real input */
    void *rout;       /* IRFFT: the real output */
    const double *rw; /* real stages of even n: exp(-2 pi i k / n), k <= n/4 */
    double scale;     /* nonzero: the results are multiplied by it (as the component type) */
    void (*groups)(struct fft_job *, int64_t, int64_t);
    _Atomic int failed; /* a range could not allocate its scratch */
} fft_job;

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi" /* 64-byte vectors in the baseline instances */
#endif
typedef float fft_v16f __attribute__((vector_size(64)));
typedef double fft_v8d __attribute__((vector_size(64)));

#define FT float
#define FV fft_v16f
#define FL 16
#define FT_TARGET
#define FT_MOVES 0
#define FN(x)    x##_f32
#include "exec/fft_lanes.h"
#undef FN
#undef FT
#undef FV
#undef FL

#define FT    double
#define FV    fft_v8d
#define FL    8
#define FN(x) x##_f64
#include "exec/fft_lanes.h"
#undef FN
#undef FT
#undef FV
#undef FL
#undef FT_TARGET
#undef FT_MOVES

#ifdef EX_AVX512
/* The AVX-512 instances' block moves between FL lines and the lane-major scratch d (FL vectors):
 * tr_in: d[k] lane l = rows[l][off + k] (an FL x FL transpose), tr_out its inverse; deint: d[0]
 * = the real parts of the FL complex values at p, d[1] the imaginary ones, inter its inverse. */
EX_AVX512 static inline void tr_in_f32x(float *restrict d, const float *const *rows, int64_t off) {
    __m512 r[16];
    for (int l = 0; l < 16; l++) r[l] = _mm512_loadu_ps(rows[l] + off);
    ex_tr16_ps(r);
    for (int k = 0; k < 16; k++) _mm512_store_ps(d + 16 * k, r[k]);
}
EX_AVX512 static inline void tr_out_f32x(const float *restrict d, float *const *rows, int64_t off) {
    __m512 r[16];
    for (int k = 0; k < 16; k++) r[k] = _mm512_load_ps(d + 16 * k);
    ex_tr16_ps(r);
    for (int l = 0; l < 16; l++) _mm512_storeu_ps(rows[l] + off, r[l]);
}
EX_AVX512 static inline void tr_in_f64x(double *restrict d, const double *const *rows,
                                        int64_t off) {
    __m512d r[8];
    for (int l = 0; l < 8; l++) r[l] = _mm512_loadu_pd(rows[l] + off);
    ex_tr8_pd(r);
    for (int k = 0; k < 8; k++) _mm512_store_pd(d + 8 * k, r[k]);
}
EX_AVX512 static inline void tr_out_f64x(const double *restrict d, double *const *rows,
                                         int64_t off) {
    __m512d r[8];
    for (int k = 0; k < 8; k++) r[k] = _mm512_load_pd(d + 8 * k);
    ex_tr8_pd(r);
    for (int l = 0; l < 8; l++) _mm512_storeu_pd(rows[l] + off, r[l]);
}
EX_AVX512 static inline void deint_f32x(float *restrict d, const float *p) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16);
    _mm512_store_ps(d, _mm512_permutex2var_ps(a, ev, b));
    _mm512_store_ps(d + 16, _mm512_permutex2var_ps(a, od, b));
}
EX_AVX512 static inline void inter_f32x(const float *restrict d, float *p) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    __m512 re = _mm512_load_ps(d), im = _mm512_load_ps(d + 16);
    _mm512_storeu_ps(p, _mm512_permutex2var_ps(re, lo, im));
    _mm512_storeu_ps(p + 16, _mm512_permutex2var_ps(re, hi, im));
}
EX_AVX512 static inline void deint_f64x(double *restrict d, const double *p) {
    const __m512i ev = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
    const __m512i od = _mm512_add_epi64(ev, _mm512_set1_epi64(1));
    __m512d a = _mm512_loadu_pd(p), b = _mm512_loadu_pd(p + 8);
    _mm512_store_pd(d, _mm512_permutex2var_pd(a, ev, b));
    _mm512_store_pd(d + 8, _mm512_permutex2var_pd(a, od, b));
}
EX_AVX512 static inline void inter_f64x(const double *restrict d, double *p) {
    const __m512i lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
    const __m512i hi = _mm512_add_epi64(lo, _mm512_set1_epi64(4));
    __m512d re = _mm512_load_pd(d), im = _mm512_load_pd(d + 8);
    _mm512_storeu_pd(p, _mm512_permutex2var_pd(re, lo, im));
    _mm512_storeu_pd(p + 8, _mm512_permutex2var_pd(re, hi, im));
}

#define FT_MOVES  1
#define FT_TARGET EX_AVX512
#define FT        float
#define FV        fft_v16f
#define FL        16
#define FN(x)     x##_f32x
#include "exec/fft_lanes.h"
#undef FN
#undef FT
#undef FV
#undef FL

#define FT    double
#define FV    fft_v8d
#define FL    8
#define FN(x) x##_f64x
#include "exec/fft_lanes.h"
#undef FN
#undef FT
#undef FV
#undef FL
#undef FT_TARGET
#undef FT_MOVES
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* exp(2 pi i r / n) for 0 <= r < n, from the first octant (so that symmetric values are exactly
 * symmetric and the error is that of one cos/sin of an angle <= pi/4). */
static void unit_root(int64_t r, int64_t n, double *c, double *s) {
    int64_t b = 4 * r; /* the angle in units of pi / (2n) */
    bool negs = false, negc = false, swap = false;
    if (b > 2 * n) b = 4 * n - b, negs = true; /* (pi, 2 pi): sin negative */
    if (b > n) b = 2 * n - b, negc = true;     /* (pi/2, pi]: cos negative */
    if (2 * b > n) b = n - b, swap = true;     /* (pi/4, pi/2]: cos and sin exchanged */
    double t = M_PI_2 * (double)b / (double)n, cc = cos(t), ss = sin(t);
    if (swap) {
        double u = cc;
        cc = ss;
        ss = u;
    }
    *c = negc ? -cc : cc;
    *s = negs ? -ss : ss;
}

static int factorize(int64_t n, int64_t *f) {
    int nf = 0;
    while (n % 4 == 0) f[nf++] = 4, n /= 4;
    if (n % 2 == 0) f[nf++] = 2, n /= 2;
    for (int64_t p = 3; p * p <= n; p += 2)
        while (n % p == 0) f[nf++] = p, n /= p;
    if (n > 1) f[nf++] = n;
    return nf;
}

/* pocketfft's cost model of the passes (larger radices a little dearer per value) */
static double cost_guess(int64_t n) {
    int64_t f[FFT_MAX_FACTORS];
    int nf = factorize(n, f);
    double r = 0;
    for (int q = 0; q < nf; q++) r += f[q] == 4 ? 4 : f[q] <= 5 ? (double)f[q] : 1.1 * (double)f[q];
    return r * (double)n;
}

/* The smallest 2^a 3^b 5^c >= n. */
static int64_t good_size(int64_t n) {
    int64_t best = 1;
    while (best < n) best *= 2;
    for (int64_t f5 = 1; f5 < best; f5 *= 5)
        for (int64_t f35 = f5; f35 < best; f35 *= 3) {
            int64_t x = f35;
            while (x < n) x *= 2;
            if (x < best) best = x;
        }
    return best;
}

static void plan_free(fft_plan *p) {
    if (!p) return;
    plan_free(p->sub);
    free(p->mem);
    free(p);
}

/* The plan of n >= 1, or NULL (out of memory). */
static fft_plan *plan_new(int64_t n) {
    fft_plan *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n;
    int64_t f[FFT_MAX_FACTORS];
    int nf = factorize(n, f);
    int64_t lpf = nf ? f[nf - 1] : 1;
    for (int q = 0; q < nf; q++) lpf = f[q] > lpf ? f[q] : lpf;
    if (lpf > FFT_MAX_RADIX ||
        (n >= 50 && lpf * lpf > n && 3.0 * cost_guess(good_size(2 * n - 1)) < cost_guess(n))) {
        int64_t m = good_size(2 * n - 1);
        p->m = m;
        p->sub = plan_new(m);
        p->mem = malloc((size_t)(2 * n + 2 * m) * sizeof *p->mem);
        cv_f64 *a = ot_aligned_alloc(64, (size_t)(2 * m) * sizeof *a);
        if (!p->sub || !p->mem || !a) {
            ot_aligned_free(a);
            plan_free(p);
            return NULL;
        }
        p->bk = p->mem;
        p->bkf = p->mem + 2 * n;
        p->bytes = (int64_t)sizeof *p + (2 * n + 2 * m) * 8 + p->sub->bytes;
        /* bk[k] = exp(i pi k^2 / n) = exp(2 pi i (k^2 mod 2n) / 2n) */
        for (int64_t k = 0, r = 0; k < n; k++) {
            unit_root(r, 2 * n, &p->bk[2 * k], &p->bk[2 * k + 1]);
            r = (r + 2 * k + 1) % (2 * n);
        }
        /* the kernel b (b[j] = b[m-j] = bk[j]) transformed in double in lane 0, scaled by 1/m */
        memset(a, 0, (size_t)(2 * m) * sizeof *a);
        for (int64_t k = 0; k < n; k++) {
            a[k].re[0] = p->bk[2 * k];
            a[k].im[0] = p->bk[2 * k + 1];
            if (k) a[m - k] = a[k];
        }
        cv_f64 *r = run_f64(p->sub, a, a + m, 1);
        for (int64_t k = 0; k < m; k++) {
            p->bkf[2 * k] = r[k].re[0] / (double)m;
            p->bkf[2 * k + 1] = r[k].im[0] / (double)m;
        }
        ot_aligned_free(a);
        return p;
    }
    int64_t total = 0, l1 = 1;
    for (int q = 0; q < nf; q++) {
        int64_t ido = n / (l1 * f[q]);
        total += 2 * (f[q] - 1) * (ido - 1) + (f[q] > 5 ? 2 * f[q] : 0);
        l1 *= f[q];
    }
    p->mem = malloc((size_t)(total ? total : 1) * sizeof *p->mem);
    if (!p->mem) {
        plan_free(p);
        return NULL;
    }
    double *t = p->mem;
    p->bytes = (int64_t)sizeof *p + total * 8;
    l1 = 1;
    p->nf = nf;
    for (int q = 0; q < nf; q++) {
        fft_factor *fc = &p->f[q];
        fc->p = (int)f[q];
        fc->l1 = l1;
        fc->ido = n / (l1 * f[q]);
        fc->tw = t;
        for (int64_t j = 1; j < f[q]; j++)
            for (int64_t i = 1; i < fc->ido; i++, t += 2) unit_root(j * l1 * i, n, t, t + 1);
        if (f[q] > 5) {
            fc->rt = t;
            for (int64_t r = 0; r < f[q]; r++, t += 2) unit_root(r, f[q], t, t + 1);
        }
        l1 *= f[q];
    }
    return p;
}

/* exp(-2 pi i k / n) for k <= n/4 (the real transforms' split), or NULL. */
static double *real_twiddles(int64_t n) {
    int64_t h = n / 2;
    double *w = malloc((size_t)(h / 2 + 1) * 2 * sizeof *w);
    if (!w) return NULL;
    for (int64_t k = 0; k <= h / 2; k++) unit_root(k ? n - k : 0, n, &w[2 * k], &w[2 * k + 1]);
    return w;
}

/* The plans of recent lengths, kept between calls: a plan (twiddles, Bluestein chirps and their
 * kernel's transform) costs O(n) cos/sin in double, and a Bluestein kernel a transform of its own,
 * which for a few lines is as dear as the transform itself. Keyed by the length and the stage
 * (complex, or real: the plan of n/2 or n and the split's twiddles); the tables are double for
 * every precision, so f32 and f64 transforms share them. Bounded by FFT_CACHE_ENTRIES entries and
 * FFT_CACHE_BYTES bytes (a plan above that is made and freed per call); the least recently used
 * entry that no call holds is dropped first. Entries are immutable once made and reference-
 * counted, so calls on any threads share them; one mutex guards the table (held for lookups
 * only, never while a plan is made). */
enum { FFT_CACHE_ENTRIES = 32 };
#define FFT_CACHE_BYTES ((int64_t)64 << 20)

typedef struct fft_tables {
    int64_t n;
    bool real;
    fft_plan *plan;
    double *rw; /* real stages of even n */
    int64_t bytes;
    int refs;      /* calls holding it (cached: while in the table, not counted) */
    bool cached;   /* in the table */
    uint64_t used; /* the table's clock at its last lookup */
} fft_tables;

static pthread_mutex_t g_fft_mu = PTHREAD_MUTEX_INITIALIZER;
static fft_tables *g_fft_cache[FFT_CACHE_ENTRIES];
static int64_t g_fft_cache_bytes;
static uint64_t g_fft_clock;
static _Atomic int64_t g_fft_made; /* tables made (tests: hits make none) */

static void tables_free(fft_tables *t) {
    if (!t) return;
    plan_free(t->plan);
    free(t->rw);
    free(t);
}

static fft_tables *tables_make(int64_t n, bool real) {
    fft_tables *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->n = n;
    t->real = real;
    t->plan = plan_new(real && n % 2 == 0 ? n / 2 : n);
    t->rw = real && n % 2 == 0 ? real_twiddles(n) : NULL;
    if (!t->plan || (real && n % 2 == 0 && !t->rw)) {
        tables_free(t);
        return NULL;
    }
    t->bytes = (int64_t)sizeof *t + t->plan->bytes + (real && n % 2 == 0 ? (n / 4 + 1) * 16 : 0);
    atomic_fetch_add(&g_fft_made, 1);
    return t;
}

/* The tables of (n, real), from the cache or made; NULL: out of memory. Release with
 * tables_release. */
static fft_tables *tables_get(int64_t n, bool real) {
    pthread_mutex_lock(&g_fft_mu);
    for (int k = 0; k < FFT_CACHE_ENTRIES; k++) {
        fft_tables *t = g_fft_cache[k];
        if (t && t->n == n && t->real == real) {
            t->refs++;
            t->used = ++g_fft_clock;
            pthread_mutex_unlock(&g_fft_mu);
            return t;
        }
    }
    pthread_mutex_unlock(&g_fft_mu);
    fft_tables *t = tables_make(n, real);
    if (!t) return NULL;
    t->refs = 1;
    if (t->bytes > FFT_CACHE_BYTES) return t; /* too large to keep */
    pthread_mutex_lock(&g_fft_mu);
    for (int k = 0; k < FFT_CACHE_ENTRIES; k++) { /* made meanwhile by another call: share it */
        fft_tables *o = g_fft_cache[k];
        if (o && o->n == n && o->real == real) {
            o->refs++;
            o->used = ++g_fft_clock;
            pthread_mutex_unlock(&g_fft_mu);
            tables_free(t);
            return o;
        }
    }
    /* room: drop unheld entries, least recently used first, until it fits */
    for (;;) {
        int empty = -1, lru = -1;
        for (int k = 0; k < FFT_CACHE_ENTRIES; k++) {
            fft_tables *o = g_fft_cache[k];
            if (!o)
                empty = k;
            else if (o->refs == 0 && (lru < 0 || o->used < g_fft_cache[lru]->used))
                lru = k;
        }
        if (empty >= 0 && g_fft_cache_bytes + t->bytes <= FFT_CACHE_BYTES) {
            t->cached = true;
            t->used = ++g_fft_clock;
            g_fft_cache[empty] = t;
            g_fft_cache_bytes += t->bytes;
            break;
        }
        if (lru < 0) break; /* everything held: this one is not kept */
        g_fft_cache_bytes -= g_fft_cache[lru]->bytes;
        tables_free(g_fft_cache[lru]);
        g_fft_cache[lru] = NULL;
    }
    pthread_mutex_unlock(&g_fft_mu);
    return t;
}

static void tables_release(fft_tables *t) {
    pthread_mutex_lock(&g_fft_mu);
    bool drop = --t->refs == 0 && !t->cached;
    pthread_mutex_unlock(&g_fft_mu);
    if (drop) tables_free(t);
}

void ex_fft_cache_clear(void) {
    pthread_mutex_lock(&g_fft_mu);
    for (int k = 0; k < FFT_CACHE_ENTRIES; k++) {
        fft_tables *t = g_fft_cache[k];
        if (!t) continue;
        g_fft_cache[k] = NULL;
        g_fft_cache_bytes -= t->bytes;
        t->cached = false;
        if (t->refs == 0) tables_free(t);
    }
    pthread_mutex_unlock(&g_fft_mu);
}

int64_t ex_fft_tables_made(void) {
    return atomic_load(&g_fft_made);
}

static void stage_range(void *arg, int64_t b, int64_t e, int ith) {
    (void)ith;
    fft_job *j = arg;
    j->groups(j, b, e);
}

/* Runs the job's groups on c's pool, or on this thread when c is NULL. */
static void run_groups(ex_kernel_ctx *c, fft_job *j, int vl, int64_t bytes) {
    int64_t groups = (j->lines + vl - 1) / vl;
    if (c)
        ex_par_for(c, groups, bytes, stage_range, j);
    else if (groups)
        j->groups(j, 0, groups);
}

static ot_status oom(const ot_instr *i) {
    return ot_error(OT_ERR_OUT_OF_MEMORY, "fft %s: out of memory", EX_NAME(i));
}

/* The complex transform along axis a of the work array (dims, rank; total values). */
static ot_status complex_stage(ex_kernel_ctx *c, const ot_instr *i, fft_job *j, const int64_t *dims,
                               int rank, int a, int64_t total, int vl, int64_t es) {
    j->kind = FFT_STAGE_COMPLEX;
    j->n = dims[a];
    j->s = 1;
    for (int d = a + 1; d < rank; d++) j->s *= dims[d];
    j->lines = total / j->n;
    fft_tables *t = tables_get(j->n, false);
    if (!t) return oom(i);
    j->plan = t->plan;
    run_groups(c, j, vl, total * 2 * es);
    tables_release(t);
    return OT_OK;
}

/* The real stage (RFFT or IRFFT along the last axis, n = fft_length) over `lines` lines. */
static ot_status real_stage(ex_kernel_ctx *c, const ot_instr *i, fft_job *j, int kind, int64_t n,
                            int64_t lines, int vl, int64_t bytes) {
    j->kind = kind;
    j->n = n;
    j->s = 1;
    j->lines = lines;
    fft_tables *t = tables_get(n, true);
    if (!t) return oom(i);
    j->plan = t->plan;
    j->rw = t->rw;
    run_groups(c, j, vl, bytes);
    tables_release(t);
    return OT_OK;
}

static bool g_force_baseline;

void ex_fft_force_baseline(bool on) {
    g_force_baseline = on;
}

static void pick_groups(fft_job *j, bool dbl) {
    j->groups = dbl ? groups_f64 : groups_f32;
#ifdef EX_AVX512
    if (ex_avx512() && !g_force_baseline) j->groups = dbl ? groups_f64x : groups_f32x;
#endif
}

ot_status ex_fft(ex_kernel_ctx *c, const ot_instr *i, const void *in, void *out) {
    const ot_shape *is = &i->operands[0]->shape.array, *os = &i->shape.array;
    int type = (int)i->attrs->index, k = i->attrs->ndims;
    const int64_t *len = i->attrs->dims;
    bool dbl = is->dtype == OT_C128 || is->dtype == OT_F64;
    int64_t es = dbl ? 8 : 4, count = 1; /* es: bytes of a real part */
    int vl = dbl ? 8 : 16;
    for (int q = 0; q < k; q++) count *= len[q];
    int64_t on = ot_shape_numel_unchecked(os), inn = ot_shape_numel_unchecked(is);
    if (on == 0 || inn == 0) return OT_OK;
    fft_job j;
    memset(&j, 0, sizeof j);
    pick_groups(&j, dbl);
    const ot_shape *ws = type == OT_FFT_IRFFT ? is : os; /* the complex side */
    int rank = ws->rank, last = rank - 1;
    j.fwd = type == OT_FFT_FFT || type == OT_FFT_RFFT;
    int64_t wn = ot_shape_numel_unchecked(ws);
    ot_status st = OT_OK;
    if (type == OT_FFT_FFT || type == OT_FFT_IFFT) {
        j.work = out;
        if (out != in) memcpy(out, in, (size_t)(wn * 2 * es));
        for (int a = last; a > last - k && st == OT_OK; a--) {
            if (a == last - k + 1 && !j.fwd) j.scale = 1.0 / (double)count; /* the last stage */
            st = complex_stage(c, i, &j, ws->dims, rank, a, wn, vl, es);
        }
    } else if (type == OT_FFT_RFFT) {
        j.work = out;
        j.rin = in;
        int64_t n = len[k - 1];
        st = real_stage(c, i, &j, FFT_STAGE_RFFT, n, inn / n, vl, inn * es + wn * 2 * es);
        for (int a = last - 1; a > last - k && st == OT_OK; a--)
            st = complex_stage(c, i, &j, ws->dims, rank, a, wn, vl, es);
    } else {
        /* IRFFT: the complex stages need a copy of the input (it is not ours to overwrite); a
         * 1-D transform only reads it */
        void *copy = NULL;
        if (k > 1) {
            copy = malloc((size_t)(wn * 2 * es));
            if (!copy) return oom(i);
            memcpy(copy, in, (size_t)(wn * 2 * es));
        }
        j.work = k > 1 ? copy : (void *)(uintptr_t)in;
        for (int a = last - 1; a > last - k && st == OT_OK; a--)
            st = complex_stage(c, i, &j, ws->dims, rank, a, wn, vl, es);
        if (st == OT_OK) {
            j.rout = out;
            int64_t n = len[k - 1];
            j.scale = 1.0 / (double)count;
            st = real_stage(c, i, &j, FFT_STAGE_IRFFT, n, on / n, vl, on * es + wn * 2 * es);
        }
        free(copy);
    }
    if (st == OT_OK && atomic_load(&j.failed))
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "fft %s: out of memory (line scratch)", EX_NAME(i));
    return st;
}

ot_status ex_fast_fft(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                      void *out, const ex_leaf *os, bool *done) {
    *done = false;
    if (ex_overlaps(in[0], ins[0].nbytes, out, os->nbytes) && in[0] != out) return OT_OK;
    *done = true;
    return ex_fft(c, i, in[0], out);
}
