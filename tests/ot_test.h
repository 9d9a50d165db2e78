/* A tiny test harness: typed asserts that print both sides, test registration by listing, and a
 * closing line "N passed, N failed, N skipped" that CI reads. Each test program includes this
 * once. A test that cannot run here (a tool or capability the machine lacks) calls OT_SKIP with
 * the reason; the program then exits with OT_TEST_SKIP_CODE (77, CTest's SKIP_RETURN_CODE for
 * every test, see CMakeLists.txt) unless another test failed, so a skip is never a pass. */
#ifndef OT_TEST_H
#define OT_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optitpu/core.h"

static int ot_test_failures_;   /* failures in the current test */
static int ot_test_assertions_; /* assertions evaluated overall */
static int ot_test_skipped_;    /* the current test called OT_SKIP */

/* splitmix64: advances *state and returns the next 64 random bits (test inputs; not crypto). */
static inline uint64_t ot_test_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The exit code of a test program that skipped something and failed nothing. */
#define OT_TEST_SKIP_CODE 77

/* Ends the current test function as skipped, printing why ("SKIP: chronyd not found ..."). */
#define OT_SKIP(...)                                                                               \
    do {                                                                                           \
        printf("  SKIP: ");                                                                        \
        printf(__VA_ARGS__);                                                                       \
        putchar('\n');                                                                             \
        ot_test_skipped_ = 1;                                                                      \
        return;                                                                                    \
    } while (0)

#define OT_T_FAIL_(...)                                                                            \
    do {                                                                                           \
        fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);                                          \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        ot_test_failures_++;                                                                       \
    } while (0)

#define EXPECT_TRUE(c)                                                                             \
    do {                                                                                           \
        ot_test_assertions_++;                                                                     \
        if (!(c)) OT_T_FAIL_("expected true: %s", #c);                                             \
    } while (0)

#define EXPECT_INT_EQ(a, b)                                                                        \
    do {                                                                                           \
        ot_test_assertions_++;                                                                     \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ != vb_) OT_T_FAIL_("%s == %s: %lld != %lld", #a, #b, va_, vb_);                    \
    } while (0)

#define EXPECT_U64_EQ(a, b)                                                                        \
    do {                                                                                           \
        ot_test_assertions_++;                                                                     \
        unsigned long long va_ = (unsigned long long)(a), vb_ = (unsigned long long)(b);           \
        if (va_ != vb_) OT_T_FAIL_("%s == %s: %llu != %llu", #a, #b, va_, vb_);                    \
    } while (0)

#define EXPECT_STR_EQ(a, b)                                                                        \
    do {                                                                                           \
        ot_test_assertions_++;                                                                     \
        const char *sa_ = (a), *sb_ = (b);                                                         \
        if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0)                                                 \
            OT_T_FAIL_("%s == %s: \"%s\" != \"%s\"", #a, #b, sa_ ? sa_ : "(null)",                 \
                       sb_ ? sb_ : "(null)");                                                      \
    } while (0)

#define EXPECT_STR_CONTAINS(hay, needle)                                                           \
    do {                                                                                           \
        ot_test_assertions_++;                                                                     \
        const char *h_ = (hay), *n_ = (needle);                                                    \
        if (!h_ || !strstr(h_, n_))                                                                \
            OT_T_FAIL_("\"%s\" does not contain \"%s\"", h_ ? h_ : "", n_);                        \
    } while (0)

#define EXPECT_NEAR(a, b, tol)                                                                     \
    do {                                                                                           \
        ot_test_assertions_++;                                                                     \
        double va_ = (double)(a), vb_ = (double)(b), t_ = (double)(tol);                           \
        if (!(fabs(va_ - vb_) <= t_))                                                              \
            OT_T_FAIL_("%s ~= %s: %.17g vs %.17g (tol %g)", #a, #b, va_, vb_, t_);                 \
    } while (0)

/* Status assertions print the thread-local error message on failure. */
#define EXPECT_OK(call)                                                                            \
    do {                                                                                           \
        ot_test_assertions_++;                                                                     \
        ot_status s_ = (call);                                                                     \
        if (s_ != OT_OK) OT_T_FAIL_("%s: %s (%s)", #call, ot_status_str(s_), ot_last_error());     \
    } while (0)

#define EXPECT_STATUS(call, want)                                                                  \
    do {                                                                                           \
        ot_test_assertions_++;                                                                     \
        ot_status s_ = (call);                                                                     \
        if (s_ != (want))                                                                          \
            OT_T_FAIL_("%s: got %s, want %s (%s)", #call, ot_status_str(s_), ot_status_str(want),  \
                       ot_last_error());                                                           \
    } while (0)

/* Aborts the current test function when the condition fails (for preconditions). */
#define ASSERT_TRUE(c)                                                                             \
    do {                                                                                           \
        ot_test_assertions_++;                                                                     \
        if (!(c)) {                                                                                \
            OT_T_FAIL_("required: %s", #c);                                                        \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define ASSERT_OK(call)                                                                            \
    do {                                                                                           \
        ot_test_assertions_++;                                                                     \
        ot_status s_ = (call);                                                                     \
        if (s_ != OT_OK) {                                                                         \
            OT_T_FAIL_("%s: %s (%s)", #call, ot_status_str(s_), ot_last_error());                  \
            return;                                                                                \
        }                                                                                          \
    } while (0)

typedef struct ot_test_case {
    const char *name;
    void (*fn)(void);
} ot_test_case;

#define OT_TEST(fn)                                                                                \
    { #fn, fn }

/* Runs the listed tests, prints one line per test and the closing "N passed, N failed, N
 * skipped" line; returns the process exit code: 1 when a test failed, else OT_TEST_SKIP_CODE when
 * one was skipped, else 0. Arguments: a name filter (run the tests whose names contain it) and any
 * number of `--exclude TEXT` (leave out the tests whose names contain TEXT). */
static inline int ot_test_main(int argc, char **argv, const ot_test_case *tests, size_t n) {
    int passed = 0, failed = 0, skipped = 0;
    const char *filter = NULL;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--exclude") && a + 1 < argc)
            a++;
        else
            filter = argv[a];
    }
    for (size_t i = 0; i < n; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        bool excluded = false;
        for (int a = 1; a + 1 < argc; a++)
            if (!strcmp(argv[a], "--exclude") && strstr(tests[i].name, argv[++a])) excluded = true;
        if (excluded) continue;
        ot_test_failures_ = 0;
        ot_test_skipped_ = 0;
        ot_clear_error();
        tests[i].fn();
        if (ot_test_failures_) {
            failed++;
            printf("FAIL %s\n", tests[i].name);
        } else if (ot_test_skipped_) {
            skipped++;
            printf("skip %s\n", tests[i].name);
        } else {
            passed++;
            printf("ok   %s\n", tests[i].name);
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (passed + failed + skipped == 0) {
        printf("no test matched\n");
        return 1;
    }
    return failed ? 1 : skipped ? OT_TEST_SKIP_CODE : 0;
}

#define OT_TEST_MAIN(...)                                                                          \
    int main(int argc, char **argv) {                                                              \
        static const ot_test_case tests_[] = {__VA_ARGS__};                                        \
        return ot_test_main(argc, argv, tests_, sizeof tests_ / sizeof tests_[0]);                 \
    }

#endif /* OT_TEST_H */
