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

static int run(int argc, char **argv) {
    const char *cmd = "bench ckpt";
    int64_t size = (int64_t)1 << 30, reps = 5;
    const char *dir = getenv("TMPDIR");
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--size")) {
            if (!v || !cli_parse_size(v, &size) || size < (16 << 20))
                return cli_usage_error(cmd, "--size needs a size of at least 16M (e.g. 1G)");
            i++;
        } else if (!strcmp(a, "--reps")) {
            if (!v || !cli_parse_i64(v, 1, 100, &reps))
                return cli_usage_error(cmd, "--reps needs a number from 1 to 100");
            i++;
        } else if (!strcmp(a, "--dir")) {
            if (!v) return cli_usage_error(cmd, "--dir needs a directory");
            dir = v;
            i++;
        } else {
            return cli_usage_error(cmd, "unknown argument '%s'", a);
        }
    }
    if (!dir || !*dir) dir = "/tmp";
    char root[4096];
    snprintf(root, sizeof root, "%s/optitpu-bench-ckpt-%d", dir, (int)getpid());

    /* the state: params, m, v (two shards each for m and v), in 64 MiB tensors */
    const size_t chunk = (size_t)64 << 20;
    size_t per_role = (size_t)size / 3 / 4 * 4;
    size_t nt = (per_role + chunk - 1) / chunk;
    size_t total_tensors = nt * 3;
    ot_ckpt_tensor *ts = calloc(total_tensors, sizeof *ts);
    char(*names)[32] = calloc(total_tensors, 32);
    void **bufs = calloc(total_tensors, sizeof *bufs);
    if (!ts || !names || !bufs) {
        fprintf(stderr, "optitpu %s: out of memory\n", cmd);
        return CLI_FAIL;
    }
    uint64_t bytes = 0;
    for (size_t r = 0; r < 3; r++) {
        size_t left = per_role;
        for (size_t k = 0; k < nt; k++) {
            size_t i = r * nt + k, n = left < chunk ? left : chunk;
            left -= n;
            bufs[i] = ot_aligned_alloc(4096, n ? n : 64);
            if (!bufs[i]) {
                fprintf(stderr, "optitpu %s: cannot allocate %zu bytes\n", cmd, n);
                return CLI_FAIL;
            }
            fill(bufs[i], n);
            snprintf(names[i], 32, "%s.%zu", r == 0 ? "w" : r == 1 ? "m" : "v", k);
            int64_t d = (int64_t)(n / 4);
            ot_shape_make(&ts[i].shape, OT_F32, 1, &d);
            ts[i].name = names[i];
            ts[i].data = bufs[i];
            bytes += n;
        }
    }
    size_t half = nt / 2 ? nt / 2 : 1;
    /* model; optimizer shard 0 = first half of m and v tensors...: keep it simple, m and v are
     * split by tensor index into two shards */
    ot_ckpt_tensor *opt0 = calloc(2 * nt, sizeof *opt0), *opt1 = calloc(2 * nt, sizeof *opt1);
    size_t n0 = 0, n1 = 0;
    for (size_t k = 0; k < 2 * nt; k++) {
        if ((k % nt) < half)
            opt0[n0++] = ts[nt + k];
        else
            opt1[n1++] = ts[nt + k];
    }
    ot_ckpt_shard shards[3] = {
        {"model", 0, 1, ts, nt}, {"optim", 0, 2, opt0, n0}, {"optim", 1, 2, opt1, n1}};
    size_t nshards = n1 ? 3 : 2;
    if (!n1) shards[1].count = 1;

    /* retention is a policy step of its own: old steps are removed outside the timed saves */
    ot_ckpt_options co = ot_ckpt_options_default();
    ot_ckpt_manager *mg;
    if (ot_ckpt_open(root, &co, &mg) != OT_OK) return cli_fail(cmd);

    ot_bench_limits_options lo = ot_bench_limits_options_default();
    lo.what = OT_BENCH_LIMIT_DISK | OT_BENCH_LIMIT_SHA256;
    lo.file_bytes = (size_t)bytes;
    lo.reps = 1;
    lo.tmp_dir = dir;

    double *save_v = calloc((size_t)reps, sizeof(double)),
           *wl = calloc((size_t)reps, sizeof(double));
    double *rest_v = calloc((size_t)reps, sizeof(double)),
           *rl = calloc((size_t)reps, sizeof(double));
    double *with_v = calloc((size_t)reps, sizeof(double)),
           *wo_v = calloc((size_t)reps, sizeof(double));
    double *comp_v = calloc((size_t)reps, sizeof(double)),
           *wo2_v = calloc((size_t)reps, sizeof(double));
    double snap = 0;
    int64_t step = 1;
    int rc = CLI_OK;
    float *cbuf = calloc(16384, sizeof(float));
    int64_t iters = 0;
    for (int64_t r = -1; r < reps && rc == CLI_OK; r++) { /* r = -1: warm-up */
        ot_bench_limits lim;
        if (ot_bench_limits_measure(&lo, &lim) != OT_OK) {
            rc = cli_fail(cmd);
            break;
        }
        /* save */
        ot_ckpt_save_args a = {.step = step++, .shards = shards, .nshards = nshards};
        uint64_t t0 = ot_now_ns();
        if (ot_ckpt_save(mg, &a, NULL) != OT_OK) {
            rc = cli_fail(cmd);
            break;
        }
        double ts_save = secs(t0);
        /* restore + verify from the device */
        char sd[4200];
        snprintf(sd, sizeof sd, "%s/step_%08lld", root, (long long)a.step);
        ot_ckpt *ck;
        if (ot_ckpt_load(sd, &ck) != OT_OK) {
            rc = cli_fail(cmd);
            break;
        }
        drop_cache(sd, ot_ckpt_manifest_of(ck));
        ot_ckpt_free(ck);
        t0 = ot_now_ns();
        if (ot_ckpt_load(sd, &ck) != OT_OK) {
            rc = cli_fail(cmd);
            break;
        }
        double ts_rest = secs(t0);
        ot_ckpt_free(ck);
        /* async: calibrate the step to 10x the snapshot copy on the warm-up */
        if (r < 0) {
            ot_ckpt_save_stats st;
            for (int k = 0; k < 2; k++) { /* the second one finds the staging buffer in place */
                ot_ckpt_save_args b = {.step = step++, .shards = shards, .nshards = nshards};
                if (ot_ckpt_save_async(mg, &b) != OT_OK || ot_ckpt_wait(mg, &st) != OT_OK) {
                    rc = cli_fail(cmd);
                    break;
                }
            }
            if (rc != CLI_OK) break;
            snap = st.snapshot_seconds;
            t0 = ot_now_ns();
            step_compute(cbuf, 16384, 200);
            double per = secs(t0) / 200;
            iters = (int64_t)ceil(10 * snap / per);
            if (iters < 1) iters = 1;
        }
        /* pairs, interleaved: a plain step, then a step that issues an async save and, to
         * count any spill-over, ends only when that save is committed */
        const int steps = 3;
        double t_without = 0, t_with = 0, t_compute = 0;
        for (int s = 0; s < steps && rc == CLI_OK; s++) {
            t0 = ot_now_ns();
            step_compute(cbuf, 16384, iters);
            t_without += secs(t0) / steps;
            ot_ckpt_save_args b = {.step = step++, .shards = shards, .nshards = nshards};
            t0 = ot_now_ns();
            if (ot_ckpt_save_async(mg, &b) != OT_OK) rc = cli_fail(cmd);
            uint64_t t1 = ot_now_ns();
            step_compute(cbuf, 16384, iters);
            t_compute += secs(t1) / steps;
            if (rc == CLI_OK && ot_ckpt_wait(mg, NULL) != OT_OK) rc = cli_fail(cmd);
            t_with += secs(t0) / steps;
        }
        if (ot_ckpt_apply_retention(root, &(ot_ckpt_retention){.keep_last = 1}, NULL) != OT_OK)
            rc = cli_fail(cmd);
        if (r < 0) continue;
        save_v[r] = (double)bytes / ts_save * 1e-9;
        wl[r] = lim.write_fsync_gbs;
        rest_v[r] = (double)bytes / ts_rest * 1e-9;
        rl[r] = fmin(lim.read_gbs, lim.sha256_gbs);
        with_v[r] = t_with;
        wo_v[r] = t_without;
        comp_v[r] = t_compute;
    }
    if (ot_ckpt_close(mg) != OT_OK && rc == CLI_OK) rc = cli_fail(cmd);
    /* remove what the benchmark wrote */
    ot_ckpt_entry *e;
    size_t ne;
    if (ot_ckpt_list(root, &e, &ne) == OT_OK) {
        for (size_t i = 0; i < ne; i++) {
            char c[4400];
            snprintf(c, sizeof c, "rm -rf '%s'", e[i].path);
            if (system(c) != 0)
                fprintf(stderr, "optitpu %s: could not remove %s\n", cmd, e[i].path);
        }
        ot_ckpt_entries_free(e, ne);
    }
    rmdir(root);
    if (rc == CLI_OK) {
        char sz[32], c[160];
        snprintf(sz, sizeof sz, "%.0f MiB", (double)bytes / (1 << 20));
        ot_bench_print_header(json);
        size_t n = (size_t)reps;
        snprintf(c, sizeof c, "save %s, %zu files, hash while writing, fsync, commit", sz, nshards);
        row(c, "GB/s", save_v, "file write+fsync", wl, n, false, json);
        snprintf(c, sizeof c, "restore+verify %s, page cache dropped", sz);
        row(c, "GB/s", rest_v, "min(file read, SHA-256)", rl, n, false, json);
        memcpy(wo2_v, wo_v, n * sizeof(double)); /* the median sorts in place */
        snprintf(c, sizeof c, "async save %s each step, step = 10x snapshot (%.3f s)", sz, snap);
        row(c, "s/step", with_v, "same step, no save", wo_v, n, true, json);
        snprintf(c, sizeof c, "async save %s: compute while the save runs (snapshot excluded)", sz);
        row(c, "s/step", comp_v, "same step, no save", wo2_v, n, true, json);
    }
    for (size_t i = 0; i < total_tensors; i++) ot_aligned_free(bufs[i]);
    free(bufs), free(names), free(ts), free(opt0), free(opt1), free(cbuf);
    free(save_v), free(wl), free(rest_v), free(rl), free(with_v), free(wo_v), free(comp_v);
    free(wo2_v);
    return rc;
}

const cli_command cli_bench_ckpt = {"ckpt", "checkpoint save, restore+verify, async overhead",
                                    usage, run};
