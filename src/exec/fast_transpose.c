/* The fast transpose (kernels.h): unit dims dropped, dims adjacent in both orders merged, then
 * rows copied or tiles of 32 rows (the input's innermost run of contiguous dims) x the output's
 * last dim, split over the pool. Also the transposes the dot and reduce kernels make into
 * scratch. */
#include "exec/fast_internal.h"
#include "core/core_util.h"

#include <stdatomic.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#define TR_TILE 32

typedef struct tr_plan {
    size_t es;
    int r;
    int64_t od[OT_MAX_RANK]; /* output dims (unit dims dropped, runs merged) */
    int64_t is[OT_MAX_RANK]; /* input stride of each output dim, in elements */
    int64_t os[OT_MAX_RANK]; /* output strides */
    /* tiles: the run of output dims innermost in the input (stride 1, then each the product of
     * the ones before it), innermost first: its dims' sizes and output strides */
    bool inrun[OT_MAX_RANK];
    int nrun;
    int64_t rn[OT_MAX_RANK], ros[OT_MAX_RANK];
    int64_t nb;          /* the run's elements: the tiles' rows */
    int64_t nouter, ntb; /* work items: outer positions x tiles of the run */
    bool v16;            /* f32-sized elements by 16 x 16 register blocks (AVX-512) */
    bool stream;         /* rows written by non-temporal stores (tr_large) */
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

/* Input and output offsets of outer position q (all dims but the last and the tiles' run). */
static void tr_outer(const tr_plan *p, int64_t q, int64_t *io, int64_t *oo) {
    int64_t i = 0, o = 0;
    for (int d = p->r - 2; d >= 0; d--) {
        if (p->inrun[d]) continue;
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
    int64_t x[OT_MAX_RANK] = {0}, io = 0, oo = 0, q = begin;
    for (int d = p->r - 2; d >= 0; d--) {
        x[d] = q % p->od[d];
        q /= p->od[d];
        io += x[d] * p->is[d];
        oo += x[d] * p->os[d];
    }
    /* the next outer position by counting (last outer dim fastest) instead of a division per dim
     * per row, which cost as much as copying a short row */
    for (int64_t w = begin; w < end; w++) {
        if (p->stream)
            ot_stream_copy(p->dst + oo * (int64_t)p->es, p->src + io * (int64_t)p->es, row);
        else
            memcpy(p->dst + oo * (int64_t)p->es, p->src + io * (int64_t)p->es, row);
        for (int d = p->r - 2; d >= 0; d--) {
            io += p->is[d];
            oo += p->os[d];
            if (++x[d] < p->od[d]) break;
            io -= p->is[d] * p->od[d];
            oo -= p->os[d] * p->od[d];
            x[d] = 0;
        }
    }
#if defined(__SSE2__)
    if (p->stream) _mm_sfence(); /* the streamed rows are visible before the pool's join */
#endif
}

/* Whether a row transpose of `bytes` (input and output each) is out of the last-level cache: the
 * input and output together at least 3/4 of it. Out of cache, rows copied in the output's order
 * read the input in a stride across pages and write each output line after reading it for
 * ownership; in the input's order with non-temporal stores the same 16 MiB head split
 * ([8, 512, 16, 64] -> [8, 16, 512, 64], 256-byte rows) ran 2.7x faster on one thread (0.65
 * against 1.75 ms; docs/benchmarks.md), and 1.5x faster with the result read right after. Inside
 * the cache (8 MiB each way and less), the output's order with plain stores was as fast or faster
 * when the result is read next, as a following kernel does. */
static atomic_llong tr_llc; /* the cache's bytes, 0 until first read (sysfs, a few files) */

static bool tr_large(int64_t bytes) {
    long long l = atomic_load_explicit(&tr_llc, memory_order_relaxed);
    if (l == 0) {
        size_t b = ot_llc_bytes();
        l = b > 0 ? (long long)b : (long long)32 << 20;
        atomic_store_explicit(&tr_llc, l, memory_order_relaxed);
    }
    return 2 * bytes >= l / 4 * 3;
}

void ex_transpose_set_llc(int64_t bytes) {
    atomic_store_explicit(&tr_llc, (long long)bytes, memory_order_relaxed);
}

/* A tile: rows i0 + [0, ni) of the run (input elements io + i0 + i, contiguous) x the output's
 * last dim (input stride isa), row i written at output element oo + ob[i] */
#define TR_TILE_LOOP(T)                                                                            \
    for (int64_t j0 = 0; j0 < na; j0 += TR_TILE) {                                                 \
        int64_t j1 = j0 + TR_TILE < na ? j0 + TR_TILE : na;                                        \
        for (int64_t i = 0; i < ni; i++) {                                                         \
            T *d = (T *)(p->dst) + oo + ob[i];                                                     \
            const T *s = (const T *)(p->src) + io + i0 + i;                                        \
            for (int64_t j = j0; j < j1; j++) d[j] = s[j * isa];                                   \
        }                                                                                          \
    }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static inline __mmask16 tr_lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* The same tile of 4-byte elements by 16 x 16 blocks through registers: 16 loads of 16
 * contiguous run elements, 16 stores of 16 output elements, instead of one load and store per
 * element (bits moved, never converted). */
EX_AVX512 static void tr_tile_v16(const float *s, float *d, const int64_t *ob, int64_t ni,
                                  int64_t na, int64_t isa) {
    for (int64_t j0 = 0; j0 < na; j0 += 16) {
        int64_t nj = na - j0 < 16 ? na - j0 : 16;
        __mmask16 mj = tr_lanes(nj);
        for (int64_t i0 = 0; i0 < ni; i0 += 16) {
            int64_t nl = ni - i0 < 16 ? ni - i0 : 16;
            __mmask16 mi = tr_lanes(nl);
            __m512 r[16];
            for (int j = 0; j < 16; j++)
                r[j] = j < nj ? _mm512_maskz_loadu_ps(mi, s + i0 + (j0 + j) * isa)
                              : _mm512_setzero_ps();
            ex_tr16_ps(r);
            for (int i = 0; i < nl; i++) _mm512_mask_storeu_ps(d + ob[i0 + i] + j0, mj, r[i]);
        }
    }
}
#endif

static void tr_tiles(void *arg, int64_t begin, int64_t end, int ith) {
    const tr_plan *p = arg;
    int a = p->r - 1;
    int64_t na = p->od[a], nb = p->nb, isa = p->is[a];
    int64_t ob[TR_TILE];
    for (int64_t w = begin; w < end; w++) {
        int64_t q = w / p->ntb, tb = w % p->ntb;
        int64_t io, oo;
        tr_outer(p, q, &io, &oo);
        int64_t i0 = tb * TR_TILE, ni = i0 + TR_TILE < nb ? TR_TILE : nb - i0;
        /* the output offsets of the tile's rows: the run index's digits, counted up */
        int64_t dig[OT_MAX_RANK], x = i0, o = 0;
        for (int k = 0; k < p->nrun; k++) {
            dig[k] = x % p->rn[k];
            x /= p->rn[k];
            o += dig[k] * p->ros[k];
        }
        for (int64_t i = 0; i < ni; i++) {
            ob[i] = o;
            for (int k = 0; k < p->nrun; k++) {
                o += p->ros[k];
                if (++dig[k] < p->rn[k]) break;
                o -= p->ros[k] * p->rn[k];
                dig[k] = 0;
            }
        }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (p->v16) {
            tr_tile_v16((const float *)p->src + io + i0, (float *)p->dst + oo, ob, ni, na, isa);
            continue;
        }
#endif
        switch (p->es) {
        case 1: TR_TILE_LOOP(uint8_t); break;
        case 2: TR_TILE_LOOP(uint16_t); break;
        case 4: TR_TILE_LOOP(uint32_t); break;
        case 8: TR_TILE_LOOP(uint64_t); break;
        default:
            for (int64_t j0 = 0; j0 < na; j0 += TR_TILE) {
                int64_t j1 = j0 + TR_TILE < na ? j0 + TR_TILE : na;
                for (int64_t i = 0; i < ni; i++)
                    for (int64_t j = j0; j < j1; j++)
                        copy_elem(p->dst + (oo + ob[i] + j) * (int64_t)p->es,
                                  p->src + (io + i0 + i + j * isa) * (int64_t)p->es, p->es);
            }
            break;
        }
    }
}

void ex_transpose(ex_kernel_ctx *c, size_t es, int r, const int64_t *dims, const int64_t *perm,
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
        if (p.r > 1 && tr_large(numel * (int64_t)es)) {
            /* the rows in the input's order (outer dims by falling input stride), each written
             * whole lines at a time past the caches when rows are whole aligned lines */
            for (int d = 1; d < p.r - 1; d++)
                for (int e = d; e > 0 && p.is[e - 1] < p.is[e]; e--) {
                    int64_t *v[3] = {p.od, p.is, p.os};
                    for (int k = 0; k < 3; k++) {
                        int64_t t = v[k][e];
                        v[k][e] = v[k][e - 1];
                        v[k][e - 1] = t;
                    }
                }
            size_t row = (size_t)p.od[p.r - 1] * es;
            p.stream = row % 64 == 0 && ((uintptr_t)dst & 63) == 0;
        }
        ex_par_for(c, rows, numel * (int64_t)es, tr_rows, &p);
        return;
    }
    int64_t run = 1;
    for (int d = p.r - 1; d >= 0; d--) {
        p.os[d] = run;
        run *= p.od[d];
    }
    /* The tiles' rows: the input's innermost non-unit dim (stride 1, not the output's last, else
     * the branch above), and with it each dim whose input stride is the product of the run's so
     * far, up to the output's last: contiguous in the input, so the tiles read whole runs of it.
     * A small innermost dim ([.., 300, 4] -> [.., 4, .., 300]) alone would make tiles of 4 rows,
     * one element per load. */
    p.nb = 1;
    for (bool grew = true; grew;) {
        grew = false;
        for (int d = 0; d < p.r - 1; d++)
            if (!p.inrun[d] && p.is[d] == p.nb) {
                p.inrun[d] = true;
                p.rn[p.nrun] = p.od[d];
                p.ros[p.nrun++] = p.os[d];
                p.nb *= p.od[d];
                grew = true;
            }
    }
    p.ntb = (p.nb + TR_TILE - 1) / TR_TILE;
    p.nouter = numel / (p.od[p.r - 1] * p.nb);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    p.v16 = es == 4 && ex_avx512();
#endif
    ex_par_for(c, p.nouter * p.ntb, numel * (int64_t)es, tr_tiles, &p);
}

/* The transpose kernel: bitwise the reference's (shape_ops.c). */
ot_status ex_fast_transpose(ex_kernel_ctx *c, const ot_instr *i, void *const *in,
                            const ex_leaf *ins, void *out, const ex_leaf *os, bool *done) {
    if (ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes)) return OT_OK;
    const ot_shape *s = ins[0].shape;
    if (i->attrs->ndims != s->rank) return OT_OK;
    ex_transpose(c, ot_dtype_size(s->dtype), s->rank, s->dims, i->attrs->dims, in[0], out);
    *done = true;
    c->fast_run++;
    return OT_OK;
}
