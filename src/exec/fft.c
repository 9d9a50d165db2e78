/* The fft instruction (FFT, IFFT, RFFT, IRFFT over the 1 to 3 innermost dimensions) through KISS
 * FFT (BSD-3-Clause; Debian's libkissfft-dev, single precision).
 *
 * One routine serves the reference kernel (no pool: every line on the calling thread) and its
 * fast twin (the lines of each stage split over the run's pool): a line is always transformed by
 * the same code on its own, so the bits never depend on the thread count. A multi-dimensional
 * transform is 1-D transforms along each axis: the last axis first (RFFT: real to complex there,
 * then complex along the others; IRFFT: complex along the others first, complex to real last).
 * IFFT and IRFFT scale by 1/N (N = the product of fft_length) at the end, as XLA does.
 *
 * KISS FFT's configurations for complex transforms are read-only once made and shared by the
 * threads (out-of-place calls never touch their scratch); a real-transform configuration holds
 * scratch, so each piece of lines makes its own. c128 and f64 operands are refused: the Debian
 * build of KISS FFT is single precision only. */
#include "exec/fast_internal.h"

#include <kissfft/kiss_fft.h>
#include <kissfft/kiss_fftr.h>
#include <stdatomic.h>
#include <stdlib.h>

_Static_assert(sizeof(kiss_fft_cpx) == 8, "kiss_fft_cpx must be a c64 element (two floats)");

typedef struct fft_job {
    int rank;
    int64_t dims[OT_MAX_RANK]; /* the complex work array's dims (RFFT/IRFFT: last = n/2+1) */
    int axis;                  /* complex stage: the axis transformed */
    int64_t n;                 /* the line length of this stage (for real stages: fft_length) */
    bool inverse;
    kiss_fft_cfg cfg;   /* complex stage (shared, read-only), or the odd-length real stage's */
    kiss_fft_cpx *work; /* the complex work array */
    const float *rin;   /* RFFT: the real input */
    float *rout;        /* IRFFT: the real output */
    _Atomic int failed; /* a piece could not allocate its scratch */
} fft_job;

/* Elements of a line along job->axis: line l starts at base, stride s. */
static void line_of(const fft_job *j, int64_t l, int64_t *base, int64_t *stride) {
    int64_t s = 1;
    for (int d = j->axis + 1; d < j->rank; d++) s *= j->dims[d];
    int64_t outer = l / s, inner = l % s;
    *base = outer * j->dims[j->axis] * s + inner;
    *stride = s;
}

static void complex_lines(void *arg, int64_t b, int64_t e, int ith) {
    (void)ith;
    fft_job *j = arg;
    kiss_fft_cpx *tmp = malloc((size_t)j->n * sizeof *tmp);
    if (!tmp) {
        atomic_store(&j->failed, 1);
        return;
    }
    for (int64_t l = b; l < e; l++) {
        int64_t base, s;
        line_of(j, l, &base, &s);
        kiss_fft_stride(j->cfg, j->work + base, tmp, (int)s);
        for (int64_t q = 0; q < j->n; q++) j->work[base + q * s] = tmp[q];
    }
    free(tmp);
}

/* A real transform's per-range scratch: the real-input plan (even n; NULL for odd n, which goes
 * through the complex plan) and 2n complex values. On failure marks the job failed, frees what it
 * got and returns false. */
static bool real_line_scratch(fft_job *j, int inverse, kiss_fftr_cfg *rc, kiss_fft_cpx **tmp) {
    int64_t n = j->n;
    *rc = n % 2 == 0 ? kiss_fftr_alloc((int)n, inverse, NULL, NULL) : NULL;
    *tmp = malloc((size_t)n * 2 * sizeof **tmp);
    if ((n % 2 == 0 && !*rc) || !*tmp) {
        atomic_store(&j->failed, 1);
        free(*rc);
        free(*tmp);
        return false;
    }
    return true;
}

/* RFFT along the last axis: real lines of n -> complex lines of n/2+1. */
static void real_forward_lines(void *arg, int64_t b, int64_t e, int ith) {
    (void)ith;
    fft_job *j = arg;
    int64_t n = j->n, m = n / 2 + 1;
    kiss_fftr_cfg rc;
    kiss_fft_cpx *tmp;
    if (!real_line_scratch(j, 0, &rc, &tmp)) return;
    for (int64_t l = b; l < e; l++) {
        const float *x = j->rin + l * n;
        kiss_fft_cpx *w = j->work + l * m;
        if (rc) {
            kiss_fftr(rc, x, w);
        } else { /* odd length: a complex transform of the real line */
            for (int64_t q = 0; q < n; q++) tmp[q] = (kiss_fft_cpx){x[q], 0.0f};
            kiss_fft(j->cfg, tmp, tmp + n);
            memcpy(w, tmp + n, (size_t)m * sizeof *w);
        }
    }
    free(rc);
    free(tmp);
}

/* IRFFT along the last axis: complex lines of n/2+1 -> real lines of n (unscaled). The imaginary
 * parts of the DC and (even n) Nyquist terms are ignored, as a Hermitian spectrum has none. */
static void real_inverse_lines(void *arg, int64_t b, int64_t e, int ith) {
    (void)ith;
    fft_job *j = arg;
    int64_t n = j->n, m = n / 2 + 1;
    kiss_fftr_cfg rc;
    kiss_fft_cpx *tmp;
    if (!real_line_scratch(j, 1, &rc, &tmp)) return;
    for (int64_t l = b; l < e; l++) {
        const kiss_fft_cpx *w = j->work + l * m;
        float *y = j->rout + l * n;
        if (rc) {
            kiss_fftri(rc, w, y);
        } else { /* odd length: the Hermitian extension, inverse complex transform, real part */
            tmp[0] = (kiss_fft_cpx){w[0].r, 0.0f};
            for (int64_t q = 1; q < m; q++) {
                tmp[q] = w[q];
                tmp[n - q] = (kiss_fft_cpx){w[q].r, -w[q].i};
            }
            kiss_fft(j->cfg, tmp, tmp + n);
            for (int64_t q = 0; q < n; q++) y[q] = tmp[n + q].r;
        }
    }
    free(rc);
    free(tmp);
}

/* Runs fn over [0, lines) on c's pool, or on this thread when c is NULL. */
static void run_lines(ex_kernel_ctx *c, int64_t lines, int64_t bytes, ot_range_fn fn, fft_job *j) {
    if (c)
        ex_par_for(c, lines, bytes, fn, j);
    else if (lines)
        fn(j, 0, lines, 0);
}

static ot_status complex_stage(ex_kernel_ctx *c, fft_job *j, int axis, int64_t total) {
    j->axis = axis;
    j->n = j->dims[axis];
    j->cfg = kiss_fft_alloc((int)j->n, j->inverse, NULL, NULL);
    if (!j->cfg)
        return ot_error(OT_ERR_OUT_OF_MEMORY, "fft: out of memory (plan of %lld)", (long long)j->n);
    run_lines(c, total / j->n, total * 8, complex_lines, j);
    kiss_fft_free(j->cfg);
    j->cfg = NULL;
    return OT_OK;
}

static void scale(float *p, int64_t n, int64_t count) {
    float f = (float)(1.0 / (double)count);
    for (int64_t q = 0; q < n; q++) p[q] *= f;
}

ot_status ex_fft(ex_kernel_ctx *c, const ot_instr *i, const void *in, void *out) {
    const ot_shape *is = &i->operands[0]->shape.array, *os = &i->shape.array;
    int type = (int)i->attrs->index, k = i->attrs->ndims;
    const int64_t *len = i->attrs->dims;
    if (is->dtype == OT_C128 || is->dtype == OT_F64)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "fft %s: %s operands are not implemented (the FFT library, KISS FFT, is "
                        "built single precision: c64 and f32 run)",
                        EX_NAME(i), ot_dtype_name(is->dtype));
    int64_t count = 1;
    for (int q = 0; q < k; q++) {
        if (len[q] > INT32_MAX)
            return ot_error(OT_ERR_UNIMPLEMENTED, "fft %s: fft_length %lld above 2^31-1",
                            EX_NAME(i), (long long)len[q]);
        count *= len[q];
    }
    int64_t on = ot_shape_numel_unchecked(os), inn = ot_shape_numel_unchecked(is);
    if (on == 0 || inn == 0) return OT_OK;
    fft_job j;
    memset(&j, 0, sizeof j);
    const ot_shape *ws = type == OT_FFT_IRFFT ? is : os; /* the complex side */
    j.rank = ws->rank;
    memcpy(j.dims, ws->dims, sizeof j.dims);
    j.inverse = type == OT_FFT_IFFT || type == OT_FFT_IRFFT;
    int64_t wn = ot_shape_numel_unchecked(ws);
    int last = j.rank - 1;
    ot_status st = OT_OK;
    if (type == OT_FFT_FFT || type == OT_FFT_IFFT) {
        j.work = out;
        if (out != in) memcpy(out, in, (size_t)wn * 8);
        for (int a = last; a > last - k && st == OT_OK; a--) st = complex_stage(c, &j, a, wn);
        if (st == OT_OK && j.inverse) scale(out, 2 * wn, count);
    } else if (type == OT_FFT_RFFT) {
        j.work = out;
        j.rin = in;
        j.n = len[k - 1];
        if (j.n % 2) {
            j.cfg = kiss_fft_alloc((int)j.n, 0, NULL, NULL);
            if (!j.cfg) return ot_error(OT_ERR_OUT_OF_MEMORY, "fft %s: out of memory", EX_NAME(i));
        }
        run_lines(c, inn / j.n, inn * 4 + wn * 8, real_forward_lines, &j);
        kiss_fft_free(j.cfg);
        j.cfg = NULL;
        for (int a = last - 1; a > last - k && st == OT_OK; a--) st = complex_stage(c, &j, a, wn);
    } else {
        /* IRFFT: the complex stages need a copy of the input (it is not ours to overwrite) */
        j.work = malloc((size_t)wn * sizeof *j.work);
        if (!j.work) return ot_error(OT_ERR_OUT_OF_MEMORY, "fft %s: out of memory", EX_NAME(i));
        memcpy(j.work, in, (size_t)wn * 8);
        for (int a = last - 1; a > last - k && st == OT_OK; a--) st = complex_stage(c, &j, a, wn);
        if (st == OT_OK) {
            j.rout = out;
            j.n = len[k - 1];
            if (j.n % 2) j.cfg = kiss_fft_alloc((int)j.n, 1, NULL, NULL);
            if (j.n % 2 && !j.cfg)
                st = ot_error(OT_ERR_OUT_OF_MEMORY, "fft %s: out of memory", EX_NAME(i));
            else
                run_lines(c, on / j.n, on * 4 + wn * 8, real_inverse_lines, &j);
            kiss_fft_free(j.cfg);
            if (st == OT_OK) scale(out, on, count);
        }
        free(j.work);
    }
    if (st == OT_OK && atomic_load(&j.failed))
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "fft %s: out of memory (line scratch)", EX_NAME(i));
    return st;
}

ot_status ex_fast_fft(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                      void *out, const ex_leaf *os, bool *done) {
    *done = false;
    (void)ins;
    (void)os;
    const ot_shape *is = &i->operands[0]->shape.array;
    if (is->dtype != OT_C64 && is->dtype != OT_F32) return OT_OK; /* the reference refuses */
    if (ex_overlaps(in[0], ins[0].nbytes, out, os->nbytes) && in[0] != out) return OT_OK;
    *done = true;
    return ex_fft(c, i, in[0], out);
}
