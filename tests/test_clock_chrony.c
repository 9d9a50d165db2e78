/* Clock against a real peer: chrony (Debian package `chrony`).
 *  1. chronyd runs in the foreground as an NTP server on an unprivileged loopback port with a
 *     local reference (`local stratum 8`), never touching the system clock (-x); our client
 *     measures it over IPv4 and IPv6: |offset| < 100 us, small positive delay, nothing dropped.
 *  2. chronyd as a client (-Q: measure and print, never set the clock) queries our server and
 *     accepts its replies: it prints the offset it measured ("System clock wrong by ...").
 * The IPv6 cases are tests of their own (names ending in _ipv6; CTest runs them as
 * test_clock_chrony_ipv6). Reported as skipped (exit 77, CTest's SKIP_RETURN_CODE), saying why,
 * when chronyd is not installed (scripts/deps.sh installs chrony), when this machine has no IPv6
 * loopback (the _ipv6 tests), or, for 1, when not root and no user namespace can be made
 * (chronyd serves only as uid 0). */
#include "ot_test.h"

#include "optitpu/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_chronyd[256];
static char g_dir[64];

/* chronyd: $OT_CHRONYD when set (tests/test_skip_codes.sh sets a missing one), else the first in
 * PATH, /usr/sbin, /sbin, /usr/local/sbin. */
static bool find_chronyd(void) {
    const char *env = getenv("OT_CHRONYD");
    if (env) {
        snprintf(g_chronyd, sizeof g_chronyd, "%s", env);
        return access(g_chronyd, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s:/usr/sbin:/sbin:/usr/local/sbin", path ? path : "");
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(g_chronyd, sizeof g_chronyd, "%s/chronyd", d);
        if (access(g_chronyd, X_OK) == 0) return true;
    }
    return false;
}

static bool have_ipv6_loopback(void) {
    int fd = socket(AF_INET6, SOCK_DGRAM, 0);
    if (fd < 0) return false;
    struct sockaddr_in6 a = {0};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* A currently free UDP port on both loopbacks (chronyd binds it a moment later). */
static int free_port(void) {
    for (int tries = 0; tries < 20; tries++) {
        int fd = socket(AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        bind(fd, (struct sockaddr *)&a, sizeof a);
        socklen_t l = sizeof a;
        getsockname(fd, (struct sockaddr *)&a, &l);
        close(fd);
        int port = ntohs(a.sin_port);
        int fd6 = socket(AF_INET6, SOCK_DGRAM, 0);
        if (fd6 < 0) return port;
        struct sockaddr_in6 b = {0};
        b.sin6_family = AF_INET6;
        b.sin6_addr = in6addr_loopback;
        b.sin6_port = htons((uint16_t)port);
        int rc = bind(fd6, (struct sockaddr *)&b, sizeof b);
        int e = errno;
        close(fd6);
        if (rc == 0 || e == EADDRNOTAVAIL) return port;
    }
    return 0;
}

static void print_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) fprintf(stderr, "    | %s", line);
    fclose(f);
}

static bool log_contains(const char *path, const char *what) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, what) != NULL;
    fclose(f);
    return found;
}

static void stop_child(pid_t pid) {
    kill(pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid) return;
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* chronyd serving on 127.0.0.1 (v6 false) or on ::1 (v6 true), queried there by our client */
static void query_chronyd_server(bool v6) {
    if (v6 && !have_ipv6_loopback()) OT_SKIP("no IPv6 loopback (::1) on this machine");
    int port = free_port();
    ASSERT_TRUE(port > 0);
    char conf[128], log[128];
    snprintf(conf, sizeof conf, "%s/server.conf", g_dir);
    snprintf(log, sizeof log, "%s/server.log", g_dir);
    FILE *f = fopen(conf, "w");
    ASSERT_TRUE(f != NULL);
    fprintf(f,
            "port %d\nbindaddress 127.0.0.1\n%sallow 127.0.0.1\n%slocal stratum 8\ncmdport 0\n"
            "bindcmdaddress /\npidfile %s/chronyd.pid\ndriftfile %s/chronyd.drift\n",
            port, v6 ? "bindaddress ::1\n" : "", v6 ? "allow ::1\n" : "", g_dir, g_dir);
    fclose(f);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        /* -d foreground, -x never touch the clock, -u root: keep the temp dir writable. chronyd
         * refuses to serve unless uid 0, so an unprivileged run gets a user namespace where it
         * is root (`unshare -r`; the network namespace stays shared, so loopback works). */
        if (geteuid() == 0)
            execl(g_chronyd, "chronyd", "-d", "-x", "-u", "root", "-f", conf, (char *)NULL);
        else
            execlp("unshare", "unshare", "-r", g_chronyd, "-d", "-x", "-u", "root", "-f", conf,
                   (char *)NULL);
        _exit(127);
    }
    char addr[64];
    snprintf(addr, sizeof addr, v6 ? "[::1]:%d" : "127.0.0.1:%d", port);
    ot_ntp_query_options q = ot_ntp_query_options_default();
    q.samples = 1;
    q.timeout_ms = 200;
    ot_ntp_query_result r;
    bool up = false;
    /* up to 10 s for chronyd to start answering; until it binds, the port is unreachable and
     * each attempt returns at once, so pace them */
    uint64_t until = ot_now_ns() + 10000000000ull;
    while (!up && ot_now_ns() < until) {
        if (waitpid(pid, NULL, WNOHANG) == pid) break;
        up = ot_ntp_query(addr, &q, &r) == OT_OK;
        if (!up) usleep(50000);
    }
    if (!up && geteuid() != 0 && !log_contains(log, "chronyd version")) {
        /* unprivileged and no user namespace to be root in: chronyd cannot serve at all */
        print_file(log);
        stop_child(pid);
        OT_SKIP("chronyd needs uid 0 to serve NTP and `unshare -r` failed here; run as root");
    }
    if (!up) {
        fprintf(stderr, "  chronyd did not answer on %s (%s); its log:\n", addr, ot_last_error());
        print_file(log);
        stop_child(pid);
        ASSERT_TRUE(up);
    }
    q.samples = 8;
    q.interval_ms = 20;
    q.timeout_ms = 1000;
    ot_status s = ot_ntp_query(addr, &q, &r);
    EXPECT_OK(s);
    if (s == OT_OK) {
        printf("  chronyd %s: offset %+.3f us, delay %.3f us, jitter %.3f us, stratum %d, %d "
               "samples\n",
               r.address, r.offset * 1e6, r.delay * 1e6, r.jitter * 1e6, r.last_reply.stratum,
               r.n_samples);
        EXPECT_INT_EQ(r.n_samples, 8);
        EXPECT_TRUE(fabs(r.offset) < 100e-6);
        EXPECT_TRUE(r.delay > 0 && r.delay < 0.005);
        EXPECT_INT_EQ(r.last_reply.stratum, 8);
        EXPECT_INT_EQ(r.last_reply.leap, 0);
        EXPECT_INT_EQ(r.last_reply.mode, OT_NTP_MODE_SERVER);
        EXPECT_U64_EQ(r.count[OT_NTP_ACCEPTED], 8);
        uint64_t dropped = 0;
        for (int v = 1; v < OT_NTP_VERDICT_COUNT; v++) dropped += r.count[v];
        EXPECT_U64_EQ(dropped, 0);
    }
    stop_child(pid);
    /* once stopped, queries fail within their timeout */
    q.samples = 1;
    q.timeout_ms = 200;
    EXPECT_STATUS(ot_ntp_query(addr, &q, &r), OT_ERR_TIMEOUT);
}

static void test_query_chronyd_server(void) {
    query_chronyd_server(false);
}
static void test_query_chronyd_server_ipv6(void) {
    query_chronyd_server(true);
}

static void *serve_thread(void *arg) {
    ot_ntp_server_run(arg);
    return NULL;
}

/* Runs chronyd as a one-shot client against host:port; returns the offset it printed. */
static bool chronyd_measure(const char *host, int port, int samples, double *offset) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "'%s' -Q %s -f /dev/null -t 20 'server %s port %d iburst minsamples %d maxsamples %d'"
             " 'pidfile %s/client.pid' 2>&1",
             g_chronyd, geteuid() == 0 ? "-u root" : "", host, port, samples, samples, g_dir);
    FILE *p = popen(cmd, "r");
    if (!p) return false;
    char line[512], out[4096] = "";
    bool got = false;
    while (fgets(line, sizeof line, p)) {
        const char *w = strstr(line, "System clock wrong by ");
        if (w && sscanf(w, "System clock wrong by %lf seconds", offset) == 1) got = true;
        strncat(out, line, sizeof out - strlen(out) - 1);
    }
    pclose(p);
    if (!got) fprintf(stderr, "  chronyd printed no measurement:\n%s", out);
    return got;
}

/* chronyd as a client of our server on host (127.0.0.1 or ::1) */
static void chronyd_client_accepts_our_server(const char *host) {
    ot_ntp_server_options o = ot_ntp_server_options_default();
    o.bind_addr = host;
    o.port = 0;
    ot_ntp_server *srv;
    ASSERT_OK(ot_ntp_server_create(&o, &srv));
    pthread_t th;
    pthread_create(&th, NULL, serve_thread, srv);
    double off = 1e9;
    bool v6 = strchr(host, ':') != NULL;
    int samples = v6 ? 1 : 4; /* chronyd decides after 3 or so replies with iburst */
    bool ok = chronyd_measure(host, ot_ntp_server_port(srv), samples, &off);
    ot_ntp_server_stop(srv);
    pthread_join(th, NULL);
    ot_ntp_server_stats st = ot_ntp_server_get_stats(srv);
    ot_ntp_server_free(srv);
    EXPECT_TRUE(ok);
    printf("  chronyd client via %s: measured offset %+.6f s, %llu request(s) answered\n", host,
           off, (unsigned long long)st.answered);
    /* same host clock at both ends: chrony should see almost nothing */
    EXPECT_TRUE(fabs(off) < 0.001);
    EXPECT_TRUE(st.answered >= 1);
    EXPECT_U64_EQ(st.malformed + st.bad_mode, 0);
}

static void test_chronyd_client_accepts_our_server(void) {
    chronyd_client_accepts_our_server("127.0.0.1");
}

static void test_chronyd_client_accepts_our_server_ipv6(void) {
    if (!have_ipv6_loopback()) OT_SKIP("no IPv6 loopback (::1) on this machine");
    chronyd_client_accepts_our_server("::1");
}

static void remove_dir(void) {
    const char *files[] = {"server.conf", "server.log", "chronyd.pid", "chronyd.drift",
                           "client.pid"};
    char p[128];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, files[i]);
        unlink(p);
    }
    rmdir(g_dir);
}

int main(int argc, char **argv) {
    if (!find_chronyd()) {
        printf("SKIP: chronyd not found (%s; Debian: apt-get install chrony; scripts/deps.sh "
               "installs it)\n",
               getenv("OT_CHRONYD") ? "OT_CHRONYD is not executable" : "PATH, /usr/sbin, /sbin");
        return OT_TEST_SKIP_CODE;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/optitpu-chrony-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    chmod(g_dir, 0755);
    static const ot_test_case tests[] = {OT_TEST(test_query_chronyd_server),
                                         OT_TEST(test_query_chronyd_server_ipv6),
                                         OT_TEST(test_chronyd_client_accepts_our_server),
                                         OT_TEST(test_chronyd_client_accepts_our_server_ipv6)};
    int rc = ot_test_main(argc, argv, tests, sizeof tests / sizeof tests[0]);
    remove_dir();
    return rc;
}
