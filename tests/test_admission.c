/* Memory admission (src/runtime/admit.c): /proc/meminfo and cgroup v1/v2 limits read from a fake
 * root, the refusal messages, and the pool serving small requests on devices below 2 MiB. Nothing
 * here allocates more than a few KiB: refusing before allocating is the point. */
#include "ot_test.h"

#include "optitpu/runtime.h"

#include <sys/stat.h>
#include <unistd.h>

#define MiB (1024 * 1024)
#define GiB ((int64_t)1 << 30)

static char root[256];

static void put(const char *rel, const char *text) {
    char path[512], dir[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    /* create the parents */
    snprintf(dir, sizeof dir, "%s", path);
    for (char *q = dir + strlen(root) + 1; *q; q++)
        if (*q == '/') {
            *q = '\0';
            mkdir(dir, 0777);
            *q = '/';
        }
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f);
    fputs(text, f);
    fclose(f);
}

static void make_root(void) {
    snprintf(root, sizeof root, "/tmp/ot_admit_XXXXXX");
    ASSERT_TRUE(mkdtemp(root) != NULL);
}

static void remove_root(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    EXPECT_INT_EQ(system(cmd), 0);
}

static const char meminfo[] = "MemTotal:       24000000 kB\n"
                              "MemFree:          100000 kB\n"
                              "MemAvailable:    8000000 kB\n"
                              "Buffers:           1000 kB\n";

/* cgroup v2: the leaf has no limit, its parent 512 MiB with 300 MiB used of which 100 MiB are
 * inactive file pages; the grandparent a looser 1 GiB */
static void test_cgroup_v2(void) {
    make_root();
    put("proc/meminfo", meminfo);
    put("proc/self/cgroup", "0::/a/b\n");
    put("sys/fs/cgroup/a/b/memory.max", "max\n");
    put("sys/fs/cgroup/a/b/memory.current", "1000\n");
    put("sys/fs/cgroup/a/memory.max", "536870912\n");
    put("sys/fs/cgroup/a/memory.current", "314572800\n");
    put("sys/fs/cgroup/a/memory.stat", "anon 1\nfile 2\ninactive_file 104857600\nactive_file 3\n");
    put("sys/fs/cgroup/memory.max", "1073741824\n");
    put("sys/fs/cgroup/memory.current", "0\n");
    ot_host_memory h;
    EXPECT_OK(ot_host_memory_query_at(root, &h));
    EXPECT_INT_EQ(h.mem_available, 8000000LL * 1024);
    EXPECT_INT_EQ(h.cgroup_limit, 512 * MiB);
    EXPECT_INT_EQ(h.cgroup_available, 512 * MiB - 200 * MiB);
    EXPECT_INT_EQ(h.available, 312 * MiB);
    /* no cgroup limit anywhere: MemAvailable alone */
    put("sys/fs/cgroup/a/memory.max", "max\n");
    put("sys/fs/cgroup/memory.max", "max\n");
    EXPECT_OK(ot_host_memory_query_at(root, &h));
    EXPECT_INT_EQ(h.cgroup_limit, -1);
    EXPECT_INT_EQ(h.available, 8000000LL * 1024);
    remove_root();
}

/* cgroup v1: the memory controller's line among others; "unlimited" is a huge number */
static void test_cgroup_v1(void) {
    make_root();
    put("proc/meminfo", "MemTotal: 100 kB\nMemFree: 50 kB\n"); /* no MemAvailable: MemFree */
    /* a hybrid system: the v2 line comes first and has no memory controller */
    put("proc/self/cgroup", "0::/\n12:pids:/x\n4:cpu,cpuacct:/x\n7:blkio,memory:/docker/c1\n");
    put("sys/fs/cgroup/memory/docker/c1/memory.limit_in_bytes", "2097152\n");
    put("sys/fs/cgroup/memory/docker/c1/memory.usage_in_bytes", "1048576\n");
    put("sys/fs/cgroup/memory/docker/c1/memory.stat", "cache 5\ntotal_inactive_file 524288\n");
    put("sys/fs/cgroup/memory/docker/memory.limit_in_bytes", "9223372036854771712\n");
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    ot_host_memory h;
    EXPECT_OK(ot_host_memory_query_at(root, &h));
    EXPECT_INT_EQ(h.mem_available, 50 * 1024);
    EXPECT_INT_EQ(h.cgroup_limit, 2 * MiB);
    EXPECT_INT_EQ(h.cgroup_available, 2 * MiB - MiB / 2);
    EXPECT_INT_EQ(h.available, 50 * 1024);
    remove_root();
    /* nothing readable: every figure unknown, and admission does not refuse on unknowns */
    EXPECT_OK(ot_host_memory_query_at("/nonexistent-root", &h));
    EXPECT_INT_EQ(h.mem_available, -1);
    EXPECT_INT_EQ(h.available, -1);
    ot_mem_item big = {"inputs", GiB, false};
    EXPECT_OK(ot_mem_admit("run x", &big, 1, 1, 0, &h));
}

static void test_admit(void) {
    ot_host_memory h = {.mem_available = 20 * GiB,
                        .cgroup_limit = 16 * GiB,
                        .cgroup_available = 10 * GiB,
                        .available = 10 * GiB};
    ot_mem_item items[] = {
        {"inputs", 3 * GiB, true},
        {"arena", GiB, true},
        {"host inputs", 3 * GiB, false},
    };
    /* 3 + 2 x 4 = 11 GiB > 10 GiB */
    EXPECT_STATUS(ot_mem_admit("run m.hlo", items, 3, 2, 0, &h), OT_ERR_RESOURCE_EXHAUSTED);
    const char *e = ot_last_error();
    EXPECT_STR_CONTAINS(e, "RESOURCE_EXHAUSTED: run m.hlo needs 11.00 GiB (11811160064 bytes) of "
                           "host memory");
    EXPECT_STR_CONTAINS(e, "host inputs 3.00 GiB");
    EXPECT_STR_CONTAINS(e, "2 devices x (inputs 3.00 GiB (3221225472 bytes), arena 1.00 GiB");
    EXPECT_STR_CONTAINS(e, "more than the 10.00 GiB (10737418240 bytes) available");
    EXPECT_STR_CONTAINS(e, "MemAvailable 20.00 GiB");
    EXPECT_STR_CONTAINS(e, "cgroup limit 16.00 GiB (17179869184 bytes), of which 10.00 GiB");
    /* one device fits */
    EXPECT_OK(ot_mem_admit("run m.hlo", items, 3, 1, 0, &h));
    /* the device capacity binds first, with the per-device items named */
    EXPECT_STATUS(ot_mem_admit("run m.hlo", items, 3, 1, 2 * GiB, &h), OT_ERR_RESOURCE_EXHAUSTED);
    EXPECT_STR_CONTAINS(ot_last_error(), "run m.hlo needs 4.00 GiB (4294967296 bytes) on each "
                                         "device (inputs 3.00 GiB");
    EXPECT_STR_CONTAINS(ot_last_error(), "more than the device's 2.00 GiB (2147483648 bytes) of "
                                         "memory");
    EXPECT_OK(ot_mem_admit("run m.hlo", items, 3, 1, 4 * GiB, &h));
    /* sizes that overflow when summed saturate instead of wrapping around to "fits" */
    ot_mem_item huge[] = {{"a", INT64_MAX / 2, true}, {"b", INT64_MAX / 2, true}};
    EXPECT_STATUS(ot_mem_admit(NULL, huge, 2, 4096, 0, &h), OT_ERR_RESOURCE_EXHAUSTED);
    ot_mem_item neg = {"x", -1, false};
    EXPECT_STATUS(ot_mem_admit("r", &neg, 1, 1, 0, &h), OT_ERR_INVALID_ARGUMENT);
}

/* the machine's own figures are read (Linux always has /proc/meminfo) */
static void test_query_this_machine(void) {
    ot_host_memory h;
    EXPECT_OK(ot_host_memory_query(&h));
    EXPECT_TRUE(h.mem_available > 0);
    EXPECT_TRUE(h.available > 0 && h.available <= h.mem_available);
    /* a petabyte is refused here without being allocated */
    ot_mem_item pb = {"inputs", (int64_t)1 << 50, false};
    EXPECT_STATUS(ot_mem_admit("run", &pb, 1, 0, 0, NULL), OT_ERR_RESOURCE_EXHAUSTED);
}

/* A device of 1 MiB (or 4 KiB) serves a 296-byte buffer: small blocks used to come only from
 * 2 MiB segments, so any capacity below 2 MiB refused every small request. */
static void test_pool_below_segment(void) {
    ot_mem_pool *p;
    void *a, *b;
    ASSERT_OK(ot_mem_pool_create(MiB, &p));
    EXPECT_OK(ot_mem_pool_alloc(p, 296, &a));
    EXPECT_OK(ot_mem_pool_alloc(p, 1000, &b));
    EXPECT_OK(ot_mem_pool_release(p, a));
    EXPECT_OK(ot_mem_pool_release(p, b));
    ot_mem_pool_free(p);
    ASSERT_OK(ot_mem_pool_create(4096, &p));
    EXPECT_OK(ot_mem_pool_alloc(p, 296, &a));
    /* a request that does not fit what is left is still refused */
    EXPECT_STATUS(ot_mem_pool_alloc(p, 4000, &b), OT_ERR_OUT_OF_MEMORY);
    ot_mem_stats s;
    ot_mem_pool_stats(p, &s);
    EXPECT_TRUE(s.reserved <= 4096);
    EXPECT_OK(ot_mem_pool_release(p, a));
    ot_mem_pool_free(p);
    ot_device *d;
    ASSERT_OK(ot_host_device_create(0, MiB, &d));
    ot_shape sh;
    ot_shape_make(&sh, OT_F32, 1, (int64_t[]){74});
    ot_buffer *buf;
    EXPECT_OK(ot_buffer_alloc(d, &sh, &buf));
    ot_buffer_free(buf);
    ot_device_free(d);
}

OT_TEST_MAIN(OT_TEST(test_cgroup_v2), OT_TEST(test_cgroup_v1), OT_TEST(test_admit),
             OT_TEST(test_query_this_machine), OT_TEST(test_pool_below_segment))
