/*
 * optitpu sim: predicts a data-parallel training step on a pod of chips: compute from a compiled
 * step's per-kernel FLOPs and bytes on a device model (roofline per kernel), the gradient
 * all-reduce (or reduce-scatter + all-gather with a sharded optimizer) from the pod's
 * collective cost model (collectives.h, ot_coll_cost_us) on a topology, memory per chip against
 * HBM capacity, and goodput under failures (checkpoint cost, Young/Daly interval). Behind
 * `optitpu simulate` (docs/simulate.md).
 *
 *     ot_sim_device d;
 *     OT_CHECK(ot_sim_device_preset("v5p", &d));
 *     ot_sim_config c = ot_sim_config_default();
 *     c.device = d;
 *     c.topology = t;                   // chips = ot_topology_size(t)
 *     c.global_batch = 4096;
 *     c.step = exe;                     // one chip's forward+backward for c.step_batch samples
 *     c.step_batch = 4096 / ot_topology_size(t);
 *     c.param_bytes = ...;
 *     ot_sim_result r;
 *     ot_status s = ot_sim_run(&c, &r); // OUT_OF_MEMORY (r filled) when a chip cannot hold it
 *
 * Ownership: the config borrows the executable and the topology for the call; results hold no
 * pointers. Errors: INVALID_ARGUMENT names the bad field and its value; OUT_OF_MEMORY says
 * "does not fit" with every term of the per-chip memory and the capacity.
 * Thread safety: every function is reentrant; ot_sim_device_host_calibrate runs work on this
 * machine (seconds) and should not run beside timing-sensitive work.
 */
#ifndef OPTITPU_SIM_H
#define OPTITPU_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/collectives.h"
#include "optitpu/compiler.h"
#include "optitpu/core.h"
#include "optitpu/pod.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Classes of a fused instruction with native code on the host, each with its own measured cost
 * per element (ot_sim_device.op_s): arithmetic (add, multiply, maximum, compare, select, iota,
 * ...), conversions (convert), exp-like (exponential, exponential-minus-one, tanh, logistic),
 * log-like (log, log-plus-one, power, sine, cosine, ...), division and roots (divide, sqrt,
 * rsqrt, remainder), and reduce (per element of its input). Parameters, constants, broadcasts,
 * reshapes, bitcasts and tuples cost nothing. */
enum {
    OT_SIM_OP_ARITH,
    OT_SIM_OP_CONVERT,
    OT_SIM_OP_EXP,
    OT_SIM_OP_LOG,
    OT_SIM_OP_DIVIDE,
    OT_SIM_OP_REDUCE,
    OT_SIM_OP_CONVERT_REDUCED, /* a convert in a fusion whose result is reduced */
    OT_SIM_OP_CLASSES
};
#define OT_SIM_POOL_POINTS 6  /* hand-off measured after this many gaps */
#define OT_SIM_MAX_DOTS    32 /* dot shapes with a measured rate */
#define OT_SIM_MAX_FUSIONS 64 /* native fusions with a measured cost */

/* One thread's measured rate for one dot shape (operand shapes, dimension numbers and dtype:
 * ot_sim_dot_key); for a shape the runtime splits over its pool, the dot run through the pool
 * after each of the hand-off's gaps (pool_gap_s of the probe): its wall time (median) and the
 * process's CPU time in it (mean: both threads' work, spinning, wake-ups), 0 when not measured. */
typedef struct ot_sim_dot_rate {
    uint64_t key;
    double flops_per_s;
    double pool_s[OT_SIM_POOL_POINTS], pool_cpu_s[OT_SIM_POOL_POINTS];
} ot_sim_dot_rate;

/* The dot shape key of kernel k of e (0 when it is not a dot). */
OT_API uint64_t ot_sim_dot_key(const ot_executable *e, int k);

/* One thread's measured work for one native loop fusion (its fused computation compiled alone:
 * ot_sim_fusion_key), at the batch of the executable it was probed in. */
typedef struct ot_sim_fusion_cost {
    uint64_t key;
    double s;
} ot_sim_fusion_cost;

/* The key of kernel k of e when it is a loop fusion with native code (its fused computation's
 * instructions, names, shapes and attributes: two executables compiled from the same module give
 * the same keys); 0 otherwise. */
OT_API uint64_t ot_sim_fusion_key(const ot_executable *e, int k);

/* A chip. Rates are per chip; a kernel takes max(flops / peak, bytes / hbm) + launch. */
typedef struct ot_sim_device {
    char name[32];
    double peak_flops_f32;     /* FLOP/s of f32 (and f64) kernels */
    double peak_flops_bf16;    /* FLOP/s of bf16 and f16 kernels */
    double peak_flops_int8;    /* OP/s of s8/u8 kernels */
    double hbm_bytes_per_s;    /* memory bandwidth */
    double hbm_capacity_bytes; /* memory per chip */
    double launch_s;           /* fixed cost per kernel */
    int chips_per_host;        /* chips whose host writes one share of a checkpoint */
    double ckpt_write_bytes_per_s, ckpt_read_bytes_per_s; /* per writing host */
    /* In-process host devices: every chip is one thread of this process. Rates above are one
     * thread's; with N devices each runs at them times core_share[N] (the share of a core each
     * of N busy threads gets: min(1, cores / N) from calibration),
     * gradients move in shared memory (the collectives' shared-memory cost model with
     * shm_cost: the measured per-message cost and copy bandwidth), and one process writes the
     * whole checkpoint. */
    bool shared_host;
    int cores;
    double core_share[9]; /* [n] for n = 1..8 devices; beyond 8: core_share[8] * 8 / n */
    ot_cost_params shm_cost;
    /* The shared-memory per-message cost of the all-reduce after the last member arrives, as a
     * training step meets it (ot_sim_host_calibration.tail_alpha_s; 0: shm_cost's). With the
     * host's kernel model ot_sim_run prices the in-process all-reduce with it: measured with
     * steps back to back, it holds the members woken last by the tree queueing for cores that
     * the first ones back took for their next step, where shm_cost is a ring ping-pong with
     * every member asleep between its messages. */
    double shm_tail_alpha_us;
    /* A host's caches (0 for a TPU: one tier): a kernel touching less than cache_bytes (read +
     * written) runs on its device's thread with data in the caches, at these rates instead; a
     * shared-memory collective whose members' blocks together fit in half of shm_cache_bytes
     * (the last-level cache) moves at cache_shm_bytes_per_s (GB/s in shm_cost otherwise). */
    double cache_bytes, cache_flops_f32, cache_bytes_per_s, cache_shm_bytes_per_s;
    double shm_cache_bytes;
    /* A loop fusion without native code (ot_executable_kernel_native) is interpreted: at least
     * interp_s per output element and fused instruction (0 for a TPU: XLA compiles every one). */
    double interp_s;
    /* A kernel on the host runtime's pool (touching cache_bytes or more; a dot the fast GEMM
     * splits over a pool of `cores` threads, ot_host_dot_splits) pays pool_s more. */
    double pool_s;
    /* The host pipeline of a step that stages its data through host memory (optitpu train on
     * host devices): one buffer put on or read off a device, and host copies (bytes read +
     * written per second). 0 for a TPU (its input pipeline runs beside the step). */
    double transfer_s, copy_bytes_per_s;
    /* The host's kernel model (pool_points > 0; ot_sim_device_host_probe), replacing the tiers
     * above: every kernel's work is one thread's time from measured costs — a dot at the rate
     * measured for its shape (dots[], else cache_flops_f32 / peak_flops_f32 by the tier), a
     * native fusion at its work measured alone (fusions[]; else its instructions' op_s[class]
     * per element), or its bytes at the in-cache bandwidth if more, an interpreted fusion at
     * interp_s, the rest roofline — plus launch_s per kernel and exec_s per executable run. A
     * kernel the runtime hands to its pool (ot_host_dot_splits for a dot,
     * ot_executable_kernel_native_splits for a native fusion; pool_threads threads, caller
     * included, pool_speedup times one thread's speed together) takes max(H, H/2 + (work - H/2) /
     * pool_speedup), where H is the measured hand-off after the device thread ran `gap` seconds of
     * other kernels since the pool last ran (pool_gap_s ascending, pool_handoff_s; linear between,
     * clamped): the pool's threads spin briefly, then sleep, and a sleeping pool costs a wake-up
     * each way. One executable run on its own starts with the pool asleep; ot_sim_run's step starts
     * after the previous step's last pooled kernel, its exposed communication, optimizer and host
     * pipeline. avail, the share of a core that other processes leave each of `cores` busy threads,
     * gives the cores bound of ot_sim_run.
     */
    int pool_points, pool_threads;
    double pool_gap_s[OT_SIM_POOL_POINTS], pool_handoff_s[OT_SIM_POOL_POINTS];
    double pool_handoff_cpu_s[OT_SIM_POOL_POINTS]; /* CPU the hand-off burns (the cores bound) */
    double pool_speedup;
    double op_s[OT_SIM_OP_CLASSES];
    int ndots;
    ot_sim_dot_rate dots[OT_SIM_MAX_DOTS];
    /* native fusions measured alone (ot_sim_fusion_key): their work replaces the class sum */
    int nfusions;
    ot_sim_fusion_cost fusions[OT_SIM_MAX_FUSIONS];
    double avail;  /* 0: 1 */
    double exec_s; /* once per executable run, besides launch_s per kernel */
} ot_sim_device;

/* "v4", "v5e", "v5p" (figures from Google Cloud's TPU pages, cited in docs/simulate.md), also
 * accepted with a topology suffix ("v5p-4x4x4"). INVALID_ARGUMENT for anything else (the host
 * model is measured: ot_sim_device_host_calibrate). */
OT_API ot_status ot_sim_device_preset(const char *name, ot_sim_device *out);

typedef struct ot_sim_host_calibration {
    double dot_flops;              /* f32 dot [256x256]x[256x256] on one thread, FLOP/s */
    double stream_bytes_per_s;     /* STREAM triad, one thread (ot_bench_limits_measure) */
    double memcpy_bytes_per_s;     /* memcpy, one thread */
    double memcpy_all_bytes_per_s; /* memcpy, every core */
    double launch_s;               /* one-kernel executable, per execute */
    double write_bytes_per_s, read_bytes_per_s; /* file write+fsync, read (bench limits) */
    double alpha_s[9]; /* fitted all-reduce message cost with n in-process devices (2..8) */
    /* the all-reduce after the last of n devices (2..8), per message: n threads run rounds back
     * to back as steps run, each a fixed number of pooled dots then a 4-byte tree all-reduce,
     * timed from the round's last arrival to the last member done (median of 41) over the tree's
     * 2 ceil(log2 n) messages: members woken last queue for cores the first ones back took */
    double tail_alpha_s[9];
    /* in that probe, the longest a member spent between its all-reduce and its next round's work
     * (median over the rounds): a clock read when rounds run back to back */
    double tail_rejoin_s[9];
    double core_share[9]; /* of a core, per thread of n busy ones: min(1, cores / n) */
    int cores;
} ot_sim_host_calibration;

/* Measures this machine (about 2 s): a dot through the runtime on one thread, bench limits'
 * memcpy, STREAM and file figures (tmp_dir, NULL: $TMPDIR or /tmp), a one-kernel executable's
 * launch cost and the in-process all-reduce's per-message cost; the cores are counted. Other
 * processes' load is not modelled: timings are medians, so they see the machine when it runs. Fills
 * the calibration (may be NULL) and the "host" device model for one device. */
OT_API ot_status ot_sim_device_host_calibrate(const char *tmp_dir, ot_sim_device *out,
                                              ot_sim_host_calibration *cal);
/* The "host" device model from a calibration (for n in-process devices: alpha_s[n]). */
OT_API void ot_sim_device_host_from(const ot_sim_host_calibration *cal, int devices,
                                    ot_sim_device *out);

/* One in-process device thread's rates on this machine while `devices` device threads run the
 * same work at once, in wall time: each figure's work is timed by the thread's CPU time (what it
 * costs while the thread runs) and divided by the share of the wall time a busy device thread
 * ran over the whole window (CPU time / wall time, averaged over the threads and figures): the
 * share of the cores each thread gets, from the other device threads and from other processes'
 * load, is in the figures as it is in a training step's wall time. The all-reduce's per-message
 * cost is wall time (it waits for other threads to run). Taken right before and after a
 * measurement, it prices that measurement under the same conditions. */
typedef struct ot_sim_host_rates {
    int devices;
    double window_s; /* per figure */
    double
        dot_flops; /* f32 dots on the runtime's pool: the rate between a 128x32x128 and a 256^3 */
    double pool_s; /* what a pooled kernel pays beyond its work: the hand-off to the pool's
                      threads and waiting for them (the 128x32x128 dot's time less its work) */
    double cache_flops;       /* f32 dot 32^3 (on the device's thread, in the caches) */
    double mem_bytes_per_s;   /* f32 add over 64 MiB / devices each (past the last-level cache),
                                 bytes read + written */
    double cache_bytes_per_s; /* f32 add over 192 KiB (in the caches), read + written */
    double launch_s;          /* a one-kernel executable, per execution */
    double transfer_s;        /* a 4 KiB buffer put on or read off a host device */
    double copy_bytes_per_s;  /* memcpy of 64 KiB, read + written */
    double llc_bytes;         /* the last-level cache (ot_bench_llc_bytes) */
    double alpha_s;           /* in-process all-reduce, per message (4-byte ring / 2(n-1)) */
    double interp_s; /* an interpreted loop fusion of 3 instructions over 4096 f32, per element and
                        instruction */
    double cache_limit_bytes; /* the cache tier's bound: ot_host_inline_bytes() */
    double core_share;        /* of the wall time a busy device thread ran (CPU time / wall time) */
} ot_sim_host_rates;

/* Measures the rates with `devices` (1..64) threads of this process at once, window_s (> 0) of
 * wall time per figure (about 9 windows in all). */
OT_API ot_status ot_sim_host_measure(int devices, double window_s, ot_sim_host_rates *out);

/* The host's kernel model, measured by probes independent of the program it will price: on one
 * thread (CPU time, medians) the rate of every dot shape that the given executables contain (a
 * dot of the same operand shapes and dimension numbers compiled alone) and the work of every
 * native loop fusion they contain (its fused computation compiled alone, native code on), a
 * 256^3 dot, and the per-element cost of each fused-instruction class (a native loop fusion of that
 * class over 8192 f32 in the caches, less the launch); through the runtime's default pool the 256^3
 * dot's speed-up and the hand-off of a 128x32x128 dot after 0, 3, 10, 30, 100 and 300 us of other
 * work on the calling thread (wall-time medians); and, with every core busy on its own thread, the
 * share of a core this process gets (other processes' load). About 0.3 s. */
typedef struct ot_sim_host_probe {
    double exec_s;     /* a one-kernel executable's run, less one kernel's launch */
    double launch_s;   /* one more kernel in an executable (a chain of 8 small dots against 1) */
    double dot1_flops; /* 256^3 on one thread */
    int pool_threads;
    double pool_speedup;
    double pool_gap_s[OT_SIM_POOL_POINTS], pool_handoff_s[OT_SIM_POOL_POINTS];
    /* the process's CPU time of a hand-off beyond the dot's work (spinning, wake-ups) */
    double pool_handoff_cpu_s[OT_SIM_POOL_POINTS];
    double op_s[OT_SIM_OP_CLASSES];
    int ndots;
    ot_sim_dot_rate dots[OT_SIM_MAX_DOTS];
    /* every native loop fusion of the executables, its fused computation compiled alone (native
     * code on) and run on one thread: CPU-time median less an executable run's fixed cost */
    int nfusions;
    ot_sim_fusion_cost fusions[OT_SIM_MAX_FUSIONS];
    double interp_s; /* an interpreted fusion, per element and instruction (ot_sim_host_rates) */
    double cache_bytes_per_s; /* f32 add over 8192 elements in the caches, read + written */
    double avail;
    int cores;
} ot_sim_host_probe;
OT_API ot_status ot_sim_host_probe_measure(const ot_executable *const *exes, int nexes,
                                           ot_sim_host_probe *out);
/* Puts a probe's kernel model into a host device (one built by ot_sim_device_host_rates or
 * _from): pool_points > 0 from then on. */
OT_API void ot_sim_device_host_probe(const ot_sim_host_probe *p, ot_sim_device *d);
/* The "host" device model for r->devices in-process devices from measured rates (their core
 * share is in them); cal supplies what is not re-measured (checkpoint file bandwidth, cores). */
OT_API void ot_sim_device_host_rates(const ot_sim_host_rates *r, const ot_sim_host_calibration *cal,
                                     ot_sim_device *out);

/* optitpu train's own work in one step on one device's thread, besides its executables and
 * collectives (docs/train.md, the step's parts): the batch's rows gathered from the dataset (its
 * permutation redrawn once an epoch) and put on the device with their labels; each gradient
 * output read into one vector and the loss and correct count read, those outputs freed; the
 * summed gradients put back one buffer per parameter and the optimizer's step and learning rate
 * put on the device, all freed after the update; and the timeline's bookkeeping, a wall and a
 * thread-CPU clock at the start and the end of each part. */
#define OT_SIM_MAX_LOOP_PARAMS 64
typedef struct ot_sim_train_loop {
    int64_t rows;           /* one device's batch */
    int64_t features;       /* f32 per row */
    int64_t dataset_rows;   /* rows the batch is drawn from (>= rows) */
    int nparams;            /* 1..OT_SIM_MAX_LOOP_PARAMS */
    const ot_shape *params; /* borrowed: each parameter's shape (f32) */
    int parts;              /* timeline parts a step records (train: 6 without overlap) */
    /* run untimed before each step's work (borrowed, 0..8; zero-filled memory): the step's
     * executables, so that the work meets the caches and allocator as a step leaves them */
    const ot_executable *const *between;
    int nbetween;
} ot_sim_train_loop;

/* Runs that work step after step on this thread with a host device of its own for window_s of
 * wall time (at least 21 steps after 3 warm-up ones; before each, untimed, the `between`
 * executables run): this thread's CPU seconds per step, the median. The buffers the runs allocate
 * for their outputs are part of the work (the step's loss, correct count and gradients; every
 * other `between` executable's, the buffers they replace freed): the kernel model's run cost is
 * a one-output executable's. Like the kernel
 * probes, the work's cost on one thread (other processes' load is not in it); the output is
 * ot_sim_config.host_work_s. INVALID_ARGUMENT for sizes out of range or a parameter not f32. */
OT_API ot_status ot_sim_train_loop_measure(const ot_sim_train_loop *l, double window_s,
                                           double *seconds);

typedef struct ot_sim_config {
    ot_sim_device device;
    /* The chips and their links; NULL with device.shared_host: `chips` in-process devices. */
    const ot_topology *topology;
    int chips; /* with a topology: 0 or its size */
    int64_t global_batch;
    /* One chip's forward+backward step (borrowed). When step_batch differs from the per-chip
     * batch global_batch / chips, every kernel's FLOPs and bytes are scaled by the ratio (an
     * approximation: recompile at the per-chip batch for exact figures). */
    const ot_executable *step;
    int64_t step_batch;
    int64_t param_bytes;      /* model parameters (f32); the gradients are as large */
    int optimizer_states;     /* state tensors per parameter (Adam: 2) */
    int state_bytes;          /* bytes per state element: 4 (f32, default) or 2 (bf16) */
    double optimizer_flops;   /* per parameter element (Adam: about 12) */
    int64_t input_bytes;      /* one chip's batch inputs held during the step */
    bool shard_optimizer;     /* reduce-scatter, 1/N of the update and state, all-gather */
    bool overlap;             /* buckets all-reduced while the backward pass runs */
    double backward_fraction; /* of the step's compute; default 2/3 */
    int64_t bucket_bytes;     /* gradient fusion buckets; default 25 MiB */
    ot_coll_algo algo;        /* OT_ALGO_AUTO: the cost model's choice per bucket */
    /* Rings of disjoint links a collective's bytes are split over, all running at once (each
     * priced by the pod's cost model); 0: ot_sim_link_rings(topology). */
    int rings;
    /* The compiled optimizer update (borrowed; NULL: one fused elementwise update priced from
     * optimizer_flops and the state bytes); with shard_optimizer its kernels are scaled by 1/N. */
    const ot_executable *update;
    /* Host pipeline per step (device.transfer_s, device.copy_bytes_per_s): buffers put on or
     * read off the device and bytes copied in host memory (read + written); 0 on a TPU. */
    int64_t host_transfers;
    double host_copy_bytes;
    /* The host pipeline measured (ot_sim_train_loop_measure): one device thread's CPU seconds per
     * step; when > 0 it replaces host_transfers and host_copy_bytes. In one process it runs at one
     * thread's speed (the other device threads sleep while they wait, as for the update); with
     * processes that poll, at the cores bound's share (below). */
    double host_work_s;
    /* Host devices spread over `processes` processes of this machine (0 or 1: one process;
     * chips a multiple of it): each process's chips all-reduce in shared memory as above, and
     * every bucket then crosses the processes over their transport (MPI) in
     * process_alpha_s + bytes / process_bytes_per_s, after the backward pass (as optitpu train
     * --mpi does), measured for that many processes (bench simulate: bench collectives --mpi).
     * With the host's kernel model, a process's device thread stays runnable while it waits
     * (the transport polls), so when they and other processes' threads outnumber the cores the
     * optimizer and host pipeline are priced at the same share of a core as the cores bound.
     * Not with shard_optimizer. */
    int processes;
    double process_alpha_s, process_bytes_per_s;
    int64_t ckpt_every; /* steps between checkpoints; 0: the optimal interval */
    double mtbf_hours;  /* per chip; 0: no failures */
    double restart_s;   /* lost to a failure beyond the restore (rescheduling) */
} ot_sim_config;

OT_API ot_sim_config ot_sim_config_default(void);

typedef struct ot_sim_result {
    int chips;
    int64_t per_chip_batch;
    int kernels;
    double flops;     /* one chip's step */
    double compute_s; /* forward+backward, roofline per kernel */
    /* With the host's kernel model (device.pool_points > 0): compute_s is the largest of one
     * device's path (its kernels in order, hand-offs and waits included), the cores (every
     * device's CPU work over cores x avail: devices beyond the cores take turns) and the pool
     * (the devices of one process share its runtime pool, one kernel at a time, each at its
     * back-to-back time when several share it: the pool does not rest then), named in
     * `bound` ("path", "cores", "pool"); 0 and "" otherwise. */
    double path_s, cores_s, pool_s;
    char bound[8];
    /* With the host's kernel model: the process CPU seconds of one step, every device's step and
     * update (kernels' work, launches, what hand-offs burn) and the host pipeline; 0 otherwise. */
    double cpu_s;
    double comm_s;         /* every gradient collective, end to end */
    double exposed_comm_s; /* comm not hidden under the backward pass */
    double optimizer_s;
    double host_s; /* the host pipeline (transfers and copies) */
    double step_s; /* compute + exposed comm + optimizer + host pipeline */
    double samples_per_s;
    char algo[24]; /* the algorithm of the (largest) bucket: "ring", ... */
    int buckets;
    int rings; /* rings the collectives were split over */
    double mem_params, mem_grads, mem_optimizer, mem_activations, mem_inputs, mem_total,
        mem_capacity;
    bool fits;
    double ckpt_bytes, ckpt_write_s, ckpt_restore_s;
    double system_mtbf_s;      /* mtbf_hours / chips; infinity without failures */
    double ckpt_every;         /* steps (as configured, or the optimum) */
    double optimal_ckpt_every; /* Daly's interval in steps (>= 1); 0 without failures */
    double goodput;            /* useful fraction at ckpt_every */
    double goodput_optimal;    /* at the optimal interval */
} ot_sim_result;

/* optitpu train's host pipeline on host devices (docs/train.md, a step's phases) for a model of
 * nparams parameter tensors, from c->param_bytes and c->input_bytes (one chip's batch): the batch
 * gathered and put on the device (2 transfers), the loss, correct count and gradients read off it
 * (nparams + 2) and copied into one vector, the summed gradients put back (nparams), the
 * optimizer's step and learning rate (2); copies: the batch twice, the gradients three times,
 * each byte read and written. Sets c->host_transfers and c->host_copy_bytes. */
OT_API void ot_sim_config_train_pipeline(ot_sim_config *c, int nparams);

/* Predicts one chip count. OUT_OF_MEMORY with *out filled (fits false) when a chip's memory is
 * over its capacity; INVALID_ARGUMENT for a batch not divisible by the chips, a topology of
 * another size, an algorithm the topology does not support, non-positive sizes. */
OT_API ot_status ot_sim_run(const ot_sim_config *c, ot_sim_result *out);

/* The roofline time of one executable on one chip, each kernel's FLOPs and bytes scaled by
 * `scale` (> 0); for a shared host device, with `share` devices running at once (ignored for a
 * TPU). An interpreted loop fusion takes at least its elements x instructions x interp_s. */
OT_API double ot_sim_compute_s(const ot_sim_device *d, const ot_executable *e, double scale,
                               int share, double *flops);

/* With the host's kernel model (d->pool_points > 0): the CPU work of one run of e, every kernel's
 * one-thread work and launch, the run's fixed cost and the CPU its hand-offs burn
 * (pool_handoff_cpu_s; what the cores bound counts per device); 0 without it. */
OT_API double ot_sim_host_cpu_s(const ot_sim_device *d, const ot_executable *e, double scale);

/* Kernel k of e alone, as ot_sim_compute_s prices it (seconds; its scaled FLOPs in *flops). */
OT_API double ot_sim_kernel_s(const ot_sim_device *d, const ot_executable *e, int k, double scale,
                              int share, double *flops);

/* How many rings of disjoint links a collective can use at once on t, each in both directions:
 * 2 x axes on a torus whose every axis (of more than one chip) wraps and has at least 3 chips
 * (such a torus splits into that many edge-disjoint Hamiltonian cycles); 2 when the topology
 * has one Hamiltonian ring; else (and for t NULL, shared memory) 1. */
OT_API int ot_sim_link_rings(const ot_topology *t);
/* One collective priced by the pod's cost model (ot_coll_cost_us) on the topology (or, for a
 * shared-memory host device with t NULL, on n in-process members with d->shm_cost), its bytes
 * split over `rings` rings at once (0: ot_sim_link_rings(t)): seconds, and the algorithm AUTO
 * picked. bytes as in ot_coll_cost_us (per member). */
OT_API ot_status ot_sim_collective_s(const ot_sim_device *d, const ot_topology *t, int n,
                                     ot_coll_kind kind, ot_coll_algo algo, size_t bytes, int rings,
                                     double *seconds, ot_coll_algo *used);
/* The ring all-reduce time 2(n-1)/n * S/B + 2(n-1) * alpha (seconds; B bytes/s per link). */
OT_API double ot_sim_ring_allreduce_s(int n, double bytes, double link_bytes_per_s, double alpha_s);
/* Daly's optimal checkpoint interval (seconds of work between checkpoints) for checkpoint cost
 * delta and system MTBF m (Daly 2006; m when delta >= 2m), and the expected useful
 * fraction of wall time with interval tau, restart r (Daly 2006, exponential failures). */
OT_API double ot_sim_daly_interval_s(double delta, double m);
OT_API double ot_sim_useful_fraction(double tau, double delta, double r, double m);

/* One result as a JSON object (ot_free). */
OT_API ot_status ot_sim_result_json(const ot_sim_result *r, char **out);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_SIM_H */
