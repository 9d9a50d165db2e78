/* The fast window kernels (kernels.h): pooling and its gradient.
 *
 * reduce-window of one f32/f64 input whose reducer is exactly add, maximum or minimum of its two
 * parameters (either order), and select-and-scatter of f32/f64 whose select is a float compare
 * GE, GT, LE or LT of its two parameters (either order) and whose scatter is add of its two
 * parameters (either order). Any rank >= 1, strides, padding, base and window dilation and
 * reversal.
 *
 * Bit-identical to the reference (reduce.c), which for each output (select-and-scatter: each
 * source element), in row-major order, visits the window positions in row-major order of the
 * window index and skips those in padding or base-dilation holes:
 *  - reduce-window folds acc = f(acc, x) from the init value over the visited elements, with the
 *    reference's scalar add/maximum/minimum (add_f, max_f, ... of fast_internal.h: FTZ/DAZ, NaN
 *    and signed-zero rules);
 *  - select-and-scatter keeps the first visited element and replaces it by each later candidate
 *    the select rejects (select(current, candidate) false; a NaN on either side is unordered, so
 *    false), then adds the source element into the output at the selected position, the output
 *    starting as the init value everywhere. The adds into one output element come in row-major
 *    order of the source.
 * Per window dim, a table lists for each output coordinate the input offsets its window visits
 * (in window order, holes left out), so the visit order is the tables' odometer over the outer
 * dims with the last dim innermost: the reference's order. A row (the last output dim) is done
 * in chunks of WIN_CHUNK outputs held in registers/stack, each output's elements folded in order.
 *
 * A reduce-window that is a prefix scan (cumsum, cumprod, cummax, cummin) runs as one: see
 * "prefix scans" below.
 *
 * Threads: reduce-window splits the output rows (each output written once). Select-and-scatter's
 * windows may overlap (stride < window), so two source elements can add into one output: the
 * source is split by its leading dims whose windows never overlap (stride >= the dilated window),
 * so tasks write disjoint outputs and each task walks its source elements in the reference's
 * order; with no such dim it runs as one task. The partition depends on the shape only, so the
 * bits never depend on the thread count. */
#include "exec/fast_internal.h"

#define WIN_CHUNK     256                /* outputs of a row folded together (select) */
#define RW_CHUNK      1024               /* outputs of a row folded together (reduce-window) */
#define WIN_MAX_TABLE ((int64_t)1 << 22) /* entries of the per-dim tables (else the reference) */
#define WIN_MAX_BDIL  4096 /* base dilation of a blocked W handled as progressions (else exact) */

typedef enum { WIN_ADD, WIN_MAX, WIN_MIN } win_op;

typedef struct win_plan {
    int r;
    bool ftz;
    win_op op;
    bool swap;   /* the computation's operands swapped: f(x, acc), add(source, output) */
    bool strict; /* select: keep = P > Q (else P >= Q) */
    bool flip;   /* select: (P, Q) = (candidate, current) (else (current, candidate)) */
    bool f64;
    bool aff;      /* the last dim's window positions are affine in j (no base dilation) */
    bool init_nan; /* the init value is a NaN (reduce-window: the exact fold throughout) */
    bool idx32;    /* select-and-scatter f32: operand offsets fit the 32-bit lanes */
    int64_t odims[OT_MAX_RANK];      /* reduce-window: output dims; select-and-scatter: source */
    int64_t wsize[OT_MAX_RANK];      /* window size per dim (table row length) */
    const int64_t *cnt[OT_MAX_RANK]; /* [odims[d]]: window elements output coordinate o visits */
    const int64_t *off[OT_MAX_RANK]; /* [odims[d] * wsize[d]]: their input offsets, in order */
    /* aff: window position k of the last dim is valid for outputs j in [ja[k], jb[k]) and reads
     * offset j * S + koff[k] */
    const int64_t *ja, *jb, *koff;
    int64_t S;
    /* reduce-window: blk > 0 when the last dim is an input's last two dims (W, C) whose C the
     * window leaves alone: output j = w * blk + c. Window position k of W is valid for the
     * positions w = ja[k] + t * q, w < jb[k], and reads blk contiguous elements at
     * (kin[k] + t * Sin) * blk: q is 1 and Sin the stride without base dilation; with base
     * dilation d the valid w step by q = d / gcd(S, d), each reading the input Sin = S / gcd
     * further on (an average pool's gradient: stride 1, d 2, every other w per position). */
    int64_t blk;
    const int64_t *kin;
    int64_t q, Sin;
    int64_t chunk;   /* reduce-window: outputs of a row folded together (a multiple of blk) */
    int64_t L;       /* the last output dim */
    int64_t rpt;     /* rows per task */
    const void *x;   /* the input / operand */
    const void *src; /* select-and-scatter: the source */
    void *y;
    const void *init;
} win_plan;

/* The odometer over the outer dims' window elements of one output row: base is the input offset
 * of the current combination (row-major in the window index, as the reference visits). */
typedef struct win_iter {
    int nd;
    bool empty;
    int64_t base;
    const int64_t *c[OT_MAX_RANK], *o[OT_MAX_RANK];
    int64_t k[OT_MAX_RANK];
} win_iter;

static inline void iter_row(const win_plan *p, int64_t row, win_iter *it) {
    it->nd = p->r - 1;
    it->empty = false;
    for (int d = it->nd - 1; d >= 0; d--) {
        int64_t od = row % p->odims[d];
        row /= p->odims[d];
        it->c[d] = &p->cnt[d][od];
        it->o[d] = p->off[d] + od * p->wsize[d];
        if (*it->c[d] == 0) it->empty = true;
    }
}
/* The next row's iterator (row + 1 of the one it holds; digits od[] of that row, last outer dim
 * fastest): no division per row. */
static inline void iter_step(const win_plan *p, int64_t *od, win_iter *it) {
    for (int d = it->nd - 1; d >= 0; d--) {
        if (++od[d] < p->odims[d]) {
            it->c[d]++;
            it->o[d] += p->wsize[d];
            break;
        }
        od[d] = 0;
        it->c[d] = &p->cnt[d][0];
        it->o[d] = p->off[d];
    }
    it->empty = false;
    for (int d = 0; d < it->nd; d++)
        if (*it->c[d] == 0) it->empty = true;
}
static inline void iter_digits(const win_plan *p, int64_t row, int64_t *od) {
    for (int d = p->r - 2; d >= 0; d--) {
        od[d] = row % p->odims[d];
        row /= p->odims[d];
    }
}
static inline bool iter_first(win_iter *it) {
    if (it->empty) return false;
    it->base = 0;
    for (int d = 0; d < it->nd; d++) {
        it->k[d] = 0;
        it->base += it->o[d][0];
    }
    return true;
}
static inline bool iter_next(win_iter *it) {
    for (int d = it->nd - 1; d >= 0; d--) {
        it->base -= it->o[d][it->k[d]];
        if (++it->k[d] < *it->c[d]) {
            it->base += it->o[d][it->k[d]];
            return true;
        }
        it->k[d] = 0;
        it->base += it->o[d][0];
    }
    return false;
}

/* The reference's scalar add, where both operands are NaN its own ex_binary: which payload a
 * sum of two NaNs keeps is the reference's compiled add's choice (x86 keeps one operand's). */
static inline float addn_f(float a, float b, bool z) {
    if (a != a && b != b) {
        float r;
        ex_binary(OT_OP_ADD, OT_F32, &a, &b, &r, 1);
        return r;
    }
    return add_f(a, b, z);
}
static inline double addn_d(double a, double b, bool z) {
    if (a != a && b != b) {
        double r;
        ex_binary(OT_OP_ADD, OT_F64, &a, &b, &r, 1);
        return r;
    }
    return add_d(a, b, z);
}

/* ---- vector folds (no NaN among the elements) ---------------------------------------------- */

/* Where the last dim's window is affine in j, each (outer combination, window position) is one
 * strided loop over a range of outputs: integer and IEEE-add operations only (no multiply to
 * contract), so any vector width gives the same bits; x86-64 GCC builds them for AVX-512, AVX2
 * and the baseline. Each loop also reports whether an element was a NaN; a chunk that saw one
 * is folded again by the exact loop (which NaN comes out is then the reference's). Without NaNs:
 * maximum/minimum compare integer keys of the (DAZ) bits, ordered as the floats with -0 < +0 —
 * the reference's result exactly; an add of two non-NaNs (or of the one NaN an inf - inf made)
 * is the reference's add. */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && __GNUC__ >= 11 &&            \
    !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define WIN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define WIN_CLONES
#endif

#define AI static inline __attribute__((always_inline))

/* T's bits as UT, a subnormal flushed to its signed zero under z (DAZ), and back. */
#define DEFINE_BITS(T, UT, ST, SUF, ABS, MINN, INF, SIGN)                                          \
    AI UT bits_##SUF(T v, bool z) {                                                                \
        UT u;                                                                                      \
        memcpy(&u, &v, sizeof u);                                                                  \
        if (z) u &= (u & (ABS)) < (MINN) ? (SIGN) : ~(UT)0;                                        \
        return u;                                                                                  \
    }                                                                                              \
    AI T from_##SUF(UT u) {                                                                        \
        T v;                                                                                       \
        memcpy(&v, &u, sizeof v);                                                                  \
        return v;                                                                                  \
    }                                                                                              \
    AI UT isnan_##SUF(T v) {                                                                       \
        UT u;                                                                                      \
        memcpy(&u, &v, sizeof u);                                                                  \
        return (UT)((u & (ABS)) > (INF));                                                          \
    }                                                                                              \
    /* a total order key: -0 below +0 (maximum/minimum) */                                         \
    AI ST okey_##SUF(UT u) {                                                                       \
        return (ST)(u ^ ((UT)((ST)u >> (sizeof(UT) * 8 - 1)) >> 1));                               \
    }                                                                                              \
    /* the compare's key: -0 equal to +0 */                                                        \
    AI ST ckey_##SUF(UT u) {                                                                       \
        ST k = (ST)(u & (ABS));                                                                    \
        return (u & (SIGN)) ? -k : k;                                                              \
    }                                                                                              \
    AI T addk_##SUF(T a, T b, bool z) {                                                            \
        return from_##SUF(                                                                         \
            bits_##SUF(from_##SUF(bits_##SUF(a, z)) + from_##SUF(bits_##SUF(b, z)), z));           \
    }

DEFINE_BITS(float, uint32_t, int32_t, f32, 0x7fffffffu, 0x00800000u, 0x7f800000u, 0x80000000u)
DEFINE_BITS(double, uint64_t, int64_t, f64, 0x7fffffffffffffffull, 0x0010000000000000ull,
            0x7ff0000000000000ull, 0x8000000000000000ull)

/* acc[j] = OP(acc[j], xb[j * S]) for j < n; returns nonzero when an element was a NaN. */
#define DEFINE_FOLD(T, UT, SUF, NAME, OPK)                                                         \
    AI UT fold_##NAME##_##SUF##_k(T *restrict acc, const T *restrict xb, int64_t n, int64_t S,     \
                                  bool z) {                                                        \
        UT nan = 0;                                                                                \
        if (S == 1) {                                                                              \
            for (int64_t j = 0; j < n; j++) {                                                      \
                nan |= isnan_##SUF(xb[j]);                                                         \
                acc[j] = OPK(acc[j], xb[j], z);                                                    \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t j = 0; j < n; j++) {                                                      \
                T v = xb[j * S];                                                                   \
                nan |= isnan_##SUF(v);                                                             \
                acc[j] = OPK(acc[j], v, z);                                                        \
            }                                                                                      \
        }                                                                                          \
        return nan;                                                                                \
    }                                                                                              \
    WIN_CLONES static UT fold_##NAME##_##SUF(T *restrict acc, const T *restrict xb, int64_t n,     \
                                             int64_t S, bool z) {                                  \
        return z ? fold_##NAME##_##SUF##_k(acc, xb, n, S, true)                                    \
                 : fold_##NAME##_##SUF##_k(acc, xb, n, S, false);                                  \
    }

DEFINE_FOLD(float, uint32_t, f32, add, addk_f32)
DEFINE_FOLD(double, uint64_t, f64, add, addk_f64)

/* Blocked folds (reduce-window's blk): acc[w * as + c] = OP(acc[w * as + c], xb[w * xs + c]) for
 * w < nw, c < B: one call per window position instead of one per position w (C-element calls of
 * a pooling over NHWC cost more than their adds). Each output still gets its elements in the
 * same order. Returns nonzero when an element was a NaN. */
#define DEFINE_BFOLD(T, UT, AT, SUF, NAME, STEP)                                                   \
    AI UT bfold_##NAME##_##SUF##_k(AT *restrict acc, const T *restrict xb, int64_t nw, int64_t B,  \
                                   int64_t as, int64_t xs, bool z) {                               \
        UT nan = 0;                                                                                \
        for (int64_t w = 0; w < nw; w++)                                                           \
            for (int64_t c = 0; c < B; c++) {                                                      \
                T v = xb[w * xs + c];                                                              \
                nan |= isnan_##SUF(v);                                                             \
                STEP(acc[w * as + c], v, z);                                                       \
            }                                                                                      \
        return nan;                                                                                \
    }                                                                                              \
    WIN_CLONES static UT bfold_##NAME##_##SUF(void *restrict accv, const T *restrict xb,           \
                                              int64_t nw, int64_t B, int64_t as, int64_t xs,       \
                                              bool z) {                                            \
        AT *acc = accv;                                                                            \
        return z ? bfold_##NAME##_##SUF##_k(acc, xb, nw, B, as, xs, true)                          \
                 : bfold_##NAME##_##SUF##_k(acc, xb, nw, B, as, xs, false);                        \
    }
#define BSTEP_ADD_F32(a, v, z) ((a) = addk_f32((a), (v), (z)))
#define BSTEP_ADD_F64(a, v, z) ((a) = addk_f64((a), (v), (z)))
DEFINE_BFOLD(float, uint32_t, float, f32, add, BSTEP_ADD_F32)
DEFINE_BFOLD(double, uint64_t, double, f64, add, BSTEP_ADD_F64)

/* Maximum/minimum folded into keys: acc holds the outputs' okeys (reduce-window's KEYS: the
 * chunk's outputs converted once before the folds and back once after), so each element costs
 * one key and one integer max/min instead of both operands' flushes and keys; the operand of the
 * larger (smaller) key is the reference's result, equal keys being equal bits. */
#define DEFINE_KFOLD(T, UT, ST, SUF, NAME, MAXP)                                                   \
    AI UT kfold_##NAME##_##SUF##_k(ST *restrict acc, const T *restrict xb, int64_t n, int64_t S,   \
                                   bool z) {                                                       \
        UT nan = 0;                                                                                \
        for (int64_t j = 0; j < n; j++) {                                                          \
            T v = xb[j * S];                                                                       \
            nan |= isnan_##SUF(v);                                                                 \
            ST k = okey_##SUF(bits_##SUF(v, z));                                                   \
            acc[j] = (MAXP) ? (k > acc[j] ? k : acc[j]) : (k < acc[j] ? k : acc[j]);               \
        }                                                                                          \
        return nan;                                                                                \
    }                                                                                              \
    WIN_CLONES static UT fold_##NAME##_##SUF(void *restrict accv, const T *restrict xb, int64_t n, \
                                             int64_t S, bool z) {                                  \
        ST *acc = accv;                                                                            \
        if (S == 1)                                                                                \
            return z ? kfold_##NAME##_##SUF##_k(acc, xb, n, 1, true)                               \
                     : kfold_##NAME##_##SUF##_k(acc, xb, n, 1, false);                             \
        return z ? kfold_##NAME##_##SUF##_k(acc, xb, n, S, true)                                   \
                 : kfold_##NAME##_##SUF##_k(acc, xb, n, S, false);                                 \
    }

DEFINE_KFOLD(float, uint32_t, int32_t, f32, max, 1)
DEFINE_KFOLD(float, uint32_t, int32_t, f32, min, 0)
DEFINE_KFOLD(double, uint64_t, int64_t, f64, max, 1)
DEFINE_KFOLD(double, uint64_t, int64_t, f64, min, 0)
#define BSTEP_KEY(A, V, Z, ST, SUF, MAXP)                                                          \
    do {                                                                                           \
        ST k_ = okey_##SUF(bits_##SUF((V), (Z)));                                                  \
        (A) = (MAXP) ? (k_ > (A) ? k_ : (A)) : (k_ < (A) ? k_ : (A));                              \
    } while (0)
#define BSTEP_MAX_F32(a, v, z) BSTEP_KEY(a, v, z, int32_t, f32, 1)
#define BSTEP_MIN_F32(a, v, z) BSTEP_KEY(a, v, z, int32_t, f32, 0)
#define BSTEP_MAX_F64(a, v, z) BSTEP_KEY(a, v, z, int64_t, f64, 1)
#define BSTEP_MIN_F64(a, v, z) BSTEP_KEY(a, v, z, int64_t, f64, 0)
DEFINE_BFOLD(float, uint32_t, int32_t, f32, max, BSTEP_MAX_F32)
DEFINE_BFOLD(float, uint32_t, int32_t, f32, min, BSTEP_MIN_F32)
DEFINE_BFOLD(double, uint64_t, int64_t, f64, max, BSTEP_MAX_F64)
DEFINE_BFOLD(double, uint64_t, int64_t, f64, min, BSTEP_MIN_F64)

/* The select over candidates xb[j * S] (operand offsets at0 + j * S) for j < n: bk/bi hold the
 * current selection's key (sign-adjusted so that the select keeps the larger) and offset;
 * replaced when the candidate's key is greater (ge: or equal — a strict compare keeps only a
 * strictly larger current). Returns nonzero when a candidate was a NaN. */
#define DEFINE_SEL(T, UT, ST, SUF)                                                                 \
    AI UT sel_##SUF##_k(ST *restrict bk, ST *restrict bi, const T *restrict xb, ST at0, int64_t n, \
                        int64_t S, bool z, bool neg, bool ge) {                                    \
        UT nan = 0;                                                                                \
        for (int64_t j = 0; j < n; j++) {                                                          \
            T v = xb[j * S];                                                                       \
            nan |= isnan_##SUF(v);                                                                 \
            ST key = ckey_##SUF(bits_##SUF(v, z));                                                 \
            key = neg ? -key : key;                                                                \
            bool rep = ge ? key >= bk[j] : key > bk[j];                                            \
            bk[j] = rep ? key : bk[j];                                                             \
            bi[j] = rep ? at0 + (ST)(j * S) : bi[j];                                               \
        }                                                                                          \
        return nan;                                                                                \
    }                                                                                              \
    WIN_CLONES static UT sel_##SUF(ST *restrict bk, ST *restrict bi, const T *restrict xb, ST at0, \
                                   int64_t n, int64_t S, bool z, bool neg, bool ge) {              \
        if (z)                                                                                     \
            return neg ? (ge ? sel_##SUF##_k(bk, bi, xb, at0, n, S, true, true, true)              \
                             : sel_##SUF##_k(bk, bi, xb, at0, n, S, true, true, false))            \
                       : (ge ? sel_##SUF##_k(bk, bi, xb, at0, n, S, true, false, true)             \
                             : sel_##SUF##_k(bk, bi, xb, at0, n, S, true, false, false));          \
        return neg ? (ge ? sel_##SUF##_k(bk, bi, xb, at0, n, S, false, true, true)                 \
                         : sel_##SUF##_k(bk, bi, xb, at0, n, S, false, true, false))               \
                   : (ge ? sel_##SUF##_k(bk, bi, xb, at0, n, S, false, false, true)                \
                         : sel_##SUF##_k(bk, bi, xb, at0, n, S, false, false, false));             \
    }

DEFINE_SEL(float, uint32_t, int32_t, f32)
DEFINE_SEL(double, uint64_t, int64_t, f64)

/* The outputs [lo, hi) of chunk [j0, j0 + n) that window position k of the last dim reaches. */
AI bool aff_range(const win_plan *p, int64_t k, int64_t j0, int64_t n, int64_t *lo, int64_t *hi) {
    *lo = p->ja[k] > j0 ? p->ja[k] : j0;
    *hi = p->jb[k] < j0 + n ? p->jb[k] : j0 + n;
    return *lo < *hi;
}

/* The exact folds' walk over the last dim's window for output j: last_count(p, j) bounds the
 * positions and last_offset(p, j, &t) is the offset of the t-th one it visits (t advanced past
 * holes; -1 when no more). From the tables where they were built; where the last dim is affine
 * and unblocked they are not (an output's window may be as long as the row: a reverse cumsum of
 * 3,000 would need 9M entries), and position k is visited by the outputs [ja[k], jb[k]) at
 * j * S + koff[k] — the tables' order, which skips the same positions. */
AI int64_t last_count(const win_plan *p, int64_t j) {
    const int64_t *cl = p->cnt[p->r - 1];
    return cl ? cl[j] : p->wsize[p->r - 1];
}
AI int64_t last_offset(const win_plan *p, int64_t j, int64_t *t) {
    int64_t ws = p->wsize[p->r - 1];
    if (p->off[p->r - 1]) return p->off[p->r - 1][j * ws + *t];
    for (; *t < ws; ++*t)
        if (p->ja[*t] <= j && j < p->jb[*t]) return p->koff[*t] + j * p->S;
    return -1;
}

/* Blocked (blk): the positions [lo, lo + q * nt) of chunk [w0, w0 + nw) that window position
 * k reaches (every q-th from lo), the first being its t0-th. */
AI bool blk_range(const win_plan *p, int64_t k, int64_t w0, int64_t nw, int64_t *lo, int64_t *t0,
                  int64_t *nt) {
    int64_t hi = p->jb[k] < w0 + nw ? p->jb[k] : w0 + nw;
    *t0 = p->ja[k] >= w0 ? 0 : (w0 - p->ja[k] + p->q - 1) / p->q;
    *lo = p->ja[k] + *t0 * p->q;
    if (*lo >= hi) return false;
    *nt = (hi - 1 - *lo) / p->q + 1;
    return true;
}

/* ---- reduce-window ------------------------------------------------------------------------ */

/* HWZ: the vector folds of an add under FTZ run plain adds under the hardware modes
 * (ex_hw_ftz_on, set by rw_* for the whole task; the exact loop's software flushing gives the
 * same bits under them). */
#define DEFINE_RW(T, UT, ST, KS, SUF, OPF, FOLD, BFOLD, HWZ, KEYS)                                 \
    static inline __attribute__((always_inline)) void rw_##SUF##_k(                                \
        const win_plan *p, int64_t begin, int64_t end, bool z, bool sw) {                          \
        const T *x = p->x;                                                                         \
        T *y = p->y, init, acc[RW_CHUNK];                                                          \
        ST kacc[(KEYS) ? RW_CHUNK : 1];                                                            \
        memcpy(&init, p->init, sizeof init);                                                       \
        int64_t L = p->L, wl = p->wsize[p->r - 1];                                                 \
        win_iter it;                                                                               \
        int64_t od[OT_MAX_RANK];                                                                   \
        iter_digits(p, begin, od);                                                                 \
        iter_row(p, begin, &it);                                                                   \
        for (int64_t row = begin; row < end; row++) {                                              \
            if (row > begin) iter_step(p, od, &it);                                                \
            for (int64_t j0 = 0; j0 < L; j0 += p->chunk) {                                         \
                int64_t n = L - j0 < p->chunk ? L - j0 : p->chunk;                                 \
                for (int64_t j = 0; j < n; j++) acc[j] = init;                                     \
                /* (KEYS: a subnormal init under z is kept unflushed by an output whose window     \
                 * visits nothing, which its key cannot tell: the exact fold) */                   \
                bool exact = !p->aff || p->init_nan ||                                             \
                             ((KEYS) && z && bits_##KS(init, true) != bits_##KS(init, false));     \
                if (!exact) {                                                                      \
                    UT nan = 0;                                                                    \
                    int64_t B = p->blk;                                                            \
                    if (KEYS) {                                                                    \
                        ST ki = okey_##KS(bits_##KS(init, z));                                     \
                        for (int64_t j = 0; j < n; j++) kacc[j] = ki;                              \
                    }                                                                              \
                    for (bool more = iter_first(&it); more; more = iter_next(&it))                 \
                        for (int64_t k = 0, lo, hi, t0, nt; k < wl; k++)                           \
                            if (!B && aff_range(p, k, j0, n, &lo, &hi))                            \
                                nan |= FOLD((KEYS) ? (void *)(kacc + (lo - j0))                    \
                                                   : (void *)(acc + (lo - j0)),                    \
                                            x + it.base + p->koff[k] + lo * p->S, hi - lo, p->S,   \
                                            z && !HWZ);                                            \
                            else if (B && blk_range(p, k, j0 / B, n / B, &lo, &t0, &nt))           \
                                nan |= BFOLD((KEYS) ? (void *)(kacc + (lo * B - j0))               \
                                                    : (void *)(acc + (lo * B - j0)),               \
                                             x + it.base + (p->kin[k] + t0 * p->Sin) * B, nt, B,   \
                                             p->q * B, p->Sin * B, z && !HWZ);                     \
                    if (nan) {                                                                     \
                        exact = true;                                                              \
                        for (int64_t j = 0; j < n; j++) acc[j] = init;                             \
                    } else if (KEYS) { /* okey is its own inverse */                               \
                        for (int64_t j = 0; j < n; j++)                                            \
                            acc[j] = from_##KS((UT)okey_##KS((UT)kacc[j]));                        \
                    }                                                                              \
                }                                                                                  \
                for (bool more = exact && iter_first(&it); more; more = iter_next(&it)) {          \
                    for (int64_t j = 0; j < n; j++) {                                              \
                        T a = acc[j];                                                              \
                        for (int64_t t = 0, ct = last_count(p, j0 + j); t < ct; t++) {             \
                            int64_t at = last_offset(p, j0 + j, &t);                               \
                            if (at < 0) break;                                                     \
                            T v = x[it.base + at];                                                 \
                            a = sw ? OPF(v, a, z) : OPF(a, v, z);                                  \
                        }                                                                          \
                        acc[j] = a;                                                                \
                    }                                                                              \
                }                                                                                  \
                memcpy(y + row * L + j0, acc, (size_t)n * sizeof(T));                              \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void rw_##SUF(void *arg, int64_t begin, int64_t end, int ith) {                         \
        (void)ith;                                                                                 \
        const win_plan *p = arg;                                                                   \
        if (p->ftz) {                                                                              \
            unsigned csr = HWZ ? ex_hw_ftz_on() : 0;                                               \
            p->swap ? rw_##SUF##_k(p, begin, end, true, true)                                      \
                    : rw_##SUF##_k(p, begin, end, true, false);                                    \
            if (HWZ) ex_hw_ftz_off(csr);                                                           \
        } else {                                                                                   \
            p->swap ? rw_##SUF##_k(p, begin, end, false, true)                                     \
                    : rw_##SUF##_k(p, begin, end, false, false);                                   \
        }                                                                                          \
    }

DEFINE_RW(float, uint32_t, int32_t, f32, add_f32, addn_f, fold_add_f32, bfold_add_f32, EX_HW_FTZ, 0)
DEFINE_RW(float, uint32_t, int32_t, f32, max_f32, max_f, fold_max_f32, bfold_max_f32, 0, 1)
DEFINE_RW(float, uint32_t, int32_t, f32, min_f32, min_f, fold_min_f32, bfold_min_f32, 0, 1)
DEFINE_RW(double, uint64_t, int64_t, f64, add_f64, addn_d, fold_add_f64, bfold_add_f64, EX_HW_FTZ,
          0)
DEFINE_RW(double, uint64_t, int64_t, f64, max_f64, max_d, fold_max_f64, bfold_max_f64, 0, 1)
DEFINE_RW(double, uint64_t, int64_t, f64, min_f64, min_d, fold_min_f64, bfold_min_f64, 0, 1)

/* ---- prefix scans ------------------------------------------------------------------------- */

/* A reduce-window that is a scan along one dim (of n; ex_window_scan_dim, numerics.h): output k
 * folds x_0 .. x_k (prefix) or, from the far end, x_{n-1} .. x_k (suffix). JAX lowers cumsum,
 * cumprod, cummax and cummin to it on CPU. The reference folds each output's window from the init
 * value in that order, skipping the padding, which is acc_k = f(acc_{k-1}, x_k) from acc_{-1} =
 * init (suffix: acc_k = f(acc_{k+1}, x_k) from acc_n = init): the same operations in the same
 * order, so the scan below gives the reference's bits in n steps instead of n^2 / 2. The operand
 * is viewed as [outer, n, inner] (tasks: scan_tasks). */
#define SCAN_BLOCK 1024

typedef struct scan_plan {
    int64_t outer, n, inner, nblk;
    ot_opcode op;
    bool ftz, swap;
    bool rev; /* a suffix scan: output k folds x_{n-1} .. x_k */
    const void *x, *init;
    void *y;
} scan_plan;

/* max_f / min_f (max_d / min_d) for operands that are not NaN (scan_op takes the NaNs apart):
 * the operands' total-order keys compared, integer selects only, so that the scan's loops
 * vectorize. The same result: equal keys are equal bits, and -0 orders below +0 as the
 * reference's tie rule picks (+0 for maximum, -0 for minimum). */
/* fz_f / fz_d without a branch (a subnormal to its signed zero, by masking its bits): the scan's
 * loops over several lines do not vectorize, and the branch cost more than the operation. */
static inline float scan_fz_f32(float v, bool z) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u &= z && (u & 0x7fffffffu) < 0x00800000u ? 0x80000000u : 0xffffffffu;
    memcpy(&v, &u, 4);
    return v;
}
static inline double scan_fz_f64(double v, bool z) {
    uint64_t u;
    memcpy(&u, &v, 8);
    u &= z && (u & 0x7fffffffffffffffull) < 0x0010000000000000ull ? 0x8000000000000000ull : ~0ull;
    memcpy(&v, &u, 8);
    return v;
}
static inline float scan_add_f32(float a, float b, bool z) {
    return scan_fz_f32(scan_fz_f32(a, z) + scan_fz_f32(b, z), z);
}
static inline double scan_add_f64(double a, double b, bool z) {
    return scan_fz_f64(scan_fz_f64(a, z) + scan_fz_f64(b, z), z);
}
static inline float scan_mul_f32(float a, float b, bool z) {
    if (!z) return a * b;
    return ex_tiny_f((double)scan_fz_f32(a, z) * (double)scan_fz_f32(b, z)); /* as mul_f */
}
static inline double scan_mul_f64(double a, double b, bool z) {
    return scan_fz_f64(scan_fz_f64(a, z) * scan_fz_f64(b, z), z);
}

#define DEFINE_SCAN_MINMAX(T, SUF, FZ, I, U, SH)                                                   \
    static inline I scan_key_##SUF(T v) {                                                          \
        I k;                                                                                       \
        memcpy(&k, &v, sizeof k);                                                                  \
        return k ^ (I)((U)(k >> SH) >> 1);                                                         \
    }                                                                                              \
    static inline T scan_max_##SUF(T a, T b, bool z) {                                             \
        a = FZ(a, z), b = FZ(b, z);                                                                \
        return scan_key_##SUF(a) >= scan_key_##SUF(b) ? a : b;                                     \
    }                                                                                              \
    static inline T scan_min_##SUF(T a, T b, bool z) {                                             \
        a = FZ(a, z), b = FZ(b, z);                                                                \
        return scan_key_##SUF(a) <= scan_key_##SUF(b) ? a : b;                                     \
    }
DEFINE_SCAN_MINMAX(float, f32, scan_fz_f32, int32_t, uint32_t, 31)
DEFINE_SCAN_MINMAX(double, f64, scan_fz_f64, int64_t, uint64_t, 63)

/* One reducer's scan steps, the operand order, the flush mode and the direction fixed for each
 * loop: a row of n inner indices, y_j = f(prev_j, x_j) (prev NULL: init), which vectorizes; or,
 * where the scanned dim is the last (inner 1), SCAN_LINES lines of n elements side by side (line
 * l at x + off[l]), y_k = f(y_{k-1}, x_k) from init (rev: y_k = f(y_{k+1}, x_k) from the end),
 * so that the lines' chains overlap instead of one chain's latency per element. True when a NaN
 * went by: the caller does those elements again with scan_op, whose NaN is the reference's. */
#define SCAN_LINES 8
#define SCAN_ROW(T, F, SWAP, Z)                                                                    \
    for (int64_t j = 0; j < n; j++) {                                                              \
        T a_ = prev ? prev[j] : init, b_ = x[j];                                                   \
        y[j] = (SWAP) ? F(b_, a_, Z) : F(a_, b_, Z);                                               \
        nan |= (a_ != a_) | (b_ != b_);                                                            \
    }
#define SCAN_LINE_STEPS(T, F, SWAP, Z, REV)                                                        \
    for (int64_t s_ = 0; s_ < n; s_++) {                                                           \
        int64_t k = (REV) ? n - 1 - s_ : s_;                                                       \
        for (int l = 0; l < SCAN_LINES; l++) {                                                     \
            T a_ = acc[l], b_ = x[off[l] + k];                                                     \
            T r_ = (SWAP) ? F(b_, a_, Z) : F(a_, b_, Z);                                           \
            y[off[l] + k] = r_;                                                                    \
            acc[l] = r_;                                                                           \
            nan |= (a_ != a_) | (b_ != b_);                                                        \
        }                                                                                          \
    }
#define DEFINE_SCAN_STEPS(T, NAME, F)                                                              \
    static bool NAME##_row(bool swap, bool z, const T *prev, T init, const T *x, T *y,             \
                           int64_t n) {                                                            \
        int nan = 0;                                                                               \
        switch ((swap ? 2 : 0) | (z ? 1 : 0)) {                                                    \
        case 0: SCAN_ROW(T, F, 0, 0) break;                                                        \
        case 1: SCAN_ROW(T, F, 0, 1) break;                                                        \
        case 2: SCAN_ROW(T, F, 1, 0) break;                                                        \
        default: SCAN_ROW(T, F, 1, 1) break;                                                       \
        }                                                                                          \
        return nan != 0;                                                                           \
    }                                                                                              \
    static bool NAME##_lines(bool swap, bool z, bool rev, const int64_t *off, T init, const T *x,  \
                             T *y, int64_t n) {                                                    \
        int nan = 0;                                                                               \
        T acc[SCAN_LINES];                                                                         \
        for (int l = 0; l < SCAN_LINES; l++) acc[l] = init;                                        \
        switch ((rev ? 4 : 0) | (swap ? 2 : 0) | (z ? 1 : 0)) {                                    \
        case 0: SCAN_LINE_STEPS(T, F, 0, 0, 0) break;                                              \
        case 1: SCAN_LINE_STEPS(T, F, 0, 1, 0) break;                                              \
        case 2: SCAN_LINE_STEPS(T, F, 1, 0, 0) break;                                              \
        case 3: SCAN_LINE_STEPS(T, F, 1, 1, 0) break;                                              \
        case 4: SCAN_LINE_STEPS(T, F, 0, 0, 1) break;                                              \
        case 5: SCAN_LINE_STEPS(T, F, 0, 1, 1) break;                                              \
        case 6: SCAN_LINE_STEPS(T, F, 1, 0, 1) break;                                              \
        default: SCAN_LINE_STEPS(T, F, 1, 1, 1) break;                                             \
        }                                                                                          \
        return nan != 0;                                                                           \
    }

/* f(a, b) of the reference for the reducers a scan takes: the inline twins of fast_internal.h,
 * and the reference's own ex_binary where an operand is a NaN (which payload comes out is then
 * its choice, as addn_f). */
#define DEFINE_SCAN(T, SUF, DT, ADD, MUL, MAX, MIN)                                                \
    static inline T scan_op_##SUF(ot_opcode op, T a, T b, bool z) {                                \
        if (a != a || b != b) {                                                                    \
            T r;                                                                                   \
            ex_binary(op, DT, &a, &b, &r, 1);                                                      \
            return r;                                                                              \
        }                                                                                          \
        switch (op) {                                                                              \
        case OT_OP_ADD: return ADD(a, b, z);                                                       \
        case OT_OP_MULTIPLY: return MUL(a, b, z);                                                  \
        case OT_OP_MAXIMUM: return MAX(a, b, z);                                                   \
        default: return MIN(a, b, z);                                                              \
        }                                                                                          \
    }                                                                                              \
    DEFINE_SCAN_STEPS(T, scan_add_##SUF, ADD)                                                      \
    DEFINE_SCAN_STEPS(T, scan_mul_##SUF, MUL)                                                      \
    DEFINE_SCAN_STEPS(T, scan_maxs_##SUF, MAX)                                                     \
    DEFINE_SCAN_STEPS(T, scan_mins_##SUF, MIN)                                                     \
    static void scan_##SUF(void *arg, int64_t begin, int64_t end, int ith) {                       \
        (void)ith;                                                                                 \
        const scan_plan *p = arg;                                                                  \
        const T *x = p->x;                                                                         \
        T *y = p->y, init;                                                                         \
        memcpy(&init, p->init, sizeof init);                                                       \
        ot_opcode op = p->op;                                                                      \
        for (int64_t t = begin; t < end && p->inner == 1; t++) { /* SCAN_LINES lines a task */     \
            int64_t l0 = t * SCAN_LINES,                                                           \
                    nl = p->outer - l0 < SCAN_LINES ? p->outer - l0 : SCAN_LINES;                  \
            int64_t off[SCAN_LINES]; /* past the last line: the last again (the same values) */    \
            for (int l = 0; l < SCAN_LINES; l++) off[l] = (l0 + (l < nl ? l : nl - 1)) * p->n;     \
            bool nan =                                                                             \
                op == OT_OP_ADD                                                                    \
                    ? scan_add_##SUF##_lines(p->swap, p->ftz, p->rev, off, init, x, y, p->n)       \
                : op == OT_OP_MULTIPLY                                                             \
                    ? scan_mul_##SUF##_lines(p->swap, p->ftz, p->rev, off, init, x, y, p->n)       \
                : op == OT_OP_MAXIMUM                                                              \
                    ? scan_maxs_##SUF##_lines(p->swap, p->ftz, p->rev, off, init, x, y, p->n)      \
                    : scan_mins_##SUF##_lines(p->swap, p->ftz, p->rev, off, init, x, y, p->n);     \
            for (int64_t l = 0; nan && l < nl; l++) {                                              \
                T acc = init;                                                                      \
                for (int64_t s = 0; s < p->n; s++) {                                               \
                    int64_t at = off[l] + (p->rev ? p->n - 1 - s : s);                             \
                    acc = p->swap ? scan_op_##SUF(op, x[at], acc, p->ftz)                          \
                                  : scan_op_##SUF(op, acc, x[at], p->ftz);                         \
                    y[at] = acc;                                                                   \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int64_t t = begin; t < end && p->inner > 1; t++) {                                    \
            int64_t o = t / p->nblk, j0 = t % p->nblk * SCAN_BLOCK;                                \
            int64_t j1 = j0 + SCAN_BLOCK < p->inner ? j0 + SCAN_BLOCK : p->inner;                  \
            int64_t back = p->rev ? p->inner : -p->inner; /* the previous row's offset */          \
            for (int64_t s = 0; s < p->n; s++) {                                                   \
                int64_t at = (o * p->n + (p->rev ? p->n - 1 - s : s)) * p->inner;                  \
                const T *prev = s ? y + at + back + j0 : NULL;                                     \
                const T *xr = x + at + j0;                                                         \
                T *yr = y + at + j0;                                                               \
                int64_t w = j1 - j0;                                                               \
                bool nan = op == OT_OP_ADD                                                         \
                               ? scan_add_##SUF##_row(p->swap, p->ftz, prev, init, xr, yr, w)      \
                           : op == OT_OP_MULTIPLY                                                  \
                               ? scan_mul_##SUF##_row(p->swap, p->ftz, prev, init, xr, yr, w)      \
                           : op == OT_OP_MAXIMUM                                                   \
                               ? scan_maxs_##SUF##_row(p->swap, p->ftz, prev, init, xr, yr, w)     \
                               : scan_mins_##SUF##_row(p->swap, p->ftz, prev, init, xr, yr, w);    \
                for (int64_t j = j0; nan && j < j1; j++) {                                         \
                    T pv = s ? y[at + back + j] : init;                                            \
                    y[at + j] = p->swap ? scan_op_##SUF(op, x[at + j], pv, p->ftz)                 \
                                        : scan_op_##SUF(op, pv, x[at + j], p->ftz);                \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

/* The scan's tasks: one outer index and one block of SCAN_BLOCK inner indices, or (inner 1)
 * SCAN_LINES lines; the partition depends on the shape only. */
static int64_t scan_tasks(const scan_plan *p) {
    return p->inner == 1 ? (p->outer + SCAN_LINES - 1) / SCAN_LINES : p->outer * p->nblk;
}

DEFINE_SCAN(float, f32, OT_F32, scan_add_f32, scan_mul_f32, scan_max_f32, scan_min_f32)
DEFINE_SCAN(double, f64, OT_F64, scan_add_f64, scan_mul_f64, scan_max_f64, scan_min_f64)

/* Integer scans (jnp.cumsum of int32 ids or of a mask, cummax of positions), forward and
 * suffix as the float ones: the reference's integer add and multiply wrap (two's complement), and
 * maximum and minimum pick an operand, with no flush or NaN to tell apart. W: the unsigned type
 * the wrap is computed in (uint32_t for the narrow types: their products promote to int, which
 * must not overflow). */
#define ISCAN_F_ADD(T, W, a, b) ((T)((W)(a) + (W)(b)))
#define ISCAN_F_MUL(T, W, a, b) ((T)((W)(a) * (W)(b)))
#define ISCAN_F_MAX(T, W, a, b) ((a) > (b) ? (a) : (b))
#define ISCAN_F_MIN(T, W, a, b) ((a) < (b) ? (a) : (b))
/* Lines of n along the last dim (inner 1), SCAN_LINES of them side by side; or rows of inner
 * elements, each y row = f(the previous y row (init first), x row), which vectorizes. */
#define ISCAN_STEPS(T, W, F)                                                                       \
    if (p->inner == 1) {                                                                           \
        for (int64_t t = begin; t < end; t++) {                                                    \
            int64_t l0 = t * SCAN_LINES,                                                           \
                    nl = p->outer - l0 < SCAN_LINES ? p->outer - l0 : SCAN_LINES;                  \
            T acc[SCAN_LINES];                                                                     \
            for (int l = 0; l < SCAN_LINES; l++) acc[l] = init;                                    \
            for (int64_t s = 0; s < n; s++) {                                                      \
                int64_t k = p->rev ? n - 1 - s : s;                                                \
                for (int l = 0; l < nl; l++) {                                                     \
                    int64_t at = (l0 + l) * n + k;                                                 \
                    acc[l] = F(T, W, acc[l], x[at]);                                               \
                    y[at] = acc[l];                                                                \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    } else {                                                                                       \
        for (int64_t t = begin; t < end; t++) {                                                    \
            int64_t o = t / p->nblk, j0 = t % p->nblk * SCAN_BLOCK;                                \
            int64_t j1 = j0 + SCAN_BLOCK < p->inner ? j0 + SCAN_BLOCK : p->inner;                  \
            for (int64_t s = 0; s < n; s++) {                                                      \
                int64_t k = p->rev ? n - 1 - s : s;                                                \
                int64_t at = (o * n + k) * p->inner;                                               \
                const T *xr = x + at, *pr = y + at + (p->rev ? p->inner : -p->inner);              \
                T *yr = y + at;                                                                    \
                if (s == 0)                                                                        \
                    for (int64_t j = j0; j < j1; j++) yr[j] = F(T, W, init, xr[j]);                \
                else                                                                               \
                    for (int64_t j = j0; j < j1; j++) yr[j] = F(T, W, pr[j], xr[j]);               \
            }                                                                                      \
        }                                                                                          \
    }
#define DEFINE_ISCAN(T, W, SUF)                                                                    \
    static void iscan_##SUF(void *arg, int64_t begin, int64_t end, int ith) {                      \
        (void)ith;                                                                                 \
        const scan_plan *p = arg;                                                                  \
        const T *x = p->x;                                                                         \
        T *y = p->y, init;                                                                         \
        memcpy(&init, p->init, sizeof init);                                                       \
        int64_t n = p->n;                                                                          \
        switch (p->op) {                                                                           \
        case OT_OP_ADD: ISCAN_STEPS(T, W, ISCAN_F_ADD) break;                                      \
        case OT_OP_MULTIPLY: ISCAN_STEPS(T, W, ISCAN_F_MUL) break;                                 \
        case OT_OP_MAXIMUM: ISCAN_STEPS(T, W, ISCAN_F_MAX) break;                                  \
        default: ISCAN_STEPS(T, W, ISCAN_F_MIN) break;                                             \
        }                                                                                          \
    }
DEFINE_ISCAN(int8_t, uint32_t, s8)
DEFINE_ISCAN(int16_t, uint32_t, s16)
DEFINE_ISCAN(int32_t, uint32_t, s32)
DEFINE_ISCAN(int64_t, uint64_t, s64)
DEFINE_ISCAN(uint8_t, uint32_t, u8)
DEFINE_ISCAN(uint16_t, uint32_t, u16)
DEFINE_ISCAN(uint32_t, uint32_t, u32)
DEFINE_ISCAN(uint64_t, uint64_t, u64)

/* The integer scan kernel of dtype t, or NULL. */
static ot_range_fn iscan_fn(ot_dtype t) {
    switch (t) {
    case OT_S8: return iscan_s8;
    case OT_S16: return iscan_s16;
    case OT_S32: return iscan_s32;
    case OT_S64: return iscan_s64;
    case OT_U8: return iscan_u8;
    case OT_U16: return iscan_u16;
    case OT_U32: return iscan_u32;
    case OT_U64: return iscan_u64;
    default: return NULL;
    }
}

/* The scan's dim of window w over input shape is (p->outer/n/inner/rev set), else false. rev: a
 * suffix scan (ex_window_scan_dim, numerics.h). */
static bool scan_form(const ot_window *w, const ot_shape *is, scan_plan *p) {
    int sd = ex_window_scan_dim(w, is, &p->rev);
    if (sd < 0) return false;
    p->outer = p->inner = 1;
    for (int d = 0; d < sd; d++) p->outer *= is->dims[d];
    for (int d = sd + 1; d < is->rank; d++) p->inner *= is->dims[d];
    p->n = is->dims[sd];
    p->nblk = (p->inner + SCAN_BLOCK - 1) / SCAN_BLOCK;
    return true;
}

/* ---- select-and-scatter ------------------------------------------------------------------- */

/* select(current, candidate) of the reference's float compare: operands read through DAZ, a NaN
 * on either side unordered (false). */
#define DEFINE_SS(T, UT, ST, SUF, FZ, ADDF, STMIN, VEC)                                            \
    static inline                                                                                  \
        __attribute__((always_inline)) bool keep_##SUF(const win_plan *p, T cur, T cand, bool z) { \
        T a = FZ(cur, z), b = FZ(cand, z);                                                         \
        T P = p->flip ? b : a, Q = p->flip ? a : b;                                                \
        return p->strict ? P > Q : P >= Q;                                                         \
    }                                                                                              \
    static inline __attribute__((always_inline)) void ss_##SUF##_k(const win_plan *p, int64_t tb,  \
                                                                   int64_t te, bool z) {           \
        const T *x = p->x, *s = p->src;                                                            \
        T *y = p->y, bv[WIN_CHUNK];                                                                \
        int64_t best[WIN_CHUNK];                                                                   \
        ST bk[WIN_CHUNK], bi[WIN_CHUNK];                                                           \
        int64_t L = p->L, wl = p->wsize[p->r - 1];                                                 \
        win_iter it;                                                                               \
        for (int64_t row = tb * p->rpt; row < te * p->rpt; row++) {                                \
            iter_row(p, row, &it);                                                                 \
            for (int64_t j0 = 0; j0 < L; j0 += WIN_CHUNK) {                                        \
                int64_t n = L - j0 < WIN_CHUNK ? L - j0 : WIN_CHUNK;                               \
                bool exact = !p->aff || !(VEC);                                                    \
                if (!exact) {                                                                      \
                    UT nan = 0;                                                                    \
                    for (int64_t j = 0; j < n; j++) {                                              \
                        bk[j] = STMIN;                                                             \
                        bi[j] = -1;                                                                \
                    }                                                                              \
                    for (bool more = iter_first(&it); more; more = iter_next(&it))                 \
                        for (int64_t k = 0, lo, hi; k < wl; k++)                                   \
                            if (aff_range(p, k, j0, n, &lo, &hi)) {                                \
                                int64_t at = it.base + p->koff[k] + lo * p->S;                     \
                                nan |= sel_##SUF(bk + (lo - j0), bi + (lo - j0), x + at, (ST)at,   \
                                                 hi - lo, p->S, z, p->flip, p->strict);            \
                            }                                                                      \
                    if (nan)                                                                       \
                        exact = true;                                                              \
                    else                                                                           \
                        for (int64_t j = 0; j < n; j++) best[j] = bi[j];                           \
                }                                                                                  \
                if (exact) {                                                                       \
                    for (int64_t j = 0; j < n; j++) best[j] = -1;                                  \
                    for (bool more = iter_first(&it); more; more = iter_next(&it)) {               \
                        for (int64_t j = 0; j < n; j++) {                                          \
                            for (int64_t t = 0, ct = last_count(p, j0 + j); t < ct; t++) {         \
                                int64_t lt = last_offset(p, j0 + j, &t);                           \
                                if (lt < 0) break;                                                 \
                                int64_t at = it.base + lt;                                         \
                                T v = x[at];                                                       \
                                if (best[j] < 0 || !keep_##SUF(p, bv[j], v, z)) {                  \
                                    best[j] = at;                                                  \
                                    bv[j] = v;                                                     \
                                }                                                                  \
                            }                                                                      \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
                const T *sr = s + row * L + j0;                                                    \
                for (int64_t j = 0; j < n; j++) {                                                  \
                    int64_t at = best[j];                                                          \
                    if (at >= 0) y[at] = p->swap ? ADDF(sr[j], y[at], z) : ADDF(y[at], sr[j], z);  \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void ss_##SUF(void *arg, int64_t begin, int64_t end, int ith) {                         \
        (void)ith;                                                                                 \
        const win_plan *p = arg;                                                                   \
        if (p->ftz)                                                                                \
            ss_##SUF##_k(p, begin, end, true);                                                     \
        else                                                                                       \
            ss_##SUF##_k(p, begin, end, false);                                                    \
    }

DEFINE_SS(float, uint32_t, int32_t, f32, fz_f, addn_f, INT32_MIN, p->idx32)
DEFINE_SS(double, uint64_t, int64_t, f64, fz_d, addn_d, INT64_MIN, true)

/* Fills y[begin..end) with the init value's bits. */
static void fill_init(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const win_plan *p = arg;
    if (p->f64) {
        double v, *y = p->y;
        memcpy(&v, p->init, 8);
        for (int64_t e = begin; e < end; e++) y[e] = v;
    } else {
        float v, *y = p->y;
        memcpy(&v, p->init, 4);
        for (int64_t e = begin; e < end; e++) y[e] = v;
    }
}

/* ---- plans -------------------------------------------------------------------------------- */

/* f(p0, p1) with f of `ops` (swap false) or f(p1, p0) (swap true) over scalars of dtype t: the
 * root's opcode, else OT_OP_INVALID. */
static ot_opcode binary_of_params(const ot_computation *f, ot_dtype t, bool *swap) {
    if (!f || f->nparams != 2 || !f->root) return OT_OP_INVALID;
    for (int k = 0; k < 2; k++) {
        const ot_ir_shape *s = &f->params[k]->shape;
        if (s->kind != OT_IR_ARRAY || s->array.rank != 0 || s->array.dtype != t)
            return OT_OP_INVALID;
    }
    const ot_instr *r = f->root;
    if (r->noperands != 2 || r->shape.kind != OT_IR_ARRAY || r->shape.array.rank != 0)
        return OT_OP_INVALID;
    if (r->operands[0] == f->params[0] && r->operands[1] == f->params[1])
        *swap = false;
    else if (r->operands[0] == f->params[1] && r->operands[1] == f->params[0])
        *swap = true;
    else
        return OT_OP_INVALID;
    return r->opcode;
}

/* The window tables of p over input shape is (dims of the output/source in p->odims) in scratch;
 * false when the window is not covered (rank) or the tables would be too large. */
static bool plan_tables(ex_kernel_ctx *c, win_plan *p, const ot_window *w, const ot_shape *is,
                        int64_t blk, ot_status *st) {
    *st = OT_OK;
    int r = is->rank - (blk ? 1 : 0); /* blk: the input's last dim joins the one before */
    if (!w || w->rank != is->rank || r < 1) return false;
    /* an affine, unblocked last dim needs no tables (last_offset) */
    bool last_free = !blk && (w->dims[r - 1].base_dilation ? w->dims[r - 1].base_dilation : 1) == 1;
    int64_t total = 0;
    for (int d = 0; d < r; d++) {
        int64_t ws = w->dims[d].size;
        if (ws < 0 || ws > WIN_MAX_TABLE || w->dims[d].stride < 1) return false;
        bool free_d = d == r - 1 && last_free;
        total += (free_d ? 0 : p->odims[d] * (ws + 1)) + (d == r - 1 ? 3 * ws : 0);
        if (total > WIN_MAX_TABLE) return false;
    }
    void *sp = NULL;
    *st = ex_scratch(c, (size_t)(total ? total : 1) * sizeof(int64_t), &sp);
    if (*st != OT_OK) return true;
    int64_t *tab = sp, istr[OT_MAX_RANK];
    ot_shape_strides(is, istr);
    for (int d = 0; d < r; d++) {
        const ot_window_dim *wd = &w->dims[d];
        int64_t ws = wd->size, od = p->odims[d];
        int64_t wdil = wd->window_dilation ? wd->window_dilation : 1;
        int64_t bdil = wd->base_dilation ? wd->base_dilation : 1;
        p->wsize[d] = ws;
        if (d == r - 1 && last_free) {
            p->cnt[d] = p->off[d] = NULL;
            continue;
        }
        int64_t *cnt = tab, *off = tab + od;
        tab += od * (ws + 1);
        int64_t B = blk && d == r - 1 ? blk : 1; /* output o = o' * B + (an element of C) */
        for (int64_t o = 0; o < od; o++) {
            int64_t n = 0;
            for (int64_t k = 0; k < ws; k++) { /* as the reference's window_source */
                int64_t kk = wd->reversal ? ws - 1 - k : k;
                int64_t pos = o / B * wd->stride + kk * wdil - wd->pad_lo;
                if (pos < 0 || pos % bdil) continue;
                pos /= bdil;
                if (pos >= is->dims[d]) continue;
                off[o * ws + n++] = pos * istr[d] + o % B;
            }
            cnt[o] = n;
        }
        p->cnt[d] = cnt;
        p->off[d] = off;
    }
    p->r = r;
    p->L = p->odims[r - 1];
    p->blk = blk;
    p->chunk = blk ? RW_CHUNK / blk * blk : RW_CHUNK;
    /* without base dilation in the last dim, window position k reaches a range of outputs j at
     * input offsets j * stride + koff (the last dim's stride is 1) */
    const ot_window_dim *wl = &w->dims[r - 1];
    int64_t bd = wl->base_dilation ? wl->base_dilation : 1;
    p->aff = bd == 1;
    if (blk && bd <= WIN_MAX_BDIL && wl->size * bd <= WIN_MAX_TABLE) { /* w0's search: q <= bd */
        int64_t ws = wl->size, I = is->dims[r - 1], S = wl->stride, W = p->L / blk;
        int64_t wdil = wl->window_dilation ? wl->window_dilation : 1, g = S, h = bd;
        while (h) { /* g = gcd(S, bd) */
            int64_t m = g % h;
            g = h;
            h = m;
        }
        int64_t q = bd / g, *ja = tab, *jb = tab + ws, *kin = tab + 2 * ws;
        for (int64_t k = 0; k < ws; k++) {
            int64_t kk = wl->reversal ? ws - 1 - k : k;
            int64_t c0 = kk * wdil - wl->pad_lo; /* position w reads dilated index w * S + c0 */
            int64_t w0 = c0 >= 0 ? 0 : (-c0 + S - 1) / S;
            for (int64_t t = 0; t < q && (w0 * S + c0) % bd; t++) w0++;
            int64_t n = 0;
            if ((w0 * S + c0) % bd == 0 && w0 < W) {
                kin[k] = (w0 * S + c0) / bd;
                n = kin[k] >= I ? 0 : (I - 1 - kin[k]) / (S / g) + 1;
                if (n > (W - w0 + q - 1) / q) n = (W - w0 + q - 1) / q;
            }
            ja[k] = n ? w0 : 0;
            jb[k] = n ? w0 + (n - 1) * q + 1 : 0;
            if (!n) kin[k] = 0;
        }
        p->ja = ja;
        p->jb = jb;
        p->kin = kin;
        p->q = q;
        p->Sin = S / g;
        p->aff = true;
    } else if (p->aff) {
        int64_t ws = wl->size, I = is->dims[r - 1], S = wl->stride;
        int64_t wdil = wl->window_dilation ? wl->window_dilation : 1;
        int64_t *ja = tab, *jb = tab + ws, *koff = tab + 2 * ws;
        for (int64_t k = 0; k < ws; k++) {
            int64_t kk = wl->reversal ? ws - 1 - k : k;
            koff[k] = kk * wdil - wl->pad_lo;
            ja[k] = koff[k] >= 0 ? 0 : (-koff[k] + S - 1) / S;
            jb[k] = I - 1 - koff[k] < 0 ? 0 : (I - 1 - koff[k]) / S + 1;
            if (jb[k] > p->L / (blk ? blk : 1)) jb[k] = p->L / (blk ? blk : 1);
            if (ja[k] > jb[k]) ja[k] = jb[k];
        }
        p->ja = ja;
        p->jb = jb;
        p->koff = koff;
        p->S = S;
    }
    return true;
}

ot_status ex_fast_reduce_window(ex_kernel_ctx *c, const ot_instr *i, void *const *in,
                                const ex_leaf *ins, void *out, const ex_leaf *os, bool *done) {
    const ot_shape *is = ins[0].shape, *osh = os->shape;
    ot_dtype t = osh->dtype;
    ot_range_fn ifn = iscan_fn(t);
    if ((t != OT_F32 && t != OT_F64 && !ifn) || is->dtype != t || ins[1].shape->dtype != t ||
        ot_shape_numel_unchecked(ins[1].shape) != 1 || i->ncalled != 1 || osh->rank != is->rank)
        return OT_OK;
    if (ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes)) return OT_OK;
    win_plan p;
    memset(&p, 0, sizeof p);
    ot_opcode op = binary_of_params(i->called[0], t, &p.swap);
    scan_plan sp;
    memset(&sp, 0, sizeof sp);
    bool scan_op =
        op == OT_OP_ADD || op == OT_OP_MULTIPLY || op == OT_OP_MAXIMUM || op == OT_OP_MINIMUM;
    if (ifn) { /* integers: scans only (the windowed kernels below are float) */
        if (!scan_op || i->called[0]->root->shape.array.dtype != t ||
            !scan_form(i->attrs->window, is, &sp))
            return OT_OK;
        *done = true;
        sp.op = op;
        sp.x = in[0];
        sp.init = in[1];
        sp.y = out;
        if (sp.outer * sp.inner > 0)
            ex_par_for(c, scan_tasks(&sp), ins[0].nbytes + os->nbytes, ifn, &sp);
        c->fast_run++;
        return OT_OK;
    }
    if (scan_op && i->called[0]->root->shape.array.dtype == t &&
        scan_form(i->attrs->window, is, &sp)) {
        *done = true;
        sp.op = op;
        sp.ftz = c->ftz;
        sp.swap = p.swap;
        sp.x = in[0];
        sp.init = in[1];
        sp.y = out;
        if (sp.outer * sp.inner > 0)
            ex_par_for(c, scan_tasks(&sp), ins[0].nbytes + os->nbytes,
                       t == OT_F32 ? scan_f32 : scan_f64, &sp);
        c->fast_run++;
        return OT_OK;
    }
    if (op == OT_OP_ADD)
        p.op = WIN_ADD;
    else if (op == OT_OP_MAXIMUM)
        p.op = WIN_MAX;
    else if (op == OT_OP_MINIMUM)
        p.op = WIN_MIN;
    else
        return OT_OK;
    if (i->called[0]->root->shape.array.dtype != t) return OT_OK;
    const ot_window *w = i->attrs->window;
    if (!w || w->rank != is->rank) return OT_OK;
    for (int d = 0; d < osh->rank; d++) p.odims[d] = osh->dims[d];
    int64_t on = ot_shape_numel_unchecked(osh);
    /* A last dim the window does not touch (channels: size 1, stride 1, no padding or dilation)
     * behind a dim of stride 1 without base dilation (an NHWC pooling's W with stride 1, as the
     * average pool's gradient has): the two are one dim of W * C elements whose window steps by
     * C (dilation times C, padding times C). The same elements in the same order for every
     * output, in rows W * C long instead of C: the per-row work is paid 1 / W as often. */
    ot_shape ms = *is;
    ot_window mw = *w;
    int r = is->rank;
    int64_t blk = 0;
    if (r >= 2) {
        const ot_window_dim *lc = &w->dims[r - 1], *lw = &w->dims[r - 2];
        int64_t C = is->dims[r - 1];
        bool chan = lc->size == 1 && lc->stride == 1 && lc->pad_lo == 0 && lc->pad_hi == 0 &&
                    (lc->window_dilation ? lc->window_dilation : 1) == 1 &&
                    (lc->base_dilation ? lc->base_dilation : 1) == 1 && osh->dims[r - 1] == C;
        bool unit = lw->stride == 1 && (lw->base_dilation ? lw->base_dilation : 1) == 1;
        int64_t wdil = lw->window_dilation ? lw->window_dilation : 1;
        if (chan && unit && C > 1 && C <= INT64_MAX / 4 / (is->dims[r - 2] + 1) &&
            (lw->pad_lo < 0 ? -lw->pad_lo : lw->pad_lo) <= INT64_MAX / 4 / C &&
            (lw->pad_hi < 0 ? -lw->pad_hi : lw->pad_hi) <= INT64_MAX / 4 / C &&
            wdil <= INT64_MAX / 4 / C) {
            ms.rank = r - 1;
            ms.dims[r - 2] *= C;
            mw.rank = r - 1;
            mw.dims[r - 2].pad_lo *= C;
            mw.dims[r - 2].pad_hi *= C;
            mw.dims[r - 2].window_dilation = wdil * C;
            p.odims[r - 2] *= C;
        } else if (chan && (lw->stride > 1 || (lw->base_dilation ? lw->base_dilation : 1) > 1) &&
                   C > 1 && C <= RW_CHUNK / 4) {
            /* a stride along W (pools of stride 2) or a base dilation (their gradients: the
             * cotangent dilated by the stride): rows of W * C outputs all the same, each window
             * position reading C contiguous elements per output position w it reaches */
            blk = C;
            p.odims[r - 2] *= C;
        }
    }
    ot_status st;
    if (!plan_tables(c, &p, &mw, &ms, blk, &st)) return OT_OK;
    *done = true;
    if (st != OT_OK) return st;
    p.ftz = c->ftz;
    p.x = in[0];
    p.init = in[1];
    p.init_nan = t == OT_F32 ? isnan(*(const float *)in[1]) : isnan(*(const double *)in[1]);
    p.y = out;
    if (on > 0) {
        int64_t rows = on / p.L;
        ot_range_fn fn = t == OT_F32 ? (p.op == WIN_ADD   ? rw_add_f32
                                        : p.op == WIN_MAX ? rw_max_f32
                                                          : rw_min_f32)
                                     : (p.op == WIN_ADD   ? rw_add_f64
                                        : p.op == WIN_MAX ? rw_max_f64
                                                          : rw_min_f64);
        ex_par_for(c, rows, ins[0].nbytes + os->nbytes, fn, &p);
    }
    c->fast_run++;
    return OT_OK;
}

ot_status ex_fast_select_and_scatter(ex_kernel_ctx *c, const ot_instr *i, void *const *in,
                                     const ex_leaf *ins, void *out, const ex_leaf *os, bool *done) {
    const ot_shape *is = ins[0].shape, *ss = ins[1].shape, *osh = os->shape;
    ot_dtype t = osh->dtype;
    if ((t != OT_F32 && t != OT_F64) || is->dtype != t || ss->dtype != t ||
        ins[2].shape->dtype != t || ot_shape_numel_unchecked(ins[2].shape) != 1 ||
        i->ncalled != 2 || ss->rank != is->rank || !ot_shape_equal(is, osh))
        return OT_OK;
    if (ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes) ||
        ex_overlaps(out, os->nbytes, in[1], ins[1].nbytes))
        return OT_OK;
    win_plan p;
    memset(&p, 0, sizeof p);
    bool sel_swap = false;
    const ot_computation *sel = i->called[0];
    if (binary_of_params(sel, t, &sel_swap) != OT_OP_COMPARE) return OT_OK;
    const ot_instr *cmp = sel->root;
    if (cmp->shape.array.dtype != OT_PRED ||
        ot_cmp_type_resolve(cmp->attrs->cmp_type, t) != OT_CMP_TYPE_FLOAT)
        return OT_OK;
    ot_cmp_dir dir = cmp->attrs->cmp_dir;
    if (dir != OT_CMP_GE && dir != OT_CMP_GT && dir != OT_CMP_LE && dir != OT_CMP_LT) return OT_OK;
    p.strict = dir == OT_CMP_GT || dir == OT_CMP_LT;
    /* LE(a, b) is GE(b, a), LT(a, b) is GT(b, a) (NaN false either way) */
    p.flip = sel_swap != (dir == OT_CMP_LE || dir == OT_CMP_LT);
    const ot_computation *sca = i->called[1];
    if (binary_of_params(sca, t, &p.swap) != OT_OP_ADD || sca->root->shape.array.dtype != t)
        return OT_OK;
    const ot_window *w = i->attrs->window;
    for (int d = 0; d < ss->rank; d++) p.odims[d] = ss->dims[d];
    ot_status st;
    if (!plan_tables(c, &p, w, is, 0, &st)) return OT_OK;
    *done = true;
    if (st != OT_OK) return st;
    p.ftz = c->ftz;
    p.x = in[0];
    p.src = in[1];
    p.init = in[2];
    p.idx32 = ot_shape_numel_unchecked(is) <= INT32_MAX;
    p.y = out;
    int64_t on = ot_shape_numel_unchecked(osh), sn = ot_shape_numel_unchecked(ss);
    p.f64 = t == OT_F64;
    ex_par_for(c, on, os->nbytes, fill_init, &p);
    if (sn > 0) {
        /* tasks: the source's leading outer dims whose windows never overlap */
        int nd = 0;
        for (; nd < p.r - 1; nd++) {
            const ot_window_dim *wd = &w->dims[nd];
            int64_t wdil = wd->window_dilation ? wd->window_dilation : 1;
            if (wd->size > 0 && wd->stride < (wd->size - 1) * wdil + 1) break;
        }
        int64_t ntask = 1, rows = sn / p.L;
        for (int d = 0; d < nd; d++) ntask *= p.odims[d];
        p.rpt = rows / ntask;
        ex_par_for(c, ntask, ins[0].nbytes + ins[1].nbytes + os->nbytes,
                   t == OT_F32 ? ss_f32 : ss_f64, &p);
    }
    c->fast_run++;
    return OT_OK;
}
