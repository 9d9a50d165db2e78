/* bench: median, the row printer (table and JSON lines, read back with jansson), and the limits
 * measurement on small sizes (figures positive and finite, bad options refused, no leak). */
#include "ot_test.h"

#include <jansson.h>
#include <unistd.h>

#include "optitpu/bench.h"

static void test_median(void) {
    double a[] = {5, 1, 4, 2, 3};
    EXPECT_NEAR(ot_bench_median(a, 5), 3, 0);
    double b[] = {4, 1, 3, 2};
    EXPECT_NEAR(ot_bench_median(b, 4), 2.5, 0);
    double c[] = {7};
    EXPECT_NEAR(ot_bench_median(c, 1), 7, 0);
    EXPECT_TRUE(isnan(ot_bench_median(NULL, 0)));
    double d[] = {NAN, 1, 2}; /* NaNs sort last */
    EXPECT_NEAR(ot_bench_median(d, 3), 2, 0);
}

/* Runs fn with stdout redirected into a temporary file and returns what it printed (malloc'd). */
static char *capture_stdout(void (*fn)(void *), void *arg) {
    fflush(stdout);
    FILE *tmp = tmpfile();
    if (!tmp) return NULL;
    int saved = dup(STDOUT_FILENO);
    dup2(fileno(tmp), STDOUT_FILENO);
    fn(arg);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    long n = ftell(tmp);
    if (n < 0) n = lseek(fileno(tmp), 0, SEEK_END);
    char *buf = calloc(1, (size_t)n + 1);
    lseek(fileno(tmp), 0, SEEK_SET);
    if (buf && read(fileno(tmp), buf, (size_t)n) != n) buf[0] = '\0';
    fclose(tmp);
    return buf;
}

static void print_rows_json(void *arg) {
    (void)arg;
    ot_bench_row r = {.bench = "optim",
                      .case_name = "adam \"f32\"\n16M\\x1",
                      .metric = "GB/s",
                      .value = 41.2,
                      .baseline = "hand-fused C loop",
                      .baseline_value = 45.0,
                      .ratio = 41.2 / 45.0};
    ot_bench_print_header(true); /* no output in JSON mode */
    ot_bench_print(&r, true);
    ot_bench_row nb = {.bench = "limits", .case_name = "x", .metric = "s", .value = NAN};
    ot_bench_print(&nb, true);
}

static void print_rows_table(void *arg) {
    (void)arg;
    ot_bench_row r = {.bench = "optim", .case_name = "adam", .metric = "GB/s", .value = 41.25};
    ot_bench_print_header(false);
    ot_bench_print(&r, false);
}

static void test_print_json_lines(void) {
    char *out = capture_stdout(print_rows_json, NULL);
    ASSERT_TRUE(out != NULL);
    char *nl = strchr(out, '\n');
    ASSERT_TRUE(nl != NULL);
    *nl = '\0';
    json_error_t err;
    json_t *o = json_loads(out, 0, &err);
    ASSERT_TRUE(o != NULL);
    EXPECT_STR_EQ(json_string_value(json_object_get(o, "bench")), "optim");
    EXPECT_STR_EQ(json_string_value(json_object_get(o, "case")), "adam \"f32\"\n16M\\x1");
    EXPECT_STR_EQ(json_string_value(json_object_get(o, "baseline")), "hand-fused C loop");
    EXPECT_NEAR(json_real_value(json_object_get(o, "value")), 41.2, 1e-9);
    EXPECT_NEAR(json_real_value(json_object_get(o, "baseline_value")), 45.0, 1e-9);
    EXPECT_NEAR(json_real_value(json_object_get(o, "ratio")), 41.2 / 45.0, 1e-5);
    EXPECT_INT_EQ(json_object_size(o), 7);
    json_decref(o);
    /* second line: no baseline -> nulls; NaN value -> null */
    o = json_loads(nl + 1, JSON_DISABLE_EOF_CHECK, &err);
    ASSERT_TRUE(o != NULL);
    EXPECT_TRUE(json_is_null(json_object_get(o, "value")));
    EXPECT_TRUE(json_is_null(json_object_get(o, "baseline")));
    EXPECT_TRUE(json_is_null(json_object_get(o, "baseline_value")));
    EXPECT_TRUE(json_is_null(json_object_get(o, "ratio")));
    json_decref(o);
    free(out);

    out = capture_stdout(print_rows_table, NULL);
    ASSERT_TRUE(out != NULL);
    EXPECT_STR_CONTAINS(out, "bench");
    EXPECT_STR_CONTAINS(out, "41.250");
    free(out);
}

static void test_limits_small(void) {
    ot_bench_limits_options o = ot_bench_limits_options_default();
    EXPECT_INT_EQ(o.what, OT_BENCH_LIMIT_ALL);
    o.stream_bytes = 1 << 20;
    o.file_bytes = 4 << 20;
    o.reps = 2;
    o.threads = 2;
    int64_t live0 = ot_alloc_live();
    ot_bench_limits l;
    ASSERT_OK(ot_bench_limits_measure(&o, &l));
    EXPECT_INT_EQ(ot_alloc_live(), live0);
    EXPECT_INT_EQ(l.threads, 2);
    EXPECT_INT_EQ(l.stream_bytes, 1 << 20);
    double v[] = {l.memcpy_gbs, l.copy_gbs,   l.scale_gbs,       l.add_gbs,
                  l.triad_gbs,  l.sha256_gbs, l.write_fsync_gbs, l.read_gbs};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) EXPECT_TRUE(isfinite(v[i]) && v[i] > 0);
    EXPECT_TRUE(isnan(l.read_resident_frac) ||
                (l.read_resident_frac >= 0 && l.read_resident_frac <= 1));

    /* only what was asked for */
    o.what = OT_BENCH_LIMIT_STREAM;
    ASSERT_OK(ot_bench_limits_measure(&o, &l));
    EXPECT_TRUE(l.triad_gbs > 0);
    EXPECT_TRUE(l.memcpy_gbs == 0 && l.sha256_gbs == 0 && l.read_gbs == 0);
    o.what = OT_BENCH_LIMIT_MEMCPY;
    o.threads = 3;
    ASSERT_OK(ot_bench_limits_measure(&o, &l));
    EXPECT_TRUE(l.memcpy_gbs > 0 && l.copy_gbs == 0);
    EXPECT_INT_EQ(l.threads, 3);
}

static void test_limits_bad_options(void) {
    ot_bench_limits_options o = ot_bench_limits_options_default();
    ot_bench_limits l;
    o.what = 0x100;
    EXPECT_STATUS(ot_bench_limits_measure(&o, &l), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "unknown bits");
    o = ot_bench_limits_options_default();
    o.what = OT_BENCH_LIMIT_STREAM;
    o.stream_bytes = 100;
    EXPECT_STATUS(ot_bench_limits_measure(&o, &l), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STR_CONTAINS(ot_last_error(), "too small");
    o = ot_bench_limits_options_default();
    o.what = OT_BENCH_LIMIT_DISK;
    o.file_bytes = 4 << 20;
    o.tmp_dir = "/nonexistent/optitpu-test-dir";
    EXPECT_STATUS(ot_bench_limits_measure(&o, &l), OT_ERR_IO);
    EXPECT_STR_CONTAINS(ot_last_error(), "/nonexistent/optitpu-test-dir");
}

/* Every allocation the measurement makes can fail; each failure is reported and nothing leaks. */
static void test_limits_alloc_failure(void) {
    ot_bench_limits_options o = ot_bench_limits_options_default();
    o.stream_bytes = 64 << 10;
    o.file_bytes = 4 << 20;
    o.reps = 1;
    o.threads = 2;
    o.what =
        OT_BENCH_LIMIT_MEMCPY | OT_BENCH_LIMIT_STREAM | OT_BENCH_LIMIT_SHA256 | OT_BENCH_LIMIT_DISK;
    int failures = 0;
    for (int n = 1; n < 64; n++) {
        int64_t live0 = ot_alloc_live();
        ot_bench_limits l;
        ot_alloc_fail_after(n);
        ot_status s = ot_bench_limits_measure(&o, &l);
        ot_alloc_fail_after(0);
        EXPECT_INT_EQ(ot_alloc_live(), live0);
        if (s == OT_OK) break;
        failures++;
        EXPECT_INT_EQ(s, OT_ERR_OUT_OF_MEMORY);
    }
    EXPECT_TRUE(failures >= 5); /* pool, three arrays, hash buffer, I/O buffers */
}

OT_TEST_MAIN(OT_TEST(test_median), OT_TEST(test_print_json_lines), OT_TEST(test_limits_small),
             OT_TEST(test_limits_bad_options), OT_TEST(test_limits_alloc_failure))
