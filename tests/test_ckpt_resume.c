/* Resume over damaged checkpoints (ot_ckpt_resume, ot_ckpt_set_aside) and the check of each
 * file's own metadata against the manifest that lists it. */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_util.h"
#include "ot_test.h"

static void save_steps(const char *root, const ot_ckpt_options *o, const int64_t *steps, int n) {
    ot_ckpt_manager *m;
    ASSERT_OK(ot_ckpt_open(root, o, &m));
    for (int i = 0; i < n; i++) {
        test_state s;
        test_state_init(&s, steps[i], 2);
        EXPECT_OK(ot_ckpt_save(m, &s.args, NULL));
        test_state_free(&s);
    }
    EXPECT_OK(ot_ckpt_close(m));
}

static void step_dir(char *buf, size_t n, const char *root, int64_t step, const char *suffix) {
    snprintf(buf, n, "%s/step_%08lld%s", root, (long long)step, suffix);
}

static bool exists(const char *p) {
    struct stat st;
    return lstat(p, &st) == 0;
}

/* A file of another step under a manifest rewritten to match its bytes: the hashes verify, the
 * file's optitpu.step metadata gives it away. */
static void test_metadata_checked(void) {
    const char *root = test_dir("resume_meta");
    save_steps(root, NULL, (int64_t[]){1, 2}, 2);
    char d1[600], d2[600], f1[700], f2[700];
    step_dir(d1, sizeof d1, root, 1, "");
    step_dir(d2, sizeof d2, root, 2, "");
    snprintf(f1, sizeof f1, "%s/model.safetensors", d1);
    snprintf(f2, sizeof f2, "%s/model.safetensors", d2);
    size_t n;
    char *b = slurp(f1, &n);
    ASSERT_TRUE(b != NULL);
    ASSERT_TRUE(spit(f2, b, n) == 0);
    free(b);
    ASSERT_TRUE(manifest_refit(d2, "model.safetensors") == 0);
    ot_ckpt *ck = NULL;
    EXPECT_STATUS(ot_ckpt_load(d2, &ck), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "model.safetensors: its metadata says optitpu.step 1");
    ot_ckpt_verify_report rep;
    EXPECT_STATUS(ot_ckpt_verify_dir(d2, &rep), OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(rep.nbad, 1);
    ot_ckpt_verify_report_clear(&rep);
    /* the rollback passes over it to step 1 */
    ot_ckpt_restore_report rr;
    ASSERT_OK(ot_ckpt_restore_latest(root, NULL, &ck, &rr));
    EXPECT_INT_EQ(ot_ckpt_step(ck), 1);
    EXPECT_INT_EQ(rr.nskipped, 1);
    ot_ckpt_free(ck);
    ot_ckpt_restore_report_clear(&rr);
    /* an optimizer shard file under the other shard's name: the shard metadata differs */
    save_steps(root, NULL, (int64_t[]){3}, 1);
    char d3[600], a[700], c[700];
    step_dir(d3, sizeof d3, root, 3, "");
    snprintf(a, sizeof a, "%s/optim-00000-of-00002.safetensors", d3);
    snprintf(c, sizeof c, "%s/optim-00001-of-00002.safetensors", d3);
    b = slurp(a, &n);
    ASSERT_TRUE(b != NULL);
    ASSERT_TRUE(spit(c, b, n) == 0);
    free(b);
    ASSERT_TRUE(manifest_refit(d3, "optim-00001-of-00002.safetensors") == 0);
    EXPECT_STATUS(ot_ckpt_load(d3, &ck), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "optitpu.shard 0/2, the manifest lists it as 1/2");
    rm_rf(root);
}

static int accept_calls;
static int64_t reject_step; /* accept: CORRUPT_DATA for this step */
static int64_t refuse_step; /* accept: FAILED_PRECONDITION for this step */

static ot_status accept_hook(void *ud, const ot_ckpt *ck) {
    (void)ud;
    accept_calls++;
    if (ot_ckpt_step(ck) == reject_step)
        return ot_error(OT_ERR_CORRUPT_DATA, "test: step %lld has the wrong tensors",
                        (long long)ot_ckpt_step(ck));
    if (ot_ckpt_step(ck) == refuse_step)
        return ot_error(OT_ERR_FAILED_PRECONDITION, "test: step %lld is of another job",
                        (long long)ot_ckpt_step(ck));
    return OT_OK;
}

static void test_resume_sets_aside(void) {
    const char *root = test_dir("resume_aside");
    save_steps(root, NULL, (int64_t[]){10, 20, 30, 40}, 4);
    char d[600], f[700];
    /* 40: a flipped bit; 30: an empty directory; 20: rejected by the caller */
    step_dir(d, sizeof d, root, 40, "");
    snprintf(f, sizeof f, "%s/model.safetensors", d);
    size_t n;
    char *b = slurp(f, &n);
    ASSERT_TRUE(b != NULL);
    b[n / 2] ^= 4;
    ASSERT_TRUE(spit(f, b, n) == 0);
    free(b);
    step_dir(d, sizeof d, root, 30, "");
    rm_rf(d);
    ASSERT_TRUE(mkdir(d, 0755) == 0);
    reject_step = 20;
    refuse_step = -1;
    accept_calls = 0;
    ot_ckpt *ck = NULL;
    ot_ckpt_restore_report rr;
    ASSERT_OK(ot_ckpt_resume(root, NULL, accept_hook, NULL, &ck, &rr));
    EXPECT_INT_EQ(ot_ckpt_step(ck), 10);
    EXPECT_INT_EQ(rr.step, 10);
    EXPECT_INT_EQ(accept_calls, 2); /* 20 and 10: 40 and 30 never verified */
    EXPECT_INT_EQ(rr.nskipped, 3);
    for (size_t i = 0; i < rr.nskipped; i++) {
        ASSERT_TRUE(rr.skipped[i].moved_to != NULL);
        step_dir(d, sizeof d, root, rr.skipped[i].step, ".damaged");
        EXPECT_STR_EQ(rr.skipped[i].moved_to, d);
        EXPECT_TRUE(exists(d));
    }
    EXPECT_STR_CONTAINS(rr.skipped[2].reason, "wrong tensors");
    ot_ckpt_free(ck);
    ot_ckpt_restore_report_clear(&rr);
    /* listed as damaged, kept by ot_ckpt_open, and step 40 can be saved again */
    ot_ckpt_entry *e;
    size_t ne;
    ASSERT_OK(ot_ckpt_list(root, &e, &ne));
    int damaged = 0, committed = 0;
    for (size_t i = 0; i < ne; i++) {
        damaged += e[i].damaged;
        committed += e[i].committed;
        EXPECT_TRUE(!(e[i].damaged && e[i].committed));
    }
    EXPECT_INT_EQ(damaged, 3);
    EXPECT_INT_EQ(committed, 1);
    ot_ckpt_entries_free(e, ne);
    save_steps(root, NULL, (int64_t[]){20, 30, 40}, 3);
    step_dir(d, sizeof d, root, 40, ".damaged");
    EXPECT_TRUE(exists(d));
    /* a second damaged copy of step 40 gets the next free name */
    step_dir(d, sizeof d, root, 40, "");
    snprintf(f, sizeof f, "%s/manifest.json", d);
    ASSERT_TRUE(unlink(f) == 0);
    reject_step = -1;
    ASSERT_OK(ot_ckpt_resume(root, NULL, accept_hook, NULL, &ck, &rr));
    EXPECT_INT_EQ(ot_ckpt_step(ck), 30);
    ASSERT_TRUE(rr.nskipped == 1 && rr.skipped[0].moved_to != NULL);
    step_dir(d, sizeof d, root, 40, ".damaged.2");
    EXPECT_STR_EQ(rr.skipped[0].moved_to, d);
    ot_ckpt_free(ck);
    ot_ckpt_restore_report_clear(&rr);
    rm_rf(root);
}

/* A caller's refusal stops the walk and moves nothing; none usable: all set aside, NOT_FOUND. */
static void test_resume_refusal_and_none(void) {
    const char *root = test_dir("resume_none");
    save_steps(root, NULL, (int64_t[]){1, 2}, 2);
    char d[600], f[700];
    step_dir(d, sizeof d, root, 2, "");
    snprintf(f, sizeof f, "%s/manifest.json", d);
    ASSERT_TRUE(truncate(f, 10) == 0);
    reject_step = -1;
    refuse_step = 1;
    ot_ckpt *ck = NULL;
    ot_ckpt_restore_report rr;
    EXPECT_STATUS(ot_ckpt_resume(root, NULL, accept_hook, NULL, &ck, &rr),
                  OT_ERR_FAILED_PRECONDITION);
    EXPECT_STR_CONTAINS(ot_last_error(), "another job");
    EXPECT_TRUE(ck == NULL);
    EXPECT_TRUE(exists(d)); /* the damaged step 2 stays where it was */
    ot_ckpt_restore_report_clear(&rr);
    /* a symlink loop in place of step 1 and a bad manifest at 2: nothing usable */
    refuse_step = -1;
    step_dir(d, sizeof d, root, 1, "");
    rm_rf(d);
    ASSERT_TRUE(symlink("step_00000001", d) == 0);
    EXPECT_STATUS(ot_ckpt_resume(root, NULL, accept_hook, NULL, &ck, &rr), OT_ERR_NOT_FOUND);
    EXPECT_STR_CONTAINS(ot_last_error(), "set aside");
    EXPECT_INT_EQ(rr.nskipped, 2);
    step_dir(d, sizeof d, root, 1, ".damaged");
    struct stat st;
    EXPECT_TRUE(lstat(d, &st) == 0 && S_ISLNK(st.st_mode)); /* moved as it was */
    ot_ckpt_restore_report_clear(&rr);
    /* nothing at all: NOT_FOUND, nothing to move */
    EXPECT_STATUS(ot_ckpt_resume(root, NULL, NULL, NULL, &ck, NULL), OT_ERR_NOT_FOUND);
    EXPECT_STATUS(ot_ckpt_set_aside(root, 7, NULL), OT_ERR_NOT_FOUND);
    rm_rf(root);
}

/* With replicas: a step damaged everywhere is set aside everywhere, so replication of a new save
 * of that step is not refused. */
static void test_resume_replicas(void) {
    const char *root = test_dir("resume_rep_p");
    const char *rep = test_dir("resume_rep_r");
    const char *reps[1] = {rep};
    ot_ckpt_options o = ot_ckpt_options_default();
    o.replicas = reps;
    o.nreplicas = 1;
    save_steps(root, &o, (int64_t[]){5, 6}, 2);
    char d[600], f[700];
    for (int k = 0; k < 2; k++) {
        step_dir(d, sizeof d, k ? rep : root, 6, "");
        snprintf(f, sizeof f, "%s/model.safetensors", d);
        ASSERT_TRUE(unlink(f) == 0);
    }
    ot_ckpt *ck = NULL;
    ASSERT_OK(ot_ckpt_resume(root, &o, NULL, NULL, &ck, NULL));
    EXPECT_INT_EQ(ot_ckpt_step(ck), 5);
    ot_ckpt_free(ck);
    for (int k = 0; k < 2; k++) {
        step_dir(d, sizeof d, k ? rep : root, 6, ".damaged");
        EXPECT_TRUE(exists(d));
    }
    save_steps(root, &o, (int64_t[]){6}, 1);
    step_dir(d, sizeof d, rep, 6, "");
    EXPECT_OK(ot_ckpt_verify_dir(d, NULL));
    rm_rf(root);
    rm_rf(rep);
}

/* ot_ckpt_open creates a root with its parents and keeps damaged steps (it removes .tmp ones). */
static void test_open_nested_keeps_damaged(void) {
    const char *base = test_dir("resume_nested");
    char root[700], d[800];
    snprintf(root, sizeof root, "%s/a/b/c", base);
    save_steps(root, NULL, (int64_t[]){3}, 1);
    step_dir(d, sizeof d, root, 3, "");
    EXPECT_OK(ot_ckpt_verify_dir(d, NULL));
    ASSERT_OK(ot_ckpt_set_aside(root, 3, NULL));
    step_dir(d, sizeof d, root, 4, ".tmp");
    ASSERT_TRUE(mkdir(d, 0755) == 0);
    ot_ckpt_manager *m;
    ASSERT_OK(ot_ckpt_open(root, NULL, &m));
    EXPECT_OK(ot_ckpt_close(m));
    EXPECT_TRUE(!exists(d));
    step_dir(d, sizeof d, root, 3, ".damaged");
    EXPECT_TRUE(exists(d));
    rm_rf(base);
}

OT_TEST_MAIN(OT_TEST(test_metadata_checked), OT_TEST(test_resume_sets_aside),
             OT_TEST(test_resume_refusal_and_none), OT_TEST(test_resume_replicas),
             OT_TEST(test_open_nested_keeps_damaged))
