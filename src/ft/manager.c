/* The checkpoint manager: synchronous and async saves, replication and retention after each
 * commit. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ft/ckpt_internal.h"
#include "ft/ft_io.h"

struct ot_ckpt_manager {
    char *root;
    char **replicas;
    ot_ckpt_options opts; /* replicas and best_metric point at the manager's own copies */
    char *best_metric;
    /* async */
    pthread_t thread;
    bool running;
    ot_ft_prio_group prio; /* the writer thread and its I/O threads */
    ot_ckpt_save_args job; /* deep copy; tensors point into staging */
    ot_arena *job_arena;
    ot_status job_rc;
    char job_err[1024];
    ot_ckpt_save_stats job_stats;
    void *staging;
    size_t staging_cap;
};

ot_ckpt_options ot_ckpt_options_default(void) {
    ot_ckpt_options o;
    memset(&o, 0, sizeof o);
    o.fsync = true;
    return o;
}

const char *ot_ckpt_root(const ot_ckpt_manager *m) {
    return m->root;
}

static void manager_free(ot_ckpt_manager *m) {
    if (!m) return;
    if (m->replicas)
        for (size_t i = 0; i < m->opts.nreplicas; i++) ot_free(m->replicas[i]);
    ot_free(m->replicas);
    ot_free(m->best_metric);
    ot_free(m->root);
    ot_arena_free(m->job_arena);
    ot_aligned_free(m->staging);
    ot_free(m);
}

ot_status ot_ckpt_open(const char *root, const ot_ckpt_options *o, ot_ckpt_manager **out) {
    *out = NULL;
    ot_ckpt_options def = ot_ckpt_options_default();
    if (!o) o = &def;
    if (!root || !*root) return ot_error(OT_ERR_INVALID_ARGUMENT, "checkpoint: empty root");
    ot_ckpt_manager *m = ot_calloc(1, sizeof *m);
    if (!m) return ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
    m->opts = *o;
    m->opts.replicas = NULL;
    m->opts.nreplicas = 0;
    m->opts.retention.best_metric = NULL;
    ot_status rc = OT_OK;
    if (!(m->root = ot_strdup(root))) goto oom;
    if (o->retention.best_metric && !(m->best_metric = ot_strdup(o->retention.best_metric)))
        goto oom;
    m->opts.retention.best_metric = m->best_metric;
    if (o->nreplicas) {
        if (!(m->replicas = ot_calloc(o->nreplicas, sizeof(char *)))) goto oom;
        for (size_t i = 0; i < o->nreplicas; i++) {
            if (!(m->replicas[i] = ot_strdup(o->replicas[i]))) goto oom;
            m->opts.nreplicas = i + 1;
        }
        m->opts.replicas = (const char *const *)m->replicas;
    }
    OT_CHECK_GOTO(ot_ft_mkdirs(m->root), rc, fail);
    OT_CHECK_GOTO(ot_ckpt_clean_tmp(m->root), rc, fail);
    for (size_t i = 0; i < m->opts.nreplicas; i++) {
        OT_CHECK_GOTO(ot_ft_mkdirs(m->replicas[i]), rc, fail);
        OT_CHECK_GOTO(ot_ckpt_clean_tmp(m->replicas[i]), rc, fail);
    }
    *out = m;
    return OT_OK;
oom:
    rc = ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
fail:
    manager_free(m);
    return rc;
}

/* Commit on the primary, copy to and verify on every replica, then retention everywhere. */
static ot_status save_everything(ot_ckpt_manager *m, const ot_ckpt_save_args *a,
                                 ot_ckpt_save_stats *stats) {
    OT_CHECK(ot_ckpt_commit(m->root, a, m->opts.fsync, m->opts.write_threads, stats));
    char *prim = ot_ckpt_step_path(m->root, a->step, false);
    if (!prim) return ot_error(OT_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
    ot_status rc = OT_OK;
    for (size_t i = 0; i < m->opts.nreplicas && rc == OT_OK; i++) {
        rc = ot_ckpt_replicate(prim, m->replicas[i]);
        if (rc == OT_OK) {
            char *rp = ot_ckpt_step_path(m->replicas[i], a->step, false);
            rc = rp ? ot_ckpt_verify_dir(rp, NULL) : OT_ERR_OUT_OF_MEMORY;
            ot_free(rp);
        }
        if (rc != OT_OK)
            rc = ot_error_wrap(rc, "step %lld is committed on %s, but replica %s failed",
                               (long long)a->step, m->root, m->replicas[i]);
    }
    ot_free(prim);
    if (rc != OT_OK) return rc;
    size_t nd = 0, ndr;
    OT_CHECK(ot_ckpt_retention_impl(m->root, &m->opts.retention, a->step, &nd));
    for (size_t i = 0; i < m->opts.nreplicas; i++) {
        OT_CHECK(ot_ckpt_retention_impl(m->replicas[i], &m->opts.retention, a->step, &ndr));
    }
    if (stats) stats->ndeleted = nd;
    return OT_OK;
}

/* Joins the background save; returns its result (once) and the stats. */
static ot_status join_async(ot_ckpt_manager *m, ot_ckpt_save_stats *stats) {
    if (!m->running) return OT_OK;
    ot_ft_prio_group_boost(&m->prio); /* someone waits now: no reason to yield any more */
    pthread_join(m->thread, NULL);
    m->running = false;
    if (stats) *stats = m->job_stats;
    if (m->job_rc != OT_OK) {
        ot_error(m->job_rc, "%s", m->job_err);
        return ot_error_wrap(m->job_rc, "async save of step %lld failed", (long long)m->job.step);
    }
    return OT_OK;
}

ot_status ot_ckpt_wait(ot_ckpt_manager *m, ot_ckpt_save_stats *stats) {
    return join_async(m, stats);
}

ot_status ot_ckpt_close(ot_ckpt_manager *m) {
    if (!m) return OT_OK;
    ot_status rc = join_async(m, NULL);
    manager_free(m);
    return rc;
}

ot_status ot_ckpt_save(ot_ckpt_manager *m, const ot_ckpt_save_args *a, ot_ckpt_save_stats *stats) {
    OT_CHECK(join_async(m, NULL));
    if (stats) memset(stats, 0, sizeof *stats);
    return save_everything(m, a, stats);
}

static void *async_main(void *arg) {
    ot_ckpt_manager *m = arg;
    /* background work yields the CPU to the training step until someone waits for it */
    ot_ft_background_begin(&m->prio);
    m->job_rc = save_everything(m, &m->job, &m->job_stats);
    if (m->job_rc != OT_OK) snprintf(m->job_err, sizeof m->job_err, "%s", ot_last_error());
    ot_ft_background_end();
    return NULL;
}

static char *arena_str(ot_arena *a, const char *s) {
    return s ? ot_arena_strndup(a, s, strlen(s)) : NULL;
}

#define STAGE_ALIGN 64
#define COPY_CHUNK  ((size_t)4 << 20)

/* The snapshot copy, split into 4 MiB pieces over the default thread pool (the caller waits for
 * this part, so it uses every core). */
typedef struct copy_piece {
    char *dst;
    const char *src;
    size_t len;
} copy_piece;

typedef struct copy_plan {
    copy_piece *p;
    size_t n, cap;
} copy_plan;

static void copy_range(void *ctx, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const copy_plan *plan = ctx;
    for (int64_t i = begin; i < end; i++) memcpy(plan->p[i].dst, plan->p[i].src, plan->p[i].len);
}

/* Deep-copies a into m->job, tensors into the staging buffer. */
static ot_status snapshot(ot_ckpt_manager *m, const ot_ckpt_save_args *a) {
    size_t need = 0, ntensors = 0;
    for (size_t i = 0; i < a->nshards; i++) {
        for (size_t t = 0; t < a->shards[i].ntensors; t++) {
            size_t nb = (size_t)ot_shape_nbytes_unchecked(&a->shards[i].tensors[t].shape);
            need += (nb + STAGE_ALIGN - 1) & ~(size_t)(STAGE_ALIGN - 1);
        }
        ntensors += a->shards[i].ntensors;
    }
    if (need > m->staging_cap) {
        ot_aligned_free(m->staging);
        m->staging_cap = 0;
        m->staging = ot_aligned_alloc(4096, need);
        if (!m->staging)
            return ot_error(OT_ERR_OUT_OF_MEMORY, "async save: no %zu-byte staging buffer", need);
        m->staging_cap = need;
    }
    ot_arena_free(m->job_arena);
    m->job_arena = ot_arena_new(16384);
    ot_arena *ar = m->job_arena;
    if (!ar) return ot_error(OT_ERR_OUT_OF_MEMORY, "async save: out of memory");
    ot_ckpt_save_args j = *a;
    ot_ckpt_shard *sh = ot_arena_alloc(ar, (a->nshards ? a->nshards : 1) * sizeof *sh, 8);
    ot_ckpt_tensor *ts = ot_arena_alloc(ar, (ntensors ? ntensors : 1) * sizeof *ts, 8);
    if (!sh || !ts) return ot_error(OT_ERR_OUT_OF_MEMORY, "async save: out of memory");
    char *stage = m->staging;
    size_t off = 0, k = 0;
    copy_plan plan = {NULL, 0, 0};
    for (size_t i = 0; i < a->nshards; i++)
        for (size_t t = 0; t < a->shards[i].ntensors; t++)
            plan.cap +=
                (size_t)ot_shape_nbytes_unchecked(&a->shards[i].tensors[t].shape) / COPY_CHUNK + 1;
    plan.p = ot_arena_alloc(ar, (plan.cap ? plan.cap : 1) * sizeof *plan.p, 8);
    if (!plan.p) return ot_error(OT_ERR_OUT_OF_MEMORY, "async save: out of memory");
    for (size_t i = 0; i < a->nshards; i++) {
        sh[i] = a->shards[i];
        if (!(sh[i].role = arena_str(ar, a->shards[i].role)))
            return ot_error(OT_ERR_OUT_OF_MEMORY, "async save: out of memory");
        sh[i].tensors = &ts[k];
        for (size_t t = 0; t < a->shards[i].ntensors; t++, k++) {
            const ot_ckpt_tensor *src = &a->shards[i].tensors[t];
            size_t nb = (size_t)ot_shape_nbytes_unchecked(&src->shape);
            ts[k] = *src;
            if (!(ts[k].name = arena_str(ar, src->name)))
                return ot_error(OT_ERR_OUT_OF_MEMORY, "async save: out of memory");
            for (size_t c = 0; c < nb; c += COPY_CHUNK)
                plan.p[plan.n++] = (copy_piece){stage + off + c, (const char *)src->data + c,
                                                nb - c < COPY_CHUNK ? nb - c : COPY_CHUNK};
            ts[k].data = stage + off;
            off += (nb + STAGE_ALIGN - 1) & ~(size_t)(STAGE_ALIGN - 1);
        }
    }
    if (plan.n) {
        ot_threadpool *pool = ot_threadpool_default();
        if (pool)
            ot_parallel_for(pool, (int64_t)plan.n, 1, OT_SCHEDULE_DYNAMIC, copy_range, &plan);
        else
            copy_range(&plan, 0, (int64_t)plan.n, 0);
    }
    j.shards = sh;
    j.pod.topology = arena_str(ar, a->pod.topology);
    j.optimizer_json = arena_str(ar, a->optimizer_json);
    j.rng_algorithm = arena_str(ar, a->rng_algorithm);
    if ((a->pod.topology && !j.pod.topology) || (a->optimizer_json && !j.optimizer_json) ||
        (a->rng_algorithm && !j.rng_algorithm))
        return ot_error(OT_ERR_OUT_OF_MEMORY, "async save: out of memory");
    if (a->rng_words) {
        uint64_t *w = ot_arena_alloc(ar, a->rng_words * 8, 8);
        if (!w) return ot_error(OT_ERR_OUT_OF_MEMORY, "async save: out of memory");
        memcpy(w, a->rng_state, a->rng_words * 8);
        j.rng_state = w;
    }
    if (a->nmetrics) {
        ot_ckpt_metric *ms = ot_arena_alloc(ar, a->nmetrics * sizeof *ms, 8);
        if (!ms) return ot_error(OT_ERR_OUT_OF_MEMORY, "async save: out of memory");
        for (size_t i = 0; i < a->nmetrics; i++) {
            ms[i] = a->metrics[i];
            if (!(ms[i].name = arena_str(ar, a->metrics[i].name)))
                return ot_error(OT_ERR_OUT_OF_MEMORY, "async save: out of memory");
        }
        j.metrics = ms;
    }
    m->job = j;
    return OT_OK;
}

ot_status ot_ckpt_save_async(ot_ckpt_manager *m, const ot_ckpt_save_args *a) {
    OT_CHECK(join_async(m, NULL)); /* a failed previous save is reported here, once */
    OT_CHECK(ot_ckpt_check_args(a));
    uint64_t t0 = ot_now_ns();
    OT_CHECK(snapshot(m, a));
    memset(&m->job_stats, 0, sizeof m->job_stats);
    m->job_stats.snapshot_seconds = (double)(ot_now_ns() - t0) * 1e-9;
    m->job_rc = OT_OK;
    m->job_err[0] = '\0';
    ot_ft_prio_group_init(&m->prio);
    if (pthread_create(&m->thread, NULL, async_main, m) != 0)
        return ot_error(OT_ERR_INTERNAL, "async save: cannot start the writer thread");
    m->running = true;
    return OT_OK;
}
