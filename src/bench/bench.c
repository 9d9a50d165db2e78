/* The common benchmark row format (an aligned table, or one JSON object per line, jansson) and
 * the idle wait before a timed section. */
#include "optitpu/bench.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    /* NaNs sort last so that they never become the median of mostly good values */
    if (isnan(x) || isnan(y)) return isnan(x) - isnan(y);
    return (x > y) - (x < y);
}

double ot_bench_median(double *v, size_t n) {
    if (n == 0) return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double seconds(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void ot_bench_wait_idle(void) {
    for (int i = 0; i < 200; i++) {
        double c0 = seconds(CLOCK_PROCESS_CPUTIME_ID), t0 = seconds(CLOCK_MONOTONIC);
        nanosleep(&(struct timespec){0, 5000000}, NULL);
        double wall = seconds(CLOCK_MONOTONIC) - t0;
        if (seconds(CLOCK_PROCESS_CPUTIME_ID) - c0 < 0.1 * wall) return;
    }
}

void ot_bench_print_header(bool json) {
    if (json) return;
    printf("%-12s %-58s %-6s %10s  %-24s %12s %8s\n", "bench", "case", "metric", "value",
           "baseline", "baseline", "ratio");
    fflush(stdout);
}

/* A finite double as a JSON real, anything else as null (JSON has no NaN or infinity). */
static json_t *real_or_null(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *str_or_null(const char *s) {
    return s ? json_string(s) : json_null();
}

static void print_json(const ot_bench_row *r) {
    bool has_base = r->baseline != NULL;
    json_t *o = json_object();
    if (!o) return;
    /* json_object_set_new takes ownership of the value even when it fails */
    int bad = 0;
    bad |= json_object_set_new(o, "bench", str_or_null(r->bench));
    bad |= json_object_set_new(o, "case", str_or_null(r->case_name));
    bad |= json_object_set_new(o, "metric", str_or_null(r->metric));
    bad |= json_object_set_new(o, "value", real_or_null(r->value));
    bad |= json_object_set_new(o, "baseline", str_or_null(r->baseline));
    bad |= json_object_set_new(o, "baseline_value",
                               has_base ? real_or_null(r->baseline_value) : json_null());
    bad |= json_object_set_new(o, "ratio", has_base ? real_or_null(r->ratio) : json_null());
    /* jansson keeps insertion order; 6 significant digits are more than any timing carries */
    char *s = bad ? NULL : json_dumps(o, JSON_REAL_PRECISION(6));
    json_decref(o);
    if (!s) return;
    puts(s);
    free(s);
}

static void fmt_num(char *buf, size_t n, double v) {
    if (!isfinite(v))
        snprintf(buf, n, "-");
    else if (v != 0 && (fabs(v) >= 1e7 || fabs(v) < 1e-3))
        snprintf(buf, n, "%.4g", v);
    else
        snprintf(buf, n, "%.3f", v);
}

void ot_bench_print(const ot_bench_row *r, bool json) {
    if (json) {
        print_json(r);
    } else {
        char v[32], bv[32], ra[32];
        fmt_num(v, sizeof v, r->value);
        if (r->baseline) {
            fmt_num(bv, sizeof bv, r->baseline_value);
            fmt_num(ra, sizeof ra, r->ratio);
        } else {
            snprintf(bv, sizeof bv, "-");
            snprintf(ra, sizeof ra, "-");
        }
        printf("%-12s %-58s %-6s %10s  %-24s %12s %8s\n", r->bench ? r->bench : "",
               r->case_name ? r->case_name : "", r->metric ? r->metric : "", v,
               r->baseline ? r->baseline : "-", bv, ra);
    }
    fflush(stdout);
}
