/* The fast scatter (kernels.h): the reference's scatter (src/exec/shape_ops.c) for one operand
 * whose update computation is exactly add, maximum or minimum of its two parameters (f32, f64 and
 * the integer types: `.at[].add`, embedding gradients, `.at[].max`, `.at[].min`,
 * segment_max/min) or returns its second parameter (a plain overwrite: `.at[].set`), the
 * updates' window dims their trailing dims and no batching dims. s32/s64 indices,
 * index_vector_dim anywhere.
 *
 * The reference applies the update elements in row-major order of the updates; with trailing
 * window dims that is scatter position b after b, each position's window in order. Two elements
 * of one window never meet in the operand, so the updates of any one operand element come in
 * order of b. The kernel computes each position's window start once (-1 when the window does not
 * fit: the reference skips it; positions in chunks over the pool), then for b in order adds (or
 * copies) the window's contiguous runs row by row; each element gets the reference's scalar add
 * (add_f/add_d with its FTZ and NaN rules, operands in the computation's order; max_f/min_f and
 * their f64 twins, the reference's maximum/minimum with DAZ inputs, quieted NaNs and -0 < +0; the
 * integers' own order) in the same order.
 * Under FTZ a float row without a NaN is added with plain (vector) adds in the CPU's FTZ/DAZ mode
 * (ex_hw_ftz_on), which flushes exactly as add_f/add_d do. The threads split the columns of the
 * runs (a fixed partition of each run's elements), each walking every b in order, so every element
 * sees the same sequence of adds whatever the thread count. The operand is copied into the output
 * first unless the output is the operand's memory (in place). */
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
    bool hw;             /* float adds under FTZ in the CPU's FTZ/DAZ mode (ex_hw_ftz_on) */
    const int64_t *base; /* per scatter position: the window's operand offset, -1 skipped */
    const int64_t *roff; /* per run of a window: its operand offset from the window's start */
    int64_t nb, nr, len; /* positions, runs per window, elements per run */
    int64_t chunk;       /* the columns one unit of the partition covers */
    char *y;
    const char *u, *uend; /* the updates, and their end */
} sc_job;

/* dst[j] = op(dst[j], src[j]) for j < n, in the reference's arithmetic (inlined into each clone
 * of its callers). */
static inline __attribute__((always_inline)) void run_row(const sc_job *p, void *dst,
                                                          const void *src, int64_t n) {
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
        bool s_ = p->kind == SC_MAX_SWAPPED || p->kind == SC_MIN_SWAPPED;                          \
        switch (p->t) {                                                                            \
        case OT_F32: ROW_LOOP(float, s_ ? FN##_f(w[j], o[j], z) : FN##_f(o[j], w[j], z)); return;  \
        case OT_F64: ROW_LOOP(double, s_ ? FN##_d(w[j], o[j], z) : FN##_d(o[j], w[j], z)); return; \
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
    switch (p->kind) {
    case SC_SET: memcpy(dst, src, (size_t)n * p->es); return;
    case SC_MAX:
    case SC_MAX_SWAPPED: PICK_ROW(max, >);
    case SC_MIN:
    case SC_MIN_SWAPPED: PICK_ROW(min, <);
    case SC_ADD:
    case SC_ADD_SWAPPED: break;
    }
#undef PICK_ROW
    bool sw = p->kind == SC_ADD_SWAPPED;
    /* Which NaN a sum of two NaNs returns is the reference's compiled add's choice (x86 keeps
     * one operand's payload); a row of updates holding a NaN therefore takes the reference's own
     * ex_binary for each element where both operands are NaN. */
#define FLOAT_ROW(T, ADD)                                                                          \
    do {                                                                                           \
        const T *u_ = src;                                                                         \
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
                ex_binary(OT_OP_ADD, p->t, &a, &b, &y_[j], 1);                                     \
            else                                                                                   \
                y_[j] = ADD(a, b, z);                                                              \
        }                                                                                          \
        return;                                                                                    \
    } while (0)
    switch (p->t) {
    case OT_F32: FLOAT_ROW(float, add_f);
    case OT_F64: FLOAT_ROW(double, add_d);
    default: break;
    }
    /* integers wrap (the reference adds as unsigned 64-bit and truncates); the order of the
     * operands does not matter */
    switch (p->es) {
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

/* The updates are read once, in order, in runs of a few lines: the lines SC_AHEAD bytes further
 * on are requested before each run (a short run's stream otherwise waits on memory latency). */
#define SC_AHEAD 2048
static inline void prefetch_ahead(const char *src, size_t nbytes, const char *end) {
    size_t left = (size_t)(end - src);
    for (size_t o = SC_AHEAD; o < SC_AHEAD + nbytes && o < left; o += 64)
        __builtin_prefetch(src + o);
}

/* Columns [begin * chunk, end * chunk) of every run, for every scatter position in order. */
SC_CLONES static void run_cols(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const sc_job *p = arg;
    int64_t c0 = begin * p->chunk, c1 = end * p->chunk;
    if (c1 > p->len) c1 = p->len;
    if (c0 >= c1) return;
    size_t es = p->es;
    unsigned csr = p->hw ? ex_hw_ftz_on() : 0;
    if (p->len == 1 && p->nr == 1) { /* one element per position (segment ops, bincount) */
        const int64_t *base = p->base;
        for (int64_t b = 0; b < p->nb; b++) {
            if ((b & 15) == 0) __builtin_prefetch(base + b + 64);
            if (base[b] >= 0) run_row(p, p->y + (size_t)base[b] * es, p->u + (size_t)b * es, 1);
        }
        if (p->hw) ex_hw_ftz_off(csr);
        return;
    }
    for (int64_t b = 0; b < p->nb; b++) {
        if (p->base[b] < 0) continue;
        for (int64_t r = 0; r < p->nr; r++) {
            char *dst = p->y + (size_t)(p->base[b] + p->roff[r] + c0) * es;
            const char *src = p->u + (size_t)((b * p->nr + r) * p->len + c0) * es;
            prefetch_ahead(src, (size_t)(c1 - c0) * es, p->uend);
            run_row(p, dst, src, c1 - c0);
        }
    }
    if (p->hw) ex_hw_ftz_off(csr);
}

/* The window start of every scatter position (base[b], -1 when the window does not fit: the
 * reference skips it), positions in chunks of SC_BASE_CHUNK over the pool (each independent). */
#define SC_BASE_CHUNK 4096
typedef struct sc_base {
    const ot_scatter_dims *sd;
    const ot_shape *xs, *us, *ks;
    const void *idx;
    const int *kd; /* the indices' dims but index_vector_dim, in order */
    int nbd;       /* the updates' scatter dims */
    const int64_t *wsize, *xstr, *kstr;
    int64_t ivs; /* the index vector's stride */
    int64_t nb;  /* positions */
    int64_t *base;
    /* one index per position, position b's at element b (the index vector has one element):
     * start = idx[b] along operand dim d1 (stride str1), valid in [0, lim1]; fits1 false when
     * the window does not fit along another dim (every window skipped) */
    bool one;
    bool fits1;
    int64_t lim1, str1;
} sc_base;

static void run_base(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const sc_base *p = arg;
    const ot_scatter_dims *sd = p->sd;
    int64_t b0 = begin * SC_BASE_CHUNK, xr = p->xs->rank;
    int64_t b1 = end * SC_BASE_CHUNK < p->nb ? end * SC_BASE_CHUNK : p->nb;
    bool s32 = p->ks->dtype == OT_S32;
    if (p->one) { /* segment ids, embedding rows: no odometer, one compare per position */
        int64_t lim = p->fits1 ? p->lim1 : -1, str = p->str1;
        const int32_t *i32 = p->idx;
        const int64_t *i64 = p->idx;
        for (int64_t b = b0; b < b1; b++) {
            int64_t v = s32 ? i32[b] : i64[b];
            p->base[b] = v >= 0 && v <= lim ? v * str : -1;
        }
        return;
    }
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
    if (!sd || i->noperands != 3 || sd->nbatching != 0) return OT_OK;
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
    /* window size per operand dim: the update window dims' sizes in order, 1 for inserted dims */
    int64_t wsize[OT_MAX_RANK];
    int w = 0;
    for (int d = 0; d < xr; d++) {
        bool ins_d = false;
        for (int k = 0; k < sd->ninserted; k++) ins_d |= sd->inserted_window_dims[k] == d;
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
    /* partition units of 64 bytes of a run, so threads do not share cache lines of a row */
    int64_t chunk = 64 / (int64_t)es, units = (len + chunk - 1) / chunk;
    int64_t work = NB * W * (int64_t)es * 3;
    *done = true;
    c->fast_run++;
    if (out != in[0] && os->nbytes) {
        sc_copy cp = {out, in[0], os->nbytes};
        ex_par_for(c, (os->nbytes + 0xffff) >> 16, os->nbytes * 2, copy_part, &cp);
    }
    if (NB == 0 || W == 0) return OT_OK;

    int64_t *base = NULL;
    OT_CHECK(ex_scratch(c, (size_t)(NB + NR) * sizeof *base, (void **)&base));
    int64_t *roff = base + NB;
    /* run r's offset: the window dims outside the merged run, row-major */
    int64_t idx[OT_MAX_RANK] = {0};
    for (int64_t r = 0; r < NR; r++) {
        int64_t off = 0;
        for (int d = 0; d < od; d++) off += idx[d] * xstr[d];
        roff[r] = off;
        for (int d = od - 1; d >= 0 && ++idx[d] == wsize[d]; d--) idx[d] = 0;
    }
    sc_base sb = {
        sd, xs,   us,    ks,   in[1], kd, nbd, wsize, xstr, kstr, ivd < ks->rank ? kstr[ivd] : 0,
        NB, base, false, true, 0,     0};
    if (sd->nscatter_to_operand == 1 && (ivd >= ks->rank || ks->dims[ivd] == 1)) {
        int d1 = (int)sd->scatter_dims_to_operand_dims[0];
        sb.one = true;
        for (int d = 0; d < xr; d++) sb.fits1 = sb.fits1 && xs->dims[d] >= wsize[d];
        sb.lim1 = xs->dims[d1] - wsize[d1];
        sb.str1 = sb.xstr[d1];
    }
    ex_par_for(c, (NB + SC_BASE_CHUNK - 1) / SC_BASE_CHUNK, NB * 16, run_base, &sb);
    bool hw = EX_HW_FTZ && c->ftz && (kind == SC_ADD || kind == SC_ADD_SWAPPED) &&
              (t == OT_F32 || t == OT_F64);
    sc_job p = {(sc_kind)kind,
                t,
                es,
                c->ftz,
                hw,
                base,
                roff,
                NB,
                NR,
                len,
                chunk,
                out,
                in[2],
                (const char *)in[2] + (size_t)(NB * W) * es};
    ex_par_for(c, units, work, run_cols, &p);
    return OT_OK;
}
