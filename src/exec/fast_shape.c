/* The fast data-movement kernels (kernels.h): slice, dynamic-slice, dynamic-update-slice,
 * concatenate, pad, broadcast and reverse as copies of boxes. Each op is one or more boxes — a
 * rectangular set of elements read at src + sum(idx[d] * ss[d]) and written at dst + sum(idx[d] *
 * ds[d]) — whose dims are merged where both sides are contiguous across them, so the innermost
 * run is as long as the layout allows: one memcpy per run where both strides are 1, a fill where
 * the source stride is 0 (a broadcast along the last dims), an element loop otherwise (a strided
 * slice, a reversed last dim, a pad's interior). Runs (split when long) are spread over the pool.
 * The bytes are the reference kernel's (src/exec/shape_ops.c): every output element is a copy of
 * the same operand element or of the padding value. Outputs must not overlap inputs, except a
 * dynamic-update-slice's output that is exactly its operand's memory (updated in place). */
#include "exec/fast_internal.h"

/* A run longer than this many bytes is split into pieces of it (so one long run still spreads
 * over the pool). */
#define SH_PIECE ((int64_t)1 << 15)

typedef struct sh_box {
    size_t es;
    int r;                   /* >= 1 */
    int64_t d[OT_MAX_RANK];  /* dims */
    int64_t ss[OT_MAX_RANK]; /* source strides in elements (0: broadcast; negative: reversed) */
    int64_t ds[OT_MAX_RANK]; /* destination strides in elements */
    const char *src;         /* the box's first element */
    char *dst;
    int64_t npiece; /* pieces per innermost run */
    int64_t plen;   /* elements per piece (the last may be shorter) */
} sh_box;

/* Drops unit dims and merges dim d into d + 1 where both strides continue across them. */
static void box_normalize(sh_box *b) {
    int r = 0;
    for (int d = 0; d < b->r; d++) {
        if (b->d[d] == 1) continue;
        b->d[r] = b->d[d];
        b->ss[r] = b->ss[d];
        b->ds[r] = b->ds[d];
        r++;
    }
    if (r == 0) {
        b->d[0] = 1;
        b->ss[0] = b->ds[0] = 1;
        r = 1;
    }
    int m = 0;
    for (int d = 1; d < r; d++) {
        if (b->ss[m] == b->ss[d] * b->d[d] && b->ds[m] == b->ds[d] * b->d[d]) {
            b->d[m] *= b->d[d];
            b->ss[m] = b->ss[d];
            b->ds[m] = b->ds[d];
        } else {
            m++;
            b->d[m] = b->d[d];
            b->ss[m] = b->ss[d];
            b->ds[m] = b->ds[d];
        }
    }
    b->r = m + 1;
    int64_t run = b->d[b->r - 1];
    int64_t per = SH_PIECE / (int64_t)b->es;
    b->npiece = run > per ? (run + per - 1) / per : 1;
    b->plen = b->npiece > 1 ? per : run;
}

/* n elements from s (stride ss) to d (stride ds). */
typedef struct {
    uint64_t lo, hi;
} sh_u128;

static void copy_run(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, size_t es) {
    if (ss == 1 && ds == 1) {
        memcpy(d, s, (size_t)n * es);
        return;
    }
    switch (es) {
#define SH_RUN(UT)                                                                                 \
    {                                                                                              \
        UT *restrict y = (UT *)(void *)d;                                                          \
        const UT *restrict x = (const UT *)(const void *)s;                                        \
        if (ss == 0 && ds == 1) {                                                                  \
            UT v = x[0];                                                                           \
            for (int64_t k = 0; k < n; k++) y[k] = v;                                              \
        } else {                                                                                   \
            for (int64_t k = 0; k < n; k++) y[k * ds] = x[k * ss];                                 \
        }                                                                                          \
        break;                                                                                     \
    }
    case 1: SH_RUN(uint8_t)
    case 2: SH_RUN(uint16_t)
    case 4: SH_RUN(uint32_t)
    case 8: SH_RUN(uint64_t)
    default: SH_RUN(sh_u128) /* c128 */
#undef SH_RUN
    }
}

/* Work items [begin, end): item q is piece q % npiece of innermost run q / npiece. */
static void box_range(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const sh_box *b = arg;
    int r = b->r;
    int64_t run = b->d[r - 1], es = (int64_t)b->es;
    int64_t idx[OT_MAX_RANK] = {0};
    int64_t q = begin / b->npiece, piece = begin % b->npiece;
    for (int d = r - 2; d >= 0; d--) {
        idx[d] = q % b->d[d];
        q /= b->d[d];
    }
    int64_t so = 0, dof = 0;
    for (int d = 0; d < r - 1; d++) {
        so += idx[d] * b->ss[d];
        dof += idx[d] * b->ds[d];
    }
    for (int64_t it = begin; it < end; it++) {
        int64_t k0 = piece * b->plen;
        int64_t n = run - k0 < b->plen ? run - k0 : b->plen;
        copy_run(b->dst + (dof + k0 * b->ds[r - 1]) * es, b->ds[r - 1],
                 b->src + (so + k0 * b->ss[r - 1]) * es, b->ss[r - 1], n, b->es);
        if (++piece < b->npiece) continue;
        piece = 0;
        /* the next run: advance the outer index, keeping the offsets incrementally */
        for (int d = r - 2; d >= 0; d--) {
            so += b->ss[d];
            dof += b->ds[d];
            if (++idx[d] < b->d[d]) break;
            so -= idx[d] * b->ss[d];
            dof -= idx[d] * b->ds[d];
            idx[d] = 0;
        }
    }
}

static void box_run(ex_kernel_ctx *c, sh_box *b) {
    box_normalize(b);
    int64_t items = b->npiece, n = 1;
    for (int d = 0; d < b->r; d++) n *= b->d[d];
    if (n == 0) return;
    for (int d = 0; d < b->r - 1; d++) items *= b->d[d];
    ex_par_for(c, items, 2 * n * (int64_t)b->es, box_range, b);
}

static void box_init(sh_box *b, size_t es, const ot_shape *dims, const char *src, char *dst) {
    memset(b, 0, sizeof *b);
    b->es = es;
    b->r = dims->rank;
    for (int d = 0; d < dims->rank; d++) b->d[d] = dims->dims[d];
    b->src = src;
    b->dst = dst;
}

/* A whole array copied (contiguous on both sides), split over the pool. */
static void copy_all(ex_kernel_ctx *c, size_t es, int64_t n, const void *src, void *dst) {
    sh_box b;
    memset(&b, 0, sizeof b);
    b.es = es;
    b.r = 1;
    b.d[0] = n;
    b.ss[0] = b.ds[0] = 1;
    b.src = src;
    b.dst = dst;
    box_run(c, &b);
}

/* The scalar start index in leaf k (the reference's index_value: a u64 above INT64_MAX clamps to
 * the top). */
static int64_t start_index(const ex_leaf *ins, void *const *in, int k) {
    ot_dtype t = ins[k].shape->dtype;
    int64_t v = ex_ld_i(t, in[k], 0);
    return t == OT_U64 && v < 0 ? INT64_MAX : v;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

static bool index_leaf(const ex_leaf *l) {
    return l->shape->rank == 0 && ot_dtype_is_integer(l->shape->dtype);
}

/* Floor division for a positive divisor. */
static int64_t floor_div(int64_t a, int64_t b) {
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

ot_status ex_fast_shape(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                        const ex_leaf *ins, void *out, const ex_leaf *os, bool *done) {
    const ot_shape *ys = os->shape;
    size_t es = ot_dtype_size(ys->dtype);
    int r = ys->rank;
    const ot_attrs *a = i->attrs;
    if (nin < 1 || es == 0 || !a) return OT_OK;
    if (os->nbytes == 0) { /* nothing to write */
        *done = true;
        c->fast_run++;
        return OT_OK;
    }
    /* every input must be of the output's dtype (the scalar indices aside) and apart from it */
    bool dus = i->opcode == OT_OP_DYNAMIC_UPDATE_SLICE;
    for (int k = 0; k < nin; k++) {
        bool idx = (i->opcode == OT_OP_DYNAMIC_SLICE && k >= 1) || (dus && k >= 2);
        if (idx) {
            if (!index_leaf(&ins[k])) return OT_OK;
            continue;
        }
        if (ins[k].shape->dtype != ys->dtype) return OT_OK;
        if (dus && k == 0 && in[0] == out && ins[0].nbytes == os->nbytes) continue;
        if (ex_overlaps(in[k], ins[k].nbytes, out, os->nbytes)) return OT_OK;
    }
    const ot_shape *xs = ins[0].shape;
    int64_t istr[OT_MAX_RANK], ostr[OT_MAX_RANK];
    ot_shape_strides(xs, istr);
    ot_shape_strides(ys, ostr);
    const char *x = in[0];
    char *y = out;
    sh_box b;
    switch (i->opcode) {
    case OT_OP_SLICE: {
        if (!a->slice || xs->rank != r) return OT_OK;
        int64_t off = 0;
        box_init(&b, es, ys, NULL, y);
        for (int d = 0; d < r; d++) {
            off += a->slice[d].start * istr[d];
            b.ss[d] = istr[d] * a->slice[d].stride;
            b.ds[d] = ostr[d];
        }
        b.src = x + off * (int64_t)es;
        box_run(c, &b);
        break;
    }
    case OT_OP_DYNAMIC_SLICE: {
        if (xs->rank != r || nin != 1 + r) return OT_OK;
        int64_t off = 0;
        box_init(&b, es, ys, NULL, y);
        for (int d = 0; d < r; d++) {
            off += clamp64(start_index(ins, in, 1 + d), 0, xs->dims[d] - ys->dims[d]) * istr[d];
            b.ss[d] = istr[d];
            b.ds[d] = ostr[d];
        }
        b.src = x + off * (int64_t)es;
        box_run(c, &b);
        break;
    }
    case OT_OP_DYNAMIC_UPDATE_SLICE: {
        const ot_shape *us = ins[1].shape;
        if (xs->rank != r || us->rank != r || nin != 2 + r) return OT_OK;
        if (in[0] != out) copy_all(c, es, ot_shape_numel_unchecked(ys), x, y);
        int64_t ustr[OT_MAX_RANK], off = 0;
        ot_shape_strides(us, ustr);
        box_init(&b, es, us, in[1], NULL);
        for (int d = 0; d < r; d++) {
            off += clamp64(start_index(ins, in, 2 + d), 0, xs->dims[d] - us->dims[d]) * ostr[d];
            b.ss[d] = ustr[d];
            b.ds[d] = ostr[d];
        }
        b.dst = y + off * (int64_t)es;
        box_run(c, &b);
        break;
    }
    case OT_OP_CONCATENATE: {
        int64_t cd = a->index, at = 0;
        if (cd < 0 || cd >= r) return OT_OK;
        for (int k = 0; k < nin; k++)
            if (ins[k].shape->rank != r) return OT_OK;
        for (int k = 0; k < nin; k++) {
            const ot_shape *ks = ins[k].shape;
            int64_t kstr[OT_MAX_RANK];
            ot_shape_strides(ks, kstr);
            box_init(&b, es, ks, in[k], y + at * ostr[cd] * (int64_t)es);
            for (int d = 0; d < r; d++) {
                b.ss[d] = kstr[d];
                b.ds[d] = ostr[d];
            }
            box_run(c, &b);
            at += ks->dims[cd];
        }
        break;
    }
    case OT_OP_PAD: {
        if (!a->padding || xs->rank != r || nin != 2 || ins[1].shape->rank != 0) return OT_OK;
        /* the padding value everywhere, then the operand elements that land inside: operand
         * index k goes to lo + k * (interior + 1) */
        sh_box f;
        memset(&f, 0, sizeof f);
        f.es = es;
        f.r = 1;
        f.d[0] = ot_shape_numel_unchecked(ys);
        f.ss[0] = 0;
        f.ds[0] = 1;
        f.src = in[1];
        f.dst = y;
        box_run(c, &f);
        int64_t soff = 0, doff = 0;
        bool empty = false;
        box_init(&b, es, xs, NULL, NULL);
        for (int d = 0; d < r && !empty; d++) {
            int64_t lo = a->padding[d].lo, step = a->padding[d].interior + 1;
            if (step < 1) return OT_OK; /* not a valid pad (the reference reports it) */
            int64_t k0 = lo >= 0 ? 0 : (-lo + step - 1) / step;
            int64_t k1 = xs->dims[d] - 1, top = floor_div(ys->dims[d] - 1 - lo, step);
            if (top < k1) k1 = top;
            if (k1 < k0) {
                empty = true;
                break;
            }
            b.d[d] = k1 - k0 + 1;
            soff += k0 * istr[d];
            doff += (lo + k0 * step) * ostr[d];
            b.ss[d] = istr[d];
            b.ds[d] = ostr[d] * step;
        }
        if (empty) break;
        b.src = x + soff * (int64_t)es;
        b.dst = y + doff * (int64_t)es;
        box_run(c, &b);
        break;
    }
    case OT_OP_BROADCAST: {
        if (nin != 1 || a->ndims != xs->rank) return OT_OK;
        box_init(&b, es, ys, x, y);
        for (int d = 0; d < r; d++) {
            b.ss[d] = 0;
            b.ds[d] = ostr[d];
        }
        for (int k = 0; k < a->ndims; k++) {
            if (a->dims[k] < 0 || a->dims[k] >= r) return OT_OK;
            b.ss[a->dims[k]] = istr[k];
        }
        box_run(c, &b);
        break;
    }
    case OT_OP_REVERSE: {
        if (nin != 1 || xs->rank != r) return OT_OK;
        bool rev[OT_MAX_RANK] = {false};
        for (int k = 0; k < a->ndims; k++) {
            if (a->dims[k] < 0 || a->dims[k] >= r) return OT_OK;
            rev[a->dims[k]] = true;
        }
        int64_t off = 0;
        box_init(&b, es, ys, NULL, y);
        for (int d = 0; d < r; d++) {
            b.ss[d] = rev[d] ? -istr[d] : istr[d];
            b.ds[d] = ostr[d];
            if (rev[d]) off += (ys->dims[d] - 1) * istr[d];
        }
        b.src = x + off * (int64_t)es;
        box_run(c, &b);
        break;
    }
    default: return OT_OK;
    }
    *done = true;
    c->fast_run++;
    return OT_OK;
}
