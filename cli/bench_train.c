/* optitpu bench train: the training loop's samples/s and the share of its CPU time spent outside
 * compute (communication, coordination, checkpointing, batch copies) on the default run, beside
 * the same run on one device (no all-reduce) measured in the same invocation. Medians over reps. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct run_figures {
    double sps, share, acc;
} run_figures;

static int one_run(int devices, int64_t steps, const char *ckpt, run_figures *f) {
    ot_train_options o = ot_train_options_default();
    o.devices = devices;
    o.steps = steps;
    o.ckpt_dir = ckpt;
    o.fresh = true;
    if (devices != 8) o.topology = NULL;
    ot_train_report r;
    if (ot_train(&o, &r) != OT_OK) {
        ot_train_report_clear(&r);
        return cli_fail("bench train");
    }
    f->sps = r.samples_per_s;
    f->share = r.outside_compute_share;
    f->acc = r.test_accuracy;
    ot_train_report_clear(&r);
    return CLI_OK;
}

static int run(int argc, char **argv) {
    bool json = false;
    int64_t reps = 3, steps = 400, devices = 8;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 1, 100, &reps))
                return cli_usage_error("bench train", "--reps: 1..100");
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 10, 1000000, &steps))
                return cli_usage_error("bench train", "--steps: 10..1000000");
        } else if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 2, 63, &devices))
                return cli_usage_error("bench train", "--devices: 2..63");
        } else {
            return cli_usage_error("bench train", "unknown or incomplete argument '%s'", argv[i]);
        }
    }
    char dir[] = "/tmp/optitpu-bench-train-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("optitpu bench train: mkdtemp");
        return CLI_FAIL;
    }
    char ckpt[64];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    double sps[100], share[100], sps1[100], acc[100];
    int rc = CLI_OK;
    for (int64_t k = 0; k < reps && rc == CLI_OK; k++) {
        run_figures a = {0, 0, 0}, b = {0, 0, 0};
        rc = one_run((int)devices, steps, ckpt, &a);
        if (rc == CLI_OK) rc = one_run(1, steps, NULL, &b);
        sps[k] = a.sps;
        share[k] = a.share;
        acc[k] = a.acc;
        sps1[k] = b.sps;
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "optitpu bench train: could not remove %s\n", dir);
    if (rc != CLI_OK) return rc;
    double m_sps = ot_bench_median(sps, (size_t)reps), m_sps1 = ot_bench_median(sps1, (size_t)reps);
    double m_share = ot_bench_median(share, (size_t)reps),
           m_acc = ot_bench_median(acc, (size_t)reps);
    char name[96];
    snprintf(name, sizeof name, "mlp digits %lld dev %lld steps", (long long)devices,
             (long long)steps);
    ot_bench_print_header(json);
    ot_bench_row r1 = {"train", name,          "samples/s", m_sps, "same run, 1 device",
                       m_sps1,  m_sps / m_sps1};
    ot_bench_print(&r1, json);
    ot_bench_row r2 = {"train", name, "outside-compute CPU share",     m_share,
                       "goal",  0.10, m_share > 0 ? 0.10 / m_share : 0};
    ot_bench_print(&r2, json);
    ot_bench_row r3 = {"train", name, "test accuracy", m_acc, "goal", 0.95, m_acc / 0.95};
    ot_bench_print(&r3, json);
    if (!json) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        printf("(%lld reps; %ld CPU cores for %lld device threads: samples/s cannot scale past the "
               "cores; the share counts CPU time outside the compiled programs)\n",
               (long long)reps, cores, (long long)devices);
    }
    return CLI_OK;
}

const cli_command cli_bench_train = {
    "train", "optitpu train's samples/s and outside-compute share vs the same run on one device",
    "usage: optitpu bench train [--json] [--reps R] [--steps N] [--devices N]\n"
    "\n"
    "Runs the default training job (MLP on digits, Adam, checkpoints every 100 steps) R times\n"
    "(default 3) on N devices (default 8) and on 1 device, and prints the median samples/s of "
    "both,\n"
    "the share of CPU time spent outside compute (communication, coordination, checkpointing,\n"
    "batch copies; goal <= 10%) and the test accuracy.\n",
    run};
