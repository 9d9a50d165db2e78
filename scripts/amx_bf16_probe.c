/* Compares AMX's tdpbf16ps with the bf16 x bf16 dot under FTZ as docs/exec.md defines it (pairs
 * of k, the odd product first, each step one fma flushed as x86's FTZ flushes), and with two
 * other candidate definitions, on random 16 x 16 tiles; prints how many results agree.
 *   gcc -O2 -o /tmp/amx_bf16_probe scripts/amx_bf16_probe.c -lm && /tmp/amx_bf16_probe
 * Needs a CPU with AMX-BF16 and Linux 5.16 or later. Two input sets: "normal" (magnitudes 2^-3
 * to 2^3: no overflow, underflow or special value) and "wide" (subnormals, infinities, NaN,
 * products beyond f32); each with one pair per instruction (K = 2) and sixteen (K = 32). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

static uint64_t g_s = 88172645463325252ull;
static uint64_t rnd(void) {
    g_s ^= g_s << 13;
    g_s ^= g_s >> 7;
    g_s ^= g_s << 17;
    return g_s;
}

static uint16_t rnd_bf16(int wide) {
    uint64_t r = rnd();
    int c = (int)(r % 100);
    r >>= 8;
    uint16_t s = (uint16_t)((r & 1) << 15), m = (uint16_t)((r >> 9) & 0x7f);
    r >>= 1;
    if (!wide) return s | (uint16_t)((124 + r % 7) << 7) | m;
    if (c < 5) return s | (uint16_t)(r & 0x7f);                 /* zero or subnormal */
    if (c < 7) return s | 0x7f80;                               /* infinity */
    if (c < 8) return s | 0x7fc1;                               /* NaN */
    if (c < 40) return s | (uint16_t)((1 + r % 40) << 7) | m;   /* products near FLT_MIN */
    if (c < 60) return s | (uint16_t)((230 + r % 24) << 7) | m; /* products beyond f32 */
    return s | (uint16_t)((100 + r % 50) << 7) | m;
}

static float bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float daz(float x) {
    return x != 0 && fabsf(x) < 0x1p-126f ? copysignf(0.0f, x) : x;
}
/* docs/exec.md's step: one fma, flushed as x86's FTZ flushes */
static float step(float x, float y, float t) {
    float r = fmaf(x, y, t);
    if (r != 0 && fabsf(r) < 0x1p-126f) return copysignf(0.0f, r);
    if (fabsf(r) == 0x1p-126f && fabs((double)t + (double)x * (double)y) < 0x1.ffffffp-127)
        return copysignf(0.0f, r);
    return r;
}
static int same(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return !memcmp(&a, &b, 4);
}

__attribute__((target("amx-tile,amx-bf16"))) static void tdp(const uint16_t *a, const uint16_t *b,
                                                             float *c, int k) {
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.colsb[0] = 64, cfg.rows[0] = 16;                /* C: 16 x 16 f32 */
    cfg.colsb[1] = (uint16_t)(k * 2), cfg.rows[1] = 16; /* A: 16 rows x k bf16 */
    cfg.colsb[2] = 64, cfg.rows[2] = (uint8_t)(k / 2);  /* B: k / 2 pairs x 16 columns */
    _tile_loadconfig(&cfg);
    _tile_loadd(0, c, 64);
    _tile_loadd(1, a, k * 2);
    _tile_loadd(2, b, 64);
    _tile_dpbf16ps(0, 1, 2);
    _tile_stored(0, c, 64);
    _tile_release();
}

int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */)) {
        perror("amx_bf16_probe: arch_prctl");
        return 1;
    }
    for (int wide = 0; wide < 2; wide++)
        for (int k = 2; k <= 32; k += 30) {
            long n = 0, chain = 0, even = 0, pair = 0, once = 0, nan = 0;
            for (int it = 0; it < 20000; it++) {
                uint16_t a[16 * 32], b[16 * 32];
                float c[256], c0[256];
                for (int i = 0; i < 16 * k; i++) a[i] = rnd_bf16(wide);
                for (int i = 0; i < k / 2 * 32; i++) b[i] = rnd_bf16(wide);
                for (int i = 0; i < 256; i++) {
                    uint32_t u = (uint32_t)rnd();
                    if (!wide) u = (u & 0x807fffffu) | ((uint32_t)(124 + rnd() % 7) << 23);
                    memcpy(&c0[i], &u, 4);
                }
                memcpy(c, c0, sizeof c);
                tdp(a, b, c, k);
                for (int m = 0; m < 16; m++)
                    for (int j = 0; j < 16; j++) {
                        float t0 = daz(c0[m * 16 + j]), odd = t0, ev = t0, pr = t0;
                        long double all = 0;
                        for (int p = 0; p < k / 2; p++) {
                            float a0 = daz(bf(a[m * k + 2 * p])),
                                  a1 = daz(bf(a[m * k + 2 * p + 1]));
                            float b0 = daz(bf(b[p * 32 + 2 * j])),
                                  b1 = daz(bf(b[p * 32 + 2 * j + 1]));
                            odd = step(a0, b0, step(a1, b1, odd));
                            ev = step(a1, b1, step(a0, b0, ev));
                            long double s = (long double)a0 * b0 + (long double)a1 * b1;
                            pr = daz((float)((long double)pr + (long double)(float)s));
                            all += s;
                        }
                        float r = c[m * 16 + j], on = daz(t0 + daz((float)all));
                        n++;
                        chain += same(r, odd);
                        even += same(r, ev);
                        pair += same(r, pr);
                        once += same(r, on);
                        nan += !!isnan(r) != !!isnan(odd);
                    }
            }
            printf("%s inputs, K = %2d per instruction, %ld results: docs/exec.md's chain %.1f %%, "
                   "even product first %.1f %%, each pair's sum rounded then added %.1f %%, "
                   "the products' sum rounded then added %.1f %%; NaN where the chain is not "
                   "(or not where it is) %.1f %%\n",
                   wide ? "wide" : "normal", k, n, 100.0 * chain / n, 100.0 * even / n,
                   100.0 * pair / n, 100.0 * once / n, 100.0 * nan / n);
        }
    return 0;
}
