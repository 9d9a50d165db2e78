/* The backend: N devices, device selection, the executable registry and the retry policy. */
#include "runtime/runtime_internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

/* ---- retry ------------------------------------------------------------------------------- */

ot_retry_policy ot_retry_policy_default(void) {
    ot_retry_policy p;
    memset(&p, 0, sizeof p);
    p.max_attempts = 3;
    p.initial_backoff_ns = 1000000;
    p.multiplier = 2.0;
    p.max_backoff_ns = 1000000000;
    p.jitter = 0.5;
    p.seed = 0x5eed;
    return p;
}

bool ot_status_retryable(ot_status s) {
    return s == OT_ERR_OUT_OF_MEMORY || s == OT_ERR_TIMEOUT;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int64_t ot_retry_backoff_ns(const ot_retry_policy *p, int attempt, uint64_t *state) {
    if (attempt < 2) return 0;
    double b = (double)p->initial_backoff_ns;
    for (int k = 2; k < attempt && b < (double)p->max_backoff_ns; k++) b *= p->multiplier;
    if (b > (double)p->max_backoff_ns) b = (double)p->max_backoff_ns;
    double j = p->jitter < 0 ? 0 : p->jitter > 1 ? 1 : p->jitter;
    double u = (double)(splitmix(state) >> 11) / 9007199254740992.0; /* [0, 1) */
    return (int64_t)(b * (1.0 - j * u));
}

static void default_sleep(void *ud, int64_t ns) {
    (void)ud;
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

ot_status ot_retry_run(const ot_retry_policy *p, ot_attempt_fn fn, void *ud,
                       void (*on_oom)(void *ud), int *attempts) {
    ot_retry_policy pol = p ? *p : ot_retry_policy_default();
    if (pol.max_attempts < 1) pol.max_attempts = 1;
    uint64_t state = pol.seed;
    ot_status st = OT_OK;
    int a = 0;
    for (a = 1; a <= pol.max_attempts; a++) {
        if (a > 1) {
            int64_t w = ot_retry_backoff_ns(&pol, a, &state);
            if (pol.sleep)
                pol.sleep(pol.sleep_ud, w);
            else
                default_sleep(NULL, w);
        }
        bool retry_ok = true;
        st = fn(ud, a, &retry_ok);
        if (st == OT_OK || !retry_ok || !ot_status_retryable(st) || a == pol.max_attempts) break;
        ot_log(OT_LOG_INFO, "attempt %d failed (%s), retrying", a, ot_last_error());
        if (st == OT_ERR_OUT_OF_MEMORY && on_oom) on_oom(ud);
    }
    if (a > pol.max_attempts) a = pol.max_attempts;
    if (attempts) *attempts = a;
    if (st != OT_OK && a > 1) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ot_last_error());
        const char *m = msg, *code = ot_status_str(st);
        size_t L = strlen(code);
        if (!strncmp(m, code, L) && m[L] == ':' && m[L + 1] == ' ') m += L + 2;
        ot_error(st, "%s (after %d attempts)", m, a);
    }
    return st;
}

/* ---- backend ----------------------------------------------------------------------------- */

typedef struct entry {
    char id[256];
    ot_executable *exe;
} entry;

struct ot_backend {
    pthread_mutex_t mu;
    ot_device **dev;
    int ndev;
    entry *reg;
    int nreg, regcap;
    ot_backend_options opts;
};

ot_backend_options ot_backend_options_default(void) {
    ot_backend_options o;
    memset(&o, 0, sizeof o);
    o.retry = ot_retry_policy_default();
    o.compile = ot_compile_options_default();
    return o;
}

ot_status ot_backend_create(const ot_backend_options *o, ot_backend **out) {
    *out = NULL;
    ot_backend_options bo = o ? *o : ot_backend_options_default();
    if (bo.devices <= 0) bo.devices = ot_device_count_from_env();
    if (bo.devices > 4096)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "backend: %d devices (at most 4096)", bo.devices);
    if (bo.device_memory < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "backend: negative device memory");
    if (bo.hbm_preset) OT_CHECK(ot_tpu_hbm_bytes(bo.hbm_preset, &bo.device_memory));
    ot_backend *b = ot_calloc(1, sizeof *b);
    if (!b) return ot_error(OT_ERR_OUT_OF_MEMORY, "backend: out of memory");
    pthread_mutex_init(&b->mu, NULL);
    b->opts = bo;
    b->opts.hbm_preset = NULL;
    b->opts.compile.passes = b->opts.compile.disable_passes = NULL; /* not kept */
    b->opts.compile.dump_dir = b->opts.compile.dump_after = NULL;
    b->opts.compile.target = NULL;
    b->dev = ot_calloc((size_t)bo.devices, sizeof *b->dev);
    ot_status st = b->dev ? OT_OK : ot_error(OT_ERR_OUT_OF_MEMORY, "backend: out of memory");
    for (int k = 0; k < bo.devices && st == OT_OK; k++) {
        st = ot_host_device_create(k, bo.device_memory, &b->dev[k]);
        if (st == OT_OK) b->ndev++;
    }
    if (st != OT_OK) {
        ot_backend_free(b);
        return st;
    }
    *out = b;
    return OT_OK;
}

void ot_backend_free(ot_backend *b) {
    if (!b) return;
    for (int k = 0; k < b->nreg; k++) ot_executable_free(b->reg[k].exe);
    ot_free(b->reg);
    for (int k = 0; k < b->ndev; k++) ot_device_free(b->dev[k]);
    ot_free(b->dev);
    pthread_mutex_destroy(&b->mu);
    ot_free(b);
}

int ot_backend_device_count(const ot_backend *b) {
    return b->ndev;
}
ot_device *ot_backend_device(ot_backend *b, int i) {
    return i >= 0 && i < b->ndev ? b->dev[i] : NULL;
}

static int64_t free_bytes(ot_device *d) {
    ot_mem_stats s;
    ot_device_memory(d, &s);
    return s.capacity > 0 ? s.capacity - s.in_use : INT64_MAX - s.in_use;
}

ot_status ot_backend_select_device(ot_backend *b, ot_device_select p, int index, int *out) {
    *out = -1;
    if (b->ndev == 0) return ot_error(OT_ERR_FAILED_PRECONDITION, "backend has no devices");
    switch (p) {
    case OT_DEVSEL_EXPLICIT:
        if (index < 0 || index >= b->ndev)
            return ot_error(OT_ERR_OUT_OF_RANGE, "device %d does not exist (the backend has %d)",
                            index, b->ndev);
        *out = index;
        return OT_OK;
    case OT_DEVSEL_LEAST_LOADED: {
        int best = 0;
        int64_t bu = 0;
        for (int k = 0; k < b->ndev; k++) {
            ot_mem_stats s;
            ot_device_memory(b->dev[k], &s);
            int a = ot_device_active_runs(b->dev[k]), ba = ot_device_active_runs(b->dev[best]);
            if (k == 0 || a < ba || (a == ba && s.in_use < bu)) {
                best = k;
                bu = s.in_use;
            }
        }
        *out = best;
        return OT_OK;
    }
    case OT_DEVSEL_MOST_FREE: {
        int best = 0;
        int64_t bf = free_bytes(b->dev[0]);
        for (int k = 1; k < b->ndev; k++) {
            int64_t f = free_bytes(b->dev[k]);
            if (f > bf) best = k, bf = f;
        }
        *out = best;
        return OT_OK;
    }
    }
    return ot_error(OT_ERR_INVALID_ARGUMENT, "unknown device selection policy %d", (int)p);
}

static ot_status check_id(const char *id) {
    if (!id || !*id) return ot_error(OT_ERR_INVALID_ARGUMENT, "registry: empty executable id");
    if (strlen(id) > 255)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "registry: id longer than 255 bytes");
    return OT_OK;
}

static int find(const ot_backend *b, const char *id) {
    for (int k = 0; k < b->nreg; k++)
        if (!strcmp(b->reg[k].id, id)) return k;
    return -1;
}

ot_status ot_backend_register_executable(ot_backend *b, const char *id, ot_executable *exe) {
    ot_status st = check_id(id);
    if (st == OT_OK && !exe) st = ot_error(OT_ERR_INVALID_ARGUMENT, "registry: executable is NULL");
    if (st != OT_OK) {
        ot_executable_free(exe);
        return st;
    }
    pthread_mutex_lock(&b->mu);
    if (find(b, id) >= 0) {
        pthread_mutex_unlock(&b->mu);
        ot_executable_free(exe);
        return ot_error(OT_ERR_ALREADY_EXISTS, "registry: id '%s' is already registered", id);
    }
    if (b->nreg == b->regcap) {
        int nc = b->regcap ? b->regcap * 2 : 8;
        entry *n = ot_realloc(b->reg, (size_t)nc * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&b->mu);
            ot_executable_free(exe);
            return ot_error(OT_ERR_OUT_OF_MEMORY, "registry: out of memory");
        }
        b->reg = n;
        b->regcap = nc;
    }
    snprintf(b->reg[b->nreg].id, sizeof b->reg[b->nreg].id, "%s", id);
    b->reg[b->nreg].exe = exe;
    b->nreg++;
    pthread_mutex_unlock(&b->mu);
    return OT_OK;
}

ot_status ot_backend_register_module_profiled(ot_backend *b, const char *id, const ot_module *m,
                                              const ot_compile_options *opts, ot_profile *profile) {
    OT_CHECK(check_id(id));
    if (!m) return ot_error(OT_ERR_INVALID_ARGUMENT, "registry: module is NULL");
    pthread_mutex_lock(&b->mu);
    bool exists = find(b, id) >= 0;
    pthread_mutex_unlock(&b->mu);
    if (exists)
        return ot_error(OT_ERR_ALREADY_EXISTS, "registry: id '%s' is already registered", id);
    ot_compile_options o = opts ? *opts : b->opts.compile;
    if (!opts) o.target = "host-cpu";
    ot_executable *exe = NULL;
    ot_status st = profile ? ot_profile_compile(profile, m, &o, &exe) : ot_compile(m, &o, &exe);
    if (st != OT_OK) return ot_error_wrap(st, "registering '%s'", id);
    return ot_backend_register_executable(b, id, exe);
}

ot_status ot_backend_register_module(ot_backend *b, const char *id, const ot_module *m,
                                     const ot_compile_options *opts) {
    return ot_backend_register_module_profiled(b, id, m, opts, NULL);
}

ot_status ot_backend_lookup(ot_backend *b, const char *id, const ot_executable **out) {
    *out = NULL;
    OT_CHECK(check_id(id));
    pthread_mutex_lock(&b->mu);
    int k = find(b, id);
    if (k >= 0) *out = b->reg[k].exe;
    pthread_mutex_unlock(&b->mu);
    if (k < 0) return ot_error(OT_ERR_NOT_FOUND, "registry: no executable registered as '%s'", id);
    return OT_OK;
}

ot_status ot_backend_unregister(ot_backend *b, const char *id) {
    OT_CHECK(check_id(id));
    pthread_mutex_lock(&b->mu);
    int k = find(b, id);
    if (k >= 0) {
        ot_executable_free(b->reg[k].exe);
        b->reg[k] = b->reg[b->nreg - 1];
        b->nreg--;
    }
    pthread_mutex_unlock(&b->mu);
    if (k < 0) return ot_error(OT_ERR_NOT_FOUND, "registry: no executable registered as '%s'", id);
    return OT_OK;
}

typedef struct exec_attempt {
    ot_device *dev;
    const ot_executable *exe;
    ot_buffer *const *params;
    int nparams;
    ot_buffer **outs;
    int nouts;
    const ot_run_options *o;
} exec_attempt;

static ot_status attempt_fn(void *ud, int attempt, bool *retry_ok) {
    (void)attempt;
    exec_attempt *a = ud;
    ot_run_result r;
    ot_status st =
        ot_device_execute(a->dev, a->exe, a->params, a->nparams, a->outs, a->nouts, a->o, &r);
    if (st != OT_OK && r.donated_written) *retry_ok = false;
    return st;
}

static void attempt_oom(void *ud) {
    exec_attempt *a = ud;
    int64_t f = ot_device_trim(a->dev);
    ot_log(OT_LOG_INFO, "device %d: released %lld cached bytes before retrying",
           ot_device_index(a->dev), (long long)f);
}

ot_status ot_backend_execute(ot_backend *b, const char *id, int device, ot_buffer *const *params,
                             int nparams, ot_buffer **outs, int nouts, const ot_run_options *o,
                             int *attempts) {
    if (attempts) *attempts = 0;
    for (int k = 0; outs && k < nouts; k++) outs[k] = NULL;
    const ot_executable *exe;
    OT_CHECK(ot_backend_lookup(b, id, &exe));
    ot_device *d = ot_backend_device(b, device);
    if (!d)
        return ot_error(OT_ERR_OUT_OF_RANGE, "device %d does not exist (the backend has %d)",
                        device, b->ndev);
    exec_attempt a = {d, exe, params, nparams, outs, nouts, o};
    return ot_retry_run(&b->opts.retry, attempt_fn, &a, attempt_oom, attempts);
}
