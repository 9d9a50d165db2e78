/* Data movement: broadcast, reshape, transpose, slice, dynamic-slice, dynamic-update-slice,
 * concatenate, pad, reverse, gather and scatter. Index arithmetic with row-major strides; one
 * output multi-index walked in order, no allocation per element. */
#include "exec/exec_internal.h"

static inline void copy_el(char *dst, int64_t di, const char *src, int64_t si, size_t es) {
    switch (es) {
    case 1: dst[di] = src[si]; break;
    case 2: ((uint16_t *)(void *)dst)[di] = ((const uint16_t *)(const void *)src)[si]; break;
    case 4: ((uint32_t *)(void *)dst)[di] = ((const uint32_t *)(const void *)src)[si]; break;
    case 16: memcpy(dst + di * 16, src + si * 16, 16); break; /* c128 */
    default: ((uint64_t *)(void *)dst)[di] = ((const uint64_t *)(const void *)src)[si]; break;
    }
}

static ot_status alloc_out(const ot_instr *i, ot_value *out) {
    if (i->shape.kind != OT_IR_ARRAY)
        return ot_error(OT_ERR_INTERNAL, "%s: expected an array result", EX_NAME(i));
    return ot_value_alloc_array(out, &i->shape.array);
}

/* Reads scalar integer operand values as start indices. */
static int64_t index_value(ot_dtype t, const void *p, int64_t i) {
    int64_t v = ex_ld_i(t, p, i);
    /* a u64 index above INT64_MAX is huge, not negative: it clamps to the top */
    return t == OT_U64 && v < 0 ? INT64_MAX : v;
}

static int64_t scalar_index(const ot_value *v) {
    return index_value(ex_arr(v)->dtype, v->array.data, 0);
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

bool ex_gather_rows(const ot_instr *g) {
    const ot_gather_dims *a = g->attrs ? g->attrs->gather : NULL;
    if (g->opcode != OT_OP_GATHER || !a || g->noperands != 2 || g->shape.kind != OT_IR_ARRAY ||
        g->operands[0]->shape.kind != OT_IR_ARRAY || g->operands[1]->shape.kind != OT_IR_ARRAY)
        return false;
    const ot_shape *xs = &g->operands[0]->shape.array, *ks = &g->operands[1]->shape.array,
                   *ys = &g->shape.array;
    switch (ks->dtype) {
    case OT_S8:
    case OT_S16:
    case OT_S32:
    case OT_S64:
    case OT_U8:
    case OT_U16:
    case OT_U32: break;
    default: return false;
    }
    int64_t ivd = a->index_vector_dim;
    if (ivd < ks->rank - 1 || ivd > ks->rank || (ivd < ks->rank && ks->dims[ivd] != 1))
        return false;
    int nb = (int)(ivd < ks->rank ? ks->rank - 1 : ks->rank); /* the result's batch dims */
    if (xs->rank < 1 || xs->dtype != ys->dtype || ys->rank != nb + xs->rank - 1 ||
        a->nstart_index_map != 1 || a->start_index_map[0] != 0 || a->ncollapsed != 1 ||
        a->collapsed_slice_dims[0] != 0 || a->nbatching != 0 || a->noffset != xs->rank - 1 ||
        a->nslice_sizes != xs->rank || a->slice_sizes[0] != 1 || xs->dims[0] < 1)
        return false;
    for (int d = 0; d < nb; d++)
        if (ys->dims[d] != ks->dims[d]) return false;
    for (int k = 0; k < a->noffset; k++)
        if (a->offset_dims[k] != nb + k || a->slice_sizes[k + 1] != xs->dims[k + 1] ||
            ys->dims[nb + k] != xs->dims[k + 1])
            return false;
    return true;
}

ot_status ex_kernel_shape(ex_ctx *x, const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    (void)x;
    OT_CHECK(alloc_out(i, out));
    const ot_shape *os = &i->shape.array;
    const ot_shape *is = ex_arr(ops[0]);
    size_t es = ot_dtype_size(os->dtype);
    char *dst = out->array.data;
    const char *src = ops[0]->array.data;
    int64_t numel = ot_shape_numel_unchecked(os);
    int r = os->rank;
    int64_t istr[OT_MAX_RANK], idx[OT_MAX_RANK] = {0};
    ot_shape_strides(is, istr);
    const ot_attrs *a = i->attrs;

    switch (i->opcode) {
    case OT_OP_RESHAPE:
    case OT_OP_BITCAST:
        if (out->array.nbytes) memcpy(dst, src, out->array.nbytes);
        return OT_OK;
    case OT_OP_BROADCAST: {
        /* operand dim k maps to result dim dims[k] */
        int64_t rstr[OT_MAX_RANK] = {0};
        for (int k = 0; k < a->ndims; k++) rstr[a->dims[k]] = istr[k];
        for (int64_t e = 0; e < numel; e++) {
            int64_t si = 0;
            for (int d = 0; d < r; d++) si += idx[d] * rstr[d];
            copy_el(dst, e, src, si, es);
            ex_next_index(idx, os->dims, r);
        }
        return OT_OK;
    }
    case OT_OP_TRANSPOSE: {
        /* result dim d is operand dim perm[d] */
        for (int64_t e = 0; e < numel; e++) {
            int64_t si = 0;
            for (int d = 0; d < r; d++) si += idx[d] * istr[a->dims[d]];
            copy_el(dst, e, src, si, es);
            ex_next_index(idx, os->dims, r);
        }
        return OT_OK;
    }
    case OT_OP_SLICE: {
        for (int64_t e = 0; e < numel; e++) {
            int64_t si = 0;
            for (int d = 0; d < r; d++)
                si += (a->slice[d].start + idx[d] * a->slice[d].stride) * istr[d];
            copy_el(dst, e, src, si, es);
            ex_next_index(idx, os->dims, r);
        }
        return OT_OK;
    }
    case OT_OP_REVERSE: {
        bool rev[OT_MAX_RANK] = {false};
        for (int k = 0; k < a->ndims; k++) rev[a->dims[k]] = true;
        for (int64_t e = 0; e < numel; e++) {
            int64_t si = 0;
            for (int d = 0; d < r; d++)
                si += (rev[d] ? os->dims[d] - 1 - idx[d] : idx[d]) * istr[d];
            copy_el(dst, e, src, si, es);
            ex_next_index(idx, os->dims, r);
        }
        return OT_OK;
    }
    case OT_OP_DYNAMIC_SLICE: {
        /* start indices are clamped so the slice lies inside the operand */
        int64_t start[OT_MAX_RANK];
        for (int d = 0; d < r; d++)
            start[d] = clamp64(scalar_index(ops[1 + d]), 0, is->dims[d] - os->dims[d]);
        for (int64_t e = 0; e < numel; e++) {
            int64_t si = 0;
            for (int d = 0; d < r; d++) si += (start[d] + idx[d]) * istr[d];
            copy_el(dst, e, src, si, es);
            ex_next_index(idx, os->dims, r);
        }
        return OT_OK;
    }
    case OT_OP_DYNAMIC_UPDATE_SLICE: {
        if (out->array.nbytes) memcpy(dst, src, out->array.nbytes);
        const ot_shape *us = ex_arr(ops[1]);
        const char *upd = ops[1]->array.data;
        int64_t start[OT_MAX_RANK], ostr[OT_MAX_RANK];
        ot_shape_strides(os, ostr);
        for (int d = 0; d < r; d++)
            start[d] = clamp64(scalar_index(ops[2 + d]), 0, is->dims[d] - us->dims[d]);
        int64_t un = ot_shape_numel_unchecked(us);
        for (int64_t e = 0; e < un; e++) {
            int64_t di = 0;
            for (int d = 0; d < r; d++) di += (start[d] + idx[d]) * ostr[d];
            copy_el(dst, di, upd, e, es);
            ex_next_index(idx, us->dims, r);
        }
        return OT_OK;
    }
    case OT_OP_CONCATENATE: {
        int64_t cd = a->index, off = 0, ostr[OT_MAX_RANK];
        ot_shape_strides(os, ostr);
        for (int k = 0; k < i->noperands; k++) {
            const ot_shape *ks = ex_arr(ops[k]);
            const char *ks_data = ops[k]->array.data;
            int64_t kn = ot_shape_numel_unchecked(ks);
            int64_t kidx[OT_MAX_RANK] = {0};
            for (int64_t e = 0; e < kn; e++) {
                int64_t di = 0;
                for (int d = 0; d < r; d++) di += (kidx[d] + (d == cd ? off : 0)) * ostr[d];
                copy_el(dst, di, ks_data, e, es);
                ex_next_index(kidx, ks->dims, r);
            }
            off += ks->dims[cd];
        }
        return OT_OK;
    }
    case OT_OP_PAD: {
        /* every output position is either an operand element (lo + k * (interior + 1)) or the
         * padding value; negative lo/hi crop */
        const char *pv = ops[1]->array.data;
        for (int64_t e = 0; e < numel; e++) {
            int64_t si = 0;
            bool inside = true;
            for (int d = 0; d < r && inside; d++) {
                int64_t p = idx[d] - a->padding[d].lo, step = a->padding[d].interior + 1;
                if (p < 0 || p % step != 0 || p / step >= is->dims[d])
                    inside = false;
                else
                    si += (p / step) * istr[d];
            }
            if (inside)
                copy_el(dst, e, src, si, es);
            else
                copy_el(dst, e, pv, 0, es);
            ex_next_index(idx, os->dims, r);
        }
        return OT_OK;
    }
    default:
        ot_value_release(out);
        return ot_error(OT_ERR_INTERNAL, "%s: not a data-movement op", EX_NAME(i));
    }
}

/* ---- gather ---------------------------------------------------------------------------- */

static bool in_list(int64_t v, const int64_t *l, int n) {
    for (int k = 0; k < n; k++)
        if (l[k] == v) return true;
    return false;
}

/* Reads component k of the index vector at batch position `bidx` (the indices dims without
 * index_vector_dim, in order); str: the indices' strides. */
static int64_t index_component_s(const ot_value *ind, const int64_t *str, int64_t ivd,
                                 const int64_t *bidx, int64_t k) {
    const ot_shape *s = ex_arr(ind);
    int64_t li = 0;
    int b = 0;
    for (int d = 0; d < s->rank; d++) {
        if (d == ivd)
            li += k * str[d];
        else
            li += bidx[b++] * str[d];
    }
    return index_value(s->dtype, ind->array.data, li);
}

static int64_t index_component(const ot_value *ind, int64_t ivd, const int64_t *bidx, int64_t k) {
    int64_t str[OT_MAX_RANK];
    ot_shape_strides(ex_arr(ind), str);
    return index_component_s(ind, str, ivd, bidx, k);
}

ot_status ex_kernel_gather(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    OT_CHECK(alloc_out(i, out));
    const ot_gather_dims *g = i->attrs->gather;
    const ot_shape *os = &i->shape.array, *xs = ex_arr(ops[0]);
    size_t es = ot_dtype_size(os->dtype);
    int64_t xstr[OT_MAX_RANK];
    ot_shape_strides(xs, xstr);
    int64_t numel = ot_shape_numel_unchecked(os);
    /* operand dims that offset dims walk, in order */
    int64_t offset_operand_dim[OT_MAX_RANK];
    int no = 0;
    for (int d = 0; d < xs->rank; d++)
        if (!in_list(d, g->collapsed_slice_dims, g->ncollapsed) &&
            !in_list(d, g->operand_batching_dims, g->nbatching))
            offset_operand_dim[no++] = d;
    /* output batch dims ↔ indices dims without index_vector_dim */
    const ot_shape *ks = ex_arr(ops[1]);
    int64_t ind_dims_no_ivd[OT_MAX_RANK], kstr[OT_MAX_RANK];
    ot_shape_strides(ks, kstr);
    int nb = 0;
    for (int d = 0; d < ks->rank; d++)
        if (d != g->index_vector_dim) ind_dims_no_ivd[nb++] = d;
    bool is_offset[OT_MAX_RANK] = {false};
    for (int d = 0; d < os->rank; d++) is_offset[d] = in_list(d, g->offset_dims, g->noffset);
    int64_t idx[OT_MAX_RANK] = {0}, bidx[OT_MAX_RANK], in[OT_MAX_RANK];
    /* source positions are computed for a batch of elements first and the batch copied after:
     * the copies' loads (one per row of a large operand: cache misses) then overlap */
    enum { BATCH = 256 };
    int64_t src_at[BATCH];
    int64_t e0 = 0;
    for (int64_t e = 0; e < numel; e++) {
        int b = 0, o = 0;
        int64_t offs[OT_MAX_RANK] = {0};
        for (int d = 0; d < os->rank; d++) {
            if (is_offset[d])
                offs[o++] = idx[d];
            else
                bidx[b++] = idx[d];
        }
        for (int d = 0; d < xs->rank; d++) in[d] = 0;
        for (int k = 0; k < g->nstart_index_map; k++) {
            int64_t od = g->start_index_map[k];
            int64_t v = index_component_s(ops[1], kstr, g->index_vector_dim, bidx, k);
            in[od] = clamp64(v, 0, xs->dims[od] - g->slice_sizes[od]);
        }
        for (int k = 0; k < g->nbatching; k++) {
            /* the operand batching dim takes the position of the matching indices batch dim */
            int64_t kd = g->start_indices_batching_dims[k];
            for (int q = 0; q < nb; q++)
                if (ind_dims_no_ivd[q] == kd) in[g->operand_batching_dims[k]] = bidx[q];
        }
        for (int k = 0; k < no; k++) in[offset_operand_dim[k]] += offs[k];
        int64_t si = 0;
        for (int d = 0; d < xs->rank; d++) si += in[d] * xstr[d];
        src_at[e - e0] = si;
        if (e - e0 == BATCH - 1 || e == numel - 1) {
            for (int64_t k = e0; k <= e; k++)
                copy_el(out->array.data, k, ops[0]->array.data, src_at[k - e0], es);
            e0 = e + 1;
        }
        ex_next_index(idx, os->dims, os->rank);
    }
    return OT_OK;
}

/* ---- scatter --------------------------------------------------------------------------- */

ot_status ex_kernel_scatter(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                            ot_value *out) {
    const ot_scatter_dims *sd = i->attrs->scatter;
    int n = (i->noperands - 1) / 2;
    const ot_value *ind = ops[n];
    const ot_shape *xs = ex_arr(ops[0]), *us = ex_arr(ops[n + 1]), *ks = ex_arr(ind);
    ot_status st;
    ex_scalar_fn *fn = NULL;
    ot_value res = ot_value_empty();
    if (n == 1) {
        st = ot_value_copy(&res, ops[0]);
    } else {
        st = ot_value_tuple(&res, n);
        for (int k = 0; k < n && st == OT_OK; k++) st = ot_value_copy(&res.tuple[k], ops[k]);
    }
    if (st != OT_OK) goto fail;
    st = ex_scalar_fn_new(x, i->called[0], &fn);
    if (st != OT_OK) goto fail;

    int64_t xstr[OT_MAX_RANK];
    ot_shape_strides(xs, xstr);
    int64_t window_operand_dim[OT_MAX_RANK];
    int nw = 0;
    for (int d = 0; d < xs->rank; d++)
        if (!in_list(d, sd->inserted_window_dims, sd->ninserted) &&
            !in_list(d, sd->input_batching_dims, sd->nbatching))
            window_operand_dim[nw++] = d;
    int64_t ind_dims_no_ivd[OT_MAX_RANK];
    int nb = 0;
    for (int d = 0; d < ks->rank; d++)
        if (d != sd->index_vector_dim) ind_dims_no_ivd[nb++] = d;
    /* window sizes per operand dim: update window dims' sizes, 1 for inserted/batching dims */
    int64_t wsize[OT_MAX_RANK];
    for (int d = 0; d < xs->rank; d++) wsize[d] = 1;
    for (int k = 0; k < nw && k < sd->nupdate_window; k++)
        wsize[window_operand_dim[k]] = us->dims[sd->update_window_dims[k]];

    int64_t un = ot_shape_numel_unchecked(us);
    int64_t idx[OT_MAX_RANK] = {0}, bidx[OT_MAX_RANK], start[OT_MAX_RANK];
    uint64_t cur[16][2], upd[16][2], newv[16][2]; /* an element of up to 16 bytes (c128) */
    const void *args[32];
    void *outs[16];
    if (n > 16) {
        st = ot_error(OT_ERR_UNIMPLEMENTED, "%s: scatter with more than 16 operands", EX_NAME(i));
        goto fail;
    }
    for (int64_t e = 0; e < un; e++) {
        int b = 0, w = 0;
        int64_t win[OT_MAX_RANK] = {0};
        for (int d = 0; d < us->rank; d++) {
            if (in_list(d, sd->update_window_dims, sd->nupdate_window))
                win[w++] = idx[d];
            else
                bidx[b++] = idx[d];
        }
        for (int d = 0; d < xs->rank; d++) start[d] = 0;
        for (int k = 0; k < sd->nscatter_to_operand; k++)
            start[sd->scatter_dims_to_operand_dims[k]] =
                index_component(ind, sd->index_vector_dim, bidx, k);
        for (int k = 0; k < sd->nbatching; k++) {
            int64_t kd = sd->scatter_indices_batching_dims[k];
            for (int q = 0; q < nb; q++)
                if (ind_dims_no_ivd[q] == kd) start[sd->input_batching_dims[k]] = bidx[q];
        }
        /* an update whose whole window does not fit in the operand is skipped (XLA CPU) */
        bool ok = true;
        for (int d = 0; d < xs->rank; d++)
            if (start[d] < 0 || start[d] > xs->dims[d] - wsize[d]) ok = false;
        if (ok) {
            int64_t di = 0;
            for (int d = 0; d < xs->rank; d++) di += start[d] * xstr[d];
            for (int k = 0; k < nw; k++) di += win[k] * xstr[window_operand_dim[k]];
            for (int k = 0; k < n; k++) {
                const ot_value *ok_v = n == 1 ? &res : &res.tuple[k];
                size_t es = ot_dtype_size(ex_arr(ok_v)->dtype);
                memcpy(cur[k], (const char *)ok_v->array.data + di * (int64_t)es, es);
                memcpy(upd[k], (const char *)ops[n + 1 + k]->array.data + e * (int64_t)es, es);
                args[k] = &cur[k];
                args[n + k] = &upd[k];
                outs[k] = &newv[k];
            }
            st = ex_scalar_fn_call(fn, args, outs);
            if (st != OT_OK) goto fail;
            for (int k = 0; k < n; k++) {
                ot_value *ov = n == 1 ? &res : &res.tuple[k];
                size_t es = ot_dtype_size(ex_arr(ov)->dtype);
                memcpy((char *)ov->array.data + di * (int64_t)es, newv[k], es);
            }
        }
        ex_next_index(idx, us->dims, us->rank);
    }
    ex_scalar_fn_free(fn);
    *out = res;
    return OT_OK;
fail:
    ex_scalar_fn_free(fn);
    ot_value_release(&res);
    return st;
}
