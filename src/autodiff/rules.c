/* Reverse-mode rules, one per opcode. Each takes the instruction i and its adjoint g (same shape
 * and dtype as i) and adds the adjoint contributions of i's operands with ad_acc. The formulas
 * follow JAX's JVP/transpose rules (jax/_src/lax) so that gradients agree with JAX's, including
 * its conventions at non-differentiable points (docs/autodiff.md lists them). */
#include "autodiff_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define C (ad->c)

static ot_instr *bin(ad_ctx *ad, ot_opcode op, ot_instr *a, ot_instr *b) {
    return ot_build_binary(C, op, a, b);
}
static ot_instr *un(ad_ctx *ad, ot_opcode op, ot_instr *x) {
    return ot_build_unary(C, op, x);
}
static ot_instr *mul(ad_ctx *ad, ot_instr *a, ot_instr *b) {
    return bin(ad, OT_OP_MULTIPLY, a, b);
}
static ot_instr *cmp(ad_ctx *ad, ot_instr *a, ot_instr *b, ot_cmp_dir d) {
    return ot_build_compare(C, a, b, d, OT_CMP_TYPE_DEFAULT);
}
static ot_instr *sel(ad_ctx *ad, ot_instr *p, ot_instr *a, ot_instr *b) {
    return ot_build_select(C, p, a, b);
}
/* A constant of i's shape and dtype. */
static ot_instr *like(ad_ctx *ad, const ot_instr *i, double v) {
    return ad_full(ad, i->shape.array.dtype, v, &i->shape.array);
}
static ot_instr *zeros_of(ad_ctx *ad, const ot_shape *s) {
    return ad_full(ad, s->dtype, 0, s);
}

static ot_computation *add_fn(ad_ctx *ad, ot_dtype t) {
    return ad_binary_fn(ad, &ad->fns->add_fn[t], t, OT_OP_ADD, OT_CMP_EQ, "grad_add");
}

/* Sum of x over dims (ascending, distinct). */
static ot_instr *reduce_sum(ad_ctx *ad, ot_instr *x, const ot_shape *xs, const int64_t *dims,
                            int n) {
    if (n == 0) return x;
    ot_instr *z = ot_build_constant_scalar(C, xs->dtype, 0);
    return ot_build_reduce(C, &x, &z, 1, dims, n, add_fn(ad, xs->dtype));
}
static ot_instr *reduce_sum_all(ad_ctx *ad, ot_instr *x, const ot_shape *xs) {
    int64_t dims[OT_MAX_RANK];
    for (int d = 0; d < xs->rank; d++) dims[d] = d;
    return reduce_sum(ad, x, xs, dims, xs->rank);
}
/* x's value broadcast to s (x: s without the dimensions in rdims). */
static ot_instr *bcast_back(ad_ctx *ad, ot_instr *x, const ot_shape *s, const int64_t *rdims,
                            int nr) {
    int64_t keep[OT_MAX_RANK] = {0};
    int nk = 0;
    for (int d = 0; d < s->rank; d++) {
        bool r = false;
        for (int q = 0; q < nr; q++) r |= rdims[q] == d;
        if (!r) keep[nk++] = d;
    }
    return ot_build_broadcast(C, x, *s, keep, nk);
}
static ot_instr *convert_to(ad_ctx *ad, ot_instr *x, ot_dtype from, ot_dtype to) {
    return from == to ? x : ot_build_convert(C, x, to);
}

static ot_status unimpl(const ot_instr *i, const char *why) {
    return ot_error(OT_ERR_UNIMPLEMENTED, "autodiff: no reverse-mode rule for %s (%s)%s%s",
                    ot_opcode_name(i->opcode), i->name, why ? ": " : "", why ? why : "");
}

static bool is_int(const int64_t *v, int n, int64_t x) {
    for (int k = 0; k < n; k++)
        if (v[k] == x) return true;
    return false;
}

/* ---- elementwise -------------------------------------------------------------------------------
 */

static ot_status rule_unary(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *x = i->operands[0];
    ot_instr *r = NULL;
    switch (i->opcode) {
    case OT_OP_NEGATE: r = un(ad, OT_OP_NEGATE, g); break;
    case OT_OP_ABS: /* JAX: select(x >= 0, g, -g) */
        r = sel(ad, cmp(ad, x, like(ad, x, 0), OT_CMP_GE), g, un(ad, OT_OP_NEGATE, g));
        break;
    case OT_OP_SIGN:
    case OT_OP_FLOOR:
    case OT_OP_CEIL:
    case OT_OP_ROUND_NEAREST_AFZ:
    case OT_OP_ROUND_NEAREST_EVEN: return OT_OK; /* zero almost everywhere */
    case OT_OP_EXP: r = mul(ad, g, i); break;
    case OT_OP_EXPM1: r = mul(ad, g, bin(ad, OT_OP_ADD, i, like(ad, i, 1))); break;
    case OT_OP_LOG: r = bin(ad, OT_OP_DIVIDE, g, x); break;
    case OT_OP_LOG1P: r = bin(ad, OT_OP_DIVIDE, g, bin(ad, OT_OP_ADD, x, like(ad, x, 1))); break;
    case OT_OP_SQRT: r = mul(ad, g, bin(ad, OT_OP_DIVIDE, like(ad, i, 0.5), i)); break;
    case OT_OP_RSQRT: /* -0.5 * ans / x */
        r = mul(ad, g, mul(ad, like(ad, i, -0.5), bin(ad, OT_OP_DIVIDE, i, x)));
        break;
    case OT_OP_CBRT: /* (1/3) * ans^-2 */
        r = mul(
            ad, g,
            mul(ad, like(ad, i, 1.0 / 3.0), bin(ad, OT_OP_DIVIDE, like(ad, i, 1), mul(ad, i, i))));
        break;
    case OT_OP_TANH: /* (g + g*ans) * (1 - ans) */
        r = mul(ad, bin(ad, OT_OP_ADD, g, mul(ad, g, i)),
                bin(ad, OT_OP_SUBTRACT, like(ad, i, 1), i));
        break;
    case OT_OP_LOGISTIC:
        r = mul(ad, g, mul(ad, i, bin(ad, OT_OP_SUBTRACT, like(ad, i, 1), i)));
        break;
    case OT_OP_SIN: r = mul(ad, g, un(ad, OT_OP_COS, x)); break;
    case OT_OP_COS: r = mul(ad, g, un(ad, OT_OP_NEGATE, un(ad, OT_OP_SIN, x))); break;
    case OT_OP_TAN: r = mul(ad, g, bin(ad, OT_OP_ADD, like(ad, i, 1), mul(ad, i, i))); break;
    case OT_OP_ERF: /* 2/sqrt(pi) * exp(-x^2) */
        r = mul(ad, g,
                mul(ad, like(ad, x, 1.1283791670955126),
                    un(ad, OT_OP_EXP, un(ad, OT_OP_NEGATE, mul(ad, x, x)))));
        break;
    case OT_OP_COPY: r = g; break;
    default: return unimpl(i, NULL);
    }
    ad_acc(ad, x, r);
    return OT_OK;
}

/* JAX's _balanced_eq(x, ans, y): 1 where x is the result, 1/2 where both are (ties), else 0. */
static ot_instr *balanced_eq(ad_ctx *ad, ot_instr *x, ot_instr *ans, ot_instr *y) {
    ot_instr *one = like(ad, ans, 1), *zero = like(ad, ans, 0), *two = like(ad, ans, 2);
    return bin(ad, OT_OP_DIVIDE, sel(ad, cmp(ad, x, ans, OT_CMP_EQ), one, zero),
               sel(ad, cmp(ad, y, ans, OT_CMP_EQ), two, one));
}

static ot_status rule_binary(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *x = i->operands[0], *y = i->operands[1];
    ot_instr *gx = NULL, *gy = NULL;
    ad_slot *sx = ad_slot_of(ad, x), *sy = ad_slot_of(ad, y);
    bool nx = sx && sx->need, ny = sy && sy->need;
    switch (i->opcode) {
    case OT_OP_ADD:
        gx = g;
        gy = g;
        break;
    case OT_OP_SUBTRACT:
        gx = g;
        if (ny) gy = un(ad, OT_OP_NEGATE, g);
        break;
    case OT_OP_MULTIPLY:
        if (nx) gx = mul(ad, g, y);
        if (ny) gy = mul(ad, x, g);
        break;
    case OT_OP_DIVIDE:
        if (nx) gx = bin(ad, OT_OP_DIVIDE, g, y);
        if (ny) /* -g * x * y^-2 */
            gy = mul(ad, mul(ad, un(ad, OT_OP_NEGATE, g), x),
                     bin(ad, OT_OP_DIVIDE, like(ad, y, 1), mul(ad, y, y)));
        break;
    case OT_OP_POWER:
        if (nx) { /* select(y == 0, 0, y * x^(y-1)) */
            ot_instr *p = bin(ad, OT_OP_POWER, x, bin(ad, OT_OP_SUBTRACT, y, like(ad, y, 1)));
            gx = mul(ad, g,
                     sel(ad, cmp(ad, y, like(ad, y, 0), OT_CMP_EQ), like(ad, y, 0), mul(ad, y, p)));
        }
        if (ny) { /* log(x, with 0 replaced by 1) * ans */
            ot_instr *xz = sel(ad, cmp(ad, x, like(ad, x, 0), OT_CMP_EQ), like(ad, x, 1), x);
            gy = mul(ad, g, mul(ad, un(ad, OT_OP_LOG, xz), i));
        }
        break;
    case OT_OP_MAXIMUM:
    case OT_OP_MINIMUM:
        if (nx) gx = mul(ad, g, balanced_eq(ad, x, i, y));
        if (ny) gy = mul(ad, g, balanced_eq(ad, y, i, x));
        break;
    case OT_OP_ATAN2: {
        ot_instr *d = bin(ad, OT_OP_ADD, mul(ad, x, x), mul(ad, y, y));
        if (nx) gx = mul(ad, g, bin(ad, OT_OP_DIVIDE, y, d));
        if (ny) gy = bin(ad, OT_OP_DIVIDE, mul(ad, g, un(ad, OT_OP_NEGATE, x)), d);
        break;
    }
    case OT_OP_REMAINDER:
        gx = g;
        if (ny) { /* -g * trunc(x / y) */
            ot_instr *q = bin(ad, OT_OP_DIVIDE, x, y);
            gy = mul(ad, un(ad, OT_OP_NEGATE, g),
                     mul(ad, un(ad, OT_OP_SIGN, q), un(ad, OT_OP_FLOOR, un(ad, OT_OP_ABS, q))));
        }
        break;
    default: return unimpl(i, NULL);
    }
    ad_acc(ad, x, gx);
    ad_acc(ad, y, gy);
    return OT_OK;
}

static ot_status rule_select(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *p = i->operands[0], *z = like(ad, i, 0);
    ad_acc(ad, i->operands[1], sel(ad, p, g, z));
    ad_acc(ad, i->operands[2], sel(ad, p, z, g));
    return OT_OK;
}

/* clamp(lo, x, hi); lo and hi may be scalars (their adjoints are then summed). */
static ot_status rule_clamp(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *lo = i->operands[0], *x = i->operands[1], *hi = i->operands[2];
    const ot_shape *s = &i->shape.array;
    ot_instr *lob = lo->shape.array.rank == s->rank ? lo : ot_build_broadcast(C, lo, *s, NULL, 0);
    ot_instr *hib = hi->shape.array.rank == s->rank ? hi : ot_build_broadcast(C, hi, *s, NULL, 0);
    ot_instr *z = like(ad, i, 0);
    ad_slot *sl = ad_slot_of(ad, lo), *sh = ad_slot_of(ad, hi);
    if (sl && sl->need) {
        ot_instr *m = bin(ad, OT_OP_AND, cmp(ad, lob, x, OT_CMP_GT), cmp(ad, lob, hib, OT_CMP_LT));
        ot_instr *gl = sel(ad, m, g, z);
        ad_acc(ad, lo, lo->shape.array.rank == s->rank ? gl : reduce_sum_all(ad, gl, s));
    }
    ot_instr *mx = bin(ad, OT_OP_AND, cmp(ad, x, lob, OT_CMP_GT), cmp(ad, x, hib, OT_CMP_LT));
    ad_acc(ad, x, sel(ad, mx, g, z));
    if (sh && sh->need) {
        ot_instr *gh = sel(ad, cmp(ad, hib, x, OT_CMP_LT), g, z);
        ad_acc(ad, hi, hi->shape.array.rank == s->rank ? gh : reduce_sum_all(ad, gh, s));
    }
    return OT_OK;
}

/* ---- shape ops ---------------------------------------------------------------------------------
 */

static ot_status rule_broadcast(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *x = i->operands[0];
    const ot_shape *s = &i->shape.array;
    int nd = i->attrs->ndims;
    const int64_t *bd = i->attrs->dims;
    int64_t rdims[OT_MAX_RANK], kept[OT_MAX_RANK];
    int nr = 0, nk = 0;
    for (int d = 0; d < s->rank; d++) {
        if (is_int(bd, nd, d))
            kept[nk++] = d;
        else
            rdims[nr++] = d;
    }
    ot_instr *r = reduce_sum(ad, g, s, rdims, nr);
    /* r's dimension j is result dimension kept[j]; operand dimension q is result dimension
     * bd[q] */
    bool sorted = true;
    int64_t perm[OT_MAX_RANK];
    for (int q = 0; q < nd; q++) {
        for (int j = 0; j < nk; j++)
            if (kept[j] == bd[q]) perm[q] = j;
        if (perm[q] != q) sorted = false;
    }
    if (!sorted) r = ot_build_transpose(C, r, perm, nd);
    ad_acc(ad, x, r);
    return OT_OK;
}

static ot_status rule_transpose(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    int64_t inv[OT_MAX_RANK];
    for (int k = 0; k < i->attrs->ndims; k++) inv[i->attrs->dims[k]] = k;
    ad_acc(ad, i->operands[0], ot_build_transpose(C, g, inv, i->attrs->ndims));
    return OT_OK;
}

static ot_status rule_slice(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *x = i->operands[0];
    const ot_shape *xs = &x->shape.array, *s = &i->shape.array;
    ot_pad_dim cfg[OT_MAX_RANK];
    for (int d = 0; d < s->rank; d++) {
        if (s->dims[d] == 0) return OT_OK; /* empty: the adjoint is zero */
        const ot_slice_dim *sd = &i->attrs->slice[d];
        cfg[d].lo = sd->start;
        cfg[d].interior = sd->stride - 1;
        cfg[d].hi = xs->dims[d] - (sd->start + (s->dims[d] - 1) * sd->stride + 1);
    }
    ot_instr *z = ot_build_constant_scalar(C, s->dtype, 0);
    ad_acc(ad, x, ot_build_pad(C, g, z, cfg));
    return OT_OK;
}

static ot_instr *slice_dim(ad_ctx *ad, ot_instr *g, const ot_shape *gs, int dim, int64_t start,
                           int64_t limit, int64_t stride) {
    int64_t st[OT_MAX_RANK], li[OT_MAX_RANK], sr[OT_MAX_RANK];
    for (int d = 0; d < gs->rank; d++) {
        st[d] = 0;
        li[d] = gs->dims[d];
        sr[d] = 1;
    }
    st[dim] = start;
    li[dim] = limit;
    sr[dim] = stride;
    return ot_build_slice(C, g, st, li, sr);
}

static ot_status rule_concatenate(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    int dim = (int)i->attrs->index;
    int64_t off = 0;
    for (int k = 0; k < i->noperands; k++) {
        ot_instr *x = i->operands[k];
        int64_t w = x->shape.array.dims[dim];
        ad_slot *sl = ad_slot_of(ad, x);
        if (sl && sl->need) ad_acc(ad, x, slice_dim(ad, g, &i->shape.array, dim, off, off + w, 1));
        off += w;
    }
    return OT_OK;
}

/* JAX's pad transpose: un-pad (negated low/high) then take every (interior+1)-th element; the
 * padding value gets the sum of what was not taken. */
static ot_status rule_pad(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *x = i->operands[0], *v = i->operands[1];
    const ot_shape *xs = &x->shape.array, *s = &i->shape.array;
    ot_pad_dim un_cfg[OT_MAX_RANK];
    int64_t st[OT_MAX_RANK], li[OT_MAX_RANK], sr[OT_MAX_RANK];
    bool empty = false;
    for (int d = 0; d < s->rank; d++) {
        const ot_pad_dim *p = &i->attrs->padding[d];
        un_cfg[d].lo = -p->lo;
        un_cfg[d].hi = -p->hi;
        un_cfg[d].interior = 0;
        st[d] = 0;
        li[d] = xs->dims[d] == 0 ? 0 : xs->dims[d] + (xs->dims[d] - 1) * p->interior;
        sr[d] = p->interior + 1;
        if (xs->dims[d] == 0) empty = true;
    }
    ot_instr *gx = NULL;
    if (!empty) {
        ot_instr *z = ot_build_constant_scalar(C, s->dtype, 0);
        gx = ot_build_slice(C, ot_build_pad(C, g, z, un_cfg), st, li, sr);
        ad_acc(ad, x, gx);
    }
    ad_slot *sv = ad_slot_of(ad, v);
    if (sv && sv->need) {
        ot_instr *t = reduce_sum_all(ad, g, s);
        if (gx) t = bin(ad, OT_OP_SUBTRACT, t, reduce_sum_all(ad, gx, xs));
        ad_acc(ad, v, t);
    }
    return OT_OK;
}

static ot_status rule_dynamic_slice(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *x = i->operands[0];
    ad_acc(ad, x,
           ot_build_dynamic_update_slice(C, zeros_of(ad, &x->shape.array), g, i->operands + 1));
    return OT_OK;
}

static ot_status rule_dynamic_update_slice(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *x = i->operands[0], *u = i->operands[1];
    ad_slot *sx = ad_slot_of(ad, x), *su = ad_slot_of(ad, u);
    if (sx && sx->need)
        ad_acc(ad, x,
               ot_build_dynamic_update_slice(C, g, zeros_of(ad, &u->shape.array), i->operands + 2));
    if (su && su->need)
        ad_acc(ad, u, ot_build_dynamic_slice(C, g, i->operands + 2, u->shape.array.dims));
    return OT_OK;
}

/* ---- reductions --------------------------------------------------------------------------------
 */

/* The reducer's operation when its root is op(param 0, param 1) (either order), else INVALID. */
static ot_opcode reducer_op(const ot_computation *f) {
    if (!f || f->nparams != 2 || !f->root || f->root->noperands != 2) return OT_OP_INVALID;
    const ot_instr *r = f->root;
    const ot_instr *a = r->operands[0], *b = r->operands[1];
    if (a->opcode != OT_OP_PARAMETER || b->opcode != OT_OP_PARAMETER || a == b)
        return OT_OP_INVALID;
    switch (r->opcode) {
    case OT_OP_ADD:
    case OT_OP_MULTIPLY:
    case OT_OP_MAXIMUM:
    case OT_OP_MINIMUM: return r->opcode;
    default: return OT_OP_INVALID;
    }
}

/* Product of all other elements along the last dimension of a rank-2 [M, N] value. */
static ot_instr *prod_others(ad_ctx *ad, ot_instr *x, const ot_shape *xs) {
    int64_t n = xs->dims[1];
    ot_dtype t = xs->dtype;
    ot_computation *f =
        ad_binary_fn(ad, &ad->fns->mul_fn[t], t, OT_OP_MULTIPLY, OT_CMP_EQ, "grad_mul");
    ot_instr *one = ot_build_constant_scalar(C, t, 1);
    ot_window w;
    memset(&w, 0, sizeof w);
    w.rank = 2;
    for (int d = 0; d < 2; d++) {
        w.dims[d].size = 1;
        w.dims[d].stride = 1;
        w.dims[d].window_dilation = 1;
        w.dims[d].base_dilation = 1;
    }
    w.dims[1].size = n;
    w.dims[1].pad_lo = n - 1; /* inclusive prefix products */
    ot_instr *pre = ot_build_reduce_window(C, &x, &one, 1, &w, f);
    w.dims[1].pad_lo = 0;
    w.dims[1].pad_hi = n - 1; /* inclusive suffix products */
    ot_instr *suf = ot_build_reduce_window(C, &x, &one, 1, &w, f);
    ot_pad_dim lo[2] = {{0, 0, 0}, {1, 0, 0}}, hi[2] = {{0, 0, 0}, {0, 1, 0}};
    ot_instr *pex = ot_build_pad(C, slice_dim(ad, pre, xs, 1, 0, n - 1, 1), one, lo);
    ot_instr *sex = ot_build_pad(C, slice_dim(ad, suf, xs, 1, 1, n, 1), one, hi);
    return mul(ad, pex, sex);
}

static ot_status rule_reduce(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    if (i->noperands != 2) return unimpl(i, "variadic reduce");
    ot_instr *x = i->operands[0], *init = i->operands[1];
    const ot_shape *xs = &x->shape.array;
    const int64_t *rd = i->attrs->dims;
    int nr = i->attrs->ndims;
    ot_opcode op = reducer_op(i->called[0]);
    ad_slot *si = ad_slot_of(ad, init);
    bool need_init = si && si->need;
    switch (op) {
    case OT_OP_ADD:
        ad_acc(ad, x, bcast_back(ad, g, xs, rd, nr));
        if (need_init) ad_acc(ad, init, reduce_sum_all(ad, g, &i->shape.array));
        return OT_OK;
    case OT_OP_MAXIMUM:
    case OT_OP_MINIMUM: { /* JAX: g spread equally over the elements equal to the result */
        if (need_init) return unimpl(i, "max/min reduce: gradient of the init value");
        ot_instr *eq = cmp(ad, x, bcast_back(ad, i, xs, rd, nr), OT_CMP_EQ);
        ot_instr *ind = ot_build_convert(C, eq, xs->dtype);
        int64_t sorted[OT_MAX_RANK];
        memcpy(sorted, rd, (size_t)nr * sizeof *sorted);
        for (int a = 0; a < nr; a++)
            for (int b = a + 1; b < nr; b++)
                if (sorted[b] < sorted[a]) {
                    int64_t t = sorted[a];
                    sorted[a] = sorted[b];
                    sorted[b] = t;
                }
        ot_instr *cnt = reduce_sum(ad, ind, xs, sorted, nr);
        ad_acc(ad, x, mul(ad, ind, bcast_back(ad, bin(ad, OT_OP_DIVIDE, g, cnt), xs, rd, nr)));
        return OT_OK;
    }
    case OT_OP_MULTIPLY: {
        if (need_init) return unimpl(i, "product reduce: gradient of the init value");
        /* move the reduced dimensions last, flatten to [M, N], products of the others */
        int64_t perm[OT_MAX_RANK], inv[OT_MAX_RANK];
        int np = 0;
        int64_t m = 1, n = 1;
        for (int d = 0; d < xs->rank; d++)
            if (!is_int(rd, nr, d)) perm[np++] = d, m *= xs->dims[d];
        for (int d = 0; d < xs->rank; d++)
            if (is_int(rd, nr, d)) perm[np++] = d, n *= xs->dims[d];
        if (n == 0 || m == 0) return OT_OK;
        for (int d = 0; d < xs->rank; d++) inv[perm[d]] = d;
        ot_shape tsh = *xs, flat;
        for (int d = 0; d < xs->rank; d++) tsh.dims[d] = xs->dims[perm[d]];
        OT_CHECK(ot_shape_make(&flat, xs->dtype, 2, (int64_t[]){m, n}));
        ot_instr *xt = ot_build_reshape(C, ot_build_transpose(C, x, perm, xs->rank), flat);
        ot_instr *po = prod_others(ad, xt, &flat);
        ot_instr *gb = ot_build_broadcast(C, ot_build_reshape(C, g, (ot_shape){xs->dtype, 1, {m}}),
                                          flat, (int64_t[]){0}, 1);
        ot_instr *r = ot_build_reshape(C, mul(ad, gb, po), tsh);
        ad_acc(ad, x, ot_build_transpose(C, r, inv, xs->rank));
        return OT_OK;
    }
    default: return unimpl(i, "the reducer is not add, multiply, maximum or minimum");
    }
}

/* ---- dot ---------------------------------------------------------------------------------------
 */

/* JAX's _dot_general_transpose_lhs: the adjoint of x in dot_general(x, y) (swap: x is the rhs,
 * so g's free dimensions of x come first). */
static ot_instr *dot_transpose(ad_ctx *ad, ot_instr *g, ot_instr *x, ot_instr *y, const int64_t *xc,
                               const int64_t *yc, const int64_t *xb, const int64_t *yb, int nc,
                               int nb, bool swap, const ot_instr *i) {
    const ot_shape *xsh = &x->shape.array, *ysh = &y->shape.array;
    int64_t xk[OT_MAX_RANK], yk[OT_MAX_RANK];
    int nxk = 0, nyk = 0;
    for (int d = 0; d < xsh->rank; d++)
        if (!is_int(xc, nc, d) && !is_int(xb, nb, d)) xk[nxk++] = d;
    for (int d = 0; d < ysh->rank; d++)
        if (!is_int(yc, nc, d) && !is_int(yb, nb, d)) yk[nyk++] = d;
    ot_dot_dims dn;
    memset(&dn, 0, sizeof dn);
    dn.nbatch = nb;
    dn.ncontract = nyk;
    for (int k = 0; k < nb; k++) {
        dn.lhs_batch[k] = k;
        dn.rhs_batch[k] = yb[k];
    }
    int64_t ans_y0 = swap ? nb : nb + nxk;
    for (int k = 0; k < nyk; k++) {
        dn.lhs_contract[k] = ans_y0 + k;
        dn.rhs_contract[k] = yk[k];
    }
    /* x's contracting dims in the order of y's (ascending) contracting dims */
    int64_t xcs[OT_MAX_RANK], order[OT_MAX_RANK];
    for (int k = 0; k < nc; k++) order[k] = k;
    for (int a = 0; a < nc; a++)
        for (int b = a + 1; b < nc; b++)
            if (yc[order[b]] < yc[order[a]]) {
                int64_t t = order[a];
                order[a] = order[b];
                order[b] = t;
            }
    for (int k = 0; k < nc; k++) xcs[k] = xc[order[k]];
    int64_t l[OT_MAX_RANK], perm[OT_MAX_RANK];
    int nl = 0;
    for (int k = 0; k < nb; k++) l[nl++] = xb[k];
    for (int k = 0; k < nxk; k++) l[nl++] = xk[k];
    for (int k = 0; k < nc; k++) l[nl++] = xcs[k];
    for (int k = 0; k < nl; k++) perm[l[k]] = k;
    ot_instr *gg = convert_to(ad, g, i->shape.array.dtype, ysh->dtype);
    int np = i->attrs->nprecision;
    ot_precision pg = np ? i->attrs->precision[swap ? 1 : 0] : OT_PRECISION_DEFAULT;
    ot_precision py = np ? i->attrs->precision[swap ? 0 : 1] : OT_PRECISION_DEFAULT;
    ot_instr *d = ot_build_dot(C, gg, y, &dn, pg, py);
    bool ident = true;
    for (int k = 0; k < nl; k++) ident &= perm[k] == k;
    if (!ident) d = ot_build_transpose(C, d, perm, nl);
    return convert_to(ad, d, ysh->dtype, xsh->dtype);
}

static ot_status rule_dot(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *x = i->operands[0], *y = i->operands[1];
    const ot_dot_dims *dn = i->attrs->dot;
    ad_slot *sx = ad_slot_of(ad, x), *sy = ad_slot_of(ad, y);
    if (sx && sx->need)
        ad_acc(ad, x,
               dot_transpose(ad, g, x, y, dn->lhs_contract, dn->rhs_contract, dn->lhs_batch,
                             dn->rhs_batch, dn->ncontract, dn->nbatch, false, i));
    if (sy && sy->need)
        ad_acc(ad, y,
               dot_transpose(ad, g, y, x, dn->rhs_contract, dn->lhs_contract, dn->rhs_batch,
                             dn->lhs_batch, dn->ncontract, dn->nbatch, true, i));
    return OT_OK;
}

/* ---- dispatch ----------------------------------------------------------------------------------
 */

/* ---- convolution -------------------------------------------------------------------------------
 */

static int64_t dilate(int64_t n, int64_t d) {
    return n == 0 ? 0 : 1 + d * (n - 1);
}

/* JAX's _reshape_axis_out_of: dimension src of size n becomes (size1, n / size1). */
static ot_instr *axis_out_of(ad_ctx *ad, ot_instr *x, ot_shape *xs, int src, int64_t size1) {
    ot_shape r = *xs;
    r.rank = xs->rank + 1;
    for (int d = 0, q = 0; d < xs->rank; d++) {
        if (d == src) {
            r.dims[q++] = size1;
            r.dims[q++] = xs->dims[d] / size1;
        } else {
            r.dims[q++] = xs->dims[d];
        }
    }
    *xs = r;
    return ot_build_reshape(C, x, r);
}

/* JAX's _reshape_axis_into: dimension src moves in front of dimension dst (numbered without src)
 * and the two merge. */
static ot_instr *axis_into(ad_ctx *ad, ot_instr *x, ot_shape *xs, int src, int dst) {
    int64_t perm[OT_MAX_RANK + 1];
    int np = 0;
    for (int d = 0; d < xs->rank; d++)
        if (d != src) perm[np++] = d;
    for (int k = np; k > dst; k--) perm[k] = perm[k - 1];
    perm[dst] = src;
    ot_shape r = *xs;
    r.rank = xs->rank - 1;
    for (int d = 0, q = 0; d < xs->rank; d++)
        if (d != src) r.dims[q++] = xs->dims[d];
    r.dims[dst] *= xs->dims[src];
    *xs = r;
    return ot_build_reshape(C, ot_build_transpose(C, x, perm, np + 1), r);
}

static ot_status rule_convolution(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *x = i->operands[0], *y = i->operands[1];
    const ot_conv_dims *dn = i->attrs->conv;
    const ot_window *w = i->attrs->window;
    int ns = dn->nspatial;
    int64_t fgc = i->attrs->feature_group_count > 0 ? i->attrs->feature_group_count : 1;
    int64_t bgc = i->attrs->batch_group_count > 0 ? i->attrs->batch_group_count : 1;
    for (int k = 0; w && k < w->rank; k++)
        if (w->dims[k].reversal) return unimpl(i, "window reversal");
    const ot_shape *xs = &x->shape.array, *ys = &y->shape.array, *os = &i->shape.array;
    ot_dtype ot = os->dtype;
    ad_slot *sx = ad_slot_of(ad, x), *sy = ad_slot_of(ad, y);
    if (sx && sx->need) { /* JAX's _conv_general_dilated_transpose_lhs */
        ot_instr *rhs = y;
        ot_shape rs = *ys;
        int ko = (int)dn->kernel_output_feature, ki = (int)dn->kernel_input_feature;
        int64_t groups = fgc > 1 ? fgc : bgc;
        if (groups > 1) {
            rhs = axis_out_of(ad, rhs, &rs, ko, groups);
            rhs = axis_into(ad, rhs, &rs, ko, ki);
        }
        ot_conv_dims t;
        memset(&t, 0, sizeof t);
        t.nspatial = ns;
        t.input_batch = dn->output_batch;
        t.input_feature = dn->output_feature;
        t.kernel_output_feature = dn->kernel_input_feature;
        t.kernel_input_feature = dn->kernel_output_feature;
        t.output_batch = dn->input_batch;
        t.output_feature = dn->input_feature;
        ot_window tw;
        memset(&tw, 0, sizeof tw);
        tw.rank = ns;
        int64_t rev[OT_MAX_RANK];
        for (int k = 0; k < ns; k++) {
            t.input_spatial[k] = dn->output_spatial[k];
            t.kernel_spatial[k] = dn->kernel_spatial[k];
            t.output_spatial[k] = dn->input_spatial[k];
            rev[k] = dn->kernel_spatial[k];
            const ot_window_dim *wd = &w->dims[k];
            int64_t ld = dilate(xs->dims[dn->input_spatial[k]], wd->base_dilation);
            int64_t rd = dilate(ys->dims[dn->kernel_spatial[k]], wd->window_dilation);
            int64_t od = dilate(os->dims[dn->output_spatial[k]], wd->stride);
            int64_t before = rd - wd->pad_lo - 1;
            tw.dims[k].size = ys->dims[dn->kernel_spatial[k]];
            tw.dims[k].stride = wd->base_dilation;
            tw.dims[k].pad_lo = before;
            tw.dims[k].pad_hi = ld + rd - 1 - od - before;
            tw.dims[k].base_dilation = wd->stride;
            tw.dims[k].window_dilation = wd->window_dilation;
        }
        ot_instr *gg = convert_to(ad, g, ot, ys->dtype);
        ot_instr *out =
            ot_build_convolution(C, gg, ot_build_reverse(C, rhs, rev, ns), &tw, &t, groups, 1);
        if (bgc > 1) {
            ot_shape s2 = *xs;
            s2.dtype = ys->dtype;
            /* out has x's shape with the batch dimension / bgc and the feature dimension * bgc */
            s2.dims[dn->input_batch] = xs->dims[dn->input_batch] / bgc;
            s2.dims[dn->input_feature] = xs->dims[dn->input_feature] * bgc;
            out = axis_out_of(ad, out, &s2, (int)dn->input_feature, bgc);
            out = axis_into(ad, out, &s2, (int)dn->input_feature, (int)dn->input_batch);
        }
        ad_acc(ad, x, convert_to(ad, out, ys->dtype, xs->dtype));
    }
    if (sy && sy->need) { /* JAX's _conv_general_dilated_transpose_rhs */
        if (ot_shape_numel_unchecked(os) == 0) return OT_OK;
        ot_conv_dims t;
        memset(&t, 0, sizeof t);
        t.nspatial = ns;
        t.input_batch = dn->input_feature;
        t.input_feature = dn->input_batch;
        t.kernel_output_feature = dn->output_feature;
        t.kernel_input_feature = dn->output_batch;
        t.output_batch = dn->kernel_input_feature;
        t.output_feature = dn->kernel_output_feature;
        ot_window tw;
        memset(&tw, 0, sizeof tw);
        tw.rank = ns;
        for (int k = 0; k < ns; k++) {
            t.input_spatial[k] = dn->input_spatial[k];
            t.kernel_spatial[k] = dn->output_spatial[k];
            t.output_spatial[k] = dn->kernel_spatial[k];
            const ot_window_dim *wd = &w->dims[k];
            int64_t ld = dilate(xs->dims[dn->input_spatial[k]], wd->base_dilation);
            int64_t rd = dilate(ys->dims[dn->kernel_spatial[k]], wd->window_dilation);
            int64_t od = dilate(os->dims[dn->output_spatial[k]], wd->stride);
            tw.dims[k].size = os->dims[dn->output_spatial[k]];
            tw.dims[k].stride = wd->window_dilation;
            tw.dims[k].pad_lo = wd->pad_lo;
            tw.dims[k].pad_hi = (od - ld) + (rd - wd->pad_lo - 1);
            tw.dims[k].base_dilation = wd->base_dilation;
            tw.dims[k].window_dilation = wd->stride;
        }
        int64_t f2 = 1, b2 = 1;
        if (bgc > 1)
            f2 = bgc;
        else if (fgc > 1)
            b2 = fgc;
        ot_instr *gg = convert_to(ad, g, ot, xs->dtype);
        ot_instr *out = ot_build_convolution(C, x, gg, &tw, &t, f2, b2);
        ad_acc(ad, y, convert_to(ad, out, xs->dtype, ys->dtype));
    }
    return OT_OK;
}

/* ---- windows -----------------------------------------------------------------------------------
 */

static ot_status rule_reduce_window(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    if (i->noperands != 2) return unimpl(i, "variadic reduce-window");
    ot_instr *x = i->operands[0], *init = i->operands[1];
    const ot_shape *xs = &x->shape.array, *s = &i->shape.array;
    const ot_window *w = i->attrs->window;
    ad_slot *si = ad_slot_of(ad, init);
    if (si && si->need) return unimpl(i, "gradient of the init value");
    ot_opcode op = reducer_op(i->called[0]);
    ot_dtype t = xs->dtype;
    if (op == OT_OP_ADD) { /* JAX's _reduce_window_sum_transpose_rule */
        ot_pad_dim cfg[OT_MAX_RANK];
        ot_window tw;
        memset(&tw, 0, sizeof tw);
        tw.rank = w->rank;
        for (int d = 0; d < w->rank; d++) {
            const ot_window_dim *wd = &w->dims[d];
            if (wd->reversal) return unimpl(i, "window reversal");
            int64_t ld = dilate(xs->dims[d], wd->base_dilation);
            int64_t rd = dilate(wd->size, wd->window_dilation);
            int64_t od = dilate(s->dims[d], wd->stride);
            int64_t before = rd - wd->pad_lo - 1;
            cfg[d].lo = before;
            cfg[d].hi = ld + rd - 1 - od - before;
            cfg[d].interior = wd->stride - 1;
            tw.dims[d].size = wd->size;
            tw.dims[d].stride = wd->base_dilation;
            tw.dims[d].window_dilation = wd->window_dilation;
            tw.dims[d].base_dilation = 1;
        }
        ot_instr *z = ot_build_constant_scalar(C, t, 0);
        ot_instr *pg = ot_build_pad(C, g, z, cfg);
        ad_acc(ad, x, ot_build_reduce_window(C, &pg, &z, 1, &tw, add_fn(ad, t)));
        return OT_OK;
    }
    if (op == OT_OP_MAXIMUM || op == OT_OP_MINIMUM) { /* JAX's _select_and_scatter_add */
        for (int d = 0; d < w->rank; d++)
            if (w->dims[d].base_dilation != 1 || w->dims[d].window_dilation != 1 ||
                w->dims[d].reversal)
                return unimpl(i, "max/min pooling with dilation or reversal");
        ot_computation *selfn =
            op == OT_OP_MAXIMUM
                ? ad_binary_fn(ad, &ad->fns->ge_fn[t], t, OT_OP_COMPARE, OT_CMP_GE, "grad_ge")
                : ad_binary_fn(ad, &ad->fns->le_fn[t], t, OT_OP_COMPARE, OT_CMP_LE, "grad_le");
        ot_instr *z = ot_build_constant_scalar(C, t, 0);
        ad_acc(ad, x, ot_build_select_and_scatter(C, x, g, z, w, selfn, add_fn(ad, t)));
        return OT_OK;
    }
    return unimpl(i, "the reducer is not add, maximum or minimum");
}

/* ---- gather and scatter ------------------------------------------------------------------------
 */

static void put_int(ot_dtype t, void *buf, int64_t k, int64_t v) {
    switch (t) {
    case OT_S8: ((int8_t *)buf)[k] = (int8_t)v; break;
    case OT_U8: ((uint8_t *)buf)[k] = (uint8_t)v; break;
    case OT_S16: ((int16_t *)buf)[k] = (int16_t)v; break;
    case OT_U16: ((uint16_t *)buf)[k] = (uint16_t)v; break;
    case OT_S32: ((int32_t *)buf)[k] = (int32_t)v; break;
    case OT_U32: ((uint32_t *)buf)[k] = (uint32_t)v; break;
    default: ((int64_t *)buf)[k] = v; break;
    }
}

/* Per index-vector component k, the largest start index whose window fits: a value of the
 * indices' shape (the bound broadcast along index_vector_dim). */
static ot_instr *index_bounds(ad_ctx *ad, ot_instr *idx, int64_t ivd, const int64_t *map, int nmap,
                              const ot_shape *xs, const int64_t *window) {
    const ot_shape *is = &idx->shape.array;
    int64_t ub[OT_MAX_RANK] = {0};
    for (int k = 0; k < nmap; k++) {
        int64_t v = xs->dims[map[k]] - window[map[k]];
        put_int(is->dtype, ub, k, v < 0 ? 0 : v);
    }
    if (ivd < is->rank) {
        ot_shape vs;
        ot_shape_make(&vs, is->dtype, 1, (int64_t[]){nmap});
        ot_instr *kv = ot_build_constant(C, vs, ub);
        return ot_build_broadcast(C, kv, *is, &ivd, 1);
    }
    ot_instr *kv = ot_build_constant(C, ot_shape_scalar(is->dtype), ub);
    return is->rank ? ot_build_broadcast(C, kv, *is, NULL, 0) : kv;
}

static ot_status rule_gather(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *x = i->operands[0], *idx = i->operands[1];
    const ot_gather_dims *gd = i->attrs->gather;
    const ot_shape *xs = &x->shape.array;
    /* XLA's gather clamps start indices so the slice fits; scatter skips windows that do not
     * fit: clamp explicitly so the scatter-add lands where the gather read */
    ot_instr *ub = index_bounds(ad, idx, gd->index_vector_dim, gd->start_index_map,
                                gd->nstart_index_map, xs, gd->slice_sizes);
    ot_instr *lo = ad_full(ad, idx->shape.array.dtype, 0, &idx->shape.array);
    ot_instr *ci = ot_build_clamp(C, lo, idx, ub);
    ot_scatter_dims sd;
    memset(&sd, 0, sizeof sd);
    sd.nupdate_window = gd->noffset;
    memcpy(sd.update_window_dims, gd->offset_dims, sizeof sd.update_window_dims);
    sd.ninserted = gd->ncollapsed;
    memcpy(sd.inserted_window_dims, gd->collapsed_slice_dims, sizeof sd.inserted_window_dims);
    sd.nscatter_to_operand = gd->nstart_index_map;
    memcpy(sd.scatter_dims_to_operand_dims, gd->start_index_map,
           sizeof sd.scatter_dims_to_operand_dims);
    sd.nbatching = gd->nbatching;
    memcpy(sd.input_batching_dims, gd->operand_batching_dims, sizeof sd.input_batching_dims);
    memcpy(sd.scatter_indices_batching_dims, gd->start_indices_batching_dims,
           sizeof sd.scatter_indices_batching_dims);
    sd.index_vector_dim = gd->index_vector_dim;
    sd.indices_are_sorted = gd->indices_are_sorted;
    ot_instr *z = zeros_of(ad, xs);
    ad_acc(ad, x, ot_build_scatter(C, &z, 1, ci, &g, &sd, add_fn(ad, xs->dtype)));
    return OT_OK;
}

/* The scatter's updates read back from v (operand-shaped), zero where XLA's scatter skipped the
 * update window (out of bounds). */
static ot_instr *scatter_updates_of(ad_ctx *ad, ot_instr *i, ot_instr *v) {
    if (!v) return NULL; /* after a builder error */
    ot_instr *x = i->operands[0], *idx = i->operands[1], *u = i->operands[2];
    const ot_scatter_dims *sd = i->attrs->scatter;
    const ot_shape *xs = &x->shape.array, *us = &u->shape.array, *is = &idx->shape.array;
    ot_gather_dims gd;
    memset(&gd, 0, sizeof gd);
    gd.noffset = sd->nupdate_window;
    memcpy(gd.offset_dims, sd->update_window_dims, sizeof gd.offset_dims);
    gd.ncollapsed = sd->ninserted;
    memcpy(gd.collapsed_slice_dims, sd->inserted_window_dims, sizeof gd.collapsed_slice_dims);
    gd.nstart_index_map = sd->nscatter_to_operand;
    memcpy(gd.start_index_map, sd->scatter_dims_to_operand_dims, sizeof gd.start_index_map);
    gd.nbatching = sd->nbatching;
    memcpy(gd.operand_batching_dims, sd->input_batching_dims, sizeof gd.operand_batching_dims);
    memcpy(gd.start_indices_batching_dims, sd->scatter_indices_batching_dims,
           sizeof gd.start_indices_batching_dims);
    gd.index_vector_dim = sd->index_vector_dim;
    gd.indices_are_sorted = sd->indices_are_sorted;
    gd.nslice_sizes = xs->rank;
    for (int d = 0, q = 0; d < xs->rank; d++) {
        if (is_int(sd->inserted_window_dims, sd->ninserted, d) ||
            is_int(sd->input_batching_dims, sd->nbatching, d))
            gd.slice_sizes[d] = 1;
        else
            gd.slice_sizes[d] = us->dims[sd->update_window_dims[q++]];
    }
    ot_instr *got = ot_build_gather(C, v, idx, &gd);
    /* in bounds: 0 <= index <= dim - window for every component */
    ot_instr *ub = index_bounds(ad, idx, sd->index_vector_dim, sd->scatter_dims_to_operand_dims,
                                sd->nscatter_to_operand, xs, gd.slice_sizes);
    ot_instr *ok = cmp(ad, idx, ub, OT_CMP_LE);
    if (!ot_dtype_is_unsigned_int(is->dtype))
        ok = bin(ad, OT_OP_AND, ok, cmp(ad, idx, ad_full(ad, is->dtype, 0, is), OT_CMP_GE));
    if (sd->index_vector_dim < is->rank) {
        ot_computation *andf =
            ad_binary_fn(ad, &ad->fns->and_fn, OT_PRED, OT_OP_AND, OT_CMP_EQ, "grad_and");
        ot_instr *t = ot_build_constant_scalar(C, OT_PRED, 1);
        ok = ot_build_reduce(C, &ok, &t, 1, &sd->index_vector_dim, 1, andf);
    }
    int64_t sdims[OT_MAX_RANK];
    int nsd = 0;
    for (int d = 0; d < us->rank; d++)
        if (!is_int(sd->update_window_dims, sd->nupdate_window, d)) sdims[nsd++] = d;
    ot_shape ps = *us;
    ps.dtype = OT_PRED;
    ot_instr *mask = ot_build_broadcast(C, ok, ps, sdims, nsd);
    return sel(ad, mask, got, ad_full(ad, v->shape.array.dtype, 0, us));
}

static bool is_replace(const ot_computation *f) {
    return f && f->nparams == 2 && f->root && f->root == f->params[1];
}

static ot_status rule_scatter(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    if (i->noperands != 3) return unimpl(i, "variadic scatter");
    ot_instr *x = i->operands[0], *idx = i->operands[1], *u = i->operands[2];
    ad_slot *su = ad_slot_of(ad, u);
    bool nu = su && su->need;
    if (reducer_op(i->called[0]) == OT_OP_ADD) {
        ad_acc(ad, x, g);
        if (nu) ad_acc(ad, u, scatter_updates_of(ad, i, g));
        return OT_OK;
    }
    if (is_replace(i->called[0])) {
        /* the operand keeps what no update overwrote; each update gets the adjoint of the
         * element it wrote, when it is the one that won (JAX's scatter JVP: scatter the
         * updates' ids, gather them back, compare) */
        const ot_shape *us = &u->shape.array, *xs = &x->shape.array;
        ot_instr *zu = zeros_of(ad, us);
        ad_acc(ad, x, ot_build_scatter(C, &g, 1, idx, &zu, i->attrs->scatter, i->called[0]));
        if (nu) {
            ot_shape ids = *us;
            ids.dtype = OT_S32;
            int64_t n = ot_shape_numel_unchecked(us);
            ot_shape flat;
            ot_shape_make(&flat, OT_S32, 1, &n);
            /* ids 1..n (0: no update) */
            ot_instr *iota = ot_build_reshape(C, ot_build_iota(C, flat, 0), ids);
            ot_instr *id = bin(ad, OT_OP_ADD, iota, ad_full(ad, OT_S32, 1, &ids));
            ot_shape xids = *xs;
            xids.dtype = OT_S32;
            ot_computation *rep = ad_binary_fn(ad, &ad->fns->replace_fn[OT_S32], OT_S32,
                                               OT_OP_PARAMETER, OT_CMP_EQ, "grad_replace");
            ot_instr *zx = ad_full(ad, OT_S32, 0, &xids);
            ot_instr *won = ot_build_scatter(C, &zx, 1, idx, &id, i->attrs->scatter, rep);
            ot_instr *back = scatter_updates_of(ad, i, won); /* 0 where skipped */
            ot_instr *mine = cmp(ad, back, id, OT_CMP_EQ);
            ad_acc(ad, u, sel(ad, mine, scatter_updates_of(ad, i, g), zu));
        }
        return OT_OK;
    }
    return unimpl(i, "the combiner is not add or replace");
}

static ot_status rule_convert(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *x = i->operands[0];
    ad_acc(ad, x, convert_to(ad, g, i->shape.array.dtype, x->shape.array.dtype));
    return OT_OK;
}

static ot_status rule_reshape(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ad_acc(ad, i->operands[0], ot_build_reshape(C, g, i->operands[0]->shape.array));
    return OT_OK;
}

static ot_status rule_reverse(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ad_acc(ad, i->operands[0], ot_build_reverse(C, g, i->attrs->dims, i->attrs->ndims));
    return OT_OK;
}

static ot_status rule_reduce_precision(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ad_acc(ad, i->operands[0],
           ot_build_reduce_precision(C, g, i->attrs->exponent_bits, i->attrs->mantissa_bits));
    return OT_OK;
}

ot_status ad_rule(ad_ctx *ad, ot_instr *i, ot_instr *g);

static ot_status rule_gte(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    ot_instr *t = i->operands[0];
    if (t->opcode == OT_OP_CONDITIONAL || t->opcode == OT_OP_SORT) {
        /* per-element adjoints, used by its rule */
        ad_slot *ts = ad_slot_of(ad, t);
        if (!ts || !ts->need) return OT_OK;
        if (!ts->elem && !(ts->elem = ot_calloc((size_t)t->shape.ntuple, sizeof *ts->elem)))
            return ot_error(OT_ERR_OUT_OF_MEMORY, "autodiff: out of memory");
        ot_instr **e = &ts->elem[i->attrs->index];
        *e = *e ? ot_build_binary(C, OT_OP_ADD, *e, g) : g;
        return OT_OK;
    }
    /* get-tuple-element of a tuple instruction was forwarded before the reverse pass: the
     * producer is an op with a tuple result, none of which has a rule; its own message says
     * why */
    OT_CHECK(ad_rule(ad, t, NULL));
    return unimpl(t, "its tuple result is differentiated through get-tuple-element");
}

/* A tuple's elements get their adjoints from the op that consumes the tuple (a conditional's
 * rule adds them to the tuple's operands directly); any other consumer has no rule. */
static ot_status rule_tuple(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    (void)ad;
    (void)i;
    (void)g;
    return OT_OK;
}

typedef ot_status (*rule_fn)(ad_ctx *, ot_instr *, ot_instr *);

static rule_fn rule_for(ot_opcode op) {
    if (ot_opcode_is_elementwise_unary(op)) return rule_unary;
    if (ot_opcode_is_elementwise_binary(op)) return op == OT_OP_COMPARE ? NULL : rule_binary;
    switch (op) {
    case OT_OP_SELECT: return rule_select;
    case OT_OP_CLAMP: return rule_clamp;
    case OT_OP_CONVERT: return rule_convert;
    case OT_OP_REDUCE_PRECISION: return rule_reduce_precision;
    case OT_OP_BROADCAST: return rule_broadcast;
    case OT_OP_RESHAPE:
    case OT_OP_BITCAST: return rule_reshape;
    case OT_OP_TRANSPOSE: return rule_transpose;
    case OT_OP_SLICE: return rule_slice;
    case OT_OP_CONCATENATE: return rule_concatenate;
    case OT_OP_PAD: return rule_pad;
    case OT_OP_REVERSE: return rule_reverse;
    case OT_OP_DYNAMIC_SLICE: return rule_dynamic_slice;
    case OT_OP_DYNAMIC_UPDATE_SLICE: return rule_dynamic_update_slice;
    case OT_OP_REDUCE: return rule_reduce;
    case OT_OP_DOT: return rule_dot;
    case OT_OP_CONVOLUTION: return rule_convolution;
    case OT_OP_REDUCE_WINDOW: return rule_reduce_window;
    case OT_OP_GATHER: return rule_gather;
    case OT_OP_SCATTER: return rule_scatter;
    case OT_OP_GET_TUPLE_ELEMENT: return rule_gte;
    case OT_OP_TUPLE: return rule_tuple;
    case OT_OP_CONDITIONAL: return ad_rule_conditional;
    case OT_OP_SORT: return ad_rule_sort;
    default: return NULL;
    }
}

ot_status ad_rule(ad_ctx *ad, ot_instr *i, ot_instr *g) {
    rule_fn f = rule_for(i->opcode);
    if (!f) {
        switch (i->opcode) {
        case OT_OP_WHILE:
            return unimpl(i, "a loop is differentiated by unrolling it, which needs a static trip "
                             "count (an integer counter from a constant, stepped by a constant, "
                             "compared with a constant); this loop's is not static");
        case OT_OP_CUSTOM_CALL:
            return ot_error(OT_ERR_UNIMPLEMENTED,
                            "autodiff: no reverse-mode rule for custom-call (%s, target \"%s\")",
                            i->name,
                            i->attrs->custom_call_target ? i->attrs->custom_call_target : "");
        default: return unimpl(i, NULL);
        }
    }
    if (!g) { /* zero adjoint: nothing to add (a conditional's may be in its elements) */
        ad_slot *sl = ad_slot_of(ad, i);
        if ((i->opcode != OT_OP_CONDITIONAL && i->opcode != OT_OP_SORT) || !sl || !sl->elem)
            return OT_OK;
    }
    return f(ad, i, g);
}
