/* Every dot shape of the program suite through compile -> execute, beside OpenBLAS's
 * cblas_sgemm on the equivalent GEMM, in the same run. The cases are the dots of
 * scripts/xla_compare.py's MLP 784-1024-1024-10 batch 512 (forward, input and weight gradients:
 * transposed operands, N = 10 and K = 10), its transformer block (batch 8 x seq 128 tokens, d 256,
 * MLP 1024, 4 heads of 64) and its attention b4 h8 s256 d64 (batched QK^T with the rhs
 * transposed, PV, and the gradient's lhs-transposed products), plus square 1024^3, a batched
 * 32 x 256^3, and small products with sizes off the kernels' blocking: the two dots of an RNN
 * step (scripts/xla_compare.py's extra group: batch 32, 129 -> 257) and the dots of its MLP
 * 1000-333-77 batch 129 (forward, input and weight gradients). Each case is f32 [batch..., M, K]
 * (or [batch..., K, M]: lhs transposed) times [batch..., K, N] (or [batch..., N, K]: rhs
 * transposed), batch dims leading, as the suite's HLO has them; one more case has attention's
 * operands in [batch, seq, heads, dim] (batch dims 0 and 2, as flax's einsums give them), the
 * baseline reading them with leading dimension heads x dim. ours: the module compiled (-O2) and run
 * by ot_execute_on_host; its dot kernel splits the work over the default pool (OPTITPU_THREADS,
 * else the CPU count), OpenBLAS single-threaded inside. Baselines, on the same number of threads T
 * and the same operands, each a cblas_sgemm with the same transposition flags (no copies):
 *   - OpenBLAS's own threading: cblas_sgemm with OpenBLAS set to T threads (batched cases: the
 *     calls back to back, OpenBLAS's workers left to spin between them as they do by default;
 *     this OpenBLAS has no cblas_sgemm_batch);
 *   - batched cases also: the calls split over a pool of T threads with OpenBLAS
 *     single-threaded in each.
 * Built with oneDNN (OT_HAVE_DNNL), one more row per case: oneDNN's dnnl_sgemm on the same
 * operands and T OpenMP threads (the calls in a row) against the OpenBLAS baseline, its label
 * saying whether its bits at 1, 2, 3 and 8 OpenMP threads are the same (the dot's must be).
 * Nothing is made to sleep inside a timed section. Before each timed section the program waits
 * (untimed) until the process is idle (under 0.1 CPU over a 5 ms window, at most 1 s): after a
 * threaded call OpenBLAS's workers spin for about 2^28 cycles (its default thread timeout) and
 * our pool's workers briefly, and either would otherwise take CPUs from the next side timed.
 * The OpenBLAS thread count is set before the section that needs it, outside the timing. One
 * repetition runs the product `inner` times (fixed per case from the warm-up so that a
 * repetition of ours takes at least --rep-ms, default 5 ms). A repetition's first product starts
 * with every side's workers asleep (the process idle before it), which on a VM can cost a
 * product most of its second thread; a longer --rep-ms (50) measures products back to back, as
 * a program's kernels run. GFLOP/s medians of --reps (default 5) after the
 * warm-up, the sides interleaved rep by rep; ratio = ours / baseline. Every label names its
 * thread counts. The results are checked against OpenBLAS's (normwise 1e-5; f64 1e-13).
 * Cases named "bf16" have bf16 operands and an f32 result (preferred_element_type f32), the
 * baselines computing the same product on the operands' f32 values (cblas_sgemm, exact widening;
 * the widening outside the timing); cases named "int8" have s8 operands and an s32 result
 * (preferred_element_type int32), against cblas_sgemm on the operands' values (exact: every sum
 * of these cases stays below 2^24); cases named "f64" are f64 throughout against cblas_dgemm.
 * --cpu-time times each side by the process's CPU time instead of the wall clock: with one thread
 * per side (OPTITPU_THREADS=1) that is each side's own computing time, which other processes on a
 * loaded machine do not inflate the way they inflate the wall clock (the labels say so).
 *   bench_dot [--json] [--reps N] [--rep-ms MS] [--only TEXT] [--cpu-time]
 *   (--only: the cases whose name contains TEXT) */
#include "optitpu/bench.h"
#include "optitpu/compiler.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"

#include <cblas.h>
#include <math.h>
#if OT_HAVE_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif
#undef I
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct dcase {
    const char *name;
    int nbd;         /* batch dims (0, 1 or 2), sizes b0, b1 */
    int64_t b0, b1;  /* batch sizes (1 when absent) */
    int64_t m, n, k; /* per batch element */
    bool lhs_t;      /* lhs stored [batch..., k, m] */
    bool rhs_t;      /* rhs stored [batch..., n, k] */
    bool bshd;       /* 2 batch dims, the second between the matrix dims: lhs [b0, m, b1, k],
                      * rhs [b0, n, b1, k] (attention's [batch, seq, heads, dim]; rhs_t) */
    int prec;        /* 0: f32; PREC_BF16: bf16 operands, f32 result; PREC_F64: f64;
                        PREC_S8: s8 operands, s32 result */
} dcase;

enum { PREC_BF16 = 1, PREC_F64 = 2, PREC_S8 = 3 };

static const dcase g_cases[] = {
    {"mlp fwd 512x1024x784", 0, 1, 1, 512, 1024, 784, false, false, false, 0},
    {"mlp fwd 512x1024x1024", 0, 1, 1, 512, 1024, 1024, false, false, false, 0},
    {"mlp fwd 512x10x1024 (N=10)", 0, 1, 1, 512, 10, 1024, false, false, false, 0},
    {"mlp dx 512x1024x10 rhs^T (K=10)", 0, 1, 1, 512, 1024, 10, false, true, false, 0},
    {"mlp dx 512x1024x1024 rhs^T", 0, 1, 1, 512, 1024, 1024, false, true, false, 0},
    {"mlp dW 784x1024x512 lhs^T", 0, 1, 1, 784, 1024, 512, true, false, false, 0},
    {"mlp dW 1024x1024x512 lhs^T", 0, 1, 1, 1024, 1024, 512, true, false, false, 0},
    {"mlp dW 1024x10x512 lhs^T (N=10)", 0, 1, 1, 1024, 10, 512, true, false, false, 0},
    {"tblock qkv 1024x768x256", 0, 1, 1, 1024, 768, 256, false, false, false, 0},
    {"tblock ffn1 1024x1024x256", 0, 1, 1, 1024, 1024, 256, false, false, false, 0},
    {"tblock ffn2 1024x256x1024", 0, 1, 1, 1024, 256, 1024, false, false, false, 0},
    {"tblock dx 1024x256x1024 rhs^T", 0, 1, 1, 1024, 256, 1024, false, true, false, 0},
    {"tblock dW 256x1024x1024 lhs^T", 0, 1, 1, 256, 1024, 1024, true, false, false, 0},
    {"tblock QK^T 8x4 x 128x128x64 rhs^T", 2, 8, 4, 128, 128, 64, false, true, false, 0},
    {"attention QK^T 4x8 x 256x256x64 rhs^T", 2, 4, 8, 256, 256, 64, false, true, false, 0},
    {"attention PV 4x8 x 256x64x256", 2, 4, 8, 256, 64, 256, false, false, false, 0},
    {"attention dV 4x8 x 256x64x256 lhs^T", 2, 4, 8, 256, 64, 256, true, false, false, 0},
    {"attention BSHD QK^T 4x8 x 256x256x64 rhs^T", 2, 4, 8, 256, 256, 64, false, true, true, 0},
    {"square 1024^3", 0, 1, 1, 1024, 1024, 1024, false, false, false, 0},
    {"square 1024^3 rhs^T", 0, 1, 1, 1024, 1024, 1024, false, true, false, 0},
    {"batched 32 x 256^3", 1, 32, 1, 256, 256, 256, false, false, false, 0},
    {"rnn step 32x257x129", 0, 1, 1, 32, 257, 129, false, false, false, 0},
    {"rnn step 32x257x257", 0, 1, 1, 32, 257, 257, false, false, false, 0},
    {"small mlp fwd 129x333x1000", 0, 1, 1, 129, 333, 1000, false, false, false, 0},
    {"small mlp fwd 129x77x333", 0, 1, 1, 129, 77, 333, false, false, false, 0},
    {"small mlp dx 129x333x77 rhs^T", 0, 1, 1, 129, 333, 77, false, true, false, 0},
    {"small mlp dW 333x1000x129 lhs^T", 0, 1, 1, 333, 1000, 129, true, false, false, 0},
    {"small mlp dW 77x333x129 lhs^T", 0, 1, 1, 77, 333, 129, true, false, false, 0},
    /* narrow products: few columns (a classifier's logits, a matrix x vector), few rows (a
     * batch of 1 or 8: a vector x matrix) */
    {"narrow 2048x16x512 (N=16)", 0, 1, 1, 2048, 16, 512, false, false, false, 0},
    {"narrow 1024x4x1024 (N=4)", 0, 1, 1, 1024, 4, 1024, false, false, false, 0},
    {"narrow matvec 2048x1x1024", 0, 1, 1, 2048, 1, 1024, false, false, false, 0},
    {"narrow 8x1024x1024 (M=8)", 0, 1, 1, 8, 1024, 1024, false, false, false, 0},
    {"narrow vecmat 1x2048x1024", 0, 1, 1, 1, 2048, 1024, false, false, false, 0},
    {"narrow vecmat 1x2048x1024 rhs^T", 0, 1, 1, 1, 2048, 1024, false, true, false, 0},
    {"narrow batched 64 x 4x64x64 (M=4)", 1, 64, 1, 4, 64, 64, false, false, false, 0},
    /* 16-bit operands: xla_compare's bf16 matmul + GELU and the MLP's shapes */
    {"bf16 matmul 1000x3072x768", 0, 1, 1, 1000, 3072, 768, false, false, false, PREC_BF16},
    {"bf16 mlp dx 512x1024x1024 rhs^T", 0, 1, 1, 512, 1024, 1024, false, true, false, PREC_BF16},
    {"bf16 mlp dW 1024x1024x512 lhs^T", 0, 1, 1, 1024, 1024, 512, true, false, false, PREC_BF16},
    {"bf16 attention QK^T 4x8 x 256x256x64 rhs^T", 2, 4, 8, 256, 256, 64, false, true, false,
     PREC_BF16},
    {"bf16 small 129x77x333", 0, 1, 1, 129, 77, 333, false, false, false, PREC_BF16},
    /* 8-bit integers: xla_compare's quantized matmul, a quantized MLP layer */
    {"int8 square 1024^3", 0, 1, 1, 1024, 1024, 1024, false, false, false, PREC_S8},
    {"int8 mlp fwd 512x1024x784", 0, 1, 1, 512, 1024, 784, false, false, false, PREC_S8},
    {"int8 mlp dx 512x1024x1024 rhs^T", 0, 1, 1, 512, 1024, 1024, false, true, false, PREC_S8},
    /* f64: xla_compare's layer norm + dense (1000 x 333 -> 77) and its gradients' shapes */
    {"f64 dense 1000x77x333", 0, 1, 1, 1000, 77, 333, false, false, false, PREC_F64},
    {"f64 dense dx 1000x333x77 rhs^T", 0, 1, 1, 1000, 333, 77, false, true, false, PREC_F64},
    {"f64 dense dW 333x77x1000 lhs^T", 0, 1, 1, 333, 77, 1000, true, false, false, PREC_F64},
    {"f64 square 512^3", 0, 1, 1, 512, 512, 512, false, false, false, PREC_F64},
    {"f64 batched 16 x 128x128x128", 1, 16, 1, 128, 128, 128, false, false, false, PREC_F64},
};

static size_t op_size(const dcase *d) { /* bytes per operand element as the dot takes it */
    return d->prec == PREC_F64 ? 8 : d->prec == PREC_BF16 ? 2 : d->prec == PREC_S8 ? 1 : 4;
}

static size_t out_size(const dcase *d) {
    return d->prec == PREC_F64 ? 8 : 4;
}

static int64_t nbatch(const dcase *d) {
    return d->b0 * d->b1;
}

static ot_module *build(const dcase *d) {
    ot_module *m = ot_module_new("dot");
    ot_computation *c = ot_module_add_computation(m, "main");
    int64_t ld[OT_MAX_RANK], rd[OT_MAX_RANK];
    int nb = d->nbd;
    int64_t bs[2] = {d->b0, d->b1};
    ot_dot_dims dn;
    memset(&dn, 0, sizeof dn);
    for (int k = 0; k < nb; k++) {
        ld[k] = rd[k] = bs[k];
        dn.lhs_batch[k] = dn.rhs_batch[k] = k;
    }
    dn.nbatch = nb;
    dn.ncontract = 1;
    if (d->bshd) { /* [b0, m, b1, k] x [b0, n, b1, k], batch dims 0 and 2, contracting 3 */
        int64_t l4[4] = {d->b0, d->m, d->b1, d->k}, r4[4] = {d->b0, d->n, d->b1, d->k};
        memcpy(ld, l4, sizeof l4);
        memcpy(rd, r4, sizeof r4);
        dn.lhs_batch[1] = dn.rhs_batch[1] = 2;
        dn.lhs_contract[0] = dn.rhs_contract[0] = 3;
        goto shapes;
    }
    ld[nb] = d->lhs_t ? d->k : d->m;
    ld[nb + 1] = d->lhs_t ? d->m : d->k;
    dn.lhs_contract[0] = d->lhs_t ? nb : nb + 1;
    rd[nb] = d->rhs_t ? d->n : d->k;
    rd[nb + 1] = d->rhs_t ? d->k : d->n;
    dn.rhs_contract[0] = d->rhs_t ? nb + 1 : nb;
shapes:;
    ot_shape ls, rs;
    ot_dtype dt = d->prec == PREC_F64    ? OT_F64
                  : d->prec == PREC_BF16 ? OT_BF16
                  : d->prec == PREC_S8   ? OT_S8
                                         : OT_F32;
    ot_shape_make(&ls, dt, nb + 2, ld);
    ot_shape_make(&rs, dt, nb + 2, rd);
    ot_instr *l = ot_build_parameter(c, 0, ls, "l"), *r = ot_build_parameter(c, 1, rs, "r");
    ot_attrs at;
    memset(&at, 0, sizeof at);
    at.dot = &dn;
    ot_ir_shape hint = {.kind = OT_IR_ARRAY}; /* the result dtype (preferred_element_type) */
    hint.array.rank = -1;
    hint.array.dtype = d->prec == PREC_F64 ? OT_F64 : d->prec == PREC_S8 ? OT_S32 : OT_F32;
    ot_instr *ops[2] = {l, r};
    ot_computation_set_root(c, ot_build(c, OT_OP_DOT, ops, 2, &at, NULL, 0, &hint, NULL));
    ot_module_set_entry(m, c);
    if (ot_module_finalize(m) != OT_OK) {
        ot_module_free(m);
        return NULL;
    }
    return m;
}

typedef struct gemm_job {
    const dcase *d;
    const float *a, *b; /* f32 cases and bf16 (the operands' values) */
    float *c;
    const double *ad, *bd; /* f64 cases */
    double *cd;
} gemm_job;

static void gemm_one(const gemm_job *j, int64_t q) {
    const dcase *d = j->d;
    if (d->prec == PREC_F64) { /* no f64 case has bshd */
        cblas_dgemm(CblasRowMajor, d->lhs_t ? CblasTrans : CblasNoTrans,
                    d->rhs_t ? CblasTrans : CblasNoTrans, (int)d->m, (int)d->n, (int)d->k, 1.0,
                    j->ad + q * d->m * d->k, d->lhs_t ? (int)d->m : (int)d->k,
                    j->bd + q * d->k * d->n, d->rhs_t ? (int)d->k : (int)d->n, 0.0,
                    j->cd + q * d->m * d->n, (int)d->n);
        return;
    }
    if (d->bshd) { /* batch element (q / b1, q % b1): rows b1 * k apart */
        int64_t i0 = q / d->b1, i1 = q % d->b1, ld = d->b1 * d->k;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)d->m, (int)d->n, (int)d->k, 1.0f,
                    j->a + i0 * d->m * ld + i1 * d->k, (int)ld, j->b + i0 * d->n * ld + i1 * d->k,
                    (int)ld, 0.0f, j->c + q * d->m * d->n, (int)d->n);
        return;
    }
    cblas_sgemm(CblasRowMajor, d->lhs_t ? CblasTrans : CblasNoTrans,
                d->rhs_t ? CblasTrans : CblasNoTrans, (int)d->m, (int)d->n, (int)d->k, 1.0f,
                j->a + q * d->m * d->k, d->lhs_t ? (int)d->m : (int)d->k, j->b + q * d->k * d->n,
                d->rhs_t ? (int)d->k : (int)d->n, 0.0f, j->c + q * d->m * d->n, (int)d->n);
}

#if OT_HAVE_DNNL
/* gemm_one through oneDNN's row-major dnnl_sgemm, into c */
static void dnnl_one(const gemm_job *j, int64_t q, float *c) {
    const dcase *d = j->d;
    if (d->bshd) {
        int64_t i0 = q / d->b1, i1 = q % d->b1, ld = d->b1 * d->k;
        dnnl_sgemm('N', 'T', d->m, d->n, d->k, 1.0f, j->a + i0 * d->m * ld + i1 * d->k, ld,
                   j->b + i0 * d->n * ld + i1 * d->k, ld, 0.0f, c + q * d->m * d->n, d->n);
        return;
    }
    dnnl_sgemm(d->lhs_t ? 'T' : 'N', d->rhs_t ? 'T' : 'N', d->m, d->n, d->k, 1.0f,
               j->a + q * d->m * d->k, d->lhs_t ? d->m : d->k, j->b + q * d->k * d->n,
               d->rhs_t ? d->k : d->n, 0.0f, c + q * d->m * d->n, d->n);
}

static void dnnl_all(const gemm_job *j, float *c) {
    for (int64_t q = 0; q < nbatch(j->d); q++) dnnl_one(j, q, c);
}
#endif

/* every batch element in turn, with whatever threads OpenBLAS is set to */
static void gemm_all(const gemm_job *j) {
    for (int64_t q = 0; q < nbatch(j->d); q++) gemm_one(j, q);
}

/* batch elements [b, e) on this pool thread (OpenBLAS single-threaded) */
static void gemm_range(void *ctx, int64_t b, int64_t e, int ith) {
    (void)ith;
    for (int64_t q = b; q < e; q++) gemm_one(ctx, q);
}

static bool g_cpu_time; /* --cpu-time */

/* what a timed section reads: the wall clock, or with --cpu-time the process's CPU time */
static uint64_t now_ns(void) {
    if (!g_cpu_time) return ot_now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One case: its rows printed; 0, or 1 on a failure (reported on stderr). */
static int run_case(const dcase *d, int reps, double rep_ms, bool json, ot_threadpool *pool,
                    int threads) {
    const char *ths = threads == 1 ? "" : "s";
    int64_t B = nbatch(d);
    ot_module *m = build(d);
    ot_executable *exe = NULL;
    if (!m || ot_compile(m, NULL, &exe) != OT_OK) {
        fprintf(stderr, "bench_dot: %s: %s\n", d->name, ot_last_error());
        ot_module_free(m);
        return 1;
    }
    size_t na = (size_t)(B * d->m * d->k), nb = (size_t)(B * d->k * d->n),
           nc = (size_t)(B * d->m * d->n);
    size_t es = op_size(d), os = out_size(d);
    void *a = ot_aligned_alloc(64, na * es), *b = ot_aligned_alloc(64, nb * es);
    void *c1 = ot_aligned_alloc(64, nc * os), *c2 = ot_aligned_alloc(64, nc * os);
    /* the baselines' f32 operands: a and b themselves, or bf16's or s8's values widened */
    bool widened = d->prec == PREC_BF16 || d->prec == PREC_S8;
    float *af = widened ? ot_aligned_alloc(64, na * 4) : a;
    float *bf = widened ? ot_aligned_alloc(64, nb * 4) : b;
    int64_t an = ot_executable_arena_size(exe);
    void *arena = an ? ot_aligned_alloc(64, (size_t)an) : NULL;
    uint64_t s = 12345;
    for (size_t e = 0; e < na + nb; e++) { /* uniform in [-0.5, 0.5) */
        s = s * 6364136223846793005ull + 1;
        double v = (double)(s >> 11) / 9007199254740992.0 - 0.5;
        void *o = e < na ? a : b;
        size_t i = e < na ? e : e - na;
        if (d->prec == PREC_F64) {
            ((double *)o)[i] = v;
        } else if (d->prec == PREC_BF16) {
            ((uint16_t *)o)[i] = ot_f32_to_bf16((float)v);
            (e < na ? af : bf)[i] = ot_bf16_to_f32(((uint16_t *)o)[i]);
        } else if (d->prec == PREC_S8) { /* [-128, 128) */
            ((int8_t *)o)[i] = (int8_t)floor(v * 256);
            (e < na ? af : bf)[i] = ((int8_t *)o)[i];
        } else {
            ((float *)o)[i] = (float)v;
        }
    }
    void *params[2] = {a, b}, *outs[1] = {c1};
    double flops = 2.0 * (double)B * (double)d->m * (double)d->n * (double)d->k;
    double *ours = calloc((size_t)reps, sizeof *ours), *base = calloc((size_t)reps, sizeof *base),
           *split = calloc((size_t)reps, sizeof *split), *dnn = calloc((size_t)reps, sizeof *dnn);
#if OT_HAVE_DNNL
    float *c3 = ot_aligned_alloc(64, nc * 4), *c4 = ot_aligned_alloc(64, nc * 4);
#endif
    gemm_job job = {d, af, bf, c2, a, b, c2};
    ot_run_result rr;
    memset(&rr, 0, sizeof rr);
    int rc = 0, inner = 1;
    for (int r = -1; r < reps && !rc; r++) {
        openblas_set_num_threads(1); /* what ours sets: set here, outside its timing */
        ot_bench_wait_idle();
        uint64_t t0 = now_ns();
        for (int q = 0; q < inner && !rc; q++)
            if (ot_execute_on_host(exe, arena, params, outs, NULL, 0, &rr) != OT_OK) {
                fprintf(stderr, "bench_dot: %s: %s\n", d->name, ot_last_error());
                rc = 1;
            }
        uint64_t t1 = now_ns();
        if (r < 0) { /* the warm-up fixes the calls per repetition: >= rep_ms of ours */
            double one = (double)(t1 - t0) > 1 ? (double)(t1 - t0) : 1;
            inner = (int)ceil(rep_ms * 1e6 / one);
            if (inner < 1) inner = 1;
            if (inner > 1000) inner = 1000;
        }
        openblas_set_num_threads(threads);
        ot_bench_wait_idle();
        uint64_t t2 = now_ns();
        for (int q = 0; q < inner; q++) gemm_all(&job);
        uint64_t t3 = now_ns();
        if (r >= 0) {
            ours[r] = inner * flops / (double)(t1 - t0);
            base[r] = inner * flops / (double)(t3 - t2);
        }
        if (B > 1) {
            openblas_set_num_threads(1);
            ot_bench_wait_idle();
            uint64_t t4 = now_ns();
            for (int q = 0; q < inner; q++)
                ot_parallel_for(pool, B, 1, OT_SCHEDULE_STATIC, gemm_range, &job);
            uint64_t t5 = now_ns();
            if (r >= 0) split[r] = inner * flops / (double)(t5 - t4);
        }
#if OT_HAVE_DNNL
        if (!d->prec) {
            omp_set_num_threads(threads);
            ot_bench_wait_idle();
            uint64_t t6 = now_ns();
            for (int q = 0; q < inner; q++) dnnl_all(&job, c3);
            uint64_t t7 = now_ns();
            if (r >= 0) dnn[r] = inner * flops / (double)(t7 - t6);
        }
#endif
    }
#if OT_HAVE_DNNL
    /* oneDNN's bits at 1, 2, 3 and 8 OpenMP threads (untimed) */
    bool dnnl_same = true;
    static const int omp_threads[4] = {1, 2, 3, 8};
    for (int q = 0; q < 4 && !rc && !d->prec; q++) {
        omp_set_num_threads(omp_threads[q]);
        dnnl_all(&job, q ? c4 : c3);
        if (q && memcmp(c3, c4, nc * 4)) dnnl_same = false;
    }
#endif
    if (!rc && rr.fast_kernels_run < 1) {
        fprintf(stderr, "bench_dot: %s: the dot did not run the fast kernel\n", d->name);
        rc = 1;
    }
    /* the same products: ours against the last baseline's output, normwise (elements near 0
     * come from cancellation, where the sum order alone changes their relative error) */
    double maxd = 0, maxv = 0;
    for (size_t e = 0; e < nc && !rc; e++) {
        double x = os == 8              ? ((double *)c1)[e]
                   : d->prec == PREC_S8 ? ((int32_t *)c1)[e]
                                        : ((float *)c1)[e];
        double y = os == 8 ? ((double *)c2)[e] : ((float *)c2)[e];
        double df = fabs(x - y), v = fabs(y);
        if (!(df <= maxd)) maxd = df; /* NaN too */
        if (v > maxv) maxv = v;
    }
    if (!rc && !(maxd <= (d->prec == PREC_F64 ? 1e-13 : 1e-5) * maxv)) {
        fprintf(stderr, "bench_dot: %s: results differ from OpenBLAS's (normwise %g)\n", d->name,
                maxd / maxv);
        rc = 1;
    }
    if (!rc) {
        char name[128], bname[160];
        const char *gm = d->prec == PREC_F64 ? "cblas_dgemm"
                         : widened           ? "cblas_sgemm on the f32 values"
                                             : "cblas_sgemm";
        snprintf(name, sizeof name, "%s, compiled dot, %d thread%s%s", d->name, threads, ths,
                 g_cpu_time ? ", CPU time" : "");
        if (B > 1)
            snprintf(bname, sizeof bname, "%lld %s in a row, OpenBLAS %d thread%s", (long long)B,
                     gm, threads, ths);
        else
            snprintf(bname, sizeof bname, "%s, OpenBLAS %d thread%s", gm, threads, ths);
        ot_bench_row row = {.bench = "dot",
                            .case_name = name,
                            .metric = "GFLOP/s",
                            .value = ot_bench_median(ours, (size_t)reps),
                            .baseline = bname,
                            .baseline_value = ot_bench_median(base, (size_t)reps)};
        row.ratio = row.value / row.baseline_value;
        ot_bench_print(&row, json);
        if (B > 1) {
            snprintf(bname, sizeof bname,
                     "%lld %s split over %d pool thread%s, OpenBLAS 1 thread each", (long long)B,
                     gm, threads, ths);
            row.baseline = bname;
            row.baseline_value = ot_bench_median(split, (size_t)reps);
            row.ratio = row.value / row.baseline_value;
            ot_bench_print(&row, json);
        }
#if OT_HAVE_DNNL
        if (d->prec) goto done; /* dnnl_sgemm: f32 only */
        char dname[200];
        snprintf(dname, sizeof dname, "%s, dnnl_sgemm (oneDNN), %d OpenMP thread%s; bits %s",
                 d->name, threads, ths,
                 dnnl_same ? "the same at 1, 2, 3, 8 threads"
                           : "differ between 1, 2, 3, 8 threads");
        if (B > 1) /* the first row's baseline */
            snprintf(bname, sizeof bname, "%lld cblas_sgemm in a row, OpenBLAS %d thread%s",
                     (long long)B, threads, ths);
        ot_bench_row drow = {.bench = "dot",
                             .case_name = dname,
                             .metric = "GFLOP/s",
                             .value = ot_bench_median(dnn, (size_t)reps),
                             .baseline = bname,
                             .baseline_value = ot_bench_median(base, (size_t)reps)};
        drow.ratio = drow.value / drow.baseline_value;
        ot_bench_print(&drow, json);
    done:;
#endif
    }
    free(ours);
    free(base);
    free(split);
    free(dnn);
#if OT_HAVE_DNNL
    ot_aligned_free(c3);
    ot_aligned_free(c4);
#endif
    ot_aligned_free(a);
    ot_aligned_free(b);
    if (widened) {
        ot_aligned_free(af);
        ot_aligned_free(bf);
    }
    ot_aligned_free(c1);
    ot_aligned_free(c2);
    ot_aligned_free(arena);
    ot_executable_free(exe);
    ot_module_free(m);
    return rc;
}

int main(int argc, char **argv) {
    bool json = false;
    int reps = 5;
    double rep_ms = 5;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpu-time"))
            g_cpu_time = true;
        else if (!strcmp(argv[i], "--rep-ms") && i + 1 < argc)
            rep_ms = atof(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_dot [--json] [--reps N] [--rep-ms MS] [--only TEXT] "
                            "[--cpu-time]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (!(rep_ms > 0 && rep_ms <= 10000)) {
        fprintf(stderr, "bench_dot: --rep-ms must be in (0, 10000]\n");
        return 2;
    }
    ot_threadpool *pool = ot_threadpool_default(); /* ours runs on it; so does the split loop */
    int threads = ot_threadpool_size(pool);
    ot_bench_print_header(json);
    int rc = 0, ran = 0;
    for (size_t ci = 0; ci < sizeof g_cases / sizeof g_cases[0] && !rc; ci++) {
        if (only && !strstr(g_cases[ci].name, only)) continue;
        rc = run_case(&g_cases[ci], reps, rep_ms, json, pool, threads);
        ran++;
    }
    if (!ran) {
        fprintf(stderr, "bench_dot: no case matches --only %s\n", only);
        return 2;
    }
    return rc;
}
