/* Slice leases (pod.h): jobs sharing one pod preset through lock files get disjoint best-fit
 * slices, a full pod refuses with the largest free box, a released or dead holder's devices are
 * free again, reserve marks a given box, and PRESET:SHAPE parses strictly. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "optitpu/pod.h"
#include "ot_test.h"

static char dir[64];

static void make_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/ot_slice_lease_XXXXXX");
    if (!mkdtemp(dir)) abort();
}

static void remove_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

static void test_spec_parse(void) {
    char p[32];
    int sh[3];
    EXPECT_OK(ot_slice_spec_parse("v4-2x2x2:2x2x1", p, sizeof p, sh));
    EXPECT_STR_EQ(p, "v4-2x2x2");
    EXPECT_INT_EQ(sh[0], 2);
    EXPECT_INT_EQ(sh[1], 2);
    EXPECT_INT_EQ(sh[2], 1);
    EXPECT_OK(ot_slice_spec_parse("torus-2x4:4", p, sizeof p, sh));
    EXPECT_INT_EQ(sh[0] * 10 + sh[1] + sh[2], 42);
    const char *bad[] = {
        "v4-2x2x2",         ":2x2",         "v4-2x2x2:",  "v4-2x2x2:2x", "v4-2x2x2:0x2",
        "v4-2x2x2:2x2x2x2", "v4-2x2x2:2y2", "v4-2x2x2:-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        EXPECT_STATUS(ot_slice_spec_parse(bad[i], p, sizeof p, sh), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_slice_spec_parse("torus-2x4:2x2", p, 4, sh), OT_ERR_INVALID_ARGUMENT);
}

static void test_reserve(void) {
    ot_topology *t;
    ASSERT_OK(ot_topology_preset("mesh-4x4", &t));
    ot_slice_sched *s;
    ASSERT_OK(ot_slice_sched_create(t, &s));
    int job;
    EXPECT_OK(ot_slice_reserve(s, (int[]){1, 1, 0}, (int[]){2, 2, 1}, &job));
    EXPECT_INT_EQ(ot_slice_owner(s, 5), job);
    EXPECT_INT_EQ(ot_slice_owner(s, 0), -1);
    EXPECT_INT_EQ(ot_slice_free_devices(s), 12);
    EXPECT_STATUS(ot_slice_reserve(s, (int[]){2, 2, 0}, (int[]){1, 1, 1}, &job),
                  OT_ERR_ALREADY_EXISTS);
    /* a mesh does not wrap */
    EXPECT_STATUS(ot_slice_reserve(s, (int[]){3, 0, 0}, (int[]){2, 1, 1}, &job),
                  OT_ERR_INVALID_ARGUMENT);
    EXPECT_INT_EQ(ot_slice_free_devices(s), 12);
    ot_slice_sched_free(s);
    ot_topology_free(t);
}

static void test_leases_side_by_side(void) {
    make_dir();
    int half[3] = {2, 2, 1};
    ot_slice_lease *a = NULL, *b = NULL, *c = NULL;
    ASSERT_OK(ot_slice_lease_acquire(dir, "v4-2x2x2", half, &a));
    ASSERT_OK(ot_slice_lease_acquire(dir, "v4-2x2x2", half, &b));
    int ia[8], ib[8];
    EXPECT_INT_EQ(ot_slice_lease_devices(a, ia, 8), 4);
    EXPECT_INT_EQ(ot_slice_lease_devices(b, ib, 8), 4);
    EXPECT_INT_EQ(ot_slice_lease_others(a), 0);
    EXPECT_INT_EQ(ot_slice_lease_others(b), 4);
    int seen = 0;
    for (int i = 0; i < 4; i++) seen |= 1 << ia[i] | 1 << ib[i];
    EXPECT_INT_EQ(seen, 0xff); /* disjoint, the whole pod */
    /* full: refused with what is free */
    EXPECT_STATUS(ot_slice_lease_acquire(dir, "v4-2x2x2", (int[]){1, 1, 1}, &c),
                  OT_ERR_OUT_OF_RANGE);
    EXPECT_STR_CONTAINS(ot_last_error(), "8 of its 8 devices held by other jobs");
    EXPECT_TRUE(c == NULL);
    /* a shape that fits in no orientation */
    EXPECT_STATUS(ot_slice_lease_acquire(dir, "v4-2x2x2", (int[]){3, 1, 1}, &c),
                  OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_slice_lease_acquire(dir, "v9-2x2", half, &c), OT_ERR_INVALID_ARGUMENT);
    /* released: its devices are free again, and the placement fills the hole */
    ot_slice_lease_release(a);
    ASSERT_OK(ot_slice_lease_acquire(dir, "v4-2x2x2", (int[]){1, 2, 2}, &c));
    int ic[8];
    EXPECT_INT_EQ(ot_slice_lease_devices(c, ic, 8), 4);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) EXPECT_TRUE(ic[i] != ib[j]);
    ot_slice_lease_release(b);
    ot_slice_lease_release(c);
    remove_dir();
}

/* A holder killed with SIGKILL leaves its devices free (the kernel drops its locks). */
static void test_dead_holder(void) {
    make_dir();
    int fds[2];
    ASSERT_TRUE(pipe(fds) == 0);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        ot_slice_lease *l;
        if (ot_slice_lease_acquire(dir, "torus-2x4", (int[]){2, 4, 1}, &l) != OT_OK) _exit(1);
        if (write(fds[1], "x", 1) != 1) _exit(1);
        pause();
        _exit(0);
    }
    char ch;
    EXPECT_INT_EQ(read(fds[0], &ch, 1), 1);
    ot_slice_lease *l = NULL;
    EXPECT_STATUS(ot_slice_lease_acquire(dir, "torus-2x4", (int[]){1, 1, 1}, &l),
                  OT_ERR_OUT_OF_RANGE);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    EXPECT_OK(ot_slice_lease_acquire(dir, "torus-2x4", (int[]){2, 4, 1}, &l));
    ot_slice_lease_release(l);
    close(fds[0]);
    close(fds[1]);
    remove_dir();
}

OT_TEST_MAIN(OT_TEST(test_spec_parse), OT_TEST(test_reserve), OT_TEST(test_leases_side_by_side),
             OT_TEST(test_dead_holder))
