/* The test harness itself (tests/ot_test.h): a skipped test is never a passed one. Each case runs
 * ot_test_main over made-up tests in a child process and checks its exit code: 0 when everything
 * passed, OT_TEST_SKIP_CODE (77, CTest's SKIP_RETURN_CODE) when something was skipped and nothing
 * failed, 1 when anything failed; `--exclude TEXT` leaves tests out and a filter picks them. */
#include "ot_test.h"

#include <sys/wait.h>
#include <unistd.h>

static void passes(void) {
    EXPECT_TRUE(1 + 1 == 2);
}
static void fails(void) {
    EXPECT_TRUE(1 + 1 == 3);
}
static void skips_ipv6(void) {
    OT_SKIP("made-up missing capability");
}
static void skips_then_would_fail(void) {
    OT_SKIP("skipped before any check");
    EXPECT_TRUE(0); /* never reached */
}

/* exit code of ot_test_main(args..., tests) in a child (its output, the made-up failure too,
 * goes to /dev/null) */
static int run(const ot_test_case *tests, size_t n, const char *a1, const char *a2,
               const char *a3) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(99);
        char *argv[] = {"harness", (char *)a1, (char *)a2, (char *)a3, NULL};
        int argc = a3 ? 4 : a2 ? 3 : a1 ? 2 : 1;
        ot_test_failures_ = 0;
        ot_test_skipped_ = 0;
        _exit(ot_test_main(argc, argv, tests, n));
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

static void test_exit_codes(void) {
    const ot_test_case pass[] = {OT_TEST(passes)};
    const ot_test_case skip[] = {OT_TEST(skips_ipv6)};
    const ot_test_case pass_skip[] = {OT_TEST(passes), OT_TEST(skips_ipv6)};
    const ot_test_case fail_skip[] = {OT_TEST(skips_ipv6), OT_TEST(fails), OT_TEST(passes)};
    const ot_test_case early[] = {OT_TEST(skips_then_would_fail)};
    EXPECT_INT_EQ(run(pass, 1, NULL, NULL, NULL), 0);
    EXPECT_INT_EQ(run(skip, 1, NULL, NULL, NULL), OT_TEST_SKIP_CODE);
    EXPECT_INT_EQ(run(pass_skip, 2, NULL, NULL, NULL), OT_TEST_SKIP_CODE);
    EXPECT_INT_EQ(run(fail_skip, 3, NULL, NULL, NULL), 1);
    EXPECT_INT_EQ(run(early, 1, NULL, NULL, NULL), OT_TEST_SKIP_CODE);
    EXPECT_INT_EQ(OT_TEST_SKIP_CODE, 77);
}

static void test_filter_and_exclude(void) {
    const ot_test_case pass_skip[] = {OT_TEST(passes), OT_TEST(skips_ipv6)};
    /* CMakeLists.txt runs `prog --exclude ipv6` and `prog ipv6` as two CTest tests */
    EXPECT_INT_EQ(run(pass_skip, 2, "--exclude", "ipv6", NULL), 0);
    EXPECT_INT_EQ(run(pass_skip, 2, "ipv6", NULL, NULL), OT_TEST_SKIP_CODE);
    EXPECT_INT_EQ(run(pass_skip, 2, "passes", NULL, NULL), 0);
    EXPECT_INT_EQ(run(pass_skip, 2, "ipv6", "--exclude", "ipv6"), 1); /* nothing left: no match */
    EXPECT_INT_EQ(run(pass_skip, 2, "nothing-matches", NULL, NULL), 1);
}

OT_TEST_MAIN(OT_TEST(test_exit_codes), OT_TEST(test_filter_and_exclude))
