/* The split-phase sharded exchange (collectives.h): the reduce-scatter and all-gather of a
 * sharded update between the threads of one process, bucket by bucket, so that a member reduces
 * a bucket as soon as every member has posted it and reads a parameter range as soon as its
 * owners have published it, between pieces of its own computation.
 *
 * One mutex guards the counters (each member's posted step per bucket, reduced step, published
 * step, fetched step); the reductions and copies run outside it. A waiter sleeps on the one
 * condition variable, and a change broadcasts only while somebody waits: the members' posts in
 * the middle of their backward passes wake nobody when nobody waits. */
#include "pod_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MAX_BUCKETS 4096
#define TILE        1024

typedef struct member {
    const float *grads, *params; /* params: its block (bind) */
    uint64_t reduced;            /* every bucket of this step reduced */
    uint64_t published;          /* block of params holds this step */
    uint64_t fetched;            /* done reading the owners' blocks of this step */
    uint64_t cur;                /* the step its reduced[] flags are of */
    unsigned char *mine_done; /* [nbuckets]: reduced this member's part of bucket b in step cur */
    int left;                 /* buckets of step cur not yet reduced */
    float *work;              /* n tiles for the tree order */
    const float **in;         /* [n]: the members' tiles the order combines */
    const float **src;        /* [n]: the members' values of the bucket being reduced */
} member;

struct ot_shard_exchange {
    const ot_shard_exchange_ops *ops; /* another transport (ot_shard_exchange_wrap): all below */
    void *impl;                       /* unused */
    int n, nb;
    size_t block;
    ot_coll_algo order;
    size_t *boff, *blen;
    uint64_t *posted;   /* [rank * nb + b]; a member posts after binding, so a bucket every member
                           posted has every member's grads bound */
    const float **view; /* [rank * nb + b]: the posted values (post_view), NULL: the bound grads;
                           set under mu before the post that makes the bucket reducible */
    member *m;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int waiting;
    _Atomic uint64_t completions; /* buckets every member has posted, over all steps */
    bool inited;                  /* mu and cv exist */
    bool aborted;
    ot_status why;
    char msg[256];
};

ot_status ot_shard_exchange_create(int n, size_t block_len, int nbuckets, const size_t *bucket_off,
                                   const size_t *bucket_len, ot_coll_algo order,
                                   ot_shard_exchange **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "shard exchange: NULL output");
    *out = NULL;
    if (n < 1 || block_len < 1 || nbuckets < 0 || nbuckets > MAX_BUCKETS ||
        (nbuckets > 0 && (!bucket_off || !bucket_len)))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "shard exchange: %d members, block of %zu, %d buckets (at most %d)", n,
                        block_len, nbuckets, MAX_BUCKETS);
    if (order != OT_ALGO_TREE && order != OT_ALGO_DIRECT)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "shard exchange: order %s (tree or direct: a per-element order that does "
                        "not depend on the buckets)",
                        ot_coll_algo_name(order));
    size_t total = (size_t)n * block_len;
    for (int b = 0; b < nbuckets; b++)
        if (bucket_off[b] > total || bucket_len[b] > total - bucket_off[b])
            return ot_error(OT_ERR_OUT_OF_RANGE,
                            "shard exchange: bucket %d [%zu, +%zu) outside the %zu elements", b,
                            bucket_off[b], bucket_len[b], total);
    /* disjoint: sorted by offset, each ends before the next begins (n log n) */
    ot_shard_exchange *x = ot_calloc(1, sizeof *x);
    if (!x) return ot_error(OT_ERR_OUT_OF_MEMORY, "shard exchange");
    x->n = n, x->nb = nbuckets, x->block = block_len, x->order = order;
    x->boff = ot_malloc(((size_t)nbuckets + 1) * sizeof *x->boff);
    x->blen = ot_malloc(((size_t)nbuckets + 1) * sizeof *x->blen);
    x->posted = ot_calloc((size_t)n * (size_t)nbuckets + 1, sizeof *x->posted);
    x->view = ot_calloc((size_t)n * (size_t)nbuckets + 1, sizeof *x->view);
    x->m = ot_calloc((size_t)n, sizeof *x->m);
    bool ok = x->boff && x->blen && x->posted && x->view && x->m;
    for (int r = 0; ok && r < n; r++) {
        x->m[r].mine_done = ot_calloc((size_t)nbuckets + 1, 1);
        x->m[r].work = ot_malloc((size_t)n * TILE * sizeof(float));
        x->m[r].in = ot_malloc((size_t)n * sizeof *x->m[r].in);
        x->m[r].src = ot_malloc((size_t)n * sizeof *x->m[r].src);
        x->m[r].left = nbuckets;
        ok = x->m[r].mine_done && x->m[r].work && x->m[r].in && x->m[r].src;
    }
    if (!ok) {
        ot_shard_exchange_free(x);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "shard exchange: %d members", n);
    }
    if (nbuckets > 0) {
        memcpy(x->boff, bucket_off, (size_t)nbuckets * sizeof *x->boff);
        memcpy(x->blen, bucket_len, (size_t)nbuckets * sizeof *x->blen);
    }
    size_t *ord = ot_malloc(((size_t)nbuckets + 1) * sizeof *ord);
    if (!ord) {
        ot_shard_exchange_free(x);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "shard exchange: buckets");
    }
    /* insertion into offset order would be quadratic: sort (offset, index) pairs */
    for (int b = 0; b < nbuckets; b++)
        ord[b] = bucket_off[b] * (size_t)(MAX_BUCKETS + 1) + (size_t)b;
    for (int gap = nbuckets / 2; gap > 0; gap /= 2) /* shell sort: n log² n, no recursion */
        for (int i = gap; i < nbuckets; i++)
            for (int j = i; j >= gap && ord[j - gap] > ord[j]; j -= gap) {
                size_t v = ord[j];
                ord[j] = ord[j - gap];
                ord[j - gap] = v;
            }
    for (int i = 1; i < nbuckets; i++) {
        int a = (int)(ord[i - 1] % (MAX_BUCKETS + 1)), b = (int)(ord[i] % (MAX_BUCKETS + 1));
        if (bucket_off[a] + bucket_len[a] > bucket_off[b]) {
            ot_free(ord);
            ot_shard_exchange_free(x);
            return ot_error(OT_ERR_INVALID_ARGUMENT, "shard exchange: buckets %d and %d overlap", a,
                            b);
        }
    }
    ot_free(ord);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&x->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&x->mu, NULL);
    x->inited = true;
    *out = x;
    return OT_OK;
}

void ot_shard_exchange_free(ot_shard_exchange *x) {
    if (x && x->ops) {
        x->ops->free(x->impl);
        ot_free(x);
        return;
    }
    if (!x) return;
    if (x->m) {
        for (int r = 0; r < x->n; r++) {
            ot_free(x->m[r].mine_done);
            ot_free(x->m[r].work);
            ot_free(x->m[r].in);
            ot_free(x->m[r].src);
        }
    }
    if (x->inited) {
        pthread_mutex_destroy(&x->mu);
        pthread_cond_destroy(&x->cv);
    }
    ot_free(x->m);
    ot_free(x->boff);
    ot_free(x->blen);
    ot_free(x->posted);
    ot_free(x->view);
    ot_free(x);
}

static ot_status check_rank(const ot_shard_exchange *x, int rank, const char *what) {
    if (!x || rank < 0 || rank >= x->n)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: rank %d of %d", what, rank, x ? x->n : 0);
    return OT_OK;
}

ot_status ot_shard_exchange_bind(ot_shard_exchange *x, int rank, const float *grads,
                                 const float *block) {
    if (x && x->ops) return x->ops->bind(x->impl, rank, grads, block);
    OT_CHECK(check_rank(x, rank, "ot_shard_exchange_bind"));
    if (!grads || !block)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_shard_exchange_bind: NULL vector");
    x->m[rank].grads = grads;
    x->m[rank].params = block;
    return OT_OK;
}

static void abort_locked(ot_shard_exchange *x, ot_status why, const char *msg) {
    if (!x->aborted) {
        x->aborted = true;
        x->why = why;
        snprintf(x->msg, sizeof x->msg, "%s", msg ? msg : "aborted");
    }
    pthread_cond_broadcast(&x->cv);
}

void ot_shard_exchange_abort(ot_shard_exchange *x, ot_status why, const char *msg) {
    if (x && x->ops) {
        x->ops->abort(x->impl, why == OT_OK ? OT_ERR_PEER_FAILED : why, msg);
        return;
    }
    if (!x) return;
    pthread_mutex_lock(&x->mu);
    abort_locked(x, why == OT_OK ? OT_ERR_PEER_FAILED : why, msg);
    pthread_mutex_unlock(&x->mu);
}

/* Wakes the waiters; called only on a change that can end a wait (a bucket's last post, a
 * step's last reduction or fetch, a publish), so a step wakes them a few times per bucket rather
 * than on every member's every post. */
static void changed_locked(ot_shard_exchange *x) {
    if (x->waiting) pthread_cond_broadcast(&x->cv);
}

/* Every member's counter at `field` (an offsetof into member) is at least seq. */
static bool all_at_least(const ot_shard_exchange *x, size_t field, uint64_t seq) {
    for (int q = 0; q < x->n; q++)
        if (*(const uint64_t *)((const char *)&x->m[q] + field) < seq) return false;
    return true;
}

/* One wait with x->mu held: OK after a wake-up (the caller checks its condition again), the
 * abort's status, or TIMEOUT past the deadline (which aborts the exchange: the others would wait
 * for this member too). */
static ot_status wait_locked(ot_shard_exchange *x, int rank, uint64_t dl, const char *what) {
    if (x->aborted) return ot_error(x->why, "shard exchange (%s): %s", what, x->msg);
    if (dl && ot_now_ns() >= dl) {
        char m[128];
        snprintf(m, sizeof m, "member %d: deadline passed waiting in %s", rank, what);
        abort_locked(x, OT_ERR_TIMEOUT, m);
        return ot_error(OT_ERR_TIMEOUT, "shard exchange: %s", m);
    }
    x->waiting++;
    if (dl) {
        struct timespec ts = {(time_t)(dl / 1000000000ull), (long)(dl % 1000000000ull)};
        pthread_cond_timedwait(&x->cv, &x->mu, &ts);
    } else {
        pthread_cond_wait(&x->cv, &x->mu);
    }
    x->waiting--;
    return OT_OK;
}

ot_status ot_shard_exchange_grads_writable(ot_shard_exchange *x, int rank, uint64_t seq,
                                           uint64_t deadline_ns) {
    if (x && x->ops) return x->ops->grads_writable(x->impl, rank, seq, deadline_ns);
    OT_CHECK(check_rank(x, rank, "ot_shard_exchange_grads_writable"));
    pthread_mutex_lock(&x->mu);
    ot_status s = OT_OK;
    for (int q = 0; s == OT_OK && q < x->n; q++)
        while (s == OT_OK && x->m[q].reduced + 1 < seq)
            s = wait_locked(x, rank, deadline_ns, "the gradients' reuse");
    pthread_mutex_unlock(&x->mu);
    return s;
}

static ot_status post(ot_shard_exchange *x, int rank, uint64_t seq, int bucket, const float *data,
                      const char *fn) {
    if (x && x->ops) return x->ops->post(x->impl, rank, seq, bucket, data);
    OT_CHECK(check_rank(x, rank, fn));
    if (bucket < 0 || bucket >= x->nb)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: bucket %d of %d", fn, bucket, x->nb);
    pthread_mutex_lock(&x->mu);
    x->view[(size_t)rank * (size_t)x->nb + (size_t)bucket] = data;
    x->posted[(size_t)rank * (size_t)x->nb + (size_t)bucket] = seq;
    /* only the last member's post of a bucket can let a reduction start */
    int q = 0;
    while (q < x->n && x->posted[(size_t)q * (size_t)x->nb + (size_t)bucket] >= seq) q++;
    if (q == x->n) {
        atomic_fetch_add(&x->completions, 1);
        changed_locked(x);
    }
    pthread_mutex_unlock(&x->mu);
    return OT_OK;
}

ot_status ot_shard_exchange_post(ot_shard_exchange *x, int rank, uint64_t seq, int bucket) {
    return post(x, rank, seq, bucket, NULL, "ot_shard_exchange_post");
}

ot_status ot_shard_exchange_post_view(ot_shard_exchange *x, int rank, uint64_t seq, int bucket,
                                      const float *data) {
    if (!data) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_shard_exchange_post_view: NULL data");
    return post(x, rank, seq, bucket, data, "ot_shard_exchange_post_view");
}

/* Member rank's part of bucket b: [lo, hi) of the vector within its block, every member's grads
 * (or posted view) combined per element in the exchange's order, written to reduced. Called
 * with x->mu released; the views were read under it (src). */
static void reduce_bucket(ot_shard_exchange *x, int rank, int b, float *reduced,
                          const float *const *src) {
    size_t blo = (size_t)rank * x->block, bhi = blo + x->block;
    size_t lo = x->boff[b] > blo ? x->boff[b] : blo;
    size_t hi = x->boff[b] + x->blen[b] < bhi ? x->boff[b] + x->blen[b] : bhi;
    int n = x->n;
    float *acc = x->m[rank].work;
    const float **in = x->m[rank].in;
    for (size_t i = lo; i < hi; i += TILE) {
        size_t k = hi - i < TILE ? hi - i : TILE;
        for (int r = 0; r < n; r++) in[r] = src[r] + (i - lo);
        ot_pod_ordered_sum_f32(reduced + (i - blo), in, n, k, x->order, acc);
    }
}

ot_status ot_shard_exchange_reduce(ot_shard_exchange *x, int rank, uint64_t seq, float *reduced,
                                   bool wait, uint64_t deadline_ns, int *done) {
    if (x && x->ops) return x->ops->reduce(x->impl, rank, seq, reduced, wait, deadline_ns, done);
    OT_CHECK(check_rank(x, rank, "ot_shard_exchange_reduce"));
    if (!reduced) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_shard_exchange_reduce: NULL block");
    member *me = &x->m[rank];
    if (me->cur != seq) {
        if (me->reduced >= seq)
            return ot_error(OT_ERR_FAILED_PRECONDITION,
                            "ot_shard_exchange_reduce: step %llu after step %llu",
                            (unsigned long long)seq, (unsigned long long)me->reduced);
        me->cur = seq;
        memset(me->mine_done, 0, (size_t)x->nb);
        me->left = x->nb;
    }
    int count = 0;
    ot_status s = OT_OK;
    pthread_mutex_lock(&x->mu);
    while (s == OT_OK && me->left > 0) {
        int ready = -1;
        for (int b = 0; b < x->nb && ready < 0; b++) {
            if (me->mine_done[b]) continue;
            int q = 0;
            while (q < x->n && x->posted[(size_t)q * (size_t)x->nb + (size_t)b] >= seq) q++;
            if (q == x->n) ready = b;
        }
        if (ready < 0) {
            if (!wait) break;
            s = wait_locked(x, rank, deadline_ns, "the reduce-scatter");
            continue;
        }
        if (x->aborted) {
            s = ot_error(x->why, "shard exchange (the reduce-scatter): %s", x->msg);
            break;
        }
        /* each member's values of [lo, hi): its view of the bucket, or its bound grads */
        size_t blo = (size_t)rank * x->block, end = x->boff[ready] + x->blen[ready];
        size_t lo = x->boff[ready] > blo ? x->boff[ready] : blo;
        for (int q = 0; lo < end && lo < blo + x->block && q < x->n; q++) {
            const float *v = x->view[(size_t)q * (size_t)x->nb + (size_t)ready];
            me->src[q] = v ? v + (lo - x->boff[ready]) : x->m[q].grads + lo;
        }
        pthread_mutex_unlock(&x->mu);
        reduce_bucket(x, rank, ready, reduced, me->src);
        pthread_mutex_lock(&x->mu);
        me->mine_done[ready] = 1;
        me->left--;
        count++;
    }
    if (s == OT_OK && me->left == 0 && me->reduced < seq) {
        me->reduced = seq;
        if (all_at_least(x, offsetof(member, reduced), seq)) changed_locked(x);
    }
    pthread_mutex_unlock(&x->mu);
    if (done) *done = count;
    return s;
}

bool ot_shard_exchange_reduced(const ot_shard_exchange *x, int rank, uint64_t seq) {
    if (x && x->ops) return x->ops->reduced(x->impl, rank, seq);
    if (!x || rank < 0 || rank >= x->n) return false;
    pthread_mutex_lock((pthread_mutex_t *)&x->mu);
    bool r = x->m[rank].reduced >= seq;
    pthread_mutex_unlock((pthread_mutex_t *)&x->mu);
    return r;
}

ot_status ot_shard_exchange_params_writable(ot_shard_exchange *x, int rank, uint64_t seq,
                                            uint64_t deadline_ns) {
    if (x && x->ops) return x->ops->params_writable(x->impl, rank, seq, deadline_ns);
    OT_CHECK(check_rank(x, rank, "ot_shard_exchange_params_writable"));
    pthread_mutex_lock(&x->mu);
    ot_status s = OT_OK;
    for (int q = 0; s == OT_OK && q < x->n; q++)
        while (s == OT_OK && x->m[q].fetched + 1 < seq)
            s = wait_locked(x, rank, deadline_ns, "the parameters' reuse");
    pthread_mutex_unlock(&x->mu);
    return s;
}

ot_status ot_shard_exchange_publish(ot_shard_exchange *x, int rank, uint64_t seq) {
    if (x && x->ops) return x->ops->publish(x->impl, rank, seq);
    OT_CHECK(check_rank(x, rank, "ot_shard_exchange_publish"));
    pthread_mutex_lock(&x->mu);
    x->m[rank].published = seq;
    changed_locked(x);
    pthread_mutex_unlock(&x->mu);
    return OT_OK;
}

ot_status ot_shard_exchange_wait_published(ot_shard_exchange *x, uint64_t seq, size_t off,
                                           size_t len, uint64_t deadline_ns) {
    if (x && x->ops) return x->ops->wait_published(x->impl, seq, off, len, deadline_ns);
    if (!x) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_shard_exchange_wait_published: NULL");
    size_t total = (size_t)x->n * x->block;
    if (off > total || len > total - off)
        return ot_error(OT_ERR_OUT_OF_RANGE,
                        "ot_shard_exchange_wait_published: [%zu, +%zu) outside %zu elements", off,
                        len, total);
    if (len == 0) return OT_OK;
    int q0 = (int)(off / x->block), q1 = (int)((off + len - 1) / x->block);
    pthread_mutex_lock(&x->mu);
    ot_status s = OT_OK;
    for (int q = q0; s == OT_OK && q <= q1; q++)
        while (s == OT_OK && x->m[q].published < seq)
            s = wait_locked(x, q, deadline_ns, "the all-gather");
    if (s == OT_OK && x->aborted)
        s = ot_error(x->why, "shard exchange (the all-gather): %s", x->msg);
    pthread_mutex_unlock(&x->mu);
    return s;
}

const float *ot_shard_exchange_block(const ot_shard_exchange *x, int q) {
    if (x && x->ops) return x->ops->block(x->impl, q);
    return x && q >= 0 && q < x->n ? x->m[q].params : NULL;
}

ot_status ot_shard_exchange_fetched(ot_shard_exchange *x, int rank, uint64_t seq) {
    if (x && x->ops) return x->ops->fetched(x->impl, rank, seq);
    OT_CHECK(check_rank(x, rank, "ot_shard_exchange_fetched"));
    pthread_mutex_lock(&x->mu);
    x->m[rank].fetched = seq;
    if (all_at_least(x, offsetof(member, fetched), seq)) changed_locked(x);
    pthread_mutex_unlock(&x->mu);
    return OT_OK;
}

uint64_t ot_shard_exchange_completions(const ot_shard_exchange *x) {
    if (x && x->ops) return x->ops->completions(x->impl);
    return x ? atomic_load_explicit(&((ot_shard_exchange *)x)->completions, memory_order_acquire)
             : 0;
}

ot_status ot_shard_exchange_wrap(const ot_shard_exchange_ops *ops, void *impl,
                                 ot_shard_exchange **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_shard_exchange_wrap: NULL output");
    *out = NULL;
    if (!ops || !impl || !ops->free || !ops->bind || !ops->abort || !ops->grads_writable ||
        !ops->post || !ops->reduce || !ops->completions || !ops->reduced || !ops->params_writable ||
        !ops->publish || !ops->wait_published || !ops->block || !ops->fetched)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_shard_exchange_wrap: missing operation");
    ot_shard_exchange *x = ot_calloc(1, sizeof *x);
    if (!x) return ot_error(OT_ERR_OUT_OF_MEMORY, "ot_shard_exchange_wrap");
    x->ops = ops;
    x->impl = impl;
    *out = x;
    return OT_OK;
}
