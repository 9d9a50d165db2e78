/* Synchronization object: per-server clock filters fed by one exchange per round (a burst on the
 * first), RFC 5905 mitigation across servers, a system poll interval adapted to the residual
 * offset, and the process-wide published offset. The local clock is never adjusted: the offset
 * is tracked and applied by readers (ot_clock_synced_wall_ns). */
#include "optitpu/clock.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct sync_server {
    char *name;
    ot_ntp_filter filter;
    double root_delay, root_disp;
    int stratum, leap;
    uint8_t reach; /* shift register: 1 bit per round, 1 = answered */
} sync_server;

struct ot_clock_sync {
    ot_clock_sync_options o;
    int n;
    sync_server *srv;
    ot_ntp_peer_class *cls;
    ot_ntp_poll poll;
    bool first_round_done;
    double prev_offset;
    pthread_mutex_t update_mu; /* serializes updates (caller's thread vs background thread) */
    pthread_mutex_t mu;        /* guards est, cls and poll for readers */
    ot_clock_estimate est;
    /* background thread */
    pthread_t thread;
    bool running;
    bool stopping;
    pthread_cond_t cv;
};

static atomic_llong g_offset_ns;
static atomic_bool g_published;

void ot_clock_publish_offset_ns(int64_t offset_ns) {
    atomic_store(&g_offset_ns, offset_ns);
    atomic_store(&g_published, true);
}

void ot_clock_unpublish(void) {
    atomic_store(&g_published, false);
    atomic_store(&g_offset_ns, 0);
}

bool ot_clock_offset_ns(int64_t *offset_ns) {
    bool p = atomic_load(&g_published);
    *offset_ns = p ? (int64_t)atomic_load(&g_offset_ns) : 0;
    return p;
}

uint64_t ot_clock_synced_wall_ns(void) {
    int64_t off;
    ot_clock_offset_ns(&off);
    return (uint64_t)((int64_t)ot_wall_ns() + off);
}

int64_t ot_clock_mono_to_synced_ns(uint64_t mono_ns) {
    int64_t off;
    ot_clock_offset_ns(&off);
    uint64_t m0 = ot_now_ns(), w = ot_wall_ns(), m1 = ot_now_ns();
    int64_t wall_minus_mono = (int64_t)w - (int64_t)(m0 / 2 + m1 / 2 + (m0 & m1 & 1));
    return (int64_t)mono_ns + wall_minus_mono + off;
}

ot_clock_sync_options ot_clock_sync_options_default(void) {
    return (ot_clock_sync_options){.minpoll = 4,
                                   .maxpoll = 10,
                                   .timeout_ms = 1000,
                                   .burst = 4,
                                   .burst_interval_ms = 500,
                                   .publish = true};
}

ot_status ot_clock_sync_create(const char *const *servers, int n, const ot_clock_sync_options *opt,
                               ot_clock_sync **out) {
    *out = NULL;
    if (n < 1 || n > OT_NTP_MAX_PEERS || !servers)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "clock sync: %d servers (1..%d)", n,
                        OT_NTP_MAX_PEERS);
    ot_clock_sync_options o = opt ? *opt : ot_clock_sync_options_default();
    if (o.burst < 1 || o.burst > OT_NTP_MAX_SAMPLES || o.timeout_ms < 1 || o.burst_interval_ms < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "clock sync: burst 1..%d, timeout > 0 and interval >= 0 required",
                        OT_NTP_MAX_SAMPLES);
    for (int i = 0; i < n; i++) {
        char host[256];
        int port;
        if (!servers[i]) return ot_error(OT_ERR_INVALID_ARGUMENT, "clock sync: server %d NULL", i);
        OT_CHECK(ot_ntp_split_host_port(servers[i], host, sizeof host, &port));
    }
    ot_status rc = OT_ERR_OUT_OF_MEMORY;
    ot_clock_sync *s = ot_calloc(1, sizeof *s);
    if (!s) goto oom;
    s->o = o;
    s->srv = ot_calloc((size_t)n, sizeof *s->srv);
    if (!s->srv) goto oom_s;
    s->cls = ot_calloc((size_t)n, sizeof *s->cls);
    if (!s->cls) goto oom_srv;
    for (int i = 0; i < n; i++) {
        s->srv[i].name = ot_strdup(servers[i]);
        if (!s->srv[i].name) goto oom_names;
        s->n = i + 1;
        ot_ntp_filter_init(&s->srv[i].filter);
    }
    ot_ntp_poll_init(&s->poll, o.minpoll, o.maxpoll);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->update_mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->est.poll = s->poll.poll;
    *out = s;
    return OT_OK;
oom_names:
    for (int i = 0; i < s->n; i++) ot_free(s->srv[i].name);
    ot_free(s->cls);
oom_srv:
    ot_free(s->srv);
oom_s:
    ot_free(s);
oom:
    return ot_error(rc, "clock sync: out of memory");
}

void ot_clock_sync_free(ot_clock_sync *s) {
    if (!s) return;
    ot_clock_sync_stop(s);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->update_mu);
    for (int i = 0; i < s->n; i++) ot_free(s->srv[i].name);
    ot_free(s->cls);
    ot_free(s->srv);
    ot_free(s);
}

static ot_status sync_update_locked(ot_clock_sync *s);

ot_status ot_clock_sync_update(ot_clock_sync *s) {
    pthread_mutex_lock(&s->update_mu);
    ot_status rc = sync_update_locked(s);
    pthread_mutex_unlock(&s->update_mu);
    return rc;
}

static ot_status sync_update_locked(ot_clock_sync *s) {
    int answered = 0;
    ot_status last_err = OT_OK;
    char last_msg[256] = "";
    for (int i = 0; i < s->n; i++) {
        sync_server *v = &s->srv[i];
        ot_ntp_query_options qo = ot_ntp_query_options_default();
        qo.samples = s->first_round_done ? 1 : s->o.burst;
        qo.interval_ms = s->o.burst_interval_ms;
        qo.timeout_ms = s->o.timeout_ms;
        ot_ntp_query_result r;
        ot_status qs = ot_ntp_query(v->name, &qo, &r);
        v->reach = (uint8_t)(v->reach << 1);
        if (qs != OT_OK) {
            last_err = qs;
            snprintf(last_msg, sizeof last_msg, "%s", ot_last_error());
            char kiss[5] = "";
            if (r.last_reply.stratum == 0 && r.count[OT_NTP_KISS]) {
                ot_ntp_kiss_code(&r.last_reply, kiss);
                if (!strcmp(kiss, "RATE")) {
                    pthread_mutex_lock(&s->mu);
                    ot_ntp_poll_backoff(&s->poll);
                    pthread_mutex_unlock(&s->mu);
                }
            }
            ot_log(OT_LOG_INFO, "clock sync: %s: %s", v->name, last_msg);
            continue;
        }
        answered++;
        v->reach |= 1;
        v->root_delay = ot_ntp_short_to_s(r.last_reply.root_delay);
        v->root_disp = ot_ntp_short_to_s(r.last_reply.root_dispersion);
        v->stratum = r.last_reply.stratum;
        v->leap = r.last_reply.leap;
        for (int j = 0; j < r.n_samples; j++)
            ot_ntp_filter_add(&v->filter, r.sample[j].offset, r.sample[j].delay,
                              r.sample[j].dispersion, (double)ot_now_ns() / 1e9,
                              ot_ntp_local_precision());
    }
    s->first_round_done = true;
    double now = (double)ot_now_ns() / 1e9;
    ot_ntp_candidate c[OT_NTP_MAX_PEERS];
    for (int i = 0; i < s->n; i++) {
        sync_server *v = &s->srv[i];
        c[i] = (ot_ntp_candidate){.offset = v->filter.offset,
                                  .delay = v->filter.delay,
                                  .disp = ot_ntp_filter_disp(&v->filter, now),
                                  .jitter = v->filter.jitter,
                                  .root_delay = v->root_delay,
                                  .root_disp = v->root_disp,
                                  .t = v->filter.valid ? v->filter.t : now,
                                  .stratum = v->stratum,
                                  .leap = v->leap,
                                  .reachable = v->reach != 0 && v->filter.valid};
    }
    ot_ntp_peer_class cls[OT_NTP_MAX_PEERS];
    ot_ntp_system sys;
    ot_status ms = ot_ntp_mitigate(c, s->n, now, cls, &sys);
    pthread_mutex_lock(&s->mu);
    memcpy(s->cls, cls, (size_t)s->n * sizeof *cls);
    if (ms == OT_OK) {
        ot_ntp_poll_update(&s->poll, sys.offset - s->prev_offset, sys.jitter);
        s->prev_offset = sys.offset;
        s->est.synchronized = true;
        s->est.offset_ns = (int64_t)llround(sys.offset * 1e9);
        s->est.jitter_ns = (int64_t)llround(sys.jitter * 1e9);
        s->est.root_distance_ns = (int64_t)llround(sys.root_distance * 1e9);
        s->est.n_survivors = sys.n_survivors;
        s->est.updated_mono_ns = ot_now_ns();
    } else if (answered == 0) {
        ot_ntp_poll_backoff(&s->poll);
    }
    s->est.poll = s->poll.poll;
    int64_t off = s->est.offset_ns;
    pthread_mutex_unlock(&s->mu);
    if (ms == OT_OK) {
        if (s->o.publish) ot_clock_publish_offset_ns(off);
        return OT_OK;
    }
    if (answered == 0)
        return ot_error(last_err ? last_err : OT_ERR_TIMEOUT,
                        "clock sync: no server answered (last: %s)", last_msg);
    return ms; /* message from the mitigation */
}

static void *sync_thread(void *arg) {
    ot_clock_sync *s = arg;
    for (;;) {
        ot_clock_sync_update(s);
        pthread_mutex_lock(&s->mu);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += (time_t)1 << s->poll.poll;
        while (!s->stopping) {
            if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT) break;
        }
        bool stop = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
    }
    return NULL;
}

ot_status ot_clock_sync_start(ot_clock_sync *s) {
    if (s->running) return ot_error(OT_ERR_FAILED_PRECONDITION, "clock sync: already started");
    /* the condition variable must time out on CLOCK_MONOTONIC */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_destroy(&s->cv);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->stopping = false;
    int e = pthread_create(&s->thread, NULL, sync_thread, s);
    if (e) return ot_error(OT_ERR_INTERNAL, "clock sync: pthread_create: %s", strerror(e));
    s->running = true;
    return OT_OK;
}

void ot_clock_sync_stop(ot_clock_sync *s) {
    if (!s->running) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->running = false;
}

ot_clock_estimate ot_clock_sync_estimate(const ot_clock_sync *s) {
    ot_clock_sync *m = (ot_clock_sync *)s;
    pthread_mutex_lock(&m->mu);
    ot_clock_estimate e = s->est;
    pthread_mutex_unlock(&m->mu);
    return e;
}

ot_ntp_peer_class ot_clock_sync_server_class(const ot_clock_sync *s, int i) {
    if (i < 0 || i >= s->n) return OT_NTP_UNFIT;
    ot_clock_sync *m = (ot_clock_sync *)s;
    pthread_mutex_lock(&m->mu);
    ot_ntp_peer_class c = s->cls[i];
    pthread_mutex_unlock(&m->mu);
    return c;
}
