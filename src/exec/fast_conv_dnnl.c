/* The fast convolution through oneDNN (kernels.h; built when CMake finds libdnnl: OT_HAVE_DNNL).
 * f32 convolutions with no negative padding and batch_group_count 1 run as oneDNN's direct
 * convolution (its JIT kernels for the CPU: brgconv / jit:avx512_core ...) in the
 * channels-innermost ("nxc") layout, one of three ways chosen by the shape alone:
 *  - forward: out[n, o, p] = sum_{c, k} x[n, c, p * stride + k * dilation - pad_lo] w[o, c, k],
 *    the HLO convolution itself (a forward convolution, or JAX's input gradient: the kernel's
 *    features swapped and its window reversed, packed here); feature groups (grouped and
 *    depthwise convolutions) as oneDNN's groups;
 *  - input gradient of a strided convolution, where the input is dilated (lhs dilation; window
 *    stride 1): oneDNN's backward-data primitive, stride = the lhs dilation, left padding =
 *    (kernel - 1) * window dilation - pad_lo, the kernel read flipped (a reversed window: as it
 *    lies);
 *  - filter gradient, where the kernel's window is larger than the output (a convolution over
 *    the images, as JAX lowers the gradient of the weights): the HLO convolution read as oneDNN's
 *    backward-weights primitive — oneDNN's images are the HLO lhs's features, its channels the
 *    lhs's batch, its output gradient the HLO kernel, its weight gradient the HLO output.
 * Layouts: operands whose features are innermost are read and written in place. Where the image
 * operand has few features (a first layer: 3 colours) and they are not innermost, it is read as
 * it lies and the other image operand (output, or output gradient) goes through oneDNN's blocked
 * layout (16 features innermost), reordered chunk by chunk while in cache — oneDNN's first-layer
 * kernels. Where neither image operand has its features innermost (NCHW) and both have at least
 * 16, both go through the blocked layout the same way: each chunk's images reordered into
 * per-thread scratch before the call, its results reordered back into place after it, so no
 * pass over the whole arrays (a transpose) precedes or follows the parallel chunks. Other
 * layouts are transposed into nxc scratch (ex_transpose) and the result back.
 * Determinism: every oneDNN call runs on one thread (its OpenMP team set to one
 * thread around the call) over a chunk fixed by the shape — a chunk of the images, or where they
 * are too few to feed the pool a tile of one image's output rows (dn_tile_rows); the chunks are
 * handed out to the pool's threads one at a time (whichever is free: a late worker costs no idle
 * wait). A forward output element is one call's sum; a filter gradient is the chunks' partial sums
 * added in chunk order. So the bits depend on the shape and the CPU's ISA, never on the thread
 * count. Every sum is the reference's terms in another order, as the OpenBLAS path's (fast_conv.c).
 * Where oneDNN offers only its reference or GEMM implementation for a shape, or refuses it,
 * ex_fast_conv runs its own im2col + GEMM path. */
#include "exec/fast_internal.h"

#ifdef OT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define DN_CSR 1 /* subnormals flushed by the FPU's FTZ | DAZ modes during oneDNN's kernels */
#else
#define DN_CSR 0
#endif

/* libgomp's (oneDNN's OpenMP runtime, linked with it): the calling thread's team size */
int omp_get_max_threads(void);
void omp_set_num_threads(int n);

#define DN_CHUNKS 8 /* image chunks per convolution, at most (a divisor of the image count) */
#define DN_TILES  8 /* tiles of output rows per image, at most */
/* multiply-adds per tile of rows, at least: a oneDNN call costs a few microseconds besides */
#define DN_TILE_MACS ((int64_t)1 << 21)
/* output positions per tile of rows, at least: every tile reads all the weights, used once per
 * position (a 7x7x512 -> 512 3x3 layer in 7 tiles of 7 positions ran at 0.7-0.9 of one call) */
#define DN_TILE_POS 32

static dnnl_engine_t g_engine;
static bool g_enabled;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void dn_init(void) {
    const char *e = getenv("OPTITPU_DNNL");
    if (e && !strcmp(e, "0")) return; /* measurement of the im2col + GEMM path */
    g_enabled = dnnl_engine_create(&g_engine, dnnl_cpu, 0) == dnnl_success;
}

enum { DN_NXC, DN_ASIS, DN_BLK };

/* A convolution's oneDNN objects, kept in a process-wide cache keyed by everything they depend
 * on (creating them costs as much as running a small convolution: oneDNN searches its
 * implementations and JIT-compiles). A primitive with a user scratchpad may run on several
 * threads at once (oneDNN's rule), so an entry is shared; users counts the runs holding it, and
 * only an entry nobody holds is replaced. A refusal is kept too (prim NULL).
 * Operand A is oneDNN's src; B its dst (forward) or diff_dst (filter gradient); W its weights or
 * diff_weights. Dims are oneDNN's (N, C, spatial...), N the images of one chunk (mb). */
typedef struct dn_key {
    bool bwdw, bwdd, rev; /* the filter-gradient and input-gradient forms; W packed reversed */
    bool bpart; /* B a part of the output's features (dn_feat_split): computed into dense scratch
                 * (nxc, or blocked under DN_BLK) and reordered into place */
    int ns, amode, bmode; /* amode DN_NXC, DN_ASIS or DN_BLK; bmode DN_NXC or DN_BLK */
    int64_t mb;
    dnnl_dims_t adims, astr; /* A's chunk: dims, element strides (nxc dense, or as A lies) */
    dnnl_dims_t bdims, bstr; /* B's chunk: dims, strides (nxc dense, or as B lies: DN_BLK) */
    int64_t groups;          /* feature groups (forward): W's dims (g, o, i, spatial...) */
    dnnl_dims_t wdims, wstr; /* W as it lies (or packed reversed: dense (o, i, spatial...)) */
    dnnl_dims_t stride, dil, pl, ph;
} dn_key;

typedef struct dn_entry {
    dn_key key;
    uint64_t hash; /* dn_hash(key): compared first */
    bool used;
    _Atomic int users;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_primitive_t wreorder; /* W plain -> oneDNN's (forward), oneDNN's -> plain (filter
                                  gradient); NULL when they are the same layout */
    dnnl_primitive_t breorder; /* DN_BLK: B blocked -> as it lies (forward), or back */
    dnnl_primitive_t areorder; /* DN_BLK: A as it lies -> blocked, or back (input gradient) */
    dnnl_memory_desc_t amd, aio, bmd, bio, wmd, padmd, wplain;
    size_t wbytes, padbytes, ablk, bblk; /* ablk, bblk: one chunk of A, B blocked (DN_BLK) */
} dn_entry;

#define DN_CACHE 256 /* a program's convolutions, each up to 4 (tiles of rows: dn_tile_rows) */
static dn_entry g_cache[DN_CACHE];
static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned g_cache_next;

static void dn_entry_free(dn_entry *e) {
    if (e->breorder) dnnl_primitive_destroy(e->breorder);
    if (e->areorder) dnnl_primitive_destroy(e->areorder);
    if (e->wreorder) dnnl_primitive_destroy(e->wreorder);
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->pd) dnnl_primitive_desc_destroy(e->pd);
    e->areorder = e->breorder = e->wreorder = e->prim = NULL;
    e->pd = NULL;
}

static bool dn_reorder_create(const dnnl_memory_desc_t *smd, const dnnl_memory_desc_t *dmd,
                              dnnl_primitive_t *out) {
    dnnl_primitive_desc_t pd;
    if (dnnl_reorder_primitive_desc_create(&pd, smd, g_engine, dmd, g_engine, NULL) != dnnl_success)
        return false;
    dnnl_status_t st = dnnl_primitive_create(out, pd);
    dnnl_primitive_desc_destroy(pd);
    return st == dnnl_success;
}

/* oneDNN's own kernels only: not its reference loops nor its im2col + GEMM. */
static bool dn_impl_ok(const_dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
        return false;
    return !strstr(impl, "ref") && !strstr(impl, "gemm");
}

/* Whether B is computed into per-thread scratch and reordered into place (e->breorder). */
static bool dn_bstaged(const dn_key *k) {
    return k->bmode == DN_BLK || k->bpart;
}

/* Creates e's objects for e->key on the calling thread with a team of one (as they run); false
 * when oneDNN refuses the convolution or has only its reference or GEMM implementation. */
static bool dn_entry_make(dn_entry *e) {
    const dn_key *k = &e->key;
    int nd = k->ns + 2, wnd = nd + (k->groups > 1);
    static const dnnl_format_tag_t blk[4] = {dnnl_format_tag_undef, dnnl_nCw16c, dnnl_nChw16c,
                                             dnnl_nCdhw16c};
    static const dnnl_format_tag_t nxc[4] = {dnnl_format_tag_undef, dnnl_nwc, dnnl_nhwc,
                                             dnnl_ndhwc};
    bool bst = dn_bstaged(k);
    dnnl_memory_desc_t aprim, bprim, wany;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t fpd = NULL;
    dnnl_convolution_desc_t fd, bd;
    bool ok =
        dnnl_memory_desc_init_by_strides(&e->aio, nd, k->adims, dnnl_f32, k->astr) ==
            dnnl_success &&
        (k->amode != DN_BLK || dnnl_memory_desc_init_by_tag(&aprim, nd, k->adims, dnnl_f32,
                                                            blk[k->ns]) == dnnl_success) &&
        dnnl_memory_desc_init_by_strides(&e->bio, nd, k->bdims, dnnl_f32, k->bstr) ==
            dnnl_success &&
        (!bst || dnnl_memory_desc_init_by_tag(&bprim, nd, k->bdims, dnnl_f32,
                                              k->bmode == DN_BLK ? blk[k->ns] : nxc[k->ns]) ==
                     dnnl_success) &&
        dnnl_memory_desc_init_by_strides(&e->wplain, wnd, k->wdims, dnnl_f32, k->wstr) ==
            dnnl_success &&
        dnnl_memory_desc_init_by_tag(&wany, wnd, k->wdims, dnnl_f32, dnnl_format_tag_any) ==
            dnnl_success &&
        dnnl_primitive_attr_create(&attr) == dnnl_success &&
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && k->amode != DN_BLK) aprim = e->aio;
    if (ok && !bst) bprim = e->bio;
    ok = ok &&
         dnnl_dilated_convolution_forward_desc_init(
             &fd, dnnl_forward_training, dnnl_convolution_direct, &aprim, &wany, NULL, &bprim,
             k->stride, k->dil, k->pl, k->ph) == dnnl_success &&
         dnnl_primitive_desc_create(&fpd, &fd, attr, g_engine, NULL) == dnnl_success;
    if (ok && k->bwdd) {
        ok = dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &aprim,
                                                              &wany, &bprim, k->stride, k->dil,
                                                              k->pl, k->ph) == dnnl_success &&
             dnnl_primitive_desc_create(&e->pd, &bd, attr, g_engine, fpd) == dnnl_success;
    } else if (ok && !k->bwdw) {
        e->pd = fpd;
        fpd = NULL;
    } else if (ok) {
        ok = dnnl_dilated_convolution_backward_weights_desc_init(
                 &bd, dnnl_convolution_direct, &aprim, &wany, NULL, &bprim, k->stride, k->dil,
                 k->pl, k->ph) == dnnl_success &&
             dnnl_primitive_desc_create(&e->pd, &bd, attr, g_engine, fpd) == dnnl_success;
    }
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    ok = ok && dn_impl_ok(e->pd) && dnnl_primitive_create(&e->prim, e->pd) == dnnl_success;
    if (ok) {
        e->amd = *dnnl_primitive_desc_query_md(
            e->pd, k->bwdd ? dnnl_query_diff_src_md : dnnl_query_src_md, 0);
        e->bmd = *dnnl_primitive_desc_query_md(
            e->pd, k->bwdw || k->bwdd ? dnnl_query_diff_dst_md : dnnl_query_dst_md, 0);
        e->wmd = *dnnl_primitive_desc_query_md(
            e->pd, k->bwdw ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
        e->padmd = *dnnl_primitive_desc_query_md(e->pd, dnnl_query_scratchpad_md, 0);
        e->wbytes = ex_align64(dnnl_memory_desc_get_size(&e->wmd));
        e->padbytes = ex_align64(dnnl_memory_desc_get_size(&e->padmd));
        if (e->padbytes == 0) e->padbytes = 64;
        e->ablk = k->amode == DN_BLK ? ex_align64(dnnl_memory_desc_get_size(&e->amd)) : 0;
        e->bblk = bst ? ex_align64(dnnl_memory_desc_get_size(&e->bmd)) : 0;
        if (k->rev || !dnnl_memory_desc_equal(&e->wmd, &e->wplain))
            ok = k->bwdw ? dn_reorder_create(&e->wmd, &e->wplain, &e->wreorder)
                         : dn_reorder_create(&e->wplain, &e->wmd, &e->wreorder);
        if (ok && bst)
            ok = k->bwdw || k->bwdd ? dn_reorder_create(&e->bio, &e->bmd, &e->breorder)
                                    : dn_reorder_create(&e->bmd, &e->bio, &e->breorder);
        if (ok && k->amode == DN_BLK)
            ok = k->bwdd ? dn_reorder_create(&e->amd, &e->aio, &e->areorder)
                         : dn_reorder_create(&e->aio, &e->amd, &e->areorder);
    }
    if (!ok) dn_entry_free(e);
    return ok;
}

/* FNV-1a over the key's bytes. */
static uint64_t dn_hash(const dn_key *key) {
    const unsigned char *b = (const unsigned char *)key;
    uint64_t h = 14695981039346656037ull;
    for (size_t k = 0; k < sizeof *key; k++) h = (h ^ b[k]) * 1099511628211ull;
    return h;
}

/* The entry for key (held: dn_release it), or NULL when oneDNN does not cover the convolution.
 * *own: an entry outside the cache (every slot held), freed by dn_release. */
static dn_entry *dn_acquire(const dn_key *key, bool *own) {
    *own = false;
    uint64_t h = dn_hash(key);
    pthread_mutex_lock(&g_cache_mu);
    for (int k = 0; k < DN_CACHE; k++) {
        dn_entry *e = &g_cache[k];
        if (e->used && e->hash == h && !memcmp(&e->key, key, sizeof *key)) {
            if (e->prim) e->users++;
            pthread_mutex_unlock(&g_cache_mu);
            return e->prim ? e : NULL;
        }
    }
    pthread_mutex_unlock(&g_cache_mu);
    dn_entry made;
    memset(&made, 0, sizeof made);
    memcpy(&made.key, key, sizeof *key); /* padding bytes too: keys compare bytewise */
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    bool ok = dn_entry_make(&made);
    omp_set_num_threads(saved);
    pthread_mutex_lock(&g_cache_mu);
    dn_entry *slot = NULL;
    for (int k = 0; k < DN_CACHE && !slot; k++) {
        dn_entry *e = &g_cache[(g_cache_next + (unsigned)k) % DN_CACHE];
        if (!e->used || e->users == 0) slot = e;
    }
    if (slot) {
        g_cache_next = (unsigned)(slot - g_cache + 1) % DN_CACHE;
        dn_entry_free(slot);
        memcpy(&slot->key, &made.key, sizeof made.key);
        slot->hash = h;
        slot->pd = made.pd, slot->prim = made.prim;
        slot->wreorder = made.wreorder, slot->breorder = made.breorder;
        slot->areorder = made.areorder;
        slot->amd = made.amd, slot->aio = made.aio, slot->bmd = made.bmd, slot->bio = made.bio;
        slot->wmd = made.wmd, slot->padmd = made.padmd, slot->wplain = made.wplain;
        slot->wbytes = made.wbytes, slot->padbytes = made.padbytes;
        slot->ablk = made.ablk, slot->bblk = made.bblk;
        slot->used = true;
        slot->users = ok ? 1 : 0;
    }
    pthread_mutex_unlock(&g_cache_mu);
    if (!ok) return NULL;
    if (slot) return slot;
    dn_entry *e = malloc(sizeof *e);
    if (!e) {
        dn_entry_free(&made);
        return NULL;
    }
    memcpy(e, &made, sizeof made);
    *own = true;
    return e;
}

static void dn_release(dn_entry *e, bool own) {
    if (own) {
        dn_entry_free(e);
        free(e);
    } else {
        e->users--;
    }
}

static dnnl_status_t dn_exec(dnnl_primitive_t prim, int n, dnnl_exec_arg_t *args) {
    dnnl_stream_t s;
    dnnl_status_t st = dnnl_stream_create(&s, g_engine, dnnl_stream_default_flags);
    if (st != dnnl_success) return st;
    st = dnnl_primitive_execute(prim, s, n, args);
    if (st == dnnl_success) st = dnnl_stream_wait(s);
    dnnl_stream_destroy(s);
    return st;
}

/* Memories for the args (md, handle); executes prim on this thread alone (with the FPU's FTZ |
 * DAZ modes under ftz: subnormal inputs and results are zero, as the reference's arithmetic);
 * frees them. */
static dnnl_status_t dn_run(dnnl_primitive_t prim, int n, const int *arg,
                            const dnnl_memory_desc_t *const *md, void *const *h, bool ftz) {
    dnnl_exec_arg_t args[4];
    dnnl_status_t st = dnnl_success;
    int made = 0;
    for (; made < n && st == dnnl_success; made++) {
        args[made].arg = arg[made];
        st = dnnl_memory_create(&args[made].memory, md[made], g_engine, h[made]);
        if (st != dnnl_success) args[made].memory = NULL;
    }
    if (st == dnnl_success) {
        int saved = omp_get_max_threads();
        omp_set_num_threads(1);
#if DN_CSR
        unsigned csr = _mm_getcsr();
        if (ftz) _mm_setcsr(csr | 0x8040u);
#endif
        st = dn_exec(prim, n, args);
#if DN_CSR
        if (ftz) _mm_setcsr(csr);
#endif
        omp_set_num_threads(saved);
    }
    for (int k = 0; k < made; k++)
        if (args[k].memory) dnnl_memory_destroy(args[k].memory);
    return st;
}

static dnnl_status_t dn_copy(dnnl_primitive_t reorder, const dnnl_memory_desc_t *smd,
                             const void *src, const dnnl_memory_desc_t *dmd, void *dst) {
    int args[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
    const dnnl_memory_desc_t *md[2] = {smd, dmd};
    void *h[2] = {(void *)src, dst};
    return dn_run(reorder, 2, args, md, h, false);
}

typedef struct dn_plan {
    const dn_entry *e;            /* te[0]: the weights' layout (every tile's) */
    int64_t nch;                  /* chunks: chunks of the images x ntile */
    int64_t nfeat;                /* parts of the output features per chunk (dn_feat_split) */
    size_t b_featb, w_featb;      /* bytes between parts of B (as passed) and of the weights */
    _Atomic int fdone[DN_CHUNKS]; /* nfeat > 1: each chunk's parts done (its output fusion) */
    const char *wsrc;             /* nfeat > 1: the weights as they lie (or packed reversed), */
    char *wdst;                   /* into oneDNN's layout here, a part every w_featb bytes */
    size_t wsrc_featb;            /* bytes between parts of wsrc */
    bool wself;    /* one chunk: each part's task reorders its own weights first (no pass before) */
    int64_t ntile; /* tiles of output rows per chunk of images (1: whole images) */
    dn_entry *te[DN_TILES];     /* each tile's oneDNN objects */
    bool town[DN_TILES];        /* te[j] outside the cache (dn_release) */
    int64_t arow[DN_TILES];     /* each tile's first row of A (its first spatial dim) */
    int64_t brow[DN_TILES + 1]; /* each tile's first row of B; brow[ntile]: B's rows */
    size_t a_rowb, b_rowb;      /* bytes between rows of A, of B (as passed) */
    /* tiles of A as it lies (DN_ASIS) with its features outside its rows (NCHW): each tile's
     * rows of every feature copied into dense per-thread scratch (acopyb each) */
    bool acopy;
    int64_t ah[DN_TILES], anf; /* each tile's rows of A; A's features */
    size_t a_featb, acopyb;
    char *acp;
    size_t padb, ablkb, bblkb; /* per-thread scratchpad, blocked A, blocked B: the largest */
    /* tiles' output fusion: the output's element strides between images, rows and (where they
     * are outside the rows, else 0) features; the features */
    int64_t epi_img, epi_row, epi_feat, epi_nf;
    size_t a_step, b_step;  /* bytes between chunks of A and B (as passed: in place or nxc) */
    const char *a, *w;      /* A; the weights in oneDNN's layout (forward) */
    char *b;                /* B */
    char *blk;              /* DN_BLK: per-thread B chunk in the blocked layout (e->bblk each) */
    char *ablk;             /* DN_BLK: per-thread A chunk in the blocked layout (e->ablk each) */
    char *part;             /* filter gradient: per-chunk partial sums (e->wbytes each) */
    char *pad;              /* per-thread scratchpads (e->padbytes each) */
    const ex_epilogue *epi; /* output fusion: run on each chunk's output once written (or NULL) */
    int64_t epi_step;       /* output elements per chunk (the output's batch dim outermost) */
    bool ftz;
    _Atomic int failed;
} dn_plan;

/* The output fusion's loop over chunk t's output: a range of the output, or a tile's rows, one
 * range per feature where the features lie outside the rows (NCHW). */
static void dn_epilogue(const dn_plan *p, int64_t t) {
    if (p->ntile == 1) {
        p->epi->fn(p->epi->ctx, t * p->epi_step, (t + 1) * p->epi_step);
        return;
    }
    int64_t g = t / p->ntile, j = t % p->ntile;
    for (int64_t f = 0; f < (p->epi_feat ? p->epi_nf : 1); f++) {
        int64_t b = g * p->epi_img + f * p->epi_feat;
        p->epi->fn(p->epi->ctx, b + p->brow[j] * p->epi_row, b + p->brow[j + 1] * p->epi_row);
    }
}

/* One chunk per item: a chunk of images, or a tile of one image's output rows; times the parts
 * of its output features. */
static void dn_chunks(void *arg, int64_t begin, int64_t end, int ith) {
    dn_plan *p = arg;
    for (int64_t tf = begin; tf < end; tf++) {
        int64_t t = tf / p->nfeat, f = tf % p->nfeat;
        int64_t g = t / p->ntile, j = t % p->ntile;
        const dn_entry *e = p->te[j];
        bool blk = dn_bstaged(&e->key), ablk = e->key.amode == DN_BLK;
        void *pad = p->pad + (size_t)ith * p->padb;
        /* a: written by the input gradient only */
        char *a = (char *)p->a + (size_t)g * p->a_step + (size_t)p->arow[j] * p->a_rowb;
        char *b =
            p->b + (size_t)g * p->b_step + (size_t)p->brow[j] * p->b_rowb + (size_t)f * p->b_featb;
        const char *w = p->w + (size_t)f * p->w_featb;
        char *bk = blk ? p->blk + (size_t)ith * p->bblkb : b;
        char *ak = ablk ? p->ablk + (size_t)ith * p->ablkb : a;
        if (p->acopy) {
            ak = p->acp + (size_t)ith * p->acopyb;
            size_t rb = (size_t)p->ah[j] * p->a_rowb;
            for (int64_t q = 0; q < p->anf; q++)
                memcpy(ak + (size_t)q * rb, a + (size_t)q * p->a_featb, rb);
        }
        dnnl_status_t st = dnnl_success;
        /* the images read, into the blocked layout while in cache */
        if (ablk && !e->key.bwdd) st = dn_copy(e->areorder, &e->aio, a, &e->amd, ak);
        if (st == dnnl_success && blk && e->key.bwdd)
            st = dn_copy(e->breorder, &e->bio, b, &e->bmd, bk);
        if (st != dnnl_success) {
            p->failed = 1;
            continue;
        }
        if (e->key.bwdd) { /* a: the output (diff_src), b: the input (diff_dst) */
            int args[4] = {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST,
                           DNNL_ARG_SCRATCHPAD};
            const dnnl_memory_desc_t *md[4] = {&e->amd, &e->wmd, &e->bmd, &e->padmd};
            void *h[4] = {ak, (void *)w, bk, pad};
            st = dn_run(e->prim, 4, args, md, h, p->ftz);
            if (st == dnnl_success && ablk) st = dn_copy(e->areorder, &e->amd, ak, &e->aio, a);
            if (st == dnnl_success && p->epi) dn_epilogue(p, t);
        } else if (!e->key.bwdw) {
            if (p->wself)
                st = dn_copy(e->wreorder, &e->wplain, p->wsrc + (size_t)f * p->wsrc_featb, &e->wmd,
                             (char *)w);
            int args[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
            const dnnl_memory_desc_t *md[4] = {&e->amd, &e->wmd, &e->bmd, &e->padmd};
            void *h[4] = {ak, (void *)w, bk, pad};
            if (st == dnnl_success) st = dn_run(e->prim, 4, args, md, h, p->ftz);
            if (st == dnnl_success && blk) st = dn_copy(e->breorder, &e->bmd, bk, &e->bio, b);
            /* the output fusion once the chunk's every part is written (by the last of them) */
            if (st == dnnl_success && p->epi &&
                (p->nfeat == 1 || atomic_fetch_add(&p->fdone[t], 1) == p->nfeat - 1))
                dn_epilogue(p, t);
        } else {
            if (blk) st = dn_copy(e->breorder, &e->bio, b, &e->bmd, bk);
            int args[4] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS,
                           DNNL_ARG_SCRATCHPAD};
            const dnnl_memory_desc_t *md[4] = {&e->amd, &e->bmd, &e->wmd, &e->padmd};
            void *h[4] = {ak, bk, p->part + (size_t)t * e->wbytes, pad};
            if (st == dnnl_success) st = dn_run(e->prim, 4, args, md, h, p->ftz);
        }
        if (st != dnnl_success) p->failed = 1;
    }
}

/* part[0] += part[1], += part[2], ... in chunk order, element by element (split over the pool by
 * elements; the same sums whatever the split). */
static void dn_sum(void *arg, int64_t begin, int64_t end, int ith) {
    const dn_plan *p = arg;
    float *d = (float *)p->part;
    for (int64_t k = 1; k < p->nch; k++) {
        const float *s = (const float *)(p->part + (size_t)k * p->e->wbytes);
        for (int64_t q = begin; q < end; q++) d[q] += s[q];
    }
}

static int64_t dn_nchunks(int64_t n) {
    for (int64_t k = DN_CHUNKS; k > 1; k--)
        if (n % k == 0) return k;
    return 1;
}

/* Fewer than DN_CHUNKS chunks of images (DN_CHUNKS does not divide the image count: a batch of 1,
 * 2, 3, 5, 7, 12, ... images), so that the pool has work and its threads equal shares: one image
 * per chunk, and where the images are fewer than DN_CHUNKS, each image's B (the output, or the
 * filter gradient's output gradient) cut into tiles of rows of its first spatial dim. Tile j is a
 * convolution of its own: B's rows [brow[j], brow[j + 1]) from A's rows [arow[j], arow[j] + ah[j]),
 * padded by pl[j] and ph[j] (what of the window's reach lies outside A). ih, oh: A's and B's rows;
 * kh: the kernel's extent along that dim; rowpos: B's positions per row; macs: the convolution's
 * multiply-adds. Sets p->nch
 * (chunks of images), p->ntile, p->arow, p->brow and key->mb; the shape alone decides. */
static void dn_tile_rows(dn_key *key, dn_plan *p, int64_t nimg, int64_t ih, int64_t oh, int64_t kh,
                         int64_t rowpos, int64_t macs, int64_t *ah, int64_t *pl, int64_t *ph) {
    int64_t nt = 1;
    if (!key->bwdd && p->nch < DN_CHUNKS) {
        p->nch = nimg;
        key->mb = 1;
        nt = (DN_CHUNKS + nimg - 1) / nimg;
        if (nt > macs / nimg / DN_TILE_MACS) nt = macs / nimg / DN_TILE_MACS;
        if (nt > oh * rowpos / DN_TILE_POS) nt = oh * rowpos / DN_TILE_POS;
        if (nt > oh) nt = oh;
        if (nt < 1) nt = 1;
    }
    int64_t rows = (oh + nt - 1) / nt, s = key->stride[0], d = key->dil[0] + 1;
    nt = (oh + rows - 1) / rows;
    for (int64_t j = 0; j < nt && nt > 1; j++) {
        int64_t r0 = j * rows, r1 = r0 + rows < oh ? r0 + rows : oh;
        int64_t lo = r0 * s - key->pl[0], hi = (r1 - 1) * s - key->pl[0] + (kh - 1) * d + 1;
        int64_t ilo = lo > 0 ? lo : 0, ihi = hi < ih ? hi : ih;
        if (ihi - ilo < 1) nt = 1; /* a tile all padding: whole images */
        p->arow[j] = ilo, p->brow[j] = r0;
        ah[j] = ihi - ilo, pl[j] = ilo - lo, ph[j] = hi - ihi;
    }
    if (nt == 1) {
        p->arow[0] = p->brow[0] = 0;
        ah[0] = ih, pl[0] = key->pl[0], ph[0] = key->ph[0];
    }
    p->brow[nt] = oh;
    p->ntile = nt;
}

/* Where the chunks of images times tiles of rows (tasks) are fewer than DN_CHUNKS — few images
 * with few output positions, a late layer at batch 1 (7x7 positions: one tile, since every tile
 * reads all the weights) — the output features (nf of them) cut into parts, up to DN_CHUNKS in
 * all, each a whole multiple of 16 features and at least DN_TILE_MACS multiply-adds: a
 * convolution of its own over the same input with its part of the weights (each task reads 1 /
 * parts of the weights, which dominate such a layer's memory traffic). The forward form without
 * feature groups. The parts (1: none); the shape alone decides. */
static int64_t dn_feat_split(const dn_key *key, int64_t tasks, int64_t nf, int64_t macs) {
    if (key->bwdw || key->bwdd || key->groups > 1 || tasks >= DN_CHUNKS) return 1;
    int64_t parts = (DN_CHUNKS + tasks - 1) / tasks;
    if (parts > macs / tasks / DN_TILE_MACS) parts = macs / tasks / DN_TILE_MACS;
    while (parts > 1 && nf % (parts * 16)) parts--;
    return parts > 1 ? parts : 1;
}

/* The weights of parts [begin, end) of the output features into oneDNN's layout. */
static void dn_wparts(void *arg, int64_t begin, int64_t end, int ith) {
    (void)ith;
    dn_plan *p = arg;
    for (int64_t f = begin; f < end; f++)
        if (dn_copy(p->e->wreorder, &p->e->wplain, p->wsrc + (size_t)f * p->wsrc_featb, &p->e->wmd,
                    p->wdst + (size_t)f * p->w_featb) != dnnl_success)
            p->failed = 1;
}

static void dn_release_tiles(dn_plan *p) {
    for (int64_t j = 0; j < p->ntile; j++)
        if (p->te[j]) dn_release(p->te[j], p->town[j]);
    memset(p->te, 0, sizeof p->te);
}

/* Every tile's entry (p->te) for key with tile j's rows (dn_tile_rows; key itself where there is
 * one tile); false, holding none, where oneDNN does not cover one of them or their weights'
 * layouts differ. A tile of one image in the nxc layout is dense: its image stride says so. */
static bool dn_acquire_tiles(const dn_key *key, dn_plan *p, const int64_t *ah, const int64_t *pl,
                             const int64_t *ph) {
    for (int64_t j = 0; j < p->ntile; j++) {
        dn_key k;
        memcpy(&k, key, sizeof k); /* padding bytes too: keys compare bytewise */
        if (p->ntile > 1) {
            k.adims[2] = ah[j];
            k.bdims[2] = p->brow[j + 1] - p->brow[j];
            k.pl[0] = pl[j];
            k.ph[0] = ph[j];
            if (k.amode == DN_NXC) k.astr[0] = k.adims[2] * k.astr[2];
            if (k.bmode == DN_NXC) k.bstr[0] = k.bdims[2] * k.bstr[2];
            if (p->acopy) { /* the tile's dense copy */
                k.astr[1] = k.adims[2] * k.astr[2];
                k.astr[0] = k.adims[1] * k.astr[1];
            }
        }
        p->te[j] = dn_acquire(&k, &p->town[j]);
        if (!p->te[j] || !dnnl_memory_desc_equal(&p->te[j]->wmd, &p->te[0]->wmd)) {
            dn_release_tiles(p);
            return false;
        }
    }
    return true;
}

/* One image operand: oneDNN dims (N, C, spatial...) = dims map[] of an array of shape s (element
 * strides st); order[]: the array's dims in nxc memory order (N, spatial..., C); tr: that is not
 * the array's own order. */
typedef struct dn_arr {
    int nd;
    dnnl_dims_t dims, as; /* dims; strides as the array lies */
    dnnl_dims_t nxc;      /* strides of the dense nxc layout */
    int64_t order[OT_MAX_RANK];
    bool tr;
    size_t bytes;
} dn_arr;

static void dn_arr_init(dn_arr *a, const ot_shape *s, const int64_t *map, int ns) {
    int64_t st[OT_MAX_RANK];
    ot_shape_strides(s, st);
    a->nd = ns + 2;
    for (int k = 0; k < a->nd; k++) {
        a->dims[k] = s->dims[map[k]];
        a->as[k] = st[map[k]];
    }
    a->order[0] = map[0];
    for (int k = 0; k < ns; k++) a->order[1 + k] = map[2 + k];
    a->order[ns + 1] = map[1];
    a->tr = false;
    for (int k = 0; k < a->nd; k++) a->tr |= a->order[k] != k;
    a->nxc[1] = 1;
    int64_t acc = a->dims[1];
    for (int k = ns - 1; k >= 0; k--) {
        a->nxc[2 + k] = acc;
        acc *= a->dims[2 + k];
    }
    a->nxc[0] = acc;
    a->bytes = (size_t)(acc * a->dims[0]) * 4;
}

/* Into nxc scratch from the array x of shape s. */
static void dn_to_nxc(ex_kernel_ctx *c, const dn_arr *a, const ot_shape *s, const void *x,
                      void *dst) {
    ex_transpose(c, 4, s->rank, s->dims, a->order, x, dst);
}

/* From nxc scratch back into the array y of shape s. */
static void dn_from_nxc(ex_kernel_ctx *c, const dn_arr *a, const ot_shape *s, const void *src,
                        void *y) {
    int64_t nd[OT_MAX_RANK], perm[OT_MAX_RANK];
    for (int j = 0; j < a->nd; j++) {
        nd[j] = s->dims[a->order[j]];
        perm[a->order[j]] = j;
    }
    ex_transpose(c, 4, a->nd, nd, perm, src, y);
}

ot_status ex_fast_conv_dnnl(ex_kernel_ctx *c, const ot_instr *i, void *const *in,
                            const ex_leaf *ins, void *out, const ex_leaf *os, bool *done) {
    const ot_conv_dims *cd = i->attrs->conv;
    const ot_window *w = i->attrs->window;
    const ot_shape *ls = ins[0].shape, *rs = ins[1].shape, *osh = os->shape;
    int ns = cd->nspatial;
    if (osh->dtype != OT_F32 || ls->dtype != OT_F32 || rs->dtype != OT_F32) return OT_OK;
    if (ns < 1 || ns > 3 || (w && w->rank != ns)) return OT_OK;
    int64_t groups = i->attrs->feature_group_count > 1 ? i->attrs->feature_group_count : 1;
    if (i->attrs->batch_group_count > 1) return OT_OK;
    pthread_once(&g_once, dn_init);
    if (!g_enabled) return OT_OK;
    int64_t nout = ot_shape_numel_unchecked(osh);
    if (nout == 0 || ot_shape_numel_unchecked(ls) == 0 || ot_shape_numel_unchecked(rs) == 0)
        return OT_OK; /* empty sums: the own path */
    if (ex_overlaps(out, os->nbytes, in[0], ins[0].nbytes) ||
        ex_overlaps(out, os->nbytes, in[1], ins[1].nbytes))
        return OT_OK;
    dn_key key;
    memset(&key, 0, sizeof key); /* compared bytewise */
    key.ns = ns;
    int64_t wsz = 1, osz = 1, stride[OT_MAX_RANK], dil[OT_MAX_RANK], bdil[OT_MAX_RANK];
    bool flip[OT_MAX_RANK];
    for (int s = 0; s < ns; s++) {
        const ot_window_dim *wd = w ? &w->dims[s] : NULL;
        bdil[s] = wd && wd->base_dilation ? wd->base_dilation : 1;
        key.bwdd |= bdil[s] > 1;
    }
    for (int s = 0; s < ns; s++) {
        const ot_window_dim *wd = w ? &w->dims[s] : NULL;
        if (wd && (wd->pad_lo < 0 || wd->pad_hi < 0)) return OT_OK;
        /* the input-gradient form reads the kernel flipped (W[k] = R[K - 1 - k]) */
        flip[s] = (wd && wd->reversal) != key.bwdd;
        key.rev |= flip[s];
        stride[s] = wd && wd->stride ? wd->stride : 1;
        dil[s] = wd && wd->window_dilation ? wd->window_dilation : 1;
        key.pl[s] = wd ? wd->pad_lo : 0;
        key.ph[s] = wd ? wd->pad_hi : 0;
        wsz *= rs->dims[cd->kernel_spatial[s]];
        osz *= osh->dims[cd->output_spatial[s]];
    }
    /* the filter-gradient form where the window is larger than the output (shape only) */
    key.bwdw = !key.bwdd && !key.rev && wsz > osz;
    if (groups > 1 && (key.bwdw || key.bwdd || rs->dims[cd->kernel_output_feature] % groups))
        return OT_OK;
    key.groups = groups;
    int64_t amap[OT_MAX_RANK], bmap[OT_MAX_RANK], wmap[OT_MAX_RANK];
    const ot_shape *bs, *wsh;
    if (key.bwdd) { /* diff_src = out (b, f), diff_dst = lhs (b, f), weights = rhs (i, o):
                     * out[i] = sum lhs[y] W[k] over y * bd = i + k * wdil - pad_lo in range */
        amap[0] = cd->output_batch, amap[1] = cd->output_feature;
        bmap[0] = cd->input_batch, bmap[1] = cd->input_feature;
        wmap[0] = cd->kernel_input_feature, wmap[1] = cd->kernel_output_feature;
        for (int s = 0; s < ns; s++) {
            amap[2 + s] = cd->output_spatial[s];
            bmap[2 + s] = cd->input_spatial[s];
            wmap[2 + s] = cd->kernel_spatial[s];
            int64_t K = rs->dims[cd->kernel_spatial[s]], I = ls->dims[cd->input_spatial[s]];
            int64_t Io = osh->dims[cd->output_spatial[s]];
            if (stride[s] != 1) return OT_OK;
            key.stride[s] = bdil[s];
            key.dil[s] = dil[s] - 1;
            key.pl[s] = (K - 1) * dil[s] - key.pl[s];
            key.ph[s] = (I - 1) * bdil[s] + (K - 1) * dil[s] + 1 - Io - key.pl[s];
            if (key.pl[s] < 0 || key.ph[s] < 0) return OT_OK;
        }
        bs = ls, wsh = rs;
    } else if (!key.bwdw) { /* src = lhs (b, f), dst = out (b, f), weights = rhs (o, i) */
        amap[0] = cd->input_batch, amap[1] = cd->input_feature;
        bmap[0] = cd->output_batch, bmap[1] = cd->output_feature;
        wmap[0] = cd->kernel_output_feature, wmap[1] = cd->kernel_input_feature;
        for (int s = 0; s < ns; s++) {
            amap[2 + s] = cd->input_spatial[s];
            bmap[2 + s] = cd->output_spatial[s];
            wmap[2 + s] = cd->kernel_spatial[s];
            key.stride[s] = stride[s];
            key.dil[s] = dil[s] - 1;
        }
        bs = osh, wsh = rs;
    } else { /* src = lhs (f, b), diff_dst = rhs (i, o), diff_weights = out (f, b) */
        amap[0] = cd->input_feature, amap[1] = cd->input_batch;
        bmap[0] = cd->kernel_input_feature, bmap[1] = cd->kernel_output_feature;
        wmap[0] = cd->output_feature, wmap[1] = cd->output_batch;
        for (int s = 0; s < ns; s++) {
            amap[2 + s] = cd->input_spatial[s];
            bmap[2 + s] = cd->kernel_spatial[s];
            wmap[2 + s] = cd->output_spatial[s];
            key.stride[s] = dil[s];
            key.dil[s] = stride[s] - 1;
        }
        bs = rs, wsh = osh;
    }
    dn_arr A, B;
    dn_arr_init(&A, key.bwdd ? osh : ls, amap, ns);
    dn_arr_init(&B, bs, bmap, ns);
    dn_plan p;
    memset(&p, 0, sizeof p);
    p.nch = dn_nchunks(A.dims[0]);
    key.mb = A.dims[0] / p.nch;
    int64_t nch0 = p.nch, mb0 = key.mb;
    /* the weights as they lie (a strided view of the rhs / the output), or packed reversed into
     * dense (o, i, spatial...) */
    int64_t hstr[OT_MAX_RANK];
    ot_shape_strides(wsh, hstr);
    int64_t acc = 1, wd[OT_MAX_RANK] = {0};
    for (int k = ns + 1; k >= 0; k--) {
        wd[k] = wsh->dims[wmap[k]];
        key.wstr[k] = key.rev ? acc : hstr[wmap[k]];
        acc *= wd[k];
    }
    memcpy(key.wdims, wd, sizeof wd);
    if (groups > 1) { /* o = g * (O / groups) + o' */
        memmove(key.wdims + 1, key.wdims, (size_t)(ns + 2) * sizeof key.wdims[0]);
        memmove(key.wstr + 1, key.wstr, (size_t)(ns + 2) * sizeof key.wstr[0]);
        key.wdims[0] = groups;
        key.wdims[1] /= groups;
        key.wstr[0] = key.wdims[1] * key.wstr[1];
    }
    /* the layouts tried, in order: A as it lies with B blocked where A is not nxc and has few
     * features (a first layer); both blocked where neither is nxc (NCHW: each chunk reordered
     * while in cache, no transpose of the whole arrays); both nxc */
    int modes[3][2] = {{DN_ASIS, DN_BLK}, {DN_BLK, DN_BLK}, {DN_NXC, DN_NXC}};
    int m0 = !key.bwdd && A.tr && A.dims[1] < 16                  ? 0
             : A.tr && B.tr && A.dims[1] >= 16 && B.dims[1] >= 16 ? 1
                                                                  : 2;
    /* the multiply-adds: B's elements x A's features per group x the kernel's positions */
    int64_t macs = A.dims[1] / groups;
    for (int k = 0; k < ns + 2; k++) macs *= B.dims[k] * (k >= 2 ? wd[k] : 1);
    int64_t tah[DN_TILES], tpl[DN_TILES], tph[DN_TILES];
    int64_t rowpos = 1;
    for (int k = 3; k < ns + 2; k++) rowpos *= B.dims[k];
    dn_tile_rows(&key, &p, A.dims[0], A.dims[2], B.dims[2], wd[2], rowpos, macs, tah, tpl, tph);
    /* per layout, the tiles, else (a tile refused) whole images */
    int64_t nf0 = dn_feat_split(&key, p.nch * p.ntile, B.dims[1], macs);
    int64_t ntile0 = p.ntile, ncht = p.nch, mbt = key.mb, brow1 = p.brow[1];
    dn_entry *e = NULL;
    for (int m = m0; m < 3 && !e; m++) {
        if (m == 1 && m0 != 1) continue;
        for (int tiled = ntile0 > 1 || ncht != nch0 || nf0 > 1; tiled >= 0 && !e; tiled--) {
            p.ntile = tiled ? ntile0 : 1;
            p.nfeat = tiled ? nf0 : 1;
            key.bpart = p.nfeat > 1;
            p.nch = tiled ? ncht : nch0;
            key.mb = tiled ? mbt : mb0;
            p.brow[1] = tiled ? brow1 : B.dims[2];
            key.amode = modes[m][0];
            key.bmode = modes[m][1];
            memcpy(key.adims, A.dims, sizeof key.adims);
            memcpy(key.bdims, B.dims, sizeof key.bdims);
            key.adims[0] = key.bdims[0] = key.mb;
            key.bdims[1] = B.dims[1] / p.nfeat;
            if (groups == 1) key.wdims[0] = wd[0] / p.nfeat;
            memcpy(key.astr, key.amode == DN_NXC ? A.nxc : A.as, sizeof key.astr);
            memcpy(key.bstr, key.bmode == DN_BLK ? B.as : B.nxc, sizeof key.bstr);
            p.acopy = p.ntile > 1 && key.amode == DN_ASIS && A.as[0] == A.dims[1] * A.as[1] &&
                      A.as[1] == A.dims[2] * A.as[2];
            if (dn_acquire_tiles(&key, &p, tah, tpl, tph)) e = p.te[0];
        }
    }
    if (!e) return OT_OK; /* the own path */
    *done = true;
    p.e = e;
    p.ftz = c->ftz;
    for (int64_t j = 0; j < p.ntile; j++) {
        const dn_entry *t = p.te[j];
        size_t cb = p.acopy ? ex_align64((size_t)(A.dims[1] * tah[j] * A.as[2]) * 4) : 0;
        p.ah[j] = tah[j];
        if (cb > p.acopyb) p.acopyb = cb;
        if (t->padbytes > p.padb) p.padb = t->padbytes;
        if (t->ablk > p.ablkb) p.ablkb = t->ablk;
        if (t->bblk > p.bblkb) p.bblkb = t->bblk;
    }
    p.nch *= p.ntile;
    bool atr = key.amode == DN_NXC && A.tr, btr = key.bmode == DN_NXC && B.tr;
    size_t abytes = atr ? ex_align64(A.bytes) : 0, bbytes = btr ? ex_align64(B.bytes) : 0;
    size_t packb = key.rev ? ex_align64((size_t)ot_shape_numel_unchecked(rs) * 4) : 0;
    size_t wbytes = key.bwdw      ? e->wbytes * (size_t)p.nch
                    : e->wreorder ? e->wbytes * (size_t)p.nfeat
                                  : 0;
    size_t nch = (size_t)p.nch;
    int64_t work = (int64_t)(A.bytes + B.bytes) * 4; /* the inline decision */
    size_t nth = (size_t)ex_par_threads(c, work);    /* per-thread scratch */
    void *sp = NULL;
    ot_status st = ex_scratch(
        c, abytes + bbytes + packb + wbytes + (p.padb + p.ablkb + p.bblkb + p.acopyb) * nth, &sp);
    if (st != OT_OK) {
        dn_release_tiles(&p);
        return st;
    }
    char *at = sp, *bt = at + abytes, *pk = bt + bbytes, *wb = pk + packb;
    p.pad = wb + wbytes;
    p.blk = p.pad + p.padb * nth;
    p.ablk = p.blk + p.bblkb * nth;
    p.acp = p.ablk + p.ablkb * nth;
    p.anf = A.dims[1];
    p.a_featb = (size_t)A.as[1] * 4;
    p.a_step = (size_t)(key.mb * key.astr[0]) * 4;
    p.b_step = (size_t)(key.mb * key.bstr[0]) * 4;
    p.a_rowb = (size_t)key.astr[2] * 4;
    p.b_rowb = (size_t)key.bstr[2] * 4;
    p.b_featb = (size_t)(key.bdims[1] * key.bstr[1]) * 4;
    p.wsrc_featb = (size_t)(key.wdims[0] * key.wstr[0]) * 4;
    p.w_featb = e->wreorder ? e->wbytes : p.wsrc_featb;
    p.a = in[0];
    if (atr && !key.bwdd) {
        dn_to_nxc(c, &A, ls, in[0], at);
        p.a = at;
    }
    dnnl_status_t ds = dnnl_success;
    if (!key.bwdw) {
        const void *wsrc = in[1];
        if (key.rev) { /* pk[o, i, k...] = rhs[o, i, reversed k...] */
            /* in pk's order, the rhs offset kept by steps (backwards along a reversed dim): no
             * division per element (JAX's input gradients all come this way) */
            int nd = ns + 2;
            int64_t nw = ot_shape_numel_unchecked(rs), step[OT_MAX_RANK], idx[OT_MAX_RANK] = {0};
            int64_t off = 0;
            for (int d = 0; d < nd; d++) {
                bool f = d >= 2 && flip[d - 2];
                step[d] = f ? -hstr[wmap[d]] : hstr[wmap[d]];
                if (f) off += (wd[d] - 1) * hstr[wmap[d]];
            }
            const float *src = in[1];
            float *dst = (float *)pk;
            int64_t inner = wd[nd - 1], is = step[nd - 1];
            for (int64_t q = 0; q < nw; q += inner) {
                for (int64_t j = 0; j < inner; j++) dst[q + j] = src[off + j * is];
                for (int d = nd - 2; d >= 0; d--) {
                    off += step[d];
                    if (++idx[d] < wd[d]) break;
                    off -= step[d] * wd[d];
                    idx[d] = 0;
                }
            }
            wsrc = pk;
        }
        p.w = wsrc;
        if (e->wreorder && p.nfeat > 1) { /* the parts' weights by the pool */
            p.wsrc = wsrc;
            p.wdst = wb;
            /* one chunk: each part's weights reordered by its own task, right before its
             * convolution reads them (in cache; one pass over the pool instead of two) */
            p.wself = p.nch == 1;
            if (!p.wself)
                ex_par_for_dynamic(c, p.nfeat, (int64_t)(e->wbytes * 2 * (size_t)p.nfeat),
                                   dn_wparts, &p);
            if (p.failed) ds = dnnl_runtime_error;
            p.w = wb;
        } else if (e->wreorder) {
            ds = dn_copy(e->wreorder, &e->wplain, wsrc, &e->wmd, wb);
            p.w = wb;
        }
        if (key.bwdd) { /* A the output, B the input */
            p.a = atr ? at : out;
            p.b = in[0];
            if (btr) {
                dn_to_nxc(c, &B, ls, in[0], bt);
                p.b = bt;
            }
        } else {
            p.b = btr ? bt : out;
        }
        /* output fusion: the caller's loop over each chunk's output as soon as it is final (in
         * place, the images outermost: a chunk is a range of the output; on x86 no flush
         * follows) */
        /* a tile's rows: a range of the output where they are outermost in an image, one per
         * feature where the features are and the rows next (NCHW) */
        bool rows_out = B.as[2] * B.dims[2] == B.as[0];
        bool feat_out = B.as[1] * B.dims[1] == B.as[0] && B.as[2] * B.dims[2] == B.as[1];
        if (DN_CSR && c->epilogue && cd->output_batch == 0 && !(key.bwdd ? atr : btr) &&
            (p.ntile == 1 || rows_out || feat_out)) {
            p.epi = c->epilogue;
            p.epi_step = nout / p.nch;
            p.epi_img = B.as[0];
            p.epi_row = B.as[2];
            p.epi_feat = rows_out ? 0 : B.as[1];
            p.epi_nf = B.dims[1];
        }
        if (ds == dnnl_success) {
            ex_par_for_dynamic(c, p.nch * p.nfeat, work, dn_chunks, &p);
            if (p.failed) ds = dnnl_runtime_error;
        }
        c->epilogue_done = p.epi != NULL && ds == dnnl_success;
        if (ds == dnnl_success && btr && !key.bwdd) dn_from_nxc(c, &B, osh, bt, out);
        if (ds == dnnl_success && atr && key.bwdd) dn_from_nxc(c, &A, osh, at, out);
    } else {
        p.b = in[1];
        if (btr) {
            dn_to_nxc(c, &B, rs, in[1], bt);
            p.b = bt;
        }
        p.part = wb;
        ex_par_for_dynamic(c, p.nch, work, dn_chunks, &p);
        if (p.failed) ds = dnnl_runtime_error;
        if (ds == dnnl_success && p.nch > 1)
            ex_par_for(c, (int64_t)(e->wbytes / 4), (int64_t)(e->wbytes * nch), dn_sum, &p);
        if (ds == dnnl_success && e->wreorder)
            ds = dn_copy(e->wreorder, &e->wmd, wb, &e->wplain, out);
        else if (ds == dnnl_success)
            memcpy(out, wb, (size_t)os->nbytes);
        /* the chunks' sum: its subnormals flushed as the reference's adds would */
        if (ds == dnnl_success && c->ftz && p.nch > 1) ex_flush_out(OT_F32, out, nout);
    }
    dn_release_tiles(&p);
    if (ds != dnnl_success)
        return ot_error(OT_ERR_INTERNAL, "convolution: oneDNN failed (status %d)", (int)ds);
#if !DN_CSR
    if (c->ftz) ex_flush_out(OT_F32, out, nout);
#endif
    c->fast_run++;
    return OT_OK;
}
#endif
