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
    double prev_offset, prev_t; /* last system offset and when it was found */
    double hist_t[OT_CLOCK_DRIFT_HISTORY], hist_off[OT_CLOCK_DRIFT_HISTORY]; /* oldest first */
    int n_hist;
    double freq;
    pthread_mutex_t update_mu; /* serializes updates (caller's thread vs background thread) */
    pthread_mutex_t mu;        /* guards est, cls and poll for readers */
    ot_clock_estimate est;
    /* background thread */
    pthread_t thread;
    bool running;
    bool stopping;
    pthread_cond_t cv;
};

/* The published offset: a sequence lock over (offset, frequency, reference time). Writers are
 * serialized by g_write; readers retry while the sequence is odd or changed. */
static atomic_uint g_seq;
static atomic_llong g_offset_ns;
static atomic_llong g_freq_ppt; /* parts per trillion */
static atomic_ullong g_ref_mono;
static atomic_bool g_published;
static pthread_mutex_t g_write = PTHREAD_MUTEX_INITIALIZER;

ot_status ot_clock_fit_drift(const double *t, const double *offset, int n, double *freq,
                             double *offset_at_last) {
    if (n < 2) return ot_error(OT_ERR_FAILED_PRECONDITION, "clock drift: %d point(s), need 2", n);
    double mt = 0, mo = 0;
    for (int i = 0; i < n; i++) mt += t[i], mo += offset[i];
    mt /= n, mo /= n;
    double sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        sxx += (t[i] - mt) * (t[i] - mt);
        sxy += (t[i] - mt) * (offset[i] - mo);
    }
    if (!(sxx > 0))
        return ot_error(OT_ERR_FAILED_PRECONDITION, "clock drift: all points at the same time");
    *freq = sxy / sxx;
    *offset_at_last = mo + *freq * (t[n - 1] - mt);
    return OT_OK;
}

void ot_clock_publish(int64_t offset_ns, double freq, uint64_t ref_mono_ns) {
    if (!(freq == freq)) freq = 0;
    freq = fmax(-OT_NTP_MAXFREQ, fmin(OT_NTP_MAXFREQ, freq));
    pthread_mutex_lock(&g_write);
    atomic_fetch_add(&g_seq, 1);
    atomic_store(&g_offset_ns, offset_ns);
    atomic_store(&g_freq_ppt, llround(freq * 1e12));
    atomic_store(&g_ref_mono, ref_mono_ns);
    atomic_store(&g_published, true);
    atomic_fetch_add(&g_seq, 1);
    pthread_mutex_unlock(&g_write);
}

void ot_clock_publish_offset_ns(int64_t offset_ns) {
    ot_clock_publish(offset_ns, 0, ot_now_ns());
}

void ot_clock_unpublish(void) {
    pthread_mutex_lock(&g_write);
    atomic_fetch_add(&g_seq, 1);
    atomic_store(&g_published, false);
    atomic_store(&g_offset_ns, 0);
    atomic_store(&g_freq_ppt, 0);
    atomic_fetch_add(&g_seq, 1);
    pthread_mutex_unlock(&g_write);
}

bool ot_clock_offset_at_ns(uint64_t mono_ns, int64_t *offset_ns) {
    unsigned s0, s1;
    long long off, fppt;
    unsigned long long ref;
    bool pub;
    do {
        s0 = atomic_load(&g_seq);
        off = atomic_load(&g_offset_ns);
        fppt = atomic_load(&g_freq_ppt);
        ref = atomic_load(&g_ref_mono);
        pub = atomic_load(&g_published);
        s1 = atomic_load(&g_seq);
    } while ((s0 & 1) || s0 != s1);
    if (!pub) {
        *offset_ns = 0;
        return false;
    }
    double dt_ns = (double)((int64_t)mono_ns - (int64_t)ref);
    *offset_ns = off + (int64_t)llround(dt_ns * (double)fppt * 1e-12);
    return true;
}

bool ot_clock_offset_ns(int64_t *offset_ns) {
    return ot_clock_offset_at_ns(ot_now_ns(), offset_ns);
}

uint64_t ot_clock_synced_wall_ns(void) {
    int64_t off;
    ot_clock_offset_ns(&off);
    return (uint64_t)((int64_t)ot_wall_ns() + off);
}

int64_t ot_clock_mono_to_synced_ns(uint64_t mono_ns) {
    int64_t off;
    ot_clock_offset_at_ns(mono_ns, &off);
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
    bool fresh = false; /* some server's filter took a new sample */
    ot_status last_err = OT_OK;
    char last_msg[256] = "";
    for (int i = 0; i < s->n; i++) {
        sync_server *v = &s->srv[i];
        ot_ntp_query_options qo = ot_ntp_query_options_default();
        qo.samples = s->first_round_done ? 1 : s->o.burst;
        qo.interval_ms = s->o.burst_interval_ms;
        qo.timeout_ms = s->o.timeout_ms;
        qo.skip_distance_check = true; /* the selection below judges fitness over the filter */
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
            fresh |= ot_ntp_filter_add(&v->filter, r.sample[j].offset, r.sample[j].delay,
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
        /* residual against what the drift model predicted for now */
        double predicted = s->prev_offset + s->freq * (now - s->prev_t);
        ot_ntp_poll_update(&s->poll, sys.offset - predicted, sys.jitter);
        s->prev_offset = sys.offset;
        s->prev_t = now;
        if (fresh) {
            if (s->n_hist == OT_CLOCK_DRIFT_HISTORY) {
                memmove(s->hist_t, s->hist_t + 1, (OT_CLOCK_DRIFT_HISTORY - 1) * sizeof(double));
                memmove(s->hist_off, s->hist_off + 1,
                        (OT_CLOCK_DRIFT_HISTORY - 1) * sizeof(double));
                s->n_hist--;
            }
            s->hist_t[s->n_hist] = now;
            s->hist_off[s->n_hist] = sys.offset;
            s->n_hist++;
        }
        double freq = 0, at_last;
        if (s->n_hist >= 4 && s->hist_t[s->n_hist - 1] - s->hist_t[0] >= OT_CLOCK_DRIFT_MIN_SPAN &&
            ot_clock_fit_drift(s->hist_t, s->hist_off, s->n_hist, &freq, &at_last) == OT_OK)
            freq = fmax(-OT_NTP_MAXFREQ, fmin(OT_NTP_MAXFREQ, freq));
        s->freq = freq;
        s->est.freq_ppm = freq * 1e6;
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
        if (s->o.publish) ot_clock_publish(off, s->freq, s->est.updated_mono_ns);
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

ot_status ot_clock_sync_server_info(const ot_clock_sync *s, int i, ot_clock_server_info *out) {
    if (i < 0 || i >= s->n)
        return ot_error(OT_ERR_OUT_OF_RANGE, "clock sync: server %d of %d", i, s->n);
    ot_clock_sync *m = (ot_clock_sync *)s;
    pthread_mutex_lock(&m->update_mu); /* a consistent view between rounds */
    const sync_server *v = &s->srv[i];
    double now = (double)ot_now_ns() / 1e9;
    ot_ntp_candidate c = {.offset = v->filter.offset,
                          .delay = v->filter.delay,
                          .disp = ot_ntp_filter_disp(&v->filter, now),
                          .jitter = v->filter.jitter,
                          .root_delay = v->root_delay,
                          .root_disp = v->root_disp,
                          .t = v->filter.valid ? v->filter.t : now};
    *out = (ot_clock_server_info){.name = v->name,
                                  .cls = s->cls[i],
                                  .valid = v->filter.valid,
                                  .offset = v->filter.offset,
                                  .delay = v->filter.delay,
                                  .jitter = v->filter.jitter,
                                  .root_distance = ot_ntp_root_distance(&c, now),
                                  .stratum = v->stratum,
                                  .reach = v->reach};
    pthread_mutex_unlock(&m->update_mu);
    return OT_OK;
}
