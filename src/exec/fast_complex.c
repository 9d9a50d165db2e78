/* The fast kernel of elementwise ops on complex values (kernels.h): the reference's arithmetic
 * (complex.c: ex_complex_elementwise) on ranges of elements split over the pool, without the
 * reference kernel's copies. Each element is computed by the same code whatever range it falls
 * in, so the bits are the reference's on any thread count. */
#include "exec/fast_internal.h"

#include <stdatomic.h>

typedef struct cx_job {
    const ot_instr *i;
    int nin;
    const char *in[3];
    size_t ies[3]; /* bytes of an element of each input */
    char *y;
    size_t yes;
    bool ftz;
    _Atomic int failed;
} cx_job;

/* abs of n c64 values x into y, each ex_cabs_f32 with the reference's flushes under FTZ. */
static void cabs_f32_scalar(const float *x, float *y, int64_t n, bool ftz) {
    for (int64_t e = 0; e < n; e++) {
        float re = x[2 * e], im = x[2 * e + 1];
        if (ftz) {
            re = fabsf(re) < FLT_MIN ? 0.0f : re; /* the sign does not matter to abs */
            im = fabsf(im) < FLT_MIN ? 0.0f : im;
        }
        float r = ex_cabs_f32(re, im);
        y[e] = ftz && r < FLT_MIN ? 0.0f : r;
    }
}

#ifdef EX_AVX512
/* The same, 8 values per step: each lane the same double arithmetic (squares, one add, one
 * correctly rounded square root, one rounding to float), so the bits are the scalar code's. */
EX_AVX512 static void cabs_f32_avx512(const float *x, float *y, int64_t n, bool ftz) {
    const __m512i ev = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
    const __m512i od = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
    const __m512d fmin = _mm512_set1_pd(FLT_MIN), inf = _mm512_set1_pd(INFINITY);
    int64_t e = 0;
    for (; e + 8 <= n; e += 8) {
        __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(x + 2 * e));
        __m512d hi = _mm512_cvtps_pd(_mm256_loadu_ps(x + 2 * e + 8));
        __m512d re = _mm512_abs_pd(_mm512_permutex2var_pd(lo, ev, hi));
        __m512d im = _mm512_abs_pd(_mm512_permutex2var_pd(lo, od, hi));
        if (ftz) {
            re = _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(re, fmin, _CMP_NLT_UQ), re);
            im = _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(im, fmin, _CMP_NLT_UQ), im);
        }
        __m512d r = _mm512_sqrt_pd(_mm512_add_pd(_mm512_mul_pd(re, re), _mm512_mul_pd(im, im)));
        __mmask8 isinf =
            _mm512_cmp_pd_mask(re, inf, _CMP_EQ_OQ) | _mm512_cmp_pd_mask(im, inf, _CMP_EQ_OQ);
        r = _mm512_mask_mov_pd(r, isinf, inf);
        __m256 f = _mm512_cvtpd_ps(r);
        if (ftz) /* r < FLT_MIN (NaN stays) */
            f = _mm256_maskz_mov_ps(~_mm256_cmp_ps_mask(f, _mm256_set1_ps(FLT_MIN), _CMP_LT_OQ), f);
        _mm256_storeu_ps(y + e, f);
    }
    cabs_f32_scalar(x + 2 * e, y + e, n - e, ftz);
}
#endif

static void cabs_f32(const float *x, float *y, int64_t n, bool ftz) {
#ifdef EX_AVX512
    if (ex_avx512()) {
        cabs_f32_avx512(x, y, n, ftz);
        return;
    }
#endif
    cabs_f32_scalar(x, y, n, ftz);
}

static void cx_range(void *arg, int64_t b, int64_t e, int ith) {
    (void)ith;
    cx_job *j = arg;
    const void *in[3] = {NULL, NULL, NULL};
    for (int k = 0; k < j->nin; k++) in[k] = j->in[k] + (size_t)b * j->ies[k];
    if (j->i->opcode == OT_OP_ABS && j->yes == 4) {
        cabs_f32(in[0], (float *)(void *)j->y + b, e - b, j->ftz);
        return;
    }
    bool ftz = ex_ftz;
    ex_ftz = j->ftz; /* the run's mode on this thread (flushes are the reference's) */
    if (ex_complex_elementwise(j->i, in, j->y + (size_t)b * j->yes, e - b) != OT_OK)
        atomic_store(&j->failed, 1);
    ex_ftz = ftz;
}

/* The ops ex_complex_elementwise runs element by element on operands of the output's size. */
static bool cx_op(const ot_instr *i) {
    switch (i->opcode) {
    case OT_OP_ADD:
    case OT_OP_SUBTRACT:
    case OT_OP_MULTIPLY:
    case OT_OP_DIVIDE:
    case OT_OP_NEGATE:
    case OT_OP_ABS:
    case OT_OP_EXP:
    case OT_OP_REAL:
    case OT_OP_IMAG:
    case OT_OP_COMPLEX:
    case OT_OP_COPY:
    case OT_OP_SELECT: return true;
    case OT_OP_CONVERT: return ot_dtype_is_complex(i->shape.array.dtype);
    case OT_OP_COMPARE: return i->attrs->cmp_dir == OT_CMP_EQ || i->attrs->cmp_dir == OT_CMP_NE;
    default: return false;
    }
}

ot_status ex_fast_complex(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                          const ex_leaf *ins, void *out, const ex_leaf *os, bool *done) {
    *done = false;
    if (i->shape.kind != OT_IR_ARRAY || nin < 1 || nin > 3 || nin != i->noperands || !cx_op(i))
        return OT_OK;
    int64_t n = ot_shape_numel_unchecked(os->shape);
    cx_job j;
    memset(&j, 0, sizeof j);
    j.i = i;
    j.nin = nin;
    j.y = out;
    j.yes = ot_dtype_size(os->shape->dtype);
    j.ftz = c->ftz;
    int64_t bytes = os->nbytes;
    for (int k = 0; k < nin; k++) {
        /* element e of every input is read before element e is written: an output that is
         * exactly an input is fine, a partial overlap is not */
        if (ot_shape_numel_unchecked(ins[k].shape) != n) return OT_OK;
        if (in[k] != out && ex_overlaps(out, os->nbytes, in[k], ins[k].nbytes)) return OT_OK;
        j.in[k] = in[k];
        j.ies[k] = ot_dtype_size(ins[k].shape->dtype);
        bytes += ins[k].nbytes;
    }
    if (n == 0) {
        *done = true;
        return OT_OK;
    }
    ex_par_for(c, n, bytes, cx_range, &j);
    *done = true;
    if (atomic_load(&j.failed))
        return ot_error(OT_ERR_OUT_OF_MEMORY, "%s: %s on %s: out of memory", EX_NAME(i),
                        ot_opcode_name(i->opcode), ot_dtype_name(os->shape->dtype));
    c->fast_run++;
    return OT_OK;
}

/* Complex sums (complex.c: ex_csum_*): rows (the reduced non-unit dims after the kept ones)
 * split over the pool by rows, or, for few long rows, by their blocks of the canonical order
 * (each block's lane tree apart, folded in block order afterwards); columns (the reduced non-unit
 * dims before the kept ones, summed one by one) split by columns, each range adding the rows in
 * order. Every output gets the reference's operations in its order, on any thread count. */
typedef struct cr_job {
    ot_dtype t;
    int64_t es; /* bytes of a complex value */
    bool ftz;
    const char *x;
    char *y;      /* rows, columns: the outputs */
    int64_t n;    /* rows: values per row; columns: values per row of the [R, C] view (C) */
    int64_t nb;   /* blocks: blocks per row */
    int64_t rows; /* columns: R */
    char *trees;  /* blocks: each block's tree */
} cr_job;

static void cr_rows(void *arg, int64_t b, int64_t e, int ith) {
    (void)ith;
    cr_job *j = arg;
    for (int64_t r = b; r < e; r++)
        ex_csum_row(j->t, j->x + r * j->n * j->es, j->n, j->ftz, j->y + r * j->es);
}

static void cr_blocks(void *arg, int64_t b, int64_t e, int ith) {
    (void)ith;
    cr_job *j = arg;
    for (int64_t q = b; q < e; q++)
        ex_csum_block(j->t, j->x + q / j->nb * j->n * j->es, j->n, q % j->nb, j->ftz,
                      j->trees + q * j->es);
}

static void cr_cols(void *arg, int64_t b, int64_t e, int ith) {
    (void)ith;
    cr_job *j = arg;
    for (int64_t r = 0; r < j->rows; r++)
        ex_csum_acc(j->t, j->x + (r * j->n + b) * j->es, e - b, j->ftz, j->y + b * j->es);
}

ot_status ex_fast_complex_reduce(ex_kernel_ctx *c, const ot_instr *i, void *const *in,
                                 const ex_leaf *ins, void *out, const ex_leaf *os, bool *done) {
    *done = false;
    if (!ex_complex_sum(i) || ot_shape_numel_unchecked(ins[1].shape) != 1 ||
        ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes))
        return OT_OK;
    const ot_shape *is = ins[0].shape;
    bool reduced[OT_MAX_RANK] = {false};
    for (int k = 0; k < i->attrs->ndims; k++) reduced[i->attrs->dims[k]] = true;
    /* the order of the non-unit dims: kept then reduced (rows), or reduced then kept (columns) */
    int64_t kept = 1, red = 1;
    bool red_seen = false, kept_after_red = false, red_after_kept = false, kept_seen = false;
    for (int d = 0; d < is->rank; d++) {
        if (is->dims[d] == 1) continue;
        if (reduced[d]) {
            red *= is->dims[d];
            red_after_kept |= kept_seen;
            red_seen = true;
        } else {
            kept *= is->dims[d];
            kept_after_red |= red_seen;
            kept_seen = true;
        }
    }
    bool lanes = ex_reduce_last_dim(i);
    if (lanes ? kept_after_red : red_after_kept) return OT_OK; /* interleaved: the reference */
    cr_job j = {.t = os->shape->dtype, .ftz = c->ftz, .x = in[0], .y = out};
    j.es = (int64_t)ot_dtype_size(j.t);
    for (int64_t e = 0; e < kept; e++) memcpy(j.y + e * j.es, in[1], (size_t)j.es);
    *done = true;
    int64_t bytes = ins[0].nbytes + os->nbytes;
    if (red * kept == 0) return OT_OK;
    if (!lanes) {
        j.rows = red;
        j.n = kept;
        ex_par_for(c, kept, bytes, cr_cols, &j);
    } else {
        j.n = red;
        j.nb = ex_csum_blocks(red);
        if (kept >= 64 || j.nb < 2) {
            ex_par_for(c, kept, bytes, cr_rows, &j);
        } else {
            void *tr;
            OT_CHECK(ex_scratch(c, (size_t)(kept * j.nb * j.es), &tr));
            j.trees = tr;
            ex_par_for(c, kept * j.nb, bytes, cr_blocks, &j);
            for (int64_t r = 0; r < kept; r++) {
                char *acc = j.y + r * j.es;
                for (int64_t q = 0; q < j.nb; q++)
                    ex_csum_acc(j.t, j.trees + (r * j.nb + q) * j.es, 1, j.ftz, acc);
                const char *row = j.x + r * red * j.es;
                for (int64_t q = ex_csum_tail(red); q < red; q++)
                    ex_csum_acc(j.t, row + q * j.es, 1, j.ftz, acc);
            }
        }
    }
    c->fast_run++;
    return OT_OK;
}
