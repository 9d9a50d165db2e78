/* Internal utilities shared across the library (core_util.h): growable strings, whole-buffer
 * file descriptor I/O. */
#include "core/core_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "optitpu/core.h"

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
