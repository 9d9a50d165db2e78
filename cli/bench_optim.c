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

typedef struct bench_args {
    bool json, limits, fusion, flat;
    int state; /* --state: a flat wrapper with compressed state beside the flat f32 one */
    bool sr;   /* --state bf16-sr: stochastic rounding */
    const char *name;
    int64_t n, k, reps, threads;
} bench_args;

/* Everything one run holds; bench_free releases what was made, whatever phase stopped. */
typedef struct bench {
    bench_args a;
    ot_optimizer *o;
    ot_tpu_optimizer *t, *tf; /* tf: flat mode (--flat) */
    ot_tpu_optimizer *tc;     /* --state: flat mode with compressed state */
    ot_device *d;
    ot_threadpool *pool;
    int nthreads;
    ot_run_options ro;
    int64_t *sz;
    ot_shape *shapes;
    ot_buffer **pb, **gb;
    float **hp, **hg, **hm, **hv; /* the loop's p, g, m, v */
    double *tt, *tl, *tfl, *tcl;  /* per rep: step, loop, flat step, compressed step seconds */
    double *cfl, *ccl;            /* per rep: CPU seconds of the flat and the compressed step */
    ot_bench_limits lim;
    double compile_s;
    const char *nm; /* the optimizer's name */
    bool adam;      /* the loop runs beside the step (adam, adamw without amsgrad) */
    loop_ctx lc;
    double lr;
    double cpu_step, wall_step, cpu_loop, wall_loop;
    double maxdiff;
    int64_t ndiff, nflatdiff;
    ot_tpu_profile prof;
} bench;

static const char *const CMD = "bench optim";

/* Returns CLI_OK, or the usage error's code. */
static int parse_args(int argc, char **argv, bench_args *a) {
    *a = (bench_args){
        .limits = true, .fusion = true, .name = "adam", .n = 16 << 20, .k = 1, .reps = 5};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--json")) {
            a->json = true;
        } else if (!strcmp(argv[i], "--no-limits")) {
            a->limits = false;
        } else if (!strcmp(argv[i], "--no-fusion")) {
            a->fusion = false;
        } else if (!strcmp(argv[i], "--flat")) {
            a->flat = true;
        } else if (!strcmp(argv[i], "--state")) {
            if (!v || (strcmp(v, "bf16") && strcmp(v, "bf16-sr") && strcmp(v, "int8")))
                return cli_usage_error(CMD, "--state needs bf16, bf16-sr or int8");
            a->state = strcmp(v, "int8") ? OT_TPU_STATE_BF16 : OT_TPU_STATE_INT8;
            a->sr = !strcmp(v, "bf16-sr");
            a->flat = true;
            i++;
        } else if (!strcmp(argv[i], "--optimizer")) {
            if (!v) return cli_usage_error(CMD, "--optimizer needs a name");
            a->name = v;
            i++;
        } else if (!strcmp(argv[i], "--params")) {
            if (!v || !cli_parse_size(v, &a->n) || a->n < 1 || a->n > (int64_t)1 << 32)
                return cli_usage_error(CMD, "--params needs a count from 1 to 4G (K/M suffix)");
            i++;
        } else if (!strcmp(argv[i], "--tensors")) {
            if (!v || !cli_parse_i64(v, 1, 4096, &a->k))
                return cli_usage_error(CMD, "--tensors needs a number from 1 to 4096");
            i++;
        } else if (!strcmp(argv[i], "--threads")) {
            if (!v || !cli_parse_i64(v, 1, 1024, &a->threads))
                return cli_usage_error(CMD, "--threads needs a number from 1 to 1024");
            i++;
        } else if (!strcmp(argv[i], "--reps")) {
            if (!v || !cli_parse_i64(v, 1, 1000, &a->reps))
                return cli_usage_error(CMD, "--reps needs a number from 1 to 1000");
            i++;
        } else {
            return cli_usage_error(CMD, "unknown argument '%s'", argv[i]);
        }
    }
    if (a->k > a->n)
        return cli_usage_error(CMD, "more tensors (%lld) than parameters", (long long)a->k);
    return CLI_OK;
}

/* The per-tensor and per-rep arrays, the optimizer and the memory admission: before anything
 * big is allocated. */
static int bench_prepare(bench *b) {
    size_t k = (size_t)b->a.k, reps = (size_t)b->a.reps;
    b->sz = calloc(k, sizeof *b->sz);
    b->shapes = calloc(k, sizeof *b->shapes);
    b->pb = calloc(k, sizeof *b->pb), b->gb = calloc(k, sizeof *b->gb);
    b->hp = calloc(k, sizeof *b->hp), b->hg = calloc(k, sizeof *b->hg);
    b->hm = calloc(k, sizeof *b->hm), b->hv = calloc(k, sizeof *b->hv);
    b->tt = calloc(reps, sizeof *b->tt), b->tl = calloc(reps, sizeof *b->tl);
    b->tfl = calloc(reps, sizeof *b->tfl);
    b->tcl = calloc(reps, sizeof *b->tcl);
    b->cfl = calloc(reps, sizeof *b->cfl), b->ccl = calloc(reps, sizeof *b->ccl);
    if (!b->sz || !b->shapes || !b->pb || !b->gb || !b->hp || !b->hg || !b->hm || !b->hv ||
        !b->tt || !b->tl || !b->tfl || !b->tcl || !b->cfl || !b->ccl) {
        fprintf(stderr, "optitpu %s: out of memory\n", CMD);
        return CLI_FAIL;
    }
    if (ot_optimizer_new(b->a.name, &b->o) != OT_OK) return cli_fail(CMD);
    /* memory admission (runtime.h), before anything big: the device's parameters, gradients
     * and state (twice with --flat), the staging tensor of one upload, the loop's 4 arrays */
    int64_t n = b->a.n, e = n * (int64_t)sizeof(float), ns = ot_optimizer_state_count(b->o);
    ot_mem_item need[] = {
        {"parameters and gradients", (b->a.flat ? 4 : 2) * e + (b->a.state ? 2 * e : 0), true},
        {"optimizer state", (b->a.flat ? 2 : 1) * ns * e + (b->a.state ? ns * e / 2 : 0), true},
        {"upload staging", (n + b->a.k - 1) / b->a.k * (int64_t)sizeof(float), false},
        {"baseline loop arrays", 4 * e, false},
    };
    if (ot_mem_admit(CMD, need, 4, 1, 0, NULL) != OT_OK) return cli_fail(CMD);
    return CLI_OK;
}

/* The one pool both sides run on, the tensor sizes, STREAM on the pool's threads, and the
 * compiled optimizer(s) on one host device. */
static int bench_setup(bench *b) {
    int64_t k = b->a.k;
    if (ot_threadpool_create(b->a.threads ? (int)b->a.threads
                                          : ot_threadpool_size(ot_threadpool_default()),
                             &b->pool) != OT_OK)
        return cli_fail(CMD);
    b->nthreads = ot_threadpool_size(b->pool);
    b->ro = ot_run_options_default();
    b->ro.pool = b->pool;
    split_sizes(b->a.n, (int)k, b->sz);
    for (int64_t i = 0; i < k; i++) ot_shape_make(&b->shapes[i], OT_F32, 1, &b->sz[i]);
    if (b->a.limits) {
        ot_bench_limits_options lo = ot_bench_limits_options_default();
        lo.what = OT_BENCH_LIMIT_STREAM;
        lo.threads = b->nthreads; /* the threads the device optimizer and the loop run on */
        if (ot_bench_limits_measure(&lo, &b->lim) != OT_OK) return cli_fail(CMD);
    }
    uint64_t c0 = ot_now_ns();
    ot_compile_options co = ot_compile_options_default();
    co.fusion = b->a.fusion;
    ot_tpu_optimizer_options to = ot_tpu_optimizer_options_default();
    to.compile = &co;
    if (ot_tpu_optimizer_create(b->o, b->shapes, (int)k, &to, &b->t) != OT_OK ||
        ot_host_device_create(0, 0, &b->d) != OT_OK ||
        ot_tpu_optimizer_add_replica(b->t, b->d) != OT_OK)
        return cli_fail(CMD);
    b->compile_s = (double)(ot_now_ns() - c0) / 1e9;
    if (b->a.flat) {
        to.flat = true;
        if (ot_tpu_optimizer_create(b->o, b->shapes, (int)k, &to, &b->tf) != OT_OK ||
            ot_tpu_optimizer_add_replica(b->tf, b->d) != OT_OK)
            return cli_fail(CMD);
    }
    if (b->a.state) {
        to.flat = true;
        to.state_format = (ot_tpu_state_format)b->a.state;
        to.state_stochastic_rounding = b->a.sr;
        if (ot_tpu_optimizer_create(b->o, b->shapes, (int)k, &to, &b->tc) != OT_OK ||
            ot_tpu_optimizer_add_replica(b->tc, b->d) != OT_OK)
            return cli_fail(CMD);
    }
    return CLI_OK;
}

/* Parameters and gradients: the same values on the device and for the loop. */
static int bench_fill(bench *b) {
    for (int64_t i = 0; i < b->a.k; i++) {
        int64_t n = b->sz[i];
        size_t nb = (size_t)n * sizeof(float);
        ot_tensor h;
        if (ot_tensor_alloc(&h, &b->shapes[i]) != OT_OK) return cli_fail(CMD);
        float *x = h.data;
        for (int64_t e = 0; e < n; e++) x[e] = (float)sin(0.001 * (double)(e + 7 * i));
        ot_status s = ot_buffer_from_host(b->d, &h, &b->pb[i]);
        if (s == OT_OK && b->tf) s = ot_tpu_optimizer_write_param(b->tf, b->d, (int)i, &h);
        if (s == OT_OK && b->tc) s = ot_tpu_optimizer_write_param(b->tc, b->d, (int)i, &h);
        b->hp[i] = ot_stream_alloc(nb);
        if (b->hp[i]) memcpy(b->hp[i], x, nb);
        for (int64_t e = 0; e < n; e++) x[e] = (float)(0.01 * cos(0.003 * (double)(e + i)));
        if (s == OT_OK) s = ot_buffer_from_host(b->d, &h, &b->gb[i]);
        if (s == OT_OK && b->tf) s = ot_tpu_optimizer_write_grad(b->tf, b->d, (int)i, &h);
        if (s == OT_OK && b->tc) s = ot_tpu_optimizer_write_grad(b->tc, b->d, (int)i, &h);
        b->hg[i] = ot_stream_alloc(nb);
        if (b->hg[i]) memcpy(b->hg[i], x, nb);
        /* the loop's arrays are huge-page backed like the device's buffers (memory pool) */
        b->hm[i] = ot_stream_alloc(nb);
        b->hv[i] = ot_stream_alloc(nb);
        if (b->hm[i]) memset(b->hm[i], 0, nb);
        if (b->hv[i]) memset(b->hv[i], 0, nb);
        ot_tensor_release(&h);
        if (s != OT_OK || !b->hp[i] || !b->hg[i] || !b->hm[i] || !b->hv[i])
            return s != OT_OK ? cli_fail(CMD) : CLI_FAIL;
    }
    return CLI_OK;
}

/* The loop's hyperparameters from the optimizer's; adam false where no loop is written for it. */
static void bench_loop_setup(bench *b) {
    ot_optimizer *o = b->o;
    b->nm = ot_optimizer_name(o);
    b->adam = !strcmp(b->nm, "adam") || !strcmp(b->nm, "adamw");
    b->lc = (loop_ctx){.k = (int)b->a.k,
                       .p = b->hp,
                       .g = b->hg,
                       .m = b->hm,
                       .v = b->hv,
                       .sz = b->sz,
                       .b1 = ot_optimizer_hparam(o, "beta1"),
                       .b2 = ot_optimizer_hparam(o, "beta2"),
                       .eps = ot_optimizer_hparam(o, "eps"),
                       .wd = ot_optimizer_hparam(o, "weight_decay"),
                       .decoupled = !strcmp(b->nm, "adamw")};
    b->adam = b->adam && ot_optimizer_hparam(o, "amsgrad") == 0.0;
    b->lr = 1e-3;
}

/* Timed step r (step number 2 + r): the per-tensor step and, with --flat, the flat step, then
 * the loop. */
static int bench_rep(bench *b, int64_t r) {
    double lr = b->lr;
    /* with --flat the two modes take turns going first (neither always finds the caches the
     * other left) */
    uint64_t t0;
    for (int turn = 0; turn < 2; turn++) {
        if ((turn == 0) == (b->tf && (r & 1))) {
            if (!b->tf) continue;
            double c0s = cpu_seconds();
            t0 = ot_now_ns();
            if (ot_tpu_optimizer_step_flat(b->tf, b->d, 2 + r, lr, &b->ro) != OT_OK)
                return cli_fail(CMD);
            b->tfl[r] = (double)(ot_now_ns() - t0) / 1e9;
            b->cfl[r] = cpu_seconds() - c0s;
        } else {
            double c0s = cpu_seconds();
            t0 = ot_now_ns();
            if (ot_tpu_optimizer_step(b->t, b->d, b->pb, b->gb, 2 + r, lr, &b->ro) != OT_OK)
                return cli_fail(CMD);
            b->tt[r] = (double)(ot_now_ns() - t0) / 1e9;
            b->cpu_step += cpu_seconds() - c0s;
            b->wall_step += b->tt[r];
        }
    }
    if (b->tc) { /* compressed state: after the f32 flat step, which alternates with the
                  * per-tensor one */
        double c0s = cpu_seconds();
        t0 = ot_now_ns();
        if (ot_tpu_optimizer_step_flat(b->tc, b->d, 2 + r, lr, &b->ro) != OT_OK)
            return cli_fail(CMD);
        b->tcl[r] = (double)(ot_now_ns() - t0) / 1e9;
        b->ccl[r] = cpu_seconds() - c0s;
    }
    if (b->adam) {
        double c0s = cpu_seconds();
        t0 = ot_now_ns();
        run_loop(b->pool, &b->lc, 2 + r, lr);
        b->tl[r] = (double)(ot_now_ns() - t0) / 1e9;
        b->cpu_loop += cpu_seconds() - c0s;
        b->wall_loop += b->tl[r];
    }
    return CLI_OK;
}

/* Warm-up step 1, then reps timed steps. */
static int bench_time(bench *b) {
    if (ot_tpu_optimizer_step(b->t, b->d, b->pb, b->gb, 1, b->lr, &b->ro) != OT_OK ||
        (b->tf && ot_tpu_optimizer_step_flat(b->tf, b->d, 1, b->lr, &b->ro) != OT_OK) ||
        (b->tc && ot_tpu_optimizer_step_flat(b->tc, b->d, 1, b->lr, &b->ro) != OT_OK))
        return cli_fail(CMD);
    if (b->adam) run_loop(b->pool, &b->lc, 1, b->lr);
    for (int64_t r = 0; r < b->a.reps; r++) {
        int rc = bench_rep(b, r);
        if (rc != CLI_OK) return rc;
    }
    return CLI_OK;
}

/* The loop and the step computed the same update: elements that differ, largest difference;
 * flat mode computed exactly what the per-tensor mode did: elements that differ. */
static int bench_compare(bench *b) {
    for (int64_t i = 0; b->adam && i < b->a.k; i++) {
        ot_tensor h;
        if (ot_buffer_to_host(b->pb[i], &h) != OT_OK) return cli_fail(CMD);
        const float *x = h.data;
        for (int64_t e = 0; e < b->sz[i]; e++) {
            double dd = fabs((double)x[e] - b->hp[i][e]);
            b->maxdiff = fmax(b->maxdiff, dd);
            b->ndiff += x[e] != b->hp[i][e];
        }
        ot_tensor_release(&h);
    }
    for (int64_t i = 0; b->tf && i < b->a.k; i++) {
        ot_tensor x, y;
        if (ot_buffer_to_host(b->pb[i], &x) != OT_OK) return cli_fail(CMD);
        if (ot_tpu_optimizer_read_param(b->tf, b->d, (int)i, &y) != OT_OK) {
            ot_tensor_release(&x);
            return cli_fail(CMD);
        }
        for (int64_t e = 0; e < b->sz[i]; e++)
            b->nflatdiff += memcmp((float *)x.data + e, (float *)y.data + e, sizeof(float)) != 0;
        ot_tensor_release(&x);
        ot_tensor_release(&y);
    }
    /* what one update reads and writes, from the wrapper's own profile (28 B per parameter for
     * Adam: p read+written, g read, m and v read+written) */
    if (ot_tpu_optimizer_profile(b->t, &b->prof) != OT_OK) return cli_fail(CMD);
    return CLI_OK;
}

/* Prints one row; a NULL baseline prints none. */
static void put_row(const bench *b, const char *config, const char *metric, double value,
                    const char *base, double base_value, double ratio) {
    ot_bench_row r = {"optim", config, metric, value, base, base_value, ratio};
    ot_bench_print(&r, b->a.json);
}

/* The step beside the loop (adam, adamw), or the step alone. */
static void report_step(const bench *b, const char *cs, const char *thr, double step_s) {
    char c1[192], base[96];
    snprintf(c1, sizeof c1, "%s step, %s", cs, thr);
    double busy_step = b->wall_step > 0 ? b->cpu_step / b->wall_step : 0;
    if (!b->adam) {
        put_row(b, c1, "ms/step", step_s * 1e3, NULL, 0, 0);
        snprintf(c1, sizeof c1, "%s step CPUs busy (CPU time / wall time)", cs);
        put_row(b, c1, "CPUs", busy_step, NULL, 0, 0);
        return;
    }
    double loop_s = ot_bench_median(b->tl, (size_t)b->a.reps);
    snprintf(base, sizeof base, "fused C loop, %s", thr);
    put_row(b, c1, "ms/step", step_s * 1e3, base, loop_s * 1e3, loop_s / step_s);
    /* measured: CPUs busy while each side ran (process CPU time / wall time over the timed
     * steps; idle pool workers spin briefly before they block, on both sides alike) */
    snprintf(c1, sizeof c1, "%s step CPUs busy (CPU time / wall time)", cs);
    snprintf(base, sizeof base, "fused C loop CPUs busy, %s", thr);
    put_row(b, c1, "CPUs", busy_step, base, b->wall_loop > 0 ? b->cpu_loop / b->wall_loop : 0,
            NAN); /* neither side is "better": no ratio */
    snprintf(c1, sizeof c1, "%s parameters != loop's", cs);
    put_row(b, c1, "elements", (double)b->ndiff, NULL, 0, 0);
    snprintf(c1, sizeof c1, "%s max |p - loop p|", cs);
    put_row(b, c1, "abs", b->maxdiff, NULL, 0, 0);
}

/* --flat: module build + compile from the profiles, the step, kernel counts, differences. */
static int report_flat(const bench *b, const char *cs, const char *thr, double step_s) {
    ot_tpu_profile fprof;
    if (ot_tpu_optimizer_profile(b->tf, &fprof) != OT_OK) return cli_fail(CMD);
    char c1[192], base[96];
    double flat_s = ot_bench_median(b->tfl, (size_t)b->a.reps);
    snprintf(c1, sizeof c1, "%s flat module compile", cs);
    put_row(b, c1, "s", fprof.compile_seconds, "per-tensor module compile", b->prof.compile_seconds,
            b->prof.compile_seconds / fprof.compile_seconds);
    snprintf(c1, sizeof c1, "%s flat step, %s", cs, thr);
    snprintf(base, sizeof base, "per-tensor step, %s", thr);
    put_row(b, c1, "ms/step", flat_s * 1e3, base, step_s * 1e3, step_s / flat_s);
    snprintf(c1, sizeof c1, "%s flat kernels", cs);
    put_row(b, c1, "count", (double)ot_executable_kernel_count(ot_tpu_optimizer_executable(b->tf)),
            "per-tensor kernels",
            (double)ot_executable_kernel_count(ot_tpu_optimizer_executable(b->t)), NAN);
    snprintf(c1, sizeof c1, "%s flat parameters != per-tensor's", cs);
    put_row(b, c1, "elements", (double)b->nflatdiff, NULL, 0, 0);
    if (b->tc) { /* compressed state beside the flat f32 state: time, bytes per parameter */
        ot_tpu_profile cprof;
        if (ot_tpu_optimizer_profile(b->tc, &cprof) != OT_OK) return cli_fail(CMD);
        const char *sn = b->a.state == OT_TPU_STATE_INT8 ? "int8-state"
                         : b->a.sr                       ? "bf16-state (stochastic rounding)"
                                                         : "bf16-state";
        double cs_s = ot_bench_median(b->tcl, (size_t)b->a.reps);
        snprintf(c1, sizeof c1, "%s flat %s step, %s", cs, sn, thr);
        snprintf(base, sizeof base, "flat f32-state step, %s", thr);
        put_row(b, c1, "ms/step", cs_s * 1e3, base, flat_s * 1e3, flat_s / cs_s);
        /* CPU time, which a loaded machine stretches far less than wall time */
        double cc = ot_bench_median(b->ccl, (size_t)b->a.reps),
               cf = ot_bench_median(b->cfl, (size_t)b->a.reps);
        snprintf(c1, sizeof c1, "%s flat %s CPU time per step, %s", cs, sn, thr);
        snprintf(base, sizeof base, "flat f32-state CPU time, %s", thr);
        put_row(b, c1, "ms/step", cc * 1e3, base, cf * 1e3, cf / cc);
        double np = (double)b->a.n;
        snprintf(c1, sizeof c1, "%s flat %s bytes moved per parameter", cs, sn);
        put_row(b, c1, "B", (double)cprof.bytes_per_step / np, "f32 state",
                (double)fprof.bytes_per_step / np, NAN);
        snprintf(c1, sizeof c1, "%s flat %s kernels", cs, sn);
        put_row(b, c1, "count",
                (double)ot_executable_kernel_count(ot_tpu_optimizer_executable(b->tc)), NULL, 0, 0);
    }
    return CLI_OK;
}

static int bench_report(const bench *b) {
    int64_t n = b->a.n, k = b->a.k;
    int nthreads = b->nthreads;
    double bytes = (double)b->prof.bytes_per_step;
    double step_s = ot_bench_median(b->tt, (size_t)b->a.reps);
    char cs[96];
    snprintf(cs, sizeof cs, "%s f32 %lldM x%lld", b->nm, (long long)(n >> 20), (long long)k);
    if (n < (1 << 20))
        snprintf(cs, sizeof cs, "%s f32 %lld x%lld", b->nm, (long long)n, (long long)k);
    ot_bench_print_header(b->a.json);
    char c1[192];
    snprintf(c1, sizeof c1, "%s compile (once)", cs);
    put_row(b, c1, "s", b->compile_s, NULL, 0, 0);
    char thr[32], base[96];
    snprintf(thr, sizeof thr, "%d thread%s", nthreads, nthreads == 1 ? "" : "s");
    report_step(b, cs, thr, step_s);
    if (b->tf) {
        int rc = report_flat(b, cs, thr, step_s);
        if (rc != CLI_OK) return rc;
    }
    snprintf(c1, sizeof c1, "%s, %s", cs, thr);
    double gbs = bytes / step_s / 1e9;
    const ot_bench_limits *lim = &b->lim;
    snprintf(base, sizeof base, "STREAM triad, %d thread%s", lim->threads,
             lim->threads == 1 ? "" : "s");
    bool limits = b->a.limits;
    put_row(b, c1, "GB/s", gbs, limits ? base : NULL, lim->triad_gbs,
            limits && lim->triad_gbs > 0 ? gbs / lim->triad_gbs : 0);
    snprintf(c1, sizeof c1, "%s bytes per step (profile)", cs);
    put_row(b, c1, "B", bytes, NULL, 0, 0);
    snprintf(c1, sizeof c1, "%s profile: mean of %lld steps", cs, (long long)b->prof.steps);
    put_row(b, c1, "ms/step", 1e3 * b->prof.total_step_seconds / (double)b->prof.steps, NULL, 0, 0);
    snprintf(c1, sizeof c1, "%s compiles after %lld steps", cs, (long long)b->a.reps + 1);
    put_row(b, c1, "count", (double)ot_tpu_optimizer_compile_count(b->t), NULL, 0, 0);
    return CLI_OK;
}

static void bench_free(bench *b) {
    for (int64_t i = 0; i < b->a.k; i++) {
        if (b->pb) ot_buffer_free(b->pb[i]);
        if (b->gb) ot_buffer_free(b->gb[i]);
        if (b->hp) ot_aligned_free(b->hp[i]);
        if (b->hg) ot_aligned_free(b->hg[i]);
        if (b->hm) ot_aligned_free(b->hm[i]);
        if (b->hv) ot_aligned_free(b->hv[i]);
    }
    ot_tpu_optimizer_free(b->t);
    ot_tpu_optimizer_free(b->tf);
    ot_tpu_optimizer_free(b->tc);
    ot_device_free(b->d);
    ot_threadpool_free(b->pool);
    ot_optimizer_free(b->o);
    free(b->sz);
    free(b->shapes);
    free(b->pb);
    free(b->gb);
    free(b->hp);
    free(b->hg);
    free(b->hm);
    free(b->hv);
    free(b->tt);
    free(b->tl);
    free(b->tfl);
    free(b->tcl);
    free(b->cfl);
    free(b->ccl);
}

static int run_optim_bench(int argc, char **argv) {
    bench b = {0};
    int rc = parse_args(argc, argv, &b.a);
    if (rc != CLI_OK) return rc;
    rc = bench_prepare(&b);
    if (rc == CLI_OK) rc = bench_setup(&b);
    if (rc == CLI_OK) rc = bench_fill(&b);
    if (rc == CLI_OK) {
        bench_loop_setup(&b);
        rc = bench_time(&b);
    }
    if (rc == CLI_OK) rc = bench_compare(&b);
    if (rc == CLI_OK) rc = bench_report(&b);
    bench_free(&b);
    return rc;
}

const cli_command cli_bench_optim = {
    "optim",
    "device optimizer step (one compiled update, donated) vs a fused C loop; GB/s vs STREAM",
    "usage: optitpu bench optim [--optimizer NAME] [--params N] [--tensors K] [--reps R]\n"
    "                           [--threads T] [--flat] [--state bf16|bf16-sr|int8] [--no-fusion]\n"
    "                           [--no-limits] [--json]\n"
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
    "two results differ (0: bit-identical). --state bf16 (implies --flat) also steps a flat\n"
    "wrapper whose moments are kept in bf16 (bf16-sr: stochastic rounding; int8: 8-bit\n"
    "block-wise) on the same data: its step time and its CPU time per step (the process's, all\n"
    "threads; median) beside the flat f32-state step's, and the bytes each moves per parameter.",
    run_optim_bench,
};
