/* jaxlib's LAPACK custom calls (src/exec/lapack.c, src/ir/lapack_call.h), as JAX's CPU lowering
 * writes them: each routine in f32 and f64, batched, every flag, on matrices whose answers are
 * checked by residuals computed here in double (A = L L^T, P A = L U, Q^T Q = I and Q R = A,
 * A V = V diag(w), U diag(s) V^T = A, A X = B), the info outputs for inputs the routine refuses
 * (a matrix that is not positive definite, an exactly singular one), the native runtime against
 * the reference evaluator bit for bit, and the errors for modules that name a target wrongly
 * (operand and result shapes, flags, complex and unknown routines). */
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#include <stdarg.h>

/* An HLO module of one custom call, its text formatted from fmt. */
static ot_status parse(ot_module **m, const char *fmt, ...) {
    char text[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    ot_hlo_parse_options po = ot_hlo_parse_options_default();
    return ot_hlo_parse(text, strlen(text), &po, m);
}

static uint64_t g_seed = 12345;

static double uni(void) { /* [-1, 1) */
    return (double)(ot_test_splitmix64(&g_seed) >> 11) * 0x1p-52 - 1.0;
}

/* An array value of shape dt[dims] from doubles (rounded to dt). */
static ot_value arr(ot_dtype dt, const double *x, int rank, const int64_t *dims) {
    ot_shape s;
    ot_shape_make(&s, dt, rank, dims);
    ot_value v;
    ot_value_alloc_array(&v, &s);
    int64_t n = ot_shape_numel_unchecked(&s);
    for (int64_t k = 0; k < n; k++) {
        if (dt == OT_F64)
            ((double *)v.array.data)[k] = x[k];
        else
            ((float *)v.array.data)[k] = (float)x[k];
    }
    return v;
}

static double at(const ot_value *v, int64_t k) {
    return v->array.shape.dtype == OT_F64 ? ((const double *)v->array.data)[k]
                                          : ((const float *)v->array.data)[k];
}

static int32_t ati(const ot_value *v, int64_t k) {
    return ((const int32_t *)v->array.data)[k];
}

/* random SPD n x n matrices (B^T B / n + I), batch of them, row-major */
static void spd(double *a, int batch, int n) {
    double *b = malloc(sizeof(double) * (size_t)(n * n));
    for (int q = 0; q < batch; q++) {
        for (int k = 0; k < n * n; k++) b[k] = uni();
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double s = i == j ? 1 : 0;
                for (int t = 0; t < n; t++) s += b[t * n + i] * b[t * n + j] / n;
                a[(q * n + i) * n + j] = s;
            }
    }
    free(b);
}

static double eps_of(ot_dtype dt) {
    return dt == OT_F64 ? 1e-12 : 2e-5;
}

static const char *tn(ot_dtype dt) {
    return dt == OT_F64 ? "f64" : "f32";
}
static char tc(ot_dtype dt) {
    return dt == OT_F64 ? 'd' : 's';
}

/* Evaluates with the reference evaluator, then runs compiled on a host device with the
 * reference kernels and with the fast ones on pools of 1, 2, 3 and 8 threads (the fast kernel
 * splits a batch over them); every run must agree with the evaluator bit for bit. *out: the
 * evaluator's result. */
static void run_both(const char *what, ot_module *m, ot_value *args, int nargs, ot_value *out) {
    *out = ot_value_empty();
    ASSERT_OK(ot_evaluate(m, args, nargs, NULL, out));
    ot_device *dev = NULL;
    ot_executable *exe = NULL;
    ot_compile_options o = ot_compile_options_default();
    ASSERT_OK(ot_host_device_create(0, 0, &dev));
    ASSERT_OK(ot_compile(m, &o, &exe));
    int no = ot_executable_output_count(exe);
    ot_buffer *in[4] = {0};
    ASSERT_TRUE(nargs <= 4 && no <= 8);
    for (int k = 0; k < nargs; k++) ASSERT_OK(ot_buffer_from_host(dev, &args[k].array, &in[k]));
    const int threads[] = {0, 1, 2, 3, 8}; /* 0: the reference kernels */
    for (int t = 0; t < 5; t++) {
        ot_threadpool *pool = NULL;
        if (threads[t]) ASSERT_OK(ot_threadpool_create(threads[t], &pool));
        ot_run_options ro = ot_run_options_default();
        ro.reference_kernels = !threads[t];
        ro.pool = pool;
        ot_buffer *res[8] = {0};
        ASSERT_OK(ot_device_execute(dev, exe, in, nargs, res, no, &ro, NULL));
        for (int k = 0; k < no; k++) {
            ot_tensor tt;
            ASSERT_OK(ot_buffer_to_host(res[k], &tt));
            const ot_value *ref = out->kind == OT_IR_TUPLE ? &out->tuple[k] : out;
            bool same =
                tt.nbytes == ref->array.nbytes && !memcmp(tt.data, ref->array.data, tt.nbytes);
            if (!same)
                fprintf(stderr, "  %s: output %d differs from the evaluator's (%d threads%s)\n",
                        what, k, threads[t], threads[t] ? "" : ", reference kernels");
            EXPECT_TRUE(same);
            ot_tensor_release(&tt);
            ot_buffer_free(res[k]);
        }
        ot_threadpool_free(pool);
    }
    for (int k = 0; k < nargs; k++) ot_buffer_free(in[k]);
    ot_executable_free(exe);
    ot_device_free(dev);
}

static void release_all(ot_value *v, int n) {
    for (int k = 0; k < n; k++) ot_value_release(&v[k]);
}

/* ---- potrf ----------------------------------------------------------------------------- */

static void check_potrf(ot_dtype dt, char uplo) {
    enum { B = 3, N = 5 };
    double a[B * N * N];
    spd(a, B, N);
    /* the middle matrix is not positive definite: its third pivot is negative */
    a[(1 * N + 2) * N + 2] = -4;
    ot_module *m = NULL;
    ASSERT_OK(
        parse(&m,
              "HloModule m\nENTRY e {\n  a = %s[%d,%d,%d]{1,2,0} parameter(0)\n"
              "  ROOT r = (%s[%d,%d,%d]{1,2,0}, s32[%d]{0}) custom-call(a), "
              "custom_call_target=\"lapack_%cpotrf_ffi\", operand_layout_constraints={%s[%d,"
              "%d,%d]{1,2,0}}, output_to_operand_aliasing={{0}: (0, {})}, "
              "api_version=API_VERSION_TYPED_FFI, frontend_attributes={num_batch_dims=\"1\"}, "
              "backend_config={uplo = %d : ui8}\n}\n",
              tn(dt), B, N, N, tn(dt), B, N, N, B, tc(dt), tn(dt), B, N, N, (int)uplo));
    ot_value args[1] = {arr(dt, a, 3, (int64_t[]){B, N, N})}, r;
    run_both("potrf", m, args, 1, &r);
    ASSERT_TRUE(r.kind == OT_IR_TUPLE && r.ntuple == 2);
    EXPECT_INT_EQ(ati(&r.tuple[1], 0), 0);
    EXPECT_INT_EQ(ati(&r.tuple[1], 1), 3); /* LAPACK's 1-based order of the failing minor */
    EXPECT_INT_EQ(ati(&r.tuple[1], 2), 0);
    for (int q = 0; q < B; q += 2) { /* the factors: L L^T = A (or U^T U), other triangle kept */
        double worst = 0;
        const ot_value *l = &r.tuple[0];
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int t = 0; t < N; t++) {
                    /* lower: L[i][t] L[j][t]; upper: U[t][i] U[t][j] */
                    int64_t x = uplo == 'L' ? (q * N + i) * N + t : (q * N + t) * N + i;
                    int64_t y = uplo == 'L' ? (q * N + j) * N + t : (q * N + t) * N + j;
                    bool tri_x = uplo == 'L' ? t <= i : t <= i, tri_y = t <= j;
                    if (tri_x && tri_y) s += at(l, x) * at(l, y);
                }
                double e = fabs(s - a[(q * N + i) * N + j]);
                if (e > worst) worst = e;
                bool other = uplo == 'L' ? j > i : j < i;
                if (other) { /* untouched: the input's value */
                    double in = at(&args[0], (q * N + i) * N + j);
                    EXPECT_TRUE(at(l, (q * N + i) * N + j) == in);
                }
            }
        EXPECT_TRUE(worst < 10 * eps_of(dt));
    }
    ot_value_release(&r);
    release_all(args, 1);
    ot_module_free(m);
}

static void test_potrf(void) {
    check_potrf(OT_F32, 'L');
    check_potrf(OT_F64, 'L');
    check_potrf(OT_F32, 'U');
    check_potrf(OT_F64, 'U');
}

/* ---- trsm ------------------------------------------------------------------------------ */

/* op(A) X = B (side L) or X op(A) = B (side R), with A triangular: residual over a batch. */
static void check_trsm(ot_dtype dt, char side, char uplo, char trans, char diag) {
    enum { B = 2, P = 4, O = 3 };
    int bm = side == 'L' ? P : O, bn = side == 'L' ? O : P;
    double a[B * P * P], b[B * P * O];
    spd(a, B, P);
    for (int k = 0; k < B * P * O; k++) b[k] = uni();
    ot_module *m = NULL;
    ASSERT_OK(parse(&m,
                    "HloModule m\nENTRY e {\n  a = %s[%d,%d,%d] parameter(0)\n"
                    "  b = %s[%d,%d,%d] parameter(1)\n"
                    "  ROOT x = %s[%d,%d,%d]{1,2,0} custom-call(a, b), "
                    "custom_call_target=\"lapack_%ctrsm_ffi\", api_version=API_VERSION_TYPED_FFI, "
                    "backend_config={diag = %d : ui8, side = %d : ui8, trans_x = %d : ui8, uplo = "
                    "%d : ui8}\n}\n",
                    tn(dt), B, P, P, tn(dt), B, bm, bn, tn(dt), B, bm, bn, tc(dt), (int)diag,
                    (int)side, (int)trans, (int)uplo));
    ot_value args[2] = {arr(dt, a, 3, (int64_t[]){B, P, P}), arr(dt, b, 3, (int64_t[]){B, bm, bn})},
             x;
    run_both("trsm", m, args, 2, &x);
    double worst = 0;
    for (int q = 0; q < B; q++) {
        /* the triangular matrix as the routine reads it (the other triangle ignored) */
        double t[P][P];
        for (int i = 0; i < P; i++)
            for (int j = 0; j < P; j++) {
                bool in = uplo == 'L' ? j <= i : j >= i;
                double v = in ? at(&args[0], (q * P + i) * P + j) : 0;
                if (i == j && diag == 'U') v = 1;
                t[i][j] = trans == 'N' ? v : 0;
            }
        if (trans != 'N')
            for (int i = 0; i < P; i++)
                for (int j = 0; j < P; j++) {
                    bool in = uplo == 'L' ? i <= j : i >= j; /* A[j][i] in the triangle */
                    double v = in ? at(&args[0], (q * P + j) * P + i) : 0;
                    if (i == j && diag == 'U') v = 1;
                    t[i][j] = v;
                }
        for (int i = 0; i < bm; i++)
            for (int j = 0; j < bn; j++) {
                double s = 0;
                if (side == 'L')
                    for (int k = 0; k < P; k++) s += t[i][k] * at(&x, (q * bm + k) * bn + j);
                else
                    for (int k = 0; k < P; k++) s += at(&x, (q * bm + i) * bn + k) * t[k][j];
                double e = fabs(s - at(&args[1], (q * bm + i) * bn + j));
                if (e > worst) worst = e;
            }
    }
    if (!(worst < 20 * eps_of(dt)))
        fprintf(stderr, "  trsm %s side %c uplo %c trans %c diag %c: residual %g\n", tn(dt), side,
                uplo, trans, diag, worst);
    EXPECT_TRUE(worst < 20 * eps_of(dt));
    ot_value_release(&x);
    release_all(args, 2);
    ot_module_free(m);
}

static void test_trsm(void) {
    const char sides[] = "LR", uplos[] = "LU", trans[] = "NTC", diags[] = "NU";
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < 2; s++)
            for (int u = 0; u < 2; u++)
                for (int t = 0; t < 3; t++)
                    for (int g = 0; g < 2; g++)
                        check_trsm(d ? OT_F64 : OT_F32, sides[s], uplos[u], trans[t], diags[g]);
}

/* ---- getrf ----------------------------------------------------------------------------- */

static void check_getrf(ot_dtype dt, int M, int N) {
    enum { B = 2 };
    int K = M < N ? M : N;
    double *a = malloc((size_t)B * M * N * sizeof *a), *pa = malloc((size_t)M * N * sizeof *pa);
    ASSERT_TRUE(a && pa);
    for (int k = 0; k < B * M * N; k++) a[k] = uni();
    for (int j = 0; j < N; j++) a[M * N + j] = 0;     /* the second matrix: a zero first row... */
    for (int i = 0; i < M; i++) a[M * N + i * N] = 0; /* ...and column: U[0][0] is exactly 0 */
    ot_module *m = NULL;
    ASSERT_OK(parse(&m,
                    "HloModule m\nENTRY e {\n  a = %s[%d,%d,%d] parameter(0)\n"
                    "  ROOT r = (%s[%d,%d,%d]{1,2,0}, s32[%d,%d]{1,0}, s32[%d]{0}) "
                    "custom-call(a), custom_call_target=\"lapack_%cgetrf_ffi\", "
                    "api_version=API_VERSION_TYPED_FFI, backend_config={}\n}\n",
                    tn(dt), B, M, N, tn(dt), B, M, N, B, K, B, tc(dt)));
    ot_value args[1] = {arr(dt, a, 3, (int64_t[]){B, M, N})}, r;
    run_both("getrf", m, args, 1, &r);
    EXPECT_INT_EQ(ati(&r.tuple[2], 0), 0);
    EXPECT_INT_EQ(ati(&r.tuple[2], 1), 1);
    /* P A = L U for the first matrix: apply the (1-based) row swaps to A, then compare */
    for (int k = 0; k < M * N; k++) pa[k] = at(&args[0], k);
    for (int t = 0; t < K; t++) {
        int p = ati(&r.tuple[1], t) - 1;
        ASSERT_TRUE(p >= t && p < M);
        for (int j = 0; j < N; j++) {
            double s = pa[t * N + j];
            pa[t * N + j] = pa[p * N + j];
            pa[p * N + j] = s;
        }
    }
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int t = 0; t <= (i < j ? i : j) && t < K; t++) {
                double l = t == i ? 1 : at(&r.tuple[0], i * N + t);
                s += l * at(&r.tuple[0], t * N + j);
            }
            worst = fmax(worst, fabs(s - pa[i * N + j]));
        }
    EXPECT_TRUE(worst < 10 * (K > 8 ? K : 1) * eps_of(dt));
    ot_value_release(&r);
    release_all(args, 1);
    ot_module_free(m);
    free(pa);
    free(a);
}

static void test_getrf(void) {
    check_getrf(OT_F32, 4, 4);
    check_getrf(OT_F64, 4, 4);
    check_getrf(OT_F32, 5, 3);
    check_getrf(OT_F64, 3, 5);
    /* the column-major copies by register tiles (16 x 16 f32, 8 x 8 f64) with edges left over */
    check_getrf(OT_F32, 37, 21);
    check_getrf(OT_F64, 19, 26);
    check_getrf(OT_F32, 32, 48);
    check_getrf(OT_F64, 64, 64);
}

/* ---- geqrf + orgqr --------------------------------------------------------------------- */

static void check_qr(ot_dtype dt, int M, int N) {
    enum { B = 2 };
    int K = M < N ? M : N;
    double a[B * 7 * 7];
    for (int k = 0; k < B * M * N; k++) a[k] = uni();
    /* geqrf, then orgqr on the first K columns (M x K; JAX slices or pads the same way) */
    ot_module *m = NULL;
    ASSERT_OK(parse(&m,
                    "HloModule m\nENTRY e {\n  a = %s[%d,%d,%d] parameter(0)\n"
                    "  g = (%s[%d,%d,%d]{1,2,0}, %s[%d,%d]{1,0}) custom-call(a), "
                    "custom_call_target=\"lapack_%cgeqrf_ffi\", api_version=API_VERSION_TYPED_FFI, "
                    "backend_config={}\n"
                    "  h = %s[%d,%d,%d] get-tuple-element(g), index=0\n"
                    "  tau = %s[%d,%d] get-tuple-element(g), index=1\n"
                    "  hk = %s[%d,%d,%d] slice(h), slice={[0:%d], [0:%d], [0:%d]}\n"
                    "  q = %s[%d,%d,%d]{1,2,0} custom-call(hk, tau), "
                    "custom_call_target=\"lapack_%corgqr_ffi\", api_version=API_VERSION_TYPED_FFI, "
                    "backend_config={}\n"
                    "  ROOT r = (%s[%d,%d,%d], %s[%d,%d,%d]) tuple(h, q)\n}\n",
                    tn(dt), B, M, N, tn(dt), B, M, N, tn(dt), B, K, tc(dt), tn(dt), B, M, N, tn(dt),
                    B, K, tn(dt), B, M, K, B, M, K, tn(dt), B, M, K, tc(dt), tn(dt), B, M, N,
                    tn(dt), B, M, K));
    ot_value args[1] = {arr(dt, a, 3, (int64_t[]){B, M, N})}, r;
    run_both("qr", m, args, 1, &r);
    const ot_value *h = &r.tuple[0], *q = &r.tuple[1];
    double worst = 0;
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < K; i++) /* Q^T Q = I */
            for (int j = 0; j < K; j++) {
                double s = 0;
                for (int t = 0; t < M; t++)
                    s += at(q, (b * M + t) * K + i) * at(q, (b * M + t) * K + j);
                worst = fmax(worst, fabs(s - (i == j)));
            }
        for (int i = 0; i < M; i++) /* Q R = A, R the upper triangle of h's first K rows */
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int t = 0; t < K && t <= j; t++)
                    s += at(q, (b * M + i) * K + t) * at(h, (b * M + t) * N + j);
                worst = fmax(worst, fabs(s - at(&args[0], (b * M + i) * N + j)));
            }
    }
    EXPECT_TRUE(worst < 10 * eps_of(dt));
    ot_value_release(&r);
    release_all(args, 1);
    ot_module_free(m);
}

static void test_geqrf_orgqr(void) {
    check_qr(OT_F32, 6, 4);
    check_qr(OT_F64, 6, 4);
    check_qr(OT_F32, 3, 5);
    check_qr(OT_F64, 4, 4);
}

/* ---- syevd ----------------------------------------------------------------------------- */

static void check_syevd(ot_dtype dt, char uplo, char mode) {
    enum { B = 2, N = 6 };
    double a[B * N * N];
    spd(a, B, N);
    /* the triangle not named by uplo is garbage: the routine must not read it */
    for (int q = 0; q < B; q++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++)
                if (uplo == 'L' ? j > i : j < i) a[(q * N + i) * N + j] = 1e3;
    ot_module *m = NULL;
    ASSERT_OK(parse(&m,
                    "HloModule m\nENTRY e {\n  a = %s[%d,%d,%d] parameter(0)\n"
                    "  ROOT r = (%s[%d,%d,%d]{1,2,0}, %s[%d,%d]{1,0}, s32[%d]{0}) custom-call(a), "
                    "custom_call_target=\"lapack_%csyevd_ffi\", api_version=API_VERSION_TYPED_FFI, "
                    "backend_config={mode = %d : ui8, uplo = %d : ui8}\n}\n",
                    tn(dt), B, N, N, tn(dt), B, N, N, tn(dt), B, N, B, tc(dt), (int)mode,
                    (int)uplo));
    ot_value args[1] = {arr(dt, a, 3, (int64_t[]){B, N, N})}, r;
    run_both("syevd", m, args, 1, &r);
    double worst = 0;
    for (int q = 0; q < B; q++) {
        EXPECT_INT_EQ(ati(&r.tuple[2], q), 0);
        double trace = 0, wsum = 0;
        for (int i = 0; i < N; i++) trace += a[(q * N + i) * N + i];
        for (int i = 0; i < N; i++) {
            wsum += at(&r.tuple[1], q * N + i);
            if (i) EXPECT_TRUE(at(&r.tuple[1], q * N + i) >= at(&r.tuple[1], q * N + i - 1));
        }
        worst = fmax(worst, fabs(trace - wsum) / N);
        if (mode != 'V') continue;
        for (int i = 0; i < N; i++) /* A v_j = w_j v_j, A symmetric from the named triangle */
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int t = 0; t < N; t++) {
                    int x = uplo == 'L' ? (i >= t ? i : t) : (i <= t ? i : t);
                    int y = x == i ? t : i;
                    s += a[(q * N + x) * N + y] * at(&r.tuple[0], (q * N + t) * N + j);
                }
                worst = fmax(worst, fabs(s - at(&r.tuple[1], q * N + j) *
                                                 at(&r.tuple[0], (q * N + i) * N + j)));
            }
    }
    EXPECT_TRUE(worst < 20 * eps_of(dt));
    ot_value_release(&r);
    release_all(args, 1);
    ot_module_free(m);
}

static void test_syevd(void) {
    check_syevd(OT_F32, 'L', 'V');
    check_syevd(OT_F64, 'U', 'V');
    check_syevd(OT_F32, 'U', 'N');
    check_syevd(OT_F64, 'L', 'N');
}

/* ---- gesdd / gesvd --------------------------------------------------------------------- */

static void check_svd(ot_dtype dt, bool dd, char mode, int M, int N) {
    enum { B = 2 };
    int K = M < N ? M : N;
    bool full = mode == 'A';
    int uc = full ? M : K, vr = full ? N : K;
    double a[B * 7 * 7];
    for (int k = 0; k < B * M * N; k++) a[k] = uni();
    ot_module *m = NULL;
    ASSERT_OK(parse(&m,
                    "HloModule m\nENTRY e {\n  a = %s[%d,%d,%d] parameter(0)\n"
                    "  ROOT r = (%s[%d,%d,%d], %s[%d,%d], %s[%d,%d,%d], %s[%d,%d,%d], s32[%d]) "
                    "custom-call(a), custom_call_target=\"lapack_%cges%s_ffi\", "
                    "api_version=API_VERSION_TYPED_FFI, backend_config={mode = %d : ui8}\n}\n",
                    tn(dt), B, M, N, tn(dt), B, M, N, tn(dt), B, K, tn(dt), B, M, uc, tn(dt), B, vr,
                    N, B, tc(dt), dd ? "dd" : "vd", (int)mode));
    ot_value args[1] = {arr(dt, a, 3, (int64_t[]){B, M, N})}, r;
    run_both("svd", m, args, 1, &r);
    const ot_value *s = &r.tuple[1], *u = &r.tuple[2], *vt = &r.tuple[3];
    double worst = 0;
    for (int q = 0; q < B; q++) {
        EXPECT_INT_EQ(ati(&r.tuple[4], q), 0);
        double fro = 0, ss = 0; /* sum of squares: ||A||_F^2 = sum s^2 */
        for (int k = 0; k < M * N; k++) fro += a[q * M * N + k] * a[q * M * N + k];
        for (int k = 0; k < K; k++) {
            ss += at(s, q * K + k) * at(s, q * K + k);
            if (k) EXPECT_TRUE(at(s, q * K + k) <= at(s, q * K + k - 1));
        }
        worst = fmax(worst, fabs(fro - ss) / (M * N));
        if (mode == 'N') {
            for (int k = 0; k < M * uc; k++) EXPECT_TRUE(at(u, q * M * uc + k) == 0);
            continue;
        }
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double x = 0;
                for (int t = 0; t < K; t++)
                    x += at(u, (q * M + i) * uc + t) * at(s, q * K + t) *
                         at(vt, (q * vr + t) * N + j);
                worst = fmax(worst, fabs(x - a[(q * M + i) * N + j]));
            }
    }
    EXPECT_TRUE(worst < 20 * eps_of(dt));
    ot_value_release(&r);
    release_all(args, 1);
    ot_module_free(m);
}

static void test_gesdd_gesvd(void) {
    const char modes[] = "ASN";
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++)
            for (int dd = 0; dd < 2; dd++) {
                check_svd(d ? OT_F64 : OT_F32, dd, modes[k], 6, 4);
                check_svd(d ? OT_F64 : OT_F32, dd, modes[k], 3, 5);
            }
}

/* ---- the module's checks --------------------------------------------------------------- */

static void expect_parse_error(const char *want, const char *result, const char *target,
                               const char *config) {
    ot_module *m = NULL;
    ot_status s = parse(&m,
                        "HloModule m\nENTRY e {\n  a = f32[2,4,4] parameter(0)\n"
                        "  ROOT r = %s custom-call(a), custom_call_target=\"%s\", "
                        "backend_config=%s\n}\n",
                        result, target, config);
    EXPECT_TRUE(s != OT_OK);
    if (s != OT_OK) EXPECT_STR_CONTAINS(ot_last_error(), want);
    ot_module_free(m);
}

static void test_bad_modules(void) {
    expect_parse_error("result 1 (info) is s32[3], expected s32[2]", "(f32[2,4,4], s32[3])",
                       "lapack_spotrf_ffi", "{uplo = 76 : ui8}");
    expect_parse_error("result 0 is f64[2,4,4], expected f32[2,4,4]", "(f64[2,4,4], s32[2])",
                       "lapack_spotrf_ffi", "{uplo = 76 : ui8}");
    expect_parse_error("operand 0 is f32[2,4,4], expected a f64 matrix", "(f64[2,4,4], s32[2])",
                       "lapack_dpotrf_ffi", "{uplo = 76 : ui8}");
    expect_parse_error("expected a tuple of 3", "f32[2,4,4]", "lapack_sgetrf_ffi", "{}");
    expect_parse_error("backend_config lacks uplo", "(f32[2,4,4], s32[2])", "lapack_spotrf_ffi",
                       "{}");
    expect_parse_error("uplo = 88 is not one of", "(f32[2,4,4], s32[2])", "lapack_spotrf_ffi",
                       "{uplo = 88 : ui8}");
    expect_parse_error("unknown flag", "(f32[2,4,4], s32[2])", "lapack_spotrf_ffi",
                       "{uplo = 76 : ui8, color = 1 : ui8}");
    expect_parse_error("not a dictionary", "(f32[2,4,4], s32[2])", "lapack_spotrf_ffi", "\"L\"");
    expect_parse_error("takes 2 operands, got 1", "f32[2,4,4]", "lapack_strsm_ffi",
                       "{diag = 78 : ui8, side = 76 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8}");
    expect_parse_error("result 2 (u) is f32[2,4,2], expected f32[2,4,4]",
                       "(f32[2,4,4], f32[2,4], f32[2,4,2], f32[2,4,4], s32[2])",
                       "lapack_sgesdd_ffi", "{mode = 65 : ui8}");
    /* the orgqr sizes LAPACK requires (rows >= columns >= reflectors) */
    ot_module *m = NULL;
    ot_status s = parse(&m, "HloModule m\nENTRY e {\n  a = f32[3,5] parameter(0)\n"
                            "  t = f32[3] parameter(1)\n  ROOT q = f32[3,5] custom-call(a, t), "
                            "custom_call_target=\"lapack_sorgqr_ffi\"\n}\n");
    EXPECT_TRUE(s != OT_OK);
    if (s != OT_OK) EXPECT_STR_CONTAINS(ot_last_error(), "rows >= columns >= reflectors");
    ot_module_free(m);
    /* complex dtypes and routines not run: the module parses; running it is UNIMPLEMENTED */
    const char *refused[] = {"lapack_cpotrf_ffi", "lapack_sgeev_ffi", "lapack_zgesdd_ffi"};
    for (int k = 0; k < 3; k++) {
        m = NULL;
        ASSERT_OK(
            parse(&m,
                  "HloModule m\nENTRY e {\n  a = f32[4,4] parameter(0)\n"
                  "  ROOT r = (f32[4,4], s32[]) custom-call(a), custom_call_target=\"%s\"\n}\n",
                  refused[k]));
        double z[16] = {0};
        ot_value arg = arr(OT_F32, z, 2, (int64_t[]){4, 4}), r = ot_value_empty();
        EXPECT_STATUS(ot_evaluate(m, &arg, 1, NULL, &r), OT_ERR_UNIMPLEMENTED);
        EXPECT_STR_CONTAINS(ot_last_error(), "complex dtypes");
        ot_value_release(&arg);
        ot_module_free(m);
    }
}

/* Empty matrices and an empty batch: nothing to factor, every info 0. */
static void test_empty(void) {
    ot_module *m = NULL;
    ASSERT_OK(parse(
        &m, "HloModule m\nENTRY e {\n  a = f32[3,0,0] parameter(0)\n"
            "  ROOT r = (f32[3,0,0], s32[3]) custom-call(a), "
            "custom_call_target=\"lapack_spotrf_ffi\", backend_config={uplo = 76 : ui8}\n}\n"));
    ot_value arg = arr(OT_F32, NULL, 3, (int64_t[]){3, 0, 0}), r;
    run_both("potrf empty", m, &arg, 1, &r);
    for (int q = 0; q < 3; q++) EXPECT_INT_EQ(ati(&r.tuple[1], q), 0);
    ot_value_release(&r);
    ot_value_release(&arg);
    ot_module_free(m);
    ASSERT_OK(parse(&m, "HloModule m\nENTRY e {\n  a = f64[0,3,3] parameter(0)\n"
                        "  ROOT r = (f64[0,3,3], f64[0,3], s32[0]) custom-call(a), "
                        "custom_call_target=\"lapack_dsyevd_ffi\", "
                        "backend_config={mode = 86 : ui8, uplo = 76 : ui8}\n}\n"));
    arg = arr(OT_F64, NULL, 3, (int64_t[]){0, 3, 3});
    run_both("syevd empty batch", m, &arg, 1, &r);
    ot_value_release(&r);
    ot_value_release(&arg);
    ot_module_free(m);
}

/* Batches large enough for the fast kernel to split them over the pool (32 matrices of 24 x 24):
 * each routine's result must not depend on the thread count (run_both). */
static void test_batch_split(void) {
    enum { B = 32, N = 24 };
    static double a[B * N * N], b[B * N * 3];
    spd(a, B, N);
    for (int k = 0; k < B * N * 3; k++) b[k] = uni();
    a[(5 * N + 7) * N + 7] = -1; /* matrix 5: not positive definite */
    const struct {
        const char *result, *target, *config;
    } rs[] = {
        {"(f64[32,24,24], s32[32])", "lapack_dpotrf_ffi", "{uplo = 76 : ui8}"},
        {"(f64[32,24,24], s32[32,24], s32[32])", "lapack_dgetrf_ffi", "{}"},
        {"(f64[32,24,24], f64[32,24])", "lapack_dgeqrf_ffi", "{}"},
        {"(f64[32,24,24], f64[32,24], s32[32])", "lapack_dsyevd_ffi",
         "{mode = 86 : ui8, uplo = 85 : ui8}"},
        {"(f64[32,24,24], f64[32,24], f64[32,24,24], f64[32,24,24], s32[32])", "lapack_dgesdd_ffi",
         "{mode = 83 : ui8}"},
    };
    for (int k = 0; k < 5; k++) {
        ot_module *m = NULL;
        ASSERT_OK(parse(&m,
                        "HloModule m\nENTRY e {\n  a = f64[32,24,24] parameter(0)\n"
                        "  ROOT r = %s custom-call(a), custom_call_target=\"%s\", "
                        "backend_config=%s\n}\n",
                        rs[k].result, rs[k].target, rs[k].config));
        ot_value arg = arr(OT_F64, a, 3, (int64_t[]){B, N, N}), r;
        run_both(rs[k].target, m, &arg, 1, &r);
        if (k == 0)
            for (int q = 0; q < B; q++) EXPECT_INT_EQ(ati(&r.tuple[1], q), q == 5 ? 8 : 0);
        ot_value_release(&r);
        ot_value_release(&arg);
        ot_module_free(m);
    }
    ot_module *m = NULL;
    ASSERT_OK(parse(&m,
                    "HloModule m\nENTRY e {\n  a = f32[32,24,24] parameter(0)\n"
                    "  b = f32[32,24,3] parameter(1)\n  ROOT x = f32[32,24,3] custom-call(a, b), "
                    "custom_call_target=\"lapack_strsm_ffi\", backend_config={diag = 78 : ui8, "
                    "side = 76 : ui8, trans_x = 84 : ui8, uplo = 76 : ui8}\n}\n"));
    ot_value args[2] = {arr(OT_F32, a, 3, (int64_t[]){B, N, N}),
                        arr(OT_F32, b, 3, (int64_t[]){B, N, 3})},
             x;
    run_both("trsm batch", m, args, 2, &x);
    ot_value_release(&x);
    release_all(args, 2);
    ot_module_free(m);
}

/* A LAPACK call's first result takes its operand's buffer when that operand is a temp dying
 * there (trsm's b, potrf's and getrf's a; ir_lapack_in_place_operand): each matrix is read
 * before that matrix is written, so the results stay the evaluator's at any thread count. */
static void test_in_place(void) {
    enum { B = 32, N = 24 };
    static double a[B * N * N], b[B * N * 3];
    spd(a, B, N);
    for (int k = 0; k < B * N * 3; k++) b[k] = uni();
    ot_module *m = NULL;
    ASSERT_OK(parse(
        &m, "HloModule m\nENTRY e {\n  a = f32[32,24,24] parameter(0)\n"
            "  b = f32[32,24,3] parameter(1)\n  a2 = f32[32,24,24] add(a, a)\n"
            "  c = (f32[32,24,24], s32[32]) custom-call(a2), custom_call_target="
            "\"lapack_spotrf_ffi\", backend_config={uplo = 76 : ui8}\n"
            "  l = f32[32,24,24] get-tuple-element(c), index=0\n"
            "  nb = f32[32,24,3] negate(b)\n"
            "  x = f32[32,24,3] custom-call(l, nb), custom_call_target=\"lapack_strsm_ffi\", "
            "backend_config={diag = 78 : ui8, side = 76 : ui8, trans_x = 78 : ui8, uplo = 76 : "
            "ui8}\n"
            "  y = f32[32,24,3] custom-call(l, x), custom_call_target=\"lapack_strsm_ffi\", "
            "backend_config={diag = 78 : ui8, side = 76 : ui8, trans_x = 84 : ui8, uplo = 76 : "
            "ui8}\n"
            "  ny = f32[32,24,3] negate(y)\n  a3 = f32[32,24,24] negate(a)\n"
            "  lu = (f32[32,24,24], s32[32,24], s32[32]) custom-call(a3), custom_call_target="
            "\"lapack_sgetrf_ffi\", backend_config={}\n"
            "  u = f32[32,24,24] get-tuple-element(lu), index=0\n"
            "  nu = f32[32,24,24] negate(u)\n"
            "  ROOT r = (f32[32,24,3], f32[32,24,24]) tuple(ny, nu)\n}\n"));
    ot_compile_options o = ot_compile_options_default();
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, &o, &e));
    int calls = 0;
    for (int k = 0; k < ot_executable_kernel_count(e); k++) {
        const ot_kernel *kn = ot_executable_kernel(e, k);
        if (kn->opcode != OT_OP_CUSTOM_CALL) continue;
        calls++;
        bool trsm = strstr(kn->instr->attrs->custom_call_target, "trsm") != NULL;
        int q = trsm ? 1 : 0;
        EXPECT_INT_EQ(kn->in_place_input, q);
        EXPECT_INT_EQ(ot_executable_slot(e, kn->outputs[0])->offset,
                      ot_executable_slot(e, kn->inputs[q])->offset);
    }
    EXPECT_INT_EQ(calls, 4);
    ot_executable_free(e);
    ot_value args[2] = {arr(OT_F32, a, 3, (int64_t[]){B, N, N}),
                        arr(OT_F32, b, 3, (int64_t[]){B, N, 3})},
             r;
    run_both("in place", m, args, 2, &r);
    ot_value_release(&r);
    release_all(args, 2);
    ot_module_free(m);
}

/* The flush-to-zero mode (default, as XLA's CPU runtime, which sets MXCSR's FTZ and DAZ around
 * its LAPACK calls too): subnormal inputs read as zero, subnormal results flush. XLA gives
 * [0, 0, 0.5] for this solve; with keep_denormals the exact quotients come back. */
static void test_flush_to_zero(void) {
    for (int keep = 0; keep < 2; keep++) {
        ot_module *m = NULL;
        ASSERT_OK(parse(&m, "HloModule m\nENTRY e {\n  a = f32[3,3] parameter(0)\n"
                            "  b = f32[3,1] parameter(1)\n  ROOT x = f32[3,1] custom-call(a, b), "
                            "custom_call_target=\"lapack_strsm_ffi\", backend_config={diag = 78 : "
                            "ui8, side = 76 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8}\n}\n"));
        double a[9] = {2, 0, 0, 0, 2, 0, 0, 0, 2}, b[3] = {1e-38, 3e-39, 1};
        ot_value args[2] = {arr(OT_F32, a, 2, (int64_t[]){3, 3}),
                            arr(OT_F32, b, 2, (int64_t[]){3, 1})},
                 x = ot_value_empty();
        ot_eval_options o = ot_eval_options_default();
        o.keep_denormals = keep;
        ASSERT_OK(ot_evaluate(m, args, 2, &o, &x));
        const float *g = x.array.data;
        if (keep) {
            EXPECT_TRUE(g[0] == 1e-38f / 2 && g[1] == 3e-39f / 2);
        } else {
            EXPECT_TRUE(g[0] == 0 && g[1] == 0);
        }
        EXPECT_TRUE(g[2] == 0.5f);
        ot_value_release(&x);
        if (!keep) { /* the runtime's kernels in the same mode */
            ot_value r;
            run_both("trsm ftz", m, args, 2, &r);
            EXPECT_TRUE(((const float *)r.array.data)[0] == 0);
            ot_value_release(&r);
        }
        release_all(args, 2);
        ot_module_free(m);
    }
}

OT_TEST_MAIN(OT_TEST(test_potrf), OT_TEST(test_trsm), OT_TEST(test_getrf),
             OT_TEST(test_geqrf_orgqr), OT_TEST(test_syevd), OT_TEST(test_gesdd_gesvd),
             OT_TEST(test_bad_modules), OT_TEST(test_empty), OT_TEST(test_batch_split),
             OT_TEST(test_in_place), OT_TEST(test_flush_to_zero))
