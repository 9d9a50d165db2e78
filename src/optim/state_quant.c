/* 8-bit block-wise optimizer state (tpu_optim.h, OT_TPU_STATE_INT8): bitsandbytes' dynamic
 * quantization map and its block-wise quantization (Dettmers et al., 2022), built as elementwise
 * graph code so that the compiler fuses dequantize -> update -> quantize into the update's loops.
 *
 * The map (create_dynamic_map(signed, 7, 8), sorted) holds 0, 1 and, for decades i = 0..6, the
 * means of consecutive points of torch's f32 linspace(0.1, 1, q + 1) times f32(10^(i-6)), with
 * q = 2^i values per decade signed (each also negated) and 2^(i+1) unsigned. In terms of a
 * magnitude index m (0: zero; the last: 1.0) and e = floor(log2(m + u)) (u = 0 signed, 1
 * unsigned), m's decade is i = e - u, its position j = m + u - 2^e, the linspace has 2^e + 1
 * points with step (1 - 0.1) / 2^e, and point k is 0.1 + step k below the halfway index 2^(e-1)
 * and 1 - step (2^e - k) from it (torch's CPU linspace). A code c is m = c - 127 (c > 127) or
 * -(127 - c) for the signed map (127 is zero, 255 is 1.0, 0 is the most negative mean: no -1),
 * and m = c for the unsigned one. Everything below is f32 / u32 arithmetic that reproduces the
 * table's f32 values exactly (ot_tpu_int8_map builds the table with the same code on the host;
 * the tests compare both with scripts/optim_state_ref.py's NumPy table bit for bit).
 *
 * Quantization of a value x of a block with absmax A (max |x| of its block, 1 for an all-zero
 * block): the first code k minimizing |x / A - map[k]| in f32 (bitsandbytes' argmin). The
 * magnitude a = |x / A| picks its decade by comparing with 10^(l-7), its position from (a /
 * scale - 0.1) / step, and the nearest of the three neighbouring indices is kept (ties to the
 * lower code, as argmin: the smaller magnitude for x >= 0, the larger for x < 0). */
#include "optitpu/tpu_optim.h"

#include <math.h>
#include <string.h>

#include "exec/state8.h"
#include "state_quant.h"

/* ---- the map on the host: exec's (src/exec/state8.c, the same f32 steps as the graph) -------- */

void ot_tpu_int8_map(bool is_signed, float out[256]) {
    ex_q8_map(is_signed, out);
}

static float pow10f_dec(int i) { /* f32(10^(i-6)), i = 0..6: torch's scalar times an f32 tensor */
    return (float)pow(10.0, (double)(i - 6));
}

/* ---- graph helpers ------------------------------------------------------------------------- */

typedef struct qb {
    ot_computation *c;
    ot_shape fs, us, ps; /* f32, u32 and pred of the flat shape */
} qb;

static ot_instr *cf(qb *q, float v) {
    return ot_build_broadcast(q->c, ot_build_constant_scalar(q->c, OT_F32, (double)v), q->fs, NULL,
                              0);
}
static ot_instr *cu(qb *q, uint32_t v) {
    return ot_build_broadcast(q->c, ot_build_constant_scalar(q->c, OT_U32, (double)v), q->us, NULL,
                              0);
}
static ot_instr *bin(qb *q, ot_opcode op, ot_instr *a, ot_instr *b) {
    return ot_build_binary(q->c, op, a, b);
}
static ot_instr *cmp(qb *q, ot_instr *a, ot_instr *b, ot_cmp_dir d) {
    return ot_build_compare(q->c, a, b, d, OT_CMP_TYPE_DEFAULT);
}
static ot_instr *sel(qb *q, ot_instr *p, ot_instr *a, ot_instr *b) {
    return ot_build_select(q->c, p, a, b);
}
/* u32 x < 2^23 to f32, exactly, by the bits of 2^23 + x (no int-float convert in the loop) */
static ot_instr *u2f(qb *q, ot_instr *x) {
    ot_instr *b = ot_build_bitcast_convert(q->c, bin(q, OT_OP_OR, x, cu(q, 0x4B000000u)), OT_F32);
    return bin(q, OT_OP_SUBTRACT, b, cf(q, 8388608.0f));
}
/* floor of f32 0 <= x < 2^22 as u32: round through 2^23 + x, one down where that rounded up */
static ot_instr *f2u_floor(qb *q, ot_instr *x) {
    ot_instr *t = ot_build_bitcast_convert(q->c, bin(q, OT_OP_ADD, x, cf(q, 8388608.0f)), OT_U32);
    ot_instr *r = bin(q, OT_OP_SUBTRACT, t, cu(q, 0x4B000000u));
    ot_instr *up = cmp(q, u2f(q, r), x, OT_CMP_GT);
    return sel(q, up, bin(q, OT_OP_SUBTRACT, r, cu(q, 1)), r);
}

/* 2^e (u32 e, 0..8) and 2^-e as exact f32 */
static ot_instr *pow2f(qb *q, ot_instr *e, bool neg) {
    ot_instr *ex = bin(q, neg ? OT_OP_SUBTRACT : OT_OP_ADD, cu(q, 127), e);
    return ot_build_bitcast_convert(q->c, bin(q, OT_OP_SHIFT_LEFT, ex, cu(q, 23)), OT_F32);
}

/* f32(10^(i-6)) for a u32 decade i (0..6): a chain of selects */
static ot_instr *decade_scale(qb *q, ot_instr *i) {
    ot_instr *r = cf(q, pow10f_dec(0));
    for (int l = 1; l < 7; l++)
        r = sel(q, cmp(q, i, cu(q, (uint32_t)l), OT_CMP_GE), cf(q, pow10f_dec(l)), r);
    return r;
}

/* linspace point k (u32) of a decade with 2^e intervals (step = 0.9 / 2^e, half = 2^(e-1)) */
static ot_instr *lin_point(qb *q, ot_instr *k, ot_instr *e, ot_instr *step, ot_instr *n) {
    /* torch's halfway index: steps / 2 = (2^e + 1) / 2 */
    ot_instr *half = bin(q, OT_OP_SHIFT_RIGHT_LOGICAL, bin(q, OT_OP_ADD, n, cu(q, 1)), cu(q, 1));
    ot_instr *lo = bin(q, OT_OP_ADD, cf(q, 0.1f), bin(q, OT_OP_MULTIPLY, step, u2f(q, k)));
    ot_instr *hi = bin(q, OT_OP_SUBTRACT, cf(q, 1.0f),
                       bin(q, OT_OP_MULTIPLY, step, u2f(q, bin(q, OT_OP_SUBTRACT, n, k))));
    (void)e;
    return sel(q, cmp(q, k, half, OT_CMP_LT), lo, hi);
}

/* The map's magnitude at index m (u32, 0..top) */
static ot_instr *decode_mag(qb *q, ot_instr *m, bool sgn) {
    uint32_t u = sgn ? 0 : 1, top = sgn ? 128 : 255;
    /* e = floor(log2(m + u)) from the f32 exponent of m + u (m + u >= 1 where it matters) */
    ot_instr *mu = bin(q, OT_OP_MAXIMUM, bin(q, OT_OP_ADD, m, cu(q, u)), cu(q, 1));
    ot_instr *bits = ot_build_bitcast_convert(q->c, u2f(q, mu), OT_U32);
    ot_instr *e =
        bin(q, OT_OP_SUBTRACT, bin(q, OT_OP_SHIFT_RIGHT_LOGICAL, bits, cu(q, 23)), cu(q, 127));
    ot_instr *n = bin(q, OT_OP_SHIFT_LEFT, cu(q, 1), e); /* 2^e intervals */
    ot_instr *i = bin(q, OT_OP_MAXIMUM, e, cu(q, u));    /* >= u: i = e - u >= 0 */
    i = bin(q, OT_OP_SUBTRACT, i, cu(q, u));
    ot_instr *j = bin(q, OT_OP_SUBTRACT, mu, n);
    ot_instr *step = bin(q, OT_OP_MULTIPLY, cf(q, 1.0f - 0.1f), pow2f(q, e, true));
    ot_instr *b0 = lin_point(q, j, e, step, n);
    ot_instr *b1 = lin_point(q, bin(q, OT_OP_ADD, j, cu(q, 1)), e, step, n);
    ot_instr *mean = bin(q, OT_OP_DIVIDE, bin(q, OT_OP_ADD, b0, b1), cf(q, 2.0f));
    ot_instr *v = bin(q, OT_OP_MULTIPLY, decade_scale(q, i), mean);
    v = sel(q, cmp(q, m, cu(q, 0), OT_CMP_EQ), cf(q, 0.0f), v);
    return sel(q, cmp(q, m, cu(q, top), OT_CMP_GE), cf(q, 1.0f), v);
}

static ot_instr *block_bcast(qb *q, ot_instr *absmax, int64_t len) {
    ot_shape b2;
    int64_t d2[2] = {len / OT_TPU_INT8_BLOCK, OT_TPU_INT8_BLOCK};
    if (ot_shape_make(&b2, OT_F32, 2, d2) != OT_OK) return NULL;
    int64_t dim0 = 0;
    return ot_build_reshape(q->c, ot_build_broadcast(q->c, absmax, b2, &dim0, 1), q->fs);
}

static bool qb_init(qb *q, ot_computation *c, int64_t len) {
    q->c = c;
    return ot_shape_make(&q->fs, OT_F32, 1, &len) == OT_OK &&
           ot_shape_make(&q->us, OT_U32, 1, &len) == OT_OK &&
           ot_shape_make(&q->ps, OT_PRED, 1, &len) == OT_OK;
}

ot_instr *ot_quant8_dequantize(ot_computation *c, ot_instr *codes, ot_instr *absmax, bool sgn) {
    if (!codes || !absmax) return NULL;
    int64_t len = codes->shape.array.dims[0];
    qb q;
    if (!qb_init(&q, c, len)) return NULL;
    ot_instr *cu32 = ot_build_convert(c, codes, OT_U32);
    ot_instr *v;
    if (sgn) {
        ot_instr *neg = cmp(&q, cu32, cu(&q, 127), OT_CMP_LT);
        ot_instr *m = sel(&q, neg, bin(&q, OT_OP_SUBTRACT, cu(&q, 127), cu32),
                          bin(&q, OT_OP_SUBTRACT, cu32, cu(&q, 127)));
        /* m of a negative code is computed with the unclamped subtraction only where used */
        ot_instr *mag = decode_mag(&q, m, true);
        v = sel(&q, neg, ot_build_unary(c, OT_OP_NEGATE, mag), mag);
    } else {
        v = decode_mag(&q, cu32, false);
    }
    return bin(&q, OT_OP_MULTIPLY, v, block_bcast(&q, absmax, len));
}

ot_status ot_quant8_quantize(ot_computation *c, ot_computation *max_f32, ot_instr *x, bool sgn,
                             ot_instr **codes, ot_instr **absmax) {
    *codes = *absmax = NULL;
    if (!x) return OT_OK; /* a failed build: the module's status says so */
    int64_t len = x->shape.array.dims[0];
    qb q;
    if (!qb_init(&q, c, len)) return ot_error(OT_ERR_INVALID_ARGUMENT, "int8 state: length");
    /* the updated state is materialized once (an optimization barrier): the block maximum and
     * the quantization read it, instead of each recomputing the dequantization and update */
    x = ot_build_opt_barrier(c, x);
    /* per block of 256: absmax = max |x|, 1 for an all-zero block */
    ot_shape b2;
    int64_t d2[2] = {len / OT_TPU_INT8_BLOCK, OT_TPU_INT8_BLOCK};
    OT_CHECK(ot_shape_make(&b2, OT_F32, 2, d2));
    ot_instr *ax = ot_build_unary(c, OT_OP_ABS, x);
    ot_instr *zero = ot_build_constant_scalar(c, OT_F32, 0.0);
    int64_t rd = 1;
    ot_instr *am =
        ot_build_reduce(c, (ot_instr *[]){ot_build_reshape(c, ax, b2)}, &zero, 1, &rd, 1, max_f32);
    ot_shape bs;
    OT_CHECK(ot_shape_make(&bs, OT_F32, 1, &d2[0]));
    ot_shape bp = bs;
    bp.dtype = OT_PRED;
    ot_instr *z = ot_build_broadcast(c, zero, bs, NULL, 0);
    ot_instr *one = ot_build_broadcast(c, ot_build_constant_scalar(c, OT_F32, 1.0), bs, NULL, 0);
    am = ot_build_select(c, ot_build_compare(c, am, z, OT_CMP_EQ, OT_CMP_TYPE_DEFAULT), one, am);
    (void)bp;
    ot_instr *xn = bin(&q, OT_OP_DIVIDE, x, block_bcast(&q, am, len));
    ot_instr *neg = cmp(&q, xn, cf(&q, 0.0f), OT_CMP_LT);
    ot_instr *a = ot_build_unary(c, OT_OP_ABS, xn);
    uint32_t u = sgn ? 0 : 1, top = sgn ? 128 : 255;
    /* the decade from thresholds 10^(l-7), the position from the decade's linspace */
    ot_instr *i = cu(&q, 0);
    for (int l = 1; l < 7; l++)
        i = bin(
            &q, OT_OP_ADD, i,
            sel(&q, cmp(&q, a, cf(&q, (float)pow(10.0, l - 7)), OT_CMP_GE), cu(&q, 1), cu(&q, 0)));
    ot_instr *e = bin(&q, OT_OP_ADD, i, cu(&q, u));
    ot_instr *n = bin(&q, OT_OP_SHIFT_LEFT, cu(&q, 1), e);
    ot_instr *step = bin(&q, OT_OP_MULTIPLY, cf(&q, 1.0f - 0.1f), pow2f(&q, e, true));
    ot_instr *jf = bin(
        &q, OT_OP_DIVIDE,
        bin(&q, OT_OP_SUBTRACT, bin(&q, OT_OP_DIVIDE, a, decade_scale(&q, i)), cf(&q, 0.1f)), step);
    /* clamped to [0, 2^e - 1] with maximum / minimum (NaN-free here: a is finite) */
    jf = bin(&q, OT_OP_MINIMUM, bin(&q, OT_OP_MAXIMUM, jf, cf(&q, 0.0f)),
             bin(&q, OT_OP_SUBTRACT, u2f(&q, n), cf(&q, 1.0f)));
    ot_instr *m0 = bin(&q, OT_OP_ADD, bin(&q, OT_OP_SUBTRACT, n, cu(&q, u)), f2u_floor(&q, jf));
    /* candidates m0 - 1, m0, m0 + 1 within [0, top] (a negative value has no -1.0: top - 1) */
    ot_instr *hi = sgn ? sel(&q, neg, cu(&q, top - 1), cu(&q, top)) : cu(&q, top);
    ot_instr *cand[3];
    cand[0] = bin(&q, OT_OP_SUBTRACT, bin(&q, OT_OP_MAXIMUM, m0, cu(&q, 1)), cu(&q, 1));
    cand[1] = bin(&q, OT_OP_MINIMUM, m0, hi);
    cand[2] = bin(&q, OT_OP_MINIMUM, bin(&q, OT_OP_ADD, m0, cu(&q, 1)), hi);
    cand[0] = bin(&q, OT_OP_MINIMUM, cand[0], hi);
    ot_instr *d[3];
    for (int k = 0; k < 3; k++)
        d[k] =
            ot_build_unary(c, OT_OP_ABS, bin(&q, OT_OP_SUBTRACT, a, decode_mag(&q, cand[k], sgn)));
    /* ascending m, strictly smaller replaces: the lower m on ties (x >= 0) */
    ot_instr *bu = cand[0], *bd = d[0];
    for (int k = 1; k < 3; k++) {
        ot_instr *lt = cmp(&q, d[k], bd, OT_CMP_LT);
        bu = sel(&q, lt, cand[k], bu);
        bd = sel(&q, lt, d[k], bd);
    }
    ot_instr *m = bu;
    if (sgn) { /* x < 0: codes run the other way, descending m with strict replacement */
        ot_instr *nu = cand[2], *nd = d[2];
        for (int k = 1; k >= 0; k--) {
            ot_instr *lt = cmp(&q, d[k], nd, OT_CMP_LT);
            nu = sel(&q, lt, cand[k], nu);
            nd = sel(&q, lt, d[k], nd);
        }
        m = sel(&q, neg, bin(&q, OT_OP_SUBTRACT, cu(&q, 127), nu),
                bin(&q, OT_OP_ADD, cu(&q, 127), bu));
    }
    *codes = ot_build_convert(c, m, OT_U8);
    *absmax = am;
    return OT_OK;
}
