/* Native loop fusions (src/codegen): every op the generator emits, on every dtype it supports, and
 * random fusions with broadcasts (scalar, leading, trailing, middle, non-contiguous, transposing),
 * reshapes, iota, converts, compare/select and several outputs, run through compile → execute
 * and compared bit for bit with the reference evaluator, on inputs that include NaNs (signalling
 * and with payloads), infinities, signed zeros and subnormals. Also: the disk cache (a hit on the
 * second compile; a corrupted object detected by its checksum and rebuilt), OPTITPU_CODEGEN=0 and
 * a missing compiler falling back to the interpreter, and the profile naming each path.
 * Runs with a private cache directory. */
#include "codegen/codegen_internal.h"
#include "compiler/native.h"
#include "ot_test.h"
#include "optitpu/optitpu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_cache[256];

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static ot_module *parse(const char *text) {
    ot_module *m = NULL;
    if (ot_hlo_parse(text, strlen(text), NULL, &m) != OT_OK)
        fprintf(stderr, "parse: %s\n%s\n", ot_last_error(), text);
    return m;
}

/* When set, f32/f64 inputs sit around the bottom of the normal range (binary exponents from a
 * few above the smallest normal down into the subnormals), so sums, products and quotients land
 * on both sides of the flush-to-zero boundary. */
static bool g_tiny;
/* When set, f32/f64 elements are ordinary finite values only (no NaN or infinity that would make
 * every long sum NaN or infinite whatever its order). */
static bool g_finite;
/* When set, f32 parameter 0 holds +-(2^24 - 1) * 2^-50 and parameter 1 alternates 2^-100 and
 * 2^100: x*y (even elements) and x/y (odd ones) are exactly 2^-126 - 2^-150, which rounds to
 * FLT_MIN at subnormal precision but which x86's FTZ flushes (tininess after rounding). */
static bool g_band;
static int g_band_param;
/* When set, f64 parameters 0 and 1 are pow's x and y in blocks of 8 elements (one AVX-512 vector)
 * of six kinds: x in (0, 10] and y in [-4, 4]; x next to 1 and |y| up to 2^16 (y·ln x around
 * ±700: overflow, underflow, subnormal results); any positive normal x and |y| up to 1000; the
 * first kind with one lane a special value; a negative x and an integer or half-integer y; any
 * bits. */
static bool g_powd;
static int g_powd_param;
/* When set, f32/f64 elements are rounding's hard cases, by i % 4: quarters k/4 (halfway
 * cases of both signs), values next to 2^23 / 2^52 and 2^24 / 2^53 in steps of a half, any bit
 * pattern (NaNs, infinities, subnormals, huge values), and the special values of fill. */
static bool g_round;

/* When set, an f16 parameter holds every bit pattern (element i: i mod 2^16) and an f32 one the
 * values whose rounding to f16 is decided at a boundary (fill_f16_edges). */
static bool g_f16_all;

/* f32 bits for f16 rounding: below, across and above the f16 subnormal range (2^-25 .. 2^-14,
 * ties in the dropped bits and their neighbours), normal values with ties, the overflow
 * threshold 65520 and its neighbours, f32 subnormals, infinities and NaNs (quiet, signalling,
 * payloads); both signs. */
static uint32_t fill_f16_edges(int64_t i, uint64_t r) {
    uint32_t sign = (uint32_t)(r >> 63) << 31, u;
    switch (i % 6) {
    case 0: u = (uint32_t)((102u + (r >> 40) % 13u) << 23) | (uint32_t)(r & 0x7fffffu); break;
    case 1: /* a tie or one ulp of f32 beside it, subnormal or normal f16 */
        u = (uint32_t)((102u + (r >> 40) % 41u) << 23) | (uint32_t)(r & 0x7fe000u);
        u |= (r >> 36) % 3 == 0 ? 0u : 0x1000u;
        u += (uint32_t)((r >> 33) % 3) - 1u;
        break;
    case 2: u = 0x477fe000u + (uint32_t)((r >> 20) % 0x4000u); break;  /* 65504 .. 65536 */
    case 3: u = (uint32_t)(r & 0x7fffffu) >> ((r >> 40) % 24u); break; /* f32 subnormals */
    case 4: u = 0x7f800000u | (uint32_t)((r >> 20) & 0x7fffffu) >> ((r >> 50) % 24u); break;
    default: u = (uint32_t)(r >> 17); break; /* any bits */
    }
    return u | sign;
}

static void fill_powd(double *data, int64_t i, uint64_t r) {
    static const uint64_t sp[] = {0,
                                  0x8000000000000000ull,
                                  0x7ff0000000000000ull,
                                  0xfff0000000000000ull,
                                  0x7ff8000000000123ull,
                                  0xfff4000000000001ull,
                                  0x000fffffffffffffull,
                                  0x8000000000000001ull,
                                  0x3ff0000000000000ull,
                                  0xbff0000000000000ull};
    double u = (double)(r >> 11) * 0x1p-53, v;
    bool y = g_powd_param == 1;
    switch ((i / 8) % 6) {
    case 0: v = y ? 8 * u - 4 : 10 * (1 - u); break;
    case 1: v = y ? ldexp(2 * u - 1, 16) : 1 + ldexp(u - 0.5, -(int)((r >> 3) % 8)); break;
    case 2: v = y ? 2000 * u - 1000 : ldexp(0.5 + u, (int)((r >> 5) % 2040) - 1020); break;
    case 3:
        v = y ? 8 * u - 4 : 10 * (1 - u);
        if (i % 8 == (i / 8) * (y ? 3 : 5) % 8) memcpy(&v, &sp[(r >> 4) % 10], 8);
        break;
    case 4: v = y ? (double)((int)((r >> 7) % 21) - 10) / ((r >> 3) % 2 ? 1 : 2) : -10 * u; break;
    default: memcpy(&v, &r, 8); break;
    }
    data[i] = v;
}

static void fill_tiny(ot_dtype t, void *data, int64_t i, uint64_t r) {
    bool neg = (r >> 63) & 1;
    int span = (int)((r >> 40) % 40); /* exponent offset */
    if (t == OT_F32) {
        uint32_t mant = (uint32_t)(r & 0x7fffffu);
        int e = 1 + 20 - span; /* biased exponent: 21 down to -18 (<= 0: a subnormal) */
        uint32_t u = e > 0 ? ((uint32_t)e << 23) | mant : mant >> (1 - e);
        if ((r >> 32) % 11 == 0) u = 0x3f800000u + (uint32_t)((r >> 8) & 0xffff); /* ~1 */
        ((uint32_t *)data)[i] = u | (neg ? 0x80000000u : 0);
    } else {
        uint64_t mant = r & 0xfffffffffffffull;
        int e = 1 + 20 - span;
        uint64_t u = e > 0 ? ((uint64_t)e << 52) | mant : mant >> (1 - e);
        if ((r >> 32) % 11 == 0) u = 0x3ff0000000000000ull + ((r >> 8) & 0xffff);
        ((uint64_t *)data)[i] = u | (neg ? 0x8000000000000000ull : 0);
    }
}

static void fill_round(ot_dtype t, void *data, int64_t i, uint64_t r) {
    static const uint64_t sp64[] = {
        0x7ff8000000000000ull, 0xfff4000000000001ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
        0x8000000000000000ull, 0x0000000000000000ull, 0x0000000000000001ull, 0x800fffffffffffffull,
        0x3fe0000000000000ull, 0xbfe0000000000000ull, 0x3fdfffffffffffffull, 0xbfefffffffffffffull,
        0x7fefffffffffffffull, 0xffefffffffffffffull};
    static const uint32_t sp32[] = {0x7fc00000u, 0xffa00001u, 0x7f800000u, 0xff800000u, 0x80000000u,
                                    0x00000000u, 0x00000001u, 0x807fffffu, 0x3f000000u, 0xbf000000u,
                                    0x3effffffu, 0xbf7fffffu, 0x7f7fffffu, 0xff7fffffu};
    bool d = t == OT_F64, neg = (r >> 62) & 1;
    double k = (double)((int64_t)(r >> 20) % 80001 - 40000), v;
    switch (i % 4) {
    case 0: v = k / 4; break;
    case 1:
        v = ldexp(1, (d ? 52 : 23) + (int)((r >> 8) & 1)) + (double)((int)(r >> 9) % 17) / 2;
        break;
    case 2:
        if (d)
            ((uint64_t *)data)[i] = r;
        else
            ((uint32_t *)data)[i] = (uint32_t)(r >> 16);
        return;
    default:
        if (d)
            ((uint64_t *)data)[i] = sp64[(r >> 8) % (sizeof sp64 / sizeof sp64[0])];
        else
            ((uint32_t *)data)[i] = sp32[(r >> 8) % (sizeof sp32 / sizeof sp32[0])];
        return;
    }
    if (neg) v = -v;
    if (d)
        ((double *)data)[i] = v;
    else
        ((float *)data)[i] = (float)v;
}

/* g_int_edges: integer elements drawn from the edges of the type and of shift amounts. */
static bool g_int_edges;

static void fill_int_edge(ot_dtype t, void *data, int64_t i, uint64_t r) {
    size_t es = ot_dtype_size(t);
    int w = (int)es * 8;
    uint64_t min = 1ull << (w - 1), v;
    switch (r % 24) {
    case 0: v = 0; break;
    case 1: v = 1; break;
    case 2: v = ~0ull; break; /* -1, the unsigned maximum */
    case 3: v = 2; break;
    case 4: v = min; break;               /* INT_MIN */
    case 5: v = min - 1; break;           /* INT_MAX */
    case 6: v = min + 1; break;           /* INT_MIN + 1 */
    case 7: v = (uint64_t)(w - 1); break; /* the largest shift amount */
    case 8: v = (uint64_t)w; break;       /* the width: all shifted out */
    case 9: v = (uint64_t)(w + 1); break;
    case 10: v = (uint64_t)(2 * w); break;
    case 11: v = 0ull - (uint64_t)w; break; /* negative amounts */
    case 12: v = (uint64_t)((r >> 8) % 64); break;
    case 13: v = 0x5555555555555555ull; break;
    case 14: v = 0ull - 2; break;
    case 15: v = 3; break;
    case 16: v = ((r >> 12) & 1 ? 1ull : 0ull - 1) << ((r >> 8) % (unsigned)w); break;
    case 17: v = (uint64_t)((int64_t)(r >> 40) % 200 - 100); break;
    default: v = r >> 3; break;
    }
    memcpy((char *)data + (size_t)i * es, &v, es);
}

/* Random element bits for dtype t: mostly ordinary values, some special ones. */
static void fill(ot_dtype t, void *data, int64_t n, uint64_t *s) {
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = rng_next(s);
        if (g_band && t == OT_F32) {
            float v = g_band_param == 0 ? ldexpf(16777215.0f, -50) * ((r >> 7) & 1 ? -1.0f : 1.0f)
                                        : ldexpf(1.0f, i % 2 == 0 ? -100 : 100);
            ((float *)data)[i] = v;
            if (i == n - 1) g_band_param++;
            continue;
        }
        if (g_powd && t == OT_F64) {
            fill_powd(data, i, r);
            if (i == n - 1) g_powd_param++;
            continue;
        }
        if (g_f16_all && (t == OT_F16 || t == OT_F32)) {
            if (t == OT_F16)
                ((uint16_t *)data)[i] = (uint16_t)i;
            else
                ((uint32_t *)data)[i] = fill_f16_edges(i, r);
            continue;
        }
        if (g_tiny && (t == OT_F32 || t == OT_F64)) {
            fill_tiny(t, data, i, r);
            continue;
        }
        if (g_round && (t == OT_F32 || t == OT_F64)) {
            fill_round(t, data, i, r);
            continue;
        }
        int pick = (int)(r % 16);
        switch (t) {
        case OT_F32: {
            static const uint32_t sp[] = {0x7fc00000u, 0xffc00000u, 0x7fa00001u, 0x7fc12345u,
                                          0x7f800000u, 0xff800000u, 0x80000000u, 0x00000000u,
                                          0x00000001u, 0x807fffffu, 0x00400000u, 0x3f800000u,
                                          0x7f7fffffu, 0x00800000u};
            float f = (float)((int64_t)(r >> 20) % 20001 - 10000) / 997.0f;
            uint32_t u;
            memcpy(&u, &f, 4);
            if (pick == 0 && !g_finite) u = sp[(r >> 8) % (sizeof sp / sizeof sp[0])];
            ((uint32_t *)data)[i] = u;
            break;
        }
        case OT_F64: {
            static const uint64_t sp[] = {0x7ff8000000000000ull, 0xfff8000000000000ull,
                                          0x7ff4000000000001ull, 0x7ff0000000000000ull,
                                          0x8000000000000000ull, 0x0000000000000001ull,
                                          0x800fffffffffffffull, 0x3ff0000000000000ull};
            double f = (double)((int64_t)(r >> 20) % 20001 - 10000) / 997.0;
            uint64_t u;
            memcpy(&u, &f, 8);
            if (pick == 0 && !g_finite) u = sp[(r >> 8) % (sizeof sp / sizeof sp[0])];
            ((uint64_t *)data)[i] = u;
            break;
        }
        case OT_F16:
        case OT_BF16: {
            float f = (float)((int64_t)(r >> 20) % 2001 - 1000) / 97.0f;
            uint16_t h = t == OT_F16 ? ot_f32_to_f16(f) : ot_f32_to_bf16(f);
            if (pick == 0) h = (uint16_t)(r >> 16); /* any bit pattern: NaNs, subnormals, inf */
            ((uint16_t *)data)[i] = h;
            break;
        }
        case OT_PRED: ((uint8_t *)data)[i] = (uint8_t)(r >> 33) & 1; break;
        default: {
            if (g_int_edges) {
                fill_int_edge(t, data, i, r);
                break;
            }
            size_t es = ot_dtype_size(t);
            uint64_t v = pick < 8 ? (uint64_t)((int64_t)(r >> 40) % 200 - 100) : r >> 3;
            memcpy((char *)data + (size_t)i * es, &v, es);
            break;
        }
        }
    }
}

static bool is_nan_bits(ot_dtype t, const void *p, int64_t i) {
    switch (t) {
    case OT_F32: return (((const uint32_t *)p)[i] & 0x7fffffffu) > 0x7f800000u;
    case OT_F64: return (((const uint64_t *)p)[i] & ~(1ull << 63)) > 0x7ff0000000000000ull;
    case OT_F16: return (((const uint16_t *)p)[i] & 0x7fffu) > 0x7c00u;
    case OT_BF16: return (((const uint16_t *)p)[i] & 0x7fffu) > 0x7f80u;
    default: return false;
    }
}

static int64_t g_nan_bits_differ;

/* Bit-identical, except that a NaN may carry another payload or sign (see docs/codegen.md:
 * which operand's NaN an op returns when both are NaN, and signalling-NaN quieting by libm vs
 * inlined instructions); such elements are counted. */
static bool same_values(ot_dtype t, const void *want, const void *got, int64_t n) {
    size_t es = ot_dtype_size(t);
    for (int64_t i = 0; i < n; i++) {
        const char *a = (const char *)want + (size_t)i * es,
                   *b = (const char *)got + (size_t)i * es;
        if (memcmp(a, b, es) == 0) continue;
        if (is_nan_bits(t, want, i) && is_nan_bits(t, got, i)) {
            g_nan_bits_differ++;
            continue;
        }
        return false;
    }
    return true;
}

typedef struct run_stats {
    int modules, outputs, native_kernels, interp_kernels;
} run_stats;

static run_stats g_stats;
static int g_lib_kernels;         /* check_module: library kernels (a copy, a dot, ...) compiled */
static ot_threadpool *g_run_pool; /* the run's pool when set (else the default pool) */
static char *g_src;               /* when g_keep_src: the last checked module's generated C */
static bool g_keep_src;
static char *program_source(const cg_program *p);

/* Compiles text at -O2, runs it natively and compares every output with the reference evaluator
 * bit for bit. want_native: every fusion kernel must have native code. */
static void check_module(const char *text, uint64_t seed, bool want_native) {
    ot_module *m = parse(text);
    if (!m) {
        ot_test_failures_++;
        return;
    }
    const ot_computation *entry = ot_module_entry(m);
    int np = entry->nparams;
    ot_device *d;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ot_value args[16];
    ot_buffer *in[16];
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7;
    for (int k = 0; k < np; k++) {
        ASSERT_OK(ot_value_alloc_array(&args[k], &entry->params[k]->shape.array));
        fill(args[k].array.shape.dtype, args[k].array.data,
             ot_shape_numel_unchecked(&args[k].array.shape), &s);
        ASSERT_OK(ot_buffer_from_host(d, &args[k].array, &in[k]));
    }
    ot_value ref;
    ot_status rs = ot_evaluate(m, args, np, NULL, &ref);
    EXPECT_OK(rs);
    ot_executable *e = NULL;
    EXPECT_OK(ot_compile(m, NULL, &e));
    if (e && rs == OT_OK) {
        const cg_program *p = cc_executable_native(e);
        int nk = ot_executable_kernel_count(e), nfus = 0, nnat = 0;
        for (int k = 0; k < nk; k++) {
            const ot_kernel *kn = ot_executable_kernel(e, k);
            g_lib_kernels += kn->kind == OT_KERNEL_LIBRARY;
            if (kn->kind != OT_KERNEL_FUSION) continue;
            nfus++;
            if (cg_native(p, k)) nnat++;
        }
        g_stats.native_kernels += nnat;
        g_stats.interp_kernels += nfus - nnat;
        if (want_native && nnat != nfus)
            fprintf(stderr, "seed %llu: %d of %d fusions native\n%s\n", (unsigned long long)seed,
                    nnat, nfus, text);
        if (want_native) EXPECT_INT_EQ(nnat, nfus);
        int nout = ot_value_leaf_count(&ref);
        ot_buffer *out[64] = {0};
        EXPECT_TRUE(nout <= 64);
        if (g_keep_src) {
            free(g_src);
            g_src = p ? program_source(p) : NULL;
        }
        ot_run_options ro = ot_run_options_default();
        ro.pool = g_run_pool;
        EXPECT_OK(ot_device_execute(d, e, in, np, out, nout, &ro, NULL));
        for (int j = 0; j < nout && out[j]; j++) {
            ot_tensor t;
            EXPECT_OK(ot_buffer_to_host(out[j], &t));
            const ot_value *rl = ot_value_leaf(&ref, j);
            bool same = rl && rl->array.nbytes == t.nbytes &&
                        same_values(t.shape.dtype, rl->array.data, t.data,
                                    ot_shape_numel_unchecked(&t.shape));
            if (!same) {
                size_t es = ot_dtype_size(t.shape.dtype);
                for (size_t b = 0; rl && b < t.nbytes; b += es)
                    if (!same_values(t.shape.dtype, (char *)rl->array.data + b, (char *)t.data + b,
                                     1)) {
                        uint64_t want = 0, got = 0;
                        memcpy(&want, (char *)rl->array.data + b, es);
                        memcpy(&got, (char *)t.data + b, es);
                        fprintf(stderr,
                                "seed %llu output %d element %zu: reference 0x%llx, native "
                                "0x%llx\n",
                                (unsigned long long)seed, j, b / es, (unsigned long long)want,
                                (unsigned long long)got);
                        break;
                    }
                fprintf(stderr, "%s\n", text);
            }
            EXPECT_TRUE(same);
            g_stats.outputs++;
            ot_tensor_release(&t);
            ot_buffer_free(out[j]);
        }
    }
    g_stats.modules++;
    ot_executable_free(e);
    ot_value_release(&ref);
    for (int k = 0; k < np; k++) {
        ot_value_release(&args[k]);
        ot_buffer_free(in[k]);
    }
    ot_device_free(d);
    ot_module_free(m);
}

typedef struct tb {
    char *p;
    size_t n, cap;
} tb;

static void tp(tb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tp(tb *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (w > 0 && (size_t)w < b->cap - b->n) b->n += (size_t)w;
}

/* A module whose outputs are op(x) / op(x, y) for each listed op, over dtype dt: the fusion pass
 * merges the siblings into multi-output fusions. */
static const char *const k_float_unary[] = {"abs",
                                            "negate",
                                            "sign",
                                            "floor",
                                            "ceil",
                                            "round-nearest-afz",
                                            "round-nearest-even",
                                            "exponential",
                                            "exponential-minus-one",
                                            "log",
                                            "log-plus-one",
                                            "sqrt",
                                            "rsqrt",
                                            "cbrt",
                                            "tanh",
                                            "logistic",
                                            "sine",
                                            "cosine",
                                            "tan",
                                            "erf",
                                            "copy"};
static const char *const k_float_binary[] = {"add",   "subtract", "multiply", "divide", "remainder",
                                             "power", "maximum",  "minimum",  "atan2"};
static const char *const k_dirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};

static void ops_module(tb *b, const char *dt, bool is_float, const char *dims, int part) {
    b->n = 0;
    tp(b, "HloModule ops_%s_%d\nENTRY main {\n", dt, part);
    tp(b, "  x = %s[%s] parameter(0)\n  y = %s[%s] parameter(1)\n  p = pred[%s] parameter(2)\n", dt,
       dims, dt, dims, dims);
    tp(b, "  lo = %s[] parameter(3)\n", dt);
    char outs[8192], types[8192];
    size_t on = 0, tn = 0;
    int k = 0;
    char ty[64];
    ty[0] = 0;
    if (is_float) {
        snprintf(ty, sizeof ty, "%s[%s]", dt, dims);
        if (part == 0)
            for (size_t j = 0; j < sizeof k_float_unary / sizeof *k_float_unary; j++, k++) {
                tp(b, "  r%d = %s %s(x)\n", k, ty, k_float_unary[j]);
                on += (size_t)snprintf(outs + on, sizeof outs - on, "%sr%d", k ? ", " : "", k);
                tn += (size_t)snprintf(types + tn, sizeof types - tn, "%s%s", k ? ", " : "", ty);
            }
        if (part == 1) {
            for (size_t j = 0; j < sizeof k_float_binary / sizeof *k_float_binary; j++, k++) {
                tp(b, "  r%d = %s %s(x, y)\n", k, ty, k_float_binary[j]);
                on += (size_t)snprintf(outs + on, sizeof outs - on, "%sr%d", k ? ", " : "", k);
                tn += (size_t)snprintf(types + tn, sizeof types - tn, "%s%s", k ? ", " : "", ty);
            }
            tp(b, "  r%d = pred[%s] is-finite(x)\n", k, dims);
            on += (size_t)snprintf(outs + on, sizeof outs - on, ", r%d", k++);
            tn += (size_t)snprintf(types + tn, sizeof types - tn, ", pred[%s]", dims);
        }
    } else {
        snprintf(ty, sizeof ty, "%s[%s]", dt, dims);
        static const char *const iu[] = {"negate", "abs", "sign", "not", "copy"};
        static const char *const ib[] = {"add",     "subtract", "multiply", "maximum",
                                         "minimum", "and",      "or",       "xor"};
        bool pred = strcmp(dt, "pred") == 0;
        for (size_t j = 0; j < 5; j++) {
            if (pred && j < 3) continue;
            tp(b, "  r%d = %s %s(x)\n", k, ty, iu[j]);
            on += (size_t)snprintf(outs + on, sizeof outs - on, "%sr%d", k ? ", " : "", k);
            tn += (size_t)snprintf(types + tn, sizeof types - tn, "%s%s", k ? ", " : "", ty);
            k++;
        }
        for (size_t j = 0; j < 8; j++) {
            if (pred && j < 3) continue;
            tp(b, "  r%d = %s %s(x, y)\n", k, ty, ib[j]);
            on += (size_t)snprintf(outs + on, sizeof outs - on, "%sr%d", k ? ", " : "", k);
            tn += (size_t)snprintf(types + tn, sizeof types - tn, "%s%s", k ? ", " : "", ty);
            k++;
        }
    }
    if (part == 1 || !is_float) {
        for (int j = 0; j < 6; j++, k++) {
            tp(b, "  r%d = pred[%s] compare(x, y), direction=%s\n", k, dims, k_dirs[j]);
            on += (size_t)snprintf(outs + on, sizeof outs - on, "%sr%d", k ? ", " : "", k);
            tn +=
                (size_t)snprintf(types + tn, sizeof types - tn, "%spred[%s]", k ? ", " : "", dims);
        }
        tp(b, "  r%d = %s select(p, x, y)\n", k, ty);
        on += (size_t)snprintf(outs + on, sizeof outs - on, ", r%d", k++);
        tn += (size_t)snprintf(types + tn, sizeof types - tn, ", %s", ty);
        if (strcmp(dt, "pred") != 0) {
            tp(b, "  r%d = %s clamp(lo, x, y)\n", k, ty);
            on += (size_t)snprintf(outs + on, sizeof outs - on, ", r%d", k++);
            tn += (size_t)snprintf(types + tn, sizeof types - tn, ", %s", ty);
        }
    }
    tp(b, "  ROOT t = (%s) tuple(%s)\n}\n", types, outs);
}

static void test_every_op(void) {
    static const char *const fl[] = {"f32", "f64", "f16", "bf16"};
    static const char *const in[] = {"s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "pred"};
    char text[65536];
    tb b = {text, 0, sizeof text};
    uint64_t seed = 100;
    for (int j = 0; j < 4; j++)
        for (int part = 0; part < 2; part++) {
            ops_module(&b, fl[j], true, "37,129", part);
            check_module(text, seed++, true);
        }
    for (int j = 0; j < 9; j++) {
        ops_module(&b, in[j], false, "300,129", 0); /* over one chunk: the parallel path */
        check_module(text, seed++, true);
    }
}

static void test_converts(void) {
    static const char *const dts[] = {"pred", "s8",  "s16", "s32",  "s64", "u8", "u16",
                                      "u32",  "u64", "f16", "bf16", "f32", "f64"};
    int nd = (int)(sizeof dts / sizeof *dts);
    char text[16384];
    tb b = {text, 0, sizeof text};
    for (int f = 0; f < nd; f++) {
        b.n = 0;
        tp(&b, "HloModule cvt_%s\nENTRY main {\n  x = %s[4099] parameter(0)\n", dts[f], dts[f]);
        char outs[1024], types[1024];
        size_t on = 0, tn = 0;
        for (int t = 0; t < nd; t++) {
            tp(&b, "  c%d = %s[4099] convert(x)\n", t, dts[t]);
            on += (size_t)snprintf(outs + on, sizeof outs - on, "%sc%d", t ? ", " : "", t);
            tn += (size_t)snprintf(types + tn, sizeof types - tn, "%s%s[4099]", t ? ", " : "",
                                   dts[t]);
        }
        tp(&b, "  ROOT t = (%s) tuple(%s)\n}\n", types, outs);
        check_module(text, 500 + (uint64_t)f, true);
    }
}

/* A random fusion over dtype T and shape [A,B,C]. */
static void random_module(uint64_t seed, tb *b) {
    uint64_t s = seed * 2654435761u + 1;
    static const char *const fts[] = {"f32", "f32", "f32", "f64", "f16", "bf16"};
    const char *T = fts[rng_next(&s) % 6];
    int A = 1 + (int)(rng_next(&s) % 9), B = 1 + (int)(rng_next(&s) % 17),
        C = 1 + (int)(rng_next(&s) % 33);
    if (rng_next(&s) % 4 == 0) A = 40; /* > one chunk sometimes */
    if (A == 40) C = 33 * 30;
    b->n = 0;
    tp(b, "HloModule rnd%llu\nENTRY main {\n", (unsigned long long)seed);
    tp(b, "  v0 = %s[%d,%d,%d] parameter(0)\n", T, A, B, C);
    tp(b, "  v1 = %s[%d,%d,%d] parameter(1)\n", T, A, B, C);
    tp(b, "  sc = %s[] parameter(2)\n  rb = %s[%d] parameter(3)\n", T, T, B);
    tp(b, "  ra = %s[%d] parameter(4)\n  rc = %s[%d] parameter(5)\n", T, A, T, C);
    tp(b, "  ac = %s[%d,%d] parameter(6)\n  ca = %s[%d,%d] parameter(7)\n", T, A, C, T, C, A);
    tp(b, "  pp = pred[%d,%d,%d] parameter(8)\n", A, B, C);
    char sh[64];
    snprintf(sh, sizeof sh, "%s[%d,%d,%d]", T, A, B, C);
    int v = 2;
    static const char *const un[] = {"negate", "abs",   "exponential", "tanh",
                                     "sqrt",   "floor", "log",         "sign"};
    static const char *const bin[] = {"add",     "multiply", "subtract", "maximum",
                                      "minimum", "divide",   "power"};
    int nops = 4 + (int)(rng_next(&s) % 14);
    for (int k = 0; k < nops; k++, v++) {
        int kind = (int)(rng_next(&s) % 12);
        int a = (int)(rng_next(&s) % (uint64_t)v), c = (int)(rng_next(&s) % (uint64_t)v);
        switch (kind) {
        case 0:
        case 1: tp(b, "  v%d = %s %s(v%d)\n", v, sh, un[rng_next(&s) % 8], a); break;
        case 2:
        case 3: tp(b, "  v%d = %s %s(v%d, v%d)\n", v, sh, bin[rng_next(&s) % 7], a, c); break;
        case 4: {
            static const char *const src[] = {"sc", "rb", "ra", "rc", "ac", "ca"};
            static const char *const dm[] = {"{}", "{1}", "{0}", "{2}", "{0,2}", "{2,0}"};
            int w = (int)(rng_next(&s) % 6);
            tp(b, "  v%d = %s broadcast(%s), dimensions=%s\n", v, sh, src[w], dm[w]);
            break;
        }
        case 5:
            tp(b, "  k%d = %s[] constant(%d.25)\n  v%d = %s broadcast(k%d), dimensions={}\n", v, T,
               (int)(rng_next(&s) % 9) - 4, v, sh, v);
            break;
        case 6: {
            static const char *const dirs[] = {"LT", "GE", "EQ", "NE"};
            tp(b, "  q%d = pred[%d,%d,%d] compare(v%d, v%d), direction=%s\n", v, A, B, C, a, c,
               dirs[rng_next(&s) % 4]);
            tp(b, "  v%d = %s select(q%d, v%d, v%d)\n", v, sh, v, c, a);
            break;
        }
        case 7: tp(b, "  v%d = %s select(pp, v%d, v%d)\n", v, sh, a, c); break;
        case 8: {
            static const char *const mid[] = {"f32", "f64", "f16", "bf16", "s32", "u8"};
            const char *md = mid[rng_next(&s) % 6];
            tp(b, "  w%d = %s[%d,%d,%d] convert(v%d)\n  v%d = %s convert(w%d)\n", v, md, A, B, C, a,
               v, sh, v);
            break;
        }
        case 9:
            tp(b, "  w%d = s32[%d,%d,%d] iota(), iota_dimension=%d\n  v%d = %s convert(w%d)\n", v,
               A, B, C, (int)(rng_next(&s) % 3), v, sh, v);
            break;
        case 10:
            tp(b,
               "  w%d = %s[%d,%d] reshape(v%d)\n  u%d = %s[%d,%d] negate(w%d)\n"
               "  v%d = %s reshape(u%d)\n",
               v, T, A * B, C, a, v, T, A * B, C, v, v, sh, v);
            break;
        default: tp(b, "  v%d = %s clamp(sc, v%d, v%d)\n", v, sh, a, c); break;
        }
    }
    tp(b, "  ROOT t = (%s, %s, %s) tuple(v%d, v%d, v%d)\n}\n", sh, sh, sh, v - 1, v / 2, v - 2);
}

/* ---- slice, pad, concatenate, reverse inside loop fusions -------------------------------------
 * Random chains of index remapping from parameters to one target shape (pads with negative and
 * interior padding, strided slices, reverses, concatenates of a value with a slice or reverse of
 * itself, unary and squaring ops in between), combined elementwise: each remap reads its operand
 * at the mapped index inside the loop, and the results must be the reference's bits. */
typedef struct rshape {
    int rank;
    int d[4];
} rshape;

static void rs_print(char *out, size_t cap, const char *T, const rshape *r) {
    size_t n = (size_t)snprintf(out, cap, "%s[", T);
    for (int k = 0; k < r->rank; k++)
        n += (size_t)snprintf(out + n, cap - n, "%s%d", k ? "," : "", r->d[k]);
    snprintf(out + n, cap - n, "]");
}

static int64_t rnd_in(uint64_t *s, int64_t lo, int64_t hi) { /* [lo, hi] */
    return lo + (int64_t)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

/* Appends a chain from value `from` (shape cur) to shape T; returns the last value's number. */
static int remap_chain(tb *b, uint64_t *s, const char *T, bool fl, const char *from, rshape cur,
                       const rshape *tgt, int *v, bool *has_exp) {
    char sh[96], prev[32];
    snprintf(prev, sizeof prev, "%s", from);
    int steps = (int)rnd_in(s, 1, 4);
    for (int st = 0; st <= steps; st++) {
        rshape out = cur;
        int me = (*v)++;
        int op = st == steps ? 0 : (int)rnd_in(s, 0, 6);
        char attr[256];
        size_t an = 0;
        attr[0] = 0;
        if (op == 0) { /* pad; the last step pads (or crops) to the target */
            for (int k = 0; k < cur.rank; k++) {
                int64_t n = cur.d[k], lo, hi, in = 0;
                if (st == steps) {
                    int64_t diff = tgt->d[k] - n;
                    lo = rnd_in(s, (diff < 0 ? diff : 0) - 1, (diff > 0 ? diff : 0) + 1);
                    hi = diff - lo;
                    if (lo < -(n - 1) || hi < -(n - 1)) {
                        lo = diff / 2;
                        hi = diff - lo;
                    }
                } else {
                    in = rnd_in(s, 0, 3) == 0 && n > 1 ? 1 : 0;
                    int64_t w = n + (n - 1) * in;
                    lo = rnd_in(s, -(w - 1 < 2 ? w - 1 : 2), 3);
                    hi = rnd_in(s, -(w - 1 < 2 ? w - 1 : 2), 3);
                    if (w + lo + hi < 1) lo = hi = 0;
                }
                out.d[k] = (int)(n + (n - 1) * in + lo + hi);
                an += (size_t)snprintf(attr + an, sizeof attr - an, "%s%lld_%lld%s", k ? "x" : "",
                                       (long long)lo, (long long)hi, in ? "_1" : "");
            }
            if (cur.rank == 0) snprintf(attr, sizeof attr, "{}");
            rs_print(sh, sizeof sh, T, &out);
            tp(b, "  v%d = %s pad(%s, %s), padding=%s\n", me, sh, prev,
               rnd_in(s, 0, 1) ? "ps" : "pk", attr);
        } else if (op == 1 || op == 2) { /* slice */
            an += (size_t)snprintf(attr, sizeof attr, "{");
            for (int k = 0; k < cur.rank; k++) {
                int64_t n = cur.d[k], a = rnd_in(s, 0, (n - 1) / 2), l = rnd_in(s, a + 1, n),
                        sd = rnd_in(s, 1, 3);
                out.d[k] = (int)((l - a + sd - 1) / sd);
                an += (size_t)snprintf(attr + an, sizeof attr - an, "%s[%lld:%lld:%lld]",
                                       k ? ", " : "", (long long)a, (long long)l, (long long)sd);
            }
            snprintf(attr + an, sizeof attr - an, "}");
            rs_print(sh, sizeof sh, T, &out);
            tp(b, "  v%d = %s slice(%s), slice=%s\n", me, sh, prev, attr);
        } else if (op == 3) { /* reverse */
            an += (size_t)snprintf(attr, sizeof attr, "{");
            int nd = 0;
            for (int k = 0; k < cur.rank; k++)
                if (rnd_in(s, 0, 1) || (k == cur.rank - 1 && nd == 0))
                    an += (size_t)snprintf(attr + an, sizeof attr - an, "%s%d", nd++ ? "," : "", k);
            snprintf(attr + an, sizeof attr - an, "}");
            rs_print(sh, sizeof sh, T, &cur);
            tp(b, "  v%d = %s reverse(%s), dimensions=%s\n", me, sh, prev, attr);
        } else if (op == 4) { /* concatenate with a reverse and a slice of itself */
            int d = (int)rnd_in(s, 0, cur.rank - 1);
            rshape part = cur;
            part.d[d] = (int)rnd_in(s, 1, cur.d[d]);
            char psh[96], csh[96];
            rs_print(csh, sizeof csh, T, &cur);
            rs_print(psh, sizeof psh, T, &part);
            an += (size_t)snprintf(attr, sizeof attr, "{");
            for (int k = 0; k < cur.rank; k++)
                an += (size_t)snprintf(attr + an, sizeof attr - an, "%s[0:%d]", k ? ", " : "",
                                       part.d[k]);
            snprintf(attr + an, sizeof attr - an, "}");
            tp(b, "  r%d = %s reverse(%s), dimensions={%d}\n", me, csh, prev, d);
            tp(b, "  s%d = %s slice(%s), slice=%s\n", me, psh, prev, attr);
            out.d[d] = cur.d[d] * 2 + part.d[d];
            rs_print(sh, sizeof sh, T, &out);
            char nr[32], ns[32];
            snprintf(nr, sizeof nr, "r%d", me);
            snprintf(ns, sizeof ns, "s%d", me);
            const char *ops3[3] = {prev, nr, ns};
            int o = (int)rnd_in(s, 0, 2); /* which comes first; the others in turn */
            tp(b, "  v%d = %s concatenate(%s, %s, %s), dimensions={%d}\n", me, sh, ops3[o],
               ops3[(o + 1) % 3], ops3[(o + 2) % 3], d);
        } else if (op == 5) { /* unary */
            static const char *const fu[] = {"negate", "exponential", "abs"};
            static const char *const iu[] = {"negate", "abs", "negate"};
            int w = (int)rnd_in(s, 0, 2);
            *has_exp = *has_exp || (fl && w == 1);
            rs_print(sh, sizeof sh, T, &cur);
            tp(b, "  v%d = %s %s(%s)\n", me, sh, fl ? fu[w] : iu[w], prev);
        } else { /* a value read twice */
            rs_print(sh, sizeof sh, T, &cur);
            tp(b, "  v%d = %s multiply(%s, %s)\n", me, sh, prev, prev);
        }
        cur = out;
        snprintf(prev, sizeof prev, "v%d", me);
    }
    return *v - 1;
}

/* A module of 1-4 chains (remap_chain) from two parameters to a random target shape, combined
 * elementwise; outputs: the combination and the first chain's value. *fused_all: every remap
 * should sit in a fusion (more than one chain and no exponential, which is not evaluated at two
 * indices). */
static void random_remap_module(uint64_t seed, tb *b, bool *fused_all) {
    uint64_t s = seed * 0x2545f4914f6cdd1dull + 3;
    static const char *const dts[] = {"f32", "f32", "f64", "s32", "bf16"};
    const char *T = dts[rng_next(&s) % 5];
    bool fl = T[0] != 's';
    rshape x = {(int)rnd_in(&s, 1, 4), {0}}, tgt;
    bool big = rnd_in(&s, 0, 4) == 0; /* enough elements to split over threads */
    for (int k = 0; k < x.rank; k++) x.d[k] = (int)rnd_in(&s, 1, big && x.rank <= 3 ? 40 : 9);
    tgt.rank = x.rank;
    for (int k = 0; k < x.rank; k++) tgt.d[k] = (int)rnd_in(&s, 1, big && x.rank <= 3 ? 40 : 9);
    char xs[96], ts[96];
    rs_print(xs, sizeof xs, T, &x);
    rs_print(ts, sizeof ts, T, &tgt);
    b->n = 0;
    tp(b, "HloModule remap%llu\nENTRY main {\n", (unsigned long long)seed);
    tp(b, "  x0 = %s parameter(0)\n  x1 = %s parameter(1)\n  ps = %s[] parameter(2)\n", xs, xs, T);
    tp(b, "  pk = %s[] constant(%s)\n", T, fl ? "-2.5" : "-7");
    int v = 0, nterms = (int)rnd_in(&s, 1, 4), first = -1, acc = -1;
    bool has_exp = false;
    for (int t = 0; t < nterms; t++) {
        int r = remap_chain(b, &s, T, fl, rnd_in(&s, 0, 1) ? "x0" : "x1", x, &tgt, &v, &has_exp);
        if (first < 0) first = r;
        if (acc < 0) {
            acc = r;
            continue;
        }
        static const char *const bin[] = {"add", "multiply", "subtract", "maximum"};
        int me = v++;
        tp(b, "  v%d = %s %s(v%d, v%d)\n", me, ts, bin[rng_next(&s) % 4], acc, r);
        acc = me;
    }
    tp(b, "  ROOT t = (%s, %s) tuple(v%d, v%d)\n}\n", ts, ts, acc, first);
    *fused_all = nterms > 1 && !has_exp;
}

/* Remaps inside loop fusions: native code for every fusion, the reference's bits at 1, 2, 3 and
 * 8 threads, and no copy kernel left where every chain meets another in an elementwise op. */
static void test_remap_fusions(void) {
    static char text[65536];
    tb b = {text, 0, sizeof text};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    int nfused = 0;
    for (uint64_t seed = 1; seed <= 48; seed++) {
        bool all = false;
        random_remap_module(seed, &b, &all);
        for (int t = 0; t < 4; t++) {
            int lib = g_lib_kernels;
            g_run_pool = pools[t];
            check_module(text, 2100 + seed, true);
            if (all && g_lib_kernels != lib) {
                fprintf(stderr, "seed %llu: %d copy kernels left\n%s\n", (unsigned long long)seed,
                        g_lib_kernels - lib, text);
                EXPECT_INT_EQ(g_lib_kernels, lib);
            }
        }
        nfused += all;
    }
    g_run_pool = NULL;
    EXPECT_TRUE(nfused >= 8);
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Dynamic slices inside loop fusions and row sums: a dynamic-slice of a parameter (rank 1-3,
 * f32, f64 or s32) by scalar starts of several integer types — parameters whose random values
 * often lie outside the operand (negative, or past the last window: HLO clamps the window into
 * the operand), or a start computed from two of them — read by an elementwise op with a second
 * parameter, or summed over its last dim beside it. The slice is read at clamped offsets inside
 * the consumer's native loop: no copy kernel is left, and the results are the reference's bits
 * at 1, 2, 3 and 8 threads. */
static void test_dynamic_slice_fusions(void) {
    static char text[8192];
    tb b = {text, 0, sizeof text};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static const char *const dts[] = {"f32", "f64", "s32"};
    static const char *const its[] = {"s32", "s64", "u8", "s16", "u32"};
    for (uint64_t seed = 1; seed <= 36; seed++) {
        uint64_t s = seed * 0x9e3779b97f4a7c15ull + 5;
        const char *T = dts[seed % 3];
        bool sum = seed % 4 == 0 && T[0] == 'f'; /* a row sum of the product */
        rshape x = {(int)rnd_in(&s, 1, 3), {0}}, y;
        y.rank = x.rank;
        for (int k = 0; k < x.rank; k++) {
            x.d[k] = (int)rnd_in(&s, 1, k == x.rank - 1 ? 300 : 40);
            y.d[k] = (int)rnd_in(&s, 1, x.d[k]);
        }
        if (sum) y.d[y.rank - 1] = x.d[x.rank - 1] > 16 ? (int)rnd_in(&s, 16, x.d[x.rank - 1]) : 0;
        if (sum && y.d[y.rank - 1] == 0) sum = false, y.d[y.rank - 1] = 1;
        char xs[96], ys[96];
        rs_print(xs, sizeof xs, T, &x);
        rs_print(ys, sizeof ys, T, &y);
        b.n = 0;
        tp(&b,
           "HloModule ds%llu\nadd {\n  a = %s[] parameter(0)\n  c = %s[] parameter(1)\n"
           "  ROOT s = %s[] add(a, c)\n}\nENTRY main {\n",
           (unsigned long long)seed, T, T, T);
        tp(&b, "  x = %s parameter(0)\n  w = %s parameter(1)\n", xs, ys);
        char starts[256];
        size_t sn = 0;
        starts[0] = 0;
        for (int k = 0; k < x.rank; k++) {
            const char *I = its[rnd_in(&s, 0, 4)];
            tp(&b, "  p%d = %s[] parameter(%d)\n", k, I, 2 + k);
            if (rnd_in(&s, 0, 2) == 0) { /* a computed start */
                tp(&b, "  k%d = %s[] constant(%d)\n  q%d = %s[] add(p%d, k%d)\n", k, I,
                   (int)rnd_in(&s, 0, 9), k, I, k, k);
                sn += (size_t)snprintf(starts + sn, sizeof starts - sn, ", q%d", k);
            } else {
                sn += (size_t)snprintf(starts + sn, sizeof starts - sn, ", p%d", k);
            }
        }
        char sizes[96];
        size_t zn = 0;
        for (int k = 0; k < y.rank; k++)
            zn += (size_t)snprintf(sizes + zn, sizeof sizes - zn, "%s%d", k ? "," : "", y.d[k]);
        tp(&b, "  d = %s dynamic-slice(x%s), dynamic_slice_sizes={%s}\n", ys, starts, sizes);
        tp(&b, "  m = %s multiply(d, w)\n", ys);
        if (sum) {
            rshape r = y;
            r.rank--;
            char rsh[96];
            rs_print(rsh, sizeof rsh, T, &r);
            tp(&b, "  z = %s[] constant(0)\n", T);
            tp(&b, "  r = %s reduce(m, z), dimensions={%d}, to_apply=add\n", rsh, y.rank - 1);
            tp(&b, "  ROOT t = (%s, %s) tuple(r, m)\n}\n", rsh, ys);
        } else {
            tp(&b, "  ROOT m2 = %s add(m, d)\n}\n", ys);
        }
        for (int t = 0; t < 4; t++) {
            int lib = g_lib_kernels;
            g_run_pool = pools[t];
            check_module(text, 3100 + seed, true);
            if (g_lib_kernels != lib)
                fprintf(stderr, "seed %llu: %d library kernels left\n%s\n",
                        (unsigned long long)seed, g_lib_kernels - lib, text);
            EXPECT_INT_EQ(g_lib_kernels, lib);
        }
    }
    g_run_pool = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Row gathers (x[ids], ex_gather_rows) inside loop fusions: a table [V, D] or [V, D1, D2] of
 * f32, f64 or s32, indices of rank 1 or 2 (index_vector_dim implied or a trailing unit dim) of
 * several integer types whose random values are often negative or past V - 1 (HLO clamps each
 * start into [0, V - 1]), sometimes computed (an add), read by an elementwise op with a second
 * parameter and again by an add. The rows are read from the table inside the consumer's native
 * loop: no gather kernel is left, and the results are the reference's bits at 1, 2, 3 and 8
 * threads. A gather read by two clusters stays one gather kernel. */
static void test_gather_fusions(void) {
    static char text[8192];
    tb b = {text, 0, sizeof text};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static const char *const dts[] = {"f32", "f64", "s32"};
    static const char *const its[] = {"s32", "s64", "u8", "s16", "u32"};
    for (uint64_t seed = 1; seed <= 30; seed++) {
        uint64_t s = seed * 0x9e3779b97f4a7c15ull + 11;
        const char *T = dts[seed % 3], *I = its[rnd_in(&s, 0, 4)];
        rshape x = {(int)rnd_in(&s, 2, 3), {0}}, k = {(int)rnd_in(&s, 1, 2), {0}}, y;
        x.d[0] = (int)rnd_in(&s, 1, 120);
        for (int d = 1; d < x.rank; d++) x.d[d] = (int)rnd_in(&s, 1, d == x.rank - 1 ? 200 : 6);
        for (int d = 0; d < k.rank; d++) k.d[d] = (int)rnd_in(&s, 1, d == 0 ? 300 : 5);
        y.rank = k.rank + x.rank - 1;
        for (int d = 0; d < k.rank; d++) y.d[d] = k.d[d];
        for (int d = 1; d < x.rank; d++) y.d[k.rank + d - 1] = x.d[d];
        bool unit = rnd_in(&s, 0, 1) == 1; /* indices [..., 1], index_vector_dim explicit */
        rshape kp = k;
        if (unit) kp.d[kp.rank++] = 1;
        char xs[96], ys[96], ks[96], offs[64], sizes[64];
        rs_print(xs, sizeof xs, T, &x);
        rs_print(ys, sizeof ys, T, &y);
        rs_print(ks, sizeof ks, I, &kp);
        size_t on = 0, zn = (size_t)snprintf(sizes, sizeof sizes, "1");
        offs[0] = 0;
        for (int d = 1; d < x.rank; d++) {
            on += (size_t)snprintf(offs + on, sizeof offs - on, "%s%d", d > 1 ? "," : "",
                                   k.rank + d - 1);
            zn += (size_t)snprintf(sizes + zn, sizeof sizes - zn, ",%d", x.d[d]);
        }
        b.n = 0;
        tp(&b, "HloModule g%llu\nENTRY main {\n", (unsigned long long)seed);
        tp(&b, "  x = %s parameter(0)\n  w = %s parameter(1)\n  p = %s parameter(2)\n", xs, ys, ks);
        const char *ids = "p";
        if (seed % 4 == 0) { /* a computed index, fused beside the gather */
            tp(&b, "  c = %s[] constant(%d)\n  cb = %s broadcast(c), dimensions={}\n", I,
               (int)rnd_in(&s, 0, 9), ks);
            tp(&b, "  q = %s add(p, cb)\n", ks);
            ids = "q";
        }
        tp(&b,
           "  g = %s gather(x, %s), offset_dims={%s}, collapsed_slice_dims={0}, "
           "start_index_map={0}, index_vector_dim=%d, slice_sizes={%s}\n",
           ys, ids, offs, k.rank, sizes);
        tp(&b, "  m = %s multiply(g, w)\n  ROOT m2 = %s add(m, g)\n}\n", ys, ys);
        for (int t = 0; t < 4; t++) {
            int lib = g_lib_kernels;
            g_run_pool = pools[t];
            check_module(text, 3300 + seed, true);
            if (g_lib_kernels != lib)
                fprintf(stderr, "seed %llu: %d library kernels left\n%s\n",
                        (unsigned long long)seed, g_lib_kernels - lib, text);
            EXPECT_INT_EQ(g_lib_kernels, lib);
        }
    }
    /* read by two clusters (a product and a sum of the rows): the gather kernel stays, its
     * result read by both, not gathered in each */
    static const char shared[] =
        "HloModule gs\nadd {\n  a = f32[] parameter(0)\n  c = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(a, c)\n}\nENTRY main {\n  x = f32[40,64] parameter(0)\n"
        "  p = s32[500] parameter(1)\n  w = f32[500,64] parameter(2)\n"
        "  g = f32[500,64] gather(x, p), offset_dims={1}, collapsed_slice_dims={0}, "
        "start_index_map={0}, index_vector_dim=1, slice_sizes={1,64}\n"
        "  m = f32[500,64] multiply(g, w)\n  z = f32[] constant(0)\n"
        "  r = f32[64] reduce(g, z), dimensions={0}, to_apply=add\n"
        "  ROOT t = (f32[500,64], f32[64]) tuple(m, r)\n}\n";
    for (int t = 0; t < 4; t++) {
        int lib = g_lib_kernels;
        g_run_pool = pools[t];
        check_module(shared, 3400, false);
        EXPECT_INT_EQ(g_lib_kernels, lib + 1);
    }
    g_run_pool = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* A dynamic-update-slice updating its operand in place, whose update's fusion the schedule puts
 * before the operand's writer: the update may not land early (cc_executable_update_writer), or
 * the writer overwrites it (lost, "late") or, writing the operand in place over its input, reads
 * the update where that input was (the input clobbered, "early": random_ops seed 1576, where the
 * input's bitcast-convert beside the operand came out with the update's bits). The reference's
 * bits at 1, 2, 3 and 8 threads. */
static void test_update_before_operand(void) {
    static const char *const k_tmpl[] = {
        /* early: the update's fusion reads a sum of the operand's input, so it runs after that
         * input, which the operand's fusion then overwrites in place */
        "  sum = u32[] reduce(bits, z), dimensions={0,1,2,3}, to_apply=add\n"
        "  c = u32[] convert(p0)\n"
        "  cs = u32[] add(c, sum)\n",
        /* late: the update's fusion reads only a parameter, so it runs first and the input (the
         * operand's memory) is written after it */
        "  cs = u32[] convert(p0)\n",
    };
    static char text[4096];
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    for (int v = 0; v < 2; v++) {
        snprintf(text, sizeof text,
                 "HloModule update_before_operand\n"
                 "add {\n  a = u32[] parameter(0)\n  b = u32[] parameter(1)\n"
                 "  ROOT s = u32[] add(a, b)\n}\n"
                 "ENTRY main {\n"
                 "  p0 = f32[] parameter(0)\n  p1 = f32[] parameter(1)\n"
                 "  key = u64[2] constant({12791862516852935350, 16112621590971561798})\n"
                 "  rng = (u64[2], u32[7,7,1,3]) rng-bit-generator(key), "
                 "algorithm=rng_three_fry\n"
                 "  bits = u32[7,7,1,3] get-tuple-element(rng), index=1\n"
                 "  le = pred[7,7,1,3] compare(bits, bits), direction=LE\n"
                 "  s = u32[] convert(p1)\n"
                 "  sb = u32[7,7,1,3] broadcast(s), dimensions={}\n"
                 "  sel = u32[7,7,1,3] select(le, bits, sb)\n"
                 "  asf = f32[7,7,1,3] bitcast-convert(bits)\n"
                 "  z = u32[] constant(0)\n"
                 "%s"
                 "  upd = u32[4,7,1,3] broadcast(cs), dimensions={}\n"
                 "  si = s32[] convert(p0)\n  eight = s32[] constant(8)\n"
                 "  j = s32[] remainder(si, eight)\n"
                 "  i = s32[] constant(1)\n  zi = s32[] constant(0)\n"
                 "  dus = u32[7,7,1,3] dynamic-update-slice(sel, upd, i, j, zi, zi)\n"
                 "  three = u32[] constant(3)\n"
                 "  tb = u32[7,7,1,3] broadcast(three), dimensions={}\n"
                 "  r = u32[7,7,1,3] remainder(dus, tb)\n"
                 "  ROOT out = (f32[7,7,1,3], u32[7,7,1,3]) tuple(asf, r)\n}\n",
                 k_tmpl[v]);
        for (int t = 0; t < 4; t++) {
            g_run_pool = pools[t];
            for (uint64_t seed = 1; seed <= 3; seed++) check_module(text, 1576 + seed, true);
        }
    }
    g_run_pool = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Slices and reverses inside row sums: random chains (strided slices, reverses, unary ops, a
 * value squared) from two parameters of rank 2-4 to a shape whose last dim, of 16 or more, is
 * summed (f32/f64 adds in lanes; a few long rows: in blocks), sometimes beside the summed values
 * as a second output. The
 * remaps are read at mapped indices inside the reduce's fusion (fusion.c, rows_reduce): no copy
 * kernel is left, and the results are the reference's bits at 1, 2, 3 and 8 threads. */
static void test_remap_row_sums(void) {
    static char text[16384];
    tb b = {text, 0, sizeof text};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    int nfused = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        uint64_t s = seed * 0x9e3779b97f4a7c15ull + 11;
        const char *T = rnd_in(&s, 0, 2) ? "f32" : "f64";
        rshape x = {(int)rnd_in(&s, 2, 4), {0}};
        bool big = rnd_in(&s, 0, 3) == 0; /* enough rows to split over threads */
        for (int k = 0; k < x.rank - 1; k++) x.d[k] = (int)rnd_in(&s, 1, big ? 60 : 7);
        x.d[x.rank - 1] = (int)rnd_in(&s, 48, 300);
        if (seed % 5 == 0) { /* few long rows: the blocks form (emit_reduce_blocks) */
            x.rank = 2;
            x.d[0] = (int)rnd_in(&s, 1, 5);
            x.d[1] = (int)rnd_in(&s, 4200, 9000);
        }
        char xs[96], cs[96], os[96];
        rs_print(xs, sizeof xs, T, &x);
        b.n = 0;
        tp(&b,
           "HloModule rowremap%llu\nadd {\n  a = %s[] parameter(0)\n  c = %s[] parameter(1)\n"
           "  ROOT s = %s[] add(a, c)\n}\nENTRY main {\n",
           (unsigned long long)seed, T, T, T);
        tp(&b, "  x0 = %s parameter(0)\n  x1 = %s parameter(1)\n", xs, xs);
        /* the same slices for both chains, so that their shapes meet */
        rshape cur = x;
        int nsteps = (int)rnd_in(&s, 1, 3), v = 0, nremaps = 0;
        char prev[2][32] = {"x0", "x1"};
        for (int st = 0; st < nsteps; st++) {
            int op = (int)rnd_in(&s, 0, 4);
            nremaps += op <= 2;
            rshape out = cur;
            char attr[256];
            size_t an = (size_t)snprintf(attr, sizeof attr, "{");
            if (op <= 1) { /* slice; the last dim keeps 16 or more */
                for (int k = 0; k < cur.rank; k++) {
                    int64_t n = cur.d[k], sd = k == cur.rank - 1 ? rnd_in(&s, 1, 2) : 1;
                    int64_t a = k == cur.rank - 1 ? rnd_in(&s, 0, 5) : rnd_in(&s, 0, (n - 1) / 2);
                    int64_t l = k == cur.rank - 1 ? n - rnd_in(&s, 0, 5) : rnd_in(&s, a + 1, n);
                    if (k == cur.rank - 1 && (l - a + sd - 1) / sd < 16) a = 0, l = n, sd = 1;
                    out.d[k] = (int)((l - a + sd - 1) / sd);
                    an +=
                        (size_t)snprintf(attr + an, sizeof attr - an, "%s[%lld:%lld:%lld]",
                                         k ? ", " : "", (long long)a, (long long)l, (long long)sd);
                }
            } else if (op == 2) { /* reverse */
                int nd = 0;
                for (int k = 0; k < cur.rank; k++)
                    if (rnd_in(&s, 0, 1) || (k == cur.rank - 1 && nd == 0))
                        an += (size_t)snprintf(attr + an, sizeof attr - an, "%s%d", nd++ ? "," : "",
                                               k);
            }
            snprintf(attr + an, sizeof attr - an, "}");
            rs_print(os, sizeof os, T, &out);
            for (int c = 0; c < 2; c++) {
                int me = v++;
                if (op <= 1)
                    tp(&b, "  v%d = %s slice(%s), slice=%s\n", me, os, prev[c], attr);
                else if (op == 2)
                    tp(&b, "  v%d = %s reverse(%s), dimensions=%s\n", me, os, prev[c], attr);
                else if (op == 3)
                    tp(&b, "  v%d = %s %s(%s)\n", me, os, c ? "negate" : "abs", prev[c]);
                else
                    tp(&b, "  v%d = %s multiply(%s, %s)\n", me, os, prev[c], prev[c]);
                snprintf(prev[c], sizeof prev[c], "v%d", me);
            }
            cur = out;
        }
        rs_print(cs, sizeof cs, T, &cur);
        rshape rr = cur;
        rr.rank--;
        rs_print(os, sizeof os, T, &rr);
        bool two = rnd_in(&s, 0, 2) == 0;
        tp(&b, "  m = %s multiply(%s, %s)\n  z = %s[] constant(0)\n", cs, prev[0], prev[1], T);
        tp(&b, "  r = %s reduce(m, z), dimensions={%d}, to_apply=add\n", os, cur.rank - 1);
        if (two)
            tp(&b, "  ROOT t = (%s, %s) tuple(r, m)\n}\n", os, cs);
        else
            tp(&b, "  ROOT t = (%s) tuple(r)\n}\n", os);
        for (int t = 0; t < 4; t++) {
            int lib = g_lib_kernels;
            g_run_pool = pools[t];
            check_module(text, 2300 + seed, true);
            /* one remap per chain, read at the loop's own index, fuses; a remap read through
             * another stays a copy (its digits would be divided out per element) */
            if (nremaps <= 1 && g_lib_kernels != lib) {
                fprintf(stderr, "seed %llu: %d copy kernels left\n%s\n", (unsigned long long)seed,
                        g_lib_kernels - lib, text);
                EXPECT_INT_EQ(g_lib_kernels, lib);
            }
        }
        nfused += nremaps == 1;
    }
    EXPECT_TRUE(nfused >= 8);
    g_run_pool = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* The stencil of `xla_compare.py --group extra` (JAX's edge pad as slices and concatenates, a
 * 5-point Laplacian, a space-to-depth): two loop fusions, no copy kernel, the reference's bits. */
static void test_remap_stencil(void) {
    static const char text[] =
        "HloModule stencil\nENTRY main {\n"
        "  x = f32[6,33,31] parameter(0)\n"
        "  a = f32[6,1,31] slice(x), slice={[0:6], [0:1], [0:31]}\n"
        "  b = f32[6,1,31] slice(x), slice={[0:6], [32:33], [0:31]}\n"
        "  c2 = f32[6,35,31] concatenate(a, x, b), dimensions={1}\n"
        "  l = f32[6,35,1] slice(c2), slice={[0:6], [0:35], [0:1]}\n"
        "  r = f32[6,35,1] slice(c2), slice={[0:6], [0:35], [30:31]}\n"
        "  p = f32[6,35,33] concatenate(l, c2, r), dimensions={2}\n"
        "  n = f32[6,33,31] slice(p), slice={[0:6], [0:33], [1:32]}\n"
        "  s = f32[6,33,31] slice(p), slice={[0:6], [2:35], [1:32]}\n"
        "  w = f32[6,33,31] slice(p), slice={[0:6], [1:34], [0:31]}\n"
        "  e = f32[6,33,31] slice(p), slice={[0:6], [1:34], [2:33]}\n"
        "  a1 = f32[6,33,31] add(n, s)\n  a2 = f32[6,33,31] add(a1, w)\n"
        "  a3 = f32[6,33,31] add(a2, e)\n"
        "  k = f32[] constant(4)\n  kb = f32[6,33,31] broadcast(k), dimensions={}\n"
        "  m = f32[6,33,31] multiply(x, kb)\n  lap = f32[6,33,31] subtract(a3, m)\n"
        "  z = f32[] constant(0)\n"
        "  q = f32[6,34,32] pad(x, z), padding=0_0x0_1x0_1\n"
        "  q0 = f32[6,17,16] slice(q), slice={[0:6:1], [0:34:2], [0:32:2]}\n"
        "  q1 = f32[6,17,16] slice(q), slice={[0:6:1], [1:34:2], [0:32:2]}\n"
        "  q2 = f32[6,17,16] slice(q), slice={[0:6:1], [0:34:2], [1:32:2]}\n"
        "  q3 = f32[6,17,16] slice(q), slice={[0:6:1], [1:34:2], [1:32:2]}\n"
        "  s2d = f32[24,17,16] concatenate(q0, q1, q2, q3), dimensions={0}\n"
        "  ROOT t = (f32[6,33,31], f32[24,17,16]) tuple(lap, s2d)\n}\n";
    int lib = g_lib_kernels, before = g_stats.native_kernels;
    check_module(text, 2200, true);
    EXPECT_INT_EQ(g_lib_kernels, lib);
    EXPECT_INT_EQ(g_stats.native_kernels - before, 2);
}

static void test_random_fusions(void) {
    char text[32768];
    tb b = {text, 0, sizeof text};
    for (uint64_t seed = 1; seed <= 40; seed++) {
        random_module(seed, &b);
        check_module(text, seed, true);
    }
}

/* A random loop fusion of rank 1 to 6 with odd dims (last dims of 1 to 40): broadcasts of
 * operands over random subsets of the result dims, in order and transposed (operand dims in
 * another order than the result's), an iota of a random dim, a broadcast whose result is
 * reshaped (the division forms), combined by arithmetic, tanh, maximum and select, with NaNs of
 * both signs, infinities and subnormals in the inputs. */
static void random_bcast_module(uint64_t seed, tb *b) {
    uint64_t s = seed * 0x2545f4914f6cdd1dull + 3;
    static const char *const fts[] = {"f32", "f32", "f64", "bf16", "f16"};
    const char *T = fts[rng_next(&s) % 5];
    int R = 1 + (int)(rng_next(&s) % 6);
    int64_t dims[6], n = 1;
    for (int d = 0; d < R; d++) {
        dims[d] = 1 + (int64_t)(rng_next(&s) % (R <= 3 ? 13 : 6));
        if (d == R - 1) dims[d] = 1 + (int64_t)(rng_next(&s) % 40);
        n *= dims[d];
    }
    /* sometimes over 2000 elements, so that the pool splits the rows */
    if (n < 2000 && R >= 2 && rng_next(&s) % 2) {
        dims[0] *= 2000 / n + 1;
        n = 1;
        for (int d = 0; d < R; d++) n *= dims[d];
    }
    char sh[128], ds[96];
    size_t w = 0;
    for (int d = 0; d < R; d++)
        w += (size_t)snprintf(ds + w, sizeof ds - w, "%s%lld", d ? "," : "", (long long)dims[d]);
    snprintf(sh, sizeof sh, "%s[%s]", T, ds);
    b->n = 0;
    tp(b, "HloModule bc%llu\nENTRY main {\n", (unsigned long long)seed);
    if (R >= 2 && seed % 2) {
        /* every input a broadcast (no input read at each element's own index): a short last
         * dim may take more dims into the column loop */
        char xd[96], xm[96];
        size_t a = 0, c = 0;
        for (int d = 0; d < R - 1; d++) {
            a +=
                (size_t)snprintf(xd + a, sizeof xd - a, "%s%lld", d ? "," : "", (long long)dims[d]);
            c += (size_t)snprintf(xm + c, sizeof xm - c, "%s%d", d ? "," : "", d);
        }
        tp(b, "  xp = %s[%s] parameter(0)\n  x = %s broadcast(xp), dimensions={%s}\n", T, xd, sh,
           xm);
    } else {
        tp(b, "  x = %s parameter(0)\n", sh);
    }
    int np = 1, nv = 0;
    char vals[8][16];
    snprintf(vals[nv++], sizeof vals[0], "x");
    for (int k = 0; k < 4; k++) {
        /* a random subset of the result dims, in a random order when transposed */
        int pick[6], m = 0;
        for (int d = 0; d < R; d++)
            if (rng_next(&s) % 2) pick[m++] = d;
        if (m == 0) pick[m++] = (int)(rng_next(&s) % (uint64_t)R);
        if (rng_next(&s) % 3 == 0)
            for (int j = m - 1; j > 0; j--) {
                int q = (int)(rng_next(&s) % (uint64_t)(j + 1)), t = pick[j];
                pick[j] = pick[q];
                pick[q] = t;
            }
        char od[96], dm[96];
        size_t a = 0, c = 0;
        for (int j = 0; j < m; j++) {
            a += (size_t)snprintf(od + a, sizeof od - a, "%s%lld", j ? "," : "",
                                  (long long)dims[pick[j]]);
            c += (size_t)snprintf(dm + c, sizeof dm - c, "%s%d", j ? "," : "", pick[j]);
        }
        tp(b, "  p%d = %s[%s] parameter(%d)\n  b%d = %s broadcast(p%d), dimensions={%s}\n", k, T,
           od, np++, k, sh, k, dm);
        snprintf(vals[nv++], sizeof vals[0], "b%d", k);
    }
    int id = (int)(rng_next(&s) % (uint64_t)R);
    tp(b, "  io = s32[%s] iota(), iota_dimension=%d\n  iv = %s convert(io)\n", ds, id, sh);
    snprintf(vals[nv++], sizeof vals[0], "iv");
    { /* an s32 operand broadcast over the leading dims, converted (mixed types) */
        int d0 = R >= 2 ? (int)(rng_next(&s) % (uint64_t)(R - 1)) + 1 : 0;
        char od[96], dm[96];
        size_t a = 0, c = 0;
        for (int d = d0; d < R; d++) {
            a += (size_t)snprintf(od + a, sizeof od - a, "%s%lld", d > d0 ? "," : "",
                                  (long long)dims[d]);
            c += (size_t)snprintf(dm + c, sizeof dm - c, "%s%d", d > d0 ? "," : "", d);
        }
        tp(b,
           "  p8 = s32[%s] parameter(%d)\n  b8 = s32[%s] broadcast(p8), dimensions={%s}\n"
           "  v8 = %s convert(b8)\n",
           od, np++, ds, dm, sh);
        snprintf(vals[nv++], sizeof vals[0], "v8");
    }
    if (R >= 2) { /* a broadcast seen through a reshape to rank 1 */
        tp(b, "  p9 = %s[%lld] parameter(%d)\n  b9 = %s[%lld,%lld] broadcast(p9), dimensions={1}\n",
           T, (long long)dims[R - 1], np++, T, (long long)(n / dims[R - 1]),
           (long long)dims[R - 1]);
        tp(b, "  r9 = %s reshape(b9)\n", sh);
        snprintf(vals[nv++], sizeof vals[0], "r9");
    }
    static const char *const ops[] = {"add", "multiply", "subtract", "maximum"};
    char acc[16] = "x";
    for (int k = 1; k < nv; k++) {
        const char *op = ops[rng_next(&s) % 4];
        tp(b, "  c%d = %s %s(%s, %s)\n", k, sh, op, acc, vals[k]);
        snprintf(acc, sizeof acc, "c%d", k);
    }
    tp(b, "  th = %s tanh(%s)\n  q = pred[%s] compare(%s, b0), direction=LT\n", sh, acc, ds, acc);
    tp(b, "  sl = %s select(q, th, b1)\n", sh);
    tp(b, "  ROOT t = (%s, %s) tuple(sl, %s)\n}\n", sh, sh, acc);
}

/* The random broadcast fusions against the reference, each on 1, 2, 3 and 8 threads: ranks 1-6,
 * last dims of 1-40 (a short one takes more trailing dims into the column loop, with index
 * tables where an operand's index is no multiple of the column), f32, f64, f16 and bf16 with an
 * s32 operand converted. Some of them must have used the tables. */
static void test_broadcast_ranks(void) {
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    char text[8192];
    tb b = {text, 0, sizeof text};
    int tables = 0, reps = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        random_bcast_module(seed, &b);
        for (int t = 0; t < 4; t++) {
            g_run_pool = pools[t];
            g_keep_src = t == 0;
            check_module(text, seed, true);
            g_keep_src = false;
            if (t == 0 && g_src && strstr(g_src, "ot_tab0[col]") != NULL &&
                strstr(g_src, "#pragma GCC ivdep") != NULL)
                tables++;
            if (t == 0 && g_src && strstr(g_src, "ot_rep0[col]") != NULL) reps++;
            free(g_src);
            g_src = NULL;
        }
        g_run_pool = NULL;
    }
    EXPECT_TRUE(tables >= 2);
    fprintf(stderr, "  %d of 40 modules with column index tables, %d with row buffers\n", tables,
            reps);
    /* large enough that the pool splits the rows (the digit counters start mid-way): x * y + z
     * broadcast over rank 5 with a last dim of 7, and rank 6 with odd dims and a last dim of 2 */
    static const char *const big[] = {
        "HloModule bc5\nENTRY main {\n  x = f32[4,1,13,1,7] parameter(0)\n"
        "  y = f32[1,6,1,31,7] parameter(1)\n  z = f32[6,1,1,1] parameter(2)\n"
        "  xr = f32[4,13,7] reshape(x)\n  yr = f32[6,31,7] reshape(y)\n"
        "  zr = f32[6] reshape(z)\n"
        "  xb = f32[4,6,13,31,7] broadcast(xr), dimensions={0,2,4}\n"
        "  yb = f32[4,6,13,31,7] broadcast(yr), dimensions={1,3,4}\n"
        "  zb = f32[4,6,13,31,7] broadcast(zr), dimensions={1}\n"
        "  m = f32[4,6,13,31,7] multiply(xb, yb)\n  a = f32[4,6,13,31,7] add(m, zb)\n"
        "  t = f32[4,6,13,31,7] tanh(a)\n  ROOT s = f32[4,6,13,31,7] subtract(t, xb)\n}\n",
        "HloModule bc6\nENTRY main {\n  x = f64[9,3,2] parameter(0)\n"
        "  y = f32[5,7,3] parameter(1)\n  io = s32[20,5,7,9,3,2] iota(), iota_dimension=4\n"
        "  xb = f64[20,5,7,9,3,2] broadcast(x), dimensions={3,4,5}\n"
        "  yb = f32[20,5,7,9,3,2] broadcast(y), dimensions={1,2,4}\n"
        "  yd = f64[20,5,7,9,3,2] convert(yb)\n  iod = f64[20,5,7,9,3,2] convert(io)\n"
        "  m = f64[20,5,7,9,3,2] multiply(xb, yd)\n"
        "  ROOT a = f64[20,5,7,9,3,2] add(m, iod)\n}\n",
        /* inputs repeating a run along the column: one moved by a row dim, one by none */
        "HloModule bcrep\nENTRY main {\n  x = f16[3] parameter(0)\n"
        "  y = f16[3000,5] parameter(1)\n  k = s32[3000,1,3] parameter(2)\n"
        "  xb = f16[3000,5,3] broadcast(x), dimensions={2}\n  kr = s32[3000,3] reshape(k)\n"
        "  yb = f16[3000,5,3] broadcast(y), dimensions={0,1}\n"
        "  kb = s32[3000,5,3] broadcast(kr), dimensions={0,2}\n"
        "  kf = f16[3000,5,3] convert(kb)\n  m = f16[3000,5,3] multiply(xb, yb)\n"
        "  ROOT a = f16[3000,5,3] add(m, kf)\n}\n"};
    /* x of bc5, x of bc6 (a run of 54 over the column loop's 378) and x and k of bcrep repeat
     * one contiguous run along the column loop: they are copied into row buffers, not
     * gathered through a table; bc6's y and bcrep's y (one element per run) are no such run */
    static const char *const want[] = {"ot_rep0[col]", "ot_tab0[col]", "ot_rep1[col]"};
    static const char *const never[] = {"ot_tab", "ot_rep1", "ot_rep2"};
    for (int j = 0; j < 3; j++)
        for (int t = 0; t < 4; t++) {
            g_run_pool = pools[t];
            g_keep_src = true;
            check_module(big[j], 300 + (uint64_t)j, true);
            g_keep_src = false;
            EXPECT_TRUE(g_src && strstr(g_src, want[j]) != NULL);
            EXPECT_TRUE(g_src && strstr(g_src, never[j]) == NULL);
            free(g_src);
            g_src = NULL;
        }
    g_run_pool = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Counter-based random bits (threefry's rounds, unrolled): u32 adds, rotates by amounts
 * sliced from an array (shift-left | shift-right-logical by 32 - r) and xors, a round's
 * value tapped as an output before the chain goes on, and the bits turned into floats in
 * [0, 1) (shift, or with 1.0's exponent, bitcast-convert, subtract). One native loop
 * computes the chain once and stores the three outputs; the bits are the reference's at 1,
 * 2, 3 and 8 threads, over shapes one row to several chunks of the pool. */
static void test_rounds_chain(void) {
    static const int threads[] = {1, 2, 3, 8};
    static const int shapes[][2] = {{1, 7}, {37, 29}, {129, 257}, {300, 999}};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    char text[16384];
    tb b = {text, 0, sizeof text};
    for (int q = 0; q < 4; q++) {
        int R = shapes[q][0], C = shapes[q][1], rounds = 4 + 2 * q, tap = 1 + q;
        b.n = 0;
        tp(&b, "HloModule rounds%d\nENTRY main {\n  x0 = u32[%d,%d] parameter(0)\n", q, R, C);
        tp(&b, "  y0 = u32[%d,%d] parameter(1)\n  rot = u32[4] parameter(2)\n", R, C);
        tp(&b, "  ks = u32[] parameter(3)\n  c32 = u32[] constant(32)\n");
        for (int r = 0; r < rounds; r++) {
            tp(&b, "  s%d = u32[1] slice(rot), slice={[%d:%d]}\n", r, r % 4, r % 4 + 1);
            tp(&b, "  a%d = u32[] reshape(s%d)\n  d%d = u32[] subtract(c32, a%d)\n", r, r, r, r);
            tp(&b, "  l%d = u32[%d,%d] broadcast(a%d), dimensions={}\n", r, R, C, r);
            tp(&b, "  m%d = u32[%d,%d] broadcast(d%d), dimensions={}\n", r, R, C, r);
            tp(&b, "  x%d = u32[%d,%d] add(x%d, y%d)\n", r + 1, R, C, r, r);
            tp(&b, "  p%d = u32[%d,%d] shift-left(y%d, l%d)\n", r, R, C, r, r);
            tp(&b, "  n%d = u32[%d,%d] shift-right-logical(y%d, m%d)\n", r, R, C, r, r);
            tp(&b, "  o%d = u32[%d,%d] or(p%d, n%d)\n", r, R, C, r, r);
            tp(&b, "  y%d = u32[%d,%d] xor(x%d, o%d)\n", r + 1, R, C, r + 1, r);
        }
        tp(&b, "  kb = u32[%d,%d] broadcast(ks), dimensions={}\n", R, C);
        tp(&b, "  t1 = u32[%d,%d] add(x%d, kb)\n  t2 = u32[%d,%d] add(y%d, kb)\n", R, C, tap, R, C,
           rounds);
        tp(&b, "  c9 = u32[] constant(9)\n  b9 = u32[%d,%d] broadcast(c9), dimensions={}\n", R, C);
        tp(&b, "  one = u32[] constant(1065353216)\n");
        tp(&b, "  ob = u32[%d,%d] broadcast(one), dimensions={}\n", R, C);
        tp(&b, "  h = u32[%d,%d] shift-right-logical(x%d, b9)\n", R, C, rounds);
        tp(&b, "  e = u32[%d,%d] or(h, ob)\n  f = f32[%d,%d] bitcast-convert(e)\n", R, C, R, C);
        tp(&b, "  f1 = f32[] constant(1)\n  fb = f32[%d,%d] broadcast(f1), dimensions={}\n", R, C);
        tp(&b, "  u = f32[%d,%d] subtract(f, fb)\n", R, C);
        tp(&b, "  ROOT t = (u32[%d,%d], u32[%d,%d], f32[%d,%d]) tuple(t1, t2, u)\n}\n", R, C, R, C,
           R, C);
        for (int t = 0; t < 4; t++) {
            g_run_pool = pools[t];
            g_keep_src = true;
            check_module(text, 400 + (uint64_t)q, true);
            g_keep_src = false;
            /* one loop: a single kernel function in the generated source */
            const char *k1 = g_src ? strstr(g_src, "void otk_0(") : NULL;
            EXPECT_TRUE(k1 != NULL);
            EXPECT_TRUE(k1 && strstr(g_src, "void otk_1(") == NULL);
            free(g_src);
            g_src = NULL;
        }
    }
    g_run_pool = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Reduce-rooted fusions: row, column, middle, several and all dims, with add / multiply /
 * maximum / minimum reducers (integers also and / or), over an elementwise producer. */
/* Reduces of fused producers over operands with a size-0 dim (reduced or kept): the index
 * arithmetic divided by the reduced dims' sizes at compile time (SIGFPE in the compiler, the
 * random_ops family's seed 326); such a fusion stays interpreted and equals the evaluator. */
static void test_reduce_of_no_elements(void) {
    static const char *const shapes[][3] = {{"3,0,4", "{1}", "3,4"},
                                            {"3,0,4", "{0,2}", "0"},
                                            {"5,2,0", "{0,2}", "2"},
                                            {"0,6", "{0}", "6"},
                                            {"2,0,3,1", "{1,3}", "2,3"}};
    for (int k = 0; k < 5; k++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "HloModule r0\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                 "  ROOT c = f32[] add(a, b)\n}\n"
                 "ENTRY main {\n  x = f32[%s] parameter(0)\n  y = f32[%s] sine(x)\n"
                 "  w = f32[%s] multiply(y, x)\n  z = f32[] constant(0.5)\n"
                 "  ROOT o = f32[%s] reduce(w, z), dimensions=%s, to_apply=sum\n}\n",
                 shapes[k][0], shapes[k][0], shapes[k][0], shapes[k][2], shapes[k][1]);
        check_module(text, 7 + (uint64_t)k, false);
    }
}

static void test_reductions(void) {
    static const char *const dts[] = {"f32", "f64", "f16", "bf16", "s32", "u8", "pred"};
    static const char *const dims[] = {"{2}", "{0}", "{1}", "{0,2}", "{0,1,2}", "{1,2}"};
    static const char *const kept[] = {"7,33", "33,150", "7,150", "33", "", "7"};
    static const char *const fred[] = {"add", "multiply", "maximum", "minimum"};
    static const char *const ired[] = {"add", "maximum", "minimum", "and", "or"};
    static const char *const pred_red[] = {"and", "or", "maximum", "minimum"};
    char text[65536];
    tb b = {text, 0, sizeof text};
    for (int j = 0; j < 7; j++) {
        const char *dt = dts[j];
        bool fl = dt[0] == 'f' || dt[0] == 'b', pred = dt[0] == 'p';
        const char *const *reds = fl ? fred : pred ? pred_red : ired;
        int nred = fl ? 4 : pred ? 4 : 5;
        b.n = 0;
        tp(&b, "HloModule red_%s\n", dt);
        for (int r = 0; r < nred; r++)
            tp(&b,
               "r%d {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n  ROOT c = %s[] "
               "%s(%s)\n}\n",
               r, dt, dt, dt, reds[r], r % 2 ? "b, a" : "a, b");
        tp(&b, "ENTRY main {\n  x = %s[7,33,150] parameter(0)\n  y = %s[7,33,150] parameter(1)\n",
           dt, dt);
        tp(&b, "  z = %s[] parameter(2)\n", dt);
        tp(&b, "  w = %s[7,33,150] %s(x, y)\n", dt, pred ? "xor" : fl ? "multiply" : "add");
        char outs[4096], types[4096];
        size_t on = 0, tn = 0;
        int k = 0;
        for (int r = 0; r < nred; r++)
            for (int d = 0; d < 6; d++, k++) {
                if (fl) {
                    /* a producer of its own per reduce, so it fuses into that reduce */
                    tp(&b,
                       "  c%d = %s[] constant(%d.5)\n  b%d = %s[7,33,150] broadcast(c%d), "
                       "dimensions={}\n  w%d = %s[7,33,150] multiply(x, b%d)\n",
                       k, dt, k % 5, k, dt, k, k, dt, k);
                    tp(&b, "  o%d = %s[%s] reduce(w%d, z), dimensions=%s, to_apply=r%d\n", k, dt,
                       kept[d], k, dims[d], r);
                } else {
                    tp(&b, "  o%d = %s[%s] reduce(%s, z), dimensions=%s, to_apply=r%d\n", k, dt,
                       kept[d], d % 2 ? "x" : "w", dims[d], r);
                }
                on += (size_t)snprintf(outs + on, sizeof outs - on, "%so%d", k ? ", " : "", k);
                tn += (size_t)snprintf(types + tn, sizeof types - tn, "%s%s[%s]", k ? ", " : "", dt,
                                       kept[d]);
            }
        tp(&b, "  ROOT t = (%s) tuple(%s)\n}\n", types, outs);
        check_module(text, 900 + (uint64_t)j, true);
    }
}

/* A column reduce split over the pool (a ReLU layer's gradient beside its bias gradient, 300 x
 * 1000 f32: more columns than one piece): one piece of whole columns per thread, a multiple of 16
 * columns, at least the fixed partition's (cg_piece), and the results bit for bit the
 * reference's on 1, 2, 3 and 8 threads. */
static void test_reduce_cols_pieces(void) {
    static const char *text =
        "HloModule cp\nrd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT c = f32[] add(a, b)\n}\n"
        "ENTRY main {\n  h = f32[300,1000] parameter(0)\n  u = f32[1000] parameter(1)\n"
        "  g = f32[300,1000] parameter(2)\n  z = f32[] constant(0)\n"
        "  ub = f32[300,1000] broadcast(u), dimensions={1}\n  y = f32[300,1000] add(h, ub)\n"
        "  zb = f32[300,1000] broadcast(z), dimensions={}\n"
        "  m = pred[300,1000] compare(y, zb), direction=GT\n"
        "  w = f32[300,1000] select(m, g, zb)\n"
        "  s = f32[1000] reduce(w, z), dimensions={0}, to_apply=rd\n"
        "  ROOT t = (f32[300,1000], f32[1000]) tuple(w, s)\n}\n";
    ot_module *m = parse(text);
    ASSERT_TRUE(m != NULL);
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, NULL, &e));
    const cg_program *p = cc_executable_native(e);
    int cols = -1;
    for (int k = 0; k < ot_executable_kernel_count(e); k++)
        if (ot_executable_kernel(e, k)->kind == OT_KERNEL_FUSION && cg_native(p, k)) cols = k;
    EXPECT_TRUE(cols >= 0 && cg_splits(p, cols));
    static const int threads[] = {1, 2, 3, 8};
    for (int t = 0; t < 4 && cols >= 0; t++) {
        int64_t piece = cg_piece(p, cols, threads[t]), want = (1000 + threads[t] - 1) / threads[t];
        want = (want + 15) / 16 * 16;
        if (piece != want)
            fprintf(stderr, "%d threads: pieces of %lld columns, want %lld\n", threads[t],
                    (long long)piece, (long long)want);
        EXPECT_TRUE(piece == want);
    }
    ot_executable_free(e);
    ot_module_free(m);
    g_keep_src = true;
    for (int t = 0; t < 4; t++) {
        ot_threadpool *pool = NULL;
        ASSERT_OK(ot_threadpool_create(threads[t], &pool));
        g_run_pool = pool;
        check_module(text, 4100 + (uint64_t)t, true);
        EXPECT_TRUE(g_src && strstr(g_src, "(columns) */"));
        g_run_pool = NULL;
        ot_threadpool_free(pool);
    }
    g_keep_src = false;
}

/* Multi-output fusions of an elementwise value and its reduce (a bias gradient summed over the
 * batch, a row maximum next to the logits): reduces of the leading dims or of a block of middle
 * dims (columns kernel, 2-D to 5-D, each column combined from init in row order; also as the
 * fusion's only output) and serial
 * row reduces (maximum, minimum, multiply, and integer sums, which the lane order does not
 * cover; f16/bf16 row sums are f32 sums in the lane order, exec/numerics.h) on odd sizes, every
 * dtype's reducers in both operand orders, compared bit for bit with the reference on 1, 2, 3 and 8
 * threads (the columns are split over the pool: results must not depend on it). */
static void test_reduce_outputs(void) {
    static const char *const dts[] = {"f32", "f64", "f16", "bf16", "s32"};
    static const char *const fred[] = {"add", "maximum", "minimum", "multiply"};
    /* x's shape, the broadcast dims of the per-column value, of the per-row value, the reduced
     * dims, the reduce's shape, the per-column and per-row value shapes */
    static const struct {
        const char *x, *cb, *rb, *dims, *out, *cs, *rs;
        bool cols, middle; /* middle: f32, bf16 and s32 only (the test's time) */
    } forms[] = {
        {"37,70", "{1}", "{0}", "{0}", "70", "70", "37", true, false},
        {"5,9,67", "{2}", "{0,1}", "{0,1}", "67", "67", "5,9", true, false},
        {"1,37,3,70", "{2,3}", "{0,1}", "{0,1}", "3,70", "3,70", "1,37", true, false},
        /* a block of middle dims (softmax over a middle axis): one column loop per outer index,
         * the last dim's digits from the row (one trailing dim) or divisions (several) */
        {"5,37,70", "{0,2}", "{1}", "{1}", "5,70", "5,70", "37", true, true},
        {"3,4,9,67", "{0,3}", "{1,2}", "{1,2}", "3,67", "3,67", "4,9", true, true},
        {"2,3,37,5,13", "{0,1,3,4}", "{2}", "{2}", "2,3,5,13", "2,3,5,13", "37", true, true},
        {"4,1,33,1,70", "{0,1,3,4}", "{2}", "{2}", "4,1,1,70", "4,1,1,70", "33", true, true},
        {"70,37", "{0}", "{1}", "{1}", "70", "70", "37", false, false},
    };
    enum { NF = sizeof forms / sizeof forms[0] };
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    char text[16384];
    tb b = {text, 0, sizeof text};
    int seed = 0;
    for (int j = 0; j < 5; j++) {
        const char *dt = dts[j];
        bool fl = dt[0] != 's';
        for (int f = 0; f < NF; f++) {
            if (forms[f].middle && (j == 1 || j == 2)) continue;
            for (int r = 0; r < 8; r++) {
                /* r >= 4: the reduce alone (its producers fused into it), which takes the
                 * columns kernel too, in the same order as the serial chain per output */
                bool single = r >= 4;
                /* a row reduce that qualifies for the lane order is the row fusion's (tested
                 * apart); an integer product wraps to zero quickly: maximum instead */
                const char *red = !fl && r % 4 == 3 ? "maximum" : fred[r % 4];
                if (!forms[f].cols && (single || (r == 0 && (j == 0 || j == 1)))) continue;
                b.n = 0;
                tp(&b,
                   "HloModule mo\nrd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
                   "  ROOT c = %s[] %s(%s)\n}\n",
                   dt, dt, dt, red, seed % 2 ? "b, a" : "a, b");
                tp(&b,
                   "ENTRY main {\n  x = %s[%s] parameter(0)\n  u = %s[%s] parameter(1)\n"
                   "  g = %s[%s] parameter(2)\n  z = %s[] parameter(3)\n"
                   "  ub = %s[%s] broadcast(u), dimensions=%s\n"
                   "  gb = %s[%s] broadcast(g), dimensions=%s\n"
                   "  y = %s[%s] %s(x, ub)\n  w = %s[%s] add(y, gb)\n"
                   "  %ss = %s[%s] reduce(w, z), dimensions=%s, to_apply=rd\n",
                   dt, forms[f].x, dt, forms[f].cs, dt, forms[f].rs, dt, dt, forms[f].x,
                   forms[f].cb, dt, forms[f].x, forms[f].rb, dt, forms[f].x,
                   fl ? "multiply" : "subtract", dt, forms[f].x, single ? "ROOT " : "", dt,
                   forms[f].out, forms[f].dims);
                if (!single)
                    tp(&b, "  ROOT t = (%s[%s], %s[%s]) tuple(w, s)\n", dt, forms[f].x, dt,
                       forms[f].out);
                tp(&b, "}\n");
                g_keep_src = true;
                for (int t = 0; t < 4; t++) {
                    int before = g_stats.interp_kernels;
                    g_run_pool = pools[t];
                    check_module(text, 1300 + (uint64_t)seed, true);
                    EXPECT_INT_EQ(g_stats.interp_kernels, before);
                    /* the form under test was generated (not some other split of the module) */
                    /* f32/f64/f16 maximum and minimum rows: the integer-key reduction */
                    bool keyed = !forms[f].cols && j < 3 && (r % 4 == 1 || r % 4 == 2);
                    /* a middle block's reduce alone: the walk (test_reduce_walk) */
                    /* an f16/bf16 row sum: widened to f32, summed in the lane order */
                    bool widened = !forms[f].cols && (j == 2 || j == 3) && r % 4 == 0;
                    const char *want = forms[f].cols && single && forms[f].middle
                                           ? "(reduce, walk) */"
                                       : forms[f].cols ? "(columns) */"
                                       : keyed         ? "keys) */"
                                       : widened       ? "(lane order) */"
                                                       : "(serial) */";
                    if (!g_src || !strstr(g_src, want))
                        fprintf(stderr, "no %s kernel for\n%s\n", want, text);
                    EXPECT_TRUE(g_src && strstr(g_src, want));
                }
                g_keep_src = false;
                g_run_pool = NULL;
                seed++;
            }
        }
    }
    /* a sum over batch and space per channel (NCHW): the lane-ordered reduce's loops store the
     * elementwise output as they visit each element; an f16 sum is an f32 sum of the converted
     * values (exec/numerics.h), the same loops */
    static const char *const mdts[] = {"f32", "f64", "f16"};
    static const char *const mx[] = {"5,6,7,9", "3,7,5,33"}, *const mc[] = {"6", "7"},
                             *const mb[] = {"5", "3"};
    for (int j = 0; j < 3; j++)
        for (int f = 0; f < 2; f++) {
            const char *dt = mdts[j];
            b.n = 0;
            tp(&b,
               "HloModule mo\nrd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
               "  ROOT c = %s[] add(%s)\n}\n",
               dt, dt, dt, f ? "b, a" : "a, b");
            tp(&b,
               "ENTRY main {\n  x = %s[%s] parameter(0)\n  u = %s[%s] parameter(1)\n"
               "  g = %s[%s] parameter(2)\n  z = %s[] parameter(3)\n"
               "  ub = %s[%s] broadcast(u), dimensions={1}\n"
               "  gb = %s[%s] broadcast(g), dimensions={0}\n"
               "  y = %s[%s] multiply(x, ub)\n  w = %s[%s] add(y, gb)\n"
               "  s = %s[%s] reduce(w, z), dimensions={0,2,3}, to_apply=rd\n"
               "  ROOT t = (%s[%s], %s[%s]) tuple(w, s)\n}\n",
               dt, mx[f], dt, mc[f], dt, mb[f], dt, dt, mx[f], dt, mx[f], dt, mx[f], dt, mx[f], dt,
               mc[f], dt, mx[f], dt, mc[f]);
            g_keep_src = true;
            for (int t = 0; t < 4; t += 3) {
                int before = g_stats.interp_kernels;
                g_run_pool = pools[t];
                check_module(text, 1500 + (uint64_t)(j * 2 + f), true);
                EXPECT_INT_EQ(g_stats.interp_kernels, before);
                EXPECT_TRUE(g_src && strstr(g_src, "(reduce, lane order, runs) */"));
            }
            g_keep_src = false;
            g_run_pool = NULL;
        }
    free(g_src);
    g_src = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Float sums in the lane order whose reduced dims are not a suffix of the input (the last dim
 * reduced, a kept dim before some reduced one: `{1,3}` of NCHW-like shapes, `{0,2}`), with a
 * fused producer: each block's elements are computed run by run into a buffer and summed in
 * lanes. Shapes cross the 4096-element block (runs that straddle a block's end, a partial last
 * block, a tail shorter than a lane group, a row shorter than one group), with unit dims among
 * the reduced ones; alone and beside an elementwise output; f32 (also on tiny values, across the
 * flush) and f64; both reducer operand orders; bit for bit the reference on 1, 2, 3 and 8
 * threads. */
static void test_reduce_runs(void) {
    static const struct {
        const char *x, *dims, *out;
    } forms[] = {
        {"3,5,7,4", "{1,3}", "3,7"},      {"4,70,3,65", "{1,3}", "4,3"},
        {"2,9,5,1000", "{1,3}", "2,5"},   {"6,130,3,33", "{0,1,3}", "3"},
        {"5,3,7", "{0,2}", "3"},          {"3,4,5", "{0,2}", "4"},
        {"7,2,3,1,17", "{0,2,3,4}", "2"}, {"2,3,4,5,6", "{0,2,4}", "3,5"},
    };
    enum { NF = sizeof forms / sizeof forms[0] };
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static char text[32768];
    tb b = {text, 0, sizeof text};
    for (int v = 0; v < 6; v++) {
        const char *dt = v % 3 == 1 ? "f64" : "f32";
        bool multi = v >= 3;
        g_tiny = v % 3 == 2;
        b.n = 0;
        tp(&b,
           "HloModule runs\nrd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
           "  ROOT c = %s[] add(%s)\n}\n",
           dt, dt, dt, v % 2 ? "b, a" : "a, b");
        tp(&b, "ENTRY main {\n  z = %s[] parameter(0)\n", dt);
        char outs[2048], types[2048];
        size_t on = 0, tn = 0;
        for (int f = 0; f < NF; f++) {
            tp(&b,
               "  x%d = %s[%s] parameter(%d)\n  c%d = %s[] constant(%d.25)\n"
               "  b%d = %s[%s] broadcast(c%d), dimensions={}\n"
               "  m%d = %s[%s] multiply(x%d, x%d)\n  w%d = %s[%s] add(m%d, b%d)\n"
               "  s%d = %s[%s] reduce(w%d, z), dimensions=%s, to_apply=rd\n",
               f, dt, forms[f].x, f + 1, f, dt, f % 3, f, dt, forms[f].x, f, f, dt, forms[f].x, f,
               f, f, dt, forms[f].x, f, f, f, dt, forms[f].out, f, forms[f].dims);
            on += (size_t)snprintf(outs + on, sizeof outs - on, "%ss%d", f ? ", " : "", f);
            tn += (size_t)snprintf(types + tn, sizeof types - tn, "%s%s[%s]", f ? ", " : "", dt,
                                   forms[f].out);
            if (multi) {
                on += (size_t)snprintf(outs + on, sizeof outs - on, ", w%d", f);
                tn += (size_t)snprintf(types + tn, sizeof types - tn, ", %s[%s]", dt, forms[f].x);
            }
        }
        tp(&b, "  ROOT t = (%s) tuple(%s)\n}\n", types, outs);
        g_keep_src = true;
        for (int t = 0; t < 4; t++) {
            int before = g_stats.interp_kernels;
            g_run_pool = pools[t];
            check_module(text, 1600 + (uint64_t)v, true);
            EXPECT_INT_EQ(g_stats.interp_kernels, before);
            int nruns = 0;
            for (const char *q = g_src; q && (q = strstr(q, "(reduce, lane order, runs) */")); q++)
                nruns++;
            EXPECT_INT_EQ(nruns, NF);
        }
        g_keep_src = false;
        g_run_pool = NULL;
        g_tiny = false;
    }
    free(g_src);
    g_src = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Lane-ordered sums of few long rows with a fused producer (a full-array sum, a loss, a few row
 * sums): the block form, whose block trees split over the pool and whose fold combines them in
 * block order. Outputs 1 to 20, rows of 2 to 18 blocks (a partial last block, a tail shorter than
 * a lane group, exact multiples), reduced unit dims; f32 and f64, each also on tiny values (across
 * the flush); both reducer operand orders; finite values (a NaN would hide the order); bit for
 * bit the reference on 1, 2, 3 and 8 threads, where the block form runs whenever the outputs are
 * fewer than 4 per thread. (A sum beside elementwise outputs is a row fusion: its own loop.) */
static void test_reduce_blocks(void) {
    static const struct {
        const char *x, *dims, *out;
    } forms[] = {
        {"70001", "{0}", ""},
        {"3,40000", "{1}", "3"},
        {"5,7,4099", "{1,2}", "5"},
        {"2,65536", "{1}", "2"},
        {"7,16400", "{1}", "7"},
        {"9,8200", "{1}", "9"},
        {"1,3,1,24577", "{1,2,3}", "1"},
        {"20,8208", "{1}", "20"},
    };
    enum { NF = sizeof forms / sizeof forms[0] };
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static char text[32768];
    tb b = {text, 0, sizeof text};
    g_finite = true;
    for (int v = 0; v < 4; v++) {
        const char *dt = v % 2 ? "f64" : "f32";
        g_tiny = v >= 2;
        b.n = 0;
        tp(&b,
           "HloModule blocks\nrd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
           "  ROOT c = %s[] add(%s)\n}\n",
           dt, dt, dt, v % 2 ? "b, a" : "a, b");
        tp(&b, "ENTRY main {\n  z = %s[] parameter(0)\n", dt);
        char outs[2048], types[2048];
        size_t on = 0, tn = 0;
        for (int f = 0; f < NF; f++) {
            tp(&b,
               "  x%d = %s[%s] parameter(%d)\n  c%d = %s[] constant(%d.25)\n"
               "  b%d = %s[%s] broadcast(c%d), dimensions={}\n"
               "  m%d = %s[%s] multiply(x%d, x%d)\n  w%d = %s[%s] subtract(m%d, b%d)\n"
               "  s%d = %s[%s] reduce(w%d, z), dimensions=%s, to_apply=rd\n",
               f, dt, forms[f].x, f + 1, f, dt, f % 3, f, dt, forms[f].x, f, f, dt, forms[f].x, f,
               f, f, dt, forms[f].x, f, f, f, dt, forms[f].out, f, forms[f].dims);
            on += (size_t)snprintf(outs + on, sizeof outs - on, "%ss%d", f ? ", " : "", f);
            tn += (size_t)snprintf(types + tn, sizeof types - tn, "%s%s[%s]", f ? ", " : "", dt,
                                   forms[f].out);
        }
        tp(&b, "  ROOT t = (%s) tuple(%s)\n}\n", types, outs);
        g_keep_src = true;
        for (int t = 0; t < 4; t++) {
            int before = g_stats.interp_kernels;
            g_run_pool = pools[t];
            check_module(text, 1650 + (uint64_t)v, true);
            EXPECT_INT_EQ(g_stats.interp_kernels, before);
            int ntree = 0, nfold = 0;
            for (const char *q = g_src;
                 q && (q = strstr(q, "(reduce, lane order, block trees) */")); q++)
                ntree++;
            for (const char *q = g_src; q && (q = strstr(q, "(reduce, lane order, block fold) */"));
                 q++)
                nfold++;
            EXPECT_INT_EQ(ntree, NF);
            EXPECT_INT_EQ(nfold, NF);
        }
        g_keep_src = false;
        g_run_pool = NULL;
        g_tiny = false;
    }
    g_finite = false;
    free(g_src);
    g_src = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* A loss summed over whole rows beside the per-element values it was made of (the BCE
 * autoencoder's fusion: s = x + bias, softplus terms stored for the gradient, their weighted sum
 * over all of [256, 784]): few rows, so the block form (the trees over the pool, one fold), not
 * the row loop's one thread per row; bit for bit the reference on 1, 2, 3 and 8 threads. The
 * bias is read at col % C, an index not affine in the loop: gcc vectorizes the block trees'
 * loops beside the stored outputs only with the pointers as restrict parameters and the index in
 * 32 bits (gcc's report, when cc is gcc). */
static void test_loss_beside_outputs(void) {
    static const struct {
        const char *x, *dims, *out, *c;
        int last;
    } forms[] = {
        {"256,784", "{0,1}", "", "784", 1},
        {"3,5000", "{1}", "3", "5000", 1},
        {"2,3,4099", "{1,2}", "2", "4099", 2},
        {"7,10007", "{0,1}", "", "10007", 1},
    };
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    FILE *v = popen("cc --version 2>/dev/null", "r");
    char line[512];
    bool gcc = false;
    while (v && fgets(line, sizeof line, v))
        if (strstr(line, "Free Software Foundation")) gcc = true;
    if (v) pclose(v);
    char wrapper[512], report[512];
    snprintf(wrapper, sizeof wrapper, "%s/loss_cc.sh", g_cache);
    snprintf(report, sizeof report, "%s/loss_report.txt", g_cache);
    if (gcc) {
        FILE *w = fopen(wrapper, "w");
        ASSERT_TRUE(w != NULL);
        fprintf(w, "#!/bin/sh\nexec cc -fopt-info-vec-optimized \"$@\" 2>>'%s'\n", report);
        fclose(w);
        ASSERT_TRUE(chmod(wrapper, 0755) == 0);
        setenv("OPTITPU_CC", wrapper, 1);
    }
    static char text[4096];
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        const char *X = forms[f].x;
        snprintf(text, sizeof text,
                 "HloModule loss_rows\nrd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                 "  ROOT c = f32[] add(a, b)\n}\nENTRY main {\n"
                 "  x = f32[%s] parameter(0)\n  y = f32[%s] parameter(1)\n"
                 "  bias = f32[%s] parameter(2)\n"
                 "  bb = f32[%s] broadcast(bias), dimensions={%d}\n  s = f32[%s] add(x, bb)\n"
                 "  a = f32[%s] abs(s)\n  na = f32[%s] negate(a)\n  e = f32[%s] exponential(na)\n"
                 "  l = f32[%s] log-plus-one(e)\n  m = f32[%s] multiply(y, l)\n"
                 "  z = f32[] constant(0)\n"
                 "  r = f32[%s] reduce(m, z), dimensions=%s, to_apply=rd\n"
                 "  ROOT t = (f32[%s], f32[%s], f32[%s]) tuple(s, l, r)\n}\n",
                 X, X, forms[f].c, X, forms[f].last, X, X, X, X, X, X, forms[f].out, forms[f].dims,
                 X, X, forms[f].out);
        if (gcc) remove(report);
        g_keep_src = true;
        for (int t = 0; t < 4; t++) {
            int before = g_stats.interp_kernels;
            g_run_pool = pools[t];
            check_module(text, 1700 + (uint64_t)f, true);
            EXPECT_INT_EQ(g_stats.interp_kernels, before);
        }
        g_keep_src = false;
        g_run_pool = NULL;
        const char *tree = g_src ? strstr(g_src, "(reduce, lane order, block trees) */") : NULL;
        const char *fold = tree ? strstr(tree, "(reduce, lane order, block fold) */") : NULL;
        EXPECT_TRUE(tree != NULL && fold != NULL);
        if (!gcc || !tree || !fold) continue;
        /* the lines of the block trees' function in the compiled file */
        long lo = 1, hi;
        for (const char *q = g_src; q < tree; q++) lo += *q == '\n';
        hi = lo;
        for (const char *q = tree; q < fold; q++) hi += *q == '\n';
        /* the loops that compute the elements (a loop whose body starts with the column),
         * not only the lanes' folds */
        int in_trees = 0;
        FILE *r = fopen(report, "r");
        ASSERT_TRUE(r != NULL);
        while (fgets(line, sizeof line, r)) {
            const char *c = strstr(line, ".c:");
            long ln = c ? strtol(c + 3, NULL, 10) : 0;
            if (!strstr(line, "optimized: loop vectorized") || ln <= lo || ln >= hi) continue;
            const char *q = g_src;
            for (long k = 1; k < ln + 1 && q; k++) q = strchr(q, '\n') ? strchr(q, '\n') + 1 : NULL;
            if (q && strncmp(q, "    const int64_t col = ", 24) == 0) in_trees++;
        }
        fclose(r);
        if (in_trees == 0)
            fprintf(stderr, "no element loop of the block trees vectorized:\n%s\n", g_src);
        EXPECT_TRUE(in_trees > 0);
    }
    if (gcc) unsetenv("OPTITPU_CC");
    free(g_src);
    g_src = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Lane-ordered sums of an expression that reads a value per row (a broadcast along the leading
 * dims, read at i / div: x / (|p| + 1)[row] summed into a loss or into row sums of a 3-D input),
 * the operand f32, f64 or bf16 converted: the lanes read the block buffers of block_broadcast
 * wherever div >= 16 (rows 1 to 10000, widths 3 to 4097: a single row (a scalar), a block size, a
 * tail shorter than a lane group, a width below a lane group, which keeps the division); bit for
 * bit the reference on 1, 2, 3 and 8 threads (one output: the block form; several: the one-loop
 * form), finite values and, once, NaNs, infinities and subnormals. */
static void test_reduce_row_broadcast(void) {
    static const struct {
        const char *x, *p, *bd, *dims, *out;
        bool buf; /* the form reads a block buffer */
    } forms[] = {
        {"1001,300", "1001", "{0}", "{0,1}", "", true},
        {"3,17", "3", "{0}", "{0,1}", "", true},
        {"10000,16", "10000", "{0}", "{0,1}", "", true},
        {"7,4096", "7", "{0}", "{0,1}", "", true},
        {"1,4097", "1", "{0}", "{0,1}", "", false}, /* one row: a scalar broadcast */
        {"5000,3", "5000", "{0}", "{0,1}", "", false},
        {"6,5,37", "6,5", "{0,1}", "{1,2}", "6", true},
        {"4,9,33", "4", "{0}", "{0,1,2}", "", true},
        {"2,3,4100", "2,3", "{0,1}", "{2}", "2,3", false},
    };
    enum { NF = sizeof forms / sizeof forms[0] };
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static char text[32768];
    tb b = {text, 0, sizeof text};
    for (int v = 0; v < 3; v++) {
        const char *dt = v == 1 ? "f64" : "f32";
        g_finite = v < 2;
        for (int f = 0; f < NF; f++) {
            b.n = 0;
            const char *pt = f % 3 == 2 ? "bf16" : dt; /* the per-row operand's type */
            tp(&b,
               "HloModule rowb\nrd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
               "  ROOT c = %s[] add(a, b)\n}\nENTRY main {\n  z = %s[] parameter(0)\n"
               "  x = %s[%s] parameter(1)\n  p = %s[%s] parameter(2)\n"
               "  pc = %s[%s] convert(p)\n  q = %s[%s] abs(pc)\n  one = %s[] constant(1)\n"
               "  ob = %s[%s] broadcast(one), dimensions={}\n  n = %s[%s] add(q, ob)\n"
               "  nb = %s[%s] broadcast(n), dimensions=%s\n  d = %s[%s] divide(x, nb)\n"
               "  ROOT s = %s[%s] reduce(d, z), dimensions=%s, to_apply=rd\n}\n",
               dt, dt, dt, dt, dt, forms[f].x, pt, forms[f].p, dt, forms[f].p, dt, forms[f].p, dt,
               dt, forms[f].p, dt, forms[f].p, dt, forms[f].x, forms[f].bd, dt, forms[f].x, dt,
               forms[f].out, forms[f].dims);
            g_keep_src = true;
            for (int t = 0; t < 4; t++) {
                g_run_pool = pools[t];
                check_module(text, 1700 + (uint64_t)(v * NF + f), true);
                EXPECT_TRUE(g_src != NULL);
                bool buf = g_src && strstr(g_src, "ot_b0[i - ot_blk]") != NULL;
                if (buf != forms[f].buf)
                    fprintf(stderr, "form %d (%s): block buffer %d\n", f, forms[f].x, (int)buf);
                EXPECT_TRUE(buf == forms[f].buf);
            }
            g_keep_src = false;
            g_run_pool = NULL;
        }
    }
    g_finite = false;
    free(g_src);
    g_src = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Reduces of a fused producer whose input's last dim is kept, over dims that are not a prefix
 * (`{0,2}` of a rank-4 input, a middle dim, several runs of reduced dims, unit dims, a kept run
 * of several contiguous dims, runs of 3 to 600 outputs): the walk over each run of the innermost
 * kept dims, every output folded from init in the reference's order. f32 with every reducer,
 * f64, bf16 and s32; both reducer operand orders; bit for bit the reference on 1, 2, 3 and 8
 * threads. */
/* Index digits the two-level loop does not give, divided out of the index (ix_digit, 32-bit
 * arithmetic): a full sum of a value read through a broadcast over dims {0, 2} (softmax over a
 * middle axis), a broadcast and an iota seen through a reshape, a broadcast inside another's
 * operand; f32, f64 and s32, bit for bit the reference on 1, 2, 3 and 8 threads. */
static void test_index_digits(void) {
    static const char *const dts[] = {"f32", "f64", "s32"};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static char text[8192];
    tb b = {text, 0, sizeof text};
    for (int j = 0; j < 3; j++) {
        const char *dt = dts[j];
        b.n = 0;
        tp(&b,
           "HloModule digits\nrd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
           "  ROOT c = %s[] add(a, b)\n}\n"
           "ENTRY main {\n  x = %s[5,37,70] parameter(0)\n  u = %s[5,70] parameter(1)\n"
           "  y = %s[6,7,9] parameter(2)\n  v = %s[6,9] parameter(3)\n  z = %s[] parameter(4)\n"
           "  ub = %s[5,37,70] broadcast(u), dimensions={0,2}\n"
           "  w = %s[5,37,70] multiply(x, ub)\n"
           "  s = %s[] reduce(w, z), dimensions={0,1,2}, to_apply=rd\n"
           "  vb = %s[6,7,9] broadcast(v), dimensions={0,2}\n"
           "  io = %s[6,7,9] iota(), iota_dimension=1\n"
           "  p = %s[6,7,9] add(vb, io)\n  q = %s[6,7,9] multiply(p, y)\n"
           "  r = %s[42,9] reshape(q)\n"
           "  vr = %s[54] reshape(v)\n  vrb = %s[7,54] broadcast(vr), dimensions={1}\n"
           "  vrr = %s[7,6,9] reshape(vrb)\n"
           "  yt = %s[7,6,9] transpose(y), dimensions={1,0,2}\n"
           "  m = %s[7,6,9] subtract(yt, vrr)\n"
           "  ROOT t = (%s[], %s[42,9], %s[7,6,9]) tuple(s, r, m)\n}\n",
           dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt,
           dt, dt);
        for (int t = 0; t < 4; t++) {
            g_run_pool = pools[t];
            check_module(text, 1700 + (uint64_t)j, true);
        }
        g_run_pool = NULL;
    }
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Slices seen through a reshape that drops or adds unit dims (the q, k and v of a fused qkv
 * projection, [B,S,3,H,D] -> [B,S,H,D]; a column taken as [A,1,C]; a strided slice squeezed),
 * in loop fusions with an elementwise op after them: the reshape's dims read the loop's row
 * digits and column (no division or remainder of i per element), every result the reference's
 * bits at 1, 2, 3 and 8 threads, on last dims of 64, 5 (a column loop over several dims) and 17,
 * f32 and s32. */
static void test_squeezed_slices(void) {
    static const int dlast[] = {64, 5, 17};
    static const char *const dts[] = {"f32", "s32"};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static char text[8192];
    tb b = {text, 0, sizeof text};
    for (int j = 0; j < 2; j++)
        for (int k = 0; k < 3; k++) {
            const char *T = dts[j];
            int D = dlast[k];
            b.n = 0;
            tp(&b,
               "HloModule squeeze\nENTRY main {\n  x = %s[4,33,3,4,%d] parameter(0)\n"
               "  y = %s[4,33,4,%d] parameter(1)\n  a = %s[300,%d] parameter(2)\n",
               T, D, T, D, T, D);
            for (int q = 0; q < 3; q++)
                tp(&b,
                   "  s%d = %s[4,33,1,4,%d] slice(x), slice={[0:4], [0:33], [%d:%d], [0:4], "
                   "[0:%d]}\n  r%d = %s[4,33,4,%d] reshape(s%d)\n"
                   "  m%d = %s[4,33,4,%d] multiply(r%d, y)\n",
                   q, T, D, q, q + 1, D, q, T, D, q, q, T, D, q);
            tp(&b,
               "  c = %s[300,1] slice(a), slice={[0:300], [1:2]}\n"
               "  cr = %s[1,300,1] reshape(c)\n  cb = %s[1,300,1] negate(cr)\n"
               "  h = %s[150,%d] slice(a), slice={[0:300:2], [0:%d]}\n"
               "  hr = %s[150,1,%d] reshape(h)\n  ha = %s[150,1,%d] abs(hr)\n"
               "  ROOT t = (%s[4,33,4,%d], %s[4,33,4,%d], %s[4,33,4,%d], %s[1,300,1], "
               "%s[150,1,%d]) tuple(m0, m1, m2, cb, ha)\n}\n",
               T, T, T, T, D, D, T, D, T, D, T, D, T, D, T, D, T, T, D);
            g_keep_src = true;
            for (int t = 0; t < 4; t++) {
                g_run_pool = pools[t];
                check_module(text, 2300 + (uint64_t)(j * 3 + k), true);
            }
            g_keep_src = false;
            g_run_pool = NULL;
            EXPECT_TRUE(g_src != NULL);
            for (const char *q = g_src; q && (q = strstr(q, "const int64_t ix")) != NULL; q++) {
                const char *eol = strchr(q, '\n');
                bool divmod = false; /* of i (a digit of the column, col % 5, is fine) */
                for (const char *c = q; c < eol; c++) divmod |= *c == '%' || *c == '/';
                const char *fi = strstr(q, "(i)");
                divmod = divmod && fi && fi < eol;
                if (divmod) fprintf(stderr, "last dim %d: %.*s\n", D, (int)(eol - q), q);
                EXPECT_TRUE(!divmod);
            }
        }
    free(g_src);
    g_src = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

static void test_reduce_walk(void) {
    static const struct {
        const char *x, *dims, *out;
    } forms[] = {
        {"5,6,7,9", "{0,2}", "6,9"},
        {"4,12,9,40", "{0,2}", "12,40"},
        {"3,5,7", "{1}", "3,7"},
        {"2,3,4,5,6", "{1,3}", "2,4,6"},
        {"1,4,1,5,3,7,1", "{1,4}", "1,1,5,7,1"},
        {"6,100,3", "{1}", "6,3"},
        {"2,50,2,300", "{1}", "2,2,300"},
    };
    enum { NF = sizeof forms / sizeof forms[0] };
    static const struct {
        const char *dt, *red;
    } mods[] = {{"f32", "add"},      {"f32", "maximum"}, {"f32", "minimum"},
                {"f32", "multiply"}, {"f64", "add"},     {"f64", "maximum"},
                {"bf16", "add"},     {"s32", "add"},     {"s32", "maximum"}};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static char text[32768];
    tb b = {text, 0, sizeof text};
    for (int v = 0; v < (int)(sizeof mods / sizeof mods[0]); v++) {
        const char *dt = mods[v].dt;
        bool fl = dt[0] != 's';
        b.n = 0;
        tp(&b,
           "HloModule walk\nrd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
           "  ROOT c = %s[] %s(%s)\n}\n",
           dt, dt, dt, mods[v].red, v % 2 ? "b, a" : "a, b");
        tp(&b, "ENTRY main {\n  z = %s[] parameter(0)\n", dt);
        char outs[2048], types[2048];
        size_t on = 0, tn = 0;
        for (int f = 0; f < NF; f++) {
            tp(&b,
               "  x%d = %s[%s] parameter(%d)\n  w%d = %s[%s] %s(x%d, x%d)\n"
               "  s%d = %s[%s] reduce(w%d, z), dimensions=%s, to_apply=rd\n",
               f, dt, forms[f].x, f + 1, f, dt, forms[f].x, fl ? "multiply" : "add", f, f, f, dt,
               forms[f].out, f, forms[f].dims);
            on += (size_t)snprintf(outs + on, sizeof outs - on, "%ss%d", f ? ", " : "", f);
            tn += (size_t)snprintf(types + tn, sizeof types - tn, "%s%s[%s]", f ? ", " : "", dt,
                                   forms[f].out);
        }
        tp(&b, "  ROOT t = (%s) tuple(%s)\n}\n", types, outs);
        g_keep_src = true;
        for (int t = 0; t < 4; t++) {
            int before = g_stats.interp_kernels;
            g_run_pool = pools[t];
            check_module(text, 1700 + (uint64_t)v, true);
            EXPECT_INT_EQ(g_stats.interp_kernels, before);
            int nwalk = 0;
            for (const char *q = g_src; q && (q = strstr(q, "(reduce, walk) */")); q++) nwalk++;
            EXPECT_INT_EQ(nwalk, NF);
        }
        g_keep_src = false;
        g_run_pool = NULL;
    }
    free(g_src);
    g_src = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* The fusions holding a reduce in text's compiled entry. */
static int reduce_fusions(const char *text) {
    ot_module *m = parse(text);
    if (!m) return -1;
    ot_executable *e = NULL;
    int n = 0;
    if (ot_compile(m, NULL, &e) == OT_OK) {
        for (const ot_instr *i = ot_module_entry(ot_executable_module(e))->first; i; i = i->next) {
            if (i->opcode != OT_OP_FUSION) continue;
            bool red = false;
            for (const ot_instr *x = i->called[0]->first; x; x = x->next)
                red = red || x->opcode == OT_OP_REDUCE;
            n += red;
        }
    } else {
        n = -1;
    }
    ot_executable_free(e);
    ot_module_free(m);
    return n;
}

/* Sibling reduces (XLA's sibling multi-output fusion): two reduces of one operand shape over the
 * same dims that read a common input become one fusion that reads it once, where the generated
 * code runs several reduces in one pass: columns ([B, N] over B, N >= 1024, unit dims anywhere;
 * a layer norm's gamma and beta gradients), many short rows (sums in lanes, or maximum and
 * minimum). Not merged: few columns or a middle block ([A, R, N] over R: slower merged), sums over
 * all dims (one row: a row loop would run it on one thread), few rows, rows of a sum beside a
 * maximum, or a reduce reading the other's result (a cycle). Native, bit for bit the reference on
 * 1, 2, 3 and 8 threads, f32 and f64. */
static void test_sibling_reduces(void) {
    static const struct {
        const char *x, *dims, *out;
        int pair;   /* 0: sum x, sum x*y; 1: max x, min x; 2: sum x, max x; 3: sum x, sum of x
                       times the broadcast first sum (dependent) */
        int merged; /* fusions holding a reduce after compiling */
    } cs[] = {
        {"30,1100", "{0}", "1100", 0, 1},
        {"30,1100", "{0}", "1100", 1, 1},
        {"30,1100", "{0}", "1100", 2, 1},
        {"5,3,1030", "{0,1}", "1030", 0, 1},
        {"1,9,1,1030", "{1}", "1,1,1030", 1, 1},
        {"6,100,33", "{1}", "6,33", 0, 2},
        {"300,70", "{0}", "70", 0, 2},
        {"80,50", "{1}", "80", 0, 1},
        {"80,50", "{1}", "80", 1, 1},
        {"70,4,20", "{1,2}", "70", 0, 1},
        {"80,50", "{1}", "80", 2, 2},
        {"8,500", "{1}", "8", 0, 2},
        {"40,50", "{0,1}", "", 0, 2},
        {"30,1100", "{0}", "1100", 3, 2},
        {"4,30,20", "{0,2}", "30", 0, 2},
    };
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static char text[8192];
    for (int v = 0; v < 2; v++) {
        const char *dt = v ? "f64" : "f32";
        for (int c = 0; c < (int)(sizeof cs / sizeof cs[0]); c++) {
            tb b = {text, 0, sizeof text};
            const char *op1 = cs[c].pair == 1 ? "maximum" : "add";
            const char *op2 = cs[c].pair == 1 ? "minimum" : cs[c].pair == 2 ? "maximum" : "add";
            tp(&b,
               "HloModule sib\nr1 {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
               "  ROOT c = %s[] %s(a, b)\n}\nr2 {\n  a = %s[] parameter(0)\n"
               "  b = %s[] parameter(1)\n  ROOT c = %s[] %s(a, b)\n}\n",
               dt, dt, dt, op1, dt, dt, dt, op2);
            tp(&b,
               "ENTRY main {\n  x = %s[%s] parameter(0)\n  y = %s[%s] parameter(1)\n"
               "  z = %s[] constant(%s)\n  s1 = %s[%s] reduce(x, z), dimensions=%s, to_apply=r1\n",
               dt, cs[c].x, dt, cs[c].x, dt, cs[c].pair == 1 ? "-inf" : "0", dt, cs[c].out,
               cs[c].dims);
            if (cs[c].pair == 0)
                tp(&b, "  w = %s[%s] multiply(x, y)\n", dt, cs[c].x);
            else if (cs[c].pair == 3)
                tp(&b,
                   "  bs = %s[%s] broadcast(s1), dimensions={1}\n  w = %s[%s] multiply(x, bs)\n",
                   dt, cs[c].x, dt, cs[c].x);
            else
                tp(&b, "  w = %s[%s] add(x, y)\n", dt, cs[c].x);
            tp(&b,
               "  z2 = %s[] constant(%s)\n  s2 = %s[%s] reduce(w, z2), dimensions=%s, "
               "to_apply=r2\n  ROOT t = (%s[%s], %s[%s]) tuple(s1, s2)\n}\n",
               dt,
               cs[c].pair == 1   ? "inf"
               : cs[c].pair == 2 ? "-inf"
                                 : "0",
               dt, cs[c].out, cs[c].dims, dt, cs[c].out, dt, cs[c].out);
            int got = reduce_fusions(text);
            if (got != cs[c].merged) fprintf(stderr, "case %d %s:\n%s\n", c, dt, text);
            EXPECT_INT_EQ(got, cs[c].merged);
            for (int t = 0; t < 4; t++) { /* (unmerged: the lone reduce of x is the fast one) */
                int before = g_stats.interp_kernels;
                g_run_pool = pools[t];
                check_module(text, 2300 + (uint64_t)(c * 2 + v), cs[c].merged == 1);
                if (cs[c].merged == 1) EXPECT_INT_EQ(g_stats.interp_kernels, before);
            }
            g_run_pool = NULL;
        }
    }
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* A loss's scalar constant shared with its gradient (a value_and_grad: the sum of row sums of
 * exp(x) times 1e-3, and x scaled by the same constant, stored and summed per row): the
 * constant is copied into each fusion, so the two row sums (and the gradient beside them) run
 * as one row fusion and the loss as one scalar fusion (before, the constant was the loss fusion's
 * output, its cycle through the row sums split them into single kernels). Native, bit for bit the
 * reference on 1, 2, 3 and 8 threads, f32 and f64, rows from 1 to 1024 and row lengths 300 to 5001.
 */
static void test_loss_constant_shared(void) {
    static const struct {
        int64_t rows, cols;
    } cs[] = {{64, 300}, {1024, 5000}, {97, 5001}, {1, 4099}};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static char text[4096];
    for (int v = 0; v < 2; v++) {
        const char *dt = v ? "f64" : "f32";
        for (int c = 0; c < (int)(sizeof cs / sizeof cs[0]); c++) {
            tb b = {text, 0, sizeof text};
            char x[48], r[24];
            snprintf(x, sizeof x, "%s[%lld,%lld]", dt, (long long)cs[c].rows,
                     (long long)cs[c].cols);
            snprintf(r, sizeof r, "%s[%lld]", dt, (long long)cs[c].rows);
            tp(&b,
               "HloModule lossk\nadd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
               "  ROOT s = %s[] add(a, b)\n}\nENTRY main {\n  x = %s parameter(0)\n"
               "  k = %s[] constant(0.001)\n  z = %s[] constant(0)\n"
               "  e = %s exponential(x)\n  r1 = %s reduce(e, z), dimensions={1}, to_apply=add\n"
               "  s = %s[] reduce(r1, z), dimensions={0}, to_apply=add\n"
               "  loss = %s[] multiply(s, k)\n  kb = %s broadcast(k), dimensions={}\n"
               "  g = %s multiply(x, kb)\n  r2 = %s reduce(g, z), dimensions={1}, to_apply=add\n"
               "  ROOT t = (%s[], %s, %s) tuple(loss, g, r2)\n}\n",
               dt, dt, dt, x, dt, dt, x, r, dt, dt, x, x, r, dt, x, r);
            int got = reduce_fusions(text);
            if (got != 2) fprintf(stderr, "case %d %s:\n%s\n", c, dt, text);
            EXPECT_INT_EQ(got, 2);
            for (int t = 0; t < 4; t++) {
                int before = g_stats.interp_kernels;
                g_run_pool = pools[t];
                check_module(text, 2400 + (uint64_t)(c * 2 + v), true);
                EXPECT_INT_EQ(g_stats.interp_kernels, before);
            }
            g_run_pool = NULL;
        }
    }
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Sums over a middle axis of an expression that reads operands broadcast over it (softmax's
 * gradient over axis 1: x * u[a, n] - v[a, n] summed over r of [A, R, N], unit dims between):
 * the walk's index is row * N + col (row = a * R + r), so the broadcasts read the row's digits
 * once per row and the column, no division of i per element; f32 and f64, N from 1 to 50, bit
 * for bit the reference on 1, 2, 3 and 8 threads. */
static void test_walk_middle_broadcast(void) {
    static const struct {
        const char *x, *u, *bd, *out;
    } forms[] = {
        {"6,100,3", "6,3", "{0,2}", "6,3"},   {"4,1000,50", "4,50", "{0,2}", "4,50"},
        {"2,37,17", "2,17", "{0,2}", "2,17"}, {"3,5,1,7", "3,7", "{0,3}", "3,1,7"},
        {"5,9,2", "5,2", "{0,2}", "5,2"},
    };
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static char text[8192];
    tb b = {text, 0, sizeof text};
    for (int v = 0; v < 2; v++)
        for (int f = 0; f < (int)(sizeof forms / sizeof forms[0]); f++) {
            const char *dt = v ? "f64" : "f32";
            b.n = 0;
            tp(&b,
               "HloModule mid\nrd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
               "  ROOT c = %s[] add(a, b)\n}\nENTRY main {\n  x = %s[%s] parameter(0)\n"
               "  u = %s[%s] parameter(1)\n  w = %s[%s] parameter(2)\n  z = %s[] constant(0)\n"
               "  ub = %s[%s] broadcast(u), dimensions=%s\n"
               "  wb = %s[%s] broadcast(w), dimensions=%s\n"
               "  m = %s[%s] multiply(x, ub)\n  d = %s[%s] subtract(m, wb)\n"
               "  ROOT s = %s[%s] reduce(d, z), dimensions={1}, to_apply=rd\n}\n",
               dt, dt, dt, dt, forms[f].x, dt, forms[f].u, dt, forms[f].u, dt, dt, forms[f].x,
               forms[f].bd, dt, forms[f].x, forms[f].bd, dt, forms[f].x, dt, forms[f].x, dt,
               forms[f].out);
            g_keep_src = true;
            for (int t = 0; t < 4; t++) {
                g_run_pool = pools[t];
                check_module(text, 2400 + (uint64_t)(v * 8 + f), true);
            }
            g_keep_src = false;
            g_run_pool = NULL;
            const char *wk = g_src ? strstr(g_src, "(reduce, walk) */") : NULL;
            EXPECT_TRUE(wk != NULL);
            if (wk) {
                const char *end = strstr(wk, "\n}\n");
                const char *dv = strstr(wk, "(ot_u32)(i)");
                if (dv && (!end || dv < end)) fprintf(stderr, "form %s: i divided\n", forms[f].x);
                EXPECT_TRUE(!dv || (end && dv > end));
            }
        }
    free(g_src);
    g_src = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* ---- cache and fallbacks --------------------------------------------------------------------- */

static const char k_adam[] =
    "HloModule adam\nENTRY main {\n"
    "  p = f32[70000] parameter(0)\n  g = f32[70000] parameter(1)\n"
    "  m = f32[70000] parameter(2)\n  v = f32[70000] parameter(3)\n"
    "  b1 = f32[] constant(0.9)\n  b2 = f32[] constant(0.999)\n  lr = f32[] constant(0.001)\n"
    "  eps = f32[] constant(1e-8)\n  one = f32[] constant(1)\n"
    "  B1 = f32[70000] broadcast(b1), dimensions={}\n"
    "  B2 = f32[70000] broadcast(b2), dimensions={}\n"
    "  O = f32[70000] broadcast(one), dimensions={}\n"
    "  LR = f32[70000] broadcast(lr), dimensions={}\n"
    "  E = f32[70000] broadcast(eps), dimensions={}\n"
    "  c1 = f32[70000] subtract(O, B1)\n  c2 = f32[70000] subtract(O, B2)\n"
    "  m1 = f32[70000] multiply(B1, m)\n  m2 = f32[70000] multiply(c1, g)\n"
    "  mn = f32[70000] add(m1, m2)\n  gg = f32[70000] multiply(g, g)\n"
    "  v1 = f32[70000] multiply(B2, v)\n  v2 = f32[70000] multiply(c2, gg)\n"
    "  vn = f32[70000] add(v1, v2)\n  sq = f32[70000] sqrt(vn)\n"
    "  de = f32[70000] add(sq, E)\n  up = f32[70000] divide(mn, de)\n"
    "  st = f32[70000] multiply(LR, up)\n  pn = f32[70000] subtract(p, st)\n"
    "  ROOT t = (f32[70000], f32[70000], f32[70000]) tuple(pn, mn, vn)\n}\n";

static ot_executable *compile_adam(void) {
    ot_module *m = parse(k_adam);
    if (!m) return NULL;
    ot_executable *e = NULL;
    EXPECT_OK(ot_compile(m, NULL, &e));
    ot_module_free(m);
    return e;
}

static void so_path(const cg_program *p, char *out, size_t cap) {
    char h[65];
    for (int k = 0; k < 32; k++) sprintf(h + 2 * k, "%02x", p->key[k]);
    snprintf(out, cap, "%s/%s.so", g_cache, h);
}

/* The generated source of p (next to its object in the cache). */
static char *program_source(const cg_program *p) {
    char path[512];
    so_path(p, path, sizeof path);
    size_t l = strlen(path);
    if (l < 3) return NULL;
    strcpy(path + l - 3, ".c");
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 20);
    if (buf) fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    return buf;
}

/* f32 and bf16 tanh (ot_tanhf, src/exec/expf_poly.h) and logistic (1 / (1 + ot_expf(-x))) keep
 * a fusion of arithmetic under the hardware mode: on inputs around the smallest normal number
 * (products flushed or not, subnormal operands, tanh's x-itself range below 2^-12) and on
 * ordinary ones with NaN, inf and ±0 (tanh's polynomial, its 0.625 switch and saturation;
 * logistic of x·10, down to -100, where e^-x overflows and the quotient is subnormal), the
 * results equal the reference's bit for bit. */
static void test_hw_ftz_tanh_logistic(void) {
    static const char *const dts[] = {"f32", "bf16"};
    char text[4096];
    for (int j = 0; j < 2; j++) {
        const char *t = dts[j];
        snprintf(text, sizeof text,
                 "HloModule hw_tanh\nENTRY main {\n"
                 "  x = %s[3000] parameter(0)\n  y = %s[3000] parameter(1)\n"
                 "  m = %s[3000] multiply(x, y)\n  th = %s[3000] tanh(m)\n"
                 "  a = %s[3000] add(th, x)\n  tx = %s[3000] tanh(x)\n"
                 "  lm = %s[3000] logistic(m)\n  ten = %s[] constant(10)\n"
                 "  tb = %s[3000] broadcast(ten), dimensions={}\n  xt = %s[3000] multiply(x, tb)\n"
                 "  lx = %s[3000] logistic(xt)\n  sl = %s[3000] multiply(lx, x)\n"
                 "  ROOT t = (%s[3000], %s[3000], %s[3000], %s[3000], %s[3000]) "
                 "tuple(th, a, tx, lm, sl)\n}\n",
                 t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t);
        for (int tiny = 0; tiny < 2; tiny++) {
            g_tiny = tiny == 1;
            check_module(text, 950 + (uint64_t)(2 * j + tiny), true);
            g_tiny = false;
        }
        ot_module *m = parse(text);
        ASSERT_TRUE(m != NULL);
        ot_executable *e = NULL;
        EXPECT_OK(ot_compile(m, NULL, &e));
        ot_module_free(m);
        const cg_program *p = e ? cc_executable_native(e) : NULL;
        EXPECT_TRUE(p != NULL && p->nnative >= 1);
        char *src = p ? program_source(p) : NULL;
        EXPECT_TRUE(src != NULL && strstr(src, "ot_tanhf(") != NULL);
#if defined(__x86_64__)
        EXPECT_TRUE(src && strstr(src, "_mm_setcsr(ot_csr | 0x8040u)") != NULL);
#endif
        free(src);
        ot_executable_free(e);
    }
}

/* f32 and bf16 erf, log, log1p and expm1 (ot_erff, ot_logf, ot_log1pf, ot_expm1f,
 * src/exec/expf_poly.h) keep a fusion of arithmetic under the hardware mode too,
 * exact GELU's x·0.5·(1 + erf(x·(1/sqrt 2))) among it: on inputs around the smallest normal number
 * (erf's z = a² raised to 2^-60, the products flushed or not, log of subnormal operands) and on
 * ordinary ones with NaN, inf and ±0 (both polynomials, the switch at 1, the saturation from 4; log
 * and log1p of negative numbers, zeros and -1; expm1 of tiny, ordinary and huge products), the
 * results equal the reference's bit for bit, and the generated source calls all four. */
static void test_hw_ftz_erf(void) {
    static const char *const dts[] = {"f32", "bf16"};
    char text[8192];
    for (int j = 0; j < 2; j++) {
        const char *t = dts[j];
        snprintf(text, sizeof text,
                 "HloModule hw_erf\nENTRY main {\n"
                 "  x = %s[3000] parameter(0)\n  y = %s[3000] parameter(1)\n"
                 "  m = %s[3000] multiply(x, y)\n  em = %s[3000] erf(m)\n"
                 "  ex = %s[3000] erf(x)\n  r2 = %s[] constant(0.707106769)\n"
                 "  rb = %s[3000] broadcast(r2), dimensions={}\n  xs = %s[3000] multiply(x, rb)\n"
                 "  e = %s[3000] erf(xs)\n  one = %s[] constant(1)\n"
                 "  ob = %s[3000] broadcast(one), dimensions={}\n  s = %s[3000] add(e, ob)\n"
                 "  h = %s[] constant(0.5)\n  hb = %s[3000] broadcast(h), dimensions={}\n"
                 "  xh = %s[3000] multiply(x, hb)\n  g = %s[3000] multiply(xh, s)\n"
                 "  lm = %s[3000] log(m)\n  lx = %s[3000] log(x)\n  pm = %s[3000] log-plus-one(m)\n"
                 "  py = %s[3000] log-plus-one(y)\n  mo = %s[3000] subtract(x, ob)\n"
                 "  pmo = %s[3000] log-plus-one(mo)\n  xm = %s[3000] exponential-minus-one(m)\n"
                 "  xx = %s[3000] exponential-minus-one(xs)\n"
                 "  ROOT t = (%s[3000], %s[3000], %s[3000], %s[3000], %s[3000], %s[3000], "
                 "%s[3000], %s[3000], %s[3000], %s[3000]) "
                 "tuple(em, ex, g, lm, lx, pm, py, pmo, xm, xx)\n}\n",
                 t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t,
                 t, t, t, t, t, t);
        for (int tiny = 0; tiny < 2; tiny++) {
            g_tiny = tiny == 1;
            check_module(text, 960 + (uint64_t)(2 * j + tiny), true);
            g_tiny = false;
        }
        ot_module *m = parse(text);
        ASSERT_TRUE(m != NULL);
        ot_executable *e = NULL;
        EXPECT_OK(ot_compile(m, NULL, &e));
        ot_module_free(m);
        const cg_program *p = e ? cc_executable_native(e) : NULL;
        EXPECT_TRUE(p != NULL && p->nnative >= 1);
        char *src = p ? program_source(p) : NULL;
        /* called: named again after the preamble's definition */
        static const char *const fns[] = {"ot_erff(", "ot_logf(", "ot_log1pf(", "ot_expm1f("};
        for (int k = 0; k < 4; k++) {
            const char *d = src ? strstr(src, fns[k]) : NULL;
            EXPECT_TRUE(d != NULL && strstr(d + 1, fns[k]) != NULL);
        }
#if defined(__x86_64__)
        EXPECT_TRUE(src && strstr(src, "_mm_setcsr(ot_csr | 0x8040u)") != NULL);
#endif
        free(src);
        ot_executable_free(e);
    }
}

/* The SLEEF functions (src/exec/vmath.h): f32, bf16 and f64 sin, cos, tan, pow and atan2, f32 and
 * bf16 cbrt, with f64 exp, expm1, log, log1p, tanh, cbrt, erf and logistic (ot_expd, ot_expm1d,
 * ot_logd, ot_log1pd, ot_tanhd, ot_cbrtd and ot_erfd in src/exec/expf_poly.h), each of
 * parameters directly (and sin, cos and tan of products times 3e7 for f32/bf16, 1e15 for f64:
 * large arguments), on ordinary values with NaNs (quiet and signalling, both signs), ±inf, ±0 and
 * subnormals, and on values around the smallest normal number: every output equals the
 * reference's bit for bit at 1, 2, 3 and 8 threads, NaN payloads included (no two NaN operands
 * meet outside a SLEEF function, whose rules pick the first: nothing is left to the vectorizer's
 * operand order), and the generated source calls each function. */
static void test_vmath_sleef(void) {
    static const char *const dts[] = {"f32", "bf16", "f64"};
    static const char *const un[] = {
        "sine", "cosine",       "tan",  "cbrt", "exponential", "exponential-minus-one",
        "log",  "log-plus-one", "tanh", "erf",  "logistic"};
    char text[8192];
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    for (int j = 0; j < 3; j++) {
        const char *t = dts[j];
        int nun = j == 2 ? 11 : 4; /* f32/bf16 exp ... logistic are expf_poly.h's */
        int n = snprintf(text, sizeof text,
                         "HloModule vm\nENTRY main {\n  x = %s[4099] parameter(0)\n"
                         "  y = %s[4099] parameter(1)\n  big = %s[] constant(%s)\n"
                         "  bb = %s[4099] broadcast(big), dimensions={}\n"
                         "  xb = %s[4099] multiply(x, bb)\n  sb = %s[4099] sine(xb)\n"
                         "  cb = %s[4099] cosine(xb)\n  tb = %s[4099] tan(xb)\n"
                         "  p = %s[4099] power(x, y)\n  a = %s[4099] atan2(x, y)\n",
                         t, t, t, j == 2 ? "1e15" : "3e7", t, t, t, t, t, t, t);
        for (int k = 0; k < nun; k++)
            n += snprintf(text + n, sizeof text - (size_t)n, "  u%d = %s[4099] %s(x)\n", k, t,
                          un[k]);
        n += snprintf(text + n, sizeof text - (size_t)n, "  ROOT t = (");
        for (int k = 0; k < nun + 5; k++)
            n += snprintf(text + n, sizeof text - (size_t)n, "%s%s[4099]", k ? ", " : "", t);
        n += snprintf(text + n, sizeof text - (size_t)n, ") tuple(sb, cb, tb, p, a");
        for (int k = 0; k < nun; k++) n += snprintf(text + n, sizeof text - (size_t)n, ", u%d", k);
        snprintf(text + n, sizeof text - (size_t)n, ")\n}\n");
        for (int tiny = 0; tiny < 2; tiny++) {
            for (int seed = 0; seed < 3; seed++) {
                for (int th = 0; th < 4; th++) {
                    int64_t nan_before = g_nan_bits_differ;
                    g_tiny = tiny == 1;
                    g_run_pool = pools[th];
                    check_module(text, 1200 + (uint64_t)(6 * j + 3 * tiny + seed), true);
                    g_tiny = false;
                    EXPECT_INT_EQ(g_nan_bits_differ, nan_before);
                }
            }
        }
        ot_module *m = parse(text);
        ASSERT_TRUE(m != NULL);
        ot_executable *e = NULL;
        EXPECT_OK(ot_compile(m, NULL, &e));
        ot_module_free(m);
        const cg_program *p = e ? cc_executable_native(e) : NULL;
        char *src = p ? program_source(p) : NULL;
        static const char *const f32s[] = {"ot_vm_sinf(",  "ot_vm_cosf(",  "ot_vm_tanf(",
                                           "ot_vm_cbrtf(", "ot_vm_powf1(", "ot_vm_atan2f("};
        static const char *const f64s[] = {"ot_vm_sin(",
                                           "ot_vm_cos(",
                                           "ot_vm_tan(",
                                           "ot_cbrtd(",
                                           "ot_vm_pow1(",
                                           "ot_vm_atan2(",
                                           "ot_expd(",
                                           "ot_expm1d(",
                                           "ot_logd(",
                                           "ot_log1pd(",
                                           "ot_tanhd(",
                                           "ot_erfd(",
                                           "(1.0 / (1.0 + ot_expd(-"};
        const char *const *names = j == 2 ? f64s : f32s;
        for (int k = 0; k < (j == 2 ? 13 : 6); k++) {
            /* named after the preamble: called by a kernel */
            const char *pre = src ? strstr(src, "/* fusion") : NULL;
            if (!(pre != NULL && strstr(pre, names[k]) != NULL))
                OT_T_FAIL_("%s: %s not called", t, names[k]);
        }
        free(src);
        ot_executable_free(e);
    }
    g_run_pool = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* f64 pow in generated code (on AVX-512: ot_powd's 8-lane clone, OT_POWD_V8_DEF in
 * src/exec/expf_poly.h; its 4- and 2-lane clones in the loop's remainder, 4099 = 512·8 + 3) equals
 * the reference's ot_powd bit for bit at 1, 2, 3 and 8 threads, on vectors that take the clone's
 * short path, its clamped one (|y·ln x| near 700 and beyond) and the full one (a special lane,
 * negative x, subnormals, any bits). Fails with one coefficient of the clone changed by an ulp. */
static void test_powd_native(void) {
    static const char text[] = "HloModule powd\nENTRY main {\n  x = f64[4099] parameter(0)\n"
                               "  y = f64[4099] parameter(1)\n"
                               "  ROOT p = f64[4099] power(x, y)\n}\n";
    static const int threads[] = {1, 2, 3, 8};
    for (int t = 0; t < 4; t++) {
        ot_threadpool *pool = NULL;
        ASSERT_OK(ot_threadpool_create(threads[t], &pool));
        g_run_pool = pool;
        for (int seed = 0; seed < 4; seed++) {
            g_powd = true;
            g_powd_param = 0;
            check_module(text, 2400 + (uint64_t)(4 * t + seed), true);
            g_powd = false;
        }
        g_run_pool = NULL;
        ot_threadpool_free(pool);
    }
}

/* Loop fusions of basic arithmetic run under the CPU's FTZ/DAZ mode instead of flushing in
 * software; on inputs around the smallest normal number, whose sums, products, quotients and
 * roots fall on both sides of it, every result must still equal the reference evaluator's bit for
 * bit. A fusion that calls the C library keeps software flushing. */
/* f16 <-> f32 converts and f16 arithmetic in native loops (ot_h2f, ot_f2h: branch-free, so the
 * loops vectorize; the converts run under the hardware FTZ/DAZ mode): every f16 bit pattern
 * widened, and 2^17 f32 values at the f16 rounding boundaries narrowed, each bit for bit the
 * reference's (NaN payloads included; no operand pair of two NaNs here); then an f16 layer norm
 * whose statistics are f32 sums of the widened rows (a row fusion) and an f16 GELU, at 1, 2, 3
 * and 8 threads. Both modules' loops run under the mode. */
static void test_f16_converts(void) {
    static const char conv[] =
        "HloModule f16conv\nENTRY main {\n"
        "  h = f16[131072] parameter(0)\n  f = f32[131072] parameter(1)\n"
        "  w = f32[131072] convert(h)\n  n = f16[131072] convert(f)\n"
        "  c = f16[] constant(1.5)\n  cb = f16[131072] broadcast(c), dimensions={}\n"
        "  m = f16[131072] multiply(h, cb)\n  a = f16[131072] add(n, cb)\n"
        "  q = f32[131072] convert(m)\n  d = f16[131072] divide(cb, h)\n"
        "  ROOT t = (f32[131072], f16[131072], f16[131072], f16[131072], f32[131072], "
        "f16[131072]) tuple(w, n, m, a, q, d)\n}\n";
    int64_t nan_before = g_nan_bits_differ;
    g_f16_all = true;
    g_keep_src = true;
    check_module(conv, 4100, true);
    g_f16_all = false;
    g_keep_src = false;
    EXPECT_INT_EQ(g_nan_bits_differ, nan_before);
#if defined(__x86_64__)
    EXPECT_TRUE(g_src && strstr(g_src, "_mm_setcsr(ot_csr | 0x8040u)") != NULL);
#endif
    free(g_src);
    g_src = NULL;

    static const char ln[] =
        "HloModule f16ln\n"
        "add { a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(a, b)\n}\n"
        "ENTRY main {\n"
        "  x = f16[67,200] parameter(0)\n  g = f16[200] parameter(1)\n"
        "  x32 = f32[67,200] convert(x)\n  z = f32[] constant(0)\n"
        "  s = f32[67] reduce(x32, z), dimensions={1}, to_apply=add\n"
        "  nn = f32[] constant(200)\n  nb = f32[67] broadcast(nn), dimensions={}\n"
        "  mu = f32[67] divide(s, nb)\n  mub = f32[67,200] broadcast(mu), dimensions={0}\n"
        "  c = f32[67,200] subtract(x32, mub)\n  c2 = f32[67,200] multiply(c, c)\n"
        "  v = f32[67] reduce(c2, z), dimensions={1}, to_apply=add\n"
        "  vm = f32[67] divide(v, nb)\n  ep = f32[] constant(1e-05)\n"
        "  eb = f32[67] broadcast(ep), dimensions={}\n  ve = f32[67] add(vm, eb)\n"
        "  r = f32[67] rsqrt(ve)\n  rb = f32[67,200] broadcast(r), dimensions={0}\n"
        "  y = f32[67,200] multiply(c, rb)\n  yh = f16[67,200] convert(y)\n"
        "  gb = f16[67,200] broadcast(g), dimensions={1}\n"
        "  h = f16[67,200] multiply(yh, gb)\n  h2 = f16[67,200] multiply(h, h)\n"
        "  h3 = f16[67,200] multiply(h2, h)\n  k = f16[] constant(0.044708)\n"
        "  kb = f16[67,200] broadcast(k), dimensions={}\n"
        "  h4 = f16[67,200] multiply(h3, kb)\n  h5 = f16[67,200] add(h, h4)\n"
        "  th = f16[67,200] tanh(h5)\n  one = f16[] constant(1)\n"
        "  ob = f16[67,200] broadcast(one), dimensions={}\n  t1 = f16[67,200] add(th, ob)\n"
        "  ROOT o = f16[67,200] multiply(h, t1)\n}\n";
    static const int threads[] = {1, 2, 3, 8};
    for (int t = 0; t < 4; t++) {
        ot_threadpool *pool = NULL;
        ASSERT_OK(ot_threadpool_create(threads[t], &pool));
        g_run_pool = pool;
        g_keep_src = true;
        check_module(ln, 4200, true);
        g_keep_src = false;
        g_run_pool = NULL;
        ot_threadpool_free(pool);
#if defined(__x86_64__)
        EXPECT_TRUE(g_src && strstr(g_src, "_mm_setcsr(ot_csr | 0x8040u)") != NULL);
#endif
        free(g_src);
        g_src = NULL;
    }
}

/* f16 row maximum and minimum by integer keys (emit_keyed_minmax): softmax in half precision
 * (the row max, then exp of the differences) and a row minimum, rows with and without NaNs
 * (the rows with one take the serial chain), subnormals, infinities and both zeros; bit for bit
 * the reference's at 1, 2, 3 and 8 threads, and the keyed loops in the generated source. */
static void test_f16_keyed_minmax(void) {
    static const char sm[] =
        "HloModule f16max\n"
        "mx { a = f16[] parameter(0)\n  b = f16[] parameter(1)\n"
        "  ROOT m = f16[] maximum(a, b)\n}\n"
        "mn { a = f16[] parameter(0)\n  b = f16[] parameter(1)\n"
        "  ROOT m = f16[] minimum(a, b)\n}\n"
        "ENTRY main {\n"
        "  x = f16[300,40] parameter(0)\n"
        "  ni = f16[] constant(-inf)\n  pi = f16[] constant(inf)\n"
        "  m = f16[300] reduce(x, ni), dimensions={1}, to_apply=mx\n"
        "  mb = f16[300,40] broadcast(m), dimensions={0}\n"
        "  d = f16[300,40] subtract(x, mb)\n  ex = f16[300,40] exponential(d)\n"
        "  n = f16[300] reduce(x, pi), dimensions={1}, to_apply=mn\n"
        "  ROOT t = (f16[300,40], f16[300], f16[300]) tuple(ex, m, n)\n}\n";
    static const int threads[] = {1, 2, 3, 8};
    for (int t = 0; t < 4; t++) {
        ot_threadpool *pool = NULL;
        ASSERT_OK(ot_threadpool_create(threads[t], &pool));
        g_run_pool = pool;
        g_keep_src = true;
        check_module(sm, 4300, true);
        g_keep_src = false;
        g_run_pool = NULL;
        ot_threadpool_free(pool);
        EXPECT_TRUE(g_src && strstr(g_src, "(maximum, keys)") != NULL);
        EXPECT_TRUE(g_src && strstr(g_src, "(minimum, keys)") != NULL);
        free(g_src);
        g_src = NULL;
    }
}

static void test_hw_ftz(void) {
    static const char *const dts[] = {"f32", "f64", "bf16"};
    char text[8192];
    for (int j = 0; j < 3; j++) {
        const char *t = dts[j];
        /* '$' stands for the element type */
        static const char tmpl[] =
            "HloModule hw\nENTRY main {\n"
            "  x = $[3000] parameter(0)\n  y = $[3000] parameter(1)\n"
            "  a = $[3000] add(x, y)\n  s = $[3000] subtract(x, y)\n"
            "  m = $[3000] multiply(x, y)\n  d = $[3000] divide(x, y)\n"
            "  q = $[3000] sqrt(x)\n  r = $[3000] rsqrt(y)\n"
            "  h = $[] constant(0.5)\n  hb = $[3000] broadcast(h), dimensions={}\n"
            "  mh = $[3000] multiply(x, hb)\n  ms = $[3000] multiply(mh, mh)\n"
            "  mx = $[3000] maximum(x, m)\n  mn = $[3000] minimum(s, y)\n"
            "  c = pred[3000] compare(x, m), direction=LT\n"
            "  sel = $[3000] select(c, m, x)\n  ng = $[3000] negate(x)\n"
            "  ab = $[3000] abs(y)\n  sg = $[3000] sign(x)\n"
            "  ROOT t = ($[3000], $[3000], $[3000], $[3000], $[3000], $[3000], $[3000], "
            "$[3000], $[3000], $[3000], pred[3000], $[3000], $[3000], $[3000]) "
            "tuple(a, s, m, d, q, r, ms, mx, mn, sel, c, ng, ab, sg)\n}\n";
        size_t n = 0;
        for (const char *q = tmpl; *q && n + 8 < sizeof text; q++) {
            if (*q == '$') {
                n += (size_t)snprintf(text + n, sizeof text - n, "%s", t);
            } else {
                text[n++] = *q;
            }
        }
        text[n] = '\0';
        g_tiny = true;
        check_module(text, 900 + (uint64_t)j, true);
        g_tiny = false;
        /* the kernel did run under the hardware mode */
        ot_module *m = parse(text);
        ASSERT_TRUE(m != NULL);
        ot_executable *e = NULL;
        EXPECT_OK(ot_compile(m, NULL, &e));
        ot_module_free(m);
        const cg_program *p = e ? cc_executable_native(e) : NULL;
        EXPECT_TRUE(p != NULL && p->nnative >= 1);
        char *src = p ? program_source(p) : NULL;
        EXPECT_TRUE(src != NULL);
#if defined(__x86_64__)
        EXPECT_TRUE(src && strstr(src, "_mm_setcsr(ot_csr | 0x8040u)") != NULL);
#endif
        free(src);
        ot_executable_free(e);
    }
    /* products and quotients exactly in the band below FLT_MIN where x86's tininess rule and
     * rounding-then-flushing differ: the reference, the hardware mode and the software mode (a
     * fusion with log) all flush them */
    static const char *const band[] = {
        "HloModule band_hw\nENTRY main {\n  x = f32[4096] parameter(0)\n"
        "  y = f32[4096] parameter(1)\n  m = f32[4096] multiply(x, y)\n"
        "  d = f32[4096] divide(x, y)\n  ROOT t = (f32[4096], f32[4096]) tuple(m, d)\n}\n",
        "HloModule band_sw\nENTRY main {\n  x = f32[4096] parameter(0)\n"
        "  y = f32[4096] parameter(1)\n  m = f32[4096] multiply(x, y)\n"
        "  d = f32[4096] divide(x, y)\n  e = f32[4096] log(y)\n"
        "  ROOT t = (f32[4096], f32[4096], f32[4096]) tuple(m, d, e)\n}\n"};
    for (int j = 0; j < 2; j++) {
        g_band = true;
        g_band_param = 0;
        check_module(band[j], 960 + (uint64_t)j, true);
        g_band = false;
    }
    {
        float x = ldexpf(16777215.0f, -50), y = ldexpf(1.0f, -100), z = ldexpf(1.0f, 100), r[2];
        ot_value out;
        /* the reference on one element: 2^-126 - 2^-150 flushes to +0 */
        char one[512];
        snprintf(one, sizeof one,
                 "HloModule band1\nENTRY main {\n  x = f32[] parameter(0)\n"
                 "  y = f32[] parameter(1)\n  z = f32[] parameter(2)\n"
                 "  m = f32[] multiply(x, y)\n  d = f32[] divide(x, z)\n"
                 "  ROOT t = (f32[], f32[]) tuple(m, d)\n}\n");
        ot_module *m = parse(one);
        ASSERT_TRUE(m != NULL);
        ot_value a3[3];
        ot_shape s0 = {OT_F32, 0, {0}};
        float v3[3] = {x, y, z};
        for (int k = 0; k < 3; k++) {
            ASSERT_OK(ot_value_alloc_array(&a3[k], &s0));
            memcpy(a3[k].array.data, &v3[k], 4);
        }
        ASSERT_OK(ot_evaluate(m, a3, 3, NULL, &out));
        for (int k = 0; k < 2; k++) memcpy(&r[k], ot_value_leaf(&out, k)->array.data, 4);
        EXPECT_TRUE(r[0] == 0.0f && !signbit(r[0]));
        EXPECT_TRUE(r[1] == 0.0f && !signbit(r[1]));
        ot_value_release(&out);
        for (int k = 0; k < 3; k++) ot_value_release(&a3[k]);
        ot_module_free(m);
    }
    /* tan in the fusion (a libm call): software flushing; exp (the library's own ot_expf, which
     * never produces or reads a subnormal) and an exp-sum in the lane order (softmax's): the
     * hardware mode; the same results as the reference either way */
    static const char *const modes[] = {
        "HloModule sw_tan\nENTRY main {\n  x = f32[3000] parameter(0)\n"
        "  y = f32[3000] parameter(1)\n  m = f32[3000] multiply(x, y)\n"
        "  ex = f32[3000] tan(m)\n  ROOT a = f32[3000] add(ex, m)\n}\n",
        "HloModule hw_exp\nENTRY main {\n  x = f32[3000] parameter(0)\n"
        "  y = f32[3000] parameter(1)\n  m = f32[3000] multiply(x, y)\n"
        "  ex = f32[3000] exponential(m)\n  ROOT a = f32[3000] add(ex, m)\n}\n",
        "HloModule hw_exp_range\nENTRY main {\n  x = f32[3000] parameter(0)\n"
        "  c = f32[] constant(10)\n  cb = f32[3000] broadcast(c), dimensions={}\n"
        "  m = f32[3000] multiply(x, cb)\n  ROOT ex = f32[3000] exponential(m)\n}\n",
        "HloModule hw_expsum\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(a, b)\n}\nENTRY main {\n  x = f32[40,300] parameter(0)\n"
        "  y = f32[40] parameter(1)\n  yb = f32[40,300] broadcast(y), dimensions={0}\n"
        "  d = f32[40,300] subtract(x, yb)\n  c = f32[] constant(10)\n"
        "  cb = f32[40,300] broadcast(c), dimensions={}\n  dc = f32[40,300] multiply(d, cb)\n"
        "  ex = f32[40,300] exponential(dc)\n"
        "  z = f32[] constant(0)\n"
        "  ROOT r = f32[40] reduce(ex, z), dimensions={1}, to_apply=add\n}\n",
        "HloModule hw_var\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(a, b)\n}\nENTRY main {\n  x = f32[40,300] parameter(0)\n"
        "  y = f32[40] parameter(1)\n  yb = f32[40,300] broadcast(y), dimensions={0}\n"
        "  d = f32[40,300] subtract(x, yb)\n  q = f32[40,300] multiply(d, d)\n"
        "  z = f32[] constant(0)\n"
        "  ROOT r = f32[40] reduce(q, z), dimensions={1}, to_apply=add\n}\n"};
    for (int j = 0; j < 5; j++) {
        /* tiny inputs (subnormals, products in the band below FLT_MIN), and for exp over x * 10
         * ordinary ones: results from overflow through subnormal to zero */
        g_tiny = j != 2 && j != 3;
        check_module(modes[j], 950 + (uint64_t)j, true);
        g_tiny = false;
        ot_module *m = parse(modes[j]);
        ASSERT_TRUE(m != NULL);
        ot_executable *e = NULL;
        EXPECT_OK(ot_compile(m, NULL, &e));
        ot_module_free(m);
        const cg_program *p = e ? cc_executable_native(e) : NULL;
        EXPECT_TRUE(p != NULL && p->nnative == 1);
        char *src = p ? program_source(p) : NULL;
        bool hw = src != NULL && strstr(src, "_mm_setcsr(ot_csr | 0x8040u)") != NULL;
#if defined(__x86_64__)
        EXPECT_TRUE(src != NULL && hw == (j > 0));
#endif
        (void)hw;
        if (j == 0) EXPECT_TRUE(src != NULL && strstr(src, "ot_ftzf(") != NULL);
        free(src);
        ot_executable_free(e);
    }
}

/* The modules of test_image_pipeline: '@' stands for the pixel type. */
static const char *const g_image_modules[] = {
    /* NHWC: a center crop whose rows keep their last two dims (read at row + col), a flip of
     * the width over the 3 channels (read through ot_stg), a per-image select, to f32,
     * normalized per channel, and a requantization (round, clip, convert back) */
    "HloModule img_nhwc\nENTRY main {\n"
    "  img = @[2,40,44,3] parameter(0)\n  flip = pred[2] parameter(1)\n"
    "  mean = f32[3] parameter(2)\n  std = f32[3] parameter(3)\n"
    "  s = @[2,36,36,3] slice(img), slice={[0:2], [2:38], [4:40], [0:3]}\n"
    "  r = @[2,36,36,3] reverse(s), dimensions={2}\n"
    "  fb = pred[2,36,36,3] broadcast(flip), dimensions={0}\n"
    "  x = @[2,36,36,3] select(fb, r, s)\n  xf = f32[2,36,36,3] convert(x)\n"
    "  c = f32[] constant(255)\n  cb = f32[2,36,36,3] broadcast(c), dimensions={}\n"
    "  d = f32[2,36,36,3] divide(xf, cb)\n"
    "  mb = f32[2,36,36,3] broadcast(mean), dimensions={3}\n"
    "  sb = f32[2,36,36,3] broadcast(std), dimensions={3}\n"
    "  n = f32[2,36,36,3] subtract(d, mb)\n  y = f32[2,36,36,3] divide(n, sb)\n"
    "  k = f32[] constant(1.25)\n  kb = f32[2,36,36,3] broadcast(k), dimensions={}\n"
    "  m = f32[2,36,36,3] multiply(xf, kb)\n  t = f32[] constant(20)\n"
    "  tb = f32[2,36,36,3] broadcast(t), dimensions={}\n  u = f32[2,36,36,3] subtract(m, tb)\n"
    "  rr = f32[2,36,36,3] round-nearest-even(u)\n  lo = f32[] constant(0)\n"
    "  lb = f32[2,36,36,3] broadcast(lo), dimensions={}\n"
    "  hb = f32[2,36,36,3] broadcast(c), dimensions={}\n"
    "  cl = f32[2,36,36,3] clamp(lb, rr, hb)\n  q = @[2,36,36,3] convert(cl)\n"
    "  ROOT o = (f32[2,36,36,3], @[2,36,36,3]) tuple(y, q)\n}\n",
    /* the same on a short image: the column loop spans the crop's three dims, the crop's rows
     * are no multiple of col either, and both reads go through ot_stg */
    "HloModule img_short\nENTRY main {\n"
    "  img = @[4,20,24,3] parameter(0)\n  flip = pred[4] parameter(1)\n"
    "  s = @[4,16,16,3] slice(img), slice={[0:4], [2:18], [4:20], [0:3]}\n"
    "  r = @[4,16,16,3] reverse(s), dimensions={2}\n"
    "  fb = pred[4,16,16,3] broadcast(flip), dimensions={0}\n"
    "  x = @[4,16,16,3] select(fb, r, s)\n  xf = f32[4,16,16,3] convert(x)\n"
    "  c = f32[] constant(0.0039215689)\n  cb = f32[4,16,16,3] broadcast(c), dimensions={}\n"
    "  ROOT y = f32[4,16,16,3] multiply(xf, cb)\n}\n",
    /* NCHW: a crop, a vertical and a horizontal flip (the last dim reversed: col * -1), to f32
     * scaled, and a channel flip of a short row (reverse of an outer column dim) to s32 */
    "HloModule img_nchw\nENTRY main {\n"
    "  img = @[2,3,40,44] parameter(0)\n  sc = f32[3] parameter(1)\n"
    "  s = @[2,3,36,36] slice(img), slice={[0:2], [0:3], [2:38], [4:40]}\n"
    "  r = @[2,3,36,36] reverse(s), dimensions={2,3}\n  xf = f32[2,3,36,36] convert(r)\n"
    "  sb = f32[2,3,36,36] broadcast(sc), dimensions={1}\n"
    "  y = f32[2,3,36,36] multiply(xf, sb)\n"
    "  z = @[6,10,4] parameter(2)\n  zr = @[6,10,4] reverse(z), dimensions={1}\n"
    "  zi = s32[6,10,4] convert(zr)\n  io = s32[6,10,4] iota(), iota_dimension=1\n"
    "  za = s32[6,10,4] add(zi, io)\n"
    "  ROOT o = (f32[2,3,36,36], s32[6,10,4]) tuple(y, za)\n}\n"};

/* Image input pipelines on 8- and 16-bit pixels (u8, s8, u16, and pred masks): crops, flips,
 * converts, normalization and requantization, NHWC and NCHW. A flip of a row's outer dim over
 * a short last dim is read through a row buffer (ot_stg, stage_param: gcc gathers no 8- or
 * 16-bit elements), a crop that keeps a row's trailing dims is read at row + col, and the
 * converts and roundings keep the loops under the hardware mode. Native code for every fusion,
 * the reference's bits at 1, 2, 3 and 8 threads. */
static void test_image_pipeline(void) {
    static const char *const pix[] = {"u8", "s8", "u16", "pred"};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    char text[4096];
    for (int j = 0; j < 3; j++) {
        for (int k = 0; k < 4; k++) {
            if (k == 3 && j != 1) continue; /* pred: no arithmetic to requantize */
            size_t n = 0;
            for (const char *q = g_image_modules[j]; *q && n + 8 < sizeof text; q++) {
                if (*q == '@')
                    n += (size_t)snprintf(text + n, sizeof text - n, "%s", pix[k]);
                else
                    text[n++] = *q;
            }
            text[n] = '\0';
            for (int t = 0; t < 4; t++) {
                g_run_pool = pools[t];
                g_keep_src = true;
                check_module(text, 3300 + (uint64_t)(10 * j + k), true);
                g_keep_src = false;
                const char *src = g_src;
                EXPECT_TRUE(src != NULL && strstr(src, "ot_stg0[col]") != NULL);
                if (j == 0) { /* the crop's rows: contiguous, at row + col */
                    EXPECT_TRUE(src != NULL && strstr(src, "ot_stg1[") == NULL);
                    EXPECT_TRUE(src != NULL && strstr(src, " + col);") != NULL);
                }
                if (j == 1) EXPECT_TRUE(src != NULL && strstr(src, "ot_stg1[col]") != NULL);
#if defined(__x86_64__)
                if (j == 0)
                    EXPECT_TRUE(src != NULL && strstr(src, "_mm_setcsr(ot_csr | 0x8040u)") != NULL);
#endif
            }
        }
    }
    g_run_pool = NULL;
    free(g_src);
    g_src = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Converts between integers and f32/f64 and roundings to integral values (floor, ceil, both
 * round-nearest) keep a fusion of arithmetic under the hardware mode: on inputs around the
 * smallest normal number (products of converted integers and subnormals, quotients by them in
 * the band below FLT_MIN, subnormal operands converted to integers and pred) and on ordinary
 * ones, the reference's bits. */
static void test_hw_convert_round(void) {
    static const char *const dts[] = {"f32", "f64"};
    char text[4096];
    for (int j = 0; j < 2; j++) {
        const char *t = dts[j];
        snprintf(text, sizeof text,
                 "HloModule hw_cvt\nENTRY main {\n"
                 "  x = %s[3000] parameter(0)\n  y = %s[3000] parameter(1)\n"
                 "  k = s32[3000] parameter(2)\n  b = u8[3000] parameter(3)\n"
                 "  kf = %s[3000] convert(k)\n  m = %s[3000] multiply(kf, x)\n"
                 "  bf = %s[3000] convert(b)\n  d = %s[3000] divide(y, bf)\n"
                 "  p = %s[3000] multiply(x, y)\n  rn = %s[3000] round-nearest-even(p)\n"
                 "  fl = %s[3000] floor(x)\n  ce = %s[3000] ceil(p)\n"
                 "  ra = %s[3000] round-nearest-afz(m)\n  xs = s32[3000] convert(p)\n"
                 "  xu = u8[3000] convert(x)\n  xp = pred[3000] convert(p)\n"
                 "  s = %s[3000] add(rn, d)\n"
                 "  ROOT o = (%s[3000], %s[3000], %s[3000], %s[3000], %s[3000], %s[3000], "
                 "s32[3000], u8[3000], pred[3000]) tuple(m, d, s, fl, ce, ra, xs, xu, xp)\n}\n",
                 t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t);
        for (int tiny = 0; tiny < 2; tiny++) {
            g_tiny = tiny == 1;
            g_keep_src = true;
            check_module(text, 3400 + (uint64_t)(2 * j + tiny), true);
            g_keep_src = false;
            g_tiny = false;
#if defined(__x86_64__)
            EXPECT_TRUE(g_src != NULL && strstr(g_src, "_mm_setcsr(ot_csr | 0x8040u)") != NULL);
#endif
        }
    }
    free(g_src);
    g_src = NULL;
}

/* Chains of maximum, minimum, clamp, compare, select, abs, negate and sign (a where/clip chain)
 * under the hardware mode, where maximum/minimum/clamp flush and quiet an operand computed in the
 * loop by multiplying it by an opaque 1 and compare without a software flush, and where values
 * known flushed and quiet (arithmetic, select of such values, maximum/minimum results) skip both:
 * f32, f64, f16 and bf16, rows of 1, 7, 19 and 1001 elements, ordinary inputs with NaNs (quiet
 * and signalling), infinities and subnormals, and tiny ones; equal operands of both signs of zero
 * (x against -x and x * 0, and against the constants +0 and -0: a ReLU, a clip to [-0, +0]);
 * bit for bit, NaN payloads included. */
static void test_hw_minmax(void) {
    static const char *const dts[] = {"f32", "f64", "f16", "bf16"};
    static const char *const dims[] = {"[3,1]", "[5,7]", "[37,19]", "[9,1001]"};
    char text[8192];
    for (int j = 0; j < 4; j++)
        for (int d = 0; d < 4; d++)
            for (int tiny = 0; tiny < (j < 2 ? 2 : 1); tiny++) { /* tiny inputs: f32/f64 */
                const char *t = dts[j], *D = dims[d];
                /* '$' stands for the element type, '@' for the dims */
                static const char tmpl[] =
                    "HloModule hw_minmax\nENTRY main {\n"
                    "  x = $@ parameter(0)\n  y = $@ parameter(1)\n"
                    "  lo = $[] constant(-1.5)\n  hi = $[] constant(2.5)\n"
                    "  lob = $@ broadcast(lo), dimensions={}\n"
                    "  hib = $@ broadcast(hi), dimensions={}\n"
                    "  z = $[] constant(0)\n  zb = $@ broadcast(z), dimensions={}\n"
                    "  cl = $@ clamp(lo, x, hi)\n  a = $@ maximum(x, lob)\n"
                    "  a2 = $@ minimum(a, hib)\n  ng = $@ negate(x)\n"
                    "  mz = $@ maximum(x, ng)\n  nz = $@ minimum(ng, x)\n"
                    "  x0 = $@ multiply(x, zb)\n  n0 = $@ negate(x0)\n"
                    "  m0 = $@ maximum(n0, x0)\n  i0 = $@ minimum(x0, n0)\n"
                    "  gt = pred@ compare(x, y), direction=GT\n"
                    "  ay = $@ abs(y)\n  ge = pred@ compare(ay, hib), direction=GE\n"
                    "  xs = $@ multiply(x, hib)\n  sel = $@ select(gt, xs, ay)\n"
                    "  sel2 = $@ select(ge, sel, a2)\n  na = $@ negate(a2)\n"
                    "  mm = $@ maximum(sel2, na)\n  sg = $@ sign(y)\n"
                    "  ms = $@ minimum(mm, sg)\n  my = $@ maximum(y, x)\n"
                    "  eq = pred@ compare(ms, zb), direction=NE\n"
                    "  fin = pred@ and(eq, gt)\n  o = pred@ or(fin, ge)\n"
                    "  r = $@ select(o, ms, zb)\n"
                    "  nzc = $[] constant(-0)\n  nzb = $@ broadcast(nzc), dimensions={}\n"
                    "  r1 = $@ maximum(x0, zb)\n  r2 = $@ minimum(zb, n0)\n"
                    "  r3 = $@ maximum(nzb, n0)\n  r4 = $@ minimum(x0, nzb)\n"
                    "  r5 = $@ maximum(x, zb)\n  r6 = $@ clamp(z, ms, hi)\n"
                    "  r7 = $@ clamp(nzc, x0, z)\n"
                    "  ROOT t = ($@, $@, $@, $@, $@, $@, $@, $@, $@, pred@, $@, $@, $@, $@, $@, "
                    "$@, $@) tuple(cl, a2, mz, nz, m0, i0, r, my, mm, o, r1, r2, r3, r4, r5, r6, "
                    "r7)\n}\n";
                size_t n = 0;
                for (const char *q = tmpl; *q && n + 16 < sizeof text; q++) {
                    if (*q == '$')
                        n += (size_t)snprintf(text + n, sizeof text - n, "%s", t);
                    else if (*q == '@')
                        n += (size_t)snprintf(text + n, sizeof text - n, "%s", D);
                    else
                        text[n++] = *q;
                }
                text[n] = '\0';
                int64_t nan_before = g_nan_bits_differ;
                g_tiny = tiny != 0;
                g_keep_src = true;
                check_module(text, 1700 + (uint64_t)(j * 8 + d * 2 + tiny), true);
                g_keep_src = false;
                g_tiny = false;
                EXPECT_INT_EQ(g_nan_bits_differ, nan_before);
#if defined(__x86_64__)
                /* the kernels of 16 or more elements ran under the hardware mode, the f32, f16
                 * and bf16 ones with the product by 1 */
                if (d > 0) {
                    EXPECT_TRUE(g_src && strstr(g_src, "_mm_setcsr(ot_csr | 0x8040u)") != NULL);
                    if (j != 1) EXPECT_TRUE(g_src && strstr(g_src, "* ot_one)") != NULL);
                    /* constant bounds: one compare and a pick (minmax_const) */
                    if (j != 2)
                        EXPECT_TRUE(g_src &&
                                    strstr(g_src, j == 1 ? "ot_pickd((uint64_t)("
                                                         : "ot_pickf((uint32_t)(") != NULL);
                }
#endif
                free(g_src);
                g_src = NULL;
            }
}

/* Row fusions (src/compiler/rowfuse.c): layer norm's mean and variance sums, the per-row ops
 * after them and the normalize become one kernel that reads each row from memory once; every
 * output equals the reference evaluator's on the original module bit for bit (f32 and f64,
 * ordinary and tiny inputs with NaNs, infinities and subnormals, rows of 16 to 1000 elements,
 * 2D and 3D, the mean also an output or not, the variance an output). Refused (the two sums not
 * in one kernel): a row maximum first (softmax's), rows shorter than 16 or longer than 64 KiB,
 * column sums, a first sum over another input. */
/* The largest number of sums computed inside one row fusion kernel, and the number of fusion
 * kernels. */
static int row_sums(const char *text, int *nfusions) {
    ot_module *m = parse(text);
    if (!m) return -1;
    ot_executable *e = NULL;
    EXPECT_OK(ot_compile(m, NULL, &e));
    ot_module_free(m);
    int rows = 0, nf = 0;
    const cg_program *p = e ? cc_executable_native(e) : NULL;
    char *src = p ? program_source(p) : NULL;
    /* each kernel's function starts with its signature */
    static const char sig[] = "(void *const *in, void *const *out";
    for (const char *k = src ? strstr(src, sig) : NULL; k;) {
        const char *next = strstr(k + 1, sig);
        int here = 0;
        for (const char *q = k; (q = strstr(q, "    { /* ")) != NULL && (!next || q < next); q++)
            here++;
        if (here > rows) rows = here;
        k = next;
    }
    for (int k = 0; e && k < ot_executable_kernel_count(e); k++)
        nf += ot_executable_kernel(e, k)->kind == OT_KERNEL_FUSION;
    free(src);
    ot_executable_free(e);
    if (nfusions) *nfusions = nf;
    return rows;
}

/* Expands $T (dtype), $S (input shape), $R (row shape), $B (broadcast dims of a per-row value),
 * $D (reduced dims), $N (row length), $M (extra outputs' types), $m (extra outputs). */
static void expand(char *out, size_t cap, const char *tmpl, const char *const *val) {
    static const char keys[] = "TSRBDNMm";
    size_t n = 0;
    for (const char *q = tmpl; *q && n + 1 < cap; q++) {
        const char *k = *q == '$' && q[1] ? strchr(keys, q[1]) : NULL;
        if (k) {
            const char *v = val[k - keys];
            for (; *v && n + 1 < cap; v++) {
                if (*v == '$' && v[1] == 'T') { /* $T inside $M */
                    for (const char *w = val[0]; *w && n + 1 < cap; w++) out[n++] = *w;
                    v++;
                    continue;
                }
                out[n++] = *v;
            }
            q++;
            continue;
        }
        out[n++] = *q;
    }
    out[n] = '\0';
}

static const char row_tmpl[] =
    "HloModule ln\nadd {\n  a = $T[] parameter(0)\n  b = $T[] parameter(1)\n"
    "  ROOT s = $T[] add(a, b)\n}\nmx {\n  a = $T[] parameter(0)\n  b = $T[] parameter(1)\n"
    "  ROOT s = $T[] maximum(a, b)\n}\nENTRY main {\n  x = $T[$S] parameter(0)\n"
    "  x2 = $T[$S] parameter(1)\n"
    "  z = $T[] constant(0)\n  n = $T[] constant($N)\n  nb = $T[$R] broadcast(n), dimensions={}\n"
    "  s1 = $T[$R] reduce(x, z), dimensions={$D}, to_apply=add\n"
    "  mean = $T[$R] divide(s1, nb)\n  mb = $T[$S] broadcast(mean), dimensions={$B}\n"
    "  d = $T[$S] subtract(x, mb)\n  d2 = $T[$S] multiply(d, d)\n"
    "  s2 = $T[$R] reduce(d2, z), dimensions={$D}, to_apply=add\n"
    "  var = $T[$R] divide(s2, nb)\n  eps = $T[] constant(1e-5)\n"
    "  eb = $T[$R] broadcast(eps), dimensions={}\n  ve = $T[$R] add(var, eb)\n"
    "  r = $T[$R] rsqrt(ve)\n  rb = $T[$S] broadcast(r), dimensions={$B}\n"
    "  y = $T[$S] multiply(d, rb)\n  ROOT t = ($T[$S], $T[$R]$M) tuple(y, var$m)\n}\n";

static void test_row_fusion(void) {
    static const char *const cases[][6] = {
        /* T, S, R, B, D, N */
        {"f32", "40,300", "40", "0", "1", "300"},   {"f64", "40,300", "40", "0", "1", "300"},
        {"f32", "33,16", "33", "0", "1", "16"},     {"f32", "3,7,1000", "3,7", "0,1", "2", "1000"},
        {"f32", "5,12,40", "5", "0", "1,2", "480"},
    };
    char text[8192];
    for (int j = 0; j < (int)(sizeof cases / sizeof cases[0]); j++) {
        for (int out_mean = 0; out_mean < 2; out_mean++) {
            const char *val[8] = {cases[j][0], cases[j][1], cases[j][2], cases[j][3],
                                  cases[j][4], cases[j][5], "",          ""};
            char mt[64];
            snprintf(mt, sizeof mt, ", $T[%s]", cases[j][2]);
            if (out_mean) {
                val[6] = mt;
                val[7] = ", mean";
            }
            expand(text, sizeof text, row_tmpl, val);
            for (int tiny = 0; tiny < 2; tiny++) {
                g_tiny = tiny == 1;
                check_module(text, 1200 + (uint64_t)(j * 4 + out_mean * 2 + tiny), true);
                g_tiny = false;
            }
            /* one kernel: both sums and the normalize */
            int nf = 0;
            EXPECT_INT_EQ(row_sums(text, &nf), 2);
            EXPECT_INT_EQ(nf, 1);
        }
    }
    /* refused: the first sum over another input (x2), a row maximum first (softmax's shape),
     * rows of 15, rows of 20000, column sums */
    static const char *const refused[][2] = {
        {"s1 = $T[$R] reduce(x, z)", "s1 = $T[$R] reduce(x2, z)"},
        {"s1 = $T[$R] reduce(x, z), dimensions={$D}, to_apply=add",
         "s1 = $T[$R] reduce(x, z), dimensions={$D}, to_apply=mx"},
    };
    for (int j = 0; j < 2; j++) {
        const char *val[8] = {"f32", "40,300", "40", "0", "1", "300", "", ""};
        char tm[4096];
        const char *at = strstr(row_tmpl, refused[j][0]);
        ASSERT_TRUE(at != NULL);
        size_t pre = (size_t)(at - row_tmpl);
        snprintf(tm, sizeof tm, "%.*s%s%s", (int)pre, row_tmpl, refused[j][1],
                 at + strlen(refused[j][0]));
        expand(text, sizeof text, tm, val);
        check_module(text, 1300 + (uint64_t)j, false);
        EXPECT_TRUE(row_sums(text, NULL) < 2);
    }
    {
        const char *v15[8] = {"f32", "40,15", "40", "0", "1", "15", "", ""};
        expand(text, sizeof text, row_tmpl, v15);
        check_module(text, 1310, false);
        EXPECT_TRUE(row_sums(text, NULL) < 2);
        /* rows over 64 KiB (20000 f32) */
        const char *vl[8] = {"f32", "4,20000", "4", "0", "1", "20000", "", ""};
        expand(text, sizeof text, row_tmpl, vl);
        check_module(text, 1312, false);
        EXPECT_TRUE(row_sums(text, NULL) < 2);
        /* column sums: the per-column mean broadcast along dim 1 */
        const char *vc[8] = {"f32", "300,40", "40", "1", "0", "300", "", ""};
        expand(text, sizeof text, row_tmpl, vc);
        check_module(text, 1311, false);
        EXPECT_TRUE(row_sums(text, NULL) < 2);
    }
}

/* value_and_grad of sum(x / max(||x||, 1e-12) * ct) (an L2 normalization along the rows) as JAX
 * lowers it: the norm's sum of x * x, a loop of per-row values with three results (the norm, its
 * clamp, a reshape), a row sum of ct * x / clamp^2 that reads one of them, a sum over a unit dim,
 * the gradient's elementwise loop and the loss sum. Where rows are 16 elements to 64 KiB (and
 * more than one) the row kernel takes the norm's sum, the per-row loop, the second sum and the
 * gradient (rowfuse.c: a per-row loop of several results; a sum of elementwise ops of x), leaving
 * two fusion kernels (six before); every output bit for bit the reference's on 1, 2, 3 and 8
 * threads, f32 and f64, rows of 1 to 10000, widths 1 to 20000, ordinary and tiny inputs. */
static const char l2grad_tmpl[] =
    "HloModule l2grad\n"
    "region_0.1 {\n"
    "  reduce_sum.3 = $T[] parameter(0)\n"
    "  reduce_sum.4 = $T[] parameter(1)\n"
    "  ROOT reduce_sum.5 = $T[] add(reduce_sum.3, reduce_sum.4)\n"
    "}\n"
    "norm.2 {\n"
    "  Arg_0.1 = $T[@R,@N] parameter(0)\n"
    "  mul.1 = $T[@R,@N] multiply(Arg_0.1, Arg_0.1)\n"
    "  constant.8 = $T[] constant(0)\n"
    "  reduce_sum.7 = $T[@R] reduce(mul.1, constant.8), dimensions={1}, to_apply=region_0.1\n"
    "  broadcast_in_dim.3 = $T[@R,1] reshape(reduce_sum.7)\n"
    "  sqrt.1 = $T[@R,1] sqrt(broadcast_in_dim.3)\n"
    "  constant.7 = $T[] constant(0.5)\n"
    "  div.2 = $T[@R,1] broadcast(constant.7), dimensions={}\n"
    "  div.3 = $T[@R,1] divide(div.2, sqrt.1)\n"
    "  ROOT tuple.1 = ($T[@R,1], $T[@R,1]) tuple(sqrt.1, div.3)\n"
    "}\n"
    "region_1.3 {\n"
    "  reduce_sum.11 = $T[] parameter(0)\n"
    "  reduce_sum.12 = $T[] parameter(1)\n"
    "  ROOT reduce_sum.13 = $T[] add(reduce_sum.11, reduce_sum.12)\n"
    "}\n"
    "region_2.4 {\n"
    "  reduce_sum.18 = $T[] parameter(0)\n"
    "  reduce_sum.19 = $T[] parameter(1)\n"
    "  ROOT reduce_sum.20 = $T[] add(reduce_sum.18, reduce_sum.19)\n"
    "}\n"
    "region_3.5 {\n"
    "  reduce_sum.25 = $T[] parameter(0)\n"
    "  reduce_sum.26 = $T[] parameter(1)\n"
    "  ROOT reduce_sum.27 = $T[] add(reduce_sum.25, reduce_sum.26)\n"
    "}\n"
    "norm_0.6 {\n"
    "  Arg_0.3 = $T[@R,@N] parameter(0)\n"
    "  Arg_2.1 = $T[@R,1] parameter(2)\n"
    "  Arg_1.1 = $T[@R,1] parameter(1)\n"
    "  mul.13 = $T[@R,1] multiply(Arg_2.1, Arg_1.1)\n"
    "  constant.10 = $T[] constant(0)\n"
    "  reduce_sum.29 = $T[@R] reduce(mul.13, constant.10), dimensions={1}, to_apply=region_3.5\n"
    "  broadcast_in_dim.5 = $T[@R,@N] broadcast(reduce_sum.29), dimensions={0}\n"
    "  mul.14 = $T[@R,@N] multiply(Arg_0.3, broadcast_in_dim.5)\n"
    "  mul.15 = $T[@R,@N] multiply(broadcast_in_dim.5, Arg_0.3)\n"
    "  ROOT add_any.1 = $T[@R,@N] add(mul.14, mul.15)\n"
    "}\n"
    "ENTRY main.7 {\n"
    "  x.1 = $T[@R,@N] parameter(0)\n"
    "  jvp_jit_norm__.3 = ($T[@R,1], $T[@R,1]) call(x.1), to_apply=norm.2\n"
    "  jvp_jit_norm__.4 = $T[@R,1] get-tuple-element(jvp_jit_norm__.3), index=0\n"
    "  constant.14 = $T[] constant(1e-12)\n"
    "  broadcast.3 = $T[@R,1] broadcast(constant.14), dimensions={}\n"
    "  max.1 = $T[@R,1] maximum(jvp_jit_norm__.4, broadcast.3)\n"
    "  div.15 = $T[@R,1] broadcast(max.1), dimensions={0,1}\n"
    "  div.16 = $T[@R] reshape(div.15)\n"
    "  div.17 = $T[@R,@N] broadcast(div.16), dimensions={0}\n"
    "  div.18 = $T[@R,@N] divide(x.1, div.17)\n"
    "  ct.1 = $T[@R,@N] parameter(1)\n"
    "  mul.17 = $T[@R,@N] multiply(div.18, ct.1)\n"
    "  constant.15 = $T[] constant(0)\n"
    "  reduce_sum.30 = $T[] reduce(mul.17, constant.15), dimensions={0,1}, to_apply=region_1.3\n"
    "  div.20 = $T[@R,1] broadcast(max.1), dimensions={0,1}\n"
    "  div.21 = $T[@R] reshape(div.20)\n"
    "  div.22 = $T[@R,@N] broadcast(div.21), dimensions={0}\n"
    "  div.23 = $T[@R,@N] divide(ct.1, div.22)\n"
    "  jvp_jit_norm__.5 = $T[@R,1] get-tuple-element(jvp_jit_norm__.3), index=1\n"
    "  constant.13 = $T[] constant(1)\n"
    "  broadcast.2 = $T[@R,1] broadcast(constant.13), dimensions={}\n"
    "  mul.16 = $T[@R,1] multiply(max.1, max.1)\n"
    "  div.19 = $T[@R,1] divide(broadcast.2, mul.16)\n"
    "  mul.18 = $T[@R,1] broadcast(div.19), dimensions={0,1}\n"
    "  mul.19 = $T[@R] reshape(mul.18)\n"
    "  mul.20 = $T[@R,@N] broadcast(mul.19), dimensions={0}\n"
    "  mul.21 = $T[@R,@N] multiply(ct.1, mul.20)\n"
    "  mul.22 = $T[@R,@N] multiply(mul.21, x.1)\n"
    "  reduce_sum.31 = $T[@R] reduce(mul.22, constant.15), dimensions={1}, to_apply=region_2.4\n"
    "  reshape.1 = $T[@R,1] reshape(reduce_sum.31)\n"
    "  neg.1 = $T[@R,1] negate(reshape.1)\n"
    "  eq.2 = pred[@R,1] compare(jvp_jit_norm__.4, max.1), direction=EQ\n"
    "  constant.12 = $T[] constant(0)\n"
    "  broadcast_in_dim.7 = $T[@R,1] broadcast(constant.12), dimensions={}\n"
    "  select_n.2 = $T[@R,1] select(eq.2, broadcast.2, broadcast_in_dim.7)\n"
    "  eq.3 = pred[@R,1] compare(broadcast.3, max.1), direction=EQ\n"
    "  constant.11 = $T[] constant(2)\n"
    "  broadcast_in_dim.6 = $T[@R,1] broadcast(constant.11), dimensions={}\n"
    "  select_n.3 = $T[@R,1] select(eq.3, broadcast_in_dim.6, broadcast.2)\n"
    "  div.14 = $T[@R,1] divide(select_n.2, select_n.3)\n"
    "  mul.23 = $T[@R,1] multiply(neg.1, div.14)\n"
    "  transpose_jvp_jit_norm___.1 = $T[@R,@N] call(x.1, jvp_jit_norm__.5, mul.23), "
    "to_apply=norm_0.6\n"
    "  add_any.3 = $T[@R,@N] add(div.23, transpose_jvp_jit_norm___.1)\n"
    "  ROOT tuple.3 = ($T[], $T[@R,@N]) tuple(reduce_sum.30, add_any.3)\n"
    "}\n";

static void test_l2_norm_grad_rows(void) {
    static const struct {
        const char *t;
        int R, N;
    } cases[] = {{"f32", 40, 300}, {"f64", 40, 300}, {"f32", 10000, 16}, {"f32", 5, 4096},
                 {"f32", 1, 7},    {"f32", 64, 1},   {"f32", 37, 15},    {"f32", 3, 20000}};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static char text[16384];
    for (int j = 0; j < (int)(sizeof cases / sizeof cases[0]); j++) {
        size_t n = 0;
        for (const char *q = l2grad_tmpl; *q && n + 16 < sizeof text; q++) {
            if (*q == '$' && q[1] == 'T')
                n += (size_t)snprintf(text + n, sizeof text - n, "%s", cases[j].t), q++;
            else if (*q == '@' && (q[1] == 'R' || q[1] == 'N'))
                n += (size_t)snprintf(text + n, sizeof text - n, "%d",
                                      q[1] == 'R' ? cases[j].R : cases[j].N),
                    q++;
            else
                text[n++] = *q;
        }
        text[n] = '\0';
        for (int tiny = 0; tiny < 2; tiny++)
            for (int t = 0; t < 4; t++) {
                g_tiny = tiny == 1;
                g_run_pool = pools[t];
                check_module(text, 1800 + (uint64_t)(j * 2 + tiny), true);
            }
        g_tiny = false;
        g_run_pool = NULL;
        size_t es = strcmp(cases[j].t, "f64") == 0 ? 8 : 4;
        bool rows = cases[j].R > 1 && cases[j].N >= 16 && (size_t)cases[j].N * es <= 65536;
        int nf = 0;
        int sums = row_sums(text, &nf);
        if (rows) {
            EXPECT_INT_EQ(nf, 2);
            EXPECT_INT_EQ(sums, 2); /* the norm's and the gradient's, in one kernel */
        }
    }
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Layer norm and RMS norm as JAX lowers them (jnp.mean as a sum divided by a broadcast of the row
 * length, reshapes through [R, 1], the scale and shift): every output bit for bit the reference
 * evaluator's on 1, 2, 3 and 8 threads, f32 rows of 1, 7, 64, 1000, 1024 and 4097 elements, 1
 * to 300 rows, ordinary and tiny inputs (subnormals, values near 1), and inputs with NaNs and
 * infinities. Where row fusion applies (rows of 16 elements to 64 KiB; layer norm: more than
 * one row) each is one kernel that reads each row from memory once: layer norm's two sums and
 * RMS norm's one in the row kernel (the per-row 1/n read by both the mean and the variance is
 * copied into each cluster, not an extra output of the mean's). */
static void norm_text(tb *b, bool rms, int R, int N) {
    b->n = 0;
    tp(b,
       "HloModule norm\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
       "  ROOT s = f32[] add(a, b)\n}\nENTRY main {\n  v = f32[%d,%d] parameter(0)\n"
       "  g = f32[%d] parameter(1)\n  z = f32[] constant(0)\n  n = f32[] constant(%d)\n"
       "  nb = f32[%d,1] broadcast(n), dimensions={}\n  eps = f32[] constant(1e-05)\n"
       "  eb = f32[%d,1] broadcast(eps), dimensions={}\n"
       "  gb = f32[%d,%d] broadcast(g), dimensions={1}\n",
       R, N, N, N, R, R, R, N);
    if (rms) {
        tp(b,
           "  sq = f32[%d,%d] multiply(v, v)\n"
           "  s = f32[%d] reduce(sq, z), dimensions={1}, to_apply=add\n"
           "  sr = f32[%d,1] reshape(s)\n  ms = f32[%d,1] divide(sr, nb)\n"
           "  me = f32[%d,1] add(ms, eb)\n  r = f32[%d,1] rsqrt(me)\n  rr = f32[%d] reshape(r)\n"
           "  rb = f32[%d,%d] broadcast(rr), dimensions={0}\n  y = f32[%d,%d] multiply(v, rb)\n"
           "  ROOT o = f32[%d,%d] multiply(y, gb)\n}\n",
           R, N, R, R, R, R, R, R, R, N, R, N, R, N);
        return;
    }
    tp(b,
       "  bias = f32[%d] parameter(2)\n  bb = f32[%d,%d] broadcast(bias), dimensions={1}\n"
       "  s1 = f32[%d] reduce(v, z), dimensions={1}, to_apply=add\n"
       "  s1r = f32[%d,1] reshape(s1)\n  mean = f32[%d,1] divide(s1r, nb)\n"
       "  mr = f32[%d] reshape(mean)\n  mb = f32[%d,%d] broadcast(mr), dimensions={0}\n"
       "  d = f32[%d,%d] subtract(v, mb)\n  sq = f32[%d,%d] multiply(d, d)\n"
       "  s2 = f32[%d] reduce(sq, z), dimensions={1}, to_apply=add\n"
       "  s2r = f32[%d,1] reshape(s2)\n  var = f32[%d,1] divide(s2r, nb)\n"
       "  ve = f32[%d,1] add(var, eb)\n  r = f32[%d,1] rsqrt(ve)\n  rr = f32[%d] reshape(r)\n"
       "  rb = f32[%d,%d] broadcast(rr), dimensions={0}\n  y = f32[%d,%d] multiply(d, rb)\n"
       "  yg = f32[%d,%d] multiply(y, gb)\n  ROOT o = f32[%d,%d] add(yg, bb)\n}\n",
       N, R, N, R, R, R, R, R, N, R, N, R, N, R, R, R, R, R, R, R, N, R, N, R, N, R, N);
}

static void test_norm_rows(void) {
    static const int lens[] = {1, 7, 64, 1000, 1024, 4097};
    static const int nrows[] = {1, 3, 37, 300};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    char text[8192];
    tb b = {text, 0, sizeof text};
    uint64_t seed = 2000;
    for (int rms = 0; rms < 2; rms++)
        for (int k = 0; k < (int)(sizeof lens / sizeof lens[0]); k++)
            for (int j = 0; j < (int)(sizeof nrows / sizeof nrows[0]); j++) {
                int N = lens[k], R = nrows[j];
                if ((int64_t)N * R > 300000) continue; /* 4097 x 300: the test's time */
                norm_text(&b, rms == 1, R, N);
                for (int t = 0; t < 4; t++) {
                    /* inputs with NaNs and infinities on one pool, else ordinary/tiny ones */
                    g_tiny = t != 1;
                    g_run_pool = pools[t];
                    /* rows shorter than 16, and a layer norm of one row (the 1/n scalar
                     * constant stays an extra output of the mean's loop): the fast reduce
                     * kernel's mean, separate kernels */
                    bool one = N >= 16 && (rms || R > 1);
                    check_module(text, seed++, one);
                }
                g_tiny = false;
                g_run_pool = NULL;
                if (N < 16 || (!rms && R == 1)) continue;
                /* one kernel; layer norm's two sums, RMS norm's one, in the row kernel */
                int nf = 0;
                EXPECT_INT_EQ(row_sums(text, &nf), rms ? 1 : 2);
                EXPECT_INT_EQ(nf, 1);
            }
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Masked softmax as JAX lowers attention's (scale, select against a [S,S] mask broadcast over batch
 * and heads, or a padding mask [B,S] broadcast over heads and queries (dimensions {0,3}), row
 * max, exp of the difference, its sum, the division) and a log-softmax (masked with the lowest
 * float, or with -inf: rows of -inf where the mask is all false), on f32 and f64, rows
 * of 1 to 130 elements (odd lengths, shorter than a lane group, one element), inputs with NaNs,
 * infinities, signed zeros and subnormals (rows with and without NaN), on 1, 2, 3 and 8 threads:
 * every output bit for bit the reference evaluator's, every fusion native (but with rows of one
 * element). Where the rows are long enough for the row kernels: the row maximum is the
 * integer-key reduction, the mask is read at a per-row base plus the column (no division per
 * element), the exp beside the sum is stored by the sum's loops (no second loop over the row
 * computing it again), and the log-softmax's output loop runs in its exp-sum's kernel. */
/* softmax and log_softmax of one array, each reduce with its own copy of its reducer (as JAX
 * lowers them): CSE merges the two row maxima and the exp(x - max) above them (called
 * computations compare by structure), so the module compiles to as many kernels as with one
 * shared max and one shared add, and every output is the reference's on 1, 2, 3 and 8 threads,
 * over rows (the last dim), a middle dim and the leading dim, f32 and f64 (the lone row maximum
 * of the parameter goes to the fast reduce kernel, not native code). */
static const char sm_lsm_tmpl[] =
    "HloModule sml\nmx0 {\n  a = $T[] parameter(0)\n  b = $T[] parameter(1)\n"
    "  ROOT c = $T[] maximum(a, b)\n}\nadd0 {\n  a = $T[] parameter(0)\n  b = $T[] parameter(1)\n"
    "  ROOT c = $T[] add(a, b)\n}\nmx1 {\n  p = $T[] parameter(0)\n  q = $T[] parameter(1)\n"
    "  ROOT r = $T[] maximum(p, q)\n}\nadd1 {\n  p = $T[] parameter(0)\n  q = $T[] parameter(1)\n"
    "  ROOT r = $T[] add(p, q)\n}\nENTRY main {\n  x = $T[$S] parameter(0)\n"
    "  ni = $T[] constant(-inf)\n  z = $T[] constant(0)\n"
    "  m0 = $T[$R] reduce(x, ni), dimensions={$D}, to_apply=mx0\n"
    "  b0 = $T[$S] broadcast(m0), dimensions={$B}\n  d0 = $T[$S] subtract(x, b0)\n"
    "  e0 = $T[$S] exponential(d0)\n"
    "  s0 = $T[$R] reduce(e0, z), dimensions={$D}, to_apply=add0\n"
    "  sb0 = $T[$S] broadcast(s0), dimensions={$B}\n  sm = $T[$S] divide(e0, sb0)\n"
    "  m1 = $T[$R] reduce(x, ni), dimensions={$D}, to_apply=$N\n"
    "  b1 = $T[$S] broadcast(m1), dimensions={$B}\n  d1 = $T[$S] subtract(x, b1)\n"
    "  e1 = $T[$S] exponential(d1)\n"
    "  s1 = $T[$R] reduce(e1, z), dimensions={$D}, to_apply=$M\n"
    "  l1 = $T[$R] log(s1)\n  lb = $T[$S] broadcast(l1), dimensions={$B}\n"
    "  ls = $T[$S] subtract(d1, lb)\n  ROOT t = ($T[$S], $T[$S]) tuple(sm, ls)\n}\n";

static void test_softmax_log_softmax_regions(void) {
    static const char *const cases[][4] = {
        /* S, R, D, B */
        {"64,130", "64", "1", "0"},
        {"7,33,50", "7,50", "1", "0,2"},
        {"40,17", "17", "0", "1"},
    };
    static const char *const dts[] = {"f32", "f64"};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    char text[4096];
    int seed = 0;
    for (int j = 0; j < 2; j++)
        for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
            const char *val[8] = {dts[j],      cases[c][0], cases[c][1], cases[c][3],
                                  cases[c][2], "mx0",       "add0",      ""};
            expand(text, sizeof text, sm_lsm_tmpl, val);
            int shared = 0;
            (void)row_sums(text, &shared);
            val[5] = "mx1";
            val[6] = "add1";
            expand(text, sizeof text, sm_lsm_tmpl, val);
            int copies = 0;
            (void)row_sums(text, &copies);
            EXPECT_TRUE(shared > 0);
            EXPECT_INT_EQ(copies, shared);
            for (int t = 0; t < 4; t++) {
                g_run_pool = pools[t];
                check_module(text, 1700 + (uint64_t)seed++, false);
            }
            g_run_pool = NULL;
        }
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

static void test_softmax_rows(void) {
    static const char *const dts[] = {"f32", "f64"};
    static const int lens[] = {1, 3, 15, 16, 17, 33, 128, 130};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    char text[8192];
    tb b = {text, 0, sizeof text};
    int seed = 0;
    for (int pad = 0; pad < 2; pad++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < (int)(sizeof lens / sizeof lens[0]); k++)
                for (int form = 0; form < 3; form++) {
                    const char *T = dts[j];
                    int S = lens[k];
                    if (pad && (S == 1 || S == 15 || S == 16 || S == 128)) continue; /* time */
                    char md[64], mdims[16];
                    if (pad) {
                        snprintf(md, sizeof md, "2,%d", S);
                        snprintf(mdims, sizeof mdims, "{0,3}");
                    } else {
                        snprintf(md, sizeof md, "%d,%d", S, S);
                        snprintf(mdims, sizeof mdims, "{2,3}");
                    }
                    b.n = 0;
                    tp(&b,
                       "HloModule sm\nmx {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
                       "  ROOT c = %s[] maximum(a, b)\n}\nadd {\n  a = %s[] parameter(0)\n"
                       "  b = %s[] parameter(1)\n  ROOT c = %s[] add(a, b)\n}\n",
                       T, T, T, T, T, T);
                    tp(&b,
                       "ENTRY main {\n  x = %s[2,3,%d,%d] parameter(0)\n  m = pred[%s] "
                       "parameter(1)\n"
                       "  c = %s[] constant(0.125)\n  cb = %s[2,3,%d,%d] broadcast(c), "
                       "dimensions={}\n"
                       "  xs = %s[2,3,%d,%d] multiply(x, cb)\n"
                       "  mb = pred[2,3,%d,%d] broadcast(m), dimensions=%s\n"
                       "  lo = %s[] constant(%s)\n"
                       "  lb = %s[2,3,%d,%d] broadcast(lo), dimensions={}\n"
                       "  sel = %s[2,3,%d,%d] select(mb, xs, lb)\n  ni = %s[] constant(-inf)\n"
                       "  rm = %s[2,3,%d] reduce(sel, ni), dimensions={3}, to_apply=mx\n"
                       "  rmb = %s[2,3,%d,%d] broadcast(rm), dimensions={0,1,2}\n"
                       "  d = %s[2,3,%d,%d] subtract(sel, rmb)\n  ex = %s[2,3,%d,%d] "
                       "exponential(d)\n"
                       "  z = %s[] constant(0)\n"
                       "  s = %s[2,3,%d] reduce(ex, z), dimensions={3}, to_apply=add\n"
                       "  sb = %s[2,3,%d,%d] broadcast(s), dimensions={0,1,2}\n",
                       T, S, S, md, T, T, S, S, T, S, S, S, S, mdims, T,
                       form == 2 ? "-inf" : "-3.40282347e+38", T, S, S, T, S, S, T, T, S, T, S, S,
                       T, S, S, T, S, S, T, T, S, T, S, S);
                    if (form == 0)
                        tp(&b, "  ROOT y = %s[2,3,%d,%d] divide(ex, sb)\n}\n", T, S, S);
                    else /* log-softmax: d - log(sum); form 2: masked with -inf (rows of -inf) */
                        tp(&b,
                           "  ls = %s[2,3,%d,%d] log(sb)\n  ROOT y = %s[2,3,%d,%d] subtract(d, "
                           "ls)\n}\n",
                           T, S, S, T, S, S);
                    /* on 1, 2, 3 and 8 threads; rows of one element: a reduce over a unit dim lands
                     * inside a loop fusion, which stays interpreted */
                    for (int t = 0; t < 4; t++) {
                        g_run_pool = pools[t];
                        g_keep_src = t == 3;
                        check_module(text, 1500 + (uint64_t)seed++, S > 1);
                    }
                    g_keep_src = false;
                    g_run_pool = NULL;
                    if (S < 16 || !g_src) continue;
                    /* softmax: the maximum, the exp-sum (which stores the exp) and the division;
                     * log-softmax: the maximum, then the exp-sum with the output loop */
                    int nf = 0;
                    EXPECT_INT_EQ(row_sums(text, &nf), 1);
                    EXPECT_INT_EQ(nf, form == 0 ? 3 : 2);
                    /* the row maximum with keys; no division or remainder in any per-element index
                     */
                    EXPECT_TRUE(strstr(g_src, "(maximum, keys) */") != NULL);
                    for (const char *q = g_src; (q = strstr(q, "const int64_t ix")) != NULL; q++) {
                        const char *eol = strchr(q, '\n');
                        bool divmod = false;
                        for (const char *c = q; c < eol; c++) divmod |= *c == '%' || *c == '/';
                        if (divmod) fprintf(stderr, "%.*s\n", (int)(eol - q), q);
                        EXPECT_TRUE(!divmod);
                    }
                    /* softmax's exp-sum row kernel computes the exp once: stored inside the sum's
                     * loops, no loop over the row after it (the log-softmax's exp feeds the sum
                     * only)
                     */
                    if (form != 0) continue;
                    const char *rk = strstr(g_src, "(rows) */");
                    EXPECT_TRUE(rk != NULL);
                    if (rk) {
                        const char *end = strstr(rk, "\n}\n");
                        const char *el = strstr(rk, "for (int64_t col = 0; col <");
                        EXPECT_TRUE(end && (!el || el > end));
                        const char *st = strstr(rk, "o0[i] = ");
                        EXPECT_TRUE(st && end && st < end);
                    }
                }
    free(g_src);
    g_src = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Lane-ordered sums whose elements read 1- or 2-byte values (a pred mask selecting against 0,
 * a bf16 operand widened): gcc would vectorize their 16-element lane loops 4 floats at a time,
 * so each element is computed 64 at a time into ot_w[] and the lanes fold it (lane_groups).
 * Reduce fusions of one row per output (widths 16 to 200: under, at and between multiples of
 * 64, a tail after the lane groups), the block form (3 rows of 8300: block trees of 4096, the
 * exp-sum's too) and a row fusion (a masked exp-sum beside its stored exp); f32 and f64, inputs
 * with NaNs, infinities and subnormals once; bit for bit the reference on 1, 2, 3 and 8 threads,
 * the wide loops emitted exactly where a row holds 64 elements. */
static void test_lanes_narrow(void) {
    static const int widths[] = {16, 63, 64, 80, 100, 128, 200, 8300};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static char text[8192];
    tb b = {text, 0, sizeof text};
    int seed = 0;
    for (int v = 0; v < 3; v++) {
        const char *dt = v == 1 ? "f64" : "f32";
        g_finite = v < 2;
        for (int w = 0; w < (int)(sizeof widths / sizeof widths[0]); w++) {
            int N = widths[w], R = N > 4096 ? 3 : 5;
            b.n = 0;
            /* three sums of separate inputs (so that no two share a kernel): a masked sum, a
             * product with a bf16 operand beside the mask, a masked exp-sum beside its stored
             * exp, divided (softmax's row kernel) */
            tp(&b,
               "HloModule narrow\nrd {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
               "  ROOT c = %s[] add(a, b)\n}\nENTRY main {\n  z = %s[] constant(0)\n"
               "  zb = %s[%d,%d] broadcast(z), dimensions={}\n",
               dt, dt, dt, dt, dt, R, N);
            for (int f = 0; f < 3; f++)
                tp(&b,
                   "  x%d = %s[%d,%d] parameter(%d)\n  m%d = pred[%d,%d] parameter(%d)\n"
                   "  sel%d = %s[%d,%d] select(m%d, x%d, zb)\n",
                   f, dt, R, N, 2 * f, f, R, N, 2 * f + 1, f, dt, R, N, f, f);
            tp(&b,
               "  s0 = %s[%d] reduce(sel0, z), dimensions={1}, to_apply=rd\n"
               "  h = bf16[%d,%d] parameter(6)\n  hc = %s[%d,%d] convert(h)\n"
               "  p = %s[%d,%d] multiply(sel1, hc)\n"
               "  s1 = %s[%d] reduce(p, z), dimensions={1}, to_apply=rd\n"
               "  ex = %s[%d,%d] exponential(sel2)\n"
               "  s2 = %s[%d] reduce(ex, z), dimensions={1}, to_apply=rd\n"
               "  sb = %s[%d,%d] broadcast(s2), dimensions={0}\n"
               "  y = %s[%d,%d] divide(ex, sb)\n"
               "  ROOT t = (%s[%d], %s[%d], %s[%d,%d]) tuple(s0, s1, y)\n}\n",
               dt, R, R, N, dt, R, N, dt, R, N, dt, R, dt, R, N, dt, R, dt, R, N, dt, R, N, dt, R,
               dt, R, dt, R, N);
            g_keep_src = true;
            for (int t = 0; t < 4; t++) {
                g_run_pool = pools[t];
                check_module(text, 1900 + (uint64_t)seed++, true);
                int nwide = 0;
                for (const char *q = g_src; q && (q = strstr(q, "lane[l] = ot_w[l];")); q++)
                    nwide++;
                /* each of the three sums (and their block trees: the exp-sum beside its stored
                 * exp of 3 rows too, rows_as_blocks) */
                int want = N < 64 ? 0 : N > 4096 ? 6 : 3;
                if (nwide != want) fprintf(stderr, "width %d: %d wide loops\n", N, nwide);
                EXPECT_INT_EQ(nwide, want);
                if (N > 4096)
                    EXPECT_TRUE(g_src && strstr(g_src, "(reduce, lane order, block trees)"));
            }
            g_keep_src = false;
            g_run_pool = NULL;
        }
    }
    g_finite = false;
    free(g_src);
    g_src = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

static void test_cache(void) {
    ot_executable *e1 = compile_adam();
    ASSERT_TRUE(e1 != NULL);
    const cg_program *p1 = cc_executable_native(e1);
    ASSERT_TRUE(p1 != NULL);
    EXPECT_INT_EQ(p1->nnative, 1);
    char so[512];
    so_path(p1, so, sizeof so);
    struct stat st;
    EXPECT_INT_EQ(stat(so, &st), 0);
    uint8_t key[32];
    memcpy(key, p1->key, 32);
    bool first_from_cache = p1->from_cache;
    ot_executable_free(e1);

    /* second compile: the object comes from the cache */
    ot_executable *e2 = compile_adam();
    ASSERT_TRUE(e2 != NULL);
    const cg_program *p2 = cc_executable_native(e2);
    ASSERT_TRUE(p2 != NULL);
    EXPECT_TRUE(p2->from_cache);
    EXPECT_TRUE(memcmp(p2->key, key, 32) == 0);
    (void)first_from_cache;
    ot_executable_free(e2);

    /* a corrupted object is detected by its checksum and rebuilt */
    FILE *f = fopen(so, "r+b");
    ASSERT_TRUE(f != NULL);
    fseek(f, (long)(st.st_size / 2), SEEK_SET);
    int c = fgetc(f);
    fseek(f, (long)(st.st_size / 2), SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
    ot_executable *e3 = compile_adam();
    ASSERT_TRUE(e3 != NULL);
    const cg_program *p3 = cc_executable_native(e3);
    ASSERT_TRUE(p3 != NULL);
    EXPECT_TRUE(!p3->from_cache);
    EXPECT_INT_EQ(p3->nnative, 1);
    ot_executable_free(e3);
    ot_executable *e4 = compile_adam();
    const cg_program *p4 = e4 ? cc_executable_native(e4) : NULL;
    EXPECT_TRUE(p4 && p4->from_cache);
    ot_executable_free(e4);
    /* the rebuilt program computes the right thing */
    check_module(k_adam, 77, true);
}

/* Runs e (compiled from m: nin f32 inputs and nout f32 outputs of n elements each) on a host
 * device with prof as the run's profile, and compares every output with the reference
 * evaluator's bit for bit. */
static void run_profiled(ot_module *m, const ot_executable *e, int nin, int nout, int64_t n,
                         uint64_t seed, ot_profile *prof) {
    ot_device *d;
    ASSERT_OK(ot_host_device_create(0, 0, &d));
    ot_value args[8], ref;
    ot_buffer *in[8], *out[8] = {0};
    for (int k = 0; k < nin; k++) {
        ASSERT_OK(ot_value_alloc_array(&args[k], &ot_module_entry(m)->params[k]->shape.array));
        fill(OT_F32, args[k].array.data, n, &seed);
        ASSERT_OK(ot_buffer_from_host(d, &args[k].array, &in[k]));
    }
    ASSERT_OK(ot_evaluate(m, args, nin, NULL, &ref));
    ot_run_options ro = ot_run_options_default();
    ro.profile = prof;
    EXPECT_OK(ot_device_execute(d, e, in, nin, out, nout, &ro, NULL));
    for (int j = 0; j < nout; j++) {
        ot_tensor t;
        EXPECT_OK(ot_buffer_to_host(out[j], &t));
        EXPECT_TRUE(same_values(OT_F32, ot_value_leaf(&ref, j)->array.data, t.data, n));
        ot_tensor_release(&t);
        ot_buffer_free(out[j]);
    }
    ot_value_release(&ref);
    for (int k = 0; k < nin; k++) {
        ot_value_release(&args[k]);
        ot_buffer_free(in[k]);
    }
    ot_device_free(d);
}

static void profile_kinds(bool want_native) {
    ot_module *m = parse(k_adam);
    ASSERT_TRUE(m != NULL);
    ot_executable *e = NULL;
    ASSERT_OK(ot_compile(m, NULL, &e));
    ot_profile *prof;
    ASSERT_OK(ot_profile_create(&prof));
    run_profiled(m, e, 4, 3, 70000, 5, prof);
    char *trace = NULL;
    EXPECT_OK(ot_profile_chrome_trace(prof, &trace));
    if (trace) {
        if (!strstr(trace, want_native ? "\"fusion-native\"" : "\"fusion-interp\""))
            fprintf(stderr, "want_native %d, trace: %.600s\n", want_native, trace);
        EXPECT_TRUE((strstr(trace, "\"fusion-native\"") != NULL) == want_native);
        EXPECT_TRUE((strstr(trace, "\"fusion-interp\"") != NULL) == !want_native);
    }
    ot_free(trace);
    EXPECT_TRUE((cc_executable_native(e) != NULL) == want_native);
    ot_profile_free(prof);
    ot_executable_free(e);
    ot_module_free(m);
}

/* A libm function of a value or a constant: gcc folds a call on a constant with MPFR (correctly
 * rounded), the reference calls the C library (glibc's tanhf is 1 ulp off at 0.099609375), so the
 * generated code must call the library even where it could fold (f(max(x, c)) becomes a call on
 * c in one branch). f32 exp and tanh are the library's own functions on both sides (pasted, not
 * called): checked the same way. */
/* A logical right shift of an s8/s16 value reads it at its own width: a negative value's sign
 * bits must not come down (s8 0x81 >> 1 is 0x40, not 0xc0), with the amount from a constant and
 * from a parameter. */
/* Integer divide and remainder (jnp's // and % lower to them, with sign fix-ups around), native
 * and equal to the reference: random operands (about one divisor in a hundred zero), and, where
 * p holds, the most negative value over -1, which the C operators would trap on. */
static void test_int_divide_remainder(void) {
    static const char *const types[] = {"s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"};
    static const char *const mins[] = {"-128", "-32768", "-2147483648", "-9223372036854775808"};
    char text[2048];
    for (int j = 0; j < (int)(sizeof types / sizeof types[0]); j++) {
        const char *ty = types[j];
        bool sgn = ty[0] == 's';
        snprintf(text, sizeof text,
                 "HloModule divrem\nENTRY e {\n"
                 "  x = %s[5000]{0} parameter(0)\n"
                 "  y = %s[5000]{0} parameter(1)\n"
                 "  p = pred[5000]{0} parameter(2)\n"
                 "  mn = %s[] constant(%s)\n"
                 "  mb = %s[5000]{0} broadcast(mn), dimensions={}\n"
                 "  m1 = %s[] constant(%s)\n"
                 "  m1b = %s[5000]{0} broadcast(m1), dimensions={}\n"
                 "  xs = %s[5000]{0} select(p, mb, x)\n"
                 "  ys = %s[5000]{0} select(p, m1b, y)\n"
                 "  d = %s[5000]{0} divide(xs, ys)\n"
                 "  r = %s[5000]{0} remainder(xs, ys)\n"
                 "  ROOT t = (%s[5000]{0}, %s[5000]{0}) tuple(d, r)\n}\n",
                 ty, ty, ty, sgn ? mins[j] : "0", ty, ty, sgn ? "-1" : "7", ty, ty, ty, ty, ty, ty,
                 ty);
        g_keep_src = true;
        check_module(text, 300 + (uint64_t)j, true);
        g_keep_src = false;
        /* up to 32 bits the quotient goes through double (vectorized) */
        bool narrow = strcmp(ty, "s64") != 0 && strcmp(ty, "u64") != 0;
        EXPECT_TRUE(g_src && (strstr(g_src, sgn ? "(int32_t)((double)" : "(uint32_t)((double)") !=
                              NULL) == narrow);
        free(g_src);
        g_src = NULL;
    }
    /* beside float ops in one kernel (compiled without trapping math): converts, maximum,
     * compare, select and a division of floats with NaNs, infinities and subnormals */
    static const char mixed[] =
        "HloModule divmix\nENTRY e {\n  x = s32[37,129] parameter(0)\n"
        "  y = s32[37,129] parameter(1)\n  f = f32[37,129] parameter(2)\n"
        "  d = s32[37,129] divide(x, y)\n  r = s32[37,129] remainder(x, y)\n"
        "  df = f32[37,129] convert(d)\n  m = f32[37,129] maximum(df, f)\n"
        "  q = f32[37,129] divide(f, df)\n  c = pred[37,129] compare(q, m), direction=LT\n"
        "  s = f32[37,129] select(c, q, m)\n  fi = s32[37,129] convert(f)\n"
        "  d2 = s32[37,129] divide(fi, r)\n"
        "  ROOT t = (s32[37,129], f32[37,129], s32[37,129]) tuple(r, s, d2)\n}\n";
    g_keep_src = true;
    check_module(mixed, 320, true);
    g_keep_src = false;
    EXPECT_TRUE(g_src && strstr(g_src, "optimize(\"no-trapping-math\")") != NULL);
    free(g_src);
    g_src = NULL;
}

/* TOTALORDER compares (jnp.searchsorted, jnp.sort's comparators, histogram bins) in native code:
 * the operands' bits as keys, no DAZ, -NaN < -Inf < ... < -0 < +0 < ... < +Inf < +NaN, on
 * parameters, on a negation (x against -x: the zeros and NaNs of both signs), on a broadcast
 * constant and on a sum computed in the loop, every direction, every float type, with special and
 * subnormal inputs, bit for bit with the reference. The sum is compared in JAX's canonical form
 * (NaNs made one NaN, -0 made +0: what jnp writes before every TOTALORDER compare): the bits of a
 * NaN computed in native code may differ from the reference's (the vector add may take its
 * operands in the other order), which only a raw TOTALORDER compare would show. */
static void test_total_order_compare(void) {
    static const char *const types[] = {"f32", "f64", "f16", "bf16"};
    for (int j = 0; j < 4; j++) {
        for (int tiny = 0; tiny < 2; tiny++) {
            if (tiny && j >= 2) continue;
            const char *t = types[j];
            char text[8192];
            int n = 0;
            n += snprintf(
                text + n, sizeof text - n,
                "HloModule total_order\nENTRY e {\n"
                "  x = %s[3001]{0} parameter(0)\n  y = %s[3001]{0} parameter(1)\n"
                "  ng = %s[3001]{0} negate(x)\n  a = %s[3001]{0} add(x, y)\n"
                "  c0 = %s[] constant(-0)\n  z = %s[3001]{0} broadcast(c0), dimensions={}\n"
                "  cn = %s[] constant(nan)\n  nb = %s[3001]{0} broadcast(cn), dimensions={}\n"
                "  c1 = %s[] constant(0)\n  zb = %s[3001]{0} broadcast(c1), dimensions={}\n"
                "  un = pred[3001]{0} compare(a, a), direction=NE\n"
                "  iz = pred[3001]{0} compare(a, zb), direction=EQ\n"
                "  sz = %s[3001]{0} select(iz, zb, a)\n"
                "  s = %s[3001]{0} select(un, nb, sz)\n",
                t, t, t, t, t, t, t, t, t, t, t, t);
            static const char *const pairs[][2] = {{"x", "y"}, {"x", "ng"}, {"s", "x"}, {"y", "z"}};
            char outs[1024] = "", tys[1024] = "";
            int on = 0, tn = 0, k = 0;
            for (int q = 0; q < 4; q++)
                for (int d = 0; d < 6; d++, k++) {
                    n += snprintf(text + n, sizeof text - n,
                                  "  r%d = pred[3001]{0} compare(%s, %s), direction=%s, "
                                  "type=TOTALORDER\n",
                                  k, pairs[q][0], pairs[q][1], k_dirs[d]);
                    on += snprintf(outs + on, sizeof outs - on, "%sr%d", k ? ", " : "", k);
                    tn += snprintf(tys + tn, sizeof tys - tn, "%spred[3001]{0}", k ? ", " : "");
                }
            /* a searchsorted step: the compare selects between the operands */
            n += snprintf(text + n, sizeof text - n,
                          "  sel = %s[3001]{0} select(r2, x, ng)\n"
                          "  ROOT t = (%s, %s[3001]{0}) tuple(%s, sel)\n}\n",
                          t, tys, t, outs);
            g_tiny = tiny != 0;
            check_module(text, 340 + (uint64_t)(j * 2 + tiny), true);
            g_tiny = false;
        }
    }
}

/* Every integer elementwise op, native and bit for bit the reference on every integer width, on
 * edge values (0, 1, -1, MIN, MAX, MIN + 1, shift amounts 0, width - 1, width, width + 1,
 * negative and huge, single bits) on both operands: the unary ops (popcnt, clz of 0 included),
 * the binary ones (shifts, divide and remainder by 0 and MIN / -1, power with negative and large
 * exponents, unsigned maximum, minimum and clamp), and shifts, divides and powers by broadcast
 * constants (gcc folds those). One multi-output fusion per width, which must be native (no
 * fusion-interp), on 1, 2, 3 and 8 threads. */
static void test_int_ops_native(void) {
    static const char *const types[] = {"s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"};
    static const char *const un[] = {"negate", "abs",    "sign",
                                     "not",    "popcnt", "count-leading-zeros"};
    static const char *const bin[] = {"add",
                                      "subtract",
                                      "multiply",
                                      "divide",
                                      "remainder",
                                      "power",
                                      "maximum",
                                      "minimum",
                                      "and",
                                      "or",
                                      "xor",
                                      "shift-left",
                                      "shift-right-logical",
                                      "shift-right-arithmetic"};
    static const char *const cbin[] = {
        "shift-left", "shift-right-logical", "shift-right-arithmetic",
        "divide",     "remainder",           "power"};
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    char text[16384], outs[4096], tys[8192];
    tb b = {text, 0, sizeof text};
    for (int j = 0; j < (int)(sizeof types / sizeof types[0]); j++) {
        const char *dt = types[j];
        int w = (int)strtol(dt + 1, NULL, 10);
        char ty[32];
        snprintf(ty, sizeof ty, "%s[300,129]", dt); /* over one chunk: the parallel path */
        b.n = 0;
        tp(&b, "HloModule intops_%s\nENTRY main {\n", dt);
        tp(&b, "  x = %s parameter(0)\n  y = %s parameter(1)\n  z = %s parameter(2)\n", ty, ty, ty);
        size_t on = 0, tn = 0;
        int k = 0;
#define INT_OUT()                                                                                  \
    do {                                                                                           \
        on += (size_t)snprintf(outs + on, sizeof outs - on, "%sr%d", k ? ", " : "", k);            \
        tn += (size_t)snprintf(tys + tn, sizeof tys - tn, "%s%s", k ? ", " : "", ty);              \
        k++;                                                                                       \
    } while (0)
        for (size_t q = 0; q < sizeof un / sizeof un[0]; q++) {
            tp(&b, "  r%d = %s %s(x)\n", k, ty, un[q]);
            INT_OUT();
        }
        for (size_t q = 0; q < sizeof bin / sizeof bin[0]; q++) {
            tp(&b, "  r%d = %s %s(x, y)\n", k, ty, bin[q]);
            INT_OUT();
        }
        tp(&b, "  r%d = %s clamp(y, x, z)\n", k, ty);
        INT_OUT();
        /* constant right operands: 0, 1, 3, width - 1, width, -1 (the unsigned maximum) */
        const char *cs[] = {"0", "1", "3", NULL, NULL, dt[0] == 's' ? "-1" : NULL};
        char cw1[16], cw[16], cmax[32];
        snprintf(cw1, sizeof cw1, "%d", w - 1);
        snprintf(cw, sizeof cw, "%d", w);
        snprintf(cmax, sizeof cmax, "%llu", w == 64 ? ~0ull : (1ull << w) - 1);
        cs[3] = cw1;
        cs[4] = cw;
        if (!cs[5]) cs[5] = cmax;
        for (int c = 0; c < 6; c++) {
            tp(&b, "  c%d = %s[] constant(%s)\n  cb%d = %s broadcast(c%d), dimensions={}\n", c, dt,
               cs[c], c, ty, c);
            for (size_t q = 0; q < sizeof cbin / sizeof cbin[0]; q++) {
                tp(&b, "  r%d = %s %s(x, cb%d)\n", k, ty, cbin[q], c);
                INT_OUT();
            }
        }
#undef INT_OUT
        tp(&b, "  ROOT t = (%s) tuple(%s)\n}\n", tys, outs);
        g_int_edges = true;
        for (int t = 0; t < 4; t++) {
            g_run_pool = pools[t];
            int before = g_stats.interp_kernels;
            check_module(text, 900 + (uint64_t)j, true);
            EXPECT_INT_EQ(g_stats.interp_kernels, before); /* no fusion-interp */
        }
#if defined(__x86_64__)
        /* the forms for CPUs without AVX-512 (popcount and leading zeros from shifts and
         * adds): the same module through a compiler told not to use AVX-512 */
        char cc[512], prev[512];
        const char *pe = getenv("OPTITPU_CC");
        snprintf(prev, sizeof prev, "%s", pe && *pe ? pe : "");
        snprintf(cc, sizeof cc, "%s/cc-no-avx512.sh", g_cache);
        FILE *f = fopen(cc, "w");
        ASSERT_TRUE(f != NULL);
        fprintf(f, "#!/bin/sh\nexec %s \"$@\" -mno-avx512f\n", prev[0] ? prev : "cc");
        ASSERT_TRUE(fclose(f) == 0);
        ASSERT_TRUE(chmod(cc, 0700) == 0);
        setenv("OPTITPU_CC", cc, 1);
        g_run_pool = pools[1];
        int before = g_stats.interp_kernels;
        check_module(text, 900 + (uint64_t)j, true);
        EXPECT_INT_EQ(g_stats.interp_kernels, before);
        if (prev[0])
            setenv("OPTITPU_CC", prev, 1);
        else
            unsetenv("OPTITPU_CC");
#endif
        g_int_edges = false;
        g_run_pool = NULL;
    }
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* bitcast-convert between every two dtypes of one element size (s8, u8; s16, u16, f16,
 * bf16; s32, u32, f32; s64, u64, f64), also read by arithmetic (a subnormal or NaN made from
 * integer bits meets an add's flushing), and reduce-precision of f32, f64, f16 and bf16 to
 * formats narrower, as wide and wider in each field (e1m0 … e11m52), on special, subnormal and
 * arbitrary bits: native, bit for bit the reference, on 1 and 3 threads. */
static void test_bitcast_reduce_precision(void) {
    static const char *const groups[][4] = {{"s8", "u8", NULL, NULL},
                                            {"s16", "u16", "f16", "bf16"},
                                            {"s32", "u32", "f32", NULL},
                                            {"s64", "u64", "f64", NULL}};
    static const int threads[] = {1, 3};
    ot_threadpool *pools[2] = {NULL};
    for (int t = 0; t < 2; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    char text[8192], outs[1024], tys[2048];
    tb b = {text, 0, sizeof text};
    uint64_t seed = 950;
    for (int g = 0; g < 4; g++)
        for (int f = 0; f < 4 && groups[g][f]; f++) {
            const char *from = groups[g][f];
            b.n = 0;
            tp(&b, "HloModule bitcast_%s\nENTRY main {\n  x = %s[300,129] parameter(0)\n", from,
               from);
            size_t on = 0, tn = 0;
            int k = 0;
            for (int t = 0; t < 4 && groups[g][t]; t++, k++) {
                const char *to = groups[g][t];
                tp(&b, "  r%d = %s[300,129] bitcast-convert(x)\n", k, to);
                on += (size_t)snprintf(outs + on, sizeof outs - on, "%sr%d", k ? ", " : "", k);
                tn +=
                    (size_t)snprintf(tys + tn, sizeof tys - tn, "%s%s[300,129]", k ? ", " : "", to);
                if (to[0] == 'f' || to[0] == 'b') { /* a float read by arithmetic */
                    tp(&b, "  a%d = %s[300,129] add(r%d, r%d)\n", k, to, k, k);
                    on += (size_t)snprintf(outs + on, sizeof outs - on, ", a%d", k);
                    tn += (size_t)snprintf(tys + tn, sizeof tys - tn, ", %s[300,129]", to);
                }
            }
            tp(&b, "  ROOT t = (%s) tuple(%s)\n}\n", tys, outs);
            for (int t = 0; t < 2; t++) {
                g_run_pool = pools[t];
                check_module(text, seed, true);
            }
            seed++;
        }
    static const char *const fl[] = {"f32", "f64", "f16", "bf16"};
    static const int em[][2] = {{1, 0}, {2, 1},  {4, 3},   {5, 2},  {5, 10},
                                {8, 7}, {8, 23}, {11, 52}, {6, 30}, {3, 60}};
    for (int j = 0; j < 4; j++)
        for (int tiny = 0; tiny < 2; tiny++) {
            if (tiny && j >= 2) continue;
            b.n = 0;
            tp(&b, "HloModule rp_%s\nENTRY main {\n  x = %s[300,129] parameter(0)\n", fl[j], fl[j]);
            size_t on = 0, tn = 0;
            int n = (int)(sizeof em / sizeof em[0]);
            for (int k = 0; k < n; k++) {
                tp(&b,
                   "  r%d = %s[300,129] reduce-precision(x), exponent_bits=%d, mantissa_bits=%d\n",
                   k, fl[j], em[k][0], em[k][1]);
                on += (size_t)snprintf(outs + on, sizeof outs - on, "%sr%d", k ? ", " : "", k);
                tn += (size_t)snprintf(tys + tn, sizeof tys - tn, "%s%s[300,129]", k ? ", " : "",
                                       fl[j]);
            }
            /* of a computed value (a flushed product) as well */
            tp(&b,
               "  m = %s[300,129] multiply(x, x)\n"
               "  rm = %s[300,129] reduce-precision(m), exponent_bits=5, mantissa_bits=10\n",
               fl[j], fl[j]);
            tp(&b, "  ROOT t = (%s, %s[300,129]) tuple(%s, rm)\n}\n", tys, fl[j], outs);
            g_tiny = tiny != 0;
            for (int t = 0; t < 2; t++) {
                g_run_pool = pools[t];
                check_module(text, seed, true);
            }
            g_tiny = false;
            seed++;
        }
    g_run_pool = NULL;
    for (int t = 0; t < 2; t++) ot_threadpool_free(pools[t]);
}

static void test_narrow_shift_right_logical(void) {
    static const char *const types[] = {"s8", "s16", "u8", "s32", "s64"};
    char text[1024];
    for (int j = 0; j < (int)(sizeof types / sizeof types[0]); j++) {
        const char *ty = types[j];
        snprintf(text, sizeof text,
                 "HloModule srl\nENTRY e {\n"
                 "  x = %s[4096]{0} parameter(0)\n"
                 "  y = %s[4096]{0} parameter(1)\n"
                 "  c = %s[] constant(1)\n"
                 "  cb = %s[4096]{0} broadcast(c), dimensions={}\n"
                 "  a = %s[4096]{0} shift-right-logical(x, cb)\n"
                 "  s = %s[] constant(7)\n"
                 "  sb = %s[4096]{0} broadcast(s), dimensions={}\n"
                 "  ya = %s[4096]{0} and(y, sb)\n"
                 "  b = %s[4096]{0} shift-right-logical(x, ya)\n"
                 "  ROOT r = %s[4096]{0} add(a, b)\n}\n",
                 ty, ty, ty, ty, ty, ty, ty, ty, ty, ty);
        check_module(text, 77 + (uint64_t)j, true);
    }
}

static void test_libm_not_folded(void) {
    static const char *const fns[] = {
        "tanh", "exponential",           "log",          "sine", "cosine",
        "tan",  "exponential-minus-one", "log-plus-one", "erf",  "cbrt"};
    char text[2048];
    for (int j = 0; j < (int)(sizeof fns / sizeof fns[0]); j++) {
        for (int t = 0; t < 2; t++) {
            const char *ty = t ? "f64" : "f32";
            snprintf(text, sizeof text,
                     "HloModule folded\nENTRY e {\n"
                     "  x = %s[65536]{0} parameter(0)\n"
                     "  c = %s[] constant(0.099609375)\n"
                     "  cb = %s[65536]{0} broadcast(c), dimensions={}\n"
                     "  m = %s[65536]{0} maximum(x, cb)\n"
                     "  ROOT r = %s[65536]{0} %s(m)\n}\n",
                     ty, ty, ty, ty, ty, fns[j]);
            check_module(text, 31 + (uint64_t)j, true);
        }
    }
    static const char pw[] = "HloModule folded\nENTRY e {\n"
                             "  x = f32[65536]{0} parameter(0)\n"
                             "  c = f32[] constant(0.099609375)\n"
                             "  cb = f32[65536]{0} broadcast(c), dimensions={}\n"
                             "  m = f32[65536]{0} maximum(x, cb)\n"
                             "  p = f32[65536]{0} power(m, cb)\n"
                             "  ROOT r = f32[65536]{0} atan2(p, cb)\n}\n";
    check_module(pw, 77, true);
}

/* A program of several units: with a unit per kernel (OPTITPU_CODEGEN_UNIT_BYTES=1), three
 * independent loops compile into three objects side by side, inside ot_compile: the compile's
 * profile holds one "codegen" event per unit compiled (its kernels, C size and the compiler's
 * CPU time) and the stats say so; the first run compiles nothing (no event in its profile) and
 * its results equal the reference; a second compile loads every unit from the cache and reports
 * none. The unit size set in the options wins over the environment's. */
static void test_units(void) {
    static const char three[] = "HloModule three\n"
                                "ENTRY e {\n"
                                "  x = f32[70000]{0} parameter(0)\n"
                                "  y = f32[70000]{0} parameter(1)\n"
                                "  z = f32[70000]{0} parameter(2)\n"
                                "  w = f32[70000]{0} parameter(3)\n"
                                "  a = f32[70000]{0} multiply(x, x)\n"
                                "  ea = f32[70000]{0} exponential(a)\n"
                                "  b = f32[70000]{0} tanh(y)\n"
                                "  sb = f32[70000]{0} subtract(b, y)\n"
                                "  rz = f32[70000]{0} sqrt(z)\n"
                                "  c = f32[70000]{0} add(rz, w)\n"
                                "  ROOT t = (f32[70000]{0}, f32[70000]{0}, f32[70000]{0}) "
                                "tuple(ea, sb, c)\n"
                                "}\n";
    setenv("OPTITPU_CODEGEN_UNIT_BYTES", "1", 1);
    for (int round = 0; round < 3; round++) {
        ot_module *m = parse(three);
        ASSERT_TRUE(m != NULL);
        ot_executable *e = NULL;
        ot_profile *cprof, *rprof;
        ASSERT_OK(ot_profile_create(&cprof));
        ASSERT_OK(ot_profile_create(&rprof));
        ot_compile_options o = ot_compile_options_default();
        /* round 2: one unit for all three kernels from the option, whatever the environment */
        if (round == 2) o.native_unit_bytes = 1 << 20;
        ASSERT_OK(ot_profile_compile(cprof, m, &o, &e));
        const cg_program *p = cc_executable_native(e);
        ASSERT_TRUE(p != NULL);
        EXPECT_INT_EQ(p->nnative, 3);
        EXPECT_INT_EQ(p->nunits, round == 2 ? 1 : 3);
        ot_native_stats ns;
        ot_executable_native_stats(e, &ns);
        EXPECT_INT_EQ(ns.kernels, 3);
        EXPECT_INT_EQ(ns.units, p->nunits);
        /* a fresh cache: the first compile of each unit layout runs the compiler */
        EXPECT_INT_EQ(ns.units_compiled, round == 1 ? 0 : p->nunits);
        EXPECT_INT_EQ(ns.units_cached, round == 1 ? 3 : 0);
        EXPECT_TRUE(ns.seconds > 0);
        EXPECT_TRUE((ns.cc_cpu_seconds > 0) == (ns.units_compiled > 0));
        run_profiled(m, e, 4, 3, 70000, 11, rprof);
        int events = 0;
        for (int k = 0; k < ot_profile_kernel_count(cprof); k++) {
            const ot_kernel_profile *kp = ot_profile_kernel(cprof, k);
            if (strcmp(kp->kind, "codegen") != 0) continue;
            events++;
            EXPECT_STR_CONTAINS(kp->name, round == 2 ? "3 kernels" : "1 kernel");
            EXPECT_STR_CONTAINS(kp->name, "cc cpu");
        }
        EXPECT_INT_EQ(events, ns.units_compiled);
        for (int k = 0; k < ot_profile_kernel_count(rprof); k++)
            EXPECT_TRUE(strcmp(ot_profile_kernel(rprof, k)->kind, "codegen") != 0);
        EXPECT_TRUE(p->from_cache == (round == 1));
        ot_profile_free(cprof);
        ot_profile_free(rprof);
        ot_executable_free(e);
        ot_module_free(m);
    }
    unsetenv("OPTITPU_CODEGEN_UNIT_BYTES");
}

/* The native option: OFF builds nothing whatever the environment; ON builds even when every
 * fusion is below the size threshold, and an explicit ON wins over OPTITPU_CODEGEN=0, which
 * only turns AUTO off; the same results either way. */
static void test_native_option(void) {
    static const char small_only[] = "HloModule small_on\n"
                                     "ENTRY e {\n"
                                     "  a = f32[100]{0} parameter(0)\n"
                                     "  b = f32[100]{0} parameter(1)\n"
                                     "  ea = f32[100]{0} exponential(a)\n"
                                     "  ROOT s = f32[100]{0} multiply(ea, b)\n"
                                     "}\n";
    setenv("OPTITPU_CODEGEN_MIN_ELEMENTS", "4096", 1);
    ot_module *m = parse(small_only);
    ASSERT_TRUE(m != NULL);
    const struct {
        ot_native_mode mode;
        const char *env; /* OPTITPU_CODEGEN */
        bool want;
    } cases[] = {{OT_NATIVE_AUTO, NULL, false},
                 {OT_NATIVE_ON, NULL, true},
                 {OT_NATIVE_ON, "0", true},
                 {OT_NATIVE_OFF, NULL, false},
                 {OT_NATIVE_AUTO, "0", false}};
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        if (cases[c].env)
            setenv("OPTITPU_CODEGEN", cases[c].env, 1);
        else
            unsetenv("OPTITPU_CODEGEN");
        ot_compile_options o = ot_compile_options_default();
        o.native = cases[c].mode;
        ot_executable *e = NULL;
        EXPECT_OK(ot_compile(m, &o, &e));
        const cg_program *p = e ? cc_executable_native(e) : NULL;
        EXPECT_TRUE((p != NULL) == cases[c].want);
        if (p) EXPECT_INT_EQ(p->nnative, 1);
        if (e) run_profiled(m, e, 2, 1, 100, 3 + (uint64_t)c, NULL);
        ot_executable_free(e);
    }
    unsetenv("OPTITPU_CODEGEN");
    /* OFF on a large fusion too */
    ot_module *big = parse(k_adam);
    ASSERT_TRUE(big != NULL);
    ot_compile_options o = ot_compile_options_default();
    o.native = OT_NATIVE_OFF;
    ot_executable *e = NULL;
    EXPECT_OK(ot_compile(big, &o, &e));
    EXPECT_TRUE(e != NULL && cc_executable_native(e) == NULL);
    ot_native_stats ns;
    ot_executable_native_stats(e, &ns);
    EXPECT_INT_EQ(ns.kernels + ns.units + ns.units_compiled + ns.units_cached, 0);
    ot_executable_free(e);
    ot_module_free(big);
    ot_module_free(m);
    setenv("OPTITPU_CODEGEN_MIN_ELEMENTS", "0", 1);
}

/* The size threshold applies to the module: small fusions alone stay interpreted, small fusions
 * beside one at the threshold are compiled with it (same bits as the reference). */
static void test_small_beside_large(void) {
    static const char mixed[] = "HloModule mixed\n"
                                "ENTRY e {\n"
                                "  a = f32[100]{0} parameter(0)\n"
                                "  b = f32[100]{0} parameter(1)\n"
                                "  x = f32[70000]{0} parameter(2)\n"
                                "  y = f32[70000]{0} parameter(3)\n"
                                "  ea = f32[100]{0} exponential(a)\n"
                                "  s = f32[100]{0} multiply(ea, b)\n"
                                "  xy = f32[70000]{0} multiply(x, y)\n"
                                "  l = f32[70000]{0} add(xy, y)\n"
                                "  ROOT t = (f32[100]{0}, f32[70000]{0}) tuple(s, l)\n"
                                "}\n";
    static const char small_only[] = "HloModule small\n"
                                     "ENTRY e {\n"
                                     "  a = f32[100]{0} parameter(0)\n"
                                     "  b = f32[100]{0} parameter(1)\n"
                                     "  ea = f32[100]{0} exponential(a)\n"
                                     "  ROOT s = f32[100]{0} multiply(ea, b)\n"
                                     "}\n";
    setenv("OPTITPU_CODEGEN_MIN_ELEMENTS", "4096", 1);
    check_module(mixed, 91, true); /* every fusion native, results bit for bit */
    ot_module *m = parse(small_only);
    ASSERT_TRUE(m != NULL);
    ot_executable *e = NULL;
    EXPECT_OK(ot_compile(m, NULL, &e));
    EXPECT_TRUE(e != NULL && cc_executable_native(e) == NULL);
    ot_executable_free(e);
    ot_module_free(m);
    setenv("OPTITPU_CODEGEN_MIN_ELEMENTS", "0", 1);
}

/* The tier-up: a module of small fusions is interpreted at first and native from the run that
 * reaches OPTITPU_CODEGEN_TIER_UP runs (here 2: the first run interprets, the second and third
 * run native code), each run bit for bit the reference; 0 never tiers up, and neither do
 * OT_NATIVE_OFF nor OPTITPU_CODEGEN=0. */
static void tier_kinds(ot_module *m, const ot_executable *e, int run, bool want_native) {
    ot_profile *prof;
    ASSERT_OK(ot_profile_create(&prof));
    run_profiled(m, e, 2, 1, 100, 40 + (uint64_t)run, prof);
    char *trace = NULL;
    EXPECT_OK(ot_profile_chrome_trace(prof, &trace));
    if (trace) {
        EXPECT_TRUE((strstr(trace, "\"fusion-native\"") != NULL) == want_native);
        EXPECT_TRUE((strstr(trace, "\"fusion-interp\"") != NULL) == !want_native);
    }
    ot_free(trace);
    ot_profile_free(prof);
}

static void test_tier_up(void) {
    static const char small_only[] = "HloModule tier\n"
                                     "ENTRY e {\n"
                                     "  a = f32[100]{0} parameter(0)\n"
                                     "  b = f32[100]{0} parameter(1)\n"
                                     "  ea = f32[100]{0} sine(a)\n"
                                     "  ROOT s = f32[100]{0} multiply(ea, b)\n"
                                     "}\n";
    setenv("OPTITPU_CODEGEN_MIN_ELEMENTS", "4096", 1);
    ot_module *m = parse(small_only);
    ASSERT_TRUE(m != NULL);
    const struct {
        const char *tier;    /* OPTITPU_CODEGEN_TIER_UP */
        const char *env;     /* OPTITPU_CODEGEN */
        ot_native_mode mode; /* the compile's native option */
        int first_native;    /* the first run with native code, 0: none */
    } cases[] = {{"2", NULL, OT_NATIVE_AUTO, 2},
                 {"1", NULL, OT_NATIVE_AUTO, 1},
                 {"0", NULL, OT_NATIVE_AUTO, 0},
                 {"2", NULL, OT_NATIVE_OFF, 0},
                 {"2", "0", OT_NATIVE_AUTO, 0}};
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        setenv("OPTITPU_CODEGEN_TIER_UP", cases[c].tier, 1);
        if (cases[c].env)
            setenv("OPTITPU_CODEGEN", cases[c].env, 1);
        else
            unsetenv("OPTITPU_CODEGEN");
        ot_compile_options o = ot_compile_options_default();
        o.native = cases[c].mode;
        ot_executable *e = NULL;
        EXPECT_OK(ot_compile(m, &o, &e));
        if (!e) continue;
        EXPECT_TRUE(cc_executable_native(e) == NULL); /* nothing at compile time */
        for (int run = 1; run <= 3; run++)
            tier_kinds(m, e, run, cases[c].first_native && run >= cases[c].first_native);
        ot_native_stats ns;
        ot_executable_native_stats(e, &ns);
        EXPECT_INT_EQ(ns.kernels, cases[c].first_native ? 1 : 0);
        ot_executable_free(e);
    }
    unsetenv("OPTITPU_CODEGEN");
    setenv("OPTITPU_CODEGEN_TIER_UP", "0", 1);
    ot_module_free(m);
    setenv("OPTITPU_CODEGEN_MIN_ELEMENTS", "0", 1);
}

static bool any_kernel_native(const ot_executable *e) {
    for (int k = 0; k < ot_executable_kernel_count(e); k++)
        if (ot_executable_kernel_native(e, k)) return true;
    return false;
}

/* ot_executable_tier_up: the pending tier-up built before any run (the first run then runs
 * native code), nothing built where no tier-up is pending, the same answer when called again. */
static void test_tier_up_now(void) {
    static const char small_only[] = "HloModule tier_now\n"
                                     "ENTRY e {\n"
                                     "  a = f32[100]{0} parameter(0)\n"
                                     "  b = f32[100]{0} parameter(1)\n"
                                     "  ea = f32[100]{0} sine(a)\n"
                                     "  ROOT s = f32[100]{0} multiply(ea, b)\n"
                                     "}\n";
    setenv("OPTITPU_CODEGEN_MIN_ELEMENTS", "4096", 1);
    ot_module *m = parse(small_only);
    ASSERT_TRUE(m != NULL);
    const struct {
        const char *tier, *env;
        ot_native_mode mode;
        bool native; /* after ot_executable_tier_up */
    } cases[] = {{"2", NULL, OT_NATIVE_AUTO, true},
                 {"5", NULL, OT_NATIVE_AUTO, true},
                 {"0", NULL, OT_NATIVE_AUTO, false},
                 {"2", NULL, OT_NATIVE_OFF, false},
                 {"2", "0", OT_NATIVE_AUTO, false}};
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        setenv("OPTITPU_CODEGEN_TIER_UP", cases[c].tier, 1);
        if (cases[c].env)
            setenv("OPTITPU_CODEGEN", cases[c].env, 1);
        else
            unsetenv("OPTITPU_CODEGEN");
        ot_compile_options o = ot_compile_options_default();
        o.native = cases[c].mode;
        ot_executable *e = NULL;
        EXPECT_OK(ot_compile(m, &o, &e));
        if (!e) continue;
        EXPECT_TRUE(!any_kernel_native(e));
        EXPECT_TRUE(ot_executable_tier_up(e) == cases[c].native);
        EXPECT_TRUE(any_kernel_native(e) == cases[c].native);
        EXPECT_TRUE(ot_executable_tier_up(e) == cases[c].native); /* nothing left to build */
        tier_kinds(m, e, 1, cases[c].native);
        ot_native_stats ns;
        ot_executable_native_stats(e, &ns);
        EXPECT_INT_EQ(ns.kernels, cases[c].native ? 1 : 0);
        ot_executable_free(e);
    }
    EXPECT_TRUE(!ot_executable_tier_up(NULL));
    unsetenv("OPTITPU_CODEGEN");
    setenv("OPTITPU_CODEGEN_TIER_UP", "0", 1);
    ot_module_free(m);
    setenv("OPTITPU_CODEGEN_MIN_ELEMENTS", "0", 1);
}

static void test_fallbacks(void) {
    profile_kinds(true);
    setenv("OPTITPU_CODEGEN", "0", 1);
    profile_kinds(false);
    unsetenv("OPTITPU_CODEGEN");
    setenv("OPTITPU_CC", "/nonexistent/cc", 1);
    profile_kinds(false);
    unsetenv("OPTITPU_CC");
    /* below the size threshold a fusion stays interpreted */
    setenv("OPTITPU_CODEGEN_MIN_ELEMENTS", "1000000", 1);
    profile_kinds(false);
    setenv("OPTITPU_CODEGEN_MIN_ELEMENTS", "0", 1);
}

/* Allocation failure at every point of the native stage: it falls back to the interpreter (no
 * program) and leaks nothing. */
static void test_fault_injection(void) {
    bool done = false;
    for (int n = 1; n < 500 && !done; n++) {
        int64_t live = ot_alloc_live();
        ot_executable *e = compile_adam();
        ASSERT_TRUE(e != NULL);
        ot_compile_options o = ot_compile_options_default();
        ot_alloc_fail_after(n);
        cc_native_stage(e, &o); /* ot_compile's last stage again, rebuilding the program */
        const cg_program *p = cc_executable_native(e);
        ot_alloc_fail_after(0);
        ot_clear_error();
        done = p != NULL;
        ot_executable_free(e);
        EXPECT_INT_EQ(ot_alloc_live(), live);
    }
    EXPECT_TRUE(done);
}

/* take_along_axis of a log-softmax (JAX's batched gather, labels out of range included: the fill
 * gives s32 values in [-100, 100) and huge ones, which gather clamps) and a windowed gather of an
 * elementwise chain: simplify moves each gather onto the parameter, so no fusion materializes
 * the log-softmax, and the native results equal the reference evaluator's on the original. */
static const char *k_take_along =
    "HloModule take_along_native\n"
    "mx {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = f32[] maximum(a, b)\n}\n"
    "ad {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
    "ENTRY main {\n"
    "  x = f32[64,300] parameter(0)\n"
    "  l = s32[64,1,1] parameter(1)\n"
    "  ninf = f32[] constant(-inf)\n"
    "  m = f32[64] reduce(x, ninf), dimensions={1}, to_apply=mx\n"
    "  bm = f32[64,300] broadcast(m), dimensions={0}\n"
    "  s = f32[64,300] subtract(x, bm)\n"
    "  e = f32[64,300] exponential(s)\n"
    "  zero = f32[] constant(0)\n"
    "  se = f32[64] reduce(e, zero), dimensions={1}, to_apply=ad\n"
    "  lse = f32[64] log(se)\n"
    "  bl = f32[64,300] broadcast(lse), dimensions={0}\n"
    "  ls = f32[64,300] subtract(s, bl)\n"
    "  g = f32[64,1] gather(ls, l), offset_dims={}, collapsed_slice_dims={1}, "
    "start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, "
    "index_vector_dim=2, slice_sizes={1,1}\n"
    "  ROOT t = (f32[64,1], f32[64]) tuple(g, se)\n"
    "}\n";

static const char *k_gather_win =
    "HloModule gather_win_native\n"
    "ENTRY main {\n"
    "  x = f32[40,33] parameter(0)\n"
    "  i = s32[9,2] parameter(1)\n"
    "  w = f32[] parameter(2)\n"
    "  bw = f32[40,33] broadcast(w), dimensions={}\n"
    "  y = f32[40,33] multiply(x, bw)\n"
    "  t = f32[40,33] tanh(y)\n"
    "  ROOT g = f32[9,3,5] gather(t, i), offset_dims={1,2}, collapsed_slice_dims={}, "
    "start_index_map={0,1}, index_vector_dim=1, slice_sizes={3,5}\n"
    "}\n";

static void test_gather_of_elementwise(void) {
    for (int v = 0; v < 2; v++) {
        const char *text = v == 0 ? k_take_along : k_gather_win;
        /* the take_along module's row max is a lone reduce: the fast reduce kernel, not native */
        for (uint64_t seed = 1; seed <= 4; seed++)
            check_module(text, seed + 40 * (uint64_t)v, v == 1);
        ot_module *m = parse(text);
        ASSERT_TRUE(m != NULL);
        ot_executable *e = NULL;
        ASSERT_OK(ot_compile(m, NULL, &e));
        const ot_computation *c = ot_module_entry(ot_executable_module(e));
        int gathers = 0;
        for (const ot_instr *i = c->first; i; i = i->next)
            if (i->opcode == OT_OP_GATHER) {
                gathers++;
                EXPECT_TRUE(i->operands[0] == c->params[0]);
            }
        EXPECT_INT_EQ(gathers, 1);
        ot_executable_free(e);
        ot_module_free(m);
    }
}

static void test_summary(void) {
    fprintf(stderr,
            "codegen: %d modules, %d outputs bit-identical (%lld NaN elements with another "
            "payload or sign); %d fusion kernels native, %d interpreted\n",
            g_stats.modules, g_stats.outputs, (long long)g_nan_bits_differ, g_stats.native_kernels,
            g_stats.interp_kernels);
    EXPECT_TRUE(g_stats.native_kernels > 60);
}

/* gcc vectorizes a loop behind run-time overlap checks between its operands where it is not
 * promised they do not overlap, and by default gives up past 10 checks, which fusions of three
 * or four outputs need: the generated kernels take their pointers as restrict parameters (the
 * promise gcc acts on), and the compile raises the cap besides. Compiled through a wrapper that
 * appends gcc's -fopt-info-vec-optimized report to a file, a module fused into multi-output loops
 * (a pred output among f32 ones, a broadcast operand) must report one vectorized loop per fusion
 * and still equal the reference bit for bit. Skipped when `cc` is not gcc (the report is gcc's). */
static void test_many_operands_vectorize(void) {
    FILE *v = popen("cc --version 2>/dev/null", "r");
    char line[256];
    bool gcc = false;
    while (v && fgets(line, sizeof line, v))
        if (strstr(line, "Free Software Foundation")) gcc = true;
    if (v) pclose(v);
    if (!gcc) {
        printf("  (skipped: cc is not gcc)\n");
        return;
    }
    char wrapper[512], report[512];
    snprintf(wrapper, sizeof wrapper, "%s/vec_cc.sh", g_cache);
    snprintf(report, sizeof report, "%s/vec_report.txt", g_cache);
    FILE *w = fopen(wrapper, "w");
    ASSERT_TRUE(w != NULL);
    fprintf(w, "#!/bin/sh\nexec cc -fopt-info-vec-optimized \"$@\" 2>>'%s'\n", report);
    fclose(w);
    ASSERT_TRUE(chmod(wrapper, 0755) == 0);
    static const char text[] =
        "HloModule many_outputs\nENTRY e {\n"
        "  x = f32[64,1024]{1,0} parameter(0)\n"
        "  y = f32[64,1024]{1,0} parameter(1)\n"
        "  b = f32[1024]{0} parameter(2)\n"
        "  bb = f32[64,1024]{1,0} broadcast(b), dimensions={1}\n"
        "  s = f32[64,1024]{1,0} add(x, bb)\n"
        "  m = f32[64,1024]{1,0} multiply(s, y)\n"
        "  c = f32[] constant(0.5)\n"
        "  cb = f32[64,1024]{1,0} broadcast(c), dimensions={}\n"
        "  p = pred[64,1024]{1,0} compare(s, cb), direction=LT\n"
        "  t = f32[64,1024]{1,0} select(p, m, s)\n"
        "  n = f32[64,1024]{1,0} negate(m)\n"
        "  a = f32[64,1024]{1,0} abs(t)\n"
        "  q = f32[64,1024]{1,0} subtract(a, y)\n"
        "  ROOT r = (f32[64,1024]{1,0}, f32[64,1024]{1,0}, pred[64,1024]{1,0}, f32[64,1024]{1,0},"
        " f32[64,1024]{1,0}, f32[64,1024]{1,0}, f32[64,1024]{1,0}) tuple(s, m, p, t, n, a, q)\n}\n";
    setenv("OPTITPU_CC", wrapper, 1);
    g_keep_src = true;
    check_module(text, 91, true);
    g_keep_src = false;
    unsetenv("OPTITPU_CC");
    /* the kernels: count them and their widest output list */
    int kernels = 0, most_outputs = 0;
    for (const char *k = g_src ? strstr(g_src, "/* fusion.") : NULL; k;
         k = strstr(k + 1, "/* fusion.")) {
        kernels++;
        const char *end = strstr(k, ") {\n"); /* the end of the kernel's parameters */
        int outs = 0;
        for (char name[32];; outs++) {
            snprintf(name, sizeof name, "*restrict o%d,", outs);
            const char *o = strstr(k, name);
            if (!o || (end && o > end)) break;
        }
        if (outs > most_outputs) most_outputs = outs;
    }
    EXPECT_TRUE(kernels >= 1);
    EXPECT_TRUE(most_outputs >= 3);
    int vectorized = 0;
    FILE *r = fopen(report, "r");
    ASSERT_TRUE(r != NULL);
    while (fgets(line, sizeof line, r))
        if (strstr(line, "optimized: loop vectorized")) vectorized++;
    fclose(r);
    if (vectorized < kernels)
        fprintf(stderr, "%d of %d loops vectorized (gcc's report: %s); the source:\n%s\n",
                vectorized, kernels, report, g_src ? g_src : "(none)");
    EXPECT_INT_EQ(vectorized, kernels);
    /* jnp.where / clip / sign chains: values flushed at several uses (compare operands, maximum
     * and minimum), where a flush written as `cond ? mask : 0` let gcc thread jumps into the
     * loop body and leave it scalar; one fusion, one vectorized loop */
    static const char chain[] =
        "HloModule where_chain\nENTRY e {\n"
        "  x = f32[200,1001]{1,0} parameter(0)\n"
        "  y = f32[200,1001]{1,0} parameter(1)\n"
        "  gt = pred[200,1001]{1,0} compare(x, y), direction=GT\n"
        "  lo = f32[] constant(-1.5)\n  lob = f32[200,1001]{1,0} broadcast(lo), dimensions={}\n"
        "  hi = f32[] constant(2.5)\n  hib = f32[200,1001]{1,0} broadcast(hi), dimensions={}\n"
        "  c0 = f32[200,1001]{1,0} maximum(lob, x)\n" /* jnp.clip */
        "  cl = f32[200,1001]{1,0} minimum(hib, c0)\n"
        "  m = f32[200,1001]{1,0} multiply(cl, y)\n"
        "  one = f32[] constant(1)\n  ob = f32[200,1001]{1,0} broadcast(one), dimensions={}\n"
        "  g1 = pred[200,1001]{1,0} compare(y, ob), direction=GT\n"
        "  s = f32[200,1001]{1,0} subtract(x, y)\n"
        "  a = f32[200,1001]{1,0} abs(x)\n  a1 = f32[200,1001]{1,0} add(a, ob)\n"
        "  w1 = f32[200,1001]{1,0} select(g1, s, a1)\n"
        "  w2 = f32[200,1001]{1,0} select(gt, m, w1)\n"
        "  n = f32[200,1001]{1,0} negate(cl)\n  mx = f32[200,1001]{1,0} maximum(w2, n)\n"
        "  sg = f32[200,1001]{1,0} sign(y)\n  p = f32[200,1001]{1,0} multiply(mx, sg)\n"
        "  a2 = f32[200,1001]{1,0} abs(w2)\n  a3 = f32[200,1001]{1,0} add(a2, ob)\n"
        "  ROOT d = f32[200,1001]{1,0} divide(p, a3)\n}\n";
    r = fopen(report, "w"); /* empty the report */
    ASSERT_TRUE(r != NULL);
    fclose(r);
    setenv("OPTITPU_CC", wrapper, 1);
    g_keep_src = true;
    check_module(chain, 92, true);
    g_keep_src = false;
    unsetenv("OPTITPU_CC");
    vectorized = 0;
    r = fopen(report, "r");
    ASSERT_TRUE(r != NULL);
    while (fgets(line, sizeof line, r))
        if (strstr(line, "optimized: loop vectorized")) vectorized++;
    fclose(r);
    if (vectorized < 1)
        fprintf(stderr,
                "the where chain's loop did not vectorize (gcc's report: %s); the "
                "source:\n%s\n",
                report, g_src ? g_src : "(none)");
    EXPECT_TRUE(vectorized >= 1);
    /* a convolution's bias + ReLU in NCHW (the bias broadcast along dim 1, rows of 28) and a
     * clamp in f64: maximum / minimum as bit blends, where the ternary chain left the loops
     * scalar; every loop vectorized, the bits the reference's (check_module) */
    static const char relu[] =
        "HloModule bias_relu\nENTRY e {\n"
        "  x = f32[4,64,28,28]{3,2,1,0} parameter(0)\n"
        "  b = f32[64]{0} parameter(1)\n"
        "  bb = f32[4,64,28,28]{3,2,1,0} broadcast(b), dimensions={1}\n"
        "  s = f32[4,64,28,28]{3,2,1,0} add(x, bb)\n"
        "  z = f32[] constant(0)\n  zb = f32[4,64,28,28]{3,2,1,0} broadcast(z), dimensions={}\n"
        "  r = f32[4,64,28,28]{3,2,1,0} maximum(s, zb)\n"
        "  y = f64[3,1000]{1,0} parameter(2)\n"
        "  lo = f64[] constant(-0.5)\n  lb = f64[3,1000]{1,0} broadcast(lo), dimensions={}\n"
        "  hi = f64[] constant(0.5)\n  hb = f64[3,1000]{1,0} broadcast(hi), dimensions={}\n"
        "  c0 = f64[3,1000]{1,0} maximum(y, lb)\n  c1 = f64[3,1000]{1,0} minimum(c0, hb)\n"
        "  ROOT t = (f32[4,64,28,28]{3,2,1,0}, f64[3,1000]{1,0}) tuple(r, c1)\n}\n";
    r = fopen(report, "w");
    ASSERT_TRUE(r != NULL);
    fclose(r);
    setenv("OPTITPU_CC", wrapper, 1);
    g_keep_src = true;
    check_module(relu, 93, true);
    g_keep_src = false;
    unsetenv("OPTITPU_CC");
    kernels = 0;
    for (const char *k = g_src ? strstr(g_src, "/* fusion.") : NULL; k;
         k = strstr(k + 1, "/* fusion."))
        kernels++;
    vectorized = 0;
    r = fopen(report, "r");
    ASSERT_TRUE(r != NULL);
    while (fgets(line, sizeof line, r))
        if (strstr(line, "optimized: loop vectorized")) vectorized++;
    fclose(r);
    if (vectorized < kernels)
        fprintf(stderr,
                "bias + ReLU: %d of %d loops vectorized (gcc's report: %s); the "
                "source:\n%s\n",
                vectorized, kernels, report, g_src ? g_src : "(none)");
    EXPECT_TRUE(kernels >= 1);
    EXPECT_TRUE(vectorized >= kernels);
}

/* floor, ceil, round-nearest-afz and round-nearest-even beside a sine (jax's lgamma and digamma:
 * sin(pi * (x - floor(x))) for the reflection), f32 and f64, on rounding's hard cases (halfway
 * values, 2^23 / 2^52 and their neighbours, NaNs, infinities, subnormals, any bits): bit for bit
 * the reference's at 1, 2, 3 and 8 threads, and every loop vectorized (gcc keeps a loop holding
 * floor scalar under trapping math: the f64 lgamma fusion of 512K elements ran 195 ms instead
 * of 18). */
static void test_rounding_vectorize(void) {
    FILE *v = popen("cc --version 2>/dev/null", "r");
    char line[256];
    bool gcc = false;
    while (v && fgets(line, sizeof line, v))
        if (strstr(line, "Free Software Foundation")) gcc = true;
    if (v) pclose(v);
    char wrapper[512], report[512];
    snprintf(wrapper, sizeof wrapper, "%s/vec_round_cc.sh", g_cache);
    snprintf(report, sizeof report, "%s/vec_round_report.txt", g_cache);
    FILE *w = fopen(wrapper, "w");
    ASSERT_TRUE(w != NULL);
    fprintf(w, "#!/bin/sh\nexec cc -fopt-info-vec-optimized \"$@\" 2>>'%s'\n", report);
    fclose(w);
    ASSERT_TRUE(chmod(wrapper, 0755) == 0);
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    static const char *const types[] = {"f32", "f64"};
    for (int ty = 0; ty < 2; ty++) {
        const char *T = types[ty];
        char text[2048];
        snprintf(text, sizeof text,
                 "HloModule rounding\nENTRY e {\n  x = %s[5,13001]{1,0} parameter(0)\n"
                 "  fl = %s[5,13001]{1,0} floor(x)\n  ce = %s[5,13001]{1,0} ceil(x)\n"
                 "  ra = %s[5,13001]{1,0} round-nearest-afz(x)\n"
                 "  re = %s[5,13001]{1,0} round-nearest-even(x)\n"
                 "  fr = %s[5,13001]{1,0} subtract(x, fl)\n  pi = %s[] constant(3.14159265)\n"
                 "  pb = %s[5,13001]{1,0} broadcast(pi), dimensions={}\n"
                 "  a = %s[5,13001]{1,0} multiply(fr, pb)\n  s = %s[5,13001]{1,0} sine(a)\n"
                 "  ROOT t = (%s[5,13001]{1,0}, %s[5,13001]{1,0}, %s[5,13001]{1,0}, "
                 "%s[5,13001]{1,0}, %s[5,13001]{1,0}) tuple(fl, ce, ra, re, s)\n}\n",
                 T, T, T, T, T, T, T, T, T, T, T, T, T, T, T);
        FILE *r = fopen(report, "w"); /* empty the report */
        ASSERT_TRUE(r != NULL);
        fclose(r);
        for (int t = 0; t < 4; t++) {
            g_run_pool = pools[t];
            g_round = true;
            g_keep_src = t == 0;
            if (t == 0 && gcc) setenv("OPTITPU_CC", wrapper, 1);
            check_module(text, 3100 + (uint64_t)ty, true);
            unsetenv("OPTITPU_CC");
            g_keep_src = false;
            g_round = false;
        }
        g_run_pool = NULL;
        if (!gcc) continue;
        int kernels = 0, vectorized = 0;
        for (const char *k = g_src ? strstr(g_src, "/* fusion.") : NULL; k;
             k = strstr(k + 1, "/* fusion."))
            kernels++;
        r = fopen(report, "r");
        ASSERT_TRUE(r != NULL);
        while (fgets(line, sizeof line, r))
            if (strstr(line, "optimized: loop vectorized")) vectorized++;
        fclose(r);
        if (vectorized < kernels)
            fprintf(stderr, "%s rounding: %d of %d loops vectorized (gcc's report: %s)\n", T,
                    vectorized, kernels, report);
        EXPECT_TRUE(kernels >= 1);
        EXPECT_TRUE(vectorized >= kernels);
    }
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
    if (!gcc) printf("  (vectorization not checked: cc is not gcc)\n");
}

/* f64 transcendentals in generated code, whose results are flushed in software only where they
 * can be subnormal (exp: from x = -708.4 down; not tanh, erf, log, log1p, expm1 or cbrt of a
 * flushed operand): on values next to the smallest normal number and subnormals (g_tiny), and
 * exp on x in [-722, 722] (about 1 % of its results subnormal), bit for bit the reference's at
 * 1, 2, 3 and 8 threads. */
static void test_f64_result_flush(void) {
    static const char tiny[] =
        "HloModule f64tiny\nENTRY e {\n  x = f64[4,9001]{1,0} parameter(0)\n"
        "  a = f64[4,9001]{1,0} tanh(x)\n  b = f64[4,9001]{1,0} erf(x)\n"
        "  ax = f64[4,9001]{1,0} abs(x)\n  c = f64[4,9001]{1,0} log(ax)\n"
        "  d = f64[4,9001]{1,0} log-plus-one(x)\n  f = f64[4,9001]{1,0} exponential-minus-one(x)\n"
        "  g = f64[4,9001]{1,0} cbrt(x)\n  h = f64[4,9001]{1,0} exponential(x)\n"
        "  ROOT t = (f64[4,9001]{1,0}, f64[4,9001]{1,0}, f64[4,9001]{1,0}, f64[4,9001]{1,0}, "
        "f64[4,9001]{1,0}, f64[4,9001]{1,0}, f64[4,9001]{1,0}) tuple(a, b, c, d, f, g, h)\n}\n";
    static const char wide[] =
        "HloModule f64exp\nENTRY e {\n  x = f64[4,9001]{1,0} parameter(0)\n"
        "  k = f64[] constant(72)\n  kb = f64[4,9001]{1,0} broadcast(k), dimensions={}\n"
        "  y = f64[4,9001]{1,0} multiply(x, kb)\n  h = f64[4,9001]{1,0} exponential(y)\n"
        "  a = f64[4,9001]{1,0} tanh(y)\n  c = f64[4,9001]{1,0} log-plus-one(h)\n"
        "  d = f64[4,9001]{1,0} exponential-minus-one(y)\n"
        "  ROOT t = (f64[4,9001]{1,0}, f64[4,9001]{1,0}, f64[4,9001]{1,0}, f64[4,9001]{1,0}) "
        "tuple(h, a, c, d)\n}\n";
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    for (int t = 0; t < 4; t++) {
        g_run_pool = pools[t];
        g_tiny = true;
        check_module(tiny, 3200, true);
        g_tiny = false;
        check_module(wide, 3201, true);
    }
    g_run_pool = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
}

/* Interior padding along the last dim (lax.associative_scan's down-sweep: the scanned odd
 * elements and the even ones interleaved by two pads and an add; the gradient of a strided
 * slice): the column loop runs by whole periods of the pads' strides with each residue's body
 * a copy (emit.c, col_period), columns past the last period after; in one flat loop over a
 * single row likewise, with the elements before the first whole period of each piece first.
 * Shapes: strides 2, 3, 4 and 2 with 3 in one fusion (period 6), rows that are whole periods
 * and rows that are not, f32 and f64, enough elements to split over threads; the reference's
 * bits at 1, 2, 3 and 8 threads,
 * and (with gcc) the interleaving loop vectorized. */
static void ipad_module(char *out, size_t cap, const char *T, int R, int N, int in, int crop,
                        int N2, int in2) {
    /* p0 reads exp then log1p of x at col / s (s = in + 1), p1 reads y one column later; the
     * crop makes the row length no multiple of the period */
    int W = N * (in + 1) - crop;
    size_t n = (size_t)snprintf(
        out, cap,
        "HloModule ipad\nENTRY e {\n  x = %s[%d,%d] parameter(0)\n  y = %s[%d,%d] parameter(1)\n"
        "  z = %s[] constant(0)\n  ex = %s[%d,%d] exponential(x)\n"
        "  l = %s[%d,%d] log-plus-one(ex)\n"
        "  p0 = %s[%d,%d] pad(l, z), padding=0_0x0_%d_%d\n"
        "  p1 = %s[%d,%d] pad(y, z), padding=0_0x1_%d_%d\n  a = %s[%d,%d] add(p0, p1)\n",
        T, R, N, T, R, N, T, T, R, N, T, R, N, T, R, W, in - crop, in, T, R, W, in - 1 - crop, in,
        T, R, W);
    if (N2 > 0) { /* a third pad of another stride (in2 + 1) into the same row length */
        n += (size_t)snprintf(out + n, cap - n,
                              "  w = %s[%d,%d] parameter(2)\n"
                              "  p2 = %s[%d,%d] pad(w, z), padding=0_0x0_%d_%d\n"
                              "  ROOT b = %s[%d,%d] multiply(a, p2)\n}\n",
                              T, R, N2, T, R, W, W - (N2 + (N2 - 1) * in2), in2, T, R, W);
    } else {
        snprintf(out + n, cap - n, "  ROOT r = (%s[%d,%d]) tuple(a)\n}\n", T, R, W);
    }
}

static void test_interior_pad_period(void) {
    static const struct {
        const char *T;
        int R, N, in, crop, N2, in2;
    } cases[] = {
        {"f32", 64, 512, 1, 0, 0, 0}, /* 64 x 1024: split over threads */
        {"f32", 5, 37, 1, 1, 0, 0},   /* rows of 73: a column past the periods */
        {"f32", 6, 21, 2, 0, 0, 0},   /* stride 3 */
        {"f32", 9, 40, 2, 2, 0, 0},   /* stride 3, rows of 118 */
        {"f32", 7, 30, 1, 0, 20, 2},  /* strides 2 and 3: period 6, rows of 60 */
        {"f64", 4, 100, 1, 0, 0, 0},
        {"f64", 3, 33, 3, 3, 0, 0}, /* stride 4, rows of 129 */
        /* one row: the flat loop, its pieces' bounds no multiples of the period */
        {"f32", 1, 20000, 2, 1, 0, 0}, /* stride 3, 59999 elements: two pieces */
        {"f32", 1, 5000, 1, 1, 0, 0},
        {"f64", 1, 3000, 1, 0, 1500, 3}, /* strides 2 and 4 */
    };
    static const int threads[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {NULL};
    for (int t = 0; t < 4; t++) ASSERT_OK(ot_threadpool_create(threads[t], &pools[t]));
    char text[2048];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ipad_module(text, sizeof text, cases[c].T, cases[c].R, cases[c].N, cases[c].in,
                    cases[c].crop, cases[c].N2, cases[c].in2);
        for (int t = 0; t < 4; t++) {
            g_run_pool = pools[t];
            g_keep_src = t == 0;
            check_module(text, 2400 + c, true);
            g_keep_src = false;
            /* the periods' loop was generated */
            if (t == 0) EXPECT_TRUE(g_src && strstr(g_src, "cq * ") != NULL);
            free(g_src);
            g_src = NULL;
        }
    }
    g_run_pool = NULL;
    for (int t = 0; t < 4; t++) ot_threadpool_free(pools[t]);
    /* with gcc: the interleaving loop of the first case vectorizes (it did not per column) */
    FILE *v = popen("cc --version 2>/dev/null", "r");
    char line[256];
    bool gcc = false;
    while (v && fgets(line, sizeof line, v))
        if (strstr(line, "Free Software Foundation")) gcc = true;
    if (v) pclose(v);
    if (!gcc) {
        printf("  (vectorization not checked: cc is not gcc)\n");
        return;
    }
    char wrapper[512], report[512];
    snprintf(wrapper, sizeof wrapper, "%s/ipad_cc.sh", g_cache);
    snprintf(report, sizeof report, "%s/ipad_report.txt", g_cache);
    FILE *w = fopen(wrapper, "w");
    ASSERT_TRUE(w != NULL);
    fprintf(w, "#!/bin/sh\nexec cc -fopt-info-vec-optimized \"$@\" 2>>'%s'\n", report);
    fclose(w);
    ASSERT_TRUE(chmod(wrapper, 0755) == 0);
    ipad_module(text, sizeof text, "f32", 16, 600, 1, 0, 0, 0); /* not cached yet */
    setenv("OPTITPU_CC", wrapper, 1);
    check_module(text, 2450, true);
    unsetenv("OPTITPU_CC");
    int vectorized = 0;
    FILE *r = fopen(report, "r");
    ASSERT_TRUE(r != NULL);
    while (fgets(line, sizeof line, r))
        if (strstr(line, "optimized: loop vectorized")) vectorized++;
    fclose(r);
    if (vectorized < 1) fprintf(stderr, "the interleaving loop did not vectorize (%s)\n", report);
    EXPECT_TRUE(vectorized >= 1);
}

static void cleanup_cache(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_cache);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_cache);
}

int main(int argc, char **argv) {
    snprintf(g_cache, sizeof g_cache, "/tmp/ot_codegen_XXXXXX");
    if (!mkdtemp(g_cache)) {
        perror("mkdtemp");
        return 1;
    }
    setenv("OPTITPU_CACHE_DIR", g_cache, 1);
    setenv("OPTITPU_CODEGEN_MIN_ELEMENTS", "0", 1);
    static const ot_test_case tests[] = {
        OT_TEST(test_every_op),
        OT_TEST(test_converts),
        OT_TEST(test_random_fusions),
        OT_TEST(test_remap_fusions),
        OT_TEST(test_dynamic_slice_fusions),
        OT_TEST(test_gather_fusions),
        OT_TEST(test_update_before_operand),
        OT_TEST(test_remap_stencil),
        OT_TEST(test_interior_pad_period),
        OT_TEST(test_remap_row_sums),
        OT_TEST(test_broadcast_ranks),
        OT_TEST(test_rounds_chain),
        OT_TEST(test_reduce_of_no_elements),
        OT_TEST(test_reductions),
        OT_TEST(test_reduce_outputs),
        OT_TEST(test_reduce_cols_pieces),
        OT_TEST(test_reduce_runs),
        OT_TEST(test_reduce_blocks),
        OT_TEST(test_loss_beside_outputs),
        OT_TEST(test_loss_constant_shared),
        OT_TEST(test_reduce_row_broadcast),
        OT_TEST(test_index_digits),
        OT_TEST(test_reduce_walk),
        OT_TEST(test_sibling_reduces),
        OT_TEST(test_cache),
        OT_TEST(test_fallbacks),
        OT_TEST(test_fault_injection),
        OT_TEST(test_native_option),
        OT_TEST(test_hw_ftz),
        OT_TEST(test_f16_converts),
        OT_TEST(test_f16_keyed_minmax),
        OT_TEST(test_hw_minmax),
        OT_TEST(test_hw_convert_round),
        OT_TEST(test_image_pipeline),
        OT_TEST(test_hw_ftz_tanh_logistic),
        OT_TEST(test_hw_ftz_erf),
        OT_TEST(test_vmath_sleef),
        OT_TEST(test_powd_native),
        OT_TEST(test_gather_of_elementwise),
        OT_TEST(test_row_fusion),
        OT_TEST(test_l2_norm_grad_rows),
        OT_TEST(test_norm_rows),
        OT_TEST(test_softmax_rows),
        OT_TEST(test_softmax_log_softmax_regions),
        OT_TEST(test_lanes_narrow),
        OT_TEST(test_squeezed_slices),
        OT_TEST(test_walk_middle_broadcast),
        OT_TEST(test_summary),
        OT_TEST(test_small_beside_large),
        OT_TEST(test_tier_up),
        OT_TEST(test_tier_up_now),
        OT_TEST(test_narrow_shift_right_logical),
        OT_TEST(test_int_divide_remainder),
        OT_TEST(test_int_ops_native),
        OT_TEST(test_bitcast_reduce_precision),
        OT_TEST(test_total_order_compare),
        OT_TEST(test_units),
        OT_TEST(test_libm_not_folded),
        OT_TEST(test_many_operands_vectorize),
        OT_TEST(test_rounding_vectorize),
        OT_TEST(test_f64_result_flush),
    };
    int rc = ot_test_main(argc, argv, tests, sizeof tests / sizeof tests[0]);
    cleanup_cache();
    return rc;
}
