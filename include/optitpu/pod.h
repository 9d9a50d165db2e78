/*
 * optitpu pod: the devices that train together — physical topology (ring, mesh, torus, TPU
 * presets), logical meshes with named axes, the coordinator (registry, health state machine,
 * heartbeats, phi-accrual failure detection, membership epochs, channels, load balancing,
 * events), generation-counted barriers with deadlines, slice scheduling and batch coordination.
 * Collectives live in optitpu/collectives.h.
 *
 * Usage:
 *
 *     ot_topology *t;
 *     OT_CHECK(ot_topology_preset("v4-4x4x4", &t));         // 64 chips, 3D torus
 *     int ring[64];
 *     OT_CHECK(ot_topology_ring(t, ring));                  // Hamiltonian cycle over the links
 *     int hops = ot_topology_hops(t, 0, 63);
 *     ot_topology_free(t);
 *
 *     ot_coord_options co = ot_coord_options_default();
 *     co.clock = my_clock; co.clock_ud = &fake_now;          // injectable time (tests)
 *     ot_coord *c;
 *     OT_CHECK(ot_coord_create(&co, &c));
 *     int dev;
 *     OT_CHECK(ot_coord_register(c, "host:0", &dev));         // joining
 *     ot_coord_heartbeat(c, dev);                            // ... every interval
 *     ot_coord_tick(c);                                      // evaluates the failure detector
 *     ot_coord_free(c);
 *
 * Thread safety: a topology and a logical mesh are immutable after creation and may be shared.
 * The coordinator, barriers and the slice scheduler lock internally: any thread may call them.
 * Event callbacks run on the thread that caused the event (tick, heartbeat, register...) after
 * the coordinator's lock is released; they may call back into the coordinator.
 */
#ifndef OPTITPU_POD_H
#define OPTITPU_POD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Time. Everything in the pod that reads time takes a clock function so that tests can drive it
 * deterministically. NULL means ot_now_ns (CLOCK_MONOTONIC).
 * ------------------------------------------------------------------------------------------- */

typedef uint64_t (*ot_clock_fn)(void *ud);

/* ---------------------------------------------------------------------------------------------
 * Topology: an n-dimensional grid (1 to 3 axes), each axis with or without wraparound.
 * Device ids put axis 0 (x) fastest: id = x + X*(y + Y*z), matching TPU "XxYxZ" naming.
 * ------------------------------------------------------------------------------------------- */

#define OT_TOPO_MAX_DIMS    3
#define OT_TOPO_MAX_DEVICES 65536

typedef struct ot_topology ot_topology;

typedef struct ot_topology_desc {
    const char *name;            /* copied; NULL → derived from the shape */
    int ndims;                   /* 1..3 */
    int dims[OT_TOPO_MAX_DIMS];  /* each >= 1 */
    bool wrap[OT_TOPO_MAX_DIMS]; /* wraparound link on this axis (a torus axis) */
    double link_gbytes_per_s;    /* per link, per direction; > 0 */
    double link_latency_us;      /* per hop; >= 0 */
} ot_topology_desc;

/* A 1D ring of n devices, 1 GB/s, 1 us unless changed. */
OT_API ot_topology_desc ot_topology_desc_default(void);
OT_API ot_status ot_topology_create(const ot_topology_desc *d, ot_topology **out);
/* Presets: "v2-AxB", "v3-AxB" (2D torus), "v4-AxBxC" (3D torus built from 4x4x4 cubes; smaller
 * slices are meshes), "v5e-AxB" (2D, up to 16x16), "v5p-AxBxC" (3D torus from 4x4x4 cubes),
 * and generic "ring-N", "mesh-A[xB[xC]]", "torus-A[xB[xC]]". Link figures come from the public
 * specifications cited in src/pod/topology.c. Unknown names or out-of-spec shapes are
 * OT_ERR_INVALID_ARGUMENT with a message naming the limit. */
OT_API ot_status ot_topology_preset(const char *spec, ot_topology **out);
OT_API void ot_topology_free(ot_topology *t); /* NULL is a no-op */

OT_API const char *ot_topology_name(const ot_topology *t);
OT_API int ot_topology_size(const ot_topology *t);
OT_API int ot_topology_ndims(const ot_topology *t);
OT_API int ot_topology_dim(const ot_topology *t, int axis);    /* 1 for axis >= ndims */
OT_API bool ot_topology_wraps(const ot_topology *t, int axis); /* false for axis >= ndims */
OT_API double ot_topology_link_gbytes_per_s(const ot_topology *t);
OT_API double ot_topology_link_latency_us(const ot_topology *t);

/* Coordinates <-> id. coords has OT_TOPO_MAX_DIMS entries (unused axes are 0). The id form
 * returns -1 for coordinates outside the grid. */
OT_API void ot_topology_coords(const ot_topology *t, int id, int coords[OT_TOPO_MAX_DIMS]);
OT_API int ot_topology_id(const ot_topology *t, const int coords[OT_TOPO_MAX_DIMS]);
/* Distinct neighbours by direct link, in axis order (-, +); returns their number (<= 6). */
OT_API int ot_topology_neighbors(const ot_topology *t, int id, int out[2 * OT_TOPO_MAX_DIMS]);
OT_API bool ot_topology_adjacent(const ot_topology *t, int a, int b);
/* Hop distance along shortest paths (wraparound used where present). */
OT_API int ot_topology_hops(const ot_topology *t, int a, int b);
/* Dimension-order route a → b (axis 0 first; the shorter way round on a wrapped axis, ties go
 * the + way). Writes up to cap device ids, a and b included; returns the path length in nodes
 * (hops + 1), which may exceed cap (then only cap were written). */
OT_API int ot_topology_route(const ot_topology *t, int a, int b, int *path, int cap);
/* Largest hop distance between any two devices. */
OT_API int ot_topology_diameter(const ot_topology *t);
/* A Hamiltonian cycle over direct links: order[0..size-1] visits every device once and
 * order[i], order[(i+1) % size] are adjacent. OT_ERR_FAILED_PRECONDITION when the shape has
 * none (an odd number of devices on a mesh, a line longer than 2) — the message says why. */
OT_API ot_status ot_topology_ring(const ot_topology *t, int *order);
/* A contiguous sub-mesh: origin + extent per axis (wrapping around a torus axis is allowed).
 * The slice keeps the parent's links; an axis wraps only when the slice spans the whole wrapped
 * axis. parent_ids (size of the slice, may be NULL) receives the parent id of each slice id. */
OT_API ot_status ot_topology_slice(const ot_topology *t, const int origin[OT_TOPO_MAX_DIMS],
                                   const int extent[OT_TOPO_MAX_DIMS], ot_topology **out,
                                   int *parent_ids);
/* Graphviz DOT (undirected graph, one edge per link) and JSON ({name, dims, wrap, devices,
 * link_gbytes_per_s, link_latency_us, diameter, ring, nodes:[{id, coords, neighbors}]}).
 * *out is allocated with ot_malloc; free it with ot_free. */
OT_API ot_status ot_topology_to_dot(const ot_topology *t, char **out);
OT_API ot_status ot_topology_to_json(const ot_topology *t, char **out);

/* ---------------------------------------------------------------------------------------------
 * Logical meshes: named axes ("data", "model") over the devices of a topology. The product of
 * the axis sizes must equal the topology's size. Devices are laid out along the topology's
 * Hamiltonian ring (device order otherwise) with the last axis fastest, so a group along the
 * last axis is a run of physically adjacent devices.
 * ------------------------------------------------------------------------------------------- */

#define OT_MESH_MAX_AXES 4

typedef struct ot_mesh ot_mesh;

OT_API ot_status ot_mesh_create(const ot_topology *t, int naxes, const char *const *names,
                                const int *sizes, ot_mesh **out);
OT_API void ot_mesh_free(ot_mesh *m);
OT_API int ot_mesh_naxes(const ot_mesh *m);
OT_API int ot_mesh_size(const ot_mesh *m);
/* -1 when no axis has that name. */
OT_API int ot_mesh_axis_index(const ot_mesh *m, const char *name);
OT_API int ot_mesh_axis_size(const ot_mesh *m, int axis);
OT_API const char *ot_mesh_axis_name(const ot_mesh *m, int axis);
/* Logical coordinates (naxes entries) <-> physical device id. */
OT_API int ot_mesh_device(const ot_mesh *m, const int *coords);
OT_API void ot_mesh_coords(const ot_mesh *m, int device, int *coords);
/* The replica groups along one axis (HLO replica_groups form): ngroups = size / axis size,
 * each of axis-size device ids, written row after row into groups (size entries). */
OT_API ot_status ot_mesh_axis_groups(const ot_mesh *m, const char *axis, int *groups, int *ngroups,
                                     int *group_size);

/* ---------------------------------------------------------------------------------------------
 * Phi-accrual failure detector (Hayashibara et al., SRDS 2004; the form used by Akka and
 * Cassandra): from the mean and deviation of recent heartbeat inter-arrival times, phi(t) =
 * -log10(P(a heartbeat arrives later than t)). phi 1 ~ 10% chance the device is alive and just
 * late, phi 8 ~ 1e-8. Usable alone; the coordinator keeps one per device.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_phi_options {
    int window;                   /* inter-arrival samples kept; default 1000 */
    uint64_t min_std_ns;          /* floor on the deviation; default 10 ms */
    uint64_t acceptable_pause_ns; /* added to the mean (GC pauses, scheduling); default 0 */
    uint64_t first_interval_ns;   /* assumed interval before samples exist; default 100 ms */
} ot_phi_options;

typedef struct ot_phi_detector ot_phi_detector;

OT_API ot_phi_options ot_phi_options_default(void);
OT_API ot_status ot_phi_create(const ot_phi_options *o, ot_phi_detector **out);
OT_API void ot_phi_free(ot_phi_detector *d);
OT_API void ot_phi_heartbeat(ot_phi_detector *d, uint64_t now_ns);
/* 0 before the first heartbeat. */
OT_API double ot_phi_value(const ot_phi_detector *d, uint64_t now_ns);
/* Mean and standard deviation of the inter-arrival window (ns). */
OT_API void ot_phi_stats(const ot_phi_detector *d, double *mean_ns, double *std_ns);

/* ---------------------------------------------------------------------------------------------
 * Coordinator: device registry, health state machine, heartbeats, failure detection,
 * membership epochs, channels, device selection, events.
 *
 *   JOINING --first heartbeat--> HEALTHY <--heartbeat-- SUSPECT
 *   HEALTHY --phi >= suspect--> SUSPECT --phi >= fail (or mark_failed)--> FAILED
 *   FAILED --heartbeat--> RECOVERING --recover_heartbeats in a row--> HEALTHY
 *   RECOVERING --phi >= fail--> FAILED;  any --remove--> REMOVED (final)
 * The members are the HEALTHY and SUSPECT devices; every change of that set bumps the epoch.
 * ------------------------------------------------------------------------------------------- */

typedef enum ot_device_state {
    OT_DEV_JOINING = 0,
    OT_DEV_HEALTHY,
    OT_DEV_SUSPECT,
    OT_DEV_FAILED,
    OT_DEV_RECOVERING,
    OT_DEV_REMOVED,
    OT_DEV_STATE_COUNT,
} ot_device_state;

OT_API const char *ot_device_state_name(ot_device_state s);

typedef enum ot_detector_kind {
    OT_DETECT_PHI = 0, /* phi-accrual */
    OT_DETECT_TIMEOUT, /* suspect after timeout/2 without a heartbeat, failed after timeout */
} ot_detector_kind;

typedef struct ot_coord_options {
    ot_clock_fn clock; /* NULL: ot_now_ns */
    void *clock_ud;
    ot_detector_kind detector;
    double phi_suspect;     /* default 5 */
    double phi_fail;        /* default 8 */
    uint64_t timeout_ns;    /* OT_DETECT_TIMEOUT; default 1 s */
    ot_phi_options phi;     /* per-device detector settings */
    int recover_heartbeats; /* RECOVERING -> HEALTHY after this many; default 3 */
} ot_coord_options;

typedef enum ot_coord_event_kind {
    OT_EVENT_JOINED = 1 << 0,
    OT_EVENT_SUSPECT = 1 << 1,
    OT_EVENT_FAILED = 1 << 2,
    OT_EVENT_RECOVERED = 1 << 3,
    OT_EVENT_REMOVED = 1 << 4,
    OT_EVENT_EPOCH = 1 << 5, /* the member set changed */
    OT_EVENT_ALL = 0x3f,
} ot_coord_event_kind;

typedef struct ot_coord_event {
    ot_coord_event_kind kind;
    int device; /* -1 for OT_EVENT_EPOCH */
    ot_device_state from, to;
    uint64_t epoch;   /* the epoch after the change */
    uint64_t time_ns; /* coordinator clock */
    double phi;       /* detector value when it fired (FAILED/SUSPECT) */
} ot_coord_event;

typedef void (*ot_coord_event_fn)(void *ud, const ot_coord_event *e);

typedef struct ot_channel_stats {
    uint64_t messages, bytes, errors;
    uint64_t total_ns;      /* summed transfer time */
    double mean_latency_us; /* total_ns / messages */
    double gbytes_per_s;    /* bytes / total_ns */
} ot_channel_stats;

typedef enum ot_select_policy {
    OT_SELECT_ROUND_ROBIN = 0, /* rotates over the healthy devices */
    OT_SELECT_LEAST_LOADED,    /* the smallest outstanding load; ties rotate */
    OT_SELECT_WEIGHTED,        /* smooth weighted round-robin by measured throughput */
} ot_select_policy;

typedef struct ot_coord ot_coord;

OT_API ot_coord_options ot_coord_options_default(void);
OT_API ot_status ot_coord_create(const ot_coord_options *o, ot_coord **out);
OT_API void ot_coord_free(ot_coord *c);
/* A new device in JOINING; name is copied. */
OT_API ot_status ot_coord_register(ot_coord *c, const char *name, int *id);
OT_API ot_status ot_coord_heartbeat(ot_coord *c, int id);
/* Evaluates every detector at the current time and applies the transitions. */
OT_API void ot_coord_tick(ot_coord *c);
/* Declares a device failed now (e.g. a collective reported it). */
OT_API ot_status ot_coord_mark_failed(ot_coord *c, int id);
OT_API ot_status ot_coord_remove(ot_coord *c, int id);
OT_API ot_device_state ot_coord_state(const ot_coord *c, int id); /* REMOVED for unknown ids */
OT_API const char *ot_coord_name(const ot_coord *c, int id);
OT_API double ot_coord_phi(const ot_coord *c, int id);
OT_API uint64_t ot_coord_epoch(const ot_coord *c);
OT_API int ot_coord_count(const ot_coord *c); /* registered devices, removed included */
/* The members (HEALTHY or SUSPECT) in id order: writes up to cap, returns how many there are. */
OT_API int ot_coord_members(const ot_coord *c, int *ids, int cap);
/* Events matching mask go to fn(ud, event), in order, on the calling thread, outside the lock. */
OT_API ot_status ot_coord_subscribe(ot_coord *c, unsigned mask, ot_coord_event_fn fn, void *ud,
                                    int *sub);
OT_API void ot_coord_unsubscribe(ot_coord *c, int sub);
/* Channels: record a transfer (ok false counts an error) and read the statistics. */
OT_API ot_status ot_coord_channel_record(ot_coord *c, int src, int dst, uint64_t bytes, uint64_t ns,
                                         bool ok);
OT_API ot_status ot_coord_channel_stats(const ot_coord *c, int src, int dst, ot_channel_stats *out);
/* Load balancing over the HEALTHY devices. OT_ERR_FAILED_PRECONDITION when none is healthy. */
OT_API ot_status ot_coord_select(ot_coord *c, ot_select_policy p, int *id);
OT_API ot_status ot_coord_load_add(ot_coord *c, int id, int64_t delta);
OT_API int64_t ot_coord_load(const ot_coord *c, int id);
/* Measured throughput (any unit, > 0); kept as an exponential moving average (alpha 0.3). */
OT_API ot_status ot_coord_report_throughput(ot_coord *c, int id, double per_s);
OT_API double ot_coord_throughput(const ot_coord *c, int id);

/* ---------------------------------------------------------------------------------------------
 * Barriers: generation-counted, with a deadline. Participants 0..n-1 call ot_barrier_wait;
 * the last arrival releases the generation. When a participant is declared failed, or a
 * waiter's deadline passes, every waiter of that generation returns OT_ERR_PEER_FAILED or
 * OT_ERR_TIMEOUT and the generation is closed; the next generation starts fresh (without failed
 * participants until they rejoin). Thread-safe; waits block (no spinning).
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_barrier ot_barrier;

OT_API ot_status ot_barrier_create(int n, ot_barrier **out);
OT_API void ot_barrier_free(ot_barrier *b);
/* timeout_ns <= 0: wait without a deadline. *generation (may be NULL) receives the generation
 * this call belonged to. A failed participant gets OT_ERR_FAILED_PRECONDITION. */
OT_API ot_status ot_barrier_wait(ot_barrier *b, int participant, int64_t timeout_ns,
                                 uint64_t *generation);
OT_API void ot_barrier_fail(ot_barrier *b, int participant);
OT_API void ot_barrier_rejoin(ot_barrier *b, int participant);
OT_API uint64_t ot_barrier_generation(const ot_barrier *b);
OT_API int ot_barrier_expected(const ot_barrier *b); /* participants not failed */
OT_API int ot_barrier_arrived(const ot_barrier *b);  /* waiting in the current generation */

/* ---------------------------------------------------------------------------------------------
 * Batch coordination. A global batch of G samples is split over replicas; replica r averages
 * its n_r samples, and weighting that mean by n_r / G before summing across replicas (the
 * aggregator's `weight`, op SUM) gives exactly the full-batch mean gradient. With gradient
 * accumulation, micro-batch j of size m_j gets weight m_j / G instead.
 * ------------------------------------------------------------------------------------------- */

/* counts[r] for n replicas summing to global: equal shares, or proportional to throughput
 * (NULL: equal) by the largest-remainder method (deterministic; ties to the lower rank). */
OT_API ot_status ot_batch_split(int64_t global, int n, const double *throughput, int64_t *counts);
/* weights[r] = counts[r] / sum(counts). */
OT_API ot_status ot_batch_weights(const int64_t *counts, int n, double *weights);
/* Splits count samples into micro-batches of at most micro (the last may be smaller); sizes and
 * weights (m_j / global) may be NULL; *nmb receives the number, which must fit in cap. */
OT_API ot_status ot_batch_microbatches(int64_t count, int64_t micro, int64_t global, int64_t *sizes,
                                       double *weights, int cap, int *nmb);

/* ---------------------------------------------------------------------------------------------
 * Slice scheduling: contiguous sub-meshes of a topology handed to jobs. Placement is best fit:
 * among every position and axis order of the requested shape (wrapping around torus axes), the
 * one whose faces touch the most occupied devices or mesh edges, so free space stays in large
 * blocks; ties go to the lowest origin. Freeing returns the devices (free space merges by
 * construction: it is one occupancy grid). Fragmentation = 1 - (largest free box) / (free
 * devices), 0 when nothing or everything is free.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_slice_sched ot_slice_sched;

OT_API ot_status ot_slice_sched_create(const ot_topology *t, ot_slice_sched **out);
OT_API void ot_slice_sched_free(ot_slice_sched *s);
/* shape: extent per axis (unused axes 1). On success *job is a new id and origin/extent (may be
 * NULL) the placement. OT_ERR_OUT_OF_RANGE when no placement is free (the message gives the
 * largest free box); OT_ERR_INVALID_ARGUMENT when the shape cannot fit even an empty topology. */
OT_API ot_status ot_slice_alloc(ot_slice_sched *s, const int shape[OT_TOPO_MAX_DIMS], int *job,
                                int origin[OT_TOPO_MAX_DIMS], int extent[OT_TOPO_MAX_DIMS]);
OT_API ot_status ot_slice_release(ot_slice_sched *s, int job);
OT_API int ot_slice_free_devices(const ot_slice_sched *s);
/* The largest free axis-aligned box (not wrapping); returns its volume. */
OT_API int ot_slice_largest_free(const ot_slice_sched *s, int extent[OT_TOPO_MAX_DIMS]);
OT_API double ot_slice_fragmentation(const ot_slice_sched *s);
/* The job holding a device, or -1. */
OT_API int ot_slice_owner(const ot_slice_sched *s, int device);
/* Reserves a given box (origin + extent per axis, wrapping on torus axes) for a new job: a
 * placement made elsewhere (another process's scheduler). OT_ERR_ALREADY_EXISTS when a device of
 * it is taken, OT_ERR_INVALID_ARGUMENT when it leaves the grid on an axis that does not wrap. */
OT_API ot_status ot_slice_reserve(ot_slice_sched *s, const int origin[OT_TOPO_MAX_DIMS],
                                  const int extent[OT_TOPO_MAX_DIMS], int *job);
/* Parses "PRESET:SHAPE" ("v4-4x4x4:2x2x1", "torus-2x4:2x2"): the preset name is copied into
 * preset (cap bytes) and SHAPE's extents into shape (1 to 3 axes; unused axes 1). Only the syntax
 * is checked here (OT_ERR_INVALID_ARGUMENT naming the part that is wrong). */
OT_API ot_status ot_slice_spec_parse(const char *spec, char *preset, size_t cap,
                                     int shape[OT_TOPO_MAX_DIMS]);

/* ---------------------------------------------------------------------------------------------
 * Slice leases: one pod preset shared by jobs in any number of threads and processes on a host.
 * The registry is a directory (DIR/PRESET/) of lock files, one per device of the pod, each held
 * with flock(2) by the job whose slice contains it, and one that serializes placements. Acquiring
 * takes the placement lock, sees which devices other jobs hold (their locks), places SHAPE best
 * fit around them with the slice scheduler, locks the slice's devices and lets go of the
 * placement lock. A lease holds its devices until it is released or its process ends (the kernel
 * drops the locks of a process that dies: a crashed job never leaks its slice). Nothing is parsed
 * from the files; their contents are empty.
 * Errors: OT_ERR_INVALID_ARGUMENT for an unknown preset or a shape that fits the pod in no
 * orientation; OT_ERR_OUT_OF_RANGE when no contiguous free box of that shape is left (the message
 * gives the free devices and the largest free box); OT_ERR_IO naming the file. Threads: a lease
 * is used from one thread at a time; different leases are independent.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_slice_lease ot_slice_lease;

/* dir is created with its parents when missing. */
OT_API ot_status ot_slice_lease_acquire(const char *dir, const char *preset,
                                        const int shape[OT_TOPO_MAX_DIMS], ot_slice_lease **out);
/* Frees the slice's devices. NULL is a no-op. */
OT_API void ot_slice_lease_release(ot_slice_lease *l);
/* The placement: origin and extent per axis in the pod preset. */
OT_API void ot_slice_lease_box(const ot_slice_lease *l, int origin[OT_TOPO_MAX_DIMS],
                               int extent[OT_TOPO_MAX_DIMS]);
/* Devices in the slice; ids[i] (cap entries) receives the pod id of slice device i (the order of
 * ot_topology_slice). Returns the slice's size. */
OT_API int ot_slice_lease_devices(const ot_slice_lease *l, int *ids, int cap);
/* Devices other jobs held when this lease was placed. */
OT_API int ot_slice_lease_others(const ot_slice_lease *l);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_POD_H */
