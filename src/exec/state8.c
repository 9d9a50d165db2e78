/* 8-bit block-wise optimizer state (state8.h): the dynamic map, the exact quantizer, the
 * custom-call's configuration, and its reference kernel (element by element with the reference's
 * flushing arithmetic; the evaluator's custom-call entry). The fast twin is fast_state8.c.
 *
 * The map (create_dynamic_map(signed, 7, 8), sorted) holds 0, 1 and, for decades i = 0..6, the
 * means of consecutive points of torch's f32 linspace(0.1, 1, q + 1) times f32(10^(i-6)), with
 * q = 2^i values per decade signed (each also negated) and 2^(i+1) unsigned. In terms of a
 * magnitude index m (0: zero; the last: 1.0) and e = floor(log2(m + u)) (u = 0 signed, 1
 * unsigned), m's decade is i = e - u, its position j = m + u - 2^e, the linspace has 2^e + 1
 * points with step (1 - 0.1) / 2^e, and point k is 0.1 + step k below the halfway index 2^(e-1)
 * and 1 - step (2^e - k) from it (torch's CPU linspace). A code c is m = c - 127 (c > 127) or
 * -(127 - c) for the signed map (127 is zero, 255 is 1.0, 0 is the most negative mean: no -1),
 * and m = c for the unsigned one. The graph code of src/optim/state_quant.c computes the same
 * f32 values from the index; the tests compare both with scripts/optim_state_ref.py bit for
 * bit. */
#include "exec/state8_internal.h"

#include <pthread.h>
#include <stdio.h>

/* ---- the map -------------------------------------------------------------------------------- */

static float pow10f_dec(int i) { /* f32(10^(i-6)), i = 0..6: torch's scalar times an f32 tensor */
    return (float)pow(10.0, (double)(i - 6));
}

static float mag_host(int m, bool sgn) {
    int u = sgn ? 0 : 1, top = sgn ? 128 : 255;
    if (m <= 0) return 0.0f;
    if (m >= top) return 1.0f;
    int e = 0;
    while ((1 << (e + 1)) <= m + u) e++;
    int i = e - u, j = m + u - (1 << e), half = ((1 << e) + 1) >> 1; /* torch: steps / 2 */
    volatile float d = 1.0f - 0.1f; /* f32 arithmetic, as the graph and torch */
    float step = d / (float)(1 << e);
    float b0 = j < half ? 0.1f + step * (float)j : 1.0f - step * (float)((1 << e) - j);
    float b1 =
        j + 1 < half ? 0.1f + step * (float)(j + 1) : 1.0f - step * (float)((1 << e) - j - 1);
    float mean = (b0 + b1) / 2.0f;
    return pow10f_dec(i) * mean;
}

void ex_q8_map(bool is_signed, float out[256]) {
    for (int c = 0; c < 256; c++) {
        if (!is_signed)
            out[c] = mag_host(c, false);
        else if (c >= 127)
            out[c] = mag_host(c - 127, true);
        else
            out[c] = -mag_host(127 - c, true);
    }
}

static float g_map[2][256];      /* [signed] */
static float g_dec[7], g_thr[7]; /* f32(10^(i-6)); the decade thresholds f32(10^(l-7)) */
static pthread_once_t g_map_once = PTHREAD_ONCE_INIT;
static void map_init(void) {
    ex_q8_map(false, g_map[0]);
    ex_q8_map(true, g_map[1]);
    for (int i = 0; i < 7; i++) {
        g_dec[i] = pow10f_dec(i);
        g_thr[i] = (float)pow(10.0, i - 7);
    }
}
const float *ex_q8_table(bool sgn) {
    pthread_once(&g_map_once, map_init);
    return g_map[sgn ? 1 : 0];
}

/* ---- the exact quantizer: state_quant.c's graph, operation for operation ----------------------
 */

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
/* the graph's u2f: u32 to f32 through the bits of 2^23 + x */
static float u2f(uint32_t x, bool z) {
    return sub_f(bitsf(x | 0x4B000000u), 8388608.0f, z);
}

uint8_t ex_q8_code_exact(const float *map, float xn, bool sgn, bool z) {
    pthread_once(&g_map_once, map_init);
    uint32_t u = sgn ? 0 : 1, top = sgn ? 128 : 255;
    bool neg = xn < 0;
    float a = fabsf(xn);
    uint32_t i = 0;
    for (int l = 1; l < 7; l++) i += a >= g_thr[l] ? 1u : 0u;
    uint32_t e = i + u, n = 1u << e;
    float step = mul_f(1.0f - 0.1f, bitsf((127u - e) << 23), z);
    float jf = div_f(sub_f(div_f(a, g_dec[i], z), 0.1f, z), step, z);
    jf = min_f(max_f(jf, 0.0f, z), sub_f(u2f(n, z), 1.0f, z), z);
    /* f2u_floor */
    uint32_t r = fbits(add_f(jf, 8388608.0f, z)) - 0x4B000000u;
    if (u2f(r, z) > jf) r -= 1u;
    uint32_t m0 = n - u + r;
    uint32_t hi = sgn && neg ? top - 1 : top;
    uint32_t cand[3];
    cand[0] = (m0 > 1u ? m0 : 1u) - 1u;
    cand[0] = cand[0] < hi ? cand[0] : hi;
    cand[1] = m0 < hi ? m0 : hi;
    cand[2] = m0 + 1u < hi ? m0 + 1u : hi;
    float d[3];
    for (int k = 0; k < 3; k++) {
        /* the magnitude of index cand[k]: map[127 + m] signed, map[m] unsigned */
        float mag = map[sgn ? 127u + cand[k] : cand[k]];
        d[k] = fabsf(sub_f(a, mag, z));
    }
    uint32_t bu = cand[0];
    float bd = d[0];
    for (int k = 1; k < 3; k++)
        if (d[k] < bd) bu = cand[k], bd = d[k];
    if (!sgn) return (uint8_t)bu;
    if (!neg) return (uint8_t)(127u + bu);
    uint32_t nu = cand[2];
    float nd = d[2];
    for (int k = 1; k >= 0; k--)
        if (d[k] < nd) nu = cand[k], nd = d[k];
    return (uint8_t)(127u - nu);
}

/* ---- configuration ------------------------------------------------------------------------- */

#define BAD(...) ot_error(OT_ERR_INVALID_ARGUMENT, "custom-call " EX_STATE8_TARGET ": " __VA_ARGS__)

static bool is_array(const ot_instr *x, ot_dtype t, int rank) {
    return x->shape.kind == OT_IR_ARRAY && x->shape.array.dtype == t && x->shape.array.rank == rank;
}

ot_status ex_s8_parse(const ot_instr *i, ex_s8 *k) {
    memset(k, 0, sizeof *k);
    const char *cfg = i->attrs->backend_config ? i->attrs->backend_config : "";
    char tok[64];
    const char *p = cfg;
    bool have_rule = false, have_maps = false;
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof tok) return BAD("bad backend_config \"%.80s\"", cfg);
        memcpy(tok, p, n);
        tok[n] = 0;
        p += n;
        if (*p == ',') {
            p++;
            if (!*p) return BAD("bad backend_config \"%.80s\" (trailing comma)", cfg);
        }
        if (!have_rule) {
            if (!strcmp(tok, "adam"))
                k->rule = EX_S8_ADAM, k->nslots = 2, k->nscalars = 7;
            else if (!strcmp(tok, "lion"))
                k->rule = EX_S8_LION, k->nslots = 1, k->nscalars = 6;
            else if (!strcmp(tok, "sgd"))
                k->rule = EX_S8_SGD, k->nslots = 1, k->nscalars = 4;
            else
                return BAD("unknown rule '%s' (adam, lion, sgd)", tok);
            have_rule = true;
            continue;
        }
        if (have_maps) return BAD("'%s' after maps=", tok);
        if (!strncmp(tok, "maps=", 5)) {
            if ((int)strlen(tok + 5) != k->nslots)
                return BAD("maps=%s: the rule has %d state slots", tok + 5, k->nslots);
            for (int j = 0; j < k->nslots; j++) {
                if (tok[5 + j] != 's' && tok[5 + j] != 'u')
                    return BAD("maps=%s: s (signed) or u (unsigned) per slot", tok + 5);
                k->sgn[j] = tok[5 + j] == 's';
            }
            have_maps = true;
        } else if (!strcmp(tok, "maximize") && k->rule != EX_S8_LION) {
            k->maximize = true;
        } else if (!strcmp(tok, "wd_coupled") && k->rule == EX_S8_ADAM && !k->wd_decoupled) {
            k->wd_coupled = true;
        } else if (!strcmp(tok, "wd_decoupled") && k->rule == EX_S8_ADAM && !k->wd_coupled) {
            k->wd_decoupled = true;
        } else if (!strcmp(tok, "wd") && k->rule != EX_S8_ADAM) {
            k->wd = true;
        } else if (!strcmp(tok, "nesterov") && k->rule == EX_S8_SGD) {
            k->nesterov = true;
        } else {
            return BAD("flag '%s' is not one of the rule's", tok);
        }
    }
    if (!have_rule || !have_maps)
        return BAD("backend_config \"%.80s\" needs a rule and maps=", cfg);
    int want = 2 + 2 * k->nslots + k->nscalars + (k->rule == EX_S8_SGD ? 1 : 0);
    if (i->noperands != want) return BAD("%d operands, the rule takes %d", (int)i->noperands, want);
    const ot_instr *p0 = i->operands[0];
    if (!is_array(p0, OT_F32, 1)) return BAD("the parameter must be f32[L]");
    k->len = p0->shape.array.dims[0];
    if (k->len % EX_STATE8_BLOCK)
        return BAD("length %lld is not a multiple of %d", (long long)k->len, EX_STATE8_BLOCK);
    k->nblocks = k->len / EX_STATE8_BLOCK;
    if (!is_array(i->operands[1], OT_F32, 1) || i->operands[1]->shape.array.dims[0] != k->len)
        return BAD("the gradient must be f32[%lld]", (long long)k->len);
    for (int j = 0; j < k->nslots; j++) {
        const ot_instr *c = i->operands[2 + 2 * j], *a = i->operands[3 + 2 * j];
        if (!is_array(c, OT_U8, 1) || c->shape.array.dims[0] != k->len)
            return BAD("slot %d's codes must be u8[%lld]", j, (long long)k->len);
        if (!is_array(a, OT_F32, 1) || a->shape.array.dims[0] != k->nblocks)
            return BAD("slot %d's absmax must be f32[%lld]", j, (long long)k->nblocks);
    }
    for (int q = 0; q < want - 2 - 2 * k->nslots; q++) {
        bool pred = k->rule == EX_S8_SGD && q == k->nscalars;
        if (!is_array(i->operands[2 + 2 * k->nslots + q], pred ? OT_PRED : OT_F32, 0))
            return BAD("operand %d must be a rank-0 %s", 2 + 2 * k->nslots + q,
                       pred ? "pred" : "f32");
    }
    const ot_ir_shape *r = &i->shape;
    bool ok = r->kind == OT_IR_TUPLE && r->ntuple == 1 + 2 * k->nslots &&
              ot_ir_shape_is_array(&r->tuple[0]) &&
              ot_shape_equal(&r->tuple[0].array, &p0->shape.array);
    for (int j = 0; ok && j < k->nslots; j++)
        ok = ot_ir_shape_is_array(&r->tuple[1 + 2 * j]) &&
             ot_ir_shape_is_array(&r->tuple[2 + 2 * j]) &&
             ot_shape_equal(&r->tuple[1 + 2 * j].array, &i->operands[2 + 2 * j]->shape.array) &&
             ot_shape_equal(&r->tuple[2 + 2 * j].array, &i->operands[3 + 2 * j]->shape.array);
    if (!ok)
        return BAD(
            "the result must be (p, then codes and absmax per slot) of the operands' shapes");
    return OT_OK;
}

void ex_s8_read_scalars(ex_s8 *k, const void *const *sc) {
    for (int q = 0; q < k->nscalars; q++) memcpy(&k->sc[q], sc[q], 4);
    if (k->rule == EX_S8_SGD) k->first = *(const uint8_t *)sc[k->nscalars] != 0;
}

/* ---- the reference kernel ------------------------------------------------------------------- */

ot_status ex_kernel_state8(const ot_instr *i, const ot_value *const *ops, bool z, ot_value *out) {
    ex_s8 k;
    OT_CHECK(ex_s8_parse(i, &k));
    const void *sc[EX_S8_MAX_SCALARS + 1];
    for (int q = 0; q < i->noperands - 2 - 2 * k.nslots; q++)
        sc[q] = ops[2 + 2 * k.nslots + q]->array.data;
    ex_s8_read_scalars(&k, sc);
    OT_CHECK(ot_value_alloc_shape(out, &i->shape));
    const float *p = ops[0]->array.data, *g = ops[1]->array.data;
    float *po = out->tuple[0].array.data;
    const float *map[EX_S8_MAX_SLOTS];
    for (int j = 0; j < k.nslots; j++) map[j] = ex_q8_table(k.sgn[j]);
    float x[EX_S8_MAX_SLOTS][EX_STATE8_BLOCK];
    for (int64_t b = 0; b < k.nblocks; b++) {
        int64_t e0 = b * EX_STATE8_BLOCK;
        for (int e = 0; e < EX_STATE8_BLOCK; e++) {
            float s[EX_S8_MAX_SLOTS];
            for (int j = 0; j < k.nslots; j++) {
                const uint8_t *c = ops[2 + 2 * j]->array.data;
                const float *am = ops[3 + 2 * j]->array.data;
                s[j] = mul_f(map[j][c[e0 + e]], am[b], z);
            }
            po[e0 + e] = ex_s8_element(&k, k.rule, true, z, p[e0 + e], g[e0 + e], s);
            for (int j = 0; j < k.nslots; j++) x[j][e] = s[j];
        }
        for (int j = 0; j < k.nslots; j++) {
            uint8_t *co = out->tuple[1 + 2 * j].array.data;
            float *amo = out->tuple[2 + 2 * j].array.data;
            float am = 0.0f; /* the graph's reduce: max from 0, then 1 for an all-zero block */
            for (int e = 0; e < EX_STATE8_BLOCK; e++) am = max_f(am, fabsf(x[j][e]), z);
            if (am == 0.0f) am = 1.0f;
            amo[b] = am;
            for (int e = 0; e < EX_STATE8_BLOCK; e++)
                co[e0 + e] = ex_q8_code_exact(map[j], div_f(x[j][e], am, z), k.sgn[j], z);
        }
    }
    return OT_OK;
}
