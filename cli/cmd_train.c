/* optitpu train: data-parallel training on a pod of host devices (the main job). */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage[] =
    "usage: optitpu train [options]\n"
    "\n"
    "Trains a model data-parallel on a pod of host devices: each step the global batch is split\n"
    "over the devices, every device runs the compiled forward/backward program, the gradients are\n"
    "summed by an all-reduce through the pod, and every device applies the compiled optimizer\n"
    "update. With no options: an MLP (64-128-10, ReLU) on the embedded UCI digits set with Adam,\n"
    "8 devices as a 2x4 torus, checkpoints every 100 steps, curves and a trace in optitpu-train/.\n"
    "\n"
    "model and data\n"
    "  --model M            logreg | mlp | cnn                       (default mlp)\n"
    "  --hidden W[,W...]    MLP hidden widths                        (default 128)\n"
    "  --activation A       relu | gelu | tanh                       (default relu)\n"
    "  --data D             digits | synthetic                       (default digits)\n"
    "  --samples N          synthetic: number of samples             (default 65536)\n"
    "optimization\n"
    "  --optimizer O        sgd adam adamw rmsprop adagrad ...       (default adam)\n"
    "  --lr X               peak learning rate                       (default 0.003)\n"
    "  --weight-decay X     (default: the optimizer's)\n"
    "  --state F            optimizer moments kept as f32 | bf16 (rounded to nearest even,\n"
    "                       half the state bytes) | int8 (8-bit block-wise, a quarter;\n"
    "                       adam, adamw, lion, sgd with momentum)    (default f32)\n"
    "  --int8-min-size N    int8 state: tensors under N elements keep f32 state (default\n"
    "                       4096); --shard-optimizer quantizes every tensor and needs 0\n"
    "  --schedule S         constant | cosine | warmup-cosine | step (default warmup-cosine)\n"
    "  --warmup N           warmup steps                             (default 20)\n"
    "  --batch-size N       global batch (per micro-batch)           (default 128)\n"
    "  --grad-accum K       K micro-batches of --batch-size per optimizer step, gradients\n"
    "                       summed: as one batch of K x --batch-size (default 1)\n"
    "  --steps N | --epochs N                                        (default 400 steps)\n"
    "  --eval-every N       test-set evaluation period               (default 50)\n"
    "  --seed N             data order and initialization            (default 0)\n"
    "pod\n"
    "  --devices N          host devices                             (default 8)\n"
    "  --topology T         torus-2x4, ring-N, mesh-AxB, ... of exactly --devices devices\n"
    "                       (default torus-2x4 with 8 devices, none otherwise)\n"
    "  --slice PRESET:SHAPE train on a contiguous SHAPE sub-mesh of the pod preset, placed by the\n"
    "                       slice scheduler around the slices other jobs on this host hold\n"
    "                       (several optitpu train side by side on one pod; the registry is\n"
    "                       $OPTITPU_SLICE_DIR, default /tmp/optitpu-slices-UID); --devices is\n"
    "                       the slice's size; not with --topology, --migrate, --recovery restore\n"
    "  --allreduce A        auto | ring | halving-doubling | tree | hier2d | direct (default "
    "tree);\n"
    "                       with --mpi: tree runs over the processes with one device each,\n"
    "                       otherwise MPI's cost model picks\n"
    "  --grad-compress C    none | bf16 | int8 | topk:F: the gradient all-reduce compressed,\n"
    "                       with error feedback (default none: exact); one process only; the\n"
    "                       residuals are checkpointed, so --resume continues exactly\n"
    "  --local-sgd H        LocalSGD: each device steps on its own shard, parameters averaged\n"
    "                       every H steps and at the end (default off); every device's state\n"
    "                       is checkpointed (--resume is exact; not with --mpi); no\n"
    "                       --fail-device, no --grad-compress\n"
    "  --shard-optimizer    ZeRO-1: gradients reduce-scattered, each device updates and holds\n"
    "                       the optimizer state of its 1/N block of the parameters, which are\n"
    "                       then all-gathered; bit for bit the unsharded run. Elementwise\n"
    "                       optimizers and lamb, lars (not adafactor), --allreduce tree or\n"
    "                       direct; with --mpi one device per process (tree); checkpoints\n"
    "                       hold one optimizer shard per device and resume onto any\n"
    "                       --devices, sharded or not (--overlap below)\n"
    "  --overlap auto|on|off  the gradient all-reduce (tree or direct; across processes\n"
    "                       one device each, tree) or reduce-scatter runs between the\n"
    "                       backward's kernels, the all-gather before each parameter's\n"
    "                       first reader in the next forward (on), or after the backward\n"
    "                       and the update (off); auto\n"
    "                       (default): on from 1 MiB of gradients. Same bits either way\n"
    "checkpoints and faults\n"
    "  --ckpt-dir DIR       created with its parents (default optitpu-train/ckpt; 'none'\n"
    "                       disables)\n"
    "  --ckpt-every N       (default 100)       --keep N   checkpoints kept (default 3)\n"
    "  --no-final-ckpt      do not save the last step when it is not a multiple of --ckpt-every\n"
    "                       (by default the end of a run is always saved)\n"
    "  --resume             continue from the newest checkpoint that verifies and fits this run;\n"
    "                       damaged ones are set aside as step_N.damaged (see optitpu ckpt ls),\n"
    "                       metrics.csv keeps its rows up to the resumed step; a checkpoint of\n"
    "                       another optimizer or model is refused (exit 1, nothing moved)\n"
    "  --fresh              delete checkpoints already in --ckpt-dir first\n"
    "  --ckpt-replicas R    R more copies of every checkpoint, in DIR.replica1..DIR.replicaR,\n"
    "                       each verified after its commit; --resume repairs a bad copy from a\n"
    "                       good one, and stops (exit 1, nothing moved) when no copy verifies\n"
    "  --fail-device D@S    device D stops at step S (its heartbeats stop)\n"
    "  --migrate D@S        device D's replica moves to a spare device when it begins step S,\n"
    "                       its state read back from the spare and verified bit for bit (one\n"
    "                       process only)\n"
    "  --recovery R         shrink (continue on the survivors) | restore (newest checkpoint\n"
    "                       onto a spare device)                     (default shrink)\n"
    "  --stop-after N       stop after N steps of this run, as a crash would (for testing)\n"
    "output\n"
    "  --out DIR            metrics.csv and curves.svg go here, created with its parents\n"
    "                       (--output-dir is the same)               (default optitpu-train)\n"
    "  --trace FILE         Chrome trace: compute, communication, checkpoints per device\n"
    "                       (default DIR/trace.json)\n"
    "  --json               print the final report as one JSON object on stdout\n"
    "  --quiet              no progress output\n"
    "  --no-compile-cache   compile every executable; by default they go through the\n"
    "                       persistent compilation cache (optitpu help cache), so a run that\n"
    "                       starts again loads them\n"
    "  --threads N          threads of the shared kernel pool (sets OPTITPU_THREADS)\n"
    "across processes\n"
    "  --mpi                join the MPI job (run under optitpu launch): --devices is per\n"
    "                       process; process 0 reports and checkpoints; --fail-device kills the\n"
    "                       device's process and launch restarts the job from the checkpoint\n"
    "                       process 0 writes one --trace for the job: each process's events\n"
    "                       shifted onto its clock by an NTP-measured offset, stated in the\n"
    "                       file with its error bound\n"
    "  e.g. optitpu launch --np 2 --oversubscribe --ckpt-dir ck -- train --mpi --devices 4 \\\n"
    "         --ckpt-dir ck --trace job.json\n"
    "examples\n"
    "  optitpu train --devices 1 --batch-size 32 --grad-accum 4   # batch 128 on one device\n"
    "  optitpu train --grad-compress int8 --json   # 1/4 of the all-reduce bytes\n"
    "  optitpu train --optimizer sgd --local-sgd 8   # average the parameters every 8 steps\n"
    "  optitpu train --devices 4 --shard-optimizer --json   # 1/4 of the optimizer state each\n"
    "  optitpu train --ckpt-dir ck --ckpt-replicas 2   # ck, ck.replica1 and ck.replica2\n"
    "  optitpu train --devices 4 --migrate 2@100   # device 2's replica onto a spare at step 100\n"
    "  optitpu train --slice v4-2x2x2:2x2x1 & optitpu train --slice v4-2x2x2:2x2x1   # 2 jobs\n";

typedef struct csv_stream csv_stream;
static void csv_add(csv_stream *c, const ot_train_point *p);

typedef struct ui {
    bool tty, quiet;
    int64_t plain_every;
    csv_stream *csv; /* NULL: no metrics.csv (processes other than 0) */
} ui;

static void on_event(void *ud, const char *msg) {
    ui *u = ud;
    if (u->quiet) return;
    if (u->tty) fprintf(stderr, "\r\033[K");
    fprintf(stderr, "%s\n", msg);
}

static void on_progress(void *ud, const ot_train_progress *p) {
    ui *u = ud;
    if (u->csv) {
        ot_train_point row = {p->step, p->loss, p->train_accuracy,
                              p->evaluated ? p->test_accuracy : -1.0, p->lr};
        csv_add(u->csv, &row);
    }
    if (u->quiet) return;
    char test[32] = "  -  ";
    if (p->test_accuracy >= 0) snprintf(test, sizeof test, "%5.1f%%", 100 * p->test_accuracy);
    if (u->tty) {
        int width = 24, fill = (int)((double)width * (double)p->step / (double)p->total_steps);
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[width] = 0;
        fprintf(stderr,
                "\r\033[K[%s] %lld/%lld  loss %.4f  acc %5.1f%%  test %s  %6.0f samples/s  "
                "%d dev  ETA %4.1fs",
                bar, (long long)p->step, (long long)p->total_steps, p->loss,
                100 * p->train_accuracy, test, p->samples_per_s, p->devices, p->eta_s);
        if (p->step == p->total_steps) fputc('\n', stderr);
        fflush(stderr);
    } else if (p->evaluated || p->step % u->plain_every == 0 || p->step == p->total_steps) {
        fprintf(stderr,
                "step %lld/%lld loss %.4f acc %.1f%% test %s lr %.3g %.0f samples/s %d devices "
                "eta %.1fs\n",
                (long long)p->step, (long long)p->total_steps, p->loss, 100 * p->train_accuracy,
                test, p->lr, p->samples_per_s, p->devices, p->eta_s);
    }
}

static bool parse_hidden(const char *s, ot_model_config *m) {
    m->nhidden = 0;
    const char *p = s;
    while (*p) {
        if (m->nhidden == OT_MODEL_MAX_HIDDEN) return false;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 1 || v > (1 << 20)) return false;
        m->hidden[m->nhidden++] = v;
        if (*end == ',')
            end++;
        else if (*end)
            return false;
        p = end;
    }
    return m->nhidden > 0;
}

static int mkdir_p(const char *dir) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *q = buf + 1; *q; q++)
        if (*q == '/' && q[-1] != '/') {
            *q = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
            *q = '/';
        }
    struct stat st;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* The directory part of a file path ("." when none), created with its parents. */
static int mkdir_parent(const char *file) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", file) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf) return 0;
    *slash = 0;
    return mkdir_p(buf);
}

/* The command line: the library's options and the CLI's own. */
typedef struct train_cli {
    ot_train_options o;
    const char *out_dir, *ckpt_dir, *trace;
    bool json, quiet, ckpt_off, use_mpi, topology_set, no_compile_cache;
    int ckpt_replicas; /* --ckpt-replicas: copies in CKPT_DIR.replica1..R */
    bool devices_set;
    char slice_registry[4096];
    bool peer_failed; /* the run failed because another process did (PEER_FAILED) */
} train_cli;

/* Each parse_* takes the flags of one group: -1 when `a` is none of them, else CLI_OK or a usage
 * error's code; *i moves past a value it takes. */
#define NEED()                                                                                     \
    do {                                                                                           \
        if (!val) return cli_usage_error("train", "%s needs a value", a);                          \
        (*i)++;                                                                                    \
    } while (0)

/* Flags of model and data. */
static int parse_model(train_cli *c, const char *a, const char *val, int *i) {
    int64_t v;
    if (!strcmp(a, "--model")) {
        NEED();
        int k = ot_model_kind_from_name(val);
        if (k < 0)
            return cli_usage_error("train", "--model: unknown model '%s' (logreg, mlp, cnn)", val);
        c->o.model.kind = (ot_model_kind)k;
    } else if (!strcmp(a, "--hidden")) {
        NEED();
        if (!parse_hidden(val, &c->o.model))
            return cli_usage_error("train", "--hidden: expected 1 to %d widths like 128,64",
                                   OT_MODEL_MAX_HIDDEN);
    } else if (!strcmp(a, "--activation")) {
        NEED();
        int k = ot_activation_from_name(val);
        if (k < 0)
            return cli_usage_error("train", "--activation: unknown '%s' (relu, gelu, tanh)", val);
        c->o.model.activation = (ot_activation)k;
    } else if (!strcmp(a, "--data")) {
        NEED();
        if (strcmp(val, "digits") && strcmp(val, "synthetic"))
            return cli_usage_error("train", "--data: unknown data set '%s' (digits, synthetic)",
                                   val);
        c->o.dataset = val;
    } else if (!strcmp(a, "--samples")) {
        NEED();
        if (!cli_parse_i64(val, 16, INT64_C(1) << 26, &v))
            return cli_usage_error("train", "--samples: 16..2^26");
        c->o.synthetic_n = v;
    } else {
        return -1;
    }
    return CLI_OK;
}

/* Flags of optimization. */
static int parse_optim(train_cli *c, const char *a, const char *val, int *i) {
    int64_t v;
    double d;
    if (!strcmp(a, "--optimizer")) {
        NEED();
        c->o.optimizer = val;
    } else if (!strcmp(a, "--lr")) {
        NEED();
        if (!cli_parse_double(val, &d) || !(d > 0))
            return cli_usage_error("train", "--lr: a number > 0");
        c->o.lr = d;
    } else if (!strcmp(a, "--weight-decay")) {
        NEED();
        if (!cli_parse_double(val, &d) || !(d >= 0))
            return cli_usage_error("train", "--weight-decay: a number >= 0");
        c->o.weight_decay = d;
    } else if (!strcmp(a, "--state")) {
        NEED();
        if (strcmp(val, "f32") && strcmp(val, "bf16") && strcmp(val, "int8"))
            return cli_usage_error("train", "--state: f32, bf16 or int8 (got '%s')", val);
        c->o.state_format = !strcmp(val, "bf16")   ? OT_TPU_STATE_BF16
                            : !strcmp(val, "int8") ? OT_TPU_STATE_INT8
                                                   : OT_TPU_STATE_F32;
    } else if (!strcmp(a, "--int8-min-size")) {
        NEED();
        if (!cli_parse_i64(val, 0, INT64_C(1) << 40, &v))
            return cli_usage_error("train", "--int8-min-size: elements >= 0 (got '%s')", val);
        c->o.int8_min_size = v;
    } else if (!strcmp(a, "--schedule")) {
        NEED();
        if (strcmp(val, "constant") && strcmp(val, "cosine") && strcmp(val, "warmup-cosine") &&
            strcmp(val, "step"))
            return cli_usage_error(
                "train", "--schedule: unknown '%s' (constant, cosine, warmup-cosine, step)", val);
        c->o.schedule = val;
    } else if (!strcmp(a, "--warmup")) {
        NEED();
        if (!cli_parse_i64(val, 0, INT64_C(1) << 40, &v))
            return cli_usage_error("train", "--warmup: a step count");
        c->o.warmup_steps = v;
    } else if (!strcmp(a, "--batch-size")) {
        NEED();
        if (!cli_parse_i64(val, 1, INT64_C(1) << 24, &v))
            return cli_usage_error("train", "--batch-size: 1..2^24");
        c->o.batch_size = v;
    } else if (!strcmp(a, "--grad-accum")) {
        NEED();
        if (!cli_parse_i64(val, 1, 65536, &v))
            return cli_usage_error("train", "--grad-accum: micro-batches per step, 1..65536");
        c->o.grad_accum = v;
    } else if (!strcmp(a, "--steps")) {
        NEED();
        if (!cli_parse_i64(val, 1, INT64_C(1) << 40, &v))
            return cli_usage_error("train", "--steps: >= 1");
        c->o.steps = v;
        c->o.epochs = 0;
    } else if (!strcmp(a, "--epochs")) {
        NEED();
        if (!cli_parse_i64(val, 1, INT64_C(1) << 30, &v))
            return cli_usage_error("train", "--epochs: >= 1");
        c->o.epochs = v;
    } else if (!strcmp(a, "--eval-every")) {
        NEED();
        if (!cli_parse_i64(val, 0, INT64_C(1) << 40, &v))
            return cli_usage_error("train", "--eval-every: >= 0");
        c->o.eval_every = v;
    } else if (!strcmp(a, "--seed")) {
        NEED();
        if (!cli_parse_i64(val, 0, INT64_MAX, &v)) return cli_usage_error("train", "--seed: >= 0");
        c->o.seed = (uint64_t)v;
    } else {
        return -1;
    }
    return CLI_OK;
}

/* Flags of the pod and its faults. */
static int parse_pod(train_cli *c, const char *a, const char *val, int *i) {
    int64_t v;
    if (!strcmp(a, "--devices")) {
        NEED();
        if (!cli_parse_i64(val, 1, 63, &v)) return cli_usage_error("train", "--devices: 1..63");
        c->o.devices = (int)v;
        c->devices_set = true;
    } else if (!strcmp(a, "--slice")) {
        NEED();
        c->o.slice = val;
    } else if (!strcmp(a, "--topology")) {
        NEED();
        c->o.topology = val;
        c->topology_set = true;
    } else if (!strcmp(a, "--allreduce")) {
        NEED();
        if (ot_coll_algo_from_name(val) < 0)
            return cli_usage_error("train", "--allreduce: unknown algorithm '%s'", val);
        c->o.allreduce = val;
    } else if (!strcmp(a, "--shard-optimizer")) {
        c->o.shard_optimizer = true;
    } else if (!strcmp(a, "--overlap")) {
        NEED();
        if (!strcmp(val, "auto"))
            c->o.overlap = OT_OVERLAP_AUTO;
        else if (!strcmp(val, "on"))
            c->o.overlap = OT_OVERLAP_ON;
        else if (!strcmp(val, "off"))
            c->o.overlap = OT_OVERLAP_OFF;
        else
            return cli_usage_error("train", "--overlap: auto, on or off, not '%s'", val);
    } else if (!strcmp(a, "--local-sgd")) {
        NEED();
        if (!cli_parse_i64(val, 1, INT64_C(1) << 40, &v))
            return cli_usage_error("train", "--local-sgd: steps between averages, >= 1");
        c->o.local_sgd = v;
    } else if (!strcmp(a, "--grad-compress")) {
        NEED();
        char *end = NULL;
        double f = !strncmp(val, "topk:", 5) ? strtod(val + 5, &end) : 0;
        bool topk = end && end != val + 5 && *end == 0 && f > 0 && f <= 1;
        if (!topk && strcmp(val, "none") && strcmp(val, "bf16") && strcmp(val, "int8"))
            return cli_usage_error(
                "train", "--grad-compress: none, bf16, int8 or topk:F with 0 < F <= 1, not '%s'",
                val);
        c->o.grad_compress = val;
    } else if (!strcmp(a, "--mpi")) {
        c->use_mpi = true;
    } else if (!strcmp(a, "--fail-device") || !strcmp(a, "--migrate")) {
        NEED();
        const char *at = strchr(val, '@');
        char dev[32];
        if (!at || (size_t)(at - val) >= sizeof dev)
            return cli_usage_error("train", "%s: expected D@STEP, e.g. 3@50", a);
        memcpy(dev, val, (size_t)(at - val));
        dev[at - val] = 0;
        int64_t dv, sv;
        if (!cli_parse_i64(dev, 0, 62, &dv) || !cli_parse_i64(at + 1, 1, INT64_C(1) << 40, &sv))
            return cli_usage_error("train", "%s: expected D@STEP with D >= 0, STEP >= 1", a);
        if (!strcmp(a, "--migrate")) {
            c->o.migrate_device = (int)dv;
            c->o.migrate_step = sv;
        } else {
            c->o.fail_device = (int)dv;
            c->o.fail_step = sv;
        }
    } else if (!strcmp(a, "--recovery")) {
        NEED();
        if (!strcmp(val, "shrink"))
            c->o.recovery = OT_RECOVER_SHRINK;
        else if (!strcmp(val, "restore"))
            c->o.recovery = OT_RECOVER_RESTORE;
        else
            return cli_usage_error("train", "--recovery: shrink or restore, not '%s'", val);
    } else {
        return -1;
    }
    return CLI_OK;
}

/* Flags of checkpoints. */
static int parse_ckpt(train_cli *c, const char *a, const char *val, int *i) {
    int64_t v;
    if (!strcmp(a, "--ckpt-dir")) {
        NEED();
        c->ckpt_dir = val;
        c->ckpt_off = !strcmp(val, "none");
    } else if (!strcmp(a, "--ckpt-every")) {
        NEED();
        if (!cli_parse_i64(val, 1, INT64_C(1) << 40, &v))
            return cli_usage_error("train", "--ckpt-every: >= 1");
        c->o.ckpt_every = v;
    } else if (!strcmp(a, "--keep")) {
        NEED();
        if (!cli_parse_i64(val, 1, 1 << 20, &v)) return cli_usage_error("train", "--keep: >= 1");
        c->o.keep = (int)v;
    } else if (!strcmp(a, "--ckpt-replicas")) {
        NEED();
        if (!cli_parse_i64(val, 0, 8, &v))
            return cli_usage_error("train", "--ckpt-replicas: copies of every checkpoint, 0..8");
        c->ckpt_replicas = (int)v;
    } else if (!strcmp(a, "--no-final-ckpt")) {
        c->o.final_ckpt = false;
    } else if (!strcmp(a, "--resume")) {
        c->o.resume = true;
    } else if (!strcmp(a, "--fresh")) {
        c->o.fresh = true;
    } else if (!strcmp(a, "--stop-after")) {
        NEED();
        if (!cli_parse_i64(val, 1, INT64_C(1) << 40, &v))
            return cli_usage_error("train", "--stop-after: >= 1");
        c->o.stop_after = v;
    } else {
        return -1;
    }
    return CLI_OK;
}

/* Flags of output. */
static int parse_output(train_cli *c, const char *a, const char *val, int *i) {
    int64_t v;
    if (!strcmp(a, "--out") || !strcmp(a, "--output-dir")) {
        NEED();
        c->out_dir = val;
    } else if (!strcmp(a, "--trace")) {
        NEED();
        c->trace = val;
    } else if (!strcmp(a, "--threads")) {
        NEED();
        if (!cli_parse_i64(val, 1, 1024, &v)) return cli_usage_error("train", "--threads: 1..1024");
        setenv("OPTITPU_THREADS", val, 1); /* read when the kernel pool starts */
    } else if (!strcmp(a, "--json")) {
        c->json = true;
    } else if (!strcmp(a, "--quiet")) {
        c->quiet = true;
    } else if (!strcmp(a, "--no-compile-cache")) {
        c->no_compile_cache = true;
    } else {
        return -1;
    }
    return CLI_OK;
}
#undef NEED

static int parse_args(train_cli *c, int argc, char **argv) {
    int (*const groups[])(train_cli *, const char *, const char *,
                          int *) = {parse_model, parse_optim, parse_pod, parse_ckpt, parse_output};
    for (int i = 1; i < argc; i++) {
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = -1;
        for (size_t g = 0; rc < 0 && g < sizeof groups / sizeof groups[0]; g++)
            rc = groups[g](c, argv[i], val, &i);
        if (rc < 0) return cli_usage_error("train", "unknown argument '%s'", argv[i]);
        if (rc != CLI_OK) return rc;
    }
    return CLI_OK;
}

/* --slice PRESET:SHAPE: the syntax, the preset, a shape that fits it in some orientation, the
 * device count (the slice's size unless --devices says otherwise, which is a contradiction) and
 * the combinations that need what a slice does not have. */
static int check_slice(train_cli *c) {
    char preset[64];
    int sh[OT_TOPO_MAX_DIMS];
    if (ot_slice_spec_parse(c->o.slice, preset, sizeof preset, sh) != OT_OK)
        return cli_usage_error("train", "--slice: %s", ot_last_error());
    ot_topology *tp = NULL;
    if (ot_topology_preset(preset, &tp) != OT_OK)
        return cli_usage_error("train", "--slice: %s", ot_last_error());
    int d[3] = {ot_topology_dim(tp, 0), ot_topology_dim(tp, 1), ot_topology_dim(tp, 2)};
    ot_topology_free(tp);
    static const int perms[6][3] = {{0, 1, 2}, {1, 0, 2}, {0, 2, 1},
                                    {2, 0, 1}, {1, 2, 0}, {2, 1, 0}};
    bool fits = false;
    for (int p = 0; p < 6; p++)
        fits |= sh[perms[p][0]] <= d[0] && sh[perms[p][1]] <= d[1] && sh[perms[p][2]] <= d[2];
    if (!fits)
        return cli_usage_error("train",
                               "--slice %s: a %dx%dx%d slice does not fit the %dx%dx%d pod "
                               "%s in any orientation",
                               c->o.slice, sh[0], sh[1], sh[2], d[0], d[1], d[2], preset);
    int64_t n = (int64_t)sh[0] * sh[1] * sh[2];
    if (n > 63)
        return cli_usage_error("train", "--slice %s: %lld devices (at most 63)", c->o.slice,
                               (long long)n);
    if (c->devices_set && c->o.devices != n)
        return cli_usage_error("train",
                               "--slice %s has %lld devices but --devices is %d (leave "
                               "--devices out)",
                               c->o.slice, (long long)n, c->o.devices);
    c->o.devices = (int)n;
    if (c->topology_set || c->use_mpi || c->o.migrate_device >= 0 ||
        c->o.recovery == OT_RECOVER_RESTORE)
        return cli_usage_error("train",
                               "--slice excludes %s (the slice's devices are the job's: "
                               "its sub-mesh is the topology, it has no spare device and "
                               "lives in one process)",
                               c->topology_set            ? "--topology"
                               : c->use_mpi               ? "--mpi"
                               : c->o.migrate_device >= 0 ? "--migrate"
                                                          : "--recovery restore");
    const char *env = getenv("OPTITPU_SLICE_DIR");
    if (env && env[0])
        snprintf(c->slice_registry, sizeof c->slice_registry, "%s", env);
    else
        snprintf(c->slice_registry, sizeof c->slice_registry, "/tmp/optitpu-slices-%u",
                 (unsigned)getuid());
    c->o.slice_registry = c->slice_registry;
    return CLI_OK;
}

/* Flags that contradict each other. An explicit topology is the pod's shape: another device
 * count is a contradiction; across processes the pod is every process's devices. Gradient
 * compression has no MPI form; LocalSGD's replicas differ between averages (across processes
 * only process 0's are checkpointed; no survivor stands for the pod) and it has no gradient to
 * compress. */
static int check_combinations(train_cli *c) {
    bool compress = c->o.grad_compress && strcmp(c->o.grad_compress, "none") != 0;
    if (compress && c->use_mpi)
        return cli_usage_error("train", "--grad-compress is not available with --mpi yet (the MPI "
                                        "pod's all-reduce has no compressed form)");
    if (c->o.local_sgd && compress)
        return cli_usage_error("train", "--local-sgd and --grad-compress exclude each other "
                                        "(LocalSGD has no gradient all-reduce to compress)");
    if (c->o.local_sgd && c->o.resume && c->use_mpi)
        return cli_usage_error("train", "--resume with --local-sgd --mpi is refused: between "
                                        "averages every device holds its own state, and process "
                                        "0's checkpoints hold its own devices' only (in one "
                                        "process every device's state is checkpointed)");
    if (c->o.local_sgd && c->o.fail_device >= 0)
        return cli_usage_error("train", "--fail-device with --local-sgd is refused: between "
                                        "averages no survivor holds the pod's state");
    if (c->ckpt_replicas > 0 && c->ckpt_off)
        return cli_usage_error("train", "--ckpt-replicas needs checkpoints (not --ckpt-dir none)");
    if (c->use_mpi && c->o.migrate_device >= 0)
        return cli_usage_error("train", "--migrate is not available with --mpi (the MPI pod has "
                                        "no spare device)");
    if (c->o.migrate_device >= c->o.devices)
        return cli_usage_error("train", "--migrate %d@%lld: the pod's devices are 0..%d",
                               c->o.migrate_device, (long long)c->o.migrate_step, c->o.devices - 1);
    if (c->o.slice) {
        int rc = check_slice(c);
        if (rc != CLI_OK) return rc;
    }
    if (c->use_mpi && c->topology_set)
        return cli_usage_error("train", "--topology applies to one process; with --mpi the pod is "
                                        "every process's devices");
    if (!c->topology_set) return CLI_OK;
    ot_topology *tp = NULL;
    if (ot_topology_preset(c->o.topology, &tp) != OT_OK)
        return cli_usage_error("train", "--topology: %s", ot_last_error());
    int size = ot_topology_size(tp);
    ot_topology_free(tp);
    if (size != c->o.devices)
        return cli_usage_error("train",
                               "--topology %s has %d devices but --devices is %d (give "
                               "--devices %d, or a topology of %d devices such as ring-%d)",
                               c->o.topology, size, c->o.devices, size, c->o.devices, c->o.devices);
    return CLI_OK;
}

/* --mpi: joins the job with --devices local devices per process. Under optitpu launch a restart
 * resumes (when there are checkpoints to resume from), and the injected fault is the first
 * attempt's only (the restarted job passes the step where it happened). Process 0 reports for
 * the pod. */
static int join_mpi(train_cli *c, ot_mpi **mpi, int *prank) {
    if (!ot_mpi_available()) {
        fprintf(stderr, "optitpu train: --mpi: this build has no MPI communicator (install "
                        "libopenmpi-dev and rebuild)\n");
        return CLI_FAIL;
    }
    ot_mpi_options mo = ot_mpi_options_default();
    mo.local_devices = c->o.devices;
    if (ot_mpi_init(&mo, mpi) != OT_OK) return cli_fail("train");
    *prank = ot_mpi_rank(*mpi);
    c->o.mpi = *mpi;
    const char *att = getenv(OT_LAUNCH_ENV_ATTEMPT), *res = getenv(OT_LAUNCH_ENV_RESUME);
    if (att && strcmp(att, "0") != 0) c->o.fail_device = -1;
    if (res && !strcmp(res, "1") && !c->ckpt_off) c->o.resume = true;
    if (*prank != 0) {
        c->quiet = true;
        c->json = false;
    }
    return CLI_OK;
}

static int run_train(train_cli *c, int prank);

static int run(int argc, char **argv) {
    train_cli c = {.o = ot_train_options_default(), .out_dir = "optitpu-train"};
    int rc = parse_args(&c, argc, argv);
    if (rc == CLI_OK) rc = check_combinations(&c);
    if (rc != CLI_OK) return rc;
    ot_mpi *mpi = NULL;
    int prank = 0;
    if (c.use_mpi && (rc = join_mpi(&c, &mpi, &prank)) != CLI_OK) return rc;
    rc = run_train(&c, prank);
    /* The process whose own failure it is ends the job (the others would wait for it until their
     * deadline), after printing why; one that failed only because another did leaves the abort to
     * that one, so it cannot kill the job before the cause is printed. */
    if (rc != CLI_OK && mpi && ot_mpi_size(mpi) > 1 && !c.peer_failed) ot_mpi_abort_job(mpi, rc);
    ot_mpi_free(mpi);
    return rc;
}

/* metrics.csv is written as the run goes, so that a killed run leaves its rows: the first row
 * rewrites the file (beside it, then renamed) with the earlier rows it keeps, each later row is
 * appended in one write, and a row for a step the file already has (a rollback to a checkpoint)
 * rewrites the file without the rows from that step on. A resumed run keeps the earlier rows up to
 * the step it resumed from (the rows after it are redone by this run, bit for bit); a file that
 * cannot be read is kept beside it as metrics.csv.bad, never overwritten. At the end the file is
 * written once more from the run's report. */
typedef struct csv_stream {
    const char *path;
    bool keep;    /* --resume */
    bool started; /* rows holds what the file holds */
    bool off;     /* a write failed: the file is written at the end only */
    ot_train_point *rows;
    int64_t n, cap;
} csv_stream;

static void csv_load_earlier(csv_stream *c) {
    c->started = true;
    if (!c->keep) return;
    ot_status s = ot_train_read_csv(c->path, &c->rows, &c->n);
    c->cap = c->n;
    if (s == OT_ERR_NOT_FOUND) {
        ot_clear_error();
        return;
    }
    if (s != OT_OK) {
        char bad[4200];
        snprintf(bad, sizeof bad, "%s.bad", c->path);
        fprintf(stderr,
                "optitpu train: warning: %s; it is kept as %s and %s holds this run's rows\n",
                ot_last_error(), bad, c->path);
        if (rename(c->path, bad) != 0)
            fprintf(stderr, "optitpu train: warning: rename %s: %s\n", c->path, strerror(errno));
    }
}

static ot_status csv_rewrite(csv_stream *c) {
    ot_train_report r = {0};
    r.points = c->rows;
    r.npoints = c->n;
    return ot_train_write_csv(&r, c->path);
}

/* One row of the run, from the progress callback (the leader's thread). */
static void csv_add(csv_stream *c, const ot_train_point *p) {
    if (c->off) return;
    bool rewrite = !c->started;
    if (!c->started) csv_load_earlier(c);
    while (c->n > 0 && c->rows[c->n - 1].step >= p->step) {
        c->n--;
        rewrite = true;
    }
    if (c->n == c->cap) {
        int64_t cap = c->cap ? c->cap * 2 : 256;
        ot_train_point *v = ot_realloc(c->rows, (size_t)cap * sizeof *v);
        if (!v) {
            fprintf(stderr, "optitpu train: warning: out of memory; %s is written at the end\n",
                    c->path);
            c->off = true;
            return;
        }
        c->rows = v;
        c->cap = cap;
    }
    c->rows[c->n++] = *p;
    if ((rewrite ? csv_rewrite(c) : ot_train_append_csv(c->path, p)) != OT_OK) {
        fprintf(stderr, "optitpu train: warning: %s; %s is written at the end\n", ot_last_error(),
                c->path);
        c->off = true;
    }
}

/* The report's rows after the earlier rows up to the step the run started from. */
static void csv_merge(csv_stream *c, ot_train_report *r) {
    if (!c->started) csv_load_earlier(c);
    int64_t keep = 0;
    while (keep < c->n && c->rows[keep].step <= r->start_step) keep++;
    ot_train_point *all = ot_malloc((size_t)(keep + r->npoints + 1) * sizeof *all);
    if (!all) {
        fprintf(stderr, "optitpu train: warning: out of memory merging %s\n", c->path);
        return;
    }
    if (keep) memcpy(all, c->rows, (size_t)keep * sizeof *all);
    if (r->npoints) memcpy(all + keep, r->points, (size_t)r->npoints * sizeof *all);
    ot_free(r->points);
    r->points = all;
    r->npoints += keep;
}

/* The human-readable summary of a finished run (stdout). */
static void print_summary(const ot_train_report *r, const char *ckpt_dir, const char *svg,
                          const char *csv, const char *trace, const char *hex) {
    char acc[128];
    if (r->test_accuracy >= 0) {
        /* a stopped run was not evaluated at its end: say which step the figure is from */
        int64_t at = -1;
        for (int64_t i = r->npoints; r->stopped && i-- > 0 && at < 0;)
            if (r->points[i].test_accuracy >= 0) at = r->points[i].step;
        char when[48] = "";
        if (at >= 0) snprintf(when, sizeof when, " (at step %lld)", (long long)at);
        snprintf(acc, sizeof acc, "test accuracy %.2f%%, test loss %.4f%s", 100 * r->test_accuracy,
                 r->test_loss, when);
    } else {
        snprintf(acc, sizeof acc, "no test accuracy measured (no evaluation ran)");
    }
    printf("\n%s after %lld steps (%lld this run): %s, final train loss %.4f\n",
           r->stopped ? "stopped" : "done", (long long)r->final_step, (long long)r->steps_run, acc,
           r->final_loss);
    printf("  %.2f s, %.0f samples/s on %d device(s)%s\n", r->wall_s, r->samples_per_s,
           r->devices_end, r->devices_end != r->devices_start ? " (after shrinking)" : "");
    double tot = r->compute_s + r->comm_s + r->ckpt_s + r->other_s;
    if (tot > 0)
        printf("  CPU time by phase: compute %.1f%%, communication %.1f%%, checkpointing "
               "%.1f%%, other %.1f%% -> outside compute %.1f%%\n",
               100 * r->compute_s / tot, 100 * r->comm_s / tot, 100 * r->ckpt_s / tot,
               100 * r->other_s / tot, 100 * r->outside_compute_share);
    if (r->nparts && r->steps_run > 0) {
        /* the step's wall time by part (mean over replicas); the rest is outside every part */
        double in = 0, per = 1e3 / (double)r->steps_run;
        printf("  wall ms per step by part:");
        for (int k = 0; k < r->nparts; k++) {
            printf(" %s %.3f,", r->parts[k].name, r->parts[k].wall_s * per);
            in += r->parts[k].wall_s;
        }
        printf(" outside the parts %.3f (step %.3f)\n", (r->wall_s - in) * per, r->wall_s * per);
    }
    if (r->failures)
        printf("  failures: %d; detected %.0f ms after the device stopped, running again %.0f "
               "ms after detection\n",
               r->failures, 1e3 * r->detect_s, 1e3 * r->recover_s);
    if (r->migrations)
        printf("  migrations: %d, verified bit for bit, %.0f ms\n", r->migrations,
               1e3 * r->migrate_s);
    printf("  all-reduce: %lld bytes per device per step, %lld in all\n",
           (long long)r->allreduce_bytes_per_step, (long long)r->allreduce_bytes);
    printf("  optimizer state: %lld bytes per device%s\n",
           (long long)r->optim_state_bytes_per_device,
           r->shard_optimizer ? " (sharded: its block of the parameters)" : "");
    if (r->compile_cache_hits + r->compile_cache_misses)
        printf("  compile: %.3f s (%d executable(s) loaded from the compilation cache, %d "
               "compiled)\n",
               r->compile_s, r->compile_cache_hits, r->compile_cache_misses);
    else
        printf("  compile: %.3f s\n", r->compile_s);
    printf("  checkpoints written: %lld%s%s\n", (long long)r->checkpoints, ckpt_dir ? " in " : "",
           ckpt_dir ? ckpt_dir : "");
    printf("  parameters sha256 %s\n", hex);
    printf("  curves: %s, %s; trace: %s (open in https://ui.perfetto.dev)\n", svg, csv, trace);
}

static int run_train(train_cli *c, int prank) {
    ot_train_options o = c->o;
    const char *out_dir = c->out_dir, *ckpt_dir = c->ckpt_dir, *trace = c->trace;
    bool json = c->json;
    if (mkdir_p(out_dir) != 0) {
        fprintf(stderr, "optitpu train: cannot create %s: %s\n", out_dir, strerror(errno));
        return CLI_FAIL;
    }
    char ckpt_buf[4096], trace_buf[4096], csv[4096], svg[4096];
    if (!ckpt_dir) {
        snprintf(ckpt_buf, sizeof ckpt_buf, "%s/ckpt", out_dir);
        ckpt_dir = ckpt_buf;
        /* the default directory belongs to this command: a new run without --resume starts over */
        if (!o.resume) o.fresh = true;
    }
    bool no_ckpt = c->ckpt_off;
    o.ckpt_dir = no_ckpt ? NULL : ckpt_dir;
    char replica_buf[8][4096];
    const char *replicas[8];
    size_t dl = strlen(ckpt_dir);
    while (dl > 1 && ckpt_dir[dl - 1] == '/') dl--; /* ck/ -> ck.replica1, beside ck */
    for (int r = 0; r < c->ckpt_replicas && o.ckpt_dir; r++) {
        int n = snprintf(replica_buf[r], sizeof replica_buf[r], "%.*s.replica%d", (int)dl, ckpt_dir,
                         r + 1);
        if (n < 0 || (size_t)n >= sizeof replica_buf[r]) {
            fprintf(stderr, "optitpu train: --ckpt-replicas: %s is too long a path\n", ckpt_dir);
            return CLI_FAIL;
        }
        replicas[r] = replica_buf[r];
    }
    o.ckpt_replicas = replicas;
    o.nckpt_replicas = o.ckpt_dir ? c->ckpt_replicas : 0;
    if (!trace) {
        snprintf(trace_buf, sizeof trace_buf, "%s/trace.json", out_dir);
        trace = trace_buf;
    } else if (prank == 0 && mkdir_parent(trace) != 0) {
        fprintf(stderr, "optitpu train: cannot create the directory of %s: %s\n", trace,
                strerror(errno));
        return CLI_FAIL;
    }
    /* every process traces (--mpi: the processes' traces are merged, process 0 writes the file) */
    o.trace_path = trace;
    snprintf(csv, sizeof csv, "%s/metrics.csv", out_dir);
    snprintf(svg, sizeof svg, "%s/curves.svg", out_dir);

    csv_stream cs = {.path = csv, .keep = o.resume};
    ui u = {isatty(2) != 0, c->quiet, 25, prank == 0 ? &cs : NULL};
    o.on_event = on_event;
    o.on_progress = on_progress;
    o.ud = &u;
    ot_compile_cache *cache = NULL;
    if (!c->no_compile_cache && ot_compile_cache_open(NULL, &cache) != OT_OK)
        fprintf(stderr, "optitpu train: warning: compiling without the compilation cache: %s\n",
                ot_last_error());
    o.compile_cache = cache;
    ot_train_report r;
    ot_status ts = ot_train(&o, &r);
    ot_compile_cache_free(cache);
    if (ts != OT_OK) {
        c->peer_failed = ts == OT_ERR_PEER_FAILED;
        int rc = cli_fail("train");
        ot_train_report_clear(&r);
        ot_free(cs.rows);
        return rc;
    }
    int rc = CLI_OK;
    if (prank != 0) {
        ot_train_report_clear(&r);
        return rc;
    }
    csv_merge(&cs, &r);
    ot_free(cs.rows);
    if (ot_train_write_csv(&r, csv) != OT_OK || ot_train_write_svg(&r, svg) != OT_OK)
        rc = cli_fail("train");
    char hex[65];
    ot_hex(r.params_sha256, 32, hex);
    if (json) {
        char *js = NULL;
        if (ot_train_report_json(&r, &js) != OT_OK) {
            rc = cli_fail("train");
        } else {
            printf("%s\n", js);
            ot_free(js);
        }
    } else {
        print_summary(&r, o.ckpt_dir, svg, csv, trace, hex);
    }
    ot_train_report_clear(&r);
    return rc;
}

const cli_command cli_cmd_train = {
    "train", "data-parallel training on a pod of host devices (the main job)", usage, run};
