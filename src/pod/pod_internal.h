/* Internal helpers shared by the pod sources. */
#ifndef OT_POD_INTERNAL_H
#define OT_POD_INTERNAL_H

#include "optitpu/collectives.h"
#include "optitpu/pod.h"
#include "reduce_kernels.h"

static inline uint64_t ot_pod_now(ot_clock_fn fn, void *ud) {
    return fn ? fn(ud) : ot_now_ns();
}

#endif
