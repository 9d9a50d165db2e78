/* The element kernels of every reduction (declared in reduce_kernels.h): combine, f16/bf16
 * widening and narrowing, the MEAN division. One copy serves the in-process communicator and the
 * MPI one, so both combine each element the same way. */
#include "reduce_kernels.h"

#include <string.h>

#define COMBINE_LOOP(T, EXPR)                                                                      \
    do {                                                                                           \
        T *restrict d = dst;                                                                       \
        const T *restrict s = src;                                                                 \
        for (size_t i = 0; i < n; i++) {                                                           \
            T a = d[i], b = s[i];                                                                  \
            d[i] = (EXPR);                                                                         \
        }                                                                                          \
    } while (0)

/* Both combines' dispatch: LOOP(T, EXPR) for the dtype and op; integers wrap. */
#define COMBINE_DISPATCH(LOOP, WHO)                                                                \
    switch (dt) {                                                                                  \
    case OT_F32:                                                                                   \
        if (op == OT_REDOP_SUM)                                                                    \
            LOOP(float, a + b);                                                                    \
        else if (op == OT_REDOP_PROD)                                                              \
            LOOP(float, a *b);                                                                     \
        else if (op == OT_REDOP_MAX)                                                               \
            LOOP(float, a > b ? a : b);                                                            \
        else                                                                                       \
            LOOP(float, a < b ? a : b);                                                            \
        break;                                                                                     \
    case OT_F64:                                                                                   \
        if (op == OT_REDOP_SUM)                                                                    \
            LOOP(double, a + b);                                                                   \
        else if (op == OT_REDOP_PROD)                                                              \
            LOOP(double, a *b);                                                                    \
        else if (op == OT_REDOP_MAX)                                                               \
            LOOP(double, a > b ? a : b);                                                           \
        else                                                                                       \
            LOOP(double, a < b ? a : b);                                                           \
        break;                                                                                     \
    case OT_S32:                                                                                   \
        if (op == OT_REDOP_SUM)                                                                    \
            LOOP(int32_t, (int32_t)((uint32_t)a + (uint32_t)b));                                   \
        else if (op == OT_REDOP_PROD)                                                              \
            LOOP(int32_t, (int32_t)((uint32_t)a * (uint32_t)b));                                   \
        else if (op == OT_REDOP_MAX)                                                               \
            LOOP(int32_t, a > b ? a : b);                                                          \
        else                                                                                       \
            LOOP(int32_t, a < b ? a : b);                                                          \
        break;                                                                                     \
    case OT_S64:                                                                                   \
        if (op == OT_REDOP_SUM)                                                                    \
            LOOP(int64_t, (int64_t)((uint64_t)a + (uint64_t)b));                                   \
        else if (op == OT_REDOP_PROD)                                                              \
            LOOP(int64_t, (int64_t)((uint64_t)a * (uint64_t)b));                                   \
        else if (op == OT_REDOP_MAX)                                                               \
            LOOP(int64_t, a > b ? a : b);                                                          \
        else                                                                                       \
            LOOP(int64_t, a < b ? a : b);                                                          \
        break;                                                                                     \
    default: OT_ASSERT(!WHO ": not an accumulation dtype");                                        \
    }

/* The build's -O2 vectorizes only loops without an epilogue; these streaming loops are the
 * inner loop of every reduction, so GCC gets the full vectorizer here. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#endif
void ot_pod_combine(void *dst, const void *src, size_t n, ot_dtype dt, ot_redop op) {
    COMBINE_DISPATCH(COMBINE_LOOP, "ot_pod_combine")
}

#define COMBINE_TO_LOOP(T, EXPR)                                                                   \
    do {                                                                                           \
        T *restrict d = dst;                                                                       \
        const T *restrict x = src_a, *restrict y = src_b;                                          \
        for (size_t i = 0; i < n; i++) {                                                           \
            T a = x[i], b = y[i];                                                                  \
            d[i] = (EXPR);                                                                         \
        }                                                                                          \
    } while (0)

#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#endif
void ot_pod_combine_to(void *dst, const void *src_a, const void *src_b, size_t n, ot_dtype dt,
                       ot_redop op) {
    COMBINE_DISPATCH(COMBINE_TO_LOOP, "ot_pod_combine_to")
}

void ot_pod_tree_combine(void *dst, const void *const *in, int n, size_t k, ot_dtype dt,
                         ot_redop op, void *work) {
    size_t bytes = k * ot_dtype_size(dt);
    if (n == 1) {
        memcpy(dst, in[0], bytes);
        return;
    }
    /* Node w's partial sum at a level above the first: its work tile (slot w / 2) once it has
     * combined at the first level (w + 1 < n), else still its input, which no level changed. */
#define TREE_AT(w, mask)                                                                           \
    ((mask) == 1 || (w) + 1 >= n ? in[w] : (const void *)((char *)work + (size_t)((w) / 2) * bytes))
    for (int mask = 1; mask < n; mask <<= 1)
        for (int v = 0; v + mask < n; v += 2 * mask) {
            const void *a = TREE_AT(v, mask), *b = TREE_AT(v + mask, mask);
            if (2 * mask >= n) /* the root's last combination: straight into dst */
                ot_pod_combine_to(dst, a, b, k, dt, op);
            else if (mask == 1) /* first level: out of place, no copy of the inputs */
                ot_pod_combine_to((char *)work + (size_t)(v / 2) * bytes, a, b, k, dt, op);
            else /* above it, v's partial sum is in its tile already */
                ot_pod_combine((char *)work + (size_t)(v / 2) * bytes, b, k, dt, op);
        }
#undef TREE_AT
}

void ot_pod_ordered_sum_f32(float *dst, const float *const *in, int n, size_t k, ot_coll_algo order,
                            float *work) {
    if (order == OT_ALGO_TREE) {
        ot_pod_tree_combine(dst, (const void *const *)in, n, k, OT_F32, OT_REDOP_SUM, work);
        return;
    }
    if (n == 1) {
        memcpy(dst, in[0], k * sizeof(float));
        return;
    }
    ot_pod_combine_to(dst, in[0], in[1], k, OT_F32, OT_REDOP_SUM);
    for (int r = 2; r < n; r++) ot_pod_combine(dst, in[r], k, OT_F32, OT_REDOP_SUM);
}

void ot_pod_widen(float *dst, const void *src, size_t n, ot_dtype dt) {
    const uint16_t *s = src;
    if (dt == OT_F16)
        for (size_t i = 0; i < n; i++) dst[i] = ot_f16_to_f32(s[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = ot_bf16_to_f32(s[i]);
}

void ot_pod_narrow(void *dst, const float *src, size_t n, ot_dtype dt) {
    uint16_t *d = dst;
    if (dt == OT_F16)
        for (size_t i = 0; i < n; i++) d[i] = ot_f32_to_f16(src[i]);
    else
        for (size_t i = 0; i < n; i++) d[i] = ot_f32_to_bf16(src[i]);
}

void ot_pod_divide(void *buf, size_t count, ot_dtype dt, int n) {
    switch (dt) {
    case OT_F32:
        for (size_t i = 0; i < count; i++) ((float *)buf)[i] /= (float)n;
        break;
    case OT_F64:
        for (size_t i = 0; i < count; i++) ((double *)buf)[i] /= (double)n;
        break;
    case OT_S32:
        for (size_t i = 0; i < count; i++) ((int32_t *)buf)[i] /= n;
        break;
    case OT_S64:
        for (size_t i = 0; i < count; i++) ((int64_t *)buf)[i] /= n;
        break;
    default: OT_ASSERT(!"ot_pod_divide: not an accumulation dtype");
    }
}
