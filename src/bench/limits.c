/* The machine's own limits: memcpy, STREAM (McCalpin's four kernels), SHA-256 and sequential file
 * write+fsync / read. Each figure is the best of `reps` timed repetitions after one warm-up.
 * See include/optitpu/bench.h for what exactly each figure counts. */
#include "optitpu/bench.h"

#include "core/core_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MiB           ((size_t)1 << 20)
#define GiB           ((size_t)1 << 30)
#define SHA256_BYTES  (64 * MiB)
#define IO_CHUNK      (4 * MiB)
#define STREAM_SCALAR 3.0

ot_bench_limits_options ot_bench_limits_options_default(void) {
    ot_bench_limits_options o;
    memset(&o, 0, sizeof o);
    o.what = OT_BENCH_LIMIT_ALL;
    o.reps = 5;
    return o;
}

/* ---- sizes --------------------------------------------------------------------------------- */

/* The last-level cache (src/core's ot_llc_bytes: distinct sysfs instances summed). */
size_t ot_bench_llc_bytes(void) {
    return ot_llc_bytes();
}

static size_t default_stream_bytes(void) {
    size_t b = 4 * ot_bench_llc_bytes();
    if (b < 64 * MiB) b = 64 * MiB;
    if (b > GiB) b = GiB;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0) {
        size_t eighth = (size_t)pages / 8 * (size_t)psz; /* three arrays stay under 3/8 of RAM */
        if (b > eighth) b = eighth < 16 * MiB ? 16 * MiB : eighth;
    }
    return b;
}

/* ---- STREAM and memcpy --------------------------------------------------------------------- */

enum { K_INIT, K_MEMCPY, K_COPY, K_SCALE, K_ADD, K_TRIAD };

typedef struct stream_ctx {
    double *a, *b, *c;
    int kernel;
} stream_ctx;

static void stream_range(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    stream_ctx *s = arg;
    double *restrict a = s->a, *restrict b = s->b, *restrict c = s->c;
    const double q = STREAM_SCALAR;
    switch (s->kernel) {
    case K_INIT: /* first touch by the thread that will work on this part */
        for (int64_t j = lo; j < hi; j++) {
            a[j] = 1.0;
            c[j] = 0.0;
        }
        if (b)
            for (int64_t j = lo; j < hi; j++) b[j] = 2.0;
        break;
    case K_MEMCPY: memcpy(c + lo, a + lo, (size_t)(hi - lo) * sizeof(double)); break;
    case K_COPY:
        for (int64_t j = lo; j < hi; j++) c[j] = a[j];
        break;
    case K_SCALE:
        for (int64_t j = lo; j < hi; j++) b[j] = q * c[j];
        break;
    case K_ADD:
        for (int64_t j = lo; j < hi; j++) c[j] = a[j] + b[j];
        break;
    case K_TRIAD:
        for (int64_t j = lo; j < hi; j++) a[j] = b[j] + q * c[j];
        break;
    }
}

static double run_kernel(ot_threadpool *p, stream_ctx *s, int64_t n, int kernel) {
    s->kernel = kernel;
    uint64_t t0 = ot_now_ns();
    ot_parallel_for(p, n, 0, OT_SCHEDULE_STATIC, stream_range, s);
    return (double)(ot_now_ns() - t0) * 1e-9;
}

/* STREAM's own check: replay the scalar recurrence and compare the mean of each array. */
static ot_status stream_validate(const stream_ctx *s, int64_t n, int iters) {
    double aj = 1.0, bj = 2.0, cj = 0.0;
    for (int k = 0; k < iters; k++) {
        cj = aj;
        bj = STREAM_SCALAR * cj;
        cj = aj + bj;
        aj = bj + STREAM_SCALAR * cj;
    }
    const double *arr[3] = {s->a, s->b, s->c};
    const double want[3] = {aj, bj, cj};
    for (int k = 0; k < 3; k++) {
        /* sample a strided subset: cheap, and any skipped part of a kernel shows up */
        int64_t step = n / 4096 + 1;
        for (int64_t j = 0; j < n; j += step) {
            if (fabs(arr[k][j] - want[k]) > 1e-13 * fabs(want[k]))
                return ot_error(OT_ERR_INTERNAL,
                                "bench limits: STREAM validation failed: array %c[%lld] = %g, "
                                "expected %g",
                                "abc"[k], (long long)j, arr[k][j], want[k]);
        }
        if (fabs(arr[k][n - 1] - want[k]) > 1e-13 * fabs(want[k]))
            return ot_error(OT_ERR_INTERNAL, "bench limits: STREAM validation failed at the end");
    }
    return OT_OK;
}

static double best_gbs(double bytes, double best_s) {
    return best_s > 0 ? bytes / best_s * 1e-9 : NAN;
}

static ot_status measure_memory(const ot_bench_limits_options *o, ot_threadpool *p,
                                ot_bench_limits *out) {
    size_t bytes = out->stream_bytes;
    int64_t n = (int64_t)(bytes / sizeof(double));
    if (n < 1024)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "bench limits: stream_bytes %zu is too small (at least 8 KiB)", bytes);
    bool stream = o->what & OT_BENCH_LIMIT_STREAM;
    stream_ctx s = {0};
    ot_status rc = OT_OK;
    /* huge-page backed, as the device's buffers are (memory pool) */
    s.a = ot_stream_alloc((size_t)n * sizeof(double));
    s.b = stream ? ot_stream_alloc((size_t)n * sizeof(double)) : NULL;
    s.c = ot_stream_alloc((size_t)n * sizeof(double));
    if (!s.a || !s.c || (stream && !s.b)) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "bench limits: cannot allocate %d arrays of %zu bytes",
                      stream ? 3 : 2, bytes);
        goto done;
    }
    run_kernel(p, &s, n, K_INIT);

    double arr_bytes = (double)n * sizeof(double);
    if (o->what & OT_BENCH_LIMIT_MEMCPY) {
        double best = INFINITY;
        for (int r = 0; r <= out->reps; r++) {
            double t = run_kernel(p, &s, n, K_MEMCPY);
            if (r > 0 && t < best) best = t; /* r == 0 is the warm-up */
        }
        out->memcpy_gbs = best_gbs(2 * arr_bytes, best);
        if (memcmp(s.a, s.c, (size_t)n * sizeof(double)) != 0) {
            rc = ot_error(OT_ERR_INTERNAL, "bench limits: memcpy result differs from its source");
            goto done;
        }
    }
    if (stream) {
        if (o->what & OT_BENCH_LIMIT_MEMCPY)
            run_kernel(p, &s, n, K_INIT); /* back to STREAM's start */
        double best[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
        const int kernels[4] = {K_COPY, K_SCALE, K_ADD, K_TRIAD};
        int iters = 0;
        for (int r = 0; r <= out->reps; r++, iters++) {
            for (int k = 0; k < 4; k++) {
                double t = run_kernel(p, &s, n, kernels[k]);
                if (r > 0 && t < best[k]) best[k] = t;
            }
        }
        rc = stream_validate(&s, n, iters);
        if (rc != OT_OK) goto done;
        out->copy_gbs = best_gbs(2 * arr_bytes, best[0]);
        out->scale_gbs = best_gbs(2 * arr_bytes, best[1]);
        out->add_gbs = best_gbs(3 * arr_bytes, best[2]);
        out->triad_gbs = best_gbs(3 * arr_bytes, best[3]);
    }
done:
    ot_aligned_free(s.a);
    if (stream) ot_aligned_free(s.b);
    ot_aligned_free(s.c);
    return rc;
}

/* ---- SHA-256 ------------------------------------------------------------------------------- */

static ot_status measure_sha256(ot_bench_limits *out) {
    size_t n = SHA256_BYTES;
    uint8_t *buf = ot_aligned_alloc(OT_ALIGNMENT, n);
    if (!buf) return ot_error(OT_ERR_OUT_OF_MEMORY, "bench limits: cannot allocate %zu bytes", n);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(i * 2654435761u >> 13);
    double best = INFINITY;
    ot_status rc = OT_OK;
    uint8_t d[32];
    for (int r = 0; r <= out->reps; r++) {
        uint64_t t0 = ot_now_ns();
        rc = ot_sha256_digest(buf, n, d);
        double t = (double)(ot_now_ns() - t0) * 1e-9;
        if (rc != OT_OK) break;
        if (r > 0 && t < best) best = t;
    }
    ot_aligned_free(buf);
    OT_CHECK(rc);
    out->sha256_bytes = n;
    out->sha256_gbs = best_gbs((double)n, best);
    return OT_OK;
}

/* ---- sequential file write+fsync and read -------------------------------------------------- */

static ot_status write_all(int fd, const uint8_t *buf, size_t total, const char *path) {
    size_t done = 0;
    while (done < total) {
        size_t off = done % IO_CHUNK, k = IO_CHUNK - off;
        if (k > total - done) k = total - done;
        ssize_t w = write(fd, buf + off, k);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return ot_error(OT_ERR_IO, "bench limits: write %s: %s", path,
                            w < 0 ? strerror(errno) : "no progress");
        done += (size_t)w;
    }
    return OT_OK;
}

static ot_status read_all(int fd, uint8_t *buf, size_t total, const char *path) {
    size_t done = 0;
    while (done < total) {
        ssize_t r = read(fd, buf, IO_CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return ot_error(OT_ERR_IO, "bench limits: read %s: %s", path, strerror(errno));
        if (r == 0)
            return ot_error(OT_ERR_IO, "bench limits: %s is short: %zu of %zu bytes", path, done,
                            total);
        done += (size_t)r;
    }
    return OT_OK;
}

/* Fraction of the file's pages resident in the page cache (mincore over a read-only mapping). */
static double resident_fraction(int fd, size_t len) {
    long psz = sysconf(_SC_PAGESIZE);
    if (psz <= 0 || len == 0) return NAN;
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return NAN;
    size_t pages = (len + (size_t)psz - 1) / (size_t)psz;
    unsigned char *vec = ot_malloc(pages);
    double frac = NAN;
    if (vec && mincore(m, len, vec) == 0) {
        size_t res = 0;
        for (size_t i = 0; i < pages; i++) res += vec[i] & 1;
        frac = (double)res / (double)pages;
    }
    ot_free(vec);
    munmap(m, len);
    return frac;
}

static ot_status measure_disk(const ot_bench_limits_options *o, ot_bench_limits *out) {
    const char *dir = o->tmp_dir;
    if (!dir || !*dir) dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    size_t total = out->file_bytes;
    if (total < IO_CHUNK)
        return ot_error(OT_ERR_INVALID_ARGUMENT,
                        "bench limits: file_bytes %zu is too small (at least 4 MiB)", total);
    size_t plen = strlen(dir) + 32;
    char *path = ot_malloc(plen);
    uint8_t *buf = ot_aligned_alloc(4096, IO_CHUNK);
    ot_status rc = OT_OK;
    int fd = -1;
    if (!path || !buf) {
        rc = ot_error(OT_ERR_OUT_OF_MEMORY, "bench limits: cannot allocate the I/O buffer");
        goto done;
    }
    snprintf(path, plen, "%s/optitpu-limits-XXXXXX", dir);
    fd = mkstemp(path);
    if (fd < 0) {
        rc = ot_error(OT_ERR_IO, "bench limits: cannot create a file in %s: %s (set TMPDIR)", dir,
                      strerror(errno));
        goto done;
    }
    unlink(path); /* gone when closed, even if we fail */
    /* incompressible-looking content, so a compressing file system cannot shortcut */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i + 8 <= IO_CHUNK; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(buf + i, &x, 8);
    }
    /* fewer repetitions than memory: each one moves the whole file through the device */
    int reps = out->reps < 3 ? out->reps : 3;
    double best_w = INFINITY, best_r = INFINITY, resident = 0;
    for (int r = 0; r <= reps; r++) {
        if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
            rc = ot_error(OT_ERR_IO, "bench limits: truncate %s: %s", path, strerror(errno));
            goto done;
        }
        uint64_t t0 = ot_now_ns();
        OT_CHECK_GOTO(write_all(fd, buf, total, path), rc, done);
        if (fsync(fd) != 0) {
            rc = ot_error(OT_ERR_IO, "bench limits: fsync %s: %s", path, strerror(errno));
            goto done;
        }
        double tw = (double)(ot_now_ns() - t0) * 1e-9;
        /* the pages are clean now; ask the kernel to drop them so the read hits the device */
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        double res = resident_fraction(fd, total);
        if (lseek(fd, 0, SEEK_SET) != 0) {
            rc = ot_error(OT_ERR_IO, "bench limits: seek %s: %s", path, strerror(errno));
            goto done;
        }
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        t0 = ot_now_ns();
        OT_CHECK_GOTO(read_all(fd, buf, total, path), rc, done);
        double tr = (double)(ot_now_ns() - t0) * 1e-9;
        if (r == 0) continue; /* warm-up */
        if (tw < best_w) best_w = tw;
        if (tr < best_r) {
            best_r = tr;
            resident = res;
        }
    }
    out->write_fsync_gbs = best_gbs((double)total, best_w);
    out->read_gbs = best_gbs((double)total, best_r);
    out->read_resident_frac = resident;
done:
    if (fd >= 0) close(fd);
    ot_aligned_free(buf);
    ot_free(path);
    return rc;
}

/* ---- entry points -------------------------------------------------------------------------- */

ot_status ot_bench_limits_measure(const ot_bench_limits_options *o, ot_bench_limits *out) {
    memset(out, 0, sizeof *out);
    ot_bench_limits_options def = ot_bench_limits_options_default();
    if (!o) o = &def;
    if (o->what & ~(unsigned)OT_BENCH_LIMIT_ALL)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "bench limits: unknown bits in what (0x%x)",
                        o->what);
    if (o->threads > 1024)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "bench limits: %d threads exceeds 1024",
                        o->threads);
    out->what = o->what;
    out->reps = o->reps > 0 ? o->reps : 5;
    out->stream_bytes = o->stream_bytes ? o->stream_bytes : default_stream_bytes();
    out->stream_bytes -= out->stream_bytes % OT_ALIGNMENT;
    out->file_bytes = o->file_bytes ? o->file_bytes : 256 * MiB;

    ot_status rc = OT_OK;
    if (o->what & (OT_BENCH_LIMIT_MEMCPY | OT_BENCH_LIMIT_STREAM)) {
        ot_threadpool *own = NULL, *p;
        if (o->threads > 0) {
            OT_CHECK(ot_threadpool_create(o->threads, &own));
            p = own;
        } else {
            p = ot_threadpool_default();
        }
        out->threads = ot_threadpool_size(p);
        rc = measure_memory(o, p, out);
        ot_threadpool_free(own);
        OT_CHECK(rc);
    }
    if (o->what & OT_BENCH_LIMIT_SHA256) OT_CHECK(measure_sha256(out));
    if (o->what & OT_BENCH_LIMIT_DISK) OT_CHECK(measure_disk(o, out));
    return OT_OK;
}

static void human_size(char *buf, size_t n, size_t bytes) {
    if (bytes >= GiB && bytes % GiB == 0)
        snprintf(buf, n, "%zu GiB", bytes / GiB);
    else if (bytes >= MiB)
        snprintf(buf, n, "%.0f MiB", (double)bytes / (double)MiB);
    else
        snprintf(buf, n, "%zu B", bytes);
}

static void row(const char *case_name, double v, bool json) {
    ot_bench_row r = {.bench = "limits", .case_name = case_name, .metric = "GB/s", .value = v};
    ot_bench_print(&r, json);
}

void ot_bench_limits_print(const ot_bench_limits *l, bool json) {
    char c[160], sz[32];
    human_size(sz, sizeof sz, l->stream_bytes);
    const char *th = l->threads == 1 ? "thread" : "threads";
    if (l->what & OT_BENCH_LIMIT_MEMCPY) {
        snprintf(c, sizeof c, "memcpy %s, %d %s (read+write bytes)", sz, l->threads, th);
        row(c, l->memcpy_gbs, json);
    }
    if (l->what & OT_BENCH_LIMIT_STREAM) {
        const char *names[4] = {"copy", "scale", "add", "triad"};
        const double v[4] = {l->copy_gbs, l->scale_gbs, l->add_gbs, l->triad_gbs};
        for (int k = 0; k < 4; k++) {
            snprintf(c, sizeof c, "STREAM %s f64 3x%s, %d %s", names[k], sz, l->threads, th);
            row(c, v[k], json);
        }
    }
    if (l->what & OT_BENCH_LIMIT_SHA256) {
        human_size(sz, sizeof sz, l->sha256_bytes);
        snprintf(c, sizeof c, "sha256 %s, 1 thread (OpenSSL EVP)", sz);
        row(c, l->sha256_gbs, json);
    }
    if (l->what & OT_BENCH_LIMIT_DISK) {
        human_size(sz, sizeof sz, l->file_bytes);
        snprintf(c, sizeof c, "file write+fsync %s, sequential", sz);
        row(c, l->write_fsync_gbs, json);
        double res = l->read_resident_frac;
        if (isnan(res))
            snprintf(c, sizeof c, "file read %s after fadvise DONTNEED (cache state unknown)", sz);
        else if (res < 0.01)
            snprintf(c, sizeof c, "file read %s, from the device (page cache dropped)", sz);
        else
            snprintf(c, sizeof c, "file read %s, %.0f%% from the page cache", sz, 100 * res);
        row(c, l->read_gbs, json);
    }
}
