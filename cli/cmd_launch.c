/* optitpu launch: runs an optitpu command under mpirun and restarts it from the newest verified
 * checkpoint when the run fails (Debian's Open MPI ends the whole job when a process dies), with
 * fewer processes when a host is gone; each restart is logged with its cause. The training job it
 * runs is `optitpu train --mpi` (cmd_train.c): launch holds no training loop of its own. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_HOSTS 64
#define MAX_MCA   16

typedef struct launch_cfg {
    int np, max_restarts;
    char *hosts[MAX_HOSTS];
    int nhosts;
    const char *ckpt_dir;
    const char *mca[MAX_MCA][2];
    int nmca;
    bool oversubscribe;
    double probe_timeout_s;
    char **cmd; /* the optitpu command after -- */
    int ncmd;
} launch_cfg;

static void lmsg(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
static void lmsg(const char *fmt, ...) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    char ts[32];
    strftime(ts, sizeof ts, "%H:%M:%S", &tm);
    fprintf(stderr, "optitpu launch [%s] ", ts);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* argv for mpirun: [mpirun, --oversubscribe, -np, N, --host, H:slots,..., --mca k v...,
 * -x VAR..., exe, cmd...] */
static char **mpirun_argv(const launch_cfg *c, int np, char *const *hosts, int nhosts,
                          const char *exe, char *const *cmd, int ncmd, char *hostbuf,
                          size_t hostcap, char *npbuf) {
    size_t n = 0, cap = (size_t)(16 + 3 * MAX_MCA + ncmd);
    char **a = calloc(cap, sizeof *a);
    if (!a) return NULL;
    a[n++] = "mpirun";
    if (c->oversubscribe) a[n++] = "--oversubscribe";
    snprintf(npbuf, 16, "%d", np);
    a[n++] = "-np";
    a[n++] = npbuf;
    if (nhosts > 0) {
        /* slots spread evenly: np processes over the hosts left */
        size_t off = 0;
        hostbuf[0] = 0;
        for (int i = 0; i < nhosts; i++) {
            int slots = np / nhosts + (i < np % nhosts);
            if (slots == 0) continue;
            off += (size_t)snprintf(hostbuf + off, off < hostcap ? hostcap - off : 0, "%s%s:%d",
                                    off ? "," : "", hosts[i], slots);
        }
        a[n++] = "--host";
        a[n++] = hostbuf;
    }
    for (int i = 0; i < c->nmca; i++) {
        a[n++] = "--mca";
        a[n++] = (char *)c->mca[i][0];
        a[n++] = (char *)c->mca[i][1];
    }
    a[n++] = "-x";
    a[n++] = "OPTITPU_LAUNCH_ATTEMPT";
    a[n++] = "-x";
    a[n++] = "OPTITPU_RESUME";
    if (c->ckpt_dir) {
        a[n++] = "-x";
        a[n++] = "OPTITPU_RESUME_CKPT";
    }
    a[n++] = (char *)exe;
    for (int i = 0; i < ncmd; i++) a[n++] = cmd[i];
    a[n] = NULL;
    return a;
}

/* Runs argv; copies its stderr to ours and keeps the first line that names a failed process
 * (mpirun's "process rank R ... exited on signal S" / "Primary job terminated"). Returns the
 * wait status, or -1 when it could not start. timeout_s > 0 kills it after that long. */
static int run_child(char **argv, char *cause, size_t causecap, double timeout_s, bool quiet) {
    int pfd[2];
    if (pipe(pfd) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(pfd[1], 2);
        if (quiet) {
            int nul = open("/dev/null", O_WRONLY);
            if (nul >= 0) dup2(nul, 1);
        }
        close(pfd[0]);
        close(pfd[1]);
        setpgid(0, 0);
        execvp(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    if (cause && causecap) cause[0] = 0;
    char line[1024];
    size_t ll = 0;
    uint64_t t0 = ot_now_ns();
    bool killed = false;
    for (;;) {
        struct pollfd p = {pfd[0], POLLIN, 0};
        int pr = poll(&p, 1, 100);
        if (pr > 0) {
            char buf[4096];
            ssize_t k = read(pfd[0], buf, sizeof buf);
            if (k <= 0) break;
            if (!quiet) fwrite(buf, 1, (size_t)k, stderr);
            for (ssize_t i = 0; i < k; i++) {
                if (buf[i] != '\n' && ll < sizeof line - 1) {
                    line[ll++] = buf[i];
                    continue;
                }
                line[ll] = 0;
                ll = 0;
                if (cause && causecap && !cause[0] &&
                    (strstr(line, "exited on signal") || strstr(line, "process rank") ||
                     strstr(line, "non-zero status") || strstr(line, "was unable to"))) {
                    /* the first such line, cut to the caller's buffer */
                    size_t n = strlen(line) < causecap - 1 ? strlen(line) : causecap - 1;
                    memcpy(cause, line, n);
                    cause[n] = 0;
                }
            }
        }
        if (timeout_s > 0 && !killed && (double)(ot_now_ns() - t0) / 1e9 > timeout_s) {
            kill(-pid, SIGKILL);
            killed = true;
            if (cause && causecap && !cause[0])
                snprintf(cause, causecap, "no answer within %.0f s", timeout_s);
        }
    }
    close(pfd[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    return ws;
}

static void describe_status(int ws, char *out, size_t cap) {
    if (WIFEXITED(ws))
        snprintf(out, cap, "exit status %d", WEXITSTATUS(ws));
    else if (WIFSIGNALED(ws))
        snprintf(out, cap, "killed by signal %d (%s)", WTERMSIG(ws), strsignal(WTERMSIG(ws)));
    else
        snprintf(out, cap, "wait status %d", ws);
}

/* A host is there when mpirun can start `true` on it with the job's settings. */
static bool host_alive(const launch_cfg *c, char *host) {
    char hb[512], npb[16];
    char *cmd[1] = {NULL};
    launch_cfg one = *c;
    one.ckpt_dir = NULL;
    char **a = mpirun_argv(&one, 1, &host, 1, "true", cmd, 0, hb, sizeof hb, npb);
    if (!a) return false;
    char cause[256];
    int ws = run_child(a, cause, sizeof cause, c->probe_timeout_s, true);
    free(a);
    return ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
}

static int run_launch(int argc, char **argv) {
    const char *cmd = "launch";
    launch_cfg c = {.np = 1, .max_restarts = 3, .probe_timeout_s = 20};
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        if (!strcmp(a, "--")) {
            i++;
            break;
        } else if (!strcmp(a, "--np") && v && cli_parse_i64(v, 1, 4096, &n)) {
            c.np = (int)n, i++;
        } else if (!strcmp(a, "--max-restarts") && v && cli_parse_i64(v, 0, 1000, &n)) {
            c.max_restarts = (int)n, i++;
        } else if (!strcmp(a, "--ckpt-dir") && v) {
            c.ckpt_dir = v, i++;
        } else if (!strcmp(a, "--oversubscribe")) {
            c.oversubscribe = true;
        } else if (!strcmp(a, "--probe-timeout") && v && cli_parse_i64(v, 1, 3600, &n)) {
            c.probe_timeout_s = (double)n, i++;
        } else if (!strcmp(a, "--mca") && v && i + 2 < argc && c.nmca < MAX_MCA) {
            c.mca[c.nmca][0] = argv[i + 1];
            c.mca[c.nmca][1] = argv[i + 2];
            c.nmca++, i += 2;
        } else if (!strcmp(a, "--hosts") && v) {
            static char hostlist[4096];
            snprintf(hostlist, sizeof hostlist, "%s", v);
            for (char *t = strtok(hostlist, ","); t && c.nhosts < MAX_HOSTS; t = strtok(NULL, ","))
                c.hosts[c.nhosts++] = t;
            if (!c.nhosts) return cli_usage_error(cmd, "--hosts needs H1[,H2...]");
            i++;
        } else {
            return cli_usage_error(cmd, "bad or incomplete argument '%s'", a);
        }
    }
    if (i >= argc) return cli_usage_error(cmd, "no command after '--' (e.g. -- train --mpi ...)");
    c.cmd = argv + i;
    c.ncmd = argc - i;
    if (geteuid() == 0) { /* Open MPI refuses root unless told */
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    }
    if (c.ckpt_dir) setenv("OPTITPU_RESUME_CKPT", "", 1);
    const char *exe = cli_self_exe();
    int np = c.np;
    char *alive[MAX_HOSTS];
    int nalive = c.nhosts;
    for (int h = 0; h < c.nhosts; h++) alive[h] = c.hosts[h];
    for (int attempt = 0;; attempt++) {
        char ab[16];
        snprintf(ab, sizeof ab, "%d", attempt);
        setenv("OPTITPU_LAUNCH_ATTEMPT", ab, 1);
        setenv("OPTITPU_RESUME", attempt ? "1" : "0", 1);
        char hb[4096], npb[16], cause[1024];
        char **a = mpirun_argv(&c, np, alive, nalive, exe, c.cmd, c.ncmd, hb, sizeof hb, npb);
        if (!a) return cli_fail(cmd);
        lmsg("attempt %d: %d process%s%s%s", attempt, np, np == 1 ? "" : "es", nalive ? " on " : "",
             nalive ? hb : "");
        uint64_t t0 = ot_now_ns();
        int ws = run_child(a, cause, sizeof cause, 0, false);
        free(a);
        double secs = (double)(ot_now_ns() - t0) / 1e9;
        if (ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0) {
            lmsg("attempt %d finished in %.1f s%s", attempt, secs,
                 attempt ? " (after restarts)" : "");
            return CLI_OK;
        }
        char how[128];
        if (ws < 0)
            snprintf(how, sizeof how, "mpirun could not start: %s", strerror(errno));
        else
            describe_status(ws, how, sizeof how);
        lmsg("attempt %d failed after %.1f s: mpirun %s%s%s", attempt, secs, how,
             cause[0] ? "; cause: " : "", cause);
        if (attempt >= c.max_restarts) {
            lmsg("giving up: %d restart%s used (--max-restarts %d)", attempt,
                 attempt == 1 ? "" : "s", c.max_restarts);
            return CLI_FAIL;
        }
        /* hosts that are gone: continue on the others with fewer processes */
        if (c.nhosts) {
            int k = 0;
            for (int h = 0; h < nalive; h++) {
                if (host_alive(&c, alive[h]))
                    alive[k++] = alive[h];
                else
                    lmsg("host %s does not answer: leaving it out", alive[h]);
            }
            if (k == 0) {
                lmsg("giving up: no host answers");
                return CLI_FAIL;
            }
            if (k < nalive) {
                int nnp = (int)((int64_t)c.np * k / c.nhosts);
                np = nnp < 1 ? 1 : nnp;
                lmsg("continuing with %d process%s on %d host%s", np, np == 1 ? "" : "es", k,
                     k == 1 ? "" : "s");
            }
            nalive = k;
        }
        /* the newest verified checkpoint */
        if (c.ckpt_dir) {
            ot_ckpt *ck = NULL;
            ot_ckpt_restore_report rep;
            memset(&rep, 0, sizeof rep);
            if (ot_ckpt_restore_latest(c.ckpt_dir, NULL, &ck, &rep) == OT_OK) {
                lmsg("restart %d: resuming from %s (step %lld, verified)", attempt + 1,
                     ot_ckpt_dir(ck), (long long)ot_ckpt_step(ck));
                setenv("OPTITPU_RESUME_CKPT", ot_ckpt_dir(ck), 1);
            } else {
                lmsg("restart %d: no verified checkpoint in %s (%s): starting over", attempt + 1,
                     c.ckpt_dir, ot_last_error());
                setenv("OPTITPU_RESUME_CKPT", "", 1);
            }
            ot_ckpt_free(ck);
            ot_ckpt_restore_report_clear(&rep);
        } else {
            lmsg("restart %d: the command resumes from its own newest checkpoint "
                 "(OPTITPU_RESUME=1)",
                 attempt + 1);
        }
    }
}

const cli_command cli_cmd_launch = {
    "launch",
    "run an optitpu command under mpirun; restart it from the newest checkpoint when it fails",
    "usage: optitpu launch --np N [--max-restarts R] [--hosts H1,H2,...] [--ckpt-dir DIR]\n"
    "                      [--oversubscribe] [--mca KEY VALUE]... [--probe-timeout S]\n"
    "                      -- COMMAND [ARGS...]\n"
    "\n"
    "Runs `mpirun -np N optitpu COMMAND ARGS` (as root with Open MPI's allow-run-as-root\n"
    "settings). When the run fails (a process died: Open MPI then ends the whole job), it logs\n"
    "the cause and runs it again, at most R times (default 3). With --hosts, every host is probed\n"
    "first (mpirun starts `true` there); hosts that do not answer are left out and the job\n"
    "continues with N * (hosts left) / (hosts) processes.\n"
    "\n"
    "The contract with COMMAND (environment, passed to every process):\n"
    "  OPTITPU_LAUNCH_ATTEMPT  0 on the first run, 1, 2, ... on restarts\n"
    "  OPTITPU_RESUME          1 on a restart: continue from the newest verified checkpoint\n"
    "  OPTITPU_RESUME_CKPT     with --ckpt-dir: the directory of that checkpoint (verified by\n"
    "                          the launcher), empty when none verifies\n"
    "\n"
    "  --mca KEY VALUE   passed to mpirun (e.g. btl_tcp_if_include veth0)\n"
    "  example: optitpu launch --np 2 --oversubscribe --ckpt-dir ck -- train --mpi --devices 4 \\\n"
    "             --ckpt-dir ck",
    run_launch,
};
