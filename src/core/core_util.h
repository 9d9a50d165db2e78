/* Internal utilities of src/core shared by the other folders of the library (not installed):
 * a growable string with printf-style appends, and whole-buffer reads and writes on a file
 * descriptor. Every function is safe to call from any thread on distinct objects. */
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

#endif /* OT_CORE_UTIL_H */
