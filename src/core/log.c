/* The log callback (silent by default) and clocks. */
#include "optitpu/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static ot_log_fn g_log;
static void *g_log_ud;
static ot_log_level g_log_min = OT_LOG_INFO;

void ot_set_log(ot_log_fn fn, void *ud, ot_log_level min_level) {
    g_log = fn;
    g_log_ud = ud;
    g_log_min = min_level;
}

void ot_log(ot_log_level level, const char *fmt, ...) {
    ot_log_fn fn = g_log;
    if (!fn || level < g_log_min) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fn(g_log_ud, level, msg);
}

const char *ot_log_level_name(ot_log_level level) {
    switch (level) {
    case OT_LOG_DEBUG: return "debug";
    case OT_LOG_INFO: return "info";
    case OT_LOG_WARN: return "warn";
    case OT_LOG_ERROR: return "error";
    }
    return "?";
}

static uint64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ot_now_ns(void) {
    return clock_ns(CLOCK_MONOTONIC);
}

uint64_t ot_wall_ns(void) {
    return clock_ns(CLOCK_REALTIME);
}
