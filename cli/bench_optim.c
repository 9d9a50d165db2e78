/* optitpu bench optim: one step of the device optimizer (ot_tpu_optimizer: every parameter's
 * update in one compiled executable, parameters and state donated) on N f32 parameters as K
 * tensors, beside a hand-written fused C loop of the same update in the same run, and the
 * achieved GB/s beside the machine's STREAM triad.
 *
 * Both sides run on the same thread pool of --threads threads (default: OPTITPU_THREADS, else the
 * CPU count): the step's kernels split over it (ot_run_options.pool), and the loop gives each
 * thread the same static slice of every tensor in one pool run. STREAM is measured with the same
 * threads. The rows name the thread count, and print each side's CPU time over its wall time
 * (how many CPUs were busy while it ran), measured, so a side that ran on fewer threads shows.
 *
 * Bytes per step are what the update must move at least: Adam/AdamW read p, g, m, v and write
 * p, m, v (28 bytes per parameter); SGD with momentum 20, plain SGD 12; other optimizers count
 * 4 bytes per parameter, gradient and state tensor read, and per parameter and state written. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* K tensor sizes summing to n: a deterministic mix spanning about three orders of magnitude
 * (as the layers of a network: many small, a few large). */
static void split_sizes(int64_t n, int k, int64_t *sz) {
    double w[4096], tot = 0;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < k; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(s >> 11) / 9007199254740992.0;
        w[i] = pow(1000.0, u);
        tot += w[i];
    }
    int64_t used = 0;
    for (int i = 0; i < k; i++) {
        sz[i] = (int64_t)((double)n * w[i] / tot);
        if (sz[i] < 1) sz[i] = 1;
        used += sz[i];
    }
    sz[k - 1] += n - used;
    if (sz[k - 1] < 1) sz[k - 1] = 1;
}

typedef struct loop_ctx {
    int k;
    float **p, **g, **m, **v;
    const int64_t *sz;
    double b1, b2, eps, wd;
    bool decoupled;
    int64_t step; /* of the current run */
    double lr;
} loop_ctx;

/* The loop is built for AVX-512, AVX2 and the baseline; the loader picks the widest the CPU
 * has, as the generated code targets the CPU it runs on. */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && __GNUC__ >= 11 &&            \
    !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define LOOP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LOOP_CLONES
#endif

/* The fused loop (torch's single-tensor Adam/AdamW formulas, the scalars in f64 on the host as
 * torch computes them): one pass over p, g, m, v per tensor, thread ith of nth taking the same
 * static slice of every tensor (64-byte aligned boundaries). */
LOOP_CLONES static void adam_loop(void *ctx, int ith, int nth) {
    const loop_ctx *c = ctx;
    int64_t step = c->step;
    double lr = c->lr;
    double bc1 = 1.0 - pow(c->b1, (double)step), bc2 = 1.0 - pow(c->b2, (double)step);
    float step_size = (float)(lr / bc1), bc2s = (float)sqrt(bc2), eps = (float)c->eps;
    float omb1 = (float)(1.0 - c->b1), b2 = (float)c->b2, omb2 = (float)(1.0 - c->b2);
    float decay = (float)(1.0 - lr * c->wd);
    for (int t = 0; t < c->k; t++) {
        float *restrict p = c->p[t], *restrict m = c->m[t], *restrict v = c->v[t];
        const float *restrict g = c->g[t];
        int64_t n = c->sz[t], per = (n + nth - 1) / nth;
        per = (per + 15) & ~(int64_t)15;
        int64_t b = (int64_t)ith * per, e = b + per < n ? b + per : n;
        const float dk = c->decoupled ? decay : 1.0f; /* x * 1.0f == x: Adam's p unchanged */
        for (int64_t i = b; i < e; i++) {
            float gi = g[i], pi = p[i] * dk;
            float mi = m[i] + omb1 * (gi - m[i]);
            float vi = v[i] * b2 + omb2 * (gi * gi);
            float denom = sqrtf(vi) / bc2s + eps;
            p[i] = pi + (-step_size) * (mi / denom);
            m[i] = mi;
            v[i] = vi;
        }
    }
}

static void run_loop(ot_threadpool *pool, loop_ctx *c, int64_t step, double lr) {
    c->step = step;
    c->lr = lr;
    ot_threadpool_run(pool, adam_loop, c);
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int run_optim_bench(int argc, char **argv) {
    const char *cmd = "bench optim";
    bool json = false, limits = true, fusion = true, flat = false;
    const char *name = "adam";
    int64_t n = 16 << 20, k = 1, reps = 5, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--no-limits")) {
            limits = false;
        } else if (!strcmp(argv[i], "--no-fusion")) {
            fusion = false;
        } else if (!strcmp(argv[i], "--flat")) {
            flat = true;
        } else if (!strcmp(argv[i], "--optimizer")) {
            if (!v) return cli_usage_error(cmd, "--optimizer needs a name");
            name = v;
            i++;
        } else if (!strcmp(argv[i], "--params")) {
            if (!v || !cli_parse_size(v, &n) || n < 1 || n > (int64_t)1 << 32)
                return cli_usage_error(cmd, "--params needs a count from 1 to 4G (K/M suffix)");
            i++;
        } else if (!strcmp(argv[i], "--tensors")) {
            if (!v || !cli_parse_i64(v, 1, 4096, &k))
                return cli_usage_error(cmd, "--tensors needs a number from 1 to 4096");
            i++;
        } else if (!strcmp(argv[i], "--threads")) {
            if (!v || !cli_parse_i64(v, 1, 1024, &threads))
                return cli_usage_error(cmd, "--threads needs a number from 1 to 1024");
            i++;
        } else if (!strcmp(argv[i], "--reps")) {
            if (!v || !cli_parse_i64(v, 1, 1000, &reps))
                return cli_usage_error(cmd, "--reps needs a number from 1 to 1000");
            i++;
        } else {
            return cli_usage_error(cmd, "unknown argument '%s'", argv[i]);
        }
    }
    if (k > n) return cli_usage_error(cmd, "more tensors (%lld) than parameters", (long long)k);
    int rc = CLI_FAIL;
    ot_optimizer *o = NULL;
    ot_tpu_optimizer *t = NULL, *tf = NULL; /* tf: flat mode (--flat) */
    ot_device *d = NULL;
    ot_threadpool *pool = NULL;
    int64_t *sz = calloc((size_t)k, sizeof *sz);
    ot_shape *shapes = calloc((size_t)k, sizeof *shapes);
    ot_buffer **pb = calloc((size_t)k, sizeof *pb), **gb = calloc((size_t)k, sizeof *gb);
    float **hp = calloc((size_t)k, sizeof *hp), **hg = calloc((size_t)k, sizeof *hg);
    float **hm = calloc((size_t)k, sizeof *hm), **hv = calloc((size_t)k, sizeof *hv);
    double *tt = calloc((size_t)reps, sizeof *tt), *tl = calloc((size_t)reps, sizeof *tl);
    double *tfl = calloc((size_t)reps, sizeof *tfl);
    if (!sz || !shapes || !pb || !gb || !hp || !hg || !hm || !hv || !tt || !tl || !tfl) {
        fprintf(stderr, "optitpu %s: out of memory\n", cmd);
        goto done;
    }
    if (ot_optimizer_new(name, &o) != OT_OK) {
        rc = cli_fail(cmd);
        goto done;
    }
    {
        /* memory admission (runtime.h), before anything big: the device's parameters, gradients
         * and state (twice with --flat), the staging tensor of one upload, the loop's 4 arrays */
        int64_t e = n * (int64_t)sizeof(float), ns = ot_optimizer_state_count(o);
        ot_mem_item need[] = {
            {"parameters and gradients", (flat ? 4 : 2) * e, true},
            {"optimizer state", (flat ? 2 : 1) * ns * e, true},
            {"upload staging", (n + k - 1) / k * (int64_t)sizeof(float), false},
            {"baseline loop arrays", 4 * e, false},
        };
        if (ot_mem_admit(cmd, need, 4, 1, 0, NULL) != OT_OK) {
            rc = cli_fail(cmd);
            goto done;
        }
    }
    /* the one pool both sides run on */
    if (ot_threadpool_create(threads ? (int)threads : ot_threadpool_size(ot_threadpool_default()),
                             &pool) != OT_OK) {
        rc = cli_fail(cmd);
        goto done;
    }
    int nthreads = ot_threadpool_size(pool);
    ot_run_options ro = ot_run_options_default();
    ro.pool = pool;
    split_sizes(n, (int)k, sz);
    for (int64_t i = 0; i < k; i++) ot_shape_make(&shapes[i], OT_F32, 1, &sz[i]);
    ot_bench_limits lim = {0};
    if (limits) {
        ot_bench_limits_options lo = ot_bench_limits_options_default();
        lo.what = OT_BENCH_LIMIT_STREAM;
        lo.threads = nthreads; /* the threads the device optimizer and the loop run on */
        if (ot_bench_limits_measure(&lo, &lim) != OT_OK) {
            rc = cli_fail(cmd);
            goto done;
        }
    }
    uint64_t c0 = ot_now_ns();
    ot_compile_options co = ot_compile_options_default();
    co.fusion = fusion;
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.compile = &co;
    if (ot_tpu_optimizer_create(o, shapes, (int)k, &to, &t) != OT_OK ||
        ot_host_device_create(0, 0, &d) != OT_OK || ot_tpu_optimizer_add_replica(t, d) != OT_OK) {
        rc = cli_fail(cmd);
        goto done;
    }
    double compile_s = (double)(ot_now_ns() - c0) / 1e9;
    if (flat) {
        to.flat = true;
        if (ot_tpu_optimizer_create(o, shapes, (int)k, &to, &tf) != OT_OK ||
            ot_tpu_optimizer_add_replica(tf, d) != OT_OK) {
            rc = cli_fail(cmd);
            goto done;
        }
    }
    /* parameters and gradients: the same values on the device and for the loop */
    for (int64_t i = 0; i < k; i++) {
        ot_tensor h;
        if (ot_tensor_alloc(&h, &shapes[i]) != OT_OK) {
            rc = cli_fail(cmd);
            goto done;
        }
        float *x = h.data;
        for (int64_t e = 0; e < sz[i]; e++) x[e] = (float)sin(0.001 * (double)(e + 7 * i));
        ot_status s = ot_buffer_from_host(d, &h, &pb[i]);
        if (s == OT_OK && tf) s = ot_tpu_optimizer_write_param(tf, d, (int)i, &h);
        hp[i] = ot_stream_alloc((size_t)sz[i] * sizeof(float));
        if (hp[i]) memcpy(hp[i], x, (size_t)sz[i] * sizeof(float));
        for (int64_t e = 0; e < sz[i]; e++) x[e] = (float)(0.01 * cos(0.003 * (double)(e + i)));
        if (s == OT_OK) s = ot_buffer_from_host(d, &h, &gb[i]);
        if (s == OT_OK && tf) s = ot_tpu_optimizer_write_grad(tf, d, (int)i, &h);
        hg[i] = ot_stream_alloc((size_t)sz[i] * sizeof(float));
        if (hg[i]) memcpy(hg[i], x, (size_t)sz[i] * sizeof(float));
        /* the loop's arrays are huge-page backed like the device's buffers (memory pool) */
        hm[i] = ot_stream_alloc((size_t)sz[i] * sizeof(float));
        hv[i] = ot_stream_alloc((size_t)sz[i] * sizeof(float));
        if (hm[i]) memset(hm[i], 0, (size_t)sz[i] * sizeof(float));
        if (hv[i]) memset(hv[i], 0, (size_t)sz[i] * sizeof(float));
        ot_tensor_release(&h);
        if (s != OT_OK || !hp[i] || !hg[i] || !hm[i] || !hv[i]) {
            rc = s != OT_OK ? cli_fail(cmd) : CLI_FAIL;
            goto done;
        }
    }
    const char *nm = ot_optimizer_name(o);
    bool adam = !strcmp(nm, "adam") || !strcmp(nm, "adamw");
    double b1 = ot_optimizer_hparam(o, "beta1"), b2 = ot_optimizer_hparam(o, "beta2");
    loop_ctx lc = {.k = (int)k,
                   .p = hp,
                   .g = hg,
                   .m = hm,
                   .v = hv,
                   .sz = sz,
                   .b1 = b1,
                   .b2 = b2,
                   .eps = ot_optimizer_hparam(o, "eps"),
                   .wd = ot_optimizer_hparam(o, "weight_decay"),
                   .decoupled = !strcmp(nm, "adamw")};
    adam = adam && ot_optimizer_hparam(o, "amsgrad") == 0.0;
    double lr = 1e-3;
    /* warm-up step 1, then reps timed steps */
    if (ot_tpu_optimizer_step(t, d, pb, gb, 1, lr, &ro) != OT_OK ||
        (tf && ot_tpu_optimizer_step_flat(tf, d, 1, lr, &ro) != OT_OK)) {
        rc = cli_fail(cmd);
        goto done;
    }
    if (adam) run_loop(pool, &lc, 1, lr);
    double cpu_step = 0, wall_step = 0, cpu_loop = 0, wall_loop = 0;
    for (int64_t r = 0; r < reps; r++) {
        /* with --flat the two modes take turns going first (neither always finds the caches
         * the other left) */
        uint64_t t0;
        for (int turn = 0; turn < 2; turn++) {
            if ((turn == 0) == (tf && (r & 1))) {
                if (!tf) continue;
                t0 = ot_now_ns();
                if (ot_tpu_optimizer_step_flat(tf, d, 2 + r, lr, &ro) != OT_OK) {
                    rc = cli_fail(cmd);
                    goto done;
                }
                tfl[r] = (double)(ot_now_ns() - t0) / 1e9;
            } else {
                double c0s = cpu_seconds();
                t0 = ot_now_ns();
                if (ot_tpu_optimizer_step(t, d, pb, gb, 2 + r, lr, &ro) != OT_OK) {
                    rc = cli_fail(cmd);
                    goto done;
                }
                tt[r] = (double)(ot_now_ns() - t0) / 1e9;
                cpu_step += cpu_seconds() - c0s;
                wall_step += tt[r];
            }
        }
        if (adam) {
            double c0s = cpu_seconds();
            t0 = ot_now_ns();
            run_loop(pool, &lc, 2 + r, lr);
            tl[r] = (double)(ot_now_ns() - t0) / 1e9;
            cpu_loop += cpu_seconds() - c0s;
            wall_loop += tl[r];
        }
    }
    /* the two computed the same update: elements that differ, largest difference */
    double maxdiff = 0;
    int64_t ndiff = 0;
    for (int64_t i = 0; adam && i < k; i++) {
        ot_tensor h;
        if (ot_buffer_to_host(pb[i], &h) != OT_OK) {
            rc = cli_fail(cmd);
            goto done;
        }
        for (int64_t e = 0; e < sz[i]; e++) {
            double dd = fabs((double)((float *)h.data)[e] - hp[i][e]);
            maxdiff = fmax(maxdiff, dd);
            ndiff += ((float *)h.data)[e] != hp[i][e];
        }
        ot_tensor_release(&h);
    }
    /* flat mode computed exactly what the per-tensor mode did: elements that differ */
    int64_t nflatdiff = 0;
    for (int64_t i = 0; tf && i < k; i++) {
        ot_tensor a, b;
        if (ot_buffer_to_host(pb[i], &a) != OT_OK) {
            rc = cli_fail(cmd);
            goto done;
        }
        if (ot_tpu_optimizer_read_param(tf, d, (int)i, &b) != OT_OK) {
            ot_tensor_release(&a);
            rc = cli_fail(cmd);
            goto done;
        }
        for (int64_t e = 0; e < sz[i]; e++)
            nflatdiff += memcmp((float *)a.data + e, (float *)b.data + e, sizeof(float)) != 0;
        ot_tensor_release(&a);
        ot_tensor_release(&b);
    }
    /* what one update reads and writes, from the wrapper's own profile (28 B per parameter for
     * Adam: p read+written, g read, m and v read+written) */
    ot_tpu_profile prof;
    if (ot_tpu_optimizer_profile(t, &prof) != OT_OK) {
        rc = cli_fail(cmd);
        goto done;
    }
    double bytes = (double)prof.bytes_per_step;
    double step_s = ot_bench_median(tt, (size_t)reps);
    char cs[96];
    snprintf(cs, sizeof cs, "%s f32 %lldM x%lld", nm, (long long)(n >> 20), (long long)k);
    if (n < (1 << 20)) snprintf(cs, sizeof cs, "%s f32 %lld x%lld", nm, (long long)n, (long long)k);
    ot_bench_print_header(json);
    char c1[192];
    snprintf(c1, sizeof c1, "%s compile (once)", cs);
    ot_bench_row rc0 = {"optim", c1, "s", compile_s, NULL, 0, 0};
    ot_bench_print(&rc0, json);
    char thr[32], base[96];
    snprintf(thr, sizeof thr, "%d thread%s", nthreads, nthreads == 1 ? "" : "s");
    snprintf(c1, sizeof c1, "%s step, %s", cs, thr);
    if (adam) {
        double loop_s = ot_bench_median(tl, (size_t)reps);
        snprintf(base, sizeof base, "fused C loop, %s", thr);
        ot_bench_row r = {"optim", c1,           "ms/step",      step_s * 1e3,
                          base,    loop_s * 1e3, loop_s / step_s};
        ot_bench_print(&r, json);
        /* measured: CPUs busy while each side ran (process CPU time / wall time over the timed
         * steps; idle pool workers spin briefly before they block, on both sides alike) */
        snprintf(c1, sizeof c1, "%s step CPUs busy (CPU time / wall time)", cs);
        snprintf(base, sizeof base, "fused C loop CPUs busy, %s", thr);
        ot_bench_row rcpu = {"optim", c1,
                             "CPUs",  wall_step > 0 ? cpu_step / wall_step : 0,
                             base,    wall_loop > 0 ? cpu_loop / wall_loop : 0,
                             NAN}; /* neither side is "better": no ratio */
        ot_bench_print(&rcpu, json);
        snprintf(c1, sizeof c1, "%s parameters != loop's", cs);
        ot_bench_row rd = {"optim", c1, "elements", (double)ndiff, NULL, 0, 0};
        ot_bench_print(&rd, json);
        snprintf(c1, sizeof c1, "%s max |p - loop p|", cs);
        ot_bench_row rm = {"optim", c1, "abs", maxdiff, NULL, 0, 0};
        ot_bench_print(&rm, json);
    } else {
        ot_bench_row r = {"optim", c1, "ms/step", step_s * 1e3, NULL, 0, 0};
        ot_bench_print(&r, json);
        snprintf(c1, sizeof c1, "%s step CPUs busy (CPU time / wall time)", cs);
        ot_bench_row rcpu = {"optim", c1, "CPUs", wall_step > 0 ? cpu_step / wall_step : 0,
                             NULL,    0,  0};
        ot_bench_print(&rcpu, json);
    }
    ot_tpu_profile fprof;
    if (tf && ot_tpu_optimizer_profile(tf, &fprof) != OT_OK) {
        rc = cli_fail(cmd);
        goto done;
    }
    if (tf) { /* module build + compile, from the profiles */
        double flat_s = ot_bench_median(tfl, (size_t)reps);
        snprintf(c1, sizeof c1, "%s flat module compile", cs);
        ot_bench_row f0 = {"optim",
                           c1,
                           "s",
                           fprof.compile_seconds,
                           "per-tensor module compile",
                           prof.compile_seconds,
                           prof.compile_seconds / fprof.compile_seconds};
        ot_bench_print(&f0, json);
        snprintf(c1, sizeof c1, "%s flat step, %s", cs, thr);
        snprintf(base, sizeof base, "per-tensor step, %s", thr);
        ot_bench_row f1 = {"optim", c1,           "ms/step",      flat_s * 1e3,
                           base,    step_s * 1e3, step_s / flat_s};
        ot_bench_print(&f1, json);
        snprintf(c1, sizeof c1, "%s flat kernels", cs);
        ot_bench_row f2 = {"optim",
                           c1,
                           "count",
                           (double)ot_executable_kernel_count(ot_tpu_optimizer_executable(tf)),
                           "per-tensor kernels",
                           (double)ot_executable_kernel_count(ot_tpu_optimizer_executable(t)),
                           NAN};
        ot_bench_print(&f2, json);
        snprintf(c1, sizeof c1, "%s flat parameters != per-tensor's", cs);
        ot_bench_row f3 = {"optim", c1, "elements", (double)nflatdiff, NULL, 0, 0};
        ot_bench_print(&f3, json);
    }
    snprintf(c1, sizeof c1, "%s, %s", cs, thr);
    double gbs = bytes / step_s / 1e9;
    snprintf(base, sizeof base, "STREAM triad, %d thread%s", lim.threads,
             lim.threads == 1 ? "" : "s");
    ot_bench_row rg = {"optim",
                       c1,
                       "GB/s",
                       gbs,
                       limits ? base : NULL,
                       lim.triad_gbs,
                       limits && lim.triad_gbs > 0 ? gbs / lim.triad_gbs : 0};
    ot_bench_print(&rg, json);
    snprintf(c1, sizeof c1, "%s bytes per step (profile)", cs);
    ot_bench_row rb = {"optim", c1, "B", bytes, NULL, 0, 0};
    ot_bench_print(&rb, json);
    snprintf(c1, sizeof c1, "%s profile: mean of %lld steps", cs, (long long)prof.steps);
    ot_bench_row rp = {"optim", c1, "ms/step", 1e3 * prof.total_step_seconds / (double)prof.steps,
                       NULL,    0,  0};
    ot_bench_print(&rp, json);
    snprintf(c1, sizeof c1, "%s compiles after %lld steps", cs, (long long)reps + 1);
    ot_bench_row rn = {"optim", c1, "count", (double)ot_tpu_optimizer_compile_count(t), NULL, 0, 0};
    ot_bench_print(&rn, json);
    rc = CLI_OK;
done:
    for (int64_t i = 0; i < k; i++) {
        if (pb) ot_buffer_free(pb[i]);
        if (gb) ot_buffer_free(gb[i]);
        if (hp) ot_aligned_free(hp[i]);
        if (hg) ot_aligned_free(hg[i]);
        if (hm) ot_aligned_free(hm[i]);
        if (hv) ot_aligned_free(hv[i]);
    }
    ot_tpu_optimizer_free(t);
    ot_tpu_optimizer_free(tf);
    ot_device_free(d);
    ot_threadpool_free(pool);
    ot_optimizer_free(o);
    free(sz);
    free(shapes);
    free(pb);
    free(gb);
    free(hp);
    free(hg);
    free(hm);
    free(hv);
    free(tt);
    free(tl);
    free(tfl);
    return rc;
}

const cli_command cli_bench_optim = {
    "optim",
    "device optimizer step (one compiled update, donated) vs a fused C loop; GB/s vs STREAM",
    "usage: optitpu bench optim [--optimizer NAME] [--params N] [--tensors K] [--reps R]\n"
    "                           [--threads T] [--flat] [--no-fusion] [--no-limits] [--json]\n"
    "\n"
    "Steps NAME (default adam) over N f32 parameters (default 16M; K/M/G suffixes) split into K\n"
    "tensors of mixed sizes (default 1) with ot_tpu_optimizer on one host device: compile time\n"
    "(once), the median step time of R steps (default 5) after a warm-up beside a hand-written\n"
    "fused C loop of the same update (adam, adamw) in the same run, the largest difference of the\n"
    "two results, and the achieved GB/s beside the STREAM triad (skipped with --no-limits).\n"
    "Everything runs on one pool of T threads (default OPTITPU_THREADS, else the CPU count): the\n"
    "step's kernels, the loop (a static slice of every tensor per thread) and STREAM; each side's\n"
    "CPU time over its wall time is printed too (the CPUs that were busy while it ran).\n"
    "--no-fusion compiles without fusion (plain elementwise kernels). --flat also steps a\n"
    "flat-mode wrapper (one buffer per dtype, one update over it) on the same data in the same\n"
    "run: its step time beside the per-tensor mode's, kernel counts, and the elements where the\n"
    "two results differ (0: bit-identical).",
    run_optim_bench,
};
