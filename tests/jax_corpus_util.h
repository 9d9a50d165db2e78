/* Shared by the JAX conformance corpus tests (test_jax_corpus, test_runtime_corpus): the per-case
 * tolerance from cases.json, loading an input or expected .npy as an evaluator value, and the
 * comparison of a result leaf with XLA's output (tests/data/README.md gives the rule). Each test
 * program includes this once. */
#ifndef OT_JAX_CORPUS_UTIL_H
#define OT_JAX_CORPUS_UTIL_H

#include "optitpu/exec.h"
#include "ot_test.h"

#include <jansson.h>
#include <math.h>

typedef struct tol {
    bool exact;
    double ulp, atol, rtol;
    bool has_ulp, has_atol, has_rtol;
} tol;

static tol parse_tol(const json_t *t) {
    tol r;
    memset(&r, 0, sizeof r);
    if (!t) {
        r.exact = true;
        return r;
    }
    r.exact = json_is_true(json_object_get(t, "exact"));
    json_t *v;
    if ((v = json_object_get(t, "ulp"))) r.has_ulp = true, r.ulp = json_number_value(v);
    if ((v = json_object_get(t, "atol"))) r.has_atol = true, r.atol = json_number_value(v);
    if ((v = json_object_get(t, "rtol"))) r.has_rtol = true, r.rtol = json_number_value(v);
    return r;
}

/* Reads one tensor entry; bf16 is stored as u16 bit patterns and relabelled. */
static ot_status load_tensor(const char *dir, const json_t *e, ot_value *out) {
    *out = ot_value_empty();
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(e, "file")));
    ot_tensor t;
    OT_CHECK(ot_npy_read_file(path, &t));
    const char *dt = json_string_value(json_object_get(e, "dtype"));
    ot_dtype want = ot_dtype_from_name(dt, strlen(dt));
    if (want == OT_BF16 && t.shape.dtype == OT_U16) t.shape.dtype = OT_BF16;
    if (t.shape.dtype != want) {
        ot_tensor_release(&t);
        return ot_error(OT_ERR_CORRUPT_DATA, "%s: dtype %s, index says %s", path,
                        ot_dtype_name(t.shape.dtype), dt);
    }
    ot_status s = ot_value_from_tensor(out, &t);
    ot_tensor_release(&t);
    return s;
}

/* Orders float bit patterns as integers, +0 and -0 equal: the ulp distance is the difference. */
static int64_t ulp_key(ot_dtype t, const void *p, int64_t i) {
    int64_t s;
    switch (t) {
    case OT_F16:
    case OT_BF16: s = ((const int16_t *)p)[i]; break;
    case OT_F32: s = ((const int32_t *)p)[i]; break;
    default: s = ((const int64_t *)p)[i]; break;
    }
    int w = (int)ot_dtype_size(t) * 8;
    int64_t mag = s & (w == 64 ? INT64_MAX : (int64_t)((1ull << (w - 1)) - 1));
    return s < 0 ? -mag : mag;
}

static double ld(ot_dtype t, const void *p, int64_t i) {
    switch (t) {
    case OT_F16: return ot_f16_to_f32(((const uint16_t *)p)[i]);
    case OT_BF16: return ot_bf16_to_f32(((const uint16_t *)p)[i]);
    case OT_F32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

/* Compares got with expected; on mismatch writes a description into why. */
static bool compare(const ot_value *got, const ot_value *exp, const tol *tl, char *why, size_t n) {
    if (got->kind != OT_IR_ARRAY) {
        snprintf(why, n, "result is not an array");
        return false;
    }
    if (!ot_shape_equal(&got->array.shape, &exp->array.shape)) {
        char a[96], b[96];
        ot_shape_format(&got->array.shape, a, sizeof a);
        ot_shape_format(&exp->array.shape, b, sizeof b);
        snprintf(why, n, "shape %s, expected %s", a, b);
        return false;
    }
    ot_dtype t = got->array.shape.dtype;
    int64_t numel = ot_shape_numel_unchecked(&got->array.shape);
    if (ot_dtype_is_complex(t)) { /* each component compared as a real number */
        t = ot_dtype_complex_part(t);
        numel *= 2;
    }
    size_t es = ot_dtype_size(t);
    const char *g = got->array.data, *e = exp->array.data;
    if (!ot_dtype_is_float(t)) {
        for (int64_t i = 0; i < numel; i++)
            if (memcmp(g + i * (int64_t)es, e + i * (int64_t)es, es) != 0) {
                long long gv = 0, ev = 0;
                memcpy(&gv, g + i * (int64_t)es, es);
                memcpy(&ev, e + i * (int64_t)es, es);
                snprintf(why, n, "element %lld: got bits %llx, expected %llx", (long long)i, gv,
                         ev);
                return false;
            }
        return true;
    }
    for (int64_t i = 0; i < numel; i++) {
        double gv = ld(t, g, i), ev = ld(t, e, i);
        if (isnan(ev) || isnan(gv)) {
            if (isnan(ev) && isnan(gv)) continue;
            snprintf(why, n, "element %lld: got %.9g, expected %.9g (NaN positions)", (long long)i,
                     gv, ev);
            return false;
        }
        if (tl->exact) {
            if (memcmp(g + i * (int64_t)es, e + i * (int64_t)es, es) == 0) continue;
            snprintf(why, n, "element %lld: got %.17g, expected %.17g (exact)", (long long)i, gv,
                     ev);
            return false;
        }
        if (isinf(ev) || isinf(gv)) {
            if (gv == ev) continue;
            snprintf(why, n, "element %lld: got %.9g, expected %.9g (infinities)", (long long)i, gv,
                     ev);
            return false;
        }
        bool ok = false;
        int64_t du = ulp_key(t, g, i) - ulp_key(t, e, i);
        if (du < 0) du = -du;
        if (tl->has_ulp && (double)du <= tl->ulp) ok = true;
        double at = tl->has_atol ? tl->atol : 0, rt = tl->has_rtol ? tl->rtol : 0;
        if ((tl->has_atol || tl->has_rtol) && fabs(gv - ev) <= at + rt * fabs(ev)) ok = true;
        if (!ok) {
            snprintf(why, n,
                     "element %lld: got %.9g, expected %.9g (%lld ulp; tol ulp %g atol %g rtol %g)",
                     (long long)i, gv, ev, (long long)du, tl->ulp, at, rt);
            return false;
        }
    }
    return true;
}

#endif /* OT_JAX_CORPUS_UTIL_H */
