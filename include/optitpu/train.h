/*
 * optitpu train: data sets, models built as IR graphs, and the data-parallel training driver
 * behind `optitpu train`.
 *
 *     ot_train_options o = ot_train_options_default();      // MLP on digits, Adam, 8 devices
 *     ot_train_report r;
 *     if (ot_train(&o, &r) != OT_OK) fprintf(stderr, "%s\n", ot_last_error());
 *     printf("test accuracy %.3f\n", r.test_accuracy);
 *     ot_train_report_clear(&r);
 *
 * Each step the global batch (a slice of a seeded permutation of the training set) is split over
 * the replicas; every replica runs the compiled forward/backward executable on its device (its
 * loss is sum(cross-entropy) / global batch, so the gradients summed over replicas are exactly the
 * full-batch mean gradient), the gradients are summed by an all-reduce through the pod's
 * communicator, and every replica applies the same compiled optimizer update (ot_tpu_optimizer).
 * Replicas therefore hold bit-identical parameters (with local_sgd: after each average). Data
 * order, initialization and the learning rate are functions of (seed, step) only, so a run resumed
 * from a checkpoint reproduces an uninterrupted run bit for bit.
 *
 * Faults: a heartbeat agent beats for every live device; `fail_device` stops one device at a step
 * (its heartbeats stop and it leaves the collective). The coordinator's phi-accrual detector
 * declares it failed, the communicator is aborted so the survivors do not hang, and the driver
 * either shrinks the pod (a new communicator over the survivors, the batch re-split, the step
 * redone from the survivors' identical state) or restores the newest verified checkpoint onto a
 * spare device and continues from there.
 *
 * Threads: the driver runs one thread per device plus the heartbeat agent; callbacks run on the
 * leader replica's thread (the lowest live rank).
 */
#ifndef OPTITPU_TRAIN_H
#define OPTITPU_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/compiler.h"
#include "optitpu/core.h"
#include "optitpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Data
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_dataset {
    int64_t n, features, classes;
    float *x;   /* n * features, row-major (owned) */
    int32_t *y; /* n labels in 0..classes-1 (owned) */
} ot_dataset;

OT_API void ot_dataset_free(ot_dataset *d); /* releases x and y; NULL-safe */

/* Parses digits CSV text: rows of `features` integers 0..16 and a label 0..9 (65 fields), as in
 * the UCI optical digits set. Pixels are scaled to [0, 1] (divided by 16). Every field is
 * validated: INVALID_ARGUMENT names the line and field. */
OT_API ot_status ot_dataset_parse_digits_csv(const char *text, size_t len, ot_dataset *out);

/* The UCI digits set embedded in the library (1797 images of 8x8 pixels, 10 classes; E. Alpaydin,
 * C. Kaynak, CC BY 4.0), split deterministically: row i is a test row when i % 5 == 4 (359
 * rows), a training row otherwise (1438 rows). */
OT_API ot_status ot_dataset_digits(ot_dataset *train, ot_dataset *test);

/* A synthetic classification set: class centres drawn from N(0, 1) per feature, samples = centre +
 * N(0, noise^2); the same seed gives the same set. */
OT_API ot_status ot_dataset_synthetic(int64_t n, int64_t features, int64_t classes, double noise,
                                      uint64_t seed, ot_dataset *out);

/* The sample indices of global batch `step` (0-based): epoch e = step / (n / batch) uses a
 * Fisher-Yates permutation of 0..n-1 seeded by (seed, e); batch k of the epoch is its slice
 * [k * batch, (k + 1) * batch) (the remainder of an epoch is dropped). idx holds batch entries. */
OT_API ot_status ot_dataset_batch_indices(int64_t n, int64_t batch, uint64_t seed, int64_t step,
                                          int64_t *idx);

/* ---------------------------------------------------------------------------------------------
 * Models
 * ------------------------------------------------------------------------------------------- */

typedef enum ot_model_kind {
    OT_MODEL_LOGREG = 0, /* softmax regression */
    OT_MODEL_MLP,        /* dense layers with an activation, then a dense output layer */
    OT_MODEL_CNN,        /* conv 3x3 (same padding) + activation + 2x2 max pool + dense */
} ot_model_kind;

typedef enum ot_activation {
    OT_ACT_RELU = 0,
    OT_ACT_GELU, /* tanh approximation, as jax.nn.gelu(approximate=True) */
    OT_ACT_TANH,
} ot_activation;

#define OT_MODEL_MAX_HIDDEN 4

typedef struct ot_model_config {
    ot_model_kind kind;
    int64_t inputs;  /* features per sample (CNN: image_h * image_w, one channel) */
    int64_t classes; /* >= 2 */
    int nhidden;     /* MLP: hidden layers (1..OT_MODEL_MAX_HIDDEN) */
    int64_t hidden[OT_MODEL_MAX_HIDDEN];
    ot_activation activation;
    int64_t image_h, image_w; /* CNN */
    int64_t channels;         /* CNN: convolution output channels */
} ot_model_config;

OT_API ot_model_config ot_model_config_default(void); /* MLP 64-128-10, ReLU */
OT_API const char *ot_model_kind_name(ot_model_kind k);
OT_API int ot_model_kind_from_name(const char *s); /* -1 when unknown */
OT_API const char *ot_activation_name(ot_activation a);
OT_API int ot_activation_from_name(const char *s); /* -1 when unknown */

typedef struct ot_model ot_model;

OT_API ot_status ot_model_create(const ot_model_config *cfg, ot_model **out);
OT_API void ot_model_free(ot_model *m);
OT_API int ot_model_param_count(const ot_model *m);
OT_API const char *ot_model_param_name(const ot_model *m, int i); /* "dense0.w", ... */
OT_API const ot_shape *ot_model_param_shape(const ot_model *m, int i);
OT_API int64_t ot_model_param_elements(const ot_model *m); /* all parameters */
/* Initial parameters (f32): weights Glorot-uniform (He-uniform for ReLU), biases 0, from seed.
 * params: ot_model_param_count tensors, allocated here (release each). */
OT_API ot_status ot_model_init(const ot_model *m, uint64_t seed, ot_tensor *params);
/* The loss module for a batch of `batch` samples: entry parameters (params..., x f32[batch,
 * inputs], y s32[batch]); root tuple (loss f32[] = sum of softmax cross-entropy * loss_scale,
 * correct f32[] = samples whose label has the largest logit). */
OT_API ot_status ot_model_build_loss(const ot_model *m, int64_t batch, double loss_scale,
                                     ot_module **out);

/* ---------------------------------------------------------------------------------------------
 * Training driver
 * ------------------------------------------------------------------------------------------- */

typedef enum ot_recovery_policy {
    OT_RECOVER_SHRINK = 0, /* continue on the survivors */
    OT_RECOVER_RESTORE,    /* newest verified checkpoint onto a spare device */
} ot_recovery_policy;

typedef struct ot_train_progress {
    int64_t step, total_steps; /* step: steps done */
    double loss;               /* mean training loss of this step's global batch */
    double train_accuracy;     /* of this step's batch */
    double test_accuracy;      /* of the latest evaluation (-1 before the first) */
    double lr;
    double samples_per_s; /* over the steps since the previous report */
    double eta_s;
    int devices;    /* live replicas */
    bool evaluated; /* an evaluation ran at this step */
} ot_train_progress;

typedef enum ot_train_overlap {
    OT_OVERLAP_AUTO = 0,
    OT_OVERLAP_ON,
    OT_OVERLAP_OFF,
} ot_train_overlap;
/* The gradients' size from which OT_OVERLAP_AUTO overlaps (docs/benchmarks.md: below it, at
 * 38 KB and 340 KB, the unsharded overlapped step spent a larger share outside compute; from
 * 1.2 MB on it spent less, and the step took less time). */
#define OT_TRAIN_OVERLAP_MIN_BYTES (1 << 20)

typedef struct ot_train_options {
    ot_model_config model;
    const char *dataset;   /* "digits" (default) or "synthetic" */
    int64_t synthetic_n;   /* synthetic: samples (default 65536; 20% test) */
    const char *optimizer; /* a built-in of optim.h (default "adam") */
    double lr;             /* default 3e-3 */
    double weight_decay;   /* set on the optimizer when > 0 */
    /* How the optimizer keeps its moments between steps (tpu_optim.h's state_format:
     * OT_TPU_STATE_F32 by default, OT_TPU_STATE_BF16 rounded to nearest even,
     * OT_TPU_STATE_INT8 8-bit block-wise for adam, adamw, lion and sgd with momentum);
     * checkpoints hold the state in that format. */
    int state_format;
    /* int8 state: tensors of fewer elements keep f32 state (tpu_optim.h's
     * state_int8_min_size, bitsandbytes' min_8bit_size); -1 (default): 4096. shard_optimizer
     * quantizes every tensor (a device's block mixes tensors) and takes only 0 (or 1), which
     * the caller gives to accept that (INVALID_ARGUMENT otherwise): the same run without
     * shard_optimizer is its unsharded twin, bit for bit. */
    int64_t int8_min_size;
    /* The learning-rate schedule over the run's steps (optim.h's ot_lr_schedule): "constant",
     * "cosine" (to 0), "warmup-cosine" (default: linear warmup from 0 over warmup_steps, then
     * cosine to 0) or "step" (x0.1 every third of the run). */
    const char *schedule;
    int64_t warmup_steps;
    int64_t batch_size; /* global, per micro-batch (default 128) */
    /* Gradient accumulation: each optimizer step sums the gradients of grad_accum consecutive
     * micro-batches of batch_size (the slices of one global batch of batch_size * grad_accum
     * samples, so a run equals one of batch_size * grad_accum without accumulation up to float
     * summation order). Default 1; epochs and samples/s count batch_size * grad_accum per step. */
    int64_t grad_accum;
    /* The gradient all-reduce through the pod's gradient aggregator (collectives.h), with error
     * feedback: NULL or "none" (default: the exact f32 sum), "bf16", "int8" (a scale per fusion
     * bucket) or "topk:F" (the fraction 0 < F <= 1 of largest magnitudes). Every replica still
     * holds bit-identical parameters. Every member's error-feedback residuals are checkpointed
     * (role "residual") and restored by resume and restore recovery, so those continue bit for
     * bit; after a shrink they start from zero. One process only (not with mpi). */
    const char *grad_compress;
    /* LocalSGD: > 0: no gradient all-reduce; every replica updates its own parameters and
     * optimizer state from its shard's mean gradient, and the parameters are averaged over the
     * pod (the pod's all-reduce, then / replicas) after every local_sgd-th step and after the
     * run's last step; optimizer state stays per replica. Evaluations between averages see the
     * leader's replica; in one process checkpoints hold every replica's parameters and optimizer
     * state (role "replica"), so resume is exact (refused with mpi: process 0's checkpoints hold
     * its own replicas only). Refused with grad_compress (nothing to compress) and fail_device
     * (no survivor holds the pod's state); a failure ends the run. 0 (default): off. */
    int64_t local_sgd;
    /* Sharded optimizer update (ZeRO stage 1; in one process, or with mpi one device per
     * process, sharded over the processes' communicator with the tree): the gradients are
     * reduce-scattered over the pod instead of all-reduced, each device updates only its contiguous
     * block of ceil((16 + P) / devices) elements (rounded up to 16) of a flat vector (16 head
     * elements carrying the loss and correct count, then all parameters back to back in model
     * order, zero-padded at the end) and holds only that block's optimizer state, then the updated
     * blocks are all-gathered into every device's parameters. The reduction is the all-reduce's
     * algorithm (tree or direct: their summation order does not depend on the vector's length or
     * split) and the update elementwise, so the run is bit for bit the unsharded one (lamb's and
     * lars's trust ratios from norms summed over the devices in the unsharded order). Refused
     * (with the reason): adafactor (its factored moments couple elements), the ring,
     * halving-doubling and
     * hier2d all-reduces (also when auto picks one), int8 state, mpi with devices > 1,
     * grad_compress, local_sgd, fail_device in one process and migrate_device. Checkpoints hold the
     * optimizer state as one "optim" shard per device (the manifest's record: shard_devices,
     * shard_len) and resume onto any device count, sharded or not; an unsharded checkpoint resumes
     * sharded (docs/train.md). */
    bool shard_optimizer;
    /* The step can overlap its communication with computation (in one process, and across
     * processes with one device each: unsharded there with the tree): each
     * parameter's gradients are reduced, between the backward's kernels, as soon as every
     * device has them; with shard_optimizer the all-gather of step t's parameters happens during
     * step t + 1's forward, each parameter just before its first reader (docs/train.md). The
     * unsharded step needs the tree or direct all-reduce, no grad_compress and no local_sgd.
     * OT_OVERLAP_AUTO (default): when the gradients are at least OT_TRAIN_OVERLAP_MIN_BYTES
     * (below that the step is its synchronizations, which overlap multiplies); ON: always;
     * OFF: one reduce-scatter or all-reduce after the backward and one all-gather after the
     * update. The bits are the same either way. */
    ot_train_overlap overlap;
    int64_t steps; /* default 400; epochs > 0 overrides */
    int64_t epochs;
    int devices; /* default 8 */
    /* A ring, torus or TPU preset of exactly `devices` devices (INVALID_ARGUMENT otherwise);
     * NULL (default): "torus-2x4" with 8 devices, none (the collectives' rings) otherwise. */
    const char *topology;
    /* Train on a slice of a pod preset, "PRESET:SHAPE" ("v4-2x2x2:2x2x1"): a slice lease
     * (pod.h) in slice_registry places a contiguous sub-mesh of SHAPE best fit around the slices
     * other jobs hold there (in this process or any other on the host) and holds it until the
     * run ends; the job's devices are the slice's (devices must equal its size), its topology
     * the sub-mesh's, and the report lists their pod ids. One process only; not with topology,
     * nor with what needs a spare device (migrate_device, OT_RECOVER_RESTORE). NULL: no slice. */
    const char *slice;
    const char *slice_registry; /* the lease directory (created when missing); needed by slice */
    /* The gradient all-reduce's algorithm (collectives.h): "tree" by default (measured best for
     * the small gradients of the default model here, docs/train.md); "auto": the cost model. */
    const char *allreduce;
    const char *ckpt_dir; /* NULL: no checkpoints */
    int64_t ckpt_every;   /* default 100 */
    /* Save the last step too when it is not a multiple of ckpt_every (default true; never after
     * stop_after, which stands for a crash). */
    bool final_ckpt;
    int keep; /* checkpoints kept (default 3) */
    /* Replicated checkpoints: roots (not owned) that hold a copy of every checkpoint, written and
     * verified after each commit in ckpt_dir, with the same retention. On restore a step whose
     * copy in ckpt_dir is missing or fails verification is repaired from the first replica whose
     * copy verifies, and every replica's copy of the restored step that is missing or fails
     * verification is repaired from the verified one, so the run ends with nckpt_replicas + 1
     * good copies again. When checkpoints exist but no copy of any step verifies, resume fails
     * with FAILED_PRECONDITION and nothing is moved (without replicas the run would start from
     * step 0). Without resume the replica roots are prepared like ckpt_dir (fresh). */
    const char *const *ckpt_replicas;
    int nckpt_replicas;
    /* Continue from the newest checkpoint in ckpt_dir that verifies and whose tensors fit this
     * run. Damaged steps (failing verification, tensors missing or of other shapes) are passed
     * over and set aside as step_N.damaged; none left: from step 0. A checkpoint recorded for
     * another optimizer or model stops the run with FAILED_PRECONDITION naming both. */
    bool resume;
    /* Without resume, checkpoints already in ckpt_dir are an error (ALREADY_EXISTS) unless fresh
     * is set: then they are deleted first. */
    bool fresh;
    int fail_device; /* -1: none */
    int64_t fail_step;
    /* Live migration: the replica on device migrate_device (0..devices-1) moves to a spare device
     * when it begins step migrate_step (>= 1) through ot_ft_migrate's verified path (its
     * parameters and optimizer state serialized with their SHA-256, loaded onto the spare, read
     * back and compared byte for byte); the run's bits do not change. Once per run; one process
     * only (not with mpi). A migration that does not verify fails the run. -1: none. */
    int migrate_device;
    int64_t migrate_step;
    ot_recovery_policy recovery;
    int64_t eval_every;     /* default 50 (and at the end) */
    uint64_t seed;          /* default 0 */
    const char *trace_path; /* Chrome trace JSON of compute, communication, checkpoints */
    /* The persistent compilation cache (compiler.h; not owned) the gradient, evaluation and
     * optimizer executables are compiled through; NULL (default): compiled every time. */
    ot_compile_cache *compile_cache;
    int64_t stop_after; /* > 0: stop (as a crash would) after this many steps of this run */
    /* Across processes (optitpu launch): the MPI job from ot_mpi_init with `devices` local
     * devices per process; the pod is every process's devices, gradients are summed by
     * ot_mpi_hier_allreduce, process 0 evaluates, reports and writes checkpoints, and a resume
     * restores on process 0 and broadcasts. fail_device then kills the process hosting that
     * device (SIGKILL): Open MPI ends the job and optitpu launch restarts it from the newest
     * verified checkpoint. NULL: one process. */
    struct ot_mpi *mpi;
    /* Called on the leader's thread after every step, before that step's checkpoint is taken (a
     * step recorded here is recorded before its checkpoint can commit); may be NULL. */
    void (*on_progress)(void *ud, const ot_train_progress *p);
    /* Called for every event the user should know of (failures, recovery, checkpoints). */
    void (*on_event)(void *ud, const char *msg);
    void *ud;
} ot_train_options;

OT_API ot_train_options ot_train_options_default(void);

typedef struct ot_train_point {
    int64_t step;
    double loss, train_accuracy, test_accuracy, lr; /* test_accuracy -1 when not evaluated */
} ot_train_point;

#define OT_TRAIN_MAX_PARTS 16
typedef struct ot_train_part {
    char name[24];
    double wall_s, cpu_s, count;
} ot_train_part;

typedef struct ot_train_report {
    int64_t steps_run;  /* steps taken by this run (after a resume: from the restored step) */
    int64_t final_step; /* the step the parameters are at */
    int64_t start_step; /* 0, or the restored step */
    double final_loss;
    double test_accuracy, test_loss; /* of the last evaluation; -1 and NaN when none ran */
    double wall_s, samples_per_s;
    /* The steady steps: wall time from the end of the run's step max(1, steps / 10) to the end of
     * the last but one (the first steps' compilation and tier-up and the last step's evaluation
     * left out), and how many steps that is (a recovery inside the window is in it); 0 when the
     * run took fewer than 3 steps. The leader's clock (process 0's across processes). */
    double steady_wall_s;
    int64_t steady_steps;
    double compute_s, comm_s, ckpt_s, other_s; /* leader's step time by phase */
    double outside_compute_share;              /* (wall - compute) / wall of the step loop */
    /* The step loop's timeline by part, as the trace names them ("input", "forward+backward",
     * "gather", "all-reduce", "scatter", "optimizer", "parameters", "evaluate", "checkpoint",
     * ...): wall and thread CPU seconds over the run and times run, each the mean over this
     * process's replicas. wall_s less their wall times summed is time outside every part (the
     * loop's bookkeeping, a replica's thread off the cores between parts). */
    ot_train_part parts[OT_TRAIN_MAX_PARTS];
    int nparts;
    int devices_start, devices_end;
    int failures;
    int *slice_devices; /* with slice: the pod id of each of the job's devices (owned) */
    int nslice_devices;
    int migrations;             /* replicas moved by migrate_device */
    double migrate_s;           /* their time (read, verify, load, read back) */
    double detect_s, recover_s; /* last failure: heartbeat stop → detection; detection → running */
    int64_t checkpoints;
    /* The gradient all-reduce's deadline: a base plus the step's work at slow rates (docs/train.md)
     */
    double allreduce_timeout_s;
    /* The bytes one replica contributes to a step's all-reduces (the gradients, compressed with
     * grad_compress, and the loss and correct count; with local_sgd the averages' parameters),
     * on average over the run's steps, and their sum over the run's steps and replicas. */
    int64_t allreduce_bytes_per_step;
    int64_t allreduce_bytes;
    /* The optimizer state one device holds (its state tensors' bytes; with shard_optimizer its
     * block's, about 1/devices of the unsharded figure). */
    int64_t optim_state_bytes_per_device;
    /* Peak bytes in use of the device memory pools over the run: the leader's (which also holds
     * the test set and evaluates) and the largest of the other replicas' in this process (0 when
     * the leader is alone). Parameters, optimizer state, each step's batch, outputs and arena. */
    int64_t leader_peak_bytes, replica_peak_bytes;
    bool shard_optimizer; /* the run sharded its optimizer update */
    bool overlapped;      /* its communication overlapped the backward (options.overlap) */
    /* Compiling the executables (or loading them from compile_cache), and how many of them were
     * loaded from / stored into the cache. */
    double compile_s;
    int compile_cache_hits, compile_cache_misses;
    /* SHA-256 of the final parameters' f32 bytes in parameter order. Every replica's parameters
     * are hashed at the end and must be identical (else the run fails with OT_ERR_INTERNAL). */
    uint8_t params_sha256[32];
    ot_tensor *params; /* the final parameters (owned copies), in model order */
    int nparams;
    int64_t param_elements;
    ot_train_point *points; /* one per step */
    int64_t npoints;
    char *log;    /* the events, one per line */
    bool stopped; /* stop_after cut the run short */
} ot_train_report;

OT_API ot_status ot_train(const ot_train_options *o, ot_train_report *out);
OT_API void ot_train_report_clear(ot_train_report *r);
/* The curves as CSV (step,loss,train_accuracy,test_accuracy,lr) and as an SVG chart (loss and
 * accuracy against step). Each file is written beside its path and renamed over it, so an
 * interrupted write leaves the previous file. */
OT_API ot_status ot_train_write_csv(const ot_train_report *r, const char *path);
OT_API ot_status ot_train_write_svg(const ot_train_report *r, const char *path);
/* Appends one row to a CSV written by ot_train_write_csv, in one write(2), so that a process
 * killed at any moment leaves every earlier row whole and this one whole, absent, or cut short
 * without its newline (which ot_train_read_csv drops). Not fsynced: rows survive a killed
 * process, not a lost machine. */
OT_API ot_status ot_train_append_csv(const char *path, const ot_train_point *p);
/* Reads a CSV written by ot_train_write_csv (a resumed run keeps its earlier rows): *points
 * (ot_free) in file order. A last line without its newline is an append cut off by a kill and is
 * dropped. OT_ERR_NOT_FOUND when the file does not exist; OT_ERR_CORRUPT_DATA naming the line for
 * another header, a malformed row or steps that do not increase. */
OT_API ot_status ot_train_read_csv(const char *path, ot_train_point **points, int64_t *n);
/* The report as one JSON object (ot_free). */
OT_API ot_status ot_train_report_json(const ot_train_report *r, char **out);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_TRAIN_H */
