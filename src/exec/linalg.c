/* dot_general and general convolution, the reference way: one output element at a time,
 * accumulating in a fixed order in f32 (f16, bf16, f32), f64 (f64) or 64-bit wrapping integers,
 * then rounding once to the result dtype. */
#include "exec/exec_internal.h"

typedef enum acc_kind { ACC_F32, ACC_F64, ACC_INT } acc_kind;

static acc_kind acc_for(ot_dtype out, ot_dtype a, ot_dtype b) {
    if (out == OT_F64 || a == OT_F64 || b == OT_F64) return ACC_F64;
    if (ot_dtype_is_float(out) || ot_dtype_is_float(a) || ot_dtype_is_float(b)) return ACC_F32;
    return ACC_INT;
}

typedef struct acc {
    float f;
    double d;
    uint64_t u;
} acc;

static inline void acc_add(acc *s, acc_kind k, ot_dtype ta, const void *a, int64_t ia, ot_dtype tb,
                           const void *b, int64_t ib) {
    switch (k) {
    case ACC_F32: s->f += (float)ex_ld_f(ta, a, ia) * (float)ex_ld_f(tb, b, ib); break;
    case ACC_F64: s->d += ex_ld_f(ta, a, ia) * ex_ld_f(tb, b, ib); break;
    default: s->u += (uint64_t)ex_ld_i(ta, a, ia) * (uint64_t)ex_ld_i(tb, b, ib); break;
    }
}

static inline void acc_store(const acc *s, acc_kind k, ot_dtype t, void *y, int64_t i) {
    switch (k) {
    case ACC_F32:
        if (ot_dtype_is_float(t))
            ex_st_f(t, y, i, s->f);
        else
            ex_st_i(t, y, i, (int64_t)s->f);
        break;
    case ACC_F64:
        if (ot_dtype_is_float(t))
            ex_st_f(t, y, i, s->d);
        else
            ex_st_i(t, y, i, (int64_t)s->d);
        break;
    default:
        if (ot_dtype_is_float(t))
            ex_st_f(t, y, i, (double)(int64_t)s->u);
        else
            ex_st_i(t, y, i, (int64_t)s->u);
        break;
    }
}

static bool listed(int64_t v, const int64_t *l, int n) {
    for (int k = 0; k < n; k++)
        if (l[k] == v) return true;
    return false;
}

ot_status ex_kernel_dot(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    OT_CHECK(ot_value_alloc_shape(out, &i->shape));
    const ot_dot_dims *dn = i->attrs.dot;
    const ot_shape *ls = ex_arr(ops[0]), *rs = ex_arr(ops[1]), *os = ex_arr(out);
    int64_t lstr[OT_MAX_RANK], rstr[OT_MAX_RANK];
    ot_shape_strides(ls, lstr);
    ot_shape_strides(rs, rstr);
    /* contraction offsets, row-major over the contracting dims in the order listed */
    int64_t K = 1, kd[OT_MAX_RANK];
    for (int c = 0; c < dn->ncontract; c++) {
        kd[c] = ls->dims[dn->lhs_contract[c]];
        K *= kd[c];
    }
    int64_t *koff = ot_malloc((size_t)(K ? 2 * K : 1) * sizeof *koff);
    if (!koff) {
        ot_value_release(out);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "%s: out of memory", EX_NAME(i));
    }
    int64_t kidx[OT_MAX_RANK] = {0};
    for (int64_t k = 0; k < K; k++) {
        int64_t lo = 0, ro = 0;
        for (int c = 0; c < dn->ncontract; c++) {
            lo += kidx[c] * lstr[dn->lhs_contract[c]];
            ro += kidx[c] * rstr[dn->rhs_contract[c]];
        }
        koff[2 * k] = lo;
        koff[2 * k + 1] = ro;
        ex_next_index(kidx, kd, dn->ncontract);
    }
    /* free dims in order */
    int64_t lfree[OT_MAX_RANK], rfree[OT_MAX_RANK];
    int nlf = 0, nrf = 0;
    for (int d = 0; d < ls->rank; d++)
        if (!listed(d, dn->lhs_batch, dn->nbatch) && !listed(d, dn->lhs_contract, dn->ncontract))
            lfree[nlf++] = d;
    for (int d = 0; d < rs->rank; d++)
        if (!listed(d, dn->rhs_batch, dn->nbatch) && !listed(d, dn->rhs_contract, dn->ncontract))
            rfree[nrf++] = d;
    acc_kind ak = acc_for(os->dtype, ls->dtype, rs->dtype);
    int64_t numel = ot_shape_numel_unchecked(os), idx[OT_MAX_RANK] = {0};
    for (int64_t e = 0; e < numel; e++) {
        int64_t lb = 0, rb = 0;
        int d = 0;
        for (int b = 0; b < dn->nbatch; b++, d++) {
            lb += idx[d] * lstr[dn->lhs_batch[b]];
            rb += idx[d] * rstr[dn->rhs_batch[b]];
        }
        for (int f = 0; f < nlf; f++, d++) lb += idx[d] * lstr[lfree[f]];
        for (int f = 0; f < nrf; f++, d++) rb += idx[d] * rstr[rfree[f]];
        acc s = {0.0f, 0.0, 0};
        for (int64_t k = 0; k < K; k++)
            acc_add(&s, ak, ls->dtype, ops[0]->array.data, lb + koff[2 * k], rs->dtype,
                    ops[1]->array.data, rb + koff[2 * k + 1]);
        acc_store(&s, ak, os->dtype, out->array.data, e);
        ex_next_index(idx, os->dims, os->rank);
    }
    ot_free(koff);
    return OT_OK;
}

ot_status ex_kernel_convolution(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    OT_CHECK(ot_value_alloc_shape(out, &i->shape));
    const ot_conv_dims *cd = i->attrs.conv;
    const ot_window *w = i->attrs.window;
    const ot_shape *ls = ex_arr(ops[0]), *rs = ex_arr(ops[1]), *os = ex_arr(out);
    int ns = cd->nspatial;
    int64_t lstr[OT_MAX_RANK], rstr[OT_MAX_RANK];
    ot_shape_strides(ls, lstr);
    ot_shape_strides(rs, rstr);
    int64_t G = i->attrs.feature_group_count > 0 ? i->attrs.feature_group_count : 1;
    int64_t B = i->attrs.batch_group_count > 0 ? i->attrs.batch_group_count : 1;
    int64_t N = ls->dims[cd->input_batch];
    int64_t Cg = rs->dims[cd->kernel_input_feature]; /* input features per group */
    int64_t O = rs->dims[cd->kernel_output_feature];
    int64_t out_per_fg = O / G, out_per_bg = O / B, batch_per_bg = N / B;
    int64_t kdims[OT_MAX_RANK], kn = 1;
    for (int s = 0; s < ns; s++) {
        kdims[s] = rs->dims[cd->kernel_spatial[s]];
        kn *= kdims[s];
    }
    acc_kind ak = acc_for(os->dtype, ls->dtype, rs->dtype);
    int64_t numel = ot_shape_numel_unchecked(os), idx[OT_MAX_RANK] = {0};
    for (int64_t e = 0; e < numel; e++) {
        int64_t ob = idx[cd->output_batch], of = idx[cd->output_feature];
        int64_t fg = of / out_per_fg, bg = of / out_per_bg;
        int64_t lb = (bg * batch_per_bg + ob) * lstr[cd->input_batch];
        int64_t rb = of * rstr[cd->kernel_output_feature];
        acc s = {0.0f, 0.0, 0};
        int64_t k[OT_MAX_RANK] = {0};
        for (int64_t q = 0; q < kn; q++) {
            int64_t lo = lb, ro = rb;
            bool ok = true;
            for (int sd = 0; sd < ns && ok; sd++) {
                const ot_window_dim *wd = &w->dims[sd];
                int64_t wdil = wd->window_dilation ? wd->window_dilation : 1;
                int64_t bdil = wd->base_dilation ? wd->base_dilation : 1;
                int64_t p = idx[cd->output_spatial[sd]] * wd->stride - wd->pad_lo + k[sd] * wdil;
                if (p < 0 || p % bdil) {
                    ok = false;
                    break;
                }
                p /= bdil;
                if (p >= ls->dims[cd->input_spatial[sd]]) {
                    ok = false;
                    break;
                }
                lo += p * lstr[cd->input_spatial[sd]];
                int64_t kk = wd->reversal ? wd->size - 1 - k[sd] : k[sd];
                ro += kk * rstr[cd->kernel_spatial[sd]];
            }
            if (ok)
                for (int64_t ic = 0; ic < Cg; ic++)
                    acc_add(&s, ak, ls->dtype, ops[0]->array.data,
                            lo + (fg * Cg + ic) * lstr[cd->input_feature], rs->dtype,
                            ops[1]->array.data, ro + ic * rstr[cd->kernel_input_feature]);
            ex_next_index(k, kdims, ns);
        }
        acc_store(&s, ak, os->dtype, out->array.data, e);
        ex_next_index(idx, os->dims, os->rank);
    }
    return OT_OK;
}
