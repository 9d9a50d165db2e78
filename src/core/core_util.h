/* Internal utilities of src/core shared by the other folders of the library (not installed):
 * a growable string with printf-style appends, whole-buffer reads and writes on a file
 * descriptor, the streaming copy of large buffers and the last-level cache's size. Every function
 * is safe to call from any thread on distinct objects. */
#ifndef OT_CORE_UTIL_H
#define OT_CORE_UTIL_H

#include <stdbool.h>
#include <stddef.h>

/* A growable NUL-terminated string. Zero-initialize ({0}) to start empty; p is NULL until the
 * first append. After an allocation failure oom is set and further appends do nothing: build
 * the whole text, then check oom once. The caller owns p and releases it with ot_free. */
typedef struct ot_strbuf {
    char *p;
    size_t n, cap; /* n: length without the NUL */
    bool oom;
} ot_strbuf;

/* Appends the formatted text (any length). */
void ot_strbuf_printf(ot_strbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Releases the text and empties b (ready for reuse). */
void ot_strbuf_free(ot_strbuf *b);

/* Reads exactly n bytes from fd into dst (read() at most 1 GiB a call, retried on EINTR).
 * Returns 0 when all n were read, the errno of a failed read, or -1 when the file ended first;
 * *got (may be NULL) receives the count read. */
int ot_read_full(int fd, void *dst, size_t n, size_t *got);

/* Writes the n bytes of src to fd (write() at most 1 GiB a call, retried on EINTR). Returns 0,
 * the errno of a failed write, or -1 when write() made no progress. fail_now (NULL: none) is a
 * fault-injection hook asked before every write() call: true fails that call with the errno it
 * set. */
int ot_write_full(int fd, const void *src, size_t n, bool (*fail_now)(void));

/* memcpy with non-temporal stores where SSE2 has them: a large result bypasses the caches (no
 * read for ownership of its lines), so writing it out runs at memcpy speed. The caller fences
 * (_mm_sfence) before another thread or process reads dst. */
void ot_stream_copy(void *dst, const void *src, size_t bytes);

/* The last-level cache this machine's CPUs use, in bytes: the sum over the distinct highest-level
 * cache instances in sysfs (one per shared_cpu_list). Without sysfs, the C library's L3 size (on
 * a VM that can be the whole host socket's, which only errs large); 0 when neither is known.
 * Reads a few sysfs files per call: callers keep the result. */
size_t ot_llc_bytes(void);

#endif /* OT_CORE_UTIL_H */
