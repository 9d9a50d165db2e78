/*
 * optitpu core: status codes, dtypes, shapes, host tensors, allocation, arena, thread pool,
 * logging, clocks, SHA-256 and NumPy .npy I/O.
 *
 * Usage:
 *
 *     ot_shape s;
 *     OT_CHECK(ot_shape_make(&s, OT_F32, 2, (int64_t[]){2, 3}));
 *     ot_tensor t;
 *     OT_CHECK(ot_tensor_alloc(&t, &s));       // 64-byte aligned, zeroed
 *     ((float *)t.data)[0] = 1.0f;
 *     OT_CHECK(ot_npy_write_file("x.npy", &t));
 *     ot_tensor_release(&t);
 *
 * Errors: every fallible call returns an ot_status (0 = OK, negative = error) and leaves a
 * formatted message in a thread-local string readable with ot_last_error(). The library never
 * prints unless a log callback is installed, and never calls exit().
 */
#ifndef OPTITPU_CORE_H
#define OPTITPU_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Status
 * ------------------------------------------------------------------------------------------- */

typedef enum ot_status {
    OT_OK = 0,
    OT_ERR_INVALID_ARGUMENT = -1,
    OT_ERR_SHAPE_MISMATCH = -2,
    OT_ERR_OUT_OF_MEMORY = -3,
    OT_ERR_NOT_FOUND = -4,
    OT_ERR_ALREADY_EXISTS = -5,
    OT_ERR_CORRUPT_DATA = -6,
    OT_ERR_IO = -7,
    OT_ERR_TIMEOUT = -8,
    OT_ERR_PEER_FAILED = -9,
    OT_ERR_CANCELLED = -10,
    OT_ERR_UNSUPPORTED_HARDWARE = -11,
    OT_ERR_UNIMPLEMENTED = -12,
    OT_ERR_INTERNAL = -13,
    OT_ERR_FAILED_PRECONDITION = -14,
    OT_ERR_OUT_OF_RANGE = -15,
    /* refused before allocating: what a run needs exceeds the memory (or another resource) it may
     * have; OUT_OF_MEMORY is an allocation that failed */
    OT_ERR_RESOURCE_EXHAUSTED = -16,
    OT_STATUS_MIN = -16, /* the most negative code; used by name-table checks */
} ot_status;

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN_STATUS" for a value outside the enum. */
OT_API const char *ot_status_str(ot_status s);

/* Records a formatted message in the thread-local last-error string and returns `code`, so that
 * `return ot_error(OT_ERR_IO, "open %s: %s", path, strerror(errno));` reads naturally.
 * The message is "CODE: detail". */
OT_API ot_status ot_error(ot_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Prepends context to the current message ("while X: <old>") and returns `code` unchanged. */
OT_API ot_status ot_error_wrap(ot_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The last error message recorded on this thread ("" when none). Valid until the next call that
 * records an error on this thread. */
OT_API const char *ot_last_error(void);
OT_API void ot_clear_error(void);

#define OT_CHECK(call)                                                                             \
    do {                                                                                           \
        ot_status ot_check_s_ = (call);                                                            \
        if (ot_check_s_ != OT_OK) return ot_check_s_;                                              \
    } while (0)

#define OT_CHECK_GOTO(call, rc, label)                                                             \
    do {                                                                                           \
        (rc) = (call);                                                                             \
        if ((rc) != OT_OK) goto label;                                                             \
    } while (0)

/* Caller bugs (a broken invariant, not bad input) abort with file:line. */
OT_API void ot_assert_fail(const char *expr, const char *file, int line);
#define OT_ASSERT(x) ((x) ? (void)0 : ot_assert_fail(#x, __FILE__, __LINE__))

/* ---------------------------------------------------------------------------------------------
 * Dtypes (HLO element types)
 * ------------------------------------------------------------------------------------------- */

typedef enum ot_dtype {
    OT_PRED = 0,
    OT_S8,
    OT_S16,
    OT_S32,
    OT_S64,
    OT_U8,
    OT_U16,
    OT_U32,
    OT_U64,
    OT_F16,
    OT_BF16,
    OT_F32,
    OT_F64,
    /* complex: appended so the numbers above keep their meaning in checkpoints and serialized
     * executables */
    OT_C64,  /* two f32: real, imaginary */
    OT_C128, /* two f64: real, imaginary */
    OT_DTYPE_COUNT,
    OT_DTYPE_INVALID = -1,
} ot_dtype;

OT_API const char *ot_dtype_name(ot_dtype t); /* HLO name: "pred", "s8", ..., "f64", "c64" */
OT_API size_t ot_dtype_size(ot_dtype t);      /* bytes per element; 0 for an invalid dtype */
OT_API ot_dtype ot_dtype_from_name(const char *name, size_t len); /* OT_DTYPE_INVALID if unknown */
OT_API bool ot_dtype_is_float(ot_dtype t);
OT_API bool ot_dtype_is_signed_int(ot_dtype t);
OT_API bool ot_dtype_is_unsigned_int(ot_dtype t);
OT_API bool ot_dtype_is_integer(ot_dtype t);
/* c64, c128. A complex dtype is neither float nor integer: code that handles reals must ask. */
OT_API bool ot_dtype_is_complex(ot_dtype t);
/* The dtype of one component: c64 -> f32, c128 -> f64; OT_DTYPE_INVALID for any other. */
OT_API ot_dtype ot_dtype_complex_part(ot_dtype t);

/* IEEE half and bfloat16 <-> f32, round-to-nearest-even; NaN stays NaN (quiet), infinities and
 * signed zeros are preserved, f32 values beyond the f16 range become infinities. */
OT_API uint16_t ot_f32_to_f16(float f);
OT_API float ot_f16_to_f32(uint16_t h);
OT_API uint16_t ot_f32_to_bf16(float f);
OT_API float ot_bf16_to_f32(uint16_t b);

/* ---------------------------------------------------------------------------------------------
 * Shapes (dense, row-major)
 * ------------------------------------------------------------------------------------------- */

#define OT_MAX_RANK 8

typedef struct ot_shape {
    ot_dtype dtype;
    int rank;
    int64_t dims[OT_MAX_RANK];
} ot_shape;

/* Validates rank (0..OT_MAX_RANK), dims (>= 0) and that the byte count fits in int64. */
OT_API ot_status ot_shape_make(ot_shape *out, ot_dtype dtype, int rank, const int64_t *dims);
OT_API ot_shape ot_shape_scalar(ot_dtype dtype);
/* Element and byte counts with overflow checks (OT_ERR_OUT_OF_RANGE on overflow). */
OT_API ot_status ot_shape_numel(const ot_shape *s, int64_t *out);
OT_API ot_status ot_shape_nbytes(const ot_shape *s, int64_t *out);
/* Element and byte counts of a shape already validated by ot_shape_make (no checks). */
OT_API int64_t ot_shape_numel_unchecked(const ot_shape *s);
OT_API int64_t ot_shape_nbytes_unchecked(const ot_shape *s);
/* Row-major strides in elements. */
OT_API void ot_shape_strides(const ot_shape *s, int64_t strides[OT_MAX_RANK]);
OT_API bool ot_shape_equal(const ot_shape *a, const ot_shape *b);
/* Writes "f32[2,3]" (snprintf semantics: returns the length it wanted). */
OT_API int ot_shape_format(const ot_shape *s, char *buf, size_t n);

/* ---------------------------------------------------------------------------------------------
 * Host tensors
 * ------------------------------------------------------------------------------------------- */

#define OT_ALIGNMENT 64

typedef struct ot_tensor {
    ot_shape shape;
    void *data;    /* OT_ALIGNMENT-aligned when owned */
    size_t nbytes; /* shape byte count */
    bool owned;    /* released by ot_tensor_release */
} ot_tensor;

/* Allocates zeroed, aligned storage. On failure *t is left empty (data NULL). */
OT_API ot_status ot_tensor_alloc(ot_tensor *t, const ot_shape *s);
/* Wraps caller memory; the caller keeps ownership and must keep it alive. */
OT_API ot_status ot_tensor_borrow(ot_tensor *t, const ot_shape *s, void *data);
/* Frees owned storage; a borrowed or empty tensor is just cleared. */
OT_API void ot_tensor_release(ot_tensor *t);

/* ---------------------------------------------------------------------------------------------
 * Allocation
 *
 * Every allocation the library makes goes through one replaceable hook with realloc semantics
 * (ptr NULL: allocate; size 0: free). A test mode makes the Nth allocation fail, so tests can
 * prove that every constructor cleans up after a failure.
 * ------------------------------------------------------------------------------------------- */

typedef void *(*ot_realloc_fn)(void *ud, void *ptr, size_t size);
/* NULL restores the default (libc). Not thread-safe against concurrent allocations. */
OT_API void ot_set_allocator(ot_realloc_fn fn, void *ud);
OT_API void *ot_malloc(size_t size);
OT_API void *ot_calloc(size_t n, size_t size); /* overflow-checked */
OT_API void *ot_realloc(void *ptr, size_t size);
OT_API void ot_free(void *ptr);
OT_API char *ot_strdup(const char *s);
OT_API char *ot_strndup(const char *s, size_t n);
/* Aligned allocation (align: power of two); free with ot_aligned_free. */
OT_API void *ot_aligned_alloc(size_t align, size_t size);
OT_API void ot_aligned_free(void *ptr);
/* A large buffer for streaming: 2 MiB-aligned and advised to be backed by transparent huge
 * pages (MADV_HUGEPAGE; advice only, so the kernel's THP setting decides). A loop streaming
 * several arrays then takes one TLB entry per 2 MiB instead of per 4 KiB page. Free with
 * ot_aligned_free. */
OT_API void *ot_aligned_alloc_huge(size_t size);
/* A buffer a kernel streams beside others: huge-page backed as above, its start placed a
 * rotating multiple of 256 bytes (16 offsets, spread over 4 KiB) past the 2 MiB boundary, so
 * that element i of buffers allocated one after another does not share the low 12 address bits.
 * With equal low bits a load of one stream is held behind a store to another at the same 4 KiB
 * offset (4K aliasing): a one-thread Adam step over four 128M-element arrays ran 140–151 ms with
 * all four 2 MiB-aligned and 111–127 ms staggered. 256-byte aligned; free with ot_aligned_free. */
OT_API void *ot_stream_alloc(size_t size);

/* Fault injection: the nth allocation from now (1-based) and every later one fail until reset
 * with n = 0. Counts are process-wide. */
OT_API void ot_alloc_fail_after(int64_t n);
OT_API int64_t ot_alloc_count(void); /* successful + failed allocation requests so far */
OT_API int64_t ot_alloc_live(void);  /* allocations not yet freed (leak check in tests) */

/* ---------------------------------------------------------------------------------------------
 * Arena: bump allocation in chunks, freed all at once.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_arena ot_arena;

OT_API ot_arena *ot_arena_new(size_t chunk_size); /* NULL on allocation failure */
OT_API void ot_arena_free(ot_arena *a);           /* NULL is a no-op */
/* NULL on allocation failure; size 0 returns a valid unique pointer. */
OT_API void *ot_arena_alloc(ot_arena *a, size_t size, size_t align);
OT_API char *ot_arena_strndup(ot_arena *a, const char *s, size_t n);
OT_API size_t ot_arena_used(const ot_arena *a);
/* Chunks of 1 MiB or more freed with an arena are kept for later arenas, process-wide, up to a
 * limit (default OT_ARENA_CACHE_DEFAULT bytes): compiling a large module again then reuses
 * mapped memory instead of faulting in fresh pages. Sets the limit (0: keep none), frees what
 * is kept beyond it, and returns the previous limit. Thread-safe. */
#define OT_ARENA_CACHE_DEFAULT ((size_t)1 << 30)
OT_API size_t ot_arena_cache_limit(size_t bytes);
OT_API size_t ot_arena_cache_bytes(void); /* bytes of chunks kept now */

/* ---------------------------------------------------------------------------------------------
 * Thread pool
 *
 * A persistent pool of worker threads. ot_threadpool_run runs fn(ctx, ith, nth) on nth threads
 * (the caller is thread 0) and returns when all are done. Inside a run, ot_threadpool_barrier
 * waits for all nth threads. ot_parallel_for splits [0, n) into pieces (the schedule's) that the
 * threads claim as they come: the caller never waits for a worker that has not woken, it runs the
 * pieces left itself, so any thread may run any piece (ith says which thread runs it: at most
 * one call per ith at a time, for per-thread scratch). Waiting spins briefly and then blocks, so
 * an oversubscribed machine is not burned by spinning. Runs from different threads are
 * serialized.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_threadpool ot_threadpool;

typedef void (*ot_task_fn)(void *ctx, int ith, int nth);
/* [begin, end) over the index range; ith is the executing thread. */
typedef void (*ot_range_fn)(void *ctx, int64_t begin, int64_t end, int ith);

typedef enum ot_schedule {
    OT_SCHEDULE_STATIC = 0, /* nth contiguous pieces, a fixed partition (claimed by any thread) */
    OT_SCHEDULE_DYNAMIC,    /* chunks of `chunk` handed out by an atomic counter */
} ot_schedule;

/* nthreads <= 0 means the number of online CPUs. */
OT_API ot_status ot_threadpool_create(int nthreads, ot_threadpool **out);
OT_API void ot_threadpool_free(ot_threadpool *p); /* joins all workers; NULL is a no-op */
OT_API int ot_threadpool_size(const ot_threadpool *p);
OT_API void ot_threadpool_run(ot_threadpool *p, ot_task_fn fn, void *ctx);
OT_API void ot_threadpool_barrier(ot_threadpool *p, int ith);
OT_API void ot_parallel_for(ot_threadpool *p, int64_t n, int64_t chunk, ot_schedule sched,
                            ot_range_fn fn, void *ctx);
/* A process-wide pool created on first use (OPTITPU_THREADS or the CPU count). */
OT_API ot_threadpool *ot_threadpool_default(void);

/* ---------------------------------------------------------------------------------------------
 * Logging and clocks
 * ------------------------------------------------------------------------------------------- */

typedef enum ot_log_level {
    OT_LOG_DEBUG = 0,
    OT_LOG_INFO,
    OT_LOG_WARN,
    OT_LOG_ERROR,
} ot_log_level;

typedef void (*ot_log_fn)(void *ud, ot_log_level level, const char *msg);
/* The library is silent until a callback is set. fn NULL silences it again. */
OT_API void ot_set_log(ot_log_fn fn, void *ud, ot_log_level min_level);
OT_API void ot_log(ot_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
OT_API const char *ot_log_level_name(ot_log_level level);

OT_API uint64_t ot_now_ns(void);  /* CLOCK_MONOTONIC */
OT_API uint64_t ot_wall_ns(void); /* CLOCK_REALTIME, ns since the Unix epoch */

/* ---------------------------------------------------------------------------------------------
 * SHA-256 (OpenSSL EVP)
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_sha256 {
    void *evp; /* EVP_MD_CTX */
} ot_sha256;

OT_API ot_status ot_sha256_init(ot_sha256 *h);
OT_API ot_status ot_sha256_update(ot_sha256 *h, const void *data, size_t len);
/* Writes the digest and releases the context; also call it (out NULL) to abandon a hash. */
OT_API ot_status ot_sha256_final(ot_sha256 *h, uint8_t out[32]);
OT_API ot_status ot_sha256_digest(const void *data, size_t len, uint8_t out[32]);
/* Lower-case hex of n bytes into out (2n+1 bytes). */
OT_API void ot_hex(const uint8_t *bytes, size_t n, char *out);

/* ---------------------------------------------------------------------------------------------
 * NumPy .npy (format 1.0, 2.0, 3.0; C order; the dtypes above)
 * ------------------------------------------------------------------------------------------- */

/* Parses a complete .npy image. The header dict, shape and data length are validated before
 * any byte is trusted. On success *out owns a copy of the data. */
OT_API ot_status ot_npy_parse(const void *buf, size_t len, ot_tensor *out);
OT_API ot_status ot_npy_read_file(const char *path, ot_tensor *out);
/* Serializes to a malloc'd buffer (free with ot_free). Uses format 1.0 unless the header needs
 * 2.0. */
OT_API ot_status ot_npy_serialize(const ot_tensor *t, void **out, size_t *out_len);
OT_API ot_status ot_npy_write_file(const char *path, const ot_tensor *t);

/* Library version, "MAJOR.MINOR.PATCH". */
OT_API const char *ot_version(void);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_CORE_H */
