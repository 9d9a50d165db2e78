/* dot through compile -> execute against OpenBLAS called directly, in the same run.
 *   1024^3:   f32[1024,1024] x f32[1024,1024] (contracting lhs 1, rhs 0)
 *   1024^3 T: the same with the rhs contracted on its dim 1 (B transposed, no copy)
 *   batched:  f32[32,256,256] x f32[32,256,256], batch dim 0 (32 GEMMs)
 * ours: the module compiled (-O2) and run by ot_execute_on_host, whose dot kernel splits the GEMM
 * over the default pool (OPTITPU_THREADS, else the CPU count) with OpenBLAS single-threaded per
 * tile; baseline: cblas_sgemm on the same operands with OpenBLAS set to the same number of
 * threads (one call, or one call per batch element). GFLOP/s medians of --reps (default 5) after
 * a warm-up, the two interleaved; ratio = ours / OpenBLAS.
 * OpenBLAS's worker threads spin for 2^28 cycles (its default thread timeout) after a threaded
 * call before they sleep, so interleaved with the baseline our run would share its CPUs with
 * them (measured: ours at 0.42 of the baseline with 2 threads, 0.94 without the spin). The
 * program runs itself again with OPENBLAS_THREAD_TIMEOUT=4 (the workers sleep after 2^4 cycles)
 * unless that is set; the baseline is no slower for it (285-292 against 272-286 GFLOP/s at
 * 1024^3 on 2 threads).
 *   bench_dot [--json] [--reps N] */
#include "optitpu/bench.h"
#include "optitpu/compiler.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"

#include <cblas.h>
#undef I
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

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

static void direct(const dcase *d, const float *a, const float *b, float *c, int threads) {
    openblas_set_num_threads(threads);
    for (int64_t q = 0; q < d->b; q++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, d->rhs_t ? CblasTrans : CblasNoTrans, (int)d->m,
                    (int)d->n, (int)d->k, 1.0f, a + q * d->m * d->k, (int)d->k, b + q * d->k * d->n,
                    d->rhs_t ? (int)d->k : (int)d->n, 0.0f, c + q * d->m * d->n, (int)d->n);
}

int main(int argc, char **argv) {
    if (!getenv("OPENBLAS_THREAD_TIMEOUT")) { /* read by OpenBLAS when it loads */
        setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
        execv("/proc/self/exe", argv);
        fprintf(stderr,
                "bench_dot: cannot run itself again (%s); OpenBLAS's workers will spin "
                "between calls and take CPUs from ours\n",
                strerror(errno));
    }
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
    int threads = ot_threadpool_size(ot_threadpool_default());
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
               *base = calloc((size_t)reps, sizeof *base);
        ot_run_result rr;
        memset(&rr, 0, sizeof rr);
        for (int r = -1; r < reps; r++) {
            uint64_t t0 = ot_now_ns();
            if (ot_execute_on_host(exe, arena, params, outs, NULL, 0, &rr) != OT_OK) {
                fprintf(stderr, "bench_dot: %s\n", ot_last_error());
                rc = 1;
                break;
            }
            uint64_t t1 = ot_now_ns();
            direct(d, a, b, c2, threads);
            uint64_t t2 = ot_now_ns();
            if (r >= 0) {
                ours[r] = flops / (double)(t1 - t0);
                base[r] = flops / (double)(t2 - t1);
            }
        }
        if (rr.fast_kernels_run < 1) {
            fprintf(stderr, "bench_dot: %s: the dot did not run the fast kernel\n", d->name);
            rc = 1;
        }
        char name[96];
        snprintf(name, sizeof name, "%s, %d threads", d->name, threads);
        ot_bench_row row = {.bench = "dot",
                            .case_name = name,
                            .metric = "GFLOP/s",
                            .value = ot_bench_median(ours, (size_t)reps),
                            .baseline = "cblas_sgemm direct",
                            .baseline_value = ot_bench_median(base, (size_t)reps)};
        row.ratio = row.value / row.baseline_value;
        ot_bench_print(&row, json);
        free(ours);
        free(base);
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
