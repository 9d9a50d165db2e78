/* UDP transport for NTP: address parsing, the client query loop and the server. Every wait is a
 * poll() with a deadline; the server's run loop wakes on a self-pipe written by
 * ot_ntp_server_stop. Timestamps T2 and T4 come from the kernel (SO_TIMESTAMPNS) when it gives
 * them, else from clock_gettime right after the receive. */
#include "optitpu/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---- */

static int64_t wall_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static double mono_s(void) {
    return (double)ot_now_ns() / 1e9;
}

int ot_ntp_local_precision(void) {
    static atomic_int cached;
    int p = atomic_load(&cached);
    if (p) return p;
    int64_t best = INT64_MAX;
    int64_t prev = wall_ns();
    for (int i = 0; i < 2000; i++) {
        int64_t t = wall_ns();
        if (t > prev && t - prev < best) best = t - prev;
        prev = t;
    }
    if (best == INT64_MAX) {
        struct timespec res;
        clock_getres(CLOCK_REALTIME, &res);
        best = (int64_t)res.tv_sec * 1000000000ll + res.tv_nsec;
        if (best <= 0) best = 1;
    }
    p = (int)ceil(log2((double)best / 1e9));
    if (p > -1) p = -1;
    atomic_store(&cached, p);
    return p;
}

ot_status ot_ntp_split_host_port(const char *s, char *host, size_t host_cap, int *port) {
    if (!s || !*s) return ot_error(OT_ERR_INVALID_ARGUMENT, "ntp: empty address");
    const char *h = s, *p = NULL;
    size_t hlen;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close) return ot_error(OT_ERR_INVALID_ARGUMENT, "ntp: '%s': missing ']'", s);
        h = s + 1;
        hlen = (size_t)(close - h);
        if (close[1] == ':')
            p = close + 2;
        else if (close[1])
            return ot_error(OT_ERR_INVALID_ARGUMENT, "ntp: '%s': junk after ']'", s);
    } else {
        const char *c1 = strchr(s, ':');
        if (c1 && !strchr(c1 + 1, ':')) {
            hlen = (size_t)(c1 - s);
            p = c1 + 1;
        } else {
            hlen = strlen(s); /* no port, or a bare IPv6 literal */
        }
    }
    if (hlen == 0) return ot_error(OT_ERR_INVALID_ARGUMENT, "ntp: '%s': empty host", s);
    if (hlen >= host_cap) return ot_error(OT_ERR_INVALID_ARGUMENT, "ntp: '%s': host too long", s);
    memcpy(host, h, hlen);
    host[hlen] = 0;
    *port = 123;
    if (p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (!*p || *end || errno || v < 1 || v > 65535 || *p == '+' || *p == '-')
            return ot_error(OT_ERR_INVALID_ARGUMENT, "ntp: '%s': bad port (want 1..65535)", s);
        *port = (int)v;
    }
    return OT_OK;
}

static ot_status resolve(const char *host, int port, bool passive, struct sockaddr_storage *ss,
                         socklen_t *sslen) {
    char ps[8];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE | AI_NUMERICHOST : 0);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0 || !res)
        return ot_error(OT_ERR_NOT_FOUND, "ntp: cannot resolve '%s': %s", host, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *sslen = res->ai_addrlen;
    freeaddrinfo(res);
    return OT_OK;
}

static void addr_str(const struct sockaddr *sa, char *out, size_t cap) {
    char h[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, h, sizeof h);
        port = ntohs(a->sin_port);
        snprintf(out, cap, "%s:%d", h, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof h);
        port = ntohs(a->sin6_port);
        snprintf(out, cap, "[%s]:%d", h, port);
    } else {
        snprintf(out, cap, "?");
    }
}

/* Receives one datagram; *t_ns gets the kernel's arrival time when available. Returns the
 * length, or -1 with errno. */
static ssize_t recv_stamped(int fd, uint8_t *buf, size_t cap, struct sockaddr_storage *from,
                            socklen_t *fromlen, int64_t *t_ns) {
    struct iovec iov = {buf, cap};
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec)) + 64];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg = {0};
    msg.msg_name = from;
    msg.msg_namelen = from ? sizeof *from : 0;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_TRUNC);
    int64_t now = wall_ns();
    if (n < 0) return n;
    *t_ns = now;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof ts);
            *t_ns = (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
        }
    }
    if (fromlen) *fromlen = msg.msg_namelen;
    return n;
}

static int ms_until(double deadline) {
    double left = deadline - mono_s();
    if (left <= 0) return 0;
    return (int)ceil(left * 1000);
}

/* ---- client ---- */

ot_ntp_query_options ot_ntp_query_options_default(void) {
    return (ot_ntp_query_options){.samples = 4, .interval_ms = 1000, .timeout_ms = 1000};
}

/* Judges one received datagram for the query loop. Returns the verdict (-1 when nothing was
 * received). */
static int query_receive(int fd, ot_ntp_exchange *x, int prec, ot_ntp_filter *f,
                         ot_ntp_query_result *out, int *refused) {
    uint8_t buf[OT_NTP_MAX_PACKET + 4];
    int64_t t4;
    ssize_t n = recv_stamped(fd, buf, sizeof buf, NULL, NULL, &t4);
    if (n < 0) {
        if (errno == ECONNREFUSED) (*refused)++;
        return -1;
    }
    ot_ntp_packet pkt;
    ot_ntp_sample smp;
    ot_ntp_verdict v;
    size_t len = (size_t)n > sizeof buf ? sizeof buf + 1 : (size_t)n; /* truncated: too long */
    ot_status s = ot_ntp_exchange_receive(x, buf, len, t4, prec, &pkt, &smp, &v);
    memcpy(out->count, x->count, sizeof out->count);
    if (s == OT_OK) {
        out->sample[out->n_samples++] = smp;
        out->last_reply = pkt;
        ot_ntp_filter_add(f, smp.offset, smp.delay, smp.dispersion, mono_s(), prec);
    } else {
        ot_log(OT_LOG_DEBUG, "%s", ot_last_error());
        if (v == OT_NTP_KISS || v == OT_NTP_UNSYNCHRONIZED) out->last_reply = pkt;
    }
    return (int)v;
}

ot_status ot_ntp_query(const char *host_port, const ot_ntp_query_options *opt,
                       ot_ntp_query_result *out) {
    memset(out, 0, sizeof *out);
    ot_ntp_query_options o = opt ? *opt : ot_ntp_query_options_default();
    if (o.samples < 1 || o.samples > OT_NTP_MAX_SAMPLES)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ntp query: samples %d (want 1..%d)", o.samples,
                        OT_NTP_MAX_SAMPLES);
    if (o.timeout_ms < 1 || o.interval_ms < 0)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ntp query: timeout must be > 0, interval >= 0");
    char host[256];
    int port;
    OT_CHECK(ot_ntp_split_host_port(host_port, host, sizeof host, &port));
    struct sockaddr_storage ss;
    socklen_t sslen;
    OT_CHECK(resolve(host, port, false, &ss, &sslen));
    addr_str((struct sockaddr *)&ss, out->address, sizeof out->address);
    int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return ot_error(OT_ERR_IO, "ntp: socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&ss, sslen) != 0) {
        int e = errno;
        close(fd);
        return ot_error(OT_ERR_IO, "ntp: connect %s: %s", out->address, strerror(e));
    }
    int prec = ot_ntp_local_precision();
    ot_ntp_exchange x;
    ot_ntp_exchange_init(&x);
    ot_ntp_filter f;
    ot_ntp_filter_init(&f);
    int refused = 0, unsync = 0, bad_header = 0;
    double interval = o.interval_ms / 1000.0;
    ot_status rc = OT_OK;
    char kiss[5] = "";
    for (int k = 0; k < o.samples; k++) {
        if (k > 0) {
            /* the pause between exchanges still listens: late copies are judged and counted */
            double until = mono_s() + interval;
            int ms;
            while ((ms = ms_until(until)) > 0) {
                struct pollfd pf = {fd, POLLIN, 0};
                if (poll(&pf, 1, ms) > 0) query_receive(fd, &x, prec, &f, out, &refused);
            }
        }
        uint8_t req[OT_NTP_PACKET_SIZE];
        uint8_t rnd = 0;
        if (getrandom(&rnd, 1, 0) != 1) rnd = (uint8_t)ot_now_ns();
        ot_ntp_exchange_request(&x, wall_ns(), rnd, 0, req);
        if (send(fd, req, sizeof req, 0) != (ssize_t)sizeof req) {
            if (errno == ECONNREFUSED) {
                refused++;
                out->n_timeouts++;
                continue;
            }
            rc = ot_error(OT_ERR_IO, "ntp: send to %s: %s", out->address, strerror(errno));
            break;
        }
        double deadline = mono_s() + o.timeout_ms / 1000.0;
        bool done = false;
        while (!done) {
            int ms = ms_until(deadline);
            if (ms <= 0) break;
            struct pollfd pf = {fd, POLLIN, 0};
            int pr = poll(&pf, 1, ms);
            if (pr < 0 && errno != EINTR) {
                rc = ot_error(OT_ERR_IO, "ntp: poll: %s", strerror(errno));
                break;
            }
            if (pr <= 0) continue;
            int was_refused = refused;
            int v = query_receive(fd, &x, prec, &f, out, &refused);
            if (refused > was_refused) break; /* ICMP port unreachable: nobody will answer */
            if (v == OT_NTP_ACCEPTED) done = true;
            if (v == OT_NTP_UNSYNCHRONIZED) {
                unsync++;
                done = true;
            }
            if (v == OT_NTP_BAD_HEADER) { /* the server's own answer, unusable: no retry */
                bad_header++;
                done = true;
            }
            if (v == OT_NTP_KISS) {
                ot_ntp_kiss_code(&out->last_reply, kiss);
                done = true;
                if (!strcmp(kiss, "RATE"))
                    interval = interval * 2 + 1;
                else if (!strcmp(kiss, "DENY") || !strcmp(kiss, "RSTR")) {
                    rc = ot_error(OT_ERR_PEER_FAILED, "ntp: %s refused service (kiss-o'-death %s)",
                                  out->address, kiss);
                    break;
                }
            }
        }
        if (rc != OT_OK) break;
        if (!done) out->n_timeouts++;
    }
    close(fd);
    memcpy(out->count, x.count, sizeof out->count);
    if (rc != OT_OK) return rc;
    if (out->n_samples == 0) {
        if (unsync)
            return ot_error(OT_ERR_PEER_FAILED, "ntp: %s is unsynchronized (%d replies)",
                            out->address, unsync);
        if (bad_header)
            return ot_error(OT_ERR_PEER_FAILED,
                            "ntp: %s sent only replies with invalid header values (%d: root "
                            "distance at least 16 s, or a reference time after the transmit time)",
                            out->address, bad_header);
        if (kiss[0])
            return ot_error(OT_ERR_PEER_FAILED, "ntp: %s answered only with kiss-o'-death %s",
                            out->address, kiss);
        if (refused)
            return ot_error(OT_ERR_TIMEOUT, "ntp: no NTP server at %s (port unreachable)",
                            out->address);
        return ot_error(OT_ERR_TIMEOUT, "ntp: no valid reply from %s in %d exchange(s) of %d ms",
                        out->address, o.samples, o.timeout_ms);
    }
    out->offset = f.offset;
    out->delay = f.delay;
    out->dispersion = ot_ntp_filter_disp(&f, mono_s());
    out->jitter = f.jitter;
    /* the distance check of RFC 5905's fit(), as the selection applies it, on the result: the
     * dispersion is that of the sample the offset came from, not the filter's (whose empty stages
     * count 16 s each, so every query of fewer than 4 samples would be too distant) */
    double disp = OT_NTP_MAXDISP;
    for (int k = 0; k < out->n_samples; k++)
        if (out->sample[k].delay == f.delay && out->sample[k].offset == f.offset)
            disp = out->sample[k].dispersion;
    ot_ntp_candidate c = {.offset = f.offset,
                          .delay = f.delay,
                          .disp = disp,
                          .jitter = f.jitter,
                          .root_delay = ot_ntp_short_to_s(out->last_reply.root_delay),
                          .root_disp = ot_ntp_short_to_s(out->last_reply.root_dispersion),
                          .t = 0,
                          .stratum = out->last_reply.stratum,
                          .leap = out->last_reply.leap,
                          .reachable = true};
    out->root_distance = ot_ntp_root_distance(&c, 0);
    const char *why;
    if (!o.skip_distance_check && !ot_ntp_fit(&c, 0, &why))
        return ot_error(OT_ERR_PEER_FAILED,
                        "ntp: %s is not fit to synchronize to: %s (root distance %.3f s: root "
                        "delay %.3f s, root dispersion %.3f s, delay %.6f s, dispersion %.6f s, "
                        "jitter %.6f s)",
                        out->address, why, out->root_distance, c.root_delay, c.root_disp, c.delay,
                        c.disp, c.jitter);
    return OT_OK;
}

/* ---- server ---- */

struct ot_ntp_server {
    ot_ntp_server_options o;
    char bind_addr[INET6_ADDRSTRLEN + 2];
    int fd;
    int wake[2]; /* self-pipe: stop writes, run/poll wake */
    int port;
    int precision;
    atomic_int stop;
    pthread_mutex_t stats_mu; /* stats are read from any thread while the server runs */
    ot_ntp_server_stats stats;
};

ot_ntp_server_options ot_ntp_server_options_default(void) {
    return (ot_ntp_server_options){
        .bind_addr = NULL,
        .port = 123,
        .stratum = 10,
        .ref_id = 0x7f7f0101u, /* 127.127.1.1: the conventional local-clock reference */
        .leap = 0,
        .root_delay = 0,
        .root_dispersion = 0.001,
    };
}

ot_status ot_ntp_server_reply(const ot_ntp_server_options *o, int precision, const void *req,
                              size_t len, ot_ntp_ts t2, ot_ntp_ts t3, uint8_t *out, size_t *out_len,
                              ot_ntp_server_stats *stats) {
    ot_ntp_packet q;
    ot_status s = ot_ntp_packet_decode(req, len, &q);
    if (s != OT_OK) {
        if (stats) stats->malformed++;
        return s;
    }
    if (q.mode != OT_NTP_MODE_CLIENT) {
        if (stats) stats->bad_mode++;
        return ot_error(OT_ERR_CORRUPT_DATA,
                        "ntp server: request mode %d, only client requests "
                        "(mode 3) are served",
                        q.mode);
    }
    ot_ntp_packet r = {0};
    r.leap = (uint8_t)(o->leap & 3);
    r.version = q.version;
    r.mode = OT_NTP_MODE_SERVER;
    r.stratum = (uint8_t)o->stratum;
    r.poll = q.poll;
    r.precision = (int8_t)precision;
    r.root_delay = ot_ntp_short_from_s(o->root_delay);
    r.root_dispersion = ot_ntp_short_from_s(o->root_dispersion);
    r.ref_id = o->ref_id;
    r.ref_ts = t2 & ~(ot_ntp_ts)0xffffffffu; /* a local reference: updated this second */
    r.origin_ts = q.transmit_ts;
    r.receive_ts = t2;
    r.transmit_ts = t3;
    ot_ntp_packet_encode(&r, out);
    *out_len = OT_NTP_PACKET_SIZE;
    if (q.mac_len) {
        /* RFC 5905 9.2: a request we cannot authenticate gets a crypto-NAK (key id 0) */
        memset(out + OT_NTP_PACKET_SIZE, 0, 4);
        *out_len += 4;
        if (stats) stats->crypto_nak++;
    }
    return OT_OK;
}

ot_status ot_ntp_server_create(const ot_ntp_server_options *opt, ot_ntp_server **out) {
    *out = NULL;
    ot_ntp_server_options o = opt ? *opt : ot_ntp_server_options_default();
    if (o.port < 0 || o.port > 65535)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ntp server: port %d (0..65535)", o.port);
    if (!(fabs(o.offset) <= 86400.0 * 365))
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ntp server: offset must be within a year");
    if (o.stratum < 1 || o.stratum > 15)
        return ot_error(OT_ERR_INVALID_ARGUMENT, "ntp server: stratum %d (1..15)", o.stratum);
    ot_status rc = OT_OK;
    ot_ntp_server *s = ot_calloc(1, sizeof *s);
    if (!s) return ot_error(OT_ERR_OUT_OF_MEMORY, "ntp server: out of memory");
    s->fd = -1;
    s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->stats_mu, NULL);
    s->o = o;
    s->o.bind_addr = NULL;
    struct sockaddr_storage ss;
    socklen_t sslen;
    bool dual = false;
    if (o.bind_addr) {
        const char *b = o.bind_addr;
        size_t bl = strlen(b);
        if (bl >= sizeof s->bind_addr) {
            rc = ot_error(OT_ERR_INVALID_ARGUMENT, "ntp server: bind address too long");
            goto fail;
        }
        if (b[0] == '[' && bl > 2 && b[bl - 1] == ']') {
            memcpy(s->bind_addr, b + 1, bl - 2);
        } else {
            memcpy(s->bind_addr, b, bl);
        }
        OT_CHECK_GOTO(resolve(s->bind_addr, o.port, true, &ss, &sslen), rc, fail);
    } else {
        struct sockaddr_in6 a6 = {0};
        a6.sin6_family = AF_INET6;
        a6.sin6_addr = in6addr_any;
        a6.sin6_port = htons((uint16_t)o.port);
        memcpy(&ss, &a6, sizeof a6);
        sslen = sizeof a6;
        dual = true;
    }
    s->fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s->fd < 0 && dual) { /* no IPv6: IPv4 wildcard */
        struct sockaddr_in a4 = {0};
        a4.sin_family = AF_INET;
        a4.sin_addr.s_addr = htonl(INADDR_ANY);
        a4.sin_port = htons((uint16_t)o.port);
        memcpy(&ss, &a4, sizeof a4);
        sslen = sizeof a4;
        dual = false;
        s->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    }
    if (s->fd < 0) {
        rc = ot_error(OT_ERR_IO, "ntp server: socket: %s", strerror(errno));
        goto fail;
    }
    int zero = 0, one = 1;
    if (dual) setsockopt(s->fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    setsockopt(s->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    if (bind(s->fd, (struct sockaddr *)&ss, sslen) != 0) {
        char a[80];
        addr_str((struct sockaddr *)&ss, a, sizeof a);
        rc = ot_error(OT_ERR_IO, "ntp server: bind %s: %s", a, strerror(errno));
        goto fail;
    }
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    getsockname(s->fd, (struct sockaddr *)&bound, &bl);
    s->port = bound.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&bound)->sin_port)
                                         : ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
    if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        rc = ot_error(OT_ERR_IO, "ntp server: pipe: %s", strerror(errno));
        goto fail;
    }
    s->precision = ot_ntp_local_precision();
    *out = s;
    return OT_OK;
fail:
    ot_ntp_server_free(s);
    return rc;
}

void ot_ntp_server_free(ot_ntp_server *s) {
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    if (s->wake[0] >= 0) close(s->wake[0]);
    if (s->wake[1] >= 0) close(s->wake[1]);
    pthread_mutex_destroy(&s->stats_mu);
    ot_free(s);
}

int ot_ntp_server_port(const ot_ntp_server *s) {
    return s->port;
}

ot_ntp_server_stats ot_ntp_server_get_stats(const ot_ntp_server *s) {
    ot_ntp_server *m = (ot_ntp_server *)s;
    pthread_mutex_lock(&m->stats_mu);
    ot_ntp_server_stats st = s->stats;
    pthread_mutex_unlock(&m->stats_mu);
    return st;
}

void ot_ntp_server_stop(ot_ntp_server *s) {
    atomic_store(&s->stop, 1);
    ssize_t r = write(s->wake[1], "x", 1);
    (void)r;
}

/* Answers every datagram queued on the socket. */
static void serve_pending(ot_ntp_server *s) {
    /* bounded, so a flood cannot keep run/poll from noticing ot_ntp_server_stop */
    for (int k = 0; k < 256; k++) {
        uint8_t buf[OT_NTP_MAX_PACKET + 4];
        struct sockaddr_storage from;
        socklen_t fromlen = sizeof from;
        int64_t t2;
        ssize_t n = recv_stamped(s->fd, buf, sizeof buf, &from, &fromlen, &t2);
        if (n < 0) return; /* EAGAIN: drained (errors from ICMP are not fatal either) */
        int64_t skew = (int64_t)llround(s->o.offset * 1e9);
        t2 += skew;
        size_t len = (size_t)n > sizeof buf ? sizeof buf + 1 : (size_t)n;
        uint8_t reply[OT_NTP_PACKET_SIZE + 4];
        size_t rlen;
        ot_ntp_server_stats d = {.received = 1};
        ot_ntp_ts t3 = ot_ntp_ts_from_unix_ns(wall_ns() + skew);
        if (ot_ntp_server_reply(&s->o, s->precision, buf, len, ot_ntp_ts_from_unix_ns(t2), t3,
                                reply, &rlen, &d) != OT_OK) {
            ot_log(OT_LOG_DEBUG, "%s", ot_last_error());
        } else if (sendto(s->fd, reply, rlen, 0, (struct sockaddr *)&from, fromlen) ==
                   (ssize_t)rlen) {
            d.answered = 1;
        }
        pthread_mutex_lock(&s->stats_mu);
        s->stats.received += d.received;
        s->stats.answered += d.answered;
        s->stats.malformed += d.malformed;
        s->stats.bad_mode += d.bad_mode;
        s->stats.crypto_nak += d.crypto_nak;
        pthread_mutex_unlock(&s->stats_mu);
    }
}

ot_status ot_ntp_server_poll(ot_ntp_server *s, int timeout_ms) {
    double deadline = mono_s() + (timeout_ms > 0 ? timeout_ms : 0) / 1000.0;
    do {
        if (atomic_load(&s->stop)) break;
        struct pollfd pf[2] = {{s->fd, POLLIN, 0}, {s->wake[0], POLLIN, 0}};
        int pr = poll(pf, 2, ms_until(deadline));
        if (pr < 0) {
            if (errno == EINTR) continue;
            return ot_error(OT_ERR_IO, "ntp server: poll: %s", strerror(errno));
        }
        if (pf[0].revents) serve_pending(s);
        if (pf[1].revents) break;
    } while (ms_until(deadline) > 0);
    return OT_OK;
}

ot_status ot_ntp_server_run(ot_ntp_server *s) {
    while (!atomic_load(&s->stop)) {
        struct pollfd pf[2] = {{s->fd, POLLIN, 0}, {s->wake[0], POLLIN, 0}};
        int pr = poll(pf, 2, -1); /* wakes on a request or on ot_ntp_server_stop */
        if (pr < 0) {
            if (errno == EINTR) continue;
            return ot_error(OT_ERR_IO, "ntp server: poll: %s", strerror(errno));
        }
        if (pf[0].revents) serve_pending(s);
    }
    return OT_OK;
}
