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
 * Threads: reduce-window splits the output rows (each output written once). Select-and-scatter's
 * windows may overlap (stride < window), so two source elements can add into one output: the
 * source is split by its leading dims whose windows never overlap (stride >= the dilated window),
 * so tasks write disjoint outputs and each task walks its source elements in the reference's
 * order; with no such dim it runs as one task. The partition depends on the shape only, so the
 * bits never depend on the thread count. */
#include "exec/fast_internal.h"

#define WIN_CHUNK 256                    /* outputs of a row folded together */
#define WIN_MAX_TABLE ((int64_t)1 << 22) /* entries of the per-dim tables (else the reference) */

typedef enum { WIN_ADD, WIN_MAX, WIN_MIN } win_op;

typedef struct win_plan {
    int r;
    bool ftz;
    win_op op;
    bool swap;   /* the computation's operands swapped: f(x, acc), add(source, output) */
    bool strict; /* select: keep = P > Q (else P >= Q) */
    bool flip;   /* select: (P, Q) = (candidate, current) (else (current, candidate)) */
    bool f64;
    int64_t odims[OT_MAX_RANK];      /* reduce-window: output dims; select-and-scatter: source */
    int64_t wsize[OT_MAX_RANK];      /* window size per dim (table row length) */
    const int64_t *cnt[OT_MAX_RANK]; /* [odims[d]]: window elements output coordinate o visits */
    const int64_t *off[OT_MAX_RANK]; /* [odims[d] * wsize[d]]: their input offsets, in order */
    int64_t L;                       /* the last output dim */
    int64_t lin;     /* >= 0: the last dim's window is one element at offset j * lin for every j */
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

/* ---- reduce-window ------------------------------------------------------------------------ */

#define DEFINE_RW(T, SUF, OPF)                                                                     \
    static inline __attribute__((always_inline)) void rw_##SUF##_k(                                \
        const win_plan *p, int64_t begin, int64_t end, bool z, bool sw) {                          \
        const T *x = p->x;                                                                         \
        T *y = p->y, init, acc[WIN_CHUNK];                                                         \
        memcpy(&init, p->init, sizeof init);                                                       \
        int64_t L = p->L, wl = p->wsize[p->r - 1], lin = p->lin;                                   \
        const int64_t *cl = p->cnt[p->r - 1], *ol = p->off[p->r - 1];                              \
        win_iter it;                                                                               \
        for (int64_t row = begin; row < end; row++) {                                              \
            iter_row(p, row, &it);                                                                 \
            for (int64_t j0 = 0; j0 < L; j0 += WIN_CHUNK) {                                        \
                int64_t n = L - j0 < WIN_CHUNK ? L - j0 : WIN_CHUNK;                               \
                for (int64_t j = 0; j < n; j++) acc[j] = init;                                     \
                for (bool more = iter_first(&it); more; more = iter_next(&it)) {                   \
                    if (lin >= 0) {                                                                \
                        const T *xb = x + it.base + j0 * lin;                                      \
                        for (int64_t j = 0; j < n; j++)                                            \
                            acc[j] = sw ? OPF(xb[j * lin], acc[j], z) : OPF(acc[j], xb[j * lin], z); \
                        continue;                                                                  \
                    }                                                                              \
                    for (int64_t j = 0; j < n; j++) {                                              \
                        const int64_t *o = ol + (j0 + j) * wl;                                     \
                        T a = acc[j];                                                              \
                        for (int64_t t = 0, ct = cl[j0 + j]; t < ct; t++) {                        \
                            T v = x[it.base + o[t]];                                               \
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
        if (p->ftz)                                                                                \
            p->swap ? rw_##SUF##_k(p, begin, end, true, true)                                      \
                    : rw_##SUF##_k(p, begin, end, true, false);                                    \
        else                                                                                       \
            p->swap ? rw_##SUF##_k(p, begin, end, false, true)                                     \
                    : rw_##SUF##_k(p, begin, end, false, false);                                   \
    }

DEFINE_RW(float, add_f32, addn_f)
DEFINE_RW(float, max_f32, max_f)
DEFINE_RW(float, min_f32, min_f)
DEFINE_RW(double, add_f64, addn_d)
DEFINE_RW(double, max_f64, max_d)
DEFINE_RW(double, min_f64, min_d)

/* ---- select-and-scatter ------------------------------------------------------------------- */

/* select(current, candidate) of the reference's float compare: operands read through DAZ, a NaN
 * on either side unordered (false). */
#define DEFINE_SS(T, SUF, FZ, ADDF)                                                                \
    static inline __attribute__((always_inline)) bool keep_##SUF(const win_plan *p, T cur, T cand, \
                                                                 bool z) {                         \
        T a = FZ(cur, z), b = FZ(cand, z);                                                         \
        T P = p->flip ? b : a, Q = p->flip ? a : b;                                                \
        return p->strict ? P > Q : P >= Q;                                                         \
    }                                                                                              \
    static inline __attribute__((always_inline)) void ss_##SUF##_k(const win_plan *p, int64_t tb,  \
                                                                   int64_t te, bool z) {           \
        const T *x = p->x, *s = p->src;                                                            \
        T *y = p->y, bv[WIN_CHUNK];                                                                \
        int64_t best[WIN_CHUNK];                                                                   \
        int64_t L = p->L, wl = p->wsize[p->r - 1], lin = p->lin;                                   \
        const int64_t *cl = p->cnt[p->r - 1], *ol = p->off[p->r - 1];                              \
        win_iter it;                                                                               \
        for (int64_t row = tb * p->rpt; row < te * p->rpt; row++) {                                \
            iter_row(p, row, &it);                                                                 \
            for (int64_t j0 = 0; j0 < L; j0 += WIN_CHUNK) {                                        \
                int64_t n = L - j0 < WIN_CHUNK ? L - j0 : WIN_CHUNK;                               \
                for (int64_t j = 0; j < n; j++) best[j] = -1;                                      \
                for (bool more = iter_first(&it); more; more = iter_next(&it)) {                   \
                    for (int64_t j = 0; j < n; j++) {                                              \
                        const int64_t *o = lin >= 0 ? NULL : ol + (j0 + j) * wl;                   \
                        int64_t ct = lin >= 0 ? 1 : cl[j0 + j];                                    \
                        for (int64_t t = 0; t < ct; t++) {                                         \
                            int64_t at = it.base + (lin >= 0 ? (j0 + j) * lin : o[t]);             \
                            T v = x[at];                                                           \
                            if (best[j] < 0 || !keep_##SUF(p, bv[j], v, z)) {                      \
                                best[j] = at;                                                      \
                                bv[j] = v;                                                         \
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

DEFINE_SS(float, f32, fz_f, addn_f)
DEFINE_SS(double, f64, fz_d, addn_d)

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
                        ot_status *st) {
    *st = OT_OK;
    int r = is->rank;
    if (!w || w->rank != r || r < 1) return false;
    int64_t total = 0;
    for (int d = 0; d < r; d++) {
        int64_t ws = w->dims[d].size;
        if (ws < 0 || ws > WIN_MAX_TABLE || w->dims[d].stride < 1) return false;
        total += p->odims[d] * (ws + 1);
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
        int64_t *cnt = tab, *off = tab + od;
        tab += od * (ws + 1);
        for (int64_t o = 0; o < od; o++) {
            int64_t n = 0;
            for (int64_t k = 0; k < ws; k++) { /* as the reference's window_source */
                int64_t kk = wd->reversal ? ws - 1 - k : k;
                int64_t pos = o * wd->stride + kk * wdil - wd->pad_lo;
                if (pos < 0 || pos % bdil) continue;
                pos /= bdil;
                if (pos >= is->dims[d]) continue;
                off[o * ws + n++] = pos * istr[d];
            }
            cnt[o] = n;
        }
        p->cnt[d] = cnt;
        p->off[d] = off;
        p->wsize[d] = ws;
    }
    p->r = r;
    p->L = p->odims[r - 1];
    /* the last dim's window one element at j * lin for every output j (NHWC channels: lin 1) */
    const int64_t *cl = p->cnt[r - 1], *ol = p->off[r - 1];
    p->lin = p->wsize[r - 1] == 1 && p->L > 0 && cl[0] == 1 && ol[0] == 0 ? 0 : -1;
    if (p->lin == 0 && p->L > 1) p->lin = cl[1] == 1 ? ol[1] : -1;
    for (int64_t j = 0; p->lin >= 0 && j < p->L; j++)
        if (cl[j] != 1 || ol[j] != j * p->lin) p->lin = -1;
    return true;
}

ot_status ex_fast_reduce_window(ex_kernel_ctx *c, const ot_instr *i, void *const *in,
                                const ex_leaf *ins, void *out, const ex_leaf *os, bool *done) {
    const ot_shape *is = ins[0].shape, *osh = os->shape;
    ot_dtype t = osh->dtype;
    if ((t != OT_F32 && t != OT_F64) || is->dtype != t || ins[1].shape->dtype != t ||
        ot_shape_numel_unchecked(ins[1].shape) != 1 || i->ncalled != 1 || osh->rank != is->rank)
        return OT_OK;
    if (ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes)) return OT_OK;
    win_plan p;
    memset(&p, 0, sizeof p);
    ot_opcode op = binary_of_params(i->called[0], t, &p.swap);
    if (op == OT_OP_ADD)
        p.op = WIN_ADD;
    else if (op == OT_OP_MAXIMUM)
        p.op = WIN_MAX;
    else if (op == OT_OP_MINIMUM)
        p.op = WIN_MIN;
    else
        return OT_OK;
    if (i->called[0]->root->shape.array.dtype != t) return OT_OK;
    for (int d = 0; d < osh->rank; d++) p.odims[d] = osh->dims[d];
    int64_t on = ot_shape_numel_unchecked(osh);
    ot_status st;
    if (!plan_tables(c, &p, i->attrs->window, is, &st)) return OT_OK;
    *done = true;
    if (st != OT_OK) return st;
    p.ftz = c->ftz;
    p.x = in[0];
    p.init = in[1];
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
                                     const ex_leaf *ins, void *out, const ex_leaf *os,
                                     bool *done) {
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
    if (!plan_tables(c, &p, w, is, &st)) return OT_OK;
    *done = true;
    if (st != OT_OK) return st;
    p.ftz = c->ftz;
    p.x = in[0];
    p.src = in[1];
    p.init = in[2];
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
