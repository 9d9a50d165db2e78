/* The fft instruction's line kernels, one lane per line (fft.c owns the plans, the jobs and the
 * split over the pool; docs/exec.md describes the method). A template: fft.c includes this file
 * once per element type and instruction set, with
 *   FT          the real element type (float or double),
 *   FV          a GCC vector of FL FT lanes (64 bytes),
 *   FL          the lanes,
 *   FN(x)       x with the instance's suffix,
 *   FT_TARGET   the instance's target attribute (empty for the baseline).
 * Every lane is one line and every operation is lane-wise IEEE arithmetic without contraction, so
 * a line's bits never depend on its lane, its group, the other lines or the instance's lane count.
 * Nothing here allocates except FN(groups) (its scratch; failure is reported in the job). */

typedef struct {
    FV re, im;
} FN(cv);
#define CV FN(cv)

FT_TARGET static inline CV FN(add)(CV a, CV b) {
    return (CV){a.re + b.re, a.im + b.im};
}
FT_TARGET static inline CV FN(sub)(CV a, CV b) {
    return (CV){a.re - b.re, a.im - b.im};
}
/* a times (wr + i wi) */
FT_TARGET static inline CV FN(mul)(CV a, FT wr, FT wi) {
    return (CV){a.re * wr - a.im * wi, a.re * wi + a.im * wr};
}
/* a times the pass twiddle of output u, position i (conjugated forward) */
#define FFT_TW(a, u, i)                                                                            \
    FN(mul)                                                                                        \
    ((a), (FT)tw[2 * ((i)-1 + (u) * (ido - 1))],                                                   \
     fwd ? -(FT)tw[2 * ((i)-1 + (u) * (ido - 1)) + 1] : (FT)tw[2 * ((i)-1 + (u) * (ido - 1)) + 1])
#define CC(a, b, c) cc[(a) + ido * ((b) + cdim * (c))]
#define CH(a, b, c) ch[(a) + ido * ((b) + l1 * (c))]

FT_TARGET static inline __attribute__((always_inline)) void
FN(pass2_)(int64_t ido, int64_t l1, const CV *restrict cc, CV *restrict ch, const double *tw,
           const int fwd) {
    const int64_t cdim = 2;
    for (int64_t k = 0; k < l1; k++)
        for (int64_t i = 0; i < ido; i++) {
            CV a = CC(i, 0, k), b = CC(i, 1, k);
            CH(i, k, 0) = FN(add)(a, b);
            CH(i, k, 1) = i ? FFT_TW(FN(sub)(a, b), 0, i) : FN(sub)(a, b);
        }
}

FT_TARGET static inline __attribute__((always_inline)) void
FN(pass3_)(int64_t ido, int64_t l1, const CV *restrict cc, CV *restrict ch, const double *tw,
           const int fwd) {
    const int64_t cdim = 3;
    const FT twr = (FT)-0.5, twi = (FT)(fwd ? -0.86602540378443864676 : 0.86602540378443864676);
    for (int64_t k = 0; k < l1; k++)
        for (int64_t i = 0; i < ido; i++) {
            CV t0 = CC(i, 0, k), t1 = FN(add)(CC(i, 1, k), CC(i, 2, k));
            CV t2 = FN(sub)(CC(i, 1, k), CC(i, 2, k));
            CH(i, k, 0) = FN(add)(t0, t1);
            CV ca = {t0.re + twr * t1.re, t0.im + twr * t1.im};
            CV cb = {-(twi * t2.im), twi * t2.re};
            CV d1 = FN(add)(ca, cb), d2 = FN(sub)(ca, cb);
            CH(i, k, 1) = i ? FFT_TW(d1, 0, i) : d1;
            CH(i, k, 2) = i ? FFT_TW(d2, 1, i) : d2;
        }
}

FT_TARGET static inline __attribute__((always_inline)) void
FN(pass4_)(int64_t ido, int64_t l1, const CV *restrict cc, CV *restrict ch, const double *tw,
           const int fwd) {
    const int64_t cdim = 4;
    for (int64_t k = 0; k < l1; k++)
        for (int64_t i = 0; i < ido; i++) {
            CV t2 = FN(add)(CC(i, 0, k), CC(i, 2, k)), t1 = FN(sub)(CC(i, 0, k), CC(i, 2, k));
            CV t3 = FN(add)(CC(i, 1, k), CC(i, 3, k)), t4 = FN(sub)(CC(i, 1, k), CC(i, 3, k));
            /* t4 times -i forward, +i backward */
            t4 = fwd ? (CV){t4.im, -t4.re} : (CV){-t4.im, t4.re};
            CV c1 = FN(add)(t1, t4), c2 = FN(sub)(t2, t3), c3 = FN(sub)(t1, t4);
            CH(i, k, 0) = FN(add)(t2, t3);
            CH(i, k, 1) = i ? FFT_TW(c1, 0, i) : c1;
            CH(i, k, 2) = i ? FFT_TW(c2, 1, i) : c2;
            CH(i, k, 3) = i ? FFT_TW(c3, 2, i) : c3;
        }
}

FT_TARGET static inline __attribute__((always_inline)) void
FN(pass5_)(int64_t ido, int64_t l1, const CV *restrict cc, CV *restrict ch, const double *tw,
           const int fwd) {
    const int64_t cdim = 5;
    const FT s = (FT)(fwd ? -1.0 : 1.0);
    const FT tw1r = (FT)0.3090169943749474241, tw1i = s * (FT)0.95105651629515357212;
    const FT tw2r = (FT)-0.8090169943749474241, tw2i = s * (FT)0.58778525229247312917;
    for (int64_t k = 0; k < l1; k++)
        for (int64_t i = 0; i < ido; i++) {
            CV t0 = CC(i, 0, k);
            CV t1 = FN(add)(CC(i, 1, k), CC(i, 4, k)), t4 = FN(sub)(CC(i, 1, k), CC(i, 4, k));
            CV t2 = FN(add)(CC(i, 2, k), CC(i, 3, k)), t3 = FN(sub)(CC(i, 2, k), CC(i, 3, k));
            CH(i, k, 0) = (CV){t0.re + t1.re + t2.re, t0.im + t1.im + t2.im};
            CV ca = {t0.re + tw1r * t1.re + tw2r * t2.re, t0.im + tw1r * t1.im + tw2r * t2.im};
            CV cb = {-(tw1i * t4.im + tw2i * t3.im), tw1i * t4.re + tw2i * t3.re};
            CV d1 = FN(add)(ca, cb), d4 = FN(sub)(ca, cb);
            CV ce = {t0.re + tw2r * t1.re + tw1r * t2.re, t0.im + tw2r * t1.im + tw1r * t2.im};
            CV cf = {-(tw2i * t4.im - tw1i * t3.im), tw2i * t4.re - tw1i * t3.re};
            CV d2 = FN(add)(ce, cf), d3 = FN(sub)(ce, cf);
            CH(i, k, 1) = i ? FFT_TW(d1, 0, i) : d1;
            CH(i, k, 2) = i ? FFT_TW(d2, 1, i) : d2;
            CH(i, k, 3) = i ? FFT_TW(d3, 2, i) : d3;
            CH(i, k, 4) = i ? FFT_TW(d4, 3, i) : d4;
        }
}

/* Any odd radix p <= FFT_MAX_RADIX: the symmetric sums and differences of the p inputs, then
 * each output pair from them (rt: exp(+2 pi i r / p), r < p). */
FT_TARGET static void FN(passg)(int64_t ido, int64_t l1, int p, const CV *restrict cc,
                                CV *restrict ch, const double *tw, const double *rt,
                                const int fwd) {
    const int64_t cdim = p;
    const int hp = (p - 1) / 2;
    CV sm[FFT_MAX_RADIX / 2 + 1], df[FFT_MAX_RADIX / 2 + 1];
    for (int64_t k = 0; k < l1; k++)
        for (int64_t i = 0; i < ido; i++) {
            CV x0 = CC(i, 0, k), all = x0;
            for (int q = 1; q <= hp; q++) {
                sm[q] = FN(add)(CC(i, q, k), CC(i, p - q, k));
                df[q] = FN(sub)(CC(i, q, k), CC(i, p - q, k));
                all = FN(add)(all, sm[q]);
            }
            CH(i, k, 0) = all;
            for (int u = 1; u <= hp; u++) {
                CV a = x0, b = {(FV){0}, (FV){0}};
                for (int q = 1, r = u; q <= hp; q++, r = r + u >= p ? r + u - p : r + u) {
                    FT c = (FT)rt[2 * r], s = fwd ? -(FT)rt[2 * r + 1] : (FT)rt[2 * r + 1];
                    a = (CV){a.re + sm[q].re * c, a.im + sm[q].im * c};
                    b = (CV){b.re + df[q].re * s, b.im + df[q].im * s};
                }
                CV o1 = {a.re - b.im, a.im + b.re}, o2 = {a.re + b.im, a.im - b.re};
                CH(i, k, u) = i ? FFT_TW(o1, u - 1, i) : o1;
                CH(i, k, p - u) = i ? FFT_TW(o2, p - u - 1, i) : o2;
            }
        }
}
#undef CC
#undef CH
#undef FFT_TW

#define FFT_PASS(NAME)                                                                             \
    FT_TARGET static void FN(NAME)(int64_t ido, int64_t l1, const CV *restrict cc,                 \
                                   CV *restrict ch, const double *tw, int fwd) {                   \
        if (fwd)                                                                                   \
            FN(NAME##_)(ido, l1, cc, ch, tw, 1);                                                   \
        else                                                                                       \
            FN(NAME##_)(ido, l1, cc, ch, tw, 0);                                                   \
    }
FFT_PASS(pass2)
FFT_PASS(pass3)
FFT_PASS(pass4)
FFT_PASS(pass5)
#undef FFT_PASS

FT_TARGET static CV *FN(run)(const fft_plan *p, CV *a, CV *w, int fwd);

/* Bluestein: the chirp-z transform of n through two transforms of m (w: 2m values). */
FT_TARGET static CV *FN(bluestein)(const fft_plan *p, CV *a, CV *w, int fwd) {
    int64_t n = p->n, m = p->m;
    CV *x = w, *y = w + m;
    const double *bk = p->bk, *bkf = p->bkf;
    for (int64_t q = 0; q < n; q++) /* times conj(bk) forward, bk backward */
        x[q] = FN(mul)(a[q], (FT)bk[2 * q], fwd ? -(FT)bk[2 * q + 1] : (FT)bk[2 * q + 1]);
    for (int64_t q = n; q < m; q++) x[q] = (CV){(FV){0}, (FV){0}};
    CV *r = FN(run)(p->sub, x, y, 1), *o = r == x ? y : x;
    for (int64_t q = 0; q < m; q++) /* times bkf forward, conj(bkf) backward */
        r[q] = FN(mul)(r[q], (FT)bkf[2 * q], fwd ? (FT)bkf[2 * q + 1] : -(FT)bkf[2 * q + 1]);
    r = FN(run)(p->sub, r, o, 0);
    for (int64_t q = 0; q < n; q++)
        a[q] = FN(mul)(r[q], (FT)bk[2 * q], fwd ? -(FT)bk[2 * q + 1] : (FT)bk[2 * q + 1]);
    return a;
}

/* The transform of p->n values a (forward: exponent sign -), unscaled; w: fft_plan_work(p)
 * values. Returns where the result is: a or w. */
FT_TARGET static CV *FN(run)(const fft_plan *p, CV *a, CV *w, int fwd) {
    if (p->m) return FN(bluestein)(p, a, w, fwd);
    CV *x = a, *y = w;
    for (int f = 0; f < p->nf; f++) {
        const fft_factor *fc = &p->f[f];
        switch (fc->p) {
        case 2: FN(pass2)(fc->ido, fc->l1, x, y, fc->tw, fwd); break;
        case 3: FN(pass3)(fc->ido, fc->l1, x, y, fc->tw, fwd); break;
        case 4: FN(pass4)(fc->ido, fc->l1, x, y, fc->tw, fwd); break;
        case 5: FN(pass5)(fc->ido, fc->l1, x, y, fc->tw, fwd); break;
        default: FN(passg)(fc->ido, fc->l1, fc->p, x, y, fc->tw, fc->rt, fwd); break;
        }
        CV *t = x;
        x = y;
        y = t;
    }
    return x;
}

/* RFFT of even n = 2h from the transform z of h (the even samples as real parts, the odd as
 * imaginary): X[k] = (Z[k] + conj Z[h-k]) / 2 - i w^k (Z[k] - conj Z[h-k]) / 2, w = exp(-2 pi i/n)
 * (rw[k], k <= h/2), computed for k and h-k together in place; z holds h+1 values. */
FT_TARGET static void FN(rfft_post)(CV *z, int64_t h, const double *rw) {
    CV z0 = z[0];
    z[0] = (CV){z0.re + z0.im, (FV){0}};
    z[h] = (CV){z0.re - z0.im, (FV){0}};
    for (int64_t k = 1; 2 * k <= h; k++) {
        CV a = z[k], b = z[h - k];
        FT wr = (FT)rw[2 * k], wi = (FT)rw[2 * k + 1];
        /* e = (a + conj b) / 2, o = (a - conj b) / 2: X[k] = e - i w^k o; for h-k the roles of
         * a and b swap and w^(h-k) = -conj(w^k) */
        FV er = (a.re + b.re) * (FT)0.5, ei = (a.im - b.im) * (FT)0.5;
        FV orr = (a.re - b.re) * (FT)0.5, oi = (a.im + b.im) * (FT)0.5;
        /* t = w^k o; X[k] = e - i t = (er + t.im, ei - t.re) */
        FV tr = orr * wr - oi * wi, ti = orr * wi + oi * wr;
        /* the partner: e' = conj e, o' = -conj o, w' = -conj w: t' = conj(w) conj(o) = conj t */
        z[h - k] = (CV){er - ti, -ei - tr};
        z[k] = (CV){er + ti, ei - tr};
    }
}

/* IRFFT of even n = 2h, before the inverse transform of h: from X[0..h] (imaginary parts of X[0]
 * and X[h] already zero) Z[k] = (X[k] + conj X[h-k]) + i conj(w^k) (X[k] - conj X[h-k]), whose
 * inverse transform holds n times the even samples as real parts, the odd as imaginary. */
FT_TARGET static void FN(irfft_pre)(CV *x, int64_t h, const double *rw) {
    CV x0 = x[0], xh = x[h];
    x[0] = (CV){x0.re + xh.re, x0.re - xh.re};
    for (int64_t k = 1; 2 * k <= h; k++) {
        CV a = x[k], b = x[h - k];
        FT wr = (FT)rw[2 * k], wi = -(FT)rw[2 * k + 1]; /* conj(w^k) */
        FV er = a.re + b.re, ei = a.im - b.im, orr = a.re - b.re, oi = a.im + b.im;
        FV tr = orr * wr - oi * wi, ti = orr * wi + oi * wr; /* conj(w^k) (a - conj b) */
        /* the partner: e' = conj e, (b - conj a) = -conj(a - conj b), conj(w^(h-k)) = -w^k:
         * its t' = conj t, and conj e + i conj t = (er + ti) + i (tr - ei) */
        x[h - k] = (CV){er + ti, tr - ei};
        x[k] = (CV){er - ti, ei + tr};
    }
}

/* Lanes l < cnt of a[q] (q < len) from line l: complex values at src + 2 base[l] + 2 q s, or real
 * ones (cplx 0) at src + base[l] + q s. Lanes from cnt on repeat lane 0's line (whose results
 * FN(store) drops). */
FT_TARGET static void FN(load)(CV *restrict a, const FT *restrict src, const int64_t *base,
                               int64_t s, int64_t len, int cnt, int cplx) {
    int64_t q0 = 0;
    if (cplx && cnt == FL && base[FL - 1] == base[0] + FL - 1) { /* lanes side by side */
        for (int64_t q = 0; q < len; q++) {
            const FT *p = src + 2 * (base[0] + q * s);
#if FT_MOVES
            FN(deint)((FT *)&a[q], p);
#else
            for (int l = 0; l < FL; l++) {
                a[q].re[l] = p[2 * l];
                a[q].im[l] = p[2 * l + 1];
            }
#endif
        }
        return;
    }
#if FT_MOVES
    if (cplx && s == 1) { /* FL rows: FL x FL transposes of FL / 2 complex values of each */
        const FT *rows[FL];
        for (int l = 0; l < FL; l++) rows[l] = src + 2 * base[l < cnt ? l : 0];
        for (; q0 + FL / 2 <= len; q0 += FL / 2) FN(tr_in)((FT *)&a[q0], rows, 2 * q0);
    }
#endif
    for (int l = 0; l < FL; l++) {
        int64_t b = base[l < cnt ? l : 0];
        if (cplx) {
            const FT *p = src + 2 * b;
            for (int64_t q = q0; q < len; q++) {
                a[q].re[l] = p[2 * q * s];
                a[q].im[l] = p[2 * q * s + 1];
            }
        } else {
            const FT *p = src + b;
            for (int64_t q = 0; q < len; q++) {
                a[q].re[l] = p[q * s];
                a[q].im[l] = 0;
            }
        }
    }
}

/* The inverse of FN(load) for lanes l < cnt; real (cplx 0): the real parts. */
FT_TARGET static void FN(store)(const CV *restrict a, FT *restrict dst, const int64_t *base,
                                int64_t s, int64_t len, int cnt, int cplx) {
    int64_t q0 = 0;
    if (cplx && cnt == FL && base[FL - 1] == base[0] + FL - 1) {
        for (int64_t q = 0; q < len; q++) {
            FT *p = dst + 2 * (base[0] + q * s);
#if FT_MOVES
            FN(inter)((const FT *)&a[q], p);
#else
            for (int l = 0; l < FL; l++) {
                p[2 * l] = a[q].re[l];
                p[2 * l + 1] = a[q].im[l];
            }
#endif
        }
        return;
    }
#if FT_MOVES
    if (cplx && s == 1 && cnt == FL) {
        FT *rows[FL];
        for (int l = 0; l < FL; l++) rows[l] = dst + 2 * base[l];
        for (; q0 + FL / 2 <= len; q0 += FL / 2) FN(tr_out)((const FT *)&a[q0], rows, 2 * q0);
    }
#endif
    for (int l = 0; l < cnt; l++) {
        if (cplx) {
            FT *p = dst + 2 * base[l];
            for (int64_t q = q0; q < len; q++) {
                p[2 * q * s] = a[q].re[l];
                p[2 * q * s + 1] = a[q].im[l];
            }
        } else {
            FT *p = dst + base[l];
            for (int64_t q = 0; q < len; q++) p[q * s] = a[q].re[l];
        }
    }
}

/* a[q] times f for q < n (f = 0: unchanged) */
FT_TARGET static void FN(scale)(CV *a, int64_t n, double f) {
    if (f == 0) return;
    FT s = (FT)f;
    for (int64_t q = 0; q < n; q++) a[q] = (CV){a[q].re * s, a[q].im * s};
}

/* Groups [g0, g1) of FL lines of the job's stage (fft.c: fft_job). */
FT_TARGET static void FN(groups)(fft_job *j, int64_t g0, int64_t g1) {
    const fft_plan *p = j->plan;
    int64_t len = p->n, nw = fft_plan_work(p);
    if (nw < len + 1) nw = len + 1;
    CV *a = ot_aligned_alloc(64, (size_t)(len + 1 + nw) * sizeof *a);
    if (!a) {
        atomic_store(&j->failed, 1);
        return;
    }
    CV *w = a + len + 1;
    int64_t n = j->n, m = n / 2 + 1, h = n / 2, base[FL];
    FT *work = j->work;
    for (int64_t g = g0; g < g1; g++) {
        int64_t l0 = g * FL;
        int cnt = (int)(j->lines - l0 < FL ? j->lines - l0 : FL);
        if (j->kind == FFT_STAGE_COMPLEX) {
            for (int l = 0; l < cnt; l++) base[l] = (l0 + l) / j->s * n * j->s + (l0 + l) % j->s;
            FN(load)(a, work, base, j->s, n, cnt, 1);
            CV *r = FN(run)(p, a, w, j->fwd);
            FN(scale)(r, n, j->scale);
            FN(store)(r, work, base, j->s, n, cnt, 1);
        } else if (j->kind == FFT_STAGE_RFFT) {
            const FT *x = j->rin;
            for (int l = 0; l < cnt; l++) base[l] = (l0 + l) * (n % 2 ? n : h);
            FN(load)(a, x, base, 1, len, cnt, n % 2 == 0);
            CV *r = FN(run)(p, a, w, 1);
            if (n % 2 == 0) FN(rfft_post)(r, h, j->rw);
            for (int l = 0; l < cnt; l++) base[l] = (l0 + l) * m;
            FN(store)(r, work, base, 1, m, cnt, 1);
        } else { /* IRFFT */
            for (int l = 0; l < cnt; l++) base[l] = (l0 + l) * m;
            FN(load)(a, work, base, 1, m, cnt, 1);
            /* a Hermitian spectrum's DC and Nyquist terms are real; their imaginary parts are
             * ignored: irfft_pre reads only their real parts, and an odd line's imaginary DC
             * term adds only to the imaginary parts, which are dropped */
            if (n % 2 == 0)
                FN(irfft_pre)(a, h, j->rw);
            else
                for (int64_t q = 1; q < m; q++) a[n - q] = (CV){a[q].re, -a[q].im};
            CV *r = FN(run)(p, a, w, 0);
            FN(scale)(r, len, j->scale);
            FT *y = j->rout;
            for (int l = 0; l < cnt; l++) base[l] = (l0 + l) * (n % 2 ? n : h);
            FN(store)(r, y, base, 1, len, cnt, n % 2 == 0);
        }
    }
    ot_aligned_free(a);
}
#undef CV
