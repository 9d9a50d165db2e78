/* Crash consistency: a child process saves checkpoints in a loop (synchronous and async saves,
 * retention deleting old ones) and is killed with SIGKILL at a random moment; after each kill,
 * ot_ckpt_restore_latest must return a verified checkpoint equal to what was saved at its step,
 * skipping nothing (a committed checkpoint always verifies), and the step never goes backwards.
 * This program runs CRASH_KILLS kills (20: the normal suite); test_ckpt_crash_slow runs 200.
 * SIGKILL tests process crashes; power loss (the fsyncs) cannot be simulated here. */
#include "ot_test.h"
#include "ckpt_util.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#ifndef CRASH_KILLS
#define CRASH_KILLS 20
#endif
#define CRASH_SCALE 3

/* Writes one byte to `ready` after each save call returns (for an async save, that call has also
 * committed the previous step). */
static void child_loop(const char *root, unsigned seed, int ready) {
    ot_ckpt_options o = ot_ckpt_options_default();
    o.retention.keep_last = 3;
    ot_ckpt_manager *m;
    if (ot_ckpt_open(root, &o, &m) != OT_OK) _exit(2);
    ot_ckpt_entry *e;
    size_t n;
    if (ot_ckpt_list(root, &e, &n) != OT_OK) _exit(3);
    int64_t step = 0;
    for (size_t i = 0; i < n; i++)
        if (e[i].committed && e[i].step >= step) step = e[i].step + 1;
    ot_ckpt_entries_free(e, n);
    for (;; step++) {
        test_state s;
        test_state_init(&s, step, CRASH_SCALE);
        ot_status rc = (seed + (unsigned)step) % 2 ? ot_ckpt_save_async(m, &s.args)
                                                   : ot_ckpt_save(m, &s.args, NULL);
        test_state_free(&s);
        if (rc != OT_OK) _exit(4);
        if (write(ready, "s", 1) != 1) _exit(5);
    }
}

static void test_sigkill_during_saves(void) {
    const char *root = test_dir(CRASH_KILLS > 20 ? "ck_crash_slow" : "ck_crash");
    /* a first checkpoint, so that there is always something to restore */
    ot_ckpt_manager *m;
    ASSERT_OK(ot_ckpt_open(root, NULL, &m));
    test_state s0;
    test_state_init(&s0, 0, CRASH_SCALE);
    ASSERT_OK(ot_ckpt_save(m, &s0.args, NULL));
    test_state_free(&s0);
    ASSERT_OK(ot_ckpt_close(m));
    uint64_t rnd = (uint64_t)time(NULL) * 2654435761u | 1;
    printf("  seed %llu\n", (unsigned long long)rnd);
    int64_t last = 0, advanced = 0;
    for (int kill_no = 0; kill_no < CRASH_KILLS; kill_no++) {
        rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
        int pfd[2];
        ASSERT_TRUE(pipe(pfd) == 0);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
            close(pfd[0]);
            child_loop(root, (unsigned)rnd, pfd[1]);
        }
        close(pfd[1]);
        /* let the child finish kill_no % 3 save calls (so that progress does not depend on how
         * loaded the machine is: every third kill comes after at least one new commit), then
         * kill it at a random moment 0..20 ms later: during open, a save, retention */
        int want = kill_no % 3;
        for (int k = 0; k < want; k++) {
            char c;
            if (read(pfd[0], &c, 1) != 1) {
                OT_T_FAIL_("kill %d: the child stopped saving", kill_no);
                break;
            }
        }
        struct timespec ts = {0, (long)(rnd % 20000000)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        close(pfd[0]);
        int st;
        waitpid(pid, &st, 0);
        if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
            OT_T_FAIL_("kill %d: child ended by itself (status %d)", kill_no, st);
        ot_ckpt *ck = NULL;
        ot_ckpt_restore_report rep;
        ot_status rc = ot_ckpt_restore_latest(root, NULL, &ck, &rep);
        if (rc != OT_OK) {
            OT_T_FAIL_("kill %d: restore_latest: %s", kill_no, ot_last_error());
        } else {
            int64_t step = ot_ckpt_step(ck);
            if (test_state_compare(ck, step, CRASH_SCALE) != 0)
                OT_T_FAIL_("kill %d: step %lld differs from what was saved", kill_no,
                           (long long)step);
            if (rep.nskipped != 0)
                OT_T_FAIL_("kill %d: a committed checkpoint did not verify: %s", kill_no,
                           rep.skipped[0].reason);
            if (step < last)
                OT_T_FAIL_("kill %d: step went back from %lld to %lld", kill_no, (long long)last,
                           (long long)step);
            if (step > last) advanced++;
            last = step;
        }
        ot_ckpt_free(ck);
        ot_ckpt_restore_report_clear(&rep);
    }
    printf("  %d kills, newest step %lld, advanced %lld times\n", CRASH_KILLS, (long long)last,
           (long long)advanced);
    EXPECT_TRUE(advanced > 0);
    rm_rf(root);
}

OT_TEST_MAIN(OT_TEST(test_sigkill_during_saves))
