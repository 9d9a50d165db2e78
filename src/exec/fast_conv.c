/* The fast convolution (kernels.h): a convolution whose window tiles its input (1x1 in NCHW,
 * patch embeddings) as the fast dot's GEMM (conv_as_dot), else oneDNN's where it covers the
 * convolution (fast_conv_dnnl.c), else im2col + GEMM (OpenBLAS), summing in the reference's order
 * of terms per output (linalg.c) but through BLAS, so within a reordered sum's error bound of it;
 * the bits do not depend on the thread count. */
#include "exec/fast_internal.h"

#include <cblas.h>
#undef I /* <complex.h>, pulled in by cblas.h */
#include <limits.h>

/* Per feature group the kernel is laid out once as W[(q, c), o] (kernel positions q row-major,
 * then group features c: the reference's order of the sum; kernel reversal applied; W[(c, q), o]
 * where the input's features are not innermost: im2col_rows). The output
 * positions (n, p) are cut into tiles fixed by the shape; one task per tile (and per block of
 * output features when there is only one tile) writes the tile's im2col rows
 * into its thread's buffer — col[(n, p), (q, c)], the input value kernel position q and feature
 * c read for output position p, 0 in the padding and between dilated input elements — and runs
 * one GEMM over the whole K for it, C = col x W, straight into the output when the output's
 * layout allows, else through a buffer scattered into it. The im2col stays in cache and the
 * GEMMs run in parallel even when M is small (filter gradients: M = features x kernel positions,
 * K = batch x image).
 * Inputs whose innermost dim is spatial (NCHW) with at least CONV_TR_MIN_P output positions per
 * batch element use the transposed form: colT[(q, c), p] for the positions p of one batch element,
 * whose rows are runs of an input row (contiguous reads), and C^T = W^T x colT, whose rows are runs
 * of one output feature's positions (the NCHW output's rows): written straight into such an output.
 * Feature groups: every group's kernel is packed first and all groups' tiles run in one parallel
 * loop (a per-example filter gradient is a group per example, each a small GEMM). The input
 * offsets a row of kernel positions reads come from a table per spatial dim (output position x
 * kernel position), not from a division per entry.
 * Each output element is one GEMM's full-K sum over a tile of a shape fixed by the convolution, so
 * its bits do not depend on the thread count. */
#define CONV_TILE_ROWS  256               /* output positions per tile, at most */
#define CONV_TILE_BYTES ((size_t)2 << 20) /* im2col bytes per tile, at most (fewer rows) */
#define CONV_MIN_TASKS  8                 /* tiles wanted, where the positions allow */
#define CONV_TR_MIN_P   64                /* positions per batch element for the transposed form */
#define CONV_TAB_MAX    65536             /* conv_src's tables: entries, at most */

typedef struct conv_plan {
    size_t es;
    ot_dtype t;
    int ns;
    bool tr;     /* the transposed form (spatial innermost input) */
    bool cmaj;   /* normal form with K ordered (c, q): the input's features not innermost */
    bool direct; /* GEMM results written straight into the output */
    int64_t N, P, Cg, Og, G, kn, Kd;
    int64_t odims[OT_MAX_RANK], kdims[OT_MAX_RANK], idims[OT_MAX_RANK];
    int64_t lstr_s[OT_MAX_RANK], lstr_b, lstr_f;
    int64_t ostr_s[OT_MAX_RANK], ostr_b, ostr_f;
    int64_t stride[OT_MAX_RANK], pad_lo[OT_MAX_RANK], wdil[OT_MAX_RANK], bdil[OT_MAX_RANK];
    int64_t rs;         /* direct, normal form: the output's stride between positions (n, p) */
    int64_t tm;         /* positions per tile */
    int64_t ptiles;     /* transposed form: tiles per batch element */
    int64_t nto, to;    /* blocks of output features and their size */
    size_t colb, cbufb; /* per-thread im2col and result buffer bytes */
    const char *x, *wm; /* the input, the packed kernels W of the groups (wstride bytes each) */
    char *buf, *y;      /* per-thread buffers (colb + cbufb each), the output */
    size_t wstride;
    int64_t ntg; /* tasks per group: group g's are [g * ntg, (g + 1) * ntg) */
    /* per spatial dim s, where set: tab + tabo[s] holds, at oi * kdims[s] + k, the offset
     * (input position * lstr_s[s]) that output position oi and kernel position k read along s,
     * or -1 (padding, a base-dilation hole): conv_src without a division per kernel position */
    const int64_t *tab;
    int64_t tabo[OT_MAX_RANK];
} conv_plan;

/* The input offset (from the batch element's and feature's base) that kernel position k and
 * output position oi read, or -1 in the padding or a base-dilation hole (from the tables where
 * the plan has them). */
static inline int64_t conv_src(const conv_plan *p, const int64_t *oi, const int64_t *k) {
    int64_t off = 0;
    if (p->tab) {
        for (int s = 0; s < p->ns; s++) {
            int64_t v = p->tab[p->tabo[s] + oi[s] * p->kdims[s] + k[s]];
            if (v < 0) return -1;
            off += v;
        }
        return off;
    }
    for (int s = 0; s < p->ns; s++) {
        int64_t pos = oi[s] * p->stride[s] - p->pad_lo[s] + k[s] * p->wdil[s];
        if (pos < 0 || pos % p->bdil[s]) return -1;
        pos /= p->bdil[s];
        if (pos >= p->idims[s]) return -1;
        off += pos * p->lstr_s[s];
    }
    return off;
}

/* offs[q] = conv_src(p, oi, k(q)) for every kernel position q (row-major), from the tables: the
 * offsets of the dims so far expanded by each next dim's, in place from the back (entry j's
 * kdims[s] successors land at j * kdims[s] and up, never on an entry not yet read). */
static void conv_row_offsets(const conv_plan *p, const int64_t *oi, int64_t *offs) {
    int64_t n = 1;
    offs[0] = 0;
    for (int s = 0; s < p->ns; s++) {
        int64_t kd = p->kdims[s];
        const int64_t *t = p->tab + p->tabo[s] + oi[s] * kd;
        for (int64_t j = n - 1; j >= 0; j--) {
            int64_t b = offs[j];
            for (int64_t k = kd - 1; k >= 0; k--)
                offs[j * kd + k] = b < 0 || t[k] < 0 ? -1 : b + t[k];
        }
        n *= kd;
    }
}

static inline void conv_unflat(const conv_plan *p, int64_t pp, int64_t *oi) {
    for (int s = p->ns - 1; s >= 0; s--) {
        oi[s] = pp % p->odims[s];
        pp /= p->odims[s];
    }
}

static inline bool conv_next(int64_t *idx, const int64_t *dims, int n) {
    for (int s = n - 1; s >= 0; s--) {
        if (++idx[s] < dims[s]) return true;
        idx[s] = 0;
    }
    return false;
}

/* Normal form: col[r - r0, (q, c)] for global rows r = n * P + p in [r0, r1); with cmaj (the
 * input's features not innermost) col[r - r0, (c, q)]: the kernel positions' offsets found once
 * per row (offs: kn scratch offsets), then each feature's plane read at them. Where the features
 * are innermost and a row's whole run of the last kernel dim is inside the input and contiguous
 * in it (no dilation; the input holds just the group's features), the run is one memcpy. */
static void im2col_rows(const conv_plan *p, int64_t g, int64_t r0, int64_t r1, char *col,
                        int64_t *offs) {
    size_t es = p->es;
    int last = p->ns - 1;
    int64_t kl = p->ns > 0 ? p->kdims[last] : 1;
    bool runs = p->ns > 0 && !p->cmaj && p->lstr_f == 1 && p->wdil[last] == 1 &&
                p->bdil[last] == 1 && p->lstr_s[last] == p->Cg && kl > 1;
    for (int64_t row = r0; row < r1; row++) {
        int64_t n = row / p->P, oi[OT_MAX_RANK], k[OT_MAX_RANK] = {0};
        conv_unflat(p, row % p->P, oi);
        char *dst = col + (size_t)((row - r0) * p->Kd) * es;
        const char *base = p->x + (size_t)(n * p->lstr_b + g * p->Cg * p->lstr_f) * es;
        if (p->cmaj) {
            if (p->tab)
                conv_row_offsets(p, oi, offs);
            else
                for (int64_t q = 0; q < p->kn; q++, conv_next(k, p->kdims, p->ns))
                    offs[q] = conv_src(p, oi, k);
            for (int64_t c = 0; c < p->Cg; c++) {
                if (es == 4) {
                    const uint32_t *sp = (const uint32_t *)base + c * p->lstr_f;
                    uint32_t *d = (uint32_t *)dst + c * p->kn;
                    for (int64_t q = 0; q < p->kn; q++) d[q] = offs[q] >= 0 ? sp[offs[q]] : 0;
                } else {
                    const uint64_t *sp = (const uint64_t *)base + c * p->lstr_f;
                    uint64_t *d = (uint64_t *)dst + c * p->kn;
                    for (int64_t q = 0; q < p->kn; q++) d[q] = offs[q] >= 0 ? sp[offs[q]] : 0;
                }
            }
            continue;
        }
        for (int64_t q = 0; q < p->kn; q++, conv_next(k, p->kdims, p->ns)) {
            int64_t off = conv_src(p, oi, k);
            char *d = dst + (size_t)(q * p->Cg) * es;
            if (runs && k[last] == 0 && off >= 0) {
                /* the run's last position inside the input too: all kl positions are (no holes) */
                int64_t endp = oi[last] * p->stride[last] - p->pad_lo[last] + kl - 1;
                if (endp < p->idims[last]) {
                    memcpy(d, base + (size_t)off * es, (size_t)(kl * p->Cg) * es);
                    for (int64_t t = 1; t < kl; t++) conv_next(k, p->kdims, p->ns);
                    q += kl - 1;
                    continue;
                }
            }
            if (off < 0) {
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
        }
    }
}

/* Transposed form: colT[(q, c), pp - p0] for positions pp in [p0, p1) of batch element n. Per
 * kernel position the positions' input offsets are found once and merged into runs (contiguous
 * in the input, or in the padding), copied for every feature with memcpy/memset. offs: scratch
 * of 4 (p1 - p0) offsets. */
static void im2col_tr(const conv_plan *p, int64_t g, int64_t n, int64_t p0, int64_t p1, char *col,
                      int64_t *offs) {
    size_t es = p->es;
    int64_t tp = p1 - p0, k[OT_MAX_RANK] = {0};
    int64_t *rj = offs + tp, *rl = rj + tp, *ro = rl + tp; /* runs: start, length, offset */
    const char *base = p->x + (size_t)(n * p->lstr_b + g * p->Cg * p->lstr_f) * es;
    for (int64_t q = 0; q < p->kn; q++, conv_next(k, p->kdims, p->ns)) {
        int64_t oi[OT_MAX_RANK], nr = 0;
        conv_unflat(p, p0, oi);
        for (int64_t j = 0; j < tp; j++, conv_next(oi, p->odims, p->ns)) {
            int64_t o = conv_src(p, oi, k);
            offs[j] = o;
            bool extend = nr > 0 && (o < 0 ? ro[nr - 1] < 0
                                           : ro[nr - 1] >= 0 && ro[nr - 1] + rl[nr - 1] == o);
            if (extend) {
                rl[nr - 1]++;
            } else {
                rj[nr] = j;
                rl[nr] = 1;
                ro[nr] = o;
                nr++;
            }
        }
        for (int64_t c = 0; c < p->Cg; c++) {
            char *d = col + (size_t)((q * p->Cg + c) * tp) * es;
            const char *sp = base + (size_t)(c * p->lstr_f) * es;
            for (int64_t r = 0; r < nr; r++) {
                if (ro[r] < 0)
                    memset(d + (size_t)rj[r] * es, 0, (size_t)rl[r] * es);
                else
                    memcpy(d + (size_t)rj[r] * es, sp + (size_t)ro[r] * es, (size_t)rl[r] * es);
            }
        }
    }
}

/* C (m x n, ldc) = op(A) x op(B) over the whole K, in the output's dtype. */
static void conv_gemm(const conv_plan *p, bool ta, int64_t m, int64_t n, const char *a, int64_t lda,
                      const char *b, int64_t ldb, char *c, int64_t ldc) {
    if (p->t == OT_F32)
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, CblasNoTrans, (int)m, (int)n,
                    (int)p->Kd, 1.0f, (const float *)a, (int)lda, (const float *)b, (int)ldb, 0.0f,
                    (float *)c, (int)ldc);
    else
        cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, CblasNoTrans, (int)m, (int)n,
                    (int)p->Kd, 1.0, (const double *)a, (int)lda, (const double *)b, (int)ldb, 0.0,
                    (double *)c, (int)ldc);
}

static inline void copy_el(char *dst, const char *src, size_t es) {
    if (es == 4)
        *(uint32_t *)dst = *(const uint32_t *)src;
    else
        *(uint64_t *)dst = *(const uint64_t *)src;
}

/* One task: a feature group's tile of output positions and block of output features. */
static void conv_tasks(void *arg, int64_t begin, int64_t end, int ith) {
    const conv_plan *p = arg;
    size_t es = p->es;
    char *col = p->buf + (size_t)ith * (p->colb + p->cbufb), *cb = col + p->colb;
    for (int64_t tg = begin; tg < end; tg++) {
        int64_t g = tg / p->ntg, t = tg % p->ntg;
        int64_t rt = t / p->nto, o0 = (t % p->nto) * p->to;
        int64_t on = p->Og - o0 < p->to ? p->Og - o0 : p->to;
        int64_t fo = g * p->Og + o0; /* the block's first output feature */
        const char *w = p->wm + (size_t)g * p->wstride + (size_t)o0 * es;
        if (!p->tr) {
            int64_t NP = p->N * p->P, r0 = rt * p->tm, r1 = r0 + p->tm < NP ? r0 + p->tm : NP;
            im2col_rows(p, g, r0, r1, col, (int64_t *)cb);
            if (p->direct) { /* C rows are the output's positions, its features contiguous */
                conv_gemm(p, false, r1 - r0, on, col, p->Kd, w, p->Og,
                          p->y + (size_t)(r0 * p->rs + fo) * es, p->rs);
                continue;
            }
            char *cbn = cb + (p->cmaj ? ex_align64((size_t)p->kn * sizeof(int64_t)) : 0);
            conv_gemm(p, false, r1 - r0, on, col, p->Kd, w, p->Og, cbn, on);
            for (int64_t r = r0; r < r1; r++) {
                int64_t n = r / p->P, pp = r % p->P, off = n * p->ostr_b + fo * p->ostr_f;
                for (int s = p->ns - 1; s >= 0; s--) {
                    off += (pp % p->odims[s]) * p->ostr_s[s];
                    pp /= p->odims[s];
                }
                const char *src = cbn + (size_t)((r - r0) * on) * es;
                for (int64_t o = 0; o < on; o++)
                    copy_el(p->y + (size_t)(off + o * p->ostr_f) * es, src + (size_t)o * es, es);
            }
        } else {
            int64_t n = rt / p->ptiles, p0 = (rt % p->ptiles) * p->tm;
            int64_t p1 = p0 + p->tm < p->P ? p0 + p->tm : p->P, tp = p1 - p0;
            im2col_tr(p, g, n, p0, p1, col, (int64_t *)cb);
            char *yb = p->y + (size_t)(n * p->ostr_b + fo * p->ostr_f + p0) * es;
            if (p->direct) { /* C^T rows are one output feature's positions */
                conv_gemm(p, true, on, tp, w, p->Og, col, tp, yb, p->ostr_f);
                continue;
            }
            char *cbt = cb + ex_align64((size_t)(4 * p->tm) * sizeof(int64_t));
            conv_gemm(p, true, on, tp, w, p->Og, col, tp, cbt, tp);
            for (int64_t j = 0; j < tp; j++) {
                int64_t pp = p0 + j, off = n * p->ostr_b + fo * p->ostr_f;
                for (int s = p->ns - 1; s >= 0; s--) {
                    off += (pp % p->odims[s]) * p->ostr_s[s];
                    pp /= p->odims[s];
                }
                for (int64_t o = 0; o < on; o++)
                    copy_el(p->y + (size_t)(off + o * p->ostr_f) * es,
                            cbt + (size_t)(o * tp + j) * es, es);
            }
        }
    }
}

/* The pool size ex_par_for will use for work of `bytes` (1 when it runs inline). */
static int conv_threads(ex_kernel_ctx *c, int64_t ntasks, int64_t bytes) {
    if (bytes < EX_INLINE_BYTES || ntasks <= 1) return 1;
    if (!c->pool && c->use_default_pool) c->pool = ot_threadpool_default(); /* first need */
    return c->pool ? ot_threadpool_size(c->pool) : 1;
}

static int64_t cdiv(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

/* The output fusion of image n's part of the output: the caller's loop shifted by its offset. */
typedef struct dot_epi {
    const ex_epilogue *epi;
    int64_t off;
} dot_epi;

static void dot_epi_fn(const void *ctx, int64_t b, int64_t e) {
    const dot_epi *d = ctx;
    d->epi->fn(d->epi->ctx, d->off + b, d->off + e);
}

/* NCHW through one dot: the output's elements [b, e) copied from the transposed result in
 * scratch into place, then the output fusion (if any) on them while they are in cache. */
typedef struct nchw_back {
    const char *src;
    char *dst;
    int64_t es, n;
    const ex_epilogue *epi;
} nchw_back;

#define NCHW_BACK_PIECE 16384 /* elements per piece of the copy back */

static void nchw_back_fn(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const nchw_back *k = arg;
    int64_t b = begin * NCHW_BACK_PIECE,
            e = end * NCHW_BACK_PIECE < k->n ? end * NCHW_BACK_PIECE : k->n;
    memcpy(k->dst + b * k->es, k->src + b * k->es, (size_t)((e - b) * k->es));
    if (k->epi) k->epi->fn(k->epi->ctx, b, e);
}

/* The roles of an image operand's dims other than its features, in memory order: the batch
 * (-1) and the spatial dims (0, 1, ...). */
static int conv_roles(int rank, int64_t batch, int64_t feat, const int64_t *spatial, int ns,
                      int *roles) {
    int n = 0;
    for (int d = 0; d < rank; d++) {
        if (d == feat) continue;
        int r = -2;
        if (d == batch) r = -1;
        for (int s = 0; s < ns; s++)
            if (spatial[s] == d) r = s;
        roles[n++] = r;
    }
    return n;
}

/* A convolution whose window tiles its input (every spatial dim's stride equal to its window
 * size, no padding, no dilation, no reversal; the input's spatial extent exactly the output's
 * times the window's; one feature group) is a matrix product: its windows do not overlap, so the
 * input viewed with each spatial dim split in two, (output position, position in the window), is
 * the matrix of patches — out[(n, p), o] = sum over (window position, c) of patch[(n, p), (q, c)]
 * w[(q, c), o] — with no im2col's duplication. The class covers 1x1 convolutions (windows of one
 * element), ViT's patch embedding (16x16 stride 16), ConvNeXt's and Swin's patchify stems (4x4
 * stride 4) and space-to-depth; it takes those with windows of more than one element where the
 * input has fewer than CONV_PATCH_MAX_C features, the kernel at least CONV_PATCH_MIN_K rows and
 * CONV_PATCH_MIN_N output features (large windows over colour images: ViT's embedding). It runs as
 * the fast dot (its own GEMM: the output fusion on its row blocks), the split input as one operand,
 * the kernel the other, the contraction in the kernel's memory order (the kernel read where it
 * lies):
 *  - outputs with the features innermost (NHWC) and the other dims in the input's order, where a
 *    window has more than one element: one dot over all images, the patch matrix the dot's copy
 *    of its split-input operand into (batch, positions, window) order (its blocked transpose),
 *    C[(n, p), o] written in place. A 1x1 convolution in NHWC stays with oneDNN, whose 1x1
 *    kernels read it in place and measured no slower than the dot.
 *  - NCHW (the batch outermost, the features next, the spatial dims in the same order in input
 *    and output) with a window of more than one element: the same one dot over all images into
 *    the output's bytes as [(n, p), o], each image's [p, o] then transposed into scratch and
 *    copied back, the output fusion on each piece copied (the per-image products below have
 *    few columns, 196 for ViT, and two passes over the pool each).
 *  - NCHW 1x1: per image, out[n][o, p] = sum w[o, c] x[n][c, p] (the image read as it lies),
 *    the output fusion shifted to the image's place. oneDNN takes NCHW through its blocked layout,
 * each chunk reordered in and out, which for a 1x1 layer costs about what the convolution does
 *    (docs/benchmarks.md).
 * The dot's sums are its own GEMM's (fma chains in the kernel's order), within the convolution's
 * bound of the reference, and do not depend on the thread count. The dot keys a loop's kept
 * packed B by the instruction it is handed (here a copy on this stack frame) and the kernel
 * buffer: two convolutions of one loop reading the same kernel buffer in the same layout pack it
 * the same way. */
#define CONV_PATCH_MIN_K 512 /* a window's kernel rows (window x input features), at least */
#define CONV_PATCH_MIN_N 128 /* a window's output features, at least */
#define CONV_PATCH_MAX_C 16  /* a window's input features, fewer than */
static ot_status conv_as_dot(ex_kernel_ctx *c, const ot_instr *i, void *const *in,
                             const ex_leaf *ins, void *out, const ex_leaf *os, bool *done) {
    const ot_conv_dims *cd = i->attrs->conv;
    const ot_window *w = i->attrs->window;
    const ot_shape *ls = ins[0].shape, *rs = ins[1].shape, *osh = os->shape;
    int ns = cd->nspatial, r = ls->rank;
    if (i->attrs->feature_group_count > 1 || i->attrs->batch_group_count > 1 || ns < 1 ||
        (w && w->rank != ns) || osh->rank != r || rs->rank != r || r + ns > OT_MAX_RANK)
        return OT_OK;
    bool window = false; /* a window of more than one element */
    for (int s = 0; s < ns; s++) {
        const ot_window_dim *wd = w ? &w->dims[s] : NULL;
        int64_t k = rs->dims[cd->kernel_spatial[s]], st = wd && wd->stride ? wd->stride : 1;
        if (st != k ||
            (wd &&
             (wd->pad_lo || wd->pad_hi || (wd->base_dilation && wd->base_dilation != 1) ||
              (k > 1 && ((wd->window_dilation && wd->window_dilation != 1) || wd->reversal)))) ||
            ls->dims[cd->input_spatial[s]] != osh->dims[cd->output_spatial[s]] * k)
            return OT_OK;
        window |= k > 1;
    }
    int lr[OT_MAX_RANK] = {0}, orl[OT_MAX_RANK] = {0};
    conv_roles(r, cd->input_batch, cd->input_feature, cd->input_spatial, ns, lr);
    conv_roles(r, cd->output_batch, cd->output_feature, cd->output_spatial, ns, orl);
    if (memcmp(lr, orl, (size_t)(r - 1) * sizeof lr[0])) return OT_OK;
    /* a window of more than one element: only over few input features (oneDNN's direct kernels
     * vectorize over blocks of 16 of them: with 3 colours and a 16x16 window they run 256 kernel
     * positions of 3 features each, where the patch matrix has rows of 768) and a product of
     * long rows and many output features: where the dot measured faster than oneDNN's direct
     * convolution; with 16 or more features, or rows of 384, it measured even, with rows of 192
     * or fewer, or fewer output features, slower (docs/benchmarks.md) */
    int64_t kk = 1, no = rs->dims[cd->kernel_output_feature];
    for (int j = 0; j < r; j++)
        if (j != cd->kernel_output_feature) kk *= rs->dims[j];
    if (window && (rs->dims[cd->kernel_input_feature] >= CONV_PATCH_MAX_C ||
                   kk < CONV_PATCH_MIN_K || no < CONV_PATCH_MIN_N))
        return OT_OK;
    bool nchw = cd->input_batch == 0 && cd->input_feature == 1 && cd->output_batch == 0 &&
                cd->output_feature == 1;
    bool nhwc = window && cd->output_feature == r - 1;
    if (!nchw && !nhwc) return OT_OK;
    if (ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes) ||
        ex_overlaps(out, os->nbytes, in[1], ins[1].nbytes))
        return OT_OK;
    /* the input split: each spatial dim s into (output position, window position) at xd[d] */
    ot_shape xs = *ls;
    int64_t at[OT_MAX_RANK]; /* input dim d's own dim in xs, or its window part's */
    int xr = 0;
    for (int d = 0; d < r; d++) {
        int s = -1;
        for (int t = 0; t < ns; t++)
            if (cd->input_spatial[t] == d) s = t;
        if (s < 0) {
            at[d] = xr;
            xs.dims[xr++] = ls->dims[d];
            continue;
        }
        int64_t k = rs->dims[cd->kernel_spatial[s]];
        xs.dims[xr++] = ls->dims[d] / k;
        at[d] = xr;
        xs.dims[xr++] = k;
    }
    xs.rank = xr;
    /* the contraction in the kernel's memory order: kernel dim j against the split input's */
    ot_dot_dims dd;
    memset(&dd, 0, sizeof dd);
    int64_t xcon[OT_MAX_RANK], kcon[OT_MAX_RANK];
    int nc = 0;
    for (int j = 0; j < r; j++) {
        if (j == cd->kernel_output_feature) continue;
        int64_t d = cd->input_feature;
        for (int s = 0; s < ns; s++)
            if (cd->kernel_spatial[s] == j) d = cd->input_spatial[s];
        kcon[nc] = j;
        xcon[nc++] = at[d];
    }
    dd.ncontract = nc;
    ot_attrs da;
    memset(&da, 0, sizeof da);
    da.dot = &dd;
    ot_instr di = *i;
    di.attrs = &da;
    int64_t es = (int64_t)ot_dtype_size(osh->dtype);
    int fast = c->fast_run;
    /* NCHW with a window: the same one dot into the output's bytes as [(n, p), o], then each
     * image's [p, o] transposed into place (below) */
    bool nchw_window = nchw && window;
    if (!nchw || nchw_window) { /* one dot: [batch and positions in the input's order, o] */
        memcpy(dd.lhs_contract, xcon, sizeof xcon);
        memcpy(dd.rhs_contract, kcon, sizeof kcon);
        ot_shape ys = *osh;
        ys.rank = 0;
        for (int d = 0; d < xr; d++) {
            bool con = false;
            for (int k = 0; k < nc; k++) con |= xcon[k] == d;
            if (!con) ys.dims[ys.rank++] = xs.dims[d];
        }
        ys.dims[ys.rank++] = rs->dims[cd->kernel_output_feature];
        ex_leaf dl[2] = {{&xs, ins[0].nbytes}, {rs, ins[1].nbytes}}, dy = {&ys, os->nbytes};
        const ex_epilogue *epi = c->epilogue;
        if (nchw_window) c->epilogue = NULL; /* the dot's layout is not the output's */
        c->epilogue_done = false;
        bool d = false;
        ot_status st = ex_fast_dot(c, &di, in, dl, out, &dy, &d);
        c->epilogue = epi;
        OT_CHECK(st);
        if (!d) return OT_OK;
        if (nchw_window) { /* [n, p, o] -> [n, o, p] through scratch (the dot's is free now) */
            int64_t all = ot_shape_numel_unchecked(osh);
            int64_t pn = all / (osh->dims[0] * osh->dims[1]);
            int64_t td[3] = {osh->dims[0], pn, osh->dims[1]}, tp[3] = {0, 2, 1};
            void *sc = NULL;
            OT_CHECK(ex_scratch(c, (size_t)os->nbytes, &sc));
            ex_transpose(c, (size_t)es, 3, td, tp, out, sc);
            nchw_back k = {sc, out, es, all, epi};
            ex_par_for(c, (all + NCHW_BACK_PIECE - 1) / NCHW_BACK_PIECE, all * es * 2, nchw_back_fn,
                       &k);
            c->epilogue_done = epi != NULL;
        }
        *done = true;
        c->fast_run = fast + 1;
        return OT_OK;
    }
    /* per image, dot(w, x[n]) = [o, positions...]: the split input less its batch dim (0) */
    memmove(xs.dims, xs.dims + 1, (size_t)(xr - 1) * sizeof xs.dims[0]);
    xs.rank = xr - 1;
    for (int k = 0; k < nc; k++) {
        dd.lhs_contract[k] = kcon[k];
        dd.rhs_contract[k] = xcon[k] - 1;
    }
    ot_shape ys = *osh; /* [o, the positions in the input's order (the output's)] */
    ys.rank = 1;
    ys.dims[0] = osh->dims[1];
    for (int d = 1; d < xr; d++) {
        bool con = false;
        for (int k = 0; k < nc; k++) con |= xcon[k] == d;
        if (!con) ys.dims[ys.rank++] = xs.dims[d - 1];
    }
    int64_t nimg = ls->dims[0];
    int64_t xn = ot_shape_numel_unchecked(&xs), yn = ot_shape_numel_unchecked(&ys);
    ex_leaf dl[2] = {{rs, ins[1].nbytes}, {&xs, xn * es}}, dy = {&ys, yn * es};
    const ex_epilogue *epi = c->epilogue;
    dot_epi de = {epi, 0};
    ex_epilogue hook = {dot_epi_fn, &de};
    bool fused = epi != NULL;
    for (int64_t n = 0; n < nimg; n++) {
        void *din[2] = {in[1], (char *)in[0] + n * xn * es};
        de.off = n * yn;
        c->epilogue = epi ? &hook : NULL;
        c->epilogue_done = false;
        bool d = false;
        ot_status st = ex_fast_dot(c, &di, din, dl, (char *)out + n * yn * es, &dy, &d);
        c->epilogue = epi;
        if (st != OT_OK) return st;
        if (!d) { /* the dot declines (the first image: the shapes are the same for all) */
            c->epilogue_done = false;
            return OT_OK;
        }
        /* the dot's own GEMM (which runs the loop) or not is decided by the shape: the same
         * for every image */
        fused = fused && c->epilogue_done;
    }
    *done = true;
    c->fast_run = fast + 1;
    c->epilogue_done = fused;
    return OT_OK;
}

ot_status ex_fast_conv(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                       void *out, const ex_leaf *os, bool *done) {
    const ot_conv_dims *cd = i->attrs->conv;
    const ot_window *w = i->attrs->window;
    const ot_shape *ls = ins[0].shape, *rs = ins[1].shape, *osh = os->shape;
    if (!cd || !ex_gemm_dtype(ls->dtype, rs->dtype, osh->dtype)) return OT_OK;
    OT_CHECK(conv_as_dot(c, i, in, ins, out, os, done));
    if (*done) return OT_OK;
#ifdef OT_HAVE_DNNL
    OT_CHECK(ex_fast_conv_dnnl(c, i, in, ins, out, os, done));
    if (*done) return OT_OK;
#endif
    if (i->attrs->batch_group_count > 1 || cd->nspatial > 3) return OT_OK;
    if (w && w->rank != cd->nspatial) return OT_OK;
    if (ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes) ||
        ex_overlaps(out, os->nbytes, in[1], ins[1].nbytes))
        return OT_OK;
    conv_plan p;
    memset(&p, 0, sizeof p);
    p.t = osh->dtype;
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
    if (p.Kd > INT_MAX || p.Og > INT_MAX || p.P > INT_MAX || p.N * p.P > INT_MAX) return OT_OK;
    *done = true;
    if (p.N * p.P * O == 0) {
        c->fast_run++;
        return OT_OK;
    }
    size_t es = p.es;
    if (p.Kd == 0) { /* every output an empty sum */
        memset(out, 0, (size_t)os->nbytes);
        c->fast_run++;
        return OT_OK;
    }
    /* the positions' layouts: contiguous runs of the output's positions (direct writes) */
    bool pos_rowmajor = true; /* the spatial dims row-major among themselves */
    for (int s = 0; s + 1 < p.ns; s++)
        if (p.ostr_s[s] != p.odims[s + 1] * p.ostr_s[s + 1]) pos_rowmajor = false;
    /* the transposed form packs W^T for each tile's GEMM: only with tiles of many positions */
    p.tr = p.ns >= 1 && p.lstr_f != 1 && p.lstr_s[p.ns - 1] == 1 && p.P >= CONV_TR_MIN_P;
    int64_t per_tile = (int64_t)(CONV_TILE_BYTES / ((size_t)p.Kd * es));
    if (per_tile < 1) per_tile = 1;
    /* the groups' tasks run in one parallel loop: the tiles per group that feed the pool */
    int64_t want_g = cdiv(CONV_MIN_TASKS, p.G);
    int64_t ntiles;
    if (!p.tr) {
        int64_t NP = p.N * p.P;
        p.tm = cdiv(NP, want_g);
        if (p.tm > CONV_TILE_ROWS) p.tm = CONV_TILE_ROWS;
        if (p.tm > per_tile) p.tm = per_tile;
        ntiles = cdiv(NP, p.tm);
        p.rs = p.ns > 0 ? p.ostr_s[p.ns - 1] : p.ostr_b;
        p.direct = p.ostr_f == 1 && pos_rowmajor && p.rs <= INT_MAX && p.rs >= p.Og &&
                   (p.N == 1 || p.ostr_b == (p.ns > 0 ? p.odims[0] * p.ostr_s[0] : p.rs));
    } else {
        p.tm = p.P < CONV_TILE_ROWS ? p.P : CONV_TILE_ROWS;
        int64_t want = cdiv(want_g, p.N); /* tiles per batch element to feed the pool */
        int64_t even = cdiv(p.P, want);
        if (even < 16) even = p.P < 16 ? p.P : 16;
        if (p.tm > even) p.tm = even;
        if (p.tm > per_tile) p.tm = per_tile;
        p.ptiles = cdiv(p.P, p.tm);
        ntiles = p.N * p.ptiles;
        p.direct = p.ostr_s[p.ns - 1] == 1 && pos_rowmajor && p.ostr_f <= INT_MAX &&
                   p.ostr_f >= p.tm; /* the GEMM's ldc covers a tile's positions */
    }
    /* one tile (and few groups): blocks of output features too, so that the pool has work (each
     * block does the tile's im2col again, as costly as a GEMM of a few dozen features: only
     * then) */
    p.nto = 1;
    if (ntiles == 1 && p.Og >= 16 && want_g > 1) {
        p.nto = want_g;
        if (p.nto > p.Og / 8) p.nto = p.Og / 8;
    }
    p.to = cdiv(p.Og, p.nto);
    p.nto = cdiv(p.Og, p.to);
    p.ntg = ntiles * p.nto;
    int64_t ntasks = p.ntg * p.G;
    p.colb = ex_align64((size_t)(p.tm * p.Kd) * es);
    p.cmaj = !p.tr && p.lstr_f != 1;
    p.cbufb = p.tr     ? ex_align64((size_t)(4 * p.tm) * sizeof(int64_t))
              : p.cmaj ? ex_align64((size_t)p.kn * sizeof(int64_t))
                       : 0;
    if (!p.direct) p.cbufb += ex_align64((size_t)(p.tm * p.to) * es);
    int64_t work = p.N * p.P * p.Og * p.Kd * p.G; /* multiply-adds: the inline decision */
    int nth = conv_threads(c, ntasks, work * 4);
    p.wstride = ex_align64((size_t)(p.Kd * p.Og) * es);
    size_t wbytes = p.wstride * (size_t)p.G;
    int64_t ntab = 0;
    for (int s = 0; s < p.ns; s++) ntab += p.odims[s] * p.kdims[s];
    size_t tabb = ntab <= CONV_TAB_MAX ? ex_align64((size_t)ntab * sizeof(int64_t)) : 0;
    void *sp = NULL;
    OT_CHECK(ex_scratch(c, tabb + wbytes + (size_t)nth * (p.colb + p.cbufb), &sp));
    if (tabb) {
        int64_t *tab = sp, at = 0;
        for (int s = 0; s < p.ns; s++) {
            p.tabo[s] = at;
            for (int64_t o = 0; o < p.odims[s]; o++)
                for (int64_t k = 0; k < p.kdims[s]; k++) {
                    int64_t pos = o * p.stride[s] - p.pad_lo[s] + k * p.wdil[s];
                    bool inside = pos >= 0 && pos % p.bdil[s] == 0 && pos / p.bdil[s] < p.idims[s];
                    tab[at++] = inside ? pos / p.bdil[s] * p.lstr_s[s] : -1;
                }
        }
        p.tab = tab;
    }
    char *wm = (char *)sp + tabb;
    p.wm = wm;
    p.buf = wm + wbytes;
    p.x = in[0];
    p.y = out;
    /* OpenBLAS on one thread per call (its threaded GEMM's bits depend on the thread count) */
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    const char *r = in[1];
    bool anyrev = false;
    for (int s = 0; s < p.ns; s++) anyrev |= w && w->dims[s].reversal;
    if (p.G == 1 && !anyrev) { /* W is a permutation of the kernel: the blocked transpose */
        int64_t perm[OT_MAX_RANK];
        int np = 0;
        if (p.cmaj) perm[np++] = cd->kernel_input_feature;
        for (int s = 0; s < p.ns; s++) perm[np++] = cd->kernel_spatial[s];
        if (!p.cmaj) perm[np++] = cd->kernel_input_feature;
        perm[np++] = cd->kernel_output_feature;
        ex_transpose(c, es, rs->rank, rs->dims, perm, r, wm);
    } else {
        /* per group g: W_g[(q, c), o] = kernel[g * Og + o, c, kk(q)] (kk reversed where the
         * window says so); with cmaj W_g[(c, q), o]. All groups packed first, then every group's
         * tasks in one parallel loop: a per-example filter gradient (JAX's vmap(grad) of a
         * conv, one group per example) is many groups of small GEMMs, which one parallel loop
         * per group ran as a few tiny tasks each */
        int64_t ri = rstr[cd->kernel_input_feature], ro = rstr[cd->kernel_output_feature];
        for (int64_t g = 0; g < p.G; g++) {
            char *wg = wm + (size_t)g * p.wstride;
            int64_t k[OT_MAX_RANK] = {0};
            for (int64_t q = 0; q < p.kn; q++) {
                int64_t koff = 0;
                for (int s = 0; s < p.ns; s++) {
                    bool rev = w && w->dims[s].reversal;
                    koff += (rev ? p.kdims[s] - 1 - k[s] : k[s]) * rstr[cd->kernel_spatial[s]];
                }
                for (int64_t ci = 0; ci < p.Cg; ci++) {
                    int64_t src = koff + ci * ri + g * p.Og * ro;
                    int64_t dst = (p.cmaj ? ci * p.kn + q : q * p.Cg + ci) * p.Og;
                    if (es == 4)
                        for (int64_t o = 0; o < p.Og; o++)
                            ((uint32_t *)wg)[dst + o] = ((const uint32_t *)r)[src + o * ro];
                    else
                        for (int64_t o = 0; o < p.Og; o++)
                            ((uint64_t *)wg)[dst + o] = ((const uint64_t *)r)[src + o * ro];
                }
                conv_next(k, p.kdims, p.ns);
            }
        }
    }
    ex_par_for_dynamic(c, ntasks, work * 4, conv_tasks, &p);
    if (c->ftz) { /* the output is fully written: flush it whole */
        ex_flush_out(osh->dtype, out, ot_shape_numel_unchecked(osh));
    }
    c->fast_run++;
    return OT_OK;
}
