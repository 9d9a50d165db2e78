/* Fast kernels against their reference twins: random shapes and dimension numbers (seeded), each
 * program compiled at -O0 (one kernel per op) and executed twice through ot_execute_on_host —
 * reference kernels, then fast kernels on pools of 1, 2, 3 and 8 threads. Fast results must be
 * bitwise identical for every thread count. Against the reference: transpose, elementwise ops and
 * reductions over many outputs bitwise; max/min reductions bitwise; dots that the own GEMM
 * computes (own_gemm) bitwise; the narrower dots (OpenBLAS), convolution and the
 * blocked products of few long rows within the error bound of a reordered sum,
 * |fast - ref| <= 2 * n * u * S (+ the smallest normal), where n is the length of the sum, u the
 * unit roundoff (2^-24 f32, 2^-53 f64) and S the same sum over absolute values. */
#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#include "exec/fast_internal.h"

#include <cblas.h>
#undef I
#include <dirent.h>
#include <float.h>
#include <string.h>

static uint64_t g_rng = 0x5eed;

static uint64_t next_u64(void) {
    return ot_test_splitmix64(&g_rng);
}
static int64_t rnd(int64_t lo, int64_t hi) { /* [lo, hi] */
    return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1));
}
static double rnd_unit(void) {
    return (double)(next_u64() >> 11) / 9007199254740992.0;
}

static ot_threadpool *g_pools[4];
static const int g_nthreads[4] = {1, 2, 3, 8};

static void fill_random(ot_tensor *t, double lo, double hi) {
    int64_t n = ot_shape_numel_unchecked(&t->shape);
    for (int64_t e = 0; e < n; e++) {
        double v = lo + (hi - lo) * rnd_unit();
        switch (t->shape.dtype) {
        case OT_F32: ((float *)t->data)[e] = (float)v; break;
        case OT_F64: ((double *)t->data)[e] = v; break;
        default: {
            uint64_t b = next_u64();
            memcpy((char *)t->data + e * (int64_t)ot_dtype_size(t->shape.dtype), &b,
                   ot_dtype_size(t->shape.dtype));
        }
        }
    }
}

/* Set: parameter 0 is donated to the output (run_exe passes one buffer for both). */
static bool g_in_place;

/* Runs exe on args; outs[k] allocated here. pool NULL: reference kernels. */
static ot_status run_exe(const ot_executable *exe, const ot_tensor *args, int nargs, ot_tensor *out,
                         ot_threadpool *pool, bool reference, int *fast_run) {
    int32_t os = ot_executable_output_slot(exe, 0);
    const ot_slot *sl = ot_executable_slot(exe, os);
    OT_CHECK(ot_tensor_alloc(out, &sl->shape));
    int64_t an = ot_executable_arena_size(exe);
    void *arena = an ? ot_aligned_alloc(64, (size_t)an) : NULL;
    void *params[8];
    for (int k = 0; k < nargs; k++) params[k] = args[k].data;
    if (g_in_place) { /* parameter 0 donated: the output is its buffer, holding its values */
        memcpy(out->data, args[0].data, out->nbytes);
        params[0] = out->data;
    }
    void *outs[1] = {out->data};
    ot_run_options o = ot_run_options_default();
    o.reference_kernels = reference;
    o.pool = pool;
    ot_run_result r;
    ot_status st = ot_execute_on_host(exe, arena, params, outs, &o, 0, &r);
    if (fast_run) *fast_run = r.fast_kernels_run;
    ot_aligned_free(arena);
    if (st != OT_OK) ot_tensor_release(out);
    return st;
}

static ot_executable *compile0(const ot_module *m) {
    ot_compile_options o = ot_compile_options_default();
    o.opt_level = 0;
    ot_executable *e = NULL;
    if (ot_compile(m, &o, &e) != OT_OK) {
        fprintf(stderr, "compile: %s\n", ot_last_error());
        return NULL;
    }
    return e;
}

static bool bits_equal(const ot_tensor *a, const ot_tensor *b) {
    return a->nbytes == b->nbytes && (a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes));
}

/* Runs the fast kernels on every pool: all bitwise equal; returns the 1-thread result in *fast.
 * want_fast: the number of kernels that must have run natively. */
static bool run_all_pools(const ot_executable *exe, const ot_tensor *args, int nargs,
                          ot_tensor *fast, int want_fast) {
    bool ok = true;
    for (int p = 0; p < 4; p++) {
        ot_tensor t;
        int fr = 0;
        if (run_exe(exe, args, nargs, &t, g_pools[p], false, &fr) != OT_OK) {
            fprintf(stderr, "fast run: %s\n", ot_last_error());
            return false;
        }
        if (fr != want_fast) {
            fprintf(stderr, "%d fast kernels ran, expected %d\n", fr, want_fast);
            ok = false;
        }
        if (p == 0) {
            *fast = t;
        } else {
            if (!bits_equal(&t, fast)) {
                fprintf(stderr, "fast result on %d threads differs from 1 thread\n", g_nthreads[p]);
                ok = false;
            }
            ot_tensor_release(&t);
        }
    }
    if (!ok && want_fast >= 0) ot_tensor_release(fast);
    return ok;
}

/* |a - b| <= 2 n u S + tiny, elementwise. */
static bool within_bound(const ot_tensor *a, const ot_tensor *b, const ot_tensor *s, int64_t n,
                         int64_t *bad) {
    int64_t cnt = ot_shape_numel_unchecked(&a->shape);
    bool f32 = a->shape.dtype == OT_F32;
    double u = f32 ? 0x1p-24 : 0x1p-53, tiny = f32 ? FLT_MIN : DBL_MIN;
    for (int64_t e = 0; e < cnt; e++) {
        double x = f32 ? ((float *)a->data)[e] : ((double *)a->data)[e];
        double y = f32 ? ((float *)b->data)[e] : ((double *)b->data)[e];
        double sv = f32 ? ((float *)s->data)[e] : ((double *)s->data)[e];
        if (isnan(x) && isnan(y)) continue;
        if (!(fabs(x - y) <= 2.0 * (double)(n ? n : 1) * u * fabs(sv) + tiny)) {
            *bad = e;
            return false;
        }
    }
    return true;
}

/* ---- dot ---------------------------------------------------------------------------------- */

static void shuffle(int64_t *a, int n) {
    for (int k = n - 1; k > 0; k--) {
        int j = (int)rnd(0, k);
        int64_t t = a[k];
        a[k] = a[j];
        a[j] = t;
    }
}

/* A random dot_general; abs_inputs: the same dot over |lhs|, |rhs| (for the error bound). */
static ot_module *dot_module(ot_dtype t, const ot_shape *ls, const ot_shape *rs,
                             const ot_dot_dims *dn, bool abs_inputs) {
    ot_module *m = ot_module_new("dot");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *l = ot_build_parameter(c, 0, *ls, "l");
    ot_instr *r = ot_build_parameter(c, 1, *rs, "r");
    if (abs_inputs) {
        l = ot_build_unary(c, OT_OP_ABS, l);
        r = ot_build_unary(c, OT_OP_ABS, r);
    }
    ot_computation_set_root(c,
                            ot_build_dot(c, l, r, dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT));
    ot_module_set_entry(m, c);
    (void)t;
    if (ot_module_finalize(m) != OT_OK) {
        fprintf(stderr, "dot module: %s\n", ot_last_error());
        ot_module_free(m);
        return NULL;
    }
    return m;
}

/* Whether the fast dot runs an f32 (t) product of M x N x K (after any copy of the lhs: lt, the
 * lhs read transposed) on its own GEMM, bit-identical to the reference (src/exec/fast_dot.c
 * sg_use, sd_use): x86-64 with AVX-512; at least 12 rows and 8 columns, more than 16 with a
 * row-major lhs (f32) or more than 8 (f64). The narrower ones run through OpenBLAS. */
static bool own_gemm(ot_dtype t, int64_t M, int64_t N, int64_t K, bool lt) {
#if defined(__x86_64__)
    bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma");
#else
    bool cpu = false;
#endif
    if (!cpu || K < 1 || M < 12) return false;
    return t == OT_F32 ? N >= 8 && (N > 16 || lt) : N > 8;
}

/* Checks fast vs reference for module m (params args), and the bound module mabs. */
static void check_bound_case(ot_module *m, ot_module *mabs, ot_tensor *args, int nargs, int64_t n,
                             const char *what) {
    ot_executable *e = compile0(m), *ea = compile0(mabs);
    ASSERT_TRUE(e && ea);
    ot_tensor ref, fast, sabs;
    EXPECT_OK(run_exe(e, args, nargs, &ref, NULL, true, NULL));
    EXPECT_OK(run_exe(ea, args, nargs, &sabs, NULL, true, NULL));
    bool ok = run_all_pools(e, args, nargs, &fast, 1);
    EXPECT_TRUE(ok);
    if (ok) {
        int64_t bad = -1;
        bool in = within_bound(&fast, &ref, &sabs, n, &bad);
        if (!in) fprintf(stderr, "%s: element %lld outside the bound\n", what, (long long)bad);
        EXPECT_TRUE(in);
        ot_tensor_release(&fast);
    }
    ot_tensor_release(&ref);
    ot_tensor_release(&sabs);
    ot_executable_free(e);
    ot_executable_free(ea);
}

/* Checks fast vs reference for module m (params args): bitwise when exact, else within the
 * bound of a reordered sum (mabs: the same over absolute values). */
static void check_case(ot_module *m, ot_module *mabs, ot_tensor *args, int nargs, int64_t n,
                       bool exact, const char *what) {
    if (exact) {
        ot_executable *e = compile0(m);
        ASSERT_TRUE(e);
        ot_tensor ref, fast;
        EXPECT_OK(run_exe(e, args, nargs, &ref, NULL, true, NULL));
        bool ok = run_all_pools(e, args, nargs, &fast, 1);
        EXPECT_TRUE(ok);
        if (ok) {
            bool same = bits_equal(&fast, &ref);
            if (!same) fprintf(stderr, "%s: not bitwise equal to the reference\n", what);
            EXPECT_TRUE(same);
            ot_tensor_release(&fast);
        }
        ot_tensor_release(&ref);
        ot_executable_free(e);
        return;
    }
    check_bound_case(m, mabs, args, nargs, n, what);
}

static void test_dot_random(void) {
    g_rng = 0xd07;
    for (int cs = 0; cs < 80; cs++) {
        ot_dtype t = cs % 2 ? OT_F64 : OT_F32;
        int nb = (int)rnd(0, 2), nc = (int)rnd(1, 2), nlf = (int)rnd(0, 2), nrf = (int)rnd(0, 2);
        int64_t bd[OT_MAX_RANK], cd[OT_MAX_RANK], lfd[OT_MAX_RANK], rfd[OT_MAX_RANK];
        int64_t big = cs % 10 == 0 ? 70 : 9;
        for (int k = 0; k < nb; k++) bd[k] = rnd(1, 4);
        for (int k = 0; k < nc; k++) cd[k] = rnd(1, big);
        for (int k = 0; k < nlf; k++) lfd[k] = rnd(1, big);
        for (int k = 0; k < nrf; k++) rfd[k] = rnd(1, big);
        /* lhs dims: random permutation of (batch, free, contract) roles; same for rhs */
        int lr = nb + nc + nlf, rr = nb + nc + nrf;
        int64_t lpos[OT_MAX_RANK], rpos[OT_MAX_RANK];
        for (int k = 0; k < lr; k++) lpos[k] = k;
        for (int k = 0; k < rr; k++) rpos[k] = k;
        if (rnd(0, 2)) shuffle(lpos, lr); /* a third keep the GEMM order (no copy) */
        if (rnd(0, 2)) shuffle(rpos, rr);
        ot_dot_dims dn;
        memset(&dn, 0, sizeof dn);
        dn.nbatch = nb;
        dn.ncontract = nc;
        int64_t ldims[OT_MAX_RANK], rdims[OT_MAX_RANK];
        /* role index k of lhs: [0, nb) batch, [nb, nb + nlf) free, rest contract */
        for (int k = 0; k < lr; k++) {
            int64_t d = lpos[k];
            if (k < nb) {
                ldims[d] = bd[k];
                dn.lhs_batch[k] = d;
            } else if (k < nb + nlf) {
                ldims[d] = lfd[k - nb];
            } else {
                ldims[d] = cd[k - nb - nlf];
                dn.lhs_contract[k - nb - nlf] = d;
            }
        }
        for (int k = 0; k < rr; k++) {
            int64_t d = rpos[k];
            if (k < nb) {
                rdims[d] = bd[k];
                dn.rhs_batch[k] = d;
            } else if (k < nb + nc) {
                rdims[d] = cd[k - nb];
                dn.rhs_contract[k - nb] = d;
            } else {
                rdims[d] = rfd[k - nb - nc];
            }
        }
        ot_shape ls, rs;
        ASSERT_OK(ot_shape_make(&ls, t, lr, ldims));
        ASSERT_OK(ot_shape_make(&rs, t, rr, rdims));
        ot_module *m = dot_module(t, &ls, &rs, &dn, false),
                  *ma = dot_module(t, &ls, &rs, &dn, true);
        ASSERT_TRUE(m && ma);
        ot_tensor args[2];
        ASSERT_OK(ot_tensor_alloc(&args[0], &ls));
        ASSERT_OK(ot_tensor_alloc(&args[1], &rs));
        fill_random(&args[0], -1, 1);
        fill_random(&args[1], -1, 1);
        int64_t K = 1, M = 1, N = 1;
        for (int k = 0; k < nc; k++) K *= cd[k];
        for (int k = 0; k < nlf; k++) M *= lfd[k];
        for (int k = 0; k < nrf; k++) N *= rfd[k];
        char what[64];
        snprintf(what, sizeof what, "dot case %d", cs);
        check_case(m, ma, args, 2, K, own_gemm(t, M, N, K, false), what);
        ot_tensor_release(&args[0]);
        ot_tensor_release(&args[1]);
        ot_module_free(m);
        ot_module_free(ma);
    }
}

/* Shapes large enough for the GEMM's tile grid to cut them (over M, over N when M is small, both,
 * and batch elements x tiles; batches of tiny products handed out in runs of elements), with odd
 * sizes, M, N or K of 1, N = 10, transposed operands and
 * layouts that need a copy: bits equal on 1, 2, 3 and 8 threads and within the bound of the
 * reference. */
static void test_dot_tiled(void) {
    g_rng = 0x711e;
    static const struct {
        ot_dtype t;
        int64_t b, m, n, k;
        int layout; /* 0: [b,m,k] x [b,k,n]; 1: lhs [b,k,m]; 2: rhs [b,n,k]; 3: both;
                     * 4: lhs [m,b,k] and rhs [k,n,b] (copies) */
    } cs[] = {
        {OT_F32, 1, 517, 263, 301, 0},
        {OT_F32, 1, 517, 263, 301, 3},
        {OT_F32, 1, 1100, 10, 300, 0},
        {OT_F32, 1, 1100, 10, 300, 1},
        {OT_F32, 1, 700, 1500, 10, 2},
        {OT_F32, 1, 7, 1500, 200, 0},
        {OT_F32, 1, 7, 1500, 200, 2},
        {OT_F32, 1, 1500, 700, 1, 0},
        {OT_F32, 1, 4000, 1, 300, 1},
        {OT_F32, 1, 1, 3000, 400, 2},
        {OT_F32, 3, 190, 170, 60, 0},
        {OT_F32, 3, 190, 170, 60, 4},
        {OT_F32, 2, 129, 515, 33, 3},
        {OT_F64, 1, 333, 257, 129, 0},
        {OT_F64, 1, 333, 257, 129, 3},
        {OT_F64, 5, 100, 90, 80, 1},
        /* batches of tiny products (OpenBLAS, the items handed out in runs, the last one short) */
        {OT_F32, 70, 4, 64, 64, 0},
        {OT_F32, 70, 4, 64, 64, 2},
        {OT_F64, 41, 6, 40, 50, 1},
    };
    for (size_t q = 0; q < sizeof cs / sizeof cs[0]; q++) {
        int64_t B = cs[q].b, M = cs[q].m, N = cs[q].n, K = cs[q].k;
        int lay = cs[q].layout;
        bool batched = B > 1, lt = lay == 1 || lay == 3, rt = lay == 2 || lay == 3;
        ot_dot_dims dn;
        memset(&dn, 0, sizeof dn);
        dn.ncontract = 1;
        int64_t ld[3], rd[3];
        int o = batched ? 1 : 0, lr = 2 + o, rr = 2 + o;
        if (lay == 4) { /* lhs [m, b, k], rhs [k, n, b] */
            ld[0] = M, ld[1] = B, ld[2] = K;
            rd[0] = K, rd[1] = N, rd[2] = B;
            dn.nbatch = 1;
            dn.lhs_batch[0] = 1, dn.rhs_batch[0] = 2;
            dn.lhs_contract[0] = 2, dn.rhs_contract[0] = 0;
        } else {
            if (batched) {
                ld[0] = rd[0] = B;
                dn.nbatch = 1;
            }
            ld[o] = lt ? K : M, ld[o + 1] = lt ? M : K;
            rd[o] = rt ? N : K, rd[o + 1] = rt ? K : N;
            dn.lhs_contract[0] = lt ? o : o + 1;
            dn.rhs_contract[0] = rt ? o + 1 : o;
        }
        ot_shape ls, rs;
        ASSERT_OK(ot_shape_make(&ls, cs[q].t, lr, ld));
        ASSERT_OK(ot_shape_make(&rs, cs[q].t, rr, rd));
        ot_module *m = dot_module(cs[q].t, &ls, &rs, &dn, false),
                  *ma = dot_module(cs[q].t, &ls, &rs, &dn, true);
        ASSERT_TRUE(m && ma);
        ot_tensor args[2];
        ASSERT_OK(ot_tensor_alloc(&args[0], &ls));
        ASSERT_OK(ot_tensor_alloc(&args[1], &rs));
        fill_random(&args[0], -1, 1);
        fill_random(&args[1], -1, 1);
        char what[64];
        snprintf(what, sizeof what, "tiled dot case %zu", q);
        check_case(m, ma, args, 2, K, own_gemm(cs[q].t, M, N, K, lt && lay != 4), what);
        ot_tensor_release(&args[0]);
        ot_tensor_release(&args[1]);
        ot_module_free(m);
        ot_module_free(ma);
    }
}

/* Operands read where they lie with batch dims anywhere (attention in [batch, seq, heads, dim]:
 * batch dims 0 and 2, rows seq apart by heads x dim), transposed or not, unit dims between, and
 * layouts whose merged dims are not evenly strided (copied): bits equal on 1, 2, 3 and 8 threads
 * and within the bound of the reference. */
static void test_dot_strided(void) {
    g_rng = 0x57d;
    static const struct {
        int lr, rr;
        int64_t ld[5], rd[5];
        ot_dot_dims dn;
    } cs[] = {
        /* QK^T: [b, q, h, d] x [b, k, h, d] -> [b, h, q, k] */
        {4, 4, {3, 130, 5, 64}, {3, 120, 5, 64}, {2, 1, {0, 2}, {0, 2}, {3}, {3}}},
        /* PV: [b, h, q, k] x [b, k, h, d] -> [b, h, q, d] */
        {4, 4, {3, 5, 130, 120}, {3, 120, 5, 64}, {2, 1, {0, 1}, {0, 2}, {3}, {1}}},
        /* dV-like: lhs contracted on the seq dim: [b, q, h, k] x [b, q, h, d] */
        {4, 4, {2, 150, 4, 70}, {2, 150, 4, 33}, {2, 1, {0, 2}, {0, 2}, {1}, {1}}},
        /* batch dims last, a unit dim among the free dims */
        {4, 4, {90, 1, 80, 6}, {80, 70, 6, 1}, {1, 1, {3}, {2}, {2}, {0}}},
        /* two contracting dims merged ([b, k1, m, k2]: not evenly strided -> copied) */
        {4, 4, {2, 7, 100, 9}, {2, 7, 9, 50}, {1, 2, {0}, {0}, {1, 3}, {1, 2}}},
        /* two contracting dims that merge: lhs [m, k1, k2], rhs [k1, k2, n] */
        {3, 3, {200, 6, 11}, {6, 11, 150}, {0, 2, {0}, {0}, {1, 2}, {0, 1}}},
        /* the same contracting dims listed in the other order (does not merge: copied) */
        {3, 3, {200, 6, 11}, {6, 11, 150}, {0, 2, {0}, {0}, {2, 1}, {1, 0}}},
        /* free dims that merge ([b, m1, m2, k]), the rhs's batch dim between its others */
        {4, 3, {3, 20, 30, 40}, {40, 3, 77}, {1, 1, {0}, {1}, {3}, {0}}},
        /* free dims that do not merge (the batch dim between them: copied) */
        {4, 3, {20, 3, 30, 40}, {40, 3, 77}, {1, 1, {1}, {1}, {3}, {0}}},
    };
    for (size_t q = 0; q < sizeof cs / sizeof cs[0]; q++) {
        ot_dot_dims dn = cs[q].dn;
        ot_shape ls, rs;
        ASSERT_OK(ot_shape_make(&ls, OT_F32, cs[q].lr, cs[q].ld));
        ASSERT_OK(ot_shape_make(&rs, OT_F32, cs[q].rr, cs[q].rd));
        ot_module *m = dot_module(OT_F32, &ls, &rs, &dn, false),
                  *ma = dot_module(OT_F32, &ls, &rs, &dn, true);
        ASSERT_TRUE(m && ma);
        ot_tensor args[2];
        ASSERT_OK(ot_tensor_alloc(&args[0], &ls));
        ASSERT_OK(ot_tensor_alloc(&args[1], &rs));
        fill_random(&args[0], -1, 1);
        fill_random(&args[1], -1, 1);
        int64_t K = 1, M = 1, N = 1;
        for (int k = 0; k < dn.ncontract; k++) K *= ls.dims[dn.lhs_contract[k]];
        for (int d = 0; d < ls.rank; d++) M *= ls.dims[d];
        for (int d = 0; d < rs.rank; d++) N *= rs.dims[d];
        for (int k = 0; k < dn.nbatch; k++) { /* per batch element */
            M /= ls.dims[dn.lhs_batch[k]];
            N /= rs.dims[dn.rhs_batch[k]];
        }
        char what[64];
        snprintf(what, sizeof what, "strided dot case %zu", q);
        check_case(m, ma, args, 2, K, own_gemm(OT_F32, M / K, N / K, K, false), what);
        ot_tensor_release(&args[0]);
        ot_tensor_release(&args[1]);
        ot_module_free(m);
        ot_module_free(ma);
    }
}

/* Under the reference's FTZ the fast dot flushes subnormal results, and on x86 subnormal inputs
 * too (the own GEMM as it packs them, OpenBLAS under FTZ | DAZ): small integers (exact sums in
 * any order) mixed with subnormal inputs times 2^30 (a normal product unless the input reads as
 * zero), products 2^-100 x 2^-30 (subnormal, flushed) and elements whose whole sum is subnormal;
 * the result equals the reference's bit for bit, on every pool (the grid cuts these shapes).
 * Elsewhere only the results are flushed, so the subnormal-input elements are left out of the
 * check. */
static void test_dot_subnormal_ftz(void) {
    g_rng = 0x5b7;
    for (int dt = 0; dt < 2; dt++) {
        ot_dtype t = dt ? OT_F64 : OT_F32;
        int64_t M = 300, N = 200, K = 130;
        ot_shape ls, rs;
        ASSERT_OK(ot_shape_make(&ls, t, 2, (int64_t[]){M, K}));
        ASSERT_OK(ot_shape_make(&rs, t, 2, (int64_t[]){K, N}));
        ot_dot_dims dn = {.nbatch = 0, .ncontract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
        ot_module *m = dot_module(t, &ls, &rs, &dn, false);
        ASSERT_TRUE(m);
        ot_tensor args[2];
        ASSERT_OK(ot_tensor_alloc(&args[0], &ls));
        ASSERT_OK(ot_tensor_alloc(&args[1], &rs));
        double sub = dt ? 0x1p-1060 : 0x1p-140, tiny = dt ? 0x1p-540 : 0x1p-100,
               small = dt ? 0x1p-530 : 0x1p-30;
        /* lhs rows: r % 4 == 0 integers with a subnormal in column 0 (rhs row 0 is 2^30), only
         * that subnormal when r % 8 == 0;
         * 1: only tiny values (whole sums 2^-130 x k: subnormal, flushed); 2, 3: integers */
        for (int64_t r = 0; r < M; r++)
            for (int64_t k = 0; k < K; k++) {
                double v = (double)rnd(-8, 8);
                if (r % 4 == 1) v = k < 3 ? tiny : 0;
                if (r % 8 == 0 && k > 0) v = 0;       /* the subnormal input alone */
                if (k == 0) v = r % 4 == 0 ? sub : 0; /* (2^30 x an integer: inexact sums) */
                if (dt)
                    ((double *)args[0].data)[r * K + k] = v;
                else
                    ((float *)args[0].data)[r * K + k] = (float)v;
            }
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++) {
                double v = k == 0 ? 0x1p30 : (double)rnd(-8, 8);
                if (k > 0 && k < 3) v = n % 2 ? small : (double)rnd(-8, 8);
                if (dt)
                    ((double *)args[1].data)[k * N + n] = v;
                else
                    ((float *)args[1].data)[k * N + n] = (float)v;
            }
        ot_executable *e = compile0(m);
        ASSERT_TRUE(e);
        ot_tensor ref, fast;
        ASSERT_OK(run_exe(e, args, 2, &ref, NULL, true, NULL));
        bool ok = run_all_pools(e, args, 2, &fast, 1);
        EXPECT_TRUE(ok);
        if (ok) {
            size_t es = ot_dtype_size(t);
            int64_t bad = -1, flushed = 0;
            for (int64_t r = 0; r < M && bad < 0; r++) {
#if !(defined(__x86_64__) || defined(__i386__))
                if (r % 4 == 0) continue; /* subnormal inputs read as they are */
#endif
                for (int64_t n = 0; n < N; n++) {
                    size_t at = (size_t)(r * N + n) * es;
                    if (memcmp((char *)fast.data + at, (char *)ref.data + at, es)) {
                        bad = r * N + n;
                        break;
                    }
                    double v =
                        dt ? ((double *)ref.data)[r * N + n] : ((float *)ref.data)[r * N + n];
                    flushed += r % 4 == 1 && n % 2 && v == 0;
                }
            }
            if (bad >= 0)
                fprintf(stderr, "subnormal dot %d: element %lld differs\n", dt, (long long)bad);
            EXPECT_TRUE(bad < 0);
            EXPECT_INT_EQ(flushed, (M / 4) * (N / 2)); /* the subnormal sums are there, as 0 */
            ot_tensor_release(&fast);
        }
        ot_tensor_release(&ref);
        ot_tensor_release(&args[0]);
        ot_tensor_release(&args[1]);
        ot_executable_free(e);
        ot_module_free(m);
    }
}

/* No OpenBLAS worker spins beside the library's pool: the pthreads build's idle workers, started
 * when it was loaded, were stopped when the library was (fast_dot.c), so before any pool exists
 * the process is its main thread alone (with them: one more per extra CPU), and a dot that the
 * library runs through OpenBLAS (5 rows) does not start them again. A threaded OpenBLAS call of the
 * application's own still works: OpenBLAS starts its workers again for it. Runs first, before
 * setup() creates the pools. */
static int process_tasks(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int tasks = 0;
    for (struct dirent *e; (e = readdir(d));) tasks += e->d_name[0] != '.';
    closedir(d);
    return tasks;
}

static void test_blas_idle_workers(void) {
    int tasks = process_tasks();
    if (tasks < 0) printf("    (no /proc/self/task: thread count not checked)\n");
    if (tasks >= 0) EXPECT_INT_EQ(tasks, 1);
    ot_shape ls, rs;
    ASSERT_OK(ot_shape_make(&ls, OT_F32, 2, (int64_t[]){5, 64}));
    ASSERT_OK(ot_shape_make(&rs, OT_F32, 2, (int64_t[]){64, 40}));
    ot_dot_dims dn = {.nbatch = 0, .ncontract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
    ot_module *m = dot_module(OT_F32, &ls, &rs, &dn, false);
    ASSERT_TRUE(m);
    ot_executable *e = compile0(m);
    ASSERT_TRUE(e);
    ot_tensor args[2], t;
    ASSERT_OK(ot_tensor_alloc(&args[0], &ls));
    ASSERT_OK(ot_tensor_alloc(&args[1], &rs));
    fill_random(&args[0], -1, 1);
    fill_random(&args[1], -1, 1);
    ot_threadpool *one = NULL;
    ASSERT_OK(ot_threadpool_create(1, &one));
    int fr = 0;
    ASSERT_OK(run_exe(e, args, 2, &t, one, false, &fr));
    EXPECT_INT_EQ(fr, 1);
    if (tasks >= 0) EXPECT_INT_EQ(process_tasks(), 1);
    ot_threadpool_free(one);
    ot_tensor_release(&t);
    ot_tensor_release(&args[0]);
    ot_tensor_release(&args[1]);
    ot_executable_free(e);
    ot_module_free(m);

    enum { N = 192 };
    static float a[N * N], b[N * N], c1[N * N], c2[N * N];
    for (int k = 0; k < N * N; k++) {
        a[k] = (float)(k % 7) - 3.0f;
        b[k] = (float)(k % 5) * 0.5f;
    }
    int saved = openblas_get_num_threads();
    openblas_set_num_threads(1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c1, N);
    openblas_set_num_threads(2);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c2, N);
    openblas_set_num_threads(saved);
    /* small integers: every sum exact, so any split gives the same bits */
    EXPECT_TRUE(memcmp(c1, c2, sizeof c1) == 0);
}

/* OpenBLAS's own thread count does not change a GEMM's bits (it splits M and N, never K). */
static void test_dot_blas_threads(void) {
    g_rng = 0xb1a5;
    ot_shape ls, rs;
    ASSERT_OK(ot_shape_make(&ls, OT_F32, 2, (int64_t[]){301, 517}));
    ASSERT_OK(ot_shape_make(&rs, OT_F32, 2, (int64_t[]){517, 263}));
    ot_dot_dims dn = {.nbatch = 0, .ncontract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
    ot_module *m = dot_module(OT_F32, &ls, &rs, &dn, false);
    ASSERT_TRUE(m);
    ot_executable *e = compile0(m);
    ASSERT_TRUE(e);
    ot_tensor args[2];
    ASSERT_OK(ot_tensor_alloc(&args[0], &ls));
    ASSERT_OK(ot_tensor_alloc(&args[1], &rs));
    fill_random(&args[0], -1, 1);
    fill_random(&args[1], -1, 1);
    int saved = openblas_get_num_threads();
    ot_tensor first;
    for (int k = 0; k < 4; k++) {
        openblas_set_num_threads(g_nthreads[k]);
        ot_tensor t;
        int fr = 0;
        ASSERT_OK(run_exe(e, args, 2, &t, g_pools[0], false, &fr));
        EXPECT_INT_EQ(fr, 1);
        if (k == 0) {
            first = t;
        } else {
            EXPECT_TRUE(bits_equal(&t, &first));
            ot_tensor_release(&t);
        }
    }
    openblas_set_num_threads(saved);
    ot_tensor_release(&first);
    ot_tensor_release(&args[0]);
    ot_tensor_release(&args[1]);
    ot_executable_free(e);
    ot_module_free(m);
}

/* ---- convolution ---------------------------------------------------------------------------- */

static ot_module *conv_module(const ot_shape *ls, const ot_shape *rs, const ot_window *w,
                              const ot_conv_dims *cd, int64_t groups, bool abs_inputs) {
    ot_module *m = ot_module_new("conv");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *l = ot_build_parameter(c, 0, *ls, "l");
    ot_instr *r = ot_build_parameter(c, 1, *rs, "r");
    if (abs_inputs) {
        l = ot_build_unary(c, OT_OP_ABS, l);
        r = ot_build_unary(c, OT_OP_ABS, r);
    }
    ot_computation_set_root(c, ot_build_convolution(c, l, r, w, cd, groups, 1));
    ot_module_set_entry(m, c);
    if (ot_module_finalize(m) != OT_OK) {
        fprintf(stderr, "conv module: %s\n", ot_last_error());
        ot_module_free(m);
        return NULL;
    }
    return m;
}

static void test_conv_random(void) {
    g_rng = 0xc0;
    int done = 0;
    for (int cs = 0; done < 60 && cs < 400; cs++) {
        ot_dtype t = cs % 2 ? OT_F64 : OT_F32;
        int ns = (int)rnd(1, 3), r = ns + 2;
        int64_t G = rnd(1, 3), Cg = rnd(1, 4), Og = rnd(1, 4), N = rnd(1, 3);
        ot_window w;
        memset(&w, 0, sizeof w);
        w.rank = ns;
        int64_t isp[OT_MAX_RANK], ksp[OT_MAX_RANK];
        for (int s = 0; s < ns; s++) {
            isp[s] = rnd(1, ns == 1 ? 20 : ns == 2 ? 9 : 5);
            ksp[s] = rnd(1, 3);
            ot_window_dim *wd = &w.dims[s];
            wd->size = ksp[s];
            wd->stride = rnd(1, 3);
            wd->pad_lo = rnd(-1, 2);
            wd->pad_hi = rnd(-1, 2);
            wd->window_dilation = rnd(1, 2);
            wd->base_dilation = cs % 4 == 0 ? rnd(1, 2) : 1;
            wd->reversal = rnd(0, 4) == 0;
        }
        /* random layouts: a permutation of (batch, feature, spatial...) for each of the three */
        int64_t lp[OT_MAX_RANK], rp[OT_MAX_RANK], op[OT_MAX_RANK];
        for (int k = 0; k < r; k++) lp[k] = rp[k] = op[k] = k;
        if (rnd(0, 1)) shuffle(lp, r);
        if (rnd(0, 1)) shuffle(rp, r);
        if (rnd(0, 1)) shuffle(op, r);
        ot_conv_dims cd;
        memset(&cd, 0, sizeof cd);
        cd.nspatial = ns;
        cd.input_batch = lp[0];
        cd.input_feature = lp[1];
        cd.kernel_output_feature = rp[0];
        cd.kernel_input_feature = rp[1];
        cd.output_batch = op[0];
        cd.output_feature = op[1];
        int64_t ldims[OT_MAX_RANK], rdims[OT_MAX_RANK];
        ldims[lp[0]] = N;
        ldims[lp[1]] = G * Cg;
        rdims[rp[0]] = G * Og;
        rdims[rp[1]] = Cg;
        for (int s = 0; s < ns; s++) {
            cd.input_spatial[s] = lp[2 + s];
            cd.kernel_spatial[s] = rp[2 + s];
            cd.output_spatial[s] = op[2 + s];
            ldims[lp[2 + s]] = isp[s];
            rdims[rp[2 + s]] = ksp[s];
        }
        ot_shape ls, rs;
        ASSERT_OK(ot_shape_make(&ls, t, r, ldims));
        ASSERT_OK(ot_shape_make(&rs, t, r, rdims));
        ot_clear_error();
        ot_module *m = conv_module(&ls, &rs, &w, &cd, G, false);
        if (!m) continue; /* an empty or negative output window: drawn again */
        ot_module *ma = conv_module(&ls, &rs, &w, &cd, G, true);
        ASSERT_TRUE(ma);
        ot_tensor args[2];
        ASSERT_OK(ot_tensor_alloc(&args[0], &ls));
        ASSERT_OK(ot_tensor_alloc(&args[1], &rs));
        fill_random(&args[0], -1, 1);
        fill_random(&args[1], -1, 1);
        int64_t kn = Cg;
        for (int s = 0; s < ns; s++) kn *= ksp[s];
        char what[64];
        snprintf(what, sizeof what, "conv case %d", cs);
        check_bound_case(m, ma, args, 2, kn, what);
        ot_tensor_release(&args[0]);
        ot_tensor_release(&args[1]);
        ot_module_free(m);
        ot_module_free(ma);
        done++;
    }
    EXPECT_INT_EQ(done, 60);
}

/* A convolution large enough to take several batch chunks and the pool. */
static void test_conv_large(void) {
    g_rng = 0xc1;
    ot_shape ls, rs;
    ASSERT_OK(ot_shape_make(&ls, OT_F32, 4, (int64_t[]){4, 34, 34, 16})); /* b01f */
    ASSERT_OK(ot_shape_make(&rs, OT_F32, 4, (int64_t[]){3, 3, 16, 32}));  /* 01io */
    ot_window w = {.rank = 2};
    for (int s = 0; s < 2; s++)
        w.dims[s] = (ot_window_dim){.size = 3,
                                    .stride = 1,
                                    .pad_lo = 1,
                                    .pad_hi = 1,
                                    .window_dilation = 1,
                                    .base_dilation = 1};
    ot_conv_dims cd = {.nspatial = 2,
                       .input_batch = 0,
                       .input_feature = 3,
                       .input_spatial = {1, 2},
                       .kernel_input_feature = 2,
                       .kernel_output_feature = 3,
                       .kernel_spatial = {0, 1},
                       .output_batch = 0,
                       .output_feature = 3,
                       .output_spatial = {1, 2}};
    ot_module *m = conv_module(&ls, &rs, &w, &cd, 1, false),
              *ma = conv_module(&ls, &rs, &w, &cd, 1, true);
    ASSERT_TRUE(m && ma);
    ot_tensor args[2];
    ASSERT_OK(ot_tensor_alloc(&args[0], &ls));
    ASSERT_OK(ot_tensor_alloc(&args[1], &rs));
    fill_random(&args[0], -1, 1);
    fill_random(&args[1], -1, 1);
    check_bound_case(m, ma, args, 2, 3 * 3 * 16, "conv large");
    ot_tensor_release(&args[0]);
    ot_tensor_release(&args[1]);
    ot_module_free(m);
    ot_module_free(ma);
}

/* ---- transpose ------------------------------------------------------------------------------ */

/* One transpose of s by perm, compiled: every pool's result bit-equal to the one-thread run's. */
static void check_transpose(const ot_shape *s, const int64_t *perm, int r, const char *name,
                            const char *what, int cs) {
    ot_module *m = ot_module_new(name);
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_computation_set_root(c, ot_build_transpose(c, ot_build_parameter(c, 0, *s, "x"), perm, r));
    ot_module_set_entry(m, c);
    ASSERT_OK(ot_module_finalize(m));
    ot_executable *e = compile0(m);
    ASSERT_TRUE(e);
    ot_tensor x, ref, fast;
    ASSERT_OK(ot_tensor_alloc(&x, s));
    fill_random(&x, -1, 1);
    EXPECT_OK(run_exe(e, &x, 1, &ref, NULL, true, NULL));
    if (run_all_pools(e, &x, 1, &fast, 1)) {
        if (!bits_equal(&fast, &ref)) fprintf(stderr, "%stranspose case %d differs\n", what, cs);
        EXPECT_TRUE(bits_equal(&fast, &ref));
        ot_tensor_release(&fast);
    } else {
        EXPECT_TRUE(false);
    }
    ot_tensor_release(&ref);
    ot_tensor_release(&x);
    ot_executable_free(e);
    ot_module_free(m);
}

static void test_transpose_random(void) {
    g_rng = 0x7a;
    static const ot_dtype types[] = {OT_U8, OT_S16, OT_F32, OT_F64};
    for (int cs = 0; cs < 120; cs++) {
        ot_dtype t = types[cs % 4];
        int r = (int)rnd(1, 6);
        int64_t dims[OT_MAX_RANK], perm[OT_MAX_RANK];
        int64_t maxd = r <= 2 ? (cs % 7 == 0 ? 700 : 90) : r <= 4 ? 12 : 5;
        for (int d = 0; d < r; d++) {
            dims[d] = rnd(1, maxd);
            perm[d] = d;
        }
        shuffle(perm, r);
        ot_shape s;
        ASSERT_OK(ot_shape_make(&s, t, r, dims));
        check_transpose(&s, perm, r, "tr", "", cs);
    }
}

/* Transposes whose input-innermost dim is small and moves ([.., 300, 4] -> [.., 4, .., 300], the
 * head dims of grouped-query attention): the tiles run over every dim contiguous in the input
 * with it (fast_transpose.c), 4-byte elements by 16 x 16 register blocks. Sizes off the 16-lane
 * blocks, inner dims of 1 to 6, every element size. */
static void test_transpose_small_inner(void) {
    g_rng = 0x1e4;
    static const ot_dtype types[] = {OT_F32, OT_S32, OT_U8, OT_S16, OT_F64};
    static const int64_t perms[][5] = {{0, 1, 4, 3, 2}, {0, 4, 1, 3, 2}, {2, 1, 0},
                                       {0, 2, 1, 3},    {3, 1, 2, 0},    {1, 2, 0}};
    static const int ranks[] = {5, 5, 3, 4, 4, 3};
    for (int cs = 0; cs < 60; cs++) {
        ot_dtype t = types[cs % 5];
        int pk = cs / 5 % 6, r = ranks[pk];
        int64_t dims[OT_MAX_RANK], perm[OT_MAX_RANK];
        for (int d = 0; d < r; d++) {
            dims[d] = d == r - 1 ? rnd(1, 6) : rnd(1, r <= 3 ? 70 : 23);
            perm[d] = perms[pk][d];
        }
        ot_shape s;
        ASSERT_OK(ot_shape_make(&s, t, r, dims));
        check_transpose(&s, perm, r, "tri", "small-inner ", cs);
    }
}

/* Transposes that keep their rows (the last dim stays last) and are large against the last-level
 * cache copy the rows in the input's order, with streaming stores when the rows are whole 64-byte
 * lines (fast_transpose.c). The cache is set small here so that every case takes that path:
 * rank 3 to 5, rows of whole lines and of odd sizes, dims of 1, every element size. */
static void test_transpose_rows_streamed(void) {
    g_rng = 0x57e;
    ex_transpose_set_llc(64 << 10); /* moved bytes >= 48 KiB: the streamed path */
    static const ot_dtype types[] = {OT_U8, OT_S16, OT_F32, OT_F64};
    static const int64_t row_bytes[] = {64, 128, 256, 192, 60, 24, 8, 320};
    for (int cs = 0; cs < 48; cs++) {
        ot_dtype t = types[cs % 4];
        int64_t es = (int64_t)ot_dtype_size(t);
        int r = 3 + cs % 3;
        int64_t dims[OT_MAX_RANK], perm[OT_MAX_RANK];
        int64_t last = row_bytes[cs / 4 % 8] / es;
        if (last < 1) last = 1;
        int64_t numel = last;
        for (int d = 0; d < r - 1; d++) {
            dims[d] = cs % 5 == 0 && d == 0 ? 1 : rnd(2, r <= 3 ? 40 : 12);
            numel *= dims[d];
            perm[d] = d;
        }
        dims[r - 1] = last;
        while (numel * es < (64 << 10)) { /* at least 64 KiB each way */
            dims[r - 2] *= 2;
            numel *= 2;
        }
        do shuffle(perm, r - 1);
        while (r > 2 && perm[0] == 0 && perm[1] == 1 && perm[r - 2] == r - 2);
        perm[r - 1] = r - 1;
        ot_shape s;
        ASSERT_OK(ot_shape_make(&s, t, r, dims));
        check_transpose(&s, perm, r, "trs", "streamed ", cs);
    }
    ex_transpose_set_llc(0);
}

/* ---- reduce ------------------------------------------------------------------------------- */

static ot_module *reduce_module(ot_dtype t, const ot_shape *s, const int64_t *dims, int nd,
                                ot_opcode op, double init, bool abs_input) {
    ot_module *m = ot_module_new("red");
    ot_computation *f = ot_module_add_computation(m, "reducer");
    ot_instr *a = ot_build_parameter(f, 0, ot_shape_scalar(t), "a");
    ot_instr *b = ot_build_parameter(f, 1, ot_shape_scalar(t), "b");
    ot_computation_set_root(f, ot_build_binary(f, op, a, b));
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *x = ot_build_parameter(c, 0, *s, "x");
    if (abs_input) x = ot_build_unary(c, OT_OP_ABS, x);
    ot_instr *iv = ot_build_constant_scalar(c, t, init);
    ot_computation_set_root(c, ot_build_reduce(c, &x, &iv, 1, dims, nd, f));
    ot_module_set_entry(m, c);
    if (ot_module_finalize(m) != OT_OK) {
        fprintf(stderr, "reduce module: %s\n", ot_last_error());
        ot_module_free(m);
        return NULL;
    }
    return m;
}

static void reduce_case(ot_dtype t, int r, const int64_t *dims, const int64_t *rd, int nd,
                        ot_opcode op, bool specials, const char *what) {
    ot_shape s;
    ASSERT_OK(ot_shape_make(&s, t, r, dims));
    double init = op == OT_OP_MULTIPLY ? 1.0 : op == OT_OP_ADD ? 0.5 : -3.0;
    ot_module *m = reduce_module(t, &s, rd, nd, op, init, false);
    ASSERT_TRUE(m);
    ot_executable *e = compile0(m);
    ASSERT_TRUE(e);
    ot_tensor x, ref, fast;
    ASSERT_OK(ot_tensor_alloc(&x, &s));
    if (op == OT_OP_MULTIPLY)
        fill_random(&x, 0.999, 1.001);
    else
        fill_random(&x, -1, 1);
    int64_t n = ot_shape_numel_unchecked(&s), R = 1, nout;
    for (int k = 0; k < nd; k++) R *= dims[rd[k]];
    nout = R ? n / R : 0;
    if (specials && n > 8) { /* NaN, signed zeros and subnormals at fixed places */
        for (int k = 0; k < 8; k++) {
            int64_t at = (int64_t)(next_u64() % (uint64_t)n);
            double v = k == 0 ? NAN : k < 3 ? -0.0 : k < 5 ? 0.0 : (k % 2 ? 1 : -1) * 1e-310;
            if (t == OT_F32)
                ((float *)x.data)[at] = k >= 5 ? (float)((k % 2 ? 1 : -1) * 1e-40) : (float)v;
            else
                ((double *)x.data)[at] = v;
        }
    }
    EXPECT_OK(run_exe(e, &x, 1, &ref, NULL, true, NULL));
    if (!run_all_pools(e, &x, 1, &fast, 1)) {
        EXPECT_TRUE(false);
    } else {
        /* bitwise: many outputs or short rows (the reference order), max/min always, sums
         * whose last non-unit dim is reduced (the canonical lane order, blocked or not) and every
         * reduce that keeps its last non-unit dim (the reference order); within the bound: the
         * blocked products of few long rows */
        bool last_reduced = false;
        for (int d = r - 1; d >= 0; d--) {
            if (dims[d] == 1) continue;
            for (int k = 0; k < nd; k++)
                if (rd[k] == d) last_reduced = true;
            break;
        }
        bool exact = nout >= 256 || R <= 4096 || op == OT_OP_MAXIMUM || op == OT_OP_MINIMUM ||
                     op == OT_OP_ADD || !last_reduced;
        if (exact) {
            if (!bits_equal(&fast, &ref)) fprintf(stderr, "%s: not bitwise equal\n", what);
            EXPECT_TRUE(bits_equal(&fast, &ref));
        } else {
            ot_module *ma = reduce_module(t, &s, rd, nd, op, op == OT_OP_ADD ? fabs(init) : init,
                                          op == OT_OP_ADD);
            ot_executable *ea = compile0(ma);
            ot_tensor sabs;
            EXPECT_OK(run_exe(ea, &x, 1, &sabs, NULL, true, NULL));
            int64_t bad = -1;
            bool in = within_bound(&fast, &ref, &sabs, R + 1, &bad);
            if (!in) fprintf(stderr, "%s: element %lld outside the bound\n", what, (long long)bad);
            EXPECT_TRUE(in);
            ot_tensor_release(&sabs);
            ot_executable_free(ea);
            ot_module_free(ma);
        }
        ot_tensor_release(&fast);
    }
    ot_tensor_release(&ref);
    ot_tensor_release(&x);
    ot_executable_free(e);
    ot_module_free(m);
}

static void test_reduce_random(void) {
    g_rng = 0x4ed;
    static const ot_opcode ops[] = {OT_OP_ADD, OT_OP_MAXIMUM, OT_OP_MINIMUM, OT_OP_MULTIPLY};
    for (int cs = 0; cs < 120; cs++) {
        ot_dtype t = cs % 2 ? OT_F64 : OT_F32;
        ot_opcode op = ops[(cs / 2) % 4];
        int r = (int)rnd(1, 4);
        int64_t dims[OT_MAX_RANK], rd[OT_MAX_RANK];
        int nd = 0;
        for (int d = 0; d < r; d++) {
            dims[d] = rnd(1, r == 1 ? 3000 : r == 2 ? 300 : 24);
            if (rnd(0, 1)) rd[nd++] = d;
        }
        char what[64];
        snprintf(what, sizeof what, "reduce case %d (%s)", cs, ot_opcode_name(op));
        reduce_case(t, r, dims, rd, nd, op, cs % 3 == 0, what);
    }
}

/* Few outputs over long rows: the fixed-block path for rows (the last dim reduced), the
 * reference's order for columns (the last dim kept: bitwise for every op). */
static void test_reduce_long_rows(void) {
    g_rng = 0x1069;
    static const ot_opcode ops[] = {OT_OP_ADD, OT_OP_MAXIMUM, OT_OP_MINIMUM, OT_OP_MULTIPLY};
    for (int k = 0; k < 8; k++) {
        ot_dtype t = k % 2 ? OT_F64 : OT_F32;
        ot_opcode op = ops[k / 2];
        char what[64];
        snprintf(what, sizeof what, "long rows %d (%s)", k, ot_opcode_name(op));
        reduce_case(t, 1, (int64_t[]){100003}, (int64_t[]){0}, 1, op, k % 2 == 0, what);
        reduce_case(t, 2, (int64_t[]){3, 50001}, (int64_t[]){1}, 1, op, true, what);
        reduce_case(t, 3, (int64_t[]){2, 9000, 5}, (int64_t[]){1}, 1, op, false, what);
        reduce_case(t, 3, (int64_t[]){70, 3, 300}, (int64_t[]){0, 2}, 2, op, false, what);
        /* few long columns (the reference's order: bitwise): a batch norm's per-channel sum over
         * N, H, W; two columns; reduced dims apart */
        reduce_case(t, 4, (int64_t[]){8, 32, 32, 16}, (int64_t[]){0, 1, 2}, 3, op, true, what);
        reduce_case(t, 2, (int64_t[]){20001, 2}, (int64_t[]){0}, 1, op, k % 2 == 1, what);
        reduce_case(t, 4, (int64_t[]){5000, 3, 2, 7}, (int64_t[]){0, 2}, 2, op, true, what);
    }
}

/* Row sums taken four rows at a time (mode A, a lane-ordered add): row counts around multiples of
 * four (the leftover rows go one by one, and each thread's range starts anywhere), rows shorter
 * than a lane group, with a tail, on either side of the length where the four rows stop being
 * summed side by side (64 f32), of exactly one block and of several blocks with a tail; a
 * row sum over two trailing dims; NaNs, signed zeros and subnormals in some. Bitwise the reference
 * on every pool. */
static void test_reduce_row_groups(void) {
    g_rng = 0x4a0c;
    static const int64_t nrows[] = {1, 3, 4, 5, 7, 8, 9, 258, 261};
    static const int64_t lens[] = {1,  15,  16,  17,   40,   64,           65,
                                   80, 256, 301, 4096, 4097, 2 * 4096 + 35};
    for (int t = 0; t < 2; t++)
        for (size_t a = 0; a < sizeof nrows / sizeof nrows[0]; a++)
            for (size_t b = 0; b < sizeof lens / sizeof lens[0]; b++) {
                if (nrows[a] * lens[b] > 300000) continue;
                char what[80];
                snprintf(what, sizeof what, "row groups %s %lldx%lld", t ? "f64" : "f32",
                         (long long)nrows[a], (long long)lens[b]);
                reduce_case(t ? OT_F64 : OT_F32, 2, (int64_t[]){nrows[a], lens[b]}, (int64_t[]){1},
                            1, OT_OP_ADD, (a + b) % 3 == 0, what);
            }
    reduce_case(OT_F32, 3, (int64_t[]){13, 7, 48}, (int64_t[]){1, 2}, 2, OT_OP_ADD, true,
                "row groups over two dims");
    reduce_case(OT_F64, 4, (int64_t[]){6, 1, 5, 99}, (int64_t[]){3}, 1, OT_OP_ADD, false,
                "row groups with a unit dim");
}

/* One reduction's rows from the reference and from the fast kernels on every pool: bitwise
 * equal. what (NULL: none) names the case on stderr with the first differing row. */
static void expect_rows_bitwise(ot_executable *e, const ot_tensor *x, const char *what) {
    ot_tensor ref, fast;
    EXPECT_OK(run_exe(e, x, 1, &ref, NULL, true, NULL));
    if (!run_all_pools(e, x, 1, &fast, 1)) {
        EXPECT_TRUE(false);
        ot_tensor_release(&ref);
        return;
    }
    if (what && !bits_equal(&fast, &ref)) {
        fprintf(stderr, "%s differ\n", what);
        size_t es = ot_dtype_size(ref.shape.dtype);
        int64_t rows = ot_shape_numel_unchecked(&ref.shape);
        for (int64_t r = 0; r < rows; r++) {
            uint64_t fb = 0, rb = 0;
            memcpy(&fb, (char *)fast.data + r * (int64_t)es, es);
            memcpy(&rb, (char *)ref.data + r * (int64_t)es, es);
            if (fb != rb) {
                fprintf(stderr, "  row %lld: fast %llx ref %llx\n", (long long)r,
                        (unsigned long long)fb, (unsigned long long)rb);
                break;
            }
        }
    }
    EXPECT_TRUE(bits_equal(&fast, &ref));
    ot_tensor_release(&fast);
    ot_tensor_release(&ref);
}

/* maximum/minimum rows run in lanes and fall back to the reference's order when a row holds a
 * NaN: with several NaN payloads in a row (and a NaN init) the NaN returned is the reference's. */
static void test_reduce_minmax_nan_rows(void) {
    g_rng = 0x7a7;
    static const ot_opcode ops[] = {OT_OP_MAXIMUM, OT_OP_MINIMUM};
    for (int k = 0; k < 4; k++) {
        ot_dtype t = k % 2 ? OT_F64 : OT_F32;
        ot_shape s;
        ASSERT_OK(ot_shape_make(&s, t, 2, (int64_t[]){300, 77}));
        for (int ni = 0; ni < 2; ni++) {
            ot_module *m =
                reduce_module(t, &s, (int64_t[]){1}, 1, ops[k / 2], ni ? NAN : -3.0, false);
            ASSERT_TRUE(m);
            ot_executable *e = compile0(m);
            ASSERT_TRUE(e);
            ot_tensor x;
            ASSERT_OK(ot_tensor_alloc(&x, &s));
            fill_random(&x, -1, 1);
            for (int64_t row = 0; row < 300; row += 3) { /* two NaNs of other payloads */
                int64_t a = row * 77 + (int64_t)(next_u64() % 77), b = row * 77 + 76;
                if (t == OT_F32) {
                    uint32_t qa = 0x7fc00001u + (uint32_t)row, qb = 0xffc00002u;
                    memcpy((float *)x.data + a, &qa, 4);
                    memcpy((float *)x.data + b, &qb, 4);
                } else {
                    uint64_t qa = 0x7ff8000000000001ull + (uint64_t)row, qb = 0xfff8000000000002ull;
                    memcpy((double *)x.data + a, &qa, 8);
                    memcpy((double *)x.data + b, &qb, 8);
                }
            }
            expect_rows_bitwise(e, &x, NULL);
            ot_tensor_release(&x);
            ot_executable_free(e);
            ot_module_free(m);
        }
    }
}

/* maximum/minimum rows with infinities, signed zeros, subnormals and NaNs (quiet and signalling,
 * in the lanes' body and in the tail) at row lengths around the lane count, from inits -inf,
 * +inf, -3 and NaN: bitwise the reference on every pool. */
static void set_special(ot_tensor *x, int64_t at, int kind) {
    /* kind: 0 -inf, 1 +inf, 2 -0, 3 +0, 4 -subnormal, 5 +subnormal, 6 quiet NaN, 7 signalling NaN
     */
    if (x->shape.dtype == OT_F32) {
        static const uint32_t b[] = {0xff800000u, 0x7f800000u, 0x80000000u, 0x00000000u,
                                     0x80000003u, 0x00400000u, 0x7fc00005u, 0x7f800001u};
        memcpy((float *)x->data + at, &b[kind], 4);
    } else {
        static const uint64_t b[] = {0xfff0000000000000ull, 0x7ff0000000000000ull,
                                     0x8000000000000000ull, 0x0000000000000000ull,
                                     0x8000000000000003ull, 0x0008000000000000ull,
                                     0x7ff8000000000005ull, 0x7ff0000000000001ull};
        memcpy((double *)x->data + at, &b[kind], 8);
    }
}

static void test_reduce_minmax_special_rows(void) {
    g_rng = 0x5b3;
    static const ot_opcode ops[] = {OT_OP_MAXIMUM, OT_OP_MINIMUM};
    static const int64_t lens[] = {1, 13, 32, 64, 65, 100, 129, 300};
    static const double inits[] = {-INFINITY, INFINITY, -3.0, NAN};
    const int64_t rows = 260;
    for (int k = 0; k < 4; k++)
        for (int li = 0; li < (int)(sizeof lens / sizeof lens[0]); li++)
            for (int ii = 0; ii < 4; ii++) {
                ot_dtype t = k % 2 ? OT_F64 : OT_F32;
                int64_t n = lens[li];
                ot_shape s;
                ASSERT_OK(ot_shape_make(&s, t, 2, (int64_t[]){rows, n}));
                ot_module *m =
                    reduce_module(t, &s, (int64_t[]){1}, 1, ops[k / 2], inits[ii], false);
                ASSERT_TRUE(m);
                ot_executable *e = compile0(m);
                ASSERT_TRUE(e);
                ot_tensor x;
                ASSERT_OK(ot_tensor_alloc(&x, &s));
                fill_random(&x, -1, 1);
                for (int64_t row = 0; row < rows; row++) {
                    int64_t b = row * n, at = b + (int64_t)(next_u64() % (uint64_t)n);
                    switch (row % 11) {
                    case 0: /* all -inf */
                        for (int64_t c = 0; c < n; c++) set_special(&x, b + c, 0);
                        break;
                    case 1: /* all +inf but one -inf */
                        for (int64_t c = 0; c < n; c++) set_special(&x, b + c, 1);
                        set_special(&x, at, 0);
                        break;
                    case 2: set_special(&x, at, 1); break;
                    case 3: /* signed zeros only */
                        for (int64_t c = 0; c < n; c++) set_special(&x, b + c, 2 + (int)rnd(0, 1));
                        break;
                    case 4: /* subnormals and zeros (signed zeros under DAZ) */
                        for (int64_t c = 0; c < n; c++) set_special(&x, b + c, 2 + (int)rnd(0, 3));
                        break;
                    case 5: set_special(&x, at, 6); break;
                    case 6: set_special(&x, b + n - 1, 6); break; /* the tail's last */
                    case 7:
                        set_special(&x, at, 7);
                        set_special(&x, b, 6);
                        break;
                    case 8: /* a few -inf among negatives */
                        for (int64_t c = 0; c < n; c++)
                            if (rnd(0, 3) == 0) set_special(&x, b + c, 0);
                        break;
                    case 9: set_special(&x, at, 7); break;
                    default: break; /* random in [-1, 1) */
                    }
                }
                char what[96];
                snprintf(what, sizeof what, "special rows: %s %s n=%lld init %g", ot_dtype_name(t),
                         ot_opcode_name(ops[k / 2]), (long long)n, inits[ii]);
                expect_rows_bitwise(e, &x, what);
                ot_tensor_release(&x);
                ot_executable_free(e);
                ot_module_free(m);
            }
}

/* Few long maximum/minimum rows (mode B's blocks, folded in lanes): the extreme at a block's first
 * element, at its last, a subnormal extreme among negatives (a signed zero under DAZ), -0 beside
 * +0, infinities, and a NaN in one block: bitwise the reference on every pool. */
static void test_reduce_minmax_long_blocks(void) {
    g_rng = 0x3b1c;
    static const ot_opcode ops[] = {OT_OP_MAXIMUM, OT_OP_MINIMUM};
    const int64_t n = 3 * 4096 + 5;
    for (int k = 0; k < 4; k++)
        for (int v = 0; v < 6; v++) {
            ot_dtype t = k % 2 ? OT_F64 : OT_F32;
            bool mx = k < 2;
            ot_shape s;
            ASSERT_OK(ot_shape_make(&s, t, 2, (int64_t[]){2, n}));
            ot_module *m = reduce_module(t, &s, (int64_t[]){1}, 1, ops[k / 2],
                                         mx ? -INFINITY : INFINITY, false);
            ASSERT_TRUE(m);
            ot_executable *e = compile0(m);
            ASSERT_TRUE(e);
            ot_tensor x;
            ASSERT_OK(ot_tensor_alloc(&x, &s));
            if (mx)
                fill_random(&x, -2, -1);
            else
                fill_random(&x, 1, 2);
            for (int64_t row = 0; row < 2; row++) {
                int64_t b = row * n, at = b + 4096 * (1 + row) + (v == 1 ? 4095 : 0);
                switch (v) {
                case 0:
                case 1: set_special(&x, at, mx ? 1 : 0); break; /* +inf (max) / -inf (min) */
                case 2: set_special(&x, at, mx ? 5 : 4); break; /* the subnormal extreme */
                case 3:                                         /* signed zeros, -0 first */
                    set_special(&x, at, 2);
                    set_special(&x, at + 7, 3);
                    break;
                case 4: set_special(&x, at + 3, 6); break; /* a NaN */
                default:                                   /* the row's extreme in its tail */
                    set_special(&x, b + n - 1, mx ? 1 : 0);
                    break;
                }
            }
            char what[96];
            snprintf(what, sizeof what, "long blocks: %s %s case %d", ot_dtype_name(t),
                     ot_opcode_name(ops[k / 2]), v);
            expect_rows_bitwise(e, &x, what);
            ot_tensor_release(&x);
            ot_executable_free(e);
            ot_module_free(m);
        }
}

/* Any set of reduced dims whose last non-unit dim is kept (the input read in address order, each
 * output folded in the reference's row-major order): ranks 2-5 with unit and empty dims, every
 * reducer, infinities, signed zeros, subnormals and NaNs (quiet and signalling) scattered, inits
 * -inf, NaN and finite; some inputs large enough to be split over the pool. Bitwise the reference
 * on 1, 2, 3 and 8 threads. */
static void test_reduce_axis_sets(void) {
    g_rng = 0xa5e7;
    static const ot_opcode ops[] = {OT_OP_ADD, OT_OP_MAXIMUM, OT_OP_MINIMUM, OT_OP_MULTIPLY};
    for (int cs = 0; cs < 160; cs++) {
        ot_dtype t = cs % 2 ? OT_F64 : OT_F32;
        ot_opcode op = ops[(cs / 2) % 4];
        int r = (int)rnd(2, 5);
        bool big = cs % 8 == 7;
        int64_t dims[OT_MAX_RANK], rd[OT_MAX_RANK];
        int nd = 0;
        for (int d = 0; d < r; d++) {
            int64_t k = rnd(0, 9);
            dims[d] = k == 0 ? 1 : k == 1 && cs % 16 == 1 ? 0 : rnd(2, big ? 40 : 13);
            if (d < r - 1 && rnd(0, 1)) rd[nd++] = d;
        }
        if (dims[r - 1] == 1 || dims[r - 1] == 0) dims[r - 1] = rnd(2, 70); /* kept, non-unit */
        if (nd == 0) rd[nd++] = 0;
        ot_shape s;
        ASSERT_OK(ot_shape_make(&s, t, r, dims));
        int64_t n = ot_shape_numel_unchecked(&s);
        double init = cs % 5 == 0            ? NAN
                      : cs % 5 == 1          ? -INFINITY
                      : op == OT_OP_MULTIPLY ? 1.0
                                             : 0.5;
        ot_module *m = reduce_module(t, &s, rd, nd, op, init, false);
        ASSERT_TRUE(m);
        ot_executable *e = compile0(m);
        ASSERT_TRUE(e);
        ot_tensor x;
        ASSERT_OK(ot_tensor_alloc(&x, &s));
        if (op == OT_OP_MULTIPLY)
            fill_random(&x, 0.9, 1.1);
        else
            fill_random(&x, -1, 1);
        for (int64_t k = 0; n > 0 && k < 1 + n / 50; k++) {
            int kind = (int)rnd(0, 7);
            if (kind >= 6 && cs % 3 != 0) continue; /* NaNs in a third of the cases */
            set_special(&x, (int64_t)(next_u64() % (uint64_t)n), kind);
        }
        char what[160];
        int len = snprintf(what, sizeof what, "axis set %d %s %s [", cs, ot_dtype_name(t),
                           ot_opcode_name(op));
        for (int d = 0; d < r && len < 120; d++)
            len += snprintf(what + len, sizeof what - (size_t)len, "%s%lld", d ? "," : "",
                            (long long)dims[d]);
        len += snprintf(what + len, sizeof what - (size_t)len, "] dims");
        for (int k = 0; k < nd && len < 150; k++)
            len += snprintf(what + len, sizeof what - (size_t)len, " %lld", (long long)rd[k]);
        if (op == OT_OP_MAXIMUM || op == OT_OP_MINIMUM) {
            expect_rows_bitwise(e, &x, what);
        } else {
            /* which of two NaNs an add or a multiply returns is the CPU's (and the compiler's
             * operand order): bitwise apart from NaN payloads, NaN exactly where the reference
             * has one; the pools still agree bit for bit (run_all_pools) */
            ot_tensor ref, fast;
            EXPECT_OK(run_exe(e, &x, 1, &ref, NULL, true, NULL));
            if (run_all_pools(e, &x, 1, &fast, 1)) {
                size_t es = ot_dtype_size(t);
                int64_t no = ot_shape_numel_unchecked(&ref.shape), bad = -1;
                for (int64_t o = 0; o < no && bad < 0; o++) {
                    double fv = t == OT_F32 ? ((float *)fast.data)[o] : ((double *)fast.data)[o];
                    double rv = t == OT_F32 ? ((float *)ref.data)[o] : ((double *)ref.data)[o];
                    if (memcmp((char *)fast.data + o * (int64_t)es,
                               (char *)ref.data + o * (int64_t)es, es) &&
                        !(isnan(fv) && isnan(rv)))
                        bad = o;
                }
                if (bad >= 0) fprintf(stderr, "%s: output %lld differs\n", what, (long long)bad);
                EXPECT_TRUE(bad < 0);
                ot_tensor_release(&fast);
            } else {
                EXPECT_TRUE(false);
            }
            ot_tensor_release(&ref);
        }
        ot_tensor_release(&x);
        ot_executable_free(e);
        ot_module_free(m);
    }
}

/* ---- gather ------------------------------------------------------------------------------- */

/* Gathers run in the fast kernel, whether their offset dims trail the output or not. Indices
 * include negative, past-the-end and INT32/INT64 extremes (clamped). */
static const struct {
    const char *hlo;
    int want_fast;
} k_gathers[] = {
    /* take_along_axis as JAX lowers it (operand batching dims), f32, s32 indices */
    {"HloModule g0\nENTRY e {\n  x = f32[300,77] parameter(0)\n  i = s32[300,1,1] parameter(1)\n"
     "  ROOT g = f32[300,1] gather(x, i), offset_dims={}, collapsed_slice_dims={1}, "
     "start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, "
     "index_vector_dim=2, slice_sizes={1,1}\n}\n",
     1},
    /* an embedding lookup: rows of 33 f64, s64 indices, implicit index vector dim */
    {"HloModule g1\nENTRY e {\n  x = f64[50,33] parameter(0)\n  i = s64[7,9] parameter(1)\n"
     "  ROOT g = f64[7,9,33] gather(x, i), offset_dims={2}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=2, slice_sizes={1,33}\n}\n",
     1},
    /* a window of two dims from two start indices, u8 elements */
    {"HloModule g2\nENTRY e {\n  x = u8[11,6,13] parameter(0)\n  i = s32[9,2] parameter(1)\n"
     "  ROOT g = u8[9,6,4] gather(x, i), offset_dims={1,2}, collapsed_slice_dims={0}, "
     "start_index_map={0,2}, index_vector_dim=1, slice_sizes={1,6,4}\n}\n",
     1},
    /* index vector dim first, bf16 elements, nothing collapsed */
    {"HloModule g3\nENTRY e {\n  x = bf16[20,30] parameter(0)\n  i = s32[2,5,3] parameter(1)\n"
     "  ROOT g = bf16[5,3,2,3] gather(x, i), offset_dims={2,3}, collapsed_slice_dims={}, "
     "start_index_map={1,0}, index_vector_dim=0, slice_sizes={2,3}\n}\n",
     1},
    /* an embedding lookup large enough to split over the threads: rows of 64 f32 */
    {"HloModule g5\nENTRY e {\n  x = f32[1000,64] parameter(0)\n  i = s32[64,32,1] parameter(1)\n"
     "  ROOT g = f32[64,32,64] gather(x, i), offset_dims={2}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=2, slice_sizes={1,64}\n}\n",
     1},
    /* contiguous rows copied in pieces while a later row is prefetched: rows of 700 f32 (three
     * pieces, the last partial) */
    {"HloModule g6\nENTRY e {\n  x = f32[90,700] parameter(0)\n  i = s32[40,3] parameter(1)\n"
     "  ROOT g = f32[40,3,700] gather(x, i), offset_dims={2}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=2, slice_sizes={1,700}\n}\n",
     1},
    /* rows of 3 bytes (the prefetch runs the most rows ahead), more rows than that distance */
    {"HloModule g7\nENTRY e {\n  x = u8[500,3] parameter(0)\n  i = s32[200] parameter(1)\n"
     "  ROOT g = u8[200,3] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}\n}\n",
     1},
    /* fewer rows than the prefetch distance, each of many pieces, s64 indices */
    {"HloModule g8\nENTRY e {\n  x = f32[10,5000] parameter(0)\n  i = s64[2,1] parameter(1)\n"
     "  ROOT g = f32[2,5000] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1,5000}\n}\n",
     1},
    /* searchsorted's step (jnp.histogram): single elements of a small table at u32 indices */
    {"HloModule g9\nENTRY e {\n  x = f32[101] parameter(0)\n  i = u32[5000,1] parameter(1)\n"
     "  ROOT g = f32[5000,1] gather(x, i), offset_dims={1}, collapsed_slice_dims={}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1}\n}\n",
     1},
    /* one batch dim and one start index (a table lookup: each start read, clamped and its
     * slice copied in one pass; slices under 64 bytes), large enough to split over the threads:
     * single f32 elements at u32 indices, rows of 15 f32 at s32 indices, single f64 elements at s64
     * indices, rows of 2 u16 (a slice that is all of the operand's trailing dims, not collapsed) */
    {"HloModule g17\nENTRY e {\n  x = f32[129] parameter(0)\n  i = u32[100000,1] parameter(1)\n"
     "  ROOT g = f32[100000,1] gather(x, i), offset_dims={1}, collapsed_slice_dims={}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1}\n}\n",
     1},
    {"HloModule g18\nENTRY e {\n  x = f32[3000,15] parameter(0)\n  i = s32[40000] parameter(1)\n"
     "  ROOT g = f32[40000,15] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1,15}\n}\n",
     1},
    {"HloModule g19\nENTRY e {\n  x = f64[77] parameter(0)\n  i = s64[60000] parameter(1)\n"
     "  ROOT g = f64[60000] gather(x, i), offset_dims={}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1}\n}\n",
     1},
    {"HloModule g20\nENTRY e {\n  x = u16[500,2] parameter(0)\n  i = s32[90000,1] parameter(1)\n"
     "  ROOT g = u16[90000,1,2] gather(x, i), offset_dims={1,2}, collapsed_slice_dims={}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}\n}\n",
     1},
    /* u8, s16 and u64 indices (a u64 above INT64_MAX clamps to the top), rows of 5 s32 */
    {"HloModule g10\nENTRY e {\n  x = s32[300,5] parameter(0)\n  i = u8[70] parameter(1)\n"
     "  ROOT g = s32[70,5] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}\n}\n",
     1},
    {"HloModule g11\nENTRY e {\n  x = f64[40,3] parameter(0)\n  i = s16[90,1] parameter(1)\n"
     "  ROOT g = f64[90,3] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}\n}\n",
     1},
    {"HloModule g12\nENTRY e {\n  x = u16[33,2] parameter(0)\n  i = u64[200] parameter(1)\n"
     "  ROOT g = u16[200,2] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}\n}\n",
     1},
    /* offset dims before the batch dim, none after it: one element per outer element */
    {"HloModule g4\nENTRY e {\n  x = f32[40,12] parameter(0)\n  i = s32[6] parameter(1)\n"
     "  ROOT g = f32[12,6] gather(x, i), offset_dims={0}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1,12}\n}\n",
     1},
    /* jax.image.resize's nearest gathers (NHWC): rows, then columns, of each image; offset
     * dims before and after the batch dim, contiguous inner blocks */
    {"HloModule g13\nENTRY e {\n  x = f32[8,64,6,5] parameter(0)\n  i = s32[12,1] parameter(1)\n"
     "  ROOT g = f32[8,12,6,5] gather(x, i), offset_dims={0,2,3}, collapsed_slice_dims={1}, "
     "start_index_map={1}, index_vector_dim=1, slice_sizes={8,1,6,5}\n}\n",
     1},
    {"HloModule g14\nENTRY e {\n  x = bf16[3,12,6,5] parameter(0)\n  i = s64[12,1] parameter(1)\n"
     "  ROOT g = bf16[3,12,12,5] gather(x, i), offset_dims={0,1,3}, collapsed_slice_dims={2}, "
     "start_index_map={2}, index_vector_dim=1, slice_sizes={3,12,1,5}\n}\n",
     1},
    /* a window (clamped start) whose inner block is not one run, two batch dims between offset
     * dims, u8 elements */
    {"HloModule g15\nENTRY e {\n  x = u8[4,10,7] parameter(0)\n  i = s32[5,3,2] parameter(1)\n"
     "  ROOT g = u8[4,5,3,2,3] gather(x, i), offset_dims={0,3,4}, collapsed_slice_dims={}, "
     "start_index_map={1,2}, index_vector_dim=2, slice_sizes={4,2,3}\n}\n",
     1},
    /* f64, the batch dim last after two offset dims (one element per outer element) */
    {"HloModule g16\nENTRY e {\n  x = f64[9,4,6] parameter(0)\n  i = s32[7] parameter(1)\n"
     "  ROOT g = f64[4,6,7] gather(x, i), offset_dims={0,1}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1,4,6}\n}\n",
     1},
    /* jnp.linalg.solve / inv's pivot gather (x[b, i, perm[b, k]]): operand batching dims, a
     * one-element block, the last outer dim a batch dim (runs of AVX-512 gathers), large enough
     * to split over the threads with runs cut at the splits; f32 and f64 */
    {"HloModule g21\nENTRY e {\n  x = f32[24,40,37,1] parameter(0)\n  i = s32[24,37,1] "
     "parameter(1)\n"
     "  ROOT g = f32[24,40,37,1] gather(x, i), offset_dims={1,3}, collapsed_slice_dims={2}, "
     "start_index_map={2}, operand_batching_dims={0}, start_indices_batching_dims={0}, "
     "index_vector_dim=2, slice_sizes={1,40,1,1}\n}\n",
     1},
    {"HloModule g22\nENTRY e {\n  x = f64[20,33,41,1] parameter(0)\n  i = s64[20,41,1] "
     "parameter(1)\n"
     "  ROOT g = f64[20,33,41,1] gather(x, i), offset_dims={1,3}, collapsed_slice_dims={2}, "
     "start_index_map={2}, operand_batching_dims={0}, start_indices_batching_dims={0}, "
     "index_vector_dim=2, slice_sizes={1,33,1,1}\n}\n",
     1},
    /* jnp.diagonal of a batch (slogdet's): two start indices, the batch dim last; u16 and u8
     * elements take the scalar loop */
    {"HloModule g23\nENTRY e {\n  x = f64[16,30,30] parameter(0)\n  i = s32[30,2] parameter(1)\n"
     "  ROOT g = f64[16,30] gather(x, i), offset_dims={0}, collapsed_slice_dims={1,2}, "
     "start_index_map={1,2}, index_vector_dim=1, slice_sizes={16,1,1}\n}\n",
     1},
    {"HloModule g24\nENTRY e {\n  x = u16[5,30,30] parameter(0)\n  i = s32[29,2] parameter(1)\n"
     "  ROOT g = u16[5,29] gather(x, i), offset_dims={0}, collapsed_slice_dims={1,2}, "
     "start_index_map={1,2}, index_vector_dim=1, slice_sizes={5,1,1}\n}\n",
     1},
    /* one-element slices in rows (gather_rows): take_along_axis on a larger batch, f32 */
    {"HloModule g25\nENTRY e {\n  x = f32[3000,57] parameter(0)\n  i = s32[3000,13,1] "
     "parameter(1)\n"
     "  ROOT g = f32[3000,13] gather(x, i), offset_dims={}, collapsed_slice_dims={1}, "
     "start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, "
     "index_vector_dim=2, slice_sizes={1,1}\n}\n",
     1},
};

static void fill_indices(ot_tensor *t, int64_t hi) {
    int64_t n = ot_shape_numel_unchecked(&t->shape);
    for (int64_t e = 0; e < n; e++) {
        int64_t v;
        switch (next_u64() % 8) {
        case 0: v = -(int64_t)rnd(1, 5); break;
        case 1: v = hi + rnd(0, 5); break;
        case 2: v = t->shape.dtype == OT_S32 ? INT32_MIN : INT64_MIN; break;
        case 3: v = t->shape.dtype == OT_S32 ? INT32_MAX : INT64_MAX; break;
        default: v = rnd(0, hi); break;
        }
        switch (ot_dtype_size(t->shape.dtype)) { /* narrower types: the value wrapped */
        case 1: ((uint8_t *)t->data)[e] = (uint8_t)v; break;
        case 2: ((uint16_t *)t->data)[e] = (uint16_t)v; break;
        case 4: ((uint32_t *)t->data)[e] = (uint32_t)v; break;
        default: ((uint64_t *)t->data)[e] = (uint64_t)v; break;
        }
    }
}

static void test_gather(void) {
    g_rng = 0x9a7;
    for (int k = 0; k < (int)(sizeof k_gathers / sizeof k_gathers[0]); k++) {
        ot_module *m = NULL;
        ASSERT_OK(ot_hlo_parse(k_gathers[k].hlo, strlen(k_gathers[k].hlo), NULL, &m));
        ot_executable *e = compile0(m);
        ASSERT_TRUE(e);
        const ot_computation *c = ot_module_entry(m);
        ot_tensor args[2], ref, fast;
        for (int a = 0; a < 2; a++)
            ASSERT_OK(ot_tensor_alloc(&args[a], &c->params[a]->shape.array));
        fill_random(&args[0], -1, 1); /* floats; other dtypes get random bits */
        int64_t hi = 0;
        for (int d = 0; d < args[0].shape.rank; d++)
            if (args[0].shape.dims[d] > hi) hi = args[0].shape.dims[d];
        fill_indices(&args[1], hi);
        EXPECT_OK(run_exe(e, args, 2, &ref, NULL, true, NULL));
        if (!run_all_pools(e, args, 2, &fast, k_gathers[k].want_fast)) {
            fprintf(stderr, "gather %d\n", k);
            EXPECT_TRUE(false);
        } else {
            if (!bits_equal(&fast, &ref)) fprintf(stderr, "gather %d: not bitwise equal\n", k);
            EXPECT_TRUE(bits_equal(&fast, &ref));
            ot_tensor_release(&fast);
        }
        ot_tensor_release(&ref);
        for (int a = 0; a < 2; a++) ot_tensor_release(&args[a]);
        ot_executable_free(e);
        ot_module_free(m);
    }
}

/* Reduces of a middle run of dims ([O, R, I] with I > 1, each output folding its column in order)
 * and of several dims, unit dims between them, with infinities, signed zeros, subnormals and
 * NaNs: bitwise the reference on every pool. A sum or product gets at most one NaN payload and no
 * -inf (which NaN an add of two NaNs returns depends on the compiler's operand order). */
static void columns_case(ot_dtype t, int r, const int64_t *dims, const int64_t *rd, int nd,
                         ot_opcode op, int nspecial) {
    ot_shape s;
    ASSERT_OK(ot_shape_make(&s, t, r, dims));
    double init = op == OT_OP_MULTIPLY ? 1.0 : op == OT_OP_ADD ? 0.5 : -3.0;
    ot_module *m = reduce_module(t, &s, rd, nd, op, init, false);
    ASSERT_TRUE(m);
    ot_executable *e = compile0(m);
    ASSERT_TRUE(e);
    ot_tensor x;
    ASSERT_OK(ot_tensor_alloc(&x, &s));
    if (op == OT_OP_MULTIPLY)
        fill_random(&x, 0.999, 1.001);
    else
        fill_random(&x, -1, 1);
    int64_t n = ot_shape_numel_unchecked(&s);
    static const int sum_kinds[] = {1, 2, 3, 4, 5, 6};
    for (int k = 0; k < nspecial && n > 0; k++) {
        int64_t at = (int64_t)(next_u64() % (uint64_t)n);
        bool mm = op == OT_OP_MAXIMUM || op == OT_OP_MINIMUM;
        int kind = mm ? (int)(next_u64() % 8) : sum_kinds[next_u64() % 6];
        if (op == OT_OP_MULTIPLY && kind == 1) kind = 2; /* no inf * 0 */
        set_special(&x, at, kind);
    }
    char what[96];
    snprintf(what, sizeof what, "columns %s %s rank %d", ot_dtype_name(t), ot_opcode_name(op), r);
    expect_rows_bitwise(e, &x, what);
    ot_tensor_release(&x);
    ot_executable_free(e);
    ot_module_free(m);
}

static void test_reduce_columns(void) {
    g_rng = 0xc01;
    static const ot_opcode ops[] = {OT_OP_ADD, OT_OP_MAXIMUM, OT_OP_MINIMUM, OT_OP_MULTIPLY};
    static const int64_t is[] = {1, 3, 17, 1000}, rs[] = {1, 5, 9, 34};
    for (int k = 0; k < 8; k++) {
        ot_dtype t = k % 2 ? OT_F64 : OT_F32;
        ot_opcode op = ops[k / 2];
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) { /* [O, R, I], O making at least 256 outputs */
                int64_t I = is[a], R = rs[b], O = (256 + I - 1) / I + (int64_t)b;
                columns_case(t, 3, (int64_t[]){O, R, I}, (int64_t[]){1}, 1, op, 6);
            }
        /* few outputs of short columns; several reduced dims; unit dims around and between */
        columns_case(t, 3, (int64_t[]){2, 7, 3}, (int64_t[]){1}, 1, op, 2);
        columns_case(t, 4, (int64_t[]){6, 5, 4, 70}, (int64_t[]){1, 2}, 2, op, 12);
        columns_case(t, 5, (int64_t[]){5, 1, 9, 1, 33}, (int64_t[]){2}, 1, op, 8);
        columns_case(t, 5, (int64_t[]){5, 1, 9, 1, 33}, (int64_t[]){1, 2, 3}, 3, op, 8);
        columns_case(t, 4, (int64_t[]){1, 40, 1, 17}, (int64_t[]){1}, 1, op, 8);
        columns_case(t, 4, (int64_t[]){3, 1, 1, 1000}, (int64_t[]){1, 2}, 2, op, 8);
        columns_case(t, 4, (int64_t[]){300, 1, 9, 1}, (int64_t[]){2}, 1, op, 8);
        columns_case(t, 4, (int64_t[]){6, 5, 4, 30}, (int64_t[]){0, 2}, 2, op, 12);
        columns_case(t, 3, (int64_t[]){4, 37, 21}, (int64_t[]){0, 1, 2}, 3, op, 8);
        /* rows of 256 (one whole row per pass), and wider than one chunk of outputs with a tail */
        columns_case(t, 3, (int64_t[]){3, 41, 256}, (int64_t[]){1}, 1, op, 8);
        columns_case(t, 2, (int64_t[]){23, 1500}, (int64_t[]){0}, 1, op, 8);
    }
}

/* Column maxima/minima (the walk, its outputs folded on integer keys a row chunk of up to 4096 at
 * a time, a chunk holding a NaN folded again in order): without a NaN, with infinities, signed
 * zeros and subnormals (the keys' order and the flush); with NaNs of several payloads and signs in
 * some columns, two per column, in one chunk or both chunks of a row wider than one (5000); from
 * a NaN init; on narrow runs (the prefetched rows), wide ones (1320 and 2500, wider than the
 * 1024-element blocks the keys once took) and whole rows: bitwise the reference on every pool. */
static void test_reduce_minmax_columns(void) {
    g_rng = 0xc0a;
    static const ot_opcode ops[] = {OT_OP_MAXIMUM, OT_OP_MINIMUM};
    static const struct {
        int r;
        int64_t dims[4], rd[2];
        int nd;
    } cs[] = {{2, {300, 1000}, {0}, 1},        {2, {40, 2500}, {0}, 1},  {3, {7, 30, 64}, {1}, 1},
              {4, {20, 3, 50, 17}, {0, 2}, 2}, {2, {1000, 20}, {0}, 1},  {3, {9, 200, 300}, {0}, 1},
              {4, {5, 12, 33, 40}, {1}, 1},    {3, {3, 7, 5000}, {1}, 1}};
    for (int k = 0; k < 4; k++) {
        ot_dtype t = k % 2 ? OT_F64 : OT_F32;
        for (int c = 0; c < (int)(sizeof cs / sizeof cs[0]); c++)
            for (int v = 0; v < 3; v++) {
                ot_shape s;
                ASSERT_OK(ot_shape_make(&s, t, cs[c].r, cs[c].dims));
                ot_module *m = reduce_module(t, &s, cs[c].rd, cs[c].nd, ops[k / 2],
                                             v == 2 ? NAN : -INFINITY, false);
                ASSERT_TRUE(m);
                ot_executable *e = compile0(m);
                ASSERT_TRUE(e);
                ot_tensor x;
                ASSERT_OK(ot_tensor_alloc(&x, &s));
                fill_random(&x, -1, 1);
                int64_t n = ot_shape_numel_unchecked(&s);
                for (int q = 0; q < 40; q++) /* infinities, signed zeros, subnormals */
                    set_special(&x, (int64_t)(next_u64() % (uint64_t)n), (int)(next_u64() % 6));
                int64_t last = cs[c].dims[cs[c].r - 1];
                for (int q = 0; v >= 1 && q < 6; q++) { /* two NaNs in each of some columns */
                    int64_t col = (int64_t)(next_u64() % (uint64_t)last);
                    for (int h = 0; h < 2; h++) {
                        int64_t at = (int64_t)(next_u64() % (uint64_t)(n / last)) * last + col;
                        if (t == OT_F32) {
                            uint32_t b = (h ? 0xffc00002u : 0x7f800001u) + (uint32_t)q;
                            memcpy((float *)x.data + at, &b, 4);
                        } else {
                            uint64_t b =
                                (h ? 0xfff8000000000002ull : 0x7ff0000000000001ull) + (uint64_t)q;
                            memcpy((double *)x.data + at, &b, 8);
                        }
                    }
                }
                char what[96];
                snprintf(what, sizeof what, "minmax columns %s %s case %d variant %d",
                         ot_dtype_name(t), ot_opcode_name(ops[k / 2]), c, v);
                expect_rows_bitwise(e, &x, what);
                ot_tensor_release(&x);
                ot_executable_free(e);
                ot_module_free(m);
            }
    }
}

/* Sums whose partial sums pass through the subnormal band (3m - 2.5m = 0.5m with m the smallest
 * normal, flushed to zero under FTZ, and so on), with subnormal inputs among them: lane-ordered
 * rows (many outputs), one long lane-ordered row (blocks), and columns ([O, R, I] over R, each
 * output folding in order) match the reference bit for bit on every pool. */
static void test_reduce_subnormal_sums(void) {
    static const double pat[] = {3, -2.5, 1.25, -1, 2, -1.5, 0.3, 7};
    for (int k = 0; k < 6; k++) {
        ot_dtype t = k % 2 ? OT_F64 : OT_F32;
        int kind = k / 2; /* 0 rows, 1 one long row, 2 columns */
        static const int64_t shapes[3][3] = {
            {300, 16 * 9 + 5, 1}, {1, 3 * 4096 + 37, 1}, {3, 37, 101}};
        const int64_t *dims = shapes[kind];
        ot_shape s;
        ASSERT_OK(ot_shape_make(&s, t, 3, dims));
        ot_module *m = kind == 1 ? reduce_module(t, &s, (int64_t[]){0, 1}, 2, OT_OP_ADD, 0.0, false)
                                 : reduce_module(t, &s, (int64_t[]){1}, 1, OT_OP_ADD, 0.0, false);
        ASSERT_TRUE(m);
        ot_executable *e = compile0(m);
        ASSERT_TRUE(e);
        ot_tensor x;
        ASSERT_OK(ot_tensor_alloc(&x, &s));
        int64_t n = dims[0] * dims[1] * dims[2];
        for (int64_t i = 0; i < n; i++) {
            /* the step along the reduced elements (a lane group for rows, a row for columns) and
             * the position across them; 0.3m is a subnormal input */
            int64_t step = kind == 2 ? i / dims[2] % dims[1] : i % dims[1] / 16;
            int64_t across =
                kind == 2 ? i % dims[2] + i / (dims[1] * dims[2]) : i % 16 + i / dims[1];
            double v = pat[(step + across) % 8];
            if (t == OT_F32)
                ((float *)x.data)[i] = (float)(v * FLT_MIN);
            else
                ((double *)x.data)[i] = v * DBL_MIN;
        }
        static const char *names[] = {"subnormal sums of rows", "subnormal sum of one long row",
                                      "subnormal sums of columns"};
        expect_rows_bitwise(e, &x, names[kind]);
        ot_tensor_release(&x);
        ot_executable_free(e);
        ot_module_free(m);
    }
}

/* ---- scatter ------------------------------------------------------------------------------ */

/* Scatters with an add or overwrite computation and trailing update window dims run in the fast
 * kernel; the rest stay with the reference (want 0). Indices are drawn from a small range (many
 * duplicates) plus negative, past-the-end and INT32/INT64-extreme values (windows skipped);
 * float updates and operands hold NaNs with payloads, infinities, signed zeros and subnormals. */
#define SC_ADD_F32                                                                                 \
    "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
static const struct {
    const char *hlo;
    int want_fast;
    bool donate; /* parameter 0 donated to the output: the scatter runs in place */
} k_scatters[] = {
    /* an embedding gradient as JAX lowers it: rows of 40 f32, s32 indices [30,20,1] */
    {"HloModule s0\n" SC_ADD_F32 "ENTRY e {\n  x = f32[100,40] parameter(0)\n"
     "  i = s32[30,20,1] parameter(1)\n  u = f32[30,20,40] parameter(2)\n"
     "  ROOT s = f32[100,40] scatter(x, i, u), update_window_dims={2}, "
     "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=2, "
     "to_apply=add\n}\n",
     1, false},
    /* the same in place (donated operand) */
    {"HloModule s1, input_output_alias={ {}: (0, {}, may-alias) }\n" SC_ADD_F32
     "ENTRY e {\n  x = f32[100,40] parameter(0)\n"
     "  i = s32[30,20,1] parameter(1)\n  u = f32[30,20,40] parameter(2)\n"
     "  ROOT s = f32[100,40] scatter(x, i, u), update_window_dims={2}, "
     "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=2, "
     "to_apply=add\n}\n",
     1, true},
    /* f64, s64 indices, implicit index vector dim, windows of [3,70] (whole trailing dims) */
    {"HloModule s2\nadd {\n  a = f64[] parameter(0)\n  b = f64[] parameter(1)\n"
     "  ROOT s = f64[] add(a, b)\n}\nENTRY e {\n  x = f64[64,3,70] parameter(0)\n"
     "  i = s64[60] parameter(1)\n  u = f64[60,3,70] parameter(2)\n"
     "  ROOT s = f64[64,3,70] scatter(x, i, u), update_window_dims={1,2}, "
     "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
     "to_apply=add\n}\n",
     1, false},
    /* s32 add (wrapping) of partial [5,7] windows at two start indices, index vector dim first,
     * the computation's operands swapped */
    {"HloModule s3\nadd {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
     "  ROOT s = s32[] add(b, a)\n}\nENTRY e {\n  x = s32[40,30] parameter(0)\n"
     "  i = s32[2,25] parameter(1)\n  u = s32[25,5,7] parameter(2)\n"
     "  ROOT s = s32[40,30] scatter(x, i, u), update_window_dims={1,2}, "
     "inserted_window_dims={}, scatter_dims_to_operand_dims={1,0}, index_vector_dim=0, "
     "to_apply=add\n}\n",
     1, false},
    /* overwrite (.at[].set): the last update of an element wins, f32 bits copied */
    {"HloModule s4\nset {\n  a = f32[] parameter(0)\n  ROOT b = f32[] parameter(1)\n}\n"
     "ENTRY e {\n  x = f32[50,16] parameter(0)\n  i = s32[200,1] parameter(1)\n"
     "  u = f32[200,16] parameter(2)\n"
     "  ROOT s = f32[50,16] scatter(x, i, u), update_window_dims={1}, "
     "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
     "to_apply=set\n}\n",
     1, false},
    /* f32 add with the computation's operands swapped, scalar updates (windows of one element) */
    {"HloModule s5\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
     "  ROOT s = f32[] add(b, a)\n}\nENTRY e {\n  x = f32[20,9] parameter(0)\n"
     "  i = s64[3000,2] parameter(1)\n  u = f32[3000] parameter(2)\n"
     "  ROOT s = f32[20,9] scatter(x, i, u), update_window_dims={}, "
     "inserted_window_dims={0,1}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, "
     "to_apply=add\n}\n",
     1, false},
    /* segment_sum: short rows (3 units of 64 bytes of columns) over many positions */
    {"HloModule s8\n" SC_ADD_F32 "ENTRY e {\n  x = f32[500,48] parameter(0)\n"
     "  i = s32[6000,1] parameter(1)\n  u = f32[6000,48] parameter(2)\n"
     "  ROOT s = f32[500,48] scatter(x, i, u), update_window_dims={1}, "
     "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
     "to_apply=add\n}\n",
     1, false},
    /* s32 partial [5,7] windows (five runs each) over many positions */
    {"HloModule s9\nadd {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
     "  ROOT s = s32[] add(a, b)\n}\nENTRY e {\n  x = s32[400,300] parameter(0)\n"
     "  i = s32[2,3000] parameter(1)\n  u = s32[3000,5,7] parameter(2)\n"
     "  ROOT s = s32[400,300] scatter(x, i, u), update_window_dims={1,2}, "
     "inserted_window_dims={}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=0, "
     "to_apply=add\n}\n",
     1, false},
    /* overwrite of short rows by many positions (the last one wins) */
    {"HloModule s10\nset {\n  a = f32[] parameter(0)\n  ROOT b = f32[] parameter(1)\n}\n"
     "ENTRY e {\n  x = f32[300,16] parameter(0)\n  i = s32[20000,1] parameter(1)\n"
     "  u = f32[20000,16] parameter(2)\n"
     "  ROOT s = f32[300,16] scatter(x, i, u), update_window_dims={1}, "
     "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
     "to_apply=set\n}\n",
     1, false},
    /* batching dims (the window-start table): take_along_axis's gradient, one f32 per position;
     * jnp.linalg.solve's pivot permutation, an s32 overwrite; f64 rows of 5 whose operand
     * batching dim is not the first, matched to the indices' first dim */
    {"HloModule s11\n" SC_ADD_F32 "ENTRY e {\n  x = f32[40,30] parameter(0)\n"
     "  i = s32[40,25,1] parameter(1)\n  u = f32[40,25] parameter(2)\n"
     "  ROOT s = f32[40,30] scatter(x, i, u), update_window_dims={}, "
     "inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, input_batching_dims={0}, "
     "scatter_indices_batching_dims={0}, index_vector_dim=2, to_apply=add\n}\n",
     1, false},
    {"HloModule s12\nset {\n  a = s32[] parameter(0)\n  ROOT b = s32[] parameter(1)\n}\n"
     "ENTRY e {\n  x = s32[48,64] parameter(0)\n  i = s32[48,1] parameter(1)\n"
     "  u = s32[48] parameter(2)\n"
     "  ROOT s = s32[48,64] scatter(x, i, u), update_window_dims={}, "
     "inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, input_batching_dims={0}, "
     "scatter_indices_batching_dims={0}, index_vector_dim=1, to_apply=set\n}\n",
     1, false},
    {"HloModule s13\nadd {\n  a = f64[] parameter(0)\n  b = f64[] parameter(1)\n"
     "  ROOT s = f64[] add(a, b)\n}\nENTRY e {\n  x = f64[30,8,5] parameter(0)\n"
     "  i = s64[8,30,1] parameter(1)\n  u = f64[8,30,5] parameter(2)\n"
     "  ROOT s = f64[30,8,5] scatter(x, i, u), update_window_dims={2}, "
     "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, input_batching_dims={1}, "
     "scatter_indices_batching_dims={0}, index_vector_dim=2, to_apply=add\n}\n",
     1, false},
    /* the window dims lead the updates: the reference runs it */
    {"HloModule s6\n" SC_ADD_F32 "ENTRY e {\n  x = f32[30,12] parameter(0)\n"
     "  i = s32[8,1] parameter(1)\n  u = f32[12,8] parameter(2)\n"
     "  ROOT s = f32[30,12] scatter(x, i, u), update_window_dims={0}, "
     "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
     "to_apply=add\n}\n",
     0, false},
    /* a multiply computation: the reference runs it */
    {"HloModule s7\nmul {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
     "  ROOT s = f32[] multiply(a, b)\n}\nENTRY e {\n  x = f32[30,12] parameter(0)\n"
     "  i = s32[8,1] parameter(1)\n  u = f32[8,12] parameter(2)\n"
     "  ROOT s = f32[30,12] scatter(x, i, u), update_window_dims={1}, "
     "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
     "to_apply=mul\n}\n",
     0, false},
};

/* Floats in [-1, 1) with about one element in six special. */
static void fill_special(ot_tensor *t) {
    fill_random(t, -1, 1);
    int64_t n = ot_shape_numel_unchecked(&t->shape);
    bool f32 = t->shape.dtype == OT_F32;
    if (!f32 && t->shape.dtype != OT_F64) return;
    for (int64_t e = 0; e < n; e++) {
        int k = (int)(next_u64() % 48);
        if (k >= 8) continue;
        uint64_t pay = next_u64() & 0xffff;
        double v = 0;
        switch (k) {
        case 0: v = INFINITY; break;
        case 1: v = -INFINITY; break;
        case 2: v = -0.0; break;
        case 3: v = f32 ? FLT_MIN * 0.25 : DBL_MIN * 0.25; break; /* subnormal */
        case 4: v = f32 ? -FLT_MIN * 0.75 : -DBL_MIN * 0.75; break;
        default: break;
        }
        if (k < 5) {
            if (f32)
                ((float *)t->data)[e] = (float)v;
            else
                ((double *)t->data)[e] = v;
        } else if (f32) { /* NaNs, quiet or signalling, either sign, with a payload */
            uint32_t u = 0x7f800000u | (uint32_t)(pay + 1) | (k == 5 ? 0x400000u : 0) |
                         (k == 7 ? 0x80000000u : 0);
            memcpy((float *)t->data + e, &u, 4);
        } else {
            uint64_t u = 0x7ff0000000000000ull | (pay + 1) | (k == 5 ? 1ull << 51 : 0) |
                         (k == 7 ? 1ull << 63 : 0);
            memcpy((double *)t->data + e, &u, 8);
        }
    }
}

/* Floats at the bottom of the range and no NaN: signed zeros, subnormals and small normals
 * whose sums land on both sides of the flush (rows without a NaN take the adds in the CPU's
 * FTZ/DAZ mode). Other dtypes as fill_special. */
static void fill_tiny(ot_tensor *t) {
    fill_special(t);
    int64_t n = ot_shape_numel_unchecked(&t->shape);
    bool f32 = t->shape.dtype == OT_F32;
    if (!f32 && t->shape.dtype != OT_F64) return;
    for (int64_t e = 0; e < n; e++) {
        double m = f32 ? FLT_MIN : DBL_MIN, v;
        switch (next_u64() % 4) {
        case 0: v = next_u64() % 2 ? 0.0 : -0.0; break;
        case 1: v = m * (double)rnd(1, 1000) / 1024.0; break; /* subnormal */
        case 2: v = -m * (double)rnd(1, 1000) / 1024.0; break;
        default: v = m * (double)rnd(-3000, 3000) / 1024.0; break;
        }
        if (f32)
            ((float *)t->data)[e] = (float)v;
        else
            ((double *)t->data)[e] = v;
    }
}

static void test_scatter(void) {
    g_rng = 0x5ca7;
    for (int kk = 0; kk < 2 * (int)(sizeof k_scatters / sizeof k_scatters[0]); kk++) {
        int k = kk >> 1, tiny = kk & 1; /* each case on special values, then on tiny ones */
        ot_module *m = NULL;
        ASSERT_OK(ot_hlo_parse(k_scatters[k].hlo, strlen(k_scatters[k].hlo), NULL, &m));
        ot_executable *e = compile0(m);
        ASSERT_TRUE(e);
        const ot_computation *c = ot_module_entry(m);
        ot_tensor args[3], ref, fast;
        for (int a = 0; a < 3; a++)
            ASSERT_OK(ot_tensor_alloc(&args[a], &c->params[a]->shape.array));
        (tiny ? fill_tiny : fill_special)(&args[0]);
        (tiny ? fill_tiny : fill_special)(&args[2]);
        /* small index ranges: many duplicates; fill_indices adds out-of-range values */
        fill_indices(&args[1], args[0].shape.dims[0] / 2);
        g_in_place = k_scatters[k].donate;
        EXPECT_OK(run_exe(e, args, 3, &ref, NULL, true, NULL));
        if (!run_all_pools(e, args, 3, &fast, k_scatters[k].want_fast)) {
            fprintf(stderr, "scatter %d\n", k);
            EXPECT_TRUE(false);
        } else {
            if (!bits_equal(&fast, &ref)) {
                fprintf(stderr, "scatter %d: not bitwise equal\n", k);
                for (size_t q = 0; q < ref.nbytes / 4; q++) {
                    uint32_t a, b;
                    memcpy(&a, (char *)fast.data + 4 * q, 4);
                    memcpy(&b, (char *)ref.data + 4 * q, 4);
                    if (a != b) {
                        fprintf(stderr, "  word %zu fast %08x ref %08x\n", q, a, b);
                        break;
                    }
                }
            }
            EXPECT_TRUE(bits_equal(&fast, &ref));
            ot_tensor_release(&fast);
        }
        g_in_place = false;
        ot_tensor_release(&ref);
        for (int a = 0; a < 3; a++) ot_tensor_release(&args[a]);
        ot_executable_free(e);
        ot_module_free(m);
    }
}

/* .at[].max / .at[].min / .at[].set and segment_max/min: scatters whose computation is maximum
 * or minimum, of its parameters in either order, or its second parameter, over floats (NaNs with
 * payloads of either sign, signed zeros, infinities, subnormals read as zero under FTZ) and
 * integers of each width and signedness, one element per position (a bincount-like scalar
 * scatter) and rows, duplicate indices and out-of-range ones, enough positions for the split over
 * the pool: bits equal to the reference on every pool. */
static void test_scatter_minmax(void) {
    g_rng = 0x3a9d;
    static const char *dts[] = {"f32", "f64", "s32", "u8", "s64", "u32", "s16"};
    for (int it = 0; it < 84; it++) {
        const char *T = dts[it % 7], *K = rnd(0, 1) ? "s32" : "s64";
        int opk = (it / 7) % 3;
        const char *op = opk == 1 ? "minimum" : "maximum";
        bool swapped = (it / 21) % 2, rows = (it / 42) % 2;
        int64_t R = rnd(1, 400), D = rnd(1, 40), N = rnd(2000, 60000) / (rows ? D : 1);
        char comp[256], hlo[1200];
        if (opk == 2)
            snprintf(comp, sizeof comp,
                     "upd {\n  a = %s[] parameter(0)\n  ROOT b = %s[] parameter(1)\n}\n", T, T);
        else
            snprintf(comp, sizeof comp,
                     "upd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
                     "  ROOT s = %s[] %s(%s)\n}\n",
                     T, T, T, op, swapped ? "b, a" : "a, b");
        if (rows)
            snprintf(hlo, sizeof hlo,
                     "HloModule sm\n%sENTRY e {\n  x = %s[%lld,%lld] parameter(0)\n"
                     "  i = %s[%lld,1] parameter(1)\n  u = %s[%lld,%lld] parameter(2)\n"
                     "  ROOT s = %s[%lld,%lld] scatter(x, i, u), update_window_dims={1}, "
                     "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
                     "index_vector_dim=1, to_apply=upd\n}\n",
                     comp, T, (long long)R, (long long)D, K, (long long)N, T, (long long)N,
                     (long long)D, T, (long long)R, (long long)D);
        else
            snprintf(hlo, sizeof hlo,
                     "HloModule sm\n%sENTRY e {\n  x = %s[%lld] parameter(0)\n"
                     "  i = %s[%lld,1] parameter(1)\n  u = %s[%lld] parameter(2)\n"
                     "  ROOT s = %s[%lld] scatter(x, i, u), update_window_dims={}, "
                     "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
                     "index_vector_dim=1, to_apply=upd\n}\n",
                     comp, T, (long long)R, K, (long long)N, T, (long long)N, T, (long long)R);
        ot_module *m = NULL;
        ASSERT_OK(ot_hlo_parse(hlo, strlen(hlo), NULL, &m));
        ot_executable *e = compile0(m);
        ASSERT_TRUE(e);
        const ot_computation *c = ot_module_entry(m);
        ot_tensor args[3], ref, fast;
        for (int a = 0; a < 3; a++)
            ASSERT_OK(ot_tensor_alloc(&args[a], &c->params[a]->shape.array));
        fill_special(&args[0]);
        fill_special(&args[2]);
        fill_indices(&args[1], R);
        EXPECT_OK(run_exe(e, args, 3, &ref, NULL, true, NULL));
        if (!run_all_pools(e, args, 3, &fast, 1)) {
            fprintf(stderr, "min/max scatter %d:\n%s", it, hlo);
            EXPECT_TRUE(false);
        } else {
            if (!bits_equal(&fast, &ref)) fprintf(stderr, "min/max scatter %d:\n%s", it, hlo);
            EXPECT_TRUE(bits_equal(&fast, &ref));
            ot_tensor_release(&fast);
        }
        ot_tensor_release(&ref);
        for (int a = 0; a < 3; a++) ot_tensor_release(&args[a]);
        ot_executable_free(e);
        ot_module_free(m);
    }
}
/* One-element maximum / minimum scatters of floats whose values are plain (no NaN, no subnormal:
 * fast_scatter.c's keyed loop): many ties, signed zeros and infinities, s32/s64 indices with
 * out-of-range ones, in place or not, f32 and f64, the computation's operands in either order;
 * then one update that is not plain (a NaN with a payload, or a subnormal, which FTZ reads as a
 * zero) somewhere in the stream, where the keyed loop hands the rest to the generic one, or one
 * such element in the operand, where it does not start. Bits equal to the reference's on 1, 2,
 * 3 and 8 threads. */
static void fill_plain(ot_tensor *t) {
    int64_t n = ot_shape_numel_unchecked(&t->shape);
    bool f32 = t->shape.dtype == OT_F32;
    for (int64_t e = 0; e < n; e++) {
        double v;
        switch (next_u64() % 16) {
        case 0: v = 0.0; break;
        case 1: v = -0.0; break;
        case 2: v = INFINITY; break;
        case 3: v = -INFINITY; break;
        default: v = (double)rnd(-40, 40) * 0.25; break;
        }
        if (f32)
            ((float *)t->data)[e] = (float)v;
        else
            ((double *)t->data)[e] = v;
    }
}

static void put_special(ot_tensor *t, int64_t at, int kind) {
    bool f32 = t->shape.dtype == OT_F32;
    if (kind == 0) { /* a NaN of either sign with a payload */
        uint64_t pay = next_u64() & 0xffff, neg = next_u64() & 1;
        if (f32) {
            uint32_t u = 0x7f800000u | (uint32_t)(pay + 1) | (neg ? 0x80000000u : 0);
            memcpy((float *)t->data + at, &u, 4);
        } else {
            uint64_t u = 0x7ff0000000000000ull | (pay + 1) | (neg ? 1ull << 63 : 0);
            memcpy((double *)t->data + at, &u, 8);
        }
    } else if (f32) {
        ((float *)t->data)[at] = -FLT_MIN * 0.5f;
    } else {
        ((double *)t->data)[at] = -DBL_MIN * 0.5;
    }
}

static void test_scatter_minmax_keyed(void) {
    g_rng = 0x6b1e;
    for (int it = 0; it < 48; it++) {
        const char *T = it % 2 ? "f64" : "f32", *K = rnd(0, 1) ? "s32" : "s64";
        const char *op = (it / 2) % 2 ? "minimum" : "maximum";
        bool swapped = (it / 4) % 2, donate = rnd(0, 1);
        int special = (it / 8) % 3; /* 0: all plain; 1: one update not plain; 2: one operand el. */
        int64_t R = rnd(1, 3000), N = rnd(1, 40000);
        char hlo[1200];
        snprintf(hlo, sizeof hlo,
                 "HloModule smk\nupd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
                 "  ROOT s = %s[] %s(%s)\n}\nENTRY e {\n  x = %s[%lld] parameter(0)\n"
                 "  i = %s[%lld,1] parameter(1)\n  u = %s[%lld] parameter(2)\n"
                 "  ROOT s = %s[%lld] scatter(x, i, u), update_window_dims={}, "
                 "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
                 "index_vector_dim=1, to_apply=upd\n}\n",
                 T, T, T, op, swapped ? "b, a" : "a, b", T, (long long)R, K, (long long)N, T,
                 (long long)N, T, (long long)R);
        ot_module *m = NULL;
        ASSERT_OK(ot_hlo_parse(hlo, strlen(hlo), NULL, &m));
        ot_executable *e = compile0(m);
        ASSERT_TRUE(e);
        const ot_computation *c = ot_module_entry(m);
        ot_tensor args[3], ref, fast;
        for (int a = 0; a < 3; a++)
            ASSERT_OK(ot_tensor_alloc(&args[a], &c->params[a]->shape.array));
        fill_plain(&args[0]);
        fill_plain(&args[2]);
        fill_indices(&args[1], R - 1);
        if (special == 1) put_special(&args[2], rnd(0, N - 1), (int)rnd(0, 1));
        if (special == 2) put_special(&args[0], rnd(0, R - 1), (int)rnd(0, 1));
        g_in_place = donate;
        EXPECT_OK(run_exe(e, args, 3, &ref, NULL, true, NULL));
        if (!run_all_pools(e, args, 3, &fast, 1)) {
            fprintf(stderr, "keyed min/max scatter %d:\n%s", it, hlo);
            EXPECT_TRUE(false);
        } else {
            if (!bits_equal(&fast, &ref)) fprintf(stderr, "keyed min/max scatter %d:\n%s", it, hlo);
            EXPECT_TRUE(bits_equal(&fast, &ref));
            ot_tensor_release(&fast);
        }
        g_in_place = false;
        ot_tensor_release(&ref);
        for (int a = 0; a < 3; a++) ot_tensor_release(&args[a]);
        ot_executable_free(e);
        ot_module_free(m);
    }
}

/* Random scatters of rows into a table: segment sums, embedding gradients, .at[].set and
 * .at[].add of whole rows ([R, D] rows picked by one index; [R, A, D] blocks; [R, B, D] rows
 * picked by two indices) and of partial rows (windows [1, Dw] of [R, D]), widths 1–100, f32/f64/
 * s32, s32/s64 indices (one index per position: read directly; two: the window starts computed
 * first), enough positions for the pool. The last 24 with the indices sorted (sorted segment
 * ids), half of them with narrow rows, 1–8 wide (added element by element). Bits equal to the
 * reference's on 1, 2, 3 and 8 threads. */
static int cmp_index32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}
static int cmp_index64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void test_scatter_random(void) {
    g_rng = 0x5c47;
    static const char *dts[] = {"f32", "f64", "s32"};
    for (int it = 0; it < 72; it++) {
        int dt = it % 3, v = (it / 3) % 4, kind = (int)rnd(0, 2), tiny = (it / 12) % 2;
        bool sorted = it >= 48;
        const char *T = dts[dt], *K = rnd(0, 1) ? "s32" : "s64";
        int64_t R = rnd(1, 300), D = sorted && it % 2 ? rnd(1, 8) : rnd(1, 100), A = rnd(2, 3),
                B = rnd(2, 5);
        int64_t Dw = rnd(1, D), es = dt == 1 ? 8 : 4;
        int64_t row = v == 1 ? A * D : v == 3 ? Dw : D;
        int64_t N = 1 + (300000 + rnd(0, 200000)) / (row * es * 3); /* past EX_INLINE_BYTES */
        char xs[64], us[64], ks[64], dims[160], comp[200], hlo[1200];
        snprintf(comp, sizeof comp,
                 kind == 2   ? "upd {\n  a = %s[] parameter(0)\n  ROOT b = %s[] parameter(1)\n}\n"
                 : kind == 1 ? "upd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
                               "  ROOT s = %s[] add(b, a)\n}\n"
                             : "upd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
                               "  ROOT s = %s[] add(a, b)\n}\n",
                 T, T, T);
        switch (v) {
        case 0: /* [R, D] rows, the index vector implicit or [N, 1] */
            snprintf(xs, sizeof xs, "%s[%lld,%lld]", T, (long long)R, (long long)D);
            snprintf(us, sizeof us, "%s[%lld,%lld]", T, (long long)N, (long long)D);
            snprintf(ks, sizeof ks, it % 2 ? "%s[%lld]" : "%s[%lld,1]", K, (long long)N);
            snprintf(dims, sizeof dims,
                     "update_window_dims={1}, inserted_window_dims={0}, "
                     "scatter_dims_to_operand_dims={0}, index_vector_dim=1");
            break;
        case 1: /* [R, A, D] blocks */
            snprintf(xs, sizeof xs, "%s[%lld,%lld,%lld]", T, (long long)R, (long long)A,
                     (long long)D);
            snprintf(us, sizeof us, "%s[%lld,%lld,%lld]", T, (long long)N, (long long)A,
                     (long long)D);
            snprintf(ks, sizeof ks, "%s[%lld,1]", K, (long long)N);
            snprintf(dims, sizeof dims,
                     "update_window_dims={1,2}, inserted_window_dims={0}, "
                     "scatter_dims_to_operand_dims={0}, index_vector_dim=1");
            break;
        case 2: /* [R, B, D] rows picked by two indices */
            snprintf(xs, sizeof xs, "%s[%lld,%lld,%lld]", T, (long long)R, (long long)B,
                     (long long)D);
            snprintf(us, sizeof us, "%s[%lld,%lld]", T, (long long)N, (long long)D);
            snprintf(ks, sizeof ks, "%s[%lld,2]", K, (long long)N);
            snprintf(dims, sizeof dims,
                     "update_window_dims={1}, inserted_window_dims={0,1}, "
                     "scatter_dims_to_operand_dims={0,1}, index_vector_dim=1");
            break;
        default: /* windows [1, Dw] of [R, D]: runs shorter than the rows */
            snprintf(xs, sizeof xs, "%s[%lld,%lld]", T, (long long)R, (long long)D);
            snprintf(us, sizeof us, "%s[%lld,%lld]", T, (long long)N, (long long)Dw);
            snprintf(ks, sizeof ks, "%s[%lld,1]", K, (long long)N);
            snprintf(dims, sizeof dims,
                     "update_window_dims={1}, inserted_window_dims={0}, "
                     "scatter_dims_to_operand_dims={0}, index_vector_dim=1");
            break;
        }
        snprintf(hlo, sizeof hlo,
                 "HloModule sr\n%sENTRY e {\n  x = %s parameter(0)\n  i = %s parameter(1)\n"
                 "  u = %s parameter(2)\n  ROOT s = %s scatter(x, i, u), %s, to_apply=upd\n}\n",
                 comp, xs, ks, us, xs, dims);
        ot_module *m = NULL;
        ASSERT_OK(ot_hlo_parse(hlo, strlen(hlo), NULL, &m));
        ot_executable *e = compile0(m);
        ASSERT_TRUE(e);
        const ot_computation *c = ot_module_entry(m);
        ot_tensor args[3], ref, fast;
        for (int a = 0; a < 3; a++)
            ASSERT_OK(ot_tensor_alloc(&args[a], &c->params[a]->shape.array));
        (tiny ? fill_tiny : fill_special)(&args[0]);
        (tiny ? fill_tiny : fill_special)(&args[2]);
        fill_indices(&args[1], v == 2 ? (R < B ? R : B) : R);
        if (sorted) {
            bool i32 = args[1].shape.dtype == OT_S32;
            qsort(args[1].data, ot_shape_numel_unchecked(&args[1].shape), i32 ? 4 : 8,
                  i32 ? cmp_index32 : cmp_index64);
        }
        EXPECT_OK(run_exe(e, args, 3, &ref, NULL, true, NULL));
        if (!run_all_pools(e, args, 3, &fast, 1)) {
            fprintf(stderr, "random scatter %d:\n%s", it, hlo);
            EXPECT_TRUE(false);
        } else {
            if (!bits_equal(&fast, &ref)) fprintf(stderr, "random scatter %d:\n%s", it, hlo);
            EXPECT_TRUE(bits_equal(&fast, &ref));
            ot_tensor_release(&fast);
        }
        ot_tensor_release(&ref);
        for (int a = 0; a < 3; a++) ot_tensor_release(&args[a]);
        ot_executable_free(e);
        ot_module_free(m);
    }
}

/* At -O1 a scatter whose operand is a temporary dying there updates it in place (the kernel's
 * output shares its buffer); the fast kernel then adds into it without the copy. Same bits as the
 * reference on every pool. */
static void test_scatter_in_place_temp(void) {
    g_rng = 0x1b5;
    static const char *hlo =
        "HloModule sip\n" SC_ADD_F32 "ENTRY e {\n  p = f32[300,64] parameter(0)\n"
        "  i = s32[40,16,1] parameter(1)\n  u = f32[40,16,64] parameter(2)\n"
        "  x = f32[300,64] sine(p)\n"
        "  s = f32[300,64] scatter(x, i, u), update_window_dims={2}, inserted_window_dims={0}, "
        "scatter_dims_to_operand_dims={0}, index_vector_dim=2, to_apply=add\n"
        "  ROOT r = f32[300,64] cosine(s)\n}\n";
    ot_module *m = NULL;
    ASSERT_OK(ot_hlo_parse(hlo, strlen(hlo), NULL, &m));
    ot_compile_options o = ot_compile_options_default();
    o.opt_level = 1;
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, &o, &e));
    int found = 0;
    for (int k = 0; k < ot_executable_kernel_count(e); k++) {
        const ot_kernel *kn = ot_executable_kernel(e, k);
        if (kn->opcode != OT_OP_SCATTER) continue;
        found++;
        EXPECT_INT_EQ(kn->in_place_input, 0);
        EXPECT_INT_EQ(ot_executable_slot(e, kn->outputs[0])->offset,
                      ot_executable_slot(e, kn->inputs[0])->offset);
    }
    EXPECT_INT_EQ(found, 1);
    const ot_computation *c = ot_module_entry(m);
    ot_tensor args[3], ref;
    for (int a = 0; a < 3; a++) ASSERT_OK(ot_tensor_alloc(&args[a], &c->params[a]->shape.array));
    fill_special(&args[0]);
    fill_special(&args[2]);
    fill_indices(&args[1], 150);
    EXPECT_OK(run_exe(e, args, 3, &ref, NULL, true, NULL));
    for (int p = 0; p < 4; p++) {
        ot_tensor t;
        int fr = 0;
        ASSERT_OK(run_exe(e, args, 3, &t, g_pools[p], false, &fr));
        EXPECT_TRUE(fr >= 1);
        if (!bits_equal(&t, &ref)) fprintf(stderr, "in-place scatter, %d threads\n", g_nthreads[p]);
        EXPECT_TRUE(bits_equal(&t, &ref));
        ot_tensor_release(&t);
    }
    ot_tensor_release(&ref);
    for (int a = 0; a < 3; a++) ot_tensor_release(&args[a]);
    ot_executable_free(e);
    ot_module_free(m);
}

/* -O2 turns a lone reduce into an input fusion of one reduce: the fast reduce runs it. */
static void test_reduce_fusion(void) {
    g_rng = 0xf5;
    static const ot_opcode ops[] = {OT_OP_ADD, OT_OP_MAXIMUM, OT_OP_MINIMUM, OT_OP_MULTIPLY};
    for (int cs = 0; cs < 16; cs++) {
        ot_dtype t = cs % 2 ? OT_F64 : OT_F32;
        ot_shape s;
        int64_t dims[3] = {rnd(1, 40), rnd(1, 40), rnd(1, 40)}, rd[2] = {cs % 3, 2};
        ASSERT_OK(ot_shape_make(&s, t, 3, dims));
        ot_module *m = reduce_module(t, &s, rd, cs % 3 == 2 ? 1 : 2, ops[cs % 4], 0.25, false);
        ASSERT_TRUE(m);
        ot_executable *e = NULL;
        ASSERT_OK(ot_compile(m, NULL, &e));
        EXPECT_INT_EQ(ot_executable_kernel(e, 0)->opcode, OT_OP_FUSION);
        ot_tensor x, ref, fast;
        ASSERT_OK(ot_tensor_alloc(&x, &s));
        fill_random(&x, 0.9, 1.1);
        EXPECT_OK(run_exe(e, &x, 1, &ref, NULL, true, NULL));
        if (run_all_pools(e, &x, 1, &fast, 1)) { /* short rows: bitwise */
            EXPECT_TRUE(bits_equal(&fast, &ref));
            ot_tensor_release(&fast);
        } else {
            EXPECT_TRUE(false);
        }
        ot_tensor_release(&ref);
        ot_tensor_release(&x);
        ot_executable_free(e);
        ot_module_free(m);
    }
}

/* ---- elementwise straight into the output slot ---------------------------------------------- */

static void test_elementwise(void) {
    g_rng = 0xe1e;
    static const ot_opcode ops[] = {OT_OP_ADD, OT_OP_MULTIPLY, OT_OP_DIVIDE, OT_OP_MAXIMUM,
                                    OT_OP_EXP, OT_OP_NEGATE,   OT_OP_SQRT,   OT_OP_TANH};
    for (int cs = 0; cs < 32; cs++) {
        ot_dtype t = cs % 2 ? OT_F64 : OT_F32;
        ot_opcode op = ops[cs % 8];
        ot_shape s;
        ASSERT_OK(ot_shape_make(&s, t, 2, (int64_t[]){rnd(3, 40), rnd(3, 40)}));
        ot_module *m = ot_module_new("ew");
        ot_computation *c = ot_module_add_computation(m, "main");
        ot_instr *a = ot_build_parameter(c, 0, s, "a"), *b = ot_build_parameter(c, 1, s, "b");
        ot_instr *y = ot_opcode_is_elementwise_binary(op) ? ot_build_binary(c, op, a, b)
                                                          : ot_build_unary(c, op, a);
        ot_computation_set_root(c, ot_build_convert(c, ot_build_binary(c, OT_OP_ADD, y, b),
                                                    t == OT_F32 ? OT_F64 : OT_F32));
        ot_module_set_entry(m, c);
        ASSERT_OK(ot_module_finalize(m));
        ot_executable *e = compile0(m);
        ASSERT_TRUE(e);
        ot_tensor args[2], ref, fast;
        ASSERT_OK(ot_tensor_alloc(&args[0], &s));
        ASSERT_OK(ot_tensor_alloc(&args[1], &s));
        fill_random(&args[0], 0, 2);
        fill_random(&args[1], -1, 1);
        /* pairs at the first elements: sums, differences, products and quotients that are
         * subnormal (flushed under FTZ), subnormal operands, NaN, infinities, signed zeros */
        static const double p32[][2] = {{3e-38, -2.9e-38}, {1e-20, 1e-20}, {1e-40, 1.0},
                                        {NAN, 1.0},        {-0.0, 0.0},    {INFINITY, -INFINITY},
                                        {1e-30, 1e10},     {2e-39, 3e-39}};
        static const double p64[][2] = {
            {3e-307, -2.99e-307}, {1e-160, 1e-160},      {1e-310, 1.0},  {NAN, 1.0},
            {-0.0, 0.0},          {INFINITY, -INFINITY}, {1e-300, 1e10}, {2e-310, 3e-310}};
        int64_t n = ot_shape_numel_unchecked(&s);
        for (int64_t q = 0; q < 8 && q < n; q++)
            for (int k = 0; k < 2; k++) {
                if (t == OT_F32)
                    ((float *)args[k].data)[q] = (float)p32[q][k];
                else
                    ((double *)args[k].data)[q] = p64[q][k];
            }
        EXPECT_OK(run_exe(e, args, 2, &ref, NULL, true, NULL));
        if (run_all_pools(e, args, 2, &fast, 3)) {
            EXPECT_TRUE(bits_equal(&fast, &ref));
            ot_tensor_release(&fast);
        } else {
            EXPECT_TRUE(false);
        }
        ot_tensor_release(&ref);
        ot_tensor_release(&args[0]);
        ot_tensor_release(&args[1]);
        ot_executable_free(e);
        ot_module_free(m);
    }
}

/* Every allocation of a fast-kernel run (the scratch for a transposed dot operand, im2col, a
 * non-contiguous reduce) failing in turn: OUT_OF_MEMORY with the kernel named, nothing leaked,
 * and the run that succeeds gives the same bits. */
static void test_scratch_allocation_failure(void) {
    g_rng = 0xfa;
    ot_module *m = ot_module_new("oom");
    ot_computation *f = ot_module_add_computation(m, "reducer");
    ot_computation_set_root(
        f, ot_build_binary(f, OT_OP_ADD, ot_build_parameter(f, 0, ot_shape_scalar(OT_F32), "a"),
                           ot_build_parameter(f, 1, ot_shape_scalar(OT_F32), "b")));
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_shape ls, rs;
    ASSERT_OK(ot_shape_make(&ls, OT_F32, 3, (int64_t[]){8, 5, 9})); /* [k0, m, k1] */
    ASSERT_OK(ot_shape_make(&rs, OT_F32, 3, (int64_t[]){9, 7, 8})); /* [k1, n, k0] */
    ot_instr *l = ot_build_parameter(c, 0, ls, "l"), *r = ot_build_parameter(c, 1, rs, "r");
    ot_dot_dims dn = {.ncontract = 2, .lhs_contract = {0, 2}, .rhs_contract = {2, 0}};
    ot_instr *d = ot_build_dot(c, l, r, &dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT);
    ot_instr *z = ot_build_constant_scalar(c, OT_F32, 0.0);
    ot_instr *red = ot_build_reduce(c, &l, &z, 1, (int64_t[]){0, 2}, 2, f); /* not contiguous */
    ot_computation_set_root(c, ot_build_tuple(c, (ot_instr *[]){d, red}, 2));
    ot_module_set_entry(m, c);
    ASSERT_OK(ot_module_finalize(m));
    /* the reference run on an executable of its own: a run keeps its scratch in its executable
     * for the next one, so e's first run below must allocate it */
    ot_executable *e = compile0(m), *eref = compile0(m);
    ASSERT_TRUE(e && eref);
    ASSERT_TRUE(ot_executable_output_count(e) == 2);
    ot_tensor args[2], out[2], ref[2];
    ASSERT_OK(ot_tensor_alloc(&args[0], &ls));
    ASSERT_OK(ot_tensor_alloc(&args[1], &rs));
    fill_random(&args[0], -1, 1);
    fill_random(&args[1], -1, 1);
    for (int k = 0; k < 2; k++) {
        const ot_slot *sl = ot_executable_slot(e, ot_executable_output_slot(e, k));
        ASSERT_OK(ot_tensor_alloc(&out[k], &sl->shape));
        ASSERT_OK(ot_tensor_alloc(&ref[k], &sl->shape));
    }
    int64_t an = ot_executable_arena_size(e);
    void *arena = ot_aligned_alloc(64, (size_t)(an ? an : 64));
    void *params[2] = {args[0].data, args[1].data};
    void *routs[2] = {ref[0].data, ref[1].data}, *fouts[2] = {out[0].data, out[1].data};
    ot_run_options o = ot_run_options_default();
    o.pool = g_pools[1];
    ot_run_result rr;
    ASSERT_OK(ot_execute_on_host(eref, arena, params, routs, &o, 0, &rr));
    EXPECT_INT_EQ(rr.fast_kernels_run, 2);
    ot_executable_free(eref);
    int failures = 0;
    for (int64_t n = 1; n < 50; n++) {
        int64_t live = ot_alloc_live();
        ot_alloc_fail_after(n);
        ot_status st = ot_execute_on_host(e, arena, params, fouts, &o, 0, &rr);
        ot_alloc_fail_after(0);
        /* a failed run leaves nothing behind; a run that succeeds leaves its one scratch buffer
         * in the executable (freed with it) */
        EXPECT_INT_EQ(ot_alloc_live(), live + (st == OT_OK));
        if (st == OT_OK) {
            for (int k = 0; k < 2; k++) EXPECT_TRUE(bits_equal(&out[k], &ref[k]));
            /* the next run reuses that buffer: no allocation to fail */
            int64_t count = ot_alloc_count();
            ASSERT_OK(ot_execute_on_host(e, arena, params, fouts, &o, 0, &rr));
            EXPECT_INT_EQ(ot_alloc_count(), count);
            EXPECT_INT_EQ(ot_alloc_live(), live + 1);
            break;
        }
        failures++;
        EXPECT_INT_EQ(st, OT_ERR_OUT_OF_MEMORY);
        EXPECT_STR_CONTAINS(ot_last_error(), "kernel");
    }
    EXPECT_TRUE(failures >= 1); /* at least the scratch allocation was exercised */
    ot_aligned_free(arena);
    for (int k = 0; k < 2; k++) {
        ot_tensor_release(&args[k]);
        ot_tensor_release(&out[k]);
        ot_tensor_release(&ref[k]);
    }
    ot_executable_free(e);
    ot_module_free(m);
}

static void setup(void) {
    for (int k = 0; k < 4; k++)
        if (!g_pools[k] && ot_threadpool_create(g_nthreads[k], &g_pools[k]) != OT_OK) abort();
}

static void test_setup(void) {
    setup();
    EXPECT_INT_EQ(ot_threadpool_size(g_pools[3]), 8);
}

static void test_teardown(void) {
    for (int k = 0; k < 4; k++) {
        ot_threadpool_free(g_pools[k]);
        g_pools[k] = NULL;
    }
    EXPECT_TRUE(true);
}

OT_TEST_MAIN(OT_TEST(test_blas_idle_workers), OT_TEST(test_setup), OT_TEST(test_dot_random),
             OT_TEST(test_dot_tiled), OT_TEST(test_dot_strided), OT_TEST(test_dot_subnormal_ftz),
             OT_TEST(test_dot_blas_threads), OT_TEST(test_conv_random), OT_TEST(test_conv_large),
             OT_TEST(test_transpose_random), OT_TEST(test_transpose_rows_streamed),
             OT_TEST(test_transpose_small_inner), OT_TEST(test_reduce_random),
             OT_TEST(test_reduce_long_rows), OT_TEST(test_reduce_row_groups),
             OT_TEST(test_reduce_minmax_nan_rows), OT_TEST(test_reduce_minmax_special_rows),
             OT_TEST(test_gather), OT_TEST(test_scatter), OT_TEST(test_scatter_random),
             OT_TEST(test_scatter_minmax), OT_TEST(test_scatter_minmax_keyed),
             OT_TEST(test_scatter_in_place_temp), OT_TEST(test_reduce_fusion),
             OT_TEST(test_reduce_columns), OT_TEST(test_reduce_minmax_columns),
             OT_TEST(test_reduce_subnormal_sums), OT_TEST(test_reduce_axis_sets),
             OT_TEST(test_reduce_minmax_long_blocks), OT_TEST(test_elementwise),
             OT_TEST(test_scratch_allocation_failure), OT_TEST(test_teardown))
