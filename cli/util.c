#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    fprintf(stderr, "optitpu %s: ", cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(run 'optitpu help %s' for usage)\n", cmd);
    return CLI_USAGE;
}

int cli_fail(const char *cmd) {
    fprintf(stderr, "optitpu %s: %s\n", cmd, ot_last_error());
    return CLI_FAIL;
}

bool cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < min || v > max) return false;
    *out = v;
    return true;
}

bool cli_parse_double(const char *s, double *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

bool cli_parse_size(const char *s, int64_t *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0)) return false;
    double mul = 1;
    if (*end) {
        switch (*end) {
        case 'k':
        case 'K': mul = 1024.0; break;
        case 'm':
        case 'M': mul = 1024.0 * 1024; break;
        case 'g':
        case 'G': mul = 1024.0 * 1024 * 1024; break;
        default: return false;
        }
        end++;
        if (*end == 'i') end++;
        if (*end == 'B') end++;
        if (*end) return false;
    }
    double r = v * mul;
    if (r > 9.0e18) return false;
    *out = (int64_t)r;
    return true;
}

void cli_log(void *ud, ot_log_level level, const char *msg) {
    (void)ud;
    fprintf(stderr, "optitpu: %s: %s\n", ot_log_level_name(level), msg);
}

const char *cli_self_exe(void) {
    static char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return "optitpu";
    buf[n] = 0;
    return buf;
}
