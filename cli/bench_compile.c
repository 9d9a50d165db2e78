/* optitpu bench compile: the whole compile pipeline (verify, clone, passes, fusion, schedule,
 * buffer assignment, executable) on generated graphs of N instructions, its scaling
 * time(2N)/time(N) (linear is 2.0; the goal is <= 2.3, i.e. no quadratic pass), and the arena
 * size beside the no-fragmentation lower bound (the peak of live bytes; goal <= 1.25x).
 *
 * The generated graph is a deep residual network with optimizer-style elementwise tails: per
 * block a dot, a broadcast bias, an activation, an elementwise residual chain with a skip
 * connection three blocks back, a row reduction broadcast back, and a side output every few
 * blocks, so every pass has work: fusion (elementwise, broadcasts, reductions, multi-output),
 * scheduling across skips, and temporaries of several sizes in the arena.
 *
 * --shape FAMILY[,FAMILY...] compiles the library's graph-shape families instead
 * (ot_graph_family_build: residual chains, fan-out, nesting, wide tuples, random DAGs, ...), each
 * at the same sizes, with the family's name in every row.
 *
 * Native code is off (ot_compile_options.native): the figures are the compiler's own passes, not
 * the system C compiler's time on hundreds of thousands of generated kernels, and stay
 * comparable with those measured before native code became a compile stage. */
#include "cli.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* Process CPU time: compilation is single-threaded, and on a shared machine the CPU time shows
 * the algorithm's scaling where wall time also shows the neighbours. */
static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* A module of about n instructions in its entry computation. */
static ot_module *gen_graph(int64_t n, uint64_t seed) {
    const int64_t d = 16;
    int64_t widths[3] = {16, 32, 64};
    ot_shape w;
    ot_shape_make(&w, OT_F32, 2, (int64_t[]){d, d});
    ot_module *m = ot_module_new("bench_compile");
    ot_computation *sum, *c;
    ot_instr *ra, *rb;
    sum = ot_module_add_computation(m, "sum");
    ra = ot_build_parameter(sum, 0, ot_shape_scalar(OT_F32), "a");
    rb = ot_build_parameter(sum, 1, ot_shape_scalar(OT_F32), "b");
    ot_computation_set_root(sum, ot_build_binary(sum, OT_OP_ADD, ra, rb));
    c = ot_module_add_computation(m, "main");
    ot_module_set_entry(m, c);
    int64_t pn = 0;
    ot_shape hs;
    ot_shape_make(&hs, OT_F32, 2, (int64_t[]){widths[0], d});
    ot_instr *h = ot_build_parameter(c, pn++, hs, "x");
    ot_instr *wt = ot_build_parameter(c, pn++, w, "w");
    ot_instr *lr = ot_build_parameter(c, pn++, ot_shape_scalar(OT_F32), "lr");
    ot_instr *hist[3] = {h, h, h};
    ot_instr **outs = NULL;
    int nouts = 0, capouts = 0;
    ot_dot_dims dn = {0};
    dn.ncontract = 1;
    dn.lhs_contract[0] = 1;
    dn.rhs_contract[0] = 0;
    ot_instr *zero = ot_build_constant_scalar(c, OT_F32, 0);
    for (int64_t blk = 0; ot_module_instr_count(m) < n; blk++) {
        ot_shape s = h->shape.array;
        ot_instr *y = ot_build_dot(c, h, wt, &dn, OT_PRECISION_DEFAULT, OT_PRECISION_DEFAULT);
        ot_instr *bias = ot_build_broadcast(
            c, ot_build_constant_scalar(c, OT_F32, (double)(lcg(&seed) % 100) / 100.0), s, NULL, 0);
        y = ot_build_unary(c, OT_OP_TANH, ot_build_binary(c, OT_OP_ADD, y, bias));
        ot_instr *skip = hist[blk % 3];
        if (!ot_shape_equal(&skip->shape.array, &s)) skip = h;
        ot_instr *r = ot_build_binary(c, OT_OP_ADD, y, skip);
        r = ot_build_binary(c, OT_OP_MULTIPLY, r, ot_build_broadcast(c, lr, s, NULL, 0));
        ot_instr *row = ot_build_reduce(c, &r, &zero, 1, (int64_t[]){1}, 1, sum);
        ot_instr *rb2 = ot_build_broadcast(c, row, s, (int64_t[]){0}, 1);
        h = ot_build_binary(c, OT_OP_SUBTRACT, r, rb2);
        if (lcg(&seed) % 4 == 0) {
            if (nouts == capouts) {
                capouts = capouts ? capouts * 2 : 64;
                ot_instr **no = ot_realloc(outs, (size_t)capouts * sizeof *no);
                if (!no) break;
                outs = no;
            }
            outs[nouts++] = ot_build_reduce(c, &h, &zero, 1, (int64_t[]){0, 1}, 2, sum);
        }
        /* change the width now and then: temporaries of several sizes */
        if (lcg(&seed) % 16 == 0) {
            ot_shape ns;
            ot_shape_make(&ns, OT_F32, 2, (int64_t[]){widths[lcg(&seed) % 3], d});
            if (ns.dims[0] != s.dims[0]) {
                ot_instr *red = ot_build_reduce(c, &h, &zero, 1, (int64_t[]){0}, 1, sum);
                h = ot_build_broadcast(c, red, ns, (int64_t[]){1}, 1);
            }
        }
        hist[blk % 3] = h;
    }
    if (nouts == capouts) {
        ot_instr **no = ot_realloc(outs, (size_t)(capouts + 1) * sizeof *no);
        if (no) outs = no;
    }
    if (outs) outs[nouts++] = h;
    ot_computation_set_root(c, outs ? ot_build_tuple(c, outs, nouts) : h);
    ot_free(outs);
    if (ot_module_finalize(m) != OT_OK) {
        ot_module_free(m);
        return NULL;
    }
    return m;
}

enum { MAX_SIZES = 8 };

/* "100k" for 100000, else the number */
typedef struct ktext {
    char s[24];
} ktext;
static ktext ksize(int64_t n) {
    ktext t;
    if (n % 1000 == 0)
        snprintf(t.s, sizeof t.s, "%lldk", (long long)(n / 1000));
    else
        snprintf(t.s, sizeof t.s, "%lld", (long long)n);
    return t;
}

/* "N,N,...": 1 to MAX_SIZES sizes from 2000 to 4000000 instructions (no empty item); the
 * count, or -1 */
static int parse_sizes(const char *s, int64_t *sizes) {
    int n = 0;
    for (const char *p = s;; n++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char tok[16];
        if (n == MAX_SIZES || len == 0 || len >= sizeof tok) return -1;
        memcpy(tok, p, len);
        tok[len] = 0;
        if (!cli_parse_i64(tok, 2000, 4000000, &sizes[n])) return -1;
        if (!comma) return n + 1;
        p = comma + 1;
    }
}

enum { MAXST = 64 };

/* One size's graph and its measured runs. */
typedef struct size_run {
    const char *family; /* NULL: the residual network above */
    int64_t n, ninstr;
    ot_module *m;
    double first; /* the warm-up: the first compile of this size in the process */
    double t[100], ct[100], med, cmed;
    /* per-stage times of each run (the pipeline is deterministic: the same stages in the same
     * order every run), for --passes at the largest size */
    double st[MAXST][100];
    char stname[MAXST][40];
    int nst, kernels;
    int64_t arena, peak;
} size_run;

/* A row's case: "[FAMILY ]N instrs REST". */
static void case_of(char *buf, size_t cap, const size_run *sr, const char *rest) {
    snprintf(buf, cap, "%s%s%lld instrs %s", sr->family ? sr->family : "", sr->family ? " " : "",
             (long long)sr->ninstr, rest);
}

/* -O2 without native code (see the top of the file) */
static ot_compile_options bench_options(void) {
    ot_compile_options o = ot_compile_options_default();
    o.native = OT_NATIVE_OFF;
    return o;
}

static ot_status warm_up(size_run *sr) {
    ot_executable *e = NULL;
    sr->ninstr = ot_module_instr_count(sr->m);
    ot_compile_options o = bench_options();
    uint64_t t0 = ot_now_ns();
    OT_CHECK(ot_compile(sr->m, &o, &e));
    sr->first = (double)(ot_now_ns() - t0) / 1e9;
    sr->arena = ot_executable_arena_size(e);
    sr->peak = ot_executable_peak_live_bytes(e);
    sr->kernels = ot_executable_kernel_count(e);
    ot_executable_free(e);
    return OT_OK;
}

static ot_status timed_run(size_run *sr, int64_t r) {
    ot_executable *e = NULL;
    ot_compile_options o = bench_options();
    uint64_t t0 = ot_now_ns();
    double c0 = cpu_s();
    ot_status s = ot_compile(sr->m, &o, &e);
    sr->t[r] = (double)(ot_now_ns() - t0) / 1e9;
    sr->ct[r] = cpu_s() - c0;
    if (s != OT_OK) return s;
    sr->nst = ot_executable_stat_count(e) < MAXST ? ot_executable_stat_count(e) : MAXST;
    for (int k = 0; k < sr->nst; k++) {
        const ot_pass_stat *ps = ot_executable_stat(e, k);
        sr->st[k][r] = (double)ps->time_ns / 1e9;
        snprintf(sr->stname[k], sizeof sr->stname[k], "%s#%d", ps->name, ps->iteration);
    }
    ot_executable_free(e);
    return OT_OK;
}

/* The time, CPU time and arena rows of one size (medians of copies: the runs stay in their
 * order for the paired ratios), and with stages each stage's median beside the whole
 * pipeline's. */
static void print_size(size_run *sr, int64_t reps, bool stages, bool json) {
    double t[100], ct[100];
    memcpy(t, sr->t, sizeof t);
    memcpy(ct, sr->ct, sizeof ct);
    sr->med = ot_bench_median(t, (size_t)reps);
    sr->cmed = ot_bench_median(ct, (size_t)reps);
    char cs[128], rest[96];
    snprintf(rest, sizeof rest, "-O2 (%d kernels, native off)", sr->kernels);
    case_of(cs, sizeof cs, sr, rest);
    ot_bench_row row = {"compile", cs, "s", sr->med, NULL, 0, 0};
    ot_bench_print(&row, json);
    /* the first run's pages are new to the process; later runs reuse the memory (the arena
     * chunk cache, ot_arena_cache_limit) as a process compiling again and again would */
    case_of(cs, sizeof cs, sr, "-O2 first run");
    ot_bench_row frow = {"compile", cs, "s", sr->first, NULL, 0, 0};
    ot_bench_print(&frow, json);
    case_of(cs, sizeof cs, sr, "-O2 CPU time");
    ot_bench_row crow = {"compile", cs, "s", sr->cmed, NULL, 0, 0};
    ot_bench_print(&crow, json);
    case_of(cs, sizeof cs, sr, "arena");
    double ratio = sr->peak ? (double)sr->arena / (double)sr->peak : 1.0;
    ot_bench_row ar = {"compile",
                       cs,
                       "arena/peak live bytes",
                       ratio,
                       "lower bound (peak live)",
                       1.0,
                       ratio > 0 ? 1.0 / ratio : 0};
    ot_bench_print(&ar, json);
    if (!stages) return;
    /* what no stage records (verification of the source, its clone, the fingerprint and the
     * re-emission of the passes' output in post order) is the median total less the stages'
     * sum */
    double sum = 0;
    for (int k = 0; k < sr->nst; k++) {
        double v = ot_bench_median(sr->st[k], (size_t)reps);
        sum += v;
        case_of(cs, sizeof cs, sr, sr->stname[k]);
        ot_bench_row pr = {
            "compile", cs, "s", v, "whole pipeline", sr->med, sr->med > 0 ? v / sr->med : 0};
        ot_bench_print(&pr, json);
    }
    case_of(cs, sizeof cs, sr, "verify, clone, fingerprint, reorder");
    ot_bench_row pr = {"compile",
                       cs,
                       "s",
                       sr->med - sum,
                       "whole pipeline",
                       sr->med,
                       sr->med > 0 ? (sr->med - sum) / sr->med : 0};
    ot_bench_print(&pr, json);
}

/* A pair's ratios beside the size ratio (linear scaling; the goal for N -> 2N is <= 2.3): of
 * the medians, of the CPU time medians, and the median of the runs' own ratios. */
static void print_scaling(const size_run *a, const size_run *b, int64_t reps, bool json) {
    /* a family's module has about, not exactly, the size asked for (fori_unrolled: whole
     * copies of its fixture): linear is the ratio of the instructions it has */
    double lin = a->family ? (double)b->ninstr / (double)a->ninstr : (double)b->n / (double)a->n;
    bool twice = b->n == 2 * a->n;
    char lab[32], cs[128], fam[40];
    snprintf(fam, sizeof fam, "%s%s", a->family ? a->family : "", a->family ? " " : "");
    snprintf(lab, sizeof lab, "linear (%.3g)", lin);
    snprintf(cs, sizeof cs, "%sscaling %s -> %s", fam, ksize(a->n).s, ksize(b->n).s);
    double sc = b->med / a->med;
    ot_bench_row sr = {"compile", cs,      twice ? "time(2N)/time(N)" : "time ratio", sc, lab,
                       lin,       lin / sc};
    ot_bench_print(&sr, json);
    snprintf(cs, sizeof cs, "%sCPU scaling %s -> %s", fam, ksize(a->n).s, ksize(b->n).s);
    sc = b->cmed / a->cmed;
    ot_bench_row cr = {"compile", cs,      twice ? "cpu(2N)/cpu(N)" : "CPU time ratio", sc, lab,
                       lin,       lin / sc};
    ot_bench_print(&cr, json);
    double pr[100];
    for (int64_t r = 0; r < reps; r++) pr[r] = a->t[r] > 0 ? b->t[r] / a->t[r] : 0;
    sc = ot_bench_median(pr, (size_t)reps);
    snprintf(cs, sizeof cs, "%spaired runs %s -> %s", fam, ksize(a->n).s, ksize(b->n).s);
    ot_bench_row rr = {"compile", cs, "median run ratio", sc, lab, lin, sc > 0 ? lin / sc : 0};
    ot_bench_print(&rr, json);
}

/* The shape families' names ("a,b,c" or "all") checked against the library's list: the count
 * put in names[], or -1 naming the unknown one. */
enum { MAX_SHAPES = 64 };
static int parse_shapes(const char *cmd, const char *s, const char **names) {
    int n = 0, nf = ot_graph_family_count();
    if (!strcmp(s, "all")) {
        for (int i = 0; i < nf && i < MAX_SHAPES; i++) names[n++] = ot_graph_family_name(i);
        return n;
    }
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int found = -1;
        for (int i = 0; i < nf; i++)
            if (strlen(ot_graph_family_name(i)) == len && !strncmp(ot_graph_family_name(i), p, len))
                found = i;
        if (found < 0 || n == MAX_SHAPES) {
            char known[512];
            size_t kn = 0;
            known[0] = 0;
            for (int i = 0; i < nf && kn < sizeof known; i++)
                kn += (size_t)snprintf(known + kn, sizeof known - kn, "%s, ",
                                       ot_graph_family_name(i));
            cli_usage_error(cmd, "--shape: unknown family '%.*s' (families: %sor all)", (int)len, p,
                            known);
            return -1;
        }
        names[n++] = ot_graph_family_name(found);
        if (!comma) return n;
        p = comma + 1;
    }
}

/* One module of about n instructions: the residual network, or a family's. */
static ot_module *make_graph(const char *family, int64_t n, uint64_t seed) {
    if (!family) return gen_graph(n, seed);
    ot_module *m = NULL;
    return ot_graph_family_build(family, n, seed, &m) == OT_OK ? m : NULL;
}

/* Sizes are measured in groups: a pair (N, 2N) together, a last odd size alone. A pair's
 * runs alternate (N, 2N, then 2N, N, ...) after a warm-up of each, so that a change in the
 * machine's load during the benchmark falls on both sizes alike instead of on one block of
 * runs: besides the ratio of the medians, the median of the runs' own ratios (each run of
 * 2N over the run of N beside it) is printed. */
static ot_status bench_sizes(const char *family, uint64_t seed, const int64_t *sizes, int nsizes,
                             int64_t max_n, int64_t reps, bool reps_given, bool passes, bool json) {
    for (int g0 = 0; g0 < nsizes && sizes[g0] <= max_n; g0 += 2) {
        int gn = g0 + 1 < nsizes && sizes[g0 + 1] <= max_n ? 2 : 1;
        static size_run runs[2];
        for (int q = 0; q < gn; q++) {
            size_run *sr = &runs[q];
            memset(sr, 0, sizeof *sr);
            sr->family = family;
            sr->n = sizes[g0 + q];
            sr->m = make_graph(family, sr->n, seed);
            ot_status st = sr->m ? warm_up(sr) : OT_ERR_INTERNAL; /* (the message is set) */
            if (st != OT_OK) {
                for (int k = 0; k <= q; k++) ot_module_free(runs[k].m);
                return st;
            }
        }
        /* short compiles get more runs (without --reps): about half a second of the larger
         * size's runs (its first run as the estimate), at most 100; five runs of a 10 ms compile
         * leave its median to the machine's noise */
        int64_t gr = reps;
        double big = runs[gn - 1].first;
        if (!reps_given && big > 0 && big * (double)reps < 0.5) {
            gr = (int64_t)(0.5 / big) + 1;
            if (gr > 100) gr = 100;
        }
        ot_status s = OT_OK;
        for (int64_t r = 0; r < gr && s == OT_OK; r++)
            for (int q = 0; q < gn && s == OT_OK; q++)
                s = timed_run(&runs[r % 2 ? gn - 1 - q : q], r);
        for (int q = 0; q < gn; q++) ot_module_free(runs[q].m);
        if (s != OT_OK) return s;
        for (int q = 0; q < gn; q++) {
            bool last = g0 + q == nsizes - 1 || sizes[g0 + q + 1] > max_n;
            print_size(&runs[q], gr, passes && last, json);
        }
        if (gn == 2) print_scaling(&runs[0], &runs[1], gr, json);
    }
    return OT_OK;
}

static int run_compile_bench(int argc, char **argv) {
    const char *cmd = "bench compile";
    bool json = false, passes = false;
    int64_t reps = 5, max_n = 4000000; /* (no default size is above 1M) */
    bool reps_given = false, sizes_given = false;
    /* N and 2N for each size: 10k/20k, 100k/200k, 500k/1M */
    int64_t sizes[MAX_SIZES] = {10000, 20000, 100000, 200000, 500000, 1000000};
    int nsizes = 6;
    const char *shapes[MAX_SHAPES];
    int nshapes = 0;
    int64_t seed = 42;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--passes")) {
            passes = true;
        } else if (!strcmp(argv[i], "--reps")) {
            if (!v || !cli_parse_i64(v, 1, 100, &reps))
                return cli_usage_error(cmd, "--reps needs a number from 1 to 100");
            reps_given = true;
            i++;
        } else if (!strcmp(argv[i], "--max")) {
            if (!v || !cli_parse_i64(v, 2000, 4000000, &max_n))
                return cli_usage_error(cmd, "--max needs a number from 2000 to 4000000");
            i++;
        } else if (!strcmp(argv[i], "--sizes")) {
            if (!v || (nsizes = parse_sizes(v, sizes)) < 0)
                return cli_usage_error(cmd,
                                       "--sizes needs 1 to %d comma-separated numbers from "
                                       "2000 to 4000000",
                                       MAX_SIZES);
            sizes_given = true;
            i++;
        } else if (!strcmp(argv[i], "--shape")) {
            if (!v) return cli_usage_error(cmd, "--shape needs FAMILY[,FAMILY...] or all");
            if ((nshapes = parse_shapes(cmd, v, shapes)) < 0) return CLI_USAGE;
            i++;
        } else if (!strcmp(argv[i], "--seed")) {
            if (!v || !cli_parse_i64(v, 0, INT64_MAX, &seed))
                return cli_usage_error(cmd, "--seed needs a number >= 0");
            i++;
        } else {
            return cli_usage_error(cmd, "unknown argument '%s'", argv[i]);
        }
    }
    /* the families' goal is stated from 10k to 200k */
    if (nshapes > 0 && !sizes_given) nsizes = 4;
    ot_bench_print_header(json);
    if (nshapes == 0) {
        if (bench_sizes(NULL, 42, sizes, nsizes, max_n, reps, reps_given, passes, json) != OT_OK)
            return cli_fail(cmd);
        return CLI_OK;
    }
    /* a family that fails is reported and the others still run */
    int rc = CLI_OK;
    for (int f = 0; f < nshapes; f++) {
        if (bench_sizes(shapes[f], (uint64_t)seed, sizes, nsizes, max_n, reps, reps_given, passes,
                        json) != OT_OK) {
            fprintf(stderr, "optitpu %s: %s: %s\n", cmd, shapes[f], ot_last_error());
            fflush(stderr);
            rc = CLI_FAIL;
        }
    }
    return rc;
}

const cli_command cli_bench_compile = {
    "compile",
    "compile pipeline time on 10k..1M-instruction graphs, scaling, arena vs lower bound",
    "usage: optitpu bench compile [--json] [--reps K] [--max N] [--sizes N,N,...] [--passes]\n"
    "                             [--shape FAMILY[,FAMILY...]|all] [--seed S]\n"
    "\n"
    "Compiles generated graphs (a residual network with elementwise tails, reductions and\n"
    "side outputs) of 10k, 20k, 100k, 200k, 500k and 1M instructions at -O2 (up to --max N),\n"
    "native code off (the compiler's passes, not the system C compiler's time on the\n"
    "generated kernels),\n"
    "median of K runs after a warm-up (default 5, more where the runs are short: about half a\n"
    "second of runs per size, at most 100); the runs of a pair alternate. Prints the\n"
    "first run's time (memory new to the process), the wall and process CPU time,\n"
    "time(2N)/time(N), cpu(2N)/cpu(N) and the median of the runs' own ratios beside linear\n"
    "scaling (goal <= 2.3), and the arena size beside the peak of live bytes (goal <= 1.25x).\n"
    "--passes adds each stage's median time at the largest size beside the whole pipeline's.\n"
    "--sizes compiles those sizes instead (up to 8, each 2000 to 4000000), the first and\n"
    "second, third and fourth, ... compared as pairs; one size alone is what\n"
    "scripts/bench_compile_instructions.py counts the instructions of.\n"
    "--shape compiles graph-shape families instead (docs/compiler.md), each at 10k, 20k, 100k\n"
    "and 200k unless --sizes says otherwise, generated with seed S (default 42); linear is\n"
    "the ratio of the instructions the two modules have (goal: 200k in <= 1 s, <= 2.2 per\n"
    "doubling). Families: residual, braid, fanout, fanin, nested, bcast_reduce, islands,\n"
    "wide_tuple, many_params, dot_sandwich, random, fori_unrolled; all for every one.",
    run_compile_bench,
};
