/* The fast gather (kernels.h): the reference's gather (src/exec/shape_ops.c) with the index
 * arithmetic hoisted: when the output's offset dims are its trailing dims, output element (b, o) (b
 * over the batch dims, o over the offset dims) is operand element base(b) + off(o), where off(o)
 * walks the offset dims' operand strides (computed once, into scratch) and base(b) sums each start
 * index clamped to [0, dim - slice size] (the reference's clamp) times its operand stride, and for
 * each operand batching dim the matching batch position times its stride. Indices of any integer
 * type (read as the reference's index_value: a u64 above INT64_MAX is huge, not negative),
 * elements of 1, 2, 4 or 8 bytes; anything else is left to the reference. The copies are the same
 * bytes.
 * The start positions are computed first; the batch elements' copies (one block each when the
 * slice is contiguous in the operand) are then split over the pool, each writing its own rows.
 * Offset dims among or before the batch dims (jax.image.resize's nearest gathers, [8, 128, 64, 64]
 * from offset dims {0, 2, 3}): the output is walked as outer elements (its dims before the
 * trailing run of offset dims, batch and offset dims mixed) each copying one inner block (that
 * run) from base(b) plus the outer offset dims' operand offsets, counted from digit to digit.
 * One-element slices (pivot permutations, diagonals, take_along_axis) are copied by gather_one:
 * a run of starts at a time, AVX-512 gathers for 4- and 8-byte elements. */
#include "exec/fast_internal.h"

typedef struct gather_job {
    const int64_t *oo;    /* per offset element: its operand offset from the slice's start */
    const int64_t *bases; /* per batch element: the slice's start in the operand */
    int64_t no, nb;
    size_t es;
    bool contig; /* oo[o] == o: each slice is copied as one block */
    bool v512;   /* one-element slices of 4 or 8 bytes: AVX-512 gathers (gather_one) */
    const char *x;
    char *y;
    /* offset dims among the batch dims: no is the inner block's element count, nb the outer
     * elements'; per outer dim (ndo of them, row-major): its size, its step in the batch
     * elements' linear index (0 for an offset dim) and in the operand (0 for a batch dim) */
    int ndo;
    const int64_t *odims, *bstep, *xstep;
} gather_job;

/* The contiguous slices' copy: slice b, while the slice GATHER_AHEAD_BYTES further along the
 * batch (at least two slices on) is prefetched piece by piece. The slices start at indices the
 * hardware cannot guess (an embedding's token ids), so each slice's first lines would otherwise
 * wait for memory before its stream is recognized: on 8192 rows of 2 KiB taken at random from a
 * 64 MiB table, the copies with the prefetch took 0.75-0.8 of plain memcpy's time. */
#define GATHER_AHEAD_BYTES 4096
#define GATHER_PIECE       1024
static void gather_contig(const gather_job *p, int64_t begin, int64_t end) {
    size_t nbytes = (size_t)p->no * p->es;
    int64_t ahead = (int64_t)(GATHER_AHEAD_BYTES / nbytes);
    ahead = ahead < 2 ? 2 : ahead > 16 ? 16 : ahead;
    for (int64_t b = begin; b < end; b++) {
        const char *src = p->x + (size_t)p->bases[b] * p->es;
        char *dst = p->y + (size_t)b * nbytes;
        const char *next = b + ahead < p->nb ? p->x + (size_t)p->bases[b + ahead] * p->es : NULL;
        for (size_t off = 0; off < nbytes; off += GATHER_PIECE) {
            size_t len = nbytes - off < GATHER_PIECE ? nbytes - off : GATHER_PIECE;
            if (next)
                for (size_t l = 0; l < len; l += 64) __builtin_prefetch(next + off + l);
            memcpy(dst + off, src + off, len);
        }
    }
}

/* Copies n elements of es bytes from x + offsets oo (or one block when contig) to y. */
static void gather_block(const gather_job *p, const char *x, char *y) {
    if (p->contig) {
        memcpy(y, x, (size_t)p->no * p->es);
        return;
    }
    const int64_t *oo = p->oo;
    switch (p->es) {
#define GATHER_BLOCK(UT)                                                                           \
    for (int64_t o = 0; o < p->no; o++)                                                            \
        ((UT *)(void *)y)[o] = ((const UT *)(const void *)x)[oo[o]];                               \
    break;
    case 1: GATHER_BLOCK(uint8_t)
    case 2: GATHER_BLOCK(uint16_t)
    case 4: GATHER_BLOCK(uint32_t)
    default: GATHER_BLOCK(uint64_t)
#undef GATHER_BLOCK
    }
}

/* One-element slices: y[j] = x[ix[j]] for j < n (ix: the slices' starts, x already moved by the
 * outer offset). AVX-512 gathers take eight starts a step; the scalar loop is the same copy for the
 * other widths and CPUs. Where each element was a memcpy call and a digit count, the inverse's
 * pivot gather (64 x 64 x 64 f32) took as long as its LU factorization. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
EX_AVX512 static void gather_one4_avx512(const uint32_t *x, const int64_t *ix, uint32_t *y,
                                         int64_t n) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256i a = _mm512_i64gather_epi32(_mm512_loadu_si512(ix + j), x, 4);
        __m256i b = _mm512_i64gather_epi32(_mm512_loadu_si512(ix + j + 8), x, 4);
        _mm256_storeu_si256((__m256i *)(void *)(y + j), a);
        _mm256_storeu_si256((__m256i *)(void *)(y + j + 8), b);
    }
    for (; j < n; j++) y[j] = x[ix[j]];
}
EX_AVX512 static void gather_one8_avx512(const uint64_t *x, const int64_t *ix, uint64_t *y,
                                         int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512i a = _mm512_i64gather_epi64(_mm512_loadu_si512(ix + j), x, 8);
        _mm512_storeu_si512(y + j, a);
    }
    for (; j < n; j++) y[j] = x[ix[j]];
}
#define GATHER_AVX512 1
#else
#define GATHER_AVX512 0
#endif

static void gather_one(const gather_job *p, const char *x, const int64_t *ix, char *y, int64_t n) {
    switch (p->es) {
#define GATHER_ONE(UT)                                                                             \
    for (int64_t j = 0; j < n; j++) ((UT *)(void *)y)[j] = ((const UT *)(const void *)x)[ix[j]];   \
    return;
    case 1: GATHER_ONE(uint8_t)
    case 2: GATHER_ONE(uint16_t)
    case 4:
#if GATHER_AVX512
        if (p->v512) {
            gather_one4_avx512((const void *)x, ix, (void *)y, n);
            return;
        }
#endif
        GATHER_ONE(uint32_t)
    default:
#if GATHER_AVX512
        if (p->v512) {
            gather_one8_avx512((const void *)x, ix, (void *)y, n);
            return;
        }
#endif
        GATHER_ONE(uint64_t)
#undef GATHER_ONE
    }
}

/* Outer elements [begin, end) of a gather whose offset dims are not all trailing: the digits of
 * begin divided out once, then counted. The last outer dim is the last batch dim (the trailing
 * offset dims are the inner block), so along it the batch index steps by one and the operand
 * offset stays: the outer elements come in runs along it, each run one call that copies the
 * blocks of bases[b], bases[b + 1], ... (one-element blocks: gather_one). */
static void gather_outer(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const gather_job *p = arg;
    int dl = p->ndo - 1;
    int64_t dig[OT_MAX_RANK], b = 0, xo = 0, rest = begin, L = p->odims[dl];
    for (int d = dl; d >= 0; d--) {
        dig[d] = rest % p->odims[d];
        rest /= p->odims[d];
        b += dig[d] * p->bstep[d];
        xo += dig[d] * p->xstep[d];
    }
    size_t nbytes = (size_t)p->no * p->es;
    for (int64_t u = begin; u < end;) {
        int64_t j0 = dig[dl], n = L - j0 < end - u ? L - j0 : end - u;
        const char *x = p->x + (size_t)xo * p->es;
        char *y = p->y + (size_t)u * nbytes;
        if (p->no == 1)
            gather_one(p, x, p->bases + b, y, n);
        else
            for (int64_t j = 0; j < n; j++)
                gather_block(p, x + (size_t)p->bases[b + j] * p->es, y + (size_t)j * nbytes);
        u += n;
        b -= j0; /* back to the run's start, then the digits before the last counted */
        dig[dl] = 0;
        for (int d = dl - 1; d >= 0; d--) {
            b += p->bstep[d];
            xo += p->xstep[d];
            if (++dig[d] < p->odims[d]) break;
            b -= p->odims[d] * p->bstep[d];
            xo -= p->odims[d] * p->xstep[d];
            dig[d] = 0;
        }
    }
}

/* Batch elements [begin, end): each writes its own part of the output. */
static void gather_rows(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const gather_job *p = arg;
    int64_t NO = p->no;
    const int64_t *oo = p->oo;
    const char *x = p->x;
    char *y = p->y;
    if (p->contig && (size_t)NO * p->es >= 64) { /* shorter slices: the typed loop below */
        gather_contig(p, begin, end);
        return;
    }
    if (NO == 1) {
        gather_one(p, x + (size_t)oo[0] * p->es, p->bases + begin, y + (size_t)begin * p->es,
                   end - begin);
        return;
    }
    for (int64_t b = begin; b < end; b++) {
        int64_t base = p->bases[b];
        switch (p->es) {
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
    }
}

/* The slices' starts in the operand, one per batch element (a pass over the indices, split over
 * the pool: each element's start depends on its own indices only). */
typedef struct base_job {
    const ot_gather_dims *g;
    ot_dtype kt;
    const void *k;
    int nbd;
    int64_t ivs;                                  /* the index vector dim's stride */
    int64_t bdim[OT_MAX_RANK], kstr[OT_MAX_RANK]; /* per batch dim: size, indices stride */
    int64_t hi[OT_MAX_RANK], sstr[OT_MAX_RANK];   /* per start index: clamp top, stride */
    int bq[OT_MAX_RANK];                          /* per batching dim: its batch dim */
    int64_t bstr[OT_MAX_RANK];                    /* per batching dim: operand stride */
    int64_t *bases;
} base_job;

/* Start index `at` of the indices, as the reference's index_value reads it. */
static inline int64_t index_at(ot_dtype kt, const void *k, int64_t at) {
    switch (kt) {
    case OT_S32: return ((const int32_t *)k)[at];
    case OT_U32: return ((const uint32_t *)k)[at];
    case OT_S64: return ((const int64_t *)k)[at];
    default: {
        int64_t v = ex_ld_i(kt, k, at);
        return kt == OT_U64 && v < 0 ? INT64_MAX : v; /* huge, not negative */
    }
    }
}

static void gather_bases(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const base_job *p = arg;
    const ot_gather_dims *g = p->g;
    int nbd = p->nbd;
    int64_t bidx[OT_MAX_RANK] = {0};
    for (int64_t q = nbd - 1, r = begin; q >= 0; q--) { /* begin's batch position */
        bidx[q] = r % p->bdim[q];
        r /= p->bdim[q];
    }
    for (int64_t b = begin; b < end; b++) {
        int64_t kb = 0, base = 0;
        for (int q = 0; q < nbd; q++) kb += bidx[q] * p->kstr[q];
        for (int k = 0; k < g->nstart_index_map; k++) {
            int64_t v = index_at(p->kt, p->k, kb + k * p->ivs);
            v = v < 0 ? 0 : v > p->hi[k] ? p->hi[k] : v;
            base += v * p->sstr[k];
        }
        for (int k = 0; k < g->nbatching; k++) base += bidx[p->bq[k]] * p->bstr[k];
        p->bases[b] = base;
        for (int q = nbd - 1; q >= 0 && ++bidx[q] == p->bdim[q]; q--) bidx[q] = 0;
    }
}

/* One batch dim, one start index, no batching dims, the slice the output's trailing dims and
 * under 64 bytes (a table lookup: jnp.take, x[idx], searchsorted's probes, narrow rows): each
 * batch element's start read, clamped and its slice copied in one pass, no table of starts
 * (building it took two thirds of a 4M-element lookup's time, and its 8 bytes per element of
 * scratch). Longer slices keep the table: gather_contig prefetches a later slice's start. */
typedef struct direct_job {
    ot_dtype kt;
    const void *k;
    int64_t kstr, hi, sstr; /* the indices' batch stride; the start's clamp top, operand stride */
    int64_t no;             /* elements per slice (contiguous in the operand) */
    size_t es;
    const char *x;
    char *y;
} direct_job;

static inline __attribute__((always_inline)) void
direct_loop(const direct_job *p, ot_dtype kt, size_t es, int64_t begin, int64_t end) {
    size_t nbytes = (size_t)p->no * es;
    for (int64_t b = begin; b < end; b++) {
        int64_t v = index_at(kt, p->k, b * p->kstr);
        v = v < 0 ? 0 : v > p->hi ? p->hi : v;
        const char *src = p->x + (size_t)(v * p->sstr) * es;
        char *dst = p->y + (size_t)b * nbytes;
        switch (es) { /* one element: a typed copy; a slice: one block */
        case 4:
            if (p->no == 1) {
                memcpy(dst, src, 4);
                break;
            }
            memcpy(dst, src, nbytes);
            break;
        case 8:
            if (p->no == 1) {
                memcpy(dst, src, 8);
                break;
            }
            memcpy(dst, src, nbytes);
            break;
        default: memcpy(dst, src, nbytes); break;
        }
    }
}

static void gather_direct(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    const direct_job *p = arg;
    /* the common index types and element sizes with their loops' types fixed */
    if (p->kt == OT_S32 && p->es == 4)
        direct_loop(p, OT_S32, 4, begin, end);
    else if (p->kt == OT_U32 && p->es == 4)
        direct_loop(p, OT_U32, 4, begin, end);
    else if (p->kt == OT_S32 && p->es == 8)
        direct_loop(p, OT_S32, 8, begin, end);
    else if (p->kt == OT_S64 && p->es == 4)
        direct_loop(p, OT_S64, 4, begin, end);
    else if (p->kt == OT_S64 && p->es == 8)
        direct_loop(p, OT_S64, 8, begin, end);
    else
        direct_loop(p, p->kt, p->es, begin, end);
}

ot_status ex_fast_gather(ex_kernel_ctx *c, const ot_instr *i, void *const *in, const ex_leaf *ins,
                         void *out, const ex_leaf *os, bool *done) {
    const ot_gather_dims *g = i->attrs->gather;
    if (!g) return OT_OK;
    const ot_shape *xs = ins[0].shape, *ks = ins[1].shape, *ys = os->shape;
    ot_dtype kt = ks->dtype;
    size_t es = ot_dtype_size(ys->dtype);
    if (!ot_dtype_is_integer(kt) || xs->dtype != ys->dtype ||
        (es != 1 && es != 2 && es != 4 && es != 8))
        return OT_OK;
    int yr = ys->rank, no = g->noffset, nbd = yr - no;
    if (nbd < 0 || g->nslice_sizes != xs->rank) return OT_OK;
    /* the output's dims: offset dims (isoff, in increasing order) and batch dims; ti: the first
     * of the trailing run of offset dims */
    bool isoff[OT_MAX_RANK] = {false};
    for (int k = 0; k < no; k++) {
        if (g->offset_dims[k] < 0 || g->offset_dims[k] >= yr ||
            (k > 0 && g->offset_dims[k] <= g->offset_dims[k - 1]))
            return OT_OK;
        isoff[g->offset_dims[k]] = true;
    }
    int ti = yr;
    while (ti > 0 && isoff[ti - 1]) ti--;
    int ninner = yr - ti; /* the last ninner offset dims */
    if (ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes) ||
        ex_overlaps(out, os->nbytes, in[1], ins[1].nbytes))
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
    for (int d = 0, q = 0; d < yr; d++)
        if (!isoff[d] && ks->dims[kd[q++]] != ys->dims[d]) return OT_OK;
    int bq[OT_MAX_RANK];
    for (int k = 0; k < g->nbatching; k++) {
        bq[k] = -1;
        for (int q = 0; q < nbd; q++)
            if (kd[q] == g->start_indices_batching_dims[k]) bq[k] = q;
        if (bq[k] < 0) return OT_OK;
    }
    if (g->nstart_index_map > (ivd < ks->rank ? ks->dims[ivd] : 1)) return OT_OK;
    int64_t NO = 1, NB = 1, NI = 1;
    int64_t ydims_b[OT_MAX_RANK]; /* the batch dims' sizes, in order */
    for (int d = 0, q = 0; d < yr; d++) {
        if (isoff[d])
            NO *= ys->dims[d];
        else
            ydims_b[q++] = ys->dims[d];
    }
    for (int q = 0; q < nbd; q++) NB *= ydims_b[q];
    for (int d = ti; d < yr; d++) NI *= ys->dims[d];
    *done = true;
    c->fast_run++;
    if (NO == 0 || NB == 0) return OT_OK;
    if (nbd == 1 && g->nstart_index_map == 1 && g->nbatching == 0 && ninner == no) {
        int64_t od = g->start_index_map[0], off = 1;
        bool contig = true; /* the slice is one run of the operand */
        for (int k = no - 1; k >= 0; k--) {
            contig &= ys->dims[g->offset_dims[k]] == 1 || xstr[offd[k]] == off;
            off *= ys->dims[g->offset_dims[k]];
        }
        if (contig && NO * (int64_t)es < 64) { /* longer slices: gather_contig's prefetch */
            direct_job dj = {kt,       in[1], kstr[kd[0]], xs->dims[od] - g->slice_sizes[od],
                             xstr[od], NO,    es,          in[0],
                             out};
            ex_par_for(c, NB, NB * (NO * (int64_t)es * 2 + (int64_t)ot_dtype_size(kt)),
                       gather_direct, &dj);
            return OT_OK;
        }
    }
    /* the inner block: the trailing run of offset dims (all of them: the slice) */
    int k0 = no - ninner;
    int64_t NIB = ninner == no ? NO : NI;
    int ndo = ninner == no ? 0 : ti;
    int64_t *oo = NULL;
    OT_CHECK(ex_scratch(c, (size_t)(NIB + NB + 3 * ndo) * sizeof *oo, (void **)&oo));
    int64_t *bases = oo + NIB, *odims = bases + NB, *bstep = odims + ndo, *xstep = bstep + ndo;
    int64_t idx[OT_MAX_RANK] = {0};
    bool contig = true; /* the block is one contiguous run of the operand */
    for (int64_t o = 0; o < NIB; o++) {
        int64_t off = 0;
        for (int k = k0; k < no; k++) off += idx[k] * xstr[offd[k]];
        oo[o] = off;
        contig &= off == o;
        for (int k = no - 1; k >= k0 && ++idx[k] == ys->dims[g->offset_dims[k]]; k--) idx[k] = 0;
    }
    base_job bj = {.g = g, .kt = kt, .k = in[1], .nbd = nbd, .bases = bases};
    bj.ivs = ivd < ks->rank ? kstr[ivd] : 0;
    for (int q = 0; q < nbd; q++) {
        bj.bdim[q] = ydims_b[q];
        bj.kstr[q] = kstr[kd[q]];
    }
    for (int k = 0; k < g->nstart_index_map; k++) {
        int64_t od = g->start_index_map[k];
        bj.hi[k] = xs->dims[od] - g->slice_sizes[od];
        bj.sstr[k] = xstr[od];
    }
    for (int k = 0; k < g->nbatching; k++) {
        bj.bq[k] = bq[k];
        bj.bstr[k] = xstr[g->operand_batching_dims[k]];
    }
    int64_t kbytes = NB * (int64_t)ot_dtype_size(kt) * (g->nstart_index_map + 2);
    ex_par_for(c, NB, kbytes, gather_bases, &bj);
    gather_job p = {oo,    bases, NIB, NB,    es,    contig, (es == 4 || es == 8) && ex_avx512(),
                    in[0], out,   ndo, odims, bstep, xstep};
    if (ndo == 0) {
        ex_par_for(c, NB, NB * NO * (int64_t)es * 2, gather_rows, &p);
        return OT_OK;
    }
    /* the outer dims' steps: a batch dim's in the batch elements' row-major index, an offset
     * dim's in the operand */
    int64_t bs = 1;
    for (int d = yr - 1, q = nbd - 1; d >= 0; d--) {
        if (isoff[d]) continue;
        if (d < ti) bstep[d] = bs;
        bs *= ydims_b[q--];
    }
    for (int d = 0, k = 0; d < ti; d++) {
        odims[d] = ys->dims[d];
        if (isoff[d]) {
            bstep[d] = 0;
            xstep[d] = xstr[offd[k++]];
        } else {
            xstep[d] = 0;
        }
    }
    int64_t nout = 1;
    for (int d = 0; d < ti; d++) nout *= ys->dims[d];
    ex_par_for(c, nout, nout * NI * (int64_t)es * 2, gather_outer, &p);
    return OT_OK;
}
