/* src/ft/ft_io.c: the pipelined write (copy + hash per block, O_DIRECT where the file system
 * takes it, page cache otherwise), its failure paths, and the background priority group. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ot_test.h"

#include "ckpt_util.h"
#include "ft/ft_io.h"

/* Three segments of odd lengths at odd addresses: the content never lines up with the blocks. */
typedef struct content {
    uint8_t *mem;
    ot_ft_seg seg[3];
    size_t total;
} content;

static void content_make(content *c, size_t a, size_t b, size_t d) {
    c->mem = malloc(a + b + d + 64);
    uint64_t x = 0x243F6A8885A308D3ull;
    for (size_t i = 0; i < a + b + d + 64; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        c->mem[i] = (uint8_t)x;
    }
    c->seg[0] = (ot_ft_seg){c->mem + 3, a};
    c->seg[1] = (ot_ft_seg){c->mem + 3 + a + 5, b};
    c->seg[2] = (ot_ft_seg){c->mem + 3 + a + 5 + b + 7, d};
    c->total = a + b + d;
}

/* The file holds exactly the concatenation, and the digest is its SHA-256. */
static void check_file(const char *path, const content *c, const uint8_t sha[32]) {
    size_t len;
    uint8_t *got = st_read_file(path, &len);
    ASSERT_TRUE(got != NULL);
    EXPECT_U64_EQ(len, c->total);
    size_t off = 0;
    for (int i = 0; i < 3 && len == c->total; i++) {
        if (memcmp(got + off, c->seg[i].ptr, c->seg[i].len) != 0)
            OT_T_FAIL_("%s: segment %d differs", path, i);
        off += c->seg[i].len;
    }
    uint8_t want[32];
    EXPECT_OK(ot_sha256_digest(got, len, want));
    if (memcmp(want, sha, 32) != 0) OT_T_FAIL_("%s: digest differs from the file's", path);
    free(got);
}

static void test_pipelined_write(void) {
    const char *dir = test_dir("ftio_write");
    ASSERT_TRUE(mkdir(dir, 0755) == 0);
    int64_t live = ot_alloc_live();
    /* sizes: below the pipeline, one partial block, several ring turns with an unaligned tail,
     * and an exact multiple of the alignment */
    const size_t sizes[][3] = {{100, 2000, 30},
                               {(size_t)3 << 20, (size_t)2 << 20, 12345},
                               {(size_t)17 << 20, 333, (size_t)29 << 20},
                               {(size_t)16 << 20, (size_t)8 << 20, 4096 * 3}};
    for (int direct = 1; direct >= 0; direct--) {
        ot_ft_allow_direct_io(direct);
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            content c;
            content_make(&c, sizes[k][0], sizes[k][1], sizes[k][2]);
            char path[1024];
            snprintf(path, sizeof path, "%s/f%zu_%d", dir, k, direct);
            uint8_t sha[32];
            uint64_t size = 0;
            EXPECT_OK(ot_ft_write_file(path, c.seg, 3, true, sha, &size));
            EXPECT_U64_EQ(size, c.total);
            check_file(path, &c, sha);
            if (!direct) EXPECT_TRUE(!ot_ft_last_write_direct());
            if (direct && k == 2)
                printf("  O_DIRECT on %s: %s\n", dir, ot_ft_last_write_direct() ? "yes" : "no");
            /* exclusive create */
            EXPECT_STATUS(ot_ft_write_file(path, c.seg, 3, false, NULL, NULL), OT_ERR_IO);
            unlink(path);
            free(c.mem);
        }
    }
    ot_ft_allow_direct_io(true);
    EXPECT_INT_EQ(ot_alloc_live(), live);
    rm_rf(dir);
}

/* Every write-side call of a large write fails in turn (on the I/O thread or the caller's): IO
 * naming the file and the errno, nothing left behind, nothing leaked. */
static void test_pipelined_failures(void) {
    const char *dir = test_dir("ftio_fail");
    ASSERT_TRUE(mkdir(dir, 0755) == 0);
    content c;
    content_make(&c, (size_t)20 << 20, 77, (size_t)5 << 20);
    char path[1024];
    snprintf(path, sizeof path, "%s/f", dir);
    int64_t live = ot_alloc_live();
    for (int direct = 1; direct >= 0; direct--) {
        ot_ft_allow_direct_io(direct);
        int fails = 0;
        for (int n = 1; n < 50; n++) {
            ot_ft_inject_io_failure(n, n % 2 ? ENOSPC : EIO);
            uint8_t sha[32];
            ot_status s = ot_ft_write_file(path, c.seg, 3, true, sha, NULL);
            ot_ft_inject_io_failure(0, 0);
            if (s == OT_OK) {
                check_file(path, &c, sha);
                unlink(path);
                break;
            }
            fails++;
            EXPECT_INT_EQ(s, OT_ERR_IO);
            EXPECT_STR_CONTAINS(ot_last_error(), path);
            EXPECT_STR_CONTAINS(ot_last_error(), n % 2 ? "No space left" : "Input/output");
            if (ot_ft_exists(path)) OT_T_FAIL_("failure %d left %s", n, path);
        }
        EXPECT_TRUE(fails >= 4); /* 4 blocks and an fsync at least */
        /* allocation failure of the block buffers */
        ot_alloc_fail_after(1);
        ot_status s = ot_ft_write_file(path, c.seg, 3, true, NULL, NULL);
        ot_alloc_fail_after(0);
        EXPECT_INT_EQ(s, OT_ERR_OUT_OF_MEMORY);
        EXPECT_TRUE(!ot_ft_exists(path));
    }
    ot_ft_allow_direct_io(true);
    EXPECT_INT_EQ(ot_alloc_live(), live);
    free(c.mem);
    rm_rf(dir);
}

/* ---- background priority ---------------------------------------------------------------- */

typedef struct prio_probe {
    ot_ft_prio_group *g;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int phase; /* 1: lowered and measured; 2: boosted, measure again; 3: measured */
    int policy_low, nice_low, policy_high, nice_high;
} prio_probe;

static void measure(int *policy, int *nice_value) {
    *policy = sched_getscheduler(0);
    errno = 0;
    *nice_value = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
}

static void *probe_main(void *arg) {
    prio_probe *p = arg;
    ot_ft_background_begin(p->g);
    pthread_mutex_lock(&p->mu);
    measure(&p->policy_low, &p->nice_low);
    p->phase = 1;
    pthread_cond_broadcast(&p->cv);
    while (p->phase != 2) pthread_cond_wait(&p->cv, &p->mu);
    measure(&p->policy_high, &p->nice_high);
    p->phase = 3;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    ot_ft_background_end();
    return NULL;
}

static void test_background_priority(void) {
    ot_ft_prio_group g;
    ot_ft_prio_group_init(&g);
    prio_probe p = {.g = &g};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    pthread_t th;
    ASSERT_TRUE(pthread_create(&th, NULL, probe_main, &p) == 0);
    pthread_mutex_lock(&p.mu);
    while (p.phase != 1) pthread_cond_wait(&p.cv, &p.mu);
    pthread_mutex_unlock(&p.mu);
    ot_ft_prio_group_boost(&g);
    pthread_mutex_lock(&p.mu);
    p.phase = 2;
    pthread_cond_broadcast(&p.cv);
    while (p.phase != 3) pthread_cond_wait(&p.cv, &p.mu);
    pthread_mutex_unlock(&p.mu);
    pthread_join(th, NULL);
    /* lowered: SCHED_IDLE, or nice 19 where SCHED_IDLE is refused */
    EXPECT_TRUE(p.policy_low == SCHED_IDLE || p.nice_low == 19);
    int my_policy, my_nice;
    measure(&my_policy, &my_nice);
    if (geteuid() == 0) { /* raising a priority back needs privilege */
        EXPECT_INT_EQ(p.policy_high, SCHED_OTHER);
        EXPECT_INT_EQ(p.nice_high, my_nice);
    }
    /* this thread is untouched */
    EXPECT_INT_EQ(my_policy, SCHED_OTHER);
    /* every slot was given back */
    for (int i = 0; i < OT_FT_PRIO_GROUP_MAX; i++) EXPECT_INT_EQ(atomic_load(&g.tids[i]), 0);
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&p.mu);
    /* CTest runs this test alone (test_ft_io_priority): not root, half of it was not checked */
    if (geteuid() != 0)
        OT_SKIP("raising a priority back needs root: the lowering was checked, the boost not");
}

OT_TEST_MAIN(OT_TEST(test_pipelined_write), OT_TEST(test_pipelined_failures),
             OT_TEST(test_background_priority))
