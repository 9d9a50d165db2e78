/* libFuzzer target for the NTP packet parser and the code that judges untrusted datagrams: the
 * decoder (header, extension fields, MAC), the client's reply validation and the server's
 * request handling. Invariants checked: decode/encode round trip of the header, no reply
 * accepted unless its origin echoes our transmit timestamp. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optitpu/clock.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ot_ntp_packet p;
    if (ot_ntp_packet_decode(data, size, &p) == OT_OK) {
        uint8_t b[OT_NTP_PACKET_SIZE];
        ot_ntp_packet_encode(&p, b);
        if (memcmp(b, data, OT_NTP_PACKET_SIZE) != 0) abort();
        char s[16];
        ot_ntp_ref_id_str(&p, s);
        ot_ntp_kiss_code(&p, s);
    }
    /* client side: a request is outstanding whose transmit timestamp the input may echo */
    ot_ntp_exchange x;
    ot_ntp_exchange_init(&x);
    uint8_t req[OT_NTP_PACKET_SIZE];
    ot_ntp_exchange_request(&x, 1700000000000000000ll, size >= 32 ? data[31] : 0, 6, req);
    ot_ntp_ts want = x.xmt_wire;
    ot_ntp_sample smp;
    ot_ntp_verdict v;
    if (ot_ntp_exchange_receive(&x, data, size, 1700000000001000000ll, -20, &p, &smp, &v) ==
        OT_OK) {
        if (v != OT_NTP_ACCEPTED || p.origin_ts != want || p.mode != OT_NTP_MODE_SERVER) abort();
    }
    /* server side */
    ot_ntp_server_options o = ot_ntp_server_options_default();
    uint8_t rep[OT_NTP_PACKET_SIZE + 4];
    size_t n;
    ot_ntp_server_stats st = {0};
    if (ot_ntp_server_reply(&o, -20, data, size, 1, 2, rep, &n, &st) == OT_OK) {
        if (n != OT_NTP_PACKET_SIZE && n != OT_NTP_PACKET_SIZE + 4) abort();
        if (ot_ntp_packet_decode(rep, n, &p) != OT_OK || p.mode != OT_NTP_MODE_SERVER) abort();
    }
    /* mitigation on arbitrary candidates (any doubles, NaN and infinities included): no crash,
     * and a combined offset is a weighted mean of the survivors' offsets */
    ot_ntp_candidate c[8];
    int nc = 0;
    for (size_t off = 0; nc < 8 && off + 7 * sizeof(double) + 4 <= size; nc++) {
        double v[7];
        memcpy(v, data + off, sizeof v);
        off += sizeof v;
        c[nc] = (ot_ntp_candidate){v[0],
                                   v[1],
                                   v[2],
                                   v[3],
                                   v[4],
                                   v[5],
                                   v[6],
                                   data[off] % 20,
                                   data[off + 1] & 3,
                                   data[off + 2] & 1};
        off += 4;
    }
    if (nc > 0) {
        ot_ntp_peer_class cls[8];
        ot_ntp_system sys;
        if (ot_ntp_mitigate(c, nc, 100.0, cls, &sys) == OT_OK) {
            double lo = 1e300, hi = -1e300;
            for (int i = 0; i < nc; i++)
                if (cls[i] == OT_NTP_SURVIVOR || cls[i] == OT_NTP_SYS_PEER) {
                    lo = c[i].offset < lo ? c[i].offset : lo;
                    hi = c[i].offset > hi ? c[i].offset : hi;
                }
            double mag = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
            double tol = 1e-9 * (hi - lo) + 1e-12 * (1 + mag); /* rounding of the weighted mean */
            if (!(sys.offset >= lo - tol && sys.offset <= hi + tol)) abort();
        }
    }
    return 0;
}
