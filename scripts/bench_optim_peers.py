#!/usr/bin/env python3
"""Adam step time: optitpu's device optimizer beside torch.optim and optax, in one run.

    python3 scripts/bench_optim_peers.py --optitpu build/optitpu [--sizes 16M,128M]
        [--tensors 1,200] [--reps 5] [--threads 1] [--optimizer adam]
        [--state bf16|bf16-sr|int8]

For every size and tensor count: `optitpu bench optim --json` (its own fused C loop baseline is
printed too; with more than one tensor also --flat: the flat-mode wrapper, one buffer and one
update for all tensors, on the same data in the same process), then torch.optim.Adam with foreach=False, foreach=True and fused=True, and
optax.adam under jax.jit (parameters donated), on the same sizes (f32, the same split into
tensors as the CLI's: a deterministic mix over three orders of magnitude). Each figure is the
median step time over --reps steps after a warm-up; the table prints each peer's time and
optitpu's ratio (peer time / optitpu time: > 1 means optitpu is faster).

Every side runs on --threads threads (default 1): optitpu gets `bench optim --threads N` (its step's
kernels and its fused C loop on one pool of N threads; the thread count its rows name is checked
against N), torch torch.set_num_threads(N), XLA intra_op_parallelism_threads=N (Eigen's
multi-threading on when N > 1). Needs torch, and jax and optax for the optax row (skipped, and
said so, when jax is not installed).

--state S also runs optitpu's flat mode with compressed optimizer state (`bench optim --state S`:
bf16 moments, bf16 with stochastic rounding, or 8-bit block-wise) on the same data and prints its
step time beside the peers, with the bytes each side moves per parameter (torch's Adam: 28), and
the CPU time per step (the process's, all threads; median) of that step and of torch's fused
Adam, which a loaded machine stretches far less than wall time.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("I")
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def split_sizes(n, k):
    """The CLI's split (cli/bench_optim.c split_sizes): the same LCG and weights."""
    s = 0x9E3779B97F4A7C15
    w = []
    for _ in range(k):
        s = (s * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        u = (s >> 11) / 9007199254740992.0
        w.append(1000.0 ** u)
    tot = sum(w)
    sz = [max(1, int(n * x / tot)) for x in w]
    sz[-1] += n - sum(sz)
    sz[-1] = max(1, sz[-1])
    return sz


def median_time(fn, reps, cpu=None):
    """The median wall time of fn over reps calls after a warm-up; with cpu a list, the median
    CPU time of the process per call (all threads) is appended to it."""
    fn()  # warm-up
    ts, cs = [], []
    for _ in range(reps):
        c0 = time.process_time()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        cs.append(time.process_time() - c0)
    if cpu is not None:
        cpu.append(statistics.median(cs))
    return statistics.median(ts)


def bench_torch(sizes, reps, lr, cpu=None, **kw):
    import torch

    params = [torch.nn.Parameter(torch.randn(n, dtype=torch.float32)) for n in sizes]
    for p in params:
        p.grad = torch.randn_like(p) * 0.01
    opt = torch.optim.Adam(params, lr=lr, **kw)
    return median_time(opt.step, reps, cpu)


def bench_optax(sizes, reps, lr):
    import jax
    import jax.numpy as jnp
    import optax

    key = jax.random.PRNGKey(0)
    params = [jax.random.normal(jax.random.fold_in(key, i), (n,), jnp.float32)
              for i, n in enumerate(sizes)]
    grads = [g * 0.01 for g in params]
    tx = optax.adam(lr)
    state = tx.init(params)

    def step(p, s, g):
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    jstep = jax.jit(step, donate_argnums=(0, 1))
    box = [params, state]

    def run():
        p, s = jstep(box[0], box[1], grads)
        jax.block_until_ready(p)
        box[0], box[1] = p, s

    return median_time(run, reps)


def bench_optitpu(binary, opt, n, k, reps, threads, state=None):
    """(per-tensor step, fused C loop, flat-mode step or None, (compressed-state step, bytes
    per parameter, CPU time per compressed-state step) or None) in seconds; --flat when k > 1 or
    a state format is given."""
    cmd = [binary, "bench", "optim", "--optimizer", opt, "--params", str(n), "--tensors", str(k),
           "--reps", str(reps), "--threads", str(threads), "--no-limits", "--json"] + \
          (["--flat"] if k > 1 else []) + (["--state", state] if state else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    step = next(r for r in rows if " step, " in r["case"] and " flat " not in r["case"])
    flat = next((r for r in rows if " flat step, " in r["case"]), None)
    comp = next((r for r in rows if "-state" in r["case"] and " step, " in r["case"]), None)
    cbytes = next((r for r in rows if "-state" in r["case"] and "bytes moved" in r["case"]), None)
    ccpu = next((r for r in rows if "-state" in r["case"] and "CPU time per step" in r["case"]),
                None)
    want = f"{threads} thread{'s' if threads != 1 else ''}"
    for r in [step, flat] if flat else [step]:  # what ran, as the CLI reports it
        if not r["case"].endswith(", " + want) or (r["baseline"] and
                                                   not r["baseline"].endswith(", " + want)):
            raise SystemExit(f"optitpu ran on other threads than --threads {threads}: {r}")
    return (step["value"] / 1e3, (step["baseline_value"] or math.nan) / 1e3,
            flat["value"] / 1e3 if flat else None,
            (comp["value"] / 1e3, cbytes["value"], ccpu["value"] / 1e3) if comp else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--optitpu", required=True, help="the optitpu binary")
    ap.add_argument("--sizes", default="16M,128M")
    ap.add_argument("--tensors", default="1,200")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--optimizer", default="adam", choices=["adam"])
    ap.add_argument("--state", choices=["bf16", "bf16-sr", "int8"])
    a = ap.parse_args()
    os.environ["XLA_FLAGS"] = (f"--xla_cpu_multi_thread_eigen={'true' if a.threads > 1 else 'false'}"
                               f" intra_op_parallelism_threads={a.threads}")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import torch

    torch.set_num_threads(a.threads)
    lr = 1e-3
    print(f"Adam step, f32, {a.threads} thread(s) on every side, median of {a.reps} steps after a warm-up "
          "(ratio = peer time / optitpu time; > 1: optitpu faster)")
    print(f"{'case':<22} {'impl':<28} {'ms/step':>10} {'ratio':>8}")
    for n in [parse_size(s) for s in a.sizes.split(",")]:
        for k in [int(x) for x in a.tensors.split(",")]:
            case = f"{n >> 20}M x{k}" if n >= 1 << 20 else f"{n >> 10}K x{k}"
            sizes = split_sizes(n, k)
            ours, loop, flat, comp = bench_optitpu(a.optitpu, a.optimizer, n, k, a.reps,
                                                   a.threads, a.state)
            rows = [("optitpu ot_tpu_optimizer", ours), ("fused C loop (optitpu CLI)", loop)]
            if flat is not None:
                rows.insert(1, ("optitpu flat mode", flat))
            if comp is not None:
                rows.insert(2, (f"optitpu flat {a.state} state", comp[0]))
            npeer = len(rows)
            rows.append(("torch foreach=False", bench_torch(sizes, a.reps, lr, foreach=False)))
            rows.append(("torch foreach=True", bench_torch(sizes, a.reps, lr, foreach=True)))
            fused_cpu = []
            rows.append(("torch fused=True", bench_torch(sizes, a.reps, lr, fused_cpu,
                                                         fused=True)))
            try:
                rows.append(("optax.adam jax.jit", bench_optax(sizes, a.reps, lr)))
            except ImportError:
                print(f"{case:<22} {'optax.adam jax.jit':<28} {'(jax not installed)':>19}")
            best = min(t for name, t in rows[npeer:])
            for name, t in rows:
                print(f"{case:<22} {name:<28} {t * 1e3:>10.3f} {t / ours:>8.3f}")
            print(f"{case:<22} {'fastest peer / optitpu':<28} {best * 1e3:>10.3f} {best / ours:>8.3f}")
            if flat is not None:
                print(f"{case:<22} {'fastest peer / flat mode':<28} {best * 1e3:>10.3f} "
                      f"{best / flat:>8.3f}")
            if comp is not None:
                fused = next(t for name, t in rows if name == "torch fused=True")
                print(f"{case:<22} {'torch fused / ' + a.state + ' state':<28} "
                      f"{fused * 1e3:>10.3f} {fused / comp[0]:>8.3f}")
                print(f"{case:<22} {'bytes/param ' + a.state + ' vs torch':<28} {comp[1]:>10.3f} "
                      f"{28.0:>8.3f}")
                # CPU time per step (the process's, all threads): what a loaded machine
                # stretches least; torch fused's CPU time, and the ratio to ours
                print(f"{case:<22} {'CPU: ' + a.state + ' state':<28} {comp[2] * 1e3:>10.3f}")
                print(f"{case:<22} {'CPU: torch fused / ' + a.state:<28} "
                      f"{fused_cpu[0] * 1e3:>10.3f} {fused_cpu[0] / comp[2]:>8.3f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
