/* The replaceable allocation hook, fault injection, aligned allocation and the arena. */
#include "optitpu/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
#define OT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OT_ASAN 1
#endif
#endif
#if defined(OT_ASAN)
#include <sanitizer/asan_interface.h>
#define POISON(p, n)   ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n)   ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static void *default_realloc(void *ud, void *ptr, size_t size) {
    (void)ud;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, size);
}

static ot_realloc_fn g_fn = default_realloc;
static void *g_ud;
static atomic_llong g_count;
static atomic_llong g_live;
static atomic_llong g_fail_at; /* absolute request number that starts failing; 0 = never */

static void chunk_cache_release(size_t keep);

void ot_set_allocator(ot_realloc_fn fn, void *ud) {
    chunk_cache_release(0); /* cached chunks go back through the allocator that made them */
    g_fn = fn ? fn : default_realloc;
    g_ud = fn ? ud : NULL;
}

void ot_alloc_fail_after(int64_t n) {
    atomic_store(&g_fail_at, n > 0 ? (long long)(atomic_load(&g_count) + n) : 0);
}

int64_t ot_alloc_count(void) {
    return atomic_load(&g_count);
}

int64_t ot_alloc_live(void) {
    return atomic_load(&g_live);
}

static bool should_fail(void) {
    long long k = atomic_fetch_add(&g_count, 1) + 1;
    long long at = atomic_load(&g_fail_at);
    return at > 0 && k >= at;
}

void *ot_malloc(size_t size) {
    if (should_fail()) return NULL;
    void *p = g_fn(g_ud, NULL, size ? size : 1);
    if (p) atomic_fetch_add(&g_live, 1);
    return p;
}

void *ot_calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = ot_malloc(n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

void *ot_realloc(void *ptr, size_t size) {
    if (!ptr) return ot_malloc(size);
    if (size == 0) {
        ot_free(ptr);
        return NULL;
    }
    if (should_fail()) return NULL;
    return g_fn(g_ud, ptr, size);
}

void ot_free(void *ptr) {
    if (!ptr) return;
    atomic_fetch_sub(&g_live, 1);
    g_fn(g_ud, ptr, 0);
}

char *ot_strndup(const char *s, size_t n) {
    size_t len = strnlen(s, n);
    char *d = ot_malloc(len + 1);
    if (!d) return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

char *ot_strdup(const char *s) {
    return ot_strndup(s, SIZE_MAX);
}

/* The original pointer is stored just before the aligned block. */
void *ot_aligned_alloc(size_t align, size_t size) {
    if (align < sizeof(void *) || (align & (align - 1)) != 0) return NULL;
    if (size > SIZE_MAX - align - sizeof(void *)) return NULL;
    char *raw = ot_malloc(size + align + sizeof(void *));
    if (!raw) return NULL;
    uintptr_t p = ((uintptr_t)(raw + sizeof(void *)) + align - 1) & ~(uintptr_t)(align - 1);
    ((void **)p)[-1] = raw;
    return (void *)p;
}

void *ot_aligned_alloc_huge(size_t size) {
    const size_t huge = (size_t)2 << 20;
    void *p = ot_aligned_alloc(huge, size);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* whole huge pages only: the tail past the last 2 MiB boundary may share a page with
     * other allocations */
    if (p && size >= huge) (void)madvise(p, size / huge * huge, MADV_HUGEPAGE); /* advice only */
#endif
    return p;
}

static _Atomic unsigned g_stream_color;

void *ot_stream_alloc(size_t size) {
    /* k * 1280 mod 4096 for k < 16: every multiple of 256 below 4096 once */
    const size_t page = 4096, step = 1280;
    size_t off = (size_t)(atomic_fetch_add(&g_stream_color, 1u) % 16u) * step % page;
    if (size > SIZE_MAX - page) return NULL;
    char *p = ot_aligned_alloc_huge(size + off);
    if (!p || off == 0) return p;
    char *q = p + off;
    ((void **)q)[-1] = ((void **)p)[-1]; /* where ot_aligned_free finds the original pointer */
    return q;
}

void ot_aligned_free(void *ptr) {
    if (ptr) ot_free(((void **)ptr)[-1]);
}

/* ------------------------------------------------------------------------------------------ */

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t cap, used;
    _Alignas(64) unsigned char data[];
} arena_chunk;

struct ot_arena {
    arena_chunk *head;
    size_t chunk_size; /* the first chunk's size */
    size_t next_size;  /* doubles with each chunk up to ARENA_MAX_CHUNK */
    size_t used;
};

/* Chunks grow geometrically (a million-instruction module takes a few dozen, not thousands), and
 * from ARENA_POPULATE_FROM on a new chunk's pages are mapped in one call: an arena fills its chunks
 * front to back, so faulting each 4 KiB page separately on first touch only adds a trap per page.
 */
#define ARENA_MAX_CHUNK     ((size_t)16 << 20)
#define ARENA_POPULATE_FROM ((size_t)1 << 20)

static void arena_populate(void *p, size_t n) {
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    const uintptr_t page = 4096;
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + n) & ~(page - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE); /* advice only */
#else
    (void)p;
    (void)n;
#endif
}

/* Chunk cache. Chunks of ARENA_POPULATE_FROM bytes or more, freed with their arena, are kept
 * (up to a limit) for the next arena instead of going back to the C allocator. A compile makes
 * and frees modules of hundreds of megabytes; glibc returns memory that large to the kernel
 * (trimming the heap, unmapping), so every later compile of that size faulted its pages in again,
 * each one zeroed by the kernel, while a smaller compile reused its heap: measured on the
 * 200k-instruction benchmark graph, about 24k page faults per compile against 2.4k at 100k.
 * Kept chunks are already mapped, and are handed out best fit (the smallest that holds the
 * request, at most twice its size). Only the default allocator's chunks are kept; changing the
 * allocator releases them. A kept chunk does not count as live (ot_alloc_live), a chunk taken
 * from the cache counts as one allocation request (fault injection reaches it as before), and
 * under AddressSanitizer a kept chunk is poisoned, so a use after its arena's free is still
 * reported. */
static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static arena_chunk *g_cache; /* linked through next */
static size_t g_cache_bytes, g_cache_limit = OT_ARENA_CACHE_DEFAULT;

static arena_chunk *chunk_cache_take(size_t need) {
    arena_chunk *best = NULL, **bestp = NULL;
    pthread_mutex_lock(&g_cache_mu);
    for (arena_chunk **pp = &g_cache; *pp; pp = &(*pp)->next) {
        size_t cap = (*pp)->cap;
        if (cap >= need && cap / 2 <= need && (!best || cap < best->cap)) {
            best = *pp;
            bestp = pp;
        }
    }
    if (best) {
        *bestp = best->next;
        g_cache_bytes -= best->cap;
    }
    pthread_mutex_unlock(&g_cache_mu);
    return best;
}

/* Keeps c when it fits under the limit (force: whatever the limit, for a chunk just taken). */
static bool chunk_cache_keep(arena_chunk *c, bool force) {
    bool kept = false;
    pthread_mutex_lock(&g_cache_mu);
    if (force || (g_cache_limit >= g_cache_bytes && c->cap <= g_cache_limit - g_cache_bytes)) {
        POISON(c->data, c->cap);
        c->next = g_cache;
        g_cache = c;
        g_cache_bytes += c->cap;
        kept = true;
    }
    pthread_mutex_unlock(&g_cache_mu);
    return kept;
}

/* An arena's chunk being freed: true when it is kept (it no longer counts as live). */
static bool chunk_cache_put(arena_chunk *c) {
    if (c->cap < ARENA_POPULATE_FROM || g_fn != default_realloc) return false;
    if (!chunk_cache_keep(c, false)) return false;
    atomic_fetch_sub(&g_live, 1);
    return true;
}

/* Frees kept chunks, the most recently kept first, until at most keep bytes are kept. */
static void chunk_cache_release(size_t keep) {
    arena_chunk *drop = NULL;
    pthread_mutex_lock(&g_cache_mu);
    while (g_cache && g_cache_bytes > keep) {
        arena_chunk *c = g_cache;
        g_cache = c->next;
        g_cache_bytes -= c->cap;
        c->next = drop;
        drop = c;
    }
    pthread_mutex_unlock(&g_cache_mu);
    for (arena_chunk *c = drop, *n; c; c = n) {
        n = c->next;
        UNPOISON(c->data, c->cap);
        atomic_fetch_add(&g_live, 1); /* (ot_free counts it out again) */
        ot_aligned_free(c);
    }
}

size_t ot_arena_cache_limit(size_t bytes) {
    pthread_mutex_lock(&g_cache_mu);
    size_t old = g_cache_limit;
    g_cache_limit = bytes;
    pthread_mutex_unlock(&g_cache_mu);
    chunk_cache_release(bytes);
    return old;
}

size_t ot_arena_cache_bytes(void) {
    pthread_mutex_lock(&g_cache_mu);
    size_t n = g_cache_bytes;
    pthread_mutex_unlock(&g_cache_mu);
    return n;
}

/* A chunk of at least cap bytes of data: a kept one, or a new one (its pages mapped when
 * populate). NULL on failure. */
static arena_chunk *chunk_new(size_t cap, bool populate) {
    if (cap >= ARENA_POPULATE_FROM) {
        arena_chunk *c = chunk_cache_take(cap);
        if (c) {
            if (should_fail()) { /* (one request, as a new chunk is) */
                chunk_cache_keep(c, true);
                return NULL;
            }
            UNPOISON(c->data, c->cap);
            atomic_fetch_add(&g_live, 1);
            return c;
        }
    }
    if (cap > SIZE_MAX - sizeof(arena_chunk)) return NULL;
    arena_chunk *c = ot_aligned_alloc(64, sizeof(arena_chunk) + cap);
    if (!c) return NULL;
    if (populate && cap >= ARENA_POPULATE_FROM) arena_populate(c->data, cap);
    c->cap = cap;
    return c;
}

ot_arena *ot_arena_new(size_t chunk_size) {
    ot_arena *a = ot_calloc(1, sizeof *a);
    if (!a) return NULL;
    a->chunk_size = chunk_size ? chunk_size : 64 * 1024;
    a->next_size = a->chunk_size;
    return a;
}

void ot_arena_free(ot_arena *a) {
    if (!a) return;
    for (arena_chunk *c = a->head, *n; c; c = n) {
        n = c->next;
        if (!chunk_cache_put(c)) ot_aligned_free(c);
    }
    ot_free(a);
}

void *ot_arena_alloc(ot_arena *a, size_t size, size_t align) {
    if (align == 0) align = 1;
    if ((align & (align - 1)) != 0 || align > 64) return NULL;
    arena_chunk *c = a->head;
    if (c) {
        size_t off = (c->used + align - 1) & ~(align - 1);
        if (off <= c->cap && size <= c->cap - off) {
            c->used = off + size;
            a->used += size;
            return c->data + off;
        }
    }
    const bool oneoff = size > a->next_size; /* a big block gets a chunk of its own */
    c = chunk_new(oneoff ? size : a->next_size, !oneoff);
    if (!c) return NULL;
    if (!oneoff && a->next_size < ARENA_MAX_CHUNK) a->next_size *= 2;
    c->used = size;
    /* keep filling the fuller chunk: a big one-off block goes behind the current head */
    if (a->head && oneoff) {
        c->next = a->head->next;
        a->head->next = c;
    } else {
        c->next = a->head;
        a->head = c;
    }
    a->used += size;
    return c->data;
}

char *ot_arena_strndup(ot_arena *a, const char *s, size_t n) {
    size_t len = strnlen(s, n);
    char *d = ot_arena_alloc(a, len + 1, 1);
    if (!d) return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

size_t ot_arena_used(const ot_arena *a) {
    return a->used;
}
