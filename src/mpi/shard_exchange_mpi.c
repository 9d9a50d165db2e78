/* The split-phase sharded exchange across the processes of an MPI job (mpi.h,
 * ot_mpi_shard_exchange_create): member r is process r. The bookkeeping is the in-process
 * exchange's contract (collectives.h); what differs is how the other members' values arrive —
 * non-blocking point-to-point messages on a communicator of the exchange's own, into this
 * process's memory — so nobody reads another member's memory and "nobody still reads it" becomes
 * "my sends of it completed".
 *
 *   step seq:  grads_writable  my sends of seq - 1 done; the receives of every other member's
 *                              part of each bucket (my block's elements) posted into stage
 *              post(b)         my part of bucket b sent to each owner of its elements
 *              reduce          a bucket whose receives completed is combined (the same
 *                              per-element order as in one process: ot_pod_ordered_sum_f32)
 *              params_writable my block's sends of seq - 1 done
 *              publish         my block sent to every member, theirs received into `all`
 *              wait_published  those receives completed
 *
 * Every call tests what is outstanding, which is what makes MPI progress: a caller that calls
 * completions() (or reduce without waiting) between pieces of its computation overlaps the
 * transfers with it. One thread uses it at a time (MPI_THREAD_SERIALIZED). */
#include "optitpu/mpi.h"

#include "mpi_internal.h"
#include "pod/reduce_kernels.h"

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TILE        1024
#define MAX_BUCKETS 4096

typedef struct mpi_xchg {
    MPI_Comm comm;
    int me, n, nb;
    size_t block;
    ot_coll_algo order;
    size_t *boff, *blen;
    const float *grads;  /* bound: n * block */
    float *all;          /* bound block - me * block: every member's block as this process has it */
    float *stage;        /* n * block: member q's values of my block's elements at q * block */
    const float **own;   /* [nb]: my posted values of bucket b (its first element) */
    uint64_t *posted;    /* [nb]: the step my values of bucket b were posted for */
    unsigned char *done; /* [nb]: bucket b reduced in step cur */
    unsigned char *ready; /* [nb]: bucket b's receives completed in step cur (completions) */
    MPI_Request *grecv;   /* [nb * n]: member q's part of bucket b for my block */
    MPI_Request *gsend;   /* [nb * n]: my part of bucket b for member q's block */
    MPI_Request *precv;   /* [n]: member q's block */
    MPI_Request *psend;   /* [n]: my block to member q */
    uint64_t recv_seq;    /* the step whose bucket receives are posted */
    uint64_t cur, reduced, published, fetched;
    int left;
    uint64_t completions;
    float *work;
    const float **in, **src;
    bool comm_ok, aborted;
    ot_status why;
    char msg[256];
} mpi_xchg;

static ot_status mx_fail(int rc, const char *what) {
    return ot_mpi_status(rc, what);
}

/* Elements [*lo, *hi) of bucket b inside member q's block; false when none. */
static bool part(const mpi_xchg *x, int b, int q, size_t *lo, size_t *hi) {
    size_t blo = (size_t)q * x->block, bhi = blo + x->block;
    size_t l = x->boff[b] > blo ? x->boff[b] : blo;
    size_t h = x->boff[b] + x->blen[b] < bhi ? x->boff[b] + x->blen[b] : bhi;
    *lo = l, *hi = h;
    return l < h;
}

static ot_status check_me(const mpi_xchg *x, int rank, const char *what) {
    if (rank != x->me)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: rank %d, but this is process %d", what, rank,
                        x->me);
    if (x->aborted) return ot_error(x->why, "mpi shard exchange (%s): %s", what, x->msg);
    return OT_OK;
}

/* Tests n requests (progressing MPI); *all_done when every one completed. */
static ot_status test(MPI_Request *rq, int n, bool *all_done) {
    int flag = 0;
    int rc = MPI_Testall(n, rq, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return mx_fail(rc, "MPI_Testall (shard exchange)");
    *all_done = flag != 0;
    return OT_OK;
}

/* One pause of a wait: the abort or the deadline (which aborts: the others would wait for this
 * member too), else a yield (the machine may be oversubscribed). */
static ot_status pause(mpi_xchg *x, uint64_t dl, const char *what) {
    if (x->aborted) return ot_error(x->why, "mpi shard exchange (%s): %s", what, x->msg);
    if (dl && ot_now_ns() >= dl) {
        x->aborted = true;
        x->why = OT_ERR_TIMEOUT;
        snprintf(x->msg, sizeof x->msg, "process %d: deadline passed waiting in %s", x->me, what);
        return ot_error(OT_ERR_TIMEOUT, "mpi shard exchange: %s", x->msg);
    }
    sched_yield();
    return OT_OK;
}

static ot_status wait_reqs(mpi_xchg *x, MPI_Request *rq, int n, uint64_t dl, const char *what) {
    for (;;) {
        bool ok = false;
        OT_CHECK(test(rq, n, &ok));
        if (ok) return OT_OK;
        OT_CHECK(pause(x, dl, what));
    }
}

static void mx_free(void *impl) {
    mpi_xchg *x = impl;
    if (!x) return;
    int nreq = x->nb * x->n;
    MPI_Request *sets[4] = {x->grecv, x->gsend, x->precv, x->psend};
    int counts[4] = {nreq, nreq, x->n, x->n};
    if (x->comm_ok && !x->aborted) { /* a clean end: everything is matched; let it complete */
        uint64_t dl = ot_now_ns() + 10000000000ull;
        for (int i = 0; i < 4; i++)
            if (sets[i] && wait_reqs(x, sets[i], counts[i], dl, "the end") != OT_OK) break;
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; sets[i] && j < counts[i]; j++)
            if (sets[i][j] != MPI_REQUEST_NULL) {
                if (i == 0 || i == 2) MPI_Cancel(&sets[i][j]); /* a receive nobody will match */
                MPI_Request_free(&sets[i][j]);
            }
    if (x->comm_ok) MPI_Comm_free(&x->comm);
    ot_free(x->boff);
    ot_free(x->blen);
    ot_free(x->stage);
    ot_free(x->own);
    ot_free(x->posted);
    ot_free(x->done);
    ot_free(x->ready);
    ot_free(x->grecv);
    ot_free(x->gsend);
    ot_free(x->precv);
    ot_free(x->psend);
    ot_free(x->work);
    ot_free(x->in);
    ot_free(x->src);
    ot_free(x);
}

static ot_status mx_bind(void *impl, int rank, const float *grads, const float *block) {
    mpi_xchg *x = impl;
    OT_CHECK(check_me(x, rank, "ot_shard_exchange_bind"));
    if (!grads || !block)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_shard_exchange_bind: NULL vector");
    x->grads = grads;
    /* the block is this process's place in a vector of every block (the receives' target) */
    x->all = (float *)block - (size_t)x->me * x->block;
    return OT_OK;
}

static void mx_abort(void *impl, ot_status why, const char *msg) {
    mpi_xchg *x = impl;
    if (x->aborted) return;
    x->aborted = true;
    x->why = why;
    snprintf(x->msg, sizeof x->msg, "%s", msg ? msg : "aborted");
}

/* The receives of every other member's part of each bucket of step seq (my block's elements),
 * once the last step's are all consumed. */
static ot_status post_receives(mpi_xchg *x, uint64_t seq) {
    if (x->recv_seq >= seq) return OT_OK;
    if (x->recv_seq > 0 && x->reduced < x->recv_seq)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "mpi shard exchange: step %llu before step %llu was reduced",
                        (unsigned long long)seq, (unsigned long long)x->recv_seq);
    for (int b = 0; b < x->nb; b++) {
        size_t lo, hi;
        if (!part(x, b, x->me, &lo, &hi)) continue;
        size_t blo = (size_t)x->me * x->block;
        for (int q = 0; q < x->n; q++) {
            if (q == x->me) continue;
            int rc = MPI_Irecv(x->stage + (size_t)q * x->block + (lo - blo), (int)(hi - lo),
                               MPI_FLOAT, q, b, x->comm, &x->grecv[(size_t)b * x->n + q]);
            if (rc != MPI_SUCCESS) return mx_fail(rc, "MPI_Irecv (shard exchange)");
        }
    }
    x->recv_seq = seq;
    return OT_OK;
}

static ot_status mx_grads_writable(void *impl, int rank, uint64_t seq, uint64_t dl) {
    mpi_xchg *x = impl;
    OT_CHECK(check_me(x, rank, "ot_shard_exchange_grads_writable"));
    OT_CHECK(wait_reqs(x, x->gsend, x->nb * x->n, dl, "the gradients' reuse"));
    return post_receives(x, seq);
}

static ot_status mx_post(void *impl, int rank, uint64_t seq, int b, const float *data) {
    mpi_xchg *x = impl;
    OT_CHECK(check_me(x, rank, "ot_shard_exchange_post"));
    if (b < 0 || b >= x->nb)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_shard_exchange_post: bucket %d of %d", b,
                        x->nb);
    if (!x->grads && !data)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "ot_shard_exchange_post: nothing bound");
    OT_CHECK(post_receives(x, seq));
    const float *v = data ? data : x->grads + x->boff[b];
    for (int q = 0; q < x->n; q++) {
        size_t lo, hi;
        MPI_Request *rq = &x->gsend[(size_t)b * x->n + q];
        if (q == x->me || !part(x, b, q, &lo, &hi)) continue;
        if (*rq != MPI_REQUEST_NULL)
            return ot_error(OT_ERR_FAILED_PRECONDITION,
                            "ot_shard_exchange_post: bucket %d posted again before its last send "
                            "completed (grads_writable first)",
                            b);
        int rc = MPI_Isend(v + (lo - x->boff[b]), (int)(hi - lo), MPI_FLOAT, q, b, x->comm, rq);
        if (rc != MPI_SUCCESS) return mx_fail(rc, "MPI_Isend (shard exchange)");
    }
    x->own[b] = v;
    x->posted[b] = seq;
    return OT_OK;
}

/* A new step for reduce/completions. */
static ot_status start_step(mpi_xchg *x, uint64_t seq, const char *what) {
    if (x->cur == seq) return OT_OK;
    if (x->reduced >= seq)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "%s: step %llu after step %llu", what,
                        (unsigned long long)seq, (unsigned long long)x->reduced);
    x->cur = seq;
    memset(x->done, 0, (size_t)x->nb);
    memset(x->ready, 0, (size_t)x->nb);
    x->left = x->nb;
    return OT_OK;
}

/* Whether bucket b of step cur can be reduced: posted here and every other part received. */
static ot_status bucket_ready(mpi_xchg *x, int b, bool *ok) {
    *ok = false;
    if (x->posted[b] < x->cur || x->recv_seq < x->cur) return OT_OK;
    OT_CHECK(test(&x->grecv[(size_t)b * x->n], x->n, ok));
    if (*ok && !x->ready[b]) {
        x->ready[b] = 1;
        x->completions++;
    }
    return OT_OK;
}

static void reduce_bucket(mpi_xchg *x, int b, float *reduced) {
    size_t lo, hi, blo = (size_t)x->me * x->block;
    if (!part(x, b, x->me, &lo, &hi)) return;
    for (int q = 0; q < x->n; q++)
        x->src[q] = q == x->me ? x->own[b] + (lo - x->boff[b])
                               : x->stage + (size_t)q * x->block + (lo - blo);
    for (size_t i = lo; i < hi; i += TILE) {
        size_t k = hi - i < TILE ? hi - i : TILE;
        for (int q = 0; q < x->n; q++) x->in[q] = x->src[q] + (i - lo);
        ot_pod_ordered_sum_f32(reduced + (i - blo), x->in, x->n, k, x->order, x->work);
    }
}

static ot_status mx_reduce(void *impl, int rank, uint64_t seq, float *reduced, bool wait,
                           uint64_t dl, int *done) {
    mpi_xchg *x = impl;
    if (done) *done = 0;
    OT_CHECK(check_me(x, rank, "ot_shard_exchange_reduce"));
    if (!reduced) return ot_error(OT_ERR_INVALID_ARGUMENT, "ot_shard_exchange_reduce: NULL block");
    OT_CHECK(start_step(x, seq, "ot_shard_exchange_reduce"));
    int count = 0;
    while (x->left > 0) {
        int progressed = 0;
        for (int b = 0; b < x->nb; b++) {
            bool ok = false;
            if (x->done[b]) continue;
            OT_CHECK(bucket_ready(x, b, &ok));
            if (!ok) continue;
            reduce_bucket(x, b, reduced);
            x->done[b] = 1;
            x->left--;
            count++, progressed++;
        }
        if (done) *done = count;
        if (x->left == 0 || !wait) break;
        if (!progressed) OT_CHECK(pause(x, dl, "the reduce-scatter"));
    }
    if (x->left == 0) x->reduced = seq;
    return OT_OK;
}

static uint64_t mx_completions(void *impl) {
    mpi_xchg *x = impl;
    for (int b = 0; !x->aborted && x->cur > 0 && b < x->nb; b++) {
        bool ok;
        if (!x->ready[b] && bucket_ready(x, b, &ok) != OT_OK) break;
    }
    return x->completions;
}

static bool mx_reduced(void *impl, int rank, uint64_t seq) {
    mpi_xchg *x = impl;
    return rank == x->me && x->reduced >= seq;
}

static ot_status mx_params_writable(void *impl, int rank, uint64_t seq, uint64_t dl) {
    mpi_xchg *x = impl;
    (void)seq;
    OT_CHECK(check_me(x, rank, "ot_shard_exchange_params_writable"));
    return wait_reqs(x, x->psend, x->n, dl, "the parameters' reuse");
}

static ot_status mx_publish(void *impl, int rank, uint64_t seq) {
    mpi_xchg *x = impl;
    OT_CHECK(check_me(x, rank, "ot_shard_exchange_publish"));
    if (!x->all) return ot_error(OT_ERR_FAILED_PRECONDITION, "ot_shard_exchange_publish: unbound");
    /* the last step's blocks arrived (a block nobody waited for is waited here) and my block's
     * last sends are done (params_writable), so the buffers may be reused */
    bool ok = false;
    OT_CHECK(test(x->precv, x->n, &ok));
    OT_CHECK(test(x->psend, x->n, &ok));
    for (int q = 0; q < x->n; q++)
        if (x->precv[q] != MPI_REQUEST_NULL || x->psend[q] != MPI_REQUEST_NULL)
            return ot_error(OT_ERR_FAILED_PRECONDITION,
                            "ot_shard_exchange_publish: step %llu while step %llu's blocks are "
                            "still in flight",
                            (unsigned long long)seq, (unsigned long long)x->published);
    int tag = x->nb; /* the buckets use 0 .. nb - 1 */
    const float *mine = x->all + (size_t)x->me * x->block;
    for (int q = 0; q < x->n; q++) {
        if (q == x->me) continue;
        int rc = MPI_Irecv(x->all + (size_t)q * x->block, (int)x->block, MPI_FLOAT, q, tag, x->comm,
                           &x->precv[q]);
        if (rc == MPI_SUCCESS)
            rc = MPI_Isend(mine, (int)x->block, MPI_FLOAT, q, tag, x->comm, &x->psend[q]);
        if (rc != MPI_SUCCESS) return mx_fail(rc, "MPI_Isend/Irecv (shard exchange publish)");
    }
    x->published = seq;
    return OT_OK;
}

static ot_status mx_wait_published(void *impl, uint64_t seq, size_t off, size_t len, uint64_t dl) {
    mpi_xchg *x = impl;
    size_t total = (size_t)x->n * x->block;
    if (off > total || len > total - off)
        return ot_error(OT_ERR_OUT_OF_RANGE,
                        "ot_shard_exchange_wait_published: [%zu, +%zu) outside %zu elements", off,
                        len, total);
    if (x->aborted) return ot_error(x->why, "mpi shard exchange (the all-gather): %s", x->msg);
    if (len == 0) return OT_OK;
    /* the receives of seq are posted by this process's own publish of seq */
    if (x->published < seq)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "ot_shard_exchange_wait_published: step %llu before this process "
                        "published it (step %llu)",
                        (unsigned long long)seq, (unsigned long long)x->published);
    int q0 = (int)(off / x->block), q1 = (int)((off + len - 1) / x->block);
    return wait_reqs(x, x->precv + q0, q1 - q0 + 1, dl, "the all-gather");
}

static const float *mx_block(void *impl, int q) {
    mpi_xchg *x = impl;
    return x->all && q >= 0 && q < x->n ? x->all + (size_t)q * x->block : NULL;
}

static ot_status mx_fetched(void *impl, int rank, uint64_t seq) {
    mpi_xchg *x = impl;
    OT_CHECK(check_me(x, rank, "ot_shard_exchange_fetched"));
    x->fetched = seq;
    return OT_OK;
}

static const ot_shard_exchange_ops mpi_xchg_ops = {
    .free = mx_free,
    .bind = mx_bind,
    .abort = mx_abort,
    .grads_writable = mx_grads_writable,
    .post = mx_post,
    .reduce = mx_reduce,
    .completions = mx_completions,
    .reduced = mx_reduced,
    .params_writable = mx_params_writable,
    .publish = mx_publish,
    .wait_published = mx_wait_published,
    .block = mx_block,
    .fetched = mx_fetched,
};

/* qsort's comparison of bucket indices by offset (create runs on one thread per process) */
static _Thread_local const size_t *sort_ctx;
static int by_offset(const void *a, const void *b) {
    size_t x = sort_ctx[*(const size_t *)a], y = sort_ctx[*(const size_t *)b];
    return x < y ? -1 : x > y;
}

ot_status ot_mpi_shard_exchange_create(ot_mpi *m, size_t block_len, int nbuckets,
                                       const size_t *bucket_off, const size_t *bucket_len,
                                       ot_coll_algo order, ot_shard_exchange **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "mpi shard exchange: NULL output");
    *out = NULL;
    if (!m || block_len < 1 || block_len > INT_MAX || nbuckets < 0 || nbuckets > MAX_BUCKETS ||
        (nbuckets > 0 && (!bucket_off || !bucket_len)))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "mpi shard exchange: block of %zu (at most %d), %d buckets (at most %d)",
                        block_len, INT_MAX, nbuckets, MAX_BUCKETS);
    if (order != OT_ALGO_TREE && order != OT_ALGO_DIRECT)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "mpi shard exchange: order %s (tree or direct: a per-element order that "
                        "does not depend on the buckets)",
                        ot_coll_algo_name(order));
    int n = ot_mpi_size(m);
    size_t total = (size_t)n * block_len;
    for (int b = 0; b < nbuckets; b++)
        if (bucket_off[b] > total || bucket_len[b] > total - bucket_off[b])
            return ot_error(OT_ERR_OUT_OF_RANGE,
                            "mpi shard exchange: bucket %d [%zu, +%zu) outside the %zu elements", b,
                            bucket_off[b], bucket_len[b], total);
    /* disjoint (two receives must never write the same staging elements): sorted by offset,
     * each ends before the next begins */
    size_t *ord = ot_malloc(((size_t)nbuckets + 1) * sizeof *ord);
    if (!ord) return ot_error(OT_ERR_OUT_OF_MEMORY, "mpi shard exchange: buckets");
    for (int b = 0; b < nbuckets; b++) ord[b] = (size_t)b;
    sort_ctx = bucket_off;
    qsort(ord, (size_t)nbuckets, sizeof *ord, by_offset);
    for (int i = 1; i < nbuckets; i++)
        if (bucket_off[ord[i - 1]] + bucket_len[ord[i - 1]] > bucket_off[ord[i]]) {
            int a = (int)ord[i - 1], b = (int)ord[i];
            ot_free(ord);
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "mpi shard exchange: buckets %d and %d overlap", a, b);
        }
    ot_free(ord);
    mpi_xchg *x = ot_calloc(1, sizeof *x);
    if (!x) return ot_error(OT_ERR_OUT_OF_MEMORY, "mpi shard exchange");
    x->me = ot_mpi_rank(m), x->n = n, x->nb = nbuckets, x->block = block_len, x->order = order;
    size_t nreq = (size_t)nbuckets * (size_t)n + 1;
    x->boff = ot_malloc(((size_t)nbuckets + 1) * sizeof *x->boff);
    x->blen = ot_malloc(((size_t)nbuckets + 1) * sizeof *x->blen);
    x->stage = ot_calloc(total, sizeof *x->stage);
    x->own = ot_calloc((size_t)nbuckets + 1, sizeof *x->own);
    x->posted = ot_calloc((size_t)nbuckets + 1, sizeof *x->posted);
    x->done = ot_calloc((size_t)nbuckets + 1, 1);
    x->ready = ot_calloc((size_t)nbuckets + 1, 1);
    x->grecv = ot_malloc(nreq * sizeof *x->grecv);
    x->gsend = ot_malloc(nreq * sizeof *x->gsend);
    x->precv = ot_malloc((size_t)n * sizeof *x->precv);
    x->psend = ot_malloc((size_t)n * sizeof *x->psend);
    x->work = ot_malloc((size_t)n * TILE * sizeof *x->work);
    x->in = ot_malloc((size_t)n * sizeof *x->in);
    x->src = ot_malloc((size_t)n * sizeof *x->src);
    if (!x->boff || !x->blen || !x->stage || !x->own || !x->posted || !x->done || !x->ready ||
        !x->grecv || !x->gsend || !x->precv || !x->psend || !x->work || !x->in || !x->src) {
        mx_free(x);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "mpi shard exchange: %d processes", n);
    }
    for (size_t i = 0; i < nreq; i++) x->grecv[i] = x->gsend[i] = MPI_REQUEST_NULL;
    for (int q = 0; q < n; q++) x->precv[q] = x->psend[q] = MPI_REQUEST_NULL;
    if (nbuckets > 0) {
        memcpy(x->boff, bucket_off, (size_t)nbuckets * sizeof *x->boff);
        memcpy(x->blen, bucket_len, (size_t)nbuckets * sizeof *x->blen);
    }
    x->left = nbuckets;
    /* a communicator of its own: its tags never meet another component's messages */
    int rc = MPI_Comm_dup(ot_mpi_world_comm(m), &x->comm);
    if (rc == MPI_SUCCESS) {
        x->comm_ok = true;
        rc = MPI_Comm_set_errhandler(x->comm, MPI_ERRORS_RETURN);
    }
    ot_status s = rc == MPI_SUCCESS ? OT_OK : mx_fail(rc, "MPI_Comm_dup (shard exchange)");
    if (s == OT_OK) s = ot_shard_exchange_wrap(&mpi_xchg_ops, x, out);
    if (s != OT_OK) mx_free(x);
    return s;
}
