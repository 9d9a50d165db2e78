/* A persistent thread pool. Workers sleep on a condition variable between runs; waits spin for a
 * short, bounded time first (cheap hand-off when cores are free) and then block, so that an
 * oversubscribed machine is not burned by spinning.
 *
 * Two kinds of run. ot_threadpool_run needs every thread (its task may hold a barrier), so it
 * waits for the last worker to wake. ot_parallel_for's run is *open*: its pieces are claimed from
 * an atomic counter by whichever threads are there, the caller included, so the caller never
 * waits for a worker that has not woken (asleep, or its CPU taken by another process): it runs the
 * pieces left itself and then waits only for the workers that joined while it was open. A worker
 * joins with one compare-and-swap on `open`, which holds the run's generation, a closed bit and
 * the count of workers inside: a late worker sees another generation or the closed bit and never
 * touches the finished run's context.
 *
 * A worker that finds itself on the core its caller started the latest run on does not spin: the
 * scheduler puts a woken worker on its waker's core when the other cores are busy (other
 * processes, other device threads, MPI ranks), where it runs the pieces first and then spun its
 * whole window (about 50 us) while the caller waited for the core to close its run. */
#include "optitpu/core.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_ITERS 2000

struct ot_threadpool {
    int n; /* threads including the caller */
    pthread_t *threads;
    struct worker_arg *args; /* one per worker, owned by the pool */
    pthread_mutex_t mu;
    pthread_cond_t cv_work;
    pthread_cond_t cv_done;
    pthread_mutex_t run_mu; /* serializes runs from different caller threads */
    atomic_uint gen;
    atomic_int pending;
    ot_task_fn fn;
    void *ctx;
    bool is_open;          /* the current run is an open one (read with fn under mu) */
    atomic_ullong open;    /* open runs: generation << 32 | OPEN_CLOSED | workers inside */
    atomic_int caller_cpu; /* the CPU the latest run's caller started it on (-1: unknown) */
    bool stop;
    /* barrier */
    pthread_mutex_t bmu;
    pthread_cond_t bcv;
    int bcount;
    atomic_uint bgen;
};

typedef struct worker_arg {
    ot_threadpool *p;
    int ith;
} worker_arg;

#define OPEN_CLOSED (1ull << 31)
#define OPEN_COUNT  (OPEN_CLOSED - 1)

/* Joins open run `g`: false when it has closed or another run has started. */
static bool open_join(ot_threadpool *p, unsigned g) {
    unsigned long long w = atomic_load(&p->open);
    for (;;) {
        if ((unsigned)(w >> 32) != g || (w & OPEN_CLOSED)) return false;
        if (atomic_compare_exchange_weak(&p->open, &w, w + 1)) return true;
    }
}

/* Leaves the open run joined; the last worker out of a closed run wakes the caller. */
static void open_leave(ot_threadpool *p) {
    unsigned long long w = atomic_fetch_sub(&p->open, 1);
    if ((w & OPEN_CLOSED) && (w & OPEN_COUNT) == 1) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_signal(&p->cv_done);
        pthread_mutex_unlock(&p->mu);
    }
}

/* The CPU this thread runs on, or -1 where that cannot be asked. */
static int cpu_now(void) {
#if defined(__linux__)
    return sched_getcpu();
#else
    return -1;
#endif
}

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    ot_threadpool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        /* A worker on the core its caller last ran on sleeps at once: spinning there keeps the
         * caller, which it would wait for, off the core (woken onto the caller's core when the
         * others are busy, it runs first and then spun the whole window while the caller
         * waited to finish its run). */
        int cpu = cpu_now();
        int spin = cpu >= 0 && cpu == atomic_load(&p->caller_cpu) ? 0 : SPIN_ITERS;
        for (int i = 0; i < spin && atomic_load(&p->gen) == seen; i++) cpu_relax();
        pthread_mutex_lock(&p->mu);
        while (!p->stop && atomic_load(&p->gen) == seen) pthread_cond_wait(&p->cv_work, &p->mu);
        bool stop = p->stop;
        seen = atomic_load(&p->gen);
        ot_task_fn fn = p->fn;
        void *ctx = p->ctx;
        bool is_open = p->is_open;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        if (is_open) {
            if (open_join(p, seen)) {
                fn(ctx, wa.ith, p->n);
                open_leave(p);
            }
            continue;
        }
        fn(ctx, wa.ith, p->n);
        if (atomic_fetch_sub(&p->pending, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

static int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

ot_status ot_threadpool_create(int nthreads, ot_threadpool **out) {
    *out = NULL;
    if (nthreads <= 0) nthreads = online_cpus();
    if (nthreads > 1024)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "threadpool: %d threads exceeds 1024", nthreads);
    ot_threadpool *p = ot_calloc(1, sizeof *p);
    if (!p) return ot_error(OT_ERR_OUT_OF_MEMORY, "threadpool: cannot allocate pool");
    p->n = nthreads;
    atomic_init(&p->caller_cpu, -1);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    pthread_mutex_init(&p->run_mu, NULL);
    pthread_mutex_init(&p->bmu, NULL);
    pthread_cond_init(&p->bcv, NULL);
    if (nthreads > 1) {
        p->threads = ot_calloc((size_t)nthreads - 1, sizeof(pthread_t));
        p->args = ot_calloc((size_t)nthreads - 1, sizeof(worker_arg));
        if (!p->threads || !p->args) {
            p->n = 1;
            ot_threadpool_free(p);
            return ot_error(OT_ERR_OUT_OF_MEMORY, "threadpool: cannot allocate thread table");
        }
    }
    for (int i = 1; i < nthreads; i++) {
        worker_arg *wa = &p->args[i - 1];
        wa->p = p;
        wa->ith = i;
        int err = pthread_create(&p->threads[i - 1], NULL, worker_main, wa);
        if (err) {
            p->n = i; /* join only the workers that started */
            ot_threadpool_free(p);
            return ot_error(OT_ERR_INTERNAL, "threadpool: cannot start worker %d of %d: %s", i,
                            nthreads, strerror(err));
        }
    }
    *out = p;
    return OT_OK;
}

void ot_threadpool_free(ot_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
    ot_free(p->threads);
    ot_free(p->args);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->run_mu);
    pthread_mutex_destroy(&p->bmu);
    pthread_cond_destroy(&p->bcv);
    ot_free(p);
}

int ot_threadpool_size(const ot_threadpool *p) {
    return p ? p->n : 1;
}

void ot_threadpool_run(ot_threadpool *p, ot_task_fn fn, void *ctx) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->run_mu);
    atomic_store(&p->caller_cpu, cpu_now());
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->is_open = false;
    atomic_store(&p->pending, p->n - 1);
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);

    fn(ctx, 0, p->n);

    for (int i = 0; i < SPIN_ITERS && atomic_load(&p->pending) > 0; i++) cpu_relax();
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->run_mu);
}

/* An open run (above): fn must finish all the run's work when the caller alone calls it. */
static void run_open(ot_threadpool *p, ot_task_fn fn, void *ctx) {
    pthread_mutex_lock(&p->run_mu);
    atomic_store(&p->caller_cpu, cpu_now());
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->is_open = true;
    unsigned g = atomic_load(&p->gen) + 1;
    atomic_store(&p->open, (unsigned long long)g << 32);
    atomic_store(&p->gen, g);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);

    fn(ctx, 0, p->n);

    /* closed: no worker joins from here on; wait for those inside */
    unsigned long long w = atomic_fetch_or(&p->open, OPEN_CLOSED);
    if (w & OPEN_COUNT) {
        for (int i = 0; i < SPIN_ITERS && (atomic_load(&p->open) & OPEN_COUNT); i++) cpu_relax();
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->open) & OPEN_COUNT) pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&p->run_mu);
}

void ot_threadpool_barrier(ot_threadpool *p, int ith) {
    (void)ith;
    if (!p || p->n == 1) return;
    pthread_mutex_lock(&p->bmu);
    unsigned g = atomic_load(&p->bgen);
    if (++p->bcount == p->n) {
        p->bcount = 0;
        atomic_fetch_add(&p->bgen, 1);
        pthread_cond_broadcast(&p->bcv);
        pthread_mutex_unlock(&p->bmu);
        return;
    }
    pthread_mutex_unlock(&p->bmu);
    for (int i = 0; i < SPIN_ITERS && atomic_load(&p->bgen) == g; i++) cpu_relax();
    pthread_mutex_lock(&p->bmu);
    while (atomic_load(&p->bgen) == g) pthread_cond_wait(&p->bcv, &p->bmu);
    pthread_mutex_unlock(&p->bmu);
}

typedef struct pfor_ctx {
    int64_t n, chunk;
    ot_schedule sched;
    ot_range_fn fn;
    void *ctx;
    atomic_llong next;
} pfor_ctx;

/* Claims pieces until none is left (an open run: any thread may run any piece, the caller all of
 * them when no worker comes). */
static void pfor_task(void *arg, int ith, int nth) {
    pfor_ctx *c = arg;
    if (c->sched == OT_SCHEDULE_STATIC) {
        /* a fixed partition: piece q is always the same range for the same (n, nth) */
        int64_t base = c->n / nth, rem = c->n % nth;
        for (;;) {
            int64_t q = atomic_fetch_add(&c->next, 1);
            if (q >= nth) break;
            int64_t b = q * base + (q < rem ? q : rem);
            int64_t e = b + base + (q < rem ? 1 : 0);
            if (b < e) c->fn(c->ctx, b, e, ith);
        }
        return;
    }
    for (;;) {
        int64_t b = atomic_fetch_add(&c->next, c->chunk);
        if (b >= c->n) break;
        int64_t e = b + c->chunk < c->n ? b + c->chunk : c->n;
        c->fn(c->ctx, b, e, ith);
    }
}

void ot_parallel_for(ot_threadpool *p, int64_t n, int64_t chunk, ot_schedule sched, ot_range_fn fn,
                     void *ctx) {
    if (n <= 0) return;
    if (chunk <= 0) chunk = 1;
    if (!p || p->n == 1 || (sched == OT_SCHEDULE_DYNAMIC && n <= chunk)) {
        fn(ctx, 0, n, 0);
        return;
    }
    pfor_ctx c = {.n = n, .chunk = chunk, .sched = sched, .fn = fn, .ctx = ctx};
    atomic_init(&c.next, 0);
    run_open(p, pfor_task, &c);
}

static ot_threadpool *g_default;
static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;

static void default_free(void) {
    ot_threadpool_free(g_default);
    g_default = NULL;
}

static void default_init(void) {
    int n = 0;
    const char *env = getenv("OPTITPU_THREADS");
    if (env) n = atoi(env);
    if (ot_threadpool_create(n, &g_default) == OT_OK) atexit(default_free);
}

ot_threadpool *ot_threadpool_default(void) {
    pthread_once(&g_default_once, default_init);
    return g_default; /* NULL (run inline) if creation failed */
}
