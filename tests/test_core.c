/* Core: status, dtypes (f16/bf16 over all bit patterns), shapes, tensors, allocation failure
 * injection, arena, thread pool, SHA-256 (NIST vectors), the internal string builder and
 * whole-buffer fd I/O. */
#include "ot_test.h"

#include <errno.h>
#include <stdatomic.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "core/core_util.h"
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

static void test_status_names(void) {
    EXPECT_STR_EQ(ot_status_str(OT_OK), "OK");
    EXPECT_STR_EQ(ot_status_str(OT_ERR_CORRUPT_DATA), "CORRUPT_DATA");
    EXPECT_STR_EQ(ot_status_str(OT_ERR_OUT_OF_RANGE), "OUT_OF_RANGE");
    EXPECT_STR_EQ(ot_status_str(OT_ERR_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
    EXPECT_STR_EQ(ot_status_str((ot_status)-999), "UNKNOWN_STATUS");
    EXPECT_STR_EQ(ot_status_str((ot_status)5), "UNKNOWN_STATUS");
    EXPECT_INT_EQ(ot_error(OT_ERR_IO, "open %s", "x.bin"), OT_ERR_IO);
    EXPECT_STR_EQ(ot_last_error(), "IO: open x.bin");
    ot_error_wrap(OT_ERR_IO, "loading %d", 3);
    EXPECT_STR_EQ(ot_last_error(), "IO: loading 3: open x.bin");
    /* a saved message raised again keeps a single code prefix */
    char saved[128];
    snprintf(saved, sizeof saved, "%s", ot_last_error());
    EXPECT_INT_EQ(ot_error(OT_ERR_IO, "%s", saved), OT_ERR_IO);
    EXPECT_STR_EQ(ot_last_error(), "IO: loading 3: open x.bin");
    ot_error(OT_ERR_CORRUPT_DATA, "%s", saved); /* another code: both stay */
    EXPECT_STR_EQ(ot_last_error(), "CORRUPT_DATA: IO: loading 3: open x.bin");
    ot_clear_error();
    EXPECT_STR_EQ(ot_last_error(), "");
}

static void test_dtype_table(void) {
    for (int i = 0; i < OT_DTYPE_COUNT; i++) {
        const char *n = ot_dtype_name((ot_dtype)i);
        EXPECT_INT_EQ(ot_dtype_from_name(n, strlen(n)), i);
        EXPECT_TRUE(ot_dtype_size((ot_dtype)i) > 0);
    }
    EXPECT_INT_EQ(ot_dtype_size(OT_BF16), 2);
    EXPECT_INT_EQ(ot_dtype_size(OT_S64), 8);
    EXPECT_INT_EQ(ot_dtype_from_name("f32x", 4), OT_DTYPE_INVALID);
    EXPECT_INT_EQ(ot_dtype_from_name("f32x", 3), OT_F32);
    EXPECT_INT_EQ(ot_dtype_size(OT_DTYPE_INVALID), 0);
    EXPECT_TRUE(ot_dtype_is_float(OT_BF16) && !ot_dtype_is_float(OT_S32));
}

#if defined(__FLT16_MAX__) /* only the _Float16 cross-check needs it */
static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
#endif
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Every f16 bit pattern widens exactly and narrows back to itself; NaNs stay NaNs. Every
 * rounding boundary (midpoints between neighbours, and one f32 ulp either side) rounds as the
 * compiler's own _Float16 conversion does (round-to-nearest-even). The same with the CPU's FTZ
 * and DAZ modes set (x86), under which native code and the fast kernels convert (core/half.h). */
static int f16_patterns_bad(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ot_f16_to_f32((uint16_t)h);
        bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (is_nan) {
            if (f == f || (ot_f32_to_f16(f) & 0x7fff) <= 0x7c00) bad++;
            continue;
        }
        if (ot_f32_to_f16(f) != h) bad++;
#if defined(__FLT16_MAX__)
        if ((float)(_Float16)f != f) bad++;
        if ((h & 0x7fff) < 0x7c00) {
            /* midpoint towards the next larger magnitude, and its neighbours */
            float next = ot_f16_to_f32((uint16_t)(h + 1));
            double mid = ((double)f + (double)next) / 2;
            float mf = (float)mid;
            if ((double)mf == mid) {
                float cands[3] = {mf, bitsf(fbits(mf) - 1), bitsf(fbits(mf) + 1)};
                for (int k = 0; k < 3; k++) {
                    _Float16 r = (_Float16)cands[k];
                    uint16_t rb;
                    memcpy(&rb, &r, 2);
                    if (ot_f32_to_f16(cands[k]) != rb) bad++;
                }
            }
        }
#endif
    }
    return bad;
}

static void test_f16_all_patterns(void) {
    EXPECT_INT_EQ(f16_patterns_bad(), 0);
#if defined(__x86_64__)
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ | DAZ */
    int bad_ftz = f16_patterns_bad();
    uint16_t sub = ot_f32_to_f16(bitsf(0x00400000u)), tiny = ot_f32_to_f16(bitsf(0x33800001u));
    float wide = ot_f16_to_f32(0x0001);
    _mm_setcsr(csr);
    EXPECT_INT_EQ(bad_ftz, 0);
    EXPECT_INT_EQ(sub, 0x0000);  /* an f32 subnormal rounds to +0 */
    EXPECT_INT_EQ(tiny, 0x0001); /* just above half the smallest f16 subnormal */
    EXPECT_TRUE(wide == 5.9604645e-08f);
#endif
    EXPECT_INT_EQ(ot_f32_to_f16(65504.0f), 0x7bff);
    EXPECT_INT_EQ(ot_f32_to_f16(65520.0f), 0x7c00); /* tie rounds to even: infinity */
    EXPECT_INT_EQ(ot_f32_to_f16(65519.99f), 0x7bff);
    EXPECT_INT_EQ(ot_f32_to_f16(-INFINITY), 0xfc00);
    EXPECT_INT_EQ(ot_f32_to_f16(-0.0f), 0x8000);
    EXPECT_INT_EQ(ot_f32_to_f16(1e-8f), 0x0000); /* below half the smallest subnormal */
    EXPECT_INT_EQ(ot_f32_to_f16(5.9604645e-08f), 0x0001);
}

static void test_bf16_all_patterns(void) {
    int bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float f = ot_bf16_to_f32((uint16_t)b);
        bool is_nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f);
        if (is_nan) {
            if (f == f || (ot_f32_to_bf16(f) & 0x7fff) <= 0x7f80) bad++;
            continue;
        }
        if (ot_f32_to_bf16(f) != b) bad++;
        if ((b & 0x7fff) < 0x7f80) {
            uint32_t u = (uint32_t)b << 16;
            /* exactly halfway: ties to even */
            uint16_t want_mid = (b & 1) ? (uint16_t)(b + 1) : (uint16_t)b;
            if (ot_f32_to_bf16(bitsf(u | 0x8000u)) != want_mid) bad++;
            if (ot_f32_to_bf16(bitsf(u | 0x7fffu)) != b) bad++;
            if (ot_f32_to_bf16(bitsf(u | 0x8001u)) != (uint16_t)(b + 1)) bad++;
        }
    }
    EXPECT_INT_EQ(bad, 0);
    EXPECT_INT_EQ(ot_f32_to_bf16(INFINITY), 0x7f80);
    EXPECT_TRUE(ot_bf16_to_f32(ot_f32_to_bf16(NAN)) != ot_bf16_to_f32(ot_f32_to_bf16(NAN)));
}

static void test_shapes(void) {
    ot_shape s;
    EXPECT_OK(ot_shape_make(&s, OT_F32, 2, (int64_t[]){2, 3}));
    char buf[64];
    ot_shape_format(&s, buf, sizeof buf);
    EXPECT_STR_EQ(buf, "f32[2,3]");
    int64_t n;
    EXPECT_OK(ot_shape_nbytes(&s, &n));
    EXPECT_INT_EQ(n, 24);
    int64_t st[OT_MAX_RANK];
    ot_shape_strides(&s, st);
    EXPECT_INT_EQ(st[0], 3);
    EXPECT_INT_EQ(st[1], 1);
    ot_shape sc = ot_shape_scalar(OT_BF16);
    ot_shape_format(&sc, buf, sizeof buf);
    EXPECT_STR_EQ(buf, "bf16[]");
    EXPECT_INT_EQ(ot_shape_format(&s, buf, 4), 8); /* truncated: reports wanted length */
    EXPECT_STR_EQ(buf, "f32");

    EXPECT_STATUS(ot_shape_make(&s, OT_F32, 9, (int64_t[9]){0}), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_shape_make(&s, OT_F32, 1, (int64_t[]){-1}), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "negative");
    EXPECT_STATUS(ot_shape_make(&s, OT_F32, 2, (int64_t[]){INT64_MAX / 2, 3}), OT_ERR_OUT_OF_RANGE);
    EXPECT_STATUS(ot_shape_make(&s, OT_F64, 2, (int64_t[]){1ll << 31, 1ll << 30}),
                  OT_ERR_OUT_OF_RANGE);
    EXPECT_STATUS(ot_shape_make(&s, (ot_dtype)77, 0, NULL), OT_ERR_INVALID_ARGUMENT);
    EXPECT_OK(ot_shape_make(&s, OT_S8, 3, (int64_t[]){0, INT64_MAX, 5}));
    EXPECT_OK(ot_shape_numel(&s, &n));
    EXPECT_INT_EQ(n, 0);
}

static void test_tensor_and_alloc_failure(void) {
    ot_shape s;
    ASSERT_OK(ot_shape_make(&s, OT_F32, 1, (int64_t[]){1000}));
    int64_t live0 = ot_alloc_live();
    ot_tensor t;
    EXPECT_OK(ot_tensor_alloc(&t, &s));
    EXPECT_TRUE(((uintptr_t)t.data % OT_ALIGNMENT) == 0);
    EXPECT_INT_EQ(t.nbytes, 4000);
    EXPECT_TRUE(((float *)t.data)[999] == 0.0f);
    ot_tensor_release(&t);
    EXPECT_TRUE(t.data == NULL);
    ot_alloc_fail_after(1);
    EXPECT_STATUS(ot_tensor_alloc(&t, &s), OT_ERR_OUT_OF_MEMORY);
    ot_alloc_fail_after(0);
    EXPECT_TRUE(t.data == NULL);
    EXPECT_INT_EQ(ot_alloc_live(), live0);
    float buf[4];
    ot_shape s4;
    ASSERT_OK(ot_shape_make(&s4, OT_F32, 1, (int64_t[]){4}));
    EXPECT_OK(ot_tensor_borrow(&t, &s4, buf));
    EXPECT_TRUE(t.data == buf && !t.owned);
    ot_tensor_release(&t);
    EXPECT_STATUS(ot_tensor_borrow(&t, &s4, NULL), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(ot_calloc(SIZE_MAX / 2, 4) == NULL);
}

static void test_arena(void) {
    for (int fail = 1; fail <= 4; fail++) { /* every allocation failure is reported, no leak */
        int64_t live0 = ot_alloc_live();
        ot_alloc_fail_after(fail);
        ot_arena *a = ot_arena_new(128);
        bool ok = a != NULL;
        for (int i = 0; ok && i < 10; i++) ok = ot_arena_alloc(a, 100, 16) != NULL;
        ot_alloc_fail_after(0);
        ot_arena_free(a);
        EXPECT_INT_EQ(ot_alloc_live(), live0);
    }
    ot_arena *a = ot_arena_new(256);
    ASSERT_TRUE(a != NULL);
    void *p1 = ot_arena_alloc(a, 10, 8);
    void *p2 = ot_arena_alloc(a, 10, 64);
    void *big = ot_arena_alloc(a, 10000, 64);
    void *p3 = ot_arena_alloc(a, 8, 8);
    EXPECT_TRUE(p1 && p2 && big && p3);
    EXPECT_TRUE(((uintptr_t)p2 % 64) == 0 && ((uintptr_t)big % 64) == 0);
    EXPECT_TRUE((char *)p3 > (char *)p2 && (char *)p3 < (char *)p2 + 256); /* same chunk */
    EXPECT_STR_EQ(ot_arena_strndup(a, "hello world", 5), "hello");
    EXPECT_TRUE(ot_arena_alloc(a, 8, 3) == NULL); /* not a power of two */
    EXPECT_INT_EQ(ot_arena_used(a), 10 + 10 + 10000 + 8 + 6);
    ot_arena_free(a);
    ot_arena_free(NULL);
}

/* The chunk cache: a 1 MiB chunk freed with its arena is kept (not live), handed to the next
 * arena that needs one (its pages reused), bounded by the limit, reached by fault injection, and
 * released by a limit of 0 and by a change of allocator. */
static void test_arena_chunk_cache(void) {
    const size_t mib = (size_t)1 << 20;
    size_t old = ot_arena_cache_limit(0);
    EXPECT_INT_EQ(ot_arena_cache_bytes(), 0);
    ot_arena_cache_limit(mib + mib / 2);
    int64_t live0 = ot_alloc_live();
    ot_arena *a = ot_arena_new(mib), *b = ot_arena_new(mib);
    ASSERT_TRUE(a && b);
    char *pa = ot_arena_alloc(a, 1000, 64), *pb = ot_arena_alloc(b, 1000, 64);
    ASSERT_TRUE(pa && pb);
    memset(pa, 0x5a, 1000);
    ot_arena_free(a); /* kept: 1 MiB fits the 1.5 MiB limit */
    EXPECT_INT_EQ(ot_arena_cache_bytes(), mib);
    ot_arena_free(b); /* not kept: a second one would pass the limit */
    EXPECT_INT_EQ(ot_arena_cache_bytes(), mib);
#if defined(__SANITIZE_ADDRESS__)
    EXPECT_TRUE(__asan_address_is_poisoned(pa)); /* a use after the free is still reported */
#endif
    int64_t live1 = ot_alloc_live();
    /* the next arena that needs a chunk that size takes the kept one */
    ot_arena *c = ot_arena_new(mib);
    ASSERT_TRUE(c != NULL);
    char *pc = ot_arena_alloc(c, 1000, 64);
    EXPECT_TRUE(pc == pa);
    EXPECT_INT_EQ(ot_arena_cache_bytes(), 0);
    EXPECT_INT_EQ(ot_alloc_live(), live1 + 2); /* the arena and its chunk */
    memset(pc, 1, 1000);                       /* (unpoisoned again) */
    /* a chunk of other size: not one more than twice the request */
    ot_arena_free(c);
    ot_arena *d = ot_arena_new(mib / 4);
    ASSERT_TRUE(d != NULL);
    EXPECT_TRUE(ot_arena_alloc(d, 1000, 64) != NULL);
    EXPECT_INT_EQ(ot_arena_cache_bytes(), mib); /* 256 KiB chunks are never taken from it */
    ot_arena_free(d);
    /* fault injection reaches a chunk taken from the cache, which stays kept */
    ot_arena *e = ot_arena_new(mib);
    ASSERT_TRUE(e != NULL);
    ot_alloc_fail_after(1);
    EXPECT_TRUE(ot_arena_alloc(e, 1000, 64) == NULL);
    ot_alloc_fail_after(0);
    EXPECT_INT_EQ(ot_arena_cache_bytes(), mib);
    ot_arena_free(e);
    /* a limit of 0 frees what is kept */
    EXPECT_INT_EQ(ot_arena_cache_limit(0), mib + mib / 2);
    EXPECT_INT_EQ(ot_arena_cache_bytes(), 0);
    EXPECT_INT_EQ(ot_alloc_live(), live0);
    /* so does changing the allocator: its chunks go back through the one that made them */
    ot_arena_cache_limit(4 * mib);
    a = ot_arena_new(mib);
    ASSERT_TRUE(a && ot_arena_alloc(a, 10, 8));
    ot_arena_free(a);
    EXPECT_INT_EQ(ot_arena_cache_bytes(), mib);
    ot_set_allocator(NULL, NULL);
    EXPECT_INT_EQ(ot_arena_cache_bytes(), 0);
    EXPECT_INT_EQ(ot_alloc_live(), live0);
    ot_arena_cache_limit(old);
}

typedef struct sum_ctx {
    const int64_t *x;
    int64_t partial[64];
    atomic_llong calls;
} sum_ctx;

static void sum_range(void *ctx, int64_t b, int64_t e, int ith) {
    sum_ctx *c = ctx;
    int64_t s = 0;
    for (int64_t i = b; i < e; i++) s += c->x[i];
    c->partial[ith] += s;
    atomic_fetch_add(&c->calls, 1);
}

typedef struct barrier_ctx {
    ot_threadpool *p;
    atomic_int phase1;
    int seen_all[64];
} barrier_ctx;

static void barrier_task(void *arg, int ith, int nth) {
    barrier_ctx *c = arg;
    atomic_fetch_add(&c->phase1, 1);
    ot_threadpool_barrier(c->p, ith);
    c->seen_all[ith] = atomic_load(&c->phase1) == nth;
    ot_threadpool_barrier(c->p, ith);
}

/* Open runs (ot_parallel_for): every piece runs exactly once and has finished when the call
 * returns, whichever threads ran it — workers that join late, a worker slow inside its piece,
 * runs of a few pieces back to back (a worker that wakes for one run must not run the next one's
 * pieces with the old context), interleaved with full runs that use the barrier. */
typedef struct once_ctx {
    atomic_int hits[64];
    int64_t n;
    int ith_busy[64]; /* at most one call per ith at a time */
    atomic_int bad;
} once_ctx;

static void once_range(void *arg, int64_t b, int64_t e, int ith) {
    once_ctx *c = arg;
    if (c->ith_busy[ith]++) atomic_store(&c->bad, 1);
    /* every piece takes a while (so that workers join), a worker's far longer than all the
     * caller's pieces together: a run that returned before its workers had finished would miss
     * their hits */
    for (volatile int spin = 0; spin < 300; spin++) {
    }
    if (ith) usleep(200);
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
    c->ith_busy[ith]--;
}

static void test_threadpool_open_runs(void) {
    int sizes[] = {2, 3, 8};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        ot_threadpool *p;
        ASSERT_OK(ot_threadpool_create(sizes[k], &p));
        int wrong = 0;
        for (int rep = 0; rep < 1000; rep++) {
            once_ctx c;
            memset(&c, 0, sizeof c);
            c.n = 1 + rep % 64;
            ot_parallel_for(p, c.n, 1 + rep % 3, rep & 1 ? OT_SCHEDULE_STATIC : OT_SCHEDULE_DYNAMIC,
                            once_range, &c);
            for (int64_t i = 0; i < 64; i++) wrong += atomic_load(&c.hits[i]) != (i < c.n ? 1 : 0);
            wrong += atomic_load(&c.bad);
            memset(&c, 0x55, sizeof c); /* a late write into the finished run shows up next */
            if (rep % 250 == 249) {
                barrier_ctx bc = {.p = p};
                ot_threadpool_run(p, barrier_task, &bc);
                for (int i = 0; i < sizes[k]; i++) wrong += !bc.seen_all[i];
            }
        }
        EXPECT_INT_EQ(wrong, 0);
        ot_threadpool_free(p);
    }
}

static void test_threadpool(void) {
    enum { N = 100003 };
    int64_t *x = malloc(N * sizeof *x);
    int64_t want = 0;
    for (int64_t i = 0; i < N; i++) want += (x[i] = i * 7 % 13);
    int sizes[] = {1, 2, 3, 8};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        ot_threadpool *p;
        ASSERT_OK(ot_threadpool_create(sizes[k], &p));
        EXPECT_INT_EQ(ot_threadpool_size(p), sizes[k]);
        for (int rep = 0; rep < 50; rep++) {
            sum_ctx c = {.x = x};
            ot_parallel_for(p, N, 0, OT_SCHEDULE_STATIC, sum_range, &c);
            int64_t got = 0;
            for (int i = 0; i < 64; i++) got += c.partial[i];
            EXPECT_INT_EQ(got, want);
            EXPECT_TRUE(atomic_load(&c.calls) <= sizes[k]);
            sum_ctx d = {.x = x};
            ot_parallel_for(p, N, 1000, OT_SCHEDULE_DYNAMIC, sum_range, &d);
            got = 0;
            for (int i = 0; i < 64; i++) got += d.partial[i];
            EXPECT_INT_EQ(got, want);
            /* a one-thread pool runs the range inline in one call */
            EXPECT_INT_EQ(atomic_load(&d.calls), sizes[k] == 1 ? 1 : (N + 999) / 1000);
        }
        barrier_ctx bc = {.p = p};
        ot_threadpool_run(p, barrier_task, &bc);
        for (int i = 0; i < sizes[k]; i++) EXPECT_TRUE(bc.seen_all[i]);
        ot_threadpool_free(p);
    }
    ot_threadpool_free(NULL);
    EXPECT_TRUE(ot_threadpool_default() != NULL);
    /* allocation failure during creation cleans up */
    for (int fail = 1; fail <= 8; fail++) {
        int64_t live0 = ot_alloc_live();
        ot_threadpool *p = NULL;
        ot_alloc_fail_after(fail);
        ot_status s = ot_threadpool_create(4, &p);
        ot_alloc_fail_after(0);
        if (s == OT_OK) {
            ot_threadpool_free(p);
        } else {
            EXPECT_INT_EQ(s, OT_ERR_OUT_OF_MEMORY);
            EXPECT_TRUE(p == NULL);
        }
        EXPECT_INT_EQ(ot_alloc_live(), live0);
    }
    free(x);
}

/* ---- allocation failure in every core constructor ---------------------------------------------
 * Each builder makes one object the way a caller would, uses it and frees it. The loop fails
 * allocation 1, 2, ... until the builder succeeds: every failure must be OUT_OF_MEMORY (or the
 * builder's NULL) and leave ot_alloc_live() where it was. */

static ot_status build_tensor(void) {
    ot_shape s;
    OT_CHECK(ot_shape_make(&s, OT_F32, 2, (int64_t[]){10, 100}));
    ot_tensor t;
    OT_CHECK(ot_tensor_alloc(&t, &s));
    ((float *)t.data)[999] = 1;
    ot_tensor_release(&t);
    return OT_OK;
}

static ot_status build_arena(void) {
    ot_arena *a = ot_arena_new(256);
    if (!a) return OT_ERR_OUT_OF_MEMORY;
    ot_status rc = OT_OK;
    for (int i = 0; i < 20 && rc == OT_OK; i++)
        if (!ot_arena_alloc(a, (size_t)(i % 3 == 0 ? 1000 : 100), 16)) rc = OT_ERR_OUT_OF_MEMORY;
    if (rc == OT_OK && !ot_arena_strndup(a, "a string that needs its own bytes", 100))
        rc = OT_ERR_OUT_OF_MEMORY;
    ot_arena_free(a);
    return rc;
}

typedef struct count_ctx {
    atomic_int n;
} count_ctx;

static void count_task(void *arg, int ith, int nth) {
    (void)ith;
    (void)nth;
    atomic_fetch_add(&((count_ctx *)arg)->n, 1);
}

static ot_status build_threadpool(void) {
    ot_threadpool *p;
    OT_CHECK(ot_threadpool_create(4, &p));
    count_ctx c;
    atomic_init(&c.n, 0);
    ot_threadpool_run(p, count_task, &c);
    ot_threadpool_free(p);
    return atomic_load(&c.n) == 4 ? OT_OK : OT_ERR_INTERNAL;
}

static ot_status build_strings(void) {
    char *a = ot_strdup("hello");
    char *b = ot_strndup("hello world", 5);
    void *c = ot_aligned_alloc(64, 1000);
    void *d = ot_calloc(10, 10);
    void *e = ot_malloc(7);
    ot_status rc = a && b && c && d && e ? OT_OK : OT_ERR_OUT_OF_MEMORY;
    if (rc == OT_OK && (strcmp(a, "hello") || strcmp(b, "hello") || ((uintptr_t)c & 63)))
        rc = OT_ERR_INTERNAL;
    ot_free(a);
    ot_free(b);
    ot_aligned_free(c);
    ot_free(d);
    ot_free(e);
    return rc;
}

/* Stream buffers: 16 consecutive ones start at 16 distinct offsets within 4 KiB, each 256-byte
 * aligned, writable to the end, freed without a leak. */
static void test_stream_alloc(void) {
    int64_t live0 = ot_alloc_live();
    enum { N = 16 };
    char *b[N];
    bool seen[16] = {false};
    for (int k = 0; k < N; k++) {
        b[k] = ot_stream_alloc(3000 + (size_t)k);
        ASSERT_TRUE(b[k] != NULL);
        uintptr_t a = (uintptr_t)b[k];
        EXPECT_INT_EQ((int64_t)(a & 255), 0);
        seen[(a & 4095) / 256] = true;
        memset(b[k], 0x5a, 3000 + (size_t)k);
    }
    for (int k = 0; k < 16; k++) EXPECT_TRUE(seen[k]);
    for (int k = 0; k < N; k++) ot_aligned_free(b[k]);
    EXPECT_INT_EQ(ot_alloc_live(), live0);
}

/* Returns the number of injected failures the builder went through before it succeeded. */
static int fail_every_allocation(const char *name, ot_status (*build)(void)) {
    for (int n = 1; n < 1000; n++) {
        int64_t live0 = ot_alloc_live();
        ot_alloc_fail_after(n);
        ot_status s = build();
        ot_alloc_fail_after(0);
        if (ot_alloc_live() != live0) {
            OT_T_FAIL_("%s: %lld allocations leaked after failing allocation %d", name,
                       (long long)(ot_alloc_live() - live0), n);
            return n;
        }
        if (s == OT_OK) return n - 1;
        if (s != OT_ERR_OUT_OF_MEMORY) {
            OT_T_FAIL_("%s: failing allocation %d gave %s, want OUT_OF_MEMORY (%s)", name, n,
                       ot_status_str(s), ot_last_error());
            return n;
        }
    }
    OT_T_FAIL_("%s: never succeeded", name);
    return 0;
}

static void test_alloc_failure_every_constructor(void) {
    EXPECT_INT_EQ(fail_every_allocation("tensor", build_tensor), 1);
    EXPECT_TRUE(fail_every_allocation("arena", build_arena) >= 5);
    EXPECT_TRUE(fail_every_allocation("threadpool", build_threadpool) >= 3);
    EXPECT_INT_EQ(fail_every_allocation("strings", build_strings), 5);
    /* a failed realloc keeps the old block */
    char *p = ot_malloc(8);
    ASSERT_TRUE(p != NULL);
    memcpy(p, "1234567", 8);
    ot_alloc_fail_after(1);
    EXPECT_TRUE(ot_realloc(p, 1 << 20) == NULL);
    ot_alloc_fail_after(0);
    EXPECT_STR_EQ(p, "1234567");
    char *q = ot_realloc(p, 1 << 20);
    ASSERT_TRUE(q != NULL);
    EXPECT_STR_EQ(q, "1234567");
    ot_free(q);
    /* the count moves on every request, failed or not */
    int64_t c0 = ot_alloc_count();
    ot_alloc_fail_after(1);
    EXPECT_TRUE(ot_malloc(1) == NULL);
    ot_alloc_fail_after(0);
    EXPECT_INT_EQ(ot_alloc_count(), c0 + 1);
}

/* A replaced allocator sees every allocation; NULL restores libc. */
typedef struct hook_stats {
    int allocs, frees;
} hook_stats;

static void *counting_realloc(void *ud, void *ptr, size_t size) {
    hook_stats *h = ud;
    if (size == 0) {
        h->frees++;
        free(ptr);
        return NULL;
    }
    if (!ptr) h->allocs++;
    return realloc(ptr, size);
}

static void test_allocator_hook(void) {
    hook_stats h = {0, 0};
    ot_set_allocator(counting_realloc, &h);
    ot_status s = build_tensor();
    char *str = ot_strdup("x");
    ot_free(str);
    ot_set_allocator(NULL, NULL);
    EXPECT_OK(s);
    EXPECT_INT_EQ(h.allocs, 2);
    EXPECT_INT_EQ(h.frees, 2);
    char *after = ot_strdup("y"); /* libc again: the counters stay */
    ot_free(after);
    EXPECT_INT_EQ(h.allocs, 2);
}

static void hex_of(const void *data, size_t n, char out[65]) {
    uint8_t d[32];
    ot_sha256_digest(data, n, d);
    ot_hex(d, 32, out);
}

static void test_sha256_nist(void) {
    char hex[65];
    hex_of("", 0, hex);
    EXPECT_STR_EQ(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of("abc", 3, hex);
    EXPECT_STR_EQ(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(m2, strlen(m2), hex);
    EXPECT_STR_EQ(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* one million 'a', streamed in uneven pieces */
    ot_sha256 h;
    ASSERT_OK(ot_sha256_init(&h));
    char buf[997];
    memset(buf, 'a', sizeof buf);
    size_t left = 1000000;
    while (left) {
        size_t k = left < sizeof buf ? left : sizeof buf;
        EXPECT_OK(ot_sha256_update(&h, buf, k));
        left -= k;
    }
    uint8_t d[32];
    EXPECT_OK(ot_sha256_final(&h, d));
    ot_hex(d, 32, hex);
    EXPECT_STR_EQ(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    EXPECT_STATUS(ot_sha256_update(&h, "x", 1), OT_ERR_INVALID_ARGUMENT);
}

static void test_strbuf(void) {
    ot_strbuf b = {0};
    ot_strbuf_printf(&b, "%s", "");
    ASSERT_TRUE(b.p != NULL);
    EXPECT_STR_EQ(b.p, "");
    /* pieces across the first capacity and its doublings, one longer than any capacity so far */
    char want[8192] = "", big[3001];
    memset(big, 'x', 3000);
    big[3000] = '\0';
    size_t wn = 0;
    for (int i = 0; i < 300; i++) {
        ot_strbuf_printf(&b, "%d,", i);
        wn += (size_t)snprintf(want + wn, sizeof want - wn, "%d,", i);
        if (i == 150) {
            ot_strbuf_printf(&b, "%s", big);
            wn += (size_t)snprintf(want + wn, sizeof want - wn, "%s", big);
        }
    }
    EXPECT_TRUE(!b.oom);
    EXPECT_INT_EQ((long long)b.n, (long long)wn);
    EXPECT_INT_EQ((long long)strlen(b.p), (long long)wn);
    EXPECT_STR_EQ(b.p, want);
    ot_free(b.p);
    /* an allocation failure sticks: later appends change nothing */
    ot_strbuf c = {0};
    ot_alloc_fail_after(1);
    ot_strbuf_printf(&c, "abc");
    ot_alloc_fail_after(0);
    EXPECT_TRUE(c.oom);
    ot_strbuf_printf(&c, "def");
    EXPECT_TRUE(c.oom && c.p == NULL && c.n == 0);
}

static bool fail_with_enospc(void) {
    errno = ENOSPC;
    return true;
}

static void test_fd_full_io(void) {
    int fds[2];
    ASSERT_TRUE(pipe(fds) == 0);
    char out[4000], in[5000];
    for (size_t i = 0; i < sizeof out; i++) out[i] = (char)(i * 7);
    EXPECT_INT_EQ(ot_write_full(fds[1], out, sizeof out, NULL), 0);
    EXPECT_INT_EQ(ot_write_full(fds[1], out, 10, fail_with_enospc), ENOSPC);
    close(fds[1]);
    size_t got = 0;
    EXPECT_INT_EQ(ot_read_full(fds[0], in, 1000, &got), 0); /* part of what is there */
    EXPECT_INT_EQ((long long)got, 1000);
    EXPECT_INT_EQ(ot_read_full(fds[0], in + 1000, 4000, &got), -1); /* ends after 3000 */
    EXPECT_INT_EQ((long long)got, 3000);
    EXPECT_TRUE(memcmp(in, out, sizeof out) == 0);
    close(fds[0]);
    EXPECT_INT_EQ(ot_read_full(fds[0], in, 1, NULL), EBADF);
    EXPECT_INT_EQ(ot_write_full(fds[1], out, 1, NULL), EBADF);
    EXPECT_INT_EQ(ot_read_full(fds[0], in, 0, &got), 0); /* nothing asked: no call */
    EXPECT_INT_EQ((long long)got, 0);
}

OT_TEST_MAIN(OT_TEST(test_status_names), OT_TEST(test_dtype_table), OT_TEST(test_f16_all_patterns),
             OT_TEST(test_bf16_all_patterns), OT_TEST(test_shapes),
             OT_TEST(test_tensor_and_alloc_failure), OT_TEST(test_arena),
             OT_TEST(test_arena_chunk_cache), OT_TEST(test_threadpool),
             OT_TEST(test_threadpool_open_runs), OT_TEST(test_alloc_failure_every_constructor),
             OT_TEST(test_stream_alloc), OT_TEST(test_allocator_hook), OT_TEST(test_sha256_nist),
             OT_TEST(test_strbuf), OT_TEST(test_fd_full_io))
