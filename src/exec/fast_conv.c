/* The fast convolution (kernels.h): im2col + the GEMM of fast_dot.c, summing in the reference's
 * order of terms per output (linalg.c) but through BLAS, so within a reordered sum's error bound
 * of it; the bits do not depend on the thread count. */
#include "exec/fast_internal.h"

#include <limits.h>

/* For a chunk of batch elements and one feature group: col[(n, p), (q, c)] holds the input value
 * kernel position q and group feature c read for output position p (0 in the padding and
 * between dilated input elements), in the reference's order of the sum (kernel positions
 * row-major, then features); W[(q, c), o] the kernel; C = col x W by GEMM, then scattered into the
 * output's layout. */
#define CONV_COL_BYTES ((size_t)64 << 20)

typedef struct conv_plan {
    size_t es;
    int ns;
    int64_t N, P, Cg, Og, G, kn, Kd;
    int64_t odims[OT_MAX_RANK], kdims[OT_MAX_RANK], idims[OT_MAX_RANK];
    int64_t lstr_s[OT_MAX_RANK], lstr_b, lstr_f;
    int64_t ostr_s[OT_MAX_RANK], ostr_b, ostr_f;
    int64_t stride[OT_MAX_RANK], pad_lo[OT_MAX_RANK], wdil[OT_MAX_RANK], bdil[OT_MAX_RANK];
    const char *x;
    char *col, *cm, *y;
    int64_t n0, g; /* current chunk's first batch element, group */
} conv_plan;

static void conv_im2col(void *arg, int64_t begin, int64_t end, int ith) {
    const conv_plan *p = arg;
    size_t es = p->es;
    for (int64_t row = begin; row < end; row++) {
        int64_t n = p->n0 + row / p->P, pp = row % p->P;
        int64_t oi[OT_MAX_RANK];
        for (int s = p->ns - 1, r = (int)pp; s >= 0; s--) {
            oi[s] = r % p->odims[s];
            r /= p->odims[s];
        }
        char *dst = p->col + (size_t)(row * p->Kd) * es;
        const char *base = p->x + (size_t)(n * p->lstr_b + p->g * p->Cg * p->lstr_f) * es;
        int64_t k[OT_MAX_RANK] = {0};
        for (int64_t q = 0; q < p->kn; q++) {
            int64_t off = 0;
            bool ok = true;
            for (int s = 0; s < p->ns; s++) {
                int64_t pos = oi[s] * p->stride[s] - p->pad_lo[s] + k[s] * p->wdil[s];
                if (pos < 0 || pos % p->bdil[s]) {
                    ok = false;
                    break;
                }
                pos /= p->bdil[s];
                if (pos >= p->idims[s]) {
                    ok = false;
                    break;
                }
                off += pos * p->lstr_s[s];
            }
            char *d = dst + (size_t)(q * p->Cg) * es;
            if (!ok) {
                memset(d, 0, (size_t)p->Cg * es);
            } else if (p->lstr_f == 1) {
                memcpy(d, base + (size_t)off * es, (size_t)p->Cg * es);
            } else if (es == 4) {
                const uint32_t *sp = (const uint32_t *)base + off;
                for (int64_t c = 0; c < p->Cg; c++) ((uint32_t *)d)[c] = sp[c * p->lstr_f];
            } else {
                const uint64_t *sp = (const uint64_t *)base + off;
                for (int64_t c = 0; c < p->Cg; c++) ((uint64_t *)d)[c] = sp[c * p->lstr_f];
            }
            for (int s = p->ns - 1; s >= 0; s--) {
                if (++k[s] < p->kdims[s]) break;
                k[s] = 0;
            }
        }
    }
}

static void conv_scatter(void *arg, int64_t begin, int64_t end, int ith) {
    const conv_plan *p = arg;
    size_t es = p->es;
    for (int64_t row = begin; row < end; row++) {
        int64_t n = p->n0 + row / p->P, pp = row % p->P, off = n * p->ostr_b;
        for (int s = p->ns - 1, r = (int)pp; s >= 0; s--) {
            off += (r % p->odims[s]) * p->ostr_s[s];
            r /= p->odims[s];
        }
        off += p->g * p->Og * p->ostr_f;
        const char *src = p->cm + (size_t)(row * p->Og) * es;
        if (p->ostr_f == 1) {
            memcpy(p->y + (size_t)off * es, src, (size_t)p->Og * es);
        } else if (es == 4) {
            for (int64_t o = 0; o < p->Og; o++)
                ((uint32_t *)p->y)[off + o * p->ostr_f] = ((const uint32_t *)src)[o];
        } else {
            for (int64_t o = 0; o < p->Og; o++)
                ((uint64_t *)p->y)[off + o * p->ostr_f] = ((const uint64_t *)src)[o];
        }
    }
}

ot_status ex_fast_conv(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                       void *out, const ex_leaf *os, bool *done) {
    const ot_conv_dims *cd = i->attrs->conv;
    const ot_window *w = i->attrs->window;
    const ot_shape *ls = ins[0].shape, *rs = ins[1].shape, *osh = os->shape;
    if (!cd || !ex_gemm_dtype(ls->dtype, rs->dtype, osh->dtype)) return OT_OK;
    if (i->attrs->batch_group_count > 1 || cd->nspatial > 3) return OT_OK;
    if (w && w->rank != cd->nspatial) return OT_OK;
    if (ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes) ||
        ex_overlaps(out, os->nbytes, in[1], ins[1].nbytes))
        return OT_OK;
    conv_plan p;
    memset(&p, 0, sizeof p);
    p.es = ot_dtype_size(osh->dtype);
    p.ns = cd->nspatial;
    p.G = i->attrs->feature_group_count > 0 ? i->attrs->feature_group_count : 1;
    p.N = ls->dims[cd->input_batch];
    p.Cg = rs->dims[cd->kernel_input_feature];
    int64_t O = rs->dims[cd->kernel_output_feature];
    if (O % p.G) return OT_OK;
    p.Og = O / p.G;
    int64_t lstr[OT_MAX_RANK], rstr[OT_MAX_RANK], ostr[OT_MAX_RANK];
    ot_shape_strides(ls, lstr);
    ot_shape_strides(rs, rstr);
    ot_shape_strides(osh, ostr);
    p.lstr_b = lstr[cd->input_batch];
    p.lstr_f = lstr[cd->input_feature];
    p.ostr_b = ostr[cd->output_batch];
    p.ostr_f = ostr[cd->output_feature];
    p.P = 1;
    p.kn = 1;
    for (int s = 0; s < p.ns; s++) {
        const ot_window_dim *wd = w ? &w->dims[s] : NULL;
        p.odims[s] = osh->dims[cd->output_spatial[s]];
        p.kdims[s] = rs->dims[cd->kernel_spatial[s]];
        p.idims[s] = ls->dims[cd->input_spatial[s]];
        p.lstr_s[s] = lstr[cd->input_spatial[s]];
        p.ostr_s[s] = ostr[cd->output_spatial[s]];
        p.stride[s] = wd ? wd->stride : 1;
        p.pad_lo[s] = wd ? wd->pad_lo : 0;
        p.wdil[s] = wd && wd->window_dilation ? wd->window_dilation : 1;
        p.bdil[s] = wd && wd->base_dilation ? wd->base_dilation : 1;
        p.P *= p.odims[s];
        p.kn *= p.kdims[s];
    }
    p.Kd = p.kn * p.Cg;
    if (p.Kd > INT_MAX || p.Og > INT_MAX || p.P > INT_MAX) return OT_OK;
    *done = true;
    if (p.N * p.P * O == 0) {
        c->fast_run++;
        return OT_OK;
    }
    size_t es = p.es;
    int64_t chunk =
        (p.P * p.Kd) != 0 ? (int64_t)(CONV_COL_BYTES / ((size_t)(p.P * p.Kd) * es)) : p.N;
    if (chunk < 1) chunk = 1;
    if (chunk > p.N) chunk = p.N;
    if (chunk * p.P > INT_MAX) chunk = INT_MAX / p.P;
    size_t wbytes = ex_align64((size_t)(p.Kd * p.Og) * es);
    size_t colbytes = ex_align64((size_t)(chunk * p.P * p.Kd) * es);
    size_t cbytes = (size_t)(chunk * p.P * p.Og) * es;
    void *sp = NULL;
    OT_CHECK(ex_scratch(c, wbytes + colbytes + cbytes, &sp));
    char *wm = sp;
    p.col = wm + wbytes;
    p.cm = p.col + colbytes;
    p.x = in[0];
    p.y = out;
    const char *r = in[1];
    for (p.g = 0; p.g < p.G; p.g++) {
        /* W[(q, c), o] = kernel[o, c, kk(q)] (kk reversed where the window says so) */
        int64_t k[OT_MAX_RANK] = {0};
        for (int64_t q = 0; q < p.kn; q++) {
            int64_t koff = 0;
            for (int s = 0; s < p.ns; s++) {
                bool rev = w && w->dims[s].reversal;
                koff += (rev ? p.kdims[s] - 1 - k[s] : k[s]) * rstr[cd->kernel_spatial[s]];
            }
            for (int64_t ci = 0; ci < p.Cg; ci++)
                for (int64_t o = 0; o < p.Og; o++) {
                    int64_t src = koff + ci * rstr[cd->kernel_input_feature] +
                                  (p.g * p.Og + o) * rstr[cd->kernel_output_feature];
                    memcpy(wm + (size_t)((q * p.Cg + ci) * p.Og + o) * es, r + (size_t)src * es,
                           es);
                }
            for (int s = p.ns - 1; s >= 0; s--) {
                if (++k[s] < p.kdims[s]) break;
                k[s] = 0;
            }
        }
        for (p.n0 = 0; p.n0 < p.N; p.n0 += chunk) {
            int64_t nb = p.N - p.n0 < chunk ? p.N - p.n0 : chunk, rows = nb * p.P;
            ex_par_for(c, rows, rows * p.Kd * (int64_t)es, conv_im2col, &p);
            ex_gemm g = {osh->dtype, 1,  rows, p.Og, p.Kd, false, false,
                         p.col,      wm, p.cm, 0,    0,    false};
            ex_run_gemm(c, &g);
            ex_par_for(c, rows, rows * p.Og * (int64_t)es, conv_scatter, &p);
        }
    }
    if (c->ftz) { /* the output is fully written: flush it whole */
        ex_flush_out(osh->dtype, out, ot_shape_numel_unchecked(osh));
    }
    c->fast_run++;
    return OT_OK;
}
