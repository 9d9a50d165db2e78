/* The fast dot (kernels.h): OpenBLAS GEMM over operands viewed as row-major matrices, on one
 * thread per tile of a grid fixed by the shape, so the bits do not depend on the thread count;
 * they differ from the reference dot (linalg.c) only by the order of each sum. */
#include "exec/fast_internal.h"

#include <cblas.h>
#undef I /* <complex.h>, pulled in by cblas.h */
#include <limits.h>
#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define GEMM_CSR_FTZ 1 /* subnormals flushed by the FPU's FTZ | DAZ modes during the GEMM */
#else
#define GEMM_CSR_FTZ 0
#endif

static bool listed(int64_t v, const int64_t *l, int n) {
    for (int k = 0; k < n; k++)
        if (l[k] == v) return true;
    return false;
}

/* Each batch element's operand matrix in memory: a row-major matrix with leading dimension ld
 * (transposed or not, as ex_gemm's ta / tb say) at the offset sum_j idx_j * bstride[j] of the
 * batch index (idx_0, ..., idx_{nbd-1}), the batch dims in the dot's listed order. */
typedef struct gemm_view {
    int64_t ld;
    int nbd;
    int64_t bdim[OT_MAX_RANK], bstride[OT_MAX_RANK]; /* sizes and element strides */
} gemm_view;

/* Batch elements stored one after the other, each rows x cols. */
static void view_dense(gemm_view *v, int64_t nb, int64_t rows, int64_t cols, int64_t ld) {
    v->ld = ld < 1 ? 1 : ld;
    v->nbd = 1;
    v->bdim[0] = nb;
    v->bstride[0] = rows * cols;
}

/* The stride of dims g[0..n) of s (row-major strides st) merged into one index in that order,
 * when they can be (each non-unit dim's stride is the next non-unit dim's stride times its
 * extent); *any when every extent is 1 (one element: any stride). False when they cannot. */
static bool merged(const ot_shape *s, const int64_t *st, const int64_t *g, int n, int64_t *stride,
                   bool *any) {
    int64_t last = -1;
    for (int k = 0; k < n; k++) {
        int64_t d = g[k];
        if (s->dims[d] == 1) continue;
        if (last >= 0 && st[last] != st[d] * s->dims[d]) return false;
        last = d;
    }
    *any = last < 0;
    *stride = last < 0 ? 0 : st[last];
    return true;
}

/* Operand s as batch (dims bat[0..nb)) x free (fr[0..nf), merged in that order: `rows` in all)
 * x contracting (con[0..nc), merged in listed order: `cols` in all) matrices without a copy: the
 * free and contracting dims each merge into one index, one of them of stride 1 (*trans: the
 * contracting one does not), and the other's stride a valid BLAS leading dimension. Batch dims
 * may lie anywhere (attention's [batch, seq, heads, dim] with batch dims 0 and 2). False when the
 * operand has to be copied into that order first. */
static bool view_of(const ot_shape *s, const int64_t *bat, int nb, const int64_t *fr, int nf,
                    const int64_t *con, int nc, int64_t rows, int64_t cols, bool *trans,
                    gemm_view *v) {
    int64_t st[OT_MAX_RANK], acc = 1;
    for (int d = s->rank - 1; d >= 0; d--) {
        st[d] = acc;
        acc *= s->dims[d];
    }
    int64_t fs, cs;
    bool fany, cany;
    if (!merged(s, st, fr, nf, &fs, &fany) || !merged(s, st, con, nc, &cs, &cany)) return false;
    int64_t lo_r = cols > 1 ? cols : 1, lo_c = rows > 1 ? rows : 1;
    if (cany || cs == 1) { /* [rows, cols] rows apart by ld */
        *trans = false;
        v->ld = fany ? lo_r : fs;
        if (v->ld < lo_r) return false;
    } else if (fany || fs == 1) { /* [cols, rows] */
        *trans = true;
        v->ld = cs;
        if (v->ld < lo_c) return false;
    } else {
        return false;
    }
    if (v->ld > INT_MAX) return false;
    v->nbd = nb;
    for (int j = 0; j < nb; j++) {
        v->bdim[j] = s->dims[bat[j]];
        v->bstride[j] = st[bat[j]];
    }
    return true;
}

/* Element offset of batch element b (row-major over v's batch dims) in v. */
static int64_t view_offset(const gemm_view *v, int64_t b) {
    int64_t off = 0;
    for (int j = v->nbd - 1; j >= 0; j--) {
        off += (b % v->bdim[j]) * v->bstride[j];
        b /= v->bdim[j];
    }
    return off;
}

/* Subnormal results to zero of the same sign (the reference's FTZ), on the bits and without
 * branches so the loop vectorizes: a zero exponent field keeps only the sign. */
void ex_flush_out(ot_dtype t, void *y, int64_t n) {
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
 * counts); the pool splits the work instead, over batch elements x a grid of rm x rn tiles of C
 * chosen from the shape alone (gemm_grid). Every tile is one sgemm/dgemm over the whole K, so
 * each element's sum is the same whichever thread computes its tile: bits never depend on the
 * thread count. */
typedef struct gemm_run {
    const ex_gemm *g;
    int64_t rm, rn; /* rows and columns of a tile (the last ones in M and N may be smaller) */
    const gemm_view *va, *vb; /* where each batch element's A and B lie */
} gemm_run;

static void gemm_tiles(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const gemm_run *run = arg;
    const ex_gemm *g = run->g;
    size_t es = ot_dtype_size(g->t);
    int lda = (int)run->va->ld, ldb = (int)run->vb->ld, ldc = (int)g->N;
    if (ldc < 1) ldc = 1;
    for (int64_t w = begin; w < end; w++) {
        int64_t b = w / (g->tm * g->tn), t = w % (g->tm * g->tn);
        int64_t m0 = (t / g->tn) * run->rm, n0 = (t % g->tn) * run->rn;
        int64_t mm = g->M - m0 < run->rm ? g->M - m0 : run->rm;
        int64_t nn = g->N - n0 < run->rn ? g->N - n0 : run->rn;
        const char *a = (const char *)g->a + (size_t)view_offset(run->va, b) * es;
        const char *bb = (const char *)g->b + (size_t)view_offset(run->vb, b) * es;
        char *c = (char *)g->c + (size_t)(b * g->M * g->N + m0 * g->N + n0) * es;
        a += (size_t)(g->ta ? m0 : m0 * lda) * es;
        bb += (size_t)(g->tb ? n0 * ldb : n0) * es;
        if (g->K == 0) {
            for (int64_t r = 0; r < mm; r++)
                memset(c + (size_t)(r * g->N) * es, 0, (size_t)nn * es);
            continue;
        }
#if GEMM_CSR_FTZ
        /* Under the reference's FTZ: the FPU flushes every subnormal input (DAZ) and result (FTZ)
         * of the GEMM, as the reference's arithmetic does, instead of a pass over C afterwards
         * (a quarter of a K = 10 GEMM's time). This thread's mode is restored after the call. */
        unsigned int csr = _mm_getcsr();
        if (g->ftz) _mm_setcsr(csr | 0x8040u);
#endif
        if (g->t == OT_F32)
            cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                        g->tb ? CblasTrans : CblasNoTrans, (int)mm, (int)nn, (int)g->K, 1.0f,
                        (const float *)a, lda, (const float *)bb, ldb, 0.0f, (float *)c, ldc);
        else
            cblas_dgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                        g->tb ? CblasTrans : CblasNoTrans, (int)mm, (int)nn, (int)g->K, 1.0,
                        (const double *)a, lda, (const double *)bb, ldb, 0.0, (double *)c, ldc);
#if GEMM_CSR_FTZ
        if (g->ftz) _mm_setcsr(csr);
#else
        if (g->ftz)
            for (int64_t r = 0; r < mm; r++) ex_flush_out(g->t, c + (size_t)(r * g->N) * es, nn);
#endif
    }
}

/* The tile grid, from the shape alone (never the thread count: see gemm_tiles).
 * Aim: GEMM_TARGET work items in all (batch elements x tiles) so that any pool of up to about 8
 * threads gets an even share, each tile at least GEMM_MIN_TILE multiply-adds (below that a
 * tile's own packing and call overhead outweigh the parallelism; the whole GEMM stays one tile).
 * Batch elements count first: a batch of >= GEMM_TARGET elements keeps each element whole.
 * Otherwise each element is cut into about t tiles. Every tile packs its rows of A and its
 * columns of B again (K x (tm N + tn M) packed in all), so the grid is the tm x tn with
 * about t tiles that packs least, i.e. tiles about as square as M and N allow; tile sides are
 * multiples of 16 (the kernels' vector widths and register blocks divide 16) and at least 64
 * rows or columns. A narrow N (< 128) is never split (column tiles would be narrower than the
 * kernels' packing panels); M alone carries the split. */
#define GEMM_TARGET   8
#define GEMM_MIN_TILE ((int64_t)1 << 19)

static int64_t cdiv(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

static int64_t side(int64_t n, int64_t parts) { /* n cut in `parts`: rounded up to 16, >= 64 */
    int64_t s = (cdiv(n, parts) + 15) / 16 * 16;
    return s < 64 ? 64 : s;
}

static void gemm_grid(ex_gemm *g, gemm_run *run) {
    run->g = g;
    run->rm = g->M > 0 ? g->M : 1;
    run->rn = g->N > 0 ? g->N : 1;
    int64_t mnk = g->M * g->N * (g->K ? g->K : 1);
    int64_t t = g->nb >= GEMM_TARGET ? 1 : cdiv(GEMM_TARGET, g->nb);
    if (mnk / GEMM_MIN_TILE < t) t = mnk / GEMM_MIN_TILE;
    if (t > 1) {
        int64_t best_cost = -1, best_n = 0;
        /* pm rows of tiles x enough columns for t; sides rounded up may give fewer tiles: the
         * grid with the most tiles up to t wins, then the least packed volume tm N + tn M */
        for (int64_t pm = 1; pm <= t; pm++) {
            int64_t pn = cdiv(t, pm);
            if (g->N < 128 && pn > 1) continue;
            int64_t rm = side(g->M, pm), rn = pn > 1 ? side(g->N, pn) : g->N;
            int64_t tm = cdiv(g->M, rm), tn = cdiv(g->N, rn);
            int64_t n = tm * tn < t ? tm * tn : t, cost = tm * g->N + tn * g->M;
            if (n > best_n || (n == best_n && cost < best_cost)) {
                best_n = n;
                best_cost = cost;
                run->rm = rm;
                run->rn = rn;
            }
        }
    }
    g->tm = cdiv(g->M, run->rm);
    g->tn = cdiv(g->N, run->rn);
}

static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

static void blas_one_thread(void) {
    openblas_set_num_threads(1);
}

static void run_gemm(ex_kernel_ctx *c, ex_gemm *g, const gemm_view *va, const gemm_view *vb) {
    /* once per process (concurrent first calls from several devices set it once); again only if
     * the application changed it since */
    pthread_once(&g_blas_once, blas_one_thread);
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    gemm_run run;
    gemm_grid(g, &run);
    run.va = va;
    run.vb = vb;
    /* "bytes" for the inline decision: the multiply-adds, scaled so ~64K of them stay inline */
    int64_t work = g->nb * g->M * g->N * (g->K ? g->K : 1);
    /* handed out one by one: a thread that the OS preempts (a shared machine) or that runs a
     * smaller edge tile takes fewer tiles; the bits do not depend on who computes which */
    ex_par_for_dynamic(c, g->nb * g->tm * g->tn, work * 4, gemm_tiles, &run);
}

void ex_run_gemm(ex_kernel_ctx *c, ex_gemm *g) {
    gemm_view va, vb;
    view_dense(&va, g->nb, g->M, g->K, g->ta ? g->M : g->K);
    view_dense(&vb, g->nb, g->K, g->N, g->tb ? g->K : g->N);
    run_gemm(c, g, &va, &vb);
}

ot_status ex_fast_dot(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                      void *out, const ex_leaf *os, bool *done) {
    const ot_dot_dims *dn = i->attrs->dot;
    const ot_shape *ls = ins[0].shape, *rs = ins[1].shape;
    if (!dn || !ex_gemm_dtype(ls->dtype, rs->dtype, os->shape->dtype)) return OT_OK;
    int64_t lbat[OT_MAX_RANK], rbat[OT_MAX_RANK], lfree[OT_MAX_RANK], rfree[OT_MAX_RANK];
    int nb = dn->nbatch, nlf = 0, nrf = 0, nc = dn->ncontract;
    int64_t NB = 1, M = 1, N = 1, K = 1;
    for (int b = 0; b < nb; b++) {
        lbat[b] = dn->lhs_batch[b];
        rbat[b] = dn->rhs_batch[b];
        NB *= ls->dims[dn->lhs_batch[b]];
    }
    for (int d = 0; d < ls->rank; d++)
        if (!listed(d, dn->lhs_batch, nb) && !listed(d, dn->lhs_contract, nc)) {
            lfree[nlf++] = d;
            M *= ls->dims[d];
        }
    for (int d = 0; d < rs->rank; d++)
        if (!listed(d, dn->rhs_batch, nb) && !listed(d, dn->rhs_contract, nc)) {
            rfree[nrf++] = d;
            N *= rs->dims[d];
        }
    for (int k = 0; k < nc; k++) K *= ls->dims[dn->lhs_contract[k]];
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX) return OT_OK; /* BLAS takes int sizes */
    if (ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes) ||
        ex_overlaps(out, os->nbytes, in[1], ins[1].nbytes))
        return OT_OK;
    *done = true;
    if (NB * M * N == 0) return OT_OK;
    size_t es = ot_dtype_size(os->shape->dtype);
    ex_gemm g = {os->shape->dtype, NB, M, N, K, false, false, in[0], in[1], out, 0, 0, false};
    gemm_view va, vb;
    /* each operand read where it lies when its dims allow (view_of: A as [M, K] or transposed
     * [K, M], B as [K, N] or transposed [N, K]), else copied into the (batch, free, contracting)
     * order for A and (batch, contracting, free) for B */
    bool lcopy = !view_of(ls, lbat, nb, lfree, nlf, dn->lhs_contract, nc, M, K, &g.ta, &va);
    bool rcopy = !view_of(rs, rbat, nb, dn->rhs_contract, nc, rfree, nrf, K, N, &g.tb, &vb);
    size_t need = 0, lbytes = ex_align64((size_t)ins[0].nbytes), rbytes = (size_t)ins[1].nbytes;
    if (lcopy) need += lbytes;
    if (rcopy) need += rbytes;
    if (need) {
        void *sc = NULL;
        OT_CHECK(ex_scratch(c, need, &sc));
        char *p = sc;
        if (lcopy) {
            int64_t perm[OT_MAX_RANK];
            int n = 0;
            for (int k = 0; k < nb; k++) perm[n++] = lbat[k];
            for (int k = 0; k < nlf; k++) perm[n++] = lfree[k];
            for (int k = 0; k < nc; k++) perm[n++] = dn->lhs_contract[k];
            ex_transpose(c, es, ls->rank, ls->dims, perm, in[0], p);
            g.a = p;
            g.ta = false;
            view_dense(&va, NB, M, K, K);
            p += lbytes;
        }
        if (rcopy) {
            int64_t perm[OT_MAX_RANK];
            int n = 0;
            for (int k = 0; k < nb; k++) perm[n++] = rbat[k];
            for (int k = 0; k < nc; k++) perm[n++] = dn->rhs_contract[k];
            for (int k = 0; k < nrf; k++) perm[n++] = rfree[k];
            ex_transpose(c, es, rs->rank, rs->dims, perm, in[1], p);
            g.b = p;
            g.tb = false;
            view_dense(&vb, NB, K, N, N);
        }
    }
    g.ftz = c->ftz;
    run_gemm(c, &g, &va, &vb);
    c->fast_run++;
    return OT_OK;
}
