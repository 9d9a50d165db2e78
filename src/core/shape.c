/* Dense row-major shapes with overflow-checked counts. */
#include "optitpu/core.h"

#include <stdio.h>
#include <string.h>

ot_status ot_shape_make(ot_shape *out, ot_dtype dtype, int rank, const int64_t *dims) {
    if (ot_dtype_size(dtype) == 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "shape: invalid dtype %d", (int)dtype);
    if (rank < 0 || rank > OT_MAX_RANK)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "shape: rank %d outside 0..%d", rank, OT_MAX_RANK);
    ot_shape s;
    memset(&s, 0, sizeof s);
    s.dtype = dtype;
    s.rank = rank;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "shape: dimension %d is negative (%lld)", i,
                            (long long)dims[i]);
        s.dims[i] = dims[i];
    }
    int64_t nb;
    OT_CHECK(ot_shape_nbytes(&s, &nb));
    *out = s;
    return OT_OK;
}

ot_shape ot_shape_scalar(ot_dtype dtype) {
    ot_shape s;
    memset(&s, 0, sizeof s);
    s.dtype = dtype;
    return s;
}

ot_status ot_shape_numel(const ot_shape *s, int64_t *out) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (s->dims[i] < 0)
            return ot_error(OT_ERR_INVALID_ARGUMENT, "shape: dimension %d is negative", i);
        if (s->dims[i] != 0 && n > INT64_MAX / s->dims[i])
            return ot_error(OT_ERR_OUT_OF_RANGE, "shape: element count overflows int64");
        n *= s->dims[i];
    }
    *out = n;
    return OT_OK;
}

ot_status ot_shape_nbytes(const ot_shape *s, int64_t *out) {
    int64_t n;
    OT_CHECK(ot_shape_numel(s, &n));
    int64_t es = (int64_t)ot_dtype_size(s->dtype);
    if (es == 0) return ot_error(OT_ERR_INVALID_ARGUMENT, "shape: invalid dtype");
    if (n > INT64_MAX / es)
        return ot_error(OT_ERR_OUT_OF_RANGE, "shape: byte count overflows int64");
    *out = n * es;
    return OT_OK;
}

int64_t ot_shape_numel_unchecked(const ot_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) n *= s->dims[i];
    return n;
}

int64_t ot_shape_nbytes_unchecked(const ot_shape *s) {
    return ot_shape_numel_unchecked(s) * (int64_t)ot_dtype_size(s->dtype);
}

void ot_shape_strides(const ot_shape *s, int64_t strides[OT_MAX_RANK]) {
    int64_t st = 1;
    for (int i = s->rank - 1; i >= 0; i--) {
        strides[i] = st;
        st *= s->dims[i];
    }
}

bool ot_shape_equal(const ot_shape *a, const ot_shape *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

int ot_shape_format(const ot_shape *s, char *buf, size_t n) {
    size_t len = 0;
    int w = snprintf(buf, n, "%s[", ot_dtype_name(s->dtype));
    if (w < 0) return w;
    len += (size_t)w;
    for (int i = 0; i < s->rank; i++) {
        w = snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, "%s%lld", i ? "," : "",
                     (long long)s->dims[i]);
        if (w < 0) return w;
        len += (size_t)w;
    }
    w = snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, "]");
    if (w < 0) return w;
    return (int)(len + (size_t)w);
}

ot_status ot_tensor_alloc(ot_tensor *t, const ot_shape *s) {
    memset(t, 0, sizeof *t);
    int64_t nb;
    OT_CHECK(ot_shape_nbytes(s, &nb));
    if ((uint64_t)nb > SIZE_MAX - OT_ALIGNMENT)
        return ot_error(OT_ERR_OUT_OF_MEMORY, "tensor: %lld bytes do not fit in memory",
                        (long long)nb);
    void *p = ot_aligned_alloc(OT_ALIGNMENT, (size_t)nb);
    if (!p)
        return ot_error(OT_ERR_OUT_OF_MEMORY, "tensor: cannot allocate %lld bytes", (long long)nb);
    memset(p, 0, (size_t)nb);
    t->shape = *s;
    t->data = p;
    t->nbytes = (size_t)nb;
    t->owned = true;
    return OT_OK;
}

ot_status ot_tensor_borrow(ot_tensor *t, const ot_shape *s, void *data) {
    memset(t, 0, sizeof *t);
    int64_t nb;
    OT_CHECK(ot_shape_nbytes(s, &nb));
    if (!data && nb > 0) return ot_error(OT_ERR_INVALID_ARGUMENT, "tensor: NULL data");
    t->shape = *s;
    t->data = data;
    t->nbytes = (size_t)nb;
    t->owned = false;
    return OT_OK;
}

void ot_tensor_release(ot_tensor *t) {
    if (!t) return;
    if (t->owned) ot_aligned_free(t->data);
    memset(t, 0, sizeof *t);
}
