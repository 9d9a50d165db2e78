/*
 * optitpu mpi: the pod across processes and hosts on Open MPI — the MPI transport under the
 * collectives' communicator (optitpu/collectives.h), algorithm choice between MPI's own
 * collective and ours from measurements, hierarchical all-reduce over K local devices per
 * process, and the pod bootstrap (global device ids, topology presets mapped onto processes,
 * rank 0's coordinator with heartbeats and membership epochs, barriers with deadlines).
 *
 *     // every process of `mpirun -np P optitpu ...`:
 *     ot_mpi_options mo = ot_mpi_options_default();
 *     mo.local_devices = 4;                               // K host devices per process
 *     ot_mpi *m;
 *     OT_CHECK(ot_mpi_init(&mo, &m));                     // MPI_Init_thread (if needed)
 *     OT_CHECK(ot_mpi_calibrate(m));                      // measures links and MPI_Allreduce
 *     ot_comm *c = ot_mpi_comm(m);                        // P members, one per process
 *     OT_CHECK(ot_mpi_allreduce(m, g, g, n, OT_F32, OT_REDOP_MEAN, NULL)); // the cheapest
 *     OT_CHECK(ot_comm_allgather(c, x, all, n, OT_F32, NULL));            // any collective
 *     // on the thread of local device d (0..K-1), all K at once:
 *     OT_CHECK(ot_mpi_hier_allreduce(m, d, g_d, g_d, n, OT_F32, OT_REDOP_SUM, 0));
 *     OT_CHECK(ot_mpi_barrier(m, 5000000000));            // 5 s deadline
 *     ot_mpi_free(m);                                     // MPI_Finalize if init called it
 *
 * Errors: every MPI communicator this module creates has MPI_ERRORS_RETURN; an MPI error
 * becomes OT_ERR_IO (OT_ERR_TIMEOUT for a passed deadline) whose message carries MPI's own
 * error string (MPI_Error_string). Debian's Open MPI ends the whole job when a process dies, so
 * recovery from a lost process is a restart from a checkpoint (`optitpu launch`, docs/mpi.md).
 *
 * Determinism: our algorithms (ring, halving-doubling, tree, shm) combine elements in the same
 * fixed order as the in-process transport, so results are bit-identical on every rank and equal
 * to an in-process run of the same algorithm (shm: OT_ALGO_DIRECT's rank order). MPI's own
 * all-reduce does not promise an order, so the automatic choice uses it only where order cannot
 * matter (integer dtypes, MAX, MIN) unless ot_mpi_coll_options.allow_unordered is set.
 *
 * Threads: MPI is initialized with MPI_THREAD_SERIALIZED; an ot_mpi and its communicator are
 * used by one thread at a time, except ot_mpi_hier_allreduce, which the K local device threads
 * call together (only local device 0 talks to MPI).
 *
 * Without MPI at build time (OT_HAVE_MPI undefined) every function here returns
 * OT_ERR_UNIMPLEMENTED naming the missing build feature; ot_mpi_available() says which.
 */
#ifndef OPTITPU_MPI_H
#define OPTITPU_MPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/collectives.h"
#include "optitpu/core.h"
#include "optitpu/pod.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True when the library was built with the MPI communicator. */
OT_API bool ot_mpi_available(void);

typedef struct ot_mpi ot_mpi;

typedef struct ot_mpi_options {
    int local_devices;       /* K host devices per process (>= 1; default 1) */
    const char *topology;    /* a preset (pod.h) of P*K devices, or NULL: "ring-<P*K>" */
    int64_t timeout_ns;      /* default deadline of collectives and barriers; default 60 s */
    double heartbeat_fail_s; /* rank 0 declares a process failed after this long without a
                                heartbeat (the coordinator's timeout detector); default 10 */
    bool shared_memory;      /* allow OT_MPI_ALGO_SHM when every process runs on one node (same
                                host name, boot id and network, IPC and mount namespaces on
                                every rank, and MPI_COMM_TYPE_SHARED spans the job); default on */
} ot_mpi_options;

OT_API ot_mpi_options ot_mpi_options_default(void);

/* Joins the job: initializes MPI when nobody has (MPI_THREAD_SERIALIZED), duplicates
 * MPI_COMM_WORLD (errors return), builds the process communicator, the K local devices and,
 * on rank 0, the coordinator with every global device registered. Collective over the job.
 * On failure nothing is left allocated (MPI stays initialized). */
OT_API ot_status ot_mpi_init(const ot_mpi_options *o, ot_mpi **out);
/* Frees everything; calls MPI_Finalize when ot_mpi_init initialized MPI. Collective. NULL is a
 * no-op. */
OT_API void ot_mpi_free(ot_mpi *m);

OT_API int ot_mpi_rank(const ot_mpi *m);          /* this process, 0..P-1 */
OT_API int ot_mpi_size(const ot_mpi *m);          /* P */
OT_API int ot_mpi_local_devices(const ot_mpi *m); /* K */
/* Global device id of local device `local` of process `rank`: rank * K + local. */
OT_API int ot_mpi_global_device(const ot_mpi *m, int rank, int local);
/* The process that hosts a global device (device / K); -1 outside 0..P*K-1. */
OT_API int ot_mpi_device_process(const ot_mpi *m, int device);
/* The pod topology over all P*K devices (borrowed; valid until ot_mpi_free). */
OT_API const ot_topology *ot_mpi_topology(const ot_mpi *m);
/* The process communicator (P members, transport "mpi"): every collective of
 * collectives.h over MPI point-to-point. Borrowed; freed by ot_mpi_free. */
OT_API ot_comm *ot_mpi_comm(ot_mpi *m);
/* The communicator of local device `local` among the K devices of this process (shared
 * memory). Borrowed. */
OT_API ot_comm *ot_mpi_local_comm(ot_mpi *m, int local);
/* True when OT_MPI_ALGO_SHM is available: every process on one node (see shared_memory). The
 * same answer on every rank (decided collectively by ot_mpi_init). */
OT_API bool ot_mpi_shared_memory(const ot_mpi *m);

/* ---- algorithm choice ---------------------------------------------------------------------- */

typedef enum ot_mpi_algo {
    OT_MPI_ALGO_AUTO = 0,
    OT_MPI_ALGO_NATIVE, /* MPI's own (MPI_Iallreduce, so the deadline holds) */
    OT_MPI_ALGO_RING,   /* ours over point-to-point */
    OT_MPI_ALGO_HALVING_DOUBLING,
    OT_MPI_ALGO_TREE,
    OT_MPI_ALGO_SHM, /* every process on one node: an MPI shared-memory window; each rank
                        reduces its 1/P slice from every rank's copy in rank order (the order of
                        the in-process OT_ALGO_DIRECT, bit for bit) and everyone copies the
                        reduced slices out */
    OT_MPI_ALGO_COUNT,
} ot_mpi_algo;

OT_API const char *ot_mpi_algo_name(ot_mpi_algo a); /* "auto", "native", "ring", ... */
OT_API int ot_mpi_algo_from_name(const char *s);    /* -1 when unknown */

typedef struct ot_mpi_coll_options {
    ot_mpi_algo algo;     /* AUTO: the cheapest by the measured model */
    int64_t timeout_ns;   /* 0: the default */
    size_t chunk_bytes;   /* pipelining chunk of ring/tree; 0: chosen from the measurements */
    bool allow_unordered; /* let AUTO pick NATIVE for float SUM/PROD/MEAN too */
} ot_mpi_coll_options;

OT_API ot_mpi_coll_options ot_mpi_coll_options_default(void);

/* Measures, on every rank together: point-to-point latency and bandwidth between ring
 * neighbours (small and large messages) and MPI_Iallreduce at two sizes, fitting an alpha-beta
 * line to each; on one node also ring, halving-doubling, tree and the shared-memory all-reduce
 * as whole operations at 8 B, 1 MiB and 16 MiB (a line up to 1 MiB, one beyond). Takes the
 * slowest rank's figures, so every rank holds the same model and makes the same choice. Sets
 * the process communicator's cost parameters. Collective; a few milliseconds across nodes,
 * ~0.2-2 s on one node. Before it runs, the model uses the defaults (5 us, 5 GB/s) and AUTO
 * never picks SHM. */
OT_API ot_status ot_mpi_calibrate(ot_mpi *m);
/* The measured model: our point-to-point links and MPI's all-reduce as alpha (us) + bytes/beta. */
OT_API void ot_mpi_model(const ot_mpi *m, ot_cost_params *p2p, ot_cost_params *native);
/* The measured shared-memory all-reduce beyond 1 MiB (alpha + bytes/beta over the vector's
 * bytes); false when SHM is unavailable or not calibrated yet. */
OT_API bool ot_mpi_model_shm(const ot_mpi *m, ot_cost_params *shm);
/* The algorithm AUTO runs for an all-reduce of count elements of dt with op. */
OT_API ot_mpi_algo ot_mpi_choose(const ot_mpi *m, size_t count, ot_dtype dt, ot_redop op,
                                 const ot_mpi_coll_options *o);
/* The estimate (us) behind the choice; negative when unsupported for dt/op. */
OT_API double ot_mpi_cost_us(const ot_mpi *m, ot_mpi_algo a, size_t count, ot_dtype dt);

/* All-reduce over the P processes with the chosen algorithm (semantics of ot_comm_allreduce:
 * every reducible dtype and op, in place or not). NATIVE with f16/bf16 or MEAN runs on a
 * staging buffer of the accumulation dtype. Collective. */
OT_API ot_status ot_mpi_allreduce(ot_mpi *m, const void *sendbuf, void *recvbuf, size_t count,
                                  ot_dtype dt, ot_redop op, const ot_mpi_coll_options *o);
/* MPI_Allreduce called directly on the job's communicator with MPI's default settings (the
 * baseline of `optitpu bench collectives --mpi`); f32, f64, s32, s64 with SUM/PROD/MAX/MIN. */
OT_API ot_status ot_mpi_allreduce_plain(ot_mpi *m, const void *sendbuf, void *recvbuf, size_t count,
                                        ot_dtype dt, ot_redop op);

/* Hierarchical all-reduce over all P*K devices: called by the K local device threads of every
 * process at once (local = 0..K-1). The K buffers reduce through shared memory onto local
 * device 0 (f16/bf16 widened to f32), local device 0 all-reduces across processes over MPI
 * (ot_mpi_allreduce), and the result is broadcast back to the local devices. Combination order
 * is fixed (local reduction in the local algorithm's order, then the process algorithm's), so
 * every device of every process gets bit-identical results. Buffers are the caller's; staging
 * is allocated once per size growth. timeout_ns 0: the default. */
OT_API ot_status ot_mpi_hier_allreduce(ot_mpi *m, int local, const void *sendbuf, void *recvbuf,
                                       size_t count, ot_dtype dt, ot_redop op, int64_t timeout_ns);

/* The split-phase sharded exchange (collectives.h) across the processes, member r being process
 * r (one device per process), with ot_shard_exchange_create's block, buckets and order; the
 * handle takes the same calls and is freed by ot_shard_exchange_free. Collective: every process
 * creates it at once (it duplicates the job's communicator, so its messages meet no other
 * component's). The values travel as non-blocking point-to-point messages into this process's
 * memory: post sends each owner its part of the bucket (the step's receives are posted by
 * grads_writable), publish sends the bound block to every process and receives theirs into the
 * vector the bound block is part of (block at rank * block_len of size * block_len floats, which
 * then holds every block: ot_shard_exchange_block). Every call tests what is outstanding, which
 * progresses MPI: calling ot_shard_exchange_completions (or reduce without waiting) between
 * pieces of work overlaps the transfers with the work. Each element is combined in the order's
 * fixed per-element order, bit for bit the in-process exchange and ot_comm_reduce_scatter with
 * that algorithm. grads_writable and params_writable wait for this process's sends of the last
 * step (the others hold copies); waits poll MPI_Test against the deadline, yielding between
 * polls. Threads: one thread at a time, and no other thread calls MPI meanwhile
 * (MPI_THREAD_SERIALIZED). */
OT_API ot_status ot_mpi_shard_exchange_create(ot_mpi *m, size_t block_len, int nbuckets,
                                              const size_t *bucket_off, const size_t *bucket_len,
                                              ot_coll_algo order, ot_shard_exchange **out);

/* ---- bootstrap: barriers, heartbeats, membership -------------------------------------------- */

/* A barrier over every process (MPI_Ibarrier) that returns OT_ERR_TIMEOUT when timeout_ns passes
 * first (<= 0: the default). */
OT_API ot_status ot_mpi_barrier(ot_mpi *m, int64_t timeout_ns);
/* Sends this process's heartbeat to rank 0 (non-blocking; rank 0 records its own directly).
 * Call it regularly (e.g. every step). */
OT_API ot_status ot_mpi_heartbeat(ot_mpi *m);
/* Rank 0 only: receives the heartbeats that have arrived, feeds them to the coordinator (one
 * heartbeat per device of the sending process) and evaluates the failure detector. Elsewhere a
 * no-op. */
OT_API ot_status ot_mpi_poll(ot_mpi *m);
/* Collective: rank 0 polls, then broadcasts the membership epoch and which processes are
 * members (HEALTHY or SUSPECT); alive has P entries (may be NULL). Deadline as the barrier. */
OT_API ot_status ot_mpi_membership(ot_mpi *m, uint64_t *epoch, bool *alive, int64_t timeout_ns);
/* Ends the whole job now (MPI_Abort with `code`): for a command-line program whose process
 * cannot go on, so the other processes do not wait for it until their deadlines. Does not
 * return. The library itself never calls it. */
OT_API void ot_mpi_abort_job(ot_mpi *m, int code);
/* Rank 0's coordinator (NULL on other ranks). Borrowed. */
OT_API ot_coord *ot_mpi_coord(ot_mpi *m);

/* ---- launcher contract (optitpu launch) --------------------------------------------------- */

/* Environment variables `optitpu launch` sets for the command it runs: */
#define OT_LAUNCH_ENV_ATTEMPT "OPTITPU_LAUNCH_ATTEMPT" /* 0 on the first run, then 1, 2, ... */
#define OT_LAUNCH_ENV_RESUME                                                                       \
    "OPTITPU_RESUME" /* "1" on a restart: resume from the                                          \
                        newest verified checkpoint */
#define OT_LAUNCH_ENV_CKPT                                                                         \
    "OPTITPU_RESUME_CKPT" /* that checkpoint's directory, when the                                 \
                             launcher was given --ckpt-dir */

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_MPI_H */
