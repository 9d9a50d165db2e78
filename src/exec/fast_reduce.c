/* Fast kernels (see fast_kernels.h). Each one either reproduces its reference kernel bit for bit
 * (transpose, elementwise, reductions over many outputs) or differs from it only by summation
 * order (dot and convolution through BLAS, reductions of a few long rows split into fixed
 * blocks); none depends on the thread count. */
#include "exec/kernels.h"

#include "exec/exec_internal.h"

#include <cblas.h>
#undef I /* <complex.h>, pulled in by cblas.h */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

/* Below this many bytes touched a kernel runs on the calling thread without waking the pool. */
#define RT_INLINE_BYTES ((int64_t)1 << 18)

void rt_fast_ctx_init(rt_fast_ctx *c, ot_threadpool *pool, bool keep_denormals) {
    memset(c, 0, sizeof *c);
    c->pool = pool;
    c->use_default_pool = pool == NULL;
    c->ftz = !keep_denormals;
}

void rt_fast_ctx_release(rt_fast_ctx *c) {
    ot_aligned_free(c->scratch);
    c->scratch = NULL;
    c->cap = 0;
}

/* Scratch of at least `bytes` (64-byte aligned); contents are not kept across calls. */
static ot_status scratch(rt_fast_ctx *c, size_t bytes, void **out) {
    if (bytes == 0) bytes = 64;
    if (bytes > c->cap) {
        size_t want = bytes + bytes / 4;
        void *p = ot_aligned_alloc(64, want);
        if (!p)
            return ot_error(OT_ERR_OUT_OF_MEMORY,
                            "fast kernel: out of memory for %zu scratch bytes", bytes);
        ot_aligned_free(c->scratch);
        c->scratch = p;
        c->cap = want;
    }
    *out = c->scratch;
    return OT_OK;
}

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* Splits [0, n) over the pool with a fixed partition, or runs it inline when small. */
static void par_for(rt_fast_ctx *c, int64_t n, int64_t bytes, ot_range_fn fn, void *arg) {
    if (n <= 0) return;
    if (bytes < RT_INLINE_BYTES || n == 1) {
        fn(arg, 0, n, 0);
        return;
    }
    if (!c->pool && c->use_default_pool) c->pool = ot_threadpool_default(); /* first need */
    if (!c->pool || ot_threadpool_size(c->pool) == 1) {
        fn(arg, 0, n, 0);
        return;
    }
    ot_parallel_for(c->pool, n, 1, OT_SCHEDULE_STATIC, fn, arg);
}

static bool overlaps(const void *a, int64_t na, const void *b, int64_t nb) {
    if (na <= 0 || nb <= 0) return false;
    const char *pa = a, *pb = b;
    return pa < pb + nb && pb < pa + na;
}

/* ---- transpose ------------------------------------------------------------------------- */

#define TR_TILE 32

typedef struct tr_plan {
    size_t es;
    int r;
    int64_t od[OT_MAX_RANK]; /* output dims (unit dims dropped, runs merged) */
    int64_t is[OT_MAX_RANK]; /* input stride of each output dim, in elements */
    int64_t os[OT_MAX_RANK]; /* output strides */
    int b;                   /* the output dim that is innermost in the input */
    int64_t nouter, ntb;     /* work items: outer positions x tiles of dim b */
    const char *src;
    char *dst;
} tr_plan;

static inline void copy_elem(char *d, const char *s, size_t es) {
    switch (es) {
    case 1: *d = *s; break;
    case 2: memcpy(d, s, 2); break;
    case 4: memcpy(d, s, 4); break;
    case 8: memcpy(d, s, 8); break;
    default: memcpy(d, s, es); break;
    }
}

/* Input and output offsets of outer position q (all dims but the last and, when tiling, b). */
static void tr_outer(const tr_plan *p, int64_t q, int skip, int64_t *io, int64_t *oo) {
    int64_t i = 0, o = 0;
    for (int d = p->r - 2; d >= 0; d--) {
        if (d == skip) continue;
        int64_t x = q % p->od[d];
        q /= p->od[d];
        i += x * p->is[d];
        o += x * p->os[d];
    }
    *io = i;
    *oo = o;
}

static void tr_rows(void *arg, int64_t begin, int64_t end, int ith) {
    const tr_plan *p = arg;
    size_t row = (size_t)p->od[p->r - 1] * p->es;
    for (int64_t q = begin; q < end; q++) {
        int64_t io, oo;
        tr_outer(p, q, -1, &io, &oo);
        memcpy(p->dst + oo * (int64_t)p->es, p->src + io * (int64_t)p->es, row);
    }
}

#define TR_TILE_LOOP(T)                                                                            \
    for (int64_t j0 = 0; j0 < na; j0 += TR_TILE) {                                                 \
        int64_t j1 = j0 + TR_TILE < na ? j0 + TR_TILE : na;                                        \
        for (int64_t i = i0; i < i1; i++) {                                                        \
            T *d = (T *)(p->dst) + oo + i * osb;                                                   \
            const T *s = (const T *)(p->src) + io + i;                                             \
            for (int64_t j = j0; j < j1; j++) d[j] = s[j * isa];                                   \
        }                                                                                          \
    }

static void tr_tiles(void *arg, int64_t begin, int64_t end, int ith) {
    const tr_plan *p = arg;
    int a = p->r - 1;
    int64_t na = p->od[a], nb = p->od[p->b], isa = p->is[a], osb = p->os[p->b];
    for (int64_t w = begin; w < end; w++) {
        int64_t q = w / p->ntb, tb = w % p->ntb;
        int64_t io, oo;
        tr_outer(p, q, p->b, &io, &oo);
        int64_t i0 = tb * TR_TILE, i1 = i0 + TR_TILE < nb ? i0 + TR_TILE : nb;
        switch (p->es) {
        case 1: TR_TILE_LOOP(uint8_t); break;
        case 2: TR_TILE_LOOP(uint16_t); break;
        case 4: TR_TILE_LOOP(uint32_t); break;
        case 8: TR_TILE_LOOP(uint64_t); break;
        default:
            for (int64_t j0 = 0; j0 < na; j0 += TR_TILE) {
                int64_t j1 = j0 + TR_TILE < na ? j0 + TR_TILE : na;
                for (int64_t i = i0; i < i1; i++)
                    for (int64_t j = j0; j < j1; j++)
                        copy_elem(p->dst + (oo + i * osb + j) * (int64_t)p->es,
                                  p->src + (io + i + j * isa) * (int64_t)p->es, p->es);
            }
            break;
        }
    }
}

void rt_transpose(rt_fast_ctx *c, size_t es, int r, const int64_t *dims, const int64_t *perm,
                  const void *src, void *dst) {
    int64_t istr[OT_MAX_RANK], numel = 1;
    for (int d = r - 1; d >= 0; d--) {
        istr[d] = numel;
        numel *= dims[d];
    }
    if (numel == 0) return;
    tr_plan p;
    memset(&p, 0, sizeof p);
    p.es = es;
    p.src = src;
    p.dst = dst;
    for (int k = 0; k < r; k++) {
        int64_t n = dims[perm[k]], s = istr[perm[k]];
        if (n == 1) continue;
        if (p.r > 0 && p.is[p.r - 1] == s * n) { /* adjacent in both: one dim */
            p.od[p.r - 1] *= n;
            p.is[p.r - 1] = s;
            continue;
        }
        p.od[p.r] = n;
        p.is[p.r] = s;
        p.r++;
    }
    if (p.r == 0 || p.is[p.r - 1] == 1) {
        if (p.r == 0) {
            memcpy(dst, src, es);
            return;
        }
        int64_t run = 1;
        for (int d = p.r - 1; d >= 0; d--) {
            p.os[d] = run;
            run *= p.od[d];
        }
        int64_t rows = numel / p.od[p.r - 1];
        par_for(c, rows, numel * (int64_t)es, tr_rows, &p);
        return;
    }
    int64_t run = 1;
    for (int d = p.r - 1; d >= 0; d--) {
        p.os[d] = run;
        run *= p.od[d];
    }
    p.b = -1;
    for (int d = 0; d < p.r; d++)
        if (p.is[d] == 1) p.b = d;
    /* the input's innermost non-unit dim has stride 1 and is not the output's last (else the
     * branch above), so b exists and differs from r - 1 */
    p.ntb = (p.od[p.b] + TR_TILE - 1) / TR_TILE;
    p.nouter = numel / (p.od[p.r - 1] * p.od[p.b]);
    par_for(c, p.nouter * p.ntb, numel * (int64_t)es, tr_tiles, &p);
}

/* ---- dot through BLAS ------------------------------------------------------------------ */

static bool listed(int64_t v, const int64_t *l, int n) {
    for (int k = 0; k < n; k++)
        if (l[k] == v) return true;
    return false;
}

/* True when visiting the dims in `order` is row-major order over s (dims of extent 1 may sit
 * anywhere): the operand already is that permutation, no copy needed. */
static bool in_order(const int64_t *order, int n, const ot_shape *s) {
    int64_t last = -1;
    for (int k = 0; k < n; k++) {
        int64_t d = order[k];
        if (s->dims[d] == 1) continue;
        if (d < last) return false;
        last = d;
    }
    return true;
}

/* Subnormal results to zero of the same sign (the reference's FTZ), on the bits and without
 * branches so the loop vectorizes: a zero exponent field keeps only the sign. */
static void flush_out(ot_dtype t, void *y, int64_t n) {
    if (t == OT_F32) {
        uint32_t *p = y;
        for (int64_t e = 0; e < n; e++) p[e] &= (p[e] & 0x7f800000u) ? 0xffffffffu : 0x80000000u;
    } else {
        uint64_t *p = y;
        for (int64_t e = 0; e < n; e++)
            p[e] &= (p[e] & 0x7ff0000000000000ull) ? ~0ull : 0x8000000000000000ull;
    }
}

/* C[b] (M x N) = op(A[b]) (M x K) * op(B[b]) (K x N) for b < nb, row-major, through BLAS.
 * OpenBLAS runs single-threaded (its threaded GEMM gives different bits for different thread
 * counts); the pool splits the work instead, over a grid of GEMM_TM x GEMM_TN tiles of C fixed by
 * the shape alone. Every tile is one sgemm/dgemm over the whole K, so each element's sum is the
 * same whichever thread computes its tile: bits never depend on the thread count. */
#define GEMM_TM 512
#define GEMM_TN 1024

typedef struct gemm_args {
    ot_dtype t;
    int64_t nb, M, N, K;
    bool ta, tb;
    const void *a, *b;
    void *c;
    int64_t tm, tn; /* tiles along M and N */
    bool ftz;       /* flush subnormal results, each tile right after its GEMM (still in cache) */
} gemm_args;

static void gemm_tiles(void *arg, int64_t begin, int64_t end, int ith) {
    const gemm_args *g = arg;
    size_t es = ot_dtype_size(g->t);
    int lda = (int)(g->ta ? g->M : g->K), ldb = (int)(g->tb ? g->K : g->N), ldc = (int)g->N;
    if (lda < 1) lda = 1;
    if (ldb < 1) ldb = 1;
    if (ldc < 1) ldc = 1;
    for (int64_t w = begin; w < end; w++) {
        int64_t b = w / (g->tm * g->tn), t = w % (g->tm * g->tn);
        int64_t m0 = (t / g->tn) * GEMM_TM, n0 = (t % g->tn) * GEMM_TN;
        int64_t mm = g->M - m0 < GEMM_TM ? g->M - m0 : GEMM_TM;
        int64_t nn = g->N - n0 < GEMM_TN ? g->N - n0 : GEMM_TN;
        const char *a = (const char *)g->a + (size_t)(b * g->M * g->K) * es;
        const char *bb = (const char *)g->b + (size_t)(b * g->K * g->N) * es;
        char *c = (char *)g->c + (size_t)(b * g->M * g->N + m0 * g->N + n0) * es;
        a += (size_t)(g->ta ? m0 : m0 * g->K) * es;
        bb += (size_t)(g->tb ? n0 * g->K : n0) * es;
        if (g->K == 0) {
            for (int64_t r = 0; r < mm; r++)
                memset(c + (size_t)(r * g->N) * es, 0, (size_t)nn * es);
            continue;
        }
        if (g->t == OT_F32)
            cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                        g->tb ? CblasTrans : CblasNoTrans, (int)mm, (int)nn, (int)g->K, 1.0f,
                        (const float *)a, lda, (const float *)bb, ldb, 0.0f, (float *)c, ldc);
        else
            cblas_dgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                        g->tb ? CblasTrans : CblasNoTrans, (int)mm, (int)nn, (int)g->K, 1.0,
                        (const double *)a, lda, (const double *)bb, ldb, 0.0, (double *)c, ldc);
        if (g->ftz)
            for (int64_t r = 0; r < mm; r++) flush_out(g->t, c + (size_t)(r * g->N) * es, nn);
    }
}

static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

static void blas_one_thread(void) {
    openblas_set_num_threads(1);
}

static void run_gemm(rt_fast_ctx *c, gemm_args *g) {
    /* once per process (concurrent first calls from several devices set it once); again only if
     * the application changed it since */
    pthread_once(&g_blas_once, blas_one_thread);
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    g->tm = (g->M + GEMM_TM - 1) / GEMM_TM;
    g->tn = (g->N + GEMM_TN - 1) / GEMM_TN;
    /* "bytes" for the inline decision: the multiply-adds, scaled so ~64K of them stay inline */
    int64_t work = g->nb * g->M * g->N * (g->K ? g->K : 1);
    par_for(c, g->nb * g->tm * g->tn, work * 4, gemm_tiles, g);
}

static bool gemm_dtype(ot_dtype a, ot_dtype b, ot_dtype o) {
    return a == b && b == o && (o == OT_F32 || o == OT_F64);
}

static ot_status fast_dot(rt_fast_ctx *c, const ot_instr *i, void *const *in,
                          const ot_slot *const *ins, void *out, const ot_slot *os, bool *done) {
    const ot_dot_dims *dn = i->attrs->dot;
    const ot_shape *ls = &ins[0]->shape, *rs = &ins[1]->shape;
    if (!dn || !gemm_dtype(ls->dtype, rs->dtype, os->shape.dtype)) return OT_OK;
    int64_t lbfk[OT_MAX_RANK], lbkf[OT_MAX_RANK], rbkf[OT_MAX_RANK], rbfk[OT_MAX_RANK];
    int nl = 0, nr = 0;
    int64_t NB = 1, M = 1, N = 1, K = 1;
    for (int b = 0; b < dn->nbatch; b++) {
        lbfk[nl] = lbkf[nl] = dn->lhs_batch[b];
        rbkf[nr] = rbfk[nr] = dn->rhs_batch[b];
        nl++, nr++;
        NB *= ls->dims[dn->lhs_batch[b]];
    }
    int lf0 = nl, rf0 = nr;
    int64_t lfree[OT_MAX_RANK], rfree[OT_MAX_RANK];
    int nlf = 0, nrf = 0;
    for (int d = 0; d < ls->rank; d++)
        if (!listed(d, dn->lhs_batch, dn->nbatch) && !listed(d, dn->lhs_contract, dn->ncontract)) {
            lfree[nlf++] = d;
            M *= ls->dims[d];
        }
    for (int d = 0; d < rs->rank; d++)
        if (!listed(d, dn->rhs_batch, dn->nbatch) && !listed(d, dn->rhs_contract, dn->ncontract)) {
            rfree[nrf++] = d;
            N *= rs->dims[d];
        }
    for (int k = 0; k < dn->ncontract; k++) K *= ls->dims[dn->lhs_contract[k]];
    /* (b, f, k) and (b, k, f) orders of each operand */
    for (int k = 0; k < nlf; k++) lbfk[lf0 + k] = lfree[k];
    for (int k = 0; k < dn->ncontract; k++) lbfk[lf0 + nlf + k] = dn->lhs_contract[k];
    for (int k = 0; k < dn->ncontract; k++) lbkf[lf0 + k] = dn->lhs_contract[k];
    for (int k = 0; k < nlf; k++) lbkf[lf0 + dn->ncontract + k] = lfree[k];
    for (int k = 0; k < dn->ncontract; k++) rbkf[rf0 + k] = dn->rhs_contract[k];
    for (int k = 0; k < nrf; k++) rbkf[rf0 + dn->ncontract + k] = rfree[k];
    for (int k = 0; k < nrf; k++) rbfk[rf0 + k] = rfree[k];
    for (int k = 0; k < dn->ncontract; k++) rbfk[rf0 + nrf + k] = dn->rhs_contract[k];
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX) return OT_OK; /* BLAS takes int sizes */
    if (overlaps(out, os->nbytes, in[0], ins[0]->nbytes) ||
        overlaps(out, os->nbytes, in[1], ins[1]->nbytes))
        return OT_OK;
    *done = true;
    if (NB * M * N == 0) return OT_OK;
    size_t es = ot_dtype_size(os->shape.dtype);
    gemm_args g = {os->shape.dtype, NB, M, N, K, false, false, in[0], in[1], out, 0, 0, false};
    size_t need = 0, lbytes = align64((size_t)ins[0]->nbytes), rbytes = (size_t)ins[1]->nbytes;
    bool lcopy = false, rcopy = false;
    if (in_order(lbfk, ls->rank, ls)) {
        g.ta = false;
    } else if (in_order(lbkf, ls->rank, ls)) {
        g.ta = true;
    } else {
        lcopy = true;
        need += lbytes;
    }
    if (in_order(rbkf, rs->rank, rs)) {
        g.tb = false;
    } else if (in_order(rbfk, rs->rank, rs)) {
        g.tb = true;
    } else {
        rcopy = true;
        need += rbytes;
    }
    if (need) {
        void *s = NULL;
        OT_CHECK(scratch(c, need, &s));
        char *p = s;
        if (lcopy) {
            rt_transpose(c, es, ls->rank, ls->dims, lbfk, in[0], p);
            g.a = p;
            p += lbytes;
        }
        if (rcopy) {
            rt_transpose(c, es, rs->rank, rs->dims, rbkf, in[1], p);
            g.b = p;
        }
    }
    g.ftz = c->ftz;
    run_gemm(c, &g);
    c->fast_run++;
    return OT_OK;
}

/* ---- convolution by im2col + GEMM --------------------------------------------------------- */

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

static ot_status fast_conv(rt_fast_ctx *c, const ot_instr *i, void *const *in,
                           const ot_slot *const *ins, void *out, const ot_slot *os, bool *done) {
    const ot_conv_dims *cd = i->attrs->conv;
    const ot_window *w = i->attrs->window;
    const ot_shape *ls = &ins[0]->shape, *rs = &ins[1]->shape, *osh = &os->shape;
    if (!cd || !gemm_dtype(ls->dtype, rs->dtype, osh->dtype)) return OT_OK;
    if (i->attrs->batch_group_count > 1 || cd->nspatial > 3) return OT_OK;
    if (w && w->rank != cd->nspatial) return OT_OK;
    if (overlaps(out, os->nbytes, in[0], ins[0]->nbytes) ||
        overlaps(out, os->nbytes, in[1], ins[1]->nbytes))
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
    size_t wbytes = align64((size_t)(p.Kd * p.Og) * es);
    size_t colbytes = align64((size_t)(chunk * p.P * p.Kd) * es);
    size_t cbytes = (size_t)(chunk * p.P * p.Og) * es;
    void *sp = NULL;
    OT_CHECK(scratch(c, wbytes + colbytes + cbytes, &sp));
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
            par_for(c, rows, rows * p.Kd * (int64_t)es, conv_im2col, &p);
            gemm_args g = {osh->dtype, 1,  rows, p.Og, p.Kd, false, false,
                           p.col,      wm, p.cm, 0,    0,    false};
            run_gemm(c, &g);
            par_for(c, rows, rows * p.Og * (int64_t)es, conv_scatter, &p);
        }
    }
    if (c->ftz) { /* the output is fully written: flush it whole */
        flush_out(osh->dtype, out, ot_shape_numel_unchecked(osh));
    }
    c->fast_run++;
    return OT_OK;
}

/* ---- reductions ------------------------------------------------------------------------ */

/* The reducer op when the computation is exactly op(parameter 0, parameter 1) for a recognized
 * op, else OT_OP_INVALID. */
static ot_opcode reducer_op(const ot_computation *f, ot_dtype t) {
    if (!f || f->nparams != 2 || !f->root) return OT_OP_INVALID;
    const ot_instr *r = f->root;
    if (r->opcode != OT_OP_ADD && r->opcode != OT_OP_MULTIPLY && r->opcode != OT_OP_MAXIMUM &&
        r->opcode != OT_OP_MINIMUM)
        return OT_OP_INVALID;
    if (r->noperands != 2 || r->operands[0] != f->params[0] || r->operands[1] != f->params[1])
        return OT_OP_INVALID;
    for (int k = 0; k < 2; k++) {
        const ot_ir_shape *s = &f->params[k]->shape;
        if (s->kind != OT_IR_ARRAY || s->array.rank != 0 || s->array.dtype != t)
            return OT_OP_INVALID;
    }
    if (r->shape.kind != OT_IR_ARRAY || r->shape.array.dtype != t) return OT_OP_INVALID;
    return r->opcode;
}

/* The reference's scalar arithmetic: add and multiply flush inputs and result under FTZ;
 * maximum and minimum are IEEE 754-2019 (NaN propagates, -0 < +0) on DAZ inputs (a subnormal
 * counts as a signed zero). */
static inline float fz_f(float v, bool ftz) {
    return ftz && v != 0 && fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v;
}
static inline double fz_d(double v, bool ftz) {
    return ftz && v != 0 && fabs(v) < DBL_MIN ? copysign(0.0, v) : v;
}
static inline float add_f(float a, float b, bool z) {
    return fz_f(fz_f(a, z) + fz_f(b, z), z);
}
static inline double add_d(double a, double b, bool z) {
    return fz_d(fz_d(a, z) + fz_d(b, z), z);
}
static inline float mul_f(float a, float b, bool z) {
    if (!z) return a * b;
    return ex_tiny_f((double)fz_f(a, z) * (double)fz_f(b, z)); /* tininess as the reference */
}
static inline double mul_d(double a, double b, bool z) {
    return fz_d(fz_d(a, z) * fz_d(b, z), z);
}
static inline double max_d(double a, double b, bool z) {
    a = fz_d(a, z), b = fz_d(b, z); /* DAZ, as the reference (subnormals count as signed zeros) */
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    if (a == b) return signbit(a) ? b : a;
    return a > b ? a : b;
}
static inline double min_d(double a, double b, bool z) {
    a = fz_d(a, z), b = fz_d(b, z); /* DAZ, as the reference (subnormals count as signed zeros) */
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    if (a == b) return signbit(a) ? a : b;
    return a < b ? a : b;
}
/* A float NaN with its quiet bit set: the reference computes f32 maximum/minimum in double, and
 * the conversion to double quiets a signalling NaN (payload kept). */
static inline float quiet_f(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u |= 0x400000u;
    memcpy(&v, &u, 4);
    return v;
}
static inline float max_f(float a, float b, bool z) {
    a = fz_f(a, z), b = fz_f(b, z); /* DAZ, as the reference (subnormals count as signed zeros) */
    if (isnan(a)) return quiet_f(a);
    if (isnan(b)) return quiet_f(b);
    if (a == b) return signbit(a) ? b : a;
    return a > b ? a : b;
}
static inline float min_f(float a, float b, bool z) {
    a = fz_f(a, z), b = fz_f(b, z); /* DAZ, as the reference (subnormals count as signed zeros) */
    if (isnan(a)) return quiet_f(a);
    if (isnan(b)) return quiet_f(b);
    if (a == b) return signbit(a) ? a : b;
    return a < b ? a : b;
}

/* Reduction of x viewed as [O, R, I] over R. Mode A (many outputs or short rows): each output
 * folds its R elements in the reference's order (bit-identical to it): a float sum of rows (I ==
 * 1) in the canonical lane order (ex_reduce_lanes), maximum/minimum rows in lanes (their result
 * does not depend on the order; a row holding a NaN is folded again in order, so the NaN returned
 * is the reference's), anything else one by one from init. Mode B (few outputs, long rows): R is
 * cut into fixed blocks of RED_BLOCK (= EX_RED_BLOCK). For a lane-ordered sum, each block's
 * whole lane groups reduce to their tree in parallel and the combine folds init, the trees in
 * block order and the tail: exactly the canonical order. Otherwise each block folds from its
 * first element (rows of I == 1 in RED_LANES interleaved lanes, combined in lane order); the
 * result folds init then the block partials in block order. The blocks depend on the shape only,
 * so the result is the same for any thread count. */
#define RED_BLOCK        EX_RED_BLOCK
#define RED_LANES        8
#define RED_MANY_OUTPUTS 256
#define RED_ICHUNK       1024
#define RL               EX_RED_LANES

/* The row loops below are integer operations or one IEEE add per element (no multiply to
 * contract), so any vector width gives the same bits: x86-64 GCC builds them for AVX-512, AVX2
 * and the baseline, and the loader picks the widest the CPU has (the library itself targets the
 * baseline). */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && __GNUC__ >= 11 &&            \
    !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define RED_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RED_CLONES
#endif

/* The canonical lane order's pieces for an add reducer (exec_internal.h): the tree of the m
 * elements of x (m a positive multiple of RL), and a whole row of n from acc. z is a constant
 * after inlining, so the loops vectorize with or without flushing. */
#define DEFINE_LANES(T, SUF, ADDF)                                                                 \
    static inline __attribute__((always_inline))                                                   \
    T lane_tree_##SUF##_k(const T *x, int64_t m, bool z) {                                         \
        T lane[RL];                                                                                \
        for (int l = 0; l < RL; l++) lane[l] = x[l];                                               \
        for (int64_t r = RL; r < m; r += RL)                                                       \
            for (int l = 0; l < RL; l++) lane[l] = ADDF(lane[l], x[r + l], z);                     \
        for (int s = RL / 2; s >= 1; s /= 2)                                                       \
            for (int l = 0; l < s; l++) lane[l] = ADDF(lane[l], lane[l + s], z);                   \
        return lane[0];                                                                            \
    }                                                                                              \
    RED_CLONES static T lane_tree_##SUF(const T *x, int64_t m, bool z) {                           \
        return z ? lane_tree_##SUF##_k(x, m, true) : lane_tree_##SUF##_k(x, m, false);             \
    }                                                                                              \
    RED_CLONES static T lane_row_##SUF(const T *x, int64_t n, T acc, bool z) {                     \
        int64_t r = 0;                                                                             \
        for (int64_t rb = 0; rb + RL <= n; rb += RED_BLOCK) {                                      \
            int64_t re = rb + RED_BLOCK < n ? rb + RED_BLOCK : n;                                  \
            re = rb + (re - rb) / RL * RL;                                                         \
            acc = ADDF(acc, lane_tree_##SUF(x + rb, re - rb, z), z);                               \
            r = re;                                                                                \
        }                                                                                          \
        for (; r < n; r++) acc = ADDF(acc, x[r], z);                                               \
        return acc;                                                                                \
    }

typedef struct red_plan {
    ot_opcode op;
    bool ftz, lanes;
    int64_t O, R, I, nblk, nich;
    const void *x, *init;
    void *y, *part;
} red_plan;

#define DEFINE_RED(T, SUF, OPF)                                                                    \
    static void red_a_##SUF(void *arg, int64_t begin, int64_t end, int ith) {                      \
        const red_plan *p = arg;                                                                   \
        const T *x = p->x;                                                                         \
        T *y = p->y, init = *(const T *)p->init;                                                   \
        bool z = p->ftz;                                                                           \
        for (int64_t w = begin; w < end; w++) {                                                    \
            int64_t o = w / p->nich, i0 = (w % p->nich) * RED_ICHUNK;                              \
            int64_t i1 = i0 + RED_ICHUNK < p->I ? i0 + RED_ICHUNK : p->I;                          \
            if (p->I == 1) {                                                                       \
                const T *row = x + o * p->R;                                                       \
                if (red_row_##SUF(p, row, init, z, &y[o])) continue;                               \
                T acc = init;                                                                      \
                for (int64_t r = 0; r < p->R; r++) acc = OPF(acc, row[r], z);                      \
                y[o] = acc;                                                                        \
                continue;                                                                          \
            }                                                                                      \
            T *yo = y + o * p->I;                                                                  \
            for (int64_t i = i0; i < i1; i++) yo[i] = init;                                        \
            for (int64_t r = 0; r < p->R; r++) {                                                   \
                const T *row = x + (o * p->R + r) * p->I;                                          \
                for (int64_t i = i0; i < i1; i++) yo[i] = OPF(yo[i], row[i], z);                   \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void red_b_##SUF(void *arg, int64_t begin, int64_t end, int ith) {                      \
        const red_plan *p = arg;                                                                   \
        const T *x = p->x;                                                                         \
        T *part = p->part;                                                                         \
        bool z = p->ftz;                                                                           \
        for (int64_t w = begin; w < end; w++) {                                                    \
            int64_t o = w / p->nblk, blk = w % p->nblk;                                            \
            int64_t r0 = blk * RED_BLOCK, r1 = r0 + RED_BLOCK < p->R ? r0 + RED_BLOCK : p->R;      \
            T *pp = part + w * p->I;                                                               \
            if (p->I == 1 && p->lanes) { /* the canonical order: this block's lane tree */         \
                int64_t m = (r1 - r0) / RL * RL;                                                   \
                if (m) pp[0] = red_tree_##SUF(x + o * p->R + r0, m, z);                            \
                continue;                                                                          \
            }                                                                                      \
            if (p->I == 1) {                                                                       \
                const T *row = x + o * p->R;                                                       \
                T lane[RED_LANES];                                                                 \
                int nlane = r1 - r0 < RED_LANES ? (int)(r1 - r0) : RED_LANES;                      \
                for (int l = 0; l < nlane; l++) lane[l] = row[r0 + l];                             \
                int64_t r = r0 + nlane;                                                            \
                for (; r + RED_LANES <= r1; r += RED_LANES)                                        \
                    for (int l = 0; l < RED_LANES; l++) lane[l] = OPF(lane[l], row[r + l], z);     \
                for (int l = 0; r < r1; r++, l++) lane[l] = OPF(lane[l], row[r], z);               \
                T acc = lane[0];                                                                   \
                for (int l = 1; l < nlane; l++) acc = OPF(acc, lane[l], z);                        \
                pp[0] = acc;                                                                       \
                continue;                                                                          \
            }                                                                                      \
            const T *first = x + (o * p->R + r0) * p->I;                                           \
            for (int64_t i = 0; i < p->I; i++) pp[i] = first[i];                                   \
            for (int64_t r = r0 + 1; r < r1; r++) {                                                \
                const T *row = x + (o * p->R + r) * p->I;                                          \
                for (int64_t i = 0; i < p->I; i++) pp[i] = OPF(pp[i], row[i], z);                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void red_combine_##SUF(const red_plan *p) {                                             \
        const T *part = p->part;                                                                   \
        T *y = p->y, init = *(const T *)p->init;                                                   \
        if (p->I == 1 && p->lanes) { /* init, the block trees in order, then the tail */           \
            const T *x = p->x;                                                                     \
            for (int64_t o = 0; o < p->O; o++) {                                                   \
                T acc = init;                                                                      \
                int64_t r = 0;                                                                     \
                for (int64_t b = 0; b < p->nblk; b++) {                                            \
                    int64_t r0 = b * RED_BLOCK;                                                    \
                    int64_t r1 = r0 + RED_BLOCK < p->R ? r0 + RED_BLOCK : p->R;                    \
                    int64_t m = (r1 - r0) / RL * RL;                                               \
                    if (m) acc = OPF(acc, part[o * p->nblk + b], p->ftz);                          \
                    r = r0 + m;                                                                    \
                }                                                                                  \
                for (; r < p->R; r++) acc = OPF(acc, x[o * p->R + r], p->ftz);                     \
                y[o] = acc;                                                                        \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        for (int64_t o = 0; o < p->O; o++)                                                         \
            for (int64_t i = 0; i < p->I; i++) {                                                   \
                T acc = init;                                                                      \
                for (int64_t b = 0; b < p->nblk; b++)                                              \
                    acc = OPF(acc, part[(o * p->nblk + b) * p->I + i], p->ftz);                    \
                y[o * p->I + i] = acc;                                                             \
            }                                                                                      \
    }

DEFINE_LANES(float, f32, add_f)
DEFINE_LANES(double, f64, add_d)

/* maximum/minimum of a row in RL lanes, on integer keys: DAZ inputs (a subnormal is a signed
 * zero), then the bits mapped to a signed integer whose order is the floats' with -0 < +0. The
 * result is the reference's whatever the order. A NaN is detected from the largest magnitude bits
 * seen, kept per lane beside the keys (one vector maximum per vector of input: no horizontal
 * reduction inside the loop, which made the loop slower than memory); a NaN anywhere (the init
 * included) returns false and the caller folds the row in order, so the NaN is the reference's. */
#define DEFINE_MINMAX_ROW(T, SUF, UT, ST, EXP, ABS, SGN, MAXP)                                     \
    static inline __attribute__((always_inline)) ST mm_key_##SUF(T v, bool z, UT *amax) {          \
        UT u;                                                                                      \
        memcpy(&u, &v, sizeof u);                                                                  \
        if (z) u = (u & (EXP)) == 0 ? u & (SGN) : u;                                               \
        UT a = u & (ABS);                                                                          \
        *amax = a > *amax ? a : *amax;                                                             \
        ST k = (ST)u;                                                                              \
        return k ^ ((k >> (sizeof(ST) * 8 - 1)) & (ST)(ABS));                                      \
    }                                                                                              \
    static inline __attribute__((always_inline)) bool mm_row_##SUF##_k(const T *x, int64_t n,      \
                                                                       T init, bool z, T *y) {     \
        if (n == 0) return false;                                                                  \
        UT a0 = 0, amax[RL];                                                                       \
        ST k0 = mm_key_##SUF(init, z, &a0), lane[RL];                                              \
        for (int l = 0; l < RL; l++) lane[l] = k0, amax[l] = a0;                                   \
        int64_t r = 0;                                                                             \
        for (; r + RL <= n; r += RL)                                                               \
            for (int l = 0; l < RL; l++) {                                                         \
                ST k = mm_key_##SUF(x[r + l], z, &amax[l]);                                        \
                lane[l] = (MAXP) ? (k > lane[l] ? k : lane[l]) : (k < lane[l] ? k : lane[l]);      \
            }                                                                                      \
        for (; r < n; r++) {                                                                       \
            ST k = mm_key_##SUF(x[r], z, &amax[0]);                                                \
            lane[0] = (MAXP) ? (k > lane[0] ? k : lane[0]) : (k < lane[0] ? k : lane[0]);          \
        }                                                                                          \
        ST acc = lane[0];                                                                          \
        UT am = amax[0];                                                                           \
        for (int l = 1; l < RL; l++) {                                                             \
            acc = (MAXP) ? (lane[l] > acc ? lane[l] : acc) : (lane[l] < acc ? lane[l] : acc);      \
            am = amax[l] > am ? amax[l] : am;                                                      \
        }                                                                                          \
        if (am > (EXP)) return false;                                                              \
        acc ^= (acc >> (sizeof(ST) * 8 - 1)) & (ST)(ABS);                                          \
        memcpy(y, &acc, sizeof acc);                                                               \
        return true;                                                                               \
    }
DEFINE_MINMAX_ROW(float, maxf, uint32_t, int32_t, 0x7f800000u, 0x7fffffffu, 0x80000000u, 1)
DEFINE_MINMAX_ROW(float, minf, uint32_t, int32_t, 0x7f800000u, 0x7fffffffu, 0x80000000u, 0)
DEFINE_MINMAX_ROW(double, maxd, uint64_t, int64_t, 0x7ff0000000000000ull, 0x7fffffffffffffffull,
                  0x8000000000000000ull, 1)
DEFINE_MINMAX_ROW(double, mind, uint64_t, int64_t, 0x7ff0000000000000ull, 0x7fffffffffffffffull,
                  0x8000000000000000ull, 0)

/* The row fast paths of mode A (I == 1): true when *y is written. */
static bool red_row_add_f32(const red_plan *p, const float *x, float init, bool z, float *y) {
    if (!p->lanes) return false;
    *y = lane_row_f32(x, p->R, init, z);
    return true;
}
static bool red_row_add_f64(const red_plan *p, const double *x, double init, bool z, double *y) {
    if (!p->lanes) return false;
    *y = lane_row_f64(x, p->R, init, z);
    return true;
}
static bool red_row_mul_f32(const red_plan *p, const float *x, float init, bool z, float *y) {
    (void)p, (void)x, (void)init, (void)z, (void)y;
    return false;
}
static bool red_row_mul_f64(const red_plan *p, const double *x, double init, bool z, double *y) {
    (void)p, (void)x, (void)init, (void)z, (void)y;
    return false;
}
#define DEFINE_MM_DISPATCH(T, SUF, K)                                                              \
    RED_CLONES static bool red_row_##SUF(const red_plan *p, const T *x, T init, bool z, T *y) {    \
        return z ? mm_row_##K##_k(x, p->R, init, true, y)                                          \
                 : mm_row_##K##_k(x, p->R, init, false, y);                                        \
    }
DEFINE_MM_DISPATCH(float, max_f32, maxf)
DEFINE_MM_DISPATCH(float, min_f32, minf)
DEFINE_MM_DISPATCH(double, max_f64, maxd)
DEFINE_MM_DISPATCH(double, min_f64, mind)
/* mode B's lane trees (only a lane-ordered sum uses them) */
#define red_tree_add_f32          lane_tree_f32
#define red_tree_add_f64          lane_tree_f64
#define red_tree_mul_f32(x, m, z) ((void)(x), (void)(m), (void)(z), 0.0f)
#define red_tree_mul_f64(x, m, z) ((void)(x), (void)(m), (void)(z), 0.0)
#define red_tree_max_f32          red_tree_mul_f32
#define red_tree_min_f32          red_tree_mul_f32
#define red_tree_max_f64          red_tree_mul_f64
#define red_tree_min_f64          red_tree_mul_f64

DEFINE_RED(float, add_f32, add_f)
DEFINE_RED(float, mul_f32, mul_f)
DEFINE_RED(float, max_f32, max_f)
DEFINE_RED(float, min_f32, min_f)
DEFINE_RED(double, add_f64, add_d)
DEFINE_RED(double, mul_f64, mul_d)
DEFINE_RED(double, max_f64, max_d)
DEFINE_RED(double, min_f64, min_d)

typedef struct red_fns {
    ot_range_fn a, b;
    void (*combine)(const red_plan *);
} red_fns;

static red_fns red_pick(ot_opcode op, ot_dtype t) {
#define RF(SUF)                                                                                    \
    (red_fns) {                                                                                    \
        red_a_##SUF, red_b_##SUF, red_combine_##SUF                                                \
    }
    bool f = t == OT_F32;
    switch (op) {
    case OT_OP_ADD: return f ? RF(add_f32) : RF(add_f64);
    case OT_OP_MULTIPLY: return f ? RF(mul_f32) : RF(mul_f64);
    case OT_OP_MAXIMUM: return f ? RF(max_f32) : RF(max_f64);
    default: return f ? RF(min_f32) : RF(min_f64);
    }
#undef RF
}

/* Reduce instruction i of input x (shape xs, xbytes) from init (dtype it, ibytes), into out. */
static ot_status reduce_core(rt_fast_ctx *c, const ot_instr *i, const void *x0, const ot_shape *xs,
                             int64_t xbytes, const void *init, ot_dtype it, int64_t ibytes,
                             void *out, const ot_slot *os, bool *done) {
    if (i->noperands != 2 || i->ncalled < 1 || i->shape.kind != OT_IR_ARRAY) return OT_OK;
    ot_dtype t = xs->dtype;
    if ((t != OT_F32 && t != OT_F64) || it != t || os->shape.dtype != t) return OT_OK;
    ot_opcode op = reducer_op(i->called[0], t);
    if (op == OT_OP_INVALID) return OT_OK;
    if (overlaps(out, os->nbytes, x0, xbytes) || overlaps(out, os->nbytes, init, ibytes))
        return OT_OK;
    bool red[OT_MAX_RANK] = {false};
    for (int k = 0; k < i->attrs->ndims; k++) red[i->attrs->dims[k]] = true;
    /* [O, R, I] when the reduced non-unit dims are one contiguous run, else transpose the
     * reduced dims last (keeping both groups in order, so the fold order is unchanged) */
    int first = -1, last = -1;
    bool contiguous = true;
    for (int d = 0; d < xs->rank; d++) {
        if (xs->dims[d] == 1 || !red[d]) continue;
        if (first < 0) first = d;
        last = d;
    }
    for (int d = first; first >= 0 && d <= last; d++)
        if (!red[d] && xs->dims[d] != 1) contiguous = false;
    int64_t O = 1, R = 1, I = 1;
    size_t es = ot_dtype_size(t);
    const void *x = x0;
    *done = true;
    if (contiguous) {
        for (int d = 0; d < xs->rank; d++) {
            if (red[d])
                R *= xs->dims[d];
            else if (first >= 0 && d > last)
                I *= xs->dims[d];
            else
                O *= xs->dims[d];
        }
    } else {
        int64_t perm[OT_MAX_RANK];
        int np = 0;
        for (int d = 0; d < xs->rank; d++)
            if (!red[d]) {
                perm[np++] = d;
                O *= xs->dims[d];
            }
        for (int d = 0; d < xs->rank; d++)
            if (red[d]) {
                perm[np++] = d;
                R *= xs->dims[d];
            }
        void *s = NULL;
        OT_CHECK(scratch(c, (size_t)xbytes, &s));
        rt_transpose(c, es, xs->rank, xs->dims, perm, x0, s);
        x = s;
    }
    int64_t nout = O * I;
    if (nout == 0) {
        c->fast_run++;
        return OT_OK;
    }
    red_plan p = {op, c->ftz, ex_reduce_lanes(i), O, R, I, 0, 0, x, init, out, NULL};
    red_fns f = red_pick(op, t);
    int64_t bytes = O * R * I * (int64_t)es;
    if (nout >= RED_MANY_OUTPUTS || R <= RED_BLOCK) {
        p.nich = I == 1 ? 1 : (I + RED_ICHUNK - 1) / RED_ICHUNK;
        par_for(c, O * p.nich, bytes, f.a, &p);
    } else {
        p.nblk = (R + RED_BLOCK - 1) / RED_BLOCK;
        size_t pbytes = (size_t)(O * p.nblk * I) * es;
        void *s = NULL;
        if (x == c->scratch) { /* the transposed input lives in scratch: keep it, add behind */
            size_t off = align64((size_t)xbytes);
            /* grow by copying the transposed input over (rare: non-contiguous, few outputs) */
            if (off + pbytes > c->cap) {
                void *nb = ot_aligned_alloc(64, off + pbytes);
                if (!nb)
                    return ot_error(OT_ERR_OUT_OF_MEMORY,
                                    "fast kernel: out of memory for %zu scratch bytes",
                                    off + pbytes);
                memcpy(nb, c->scratch, (size_t)xbytes);
                ot_aligned_free(c->scratch);
                c->scratch = nb;
                c->cap = off + pbytes;
                p.x = nb;
            }
            s = c->scratch + off;
        } else {
            OT_CHECK(scratch(c, pbytes, &s));
        }
        p.part = s;
        par_for(c, O * p.nblk, bytes, f.b, &p);
        f.combine(&p);
    }
    c->fast_run++;
    return OT_OK;
}

static ot_status fast_reduce(rt_fast_ctx *c, const ot_instr *i, void *const *in,
                             const ot_slot *const *ins, void *out, const ot_slot *os, bool *done) {
    return reduce_core(c, i, in[0], &ins[0]->shape, ins[0]->nbytes, in[1], ins[1]->shape.dtype,
                       ins[1]->nbytes, out, os, done);
}

/* A fusion that is one reduce of a fusion parameter from a parameter or a scalar constant (what
 * -O2 makes of a reduce with nothing to fuse): the reduce kernel above. */
static ot_status fast_reduce_fusion(rt_fast_ctx *c, const ot_instr *i, int nin, void *const *in,
                                    const ot_slot *const *ins, void *out, const ot_slot *os,
                                    bool *done) {
    if (i->ncalled < 1 || nin != i->noperands) return OT_OK;
    const ot_computation *f = i->called[0];
    const ot_instr *r = f->root;
    if (!r || r->opcode != OT_OP_REDUCE || r->noperands != 2) return OT_OK;
    for (int k = 0; k < i->noperands; k++)
        if (i->operands[k]->shape.kind != OT_IR_ARRAY) return OT_OK;
    const ot_instr *xp = r->operands[0], *ip = r->operands[1];
    if (xp->opcode != OT_OP_PARAMETER || xp->attrs->index < 0 || xp->attrs->index >= nin)
        return OT_OK;
    int xk = (int)xp->attrs->index;
    if (!ot_shape_equal(&ins[xk]->shape, &xp->shape.array)) return OT_OK;
    if (ip->opcode == OT_OP_PARAMETER && ip->attrs->index >= 0 && ip->attrs->index < nin) {
        int ik = (int)ip->attrs->index;
        return reduce_core(c, r, in[xk], &ins[xk]->shape, ins[xk]->nbytes, in[ik],
                           ins[ik]->shape.dtype, ins[ik]->nbytes, out, os, done);
    }
    const ot_literal *lit = ip->attrs->literal;
    if (ip->opcode != OT_OP_CONSTANT || !lit || lit->elided || ip->shape.kind != OT_IR_ARRAY ||
        ip->shape.array.rank != 0 || lit->nbytes != (int64_t)ot_dtype_size(ip->shape.array.dtype))
        return OT_OK;
    return reduce_core(c, r, in[xk], &ins[xk]->shape, ins[xk]->nbytes, lit->data,
                       ip->shape.array.dtype, 0, out, os, done);
}

/* ---- plain elementwise ops, straight into the output slot ------------------------------- */

static inline float sub_f(float a, float b, bool z) {
    return fz_f(fz_f(a, z) - fz_f(b, z), z);
}
static inline double sub_d(double a, double b, bool z) {
    return fz_d(fz_d(a, z) - fz_d(b, z), z);
}
static inline float div_f(float a, float b, bool z) {
    if (!z) return a / b;
    return ex_tiny_f((double)fz_f(a, z) / (double)fz_f(b, z)); /* tininess as the reference */
}
static inline double div_d(double a, double b, bool z) {
    return fz_d(fz_d(a, z) / fz_d(b, z), z);
}

#define TYPED_LOOP(T, F)                                                                           \
    do {                                                                                           \
        const T *x = a, *w = b;                                                                    \
        T *o = y;                                                                                  \
        if (z)                                                                                     \
            for (int64_t e = 0; e < n; e++) o[e] = F(x[e], w[e], true);                            \
        else                                                                                       \
            for (int64_t e = 0; e < n; e++) o[e] = F(x[e], w[e], false);                           \
    } while (0)

/* The f32/f64 arithmetic binary ops as typed loops, with the reference's FTZ and NaN rules
 * (elementwise.c): the same bits as ex_binary without its per-element dtype dispatch. */
static bool typed_binary(ot_opcode op, ot_dtype t, ot_dtype ta, ot_dtype tb, bool z, const void *a,
                         const void *b, void *y, int64_t n) {
    if (ta != t || tb != t || (t != OT_F32 && t != OT_F64)) return false;
    bool f = t == OT_F32;
    switch (op) {
    case OT_OP_ADD:
        if (f)
            TYPED_LOOP(float, add_f);
        else
            TYPED_LOOP(double, add_d);
        return true;
    case OT_OP_SUBTRACT:
        if (f)
            TYPED_LOOP(float, sub_f);
        else
            TYPED_LOOP(double, sub_d);
        return true;
    case OT_OP_MULTIPLY:
        if (f)
            TYPED_LOOP(float, mul_f);
        else
            TYPED_LOOP(double, mul_d);
        return true;
    case OT_OP_DIVIDE:
        if (f)
            TYPED_LOOP(float, div_f);
        else
            TYPED_LOOP(double, div_d);
        return true;
    case OT_OP_MAXIMUM:
        if (f)
            TYPED_LOOP(float, max_f);
        else
            TYPED_LOOP(double, max_d);
        return true;
    case OT_OP_MINIMUM:
        if (f)
            TYPED_LOOP(float, min_f);
        else
            TYPED_LOOP(double, min_d);
        return true;
    default: return false;
    }
}

static ot_status fast_elementwise(rt_fast_ctx *c, const ot_instr *i, int nin, void *const *in,
                                  const ot_slot *const *ins, void *out, const ot_slot *os,
                                  bool *done) {
    ot_opcode op = i->opcode;
    int64_t n = ot_shape_numel_unchecked(&os->shape);
    /* the reference loops read element e of every input before writing element e: an output
     * that is exactly an input's buffer (in place) is fine, a partial overlap is not */
    for (int k = 0; k < nin; k++)
        if (in[k] != out && overlaps(out, os->nbytes, in[k], ins[k]->nbytes)) return OT_OK;
    for (int k = 0; k < nin; k++)
        if (ot_shape_numel_unchecked(&ins[k]->shape) != n) return OT_OK; /* scalar operands */
    if (nin == 2 && typed_binary(op, os->shape.dtype, ins[0]->shape.dtype, ins[1]->shape.dtype,
                                 c->ftz, in[0], in[1], out, n)) {
        *done = true;
        c->fast_run++;
        return OT_OK;
    }
    bool ftz = ex_ftz;
    ex_ftz = c->ftz;
    ot_status st = OT_OK;
    if (ot_opcode_is_elementwise_unary(op) && nin == 1) {
        st = ex_unary(op, ins[0]->shape.dtype, os->shape.dtype, in[0], out, n);
    } else if (op == OT_OP_COMPARE && nin == 2) {
        st = ex_compare(i->attrs->cmp_dir, i->attrs->cmp_type, ins[0]->shape.dtype, in[0], in[1],
                        out, n);
    } else if (ot_opcode_is_elementwise_binary(op) && nin == 2) {
        st = ex_binary(op, os->shape.dtype, in[0], in[1], out, n);
    } else if (op == OT_OP_CONVERT && nin == 1) {
        st = ex_convert(ins[0]->shape.dtype, os->shape.dtype, in[0], out, n);
    } else {
        ex_ftz = ftz;
        return OT_OK;
    }
    ex_ftz = ftz;
    *done = true;
    if (st == OT_OK) c->fast_run++;
    return st;
}

/* ---- transpose kernel ------------------------------------------------------------------- */

static ot_status fast_transpose(rt_fast_ctx *c, const ot_instr *i, void *const *in,
                                const ot_slot *const *ins, void *out, const ot_slot *os,
                                bool *done) {
    if (overlaps(out, os->nbytes, in[0], ins[0]->nbytes)) return OT_OK;
    const ot_shape *s = &ins[0]->shape;
    if (i->attrs->ndims != s->rank) return OT_OK;
    rt_transpose(c, ot_dtype_size(s->dtype), s->rank, s->dims, i->attrs->dims, in[0], out);
    *done = true;
    c->fast_run++;
    return OT_OK;
}

/* ---- gather ------------------------------------------------------------------------------
 * The reference's gather (src/exec/shape_ops.c) with the index arithmetic hoisted: when the
 * output's offset dims are its trailing dims, output element (b, o) (b over the batch dims, o
 * over the offset dims) is operand element base(b) + off(o), where off(o) walks the offset dims'
 * operand strides (computed once, into scratch) and base(b) sums each start index clamped to
 * [0, dim - slice size] (the reference's clamp) times its operand stride, and for each operand
 * batching dim the matching batch position times its stride. s32/s64 indices, elements of 1, 2,
 * 4 or 8 bytes; anything else is left to the reference. The copies are the same bytes. */
static ot_status fast_gather(rt_fast_ctx *c, const ot_instr *i, void *const *in,
                             const ot_slot *const *ins, void *out, const ot_slot *os, bool *done) {
    const ot_gather_dims *g = i->attrs->gather;
    if (!g) return OT_OK;
    const ot_shape *xs = &ins[0]->shape, *ks = &ins[1]->shape, *ys = &os->shape;
    ot_dtype kt = ks->dtype;
    size_t es = ot_dtype_size(ys->dtype);
    if ((kt != OT_S32 && kt != OT_S64) || xs->dtype != ys->dtype ||
        (es != 1 && es != 2 && es != 4 && es != 8))
        return OT_OK;
    int yr = ys->rank, no = g->noffset, nbd = yr - no;
    if (nbd < 0 || g->nslice_sizes != xs->rank) return OT_OK;
    for (int k = 0; k < no; k++)
        if (g->offset_dims[k] != nbd + k) return OT_OK;
    if (overlaps(out, os->nbytes, in[0], ins[0]->nbytes) ||
        overlaps(out, os->nbytes, in[1], ins[1]->nbytes))
        return OT_OK;
    int64_t xstr[OT_MAX_RANK], kstr[OT_MAX_RANK];
    ot_shape_strides(xs, xstr);
    ot_shape_strides(ks, kstr);
    /* the operand dims the offset dims walk, in order */
    int offd[OT_MAX_RANK], nod = 0;
    for (int d = 0; d < xs->rank; d++) {
        bool skip = false;
        for (int k = 0; k < g->ncollapsed; k++) skip |= g->collapsed_slice_dims[k] == d;
        for (int k = 0; k < g->nbatching; k++) skip |= g->operand_batching_dims[k] == d;
        if (!skip) offd[nod++] = d;
    }
    if (nod != no) return OT_OK;
    /* the output's batch dims are the indices' dims without index_vector_dim, in order */
    int64_t ivd = g->index_vector_dim;
    int kd[OT_MAX_RANK], nk = 0;
    for (int d = 0; d < ks->rank; d++)
        if (d != ivd) kd[nk++] = d;
    if (nk != nbd) return OT_OK;
    for (int q = 0; q < nbd; q++)
        if (ks->dims[kd[q]] != ys->dims[q]) return OT_OK;
    int bq[OT_MAX_RANK];
    for (int k = 0; k < g->nbatching; k++) {
        bq[k] = -1;
        for (int q = 0; q < nbd; q++)
            if (kd[q] == g->start_indices_batching_dims[k]) bq[k] = q;
        if (bq[k] < 0) return OT_OK;
    }
    if (g->nstart_index_map > (ivd < ks->rank ? ks->dims[ivd] : 1)) return OT_OK;
    int64_t NO = 1, NB = 1;
    for (int k = 0; k < no; k++) NO *= ys->dims[nbd + k];
    for (int q = 0; q < nbd; q++) NB *= ys->dims[q];
    *done = true;
    c->fast_run++;
    if (NO == 0 || NB == 0) return OT_OK;
    int64_t *oo = NULL;
    OT_CHECK(scratch(c, (size_t)NO * sizeof *oo, (void **)&oo));
    int64_t idx[OT_MAX_RANK] = {0};
    for (int64_t o = 0; o < NO; o++) {
        int64_t off = 0;
        for (int k = 0; k < no; k++) off += idx[k] * xstr[offd[k]];
        oo[o] = off;
        for (int k = no - 1; k >= 0 && ++idx[k] == ys->dims[nbd + k]; k--) idx[k] = 0;
    }
    int64_t ivs = ivd < ks->rank ? kstr[ivd] : 0, bidx[OT_MAX_RANK] = {0};
    const char *x = in[0];
    char *y = out;
    for (int64_t b = 0; b < NB; b++) {
        int64_t kb = 0, base = 0;
        for (int q = 0; q < nbd; q++) kb += bidx[q] * kstr[kd[q]];
        for (int k = 0; k < g->nstart_index_map; k++) {
            int64_t od = g->start_index_map[k], at = kb + k * ivs;
            int64_t v = kt == OT_S32 ? ((const int32_t *)in[1])[at] : ((const int64_t *)in[1])[at];
            int64_t hi = xs->dims[od] - g->slice_sizes[od];
            v = v < 0 ? 0 : v > hi ? hi : v;
            base += v * xstr[od];
        }
        for (int k = 0; k < g->nbatching; k++)
            base += bidx[bq[k]] * xstr[g->operand_batching_dims[k]];
        switch (es) {
#define GATHER_COPY(UT)                                                                            \
    for (int64_t o = 0; o < NO; o++)                                                               \
        ((UT *)(void *)y)[b * NO + o] = ((const UT *)(const void *)x)[base + oo[o]];               \
    break;
        case 1: GATHER_COPY(uint8_t)
        case 2: GATHER_COPY(uint16_t)
        case 4: GATHER_COPY(uint32_t)
        default: GATHER_COPY(uint64_t)
#undef GATHER_COPY
        }
        for (int q = nbd - 1; q >= 0 && ++bidx[q] == ys->dims[q]; q--) bidx[q] = 0;
    }
    return OT_OK;
}

ot_status rt_fast_kernel(rt_fast_ctx *c, const ot_instr *i, int nin, void *const *in,
                         const ot_slot *const *ins, int nout, void *const *out,
                         const ot_slot *const *outs, bool *done) {
    *done = false;
    if (!c || !i || nout != 1 || i->shape.kind != OT_IR_ARRAY) return OT_OK;
    switch (i->opcode) {
    case OT_OP_DOT:
        if (nin != 2) return OT_OK;
        return fast_dot(c, i, in, ins, out[0], outs[0], done);
    case OT_OP_CONVOLUTION:
        if (nin != 2) return OT_OK;
        return fast_conv(c, i, in, ins, out[0], outs[0], done);
    case OT_OP_TRANSPOSE:
        if (nin != 1) return OT_OK;
        return fast_transpose(c, i, in, ins, out[0], outs[0], done);
    case OT_OP_REDUCE:
        if (nin != 2) return OT_OK;
        return fast_reduce(c, i, in, ins, out[0], outs[0], done);
    case OT_OP_FUSION: return fast_reduce_fusion(c, i, nin, in, ins, out[0], outs[0], done);
    case OT_OP_GATHER:
        if (nin != 2) return OT_OK;
        return fast_gather(c, i, in, ins, out[0], outs[0], done);
    default:
        if (ot_opcode_is_elementwise_unary(i->opcode) ||
            ot_opcode_is_elementwise_binary(i->opcode) || i->opcode == OT_OP_CONVERT)
            return fast_elementwise(c, i, nin, in, ins, out[0], outs[0], done);
        return OT_OK;
    }
}
