/* Status names and the thread-local last-error message. */
#include "optitpu/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OT_ERRMSG_MAX 1024

static _Thread_local char tl_msg[OT_ERRMSG_MAX];

static const char *const status_names[] = {
    "OK",
    "INVALID_ARGUMENT",
    "SHAPE_MISMATCH",
    "OUT_OF_MEMORY",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "CORRUPT_DATA",
    "IO",
    "TIMEOUT",
    "PEER_FAILED",
    "CANCELLED",
    "UNSUPPORTED_HARDWARE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "FAILED_PRECONDITION",
    "OUT_OF_RANGE",
    "RESOURCE_EXHAUSTED",
};
_Static_assert(sizeof(status_names) / sizeof(status_names[0]) == 1 - OT_STATUS_MIN,
               "status name table out of sync with ot_status");

const char *ot_status_str(ot_status s) {
    if (s > 0 || s < OT_STATUS_MIN) return "UNKNOWN_STATUS";
    return status_names[-s];
}

ot_status ot_error(ot_status code, const char *fmt, ...) {
    int n = snprintf(tl_msg, sizeof tl_msg, "%s: ", ot_status_str(code));
    if (n < 0) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_msg + n, sizeof tl_msg - (size_t)n, fmt, ap);
    va_end(ap);
    /* a saved message raised again (ot_error(code, "%s", saved)) keeps one "CODE: " */
    if (n > 0 && strncmp(tl_msg + n, tl_msg, (size_t)n) == 0)
        memmove(tl_msg, tl_msg + n, strlen(tl_msg + n) + 1);
    return code;
}

ot_status ot_error_wrap(ot_status code, const char *fmt, ...) {
    char prefix[OT_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[OT_ERRMSG_MAX];
    memcpy(old, tl_msg, sizeof old);
    /* keep "CODE: " at the front: "CODE: context: detail" */
    const char *detail = old;
    size_t cl = strlen(ot_status_str(code));
    if (strncmp(old, ot_status_str(code), cl) == 0 && old[cl] == ':' && old[cl + 1] == ' ')
        detail = old + cl + 2;
    /* assemble piecewise: the parts may together exceed the buffer and are then cut */
    size_t n = 0;
    const char *parts[] = {ot_status_str(code), ": ", prefix, ": ", detail};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        size_t k = strlen(parts[i]);
        if (k > sizeof tl_msg - 1 - n) k = sizeof tl_msg - 1 - n;
        memcpy(tl_msg + n, parts[i], k);
        n += k;
    }
    tl_msg[n] = '\0';
    return code;
}

const char *ot_last_error(void) {
    return tl_msg;
}

void ot_clear_error(void) {
    tl_msg[0] = '\0';
}

void ot_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "optitpu: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}

const char *ot_version(void) {
    return OPTITPU_VERSION_STRING;
}
