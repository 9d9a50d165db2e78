/* The communicator: collectives over a transport vtable, their algorithms (ring, recursive
 * halving-doubling, binomial tree, hierarchical 2D, direct shared memory), the alpha-beta cost
 * model that picks one, sub-communicators from replica groups, and the metrics.
 *
 * Every algorithm runs on a work buffer of the accumulation dtype (f16/bf16 are widened to f32
 * first), so partial sums never lose precision between steps, and each element's combination
 * order is a fixed function of (algorithm, member count, count): results are bit-identical on all
 * members and across runs. The direct algorithm reads peers' memory and combines in rank order,
 * exactly as the naive reference does. */
#include "pod_internal.h"

#include "core/core_util.h"

#include <math.h>
#include <stdio.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TIMEOUT_NS (60LL * 1000 * 1000 * 1000)
#define DEFAULT_CHUNK      (256u * 1024)

struct ot_comm {
    const ot_comm_vtable *vt;
    void *ctx;
    int rank, size;
    int64_t timeout_ns;
    ot_cost_params cost;
    int *ring;   /* ring[pos] = rank */
    int *pos_of; /* rank -> ring position */
    int rows, cols;
    bool placed; /* a topology was placed: model its links, not shared memory */
    int diameter;
    bool aborted;
    void *work;
    size_t work_cap;
    void *stage;
    size_t stage_cap;
    void **ptrs; /* size entries, for exchange_ptrs */
    ot_comm_stats stats;
    ot_pod_trace *trace;
    int trace_device;
};

/* ---- names ---------------------------------------------------------------------------------- */

static const char *const redop_names[] = {"sum", "prod", "max", "min", "mean"};
static const char *const kind_names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                         "reduce",    "alltoall",       "barrier"};
static const char *const algo_names[] = {"auto", "ring",   "halving_doubling",
                                         "tree", "hier2d", "direct"};
_Static_assert(sizeof redop_names / sizeof *redop_names == OT_REDOP_COUNT, "redop names");
_Static_assert(sizeof kind_names / sizeof *kind_names == OT_COLL_KIND_COUNT, "kind names");
_Static_assert(sizeof algo_names / sizeof *algo_names == OT_ALGO_COUNT, "algo names");

const char *ot_redop_name(ot_redop op) {
    return op >= 0 && op < OT_REDOP_COUNT ? redop_names[op] : "?";
}
const char *ot_coll_kind_name(ot_coll_kind k) {
    return k >= 0 && k < OT_COLL_KIND_COUNT ? kind_names[k] : "?";
}
const char *ot_coll_algo_name(ot_coll_algo a) {
    return a >= 0 && a < OT_ALGO_COUNT ? algo_names[a] : "?";
}
static int find_name(const char *const *t, int n, const char *s) {
    for (int i = 0; s && i < n; i++)
        if (!strcmp(t[i], s)) return i;
    return -1;
}
int ot_redop_from_name(const char *s) {
    return find_name(redop_names, OT_REDOP_COUNT, s);
}
int ot_coll_kind_from_name(const char *s) {
    return find_name(kind_names, OT_COLL_KIND_COUNT, s);
}
int ot_coll_algo_from_name(const char *s) {
    return find_name(algo_names, OT_ALGO_COUNT, s);
}

bool ot_coll_dtype_supported(ot_dtype dt) {
    return dt == OT_F32 || dt == OT_F64 || dt == OT_F16 || dt == OT_BF16 || dt == OT_S32 ||
           dt == OT_S64;
}

ot_coll_options ot_coll_options_default(void) {
    ot_coll_options o = {.algo = OT_ALGO_AUTO, .timeout_ns = 0, .chunk_bytes = 0};
    return o;
}

/* ---- creation ------------------------------------------------------------------------------- */

static void factor_grid(int n, int *rows, int *cols) {
    /* columns: the smallest divisor >= sqrt(n) that leaves rows > 1 */
    *rows = 1, *cols = n;
    for (int c = (int)ceil(sqrt((double)n)); c < n; c++)
        if (n % c == 0) {
            *cols = c, *rows = n / c;
            return;
        }
}

ot_status ot_comm_create(const ot_comm_vtable *vt, void *ctx, int rank, int size, ot_comm **out) {
    ot_status st;
    if (out) *out = NULL;
    if (!vt || !out || !vt->sendrecv) {
        st = ot_error(OT_ERR_INVALID_ARGUMENT, "comm: NULL vtable, output or sendrecv slot");
        goto fail;
    }
    if (size < 1 || rank < 0 || rank >= size) {
        st = ot_error(OT_ERR_INVALID_ARGUMENT, "comm: rank %d outside 0..%d", rank, size - 1);
        goto fail;
    }
    ot_comm *c = ot_calloc(1, sizeof *c);
    if (!c) {
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "comm: out of memory");
        goto fail;
    }
    c->vt = vt;
    c->ctx = ctx;
    c->rank = rank;
    c->size = size;
    c->timeout_ns = DEFAULT_TIMEOUT_NS;
    c->cost = (ot_cost_params){.alpha_us = 5.0, .gbytes_per_s = 5.0};
    c->ring = ot_malloc(sizeof(int) * (size_t)size);
    c->pos_of = ot_malloc(sizeof(int) * (size_t)size);
    c->ptrs = ot_calloc((size_t)size, sizeof(void *));
    if (!c->ring || !c->pos_of || !c->ptrs) {
        ot_comm_free(c);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "comm: out of memory");
    }
    for (int i = 0; i < size; i++) c->ring[i] = c->pos_of[i] = i;
    factor_grid(size, &c->rows, &c->cols);
    *out = c;
    return OT_OK;
fail:
    if (vt && vt->free) vt->free(ctx);
    return st;
}

void ot_comm_free(ot_comm *c) {
    if (!c) return;
    if (c->vt->free) c->vt->free(c->ctx);
    ot_free(c->ring);
    ot_free(c->pos_of);
    ot_free(c->ptrs);
    ot_free(c->work);
    ot_free(c->stage);
    ot_free(c);
}

int ot_comm_rank(const ot_comm *c) {
    return c->rank;
}
int ot_comm_size(const ot_comm *c) {
    return c->size;
}
const char *ot_comm_transport(const ot_comm *c) {
    return c->vt->name ? c->vt->name : "?";
}
void ot_comm_set_timeout(ot_comm *c, int64_t timeout_ns) {
    c->timeout_ns = timeout_ns > 0 ? timeout_ns : DEFAULT_TIMEOUT_NS;
}
void ot_comm_set_cost_params(ot_comm *c, ot_cost_params p) {
    if (p.alpha_us >= 0 && p.gbytes_per_s > 0) c->cost = p;
}
ot_cost_params ot_comm_cost_params(const ot_comm *c) {
    return c->cost;
}
bool ot_comm_aborted(const ot_comm *c) {
    return c->aborted;
}
bool ot_comm_process_waits_sleep(int processes, int cores) {
    return processes >= 1 && cores >= 1 && processes <= cores;
}
void ot_comm_set_trace(ot_comm *c, ot_pod_trace *t, int device) {
    c->trace = t;
    c->trace_device = device;
}

void ot_comm_get_stats(const ot_comm *c, ot_comm_stats *out) {
    *out = c->stats;
}

ot_status ot_comm_set_topology(ot_comm *c, const ot_topology *t) {
    if (!c || !t) return ot_error(OT_ERR_INVALID_ARGUMENT, "comm topology: NULL argument");
    if (ot_topology_size(t) != c->size)
        return ot_error(OT_ERR_SHAPE_MISMATCH, "comm topology: %s has %d devices, comm has %d",
                        ot_topology_name(t), ot_topology_size(t), c->size);
    int *ring = ot_malloc(sizeof(int) * (size_t)c->size);
    if (!ring) return ot_error(OT_ERR_OUT_OF_MEMORY, "comm topology: out of memory");
    if (ot_topology_ring(t, ring) == OT_OK) {
        memcpy(c->ring, ring, sizeof(int) * (size_t)c->size);
        for (int i = 0; i < c->size; i++) c->pos_of[c->ring[i]] = i;
    } else {
        ot_clear_error(); /* no Hamiltonian cycle: rank order (some ring steps take > 1 hop) */
    }
    ot_free(ring);
    int x = ot_topology_dim(t, 0);
    if (x > 1 && x < c->size) {
        c->cols = x;
        c->rows = c->size / x;
    }
    c->cost.alpha_us = ot_topology_link_latency_us(t);
    c->cost.gbytes_per_s = ot_topology_link_gbytes_per_s(t);
    c->placed = true;
    c->diameter = ot_topology_diameter(t);
    return OT_OK;
}

/* ---- transport helpers ---------------------------------------------------------------------- */

static void *ensure(void **buf, size_t *cap, size_t bytes) {
    if (*cap >= bytes && *buf) return *buf;
    size_t nc = bytes < 4096 ? 4096 : bytes;
    void *p = ot_realloc(*buf, nc);
    if (!p) return NULL;
    *buf = p;
    *cap = nc;
    return p;
}

static ot_status xsendrecv(ot_comm *c, int to, const void *s, size_t sb, int from, void *r,
                           size_t rb, uint64_t dl) {
    return c->vt->sendrecv(c->ctx, to, s, sb, from, r, rb, dl);
}

static ot_status xsendrecv_reduce(ot_comm *c, int to, const void *s, size_t sc, int from, void *r,
                                  size_t rc, ot_dtype dt, ot_redop op, uint64_t dl) {
    if (c->vt->sendrecv_reduce)
        return c->vt->sendrecv_reduce(c->ctx, to, s, sc, from, r, rc, dt, op, dl);
    size_t esz = ot_dtype_size(dt);
    void *st = from >= 0 ? ensure(&c->stage, &c->stage_cap, rc * esz) : NULL;
    if (from >= 0 && !st) return ot_error(OT_ERR_OUT_OF_MEMORY, "comm: staging buffer");
    OT_CHECK(xsendrecv(c, to, s, sc * esz, from, st, from >= 0 ? rc * esz : 0, dl));
    if (from >= 0) ot_pod_combine(r, st, rc, dt, op);
    return OT_OK;
}

static ot_status xbarrier(ot_comm *c, uint64_t dl) {
    if (c->vt->barrier) return c->vt->barrier(c->ctx, dl);
    int n = c->size, r = c->rank;
    for (int k = 1; k < n; k <<= 1)
        OT_CHECK(xsendrecv(c, (r + k) % n, NULL, 0, (r - k + n) % n, NULL, 0, dl));
    return OT_OK;
}

static inline int mod(int a, int n) {
    return ((a % n) + n) % n;
}

/* Balanced split of count into m segments. */
static void seg_range(size_t count, int m, int k, size_t *off, size_t *len) {
    size_t q = count / (size_t)m, rem = count % (size_t)m;
    *off = (size_t)k * q + ((size_t)k < rem ? (size_t)k : rem);
    *len = q + ((size_t)k < rem ? 1 : 0);
}

/* A ring over members mem[0..m-1] (mem[pos] is a rank); this rank sits at position pos. Segment
 * of position q: blk > 0 → [segmap[q] * blk, +blk) (blocks by rank); else a balanced split. */
typedef struct ringctx {
    ot_comm *c;
    const int *mem;
    int m, pos;
    char *buf; /* base of the region */
    size_t count;
    const int *segmap;
    size_t blk;
    ot_dtype dt;
    size_t esz;
    size_t chunk; /* elements per piece */
    uint64_t dl;
} ringctx;

static void ring_seg(const ringctx *R, int q, size_t *off, size_t *len) {
    if (R->segmap) {
        *off = (size_t)R->segmap[q] * R->blk;
        *len = R->blk;
    } else {
        seg_range(R->count, R->m, q, off, len);
    }
}

static size_t npieces(size_t a, size_t b, size_t chunk) {
    size_t m = a > b ? a : b;
    size_t p = (m + chunk - 1) / chunk;
    return p ? p : 1;
}

static void piece(size_t off, size_t len, size_t j, size_t chunk, size_t *po, size_t *pl) {
    size_t lo = j * chunk;
    if (lo >= len) {
        *po = off + len;
        *pl = 0;
        return;
    }
    *po = off + lo;
    *pl = len - lo < chunk ? len - lo : chunk;
}

/* Reduce-scatter: after m-1 steps position pos holds the full reduction of its own segment. */
static ot_status ring_rs(const ringctx *R, ot_redop op) {
    int m = R->m, p = R->pos;
    if (m == 1) return OT_OK;
    int right = R->mem[mod(p + 1, m)], left = R->mem[mod(p - 1, m)];
    for (int s = 0; s < m - 1; s++) {
        size_t so, sl, ro, rl;
        ring_seg(R, mod(p - s - 1, m), &so, &sl);
        ring_seg(R, mod(p - s - 2, m), &ro, &rl);
        size_t np = npieces(sl, rl, R->chunk);
        for (size_t j = 0; j < np; j++) {
            size_t pso, psl, pro, prl;
            piece(so, sl, j, R->chunk, &pso, &psl);
            piece(ro, rl, j, R->chunk, &pro, &prl);
            OT_CHECK(xsendrecv_reduce(R->c, right, R->buf + pso * R->esz, psl, left,
                                      R->buf + pro * R->esz, prl, R->dt, op, R->dl));
        }
    }
    return OT_OK;
}

/* All-gather: position pos starts with its own segment, ends with all. */
static ot_status ring_ag(const ringctx *R) {
    int m = R->m, p = R->pos;
    if (m == 1) return OT_OK;
    int right = R->mem[mod(p + 1, m)], left = R->mem[mod(p - 1, m)];
    for (int s = 0; s < m - 1; s++) {
        size_t so, sl, ro, rl;
        ring_seg(R, mod(p - s, m), &so, &sl);
        ring_seg(R, mod(p - s - 1, m), &ro, &rl);
        size_t np = npieces(sl, rl, R->chunk);
        for (size_t j = 0; j < np; j++) {
            size_t pso, psl, pro, prl;
            piece(so, sl, j, R->chunk, &pso, &psl);
            piece(ro, rl, j, R->chunk, &pro, &prl);
            OT_CHECK(xsendrecv(R->c, right, R->buf + pso * R->esz, psl * R->esz, left,
                               R->buf + pro * R->esz, prl * R->esz, R->dl));
        }
    }
    return OT_OK;
}

static size_t chunk_elems(const ot_coll_options *o, size_t esz) {
    size_t cb = o && o->chunk_bytes ? o->chunk_bytes : DEFAULT_CHUNK;
    size_t ce = cb / esz;
    return ce ? ce : 1;
}

/* ---- all-reduce algorithms on a work buffer of the accumulation dtype ---------------------- */

typedef struct arctx {
    ot_comm *c;
    char *w;
    size_t count;
    ot_dtype dt; /* accumulation dtype */
    size_t esz;
    ot_redop op; /* SUM, PROD, MAX, MIN */
    size_t chunk;
    uint64_t dl;
} arctx;

static ot_status ar_ring(const arctx *A) {
    ot_comm *c = A->c;
    ringctx R = {c, c->ring, c->size, c->pos_of[c->rank], A->w, A->count, NULL,
                 0, A->dt,   A->esz,  A->chunk,           A->dl};
    OT_CHECK(ring_rs(&R, A->op));
    return ring_ag(&R);
}

static ot_status ar_hd(const arctx *A) {
    ot_comm *c = A->c;
    int n = c->size, r = c->rank;
    int p2 = 1;
    while (p2 * 2 <= n) p2 *= 2;
    int rem = n - p2;
    size_t esz = A->esz;
    int newr;
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            OT_CHECK(xsendrecv(c, r + 1, A->w, A->count * esz, -1, NULL, 0, A->dl));
            newr = -1;
        } else {
            OT_CHECK(xsendrecv_reduce(c, -1, NULL, 0, r - 1, A->w, A->count, A->dt, A->op, A->dl));
            newr = r / 2;
        }
    } else {
        newr = r - rem;
    }
#define REAL(q) ((q) < rem ? 2 * (q) + 1 : (q) + rem)
    if (newr >= 0 && p2 > 1) {
        size_t lo_stack[32], hi_stack[32];
        int depth = 0;
        size_t lo = 0, hi = A->count;
        for (int d = p2 / 2; d >= 1; d /= 2) {
            int partner = REAL(newr ^ d);
            size_t mid = lo + (hi - lo) / 2;
            lo_stack[depth] = lo, hi_stack[depth++] = hi;
            size_t klo, khi, slo, shi;
            if ((newr & d) == 0)
                klo = lo, khi = mid, slo = mid, shi = hi;
            else
                klo = mid, khi = hi, slo = lo, shi = mid;
            OT_CHECK(xsendrecv_reduce(c, partner, A->w + slo * esz, shi - slo, partner,
                                      A->w + klo * esz, khi - klo, A->dt, A->op, A->dl));
            lo = klo, hi = khi;
        }
        for (int d = 1; d < p2; d *= 2) {
            int partner = REAL(newr ^ d);
            size_t plo = lo_stack[--depth], phi = hi_stack[depth];
            /* the partner holds the other half of [plo, phi) */
            size_t olo = lo == plo ? hi : plo, ohi = lo == plo ? phi : lo;
            OT_CHECK(xsendrecv(c, partner, A->w + lo * esz, (hi - lo) * esz, partner,
                               A->w + olo * esz, (ohi - olo) * esz, A->dl));
            lo = plo, hi = phi;
        }
    }
#undef REAL
    if (r < 2 * rem) {
        if (r % 2 == 1)
            OT_CHECK(xsendrecv(c, r - 1, A->w, A->count * esz, -1, NULL, 0, A->dl));
        else
            OT_CHECK(xsendrecv(c, -1, NULL, 0, r + 1, A->w, A->count * esz, A->dl));
    }
    return OT_OK;
}

/* Binomial tree on relative ranks (root 0 at rank `root`), chunked. */
static ot_status tree_reduce(ot_comm *c, char *w, size_t count, ot_dtype dt, size_t esz,
                             ot_redop op, int root, size_t chunk, uint64_t dl) {
    int n = c->size, vr = mod(c->rank - root, n);
    size_t np = npieces(count, 0, chunk);
    for (size_t j = 0; j < np; j++) {
        size_t po, pl;
        piece(0, count, j, chunk, &po, &pl);
        for (int mask = 1; mask < n; mask <<= 1) {
            if (vr & mask) {
                OT_CHECK(xsendrecv(c, mod(vr - mask + root, n), w + po * esz, pl * esz, -1, NULL, 0,
                                   dl));
                break;
            }
            if (vr + mask < n)
                OT_CHECK(xsendrecv_reduce(c, -1, NULL, 0, mod(vr + mask + root, n), w + po * esz,
                                          pl, dt, op, dl));
        }
    }
    return OT_OK;
}

static ot_status tree_bcast(ot_comm *c, char *w, size_t bytes, int root, size_t chunk,
                            uint64_t dl) {
    int n = c->size, vr = mod(c->rank - root, n);
    size_t np = npieces(bytes, 0, chunk);
    for (size_t j = 0; j < np; j++) {
        size_t po, pl;
        piece(0, bytes, j, chunk, &po, &pl);
        int mask = 1;
        while (mask < n) {
            if (vr & mask) {
                OT_CHECK(xsendrecv(c, -1, NULL, 0, mod(vr - mask + root, n), w + po, pl, dl));
                break;
            }
            mask <<= 1;
        }
        for (mask >>= 1; mask > 0; mask >>= 1)
            if (vr + mask < n)
                OT_CHECK(xsendrecv(c, mod(vr + mask + root, n), w + po, pl, -1, NULL, 0, dl));
    }
    return OT_OK;
}

static ot_status ar_tree(const arctx *A) {
    OT_CHECK(tree_reduce(A->c, A->w, A->count, A->dt, A->esz, A->op, 0, A->chunk, A->dl));
    return tree_bcast(A->c, A->w, A->count * A->esz, 0, A->chunk * A->esz, A->dl);
}

static ot_status ar_hier2d(const arctx *A) {
    ot_comm *c = A->c;
    int C = c->cols, Rr = c->rows, row = c->rank / C, col = c->rank % C;
    int rowmem[4096];
    int colmem[4096];
    if (C > 4096 || Rr > 4096) return ot_error(OT_ERR_INVALID_ARGUMENT, "hier2d: grid too large");
    for (int i = 0; i < C; i++) rowmem[i] = row * C + i;
    for (int i = 0; i < Rr; i++) colmem[i] = i * C + col;
    ringctx R = {c, rowmem, C, col, A->w, A->count, NULL, 0, A->dt, A->esz, A->chunk, A->dl};
    OT_CHECK(ring_rs(&R, A->op));
    size_t off, len;
    seg_range(A->count, C, col, &off, &len);
    ringctx K = {c,     colmem, Rr,       row,  A->w + off * A->esz, len, NULL, 0,
                 A->dt, A->esz, A->chunk, A->dl};
    OT_CHECK(ring_rs(&K, A->op));
    OT_CHECK(ring_ag(&K));
    return ring_ag(&R);
}

/* ---- direct (shared memory) ----------------------------------------------------------------- */

typedef struct dptr {
    const void *src;
    void *dst;
} dptr;

#define TILE 1024

/* Combine tile [i, i+k) of every member's src in rank order into acc (accumulation dtype). */
static void load_tile(double *accd, float *accf, int32_t *acc32, int64_t *acc64, void *const *all,
                      int n, size_t i, size_t k, ot_dtype dt, size_t src_off, ot_redop op) {
    ot_dtype adt = ot_pod_acc_dtype(dt);
    void *acc = adt == OT_F64   ? (void *)accd
                : adt == OT_F32 ? (void *)accf
                : adt == OT_S32 ? (void *)acc32
                                : (void *)acc64;
    float tmp[TILE];
    for (int r = 0; r < n; r++) {
        const char *s =
            (const char *)((const dptr *)all[r])->src + (src_off + i) * ot_dtype_size(dt);
        const void *in = s;
        if (dt == OT_F16 || dt == OT_BF16) {
            ot_pod_widen(r ? tmp : accf, s, k, dt);
            in = tmp;
            if (r == 0) continue;
        }
        if (r == 0)
            memcpy(acc, s, k * ot_dtype_size(adt));
        else
            ot_pod_combine(acc, in, k, adt, op == OT_REDOP_MEAN ? OT_REDOP_SUM : op);
    }
    if (op == OT_REDOP_MEAN) ot_pod_divide(acc, k, adt, n);
}

/* Large results are written with non-temporal stores: they bypass the caches (no read for
 * ownership of the destination lines), which is what lets one pass of the direct algorithm run
 * at memcpy speed. */
#define STREAM_MIN_BYTES (4u << 20)

static void stream_fence(void) {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

/* A copy that streams when the whole transfer (total bytes) is large. */
static void big_copy(void *dst, const void *src, size_t bytes, size_t total) {
    if (total >= STREAM_MIN_BYTES)
        ot_stream_copy(dst, src, bytes);
    else
        memcpy(dst, src, bytes);
}

static void store_tile(void *dst, size_t i, size_t k, ot_dtype dt, const void *acc, bool nt) {
    size_t esz = ot_dtype_size(dt);
    char *d = (char *)dst + i * esz;
    if (dt == OT_F16 || dt == OT_BF16) {
        if (!nt) {
            ot_pod_narrow(d, acc, k, dt);
            return;
        }
        uint16_t tmp[TILE];
        ot_pod_narrow(tmp, acc, k, dt);
        ot_stream_copy(d, tmp, k * esz);
    } else if (nt) {
        ot_stream_copy(d, acc, k * esz);
    } else {
        memcpy(d, acc, k * esz);
    }
}

static ot_status direct_exchange(ot_comm *c, const void *src, void *dst, dptr *mine, uint64_t dl) {
    mine->src = src;
    mine->dst = dst;
    return c->vt->exchange_ptrs(c->ctx, mine, c->ptrs, dl);
}

/* kind: ALLREDUCE (my 1/n to every dst), REDUCE_SCATTER (block rank to own dst), REDUCE (my 1/n
 * to root's dst). count: elements of the reduced vector; src_blk: element offset multiplier for
 * reduce-scatter sources. */
static ot_status direct_reduce(ot_comm *c, ot_coll_kind kind, const void *src, void *dst,
                               size_t count, ot_dtype dt, ot_redop op, int root, uint64_t dl) {
    dptr mine;
    OT_CHECK(direct_exchange(c, src, dst, &mine, dl));
    int n = c->size;
    size_t lo, len, src_off = 0;
    if (kind == OT_COLL_REDUCE_SCATTER) {
        lo = 0, len = count, src_off = (size_t)c->rank * count;
    } else {
        seg_range(count, n, c->rank, &lo, &len);
    }
    double accd[TILE];
    float accf[TILE];
    int32_t acc32[TILE];
    int64_t acc64[TILE];
    ot_dtype adt = ot_pod_acc_dtype(dt);
    const void *acc = adt == OT_F64   ? (void *)accd
                      : adt == OT_F32 ? (void *)accf
                      : adt == OT_S32 ? (void *)acc32
                                      : (void *)acc64;
    bool nt = count * ot_dtype_size(dt) >= STREAM_MIN_BYTES;
    for (size_t i = lo; i < lo + len; i += TILE) {
        size_t k = lo + len - i < TILE ? lo + len - i : TILE;
        load_tile(accd, accf, acc32, acc64, c->ptrs, n, i, k, dt, src_off, op);
        if (kind == OT_COLL_ALLREDUCE) {
            for (int r = 0; r < n; r++) store_tile(((dptr *)c->ptrs[r])->dst, i, k, dt, acc, nt);
        } else if (kind == OT_COLL_REDUCE) {
            store_tile(((dptr *)c->ptrs[root])->dst, i, k, dt, acc, nt);
        } else {
            store_tile(dst, i - lo, k, dt, acc, nt);
        }
    }
    if (nt) stream_fence(); /* the stores are visible before the barrier releases the others */
    return xbarrier(c, dl);
}

/* ---- tree reduce-scatter -------------------------------------------------------------------- */

/* The tree algorithm's reduce-scatter gives every element the summation order of the tree
 * all-reduce (tree_reduce to rank 0): at level mask = 1, 2, 4, ... every rank v that is a
 * multiple of 2 * mask adds rank v + mask's partial sum (v + mask < n). That order is per element
 * and independent of how the vector is split, so a block of the reduce-scatter is bit for bit the
 * same block of the tree all-reduce of the whole vector: a sharded update reduces exactly what
 * the unsharded one does.
 *
 * In shared memory each member computes its own block only, tile by tile: it reads its block of
 * every member's input once (n tiles into the work buffer) and combines them level by level in
 * that order in cache — no member touches the rest of the vector, where the all-reduce reduces
 * and broadcasts all of it. */
static ot_status tree_rs_shm(ot_comm *c, const void *src, void *dst, size_t count, ot_dtype dt,
                             ot_redop op, uint64_t dl) {
    int n = c->size;
    ot_dtype adt = ot_pod_acc_dtype(dt);
    size_t esz = ot_dtype_size(dt), aesz = ot_dtype_size(adt), stride = (size_t)TILE * aesz;
    /* allocated before the exchange: a member that cannot fails before it publishes its input
     * (the others then time out at the exchange) */
    /* n work tiles, then the n members' tile pointers */
    size_t ptr_off = (size_t)n * stride;
    char *acc = ensure(&c->work, &c->work_cap, ptr_off + (size_t)n * sizeof(void *));
    if (!acc) return ot_error(OT_ERR_OUT_OF_MEMORY, "reduce_scatter: tree work tiles");
    const void **in = (const void **)(void *)(acc + ptr_off);
    dptr mine;
    OT_CHECK(direct_exchange(c, src, dst, &mine, dl));
    ot_redop cop = op == OT_REDOP_MEAN ? OT_REDOP_SUM : op;
    size_t src_off = (size_t)c->rank * count;
    for (size_t i = 0; i < count; i += TILE) {
        size_t k = count - i < TILE ? count - i : TILE;
        char *d = (char *)dst + i * esz;
        if (adt == dt) { /* the members' tiles read in place, the result written to dst */
            for (int r = 0; r < n; r++)
                in[r] = (const char *)((const dptr *)c->ptrs[r])->src + (src_off + i) * esz;
            ot_pod_tree_combine(d, in, n, k, adt, cop, acc);
            if (op == OT_REDOP_MEAN) ot_pod_divide(d, k, adt, n);
            continue;
        }
        for (int r = 0; r < n; r++) {
            const char *s = (const char *)((const dptr *)c->ptrs[r])->src + (src_off + i) * esz;
            ot_pod_widen((float *)(acc + (size_t)r * stride), s, k, dt);
        }
        for (int mask = 1; mask < n; mask <<= 1)
            for (int v = 0; v + mask < n; v += 2 * mask)
                ot_pod_combine(acc + (size_t)v * stride, acc + (size_t)(v + mask) * stride, k, adt,
                               cop);
        if (op == OT_REDOP_MEAN) ot_pod_divide(acc, k, adt, n);
        ot_pod_narrow(d, (const float *)acc, k, dt);
    }
    /* nobody returns (and reuses its input) before every member has read its block */
    return xbarrier(c, dl);
}

/* Over messages: the tree reduce of the whole vector to rank 0 (the all-reduce's first half, so
 * the same order), then rank 0 sends every member its block — the all-reduce's broadcast of the
 * whole vector is not needed. w: the whole vector in the accumulation dtype on every member; on
 * return block `rank` of w holds the result. */
static ot_status tree_rs_msg(ot_comm *c, char *w, size_t count, ot_dtype adt, ot_redop op,
                             size_t chunk, uint64_t dl) {
    size_t aesz = ot_dtype_size(adt), bytes = count * aesz;
    int n = c->size;
    OT_CHECK(tree_reduce(c, w, count * (size_t)n, adt, aesz,
                         op == OT_REDOP_MEAN ? OT_REDOP_SUM : op, 0, chunk, dl));
    char *mine = w + (size_t)c->rank * bytes;
    if (c->rank == 0) {
        for (int r = 1; r < n; r++)
            OT_CHECK(xsendrecv(c, r, w + (size_t)r * bytes, bytes, -1, NULL, 0, dl));
    } else {
        OT_CHECK(xsendrecv(c, -1, NULL, 0, 0, mine, bytes, dl));
    }
    if (op == OT_REDOP_MEAN) ot_pod_divide(mine, count, adt, n);
    return OT_OK;
}

/* ---- the collective entry points ------------------------------------------------------------ */

bool ot_coll_algo_supported(const ot_comm *c, ot_coll_kind kind, ot_coll_algo algo) {
    if (algo == OT_ALGO_AUTO) return true;
    if (algo <= OT_ALGO_AUTO || algo >= OT_ALGO_COUNT || kind < 0 || kind >= OT_COLL_KIND_COUNT)
        return false;
    if (algo == OT_ALGO_DIRECT) return c->vt->exchange_ptrs != NULL && kind != OT_COLL_BARRIER;
    if (algo == OT_ALGO_HIER2D && !(c->rows > 1 && c->cols > 1)) return false;
    switch (kind) {
    case OT_COLL_ALLREDUCE:
    case OT_COLL_REDUCE_SCATTER:
    case OT_COLL_REDUCE:
        return true; /* halving-doubling and hier2d reduce-scatter as an all-reduce of the whole
                        vector, the block kept (ring, tree and direct natively) */
    case OT_COLL_ALLGATHER:
    case OT_COLL_ALLTOALL: return algo == OT_ALGO_RING;
    case OT_COLL_BROADCAST: return algo == OT_ALGO_RING || algo == OT_ALGO_TREE;
    case OT_COLL_BARRIER: return algo == OT_ALGO_TREE; /* dissemination (log n rounds) */
    default: return false;
    }
}

static int ceil_log2(int n) {
    int k = 0;
    while ((1 << k) < n) k++;
    return k;
}

/* The alpha-beta model. With links (message passing, or a topology placed on the comm) a step
 * costs alpha + bytes * beta. In shared memory (the transport can exchange pointers and no
 * topology was placed) a "message" is a copy by the receiver, so the beta term counts the bytes
 * every member touches: a reduction step reads both operands and writes one (3 per byte), a copy
 * step reads and writes (2 per byte); the direct algorithm reads each byte once from its owner
 * and writes it once to each destination (2 per byte overall) and pays for three barriers. */
static double ar_cost(const ot_comm *c, ot_coll_algo a, double B) {
    double al = c->cost.alpha_us, be = 1.0 / (c->cost.gbytes_per_s * 1e3); /* us per byte */
    int n = c->size;
    if (n == 1) return 0;
    bool shm = c->vt->exchange_ptrs && !c->placed;
    double wr = shm ? 3 : 1, wc = shm ? 2 : 1;
    switch (a) {
    case OT_ALGO_RING: return (n - 1) * (2 * al + (wr + wc) * B / n * be);
    case OT_ALGO_HALVING_DOUBLING: {
        int p2 = 1;
        while (p2 * 2 <= n) p2 *= 2;
        double t = ceil_log2(p2) * 2 * al + (wr + wc) * (p2 - 1) / p2 * B * be;
        return t + (p2 != n ? 2 * al + (wr + wc) * B * be : 0);
    }
    case OT_ALGO_TREE: {
        double P = ceil(B / DEFAULT_CHUNK);
        if (P < 1) P = 1;
        return (ceil_log2(n) + P - 1) * (2 * al + (wr + wc) * B / P * be);
    }
    case OT_ALGO_HIER2D: {
        int C = c->cols, R = c->rows;
        return (C - 1) * (2 * al + (wr + wc) * B / C * be) +
               (R - 1) * (2 * al + (wr + wc) * B / C / R * be);
    }
    case OT_ALGO_DIRECT:
        if (shm) return 3 * ceil_log2(n) * al + 2 * B * be;
        /* over links: an all-to-all exchange whose paths share links */
        return 3 * ceil_log2(n) * al + 2.0 * (n - 1) / n * B * be * (1 + c->diameter / 2.0);
    default: return -1;
    }
}

double ot_coll_cost_us(const ot_comm *c, ot_coll_kind kind, ot_coll_algo algo, size_t bytes) {
    if (algo == OT_ALGO_AUTO) algo = ot_coll_choose(c, kind, bytes);
    if (!ot_coll_algo_supported(c, kind, algo)) return -1;
    double al = c->cost.alpha_us, be = 1.0 / (c->cost.gbytes_per_s * 1e3);
    int n = c->size;
    double B = (double)bytes, S = B * n; /* S: the whole vector of RS/AG/all-to-all */
    double lg = ceil_log2(n);
    switch (kind) {
    case OT_COLL_ALLREDUCE: return ar_cost(c, algo, B);
    case OT_COLL_REDUCE_SCATTER:
        if (algo == OT_ALGO_RING) return (n - 1) * (al + B * be);
        if (algo == OT_ALGO_DIRECT) return 2 * lg * al + B * be;
        if (algo == OT_ALGO_TREE) {
            /* shared memory: each member reads its block of every input, one exchange and a
             * barrier more than direct's; messages: the tree reduce of the whole vector to rank
             * 0, which sends each member its block */
            if (c->vt->exchange_ptrs && !c->placed) return 3 * lg * al + B * be;
            return ar_cost(c, OT_ALGO_TREE, S) / 2 + (n - 1) * (al + B * be);
        }
        return ar_cost(c, algo, S);
    case OT_COLL_REDUCE:
        if (algo == OT_ALGO_TREE) return ar_cost(c, OT_ALGO_TREE, B) / 2;
        if (algo == OT_ALGO_DIRECT) return 2 * lg * al + B * be;
        return ar_cost(c, algo, B);
    case OT_COLL_ALLGATHER:
        if (algo == OT_ALGO_RING) return (n - 1) * (al + B * be);
        return 2 * lg * al + S * be;
    case OT_COLL_BROADCAST: {
        double P = ceil(B / DEFAULT_CHUNK);
        if (P < 1) P = 1;
        if (algo == OT_ALGO_RING) return (n - 1 + P - 1) * (al + B / P * be);
        if (algo == OT_ALGO_TREE) return (lg + P - 1) * (al + B / P * be);
        return 2 * lg * al + B * be;
    }
    case OT_COLL_ALLTOALL:
        if (algo == OT_ALGO_RING) return (n - 1) * (al + B * be);
        return 2 * lg * al + S * be;
    case OT_COLL_BARRIER: return lg * al;
    default: return -1;
    }
}

ot_coll_algo ot_coll_choose(const ot_comm *c, ot_coll_kind kind, size_t bytes) {
    ot_coll_algo best = OT_ALGO_RING;
    double bc = -1;
    for (int a = OT_ALGO_RING; a < OT_ALGO_COUNT; a++) {
        if (!ot_coll_algo_supported(c, kind, (ot_coll_algo)a)) continue;
        double t = ot_coll_cost_us(c, kind, (ot_coll_algo)a, bytes);
        if (t >= 0 && (bc < 0 || t < bc)) bc = t, best = (ot_coll_algo)a;
    }
    return best;
}

int ot_coll_explain(const ot_comm *c, ot_coll_kind kind, size_t bytes, char *buf, size_t n) {
    ot_coll_algo ch = ot_coll_choose(c, kind, bytes);
    int k =
        snprintf(buf, n, "%s of %zu bytes over %d members (alpha %.2f us, %.2f GB/s):\n",
                 ot_coll_kind_name(kind), bytes, c->size, c->cost.alpha_us, c->cost.gbytes_per_s);
    for (int a = OT_ALGO_RING; a < OT_ALGO_COUNT; a++) {
        size_t off = (size_t)k < n ? (size_t)k : n;
        double t = ot_coll_cost_us(c, kind, (ot_coll_algo)a, bytes);
        if (t < 0)
            k += snprintf(buf + off, n - off, "  %-17s unsupported\n", algo_names[a]);
        else
            k += snprintf(buf + off, n - off, "  %-17s %12.2f us%s\n", algo_names[a], t,
                          a == (int)ch ? "  <- chosen" : "");
    }
    return k;
}

double ot_coll_bus_factor(ot_coll_kind kind, int n) {
    if (n <= 1) return n == 1 && (kind == OT_COLL_BROADCAST || kind == OT_COLL_REDUCE) ? 1 : 0;
    switch (kind) {
    case OT_COLL_ALLREDUCE: return 2.0 * (n - 1) / n;
    case OT_COLL_REDUCE_SCATTER:
    case OT_COLL_ALLGATHER:
    case OT_COLL_ALLTOALL: return (double)(n - 1) / n;
    case OT_COLL_BROADCAST:
    case OT_COLL_REDUCE: return 1;
    default: return 0;
    }
}

static double coll_size_bytes(ot_coll_kind kind, int n, size_t count, ot_dtype dt) {
    double b = (double)count * (double)ot_dtype_size(dt);
    if (kind == OT_COLL_REDUCE_SCATTER || kind == OT_COLL_ALLGATHER || kind == OT_COLL_ALLTOALL)
        b *= n;
    return b;
}

double ot_coll_algbw_gbs(ot_coll_kind kind, int n, size_t count, ot_dtype dt, double seconds) {
    if (!(seconds > 0)) return 0;
    return coll_size_bytes(kind, n, count, dt) / seconds / 1e9;
}

/* Common prologue/epilogue. */
static ot_status begin(ot_comm *c, ot_coll_kind kind, ot_dtype dt, bool reduction, ot_redop op,
                       const ot_coll_options *o, uint64_t *dl) {
    if (c->aborted)
        return ot_error(OT_ERR_FAILED_PRECONDITION,
                        "comm: aborted by an earlier failure; build a new communicator");
    if (reduction && !ot_coll_dtype_supported(dt))
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "%s: dtype %s is not reducible (f32, f64, f16, "
                        "bf16, s32, s64)",
                        ot_coll_kind_name(kind), ot_dtype_name(dt));
    if (!reduction && ot_dtype_size(dt) == 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: invalid dtype", ot_coll_kind_name(kind));
    if (reduction && (op < 0 || op >= OT_REDOP_COUNT))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: invalid reduction op %d",
                        ot_coll_kind_name(kind), (int)op);
    if (o && !ot_coll_algo_supported(c, kind, o->algo))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "%s: algorithm %s is not available here%s",
                        ot_coll_kind_name(kind), ot_coll_algo_name(o->algo),
                        o->algo == OT_ALGO_DIRECT ? " (needs a shared-memory transport)" : "");
    int64_t to = o && o->timeout_ns > 0 ? o->timeout_ns : c->timeout_ns;
    *dl = ot_now_ns() + (uint64_t)to;
    return OT_OK;
}

static ot_status finish(ot_comm *c, ot_coll_kind kind, ot_status st, uint64_t t0, size_t count,
                        ot_dtype dt) {
    uint64_t t1 = ot_now_ns();
    c->stats.calls[kind]++;
    c->stats.ns[kind] += t1 - t0;
    if (c->trace) {
        char msg[512];
        if (st != OT_OK) snprintf(msg, sizeof msg, "%s", ot_last_error());
        if (ot_pod_trace_record(c->trace, c->trace_device, OT_PHASE_COMM, ot_coll_kind_name(kind),
                                t0, t1) != OT_OK &&
            st != OT_OK) { /* keep the collective's message, not the trace's */
            const char *m = msg, *code = ot_status_str(st);
            size_t cl = strlen(code);
            if (!strncmp(m, code, cl) && m[cl] == ':') m += cl + 2;
            ot_error(st, "%s", m);
        }
    }
    if (st == OT_OK) {
        c->stats.bytes[kind] += (uint64_t)coll_size_bytes(kind, c->size, count, dt);
        return OT_OK;
    }
    c->stats.failures++;
    if (st == OT_ERR_TIMEOUT || st == OT_ERR_PEER_FAILED || st == OT_ERR_CANCELLED) {
        c->aborted = true;
        if (c->vt->abort) c->vt->abort(c->ctx, st, ot_last_error());
    }
    return st;
}

static ot_coll_algo pick(ot_comm *c, ot_coll_kind kind, size_t bytes, const ot_coll_options *o) {
    return o && o->algo != OT_ALGO_AUTO ? o->algo : ot_coll_choose(c, kind, bytes);
}

/* All-reduce of `count` elements held in w (accumulation dtype) by a non-direct algorithm. */
static ot_status run_ar(ot_comm *c, ot_coll_algo algo, void *w, size_t count, ot_dtype adt,
                        ot_redop op, const ot_coll_options *o, uint64_t dl) {
    size_t esz = ot_dtype_size(adt);
    arctx A = {c, w, count, adt, esz, op == OT_REDOP_MEAN ? OT_REDOP_SUM : op, chunk_elems(o, esz),
               dl};
    ot_status st;
    switch (algo) {
    case OT_ALGO_HALVING_DOUBLING: st = ar_hd(&A); break;
    case OT_ALGO_TREE: st = ar_tree(&A); break;
    case OT_ALGO_HIER2D: st = ar_hier2d(&A); break;
    default: st = ar_ring(&A); break;
    }
    if (st == OT_OK && op == OT_REDOP_MEAN) ot_pod_divide(w, count, adt, c->size);
    return st;
}

/* Loads src (count elements of dt) into a work buffer of the accumulation dtype: recv itself
 * when dt is already an accumulation type, else the communicator's work buffer. */
static ot_status load_work(ot_comm *c, const void *src, void *recv, size_t count, ot_dtype dt,
                           void **w) {
    if (ot_pod_acc_dtype(dt) == dt) {
        if (src != recv && count) memcpy(recv, src, count * ot_dtype_size(dt));
        *w = recv;
        return OT_OK;
    }
    *w = ensure(&c->work, &c->work_cap, count * sizeof(float));
    if (!*w) return ot_error(OT_ERR_OUT_OF_MEMORY, "comm: work buffer of %zu bytes", count * 4);
    ot_pod_widen(*w, src, count, dt);
    return OT_OK;
}

ot_status ot_comm_allreduce(ot_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                            ot_dtype dt, ot_redop op, const ot_coll_options *o) {
    if (!c || (count && (!sendbuf || !recvbuf)))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "allreduce: NULL argument");
    uint64_t dl = 0, t0 = ot_now_ns();
    OT_CHECK(begin(c, OT_COLL_ALLREDUCE, dt, true, op, o, &dl));
    if (count == 0) return finish(c, OT_COLL_ALLREDUCE, OT_OK, t0, 0, dt);
    ot_coll_algo algo = pick(c, OT_COLL_ALLREDUCE, count * ot_dtype_size(dt), o);
    ot_status st;
    if (algo == OT_ALGO_DIRECT) {
        st = direct_reduce(c, OT_COLL_ALLREDUCE, sendbuf, recvbuf, count, dt, op, 0, dl);
    } else {
        void *w;
        st = load_work(c, sendbuf, recvbuf, count, dt, &w);
        if (st == OT_OK) st = run_ar(c, algo, w, count, ot_pod_acc_dtype(dt), op, o, dl);
        if (st == OT_OK && w != recvbuf) ot_pod_narrow(recvbuf, w, count, dt);
    }
    return finish(c, OT_COLL_ALLREDUCE, st, t0, count, dt);
}

ot_status ot_comm_reduce_scatter(ot_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                                 ot_dtype dt, ot_redop op, const ot_coll_options *o) {
    if (!c || (count && (!sendbuf || !recvbuf)))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "reduce_scatter: NULL argument");
    uint64_t dl = 0, t0 = ot_now_ns();
    OT_CHECK(begin(c, OT_COLL_REDUCE_SCATTER, dt, true, op, o, &dl));
    if (count == 0) return finish(c, OT_COLL_REDUCE_SCATTER, OT_OK, t0, 0, dt);
    size_t esz = ot_dtype_size(dt), total = count * (size_t)c->size;
    ot_coll_algo algo = pick(c, OT_COLL_REDUCE_SCATTER, count * esz, o);
    ot_status st;
    if (algo == OT_ALGO_DIRECT) {
        st = direct_reduce(c, OT_COLL_REDUCE_SCATTER, sendbuf, recvbuf, count, dt, op, 0, dl);
        return finish(c, OT_COLL_REDUCE_SCATTER, st, t0, count, dt);
    }
    if (algo == OT_ALGO_TREE && c->vt->exchange_ptrs) {
        st = tree_rs_shm(c, sendbuf, recvbuf, count, dt, op, dl);
        return finish(c, OT_COLL_REDUCE_SCATTER, st, t0, count, dt);
    }
    /* a work copy of the whole input in the accumulation dtype */
    ot_dtype adt = ot_pod_acc_dtype(dt);
    size_t aesz = ot_dtype_size(adt);
    char *w = ensure(&c->work, &c->work_cap, total * aesz);
    if (!w) {
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "reduce_scatter: work buffer");
        return finish(c, OT_COLL_REDUCE_SCATTER, st, t0, count, dt);
    }
    if (adt == dt)
        memcpy(w, sendbuf, total * esz);
    else
        ot_pod_widen((float *)w, sendbuf, total, dt);
    if (algo == OT_ALGO_RING) {
        ringctx R = {c,     c->ring, c->size, c->pos_of[c->rank],   w, total, c->ring,
                     count, adt,     aesz,    chunk_elems(o, aesz), dl};
        st = ring_rs(&R, op == OT_REDOP_MEAN ? OT_REDOP_SUM : op);
        if (st == OT_OK && op == OT_REDOP_MEAN)
            ot_pod_divide(w + (size_t)c->rank * count * aesz, count, adt, c->size);
    } else if (algo == OT_ALGO_TREE) {
        st = tree_rs_msg(c, w, count, adt, op, chunk_elems(o, aesz), dl);
    } else {
        st = run_ar(c, algo, w, total, adt, op, o, dl);
    }
    if (st == OT_OK) {
        const char *mine = w + (size_t)c->rank * count * aesz;
        if (adt == dt)
            memmove(recvbuf, mine, count * esz);
        else
            ot_pod_narrow(recvbuf, (const float *)mine, count, dt);
    }
    return finish(c, OT_COLL_REDUCE_SCATTER, st, t0, count, dt);
}

ot_status ot_comm_reduce(ot_comm *c, const void *sendbuf, void *recvbuf, size_t count, ot_dtype dt,
                         ot_redop op, int root, const ot_coll_options *o) {
    if (!c || (count && (!sendbuf || (c->rank == root && !recvbuf))))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "reduce: NULL argument");
    if (root < 0 || root >= c->size)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "reduce: root %d outside 0..%d", root,
                        c->size - 1);
    uint64_t dl = 0, t0 = ot_now_ns();
    OT_CHECK(begin(c, OT_COLL_REDUCE, dt, true, op, o, &dl));
    if (count == 0) return finish(c, OT_COLL_REDUCE, OT_OK, t0, 0, dt);
    ot_coll_algo algo = pick(c, OT_COLL_REDUCE, count * ot_dtype_size(dt), o);
    ot_status st;
    if (algo == OT_ALGO_DIRECT) {
        st = direct_reduce(c, OT_COLL_REDUCE, sendbuf, recvbuf, count, dt, op, root, dl);
        return finish(c, OT_COLL_REDUCE, st, t0, count, dt);
    }
    ot_dtype adt = ot_pod_acc_dtype(dt);
    size_t aesz = ot_dtype_size(adt);
    char *w = ensure(&c->work, &c->work_cap, count * aesz);
    if (!w) {
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "reduce: work buffer");
        return finish(c, OT_COLL_REDUCE, st, t0, count, dt);
    }
    if (adt == dt)
        memcpy(w, sendbuf, count * aesz);
    else
        ot_pod_widen((float *)w, sendbuf, count, dt);
    if (algo == OT_ALGO_TREE) {
        st = tree_reduce(c, w, count, adt, aesz, op == OT_REDOP_MEAN ? OT_REDOP_SUM : op, root,
                         chunk_elems(o, aesz), dl);
        if (st == OT_OK && op == OT_REDOP_MEAN && c->rank == root)
            ot_pod_divide(w, count, adt, c->size);
    } else {
        st = run_ar(c, algo, w, count, adt, op, o, dl);
    }
    if (st == OT_OK && c->rank == root) {
        if (adt == dt)
            memcpy(recvbuf, w, count * aesz);
        else
            ot_pod_narrow(recvbuf, (const float *)w, count, dt);
    }
    return finish(c, OT_COLL_REDUCE, st, t0, count, dt);
}

ot_status ot_comm_allgather(ot_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                            ot_dtype dt, const ot_coll_options *o) {
    if (!c || (count && (!sendbuf || !recvbuf)))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "allgather: NULL argument");
    uint64_t dl = 0, t0 = ot_now_ns();
    OT_CHECK(begin(c, OT_COLL_ALLGATHER, dt, false, OT_REDOP_SUM, o, &dl));
    if (count == 0) return finish(c, OT_COLL_ALLGATHER, OT_OK, t0, 0, dt);
    size_t esz = ot_dtype_size(dt), bytes = count * esz;
    ot_coll_algo algo = pick(c, OT_COLL_ALLGATHER, bytes, o);
    ot_status st;
    char *mine = (char *)recvbuf + (size_t)c->rank * bytes;
    if (algo == OT_ALGO_DIRECT) {
        dptr me;
        st = direct_exchange(c, sendbuf, recvbuf, &me, dl);
        for (int r = 0; st == OT_OK && r < c->size; r++) {
            const void *s = ((dptr *)c->ptrs[r])->src;
            char *d = (char *)recvbuf + (size_t)r * bytes;
            if (s != d) big_copy(d, s, bytes, bytes * c->size);
        }
        stream_fence();
        if (st == OT_OK) st = xbarrier(c, dl);
    } else {
        if (sendbuf != mine) memcpy(mine, sendbuf, bytes);
        /* bytes as elements of u8 so that any dtype moves */
        ringctx R = {c,     c->ring, c->size, c->pos_of[c->rank], recvbuf, bytes * c->size, c->ring,
                     bytes, OT_U8,   1,       chunk_elems(o, 1),  dl};
        st = ring_ag(&R);
    }
    return finish(c, OT_COLL_ALLGATHER, st, t0, count, dt);
}

ot_status ot_comm_broadcast(ot_comm *c, void *buf, size_t count, ot_dtype dt, int root,
                            const ot_coll_options *o) {
    if (!c || (count && !buf)) return ot_error(OT_ERR_INVALID_ARGUMENT, "broadcast: NULL argument");
    if (root < 0 || root >= c->size)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "broadcast: root %d outside 0..%d", root,
                        c->size - 1);
    uint64_t dl = 0, t0 = ot_now_ns();
    OT_CHECK(begin(c, OT_COLL_BROADCAST, dt, false, OT_REDOP_SUM, o, &dl));
    if (count == 0) return finish(c, OT_COLL_BROADCAST, OT_OK, t0, 0, dt);
    size_t bytes = count * ot_dtype_size(dt);
    ot_coll_algo algo = pick(c, OT_COLL_BROADCAST, bytes, o);
    size_t chunk = chunk_elems(o, 1);
    ot_status st = OT_OK;
    if (algo == OT_ALGO_DIRECT) {
        dptr me;
        st = direct_exchange(c, buf, buf, &me, dl);
        if (st == OT_OK && c->rank != root)
            big_copy(buf, ((dptr *)c->ptrs[root])->src, bytes, bytes);
        stream_fence();
        if (st == OT_OK) st = xbarrier(c, dl);
    } else if (algo == OT_ALGO_TREE) {
        st = tree_bcast(c, buf, bytes, root, chunk, dl);
    } else {
        /* a pipelined chain along the ring starting at root: piece i arrives while piece i-1
         * goes on */
        int n = c->size, rel = mod(c->pos_of[c->rank] - c->pos_of[root], n);
        int next = c->ring[mod(c->pos_of[c->rank] + 1, n)];
        int prev = c->ring[mod(c->pos_of[c->rank] - 1, n)];
        size_t np = npieces(bytes, 0, chunk);
        for (size_t i = 0; st == OT_OK && i <= np; i++) {
            size_t so, sl, ro, rl;
            bool snd = i >= 1 && rel < n - 1, rcv = i < np && rel > 0;
            if (snd) piece(0, bytes, i - 1, chunk, &so, &sl);
            if (rcv) piece(0, bytes, i, chunk, &ro, &rl);
            if (snd || rcv)
                st = xsendrecv(c, snd ? next : -1, snd ? (char *)buf + so : NULL, snd ? sl : 0,
                               rcv ? prev : -1, rcv ? (char *)buf + ro : NULL, rcv ? rl : 0, dl);
        }
    }
    return finish(c, OT_COLL_BROADCAST, st, t0, count, dt);
}

ot_status ot_comm_alltoall(ot_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                           ot_dtype dt, const ot_coll_options *o) {
    if (!c || (count && (!sendbuf || !recvbuf)))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "alltoall: NULL argument");
    if (count && sendbuf == recvbuf)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "alltoall: out of place only");
    uint64_t dl = 0, t0 = ot_now_ns();
    OT_CHECK(begin(c, OT_COLL_ALLTOALL, dt, false, OT_REDOP_SUM, o, &dl));
    if (count == 0) return finish(c, OT_COLL_ALLTOALL, OT_OK, t0, 0, dt);
    size_t bytes = count * ot_dtype_size(dt);
    int n = c->size, r = c->rank;
    ot_coll_algo algo = pick(c, OT_COLL_ALLTOALL, bytes, o);
    ot_status st = OT_OK;
    if (algo == OT_ALGO_DIRECT) {
        dptr me;
        st = direct_exchange(c, sendbuf, recvbuf, &me, dl);
        for (int k = 0; st == OT_OK && k < n; k++)
            big_copy((char *)recvbuf + (size_t)k * bytes,
                     (const char *)((dptr *)c->ptrs[k])->src + (size_t)r * bytes, bytes,
                     bytes * (size_t)n);
        stream_fence();
        if (st == OT_OK) st = xbarrier(c, dl);
    } else {
        memcpy((char *)recvbuf + (size_t)r * bytes, (const char *)sendbuf + (size_t)r * bytes,
               bytes);
        for (int k = 1; st == OT_OK && k < n; k++) {
            int to = (r + k) % n, from = mod(r - k, n);
            st = xsendrecv(c, to, (const char *)sendbuf + (size_t)to * bytes, bytes, from,
                           (char *)recvbuf + (size_t)from * bytes, bytes, dl);
        }
    }
    return finish(c, OT_COLL_ALLTOALL, st, t0, count, dt);
}

ot_status ot_comm_barrier(ot_comm *c, const ot_coll_options *o) {
    if (!c) return ot_error(OT_ERR_INVALID_ARGUMENT, "barrier: NULL argument");
    uint64_t dl = 0, t0 = ot_now_ns();
    ot_coll_options oo = o ? *o : ot_coll_options_default();
    oo.algo = OT_ALGO_AUTO;
    OT_CHECK(begin(c, OT_COLL_BARRIER, OT_U8, false, OT_REDOP_SUM, &oo, &dl));
    return finish(c, OT_COLL_BARRIER, xbarrier(c, dl), t0, 0, OT_U8);
}

/* ---- sub-communicators ---------------------------------------------------------------------- */

typedef struct subctx {
    ot_comm *parent;
    int *map; /* sub rank -> parent rank */
    int n;
} subctx;

static ot_status sub_sendrecv(void *ctx, int to, const void *s, size_t sb, int from, void *r,
                              size_t rb, uint64_t dl) {
    subctx *x = ctx;
    return xsendrecv(x->parent, to >= 0 ? x->map[to] : -1, s, sb, from >= 0 ? x->map[from] : -1, r,
                     rb, dl);
}

static ot_status sub_sendrecv_reduce(void *ctx, int to, const void *s, size_t sc, int from, void *r,
                                     size_t rc, ot_dtype dt, ot_redop op, uint64_t dl) {
    subctx *x = ctx;
    return xsendrecv_reduce(x->parent, to >= 0 ? x->map[to] : -1, s, sc,
                            from >= 0 ? x->map[from] : -1, r, rc, dt, op, dl);
}

/* Pointer exchange inside the group: a ring all-gather of the pointer values. */
static ot_status sub_exchange(void *ctx, void *mine, void **all, uint64_t dl) {
    subctx *x = ctx;
    int me = -1;
    for (int i = 0; i < x->n; i++)
        if (x->map[i] == x->parent->rank) me = i;
    all[me] = mine;
    for (int s = 0; s < x->n - 1; s++) {
        int so = mod(me - s, x->n), ro = mod(me - s - 1, x->n);
        OT_CHECK(sub_sendrecv(ctx, mod(me + 1, x->n), &all[so], sizeof(void *), mod(me - 1, x->n),
                              &all[ro], sizeof(void *), dl));
    }
    return OT_OK;
}

static void sub_abort(void *ctx, ot_status why, const char *msg) {
    subctx *x = ctx;
    x->parent->aborted = true;
    if (x->parent->vt->abort) x->parent->vt->abort(x->parent->ctx, why, msg);
}

static void sub_free(void *ctx) {
    subctx *x = ctx;
    if (!x) return;
    ot_free(x->map);
    ot_free(x);
}

static const ot_comm_vtable sub_vt = {
    "group", sub_sendrecv, sub_sendrecv_reduce, sub_exchange, NULL, sub_abort, sub_free};
static const ot_comm_vtable sub_vt_noptr = {
    "group", sub_sendrecv, sub_sendrecv_reduce, NULL, NULL, sub_abort, sub_free};

ot_status ot_comm_split_groups(ot_comm *c, const int *groups, int ngroups, int group_size,
                               ot_comm **out) {
    if (!c || !groups || !out) return ot_error(OT_ERR_INVALID_ARGUMENT, "split: NULL argument");
    *out = NULL;
    if (ngroups < 1 || group_size < 1 || (int64_t)ngroups * group_size != c->size)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "split: %d groups of %d do not cover the %d members", ngroups, group_size,
                        c->size);
    int mine = -1, pos = -1;
    char *seen = ot_calloc((size_t)c->size, 1);
    if (!seen) return ot_error(OT_ERR_OUT_OF_MEMORY, "split: out of memory");
    for (int i = 0; i < c->size; i++) {
        int r = groups[i];
        if (r < 0 || r >= c->size || seen[r]) {
            ot_free(seen);
            return ot_error(OT_ERR_INVALID_ARGUMENT, "split: rank %d is out of range or repeated",
                            r);
        }
        seen[r] = 1;
        if (r == c->rank) mine = i / group_size, pos = i % group_size;
    }
    ot_free(seen);
    subctx *x = ot_calloc(1, sizeof *x);
    int *map = ot_malloc(sizeof(int) * (size_t)group_size);
    if (!x || !map) {
        ot_free(x);
        ot_free(map);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "split: out of memory");
    }
    memcpy(map, groups + (size_t)mine * group_size, sizeof(int) * (size_t)group_size);
    x->parent = c;
    x->map = map;
    x->n = group_size;
    OT_CHECK(
        ot_comm_create(c->vt->exchange_ptrs ? &sub_vt : &sub_vt_noptr, x, pos, group_size, out));
    (*out)->timeout_ns = c->timeout_ns;
    (*out)->cost = c->cost;
    return OT_OK;
}

/* ---- HLO replica_groups --------------------------------------------------------------------- */

ot_status ot_replica_groups_parse(const char *text, size_t len, int nranks, int **groups,
                                  int *ngroups, int *group_size) {
    if (!text || !groups || !ngroups || !group_size)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "replica_groups: NULL argument");
    *groups = NULL;
    if (nranks < 1 || nranks > OT_TOPO_MAX_DEVICES)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "replica_groups: nranks %d", nranks);
    int *g = ot_malloc(sizeof(int) * (size_t)nranks);
    char *seen = ot_calloc((size_t)nranks, 1);
    ot_status st = OT_OK;
    if (!g || !seen) {
        st = ot_error(OT_ERR_OUT_OF_MEMORY, "replica_groups: out of memory");
        goto done;
    }
    size_t i = 0;
#define SKIP()                                                                                     \
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n')) i++
    SKIP();
    if (i >= len || text[i] != '{') {
        st = ot_error(OT_ERR_CORRUPT_DATA, "replica_groups: expected '{' at offset %zu", i);
        goto done;
    }
    i++;
    SKIP();
    int n = 0, ng = 0, gs = -1;
    if (i < len && text[i] == '}') { /* {}: one group of everyone */
        i++;
        for (int r = 0; r < nranks; r++) g[r] = r;
        n = nranks, ng = 1, gs = nranks;
    } else {
        for (;;) {
            SKIP();
            if (i >= len || text[i] != '{') {
                st = ot_error(OT_ERR_CORRUPT_DATA, "replica_groups: expected '{' at offset %zu", i);
                goto done;
            }
            i++;
            int cnt = 0;
            for (;;) {
                SKIP();
                if (i < len && text[i] == '}' && cnt == 0) break;
                long v = 0;
                size_t d0 = i;
                while (i < len && text[i] >= '0' && text[i] <= '9' && v <= nranks)
                    v = v * 10 + (text[i++] - '0');
                if (i == d0) {
                    st = ot_error(OT_ERR_CORRUPT_DATA,
                                  "replica_groups: expected a replica id "
                                  "at offset %zu",
                                  i);
                    goto done;
                }
                if (v >= nranks) {
                    st = ot_error(OT_ERR_OUT_OF_RANGE, "replica_groups: id %ld outside 0..%d", v,
                                  nranks - 1);
                    goto done;
                }
                if (seen[v]) {
                    st = ot_error(OT_ERR_INVALID_ARGUMENT, "replica_groups: id %ld appears twice",
                                  v);
                    goto done;
                }
                seen[v] = 1;
                g[n++] = (int)v;
                cnt++;
                SKIP();
                if (i < len && text[i] == ',') {
                    i++;
                    continue;
                }
                break;
            }
            SKIP();
            if (i >= len || text[i] != '}') {
                st = ot_error(OT_ERR_CORRUPT_DATA, "replica_groups: expected '}' at offset %zu", i);
                goto done;
            }
            i++;
            if (cnt == 0 || (gs >= 0 && cnt != gs)) {
                st = ot_error(OT_ERR_INVALID_ARGUMENT,
                              "replica_groups: group %d has %d ids, others %d", ng, cnt, gs);
                goto done;
            }
            gs = cnt;
            ng++;
            SKIP();
            if (i < len && text[i] == ',') {
                i++;
                continue;
            }
            break;
        }
        SKIP();
        if (i >= len || text[i] != '}') {
            st = ot_error(OT_ERR_CORRUPT_DATA, "replica_groups: expected '}' at offset %zu", i);
            goto done;
        }
        i++;
    }
    SKIP();
#undef SKIP
    if (i != len) {
        st = ot_error(OT_ERR_CORRUPT_DATA, "replica_groups: trailing text at offset %zu", i);
        goto done;
    }
    if (n != nranks) {
        st = ot_error(OT_ERR_INVALID_ARGUMENT, "replica_groups: %d of %d replicas covered", n,
                      nranks);
        goto done;
    }
    *groups = g;
    g = NULL;
    *ngroups = ng;
    *group_size = gs;
done:
    ot_free(g);
    ot_free(seen);
    return st;
}
