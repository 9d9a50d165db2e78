/* optitpu bench ckpt: checkpoint save, verified restore and async-save overhead, each next to the
 * machine limit it is bounded by, measured in the same run (interleaved repetitions). */
#include "cli.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage[] =
    "usage: optitpu bench ckpt [--size SIZE] [--reps N] [--dir DIR] [--json]\n"
    "\n"
    "Saves and restores a checkpoint of SIZE bytes (default 1G: parameters, and Adam m and v in\n"
    "two optimizer shards; 64 MiB tensors) under DIR (default $TMPDIR or /tmp), and reports the\n"
    "median of N repetitions (default 5) after a warm-up, each next to its limit measured in the\n"
    "same repetition (optitpu bench limits, disk and SHA-256, the same file size):\n"
    "  save            GB/s of the commit protocol (hash while writing, fsync, manifest, rename)\n"
    "                  vs file write+fsync GB/s\n"
    "  restore+verify  GB/s of a verified load with the page cache dropped (every byte hashed)\n"
    "                  vs min(file read GB/s from the device, SHA-256 GB/s)\n"
    "  async save      seconds per training step with an async save each step, the step being\n"
    "                  a compute loop calibrated to 10x the snapshot copy (the step ends when\n"
    "                  its save is committed, so a save longer than the step counts), vs the\n"
    "                  same step without saving, interleaved (ratio = without / with; 0.95 =\n"
    "                  5% overhead); and the compute part alone while the save runs in the\n"
    "                  background (what the save costs beyond the blocking snapshot copy)\n";

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static void fill(void *p, size_t n) {
    uint64_t *q = p, x = g_rng;
    for (size_t i = 0; i < n / 8; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        q[i] = x;
    }
    g_rng = x;
}

/* The "training step": compute-bound f32 multiply-adds over a 64 KiB (L2-resident) buffer. */
static float g_sink;
static void step_compute(float *buf, size_t n, int64_t iters) {
    float a = 0.999f, b = 0.001f;
    for (int64_t it = 0; it < iters; it++)
        for (size_t i = 0; i < n; i++) buf[i] = buf[i] * a + b;
    g_sink += buf[n / 2];
}

static void drop_cache(const char *dir, const ot_ckpt_manifest *m) {
    for (size_t i = 0; i <= m->nfiles; i++) {
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", dir, i < m->nfiles ? m->files[i].path : "manifest.json");
        int fd = open(p, O_RDONLY);
        if (fd < 0) continue;
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

/* One result row: medians; for times the ratio is baseline / value (> 1: optitpu better). */
static void row(const char *c, const char *metric, double *v, const char *base, double *bv,
                size_t n, bool is_time, bool json) {
    ot_bench_row r = {"ckpt", c, metric, ot_bench_median(v, n), base, ot_bench_median(bv, n), 0};
    r.ratio = is_time ? r.baseline_value / r.value : r.value / r.baseline_value;
    ot_bench_print(&r, json);
}

static double secs(uint64_t t0) {
    return (double)(ot_now_ns() - t0) * 1e-9;
}

typedef struct ckpt_bench {
    int64_t size, reps;
    const char *dir;
    bool json;
    char root[4096]; /* the manager's directory under dir */
    /* the state: params, m, v in 64 MiB tensors; m and v in two optimizer shards */
    ot_ckpt_tensor *ts, *opt0, *opt1;
    char (*names)[32];
    void **bufs;
    size_t total_tensors;
    uint64_t bytes;
    ot_ckpt_shard shards[3];
    size_t nshards;
    ot_ckpt_manager *mg;
    ot_bench_limits_options lo;
    /* per repetition: the figures and their limits */
    double *save_v, *wl, *rest_v, *rl, *with_v, *wo_v, *comp_v, *wo2_v;
    double snap; /* the async save's blocking snapshot copy, seconds */
    int64_t step, iters;
    float *cbuf; /* the compute step's buffer */
} ckpt_bench;

static const char *const CMD = "bench ckpt";

/* Returns CLI_OK, or the usage error's code. */
static int parse_args(int argc, char **argv, ckpt_bench *cb) {
    cb->size = (int64_t)1 << 30, cb->reps = 5;
    cb->dir = getenv("TMPDIR");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            cb->json = true;
        } else if (!strcmp(a, "--size")) {
            if (!v || !cli_parse_size(v, &cb->size) || cb->size < (16 << 20))
                return cli_usage_error(CMD, "--size needs a size of at least 16M (e.g. 1G)");
            i++;
        } else if (!strcmp(a, "--reps")) {
            if (!v || !cli_parse_i64(v, 1, 100, &cb->reps))
                return cli_usage_error(CMD, "--reps needs a number from 1 to 100");
            i++;
        } else if (!strcmp(a, "--dir")) {
            if (!v) return cli_usage_error(CMD, "--dir needs a directory");
            cb->dir = v;
            i++;
        } else {
            return cli_usage_error(CMD, "unknown argument '%s'", a);
        }
    }
    if (!cb->dir || !*cb->dir) cb->dir = "/tmp";
    snprintf(cb->root, sizeof cb->root, "%s/optitpu-bench-ckpt-%d", cb->dir, (int)getpid());
    return CLI_OK;
}

/* The state's tensors (random data) and its three shards: the model, and m and v split by
 * tensor index into two optimizer shards. */
static int make_state(ckpt_bench *cb) {
    const size_t chunk = (size_t)64 << 20;
    size_t per_role = (size_t)cb->size / 3 / 4 * 4;
    size_t nt = (per_role + chunk - 1) / chunk;
    cb->total_tensors = nt * 3;
    cb->ts = calloc(cb->total_tensors, sizeof *cb->ts);
    cb->names = calloc(cb->total_tensors, 32);
    cb->bufs = calloc(cb->total_tensors, sizeof *cb->bufs);
    if (!cb->ts || !cb->names || !cb->bufs) {
        fprintf(stderr, "optitpu %s: out of memory\n", CMD);
        return CLI_FAIL;
    }
    for (size_t r = 0; r < 3; r++) {
        size_t left = per_role;
        for (size_t k = 0; k < nt; k++) {
            size_t i = r * nt + k, n = left < chunk ? left : chunk;
            left -= n;
            cb->bufs[i] = ot_aligned_alloc(4096, n ? n : 64);
            if (!cb->bufs[i]) {
                fprintf(stderr, "optitpu %s: cannot allocate %zu bytes\n", CMD, n);
                return CLI_FAIL;
            }
            fill(cb->bufs[i], n);
            snprintf(cb->names[i], 32, "%s.%zu", r == 0 ? "w" : r == 1 ? "m" : "v", k);
            int64_t d = (int64_t)(n / 4);
            ot_shape_make(&cb->ts[i].shape, OT_F32, 1, &d);
            cb->ts[i].name = cb->names[i];
            cb->ts[i].data = cb->bufs[i];
            cb->bytes += n;
        }
    }
    size_t half = nt / 2 ? nt / 2 : 1;
    cb->opt0 = calloc(2 * nt, sizeof *cb->opt0), cb->opt1 = calloc(2 * nt, sizeof *cb->opt1);
    size_t n0 = 0, n1 = 0;
    for (size_t k = 0; k < 2 * nt; k++) {
        if ((k % nt) < half)
            cb->opt0[n0++] = cb->ts[nt + k];
        else
            cb->opt1[n1++] = cb->ts[nt + k];
    }
    cb->shards[0] = (ot_ckpt_shard){"model", 0, 1, cb->ts, nt};
    cb->shards[1] = (ot_ckpt_shard){"optim", 0, 2, cb->opt0, n0};
    cb->shards[2] = (ot_ckpt_shard){"optim", 1, 2, cb->opt1, n1};
    cb->nshards = n1 ? 3 : 2;
    if (!n1) cb->shards[1].count = 1;
    return CLI_OK;
}

/* One save (its seconds in *save_s), then a verified restore with the page cache dropped (its
 * seconds in *rest_s). */
static int save_restore(ckpt_bench *cb, double *save_s, double *rest_s) {
    ot_ckpt_save_args a = {.step = cb->step++, .shards = cb->shards, .nshards = cb->nshards};
    uint64_t t0 = ot_now_ns();
    if (ot_ckpt_save(cb->mg, &a, NULL) != OT_OK) return cli_fail(CMD);
    *save_s = secs(t0);
    char sd[4200];
    snprintf(sd, sizeof sd, "%s/step_%08lld", cb->root, (long long)a.step);
    ot_ckpt *ck;
    if (ot_ckpt_load(sd, &ck) != OT_OK) return cli_fail(CMD);
    drop_cache(sd, ot_ckpt_manifest_of(ck));
    ot_ckpt_free(ck);
    t0 = ot_now_ns();
    if (ot_ckpt_load(sd, &ck) != OT_OK) return cli_fail(CMD);
    *rest_s = secs(t0);
    ot_ckpt_free(ck);
    return CLI_OK;
}

/* On the warm-up: the step's compute loop calibrated to 10x the snapshot copy. */
static int calibrate(ckpt_bench *cb) {
    ot_ckpt_save_stats st;
    for (int k = 0; k < 2; k++) { /* the second one finds the staging buffer in place */
        ot_ckpt_save_args b = {.step = cb->step++, .shards = cb->shards, .nshards = cb->nshards};
        if (ot_ckpt_save_async(cb->mg, &b) != OT_OK || ot_ckpt_wait(cb->mg, &st) != OT_OK)
            return cli_fail(CMD);
    }
    cb->snap = st.snapshot_seconds;
    uint64_t t0 = ot_now_ns();
    step_compute(cb->cbuf, 16384, 200);
    double per = secs(t0) / 200;
    cb->iters = (int64_t)ceil(10 * cb->snap / per);
    if (cb->iters < 1) cb->iters = 1;
    return CLI_OK;
}

/* Pairs, interleaved: a plain step, then a step that issues an async save and, to count any
 * spill-over, ends only when that save is committed. Mean seconds per step without saving,
 * with, and of the compute part alone while the save runs. */
static int async_pairs(ckpt_bench *cb, double *without, double *with, double *compute) {
    const int steps = 3;
    int rc = CLI_OK;
    double t_without = 0, t_with = 0, t_compute = 0;
    for (int s = 0; s < steps && rc == CLI_OK; s++) {
        uint64_t t0 = ot_now_ns();
        step_compute(cb->cbuf, 16384, cb->iters);
        t_without += secs(t0) / steps;
        ot_ckpt_save_args b = {.step = cb->step++, .shards = cb->shards, .nshards = cb->nshards};
        t0 = ot_now_ns();
        if (ot_ckpt_save_async(cb->mg, &b) != OT_OK) rc = cli_fail(CMD);
        uint64_t t1 = ot_now_ns();
        step_compute(cb->cbuf, 16384, cb->iters);
        t_compute += secs(t1) / steps;
        if (rc == CLI_OK && ot_ckpt_wait(cb->mg, NULL) != OT_OK) rc = cli_fail(CMD);
        t_with += secs(t0) / steps;
    }
    *without = t_without, *with = t_with, *compute = t_compute;
    return rc;
}

/* Repetition r (-1: the warm-up, which also calibrates the step and records nothing). */
static int one_rep(ckpt_bench *cb, int64_t r) {
    ot_bench_limits lim;
    if (ot_bench_limits_measure(&cb->lo, &lim) != OT_OK) return cli_fail(CMD);
    double ts_save = 0, ts_rest = 0;
    int rc = save_restore(cb, &ts_save, &ts_rest);
    if (rc == CLI_OK && r < 0) rc = calibrate(cb);
    if (rc != CLI_OK) return rc;
    double t_without, t_with, t_compute;
    rc = async_pairs(cb, &t_without, &t_with, &t_compute);
    /* retention is a policy step of its own: old steps are removed outside the timed saves */
    if (ot_ckpt_apply_retention(cb->root, &(ot_ckpt_retention){.keep_last = 1}, NULL) != OT_OK)
        rc = cli_fail(CMD);
    if (r < 0) return rc;
    cb->save_v[r] = (double)cb->bytes / ts_save * 1e-9;
    cb->wl[r] = lim.write_fsync_gbs;
    cb->rest_v[r] = (double)cb->bytes / ts_rest * 1e-9;
    cb->rl[r] = fmin(lim.read_gbs, lim.sha256_gbs);
    cb->with_v[r] = t_with;
    cb->wo_v[r] = t_without;
    cb->comp_v[r] = t_compute;
    return rc;
}

/* Removes what the benchmark wrote. */
static void remove_steps(const char *root) {
    ot_ckpt_entry *e;
    size_t ne;
    if (ot_ckpt_list(root, &e, &ne) == OT_OK) {
        for (size_t i = 0; i < ne; i++) {
            char c[4400];
            snprintf(c, sizeof c, "rm -rf '%s'", e[i].path);
            if (system(c) != 0)
                fprintf(stderr, "optitpu %s: could not remove %s\n", CMD, e[i].path);
        }
        ot_ckpt_entries_free(e, ne);
    }
    rmdir(root);
}

static void report(ckpt_bench *cb) {
    char sz[32], c[160];
    bool json = cb->json;
    snprintf(sz, sizeof sz, "%.0f MiB", (double)cb->bytes / (1 << 20));
    ot_bench_print_header(json);
    size_t n = (size_t)cb->reps;
    snprintf(c, sizeof c, "save %s, %zu files, hash while writing, fsync, commit", sz, cb->nshards);
    row(c, "GB/s", cb->save_v, "file write+fsync", cb->wl, n, false, json);
    snprintf(c, sizeof c, "restore+verify %s, page cache dropped", sz);
    row(c, "GB/s", cb->rest_v, "min(file read, SHA-256)", cb->rl, n, false, json);
    memcpy(cb->wo2_v, cb->wo_v, n * sizeof(double)); /* the median sorts in place */
    snprintf(c, sizeof c, "async save %s each step, step = 10x snapshot (%.3f s)", sz, cb->snap);
    row(c, "s/step", cb->with_v, "same step, no save", cb->wo_v, n, true, json);
    snprintf(c, sizeof c, "async save %s: compute while the save runs (snapshot excluded)", sz);
    row(c, "s/step", cb->comp_v, "same step, no save", cb->wo2_v, n, true, json);
}

static void ckpt_bench_free(ckpt_bench *cb) {
    for (size_t i = 0; cb->bufs && i < cb->total_tensors; i++) ot_aligned_free(cb->bufs[i]);
    free(cb->bufs), free(cb->names), free(cb->ts), free(cb->opt0), free(cb->opt1);
    free(cb->cbuf);
    free(cb->save_v), free(cb->wl), free(cb->rest_v), free(cb->rl), free(cb->with_v);
    free(cb->wo_v), free(cb->comp_v), free(cb->wo2_v);
}

static int run(int argc, char **argv) {
    ckpt_bench cb = {0};
    int rc = parse_args(argc, argv, &cb);
    if (rc != CLI_OK) return rc;
    rc = make_state(&cb);
    ot_ckpt_options co = ot_ckpt_options_default();
    if (rc == CLI_OK && ot_ckpt_open(cb.root, &co, &cb.mg) != OT_OK) rc = cli_fail(CMD);
    if (rc != CLI_OK) {
        ckpt_bench_free(&cb);
        return rc;
    }
    cb.lo = ot_bench_limits_options_default();
    cb.lo.what = OT_BENCH_LIMIT_DISK | OT_BENCH_LIMIT_SHA256;
    cb.lo.file_bytes = (size_t)cb.bytes;
    cb.lo.reps = 1;
    cb.lo.tmp_dir = cb.dir;
    size_t reps = (size_t)cb.reps;
    cb.save_v = calloc(reps, sizeof(double)), cb.wl = calloc(reps, sizeof(double));
    cb.rest_v = calloc(reps, sizeof(double)), cb.rl = calloc(reps, sizeof(double));
    cb.with_v = calloc(reps, sizeof(double)), cb.wo_v = calloc(reps, sizeof(double));
    cb.comp_v = calloc(reps, sizeof(double)), cb.wo2_v = calloc(reps, sizeof(double));
    cb.cbuf = calloc(16384, sizeof(float));
    cb.step = 1;
    for (int64_t r = -1; r < cb.reps && rc == CLI_OK; r++) /* r = -1: warm-up */
        rc = one_rep(&cb, r);
    if (ot_ckpt_close(cb.mg) != OT_OK && rc == CLI_OK) rc = cli_fail(CMD);
    remove_steps(cb.root);
    if (rc == CLI_OK) report(&cb);
    ckpt_bench_free(&cb);
    return rc;
}

const cli_command cli_bench_ckpt = {"ckpt", "checkpoint save, restore+verify, async overhead",
                                    usage, run};
