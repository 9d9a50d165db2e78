/* Complex numbers (c64, c128) in the reference evaluator: every instruction that computes on or
 * produces complex values, and complex, real, imag and fft whatever their dtypes
 * (ir_instr_complex selects them). Data movers, tuples and control flow are dtype-agnostic and
 * run their usual kernels (gather and scatter among them: a scatter's computation runs through the
 * evaluator, ex_scalar_fn's general path).
 *
 * Arithmetic is done in the component type (float for c64, double for c128), as XLA's CPU
 * backend emits it: add and subtract per component; multiply (ac - bd, ad + bc); divide by
 * Smith's algorithm (scaled by the larger divisor component, so |d|^2 cannot overflow); abs is
 * ex_cabs_f32 (c64) or hypot (c128); exp is e^re (cos im, sin im) through the library's own real
 * exp, sin and cos kernels. Under the default FTZ mode, subnormal components of inputs and results
 * are zero (XLA runs with FTZ/DAZ; docs/exec.md). Anything else on complex values is UNIMPLEMENTED,
 * naming the op and the dtype. */
#include "exec/exec_internal.h"
#include "ir/op_traits.h"

#include <cblas.h>
#include <float.h>
#undef I /* <complex.h>, pulled in by cblas.h */

/* The select and sum loops are moves or lane-wise IEEE adds, so every vector width gives the same
 * bits: GCC builds them for AVX-512, AVX2 and the baseline, and the loader picks the widest the
 * CPU has. Not the multiply: GCC 12's vectorizer turns the interleaved complex product into
 * fmaddsub even under -ffp-contract=off, which changes its bits (test_complex_ops checks them). */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && __GNUC__ >= 11 &&            \
    !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define CX_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CX_CLONES
#endif

static ot_status refuse(const ot_instr *i, ot_dtype t) {
    return ot_error(OT_ERR_UNIMPLEMENTED, "%s: %s on %s is not implemented", EX_NAME(i),
                    ot_opcode_name(i->opcode), ot_dtype_name(t));
}

/* The complex dtype an instruction works on (its result's, else its first complex operand's). */
static ot_dtype complex_dtype(const ot_instr *i) {
    if (i->shape.kind == OT_IR_ARRAY && ot_dtype_is_complex(i->shape.array.dtype))
        return i->shape.array.dtype;
    for (int k = 0; k < i->noperands; k++)
        if (i->operands[k]->shape.kind == OT_IR_ARRAY &&
            ot_dtype_is_complex(i->operands[k]->shape.array.dtype))
            return i->operands[k]->shape.array.dtype;
    return i->shape.kind == OT_IR_ARRAY ? i->shape.array.dtype : OT_DTYPE_INVALID;
}

static inline float ftz_f(float v) {
    return ex_ftz && fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v;
}
static inline double ftz_d(double v) {
    return ex_ftz && fabs(v) < DBL_MIN ? copysign(0.0, v) : v;
}

static inline float flush_f(float v) {
    return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v;
}
static inline double flush_d(double v) {
    return fabs(v) < DBL_MIN ? copysign(0.0, v) : v;
}

/* One of add, subtract, multiply over e < n with the flush F (empty: none). */
#define COMPLEX_LOOP(OP, T, F)                                                                     \
    do {                                                                                           \
        if ((OP) == OT_OP_MULTIPLY)                                                                \
            for (int64_t e = 0; e < n; e++) {                                                      \
                T ar = F(a[2 * e]), ai = F(a[2 * e + 1]), br = F(b[2 * e]), bi = F(b[2 * e + 1]);  \
                T p = ar * br, q = ai * bi, s = ar * bi, t = ai * br;                              \
                y[2 * e] = F(p - q);                                                               \
                y[2 * e + 1] = F(s + t);                                                           \
            }                                                                                      \
        else if ((OP) == OT_OP_ADD)                                                                \
            for (int64_t e = 0; e < 2 * n; e++) y[e] = F(F(a[e]) + F(b[e]));                       \
        else                                                                                       \
            for (int64_t e = 0; e < 2 * n; e++) y[e] = F(F(a[e]) - F(b[e]));                       \
    } while (0)

/* Elementwise arithmetic on n complex elements; T the component type, F its flush, FP the same
 * flush without the FTZ-mode test. Add, subtract and multiply have loops of their own (without
 * the flush when the mode is off), which the compiler vectorizes; the arithmetic is the same. */
#define COMPLEX_BINARY(NAME, T, F, FP, HYPOT)                                                      \
    static ot_status NAME(ot_opcode op, const T *a, const T *b, T *y, int64_t n) {                 \
        if (op == OT_OP_ADD || op == OT_OP_SUBTRACT || op == OT_OP_MULTIPLY) {                     \
            if (ex_ftz)                                                                            \
                COMPLEX_LOOP(op, T, FP);                                                           \
            else                                                                                   \
                COMPLEX_LOOP(op, T, );                                                             \
            return OT_OK;                                                                          \
        }                                                                                          \
        for (int64_t e = 0; e < n; e++) {                                                          \
            T ar = F(a[2 * e]), ai = F(a[2 * e + 1]), br = F(b[2 * e]), bi = F(b[2 * e + 1]);      \
            T r, im;                                                                               \
            switch (op) {                                                                          \
            case OT_OP_ADD: r = ar + br, im = ai + bi; break;                                      \
            case OT_OP_SUBTRACT: r = ar - br, im = ai - bi; break;                                 \
            case OT_OP_MULTIPLY: {                                                                 \
                T p = ar * br, q = ai * bi, s = ar * bi, t = ai * br;                              \
                r = p - q, im = s + t;                                                             \
                break;                                                                             \
            }                                                                                      \
            case OT_OP_DIVIDE: {                                                                   \
                if (fabs((double)br) >= fabs((double)bi)) {                                        \
                    T rat = bi / br, den = br + bi * rat;                                          \
                    r = (ar + ai * rat) / den, im = (ai - ar * rat) / den;                         \
                } else {                                                                           \
                    T rat = br / bi, den = br * rat + bi;                                          \
                    r = (ar * rat + ai) / den, im = (ai * rat - ar) / den;                         \
                }                                                                                  \
                if (br == 0 && bi == 0) { /* x / 0: infinities (or NaN for 0 / 0), as C99 G */     \
                    r = ar / HYPOT(br, bi), im = ai / HYPOT(br, bi);                               \
                }                                                                                  \
                break;                                                                             \
            }                                                                                      \
            default: return OT_ERR_UNIMPLEMENTED;                                                  \
            }                                                                                      \
            y[2 * e] = F(r);                                                                       \
            y[2 * e + 1] = F(im);                                                                  \
        }                                                                                          \
        return OT_OK;                                                                              \
    }
COMPLEX_BINARY(binary_c64, float, ftz_f, flush_f, hypotf)
COMPLEX_BINARY(binary_c128, double, ftz_d, flush_d, hypot)
#undef COMPLEX_BINARY
#undef COMPLEX_LOOP

/* select of n elements of w 8-byte words each (c64: 1, c128: 2), moved as integers: bits. */
CX_CLONES static void select_u64(const uint8_t *p, const uint64_t *t, const uint64_t *f,
                                 uint64_t *o, int64_t n, int w) {
    if (w == 1)
        for (int64_t e = 0; e < n; e++) o[e] = p[e] ? t[e] : f[e];
    else
        for (int64_t e = 0; e < n; e++) {
            o[2 * e] = p[e] ? t[2 * e] : f[2 * e];
            o[2 * e + 1] = p[e] ? t[2 * e + 1] : f[2 * e + 1];
        }
}

/* exp(a + bi) = e^a (cos b + i sin b), each real function the evaluator's own (vmath). */
static ot_status complex_exp(ot_dtype t, const void *x, void *y, int64_t n) {
    ot_dtype p = ot_dtype_complex_part(t);
    size_t ps = ot_dtype_size(p);
    char *buf = ot_malloc((size_t)(n ? n : 1) * ps * 5);
    if (!buf) return ot_error(OT_ERR_OUT_OF_MEMORY, "exponential: out of memory");
    char *re = buf, *im = buf + n * ps, *ex = im + n * ps, *co = ex + n * ps, *si = co + n * ps;
    for (int64_t e = 0; e < n; e++) {
        memcpy(re + e * ps, (const char *)x + 2 * e * ps, ps);
        memcpy(im + e * ps, (const char *)x + (2 * e + 1) * ps, ps);
    }
    ot_status st = ex_unary(OT_OP_EXP, p, p, re, ex, n);
    if (st == OT_OK) st = ex_unary(OT_OP_COS, p, p, im, co, n);
    if (st == OT_OK) st = ex_unary(OT_OP_SIN, p, p, im, si, n);
    if (st == OT_OK) {
        for (int64_t e = 0; e < n; e++) {
            if (p == OT_F32) {
                float *o = (float *)y + 2 * e, m = ((float *)(void *)ex)[e];
                o[0] = ftz_f(m * ((float *)(void *)co)[e]);
                o[1] = ftz_f(m * ((float *)(void *)si)[e]);
            } else {
                double *o = (double *)y + 2 * e, m = ((double *)(void *)ex)[e];
                o[0] = ftz_d(m * ((double *)(void *)co)[e]);
                o[1] = ftz_d(m * ((double *)(void *)si)[e]);
            }
        }
    }
    ot_free(buf);
    return st;
}

ot_status ex_complex_elementwise(const ot_instr *i, const void *const *in, void *y, int64_t n) {
    ot_opcode op = i->opcode;
    ot_dtype rt = i->shape.array.dtype;
    ot_dtype t0 = i->operands[0]->shape.array.dtype;
    const void *a = in[0];
    switch (op) {
    /* the movers below copy components as integers of their size (bits, never rounded) */
    case OT_OP_COMPLEX: {
        const void *b = in[1];
        if (t0 == OT_F32) {
            const uint32_t *re = a, *im = b;
            uint32_t *o = y;
            for (int64_t e = 0; e < n; e++) o[2 * e] = re[e], o[2 * e + 1] = im[e];
        } else {
            const uint64_t *re = a, *im = b;
            uint64_t *o = y;
            for (int64_t e = 0; e < n; e++) o[2 * e] = re[e], o[2 * e + 1] = im[e];
        }
        return OT_OK;
    }
    case OT_OP_REAL:
    case OT_OP_IMAG: {
        size_t ps = ot_dtype_size(rt);
        if (!ot_dtype_is_complex(t0)) { /* of a real: itself, and zero */
            if (op == OT_OP_REAL)
                memcpy(y, a, (size_t)n * ps);
            else
                memset(y, 0, (size_t)n * ps);
            return OT_OK;
        }
        int part = op == OT_OP_IMAG;
        if (ps == 4)
            for (int64_t e = 0; e < n; e++)
                ((uint32_t *)y)[e] = ((const uint32_t *)a)[2 * e + part];
        else
            for (int64_t e = 0; e < n; e++)
                ((uint64_t *)y)[e] = ((const uint64_t *)a)[2 * e + part];
        return OT_OK;
    }
    case OT_OP_COPY: memcpy(y, a, (size_t)n * ot_dtype_size(rt)); return OT_OK;
    case OT_OP_NEGATE: {
        ot_dtype p = ot_dtype_complex_part(rt);
        for (int64_t e = 0; e < 2 * n; e++) { /* a sign flip per component: bits, no flush */
            if (p == OT_F32)
                ((float *)y)[e] = -((const float *)a)[e];
            else
                ((double *)y)[e] = -((const double *)a)[e];
        }
        return OT_OK;
    }
    case OT_OP_ABS:
        for (int64_t e = 0; e < n; e++) {
            if (rt == OT_F32) {
                const float *c = (const float *)a + 2 * e;
                ((float *)y)[e] = ftz_f(ex_cabs_f32(ftz_f(c[0]), ftz_f(c[1])));
            } else {
                const double *c = (const double *)a + 2 * e;
                ((double *)y)[e] = ftz_d(hypot(ftz_d(c[0]), ftz_d(c[1])));
            }
        }
        return OT_OK;
    case OT_OP_EXP: return complex_exp(rt, a, y, n);
    case OT_OP_ADD:
    case OT_OP_SUBTRACT:
    case OT_OP_MULTIPLY:
    case OT_OP_DIVIDE: {
        const void *b = in[1];
        ot_status st = rt == OT_C64 ? binary_c64(op, a, b, y, n) : binary_c128(op, a, b, y, n);
        return st == OT_OK ? OT_OK : refuse(i, rt);
    }
    case OT_OP_COMPARE: {
        ot_cmp_dir d = i->attrs->cmp_dir;
        if (d != OT_CMP_EQ && d != OT_CMP_NE) return refuse(i, t0);
        const void *b = in[1];
        uint8_t *py = y;
        for (int64_t e = 0; e < n; e++) {
            bool eq;
            if (t0 == OT_C64) {
                const float *p = (const float *)a + 2 * e, *q = (const float *)b + 2 * e;
                eq = ftz_f(p[0]) == ftz_f(q[0]) && ftz_f(p[1]) == ftz_f(q[1]);
            } else {
                const double *p = (const double *)a + 2 * e, *q = (const double *)b + 2 * e;
                eq = ftz_d(p[0]) == ftz_d(q[0]) && ftz_d(p[1]) == ftz_d(q[1]);
            }
            py[e] = d == OT_CMP_EQ ? eq : !eq;
        }
        return OT_OK;
    }
    case OT_OP_SELECT: {
        bool scalar = i->operands[0]->shape.array.rank == 0 && i->shape.array.rank > 0;
        if (scalar) {
            memcpy(y, *(const uint8_t *)in[0] ? in[1] : in[2], (size_t)n * ot_dtype_size(rt));
            return OT_OK;
        }
        select_u64(in[0], in[1], in[2], y, n, rt == OT_C64 ? 1 : 2);
        return OT_OK;
    }
    case OT_OP_CONVERT: {
        ot_dtype p = ot_dtype_complex_part(rt);
        if (!ot_dtype_is_complex(rt)) return refuse(i, t0); /* the verifier refuses it first */
        if (ot_dtype_is_complex(t0))                        /* c64 <-> c128: each component */
            return ex_convert(ot_dtype_complex_part(t0), p, a, y, 2 * n);
        /* real -> complex: the value converted to the component type, imaginary zero. Element
         * e is read before it is written: the fast kernel runs this in place over a dying input
         * of the same width (s64, u64, f64 -> c64), where zeroing the whole output first had
         * zeroed the input too (random_ops seed 28: 0 / -1 came out NaN). */
        size_t ps = ot_dtype_size(p);
        for (int64_t e = 0; e < n; e++) {
            char tmp[8];
            size_t es = ot_dtype_size(t0);
            OT_CHECK(ex_convert(t0, p, (const char *)a + e * es, tmp, 1));
            memcpy((char *)y + 2 * e * ps, tmp, ps);
            memset((char *)y + (2 * e + 1) * ps, 0, ps);
        }
        return OT_OK;
    }
    default: return refuse(i, complex_dtype(i));
    }
}

/* Complex sums (reduce whose reducer adds its two parameters). Each component is summed in the
 * canonical order of numerics.h: along the last non-unit dim in EX_RED_LANES lanes per block of
 * EX_RED_BLOCK, else one by one in input order; every add flushes its inputs and result under
 * FTZ, as the real sums' reducer does. The primitives below serve the reference (here) and the
 * fast kernel (fast_complex.c) alike, so both give the same bits. The lane loops are integer-free
 * IEEE adds (nothing to contract), so every vector width gives the same bits: GCC builds them for
 * AVX-512, AVX2 and the baseline (CX_CLONES). */

enum { CX_W = 2 * EX_RED_LANES }; /* components in a group of lanes */

int64_t ex_csum_blocks(int64_t n) {
    int64_t whole = n / EX_RED_LANES * EX_RED_LANES;
    return (whole + EX_RED_BLOCK - 1) / EX_RED_BLOCK;
}

int64_t ex_csum_tail(int64_t n) {
    return n / EX_RED_LANES * EX_RED_LANES;
}

/* The lanes of one block (2 len components, len a positive multiple of EX_RED_LANES) and their
 * pairwise tree into out[0..2); F the flush. */
#define CSUM_BLOCK(NAME, T, F)                                                                     \
    CX_CLONES static void NAME(const T *x, int64_t len, T *out) {                                  \
        T lane[CX_W];                                                                              \
        for (int l = 0; l < CX_W; l++) lane[l] = F(x[l]);                                          \
        for (int64_t r = CX_W; r < 2 * len; r += CX_W)                                             \
            for (int l = 0; l < CX_W; l++) lane[l] = F(lane[l] + F(x[r + l]));                     \
        for (int s = CX_W / 2; s >= 2; s /= 2) /* complex lane c with lane c + s/2 */              \
            for (int l = 0; l < s; l++) lane[l] = F(lane[l] + lane[l + s]);                        \
        out[0] = lane[0];                                                                          \
        out[1] = lane[1];                                                                          \
    }
#define NOFLUSH(v) (v)
CSUM_BLOCK(block_f32, float, NOFLUSH)
CSUM_BLOCK(block_f32_ftz, float, flush_f)
CSUM_BLOCK(block_f64, double, NOFLUSH)
CSUM_BLOCK(block_f64_ftz, double, flush_d)
#undef CSUM_BLOCK

/* acc[k] = acc[k] + x[k] per component over 2 n components (the flushed inputs and result). */
#define CSUM_ACC(NAME, T, F)                                                                       \
    CX_CLONES static void NAME(const T *x, int64_t n, T *acc) {                                    \
        for (int64_t k = 0; k < 2 * n; k++) acc[k] = F(F(acc[k]) + F(x[k]));                       \
    }
CSUM_ACC(acc_f32, float, NOFLUSH)
CSUM_ACC(acc_f32_ftz, float, flush_f)
CSUM_ACC(acc_f64, double, NOFLUSH)
CSUM_ACC(acc_f64_ftz, double, flush_d)
#undef CSUM_ACC
#undef NOFLUSH

void ex_csum_block(ot_dtype t, const void *x, int64_t n, int64_t b, bool ftz, void *tree) {
    int64_t b0 = b * EX_RED_BLOCK, b1 = b0 + EX_RED_BLOCK, whole = ex_csum_tail(n);
    int64_t len = (b1 < whole ? b1 : whole) - b0;
    if (t == OT_C64) {
        const float *p = (const float *)x + 2 * b0;
        (ftz ? block_f32_ftz : block_f32)(p, len, tree);
    } else {
        const double *p = (const double *)x + 2 * b0;
        (ftz ? block_f64_ftz : block_f64)(p, len, tree);
    }
}

void ex_csum_acc(ot_dtype t, const void *x, int64_t n, bool ftz, void *acc) {
    if (t == OT_C64)
        (ftz ? acc_f32_ftz : acc_f32)(x, n, acc);
    else
        (ftz ? acc_f64_ftz : acc_f64)(x, n, acc);
}

void ex_csum_row(ot_dtype t, const void *x, int64_t n, bool ftz, void *acc) {
    size_t es = ot_dtype_size(t);
    char tree[16];
    for (int64_t b = 0, nb = ex_csum_blocks(n); b < nb; b++) {
        ex_csum_block(t, x, n, b, ftz, tree);
        ex_csum_acc(t, tree, 1, ftz, acc);
    }
    for (int64_t r = ex_csum_tail(n); r < n; r++)
        ex_csum_acc(t, (const char *)x + r * (int64_t)es, 1, ftz, acc);
}

static bool reducer_is_add(const ot_computation *c) {
    const ot_instr *r = c ? c->root : NULL;
    return r && r->opcode == OT_OP_ADD && r->noperands == 2 &&
           r->operands[0]->opcode == OT_OP_PARAMETER && r->operands[1]->opcode == OT_OP_PARAMETER &&
           r->operands[0] != r->operands[1] && c->nparams == 2;
}

bool ex_complex_sum(const ot_instr *i) {
    ot_dtype t = i->shape.kind == OT_IR_ARRAY ? i->shape.array.dtype : OT_DTYPE_INVALID;
    return i->opcode == OT_OP_REDUCE && i->noperands == 2 && i->ncalled >= 1 &&
           ot_dtype_is_complex(t) && i->operands[0]->shape.kind == OT_IR_ARRAY &&
           i->operands[0]->shape.array.dtype == t && reducer_is_add(i->called[0]);
}

static ot_status reduce_add(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    if (!ex_complex_sum(i))
        return ot_error(OT_ERR_UNIMPLEMENTED,
                        "%s: reduce on %s is implemented only as one sum (a reducer that adds "
                        "its two parameters)",
                        EX_NAME(i), ot_dtype_name(complex_dtype(i)));
    OT_CHECK(ot_value_alloc_array(out, &i->shape.array));
    ot_dtype t = i->shape.array.dtype;
    size_t es = ot_dtype_size(t);
    const ot_shape *is = ex_arr(ops[0]), *os = &i->shape.array;
    bool reduced[OT_MAX_RANK] = {false};
    for (int k = 0; k < i->attrs->ndims; k++) reduced[i->attrs->dims[k]] = true;
    int64_t on = ot_shape_numel_unchecked(os), in = ot_shape_numel_unchecked(is);
    const char *x = ops[0]->array.data;
    char *y = out->array.data;
    for (int64_t e = 0; e < on; e++) memcpy(y + e * (int64_t)es, ops[1]->array.data, es);
    if (in == 0 || on == 0) return OT_OK;
    int64_t rn = in / on; /* reduced elements per output */
    if (ex_reduce_last_dim(i)) {
        /* lanes: each output's reduced elements gathered in row-major order, then one row */
        int64_t istr[OT_MAX_RANK], rdims[OT_MAX_RANK], odims[OT_MAX_RANK], rstr[OT_MAX_RANK],
            ostr[OT_MAX_RANK], ridx[OT_MAX_RANK] = {0}, oidx[OT_MAX_RANK] = {0};
        ot_shape_strides(is, istr);
        int nr = 0, no = 0;
        for (int d = 0; d < is->rank; d++) {
            if (reduced[d])
                rdims[nr] = is->dims[d], rstr[nr++] = istr[d];
            else
                odims[no] = is->dims[d], ostr[no++] = istr[d];
        }
        int64_t *roff = ot_malloc((size_t)rn * (sizeof *roff + es));
        if (!roff) {
            ot_value_release(out);
            return ot_error(OT_ERR_OUT_OF_MEMORY, "%s: out of memory", EX_NAME(i));
        }
        char *row = (char *)(roff + rn);
        for (int64_t k = 0; k < rn; k++) {
            int64_t off = 0;
            for (int d = 0; d < nr; d++) off += ridx[d] * rstr[d];
            roff[k] = off;
            ex_next_index(ridx, rdims, nr);
        }
        for (int64_t o = 0; o < on; o++) {
            int64_t base = 0;
            for (int d = 0; d < no; d++) base += oidx[d] * ostr[d];
            for (int64_t k = 0; k < rn; k++)
                memcpy(row + k * (int64_t)es, x + (base + roff[k]) * (int64_t)es, es);
            ex_csum_row(t, row, rn, ex_ftz, y + o * (int64_t)es);
            ex_next_index(oidx, odims, no);
        }
        ot_free(roff);
        return OT_OK;
    }
    /* one by one in input order: the last non-unit dim is kept, so each run of the input's last
     * dim (or a unit one, reduced) adds into a run of as many consecutive outputs */
    int64_t last = is->rank ? is->dims[is->rank - 1] : 1;
    int64_t idx[OT_MAX_RANK] = {0}, ostr[OT_MAX_RANK];
    ot_shape_strides(os, ostr);
    for (int64_t e = 0; e < in; e += last) {
        int64_t o = 0;
        for (int d = 0, od = 0; d < is->rank; d++)
            if (!reduced[d]) o += idx[d] * ostr[od++];
        ex_csum_acc(t, x + e * (int64_t)es, last, ex_ftz, y + o * (int64_t)es);
        if (is->rank) idx[is->rank - 1] = last - 1;
        ex_next_index(idx, is->dims, is->rank);
    }
    return OT_OK;
}

/* dot_general on complex operands: each operand gathered into [batch, free, contract] order
 * (rhs: [batch, contract, free]), then one cblas_cgemm / cblas_zgemm per batch. */
static ot_status gather_dims(const ot_shape *s, const int64_t *perm, int np, size_t es,
                             const char *src, char *dst) {
    int64_t str[OT_MAX_RANK], idx[OT_MAX_RANK] = {0}, pd[OT_MAX_RANK];
    ot_shape_strides(s, str);
    for (int k = 0; k < np; k++) pd[k] = s->dims[perm[k]];
    int64_t n = ot_shape_numel_unchecked(s);
    for (int64_t e = 0; e < n; e++) {
        int64_t off = 0;
        for (int k = 0; k < np; k++) off += idx[k] * str[perm[k]];
        memcpy(dst + e * es, src + off * es, es);
        ex_next_index(idx, pd, np);
    }
    return OT_OK;
}

static int order_dims(const ot_shape *s, const int64_t *batch, int nb, const int64_t *con, int nc,
                      bool contract_last, int64_t *perm, int64_t *nfree_out) {
    bool used[OT_MAX_RANK] = {false};
    int k = 0;
    for (int q = 0; q < nb; q++) perm[k++] = batch[q], used[batch[q]] = true;
    for (int q = 0; q < nc; q++) used[con[q]] = true;
    int64_t nfree = 1;
    int free_at = k;
    if (!contract_last) {
        for (int q = 0; q < nc; q++) perm[k++] = con[q];
        free_at = k;
    }
    for (int d = 0; d < s->rank; d++)
        if (!used[d]) perm[k++] = d, nfree *= s->dims[d];
    if (contract_last)
        for (int q = 0; q < nc; q++) perm[k++] = con[q];
    (void)free_at;
    *nfree_out = nfree;
    return k;
}

static ot_status dot(const ot_instr *i, const ot_value *const *ops, ot_value *out) {
    const ot_dot_dims *dd = i->attrs->dot;
    ot_dtype t = i->shape.array.dtype;
    if (!dd || ex_arr(ops[0])->dtype != t || ex_arr(ops[1])->dtype != t) return refuse(i, t);
    const ot_shape *ls = ex_arr(ops[0]), *rs = ex_arr(ops[1]);
    int64_t lp[OT_MAX_RANK], rp[OT_MAX_RANK], m, n, kk = 1, nb = 1;
    order_dims(ls, dd->lhs_batch, dd->nbatch, dd->lhs_contract, dd->ncontract, true, lp, &m);
    order_dims(rs, dd->rhs_batch, dd->nbatch, dd->rhs_contract, dd->ncontract, false, rp, &n);
    for (int q = 0; q < dd->ncontract; q++) kk *= ls->dims[dd->lhs_contract[q]];
    for (int q = 0; q < dd->nbatch; q++) nb *= ls->dims[dd->lhs_batch[q]];
    size_t es = ot_dtype_size(t);
    OT_CHECK(ot_value_alloc_array(out, &i->shape.array));
    int64_t ln = ot_shape_numel_unchecked(ls), rn = ot_shape_numel_unchecked(rs);
    char *a = ot_malloc((size_t)(ln + rn + 1) * es);
    if (!a) {
        ot_value_release(out);
        return ot_error(OT_ERR_OUT_OF_MEMORY, "%s: out of memory", EX_NAME(i));
    }
    char *b = a + ln * es;
    gather_dims(ls, lp, ls->rank, es, ops[0]->array.data, a);
    gather_dims(rs, rp, rs->rank, es, ops[1]->array.data, b);
    /* the result is [batch, lhs free, rhs free]: XLA's dot_general order */
    char *y = out->array.data;
    if (m * n == 0) {
        ot_free(a);
        return OT_OK;
    }
    if (kk == 0) memset(y, 0, out->array.nbytes);
    for (int64_t q = 0; q < nb && kk > 0; q++) {
        const char *aq = a + q * m * kk * es, *bq = b + q * kk * n * es;
        char *yq = y + q * m * n * es;
        if (t == OT_C64) {
            const float one[2] = {1, 0}, zero[2] = {0, 0};
            cblas_cgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)kk, one, aq,
                        (int)kk, bq, (int)n, zero, yq, (int)n);
        } else {
            const double one[2] = {1, 0}, zero[2] = {0, 0};
            cblas_zgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)kk, one, aq,
                        (int)kk, bq, (int)n, zero, yq, (int)n);
        }
    }
    ot_free(a);
    return OT_OK;
}

bool ex_complex_passes_through(ot_opcode op) {
    switch (op) {
    case OT_OP_PARAMETER:
    case OT_OP_CONSTANT:
    case OT_OP_BROADCAST:
    case OT_OP_RESHAPE:
    case OT_OP_BITCAST:
    case OT_OP_TRANSPOSE:
    case OT_OP_SLICE:
    case OT_OP_DYNAMIC_SLICE:
    case OT_OP_DYNAMIC_UPDATE_SLICE:
    case OT_OP_CONCATENATE:
    case OT_OP_PAD:
    case OT_OP_REVERSE:
    case OT_OP_GATHER:  /* copies elements by size */
    case OT_OP_SCATTER: /* its computation runs through the evaluator (ex_scalar_fn) */
    case OT_OP_TUPLE:
    case OT_OP_GET_TUPLE_ELEMENT:
    case OT_OP_CALL:
    case OT_OP_WHILE:
    case OT_OP_CONDITIONAL:
    case OT_OP_OPT_BARRIER:
    case OT_OP_FUSION:
    case OT_OP_CUSTOM_CALL: return true; /* each target checks its dtypes (lapack refuses c, z) */
    default: return false;
    }
}

ot_status ex_kernel_complex(ex_ctx *x, const ot_instr *i, const ot_value *const *ops,
                            ot_value *out) {
    (void)x;
    *out = ot_value_empty();
    ot_opcode op = i->opcode;
    if (op == OT_OP_REDUCE) return reduce_add(i, ops, out);
    if (i->shape.kind != OT_IR_ARRAY) return refuse(i, complex_dtype(i));
    ot_dtype rt = i->shape.array.dtype;
    if (op == OT_OP_DOT) return dot(i, ops, out);
    if (op == OT_OP_FFT) {
        OT_CHECK(ot_value_alloc_array(out, &i->shape.array));
        ot_status st = ex_fft(NULL, i, ops[0]->array.data, out->array.data);
        if (st != OT_OK) ot_value_release(out);
        return st;
    }
    bool elementwise_op =
        ot_opcode_is_elementwise(op) || op == OT_OP_COMPLEX || op == OT_OP_REAL || op == OT_OP_IMAG;
    if (!elementwise_op || op == OT_OP_MAP) return refuse(i, complex_dtype(i));
    (void)rt;
    OT_CHECK(ot_value_alloc_array(out, &i->shape.array));
    const void *in[3] = {NULL, NULL, NULL};
    for (int k = 0; k < i->noperands && k < 3; k++) in[k] = ops[k]->array.data;
    ot_status st =
        ex_complex_elementwise(i, in, out->array.data, ot_shape_numel_unchecked(&i->shape.array));
    if (st != OT_OK) ot_value_release(out);
    return st;
}
