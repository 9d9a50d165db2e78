/* Algebraic simplification. Every rule keeps results bit-identical, floats included:
 *   x+0 → x        integers; floats only for a -0.0 constant (+0.0 would turn -0.0 into +0.0)
 *   x-0 → x        integers; floats only for a +0.0 constant
 *   x*1, x/1 → x   any type (NaN*1 is NaN, -0*1 is -0)
 *   x/2^k → x*2^-k f32/f64 where 2^-k is exactly representable (both round the same real value)
 *   -(-x) → x, not(not(x)) → x
 *   reshape(reshape(x)) → reshape(x); reshape/transpose/broadcast/convert/slice that change
 *   nothing → x; transpose∘transpose and broadcast∘broadcast composed into one
 *   select(splat constant p, a, b) → a or b; select(p, a, a) → a
 *   gather(f(x, y, ...), idx) → f(gather(x, idx), gather(y, idx), ...) for elementwise f, and
 *   gather(broadcast(b), idx) → broadcast(b) when b's dimensions are batching dimensions
 *   (conditions below: never more work)
 *   reduce over size-1 dimensions with an identity init (integer/pred add, or, xor, and) →
 *   reshape
 *   transpose(dot(a, b)) that moves b's free dims before a's → dot(b, a) (conditions below)
 *   transpose(reshape(transpose(x))) where the reshape only inserts or deletes size-1 dims →
 *   reshape(transpose(x)) or reshape(x); a transpose that only moves size-1 dims → reshape;
 *   transpose(broadcast(x)) → broadcast(x) or broadcast(transpose(x))
 *   reduce-window(pad(y, 0), 0) with an add reducer → reduce-window(y, 0) with the pad as
 *   window padding and base dilation (conditions below)
 *   dot(transpose(x), y) → dot(x, y) with x's dimension numbers (conditions below)
 *   reverse(scan(reverse(x))) along the scan's dim → the opposite scan of x (conditions below)
 *   gather/scatter indices reshape(v) that append a unit index vector dim → v (the dim implied)
 * Not applied (they change float results): x*0 → 0, x-x → 0, x+0.0 → x. */
#include "compiler_internal.h"
#include "exec/numerics.h"

#include <math.h>

/* The single value of a constant whose elements are all equal, or of a broadcast of one. */
static const void *splat_value(const ot_instr *i, ot_dtype *dt) {
    while (i->opcode == OT_OP_BROADCAST) i = i->operands[0];
    if (i->opcode != OT_OP_CONSTANT || i->shape.kind != OT_IR_ARRAY) return NULL;
    const ot_literal *l = i->attrs->literal;
    if (!l || l->elided || !l->data) return NULL;
    size_t es = ot_dtype_size(i->shape.array.dtype);
    int64_t n = ot_shape_numel_unchecked(&i->shape.array);
    if (es == 0 || n < 1 || l->nbytes != n * (int64_t)es) return NULL;
    const unsigned char *d = l->data;
    for (int64_t k = 1; k < n; k++)
        if (memcmp(d, d + k * (int64_t)es, es) != 0) return NULL;
    *dt = i->shape.array.dtype;
    return d;
}

/* Value as a double (sign of zero kept); false for types with no exact double view. */
static bool value_of(const void *p, ot_dtype t, double *out) {
    switch (t) {
    case OT_PRED: *out = *(const uint8_t *)p ? 1 : 0; return true;
    case OT_S8: *out = *(const int8_t *)p; return true;
    case OT_S16: *out = *(const int16_t *)p; return true;
    case OT_S32: *out = *(const int32_t *)p; return true;
    case OT_S64: *out = (double)*(const int64_t *)p; return true;
    case OT_U8: *out = *(const uint8_t *)p; return true;
    case OT_U16: *out = *(const uint16_t *)p; return true;
    case OT_U32: *out = *(const uint32_t *)p; return true;
    case OT_U64: *out = (double)*(const uint64_t *)p; return true;
    case OT_F16: *out = ot_f16_to_f32(*(const uint16_t *)p); return true;
    case OT_BF16: *out = ot_bf16_to_f32(*(const uint16_t *)p); return true;
    case OT_F32: *out = *(const float *)p; return true;
    case OT_F64: *out = *(const double *)p; return true;
    default: return false;
    }
}

typedef enum { V_OTHER, V_PZERO, V_NZERO, V_ONE } vclass;

static vclass classify(const ot_instr *i) {
    ot_dtype t;
    const void *p = splat_value(i, &t);
    double v;
    if (!p || !value_of(p, t, &v)) return V_OTHER;
    if (v == 1) return V_ONE;
    if (v == 0) return signbit(v) ? V_NZERO : V_PZERO;
    return V_OTHER;
}

static bool is_identity_perm(const int64_t *p, int n) {
    for (int k = 0; k < n; k++)
        if (p[k] != k) return false;
    return true;
}

/* Builds through the sticky-error builder and turns a recorded failure into a status. */
static ot_status built(ot_computation *c, ot_instr *x, ot_instr **out) {
    *out = x;
    if (x) return OT_OK;
    ot_status s = ot_module_status(c->module);
    return s != OT_OK ? s : ot_error(OT_ERR_INTERNAL, "simplify: builder returned NULL");
}

/* ---- gather through elementwise producers ----
 * Every element of a gather's result is a copy of one operand element, at a position that only
 * the indices' values and the dimension numbers decide (out-of-range starts clamped the same
 * way whatever the operand holds). An elementwise op's element at a position depends only on its
 * operands at that position. So gather(f(x1, ..., xn), idx) = f(gather(x1, idx), ...,
 * gather(xn, idx)) bit for bit, and the rewrite lets f run on the gathered elements only instead
 * of materializing f over the whole operand (take_along_axis of a log-softmax reads one element
 * per row of a [rows, classes] tensor). Applied when it cannot add work: the producer's only
 * user is the gather and the gather has at most the producer's element count, or the gather has
 * at most an eighth of it (the producer stays for its other users and f is computed again on
 * the gathered elements only). A rank-0 operand of select or clamp stays as it is; a broadcast
 * operand becomes a broadcast of its source when that source's dimensions are all batching
 * dimensions of the gather (or it is a scalar), and the op is left alone when a broadcast
 * operand cannot (gathering the broadcast would materialize it at the op's size); any other
 * operand is gathered. */
#define GPUSH_MAX_DEPTH 64

static bool gpush_op(const ot_instr *x) {
    if (ot_instr_has_side_effect(x) || x->shape.kind != OT_IR_ARRAY) return false;
    if (x->opcode == OT_OP_MAP || x->opcode == OT_OP_BITCAST_CONVERT) return false;
    return ot_opcode_is_elementwise(x->opcode);
}

static bool gpush_worth(const ot_instr *g, const ot_instr *x) {
    int64_t go = ot_shape_numel_unchecked(&g->shape.array);
    int64_t xo = ot_shape_numel_unchecked(&x->shape.array);
    if (go < 0 || xo < 0) return false;
    if (x->nusers == 1) return go <= xo;
    return go <= xo / 8;
}

/* The gather's output dimension that the indices' (batch) dimension s becomes. */
static int64_t gather_out_dim_of_index_dim(const ot_gather_dims *dn, int out_rank, int64_t s) {
    int64_t pos = s > dn->index_vector_dim ? s - 1 : s; /* among the index batch dims */
    for (int64_t d = 0; d < out_rank; d++) {
        bool offset = false;
        for (int k = 0; k < dn->noffset; k++) offset |= dn->offset_dims[k] == d;
        if (offset) continue;
        if (pos-- == 0) return d;
    }
    return -1;
}

/* The gather's output dimension that operand dimension d, a window (offset) dimension, becomes:
 * the offset dims take the operand dims neither collapsed nor batching, in order; -1 when d is
 * one of those. */
static int64_t gather_offset_out_dim(const ot_gather_dims *dn, int operand_rank, int64_t d) {
    int64_t ord = 0;
    for (int64_t e = 0; e <= d && e < operand_rank; e++) {
        bool other = false;
        for (int k = 0; k < dn->ncollapsed; k++) other |= dn->collapsed_slice_dims[k] == e;
        for (int k = 0; k < dn->nbatching; k++) other |= dn->operand_batching_dims[k] == e;
        if (e == d) return other || ord >= dn->noffset ? -1 : dn->offset_dims[ord];
        ord += !other;
    }
    return -1;
}

/* The dimensions of a broadcast of bc's source to g's result shape that equal gather(bc, idx)
 * (g's dimension numbers): each broadcast dimension of bc must be an operand batching dimension
 * of g, or a window dimension the slice takes whole (its start clamps to 0 whatever the index:
 * slogdet's diagonal gather reads a per-matrix mask broadcast along the batch this way), in
 * increasing order of their result dimensions; false when there is no such broadcast. */
static bool gpush_broadcast_dims(const ot_instr *g, const ot_instr *bc, int64_t *dims) {
    const ot_gather_dims *dn = g->attrs->gather;
    const ot_instr *src = bc->operands[0];
    if (src->shape.kind != OT_IR_ARRAY) return false;
    int n = bc->attrs->ndims, out_rank = g->shape.array.rank;
    const ot_shape *os = &bc->shape.array; /* the gather's operand */
    for (int j = 0; j < n; j++) {
        int64_t d = bc->attrs->dims[j], od = -1;
        bool batching = false;
        for (int k = 0; k < dn->nbatching; k++)
            if (dn->operand_batching_dims[k] == d) {
                batching = true;
                od = gather_out_dim_of_index_dim(dn, out_rank, dn->start_indices_batching_dims[k]);
            }
        if (!batching && d < dn->nslice_sizes && dn->slice_sizes[d] == os->dims[d])
            od = gather_offset_out_dim(dn, os->rank, d);
        if (od < 0 || (j > 0 && od <= dims[j - 1])) return false;
        if (g->shape.array.dims[od] != src->shape.array.dims[j]) return false;
        dims[j] = od;
    }
    return true;
}

/* gather(broadcast(b), idx) as a broadcast of b, or NULL when the rule does not apply. */
static ot_status gpush_broadcast(ot_computation *c, const ot_instr *g, const ot_instr *bc,
                                 ot_instr **out) {
    *out = NULL;
    int64_t dims[OT_MAX_RANK];
    if (!gpush_broadcast_dims(g, bc, dims)) return OT_OK;
    int n = bc->attrs->ndims;
    ot_shape to = g->shape.array; /* g's dims, the broadcast's own dtype */
    to.dtype = bc->shape.array.dtype;
    return built(c, ot_build_broadcast(c, bc->operands[0], to, n ? dims : NULL, n), out);
}

/* gather(x, idx) with g's dimension numbers, pushed into x as far as the rule allows. */
static ot_status gpush(ot_computation *c, const ot_instr *g, ot_instr *x, int depth,
                       ot_instr **out) {
    *out = NULL;
    ot_instr *idx = g->operands[1];
    if (x->opcode == OT_OP_BROADCAST) {
        OT_CHECK(gpush_broadcast(c, g, x, out));
        if (*out) return OT_OK;
    }
    if (depth >= GPUSH_MAX_DEPTH || !gpush_op(x) || !gpush_worth(g, x) || x->noperands > 3) {
        if (depth == 0) return OT_OK; /* nothing to rewrite */
        return built(c, ot_build_gather(c, x, idx, g->attrs->gather), out);
    }
    int xr = x->shape.array.rank;
    for (int k = 0; k < x->noperands; k++) {
        const ot_instr *o = x->operands[k];
        if (o->shape.kind != OT_IR_ARRAY) goto plain;
        if (o->shape.array.rank == 0 && xr > 0 &&
            (x->opcode == OT_OP_SELECT || x->opcode == OT_OP_CLAMP))
            continue;
        if (o->shape.array.rank != xr) goto plain;
        for (int d = 0; d < xr; d++)
            if (o->shape.array.dims[d] != x->shape.array.dims[d]) goto plain;
        /* a broadcast that would be gathered as it is: materialized at x's size, no gain */
        int64_t bd[OT_MAX_RANK];
        if (o->opcode == OT_OP_BROADCAST && !gpush_broadcast_dims(g, o, bd)) goto plain;
    }
    ot_instr *ops[3];
    for (int k = 0; k < x->noperands; k++) {
        ot_instr *o = x->operands[k];
        if (o->shape.array.rank == 0 && xr > 0) {
            ops[k] = o;
            continue;
        }
        OT_CHECK(gpush(c, g, o, depth + 1, &ops[k]));
    }
    ot_ir_shape hint = {.kind = OT_IR_ARRAY};
    hint.array.rank = -1;
    hint.array.dtype = x->shape.array.dtype;
    const ot_ir_shape *h = x->opcode == OT_OP_CONVERT ? &hint : NULL;
    return built(
        c, ot_build(c, x->opcode, ops, x->noperands, x->attrs, x->called, x->ncalled, h, NULL),
        out);
plain:
    if (depth == 0) return OT_OK;
    return built(c, ot_build_gather(c, x, idx, g->attrs->gather), out);
}

/* reduce(x, init) over dimensions of size 1 only, with an integer or pred reducer for which init
 * is the identity (add, or, xor with 0; and with all ones): reducer(init, x) = x for every x, so
 * the reduce is reshape(x). JAX's take_along_axis checks its index bounds this way. */
static bool reduce_is_reshape(const ot_instr *i) {
    if (i->noperands != 2 || i->ncalled != 1 || i->shape.kind != OT_IR_ARRAY) return false;
    const ot_instr *x = i->operands[0];
    if (x->shape.kind != OT_IR_ARRAY) return false;
    for (int k = 0; k < i->attrs->ndims; k++) {
        int64_t d = i->attrs->dims[k];
        if (d < 0 || d >= x->shape.array.rank || x->shape.array.dims[d] != 1) return false;
    }
    const ot_computation *rc = i->called[0];
    const ot_instr *rr = rc->root;
    if (!rr || rc->nparams != 2 || rr->noperands != 2 ||
        rr->operands[0]->opcode != OT_OP_PARAMETER || rr->operands[1]->opcode != OT_OP_PARAMETER ||
        rr->operands[0] == rr->operands[1])
        return false;
    ot_dtype t = x->shape.array.dtype, it;
    if (!(ot_dtype_is_integer(t) || t == OT_PRED) || t != i->shape.array.dtype) return false;
    const void *p = splat_value(i->operands[1], &it);
    size_t es = ot_dtype_size(t);
    if (!p || it != t || es == 0 || es > 8) return false;
    uint64_t v = 0;
    memcpy(&v, p, es);
    uint64_t ones = es == 8 ? ~0ull : (1ull << (8 * es)) - 1;
    if (t == OT_PRED) ones = 1;
    switch (rr->opcode) {
    case OT_OP_ADD:
    case OT_OP_OR:
    case OT_OP_XOR: return v == 0;
    case OT_OP_AND: return v == ones;
    default: return false;
    }
}

/* reduce(x, init) over dimensions of size 1 only, float, with a reducer that is one add or
 * multiply of its two parameters: each output element folds its one input element into init,
 * reducer(init, x) — not lane-ordered, since no non-unit dim is reduced — so the reduce is that op
 * on broadcast(init) and reshape(x), in the reducer's operand order: the same bits, and an
 * elementwise op that fuses into loops and row fusions (JAX's gradient of an L2 normalization
 * sums a [rows, 1] array). *op gets the op, *init_first whether init is its first operand. */
static bool reduce_is_map(const ot_instr *i, ot_opcode *op, bool *init_first) {
    if (i->noperands != 2 || i->ncalled != 1 || i->shape.kind != OT_IR_ARRAY) return false;
    const ot_instr *x = i->operands[0], *init = i->operands[1];
    if (x->shape.kind != OT_IR_ARRAY || init->shape.kind != OT_IR_ARRAY ||
        init->shape.array.rank != 0)
        return false;
    for (int k = 0; k < i->attrs->ndims; k++) {
        int64_t d = i->attrs->dims[k];
        if (d < 0 || d >= x->shape.array.rank || x->shape.array.dims[d] != 1) return false;
    }
    const ot_computation *rc = i->called[0];
    const ot_instr *rr = rc->root;
    if (!rr || rc->nparams != 2 || rc->ninstrs != 3 || rr->noperands != 2 ||
        rr->operands[0]->opcode != OT_OP_PARAMETER || rr->operands[1]->opcode != OT_OP_PARAMETER ||
        rr->operands[0] == rr->operands[1])
        return false;
    ot_dtype t = x->shape.array.dtype;
    if (!ot_dtype_is_float(t) || t != i->shape.array.dtype || t != init->shape.array.dtype)
        return false;
    if (rr->opcode != OT_OP_ADD && rr->opcode != OT_OP_MULTIPLY) return false;
    *op = rr->opcode;
    *init_first = rr->operands[0]->attrs->index == 0;
    return true;
}

/* transpose(d = dot(a, b)) → dot(b, a) with the operands' dimension numbers swapped, when the
 * transpose keeps d's batch dims in place and puts b's free dims (in their order) before a's (in
 * theirs): dot(b, a)'s result is [batch, b free, a free], exactly the transposed layout. Each
 * element is the same sum of the same products in the same order (contracting dims stay paired
 * in their listed order; x * y = y * x in IEEE arithmetic, flushing included), so the values are
 * bit-identical in the reference. Autodiff writes weight gradients this way (transpose(dot(g, x))
 * over the batch dims), and the rewrite saves materializing the transpose. Applied when the
 * transpose is d's only user (else d would be computed twice) and both operands have one dtype. */
static ot_status dot_transpose(ot_computation *c, const ot_instr *t, const ot_instr *d,
                               ot_instr **out) {
    *out = NULL;
    const ot_dot_dims *dn = d->attrs->dot;
    if (!dn || d->nusers != 1 || d->noperands != 2 || d->shape.kind != OT_IR_ARRAY) return OT_OK;
    ot_instr *a = d->operands[0], *b = d->operands[1];
    if (a->shape.kind != OT_IR_ARRAY || b->shape.kind != OT_IR_ARRAY ||
        a->shape.array.dtype != b->shape.array.dtype)
        return OT_OK;
    int nb = dn->nbatch, n = t->attrs->ndims, r = d->shape.array.rank;
    int nlf = a->shape.array.rank - nb - dn->ncontract,
        nrf = b->shape.array.rank - nb - dn->ncontract;
    if (n != r || nlf < 0 || nrf < 0 || nb + nlf + nrf != r) return OT_OK;
    const int64_t *p = t->attrs->dims; /* result dim k = d's dim p[k] */
    for (int k = 0; k < r; k++) {
        int64_t want = k < nb ? k : k < nb + nrf ? nb + nlf + (k - nb) : nb + (k - nb - nrf);
        if (p[k] != want) return OT_OK;
    }
    ot_dot_dims sw = *dn;
    memcpy(sw.lhs_batch, dn->rhs_batch, sizeof sw.lhs_batch);
    memcpy(sw.rhs_batch, dn->lhs_batch, sizeof sw.rhs_batch);
    memcpy(sw.lhs_contract, dn->rhs_contract, sizeof sw.lhs_contract);
    memcpy(sw.rhs_contract, dn->lhs_contract, sizeof sw.rhs_contract);
    ot_attrs at = *d->attrs;
    at.dot = &sw;
    if (at.nprecision == 2) {
        at.precision[0] = d->attrs->precision[1];
        at.precision[1] = d->attrs->precision[0];
    }
    ot_ir_shape hint = {.kind = OT_IR_ARRAY};
    hint.array.rank = -1;
    hint.array.dtype = d->shape.array.dtype; /* the result dtype, when the HLO gave its own */
    ot_instr *ops[2] = {b, a};
    return built(c, ot_build(c, OT_OP_DOT, ops, 2, &at, NULL, 0, &hint, NULL), out);
}

/* True when the fast dot can read operand x as a GEMM matrix where it lies: its free dims
 * (increasing) merge into one index, its contracting dims (in con's order) into another, and one
 * of the two has stride 1 (src/exec/fast_dot.c, view_of: batch dims may lie anywhere). */
static bool gemm_readable(const ot_shape *x, const int64_t *bat, int nb, const int64_t *con,
                          int nc) {
    int64_t st[OT_MAX_RANK], acc = 1, fr[OT_MAX_RANK];
    int nf = 0;
    for (int d = x->rank - 1; d >= 0; d--) {
        st[d] = acc;
        acc *= x->dims[d];
    }
    for (int d = 0; d < x->rank; d++) {
        bool other = false;
        for (int k = 0; k < nb; k++) other |= bat[k] == d;
        for (int k = 0; k < nc; k++) other |= con[k] == d;
        if (!other) fr[nf++] = d;
    }
    int64_t inner[2];
    const int64_t *grp[2] = {fr, con};
    int ng[2] = {nf, nc};
    for (int g = 0; g < 2; g++) {
        int64_t last = -1;
        for (int k = 0; k < ng[g]; k++) {
            int64_t d = grp[g][k];
            if (x->dims[d] == 1) continue;
            if (last >= 0 && st[last] != st[d] * x->dims[d]) return false;
            last = d;
        }
        inner[g] = last < 0 ? 1 : st[last];
    }
    return inner[0] == 1 || inner[1] == 1;
}

/* dot(transpose(x), y) (either operand, or both) → dot(x, y) with the operand's batch and
 * contracting dims mapped through the permutation. The same products are summed in the same
 * order (contracting dims stay paired in their listed order), so the result is bit-identical,
 * provided the operand's free dims keep their relative order (they give the result's dims in
 * that order). Applied when the transpose is used by dots only (once each has folded it, it is
 * dead) and the fast dot can read x in place (gemm_readable): the transpose's copy is then
 * saved; otherwise the dot would copy x itself, once per dot using it. */
static ot_status dot_fold_transpose(ot_computation *c, const ot_instr *d, ot_instr **out) {
    *out = NULL;
    const ot_dot_dims *dn = d->attrs->dot;
    if (!dn || d->noperands != 2 || d->shape.kind != OT_IR_ARRAY) return OT_OK;
    ot_dot_dims nd = *dn;
    ot_instr *ops[2] = {d->operands[0], d->operands[1]};
    bool any = false;
    for (int k = 0; k < 2; k++) {
        const ot_instr *t = ops[k];
        if (t->opcode != OT_OP_TRANSPOSE || t->shape.kind != OT_IR_ARRAY) continue;
        ot_instr *x = t->operands[0];
        if (x->shape.kind != OT_IR_ARRAY || t->attrs->ndims != x->shape.array.rank) continue;
        bool dots_only = true;
        for (int u = 0; u < t->nusers; u++) dots_only &= t->users[u]->opcode == OT_OP_DOT;
        if (!dots_only) continue;
        const int64_t *p = t->attrs->dims; /* t's dim j is x's dim p[j] */
        int64_t *bat = k ? nd.rhs_batch : nd.lhs_batch,
                *con = k ? nd.rhs_contract : nd.lhs_contract;
        const int64_t *obat = k ? dn->rhs_batch : dn->lhs_batch,
                      *ocon = k ? dn->rhs_contract : dn->lhs_contract;
        int64_t nbat[OT_MAX_RANK], ncon[OT_MAX_RANK];
        for (int j = 0; j < dn->nbatch; j++) nbat[j] = p[obat[j]];
        for (int j = 0; j < dn->ncontract; j++) ncon[j] = p[ocon[j]];
        /* t's free dims, in increasing order, must stay increasing in x */
        int64_t last = -1;
        bool kept = true;
        for (int j = 0; j < t->attrs->ndims && kept; j++) {
            bool other = false;
            for (int q = 0; q < dn->nbatch; q++) other |= obat[q] == j;
            for (int q = 0; q < dn->ncontract; q++) other |= ocon[q] == j;
            if (other) continue;
            kept = p[j] > last;
            last = p[j];
        }
        if (!kept || !gemm_readable(&x->shape.array, nbat, dn->nbatch, ncon, dn->ncontract))
            continue;
        memcpy(bat, nbat, sizeof nbat[0] * (size_t)dn->nbatch);
        memcpy(con, ncon, sizeof ncon[0] * (size_t)dn->ncontract);
        ops[k] = x;
        any = true;
    }
    if (!any) return OT_OK;
    ot_attrs at = *d->attrs;
    at.dot = &nd;
    ot_ir_shape hint = {.kind = OT_IR_ARRAY};
    hint.array.rank = -1;
    hint.array.dtype = d->shape.array.dtype;
    return built(c, ot_build(c, OT_OP_DOT, ops, 2, &at, NULL, 0, &hint, NULL), out);
}

/* The replacement for i, or NULL when no rule applies. */
/* ---- pad into reduce-window ----
 * reduce-window(pad(y, v), init) whose reducer is an add of its two parameters, with pad value v
 * and init the same constant zero (floats: +0 or -0; integers: 0), becomes reduce-window(y,
 * init) with the pad's edges added to the window's padding and its interior as base dilation
 * (XLA's window semantics: the same input position for every tap, the taps in padding or
 * dilation holes skipped). The reference folds acc = add(acc, x) from init over the taps in
 * row-major order: a tap of the pad adds v, which leaves every accumulator the fold can hold
 * unchanged (x + -0 = x for every x; with init +0 the accumulator is never -0, since a sum is -0
 * only of two -0 addends, and x + +0 = x for every x but -0; a sum is already flushed and a NaN
 * already quiet, and integer + 0 is exact), so skipping those taps gives the same bits. The pad
 * (25.7 MB for the average-pool gradient of `xla_compare.py --group extra`) is never written.
 * Only for a pad whose one user is the reduce-window, edges >= 0, and window dims without base
 * dilation where the pad has interior padding. */
static bool add_reducer(const ot_computation *r) {
    const ot_instr *root = r ? r->root : NULL;
    return root && r->nparams == 2 && root->opcode == OT_OP_ADD && root->noperands == 2 &&
           root->operands[0]->opcode == OT_OP_PARAMETER &&
           root->operands[1]->opcode == OT_OP_PARAMETER && root->operands[0] != root->operands[1];
}

static ot_status fold_pad_window(ot_computation *c, ot_instr *i, ot_instr **out) {
    ot_instr *p = i->operands[0], *init = i->operands[1];
    const ot_window *w = i->attrs->window;
    if (i->noperands != 2 || i->ncalled != 1 || !add_reducer(i->called[0]) || !w ||
        p->opcode != OT_OP_PAD || p->nusers != 1 || !p->attrs->padding ||
        p->shape.kind != OT_IR_ARRAY || w->rank != p->shape.array.rank)
        return OT_OK;
    ot_dtype tv, ti;
    const void *pv = splat_value(p->operands[1], &tv), *iv = splat_value(init, &ti);
    if (!pv || !iv || tv != ti || tv != p->shape.array.dtype ||
        memcmp(pv, iv, ot_dtype_size(tv)) != 0)
        return OT_OK;
    double v;
    if (tv == OT_PRED || !value_of(pv, tv, &v) || v != 0) return OT_OK;
    ot_window nw = *w;
    for (int d = 0; d < w->rank; d++) {
        const ot_pad_dim *pd = &p->attrs->padding[d];
        ot_window_dim *wd = &nw.dims[d];
        int64_t bd = wd->base_dilation ? wd->base_dilation : 1;
        if (pd->lo < 0 || pd->hi < 0 || pd->interior < 0 || (pd->interior > 0 && bd != 1))
            return OT_OK;
        wd->pad_lo += pd->lo * bd;
        wd->pad_hi += pd->hi * bd;
        if (pd->interior > 0) wd->base_dilation = pd->interior + 1;
    }
    ot_attrs at = *i->attrs;
    at.window = &nw;
    ot_instr *ops[2] = {p->operands[0], init};
    return built(
        c, ot_build(c, OT_OP_REDUCE_WINDOW, ops, 2, &at, i->called, i->ncalled, &i->shape, NULL),
        out);
}

/* ---- a scan between two reverses ----
 * reverse(reduce-window(reverse(x), init), d) where the reduce-window is a scan along d
 * (ex_window_scan_dim, exec/numerics.h) and both reverses flip exactly d → the opposite scan of
 * x (its padding moved to the other side). A prefix scan of the flipped x folds, for output
 * n - 1 - k, x_{n-1} down to x_k: the suffix scan's order at k; a suffix scan of it folds x_0 up
 * to x_k: the prefix scan's. So bit-identical for any reducer and dtype. JAX code writes a
 * reverse cumsum as flip(cumsum(flip(x))) (returns-to-go): the two flips were copies of the whole
 * array. Only for a one-input reduce-window read by nothing but the outer reverse. */
static bool reverses_only(const ot_instr *r, int64_t d) {
    return r->opcode == OT_OP_REVERSE && r->noperands == 1 && r->attrs->ndims == 1 &&
           r->attrs->dims[0] == d;
}

static ot_status unflip_scan(ot_computation *c, const ot_instr *i, ot_instr **out) {
    ot_instr *rw = i->operands[0];
    if (rw->opcode != OT_OP_REDUCE_WINDOW || rw->noperands != 2 || rw->nusers != 1 ||
        rw->shape.kind != OT_IR_ARRAY || !rw->attrs->window)
        return OT_OK;
    ot_instr *inner = rw->operands[0];
    if (inner->shape.kind != OT_IR_ARRAY) return OT_OK;
    bool suffix = false;
    int sd = ex_window_scan_dim(rw->attrs->window, &inner->shape.array, &suffix);
    if (sd < 0 || !reverses_only(i, sd) || !reverses_only(inner, sd)) return OT_OK;
    ot_window nw = *rw->attrs->window;
    int64_t lo = nw.dims[sd].pad_lo;
    nw.dims[sd].pad_lo = nw.dims[sd].pad_hi;
    nw.dims[sd].pad_hi = lo;
    ot_attrs at = *rw->attrs;
    at.window = &nw;
    ot_instr *ops[2] = {inner->operands[0], rw->operands[1]};
    return built(
        c, ot_build(c, OT_OP_REDUCE_WINDOW, ops, 2, &at, rw->called, rw->ncalled, &i->shape, NULL),
        out);
}

/* ---- transposes seen through reshapes that move no element ----
 * A reshape that only inserts or deletes size-1 dims keeps the order of the others, so it moves
 * no element: a transpose t on one side of it and a transpose u on the other compose into one
 * transpose of u's operand z, and that one moves no element either when z's non-1 dims keep
 * their order (a reshape then). JAX's batched LU solve (jnp.linalg.solve, inv) wraps its
 * triangular solves in [b, n, k] → [b, n, 1, k] → transpose → squeeze → transpose chains whose
 * transposes cancel this way (two 1 MB copies of `inv` on 64 matrices of 64 x 64). Applied when
 * the result has fewer transposes than t(r(u(z))) or t(r(z)): every element is copied from the
 * same source element, so the bits are the same. */

/* Whether reshape x → r only inserts or deletes size-1 dims (the other dims agree in order). */
static bool reshape_moves_nothing(const ot_shape *x, const ot_shape *r) {
    int i = 0, j = 0;
    for (;;) {
        while (i < x->rank && x->dims[i] == 1) i++;
        while (j < r->rank && r->dims[j] == 1) j++;
        if (i == x->rank || j == r->rank) return i == x->rank && j == r->rank;
        if (x->dims[i++] != r->dims[j++]) return false;
    }
}

static ot_status transpose_through_reshape(ot_computation *c, const ot_instr *t, ot_instr **out) {
    *out = NULL;
    ot_instr *y = t->operands[0], *z = y;
    const ot_instr *r = NULL, *u = NULL;
    if (t->shape.kind != OT_IR_ARRAY || y->shape.kind != OT_IR_ARRAY) return OT_OK;
    if (y->opcode == OT_OP_RESHAPE && y->operands[0]->shape.kind == OT_IR_ARRAY &&
        reshape_moves_nothing(&y->operands[0]->shape.array, &y->shape.array)) {
        r = y;
        z = y->operands[0];
        if (z->opcode == OT_OP_TRANSPOSE && z->operands[0]->shape.kind == OT_IR_ARRAY) {
            u = z;
            z = z->operands[0];
        }
    }
    /* w: what r reshapes (u's result, or z); the k-th non-1 dim of y is the k-th of w */
    const ot_shape *ts = &t->shape.array, *ys = &y->shape.array, *zs = &z->shape.array;
    const ot_shape *ws = r ? &r->operands[0]->shape.array : ys;
    int64_t w_of[OT_MAX_RANK], ord[OT_MAX_RANK], order[OT_MAX_RANK], q[OT_MAX_RANK];
    int nw = 0, ny = 0, nl = 0;
    for (int d = 0; d < ws->rank; d++)
        if (ws->dims[d] != 1) w_of[nw++] = d;
    for (int d = 0; d < ys->rank; d++) ord[d] = ys->dims[d] != 1 ? ny++ : -1;
    if (nw != ny || t->attrs->ndims != ts->rank) return OT_OK;
    /* z's non-1 dims in the order t's result reads them */
    for (int k = 0; k < ts->rank; k++) {
        if (ts->dims[k] == 1) continue;
        int64_t yd = t->attrs->dims[k];
        if (yd < 0 || yd >= ys->rank || ord[yd] < 0) return OT_OK;
        int64_t wd = r ? w_of[ord[yd]] : yd;
        order[nl++] = u ? u->attrs->dims[wd] : wd;
    }
    /* q: z's size-1 dims stay, its non-1 positions take that order */
    int m = 0;
    bool moves = false;
    for (int d = 0; d < zs->rank; d++) {
        if (zs->dims[d] == 1) {
            q[d] = d;
            continue;
        }
        if (m == nl) return OT_OK;
        q[d] = order[m++];
        moves |= q[d] != d;
    }
    if (m != nl || (moves && !u)) return OT_OK; /* not fewer transposes */
    ot_instr *x = z;
    if (moves) OT_CHECK(built(c, ot_build_transpose(c, z, q, zs->rank), &x));
    return built(c, ot_build_reshape(c, x, *ts), out);
}

/* transpose(broadcast(x)) → broadcast(x) with x's dims mapped through the permutation, x first
 * transposed where they would not stay increasing: x is at most the broadcast's size, so the copy
 * is never larger (the identity matrix `inv` broadcasts over its batch was built and then
 * transposed at 1 MB). */
static ot_status transpose_of_broadcast(ot_computation *c, const ot_instr *t, ot_instr **out) {
    *out = NULL;
    const ot_instr *b = t->operands[0];
    ot_instr *x = b->operands[0];
    if (t->shape.kind != OT_IR_ARRAY || x->shape.kind != OT_IR_ARRAY) return OT_OK;
    int n = t->attrs->ndims, nx = b->attrs->ndims;
    if (n != t->shape.array.rank || nx != x->shape.array.rank) return OT_OK;
    int64_t inv[OT_MAX_RANK], nd[OT_MAX_RANK], s[OT_MAX_RANK], sd[OT_MAX_RANK];
    for (int k = 0; k < n; k++) inv[t->attrs->dims[k]] = k; /* b's dim → t's dim */
    for (int j = 0; j < nx; j++) nd[j] = inv[b->attrs->dims[j]];
    /* s: x's dims sorted by where they land (insertion sort, rank ≤ OT_MAX_RANK) */
    for (int j = 0; j < nx; j++) {
        int k = j;
        while (k > 0 && nd[s[k - 1]] > nd[j]) {
            s[k] = s[k - 1];
            k--;
        }
        s[k] = j;
    }
    for (int j = 0; j < nx; j++) sd[j] = nd[s[j]];
    if (!is_identity_perm(s, nx)) OT_CHECK(built(c, ot_build_transpose(c, x, s, nx), &x));
    ot_shape to = t->shape.array;
    return built(c, ot_build_broadcast(c, x, to, nx ? sd : NULL, nx), out);
}

/* A gather's or a one-operand scatter's indices that are reshape(v) appending a unit dim as the
 * index vector dim (JAX's `ids[:, None]` before every `x[ids]` and `.at[ids]`): v itself with
 * the same index_vector_dim, now equal to v's rank, where HLO implies that unit dim. The reshape
 * was a copy kernel of its own (800 KB of s32 ids before a segment_sum's scatter). */
static ot_status indices_unreshaped(ot_instr *i, ot_instr **out) {
    int q = 1; /* the indices operand of gather(x, idx) and scatter(x, idx, u) */
    if (i->noperands != (i->opcode == OT_OP_GATHER ? 2 : 3) || i->shape.kind != OT_IR_ARRAY)
        return OT_OK;
    int64_t ivd = i->opcode == OT_OP_GATHER
                      ? (i->attrs->gather ? i->attrs->gather->index_vector_dim : -1)
                      : (i->attrs->scatter ? i->attrs->scatter->index_vector_dim : -1);
    const ot_instr *r = i->operands[q];
    if (r->opcode != OT_OP_RESHAPE || r->shape.kind != OT_IR_ARRAY || r->noperands != 1)
        return OT_OK;
    ot_instr *v = r->operands[0];
    if (v->shape.kind != OT_IR_ARRAY) return OT_OK;
    const ot_shape *rs = &r->shape.array, *vs = &v->shape.array;
    if (rs->rank != vs->rank + 1 || ivd != vs->rank || rs->dims[ivd] != 1) return OT_OK;
    for (int d = 0; d < vs->rank; d++)
        if (rs->dims[d] != vs->dims[d]) return OT_OK;
    ot_instr *ops[3] = {i->operands[0], v, i->noperands > 2 ? i->operands[2] : NULL};
    return built(i->parent,
                 ot_build(i->parent, i->opcode, ops, i->noperands, i->attrs, i->called, i->ncalled,
                          NULL, NULL),
                 out);
}

static ot_status simplify_one(ot_instr *i, ot_instr **out) {
    *out = NULL;
    ot_computation *c = i->parent;
    ot_dtype t = ot_instr_dtype(i);
    bool is_float = t != OT_DTYPE_INVALID && ot_dtype_is_float(t);
    ot_instr *a = i->noperands > 0 ? i->operands[0] : NULL;
    ot_instr *b = i->noperands > 1 ? i->operands[1] : NULL;
    switch (i->opcode) {
    case OT_OP_ADD: {
        vclass ca = classify(a), cb = classify(b);
        bool bzero = is_float ? cb == V_NZERO : (cb == V_PZERO || cb == V_NZERO);
        bool azero = is_float ? ca == V_NZERO : (ca == V_PZERO || ca == V_NZERO);
        if (bzero)
            *out = a;
        else if (azero)
            *out = b;
        break;
    }
    case OT_OP_SUBTRACT: {
        vclass cb = classify(b);
        if (is_float ? cb == V_PZERO : (cb == V_PZERO || cb == V_NZERO)) *out = a;
        break;
    }
    case OT_OP_MULTIPLY:
        if (t == OT_PRED) break;
        if (classify(b) == V_ONE)
            *out = a;
        else if (classify(a) == V_ONE)
            *out = b;
        break;
    case OT_OP_DIVIDE: {
        if (classify(b) == V_ONE) {
            *out = a;
            break;
        }
        if (t != OT_F32 && t != OT_F64) break;
        ot_dtype bt;
        const void *p = splat_value(b, &bt);
        double v;
        if (!p || !value_of(p, bt, &v) || v == 0 || !isfinite(v)) break;
        int e;
        double mant = frexp(v, &e);
        if (fabs(mant) != 0.5) break; /* not a power of two */
        double r = 1.0 / v;
        if (t == OT_F32) {
            float rf = (float)r;
            if (rf == 0 || !isfinite(rf) || (double)rf != r) break;
            if (fpclassify(rf) == FP_SUBNORMAL) break;
        } else if (r == 0 || !isfinite(r) || fpclassify(r) == FP_SUBNORMAL) {
            break;
        }
        ot_instr *k = ot_build_constant_scalar(c, t, r);
        OT_CHECK(built(c, k, &k));
        ot_instr *bk = k;
        if (i->shape.array.rank > 0) {
            bk = ot_build_broadcast(c, k, i->shape.array, NULL, 0);
            OT_CHECK(built(c, bk, &bk));
        }
        ot_instr *mul = ot_build_binary(c, OT_OP_MULTIPLY, a, bk);
        OT_CHECK(built(c, mul, out));
        break;
    }
    case OT_OP_NEGATE:
        if (a->opcode == OT_OP_NEGATE) *out = a->operands[0];
        break;
    case OT_OP_NOT:
        if (a->opcode == OT_OP_NOT) *out = a->operands[0];
        break;
    case OT_OP_CONVERT:
        if (ot_instr_dtype(a) == t) *out = a;
        break;
    case OT_OP_RESHAPE:
    case OT_OP_BITCAST:
        if (ot_ir_shape_equal(&a->shape, &i->shape) && ot_instr_dtype(a) == t) {
            *out = a;
        } else if (i->opcode == OT_OP_RESHAPE && a->opcode == OT_OP_RESHAPE &&
                   ot_ir_shape_equal(&a->operands[0]->shape, &i->shape)) {
            *out = a->operands[0];
        } else if (i->opcode == OT_OP_RESHAPE && a->opcode == OT_OP_RESHAPE) {
            ot_instr *r = ot_build_reshape(c, a->operands[0], i->shape.array);
            OT_CHECK(built(c, r, out));
        }
        break;
    case OT_OP_TRANSPOSE: {
        const int64_t *p = i->attrs->dims;
        int n = i->attrs->ndims;
        if (is_identity_perm(p, n)) {
            *out = a;
        } else if (a->opcode == OT_OP_TRANSPOSE) {
            /* result dim k = a's dim p[k] = x's dim q[p[k]] */
            int64_t comp[OT_MAX_RANK];
            for (int k = 0; k < n; k++) comp[k] = a->attrs->dims[p[k]];
            if (is_identity_perm(comp, n)) {
                *out = a->operands[0];
            } else {
                ot_instr *r = ot_build_transpose(c, a->operands[0], comp, n);
                OT_CHECK(built(c, r, out));
            }
        } else if (a->opcode == OT_OP_DOT) {
            OT_CHECK(dot_transpose(c, i, a, out));
        } else if (a->opcode == OT_OP_BROADCAST) {
            OT_CHECK(transpose_of_broadcast(c, i, out));
        } else {
            OT_CHECK(transpose_through_reshape(c, i, out));
        }
        break;
    }
    case OT_OP_BROADCAST: {
        if (ot_ir_shape_equal(&a->shape, &i->shape) &&
            is_identity_perm(i->attrs->dims, i->attrs->ndims)) {
            *out = a;
        } else if (a->opcode == OT_OP_BROADCAST) {
            /* x dim k → a dim a.dims[k] → result dim i.dims[a.dims[k]] */
            int64_t comp[OT_MAX_RANK];
            int n = a->attrs->ndims;
            for (int k = 0; k < n; k++) comp[k] = i->attrs->dims[a->attrs->dims[k]];
            ot_instr *r = ot_build_broadcast(c, a->operands[0], i->shape.array, comp, n);
            OT_CHECK(built(c, r, out));
        }
        break;
    }
    case OT_OP_SLICE: {
        const ot_slice_dim *sd = i->attrs->slice;
        bool full = sd != NULL && a->shape.kind == OT_IR_ARRAY;
        for (int k = 0; full && k < a->shape.array.rank; k++)
            full = sd[k].start == 0 && sd[k].limit == a->shape.array.dims[k] && sd[k].stride == 1;
        if (full) *out = a;
        break;
    }
    case OT_OP_GET_TUPLE_ELEMENT:
        /* get-tuple-element(tuple(x0, ..., xn), k) -> xk (left behind by inlined calls) */
        if (a->opcode == OT_OP_TUPLE && i->attrs->index >= 0 && i->attrs->index < a->noperands)
            *out = a->operands[i->attrs->index];
        break;
    case OT_OP_SELECT: {
        ot_instr *on_t = i->operands[1], *on_f = i->operands[2];
        if (on_t == on_f) {
            *out = on_t;
            break;
        }
        ot_dtype pt;
        const void *p = splat_value(a, &pt);
        if (p && pt == OT_PRED) *out = *(const uint8_t *)p ? on_t : on_f;
        break;
    }
    case OT_OP_REDUCE: {
        ot_opcode rop;
        bool init_first;
        if (reduce_is_reshape(i)) {
            OT_CHECK(built(c, ot_build_reshape(c, a, i->shape.array), out));
        } else if (reduce_is_map(i, &rop, &init_first)) {
            ot_instr *xr = ot_build_reshape(c, a, i->shape.array);
            ot_instr *ib =
                xr ? ot_build_broadcast(c, i->operands[1], i->shape.array, NULL, 0) : NULL;
            ot_instr *r =
                ib ? ot_build_binary(c, rop, init_first ? ib : xr, init_first ? xr : ib) : NULL;
            OT_CHECK(built(c, r, out));
        }
        break;
    }
    case OT_OP_DOT: OT_CHECK(dot_fold_transpose(c, i, out)); break;
    case OT_OP_REDUCE_WINDOW: OT_CHECK(fold_pad_window(c, i, out)); break;
    case OT_OP_REVERSE:
        if (a->opcode == OT_OP_REDUCE_WINDOW) OT_CHECK(unflip_scan(c, i, out));
        break;
    case OT_OP_GATHER:
        if (a->shape.kind == OT_IR_ARRAY && i->shape.kind == OT_IR_ARRAY && i->attrs->gather)
            OT_CHECK(gpush(c, i, a, 0, out));
        if (!*out) OT_CHECK(indices_unreshaped(i, out));
        break;
    case OT_OP_SCATTER: OT_CHECK(indices_unreshaped(i, out)); break;
    default: break;
    }
    if (*out && !ot_ir_shape_equal(&(*out)->shape, &i->shape)) *out = NULL;
    return OT_OK;
}

static ot_status simplify_computation(ot_computation *c, ot_instr **po, int64_t n, bool *changed) {
    ot_status s = OT_OK;
    for (int64_t k = 0; k < n && s == OT_OK; k++) {
        ot_instr *i = po[k], *r = NULL;
        if (ot_instr_has_side_effect(i)) continue;
        s = simplify_one(i, &r);
        if (s != OT_OK || !r || r == i) continue;
        s = ot_instr_replace_all_uses(i, r);
        if (s == OT_OK && i->nusers == 0 && c->root != i) s = ot_instr_remove(i);
        if (s == OT_OK) *changed = true;
    }
    return s;
}

ot_status ot_pass_simplify(ot_module *m, bool *changed) {
    bool ch = false;
    if (changed) *changed = false;
    cc_orders ord;
    OT_CHECK(cc_orders_take(m, &ord));
    ot_status s = OT_OK;
    for (int k = 0; k < ord.n && s == OT_OK; k++)
        s = simplify_computation(ord.comps[k], ord.po[k], ord.npo[k], &ch);
    cc_orders_give(m, &ord);
    if (changed) *changed = ch;
    return s;
}
