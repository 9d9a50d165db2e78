/* dot through compile -> execute against OpenBLAS called directly, in the same run.
 *   1024^3:   f32[1024,1024] x f32[1024,1024] (contracting lhs 1, rhs 0)
 *   1024^3 T: the same with the rhs contracted on its dim 1 (B transposed, no copy)
 *   batched:  f32[32,256,256] x f32[32,256,256], batch dim 0 (32 GEMMs)
 * ours: the module compiled (-O2) and run by ot_execute_on_host, whose dot kernel splits the GEMM
 * (for the batched case: batch elements x tiles) over the default pool (OPTITPU_THREADS, else the
 * CPU count) with OpenBLAS single-threaded per tile. Baselines, every one on the same number of
 * threads T, on the same operands:
 *   - OpenBLAS's own threading: cblas_sgemm with OpenBLAS set to T threads (the batched case: the
 *     32 calls back to back, OpenBLAS's workers left to spin between them as they do by default;
 *     this OpenBLAS has no cblas_sgemm_batch);
 *   - the batched case also: the 32 cblas_sgemm calls split over a pool of T threads with
 *     OpenBLAS single-threaded in each, the way ours splits its work.
 * Nothing is made to sleep inside a timed section. Before each timed section the program waits
 * (untimed) until the process is idle (under 0.1 CPU over a 5 ms window, at most 1 s): after a
 * threaded call OpenBLAS's workers spin for about 2^28 cycles (its default thread timeout) and
 * our pool's workers briefly, and either would otherwise take CPUs from the next side timed.
 * The OpenBLAS thread count is set before the section that needs it, outside the timing.
 * GFLOP/s medians of --reps (default 5) after a warm-up, the sides interleaved rep by rep;
 * ratio = ours / baseline. Every label names its thread counts.
 *   bench_dot [--json] [--reps N] */
#include "optitpu/bench.h"
#include "optitpu/compiler.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"

#include <cblas.h>
#include <math.h>
#undef I
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct dcase {
    const char *name;
    int64_t b, m, n, k;
    bool rhs_t; /* rhs stored [n, k] */
} dcase;

static ot_module *build(const dcase *d) {
    ot_module *m = ot_module_new("dot");
    ot_computation *c = ot_module_add_computation(m, "main");
    ot_shape ls, rs;
    ot_dot_dims dn;
    memset(&dn, 0, sizeof dn);
    if (d->b > 1) {
        ot_shape_make(&ls, OT_F32, 3, (int64_t[]){d->b, d->m, d->k});
        ot_shape_make(&rs, OT_F32, 3,
                      d->rhs_t ? (int64_t[]){d->b, d->n, d->k} : (int64_t[]){d->b, d->k, d->n});
        dn.nbatch = 1;
        dn.ncontract = 1;
        dn.lhs_contract[0] = 2;
        dn.rhs_contract[0] = d->rhs_t ? 2 : 1;
    } else {
        ot_shape_make(&ls, OT_F32, 2, (int64_t[]){d->m, d->k});
        ot_shape_make(&rs, OT_F32, 2, d->rhs_t ? (int64_t[]){d->n, d->k} : (int64_t[]){d->k, d->n});
        dn.ncontract = 1;
        dn.lhs_contract[0] = 1;
        dn.rhs_contract[0] = d->rhs_t ? 1 : 0;
    }
    ot_instr *l = ot_build_parameter(c, 0, ls, "l"), *r = ot_build_parameter(c, 1, rs, "r");
    ot_computation_set_root(c,
                            ot_build_dot(c, l, r, &dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT));
    ot_module_set_entry(m, c);
    if (ot_module_finalize(m) != OT_OK) {
        ot_module_free(m);
        return NULL;
    }
    return m;
}

typedef struct gemm_job {
    const dcase *d;
    const float *a, *b;
    float *c;
} gemm_job;

static void gemm_one(const gemm_job *j, int64_t q) {
    const dcase *d = j->d;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, d->rhs_t ? CblasTrans : CblasNoTrans, (int)d->m,
                (int)d->n, (int)d->k, 1.0f, j->a + q * d->m * d->k, (int)d->k,
                j->b + q * d->k * d->n, d->rhs_t ? (int)d->k : (int)d->n, 0.0f,
                j->c + q * d->m * d->n, (int)d->n);
}

/* every batch element in turn, with whatever threads OpenBLAS is set to */
static void gemm_all(const gemm_job *j) {
    for (int64_t q = 0; q < j->d->b; q++) gemm_one(j, q);
}

/* batch elements [b, e) on this pool thread (OpenBLAS single-threaded) */
static void gemm_range(void *ctx, int64_t b, int64_t e, int ith) {
    (void)ith;
    for (int64_t q = b; q < e; q++) gemm_one(ctx, q);
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Untimed: until the process's threads are idle (spinning workers of the last side gone to
 * sleep): under 0.1 CPU over a 5 ms window, at most 1 s. */
static void wait_quiet(void) {
    for (int i = 0; i < 200; i++) {
        double c0 = cpu_seconds();
        uint64_t t0 = ot_now_ns();
        nanosleep(&(struct timespec){0, 5000000}, NULL);
        double wall = (double)(ot_now_ns() - t0) / 1e9;
        if (cpu_seconds() - c0 < 0.1 * wall) return;
    }
}

int main(int argc, char **argv) {
    bool json = false;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_dot [--json] [--reps N]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    ot_threadpool *pool = ot_threadpool_default(); /* ours runs on it; so does the split loop */
    int threads = ot_threadpool_size(pool);
    const char *ths = threads == 1 ? "" : "s";
    static const dcase cases[] = {
        {"sgemm 1024^3", 1, 1024, 1024, 1024, false},
        {"sgemm 1024^3 rhs transposed", 1, 1024, 1024, 1024, true},
        {"sgemm batched 32x256^3", 32, 256, 256, 256, false},
    };
    ot_bench_print_header(json);
    int rc = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const dcase *d = &cases[ci];
        ot_module *m = build(d);
        ot_executable *exe = NULL;
        if (!m || ot_compile(m, NULL, &exe) != OT_OK) {
            fprintf(stderr, "bench_dot: %s: %s\n", d->name, ot_last_error());
            ot_module_free(m);
            return 1;
        }
        size_t na = (size_t)(d->b * d->m * d->k), nb = (size_t)(d->b * d->k * d->n),
               nc = (size_t)(d->b * d->m * d->n);
        float *a = ot_aligned_alloc(64, na * 4), *b = ot_aligned_alloc(64, nb * 4);
        float *c1 = ot_aligned_alloc(64, nc * 4), *c2 = ot_aligned_alloc(64, nc * 4);
        int64_t an = ot_executable_arena_size(exe);
        void *arena = an ? ot_aligned_alloc(64, (size_t)an) : NULL;
        uint64_t s = 12345;
        for (size_t e = 0; e < na; e++)
            a[e] = (float)((s = s * 6364136223846793005ull + 1) >> 40) / 16777216.0f - 0.5f;
        for (size_t e = 0; e < nb; e++)
            b[e] = (float)((s = s * 6364136223846793005ull + 1) >> 40) / 16777216.0f - 0.5f;
        void *params[2] = {a, b}, *outs[1] = {c1};
        double flops = 2.0 * (double)d->b * (double)d->m * (double)d->n * (double)d->k;
        double *ours = calloc((size_t)reps, sizeof *ours),
               *base = calloc((size_t)reps, sizeof *base),
               *split = calloc((size_t)reps, sizeof *split);
        gemm_job job = {d, a, b, c2};
        ot_run_result rr;
        memset(&rr, 0, sizeof rr);
        for (int r = -1; r < reps; r++) {
            openblas_set_num_threads(1); /* what ours sets: set here, outside its timing */
            wait_quiet();
            uint64_t t0 = ot_now_ns();
            if (ot_execute_on_host(exe, arena, params, outs, NULL, 0, &rr) != OT_OK) {
                fprintf(stderr, "bench_dot: %s\n", ot_last_error());
                rc = 1;
                break;
            }
            uint64_t t1 = ot_now_ns();
            openblas_set_num_threads(threads);
            wait_quiet();
            uint64_t t2 = ot_now_ns();
            gemm_all(&job);
            uint64_t t3 = ot_now_ns();
            if (r >= 0) {
                ours[r] = flops / (double)(t1 - t0);
                base[r] = flops / (double)(t3 - t2);
            }
            if (d->b > 1) {
                openblas_set_num_threads(1);
                wait_quiet();
                uint64_t t4 = ot_now_ns();
                ot_parallel_for(pool, d->b, 1, OT_SCHEDULE_STATIC, gemm_range, &job);
                uint64_t t5 = ot_now_ns();
                if (r >= 0) split[r] = flops / (double)(t5 - t4);
            }
        }
        if (rr.fast_kernels_run < 1) {
            fprintf(stderr, "bench_dot: %s: the dot did not run the fast kernel\n", d->name);
            rc = 1;
        }
        /* the same products: ours against the last baseline's output */
        double maxrel = 0;
        for (size_t e = 0; e < nc; e++) {
            double rel = fabs((double)c1[e] - c2[e]) / (fabs((double)c2[e]) + 1e-3);
            if (rel > maxrel) maxrel = rel;
        }
        if (maxrel > 1e-4) {
            fprintf(stderr, "bench_dot: %s: results differ from OpenBLAS's (rel %g)\n", d->name,
                    maxrel);
            rc = 1;
        }
        char name[96], bname[96];
        snprintf(name, sizeof name, "%s, compiled dot, %d thread%s", d->name, threads, ths);
        if (d->b > 1)
            snprintf(bname, sizeof bname, "%lld cblas_sgemm in a row, OpenBLAS %d thread%s",
                     (long long)d->b, threads, ths);
        else
            snprintf(bname, sizeof bname, "cblas_sgemm, OpenBLAS %d thread%s", threads, ths);
        ot_bench_row row = {.bench = "dot",
                            .case_name = name,
                            .metric = "GFLOP/s",
                            .value = ot_bench_median(ours, (size_t)reps),
                            .baseline = bname,
                            .baseline_value = ot_bench_median(base, (size_t)reps)};
        row.ratio = row.value / row.baseline_value;
        ot_bench_print(&row, json);
        if (d->b > 1) {
            snprintf(bname, sizeof bname,
                     "%lld cblas_sgemm split over %d pool thread%s, OpenBLAS 1 thread each",
                     (long long)d->b, threads, ths);
            row.baseline = bname;
            row.baseline_value = ot_bench_median(split, (size_t)reps);
            row.ratio = row.value / row.baseline_value;
            ot_bench_print(&row, json);
        }
        free(ours);
        free(base);
        free(split);
        ot_aligned_free(a);
        ot_aligned_free(b);
        ot_aligned_free(c1);
        ot_aligned_free(c2);
        ot_aligned_free(arena);
        ot_executable_free(exe);
        ot_module_free(m);
        if (rc) break;
    }
    return rc;
}
