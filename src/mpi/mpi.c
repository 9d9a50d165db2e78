/* The pod over Open MPI: the "mpi" transport of the communicator vtable (point-to-point with
 * deadlines), the measured choice between MPI's own all-reduce and ours, hierarchical all-reduce
 * over K local devices per process, and the bootstrap (device ids, topology, rank 0's
 * coordinator, heartbeats, membership, barriers with deadlines).
 *
 * Every MPI call goes through one check that turns a non-success code into an ot_status with
 * MPI's error string; every communicator created here carries MPI_ERRORS_RETURN, so a failure
 * comes back to us instead of aborting the job. Waiting is MPI_Test polling against an absolute
 * deadline (sched_yield between polls: the machine may be oversubscribed); the transport's
 * point-to-point waits of processes that share a node and fit its cores poll briefly and then
 * sleep on a doorbell in the node's control window that their peers ring (wait_all). */
#include "optitpu/mpi.h"

#include "mpi_internal.h"
#include "core/core_util.h"
#include "pod/reduce_kernels.h"

#include <mpi.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <limits.h>
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#define DEFAULT_TIMEOUT_NS (60LL * 1000 * 1000 * 1000)
#define TAG_P2P            7
#define TAG_HEARTBEAT      11
#define MAX_MSG            (1u << 30) /* bytes per MPI message (counts are int) */

bool ot_mpi_available(void) {
    return true;
}

/* ---- errors --------------------------------------------------------------------------------- */

static ot_status mpi_fail(int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) len = snprintf(s, sizeof s, "code %d", rc);
    s[len < (int)sizeof s ? len : (int)sizeof s - 1] = 0;
    return ot_error(OT_ERR_IO, "mpi: %s: %s", what, s);
}

#define MPI_TRY(call, what)                                                                        \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) return mpi_fail(rc_, what);                                        \
    } while (0)

/* ---- waiting -------------------------------------------------------------------------------- */

static inline void cpu_relax(void) {
#if defined(__SSE2__)
    _mm_pause();
#endif
}

#if defined(__linux__)
static void futex_wait(_Atomic uint32_t *addr, uint32_t val, uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    /* not FUTEX_PRIVATE: the word lives in a mapping shared between processes */
    syscall(SYS_futex, (void *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}
static void futex_wake_all(_Atomic uint32_t *addr) {
    syscall(SYS_futex, (void *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
#endif

/* Rank r's words in the node's control window (processes on one node), alone on their pair of
 * cache lines: the shared-memory all-reduce's arrival counter, and the transport's doorbell. */
typedef struct shm_ctl {
    _Atomic uint32_t seq;          /* arrivals so far, modulo 2^32; the futex word */
    _Atomic uint32_t waiters;      /* ranks sleeping on seq */
    _Atomic uint32_t bell;         /* rings: a peer posted a send to r or completed a request
                                    * with r (modulo 2^32); the futex word r's transport sleeps on */
    _Atomic uint32_t bell_waiters; /* r's threads sleeping on bell */
    char pad[128 - 4 * sizeof(uint32_t)];
} shm_ctl;

/* Rings rank q's doorbell: what q waits for may have happened (a message to it posted, or a
 * request of ours with it completed, which is what its request's completion may need). A
 * system call only when q sleeps on it. */
static void bell_ring(shm_ctl *const *bells, int q) {
    if (!bells || q < 0) return;
    shm_ctl *c = bells[q];
    /* seq_cst increment, then the sleeper count: a sleeper that read the bell before the
     * increment is counted here; one that did not sees the new value (the futex rechecks it) */
    atomic_fetch_add_explicit(&c->bell, 1, memory_order_seq_cst);
#if defined(__linux__)
    if (atomic_load_explicit(&c->bell_waiters, memory_order_seq_cst)) futex_wake_all(&c->bell);
#endif
}

/* Waits for n <= 2 point-to-point requests, request i with rank peers[i], until the deadline; on
 * timeout cancels them. With the node's doorbells (bells, this rank `me`) it polls for spin_ns
 * and then sleeps on its own doorbell, woken when a peer posts a send to it or completes a request
 * with it (the rendezvous of a large message needs both sides' progress: each side rings the
 * other when one of its requests completes), and at the latest every BELL_BACKSTOP_NS for any
 * progress MPI needs that no ring announces (a rendezvous step of Open MPI's shared-memory
 * transport: with 100 us, 2 of 4 runs of 2 processes at load 24 took a median 376-405 us from
 * the last rank's arrival to the all-reduce's end, against 17-22 us polling). While it sleeps
 * the thread's timer slack is 1 us, its own restored after the wait (the default 50 us would
 * make every backstop 70 us). Without doorbells (ranks on several nodes, or more processes than
 * cores: ot_comm_process_waits_sleep) it polls, yielding between polls. */
#define BELL_BACKSTOP_NS 20000u
#define BELL_SLACK_NS    1000
static ot_status wait_loop(int n, MPI_Request *rq, const int *peers, shm_ctl *const *bells, int me,
                           uint64_t spin_ns, uint64_t dl, const char *what, int *slack) {
    uint64_t t0 = 0;
    int left = n;
    for (unsigned spin = 0;; spin++) {
        int idx[2], cnt = 0;
        bool sleeping = false;
        uint32_t v = 0;
        uint64_t now = ot_now_ns();
        if (spin == 0) t0 = now;
#if defined(__linux__)
        /* past the spin: announce the sleep, then read the bell, then test (a ring after the
         * read wakes the futex or fails its compare; one before it came before the test) */
        sleeping = bells && now - t0 >= spin_ns;
        if (sleeping && *slack < 0) {
            *slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
            if (*slack >= 0) prctl(PR_SET_TIMERSLACK, BELL_SLACK_NS, 0, 0, 0);
        }
        if (sleeping) {
            atomic_fetch_add_explicit(&bells[me]->bell_waiters, 1, memory_order_seq_cst);
            v = atomic_load_explicit(&bells[me]->bell, memory_order_seq_cst);
        }
#endif
        int rc = MPI_Testsome(n, rq, &cnt, idx, MPI_STATUSES_IGNORE);
        if (rc == MPI_SUCCESS && cnt != MPI_UNDEFINED) {
            for (int i = 0; i < cnt; i++) bell_ring(bells, peers[idx[i]]);
            left -= cnt;
        }
        bool wait_more = rc == MPI_SUCCESS && left > 0 && now <= dl;
#if defined(__linux__)
        if (sleeping) {
            if (wait_more && cnt < 1)
                futex_wait(&bells[me]->bell, v,
                           dl - now < BELL_BACKSTOP_NS ? dl - now : BELL_BACKSTOP_NS);
            atomic_fetch_sub_explicit(&bells[me]->bell_waiters, 1, memory_order_seq_cst);
        }
#endif
        if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
        if (left <= 0) return OT_OK;
        if (now > dl) {
            for (int i = 0; i < n; i++)
                if (rq[i] != MPI_REQUEST_NULL) {
                    MPI_Cancel(&rq[i]);
                    MPI_Request_free(&rq[i]);
                }
            return ot_error(OT_ERR_TIMEOUT, "mpi: %s: deadline passed", what);
        }
        if (!bells && spin > 4096) sched_yield();
    }
}

static ot_status wait_all(int n, MPI_Request *rq, const int *peers, shm_ctl *const *bells, int me,
                          uint64_t spin_ns, uint64_t dl, const char *what) {
    int slack = -1; /* the thread's own timer slack, while the wait has set its own */
    ot_status st = wait_loop(n, rq, peers, bells, me, spin_ns, dl, what, &slack);
#if defined(__linux__)
    if (slack >= 0) prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
#endif
    return st;
}

/* A non-blocking collective may be neither cancelled nor freed while active (MPI 3.1, 5.12), so
 * one whose deadline passed is kept here and completed later (when the late members arrive) or
 * abandoned when its communicator is freed. */
#define MAX_PENDING 16
typedef struct pending_set {
    MPI_Request rq[MAX_PENDING];
    int n;
} pending_set;

static void pending_reap(pending_set *p) {
    for (int i = 0; i < p->n;) {
        int done = 0;
        if (MPI_Test(&p->rq[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done)
            p->rq[i] = p->rq[--p->n];
        else
            i++;
    }
}

static ot_status wait_coll(pending_set *p, MPI_Request *rq, uint64_t dl, const char *what) {
    pending_reap(p);
    for (unsigned spin = 0;; spin++) {
        int done = 0;
        int rc = MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
        if (done) return OT_OK;
        if (ot_now_ns() > dl) {
            if (p->n < MAX_PENDING) p->rq[p->n++] = *rq;
            return ot_error(OT_ERR_TIMEOUT, "mpi: %s: deadline passed", what);
        }
        if (spin > 4096) sched_yield();
    }
}

static void pending_drain(pending_set *p, uint64_t dl) {
    while (p->n && ot_now_ns() < dl) {
        pending_reap(p);
        sched_yield();
    }
}

/* ---- the transport -------------------------------------------------------------------------- */

typedef struct mpictx {
    MPI_Comm comm;
    int rank, size;
    bool aborted;
    char why[256];
    void *stage; /* receive staging of sendrecv_reduce: grown, touched once, reused */
    size_t stage_cap;
    pending_set pending;
    shm_ctl *const *bells; /* the node's doorbells (NULL: ranks on several nodes) */
    uint64_t spin_ns;      /* a wait polls this long before it sleeps on its doorbell */
} mpictx;

static ot_status grow_touched(void **buf, size_t *cap, size_t bytes, const char *what) {
    if (*cap >= bytes && *buf) return OT_OK;
    size_t nc = *cap ? *cap : 1u << 16;
    while (nc < bytes) nc *= 2;
    void *p = ot_aligned_alloc(64, nc);
    if (!p) return ot_error(OT_ERR_OUT_OF_MEMORY, "mpi: %s of %zu bytes", what, nc);
    memset(p, 0, nc); /* fault every page in now, never inside a collective */
    ot_aligned_free(*buf);
    *buf = p;
    *cap = nc;
    return OT_OK;
}

static ot_status mpi_sendrecv(void *ctx, int to, const void *sbuf, size_t sbytes, int from,
                              void *rbuf, size_t rbytes, uint64_t dl) {
    mpictx *x = ctx;
    if (x->aborted)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "mpi: transport aborted (%s)", x->why);
    /* split into messages of at most MAX_MSG bytes; a zero-byte message is still one message */
    size_t ns = to >= 0 ? (sbytes + MAX_MSG - 1) / MAX_MSG : 0;
    size_t nr = from >= 0 ? (rbytes + MAX_MSG - 1) / MAX_MSG : 0;
    if (to >= 0 && ns == 0) ns = 1;
    if (from >= 0 && nr == 0) nr = 1;
    size_t np = ns > nr ? ns : nr;
    for (size_t j = 0; j < np; j++) {
        MPI_Request rq[2];
        int n = 0;
        if (j < nr) {
            size_t off = j * MAX_MSG, len = rbytes - off < MAX_MSG ? rbytes - off : MAX_MSG;
            if (rbytes == 0) off = len = 0;
            MPI_TRY(
                MPI_Irecv((char *)rbuf + off, (int)len, MPI_BYTE, from, TAG_P2P, x->comm, &rq[n++]),
                "MPI_Irecv");
        }
        if (j < ns) {
            size_t off = j * MAX_MSG, len = sbytes - off < MAX_MSG ? sbytes - off : MAX_MSG;
            if (sbytes == 0) off = len = 0;
            int rc = MPI_Isend((const char *)sbuf + off, (int)len, MPI_BYTE, to, TAG_P2P, x->comm,
                               &rq[n++]);
            if (rc != MPI_SUCCESS) {
                if (n == 2) {
                    MPI_Cancel(&rq[0]);
                    MPI_Request_free(&rq[0]);
                }
                return mpi_fail(rc, "MPI_Isend");
            }
        }
        int peers[2] = {j < nr ? from : to, to};
        if (j < ns) bell_ring(x->bells, to);
        OT_CHECK(wait_all(n, rq, peers, x->bells, x->rank, x->spin_ns, dl, "sendrecv"));
    }
    return OT_OK;
}

static ot_status mpi_sendrecv_reduce(void *ctx, int to, const void *sbuf, size_t scount, int from,
                                     void *rbuf, size_t rcount, ot_dtype dt, ot_redop op,
                                     uint64_t dl) {
    mpictx *x = ctx;
    size_t esz = ot_dtype_size(dt);
    if (from >= 0) OT_CHECK(grow_touched(&x->stage, &x->stage_cap, rcount * esz, "staging"));
    OT_CHECK(mpi_sendrecv(ctx, to, sbuf, scount * esz, from, from >= 0 ? x->stage : NULL,
                          from >= 0 ? rcount * esz : 0, dl));
    if (from >= 0) ot_pod_combine(rbuf, x->stage, rcount, dt, op);
    return OT_OK;
}

static ot_status mpi_barrier_dl(pending_set *p, MPI_Comm comm, uint64_t dl) {
    MPI_Request rq;
    MPI_TRY(MPI_Ibarrier(comm, &rq), "MPI_Ibarrier");
    return wait_coll(p, &rq, dl, "barrier");
}

static ot_status mpi_tbarrier(void *ctx, uint64_t dl) {
    mpictx *x = ctx;
    if (x->aborted)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "mpi: transport aborted (%s)", x->why);
    return mpi_barrier_dl(&x->pending, x->comm, dl);
}

/* A failure seen here: this rank stops using the transport. Open MPI gives no way to interrupt
 * the peers' pending receives from outside; they fail at their own deadline (or the whole job
 * ends when a process died), which the launcher turns into a restart. */
static void mpi_abort(void *ctx, ot_status why, const char *msg) {
    mpictx *x = ctx;
    x->aborted = true;
    snprintf(x->why, sizeof x->why, "%s: %s", ot_status_str(why), msg ? msg : "");
}

static void mpi_ctx_free(void *ctx) {
    mpictx *x = ctx;
    if (!x) return;
    pending_drain(&x->pending, ot_now_ns() + 1000000000ull);
    if (x->comm != MPI_COMM_NULL) MPI_Comm_free(&x->comm);
    ot_aligned_free(x->stage);
    ot_free(x);
}

static const ot_comm_vtable mpi_vt = {"mpi",        mpi_sendrecv, mpi_sendrecv_reduce, NULL,
                                      mpi_tbarrier, mpi_abort,    mpi_ctx_free};

/* ---- the job -------------------------------------------------------------------------------- */

struct ot_mpi {
    MPI_Comm world; /* dup of MPI_COMM_WORLD: native collectives, barriers, membership */
    MPI_Comm hb;    /* dup: heartbeats */
    int rank, size, K;
    bool we_init;
    int64_t timeout_ns;
    ot_comm *comm; /* processes, transport "mpi" */
    mpictx *tx;    /* comm's transport (owned by comm) */
    ot_topology *topo;
    /* local devices */
    ot_local_world *lw;
    ot_comm **lcomm;
    void **lwork; /* per local device: accumulation-dtype staging */
    size_t *lwork_cap;
    void *lroot; /* local device 0: the reduced vector */
    size_t lroot_cap;
    ot_status lstatus; /* leader's MPI status, read by the others after the broadcast */
    /* native staging (f16/bf16, MEAN) */
    void *nstage;
    size_t nstage_cap;
    /* model */
    ot_cost_params p2p, native;
    /* coordinator (rank 0) */
    ot_coord *coord;
    uint64_t hb_seq;
    MPI_Request hb_req;
    uint64_t hb_buf;
    pending_set pending; /* timed-out collectives on world */
    /* the shared-memory all-reduce (every process on one node; see shm_setup) */
    bool shm_on;       /* decided collectively by ot_mpi_init: the same on every rank */
    bool shm_broken;   /* a deadline passed inside it: the other ranks' progress is unknown */
    bool shm_measured; /* calibrated as whole operations (whole[]): AUTO may pick SHM */
    /* ring .. shm, each timed as a whole all-reduce: a line up to 1 MiB, one beyond */
    ot_cost_params whole_small[OT_MPI_ALGO_COUNT], whole[OT_MPI_ALGO_COUNT];
    MPI_Comm node;        /* MPI_COMM_TYPE_SHARED: every process, ranks as in world */
    MPI_Win ctl_win;      /* one arrival counter per rank */
    struct shm_ctl **ctl; /* ctl[r]: rank r's counter */
    uint64_t shm_seq;     /* this rank's arrivals so far */
    uint64_t shm_spin_ns; /* a barrier spins this long before it starts yielding */
    MPI_Win data_win;     /* per rank: input area (one chunk), then reduced-slice area */
    bool data_on, ctl_on;
    size_t in_cap, out_cap; /* bytes per rank of the two areas */
    char **seg;             /* seg[r]: rank r's part of data_win */
};

ot_mpi_options ot_mpi_options_default(void) {
    ot_mpi_options o = {.local_devices = 1,
                        .topology = NULL,
                        .timeout_ns = DEFAULT_TIMEOUT_NS,
                        .heartbeat_fail_s = 10.0,
                        .shared_memory = true};
    return o;
}

static ot_status dup_comm(MPI_Comm from, MPI_Comm *out, const char *what) {
    *out = MPI_COMM_NULL;
    MPI_TRY(MPI_Comm_dup(from, out), what);
    int rc = MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        MPI_Comm_free(out);
        return mpi_fail(rc, "MPI_Comm_set_errhandler");
    }
    return OT_OK;
}

void ot_mpi_free(ot_mpi *m) {
    if (!m) return;
    if (m->hb_req != MPI_REQUEST_NULL) {
        MPI_Cancel(&m->hb_req);
        MPI_Request_free(&m->hb_req);
    }
    ot_comm_free(m->comm);
    for (int i = 0; m->lcomm && i < m->K; i++) ot_comm_free(m->lcomm[i]);
    ot_local_world_free(m->lw);
    for (int i = 0; m->lwork && i < m->K; i++) ot_aligned_free(m->lwork[i]);
    ot_free(m->lwork);
    ot_free(m->lwork_cap);
    ot_free(m->lcomm);
    ot_aligned_free(m->lroot);
    ot_aligned_free(m->nstage);
    ot_topology_free(m->topo);
    ot_coord_free(m->coord);
    if (m->data_on) MPI_Win_free(&m->data_win);
    if (m->ctl_on) MPI_Win_free(&m->ctl_win);
    ot_free(m->seg);
    ot_free(m->ctl);
    if (m->node != MPI_COMM_NULL) MPI_Comm_free(&m->node);
    pending_drain(&m->pending, ot_now_ns() + 1000000000ull);
    if (m->hb != MPI_COMM_NULL) MPI_Comm_free(&m->hb);
    if (m->world != MPI_COMM_NULL) MPI_Comm_free(&m->world);
    bool fin = m->we_init;
    ot_free(m);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (fin && !finalized) MPI_Finalize();
}

/* ---- shared memory: which processes share a node; the control window ------------------------ */

/* The shared-memory all-reduce runs through the window in chunks of this many bytes: every
 * chunk costs two barriers, and the window areas (P x 1.25 chunks) should stay in the caches.
 * Measured at 64 MiB on the 2-core test machine under load, the chunk sizes interleaved in one
 * run: with 2 processes 256 KiB-8 MiB within noise of each other; with 4 (oversubscribed) 2 MiB
 * took 0.84-1.05x the time of 512 KiB, 8 MiB 0.86-1.46x. */
#define SHM_CHUNK (2u << 20)

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* This process's node: host name, boot id, and the network, IPC and mount namespaces. Processes
 * that agree on all of them share memory; two network namespaces of one machine are two hosts
 * (as in the two-host test, where the host name is the same on both sides). */
static uint64_t node_identity(void) {
    uint64_t h = 1469598103934665603ull;
    char buf[256];
    memset(buf, 0, sizeof buf);
    if (gethostname(buf, sizeof buf - 1) == 0) h = fnv1a(h, buf, strlen(buf));
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        memset(buf, 0, sizeof buf);
        if (fgets(buf, sizeof buf, f)) h = fnv1a(h, buf, strlen(buf));
        fclose(f);
    }
    static const char *const ns[] = {"/proc/self/ns/net", "/proc/self/ns/ipc", "/proc/self/ns/mnt"};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        struct stat sb;
        if (stat(ns[i], &sb) == 0) {
            uint64_t v[2] = {(uint64_t)sb.st_dev, (uint64_t)sb.st_ino};
            h = fnv1a(h, v, sizeof v);
        } else {
            h = fnv1a(h, ns[i], strlen(ns[i])); /* no /proc: the host name and boot id decide */
        }
    }
    return h;
}

/* Decides, the same way on every rank, whether the shared-memory all-reduce is available, and
 * if so creates the node communicator and the control window. Collective over world.
 *
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) is called only when every rank has the same node
 * identity: Open MPI 4.1 takes locality from its launcher, and where a second "host" is a
 * network namespace of the same machine reached through a launch agent, the ranks disagree
 * about who is local — the split then leaves the job's later communicator creation crashing or
 * hanging (measured with two namespaces joined by a veth pair, 2 ranks in each). The identities
 * are all-gathered first, so every rank takes the same branch. */
static ot_status shm_setup(ot_mpi *m, bool want) {
    uint64_t mine[2] = {node_identity(), want ? 1u : 0u};
    uint64_t *all = ot_calloc(2 * (size_t)m->size, sizeof *all);
    if (!all) return ot_error(OT_ERR_OUT_OF_MEMORY, "mpi init: out of memory");
    /* with the deadline: a rank that failed earlier in ot_mpi_init never arrives */
    uint64_t dl = ot_now_ns() + (uint64_t)m->timeout_ns;
    MPI_Request rq;
    int rc = MPI_Iallgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, m->world, &rq);
    ot_status st = rc == MPI_SUCCESS ? wait_coll(&m->pending, &rq, dl, "node identity")
                                     : mpi_fail(rc, "MPI_Iallgather node identity");
    bool one = st == OT_OK;
    for (int r = 0; one && r < m->size; r++) one = all[2 * r] == all[0] && all[2 * r + 1];
    if (st != OT_OK) return st; /* `all` is left to the pending collective (never freed) */
    ot_free(all);
    if (!one) return OT_OK; /* several nodes, or turned off on some rank */
    MPI_TRY(MPI_Comm_split_type(m->world, MPI_COMM_TYPE_SHARED, m->rank, MPI_INFO_NULL, &m->node),
            "MPI_Comm_split_type");
    MPI_Comm_set_errhandler(m->node, MPI_ERRORS_RETURN);
    int nsz = 0, nr = -1, ok, all_ok = 0;
    MPI_Comm_size(m->node, &nsz);
    MPI_Comm_rank(m->node, &nr);
    ok = nsz == m->size && nr == m->rank; /* MPI agrees: one node, ranks as in world */
    /* every rank got here through the blocking split: no deadline needed */
    MPI_TRY(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, m->world), "MPI_Allreduce");
    if (!all_ok) {
        MPI_Comm_free(&m->node);
        return OT_OK;
    }
    shm_ctl *c = NULL;
    MPI_TRY(MPI_Win_allocate_shared((MPI_Aint)sizeof(shm_ctl), 1, MPI_INFO_NULL, m->node, &c,
                                    &m->ctl_win),
            "MPI_Win_allocate_shared");
    m->ctl_on = true;
    MPI_Win_set_errhandler(m->ctl_win, MPI_ERRORS_RETURN);
    m->ctl = ot_calloc((size_t)m->size, sizeof *m->ctl);
    m->seg = ot_calloc((size_t)m->size, sizeof *m->seg);
    if (!m->ctl || !m->seg) return ot_error(OT_ERR_OUT_OF_MEMORY, "mpi init: out of memory");
    for (int q = 0; q < m->size; q++) {
        MPI_Aint sz;
        int du;
        MPI_TRY(MPI_Win_shared_query(m->ctl_win, q, &sz, &du, &m->ctl[q]), "MPI_Win_shared_query");
    }
    atomic_store_explicit(&c->seq, 0, memory_order_relaxed);
    atomic_store_explicit(&c->waiters, 0, memory_order_relaxed);
    atomic_store_explicit(&c->bell, 0, memory_order_relaxed);
    atomic_store_explicit(&c->bell_waiters, 0, memory_order_relaxed);
    /* the data window, allocated and faulted in once, here: per rank an input area of one chunk
     * and an output area of a 1/P slice of it */
    m->in_cap = SHM_CHUNK;
    m->out_cap = ((m->in_cap / (size_t)m->size + 64) + 4095) & ~(size_t)4095;
    char *base = NULL;
    MPI_TRY(MPI_Win_allocate_shared((MPI_Aint)(m->in_cap + m->out_cap), 1, MPI_INFO_NULL, m->node,
                                    &base, &m->data_win),
            "MPI_Win_allocate_shared");
    m->data_on = true;
    MPI_Win_set_errhandler(m->data_win, MPI_ERRORS_RETURN);
    for (int q = 0; q < m->size; q++) {
        MPI_Aint sz;
        int du;
        MPI_TRY(MPI_Win_shared_query(m->data_win, q, &sz, &du, &m->seg[q]), "MPI_Win_shared_query");
    }
    memset(base, 0, m->in_cap + m->out_cap);
    /* nobody reads a counter or a page before its owner has set it */
    OT_CHECK(mpi_barrier_dl(&m->pending, m->world, ot_now_ns() + (uint64_t)m->timeout_ns));
    unsigned sink = 0; /* every other rank's pages mapped into this process too */
    for (int q = 0; q < m->size; q++)
        for (size_t off = 0; off < m->in_cap + m->out_cap; off += 4096)
            sink += (unsigned)((volatile char *)m->seg[q])[off];
    (void)sink;
    /* a process per core or fewer: waiting ranks spin up to 100 us before sleeping (at 1 MiB
     * with 2 processes sleeping at once cost 2x); more processes than cores: they sleep at once
     * (the rank being waited for needs the core; spinning 200 us cost 2-6x with 4 on 2) */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    m->shm_spin_ns = ncpu > 0 && m->size <= ncpu ? 100000 : 0;
    m->shm_on = true;
    return OT_OK;
}

ot_status ot_mpi_init(const ot_mpi_options *o, ot_mpi **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi init: NULL output");
    *out = NULL;
    ot_mpi_options d = o ? *o : ot_mpi_options_default();
    if (d.local_devices < 1 || d.local_devices > 256)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi init: local_devices %d outside 1..256",
                        d.local_devices);
    int inited = 0;
    MPI_TRY(MPI_Initialized(&inited), "MPI_Initialized");
    bool we_init = false;
    if (!inited) {
        int provided = 0;
        MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
        we_init = true;
        if (provided < MPI_THREAD_SERIALIZED) {
            MPI_Finalize();
            return ot_error(OT_ERR_FAILED_PRECONDITION,
                            "mpi init: the MPI library gives thread level %d, need "
                            "MPI_THREAD_SERIALIZED",
                            provided);
        }
    }
    ot_status st;
    ot_mpi *m = ot_calloc(1, sizeof *m);
    if (!m) {
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "mpi init: out of memory");
        if (we_init) MPI_Finalize();
        return st;
    }
    m->world = m->hb = m->node = MPI_COMM_NULL;
    m->hb_req = MPI_REQUEST_NULL;
    m->we_init = we_init;
    m->K = d.local_devices;
    m->timeout_ns = d.timeout_ns > 0 ? d.timeout_ns : DEFAULT_TIMEOUT_NS;
    m->p2p = m->native = (ot_cost_params){.alpha_us = 5.0, .gbytes_per_s = 5.0};
    OT_CHECK_GOTO(dup_comm(MPI_COMM_WORLD, &m->world, "MPI_Comm_dup"), st, fail);
    OT_CHECK_GOTO(dup_comm(MPI_COMM_WORLD, &m->hb, "MPI_Comm_dup"), st, fail);
    MPI_Comm_rank(m->world, &m->rank);
    MPI_Comm_size(m->world, &m->size);

    /* the process transport */
    mpictx *x = ot_calloc(1, sizeof *x);
    if (!x) {
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "mpi init: out of memory");
        goto fail;
    }
    x->rank = m->rank, x->size = m->size;
    x->comm = MPI_COMM_NULL;
    st = dup_comm(MPI_COMM_WORLD, &x->comm, "MPI_Comm_dup");
    if (st != OT_OK) {
        ot_free(x);
        goto fail;
    }
    OT_CHECK_GOTO(ot_comm_create(&mpi_vt, x, m->rank, m->size, &m->comm), st, fail);
    m->tx = x;
    ot_comm_set_timeout(m->comm, m->timeout_ns);
    ot_comm_set_cost_params(m->comm, m->p2p);

    /* the pod topology over P*K devices */
    int ndev = m->size * m->K;
    char name[64];
    if (d.topology)
        snprintf(name, sizeof name, "%s", d.topology);
    else
        snprintf(name, sizeof name, "ring-%d", ndev);
    OT_CHECK_GOTO(ot_topology_preset(name, &m->topo), st, fail);
    if (ot_topology_size(m->topo) != ndev) {
        st = ot_error(OT_ERR_SHAPE_MISMATCH,
                      "mpi init: topology %s has %d devices, the job has %d processes x %d local "
                      "devices = %d",
                      name, ot_topology_size(m->topo), m->size, m->K, ndev);
        goto fail;
    }

    /* local devices */
    m->lcomm = ot_calloc((size_t)m->K, sizeof *m->lcomm);
    m->lwork = ot_calloc((size_t)m->K, sizeof *m->lwork);
    m->lwork_cap = ot_calloc((size_t)m->K, sizeof *m->lwork_cap);
    if (!m->lcomm || !m->lwork || !m->lwork_cap) {
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "mpi init: out of memory");
        goto fail;
    }
    OT_CHECK_GOTO(ot_local_world_create(m->K, &m->lw), st, fail);
    for (int i = 0; i < m->K; i++) {
        OT_CHECK_GOTO(ot_local_world_comm(m->lw, i, &m->lcomm[i]), st, fail);
        ot_comm_set_timeout(m->lcomm[i], m->timeout_ns);
    }

    /* rank 0 coordinates: every global device registered, failure by timeout */
    if (m->rank == 0) {
        ot_coord_options co = ot_coord_options_default();
        co.detector = OT_DETECT_TIMEOUT;
        co.timeout_ns = (uint64_t)(d.heartbeat_fail_s > 0 ? d.heartbeat_fail_s * 1e9 : 10e9);
        OT_CHECK_GOTO(ot_coord_create(&co, &m->coord), st, fail);
        for (int r = 0; r < m->size; r++)
            for (int l = 0; l < m->K; l++) {
                char dn[64];
                int id;
                snprintf(dn, sizeof dn, "rank%d:dev%d", r, l);
                OT_CHECK_GOTO(ot_coord_register(m->coord, dn, &id), st, fail);
            }
    }
    /* last: every step before can fail on one rank alone (rank 0's coordinator), and freeing
     * the windows is collective */
    OT_CHECK_GOTO(shm_setup(m, d.shared_memory), st, fail);
    /* one node: waits sleep on the doorbells when the processes fit the cores; spinning first
     * up to 100 us (a message usually comes within it, as with the shared-memory barrier) */
    if (m->shm_on && ot_comm_process_waits_sleep(m->size, (int)sysconf(_SC_NPROCESSORS_ONLN))) {
        x->bells = m->ctl;
        x->spin_ns = 100000;
    }
    OT_CHECK_GOTO(mpi_barrier_dl(&m->pending, m->world, ot_now_ns() + (uint64_t)m->timeout_ns), st,
                  fail);
    *out = m;
    return OT_OK;
fail:
    m->we_init = false; /* keep MPI up so the caller can report */
    ot_mpi_free(m);
    return st;
}

int ot_mpi_rank(const ot_mpi *m) {
    return m->rank;
}
int ot_mpi_size(const ot_mpi *m) {
    return m->size;
}
int ot_mpi_local_devices(const ot_mpi *m) {
    return m->K;
}
int ot_mpi_global_device(const ot_mpi *m, int rank, int local) {
    if (rank < 0 || rank >= m->size || local < 0 || local >= m->K) return -1;
    return rank * m->K + local;
}
int ot_mpi_device_process(const ot_mpi *m, int device) {
    if (device < 0 || device >= m->size * m->K) return -1;
    return device / m->K;
}
const ot_topology *ot_mpi_topology(const ot_mpi *m) {
    return m->topo;
}
ot_comm *ot_mpi_comm(ot_mpi *m) {
    return m->comm;
}
ot_comm *ot_mpi_local_comm(ot_mpi *m, int local) {
    return local >= 0 && local < m->K ? m->lcomm[local] : NULL;
}
bool ot_mpi_shared_memory(const ot_mpi *m) {
    return m && m->shm_on;
}
void ot_mpi_abort_job(ot_mpi *m, int code) {
    MPI_Abort(m ? m->world : MPI_COMM_WORLD, code);
    abort(); /* MPI_Abort does not return; if it ever did, do not go on */
}

ot_coord *ot_mpi_coord(ot_mpi *m) {
    return m->coord;
}

/* ---- algorithms and the model --------------------------------------------------------------- */

static const char *const algo_names[] = {"auto", "native", "ring", "halving_doubling",
                                         "tree", "shm"};
_Static_assert(sizeof algo_names / sizeof *algo_names == OT_MPI_ALGO_COUNT, "algo names");

const char *ot_mpi_algo_name(ot_mpi_algo a) {
    return a >= 0 && a < OT_MPI_ALGO_COUNT ? algo_names[a] : "?";
}
int ot_mpi_algo_from_name(const char *s) {
    for (int i = 0; s && i < OT_MPI_ALGO_COUNT; i++)
        if (!strcmp(algo_names[i], s)) return i;
    return -1;
}

ot_mpi_coll_options ot_mpi_coll_options_default(void) {
    ot_mpi_coll_options o = {
        .algo = OT_MPI_ALGO_AUTO, .timeout_ns = 0, .chunk_bytes = 0, .allow_unordered = false};
    return o;
}

static MPI_Datatype mpi_dtype(ot_dtype dt) {
    switch (dt) {
    case OT_F32: return MPI_FLOAT;
    case OT_F64: return MPI_DOUBLE;
    case OT_S32: return MPI_INT32_T;
    case OT_S64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(ot_redop op) {
    switch (op) {
    case OT_REDOP_SUM:
    case OT_REDOP_MEAN: return MPI_SUM;
    case OT_REDOP_PROD: return MPI_PROD;
    case OT_REDOP_MAX: return MPI_MAX;
    default: return MPI_MIN;
    }
}

static ot_coll_algo coll_algo(ot_mpi_algo a) {
    return a == OT_MPI_ALGO_HALVING_DOUBLING ? OT_ALGO_HALVING_DOUBLING
           : a == OT_MPI_ALGO_TREE           ? OT_ALGO_TREE
                                             : OT_ALGO_RING;
}

double ot_mpi_cost_us(const ot_mpi *m, ot_mpi_algo a, size_t count, ot_dtype dt) {
    if (!ot_coll_dtype_supported(dt)) return -1;
    size_t bytes = count * ot_dtype_size(ot_pod_acc_dtype(dt));
    if (a == OT_MPI_ALGO_NATIVE) {
        if (m->size == 1) return 0;
        /* the fitted line of a whole MPI_Iallreduce */
        return m->native.alpha_us + (double)bytes / (m->native.gbytes_per_s * 1e3);
    }
    if (a == OT_MPI_ALGO_SHM && !m->shm_on) return -1;
    if (m->shm_measured && a >= OT_MPI_ALGO_RING && a <= OT_MPI_ALGO_SHM) {
        if (m->size == 1) return 0;
        /* one node: the fitted lines of the whole all-reduce */
        const ot_cost_params *w = bytes <= (1u << 20) ? &m->whole_small[a] : &m->whole[a];
        return w->alpha_us + (double)bytes / (w->gbytes_per_s * 1e3);
    }
    if (a == OT_MPI_ALGO_SHM) /* not calibrated yet (AUTO skips it): the default line */
        return m->size == 1 ? 0 : m->p2p.alpha_us + (double)bytes / (m->p2p.gbytes_per_s * 1e3);
    if (a <= OT_MPI_ALGO_AUTO || a >= OT_MPI_ALGO_COUNT) return -1;
    return ot_coll_cost_us(m->comm, OT_COLL_ALLREDUCE, coll_algo(a), bytes);
}

ot_mpi_algo ot_mpi_choose(const ot_mpi *m, size_t count, ot_dtype dt, ot_redop op,
                          const ot_mpi_coll_options *o) {
    if (o && o->algo != OT_MPI_ALGO_AUTO) return o->algo;
    bool unordered_ok = op == OT_REDOP_MAX || op == OT_REDOP_MIN || dt == OT_S32 || dt == OT_S64 ||
                        (o && o->allow_unordered);
    ot_mpi_algo best = OT_MPI_ALGO_RING;
    double bc = -1;
    for (int a = OT_MPI_ALGO_NATIVE; a < OT_MPI_ALGO_COUNT; a++) {
        if (a == OT_MPI_ALGO_NATIVE && !unordered_ok) continue;
        if (a == OT_MPI_ALGO_SHM && !m->shm_measured) continue; /* no figures yet */
        double t = ot_mpi_cost_us(m, (ot_mpi_algo)a, count, dt);
        if (t >= 0 && (bc < 0 || t < bc)) bc = t, best = (ot_mpi_algo)a;
    }
    return best;
}

void ot_mpi_model(const ot_mpi *m, ot_cost_params *p2p, ot_cost_params *native) {
    if (p2p) *p2p = m->p2p;
    if (native) *native = m->native;
}

bool ot_mpi_model_shm(const ot_mpi *m, ot_cost_params *shm) {
    if (!m || !m->shm_measured) return false;
    if (shm) *shm = m->whole[OT_MPI_ALGO_SHM];
    return true;
}

/* Fits alpha + bytes * beta through two (bytes, us) points; keeps both positive. */
static ot_cost_params fit(double b0, double t0, double b1, double t1) {
    double beta = (t1 - t0) / (b1 - b0); /* us per byte */
    if (!(beta > 1e-9)) beta = 1e-9;
    double alpha = t0 - beta * b0;
    if (alpha < 0.1) alpha = 0.1;
    ot_cost_params p = {.alpha_us = alpha, .gbytes_per_s = 1.0 / (beta * 1e3)};
    return p;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

ot_status ot_mpi_calibrate(ot_mpi *m) {
    if (!m) return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi calibrate: NULL");
    if (m->size == 1) return OT_OK;
    if (m->shm_broken)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "mpi calibrate: an earlier shm all-reduce passed its deadline");
    /* WLARGE: beyond what the caches hold on the machines measured (at 16 MiB two ranks' ring
     * buffers still sat in the last-level cache: ring looked as fast as shm there and was picked
     * for 64 MiB, where it took twice as long); NREP_WLARGE: fewer reps there, each is long */
    enum { SMALL = 8, LARGE = 1 << 20, WLARGE = 64 << 20, NREP = 5, NREP_WLARGE = 3 };
    ot_status st = OT_OK;
    void *a = ot_aligned_alloc(64, WLARGE), *b = ot_aligned_alloc(64, WLARGE);
    if (!a || !b) {
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "mpi calibrate: out of memory");
        goto done;
    }
    memset(a, 1, WLARGE);
    memset(b, 0, WLARGE);
    int right = (m->rank + 1) % m->size, left = (m->rank - 1 + m->size) % m->size;
    const size_t sizes[2] = {SMALL, LARGE};
    double p2p[2], nat[2];
    /* The deadline bounds each rep (a peer that hangs), not the whole calibration, whose length
     * grows with the machine's load and the sanitizers. */
    uint64_t dl = 0;
    for (int s = 0; s < 2; s++) {
        double tp[NREP], tn[NREP];
        for (int r = -1; r < NREP; r++) { /* r == -1: warm-up */
            dl = ot_now_ns() + (uint64_t)m->timeout_ns;
            OT_CHECK_GOTO(mpi_barrier_dl(&m->pending, m->world, dl), st, done);
            uint64_t t0 = ot_now_ns();
            MPI_Request rq[2];
            int rc = MPI_Irecv(b, (int)sizes[s], MPI_BYTE, left, TAG_P2P, m->world, &rq[0]);
            if (rc == MPI_SUCCESS)
                rc = MPI_Isend(a, (int)sizes[s], MPI_BYTE, right, TAG_P2P, m->world, &rq[1]);
            if (rc != MPI_SUCCESS) {
                st = mpi_fail(rc, "calibrate sendrecv");
                goto done;
            }
            int peers[2] = {left, right};
            bell_ring(m->tx->bells, right);
            OT_CHECK_GOTO(
                wait_all(2, rq, peers, m->tx->bells, m->rank, m->tx->spin_ns, dl, "calibrate"), st,
                done);
            uint64_t t1 = ot_now_ns();
            OT_CHECK_GOTO(mpi_barrier_dl(&m->pending, m->world, dl), st, done);
            uint64_t t2 = ot_now_ns();
            MPI_Request ar;
            rc = MPI_Iallreduce(a, b, (int)(sizes[s] / 4 ? sizes[s] / 4 : 1), MPI_FLOAT, MPI_SUM,
                                m->world, &ar);
            if (rc != MPI_SUCCESS) {
                st = mpi_fail(rc, "calibrate MPI_Iallreduce");
                goto done;
            }
            OT_CHECK_GOTO(wait_coll(&m->pending, &ar, dl, "calibrate"), st, done);
            uint64_t t3 = ot_now_ns();
            if (r >= 0) tp[r] = (double)(t1 - t0) / 1e3, tn[r] = (double)(t3 - t2) / 1e3;
        }
        qsort(tp, NREP, sizeof *tp, cmp_double);
        qsort(tn, NREP, sizeof *tn, cmp_double);
        p2p[s] = tp[NREP / 2];
        nat[s] = tn[NREP / 2];
    }
    /* the slowest rank's figures, so every rank holds the same model */
    double v[4] = {p2p[0], p2p[1], nat[0], nat[1]}, w[4];
    int rc = MPI_Allreduce(v, w, 4, MPI_DOUBLE, MPI_MAX, m->world);
    if (rc != MPI_SUCCESS) {
        st = mpi_fail(rc, "calibrate MPI_Allreduce");
        goto done;
    }
    m->p2p = fit(SMALL, w[0], LARGE, w[1]);
    m->native = fit(SMALL, w[2], LARGE, w[3]);
    ot_comm_set_cost_params(m->comm, m->p2p);
    if (m->shm_on) { /* the same on every rank */
        /* One node: the point-to-point line leaves out the staging copies and the combine,
         * which cost as much as the transfers there, so each of our algorithms is timed as a
         * whole all-reduce at three sizes, interleaved rep by rep: 8 B, 1 MiB and 64 MiB, the
         * last beyond the caches (a line through a cache-resident size alone extrapolates badly:
         * at 4 MiB the point-to-point algorithms looked as fast as shm, at 64 MiB they took
         * twice as long). Two lines per algorithm: up to 1 MiB and from there on. Each rank
         * keeps its fastest rep (a shared machine only ever adds time), then the slowest rank's
         * figure counts. */
        const size_t ws[3] = {SMALL, LARGE, WLARGE};
        enum { NALG = OT_MPI_ALGO_SHM - OT_MPI_ALGO_RING + 1 };
        double best[OT_MPI_ALGO_COUNT][3], wv[3 * OT_MPI_ALGO_COUNT], ww[3 * OT_MPI_ALGO_COUNT];
        for (int s = 0; s < 3; s++) {
            for (int al = OT_MPI_ALGO_RING; al <= OT_MPI_ALGO_SHM; al++) best[al][s] = -1;
            int nrep = s == 2 ? NREP_WLARGE : NREP;
            for (int r = -1; r < nrep; r++)
                for (int j = 0; j < NALG; j++) {
                    /* each rep starts with another algorithm: none always runs first or last */
                    int al = OT_MPI_ALGO_RING + (j + r + 1) % NALG;
                    ot_mpi_coll_options o = ot_mpi_coll_options_default();
                    o.algo = (ot_mpi_algo)al;
                    dl = ot_now_ns() + (uint64_t)m->timeout_ns;
                    OT_CHECK_GOTO(mpi_barrier_dl(&m->pending, m->world, dl), st, done);
                    uint64_t t0 = ot_now_ns();
                    OT_CHECK_GOTO(ot_mpi_allreduce(m, a, b, ws[s] / 4 ? ws[s] / 4 : 1, OT_F32,
                                                   OT_REDOP_SUM, &o),
                                  st, done);
                    double t = (double)(ot_now_ns() - t0) / 1e3;
                    if (r >= 0 && (best[al][s] < 0 || t < best[al][s])) best[al][s] = t;
                }
        }
        int nv = 0;
        for (int al = OT_MPI_ALGO_RING; al <= OT_MPI_ALGO_SHM; al++)
            for (int s = 0; s < 3; s++) wv[nv++] = best[al][s];
        rc = MPI_Allreduce(wv, ww, nv, MPI_DOUBLE, MPI_MAX, m->world);
        if (rc != MPI_SUCCESS) {
            st = mpi_fail(rc, "calibrate MPI_Allreduce");
            goto done;
        }
        for (int al = OT_MPI_ALGO_RING, i = 0; al <= OT_MPI_ALGO_SHM; al++, i += 3) {
            m->whole_small[al] = fit(SMALL, ww[i], LARGE, ww[i + 1]);
            m->whole[al] = fit(LARGE, ww[i + 1], WLARGE, ww[i + 2]);
        }
        m->shm_measured = true;
    }
done:
    ot_aligned_free(a);
    ot_aligned_free(b);
    return st;
}

/* ---- all-reduce ----------------------------------------------------------------------------- */

/* ---- the shared-memory all-reduce (OT_MPI_ALGO_SHM) ----------------------------------------- */

#define SHM_TILE 4096 /* elements: 32 KiB of f64 accumulator */
#define SHM_STREAM_MIN                                                                             \
    (4u << 20) /* vectors from this size on are written with streaming stores                      \
                */

/* Every rank arrives (its counter reaches this rank's count) before any leaves; what a rank
 * stored before it (streaming stores included: the fence) is visible to every rank after it.
 * A waiting rank spins for shm_spin_ns, then sleeps on the counter it waits for (a futex on the
 * shared window; an arriving rank wakes its sleepers), so on an oversubscribed machine the core
 * goes to a rank that has work. The counters are 32-bit (the futex word) and compared modulo
 * 2^32. */
static bool shm_reached(const shm_ctl *c, uint32_t s) {
    return (int32_t)(atomic_load_explicit(&c->seq, memory_order_acquire) - s) >= 0;
}

static ot_status shm_barrier(ot_mpi *m, uint64_t dl) {
#if defined(__SSE2__)
    _mm_sfence();
#endif
    uint32_t s = (uint32_t)++m->shm_seq;
    shm_ctl *mine = m->ctl[m->rank];
    /* seq_cst store, then the waiter count: a rank that went to sleep before the store is seen
     * here, one that did not sees the store before sleeping (and the futex rechecks it) */
    atomic_store_explicit(&mine->seq, s, memory_order_seq_cst);
#if defined(__linux__)
    if (atomic_load_explicit(&mine->waiters, memory_order_seq_cst)) futex_wake_all(&mine->seq);
#endif
    for (int q = 0; q < m->size; q++) {
        if (q == m->rank) continue;
        shm_ctl *c = m->ctl[q];
        if (shm_reached(c, s)) continue;
        for (int i = 0; i < 64 && !shm_reached(c, s); i++) cpu_relax();
        uint64_t t0 = ot_now_ns();
        while (!shm_reached(c, s) && ot_now_ns() - t0 < m->shm_spin_ns)
            for (int i = 0; i < 16; i++) cpu_relax();
        while (!shm_reached(c, s)) {
            uint64_t now = ot_now_ns();
            if (now > dl) {
                m->shm_broken = true;
                return ot_error(OT_ERR_TIMEOUT,
                                "mpi shm all-reduce: deadline passed waiting for rank %d", q);
            }
#if defined(__linux__)
            atomic_fetch_add_explicit(&c->waiters, 1, memory_order_seq_cst);
            uint32_t v = atomic_load_explicit(&c->seq, memory_order_seq_cst);
            if ((int32_t)(v - s) < 0) /* sleeps until woken, or 10 ms / the deadline */
                futex_wait(&c->seq, v, dl - now < 10000000u ? dl - now : 10000000u);
            atomic_fetch_sub_explicit(&c->waiters, 1, memory_order_seq_cst);
#else
            sched_yield();
#endif
        }
    }
    return OT_OK;
}

static void shm_copy(void *dst, const void *src, size_t bytes, bool nt) {
    if (nt)
        ot_stream_copy(dst, src, bytes);
    else
        memcpy(dst, src, bytes);
}

/* dst = a + b for f32 and f64 sums (the common case: one pass instead of a copy and a combine,
 * the same result as combining b into a copy of a); false for anything else. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#endif
static bool
add2(void *dst, const void *a, const void *b, size_t n, ot_dtype dt, ot_redop op) {
    if (op != OT_REDOP_SUM) return false;
    if (dt == OT_F32) {
        float *restrict d = dst;
        const float *restrict x = a, *restrict y = b;
        for (size_t i = 0; i < n; i++) d[i] = x[i] + y[i];
        return true;
    }
    if (dt == OT_F64) {
        double *restrict d = dst;
        const double *restrict x = a, *restrict y = b;
        for (size_t i = 0; i < n; i++) d[i] = x[i] + y[i];
        return true;
    }
    return false;
}

static void shm_slice(size_t count, int P, int r, size_t *off, size_t *len) {
    size_t q = count / (size_t)P, rem = count % (size_t)P;
    *off = (size_t)r * q + ((size_t)r < rem ? (size_t)r : rem);
    *len = q + ((size_t)r < rem ? 1 : 0);
}

/* Each rank's part of the window: an input area (one chunk of the vector, dt) and an output area
 * (its reduced slice of the chunk). The vector goes through in chunks small enough that the
 * window stays in the last-level cache; per chunk:
 *   1. copy my chunk into my input area, except my own slice (only I read that: from sendbuf);
 *   2. barrier;
 *   3. reduce my slice tile by tile in rank order (rank q's values from its input area, mine
 *      from sendbuf) in the accumulation dtype, exactly as the in-process OT_ALGO_DIRECT does;
 *      write it to my output area and to recvbuf;
 *   4. barrier;
 *   5. copy every other rank's slice from its output area into recvbuf.
 * Input areas are written only between 4 and the next 2 (nobody reads them then), output areas
 * only between 2 and 4 (nobody copies out of them then), so the next chunk and the next call
 * need no further barrier. Memory traffic beyond the cache: the vector read once from sendbuf
 * and written once to recvbuf (streaming stores for large vectors). */
static ot_status shm_allreduce(ot_mpi *m, const void *sendbuf, void *recvbuf, size_t count,
                               ot_dtype dt, ot_redop op, uint64_t dl) {
    int P = m->size, me = m->rank;
    size_t esz = ot_dtype_size(dt), per = m->in_cap / esz;
    char *in = m->seg[me], *out = m->seg[me] + m->in_cap;
    bool nt = count * esz >= SHM_STREAM_MIN;
    ot_dtype adt = ot_pod_acc_dtype(dt);
    ot_redop cop = op == OT_REDOP_MEAN ? OT_REDOP_SUM : op;
    _Alignas(64) unsigned char acc[SHM_TILE * 8];
    _Alignas(64) float tmp[SHM_TILE];
    for (size_t c0 = 0; c0 < count; c0 += per) {
        size_t cn = count - c0 < per ? count - c0 : per, lo, len;
        shm_slice(cn, P, me, &lo, &len);
        const char *send = (const char *)sendbuf + c0 * esz;
        char *recv = (char *)recvbuf + c0 * esz;
        /* 1 */
        memcpy(in, send, lo * esz);
        memcpy(in + (lo + len) * esz, send + (lo + len) * esz, (cn - lo - len) * esz);
        OT_CHECK(shm_barrier(m, dl));
        /* 3 */
        for (size_t i = lo; i < lo + len; i += SHM_TILE) {
            size_t k = lo + len - i < SHM_TILE ? lo + len - i : SHM_TILE;
            /* accumulated in my output area (nobody reads it before the next barrier) unless
             * the dtype is widened */
            void *a = adt == dt ? (void *)(out + (i - lo) * esz) : (void *)acc;
            int q0 = 1;
            if (adt == dt && P > 1 &&
                add2(a, (me == 0 ? send : m->seg[0]) + i * esz,
                     (me == 1 ? send : m->seg[1]) + i * esz, k, dt, cop))
                q0 = 2; /* ranks 0 and 1 in one pass */
            else if (adt != dt)
                ot_pod_widen((float *)acc, (me == 0 ? send : m->seg[0]) + i * esz, k, dt);
            else
                memcpy(a, (me == 0 ? send : m->seg[0]) + i * esz, k * esz);
            for (int q = q0; q < P; q++) {
                const char *src = (q == me ? send : m->seg[q]) + i * esz;
                if (adt != dt) { /* f16/bf16: combined in f32 */
                    ot_pod_widen(tmp, src, k, dt);
                    ot_pod_combine(acc, tmp, k, adt, cop);
                } else {
                    ot_pod_combine(a, src, k, adt, cop);
                }
            }
            if (op == OT_REDOP_MEAN) ot_pod_divide(a, k, adt, P);
            if (adt != dt) {
                ot_pod_narrow(tmp, (const float *)acc, k, dt); /* k 16-bit values fit in tmp */
                memcpy(out + (i - lo) * esz, tmp, k * esz);
            }
            shm_copy(recv + i * esz, out + (i - lo) * esz, k * esz, nt);
        }
        OT_CHECK(shm_barrier(m, dl));
        /* 5 */
        for (int q = 0; q < P; q++) {
            size_t o, l;
            shm_slice(cn, P, q, &o, &l);
            if (q != me) shm_copy(recv + o * esz, m->seg[q] + m->in_cap, l * esz, nt);
        }
    }
#if defined(__SSE2__)
    if (nt) _mm_sfence(); /* the streaming stores are done before this call returns */
#endif
    return OT_OK;
}

static ot_status native_allreduce(ot_mpi *m, const void *sendbuf, void *recvbuf, size_t count,
                                  ot_dtype dt, ot_redop op, uint64_t dl) {
    ot_dtype adt = ot_pod_acc_dtype(dt);
    size_t aesz = ot_dtype_size(adt);
    void *w = recvbuf;
    const void *s = sendbuf;
    if (adt != dt) {
        OT_CHECK(grow_touched(&m->nstage, &m->nstage_cap, count * aesz, "native staging"));
        w = m->nstage;
        ot_pod_widen(w, sendbuf, count, dt);
        s = w;
    }
    if (count > (size_t)INT32_MAX)
        return ot_error(OT_ERR_OUT_OF_RANGE, "mpi: native all-reduce of %zu elements (max %d)",
                        count, INT32_MAX);
    MPI_Request rq;
    MPI_TRY(MPI_Iallreduce(s == w ? MPI_IN_PLACE : s, w, (int)count, mpi_dtype(adt), mpi_op(op),
                           m->world, &rq),
            "MPI_Iallreduce");
    OT_CHECK(wait_coll(&m->pending, &rq, dl, "native all-reduce"));
    if (op == OT_REDOP_MEAN) ot_pod_divide(w, count, adt, m->size);
    if (adt != dt) ot_pod_narrow(recvbuf, w, count, dt);
    return OT_OK;
}

ot_status ot_mpi_allreduce(ot_mpi *m, const void *sendbuf, void *recvbuf, size_t count, ot_dtype dt,
                           ot_redop op, const ot_mpi_coll_options *o) {
    if (!m || (count && (!sendbuf || !recvbuf)))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi allreduce: NULL argument");
    if (!ot_coll_dtype_supported(dt))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi allreduce: dtype %s is not reducible",
                        ot_dtype_name(dt));
    if (op < 0 || op >= OT_REDOP_COUNT)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi allreduce: invalid op %d", (int)op);
    if (o && (o->algo < 0 || o->algo >= OT_MPI_ALGO_COUNT))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi allreduce: invalid algorithm %d",
                        (int)o->algo);
    ot_mpi_algo a = ot_mpi_choose(m, count, dt, op, o);
    int64_t to = o && o->timeout_ns > 0 ? o->timeout_ns : m->timeout_ns;
    if (a == OT_MPI_ALGO_SHM) {
        if (!m->shm_on)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "mpi allreduce: shm needs every process on one node (same host, boot "
                            "and namespaces) and shared_memory on");
        if (count == 0) return OT_OK;
        if (m->shm_broken)
            return ot_error(OT_ERR_FAILED_PRECONDITION,
                            "mpi allreduce: an earlier shm all-reduce passed its deadline; the "
                            "shared window's state is unknown");
        if (ot_comm_aborted(m->comm))
            return ot_error(OT_ERR_FAILED_PRECONDITION, "mpi allreduce: communicator aborted");
        return shm_allreduce(m, sendbuf, recvbuf, count, dt, op, ot_now_ns() + (uint64_t)to);
    }
    if (a == OT_MPI_ALGO_NATIVE) {
        if (count == 0) return OT_OK;
        if (ot_comm_aborted(m->comm))
            return ot_error(OT_ERR_FAILED_PRECONDITION, "mpi allreduce: communicator aborted");
        return native_allreduce(m, sendbuf, recvbuf, count, dt, op, ot_now_ns() + (uint64_t)to);
    }
    ot_coll_options co = ot_coll_options_default();
    co.algo = coll_algo(a);
    co.timeout_ns = to;
    /* pipelining chunk: large enough that the per-message cost is ~5% of the transfer */
    size_t chunk = o && o->chunk_bytes
                       ? o->chunk_bytes
                       : (size_t)(20.0 * m->p2p.alpha_us * m->p2p.gbytes_per_s * 1e3);
    if (chunk < (64u << 10)) chunk = 64u << 10;
    if (chunk > (8u << 20)) chunk = 8u << 20;
    co.chunk_bytes = chunk;
    return ot_comm_allreduce(m->comm, sendbuf, recvbuf, count, dt, op, &co);
}

ot_status ot_mpi_allreduce_plain(ot_mpi *m, const void *sendbuf, void *recvbuf, size_t count,
                                 ot_dtype dt, ot_redop op) {
    if (!m || (count && (!sendbuf || !recvbuf)))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi allreduce_plain: NULL argument");
    if (mpi_dtype(dt) == MPI_DATATYPE_NULL || op == OT_REDOP_MEAN || op < 0 || op >= OT_REDOP_COUNT)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "mpi allreduce_plain: %s/%s has no MPI equivalent (f32, f64, s32, s64 "
                        "with sum, prod, max, min)",
                        ot_dtype_name(dt), ot_redop_name(op));
    if (count > (size_t)INT32_MAX)
        return ot_error(OT_ERR_OUT_OF_RANGE, "mpi allreduce_plain: %zu elements", count);
    MPI_TRY(MPI_Allreduce(sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf, recvbuf, (int)count,
                          mpi_dtype(dt), mpi_op(op), m->world),
            "MPI_Allreduce");
    return OT_OK;
}

/* ---- hierarchical --------------------------------------------------------------------------- */

ot_status ot_mpi_hier_allreduce(ot_mpi *m, int local, const void *sendbuf, void *recvbuf,
                                size_t count, ot_dtype dt, ot_redop op, int64_t timeout_ns) {
    if (!m || local < 0 || local >= m->K || (count && (!sendbuf || !recvbuf)))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi hier allreduce: bad argument");
    if (!ot_coll_dtype_supported(dt) || op < 0 || op >= OT_REDOP_COUNT)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi hier allreduce: %s/%d is not reducible",
                        ot_dtype_name(dt), (int)op);
    if (count == 0) return OT_OK;
    ot_dtype adt = ot_pod_acc_dtype(dt);
    size_t aesz = ot_dtype_size(adt), bytes = count * aesz;
    ot_redop cop = op == OT_REDOP_MEAN ? OT_REDOP_SUM : op;
    ot_coll_options lo = ot_coll_options_default();
    lo.timeout_ns = timeout_ns > 0 ? timeout_ns : m->timeout_ns;
    ot_comm *lc = m->lcomm[local];
    /* my contribution in the accumulation dtype */
    OT_CHECK(grow_touched(&m->lwork[local], &m->lwork_cap[local], bytes, "local staging"));
    void *w = m->lwork[local];
    if (adt == dt)
        memcpy(w, sendbuf, bytes);
    else
        ot_pod_widen(w, sendbuf, count, dt);
    if (local == 0) OT_CHECK(grow_touched(&m->lroot, &m->lroot_cap, bytes, "local root staging"));
    /* 1. through shared memory onto local device 0 (the others wait in the reduce until the
     *    root's buffer exists: the reduce exchanges pointers first) */
    OT_CHECK(ot_comm_reduce(lc, w, local == 0 ? m->lroot : NULL, count, adt, cop, 0, &lo));
    /* 2. across processes */
    void *res = local == 0 ? m->lroot : w;
    ot_status st = OT_OK;
    if (local == 0) {
        ot_mpi_coll_options mo = ot_mpi_coll_options_default();
        mo.timeout_ns = lo.timeout_ns;
        st = ot_mpi_allreduce(m, m->lroot, m->lroot, count, adt, cop, &mo);
        m->lstatus = st;
        if (st != OT_OK) {
            /* tell the local devices instead of leaving them in the broadcast */
            ot_local_world_fail(m->lw, 0);
            return st;
        }
    }
    /* 3. back to every local device */
    st = ot_comm_broadcast(lc, res, count, adt, 0, &lo);
    if (st != OT_OK) return st;
    if (op == OT_REDOP_MEAN) ot_pod_divide(res, count, adt, m->size * m->K);
    if (adt == dt)
        memcpy(recvbuf, res, bytes);
    else
        ot_pod_narrow(recvbuf, res, count, dt);
    return OT_OK;
}

/* ---- bootstrap ------------------------------------------------------------------------------ */

ot_status ot_mpi_barrier(ot_mpi *m, int64_t timeout_ns) {
    if (!m) return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi barrier: NULL");
    int64_t to = timeout_ns > 0 ? timeout_ns : m->timeout_ns;
    return mpi_barrier_dl(&m->pending, m->world, ot_now_ns() + (uint64_t)to);
}

static void record_heartbeat(ot_mpi *m, int rank) {
    for (int l = 0; l < m->K; l++) ot_coord_heartbeat(m->coord, rank * m->K + l);
}

ot_status ot_mpi_heartbeat(ot_mpi *m) {
    if (!m) return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi heartbeat: NULL");
    if (m->rank == 0) {
        record_heartbeat(m, 0);
        return OT_OK;
    }
    if (m->hb_req != MPI_REQUEST_NULL) { /* the previous one still in flight: skip this beat */
        int done = 0;
        MPI_TRY(MPI_Test(&m->hb_req, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (!done) return OT_OK;
    }
    m->hb_buf = ++m->hb_seq;
    MPI_TRY(MPI_Isend(&m->hb_buf, 1, MPI_UINT64_T, 0, TAG_HEARTBEAT, m->hb, &m->hb_req),
            "MPI_Isend heartbeat");
    return OT_OK;
}

ot_status ot_mpi_poll(ot_mpi *m) {
    if (!m) return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi poll: NULL");
    if (m->rank != 0) return OT_OK;
    for (;;) {
        int flag = 0;
        MPI_Status s;
        MPI_TRY(MPI_Iprobe(MPI_ANY_SOURCE, TAG_HEARTBEAT, m->hb, &flag, &s), "MPI_Iprobe");
        if (!flag) break;
        uint64_t seq;
        MPI_TRY(
            MPI_Recv(&seq, 1, MPI_UINT64_T, s.MPI_SOURCE, TAG_HEARTBEAT, m->hb, MPI_STATUS_IGNORE),
            "MPI_Recv heartbeat");
        record_heartbeat(m, s.MPI_SOURCE);
    }
    ot_coord_tick(m->coord);
    return OT_OK;
}

ot_status ot_mpi_membership(ot_mpi *m, uint64_t *epoch, bool *alive, int64_t timeout_ns) {
    if (!m) return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi membership: NULL");
    int64_t to = timeout_ns > 0 ? timeout_ns : m->timeout_ns;
    uint64_t dl = ot_now_ns() + (uint64_t)to;
    size_t n = 1 + (size_t)m->size;
    uint64_t *msg = ot_calloc(n, sizeof *msg);
    if (!msg) return ot_error(OT_ERR_OUT_OF_MEMORY, "mpi membership: out of memory");
    ot_status st = OT_OK;
    if (m->rank == 0) {
        st = ot_mpi_poll(m);
        msg[0] = ot_coord_epoch(m->coord);
        for (int r = 0; r < m->size; r++) {
            /* a process is a member when all its devices are */
            bool ok = true;
            for (int l = 0; l < m->K; l++) {
                ot_device_state s = ot_coord_state(m->coord, r * m->K + l);
                ok = ok && (s == OT_DEV_HEALTHY || s == OT_DEV_SUSPECT);
            }
            msg[1 + r] = ok;
        }
    }
    if (st == OT_OK) {
        MPI_Request rq;
        int rc = MPI_Ibcast(msg, (int)n, MPI_UINT64_T, 0, m->world, &rq);
        st = rc == MPI_SUCCESS ? wait_coll(&m->pending, &rq, dl, "membership")
                               : mpi_fail(rc, "MPI_Ibcast");
    }
    if (st == OT_OK) {
        if (epoch) *epoch = msg[0];
        for (int r = 0; alive && r < m->size; r++) alive[r] = msg[1 + r] != 0;
    }
    ot_free(msg);
    return st;
}

/* ---- internal hooks (mpi_internal.h) -------------------------------------------------------- */

MPI_Comm ot_mpi_world_comm(const ot_mpi *m) {
    return m->world;
}

ot_status ot_mpi_status(int rc, const char *what) {
    return rc == MPI_SUCCESS ? OT_OK : mpi_fail(rc, what);
}
