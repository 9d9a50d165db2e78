/* The persistent compilation cache: miss then hit with an identical executable, the key's
 * inputs, damaged, truncated and misplaced entries (warned about, removed, rebuilt), processes
 * racing on one key, LRU eviction under a small limit, the environment's settings, verify and
 * clear. Every test uses a private temporary directory, never the user's cache. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "optitpu/compiler.h"
#include "optitpu/ir.h"
#include "ot_test.h"

static int warnings;
static char last_warning[1024];

static void count_log(void *ud, ot_log_level level, const char *msg) {
    (void)ud;
    if (level < OT_LOG_WARN) return;
    warnings++;
    snprintf(last_warning, sizeof last_warning, "%s", msg);
}

/* A module whose elementwise chain fuses; n varies the module (and so the key). */
static ot_module *make_module(int n) {
    char text[1024];
    snprintf(text, sizeof text,
             "HloModule cache_%d\n"
             "ENTRY main {\n"
             "  p = f32[%d] parameter(0)\n"
             "  q = f32[%d] parameter(1)\n"
             "  a = f32[%d] add(p, q)\n"
             "  m = f32[%d] multiply(a, p)\n"
             "  ROOT e = f32[%d] exponential(m)\n"
             "}\n",
             n, n, n, n, n, n);
    ot_hlo_parse_options po = ot_hlo_parse_options_default();
    ot_module *m = NULL;
    if (ot_hlo_parse(text, strlen(text), &po, &m) != OT_OK) return NULL;
    return m;
}

static void tmpdir(char *out, size_t cap) {
    snprintf(out, cap, "%s/ot_cache_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(out)) out[0] = 0;
}

static void rm_rf(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[4200];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            rm_rf(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* Files in dir: entries (*.otx) and everything else. */
static void count_files(const char *dir, int *entries, int *others) {
    *entries = *others = 0;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        size_t n = strlen(de->d_name);
        if (n > 4 && !strcmp(de->d_name + n - 4, ".otx"))
            ++*entries;
        else
            ++*others;
    }
    closedir(d);
}

static bool same_executable(const ot_executable *a, const ot_executable *b) {
    void *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    bool same = ot_executable_serialize(a, &x, &nx) == OT_OK &&
                ot_executable_serialize(b, &y, &ny) == OT_OK && nx == ny && !memcmp(x, y, nx);
    ot_free(x);
    ot_free(y);
    return same;
}

static void entry_path(const ot_compile_cache *c, const ot_module *m, const ot_compile_options *o,
                       char *out, size_t cap) {
    uint8_t key[32];
    char hex[65];
    if (ot_compile_cache_key(m, o, key) != OT_OK) memset(key, 0, 32);
    ot_hex(key, 32, hex);
    snprintf(out, cap, "%s/%s.otx", ot_compile_cache_dir(c), hex);
}

static ot_compile_cache *open_cache(const char *dir, int64_t max) {
    ot_compile_cache_options co = {dir, max};
    ot_compile_cache *c = NULL;
    return ot_compile_cache_open(&co, &c) == OT_OK ? c : NULL;
}

static ot_compile_options opts_off(void) {
    ot_compile_options o = ot_compile_options_default();
    o.native = OT_NATIVE_OFF; /* no C compiler needed: the cache is about the executable */
    return o;
}

static void test_miss_then_hit(void) {
    char dir[256];
    tmpdir(dir, sizeof dir);
    ASSERT_TRUE(dir[0]);
    ot_compile_cache *c = open_cache(dir, 0);
    ot_module *m = make_module(1024);
    ASSERT_TRUE(c && m);
    EXPECT_INT_EQ(ot_compile_cache_max_bytes(c), OT_COMPILE_CACHE_DEFAULT_MAX_BYTES);
    ot_compile_options o = opts_off();
    ot_executable *e1 = NULL, *e2 = NULL, *ref = NULL;
    bool hit = true;
    EXPECT_OK(ot_compile_cached(m, &o, c, &e1, &hit));
    EXPECT_TRUE(!hit);
    int ne, no;
    count_files(dir, &ne, &no);
    EXPECT_INT_EQ(ne, 1);
    EXPECT_INT_EQ(no, 0);
    EXPECT_OK(ot_compile_cached(m, &o, c, &e2, &hit));
    EXPECT_TRUE(hit);
    EXPECT_OK(ot_compile(m, &o, &ref));
    EXPECT_TRUE(e1 && e2 && ref && same_executable(e1, e2) && same_executable(ref, e2));
    /* NULL cache: a plain compile */
    ot_executable *e3 = NULL;
    EXPECT_OK(ot_compile_cached(m, &o, NULL, &e3, &hit));
    EXPECT_TRUE(!hit && e3 && same_executable(ref, e3));
    ot_compile_cache_entry *list = NULL;
    int64_t n = 0;
    EXPECT_OK(ot_compile_cache_list(c, &list, &n));
    EXPECT_INT_EQ(n, 1);
    struct stat st;
    char path[4200];
    entry_path(c, m, &o, path, sizeof path);
    EXPECT_TRUE(n == 1 && stat(path, &st) == 0 && list[0].bytes == (int64_t)st.st_size);
    ot_free(list);
    ot_executable_free(e1);
    ot_executable_free(e2);
    ot_executable_free(e3);
    ot_executable_free(ref);
    ot_module_free(m);
    ot_compile_cache_free(c);
    rm_rf(dir);
}

static void test_key_inputs(void) {
    ot_module *a = make_module(256), *a2 = make_module(256), *b = make_module(512);
    ASSERT_TRUE(a && a2 && b);
    ot_compile_options o = ot_compile_options_default();
    uint8_t k0[32], k1[32];
    EXPECT_OK(ot_compile_cache_key(a, &o, k0));
    EXPECT_OK(ot_compile_cache_key(a2, &o, k1));
    EXPECT_TRUE(!memcmp(k0, k1, 32)); /* equal modules, equal keys */
    EXPECT_OK(ot_compile_cache_key(b, &o, k1));
    EXPECT_TRUE(memcmp(k0, k1, 32) != 0);
    ot_compile_options v = o;
    v.opt_level = 1;
    EXPECT_OK(ot_compile_cache_key(a, &v, k1));
    EXPECT_TRUE(memcmp(k0, k1, 32) != 0);
    v = o;
    v.fusion = false;
    EXPECT_OK(ot_compile_cache_key(a, &v, k1));
    EXPECT_TRUE(memcmp(k0, k1, 32) != 0);
    v = o;
    v.disable_passes = "cse";
    EXPECT_OK(ot_compile_cache_key(a, &v, k1));
    EXPECT_TRUE(memcmp(k0, k1, 32) != 0);
    /* native settings and dumps do not change the executable: same key */
    v = o;
    v.native = OT_NATIVE_OFF;
    v.dump_dir = "/nonexistent";
    v.verify_each = true;
    EXPECT_OK(ot_compile_cache_key(a, &v, k1));
    EXPECT_TRUE(!memcmp(k0, k1, 32));
    /* the key is not the bare fingerprint: the library and format versions enter it */
    uint8_t fp[32];
    EXPECT_OK(ot_compile_fingerprint(a, &o, fp));
    EXPECT_TRUE(memcmp(k0, fp, 32) != 0);
    ot_module_free(a);
    ot_module_free(a2);
    ot_module_free(b);
}

/* Damages the entry of (m, o) with fn, then checks that the next compile warns, rebuilds and
 * leaves a valid entry (the one after hits). */
static void damaged_entry_case(void (*damage)(const char *path)) {
    char dir[256];
    tmpdir(dir, sizeof dir);
    ASSERT_TRUE(dir[0]);
    ot_compile_cache *c = open_cache(dir, 0);
    ot_module *m = make_module(2048);
    ASSERT_TRUE(c && m);
    ot_compile_options o = opts_off();
    ot_executable *e = NULL;
    bool hit;
    EXPECT_OK(ot_compile_cached(m, &o, c, &e, &hit));
    ot_executable_free(e);
    char path[4200];
    entry_path(c, m, &o, path, sizeof path);
    damage(path);
    warnings = 0;
    ot_set_log(count_log, NULL, OT_LOG_WARN);
    hit = true;
    EXPECT_OK(ot_compile_cached(m, &o, c, &e, &hit));
    ot_set_log(NULL, NULL, OT_LOG_WARN);
    EXPECT_TRUE(!hit);
    EXPECT_INT_EQ(warnings, 1);
    EXPECT_STR_CONTAINS(last_warning, "removing unusable entry");
    ot_executable *ref = NULL;
    EXPECT_OK(ot_compile(m, &o, &ref));
    EXPECT_TRUE(e && ref && same_executable(e, ref));
    ot_executable_free(e);
    e = NULL;
    EXPECT_OK(ot_compile_cached(m, &o, c, &e, &hit));
    EXPECT_TRUE(hit && e && same_executable(e, ref));
    ot_executable_free(e);
    ot_executable_free(ref);
    ot_module_free(m);
    ot_compile_cache_free(c);
    rm_rf(dir);
}

static void flip_byte(const char *path) {
    int fd = open(path, O_RDWR);
    if (fd < 0) return;
    off_t end = lseek(fd, 0, SEEK_END);
    unsigned char b;
    if (pread(fd, &b, 1, end / 2) == 1) {
        b ^= 0x10;
        if (pwrite(fd, &b, 1, end / 2) != 1) b = 0;
    }
    close(fd);
}

static void truncate_half(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && truncate(path, st.st_size / 2) != 0) unlink(path);
}

static void empty_file(const char *path) {
    if (truncate(path, 0) != 0) unlink(path);
}

static void test_corrupt_entry(void) {
    damaged_entry_case(flip_byte);
}
static void test_truncated_entry(void) {
    damaged_entry_case(truncate_half);
    damaged_entry_case(empty_file);
}

/* Another module's valid executable under this module's key: loads, but is not what was asked. */
static void test_misplaced_entry(void) {
    char dir[256];
    tmpdir(dir, sizeof dir);
    ASSERT_TRUE(dir[0]);
    ot_compile_cache *c = open_cache(dir, 0);
    ot_module *a = make_module(64), *b = make_module(128);
    ASSERT_TRUE(c && a && b);
    ot_compile_options o = opts_off();
    ot_executable *e = NULL;
    EXPECT_OK(ot_compile_cached(a, &o, c, &e, NULL));
    ot_executable_free(e);
    char pa[4200], pb[4200];
    entry_path(c, a, &o, pa, sizeof pa);
    entry_path(c, b, &o, pb, sizeof pb);
    EXPECT_TRUE(rename(pa, pb) == 0);
    int64_t good = -1, removed = -1;
    warnings = 0;
    ot_set_log(count_log, NULL, OT_LOG_WARN);
    bool hit = true;
    e = NULL;
    EXPECT_OK(ot_compile_cached(b, &o, c, &e, &hit));
    EXPECT_TRUE(!hit && e && ot_executable_param_count(e) == 2);
    EXPECT_INT_EQ(warnings, 1);
    EXPECT_STR_CONTAINS(last_warning, "fingerprint");
    ot_executable_free(e);
    e = NULL;
    EXPECT_OK(ot_compile_cached(b, &o, c, &e, &hit)); /* b's own entry now */
    EXPECT_TRUE(hit);
    ot_executable_free(e);
    int ne, no;
    count_files(dir, &ne, &no);
    EXPECT_INT_EQ(ne, 1);
    /* verify finds a misplaced entry too: b's entry copied under a's name */
    FILE *in = fopen(pb, "rb"), *out = fopen(pa, "wb");
    if (in && out) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    }
    if (in) fclose(in);
    if (out) fclose(out);
    warnings = 0;
    EXPECT_OK(ot_compile_cache_verify(c, &good, &removed));
    ot_set_log(NULL, NULL, OT_LOG_WARN);
    EXPECT_INT_EQ(good, 1);
    EXPECT_INT_EQ(removed, 1);
    EXPECT_INT_EQ(warnings, 1);
    struct stat st;
    EXPECT_TRUE(stat(pa, &st) != 0 && stat(pb, &st) == 0);
    ot_module_free(a);
    ot_module_free(b);
    ot_compile_cache_free(c);
    rm_rf(dir);
}

/* Processes compiling one module into one directory at once: all succeed, one whole entry, no
 * temporary file left. */
static void test_concurrent_writers(void) {
    char dir[256];
    tmpdir(dir, sizeof dir);
    ASSERT_TRUE(dir[0]);
    ot_module *m = make_module(4096);
    ASSERT_TRUE(m);
    ot_compile_options o = opts_off();
    enum { NPROC = 4 };
    for (int round = 0; round < 3; round++) {
        pid_t pids[NPROC];
        for (int p = 0; p < NPROC; p++) {
            pids[p] = fork();
            if (pids[p] == 0) {
                ot_compile_cache *c = open_cache(dir, 0);
                ot_executable *e = NULL;
                int rc = c && ot_compile_cached(m, &o, c, &e, NULL) == OT_OK && e ? 0 : 1;
                _exit(rc);
            }
        }
        for (int p = 0; p < NPROC; p++) {
            int st = -1;
            EXPECT_TRUE(pids[p] > 0 && waitpid(pids[p], &st, 0) == pids[p]);
            EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        }
        int ne, no;
        count_files(dir, &ne, &no);
        EXPECT_INT_EQ(ne, 1);
        EXPECT_INT_EQ(no, 0);
        ot_compile_cache *c = open_cache(dir, 0);
        ot_executable *e = NULL;
        bool hit = false;
        EXPECT_OK(ot_compile_cached(m, &o, c, &e, &hit));
        EXPECT_TRUE(hit);
        ot_executable_free(e);
        if (round < 2) EXPECT_OK(ot_compile_cache_clear(c, NULL));
        ot_compile_cache_free(c);
    }
    ot_module_free(m);
    rm_rf(dir);
}

static void set_atime(const char *path, time_t sec) {
    struct timespec ts[2] = {{sec, 0}, {0, UTIME_OMIT}};
    utimensat(AT_FDCWD, path, ts, 0);
}

static void test_lru_eviction(void) {
    char dir[256];
    tmpdir(dir, sizeof dir);
    ASSERT_TRUE(dir[0]);
    ot_module *m[3] = {make_module(100), make_module(101), make_module(102)};
    ASSERT_TRUE(m[0] && m[1] && m[2]);
    ot_compile_options o = opts_off();
    /* the entry size (the three differ by a few bytes at most) */
    ot_executable *e = NULL;
    void *buf = NULL;
    size_t len = 0;
    ASSERT_OK(ot_compile(m[0], &o, &e));
    ASSERT_OK(ot_executable_serialize(e, &buf, &len));
    ot_free(buf);
    ot_executable_free(e);
    ot_compile_cache *c = open_cache(dir, (int64_t)len * 5 / 2); /* room for two */
    ASSERT_TRUE(c);
    char p[3][4200];
    for (int k = 0; k < 3; k++) entry_path(c, m[k], &o, p[k], sizeof p[k]);
    e = NULL;
    EXPECT_OK(ot_compile_cached(m[0], &o, c, &e, NULL));
    ot_executable_free(e);
    e = NULL;
    EXPECT_OK(ot_compile_cached(m[1], &o, c, &e, NULL));
    ot_executable_free(e);
    time_t now = time(NULL);
    set_atime(p[0], now - 2000);
    set_atime(p[1], now - 1000);
    /* a hit makes entry 0 the most recently used: entry 1 goes when entry 2 comes */
    bool hit = false;
    e = NULL;
    EXPECT_OK(ot_compile_cached(m[0], &o, c, &e, &hit));
    EXPECT_TRUE(hit);
    ot_executable_free(e);
    e = NULL;
    EXPECT_OK(ot_compile_cached(m[2], &o, c, &e, NULL));
    ot_executable_free(e);
    struct stat st;
    EXPECT_TRUE(stat(p[0], &st) == 0);
    EXPECT_TRUE(stat(p[1], &st) != 0);
    EXPECT_TRUE(stat(p[2], &st) == 0);
    ot_compile_cache_entry *list = NULL;
    int64_t n = 0;
    EXPECT_OK(ot_compile_cache_list(c, &list, &n));
    EXPECT_INT_EQ(n, 2);
    if (n == 2) EXPECT_TRUE(list[0].atime_ns <= list[1].atime_ns);
    ot_free(list);
    ot_compile_cache_free(c);
    /* an executable larger than the whole limit is compiled but not stored */
    c = open_cache(dir, 16);
    ASSERT_TRUE(c);
    EXPECT_OK(ot_compile_cache_clear(c, NULL));
    e = NULL;
    EXPECT_OK(ot_compile_cached(m[0], &o, c, &e, &hit));
    EXPECT_TRUE(e && !hit);
    ot_executable_free(e);
    int ne, no;
    count_files(dir, &ne, &no);
    EXPECT_INT_EQ(ne, 0);
    ot_compile_cache_free(c);
    for (int k = 0; k < 3; k++) ot_module_free(m[k]);
    rm_rf(dir);
}

static void test_environment(void) {
    char dir[256], want[600];
    tmpdir(dir, sizeof dir);
    ASSERT_TRUE(dir[0]);
    char *old_xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    char *old_dir = getenv("OPTITPU_CACHE_DIR") ? strdup(getenv("OPTITPU_CACHE_DIR")) : NULL;
    char *old_max =
        getenv("OPTITPU_CACHE_MAX_BYTES") ? strdup(getenv("OPTITPU_CACHE_MAX_BYTES")) : NULL;
    unsetenv("OPTITPU_CACHE_DIR");
    setenv("XDG_CACHE_HOME", dir, 1);
    setenv("OPTITPU_CACHE_MAX_BYTES", "3M", 1);
    ot_compile_cache *c = NULL;
    EXPECT_OK(ot_compile_cache_open(NULL, &c));
    snprintf(want, sizeof want, "%s/optitpu/executables", dir);
    EXPECT_TRUE(c && !strcmp(ot_compile_cache_dir(c), want));
    EXPECT_INT_EQ(ot_compile_cache_max_bytes(c), 3 << 20);
    ot_compile_cache_free(c);
    setenv("OPTITPU_CACHE_DIR", dir, 1);
    c = NULL;
    EXPECT_OK(ot_compile_cache_open(NULL, &c));
    snprintf(want, sizeof want, "%s/executables", dir);
    EXPECT_TRUE(c && !strcmp(ot_compile_cache_dir(c), want));
    ot_compile_cache_free(c);
    /* an explicit setting wins over the environment */
    snprintf(want, sizeof want, "%s/mine", dir);
    ot_compile_cache_options co = {want, 12345};
    c = NULL;
    EXPECT_OK(ot_compile_cache_open(&co, &c));
    EXPECT_TRUE(c && !strcmp(ot_compile_cache_dir(c), want));
    EXPECT_INT_EQ(ot_compile_cache_max_bytes(c), 12345);
    ot_compile_cache_free(c);
    setenv("OPTITPU_CACHE_MAX_BYTES", "lots", 1);
    c = NULL;
    EXPECT_STATUS(ot_compile_cache_open(NULL, &c), OT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(!c);
    co.max_bytes = -1;
    EXPECT_STATUS(ot_compile_cache_open(&co, &c), OT_ERR_INVALID_ARGUMENT);
    /* a file where the directory should be */
    snprintf(want, sizeof want, "%s/file", dir);
    FILE *f = fopen(want, "w");
    if (f) fclose(f);
    co = (ot_compile_cache_options){want, 0};
    setenv("OPTITPU_CACHE_MAX_BYTES", "1G", 1);
    EXPECT_STATUS(ot_compile_cache_open(&co, &c), OT_ERR_IO);
    if (old_xdg)
        setenv("XDG_CACHE_HOME", old_xdg, 1);
    else
        unsetenv("XDG_CACHE_HOME");
    if (old_dir)
        setenv("OPTITPU_CACHE_DIR", old_dir, 1);
    else
        unsetenv("OPTITPU_CACHE_DIR");
    if (old_max)
        setenv("OPTITPU_CACHE_MAX_BYTES", old_max, 1);
    else
        unsetenv("OPTITPU_CACHE_MAX_BYTES");
    free(old_xdg);
    free(old_dir);
    free(old_max);
    rm_rf(dir);
}

static void test_clear_leaves_other_files(void) {
    char dir[256], other[600];
    tmpdir(dir, sizeof dir);
    ASSERT_TRUE(dir[0]);
    ot_compile_cache *c = open_cache(dir, 0);
    ot_module *m = make_module(32);
    ASSERT_TRUE(c && m);
    ot_compile_options o = opts_off();
    ot_executable *e = NULL;
    EXPECT_OK(ot_compile_cached(m, &o, c, &e, NULL));
    ot_executable_free(e);
    snprintf(other, sizeof other, "%s/README", dir);
    FILE *f = fopen(other, "w");
    if (f) fclose(f);
    int64_t removed = 0;
    EXPECT_OK(ot_compile_cache_clear(c, &removed));
    EXPECT_INT_EQ(removed, 1);
    int ne, no;
    count_files(dir, &ne, &no);
    EXPECT_INT_EQ(ne, 0);
    EXPECT_INT_EQ(no, 1);
    ot_module_free(m);
    ot_compile_cache_free(c);
    rm_rf(dir);
}

OT_TEST_MAIN(OT_TEST(test_miss_then_hit), OT_TEST(test_key_inputs), OT_TEST(test_corrupt_entry),
             OT_TEST(test_truncated_entry), OT_TEST(test_misplaced_entry),
             OT_TEST(test_concurrent_writers), OT_TEST(test_lru_eviction),
             OT_TEST(test_environment), OT_TEST(test_clear_leaves_other_files))
