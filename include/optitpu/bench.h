/*
 * optitpu bench: the machine's own limits, measured in the same run as a benchmark, and the
 * common result format every benchmark prints.
 *
 *     ot_bench_limits lim;
 *     ot_bench_limits_options o = ot_bench_limits_options_default();
 *     o.what = OT_BENCH_LIMIT_STREAM;                 // only what this benchmark compares to
 *     OT_CHECK(ot_bench_limits_measure(&o, &lim));
 *     ot_bench_row r = {.bench = "optim", .case_name = "adam f32 16M", .metric = "GB/s",
 *                       .value = ours, .baseline = "STREAM triad", .baseline_value =
 * lim.triad_gbs}; r.ratio = r.value / r.baseline_value; ot_bench_print(&r, json);
 *
 * Convention (DESIGN.md, "Benchmarks"): a readable table row, or with json one JSON object per line
 * {"bench","case","metric","value","baseline","baseline_value","ratio"}; ratio > 1 means optitpu
 * did better than the baseline. Figures are medians of at least 5 repetitions after a warm-up. A
 * row without a baseline prints null for baseline, baseline_value and ratio; a value that is not
 * finite prints as null.
 *
 * What the limits measure (each the best of `reps` timed repetitions after one warm-up, because a
 * limit is what the machine can reach, as STREAM reports it):
 *   memcpy      libc memcpy of stream_bytes, split statically over the threads; bytes counted
 *               as read + written (2 x size), the same convention as STREAM copy.
 *   STREAM      copy c=a, scale b=s*c, add c=a+b, triad a=b+s*c over three f64 arrays of
 *               stream_bytes each (default: 4 x the sum of the distinct last-level caches
 *               in sysfs, at least 64 MiB), first touched by the thread that later works on
 *               each part (static partition); bytes counted as STREAM does (2 or 3 arrays per
 *               element). Results are validated.
 *   SHA-256     one thread, OpenSSL EVP over a 64 MiB buffer (a hash stream is sequential).
 *   disk        a temporary file in tmp_dir: write file_bytes sequentially then fsync (timed
 *               together); then fsync + posix_fadvise(DONTNEED) to drop it from the page cache and
 *               read it back sequentially. mincore() reports how much of the file was still in the
 *               page cache when the read began (read_resident_frac); a read from cache is reported
 *               as such, never as a device figure.
 *
 * Thread safety: ot_bench_limits_measure may run concurrently with other work but measures the
 * machine as it is (noisy neighbours lower the figures). ot_bench_print writes to stdout.
 */
#ifndef OPTITPU_BENCH_H
#define OPTITPU_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#include "optitpu/core.h"
#include "optitpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ot_bench_row {
    const char *bench;     /* "limits", "optim", "collectives", ... */
    const char *case_name; /* "adam f32 16M x1" */
    const char *metric;    /* "GB/s", "s", "us/kernel" */
    double value;
    const char *baseline; /* NULL when the row has no baseline */
    double baseline_value;
    double ratio; /* oriented so that > 1 means optitpu did better; 0 when no baseline */
} ot_bench_row;

/* Prints one row to stdout: a JSON line when json is true, else an aligned table line. */
OT_API void ot_bench_print(const ot_bench_row *r, bool json);
/* Prints the table header (no-op when json is true). */
OT_API void ot_bench_print_header(bool json);
/* Median of n values (sorts v in place); NaN when n == 0. */
OT_API double ot_bench_median(double *v, size_t n);
/* Untimed, before a timed section: returns once the process's threads are idle (spinning
 * workers of the previous section gone to sleep): under 0.1 CPU over a 5 ms window, at most 1 s.
 * Thread-safe; sleeps in 5 ms steps. */
OT_API void ot_bench_wait_idle(void);

/* Which limits to measure (bit mask). */
enum {
    OT_BENCH_LIMIT_MEMCPY = 1 << 0,
    OT_BENCH_LIMIT_STREAM = 1 << 1, /* copy, scale, add, triad */
    OT_BENCH_LIMIT_SHA256 = 1 << 2,
    OT_BENCH_LIMIT_DISK = 1 << 3, /* sequential write+fsync, read */
    OT_BENCH_LIMIT_ALL = 0xf,
};

typedef struct ot_bench_limits_options {
    unsigned what;       /* OT_BENCH_LIMIT_* mask */
    int threads;         /* memcpy and STREAM threads; <= 0: the default thread pool's size */
    size_t stream_bytes; /* bytes per STREAM array; 0: 4 x the last-level caches, >= 64 MiB */
    size_t file_bytes;   /* disk test file size; 0: 256 MiB */
    int reps;            /* timed repetitions after one warm-up (best of reps); <= 0: 5 */
    const char *tmp_dir; /* where the disk test file goes (default: $TMPDIR or /tmp) */
} ot_bench_limits_options;

typedef struct ot_bench_limits {
    double memcpy_gbs;
    double copy_gbs, scale_gbs, add_gbs, triad_gbs; /* STREAM, bytes counted as STREAM does */
    double sha256_gbs;
    double write_fsync_gbs, read_gbs;
    double read_resident_frac; /* fraction of the file in the page cache when the read began */
    int threads;               /* threads used for memcpy and STREAM */
    int reps;
    unsigned what;       /* what was measured (OT_BENCH_LIMIT_* mask) */
    size_t stream_bytes; /* bytes per STREAM array (and of the memcpy source) */
    size_t file_bytes;
    size_t sha256_bytes;
} ot_bench_limits;

OT_API ot_bench_limits_options ot_bench_limits_options_default(void);
/* Measures the selected limits; fields not selected are 0. Allocates its buffers (freed before
 * return, also on failure); returns OT_ERR_IO when the temporary file cannot be written or read,
 * OT_ERR_OUT_OF_MEMORY when the arrays do not fit, OT_ERR_INTERNAL when STREAM validation fails. */
OT_API ot_status ot_bench_limits_measure(const ot_bench_limits_options *o, ot_bench_limits *out);
/* The last-level cache this machine's CPUs use, bytes: the sum over the distinct highest-level
 * cache instances in sysfs (one per shared_cpu_list); without sysfs, the C library's L3 size
 * (on a VM that can be the whole host socket's); 0 when neither says. */
OT_API size_t ot_bench_llc_bytes(void);
/* Prints every measured figure of `l` as rows of bench "limits" (table or JSON lines). */
OT_API void ot_bench_limits_print(const ot_bench_limits *l, bool json);

/*
 * Graph-shape families: modules of about n instructions (ot_module_instr_count, every
 * computation counted) in the shapes user programs take, for the compiler's tests and
 * `optitpu bench compile --shape` (docs/compiler.md, "Graph-shape families"):
 *
 *   residual      x_i = op(x_{i-1}, x_{i-2}) (odd seeds: then op(., x_{i-3})), f32[16]
 *   braid         2-4 chains, each step reading its own chain and the next one
 *   fanout        one value read by about n/2.5 ops, half reduced alone, the rest an add tree
 *   fanin         about n/4 leaves into one concatenate and one balanced add tree
 *   nested        calls, conditionals and while loops nested about sqrt(n/10) deep
 *   bcast_reduce  row/column/full reductions (sum, max) broadcast back onto the matrix
 *   islands       about n/6 small independent clusters, each a root tuple element
 *   wide_tuple    a chain whose every value is an element of the root tuple (n/2 wide)
 *   many_params   about n/2 parameters (vectors, scalars, some unread) into an add tree
 *   dot_sandwich  elementwise stacks between dots and 3x3 convolutions
 *   random        seeded random DAG: in-degree 1-4, unary (transcendental too), binary,
 *                 broadcasts of reductions, converts, selects, concatenates, two shapes,
 *                 multi-use; outputs are the values nobody reads
 *   random_ops    seeded random DAG over every dtype (f16, bf16, f32, f64, s8, u8, s32, u32,
 *                 s64, pred, c64), ranks 0-5 with size-0 and size-1 dims: elementwise ops,
 *                 converts and bitcast-converts, reshape, transpose, broadcast, strided slice,
 *                 pad (negative, interior), reverse, concatenate, reduce, reduce-window
 *                 (dilated, padded), iota, dynamic-(update-)slice, gather, scatter, sort,
 *                 while, conditional, rng-bit-generator; f32 parameters
 *   fori_unrolled JAX's lowering of lax.fori_loop(unroll=True) over 1,000 iterations
 *                 (tests/data/compiler/fori_loop_unrolled_1000.hlo, about 4k instructions,
 *                 1,000 calls); larger n chains round(n / 4k) copies, (x, y) -> (x, y)
 *
 * The same (name, n, seed) gives the same module. The generators are loops (no recursion as
 * deep as the graph). Every entry parameter is an array; the root is a value or a tuple of
 * values. INVALID_ARGUMENT for an unknown name or n outside 16 .. 2^30.
 */
OT_API int ot_graph_family_count(void);
/* Family i's name and one-line description; NULL outside [0, count). */
OT_API const char *ot_graph_family_name(int i);
OT_API const char *ot_graph_family_description(int i);
OT_API ot_status ot_graph_family_build(const char *name, int64_t n, uint64_t seed, ot_module **out);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_BENCH_H */
