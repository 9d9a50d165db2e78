/* Internal utilities shared across the library (core_util.h): growable strings, whole-buffer
 * file descriptor I/O, the streaming copy, the last-level cache's size. */
#include "core/core_util.h"

#include <errno.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "optitpu/core.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

void ot_strbuf_printf(ot_strbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) { /* at most twice: the text is measured (or written) once, then written */
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t nc = (b->cap ? b->cap * 2 : 256) + (size_t)k;
        char *np = ot_realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
}

void ot_strbuf_free(ot_strbuf *b) {
    ot_free(b->p);
    memset(b, 0, sizeof *b);
}

/* One read()/write() moves at most this much (Linux moves at most 2 GiB - 4 KiB a call). */
#define IO_MAX ((size_t)1 << 30)

int ot_read_full(int fd, void *dst, size_t n, size_t *got) {
    uint8_t *p = dst;
    size_t done = 0;
    int rc = 0;
    while (done < n) {
        ssize_t r = read(fd, p + done, n - done > IO_MAX ? IO_MAX : n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            rc = r < 0 ? errno : -1;
            break;
        }
        done += (size_t)r;
    }
    if (got) *got = done;
    return rc;
}

int ot_write_full(int fd, const void *src, size_t n, bool (*fail_now)(void)) {
    const uint8_t *p = src;
    while (n) {
        ssize_t w = fail_now && fail_now() ? -1 : write(fd, p, n > IO_MAX ? IO_MAX : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? errno : -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

void ot_stream_copy(void *dst, const void *src, size_t bytes) {
#if defined(__SSE2__)
    char *d = dst;
    const char *s = src;
    while (bytes && ((uintptr_t)d & 15)) *d++ = *s++, bytes--;
    for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    for (; bytes >= 16; bytes -= 16, d += 16, s += 16)
        _mm_stream_si128((__m128i *)d, _mm_loadu_si128((const __m128i *)s));
    memcpy(d, s, bytes);
#else
    memcpy(dst, src, bytes);
#endif
}

/* ---- the last-level cache (sysfs) ---- */

static size_t read_size_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf) return 0;
    if (*end == 'K')
        v *= 1024;
    else if (*end == 'M')
        v *= 1024 * 1024;
    return (size_t)v;
}

static void read_line(const char *path, char *buf, size_t n) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(buf, (int)n, f)) buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

/* The last-level cache this machine's CPUs use: the sum over the distinct highest-level cache
 * instances in sysfs (one per shared_cpu_list), as STREAM's sizing rule asks. Without sysfs, the
 * C library's L3 size (on a VM that can be the whole host socket's, which only errs large). */
size_t ot_llc_bytes(void) {
    enum { MAX_INST = 64 };
    char seen[MAX_INST][64];
    int nseen = 0, level_max = 0;
    size_t total = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_CONF);
    for (long cpu = 0; cpu < ncpu && cpu < 4096; cpu++) {
        for (int idx = 0; idx < 8; idx++) {
            char path[160], type[32], shared[64];
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/cache/index%d/level", cpu,
                     idx);
            size_t level = read_size_file(path);
            if (level == 0) break;
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/cache/index%d/type", cpu,
                     idx);
            read_line(path, type, sizeof type);
            if (strcmp(type, "Instruction") == 0 || (int)level < level_max) continue;
            if ((int)level > level_max) { /* a higher level: start over */
                level_max = (int)level;
                nseen = 0;
                total = 0;
            }
            snprintf(path, sizeof path,
                     "/sys/devices/system/cpu/cpu%ld/cache/index%d/shared_cpu_list", cpu, idx);
            read_line(path, shared, sizeof shared);
            bool dup = false;
            for (int k = 0; k < nseen && !dup; k++) dup = strcmp(seen[k], shared) == 0;
            if (dup || nseen == MAX_INST) continue;
            snprintf(seen[nseen++], sizeof seen[0], "%s", shared);
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/cache/index%d/size", cpu,
                     idx);
            total += read_size_file(path);
        }
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (total == 0) {
        long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
        if (l3 > 0) total = (size_t)l3;
    }
#endif
    return total;
}
