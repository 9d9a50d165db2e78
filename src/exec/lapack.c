/* jaxlib's LAPACK custom calls (ir/lapack_call.h: targets, flags, shapes), run by OpenBLAS's
 * LAPACK and BLAS, with the semantics of XLA's CPU kernels (jaxlib/cpu/lapack_kernels.cc): one
 * routine call per matrix of the batch, in batch order; every status a routine reports through
 * info is an output (potrf's info > 0 for a matrix that is not positive definite, getrf's for an
 * exactly singular U, syevd's and gesdd's for no convergence), never an error, as JAX masks the
 * results itself (cholesky gives NaN there). This is the one implementation: the reference
 * evaluator calls it and the native runtime runs the reference kernel for custom calls, so both
 * agree bit for bit.
 *
 * Layout: optitpu's arrays are row-major, LAPACK's column-major. potrf and trsm run on the
 * row-major data as it is (a row-major matrix is its transpose in column-major, so potrf runs
 * with uplo swapped, and trsm through CBLAS's row-major interface); the others copy each matrix
 * into a column-major scratch and their results back. In the flush-to-zero mode (the default, as
 * XLA's CPU backend) the routines run with MXCSR's FTZ and DAZ set, as XLA runs them. OpenBLAS runs
 * on one thread per call, so results do not depend on the thread count (as for the dots,
 * src/exec/fast_dot.c).
 *
 * Two entries share one per-matrix routine (lk_one): the reference kernel runs the batch in order
 * on the calling thread; the fast kernel hands the matrices of a batch to the pool's threads
 * (each matrix computed exactly as the reference computes it, so the bits are the same at any
 * thread count), reading and writing the runtime's buffers in place. */
#include "exec/exec_internal.h"
#include "exec/fast_internal.h"
#include "ir/lapack_call.h"

#include <cblas.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <xmmintrin.h>

/* LAPACK's Fortran interface as OpenBLAS exports it (character arguments carry their hidden
 * lengths last, gfortran's convention). */
typedef size_t flen;
void spotrf_(const char *uplo, const blasint *n, float *a, const blasint *lda, blasint *info, flen);
void dpotrf_(const char *uplo, const blasint *n, double *a, const blasint *lda, blasint *info,
             flen);
void sgetrf_(const blasint *m, const blasint *n, float *a, const blasint *lda, blasint *ipiv,
             blasint *info);
void dgetrf_(const blasint *m, const blasint *n, double *a, const blasint *lda, blasint *ipiv,
             blasint *info);
void sgeqrf_(const blasint *m, const blasint *n, float *a, const blasint *lda, float *tau,
             float *work, const blasint *lwork, blasint *info);
void dgeqrf_(const blasint *m, const blasint *n, double *a, const blasint *lda, double *tau,
             double *work, const blasint *lwork, blasint *info);
void sorgqr_(const blasint *m, const blasint *n, const blasint *k, float *a, const blasint *lda,
             const float *tau, float *work, const blasint *lwork, blasint *info);
void dorgqr_(const blasint *m, const blasint *n, const blasint *k, double *a, const blasint *lda,
             const double *tau, double *work, const blasint *lwork, blasint *info);
void ssyevd_(const char *jobz, const char *uplo, const blasint *n, float *a, const blasint *lda,
             float *w, float *work, const blasint *lwork, blasint *iwork, const blasint *liwork,
             blasint *info, flen, flen);
void dsyevd_(const char *jobz, const char *uplo, const blasint *n, double *a, const blasint *lda,
             double *w, double *work, const blasint *lwork, blasint *iwork, const blasint *liwork,
             blasint *info, flen, flen);
void sgesdd_(const char *jobz, const blasint *m, const blasint *n, float *a, const blasint *lda,
             float *s, float *u, const blasint *ldu, float *vt, const blasint *ldvt, float *work,
             const blasint *lwork, blasint *iwork, blasint *info, flen);
void dgesdd_(const char *jobz, const blasint *m, const blasint *n, double *a, const blasint *lda,
             double *s, double *u, const blasint *ldu, double *vt, const blasint *ldvt,
             double *work, const blasint *lwork, blasint *iwork, blasint *info, flen);
void sgesvd_(const char *jobu, const char *jobvt, const blasint *m, const blasint *n, float *a,
             const blasint *lda, float *s, float *u, const blasint *ldu, float *vt,
             const blasint *ldvt, float *work, const blasint *lwork, blasint *info, flen, flen);
void dgesvd_(const char *jobu, const char *jobvt, const blasint *m, const blasint *n, double *a,
             const blasint *lda, double *s, double *u, const blasint *ldu, double *vt,
             const blasint *ldvt, double *work, const blasint *lwork, blasint *info, flen, flen);

/* One custom call: sizes, buffers, and the per-thread workspace layout. */
typedef struct lk {
    ir_lapack_call lc;
    const char *name;
    bool f64;
    size_t es;
    int64_t batch, m, n, mn;
    blasint M, N, K, ld;
    const char *a, *b; /* operand 0; operand 1 (orgqr's tau, trsm's right-hand side) or NULL */
    char *out[5];      /* the result's leaves */
    int nout;
    blasint tk;     /* orgqr: reflectors */
    blasint bm, bn; /* trsm: the right-hand side's rows and columns */
    int64_t uc, vr; /* gesdd/gesvd: u's columns, vt's rows */
    bool uv;        /* gesdd/gesvd: u and vt computed (mode A or S) */
    blasint lwork, liwork;
    size_t o_work, o_u, o_vt, o_iw, ws_bytes; /* offsets in one thread's workspace (w at 0) */
    char *ws;                                 /* nthreads x ws_bytes */
    _Atomic int bad;                          /* a routine refused argument -bad (0: none) */
    bool ftz;  /* FTZ/DAZ set around the routines (the flush-to-zero mode), as XLA runs them */
    bool v512; /* to_colmajor's AVX-512 tiles */
} lk;

/* A workspace query's answer (a float holding an integer) as a count, at least 1. */
static ot_status work_count(const lk *p, double q, blasint *out) {
    if (!(q >= 0) || q > (double)INT_MAX)
        return ot_error(OT_ERR_INTERNAL, "custom-call %s: LAPACK asked for a workspace of %g",
                        p->name, q);
    *out = q < 1 ? 1 : (blasint)q;
    return OT_OK;
}

/* Sizes from operand 0's shape (and operand 1's, result's), then the routines' workspace
 * queries (lwork = -1: they read no matrix). Buffers are set by the caller. */
static ot_status lk_plan(lk *p, const ot_instr *i, const ir_lapack_call *lc, const ot_shape *as,
                         const ot_shape *bs) {
    memset(p, 0, sizeof *p);
    p->lc = *lc;
    p->name = i->attrs->custom_call_target;
    p->f64 = lc->dtype == OT_F64;
    p->es = p->f64 ? 8 : 4;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    p->v512 = ex_avx512();
#endif
    int nb = as->rank - 2;
    p->batch = 1;
    for (int d = 0; d < nb; d++) p->batch *= as->dims[d];
    p->m = as->dims[nb];
    p->n = as->dims[nb + 1];
    if (p->m > INT_MAX || p->n > INT_MAX || (p->m && p->n > INT64_MAX / 8 / p->m))
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "custom-call %s: a %lld x %lld matrix is beyond LAPACK's 32-bit sizes",
                        EX_NAME(i), (long long)p->m, (long long)p->n);
    p->mn = p->m * p->n;
    p->M = (blasint)p->m;
    p->N = (blasint)p->n;
    p->K = p->M < p->N ? p->M : p->N;
    p->ld = p->M > 1 ? p->M : 1;
    if (lc->op == IR_LAPACK_ORGQR) p->tk = (blasint)bs->dims[nb];
    if (lc->op == IR_LAPACK_TRSM) {
        if (bs->dims[nb] > INT_MAX || bs->dims[nb + 1] > INT_MAX)
            return ot_error(OT_ERR_UNIMPLEMENTED, "custom-call %s: beyond BLAS's 32-bit sizes",
                            EX_NAME(i));
        p->bm = (blasint)bs->dims[nb];
        p->bn = (blasint)bs->dims[nb + 1];
    }
    if (lc->op == IR_LAPACK_GESDD || lc->op == IR_LAPACK_GESVD) {
        p->uc = i->shape.tuple[2].array.dims[nb + 1];
        p->vr = i->shape.tuple[3].array.dims[nb];
        p->uv = lc->mode != 'N';
    }
    /* workspace queries */
    double q = 0, dummy[1] = {0};
    float qf = 0, dummyf[1] = {0};
    blasint info = 0, m1 = -1, qi = 0;
    char jobz = lc->mode, uplo = lc->uplo;
    blasint ldu = p->uv && p->M > 1 ? p->M : 1, ldvt = p->uv && p->vr > 1 ? (blasint)p->vr : 1;
    void *dm = p->f64 ? (void *)dummy : (void *)dummyf;
    switch (lc->op) {
    case IR_LAPACK_GEQRF:
        if (p->f64)
            dgeqrf_(&p->M, &p->N, dm, &p->ld, dm, &q, &m1, &info);
        else
            sgeqrf_(&p->M, &p->N, dm, &p->ld, dm, &qf, &m1, &info);
        break;
    case IR_LAPACK_ORGQR:
        if (p->f64)
            dorgqr_(&p->M, &p->N, &p->tk, dm, &p->ld, dm, &q, &m1, &info);
        else
            sorgqr_(&p->M, &p->N, &p->tk, dm, &p->ld, dm, &qf, &m1, &info);
        break;
    case IR_LAPACK_SYEVD:
        if (p->f64)
            dsyevd_(&jobz, &uplo, &p->N, dm, &p->ld, dm, &q, &m1, &qi, &m1, &info, 1, 1);
        else
            ssyevd_(&jobz, &uplo, &p->N, dm, &p->ld, dm, &qf, &m1, &qi, &m1, &info, 1, 1);
        break;
    case IR_LAPACK_GESDD:
        if (p->f64)
            dgesdd_(&jobz, &p->M, &p->N, dm, &p->ld, dm, dm, &ldu, dm, &ldvt, &q, &m1, &qi, &info,
                    1);
        else
            sgesdd_(&jobz, &p->M, &p->N, dm, &p->ld, dm, dm, &ldu, dm, &ldvt, &qf, &m1, &qi, &info,
                    1);
        break;
    case IR_LAPACK_GESVD:
        if (p->f64)
            dgesvd_(&jobz, &jobz, &p->M, &p->N, dm, &p->ld, dm, dm, &ldu, dm, &ldvt, &q, &m1, &info,
                    1, 1);
        else
            sgesvd_(&jobz, &jobz, &p->M, &p->N, dm, &p->ld, dm, dm, &ldu, dm, &ldvt, &qf, &m1,
                    &info, 1, 1);
        break;
    default: break;
    }
    if (info < 0)
        return ot_error(OT_ERR_INTERNAL, "custom-call %s: LAPACK refused argument %d", p->name,
                        (int)-info);
    if (!p->f64) q = qf;
    p->lwork = 1;
    OT_CHECK(work_count(p, q, &p->lwork));
    p->liwork = qi < 1 ? 1 : qi;
    if (lc->op == IR_LAPACK_GETRF) p->liwork = p->K ? p->K : 1;
    if (lc->op == IR_LAPACK_GESDD) p->liwork = 8 * (p->K ? p->K : 1);
    /* one thread's workspace: the column-major matrix, work, u, vt, the integer work */
    bool col = lc->op != IR_LAPACK_POTRF && lc->op != IR_LAPACK_TRSM;
    size_t off = col ? ex_align64((size_t)p->mn * p->es) : 0;
    p->o_work = off;
    if (col) off += ex_align64((size_t)p->lwork * p->es);
    p->o_u = off;
    if (p->uv) off += ex_align64((size_t)(p->m * p->uc) * p->es);
    p->o_vt = off;
    if (p->uv) off += ex_align64((size_t)(p->vr * p->n) * p->es);
    p->o_iw = off;
    if (col) off += ex_align64((size_t)p->liwork * sizeof(blasint));
    p->ws_bytes = off;
    return OT_OK;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LK_TILES 1
/* One 16 x 16 f32 tile: rows of s (stride ss) to columns of d (stride ds), in registers. */
EX_AVX512 static void tile16_ps(const float *s, int64_t ss, float *d, int64_t ds) {
    __m512 r[16];
    for (int k = 0; k < 16; k++) r[k] = _mm512_loadu_ps(s + k * ss);
    ex_tr16_ps(r);
    for (int k = 0; k < 16; k++) _mm512_storeu_ps(d + k * ds, r[k]);
}
/* One 8 x 8 f64 tile: pairs of rows interleaved, then 128-bit lanes exchanged twice. */
EX_AVX512 static void tile8_pd(const double *s, int64_t ss, double *d, int64_t ds) {
    __m512d r[8], t[8], u[8];
    for (int k = 0; k < 8; k++) r[k] = _mm512_loadu_pd(s + k * ss);
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm512_unpacklo_pd(r[2 * k], r[2 * k + 1]);     /* cols 0 2 4 6 */
        t[2 * k + 1] = _mm512_unpackhi_pd(r[2 * k], r[2 * k + 1]); /* cols 1 3 5 7 */
    }
    for (int h = 0; h < 2; h++) {                                          /* rows 4h .. 4h + 3 */
        u[4 * h] = _mm512_shuffle_f64x2(t[4 * h], t[4 * h + 2], 0x88);     /* cols 0, 4 */
        u[4 * h + 1] = _mm512_shuffle_f64x2(t[4 * h], t[4 * h + 2], 0xdd); /* cols 2, 6 */
        u[4 * h + 2] = _mm512_shuffle_f64x2(t[4 * h + 1], t[4 * h + 3], 0x88); /* cols 1, 5 */
        u[4 * h + 3] = _mm512_shuffle_f64x2(t[4 * h + 1], t[4 * h + 3], 0xdd); /* cols 3, 7 */
    }
    static const int col[4][2] = {{0, 4}, {2, 6}, {1, 5}, {3, 7}};
    for (int k = 0; k < 4; k++) {
        _mm512_storeu_pd(d + col[k][0] * ds, _mm512_shuffle_f64x2(u[k], u[4 + k], 0x88));
        _mm512_storeu_pd(d + col[k][1] * ds, _mm512_shuffle_f64x2(u[k], u[4 + k], 0xdd));
    }
}
#else
#define LK_TILES 0
#endif

/* row-major rows x cols at src -> column-major (ld = rows) at dst. Where AVX-512 runs, by 16 x 16
 * (f32) or 8 x 8 (f64) tiles transposed in registers, the edges element by element: element by
 * element throughout, each store went to another line (a 128 x 128 f64 matrix's columns 1 KiB
 * apart), and the copies in and out took a third of slogdet's LU. Copies either way: the same
 * bits. */
static void to_colmajor(const lk *p, const void *src, void *dst, int64_t rows, int64_t cols) {
    int64_t rt = 0, ct = 0; /* the tiled part: rows [0, rt) x cols [0, ct) */
#if LK_TILES
    if (p->v512) {
        int64_t T = p->f64 ? 8 : 16;
        rt = rows - rows % T;
        ct = cols - cols % T;
        for (int64_t i = 0; i < rt; i += T)
            for (int64_t j = 0; j < ct; j += T) {
                if (p->f64)
                    tile8_pd((const double *)src + i * cols + j, cols, (double *)dst + j * rows + i,
                             rows);
                else
                    tile16_ps((const float *)src + i * cols + j, cols, (float *)dst + j * rows + i,
                              rows);
            }
    }
#endif
    if (p->f64) {
        const double *s = src;
        double *d = dst;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = i < rt ? ct : 0; j < cols; j++) d[j * rows + i] = s[i * cols + j];
    } else {
        const float *s = src;
        float *d = dst;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = i < rt ? ct : 0; j < cols; j++) d[j * rows + i] = s[i * cols + j];
    }
}

/* column-major rows x cols (ld = rows) -> row-major: the same transpose, read as cols x rows */
static void from_colmajor(const lk *p, const void *src, void *dst, int64_t rows, int64_t cols) {
    to_colmajor(p, src, dst, cols, rows);
}

/* Matrix b of the batch, with workspace ws (ws_bytes). Returns LAPACK's info (< 0: an argument
 * refused). An output may be its input's memory: each matrix is read before it is written. */
static blasint lk_one(const lk *p, int64_t b, char *ws) {
    const size_t es = p->es;
    const char *ab = p->a + (size_t)(b * p->mn) * es;
    void *w = ws, *work = ws + p->o_work, *u = ws + p->o_u, *vt = ws + p->o_vt;
    blasint *iw = (blasint *)(ws + p->o_iw);
    blasint info = 0;
    char jobz = p->lc.mode, uplo = p->lc.uplo;
    switch (p->lc.op) {
    case IR_LAPACK_POTRF: {
        /* row-major A is column-major A^T: the other triangle, read and written in place */
        char up = uplo == 'L' ? 'U' : 'L';
        blasint ldn = p->N > 1 ? p->N : 1;
        char *x = p->out[0] + (size_t)(b * p->mn) * es;
        if (x != ab) memmove(x, ab, (size_t)p->mn * es);
        if (p->f64)
            dpotrf_(&up, &p->N, (double *)x, &ldn, &info, 1);
        else
            spotrf_(&up, &p->N, (float *)x, &ldn, &info, 1);
        break;
    }
    case IR_LAPACK_TRSM: {
        int64_t bmn = (int64_t)p->bm * p->bn;
        const char *bb = p->b + (size_t)(b * bmn) * es;
        char *x = p->out[0] + (size_t)(b * bmn) * es;
        if (x != bb) memmove(x, bb, (size_t)bmn * es);
        if (!p->bm || !p->bn) break;
        enum CBLAS_SIDE side = p->lc.side == 'L' ? CblasLeft : CblasRight;
        enum CBLAS_UPLO ul = uplo == 'L' ? CblasLower : CblasUpper;
        enum CBLAS_TRANSPOSE tr = p->lc.trans == 'N' ? CblasNoTrans : CblasTrans; /* C = T */
        enum CBLAS_DIAG dg = p->lc.diag == 'U' ? CblasUnit : CblasNonUnit;
        blasint lda = p->M > 1 ? p->M : 1, ldb = p->bn > 1 ? p->bn : 1;
        if (p->f64)
            cblas_dtrsm(CblasRowMajor, side, ul, tr, dg, p->bm, p->bn, 1.0, (const double *)ab, lda,
                        (double *)x, ldb);
        else
            cblas_strsm(CblasRowMajor, side, ul, tr, dg, p->bm, p->bn, 1.0f, (const float *)ab, lda,
                        (float *)x, ldb);
        break;
    }
    case IR_LAPACK_GETRF: {
        to_colmajor(p, ab, w, p->m, p->n);
        if (p->f64)
            dgetrf_(&p->M, &p->N, w, &p->ld, iw, &info);
        else
            sgetrf_(&p->M, &p->N, w, &p->ld, iw, &info);
        if (info < 0) break;
        from_colmajor(p, w, p->out[0] + (size_t)(b * p->mn) * es, p->m, p->n);
        int32_t *piv = (int32_t *)p->out[1] + b * p->K;
        for (blasint t = 0; t < p->K; t++) piv[t] = iw[t];
        break;
    }
    case IR_LAPACK_GEQRF: {
        to_colmajor(p, ab, w, p->m, p->n);
        char *tb = p->out[1] + (size_t)(b * p->K) * es;
        if (p->f64)
            dgeqrf_(&p->M, &p->N, w, &p->ld, (double *)tb, work, &p->lwork, &info);
        else
            sgeqrf_(&p->M, &p->N, w, &p->ld, (float *)tb, work, &p->lwork, &info);
        if (info >= 0) from_colmajor(p, w, p->out[0] + (size_t)(b * p->mn) * es, p->m, p->n);
        break;
    }
    case IR_LAPACK_ORGQR: {
        to_colmajor(p, ab, w, p->m, p->n);
        const char *tb = p->b + (size_t)(b * p->tk) * es;
        if (p->f64)
            dorgqr_(&p->M, &p->N, &p->tk, w, &p->ld, (const double *)tb, work, &p->lwork, &info);
        else
            sorgqr_(&p->M, &p->N, &p->tk, w, &p->ld, (const float *)tb, work, &p->lwork, &info);
        if (info >= 0) from_colmajor(p, w, p->out[0] + (size_t)(b * p->mn) * es, p->m, p->n);
        break;
    }
    case IR_LAPACK_SYEVD: {
        to_colmajor(p, ab, w, p->m, p->n);
        char *wb = p->out[1] + (size_t)(b * p->n) * es;
        if (p->f64)
            dsyevd_(&jobz, &uplo, &p->N, w, &p->ld, (double *)wb, work, &p->lwork, iw, &p->liwork,
                    &info, 1, 1);
        else
            ssyevd_(&jobz, &uplo, &p->N, w, &p->ld, (float *)wb, work, &p->lwork, iw, &p->liwork,
                    &info, 1, 1);
        if (info >= 0) from_colmajor(p, w, p->out[0] + (size_t)(b * p->mn) * es, p->m, p->n);
        break;
    }
    case IR_LAPACK_GESDD:
    case IR_LAPACK_GESVD: {
        bool dd = p->lc.op == IR_LAPACK_GESDD;
        blasint ldu = p->uv && p->M > 1 ? p->M : 1, ldvt = p->uv && p->vr > 1 ? (blasint)p->vr : 1;
        to_colmajor(p, ab, w, p->m, p->n);
        char *sb = p->out[1] + (size_t)(b * p->K) * es;
        if (!p->uv) u = vt = work; /* not referenced in mode N */
        if (p->f64) {
            if (dd)
                dgesdd_(&jobz, &p->M, &p->N, w, &p->ld, (double *)sb, u, &ldu, vt, &ldvt, work,
                        &p->lwork, iw, &info, 1);
            else
                dgesvd_(&jobz, &jobz, &p->M, &p->N, w, &p->ld, (double *)sb, u, &ldu, vt, &ldvt,
                        work, &p->lwork, &info, 1, 1);
        } else {
            if (dd)
                sgesdd_(&jobz, &p->M, &p->N, w, &p->ld, (float *)sb, u, &ldu, vt, &ldvt, work,
                        &p->lwork, iw, &info, 1);
            else
                sgesvd_(&jobz, &jobz, &p->M, &p->N, w, &p->ld, (float *)sb, u, &ldu, vt, &ldvt,
                        work, &p->lwork, &info, 1, 1);
        }
        if (info < 0) break;
        from_colmajor(p, w, p->out[0] + (size_t)(b * p->mn) * es, p->m, p->n);
        if (p->uv) {
            from_colmajor(p, u, p->out[2] + (size_t)(b * p->m * p->uc) * es, p->m, p->uc);
            from_colmajor(p, vt, p->out[3] + (size_t)(b * p->vr * p->n) * es, p->vr, p->n);
        }
        break;
    }
    }
    return info;
}

/* Matrices [b0, b1) on thread ith (its workspace), info into the last result where there is one */
static void lk_range(void *ctx, int64_t b0, int64_t b1, int ith) {
    lk *p = ctx;
    bool has_info = p->lc.op == IR_LAPACK_POTRF || p->lc.op == IR_LAPACK_GETRF ||
                    p->lc.op == IR_LAPACK_SYEVD || p->lc.op == IR_LAPACK_GESDD ||
                    p->lc.op == IR_LAPACK_GESVD;
    /* XLA's CPU runtime sets MXCSR's FTZ and DAZ for the whole execution, its LAPACK calls
     * included: subnormal inputs read as zero, subnormal results are flushed (a triangular solve
     * of 1e-38 by 2 gives 0 there). The same here in the flush-to-zero mode. */
    unsigned csr = _mm_getcsr();
    if (p->ftz) _mm_setcsr(csr | 0x8040u);
    for (int64_t b = b0; b < b1; b++) {
        blasint info = lk_one(p, b, p->ws + (size_t)ith * p->ws_bytes);
        if (info < 0) {
            int zero = 0;
            atomic_compare_exchange_strong(&p->bad, &zero, (int)-info);
            break;
        }
        if (has_info) ((int32_t *)p->out[p->nout - 1])[b] = info;
    }
    if (p->ftz) _mm_setcsr(csr);
}

/* Parses and checks i's target against its operands' and result's shapes. */
static ot_status lk_describe(const ot_instr *i, ir_lapack_call *lc, bool *is_lapack) {
    OT_CHECK(
        ir_lapack_parse(i->attrs->custom_call_target, i->attrs->backend_config, lc, is_lapack));
    if (!*is_lapack) return OT_OK;
    const ot_ir_shape *sh[2];
    for (int k = 0; k < i->noperands && k < 2; k++) sh[k] = &i->operands[k]->shape;
    return ir_lapack_check(lc, sh, i->noperands, &i->shape);
}

static ot_status lk_finish(const lk *p) {
    int bad = atomic_load(&p->bad);
    if (bad)
        return ot_error(OT_ERR_INTERNAL, "custom-call %s: LAPACK refused argument %d", p->name,
                        bad);
    return OT_OK;
}

ot_status ex_kernel_lapack(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    const char *target = i->attrs->custom_call_target;
    ir_lapack_call lc;
    bool is_lapack;
    OT_CHECK(lk_describe(i, &lc, &is_lapack));
    if (!is_lapack)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "custom-call %s: target \"%s\" is not implemented (the LAPACK targets "
                        "that run are potrf, getrf, geqrf, orgqr, syevd, gesdd, gesvd and trsm "
                        "in f32 and f64; complex dtypes and the other routines are refused)",
                        EX_NAME(i), target);
    lk p;
    OT_CHECK(lk_plan(&p, i, &lc, ex_arr(ops[0]), i->noperands > 1 ? ex_arr(ops[1]) : NULL));
    OT_CHECK(ot_value_alloc_shape(out, &i->shape)); /* zeroed: gesdd's u and vt in mode N */
    p.a = ops[0]->array.data;
    p.b = i->noperands > 1 ? ops[1]->array.data : NULL;
    if (out->kind == OT_IR_TUPLE) {
        p.nout = out->ntuple;
        for (int k = 0; k < out->ntuple && k < 5; k++) p.out[k] = out->tuple[k].array.data;
    } else {
        p.nout = 1;
        p.out[0] = out->array.data;
    }
    p.ws = ot_malloc(p.ws_bytes ? p.ws_bytes : 1);
    if (!p.ws) {
        ot_value_release(out);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "custom-call %s: out of memory", EX_NAME(i));
    }
    p.ftz = ex_ftz;
    /* one thread per call: the bits then do not depend on OpenBLAS's thread count */
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    lk_range(&p, 0, p.batch, 0);
    ot_free(p.ws);
    ot_status st = lk_finish(&p);
    if (st != OT_OK) ot_value_release(out);
    return st;
}

ot_status ex_fast_lapack(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                         const ex_leaf *ins, int nout, void *const *out, const ex_leaf *outs,
                         bool *fast) {
    *fast = false;
    ir_lapack_call lc;
    bool is_lapack;
    OT_CHECK(lk_describe(i, &lc, &is_lapack));
    if (!is_lapack || nin != i->noperands || nout > 5) return OT_OK; /* the reference's error */
    lk p;
    OT_CHECK(lk_plan(&p, i, &lc, ins[0].shape, nin > 1 ? ins[1].shape : NULL));
    p.a = in[0];
    p.b = nin > 1 ? in[1] : NULL;
    p.nout = nout;
    for (int k = 0; k < nout; k++) p.out[k] = out[k];
    if ((lc.op == IR_LAPACK_GESDD || lc.op == IR_LAPACK_GESVD) && !p.uv) {
        memset(out[2], 0, (size_t)outs[2].nbytes); /* as the reference's zeroed result */
        memset(out[3], 0, (size_t)outs[3].nbytes);
    }
    /* work, not bytes, decides the split: about m n min(m, n) multiply-adds a matrix */
    double work = (double)p.batch * (double)p.m * (double)p.n * (double)(p.K ? p.K : 1);
    int64_t wb = work > 1e15 ? (int64_t)1e15 : (int64_t)work;
    if (p.batch < 2) wb = 0; /* one matrix: one thread */
    int nth = ex_par_threads(c, wb);
    void *sp = NULL;
    OT_CHECK(ex_scratch(c, (size_t)nth * p.ws_bytes + 64, &sp)); /* never NULL */
    p.ws = sp;
    p.ftz = c->ftz;
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    if (nth > 1)
        ex_par_for_dynamic(c, p.batch, wb, lk_range, &p);
    else
        lk_range(&p, 0, p.batch, 0);
    OT_CHECK(lk_finish(&p));
    *fast = true;
    return OT_OK;
}
