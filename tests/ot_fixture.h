/* Comparing results with the peer-generated fixtures (tests/data/README.md), the same rule for
 * every test that uses them: the JAX corpus (outputs and VJP grads), the SPMD corpus and the
 * optimizer trajectories.
 *
 *     ot_fixture_tol tol;
 *     ot_fixture_tol_parse(json_object_get(case_json, "tolerance"), &tol);   // jansson object
 *     char why[256];
 *     if (!ot_fixture_compare(&got, &expected, &tol, why, sizeof why)) fail(why);
 *
 * Rule: {"exact": true} — integers and pred equal; floats bit-equal (sign of zero included) except
 * that any NaN matches any NaN. Otherwise any of ulp/atol/rtol: NaN positions and infinities must
 * match; a finite element passes when ulp_distance <= ulp (in the element type; +0 and -0 are 0
 * apart) or |got - exp| <= atol + rtol * |exp| (in double).
 *
 * Tensors must have the same shape and dtype; bf16 data read from a fixture arrives as OT_U16 and
 * must be relabelled OT_BF16 first (ot_fixture_relabel). Header-only; include after <jansson.h>
 * and "optitpu/core.h". Not thread-safe only in the sense that msg is caller-owned. */
#ifndef OT_FIXTURE_H
#define OT_FIXTURE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "optitpu/core.h"

typedef struct ot_fixture_tol {
    bool exact;
    bool has_ulp, has_atol, has_rtol;
    double ulp, atol, rtol;
} ot_fixture_tol;

/* Returns false for anything but a valid tolerance object (non-negative numbers, or exact). */
static inline bool ot_fixture_tol_parse(const json_t *j, ot_fixture_tol *t) {
    memset(t, 0, sizeof *t);
    if (!json_is_object(j)) return false;
    if (json_is_true(json_object_get(j, "exact"))) {
        t->exact = true;
        return true;
    }
    const json_t *u = json_object_get(j, "ulp"), *a = json_object_get(j, "atol");
    const json_t *r = json_object_get(j, "rtol");
    if ((u && (!json_is_number(u) || json_number_value(u) < 0)) ||
        (a && (!json_is_number(a) || json_number_value(a) < 0)) ||
        (r && (!json_is_number(r) || json_number_value(r) < 0)))
        return false;
    t->has_ulp = u != NULL, t->has_atol = a != NULL, t->has_rtol = r != NULL;
    t->ulp = u ? json_number_value(u) : 0, t->atol = a ? json_number_value(a) : 0;
    t->rtol = r ? json_number_value(r) : 0;
    return t->has_ulp || t->has_atol || t->has_rtol;
}

/* A fixture's bf16 tensor is stored as u16 bit patterns: give it its real dtype. */
static inline void ot_fixture_relabel(ot_tensor *t, ot_dtype real) {
    if (real == OT_BF16 && t->shape.dtype == OT_U16) t->shape.dtype = OT_BF16;
}

/* Element i of a float tensor as double, and its bits mapped to a line where adjacent floats are
 * 1 apart (+0 and -0 both 0). */
static inline double ot_fixture_f64(const ot_tensor *t, int64_t i, int64_t *ordered) {
    int64_t bits;
    double v;
    switch (t->shape.dtype) {
    case OT_F16: {
        uint16_t b = ((const uint16_t *)t->data)[i];
        v = ot_f16_to_f32(b);
        bits = (b & 0x8000) ? -(int64_t)(b & 0x7fff) : (int64_t)b;
        break;
    }
    case OT_BF16: {
        uint16_t b = ((const uint16_t *)t->data)[i];
        v = ot_bf16_to_f32(b);
        bits = (b & 0x8000) ? -(int64_t)(b & 0x7fff) : (int64_t)b;
        break;
    }
    case OT_F32: {
        float f = ((const float *)t->data)[i];
        uint32_t b;
        memcpy(&b, &f, 4);
        v = f;
        bits = (b & 0x80000000u) ? -(int64_t)(b & 0x7fffffffu) : (int64_t)b;
        break;
    }
    default: {
        double d = ((const double *)t->data)[i];
        uint64_t b;
        memcpy(&b, &d, 8);
        v = d;
        bits = (b >> 63) ? -(int64_t)(b & 0x7fffffffffffffffull) : (int64_t)b;
        break;
    }
    }
    *ordered = bits;
    return v;
}

static inline bool ot_fixture_compare(const ot_tensor *got, const ot_tensor *exp,
                                      const ot_fixture_tol *tol, char *msg, size_t n) {
    if (!ot_shape_equal(&got->shape, &exp->shape)) {
        snprintf(msg, n, "shape/dtype differ (%s vs %s)", ot_dtype_name(got->shape.dtype),
                 ot_dtype_name(exp->shape.dtype));
        return false;
    }
    int64_t count = ot_shape_numel_unchecked(&exp->shape);
    if (!ot_dtype_is_float(exp->shape.dtype)) {
        size_t es = ot_dtype_size(exp->shape.dtype);
        for (int64_t i = 0; i < count; i++) {
            if (memcmp((const char *)got->data + (size_t)i * es,
                       (const char *)exp->data + (size_t)i * es, es) != 0) {
                snprintf(msg, n, "element %lld differs", (long long)i);
                return false;
            }
        }
        return true;
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t og, oe;
        double g = ot_fixture_f64(got, i, &og), e = ot_fixture_f64(exp, i, &oe);
        if (isnan(g) || isnan(e)) {
            if (isnan(g) != isnan(e)) {
                snprintf(msg, n, "element %lld: %.9g vs %.9g (NaN positions differ)", (long long)i,
                         g, e);
                return false;
            }
            continue;
        }
        if (isinf(g) || isinf(e)) {
            if (g != e) {
                snprintf(msg, n, "element %lld: %.9g vs %.9g (infinities differ)", (long long)i, g,
                         e);
                return false;
            }
            continue;
        }
        bool ok;
        if (tol->exact) {
            ok = og == oe && signbit(g) == signbit(e);
        } else {
            int64_t d = og > oe ? og - oe : oe - og;
            ok = (tol->has_ulp && (double)d <= tol->ulp) ||
                 ((tol->has_atol || tol->has_rtol) &&
                  fabs(g - e) <= tol->atol + tol->rtol * fabs(e));
        }
        if (!ok) {
            snprintf(msg, n, "element %lld: %.17g vs %.17g", (long long)i, g, e);
            return false;
        }
    }
    return true;
}

#endif /* OT_FIXTURE_H */
