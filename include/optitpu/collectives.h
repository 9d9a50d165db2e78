/*
 * optitpu collectives: all-reduce, reduce-scatter, all-gather, broadcast, reduce, all-to-all and
 * barrier over a communicator, with algorithms chosen by an alpha-beta cost model; gradient
 * aggregation (bucketing, compression with error feedback, LocalSGD); bandwidth metrics.
 *
 * A communicator (ot_comm) is one rank's handle, in the NCCL style: every member calls the same
 * collectives in the same order, each from its own thread (or process). The transport under it is
 * a const vtable plus a context (ggml-backend / SQLite VFS style): the local shared-memory
 * transport here (N in-process devices, one thread each), Open MPI in src/mpi/.
 *
 *     ot_local_world *w;
 *     OT_CHECK(ot_local_world_create(4, &w));
 *     // on the thread of device r:
 *     ot_comm *c;
 *     OT_CHECK(ot_local_world_comm(w, r, &c));
 *     OT_CHECK(ot_comm_allreduce(c, grad, grad, n, OT_F32, OT_REDOP_MEAN, NULL)); // in place
 *     ot_comm_free(c);
 *     // after every thread is done:
 *     ot_local_world_free(w);
 *
 * Semantics shared by every collective:
 *  - Determinism: for a given algorithm, member count and size, elements are combined in one fixed
 *    order, so every member receives bit-identical results, run after run. OT_ALGO_DIRECT (and the
 *    naive reference) combine in rank order 0, 1, ..., n-1.
 *  - f16 and bf16 are accumulated in f32 and rounded once at the end. Integer sums and products
 *    wrap around (two's complement); integer MEAN truncates toward zero.
 *  - Deadlines: every call has a timeout (options, or the communicator default). When it passes,
 *    the call fails with OT_ERR_TIMEOUT; when a member is known to have failed (the transport was
 *    told, e.g. by the coordinator's failure detector), every waiting member fails with
 *    OT_ERR_PEER_FAILED. Either way the communicator is aborted: the failure is announced to every
 *    member so nobody hangs, and later calls fail with OT_ERR_FAILED_PRECONDITION. Rebuild a
 *    communicator over the survivors to continue.
 *  - Out of place (sendbuf != recvbuf) leaves sendbuf unchanged; in place passes the same pointer
 *    (for reduce-scatter: recvbuf == sendbuf + rank * count elements; for all-gather:
 *    sendbuf == recvbuf + rank * count elements). Buffers may not otherwise overlap.
 *  - After a failure the contents of recvbuf are unspecified.
 */
#ifndef OPTITPU_COLLECTIVES_H
#define OPTITPU_COLLECTIVES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/core.h"
#include "optitpu/pod.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ot_redop {
    OT_REDOP_SUM = 0,
    OT_REDOP_PROD,
    OT_REDOP_MAX,
    OT_REDOP_MIN,
    OT_REDOP_MEAN, /* sum, then divided by the member count */
    OT_REDOP_COUNT,
} ot_redop;

typedef enum ot_coll_kind {
    OT_COLL_ALLREDUCE = 0,
    OT_COLL_REDUCE_SCATTER,
    OT_COLL_ALLGATHER,
    OT_COLL_BROADCAST,
    OT_COLL_REDUCE,
    OT_COLL_ALLTOALL,
    OT_COLL_BARRIER,
    OT_COLL_KIND_COUNT,
} ot_coll_kind;

typedef enum ot_coll_algo {
    OT_ALGO_AUTO = 0,         /* the cost model picks */
    OT_ALGO_RING,             /* chunked, pipelined ring over the topology's Hamiltonian ring;
                                 pairwise exchange for all-to-all, a chain for broadcast */
    OT_ALGO_HALVING_DOUBLING, /* recursive halving (reduce-scatter) + doubling (all-gather),
                                 Rabenseifner; non-powers of two fold the extra members first */
    OT_ALGO_TREE,             /* binomial tree reduce + broadcast, chunked */
    OT_ALGO_HIER2D,           /* rows: ring reduce-scatter; columns: ring all-reduce of the
                                 shard; rows: ring all-gather (a 2D torus) */
    OT_ALGO_DIRECT,           /* shared memory only: each member reduces its 1/n of the buffer
                                 straight from every peer's memory and writes it to every peer */
    OT_ALGO_COUNT,
} ot_coll_algo;

OT_API const char *ot_redop_name(ot_redop op);        /* "sum", ... */
OT_API const char *ot_coll_kind_name(ot_coll_kind k); /* "allreduce", ... */
OT_API const char *ot_coll_algo_name(ot_coll_algo a); /* "auto", "ring", ... */
/* Parses the names above; -1 when unknown. */
OT_API int ot_redop_from_name(const char *s);
OT_API int ot_coll_kind_from_name(const char *s);
OT_API int ot_coll_algo_from_name(const char *s);
/* True for dtypes the collectives reduce: f32, f64, f16, bf16, s32, s64. (All-gather, broadcast
 * and all-to-all move any dtype.) */
OT_API bool ot_coll_dtype_supported(ot_dtype dt);

typedef struct ot_coll_options {
    ot_coll_algo algo;  /* OT_ALGO_AUTO by default */
    int64_t timeout_ns; /* 0: the communicator's default */
    size_t chunk_bytes; /* pipelining chunk of ring and tree; 0: the default (256 KiB) */
} ot_coll_options;

OT_API ot_coll_options ot_coll_options_default(void);

/* ---------------------------------------------------------------------------------------------
 * The transport vtable. Ranks are 0..size-1 within the communicator. deadline_ns is absolute on
 * the ot_now_ns clock. Messages between one pair of ranks arrive in the order they were sent.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_comm_vtable {
    const char *name;
    /* Required. Sends sbytes from sbuf to rank `to` and receives rbytes into rbuf from rank
     * `from`, concurrently (a ring step); either peer may be -1 for none. Returns when both
     * are complete. Zero-byte messages are real messages (they synchronize). */
    ot_status (*sendrecv)(void *ctx, int to, const void *sbuf, size_t sbytes, int from, void *rbuf,
                          size_t rbytes, uint64_t deadline_ns);
    /* Optional. Like sendrecv (scount elements out, rcount in), but what arrives from `from` is
     * combined into rbuf: rbuf[i] = op(rbuf[i], in[i]); dt is f32, f64, s32 or s64; op is SUM,
     * PROD, MAX or MIN. NULL: sendrecv into a staging buffer, then combine. */
    ot_status (*sendrecv_reduce)(void *ctx, int to, const void *sbuf, size_t scount, int from,
                                 void *rbuf, size_t rcount, ot_dtype dt, ot_redop op,
                                 uint64_t deadline_ns);
    /* Optional, shared-memory transports only: every rank publishes one pointer and receives all
     * of them (all[r] from rank r); returns after every rank has published. NULL: OT_ALGO_DIRECT
     * is unavailable. */
    ot_status (*exchange_ptrs)(void *ctx, void *mine, void **all, uint64_t deadline_ns);
    /* Optional. NULL: a dissemination barrier over sendrecv. */
    ot_status (*barrier)(void *ctx, uint64_t deadline_ns);
    /* Optional. Announces a failure seen by this rank to every member so that nobody waits for
     * it; later transport calls fail. */
    void (*abort)(void *ctx, ot_status why, const char *msg);
    /* Optional. Releases ctx (called by ot_comm_free). */
    void (*free)(void *ctx);
} ot_comm_vtable;

typedef struct ot_comm ot_comm;

/* Cost-model parameters: alpha (per message) and beta (per byte) of one transfer. */
typedef struct ot_cost_params {
    double alpha_us;
    double gbytes_per_s;
} ot_cost_params;

/* Wraps a transport. ctx is owned by the communicator from now on (vt->free releases it, also
 * when this call fails). rank in 0..size-1. */
OT_API ot_status ot_comm_create(const ot_comm_vtable *vt, void *ctx, int rank, int size,
                                ot_comm **out);
OT_API void ot_comm_free(ot_comm *c); /* NULL is a no-op */
OT_API int ot_comm_rank(const ot_comm *c);
OT_API int ot_comm_size(const ot_comm *c);
OT_API const char *ot_comm_transport(const ot_comm *c);
OT_API void ot_comm_set_timeout(ot_comm *c, int64_t timeout_ns); /* default 60 s */
OT_API void ot_comm_set_cost_params(ot_comm *c, ot_cost_params p);
OT_API ot_cost_params ot_comm_cost_params(const ot_comm *c);
/* Places the members on a topology of the same size (rank r = device r): ring collectives follow
 * its Hamiltonian ring, HIER2D uses axis 0 as rows, and the cost model takes its link figures.
 * The topology is copied. Must be called with the same topology on every member. */
OT_API ot_status ot_comm_set_topology(ot_comm *c, const ot_topology *t);
/* True once a collective failed on this member (the communicator is then unusable). */
OT_API bool ot_comm_aborted(const ot_comm *c);

/* How the processes of one node wait for each other's messages in the MPI transport (src/mpi):
 * true when they sleep (a doorbell in shared memory that the peer rings, after up to 100 us of
 * polling), false when they poll, yielding between polls. They sleep when `processes` fit the
 * node's `cores`: a poller that yields keeps competing for its core, and when another thread
 * holds it sees its message only when the scheduler takes the core back (about 11 ms on this
 * kernel, bench_yield_wait), while a sleeper is woken onto a core at once. With more processes
 * than cores the woken sleeper waits for a core held by a computing rank, and polling was
 * faster (docs/simulate.md, "Processes"). The simulator prices the same rule. */
OT_API bool ot_comm_process_waits_sleep(int processes, int cores);

/* Sub-communicators from HLO replica_groups: groups holds ngroups * group_size ranks of this
 * communicator, every rank exactly once. Collective over this communicator; each member gets a
 * communicator over its group, ranked by position in the group. */
OT_API ot_status ot_comm_split_groups(ot_comm *c, const int *groups, int ngroups, int group_size,
                                      ot_comm **out);
/* Parses HLO replica_groups text, "{{0,1},{2,3}}" or "{}" (all nranks in one group). *groups is
 * allocated with ot_malloc (ngroups * group_size entries). Validates: equal group sizes, ids in
 * 0..nranks-1, each id exactly once, every rank covered. */
OT_API ot_status ot_replica_groups_parse(const char *text, size_t len, int nranks, int **groups,
                                         int *ngroups, int *group_size);

/* ---- collectives (count is elements per member unless stated) ---- */

OT_API ot_status ot_comm_allreduce(ot_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                                   ot_dtype dt, ot_redop op, const ot_coll_options *o);
/* sendbuf: size * count elements; recvbuf: count elements, block `rank` of the reduction. */
OT_API ot_status ot_comm_reduce_scatter(ot_comm *c, const void *sendbuf, void *recvbuf,
                                        size_t count, ot_dtype dt, ot_redop op,
                                        const ot_coll_options *o);
/* sendbuf: count elements; recvbuf: size * count elements, block r from rank r. */
OT_API ot_status ot_comm_allgather(ot_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                                   ot_dtype dt, const ot_coll_options *o);
/* buf on root is sent; on the others it is overwritten. */
OT_API ot_status ot_comm_broadcast(ot_comm *c, void *buf, size_t count, ot_dtype dt, int root,
                                   const ot_coll_options *o);
/* recvbuf is written on root only (may be NULL elsewhere). */
OT_API ot_status ot_comm_reduce(ot_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                                ot_dtype dt, ot_redop op, int root, const ot_coll_options *o);
/* sendbuf and recvbuf: size * count elements; block j of rank i's sendbuf lands in block i of
 * rank j's recvbuf. Out of place only. */
OT_API ot_status ot_comm_alltoall(ot_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                                  ot_dtype dt, const ot_coll_options *o);
OT_API ot_status ot_comm_barrier(ot_comm *c, const ot_coll_options *o);

/* ---- algorithm choice ---- */

/* Whether `algo` implements `kind` on this communicator (DIRECT needs shared memory; HIER2D
 * needs a rows x columns factorization with both sides > 1). AUTO is always true. */
OT_API bool ot_coll_algo_supported(const ot_comm *c, ot_coll_kind kind, ot_coll_algo algo);
/* Estimated time in microseconds of `algo` for `kind` over `bytes` (per member, as the count
 * argument times the element size) by the alpha-beta model; negative when unsupported. */
OT_API double ot_coll_cost_us(const ot_comm *c, ot_coll_kind kind, ot_coll_algo algo, size_t bytes);
/* The cheapest supported algorithm for kind and bytes (what AUTO runs). */
OT_API ot_coll_algo ot_coll_choose(const ot_comm *c, ot_coll_kind kind, size_t bytes);
/* Writes a readable table of every algorithm's estimate for kind at bytes, marking the choice
 * (snprintf semantics). */
OT_API int ot_coll_explain(const ot_comm *c, ot_coll_kind kind, size_t bytes, char *buf, size_t n);

/* ---- metrics (nccl-tests definitions, doc/PERFORMANCE.md there) ----
 * algbw = S / t where S is the size nccl-tests reports: count * element size for all-reduce,
 * broadcast and reduce; size * count * element size for reduce-scatter, all-gather and
 * all-to-all. busbw = algbw * factor: all-reduce 2(n-1)/n; reduce-scatter, all-gather and
 * all-to-all (n-1)/n; broadcast and reduce 1. */
OT_API double ot_coll_bus_factor(ot_coll_kind kind, int nranks);
OT_API double ot_coll_algbw_gbs(ot_coll_kind kind, int nranks, size_t count, ot_dtype dt,
                                double seconds);

/* Per-communicator counters since creation. */
typedef struct ot_comm_stats {
    uint64_t calls[OT_COLL_KIND_COUNT];
    uint64_t bytes[OT_COLL_KIND_COUNT]; /* the size S above, summed */
    uint64_t ns[OT_COLL_KIND_COUNT];    /* wall time inside the calls */
    uint64_t failures;
} ot_comm_stats;
OT_API void ot_comm_get_stats(const ot_comm *c, ot_comm_stats *out);

/* ---------------------------------------------------------------------------------------------
 * The local transport: n devices in one process sharing memory; each device's communicator is
 * used from its own thread.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_local_world ot_local_world;

OT_API ot_status ot_local_world_create(int n, ot_local_world **out);
/* Frees the shared state; every communicator of the world must be freed first. */
OT_API void ot_local_world_free(ot_local_world *w);
OT_API int ot_local_world_size(const ot_local_world *w);
/* A communicator for device `rank`: once per rank and world (OT_ERR_ALREADY_EXISTS after that,
 * also after the first was freed — its message counters cannot restart); any thread. */
OT_API ot_status ot_local_world_comm(ot_local_world *w, int rank, ot_comm **out);
/* Declares device `rank` failed (what a failure detector or a process supervisor does): every
 * member waiting in a collective returns OT_ERR_PEER_FAILED, now and later. Thread-safe. */
OT_API void ot_local_world_fail(ot_local_world *w, int rank);
/* Fault injection for tests: device `rank` stops dead (returns OT_ERR_CANCELLED without telling
 * anyone, like a crashed process) at its `after`-th transport operation from now (1-based). */
OT_API void ot_local_world_inject_stop(ot_local_world *w, int rank, int64_t after);

/* Runs fn(ud, rank, comm) on n threads, one per device of a fresh world, and returns the first
 * non-OK status in rank order (each rank's in st[rank] when st is not NULL). */
typedef ot_status (*ot_local_fn)(void *ud, int rank, ot_comm *c);
OT_API ot_status ot_local_run(int n, ot_local_fn fn, void *ud, ot_status *st);
/* The same on an existing world (for fault injection). */
OT_API ot_status ot_local_world_run(ot_local_world *w, ot_local_fn fn, void *ud, ot_status *st);

/* ---------------------------------------------------------------------------------------------
 * The split-phase sharded exchange: a reduce-scatter and an all-gather of one flat f32 vector
 * between the n threads of one process (or, through ot_shard_exchange_wrap, the processes of an
 * MPI job), bucket by bucket, so that each can overlap computation
 * (ZeRO stage 1 with PyTorch DDP's bucketed overlap). Member r owns block r, the elements
 * [r * block_len, (r + 1) * block_len) of a vector of n * block_len; buckets are disjoint ranges
 * of the vector (elements no bucket covers are never reduced).
 *
 *   reduction, step seq (1, 2, ...):  grads_writable(seq) → write bucket b of grads → post(b)
 *                                     (or post_view(b, data) of values held elsewhere) ...
 *                                     reduce(wait=false) between other work, reduce(wait=true)
 *   gather:                           params_writable(seq) → write the bound block →
 *                                     publish(seq) ... wait_published(seq, range) → read the
 *                                     owners' blocks (ot_shard_exchange_block) → fetched(seq)
 *
 * Member r's part of bucket b is reduced from every member's posted grads as soon as all have
 * posted b, in a fixed order per element — order TREE: the tree all-reduce's (at level mask =
 * 1, 2, 4, ... member v, a multiple of 2 * mask, adds member v + mask), DIRECT: rank order —
 * which does not depend on the buckets or on when they arrive: the result is bit for bit the
 * block of ot_comm_reduce_scatter with that algorithm (and of the tree all-reduce).
 * grads_writable and params_writable wait until no member still reads this member's previous
 * step (a member's grads until every member reduced seq - 1, its block of params until every
 * member called fetched(seq - 1)).
 *
 * Waits end at the deadline (ot_now_ns value; 0: none) with TIMEOUT, which aborts the exchange;
 * ot_shard_exchange_abort (any thread; e.g. a member failed) makes every wait, now and later,
 * return `why` (PEER_FAILED, ...). Thread safety: member r's calls come from one thread at a
 * time; members run concurrently; abort from anywhere.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_shard_exchange ot_shard_exchange;

/* order: OT_ALGO_TREE or OT_ALGO_DIRECT (else INVALID_ARGUMENT); buckets (off, len) inside the
 * vector, disjoint, at most 4096. */
OT_API ot_status ot_shard_exchange_create(int n, size_t block_len, int nbuckets,
                                          const size_t *bucket_off, const size_t *bucket_len,
                                          ot_coll_algo order, ot_shard_exchange **out);
OT_API void ot_shard_exchange_free(ot_shard_exchange *x); /* NULL is a no-op */
/* Member rank's memory for the exchange's life (caller-owned): grads (n * block_len floats),
 * read by every member during its reductions; block (block_len floats), its block of the
 * parameters, which every member reads after publish — anywhere, e.g. the device memory its
 * update writes in place. Before its first step. */
OT_API ot_status ot_shard_exchange_bind(ot_shard_exchange *x, int rank, const float *grads,
                                        const float *block);
OT_API void ot_shard_exchange_abort(ot_shard_exchange *x, ot_status why, const char *msg);
OT_API ot_status ot_shard_exchange_grads_writable(ot_shard_exchange *x, int rank, uint64_t seq,
                                                  uint64_t deadline_ns);
OT_API ot_status ot_shard_exchange_post(ot_shard_exchange *x, int rank, uint64_t seq, int bucket);
/* post, with bucket b's values read from data (the bucket's length of floats) instead of the
 * bound grads — e.g. a host device's output buffer, so the values are never copied into grads.
 * data must stay unchanged until every member has reduced seq (this member's grads_writable of
 * seq + 1 returns; after an abort, until no member is inside the exchange any more). */
OT_API ot_status ot_shard_exchange_post_view(ot_shard_exchange *x, int rank, uint64_t seq,
                                             int bucket, const float *data);
/* Reduces into reduced (block_len floats: this member's block) its part of every bucket that
 * every member has posted for seq and it has not reduced yet; wait: until all buckets are.
 * *done (may be NULL): buckets this call reduced. */
OT_API ot_status ot_shard_exchange_reduce(ot_shard_exchange *x, int rank, uint64_t seq,
                                          float *reduced, bool wait, uint64_t deadline_ns,
                                          int *done);
/* Buckets that every member has posted, counted over the exchange's life, without a lock: a
 * member polling between pieces of work calls reduce only when this has moved. */
OT_API uint64_t ot_shard_exchange_completions(const ot_shard_exchange *x);
/* Whether every bucket of seq is reduced by this member. */
OT_API bool ot_shard_exchange_reduced(const ot_shard_exchange *x, int rank, uint64_t seq);
OT_API ot_status ot_shard_exchange_params_writable(ot_shard_exchange *x, int rank, uint64_t seq,
                                                   uint64_t deadline_ns);
OT_API ot_status ot_shard_exchange_publish(ot_shard_exchange *x, int rank, uint64_t seq);
/* Waits until the owners of [off, off + len) have published seq (none publishes seq + 1 before
 * every member declared seq fetched: params_writable). */
OT_API ot_status ot_shard_exchange_wait_published(ot_shard_exchange *x, uint64_t seq, size_t off,
                                                  size_t len, uint64_t deadline_ns);
/* Member q's bound block (block_len floats: elements [q * block_len, (q + 1) * block_len) of
 * the vector), valid once published. */
OT_API const float *ot_shard_exchange_block(const ot_shard_exchange *x, int q);
OT_API ot_status ot_shard_exchange_fetched(ot_shard_exchange *x, int rank, uint64_t seq);

/* The same exchange over another transport, whose members are not all threads of this process
 * (ot_mpi_shard_exchange_create in mpi.h: one member per process of an MPI job): every call
 * above goes to ops with impl, under the contract above (post's data NULL: the bound grads;
 * completions may progress the transport). ot_shard_exchange_free calls ops->free(impl); ops
 * outlives the handle. */
typedef struct ot_shard_exchange_ops {
    void (*free)(void *impl);
    ot_status (*bind)(void *impl, int rank, const float *grads, const float *block);
    void (*abort)(void *impl, ot_status why, const char *msg);
    ot_status (*grads_writable)(void *impl, int rank, uint64_t seq, uint64_t deadline_ns);
    ot_status (*post)(void *impl, int rank, uint64_t seq, int bucket, const float *data);
    ot_status (*reduce)(void *impl, int rank, uint64_t seq, float *reduced, bool wait,
                        uint64_t deadline_ns, int *done);
    uint64_t (*completions)(void *impl);
    bool (*reduced)(void *impl, int rank, uint64_t seq);
    ot_status (*params_writable)(void *impl, int rank, uint64_t seq, uint64_t deadline_ns);
    ot_status (*publish)(void *impl, int rank, uint64_t seq);
    ot_status (*wait_published)(void *impl, uint64_t seq, size_t off, size_t len,
                                uint64_t deadline_ns);
    const float *(*block)(void *impl, int q);
    ot_status (*fetched)(void *impl, int rank, uint64_t seq);
} ot_shard_exchange_ops;
/* A handle over ops and impl (every slot required); on error impl is not freed. */
OT_API ot_status ot_shard_exchange_wrap(const ot_shard_exchange_ops *ops, void *impl,
                                        ot_shard_exchange **out);

/* ---------------------------------------------------------------------------------------------
 * Gradient aggregation
 * ------------------------------------------------------------------------------------------- */

typedef enum ot_grad_compress {
    OT_COMPRESS_NONE = 0,
    OT_COMPRESS_BF16, /* cast to bf16 for the wire, accumulated in f32 */
    OT_COMPRESS_F16,
    OT_COMPRESS_INT8, /* per-bucket scale max|g|/127; int8 payload all-gathered, summed in f32 */
    OT_COMPRESS_TOPK, /* the k largest |g| per bucket; indices + values all-gathered */
    OT_COMPRESS_COUNT,
} ot_grad_compress;

OT_API const char *ot_grad_compress_name(ot_grad_compress c);

typedef struct ot_grad_aggregator_options {
    size_t bucket_bytes;       /* fusion buffer size (f32 bytes); default 25 MiB */
    ot_redop op;               /* SUM or MEAN; MEAN by default */
    double weight;             /* this member's weight; < 0 (default): unweighted. With a
                                  weight, every member's gradient is scaled by its weight and
                                  the results are summed (weighted mean when weights sum to 1) */
    ot_grad_compress compress; /* default NONE */
    bool error_feedback;       /* keep what compression lost and add it next step (default on) */
    double topk_fraction;      /* for TOPK: fraction kept per bucket, default 0.01 */
    ot_coll_options coll;      /* algorithm and deadline of the all-reduces */
} ot_grad_aggregator_options;

OT_API ot_grad_aggregator_options ot_grad_aggregator_options_default(void);

typedef struct ot_grad_aggregator ot_grad_aggregator;

/* One aggregator per member; tensor sizes (f32 element counts) fixed at creation and equal on
 * every member. */
OT_API ot_status ot_grad_aggregator_create(ot_comm *c, int ntensors, const size_t *sizes,
                                           const ot_grad_aggregator_options *o,
                                           ot_grad_aggregator **out);
OT_API void ot_grad_aggregator_free(ot_grad_aggregator *a);
/* Aggregates the gradients in place (grads[i] has sizes[i] f32 elements): packs them into
 * buckets, compresses, all-reduces, unpacks. Collective. */
OT_API ot_status ot_grad_aggregate(ot_grad_aggregator *a, float *const *grads);
OT_API int ot_grad_bucket_count(const ot_grad_aggregator *a);
/* Bytes this member put on the wire in the last ot_grad_aggregate (the compressed payload). */
OT_API size_t ot_grad_last_wire_bytes(const ot_grad_aggregator *a);
/* The error-feedback residuals (what compression has not delivered yet, added to the next
 * gradients): n = the total f32 elements, in tensor order. get copies them out (a checkpoint),
 * set replaces them (a resume), so a restored member continues exactly. OT_ERR_FAILED_PRECONDITION
 * without compression or error feedback; OT_ERR_INVALID_ARGUMENT when n is not the total. Not
 * during an ot_grad_aggregate on the same aggregator. */
OT_API ot_status ot_grad_residual_get(const ot_grad_aggregator *a, float *out, size_t n);
OT_API ot_status ot_grad_residual_set(ot_grad_aggregator *a, const float *in, size_t n);

/* LocalSGD: at steps where (step + 1) % period == 0, replaces params with their mean over the
 * members (collective); other steps do nothing. */
OT_API ot_status ot_localsgd_sync(ot_comm *c, float *params, size_t count, int64_t step,
                                  int64_t period, const ot_coll_options *o);

/* ---------------------------------------------------------------------------------------------
 * Step-time breakdown. A trace records intervals per device — compute, communication, other —
 * and reports how a step's wall time divides into compute, communication and idle (wall time
 * covered by neither). Attached to a communicator, every collective records itself as
 * communication. Exports Chrome trace JSON (opens in Perfetto). Thread-safe.
 * ------------------------------------------------------------------------------------------- */

typedef enum ot_phase {
    OT_PHASE_COMPUTE = 0,
    OT_PHASE_COMM,
    OT_PHASE_OTHER,
    OT_PHASE_COUNT,
} ot_phase;

typedef struct ot_pod_trace ot_pod_trace;

typedef struct ot_step_breakdown {
    double wall_s;    /* to - from */
    double compute_s; /* union of the compute intervals inside [from, to) */
    double comm_s;    /* union of the communication intervals not already counted as compute */
    double other_s;
    double idle_s; /* wall - everything recorded */
} ot_step_breakdown;

OT_API ot_status ot_pod_trace_create(ot_pod_trace **out);
OT_API void ot_pod_trace_free(ot_pod_trace *t);
/* name is copied; end_ns >= start_ns (ot_now_ns clock). */
OT_API ot_status ot_pod_trace_record(ot_pod_trace *t, int device, ot_phase phase, const char *name,
                                     uint64_t start_ns, uint64_t end_ns);
OT_API size_t ot_pod_trace_count(const ot_pod_trace *t);
/* Collectives on c are recorded on `device` of t (t NULL detaches). The trace must outlive the
 * attachment. */
OT_API void ot_comm_set_trace(ot_comm *c, ot_pod_trace *t, int device);
OT_API ot_status ot_pod_trace_breakdown(const ot_pod_trace *t, int device, uint64_t from_ns,
                                        uint64_t to_ns, ot_step_breakdown *out);
/* {"traceEvents":[{"name","cat","ph":"X","ts","dur","pid":0,"tid":device},...]}, times in
 * microseconds from the earliest event. *out is freed with ot_free. */
OT_API ot_status ot_pod_trace_to_json(const ot_pod_trace *t, char **out);
/* "compute", "comm", "other"; "<invalid>" outside the enum. */
OT_API const char *ot_phase_name(ot_phase p);
/* One recorded interval, in record order (the runtime's profiler imports them this way). */
typedef struct ot_pod_trace_event {
    int device;
    ot_phase phase;
    const char *name; /* valid until the trace is freed */
    uint64_t start_ns, end_ns;
} ot_pod_trace_event;
/* Interval i (0 .. ot_pod_trace_count - 1); OT_ERR_OUT_OF_RANGE beyond. */
OT_API ot_status ot_pod_trace_event_get(const ot_pod_trace *t, size_t i, ot_pod_trace_event *out);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_COLLECTIVES_H */
