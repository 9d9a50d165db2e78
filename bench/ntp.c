/* NTP server and client on loopback, against chronyd in the same run.
 *   throughput: requests answered per second by one server, driven by one client socket keeping
 *               32 requests in flight (optitpu server vs chronyd; ratio = ours / chronyd)
 *   delay:      minimum round-trip delay our client measures over 8 exchanges (our server vs
 *               chronyd; ratio = chronyd / ours, so > 1 means our server answers faster)
 * Medians of --reps (default 5) repetitions after a warm-up, interleaved server by server.
 * chronyd runs with -x (never touches the clock) on a free port; as non-root it runs inside
 * `unshare -r`. Without chronyd the baseline is reported as skipped.
 *   bench_ntp [--json] [--reps N] [--seconds S] */
#include "optitpu/bench.h"
#include "optitpu/clock.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static const char *find_chronyd(void) {
    static const char *const paths[] = {"/usr/sbin/chronyd", "/sbin/chronyd",
                                        "/usr/local/sbin/chronyd", "/usr/bin/chronyd"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (access(paths[i], X_OK) == 0) return paths[i];
    return NULL;
}

static char g_dir[64];

static pid_t start_chronyd(const char *chronyd, int port) {
    char conf[128], log[128];
    snprintf(conf, sizeof conf, "%s/c.conf", g_dir);
    snprintf(log, sizeof log, "%s/log", g_dir);
    FILE *f = fopen(conf, "w");
    if (!f) return -1;
    fprintf(f,
            "port %d\nbindaddress 127.0.0.1\nallow 127.0.0.1\nlocal stratum 8\ncmdport 0\n"
            "bindcmdaddress /\npidfile %s/pid\ndriftfile %s/drift\n",
            port, g_dir, g_dir);
    fclose(f);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        if (geteuid() == 0)
            execl(chronyd, "chronyd", "-d", "-x", "-u", "root", "-f", conf, (char *)NULL);
        else
            execlp("unshare", "unshare", "-r", chronyd, "-d", "-x", "-u", "root", "-f", conf,
                   (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void stop_chronyd(pid_t pid) {
    kill(pid, SIGTERM);
    for (int i = 0; i < 100 && waitpid(pid, NULL, WNOHANG) != pid; i++) usleep(50000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, WNOHANG);
    const char *files[] = {"c.conf", "log", "pid", "drift"};
    char p[128];
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, files[i]);
        unlink(p);
    }
    rmdir(g_dir);
}

/* Replies per second from 127.0.0.1:port with `window` requests in flight for `seconds`. */
static double throughput(int port, double seconds, int window) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return 0;
    }
    ot_ntp_exchange x;
    ot_ntp_exchange_init(&x);
    uint8_t req[OT_NTP_PACKET_SIZE];
    ot_ntp_exchange_request(&x, (int64_t)ot_wall_ns(), 0x5a, 0, req);
    uint64_t t0 = ot_now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
    long answered = 0, inflight = 0;
    while (ot_now_ns() < end) {
        while (inflight < window && send(fd, req, sizeof req, 0) == (ssize_t)sizeof req) inflight++;
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 10) <= 0) {
            inflight = 0; /* lost ones: refill the window */
            continue;
        }
        uint8_t buf[128];
        ssize_t n;
        while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
            ot_ntp_packet p;
            if (ot_ntp_packet_decode(buf, (size_t)n, &p) == OT_OK && p.mode == 4) answered++;
            if (inflight > 0) inflight--;
        }
    }
    double el = (double)(ot_now_ns() - t0) / 1e9;
    close(fd);
    return (double)answered / el;
}

static double min_delay_us(int port) {
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    ot_ntp_query_options o = ot_ntp_query_options_default();
    o.samples = 8;
    o.interval_ms = 0;
    o.timeout_ms = 500;
    ot_ntp_query_result r;
    if (ot_ntp_query(addr, &o, &r) != OT_OK) return NAN;
    return r.delay * 1e6;
}

static void *serve(void *arg) {
    ot_ntp_server_run(arg);
    return NULL;
}

int main(int argc, char **argv) {
    bool json = false;
    int reps = 5;
    double seconds = 0.3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_ntp [--json] [--reps N] [--seconds S]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 100 || !(seconds > 0 && seconds < 60)) {
        fprintf(stderr, "bench_ntp: --reps 1..100, --seconds in (0, 60)\n");
        return 2;
    }
    ot_ntp_server_options so = ot_ntp_server_options_default();
    so.bind_addr = "127.0.0.1";
    so.port = 0;
    ot_ntp_server *srv;
    if (ot_ntp_server_create(&so, &srv) != OT_OK) {
        fprintf(stderr, "bench_ntp: %s\n", ot_last_error());
        return 1;
    }
    pthread_t th;
    pthread_create(&th, NULL, serve, srv);
    int ours = ot_ntp_server_port(srv);

    const char *chronyd = find_chronyd();
    pid_t cpid = -1;
    int cport = 0;
    const char *why = "chronyd not installed";
    snprintf(g_dir, sizeof g_dir, "/tmp/optitpu-bench-ntp-XXXXXX");
    if (chronyd && mkdtemp(g_dir)) {
        cport = free_port();
        cpid = start_chronyd(chronyd, cport);
        bool up = false;
        uint64_t until = ot_now_ns() + 10000000000ull; /* chronyd binds its port a moment later */
        while (cpid > 0 && !up && ot_now_ns() < until) {
            up = !isnan(min_delay_us(cport));
            if (!up) usleep(50000);
        }
        if (!up) {
            why = "chronyd did not start";
            if (cpid > 0) stop_chronyd(cpid);
            cpid = -1;
        }
    }
    /* warm-up, then interleaved repetitions */
    throughput(ours, seconds / 3, 32);
    if (cpid > 0) throughput(cport, seconds / 3, 32);
    double tp_o[100], tp_c[100], d_o[100], d_c[100];
    for (int r = 0; r < reps; r++) {
        tp_o[r] = throughput(ours, seconds, 32);
        d_o[r] = min_delay_us(ours);
        if (cpid > 0) {
            tp_c[r] = throughput(cport, seconds, 32);
            d_c[r] = min_delay_us(cport);
        }
    }
    ot_bench_print_header(json);
    ot_bench_row row = {.bench = "ntp",
                        .case_name = "server throughput, 32 in flight, loopback",
                        .metric = "req/s",
                        .value = ot_bench_median(tp_o, (size_t)reps)};
    if (cpid > 0) {
        row.baseline = "chronyd 4.x server";
        row.baseline_value = ot_bench_median(tp_c, (size_t)reps);
        row.ratio = row.value / row.baseline_value;
    }
    ot_bench_print(&row, json);
    row = (ot_bench_row){.bench = "ntp",
                         .case_name = "min round-trip delay, 8 exchanges, loopback",
                         .metric = "us",
                         .value = ot_bench_median(d_o, (size_t)reps)};
    if (cpid > 0) {
        row.baseline = "chronyd 4.x server";
        row.baseline_value = ot_bench_median(d_c, (size_t)reps);
        row.ratio = row.baseline_value / row.value;
    }
    ot_bench_print(&row, json);
    if (cpid > 0)
        stop_chronyd(cpid);
    else if (!json)
        printf("baseline skipped: %s\n", why);
    else
        printf("{\"bench\": \"ntp\", \"skipped\": \"%s\"}\n", why);
    ot_ntp_server_stop(srv);
    pthread_join(th, NULL);
    ot_ntp_server_free(srv);
    return 0;
}
