/* The fast scatter (kernels.h): the reference's scatter (src/exec/shape_ops.c) for one operand
 * whose update computation is exactly add, maximum or minimum of its two parameters (f32, f64 and
 * the integer types: `.at[].add`, embedding gradients, `.at[].max`, `.at[].min`,
 * segment_max/min) or returns its second parameter (a plain overwrite: `.at[].set`), the
 * updates' window dims their trailing dims; batching dims (take_along_axis's gradient, the pivots'
 * permutation of jnp.linalg.solve) through the table of window starts. s32/s64 indices,
 * index_vector_dim anywhere.
 *
 * The reference applies the update elements in row-major order of the updates; with trailing
 * window dims that is scatter position b after b, each position's window in order. Two elements
 * of one window never meet in the operand, so the updates of any one operand element come in
 * order of b. Each position's window start (its key) is the index itself where a position has one
 * index (read straight from the indices), else computed once into a table (-1 when the window
 * does not fit: the reference skips it; positions in chunks over the pool). Then for b in order
 * the window's contiguous runs are added (or copied) row by row; each element gets the
 * reference's scalar add (add_f/add_d with its FTZ and NaN rules, operands in the computation's
 * order; max_f/min_f and their f64 twins, the reference's maximum/minimum with DAZ inputs,
 * quieted NaNs and -0 < +0; the integers' own order) in the same order. Under FTZ a float row
 * without a NaN is added with plain (vector) adds in the CPU's FTZ/DAZ mode (ex_hw_ftz_on), which
 * flushes exactly as add_f/add_d do. Maximum and minimum of two floats that are neither NaN nor
 * (under FTZ) subnormal take a branch-free choice by the bits' total order (pick_f), the same
 * result. Sums and wide windows are applied by one thread (why: ex_fast_scatter); narrow windows
 * of maximum, minimum and overwrite that never overlap are split by key ranges over the pool,
 * each thread applying its range's windows in order. Either way each element gets its updates in
 * the reference's order, so the bits do not depend on the thread count; the operand is copied
 * into the output first (over the pool) unless the output is the operand's memory (in place). */
#include "exec/fast_internal.h"

typedef enum {
    SC_ADD,
    SC_ADD_SWAPPED,
    SC_SET,
    SC_MAX,
    SC_MAX_SWAPPED,
    SC_MIN,
    SC_MIN_SWAPPED
} sc_kind;

/* The computation's kind for element type t, or -1: add, maximum or minimum of (p0, p1) or
 * (p1, p0), or p1. */
static int update_kind(const ot_computation *f, ot_dtype t) {
    if (!f || f->nparams != 2 || !f->root) return -1;
    for (int k = 0; k < 2; k++) {
        const ot_ir_shape *s = &f->params[k]->shape;
        if (s->kind != OT_IR_ARRAY || s->array.rank != 0 || s->array.dtype != t) return -1;
    }
    const ot_instr *r = f->root;
    if (r == f->params[1]) return SC_SET;
    int k = r->opcode == OT_OP_ADD       ? SC_ADD
            : r->opcode == OT_OP_MAXIMUM ? SC_MAX
            : r->opcode == OT_OP_MINIMUM ? SC_MIN
                                         : -1;
    if (k < 0 || r->noperands != 2) return -1;
    if (r->shape.kind != OT_IR_ARRAY || r->shape.array.dtype != t) return -1;
    if (r->operands[0] == f->params[0] && r->operands[1] == f->params[1]) return k;
    if (r->operands[0] == f->params[1] && r->operands[1] == f->params[0]) return k + 1;
    return -1;
}

typedef struct sc_job {
    sc_kind kind;
    ot_dtype t;
    size_t es;
    bool ftz;
    bool hw; /* float adds under FTZ in the CPU's FTZ/DAZ mode (ex_hw_ftz_on) */
    /* each position's key, the window's identity: one index per position (one): the index v
     * itself, the window at operand offset v * str; else base[b], the window's operand offset
     * (-1 skipped); a key is valid below kmax */
    bool one, s32;
    const void *idx;
    int64_t str;
    const int64_t *base;
    const int64_t *roff; /* per run of a window: its operand offset from the window's start */
    int64_t nb, nr, len; /* positions, runs per window, elements per run */
    int64_t kmax;
    char *y;
    const char *u;
} sc_job;

/* The reference's maximum / minimum (max_f, min_f and their f64 twins) where it is a plain
 * choice: neither operand a NaN nor, under FTZ, a subnormal (those take max_f's own rules). Then
 * the IEEE total order of the bits decides (-0 < +0; equal values have equal bits, so the order
 * of the operands does not matter), compared as integers and chosen by a mask: no branch on the
 * data (a branch there mispredicts on random updates; measured 3x slower). */
static inline bool plain_f(float v, bool z) {
    uint32_t m;
    memcpy(&m, &v, 4);
    m &= 0x7fffffffu; /* |v|: NaNs above +inf, subnormals below the least normal */
    return m <= 0x7f800000u && (!z || m >= 0x00800000u || m == 0);
}
static inline bool plain_d(double v, bool z) {
    uint64_t m;
    memcpy(&m, &v, 8);
    m &= 0x7fffffffffffffffull;
    return m <= 0x7ff0000000000000ull && (!z || m >= 0x0010000000000000ull || m == 0);
}
enum { max_is_max = 1, min_is_max = 0 };
static inline float pick_f(float a, float b, int want_max) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    int32_t ka = ia ^ (int32_t)((uint32_t)(ia >> 31) >> 1);
    int32_t kb = ib ^ (int32_t)((uint32_t)(ib >> 31) >> 1);
    int32_t m = -(int32_t)(want_max ? ka >= kb : ka <= kb);
    int32_t r = (ia & m) | (ib & ~m);
    memcpy(&a, &r, 4);
    return a;
}
static inline double pick_d(double a, double b, int want_max) {
    int64_t ia, ib;
    memcpy(&ia, &a, 8);
    memcpy(&ib, &b, 8);
    int64_t ka = ia ^ (int64_t)((uint64_t)(ia >> 63) >> 1);
    int64_t kb = ib ^ (int64_t)((uint64_t)(ib >> 63) >> 1);
    int64_t m = -(int64_t)(want_max ? ka >= kb : ka <= kb);
    int64_t r = (ia & m) | (ib & ~m);
    memcpy(&a, &r, 8);
    return a;
}

/* The reference's maximum (want_max) or minimum of the output element o and the update w, the
 * computation's operands swapped (sw) or not: pick_f where it is a plain choice, else max_f /
 * min_f (NaNs, and subnormals under FTZ). */
static inline float minmax_f(float o, float w, bool z, bool sw, int want_max) {
    if ((int)plain_f(o, z) & (int)plain_f(w, z))
        return pick_f(o, w, want_max); /* both tests, no branch */
    if (want_max) return sw ? max_f(w, o, z) : max_f(o, w, z);
    return sw ? min_f(w, o, z) : min_f(o, w, z);
}
static inline double minmax_d(double o, double w, bool z, bool sw, int want_max) {
    if ((int)plain_d(o, z) & (int)plain_d(w, z)) return pick_d(o, w, want_max);
    if (want_max) return sw ? max_d(w, o, z) : max_d(o, w, z);
    return sw ? min_d(w, o, z) : min_d(o, w, z);
}

/* Rows of at most this many elements are added element by element in one pass. */
#define SC_NARROW 8

/* dst[j] = op(dst[j], src[j]) for j < n, in the reference's arithmetic (inlined into each clone
 * of its callers, with kind, t and es constants there). */
static inline __attribute__((always_inline)) void run_row(const sc_job *p, sc_kind kind, ot_dtype t,
                                                          size_t es, void *dst, const void *src,
                                                          int64_t n) {
    bool z = p->ftz;
#define ROW_LOOP(T, EXPR)                                                                          \
    do {                                                                                           \
        T *o = dst;                                                                                \
        const T *w = src;                                                                          \
        for (int64_t j = 0; j < n; j++) o[j] = EXPR;                                               \
    } while (0)
    /* maximum / minimum: the reference's (DAZ inputs, a NaN quieted, -0 < +0), the operands in
     * the computation's order (which NaN wins); integers by their own order */
#define PICK_ROW(FN, CMP)                                                                          \
    do {                                                                                           \
        bool s_ = kind == SC_MAX_SWAPPED || kind == SC_MIN_SWAPPED;                                \
        switch (t) {                                                                               \
        case OT_F32: ROW_LOOP(float, minmax_f(o[j], w[j], z, s_, FN##_is_max)); return;            \
        case OT_F64: ROW_LOOP(double, minmax_d(o[j], w[j], z, s_, FN##_is_max)); return;           \
        case OT_S8: ROW_LOOP(int8_t, w[j] CMP o[j] ? w[j] : o[j]); return;                         \
        case OT_S16: ROW_LOOP(int16_t, w[j] CMP o[j] ? w[j] : o[j]); return;                       \
        case OT_S32: ROW_LOOP(int32_t, w[j] CMP o[j] ? w[j] : o[j]); return;                       \
        case OT_S64: ROW_LOOP(int64_t, w[j] CMP o[j] ? w[j] : o[j]); return;                       \
        case OT_U8: ROW_LOOP(uint8_t, w[j] CMP o[j] ? w[j] : o[j]); return;                        \
        case OT_U16: ROW_LOOP(uint16_t, w[j] CMP o[j] ? w[j] : o[j]); return;                      \
        case OT_U32: ROW_LOOP(uint32_t, w[j] CMP o[j] ? w[j] : o[j]); return;                      \
        default: ROW_LOOP(uint64_t, w[j] CMP o[j] ? w[j] : o[j]); return;                          \
        }                                                                                          \
    } while (0)
    switch (kind) {
    case SC_SET: memcpy(dst, src, (size_t)n * es); return;
    case SC_MAX:
    case SC_MAX_SWAPPED: PICK_ROW(max, >);
    case SC_MIN:
    case SC_MIN_SWAPPED: PICK_ROW(min, <);
    case SC_ADD:
    case SC_ADD_SWAPPED: break;
    }
#undef PICK_ROW
    bool sw = kind == SC_ADD_SWAPPED;
    /* Which NaN a sum of two NaNs returns is the reference's compiled add's choice (x86 keeps
     * one operand's payload); a row of updates holding a NaN therefore takes the reference's own
     * ex_binary for each element where both operands are NaN. */
#define FLOAT_ROW(T, ADD)                                                                          \
    do {                                                                                           \
        const T *u_ = src;                                                                         \
        if (n <= SC_NARROW) { /* a few elements: one pass, no vector loop's set-up */              \
            T *y_ = dst;                                                                           \
            bool plain = p->hw || !z;                                                              \
            for (int64_t j = 0; j < n; j++) {                                                      \
                T a = sw ? u_[j] : y_[j], b = sw ? y_[j] : u_[j];                                  \
                if (a != a && b != b) {                                                            \
                    T a2 = a, b2 = b; /* only these two have their address taken */                \
                    ex_binary(OT_OP_ADD, t, &a2, &b2, &y_[j], 1);                                  \
                } else {                                                                           \
                    y_[j] = plain ? a + b : ADD(a, b, z);                                          \
                }                                                                                  \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        int nan = 0; /* an int, not a bool: the loop then vectorizes (a bool or-chain did not) */  \
        for (int64_t j = 0; j < n; j++) nan |= u_[j] != u_[j];                                     \
        if (!nan) {                                                                                \
            if (p->hw)                                                                             \
                ROW_LOOP(T, sw ? w[j] + o[j] : o[j] + w[j]);                                       \
            else if (sw)                                                                           \
                ROW_LOOP(T, ADD(w[j], o[j], z));                                                   \
            else if (z)                                                                            \
                ROW_LOOP(T, ADD(o[j], w[j], true));                                                \
            else                                                                                   \
                ROW_LOOP(T, o[j] + w[j]);                                                          \
            return;                                                                                \
        }                                                                                          \
        T *y_ = dst;                                                                               \
        for (int64_t j = 0; j < n; j++) {                                                          \
            T a = sw ? u_[j] : y_[j], b = sw ? y_[j] : u_[j];                                      \
            if (a != a && b != b)                                                                  \
                ex_binary(OT_OP_ADD, t, &a, &b, &y_[j], 1);                                        \
            else                                                                                   \
                y_[j] = ADD(a, b, z);                                                              \
        }                                                                                          \
        return;                                                                                    \
    } while (0)
    switch (t) {
    case OT_F32: FLOAT_ROW(float, add_f);
    case OT_F64: FLOAT_ROW(double, add_d);
    default: break;
    }
    /* integers wrap (the reference adds as unsigned 64-bit and truncates); the order of the
     * operands does not matter */
    switch (es) {
    case 1: ROW_LOOP(uint8_t, (uint8_t)(o[j] + w[j])); return;
    case 2: ROW_LOOP(uint16_t, (uint16_t)(o[j] + w[j])); return;
    case 4: ROW_LOOP(uint32_t, o[j] + w[j]); return;
    default: ROW_LOOP(uint64_t, o[j] + w[j]); return;
    }
#undef FLOAT_ROW
#undef ROW_LOOP
}

/* GCC's target_clones: the row loops built for AVX-512 and AVX2 beside the baseline, chosen at
 * load (as elementwise.c's); every clone does the same scalar-exact adds. */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && __GNUC__ >= 11 &&            \
    !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define SC_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SC_CLONES
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SC_AVX512 1
/* f32 sums of runs of at least 16 elements where the adds are plain (the CPU's FTZ | DAZ mode
 * under FTZ, or no FTZ): each run added 16 lanes at a time, the last lanes through a mask, in
 * one pass with no loop set-up per run (the generic row loop's NaN scan and runtime-length
 * vector loop: segment_sum 200000 x 48 -> 1000 rows 1.74-1.82 -> 1.48-1.51 ms). An update vector
 * holding a NaN hands the rest of its run to run_row (which NaN a sum of two NaNs returns is the
 * reference's choice); without one the order of the operands changes no bit. */
EX_AVX512 __attribute__((noinline)) static void add_rows_f32(const sc_job *p, const int64_t *lu,
                                                             const int64_t *lo, int64_t n);
/* f32 maximum / minimum of runs of at least 16 elements (segment_max / segment_min of rows, an
 * embedding bag's max): 16 lanes at a time where the output's and the update's lanes are all
 * plain (plain_f), chosen by the keys' integer order as pick_f chooses (the same bits, whatever
 * the operands' order); a vector with a lane that is not plain hands the rest of its run to
 * run_row. segment_max of 40960 rows of 64 into 2048 (sorted), 2 threads, CPUs held: 5.6 ->
 * 0.79 ms (the scalar loop did not vectorize: a branch per element on plain_f). */
EX_AVX512 __attribute__((noinline)) static void
pick_rows_f32(const sc_job *p, int want_max, const int64_t *lu, const int64_t *lo, int64_t n);
#else
#define SC_AVX512 0
#endif

/* The positions are taken in blocks of SC_BLOCK: first the block's positions whose key is valid
 * are listed with their runs' offsets in the updates and the output (branch-free: a skipped
 * position costs no mispredicted branch), then the listed windows are applied in order. The
 * updates are read in order: before each run, the lines SC_STREAM_AHEAD bytes further on are
 * requested (a run of a few lines otherwise waits on memory latency). */
#define SC_BLOCK        512
#define SC_STREAM_AHEAD 2048

static inline __attribute__((always_inline)) void apply_block(const sc_job *p, sc_kind kind,
                                                              ot_dtype t, size_t es,
                                                              const int64_t *lu, const int64_t *lo,
                                                              int64_t n) {
    size_t ubytes = (size_t)(p->nb * p->nr * p->len) * es, bytes = (size_t)p->len * es;
    if (p->nr == 1 && p->len == 1) {
        /* one element per position (.at[].max/min/set of scalars, bincount-like): the element's
         * update inlined, no row loop */
        for (int64_t k = 0; k < n; k++)
            run_row(p, kind, t, es, p->y + (size_t)lo[k] * es, p->u + (size_t)lu[k] * es, 1);
        return;
    }
    if (p->nr == 1 && p->len <= SC_NARROW && (kind == SC_ADD || kind == SC_ADD_SWAPPED) &&
        (t == OT_F32 || t == OT_F64)) {
        /* narrow rows (segment sums of a few columns): the adds inline, no prefetch (narrow
         * runs are consecutive lines: the hardware prefetcher has them) */
        for (int64_t k = 0; k < n; k++)
            run_row(p, kind, t, es, p->y + (size_t)lo[k] * es, p->u + (size_t)lu[k] * es, p->len);
        return;
    }
#if SC_AVX512
    if (t == OT_F32 && (kind == SC_ADD || kind == SC_ADD_SWAPPED) && (p->hw || !p->ftz) &&
        p->len >= 16 && ex_avx512()) {
        add_rows_f32(p, lu, lo, n);
        return;
    }
    if (t == OT_F32 && kind != SC_ADD && kind != SC_ADD_SWAPPED && kind != SC_SET && p->len >= 16 &&
        ex_avx512()) {
        pick_rows_f32(p, kind == SC_MAX || kind == SC_MAX_SWAPPED, lu, lo, n);
        return;
    }
#endif
    /* runs under a line (one-element windows: segment_max, bincount) come in consecutive lines:
     * the hardware prefetcher has them */
    size_t pf = bytes >= 64 ? bytes : 0;
    for (int64_t k = 0; k < n; k++) {
        size_t at = (size_t)lu[k] * es; /* offsets, not pointers: the look-ahead may pass the end */
        for (int64_t r = 0; r < p->nr; r++, at += bytes) {
            for (size_t o = at + SC_STREAM_AHEAD; o < at + SC_STREAM_AHEAD + pf && o < ubytes;
                 o += 64)
                __builtin_prefetch(p->u + o);
            run_row(p, kind, t, es, p->y + (size_t)(lo[k] + p->roff[r]) * es, p->u + at, p->len);
        }
    }
}

#if SC_AVX512
EX_AVX512 __attribute__((noinline)) static void add_rows_f32(const sc_job *p, const int64_t *lu,
                                                             const int64_t *lo, int64_t n) {
    int64_t len = p->len, lv = len & ~(int64_t)15;
    __mmask16 tail = (__mmask16)((1u << (len & 15)) - 1);
    size_t ubytes = (size_t)(p->nb * p->nr * len) * 4, bytes = (size_t)len * 4;
    for (int64_t k = 0; k < n; k++) {
        size_t at = (size_t)lu[k] * 4; /* offsets, not pointers: the look-ahead may pass the end */
        for (int64_t r = 0; r < p->nr; r++, at += bytes) {
            for (size_t o = at + SC_STREAM_AHEAD; o < at + SC_STREAM_AHEAD + bytes && o < ubytes;
                 o += 64)
                __builtin_prefetch(p->u + o);
            float *y = (float *)(void *)(p->y + (size_t)(lo[k] + p->roff[r]) * 4);
            const float *w = (const float *)(const void *)(p->u + at);
            int64_t j = 0;
            for (; j < lv; j += 16) {
                __m512 wv = _mm512_loadu_ps(w + j);
                if (_mm512_cmp_ps_mask(wv, wv, _CMP_UNORD_Q)) break;
                _mm512_storeu_ps(y + j, _mm512_add_ps(_mm512_loadu_ps(y + j), wv));
            }
            if (j == lv && tail) {
                __m512 wv = _mm512_maskz_loadu_ps(tail, w + j);
                if (!_mm512_cmp_ps_mask(wv, wv, _CMP_UNORD_Q)) {
                    __m512 s = _mm512_add_ps(_mm512_maskz_loadu_ps(tail, y + j), wv);
                    _mm512_mask_storeu_ps(y + j, tail, s);
                    j = len;
                }
            }
            if (j < len) run_row(p, p->kind, OT_F32, 4, y + j, w + j, len - j);
        }
    }
}
#endif

#if SC_AVX512
EX_AVX512 __attribute__((noinline)) static void
pick_rows_f32(const sc_job *p, int want_max, const int64_t *lu, const int64_t *lo, int64_t n) {
    int64_t len = p->len, lv = len & ~(int64_t)15;
    __mmask16 tail = (__mmask16)((1u << (len & 15)) - 1);
    size_t ubytes = (size_t)(p->nb * p->nr * len) * 4, bytes = (size_t)len * 4;
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000),
                  minn = _mm512_set1_epi32(0x00800000), zero = _mm512_setzero_si512();
    bool z = p->ftz;
    for (int64_t k = 0; k < n; k++) {
        size_t at = (size_t)lu[k] * 4; /* offsets, not pointers: the look-ahead may pass the end */
        for (int64_t r = 0; r < p->nr; r++, at += bytes) {
            for (size_t o = at + SC_STREAM_AHEAD; o < at + SC_STREAM_AHEAD + bytes && o < ubytes;
                 o += 64)
                __builtin_prefetch(p->u + o);
            int32_t *y = (int32_t *)(void *)(p->y + (size_t)(lo[k] + p->roff[r]) * 4);
            const int32_t *w = (const int32_t *)(const void *)(p->u + at);
            int64_t j = 0;
            for (; j < len; j += 16) {
                __mmask16 lm = j < lv ? (__mmask16)0xffff : tail;
                __m512i yv = _mm512_maskz_loadu_epi32(lm, y + j),
                        wv = _mm512_maskz_loadu_epi32(lm, w + j);
                __m512i ya = _mm512_and_si512(yv, absm), wa = _mm512_and_si512(wv, absm);
                __mmask16 ok = _mm512_cmple_epu32_mask(ya, inf) & _mm512_cmple_epu32_mask(wa, inf);
                if (z)
                    ok &= (_mm512_cmpge_epu32_mask(ya, minn) | _mm512_cmpeq_epi32_mask(ya, zero)) &
                          (_mm512_cmpge_epu32_mask(wa, minn) | _mm512_cmpeq_epi32_mask(wa, zero));
                if ((ok & lm) != lm) break;
                __m512i ky = _mm512_xor_si512(yv, _mm512_srli_epi32(_mm512_srai_epi32(yv, 31), 1));
                __m512i kw = _mm512_xor_si512(wv, _mm512_srli_epi32(_mm512_srai_epi32(wv, 31), 1));
                __mmask16 keep =
                    want_max ? _mm512_cmpge_epi32_mask(ky, kw) : _mm512_cmple_epi32_mask(ky, kw);
                _mm512_mask_storeu_epi32(y + j, lm, _mm512_mask_blend_epi32(keep, wv, yv));
            }
            if (j < len) run_row(p, p->kind, OT_F32, 4, y + j, w + j, len - j);
        }
    }
}
#endif

/* apply_block built for each kind and element type (the row loops' switches resolved). */
static inline __attribute__((always_inline)) void
apply_kind(const sc_job *p, sc_kind kind, const int64_t *lb, const int64_t *lo, int64_t n) {
    if (p->t == OT_F32 && kind != SC_SET) {
        apply_block(p, kind, OT_F32, 4, lb, lo, n);
        return;
    }
    if (p->t == OT_F64 && kind != SC_SET) {
        apply_block(p, kind, OT_F64, 8, lb, lo, n);
        return;
    }
    switch (p->es) { /* integer adds, and every overwrite: only the width matters */
    case 1: apply_block(p, kind, OT_U8, 1, lb, lo, n); return;
    case 2: apply_block(p, kind, OT_U16, 2, lb, lo, n); return;
    case 4: apply_block(p, kind, OT_U32, 4, lb, lo, n); return;
    default: apply_block(p, kind, OT_U64, 8, lb, lo, n); return;
    }
}

/* apply_block of maximum / minimum built for each element type (the integers' signedness
 * matters). */
static inline __attribute__((always_inline)) void
apply_pick(const sc_job *p, sc_kind kind, const int64_t *lb, const int64_t *lo, int64_t n) {
    switch (p->t) {
    case OT_F32: apply_block(p, kind, OT_F32, 4, lb, lo, n); return;
    case OT_F64: apply_block(p, kind, OT_F64, 8, lb, lo, n); return;
    case OT_S8: apply_block(p, kind, OT_S8, 1, lb, lo, n); return;
    case OT_S16: apply_block(p, kind, OT_S16, 2, lb, lo, n); return;
    case OT_S32: apply_block(p, kind, OT_S32, 4, lb, lo, n); return;
    case OT_S64: apply_block(p, kind, OT_S64, 8, lb, lo, n); return;
    case OT_U8: apply_block(p, kind, OT_U8, 1, lb, lo, n); return;
    case OT_U16: apply_block(p, kind, OT_U16, 2, lb, lo, n); return;
    case OT_U32: apply_block(p, kind, OT_U32, 4, lb, lo, n); return;
    default: apply_block(p, kind, OT_U64, 8, lb, lo, n); return;
    }
}

/* Not inlined into apply_range: its many instantiations there made GCC keep the list's length
 * in memory (a store and a load per position, measured 2x slower). */
SC_CLONES __attribute__((noinline)) static void apply_any(const sc_job *p, const int64_t *lb,
                                                          const int64_t *lo, int64_t n) {
    switch (p->kind) {
    case SC_ADD: apply_kind(p, SC_ADD, lb, lo, n); return;
    case SC_ADD_SWAPPED: apply_kind(p, SC_ADD_SWAPPED, lb, lo, n); return;
    case SC_SET: apply_kind(p, SC_SET, lb, lo, n); return;
    case SC_MAX: apply_pick(p, SC_MAX, lb, lo, n); return;
    case SC_MAX_SWAPPED: apply_pick(p, SC_MAX_SWAPPED, lb, lo, n); return;
    case SC_MIN: apply_pick(p, SC_MIN, lb, lo, n); return;
    case SC_MIN_SWAPPED: apply_pick(p, SC_MIN_SWAPPED, lb, lo, n); return;
    }
}

/* Every position from `from` on in order: those whose key lies in [klo, klo + span) applied (the
 * valid keys are [0, kmax)). */
SC_CLONES static void apply_range(const sc_job *p, uint64_t klo, uint64_t span, int64_t from) {
    unsigned csr = p->hw ? ex_hw_ftz_on() : 0;
    int64_t lu[SC_BLOCK], lo[SC_BLOCK], w = p->nr * p->len;
    for (int64_t b0 = from; b0 < p->nb; b0 += SC_BLOCK) {
        int64_t b1 = b0 + SC_BLOCK < p->nb ? b0 + SC_BLOCK : p->nb, n = 0;
        if (p->one && p->s32) {
            const int32_t *ix = p->idx;
            for (int64_t b = b0; b < b1; b++) {
                int64_t v = ix[b];
                lu[n] = b * w;
                lo[n] = v * p->str;
                n += (uint64_t)v - klo < span;
            }
        } else if (p->one) {
            const int64_t *ix = p->idx;
            for (int64_t b = b0; b < b1; b++) {
                int64_t v = ix[b];
                lu[n] = b * w;
                lo[n] = (int64_t)((uint64_t)v * (uint64_t)p->str); /* wraps when skipped */
                n += (uint64_t)v - klo < span;
            }
        } else {
            for (int64_t b = b0; b < b1; b++) {
                int64_t v = p->base[b];
                lu[n] = b * w;
                lo[n] = v;
                n += (uint64_t)v - klo < span;
            }
        }
        apply_any(p, lu, lo, n);
    }
    if (p->hw) ex_hw_ftz_off(csr);
}

/* keyed_range's positions from b on, 16 at a time by AVX-512 gathers and scatters of the keys
 * (f32, s32 indices, a unit stride, keys below 2^31): the integer maximum / minimum of keys is
 * associative and commutative, so folding a vector of updates at once gives the sequential
 * loop's bits wherever no two in-range lanes share an index. Returns the first position it left:
 * a vector with such a conflict (vpconflictd), an update that is not plain, or the last < 16
 * positions (the scalar loop takes 16 and hands back). 1M updates into 65536, the kernel's
 * minimum with the CPUs held: 1.92-1.97 ms by the scalar loop, 1.16 ms. */
static int64_t keyed_vec_none(const sc_job *p, uint64_t klo, uint64_t span, int want_max,
                              int64_t b) {
    (void)p, (void)klo, (void)span, (void)want_max;
    return b;
}
#if SC_AVX512
__attribute__((target("avx512f,avx512cd,avx512bw,avx512vl,avx512dq,fma"))) static int64_t
keyed_vec_avx512(const sc_job *p, uint64_t klo, uint64_t span, int want_max, int64_t b) {
    const int32_t *ix = p->idx;
    const int32_t *u = (const int32_t *)(const void *)p->u;
    int32_t *y = (int32_t *)(void *)p->y;
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000),
                  minn = _mm512_set1_epi32(0x00800000), vlo = _mm512_set1_epi32((int32_t)klo),
                  vspan = _mm512_set1_epi32((int32_t)span);
    bool z = p->ftz;
    for (; b + 16 <= p->nb; b += 16) {
        __m512i w = _mm512_loadu_si512(u + b), m = _mm512_and_si512(w, absm);
        __mmask16 plain = _mm512_cmple_epu32_mask(m, inf);
        if (z)
            plain &= _mm512_cmpge_epu32_mask(m, minn) |
                     _mm512_cmpeq_epi32_mask(m, _mm512_setzero_si512());
        if (plain != 0xffff) break;
        __m512i v = _mm512_loadu_si512(ix + b);
        __mmask16 in = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(v, vlo), vspan);
        __m512i c = _mm512_maskz_conflict_epi32(in, v);
        if (_mm512_mask_test_epi32_mask(in, c, _mm512_set1_epi32((int32_t)in)) != 0) break;
        __m512i kw = _mm512_xor_si512(w, _mm512_srli_epi32(_mm512_srai_epi32(w, 31), 1));
        __m512i ko = _mm512_mask_i32gather_epi32(kw, in, v, y, 4);
        __m512i kn = want_max ? _mm512_max_epi32(kw, ko) : _mm512_min_epi32(kw, ko);
        _mm512_mask_i32scatter_epi32(y, in, v, kn, 4);
    }
    return b;
}
#endif
static int64_t keyed_vec_f(const sc_job *p, uint64_t klo, uint64_t span, int want_max, int64_t b) {
#if SC_AVX512
    if (p->s32 && p->str == 1 && klo + span <= (uint64_t)INT32_MAX && ex_avx512() &&
        __builtin_cpu_supports("avx512cd"))
        return keyed_vec_avx512(p, klo, span, want_max, b);
#endif
    return keyed_vec_none(p, klo, span, want_max, b);
}

/* One-element windows of maximum or minimum in f32 / f64 (segment_max/min, `.at[].max/.min` of
 * scalars) whose operand part and updates are plain (plain_f: neither NaN nor, under FTZ,
 * subnormal): there max_f/min_f pick by the total order of the bits, which is the order of the
 * integer keys k = bits ^ ((bits >> sign) >> 1) (a bijection that is its own inverse). The
 * output elements of keys [klo, klo + span) are turned into keys, each position in order
 * folds its update's key in by an integer max / min (a position outside the range writes one
 * of 64 locals in turn instead: no branch on the data, and no chain of stores and loads through
 * one local, whose mispredicted forwarding measured 8x slower), and the elements are turned
 * back. The list of the
 * generic path and the per-update plain tests of both operands go: measured 2.4x fewer
 * instructions per update. Returns the position where an update that is not plain stopped it
 * (the elements already turned back; the generic path applies that position and the rest), nb
 * when done, or -1 when an output element of the range is not plain (nothing done). */
#define KEYED_RANGE(NAME, T, U, S, SHIFT, ABS, INF, MINN, VEC)                                     \
    static int64_t NAME(const sc_job *p, uint64_t klo, uint64_t span, int want_max) {              \
        U *y = (U *)(void *)p->y;                                                                  \
        const U *u = (const U *)(const void *)p->u;                                                \
        bool z = p->ftz;                                                                           \
        uint64_t hi = klo + span < (uint64_t)p->kmax ? klo + span : (uint64_t)p->kmax;             \
        int bad = 0;                                                                               \
        for (uint64_t v = klo; v < hi; v++) {                                                      \
            U m = y[v * (uint64_t)p->str] & ABS;                                                   \
            bad |= !(m <= INF && (!z || m >= MINN || m == 0));                                     \
        }                                                                                          \
        if (bad) return -1;                                                                        \
        for (uint64_t v = klo; v < hi; v++) {                                                      \
            U b = y[v * (uint64_t)p->str];                                                         \
            y[v * (uint64_t)p->str] = b ^ ((U)((S)b >> SHIFT) >> 1);                               \
        }                                                                                          \
        S sink[64] = {0};                                                                          \
        /* addresses as integers: an index out of range must not form an out-of-bounds pointer */  \
        const uintptr_t yb = (uintptr_t)y, ustr = (uintptr_t)p->str * sizeof(U);                   \
        int64_t b = 0, stop = p->nb;                                                               \
        for (;;) {                                                                                 \
            b = VEC(p, klo, span, want_max, b);                                                    \
            stop = b + 16 < p->nb ? b + 16 : p->nb; /* what the vectors left, 16 at a time */      \
            if (b >= stop) break;                                                                  \
            for (; b < stop; b++) {                                                                \
                int64_t v = p->s32 ? ((const int32_t *)p->idx)[b] : ((const int64_t *)p->idx)[b];  \
                U w = u[b], m = w & ABS;                                                           \
                if (!(m <= INF && (!z || m >= MINN || m == 0))) break;                             \
                S kw = (S)(w ^ ((U)((S)w >> SHIFT) >> 1));                                         \
                uintptr_t in_ =                                                                    \
                    0 - (uintptr_t)((uint64_t)v - klo < span); /* a mask, not a branch */          \
                S *d =                                                                             \
                    (S *)(((yb + (uintptr_t)v * ustr) & in_) | ((uintptr_t)&sink[b & 63] & ~in_)); \
                S ko = *d;                                                                         \
                *d = want_max ? (kw > ko ? kw : ko) : (kw < ko ? kw : ko);                         \
            }                                                                                      \
            if (b < stop) break; /* an update that is not plain */                                 \
        }                                                                                          \
        for (uint64_t v = klo; v < hi; v++) {                                                      \
            U k = y[v * (uint64_t)p->str];                                                         \
            y[v * (uint64_t)p->str] = k ^ ((U)((S)k >> SHIFT) >> 1);                               \
        }                                                                                          \
        return b;                                                                                  \
    }
KEYED_RANGE(keyed_range_f, uint32_t, uint32_t, int32_t, 31, 0x7fffffffu, 0x7f800000u, 0x00800000u,
            keyed_vec_f)
KEYED_RANGE(keyed_range_d, uint64_t, uint64_t, int64_t, 63, 0x7fffffffffffffffull,
            0x7ff0000000000000ull, 0x0010000000000000ull, keyed_vec_none)
#undef KEYED_RANGE

/* One-element overwrites (`.at[].set` of scalars): each position in order writes its update at
 * its index, or one of 64 locals in turn when the index is outside [klo, klo + span) (no branch
 * on the data, no list of the block's positions). */
#define SET_RANGE(NAME, U)                                                                         \
    static void NAME(const sc_job *p, uint64_t klo, uint64_t span) {                               \
        U *y = (U *)(void *)p->y, sink[64];                                                        \
        const U *u = (const U *)(const void *)p->u;                                                \
        /* addresses as integers: an index out of range must not form an out-of-bounds pointer */  \
        const uintptr_t yb = (uintptr_t)y, ustr = (uintptr_t)p->str * sizeof(U);                   \
        if (p->s32) {                                                                              \
            const int32_t *ix = p->idx;                                                            \
            for (int64_t b = 0; b < p->nb; b++) {                                                  \
                int64_t v = ix[b];                                                                 \
                uintptr_t in_ = 0 - (uintptr_t)((uint64_t)v - klo < span);                         \
                *(U *)(((yb + (uintptr_t)v * ustr) & in_) | ((uintptr_t)&sink[b & 63] & ~in_)) =   \
                    u[b];                                                                          \
            }                                                                                      \
        } else {                                                                                   \
            const int64_t *ix = p->idx;                                                            \
            for (int64_t b = 0; b < p->nb; b++) {                                                  \
                int64_t v = ix[b];                                                                 \
                uintptr_t in_ = 0 - (uintptr_t)((uint64_t)v - klo < span);                         \
                *(U *)(((yb + (uintptr_t)v * ustr) & in_) | ((uintptr_t)&sink[b & 63] & ~in_)) =   \
                    u[b];                                                                          \
            }                                                                                      \
        }                                                                                          \
    }
SET_RANGE(set_range_1, uint8_t)
SET_RANGE(set_range_2, uint16_t)
SET_RANGE(set_range_4, uint32_t)
SET_RANGE(set_range_8, uint64_t)
#undef SET_RANGE

/* The positions from `from` on whose key lies in [klo, klo + span), applied (apply_range), with
 * one-element windows of maximum / minimum in f32 / f64 taken by the keys where they are plain
 * (keyed_range_f / _d) and one-element overwrites by set_range_*. */
SC_CLONES static void apply_keys(const sc_job *p, uint64_t klo, uint64_t span) {
    if (p->kind == SC_SET && p->one && p->nr == 1 && p->len == 1) {
        switch (p->es) {
        case 1: set_range_1(p, klo, span); return;
        case 2: set_range_2(p, klo, span); return;
        case 4: set_range_4(p, klo, span); return;
        default: set_range_8(p, klo, span); return;
        }
    }
    int64_t from = 0;
    bool pick = p->kind == SC_MAX || p->kind == SC_MAX_SWAPPED || p->kind == SC_MIN ||
                p->kind == SC_MIN_SWAPPED;
    if (pick && p->one && p->nr == 1 && p->len == 1 && (p->t == OT_F32 || p->t == OT_F64)) {
        int want_max = p->kind == SC_MAX || p->kind == SC_MAX_SWAPPED;
        int64_t b = p->t == OT_F32 ? keyed_range_f(p, klo, span, want_max)
                                   : keyed_range_d(p, klo, span, want_max);
        if (b == p->nb) return;
        if (b > 0) from = b;
    }
    apply_range(p, klo, span, from);
}

/* Part `part` of SC_PARTS of the keys, for the parts in [begin, end): the split of narrow
 * windows over the pool (ex_fast_scatter says when). */
#define SC_PARTS       8
#define SC_SPLIT_BYTES 64
static void apply_part(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const sc_job *p = arg;
    uint64_t kmax = (uint64_t)p->kmax, lo = kmax * (uint64_t)begin / SC_PARTS,
             hi = kmax * (uint64_t)end / SC_PARTS;
    apply_keys(p, lo, hi - lo);
}

/* The window start of every scatter position (base[b], -1 when the window does not fit: the
 * reference skips it) where a position has several indices, positions in chunks of SC_BASE_CHUNK
 * over the pool (each independent). */
#define SC_BASE_CHUNK 4096
typedef struct sc_base {
    const ot_scatter_dims *sd;
    const ot_shape *xs, *us, *ks;
    const void *idx;
    const int *kd; /* the indices' dims but index_vector_dim, in order */
    const int *bq; /* per batching dim: its position among the updates' scatter dims */
    int nbd;       /* the updates' scatter dims */
    const int64_t *wsize, *xstr, *kstr;
    int64_t ivs; /* the index vector's stride */
    int64_t nb;  /* positions */
    int64_t *base;
} sc_base;

static void run_base(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const sc_base *p = arg;
    const ot_scatter_dims *sd = p->sd;
    int64_t b0 = begin * SC_BASE_CHUNK, xr = p->xs->rank;
    int64_t b1 = end * SC_BASE_CHUNK < p->nb ? end * SC_BASE_CHUNK : p->nb;
    bool s32 = p->ks->dtype == OT_S32;
    int64_t bidx[OT_MAX_RANK] = {0}, r = b0;
    for (int q = p->nbd - 1; q >= 0; q--) {
        bidx[q] = r % p->us->dims[q];
        r /= p->us->dims[q];
    }
    for (int64_t b = b0; b < b1; b++) {
        int64_t kb = 0, start[OT_MAX_RANK] = {0};
        for (int q = 0; q < p->nbd; q++) kb += bidx[q] * p->kstr[p->kd[q]];
        for (int k = 0; k < sd->nscatter_to_operand; k++) {
            int64_t at = kb + k * p->ivs;
            start[sd->scatter_dims_to_operand_dims[k]] =
                s32 ? ((const int32_t *)p->idx)[at] : ((const int64_t *)p->idx)[at];
        }
        for (int k = 0; k < sd->nbatching; k++) start[sd->input_batching_dims[k]] = bidx[p->bq[k]];
        /* a window that does not fit in the operand is skipped, as the reference does */
        int64_t at = 0;
        for (int d = 0; d < xr && at >= 0; d++) {
            if (start[d] < 0 || start[d] > p->xs->dims[d] - p->wsize[d])
                at = -1;
            else
                at += start[d] * p->xstr[d];
        }
        p->base[b] = at;
        for (int q = p->nbd - 1; q >= 0 && ++bidx[q] == p->us->dims[q]; q--) bidx[q] = 0;
    }
}

typedef struct sc_copy {
    char *y;
    const char *x;
    int64_t n;
} sc_copy;

static void copy_part(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const sc_copy *p = arg;
    int64_t a = begin << 16, e = end << 16 < p->n ? end << 16 : p->n;
    if (a < e) memcpy(p->y + a, p->x + a, (size_t)(e - a));
}

ot_status ex_fast_scatter(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                          void *out, const ex_leaf *os, bool *done) {
    const ot_scatter_dims *sd = i->attrs->scatter;
    if (!sd || i->noperands != 3) return OT_OK;
    const ot_shape *xs = ins[0].shape, *ks = ins[1].shape, *us = ins[2].shape, *ys = os->shape;
    ot_dtype t = ys->dtype, kt = ks->dtype;
    size_t es = ot_dtype_size(t);
    if ((kt != OT_S32 && kt != OT_S64) || xs->dtype != t || us->dtype != t ||
        !ot_shape_equal(xs, ys))
        return OT_OK;
    int kind = update_kind(i->called[0], t);
    if (kind < 0) return OT_OK;
    if (kind != SC_SET) {
        bool ok = t == OT_F32 || t == OT_F64 || t == OT_S8 || t == OT_S16 || t == OT_S32 ||
                  t == OT_S64 || t == OT_U8 || t == OT_U16 || t == OT_U32 || t == OT_U64;
        if (!ok) return OT_OK;
    } else if (es != 1 && es != 2 && es != 4 && es != 8) {
        return OT_OK;
    }
    int xr = xs->rank, ur = us->rank, nw = sd->nupdate_window, nbd = ur - nw;
    if (nbd < 0) return OT_OK;
    for (int k = 0; k < nw; k++)
        if (sd->update_window_dims[k] != nbd + k) return OT_OK;
    /* window size per operand dim: the update window dims' sizes in order, 1 for inserted and
     * batching dims */
    int64_t wsize[OT_MAX_RANK];
    int w = 0;
    for (int d = 0; d < xr; d++) {
        bool ins_d = false;
        for (int k = 0; k < sd->ninserted; k++) ins_d |= sd->inserted_window_dims[k] == d;
        for (int k = 0; k < sd->nbatching; k++) ins_d |= sd->input_batching_dims[k] == d;
        wsize[d] = ins_d ? 1 : w < nw ? us->dims[nbd + w] : -1;
        if (!ins_d) w++;
    }
    if (w != nw) return OT_OK;
    /* the updates' scatter dims are the indices' dims without index_vector_dim, in order */
    int64_t ivd = sd->index_vector_dim;
    int kd[OT_MAX_RANK], nk = 0;
    for (int d = 0; d < ks->rank; d++)
        if (d != ivd) kd[nk++] = d;
    if (nk != nbd) return OT_OK;
    for (int q = 0; q < nbd; q++)
        if (ks->dims[kd[q]] != us->dims[q]) return OT_OK;
    /* each batching dim: the scatter dim of its indices dim (the position's own index there) */
    int bq[OT_MAX_RANK];
    for (int k = 0; k < sd->nbatching; k++) {
        bq[k] = -1;
        for (int q = 0; q < nbd; q++)
            if (kd[q] == sd->scatter_indices_batching_dims[k]) bq[k] = q;
        if (bq[k] < 0 || sd->input_batching_dims[k] < 0 || sd->input_batching_dims[k] >= xr)
            return OT_OK;
    }
    if (sd->nscatter_to_operand != (ivd < ks->rank ? ks->dims[ivd] : 1)) return OT_OK;
    for (int k = 0; k < sd->nscatter_to_operand; k++)
        if (sd->scatter_dims_to_operand_dims[k] < 0 || sd->scatter_dims_to_operand_dims[k] >= xr)
            return OT_OK;
    if (ex_overlaps(out, os->nbytes, in[1], ins[1].nbytes) ||
        ex_overlaps(out, os->nbytes, in[2], ins[2].nbytes) ||
        (out != in[0] && ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes)))
        return OT_OK;

    int64_t xstr[OT_MAX_RANK], kstr[OT_MAX_RANK];
    ot_shape_strides(xs, xstr);
    ot_shape_strides(ks, kstr);
    /* runs: the innermost window dim, merged outward while the window spans the whole dim */
    int od = xr - 1;
    int64_t len = xr ? wsize[xr - 1] : 1;
    while (od > 0 && wsize[od] == xs->dims[od]) len *= wsize[--od];
    int64_t NB = 1, W = 1;
    for (int q = 0; q < nbd; q++) NB *= us->dims[q];
    for (int d = 0; d < xr; d++) W *= wsize[d];
    int64_t NR = len ? W / len : 0;
    *done = true;
    c->fast_run++;
    if (out != in[0] && os->nbytes) {
        sc_copy cp = {out, in[0], os->nbytes};
        ex_par_for(c, (os->nbytes + 0xffff) >> 16, os->nbytes * 2, copy_part, &cp);
    }
    if (NB == 0 || W == 0) return OT_OK;

    /* Sums and wide windows: one thread applies every window. The updates are one stream, read
     * once in order, and one thread reads it at about this machine's memory bandwidth; a split
     * whose threads each take every other few rows of it (a thread's output rows or its columns
     * of every row) makes each thread's prefetchers pull most of the stream, and on a loaded
     * machine the second thread often waits for a CPU: both measured slower (docs/benchmarks.md,
     * "The scatter on one thread"; narrow sums split as below measured slower too). */
    bool one = sd->nscatter_to_operand == 1 && (ivd >= ks->rank || ks->dims[ivd] == 1) &&
               sd->nbatching == 0;
    int64_t *base = NULL;
    size_t nbase = one ? 0 : (size_t)NB;
    OT_CHECK(ex_scratch(c, (nbase + (size_t)NR) * sizeof *base, (void **)&base));
    int64_t *roff = base + nbase;
    /* run r's offset: the window dims outside the merged run, row-major */
    int64_t idx[OT_MAX_RANK] = {0};
    for (int64_t r = 0; r < NR; r++) {
        int64_t off = 0;
        for (int d = 0; d < od; d++) off += idx[d] * xstr[d];
        roff[r] = off;
        for (int d = od - 1; d >= 0 && ++idx[d] == wsize[d]; d--) idx[d] = 0;
    }
    bool s32 = kt == OT_S32;
    int64_t lim = -1, str = 0; /* one: the valid indices [0, lim], the operand stride */
    if (one) {
        int d1 = (int)sd->scatter_dims_to_operand_dims[0];
        bool fits = true;
        for (int d = 0; d < xr; d++) fits = fits && xs->dims[d] >= wsize[d];
        lim = fits ? xs->dims[d1] - wsize[d1] : -1;
        str = xstr[d1];
    } else {
        sc_base sb = {sd, xs,  us,    ks,   in[1], kd,
                      bq, nbd, wsize, xstr, kstr,  ivd < ks->rank ? kstr[ivd] : 0,
                      NB, base};
        ex_par_for(c, (NB + SC_BASE_CHUNK - 1) / SC_BASE_CHUNK, NB * 16, run_base, &sb);
    }
    /* keys: one: the index, valid in [0, lim]; else the window's offset (-1: skipped) */
    int64_t kmax = one ? lim + 1 : ot_shape_numel_unchecked(xs) + 1;
    bool hw = EX_HW_FTZ && c->ftz && (kind == SC_ADD || kind == SC_ADD_SWAPPED) &&
              (t == OT_F32 || t == OT_F64);
    sc_job p = {.kind = (sc_kind)kind,
                .t = t,
                .es = es,
                .ftz = c->ftz,
                .hw = hw,
                .one = one,
                .s32 = s32,
                .idx = in[1],
                .str = str,
                .base = base,
                .roff = roff,
                .nb = NB,
                .nr = NR,
                .len = len,
                .kmax = kmax,
                .y = out,
                .u = in[2]};
    /* One-element windows of maximum / minimum in f32 / f64 and one-element overwrites run on
     * one thread: their loops (apply_keys) cost the same per position whether or not the
     * position is in a thread's range (no branch), so a split adds a pass over the stream per
     * thread and saves nothing (measured at 2 threads on 1M updates into 65536: scatter-max
     * 5.0 -> 2.8 ms, min of 40).
     * Narrow windows that never overlap (one index per position into an inserted dim): each
     * thread takes a part of the keys, reads every index and applies its part's windows in
     * order, so each element still gets its updates in the reference's order. A narrow window's
     * update is a read-modify-write at a random place (latency and compute, not bandwidth): the
     * split divides that work while each thread reads the whole index stream. */
    bool split = one && wsize[sd->scatter_dims_to_operand_dims[0]] == 1 &&
                 W * (int64_t)es <= SC_SPLIT_BYTES && kind != SC_ADD && kind != SC_ADD_SWAPPED &&
                 !(W == 1 && (kind == SC_SET || t == OT_F32 || t == OT_F64));
    if (split)
        ex_par_for(c, SC_PARTS, NB * (int64_t)(W * (int64_t)es + (s32 ? 4 : 8)) * 2, apply_part,
                   &p);
    else
        apply_keys(&p, 0, (uint64_t)kmax);
    return OT_OK;
}
