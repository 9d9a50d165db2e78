/* Scatter-add (jax.ops.segment_sum, embedding gradients, .at[].add) as JAX lowers it: a table of
 * zeros (a broadcast constant, which the scatter then updates in place) receiving N update rows of
 * D elements at N s32 row ids, over shape classes: many updates into few rows, into many rows
 * (embedding gradients of a 100k vocabulary), narrow rows (D = 1..8), wide rows (D = 1024),
 * sorted and unsorted ids, ids out of range (their rows dropped), f32 and f64. ours: the compiled
 * scatter run by ot_execute_on_host on a pool of --threads threads (the fast scatter,
 * fast_scatter.c); baseline: a plain C loop on one thread (memset of the table, then
 * y[id] += u[b] row by row in order, ids out of range skipped), the same adds in the same order.
 * Figure: ms per scatter (table fill included), medians of --reps runs after a warm-up, the two
 * interleaved; ratio = baseline / ours (> 1: ours is faster). The results are checked equal.
 * --cpu-time: the process's CPU time instead of wall time (on a loaded machine the time the process
 * waits for a CPU is then left out; with --threads 1 only, as idle pool workers spin). --min: the
 * fastest run instead of the median (on a loaded machine, the run least disturbed).
 *   bench_scatter [--json] [--reps N] [--threads N] [--only TEXT] [--cpu-time] [--min] */
#include "optitpu/bench.h"
#include "optitpu/compiler.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool g_cpu_time, g_min;

static double stat(double *v, size_t n) {
    if (!g_min) return ot_bench_median(v, n);
    double m = v[0];
    for (size_t k = 1; k < n; k++) m = v[k] < m ? v[k] : m;
    return m;
}
static uint64_t now_ns(void) {
    if (!g_cpu_time) return ot_now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct bcase {
    const char *name;
    int64_t n, d, rows;
    int ids; /* 0 uniform random, 1 sorted uniform, 2 skewed (a few rows take most) */
    int oor; /* percent of ids out of range (negative or >= rows) */
    bool f64;
} bcase;

static const bcase k_cases[] = {
    {"segment_sum 200000x48 -> 1000 rows, unsorted", 200000, 48, 1000, 0, 0, false},
    {"segment_sum 200000x48 -> 1000 rows, sorted", 200000, 48, 1000, 1, 0, false},
    {"segment_sum 200000x48 -> 1000 rows, 10% ids out of range", 200000, 48, 1000, 0, 10, false},
    {"segment_sum 200000x48 -> 3 rows", 200000, 48, 3, 0, 0, false},
    {"segment_sum 1000000x1 -> 1000 rows", 1000000, 1, 1000, 0, 0, false},
    {"segment_sum 500000x8 -> 50000 rows", 500000, 8, 50000, 0, 0, false},
    {"segment_sum 100000x48 -> 1000 rows, f64", 100000, 48, 1000, 0, 0, true},
    {"embedding grad 16384 ids x 64 -> 100000 rows", 16384, 64, 100000, 0, 0, false},
    {"embedding grad 8192 ids x 512 -> 32000 rows", 8192, 512, 32000, 0, 0, false},
    {"embedding grad 8192 ids x 512 -> 32000 rows, skewed ids", 8192, 512, 32000, 2, 0, false},
    {"wide rows 4096x1024 -> 64 rows", 4096, 1024, 64, 0, 0, false},
};

static uint64_t g_rng = 0x5eed5ca7;
static uint64_t rnd64(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* y = 0, then y[ids[b]] += u[b] for b in order (rows out of range skipped). */
static void plain_loop(const bcase *k, const int32_t *ids, const void *u, void *y) {
    size_t es = k->f64 ? 8 : 4;
    memset(y, 0, (size_t)(k->rows * k->d) * es);
    for (int64_t b = 0; b < k->n; b++) {
        int32_t r = ids[b];
        if (r < 0 || r >= k->rows) continue;
        if (k->f64) {
            double *o = (double *)y + r * k->d;
            const double *w = (const double *)u + b * k->d;
            for (int64_t j = 0; j < k->d; j++) o[j] += w[j];
        } else {
            float *o = (float *)y + r * k->d;
            const float *w = (const float *)u + b * k->d;
            for (int64_t j = 0; j < k->d; j++) o[j] += w[j];
        }
    }
}

static int run_case(const bcase *k, int reps, ot_threadpool *pool, bool json) {
    const char *T = k->f64 ? "f64" : "f32";
    char hlo[1400];
    long long n = k->n, d = k->d, rows = k->rows;
    snprintf(hlo, sizeof hlo,
             "HloModule bench_scatter\nadd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
             "  ROOT s = %s[] add(a, b)\n}\nENTRY e {\n  u = %s[%lld,%lld] parameter(0)\n"
             "  i = s32[%lld] parameter(1)\n  z = %s[] constant(0)\n"
             "  x = %s[%lld,%lld] broadcast(z), dimensions={}\n  k = s32[%lld,1] reshape(i)\n"
             "  ROOT s = %s[%lld,%lld] scatter(x, k, u), update_window_dims={1}, "
             "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
             "to_apply=add\n}\n",
             T, T, T, T, n, d, n, T, T, rows, d, n, T, rows, d);
    ot_module *m = NULL;
    ot_executable *exe = NULL;
    ot_compile_options o = ot_compile_options_default();
    if (ot_hlo_parse(hlo, strlen(hlo), NULL, &m) != OT_OK || ot_compile(m, &o, &exe) != OT_OK) {
        fprintf(stderr, "bench_scatter: %s\n", ot_last_error());
        ot_module_free(m);
        return 1;
    }
    size_t es = k->f64 ? 8 : 4, ub = (size_t)(n * d) * es, yb = (size_t)(rows * d) * es;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    void *u = ot_aligned_alloc(64, ub), *y = ot_aligned_alloc(64, yb),
         *yb2 = ot_aligned_alloc(64, yb);
    int64_t an = ot_executable_arena_size(exe);
    void *arena = an ? ot_aligned_alloc(64, (size_t)an) : NULL;
    double *ours = calloc((size_t)reps, sizeof *ours), *base = calloc((size_t)reps, sizeof *base);
    int rc = !ids || !u || !y || !yb2 || (an && !arena) || !ours || !base;
    if (!rc) {
        for (int64_t b = 0; b < k->n; b++) {
            uint64_t r = rnd64();
            int32_t v = (int32_t)(r % (uint64_t)k->rows);
            uint64_t q = rnd64() % 10;
            if (k->ids == 2 && q < 9) /* half the ids in rows 0..7, 40% in 0..199, 10% anywhere */
                v = (int32_t)(q < 5 ? r % 8 : r % 200);
            if ((int)(rnd64() % 100) < k->oor) v = rnd64() % 2 ? -1 - v : (int32_t)rows + v;
            ids[b] = v;
        }
        if (k->ids == 1) qsort(ids, (size_t)n, sizeof *ids, cmp_i32);
        for (int64_t e = 0; e < n * d; e++) {
            double v = (double)(int64_t)(rnd64() % 2001 - 1000) / 997.0;
            if (k->f64)
                ((double *)u)[e] = v;
            else
                ((float *)u)[e] = (float)v;
        }
    }
    void *params[2] = {u, ids}, *outs[1] = {y};
    ot_run_options ro = ot_run_options_default();
    ro.pool = pool;
    ot_run_result rr;
    for (int r = -1; r < reps && !rc; r++) {
        ot_bench_wait_idle();
        uint64_t t0 = now_ns();
        if (ot_execute_on_host(exe, arena, params, outs, &ro, 0, &rr) != OT_OK) rc = 1;
        uint64_t t1 = now_ns();
        plain_loop(k, ids, u, yb2);
        uint64_t t2 = now_ns();
        if (r >= 0) {
            ours[r] = (double)(t1 - t0) / 1e6;
            base[r] = (double)(t2 - t1) / 1e6;
        }
    }
    if (rc) fprintf(stderr, "bench_scatter: %s: %s\n", k->name, ot_last_error());
    if (!rc && memcmp(y, yb2, yb) != 0) {
        fprintf(stderr, "bench_scatter: %s: result differs from the plain loop's\n", k->name);
        rc = 1;
    }
    if (!rc) {
        char name[160];
        snprintf(name, sizeof name, "%s, %d thread%s", k->name, ot_threadpool_size(pool),
                 ot_threadpool_size(pool) == 1 ? "" : "s");
        ot_bench_row row = {.bench = "scatter",
                            .case_name = name,
                            .metric = "ms",
                            .value = stat(ours, (size_t)reps),
                            .baseline = "plain C loop, 1 thread",
                            .baseline_value = stat(base, (size_t)reps)};
        row.ratio = row.baseline_value / row.value;
        ot_bench_print(&row, json);
    }
    free(ours);
    free(base);
    free(ids);
    ot_aligned_free(u);
    ot_aligned_free(y);
    ot_aligned_free(yb2);
    ot_aligned_free(arena);
    ot_executable_free(exe);
    ot_module_free(m);
    return rc;
}

int main(int argc, char **argv) {
    bool json = false;
    int reps = 15, threads = 2;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min"))
            g_min = true;
        else if (!strcmp(argv[i], "--cpu-time"))
            g_cpu_time = true;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_scatter [--json] [--reps N] [--threads N] "
                            "[--only TEXT] [--cpu-time] [--min]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (threads < 1) threads = 1;
    ot_threadpool *pool = NULL;
    if (ot_threadpool_create(threads, &pool) != OT_OK) {
        fprintf(stderr, "bench_scatter: %s\n", ot_last_error());
        return 1;
    }
    ot_bench_print_header(json);
    int rc = 0;
    for (size_t c = 0; c < sizeof k_cases / sizeof k_cases[0]; c++)
        if (!only || strstr(k_cases[c].name, only)) rc |= run_case(&k_cases[c], reps, pool, json);
    ot_threadpool_free(pool);
    return rc;
}
