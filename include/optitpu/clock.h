/*
 * optitpu clock: NTPv4 (RFC 5905) packet format, on-wire protocol, mitigation algorithms
 * (clock filter, selection, cluster, combine, poll adaptation), a UDP client and server, and a
 * synchronization object whose offset the profiler and the coordinator read.
 *
 * Usage — one query:
 *
 *     ot_ntp_query_options o = ot_ntp_query_options_default();
 *     o.samples = 4;
 *     ot_ntp_query_result r;
 *     OT_CHECK(ot_ntp_query("[::1]:123", &o, &r));
 *     // r.offset: server clock minus ours, seconds; r.delay: round-trip delay, seconds
 *
 * Usage — keep a process synchronized to several servers and read the offset anywhere:
 *
 *     const char *servers[] = {"coord:12300", "10.0.0.2:123"};
 *     ot_clock_sync *s;
 *     OT_CHECK(ot_clock_sync_create(servers, 2, NULL, &s));
 *     OT_CHECK(ot_clock_sync_start(s));           // background thread, adaptive poll
 *     ...
 *     int64_t off;
 *     if (ot_clock_offset_ns(&off)) ...           // process-wide, lock-free
 *     uint64_t t = ot_clock_synced_wall_ns();     // wall clock corrected by the offset
 *     ot_clock_sync_free(s);                      // stops the thread
 *
 * Sign convention (RFC 5905): offset = server clock − local clock, so the synchronized time is
 * the local wall clock plus the offset.
 *
 * Time arguments of the pure algorithms (filter, selection, poll) are plain doubles in seconds on
 * any monotonic timescale the caller chooses, so tests drive them with exact synthetic times.
 * Wall-clock arguments are int64 nanoseconds since the Unix epoch.
 *
 * Thread safety: the pure functions touch only their arguments. An ot_ntp_server is run by one
 * thread; ot_ntp_server_get_stats may be called from any thread, ot_ntp_server_stop from any
 * thread or a signal handler. An ot_clock_sync may be read (ot_clock_sync_estimate, _class,
 * _server_info) from any thread while its own thread updates it; ot_clock_sync_update calls are
 * serialized. The process-wide ot_clock_offset_ns / ot_clock_synced_wall_ns are lock-free.
 *
 * Nothing here adjusts the host clock: offsets are measured and published, and readers apply
 * them.
 */
#ifndef OPTITPU_CLOCK_H
#define OPTITPU_CLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Timestamps
 *
 * 64-bit timestamp: 32 bits of seconds since the start of the NTP era and 32 bits of fraction.
 * Era 0 began 1900-01-01 00:00:00 UTC; era 1 begins 2036-02-07 06:28:16 UTC. A timestamp alone
 * does not name its era: ot_ntp_ts_to_unix_ns picks the era that puts the time within ±2^31 s
 * (≈ 68 years) of a pivot, as RFC 5905 section 6 prescribes. Differences of timestamps taken in
 * two's-complement 64-bit arithmetic are era-independent (ot_ntp_ts_diff).
 * Short format: 16 bits of seconds and 16 of fraction (root delay and root dispersion).
 * ------------------------------------------------------------------------------------------- */

#define OT_NTP_UNIX_EPOCH  2208988800u /* seconds from 1900-01-01 to 1970-01-01 */
#define OT_NTP_PACKET_SIZE 48
#define OT_NTP_MAX_PACKET  1024 /* longest datagram the decoder accepts (header + extensions) */

typedef uint64_t ot_ntp_ts;

OT_API ot_ntp_ts ot_ntp_ts_from_unix_ns(int64_t unix_ns); /* rounded to the nearest 2^-32 s */
/* The time, in ns since the Unix epoch, of the instant within [pivot − 2^31 s, pivot + 2^31 s)
 * that `ts` names. */
OT_API int64_t ot_ntp_ts_to_unix_ns(ot_ntp_ts ts, int64_t pivot_unix_ns);
/* The era (0 before 2036-02-07, 1 after, negative before 1900) of a Unix time. */
OT_API int ot_ntp_era(int64_t unix_ns);
/* a − b in seconds, valid whenever the true difference is within ±68 years (any eras). */
OT_API double ot_ntp_ts_diff(ot_ntp_ts a, ot_ntp_ts b);
OT_API double ot_ntp_short_to_s(uint32_t v);
OT_API uint32_t ot_ntp_short_from_s(double s); /* saturates to [0, 65535.99998] */
/* 2^p seconds (the "log2" fields poll and precision). */
OT_API double ot_ntp_log2d(int p);

/* ---------------------------------------------------------------------------------------------
 * The packet (RFC 5905 section 7.3; extension fields RFC 7822)
 * ------------------------------------------------------------------------------------------- */

enum {
    OT_NTP_LEAP_NONE = 0,
    OT_NTP_LEAP_ADD = 1,    /* last minute of the day has 61 s */
    OT_NTP_LEAP_DEL = 2,    /* last minute of the day has 59 s */
    OT_NTP_LEAP_NOSYNC = 3, /* unsynchronized */
    OT_NTP_MODE_SYM_ACTIVE = 1,
    OT_NTP_MODE_SYM_PASSIVE = 2,
    OT_NTP_MODE_CLIENT = 3,
    OT_NTP_MODE_SERVER = 4,
    OT_NTP_MODE_BROADCAST = 5,
    OT_NTP_MODE_CONTROL = 6,
    OT_NTP_MODE_PRIVATE = 7,
    OT_NTP_VERSION = 4,
    OT_NTP_MAXSTRAT = 16, /* stratum 16 = unsynchronized */
    OT_NTP_MAX_EXT = 8,   /* extension fields whose types the decoder records */
};

typedef struct ot_ntp_packet {
    uint8_t leap;     /* LI, 0..3 */
    uint8_t version;  /* VN, 1..4 accepted by the decoder */
    uint8_t mode;     /* 0..7 */
    uint8_t stratum;  /* 0 = kiss-o'-death / unspecified, 1 primary, 2..15 secondary, 16 unsync */
    int8_t poll;      /* log2 s */
    int8_t precision; /* log2 s */
    uint32_t root_delay;      /* short format */
    uint32_t root_dispersion; /* short format */
    uint32_t ref_id;          /* host byte order; stratum 0/1: four ASCII characters, big-endian */
    ot_ntp_ts ref_ts, origin_ts, receive_ts, transmit_ts;
    /* What followed the 48-byte header (filled by decode, ignored by encode). */
    int n_ext;                         /* extension fields (RFC 7822), all counted */
    uint16_t ext_type[OT_NTP_MAX_EXT]; /* types of the first OT_NTP_MAX_EXT of them */
    uint8_t mac_len;                   /* 0 none, 4 crypto-NAK, 20 MD5 or 24 SHA-1 MAC */
    uint32_t key_id;                   /* the MAC's key identifier */
} ot_ntp_packet;

/* Writes the 48-byte header (big-endian). Fields are masked to their bit widths. */
OT_API void ot_ntp_packet_encode(const ot_ntp_packet *p, uint8_t out[OT_NTP_PACKET_SIZE]);
/* Parses a datagram: at least 48 bytes, at most OT_NTP_MAX_PACKET, a multiple of 4, version
 * 1..4, then per RFC 7822 a sequence of extension fields (type, length ≥ 16 and a multiple of 4,
 * within the datagram) optionally followed by a MAC (4-byte crypto-NAK, 20 or 24 bytes). Any
 * other layout is OT_ERR_CORRUPT_DATA with a message naming the problem. Semantic checks (mode,
 * stratum, leap, timestamps) are the caller's: see ot_ntp_exchange_receive. */
OT_API ot_status ot_ntp_packet_decode(const void *buf, size_t len, ot_ntp_packet *out);
/* The kiss code of a stratum-0 packet ("RATE", "DENY", ...): out gets 4 printable characters
 * and a NUL (non-printable bytes become '?'). */
OT_API void ot_ntp_kiss_code(const ot_ntp_packet *p, char out[5]);
/* Reference id as text: 4 ASCII characters for stratum 0/1, a dotted IPv4 address otherwise. */
OT_API void ot_ntp_ref_id_str(const ot_ntp_packet *p, char out[16]);

/* ---------------------------------------------------------------------------------------------
 * On-wire protocol (RFC 5905 sections 8 and 9): T1 client transmit, T2 server receive, T3 server
 * transmit, T4 client receive.
 *   offset θ = ((T2 − T1) + (T3 − T4)) / 2
 *   delay  δ = max((T4 − T1) − (T3 − T2), 2^sys_precision)
 *   dispersion ε = 2^peer_precision + 2^sys_precision + PHI·(T4 − T1), PHI = 15 ppm
 * ------------------------------------------------------------------------------------------- */

#define OT_NTP_PHI     15e-6 /* frequency tolerance, s/s */
#define OT_NTP_MAXDISP 16.0  /* maximum dispersion, s */
#define OT_NTP_MAXDIST 1.5   /* distance threshold for selection, s */
#define OT_NTP_MINDISP 0.005

typedef struct ot_ntp_sample {
    double offset;     /* θ, s */
    double delay;      /* δ, s */
    double dispersion; /* ε, s */
    ot_ntp_ts t1, t2, t3, t4;
} ot_ntp_sample;

OT_API void ot_ntp_sample_compute(ot_ntp_ts t1, ot_ntp_ts t2, ot_ntp_ts t3, ot_ntp_ts t4,
                                  int peer_precision, int sys_precision, ot_ntp_sample *out);

/* Why a received datagram was accepted or dropped. */
typedef enum ot_ntp_verdict {
    OT_NTP_ACCEPTED = 0,
    OT_NTP_MALFORMED,      /* decode failed: length, alignment, version, extension layout */
    OT_NTP_BAD_MODE,       /* not a server reply (mode 4) */
    OT_NTP_ZERO_TRANSMIT,  /* transmit timestamp zero */
    OT_NTP_DUPLICATE,      /* transmit timestamp equal to the last accepted reply's */
    OT_NTP_REPLAY,         /* origin matches an earlier request of ours, not the outstanding one */
    OT_NTP_BOGUS,          /* origin matches no request of ours (spoofed, or none outstanding) */
    OT_NTP_KISS,           /* stratum 0: kiss-o'-death, code in the reference id */
    OT_NTP_UNSYNCHRONIZED, /* LI = 3 or stratum ≥ 16 */
    OT_NTP_BAD_TIMES,      /* zero receive timestamp, or server transmit before its receive */
    OT_NTP_AUTH,           /* carries a MAC or crypto-NAK: symmetric-key auth is not supported */
    OT_NTP_BAD_HEADER,     /* RFC 5905 A.5.1.1: root delay/2 + root dispersion >= MAXDISP, or a
                              reference time after the transmit time */
    OT_NTP_VERDICT_COUNT,
} ot_ntp_verdict;

OT_API const char *ot_ntp_verdict_name(ot_ntp_verdict v); /* "accepted", "malformed", ... */

#define OT_NTP_REPLAY_HISTORY 8

/* Client-side exchange state for one server: the outstanding request, the last accepted reply,
 * and counters per verdict. Plain data; zero-initialize with ot_ntp_exchange_init. */
typedef struct ot_ntp_exchange {
    ot_ntp_ts xmt_wire; /* transmit timestamp in the outstanding request; 0 = none outstanding */
    ot_ntp_ts t1;       /* exact local transmit time of that request (its low bits not random) */
    ot_ntp_ts last_server_xmt;                /* T3 of the last accepted reply */
    ot_ntp_ts old_xmt[OT_NTP_REPLAY_HISTORY]; /* earlier requests' xmt_wire (replay detection) */
    int n_old;
    uint64_t count[OT_NTP_VERDICT_COUNT]; /* datagrams per verdict */
} ot_ntp_exchange;

OT_API void ot_ntp_exchange_init(ot_ntp_exchange *x);
/* Builds a client request (mode 3, version 4) sent at local wall time t1_unix_ns. The transmit
 * timestamp on the wire has its 8 bits below 2^-24 s replaced by `random_bits`, so an off-path
 * attacker cannot predict the origin the reply must echo; the exact T1 is kept in *x. A previous
 * outstanding request becomes "old" (its late reply counts as a replay). */
OT_API void ot_ntp_exchange_request(ot_ntp_exchange *x, int64_t t1_unix_ns, uint8_t random_bits,
                                    int poll, uint8_t out[OT_NTP_PACKET_SIZE]);
/* Judges a datagram received at local wall time t4_unix_ns, in the order of RFC 5905 A.5.1:
 * format, mode, zero transmit, duplicate, origin (replay, bogus), authentication,
 * kiss-o'-death, unsynchronized, header values (root distance, reference time), timestamps. The
 * verdict is counted in x->count. On acceptance the outstanding request is closed (a second copy is
 * a duplicate), *pkt and *sample are filled and OT_OK returned. Otherwise: OT_ERR_CORRUPT_DATA
 * (malformed, mode, zero transmit, duplicate, replay, bogus, times, auth) or OT_ERR_PEER_FAILED
 * (kiss, unsynchronized, bad header) with a message; *pkt is filled whenever the datagram decoded
 * (so the caller can read a kiss code). verdict (may be NULL) receives the verdict. */
OT_API ot_status ot_ntp_exchange_receive(ot_ntp_exchange *x, const void *buf, size_t len,
                                         int64_t t4_unix_ns, int sys_precision, ot_ntp_packet *pkt,
                                         ot_ntp_sample *sample, ot_ntp_verdict *verdict);

/* ---------------------------------------------------------------------------------------------
 * Clock filter (RFC 5905 section 10): an 8-stage shift register of (offset, delay, dispersion,
 * time). Each new sample ages the older stages' dispersion by PHI·Δt; the peer offset and delay
 * come from the minimum-delay stage; peer dispersion ε = Σ ε_i / 2^(i+1) over the stages sorted
 * by delay; jitter ψ = RMS of (θ_0 − θ_i) over the valid stages (at least 2^sys_precision).
 * ------------------------------------------------------------------------------------------- */

#define OT_NTP_NSTAGE 8

typedef struct ot_ntp_filter_stage {
    double offset, delay, disp, t;
} ot_ntp_filter_stage;

typedef struct ot_ntp_filter {
    ot_ntp_filter_stage stage[OT_NTP_NSTAGE]; /* stage[0] is the newest; empty: delay MAXDISP */
    int n;                                    /* valid stages */
    double t_last;                            /* time of the last sample added */
    /* peer variables */
    double offset, delay, disp, jitter;
    double t; /* time of the sample the offset came from; -inf before the first */
    bool valid;
} ot_ntp_filter;

OT_API void ot_ntp_filter_init(ot_ntp_filter *f);
/* Adds a sample taken at time `now`. Returns true when the peer offset/delay were updated from
 * a sample newer than the one they came from (the RFC's prime directive: use a sample once and
 * never an older one); dispersion and jitter are always refreshed. */
OT_API bool ot_ntp_filter_add(ot_ntp_filter *f, double offset, double delay, double disp,
                              double now, int sys_precision);
/* Peer dispersion aged to `now` (ε + PHI·(now − t_last)), MAXDISP when empty. */
OT_API double ot_ntp_filter_disp(const ot_ntp_filter *f, double now);

/* ---------------------------------------------------------------------------------------------
 * Selection, cluster and combine (RFC 5905 section 11) over several servers.
 * ------------------------------------------------------------------------------------------- */

#define OT_NTP_MAX_PEERS 64
#define OT_NTP_NMIN      3 /* the cluster algorithm keeps at least this many survivors */

typedef struct ot_ntp_candidate {
    double offset, delay, disp, jitter; /* peer variables from the clock filter */
    double root_delay, root_disp;       /* from the server's packets, s */
    double t;                           /* time of the last peer update (filter's t_last) */
    int stratum;
    int leap;
    bool reachable;
} ot_ntp_candidate;

typedef enum ot_ntp_peer_class {
    OT_NTP_UNFIT = 0,   /* unreachable, unsynchronized, stratum ≥ 16, or too distant */
    OT_NTP_FALSETICKER, /* interval misses the intersection of the truechimers */
    OT_NTP_OUTLIER,     /* truechimer pruned by the cluster algorithm */
    OT_NTP_SURVIVOR,    /* combined into the system offset */
    OT_NTP_SYS_PEER,    /* the survivor with the best metric */
} ot_ntp_peer_class;

OT_API const char *ot_ntp_peer_class_name(ot_ntp_peer_class c);

/* Root distance λ = max(MINDISP, δ_root + δ)/2 + ε_root + ε + ψ + PHI·(now − t). */
OT_API double ot_ntp_root_distance(const ot_ntp_candidate *c, double now);
/* RFC 5905's fit() (A.5.2), the distance check the selection applies: reachable, synchronized
 * (LI ≠ 3), stratum 1..15, finite non-negative variables, root distance ≤ MAXDIST. *why (may be
 * NULL) names the first test that failed, or is NULL when the candidate is fit. ot_ntp_query
 * applies it to its result too. */
OT_API bool ot_ntp_fit(const ot_ntp_candidate *c, double now, const char **why);

typedef struct ot_ntp_system {
    double offset;        /* combined offset, s */
    double jitter;        /* system jitter: sqrt(selection jitter² + sys peer jitter²), s */
    double root_distance; /* of the system peer, s */
    double low, high;     /* intersection interval found by the selection, s */
    int sys_peer;         /* index into the candidates */
    int n_truechimers;
    int n_survivors;
} ot_ntp_system;

/* Selection: classifies each candidate as UNFIT, FALSETICKER or (provisionally) SURVIVOR and
 * finds the intersection [low, high] agreed on by a majority (Marzullo's algorithm as modified
 * by RFC 5905 11.2.1: midpoints outside the interval count as faults). A truechimer is a fit
 * candidate whose correctness interval [θ − λ, θ + λ] overlaps [low, high].
 * OT_ERR_FAILED_PRECONDITION when no majority agrees (every fit candidate is then marked
 * FALSETICKER) or none is fit; n ≤ OT_NTP_MAX_PEERS. */
OT_API ot_status ot_ntp_select(const ot_ntp_candidate *c, int n, double now, ot_ntp_peer_class *cls,
                               double *low, double *high);
/* Cluster: repeatedly removes the survivor with the largest selection jitter φ while φ exceeds
 * the smallest peer jitter and more than nmin survive (outliers become OUTLIER). Marks the best
 * survivor (metric MAXDIST·stratum + λ) SYS_PEER and returns its index (−1 when none). */
OT_API int ot_ntp_cluster(const ot_ntp_candidate *c, int n, double now, ot_ntp_peer_class *cls,
                          int nmin);
/* Combine: offset = Σ(θ_i/λ_i)/Σ(1/λ_i) over survivors; jitter as ot_ntp_system says. */
OT_API void ot_ntp_combine(const ot_ntp_candidate *c, int n, double now,
                           const ot_ntp_peer_class *cls, int sys_peer, ot_ntp_system *out);
/* All three. cls receives the final class of every candidate. */
OT_API ot_status ot_ntp_mitigate(const ot_ntp_candidate *c, int n, double now,
                                 ot_ntp_peer_class *cls, ot_ntp_system *out);

/* ---------------------------------------------------------------------------------------------
 * Poll interval (RFC 5905 A.5.5.6): a jiggle counter. An offset within PGATE (4) jitters adds
 * the poll exponent, otherwise twice it is subtracted; past ±LIMIT (30) the exponent moves one
 * step within [minpoll, maxpoll].
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_ntp_poll {
    int poll, minpoll, maxpoll;
    int jiggle;
} ot_ntp_poll;

/* minpoll and maxpoll are clamped to [0, 17] and ordered; the exponent starts at minpoll. */
OT_API void ot_ntp_poll_init(ot_ntp_poll *p, int minpoll, int maxpoll);
OT_API int ot_ntp_poll_update(ot_ntp_poll *p, double offset, double jitter);
/* A RATE kiss or a lost server: one step longer at once (up to maxpoll). */
OT_API int ot_ntp_poll_backoff(ot_ntp_poll *p);

/* ---------------------------------------------------------------------------------------------
 * Addresses: "HOST", "HOST:PORT", "IPv4:PORT", "[IPv6]:PORT", "[IPv6]"; a bare IPv6 literal
 * without brackets (two or more colons) is taken whole. The port defaults to 123.
 * ------------------------------------------------------------------------------------------- */

OT_API ot_status ot_ntp_split_host_port(const char *s, char *host, size_t host_cap, int *port);

/* ---------------------------------------------------------------------------------------------
 * Client
 * ------------------------------------------------------------------------------------------- */

#define OT_NTP_MAX_SAMPLES 64

typedef struct ot_ntp_query_options {
    int samples;     /* exchanges to attempt, 1..OT_NTP_MAX_SAMPLES (default 4) */
    int interval_ms; /* pause between exchanges (default 1000; servers may rate-limit) */
    int timeout_ms;  /* per exchange: longest wait for a valid reply (default 1000) */
    /* the distance check is left to the caller (the sync object judges fitness over its own
     * filter across rounds); default false: a result that fails ot_ntp_fit is PEER_FAILED */
    bool skip_distance_check;
} ot_ntp_query_options;

OT_API ot_ntp_query_options ot_ntp_query_options_default(void);

typedef struct ot_ntp_query_result {
    char address[64]; /* numeric address and port that were queried */
    int n_samples;    /* accepted replies */
    int n_timeouts;   /* exchanges without a valid reply */
    ot_ntp_sample sample[OT_NTP_MAX_SAMPLES];
    /* clock filter output over the accepted samples */
    double offset, delay, dispersion, jitter;
    /* root distance of the result (ot_ntp_root_distance, with the dispersion of the sample the
     * offset came from); 0 when no reply was accepted */
    double root_distance;
    ot_ntp_packet last_reply; /* stratum, reference id, root delay/dispersion, leap ... */
    uint64_t count[OT_NTP_VERDICT_COUNT]; /* every datagram received, per verdict */
} ot_ntp_query_result;

/* Queries one server. OT_OK when at least one reply was accepted and the result passes the
 * distance check (ot_ntp_fit); OT_ERR_TIMEOUT when none came; OT_ERR_PEER_FAILED when the server
 * sent a DENY/RSTR kiss, only unsynchronized replies or only replies with invalid headers, or
 * when the result is too distant (root distance above MAXDIST); OT_ERR_NOT_FOUND when the name does
 * not resolve. A RATE kiss doubles the interval. *out is filled in every case (counters included).
 * Every receive waits at most timeout_ms. */
OT_API ot_status ot_ntp_query(const char *host_port, const ot_ntp_query_options *o,
                              ot_ntp_query_result *out);

/* ---------------------------------------------------------------------------------------------
 * Server: answers client requests (mode 3, versions 1..4) with the host's wall clock.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_ntp_server_options {
    const char *bind_addr; /* NULL: "::" dual-stack, falling back to 0.0.0.0 without IPv6 */
    int port;              /* 0 picks a free port (see ot_ntp_server_port) */
    int stratum;           /* advertised stratum, 1..15 (default 10, like a local reference) */
    uint32_t ref_id;       /* default 127.127.1.1 (local clock) */
    int leap;              /* advertised leap indicator (default 0) */
    double root_delay, root_dispersion; /* advertised, s (default 0 and 0.001) */
    double offset; /* added to the served clock, s (default 0); simulates a skewed host */
} ot_ntp_server_options;

OT_API ot_ntp_server_options ot_ntp_server_options_default(void);

/* Why the server dropped a request. */
typedef struct ot_ntp_server_stats {
    uint64_t received, answered;
    uint64_t malformed;  /* decode failed */
    uint64_t bad_mode;   /* not a client request (mode 3) */
    uint64_t crypto_nak; /* carried a MAC: answered with a crypto-NAK (RFC 5905 section 9.2) */
} ot_ntp_server_stats;

/* Builds the reply to one request received at T2 and sent at T3 (pure; the network server uses
 * it). out must hold OT_NTP_PACKET_SIZE + 4 bytes. OT_OK with *out_len set when the request
 * deserves an answer; otherwise OT_ERR_CORRUPT_DATA with a message, and the matching counter in
 * *stats (may be NULL) is incremented. precision: the server clock's log2 precision. */
OT_API ot_status ot_ntp_server_reply(const ot_ntp_server_options *o, int precision, const void *req,
                                     size_t len, ot_ntp_ts t2, ot_ntp_ts t3, uint8_t *out,
                                     size_t *out_len, ot_ntp_server_stats *stats);

typedef struct ot_ntp_server ot_ntp_server;

/* Binds the socket. On failure nothing is left open. */
OT_API ot_status ot_ntp_server_create(const ot_ntp_server_options *o, ot_ntp_server **out);
OT_API void ot_ntp_server_free(ot_ntp_server *s); /* NULL is a no-op */
OT_API int ot_ntp_server_port(const ot_ntp_server *s);
/* Answers requests for up to timeout_ms (returns early after ot_ntp_server_stop). */
OT_API ot_status ot_ntp_server_poll(ot_ntp_server *s, int timeout_ms);
/* Answers until ot_ntp_server_stop. */
OT_API ot_status ot_ntp_server_run(ot_ntp_server *s);
/* Thread-safe and async-signal-safe: makes run/poll return. */
OT_API void ot_ntp_server_stop(ot_ntp_server *s);
OT_API ot_ntp_server_stats ot_ntp_server_get_stats(const ot_ntp_server *s);

/* The local clock's precision: log2 of the smallest step between successive CLOCK_REALTIME
 * readings, measured once (about a microsecond of work). */
OT_API int ot_ntp_local_precision(void);

/* ---------------------------------------------------------------------------------------------
 * Synchronization object: several servers, each with a clock filter and adaptive poll; each
 * update runs selection/cluster/combine and publishes the system offset.
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_clock_sync_options {
    int minpoll, maxpoll; /* poll exponent range (default 4..10: 16 s .. 17 min) */
    int timeout_ms;       /* per exchange (default 1000) */
    /* exchanges per server on the first round (default 4, like iburst). A server needs about 4
     * samples before the dispersion of the empty filter stages lets its root distance fall under
     * MAXDIST, so a smaller burst delays the first synchronization. */
    int burst;
    int burst_interval_ms; /* between burst exchanges (default 500) */
    bool publish;          /* publish the offset process-wide (ot_clock_offset_ns; default true) */
} ot_clock_sync_options;

OT_API ot_clock_sync_options ot_clock_sync_options_default(void);

typedef struct ot_clock_estimate {
    bool synchronized;
    int64_t offset_ns;        /* server − local */
    int64_t jitter_ns;        /* system jitter */
    int64_t root_distance_ns; /* error bound of the system peer */
    int poll;                 /* current poll exponent */
    int n_survivors;
    uint64_t updated_mono_ns; /* ot_now_ns() of the last successful update */
    double freq_ppm; /* drift of the offset (server clock rate − ours), 0 until estimated */
} ot_clock_estimate;

typedef struct ot_clock_sync ot_clock_sync;

/* Copies the server names (resolved at each exchange). n: 1..OT_NTP_MAX_PEERS. */
OT_API ot_status ot_clock_sync_create(const char *const *servers, int n,
                                      const ot_clock_sync_options *o, ot_clock_sync **out);
/* Stops the thread if started, then frees. NULL is a no-op. */
OT_API void ot_clock_sync_free(ot_clock_sync *s);
/* One round in the calling thread: one exchange with every server (a burst on the first
 * round), filter, mitigate, publish. Serialized with the background thread's rounds; each
 * exchange waits at most timeout_ms. OT_OK when synchronized after it; otherwise the reason
 * (e.g. OT_ERR_TIMEOUT when no server answered, OT_ERR_FAILED_PRECONDITION without a majority). */
OT_API ot_status ot_clock_sync_update(ot_clock_sync *s);
/* Starts a background thread that updates every 2^poll seconds. */
OT_API ot_status ot_clock_sync_start(ot_clock_sync *s);
OT_API void ot_clock_sync_stop(ot_clock_sync *s);
OT_API ot_clock_estimate ot_clock_sync_estimate(const ot_clock_sync *s);
/* The class each server received in the last mitigation (index as passed to create). */
OT_API ot_ntp_peer_class ot_clock_sync_server_class(const ot_clock_sync *s, int i);

typedef struct ot_clock_server_info {
    const char *name;             /* as passed to create; valid while the sync object lives */
    ot_ntp_peer_class cls;        /* from the last mitigation */
    bool valid;                   /* the clock filter holds at least one sample */
    double offset, delay;         /* peer variables (minimum-delay sample), s */
    double jitter, root_distance; /* s */
    int stratum;
    uint8_t reach; /* one bit per round, newest lowest: 1 = answered */
} ot_clock_server_info;

/* Per-server state after the last round (i as passed to create); waits for a round in progress. */
OT_API ot_status ot_clock_sync_server_info(const ot_clock_sync *s, int i,
                                           ot_clock_server_info *out);

#define OT_NTP_MAXFREQ 500e-6 /* largest drift believed, s/s (RFC 5905 MAXFREQ) */

/* Least-squares line through (t[i], offset[i]), i < n (seconds): *freq is its slope (s/s) and
 * *offset_at_last its value at t[n-1]. OT_ERR_FAILED_PRECONDITION when n < 2 or all t are equal.
 * The sync object fits its last OT_CLOCK_DRIFT_HISTORY offsets once they span
 * OT_CLOCK_DRIFT_MIN_SPAN seconds, so the published offset follows a drifting clock between
 * updates instead of staying flat. */
#define OT_CLOCK_DRIFT_HISTORY  8
#define OT_CLOCK_DRIFT_MIN_SPAN 30.0
OT_API ot_status ot_clock_fit_drift(const double *t, const double *offset, int n, double *freq,
                                    double *offset_at_last);

/* Process-wide synchronized offset (published by sync objects, or by hand for tests and for a
 * coordinator that learned it another way): offset_ns at monotonic time ref_mono_ns, changing
 * by freq (s/s, clamped to ±OT_NTP_MAXFREQ) after it. Lock-free (a sequence lock). */
OT_API void ot_clock_publish(int64_t offset_ns, double freq, uint64_t ref_mono_ns);
/* ot_clock_publish(offset_ns, 0, ot_now_ns()). */
OT_API void ot_clock_publish_offset_ns(int64_t offset_ns);
OT_API void ot_clock_unpublish(void);
/* The published offset extrapolated to now; false (and *offset_ns = 0) when nothing has been
 * published. */
OT_API bool ot_clock_offset_ns(int64_t *offset_ns);
/* The same at a given ot_now_ns() reading. */
OT_API bool ot_clock_offset_at_ns(uint64_t mono_ns, int64_t *offset_ns);
/* ot_wall_ns() + the published offset (just the wall clock when none). */
OT_API uint64_t ot_clock_synced_wall_ns(void);
/* Maps an ot_now_ns() reading to the synchronized wall timeline (for merging traces). */
OT_API int64_t ot_clock_mono_to_synced_ns(uint64_t mono_ns);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_CLOCK_H */
