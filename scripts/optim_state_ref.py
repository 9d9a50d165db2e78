#!/usr/bin/env python3
"""NumPy reference of compressed optimizer state, and the fixture tests/test_tpu_optim_state.c
compares ot_tpu_optimizer against (tests/data/optim_state/).

8-bit block-wise state follows bitsandbytes' published algorithm (Dettmers et al., 2022, "8-bit
Optimizers via Block-wise Quantization"; bitsandbytes' pure-PyTorch reference
optimizer_update_8bit_blockwise_pytorch): the state is dequantized (code[c] * absmax[block]),
updated in f32, and quantized again per block of 256 elements of each tensor: absmax = max |s|
over the block (1 for an all-zero block), code = the first index of the smallest |s / absmax -
code[k]| in f32. The first state (Adam's exp_avg, momentum) uses the signed dynamic map, the
second (exp_avg_sq) the unsigned one: create_dynamic_map(signed, max_exponent_bits=7,
total_bits=8), with torch's scalar f32 linspace (step = (end - start) / (steps - 1), start +
step * i below the halfway index, end - step * (steps - 1 - i) from it) and f32 arithmetic for
the means and their scale. torch's vectorized CPU linspace computes each vector chunk from a
per-chunk base instead, so bitsandbytes 0.50.2 on torch 2.15 (AVX-512) differs from this map by
at most 2 ulp in 42 (signed) and 31 (unsigned) entries.

The update itself is torch's Adam/AdamW in bitsandbytes' order (s1 * beta1 + (1 - beta1) * g,
s2 * beta2 + (1 - beta2) * g * g, denom = sqrt(s2) / sqrt(1 - beta2^t) + eps, decoupled decay
p * (1 - lr * wd), p + (-lr / (1 - beta1^t)) * (s1 / denom)), in f32 with f64 scalars rounded
to f32 as torch hands them to its kernels. The library's Adam graph orders some f32 operations
differently (a lerp for the first moment), so the trajectory is compared with a tolerance and
the quantization itself (map, quantize of given values) bit for bit.

bf16 state: round to nearest even, or stochastic: the f32 bits plus the top 16 bits of the
counter-based hash below, low half cleared (ot_tpu_sr_key / ot_tpu_sr_bits in tpu_optim.h).

Usage: python3 scripts/optim_state_ref.py [--out tests/data/optim_state]   (NumPy only; fixed
seeds: re-running reproduces the same files)
"""
import argparse
import json
import os

import numpy as np

f32 = np.float32
BLOCK = 256


def torch_linspace_f32(start, end, steps):
    start, end = f32(start), f32(end)
    step = f32((end - start) / f32(steps - 1))
    half = steps // 2
    out = np.empty(steps, dtype=f32)
    for i in range(steps):
        out[i] = start + step * f32(i) if i < half else end - step * f32(steps - 1 - i)
    return out


def dynamic_map(signed):
    data = []
    for i in range(7):
        n = 2**i + 1 if signed else 2 ** (i + 1) + 1
        b = torch_linspace_f32(0.1, 1.0, n)
        means = (b[:-1] + b[1:]) / f32(2.0)
        scale = f32(10.0 ** (-6 + i))
        data += list(scale * means)
        if signed:
            data += list(-scale * means)
    data += [f32(0.0), f32(1.0)]
    assert len(data) == 256
    return np.sort(np.array(data, dtype=f32))


def quantize_blockwise(a, code):
    """bitsandbytes' _quantize_blockwise_pytorch on one tensor: (codes u8, absmax f32)."""
    n = a.size
    nb = (n + BLOCK - 1) // BLOCK
    pad = np.zeros(nb * BLOCK, dtype=f32)
    pad[:n] = a
    blocks = pad.reshape(nb, BLOCK)
    absmax = np.max(np.abs(blocks), axis=1)
    absmax[absmax == 0] = f32(1.0)
    scaled = blocks / absmax[:, None]
    q = np.empty(scaled.shape, dtype=np.uint8)
    for r in range(nb):  # argmin over the code, first index on ties
        d = np.abs(scaled[r][:, None] - code[None, :])
        q[r] = np.argmin(d, axis=1)
    return q.reshape(-1)[:n], absmax.astype(f32)


def dequantize_blockwise(q, absmax, code):
    n = q.size
    idx = np.arange(n) // BLOCK
    return (code[q.astype(np.int64)] * absmax[idx]).astype(f32)


def adam8bit_step(p, g, st, step, lr, b1, b2, eps, wd, maps):
    """One step over one tensor; st = [(codes1, absmax1), (codes2, absmax2)], updated."""
    s1 = dequantize_blockwise(st[0][0], st[0][1], maps[0])
    s2 = dequantize_blockwise(st[1][0], st[1][1], maps[1])
    s1 = s1 * f32(b1) + f32(1.0 - b1) * g
    s2 = s2 * f32(b2) + f32(1.0 - b2) * g * g
    bc1, bc2 = 1.0 - b1**step, 1.0 - b2**step
    denom = np.sqrt(s2) / f32(np.sqrt(bc2)) + f32(eps)
    if wd > 0:
        p = p * f32(1.0 - lr * wd)
    p = (p + f32(-lr / bc1) * (s1 / denom)).astype(f32)
    st[0] = quantize_blockwise(s1, maps[0])
    st[1] = quantize_blockwise(s2, maps[1])
    return p


def sr_key(seed, group, slot):
    m = (1 << 64) - 1
    z = (seed ^ ((group & 0xFFFFFFFF) << 32) ^ ((slot * 0x9E37 + 1) & 0xFFFFFFFF)) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return (z ^ (z >> 31)) & 0xFFFFFFFF


def sr_bits(key, step, idx):
    u = np.uint32
    h = (idx.astype(np.uint64) * 0x9E3779B1 + key) & 0xFFFFFFFF
    h ^= (step * 0x85EBCA77) & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x7FEB352D) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 0x846CA68B) & 0xFFFFFFFF
    h ^= h >> 16
    return h.astype(u)


def bf16_round(x, stochastic=False, key=0, step=1):
    bits = x.astype(f32).view(np.uint32).astype(np.uint64)
    lsb = (bits >> 16) & 1
    out = ((bits + 0x7FFF + lsb) >> 16).astype(np.uint16)  # nearest even (inf stays inf)
    nan = np.isnan(x)
    out[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)  # quiet NaN
    if stochastic:  # finite values only: non-finite ones round to nearest
        r = sr_bits(key, step, np.arange(x.size, dtype=np.uint64)).astype(np.uint64) >> 16
        fin = np.isfinite(x)
        out[fin] = ((bits[fin] + r[fin]) >> 16).astype(np.uint16)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "data", "optim_state"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(20261205)
    maps = [dynamic_map(True), dynamic_map(False)]
    np.save(os.path.join(a.out, "code_signed.npy"), maps[0])
    np.save(os.path.join(a.out, "code_unsigned.npy"), maps[1])

    # quantization of given values: every code value and every midpoint (ties), scaled by a
    # block absmax, zeros, +-absmax, random magnitudes over 12 decades; 16 blocks + a tail
    q = []
    for code in maps:
        mids = (code[:-1] + code[1:]) / f32(2.0)
        q.append(np.concatenate([code, mids]))
    vals = np.concatenate([q[0], q[1], np.zeros(17, f32), np.array([1, -1, 1, -1], f32),
                           (rng.standard_normal(3000) * 10.0 ** rng.uniform(-12, 0, 3000))
                           .astype(f32)])
    vals = vals[rng.permutation(vals.size)].astype(f32)
    vals = vals[: 16 * BLOCK + 77]
    vals[:BLOCK] = 0  # an all-zero block: absmax 1
    scale = np.repeat(f32(10.0) ** rng.uniform(-6, 2, 17).astype(f32), BLOCK)[: vals.size]
    x = (vals * scale).astype(f32)
    np.save(os.path.join(a.out, "quant_x.npy"), x)
    for name, code in (("signed", maps[0]), ("unsigned", maps[1])):
        xi = np.abs(x) if name == "unsigned" else x
        c, am = quantize_blockwise(xi, code)
        np.save(os.path.join(a.out, f"quant_{name}_codes.npy"), c)
        np.save(os.path.join(a.out, f"quant_{name}_absmax.npy"), am)

    # an AdamW trajectory over two tensors (1000 and 300 elements: blocks per tensor, partial
    # last blocks), 12 steps
    sizes = [1000, 300]
    steps, lr, b1, b2, eps, wd = 12, 1e-3, 0.9, 0.999, 1e-8, 0.01
    for t, n in enumerate(sizes):
        p = rng.standard_normal(n).astype(f32)
        g = (rng.standard_normal((steps, n)) * 0.01).astype(f32)
        st = [quantize_blockwise(np.zeros(n, f32), maps[0]),
              quantize_blockwise(np.zeros(n, f32), maps[1])]
        np.save(os.path.join(a.out, f"adamw_p0_{t}.npy"), p)
        np.save(os.path.join(a.out, f"adamw_g_{t}.npy"), g)
        ps = []
        for s in range(1, steps + 1):
            p = adam8bit_step(p, g[s - 1], st, s, lr, b1, b2, eps, wd, maps)
            ps.append(p)
        np.save(os.path.join(a.out, f"adamw_p_{t}.npy"), np.stack(ps))
        for j in range(2):
            np.save(os.path.join(a.out, f"adamw_codes{j + 1}_{t}.npy"), st[j][0])
            np.save(os.path.join(a.out, f"adamw_absmax{j + 1}_{t}.npy"), st[j][1])

    # bf16 rounding: nearest even and stochastic (seed 7, group 0, slot 1, step 3)
    y = (rng.standard_normal(4099) * 10.0 ** rng.uniform(-30, 30, 4099)).astype(f32)
    y[:6] = [0.0, -0.0, np.inf, -np.inf, np.float32(3.4e38), np.float32(1e-40)]
    np.save(os.path.join(a.out, "bf16_x.npy"), y)
    np.save(os.path.join(a.out, "bf16_nearest.npy"), bf16_round(y))
    key = sr_key(7, 0, 1)
    np.save(os.path.join(a.out, "bf16_stochastic.npy"), bf16_round(y, True, key, 3))
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump({"made_by": "scripts/optim_state_ref.py", "numpy": np.__version__,
                   "block": BLOCK, "adamw": {"sizes": sizes, "steps": steps, "lr": lr,
                                             "beta1": b1, "beta2": b2, "eps": eps,
                                             "weight_decay": wd},
                   "bf16_stochastic": {"seed": 7, "group": 0, "slot": 1, "step": 3}}, f,
                  indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
