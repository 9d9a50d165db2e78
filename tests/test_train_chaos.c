/* Chaos test of checkpoints and resume (CTest label "chaos"): `optitpu train` runs are stopped
 * (--stop-after) or killed with SIGKILL at random moments, random subsets of their checkpoints are
 * damaged in random ways (bit flips, truncation, deleted files, an empty directory, a manifest of
 * another step, symlink loops, a directory replaced by a file, tensors of other shapes or a file of
 * another step under a manifest rewritten to match), and every run resumed with --resume must end
 * with parameters bit-identical to an uninterrupted run, its metrics.csv holding every step once
 * with the uninterrupted run's values, and no run taking long (no 30 s collective timeout). A
 * run killed or stopped leaves metrics.csv holding its rows so far, at least up to its newest
 * checkpoint.
 *
 * First every kind of damage is applied to the newest checkpoint (and two kinds to the two newest
 * on 4 devices); then OT_CHAOS_ROUNDS (default 8) random rounds. The seed is printed; rerun one
 * with OT_CHAOS_SEED=N. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_util.h"
#include "ot_test.h"

extern char **environ;

#define STEPS    40
#define EVERY    4
#define MAX_SECS 20.0 /* a run (seconds): far below the all-reduce's 30 s timeout */
#define NFILES   3
#define STR_(x)  #x
#define STR(x)   STR_(x)

static const char *const files[NFILES] = {"manifest.json", "model.safetensors",
                                          "optim.safetensors"};
static char root[512];
static uint64_t rng_state;
static int any_failure; /* over all tests: the work directory is kept for a look */

static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t below(uint64_t n) {
    return n ? rnd() % n : 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct run_result {
    int exit_code; /* -1: killed */
    double secs;
    char sha[65];
    int64_t start_step;
} run_result;

/* One `optitpu train` process: stopped after stop_after steps (0: not), killed with SIGKILL after
 * kill_ms milliseconds (< 0: not). stdout (the JSON report) and stderr go to DIR/stdout.txt and
 * DIR/stderr.txt. */
static int run_train(const char *dir, int devices, int keep, int64_t stop_after, int kill_ms,
                     run_result *r) {
    memset(r, 0, sizeof *r);
    char ck[700], out[700], so[700], se[700], dv[16], kp[16], st[32];
    snprintf(ck, sizeof ck, "%s/ck", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(so, sizeof so, "%s/stdout.txt", dir);
    snprintf(se, sizeof se, "%s/stderr.txt", dir);
    snprintf(dv, sizeof dv, "%d", devices);
    snprintf(kp, sizeof kp, "%d", keep);
    snprintf(st, sizeof st, "%lld", (long long)stop_after);
    const char *argv[32] = {OT_BINARY_DIR "/optitpu",
                            "train",
                            "--devices",
                            dv,
                            "--steps",
                            STR(STEPS),
                            "--ckpt-every",
                            STR(EVERY),
                            "--keep",
                            kp,
                            "--eval-every",
                            "0",
                            "--quiet",
                            "--json",
                            "--resume",
                            "--ckpt-dir",
                            ck,
                            "--out",
                            out};
    int argc = 19;
    if (stop_after > 0) {
        argv[argc++] = "--stop-after";
        argv[argc++] = st;
    }
    argv[argc] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, so, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, se, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    double t0 = now_s();
    int e = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e != 0) {
        fprintf(stderr, "  cannot start %s: %s\n", argv[0], strerror(e));
        return -1;
    }
    int status = 0;
    bool done = false;
    if (kill_ms >= 0) {
        while (!done && (now_s() - t0) * 1e3 < kill_ms) {
            if (waitpid(pid, &status, WNOHANG) == pid)
                done = true;
            else
                nanosleep(&(struct timespec){0, 1000000}, NULL);
        }
        if (!done) kill(pid, SIGKILL);
    }
    if (!done && waitpid(pid, &status, 0) != pid) return -1;
    r->secs = now_s() - t0;
    r->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    char *js = slurp(so, NULL);
    const char *h = js ? strstr(js, "\"params_sha256\":\"") : NULL;
    if (h) snprintf(r->sha, sizeof r->sha, "%.64s", h + strlen("\"params_sha256\":\""));
    const char *s0 = js ? strstr(js, "\"start_step\":") : NULL;
    r->start_step = s0 ? atoll(s0 + strlen("\"start_step\":")) : -1;
    free(js);
    return 0;
}

static void print_stderr(const char *dir) {
    char se[700];
    snprintf(se, sizeof se, "%s/stderr.txt", dir);
    char *t = slurp(se, NULL);
    if (t) fprintf(stderr, "  --- %s:\n%s\n", se, t);
    free(t);
}

/* ---- the uninterrupted runs ---- */

typedef struct reference {
    char sha[65];
    char *rows[STEPS + 1]; /* metrics.csv line of each step */
    double secs;
} reference;

static reference refs[5]; /* by device count (2 and 4 used) */

static void free_refs(void) {
    for (int d = 0; d < 5; d++)
        for (int s = 0; s <= STEPS; s++) free(refs[d].rows[s]);
}

/* The rows of DIR/out/metrics.csv by step (0 when a step has none); -1 when the file is not a
 * sequence of increasing steps, each at most once. */
static int read_rows(const char *dir, char *rows[STEPS + 1]) {
    char p[700];
    snprintf(p, sizeof p, "%s/out/metrics.csv", dir);
    char *t = slurp(p, NULL);
    if (!t) return -1;
    int rc = 0;
    int64_t last = 0;
    char *save = NULL;
    for (char *l = strtok_r(t, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(l, "step,", 5)) continue;
        int64_t s = atoll(l);
        if (s <= last || s > STEPS) {
            fprintf(stderr, "  %s: step %lld after step %lld\n", p, (long long)s, (long long)last);
            rc = -1;
            break;
        }
        last = s;
        rows[s] = strdup(l);
    }
    free(t);
    return rc;
}

static void make_reference(int devices) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/ref%d", root, devices);
    mkdir(dir, 0755);
    run_result r;
    ASSERT_TRUE(run_train(dir, devices, 100, 0, -1, &r) == 0);
    EXPECT_INT_EQ(r.exit_code, 0);
    if (r.exit_code != 0) print_stderr(dir);
    EXPECT_INT_EQ(strlen(r.sha), 64);
    memcpy(refs[devices].sha, r.sha, sizeof r.sha);
    refs[devices].secs = r.secs;
    EXPECT_INT_EQ(read_rows(dir, refs[devices].rows), 0);
    for (int s = 1; s <= STEPS; s++) EXPECT_TRUE(refs[devices].rows[s] != NULL);
}

/* ---- damage ---- */

enum {
    D_FLIP,       /* one bit of a file */
    D_TRUNCATE,   /* a file cut short */
    D_DELETE,     /* a file removed */
    D_EMPTY,      /* every file removed: an empty directory */
    D_WRONG_STEP, /* the manifest of another step */
    D_LOOP_FILE,  /* a file replaced by a symlink to itself */
    D_LOOP_DIR,   /* the step directory replaced by a symlink to itself */
    D_NOT_DIR,    /* the step directory replaced by a regular file */
    D_SHAPES,     /* a parameter of another shape, the manifest rewritten to match */
    D_SWAP,       /* the model file of another step, the manifest rewritten to match */
    D_KINDS
};

static const char *const kind_names[D_KINDS] = {"flip",       "truncate",  "delete",   "empty",
                                                "wrong-step", "loop-file", "loop-dir", "not-dir",
                                                "shapes",     "swap"};

/* A committed step of ck other than `step` (-1 when none). */
static int64_t other_step(const char *ck, int64_t step) {
    ot_ckpt_entry *e;
    size_t n;
    int64_t found = -1;
    if (ot_ckpt_list(ck, &e, &n) != OT_OK) return -1;
    size_t k = n ? (size_t)below(n) : 0;
    for (size_t i = 0; i < n && found < 0; i++) {
        const ot_ckpt_entry *x = &e[(k + i) % n];
        if (x->committed && x->step != step) found = x->step;
    }
    ot_ckpt_entries_free(e, n);
    return found;
}

static int copy_file(const char *from, const char *to) {
    size_t n;
    char *b = slurp(from, &n);
    if (!b) return -1;
    unlink(to);
    int rc = spit(to, b, n);
    free(b);
    return rc;
}

/* model.safetensors rewritten with its first tensor one element shorter in its last dimension,
 * the rest (and the metadata) as they were. */
static int rewrite_shapes(const char *sd) {
    char p[800], tmp[800];
    snprintf(p, sizeof p, "%s/model.safetensors", sd);
    snprintf(tmp, sizeof tmp, "%s/model.new", sd);
    ot_safetensors *st;
    if (ot_safetensors_open(p, &st) != OT_OK) return -1;
    size_t n = ot_safetensors_count(st), nm = ot_safetensors_metadata_count(st);
    ot_st_entry *e = calloc(n, sizeof *e);
    ot_st_kv *kv = calloc(nm ? nm : 1, sizeof *kv);
    int64_t dims[8];
    for (size_t i = 0; i < n; i++) {
        const ot_st_info *t = ot_safetensors_at(st, i);
        e[i] = (ot_st_entry){t->name, t->dtype, t->rank, t->dims, t->data};
    }
    const ot_st_info *t0 = ot_safetensors_at(st, 0);
    memcpy(dims, t0->dims, (size_t)t0->rank * sizeof *dims);
    dims[t0->rank - 1] -= 1; /* data: a prefix of the original */
    e[0].dims = dims;
    for (size_t i = 0; i < nm; i++) kv[i] = ot_safetensors_metadata_at(st, i);
    ot_st_write_options wo = ot_st_write_options_default();
    wo.fsync = false;
    int rc = ot_safetensors_write_file(tmp, e, n, kv, nm, &wo, NULL) == OT_OK ? 0 : -1;
    ot_safetensors_free(st);
    free(e);
    free(kv);
    if (rc == 0) rc = rename(tmp, p);
    return rc == 0 ? manifest_refit(sd, "model.safetensors") : -1;
}

/* Damages step `step` of ck with `kind`; describes what was done in desc. 0 on success. */
static int damage(const char *ck, int64_t step, int kind, char *desc, size_t dn) {
    char sd[700], f[800];
    snprintf(sd, sizeof sd, "%s/step_%08lld", ck, (long long)step);
    const char *file = files[below(NFILES)];
    snprintf(f, sizeof f, "%s/%s", sd, file);
    snprintf(desc, dn, "%lld:%s", (long long)step, kind_names[kind]);
    switch (kind) {
    case D_FLIP: {
        size_t n;
        char *b = slurp(f, &n);
        if (!b || n == 0) return -1;
        size_t at = (size_t)below(n);
        b[at] ^= (char)(1u << below(8));
        int rc = spit(f, b, n);
        free(b);
        snprintf(desc, dn, "%lld:flip(%s@%zu)", (long long)step, file, at);
        return rc;
    }
    case D_TRUNCATE: {
        struct stat sb;
        if (stat(f, &sb) != 0) return -1;
        off_t to = (off_t)below((uint64_t)sb.st_size);
        snprintf(desc, dn, "%lld:truncate(%s to %lld)", (long long)step, file, (long long)to);
        return truncate(f, to);
    }
    case D_DELETE: snprintf(desc, dn, "%lld:delete(%s)", (long long)step, file); return unlink(f);
    case D_EMPTY:
        for (int i = 0; i < NFILES; i++) {
            snprintf(f, sizeof f, "%s/%s", sd, files[i]);
            if (unlink(f) != 0) return -1;
        }
        return 0;
    case D_WRONG_STEP: {
        int64_t o = other_step(ck, step);
        if (o < 0) return damage(ck, step, D_FLIP, desc, dn);
        char from[800];
        snprintf(from, sizeof from, "%s/step_%08lld/manifest.json", ck, (long long)o);
        snprintf(f, sizeof f, "%s/manifest.json", sd);
        snprintf(desc, dn, "%lld:wrong-step(manifest of %lld)", (long long)step, (long long)o);
        return copy_file(from, f);
    }
    case D_LOOP_FILE:
        snprintf(desc, dn, "%lld:loop-file(%s)", (long long)step, file);
        if (unlink(f) != 0) return -1;
        return symlink(file, f);
    case D_LOOP_DIR: {
        rm_rf(sd);
        const char *base = strrchr(sd, '/') + 1;
        return symlink(base, sd);
    }
    case D_NOT_DIR: rm_rf(sd); return spit(sd, "not a checkpoint\n", 17);
    case D_SHAPES: return rewrite_shapes(sd);
    case D_SWAP: {
        int64_t o = other_step(ck, step);
        if (o < 0) return damage(ck, step, D_SHAPES, desc, dn);
        char from[800];
        snprintf(from, sizeof from, "%s/step_%08lld/model.safetensors", ck, (long long)o);
        snprintf(f, sizeof f, "%s/model.safetensors", sd);
        snprintf(desc, dn, "%lld:swap(model of %lld)", (long long)step, (long long)o);
        if (copy_file(from, f) != 0) return -1;
        return manifest_refit(sd, "model.safetensors");
    }
    }
    return -1;
}

/* ---- checks on a finished run ---- */

static bool has_damaged_entry(const char *ck, int64_t step) {
    ot_ckpt_entry *e;
    size_t n;
    bool found = false;
    if (ot_ckpt_list(ck, &e, &n) != OT_OK) return false;
    for (size_t i = 0; i < n; i++)
        if (e[i].damaged && e[i].step == step) found = true;
    ot_ckpt_entries_free(e, n);
    return found;
}

/* The newest step of ck that is committed and not set aside; 0 when none. */
static int64_t newest_committed(const char *ck) {
    ot_ckpt_entry *e;
    size_t n;
    int64_t newest = 0;
    if (ot_ckpt_list(ck, &e, &n) != OT_OK) {
        ot_clear_error();
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (e[i].committed && !e[i].damaged && e[i].step > newest) newest = e[i].step;
    ot_ckpt_entries_free(e, n);
    return newest;
}

/* After a run that was killed or stopped, before any damage: metrics.csv holds the rows of steps
 * 1..M, each the uninterrupted run's, with M at least the newest committed checkpoint's step
 * (a step's row is written before its checkpoint is taken), and after them at most one row cut
 * off by the kill without its newline (a prefix of step M+1's row). */
static void check_interrupted(const char *dir, int devices) {
    char p[700], ck[700];
    snprintf(p, sizeof p, "%s/out/metrics.csv", dir);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    int64_t newest = newest_committed(ck);
    size_t n = 0;
    char *t = slurp(p, &n);
    if (!t) {
        if (newest > 0)
            fprintf(stderr, "  %s: no metrics.csv, step %lld saved\n", p, (long long)newest);
        EXPECT_INT_EQ(newest, 0);
        return;
    }
    char *torn = NULL;
    if (n > 0 && t[n - 1] != '\n') {
        char *nl = strrchr(t, '\n');
        torn = nl ? nl + 1 : t;
    }
    int64_t m = 0;
    bool ok = true;
    char *line = t;
    for (char *nl; ok && line < (torn ? torn : t + n) && (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = 0;
        if (line == t) {
            ok = !strcmp(line, "step,loss,train_accuracy,test_accuracy,lr");
        } else {
            ok = m < STEPS && !strcmp(line, refs[devices].rows[m + 1]);
            m++;
        }
        if (!ok)
            fprintf(stderr, "  %s: line '%s' where step %lld's row was due\n", p, line,
                    (long long)m);
    }
    if (ok && torn && *torn)
        ok = m < STEPS && !strncmp(torn, refs[devices].rows[m + 1], strlen(torn));
    if (ok && m < newest) {
        fprintf(stderr, "  %s: rows up to step %lld, step %lld saved\n", p, (long long)m,
                (long long)newest);
        ok = false;
    }
    EXPECT_TRUE(ok);
    free(t);
}

/* The finished run in dir: the uninterrupted run's parameters, and a metrics.csv whose rows are
 * the uninterrupted run's, every step once. */
static void check_final(const char *dir, int devices, const run_result *r) {
    EXPECT_INT_EQ(r->exit_code, 0);
    if (r->exit_code != 0) print_stderr(dir);
    EXPECT_STR_EQ(r->sha, refs[devices].sha);
    EXPECT_TRUE(r->secs < MAX_SECS);
    char *rows[STEPS + 1] = {0};
    EXPECT_INT_EQ(read_rows(dir, rows), 0);
    for (int s = 1; s <= STEPS; s++) {
        if (!rows[s]) {
            /* the rows up to the resumed step were written by the interrupted runs */
            fprintf(stderr, "  %s: no row of step %d (resumed from step %lld)\n", dir, s,
                    (long long)r->start_step);
            EXPECT_TRUE(false);
            continue;
        }
        if (strcmp(rows[s], refs[devices].rows[s]) != 0) {
            fprintf(stderr, "  %s: row of step %d is '%s', uninterrupted '%s'\n", dir, s, rows[s],
                    refs[devices].rows[s]);
            EXPECT_TRUE(false);
        }
        free(rows[s]);
    }
}

/* Every kind of damage to the newest step (stopped after step 38: steps 4..36 saved). */
static void test_each_kind(void) {
    for (int k = 0; k < D_KINDS; k++) {
        char dir[600], desc[256];
        snprintf(dir, sizeof dir, "%s/kind_%s", root, kind_names[k]);
        mkdir(dir, 0755);
        run_result r;
        ASSERT_TRUE(run_train(dir, 2, 100, 38, -1, &r) == 0);
        EXPECT_INT_EQ(r.exit_code, 0);
        char ck[700];
        snprintf(ck, sizeof ck, "%s/ck", dir);
        EXPECT_INT_EQ(damage(ck, 36, k, desc, sizeof desc), 0);
        ASSERT_TRUE(run_train(dir, 2, 100, 0, -1, &r) == 0);
        printf("  damage %-40s -> resumed from step %lld in %.2f s\n", desc,
               (long long)r.start_step, r.secs);
        EXPECT_INT_EQ(r.start_step, 32);
        check_final(dir, 2, &r);
        EXPECT_TRUE(has_damaged_entry(ck, 36)); /* kept for inspection, listed as damaged */
        char sd[800];
        snprintf(sd, sizeof sd, "%s/step_%08d", ck, 36);
        EXPECT_INT_EQ(ot_ckpt_verify_dir(sd, NULL), OT_OK); /* saved again by the resumed run */
    }
}

/* Two damaged steps on four devices: the resume falls back past both at once (no stall). */
static void test_two_damaged_four_devices(void) {
    char dir[600], d1[256], d2[256], ck[700];
    snprintf(dir, sizeof dir, "%s/two", root);
    mkdir(dir, 0755);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    run_result r;
    ASSERT_TRUE(run_train(dir, 4, 100, 38, -1, &r) == 0);
    EXPECT_INT_EQ(r.exit_code, 0);
    EXPECT_INT_EQ(damage(ck, 36, D_FLIP, d1, sizeof d1), 0);
    EXPECT_INT_EQ(damage(ck, 32, D_SHAPES, d2, sizeof d2), 0);
    ASSERT_TRUE(run_train(dir, 4, 100, 0, -1, &r) == 0);
    printf("  damage %s and %s on 4 devices -> resumed from step %lld in %.2f s\n", d1, d2,
           (long long)r.start_step, r.secs);
    EXPECT_INT_EQ(r.start_step, 28);
    check_final(dir, 4, &r);
    EXPECT_TRUE(has_damaged_entry(ck, 36) && has_damaged_entry(ck, 32));
}

/* Random rounds: each run is stopped or killed at a random moment, then a random subset of the
 * checkpoints is damaged in random ways, up to three times, then a run to the end. */
static void test_random_rounds(void) {
    const char *env = getenv("OT_CHAOS_ROUNDS");
    int rounds = env ? atoi(env) : 8;
    for (int round = 0; round < rounds; round++) {
        int devices = below(2) ? 4 : 2;
        int keep = (int[]){2, 3, 100}[below(3)];
        int interrupts = 1 + (int)below(3);
        char dir[600], ck[700];
        snprintf(dir, sizeof dir, "%s/round%d", root, round);
        snprintf(ck, sizeof ck, "%s/ck", dir);
        mkdir(dir, 0755);
        printf("  round %d: %d devices, --keep %d\n", round, devices, keep);
        run_result r;
        for (int a = 0; a <= interrupts; a++) {
            bool last = a == interrupts;
            int64_t stop = 0;
            int kill_ms = -1;
            if (!last && below(2))
                stop = 1 + (int64_t)below(STEPS - 1);
            else if (!last) /* anywhere from start-up to a little after the usual end */
                kill_ms = (int)below((uint64_t)(refs[devices].secs * 1.3e3) + 1);
            ASSERT_TRUE(run_train(dir, devices, keep, stop, kill_ms, &r) == 0);
            printf("    run %d: %s -> exit %d, from step %lld, %.2f s\n", a,
                   stop   ? "--stop-after"
                   : last ? "to the end"
                          : "SIGKILL",
                   r.exit_code, (long long)r.start_step, r.secs);
            if (stop) printf("      (--stop-after %lld)\n", (long long)stop);
            if (kill_ms >= 0) printf("      (killed after %d ms)\n", kill_ms);
            if (kill_ms < 0 && r.exit_code != 0) {
                EXPECT_INT_EQ(r.exit_code, 0);
                print_stderr(dir);
            }
            EXPECT_TRUE(r.secs < MAX_SECS);
            if (last) break;
            check_interrupted(dir, devices);
            /* a random subset of the committed checkpoints, each damaged in a random way */
            ot_ckpt_entry *e;
            size_t n;
            if (ot_ckpt_list(ck, &e, &n) != OT_OK) {
                ot_clear_error();
                continue;
            }
            uint64_t mask = rnd();
            for (size_t i = 0; i < n; i++) {
                if (!e[i].committed || !(mask >> (i % 64) & 1)) continue;
                char desc[256];
                int kind = (int)below(D_KINDS);
                if (damage(ck, e[i].step, kind, desc, sizeof desc) == 0)
                    printf("      damaged %s\n", desc);
            }
            ot_ckpt_entries_free(e, n);
        }
        check_final(dir, devices, &r);
    }
}

static void test_setup(void) {
    const char *env = getenv("OT_CHAOS_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)getpid();
    rng_state = seed;
    printf("  chaos seed %llu (rerun with OT_CHAOS_SEED=%llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    snprintf(root, sizeof root, "%s/train_chaos_XXXXXX", OT_BINARY_DIR);
    ASSERT_TRUE(mkdtemp(root) != NULL);
    struct stat sb;
    ASSERT_TRUE(stat(OT_BINARY_DIR "/optitpu", &sb) == 0);
    make_reference(2);
    make_reference(4);
}

static void test_cleanup(void) {
    free_refs();
    if (!any_failure)
        rm_rf(root);
    else
        printf("  work directory kept: %s\n", root);
}

/* the harness counts failures per test: remember any for the clean-up */
#define TRACKED(fn)                                                                                \
    static void fn##_tracked(void) {                                                               \
        fn();                                                                                      \
        if (ot_test_failures_) any_failure = 1;                                                    \
    }
TRACKED(test_setup)
TRACKED(test_each_kind)
TRACKED(test_two_damaged_four_devices)
TRACKED(test_random_rounds)

OT_TEST_MAIN(OT_TEST(test_setup_tracked), OT_TEST(test_each_kind_tracked),
             OT_TEST(test_two_damaged_four_devices_tracked), OT_TEST(test_random_rounds_tracked),
             OT_TEST(test_cleanup))
