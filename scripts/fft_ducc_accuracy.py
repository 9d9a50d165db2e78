#!/usr/bin/env python3
"""XLA's CPU FFT (ducc, through jnp.fft) against a naive DFT in long double, measured as
tests/test_fft.c measures optitpu's: the relative L2 error and the max error relative to the
largest value, each divided by u*log2(n) (u = 2^-24 for f32, 2^-53 for f64); prints the worst.

    /work/venv-peers/bin/python scripts/fft_ducc_accuracy.py   (needs jax; takes minutes)
"""
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import numpy as np
rng = np.random.default_rng(5)
def ref(x, sign):
    n = x.shape[-1]
    k = np.arange(n)
    e = (np.outer(k, k) % n).astype(np.longdouble)
    ang = sign * 2 * np.arccos(np.longdouble(-1)) * e / np.longdouble(n)  # pi in long double
    w = np.cos(ang) + 1j * np.sin(ang).astype(np.longdouble)
    w = w.astype(np.clongdouble)
    return x.astype(np.clongdouble) @ w.T
lens = list(range(1, 129)) + [200, 263, 300, 512, 1009, 1024]
for dt, eps in ((np.float32, 2.0**-24), (np.float64, 2.0**-53)):
    cdt = np.complex64 if dt == np.float32 else np.complex128
    wl2 = wmx = 0; al2 = amx = 0; raw_l2 = raw_mx = 0
    for n in lens:
        lg = np.log2(n) if n > 1 else 1.0
        x = (rng.uniform(-1, 1, (3, n)) + 1j * rng.uniform(-1, 1, (3, n))).astype(cdt)
        for kind in ("fft", "ifft", "rfft"):
            if kind == "fft":
                got = np.asarray(jnp.fft.fft(x)); want = ref(x, -1)
            elif kind == "ifft":
                got = np.asarray(jnp.fft.ifft(x)); want = ref(x, 1) / n
            else:
                xr = x.real.astype(dt)
                got = np.asarray(jnp.fft.rfft(xr)); want = ref(xr.astype(cdt), -1)[:, : n // 2 + 1]
            d = np.abs(got.astype(np.clongdouble) - want)
            l2 = float(np.sqrt((d**2).sum() / (np.abs(want)**2).sum()))
            mx = float(d.max() / np.abs(want).max())
            if l2 / (eps * lg) > wl2: wl2, al2 = l2 / (eps * lg), n
            if mx / (eps * lg) > wmx: wmx, amx = mx / (eps * lg), n
            raw_l2 = max(raw_l2, l2); raw_mx = max(raw_mx, mx)
    print(f"{dt.__name__}: worst L2 {wl2:.3f} eps log2 n (n={al2}), worst max {wmx:.3f} eps log2 n (n={amx}); raw worst L2 {raw_l2:.3g}, max {raw_mx:.3g}")
