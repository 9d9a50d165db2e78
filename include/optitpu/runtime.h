/*
 * optitpu runtime: executes compiled executables on devices — memory pools, devices, buffers,
 * the backend (device selection, executable registry, retry, deadlines) and the profiler.
 *
 * Usage:
 *
 *     ot_backend_options bo = ot_backend_options_default();   // devices from OPTITPU_DEVICES or 1
 *     ot_backend *b;
 *     OT_CHECK(ot_backend_create(&bo, &b));
 *     OT_CHECK(ot_backend_register_module(b, "adam", module, NULL));   // compiles -O2
 *     int dev;
 *     OT_CHECK(ot_backend_select_device(b, OT_DEVSEL_MOST_FREE, -1, &dev));
 *     ot_buffer *args[2], *outs[1];
 *     OT_CHECK(ot_buffer_from_host(ot_backend_device(b, dev), &x, &args[0]));   // copies x
 *     ...
 *     ot_run_options ro = ot_run_options_default();
 *     if (ot_backend_execute(b, "adam", dev, args, 2, outs, 1, &ro) != OT_OK)
 *         fprintf(stderr, "%s\n", ot_last_error());
 *     ot_tensor y;
 *     OT_CHECK(ot_buffer_to_host(outs[0], &y));               // y owned by the caller
 *     ot_buffer_free(outs[0]); ...
 *     ot_backend_free(b);
 *
 * Execution (ot_device_execute): the executable's kernel list runs in order over one arena of
 * ot_executable_arena_size bytes taken from the device's pool (released when the run ends);
 * parameter and output slots are bound to the caller's buffers; an output aliased to a donated
 * parameter (the module's input_output_alias) is written into that parameter's memory, and the
 * parameter buffer is handed over to the output (the input handle is then "donated": using it
 * again is FAILED_PRECONDITION). The generic execution loop hands each kernel to the device's
 * launch (ot_device_vtable.launch); the host's, ot_launch_host, runs a loop fusion's native code
 * when the executable has some (docs/codegen.md), else exec's kernel dispatch: the fast kernel
 * when one covers the op (dot, convolution, transpose, reduce, gather, scatter, plain elementwise),
 * else the reference kernel of src/exec — a fusion evaluates its fused computation, a while loop
 * runs its condition and body compiled as executables of their own (docs/runtime.md), a
 * conditional or call its called computations, collectives go through the run's
 * communicator (ot_comm) or, without one, the single-device semantics of exec.h. With
 * ot_run_options.reference_kernels every kernel is the reference kernel and results are
 * bit-identical to ot_evaluate on the source module up to the compiler's float-preserving
 * rewrites; the fast and native kernels' differences are listed in docs/runtime.md.
 *
 * Errors: every call returns ot_status with the message in ot_last_error(); on failure outputs
 * are NULL and nothing the call allocated stays allocated (the arena is returned to the pool).
 * A failure in the middle of a run may have written donated parameters (the run says so through
 * ot_run_result.donated_written; the retry policy never retries such a run).
 *
 * Thread safety: pools, devices and the backend lock internally; different devices may execute
 * at once from different threads (that is how N replicas run). A buffer must not be used by two
 * threads at once. A profile may be shared by all devices (it locks).
 */
#ifndef OPTITPU_RUNTIME_H
#define OPTITPU_RUNTIME_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/bench.h"
#include "optitpu/collectives.h"
#include "optitpu/compiler.h"
#include "optitpu/core.h"
#include "optitpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ot_profile ot_profile;

/* ---------------------------------------------------------------------------------------------
 * Memory pools: a caching allocator per device.
 *
 * Small requests (<= 1 MiB) are rounded up to 512 bytes and carved from 2 MiB segments; large
 * ones are rounded up to 4 KiB and served best-fit from cached segments (a block is split when
 * the rest is at least 1 MiB; neighbours coalesce when freed), else from a new segment of the
 * rounded size. Memory is "reserved" while a segment exists and "in use" while a block is
 * handed out. Released blocks stay cached for reuse; ot_mem_pool_trim returns wholly free
 * segments. The capacity (0: unlimited) bounds the reserved bytes: a request that does not fit
 * first trims the cache, then fails with OUT_OF_MEMORY stating the requested and available
 * bytes. All allocations are 256-byte aligned.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_mem_pool ot_mem_pool;

typedef struct ot_mem_stats {
    int64_t capacity;  /* 0: unlimited */
    int64_t in_use;    /* bytes in handed-out blocks (rounded sizes) */
    int64_t requested; /* bytes asked for by the live blocks (unrounded) */
    int64_t reserved;  /* bytes in segments */
    int64_t peak_in_use;
    int64_t peak_reserved;
    int64_t alloc_count;  /* successful allocations so far */
    int64_t free_count;   /* releases so far */
    int64_t live_blocks;  /* handed-out blocks now */
    int64_t segments;     /* segments now */
    int64_t cached_bytes; /* reserved - in_use */
    int64_t largest_free; /* largest free block inside the segments */
    int64_t oom_count;    /* requests refused */
    double fragmentation; /* 1 - largest_free / cached_bytes (0 when nothing is cached) */
} ot_mem_stats;

/* A pool event, for the profiler: kind "reserve" (new segment), "release" (segment returned),
 * "alloc" (block handed out) or "free" (block returned). */
typedef void (*ot_mem_listener)(void *ud, const char *kind, int64_t bytes, const ot_mem_stats *s);

OT_API ot_status ot_mem_pool_create(int64_t capacity, ot_mem_pool **out);
OT_API void ot_mem_pool_free(ot_mem_pool *p); /* frees every segment; NULL is a no-op */
/* *out: 256-byte aligned, `size` bytes (size 0 gets a valid unique block). */
OT_API ot_status ot_mem_pool_alloc(ot_mem_pool *p, int64_t size, void **out);
/* Returns a block to the cache. A pointer this pool did not hand out is INVALID_ARGUMENT. */
OT_API ot_status ot_mem_pool_release(ot_mem_pool *p, void *ptr);
/* Frees wholly unused segments; returns the bytes given back. */
OT_API int64_t ot_mem_pool_trim(ot_mem_pool *p);
OT_API void ot_mem_pool_stats(ot_mem_pool *p, ot_mem_stats *out);
OT_API void ot_mem_pool_set_listener(ot_mem_pool *p, ot_mem_listener fn, void *ud);

/* ---------------------------------------------------------------------------------------------
 * Memory admission (src/runtime/admit.c): before a command allocates a run's memory it lists
 * what it will hold and asks whether that fits; the answer comes before any of it is taken.
 * ------------------------------------------------------------------------------------------- */

/* What the host can give this process, in bytes; -1 where unknown or unlimited. */
typedef struct ot_host_memory {
    int64_t mem_available;    /* /proc/meminfo MemAvailable (MemFree on kernels without it) */
    int64_t cgroup_limit;     /* the tightest cgroup memory limit (v2 memory.max, v1
                                 memory.limit_in_bytes) from this process's cgroup to the root */
    int64_t cgroup_available; /* what is left under it: limit - usage + inactive file pages */
    int64_t available;        /* the smaller of mem_available and cgroup_available */
} ot_host_memory;

OT_API ot_status ot_host_memory_query(ot_host_memory *out);
/* The same with every path under `root` (root + "/proc/meminfo", root + "/sys/fs/cgroup/...");
 * "" is the machine itself. For tests. */
OT_API ot_status ot_host_memory_query_at(const char *root, ot_host_memory *out);

/* One thing a run will allocate: `bytes` once on the host, or on each device (per_device). */
typedef struct ot_mem_item {
    const char *name; /* "inputs", "arena", "optimizer state", ... (for the message) */
    int64_t bytes;
    bool per_device;
} ot_mem_item;

/* OK when the items fit, RESOURCE_EXHAUSTED otherwise, with what is needed and what is available:
 * the per-device items must fit device_capacity (0: unlimited), and the host items plus `devices`
 * times the per-device items (host devices allocate host memory) must fit avail->available
 * (avail NULL: ot_host_memory_query; an unknown figure does not refuse). `what` names the run in
 * the message ("run model.hlo"). Nothing is allocated. */
OT_API ot_status ot_mem_admit(const char *what, const ot_mem_item *items, int nitems, int devices,
                              int64_t device_capacity, const ot_host_memory *avail);

/* Per-chip HBM of a TPU generation ("v2", "v3", "v4", "v5e", "v5p", "v6e"; a topology spec such
 * as "v4-2x2x1" also works), from Google Cloud's TPU system-architecture pages: v2 16 GiB,
 * v3 32 GiB, v4 32 GiB, v5e 16 GiB, v5p 95 GiB, v6e 32 GiB. NOT_FOUND for another name. */
OT_API ot_status ot_tpu_hbm_bytes(const char *preset, int64_t *out);

/* ---------------------------------------------------------------------------------------------
 * Devices: a const vtable plus a context. ot_device_* functions add the common checks, the
 * pool, the statistics and profiling around the slots.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_device ot_device;
typedef struct ot_buffer ot_buffer;

/* A communicator for the collectives of a run, and the run's deadline and cancellation. */
typedef struct ot_run_options {
    ot_comm *comm;                /* NULL: single device (replica 0) */
    uint64_t deadline_ns;         /* ot_now_ns() value after which the run stops (0: none);
                                     checked before every kernel and between the iterations of
                                     a while loop inside one: TIMEOUT naming the kernel */
    atomic_bool *cancel;          /* set from any thread: CANCELLED before the next kernel or
                                     loop iteration */
    ot_profile *profile;          /* per-kernel events go here (NULL: none) */
    int64_t max_while_iterations; /* 0: none */
    /* false (default): loop fusions with native code run it, and dot, convolution, transpose,
     * reduce, reduce-window, select-and-scatter, gather, scatter and plain elementwise kernels
     * run their fast kernels
     * (docs/runtime.md, "Fast kernels"); true: every kernel is the reference kernel, bit-identical
     * to ot_evaluate. */
    bool reference_kernels;
    ot_threadpool *pool; /* fast kernels split over it; NULL: ot_threadpool_default() */
    /* Called on the running thread before kernel k of the executable's list runs (done false)
     * and once it has finished (done true), in list order (a kernel that may run inside the
     * dot before it, an output fusion, is announced before the dot starts — again before its
     * own run if it did not — and finished after the dot): what
     * lets a caller act on an output as soon as its last writer is done, or fill a parameter
     * just before its first reader, between kernels. An error stops the run with that status.
     * NULL: none. With a hook, ot_device_execute's outs[q] hold the outputs' buffers during the
     * run (the hook may read one whose last writer has finished; NULL again if the run fails).
     * The generic execution loop calls it; a device with an execute of its own refuses a run
     * that sets it (UNIMPLEMENTED). */
    ot_status (*kernel_hook)(void *ud, int kernel, bool done);
    void *kernel_hook_ud;
    /* With a hook: a run that fails once the hook has been shown the outputs leaves outs[q]
     * holding them for the caller to free (the hook may have lent one out to other threads),
     * instead of freeing them and setting NULL. Default false. */
    bool keep_outputs;
} ot_run_options;

OT_API ot_run_options ot_run_options_default(void);

typedef struct ot_run_result {
    int kernels_run;      /* kernels finished */
    int fast_kernels_run; /* of which a fast kernel ran (not the reference kernel) */
    int output_fusions;   /* of which a native loop ran inside the dot before it, on each block
                             of the dot's result as it was finished (counted in kernels_run; its
                             profile record is "fusion-native" with no time of its own) */
    bool donated_written; /* a donated parameter's memory was written */
    uint64_t time_ns;     /* wall time of the run */
} ot_run_result;

/* One run's kernel state, handed by the generic execution loop to every launch: the host
 * kernels' context (thread pool, FTZ mode, scratch, the reference kernels' options with the
 * run's deadline, cancellation and communicator) and the executable's native program. Owned by
 * the loop, valid during the launch it is passed to. */
typedef struct ot_launch ot_launch;

typedef struct ot_device_vtable {
    const char *kind; /* "host-cpu", ... */
    /* Device memory. free may be NULL-safe; both required. */
    ot_status (*alloc)(void *ctx, int64_t bytes, void **out);
    ot_status (*free)(void *ctx, void *ptr);
    /* Copies; n bytes, regions do not overlap. All three required. */
    ot_status (*copy_to_device)(void *ctx, void *dst, const void *host_src, size_t n);
    ot_status (*copy_to_host)(void *ctx, void *host_dst, const void *src, size_t n);
    ot_status (*copy_on_device)(void *ctx, void *dst, const void *src, size_t n);
    /* Runs kernel k of exe (ot_executable_kernel(exe, k)): in[q] is the memory of its input slot
     * kn->inputs[q], out[q] that of its output slot kn->outputs[q] — TEMP slots inside an arena
     * taken from alloc, PARAMETER and OUTPUT slots the run's buffers (a donated output the
     * parameter's memory), CONSTANT slots the executable's literal in host memory. Called by the
     * generic execution loop (the one ot_execute_on_host runs), in kernel order, on the thread
     * that executes; run carries the run's kernel state for ot_launch_host, to which a device
     * whose kernels can read host memory may delegate. Required unless execute is set. */
    ot_status (*launch)(void *ctx, ot_launch *run, const ot_executable *exe, int k, void *const *in,
                        void *const *out);
    /* Optional override for a device that runs an executable as one unit: exe with parameter
     * memory params[k] and output memory outs[k] (already allocated, donated outputs pointing at
     * their parameter). When set, ot_device_execute calls it instead of the generic loop (and
     * launch is not used); when NULL, the generic loop runs the kernels through launch over an
     * arena taken from alloc. */
    ot_status (*execute)(void *ctx, ot_device *dev, const ot_executable *exe, void *const *params,
                         void *const *outs, const ot_run_options *o, ot_run_result *res);
    ot_status (*synchronize)(void *ctx); /* NULL: nothing pending (synchronous device) */
    void (*memory)(void *ctx, ot_mem_stats *out);
    int64_t (*trim)(void *ctx); /* NULL: nothing cached */
    void (*destroy)(void *ctx); /* NULL: nothing to free */
} ot_device_vtable;

/* A device over a caller's vtable (ctx is owned by the device when vt->destroy is set). */
OT_API ot_status ot_device_create(const ot_device_vtable *vt, void *ctx, int index,
                                  ot_device **out);
/* The host CPU device: memory from its own pool of `capacity` bytes (0: unlimited), kernels on
 * the calling thread. Execution is synchronous, so synchronize has nothing to wait for. */
OT_API ot_status ot_host_device_create(int index, int64_t capacity, ot_device **out);
OT_API void ot_device_free(ot_device *d); /* NULL is a no-op; its buffers must be freed first */
OT_API int ot_device_index(const ot_device *d);
OT_API const char *ot_device_kind(const ot_device *d);
OT_API void ot_device_memory(ot_device *d, ot_mem_stats *out);
OT_API int64_t ot_device_trim(ot_device *d);
OT_API ot_status ot_device_synchronize(ot_device *d);
/* Number of runs in progress on the device (for least-loaded selection). */
OT_API int ot_device_active_runs(const ot_device *d);
/* Pool events of the device go to this profile from now on (NULL: none). */
OT_API void ot_device_set_profile(ot_device *d, ot_profile *p);
/* The host pool behind a host device (NULL for other devices). */
OT_API ot_mem_pool *ot_device_pool(ot_device *d);

/* Buffers: one array on one device. */
OT_API ot_status ot_buffer_alloc(ot_device *d, const ot_shape *s, ot_buffer **out);
OT_API ot_status ot_buffer_from_host(ot_device *d, const ot_tensor *t, ot_buffer **out);
/* Copies to a new host tensor (*out owned by the caller; release with ot_tensor_release). */
OT_API ot_status ot_buffer_to_host(const ot_buffer *b, ot_tensor *out);
/* Copies src into dst (same shape), on one device or between two (through the host). */
OT_API ot_status ot_buffer_copy(ot_buffer *dst, const ot_buffer *src);
/* Byte ranges of a buffer (a view of part of it): copy n bytes from host memory into b at byte
 * offset off / from b at off into host memory. off and n outside [0, size]: OUT_OF_RANGE,
 * nothing copied. */
OT_API ot_status ot_buffer_write_bytes(ot_buffer *b, int64_t off, const void *src, int64_t n);
OT_API ot_status ot_buffer_read_bytes(const ot_buffer *b, int64_t off, void *dst, int64_t n);
OT_API void ot_buffer_free(ot_buffer *b); /* NULL is a no-op; also frees a donated handle */
OT_API const ot_shape *ot_buffer_shape(const ot_buffer *b);
OT_API ot_device *ot_buffer_device(const ot_buffer *b);
OT_API bool ot_buffer_donated(const ot_buffer *b);
/* The buffer's memory when its device's memory is the host's (the host CPU device), to read in
 * place while nothing writes it (a finished run's output): valid until the buffer is freed or
 * donated. NULL for any other device's buffer and for a donated handle. */
OT_API const void *ot_buffer_host_data(const ot_buffer *b);
/* The same memory, writable: to fill or update the buffer in place while no run reads or writes
 * it (e.g. a reduction written straight into an update's input). Same validity and NULLs. */
OT_API void *ot_buffer_host_data_mut(ot_buffer *b);
/* A buffer of shape s on the host device d over the caller's memory `data` (at least s's bytes,
 * suitably aligned, outliving the buffer and any buffer its memory is donated to): runs read and
 * write it in place, ot_buffer_free releases the handle only. Several views may share memory
 * (e.g. the devices of one process reading one parameter vector); the caller orders their
 * writes and reads. FAILED_PRECONDITION: d's memory is not the host's. */
OT_API ot_status ot_buffer_view_host(ot_device *d, const ot_shape *s, void *data, ot_buffer **out);

/* Executes exe on d: params[0..nparams) must match the entry parameters (count, dtype, dims:
 * INVALID_ARGUMENT / SHAPE_MISMATCH naming the parameter) and live on d; outs[0..nouts) receive
 * new buffers (nouts must equal ot_executable_output_count). res may be NULL. */
OT_API ot_status ot_device_execute(ot_device *d, const ot_executable *exe, ot_buffer *const *params,
                                   int nparams, ot_buffer **outs, int nouts,
                                   const ot_run_options *o, ot_run_result *res);

/* Host kernels touching fewer bytes than this run on the calling thread (a dot: fewer than a
 * quarter of it in multiply-adds); larger ones are split over the run's thread pool. */
OT_API int64_t ot_host_inline_bytes(void);
/* Whether dot kernel k of e is split over a host pool of `threads` threads (the caller
 * included) when it runs: the fast GEMM hands out more than one task in its first pass over the
 * pool and its multiply-adds reach the inline bound (a 128x128x10 product is one tile and runs
 * inline). False for other kernels, dots the reference kernel runs, threads < 2. Decided from the
 * shapes as the kernel decides; nothing is run. Thread-safe. */
OT_API bool ot_host_dot_splits(const ot_executable *e, int k, int threads);

/* The generic execution loop with the host's launch, on memory the caller placed: arena of
 * ot_executable_arena_size bytes, params[k] / outs[k] of each slot's byte size. What the host
 * device runs; exposed for tests, benchmarks and devices that place host memory themselves. */
OT_API ot_status ot_execute_on_host(const ot_executable *exe, void *arena, void *const *params,
                                    void *const *outs, const ot_run_options *o, int device_index,
                                    ot_run_result *res);

/* The host kernels for kernel k of a run (the host device's launch; the arguments are a
 * launch's): the kernel's native code when the executable has some (a loop fusion, unless the
 * run asks for reference kernels), else exec's dispatch — the fast kernel when one covers the op
 * (docs/runtime.md, "Fast kernels"), else the reference kernel. in/out must be host-readable
 * memory laid out as the kernel's slots. Counts toward ot_run_result.fast_kernels_run. */
OT_API ot_status ot_launch_host(ot_launch *run, const ot_executable *exe, int k, void *const *in,
                                void *const *out);

/* Device count from the environment: OPTITPU_DEVICES (1..4096), else 1. */
OT_API int ot_device_count_from_env(void);

/* ---------------------------------------------------------------------------------------------
 * Retry policy
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_retry_policy {
    int max_attempts;           /* >= 1 (default 3) */
    int64_t initial_backoff_ns; /* default 1 ms */
    double multiplier;          /* default 2 */
    int64_t max_backoff_ns;     /* default 1 s */
    double jitter;              /* 0..1: the wait is scaled by a factor in [1-jitter, 1] */
    uint64_t seed;              /* jitter stream (deterministic for a seed) */
    /* Waits ns nanoseconds (NULL: nanosleep). Tests inject a recorder. */
    void (*sleep)(void *ud, int64_t ns);
    void *sleep_ud;
} ot_retry_policy;

OT_API ot_retry_policy ot_retry_policy_default(void);
/* Retryable: OUT_OF_MEMORY (after releasing cached blocks), TIMEOUT. Never: everything else
 * (INVALID_ARGUMENT, SHAPE_MISMATCH, NOT_FOUND, UNIMPLEMENTED, CANCELLED, ...). */
OT_API bool ot_status_retryable(ot_status s);
/* The wait before attempt `attempt` (2, 3, ...): min(max, initial * multiplier^(attempt-2))
 * scaled by the jitter drawn from *state (advanced). */
OT_API int64_t ot_retry_backoff_ns(const ot_retry_policy *p, int attempt, uint64_t *state);

/* ---------------------------------------------------------------------------------------------
 * Backend: devices, selection, registry, retry
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_backend ot_backend;

typedef struct ot_backend_options {
    int devices;            /* host devices; <= 0: ot_device_count_from_env() */
    int64_t device_memory;  /* bytes per device; 0: unlimited */
    const char *hbm_preset; /* when set (e.g. "v4"), device_memory = that chip's HBM */
    ot_retry_policy retry;
    ot_compile_options compile; /* for ot_backend_register_module without options */
} ot_backend_options;

OT_API ot_backend_options ot_backend_options_default(void);
OT_API ot_status ot_backend_create(const ot_backend_options *o, ot_backend **out);
OT_API void ot_backend_free(ot_backend *b); /* NULL is a no-op */
OT_API int ot_backend_device_count(const ot_backend *b);
OT_API ot_device *ot_backend_device(ot_backend *b, int i); /* NULL when out of range */

typedef enum ot_device_select {
    OT_DEVSEL_EXPLICIT = 0, /* the given index (OUT_OF_RANGE when there is none) */
    OT_DEVSEL_LEAST_LOADED, /* fewest runs in progress, then least memory in use, then index */
    OT_DEVSEL_MOST_FREE,    /* most free memory (capacity - in use; unlimited counts as max) */
} ot_device_select;

OT_API ot_status ot_backend_select_device(ot_backend *b, ot_device_select p, int index, int *out);

/* Registry. Ids are non-empty strings up to 255 bytes. Registering an id twice is
 * ALREADY_EXISTS. register_module compiles m (copied; opts NULL: the backend's) and, when
 * profile is given, records the compile in it; register_executable takes exe over (also on
 * failure). */
OT_API ot_status ot_backend_register_module(ot_backend *b, const char *id, const ot_module *m,
                                            const ot_compile_options *opts);
OT_API ot_status ot_backend_register_module_profiled(ot_backend *b, const char *id,
                                                     const ot_module *m,
                                                     const ot_compile_options *opts,
                                                     ot_profile *profile);
OT_API ot_status ot_backend_register_executable(ot_backend *b, const char *id, ot_executable *exe);
/* NOT_FOUND for an id never registered (or unregistered). */
OT_API ot_status ot_backend_lookup(ot_backend *b, const char *id, const ot_executable **out);
OT_API ot_status ot_backend_unregister(ot_backend *b, const char *id);

/* Executes a registered executable on device `device` with the backend's retry policy: a
 * retryable failure that wrote no donated parameter is retried up to max_attempts times after
 * the backoff; before retrying OUT_OF_MEMORY the device's cached blocks are released. The last
 * failure is returned with "(after N attempts)" when more than one was made. attempts (may be
 * NULL) receives the number of attempts. */
OT_API ot_status ot_backend_execute(ot_backend *b, const char *id, int device,
                                    ot_buffer *const *params, int nparams, ot_buffer **outs,
                                    int nouts, const ot_run_options *o, int *attempts);

/* Runs an attempt function under a policy (the backend uses it; exposed for tests and other
 * layers). fn returns a status; *retry_ok (preset true) may be cleared by fn to forbid a retry.
 * on_oom (may be NULL) runs before retrying OUT_OF_MEMORY. */
typedef ot_status (*ot_attempt_fn)(void *ud, int attempt, bool *retry_ok);
OT_API ot_status ot_retry_run(const ot_retry_policy *p, ot_attempt_fn fn, void *ud,
                              void (*on_oom)(void *ud), int *attempts);

/* ---------------------------------------------------------------------------------------------
 * Profiler
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_kernel_profile {
    const char *name; /* owned by the profile */
    const char *kind; /* "fusion", "library", ..., "compile" for compile passes */
    int device;
    int64_t calls;
    uint64_t total_ns, min_ns, max_ns;
    int64_t flops, bytes; /* per call, from the compiled graph */
} ot_kernel_profile;

OT_API ot_status ot_profile_create(ot_profile **out);
OT_API void ot_profile_free(ot_profile *p); /* NULL is a no-op */
/* Added to every timestamp on export, so traces of several processes share one time base. Until
 * it is set, the export applies the clock module's published offset (ot_clock_offset_at_ns,
 * which an ot_clock_sync object publishes) at each event's time. pid: the process id written to
 * the trace. */
OT_API void ot_profile_set_time_offset(ot_profile *p, int64_t offset_ns);
OT_API void ot_profile_set_pid(ot_profile *p, int pid);
/* Compiles m (opts NULL: defaults) and records the compile (kind "compile"), each pass
 * ("compile-pass") and each unit of native code the C compiler built ("codegen", none for units
 * loaded from the disk cache) as events; memory events of devices pointed at this profile land
 * in the same timeline. */
OT_API ot_status ot_profile_compile(ot_profile *p, const ot_module *m,
                                    const ot_compile_options *opts, ot_executable **out);
/* Records one event [t0, t1) (ot_now_ns times). Thread-safe. */
OT_API ot_status ot_profile_record(ot_profile *p, const char *name, const char *kind, int device,
                                   uint64_t t0, uint64_t t1, int64_t flops, int64_t bytes);
/* Records a memory event (counter) on a device. */
OT_API ot_status ot_profile_record_memory(ot_profile *p, int device, const char *kind,
                                          int64_t bytes, int64_t in_use, int64_t reserved);
/* Imports a pod trace's intervals (compute, communication and other phases per device, e.g. a
 * training step's breakdown) as events of kind "phase:compute", "phase:comm", "phase:other", so
 * kernels, memory and the step breakdown share one timeline in the Chrome trace. */
OT_API ot_status ot_profile_add_pod_trace(ot_profile *p, const ot_pod_trace *t);
OT_API int64_t ot_profile_event_count(const ot_profile *p);
OT_API int64_t ot_profile_memory_event_count(const ot_profile *p);
/* Per (name, device) aggregate in order of first appearance. */
OT_API int ot_profile_kernel_count(const ot_profile *p);
OT_API const ot_kernel_profile *ot_profile_kernel(const ot_profile *p, int i);
/* Chrome trace JSON (traceEvents: "X" events with ts/dur in µs, pid, tid = device, args with
 * flops, bytes, GB/s, GFLOP/s; "C" counter events for device memory; "M" metadata names). */
OT_API ot_status ot_profile_chrome_trace(const ot_profile *p, char **out); /* ot_free */
OT_API ot_status ot_profile_write_chrome_trace(const ot_profile *p, const char *path);
/* Text summary: top `top` kernels by total time, totals, achieved GB/s and GFLOP/s, and with
 * limits (may be NULL) the ratio of each GB/s to the STREAM triad / memcpy figure. */
OT_API ot_status ot_profile_summary(const ot_profile *p, const ot_bench_limits *limits, int top,
                                    char **out); /* ot_free */

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_RUNTIME_H */
