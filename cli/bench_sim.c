/* optitpu bench simulate: the simulator's host model against what this machine measures in the
 * same run: optitpu train's step time and device memory on 1, 2, 4, 8 in-process devices (the
 * model's rates measured right before and after each run), and in-process all-reduces (bench
 * collectives' measurement) at several sizes. Rows give the prediction as the value and the
 * measurement as the baseline; ratio = predicted / measured (1 is exact). */
#include "cli.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    ot_coll_algo algo;
    size_t count;
    int reps;
    double sec; /* rank 0's mean */
    float *buf[64];
} ar_job;

static ot_status ar_fn(void *ud, int rank, ot_comm *c) {
    ar_job *j = ud;
    ot_coll_options o = ot_coll_options_default();
    o.algo = j->algo;
    float *b = j->buf[rank];
    OT_CHECK(ot_comm_allreduce(c, b, b, j->count, OT_F32, OT_REDOP_SUM, &o));
    /* the mean over the repetitions, as the host model's rates (a member kept off the cores
     * by other load makes the others wait: that is part of an all-reduce here) */
    uint64_t t0 = ot_now_ns();
    for (int r = 0; r < j->reps; r++)
        OT_CHECK(ot_comm_allreduce(c, b, b, j->count, OT_F32, OT_REDOP_SUM, &o));
    if (rank == 0) j->sec = (double)(ot_now_ns() - t0) / 1e9 / j->reps;
    return OT_OK;
}

/* The gradient executable optitpu train compiles for one replica of `per` samples. */
static ot_status grad_exe(const ot_model *m, int64_t per, int64_t global, ot_executable **out) {
    ot_module *loss = NULL, *g = NULL;
    ot_status s = ot_model_build_loss(m, per, 1.0 / (double)global, &loss);
    int np = ot_model_param_count(m);
    int64_t wrt[2 * OT_MODEL_MAX_HIDDEN + 4];
    for (int k = 0; k < np; k++) wrt[k] = k;
    ot_grad_options go = ot_grad_options_default();
    go.loss_index = 0;
    if (s == OT_OK) s = ot_grad(loss, wrt, np, &go, &g);
    if (s == OT_OK) s = ot_compile(g, NULL, out); /* train's options: the defaults */
    /* train's step runs natively from its tier-up run on (small fusions, docs/codegen.md): the
     * steps priced are those after it */
    if (s == OT_OK) ot_executable_tier_up(*out);
    ot_module_free(loss);
    ot_module_free(g);
    return s;
}

/* The compiled Adam update optitpu train runs for the model's parameters. */
static ot_status train_update(const ot_model *m, ot_tpu_optimizer **out) {
    ot_optimizer *o = NULL;
    OT_CHECK(ot_optimizer_new("adam", &o));
    ot_shape shapes[2 * OT_MODEL_MAX_HIDDEN + 4];
    int np = ot_model_param_count(m);
    for (int k = 0; k < np; k++) shapes[k] = *ot_model_param_shape(m, k);
    ot_status s = ot_tpu_optimizer_create(o, shapes, np, NULL, out);
    ot_optimizer_free(o);
    if (s == OT_OK) ot_executable_tier_up(ot_tpu_optimizer_executable(*out)); /* as grad_exe */
    return s;
}

/* train's own work per step on one device of `per` samples (ot_sim_train_loop_measure): the
 * digits training set's rows, the model's parameters, the six parts of train's timeline, the
 * step's and the update's executables (exes[0], exes[1]) run between the steps' work. */
static ot_status train_loop_s(const ot_model *m, int64_t per, const ot_executable *const *exes,
                              double window, double *out) {
    ot_dataset tr, te;
    memset(&tr, 0, sizeof tr);
    memset(&te, 0, sizeof te);
    OT_CHECK(ot_dataset_digits(&tr, &te));
    ot_shape shapes[2 * OT_MODEL_MAX_HIDDEN + 4];
    int np = ot_model_param_count(m);
    for (int k = 0; k < np; k++) shapes[k] = *ot_model_param_shape(m, k);
    ot_sim_train_loop l = {per, tr.features, tr.n, np, shapes, 6, exes, 2};
    ot_dataset_free(&tr);
    ot_dataset_free(&te);
    return ot_sim_train_loop_measure(&l, window, out);
}

/* A fresh host device holding exe's inputs (zeroed); in[] and out[] sized for it. */
typedef struct {
    ot_device *d;
    ot_buffer **in, **out;
    int np, no;
} exe_run;

static void exe_run_free(exe_run *x) {
    for (int k = 0; x->out && k < x->no; k++) ot_buffer_free(x->out[k]);
    for (int k = 0; x->in && k < x->np; k++) ot_buffer_free(x->in[k]);
    free(x->in);
    free(x->out);
    ot_device_free(x->d);
    memset(x, 0, sizeof *x);
}

static ot_status exe_run_open(const ot_executable *e, exe_run *x) {
    memset(x, 0, sizeof *x);
    OT_CHECK(ot_host_device_create(0, 0, &x->d));
    x->np = ot_executable_param_count(e);
    x->no = ot_executable_output_count(e);
    x->in = calloc((size_t)x->np + 1, sizeof *x->in);
    x->out = calloc((size_t)x->no + 1, sizeof *x->out);
    ot_status s = x->in && x->out ? OT_OK : ot_error(OT_ERR_OUT_OF_MEMORY, "bench simulate");
    for (int k = 0; s == OT_OK && k < x->np; k++) {
        const ot_slot *sl = ot_executable_slot(e, ot_executable_param_slot(e, k));
        s = ot_buffer_alloc(x->d, &sl->shape, &x->in[k]);
        void *z = s == OT_OK ? calloc(1, (size_t)sl->nbytes + 1) : NULL;
        if (s == OT_OK && !z) s = ot_error(OT_ERR_OUT_OF_MEMORY, "bench simulate");
        if (s == OT_OK) s = ot_buffer_write_bytes(x->in[k], 0, z, sl->nbytes);
        free(z);
    }
    if (s != OT_OK) exe_run_free(x);
    return s;
}

/* Runs exe once on x (outputs of the previous run freed first), profiled into pf (or NULL). */
static ot_status exe_run_once(const ot_executable *e, exe_run *x, ot_profile *pf) {
    for (int k = 0; k < x->no; k++) {
        ot_buffer_free(x->out[k]);
        x->out[k] = NULL;
    }
    ot_run_options ro = ot_run_options_default();
    ro.profile = pf;
    return ot_device_execute(x->d, e, x->in, x->np, x->out, x->no, &ro, NULL);
}

/* A fresh host device's peak pool bytes while it runs exe once on zeroed inputs: parameters,
 * batch, outputs (the gradients) and the arena. */
static ot_status step_peak_bytes(const ot_executable *e, int64_t *peak) {
    exe_run x;
    OT_CHECK(exe_run_open(e, &x));
    ot_status s = exe_run_once(e, &x, NULL);
    if (s == OT_OK) {
        ot_mem_stats ms;
        ot_device_memory(x.d, &ms);
        *peak = ms.peak_in_use;
    }
    exe_run_free(&x);
    return s;
}

/* --kernels: the step executable alone on one device thread (nothing else of this process
 * running), each kernel's mean time under the profiler beside the host model's price for it with
 * one device's rates measured right before; and the whole executable's mean wall time without
 * the profiler beside the model's sum. */
static ot_status kernel_breakdown(const ot_executable *e, int64_t per, double window,
                                  const ot_sim_host_calibration *cal, bool json) {
    exe_run x;
    OT_CHECK(exe_run_open(e, &x));
    ot_sim_host_rates hr;
    ot_sim_host_probe pb;
    ot_profile *pf = NULL;
    const ot_executable *pe[1] = {e};
    ot_status s = ot_sim_host_measure(1, window, &hr);
    if (s == OT_OK) s = ot_sim_host_probe_measure(pe, 1, &pb);
    const int reps = 300;
    double whole = 0, cpu = 0;
    for (int r = 0; s == OT_OK && r < 20; r++) s = exe_run_once(e, &x, NULL); /* warm */
    struct timespec c0, c1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    uint64_t t0 = ot_now_ns();
    for (int r = 0; s == OT_OK && r < reps; r++) s = exe_run_once(e, &x, NULL);
    whole = (double)(ot_now_ns() - t0) / 1e9 / reps;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    /* every thread of the process (the pool's included): the work, robust to other load */
    cpu = ((double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9) / reps;
    if (s == OT_OK) s = ot_profile_create(&pf);
    for (int r = 0; s == OT_OK && r < reps; r++) s = exe_run_once(e, &x, pf);
    ot_sim_device dev;
    ot_sim_device_host_rates(&hr, cal, &dev);
    ot_sim_device_host_probe(&pb, &dev);
    double psum = 0;
    for (int k = 0; s == OT_OK && k < ot_executable_kernel_count(e); k++) {
        const ot_kernel *kn = ot_executable_kernel(e, k);
        double kf = 0, pk = ot_sim_kernel_s(&dev, e, k, 1.0, 1, &kf);
        psum += pk;
        double meas = 0;
        for (int i = 0; i < ot_profile_kernel_count(pf); i++) {
            const ot_kernel_profile *kp = ot_profile_kernel(pf, i);
            if (kp->calls > 0 && !strcmp(kp->name, kn->name) && strcmp(kp->kind, "compile"))
                meas = (double)kp->total_ns / 1e9 / (double)kp->calls;
        }
        char name[96];
        snprintf(name, sizeof name, "batch %lld kernel %s (%.0f kFLOP, %.0f KiB%s)", (long long)per,
                 kn->name, kf / 1e3, (double)(kn->bytes_read + kn->bytes_written) / 1024.0,
                 kn->kind == OT_KERNEL_FUSION && !ot_executable_kernel_native(e, k) ? ", interp."
                                                                                    : "");
        /* a kernel the profile has no event of (one the runtime skips) has no baseline */
        ot_bench_row row = {"simulate",
                            name,
                            "us",
                            pk * 1e6,
                            meas > 0 ? "profiled alone" : NULL,
                            meas * 1e6,
                            meas > 0 ? pk / meas : 0};
        ot_bench_print(&row, json);
    }
    if (s == OT_OK) {
        char name[96];
        snprintf(name, sizeof name, "batch %lld step executable alone", (long long)per);
        ot_bench_row row = {
            "simulate",  name,        "us", psum * 1e6, "measured alone, no profiler",
            whole * 1e6, psum / whole};
        ot_bench_print(&row, json);
        double pcpu = ot_sim_host_cpu_s(&dev, e, 1.0);
        snprintf(name, sizeof name, "batch %lld step executable CPU work", (long long)per);
        ot_bench_row crow = {"simulate",
                             name,
                             "us",
                             pcpu * 1e6,
                             "process CPU time per run",
                             cpu * 1e6,
                             cpu > 0 ? pcpu / cpu : 0};
        ot_bench_print(&crow, json);
    }
    ot_profile_free(pf);
    exe_run_free(&x);
    return s;
}

/* Runs this program under `optitpu launch --np np --oversubscribe --mca mpi_yield_when_idle 1
 * --max-restarts 0 -- ARGS` (more processes than cores: MPI yields instead of spinning while it
 * waits) and keeps its
 * standard output (up to cap - 1 bytes) in out; its standard error goes to log_path. */
static ot_status launch_capture(int np, const char *args, const char *log_path, char *out,
                                size_t cap) {
    char cmdline[1024];
    snprintf(cmdline, sizeof cmdline,
             "'%s' launch --np %d --oversubscribe --mca mpi_yield_when_idle 1 --max-restarts 0 -- "
             "%s 2>>'%s'",
             cli_self_exe(), np, args, log_path);
    FILE *f = popen(cmdline, "r");
    if (!f) return ot_error(OT_ERR_IO, "bench simulate: cannot run %s", cmdline);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int ws = pclose(f);
    if (ws != 0)
        return ot_error(OT_ERR_INTERNAL, "bench simulate: `%s` failed (status %d; its log: %s)",
                        cmdline, ws, log_path);
    return OT_OK;
}

/* The number after "key": in a JSON text (the first occurrence after from), or NAN. */
static double json_num_after(const char *text, const char *from, const char *key) {
    const char *p = from ? strstr(text, from) : text;
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    p = p ? strstr(p, k) : NULL;
    return p ? strtod(p + strlen(k), NULL) : NAN;
}

/* MPI: optitpu train --mpi with np processes of one device each (under optitpu launch) against
 * the host model with np device threads' rates measured right before and after it, and the
 * processes' transport priced from bench collectives --mpi --no-calibrate (the algorithm train
 * --mpi picks) in the same minute: an all-reduce's time at 4 bytes (alpha) and 1 MiB
 * (bandwidth), checked at the gradients' size. */
static ot_status mpi_case(int np, const ot_model *model, const ot_model_config *mc,
                          const ot_tpu_optimizer *topt, const ot_sim_host_calibration *cal,
                          int64_t steps, int64_t reps, int64_t batch, double window, bool json) {
    char log_path[] = "/tmp/optitpu-bench-simulate-XXXXXX";
    int fd = mkstemp(log_path);
    if (fd < 0) return ot_error(OT_ERR_IO, "bench simulate: a temporary log file");
    close(fd);
    static char out[1 << 16];
    int64_t gbytes = ot_model_param_elements(model) * 4 + 8; /* gradients + loss, correct */
    char args[256];
    snprintf(args, sizeof args,
             "bench collectives --mpi --no-calibrate --sizes 4,4K,64K,1M,%lld --reps 15 --json",
             (long long)gbytes);
    ot_status s = launch_capture(np, args, log_path, out, sizeof out);
    /* the transport's calibration: all-reduces of 4 B, 4 KiB, 64 KiB and 1 MiB; the gradients'
     * own size is measured only to compare with the price */
    static const double csz[4] = {4, 4096, 65536, 1048576};
    static const char *const ccase[4] = {"allreduce f32 0KiB", "allreduce f32 4KiB",
                                         "allreduce f32 64KiB", "allreduce f32 1024KiB"};
    double ct[4];
    for (int q = 0; q < 4; q++) ct[q] = json_num_after(out, ccase[q], "value") * 1e-6;
    char gcase[64];
    snprintf(gcase, sizeof gcase, "allreduce f32 %lldKiB", (long long)(gbytes >> 10));
    double ag = json_num_after(out, gcase, "value");
    if (s == OT_OK && !(ct[0] > 0 && ct[1] > 0 && ct[2] > 0 && ct[3] > 0 && ag > 0))
        s = ot_error(OT_ERR_INTERNAL,
                     "bench simulate: bench collectives --mpi printed no usable figures (4 B %g "
                     "s, 4 KiB %g s, 64 KiB %g s, 1 MiB %g s, gradients %g us)",
                     ct[0], ct[1], ct[2], ct[3], ag);
    /* alpha and bandwidth from the two calibrated sizes around the gradients' (Open MPI changes
     * algorithms with the size: one line from 4 B to 1 MiB misprices the middle); under load the
     * larger can come out no slower: then the bandwidth from the larger's time alone */
    int q1 = 0;
    while (q1 < 2 && csz[q1 + 1] < (double)gbytes) q1++;
    double alpha = ct[q1], bw = csz[q1 + 1] / ct[q1 + 1];
    if (ct[q1 + 1] > ct[q1]) {
        bw = (csz[q1 + 1] - csz[q1]) / (ct[q1 + 1] - ct[q1]);
        alpha = ct[q1] - csz[q1] / bw > 0 ? ct[q1] - csz[q1] / bw : 0;
    } else if (s == OT_OK) {
        fprintf(stderr,
                "bench simulate: %d processes: the %.0f-byte all-reduce (%.1f us) was not slower "
                "than the %.0f-byte one (%.1f us); bandwidth from the larger's time alone\n",
                np, csz[q1 + 1], ct[q1 + 1] * 1e6, csz[q1], ct[q1] * 1e6);
    }
    ot_executable *e = NULL;
    if (s == OT_OK) s = grad_exe(model, batch / np, batch, &e);
    const ot_executable *pe[2] = {e, ot_tpu_optimizer_executable(topt)};
    snprintf(
        args, sizeof args,
        "train --mpi --devices 1 --steps %lld --eval-every %lld --batch-size %lld --hidden %lld "
        "--ckpt-dir none --json",
        (long long)steps, (long long)steps, (long long)batch, (long long)mc->hidden[0]);
    /* reps runs, each predicted from the probes right before and after it (paired) */
    double pred[50], meas[50], ratio[50], pt[4][50], mt[4][50];
    ot_sim_result last;
    memset(&last, 0, sizeof last);
    for (int64_t r = 0; r < reps && s == OT_OK; r++) {
        ot_sim_host_rates before, after;
        ot_sim_host_probe pb[2];
        double hw[2]; /* train's own work per step, before and after */
        s = ot_sim_host_measure(np, window, &before);
        if (s == OT_OK) s = ot_sim_host_probe_measure(pe, 2, &pb[0]);
        if (s == OT_OK) s = train_loop_s(model, batch / np, pe, window / 3, &hw[0]);
        if (s == OT_OK) s = launch_capture(np, args, log_path, out, sizeof out);
        double wall = json_num_after(out, NULL, "wall_s");
        double ran = json_num_after(out, NULL, "steps_run");
        /* the steady steps (train's first steps compile and tier up: with the job's ranks
         * polling under a real-time class, the tier-up's file I/O waited for a kernel worker
         * the pollers kept off the cores, about 0.9 s of a 200-step run) */
        double swall = json_num_after(out, NULL, "steady_wall_s");
        double sran = json_num_after(out, NULL, "steady_steps");
        if (s == OT_OK && !(wall > 0 && ran > 0))
            s = ot_error(OT_ERR_INTERNAL, "bench simulate: optitpu train --mpi printed no report");
        /* the timeline of rank 0's report, ms per step */
        for (int q = 0; q < 3; q++) {
            static const char *const parts[3] = {"forward+backward", "all-reduce", "optimizer"};
            char key[48];
            snprintf(key, sizeof key, "\"name\":\"%s\"", parts[q]);
            double w = json_num_after(out, key, "wall_s");
            mt[q][r] = w > 0 && ran > 0 ? w / ran * 1e3 : 0;
        }
        mt[3][r] = mt[0][r] + mt[1][r]; /* compute + all-reduce */
        if (s == OT_OK) s = ot_sim_host_measure(np, window, &after);
        if (s == OT_OK) s = ot_sim_host_probe_measure(pe, 2, &pb[1]);
        if (s == OT_OK) s = train_loop_s(model, batch / np, pe, window / 3, &hw[1]);
        pred[r] = 0;
        for (int q = 0; q < 4; q++) pt[q][r] = 0;
        for (int k = 0; k < 2 && s == OT_OK; k++) {
            ot_sim_config c = ot_sim_config_default();
            ot_sim_device_host_rates(k ? &after : &before, cal, &c.device);
            ot_sim_device_host_probe(&pb[k], &c.device);
            c.chips = np;
            c.processes = np;
            c.process_alpha_s = alpha;
            c.process_bytes_per_s = bw;
            c.global_batch = batch;
            c.step = e;
            c.step_batch = batch / np;
            c.param_bytes = gbytes;
            c.input_bytes = batch / np * (mc->inputs * 4 + 4);
            c.update = ot_tpu_optimizer_executable(topt);
            c.overlap = false;
            ot_sim_config_train_pipeline(&c, ot_model_param_count(model));
            c.host_work_s = hw[k];
            s = ot_sim_run(&c, &last);
            pred[r] += last.step_s / 2;
            pt[0][r] += last.compute_s * 1e3 / 2, pt[1][r] += last.exposed_comm_s * 1e3 / 2;
            pt[2][r] += last.optimizer_s * 1e3 / 2;
            pt[3][r] += (last.compute_s + last.exposed_comm_s) * 1e3 / 2;
        }
        meas[r] = sran > 0 && swall > 0 ? swall / sran : wall / ran;
        ratio[r] = pred[r] / meas[r];
    }
    ot_executable_free(e);
    if (s == OT_OK) {
        char name[96];
        snprintf(name, sizeof name, "MPI all-reduce %lld B, %d processes", (long long)gbytes, np);
        double pa = alpha + (double)gbytes / bw;
        ot_bench_row ar = {"simulate", name,         "us", pa * 1e6, "bench collectives --mpi",
                           ag,         pa * 1e6 / ag};
        ot_bench_print(&ar, json);
        double measured = ot_bench_median(meas, (size_t)reps);
        double predicted = ot_bench_median(pred, (size_t)reps);
        snprintf(name, sizeof name, "train mlp 64-%lld-10 batch %lld, %d MPI processes: step",
                 (long long)mc->hidden[0], (long long)batch, np);
        ot_bench_row row = {"simulate",
                            name,
                            "ms",
                            predicted * 1e3,
                            "optitpu train --mpi measured",
                            measured * 1e3,
                            predicted / measured};
        ot_bench_print(&row, json);
        /* term by term against rank 0's timeline (host staging: input and gather only); like
         * for like: compute + all-reduce (rank 0's all-reduce holds its wait for the others) */
        static const char *const pname[4] = {"compute", "exposed all-reduce", "optimizer",
                                             "compute+all-reduce"};
        static const char *const mname[4] = {
            "train timeline: forward+backward", "train timeline: all-reduce",
            "train timeline: optimizer", "train: forward+backward+all-reduce"};
        for (int q = 0; q < 4; q++) {
            double pv = ot_bench_median(pt[q], (size_t)reps);
            double mv = ot_bench_median(mt[q], (size_t)reps);
            snprintf(name, sizeof name, "train mlp 64-%lld-10 batch %lld, %d MPI processes: %s",
                     (long long)mc->hidden[0], (long long)batch, np, pname[q]);
            ot_bench_row tr = {"simulate", name, "ms", pv, mname[q], mv, mv > 0 ? pv / mv : 0};
            ot_bench_print(&tr, json);
        }
        if (!json) {
            printf("  per run (predicted / measured):");
            for (int64_t r = 0; r < reps; r++) printf(" %.2f", ratio[r]);
            printf("; their median %.2f\n", ot_bench_median(ratio, (size_t)reps));
            printf("  last prediction: compute %.3f ms (bound: %s; path %.3f, cores %.3f, pool "
                   "%.3f) + all-reduce %.3f ms (%d processes: %.1f us + %.2f GB/s) + optimizer "
                   "%.3f ms + host pipeline %.3f ms\n",
                   last.compute_s * 1e3, last.bound, last.path_s * 1e3, last.cores_s * 1e3,
                   last.pool_s * 1e3, last.exposed_comm_s * 1e3, np, alpha * 1e6, bw / 1e9,
                   last.optimizer_s * 1e3, last.host_s * 1e3);
        }
    }
    unlink(log_path);
    return s;
}

/* A train run's timeline in the simulator's terms, ms per step: forward+backward (compute),
 * the gradient all-reduce, the optimizer, the host staging (input, gather, scatter,
 * parameters) and the rest (other parts and time outside every part). */
static void timeline_terms(const ot_train_report *rep, double t[5]) {
    memset(t, 0, 5 * sizeof *t);
    double per = rep->steps_run > 0 ? 1e3 / (double)rep->steps_run : 0, in = 0;
    for (int k = 0; k < rep->nparts; k++) {
        const char *nm = rep->parts[k].name;
        double w = rep->parts[k].wall_s * per;
        in += w;
        int q = !strcmp(nm, "forward+backward") ? 0
                : !strcmp(nm, "all-reduce")     ? 1
                : !strcmp(nm, "optimizer")      ? 2
                : !strcmp(nm, "input") || !strcmp(nm, "gather") || !strcmp(nm, "scatter") ||
                        !strcmp(nm, "parameters")
                    ? 3
                    : 4;
        t[q] += w;
    }
    t[4] += rep->wall_s * per - in;
}

/* The process's CPU and wall time over a run's steady steps: from the end of step `from` to the
 * end of step `to` (the start's compilation and the last step's evaluation left out). */
typedef struct {
    int64_t from, to;
    double cpu0, wall0, cpu_s, wall_s;
} cpu_window;

static double process_cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void cpu_window_progress(void *ud, const ot_train_progress *p) {
    cpu_window *w = ud;
    if (p->step == w->from) {
        w->cpu0 = process_cpu_s();
        w->wall0 = (double)ot_now_ns() / 1e9;
    } else if (p->step == w->to) {
        w->cpu_s = process_cpu_s() - w->cpu0;
        w->wall_s = (double)ot_now_ns() / 1e9 - w->wall0;
    }
}

static int run(int argc, char **argv) {
    const char *cmd = "bench simulate";
    bool json = false, kernels = false;
    int64_t steps = 200, reps = 5, batch = 128, hidden = 0;
    double window = 0.15;
    int64_t devs[8] = {1, 2, 4, 8}, procs[8] = {2, 4};
    int ndev = 4, nproc = ot_mpi_available() ? 2 : 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--kernels")) {
            kernels = true;
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 20, 1000000, &steps))
                return cli_usage_error(cmd, "--steps: 20..1000000");
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 1, 50, &reps))
                return cli_usage_error(cmd, "--reps: 1..50");
        } else if (!strcmp(argv[i], "--window-ms") && i + 1 < argc) {
            int64_t w;
            if (!cli_parse_i64(argv[++i], 1, 1000, &w))
                return cli_usage_error(cmd, "--window-ms: 1..1000");
            window = (double)w / 1e3;
        } else if (!strcmp(argv[i], "--mpi") && i + 1 < argc) {
            char buf[128];
            snprintf(buf, sizeof buf, "%s", argv[++i]);
            nproc = 0;
            if (strcmp(buf, "none") != 0)
                for (char *sv = NULL, *t = strtok_r(buf, ",", &sv); t; t = strtok_r(NULL, ",", &sv))
                    if (nproc >= 8 || !cli_parse_i64(t, 2, 8, &procs[nproc++]))
                        return cli_usage_error(cmd, "--mpi: none or up to 8 counts in 2..8");
            if (nproc && !ot_mpi_available())
                return cli_usage_error(cmd, "--mpi: this optitpu was built without MPI");
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 8, 65536, &batch) || batch % 8 != 0)
                return cli_usage_error(cmd, "--batch: a multiple of 8 in 8..65536");
        } else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 1, 65536, &hidden))
                return cli_usage_error(cmd, "--hidden: 1..65536");
        } else if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
            char buf[128];
            snprintf(buf, sizeof buf, "%s", argv[++i]);
            ndev = 0;
            for (char *sv = NULL, *t = strtok_r(buf, ",", &sv); t; t = strtok_r(NULL, ",", &sv))
                if (ndev >= 8 || !cli_parse_i64(t, 1, 8, &devs[ndev++]))
                    return cli_usage_error(cmd, "--devices: up to 8 counts in 1..8");
            if (ndev == 0) return cli_usage_error(cmd, "--devices: up to 8 counts in 1..8");
        } else {
            return cli_usage_error(cmd, "unknown or incomplete argument '%s'", argv[i]);
        }
    }
    ot_sim_host_calibration cal;
    ot_sim_device dev;
    if (ot_sim_device_host_calibrate(NULL, &dev, &cal) != OT_OK) return cli_fail(cmd);
    ot_bench_print_header(json);
    ot_bench_row cr[] = {
        {"simulate", "host model: f32 dot 256^3", "GFLOP/s", cal.dot_flops / 1e9, NULL, 0, 0},
        {"simulate", "host model: STREAM triad", "GB/s", cal.stream_bytes_per_s / 1e9, NULL, 0, 0},
        {"simulate", "host model: memcpy", "GB/s", cal.memcpy_bytes_per_s / 1e9, NULL, 0, 0},
        {"simulate", "host model: launch per kernel", "us", cal.launch_s * 1e6, NULL, 0, 0},
        {"simulate", "host model: all-reduce alpha, 8 dev", "us", cal.alpha_s[8] * 1e6, NULL, 0, 0},
    };
    for (size_t k = 0; k < sizeof cr / sizeof cr[0]; k++) ot_bench_print(&cr[k], json);
    double load[3] = {0, 0, 0};
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = 0;
        fclose(lf);
    }
    ot_bench_row lr = {
        "simulate", "machine: load average (1 min) / cores", "ratio", load[0] / cal.cores, NULL, 0,
        0};
    ot_bench_print(&lr, json);

    ot_model_config mc = ot_model_config_default();
    if (hidden > 0) mc.hidden[0] = hidden; /* train's MLP with another width */
    ot_model *model = NULL;
    if (ot_model_create(&mc, &model) != OT_OK) return cli_fail(cmd);
    ot_tpu_optimizer *topt = NULL;
    if (train_update(model, &topt) != OT_OK) {
        ot_model_free(model);
        return cli_fail(cmd);
    }
    int rc = CLI_OK;
    for (int d = 0; kernels && d < ndev && rc == CLI_OK; d++) {
        ot_executable *e = NULL;
        if (grad_exe(model, batch / devs[d], batch, &e) != OT_OK ||
            kernel_breakdown(e, batch / devs[d], window, &cal, json) != OT_OK)
            rc = cli_fail(cmd);
        ot_executable_free(e);
    }
    if (kernels) {
        ot_tpu_optimizer_free(topt);
        ot_model_free(model);
        return rc;
    }
    for (int d = 0; d < ndev && rc == CLI_OK; d++) {
        int n = (int)devs[d];
        /* the same per-replica executable optitpu train compiles (default options) */
        ot_executable *e = NULL;
        if (grad_exe(model, batch / n, batch, &e) != OT_OK) {
            rc = cli_fail(cmd);
            break;
        }

        /* measured: optitpu train's default job on n devices, no checkpoints, one evaluation;
         * predicted: the host model with n devices' rates measured right before and right after
         * that run (the machine's load as the run saw it), tree all-reduce (train's default)
         * after the backward pass, train's compiled Adam update and host pipeline */
        double wall[50], pred[50], ratio[50], meas_last[5] = {0, 0, 0, 0, 0};
        double pterm[4][50], mterm[4][50]; /* compute, exposed comm, optimizer, host: per run */
        /* process CPU per step and the cores it ran on (CPU / wall), per run */
        double pcpu[50], mcpu[50], pcores[50], mcores[50];
        ot_sim_host_probe probe_last;
        memset(&probe_last, 0, sizeof probe_last);
        const ot_executable *probe_exes[2] = {e, ot_tpu_optimizer_executable(topt)};
        int64_t peak = 0;
        ot_sim_result last;
        ot_sim_host_rates rate_last;
        memset(&last, 0, sizeof last);
        memset(&rate_last, 0, sizeof rate_last);
        for (int64_t r = 0; r < reps && rc == CLI_OK; r++) {
            ot_sim_host_rates before, after;
            ot_sim_host_probe pb[2];
            double hw[2]; /* train's own work per step, before and after */
            if (ot_sim_host_measure(n, window, &before) != OT_OK ||
                ot_sim_host_probe_measure(probe_exes, 2, &pb[0]) != OT_OK ||
                train_loop_s(model, batch / n, probe_exes, window / 3, &hw[0]) != OT_OK) {
                rc = cli_fail(cmd);
                break;
            }
            ot_train_options o = ot_train_options_default();
            o.model = mc;
            o.devices = n;
            o.steps = steps;
            o.eval_every = steps;
            o.ckpt_dir = NULL;
            o.batch_size = batch;
            if (n != 8) o.topology = NULL;
            cpu_window cw = {steps / 10 > 1 ? steps / 10 : 1, steps - 1, 0, 0, 0, 0};
            o.on_progress = cpu_window_progress;
            o.ud = &cw;
            ot_train_report rep;
            if (ot_train(&o, &rep) != OT_OK) {
                rc = cli_fail(cmd);
                break;
            }
            /* the steady steps: the first steps' compilation and tier-up and the last one's
             * evaluation are not a step's */
            wall[r] = rep.steady_steps > 0 ? rep.steady_wall_s / (double)rep.steady_steps
                                           : rep.wall_s / (double)rep.steps_run;
            timeline_terms(&rep, meas_last);
            peak = n > 1 ? rep.replica_peak_bytes : rep.leader_peak_bytes;
            ot_train_report_clear(&rep);
            if (ot_sim_host_measure(n, window, &after) != OT_OK ||
                ot_sim_host_probe_measure(probe_exes, 2, &pb[1]) != OT_OK ||
                train_loop_s(model, batch / n, probe_exes, window / 3, &hw[1]) != OT_OK) {
                rc = cli_fail(cmd);
                break;
            }
            for (int q = 0; q < 4; q++) pterm[q][r] = 0;
            pcpu[r] = pcores[r] = 0;
            mcpu[r] = cw.to > cw.from ? cw.cpu_s * 1e3 / (double)(cw.to - cw.from) : 0;
            mcores[r] = cw.wall_s > 0 ? cw.cpu_s / cw.wall_s : 0;
            mterm[0][r] = meas_last[0], mterm[1][r] = meas_last[1], mterm[2][r] = meas_last[2];
            mterm[3][r] = meas_last[3] + meas_last[4];
            double p2[2];
            for (int k = 0; k < 2 && rc == CLI_OK; k++) {
                ot_sim_config c = ot_sim_config_default();
                ot_sim_device_host_rates(k ? &after : &before, &cal, &c.device);
                ot_sim_device_host_probe(&pb[k], &c.device);
                c.chips = n;
                c.global_batch = batch;
                c.step = e;
                c.step_batch = batch / n;
                c.param_bytes = ot_model_param_elements(model) * 4 + 8; /* + loss, correct */
                c.input_bytes = batch / n * (mc.inputs * 4 + 4);
                c.update = ot_tpu_optimizer_executable(topt);
                c.overlap = false;
                c.algo = n > 1 ? OT_ALGO_TREE : OT_ALGO_AUTO;
                ot_sim_config_train_pipeline(&c, ot_model_param_count(model));
                c.host_work_s = hw[k];
                if (ot_sim_run(&c, &last) != OT_OK) rc = cli_fail(cmd);
                p2[k] = last.step_s;
                pcpu[r] += last.cpu_s * 1e3 / 2;
                pcores[r] += (last.step_s > 0 ? last.cpu_s / last.step_s : 0) / 2;
                pterm[0][r] += last.compute_s * 1e3 / 2,
                    pterm[1][r] += last.exposed_comm_s * 1e3 / 2;
                pterm[2][r] += last.optimizer_s * 1e3 / 2, pterm[3][r] += last.host_s * 1e3 / 2;
            }
            rate_last = after;
            probe_last = pb[1];
            pred[r] = (p2[0] + p2[1]) / 2;
            ratio[r] = pred[r] / wall[r];
        }
        ot_executable_free(e);
        if (rc != CLI_OK) break;
        double measured = ot_bench_median(wall, (size_t)reps);
        double predicted = ot_bench_median(pred, (size_t)reps);
        char name[96];
        snprintf(name, sizeof name, "train mlp 64-%lld-10 batch %lld, %d dev: step",
                 (long long)mc.hidden[0], (long long)batch, n);
        ot_bench_row row = {"simulate",
                            name,
                            "ms",
                            predicted * 1e3,
                            "optitpu train measured",
                            measured * 1e3,
                            predicted / measured};
        ot_bench_print(&row, json);
        /* term by term: the model's parts beside the timeline's (medians over the runs) */
        static const char *const pname[4] = {"compute", "exposed all-reduce", "optimizer",
                                             "host pipeline"};
        static const char *const mname[4] = {
            "train timeline: forward+backward", "train timeline: all-reduce",
            "train timeline: optimizer", "train timeline: host staging + rest"};
        double pca[50], mca[50]; /* summed before the medians below sort the terms */
        for (int64_t r = 0; r < reps; r++)
            pca[r] = pterm[0][r] + pterm[1][r], mca[r] = mterm[0][r] + mterm[1][r];
        for (int q = 0; q < 4; q++) {
            double pv = ot_bench_median(pterm[q], (size_t)reps);
            double mv = ot_bench_median(mterm[q], (size_t)reps);
            snprintf(name, sizeof name, "train mlp 64-%lld-10 batch %lld, %d dev: %s",
                     (long long)mc.hidden[0], (long long)batch, n, pname[q]);
            ot_bench_row tr = {"simulate", name, "ms", pv, mname[q], mv, mv > 0 ? pv / mv : 0};
            ot_bench_print(&tr, json);
        }
        /* like for like: train's all-reduce part holds the wait for replicas still computing,
         * which the model counts in compute (the last device's finish), so the two are compared
         * summed */
        double pcv = ot_bench_median(pca, (size_t)reps), mcv = ot_bench_median(mca, (size_t)reps);
        snprintf(name, sizeof name, "train mlp 64-%lld-10 batch %lld, %d dev: compute+all-reduce",
                 (long long)mc.hidden[0], (long long)batch, n);
        ot_bench_row car = {"simulate",
                            name,
                            "ms",
                            pcv,
                            "train: forward+backward+all-reduce",
                            mcv,
                            mcv > 0 ? pcv / mcv : 0};
        ot_bench_print(&car, json);
        /* the process's CPU over the steady steps: the work the model counts (every device's
         * kernels, launches and hand-offs, the update, the host pipeline), and the cores it ran
         * on (CPU / wall) */
        snprintf(name, sizeof name, "train mlp 64-%lld-10 batch %lld, %d dev: process CPU",
                 (long long)mc.hidden[0], (long long)batch, n);
        double pv = ot_bench_median(pcpu, (size_t)reps), mv = ot_bench_median(mcpu, (size_t)reps);
        ot_bench_row cpr = {"simulate",          name, "ms", pv, "train: process CPU per step", mv,
                            mv > 0 ? pv / mv : 0};
        ot_bench_print(&cpr, json);
        snprintf(name, sizeof name, "train mlp 64-%lld-10 batch %lld, %d dev: cores used",
                 (long long)mc.hidden[0], (long long)batch, n);
        pv = ot_bench_median(pcores, (size_t)reps), mv = ot_bench_median(mcores, (size_t)reps);
        ot_bench_row cur = {"simulate",          name, "cores", pv, "train: process CPU / wall", mv,
                            mv > 0 ? pv / mv : 0};
        ot_bench_print(&cur, json);
        /* memory: a replica's device pool peak in the same runs (the leader's alone on one
         * device: it also holds the test set) against the simulator's per-chip figure without
         * the fusion bucket (train's flat gradient vector is host memory, not the device's) */
        double pmem = last.mem_params + last.mem_params /* gradients */ + last.mem_optimizer +
                      last.mem_activations + last.mem_inputs;
        snprintf(name, sizeof name, "train mlp 64-%lld-10 batch %lld, %d dev: memory per device",
                 (long long)mc.hidden[0], (long long)batch, n);
        ot_bench_row mrow = {"simulate",
                             name,
                             "MiB",
                             pmem / 1048576.0,
                             n > 1 ? "train: a replica's pool peak" : "train: leader's pool peak",
                             (double)peak / 1048576.0,
                             peak > 0 ? pmem / (double)peak : 0};
        ot_bench_print(&mrow, json);
        if (!json) {
            printf("  per run (predicted / measured):");
            for (int64_t r = 0; r < reps; r++) printf(" %.2f", ratio[r]);
            printf("; their median %.2f", ot_bench_median(ratio, (size_t)reps));
            printf("\n  last prediction: compute %.3f ms (bound: %s; path %.3f, cores %.3f, pool "
                   "%.3f) + exposed all-reduce %.3f ms (%s) + optimizer %.3f ms + host pipeline "
                   "%.3f ms\n",
                   last.compute_s * 1e3, last.bound, last.path_s * 1e3, last.cores_s * 1e3,
                   last.pool_s * 1e3, last.exposed_comm_s * 1e3, last.algo, last.optimizer_s * 1e3,
                   last.host_s * 1e3);
            printf("  kernel probes: launch %.2f us, one-thread dot %.1f GFLOP/s, pool %d threads "
                   "x%.2f, hand-off %.1f us (back to back) / %.1f us (after 30 us) / %.1f us "
                   "(after 300 us), other processes leave %.2f of each core; per element: "
                   "arith %.3f ns, convert %.3f, exp %.3f, log %.3f, divide %.3f, reduce %.3f, "
                   "convert before a reduce %.3f; %.2f us a run besides\n",
                   probe_last.launch_s * 1e6, probe_last.dot1_flops / 1e9, probe_last.pool_threads,
                   probe_last.pool_speedup, probe_last.pool_handoff_s[0] * 1e6,
                   probe_last.pool_handoff_s[3] * 1e6, probe_last.pool_handoff_s[5] * 1e6,
                   probe_last.avail, probe_last.op_s[0] * 1e9, probe_last.op_s[1] * 1e9,
                   probe_last.op_s[2] * 1e9, probe_last.op_s[3] * 1e9, probe_last.op_s[4] * 1e9,
                   probe_last.op_s[5] * 1e9, probe_last.op_s[6] * 1e9, probe_last.exec_s * 1e6);
            printf("  last run's timeline: forward+backward %.3f ms + all-reduce %.3f ms + "
                   "optimizer %.3f ms + host staging %.3f ms + rest %.3f ms\n",
                   meas_last[0], meas_last[1], meas_last[2], meas_last[3], meas_last[4]);
            printf("  rates per device thread (%d at once): dot %.1f GFLOP/s, in-cache dot %.1f, "
                   "memory %.1f GB/s, in-cache %.1f, pool hand-off %.1f us, launch %.2f us, "
                   "transfer %.2f us, "
                   "alpha %.1f us, interpreter %.1f ns, share of a core %.2f\n",
                   n, rate_last.dot_flops / 1e9, rate_last.cache_flops / 1e9,
                   rate_last.mem_bytes_per_s / 1e9, rate_last.cache_bytes_per_s / 1e9,
                   rate_last.pool_s * 1e6, rate_last.launch_s * 1e6, rate_last.transfer_s * 1e6,
                   rate_last.alpha_s * 1e6, rate_last.interp_s * 1e9, rate_last.core_share);
        }
    }
    for (int q = 0; q < nproc && rc == CLI_OK; q++)
        if (mpi_case((int)procs[q], model, &mc, topt, &cal, steps, reps, batch, window, json) !=
            OT_OK)
            rc = cli_fail(cmd);
    ot_tpu_optimizer_free(topt);
    ot_model_free(model);
    if (rc != CLI_OK) return rc;

    /* memory: the simulator's per-chip step memory (parameters, gradients, activations, inputs)
     * against a host device's pool peak running the same executable */
    const int64_t widths[] = {128, 1024, 4096};
    for (size_t k = 0; k < sizeof widths / sizeof widths[0] && rc == CLI_OK; k++) {
        ot_model_config wc = ot_model_config_default();
        wc.hidden[0] = wc.hidden[1] = widths[k];
        wc.nhidden = widths[k] > 128 ? 2 : 1;
        ot_model *wm = NULL;
        ot_executable *e = NULL;
        int64_t peak = 0;
        ot_status s = ot_model_create(&wc, &wm);
        if (s == OT_OK) s = grad_exe(wm, batch, batch, &e);
        if (s == OT_OK) s = step_peak_bytes(e, &peak);
        ot_sim_result sr;
        if (s == OT_OK) {
            ot_sim_config c = ot_sim_config_default();
            ot_sim_device_host_from(&cal, 1, &c.device);
            c.chips = 1;
            c.global_batch = batch;
            c.step = e;
            c.step_batch = batch;
            c.param_bytes = ot_model_param_elements(wm) * 4;
            c.input_bytes = batch * (wc.inputs * 4 + 4);
            s = ot_sim_run(&c, &sr);
        }
        if (s != OT_OK) {
            rc = cli_fail(cmd);
        } else {
            /* one chip: no fusion bucket; the optimizer state is not part of the step */
            double pred = sr.mem_params + sr.mem_grads + sr.mem_activations + sr.mem_inputs;
            char name[96];
            snprintf(name, sizeof name, "step memory, mlp 64-%lld%s-10, batch %lld",
                     (long long)widths[k], wc.nhidden > 1 ? "x2" : "", (long long)batch);
            ot_bench_row row = {"simulate",
                                name,
                                "MiB",
                                pred / 1048576.0,
                                "host device pool peak",
                                (double)peak / 1048576.0,
                                pred / (double)peak};
            ot_bench_print(&row, json);
        }
        ot_executable_free(e);
        ot_model_free(wm);
    }
    if (rc != CLI_OK) return rc;

    /* collectives: the shared-memory cost model with the calibrated alpha and bandwidth against
     * in-process all-reduces with the algorithm the model picks */
    const size_t sizes[] = {4096, 256 << 10, 16 << 20};
    for (int d = 0; d < ndev && rc == CLI_OK; d++) {
        int n = (int)devs[d];
        if (n < 2) continue;
        ot_sim_device hd;
        ot_sim_host_rates hr;
        if (ot_sim_host_measure(n, window, &hr) != OT_OK) {
            rc = cli_fail(cmd);
            break;
        }
        ot_sim_device_host_rates(&hr, &cal, &hd);
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && rc == CLI_OK; k++) {
            double pred = 0;
            ot_coll_algo used = OT_ALGO_RING;
            if (ot_sim_collective_s(&hd, NULL, n, OT_COLL_ALLREDUCE, OT_ALGO_AUTO, sizes[k], 1,
                                    &pred, &used) != OT_OK) {
                rc = cli_fail(cmd);
                break;
            }
            ar_job j = {.algo = used, .count = sizes[k] / 4, .reps = sizes[k] > (1 << 20) ? 5 : 41};
            for (int r = 0; r < n; r++)
                if (!(j.buf[r] = calloc(j.count, sizeof(float)))) rc = CLI_FAIL;
            if (rc == CLI_OK && ot_local_run(n, ar_fn, &j, NULL) != OT_OK) rc = cli_fail(cmd);
            for (int r = 0; r < n; r++) free(j.buf[r]);
            if (rc != CLI_OK) break;
            char name[96];
            snprintf(name, sizeof name, "allreduce %zu KiB, %d dev, %s", sizes[k] >> 10, n,
                     ot_coll_algo_name(used));
            ot_bench_row row = {"simulate",  name,        "us", pred * 1e6, "in-process measured",
                                j.sec * 1e6, pred / j.sec};
            ot_bench_print(&row, json);
        }
    }
    if (rc == CLI_OK && !json)
        printf("(value: predicted by the host model with rates measured beside each measurement; "
               "baseline: measured in the same run; ratio = predicted / measured, goal 0.8-1.2 "
               "for step time, 0.95-1.05 for memory)\n");
    return rc;
}

const cli_command cli_bench_simulate = {
    "simulate", "the simulator's host model vs optitpu train and in-process all-reduces, same run",
    "usage: optitpu bench simulate [--json] [--steps N] [--reps R] [--devices LIST] "
    "[--window-ms W] [--mpi LIST|none] [--batch B] [--hidden W] [--kernels]\n"
    "\n"
    "For each device count (default 1,2,4,8) runs optitpu train's default job (MLP 64-128-10 on\n"
    "digits, batch 128, Adam, tree all-reduce, no checkpoints) R times (default 5) for N steps\n"
    "(default 200); right before and after each run it measures the host model's rates for that\n"
    "many device threads (ot_sim_host_measure, W ms windows, default 150), its kernel probes\n"
    "(ot_sim_host_probe_measure) and train's own work per step (ot_sim_train_loop_measure) and\n"
    "predicts the run's step from them. Prints the median prediction beside the median measured\n"
    "wall time per steady step (a tenth of the steps in to the last but one), the per-run\n"
    "ratios and their median, and term by term compute, exposed all-reduce, optimizer and host\n"
    "pipeline beside\n"
    "train's timeline, and compute + all-reduce beside forward+backward + all-reduce (train's\n"
    "all-reduce holds the wait for replicas still computing, the model's compute the last); the\n"
    "predicted memory per device beside the device pools' peak that train reports for the same\n"
    "runs; one step's memory (parameters, gradients, activations, inputs) for three MLP widths\n"
    "beside a host device's pool peak; in-process all-reduces of 4 KiB, 256 KiB and 16 MiB with\n"
    "the algorithm the model picks, predicted beside measured.\n"
    "ratio = predicted / measured.\n"
    "--batch B, --hidden W: the job's global batch (default 128) and hidden width (default 128).\n"
    "--mpi LIST (default 2,4 when built with MPI): also optitpu train --mpi with that many\n"
    "processes of one device each under optitpu launch (R runs, each paired with probes as\n"
    "above), predicted with their transport priced from bench collectives --mpi --no-calibrate\n"
    "run just before (the algorithm train --mpi runs; all-reduces of 4 B, 4 KiB, 64 KiB and\n"
    "1 MiB: the line through the two sizes around the gradients').\n"
    "--kernels: instead, for each device count's per-replica batch, the step executable alone on\n"
    "one device thread: each kernel's price beside its profiled mean time, and the executable's\n"
    "price beside its mean wall time without the profiler, and its modelled CPU work beside the\n"
    "process CPU time per run.\n",
    run};
