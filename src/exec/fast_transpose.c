/* The fast transpose (kernels.h): unit dims dropped, dims adjacent in both orders merged, then
 * rows copied or 32 x 32 tiles over the input's and the output's innermost dims, split over the
 * pool. Also the transposes the dot and reduce kernels make into scratch. */
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
    int b;                   /* the output dim that is innermost in the input */
    int64_t nouter, ntb;     /* work items: outer positions x tiles of dim b */
    bool stream;             /* rows written by non-temporal stores (tr_large) */
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
    p.b = -1;
    for (int d = 0; d < p.r; d++)
        if (p.is[d] == 1) p.b = d;
    /* the input's innermost non-unit dim has stride 1 and is not the output's last (else the
     * branch above), so b exists and differs from r - 1 */
    p.ntb = (p.od[p.b] + TR_TILE - 1) / TR_TILE;
    p.nouter = numel / (p.od[p.r - 1] * p.od[p.b]);
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
