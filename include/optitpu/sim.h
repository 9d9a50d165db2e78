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
    double alpha_s[9];    /* fitted all-reduce message cost with n in-process devices (2..8) */
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
    int64_t ckpt_every; /* steps between checkpoints; 0: the optimal interval */
    double mtbf_hours;  /* per chip; 0: no failures */
    double restart_s;   /* lost to a failure beyond the restore (rescheduling) */
} ot_sim_config;

OT_API ot_sim_config ot_sim_config_default(void);

typedef struct ot_sim_result {
    int chips;
    int64_t per_chip_batch;
    int kernels;
    double flops;          /* one chip's step */
    double compute_s;      /* forward+backward, roofline per kernel */
    double comm_s;         /* every gradient collective, end to end */
    double exposed_comm_s; /* comm not hidden under the backward pass */
    double optimizer_s;
    double step_s; /* compute + exposed comm + optimizer */
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

/* Predicts one chip count. OUT_OF_MEMORY with *out filled (fits false) when a chip's memory is
 * over its capacity; INVALID_ARGUMENT for a batch not divisible by the chips, a topology of
 * another size, an algorithm the topology does not support, non-positive sizes. */
OT_API ot_status ot_sim_run(const ot_sim_config *c, ot_sim_result *out);

/* The roofline time of one executable on one chip, each kernel's FLOPs and bytes scaled by
 * `scale` (> 0); for a shared host device, with `share` devices running at once (ignored for a
 * TPU). */
OT_API double ot_sim_compute_s(const ot_sim_device *d, const ot_executable *e, double scale,
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
