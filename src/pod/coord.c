/* The coordinator (registry, health state machine, failure detection, epochs, channels, load
 * balancing, events) and the phi-accrual failure detector. Time comes from an injectable clock,
 * so tests drive it deterministically. */
#include "pod_internal.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* ---- phi accrual ---------------------------------------------------------------------------- */

struct ot_phi_detector {
    ot_phi_options o;
    double *win;
    int n, head;
    double sum, sumsq;
    uint64_t last;
    bool have_last;
};

ot_phi_options ot_phi_options_default(void) {
    ot_phi_options o = {.window = 1000,
                        .min_std_ns = 10000000,
                        .acceptable_pause_ns = 0,
                        .first_interval_ns = 100000000};
    return o;
}

static ot_status phi_init(ot_phi_detector *d, const ot_phi_options *o) {
    memset(d, 0, sizeof *d);
    d->o = o ? *o : ot_phi_options_default();
    if (d->o.window < 1 || d->o.window > 1000000)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "phi detector: window %d outside 1..1000000",
                        d->o.window);
    d->win = ot_malloc(sizeof(double) * (size_t)d->o.window);
    if (!d->win) return ot_error(OT_ERR_OUT_OF_MEMORY, "phi detector: out of memory");
    return OT_OK;
}

ot_status ot_phi_create(const ot_phi_options *o, ot_phi_detector **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "phi detector: NULL output");
    *out = NULL;
    ot_phi_detector *d = ot_malloc(sizeof *d);
    if (!d) return ot_error(OT_ERR_OUT_OF_MEMORY, "phi detector: out of memory");
    ot_status st = phi_init(d, o);
    if (st != OT_OK) {
        ot_free(d);
        return st;
    }
    *out = d;
    return OT_OK;
}

void ot_phi_free(ot_phi_detector *d) {
    if (!d) return;
    ot_free(d->win);
    ot_free(d);
}

void ot_phi_heartbeat(ot_phi_detector *d, uint64_t now) {
    if (d->have_last && now >= d->last) {
        double x = (double)(now - d->last);
        if (d->n == d->o.window) {
            double old = d->win[d->head];
            d->sum -= old;
            d->sumsq -= old * old;
        } else {
            d->n++;
        }
        d->win[d->head] = x;
        d->head = (d->head + 1) % d->o.window;
        d->sum += x;
        d->sumsq += x * x;
    }
    d->last = now;
    d->have_last = true;
}

void ot_phi_stats(const ot_phi_detector *d, double *mean, double *std) {
    double m, s;
    if (d->n == 0) {
        m = (double)d->o.first_interval_ns;
        s = m / 4;
    } else {
        m = d->sum / d->n;
        double var = d->sumsq / d->n - m * m;
        s = var > 0 ? sqrt(var) : 0;
    }
    if (s < (double)d->o.min_std_ns) s = (double)d->o.min_std_ns;
    *mean = m;
    *std = s;
}

double ot_phi_value(const ot_phi_detector *d, uint64_t now) {
    if (!d->have_last) return 0;
    double mean, std;
    ot_phi_stats(d, &mean, &std);
    mean += (double)d->o.acceptable_pause_ns;
    double diff = now > d->last ? (double)(now - d->last) : 0;
    double y = (diff - mean) / std;
    /* P(later than diff) ~ 1 / (1 + exp(z)) (logistic approximation of the normal tail);
     * phi = log10(1 + exp(z)), computed without overflow */
    double z = y * (1.5976 + 0.070566 * y * y);
    double sp = z > 0 ? z + log1p(exp(-z)) : log1p(exp(z));
    return sp / log(10.0);
}

/* ---- coordinator ---------------------------------------------------------------------------- */

typedef struct device {
    char *name;
    ot_device_state state;
    ot_phi_detector det;
    uint64_t last_hb;
    bool have_hb;
    int recover_count;
    int64_t load;
    double tput;
    double swrr;
} device;

typedef struct chan {
    uint64_t key; /* (src + 1) << 32 | (dst + 1); 0 = empty */
    ot_channel_stats s;
} chan;

typedef struct sub {
    unsigned mask;
    ot_coord_event_fn fn;
    void *ud;
    int id;
} sub;

struct ot_coord {
    ot_coord_options o;
    pthread_mutex_t mu;
    device *dev;
    int ndev, capdev;
    uint64_t epoch;
    int rr_cursor;
    chan *chans;
    size_t nchan, capchan;
    sub *subs;
    int nsubs, capsubs, next_sub;
};

typedef struct evbuf {
    ot_coord_event *e;
    int n, cap;
} evbuf;

static const char *const state_names[] = {"joining", "healthy",    "suspect",
                                          "failed",  "recovering", "removed"};
_Static_assert(sizeof state_names / sizeof *state_names == OT_DEV_STATE_COUNT, "state names");

const char *ot_device_state_name(ot_device_state s) {
    return s >= 0 && s < OT_DEV_STATE_COUNT ? state_names[s] : "?";
}

ot_coord_options ot_coord_options_default(void) {
    ot_coord_options o = {.clock = NULL,
                          .clock_ud = NULL,
                          .detector = OT_DETECT_PHI,
                          .phi_suspect = 5,
                          .phi_fail = 8,
                          .timeout_ns = 1000000000,
                          .phi = ot_phi_options_default(),
                          .recover_heartbeats = 3};
    return o;
}

ot_status ot_coord_create(const ot_coord_options *o, ot_coord **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "coordinator: NULL output");
    *out = NULL;
    ot_coord_options oo = o ? *o : ot_coord_options_default();
    if (!(oo.phi_suspect > 0) || !(oo.phi_fail >= oo.phi_suspect) || oo.recover_heartbeats < 1 ||
        oo.timeout_ns == 0 || oo.phi.window < 1)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "coordinator: need 0 < phi_suspect <= phi_fail, recover_heartbeats >= 1, "
                        "timeout > 0, window >= 1");
    ot_coord *c = ot_calloc(1, sizeof *c);
    if (!c) return ot_error(OT_ERR_OUT_OF_MEMORY, "coordinator: out of memory");
    c->o = oo;
    c->rr_cursor = -1;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return OT_OK;
}

void ot_coord_free(ot_coord *c) {
    if (!c) return;
    for (int i = 0; i < c->ndev; i++) {
        ot_free(c->dev[i].name);
        ot_free(c->dev[i].det.win);
    }
    ot_free(c->dev);
    ot_free(c->chans);
    ot_free(c->subs);
    pthread_mutex_destroy(&c->mu);
    ot_free(c);
}

static uint64_t cnow(const ot_coord *c) {
    return ot_pod_now(c->o.clock, c->o.clock_ud);
}

static bool is_member(ot_device_state s) {
    return s == OT_DEV_HEALTHY || s == OT_DEV_SUSPECT;
}

static void push(evbuf *b, ot_coord_event e) {
    if (b->n == b->cap) {
        int nc = b->cap ? b->cap * 2 : 8;
        ot_coord_event *p = ot_realloc(b->e, sizeof *p * (size_t)nc);
        if (!p) return; /* an event lost to memory exhaustion; state stays consistent */
        b->e = p;
        b->cap = nc;
    }
    b->e[b->n++] = e;
}

/* Moves device id to state `to`, queueing its event and the epoch change. */
static void transition(ot_coord *c, int id, ot_device_state to, ot_coord_event_kind kind, evbuf *b,
                       uint64_t now, double phi) {
    device *d = &c->dev[id];
    ot_device_state from = d->state;
    if (from == to) return;
    d->state = to;
    bool changed = is_member(from) != is_member(to);
    if (changed) c->epoch++;
    push(b, (ot_coord_event){kind, id, from, to, c->epoch, now, phi});
    if (changed) push(b, (ot_coord_event){OT_EVENT_EPOCH, -1, from, to, c->epoch, now, phi});
}

/* Unlocks, then delivers the queued events to a snapshot of the subscribers. */
static void unlock_and_dispatch(ot_coord *c, evbuf *b) {
    sub *snap = NULL;
    int ns = c->nsubs;
    if (b->n && ns) {
        snap = ot_malloc(sizeof *snap * (size_t)ns);
        if (snap) memcpy(snap, c->subs, sizeof *snap * (size_t)ns);
    }
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < b->n && snap; i++)
        for (int k = 0; k < ns; k++)
            if (snap[k].mask & (unsigned)b->e[i].kind) snap[k].fn(snap[k].ud, &b->e[i]);
    ot_free(snap);
    ot_free(b->e);
}

ot_status ot_coord_register(ot_coord *c, const char *name, int *id) {
    if (!c || !name || !id) return ot_error(OT_ERR_INVALID_ARGUMENT, "register: NULL argument");
    pthread_mutex_lock(&c->mu);
    ot_status st = OT_OK;
    if (c->ndev == c->capdev) {
        int nc = c->capdev ? c->capdev * 2 : 8;
        device *p = ot_realloc(c->dev, sizeof *p * (size_t)nc);
        if (!p) {
            st = ot_error(OT_ERR_OUT_OF_MEMORY, "register: out of memory");
            goto out;
        }
        c->dev = p;
        c->capdev = nc;
    }
    device *d = &c->dev[c->ndev];
    memset(d, 0, sizeof *d);
    st = phi_init(&d->det, &c->o.phi);
    if (st != OT_OK) goto out;
    d->name = ot_strdup(name);
    if (!d->name) {
        ot_free(d->det.win);
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "register: out of memory");
        goto out;
    }
    d->state = OT_DEV_JOINING;
    *id = c->ndev++;
out:
    pthread_mutex_unlock(&c->mu);
    return st;
}

static ot_status check_id(const ot_coord *c, int id, const char *what) {
    if (id < 0 || id >= c->ndev)
        return ot_error(OT_ERR_NOT_FOUND, "%s: no device %d (%d registered)", what, id, c->ndev);
    return OT_OK;
}

ot_status ot_coord_heartbeat(ot_coord *c, int id) {
    if (!c) return ot_error(OT_ERR_INVALID_ARGUMENT, "heartbeat: NULL coordinator");
    evbuf b = {0};
    pthread_mutex_lock(&c->mu);
    ot_status st = check_id(c, id, "heartbeat");
    if (st == OT_OK) {
        device *d = &c->dev[id];
        uint64_t now = cnow(c);
        if (d->state == OT_DEV_REMOVED) {
            st = ot_error(OT_ERR_FAILED_PRECONDITION, "heartbeat: device %d was removed", id);
        } else {
            ot_phi_heartbeat(&d->det, now);
            d->last_hb = now;
            d->have_hb = true;
            switch (d->state) {
            case OT_DEV_JOINING:
                transition(c, id, OT_DEV_HEALTHY, OT_EVENT_JOINED, &b, now, 0);
                break;
            case OT_DEV_SUSPECT:
                transition(c, id, OT_DEV_HEALTHY, OT_EVENT_RECOVERED, &b, now, 0);
                break;
            case OT_DEV_FAILED:
                d->recover_count = 1;
                transition(c, id, OT_DEV_RECOVERING, OT_EVENT_RECOVERED, &b, now, 0);
                b.n--; /* RECOVERED is announced when it is healthy again */
                if (d->recover_count >= c->o.recover_heartbeats)
                    transition(c, id, OT_DEV_HEALTHY, OT_EVENT_RECOVERED, &b, now, 0);
                break;
            case OT_DEV_RECOVERING:
                if (++d->recover_count >= c->o.recover_heartbeats)
                    transition(c, id, OT_DEV_HEALTHY, OT_EVENT_RECOVERED, &b, now, 0);
                break;
            default: break;
            }
        }
    }
    unlock_and_dispatch(c, &b);
    return st;
}

static double device_phi(const ot_coord *c, const device *d, uint64_t now) {
    if (!d->have_hb) return 0;
    if (c->o.detector == OT_DETECT_TIMEOUT) {
        /* mapped onto the same thresholds: suspect at timeout/2, fail at timeout */
        double f = (double)(now - d->last_hb) / (double)c->o.timeout_ns;
        return f >= 1 ? c->o.phi_fail : f >= 0.5 ? c->o.phi_suspect : 0;
    }
    return ot_phi_value(&d->det, now);
}

void ot_coord_tick(ot_coord *c) {
    if (!c) return;
    evbuf b = {0};
    pthread_mutex_lock(&c->mu);
    uint64_t now = cnow(c);
    for (int id = 0; id < c->ndev; id++) {
        device *d = &c->dev[id];
        if (d->state != OT_DEV_HEALTHY && d->state != OT_DEV_SUSPECT &&
            d->state != OT_DEV_RECOVERING)
            continue;
        double phi = device_phi(c, d, now);
        if (phi >= c->o.phi_fail)
            transition(c, id, OT_DEV_FAILED, OT_EVENT_FAILED, &b, now, phi);
        else if (phi >= c->o.phi_suspect && d->state == OT_DEV_HEALTHY)
            transition(c, id, OT_DEV_SUSPECT, OT_EVENT_SUSPECT, &b, now, phi);
    }
    unlock_and_dispatch(c, &b);
}

ot_status ot_coord_mark_failed(ot_coord *c, int id) {
    if (!c) return ot_error(OT_ERR_INVALID_ARGUMENT, "mark_failed: NULL coordinator");
    evbuf b = {0};
    pthread_mutex_lock(&c->mu);
    ot_status st = check_id(c, id, "mark_failed");
    if (st == OT_OK && c->dev[id].state == OT_DEV_REMOVED)
        st = ot_error(OT_ERR_FAILED_PRECONDITION, "mark_failed: device %d was removed", id);
    if (st == OT_OK)
        transition(c, id, OT_DEV_FAILED, OT_EVENT_FAILED, &b, cnow(c),
                   device_phi(c, &c->dev[id], cnow(c)));
    unlock_and_dispatch(c, &b);
    return st;
}

ot_status ot_coord_remove(ot_coord *c, int id) {
    if (!c) return ot_error(OT_ERR_INVALID_ARGUMENT, "remove: NULL coordinator");
    evbuf b = {0};
    pthread_mutex_lock(&c->mu);
    ot_status st = check_id(c, id, "remove");
    if (st == OT_OK) transition(c, id, OT_DEV_REMOVED, OT_EVENT_REMOVED, &b, cnow(c), 0);
    unlock_and_dispatch(c, &b);
    return st;
}

#define LOCKED_GET(c, expr, type)                                                                  \
    do {                                                                                           \
        pthread_mutex_lock((pthread_mutex_t *)&(c)->mu);                                           \
        type v_ = (expr);                                                                          \
        pthread_mutex_unlock((pthread_mutex_t *)&(c)->mu);                                         \
        return v_;                                                                                 \
    } while (0)

ot_device_state ot_coord_state(const ot_coord *c, int id) {
    LOCKED_GET(c, id >= 0 && id < c->ndev ? c->dev[id].state : OT_DEV_REMOVED, ot_device_state);
}
const char *ot_coord_name(const ot_coord *c, int id) {
    LOCKED_GET(c, id >= 0 && id < c->ndev ? c->dev[id].name : NULL, const char *);
}
double ot_coord_phi(const ot_coord *c, int id) {
    LOCKED_GET(c, id >= 0 && id < c->ndev ? device_phi(c, &c->dev[id], cnow(c)) : 0, double);
}
uint64_t ot_coord_epoch(const ot_coord *c) {
    LOCKED_GET(c, c->epoch, uint64_t);
}
int ot_coord_count(const ot_coord *c) {
    LOCKED_GET(c, c->ndev, int);
}
int64_t ot_coord_load(const ot_coord *c, int id) {
    LOCKED_GET(c, id >= 0 && id < c->ndev ? c->dev[id].load : 0, int64_t);
}
double ot_coord_throughput(const ot_coord *c, int id) {
    LOCKED_GET(c, id >= 0 && id < c->ndev ? c->dev[id].tput : 0, double);
}

int ot_coord_members(const ot_coord *c, int *ids, int cap) {
    pthread_mutex_lock((pthread_mutex_t *)&c->mu);
    int n = 0;
    for (int i = 0; i < c->ndev; i++)
        if (is_member(c->dev[i].state)) {
            if (ids && n < cap) ids[n] = i;
            n++;
        }
    pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
    return n;
}

ot_status ot_coord_subscribe(ot_coord *c, unsigned mask, ot_coord_event_fn fn, void *ud,
                             int *subid) {
    if (!c || !fn) return ot_error(OT_ERR_INVALID_ARGUMENT, "subscribe: NULL argument");
    pthread_mutex_lock(&c->mu);
    ot_status st = OT_OK;
    if (c->nsubs == c->capsubs) {
        int nc = c->capsubs ? c->capsubs * 2 : 4;
        sub *p = ot_realloc(c->subs, sizeof *p * (size_t)nc);
        if (!p) {
            st = ot_error(OT_ERR_OUT_OF_MEMORY, "subscribe: out of memory");
            goto out;
        }
        c->subs = p;
        c->capsubs = nc;
    }
    c->subs[c->nsubs++] = (sub){mask, fn, ud, ++c->next_sub};
    if (subid) *subid = c->next_sub;
out:
    pthread_mutex_unlock(&c->mu);
    return st;
}

void ot_coord_unsubscribe(ot_coord *c, int subid) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nsubs; i++)
        if (c->subs[i].id == subid) {
            memmove(&c->subs[i], &c->subs[i + 1], sizeof *c->subs * (size_t)(c->nsubs - i - 1));
            c->nsubs--;
            break;
        }
    pthread_mutex_unlock(&c->mu);
}

/* ---- channels: open addressing keyed by (src, dst) ---- */

static uint64_t chan_key(int src, int dst) {
    return ((uint64_t)(uint32_t)(src + 1) << 32) | (uint32_t)(dst + 1);
}

static chan *chan_find(const ot_coord *c, uint64_t key) {
    if (!c->capchan) return NULL;
    size_t m = c->capchan - 1, i = (size_t)(key * 0x9E3779B97F4A7C15ull >> 20) & m;
    for (;; i = (i + 1) & m) {
        if (c->chans[i].key == key) return &c->chans[i];
        if (c->chans[i].key == 0) return NULL;
    }
}

static chan *chan_insert(ot_coord *c, uint64_t key) {
    chan *f = chan_find(c, key);
    if (f) return f;
    if ((c->nchan + 1) * 10 > c->capchan * 7) {
        size_t nc = c->capchan ? c->capchan * 2 : 16;
        chan *nt = ot_calloc(nc, sizeof *nt);
        if (!nt) return NULL;
        chan *old = c->chans;
        size_t oc = c->capchan;
        c->chans = nt;
        c->capchan = nc;
        for (size_t i = 0; i < oc; i++)
            if (old[i].key) {
                size_t m = nc - 1, j = (size_t)(old[i].key * 0x9E3779B97F4A7C15ull >> 20) & m;
                while (nt[j].key) j = (j + 1) & m;
                nt[j] = old[i];
            }
        ot_free(old);
    }
    size_t m = c->capchan - 1, i = (size_t)(key * 0x9E3779B97F4A7C15ull >> 20) & m;
    while (c->chans[i].key) i = (i + 1) & m;
    c->chans[i].key = key;
    memset(&c->chans[i].s, 0, sizeof c->chans[i].s);
    c->nchan++;
    return &c->chans[i];
}

ot_status ot_coord_channel_record(ot_coord *c, int src, int dst, uint64_t bytes, uint64_t ns,
                                  bool ok) {
    if (!c) return ot_error(OT_ERR_INVALID_ARGUMENT, "channel: NULL coordinator");
    pthread_mutex_lock(&c->mu);
    ot_status st = check_id(c, src, "channel");
    if (st == OT_OK) st = check_id(c, dst, "channel");
    chan *ch = st == OT_OK ? chan_insert(c, chan_key(src, dst)) : NULL;
    if (st == OT_OK && !ch) st = ot_error(OT_ERR_OUT_OF_MEMORY, "channel: out of memory");
    if (ch) {
        if (ok) {
            ch->s.messages++;
            ch->s.bytes += bytes;
            ch->s.total_ns += ns;
        } else {
            ch->s.errors++;
        }
        ch->s.mean_latency_us =
            ch->s.messages ? (double)ch->s.total_ns / (double)ch->s.messages / 1e3 : 0;
        ch->s.gbytes_per_s = ch->s.total_ns ? (double)ch->s.bytes / (double)ch->s.total_ns : 0;
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

ot_status ot_coord_channel_stats(const ot_coord *c, int src, int dst, ot_channel_stats *out) {
    if (!c || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "channel: NULL argument");
    pthread_mutex_lock((pthread_mutex_t *)&c->mu);
    const chan *ch = chan_find(c, chan_key(src, dst));
    if (ch)
        *out = ch->s;
    else
        memset(out, 0, sizeof *out);
    pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
    return ch ? OT_OK : ot_error(OT_ERR_NOT_FOUND, "channel %d -> %d: nothing recorded", src, dst);
}

/* ---- load balancing ---- */

ot_status ot_coord_select(ot_coord *c, ot_select_policy p, int *id) {
    if (!c || !id) return ot_error(OT_ERR_INVALID_ARGUMENT, "select: NULL argument");
    pthread_mutex_lock(&c->mu);
    int n = c->ndev, best = -1;
    if (p == OT_SELECT_WEIGHTED) {
        double total = 0, bw = 0;
        for (int i = 0; i < n; i++) {
            device *d = &c->dev[i];
            if (d->state != OT_DEV_HEALTHY) continue;
            double w = d->tput > 0 ? d->tput : 1;
            d->swrr += w;
            total += w;
            if (best < 0 || d->swrr > bw) best = i, bw = d->swrr;
        }
        if (best >= 0) c->dev[best].swrr -= total;
    } else {
        /* scan from just after the cursor so equal candidates take turns */
        for (int k = 1; k <= n; k++) {
            int i = (c->rr_cursor + k + n) % n;
            if (c->dev[i].state != OT_DEV_HEALTHY) continue;
            if (p == OT_SELECT_ROUND_ROBIN) {
                best = i;
                break;
            }
            if (best < 0 || c->dev[i].load < c->dev[best].load) best = i;
        }
    }
    if (best >= 0 && p != OT_SELECT_WEIGHTED) c->rr_cursor = best;
    pthread_mutex_unlock(&c->mu);
    if (best < 0) return ot_error(OT_ERR_FAILED_PRECONDITION, "select: no healthy device");
    *id = best;
    return OT_OK;
}

ot_status ot_coord_load_add(ot_coord *c, int id, int64_t delta) {
    if (!c) return ot_error(OT_ERR_INVALID_ARGUMENT, "load: NULL coordinator");
    pthread_mutex_lock(&c->mu);
    ot_status st = check_id(c, id, "load");
    if (st == OT_OK) c->dev[id].load += delta;
    pthread_mutex_unlock(&c->mu);
    return st;
}

ot_status ot_coord_report_throughput(ot_coord *c, int id, double per_s) {
    if (!c) return ot_error(OT_ERR_INVALID_ARGUMENT, "throughput: NULL coordinator");
    if (!(per_s > 0) || !isfinite(per_s))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "throughput: %g is not a positive rate", per_s);
    pthread_mutex_lock(&c->mu);
    ot_status st = check_id(c, id, "throughput");
    if (st == OT_OK) {
        device *d = &c->dev[id];
        d->tput = d->tput > 0 ? 0.7 * d->tput + 0.3 * per_s : per_s;
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}
