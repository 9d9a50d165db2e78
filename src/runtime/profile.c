/* The profiler: kernel and compile-pass events, memory events, per-kernel aggregates, Chrome
 * trace JSON (written with jansson) and a text summary. Timestamps are ot_now_ns values,
 * exported on the wall clock (plus the clock module's offset when set) so traces from several
 * processes line up. */
#include "compiler/native.h"
#include "core/core_util.h"
#include "optitpu/clock.h"
#include "runtime/runtime_internal.h"

#include <jansson.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct pevent {
    int32_t agg;
    uint64_t t0, t1;
} pevent;

typedef struct mevent {
    int device;
    const char *kind; /* a static string from the pool */
    int64_t bytes, in_use, reserved;
    uint64_t t;
} mevent;

typedef struct agg {
    ot_kernel_profile k;
    uint64_t hash;
} agg;

struct ot_profile {
    pthread_mutex_t mu;
    pevent *ev;
    int64_t nev, evcap;
    mevent *mev;
    int64_t nmev, mevcap;
    agg *ag;
    int nag, agcap;
    int32_t *tab; /* hash -> agg index + 1 */
    int tabcap;
    int64_t offset_ns;
    bool offset_set; /* an explicit offset overrides the clock module's published one */
    int64_t mono_to_wall;
    int pid;
};

ot_status ot_profile_create(ot_profile **out) {
    *out = NULL;
    ot_profile *p = ot_calloc(1, sizeof *p);
    if (!p) return ot_error(OT_ERR_OUT_OF_MEMORY, "profile: out of memory");
    pthread_mutex_init(&p->mu, NULL);
    p->mono_to_wall = (int64_t)ot_wall_ns() - (int64_t)ot_now_ns();
    p->pid = (int)getpid();
    *out = p;
    return OT_OK;
}

void ot_profile_free(ot_profile *p) {
    if (!p) return;
    for (int k = 0; k < p->nag; k++) {
        ot_free((char *)p->ag[k].k.name);
        ot_free((char *)p->ag[k].k.kind);
    }
    ot_free(p->ag);
    ot_free(p->tab);
    ot_free(p->ev);
    ot_free(p->mev);
    pthread_mutex_destroy(&p->mu);
    ot_free(p);
}

void ot_profile_set_time_offset(ot_profile *p, int64_t offset_ns) {
    p->offset_ns = offset_ns;
    p->offset_set = true;
}
void ot_profile_set_pid(ot_profile *p, int pid) {
    p->pid = pid;
}

static uint64_t hstr(const char *s, int device) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)(unsigned)device;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static ot_status tab_rebuild(ot_profile *p, int ncap) {
    int32_t *t = ot_calloc((size_t)ncap, sizeof *t);
    if (!t) return ot_error(OT_ERR_OUT_OF_MEMORY, "profile: out of memory");
    for (int k = 0; k < p->nag; k++) {
        uint64_t h = p->ag[k].hash & (uint64_t)(ncap - 1);
        while (t[h]) h = (h + 1) & (uint64_t)(ncap - 1);
        t[h] = k + 1;
    }
    ot_free(p->tab);
    p->tab = t;
    p->tabcap = ncap;
    return OT_OK;
}

/* lock held */
static ot_status find_agg(ot_profile *p, const char *name, const char *kind, int device,
                          int64_t flops, int64_t bytes, int32_t *out) {
    uint64_t h = hstr(name, device);
    if (p->tabcap) {
        uint64_t m = (uint64_t)(p->tabcap - 1);
        for (uint64_t i = h & m; p->tab[i]; i = (i + 1) & m) {
            agg *a = &p->ag[p->tab[i] - 1];
            if (a->hash == h && a->k.device == device && !strcmp(a->k.name, name) &&
                !strcmp(a->k.kind, kind)) {
                *out = p->tab[i] - 1;
                return OT_OK;
            }
        }
    }
    if ((p->nag + 1) * 2 > p->tabcap) OT_CHECK(tab_rebuild(p, p->tabcap ? p->tabcap * 2 : 64));
    if (p->nag == p->agcap) {
        int nc = p->agcap ? p->agcap * 2 : 32;
        agg *n = ot_realloc(p->ag, (size_t)nc * sizeof *n);
        if (!n) return ot_error(OT_ERR_OUT_OF_MEMORY, "profile: out of memory");
        p->ag = n;
        p->agcap = nc;
    }
    agg *a = &p->ag[p->nag];
    memset(a, 0, sizeof *a);
    a->k.name = ot_strdup(name);
    a->k.kind = ot_strdup(kind);
    if (!a->k.name || !a->k.kind) {
        ot_free((char *)a->k.name);
        ot_free((char *)a->k.kind);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "profile: out of memory");
    }
    a->k.device = device;
    a->k.flops = flops;
    a->k.bytes = bytes;
    a->k.min_ns = UINT64_MAX;
    a->hash = h;
    uint64_t m = (uint64_t)(p->tabcap - 1), i = h & m;
    while (p->tab[i]) i = (i + 1) & m;
    p->tab[i] = p->nag + 1;
    *out = p->nag++;
    return OT_OK;
}

ot_status ot_profile_record(ot_profile *p, const char *name, const char *kind, int device,
                            uint64_t t0, uint64_t t1, int64_t flops, int64_t bytes) {
    if (!p || !name || !kind) return ot_error(OT_ERR_INVALID_ARGUMENT, "profile: NULL argument");
    if (t1 < t0) t1 = t0;
    pthread_mutex_lock(&p->mu);
    int32_t ai = 0;
    ot_status st = find_agg(p, name, kind, device, flops, bytes, &ai);
    if (st == OT_OK && p->nev == p->evcap) {
        int64_t nc = p->evcap ? p->evcap * 2 : 256;
        pevent *n = ot_realloc(p->ev, (size_t)nc * sizeof *n);
        if (!n)
            st = ot_error(OT_ERR_OUT_OF_MEMORY, "profile: out of memory");
        else
            p->ev = n, p->evcap = nc;
    }
    if (st == OT_OK) {
        p->ev[p->nev++] = (pevent){ai, t0, t1};
        ot_kernel_profile *k = &p->ag[ai].k;
        uint64_t d = t1 - t0;
        k->calls++;
        k->total_ns += d;
        if (d < k->min_ns) k->min_ns = d;
        if (d > k->max_ns) k->max_ns = d;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

ot_status ot_profile_add_pod_trace(ot_profile *p, const ot_pod_trace *t) {
    if (!p || !t) return ot_error(OT_ERR_INVALID_ARGUMENT, "profile: NULL argument");
    static const char *const kinds[OT_PHASE_COUNT] = {"phase:compute", "phase:comm", "phase:other"};
    size_t n = ot_pod_trace_count(t);
    for (size_t i = 0; i < n; i++) {
        ot_pod_trace_event e;
        ot_status s = ot_pod_trace_event_get(t, i, &e);
        if (s == OT_OK)
            s = ot_profile_record(p, e.name, kinds[e.phase], e.device, e.start_ns, e.end_ns, 0, 0);
        if (s != OT_OK) return s;
    }
    return OT_OK;
}

ot_status ot_profile_record_memory(ot_profile *p, int device, const char *kind, int64_t bytes,
                                   int64_t in_use, int64_t reserved) {
    if (!p) return ot_error(OT_ERR_INVALID_ARGUMENT, "profile: NULL");
    uint64_t t = ot_now_ns();
    pthread_mutex_lock(&p->mu);
    ot_status st = OT_OK;
    if (p->nmev == p->mevcap) {
        int64_t nc = p->mevcap ? p->mevcap * 2 : 256;
        mevent *n = ot_realloc(p->mev, (size_t)nc * sizeof *n);
        if (!n)
            st = ot_error(OT_ERR_OUT_OF_MEMORY, "profile: out of memory");
        else
            p->mev = n, p->mevcap = nc;
    }
    if (st == OT_OK) p->mev[p->nmev++] = (mevent){device, kind, bytes, in_use, reserved, t};
    pthread_mutex_unlock(&p->mu);
    return st;
}

int64_t ot_profile_event_count(const ot_profile *p) {
    return p->nev;
}
int64_t ot_profile_memory_event_count(const ot_profile *p) {
    return p->nmev;
}
int ot_profile_kernel_count(const ot_profile *p) {
    return p->nag;
}
const ot_kernel_profile *ot_profile_kernel(const ot_profile *p, int i) {
    return i >= 0 && i < p->nag ? &p->ag[i].k : NULL;
}

static ot_status record_codegen(void *ctx, const char *name, uint64_t t0, uint64_t t1,
                                int64_t c_bytes) {
    return ot_profile_record(ctx, name, "codegen", -1, t0, t1, 0, c_bytes);
}

ot_status ot_profile_compile(ot_profile *p, const ot_module *m, const ot_compile_options *opts,
                             ot_executable **out) {
    *out = NULL;
    uint64_t t0 = ot_now_ns();
    OT_CHECK(ot_compile(m, opts, out));
    uint64_t t1 = ot_now_ns();
    if (!p) return OT_OK;
    /* the passes, laid end to end from the start (each stat carries its duration) */
    uint64_t t = t0;
    ot_status st = OT_OK;
    for (int k = 0; k < ot_executable_stat_count(*out) && st == OT_OK; k++) {
        const ot_pass_stat *ps = ot_executable_stat(*out, k);
        char nm[128];
        snprintf(nm, sizeof nm, "pass %s", ps->name);
        uint64_t e = t + ps->time_ns > t1 ? t1 : t + ps->time_ns;
        st = ot_profile_record(p, nm, "compile-pass", -1, t, e, 0, 0);
        t = e;
    }
    if (st == OT_OK) {
        char nm[300];
        snprintf(nm, sizeof nm, "compile %s", ot_module_name(m));
        st = ot_profile_record(p, nm, "compile", -1, t0, t1, 0, 0);
    }
    /* the native stage's compiler processes, one event per unit compiled (none from the cache) */
    if (st == OT_OK) st = cg_program_report(cc_executable_native(*out), record_codegen, p);
    if (st != OT_OK) {
        ot_executable_free(*out);
        *out = NULL;
    }
    return st;
}

/* ---- export ------------------------------------------------------------------------------- */

/* Trace time of a monotonic reading: the wall clock at profile creation, corrected by the
 * synchronized offset — the explicit one, else the clock module's published NTP offset at that
 * instant (0 when nothing is published) — so traces of processes on different hosts that sync
 * against one server merge on one timeline. */
static double us(const ot_profile *p, uint64_t t) {
    int64_t off = p->offset_ns;
    if (!p->offset_set) ot_clock_offset_at_ns(t, &off);
    return (double)((int64_t)t + p->mono_to_wall + off) / 1000.0;
}

static int tid_of(int device) {
    return device < 0 ? 1000000 : device; /* the host thread (compile) gets its own row */
}

#define JSET(o, k, v)                                                                              \
    do {                                                                                           \
        if (json_object_set_new(o, k, v) != 0) goto oom;                                           \
    } while (0)

ot_status ot_profile_chrome_trace(const ot_profile *p, char **out) {
    *out = NULL;
    json_t *root = json_object(), *evs = json_array();
    if (!root || !evs) goto oom;
    pthread_mutex_lock((pthread_mutex_t *)&p->mu);
    /* thread names */
    bool seen_host = false;
    int maxdev = -1;
    for (int k = 0; k < p->nag; k++) {
        if (p->ag[k].k.device < 0) seen_host = true;
        if (p->ag[k].k.device > maxdev) maxdev = p->ag[k].k.device;
    }
    for (int64_t k = 0; k < p->nmev; k++)
        if (p->mev[k].device > maxdev) maxdev = p->mev[k].device;
    for (int d = -1; d <= maxdev; d++) {
        if (d < 0 && !seen_host) continue;
        json_t *m = json_object(), *a = json_object();
        if (!m || !a || json_array_append_new(evs, m) != 0) {
            json_decref(a);
            pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
            goto oom;
        }
        char nm[64];
        if (d < 0)
            snprintf(nm, sizeof nm, "host (compile)");
        else
            snprintf(nm, sizeof nm, "device %d", d);
        if (json_object_set_new(m, "name", json_string("thread_name")) ||
            json_object_set_new(m, "ph", json_string("M")) ||
            json_object_set_new(m, "pid", json_integer(p->pid)) ||
            json_object_set_new(m, "tid", json_integer(tid_of(d))) ||
            json_object_set_new(a, "name", json_string(nm)) || json_object_set_new(m, "args", a)) {
            pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
            goto oom;
        }
    }
    for (int64_t k = 0; k < p->nev; k++) {
        const pevent *e = &p->ev[k];
        const ot_kernel_profile *kp = &p->ag[e->agg].k;
        double dur = (double)(e->t1 - e->t0) / 1000.0;
        json_t *o = json_object(), *a = json_object();
        int bad = !o || !a || json_array_append_new(evs, o) != 0;
        if (!bad) {
            double s = (double)(e->t1 - e->t0) * 1e-9;
            bad = json_object_set_new(o, "name", json_string(kp->name)) ||
                  json_object_set_new(o, "cat", json_string(kp->kind)) ||
                  json_object_set_new(o, "ph", json_string("X")) ||
                  json_object_set_new(o, "ts", json_real(us(p, e->t0))) ||
                  json_object_set_new(o, "dur", json_real(dur)) ||
                  json_object_set_new(o, "pid", json_integer(p->pid)) ||
                  json_object_set_new(o, "tid", json_integer(tid_of(kp->device))) ||
                  json_object_set_new(a, "flops", json_integer(kp->flops)) ||
                  json_object_set_new(a, "bytes", json_integer(kp->bytes)) ||
                  json_object_set_new(a, "GB/s", json_real(s > 0 ? kp->bytes / s / 1e9 : 0)) ||
                  json_object_set_new(a, "GFLOP/s", json_real(s > 0 ? kp->flops / s / 1e9 : 0)) ||
                  json_object_set_new(o, "args", a);
            a = NULL;
        }
        if (bad) {
            json_decref(a);
            pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
            goto oom;
        }
    }
    for (int64_t k = 0; k < p->nmev; k++) {
        const mevent *e = &p->mev[k];
        json_t *o = json_object(), *a = json_object();
        int bad = !o || !a || json_array_append_new(evs, o) != 0;
        if (!bad) {
            char nm[64];
            snprintf(nm, sizeof nm, "memory device %d", e->device);
            bad = json_object_set_new(o, "name", json_string(nm)) ||
                  json_object_set_new(o, "cat", json_string(e->kind)) ||
                  json_object_set_new(o, "ph", json_string("C")) ||
                  json_object_set_new(o, "ts", json_real(us(p, e->t))) ||
                  json_object_set_new(o, "pid", json_integer(p->pid)) ||
                  json_object_set_new(o, "tid", json_integer(tid_of(e->device))) ||
                  json_object_set_new(a, "in_use", json_integer(e->in_use)) ||
                  json_object_set_new(a, "reserved", json_integer(e->reserved)) ||
                  json_object_set_new(o, "args", a);
            a = NULL;
        }
        if (bad) {
            json_decref(a);
            pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
            goto oom;
        }
    }
    pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
    JSET(root, "traceEvents", evs);
    evs = NULL;
    JSET(root, "displayTimeUnit", json_string("ns"));
    char *s = json_dumps(root, JSON_COMPACT);
    if (!s) goto oom;
    *out = ot_strdup(s);
    free(s);
    json_decref(root);
    if (!*out) return ot_error(OT_ERR_OUT_OF_MEMORY, "profile: out of memory");
    return OT_OK;
oom:
    json_decref(evs);
    json_decref(root);
    return ot_error(OT_ERR_OUT_OF_MEMORY, "profile: out of memory building the trace");
}

ot_status ot_profile_write_chrome_trace(const ot_profile *p, const char *path) {
    char *s;
    OT_CHECK(ot_profile_chrome_trace(p, &s));
    FILE *f = fopen(path, "wb");
    if (!f) {
        ot_free(s);
        return ot_error(OT_ERR_IO, "trace %s: cannot open for writing", path);
    }
    size_t n = strlen(s);
    bool ok = fwrite(s, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    ot_free(s);
    if (!ok) return ot_error(OT_ERR_IO, "trace %s: write failed", path);
    return OT_OK;
}

/* ---- summary ------------------------------------------------------------------------------ */

static const ot_profile *g_sort_p;
static int cmp_total(const void *a, const void *b) {
    const ot_kernel_profile *x = &g_sort_p->ag[*(const int *)a].k,
                            *y = &g_sort_p->ag[*(const int *)b].k;
    if (x->total_ns != y->total_ns) return x->total_ns < y->total_ns ? 1 : -1;
    return *(const int *)a - *(const int *)b;
}

ot_status ot_profile_summary(const ot_profile *p, const ot_bench_limits *limits, int top,
                             char **out) {
    *out = NULL;
    if (top <= 0) top = 10;
    pthread_mutex_lock((pthread_mutex_t *)&p->mu);
    int *idx = ot_malloc((size_t)(p->nag ? p->nag : 1) * sizeof *idx);
    if (!idx) {
        pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "profile: out of memory");
    }
    int n = 0;
    uint64_t tot = 0, ctot = 0;
    int64_t tflops = 0, tbytes = 0, calls = 0;
    for (int k = 0; k < p->nag; k++) {
        const ot_kernel_profile *kp = &p->ag[k].k;
        if (kp->device < 0) {
            if (!strcmp(kp->kind, "compile")) ctot += kp->total_ns;
            continue;
        }
        idx[n++] = k;
        tot += kp->total_ns;
        tflops += kp->flops * kp->calls;
        tbytes += kp->bytes * kp->calls;
        calls += kp->calls;
    }
    static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&sort_mu);
    g_sort_p = p;
    qsort(idx, (size_t)n, sizeof *idx, cmp_total);
    pthread_mutex_unlock(&sort_mu);
    double lim = limits ? (limits->triad_gbs > 0 ? limits->triad_gbs : limits->memcpy_gbs) : 0;
    ot_strbuf b = {0};
    ot_strbuf_printf(&b, "%-32s %6s %7s %10s %10s %9s %9s%s\n", "kernel", "device", "calls",
                     "total ms", "mean us", "GB/s", "GFLOP/s", lim > 0 ? "  of limit" : "");
    for (int r = 0; r < n && r < top; r++) {
        const ot_kernel_profile *kp = &p->ag[idx[r]].k;
        double s = (double)kp->total_ns * 1e-9;
        double gbs = s > 0 ? (double)kp->bytes * (double)kp->calls / s / 1e9 : 0;
        double gfs = s > 0 ? (double)kp->flops * (double)kp->calls / s / 1e9 : 0;
        ot_strbuf_printf(&b, "%-32.32s %6d %7lld %10.3f %10.2f %9.2f %9.2f", kp->name, kp->device,
                         (long long)kp->calls, (double)kp->total_ns / 1e6,
                         kp->calls ? (double)kp->total_ns / 1e3 / (double)kp->calls : 0.0, gbs,
                         gfs);
        if (lim > 0) ot_strbuf_printf(&b, "  %8.2f", gbs / lim);
        ot_strbuf_printf(&b, "\n");
    }
    if (n > top) ot_strbuf_printf(&b, "... %d more kernels\n", n - top);
    double s = (double)tot * 1e-9;
    ot_strbuf_printf(
        &b, "total: %lld kernel runs, %.3f ms, %lld FLOPs, %lld bytes, %.2f GB/s, %.2f GFLOP/s\n",
        (long long)calls, (double)tot / 1e6, (long long)tflops, (long long)tbytes,
        s > 0 ? (double)tbytes / s / 1e9 : 0.0, s > 0 ? (double)tflops / s / 1e9 : 0.0);
    if (ctot) ot_strbuf_printf(&b, "compile: %.3f ms\n", (double)ctot / 1e6);
    ot_strbuf_printf(&b, "memory events: %lld\n", (long long)p->nmev);
    if (lim > 0)
        ot_strbuf_printf(&b, "limit: %.2f GB/s (%s); achieved %.3f of it\n", lim,
                         limits->triad_gbs > 0 ? "STREAM triad" : "memcpy",
                         s > 0 ? (double)tbytes / s / 1e9 / lim : 0.0);
    pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
    ot_free(idx);
    if (b.oom || !b.p) {
        ot_free(b.p);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "profile: out of memory");
    }
    *out = b.p;
    return OT_OK;
}
