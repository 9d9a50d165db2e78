/* Complex numbers and the fft instruction: every fft type against a naive DFT in double (1-D over
 * many lengths, prime and odd included; 2-D and 3-D), the pooled fft bit-identical to the
 * reference on 1, 2, 3 and 8 threads, the complex elementwise ops, reduce and dot against double
 * arithmetic, compiled programs equal to the evaluator, and what is refused. */
#include "optitpu/autodiff.h"
#include "optitpu/compiler.h"
#include "optitpu/exec.h"
#include "optitpu/ir.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#include "exec/fast_internal.h"

#include <complex.h>
#include <pthread.h>
#undef I

static uint64_t g_rng = 0x5eed;

static double rnd(void) { /* uniform [-1, 1) */
    return (double)(ot_test_splitmix64(&g_rng) >> 11) / 4503599627370496.0 - 1.0;
}

static ot_module *parse(const char *text) {
    ot_module *m = NULL;
    ot_hlo_parse_options po = ot_hlo_parse_options_default();
    if (ot_hlo_parse(text, strlen(text), &po, &m) != OT_OK) {
        fprintf(stderr, "parse: %s\n%s", ot_last_error(), text);
        return NULL;
    }
    return m;
}

/* A random array of shape text s ("c64[3,8]"), and its values in double (complex). */
static ot_value rand_value(const ot_shape *s, double complex *d) {
    ot_value v;
    ot_value_alloc_array(&v, s);
    int64_t n = ot_shape_numel_unchecked(s);
    for (int64_t e = 0; e < n; e++) {
        float re = (float)rnd(), im = ot_dtype_is_complex(s->dtype) ? (float)rnd() : 0.0f;
        if (s->dtype == OT_C64) {
            ((float *)v.array.data)[2 * e] = re;
            ((float *)v.array.data)[2 * e + 1] = im;
        } else if (s->dtype == OT_F32) {
            ((float *)v.array.data)[e] = re;
        } else if (s->dtype == OT_F64) {
            ((double *)v.array.data)[e] = re;
        } else { /* c128 */
            ((double *)v.array.data)[2 * e] = re;
            ((double *)v.array.data)[2 * e + 1] = im;
        }
        d[e] = re + im * _Complex_I;
    }
    return v;
}

static double complex elem(const ot_value *v, int64_t e) {
    switch (v->array.shape.dtype) {
    case OT_C64:
        return ((float *)v->array.data)[2 * e] + ((float *)v->array.data)[2 * e + 1] * _Complex_I;
    case OT_C128:
        return ((double *)v->array.data)[2 * e] + ((double *)v->array.data)[2 * e + 1] * _Complex_I;
    case OT_F32: return ((float *)v->array.data)[e];
    default: return ((double *)v->array.data)[e];
    }
}

/* Naive DFT along axis a of a row-major complex array (dims, rank), in place; sign -1 forward. */
static void dft_axis(double complex *x, const int64_t *dims, int rank, int a, int sign) {
    int64_t n = dims[a], s = 1, total = 1;
    for (int d = a + 1; d < rank; d++) s *= dims[d];
    for (int d = 0; d < rank; d++) total *= dims[d];
    double complex *line = malloc((size_t)n * sizeof *line);
    for (int64_t l = 0; l < total / n; l++) {
        int64_t base = (l / s) * n * s + l % s;
        for (int64_t k = 0; k < n; k++) {
            double complex acc = 0;
            for (int64_t t = 0; t < n; t++)
                acc += x[base + t * s] *
                       cexp(sign * 2.0 * M_PI * _Complex_I * (double)((k * t) % n) / (double)n);
            line[k] = acc;
        }
        for (int64_t k = 0; k < n; k++) x[base + k * s] = line[k];
    }
    free(line);
}

/* The expected result of fft(type, fft_length) on x (complex values of the operand, dims). */
static double complex *naive_fft(int type, const double complex *x, const int64_t *xd, int rank,
                                 const int64_t *len, int k, int64_t *od) {
    int64_t n = 1, last = len[k - 1];
    memcpy(od, xd, (size_t)rank * sizeof *od);
    /* work on the full (Hermitian-extended for IRFFT) complex array */
    int64_t wd[8];
    memcpy(wd, xd, (size_t)rank * sizeof *wd);
    if (type == OT_FFT_IRFFT) wd[rank - 1] = last;
    for (int d = 0; d < rank; d++) n *= wd[d];
    double complex *w = calloc((size_t)n, sizeof *w);
    int64_t rows = n / wd[rank - 1];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < xd[rank - 1]; q++)
            w[r * wd[rank - 1] + q] = x[r * xd[rank - 1] + q];
    int sign = type == OT_FFT_IFFT || type == OT_FFT_IRFFT ? 1 : -1;
    if (type == OT_FFT_IRFFT) {
        /* the outer axes first; then the last axis from its n/2+1 terms, as a Hermitian line */
        for (int a = rank - 2; a >= rank - k; a--) dft_axis(w, wd, rank, a, sign);
        int64_t m = last / 2 + 1;
        for (int64_t r = 0; r < rows; r++) {
            double complex *p = w + r * last;
            p[0] = creal(p[0]);
            if (last % 2 == 0) p[last / 2] = creal(p[last / 2]);
            for (int64_t q = 1; q < m && last - q >= m; q++) p[last - q] = conj(p[q]);
            for (int64_t q = 1; q < m && last - q < m && last - q != q; q++) (void)0;
        }
        dft_axis(w, wd, rank, rank - 1, sign);
    } else {
        for (int a = rank - 1; a >= rank - k; a--) dft_axis(w, wd, rank, a, sign);
    }
    int64_t count = 1;
    for (int q = 0; q < k; q++) count *= len[q];
    if (sign > 0)
        for (int64_t e = 0; e < n; e++) w[e] /= (double)count;
    if (type == OT_FFT_RFFT) { /* keep the first n/2+1 of the last axis */
        int64_t m = last / 2 + 1;
        od[rank - 1] = m;
        double complex *o = malloc((size_t)(rows * m) * sizeof *o);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t q = 0; q < m; q++) o[r * m + q] = w[r * last + q];
        free(w);
        return o;
    }
    od[rank - 1] = wd[rank - 1];
    return w;
}

static const char *type_name(int t) {
    static const char *n[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
    return n[t];
}

static void dims_text(char *b, size_t cap, const int64_t *d, int rank) {
    size_t o = 0;
    for (int q = 0; q < rank; q++)
        o += (size_t)snprintf(b + o, cap - o, "%s%lld", q ? "," : "", (long long)d[q]);
}

/* Runs fft(type) on a random operand of dims xd against the naive DFT; returns the max error
 * relative to the bound. */
static void check_fft(int type, const int64_t *xd, int rank, const int64_t *len, int k) {
    char in_dims[96], out_dims[96], lens[64], text[512];
    int64_t od[8];
    memcpy(od, xd, (size_t)rank * sizeof *od);
    if (type == OT_FFT_RFFT) od[rank - 1] = len[k - 1] / 2 + 1;
    if (type == OT_FFT_IRFFT) od[rank - 1] = len[k - 1];
    dims_text(in_dims, sizeof in_dims, xd, rank);
    dims_text(out_dims, sizeof out_dims, od, rank);
    dims_text(lens, sizeof lens, len, k);
    snprintf(text, sizeof text,
             "HloModule m\nENTRY e {\n  x = %s[%s] parameter(0)\n  ROOT y = %s[%s] fft(x), "
             "fft_type=%s, fft_length={%s}\n}\n",
             type == OT_FFT_RFFT ? "f32" : "c64", in_dims, type == OT_FFT_IRFFT ? "f32" : "c64",
             out_dims, type_name(type), lens);
    ot_module *m = parse(text);
    ASSERT_TRUE(m != NULL);
    ot_shape xs;
    ot_shape_make(&xs, type == OT_FFT_RFFT ? OT_F32 : OT_C64, rank, xd);
    int64_t n = ot_shape_numel_unchecked(&xs);
    double complex *xv = malloc((size_t)n * sizeof *xv);
    ot_value a = rand_value(&xs, xv);
    ot_value r;
    EXPECT_OK(ot_evaluate(m, &a, 1, NULL, &r));
    int64_t ed[8];
    double complex *want = naive_fft(type, xv, xd, rank, len, k, ed);
    int64_t count = 1;
    for (int q = 0; q < k; q++) count *= len[q];
    /* |error| <= c * u * log2(N) * (sum |x|) for the forward transform; inverse over N */
    double bound = 2e-7 * (2.0 + log2((double)count)) * (double)count * 4.0;
    if (type == OT_FFT_IFFT || type == OT_FFT_IRFFT) bound /= (double)count;
    double worst = 0;
    int64_t on = ot_shape_numel_unchecked(&r.array.shape);
    for (int64_t e = 0; e < on; e++) {
        double err = cabs(elem(&r, e) - want[e]);
        if (err > worst) worst = err;
    }
    if (!(worst <= bound))
        fprintf(stderr, "  %s [%s] fft_length={%s}: error %g above %g\n", type_name(type), in_dims,
                lens, worst, bound);
    EXPECT_TRUE(worst <= bound);
    free(want);
    free(xv);
    ot_value_release(&r);
    ot_value_release(&a);
    ot_module_free(m);
}

static void test_fft_1d_against_naive_dft(void) {
    static const int64_t lens[] = {1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 31, 64, 100, 128, 243};
    for (int type = 0; type < 4; type++)
        for (size_t q = 0; q < sizeof lens / sizeof lens[0]; q++) {
            int64_t L = lens[q];
            int64_t xd[2] = {3, type == OT_FFT_IRFFT ? L / 2 + 1 : L};
            check_fft(type, xd, 2, &L, 1);
        }
}

static void test_fft_2d_3d_against_naive_dft(void) {
    for (int type = 0; type < 4; type++) {
        int64_t l2[2] = {4, 6}, l3[3] = {3, 5, 7}, l2o[2] = {6, 9};
        int64_t last = type == OT_FFT_IRFFT;
        int64_t x2[3] = {2, 4, last ? 4 : 6};
        check_fft(type, x2, 3, l2, 2);
        int64_t x3[4] = {2, 3, 5, last ? 4 : 7};
        check_fft(type, x3, 4, l3, 3);
        int64_t x2o[2] = {6, last ? 5 : 9}; /* no batch, odd last length */
        check_fft(type, x2o, 2, l2o, 2);
    }
}

/* ---- accuracy over many lengths in both precisions, against a long double reference ---- */

typedef long double complex ldc;
#define PI_L 3.141592653589793238462643383279502884L

static ldc root_l(int64_t k, int64_t n, int sign) {
    long double a = (long double)sign * 2.0L * PI_L * (long double)k / (long double)n;
    return cosl(a) + sinl(a) * _Complex_I;
}

/* y = the DFT of x (n values) in long double; sign -1 forward, unscaled. Powers of two by an
 * iterative radix-2 transform, other lengths directly from a table of roots. */
static void ref_dft(const ldc *x, ldc *y, int64_t n, int sign) {
    if (n >= 512 && (n & (n - 1)) == 0) {
        int lg = 0;
        while (((int64_t)1 << lg) < n) lg++;
        for (int64_t q = 0; q < n; q++) {
            int64_t r = 0;
            for (int b = 0; b < lg; b++) r |= ((q >> b) & 1) << (lg - 1 - b);
            y[r] = x[q];
        }
        for (int64_t len = 2; len <= n; len *= 2)
            for (int64_t k = 0; k < len / 2; k++) {
                ldc w = root_l(k, len, sign);
                for (int64_t q = 0; q < n; q += len) {
                    ldc u = y[q + k], v = y[q + k + len / 2] * w;
                    y[q + k] = u + v;
                    y[q + k + len / 2] = u - v;
                }
            }
        return;
    }
    ldc *rt = malloc((size_t)n * sizeof *rt);
    for (int64_t k = 0; k < n; k++) rt[k] = root_l(k, n, sign);
    for (int64_t k = 0; k < n; k++) {
        ldc acc = 0;
        for (int64_t t = 0, r = 0; t < n; t++, r = r + k >= n ? r + k - n : r + k)
            acc += x[t] * rt[r];
        y[k] = acc;
    }
    free(rt);
}

/* fft(type) of `lines` random lines of fft_length n in f32/c64 or f64/c128 (dbl) through the
 * evaluator, against ref_dft: the relative L2 error (over all the values) and the max error
 * relative to the largest reference value. */
static void fft_errors(bool dbl, int type, int64_t n, int64_t lines, double *l2, double *mx) {
    const char *ct = dbl ? "c128" : "c64", *rt = dbl ? "f64" : "f32";
    int64_t m = n / 2 + 1;
    int64_t inl = type == OT_FFT_IRFFT ? m : n, outl = type == OT_FFT_RFFT ? m : n;
    char text[512];
    snprintf(text, sizeof text,
             "HloModule m\nENTRY e {\n  x = %s[%lld,%lld] parameter(0)\n  ROOT y = %s[%lld,%lld] "
             "fft(x), fft_type=%s, fft_length={%lld}\n}\n",
             type == OT_FFT_RFFT ? rt : ct, (long long)lines, (long long)inl,
             type == OT_FFT_IRFFT ? rt : ct, (long long)lines, (long long)outl, type_name(type),
             (long long)n);
    ot_module *m0 = parse(text);
    ASSERT_TRUE(m0 != NULL);
    const ot_instr *xi = ot_computation_find_instr(ot_module_entry(m0), "x");
    ot_value a;
    ASSERT_OK(ot_value_alloc_array(&a, &xi->shape.array));
    bool cin = type != OT_FFT_RFFT;
    ldc *x = malloc((size_t)(lines * inl) * sizeof *x), *xf = malloc((size_t)n * sizeof *xf),
        *yf = malloc((size_t)n * sizeof *yf);
    for (int64_t e = 0; e < lines * inl; e++) {
        double re = rnd(), im = cin ? rnd() : 0.0;
        if (dbl) {
            ((double *)a.array.data)[cin ? 2 * e : e] = re;
            if (cin) ((double *)a.array.data)[2 * e + 1] = im;
        } else {
            re = (float)re;
            im = (float)im;
            ((float *)a.array.data)[cin ? 2 * e : e] = (float)re;
            if (cin) ((float *)a.array.data)[2 * e + 1] = (float)im;
        }
        x[e] = re + im * _Complex_I;
    }
    ot_value r;
    EXPECT_OK(ot_evaluate(m0, &a, 1, NULL, &r));
    int sign = type == OT_FFT_IFFT || type == OT_FFT_IRFFT ? 1 : -1;
    long double se = 0, sr = 0, me = 0, mr = 0;
    for (int64_t l = 0; l < lines; l++) {
        const ldc *xl = x + l * inl;
        if (type == OT_FFT_IRFFT) { /* the Hermitian line; DC and Nyquist terms real */
            xf[0] = creall(xl[0]);
            for (int64_t q = 1; q < m; q++) {
                xf[q] = xl[q];
                xf[n - q] = conjl(xl[q]);
            }
            if (n % 2 == 0) xf[n / 2] = creall(xl[n / 2]);
        } else {
            memcpy(xf, xl, (size_t)n * sizeof *xf);
        }
        ref_dft(xf, yf, n, sign);
        for (int64_t q = 0; q < outl; q++) {
            ldc want = sign > 0 ? yf[q] / (long double)n : yf[q];
            if (type == OT_FFT_IRFFT) want = creall(want);
            double complex got = elem(&r, l * outl + q);
            long double d = cabsl((creal(got) + cimag(got) * _Complex_I) - want), w = cabsl(want);
            se += d * d;
            sr += w * w;
            me = d > me ? d : me;
            mr = w > mr ? w : mr;
        }
    }
    *l2 = (double)sqrtl(se / sr);
    *mx = (double)(me / mr);
    free(x);
    free(xf);
    free(yf);
    ot_value_release(&r);
    ot_value_release(&a);
    ot_module_free(m0);
}

/* Every length 1..300 (radix 2, 3, 4, 5, the generic odd radices and Bluestein for primes above
 * 127), powers of two to 2^16 and larger mixed, prime and Bluestein lengths, each type, both
 * precisions: the relative L2 error stays within a few units of rounding times log2(n), the
 * largest error within a small multiple of that. */
static void test_fft_accuracy_many_lengths(void) {
    int64_t lens[400];
    int nl = 0;
    for (int64_t n = 1; n <= 300; n++) lens[nl++] = n;
    for (int64_t n = 512; n <= 65536; n *= 2) lens[nl++] = n;
    static const int64_t more[] = {1009, 2 * 3 * 5 * 7 * 11, 4099, 3 * 1031, 6000, 127 * 16};
    for (size_t q = 0; q < sizeof more / sizeof more[0]; q++) lens[nl++] = more[q];
    for (int d = 0; d < 2; d++) {
        double eps = d ? 1.1102230246251565e-16 : 5.9604644775390625e-08;
        double worst_l2 = 0, worst_mx = 0, raw_l2 = 0, raw_mx = 0;
        int64_t at_l2 = 0, at_mx = 0;
        for (int q = 0; q < nl; q++)
            for (int type = 0; type < 4; type++) {
                int64_t n = lens[q];
                double l2 = INFINITY, mx = INFINITY, lg = n > 1 ? log2((double)n) : 1.0;
                fft_errors(d, type, n, n <= 300 ? 3 : 1, &l2, &mx);
                bool ok = l2 <= 1.0 * eps * lg && mx <= 2.0 * eps * lg;
                if (!ok)
                    fprintf(stderr, "  %s %s n=%lld: L2 error %.3g, max %.3g (eps log2 n %.3g)\n",
                            d ? "f64" : "f32", type_name(type), (long long)n, l2, mx, eps * lg);
                EXPECT_TRUE(ok);
                if (l2 / (eps * lg) > worst_l2) worst_l2 = l2 / (eps * lg), at_l2 = n;
                if (mx / (eps * lg) > worst_mx) worst_mx = mx / (eps * lg), at_mx = n;
                raw_l2 = l2 > raw_l2 ? l2 : raw_l2;
                raw_mx = mx > raw_mx ? mx : raw_mx;
            }
        fprintf(stderr,
                "  %s: worst L2 error %.3f eps log2 n (n=%lld), worst max error %.3f eps "
                "log2 n (n=%lld); largest L2 error %.3g, max error %.3g\n",
                d ? "f64" : "f32", worst_l2, (long long)at_l2, worst_mx, (long long)at_mx, raw_l2,
                raw_mx);
    }
}

/* A line's bits do not depend on the lines transformed beside it (its lane, its group, the
 * padding of a short group): each line of a batch equals the same line transformed alone, for
 * every type, both precisions, along the last axis and along an inner one (fft2: the second
 * axis's lines are 37 apart, so groups span two batch entries). */
static void test_fft_line_bits_independent_of_batch(void) {
    static const struct {
        const char *in, *out, *type, *len;
        int64_t d1, d2; /* one entry's dims (d1 = 0: 1-D lines of d2) */
    } cases[] = {
        {"c64", "c64", "FFT", "100", 0, 100},   {"c128", "c128", "IFFT", "90", 0, 90},
        {"f32", "c64", "RFFT", "96", 0, 96},    {"f64", "c128", "RFFT", "77", 0, 77},
        {"c64", "f32", "IRFFT", "64", 0, 33},   {"c128", "f64", "IRFFT", "63", 0, 32},
        {"c64", "c64", "FFT", "24,37", 24, 37}, {"c128", "c128", "IFFT", "20,37", 20, 37},
        {"c64", "c64", "FFT", "263", 0, 263},
    };
    const int64_t B = 21;
    for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
        bool irfft = !strcmp(cases[q].type, "IRFFT"), rfft = !strcmp(cases[q].type, "RFFT");
        int64_t d2o = rfft ? cases[q].d2 / 2 + 1 : irfft ? atoll(cases[q].len) : cases[q].d2;
        char dims_in[64], dims_out[64], text[2][512];
        for (int one = 0; one < 2; one++) {
            int64_t b = one ? 1 : B;
            if (cases[q].d1) {
                snprintf(dims_in, sizeof dims_in, "%lld,%lld,%lld", (long long)b,
                         (long long)cases[q].d1, (long long)cases[q].d2);
                snprintf(dims_out, sizeof dims_out, "%lld,%lld,%lld", (long long)b,
                         (long long)cases[q].d1, (long long)d2o);
            } else {
                snprintf(dims_in, sizeof dims_in, "%lld,%lld", (long long)b,
                         (long long)cases[q].d2);
                snprintf(dims_out, sizeof dims_out, "%lld,%lld", (long long)b, (long long)d2o);
            }
            snprintf(text[one], sizeof text[one],
                     "HloModule m\nENTRY e {\n  x = %s[%s] parameter(0)\n  ROOT y = %s[%s] fft(x), "
                     "fft_type=%s, fft_length={%s}\n}\n",
                     cases[q].in, dims_in, cases[q].out, dims_out, cases[q].type, cases[q].len);
        }
        ot_module *mb = parse(text[0]), *m1 = parse(text[1]);
        ASSERT_TRUE(mb != NULL && m1 != NULL);
        const ot_instr *xb = ot_computation_find_instr(ot_module_entry(mb), "x");
        int64_t nb = ot_shape_numel_unchecked(&xb->shape.array);
        double complex *dummy = malloc((size_t)nb * sizeof *dummy);
        ot_value a = rand_value(&xb->shape.array, dummy), r;
        free(dummy);
        ASSERT_OK(ot_evaluate(mb, &a, 1, NULL, &r));
        size_t in_entry = a.array.nbytes / (size_t)B, out_entry = r.array.nbytes / (size_t)B;
        for (int64_t b = 0; b < B; b++) {
            const ot_instr *x1 = ot_computation_find_instr(ot_module_entry(m1), "x");
            ot_value a1, r1;
            ASSERT_OK(ot_value_alloc_array(&a1, &x1->shape.array));
            memcpy(a1.array.data, (char *)a.array.data + (size_t)b * in_entry, in_entry);
            ASSERT_OK(ot_evaluate(m1, &a1, 1, NULL, &r1));
            bool same =
                r1.array.nbytes == out_entry &&
                !memcmp(r1.array.data, (char *)r.array.data + (size_t)b * out_entry, out_entry);
            if (!same)
                fprintf(stderr, "  %s %s[%s] fft_length={%s}: entry %lld alone differs\n",
                        cases[q].type, cases[q].in, dims_in, cases[q].len, (long long)b);
            EXPECT_TRUE(same);
            ot_value_release(&a1);
            ot_value_release(&r1);
        }
        ot_value_release(&r);
        ot_value_release(&a);
        ot_module_free(mb);
        ot_module_free(m1);
    }
}

/* The baseline instances (plain x86-64: each 64-byte vector operation as SSE2 ones) give the
 * AVX-512 instances' bits: the same lane-wise IEEE operations, no contraction. (Both are the
 * baseline on a CPU without AVX-512.) */
static void test_fft_baseline_equals_avx512(void) {
    static const char *mods[] = {
        "HloModule m\nENTRY e {\n  x = c64[19,360] parameter(0)\n  ROOT y = c64[19,360] fft(x), "
        "fft_type=FFT, fft_length={360}\n}\n",
        "HloModule m\nENTRY e {\n  x = c128[9,263] parameter(0)\n  ROOT y = c128[9,263] "
        "fft(x), fft_type=IFFT, fft_length={263}\n}\n",
        "HloModule m\nENTRY e {\n  x = f32[17,154] parameter(0)\n  ROOT y = c64[17,78] fft(x), "
        "fft_type=RFFT, fft_length={154}\n}\n",
        "HloModule m\nENTRY e {\n  x = c128[5,24,50] parameter(0)\n  ROOT y = f64[5,24,98] "
        "fft(x), fft_type=IRFFT, fft_length={24,98}\n}\n",
        "HloModule m\nENTRY e {\n  x = c64[3,28,37] parameter(0)\n  ROOT y = c64[3,28,37] "
        "fft(x), fft_type=FFT, fft_length={28,37}\n}\n",
    };
    for (size_t q = 0; q < sizeof mods / sizeof mods[0]; q++) {
        ot_module *m = parse(mods[q]);
        ASSERT_TRUE(m != NULL);
        const ot_instr *x = ot_computation_find_instr(ot_module_entry(m), "x");
        int64_t n = ot_shape_numel_unchecked(&x->shape.array);
        double complex *dummy = malloc((size_t)n * sizeof *dummy);
        ot_value a = rand_value(&x->shape.array, dummy), r0, r1;
        free(dummy);
        ASSERT_OK(ot_evaluate(m, &a, 1, NULL, &r0));
        ex_fft_force_baseline(true);
        ot_status st = ot_evaluate(m, &a, 1, NULL, &r1);
        ex_fft_force_baseline(false);
        ASSERT_OK(st);
        bool same = r0.array.nbytes == r1.array.nbytes &&
                    !memcmp(r0.array.data, r1.array.data, r0.array.nbytes);
        if (!same) fprintf(stderr, "  module %zu: the baseline instance differs\n", q);
        EXPECT_TRUE(same);
        ot_value_release(&r0);
        ot_value_release(&r1);
        ot_value_release(&a);
        ot_module_free(m);
    }
}

/* Runs exe on nargs arguments into its nout output leaves (allocated here) with the given pool
 * (reference: the reference kernels). */
static ot_status run_exe(const ot_executable *exe, void *const *params, ot_tensor *outs,
                         ot_threadpool *pool, bool reference) {
    int nout = ot_executable_output_count(exe);
    void *op[32];
    for (int k = 0; k < nout; k++) {
        const ot_slot *sl = ot_executable_slot(exe, ot_executable_output_slot(exe, k));
        OT_CHECK(ot_tensor_alloc(&outs[k], &sl->shape));
        op[k] = outs[k].data;
    }
    int64_t an = ot_executable_arena_size(exe);
    void *arena = an ? ot_aligned_alloc(64, (size_t)an) : NULL;
    ot_run_options o = ot_run_options_default();
    o.reference_kernels = reference;
    o.pool = pool;
    ot_run_result r;
    ot_status st = ot_execute_on_host(exe, arena, params, op, &o, 0, &r);
    ot_aligned_free(arena);
    if (st != OT_OK)
        for (int k = 0; k < nout; k++) ot_tensor_release(&outs[k]);
    return st;
}

/* Large enough to split over the pool: results bit-identical on 1, 2, 3 and 8 threads and to the
 * reference kernel. */
static void test_fft_threads_deterministic(void) {
    static const char *mods[] = {
        "HloModule m\nENTRY e {\n  x = c64[96,1024] parameter(0)\n  ROOT y = c64[96,1024] "
        "fft(x), fft_type=FFT, fft_length={1024}\n}\n",
        "HloModule m\nENTRY e {\n  x = f32[64,2000] parameter(0)\n  ROOT y = c64[64,1001] "
        "fft(x), fft_type=RFFT, fft_length={2000}\n}\n",
        "HloModule m\nENTRY e {\n  x = c64[8,64,65] parameter(0)\n  ROOT y = f32[8,64,128] "
        "fft(x), fft_type=IRFFT, fft_length={64,128}\n}\n",
        "HloModule m\nENTRY e {\n  x = c64[16,48,45] parameter(0)\n  ROOT y = c64[16,48,45] "
        "fft(x), fft_type=IFFT, fft_length={16,48,45}\n}\n",
        "HloModule m\nENTRY e {\n  x = c128[40,3000] parameter(0)\n  ROOT y = c128[40,3000] "
        "fft(x), fft_type=FFT, fft_length={3000}\n}\n",
        "HloModule m\nENTRY e {\n  x = f64[37,1000] parameter(0)\n  ROOT y = c128[37,501] "
        "fft(x), fft_type=RFFT, fft_length={1000}\n}\n",
        "HloModule m\nENTRY e {\n  x = c128[6,100,52] parameter(0)\n  ROOT y = f64[6,100,102] "
        "fft(x), fft_type=IRFFT, fft_length={100,102}\n}\n",
        "HloModule m\nENTRY e {\n  x = c64[30,263] parameter(0)\n  ROOT y = c64[30,263] "
        "fft(x), fft_type=FFT, fft_length={263}\n}\n",
    };
    static const int nth[] = {1, 2, 3, 8};
    ot_threadpool *pools[4] = {0};
    for (int p = 0; p < 4; p++) ASSERT_OK(ot_threadpool_create(nth[p], &pools[p]));
    for (size_t q = 0; q < sizeof mods / sizeof mods[0]; q++) {
        ot_module *m = parse(mods[q]);
        ASSERT_TRUE(m != NULL);
        ot_executable *exe = NULL;
        ot_compile_options co = ot_compile_options_default();
        ASSERT_OK(ot_compile(m, &co, &exe));
        const ot_instr *x = ot_computation_find_instr(ot_module_entry(m), "x");
        ot_tensor arg, ref;
        ASSERT_OK(ot_tensor_alloc(&arg, &x->shape.array));
        double complex *dummy =
            malloc((size_t)ot_shape_numel_unchecked(&arg.shape) * sizeof *dummy);
        ot_value v = rand_value(&arg.shape, dummy);
        memcpy(arg.data, v.array.data, arg.nbytes);
        ot_value_release(&v);
        free(dummy);
        void *params[1] = {arg.data};
        ASSERT_OK(run_exe(exe, params, &ref, NULL, true));
        for (int p = 0; p < 4; p++) {
            ot_tensor t;
            ASSERT_OK(run_exe(exe, params, &t, pools[p], false));
            bool same = t.nbytes == ref.nbytes && !memcmp(t.data, ref.data, t.nbytes);
            if (!same)
                fprintf(stderr, "  module %zu: %d threads differ from the reference\n", q, nth[p]);
            EXPECT_TRUE(same);
            ot_tensor_release(&t);
        }
        ot_tensor_release(&ref);
        ot_tensor_release(&arg);
        ot_executable_free(exe);
        ot_module_free(m);
    }
    for (int p = 0; p < 4; p++) ot_threadpool_free(pools[p]);
}

/* Elementwise complex ops, real/imag/complex, converts, compare, select, reduce and dot, against
 * double arithmetic; the compiled program (reference kernels and the runtime's loop) equals the
 * evaluator bit for bit. */
static void test_complex_ops(void) {
    const char *text =
        "HloModule m\n"
        "add_c { a = c64[] parameter(0)\n b = c64[] parameter(1)\n ROOT s = c64[] add(a, b) }\n"
        "ENTRY e {\n"
        "  a = c64[4,3] parameter(0)\n"
        "  b = c64[4,3] parameter(1)\n"
        "  add = c64[4,3] add(a, b)\n"
        "  sub = c64[4,3] subtract(a, b)\n"
        "  mul = c64[4,3] multiply(a, b)\n"
        "  div = c64[4,3] divide(a, b)\n"
        "  neg = c64[4,3] negate(a)\n"
        "  abs = f32[4,3] abs(a)\n"
        "  exp = c64[4,3] exponential(a)\n"
        "  re = f32[4,3] real(a)\n"
        "  im = f32[4,3] imag(a)\n"
        "  cx = c64[4,3] complex(im, re)\n"
        "  eq = pred[4,3] compare(a, a), direction=EQ\n"
        "  ne = pred[4,3] compare(a, b), direction=NE\n"
        "  sel = c64[4,3] select(ne, a, b)\n"
        "  wide = c128[4,3] convert(a)\n"
        "  fromr = c64[4,3] convert(re)\n"
        "  z = c64[] constant((0, 0))\n"
        "  sum = c64[3] reduce(a, z), dimensions={0}, to_apply=add_c\n"
        "  bt = c64[3,4] transpose(b), dimensions={1,0}\n"
        "  dot = c64[4,4] dot(a, bt), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  k = c64[2] constant({(1.5, -2), (0, 0.25)})\n"
        "  ROOT t = (c64[4,3], c64[4,3], c64[4,3], c64[4,3], c64[4,3], f32[4,3], c64[4,3], "
        "f32[4,3], f32[4,3], c64[4,3], pred[4,3], pred[4,3], c64[4,3], c128[4,3], c64[4,3], "
        "c64[3], c64[4,4], c64[2]) tuple(add, sub, mul, div, neg, abs, exp, re, im, cx, eq, ne, "
        "sel, wide, fromr, sum, dot, k)\n"
        "}\n";
    ot_module *m = parse(text);
    ASSERT_TRUE(m != NULL);
    ot_shape s;
    ot_shape_make(&s, OT_C64, 2, (int64_t[]){4, 3});
    double complex av[12], bv[12];
    ot_value args[2] = {rand_value(&s, av), rand_value(&s, bv)};
    ot_value r;
    ASSERT_OK(ot_evaluate(m, args, 2, NULL, &r));
    ASSERT_TRUE(r.kind == OT_IR_TUPLE && r.ntuple == 18);
    double tol = 1e-6;
    for (int e = 0; e < 12; e++) {
        double complex a = av[e], b = bv[e];
        EXPECT_TRUE(cabs(elem(&r.tuple[0], e) - (a + b)) < tol);
        EXPECT_TRUE(cabs(elem(&r.tuple[1], e) - (a - b)) < tol);
        EXPECT_TRUE(cabs(elem(&r.tuple[2], e) - a * b) < tol);
        { /* multiply's bits: four rounded products, a rounded difference and sum (no fma) */
            float ar = (float)creal(a), ai = (float)cimag(a), br = (float)creal(b),
                  bi = (float)cimag(b);
            volatile float p = ar * br, q = ai * bi, u = ar * bi, v = ai * br;
            float wr = p - q, wi = u + v;
            const float *got = (const float *)r.tuple[2].array.data + 2 * e;
            EXPECT_TRUE(got[0] == wr && got[1] == wi);
        }
        EXPECT_TRUE(cabs(elem(&r.tuple[3], e) - a / b) < 1e-5 * (1 + cabs(a / b)));
        EXPECT_TRUE(cabs(elem(&r.tuple[4], e) + a) == 0);
        EXPECT_TRUE(fabs(creal(elem(&r.tuple[5], e)) - cabs(a)) < tol);
        EXPECT_TRUE(cabs(elem(&r.tuple[6], e) - cexp(a)) < 1e-5);
        EXPECT_TRUE(creal(elem(&r.tuple[7], e)) == creal(a));
        EXPECT_TRUE(creal(elem(&r.tuple[8], e)) == cimag(a));
        EXPECT_TRUE(elem(&r.tuple[9], e) == cimag(a) + creal(a) * _Complex_I);
        EXPECT_INT_EQ(((uint8_t *)r.tuple[10].array.data)[e], 1);
        EXPECT_INT_EQ(((uint8_t *)r.tuple[11].array.data)[e], a != b);
        EXPECT_TRUE(elem(&r.tuple[12], e) == (a != b ? a : b));
        EXPECT_TRUE(elem(&r.tuple[13], e) == a); /* c64 values are exact in c128 */
        EXPECT_TRUE(elem(&r.tuple[14], e) == creal(a));
    }
    for (int j = 0; j < 3; j++) {
        double complex want = 0;
        for (int i = 0; i < 4; i++) want += av[i * 3 + j];
        EXPECT_TRUE(cabs(elem(&r.tuple[15], j) - want) < 1e-5);
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            double complex want = 0;
            for (int q = 0; q < 3; q++) want += av[i * 3 + q] * bv[j * 3 + q];
            EXPECT_TRUE(cabs(elem(&r.tuple[16], i * 4 + j) - want) < 1e-5);
        }
    EXPECT_TRUE(elem(&r.tuple[17], 0) == 1.5 - 2.0 * _Complex_I);
    EXPECT_TRUE(elem(&r.tuple[17], 1) == 0.25 * _Complex_I);
    /* the compiled program gives the evaluator's bits (nothing complex fused or generated) */
    ot_executable *exe = NULL;
    ot_compile_options co = ot_compile_options_default();
    ASSERT_OK(ot_compile(m, &co, &exe));
    ASSERT_TRUE(ot_executable_output_count(exe) == 18);
    ot_tensor cr[18];
    void *params[2] = {args[0].array.data, args[1].array.data};
    ASSERT_OK(run_exe(exe, params, cr, NULL, false));
    for (int q = 0; q < 18; q++) {
        const ot_value *x = &r.tuple[q];
        bool same =
            x->array.nbytes == cr[q].nbytes && !memcmp(x->array.data, cr[q].data, cr[q].nbytes);
        if (!same) fprintf(stderr, "  compiled result %d differs from the evaluator\n", q);
        EXPECT_TRUE(same);
        ot_tensor_release(&cr[q]);
    }
    ot_executable_free(exe);
    ot_value_release(&r);
    for (int k = 0; k < 2; k++) ot_value_release(&args[k]);
    ot_module_free(m);
}

/* The fast kernels of complex elementwise ops and select (split over the pool), of complex sums
 * (rows, few long rows split by blocks, columns; interleaved dims on the reference) and of complex
 * movers (copies by element size: c128 is 16 bytes) give the evaluator's bits on 1, 2, 3 and 8
 * threads. */
static void test_complex_fast_kernels_equal_evaluator(void) {
    static const char *fmt =
        "HloModule m\n"
        "add_c { p = %1$s[] parameter(0)\n q = %1$s[] parameter(1)\n ROOT s = %1$s[] add(p, q) }\n"
        "ENTRY e {\n"
        "  a = %1$s[96,700] parameter(0)\n"
        "  b = %1$s[96,700] parameter(1)\n"
        "  k = %1$s[700] parameter(2)\n"
        "  kb = %1$s[96,700] broadcast(k), dimensions={1}\n"
        "  mul = %1$s[96,700] multiply(a, kb)\n"
        "  add = %1$s[96,700] add(mul, b)\n"
        "  sub = %1$s[96,700] subtract(a, b)\n"
        "  div = %1$s[96,700] divide(a, b)\n"
        "  neg = %1$s[96,700] negate(add)\n"
        "  abs = %2$s[96,700] abs(sub)\n"
        "  re = %2$s[96,700] real(div)\n"
        "  im = %2$s[96,700] imag(div)\n"
        "  cx = %1$s[96,700] complex(im, re)\n"
        "  z = %1$s[] constant((0.5, -1))\n"
        "  pad = %1$s[100,710] pad(neg, z), padding=2_2x3_7\n"
        "  sl = %1$s[48,350] slice(pad), slice={[1:97:2], [0:700:2]}\n"
        "  tr = %1$s[700,96] transpose(cx), dimensions={1,0}\n"
        "  rev = %1$s[96,700] reverse(mul), dimensions={1}\n"
        "  cat = %1$s[192,700] concatenate(rev, sub), dimensions={0}\n"
        "  zr = %2$s[] constant(0)\n"
        "  zb = %2$s[96,700] broadcast(zr), dimensions={}\n"
        "  pos = pred[96,700] compare(re, zb), direction=GT\n"
        "  sel = %1$s[96,700] select(pos, a, mul)\n"
        "  rows = %1$s[96] reduce(a, z), dimensions={1}, to_apply=add_c\n"
        "  cols = %1$s[700] reduce(a, z), dimensions={0}, to_apply=add_c\n"
        "  all = %1$s[] reduce(a, z), dimensions={0,1}, to_apply=add_c\n"
        "  flat = %1$s[67200] reshape(b)\n"
        "  fs = %1$s[66999] slice(flat), slice={[0:66999]}\n"
        "  few = %1$s[3,22333] reshape(fs)\n"
        "  fewr = %1$s[3] reduce(few, z), dimensions={1}, to_apply=add_c\n"
        "  cube = %1$s[96,70,10] reshape(b)\n"
        "  mixed = %1$s[70] reduce(cube, z), dimensions={0,2}, to_apply=add_c\n"
        "  ROOT t = (%1$s[96,700], %2$s[96,700], %1$s[48,350], %1$s[700,96], %1$s[192,700], "
        "%1$s[96,700], %1$s[96], %1$s[700], %1$s[], %1$s[3], %1$s[70]) "
        "tuple(add, abs, sl, tr, cat, sel, rows, cols, all, fewr, mixed)\n"
        "}\n";
    static const int nth[] = {1, 2, 3, 8};
    for (int d = 0; d < 2; d++) {
        char text[4096];
        snprintf(text, sizeof text, fmt, d ? "c128" : "c64", d ? "f64" : "f32");
        ot_module *m = parse(text);
        ASSERT_TRUE(m != NULL);
        ot_value args[3];
        void *params[3];
        const char *names[3] = {"a", "b", "k"};
        for (int q = 0; q < 3; q++) {
            const ot_instr *x = ot_computation_find_instr(ot_module_entry(m), names[q]);
            int64_t n = ot_shape_numel_unchecked(&x->shape.array);
            double complex *dummy = malloc((size_t)n * sizeof *dummy);
            args[q] = rand_value(&x->shape.array, dummy);
            free(dummy);
            params[q] = args[q].array.data;
        }
        ot_value r;
        ASSERT_OK(ot_evaluate(m, args, 3, NULL, &r));
        ot_executable *exe = NULL;
        ot_compile_options co = ot_compile_options_default();
        ASSERT_OK(ot_compile(m, &co, &exe));
        int nout = ot_executable_output_count(exe);
        enum { NOUT = 11 };
        ASSERT_TRUE(nout == NOUT && r.kind == OT_IR_TUPLE && r.ntuple == NOUT);
        /* the sums against double arithmetic: the rows, and the whole array */
        for (int64_t row = 0; row < 96; row++) {
            double complex want = 0.5 - 1.0 * _Complex_I;
            for (int64_t k = 0; k < 700; k++) want += elem(&args[0], row * 700 + k);
            EXPECT_TRUE(cabs(elem(&r.tuple[6], row) - want) < 1e-4);
        }
        double complex all = 0.5 - 1.0 * _Complex_I;
        for (int64_t k = 0; k < 96 * 700; k++) all += elem(&args[0], k);
        EXPECT_TRUE(cabs(elem(&r.tuple[8], 0) - all) < 1e-2);
        for (int p = 0; p < 4; p++) {
            ot_threadpool *pool = NULL;
            ASSERT_OK(ot_threadpool_create(nth[p], &pool));
            ot_tensor o[NOUT];
            ASSERT_OK(run_exe(exe, params, o, pool, false));
            for (int q = 0; q < NOUT; q++) {
                const ot_value *x = &r.tuple[q];
                bool same = x->array.nbytes == o[q].nbytes &&
                            !memcmp(x->array.data, o[q].data, o[q].nbytes);
                if (!same)
                    fprintf(stderr, "  %s, %d threads: output %d differs from the evaluator\n",
                            d ? "c128" : "c64", nth[p], q);
                EXPECT_TRUE(same);
                ot_tensor_release(&o[q]);
            }
            ot_threadpool_free(pool);
        }
        ot_executable_free(exe);
        ot_value_release(&r);
        for (int q = 0; q < 3; q++) ot_value_release(&args[q]);
        ot_module_free(m);
    }
}

/* Gather and scatter on c64 and c128 (`x[idx]`, `.at[idx].add/.set` on a complex array): the
 * evaluator clamps a gather's out-of-range start and drops a scatter's out-of-range window, adds
 * a repeated index's updates in order (the computation's complex add) or keeps the last
 * overwrite; compiled, the same bits at 1, 2, 3 and 8 threads. */
static void test_complex_gather_scatter(void) {
    static const char *fmt =
        "HloModule m\n"
        "add_c { p = %1$s[] parameter(0)\n q = %1$s[] parameter(1)\n ROOT s = %1$s[] add(p, q) }\n"
        "set_c { p = %1$s[] parameter(0)\n ROOT q = %1$s[] parameter(1) }\n"
        "ENTRY e {\n"
        "  x = %1$s[6,4] parameter(0)\n"
        "  u = %1$s[5,4] parameter(1)\n"
        "  idx = s32[5,1] constant({{1}, {5}, {1}, {9}, {-2}})\n"
        "  g = %1$s[5,4] gather(x, idx), offset_dims={1}, collapsed_slice_dims={0}, "
        "start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}\n"
        "  sa = %1$s[6,4] scatter(x, idx, u), update_window_dims={1}, inserted_window_dims={0}, "
        "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add_c\n"
        "  ss = %1$s[6,4] scatter(x, idx, u), update_window_dims={1}, inserted_window_dims={0}, "
        "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=set_c\n"
        "  ROOT t = (%1$s[5,4], %1$s[6,4], %1$s[6,4]) tuple(g, sa, ss)\n"
        "}\n";
    static const int nth[] = {1, 2, 3, 8};
    static const int rows[] = {1, 5, 1, 5, 0}; /* the gather's rows, clamped to [0, 5] */
    for (int d = 0; d < 2; d++) {
        char text[2048];
        snprintf(text, sizeof text, fmt, d ? "c128" : "c64");
        ot_module *m = parse(text);
        ASSERT_TRUE(m != NULL);
        ot_value args[2];
        void *params[2];
        const char *names[2] = {"x", "u"};
        for (int q = 0; q < 2; q++) {
            const ot_instr *xi = ot_computation_find_instr(ot_module_entry(m), names[q]);
            double complex dummy[24];
            args[q] = rand_value(&xi->shape.array, dummy);
            params[q] = args[q].array.data;
        }
        ot_value r;
        ASSERT_OK(ot_evaluate(m, args, 2, NULL, &r));
        ASSERT_TRUE(r.kind == OT_IR_TUPLE && r.ntuple == 3);
        for (int k = 0; k < 5; k++)
            for (int c = 0; c < 4; c++)
                EXPECT_TRUE(elem(&r.tuple[0], k * 4 + c) == elem(&args[0], rows[k] * 4 + c));
        for (int row = 0; row < 6; row++)
            for (int c = 0; c < 4; c++) {
                double complex x = elem(&args[0], row * 4 + c), want_add = x, want_set = x;
                if (row == 1) {
                    want_add = x + elem(&args[1], c) + elem(&args[1], 8 + c);
                    want_set = elem(&args[1], 8 + c);
                } else if (row == 5) {
                    want_add = x + elem(&args[1], 4 + c);
                    want_set = elem(&args[1], 4 + c);
                }
                EXPECT_TRUE(cabs(elem(&r.tuple[1], row * 4 + c) - want_add) < 1e-5);
                EXPECT_TRUE(elem(&r.tuple[2], row * 4 + c) == want_set);
            }
        for (int nat = 0; nat < 2; nat++) {
            ot_executable *exe = NULL;
            ot_compile_options co = ot_compile_options_default();
            co.native = nat ? OT_NATIVE_ON : OT_NATIVE_OFF;
            ASSERT_OK(ot_compile(m, &co, &exe));
            for (int p = 0; p < 4; p++) {
                ot_threadpool *pool = NULL;
                ASSERT_OK(ot_threadpool_create(nth[p], &pool));
                ot_tensor o[3];
                ASSERT_OK(run_exe(exe, params, o, pool, false));
                for (int q = 0; q < 3; q++) {
                    const ot_value *x = &r.tuple[q];
                    bool same = x->array.nbytes == o[q].nbytes &&
                                !memcmp(x->array.data, o[q].data, o[q].nbytes);
                    if (!same)
                        fprintf(stderr, "  %s, %d threads: output %d differs from the evaluator\n",
                                d ? "c128" : "c64", nth[p], q);
                    EXPECT_TRUE(same);
                    ot_tensor_release(&o[q]);
                }
                ot_threadpool_free(pool);
            }
            ot_executable_free(exe);
        }
        ot_value_release(&r);
        for (int q = 0; q < 2; q++) ot_value_release(&args[q]);
        ot_module_free(m);
    }
}

/* A real -> complex convert from a type of the output's width (s64, u64, f64 -> c64) runs in
 * place over its dying input: each element is read before it is written (zeroing the output
 * first had zeroed the input: random_ops seed 28). Against the evaluator on 1, 2, 3, 8 threads. */
static void test_complex_convert_in_place(void) {
    static const char *text = "HloModule m\n"
                              "ENTRY e {\n"
                              "  p = f32[3000] parameter(0)\n"
                              "  h = f32[] constant(100)\n"
                              "  hb = f32[3000] broadcast(h), dimensions={}\n"
                              "  x = f32[3000] multiply(p, hb)\n"
                              "  i = s64[3000] convert(x)\n"
                              "  u = u64[3000] convert(x)\n"
                              "  d = f64[3000] convert(x)\n"
                              "  ib = s64[2,3000] broadcast(i), dimensions={1}\n"
                              "  ub = u64[2,3000] broadcast(u), dimensions={1}\n"
                              "  db = f64[2,3000] broadcast(d), dimensions={1}\n"
                              "  ci = c64[2,3000] convert(ib)\n"
                              "  cu = c64[2,3000] convert(ub)\n"
                              "  cd = c64[2,3000] convert(db)\n"
                              "  ni = c64[2,3000] negate(ci)\n"
                              "  nu = c64[2,3000] negate(cu)\n"
                              "  nd = c64[2,3000] negate(cd)\n"
                              "  ROOT t = (c64[2,3000], c64[2,3000], c64[2,3000]) "
                              "tuple(ni, nu, nd)\n"
                              "}\n";
    static const int nth[] = {1, 2, 3, 8};
    ot_module *m = parse(text);
    ASSERT_TRUE(m != NULL);
    ot_shape ps;
    ot_shape_make(&ps, OT_F32, 1, (int64_t[]){3000});
    double complex *dummy = malloc(3000 * sizeof *dummy);
    ot_value arg = rand_value(&ps, dummy);
    free(dummy);
    void *params[1] = {arg.array.data};
    ot_value r;
    ASSERT_OK(ot_evaluate(m, &arg, 1, NULL, &r));
    ot_executable *exe = NULL;
    ot_compile_options co = ot_compile_options_default();
    co.opt_level = 1;  /* in-place reuse on, */
    co.passes = "dce"; /* one kernel per op: each convert to c64 a kernel over a dying temp */
    ASSERT_OK(ot_compile(m, &co, &exe));
    ASSERT_TRUE(ot_executable_output_count(exe) == 3 && r.kind == OT_IR_TUPLE && r.ntuple == 3);
    /* the values are there: -(100 p truncated) */
    EXPECT_TRUE(((const float *)r.tuple[0].array.data)[0] ==
                -(float)(int64_t)(100.0f * ((const float *)arg.array.data)[0]));
    for (int p = 0; p < 4; p++) {
        ot_threadpool *pool = NULL;
        ASSERT_OK(ot_threadpool_create(nth[p], &pool));
        ot_tensor o[3];
        ASSERT_OK(run_exe(exe, params, o, pool, false));
        for (int q = 0; q < 3; q++) {
            bool same = r.tuple[q].array.nbytes == o[q].nbytes &&
                        !memcmp(r.tuple[q].array.data, o[q].data, o[q].nbytes);
            if (!same)
                fprintf(stderr, "  %d threads: output %d differs from the evaluator\n", nth[p], q);
            EXPECT_TRUE(same);
            ot_tensor_release(&o[q]);
        }
        ot_threadpool_free(pool);
    }
    ot_executable_free(exe);
    ot_value_release(&r);
    ot_value_release(&arg);
    ot_module_free(m);
}

/* abs of c64 (the fast kernel's 8 lanes and its scalar tail, the reference): the same bits on 1,
 * 2, 3 and 8 threads; within 0.5 ulp (plus 2^-28) of the exact modulus over magnitudes whose
 * squares overflow or underflow in float; an infinite component gives inf beside a NaN; subnormal
 * components and results are flushed (the default FTZ mode). */
static void test_complex_abs_c64(void) {
    const char *text = "HloModule m\nENTRY e {\n  a = c64[1003] parameter(0)\n"
                       "  ROOT y = f32[1003] abs(a)\n}\n";
    ot_module *m = parse(text);
    ASSERT_TRUE(m != NULL);
    ot_shape s;
    ot_shape_make(&s, OT_C64, 1, (int64_t[]){1003});
    ot_tensor arg;
    ASSERT_OK(ot_tensor_alloc(&arg, &s));
    float *x = arg.data;
    for (int e = 0; e < 1003; e++) { /* magnitudes 2^-70 .. 2^70, either component larger */
        x[2 * e] = (float)ldexp(rnd(), (int)(rnd() * 70));
        x[2 * e + 1] = (float)ldexp(rnd(), (int)(rnd() * 70));
    }
    static const float sp[][2] = {{INFINITY, NAN}, {NAN, -INFINITY}, {NAN, 1},
                                  {3e38f, 3e38f},  {1e-30f, 1e-30f}, {0x1p-140f, 0},
                                  {0, -0x1p-130f}, {0, 0},           {FLT_MAX, 1},
                                  {-3, 4},         {1e-20f, -1e-19f}};
    int nsp = (int)(sizeof sp / sizeof sp[0]);
    for (int k = 0; k < nsp; k++) { /* in the vector body and in the tail */
        x[2 * (8 * k + 3)] = x[2 * (1002 - k)] = sp[k][0];
        x[2 * (8 * k + 3) + 1] = x[2 * (1002 - k) + 1] = sp[k][1];
    }
    ot_executable *exe = NULL;
    ot_compile_options co = ot_compile_options_default();
    ASSERT_OK(ot_compile(m, &co, &exe));
    void *params[1] = {arg.data};
    ot_tensor ref;
    ASSERT_OK(run_exe(exe, params, &ref, NULL, true));
    const float *y = ref.data;
    int bad = 0;
    for (int e = 0; e < 1003; e++) {
        float re = x[2 * e], im = x[2 * e + 1];
        if (isnan(re) || isnan(im) || isinf(re) || isinf(im)) continue;
        re = fabsf(re) < FLT_MIN ? 0 : re;
        im = fabsf(im) < FLT_MIN ? 0 : im;
        long double h = hypotl(re, im);
        float hf = (float)h;
        if (hf < FLT_MIN) {
            bad += y[e] != 0;
        } else if (isinf(hf)) {
            bad += !isinf(y[e]);
        } else {
            long double ulp = nextafterf(hf, INFINITY) - hf;
            bad += fabsl((long double)y[e] - h) > (0.5L + 0x1p-28L) * ulp;
        }
    }
    EXPECT_INT_EQ(bad, 0);
    for (int w = 0; w < 2; w++) { /* the special values: body, tail */
        int at = w ? 1002 : 3;
        EXPECT_TRUE(isinf(y[at]) && isinf(y[w ? at - 1 : at + 8]));
        EXPECT_TRUE(isnan(y[w ? at - 2 : at + 16]));
        EXPECT_TRUE(isinf(y[w ? at - 3 : at + 24]));                      /* overflows float */
        EXPECT_TRUE(y[w ? at - 4 : at + 32] == (float)(1e-30 * M_SQRT2)); /* squares underflow */
        EXPECT_TRUE(y[w ? at - 5 : at + 40] == 0 && y[w ? at - 6 : at + 48] == 0); /* flushed */
        EXPECT_TRUE(y[w ? at - 9 : at + 72] == 5);
    }
    static const int nth[] = {1, 2, 3, 8};
    for (int p = 0; p < 4; p++) {
        ot_threadpool *pool = NULL;
        ASSERT_OK(ot_threadpool_create(nth[p], &pool));
        ot_tensor o;
        ASSERT_OK(run_exe(exe, params, &o, pool, false));
        bool same = !memcmp(o.data, ref.data, ref.nbytes);
        if (!same) fprintf(stderr, "  abs, %d threads: differs from the reference\n", nth[p]);
        EXPECT_TRUE(same);
        ot_tensor_release(&o);
        ot_threadpool_free(pool);
    }
    ot_tensor_release(&ref);
    ot_tensor_release(&arg);
    ot_executable_free(exe);
    ot_module_free(m);
}

/* The fft of a c64[3, n] (FFT) or f32[3, n] (RFFT) input of random values seeded by n, evaluated.
 */
static ot_value fft_of(int64_t n, bool real) {
    char text[512];
    snprintf(text, sizeof text,
             "HloModule m\nENTRY e {\n  x = %s[3,%lld] parameter(0)\n  ROOT y = c64[3,%lld] "
             "fft(x), fft_type=%s, fft_length={%lld}\n}\n",
             real ? "f32" : "c64", (long long)n, (long long)(real ? n / 2 + 1 : n),
             real ? "RFFT" : "FFT", (long long)n);
    ot_module *m = parse(text);
    ot_value r = ot_value_empty();
    if (!m) return r;
    const ot_instr *x = ot_computation_find_instr(ot_module_entry(m), "x");
    ot_value a;
    ot_value_alloc_array(&a, &x->shape.array);
    uint64_t rng = (uint64_t)n * 2 + real; /* its own state: called on several threads */
    for (int64_t e = 0; e < (real ? 3 : 6) * n; e++)
        ((float *)a.array.data)[e] = (float)(ot_test_splitmix64(&rng) >> 40) / 16777216.0f - 0.5f;
    if (ot_evaluate(m, &a, 1, NULL, &r) != OT_OK) r = ot_value_empty();
    ot_value_release(&a);
    ot_module_free(m);
    return r;
}

static bool same_value(const ot_value *a, const ot_value *b) {
    return a->kind == OT_IR_ARRAY && b->kind == OT_IR_ARRAY && a->array.nbytes == b->array.nbytes &&
           !memcmp(a->array.data, b->array.data, a->array.nbytes);
}

enum { CACHE_LENGTHS = 40 };
static int64_t cache_len(int k) { /* powers of two, mixed radices, primes (Bluestein from 1009) */
    static const int64_t base[] = {1024, 1000, 263, 1009, 4096, 10007, 720, 97};
    return base[k % 8] + (k / 8) * 2;
}

typedef struct cache_worker {
    const ot_value *want; /* CACHE_LENGTHS x {complex, real} */
    int seed, bad;
} cache_worker;

static void *cache_worker_run(void *arg) {
    cache_worker *w = arg;
    for (int q = 0; q < 2 * CACHE_LENGTHS; q++) {
        int k = (q * 7 + w->seed * 13) % (2 * CACHE_LENGTHS);
        ot_value r = fft_of(cache_len(k / 2), k % 2);
        w->bad += !same_value(&r, &w->want[k]);
        ot_value_release(&r);
    }
    return NULL;
}

/* The plan cache: a length transformed again makes no new tables and gives the same bits; more
 * lengths than the cache holds evict the least recently used (made again, same bits); calls on
 * four threads at once over those lengths (hits, misses, evictions of tables other calls may
 * hold) give the bits of a lone call. */
static void test_fft_plan_cache(void) {
    ex_fft_cache_clear();
    ot_value want[2 * CACHE_LENGTHS];
    int64_t made0 = ex_fft_tables_made();
    ot_value a = fft_of(1000, false);
    int64_t made1 = ex_fft_tables_made();
    EXPECT_TRUE(made1 > made0);
    ot_value b = fft_of(1000, false);
    EXPECT_INT_EQ(ex_fft_tables_made(), made1); /* a hit */
    EXPECT_TRUE(same_value(&a, &b));
    ot_value_release(&b);
    ot_value rr = fft_of(1000, true); /* a real stage of the same length: tables of its own */
    EXPECT_TRUE(ex_fft_tables_made() > made1);
    for (int k = 0; k < 2 * CACHE_LENGTHS; k++) {
        want[k] = fft_of(cache_len(k / 2), k % 2);
        ASSERT_TRUE(want[k].kind == OT_IR_ARRAY);
    }
    int64_t made2 = ex_fft_tables_made();
    b = fft_of(1000, false); /* evicted by the 80 tables since */
    EXPECT_TRUE(ex_fft_tables_made() > made2);
    EXPECT_TRUE(same_value(&a, &b));
    ot_value_release(&b);
    ot_value_release(&a);
    ot_value_release(&rr);
    cache_worker w[4];
    pthread_t th[4];
    for (int k = 0; k < 4; k++) {
        w[k] = (cache_worker){.want = want, .seed = k};
        ASSERT_TRUE(pthread_create(&th[k], NULL, cache_worker_run, &w[k]) == 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        EXPECT_INT_EQ(w[k].bad, 0);
    }
    ex_fft_cache_clear();
    for (int k = 0; k < 2 * CACHE_LENGTHS; k++) ot_value_release(&want[k]);
}

/* What is not implemented on complex values is refused naming the op and the dtype; what XLA
 * rejects is refused when the module is read, at the instruction. */
static void test_complex_refused(void) {
    static const struct {
        const char *text;
        ot_status code;
        const char *msg;
    } cases[] = {
        {"HloModule m\nENTRY e {\n  x = c64[2] parameter(0)\n  ROOT y = c64[2] sine(x)\n}\n",
         OT_ERR_UNIMPLEMENTED, "sine on c64 is not implemented"},
        {"HloModule m\nENTRY e {\n  x = c64[2] parameter(0)\n  ROOT y = c64[2] power(x, x)\n}\n",
         OT_ERR_UNIMPLEMENTED, "power on c64 is not implemented"},
        {"HloModule m\nmul { a = c64[] parameter(0)\n b = c64[] parameter(1)\n ROOT s = c64[] "
         "multiply(a, b) }\nENTRY e {\n  x = c64[2] parameter(0)\n  z = c64[] constant((1, 0))\n"
         "  ROOT y = c64[] reduce(x, z), dimensions={0}, to_apply=mul\n}\n",
         OT_ERR_UNIMPLEMENTED, "reduce on c64 is implemented only as one sum"},
    };
    for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
        ot_module *m = parse(cases[q].text);
        ASSERT_TRUE(m != NULL);
        const ot_instr *x = ot_computation_find_instr(ot_module_entry(m), "x");
        ot_value a;
        ASSERT_OK(ot_value_alloc_array(&a, &x->shape.array));
        memset(a.array.data, 0, a.array.nbytes);
        ot_value r;
        EXPECT_STATUS(ot_evaluate(m, &a, 1, NULL, &r), cases[q].code);
        EXPECT_STR_CONTAINS(ot_last_error(), cases[q].msg);
        /* the compiled program refuses it the same way when it runs */
        ot_executable *exe = NULL;
        ot_compile_options co = ot_compile_options_default();
        if (ot_compile(m, &co, &exe) == OT_OK) {
            ot_tensor o[1];
            void *params[1] = {a.array.data};
            EXPECT_STATUS(run_exe(exe, params, o, NULL, false), cases[q].code);
            EXPECT_STR_CONTAINS(ot_last_error(), cases[q].msg);
            ot_executable_free(exe);
        }
        ot_value_release(&a);
        ot_module_free(m);
    }
    /* ordered ops are shape errors on complex operands */
    ot_module *m = NULL;
    const char *t = "HloModule m\nENTRY e {\n  x = c64[2] parameter(0)\n  ROOT y = c64[2] "
                    "maximum(x, x)\n}\n";
    ot_hlo_parse_options po = ot_hlo_parse_options_default();
    EXPECT_STATUS(ot_hlo_parse(t, strlen(t), &po, &m), OT_ERR_SHAPE_MISMATCH);
    EXPECT_STR_CONTAINS(ot_last_error(), "<input>:4:19: y: maximum: operands must be ordered");
}

/* Complex literals print back as they were read. */
static void test_complex_round_trip(void) {
    const char *text = "HloModule m\nENTRY e {\n  ROOT k = c64[2] constant({(1, -2.5), (inf, "
                       "nan)})\n}\n";
    ot_module *m = parse(text);
    ASSERT_TRUE(m != NULL);
    char *out = ot_hlo_print(m, NULL);
    ASSERT_TRUE(out != NULL);
    EXPECT_STR_CONTAINS(out, "constant({(1, -2.5), (inf, nan)})");
    ot_free(out);
    ot_module_free(m);
}

/* Reverse mode through complex values is refused, not a gradient silently cut off at the fft. */
static void test_grad_through_complex_refused(void) {
    const char *text = "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n "
                       "ROOT s = f32[] add(a, b) }\nENTRY e {\n  x = f32[8] parameter(0)\n"
                       "  f = c64[5] fft(x), fft_type=RFFT, fft_length={8}\n"
                       "  a = f32[5] abs(f)\n  z = f32[] constant(0)\n"
                       "  ROOT l = f32[] reduce(a, z), dimensions={0}, to_apply=add\n}\n";
    ot_module *m = parse(text);
    ASSERT_TRUE(m != NULL);
    int64_t wrt[1] = {0};
    ot_module *g = NULL;
    EXPECT_STATUS(ot_grad(m, wrt, 1, NULL, &g), OT_ERR_UNIMPLEMENTED);
    EXPECT_STR_CONTAINS(ot_last_error(), "f (fft) carries a gradient through complex values");
    EXPECT_TRUE(g == NULL);
    ot_module_free(m);
}

OT_TEST_MAIN(OT_TEST(test_grad_through_complex_refused), OT_TEST(test_fft_1d_against_naive_dft),
             OT_TEST(test_fft_2d_3d_against_naive_dft), OT_TEST(test_fft_accuracy_many_lengths),
             OT_TEST(test_fft_line_bits_independent_of_batch),
             OT_TEST(test_fft_baseline_equals_avx512), OT_TEST(test_fft_threads_deterministic),
             OT_TEST(test_complex_ops), OT_TEST(test_complex_fast_kernels_equal_evaluator),
             OT_TEST(test_complex_gather_scatter), OT_TEST(test_complex_convert_in_place),
             OT_TEST(test_complex_abs_c64), OT_TEST(test_fft_plan_cache),
             OT_TEST(test_complex_refused), OT_TEST(test_complex_round_trip))
