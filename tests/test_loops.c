/* Compiled while loops (src/compiler/loop.h): each loop's condition and body run as executables
 * of their own (fused, native or fast kernels, the state updated in place where safe). Every
 * program gives the same bits as the evaluator's loop (reference_kernels) at 1, 2, 3 and 8
 * threads, with native code on and off: a scan with a dot and a dynamic-update-slice, threefry's
 * u32 rounds, a state whose elements swap and pass through, a single-array state with a reduce in
 * the condition, a nested tuple state, nested loops (also deeper than CC_LOOP_MAX_DEPTH, where
 * the innermost run in the evaluator), a conditional inside a body, and recurrent scans of
 * several sizes whose dots keep their packed weights across iterations (test_rnn_scans). The
 * profile shows the kernels of the body, not one "control" kernel. */
#include "compiler/loop.h"
#include "optitpu/exec.h"
#include "optitpu/runtime.h"
#include "ot_test.h"

#include <math.h>
#include <stdlib.h>

/* h <- tanh(h W + x_i); ys[i] <- h (a forward RNN as jax.lax.scan lowers it) */
static const char *k_scan =
    "HloModule scan\n"
    "cond {\n"
    "  s = (s32[], f32[48,80], f32[80,80], f32[7,48,80], f32[7,48,80]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  n = s32[] constant(7)\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT\n"
    "}\n"
    "body {\n"
    "  s = (s32[], f32[48,80], f32[80,80], f32[7,48,80], f32[7,48,80]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  h = f32[48,80] get-tuple-element(s), index=1\n"
    "  w = f32[80,80] get-tuple-element(s), index=2\n"
    "  xs = f32[7,48,80] get-tuple-element(s), index=3\n"
    "  ys = f32[7,48,80] get-tuple-element(s), index=4\n"
    "  z = s32[] constant(0)\n"
    "  x3 = f32[1,48,80] dynamic-slice(xs, i, z, z), dynamic_slice_sizes={1,48,80}\n"
    "  x = f32[48,80] reshape(x3)\n"
    "  d = f32[48,80] dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  a = f32[48,80] add(d, x)\n"
    "  h2 = f32[48,80] tanh(a)\n"
    "  h3 = f32[1,48,80] reshape(h2)\n"
    "  ys2 = f32[7,48,80] dynamic-update-slice(ys, h3, i, z, z)\n"
    "  one = s32[] constant(1)\n"
    "  i2 = s32[] add(i, one)\n"
    "  ROOT t = (s32[], f32[48,80], f32[80,80], f32[7,48,80], f32[7,48,80]) "
    "tuple(i2, h2, w, xs, ys2)\n"
    "}\n"
    "ENTRY main {\n"
    "  h0 = f32[48,80] parameter(0)\n"
    "  w = f32[80,80] parameter(1)\n"
    "  xs = f32[7,48,80] parameter(2)\n"
    "  zero = f32[] constant(0)\n"
    "  ys = f32[7,48,80] broadcast(zero), dimensions={}\n"
    "  z = s32[] constant(0)\n"
    "  t = (s32[], f32[48,80], f32[80,80], f32[7,48,80], f32[7,48,80]) tuple(z, h0, w, xs, ys)\n"
    "  r = (s32[], f32[48,80], f32[80,80], f32[7,48,80], f32[7,48,80]) while(t), "
    "condition=cond, body=body\n"
    "  hf = f32[48,80] get-tuple-element(r), index=1\n"
    "  yf = f32[7,48,80] get-tuple-element(r), index=4\n"
    "  ROOT o = (f32[48,80], f32[7,48,80]) tuple(hf, yf)\n"
    "}\n";

/* Framed windows as a fori_loop lowers them (xla_compare's "sliding windows"): per step i, a
 * dynamic-slice of the signal at i * 8 - 4 (negative at first, past the end at last: clamped),
 * times a window, summed into e[i + 3] and written into frames[2 - i] by dynamic-update-slices
 * (their starts too clamped at the ends); both
 * outputs start as broadcast zeros, which the loop's state takes in place (loop_state_in_place:
 * the zeros are written into the loop's own output, not copied into it). */
static const char *k_windows =
    "HloModule windows\n"
    "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
    "cond {\n"
    "  s = (s32[], f32[25], f32[25,16], f32[200], f32[16]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  n = s32[] constant(25)\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT\n"
    "}\n"
    "body {\n"
    "  s = (s32[], f32[25], f32[25,16], f32[200], f32[16]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  e = f32[25] get-tuple-element(s), index=1\n"
    "  fr = f32[25,16] get-tuple-element(s), index=2\n"
    "  sig = f32[200] get-tuple-element(s), index=3\n"
    "  win = f32[16] get-tuple-element(s), index=4\n"
    "  hop = s32[] constant(8)\n"
    "  four = s32[] constant(4)\n"
    "  ih = s32[] multiply(i, hop)\n"
    "  st = s32[] subtract(ih, four)\n"
    "  d = f32[16] dynamic-slice(sig, st), dynamic_slice_sizes={16}\n"
    "  f = f32[16] multiply(d, win)\n"
    "  f2 = f32[16] multiply(f, f)\n"
    "  z = f32[] constant(0)\n"
    "  en = f32[] reduce(f2, z), dimensions={0}, to_apply=add\n"
    "  en1 = f32[1] reshape(en)\n"
    "  three = s32[] constant(3)\n"
    "  ip = s32[] add(i, three)\n"
    "  e2 = f32[25] dynamic-update-slice(e, en1, ip)\n"
    "  f1 = f32[1,16] reshape(f)\n"
    "  zi = s32[] constant(0)\n"
    "  two = s32[] constant(2)\n"
    "  im = s32[] subtract(two, i)\n"
    "  fr2 = f32[25,16] dynamic-update-slice(fr, f1, im, zi)\n"
    "  one = s32[] constant(1)\n"
    "  i2 = s32[] add(i, one)\n"
    "  ROOT t = (s32[], f32[25], f32[25,16], f32[200], f32[16]) tuple(i2, e2, fr2, sig, win)\n"
    "}\n"
    "ENTRY main {\n"
    "  sig = f32[200] parameter(0)\n"
    "  win = f32[16] parameter(1)\n"
    "  zero = f32[] constant(0)\n"
    "  e0 = f32[25] broadcast(zero), dimensions={}\n"
    "  fr0 = f32[25,16] broadcast(zero), dimensions={}\n"
    "  z = s32[] constant(0)\n"
    "  t = (s32[], f32[25], f32[25,16], f32[200], f32[16]) tuple(z, e0, fr0, sig, win)\n"
    "  r = (s32[], f32[25], f32[25,16], f32[200], f32[16]) while(t), condition=cond, body=body\n"
    "  e = f32[25] get-tuple-element(r), index=1\n"
    "  fr = f32[25,16] get-tuple-element(r), index=2\n"
    "  ROOT o = (f32[25], f32[25,16]) tuple(e, fr)\n"
    "}\n";

/* k_scan's loop unrolled at the top level: the same kernels (dot, tanh, slices) as the body runs,
 * which the compiled loop must match bit for bit (the fast dot's summation order differs from
 * the evaluator's, docs/runtime.md, so the evaluator is matched within a tolerance only). */
static void unrolled_scan(char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap,
                                "HloModule unrolled\n"
                                "ENTRY main {\n"
                                "  h0 = f32[48,80] parameter(0)\n"
                                "  w = f32[80,80] parameter(1)\n"
                                "  xs = f32[7,48,80] parameter(2)\n");
    for (int i = 0; i < 7; i++)
        n += (size_t)snprintf(
            buf + n, cap - n,
            "  x3.%d = f32[1,48,80] slice(xs), slice={[%d:%d], [0:48], [0:80]}\n"
            "  x.%d = f32[48,80] reshape(x3.%d)\n"
            "  d.%d = f32[48,80] dot(h%d, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
            "  a.%d = f32[48,80] add(d.%d, x.%d)\n"
            "  h%d = f32[48,80] tanh(a.%d)\n"
            "  y.%d = f32[1,48,80] reshape(h%d)\n",
            i, i, i + 1, i, i, i, i, i, i, i, i + 1, i, i, i + 1);
    snprintf(buf + n, cap - n,
             "  ys = f32[7,48,80] concatenate(y.0, y.1, y.2, y.3, y.4, y.5, y.6), dimensions={0}\n"
             "  ROOT o = (f32[48,80], f32[7,48,80]) tuple(h7, ys)\n"
             "}\n");
}

/* A recurrent scan of any size, as jax.lax.scan lowers an LSTM-like cell: per step t,
 * g = x_t Wx + h Wh (weights the body passes through unchanged: the loop's invariant leaves, whose
 * packed copies the dots keep across iterations), c' = logistic(g_f) c + tanh(g_i),
 * h' = tanh(c' V^T) (V read transposed where it lies) and V' = V / 2 (a weight that changes every
 * iteration, updated in place: a packed copy kept from an earlier iteration would give other
 * bits), ys[t] = h'. `nested` carries (h, c) as a tuple inside the state. `unrolled`: the same
 * steps at the top level (static slices, a concatenate), whose kernels the loop must match bit
 * for bit. */
static void rnn_module(char *buf, size_t cap, int T, int B, int I, int H, bool nested,
                       bool unrolled) {
    char st[512], hc[64];
    snprintf(hc, sizeof hc, "(f32[%d,%d], f32[%d,%d])", B, H, B, H);
    if (nested)
        snprintf(st, sizeof st,
                 "(s32[], %s, f32[%d,%d], f32[%d,%d], f32[%d,%d,%d], f32[%d,%d,%d], f32[%d,%d])",
                 hc, I, 2 * H, H, 2 * H, T, B, I, T, B, H, H, H);
    else
        snprintf(st, sizeof st,
                 "(s32[], f32[%d,%d], f32[%d,%d], f32[%d,%d], f32[%d,%d], f32[%d,%d,%d], "
                 "f32[%d,%d,%d], f32[%d,%d])",
                 B, H, B, H, I, 2 * H, H, 2 * H, T, B, I, T, B, H, H, H);
    size_t n = (size_t)snprintf(buf, cap, "HloModule rnn\n");
#define P(...) (n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__))
    /* one step from h%s, c%s, v%s (suffix a) to h%s, c%s, v%s (suffix b) on x%s */
#define STEP(a, b, x)                                                                              \
    do {                                                                                           \
        P("  gx%s = f32[%d,%d] dot(x%s, wx), lhs_contracting_dims={1}, "                           \
          "rhs_contracting_dims={0}\n",                                                            \
          b, B, 2 * H, x);                                                                         \
        P("  gh%s = f32[%d,%d] dot(h%s, wh), lhs_contracting_dims={1}, "                           \
          "rhs_contracting_dims={0}\n",                                                            \
          b, B, 2 * H, a);                                                                         \
        P("  g%s = f32[%d,%d] add(gx%s, gh%s)\n", b, B, 2 * H, b, b);                              \
        P("  gi%s = f32[%d,%d] slice(g%s), slice={[0:%d], [0:%d]}\n", b, B, H, b, B, H);           \
        P("  gf%s = f32[%d,%d] slice(g%s), slice={[0:%d], [%d:%d]}\n", b, B, H, b, B, H, 2 * H);   \
        P("  f%s = f32[%d,%d] logistic(gf%s)\n", b, B, H, b);                                      \
        P("  fc%s = f32[%d,%d] multiply(f%s, c%s)\n", b, B, H, b, a);                              \
        P("  ti%s = f32[%d,%d] tanh(gi%s)\n", b, B, H, b);                                         \
        P("  c%s = f32[%d,%d] add(fc%s, ti%s)\n", b, B, H, b, b);                                  \
        P("  hv%s = f32[%d,%d] dot(c%s, v%s), lhs_contracting_dims={1}, "                          \
          "rhs_contracting_dims={1}\n",                                                            \
          b, B, H, b, a);                                                                          \
        P("  h%s = f32[%d,%d] tanh(hv%s)\n", b, B, H, b);                                          \
        P("  half%s = f32[] constant(0.5)\n", b);                                                  \
        P("  hb%s = f32[%d,%d] broadcast(half%s), dimensions={}\n", b, H, H, b);                   \
        P("  v%s = f32[%d,%d] multiply(v%s, hb%s)\n", b, H, H, a, b);                              \
    } while (0)
    if (!unrolled) {
        P("cond {\n  s = %s parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n"
          "  n = s32[] constant(%d)\n  ROOT lt = pred[] compare(i, n), direction=LT\n}\n",
          st, T);
        P("body {\n  s = %s parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n", st);
        int o = 1;
        if (nested) {
            P("  hc = %s get-tuple-element(s), index=1\n", hc);
            P("  h0 = f32[%d,%d] get-tuple-element(hc), index=0\n", B, H);
            P("  c0 = f32[%d,%d] get-tuple-element(hc), index=1\n", B, H);
            o = 2;
        } else {
            P("  h0 = f32[%d,%d] get-tuple-element(s), index=1\n", B, H);
            P("  c0 = f32[%d,%d] get-tuple-element(s), index=2\n", B, H);
            o = 3;
        }
        P("  wx = f32[%d,%d] get-tuple-element(s), index=%d\n", I, 2 * H, o);
        P("  wh = f32[%d,%d] get-tuple-element(s), index=%d\n", H, 2 * H, o + 1);
        P("  xs = f32[%d,%d,%d] get-tuple-element(s), index=%d\n", T, B, I, o + 2);
        P("  ys = f32[%d,%d,%d] get-tuple-element(s), index=%d\n", T, B, H, o + 3);
        P("  v0 = f32[%d,%d] get-tuple-element(s), index=%d\n", H, H, o + 4);
        P("  z = s32[] constant(0)\n");
        P("  x3 = f32[1,%d,%d] dynamic-slice(xs, i, z, z), dynamic_slice_sizes={1,%d,%d}\n", B, I,
          B, I);
        P("  x0 = f32[%d,%d] reshape(x3)\n", B, I);
        STEP("0", "1", "0");
        P("  y3 = f32[1,%d,%d] reshape(h1)\n", B, H);
        P("  ys2 = f32[%d,%d,%d] dynamic-update-slice(ys, y3, i, z, z)\n", T, B, H);
        P("  one = s32[] constant(1)\n  i2 = s32[] add(i, one)\n");
        if (nested)
            P("  hc2 = %s tuple(h1, c1)\n  ROOT t = %s tuple(i2, hc2, wx, wh, xs, ys2, v1)\n}\n",
              hc, st);
        else
            P("  ROOT t = %s tuple(i2, h1, c1, wx, wh, xs, ys2, v1)\n}\n", st);
    }
    P("ENTRY main {\n  h0 = f32[%d,%d] parameter(0)\n  c0 = f32[%d,%d] parameter(1)\n", B, H, B, H);
    P("  wx = f32[%d,%d] parameter(2)\n  wh = f32[%d,%d] parameter(3)\n", I, 2 * H, H, 2 * H);
    P("  xs = f32[%d,%d,%d] parameter(4)\n  v0 = f32[%d,%d] parameter(5)\n", T, B, I, H, H);
    char res[256];
    snprintf(res, sizeof res, "(f32[%d,%d], f32[%d,%d], f32[%d,%d,%d], f32[%d,%d])", B, H, B, H, T,
             B, H, H, H);
    if (unrolled) {
        char a[16], b[16];
        for (int t = 0; t < T; t++) {
            snprintf(a, sizeof a, "%d", t);
            snprintf(b, sizeof b, "%d", t + 1);
            P("  xs%d = f32[1,%d,%d] slice(xs), slice={[%d:%d], [0:%d], [0:%d]}\n", t, B, I, t,
              t + 1, B, I);
            P("  x%d = f32[%d,%d] reshape(xs%d)\n", t, B, I, t);
            STEP(a, b, a);
            P("  y%d = f32[1,%d,%d] reshape(h%d)\n", t, B, H, t + 1);
        }
        P("  ys = f32[%d,%d,%d] concatenate(", T, B, H);
        for (int t = 0; t < T; t++) P("%sy%d", t ? ", " : "", t);
        P("), dimensions={0}\n  ROOT o = %s tuple(h%d, c%d, ys, v%d)\n}\n", res, T, T, T);
    } else {
        P("  zero = f32[] constant(0)\n  ys = f32[%d,%d,%d] broadcast(zero), dimensions={}\n", T, B,
          H);
        P("  z = s32[] constant(0)\n");
        if (nested)
            P("  hc = %s tuple(h0, c0)\n  t = %s tuple(z, hc, wx, wh, xs, ys, v0)\n", hc, st);
        else
            P("  t = %s tuple(z, h0, c0, wx, wh, xs, ys, v0)\n", st);
        P("  r = %s while(t), condition=cond, body=body\n", st);
        if (nested) {
            P("  hcf = %s get-tuple-element(r), index=1\n", hc);
            P("  hf = f32[%d,%d] get-tuple-element(hcf), index=0\n", B, H);
            P("  cf = f32[%d,%d] get-tuple-element(hcf), index=1\n", B, H);
        } else {
            P("  hf = f32[%d,%d] get-tuple-element(r), index=1\n", B, H);
            P("  cf = f32[%d,%d] get-tuple-element(r), index=2\n", B, H);
        }
        P("  yf = f32[%d,%d,%d] get-tuple-element(r), index=%d\n", T, B, H, nested ? 5 : 6);
        P("  vf = f32[%d,%d] get-tuple-element(r), index=%d\n", H, H, nested ? 6 : 7);
        P("  ROOT o = %s tuple(hf, cf, yf, vf)\n}\n", res);
    }
#undef STEP
#undef P
}

/* threefry2x32's rounds as jax.random lowers them: a loop over u32 arrays (the condition and
 * body, shared by the modules below) */
#define THREEFRY_COND_BODY                                                                         \
    "cond {\n"                                                                                     \
    "  s = (s32[], u32[3001], u32[3001]) parameter(0)\n"                                           \
    "  i = s32[] get-tuple-element(s), index=0\n"                                                  \
    "  n = s32[] constant(5)\n"                                                                    \
    "  ROOT lt = pred[] compare(i, n), direction=LT\n"                                             \
    "}\n"                                                                                          \
    "body {\n"                                                                                     \
    "  s = (s32[], u32[3001], u32[3001]) parameter(0)\n"                                           \
    "  i = s32[] get-tuple-element(s), index=0\n"                                                  \
    "  x = u32[3001] get-tuple-element(s), index=1\n"                                              \
    "  y = u32[3001] get-tuple-element(s), index=2\n"                                              \
    "  x1 = u32[3001] add(x, y)\n"                                                                 \
    "  r = u32[] constant(13)\n"                                                                   \
    "  rb = u32[3001] broadcast(r), dimensions={}\n"                                               \
    "  l = u32[3001] shift-left(y, rb)\n"                                                          \
    "  c = u32[] constant(19)\n"                                                                   \
    "  cb = u32[3001] broadcast(c), dimensions={}\n"                                               \
    "  q = u32[3001] shift-right-logical(y, cb)\n"                                                 \
    "  y1 = u32[3001] or(l, q)\n"                                                                  \
    "  y2 = u32[3001] xor(y1, x1)\n"                                                               \
    "  iu = u32[] convert(i)\n"                                                                    \
    "  ib = u32[3001] broadcast(iu), dimensions={}\n"                                              \
    "  x2 = u32[3001] add(x1, ib)\n"                                                               \
    "  one = s32[] constant(1)\n"                                                                  \
    "  i2 = s32[] add(i, one)\n"                                                                   \
    "  ROOT t = (s32[], u32[3001], u32[3001]) tuple(i2, x2, y2)\n"                                 \
    "}\n"

/* the rounds in one loop */
static const char *k_threefry =
    "HloModule threefry\n" THREEFRY_COND_BODY "ENTRY main {\n"
    "  x = u32[3001] parameter(0)\n"
    "  y = u32[3001] parameter(1)\n"
    "  z = s32[] constant(0)\n"
    "  t = (s32[], u32[3001], u32[3001]) tuple(z, x, y)\n"
    "  r = (s32[], u32[3001], u32[3001]) while(t), condition=cond, body=body\n"
    "  a = u32[3001] get-tuple-element(r), index=1\n"
    "  b = u32[3001] get-tuple-element(r), index=2\n"
    "  ROOT o = (u32[3001], u32[3001]) tuple(a, b)\n"
    "}\n";

/* two while loops with one condition and body (compiled once, run by both kernels) */
static const char *k_twice =
    "HloModule twice\n" THREEFRY_COND_BODY "ENTRY main {\n"
    "  x = u32[3001] parameter(0)\n"
    "  y = u32[3001] parameter(1)\n"
    "  z = s32[] constant(0)\n"
    "  t = (s32[], u32[3001], u32[3001]) tuple(z, x, y)\n"
    "  r = (s32[], u32[3001], u32[3001]) while(t), condition=cond, body=body\n"
    "  a = u32[3001] get-tuple-element(r), index=1\n"
    "  b = u32[3001] get-tuple-element(r), index=2\n"
    "  t2 = (s32[], u32[3001], u32[3001]) tuple(z, b, a)\n"
    "  r2 = (s32[], u32[3001], u32[3001]) while(t2), condition=cond, body=body\n"
    "  a2 = u32[3001] get-tuple-element(r2), index=1\n"
    "  b2 = u32[3001] get-tuple-element(r2), index=2\n"
    "  ROOT o = (u32[3001], u32[3001], u32[3001]) tuple(a, a2, b2)\n"
    "}\n";

/* (i, a, b, c, d) -> (i + 1, b, a, 2c + a, d): two elements swap (neither can be updated in
 * place: each buffer is read after the other's copy would write it), one is computed from
 * another and one passes through */
static const char *k_swap =
    "HloModule swap\n"
    "cond {\n"
    "  s = (s32[], f32[100], f32[100], f32[100], f32[100]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  n = s32[] constant(6)\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT\n"
    "}\n"
    "body {\n"
    "  s = (s32[], f32[100], f32[100], f32[100], f32[100]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  a = f32[100] get-tuple-element(s), index=1\n"
    "  b = f32[100] get-tuple-element(s), index=2\n"
    "  c = f32[100] get-tuple-element(s), index=3\n"
    "  d = f32[100] get-tuple-element(s), index=4\n"
    "  two = f32[] constant(2)\n"
    "  tb = f32[100] broadcast(two), dimensions={}\n"
    "  c1 = f32[100] multiply(c, tb)\n"
    "  c2 = f32[100] add(c1, a)\n"
    "  one = s32[] constant(1)\n"
    "  i2 = s32[] add(i, one)\n"
    "  ROOT t = (s32[], f32[100], f32[100], f32[100], f32[100]) tuple(i2, b, a, c2, d)\n"
    "}\n"
    "ENTRY main {\n"
    "  a = f32[100] parameter(0)\n"
    "  b = f32[100] parameter(1)\n"
    "  c = f32[100] parameter(2)\n"
    "  d = f32[100] parameter(3)\n"
    "  z = s32[] constant(0)\n"
    "  t = (s32[], f32[100], f32[100], f32[100], f32[100]) tuple(z, a, b, c, d)\n"
    "  r = (s32[], f32[100], f32[100], f32[100], f32[100]) while(t), condition=cond, body=body\n"
    "  x = f32[100] get-tuple-element(r), index=1\n"
    "  y = f32[100] get-tuple-element(r), index=2\n"
    "  w = f32[100] get-tuple-element(r), index=3\n"
    "  v = f32[100] get-tuple-element(r), index=4\n"
    "  ROOT o = (f32[100], f32[100], f32[100], f32[100]) tuple(x, y, w, v)\n"
    "}\n";

/* a single-array state; the condition reduces it (a called computation inside the part) */
static const char *k_array = "HloModule arr\n"
                             "sum {\n"
                             "  p = f32[] parameter(0)\n"
                             "  q = f32[] parameter(1)\n"
                             "  ROOT r = f32[] add(p, q)\n"
                             "}\n"
                             "cond {\n"
                             "  x = f32[500] parameter(0)\n"
                             "  z = f32[] constant(0)\n"
                             "  m = f32[] reduce(x, z), dimensions={0}, to_apply=sum\n"
                             "  n = f32[] constant(100000)\n"
                             "  ROOT lt = pred[] compare(m, n), direction=LT\n"
                             "}\n"
                             "body {\n"
                             "  x = f32[500] parameter(0)\n"
                             "  k = f32[] constant(1.37)\n"
                             "  kb = f32[500] broadcast(k), dimensions={}\n"
                             "  y = f32[500] multiply(x, kb)\n"
                             "  e = f32[500] exponential(x)\n"
                             "  s = f32[500] sine(e)\n"
                             "  ROOT r = f32[500] add(y, s)\n"
                             "}\n"
                             "ENTRY main {\n"
                             "  x = f32[500] parameter(0)\n"
                             "  ROOT r = f32[500] while(x), condition=cond, body=body\n"
                             "}\n";

/* a nested tuple state ((i, a), b) and a conditional in the body */
static const char *k_nested_tuple =
    "HloModule nt\n"
    "cond {\n"
    "  s = ((s32[], f32[64]), f32[64]) parameter(0)\n"
    "  p = (s32[], f32[64]) get-tuple-element(s), index=0\n"
    "  i = s32[] get-tuple-element(p), index=0\n"
    "  n = s32[] constant(9)\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT\n"
    "}\n"
    "even {\n"
    "  v = f32[64] parameter(0)\n"
    "  ROOT r = f32[64] negate(v)\n"
    "}\n"
    "odd {\n"
    "  v = f32[64] parameter(0)\n"
    "  ROOT r = f32[64] sqrt(v)\n"
    "}\n"
    "body {\n"
    "  s = ((s32[], f32[64]), f32[64]) parameter(0)\n"
    "  p = (s32[], f32[64]) get-tuple-element(s), index=0\n"
    "  i = s32[] get-tuple-element(p), index=0\n"
    "  a = f32[64] get-tuple-element(p), index=1\n"
    "  b = f32[64] get-tuple-element(s), index=1\n"
    "  two = s32[] constant(2)\n"
    "  k = s32[] remainder(i, two)\n"
    "  ab = f32[64] abs(a)\n"
    "  c = f32[64] conditional(k, ab, ab), branch_computations={even, odd}\n"
    "  b2 = f32[64] add(b, c)\n"
    "  one = s32[] constant(1)\n"
    "  i2 = s32[] add(i, one)\n"
    "  p2 = (s32[], f32[64]) tuple(i2, b)\n"
    "  ROOT t = ((s32[], f32[64]), f32[64]) tuple(p2, b2)\n"
    "}\n"
    "ENTRY main {\n"
    "  a = f32[64] parameter(0)\n"
    "  b = f32[64] parameter(1)\n"
    "  z = s32[] constant(0)\n"
    "  p = (s32[], f32[64]) tuple(z, a)\n"
    "  t = ((s32[], f32[64]), f32[64]) tuple(p, b)\n"
    "  r = ((s32[], f32[64]), f32[64]) while(t), condition=cond, body=body\n"
    "  ROOT o = f32[64] get-tuple-element(r), index=1\n"
    "}\n";

/* A conditional at the top level: a pred from the data picks a branch of a dot and a tanh
 * over a tuple operand, or an elementwise branch over an array; DIR flips the compare, so the
 * two modules run one branch each. */
#define COND_PRED(DIR)                                                                             \
    "HloModule cp\n"                                                                               \
    "sum {\n"                                                                                      \
    "  a = f32[] parameter(0)\n"                                                                   \
    "  b = f32[] parameter(1)\n"                                                                   \
    "  ROOT s = f32[] add(a, b)\n"                                                                 \
    "}\n"                                                                                          \
    "yes {\n"                                                                                      \
    "  t = (f32[64,48], f32[48,40]) parameter(0)\n"                                                \
    "  a = f32[64,48] get-tuple-element(t), index=0\n"                                             \
    "  w = f32[48,40] get-tuple-element(t), index=1\n"                                             \
    "  d = f32[64,40] dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"             \
    "  ROOT r = f32[64,40] tanh(d)\n"                                                              \
    "}\n"                                                                                          \
    "no {\n"                                                                                       \
    "  v = f32[64,40] parameter(0)\n"                                                              \
    "  two = f32[] constant(2)\n"                                                                  \
    "  tb = f32[64,40] broadcast(two), dimensions={}\n"                                            \
    "  n = f32[64,40] negate(v)\n"                                                                 \
    "  ROOT r = f32[64,40] multiply(n, tb)\n"                                                      \
    "}\n"                                                                                          \
    "ENTRY main {\n"                                                                               \
    "  a = f32[64,48] parameter(0)\n"                                                              \
    "  w = f32[48,40] parameter(1)\n"                                                              \
    "  v = f32[64,40] parameter(2)\n"                                                              \
    "  z = f32[] constant(0)\n"                                                                    \
    "  s = f32[] reduce(a, z), dimensions={0,1}, to_apply=sum\n"                                   \
    "  p = pred[] compare(s, z), direction=" DIR "\n"                                              \
    "  t = (f32[64,48], f32[48,40]) tuple(a, w)\n"                                                 \
    "  ROOT c = f32[64,40] conditional(p, t, v), true_computation=yes, false_computation=no\n"     \
    "}\n"

/* An index conditional of three branches (one returning its operand as it is) with tuple
 * results; K is added to an index from the data that is 0, so K = 3 and -1 are out of range
 * (the last branch). */
#define COND_INDEX(K)                                                                              \
    "HloModule ci\n"                                                                               \
    "b0 {\n"                                                                                       \
    "  v = f32[300] parameter(0)\n"                                                                \
    "  e = f32[300] exponential(v)\n"                                                              \
    "  ROOT t = (f32[300], f32[300]) tuple(e, v)\n"                                                \
    "}\n"                                                                                          \
    "b1 {\n"                                                                                       \
    "  v = f32[300] parameter(0)\n"                                                                \
    "  s = f32[300] sine(v)\n"                                                                     \
    "  c = f32[300] cosine(v)\n"                                                                   \
    "  ROOT t = (f32[300], f32[300]) tuple(s, c)\n"                                                \
    "}\n"                                                                                          \
    "b2 {\n"                                                                                       \
    "  v = f32[300] parameter(0)\n"                                                                \
    "  ROOT t = (f32[300], f32[300]) tuple(v, v)\n"                                                \
    "}\n"                                                                                          \
    "ENTRY main {\n"                                                                               \
    "  x = f32[300] parameter(0)\n"                                                                \
    "  x0 = f32[1] slice(x), slice={[0:1]}\n"                                                      \
    "  small = f32[1] constant({0.0001})\n"                                                        \
    "  m = f32[1] multiply(x0, small)\n"                                                           \
    "  r = f32[] reshape(m)\n"                                                                     \
    "  i = s32[] convert(r)\n"                                                                     \
    "  k = s32[] constant(" K ")\n"                                                                \
    "  j = s32[] add(i, k)\n"                                                                      \
    "  c = (f32[300], f32[300]) conditional(j, x, x, x), branch_computations={b0, b1, b2}\n"       \
    "  g0 = f32[300] get-tuple-element(c), index=0\n"                                              \
    "  g1 = f32[300] get-tuple-element(c), index=1\n"                                              \
    "  ROOT o = f32[300] add(g0, g1)\n"                                                            \
    "}\n"

/* Loops nested `depth` deep, each running 3 iterations of x <- x * 0.75 + sin(x) around the
 * next; written into buf. */
static void nested_module(int depth, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "HloModule nest\n");
    for (int d = depth - 1; d >= 0; d--) {
        n += (size_t)snprintf(buf + n, cap - n,
                              "cond%d {\n"
                              "  s = (s32[], f32[33]) parameter(0)\n"
                              "  i = s32[] get-tuple-element(s), index=0\n"
                              "  k = s32[] constant(3)\n"
                              "  ROOT lt = pred[] compare(i, k), direction=LT\n"
                              "}\n"
                              "body%d {\n"
                              "  s = (s32[], f32[33]) parameter(0)\n"
                              "  i = s32[] get-tuple-element(s), index=0\n"
                              "  x = f32[33] get-tuple-element(s), index=1\n"
                              "  h = f32[] constant(0.75)\n"
                              "  hb = f32[33] broadcast(h), dimensions={}\n"
                              "  m = f32[33] multiply(x, hb)\n"
                              "  sn = f32[33] sine(x)\n"
                              "  x1 = f32[33] add(m, sn)\n",
                              d, d);
        if (d + 1 < depth)
            n +=
                (size_t)snprintf(buf + n, cap - n,
                                 "  z = s32[] constant(0)\n"
                                 "  t0 = (s32[], f32[33]) tuple(z, x1)\n"
                                 "  w = (s32[], f32[33]) while(t0), condition=cond%d, body=body%d\n"
                                 "  x2 = f32[33] get-tuple-element(w), index=1\n",
                                 d + 1, d + 1);
        else
            n += (size_t)snprintf(buf + n, cap - n, "  x2 = f32[33] negate(x1)\n");
        n += (size_t)snprintf(buf + n, cap - n,
                              "  one = s32[] constant(1)\n"
                              "  i2 = s32[] add(i, one)\n"
                              "  ROOT t = (s32[], f32[33]) tuple(i2, x2)\n"
                              "}\n");
    }
    snprintf(buf + n, cap - n,
             "ENTRY main {\n"
             "  x = f32[33] parameter(0)\n"
             "  z = s32[] constant(0)\n"
             "  t = (s32[], f32[33]) tuple(z, x)\n"
             "  w = (s32[], f32[33]) while(t), condition=cond0, body=body0\n"
             "  ROOT r = f32[33] get-tuple-element(w), index=1\n"
             "}\n");
}

static ot_executable *compile_text(const char *text, ot_native_mode native) {
    ot_module *m = NULL;
    if (ot_hlo_parse(text, strlen(text), NULL, &m) != OT_OK) {
        fprintf(stderr, "parse: %s\n", ot_last_error());
        return NULL;
    }
    ot_compile_options o = ot_compile_options_default();
    o.native = native;
    ot_executable *e = NULL;
    if (ot_compile(m, &o, &e) != OT_OK) fprintf(stderr, "compile: %s\n", ot_last_error());
    ot_module_free(m);
    return e;
}

/* Runs e on deterministic inputs (small floats, or random u32 bits) and returns its outputs'
 * bytes concatenated (ot_malloc'd), *n their size; NULL on failure. */
static uint8_t *run(const ot_executable *e, ot_threadpool *pool, bool reference, ot_profile *prof,
                    size_t *nbytes) {
    ot_device *d = NULL;
    if (ot_host_device_create(0, 0, &d) != OT_OK) return NULL;
    int np = ot_executable_param_count(e), no = ot_executable_output_count(e);
    ot_buffer *in[8] = {0}, *out[8] = {0};
    uint8_t *res = NULL;
    size_t total = 0;
    bool ok = np <= 8 && no <= 8;
    uint64_t seed = 12345;
    for (int k = 0; ok && k < np; k++) {
        const ot_slot *s = ot_executable_slot(e, ot_executable_param_slot(e, k));
        int64_t numel = ot_shape_numel_unchecked(&s->shape);
        void *data = ot_malloc((size_t)s->nbytes + 1);
        for (int64_t j = 0; j < numel; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t bits = (uint32_t)(seed >> 32);
            if (s->shape.dtype == OT_F32)
                ((float *)data)[j] = (float)((int)(bits % 2001) - 1000) / 1000.0f;
            else
                ((uint32_t *)data)[j] = bits;
        }
        ot_tensor t;
        ot_tensor_borrow(&t, &s->shape, data);
        ok = ot_buffer_from_host(d, &t, &in[k]) == OT_OK;
        ot_free(data);
    }
    ot_run_options ro = ot_run_options_default();
    ro.pool = pool;
    ro.reference_kernels = reference;
    ro.profile = prof;
    if (ok && ot_device_execute(d, e, in, np, out, no, &ro, NULL) != OT_OK) {
        fprintf(stderr, "execute: %s\n", ot_last_error());
        ok = false;
    }
    for (int k = 0; ok && k < no; k++) {
        ot_tensor t;
        if (ot_buffer_to_host(out[k], &t) != OT_OK) {
            ok = false;
            break;
        }
        size_t nb = ot_shape_nbytes_unchecked(&t.shape);
        uint8_t *r = ot_realloc(res, total + nb + 1);
        if (r) {
            res = r;
            memcpy(res + total, t.data, nb);
            total += nb;
        } else {
            ok = false;
        }
        ot_tensor_release(&t);
    }
    for (int k = 0; k < 8; k++) {
        ot_buffer_free(in[k]);
        ot_buffer_free(out[k]);
    }
    ot_device_free(d);
    if (!ok) {
        ot_free(res);
        return NULL;
    }
    *nbytes = total;
    return res;
}

/* A max-plus step as JAX lowers a Viterbi scan: per iteration an argmax over dim 1 of
 * broadcast(h) + broadcast(w) whose index operand is broadcast(iota), and h scaled by exp(v).
 * licm moves broadcast(iota) and broadcast(exp(v)) in front of the loop as state leaves 5 and
 * 6, which the compiled body passes through (never written). */
static const char *k_invariant =
    "HloModule invariant\n"
    "am {\n  a = f32[] parameter(0)\n  ai = s32[] parameter(1)\n"
    "  b = f32[] parameter(2)\n  bi = s32[] parameter(3)\n"
    "  ge = pred[] compare(a, b), direction=GE\n  m = f32[] select(ge, a, b)\n"
    "  k = s32[] select(ge, ai, bi)\n  ROOT t = (f32[], s32[]) tuple(m, k)\n}\n"
    "cond {\n  p = (s32[], f32[32,48], f32[48,48], f32[48], s32[9,32,48]) parameter(0)\n"
    "  i = s32[] get-tuple-element(p), index=0\n  n = s32[] constant(9)\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT\n}\n"
    "body {\n  p = (s32[], f32[32,48], f32[48,48], f32[48], s32[9,32,48]) parameter(0)\n"
    "  i = s32[] get-tuple-element(p), index=0\n"
    "  h = f32[32,48] get-tuple-element(p), index=1\n"
    "  w = f32[48,48] get-tuple-element(p), index=2\n"
    "  v = f32[48] get-tuple-element(p), index=3\n"
    "  bp = s32[9,32,48] get-tuple-element(p), index=4\n"
    "  hb = f32[32,48,48] broadcast(h), dimensions={0,1}\n"
    "  wb = f32[32,48,48] broadcast(w), dimensions={1,2}\n"
    "  c = f32[32,48,48] add(hb, wb)\n"
    "  io = s32[48] iota(), iota_dimension=0\n"
    "  ib = s32[32,48,48] broadcast(io), dimensions={1}\n"
    "  ninf = f32[] constant(-inf)\n  z = s32[] constant(0)\n"
    "  r = (f32[32,48], s32[32,48]) reduce(c, ib, ninf, z), dimensions={1}, to_apply=am\n"
    "  mx = f32[32,48] get-tuple-element(r), index=0\n"
    "  idx = s32[32,48] get-tuple-element(r), index=1\n"
    "  e = f32[48] exponential(v)\n  eb = f32[32,48] broadcast(e), dimensions={1}\n"
    "  h2 = f32[32,48] multiply(mx, eb)\n"
    "  idx3 = s32[1,32,48] reshape(idx)\n"
    "  bp2 = s32[9,32,48] dynamic-update-slice(bp, idx3, i, z, z)\n"
    "  one = s32[] constant(1)\n  i2 = s32[] add(i, one)\n"
    "  ROOT t = (s32[], f32[32,48], f32[48,48], f32[48], s32[9,32,48]) "
    "tuple(i2, h2, w, v, bp2)\n}\n"
    "ENTRY main {\n  h0 = f32[32,48] parameter(0)\n  w = f32[48,48] parameter(1)\n"
    "  v = f32[48] parameter(2)\n  z = s32[] constant(0)\n"
    "  bp = s32[9,32,48] broadcast(z), dimensions={}\n"
    "  t = (s32[], f32[32,48], f32[48,48], f32[48], s32[9,32,48]) tuple(z, h0, w, v, bp)\n"
    "  r = (s32[], f32[32,48], f32[48,48], f32[48], s32[9,32,48]) while(t), "
    "condition=cond, body=body\n"
    "  hf = f32[32,48] get-tuple-element(r), index=1\n"
    "  bf = s32[9,32,48] get-tuple-element(r), index=4\n"
    "  ROOT o = (f32[32,48], s32[9,32,48]) tuple(hf, bf)\n}\n";

/* The compiled loops give the bits of `same` (NULL: the evaluator's) at every thread count,
 * native code on and off; with `same`, the evaluator's values within rel_tol (relative to the
 * largest magnitude). */
static void check_against(const char *name, const char *text, const char *same_as, double rel_tol) {
    static const int threads[] = {1, 2, 3, 8};
    static const ot_native_mode modes[] = {OT_NATIVE_ON, OT_NATIVE_OFF};
    for (size_t mi = 0; mi < 2; mi++) {
        ot_executable *e = compile_text(text, modes[mi]);
        ASSERT_TRUE(e != NULL);
        int loops = 0; /* compiled while loops and conditionals */
        for (int k = 0; k < ot_executable_kernel_count(e); k++)
            loops += cc_executable_loop(e, k) || cc_executable_cond(e, k);
        EXPECT_TRUE(loops > 0);
        ot_threadpool *p1 = NULL;
        ASSERT_OK(ot_threadpool_create(1, &p1));
        size_t nref = 0;
        uint8_t *ref = run(e, p1, true, NULL, &nref);
        if (same_as && ref) {
            /* the evaluator within the tolerance, then the top-level kernels' bits */
            ot_executable *u = compile_text(same_as, modes[mi]);
            ASSERT_TRUE(u != NULL);
            size_t nu = 0;
            uint8_t *fast = run(u, p1, false, NULL, &nu);
            ot_executable_free(u);
            ASSERT_TRUE(fast != NULL && nu == nref);
            const float *a = (const float *)ref, *b = (const float *)fast;
            double big = 0, err = 0;
            for (size_t j = 0; j < nref / 4; j++) {
                if (fabs(a[j]) > big) big = fabs(a[j]);
                if (fabs(a[j] - b[j]) > err) err = fabs(a[j] - b[j]);
            }
            if (err > rel_tol * big) fprintf(stderr, "%s: error %g of %g\n", name, err, big);
            EXPECT_TRUE(err <= rel_tol * big);
            ot_free(ref);
            ref = fast;
        }
        ot_threadpool_free(p1);
        ASSERT_TRUE(ref != NULL);
        for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
            ot_threadpool *p = NULL;
            ASSERT_OK(ot_threadpool_create(threads[ti], &p));
            size_t n = 0;
            uint8_t *got = run(e, p, false, NULL, &n);
            ot_threadpool_free(p);
            EXPECT_TRUE(got != NULL);
            if (got) {
                EXPECT_TRUE(n == nref);
                bool same = n == nref && !memcmp(got, ref, n);
                if (!same)
                    fprintf(stderr, "%s: %d threads, native %s: bits differ from %s\n", name,
                            threads[ti], mi == 0 ? "on" : "off",
                            same_as ? "the top-level kernels" : "the evaluator");
                EXPECT_TRUE(same);
            }
            ot_free(got);
        }
        ot_free(ref);
        ot_executable_free(e);
    }
}

static void check_program(const char *name, const char *text) {
    check_against(name, text, NULL, 0);
}

static void test_scan(void) {
    static char buf[1 << 14];
    unrolled_scan(buf, sizeof buf);
    check_against("scan", k_scan, buf, 1e-3); /* 7 dots of K = 80 (2·K·u·|A||B| each) */
}
static void test_threefry(void) {
    check_program("threefry", k_threefry);
}
static void test_shared_body(void) {
    check_program("twice", k_twice);
}
/* k_swap with an odd trip count and its swapped leaves computed at the top level: their temps
 * become the loop's own state (loop_state_in_place), so the evaluator's loop (reference kernels)
 * reads its inputs from the buffers it writes its results to. */
static void test_swap_and_pass_through(void) {
    check_program("swap", k_swap);
    static char buf[1 << 12];
    const char *t0 = strstr(k_swap, "  z = s32[] constant(0)\n");
    const char *n6 = strstr(k_swap, "constant(6)");
    ASSERT_TRUE(t0 != NULL && n6 != NULL && n6 < t0);
    const char *rest = strstr(t0, "  r = ");
    ASSERT_TRUE(rest != NULL);
    snprintf(buf, sizeof buf,
             "%.*sconstant(5)%.*s"
             "  z = s32[] constant(0)\n  h = f32[] constant(0.5)\n"
             "  hb = f32[100] broadcast(h), dimensions={}\n"
             "  a2 = f32[100] multiply(a, hb)\n  b2 = f32[100] add(b, hb)\n"
             "  t = (s32[], f32[100], f32[100], f32[100], f32[100]) tuple(z, a2, b2, c, d)\n%s",
             (int)(n6 - k_swap), k_swap, (int)(t0 - (n6 + 11)), n6 + 11, rest);
    check_program("swap from temps", buf);
    ot_executable *e = compile_text(buf, OT_NATIVE_OFF);
    ASSERT_TRUE(e != NULL);
    for (int k = 0; k < ot_executable_kernel_count(e); k++) {
        const ot_kernel *kn = ot_executable_kernel(e, k);
        if (kn->opcode != OT_OP_WHILE) continue;
        EXPECT_INT_EQ(kn->inputs[1], kn->outputs[1]);
        EXPECT_INT_EQ(kn->inputs[2], kn->outputs[2]);
    }
    ot_executable_free(e);
}
static void test_array_state(void) {
    check_program("array", k_array);
}
static void test_nested_tuple_and_conditional(void) {
    check_program("nested tuple", k_nested_tuple);
}

static void test_conditionals(void) {
    check_program("cond true", COND_PRED("GT"));
    check_program("cond false", COND_PRED("LE"));
    const char *ks[] = {"0", "1", "2", "3", "-1"};
    for (int q = 0; q < 5; q++) {
        char nm[32];
        snprintf(nm, sizeof nm, "cond index %s", ks[q]);
        static char buf[1 << 12];
        snprintf(buf, sizeof buf, COND_INDEX("%s"), ks[q]);
        check_program(nm, buf);
    }
}

/* The windows loop gives the evaluator's bits, and its zero-filled state is written where the
 * loop keeps it: the while kernel reads leaves 1 and 2 from the slots it writes them to; the
 * leaves it passes through and nothing reads afterwards are not copied (cc_loop.unread). */
static void test_windows_state_in_place(void) {
    check_program("windows", k_windows);
    ot_executable *e = compile_text(k_windows, OT_NATIVE_ON);
    ASSERT_TRUE(e != NULL);
    int seen = 0;
    for (int k = 0; k < ot_executable_kernel_count(e); k++) {
        const ot_kernel *kn = ot_executable_kernel(e, k);
        if (kn->opcode != OT_OP_WHILE) continue;
        seen++;
        ASSERT_TRUE(kn->ninputs == 5 && kn->noutputs == 5);
        EXPECT_INT_EQ(kn->inputs[1], kn->outputs[1]);
        EXPECT_INT_EQ(kn->inputs[2], kn->outputs[2]);
        EXPECT_TRUE(kn->inputs[3] != kn->outputs[3]); /* a parameter */
        /* the signal and the window pass through and nothing reads them after the loop: read
         * where they lie, never copied */
        const cc_loop *l = cc_executable_loop(e, k);
        ASSERT_TRUE(l != NULL);
        EXPECT_INT_EQ((int)(l->invariant & l->unread), 0x18);
    }
    EXPECT_INT_EQ(seen, 1);
    ot_executable_free(e);
    /* the signal also a result after the loop: copied out, the same bits */
    static char buf[1 << 13];
    const char *root = "  ROOT o = (f32[25], f32[25,16]) tuple(e, fr)\n";
    const char *at = strstr(k_windows, root);
    ASSERT_TRUE(at != NULL);
    snprintf(buf, sizeof buf,
             "%.*s  sg = f32[200] get-tuple-element(r), index=3\n"
             "  ROOT o = (f32[25], f32[25,16], f32[200]) tuple(e, fr, sg)\n}\n",
             (int)(at - k_windows), k_windows);
    check_program("windows, signal out", buf);
    /* the frames' dynamic-update-slice: its update written in place by the fusion computing it
     * (cc_executable_update_writer), so the slice's own kernel takes no time (its profile
     * record is empty) */
    e = compile_text(k_windows, OT_NATIVE_ON);
    ASSERT_TRUE(e != NULL);
    ot_profile *prof = NULL;
    ASSERT_OK(ot_profile_create(&prof));
    size_t n = 0;
    uint8_t *got = run(e, NULL, false, prof, &n);
    EXPECT_TRUE(got != NULL);
    ot_free(got);
    int fr2 = 0;
    for (int k = 0; k < ot_profile_kernel_count(prof); k++) {
        const ot_kernel_profile *kp = ot_profile_kernel(prof, k);
        if (strncmp(kp->name, "fr2", 3) != 0) continue;
        fr2++;
        EXPECT_INT_EQ((int)kp->calls, 25);
        EXPECT_TRUE(kp->total_ns == 0);
    }
    EXPECT_INT_EQ(fr2, 1);
    ot_profile_free(prof);
    ot_executable_free(e);
    ot_executable *e2 = compile_text(buf, OT_NATIVE_ON);
    ASSERT_TRUE(e2 != NULL);
    for (int k = 0; k < ot_executable_kernel_count(e2); k++) {
        const cc_loop *l = cc_executable_loop(e2, k);
        if (l) EXPECT_INT_EQ((int)(l->invariant & l->unread), 0x10);
    }
    ot_executable_free(e2);
}

/* Recurrent scans of several sizes (dots on one thread and split over the pool; T = 1 too), the
 * state flat and with a nested (h, c) tuple: the loop's bits are those of the same steps unrolled
 * at the top level at 1, 2, 3 and 8 threads, so the packed weights kept across iterations are
 * exactly what packing them again would give, and the weight that changes every iteration is
 * packed afresh. The invariant leaves are the weights and the inputs (flat state only: a nested
 * state is not updated in place, so nothing is kept). */
static void test_rnn_scans(void) {
    static const struct {
        int T, B, I, H;
        bool nested;
    } cs[] = {{5, 24, 20, 40, false},
              {9, 13, 33, 70, true},
              {3, 64, 64, 96, false},
              {1, 16, 8, 24, true},
              {4, 40, 96, 136, false}};
    static char loop[1 << 15], flat[1 << 18];
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        rnn_module(loop, sizeof loop, cs[c].T, cs[c].B, cs[c].I, cs[c].H, cs[c].nested, false);
        rnn_module(flat, sizeof flat, cs[c].T, cs[c].B, cs[c].I, cs[c].H, cs[c].nested, true);
        ASSERT_TRUE(strlen(loop) + 1 < sizeof loop && strlen(flat) + 1 < sizeof flat);
        ot_executable *e = compile_text(loop, OT_NATIVE_ON);
        ASSERT_TRUE(e != NULL);
        int seen = 0;
        for (int k = 0; k < ot_executable_kernel_count(e); k++) {
            const cc_loop *l = cc_executable_loop(e, k);
            if (!l) continue;
            seen++;
            /* (i, h, c, wx, wh, xs, ys, v): wx, wh and xs */
            uint64_t want = cs[c].nested ? 0 : 0x38;
            if (l->invariant != want)
                fprintf(stderr, "rnn %zu: invariant leaves %#llx, want %#llx\n", c,
                        (unsigned long long)l->invariant, (unsigned long long)want);
            EXPECT_TRUE(l->invariant == want);
        }
        EXPECT_INT_EQ(seen, 1);
        ot_executable_free(e);
        char nm[64];
        snprintf(nm, sizeof nm, "rnn T%d B%d I%d H%d%s", cs[c].T, cs[c].B, cs[c].I, cs[c].H,
                 cs[c].nested ? " nested" : "");
        check_against(nm, loop, flat, 1e-3);
    }
}

/* Nested loops, up to and past the compiled depth: the innermost beyond it run in the
 * evaluator, with the same results. */
static void test_nested_loops(void) {
    static char buf[1 << 16];
    for (int depth = 1; depth <= CC_LOOP_MAX_DEPTH + 2; depth++) {
        nested_module(depth, buf, sizeof buf);
        char nm[32];
        snprintf(nm, sizeof nm, "nested %d", depth);
        check_program(nm, buf);
    }
}

/* The profile of a compiled loop holds the kernels of its parts (the dot, the fusions), not one
 * "control" kernel. */
static void test_profile_shows_body(void) {
    ot_executable *e = compile_text(k_scan, OT_NATIVE_OFF);
    ASSERT_TRUE(e != NULL);
    ot_profile *prof = NULL;
    ASSERT_OK(ot_profile_create(&prof));
    size_t n = 0;
    uint8_t *got = run(e, NULL, false, prof, &n);
    EXPECT_TRUE(got != NULL);
    ot_free(got);
    int control = 0, body = 0;
    for (int k = 0; k < ot_profile_kernel_count(prof); k++) {
        const ot_kernel_profile *kp = ot_profile_kernel(prof, k);
        if (!strcmp(kp->kind, "control")) control++;
        if (kp->calls == 7) body++; /* once per iteration */
    }
    EXPECT_INT_EQ(control, 0);
    EXPECT_TRUE(body >= 3); /* the dot, the slices, the fusion */
    ot_profile_free(prof);
    ot_executable_free(e);
}

/* Loop-invariant values hoisted by licm: the same bits as the evaluator at every thread count,
 * and the compiled loop carries them as pass-through leaves. */
static void test_invariant_hoisted(void) {
    check_program("invariant", k_invariant);
    ot_executable *e = compile_text(k_invariant, OT_NATIVE_OFF);
    ASSERT_TRUE(e != NULL);
    int loops = 0;
    for (int k = 0; k < ot_executable_kernel_count(e); k++) {
        const cc_loop *l = cc_executable_loop(e, k);
        if (!l) continue;
        loops++;
        EXPECT_INT_EQ(l->ninputs, 7); /* i, h, w, v, bp, then the two hoisted values */
        EXPECT_TRUE((l->invariant >> 5 & 3) == 3);
    }
    EXPECT_INT_EQ(loops, 1);
    ot_executable_free(e);
}

OT_TEST_MAIN(OT_TEST(test_scan), OT_TEST(test_rnn_scans), OT_TEST(test_threefry),
             OT_TEST(test_shared_body), OT_TEST(test_swap_and_pass_through),
             OT_TEST(test_array_state), OT_TEST(test_nested_tuple_and_conditional),
             OT_TEST(test_nested_loops), OT_TEST(test_profile_shows_body),
             OT_TEST(test_conditionals), OT_TEST(test_windows_state_in_place),
             OT_TEST(test_invariant_hoisted))
