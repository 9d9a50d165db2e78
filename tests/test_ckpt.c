/* Checkpoints: layout and manifest, verified restore, corruption (1,000 bit flips, truncations,
 * deleted files), rollback, retention, async save, injected and real I/O failures, replication
 * and repair, migration, export. */
#include "ot_test.h"
#include "ckpt_util.h"

#include <errno.h>
#include <signal.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "ft/ckpt_internal.h"
#include "ft/ft_io.h"

#define SCALE 5

static void save_steps(const char *root, const ot_ckpt_options *o, const int64_t *steps, int n) {
    ot_ckpt_manager *m;
    if (ot_ckpt_open(root, o, &m) != OT_OK) {
        OT_T_FAIL_("open %s: %s", root, ot_last_error());
        return;
    }
    for (int i = 0; i < n; i++) {
        test_state s;
        test_state_init(&s, steps[i], SCALE);
        EXPECT_OK(ot_ckpt_save(m, &s.args, NULL));
        test_state_free(&s);
    }
    EXPECT_OK(ot_ckpt_close(m));
}

static void test_layout_and_manifest(void) {
    const char *root = test_dir("ck_layout");
    int64_t live = ot_alloc_live();
    save_steps(root, NULL, (int64_t[]){100}, 1);
    char p[1024];
    snprintf(p, sizeof p, "%s/step_00000100/model.safetensors", root);
    EXPECT_TRUE(ot_ft_exists(p));
    snprintf(p, sizeof p, "%s/step_00000100/optim-00001-of-00002.safetensors", root);
    EXPECT_TRUE(ot_ft_exists(p));
    snprintf(p, sizeof p, "%s/step_00000100/manifest.json", root);
    EXPECT_TRUE(ot_ft_exists(p));
    snprintf(p, sizeof p, "%s/step_00000100.tmp", root);
    EXPECT_TRUE(!ot_ft_exists(p));
    ot_ckpt *ck;
    snprintf(p, sizeof p, "%s/step_00000100", root);
    ASSERT_OK(ot_ckpt_load(p, &ck));
    EXPECT_INT_EQ(test_state_compare(ck, 100, SCALE), 0);
    const ot_ckpt_manifest *m = ot_ckpt_manifest_of(ck);
    EXPECT_INT_EQ(m->format_version, OT_CKPT_FORMAT_VERSION);
    EXPECT_INT_EQ(m->step, 100);
    EXPECT_TRUE(m->time_unix_ns > 0);
    EXPECT_INT_EQ(m->pod.num_devices, 4);
    EXPECT_INT_EQ(m->pod.num_processes, 2);
    EXPECT_INT_EQ(m->pod.membership_epoch, 7);
    EXPECT_STR_EQ(m->pod.topology, "1 host x 2 processes x 2 devices");
    EXPECT_STR_CONTAINS(m->optimizer_json, "\"lr\":0.001");
    EXPECT_STR_EQ(m->rng_algorithm, "philox4x32");
    EXPECT_INT_EQ(m->data_epoch, 10);
    EXPECT_INT_EQ(m->data_index, 6400);
    double loss;
    EXPECT_TRUE(ot_ckpt_manifest_metric(m, "loss", &loss));
    EXPECT_NEAR(loss, 1.0 / 101, 0);
    EXPECT_INT_EQ(m->nfiles, 3);
    for (size_t i = 0; i < m->nfiles; i++) {
        uint8_t sha[32];
        uint64_t size;
        char fp[1024];
        snprintf(fp, sizeof fp, "%s/%s", ot_ckpt_dir(ck), m->files[i].path);
        EXPECT_OK(ot_ft_hash_file(fp, -1, sha, &size));
        EXPECT_U64_EQ(size, m->files[i].size);
        EXPECT_TRUE(memcmp(sha, m->files[i].sha256, 32) == 0);
    }
    /* each file stands alone for other safetensors readers */
    EXPECT_STR_EQ(ot_safetensors_metadata_get(ot_ckpt_file(ck, 0), "optitpu.step"), "100");
    ot_ckpt_free(ck);
    /* listing; a second save of the same step is refused */
    ot_ckpt_entry *e;
    size_t n;
    ASSERT_OK(ot_ckpt_list(root, &e, &n));
    EXPECT_INT_EQ(n, 1);
    EXPECT_TRUE(e[0].committed && e[0].step == 100);
    ot_ckpt_entries_free(e, n);
    ot_ckpt_manager *mg;
    ASSERT_OK(ot_ckpt_open(root, NULL, &mg));
    test_state s;
    test_state_init(&s, 100, SCALE);
    EXPECT_STATUS(ot_ckpt_save(mg, &s.args, NULL), OT_ERR_ALREADY_EXISTS);
    /* bad arguments */
    s.shards[0].role = "Bad/Role";
    EXPECT_STATUS(ot_ckpt_save(mg, &s.args, NULL), OT_ERR_INVALID_ARGUMENT);
    s.shards[0].role = "model";
    s.args.optimizer_json = "[1]";
    EXPECT_STATUS(ot_ckpt_save(mg, &s.args, NULL), OT_ERR_INVALID_ARGUMENT);
    test_state_free(&s);
    EXPECT_OK(ot_ckpt_close(mg));
    EXPECT_INT_EQ(ot_alloc_live(), live);
    rm_rf(root);
}

static void test_stale_tmp_removed_at_open(void) {
    const char *root = test_dir("ck_stale");
    save_steps(root, NULL, (int64_t[]){1}, 1);
    char p[1024];
    snprintf(p, sizeof p, "%s/step_00000002.tmp", root);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/step_00000002.tmp/model.safetensors", root);
    FILE *f = fopen(p, "w");
    fputs("partial", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/unrelated.tmp", root);
    mkdir(p, 0755);
    ot_ckpt *ck;
    ot_ckpt_restore_report rep;
    ASSERT_OK(ot_ckpt_restore_latest(root, NULL, &ck, &rep)); /* a .tmp is never a candidate */
    EXPECT_INT_EQ(ot_ckpt_step(ck), 1);
    EXPECT_INT_EQ(rep.nskipped, 0);
    ot_ckpt_free(ck);
    ot_ckpt_restore_report_clear(&rep);
    ot_ckpt_manager *m;
    ASSERT_OK(ot_ckpt_open(root, NULL, &m));
    snprintf(p, sizeof p, "%s/step_00000002.tmp", root);
    EXPECT_TRUE(!ot_ft_exists(p));
    snprintf(p, sizeof p, "%s/unrelated.tmp", root); /* not ours: left alone */
    EXPECT_TRUE(ot_ft_exists(p));
    EXPECT_OK(ot_ckpt_close(m));
    rm_rf(root);
}

/* ---- manifest parser ---------------------------------------------------------------------- */

static char *manifest_text(size_t *len) {
    test_state s;
    test_state_init(&s, 42, 2);
    ot_ckpt_file_entry fe[1] = {{"model.safetensors", "model", 0, 1, 1234, {1, 2, 3}}};
    char *t = NULL;
    ot_ckpt_manifest_build(&s.args, fe, 1, 1700000000000000000LL, &t, len);
    test_state_free(&s);
    return t;
}

/* Replaces the first occurrence of from by to, then re-signs the manifest (so the parser's
 * field checks, not the digest, must catch the problem). */
static ot_status parse_edited(const char *text, const char *from, const char *to, bool resign) {
    char buf[8192];
    const char *at = strstr(text, from);
    if (!at) return OT_ERR_INTERNAL;
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    ot_ckpt_manifest *m = NULL;
    ot_status s = ot_ckpt_manifest_parse(buf, strlen(buf), !resign, &m);
    ot_ckpt_manifest_free(m);
    return s;
}

static void test_manifest_parser(void) {
    size_t len;
    char *t = manifest_text(&len);
    ASSERT_TRUE(t != NULL);
    ot_ckpt_manifest *m;
    ASSERT_OK(ot_ckpt_manifest_parse(t, len, true, &m));
    EXPECT_INT_EQ(m->step, 42);
    EXPECT_INT_EQ(m->files[0].size, 1234);
    EXPECT_INT_EQ(m->files[0].sha256[2], 3);
    ot_ckpt_manifest_free(m);
    /* any semantic change breaks the self-digest */
    EXPECT_STATUS(parse_edited(t, "\"step\": 42", "\"step\": 43", false), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "manifest_sha256");
    /* field validation (digest check off, as the fuzzer runs it) */
    struct {
        const char *from, *to;
    } bad[] = {
        {"\"model.safetensors\"", "\"../model.safetensors\""},
        {"\"model.safetensors\"", "\"model.bin\""},
        {"\"size\": 1234", "\"size\": -1"},
        {"\"size\": 1234", "\"size\": \"1234\""},
        {"\"shard\": 0", "\"shard\": 1"},
        {"\"role\": \"model\"", "\"role\": \"Model!\""},
        {"\"format_version\": 1", "\"format_version\": 1.5"},
        {"\"optimizer\": {", "\"optimizer\": 3, \"x\": {"},
        {"\"step\": 42", "\"step\": -42"},
        {"\"format\": \"optitpu-checkpoint\"", "\"format\": \"other\""},
        {"\"epoch\": 4", "\"epoch\": null"},
        {"\"loss\": ", "\"loss\": \"x\", \"l2\": "},
        {"\"sha256\": \"01", "\"sha256\": \"0G"},
        {"\"state\": [", "\"state\": [\"xyz\", "},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ot_status s = parse_edited(t, bad[i].from, bad[i].to, true);
        if (s != OT_ERR_CORRUPT_DATA)
            OT_T_FAIL_("edit %zu (%s -> %s): %s", i, bad[i].from, bad[i].to, ot_status_str(s));
    }
    EXPECT_STATUS(parse_edited(t, "\"format_version\": 1", "\"format_version\": 2", true),
                  OT_ERR_UNIMPLEMENTED);
    EXPECT_STATUS(ot_ckpt_manifest_parse("{", 1, false, &m), OT_ERR_CORRUPT_DATA);
    EXPECT_STATUS(ot_ckpt_manifest_parse("[]", 2, false, &m), OT_ERR_CORRUPT_DATA);
    /* allocation failures: clean up, no leak */
    int64_t live = ot_alloc_live();
    bool ok = false;
    for (int64_t n = 1; n < 300 && !ok; n++) {
        ot_alloc_fail_after(n);
        ot_status s = ot_ckpt_manifest_parse(t, len, true, &m);
        ot_alloc_fail_after(0);
        if (s == OT_OK) {
            ok = true;
            ot_ckpt_manifest_free(m);
        } else {
            EXPECT_INT_EQ(s, OT_ERR_OUT_OF_MEMORY);
        }
        EXPECT_INT_EQ(ot_alloc_live(), live);
    }
    EXPECT_TRUE(ok);
    ot_free(t);
}

/* ---- corruption ---------------------------------------------------------------------------- */

typedef struct {
    char path[1400];
    uint8_t *orig;
    size_t len;
} file_copy;

static int read_step_files(const char *dir, file_copy *fc, int max) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL && n < max) {
        if (de->d_name[0] == '.') continue;
        snprintf(fc[n].path, sizeof fc[n].path, "%s/%s", dir, de->d_name);
        fc[n].orig = st_read_file(fc[n].path, &fc[n].len);
        n++;
    }
    if (d) closedir(d);
    return n;
}

static void write_bytes(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(b, 1, n, f);
    fclose(f);
}

#include <fcntl.h>

/* In-place edits (no truncate-to-zero rewrite, which makes ext4 flush on close). */
static void poke_byte(const char *path, size_t pos, uint8_t v) {
    int fd = open(path, O_WRONLY);
    if (fd < 0) return;
    if (pwrite(fd, &v, 1, (off_t)pos) != 1) fprintf(stderr, "pwrite %s failed\n", path);
    close(fd);
}

static void set_length(const char *path, const uint8_t *orig, size_t cut, size_t len) {
    int fd = open(path, O_WRONLY);
    if (fd < 0) return;
    if (cut < len) {
        if (ftruncate(fd, (off_t)cut) != 0) fprintf(stderr, "ftruncate failed\n");
    } else if (pwrite(fd, orig, len, 0) != (ssize_t)len) {
        fprintf(stderr, "pwrite %s failed\n", path);
    }
    close(fd);
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void test_corruption_detected(void) {
    const char *root = test_dir("ck_corrupt");
    save_steps(root, NULL, (int64_t[]){1, 2}, 2);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/step_00000002", root);
    file_copy fc[8];
    int nf = read_step_files(dir, fc, 8);
    ASSERT_TRUE(nf == 4);
    uint64_t seed = 0x1234567;
    int missed = 0, by_region[3] = {0, 0, 0};
    /* 1,000 single-bit flips: the file, then the region (manifest / safetensors header / data),
     * then the bit, chosen at random */
    for (int trial = 0; trial < 1000; trial++) {
        int f = (int)(rng_next(&seed) % (uint64_t)nf);
        size_t pos;
        bool is_manifest = strstr(fc[f].path, "manifest.json") != NULL;
        size_t hdr = 0;
        if (!is_manifest) {
            for (int i = 7; i >= 0; i--) hdr = (hdr << 8) | fc[f].orig[i];
            hdr += 8;
        }
        if (is_manifest || rng_next(&seed) % 2) {
            pos = (size_t)(rng_next(&seed) % (is_manifest ? fc[f].len : hdr));
            by_region[is_manifest ? 0 : 1]++;
        } else {
            pos = hdr + (size_t)(rng_next(&seed) % (fc[f].len - hdr));
            by_region[2]++;
        }
        poke_byte(fc[f].path, pos, fc[f].orig[pos] ^ (uint8_t)(1u << (rng_next(&seed) % 8)));
        ot_ckpt *ck = NULL;
        ot_status s = ot_ckpt_load(dir, &ck);
        if (s != OT_ERR_CORRUPT_DATA) {
            missed++;
            if (missed < 5)
                fprintf(stderr, "  flip %s @%zu (0x%02x, context '%.*s'): %s %s\n", fc[f].path, pos,
                        fc[f].orig[pos], 12, (const char *)fc[f].orig + (pos > 6 ? pos - 6 : 0),
                        ot_status_str(s), ot_last_error());
        } else if (!strstr(ot_last_error(), strrchr(fc[f].path, '/') + 1)) {
            missed++;
            fprintf(stderr, "  message does not name the file: %s\n", ot_last_error());
        }
        ot_ckpt_free(ck);
        poke_byte(fc[f].path, pos, fc[f].orig[pos]);
    }
    EXPECT_INT_EQ(missed, 0);
    EXPECT_TRUE(by_region[0] > 100 && by_region[1] > 100 && by_region[2] > 100);
    /* truncations at random lengths */
    for (int trial = 0; trial < 200; trial++) {
        int f = (int)(rng_next(&seed) % (uint64_t)nf);
        size_t cut = 1 + (size_t)(rng_next(&seed) % (fc[f].len - 1));
        set_length(fc[f].path, fc[f].orig, cut, fc[f].len);
        ot_ckpt *ck = NULL;
        ot_status s = ot_ckpt_load(dir, &ck);
        if (s != OT_ERR_CORRUPT_DATA)
            OT_T_FAIL_("truncate %s to %zu: %s", fc[f].path, cut, ot_status_str(s));
        ot_ckpt_free(ck);
        set_length(fc[f].path, fc[f].orig, fc[f].len, fc[f].len);
    }
    /* deleted files: detected by load and by verify (which names every bad file) */
    for (int f = 0; f < nf; f++) {
        unlink(fc[f].path);
        ot_ckpt *ck = NULL;
        EXPECT_STATUS(ot_ckpt_load(dir, &ck), OT_ERR_CORRUPT_DATA);
        EXPECT_STR_CONTAINS(ot_last_error(), strrchr(fc[f].path, '/') + 1);
        ot_ckpt_verify_report vr;
        EXPECT_STATUS(ot_ckpt_verify_dir(dir, &vr), OT_ERR_CORRUPT_DATA);
        EXPECT_INT_EQ(vr.nbad, 1);
        if (vr.nbad) EXPECT_STR_EQ(vr.bad[0].path, fc[f].path);
        ot_ckpt_verify_report_clear(&vr);
        write_bytes(fc[f].path, fc[f].orig, fc[f].len);
    }
    /* two bad files at once: verify names both */
    for (int f = 0; f < nf; f++) {
        if (strstr(fc[f].path, "manifest")) continue;
        uint8_t *c = malloc(fc[f].len);
        memcpy(c, fc[f].orig, fc[f].len);
        c[fc[f].len - 1] ^= 1;
        write_bytes(fc[f].path, c, fc[f].len);
        free(c);
    }
    ot_ckpt_verify_report vr;
    EXPECT_STATUS(ot_ckpt_verify_dir(dir, &vr), OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(vr.nbad, 3);
    ot_ckpt_verify_report_clear(&vr);
    /* rollback: step 2 is bad, so restore_latest gives step 1 and says why it skipped 2 */
    ot_ckpt *ck;
    ot_ckpt_restore_report rep;
    ASSERT_OK(ot_ckpt_restore_latest(root, NULL, &ck, &rep));
    EXPECT_INT_EQ(ot_ckpt_step(ck), 1);
    EXPECT_INT_EQ(test_state_compare(ck, 1, SCALE), 0);
    EXPECT_INT_EQ(rep.step, 1);
    EXPECT_INT_EQ(rep.nskipped, 1);
    if (rep.nskipped) {
        EXPECT_INT_EQ(rep.skipped[0].step, 2);
        EXPECT_INT_EQ(rep.skipped[0].status, OT_ERR_CORRUPT_DATA);
        EXPECT_STR_CONTAINS(rep.skipped[0].reason, "SHA-256");
    }
    ot_ckpt_free(ck);
    ot_ckpt_restore_report_clear(&rep);
    for (int f = 0; f < nf; f++) free(fc[f].orig);
    /* nothing verifies: CORRUPT_DATA with both skips listed; an empty root: NOT_FOUND */
    snprintf(dir, sizeof dir, "%s/step_00000001/manifest.json", root);
    unlink(dir);
    EXPECT_STATUS(ot_ckpt_restore_latest(root, NULL, &ck, &rep), OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(rep.nskipped, 2);
    ot_ckpt_restore_report_clear(&rep);
    rm_rf(root);
    mkdir(root, 0755);
    EXPECT_STATUS(ot_ckpt_restore_latest(root, NULL, &ck, &rep), OT_ERR_NOT_FOUND);
    ot_ckpt_restore_report_clear(&rep);
    rm_rf(root);
}

/* ---- retention ----------------------------------------------------------------------------- */

static int count_committed(const char *root, int64_t *steps, int max) {
    ot_ckpt_entry *e;
    size_t n;
    if (ot_ckpt_list(root, &e, &n) != OT_OK) return -1;
    int k = 0;
    for (size_t i = 0; i < n; i++)
        if (e[i].committed && k < max) steps[k++] = e[i].step;
    ot_ckpt_entries_free(e, n);
    return k;
}

static void test_retention(void) {
    const char *root = test_dir("ck_ret");
    ot_ckpt_options o = ot_ckpt_options_default();
    o.retention.keep_last = 2;
    o.retention.keep_every = 5;
    int64_t steps[12];
    for (int i = 0; i < 12; i++) steps[i] = i + 1;
    save_steps(root, &o, steps, 12);
    int64_t got[16];
    int n = count_committed(root, got, 16);
    /* last 2 (11, 12) and multiples of 5 (5, 10) */
    EXPECT_INT_EQ(n, 4);
    if (n == 4) {
        EXPECT_INT_EQ(got[0], 5);
        EXPECT_INT_EQ(got[1], 10);
        EXPECT_INT_EQ(got[2], 11);
        EXPECT_INT_EQ(got[3], 12);
    }
    /* best by metric: loss = 1/(step+1) is lowest for the newest; with keep_best on "neg" the
     * oldest survives */
    rm_rf(root);
    ot_ckpt_options ob = ot_ckpt_options_default();
    ob.retention.keep_last = 1;
    ob.retention.keep_best = 1;
    ob.retention.best_metric = "loss";
    ob.retention.best_higher = true; /* highest loss = step 1 */
    save_steps(root, &ob, steps, 4);
    n = count_committed(root, got, 16);
    EXPECT_INT_EQ(n, 2);
    if (n == 2) {
        EXPECT_INT_EQ(got[0], 1);
        EXPECT_INT_EQ(got[1], 4);
    }
    /* never delete the newest verified checkpoint: corrupt the newest, keep_last 1 */
    rm_rf(root);
    save_steps(root, NULL, steps, 3);
    char p[1024];
    snprintf(p, sizeof p, "%s/step_00000003/model.safetensors", root);
    size_t len;
    uint8_t *b = st_read_file(p, &len);
    b[len - 1] ^= 0x40;
    write_bytes(p, b, len);
    free(b);
    ot_ckpt_retention r = {.keep_last = 1};
    size_t nd;
    EXPECT_OK(ot_ckpt_apply_retention(root, &r, &nd));
    EXPECT_INT_EQ(nd, 1); /* step 1 only: 3 is the newest, 2 the newest verified */
    n = count_committed(root, got, 16);
    EXPECT_INT_EQ(n, 2);
    if (n == 2) EXPECT_INT_EQ(got[0], 2);
    rm_rf(root);
}

/* ---- async --------------------------------------------------------------------------------- */

static void test_async_save(void) {
    const char *root = test_dir("ck_async");
    ot_threadpool_default(); /* the process-wide pool the snapshot copy uses lives on */
    int64_t live = ot_alloc_live();
    ot_ckpt_manager *m;
    ASSERT_OK(ot_ckpt_open(root, NULL, &m));
    for (int64_t step = 1; step <= 5; step++) {
        test_state s;
        test_state_init(&s, step, SCALE);
        ASSERT_OK(ot_ckpt_save_async(m, &s.args));
        /* the caller's buffers are free to change at once: the snapshot was taken */
        for (int i = 0; i < CKPT_DTYPES + 4; i++)
            memset(s.bufs[i], 0xAB,
                   (size_t)ot_shape_nbytes_unchecked(
                       i < CKPT_DTYPES
                           ? &s.params[i].shape
                           : &s.optim[(i - CKPT_DTYPES) / 2][(i - CKPT_DTYPES) % 2].shape));
        test_state_free(&s);
    }
    ot_ckpt_save_stats st;
    EXPECT_OK(ot_ckpt_wait(m, &st));
    EXPECT_INT_EQ(st.step, 5);
    EXPECT_TRUE(st.bytes > 0);
    for (int64_t step = 1; step <= 5; step++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/step_%08lld", root, (long long)step);
        ot_ckpt *ck;
        ASSERT_OK(ot_ckpt_load(p, &ck));
        EXPECT_INT_EQ(test_state_compare(ck, step, SCALE), 0);
        ot_ckpt_free(ck);
    }
    /* a failing async save is reported on the next call, and not lost */
    test_state s;
    test_state_init(&s, 6, SCALE);
    ot_ft_inject_io_failure(3, ENOSPC);
    ASSERT_OK(ot_ckpt_save_async(m, &s.args));
    test_state_free(&s);
    test_state_init(&s, 7, SCALE);
    EXPECT_STATUS(ot_ckpt_save_async(m, &s.args), OT_ERR_IO);
    EXPECT_STR_CONTAINS(ot_last_error(), "async save of step 6 failed");
    EXPECT_STR_CONTAINS(ot_last_error(), "step_00000006.tmp/");
    ot_ft_inject_io_failure(0, 0);
    /* reported once: the retry goes through */
    EXPECT_OK(ot_ckpt_save_async(m, &s.args));
    test_state_free(&s);
    EXPECT_OK(ot_ckpt_wait(m, NULL));
    /* close reports a failure of the save in flight */
    test_state_init(&s, 8, SCALE);
    ot_ft_inject_io_failure(2, EIO);
    EXPECT_OK(ot_ckpt_save_async(m, &s.args));
    test_state_free(&s);
    EXPECT_STATUS(ot_ckpt_close(m), OT_ERR_IO);
    ot_ft_inject_io_failure(0, 0);
    EXPECT_INT_EQ(ot_alloc_live(), live);
    char p[1024];
    snprintf(p, sizeof p, "%s/step_00000006", root);
    EXPECT_TRUE(!ot_ft_exists(p));
    snprintf(p, sizeof p, "%s/step_00000007", root);
    EXPECT_TRUE(ot_ft_exists(p));
    rm_rf(root);
}

/* ---- I/O failures --------------------------------------------------------------------------- */

/* Every write-side system call of a save fails in turn: IO naming the file, the previous
 * checkpoint intact, nothing left behind. */
static void test_injected_io_failures(void) {
    const char *root = test_dir("ck_iofail");
    save_steps(root, NULL, (int64_t[]){1}, 1);
    ot_ckpt_manager *m;
    ASSERT_OK(ot_ckpt_open(root, NULL, &m));
    test_state s;
    test_state_init(&s, 2, SCALE);
    int failures = 0;
    int64_t live = ot_alloc_live();
    for (int n = 1; n < 200; n++) {
        ot_ft_inject_io_failure(n, n % 2 ? ENOSPC : EIO);
        ot_status rc = ot_ckpt_save(m, &s.args, NULL);
        ot_ft_inject_io_failure(0, 0);
        if (rc == OT_OK) break;
        failures++;
        EXPECT_INT_EQ(rc, OT_ERR_IO);
        EXPECT_STR_CONTAINS(ot_last_error(), root);
        EXPECT_STR_CONTAINS(ot_last_error(), n % 2 ? "No space left on device" : "Input/output");
        char p[1024];
        snprintf(p, sizeof p, "%s/step_00000002.tmp", root);
        if (ot_ft_exists(p)) OT_T_FAIL_("failure %d left %s", n, p);
        snprintf(p, sizeof p, "%s/step_00000002", root);
        if (ot_ft_exists(p)) OT_T_FAIL_("failure %d committed step 2", n);
        ot_ckpt *ck;
        ot_ckpt_restore_report rep;
        EXPECT_OK(ot_ckpt_restore_latest(root, NULL, &ck, &rep));
        if (ck) EXPECT_INT_EQ(test_state_compare(ck, 1, SCALE), 0);
        ot_ckpt_free(ck);
        ot_ckpt_restore_report_clear(&rep);
    }
    EXPECT_TRUE(failures >= 8); /* mkdir, 3 files x (write, fsync), manifest, dir fsync, rename */
    EXPECT_INT_EQ(ot_alloc_live(), live);
    test_state_free(&s);
    EXPECT_OK(ot_ckpt_close(m));
    rm_rf(root);
}

/* A real disk-full condition without root: RLIMIT_FSIZE makes write(2) fail with EFBIG in a
 * child process. */
static void test_real_write_limit(void) {
    const char *root = test_dir("ck_fsize");
    save_steps(root, NULL, (int64_t[]){1}, 1);
    int pfd[2];
    ASSERT_TRUE(pipe(pfd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {1000, 1000};
        setrlimit(RLIMIT_FSIZE, &rl);
        ot_ckpt_manager *m;
        char msg[600] = "";
        int code = 99;
        if (ot_ckpt_open(root, NULL, &m) == OT_OK) {
            test_state s;
            test_state_init(&s, 2, 64); /* files well over 1000 bytes */
            code = -ot_ckpt_save(m, &s.args, NULL);
            snprintf(msg, sizeof msg, "%s", ot_last_error());
            test_state_free(&s);
            ot_ckpt_close(m);
        }
        if (write(pfd[1], msg, strlen(msg) + 1) < 0) code = 98;
        _exit(code);
    }
    close(pfd[1]);
    char msg[600] = "";
    ssize_t r = read(pfd[0], msg, sizeof msg - 1);
    (void)r;
    close(pfd[0]);
    int st;
    waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st));
    EXPECT_INT_EQ(WEXITSTATUS(st), -OT_ERR_IO);
    EXPECT_STR_CONTAINS(msg, "File too large");
    EXPECT_STR_CONTAINS(msg, "model.safetensors");
    ot_ckpt *ck;
    ot_ckpt_restore_report rep;
    EXPECT_OK(ot_ckpt_restore_latest(root, NULL, &ck, &rep));
    if (ck) EXPECT_INT_EQ(ot_ckpt_step(ck), 1);
    ot_ckpt_free(ck);
    ot_ckpt_restore_report_clear(&rep);
    rm_rf(root);
}

/* A real full disk: a 512 KiB tmpfs in a private mount namespace (needs CAP_SYS_ADMIN; reported
 * as skipped where the kernel refuses: CTest runs it alone as test_ckpt_tmpfs). Step 1 fits, step 2
 * does not: IO naming the file, ENOSPC, step 1 intact, nothing left behind. */
static void test_tmpfs_disk_full(void) {
    char mnt[512];
    snprintf(mnt, sizeof mnt, "%s", test_dir("ck_tmpfs"));
    mkdir(mnt, 0755);
    int pfd[2];
    ASSERT_TRUE(pipe(pfd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        char msg[700] = "";
        int code = 0;
        if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("tmpfs", mnt, "tmpfs", 0, "size=512k") != 0) {
            snprintf(msg, sizeof msg, "%s", strerror(errno));
            code = 77;
        } else {
            char root[600];
            snprintf(root, sizeof root, "%s/ckpt", mnt);
            ot_ckpt_manager *m;
            test_state a, b;
            test_state_init(&a, 1, 5);
            test_state_init(&b, 2, 20000); /* megabytes: does not fit */
            if (ot_ckpt_open(root, NULL, &m) != OT_OK || ot_ckpt_save(m, &a.args, NULL) != OT_OK) {
                code = 1;
            } else {
                code = -ot_ckpt_save(m, &b.args, NULL);
                snprintf(msg, sizeof msg, "%s", ot_last_error());
                ot_ckpt *ck = NULL;
                ot_ckpt_restore_report rep;
                if (ot_ckpt_restore_latest(root, NULL, &ck, &rep) != OT_OK ||
                    test_state_compare(ck, 1, 5) != 0)
                    code = 2;
                char p2[700];
                snprintf(p2, sizeof p2, "%s/step_00000002.tmp", root);
                if (ot_ft_exists(p2)) code = 3;
                ot_ckpt_free(ck);
                ot_ckpt_restore_report_clear(&rep);
                ot_ckpt_close(m);
            }
            test_state_free(&a);
            test_state_free(&b);
        }
        if (write(pfd[1], msg, strlen(msg) + 1) < 0) code = 98;
        _exit(code);
    }
    close(pfd[1]);
    char msg[700] = "";
    ssize_t r = read(pfd[0], msg, sizeof msg - 1);
    (void)r;
    close(pfd[0]);
    int st;
    waitpid(pid, &st, 0);
    rm_rf(mnt);
    ASSERT_TRUE(WIFEXITED(st));
    if (WEXITSTATUS(st) == 77)
        OT_SKIP("cannot mount a tmpfs here (%s); test_real_write_limit covers EFBIG", msg);
    EXPECT_INT_EQ(WEXITSTATUS(st), -OT_ERR_IO);
    EXPECT_STR_CONTAINS(msg, "No space left on device");
    EXPECT_STR_CONTAINS(msg, "step_00000002.tmp/");
}

/* ---- replication --------------------------------------------------------------------------- */

static void test_replication_and_repair(void) {
    const char *root = test_dir("ck_prim"), *r1 = test_dir("ck_rep1"), *r2 = test_dir("ck_rep2");
    const char *reps[] = {r1, r2};
    ot_ckpt_options o = ot_ckpt_options_default();
    o.replicas = reps;
    o.nreplicas = 2;
    o.retention.keep_last = 2;
    save_steps(root, &o, (int64_t[]){1, 2, 3}, 3);
    char p[1024];
    for (int r = 0; r < 2; r++) {
        int64_t got[8];
        EXPECT_INT_EQ(count_committed(reps[r], got, 8), 2); /* retention runs on replicas too */
        snprintf(p, sizeof p, "%s/step_00000003", reps[r]);
        EXPECT_OK(ot_ckpt_verify_dir(p, NULL));
    }
    /* corrupt the primary's newest: restore repairs it from a replica */
    snprintf(p, sizeof p, "%s/step_00000003/optim-00000-of-00002.safetensors", root);
    size_t len;
    uint8_t *b = st_read_file(p, &len);
    b[len / 2] ^= 1;
    write_bytes(p, b, len);
    free(b);
    ot_ckpt *ck;
    ot_ckpt_restore_report rep;
    ASSERT_OK(ot_ckpt_restore_latest(root, &o, &ck, &rep));
    EXPECT_INT_EQ(ot_ckpt_step(ck), 3);
    EXPECT_INT_EQ(rep.nrepaired, 1);
    EXPECT_INT_EQ(rep.nskipped, 0);
    EXPECT_INT_EQ(test_state_compare(ck, 3, SCALE), 0);
    ot_ckpt_free(ck);
    ot_ckpt_restore_report_clear(&rep);
    snprintf(p, sizeof p, "%s/step_00000003", root);
    EXPECT_OK(ot_ckpt_verify_dir(p, NULL));
    /* a missing primary is repaired too; the first replica is corrupt, the second is used */
    rm_rf(p);
    snprintf(p, sizeof p, "%s/step_00000003/manifest.json", r1);
    unlink(p);
    ASSERT_OK(ot_ckpt_restore_latest(root, &o, &ck, &rep));
    EXPECT_INT_EQ(ot_ckpt_step(ck), 3);
    EXPECT_INT_EQ(rep.nrepaired, 1);
    ot_ckpt_free(ck);
    ot_ckpt_restore_report_clear(&rep);
    /* explicit repair with no verified replica */
    snprintf(p, sizeof p, "%s/step_00000002/model.safetensors", root);
    unlink(p);
    snprintf(p, sizeof p, "%s/step_00000002/model.safetensors", r1);
    unlink(p);
    snprintf(p, sizeof p, "%s/step_00000002/model.safetensors", r2);
    unlink(p);
    EXPECT_STATUS(ot_ckpt_repair(root, &o, 2), OT_ERR_NOT_FOUND);
    rm_rf(root);
    rm_rf(r1);
    rm_rf(r2);
}

/* ---- migration ----------------------------------------------------------------------------- */

typedef struct fake_dev {
    bool answers;
    bool corrupt_readback;
    test_state st;
    /* the target's memory: owned copies */
    int64_t step;
    ot_ckpt_tensor tp[32], to[32];
    size_t np, no;
    void *mem[64];
    int nmem;
} fake_dev;

static ot_status dev_read(void *ctx, ot_ft_state *st) {
    fake_dev *d = ctx;
    if (!d->answers) return ot_error(OT_ERR_PEER_FAILED, "device 3 does not answer");
    *st = (ot_ft_state){d->st.args.step, d->st.params, CKPT_DTYPES, d->st.optim[0], 2};
    return OT_OK;
}

static void dev_clear(fake_dev *d) {
    for (int i = 0; i < d->nmem; i++) free(d->mem[i]);
    d->nmem = 0;
    d->np = d->no = 0;
}

static ot_status dev_load(void *ctx, const ot_ft_state *st) {
    fake_dev *d = ctx;
    dev_clear(d);
    d->step = st->step;
    for (int k = 0; k < 2; k++) {
        const ot_ckpt_tensor *src = k ? st->optim : st->params;
        size_t n = k ? st->noptim : st->nparams;
        ot_ckpt_tensor *dst = k ? d->to : d->tp;
        for (size_t i = 0; i < n && i < 32; i++) {
            size_t nb = (size_t)ot_shape_nbytes_unchecked(&src[i].shape);
            void *b = malloc(nb + 1);
            memcpy(b, src[i].data, nb);
            char *nm = strdup(src[i].name);
            d->mem[d->nmem++] = b;
            d->mem[d->nmem++] = nm;
            dst[i] = (ot_ckpt_tensor){nm, src[i].shape, b};
        }
        if (k)
            d->no = n;
        else
            d->np = n;
    }
    return OT_OK;
}

static ot_status dev_read_back(void *ctx, ot_ft_state *st) {
    fake_dev *d = ctx;
    if (d->corrupt_readback && d->np) ((uint8_t *)d->tp[0].data)[0] ^= 1;
    *st = (ot_ft_state){d->step, d->tp, d->np, d->to, d->no};
    return OT_OK;
}

static void test_migration(void) {
    const char *root = test_dir("ck_migrate");
    /* checkpoint at step 10; the live device is at step 12 */
    save_steps(root, NULL, (int64_t[]){10}, 1);
    fake_dev src = {.answers = true}, dst = {0};
    test_state_init(&src.st, 12, SCALE);
    ot_ft_state_source s = {&src, dev_read, NULL};
    ot_ft_state_sink k = {&dst, dev_load, dev_read_back, NULL};
    ot_ft_migrate_report rep;
    int64_t live = ot_alloc_live();
    ASSERT_OK(ot_ft_migrate(&s, root, NULL, &k, &rep));
    EXPECT_INT_EQ(rep.path, OT_FT_MIGRATE_LIVE);
    EXPECT_INT_EQ(rep.step, 12);
    EXPECT_TRUE(rep.verified_readback);
    EXPECT_INT_EQ(dst.step, 12);
    EXPECT_INT_EQ(dst.np, CKPT_DTYPES);
    EXPECT_TRUE(memcmp(dst.tp[0].data, src.st.params[0].data, 3) == 0 || dst.tp[0].data != NULL);
    ot_ft_migrate_report_clear(&rep);
    /* the device is gone: newest verified checkpoint */
    src.answers = false;
    ASSERT_OK(ot_ft_migrate(&s, root, NULL, &k, &rep));
    EXPECT_INT_EQ(rep.path, OT_FT_MIGRATE_CHECKPOINT);
    EXPECT_INT_EQ(rep.step, 10);
    EXPECT_INT_EQ(rep.live_status, OT_ERR_PEER_FAILED);
    EXPECT_STR_CONTAINS(rep.live_error, "device 3");
    EXPECT_INT_EQ(dst.np, CKPT_DTYPES);
    EXPECT_INT_EQ(dst.no, 4); /* both optimizer shards */
    ot_ft_migrate_report_clear(&rep);
    /* the live copy does not verify on the target: fall back to the checkpoint... which also
     * fails to verify on this target, so: explicit error */
    src.answers = true;
    dst.corrupt_readback = true;
    EXPECT_STATUS(ot_ft_migrate(&s, root, NULL, &k, &rep), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STR_CONTAINS(ot_last_error(), "differs");
    ot_ft_migrate_report_clear(&rep);
    dst.corrupt_readback = false;
    /* no live device and no verifying checkpoint */
    src.answers = false;
    char p[1024];
    snprintf(p, sizeof p, "%s/step_00000010/model.safetensors", root);
    unlink(p);
    EXPECT_STATUS(ot_ft_migrate(&s, root, NULL, &k, &rep), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STR_CONTAINS(ot_last_error(), "does not answer");
    EXPECT_STR_CONTAINS(ot_last_error(), "model.safetensors");
    EXPECT_INT_EQ(rep.restore.nskipped, 1);
    ot_ft_migrate_report_clear(&rep);
    EXPECT_STATUS(ot_ft_migrate(NULL, NULL, NULL, &k, &rep), OT_ERR_FAILED_PRECONDITION);
    ot_ft_migrate_report_clear(&rep);
    EXPECT_INT_EQ(ot_alloc_live(), live);
    dev_clear(&dst);
    test_state_free(&src.st);
    rm_rf(root);
}

/* ---- export, alloc failures ------------------------------------------------------------------ */

static void test_export(void) {
    const char *root = test_dir("ck_export");
    save_steps(root, NULL, (int64_t[]){3}, 1);
    char p[1024], out[1024];
    snprintf(p, sizeof p, "%s/step_00000003", root);
    snprintf(out, sizeof out, "%s/model_only.safetensors", root);
    ot_ckpt *ck;
    ASSERT_OK(ot_ckpt_load(p, &ck));
    EXPECT_OK(ot_ckpt_export(ck, "model", out));
    ot_safetensors *st;
    ASSERT_OK(ot_safetensors_open(out, &st));
    EXPECT_INT_EQ(ot_safetensors_count(st), CKPT_DTYPES);
    ot_tensor a, b;
    EXPECT_OK(ot_safetensors_tensor(st, "p_f32", &a));
    EXPECT_OK(ot_ckpt_get(ck, "model", "p_f32", &b));
    EXPECT_TRUE(a.nbytes == b.nbytes && memcmp(a.data, b.data, a.nbytes) == 0);
    ot_safetensors_free(st);
    /* all roles: names prefixed with the role and, for sharded roles, the shard */
    EXPECT_OK(ot_ckpt_export(ck, NULL, out));
    ASSERT_OK(ot_safetensors_open(out, &st));
    EXPECT_INT_EQ(ot_safetensors_count(st), CKPT_DTYPES + 4);
    EXPECT_TRUE(ot_safetensors_find(st, "model/p_bf16") != NULL);
    EXPECT_TRUE(ot_safetensors_find(st, "optim.1/v") != NULL);
    ot_safetensors_free(st);
    EXPECT_OK(ot_ckpt_export(ck, "optim", out));
    ASSERT_OK(ot_safetensors_open(out, &st));
    EXPECT_TRUE(ot_safetensors_find(st, "0/m") != NULL);
    ot_safetensors_free(st);
    EXPECT_STATUS(ot_ckpt_export(ck, "nope", out), OT_ERR_NOT_FOUND);
    ot_ckpt_free(ck);
    rm_rf(root);
}

static void test_alloc_failures(void) {
    const char *root = test_dir("ck_alloc");
    save_steps(root, NULL, (int64_t[]){1}, 1);
    char p[1024];
    snprintf(p, sizeof p, "%s/step_00000001", root);
    int64_t live = ot_alloc_live();
    bool ok = false;
    for (int64_t n = 1; n < 2000 && !ok; n++) {
        ot_ckpt *ck = NULL;
        ot_alloc_fail_after(n);
        ot_status s = ot_ckpt_load(p, &ck);
        ot_alloc_fail_after(0);
        if (s == OT_OK)
            ok = true;
        else if (s != OT_ERR_OUT_OF_MEMORY)
            OT_T_FAIL_("load, failing alloc %lld: %s", (long long)n, ot_last_error());
        ot_ckpt_free(ck);
        if (ot_alloc_live() != live) {
            OT_T_FAIL_("load leaks after failing allocation %lld", (long long)n);
            break;
        }
    }
    EXPECT_TRUE(ok);
    ok = false;
    test_state s;
    for (int64_t n = 1; n < 2000 && !ok; n++) {
        test_state_init(&s, 2 + n, SCALE);
        ot_alloc_fail_after(n);
        ot_status rc = ot_ckpt_commit(root, &s.args, false, 1, NULL);
        ot_alloc_fail_after(0);
        test_state_free(&s);
        if (rc == OT_OK)
            ok = true;
        else if (rc != OT_ERR_OUT_OF_MEMORY)
            OT_T_FAIL_("commit, failing alloc %lld: %s", (long long)n, ot_last_error());
        if (ot_alloc_live() != live) {
            OT_T_FAIL_("commit leaks after failing allocation %lld", (long long)n);
            break;
        }
    }
    EXPECT_TRUE(ok);
    ot_ckpt_entry *e;
    size_t ne;
    ASSERT_OK(ot_ckpt_list(root, &e, &ne));
    EXPECT_INT_EQ(ne, 2); /* step 1 and the one that succeeded; no .tmp left */
    for (size_t i = 0; i < ne; i++) EXPECT_TRUE(e[i].committed);
    ot_ckpt_entries_free(e, ne);
    rm_rf(root);
}

/* Shards written side by side (three shards of 16 MiB or more, three writer threads) give the
 * same files, byte for byte, as one writer; an injected I/O failure in any of them is reported
 * (IO naming the file) and leaves nothing behind. */
static bool same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    static char ba[1 << 16], bb[1 << 16];
    while (same) {
        size_t na = fread(ba, 1, sizeof ba, fa), nb = fread(bb, 1, sizeof bb, fb);
        if (na != nb || memcmp(ba, bb, na) != 0) same = false;
        if (na == 0) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void test_parallel_writers(void) {
    const char *root1 = test_dir("ck_par1"), *root3 = test_dir("ck_par3");
    int64_t live = ot_alloc_live();
    test_state s;
    test_state_init(&s, 9, (int64_t)1 << 20); /* optimizer shards of 32 MiB, model ~220 MiB */
    ot_ckpt_options o = ot_ckpt_options_default();
    o.fsync = false;
    const char *roots[2] = {root1, root3};
    for (int r = 0; r < 2; r++) {
        o.write_threads = r ? 3 : 1;
        ot_ckpt_manager *m;
        ASSERT_OK(ot_ckpt_open(roots[r], &o, &m));
        EXPECT_OK(ot_ckpt_save(m, &s.args, NULL));
        EXPECT_OK(ot_ckpt_close(m));
    }
    static const char *files[] = {"model.safetensors", "optim-00000-of-00002.safetensors",
                                  "optim-00001-of-00002.safetensors"};
    for (int f = 0; f < 3; f++) {
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/step_00000009/%s", root1, files[f]);
        snprintf(b, sizeof b, "%s/step_00000009/%s", root3, files[f]);
        if (!same_file(a, b)) OT_T_FAIL_("%s differs between 1 and 3 writer threads", files[f]);
    }
    char p[1024];
    snprintf(p, sizeof p, "%s/step_00000009", root3);
    EXPECT_OK(ot_ckpt_verify_dir(p, NULL));
    /* a failing write in one of the concurrent files */
    o.write_threads = 3;
    for (int n = 1; n <= 6; n++) {
        test_state_free(&s);
        test_state_init(&s, 10 + n, (int64_t)1 << 20);
        ot_ckpt_manager *m;
        ASSERT_OK(ot_ckpt_open(root3, &o, &m));
        ot_ft_inject_io_failure(1 + (n - 1) * 6, EIO); /* mkdir, then the files' writes */
        ot_status rc = ot_ckpt_save(m, &s.args, NULL);
        ot_ft_inject_io_failure(0, 0);
        EXPECT_STATUS(rc, OT_ERR_IO);
        EXPECT_STR_CONTAINS(ot_last_error(), root3);
        EXPECT_STR_CONTAINS(ot_last_error(), "Input/output");
        EXPECT_OK(ot_ckpt_close(m));
        snprintf(p, sizeof p, "%s/step_%08d.tmp", root3, 10 + n);
        if (ot_ft_exists(p)) OT_T_FAIL_("failure %d left %s", n, p);
        snprintf(p, sizeof p, "%s/step_%08d", root3, 10 + n);
        if (ot_ft_exists(p)) OT_T_FAIL_("failure %d committed step %d", n, 10 + n);
    }
    test_state_free(&s);
    EXPECT_INT_EQ(ot_alloc_live(), live);
    rm_rf(root1);
    rm_rf(root3);
}

/* A checkpoint written by an earlier build (tests/data/ckpt) still loads, verified and equal. */
static void test_committed_fixture(void) {
    ot_ckpt *ck;
    ASSERT_OK(ot_ckpt_load(OT_SOURCE_DIR "/tests/data/ckpt/step_00000100", &ck));
    EXPECT_INT_EQ(test_state_compare(ck, 100, 2), 0);
    ot_ckpt_free(ck);
}

OT_TEST_MAIN(OT_TEST(test_layout_and_manifest), OT_TEST(test_committed_fixture),
             OT_TEST(test_stale_tmp_removed_at_open), OT_TEST(test_manifest_parser),
             OT_TEST(test_corruption_detected), OT_TEST(test_retention), OT_TEST(test_async_save),
             OT_TEST(test_injected_io_failures), OT_TEST(test_real_write_limit),
             OT_TEST(test_tmpfs_disk_full), OT_TEST(test_replication_and_repair),
             OT_TEST(test_migration), OT_TEST(test_export), OT_TEST(test_alloc_failures),
             OT_TEST(test_parallel_writers))
