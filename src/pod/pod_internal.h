/* Internal helpers shared by the pod sources. */
#ifndef OT_POD_INTERNAL_H
#define OT_POD_INTERNAL_H

#include "optitpu/collectives.h"
#include "optitpu/pod.h"

/* dst[i] = op(dst[i], src[i]) for n elements of an accumulation dtype (f32, f64, s32, s64);
 * op is SUM, PROD, MAX or MIN. Integer arithmetic wraps (computed unsigned). */
void ot_pod_combine(void *dst, const void *src, size_t n, ot_dtype dt, ot_redop op);

static inline uint64_t ot_pod_now(ot_clock_fn fn, void *ud) {
    return fn ? fn(ud) : ot_now_ns();
}

#endif
