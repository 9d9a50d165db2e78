#!/usr/bin/env python3
"""Call overhead from Python to a tiny compiled module: optitpu's Executable.__call__ beside
jax.jit's dispatch of the same function on the same inputs, in one run (docs/benchmarks.md).

    python scripts/bench_python_overhead.py [--calls 20000] [--repeats 15] [--json]

The module is y = a*x + b on f32[4] (one fused kernel). Each figure is the median over `repeats`
timings of `calls` back-to-back calls (µs per call), outputs included (optitpu returns a new
optitpu.Array, jax a new jax.Array, which jax dispatches asynchronously: its figure is taken with
block_until_ready() on each result). Needs numpy; jax where installed.
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

import optitpu

HLO = """HloModule axpy
ENTRY main {
  a = f32[] parameter(0)
  x = f32[4] parameter(1)
  y = f32[4] parameter(2)
  ab = f32[4] broadcast(a), dimensions={}
  ax = f32[4] multiply(ab, x)
  ROOT r = f32[4] add(ax, y)
}
"""


def per_call_us(fn, calls, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    a = np.float32(2)
    x = np.arange(4, dtype=np.float32)
    y = np.ones(4, np.float32)
    exe = optitpu.compile(HLO)
    rows = {}
    rows["optitpu_numpy"] = per_call_us(lambda: exe(a, x, y), args.calls, args.repeats)
    rows["optitpu_python_scalar"] = per_call_us(lambda: exe(2.0, x, y), args.calls, args.repeats)
    try:
        import jax
        import jax.numpy as jnp

        f = jax.jit(lambda a, x, y: a * x + y)
        ja, jx, jy = jnp.asarray(a), jnp.asarray(x), jnp.asarray(y)
        rows["jax_jit_device_arrays"] = per_call_us(lambda: f(ja, jx, jy).block_until_ready(),
                                                    args.calls, args.repeats)
        rows["jax_jit_numpy"] = per_call_us(lambda: f(a, x, y).block_until_ready(), args.calls,
                                            args.repeats)
        jo = optitpu.jit(lambda a, x, y: a * x + y)
        rows["optitpu_jit_numpy"] = per_call_us(lambda: jo(a, x, y), args.calls, args.repeats)
    except ImportError:
        pass
    out = {"benchmark": "python_call_overhead", "unit": "us_per_call", "calls": args.calls,
           "repeats": args.repeats, "python": sys.version.split()[0],
           "optitpu": optitpu.__version__,
           "results": {k: {"median": round(m, 3), "min": round(lo, 3)} for k, (m, lo) in rows.items()}}
    if "jax_jit_device_arrays" in rows:
        out["ratio_optitpu_to_jax"] = round(rows["optitpu_numpy"][0] / rows["jax_jit_device_arrays"][0], 3)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for k, (m, lo) in rows.items():
            print(f"{k:28s} {m:8.2f} us/call (min {lo:.2f})")
        if "ratio_optitpu_to_jax" in out:
            print(f"optitpu / jax.jit (device arrays): {out['ratio_optitpu_to_jax']}")


if __name__ == "__main__":
    main()
