/* Step-time breakdown: per-device intervals by phase, the compute / communication / idle split of
 * a step, and Chrome trace JSON export. */
#include "pod_internal.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct tevent {
    int device;
    ot_phase phase;
    char *name;
    uint64_t start, end;
} tevent;

struct ot_pod_trace {
    pthread_mutex_t mu;
    tevent *ev;
    size_t n, cap;
};

static const char *const phase_names[] = {"compute", "comm", "other"};
_Static_assert(sizeof phase_names / sizeof *phase_names == OT_PHASE_COUNT, "phase names");

ot_status ot_pod_trace_create(ot_pod_trace **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "trace: NULL output");
    *out = ot_calloc(1, sizeof **out);
    if (!*out) return ot_error(OT_ERR_OUT_OF_MEMORY, "trace: out of memory");
    pthread_mutex_init(&(*out)->mu, NULL);
    return OT_OK;
}

void ot_pod_trace_free(ot_pod_trace *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) ot_free(t->ev[i].name);
    ot_free(t->ev);
    pthread_mutex_destroy(&t->mu);
    ot_free(t);
}

ot_status ot_pod_trace_record(ot_pod_trace *t, int device, ot_phase phase, const char *name,
                              uint64_t start, uint64_t end) {
    if (!t || !name) return ot_error(OT_ERR_INVALID_ARGUMENT, "trace record: NULL argument");
    if (phase < 0 || phase >= OT_PHASE_COUNT || end < start || device < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "trace record: bad phase, device or interval");
    char *nm = ot_strdup(name);
    if (!nm) return ot_error(OT_ERR_OUT_OF_MEMORY, "trace record: out of memory");
    pthread_mutex_lock(&t->mu);
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        tevent *p = ot_realloc(t->ev, sizeof *p * nc);
        if (!p) {
            pthread_mutex_unlock(&t->mu);
            ot_free(nm);
            return ot_error(OT_ERR_OUT_OF_MEMORY, "trace record: out of memory");
        }
        t->ev = p;
        t->cap = nc;
    }
    t->ev[t->n++] = (tevent){device, phase, nm, start, end};
    pthread_mutex_unlock(&t->mu);
    return OT_OK;
}

size_t ot_pod_trace_count(const ot_pod_trace *t) {
    pthread_mutex_lock((pthread_mutex_t *)&t->mu);
    size_t n = t->n;
    pthread_mutex_unlock((pthread_mutex_t *)&t->mu);
    return n;
}

const char *ot_phase_name(ot_phase p) {
    return p >= 0 && p < OT_PHASE_COUNT ? phase_names[p] : "<invalid>";
}

ot_status ot_pod_trace_event_get(const ot_pod_trace *t, size_t i, ot_pod_trace_event *out) {
    if (!t || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "trace event: NULL argument");
    pthread_mutex_lock((pthread_mutex_t *)&t->mu);
    ot_status s = OT_OK;
    if (i >= t->n) {
        s = ot_error(OT_ERR_OUT_OF_RANGE, "trace event %zu: the trace holds %zu", i, t->n);
    } else {
        const tevent *e = &t->ev[i];
        *out = (ot_pod_trace_event){e->device, e->phase, e->name, e->start, e->end};
    }
    pthread_mutex_unlock((pthread_mutex_t *)&t->mu);
    return s;
}

typedef struct span {
    uint64_t a, b;
} span;

static int span_cmp(const void *x, const void *y) {
    const span *p = x, *q = y;
    return p->a < q->a ? -1 : p->a > q->a;
}

/* Length of the union of spans (sorted in place). */
static uint64_t union_len(span *s, size_t n) {
    qsort(s, n, sizeof *s, span_cmp);
    uint64_t tot = 0, ca = 0, cb = 0;
    bool open = false;
    for (size_t i = 0; i < n; i++) {
        if (!open || s[i].a > cb) {
            if (open) tot += cb - ca;
            ca = s[i].a, cb = s[i].b, open = true;
        } else if (s[i].b > cb) {
            cb = s[i].b;
        }
    }
    if (open) tot += cb - ca;
    return tot;
}

ot_status ot_pod_trace_breakdown(const ot_pod_trace *t, int device, uint64_t from, uint64_t to,
                                 ot_step_breakdown *out) {
    if (!t || !out || to < from)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "trace breakdown: bad arguments");
    pthread_mutex_lock((pthread_mutex_t *)&t->mu);
    span *s = ot_malloc(sizeof(span) * (t->n ? t->n : 1));
    if (!s) {
        pthread_mutex_unlock((pthread_mutex_t *)&t->mu);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "trace breakdown: out of memory");
    }
    /* cumulative unions: compute; compute+comm; all. Differences split overlaps in that order. */
    uint64_t cum[OT_PHASE_COUNT];
    for (int upto = 0; upto < OT_PHASE_COUNT; upto++) {
        size_t k = 0;
        for (size_t i = 0; i < t->n; i++) {
            const tevent *e = &t->ev[i];
            if (e->device != device || (int)e->phase > upto) continue;
            uint64_t a = e->start > from ? e->start : from, b = e->end < to ? e->end : to;
            if (b > a) s[k++] = (span){a, b};
        }
        cum[upto] = union_len(s, k);
    }
    pthread_mutex_unlock((pthread_mutex_t *)&t->mu);
    ot_free(s);
    out->wall_s = (double)(to - from) / 1e9;
    out->compute_s = (double)cum[0] / 1e9;
    out->comm_s = (double)(cum[1] - cum[0]) / 1e9;
    out->other_s = (double)(cum[2] - cum[1]) / 1e9;
    out->idle_s = (double)(to - from - cum[2]) / 1e9;
    return OT_OK;
}

ot_status ot_pod_trace_to_json(const ot_pod_trace *t, char **out) {
    if (!t || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "trace json: NULL argument");
    *out = NULL;
    ot_status st = OT_ERR_OUT_OF_MEMORY;
    json_t *root = json_object(), *evs = json_array();
    pthread_mutex_lock((pthread_mutex_t *)&t->mu);
    uint64_t t0 = UINT64_MAX;
    for (size_t i = 0; i < t->n; i++) t0 = t->ev[i].start < t0 ? t->ev[i].start : t0;
    for (size_t i = 0; root && evs && i < t->n; i++) {
        const tevent *e = &t->ev[i];
        json_t *o = json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i}", "name", e->name, "cat",
                              phase_names[e->phase], "ph", "X", "ts", (double)(e->start - t0) / 1e3,
                              "dur", (double)(e->end - e->start) / 1e3, "pid", 0, "tid", e->device);
        if (!o || json_array_append_new(evs, o) != 0) goto done;
    }
    if (root && evs) {
        json_object_set(root, "traceEvents", evs);
        json_object_set_new(root, "displayTimeUnit", json_string("ms"));
        char *s = json_dumps(root, JSON_COMPACT);
        if (s) {
            *out = ot_strdup(s);
            free(s);
            if (*out) st = OT_OK;
        }
    }
done:
    pthread_mutex_unlock((pthread_mutex_t *)&t->mu);
    json_decref(evs);
    json_decref(root);
    return st == OT_OK ? OT_OK : ot_error(st, "trace json: out of memory");
}
