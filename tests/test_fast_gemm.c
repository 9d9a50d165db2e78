/* The fast dot's own f32 GEMM (src/exec/fast_dot.c, x86-64 with AVX-512): every element of the
 * product is one chain of fused multiply-adds over k = 0, 1, ..., K-1 starting from 0, whatever
 * the thread count, the split of the work and the blocking. Checked bitwise against that chain
 * computed here with fmaf, on pools of 1, 2, 3 and 8 threads, for shapes that cross the blocking
 * (K over the k block and K one block up to 320, M and N not multiples of the register block, every
 * edge register block, both register blocks: N <= 16
 * with a transposed lhs, and wider), transposed operands, a transposed lhs read in place and
 * packed (the task split follows the pool), and batches that each thread packs itself on some
 * pools and that share one packed B on others. Skipped where the CPU lacks AVX-512 (OpenBLAS runs
 * the dot there; test_fast_kernels checks it). */
#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "exec/fast_internal.h"
#include "ot_test.h"

#include <math.h>

static ot_threadpool *g_pools[4];
static const int g_nthreads[4] = {1, 2, 3, 8};
static uint64_t g_rng = 0x6e33;

/* The own GEMM's condition (src/exec/fast_dot.c sg_cpu). */
static bool own_gemm_cpu(void) {
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

static float rnd_f(void) { /* uniform in [-1, 1), never subnormal */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(g_rng >> 40) / 8388608.0f - 1.0f;
}

typedef struct gcase {
    int64_t b, m, n, k;
    bool ta, tb; /* lhs stored [b, k, m], rhs stored [b, n, k] */
} gcase;

static ot_module *gemm_module(const gcase *g, ot_shape *ls, ot_shape *rs) {
    int64_t ld[3] = {g->b, g->ta ? g->k : g->m, g->ta ? g->m : g->k};
    int64_t rd[3] = {g->b, g->tb ? g->n : g->k, g->tb ? g->k : g->n};
    ot_dot_dims dn = {.nbatch = 1, .ncontract = 1, .lhs_batch = {0}, .rhs_batch = {0}};
    dn.lhs_contract[0] = g->ta ? 1 : 2;
    dn.rhs_contract[0] = g->tb ? 2 : 1;
    if (ot_shape_make(ls, OT_F32, 3, ld) != OT_OK || ot_shape_make(rs, OT_F32, 3, rd) != OT_OK)
        return NULL;
    ot_module *m = ot_module_new("gemm");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *l = ot_build_parameter(c, 0, *ls, "l"), *r = ot_build_parameter(c, 1, *rs, "r");
    ot_computation_set_root(c,
                            ot_build_dot(c, l, r, &dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT));
    ot_module_set_entry(m, c);
    if (ot_module_finalize(m) != OT_OK) {
        ot_module_free(m);
        return NULL;
    }
    return m;
}

/* The result of one case on `pool`, compared bitwise with want; true when equal. */
static bool run_case(const ot_executable *exe, float *a, float *b, float *out, size_t nout,
                     const float *want, ot_threadpool *pool) {
    int64_t an = ot_executable_arena_size(exe);
    void *arena = an ? ot_aligned_alloc(64, (size_t)an) : NULL;
    void *params[2] = {a, b}, *outs[1] = {out};
    ot_run_options o = ot_run_options_default();
    o.pool = pool;
    ot_run_result r;
    memset(out, 0xff, nout * sizeof *out);
    ot_status st = ot_execute_on_host(exe, arena, params, outs, &o, 0, &r);
    ot_aligned_free(arena);
    if (st != OT_OK || r.fast_kernels_run != 1) {
        fprintf(stderr, "run: %s, %d fast kernels\n", ot_last_error(), (int)r.fast_kernels_run);
        return false;
    }
    for (size_t e = 0; e < nout; e++)
        if (memcmp(&out[e], &want[e], sizeof *out)) {
            fprintf(stderr, "element %zu: %a, the fma chain gives %a\n", e, (double)out[e],
                    (double)want[e]);
            return false;
        }
    return true;
}

static void test_fma_chain(void) {
    if (!own_gemm_cpu()) OT_SKIP("the CPU has no AVX-512: the dot runs through OpenBLAS");
    static const gcase cs[] = {
        {1, 100, 70, 600, false, false}, /* k blocks of 256, 256, 88; M, N tails */
        {1, 100, 70, 600, true, true},
        {1, 37, 13, 300, true, false}, /* N <= 16: 24 x 16 */
        {1, 512, 10, 1024, true, false},
        {1, 13, 33, 5, false, true},
        {1, 12, 8, 1, false, false},
        {1, 600, 1100, 40, false, false},
        {1, 300, 520, 700, true, false}, /* many tasks over rows and panel blocks */
        /* row-major A packed once and shared by the column blocks: row blocks of up to 192 rows
         * (168 + 168 + 164), k blocks 256 + 256 + 88 */
        {1, 500, 520, 600, false, false},
        {40, 30, 20, 50, false, true}, /* each thread packs its elements' B */
        {5, 64, 48, 300, true, true},  /* own B on 1 and 2 threads, shared on 3 and 8 */
        {3, 200, 260, 20, false, false},
        {1, 500, 60, 700, false, false}, /* one column block: tasks wait for its B slices */
        {1, 290, 50, 530, false, true},
        {1, 130, 300, 270, false, true},
        /* edges through the narrower register blocks: rows left in a micro-panel 1-4, 5-8,
         * 9-11 (12 x 32) and 4, 8, 12, 16, 24 (N <= 16); columns left in a panel 1-16, 17-31 */
        {1, 32, 257, 129, false, false}, /* 12 + 12 + 8 rows, 1 column */
        {1, 77, 333, 129, true, false},  /* 5 rows, 13 columns */
        {1, 129, 77, 333, false, true},  /* 96 + 33 rows (9 left), 13 columns */
        {1, 16, 47, 20, false, false},   /* 4 rows, 15 columns */
        {1, 27, 50, 31, true, true},     /* 3 rows, 18 columns */
        {1, 28, 7, 50, true, false},     /* N <= 16: 24 + 4 rows */
        {1, 31, 9, 40, true, false},     /* 24 + 7 */
        {1, 35, 12, 20, true, false},    /* 24 + 11 */
        {1, 40, 16, 30, true, false},    /* 24 + 16 */
        {2, 45, 15, 17, true, true},     /* 24 + 21 */
        /* K up to 320 is one k block: a thread's tasks on the same rows pack them once */
        {1, 200, 700, 320, false, false},
        {1, 150, 400, 300, true, false},
        {1, 60, 500, 321, false, true}, /* 256 + 65 */
    };
    for (size_t q = 0; q < sizeof cs / sizeof cs[0]; q++) {
        const gcase *g = &cs[q];
        ot_shape ls, rs;
        ot_module *m = gemm_module(g, &ls, &rs);
        ASSERT_TRUE(m);
        ot_executable *exe = NULL;
        ASSERT_TRUE(ot_compile(m, NULL, &exe) == OT_OK);
        size_t na = (size_t)(g->b * g->m * g->k), nb = (size_t)(g->b * g->k * g->n),
               nc = (size_t)(g->b * g->m * g->n);
        float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4), *want = malloc(nc * 4);
        ASSERT_TRUE(a && b && c && want);
        for (size_t e = 0; e < na; e++) a[e] = rnd_f();
        for (size_t e = 0; e < nb; e++) b[e] = rnd_f();
        for (int64_t t = 0; t < g->b; t++)
            for (int64_t i = 0; i < g->m; i++)
                for (int64_t j = 0; j < g->n; j++) {
                    float acc = 0.0f;
                    for (int64_t k = 0; k < g->k; k++) {
                        float x =
                            g->ta ? a[(t * g->k + k) * g->m + i] : a[(t * g->m + i) * g->k + k];
                        float y =
                            g->tb ? b[(t * g->n + j) * g->k + k] : b[(t * g->k + k) * g->n + j];
                        acc = fmaf(x, y, acc);
                    }
                    want[(t * g->m + i) * g->n + j] = acc;
                }
        for (int p = 0; p < 4; p++) {
            bool ok = run_case(exe, a, b, c, nc, want, g_pools[p]);
            if (!ok)
                fprintf(stderr, "case %zu (%lld x %lld x %lld x %lld%s%s) on %d threads\n", q,
                        (long long)g->b, (long long)g->m, (long long)g->n, (long long)g->k,
                        g->ta ? ", lhs^T" : "", g->tb ? ", rhs^T" : "", g_nthreads[p]);
            EXPECT_TRUE(ok);
        }
        free(a);
        free(b);
        free(c);
        free(want);
        ot_executable_free(exe);
        ot_module_free(m);
    }
}

/* ---- matrix x vector with the rows along k ------------------------------------------------ */

/* ex_gemv_rows's sum of row a (K elements) with x: 16 lane chains (lane l: k = l, l + 16, ...
 * by fma in order from 0), then halves added 8 + 8, 4 + 4, 2 + 2, 1 + 1. */
static float lane_sum(const float *a, int64_t as, const float *x, int64_t xs, int64_t K) {
    float v[16] = {0};
    for (int64_t k = 0; k < K; k++) v[k % 16] = fmaf(a[k * as], x[k * xs], v[k % 16]);
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) v[l] = v[l] + v[l + w];
    return v[0];
}

/* A matrix x vector whose matrix has its rows along the contraction (A [M, K] x B's column, and
 * B stored [N, K] x A's row) runs ex_gemv_rows (fast_gemv.c): its bits equal that order's,
 * computed here, on 1, 2, 3 and 8 threads (row blocks split differently), for K with and
 * without a tail of 16, M with and without a tail of 8 and of a task's 32 rows, fewer rows than
 * a register block, and matrices below and above the size that wakes the pool; and each result
 * lies within 2 K u sum |a||x| of the reference's chain. */
static void test_gemv_rows(void) {
    if (!own_gemm_cpu()) OT_SKIP("the CPU has no AVX-512: the product runs through OpenBLAS");
    static const gcase cs[] = {
        {1, 1000, 1, 1024, false, false}, /* A x: 31 tasks and a tail of 8 rows */
        {1, 1024, 1, 1024, false, true},
        {1, 333, 1, 77, false, false}, /* K tail 13, M tail 5 */
        {1, 7, 1, 5000, false, false}, /* under a register block */
        {1, 70, 1, 9, false, true},    /* K under 16 */
        {1, 2049, 1, 257, false, false},
        {1, 1, 300, 250, false, true}, /* x B^T: B stored [N, K] */
        {1, 1, 513, 1030, true, true}, /* A stored [K, 1]: its row is contiguous too */
    };
    for (size_t q = 0; q < sizeof cs / sizeof cs[0]; q++) {
        const gcase *g = &cs[q];
        ot_shape ls, rs;
        ot_module *m = gemm_module(g, &ls, &rs);
        ASSERT_TRUE(m);
        ot_executable *exe = NULL;
        ASSERT_TRUE(ot_compile(m, NULL, &exe) == OT_OK);
        size_t na = (size_t)(g->m * g->k), nb = (size_t)(g->k * g->n), nc = (size_t)(g->m * g->n);
        float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4), *want = malloc(nc * 4);
        ASSERT_TRUE(a && b && c && want);
        for (size_t e = 0; e < na; e++) a[e] = rnd_f();
        for (size_t e = 0; e < nb; e++) b[e] = rnd_f();
        bool col = g->n == 1; /* rows of A (stored [M, K]) by B; else rows of B ([N, K]) by A */
        const float *mat = col ? a : b, *x = col ? b : a;
        bool close = true;
        for (int64_t i = 0; i < (col ? g->m : g->n); i++) {
            want[i] = lane_sum(mat + i * g->k, 1, x, 1, g->k);
            double chain = 0, mag = 0;
            float f = 0.0f;
            for (int64_t k = 0; k < g->k; k++) {
                f = fmaf(mat[i * g->k + k], x[k], f);
                mag += fabs((double)mat[i * g->k + k] * x[k]);
            }
            chain = f;
            close = close && fabs((double)want[i] - chain) <= 2.0 * (double)g->k * 0x1p-24 * mag;
        }
        EXPECT_TRUE(close);
        for (int p = 0; p < 4; p++) {
            bool ok = run_case(exe, a, b, c, nc, want, g_pools[p]);
            if (!ok)
                fprintf(stderr, "gemv case %zu (%lld x %lld x %lld%s%s) on %d threads\n", q,
                        (long long)g->m, (long long)g->n, (long long)g->k, g->ta ? ", lhs^T" : "",
                        g->tb ? ", rhs^T" : "", g_nthreads[p]);
            EXPECT_TRUE(ok);
        }
        free(a);
        free(b);
        free(c);
        free(want);
        ot_executable_free(exe);
        ot_module_free(m);
    }
}

/* ---- output fusion ------------------------------------------------------------------------ */

static uint16_t half_bits(ot_dtype t, int values);

typedef struct fcase {
    int64_t b, m, n, k; /* b > 1: batch dim 0 on both operands, the bias broadcast over it */
    int act;            /* 0: relu(dot + bias), 1: tanh(dot + bias) * dot, 2: dot * bias only */
    ot_dtype in;        /* the operands' dtype: 0 for f32, or bf16 / f16 (the dot's result f32) */
} fcase;

/* The loop after the dot: act applied to d (the dot's result, or a parameter standing for it)
 * and the bias [n] broadcast along the last dim. */
static ot_instr *loop_of(ot_computation *c, const fcase *f, ot_instr *d, ot_instr *bias) {
    int r = f->b > 1 ? 3 : 2;
    int64_t od[3] = {f->b, f->m, f->n}, bd[1] = {r - 1};
    ot_shape os;
    ot_shape_make(&os, OT_F32, r, f->b > 1 ? od : od + 1);
    ot_instr *bb = ot_build_broadcast(c, bias, os, bd, 1);
    if (f->act == 2) return ot_build_binary(c, OT_OP_MULTIPLY, d, bb);
    ot_instr *s = ot_build_binary(c, OT_OP_ADD, d, bb);
    if (f->act == 0) {
        ot_instr *z = ot_build_broadcast(c, ot_build_constant_scalar(c, OT_F32, 0.0), os, NULL, 0);
        return ot_build_binary(c, OT_OP_MAXIMUM, s, z);
    }
    return ot_build_binary(c, OT_OP_MULTIPLY, ot_build_unary(c, OT_OP_TANH, s), d);
}

/* part 0: x . w then the loop (one program); 1: x . w alone; 2: the loop over a parameter */
static ot_module *fusion_module(const fcase *f, int part) {
    int r = f->b > 1 ? 3 : 2, o = r - 2;
    int64_t xd[3] = {f->b, f->m, f->k}, wd[3] = {f->b, f->k, f->n}, od[3] = {f->b, f->m, f->n};
    ot_shape xs, ws, os, bs;
    ot_dtype in = f->in ? f->in : OT_F32;
    ot_shape_make(&xs, in, r, xd + 1 - o);
    ot_shape_make(&ws, in, r, wd + 1 - o);
    ot_shape_make(&os, OT_F32, r, od + 1 - o);
    ot_shape_make(&bs, OT_F32, 1, &f->n);
    ot_module *m = ot_module_new("ofusion");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_instr *root;
    if (part == 2) {
        ot_instr *d = ot_build_parameter(c, 0, os, "d"), *b = ot_build_parameter(c, 1, bs, "b");
        root = loop_of(c, f, d, b);
    } else {
        ot_dot_dims dn = {.nbatch = o, .ncontract = 1, .lhs_batch = {0}, .rhs_batch = {0}};
        dn.lhs_contract[0] = o + 1;
        dn.rhs_contract[0] = o;
        ot_instr *ops[2] = {ot_build_parameter(c, 0, xs, "x"), ot_build_parameter(c, 1, ws, "w")};
        ot_attrs at;
        memset(&at, 0, sizeof at);
        at.dot = &dn;
        ot_ir_shape hint = {.kind = OT_IR_ARRAY}; /* an f32 result (preferred_element_type) */
        hint.array.rank = -1;
        hint.array.dtype = OT_F32;
        root = ot_build(c, OT_OP_DOT, ops, 2, &at, NULL, 0, &hint, NULL);
        if (part == 0) root = loop_of(c, f, root, ot_build_parameter(c, 2, bs, "b"));
    }
    ot_computation_set_root(c, root);
    ot_module_set_entry(m, c);
    if (ot_module_finalize(m) != OT_OK) {
        ot_module_free(m);
        return NULL;
    }
    return m;
}

static ot_executable *compile_native(const ot_module *m) {
    ot_compile_options o = ot_compile_options_default();
    o.native = OT_NATIVE_ON;
    ot_executable *e = NULL;
    if (!m || ot_compile(m, &o, &e) != OT_OK) {
        fprintf(stderr, "compile: %s\n", ot_last_error());
        return NULL;
    }
    return e;
}

static ot_status run_on(const ot_executable *exe, void **params, float *out, ot_threadpool *pool,
                        ot_run_result *r) {
    int64_t an = ot_executable_arena_size(exe);
    void *arena = an ? ot_aligned_alloc(64, (size_t)an) : NULL;
    void *outs[1] = {out};
    ot_run_options o = ot_run_options_default();
    o.pool = pool;
    ot_status st = ot_execute_on_host(exe, arena, params, outs, &o, 0, r);
    ot_aligned_free(arena);
    return st;
}

/* A dot followed by a loop over its result (bias, activation) runs the loop inside the dot, on
 * each block of the result: its bits equal the dot run alone followed by the loop run alone, on
 * 1, 2, 3 and 8 threads, for blocks of whole rows and of row segments (N of many panels), a batch
 * each thread computes whole, and a loop that reads the dot's result twice. */
static void test_output_fusion(void) {
    if (!own_gemm_cpu())
        OT_SKIP("the CPU has no AVX-512: the dot runs through OpenBLAS, without output fusion");
    static const fcase cs[] = {
        {1, 200, 300, 70, 0, 0},
        {1, 130, 1100, 40, 1, 0},
        {1, 64, 48, 33, 2, 0},
        {20, 30, 40, 50, 0, 0},
        {3, 100, 200, 60, 1, 0},
        {1, 1000, 1, 300, 1, 0}, /* a matrix x vector (ex_gemv_rows): blocks of 32 rows */
        /* bf16 / f16 operands: the result's finishing pass, then the loop */
        {1, 200, 300, 70, 0, OT_BF16},
        {1, 130, 1100, 40, 1, OT_BF16},
        {20, 30, 40, 50, 1, OT_F16},
    };
    for (size_t q = 0; q < sizeof cs / sizeof cs[0]; q++) {
        const fcase *f = &cs[q];
        ot_module *m0 = fusion_module(f, 0), *m1 = fusion_module(f, 1), *m2 = fusion_module(f, 2);
        ot_executable *e0 = compile_native(m0), *e1 = compile_native(m1), *e2 = compile_native(m2);
        ASSERT_TRUE(e0 && e1 && e2);
        size_t nx = (size_t)(f->b * f->m * f->k), nw = (size_t)(f->b * f->k * f->n),
               no = (size_t)(f->b * f->m * f->n);
        float *x = malloc(nx * 4), *w = malloc(nw * 4), *bias = malloc((size_t)f->n * 4);
        float *d = malloc(no * 4), *want = malloc(no * 4), *got = malloc(no * 4);
        ASSERT_TRUE(x && w && bias && d && want && got);
        for (size_t e = 0; e < nx; e++) x[e] = rnd_f();
        for (size_t e = 0; e < nw; e++) w[e] = rnd_f();
        if (f->in) { /* 16-bit operands (specials mixed in): the first half of x and w */
            for (size_t e = 0; e < nx; e++) ((uint16_t *)x)[e] = half_bits(f->in, 1);
            for (size_t e = 0; e < nw; e++) ((uint16_t *)w)[e] = half_bits(f->in, 1);
        }
        for (int64_t e = 0; e < f->n; e++) bias[e] = rnd_f();
        ot_run_result r;
        void *p1[2] = {x, w}, *p2[2] = {d, bias}, *p0[3] = {x, w, bias};
        ASSERT_TRUE(run_on(e1, p1, d, g_pools[0], &r) == OT_OK);
        ASSERT_TRUE(run_on(e2, p2, want, g_pools[0], &r) == OT_OK);
        for (int p = 0; p < 4; p++) {
            memset(got, 0xff, no * 4);
            ASSERT_TRUE(run_on(e0, p0, got, g_pools[p], &r) == OT_OK);
            bool fused = r.output_fusions == 1, same = !memcmp(got, want, no * 4);
            if (!fused || !same)
                fprintf(stderr, "output fusion case %zu on %d threads: %d fused, %s\n", q,
                        g_nthreads[p], r.output_fusions, same ? "equal" : "bits differ");
            EXPECT_TRUE(fused);
            EXPECT_TRUE(same);
        }
        free(x);
        free(w);
        free(bias);
        free(d);
        free(want);
        free(got);
        ot_executable_free(e0);
        ot_executable_free(e1);
        ot_executable_free(e2);
        ot_module_free(m0);
        ot_module_free(m1);
        ot_module_free(m2);
    }
}

/* ---- 16-bit float operands ---------------------------------------------------------------- */

/* A dot of bf16 / f16 operands into f32, bf16 or f16: the fast dot (the own GEMM on operands
 * widened to f32) equals the reference kernel bit for bit, on 1, 2, 3 and 8 threads, over shapes
 * with odd sizes and tails of every blocking, transposed operands, batches (own and shared packed
 * B), operands that must be copied first (a batch dim between the matrix dims, contracting dims
 * that do not merge), N <= 16 with a row-major lhs, and values that include NaN, infinities,
 * signed zeros, subnormals, and products that overflow or underflow f32 (where an fma and a
 * multiply-then-add differ). */
typedef struct hcase {
    ot_dtype lt, rt, ot;
    int64_t b, m, n, k;
    int layout; /* 0: [b,m,k] x [b,k,n]; 1: lhs [b,k,m], rhs [b,n,k]; 2: lhs [m,b,k] (copied),
                   rhs [b,k,n]; 3: 2-D lhs [m, k1, k2] x rhs [k1, k2, n] with k = k1 * k2,
                   contracting dims listed (2, 1) so neither operand merges them in place */
    int values; /* 0: moderate random; 1: specials mixed in; 2: tiny and huge magnitudes; 3:
                   (bf16) partial sums in and out of the subnormal range; 4 (f32): zeros,
                   subnormals and values near 2^60; 5 (bf16): +-0 and +-2^-70, whose products
                   flush partial sums to zeros of either sign (bf16 x bf16 pairs, odd K); 6
                   (bf16): exact sums just below FLT_MIN that round up to it only in the
                   subnormal range (flushed by the pairs' steps) */
} hcase;

static uint16_t half_bits(ot_dtype t, int values) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t r = (uint32_t)(g_rng >> 32);
    if (values == 1 && r % 23 == 0) { /* a special value */
        static const uint16_t bsp[] = {0x7fc0, 0xffc1, 0x7f81, 0x7f80, 0xff80, 0x0000,
                                       0x8000, 0x0001, 0x807f, 0x0040, 0x7f7f, 0xff7f};
        static const uint16_t hsp[] = {0x7e00, 0xfe01, 0x7c01, 0x7c00, 0xfc00, 0x0000,
                                       0x8000, 0x0001, 0x83ff, 0x0200, 0x7bff, 0xfbff};
        return (t == OT_BF16 ? bsp : hsp)[(r >> 8) % 12];
    }
    float v = (float)((r >> 8) & 0xffff) / 32768.0f - 1.0f;
    if (values == 6) { /* products 2^-126 exactly and about -2^-150: sums rounding up to FLT_MIN */
        int c = (int)((r >> 9) % 3);
        v = c == 0 ? ldexpf(1.0f, -63) : ldexpf(1.0f + (float)((r >> 11) % 128) / 128, -74 - c);
        v = (r >> 8) & 1 ? -v : v;
    }
    if (values == 5) {
        v = (r >> 9) % 3 == 0 ? 0.0f : ldexpf(1.0f, -70);
        v = (r >> 8) & 1 ? -v : v;
    }
    if (values == 2) { /* magnitudes 2^-90 .. 2^90 for bf16 (products under- and overflow) */
        int e = t == OT_BF16 ? (int)((r >> 24) % 181) - 90 : (int)((r >> 24) % 41) - 20;
        v = ldexpf(v, e);
    } else if (values == 3) { /* bf16 products about 2^-132 .. 2^-120: partial sums subnormal */
        v = ldexpf(v, -60 - (int)((r >> 24) % 7));
    }
    return t == OT_BF16 ? ot_f32_to_bf16(v) : ot_f32_to_f16(v);
}

static ot_module *half_module(const hcase *h, ot_shape *ls, ot_shape *rs) {
    int64_t b = h->b, m = h->m, n = h->n, k = h->k;
    ot_dot_dims dn = {.nbatch = 1, .ncontract = 1, .lhs_batch = {0}, .rhs_batch = {0}};
    int lr = 3, rr = 3;
    int64_t ld[3] = {b, m, k}, rd[3] = {b, k, n};
    dn.lhs_contract[0] = 2;
    dn.rhs_contract[0] = 1;
    if (h->layout == 1) {
        ld[1] = k;
        ld[2] = m;
        rd[1] = n;
        rd[2] = k;
        dn.lhs_contract[0] = 1;
        dn.rhs_contract[0] = 2;
    } else if (h->layout == 2) {
        ld[0] = m;
        ld[1] = b;
        dn.lhs_batch[0] = 1;
    } else if (h->layout == 3) { /* k = k1 * k2 with k1 = b */
        int64_t k2 = k / b;
        ld[0] = m;
        ld[1] = b;
        ld[2] = k2;
        rd[0] = b;
        rd[1] = k2;
        rd[2] = n;
        dn.nbatch = 0;
        dn.ncontract = 2;
        dn.lhs_contract[0] = 2;
        dn.lhs_contract[1] = 1;
        dn.rhs_contract[0] = 1;
        dn.rhs_contract[1] = 0;
    }
    if (ot_shape_make(ls, h->lt, lr, ld) != OT_OK || ot_shape_make(rs, h->rt, rr, rd) != OT_OK)
        return NULL;
    ot_module *md = ot_module_new("half_dot");
    ot_computation *c = ot_module_add_computation(md, "main");
    ot_instr *l = ot_build_parameter(c, 0, *ls, "l"), *r = ot_build_parameter(c, 1, *rs, "r");
    ot_attrs at;
    memset(&at, 0, sizeof at);
    at.dot = &dn;
    ot_ir_shape hint = {.kind = OT_IR_ARRAY}; /* the result dtype (preferred_element_type) */
    hint.array.rank = -1;
    hint.array.dtype = h->ot;
    ot_instr *ops[2] = {l, r};
    ot_computation_set_root(c, ot_build(c, OT_OP_DOT, ops, 2, &at, NULL, 0, &hint, NULL));
    ot_module_set_entry(md, c);
    if (ot_module_finalize(md) != OT_OK) {
        ot_module_free(md);
        return NULL;
    }
    return md;
}
/* The result of exe on pool (reference kernels when ref), into out (nout bytes); false on
 * failure. *fast: the fast kernels that ran. */
static bool half_run(const ot_executable *exe, void *a, void *b, void *out, size_t nout, bool ref,
                     ot_threadpool *pool, int *fast) {
    int64_t an = ot_executable_arena_size(exe);
    void *arena = an ? ot_aligned_alloc(64, (size_t)an) : NULL;
    void *params[2] = {a, b}, *outs[1] = {out};
    ot_run_options o = ot_run_options_default();
    o.pool = pool;
    o.reference_kernels = ref;
    ot_run_result r;
    memset(out, 0xa5, nout);
    ot_status st = ot_execute_on_host(exe, arena, params, outs, &o, 0, &r);
    ot_aligned_free(arena);
    *fast = r.fast_kernels_run;
    if (st != OT_OK) fprintf(stderr, "run: %s\n", ot_last_error());
    return st == OT_OK;
}

static void test_half_dot(void) {
    if (!own_gemm_cpu()) OT_SKIP("the CPU has no AVX-512: 16-bit dots run in the reference");
    const ot_dtype B = OT_BF16, H = OT_F16, F = OT_F32;
    const hcase cs[] = {
        {B, B, F, 1, 100, 70, 600, 0, 1},  /* k blocks 256, 256, 88; M, N tails */
        {B, B, F, 1, 100, 70, 600, 1, 1},  /* both transposed */
        {B, B, B, 1, 37, 13, 300, 0, 1},   /* N <= 16, row-major lhs; bf16 result */
        {B, B, F, 1, 37, 13, 300, 1, 2},   /* N <= 16, lhs read in place */
        {B, B, F, 1, 300, 520, 700, 1, 2}, /* tiny and huge: products under- and overflow */
        {B, B, F, 1, 130, 300, 270, 0, 2},
        {B, B, B, 1, 61, 45, 129, 0, 2},
        {B, B, F, 1, 60, 50, 40, 0, 3}, /* gradual underflow of the partial sums */
        {B, B, F, 1, 40, 40, 33, 0, 5}, /* zeros of either sign, odd K */
        {B, B, F, 1, 40, 40, 33, 1, 5},
        {B, B, B, 2, 30, 20, 7, 0, 5},
        {B, B, F, 1, 64, 64, 2, 0, 6},
        {B, B, F, 1, 40, 48, 6, 1, 6},
        {B, B, F, 2, 70, 40, 300, 1, 3},
        {H, H, F, 1, 100, 70, 600, 0, 1},
        {H, H, H, 1, 77, 90, 333, 1, 1}, /* f16 result: subnormal and overflowing results */
        {H, H, H, 1, 50, 40, 1000, 0, 2},
        {B, H, F, 1, 64, 48, 300, 0, 1}, /* mixed operands */
        {H, B, B, 1, 64, 48, 300, 1, 2},
        {B, B, F, 40, 30, 20, 50, 0, 1},    /* each thread packs its elements' B */
        {B, B, F, 5, 64, 48, 300, 1, 1},    /* own B on 1 and 2 threads, shared on 3 and 8 */
        {B, B, B, 3, 45, 33, 70, 2, 1},     /* lhs copied into [b, m, k] first */
        {H, H, F, 4, 29, 35, 4 * 31, 3, 1}, /* contracting dims copied into order */
        {B, B, F, 1, 12, 8, 1, 0, 1},       /* K = 1 */
        {B, B, F, 1, 11, 8, 5, 0, 1},       /* fewer rows or columns than a register block */
        {B, B, F, 1, 1, 300, 270, 0, 1},    /* vector x matrix */
        {B, B, B, 1, 1, 40, 70, 1, 1},
        {H, H, F, 1, 300, 1, 270, 0, 1}, /* matrix x vector */
        {B, B, F, 1, 300, 1, 270, 1, 2},
        {B, B, F, 6, 1, 1, 33, 0, 1}, /* batched inner products */
        {B, B, F, 2, 5, 3, 1000, 1, 1},
    };
    for (size_t q = 0; q < sizeof cs / sizeof cs[0]; q++) {
        const hcase *h = &cs[q];
        ot_shape ls, rs;
        ot_module *m = half_module(h, &ls, &rs);
        ASSERT_TRUE(m);
        ot_executable *exe = NULL;
        ASSERT_TRUE(ot_compile(m, NULL, &exe) == OT_OK);
        size_t na = (size_t)ot_shape_numel_unchecked(&ls),
               nb = (size_t)ot_shape_numel_unchecked(&rs);
        size_t nout = (size_t)(h->b * h->m * h->n) * ot_dtype_size(h->ot);
        uint16_t *a = malloc(na * 2), *b = malloc(nb * 2);
        void *want = malloc(nout), *got = malloc(nout);
        ASSERT_TRUE(a && b && want && got);
        for (size_t e = 0; e < na; e++) a[e] = half_bits(h->lt, h->values);
        for (size_t e = 0; e < nb; e++) b[e] = half_bits(h->rt, h->values);
        int fast = 0;
        ASSERT_TRUE(half_run(exe, a, b, want, nout, true, g_pools[0], &fast));
        for (int p = 0; p < 4; p++) {
            ASSERT_TRUE(half_run(exe, a, b, got, nout, false, g_pools[p], &fast));
            bool same = !memcmp(got, want, nout), gemm = fast == 1;
            if (!same || !gemm) {
                fprintf(stderr, "16-bit case %zu on %d threads: %d fast kernels, %s\n", q,
                        g_nthreads[p], fast, same ? "equal" : "bits differ");
                for (size_t e = 0, shown = 0; e < nout && shown < 4; e += 2)
                    if (memcmp((char *)got + e, (char *)want + e, 2)) {
                        fprintf(stderr, "  byte %zu\n", e);
                        shown++;
                    }
            }
            EXPECT_TRUE(same);
            EXPECT_TRUE(gemm);
        }
        free(a);
        free(b);
        free(want);
        free(got);
        ot_executable_free(exe);
        ot_module_free(m);
    }
}

/* ---- f64 ------------------------------------------------------------------------------------
 * An f64 dot of at least 12 rows and 9 columns: the fast dot (the own GEMM on 8 lanes, one fma
 * chain per element) equals the reference kernel (fma in k order) bit for bit, on 1, 2, 3 and 8
 * threads, over shapes with tails of every blocking, every edge register block, transposed and
 * copied operands, batches with own and shared packed B, and values with NaN, infinities, signed
 * zeros,
 * subnormal operands (read as zero under FTZ), products that overflow or underflow, and partial
 * sums in and out of the subnormal range (kept, as in the reference). */
static double f64_val(int values) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t r = g_rng;
    if (values == 1 && (r >> 32) % 23 == 0) {
        static const uint64_t sp[] = {0x7ff8000000000000ull, 0xfff8000000000123ull,
                                      0x7ff0000000000001ull, 0x7ff0000000000000ull,
                                      0xfff0000000000000ull, 0x0000000000000000ull,
                                      0x8000000000000000ull, 0x0000000000000001ull,
                                      0x800fffffffffffffull, 0x7fefffffffffffffull};
        double v;
        memcpy(&v, &sp[(r >> 40) % 10], 8);
        return v;
    }
    double v = (double)(r >> 11) / 4503599627370496.0 - 1.0;     /* [-1, 1), 52 random bits */
    if (values == 2) v = ldexp(v, (int)((r >> 8) % 1201) - 600); /* products under- and overflow */
    if (values == 3) v = ldexp(v, -515 - (int)((r >> 8) % 7));   /* partial sums subnormal */
    return v;
}

/* Runs each case through the reference kernel and the fast dot on 1, 2, 3 and 8 threads (es-byte
 * elements drawn by val) and checks the fast results equal the reference's bit for bit, the dot
 * one fast kernel run (the own GEMM; its_own false: any fast kernel or none, for the shapes
 * OpenBLAS computes). */
static void check_exact(const char *what, const hcase *cs, size_t ncs, size_t es,
                        void (*val)(void *, int)) {
    for (size_t q = 0; q < ncs; q++) {
        const hcase *h = &cs[q];
        ot_shape ls, rs;
        ot_module *m = half_module(h, &ls, &rs);
        ASSERT_TRUE(m);
        ot_executable *exe = NULL;
        ASSERT_TRUE(ot_compile(m, NULL, &exe) == OT_OK);
        size_t na = (size_t)ot_shape_numel_unchecked(&ls),
               nb = (size_t)ot_shape_numel_unchecked(&rs), nout = (size_t)(h->b * h->m * h->n) * es;
        char *a = malloc(na * es), *b = malloc(nb * es);
        void *want = malloc(nout), *got = malloc(nout);
        ASSERT_TRUE(a && b && want && got);
        for (size_t e = 0; e < na; e++) val(a + e * es, h->values);
        for (size_t e = 0; e < nb; e++) val(b + e * es, h->values);
        int fast = 0;
        ASSERT_TRUE(half_run(exe, a, b, want, nout, true, g_pools[0], &fast));
        for (int p = 0; p < 4; p++) {
            ASSERT_TRUE(half_run(exe, a, b, got, nout, false, g_pools[p], &fast));
            bool same = !memcmp(got, want, nout), gemm = fast == 1;
            if (!same || !gemm) {
                fprintf(stderr, "%s case %zu on %d threads: %d fast kernels, %s\n", what, q,
                        g_nthreads[p], fast, same ? "equal" : "bits differ");
                for (size_t e = 0, shown = 0; e < nout / es && shown < 4; e++) {
                    char *x = (char *)got + e * es, *y = (char *)want + e * es;
                    if (!memcmp(x, y, es)) continue;
                    if (es == 8)
                        fprintf(stderr, "  element %zu: %a, the reference %a\n", e,
                                *(double *)(void *)x, *(double *)(void *)y);
                    else
                        fprintf(stderr, "  element %zu: %a, the reference %a\n", e,
                                (double)*(float *)(void *)x, (double)*(float *)(void *)y);
                    shown++;
                }
            }
            EXPECT_TRUE(same);
            EXPECT_TRUE(gemm);
        }
        free(a);
        free(b);
        free(want);
        free(got);
        ot_executable_free(exe);
        ot_module_free(m);
    }
}

static void f64_put(void *p, int values) {
    double v = f64_val(values);
    memcpy(p, &v, 8);
}

/* Which kernels run bf16 x bf16 pairs under FTZ (both give the reference's bits, test_half_dot):
 * OPTITPU_DPBF16=0 the pairs widened (the f32 kernel), =1 vdpbf16ps where the CPU has AVX512_BF16,
 * unset the kind that ran a timed register block faster on this CPU. */
static void test_half_dot_kind(void) {
    if (!own_gemm_cpu()) OT_SKIP("the CPU has no AVX-512: 16-bit dots run in the reference");
    uint64_t td = 0, tf = 0;
    bool dp = ex_dot_bf16_dp(&td, &tf);
    const char *e = getenv("OPTITPU_DPBF16");
    bool cpu = __builtin_cpu_supports("avx512bf16");
    if (e && !strcmp(e, "0")) {
        EXPECT_TRUE(!dp);
    } else if (e && !strcmp(e, "1")) {
        EXPECT_TRUE(dp == cpu);
    } else if (!cpu) {
        EXPECT_TRUE(!dp);
    } else {
        fprintf(stderr, "bf16 pairs, one register block: vdpbf16ps %llu ns, widened %llu ns\n",
                (unsigned long long)td, (unsigned long long)tf);
        EXPECT_TRUE(td > 0 && tf > 0);
        EXPECT_TRUE(dp == (td < tf));
    }
}

static void test_f64_dot(void) {
    if (!own_gemm_cpu()) OT_SKIP("the CPU has no AVX-512: f64 dots run through OpenBLAS");
    const ot_dtype D = OT_F64;
    const hcase cs[] = {
        {D, D, D, 1, 100, 70, 600, 0, 1}, /* k blocks 256, 256, 88; M, N tails */
        {D, D, D, 1, 100, 70, 600, 1, 1}, /* both transposed */
        {D, D, D, 1, 37, 13, 300, 1, 2},  /* 12 x 16 with 5 columns masked */
        {D, D, D, 1, 300, 520, 700, 1, 2},
        {D, D, D, 1, 130, 300, 270, 0, 2},
        {D, D, D, 1, 61, 45, 129, 0, 2},
        {D, D, D, 1, 60, 50, 40, 0, 3}, /* gradual underflow of the partial sums */
        {D, D, D, 2, 70, 40, 300, 1, 3},
        {D, D, D, 1, 1000, 77, 333, 0, 0}, /* xla_compare's f64 dense */
        {D, D, D, 1, 333, 77, 1000, 1, 0},
        {D, D, D, 40, 30, 20, 50, 0, 1},    /* each thread packs its elements' B */
        {D, D, D, 5, 64, 48, 300, 1, 1},    /* own B on 1 and 2 threads, shared on 3 and 8 */
        {D, D, D, 3, 45, 33, 70, 2, 1},     /* lhs copied into [b, m, k] first */
        {D, D, D, 4, 29, 35, 4 * 31, 3, 1}, /* contracting dims copied into order */
        {D, D, D, 1, 12, 9, 1, 0, 1},       /* K = 1 */
        {D, D, D, 1, 29, 17, 50, 0, 1},     /* rows left 5 (8 x 16), columns 1 past a panel */
        {D, D, D, 1, 28, 9, 20, 1, 0},      /* 12 + 12 + 4 rows, 1 column masked in */
        {D, D, D, 1, 14, 300, 3, 0, 1},     /* 12 + 2 rows (4 x 16), 19 panels */
        {D, D, D, 1, 200, 700, 320, 0, 2},  /* K 320: one k block */
        {D, D, D, 1, 60, 500, 321, 1, 1},   /* 256 + 65 */
    };
    check_exact("f64", cs, sizeof cs / sizeof cs[0], 8, f64_put);
}

/* ---- f32 ------------------------------------------------------------------------------------
 * An f32 dot: the fast dot (the own GEMM, one fma chain per element, run without FTZ/DAZ, the
 * operands flushed as packed and the sums afterwards) equals the reference kernel (fmaf in k
 * order) bit for bit, on 1, 2, 3 and 8 threads, over shapes with tails of every blocking, every
 * edge register block, N <= 16 with a transposed lhs (read in place, or packed when it holds a
 * subnormal under FTZ), the narrowest products it takes (12 rows, 8 columns), K = 1 and K of
 * several blocks, transposed and copied operands, batches with own and shared packed B, and
 * values with NaN (payloads), infinities, signed zeros, subnormal operands, products that
 * overflow or underflow, partial sums in the subnormal range, and subnormal operands whose
 * products (with 2^60) would show in the sums. Narrower products (OpenBLAS)
 * are test_fast_kernels' (within a bound). */
static void f32_put(void *p, int values) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t r = g_rng;
    float v;
    if (values == 1 && (r >> 32) % 23 == 0) {
        static const uint32_t sp[] = {0x7fc00000u, 0xffc00123u, 0x7f800001u, 0x7f800000u,
                                      0xff800000u, 0x00000000u, 0x80000000u, 0x00000001u,
                                      0x807fffffu, 0x7f7fffffu};
        memcpy(&v, &sp[(r >> 40) % 10], 4);
    } else {
        v = (float)((double)(r >> 40) / 8388608.0 - 1.0);           /* [-1, 1), 24 random bits */
        if (values == 2) v = ldexpf(v, (int)((r >> 8) % 141) - 70); /* products under/overflow */
        if (values == 3) v = ldexpf(v, -64 - (int)((r >> 8) % 7));  /* partial sums subnormal */
        if (values == 4) { /* zeros, subnormals and 2^60: subnormal x 2^60 shows in the sums */
            uint32_t u = (uint32_t)(r >> 40) & 0x807fffffu;
            if ((r >> 8) % 4 < 2)
                v = 0;
            else if ((r >> 8) % 4 == 2)
                memcpy(&v, &u, 4);
            else
                v = ldexpf(v, 60);
        }
    }
    memcpy(p, &v, 4);
}

static void test_f32_dot(void) {
    if (!own_gemm_cpu()) OT_SKIP("the CPU has no AVX-512: f32 dots run through OpenBLAS");
    const ot_dtype F = OT_F32;
    const hcase cs[] = {
        {F, F, F, 1, 100, 70, 600, 0, 1},  /* k blocks 256, 256, 88; M, N tails */
        {F, F, F, 1, 100, 70, 600, 1, 1},  /* both transposed */
        {F, F, F, 1, 37, 13, 300, 1, 2},   /* N <= 16, transposed lhs (read in place) */
        {F, F, F, 1, 300, 520, 700, 1, 2}, /* products under- and overflow */
        {F, F, F, 1, 130, 300, 270, 0, 2},
        {F, F, F, 1, 61, 45, 129, 0, 3}, /* gradual underflow of the partial sums */
        {F, F, F, 2, 70, 40, 300, 1, 3},
        {F, F, F, 1, 1024, 10, 512, 1, 1}, /* its dW: N = 10, transposed lhs */
        {F, F, F, 1, 130, 16, 70, 1, 1},   /* transposed lhs with a subnormal: packed */
        {F, F, F, 1, 130, 16, 3, 1, 4},    /* the same, subnormals that would show */
        {F, F, F, 1, 130, 40, 3, 0, 4},
        {F, F, F, 40, 30, 20, 50, 0, 1},    /* each thread packs its elements' B */
        {F, F, F, 5, 64, 48, 300, 1, 1},    /* own B on 1 and 2 threads, shared on 3 and 8 */
        {F, F, F, 3, 45, 33, 70, 2, 1},     /* lhs copied into [b, m, k] first */
        {F, F, F, 4, 29, 35, 4 * 31, 3, 1}, /* contracting dims copied into order */
        {F, F, F, 1, 12, 17, 1, 0,
         1}, /* K = 1 (N > 16: the own GEMM; N <= 16 with K = 1 is OpenBLAS) */
        {F, F, F, 1, 300, 200, 1, 1, 1},
        {F, F, F, 1, 29, 17, 50, 0, 1},    /* rows left 5, columns 1 past a panel */
        {F, F, F, 1, 200, 700, 320, 0, 2}, /* K 320: one k block */
        {F, F, F, 1, 60, 500, 321, 1, 1},  /* 256 + 65 */
        {F, F, F, 1, 70, 40, 2000, 0, 0},  /* K of 8 blocks */
        {F, F, F, 1, 12, 8, 90, 1, 1},     /* the smallest: 12 x 8 (transposed lhs) */
        {F, F, F, 1, 13, 17, 90, 0, 3},    /* N = 17, row-major lhs: one panel and a column */
        {F, F, F, 1, 600, 16, 200, 1, 0},  /* N = 16 read in place, no subnormal */
        {F, F, F, 64, 12, 64, 64, 0, 1},   /* many small products */
        {F, F, F, 6, 14, 9, 33, 1, 3},
        /* one row (x @ B) or one column of a transposed A (A^T x): the vector x matrix kernel */
        {F, F, F, 1, 1, 300, 70, 0, 1},    /* a tail of 44 results */
        {F, F, F, 1, 1, 1000, 600, 0, 4},  /* subnormal operands */
        {F, F, F, 3, 1, 129, 300, 0, 3},   /* batched; gradual underflow */
        {F, F, F, 1, 300, 1, 333, 1, 1},   /* A^T x */
        {F, F, F, 4, 200, 1, 50, 1, 2},    /* batched A^T x, under- and overflow */
        {F, F, F, 1, 1, 77, 4 * 10, 3, 1}, /* rhs copied into [k, n] first */
        {F, F, F, 1, 1, 4100, 1100, 0, 1}, /* 18 MB of matrix: split over the pool */
    };
    check_exact("f32", cs, sizeof cs / sizeof cs[0], 4, f32_put);
}

/* ---- 8-bit integers ---------------------------------------------------------------------------
 * An s8 / u8 dot into s32 or s64 (a quantized product: jnp.dot(..., preferred_element_type=
 * jnp.int32)): the fast dot (the own f32 GEMM on the widened operands, exact while K times the
 * largest product stays within 2^24) equals the reference kernel (64-bit integer sums) on 1, 2,
 * 3 and 8 threads, with the extreme values (-128, 127, 255) making the sums as large as the bound
 * allows at K = the bound (1024 for s8 x s8, 514 mixed, 258 for u8 x u8); one K past the bound
 * runs the integer kernel (id_dot) instead. s8 x s8 runs the VNNI kernel on a CPU with AVX512_VNNI.
 * Where the process runs AMX (ex_amx_int8; test_fast_gemm_no_amx runs these with OPTITPU_AMX=0)
 * every form runs on tiles instead, up to K times the largest product below 2^31 (K = 131071 s8 x
 * s8, 33025 u8 x u8). */
static void i8_put(void *p, ot_dtype t, int values) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t r = g_rng >> 33;
    int v = (int)(r % 256) - (t == OT_S8 ? 128 : 0);
    if (values == 1) /* the extremes, mostly */
        v = t == OT_S8 ? (r % 4 == 0 ? 127 : -128) : (r % 4 == 0 ? (int)(r % 256) : 255);
    if (t == OT_S8)
        *(int8_t *)p = (int8_t)v;
    else
        *(uint8_t *)p = (uint8_t)v;
}

static void test_int8_dot(void) {
    if (!own_gemm_cpu()) OT_SKIP("the CPU has no AVX-512: integer dots run in the reference");
    const ot_dtype S = OT_S8, U = OT_U8, I = OT_S32, L = OT_S64;
    const struct {
        hcase h;
        bool fast; /* within the f32 GEMM's bound (else AMX or the integer kernel, id_dot) */
    } cs[] = {
        {{S, S, I, 1, 100, 70, 600, 0, 0}, true}, /* k blocks, M and N tails */
        {{S, S, I, 1, 100, 70, 600, 1, 0}, true}, /* both transposed */
        {{S, S, I, 1, 37, 13, 1024, 0, 1}, true}, /* K at the bound, sums up to 2^24 */
        {{S, S, I, 1, 37, 13, 1025, 0, 1}, false},
        {{U, U, I, 1, 50, 40, 258, 1, 1}, true},
        {{U, U, I, 1, 50, 40, 259, 1, 1}, false},
        {{S, U, L, 1, 61, 45, 514, 0, 1}, true}, /* mixed, s64 result */
        {{U, S, I, 3, 45, 33, 70, 2, 0}, true},  /* lhs copied into [b, m, k] first */
        {{S, S, I, 40, 30, 20, 50, 0, 0}, true}, /* each thread packs its elements' B */
        {{S, S, I, 4, 29, 35, 4 * 31, 3, 1}, true},
        {{S, S, I, 1, 12, 9, 1, 0, 0}, true},
        {{S, S, L, 1, 300, 200, 257, 1, 1}, true},
        /* s8 x s8 by VNNI where the CPU has it: rows past a block of 12, K not a multiple of
         * 4, s64; a product split over the pool; lhs copied */
        {{S, S, L, 1, 13, 33, 3, 0, 1}, true},
        {{S, S, I, 1, 200, 300, 512, 0, 1}, true},
        {{S, S, I, 2, 25, 64, 130, 2, 0}, true},
        /* AMX where the process has it (else the K past the f32 bound stay with the reference):
         * every instruction form, M, N and K off the tiles (16, 16, 64), tiny, transposed,
         * batched, K long enough for groups of columns, sums up to 2^31 - 2^14 */
        {{S, S, I, 1, 1, 1, 1, 0, 0}, true},
        {{S, U, I, 1, 17, 31, 65, 1, 1}, true},
        {{U, S, L, 1, 33, 47, 127, 0, 1}, true},
        {{U, U, I, 1, 48, 16, 64, 1, 0}, true},
        {{S, S, I, 5, 19, 21, 3000, 0, 1}, false},
        {{S, S, L, 1, 40, 300, 4100, 1, 0}, false},
        {{S, S, I, 1, 3, 2, 131071, 0, 1}, false},
        {{U, U, I, 2, 9, 35, 33025, 2, 1}, false},
        {{S, U, I, 3, 34, 50, 3 * 700, 3, 0}, false},
    };
    for (size_t q = 0; q < sizeof cs / sizeof cs[0]; q++) {
        const hcase *h = &cs[q].h;
        ot_shape ls, rs;
        ot_module *m = half_module(h, &ls, &rs);
        ASSERT_TRUE(m);
        ot_executable *exe = NULL;
        ASSERT_TRUE(ot_compile(m, NULL, &exe) == OT_OK);
        size_t na = (size_t)ot_shape_numel_unchecked(&ls),
               nb = (size_t)ot_shape_numel_unchecked(&rs), oes = ot_dtype_size(h->ot),
               nout = (size_t)(h->b * h->m * h->n) * oes;
        char *a = malloc(na), *b = malloc(nb);
        void *want = malloc(nout), *got = malloc(nout);
        ASSERT_TRUE(a && b && want && got);
        for (size_t e = 0; e < na; e++) i8_put(a + e, h->lt, h->values);
        for (size_t e = 0; e < nb; e++) i8_put(b + e, h->rt, h->values);
        int fast = 0;
        /* every form runs a fast kernel: K past the bounds the integer one (test_int_dot) */
        bool want_fast = true;
        ASSERT_TRUE(half_run(exe, a, b, want, nout, true, g_pools[0], &fast));
        for (int p = 0; p < 4; p++) {
            ASSERT_TRUE(half_run(exe, a, b, got, nout, false, g_pools[p], &fast));
            bool same = !memcmp(got, want, nout);
            if (!same || (fast == 1) != want_fast)
                fprintf(stderr, "int8 case %zu on %d threads: %d fast kernels, %s\n", q,
                        g_nthreads[p], fast, same ? "equal" : "differ");
            EXPECT_TRUE(same);
            EXPECT_TRUE((fast == 1) == want_fast);
        }
        free(a);
        free(b);
        free(want);
        free(got);
        ot_executable_free(exe);
        ot_module_free(m);
    }
}

/* ---- integers of every width -----------------------------------------------------------------
 * Dots of s8 ... u64 operands into integer results (a confusion matrix of one-hot s32 rows,
 * class counts, index arithmetic) run the integer kernel (id_dot: 32-bit wrapping sums for
 * results of up to 32 bits, 64-bit otherwise): the reference kernel's bits (64-bit sums,
 * truncated) on 1, 2, 3 and 8 threads, for operands read in place and copied (every layout),
 * widened, with sums that wrap, K cut into chunks, at most 16 columns (the AVX-512 kernel) and
 * more than one block of columns. */
static void int_put(void *p, ot_dtype t, int values) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t r = g_rng >> 11;
    int64_t v = (int64_t)(r % 11) - 5;
    if (values == 1 && r % 7 == 0) v = (int64_t)(g_rng ^ (g_rng << 29)); /* any bits: wraps */
    if (values == 2) v = r % 10 == 3;                                    /* one-hot-like */
    memcpy(p, &v, ot_dtype_size(t)); /* little-endian: the low bytes */
}

static void test_int_dot(void) {
    const ot_dtype S32 = OT_S32, U32 = OT_U32, S64 = OT_S64, U64 = OT_U64, S16 = OT_S16, U8 = OT_U8,
                   S8 = OT_S8;
    const hcase cs[] = {
        {S32, S32, S32, 1, 10, 10, 20000, 1, 2},  /* a confusion matrix: A in place, K cut */
        {S32, S32, S32, 1, 10, 10, 20000, 1, 1},  /* the same with wrapping sums */
        {S32, S32, S32, 1, 37, 300, 50, 0, 1},    /* B in place, two blocks of columns */
        {U32, U32, U32, 3, 21, 17, 90, 2, 1},     /* batched, A copied */
        {S16, S16, S32, 2, 19, 13, 2 * 40, 3, 1}, /* widened from 16 bits, both copied */
        {S32, S32, S64, 1, 9, 33, 70, 0, 1},      /* s32 sign-extended into 64-bit sums */
        {U32, U32, U64, 1, 9, 12, 70, 1, 1},      /* u32 zero-extended */
        {S64, S64, S64, 2, 20, 20, 3000, 1, 1},   /* 64-bit sums, K cut */
        {U64, U64, U64, 1, 5, 7, 33, 0, 1},
        {U8, S8, S16, 1, 40, 24, 2000, 1, 1}, /* a narrow result: the low bits */
        {S32, S32, S8, 1, 17, 5, 300, 0, 1},
        {S32, S32, S32, 1, 1, 1, 1, 0, 1},
        {S32, S32, S32, 1, 3, 4, 0, 0, 1},     /* K = 0: zeros */
        {S32, S32, S32, 64, 16, 16, 16, 1, 1}, /* many batch elements */
    };
    for (size_t q = 0; q < sizeof cs / sizeof cs[0]; q++) {
        const hcase *h = &cs[q];
        ot_shape ls, rs;
        ot_module *m = half_module(h, &ls, &rs);
        ASSERT_TRUE(m);
        ot_executable *exe = NULL;
        ASSERT_TRUE(ot_compile(m, NULL, &exe) == OT_OK);
        size_t na = (size_t)ot_shape_numel_unchecked(&ls),
               nb = (size_t)ot_shape_numel_unchecked(&rs), oes = ot_dtype_size(h->ot),
               les = ot_dtype_size(h->lt), res = ot_dtype_size(h->rt),
               nout = (size_t)(h->b * h->m * h->n) * oes;
        char *a = malloc(na * les + 1), *b = malloc(nb * res + 1);
        void *want = malloc(nout), *got = malloc(nout);
        ASSERT_TRUE(a && b && want && got);
        for (size_t e = 0; e < na; e++) int_put(a + e * les, h->lt, h->values);
        for (size_t e = 0; e < nb; e++) int_put(b + e * res, h->rt, h->values);
        int fast = 0;
        ASSERT_TRUE(half_run(exe, a, b, want, nout, true, g_pools[0], &fast));
        for (int p = 0; p < 4; p++) {
            ASSERT_TRUE(half_run(exe, a, b, got, nout, false, g_pools[p], &fast));
            bool same = !memcmp(got, want, nout);
            if (!same || fast != 1)
                fprintf(stderr, "int case %zu on %d threads: %d fast kernels, %s\n", q,
                        g_nthreads[p], fast, same ? "equal" : "differ");
            EXPECT_TRUE(same);
            EXPECT_INT_EQ(fast, 1);
        }
        free(a);
        free(b);
        free(want);
        free(got);
        ot_executable_free(exe);
        ot_module_free(m);
    }
}

static void test_setup(void) {
    for (int k = 0; k < 4; k++)
        EXPECT_TRUE(ot_threadpool_create(g_nthreads[k], &g_pools[k]) == OT_OK);
}

static void test_teardown(void) {
    for (int k = 0; k < 4; k++) {
        ot_threadpool_free(g_pools[k]);
        g_pools[k] = NULL;
    }
    EXPECT_TRUE(true);
}

OT_TEST_MAIN(OT_TEST(test_setup), OT_TEST(test_fma_chain), OT_TEST(test_gemv_rows),
             OT_TEST(test_output_fusion), OT_TEST(test_half_dot), OT_TEST(test_half_dot_kind),
             OT_TEST(test_f64_dot), OT_TEST(test_f32_dot), OT_TEST(test_int8_dot),
             OT_TEST(test_int_dot), OT_TEST(test_teardown))
