/* NTPv4 timestamps, the packet codec (RFC 5905 section 7.3, RFC 7822 extension fields) and the
 * client side of the on-wire protocol (RFC 5905 sections 8, 9 and A.5.1). */
#include "optitpu/clock.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NS_PER_S 1000000000ll
#define TWO32    4294967296.0

/* ---- timestamps ---- */

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

/* Two's-complement reinterpretation without implementation-defined conversions. */
static int64_t u64_to_s64(uint64_t u) {
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

ot_ntp_ts ot_ntp_ts_from_unix_ns(int64_t unix_ns) {
    int64_t secs = floor_div(unix_ns, NS_PER_S);
    uint64_t nsec = (uint64_t)(unix_ns - secs * NS_PER_S); /* 0 .. 1e9-1 */
    uint64_t ntp_secs = (uint64_t)(secs + (int64_t)OT_NTP_UNIX_EPOCH) & 0xffffffffu;
    uint64_t frac = ((nsec << 32) + (uint64_t)(NS_PER_S / 2)) / (uint64_t)NS_PER_S;
    return (ntp_secs << 32) | frac;
}

int64_t ot_ntp_ts_to_unix_ns(ot_ntp_ts ts, int64_t pivot_unix_ns) {
    int64_t pivot = floor_div(pivot_unix_ns, NS_PER_S) + (int64_t)OT_NTP_UNIX_EPOCH;
    uint32_t secs = (uint32_t)(ts >> 32);
    int64_t d = (int64_t)((secs - (uint32_t)pivot) & 0xffffffffu);
    if (d >= 2147483648ll) d -= 4294967296ll; /* [-2^31, 2^31) around the pivot */
    int64_t full = pivot + d;
    uint64_t frac = ts & 0xffffffffu;
    int64_t ns = (int64_t)((frac * (uint64_t)NS_PER_S + (1ull << 31)) >> 32);
    return (full - (int64_t)OT_NTP_UNIX_EPOCH) * NS_PER_S + ns;
}

int ot_ntp_era(int64_t unix_ns) {
    return (int)floor_div(floor_div(unix_ns, NS_PER_S) + (int64_t)OT_NTP_UNIX_EPOCH, 4294967296ll);
}

double ot_ntp_ts_diff(ot_ntp_ts a, ot_ntp_ts b) {
    return (double)u64_to_s64(a - b) / TWO32;
}

double ot_ntp_short_to_s(uint32_t v) {
    return (double)v / 65536.0;
}

uint32_t ot_ntp_short_from_s(double s) {
    if (!(s > 0)) return 0;
    double v = nearbyint(s * 65536.0);
    if (v >= 4294967295.0) return 0xffffffffu;
    return (uint32_t)v;
}

double ot_ntp_log2d(int p) {
    return ldexp(1.0, p);
}

/* ---- packet ---- */

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}
static void put64(uint8_t *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}
static uint16_t get16(const uint8_t *p) {
    return (uint16_t)((p[0] << 8) | p[1]);
}
static uint32_t get32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static uint64_t get64(const uint8_t *p) {
    return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

void ot_ntp_packet_encode(const ot_ntp_packet *p, uint8_t out[OT_NTP_PACKET_SIZE]) {
    out[0] = (uint8_t)(((p->leap & 3u) << 6) | ((p->version & 7u) << 3) | (p->mode & 7u));
    out[1] = p->stratum;
    out[2] = (uint8_t)p->poll;
    out[3] = (uint8_t)p->precision;
    put32(out + 4, p->root_delay);
    put32(out + 8, p->root_dispersion);
    put32(out + 12, p->ref_id);
    put64(out + 16, p->ref_ts);
    put64(out + 24, p->origin_ts);
    put64(out + 32, p->receive_ts);
    put64(out + 40, p->transmit_ts);
}

ot_status ot_ntp_packet_decode(const void *buf, size_t len, ot_ntp_packet *out) {
    memset(out, 0, sizeof *out);
    if (!buf && len) return ot_error(OT_ERR_INVALID_ARGUMENT, "ntp: NULL buffer");
    if (len < OT_NTP_PACKET_SIZE)
        return ot_error(OT_ERR_CORRUPT_DATA, "ntp: packet too short: %zu bytes (minimum 48)", len);
    if (len > OT_NTP_MAX_PACKET)
        return ot_error(OT_ERR_CORRUPT_DATA, "ntp: packet too long: %zu bytes (maximum %d)", len,
                        OT_NTP_MAX_PACKET);
    if (len % 4)
        return ot_error(OT_ERR_CORRUPT_DATA, "ntp: packet length %zu is not a multiple of 4", len);
    const uint8_t *b = buf;
    out->leap = b[0] >> 6;
    out->version = (b[0] >> 3) & 7;
    out->mode = b[0] & 7;
    if (out->version < 1 || out->version > 4)
        return ot_error(OT_ERR_CORRUPT_DATA, "ntp: unsupported version %d (want 1..4)",
                        out->version);
    out->stratum = b[1];
    out->poll = (int8_t)b[2];
    out->precision = (int8_t)b[3];
    out->root_delay = get32(b + 4);
    out->root_dispersion = get32(b + 8);
    out->ref_id = get32(b + 12);
    out->ref_ts = get64(b + 16);
    out->origin_ts = get64(b + 24);
    out->receive_ts = get64(b + 32);
    out->transmit_ts = get64(b + 40);
    /* RFC 7822 section 7.5: what remains is extension fields, then optionally a MAC. A remainder
     * of at most 24 bytes can only be a MAC (a last extension field without a MAC is >= 28). */
    size_t off = OT_NTP_PACKET_SIZE, rest = len - OT_NTP_PACKET_SIZE;
    while (rest > 0) {
        if (rest <= 24) {
            if (rest != 4 && rest != 20 && rest != 24)
                return ot_error(OT_ERR_CORRUPT_DATA,
                                "ntp: %zu trailing bytes at offset %zu are neither a MAC (4, 20 "
                                "or 24 bytes) nor an extension field",
                                rest, off);
            out->mac_len = (uint8_t)rest;
            out->key_id = get32(b + off);
            if (rest == 4 && out->key_id != 0)
                return ot_error(OT_ERR_CORRUPT_DATA,
                                "ntp: 4-byte MAC with key id %u is not a crypto-NAK", out->key_id);
            break;
        }
        uint16_t type = get16(b + off), elen = get16(b + off + 2);
        if (elen < 16 || elen % 4 || elen > rest)
            return ot_error(OT_ERR_CORRUPT_DATA,
                            "ntp: extension field %d (type 0x%04x) at offset %zu has bad length "
                            "%u (%zu bytes remain; need >= 16 and a multiple of 4)",
                            out->n_ext, type, off, elen, rest);
        if (out->n_ext < OT_NTP_MAX_EXT) out->ext_type[out->n_ext] = type;
        out->n_ext++;
        off += elen;
        rest -= elen;
    }
    return OT_OK;
}

void ot_ntp_kiss_code(const ot_ntp_packet *p, char out[5]) {
    for (int i = 0; i < 4; i++) {
        unsigned char c = (unsigned char)(p->ref_id >> (24 - 8 * i));
        out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    out[4] = 0;
}

void ot_ntp_ref_id_str(const ot_ntp_packet *p, char out[16]) {
    if (p->stratum <= 1) {
        ot_ntp_kiss_code(p, out);
        /* NUL padding ("GPS\0") is dropped rather than shown as '?' */
        for (int i = 3; i >= 0 && ((p->ref_id >> (24 - 8 * i)) & 0xff) == 0; i--) out[i] = 0;
        return;
    }
    snprintf(out, 16, "%u.%u.%u.%u", p->ref_id >> 24, (p->ref_id >> 16) & 0xff,
             (p->ref_id >> 8) & 0xff, p->ref_id & 0xff);
}

/* ---- on-wire ---- */

void ot_ntp_sample_compute(ot_ntp_ts t1, ot_ntp_ts t2, ot_ntp_ts t3, ot_ntp_ts t4,
                           int peer_precision, int sys_precision, ot_ntp_sample *out) {
    double d21 = ot_ntp_ts_diff(t2, t1), d34 = ot_ntp_ts_diff(t3, t4);
    double d41 = ot_ntp_ts_diff(t4, t1), d32 = ot_ntp_ts_diff(t3, t2);
    out->offset = (d21 + d34) / 2;
    out->delay = fmax(d41 - d32, ot_ntp_log2d(sys_precision));
    out->dispersion =
        ot_ntp_log2d(peer_precision) + ot_ntp_log2d(sys_precision) + OT_NTP_PHI * fmax(d41, 0);
    out->t1 = t1;
    out->t2 = t2;
    out->t3 = t3;
    out->t4 = t4;
}

static const char *const verdict_names[] = {
    "accepted", "malformed", "bad_mode",       "zero_transmit", "duplicate", "replay",
    "bogus",    "kiss",      "unsynchronized", "bad_times",     "auth",      "bad_header",
};
_Static_assert(sizeof verdict_names / sizeof verdict_names[0] == OT_NTP_VERDICT_COUNT,
               "verdict name table");

const char *ot_ntp_verdict_name(ot_ntp_verdict v) {
    return (unsigned)v < OT_NTP_VERDICT_COUNT ? verdict_names[v] : "unknown";
}

void ot_ntp_exchange_init(ot_ntp_exchange *x) {
    memset(x, 0, sizeof *x);
}

static void remember_old(ot_ntp_exchange *x, ot_ntp_ts xmt) {
    if (!xmt) return;
    memmove(x->old_xmt + 1, x->old_xmt, (OT_NTP_REPLAY_HISTORY - 1) * sizeof x->old_xmt[0]);
    x->old_xmt[0] = xmt;
    if (x->n_old < OT_NTP_REPLAY_HISTORY) x->n_old++;
}

void ot_ntp_exchange_request(ot_ntp_exchange *x, int64_t t1_unix_ns, uint8_t random_bits, int poll,
                             uint8_t out[OT_NTP_PACKET_SIZE]) {
    remember_old(x, x->xmt_wire);
    x->t1 = ot_ntp_ts_from_unix_ns(t1_unix_ns);
    x->xmt_wire = (x->t1 & ~(ot_ntp_ts)0xff) | random_bits;
    if (x->xmt_wire == 0) x->xmt_wire = 1; /* 0 means "none outstanding" */
    ot_ntp_packet p = {0};
    p.version = OT_NTP_VERSION;
    p.mode = OT_NTP_MODE_CLIENT;
    p.poll = (int8_t)poll;
    p.transmit_ts = x->xmt_wire;
    ot_ntp_packet_encode(&p, out);
}

static ot_status judge(ot_ntp_exchange *x, ot_ntp_verdict v, ot_ntp_verdict *verdict,
                       ot_status code, const char *fmt, const char *arg) {
    x->count[v]++;
    if (verdict) *verdict = v;
    if (code == OT_OK) return OT_OK;
    return ot_error(code, fmt, arg);
}

ot_status ot_ntp_exchange_receive(ot_ntp_exchange *x, const void *buf, size_t len,
                                  int64_t t4_unix_ns, int sys_precision, ot_ntp_packet *pkt,
                                  ot_ntp_sample *sample, ot_ntp_verdict *verdict) {
    ot_status s = ot_ntp_packet_decode(buf, len, pkt);
    if (s != OT_OK) {
        x->count[OT_NTP_MALFORMED]++;
        if (verdict) *verdict = OT_NTP_MALFORMED;
        return s;
    }
    char text[8];
    snprintf(text, sizeof text, "%d", pkt->mode);
    if (pkt->mode != OT_NTP_MODE_SERVER)
        return judge(x, OT_NTP_BAD_MODE, verdict, OT_ERR_CORRUPT_DATA,
                     "ntp: reply has mode %s, want 4 (server)", text);
    if (pkt->transmit_ts == 0)
        return judge(x, OT_NTP_ZERO_TRANSMIT, verdict, OT_ERR_CORRUPT_DATA,
                     "ntp: reply has a zero transmit timestamp%s", "");
    if (pkt->transmit_ts == x->last_server_xmt)
        return judge(x, OT_NTP_DUPLICATE, verdict, OT_ERR_CORRUPT_DATA,
                     "ntp: duplicate reply (transmit timestamp already seen)%s", "");
    if (x->xmt_wire == 0 || pkt->origin_ts != x->xmt_wire) {
        for (int i = 0; i < x->n_old; i++)
            if (pkt->origin_ts == x->old_xmt[i])
                return judge(x, OT_NTP_REPLAY, verdict, OT_ERR_CORRUPT_DATA,
                             "ntp: replayed or late reply (origin matches an earlier request, "
                             "%s)",
                             x->xmt_wire ? "not the outstanding one" : "none outstanding");
        return judge(x, OT_NTP_BOGUS, verdict, OT_ERR_CORRUPT_DATA,
                     "ntp: bogus reply (origin timestamp is not our transmit timestamp%s)",
                     x->xmt_wire ? "" : "; no request outstanding");
    }
    if (pkt->mac_len)
        return judge(x, OT_NTP_AUTH, verdict, OT_ERR_CORRUPT_DATA, "%s",
                     pkt->mac_len == 4
                         ? "ntp: reply is a crypto-NAK; symmetric-key authentication is not "
                           "supported"
                         : "ntp: reply carries a MAC; symmetric-key authentication is not "
                           "supported");
    if (pkt->stratum == 0) {
        char code[5];
        ot_ntp_kiss_code(pkt, code);
        remember_old(x, x->xmt_wire);
        x->xmt_wire = 0;
        return judge(x, OT_NTP_KISS, verdict, OT_ERR_PEER_FAILED, "ntp: kiss-o'-death %s", code);
    }
    if (pkt->leap == OT_NTP_LEAP_NOSYNC || pkt->stratum >= OT_NTP_MAXSTRAT) {
        remember_old(x, x->xmt_wire);
        x->xmt_wire = 0;
        return judge(x, OT_NTP_UNSYNCHRONIZED, verdict, OT_ERR_PEER_FAILED,
                     "ntp: server is unsynchronized (%s)",
                     pkt->leap == OT_NTP_LEAP_NOSYNC ? "leap indicator 3" : "stratum 16");
    }
    /* RFC 5905 A.5.1.1, "invalid header values": a root distance the server itself reports at or
     * beyond MAXDISP, or a reference time (when the clock was last set) after the transmit time
     * (0 is "never set", which the unsynchronized test covers) */
    double root_half =
        ot_ntp_short_to_s(pkt->root_delay) / 2 + ot_ntp_short_to_s(pkt->root_dispersion);
    if (root_half >= OT_NTP_MAXDISP ||
        (pkt->ref_ts != 0 && ot_ntp_ts_diff(pkt->ref_ts, pkt->transmit_ts) > 0)) {
        remember_old(x, x->xmt_wire);
        x->xmt_wire = 0;
        char what[96];
        if (root_half >= OT_NTP_MAXDISP)
            snprintf(what, sizeof what,
                     "root delay/2 + root dispersion is %.1f s, at least MAXDISP (16 s)",
                     root_half);
        else
            snprintf(what, sizeof what, "reference time is %.6f s after the transmit time",
                     ot_ntp_ts_diff(pkt->ref_ts, pkt->transmit_ts));
        return judge(x, OT_NTP_BAD_HEADER, verdict, OT_ERR_CORRUPT_DATA,
                     "ntp: reply has invalid header values (%s)", what);
    }
    if (pkt->receive_ts == 0 || ot_ntp_ts_diff(pkt->transmit_ts, pkt->receive_ts) < 0)
        return judge(x, OT_NTP_BAD_TIMES, verdict, OT_ERR_CORRUPT_DATA, "%s",
                     pkt->receive_ts == 0
                         ? "ntp: reply has a zero receive timestamp"
                         : "ntp: reply's transmit timestamp precedes its receive timestamp");
    ot_ntp_sample_compute(x->t1, pkt->receive_ts, pkt->transmit_ts,
                          ot_ntp_ts_from_unix_ns(t4_unix_ns), pkt->precision, sys_precision,
                          sample);
    x->last_server_xmt = pkt->transmit_ts;
    remember_old(x, x->xmt_wire);
    x->xmt_wire = 0;
    return judge(x, OT_NTP_ACCEPTED, verdict, OT_OK, NULL, NULL);
}
