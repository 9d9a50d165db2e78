/* rng-bit-generator: XLA's counter-based generators, bit for bit as XLA's RngBitGeneratorExpander
 * builds them (xla/client/lib/prng.cc): three-fry 2x32 (20 rounds) and philox 4x32 (10 rounds).
 *
 * State: s[0] is the key. three-fry: s[1] is a 64-bit counter; a 32-bit output is split in two
 * along its first even dimension (else its largest, XLA's SplitShapeIntoHalves): index 2h + w of
 * that dimension is word w of counter s[1] + (row-major index in the half shape); a 64-bit output
 * uses counter s[1] + i and joins the two words (low, high). The new state is [s[0], s[1] +
 * counters used]. philox: the 128-bit counter is (low = s[1], high = s[2]) for a u64[3] state and
 * (low = s[1], high = s[0]) for a u64[2] state (what XLA's expansion reads); each counter gives
 * four 32-bit words in order; 64-bit outputs take consecutive word pairs (low, high). The new state
 * advances the counter by the number used (for a u64[2] state only its low word is kept). DEFAULT
 * runs as PHILOX (XLA's CPU choice). */
#include "exec/exec_internal.h"

static inline uint32_t rotl32(uint32_t v, int r) {
    return (v << r) | (v >> (32 - r));
}

static void threefry2x32(uint32_t k0, uint32_t k1, uint32_t x0, uint32_t x1, uint32_t out[2]) {
    static const int rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
    uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
    x0 += ks[0];
    x1 += ks[1];
    for (int block = 0; block < 5; block++) {
        const int *r = rot + (block % 2) * 4;
        for (int k = 0; k < 4; k++) {
            x0 += x1;
            x1 = rotl32(x1, r[k]);
            x1 ^= x0;
        }
        x0 += ks[(block + 1) % 3];
        x1 += ks[(block + 2) % 3] + (uint32_t)(block + 1);
    }
    out[0] = x0;
    out[1] = x1;
}

static void philox4x32(uint32_t k0, uint32_t k1, const uint32_t in[4], uint32_t out[4]) {
    uint32_t v[4] = {in[0], in[1], in[2], in[3]};
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)v[0] * 0xD2511F53u, p1 = (uint64_t)v[2] * 0xCD9E8D57u;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n[4] = {hi1 ^ v[1] ^ k0, lo1, hi0 ^ v[3] ^ k1, lo0};
        memcpy(v, n, sizeof v);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    memcpy(out, v, sizeof v);
}

static void store_word(ot_value *bits, int64_t i, uint64_t w) {
    ot_dtype t = ex_arr(bits)->dtype;
    ex_st_bits(ot_dtype_size(t), bits->array.data, i, w);
}

ot_status ex_kernel_rng(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    const ot_value *st = ops[0];
    int64_t ns = ex_arr(st)->dims[0];
    const uint64_t *s = st->array.data;
    OT_CHECK(ot_value_alloc_shape(out, &i->shape));
    ot_value *nstate = &out->tuple[0], *bits = &out->tuple[1];
    uint64_t *o = nstate->array.data;
    for (int64_t k = 0; k < ns; k++) o[k] = s[k];
    ot_dtype t = ex_arr(bits)->dtype;
    bool wide = ot_dtype_size(t) == 8;
    if (ot_dtype_size(t) < 4) {
        ot_value_release(out);
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "%s: rng-bit-generator of %s (XLA makes 32/64-bit bits)", EX_NAME(i),
                        ot_dtype_name(t));
    }
    int64_t n = ot_shape_numel_unchecked(ex_arr(bits));
    uint32_t k0 = (uint32_t)s[0], k1 = (uint32_t)(s[0] >> 32);
    ot_rng_algorithm alg = i->attrs->rng_algorithm;
    if (alg == OT_RNG_DEFAULT) alg = OT_RNG_PHILOX;
    if (alg == OT_RNG_THREE_FRY) {
        uint64_t ctr = s[1];
        if (wide) {
            for (int64_t e = 0; e < n; e++) {
                uint64_t c = ctr + (uint64_t)e;
                uint32_t w[2];
                threefry2x32(k0, k1, (uint32_t)c, (uint32_t)(c >> 32), w);
                store_word(bits, e, (uint64_t)w[0] | ((uint64_t)w[1] << 32));
            }
            o[1] = ctr + (uint64_t)n;
        } else {
            /* XLA splits the shape in two along its first even dimension (else its largest):
             * the element at index i_s = 2h + w of that dimension is word w of the counter at
             * the half shape's row-major index with h in place of i_s */
            const ot_shape *bs = ex_arr(bits);
            int r = bs->rank, sd = -1;
            for (int d = 0; d < r && sd < 0; d++)
                if (bs->dims[d] % 2 == 0) sd = d;
            if (sd < 0)
                for (int d = 0; d < r; d++)
                    if (sd < 0 || bs->dims[d] > bs->dims[sd]) sd = d;
            int64_t half[OT_MAX_RANK], hstr[OT_MAX_RANK], hn = 1, idx[OT_MAX_RANK] = {0};
            for (int d = 0; d < r; d++) half[d] = d == sd ? (bs->dims[d] + 1) / 2 : bs->dims[d];
            for (int d = r - 1; d >= 0; d--) {
                hstr[d] = hn;
                hn *= half[d];
            }
            for (int64_t e = 0; e < n; e++) {
                int64_t ci = 0, w = 0;
                for (int d = 0; d < r; d++) {
                    int64_t v = idx[d];
                    if (d == sd) {
                        w = v % 2;
                        v /= 2;
                    }
                    ci += v * hstr[d];
                }
                uint64_t c = ctr + (uint64_t)ci;
                uint32_t wd[2];
                threefry2x32(k0, k1, (uint32_t)c, (uint32_t)(c >> 32), wd);
                store_word(bits, e, wd[w]);
                ex_next_index(idx, bs->dims, r);
            }
            o[1] = ctr + (uint64_t)(r == 0 ? 1 : hn);
        }
        return OT_OK;
    }
    /* philox */
    uint64_t lo = s[1], hi = ns >= 3 ? s[2] : s[0];
    int64_t words = wide ? 2 * n : n, counters = (words + 3) / 4;
    for (int64_t c = 0; c < counters; c++) {
        uint64_t l = lo + (uint64_t)c, h = hi + (l < lo ? 1 : 0);
        uint32_t in[4] = {(uint32_t)l, (uint32_t)(l >> 32), (uint32_t)h, (uint32_t)(h >> 32)};
        uint32_t w[4];
        philox4x32(k0, k1, in, w);
        for (int q = 0; q < 4; q++) {
            int64_t wi = 4 * c + q;
            if (wi >= words) break;
            if (wide) {
                uint64_t *b = bits->array.data;
                if (wi % 2 == 0)
                    b[wi / 2] = w[q];
                else
                    b[wi / 2] |= (uint64_t)w[q] << 32;
            } else {
                store_word(bits, wi, w[q]);
            }
        }
    }
    uint64_t nlo = lo + (uint64_t)counters;
    o[1] = nlo;
    if (ns >= 3) o[2] = hi + (nlo < lo ? 1 : 0);
    return OT_OK;
}
