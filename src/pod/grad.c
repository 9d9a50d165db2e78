/* Gradient aggregation: fusion buckets, weighted sums, compression with error feedback (bf16/f16
 * casts, int8 with a per-bucket scale, top-k), LocalSGD; and batch coordination (splitting a
 * global batch, the weights that make aggregated gradients the exact full-batch mean).
 *
 * Compressed payloads that cannot be summed on the wire (int8 with per-member scales, top-k
 * index/value pairs) are all-gathered and every member sums the decoded contributions in rank
 * order, so all members hold bit-identical results. */
#include "pod_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const compress_names[] = {"none", "bf16", "f16", "int8", "topk"};
_Static_assert(sizeof compress_names / sizeof *compress_names == OT_COMPRESS_COUNT, "names");

const char *ot_grad_compress_name(ot_grad_compress c) {
    return c >= 0 && c < OT_COMPRESS_COUNT ? compress_names[c] : "?";
}

ot_grad_aggregator_options ot_grad_aggregator_options_default(void) {
    ot_grad_aggregator_options o = {.bucket_bytes = 25u << 20,
                                    .op = OT_REDOP_MEAN,
                                    .weight = -1,
                                    .compress = OT_COMPRESS_NONE,
                                    .error_feedback = true,
                                    .topk_fraction = 0.01,
                                    .coll = ot_coll_options_default()};
    return o;
}

typedef struct kv {
    float mag;
    uint32_t idx;
} kv;

struct ot_grad_aggregator {
    ot_comm *c;
    ot_grad_aggregator_options o;
    int nt;
    size_t *sizes;
    size_t total, bucket_elems;
    int nbuckets;
    float *buf;      /* one bucket, f32 */
    float *residual; /* error feedback, total elements (compression only) */
    void *wire;      /* compressed payload of this member */
    void *gathered;  /* all members' payloads */
    struct kv *sel;  /* top-k selection scratch */
    size_t wire_bytes;
};

static size_t payload_bytes(const ot_grad_aggregator *a, size_t count) {
    switch (a->o.compress) {
    case OT_COMPRESS_INT8: return count + sizeof(float);
    case OT_COMPRESS_TOPK: {
        size_t k = (size_t)ceil(a->o.topk_fraction * (double)count);
        if (k < 1) k = 1;
        if (k > count) k = count;
        return k * (sizeof(uint32_t) + sizeof(float));
    }
    default: return 0;
    }
}

void ot_grad_aggregator_free(ot_grad_aggregator *a) {
    if (!a) return;
    ot_free(a->sizes);
    ot_free(a->buf);
    ot_free(a->residual);
    ot_free(a->wire);
    ot_free(a->gathered);
    ot_free(a->sel);
    ot_free(a);
}

ot_status ot_grad_aggregator_create(ot_comm *c, int nt, const size_t *sizes,
                                    const ot_grad_aggregator_options *o, ot_grad_aggregator **out) {
    if (!c || !out || (nt > 0 && !sizes))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "grad aggregator: NULL argument");
    *out = NULL;
    ot_grad_aggregator_options oo = o ? *o : ot_grad_aggregator_options_default();
    if (nt < 0 || oo.bucket_bytes < sizeof(float) ||
        (oo.op != OT_REDOP_SUM && oo.op != OT_REDOP_MEAN) || oo.compress < 0 ||
        oo.compress >= OT_COMPRESS_COUNT || !(oo.topk_fraction > 0 && oo.topk_fraction <= 1))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "grad aggregator: need bucket_bytes >= 4, op SUM or MEAN, a known "
                        "compression and 0 < topk_fraction <= 1");
    ot_grad_aggregator *a = ot_calloc(1, sizeof *a);
    if (!a) return ot_error(OT_ERR_OUT_OF_MEMORY, "grad aggregator: out of memory");
    a->c = c;
    a->o = oo;
    a->nt = nt;
    a->sizes = ot_malloc(sizeof(size_t) * (size_t)(nt ? nt : 1));
    if (!a->sizes) goto oom;
    for (int i = 0; i < nt; i++) a->total += a->sizes[i] = sizes[i];
    a->bucket_elems = oo.bucket_bytes / sizeof(float);
    size_t be = a->total < a->bucket_elems ? a->total : a->bucket_elems;
    a->nbuckets = a->total ? (int)((a->total + a->bucket_elems - 1) / a->bucket_elems) : 0;
    a->buf = ot_malloc(sizeof(float) * (be ? be : 1));
    if (!a->buf) goto oom;
    if (oo.compress != OT_COMPRESS_NONE) {
        if (oo.error_feedback) {
            a->residual = ot_calloc(a->total ? a->total : 1, sizeof(float));
            if (!a->residual) goto oom;
        }
        size_t pb = oo.compress == OT_COMPRESS_BF16 || oo.compress == OT_COMPRESS_F16
                        ? be * 2
                        : payload_bytes(a, be);
        a->wire = ot_malloc(pb ? pb : 1);
        if (!a->wire) goto oom;
        if (oo.compress == OT_COMPRESS_INT8 || oo.compress == OT_COMPRESS_TOPK) {
            a->gathered = ot_malloc((pb ? pb : 1) * (size_t)ot_comm_size(c));
            if (!a->gathered) goto oom;
        }
        if (oo.compress == OT_COMPRESS_TOPK) {
            a->sel = ot_malloc(sizeof(struct kv) * (be ? be : 1));
            if (!a->sel) goto oom;
        }
    }
    *out = a;
    return OT_OK;
oom:
    ot_grad_aggregator_free(a);
    return ot_error(OT_ERR_OUT_OF_MEMORY, "grad aggregator: out of memory");
}

int ot_grad_bucket_count(const ot_grad_aggregator *a) {
    return a->nbuckets;
}
size_t ot_grad_last_wire_bytes(const ot_grad_aggregator *a) {
    return a->wire_bytes;
}

static ot_status residual_check(const ot_grad_aggregator *a, const void *p, size_t n) {
    if (!a || (!p && n)) return ot_error(OT_ERR_INVALID_ARGUMENT, "grad residual: NULL argument");
    if (!a->residual)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "grad residual: the aggregator keeps none (no compression or no error "
                        "feedback)");
    if (n != a->total)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "grad residual: %zu elements, the aggregator's "
                        "gradients have %zu",
                        n, a->total);
    return OT_OK;
}

ot_status ot_grad_residual_get(const ot_grad_aggregator *a, float *out, size_t n) {
    OT_CHECK(residual_check(a, out, n));
    if (n) memcpy(out, a->residual, n * sizeof(float));
    return OT_OK;
}

ot_status ot_grad_residual_set(ot_grad_aggregator *a, const float *in, size_t n) {
    OT_CHECK(residual_check(a, in, n));
    if (n) memcpy(a->residual, in, n * sizeof(float));
    return OT_OK;
}

/* Copies the flat range [lo, lo+n) between the tensors and buf[0..n) (dir 0: gather,
 * 1: scatter). */
static void move_range(ot_grad_aggregator *a, float *const *grads, size_t lo, size_t n, int dir) {
    size_t off = 0, done = 0;
    for (int t = 0; t < a->nt && done < n; t++) {
        size_t sz = a->sizes[t];
        size_t at = lo + done;
        if (at < off + sz) {
            size_t s = at - off, k = sz - s < n - done ? sz - s : n - done;
            if (dir == 0)
                memcpy(a->buf + done, grads[t] + s, k * sizeof(float));
            else
                memcpy(grads[t] + s, a->buf + done, k * sizeof(float));
            done += k;
        }
        off += sz;
    }
}

static int topk_cmp(const void *pa, const void *pb) {
    const kv *x = pa, *y = pb;
    if (x->mag != y->mag) return x->mag > y->mag ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Aggregates buf[0..n) (already weighted) across the members in place. */
static ot_status bucket_reduce(ot_grad_aggregator *a, float *res, size_t n) {
    ot_comm *c = a->c;
    int m = ot_comm_size(c);
    ot_redop op = a->o.weight >= 0 ? OT_REDOP_SUM : a->o.op;
    float *x = a->buf;
    if (a->o.compress == OT_COMPRESS_NONE) {
        a->wire_bytes += n * sizeof(float);
        return ot_comm_allreduce(c, x, x, n, OT_F32, op, &a->o.coll);
    }
    if (res)
        for (size_t i = 0; i < n; i++) x[i] += res[i];
    if (a->o.compress == OT_COMPRESS_BF16 || a->o.compress == OT_COMPRESS_F16) {
        ot_dtype dt = a->o.compress == OT_COMPRESS_BF16 ? OT_BF16 : OT_F16;
        uint16_t *h = a->wire;
        for (size_t i = 0; i < n; i++) {
            h[i] = dt == OT_BF16 ? ot_f32_to_bf16(x[i]) : ot_f32_to_f16(x[i]);
            float back = dt == OT_BF16 ? ot_bf16_to_f32(h[i]) : ot_f16_to_f32(h[i]);
            if (res) res[i] = x[i] - back;
        }
        a->wire_bytes += n * 2;
        OT_CHECK(ot_comm_allreduce(c, h, h, n, dt, op, &a->o.coll));
        for (size_t i = 0; i < n; i++)
            x[i] = dt == OT_BF16 ? ot_bf16_to_f32(h[i]) : ot_f16_to_f32(h[i]);
        return OT_OK;
    }
    size_t pb = payload_bytes(a, n);
    unsigned char *w = a->wire;
    if (a->o.compress == OT_COMPRESS_INT8) {
        float amax = 0;
        for (size_t i = 0; i < n; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        float scale = amax > 0 ? amax / 127.0f : 1.0f;
        memcpy(w, &scale, sizeof scale);
        int8_t *q = (int8_t *)(w + sizeof scale);
        for (size_t i = 0; i < n; i++) {
            float v = nearbyintf(x[i] / scale);
            v = v > 127 ? 127 : v < -127 ? -127 : v;
            q[i] = (int8_t)v;
            if (res) res[i] = x[i] - (float)q[i] * scale;
        }
    } else {
        size_t k = pb / (sizeof(uint32_t) + sizeof(float));
        kv *sel = a->sel;
        for (size_t i = 0; i < n; i++) sel[i] = (kv){fabsf(x[i]), (uint32_t)i};
        qsort(sel, n, sizeof(kv), topk_cmp);
        uint32_t *idx = (uint32_t *)w;
        float *val = (float *)(w + k * sizeof(uint32_t));
        if (res) memcpy(res, x, n * sizeof(float));
        for (size_t j = 0; j < k; j++) {
            idx[j] = sel[j].idx;
            val[j] = x[sel[j].idx];
            if (res) res[sel[j].idx] = 0;
        }
    }
    a->wire_bytes += pb;
    OT_CHECK(ot_comm_allgather(c, w, a->gathered, pb, OT_U8, &a->o.coll));
    /* decode and sum in rank order */
    memset(x, 0, n * sizeof(float));
    for (int r = 0; r < m; r++) {
        const unsigned char *p = (const unsigned char *)a->gathered + (size_t)r * pb;
        if (a->o.compress == OT_COMPRESS_INT8) {
            float scale;
            memcpy(&scale, p, sizeof scale);
            const int8_t *q = (const int8_t *)(p + sizeof scale);
            for (size_t i = 0; i < n; i++) x[i] += (float)q[i] * scale;
        } else {
            size_t k = pb / (sizeof(uint32_t) + sizeof(float));
            for (size_t j = 0; j < k; j++) {
                uint32_t ix;
                float v;
                memcpy(&ix, p + j * sizeof(uint32_t), sizeof ix);
                memcpy(&v, p + k * sizeof(uint32_t) + j * sizeof(float), sizeof v);
                if (ix < n) x[ix] += v;
            }
        }
    }
    if (op == OT_REDOP_MEAN)
        for (size_t i = 0; i < n; i++) x[i] /= (float)m;
    return OT_OK;
}

ot_status ot_grad_aggregate(ot_grad_aggregator *a, float *const *grads) {
    if (!a || (a->nt && !grads))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "aggregate: NULL argument");
    a->wire_bytes = 0;
    for (int b = 0; b < a->nbuckets; b++) {
        size_t lo = (size_t)b * a->bucket_elems;
        size_t n = a->total - lo < a->bucket_elems ? a->total - lo : a->bucket_elems;
        move_range(a, grads, lo, n, 0);
        if (a->o.weight >= 0)
            for (size_t i = 0; i < n; i++) a->buf[i] *= (float)a->o.weight;
        OT_CHECK(bucket_reduce(a, a->residual ? a->residual + lo : NULL, n));
        move_range(a, grads, lo, n, 1);
    }
    return OT_OK;
}

ot_status ot_localsgd_sync(ot_comm *c, float *params, size_t count, int64_t step, int64_t period,
                           const ot_coll_options *o) {
    if (!c || (count && !params))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "localsgd: NULL argument");
    if (period < 1 || step < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "localsgd: period %lld, step %lld",
                        (long long)period, (long long)step);
    if ((step + 1) % period != 0) return OT_OK;
    return ot_comm_allreduce(c, params, params, count, OT_F32, OT_REDOP_MEAN, o);
}

/* ---- batch coordination ---------------------------------------------------------------------- */

ot_status ot_batch_split(int64_t global, int n, const double *tput, int64_t *counts) {
    if (!counts || n < 1 || global < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "batch split: %lld samples over %d replicas",
                        (long long)global, n);
    double total = 0;
    for (int r = 0; tput && r < n; r++) {
        if (!(tput[r] >= 0) || !isfinite(tput[r]))
            return ot_error(OT_ERR_INVALID_ARGUMENT, "batch split: throughput[%d] = %g", r,
                            tput[r]);
        total += tput[r];
    }
    if (tput && !(total > 0))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "batch split: all throughputs are zero");
    /* largest remainder (Hamilton): floor of the exact shares, then the leftover samples go to
     * the largest fractional parts, ties to the lower rank — deterministic */
    int64_t given = 0;
    double *frac = ot_malloc(sizeof(double) * (size_t)n);
    if (!frac) return ot_error(OT_ERR_OUT_OF_MEMORY, "batch split: out of memory");
    for (int r = 0; r < n; r++) {
        double share = tput ? (double)global * tput[r] / total : (double)global / n;
        counts[r] = (int64_t)floor(share);
        frac[r] = share - (double)counts[r];
        given += counts[r];
    }
    for (int64_t left = global - given; left > 0; left--) {
        int best = 0;
        for (int r = 1; r < n; r++)
            if (frac[r] > frac[best]) best = r;
        counts[best]++;
        frac[best] = -1;
    }
    ot_free(frac);
    return OT_OK;
}

ot_status ot_batch_weights(const int64_t *counts, int n, double *weights) {
    if (!counts || !weights || n < 1)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "batch weights: bad arguments");
    int64_t g = 0;
    for (int r = 0; r < n; r++) {
        if (counts[r] < 0)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "batch weights: negative count");
        g += counts[r];
    }
    if (g == 0) return ot_error(OT_ERR_INVALID_ARGUMENT, "batch weights: empty global batch");
    for (int r = 0; r < n; r++) weights[r] = (double)counts[r] / (double)g;
    return OT_OK;
}

ot_status ot_batch_microbatches(int64_t count, int64_t micro, int64_t global, int64_t *sizes,
                                double *weights, int cap, int *nmb) {
    if (!nmb || micro < 1 || count < 0 || global < count || global < 1)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "microbatches: count %lld, micro %lld, global %lld", (long long)count,
                        (long long)micro, (long long)global);
    int64_t k = (count + micro - 1) / micro;
    *nmb = (int)k;
    if (k > cap)
        return ot_error(OT_ERR_OUT_OF_RANGE, "microbatches: %lld needed, room for %d", (long long)k,
                        cap);
    for (int64_t i = 0; i < k; i++) {
        int64_t s = count - i * micro < micro ? count - i * micro : micro;
        if (sizes) sizes[i] = s;
        if (weights) weights[i] = (double)s / (double)global;
    }
    return OT_OK;
}
