/* The local transport: n devices in one process, one thread each, sharing memory.
 *
 * Point-to-point is a rendezvous without intermediate copies: the sender posts (pointer, size)
 * in the (sender, receiver) slot and the receiver copies — or combines — straight out of the
 * sender's buffer, then marks the slot done; the sender returns once its message is consumed.
 * Posting never blocks, so a ring step (everyone sends right and receives from the left) cannot
 * deadlock. Each rank has one mutex and condition variable guarding what others write to it:
 * slot[s][d].{buf,bytes,posted} are written under d's mutex, slot[s][d].done under s's.
 *
 * Failures: any wait past its deadline aborts the world with TIMEOUT; ot_local_world_fail aborts
 * it with PEER_FAILED. Aborting wakes every waiter, who returns the recorded status and message. */
#include "pod_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct slot {
    const void *buf;
    size_t bytes;
    uint64_t posted; /* under the receiver's mutex */
    uint64_t taken;  /* under the receiver's mutex: the receiver is reading buf */
    uint64_t done;   /* under the sender's mutex */
} slot;

struct ot_local_world {
    int n;
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    slot *slots; /* [s * n + d] */
    atomic_int claimed;
    atomic_int aborted;
    ot_status acode; /* written once by the claimer before `aborted` is set */
    char amsg[256];
    atomic_llong *stop_after; /* fault injection; 0 = none */
    /* barrier and pointer exchange */
    pthread_mutex_t bmu;
    pthread_cond_t bcv;
    int bcount;
    uint64_t bgen;
    void **ptab;
    int touching; /* members between a pointer exchange and the closing barrier (under bmu) */
    bool *issued; /* a communicator was handed out for this rank (under bmu) */
};

typedef struct lctx {
    ot_local_world *w;
    int rank;
    bool stopped;
    bool touching;
    uint64_t xgen;      /* pointer exchanges so far */
    uint64_t *send_seq; /* [peer] */
    uint64_t *recv_seq; /* [peer] */
} lctx;

static void world_abort(ot_local_world *w, ot_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void world_abort(ot_local_world *w, ot_status code, const char *fmt, ...) {
    if (atomic_exchange(&w->claimed, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->amsg, sizeof w->amsg, fmt, ap);
        va_end(ap);
        w->acode = code;
        atomic_store(&w->aborted, 1);
    } else {
        /* another thread is recording its reason: wait until it is published */
        while (!atomic_load(&w->aborted)) sched_yield();
    }
    for (int i = 0; i < w->n; i++) {
        pthread_mutex_lock(&w->mu[i]);
        pthread_cond_broadcast(&w->cv[i]);
        pthread_mutex_unlock(&w->mu[i]);
    }
    pthread_mutex_lock(&w->bmu);
    pthread_cond_broadcast(&w->bcv);
    pthread_mutex_unlock(&w->bmu);
}

static ot_status aborted_status(ot_local_world *w) {
    return ot_error(w->acode, "%s", w->amsg);
}

/* One bounded wait on cv; returns OK to re-check the predicate, or the failure. Called with mu
 * held; returns with mu held. */
static ot_status wait_step(lctx *x, pthread_mutex_t *mu, pthread_cond_t *cv, uint64_t dl,
                           const char *what, int peer) {
    ot_local_world *w = x->w;
    if (atomic_load(&w->aborted)) return aborted_status(w);
    uint64_t now = ot_now_ns();
    if (now >= dl) {
        pthread_mutex_unlock(mu);
        if (peer >= 0)
            world_abort(w, OT_ERR_TIMEOUT, "device %d: deadline passed waiting for device %d (%s)",
                        x->rank, peer, what);
        else
            world_abort(w, OT_ERR_TIMEOUT, "device %d: deadline passed in %s", x->rank, what);
        pthread_mutex_lock(mu);
        return aborted_status(w);
    }
    struct timespec ts;
    ts.tv_sec = (time_t)(dl / 1000000000ull);
    ts.tv_nsec = (long)(dl % 1000000000ull);
    pthread_cond_timedwait(cv, mu, &ts);
    return OT_OK;
}

static ot_status check_stop(lctx *x) {
    if (x->stopped) return ot_error(OT_ERR_CANCELLED, "device %d stopped", x->rank);
    atomic_llong *s = &x->w->stop_after[x->rank];
    if (atomic_load(s) > 0 && atomic_fetch_sub(s, 1) == 1) {
        x->stopped = true;
        return ot_error(OT_ERR_CANCELLED, "device %d stopped (fault injection)", x->rank);
    }
    if (atomic_load(&x->w->aborted)) return aborted_status(x->w);
    return OT_OK;
}

/* After a failure, a posted send must not return while the receiver may still read the buffer:
 * retract it if it was not taken, else wait for the (bounded) copy to finish. */
static void settle_send(lctx *x, int to, uint64_t sseq) {
    ot_local_world *w = x->w;
    int me = x->rank, n = w->n;
    slot *sl = &w->slots[(size_t)me * n + to];
    pthread_mutex_lock(&w->mu[to]);
    bool taken = sl->taken >= sseq;
    if (!taken) sl->posted = sseq - 1;
    pthread_mutex_unlock(&w->mu[to]);
    if (!taken) return;
    pthread_mutex_lock(&w->mu[me]);
    while (sl->done < sseq) pthread_cond_wait(&w->cv[me], &w->mu[me]);
    pthread_mutex_unlock(&w->mu[me]);
}

static ot_status l_exchange(lctx *x, int to, const void *s, size_t sb, int from, void *r, size_t rb,
                            bool reduce, ot_dtype dt, ot_redop op, uint64_t dl) {
    ot_local_world *w = x->w;
    int n = w->n, me = x->rank;
    OT_CHECK(check_stop(x));
    if (to >= n || from >= n || to == me || from == me)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "local transport: bad peer (to %d, from %d)", to,
                        from);
    uint64_t sseq = 0;
    if (to >= 0) {
        sseq = ++x->send_seq[to];
        slot *sl = &w->slots[(size_t)me * n + to];
        pthread_mutex_lock(&w->mu[to]);
        sl->buf = s;
        sl->bytes = sb;
        sl->posted = sseq;
        pthread_cond_broadcast(&w->cv[to]);
        pthread_mutex_unlock(&w->mu[to]);
    }
    if (from >= 0) {
        uint64_t rseq = ++x->recv_seq[from];
        slot *sl = &w->slots[(size_t)from * n + me];
        pthread_mutex_lock(&w->mu[me]);
        ot_status st = OT_OK;
        while (st == OT_OK && sl->posted < rseq)
            st = wait_step(x, &w->mu[me], &w->cv[me], dl, "receive", from);
        const void *src = sl->buf;
        size_t bytes = sl->bytes;
        /* from here the sender may not retract: settle_send waits for `done` instead */
        if (st == OT_OK && bytes == rb) sl->taken = rseq;
        pthread_mutex_unlock(&w->mu[me]);
        if (st == OT_OK && bytes != rb) {
            world_abort(w, OT_ERR_INTERNAL,
                        "device %d expected %zu bytes from device %d, got %zu "
                        "(members disagree on the collective)",
                        me, rb, from, bytes);
            st = aborted_status(w);
        }
        if (st != OT_OK) {
            /* the send posted above may be in a peer's hands: never return before it settles */
            if (to >= 0) settle_send(x, to, sseq);
            return st;
        }
        if (reduce)
            ot_pod_combine(r, src, rb / ot_dtype_size(dt), dt, op);
        else if (rb)
            memcpy(r, src, rb);
        pthread_mutex_lock(&w->mu[from]);
        sl->done = rseq;
        pthread_cond_broadcast(&w->cv[from]);
        pthread_mutex_unlock(&w->mu[from]);
    }
    if (to >= 0) {
        slot *sl = &w->slots[(size_t)me * n + to];
        pthread_mutex_lock(&w->mu[me]);
        ot_status st = OT_OK;
        while (st == OT_OK && sl->done < sseq)
            st = wait_step(x, &w->mu[me], &w->cv[me], dl, "send completion", to);
        pthread_mutex_unlock(&w->mu[me]);
        if (st != OT_OK) {
            settle_send(x, to, sseq);
            return st;
        }
    }
    return OT_OK;
}

static ot_status l_sendrecv(void *ctx, int to, const void *s, size_t sb, int from, void *r,
                            size_t rb, uint64_t dl) {
    return l_exchange(ctx, to, s, sb, from, r, rb, false, OT_U8, OT_REDOP_SUM, dl);
}

static ot_status l_sendrecv_reduce(void *ctx, int to, const void *s, size_t sc, int from, void *r,
                                   size_t rc, ot_dtype dt, ot_redop op, uint64_t dl) {
    size_t esz = ot_dtype_size(dt);
    return l_exchange(ctx, to, s, sc * esz, from, r, rc * esz, true, dt, op, dl);
}

/* Leaving the phase in which this member reads and writes peers' memory directly. */
static void untouch(lctx *x) {
    if (!x->touching) return;
    ot_local_world *w = x->w;
    pthread_mutex_lock(&w->bmu);
    if (--w->touching == 0) pthread_cond_broadcast(&w->bcv);
    pthread_mutex_unlock(&w->bmu);
    x->touching = false;
}

/* After a failed barrier: nobody returns (and frees its buffers) while a peer may still be
 * copying into or out of them; those copies never wait, so this is bounded. */
static void drain_touching(ot_local_world *w) {
    pthread_mutex_lock(&w->bmu);
    while (w->touching > 0) pthread_cond_wait(&w->bcv, &w->bmu);
    pthread_mutex_unlock(&w->bmu);
}

static ot_status barrier_core(lctx *x, uint64_t dl) {
    ot_local_world *w = x->w;
    ot_status st = check_stop(x);
    if (st == OT_OK) {
        pthread_mutex_lock(&w->bmu);
        uint64_t g = w->bgen;
        if (++w->bcount == w->n) {
            w->bcount = 0;
            w->bgen++;
            pthread_cond_broadcast(&w->bcv);
        } else {
            while (st == OT_OK && w->bgen == g)
                st = wait_step(x, &w->bmu, &w->bcv, dl, "barrier", -1);
        }
        pthread_mutex_unlock(&w->bmu);
    }
    if (st != OT_OK) {
        untouch(x);
        if (!x->stopped) drain_touching(w);
    }
    return st;
}

static ot_status l_barrier(void *ctx, uint64_t dl) {
    lctx *x = ctx;
    untouch(x);
    return barrier_core(x, dl);
}

/* Publish, barrier, copy. Tables alternate by exchange parity: a member can start exchange
 * g+1 (writing the other table) while slower ones still copy table g, and cannot reach g+2 before
 * everyone has arrived at g+1, i.e. finished copying g. */
static ot_status l_exchange_ptrs(void *ctx, void *mine, void **all, uint64_t dl) {
    lctx *x = ctx;
    ot_local_world *w = x->w;
    untouch(x);
    void **tab = w->ptab + (size_t)(x->xgen++ & 1) * (size_t)w->n;
    pthread_mutex_lock(&w->bmu);
    tab[x->rank] = mine;
    w->touching++; /* before the barrier, so nobody past it can miss this member */
    pthread_mutex_unlock(&w->bmu);
    x->touching = true;
    OT_CHECK(barrier_core(x, dl)); /* a failure untouches and drains */
    pthread_mutex_lock(&w->bmu);
    memcpy(all, tab, sizeof(void *) * (size_t)w->n);
    pthread_mutex_unlock(&w->bmu);
    return OT_OK;
}

static void l_abort(void *ctx, ot_status why, const char *msg) {
    lctx *x = ctx;
    if (x->stopped) return; /* a crashed device tells nobody */
    world_abort(x->w, why, "%s", msg && *msg ? msg : ot_status_str(why));
}

static void l_free(void *ctx) {
    lctx *x = ctx;
    if (!x) return;
    ot_free(x->send_seq);
    ot_free(x);
}

static const ot_comm_vtable local_vt = {
    .name = "local",
    .sendrecv = l_sendrecv,
    .sendrecv_reduce = l_sendrecv_reduce,
    .exchange_ptrs = l_exchange_ptrs,
    .barrier = l_barrier,
    .abort = l_abort,
    .free = l_free,
};

ot_status ot_local_world_create(int n, ot_local_world **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "local world: NULL output");
    *out = NULL;
    if (n < 1 || n > 4096)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "local world: %d devices (1..4096)", n);
    ot_local_world *w = ot_calloc(1, sizeof *w);
    if (!w) return ot_error(OT_ERR_OUT_OF_MEMORY, "local world: out of memory");
    w->n = n;
    w->mu = ot_calloc((size_t)n, sizeof *w->mu);
    w->cv = ot_calloc((size_t)n, sizeof *w->cv);
    w->slots = ot_calloc((size_t)n * (size_t)n, sizeof *w->slots);
    w->stop_after = ot_calloc((size_t)n, sizeof *w->stop_after);
    w->ptab = ot_calloc(2 * (size_t)n, sizeof(void *));
    w->issued = ot_calloc((size_t)n, sizeof(bool));
    if (!w->mu || !w->cv || !w->slots || !w->stop_after || !w->ptab || !w->issued) {
        ot_free(w->mu), ot_free(w->cv), ot_free(w->slots), ot_free(w->stop_after);
        ot_free(w->ptab), ot_free(w->issued), ot_free(w);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "local world: out of memory");
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (int i = 0; i < n; i++) {
        pthread_mutex_init(&w->mu[i], NULL);
        pthread_cond_init(&w->cv[i], &ca);
        atomic_init(&w->stop_after[i], 0);
    }
    pthread_mutex_init(&w->bmu, NULL);
    pthread_cond_init(&w->bcv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&w->claimed, 0);
    atomic_init(&w->aborted, 0);
    *out = w;
    return OT_OK;
}

void ot_local_world_free(ot_local_world *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        pthread_mutex_destroy(&w->mu[i]);
        pthread_cond_destroy(&w->cv[i]);
    }
    pthread_mutex_destroy(&w->bmu);
    pthread_cond_destroy(&w->bcv);
    ot_free(w->mu), ot_free(w->cv), ot_free(w->slots), ot_free(w->stop_after), ot_free(w->ptab);
    ot_free(w->issued);
    ot_free(w);
}

int ot_local_world_size(const ot_local_world *w) {
    return w->n;
}

ot_status ot_local_world_comm(ot_local_world *w, int rank, ot_comm **out) {
    if (!w || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "local world comm: NULL argument");
    *out = NULL;
    if (rank < 0 || rank >= w->n)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "local world comm: rank %d outside 0..%d", rank,
                        w->n - 1);
    lctx *x = ot_calloc(1, sizeof *x);
    uint64_t *seq = ot_calloc(2 * (size_t)w->n, sizeof(uint64_t));
    if (!x || !seq) {
        ot_free(x), ot_free(seq);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "local world comm: out of memory");
    }
    /* message sequence numbers live in the communicator: one per rank, ever */
    pthread_mutex_lock(&w->bmu);
    bool dup = w->issued[rank];
    w->issued[rank] = true;
    pthread_mutex_unlock(&w->bmu);
    if (dup) {
        ot_free(x), ot_free(seq);
        return ot_error(OT_ERR_ALREADY_EXISTS,
                        "local world comm: rank %d already has a communicator in this world", rank);
    }
    x->w = w;
    x->rank = rank;
    x->send_seq = seq;
    x->recv_seq = seq + w->n;
    ot_status st = ot_comm_create(&local_vt, x, rank, w->n, out);
    if (st != OT_OK) { /* x was released by ot_comm_create */
        pthread_mutex_lock(&w->bmu);
        w->issued[rank] = false;
        pthread_mutex_unlock(&w->bmu);
        return st;
    }
    /* Rough host figures for the cost model: a condition-variable hand-off of a few
     * microseconds, a copy at a few GB/s per thread. */
    ot_comm_set_cost_params(*out, (ot_cost_params){.alpha_us = 5.0, .gbytes_per_s = 5.0});
    return OT_OK;
}

void ot_local_world_fail(ot_local_world *w, int rank) {
    if (!w || rank < 0 || rank >= w->n) return;
    world_abort(w, OT_ERR_PEER_FAILED, "device %d failed", rank);
}

void ot_local_world_inject_stop(ot_local_world *w, int rank, int64_t after) {
    if (!w || rank < 0 || rank >= w->n) return;
    atomic_store(&w->stop_after[rank], after > 0 ? after : 0);
}

typedef struct runarg {
    ot_local_world *w;
    int rank;
    ot_local_fn fn;
    void *ud;
    ot_status st;
    char msg[256];
} runarg;

static void *run_main(void *p) {
    runarg *a = p;
    ot_comm *c = NULL;
    a->st = ot_local_world_comm(a->w, a->rank, &c);
    if (a->st == OT_OK) a->st = a->fn(a->ud, a->rank, c);
    if (a->st != OT_OK) snprintf(a->msg, sizeof a->msg, "%s", ot_last_error());
    ot_comm_free(c);
    return NULL;
}

ot_status ot_local_world_run(ot_local_world *w, ot_local_fn fn, void *ud, ot_status *st) {
    if (!w || !fn) return ot_error(OT_ERR_INVALID_ARGUMENT, "local run: NULL argument");
    int n = w->n;
    runarg *args = ot_calloc((size_t)n, sizeof *args);
    pthread_t *th = ot_calloc((size_t)n, sizeof *th);
    if (!args || !th) {
        ot_free(args), ot_free(th);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "local run: out of memory");
    }
    int started = 0;
    ot_status res = OT_OK;
    for (int r = 0; r < n; r++) {
        args[r] = (runarg){.w = w, .rank = r, .fn = fn, .ud = ud};
        if (pthread_create(&th[r], NULL, run_main, &args[r]) != 0) {
            res = ot_error(OT_ERR_INTERNAL, "local run: cannot start thread %d", r);
            world_abort(w, OT_ERR_CANCELLED, "local run: thread start failed");
            break;
        }
        started++;
    }
    for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++) {
        if (st) st[r] = r < started ? args[r].st : OT_ERR_CANCELLED;
        if (res == OT_OK && r < started && args[r].st != OT_OK) {
            res = args[r].st;
            ot_error(res, "device %d: %s", r, args[r].msg);
        }
    }
    ot_free(args), ot_free(th);
    return res;
}

ot_status ot_local_run(int n, ot_local_fn fn, void *ud, ot_status *st) {
    ot_local_world *w;
    OT_CHECK(ot_local_world_create(n, &w));
    ot_status s = ot_local_world_run(w, fn, ud, st);
    ot_local_world_free(w);
    return s;
}
