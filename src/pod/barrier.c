/* Generation-counted barriers with deadlines. A generation ends in one of three ways: the last
 * expected participant arrives (everyone OK), a participant is declared failed (everyone waiting
 * gets PEER_FAILED), or a waiter's deadline passes (everyone waiting gets TIMEOUT). In the last
 * two cases the generation is closed and the next one starts with zero arrivals. */
#include "pod_internal.h"

#include <pthread.h>
#include <time.h>

/* A waiter reads its generation's outcome after waking; generations cannot run this far ahead of
 * a waiter (each later one needs it or a failure/timeout per generation). */
#define OUTCOMES 64

struct ot_barrier {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t gen;
    int arrived;
    int expected;
    bool *failed;
    bool *here;         /* arrived in the current generation */
    ot_status *outcome; /* outcome of generation g kept in outcome[g % OUTCOMES] */
    int failed_by;      /* participant whose failure closed the last broken generation */
};

ot_status ot_barrier_create(int n, ot_barrier **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "barrier: NULL output");
    *out = NULL;
    if (n < 1) return ot_error(OT_ERR_INVALID_ARGUMENT, "barrier: %d participants", n);
    ot_barrier *b = ot_calloc(1, sizeof *b);
    bool *f = ot_calloc((size_t)n * 2, sizeof(bool));
    ot_status *o = ot_calloc(OUTCOMES, sizeof(ot_status));
    if (!b || !f || !o) {
        ot_free(b), ot_free(f), ot_free(o);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "barrier: out of memory");
    }
    b->n = n;
    b->expected = n;
    b->failed = f;
    b->here = f + n;
    b->outcome = o;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = b;
    return OT_OK;
}

void ot_barrier_free(ot_barrier *b) {
    if (!b) return;
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    ot_free(b->failed);
    ot_free(b->outcome);
    ot_free(b);
}

/* Closes the current generation with `outcome`; called with the lock held. */
static void close_gen(ot_barrier *b, ot_status outcome) {
    b->outcome[b->gen % OUTCOMES] = outcome;
    b->gen++;
    b->arrived = 0;
    for (int i = 0; i < b->n; i++) b->here[i] = false;
    pthread_cond_broadcast(&b->cv);
}

ot_status ot_barrier_wait(ot_barrier *b, int p, int64_t timeout_ns, uint64_t *generation) {
    if (!b) return ot_error(OT_ERR_INVALID_ARGUMENT, "barrier: NULL barrier");
    if (p < 0 || p >= b->n)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "barrier: participant %d outside 0..%d", p,
                        b->n - 1);
    uint64_t dl = timeout_ns > 0 ? ot_now_ns() + (uint64_t)timeout_ns : 0;
    pthread_mutex_lock(&b->mu);
    uint64_t g = b->gen;
    if (generation) *generation = g;
    ot_status st = OT_OK;
    if (b->failed[p]) {
        st = ot_error(OT_ERR_FAILED_PRECONDITION, "barrier: participant %d was declared failed", p);
    } else if (b->here[p]) {
        st = ot_error(OT_ERR_INVALID_ARGUMENT,
                      "barrier: participant %d arrived twice in generation %llu", p,
                      (unsigned long long)g);
    } else {
        b->here[p] = true;
        if (++b->arrived >= b->expected) {
            close_gen(b, OT_OK);
        } else {
            while (b->gen == g) {
                if (dl && ot_now_ns() >= dl) {
                    close_gen(b, OT_ERR_TIMEOUT);
                    break;
                }
                if (dl) {
                    struct timespec ts = {(time_t)(dl / 1000000000ull), (long)(dl % 1000000000ull)};
                    pthread_cond_timedwait(&b->cv, &b->mu, &ts);
                } else {
                    pthread_cond_wait(&b->cv, &b->mu);
                }
            }
        }
        st = b->outcome[g % OUTCOMES];
        if (st == OT_ERR_TIMEOUT)
            st = ot_error(st, "barrier: generation %llu timed out", (unsigned long long)g);
        else if (st == OT_ERR_PEER_FAILED)
            st = ot_error(st, "barrier: participant %d failed during generation %llu", b->failed_by,
                          (unsigned long long)g);
    }
    pthread_mutex_unlock(&b->mu);
    return st;
}

void ot_barrier_fail(ot_barrier *b, int p) {
    if (!b || p < 0 || p >= b->n) return;
    pthread_mutex_lock(&b->mu);
    if (!b->failed[p]) {
        b->failed[p] = true;
        b->expected--;
        b->failed_by = p;
        /* the waiters of this generation cannot complete it as planned */
        if (b->arrived > 0 || b->here[p]) close_gen(b, OT_ERR_PEER_FAILED);
    }
    pthread_mutex_unlock(&b->mu);
}

void ot_barrier_rejoin(ot_barrier *b, int p) {
    if (!b || p < 0 || p >= b->n) return;
    pthread_mutex_lock(&b->mu);
    if (b->failed[p]) {
        b->failed[p] = false;
        b->expected++;
    }
    pthread_mutex_unlock(&b->mu);
}

uint64_t ot_barrier_generation(const ot_barrier *b) {
    pthread_mutex_lock((pthread_mutex_t *)&b->mu);
    uint64_t g = b->gen;
    pthread_mutex_unlock((pthread_mutex_t *)&b->mu);
    return g;
}

int ot_barrier_expected(const ot_barrier *b) {
    pthread_mutex_lock((pthread_mutex_t *)&b->mu);
    int e = b->expected;
    pthread_mutex_unlock((pthread_mutex_t *)&b->mu);
    return e;
}

int ot_barrier_arrived(const ot_barrier *b) {
    pthread_mutex_lock((pthread_mutex_t *)&b->mu);
    int a = b->arrived;
    pthread_mutex_unlock((pthread_mutex_t *)&b->mu);
    return a;
}
