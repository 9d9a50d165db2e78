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
 * into a column-major scratch and their results back. OpenBLAS runs on one thread per call, so
 * results do not depend on the thread count (as for the dots, src/exec/fast_dot.c). */
#include "exec/exec_internal.h"
#include "ir/lapack_call.h"

#include <cblas.h>
#include <limits.h>
#include <stdlib.h>

/* LAPACK's Fortran interface as OpenBLAS exports it (character arguments carry their hidden
 * lengths last, gfortran's convention). */
typedef size_t flen;
void spotrf_(const char *uplo, const blasint *n, float *a, const blasint *lda, blasint *info,
             flen);
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
             double *w, double *work, const blasint *lwork, blasint *iwork,
             const blasint *liwork, blasint *info, flen, flen);
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

/* One matrix problem: dims, and the column-major scratch each routine uses. */
typedef struct lp {
    const char *name;
    bool f64;
    size_t es;
    blasint m, n, k;
} lp;

/* row-major rows x cols at src -> column-major (ld = rows) at dst, and back */
static void to_colmajor(const lp *p, const void *src, void *dst, int64_t rows, int64_t cols) {
    if (p->f64) {
        const double *s = src;
        double *d = dst;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) d[j * rows + i] = s[i * cols + j];
    } else {
        const float *s = src;
        float *d = dst;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) d[j * rows + i] = s[i * cols + j];
    }
}

static void from_colmajor(const lp *p, const void *src, void *dst, int64_t rows, int64_t cols) {
    if (p->f64) {
        const double *s = src;
        double *d = dst;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) d[i * cols + j] = s[j * rows + i];
    } else {
        const float *s = src;
        float *d = dst;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) d[i * cols + j] = s[j * rows + i];
    }
}

/* A workspace query's answer (a float holding an integer) as a count, at least 1. */
static ot_status work_count(const lp *p, double q, blasint *out) {
    if (!(q >= 0) || q > (double)INT_MAX)
        return ot_error(OT_ERR_INTERNAL, "custom-call %s: LAPACK asked for a workspace of %g",
                        p->name, q);
    *out = q < 1 ? 1 : (blasint)q;
    return OT_OK;
}

static ot_status arg_error(const lp *p, blasint info) {
    return ot_error(OT_ERR_INTERNAL, "custom-call %s: LAPACK refused argument %d", p->name,
                    (int)-info);
}

static void *scratch(size_t bytes) {
    return ot_malloc(bytes ? bytes : 1);
}

ot_status ex_kernel_lapack(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    const char *target = i->attrs->custom_call_target;
    ir_lapack_call lc;
    bool is_lapack;
    OT_CHECK(ir_lapack_parse(target, i->attrs->backend_config, &lc, &is_lapack));
    if (!is_lapack)
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "custom-call %s: target \"%s\" is not implemented (the LAPACK targets "
                        "that run are potrf, getrf, geqrf, orgqr, syevd, gesdd, gesvd and trsm "
                        "in f32 and f64; complex dtypes and the other routines are refused)",
                        EX_NAME(i), target);
    {
        const ot_ir_shape *sh[2];
        for (int k = 0; k < i->noperands && k < 2; k++) sh[k] = &i->operands[k]->shape;
        OT_CHECK(ir_lapack_check(&lc, sh, i->noperands, &i->shape));
    }
    const ot_shape *as = ex_arr(ops[0]);
    int nb = as->rank - 2;
    int64_t batch = 1;
    for (int d = 0; d < nb; d++) batch *= as->dims[d];
    int64_t m = as->dims[nb], n = as->dims[nb + 1];
    if (m > INT_MAX || n > INT_MAX || (m && n > INT64_MAX / 8 / m))
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "custom-call %s: a %lld x %lld matrix is beyond LAPACK's 32-bit sizes",
                        EX_NAME(i), (long long)m, (long long)n);
    lp p = {target, lc.dtype == OT_F64, lc.dtype == OT_F64 ? 8 : 4, (blasint)m, (blasint)n,
            (blasint)(m < n ? m : n)};
    OT_CHECK(ot_value_alloc_shape(out, &i->shape));
    /* one thread per call: the bits then do not depend on OpenBLAS's thread count */
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    const size_t es = p.es;
    const int64_t mn = m * n;
    const char *a = ops[0]->array.data;
    const blasint ld = p.m > 1 ? p.m : 1;
    void *w = NULL, *work = NULL, *u = NULL, *vt = NULL;
    blasint *iw = NULL;
    ot_status st = OT_OK;
    blasint info = 0;
#define OUT(q)   ((char *)out->tuple[q].array.data)
#define INFO(b)  (((int32_t *)OUT(out->ntuple - 1))[b]) /* the last result, where there is one */
#define NOMEM()  ot_error(OT_ERR_OUT_OF_MEMORY, "custom-call %s: out of memory", EX_NAME(i))
    switch (lc.op) {
    case IR_LAPACK_POTRF: {
        /* row-major A is column-major A^T: the other triangle, read and written in place */
        char up = lc.uplo == 'L' ? 'U' : 'L';
        blasint ldn = p.n > 1 ? p.n : 1;
        memcpy(OUT(0), a, (size_t)(batch * mn) * es);
        for (int64_t b = 0; b < batch; b++) {
            char *x = OUT(0) + (size_t)(b * mn) * es;
            if (p.f64)
                dpotrf_(&up, &p.n, (double *)x, &ldn, &info, 1);
            else
                spotrf_(&up, &p.n, (float *)x, &ldn, &info, 1);
            if (info < 0) {
                st = arg_error(&p, info);
                break;
            }
            INFO(b) = info;
        }
        break;
    }
    case IR_LAPACK_TRSM: {
        const ot_shape *bs = ex_arr(ops[1]);
        blasint bm = (blasint)bs->dims[nb], bn = (blasint)bs->dims[nb + 1];
        int64_t bmn = (int64_t)bm * bn;
        char *x = out->array.data;
        memcpy(x, ops[1]->array.data, (size_t)(batch * bmn) * es);
        enum CBLAS_SIDE side = lc.side == 'L' ? CblasLeft : CblasRight;
        enum CBLAS_UPLO uplo = lc.uplo == 'L' ? CblasLower : CblasUpper;
        enum CBLAS_TRANSPOSE tr = lc.trans == 'N' ? CblasNoTrans : CblasTrans; /* C = T, real */
        enum CBLAS_DIAG dg = lc.diag == 'U' ? CblasUnit : CblasNonUnit;
        blasint lda = p.m > 1 ? p.m : 1, ldb = bn > 1 ? bn : 1;
        if (!bm || !bn) break;
        for (int64_t b = 0; b < batch; b++) {
            const char *ab = a + (size_t)(b * mn) * es;
            char *xb = x + (size_t)(b * bmn) * es;
            if (p.f64)
                cblas_dtrsm(CblasRowMajor, side, uplo, tr, dg, bm, bn, 1.0, (const double *)ab,
                            lda, (double *)xb, ldb);
            else
                cblas_strsm(CblasRowMajor, side, uplo, tr, dg, bm, bn, 1.0f, (const float *)ab,
                            lda, (float *)xb, ldb);
        }
        break;
    }
    case IR_LAPACK_GETRF: {
        w = scratch((size_t)mn * es);
        iw = scratch((size_t)p.k * sizeof *iw);
        if (!w || !iw) {
            st = NOMEM();
            break;
        }
        for (int64_t b = 0; b < batch; b++) {
            to_colmajor(&p, a + (size_t)(b * mn) * es, w, m, n);
            if (p.f64)
                dgetrf_(&p.m, &p.n, w, &ld, iw, &info);
            else
                sgetrf_(&p.m, &p.n, w, &ld, iw, &info);
            if (info < 0) {
                st = arg_error(&p, info);
                break;
            }
            from_colmajor(&p, w, OUT(0) + (size_t)(b * mn) * es, m, n);
            int32_t *piv = (int32_t *)OUT(1) + b * p.k;
            for (blasint t = 0; t < p.k; t++) piv[t] = iw[t];
            INFO(b) = info;
        }
        break;
    }
    case IR_LAPACK_GEQRF:
    case IR_LAPACK_ORGQR: {
        bool qr = lc.op == IR_LAPACK_GEQRF;
        blasint tk = qr ? p.k : (blasint)ex_arr(ops[1])->dims[nb];
        const char *tau = qr ? NULL : ops[1]->array.data;
        w = scratch((size_t)mn * es);
        if (!w) {
            st = NOMEM();
            break;
        }
        double q = 0;
        blasint lwork = -1;
        if (qr) {
            if (p.f64) {
                dgeqrf_(&p.m, &p.n, w, &ld, NULL, &q, &lwork, &info);
            } else {
                float qf = 0;
                sgeqrf_(&p.m, &p.n, w, &ld, NULL, &qf, &lwork, &info);
                q = qf;
            }
        } else {
            if (p.f64) {
                dorgqr_(&p.m, &p.n, &tk, w, &ld, NULL, &q, &lwork, &info);
            } else {
                float qf = 0;
                sorgqr_(&p.m, &p.n, &tk, w, &ld, NULL, &qf, &lwork, &info);
                q = qf;
            }
        }
        if (info < 0 || (st = work_count(&p, q, &lwork)) != OT_OK) {
            if (info < 0) st = arg_error(&p, info);
            break;
        }
        work = scratch((size_t)lwork * es);
        if (!work) {
            st = NOMEM();
            break;
        }
        char *dst = qr ? OUT(0) : out->array.data;
        for (int64_t b = 0; b < batch; b++) {
            to_colmajor(&p, a + (size_t)(b * mn) * es, w, m, n);
            if (qr) {
                char *tb = OUT(1) + (size_t)(b * p.k) * es;
                if (p.f64)
                    dgeqrf_(&p.m, &p.n, w, &ld, (double *)tb, work, &lwork, &info);
                else
                    sgeqrf_(&p.m, &p.n, w, &ld, (float *)tb, work, &lwork, &info);
            } else {
                const char *tb = tau + (size_t)(b * tk) * es;
                if (p.f64)
                    dorgqr_(&p.m, &p.n, &tk, w, &ld, (const double *)tb, work, &lwork, &info);
                else
                    sorgqr_(&p.m, &p.n, &tk, w, &ld, (const float *)tb, work, &lwork, &info);
            }
            if (info < 0) {
                st = arg_error(&p, info);
                break;
            }
            from_colmajor(&p, w, dst + (size_t)(b * mn) * es, m, n);
        }
        break;
    }
    case IR_LAPACK_SYEVD: {
        w = scratch((size_t)mn * es);
        if (!w) {
            st = NOMEM();
            break;
        }
        double q = 0;
        blasint lwork = -1, liwork = -1, qi = 0;
        char jobz = lc.mode, uplo = lc.uplo;
        if (p.f64) {
            dsyevd_(&jobz, &uplo, &p.n, w, &ld, NULL, &q, &lwork, &qi, &liwork, &info, 1, 1);
        } else {
            float qf = 0;
            ssyevd_(&jobz, &uplo, &p.n, w, &ld, NULL, &qf, &lwork, &qi, &liwork, &info, 1, 1);
            q = qf;
        }
        if (info < 0) {
            st = arg_error(&p, info);
            break;
        }
        if ((st = work_count(&p, q, &lwork)) != OT_OK) break;
        liwork = qi < 1 ? 1 : qi;
        work = scratch((size_t)lwork * es);
        iw = scratch((size_t)liwork * sizeof *iw);
        if (!work || !iw) {
            st = NOMEM();
            break;
        }
        for (int64_t b = 0; b < batch; b++) {
            to_colmajor(&p, a + (size_t)(b * mn) * es, w, m, n);
            char *wb = OUT(1) + (size_t)(b * n) * es;
            if (p.f64)
                dsyevd_(&jobz, &uplo, &p.n, w, &ld, (double *)wb, work, &lwork, iw, &liwork,
                        &info, 1, 1);
            else
                ssyevd_(&jobz, &uplo, &p.n, w, &ld, (float *)wb, work, &lwork, iw, &liwork,
                        &info, 1, 1);
            if (info < 0) {
                st = arg_error(&p, info);
                break;
            }
            from_colmajor(&p, w, OUT(0) + (size_t)(b * mn) * es, m, n);
            INFO(b) = info;
        }
        break;
    }
    case IR_LAPACK_GESDD:
    case IR_LAPACK_GESVD: {
        bool dd = lc.op == IR_LAPACK_GESDD;
        const ot_shape *us = &i->shape.tuple[2].array, *vs = &i->shape.tuple[3].array;
        int64_t uc = us->dims[nb + 1], vr = vs->dims[nb]; /* u: m x uc, vt: vr x n */
        bool uv = lc.mode != 'N';
        blasint ldu = uv && p.m > 1 ? p.m : 1, ldvt = uv && vr > 1 ? (blasint)vr : 1;
        w = scratch((size_t)mn * es);
        u = scratch(uv ? (size_t)(m * uc) * es : es);
        vt = scratch(uv ? (size_t)(vr * n) * es : es);
        iw = scratch((size_t)(8 * (int64_t)p.k) * sizeof *iw);
        if (!w || !u || !vt || !iw) {
            st = NOMEM();
            break;
        }
        char jobz = lc.mode;
        double q = 0;
        blasint lwork = -1;
        if (p.f64) {
            if (dd)
                dgesdd_(&jobz, &p.m, &p.n, w, &ld, NULL, u, &ldu, vt, &ldvt, &q, &lwork, iw,
                        &info, 1);
            else
                dgesvd_(&jobz, &jobz, &p.m, &p.n, w, &ld, NULL, u, &ldu, vt, &ldvt, &q, &lwork,
                        &info, 1, 1);
        } else {
            float qf = 0;
            if (dd)
                sgesdd_(&jobz, &p.m, &p.n, w, &ld, NULL, u, &ldu, vt, &ldvt, &qf, &lwork, iw,
                        &info, 1);
            else
                sgesvd_(&jobz, &jobz, &p.m, &p.n, w, &ld, NULL, u, &ldu, vt, &ldvt, &qf, &lwork,
                        &info, 1, 1);
            q = qf;
        }
        if (info < 0) {
            st = arg_error(&p, info);
            break;
        }
        if ((st = work_count(&p, q, &lwork)) != OT_OK) break;
        work = scratch((size_t)lwork * es);
        if (!work) {
            st = NOMEM();
            break;
        }
        for (int64_t b = 0; b < batch; b++) {
            to_colmajor(&p, a + (size_t)(b * mn) * es, w, m, n);
            char *sb = OUT(1) + (size_t)(b * p.k) * es;
            if (p.f64) {
                if (dd)
                    dgesdd_(&jobz, &p.m, &p.n, w, &ld, (double *)sb, u, &ldu, vt, &ldvt, work,
                            &lwork, iw, &info, 1);
                else
                    dgesvd_(&jobz, &jobz, &p.m, &p.n, w, &ld, (double *)sb, u, &ldu, vt, &ldvt,
                            work, &lwork, &info, 1, 1);
            } else {
                if (dd)
                    sgesdd_(&jobz, &p.m, &p.n, w, &ld, (float *)sb, u, &ldu, vt, &ldvt, work,
                            &lwork, iw, &info, 1);
                else
                    sgesvd_(&jobz, &jobz, &p.m, &p.n, w, &ld, (float *)sb, u, &ldu, vt, &ldvt,
                            work, &lwork, &info, 1, 1);
            }
            if (info < 0) {
                st = arg_error(&p, info);
                break;
            }
            from_colmajor(&p, w, OUT(0) + (size_t)(b * mn) * es, m, n);
            if (uv) {
                from_colmajor(&p, u, OUT(2) + (size_t)(b * m * uc) * es, m, uc);
                from_colmajor(&p, vt, OUT(3) + (size_t)(b * vr * n) * es, vr, n);
            }
            INFO(b) = info;
        }
        break;
    }
    }
#undef OUT
#undef INFO
#undef NOMEM
    ot_free(w);
    ot_free(work);
    ot_free(u);
    ot_free(vt);
    ot_free(iw);
    if (st != OT_OK) ot_value_release(out);
    return st;
}
