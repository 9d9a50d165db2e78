/* Devices (vtable + context), buffers, the host CPU device (its pool's memory, the host kernels
 * as its launch), and ot_device_execute: argument checks, output allocation (donated outputs take
 * over their parameter's memory), the device's execute override or else the arena from the
 * device's memory and the generic execution loop, and cleanup on every failure path. */
#include "runtime/runtime_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct ot_device {
    const ot_device_vtable *vt;
    void *ctx;
    int index;
    atomic_int active;
    atomic_int live_buffers;
    ot_profile *profile;
};

struct ot_buffer {
    ot_device *dev;
    ot_shape shape;
    int64_t nbytes;
    void *data;
    bool donated;
    bool view; /* ot_buffer_view_host: data is the caller's, never freed here */
};

/* ---- host device ------------------------------------------------------------------------- */

typedef struct host_ctx {
    ot_mem_pool *pool;
    ot_device *dev;
} host_ctx;

static ot_status host_alloc(void *ctx, int64_t bytes, void **out) {
    return ot_mem_pool_alloc(((host_ctx *)ctx)->pool, bytes, out);
}
static ot_status host_free(void *ctx, void *ptr) {
    return ot_mem_pool_release(((host_ctx *)ctx)->pool, ptr);
}
static ot_status host_copy(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    if (n) memcpy(dst, src, n);
    return OT_OK;
}
static void host_memory(void *ctx, ot_mem_stats *out) {
    ot_mem_pool_stats(((host_ctx *)ctx)->pool, out);
}
static int64_t host_trim(void *ctx) {
    return ot_mem_pool_trim(((host_ctx *)ctx)->pool);
}
static void host_destroy(void *ctx) {
    host_ctx *h = ctx;
    ot_mem_pool_free(h->pool);
    ot_free(h);
}

static const ot_device_vtable host_vt = {
    .kind = "host-cpu",
    .alloc = host_alloc,
    .free = host_free,
    .copy_to_device = host_copy,
    .copy_to_host = host_copy,
    .copy_on_device = host_copy,
    .launch = rt_host_launch, /* the generic loop with the host kernels */
    .synchronize = NULL,
    .memory = host_memory,
    .trim = host_trim,
    .destroy = host_destroy,
};

ot_status ot_device_create(const ot_device_vtable *vt, void *ctx, int index, ot_device **out) {
    *out = NULL;
    if (!vt || !vt->alloc || !vt->free || !vt->copy_to_device || !vt->copy_to_host ||
        !vt->copy_on_device || (!vt->launch && !vt->execute) || !vt->memory)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "device: vtable lacks a required slot (alloc, free, copies, launch or "
                        "execute, memory)");
    ot_device *d = ot_calloc(1, sizeof *d);
    if (!d) return ot_error(OT_ERR_OUT_OF_MEMORY, "device: out of memory");
    d->vt = vt;
    d->ctx = ctx;
    d->index = index;
    atomic_init(&d->active, 0);
    atomic_init(&d->live_buffers, 0);
    *out = d;
    return OT_OK;
}

ot_status ot_host_device_create(int index, int64_t capacity, ot_device **out) {
    *out = NULL;
    host_ctx *h = ot_calloc(1, sizeof *h);
    if (!h) return ot_error(OT_ERR_OUT_OF_MEMORY, "host device: out of memory");
    ot_status st = ot_mem_pool_create(capacity, &h->pool);
    if (st == OT_OK) st = ot_device_create(&host_vt, h, index, out);
    if (st != OT_OK) {
        ot_mem_pool_free(h->pool);
        ot_free(h);
        return st;
    }
    h->dev = *out;
    return OT_OK;
}

void ot_device_free(ot_device *d) {
    if (!d) return;
    if (d->vt->destroy) d->vt->destroy(d->ctx);
    ot_free(d);
}

int ot_device_index(const ot_device *d) {
    return d->index;
}
const char *ot_device_kind(const ot_device *d) {
    return d->vt->kind ? d->vt->kind : "device";
}
void ot_device_memory(ot_device *d, ot_mem_stats *out) {
    memset(out, 0, sizeof *out);
    d->vt->memory(d->ctx, out);
}
int64_t ot_device_trim(ot_device *d) {
    return d->vt->trim ? d->vt->trim(d->ctx) : 0;
}
ot_status ot_device_synchronize(ot_device *d) {
    return d->vt->synchronize ? d->vt->synchronize(d->ctx) : OT_OK;
}
int ot_device_active_runs(const ot_device *d) {
    return atomic_load(&((ot_device *)d)->active);
}
ot_mem_pool *ot_device_pool(ot_device *d) {
    return d && d->vt == &host_vt ? ((host_ctx *)d->ctx)->pool : NULL;
}

void rt_profile_memory_listener(void *ud, const char *kind, int64_t bytes, const ot_mem_stats *s) {
    ot_device *d = ud;
    if (d->profile)
        ot_profile_record_memory(d->profile, d->index, kind, bytes, s->in_use, s->reserved);
}

void ot_device_set_profile(ot_device *d, ot_profile *p) {
    d->profile = p;
    ot_mem_pool *pool = ot_device_pool(d);
    if (pool) ot_mem_pool_set_listener(pool, p ? rt_profile_memory_listener : NULL, p ? d : NULL);
}

int ot_device_count_from_env(void) {
    const char *s = getenv("OPTITPU_DEVICES");
    if (!s || !*s) return 1;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v > 4096) {
        ot_log(OT_LOG_WARN, "OPTITPU_DEVICES='%s' is not a count in 1..4096; using 1", s);
        return 1;
    }
    return (int)v;
}

/* ---- buffers ------------------------------------------------------------------------------ */

ot_status ot_buffer_alloc(ot_device *d, const ot_shape *s, ot_buffer **out) {
    *out = NULL;
    if (!d || !s) return ot_error(OT_ERR_INVALID_ARGUMENT, "buffer: device or shape is NULL");
    int64_t nb;
    OT_CHECK(ot_shape_nbytes(s, &nb));
    ot_buffer *b = ot_calloc(1, sizeof *b);
    if (!b) return ot_error(OT_ERR_OUT_OF_MEMORY, "buffer: out of memory");
    ot_status st = d->vt->alloc(d->ctx, nb, &b->data);
    if (st != OT_OK) {
        ot_free(b);
        char sh[96];
        ot_shape_format(s, sh, sizeof sh);
        return ot_error_wrap(st, "device %d: buffer %s", d->index, sh);
    }
    b->dev = d;
    b->shape = *s;
    b->nbytes = nb;
    atomic_fetch_add(&d->live_buffers, 1);
    *out = b;
    return OT_OK;
}

ot_status ot_buffer_from_host(ot_device *d, const ot_tensor *t, ot_buffer **out) {
    *out = NULL;
    if (!t || (!t->data && ot_shape_nbytes_unchecked(&t->shape) > 0))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "buffer from host: tensor has no data");
    ot_buffer *b;
    OT_CHECK(ot_buffer_alloc(d, &t->shape, &b));
    ot_status st = d->vt->copy_to_device(d->ctx, b->data, t->data, (size_t)b->nbytes);
    if (st != OT_OK) {
        ot_buffer_free(b);
        return st;
    }
    *out = b;
    return OT_OK;
}

static ot_status check_live(const ot_buffer *b, const char *what) {
    if (!b) return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: buffer is NULL", what);
    if (b->donated)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "%s: the buffer was donated to an execution and holds no data", what);
    return OT_OK;
}

ot_status ot_buffer_to_host(const ot_buffer *b, ot_tensor *out) {
    memset(out, 0, sizeof *out);
    OT_CHECK(check_live(b, "buffer to host"));
    OT_CHECK(ot_tensor_alloc(out, &b->shape));
    ot_status st = b->dev->vt->copy_to_host(b->dev->ctx, out->data, b->data, (size_t)b->nbytes);
    if (st != OT_OK) ot_tensor_release(out);
    return st;
}

ot_status ot_buffer_copy(ot_buffer *dst, const ot_buffer *src) {
    OT_CHECK(check_live(dst, "buffer copy"));
    OT_CHECK(check_live(src, "buffer copy"));
    if (!ot_shape_equal(&dst->shape, &src->shape)) {
        char a[96], b[96];
        ot_shape_format(&dst->shape, a, sizeof a);
        ot_shape_format(&src->shape, b, sizeof b);
        return ot_error(OT_ERR_SHAPE_MISMATCH, "buffer copy: destination %s, source %s", a, b);
    }
    if (dst->dev == src->dev)
        return dst->dev->vt->copy_on_device(dst->dev->ctx, dst->data, src->data,
                                            (size_t)src->nbytes);
    /* between devices: through host memory */
    ot_tensor t;
    OT_CHECK(ot_buffer_to_host(src, &t));
    ot_status st = dst->dev->vt->copy_to_device(dst->dev->ctx, dst->data, t.data, t.nbytes);
    ot_tensor_release(&t);
    return st;
}

static ot_status check_range(const ot_buffer *b, int64_t off, int64_t n, const void *p,
                             const char *what) {
    OT_CHECK(check_live(b, what));
    if (!p && n > 0) return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: NULL host memory", what);
    if (off < 0 || n < 0 || off > b->nbytes || n > b->nbytes - off)
        return ot_error(OT_ERR_OUT_OF_RANGE, "%s: bytes [%lld, %lld + %lld) of a %lld-byte buffer",
                        what, (long long)off, (long long)off, (long long)n, (long long)b->nbytes);
    return OT_OK;
}

ot_status ot_buffer_write_bytes(ot_buffer *b, int64_t off, const void *src, int64_t n) {
    OT_CHECK(check_range(b, off, n, src, "buffer write"));
    if (n == 0) return OT_OK;
    return b->dev->vt->copy_to_device(b->dev->ctx, (char *)b->data + off, src, (size_t)n);
}

ot_status ot_buffer_read_bytes(const ot_buffer *b, int64_t off, void *dst, int64_t n) {
    OT_CHECK(check_range(b, off, n, dst, "buffer read"));
    if (n == 0) return OT_OK;
    return b->dev->vt->copy_to_host(b->dev->ctx, dst, (const char *)b->data + off, (size_t)n);
}

void ot_buffer_free(ot_buffer *b) {
    if (!b) return;
    if (!b->donated && b->dev && !b->view) {
        b->dev->vt->free(b->dev->ctx, b->data);
        atomic_fetch_sub(&b->dev->live_buffers, 1);
    }
    ot_free(b);
}

const ot_shape *ot_buffer_shape(const ot_buffer *b) {
    return &b->shape;
}
ot_device *ot_buffer_device(const ot_buffer *b) {
    return b->dev;
}
bool ot_buffer_donated(const ot_buffer *b) {
    return b->donated;
}
const void *ot_buffer_host_data(const ot_buffer *b) {
    return b && b->dev && b->dev->vt == &host_vt && !b->donated ? b->data : NULL;
}
ot_status ot_buffer_view_host(ot_device *d, const ot_shape *s, void *data, ot_buffer **out) {
    if (!out) return ot_error(OT_ERR_INVALID_ARGUMENT, "buffer view: NULL output");
    *out = NULL;
    if (!d || !s || !data)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "buffer view: device, shape or memory is NULL");
    if (d->vt != &host_vt)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "buffer view: device %d (%s) does not run on the host's memory", d->index,
                        d->vt->kind);
    int64_t nb;
    OT_CHECK(ot_shape_nbytes(s, &nb));
    ot_buffer *b = ot_calloc(1, sizeof *b);
    if (!b) return ot_error(OT_ERR_OUT_OF_MEMORY, "buffer view: out of memory");
    b->dev = d;
    b->shape = *s;
    b->nbytes = nb;
    b->data = data;
    b->view = true;
    *out = b;
    return OT_OK;
}

void *ot_buffer_host_data_mut(ot_buffer *b) {
    return b && b->dev && b->dev->vt == &host_vt && !b->donated ? b->data : NULL;
}

/* ---- execute ------------------------------------------------------------------------------ */

static const char *param_name(const ot_executable *exe, int k) {
    const ot_computation *c = ot_module_entry(ot_executable_module(exe));
    return c && k < c->nparams && c->params[k] ? c->params[k]->name : "?";
}

/* The generic loop on a device without its own execute: the arena from the device's memory,
 * every kernel through its launch. */
static ot_status execute_kernels(ot_device *d, const ot_executable *exe, void *const *params,
                                 void *const *outs, const ot_run_options *o, ot_run_result *res) {
    int64_t an = ot_executable_arena_size(exe);
    void *arena = NULL;
    if (an > 0) {
        ot_status st = d->vt->alloc(d->ctx, an, &arena);
        if (st != OT_OK)
            return ot_error_wrap(st, "device %d: arena of %lld bytes for %s", d->index,
                                 (long long)an, ot_module_name(ot_executable_module(exe)));
    }
    ot_status st =
        rt_execute_kernels(exe, arena, params, outs, o, d->index, d->vt->launch, d->ctx, res);
    if (arena) d->vt->free(d->ctx, arena);
    return st;
}

ot_status ot_device_execute(ot_device *d, const ot_executable *exe, ot_buffer *const *params,
                            int nparams, ot_buffer **outs, int nouts, const ot_run_options *o,
                            ot_run_result *res) {
    for (int k = 0; outs && k < nouts; k++) outs[k] = NULL;
    if (res) memset(res, 0, sizeof *res);
    if (!d || !exe)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "execute: device or executable is NULL");
    int np = ot_executable_param_count(exe), no = ot_executable_output_count(exe);
    const char *mname = ot_module_name(ot_executable_module(exe));
    if (nparams != np)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "execute %s: takes %d parameter%s, got %d", mname,
                        np, np == 1 ? "" : "s", nparams);
    if (nouts != no || (no > 0 && !outs))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "execute %s: produces %d output%s, room for %d",
                        mname, no, no == 1 ? "" : "s", nouts);
    for (int k = 0; k < np; k++) {
        const ot_buffer *b = params ? params[k] : NULL;
        const ot_slot *s = ot_executable_slot(exe, ot_executable_param_slot(exe, k));
        if (!b)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "execute %s: parameter %d (%s) is NULL", mname,
                            k, param_name(exe, k));
        if (b->donated)
            return ot_error(OT_ERR_FAILED_PRECONDITION,
                            "execute %s: parameter %d (%s) was donated to an earlier execution",
                            mname, k, param_name(exe, k));
        if (b->dev != d)
            return ot_error(OT_ERR_INVALID_ARGUMENT,
                            "execute %s: parameter %d (%s) lives on device %d, not device %d",
                            mname, k, param_name(exe, k), b->dev->index, d->index);
        if (!ot_shape_equal(&b->shape, &s->shape)) {
            char want[96], got[96];
            ot_shape_format(&s->shape, want, sizeof want);
            ot_shape_format(&b->shape, got, sizeof got);
            return ot_error(OT_ERR_SHAPE_MISMATCH,
                            "execute %s: parameter %d (%s) expects %s, got %s", mname, k,
                            param_name(exe, k), want, got);
        }
        for (int j = 0; j < k; j++)
            if (params[j] == b)
                for (int q = 0; q < no; q++) {
                    const ot_slot *os = ot_executable_slot(exe, ot_executable_output_slot(exe, q));
                    if (os->alias_param == k || os->alias_param == j)
                        return ot_error(OT_ERR_INVALID_ARGUMENT,
                                        "execute %s: one buffer passed as parameters %d and %d, "
                                        "one of them donated",
                                        mname, j, k);
                }
    }
    int nmax = (np > no ? np : no) + 1;
    void **pm = ot_calloc((size_t)nmax, sizeof *pm);
    void **om = ot_calloc((size_t)nmax, sizeof *om);
    ot_buffer **made = ot_calloc((size_t)nmax, sizeof *made);
    ot_status st = OT_OK;
    bool shown = false; /* outs[] hold the outputs for the hook */
    if (!pm || !om || !made) {
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "execute %s: out of memory", mname);
        goto fail;
    }
    for (int k = 0; k < np; k++) pm[k] = params[k]->data;
    for (int q = 0; q < no && st == OT_OK; q++) {
        const ot_slot *os = ot_executable_slot(exe, ot_executable_output_slot(exe, q));
        if (os->alias_param >= 0) {
            ot_buffer *b = ot_calloc(1, sizeof *b);
            if (!b) {
                st = ot_error(OT_ERR_OUT_OF_MEMORY, "execute %s: out of memory", mname);
                break;
            }
            b->dev = d;
            b->shape = os->shape;
            b->nbytes = os->nbytes;
            b->data = params[os->alias_param]->data;
            b->donated = true; /* not owning until the run succeeds */
            made[q] = b;
            om[q] = b->data;
        } else {
            st = ot_buffer_alloc(d, &os->shape, &made[q]);
            if (st == OT_OK)
                om[q] = made[q]->data;
            else
                st = ot_error_wrap(st, "execute %s: output %d", mname, q);
        }
    }
    if (st == OT_OK && o && o->kernel_hook) {
        if (d->vt->execute) {
            st = ot_error(OT_ERR_UNIMPLEMENTED,
                          "execute %s: device %d (%s) runs executables itself: no kernel hook",
                          mname, d->index, d->vt->kind);
            goto fail;
        }
        /* the hook may read an output once its last writer has run */
        for (int q = 0; q < no; q++) outs[q] = made[q];
        shown = true;
    }
    if (st != OT_OK) goto fail;
    atomic_fetch_add(&d->active, 1);
    st = d->vt->execute ? d->vt->execute(d->ctx, d, exe, pm, om, o, res)
                        : execute_kernels(d, exe, pm, om, o, res);
    atomic_fetch_sub(&d->active, 1);
    if (st != OT_OK) goto fail;
    /* success: donated parameter memory moves to the outputs */
    for (int q = 0; q < no; q++) {
        const ot_slot *os = ot_executable_slot(exe, ot_executable_output_slot(exe, q));
        if (os->alias_param >= 0) {
            made[q]->donated = false;
            made[q]->view = params[os->alias_param]->view; /* the memory stays the caller's */
            params[os->alias_param]->donated = true;
        }
        outs[q] = made[q];
    }
    ot_free(pm);
    ot_free(om);
    ot_free(made);
    return OT_OK;
fail:
    if (!(shown && o->keep_outputs)) {
        for (int q = 0; made && q < no; q++) ot_buffer_free(made[q]);
        for (int q = 0; q < no; q++) outs[q] = NULL;
    }
    ot_free(pm);
    ot_free(om);
    ot_free(made);
    return st;
}
