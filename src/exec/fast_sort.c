/* The fast sort (kernels.h): a sort (jnp.sort, jnp.argsort, lax.sort_key_val, lax.sort of
 * several arrays with num_keys=1) whose comparator orders the elements by a key of the first
 * operand, as JAX writes them:
 *  - compare(a, b), direction LT or GT, of the two parameters (integers: SIGNED or UNSIGNED;
 *    floats: TOTALORDER), or
 *  - the same compare of JAX's canonical floats, select(ne(p, p), NAN, select(eq(p, Z), Z, p))
 *    for each parameter p (NaNs become one NaN and both zeros one zero), with TOTALORDER.
 * The comparator's other parameters (the other operands' elements) are unused: the other
 * operands are permuted as the first. Any other comparator (FLOAT compares, lexicographic keys
 * over several operands) stays with the reference.
 *
 * Bit-identical to the reference (reduce.c), a stable merge sort that calls the comparator: the
 * comparator is a strict weak order on the keys, so every stable sort gives the same permutation,
 * and this one sorts (key, position) pairs by the integer keys with a stable sort (a merge sort
 * of short rows, an LSD radix sort of long ones). The canonical form's compares (ne, eq) are the
 * reference's own ex_compare on the row, so NaN and DAZ rules are its own; the keys of TOTALORDER
 * are the reference's total_order_key (sign-extended bits, negatives with the magnitude bits
 * flipped). The sorted values are the operands' own bits (a -0 and a +0 of equal keys keep their
 * order).
 *
 * (ex_compare runs with the thread's denormal mode set to the run's.)
 *
 * Threads: the rows (every index but the sorted dim) are split over the pool, each sorted by
 * one task, so the result does not depend on the thread count. */
#include "exec/fast_internal.h"

#define OT_MAX_SORT_OPERANDS 16 /* more operands: the reference */

typedef struct sort_key {
    int64_t key, pos;
} sort_key;

typedef struct sort_plan {
    ot_dtype t;
    int64_t outer, m, inner;      /* the operand as [outer, m, inner], sorted along m */
    bool canon;                   /* keys of the canonical form (floats) */
    bool desc;                    /* GT: the larger key first */
    bool uns;                     /* UNSIGNED: the bits as an unsigned number */
    bool ftz;                     /* the run's denormal mode (the compares' DAZ) */
    uint64_t nan_bits, zero_bits; /* canon: the NaN and the zero it substitutes */
    const ot_instr *ne, *eq;      /* canon: its compares (their directions and types) */
    const void *x;
    void *y;
    int nmore; /* the other operands, permuted as the first */
    const void *const *xm;
    void *const *ym;
    const size_t *esm; /* their element sizes */
    ot_status st;
} sort_plan;

/* The element's bits, sign-extended from its width (as total_order_key and the SIGNED compare
 * read them). */
static inline int64_t ld_signed(size_t es, const void *p, int64_t i) {
    uint64_t u = ex_ld_bits(es, p, i);
    int w = (int)es * 8;
    return w == 64 ? (int64_t)u : (int64_t)(u << (64 - w)) >> (64 - w);
}

/* A constant scalar's bits, or false. */
static bool const_bits(const ot_instr *c, ot_dtype t, uint64_t *bits) {
    if (!c || c->opcode != OT_OP_CONSTANT || c->shape.kind != OT_IR_ARRAY ||
        c->shape.array.rank != 0 || c->shape.array.dtype != t || !c->attrs || !c->attrs->literal ||
        c->attrs->literal->elided || !c->attrs->literal->data ||
        c->attrs->literal->nbytes != (int64_t)ot_dtype_size(t))
        return false;
    *bits = ex_ld_bits(ot_dtype_size(t), c->attrs->literal->data, 0);
    return true;
}

static bool is_compare(const ot_instr *x, ot_cmp_dir dir, const ot_instr *a, const ot_instr *b) {
    return x && x->opcode == OT_OP_COMPARE && x->noperands == 2 && x->operands[0] == a &&
           x->operands[1] == b && x->attrs && x->attrs->cmp_dir == dir;
}

/* x is p (*canon false) or select(ne(p, p), NaN, select(eq(p, Z), Z, p)) (*canon true, with its
 * constants' bits and compares). */
static bool key_form(const ot_instr *x, const ot_instr *p, ot_dtype t, bool *canon,
                     uint64_t *nan_bits, uint64_t *zero_bits, const ot_instr **ne,
                     const ot_instr **eq) {
    if (x == p) {
        *canon = false;
        return true;
    }
    if (!ot_dtype_is_float(t) || x->opcode != OT_OP_SELECT || x->noperands != 3) return false;
    const ot_instr *c1 = x->operands[0], *s2 = x->operands[2];
    if (!is_compare(c1, OT_CMP_NE, p, p) || !const_bits(x->operands[1], t, nan_bits)) return false;
    if (!s2 || s2->opcode != OT_OP_SELECT || s2->noperands != 3 || s2->operands[2] != p)
        return false;
    const ot_instr *c2 = s2->operands[0];
    uint64_t z1, z2;
    if (!c2 || c2->opcode != OT_OP_COMPARE || c2->noperands != 2 || c2->operands[0] != p ||
        !is_compare(c2, OT_CMP_EQ, p, c2->operands[1]) || !const_bits(c2->operands[1], t, &z1) ||
        !const_bits(s2->operands[1], t, &z2) || z1 != z2)
        return false;
    *canon = true;
    *zero_bits = z1;
    *ne = c1;
    *eq = c2;
    return true;
}

/* The plan of sort i, or false when its comparator is not one of the forms above (its root
 * reads parameters 0 and 1 only: operand 0's pair). */
static bool plan_sort(const ot_instr *i, const ot_shape *s, sort_plan *p) {
    const ot_computation *f = i->ncalled == 1 ? i->called[0] : NULL;
    ot_dtype t = s->dtype;
    if (!f || i->noperands < 1 || f->nparams != 2 * i->noperands || !f->root || s->rank < 1)
        return false;
    if (t != OT_F32 && t != OT_F64 && t != OT_S8 && t != OT_S16 && t != OT_S32 && t != OT_S64 &&
        t != OT_U8 && t != OT_U16 && t != OT_U32 && t != OT_U64)
        return false;
    for (int k = 0; k < 2; k++) {
        const ot_ir_shape *ps = &f->params[k]->shape;
        if (ps->kind != OT_IR_ARRAY || ps->array.rank != 0 || ps->array.dtype != t) return false;
    }
    const ot_instr *r = f->root;
    if (r->opcode != OT_OP_COMPARE || r->noperands != 2 || !r->attrs ||
        (r->attrs->cmp_dir != OT_CMP_LT && r->attrs->cmp_dir != OT_CMP_GT))
        return false;
    ot_cmp_type ty = ot_cmp_type_resolve(r->attrs->cmp_type, t);
    if (ot_dtype_is_float(t) ? ty != OT_CMP_TYPE_TOTALORDER
                             : ty != OT_CMP_TYPE_SIGNED && ty != OT_CMP_TYPE_UNSIGNED)
        return false;
    bool ca, cb;
    uint64_t na, nb, za, zb;
    const ot_instr *nea, *neb, *eqa, *eqb;
    if (!key_form(r->operands[0], f->params[0], t, &ca, &na, &za, &nea, &eqa) ||
        !key_form(r->operands[1], f->params[1], t, &cb, &nb, &zb, &neb, &eqb) || ca != cb)
        return false;
    if (ca) {
        /* both sides canonicalize the same way: the same constants and compare types */
        if (na != nb || za != zb || nea->attrs->cmp_type != neb->attrs->cmp_type ||
            eqa->attrs->cmp_type != eqb->attrs->cmp_type)
            return false;
        p->nan_bits = na;
        p->zero_bits = za;
        p->ne = nea;
        p->eq = eqa;
    }
    int64_t dim = i->attrs->index;
    if (dim < 0 || dim >= s->rank) return false;
    p->t = t;
    p->canon = ca;
    p->desc = r->attrs->cmp_dir == OT_CMP_GT;
    p->uns = ty == OT_CMP_TYPE_UNSIGNED;
    p->outer = p->inner = 1;
    for (int d = 0; d < dim; d++) p->outer *= s->dims[d];
    for (int d = (int)dim + 1; d < s->rank; d++) p->inner *= s->dims[d];
    p->m = s->dims[dim];
    return true;
}

/* Stable bottom-up merge sort of a[0..m) by key (a right element goes first only when its key
 * is strictly less), tmp as large. */
static void merge_keys(sort_key *a, sort_key *tmp, int64_t m) {
    for (int64_t w = 1; w < m; w *= 2) {
        for (int64_t lo = 0; lo < m; lo += 2 * w) {
            int64_t mid = lo + w < m ? lo + w : m, hi = lo + 2 * w < m ? lo + 2 * w : m;
            int64_t l = lo, r = mid, o = lo;
            while (l < mid && r < hi) tmp[o++] = a[r].key < a[l].key ? a[r++] : a[l++];
            while (l < mid) tmp[o++] = a[l++];
            while (r < hi) tmp[o++] = a[r++];
        }
        memcpy(a, tmp, (size_t)m * sizeof *a);
    }
}

/* Stable LSD radix sort of a[0..m) by key, tmp as large: the same order as merge_keys (both
 * stable, and the keys totally ordered), in one pass per byte of the keys' range (4 for 32-bit
 * keys) where the merge sort makes log2(m) passes; a pass whose digit is the same for every
 * element is skipped. */
static void radix_keys(sort_key *a, sort_key *tmp, int64_t m) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int64_t k = 0; k < m; k++) {
        uint64_t u = (uint64_t)a[k].key ^ (1ull << 63); /* the keys' order, unsigned */
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    uint64_t range = hi - lo;
    sort_key *src = a, *dst = tmp;
    for (int sh = 0; sh < 64 && (range >> sh) != 0; sh += 8) {
        int64_t cnt[256] = {0};
        for (int64_t k = 0; k < m; k++)
            cnt[((((uint64_t)src[k].key ^ (1ull << 63)) - lo) >> sh) & 255]++;
        bool one = false;
        for (int d = 0; d < 256; d++) one |= cnt[d] == m;
        if (one) continue;
        for (int64_t d = 0, at = 0; d < 256; d++) {
            int64_t c = cnt[d];
            cnt[d] = at;
            at += c;
        }
        for (int64_t k = 0; k < m; k++)
            dst[cnt[((((uint64_t)src[k].key ^ (1ull << 63)) - lo) >> sh) & 255]++] = src[k];
        sort_key *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, (size_t)m * sizeof *a);
}

#define SORT_RADIX_MIN 512 /* shorter rows: the merge sort */

static void sort_keys(sort_key *a, sort_key *tmp, int64_t m) {
    if (m >= SORT_RADIX_MIN)
        radix_keys(a, tmp, m);
    else
        merge_keys(a, tmp, m);
}

/* dst[k * dstep] = src[k * sstep] (byte strides), or src[pos[k].pos * sstep] when pos: elements
 * of es bytes moved with a fixed-size copy (a call per element otherwise). */
static void move_elems(char *dst, size_t dstep, const char *src, size_t sstep, const sort_key *pos,
                       int64_t m, size_t es) {
#define MOVE_ELEMS(N)                                                                              \
    for (int64_t k = 0; k < m; k++)                                                                \
        memcpy(dst + (size_t)k * dstep, src + (size_t)(pos ? pos[k].pos : k) * sstep, N);          \
    return;
    switch (es) {
    case 1: MOVE_ELEMS(1)
    case 2: MOVE_ELEMS(2)
    case 4: MOVE_ELEMS(4)
    case 8: MOVE_ELEMS(8)
    default: MOVE_ELEMS(es)
    }
#undef MOVE_ELEMS
}

static void sort_rows(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    sort_plan *p = arg;
    size_t es = ot_dtype_size(p->t);
    int64_t m = p->m;
    /* one row's keys and scratch, its values, and for the canonical form its compares and a
     * row of the zero constant */
    size_t need = (size_t)m * (2 * sizeof(sort_key) + es + (p->canon ? 2 + es : 0));
    char *buf = ot_malloc(need ? need : 1);
    if (!buf) {
        p->st = ot_error(OT_ERR_OUT_OF_MEMORY, "sort: out of memory"); /* first writer wins */
        return;
    }
    sort_key *a = (sort_key *)buf, *tmp = a + m;
    char *row = (char *)(tmp + m), *zrow = row + (size_t)m * es; /* element-aligned */
    uint8_t *isnan_ = (uint8_t *)(zrow + (p->canon ? (size_t)m * es : 0)), *iszero = isnan_ + m;
    if (p->canon)
        for (int64_t k = 0; k < m; k++) memcpy(zrow + (size_t)k * es, &p->zero_bits, es);
    bool ftz = ex_ftz; /* ex_compare reads the thread's mode: the run's, as the reference's */
    ex_ftz = p->ftz;
    for (int64_t rw = begin; rw < end; rw++) {
        int64_t o = rw / p->inner, j = rw % p->inner;
        const char *x = (const char *)p->x + (size_t)((o * m) * p->inner + j) * es;
        move_elems(row, es, x, (size_t)p->inner * es, NULL, m, es);
        if (p->canon) {
            ot_status st = ex_compare(OT_CMP_NE, p->ne->attrs->cmp_type, p->t, row, row, isnan_, m);
            if (st == OT_OK)
                st = ex_compare(OT_CMP_EQ, p->eq->attrs->cmp_type, p->t, row, zrow, iszero, m);
            if (st != OT_OK) {
                p->st = st;
                break;
            }
        }
        for (int64_t k = 0; k < m; k++) {
            int64_t key;
            if (p->canon && isnan_[k]) {
                key = ld_signed(es, &p->nan_bits, 0);
            } else if (p->canon && iszero[k]) {
                key = ld_signed(es, &p->zero_bits, 0);
            } else if (p->uns) {
                key = (int64_t)(ex_ld_bits(es, row, k) ^ (1ull << 63)); /* unsigned order */
            } else {
                key = ld_signed(es, row, k);
            }
            if (ot_dtype_is_float(p->t) && key < 0) key ^= (int64_t)(~0ull >> 1); /* total order */
            a[k] = (sort_key){p->desc ? ~key : key, k};
        }
        sort_keys(a, tmp, m);
        char *y = (char *)p->y + (size_t)((o * m) * p->inner + j) * es;
        move_elems(y, (size_t)p->inner * es, row, es, a, m, es);
        for (int q = 0; q < p->nmore; q++) {
            size_t eq = p->esm[q];
            size_t at = (size_t)((o * m) * p->inner + j) * eq, step = (size_t)p->inner * eq;
            const char *xq = (const char *)p->xm[q] + at;
            char *yq = (char *)p->ym[q] + at;
            move_elems(yq, step, xq, step, a, m, eq);
        }
    }
    ex_ftz = ftz;
    ot_free(buf);
}

ot_status ex_fast_sort(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                       const ex_leaf *ins, int nout, void *const *out, const ex_leaf *outs,
                       bool *done) {
    *done = false;
    if (nin < 1 || nin != nout || nin != i->noperands || nin > OT_MAX_SORT_OPERANDS) return OT_OK;
    const ot_shape *s = ins[0].shape;
    for (int q = 0; q < nin; q++) {
        /* every operand of the first's dims, each output its operand's shape, no output over an
         * input or over another output */
        const ot_shape *sq = ins[q].shape;
        if (sq->rank != s->rank || memcmp(sq->dims, s->dims, sizeof s->dims[0] * s->rank) != 0 ||
            !ot_shape_equal(sq, outs[q].shape))
            return OT_OK;
        for (int r = 0; r < nin; r++)
            if (ex_overlaps(out[q], outs[q].nbytes, in[r], ins[r].nbytes) ||
                (r != q && ex_overlaps(out[q], outs[q].nbytes, out[r], outs[r].nbytes)))
                return OT_OK;
    }
    sort_plan p;
    memset(&p, 0, sizeof p);
    if (!plan_sort(i, s, &p)) return OT_OK;
    size_t esm[OT_MAX_SORT_OPERANDS];
    for (int q = 1; q < nin; q++) esm[q - 1] = ot_dtype_size(ins[q].shape->dtype);
    *done = true;
    p.x = in[0];
    p.y = out[0];
    p.nmore = nin - 1;
    p.xm = (const void *const *)(in + 1);
    p.ym = out + 1;
    p.esm = esm;
    p.ftz = c->ftz;
    p.st = OT_OK;
    int64_t rows = p.outer * p.inner, bytes = 0;
    for (int q = 0; q < nin; q++) bytes += ins[q].nbytes + outs[q].nbytes;
    if (rows > 0 && p.m > 0) ex_par_for(c, rows, bytes, sort_rows, &p);
    if (p.st != OT_OK) return p.st;
    c->fast_run++;
    return OT_OK;
}

/* ---- top-k --------------------------------------------------------------------------------- */

/* topk along the last dim (ex_kernel_topk): the k largest (smallest) elements of each row, in
 * TOTALORDER for floats and in the type's own order for integers, ties by the lower index. The
 * reference picks, k times, the first untaken element no later element beats; the same picks are
 * the k first of the row ordered by (key descending (ascending), index), which this kernel takes
 * from integer keys: by one pass keeping the k first in order for small k, by one pass keeping
 * them in a heap (then sorted) while k is a small part of the row, else from a stable sort of the
 * row. (key, index) pairs are distinct, so the three give the same k in the same order. Rows are
 * split over the pool (one task per row). */
typedef struct topk_plan {
    ot_dtype t;
    int64_t m, k;
    bool largest;
    const void *x;
    void *vals;
    int32_t *idx;
    ot_status st;
} topk_plan;

#define TOPK_PASSES    32 /* up to this k, one pass keeping the k first in order */
#define TOPK_HEAP_PART 8  /* above, while k <= m / this, a heap of the k first; above, a sort */

/* (key, pos) order: a before b. */
static inline bool key_before(sort_key a, sort_key b) {
    return a.key < b.key || (a.key == b.key && a.pos < b.pos);
}

/* Moves h[at] down the max-heap h[0..n) (the last in (key, pos) order at the top). */
static void heap_down(sort_key *h, int64_t n, int64_t at) {
    sort_key x = h[at];
    for (;;) {
        int64_t c = 2 * at + 1;
        if (c >= n) break;
        if (c + 1 < n && key_before(h[c], h[c + 1])) c++;
        if (!key_before(x, h[c])) break;
        h[at] = h[c];
        at = c;
    }
    h[at] = x;
}

/* The key of row element q: ~key for largest, so that the wanted ones come first in ascending
 * (key, pos) order. */
static inline int64_t topk_key(const topk_plan *p, const char *row, int64_t q) {
    if (p->t == OT_F32) { /* the common case without the generic loads: the same order */
        int32_t v;
        memcpy(&v, row + (size_t)q * 4, 4);
        int64_t key = v ^ ((v >> 31) & 0x7fffffff);
        return p->largest ? ~key : key;
    }
    size_t es = ot_dtype_size(p->t);
    int64_t key = ot_dtype_is_unsigned_int(p->t) ? (int64_t)(ex_ld_bits(es, row, q) ^ (1ull << 63))
                                                 : ld_signed(es, row, q);
    if (ot_dtype_is_float(p->t) && key < 0) key ^= (int64_t)(~0ull >> 1); /* total order */
    return p->largest ? ~key : key;
}

/* Moves one element (key, pos) into the k first so far, best[0..*nb), by insertion (kept in
 * order) or into the max-heap; returns the key an element must be strictly below to enter once
 * *nb is k (an equal key comes later in the pass, so its index is larger). */
static inline int64_t topk_enter(sort_key *best, int64_t *nb, int64_t k, bool heap, sort_key x) {
    if (heap) {
        if (*nb < k) {
            best[(*nb)++] = x;
            if (*nb < k) return 0;
            for (int64_t q = k / 2; q-- > 0;) heap_down(best, k, q);
        } else {
            best[0] = x;
            heap_down(best, k, 0);
        }
        return best[0].key;
    }
    int64_t at = *nb < k ? (*nb)++ : k - 1;
    while (at > 0 && best[at - 1].key > x.key) {
        best[at] = best[at - 1];
        at--;
    }
    best[at] = x;
    return best[*nb - 1].key;
}

/* The k first of the row in (key, pos) order, in order, into best[0..k), by one pass over the
 * row in index order: an element is compared with the k-th so far and turned away unless it
 * enters. Small k: the k first kept in order (insertion). Larger k: kept in a max-heap (O(m log
 * k) however the row is ordered; on most rows nearly every element is turned away by the one
 * compare), sorted in place at the end by taking the top k times. */
static void topk_select(const topk_plan *p, const char *row, sort_key *best) {
    int64_t m = p->m, k = p->k, nb = 0, thr = 0;
    bool heap = k > TOPK_PASSES;
    if (p->t == OT_F32 && p->largest) { /* the usual call: the key's form fixed for the loop */
        for (int64_t q = 0; q < m; q++) {
            int32_t v;
            memcpy(&v, row + (size_t)q * 4, 4);
            int64_t key = ~(int64_t)(v ^ ((v >> 31) & 0x7fffffff)); /* no branch on the sign */
            if (nb < k || key < thr) thr = topk_enter(best, &nb, k, heap, (sort_key){key, q});
        }
    } else {
        for (int64_t q = 0; q < m; q++) {
            int64_t key = topk_key(p, row, q);
            if (nb < k || key < thr) thr = topk_enter(best, &nb, k, heap, (sort_key){key, q});
        }
    }
    if (!heap) return;
    for (int64_t n = k; n > 1; n--) {
        sort_key t = best[0];
        best[0] = best[n - 1];
        best[n - 1] = t;
        heap_down(best, n - 1, 0);
    }
}

static void topk_rows(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    topk_plan *p = arg;
    size_t es = ot_dtype_size(p->t);
    int64_t m = p->m, k = p->k;
    bool select = k <= TOPK_PASSES || k <= m / TOPK_HEAP_PART;
    sort_key *a = ot_malloc((size_t)(select ? k : 2 * m) * sizeof *a);
    if (!a) {
        p->st = ot_error(OT_ERR_OUT_OF_MEMORY, "topk: out of memory");
        return;
    }
    for (int64_t r = begin; r < end; r++) {
        const char *row = (const char *)p->x + (size_t)(r * m) * es;
        if (select) {
            topk_select(p, row, a);
        } else {
            for (int64_t q = 0; q < m; q++) a[q] = (sort_key){topk_key(p, row, q), q};
            sort_keys(a, a + m, m);
        }
        char *vo = (char *)p->vals + (size_t)(r * k) * es;
        int32_t *io = p->idx + r * k;
        for (int64_t j = 0; j < k; j++) {
            memcpy(vo + (size_t)j * es, row + (size_t)a[j].pos * es, es);
            io[j] = (int32_t)a[j].pos;
        }
    }
    ot_free(a);
}

ot_status ex_fast_topk(ex_kernel_ctx *c, const ot_instr *i, int nin, void *const *in,
                       const ex_leaf *ins, int nout, void *const *out, const ex_leaf *outs,
                       bool *done) {
    *done = false;
    if (nin != 1 || nout != 2 || !i->attrs) return OT_OK;
    const ot_shape *s = ins[0].shape;
    ot_dtype t = s->dtype;
    if (s->rank < 1 || outs[0].shape->dtype != t || outs[1].shape->dtype != OT_S32) return OT_OK;
    if (t != OT_F32 && t != OT_F64 && t != OT_S8 && t != OT_S16 && t != OT_S32 && t != OT_S64 &&
        t != OT_U8 && t != OT_U16 && t != OT_U32 && t != OT_U64)
        return OT_OK;
    int64_t m = s->dims[s->rank - 1], k = i->attrs->index;
    if (k < 0 || k > m || m > INT32_MAX ||
        ot_shape_numel_unchecked(outs[0].shape) != (m ? ot_shape_numel_unchecked(s) / m : 0) * k)
        return OT_OK;
    for (int q = 0; q < 2; q++)
        if (ex_overlaps(out[q], outs[q].nbytes, in[0], ins[0].nbytes)) return OT_OK;
    *done = true;
    topk_plan p = {t, m, k, i->attrs->largest, in[0], out[0], out[1], OT_OK};
    int64_t rows = m ? ot_shape_numel_unchecked(s) / m : 0;
    if (rows > 0 && k > 0)
        ex_par_for(c, rows, ins[0].nbytes + outs[0].nbytes + outs[1].nbytes, topk_rows, &p);
    if (p.st != OT_OK) return p.st;
    c->fast_run++;
    return OT_OK;
}
