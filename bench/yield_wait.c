/* How long a waiting thread takes to see a message when the core it shares is held by a thread
 * that keeps computing: the scheduler's latency that a waiting MPI rank pays.
 *   ours:     the waiter polls a flag and calls sched_yield between polls, as optitpu's MPI
 *             transport waits (src/mpi: MPI_Test, sched_yield) and Open MPI's progress with
 *             mpi_yield_when_idle;
 *   baseline: the waiter sleeps on a condition variable (a futex), as the in-process transport
 *             and the runtime pool wait once their spin is over.
 * Both threads are pinned to CPU 0. Each round the holder computes for --busy-us, sets the flag
 * (or signals), keeps computing until the waiter has seen it (at most 50 ms), then sleeps 200 us
 * so the waiter runs as it would between a step's messages. One waiter at a time: started, two
 * warm-up rounds, one timed round. Figures: the median and the mean of --reps timed rounds, the
 * waiter kinds interleaved; ratio = baseline / ours (> 1:
 * the yielding waiter is faster). Other processes' load on CPU 0 is in the figures: print the
 * load beside them.
 *   bench_yield_wait [--json] [--reps N] [--busy-us U] */
#include "optitpu/bench.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void pin_cpu0(void) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(0, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

typedef struct {
    atomic_int flag; /* 1: the message is there; -1: stop */
    atomic_llong seen_ns;
    int sleeper; /* 0: poll and yield, 1: condition variable */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} wait_ctx;

static void *waiter(void *arg) {
    wait_ctx *w = arg;
    pin_cpu0();
    for (;;) {
        int f = atomic_load(&w->flag);
        if (f < 0) return NULL;
        if (f > 0) {
            if (atomic_load(&w->seen_ns) == 0) atomic_store(&w->seen_ns, now_ns());
        }
        if (w->sleeper) {
            pthread_mutex_lock(&w->mu);
            while (atomic_load(&w->flag) == 0 ||
                   (atomic_load(&w->flag) > 0 && atomic_load(&w->seen_ns) != 0))
                pthread_cond_wait(&w->cv, &w->mu);
            pthread_mutex_unlock(&w->mu);
        } else {
            sched_yield();
        }
    }
}

static void busy_until(int64_t t_ns) {
    while (now_ns() < t_ns) {
    }
}

/* One round: returns the waiter's latency in us (the holder sets the flag at t0). */
static double round_us(wait_ctx *w, double busy_us) {
    atomic_store(&w->seen_ns, 0);
    busy_until(now_ns() + (int64_t)(busy_us * 1e3));
    int64_t t0 = now_ns();
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->flag, 1);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    /* keep the core: the holder does not block or yield while the message waits */
    while (atomic_load(&w->seen_ns) == 0 && now_ns() - t0 < 50000000) {
    }
    int64_t seen = atomic_load(&w->seen_ns);
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->flag, 0);
    pthread_mutex_unlock(&w->mu);
    struct timespec sl = {0, 200000};
    nanosleep(&sl, NULL);
    return seen ? (double)(seen - t0) / 1e3 : 50000.0;
}

static int start(wait_ctx *w, int sleeper, pthread_t *t) {
    memset(w, 0, sizeof *w);
    w->sleeper = sleeper;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    return pthread_create(t, NULL, waiter, w);
}

static void stop(wait_ctx *w, pthread_t t) {
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->flag, -1);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(t, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

int main(int argc, char **argv) {
    bool json = false;
    int reps = 100;
    double busy_us = 1000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--busy-us") && i + 1 < argc && atof(argv[i + 1]) >= 0) {
            busy_us = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_yield_wait [--json] [--reps N] [--busy-us U]\n");
            return 2;
        }
    }
    pin_cpu0();
    double *lat[2];
    lat[0] = calloc((size_t)reps, sizeof(double));
    lat[1] = calloc((size_t)reps, sizeof(double));
    if (!lat[0] || !lat[1]) return 1;
    /* one waiter at a time (a second one would share the core), kinds interleaved */
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < 2; k++) {
            wait_ctx w;
            pthread_t t;
            if (start(&w, k, &t) != 0) return 1;
            for (int q = 0; q < 2; q++) round_us(&w, busy_us); /* warm-up */
            lat[k][r] = round_us(&w, busy_us);
            stop(&w, t);
        }
    double mean[2] = {0, 0}, med[2];
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < reps; r++) mean[k] += lat[k][r] / reps;
        med[k] = ot_bench_median(lat[k], reps);
    }
    ot_bench_print_header(json);
    char cs[2][96];
    snprintf(cs[0], sizeof cs[0], "waiter behind a busy thread, median of %d", reps);
    snprintf(cs[1], sizeof cs[1], "waiter behind a busy thread, mean of %d", reps);
    const double *v[2] = {med, mean};
    for (int q = 0; q < 2; q++) {
        ot_bench_row row = {.bench = "yield_wait",
                            .case_name = cs[q],
                            .metric = "us",
                            .value = v[q][0],
                            .baseline = "condition-variable sleeper",
                            .baseline_value = v[q][1],
                            .ratio = v[q][0] > 0 ? v[q][1] / v[q][0] : 0};
        ot_bench_print(&row, json);
    }
    free(lat[0]);
    free(lat[1]);
    return 0;
}
