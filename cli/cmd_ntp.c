/* optitpu ntp: query an NTP server, or serve the host's clock. */
#include "cli.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUERY_USAGE                                                                                \
    "usage: optitpu ntp query HOST[:PORT] [--samples N] [--interval S] [--timeout S] [--json]\n"   \
    "\n"                                                                                           \
    "Exchanges N packets (default 4) with an NTP server and prints the offset of its clock from\n" \
    "ours (server - local) and the round-trip delay after the RFC 5905 clock filter; every "       \
    "reply\n"                                                                                      \
    "is validated and the dropped ones are counted by reason. HOST is a name, an IPv4 address "    \
    "or\n"                                                                                         \
    "[IPv6]; PORT defaults to 123.\n"                                                              \
    "  --samples N   exchanges, 1..64 (default 4)\n"                                               \
    "  --interval S  pause between exchanges (default 1)\n"                                        \
    "  --timeout S   wait at most S seconds for each reply (default 1)\n"                          \
    "  --json        one JSON object instead of the table\n"

#define SERVE_USAGE                                                                                \
    "usage: optitpu ntp serve [--bind ADDR] --port P [--stratum S] [--duration S] [--offset S]\n"  \
    "\n"                                                                                           \
    "Answers NTP client requests with this host's wall clock until SIGINT/SIGTERM (or "            \
    "--duration\n"                                                                                 \
    "seconds), then prints what it received, answered and dropped.\n"                              \
    "  --bind ADDR   address to listen on (default: all IPv6 and IPv4 addresses)\n"                \
    "  --port P      UDP port; 0 picks a free one (printed)\n"                                     \
    "  --stratum S   advertised stratum, 1..15 (default 10)\n"                                     \
    "  --duration S  stop after S seconds\n"                                                       \
    "  --offset S    serve the clock shifted by S seconds (simulates a skewed host)\n"

#define SYNC_USAGE                                                                                 \
    "usage: optitpu ntp sync HOST[:PORT]... [--rounds N] [--burst N] [--interval S] [--timeout "   \
    "S]\n"                                                                                         \
    "                        [--json]\n"                                                           \
    "\n"                                                                                           \
    "Synchronizes against several servers as a pod host does: a burst of exchanges with each\n"    \
    "(default 4), then N-1 more rounds of one exchange each; every round runs the RFC 5905\n"      \
    "clock filter, selection (falsetickers out), cluster and combine. Prints each server's "       \
    "class\n"                                                                                      \
    "(sys_peer, survivor, outlier, falseticker, unfit) and the combined offset. Exit 1 when no\n"  \
    "majority of servers agrees.\n"                                                                \
    "  --rounds N    rounds, 1..100 (default 1)\n"                                                 \
    "  --burst N     exchanges per server in the first round, 1..64 (default 4)\n"                 \
    "  --interval S  pause between burst exchanges (default 0.1)\n"                                \
    "  --timeout S   wait at most S seconds for each reply (default 1)\n"                          \
    "  --json        one JSON object\n"

static const char *const usage = QUERY_USAGE "\n" SERVE_USAGE "\n" SYNC_USAGE;

static bool is_help(const char *a) {
    return !strcmp(a, "--help") || !strcmp(a, "-h");
}

static int parse_seconds_ms(const char *cmd, const char *opt, const char *v, int *ms) {
    double d;
    if (!cli_parse_double(v, &d) || d < 0 || d > 86400)
        return cli_usage_error(cmd, "%s wants seconds (0..86400), got '%s'", opt, v ? v : "");
    *ms = (int)lround(d * 1000);
    return CLI_OK;
}

static int ntp_query(int argc, char **argv) {
    const char *cmd = "ntp query";
    const char *target = NULL;
    bool json = false;
    ot_ntp_query_options o = ot_ntp_query_options_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (is_help(a)) {
            printf("%s", QUERY_USAGE);
            return CLI_OK;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--samples") && i + 1 < argc) {
            int64_t n;
            if (!cli_parse_i64(argv[++i], 1, OT_NTP_MAX_SAMPLES, &n))
                return cli_usage_error(cmd, "--samples wants 1..%d", OT_NTP_MAX_SAMPLES);
            o.samples = (int)n;
        } else if (!strcmp(a, "--interval") && i + 1 < argc) {
            if (parse_seconds_ms(cmd, a, argv[++i], &o.interval_ms)) return CLI_USAGE;
        } else if (!strcmp(a, "--timeout") && i + 1 < argc) {
            if (parse_seconds_ms(cmd, a, argv[++i], &o.timeout_ms)) return CLI_USAGE;
            if (o.timeout_ms < 1) return cli_usage_error(cmd, "--timeout must be positive");
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(cmd, "unknown or incomplete option '%s'", a);
        } else if (!target) {
            target = a;
        } else {
            return cli_usage_error(cmd, "unexpected argument '%s'", a);
        }
    }
    if (!target) return cli_usage_error(cmd, "missing HOST[:PORT]");
    ot_ntp_query_result r;
    ot_status s = ot_ntp_query(target, &o, &r);
    char refid[16] = "";
    ot_ntp_ref_id_str(&r.last_reply, refid);
    if (json) {
        json_t *j = json_object();
        json_object_set_new(j, "server", json_string(r.address[0] ? r.address : target));
        json_object_set_new(j, "ok", json_boolean(s == OT_OK));
        if (s != OT_OK) json_object_set_new(j, "error", json_string(ot_last_error()));
        if (s == OT_OK) {
            json_object_set_new(j, "offset_s", json_real(r.offset));
            json_object_set_new(j, "delay_s", json_real(r.delay));
            json_object_set_new(j, "jitter_s", json_real(r.jitter));
            json_object_set_new(j, "dispersion_s", json_real(r.dispersion));
            json_object_set_new(j, "root_distance_s", json_real(r.root_distance));
            json_object_set_new(j, "stratum", json_integer(r.last_reply.stratum));
            json_object_set_new(j, "leap", json_integer(r.last_reply.leap));
            json_object_set_new(j, "precision", json_integer(r.last_reply.precision));
            json_object_set_new(j, "ref_id", json_string(refid));
            json_object_set_new(j, "root_delay_s",
                                json_real(ot_ntp_short_to_s(r.last_reply.root_delay)));
            json_object_set_new(j, "root_dispersion_s",
                                json_real(ot_ntp_short_to_s(r.last_reply.root_dispersion)));
        }
        json_t *samples = json_array();
        for (int i = 0; i < r.n_samples; i++) {
            json_t *e = json_object();
            json_object_set_new(e, "offset_s", json_real(r.sample[i].offset));
            json_object_set_new(e, "delay_s", json_real(r.sample[i].delay));
            json_array_append_new(samples, e);
        }
        json_object_set_new(j, "samples", samples);
        json_object_set_new(j, "timeouts", json_integer(r.n_timeouts));
        json_t *counts = json_object();
        for (int v = 0; v < OT_NTP_VERDICT_COUNT; v++)
            json_object_set_new(counts, ot_ntp_verdict_name((ot_ntp_verdict)v),
                                json_integer((json_int_t)r.count[v]));
        json_object_set_new(j, "packets", counts);
        char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
        if (text) printf("%s\n", text);
        free(text);
        json_decref(j);
        if (s != OT_OK) fprintf(stderr, "optitpu %s: %s\n", cmd, ot_last_error());
        return s == OT_OK ? CLI_OK : CLI_FAIL;
    }
    if (s != OT_OK) return cli_fail(cmd);
    printf("server %s  stratum %d  refid %s  leap %d  precision 2^%d s\n", r.address,
           r.last_reply.stratum, refid, r.last_reply.leap, r.last_reply.precision);
    printf("%4s %14s %14s\n", "#", "offset (us)", "delay (us)");
    for (int i = 0; i < r.n_samples; i++)
        printf("%4d %+14.3f %14.3f\n", i + 1, r.sample[i].offset * 1e6, r.sample[i].delay * 1e6);
    printf("offset %+.3f us  delay %.3f us  jitter %.3f us  dispersion %.3f us  root distance "
           "%.3f ms\n",
           r.offset * 1e6, r.delay * 1e6, r.jitter * 1e6, r.dispersion * 1e6,
           r.root_distance * 1e3);
    printf("packets:");
    for (int v = 0; v < OT_NTP_VERDICT_COUNT; v++)
        if (r.count[v])
            printf(" %s %llu", ot_ntp_verdict_name((ot_ntp_verdict)v),
                   (unsigned long long)r.count[v]);
    printf("  timeouts %d\n", r.n_timeouts);
    return CLI_OK;
}

static ot_ntp_server *volatile g_server;

static void on_signal(int sig) {
    (void)sig;
    if (g_server) ot_ntp_server_stop(g_server); /* async-signal-safe */
}

static int ntp_serve(int argc, char **argv) {
    const char *cmd = "ntp serve";
    ot_ntp_server_options o = ot_ntp_server_options_default();
    bool have_port = false;
    int duration_ms = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int64_t v;
        if (is_help(a)) {
            printf("%s", SERVE_USAGE);
            return CLI_OK;
        } else if (!strcmp(a, "--bind") && i + 1 < argc) {
            o.bind_addr = argv[++i];
        } else if (!strcmp(a, "--port") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 0, 65535, &v))
                return cli_usage_error(cmd, "--port wants 0..65535");
            o.port = (int)v;
            have_port = true;
        } else if (!strcmp(a, "--stratum") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 1, 15, &v))
                return cli_usage_error(cmd, "--stratum wants 1..15");
            o.stratum = (int)v;
        } else if (!strcmp(a, "--offset") && i + 1 < argc) {
            if (!cli_parse_double(argv[++i], &o.offset) || fabs(o.offset) > 86400)
                return cli_usage_error(cmd, "--offset wants seconds (-86400..86400)");
        } else if (!strcmp(a, "--duration") && i + 1 < argc) {
            if (parse_seconds_ms(cmd, a, argv[++i], &duration_ms)) return CLI_USAGE;
        } else {
            return cli_usage_error(cmd, "unknown or incomplete option '%s'", a);
        }
    }
    if (!have_port) return cli_usage_error(cmd, "--port is required");
    ot_ntp_server *srv;
    if (ot_ntp_server_create(&o, &srv) != OT_OK) return cli_fail(cmd);
    g_server = srv;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    printf("serving NTP on %s port %d (stratum %d)\n", o.bind_addr ? o.bind_addr : "[::]",
           ot_ntp_server_port(srv), o.stratum);
    fflush(stdout);
    ot_status s = duration_ms >= 0 ? ot_ntp_server_poll(srv, duration_ms) : ot_ntp_server_run(srv);
    ot_ntp_server_stats st = ot_ntp_server_get_stats(srv);
    g_server = NULL;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    fprintf(stderr,
            "ntp serve: received %llu, answered %llu, malformed %llu, bad mode %llu, "
            "crypto-NAK %llu\n",
            (unsigned long long)st.received, (unsigned long long)st.answered,
            (unsigned long long)st.malformed, (unsigned long long)st.bad_mode,
            (unsigned long long)st.crypto_nak);
    ot_ntp_server_free(srv);
    return s == OT_OK ? CLI_OK : cli_fail(cmd);
}

static int ntp_sync(int argc, char **argv) {
    const char *cmd = "ntp sync";
    const char *servers[OT_NTP_MAX_PEERS];
    int n = 0, rounds = 1;
    bool json = false;
    ot_clock_sync_options o = ot_clock_sync_options_default();
    o.burst_interval_ms = 100;
    o.publish = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int64_t v;
        if (is_help(a)) {
            printf("%s", SYNC_USAGE);
            return CLI_OK;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--rounds") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 1, 100, &v))
                return cli_usage_error(cmd, "--rounds wants 1..100");
            rounds = (int)v;
        } else if (!strcmp(a, "--burst") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 1, OT_NTP_MAX_SAMPLES, &v))
                return cli_usage_error(cmd, "--burst wants 1..%d", OT_NTP_MAX_SAMPLES);
            o.burst = (int)v;
        } else if (!strcmp(a, "--interval") && i + 1 < argc) {
            if (parse_seconds_ms(cmd, a, argv[++i], &o.burst_interval_ms)) return CLI_USAGE;
        } else if (!strcmp(a, "--timeout") && i + 1 < argc) {
            if (parse_seconds_ms(cmd, a, argv[++i], &o.timeout_ms)) return CLI_USAGE;
            if (o.timeout_ms < 1) return cli_usage_error(cmd, "--timeout must be positive");
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(cmd, "unknown or incomplete option '%s'", a);
        } else if (n < OT_NTP_MAX_PEERS) {
            servers[n++] = a;
        } else {
            return cli_usage_error(cmd, "at most %d servers", OT_NTP_MAX_PEERS);
        }
    }
    if (n == 0) return cli_usage_error(cmd, "missing HOST[:PORT]");
    ot_clock_sync *s;
    if (ot_clock_sync_create(servers, n, &o, &s) != OT_OK) return cli_fail(cmd);
    ot_status st = OT_OK;
    char err[512] = "";
    for (int r = 0; r < rounds; r++) {
        st = ot_clock_sync_update(s);
        if (st != OT_OK) snprintf(err, sizeof err, "%s", ot_last_error());
    }
    ot_clock_estimate e = ot_clock_sync_estimate(s);
    json_t *j = json ? json_object() : NULL;
    json_t *arr = json ? json_array() : NULL;
    if (!json)
        printf("%-28s %-12s %14s %12s %12s %7s\n", "server", "class", "offset (us)", "delay (us)",
               "dist (ms)", "stratum");
    for (int i = 0; i < n; i++) {
        ot_clock_server_info info;
        ot_clock_sync_server_info(s, i, &info);
        const char *cls = info.valid ? ot_ntp_peer_class_name(info.cls) : "no_reply";
        if (json) {
            json_t *e1 = json_object();
            json_object_set_new(e1, "server", json_string(info.name));
            json_object_set_new(e1, "class", json_string(cls));
            if (info.valid) {
                json_object_set_new(e1, "offset_s", json_real(info.offset));
                json_object_set_new(e1, "delay_s", json_real(info.delay));
                json_object_set_new(e1, "jitter_s", json_real(info.jitter));
                json_object_set_new(e1, "root_distance_s", json_real(info.root_distance));
                json_object_set_new(e1, "stratum", json_integer(info.stratum));
            }
            json_array_append_new(arr, e1);
        } else if (info.valid) {
            printf("%-28s %-12s %+14.3f %12.3f %12.3f %7d\n", info.name, cls, info.offset * 1e6,
                   info.delay * 1e6, info.root_distance * 1e3, info.stratum);
        } else {
            printf("%-28s %-12s\n", info.name, cls);
        }
    }
    if (json) {
        json_object_set_new(j, "ok", json_boolean(st == OT_OK));
        if (st != OT_OK) json_object_set_new(j, "error", json_string(err));
        if (e.synchronized) {
            json_object_set_new(j, "offset_s", json_real((double)e.offset_ns / 1e9));
            json_object_set_new(j, "jitter_s", json_real((double)e.jitter_ns / 1e9));
            json_object_set_new(j, "root_distance_s", json_real((double)e.root_distance_ns / 1e9));
            json_object_set_new(j, "survivors", json_integer(e.n_survivors));
        }
        json_object_set_new(j, "servers", arr);
        char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
        if (text) printf("%s\n", text);
        free(text);
        json_decref(j);
    } else if (st == OT_OK) {
        printf("system offset %+.3f us  jitter %.3f us  root distance %.3f ms  survivors %d\n",
               (double)e.offset_ns / 1e3, (double)e.jitter_ns / 1e3,
               (double)e.root_distance_ns / 1e6, e.n_survivors);
    }
    ot_clock_sync_free(s);
    if (st != OT_OK) {
        fprintf(stderr, "optitpu %s: %s\n", cmd, err);
        return CLI_FAIL;
    }
    return CLI_OK;
}

static int cmd_ntp(int argc, char **argv) {
    if (argc < 2) return cli_usage_error("ntp", "missing subcommand (query, serve or sync)");
    if (!strcmp(argv[1], "query")) return ntp_query(argc - 1, argv + 1);
    if (!strcmp(argv[1], "serve")) return ntp_serve(argc - 1, argv + 1);
    if (!strcmp(argv[1], "sync")) return ntp_sync(argc - 1, argv + 1);
    return cli_usage_error("ntp", "unknown subcommand '%s' (query, serve or sync)", argv[1]);
}

const cli_command cli_cmd_ntp = {
    .name = "ntp",
    .summary = "NTP (RFC 5905): query a server, sync against several, or serve this host's clock",
    .usage = usage,
    .run = cmd_ntp,
};
