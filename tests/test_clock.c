/* Clock: NTP timestamps and eras, the packet codec, the on-wire arithmetic on exact vectors, reply
 * validation (bogus, duplicate, replayed, kiss-o'-death, unsynchronized ...), the clock filter,
 * selection/cluster/combine on synthetic servers with known offsets, poll adaptation, and the UDP
 * client and server over loopback (IPv4 and IPv6) including spoofing peers and a falseticker. */
#include "ot_test.h"

#include "optitpu/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#define NS        1000000000ll
#define ERA1_UNIX 2085978496ll /* 2036-02-07 06:28:16 UTC */

static ot_ntp_ts ts_s(int64_t unix_s, double frac) {
    return ot_ntp_ts_from_unix_ns(unix_s * NS + (int64_t)llround(frac * 1e9));
}

/* ---- timestamps ---- */

static void test_timestamp_vectors(void) {
    EXPECT_U64_EQ(ot_ntp_ts_from_unix_ns(0), (uint64_t)OT_NTP_UNIX_EPOCH << 32);
    EXPECT_U64_EQ(ot_ntp_ts_from_unix_ns(ERA1_UNIX * NS), 0);
    EXPECT_U64_EQ(ot_ntp_ts_from_unix_ns(ERA1_UNIX * NS - NS / 2), 0xffffffff80000000ull);
    EXPECT_U64_EQ(ot_ntp_ts_from_unix_ns(ERA1_UNIX * NS + NS + NS / 4), 0x0000000140000000ull);
    /* 1900-01-01 is era 0 second 0 */
    EXPECT_U64_EQ(ot_ntp_ts_from_unix_ns(-(int64_t)OT_NTP_UNIX_EPOCH * NS), 0);
    EXPECT_INT_EQ(ot_ntp_era(0), 0);
    EXPECT_INT_EQ(ot_ntp_era(ERA1_UNIX * NS - 1), 0);
    EXPECT_INT_EQ(ot_ntp_era(ERA1_UNIX * NS), 1);
    EXPECT_INT_EQ(ot_ntp_era(-(int64_t)OT_NTP_UNIX_EPOCH * NS - 1), -1);
    /* era resolution pivots on a reference time */
    int64_t y2030 = 1893456000ll * NS, y2040 = 2208988800ll * NS, y1950 = -631152000ll * NS;
    int64_t y1990 = 631152000ll * NS;
    EXPECT_INT_EQ(ot_ntp_ts_to_unix_ns(0xffffffff80000000ull, y2030), ERA1_UNIX * NS - NS / 2);
    EXPECT_INT_EQ(ot_ntp_ts_to_unix_ns(0xffffffff80000000ull, y2040), ERA1_UNIX * NS - NS / 2);
    EXPECT_INT_EQ(ot_ntp_ts_to_unix_ns(0x0000000100000000ull, y2040), (ERA1_UNIX + 1) * NS);
    EXPECT_INT_EQ(ot_ntp_ts_to_unix_ns(0x0000000100000000ull, y2030), (ERA1_UNIX + 1) * NS);
    EXPECT_INT_EQ(ot_ntp_ts_to_unix_ns(0x0000000100000000ull, y1990), (ERA1_UNIX + 1) * NS);
    EXPECT_INT_EQ(ot_ntp_ts_to_unix_ns(0x0000000100000000ull, y1950),
                  (1 - (int64_t)OT_NTP_UNIX_EPOCH) * NS);
    /* exact round trips at ns resolution, over both eras, any pivot within ±60 years */
    uint64_t x = 88172645463325252ull;
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int64_t t = (int64_t)(x % (200ull * 365 * 86400 * NS)) - 50ll * 365 * 86400 * NS;
        int64_t pivot = t + ((int64_t)(x >> 20) % (60ll * 365 * 86400)) * NS;
        if (ot_ntp_ts_to_unix_ns(ot_ntp_ts_from_unix_ns(t), pivot) != t) bad++;
    }
    EXPECT_INT_EQ(bad, 0);
    /* differences are era-independent */
    EXPECT_NEAR(ot_ntp_ts_diff(ts_s(ERA1_UNIX + 1, 0), ts_s(ERA1_UNIX - 1, 0)), 2.0, 0);
    EXPECT_NEAR(ot_ntp_ts_diff(ts_s(ERA1_UNIX - 1, 0), ts_s(ERA1_UNIX + 1, 0)), -2.0, 0);
    EXPECT_NEAR(ot_ntp_ts_diff(ts_s(1700000000, 0.75), ts_s(1700000000, 0.25)), 0.5, 0);
    /* short format */
    EXPECT_U64_EQ(ot_ntp_short_from_s(1.5), 0x00018000u);
    EXPECT_NEAR(ot_ntp_short_to_s(0x00018000u), 1.5, 0);
    EXPECT_U64_EQ(ot_ntp_short_from_s(-3), 0);
    EXPECT_U64_EQ(ot_ntp_short_from_s(1e9), 0xffffffffu);
    EXPECT_NEAR(ot_ntp_log2d(-20), 1.0 / 1048576, 0);
}

/* ---- packet ---- */

static ot_ntp_packet full_packet(void) {
    ot_ntp_packet p = {0};
    p.leap = 1;
    p.version = 4;
    p.mode = 4;
    p.stratum = 2;
    p.poll = 6;
    p.precision = -23;
    p.root_delay = 0x00012345;
    p.root_dispersion = 0x0000abcd;
    p.ref_id = 0xc0a80001;
    p.ref_ts = 0x1111111122222222ull;
    p.origin_ts = 0x3333333344444444ull;
    p.receive_ts = 0x5555555566666666ull;
    p.transmit_ts = 0x7777777788888888ull;
    return p;
}

static void test_packet_roundtrip(void) {
    ot_ntp_packet p = full_packet(), q;
    uint8_t b[OT_NTP_PACKET_SIZE];
    ot_ntp_packet_encode(&p, b);
    static const uint8_t want[OT_NTP_PACKET_SIZE] = {
        0x64, 0x02, 0x06, 0xe9, 0x00, 0x01, 0x23, 0x45, 0x00, 0x00, 0xab, 0xcd,
        0xc0, 0xa8, 0x00, 0x01, 0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x22, 0x22,
        0x33, 0x33, 0x33, 0x33, 0x44, 0x44, 0x44, 0x44, 0x55, 0x55, 0x55, 0x55,
        0x66, 0x66, 0x66, 0x66, 0x77, 0x77, 0x77, 0x77, 0x88, 0x88, 0x88, 0x88};
    EXPECT_TRUE(memcmp(b, want, sizeof want) == 0);
    ASSERT_OK(ot_ntp_packet_decode(b, sizeof b, &q));
    EXPECT_INT_EQ(q.leap, 1);
    EXPECT_INT_EQ(q.version, 4);
    EXPECT_INT_EQ(q.mode, 4);
    EXPECT_INT_EQ(q.stratum, 2);
    EXPECT_INT_EQ(q.poll, 6);
    EXPECT_INT_EQ(q.precision, -23);
    EXPECT_U64_EQ(q.root_delay, p.root_delay);
    EXPECT_U64_EQ(q.root_dispersion, p.root_dispersion);
    EXPECT_U64_EQ(q.ref_id, p.ref_id);
    EXPECT_U64_EQ(q.ref_ts, p.ref_ts);
    EXPECT_U64_EQ(q.origin_ts, p.origin_ts);
    EXPECT_U64_EQ(q.receive_ts, p.receive_ts);
    EXPECT_U64_EQ(q.transmit_ts, p.transmit_ts);
    EXPECT_INT_EQ(q.n_ext, 0);
    EXPECT_INT_EQ(q.mac_len, 0);
    /* every value of the bit fields survives */
    for (int li = 0; li < 4; li++)
        for (int vn = 1; vn <= 4; vn++)
            for (int mode = 0; mode < 8; mode++) {
                p.leap = (uint8_t)li, p.version = (uint8_t)vn, p.mode = (uint8_t)mode;
                ot_ntp_packet_encode(&p, b);
                EXPECT_OK(ot_ntp_packet_decode(b, sizeof b, &q));
                EXPECT_TRUE(q.leap == li && q.version == vn && q.mode == mode);
            }
    char s[16];
    p.stratum = 2;
    ot_ntp_ref_id_str(&p, s);
    EXPECT_STR_EQ(s, "192.168.0.1");
    p.stratum = 1;
    p.ref_id = 0x47505300; /* "GPS\0" */
    ot_ntp_ref_id_str(&p, s);
    EXPECT_STR_EQ(s, "GPS");
    p.stratum = 0;
    p.ref_id = 0x52415445;
    ot_ntp_kiss_code(&p, s);
    EXPECT_STR_EQ(s, "RATE");
}

static ot_status decode_with_tail(const uint8_t *tail, size_t n, ot_ntp_packet *q) {
    uint8_t b[OT_NTP_MAX_PACKET + 8] = {0};
    ot_ntp_packet p = full_packet();
    ot_ntp_packet_encode(&p, b);
    memcpy(b + OT_NTP_PACKET_SIZE, tail, n);
    return ot_ntp_packet_decode(b, OT_NTP_PACKET_SIZE + n, q);
}

static void test_packet_extensions_and_mac(void) {
    ot_ntp_packet q;
    uint8_t t[128] = {0};
    /* crypto-NAK */
    EXPECT_OK(decode_with_tail(t, 4, &q));
    EXPECT_INT_EQ(q.mac_len, 4);
    /* MD5 and SHA-1 MACs */
    t[0] = 0, t[1] = 0, t[2] = 0x01, t[3] = 0x02;
    EXPECT_OK(decode_with_tail(t, 20, &q));
    EXPECT_INT_EQ(q.mac_len, 20);
    EXPECT_U64_EQ(q.key_id, 0x102);
    EXPECT_OK(decode_with_tail(t, 24, &q));
    EXPECT_INT_EQ(q.mac_len, 24);
    /* one 28-byte extension field, no MAC */
    memset(t, 0, sizeof t);
    t[0] = 0x01, t[1] = 0x04, t[3] = 28;
    EXPECT_OK(decode_with_tail(t, 28, &q));
    EXPECT_INT_EQ(q.n_ext, 1);
    EXPECT_INT_EQ(q.ext_type[0], 0x0104);
    EXPECT_INT_EQ(q.mac_len, 0);
    /* 16-byte extension field followed by a 20-byte MAC */
    memset(t, 0, sizeof t);
    t[0] = 0x02, t[3] = 16;
    t[16 + 3] = 7;
    EXPECT_OK(decode_with_tail(t, 36, &q));
    EXPECT_INT_EQ(q.n_ext, 1);
    EXPECT_INT_EQ(q.mac_len, 20);
    EXPECT_U64_EQ(q.key_id, 7);
    /* bad layouts, each with a message naming the problem */
    uint8_t b[OT_NTP_MAX_PACKET + 8] = {0};
    b[0] = 0x24; /* v4 client */
    EXPECT_STATUS(ot_ntp_packet_decode(b, 47, &q), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "too short: 47 bytes");
    EXPECT_STATUS(ot_ntp_packet_decode(b, 0, &q), OT_ERR_CORRUPT_DATA);
    EXPECT_STATUS(ot_ntp_packet_decode(b, OT_NTP_MAX_PACKET + 4, &q), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "too long");
    EXPECT_STATUS(ot_ntp_packet_decode(b, 50, &q), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "multiple of 4");
    b[0] = 0x04; /* version 0 */
    EXPECT_STATUS(ot_ntp_packet_decode(b, 48, &q), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "version 0");
    b[0] = 0x2c; /* version 5 */
    EXPECT_STATUS(ot_ntp_packet_decode(b, 48, &q), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "version 5");
    memset(t, 0, sizeof t);
    EXPECT_STATUS(decode_with_tail(t, 8, &q), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "neither a MAC");
    t[3] = 1; /* 4-byte MAC with a key id is not a crypto-NAK */
    EXPECT_STATUS(decode_with_tail(t, 4, &q), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "crypto-NAK");
    memset(t, 0, sizeof t);
    t[3] = 12; /* extension length below 16 */
    EXPECT_STATUS(decode_with_tail(t, 28, &q), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "bad length 12");
    t[3] = 30; /* not a multiple of 4 */
    EXPECT_STATUS(decode_with_tail(t, 32, &q), OT_ERR_CORRUPT_DATA);
    t[3] = 64; /* runs past the datagram */
    EXPECT_STATUS(decode_with_tail(t, 32, &q), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "32 bytes remain");
    t[3] = 16; /* a last 16-byte field without a MAC leaves 16 unexplained bytes */
    t[19] = 16;
    EXPECT_STATUS(decode_with_tail(t, 32, &q), OT_ERR_CORRUPT_DATA);
}

/* ---- on-wire ---- */

static void test_onwire_vectors(void) {
    /* T1 = 0, T2 = 1.25, T3 = 1.5, T4 = 0.5 (s, relative): the server is 1.125 s ahead,
     * the round trip took 0.25 s */
    int64_t bases[] = {1700000000, ERA1_UNIX - 1, ERA1_UNIX};
    for (int k = 0; k < 3; k++) {
        int64_t b = bases[k];
        ot_ntp_sample s;
        ot_ntp_sample_compute(ts_s(b, 0), ts_s(b, 1.25), ts_s(b, 1.5), ts_s(b, 0.5), -20, -22, &s);
        EXPECT_NEAR(s.offset, 1.125, 0);
        EXPECT_NEAR(s.delay, 0.25, 0);
        EXPECT_NEAR(s.dispersion, ldexp(1, -20) + ldexp(1, -22) + 15e-6 * 0.5, 1e-15);
    }
    /* RFC 5905 figure 6 style: server behind us by 3 ms with a symmetric 10 ms path */
    ot_ntp_sample s;
    int64_t b = 1700000000;
    ot_ntp_sample_compute(ts_s(b, 0.100), ts_s(b, 0.107), ts_s(b, 0.108), ts_s(b, 0.121), -20, -20,
                          &s);
    EXPECT_NEAR(s.offset, -0.003, 1e-9);
    EXPECT_NEAR(s.delay, 0.020, 1e-9);
    /* a whole exchange across the 2036 rollover: we send in era 0, the server (1 s ahead)
     * stamps in era 1 */
    ot_ntp_exchange x;
    ot_ntp_exchange_init(&x);
    uint8_t req[48], rep[48];
    int64_t t1 = ERA1_UNIX * NS - NS / 2;
    ot_ntp_exchange_request(&x, t1, 0, 0, req);
    ot_ntp_server_options o = ot_ntp_server_options_default();
    size_t n;
    ASSERT_OK(ot_ntp_server_reply(&o, -20, req, 48, ot_ntp_ts_from_unix_ns(t1 + NS + 1000000),
                                  ot_ntp_ts_from_unix_ns(t1 + NS + 1500000), rep, &n, NULL));
    ot_ntp_packet p;
    ASSERT_OK(ot_ntp_exchange_receive(&x, rep, n, t1 + 2000000, -20, &p, &s, NULL));
    EXPECT_TRUE(p.receive_ts < p.origin_ts); /* wrapped */
    EXPECT_NEAR(s.offset, 1.00025, 1e-8);    /* ((1.001) + (0.9995)) / 2 */
    EXPECT_NEAR(s.delay, 0.0015, 1e-8);
    EXPECT_INT_EQ(ot_ntp_ts_to_unix_ns(p.transmit_ts, t1), t1 + NS + 1500000);
    /* a negative computed delay (clock steps) is clamped to the system precision */
    ot_ntp_sample_compute(ts_s(b, 0), ts_s(b, 0.0), ts_s(b, 0.5), ts_s(b, 0.1), -20, -10, &s);
    EXPECT_NEAR(s.delay, ldexp(1, -10), 0);
}

/* A server's reply to the request in `req` with the given fields. */
static size_t make_reply(const uint8_t *req, double server_ahead, uint8_t *out, int stratum,
                         int leap, int mode) {
    ot_ntp_packet q;
    ot_ntp_packet_decode(req, OT_NTP_PACKET_SIZE, &q);
    int64_t t1 = ot_ntp_ts_to_unix_ns(q.transmit_ts, 1700000000ll * NS);
    ot_ntp_packet r = {0};
    r.leap = (uint8_t)leap;
    r.version = 4;
    r.mode = (uint8_t)mode;
    r.stratum = (uint8_t)stratum;
    r.precision = -20;
    r.ref_id = 0x52415445; /* "RATE" when stratum 0 */
    r.origin_ts = q.transmit_ts;
    r.receive_ts = ot_ntp_ts_from_unix_ns(t1 + (int64_t)(server_ahead * 1e9) + 1000000);
    r.transmit_ts = ot_ntp_ts_from_unix_ns(t1 + (int64_t)(server_ahead * 1e9) + 1100000);
    ot_ntp_packet_encode(&r, out);
    return OT_NTP_PACKET_SIZE;
}

static void test_exchange_verdicts(void) {
    ot_ntp_exchange x;
    ot_ntp_exchange_init(&x);
    uint8_t req[48], rep[64];
    ot_ntp_packet pkt;
    ot_ntp_sample smp;
    ot_ntp_verdict v;
    int64_t t1 = 1700000000ll * NS + 123456789;
    ot_ntp_exchange_request(&x, t1, 0xa5, 6, req);
    ot_ntp_packet q;
    ASSERT_OK(ot_ntp_packet_decode(req, 48, &q));
    EXPECT_INT_EQ(q.mode, 3);
    EXPECT_INT_EQ(q.version, 4);
    EXPECT_INT_EQ(q.poll, 6);
    EXPECT_INT_EQ(q.transmit_ts & 0xff, 0xa5); /* randomized below the clock's precision */
    EXPECT_TRUE((q.transmit_ts >> 8) == (ot_ntp_ts_from_unix_ns(t1) >> 8));
    /* a spoofed reply (unknown origin) is dropped, then the real one is accepted */
    make_reply(req, 0.25, rep, 2, 0, 4);
    uint8_t spoof[48];
    memcpy(spoof, rep, 48);
    spoof[31] ^= 0x40;
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, spoof, 48, t1 + 2000000, -20, &pkt, &smp, &v),
                  OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(v, OT_NTP_BOGUS);
    EXPECT_STR_CONTAINS(ot_last_error(), "origin");
    /* a spoofed kiss-o'-death is bogus too: the origin check comes first */
    uint8_t kod[48];
    make_reply(req, 0, kod, 0, 0, 4);
    kod[31] ^= 1;
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, kod, 48, t1, -20, &pkt, &smp, &v),
                  OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(v, OT_NTP_BOGUS);
    ASSERT_OK(ot_ntp_exchange_receive(&x, rep, 48, t1 + 2000000, -20, &pkt, &smp, &v));
    EXPECT_INT_EQ(v, OT_NTP_ACCEPTED);
    /* T2 - T1 = 0.251, T3 - T4 = 0.2491 -> offset 0.25005, delay 0.0019 */
    EXPECT_NEAR(smp.offset, 0.25005, 1e-7); /* the random low bits of T1 on the wire: < 60 ns */
    EXPECT_NEAR(smp.delay, 0.0019, 1e-8);
    /* the same reply again: duplicate */
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, rep, 48, t1 + 3000000, -20, &pkt, &smp, &v),
                  OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(v, OT_NTP_DUPLICATE);
    /* an old reply with a fresh transmit stamp, after a new request: replay */
    uint8_t req2[48];
    ot_ntp_exchange_request(&x, t1 + NS, 0x11, 6, req2);
    uint8_t old[48];
    memcpy(old, rep, 48);
    old[47] ^= 0x10;
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, old, 48, t1 + NS, -20, &pkt, &smp, &v),
                  OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(v, OT_NTP_REPLAY);
    /* wrong mode, zero transmit, malformed */
    make_reply(req2, 0, rep, 2, 0, 3);
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, rep, 48, t1 + NS, -20, &pkt, &smp, &v),
                  OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(v, OT_NTP_BAD_MODE);
    make_reply(req2, 0, rep, 2, 0, 4);
    memset(rep + 40, 0, 8);
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, rep, 48, t1 + NS, -20, &pkt, &smp, &v),
                  OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(v, OT_NTP_ZERO_TRANSMIT);
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, rep, 40, t1 + NS, -20, &pkt, &smp, &v),
                  OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(v, OT_NTP_MALFORMED);
    /* timestamps out of order, zero receive */
    make_reply(req2, 0, rep, 2, 0, 4);
    memcpy(rep + 32, rep + 40, 8);
    rep[39] ^= 0x80; /* now T2 > T3 by a fraction */
    rep[39] |= 0x80;
    rep[47] &= 0x7f;
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, rep, 48, t1 + NS, -20, &pkt, &smp, &v),
                  OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(v, OT_NTP_BAD_TIMES);
    make_reply(req2, 0, rep, 2, 0, 4);
    memset(rep + 32, 0, 8);
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, rep, 48, t1 + NS, -20, &pkt, &smp, &v),
                  OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(v, OT_NTP_BAD_TIMES);
    /* a MAC we cannot check */
    make_reply(req2, 0, rep, 2, 0, 4);
    memset(rep + 48, 0, 4);
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, rep, 52, t1 + NS, -20, &pkt, &smp, &v),
                  OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(v, OT_NTP_AUTH);
    EXPECT_STR_CONTAINS(ot_last_error(), "crypto-NAK");
    /* an authentic kiss-o'-death closes the request and names its code */
    make_reply(req2, 0, rep, 0, 0, 4);
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, rep, 48, t1 + NS, -20, &pkt, &smp, &v),
                  OT_ERR_PEER_FAILED);
    EXPECT_INT_EQ(v, OT_NTP_KISS);
    EXPECT_STR_CONTAINS(ot_last_error(), "kiss-o'-death RATE");
    /* unsynchronized: LI = 3, or stratum 16 */
    uint8_t req3[48];
    ot_ntp_exchange_request(&x, t1 + 2 * NS, 0x22, 6, req3);
    make_reply(req3, 0, rep, 3, 3, 4);
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, rep, 48, t1 + 2 * NS, -20, &pkt, &smp, &v),
                  OT_ERR_PEER_FAILED);
    EXPECT_INT_EQ(v, OT_NTP_UNSYNCHRONIZED);
    ot_ntp_exchange_request(&x, t1 + 3 * NS, 0x33, 6, req3);
    make_reply(req3, 0, rep, 16, 0, 4);
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, rep, 48, t1 + 3 * NS, -20, &pkt, &smp, &v),
                  OT_ERR_PEER_FAILED);
    EXPECT_INT_EQ(v, OT_NTP_UNSYNCHRONIZED);
    /* with no request outstanding, even a well-formed reply is bogus */
    make_reply(req3, 0, rep, 2, 0, 4);
    rep[31] ^= 4;
    ot_ntp_exchange_receive(&x, rep, 48, t1, -20, &pkt, &smp, &v);
    EXPECT_INT_EQ(v, OT_NTP_BOGUS);
    EXPECT_U64_EQ(x.count[OT_NTP_ACCEPTED], 1);
    EXPECT_U64_EQ(x.count[OT_NTP_BOGUS], 3);
    EXPECT_U64_EQ(x.count[OT_NTP_DUPLICATE], 1);
    EXPECT_U64_EQ(x.count[OT_NTP_REPLAY], 1);
    EXPECT_U64_EQ(x.count[OT_NTP_BAD_MODE], 1);
    EXPECT_U64_EQ(x.count[OT_NTP_ZERO_TRANSMIT], 1);
    EXPECT_U64_EQ(x.count[OT_NTP_MALFORMED], 1);
    EXPECT_U64_EQ(x.count[OT_NTP_BAD_TIMES], 2);
    EXPECT_U64_EQ(x.count[OT_NTP_AUTH], 1);
    EXPECT_U64_EQ(x.count[OT_NTP_KISS], 1);
    EXPECT_U64_EQ(x.count[OT_NTP_UNSYNCHRONIZED], 2);
    EXPECT_STR_EQ(ot_ntp_verdict_name(OT_NTP_REPLAY), "replay");
    EXPECT_STR_EQ(ot_ntp_verdict_name((ot_ntp_verdict)99), "unknown");
}

/* ---- clock filter ---- */

static void test_filter(void) {
    ot_ntp_filter f;
    ot_ntp_filter_init(&f);
    EXPECT_NEAR(ot_ntp_filter_disp(&f, 0), OT_NTP_MAXDISP, 0);
    /* (offset, delay) samples one second apart; the minimum delay is the third */
    double off[] = {0.010, 0.012, 0.002, 0.015};
    double del[] = {0.050, 0.040, 0.020, 0.060};
    bool upd[4];
    for (int i = 0; i < 4; i++) upd[i] = ot_ntp_filter_add(&f, off[i], del[i], 0.001, i, -20);
    EXPECT_TRUE(upd[0] && upd[1] && upd[2] && !upd[3]); /* the 4th is not better: no reuse */
    EXPECT_NEAR(f.offset, 0.002, 0);
    EXPECT_NEAR(f.delay, 0.020, 0);
    EXPECT_NEAR(f.t, 2, 0);
    EXPECT_INT_EQ(f.n, 4);
    /* jitter: RMS of offsets against the min-delay one, over n-1 */
    double j = sqrt((0.010 * 0.010 + 0.008 * 0.008 + 0.013 * 0.013) / 3);
    EXPECT_NEAR(f.jitter, j, 1e-15);
    /* dispersion: stages sorted by delay (0.020, 0.040, 0.050, 0.060, empty x4), each aged by
     * PHI per second since it was added: ages 2, 2, 3, 0 s */
    double e[8] = {0.001 + 15e-6 * 1, 0.001 + 15e-6 * 2, 0.001 + 15e-6 * 3, 0.001, 16, 16, 16, 16};
    double want = 0;
    for (int i = 0; i < 8; i++) want += e[i] / ldexp(1, i + 1);
    EXPECT_NEAR(f.disp, want, 1e-12);
    EXPECT_NEAR(ot_ntp_filter_disp(&f, 5), want + 15e-6 * 2, 1e-12);
    /* eight more samples push the old minimum out: the peer moves on to a newer sample */
    for (int i = 0; i < 8; i++)
        ot_ntp_filter_add(&f, 0.1 + i * 0.001, 0.030 + i * 0.001, 0.001, 10 + i, -20);
    EXPECT_INT_EQ(f.n, 8);
    EXPECT_NEAR(f.offset, 0.1, 0);
    EXPECT_NEAR(f.delay, 0.030, 0);
    /* identical samples: jitter floors at the precision */
    ot_ntp_filter_init(&f);
    ot_ntp_filter_add(&f, 0.5, 0.01, 0, 0, -10);
    ot_ntp_filter_add(&f, 0.5, 0.01, 0, 1, -10);
    EXPECT_NEAR(f.jitter, ldexp(1, -10), 0);
}

/* ---- selection, cluster, combine ---- */

static ot_ntp_candidate cand(double offset, double lambda_ish, int stratum) {
    /* root distance = max(MINDISP, rd + d)/2 + rdisp + disp + jitter = lambda_ish exactly */
    ot_ntp_candidate c = {0};
    c.offset = offset;
    c.delay = 0.010;
    c.root_delay = 0;
    c.jitter = 0.0005;
    c.disp = 0.0005;
    c.root_disp = lambda_ish - 0.005 - 0.0005 - 0.0005;
    c.t = 100;
    c.stratum = stratum;
    c.reachable = true;
    return c;
}

static void test_select_falsetickers(void) {
    ot_ntp_candidate c[5] = {cand(0.010, 0.02, 2), cand(0.012, 0.02, 2), cand(0.008, 0.03, 3),
                             cand(0.500, 0.02, 2), cand(-0.300, 0.02, 1)};
    EXPECT_NEAR(ot_ntp_root_distance(&c[0], 100), 0.02, 1e-15);
    EXPECT_NEAR(ot_ntp_root_distance(&c[0], 110), 0.02 + 15e-5, 1e-15);
    ot_ntp_peer_class cls[5];
    double low, high;
    ASSERT_OK(ot_ntp_select(c, 5, 100, cls, &low, &high));
    EXPECT_INT_EQ(cls[0], OT_NTP_SURVIVOR);
    EXPECT_INT_EQ(cls[1], OT_NTP_SURVIVOR);
    EXPECT_INT_EQ(cls[2], OT_NTP_SURVIVOR);
    EXPECT_INT_EQ(cls[3], OT_NTP_FALSETICKER);
    EXPECT_INT_EQ(cls[4], OT_NTP_FALSETICKER);
    /* the intersection of the three truechimers' intervals */
    EXPECT_NEAR(low, 0.012 - 0.02, 1e-12);
    EXPECT_NEAR(high, 0.010 + 0.02, 1e-12);
    ot_ntp_system sys;
    ASSERT_OK(ot_ntp_mitigate(c, 5, 100, cls, &sys));
    EXPECT_INT_EQ(sys.n_survivors, 3);
    EXPECT_INT_EQ(sys.n_truechimers, 3);
    EXPECT_INT_EQ(sys.sys_peer, 0); /* stratum 2, λ 0.02; ties broken by index */
    EXPECT_INT_EQ(cls[0], OT_NTP_SYS_PEER);
    /* combine: weights 1/λ = 50, 50, 33.3 */
    double want = (0.010 * 50 + 0.012 * 50 + 0.008 / 0.03) / (100 + 1 / 0.03);
    EXPECT_NEAR(sys.offset, want, 1e-15);
    double w = (0.002 * 0.002 * 50 + 0.002 * 0.002 / 0.03) / (100 + 1 / 0.03);
    EXPECT_NEAR(sys.jitter, sqrt(w + 0.0005 * 0.0005), 1e-15);
    EXPECT_STR_EQ(ot_ntp_peer_class_name(OT_NTP_FALSETICKER), "falseticker");
}

/* Peer variables that cannot occur (negative dispersion or delay, a non-finite time) make a
 * candidate unfit instead of poisoning the combined offset (libFuzzer finding: a negative
 * root dispersion gave a negative root distance, hence a negative weight and a NaN offset). */
static void test_mitigate_rejects_impossible(void) {
    ot_ntp_candidate c[3] = {cand(0.010, 0.02, 2), cand(0.012, 0.02, 2), cand(0.011, 0.02, 2)};
    c[2].root_delay = 4e304;
    c[2].root_disp = -4e304;
    ot_ntp_peer_class cls[3];
    ot_ntp_system sys;
    ASSERT_OK(ot_ntp_mitigate(c, 3, 100, cls, &sys));
    EXPECT_INT_EQ(cls[2], OT_NTP_UNFIT);
    EXPECT_TRUE(sys.offset >= 0.010 && sys.offset <= 0.012);
    c[2] = cand(0.011, 0.02, 2);
    c[2].t = NAN;
    ASSERT_OK(ot_ntp_mitigate(c, 3, 100, cls, &sys));
    EXPECT_INT_EQ(cls[2], OT_NTP_UNFIT);
    c[2] = cand(0.011, 0.02, 2);
    c[2].jitter = -1;
    ASSERT_OK(ot_ntp_mitigate(c, 3, 100, cls, &sys));
    EXPECT_INT_EQ(cls[2], OT_NTP_UNFIT);
    EXPECT_TRUE(isfinite(sys.offset));
}

static void test_select_no_majority(void) {
    ot_ntp_peer_class cls[4];
    double low, high;
    ot_ntp_candidate two[2] = {cand(0.0, 0.01, 2), cand(0.5, 0.01, 2)};
    EXPECT_STATUS(ot_ntp_select(two, 2, 100, cls, &low, &high), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STR_CONTAINS(ot_last_error(), "no majority");
    EXPECT_TRUE(cls[0] == OT_NTP_FALSETICKER && cls[1] == OT_NTP_FALSETICKER);
    ot_ntp_candidate four[4] = {cand(0.0, 0.01, 2), cand(0.001, 0.01, 2), cand(0.5, 0.01, 2),
                                cand(0.501, 0.01, 2)};
    EXPECT_STATUS(ot_ntp_select(four, 4, 100, cls, &low, &high), OT_ERR_FAILED_PRECONDITION);
    /* one server alone is its own majority */
    EXPECT_OK(ot_ntp_select(two, 1, 100, cls, &low, &high));
    EXPECT_INT_EQ(cls[0], OT_NTP_SURVIVOR);
    /* unfit ones do not vote */
    ot_ntp_candidate u[4] = {cand(0, 0.01, 2), cand(0, 0.01, 16), cand(0, 0.01, 2),
                             cand(0, 2.0, 2)};
    u[2].leap = OT_NTP_LEAP_NOSYNC;
    ot_ntp_candidate u4 = cand(0, 0.01, 2);
    u4.reachable = false;
    ot_ntp_candidate all[5] = {u[0], u[1], u[2], u[3], u4};
    ot_ntp_peer_class c5[5];
    EXPECT_OK(ot_ntp_select(all, 5, 100, c5, &low, &high));
    EXPECT_INT_EQ(c5[0], OT_NTP_SURVIVOR);
    for (int i = 1; i < 5; i++) EXPECT_INT_EQ(c5[i], OT_NTP_UNFIT);
    ot_ntp_candidate none[1] = {u4};
    EXPECT_STATUS(ot_ntp_select(none, 1, 100, c5, &low, &high), OT_ERR_FAILED_PRECONDITION);
    EXPECT_STATUS(ot_ntp_select(none, OT_NTP_MAX_PEERS + 1, 100, c5, &low, &high),
                  OT_ERR_INVALID_ARGUMENT);
}

static void test_cluster_prunes_outlier(void) {
    /* five truechimers (wide intervals) with tight jitter; one sits far from the others */
    ot_ntp_candidate c[5] = {cand(0.000, 0.1, 3), cand(0.001, 0.1, 2), cand(0.002, 0.1, 3),
                             cand(0.0015, 0.1, 3), cand(0.060, 0.1, 3)};
    ot_ntp_peer_class cls[5];
    ot_ntp_system sys;
    ASSERT_OK(ot_ntp_mitigate(c, 5, 100, cls, &sys));
    EXPECT_INT_EQ(cls[4], OT_NTP_OUTLIER);
    EXPECT_INT_EQ(cls[0], OT_NTP_OUTLIER);  /* next-largest spread once 0.060 is gone */
    EXPECT_INT_EQ(cls[1], OT_NTP_SYS_PEER); /* lowest stratum */
    EXPECT_INT_EQ(cls[2], OT_NTP_SURVIVOR);
    EXPECT_INT_EQ(cls[3], OT_NTP_SURVIVOR);
    EXPECT_INT_EQ(sys.n_survivors, 3);
    EXPECT_NEAR(sys.offset, (0.001 + 0.002 + 0.0015) / 3, 1e-15);
    /* with jitter larger than the spread nothing is pruned */
    for (int i = 0; i < 5; i++) c[i].jitter = 0.1;
    ASSERT_OK(ot_ntp_mitigate(c, 5, 100, cls, &sys));
    EXPECT_INT_EQ(sys.n_survivors, 5);
}

static void test_poll_adapts(void) {
    ot_ntp_poll p;
    ot_ntp_poll_init(&p, 6, 4); /* swapped on purpose */
    EXPECT_INT_EQ(p.minpoll, 4);
    EXPECT_INT_EQ(p.maxpoll, 6);
    EXPECT_INT_EQ(p.poll, 4);
    int steps = 0;
    while (p.poll == 4 && steps < 100) ot_ntp_poll_update(&p, 0.001, 0.001), steps++;
    EXPECT_INT_EQ(steps, 8); /* 8 x 4 = 32 > 30 */
    steps = 0;
    while (p.poll == 5 && steps < 100) ot_ntp_poll_update(&p, -0.001, 0.001), steps++;
    EXPECT_INT_EQ(steps, 7); /* 7 x 5 = 35 > 30 */
    for (int i = 0; i < 50; i++) ot_ntp_poll_update(&p, 0, 0.001);
    EXPECT_INT_EQ(p.poll, 6); /* capped at maxpoll */
    steps = 0;
    while (p.poll == 6 && steps < 100) ot_ntp_poll_update(&p, 0.1, 0.001), steps++;
    EXPECT_INT_EQ(steps, 6); /* from the +30 cap, -12 each: -42 < -30 */
    EXPECT_INT_EQ(ot_ntp_poll_backoff(&p), 6);
    EXPECT_INT_EQ(ot_ntp_poll_backoff(&p), 6);
    for (int i = 0; i < 50; i++) ot_ntp_poll_update(&p, 1, 0.001);
    EXPECT_INT_EQ(p.poll, 4); /* floored at minpoll */
}

static void test_split_host_port(void) {
    char h[64];
    int port;
    EXPECT_OK(ot_ntp_split_host_port("[::1]:123", h, sizeof h, &port));
    EXPECT_STR_EQ(h, "::1");
    EXPECT_INT_EQ(port, 123);
    EXPECT_OK(ot_ntp_split_host_port("127.0.0.1:8123", h, sizeof h, &port));
    EXPECT_STR_EQ(h, "127.0.0.1");
    EXPECT_INT_EQ(port, 8123);
    EXPECT_OK(ot_ntp_split_host_port("time.example", h, sizeof h, &port));
    EXPECT_INT_EQ(port, 123);
    EXPECT_OK(ot_ntp_split_host_port("fe80::1", h, sizeof h, &port));
    EXPECT_STR_EQ(h, "fe80::1");
    EXPECT_OK(ot_ntp_split_host_port("[fe80::2]", h, sizeof h, &port));
    EXPECT_STR_EQ(h, "fe80::2");
    const char *bad[] = {"",        "[::1",  "[::1]x", ":123", "h:0",
                         "h:65536", "h:12a", "h:",     "[]:1", "h:-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        EXPECT_STATUS(ot_ntp_split_host_port(bad[i], h, sizeof h, &port), OT_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(ot_ntp_split_host_port("averyveryverylonghostname:1", h, 8, &port),
                  OT_ERR_INVALID_ARGUMENT);
}

/* ---- server reply (pure) ---- */

static void test_server_reply(void) {
    ot_ntp_server_options o = ot_ntp_server_options_default();
    o.stratum = 3;
    ot_ntp_exchange x;
    ot_ntp_exchange_init(&x);
    uint8_t req[48], rep[52];
    int64_t t1 = 1700000000ll * NS;
    ot_ntp_exchange_request(&x, t1, 7, 5, req);
    size_t n;
    ot_ntp_server_stats st = {0};
    ot_ntp_ts t2 = ot_ntp_ts_from_unix_ns(t1 + 1000), t3 = ot_ntp_ts_from_unix_ns(t1 + 3000);
    ASSERT_OK(ot_ntp_server_reply(&o, -24, req, 48, t2, t3, rep, &n, &st));
    EXPECT_INT_EQ(n, 48);
    ot_ntp_packet r;
    ASSERT_OK(ot_ntp_packet_decode(rep, n, &r));
    EXPECT_INT_EQ(r.mode, 4);
    EXPECT_INT_EQ(r.version, 4);
    EXPECT_INT_EQ(r.stratum, 3);
    EXPECT_INT_EQ(r.poll, 5);
    EXPECT_INT_EQ(r.precision, -24);
    EXPECT_U64_EQ(r.origin_ts, x.xmt_wire);
    EXPECT_U64_EQ(r.receive_ts, t2);
    EXPECT_U64_EQ(r.transmit_ts, t3);
    EXPECT_TRUE(r.ref_ts <= t2 && r.ref_ts != 0);
    ot_ntp_sample s;
    ASSERT_OK(ot_ntp_exchange_receive(&x, rep, n, t1 + 4000, -24, &r, &s, NULL));
    EXPECT_NEAR(s.offset, 0, 1e-9);
    EXPECT_NEAR(s.delay, 2000e-9, 1e-9);
    /* v3 requests get v3 replies */
    req[0] = (uint8_t)((req[0] & ~0x38) | (3 << 3));
    ASSERT_OK(ot_ntp_server_reply(&o, -24, req, 48, t2, t3, rep, &n, &st));
    EXPECT_INT_EQ((rep[0] >> 3) & 7, 3);
    /* not a client request; malformed; authenticated -> crypto-NAK */
    req[0] = (uint8_t)((req[0] & ~7) | 1);
    EXPECT_STATUS(ot_ntp_server_reply(&o, -24, req, 48, t2, t3, rep, &n, &st), OT_ERR_CORRUPT_DATA);
    EXPECT_STR_CONTAINS(ot_last_error(), "mode 1");
    EXPECT_STATUS(ot_ntp_server_reply(&o, -24, req, 20, t2, t3, rep, &n, &st), OT_ERR_CORRUPT_DATA);
    uint8_t areq[68] = {0};
    memcpy(areq, req, 48);
    areq[0] = 0x23;
    areq[51] = 9; /* key id 9 + 16-byte digest */
    ASSERT_OK(ot_ntp_server_reply(&o, -24, areq, 68, t2, t3, rep, &n, &st));
    EXPECT_INT_EQ(n, 52);
    EXPECT_TRUE(rep[48] == 0 && rep[49] == 0 && rep[50] == 0 && rep[51] == 0);
    EXPECT_U64_EQ(st.malformed, 1);
    EXPECT_U64_EQ(st.bad_mode, 1);
    EXPECT_U64_EQ(st.crypto_nak, 1);
}

/* ---- over UDP ---- */

static void *serve_thread(void *arg) {
    ot_ntp_server_run(arg);
    return NULL;
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

/* A server bound to binds[b] (b 1: ::1, the IPv6 case) answering our client, and ignoring
 * hostile datagrams. */
static const char *const udp_binds[] = {"127.0.0.1", "::1", NULL};

static void udp_serve_and_query(int b) {
    const char *const *binds = udp_binds;
    ot_ntp_server_options o = ot_ntp_server_options_default();
    o.bind_addr = binds[b];
    o.port = 0;
    ot_ntp_server *srv;
    ASSERT_OK(ot_ntp_server_create(&o, &srv));
    int port = ot_ntp_server_port(srv);
    EXPECT_TRUE(port > 0);
    pthread_t th;
    pthread_create(&th, NULL, serve_thread, srv);
    char addr[64];
    snprintf(addr, sizeof addr, b == 1 ? "[::1]:%d" : "127.0.0.1:%d", port);
    ot_ntp_query_options q = ot_ntp_query_options_default();
    q.samples = 3;
    q.interval_ms = 10;
    ot_ntp_query_result r;
    EXPECT_OK(ot_ntp_query(addr, &q, &r));
    EXPECT_INT_EQ(r.n_samples, 3);
    EXPECT_TRUE(fabs(r.offset) < 0.001); /* same clock on both ends */
    EXPECT_TRUE(r.delay > 0 && r.delay < 0.01);
    EXPECT_INT_EQ(r.last_reply.stratum, 10);
    EXPECT_U64_EQ(r.count[OT_NTP_ACCEPTED], 3);
    /* hostile datagrams at the server: short, symmetric-active mode, control mode */
    int fd = socket(b == 1 ? AF_INET6 : AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_storage to = {0};
    socklen_t tl;
    if (b == 1) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&to;
        a6->sin6_family = AF_INET6;
        a6->sin6_addr = in6addr_loopback;
        a6->sin6_port = htons((uint16_t)port);
        tl = sizeof *a6;
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&to;
        a4->sin_family = AF_INET;
        a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a4->sin_port = htons((uint16_t)port);
        tl = sizeof *a4;
    }
    uint8_t junk[48] = {0x21}; /* v4 symmetric active */
    sendto(fd, "short", 5, 0, (struct sockaddr *)&to, tl);
    sendto(fd, junk, 48, 0, (struct sockaddr *)&to, tl);
    junk[0] = 0x26; /* v4 control */
    sendto(fd, junk, 48, 0, (struct sockaddr *)&to, tl);
    struct pollfd pf = {fd, POLLIN, 0};
    EXPECT_INT_EQ(poll(&pf, 1, 200), 0); /* none of them is answered */
    close(fd);
    ot_ntp_server_stop(srv);
    pthread_join(th, NULL);
    ot_ntp_server_stats st = ot_ntp_server_get_stats(srv);
    EXPECT_U64_EQ(st.answered, 3);
    EXPECT_U64_EQ(st.received, 6);
    EXPECT_U64_EQ(st.malformed, 1);
    EXPECT_U64_EQ(st.bad_mode, 2);
    ot_ntp_server_free(srv);
}

static void test_udp_client_server_ipv6(void) {
    if (!have_ipv6_loopback()) OT_SKIP("no IPv6 loopback (::1) on this machine");
    udp_serve_and_query(1);
}

static void test_udp_client_server(void) {
    udp_serve_and_query(0); /* 127.0.0.1 */
    udp_serve_and_query(2); /* the unspecified address */
    /* nobody listening: bounded by the timeout, with a clear message */
    ot_ntp_server_options o = ot_ntp_server_options_default();
    o.bind_addr = "127.0.0.1";
    o.port = 0;
    ot_ntp_server *srv;
    ASSERT_OK(ot_ntp_server_create(&o, &srv));
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ot_ntp_server_port(srv));
    ot_ntp_query_options q = ot_ntp_query_options_default();
    q.samples = 2;
    q.interval_ms = 0;
    q.timeout_ms = 150;
    ot_ntp_query_result r;
    uint64_t t0 = ot_now_ns();
    EXPECT_STATUS(ot_ntp_query(addr, &q, &r), OT_ERR_TIMEOUT); /* socket bound, never served */
    double took = (double)(ot_now_ns() - t0) / 1e9;
    EXPECT_TRUE(took >= 0.29 && took < 2.0);
    EXPECT_INT_EQ(r.n_timeouts, 2);
    ot_ntp_server_free(srv);
    /* a closed port: the ICMP "port unreachable" ends each exchange at once */
    int cfd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in ca = {0};
    ca.sin_family = AF_INET;
    ca.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t cl = sizeof ca;
    bind(cfd, (struct sockaddr *)&ca, sizeof ca);
    getsockname(cfd, (struct sockaddr *)&ca, &cl);
    close(cfd);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(ca.sin_port));
    q.timeout_ms = 2000;
    t0 = ot_now_ns();
    EXPECT_STATUS(ot_ntp_query(addr, &q, &r), OT_ERR_TIMEOUT);
    EXPECT_STR_CONTAINS(ot_last_error(), "port unreachable");
    EXPECT_TRUE((double)(ot_now_ns() - t0) / 1e9 < 1.0);
    /* (name-resolution failures are covered without DNS by binding to "not-an-address" below) */
    q.samples = 0;
    EXPECT_STATUS(ot_ntp_query("127.0.0.1:1", &q, &r), OT_ERR_INVALID_ARGUMENT);
    /* creation errors */
    o.port = 70000;
    EXPECT_STATUS(ot_ntp_server_create(&o, &srv), OT_ERR_INVALID_ARGUMENT);
    o.port = 0;
    o.bind_addr = "not-an-address";
    EXPECT_STATUS(ot_ntp_server_create(&o, &srv), OT_ERR_NOT_FOUND);
    o.bind_addr = "127.0.0.1";
    o.stratum = 0;
    EXPECT_STATUS(ot_ntp_server_create(&o, &srv), OT_ERR_INVALID_ARGUMENT);
    /* allocation failures leave nothing behind */
    o.stratum = 10;
    int64_t live = ot_alloc_live();
    ot_alloc_fail_after(1);
    EXPECT_STATUS(ot_ntp_server_create(&o, &srv), OT_ERR_OUT_OF_MEMORY);
    ot_alloc_fail_after(0);
    EXPECT_INT_EQ(ot_alloc_live(), live);
}

/* A hostile peer on a raw UDP socket: for every request it sends garbage, a reply with a wrong
 * origin, a client-mode packet, then the true reply and a second copy of it. */
typedef struct spoof_peer {
    int fd;
    int port;
    int mode; /* 0: hostile but eventually honest; 1: DENY kiss; 2: silent; 3: falseticker;
                 4: root delay and dispersion 65,535 s; 5: reference time after transmit time;
                 6: root delay 2 s and dispersion 0.6 s (a header in range, too distant) */
    double ahead;
    atomic_int stop;
} spoof_peer;

static void *spoof_thread(void *arg) {
    spoof_peer *p = arg;
    ot_ntp_server_options o = ot_ntp_server_options_default();
    while (!atomic_load(&p->stop)) {
        struct pollfd pf = {p->fd, POLLIN, 0};
        if (poll(&pf, 1, 20) <= 0) continue;
        uint8_t req[512], rep[64];
        struct sockaddr_storage from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(p->fd, req, sizeof req, 0, (struct sockaddr *)&from, &fl);
        if (n < 48 || p->mode == 2) continue;
        int64_t now = (int64_t)ot_wall_ns() + (int64_t)(p->ahead * 1e9);
        size_t rl;
        ot_ntp_server_reply(&o, -20, req, (size_t)n, ot_ntp_ts_from_unix_ns(now),
                            ot_ntp_ts_from_unix_ns(now + 1000), rep, &rl, NULL);
        if (p->mode == 4) {
            memcpy(rep + 4, "\xff\xff\0\0\xff\xff\0\0", 8);
        } else if (p->mode == 5) {
            memcpy(rep + 16, rep + 40, 8);
            /* seconds + 10, with the carry through the big-endian field (adding to the low
             * byte alone wrapped one time in 26 to a reference time before the transmit time) */
            uint32_t sec = (uint32_t)rep[16] << 24 | (uint32_t)rep[17] << 16 |
                           (uint32_t)rep[18] << 8 | rep[19];
            sec += 10; /* within the same era unless the transmit time is its last 10 s */
            for (int b = 0; b < 4; b++) rep[16 + b] = (uint8_t)(sec >> (24 - 8 * b));
        } else if (p->mode == 6) {
            memcpy(rep + 4, "\0\x02\0\0\0\0\x99\x99", 8);
        }
        if (p->mode == 1) {
            rep[1] = 0; /* stratum 0 */
            memcpy(rep + 12, "DENY", 4);
            sendto(p->fd, rep, 48, 0, (struct sockaddr *)&from, fl);
            continue;
        }
        if (p->mode == 0) {
            sendto(p->fd, "garbage", 7, 0, (struct sockaddr *)&from, fl);
            uint8_t bad[48];
            memcpy(bad, rep, 48);
            bad[30] ^= 0x55; /* origin */
            sendto(p->fd, bad, 48, 0, (struct sockaddr *)&from, fl);
            memcpy(bad, rep, 48);
            bad[0] = (uint8_t)((bad[0] & ~7) | 3);
            sendto(p->fd, bad, 48, 0, (struct sockaddr *)&from, fl);
        }
        sendto(p->fd, rep, rl, 0, (struct sockaddr *)&from, fl);
        if (p->mode == 0) sendto(p->fd, rep, rl, 0, (struct sockaddr *)&from, fl);
    }
    return NULL;
}

static bool spoof_start(spoof_peer *p, int mode, double ahead, pthread_t *th) {
    memset(p, 0, sizeof *p);
    p->mode = mode;
    p->ahead = ahead;
    p->fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(p->fd, (struct sockaddr *)&a, sizeof a) != 0) return false;
    socklen_t l = sizeof a;
    getsockname(p->fd, (struct sockaddr *)&a, &l);
    p->port = ntohs(a.sin_port);
    return pthread_create(th, NULL, spoof_thread, p) == 0;
}

static void spoof_stop(spoof_peer *p, pthread_t th) {
    atomic_store(&p->stop, 1);
    pthread_join(th, NULL);
    close(p->fd);
}

static void test_hostile_peers(void) {
    spoof_peer p;
    pthread_t th;
    ASSERT_TRUE(spoof_start(&p, 0, 0, &th));
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", p.port);
    ot_ntp_query_options q = ot_ntp_query_options_default();
    q.samples = 3;
    q.interval_ms = 50;
    q.timeout_ms = 500;
    ot_ntp_query_result r;
    EXPECT_OK(ot_ntp_query(addr, &q, &r));
    EXPECT_INT_EQ(r.n_samples, 3);
    EXPECT_U64_EQ(r.count[OT_NTP_ACCEPTED], 3);
    EXPECT_U64_EQ(r.count[OT_NTP_MALFORMED], 3);
    EXPECT_U64_EQ(r.count[OT_NTP_BOGUS], 3);
    EXPECT_U64_EQ(r.count[OT_NTP_BAD_MODE], 3);
    EXPECT_TRUE(r.count[OT_NTP_DUPLICATE] >= 2); /* the last copy may arrive after we left */
    EXPECT_TRUE(fabs(r.offset) < 0.001);
    spoof_stop(&p, th);

    ASSERT_TRUE(spoof_start(&p, 1, 0, &th));
    snprintf(addr, sizeof addr, "127.0.0.1:%d", p.port);
    EXPECT_STATUS(ot_ntp_query(addr, &q, &r), OT_ERR_PEER_FAILED);
    EXPECT_STR_CONTAINS(ot_last_error(), "kiss-o'-death DENY");
    EXPECT_U64_EQ(r.count[OT_NTP_KISS], 1);
    spoof_stop(&p, th);

    ASSERT_TRUE(spoof_start(&p, 2, 0, &th));
    snprintf(addr, sizeof addr, "127.0.0.1:%d", p.port);
    q.samples = 2;
    q.timeout_ms = 100;
    q.interval_ms = 0;
    EXPECT_STATUS(ot_ntp_query(addr, &q, &r), OT_ERR_TIMEOUT);
    EXPECT_STR_CONTAINS(ot_last_error(), "no valid reply");
    spoof_stop(&p, th);
}

/* RFC 5905's header checks (A.5.1.1) on every reply, and its distance check (fit(), A.5.2) on the
 * query's result, as the selection applies it in sync: a server reporting a root delay and
 * dispersion of 65,535 s, or a reference time after its transmit time, is refused per packet; a
 * header in range whose root distance exceeds MAXDIST fails the query. */
static void test_query_header_and_distance(void) {
    ot_ntp_query_options q = ot_ntp_query_options_default();
    q.samples = 2;
    q.interval_ms = 0;
    q.timeout_ms = 300;
    ot_ntp_query_result r;
    spoof_peer p;
    pthread_t th;
    char addr[64];
    ASSERT_TRUE(spoof_start(&p, 4, 0, &th));
    snprintf(addr, sizeof addr, "127.0.0.1:%d", p.port);
    EXPECT_STATUS(ot_ntp_query(addr, &q, &r), OT_ERR_PEER_FAILED);
    EXPECT_STR_CONTAINS(ot_last_error(), "sent only replies with invalid header values (2");
    EXPECT_U64_EQ(r.count[OT_NTP_BAD_HEADER], 2);
    EXPECT_INT_EQ(r.n_samples, 0);
    spoof_stop(&p, th);
    ASSERT_TRUE(spoof_start(&p, 5, 0, &th));
    snprintf(addr, sizeof addr, "127.0.0.1:%d", p.port);
    EXPECT_STATUS(ot_ntp_query(addr, &q, &r), OT_ERR_PEER_FAILED);
    EXPECT_U64_EQ(r.count[OT_NTP_BAD_HEADER], 2);
    spoof_stop(&p, th);
    ASSERT_TRUE(spoof_start(&p, 6, 0, &th));
    snprintf(addr, sizeof addr, "127.0.0.1:%d", p.port);
    EXPECT_STATUS(ot_ntp_query(addr, &q, &r), OT_ERR_PEER_FAILED);
    EXPECT_STR_CONTAINS(ot_last_error(), "is not fit to synchronize to: root distance above "
                                         "MAXDIST (1.5 s) (root distance 1.6");
    EXPECT_INT_EQ(r.n_samples, 2); /* the replies were valid; the result is too distant */
    EXPECT_TRUE(r.root_distance > 1.5 && r.root_distance < 1.7);
    /* the sync object leaves the distance to its own selection */
    q.skip_distance_check = true;
    EXPECT_OK(ot_ntp_query(addr, &q, &r));
    spoof_stop(&p, th);
    /* an honest server: fit, with its root distance reported */
    ASSERT_TRUE(spoof_start(&p, 0, 0, &th));
    snprintf(addr, sizeof addr, "127.0.0.1:%d", p.port);
    q.skip_distance_check = false;
    EXPECT_OK(ot_ntp_query(addr, &q, &r));
    EXPECT_TRUE(r.root_distance > 0 && r.root_distance < 0.1);
    spoof_stop(&p, th);
}

/* The header checks on single datagrams, with their boundaries. */
static void test_exchange_header_checks(void) {
    ot_ntp_exchange x;
    ot_ntp_exchange_init(&x);
    uint8_t req[48], rep[48];
    ot_ntp_packet pkt;
    ot_ntp_sample smp;
    ot_ntp_verdict v;
    int64_t t1 = 1700000000ll * NS;
    /* root delay/2 + dispersion just under 16 s: accepted (the distance check is the caller's) */
    ot_ntp_exchange_request(&x, t1, 1, 6, req);
    make_reply(req, 0, rep, 2, 0, 4);
    memcpy(rep + 4, "\0\x1e\0\0\0\0\xff\xff", 8); /* 30 s and 0.99998 s */
    EXPECT_OK(ot_ntp_exchange_receive(&x, rep, 48, t1 + 2000000, -20, &pkt, &smp, &v));
    /* 32 s and 0: exactly MAXDISP */
    ot_ntp_exchange_request(&x, t1 + NS, 2, 6, req);
    make_reply(req, 0, rep, 2, 0, 4);
    memcpy(rep + 4, "\0\x20\0\0\0\0\0\0", 8);
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, rep, 48, t1 + NS + 2000000, -20, &pkt, &smp, &v),
                  OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(v, OT_NTP_BAD_HEADER);
    EXPECT_STR_CONTAINS(ot_last_error(), "root delay/2 + root dispersion is 16.0 s");
    /* reference time one second after transmit; equal is fine; zero (never set) is fine */
    ot_ntp_exchange_request(&x, t1 + 2 * NS, 3, 6, req);
    make_reply(req, 0, rep, 2, 0, 4);
    memcpy(rep + 16, rep + 40, 8);
    rep[19]++;
    EXPECT_STATUS(ot_ntp_exchange_receive(&x, rep, 48, t1 + 2 * NS + 2000000, -20, &pkt, &smp, &v),
                  OT_ERR_CORRUPT_DATA);
    EXPECT_INT_EQ(v, OT_NTP_BAD_HEADER);
    EXPECT_STR_CONTAINS(ot_last_error(), "reference time is 1.000000 s after the transmit time");
    ot_ntp_exchange_request(&x, t1 + 3 * NS, 4, 6, req);
    make_reply(req, 0, rep, 2, 0, 4);
    memcpy(rep + 16, rep + 40, 8);
    EXPECT_OK(ot_ntp_exchange_receive(&x, rep, 48, t1 + 3 * NS + 2000000, -20, &pkt, &smp, &v));
    EXPECT_U64_EQ(x.count[OT_NTP_BAD_HEADER], 2);
    EXPECT_U64_EQ(x.count[OT_NTP_ACCEPTED], 2);
    EXPECT_STR_EQ(ot_ntp_verdict_name(OT_NTP_BAD_HEADER), "bad_header");
    /* the fit test names what failed */
    ot_ntp_candidate c = {.delay = 0.001,
                          .disp = 0.001,
                          .root_delay = 2,
                          .root_disp = 0.6,
                          .stratum = 2,
                          .reachable = true};
    const char *why = NULL;
    EXPECT_TRUE(!ot_ntp_fit(&c, 0, &why));
    EXPECT_STR_EQ(why, "root distance above MAXDIST (1.5 s)");
    c.root_disp = 0.1;
    EXPECT_TRUE(ot_ntp_fit(&c, 0, &why));
    EXPECT_TRUE(why == NULL);
    c.stratum = 16;
    EXPECT_TRUE(!ot_ntp_fit(&c, 0, &why));
    EXPECT_STR_EQ(why, "stratum outside 1..15");
}

/* Three servers: two honest, one 5 s ahead (farther than two root distances, which are at most
 * MAXDIST = 1.5 s for a fit server). The sync object must call the third a
 * falseticker and publish an offset near zero. */
static void test_sync_rejects_falseticker(void) {
    ot_ntp_server_options o = ot_ntp_server_options_default();
    o.bind_addr = "127.0.0.1";
    o.port = 0;
    ot_ntp_server *s1, *s2;
    ASSERT_OK(ot_ntp_server_create(&o, &s1));
    ASSERT_OK(ot_ntp_server_create(&o, &s2));
    pthread_t t1, t2, t3;
    pthread_create(&t1, NULL, serve_thread, s1);
    pthread_create(&t2, NULL, serve_thread, s2);
    spoof_peer liar;
    ASSERT_TRUE(spoof_start(&liar, 3, 5.0, &t3));
    char a1[64], a2[64], a3[64];
    snprintf(a1, sizeof a1, "127.0.0.1:%d", ot_ntp_server_port(s1));
    snprintf(a2, sizeof a2, "127.0.0.1:%d", ot_ntp_server_port(s2));
    snprintf(a3, sizeof a3, "127.0.0.1:%d", liar.port);
    const char *servers[] = {a1, a3, a2};
    ot_clock_sync_options so = ot_clock_sync_options_default();
    so.burst = 4; /* fewer leave empty filter stages whose dispersion makes a server unfit */
    so.burst_interval_ms = 5;
    so.timeout_ms = 500;
    ot_clock_sync *cs;
    ot_clock_unpublish();
    int64_t off;
    EXPECT_TRUE(!ot_clock_offset_ns(&off));
    ASSERT_OK(ot_clock_sync_create(servers, 3, &so, &cs));
    EXPECT_OK(ot_clock_sync_update(cs));
    ot_clock_estimate e = ot_clock_sync_estimate(cs);
    EXPECT_TRUE(e.synchronized);
    EXPECT_TRUE(llabs(e.offset_ns) < 1000000);
    EXPECT_INT_EQ(e.n_survivors, 2);
    EXPECT_INT_EQ(ot_clock_sync_server_class(cs, 1), OT_NTP_FALSETICKER);
    EXPECT_TRUE(ot_clock_sync_server_class(cs, 0) >= OT_NTP_SURVIVOR);
    EXPECT_TRUE(ot_clock_sync_server_class(cs, 2) >= OT_NTP_SURVIVOR);
    EXPECT_TRUE(ot_clock_offset_ns(&off));
    EXPECT_INT_EQ(off, e.offset_ns);
    /* a second round: one exchange each, still synchronized */
    EXPECT_OK(ot_clock_sync_update(cs));
    /* the background thread starts and stops promptly */
    uint64_t t0 = ot_now_ns();
    EXPECT_OK(ot_clock_sync_start(cs));
    EXPECT_STATUS(ot_clock_sync_start(cs), OT_ERR_FAILED_PRECONDITION);
    ot_clock_sync_free(cs);
    EXPECT_TRUE((double)(ot_now_ns() - t0) / 1e9 < 3.0);
    /* published offset maps onto the timelines */
    ot_clock_publish_offset_ns(2500000000ll);
    int64_t wall = (int64_t)ot_wall_ns();
    int64_t synced = (int64_t)ot_clock_synced_wall_ns();
    EXPECT_TRUE(llabs(synced - wall - 2500000000ll) < 50000000);
    int64_t m = ot_clock_mono_to_synced_ns(ot_now_ns());
    EXPECT_TRUE(llabs(m - (int64_t)ot_wall_ns() - 2500000000ll) < 50000000);
    ot_clock_unpublish();
    EXPECT_TRUE(!ot_clock_offset_ns(&off) && off == 0);
    spoof_stop(&liar, t3);
    ot_ntp_server_stop(s1);
    ot_ntp_server_stop(s2);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    ot_ntp_server_free(s1);
    ot_ntp_server_free(s2);
}

static void test_drift_fit(void) {
    /* offsets of a clock running 37 ppm fast, with alternating ±2 us noise */
    double t[8], off[8];
    for (int i = 0; i < 8; i++) {
        t[i] = 100 + 64.0 * i;
        off[i] = 0.003 + 37e-6 * (t[i] - 100) + (i % 2 ? 2e-6 : -2e-6);
    }
    double f, at;
    ASSERT_OK(ot_clock_fit_drift(t, off, 8, &f, &at));
    EXPECT_NEAR(f, 37e-6, 0.2e-6);
    EXPECT_NEAR(at, 0.003 + 37e-6 * 448, 3e-6);
    ASSERT_OK(ot_clock_fit_drift(t, off, 2, &f, &at)); /* two points: the chord */
    EXPECT_NEAR(f, (off[1] - off[0]) / 64, 1e-15);
    EXPECT_STATUS(ot_clock_fit_drift(t, off, 1, &f, &at), OT_ERR_FAILED_PRECONDITION);
    double same[3] = {5, 5, 5};
    EXPECT_STATUS(ot_clock_fit_drift(same, off, 3, &f, &at), OT_ERR_FAILED_PRECONDITION);
    /* the published offset follows the drift from its reference time, clamped to MAXFREQ */
    int64_t o;
    ot_clock_publish(1000, 100e-6, 5000000000ull);
    EXPECT_TRUE(ot_clock_offset_at_ns(5000000000ull, &o));
    EXPECT_INT_EQ(o, 1000);
    ot_clock_offset_at_ns(6000000000ull, &o);
    EXPECT_INT_EQ(o, 1000 + 100000);
    ot_clock_offset_at_ns(4000000000ull, &o);
    EXPECT_INT_EQ(o, 1000 - 100000);
    ot_clock_publish(0, 0.01, 0);
    ot_clock_offset_at_ns(1000000000ull, &o);
    EXPECT_INT_EQ(o, 500000); /* 500 ppm */
    ot_clock_unpublish();
}

/* Readers never see a torn (offset, frequency, reference) triple: every publication below makes
 * offset_at(M) = 1e-4 M exactly, whatever the reference; mixing two would be off by >= 1e5 ns. */
static atomic_int g_pub_stop;
static atomic_llong g_pub_count;
static void *publisher(void *arg) {
    (void)arg;
    for (uint64_t k = 1; !atomic_load(&g_pub_stop); k++) {
        uint64_t ref = (k % 1000) * 1000000000ull;
        ot_clock_publish((int64_t)(ref / 10000), 1e-4, ref);
        atomic_fetch_add(&g_pub_count, 1);
    }
    return NULL;
}

/* Reads for at least 50 ms and until both sides have done enough work concurrently: on a loaded
 * machine the publisher thread may not run at all during a fixed 50 ms window. The 60 s deadline
 * only bounds a hang. */
static void test_publish_is_atomic(void) {
    atomic_store(&g_pub_stop, 0);
    atomic_store(&g_pub_count, 0);
    pthread_t th;
    pthread_create(&th, NULL, publisher, NULL);
    long long bad = 0, reads = 0;
    const uint64_t t0 = ot_now_ns(), min_end = t0 + 50000000, deadline = t0 + 60000000000ull;
    const uint64_t m = 777000000000ull;
    for (;;) {
        int64_t o;
        if (ot_clock_offset_at_ns(m, &o)) {
            reads++;
            if (llabs(o - (int64_t)(m / 10000)) > 2) bad++;
        }
        if ((reads & 1023) != 0) continue;
        uint64_t now = ot_now_ns();
        if (now >= deadline) break;
        if (now >= min_end && reads >= 10000 && atomic_load(&g_pub_count) >= 10000) break;
    }
    long long pubs = atomic_load(&g_pub_count);
    atomic_store(&g_pub_stop, 1);
    pthread_join(th, NULL);
    EXPECT_INT_EQ(bad, 0);
    EXPECT_TRUE(reads >= 10000);
    EXPECT_TRUE(pubs >= 10000);
    ot_clock_unpublish();
}

static void test_sync_create_errors(void) {
    ot_clock_sync *cs;
    const char *servers[] = {"127.0.0.1:1", "[::1]:2", "h:3"};
    EXPECT_STATUS(ot_clock_sync_create(servers, 0, NULL, &cs), OT_ERR_INVALID_ARGUMENT);
    const char *bad[] = {"127.0.0.1:99999"};
    EXPECT_STATUS(ot_clock_sync_create(bad, 1, NULL, &cs), OT_ERR_INVALID_ARGUMENT);
    int64_t live = ot_alloc_live();
    for (int n = 1; n < 20; n++) {
        ot_alloc_fail_after(n);
        ot_status s = ot_clock_sync_create(servers, 3, NULL, &cs);
        ot_alloc_fail_after(0);
        if (s == OT_OK) {
            ot_clock_sync_free(cs);
            EXPECT_TRUE(n > 3);
            break;
        }
        EXPECT_INT_EQ(s, OT_ERR_OUT_OF_MEMORY);
        EXPECT_TRUE(cs == NULL);
        EXPECT_INT_EQ(ot_alloc_live(), live);
    }
    EXPECT_INT_EQ(ot_alloc_live(), live);
    ot_clock_sync_free(NULL);
    ot_ntp_server_free(NULL);
}

OT_TEST_MAIN(OT_TEST(test_timestamp_vectors), OT_TEST(test_packet_roundtrip),
             OT_TEST(test_packet_extensions_and_mac), OT_TEST(test_onwire_vectors),
             OT_TEST(test_exchange_verdicts), OT_TEST(test_filter),
             OT_TEST(test_select_falsetickers), OT_TEST(test_select_no_majority),
             OT_TEST(test_mitigate_rejects_impossible), OT_TEST(test_cluster_prunes_outlier),
             OT_TEST(test_poll_adapts), OT_TEST(test_split_host_port), OT_TEST(test_server_reply),
             OT_TEST(test_udp_client_server), OT_TEST(test_udp_client_server_ipv6),
             OT_TEST(test_hostile_peers), OT_TEST(test_query_header_and_distance),
             OT_TEST(test_exchange_header_checks), OT_TEST(test_sync_rejects_falseticker),
             OT_TEST(test_drift_fit), OT_TEST(test_publish_is_atomic),
             OT_TEST(test_sync_create_errors))
