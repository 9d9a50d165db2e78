/* dot_general and general convolution, the reference way: one output element at a time,
 * accumulating in a fixed order in f32 (f16, bf16, f32), f64 (f64) or 64-bit wrapping integers,
 * then rounding once to the result dtype. Under FTZ/DAZ (the default, as XLA's CPU backend)
 * subnormal f32/f64 inputs read as zero and a subnormal result is flushed.
 *
 * A float dot adds each product with one fused multiply-add (fmaf in f32, fma in f64: the exact
 * product added, one rounding per product), in k order from 0; the partial sums underflow
 * gradually (only the final sum is flushed), and a NaN sum is the canonical quiet NaN
 * (0x7fc00000 in f32, 0x7ff8000000000000 in f64: which NaN payload an operation propagates
 * depends on its operand order), rounded once to the result dtype. Operands of 16-bit float
 * dtypes (bf16, f16) widen to f32 exactly, so their products are exact unless they underflow or
 * overflow f32. A bf16 x bf16 dot under FTZ (ACC_F32_PAIR) takes k in pairs, the odd one first,
 * each step flushed as x86's FTZ flushes (pair_step): vdpbf16ps's sums (docs/exec.md). This is what
 * the fast dot's own GEMM computes (src/exec/fast_dot.c, f32 and 16-bit operands into f32 lanes,
 * f64 into f64 lanes), bit for bit at every thread count; a multiply-then-add chain would run there
 * at about 0.7 of an fma chain's speed (f64 512^3 on one thread of an AMD EPYC with AVX-512).
 * Convolutions keep the multiply-then-add chain (their fast kernels, OpenBLAS and oneDNN, sum in
 * orders of their own). */
#include "exec/exec_internal.h"

#include <float.h>

/* ACC_F32_FMA, ACC_F64_FMA: each product added by one fma (dots); ACC_F32_PAIR: a bf16 x bf16 dot
 * under FTZ, in pairs (acc_strided); ACC_F32, ACC_F64: multiplied,
 * then added (convolutions) */
typedef enum acc_kind {
    ACC_F32,
    ACC_F32_FMA,
    ACC_F32_PAIR,
    ACC_F64,
    ACC_F64_FMA,
    ACC_INT
} acc_kind;

static bool acc_f32(acc_kind k) {
    return k == ACC_F32 || k == ACC_F32_FMA || k == ACC_F32_PAIR;
}

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

/* An operand widened once to the accumulation type (float, double or int64), so the inner loops
 * are plain multiply-adds with strides; each element converts exactly as it would one at a time. */
static ot_status widen(const ot_value *v, acc_kind k, void **out) {
    const ot_shape *s = ex_arr(v);
    int64_t n = ot_shape_numel_unchecked(s);
    size_t es = acc_f32(k) ? 4 : 8;
    void *p = ot_malloc((size_t)(n ? n : 1) * es);
    if (!p)
        return ot_error(OT_ERR_OUT_OF_MEMORY, "dot/convolution: out of memory widening operands");
    for (int64_t e = 0; e < n; e++) {
        switch (k) {
        case ACC_F32:
        case ACC_F32_FMA:
        case ACC_F32_PAIR: {
            float x = (float)ex_ld_f(s->dtype, v->array.data, e);
            ((float *)p)[e] = ex_ftz && x != 0 && fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x;
            break;
        }
        case ACC_F64:
        case ACC_F64_FMA: {
            double x = ex_ld_f(s->dtype, v->array.data, e);
            ((double *)p)[e] = ex_ftz && x != 0 && fabs(x) < DBL_MIN ? copysign(0.0, x) : x;
            break;
        }
        default: ((int64_t *)p)[e] = ex_ld_i(s->dtype, v->array.data, e); break;
        }
    }
    *out = p;
    return OT_OK;
}

/* One step of ACC_F32_PAIR: t + x * y by one fma, flushed as x86's FTZ flushes it (what
 * vdpbf16ps and an fma under MXCSR FTZ compute): to a zero of its sign when the result rounded to
 * 24 bits with an unbounded exponent is below FLT_MIN, so also when it rounds up to FLT_MIN only in
 * the subnormal range (exact sums in [FLT_MIN - 2^-150, FLT_MIN - 2^-151)). t + x * y is exact in
 * double wherever that case can arise (x, y widened from bf16: 8-bit significands). */
static inline float pair_step(float x, float y, float t) {
    float r = fmaf(x, y, t);
    if (r != 0 && fabsf(r) < FLT_MIN) return copysignf(0.0f, r);
    if (fabsf(r) == FLT_MIN && fabs((double)t + (double)x * (double)y) < 0x1.ffffffp-127)
        return copysignf(0.0f, r);
    return r;
}

/* s += sum over j < n of a[ia + j * sa] * b[ib + j * sb], in order j = 0, 1, ... (ACC_F32_PAIR:
 * in pairs (j, j + 1), j even, j + 1 first, each step flushed: pair_step) */
static inline void acc_strided(acc *s, acc_kind k, const void *a, int64_t ia, int64_t sa,
                               const void *b, int64_t ib, int64_t sb, int64_t n) {
    switch (k) {
    case ACC_F32: {
        const float *x = (const float *)a + ia, *y = (const float *)b + ib;
        float t = s->f;
        for (int64_t j = 0; j < n; j++) t += x[j * sa] * y[j * sb];
        s->f = t;
        break;
    }
    case ACC_F32_FMA: {
        const float *x = (const float *)a + ia, *y = (const float *)b + ib;
        float t = s->f;
        for (int64_t j = 0; j < n; j++) t = fmaf(x[j * sa], y[j * sb], t);
        s->f = t;
        break;
    }
    case ACC_F32_PAIR: { /* the chain from k = 0 (k block boundaries are even) */
        const float *x = (const float *)a + ia, *y = (const float *)b + ib;
        float t = s->f;
        for (int64_t j = 0; j < n; j += 2) {
            if (j + 1 < n) t = pair_step(x[(j + 1) * sa], y[(j + 1) * sb], t);
            t = pair_step(x[j * sa], y[j * sb], t);
        }
        s->f = t;
        break;
    }
    case ACC_F64: {
        const double *x = (const double *)a + ia, *y = (const double *)b + ib;
        double t = s->d;
        for (int64_t j = 0; j < n; j++) t += x[j * sa] * y[j * sb];
        s->d = t;
        break;
    }
    case ACC_F64_FMA: {
        const double *x = (const double *)a + ia, *y = (const double *)b + ib;
        double t = s->d;
        for (int64_t j = 0; j < n; j++) t = fma(x[j * sa], y[j * sb], t);
        s->d = t;
        break;
    }
    default: {
        const int64_t *x = (const int64_t *)a + ia, *y = (const int64_t *)b + ib;
        uint64_t t = s->u;
        for (int64_t j = 0; j < n; j++) t += (uint64_t)x[j * sa] * (uint64_t)y[j * sb];
        s->u = t;
        break;
    }
    }
}

/* Rounds the accumulator once into element i of y (dtype t), by the convert rules. */
static inline void acc_store(const acc *sum, acc_kind k, ot_dtype t, void *y, int64_t i) {
    char *dst = (char *)y + i * (int64_t)ot_dtype_size(t);
    acc flushed = *sum, *s = &flushed;
    if (ex_ftz && flushed.f != 0 && fabsf(flushed.f) < FLT_MIN)
        flushed.f = copysignf(0.0f, flushed.f);
    if (ex_ftz && flushed.d != 0 && fabs(flushed.d) < DBL_MIN) flushed.d = copysign(0.0, flushed.d);
    switch (k) {
    case ACC_F32_FMA:
    case ACC_F32_PAIR:
        if (isnan(s->f)) s->f = NAN; /* the canonical quiet NaN, 0x7fc00000 */
        /* fall through */
    case ACC_F32:
        if (ot_dtype_is_float(t))
            ex_st_f(t, y, i, s->f);
        else
            ex_convert(OT_F32, t, &s->f, dst, 1);
        break;
    case ACC_F64_FMA:
        if (isnan(s->d)) s->d = NAN; /* the canonical quiet NaN, 0x7ff8000000000000 */
        /* fall through */
    case ACC_F64:
        if (ot_dtype_is_float(t))
            ex_st_f(t, y, i, s->d);
        else
            ex_convert(OT_F64, t, &s->d, dst, 1);
        break;
    default: ex_convert(OT_S64, t, &s->u, dst, 1); break;
    }
}

static bool listed(int64_t v, const int64_t *l, int n) {
    for (int k = 0; k < n; k++)
        if (l[k] == v) return true;
    return false;
}

/* Widens v into the dimension order `order` (a permutation of its dims), row-major. */
static ot_status widen_permuted(const ot_value *v, acc_kind k, const int64_t *order, void **out) {
    const ot_shape *s = ex_arr(v);
    OT_CHECK(widen(v, k, out));
    int64_t n = ot_shape_numel_unchecked(s);
    size_t es = acc_f32(k) ? 4 : 8;
    void *p = ot_malloc((size_t)(n ? n : 1) * es);
    if (!p) {
        ot_free(*out);
        *out = NULL;
        return ot_error(OT_ERR_OUT_OF_MEMORY, "dot: out of memory");
    }
    int64_t nd[OT_MAX_RANK], ns[OT_MAX_RANK], dstr[OT_MAX_RANK], idx[OT_MAX_RANK] = {0};
    for (int d = 0; d < s->rank; d++) nd[d] = s->dims[order[d]];
    int64_t run = 1;
    for (int d = s->rank - 1; d >= 0; d--) {
        ns[d] = run;
        run *= nd[d];
    }
    for (int d = 0; d < s->rank; d++) dstr[order[d]] = ns[d];
    for (int64_t e = 0; e < n; e++) {
        int64_t di = 0;
        for (int d = 0; d < s->rank; d++) di += idx[d] * dstr[d];
        memcpy((char *)p + di * (int64_t)es, (const char *)*out + e * (int64_t)es, es);
        ex_next_index(idx, s->dims, s->rank);
    }
    ot_free(*out);
    *out = p;
    return OT_OK;
}

ot_status ex_kernel_dot(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    OT_CHECK(ot_value_alloc_shape(out, &i->shape));
    const ot_dot_dims *dn = i->attrs->dot;
    const ot_shape *ls = ex_arr(ops[0]), *rs = ex_arr(ops[1]), *os = ex_arr(out);
    /* each operand is widened into the order (batch dims, free dims, contracting dims), so
     * element (b, f, k) sits at (b * F + f) * K + k and every dot product is a contiguous run;
     * the contraction runs row-major over the contracting dims in the order listed */
    int64_t lord[OT_MAX_RANK], rord[OT_MAX_RANK];
    int nl = 0, nr = 0;
    for (int b = 0; b < dn->nbatch; b++) {
        lord[nl++] = dn->lhs_batch[b];
        rord[nr++] = dn->rhs_batch[b];
    }
    int64_t LF = 1, RF = 1, K = 1;
    for (int d = 0; d < ls->rank; d++)
        if (!listed(d, dn->lhs_batch, dn->nbatch) && !listed(d, dn->lhs_contract, dn->ncontract)) {
            lord[nl++] = d;
            LF *= ls->dims[d];
        }
    for (int d = 0; d < rs->rank; d++)
        if (!listed(d, dn->rhs_batch, dn->nbatch) && !listed(d, dn->rhs_contract, dn->ncontract)) {
            rord[nr++] = d;
            RF *= rs->dims[d];
        }
    for (int c = 0; c < dn->ncontract; c++) {
        lord[nl++] = dn->lhs_contract[c];
        rord[nr++] = dn->rhs_contract[c];
        K *= ls->dims[dn->lhs_contract[c]];
    }
    acc_kind ak = acc_for(os->dtype, ls->dtype, rs->dtype);
    if (ak == ACC_F32) ak = ACC_F32_FMA;
    if (ak == ACC_F32_FMA && ex_ftz && ls->dtype == OT_BF16 && rs->dtype == OT_BF16)
        ak = ACC_F32_PAIR;
    if (ak == ACC_F64) ak = ACC_F64_FMA;
    void *lw = NULL, *rw = NULL;
    ot_status st = widen_permuted(ops[0], ak, lord, &lw);
    if (st == OT_OK) st = widen_permuted(ops[1], ak, rord, &rw);
    if (st != OT_OK) {
        ot_free(lw);
        ot_value_release(out);
        return st;
    }
    int64_t numel = ot_shape_numel_unchecked(os);
    for (int64_t e = 0; e < numel; e++) {
        /* output order: batch, lhs free, rhs free */
        int64_t j = e % (RF ? RF : 1), rest = e / (RF ? RF : 1);
        int64_t f = rest % (LF ? LF : 1), b = rest / (LF ? LF : 1);
        acc s = {0.0f, 0.0, 0};
        acc_strided(&s, ak, lw, (b * LF + f) * K, 1, rw, (b * RF + j) * K, 1, K);
        acc_store(&s, ak, os->dtype, out->array.data, e);
    }
    ot_free(lw);
    ot_free(rw);
    return OT_OK;
}

ot_status ex_kernel_convolution(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    OT_CHECK(ot_value_alloc_shape(out, &i->shape));
    const ot_conv_dims *cd = i->attrs->conv;
    const ot_window *w = i->attrs->window;
    const ot_shape *ls = ex_arr(ops[0]), *rs = ex_arr(ops[1]), *os = ex_arr(out);
    int ns = cd->nspatial;
    int64_t lstr[OT_MAX_RANK], rstr[OT_MAX_RANK];
    ot_shape_strides(ls, lstr);
    ot_shape_strides(rs, rstr);
    int64_t G = i->attrs->feature_group_count > 0 ? i->attrs->feature_group_count : 1;
    int64_t B = i->attrs->batch_group_count > 0 ? i->attrs->batch_group_count : 1;
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
    void *lw = NULL, *rw = NULL;
    ot_status st = widen(ops[0], ak, &lw);
    if (st == OT_OK) st = widen(ops[1], ak, &rw);
    if (st != OT_OK) {
        ot_free(lw);
        ot_value_release(out);
        return st;
    }
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
                acc_strided(&s, ak, lw, lo + fg * Cg * lstr[cd->input_feature],
                            lstr[cd->input_feature], rw, ro, rstr[cd->kernel_input_feature], Cg);
            ex_next_index(k, kdims, ns);
        }
        acc_store(&s, ak, os->dtype, out->array.data, e);
        ex_next_index(idx, os->dims, os->rank);
    }
    ot_free(lw);
    ot_free(rw);
    return OT_OK;
}
