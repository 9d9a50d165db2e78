/* optitpu bench ir: parse + shape inference + verify of a generated HLO module of N instructions
 * (XLA's dump form: % names, operand shapes, layouts), at N and 2N to show the growth is linear.
 * Figures are medians of R repetitions (default 5) after a warm-up; wall time and this process's
 * CPU time are both reported (the CPU time is what a loaded, shared machine cannot distort). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double last_cpu; /* CPU seconds of the last time_parse */

typedef struct buf {
    char *p;
    size_t n, cap;
    bool oom;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1 << 20;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

/* A module of exactly n instructions in the entry computation (plus a 3-instruction reducer):
 * elementwise chains over f32[16,64] with broadcasts, constants, compares, selects, reduces and
 * transposes mixed in, each op reading recent values (a deterministic LCG picks them). */
static char *generate(int64_t n, size_t *len) {
    buf b = {0};
    char line[512];
    int k =
        snprintf(line, sizeof line,
                 "HloModule bench_%lld, entry_computation_layout={(f32[16,64]{1,0}, "
                 "f32[16,64]{1,0})->f32[16,64]{1,0}}\n\n"
                 "%%sum (a: f32[], b: f32[]) -> f32[] {\n  %%a = f32[] parameter(0)\n"
                 "  %%b = f32[] parameter(1)\n  ROOT %%add = f32[] add(f32[] %%a, f32[] %%b)\n}\n\n"
                 "ENTRY %%main (p0: f32[16,64], p1: f32[16,64]) -> f32[16,64] {\n"
                 "  %%p0 = f32[16,64]{1,0} parameter(0)\n  %%p1 = f32[16,64]{1,0} parameter(1)\n",
                 (long long)n);
    put(&b, line, (size_t)k);
    const char *M = "f32[16,64]{1,0}";
    uint64_t st = 88172645463325252ull;
    /* the most recent f32[16,64] values (v<i>, or p0/p1 as -1/-2) that ops may read */
    int64_t ring[32] = {-1, -2};
    int nring = 2, head = 2;
    for (int64_t i = 2; i < n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t r = st >> 33;
        int64_t a = ring[(head - 1 - (int)(r % 8) + 64) % nring];
        int64_t c = ring[(int)((r >> 8) % (uint64_t)nring)];
        char an[32], cn[32];
        if (a < 0)
            snprintf(an, sizeof an, "p%lld", (long long)(-a - 1));
        else
            snprintf(an, sizeof an, "v%lld", (long long)a);
        if (c < 0)
            snprintf(cn, sizeof cn, "p%lld", (long long)(-c - 1));
        else
            snprintf(cn, sizeof cn, "v%lld", (long long)c);
        const char *root = i == n - 1 ? "ROOT " : "";
        /* instructions that are not f32[16,64] get a follower that returns to it */
        switch (r % 16) {
        case 0:
        case 1:
        case 2:
            k = snprintf(line, sizeof line, "  %s%%v%lld = %s add(%s %%%s, %s %%%s)\n", root,
                         (long long)i, M, M, an, M, cn);
            break;
        case 3:
        case 4:
            k = snprintf(line, sizeof line, "  %s%%v%lld = %s multiply(%s %%%s, %s %%%s)\n", root,
                         (long long)i, M, M, an, M, cn);
            break;
        case 5:
            k = snprintf(line, sizeof line, "  %s%%v%lld = %s exponential(%s %%%s)\n", root,
                         (long long)i, M, M, an);
            break;
        case 6:
            k = snprintf(line, sizeof line, "  %s%%v%lld = %s negate(%s %%%s)\n", root,
                         (long long)i, M, M, an);
            break;
        case 7:
            k = snprintf(line, sizeof line, "  %s%%v%lld = %s maximum(%s %%%s, %s %%%s)\n", root,
                         (long long)i, M, M, an, M, cn);
            break;
        case 8:
            if (i + 1 < n) { /* a scalar constant broadcast into the shape */
                k = snprintf(line, sizeof line,
                             "  %%v%lld = f32[] constant(0.5)\n  %%v%lld = %s broadcast(f32[] "
                             "%%v%lld), dimensions={}\n",
                             (long long)i, (long long)(i + 1), M, (long long)i);
                i++;
                break;
            }
            k = snprintf(line, sizeof line, "  %s%%v%lld = %s sqrt(%s %%%s)\n", root, (long long)i,
                         M, M, an);
            break;
        case 9:
            if (i + 2 < n) { /* compare + select */
                k = snprintf(line, sizeof line,
                             "  %%v%lld = pred[16,64]{1,0} compare(%s %%%s, %s %%%s), "
                             "direction=LT\n  %%v%lld = %s select(pred[16,64]{1,0} %%v%lld, %s "
                             "%%%s, %s %%%s)\n",
                             (long long)i, M, an, M, cn, (long long)(i + 1), M, (long long)i, M, an,
                             M, cn);
                i++;
                break;
            }
            k = snprintf(line, sizeof line, "  %s%%v%lld = %s tanh(%s %%%s)\n", root, (long long)i,
                         M, M, an);
            break;
        case 10:
            if (i + 3 < n) { /* a row reduction broadcast back */
                k = snprintf(line, sizeof line,
                             "  %%v%lld = f32[] constant(0)\n  %%v%lld = f32[16]{0} "
                             "reduce(%s %%%s, f32[] %%v%lld), dimensions={1}, to_apply=%%sum\n"
                             "  %%v%lld = %s broadcast(f32[16]{0} %%v%lld), dimensions={0}\n",
                             (long long)i, (long long)(i + 1), M, an, (long long)i,
                             (long long)(i + 2), M, (long long)(i + 1));
                i += 2;
                break;
            }
            k = snprintf(line, sizeof line, "  %s%%v%lld = %s subtract(%s %%%s, %s %%%s)\n", root,
                         (long long)i, M, M, an, M, cn);
            break;
        case 11:
            if (i + 2 < n) { /* a transpose pair */
                k = snprintf(line, sizeof line,
                             "  %%v%lld = f32[64,16]{1,0} transpose(%s %%%s), dimensions={1,0}\n"
                             "  %%v%lld = %s transpose(f32[64,16]{1,0} %%v%lld), "
                             "dimensions={1,0}\n",
                             (long long)i, M, an, (long long)(i + 1), M, (long long)i);
                i++;
                break;
            }
            k = snprintf(line, sizeof line, "  %s%%v%lld = %s abs(%s %%%s)\n", root, (long long)i,
                         M, M, an);
            break;
        default:
            k = snprintf(line, sizeof line, "  %s%%v%lld = %s divide(%s %%%s, %s %%%s)\n", root,
                         (long long)i, M, M, an, M, cn);
            break;
        }
        put(&b, line, (size_t)k);
        /* every case ends with an f32[16,64] value named v<i> */
        if (nring < 32) {
            ring[nring++] = i;
            head = nring;
        } else {
            ring[head % 32] = i;
            head = head % 32 + 1;
        }
    }
    put(&b, "}\n", 2);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.n;
    return b.p;
}

/* Seconds of one parse (+ verify); < 0 on failure (message in ot_last_error). */
static double time_parse(const char *text, size_t len, int64_t *ninstr) {
    double c0 = cpu_now();
    uint64_t t0 = ot_now_ns();
    ot_module *m = NULL;
    ot_status s = ot_hlo_parse(text, len, NULL, &m); /* parse + infer (per op) + verify */
    uint64_t t1 = ot_now_ns();
    last_cpu = cpu_now() - c0;
    if (s != OT_OK) return -1;
    *ninstr = ot_module_instr_count(m);
    ot_module_free(m);
    return (double)(t1 - t0) * 1e-9;
}

static double time_scan(const char *text, size_t len) {
    uint64_t t0 = ot_now_ns();
    size_t lines = 0;
    const char *p = text, *e = text + len;
    while (p < e) {
        const char *q = memchr(p, '\n', (size_t)(e - p));
        if (!q) break;
        lines++;
        p = q + 1;
    }
    uint64_t t1 = ot_now_ns();
    if (lines == 0) fprintf(stderr, "empty\n");
    return (double)(t1 - t0) * 1e-9;
}

static int run_ir_bench(int argc, char **argv) {
    bool json = false;
    int64_t n = 1000000;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--n") && i + 1 < argc)
            n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            return cli_usage_error("bench ir", "unknown argument '%s'", argv[i]);
        }
    }
    size_t len1, len2;
    char *t1 = generate(n, &len1), *t2 = generate(2 * n, &len2);
    if (!t1 || !t2) {
        free(t1);
        free(t2);
        ot_error(OT_ERR_OUT_OF_MEMORY, "bench ir: out of memory generating the text");
        return cli_fail("bench");
    }
    double *a = malloc(sizeof(double) * (size_t)reps), *b = malloc(sizeof(double) * (size_t)reps);
    double *sa = malloc(sizeof(double) * (size_t)reps), *sb = malloc(sizeof(double) * (size_t)reps);
    double *ca = malloc(sizeof(double) * (size_t)reps), *cb = malloc(sizeof(double) * (size_t)reps);
    int64_t k1 = 0, k2 = 0;
    bool ok = time_parse(t1, len1, &k1) >= 0; /* warm-up */
    for (int r = 0; ok && r < reps; r++) {
        sa[r] = time_scan(t1, len1);
        a[r] = time_parse(t1, len1, &k1);
        ca[r] = last_cpu;
        sb[r] = time_scan(t2, len2);
        b[r] = time_parse(t2, len2, &k2);
        cb[r] = last_cpu;
        ok = a[r] >= 0 && b[r] >= 0;
    }
    if (!ok) {
        free(a);
        free(b);
        free(sa);
        free(sb);
        free(ca);
        free(cb);
        free(t1);
        free(t2);
        return cli_fail("bench");
    }
    double ta = ot_bench_median(a, (size_t)reps), tb = ot_bench_median(b, (size_t)reps);
    double sca = ot_bench_median(sa, (size_t)reps);
    double cta = ot_bench_median(ca, (size_t)reps), ctb = ot_bench_median(cb, (size_t)reps);
    char c1[96], c2[96], c3[96];
    snprintf(c1, sizeof c1, "parse+verify %lld instr (%.0f MB)", (long long)k1, (double)len1 / 1e6);
    snprintf(c2, sizeof c2, "parse+verify %lld instr (%.0f MB)", (long long)k2, (double)len2 / 1e6);
    snprintf(c3, sizeof c3, "time(2N)/time(N), N=%lld", (long long)n);
    ot_bench_print_header(json);
    ot_bench_row r1 = {"ir", c1, "s", ta, "2 s budget", 2.0, 2.0 / ta};
    ot_bench_row r0 = {"ir", "memchr line scan of the same text", "s", sca, NULL, 0, 0};
    ot_bench_row r2 = {"ir", c2, "s", tb, "2 s budget scaled to 2N", 4.0, 4.0 / tb};
    ot_bench_row r3 = {"ir", c3, "ratio", tb / ta, "linear growth (2.0)", 2.0, 2.0 / (tb / ta)};
    ot_bench_row r4 = {"ir", "instructions per second", "instr/s", (double)k1 / ta, NULL, 0, 0};
    char c5[96], c6[96];
    snprintf(c5, sizeof c5, "parse+verify %lld instr, CPU time", (long long)k1);
    snprintf(c6, sizeof c6, "CPU time(2N)/time(N), N=%lld", (long long)n);
    ot_bench_row r5 = {"ir", c5, "s", cta, "2 s budget", 2.0, 2.0 / cta};
    ot_bench_row r6 = {"ir", c6, "ratio", ctb / cta, "linear growth (2.0)", 2.0, 2.0 / (ctb / cta)};
    ot_bench_print(&r0, json);
    ot_bench_print(&r1, json);
    ot_bench_print(&r2, json);
    ot_bench_print(&r3, json);
    ot_bench_print(&r4, json);
    ot_bench_print(&r5, json);
    ot_bench_print(&r6, json);
    free(a);
    free(b);
    free(sa);
    free(sb);
    free(ca);
    free(cb);
    free(t1);
    free(t2);
    return CLI_OK;
}

const cli_command cli_bench_ir = {
    "ir",
    "HLO text parse + shape inference + verify of a 1M-instruction module, and its scaling",
    "usage: optitpu bench ir [--json] [--n N] [--reps R]\n"
    "\n"
    "Generates an HLO module of N instructions (default 1,000,000; XLA's dump form with operand\n"
    "shapes and layouts: elementwise chains, broadcasts, compares/selects, reductions,\n"
    "transposes) and of 2N, then times ot_hlo_parse (which infers every shape and runs the\n"
    "verifier), median of R runs (default 5) after a warm-up. Prints wall and CPU seconds beside\n"
    "the 2 s budget and time(2N)/time(N) beside linear growth (2.0; the goal is <= 2.2).",
    run_ir_bench,
};
