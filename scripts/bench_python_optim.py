#!/usr/bin/env python3
"""optitpu.optim.AdamW.step() from Python against the C path and torch, in one run.

    python scripts/bench_python_optim.py --optitpu build/optitpu [--params 16M] [--tensors 200]
                                         [--reps 7] [--rounds 3] [--json]

The parameters are split into tensors with the sizes `optitpu bench optim` uses (a fixed mix
spanning three orders of magnitude). Each round runs, one after the other: the C path
(`optitpu bench optim --optimizer adamw`, ot_tpu_optimizer stepping pool buffers), the Python
optimizer on NumPy arrays, and where torch is installed the Python optimizer on torch CPU tensors
and torch.optim.AdamW(fused=True) on the same tensors (foreach=True on a torch without a fused
CPU AdamW), each the median of `reps` steps after a
warm-up. Figures are the medians over rounds; ratios are Python / C and torch / Python, every
side on --threads threads (default: the CPU count).
"""

import argparse
import json
import os
import statistics
import subprocess
import time

import numpy as np

import optitpu

M64 = (1 << 64) - 1


def split_sizes(n, k):
    """cli/bench_optim.c's split_sizes: K sizes summing to n."""
    s, w = 0x9E3779B97F4A7C15, []
    for _ in range(k):
        s = (s * 6364136223846793005 + 1442695040888963407) & M64
        w.append(1000.0 ** ((s >> 11) / 9007199254740992.0))
    tot = sum(w)
    sz = [max(1, int(n * x / tot)) for x in w]
    sz[-1] = max(1, sz[-1] + n - sum(sz))
    return sz


def parse_count(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def median_step(step, reps):
    step()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def c_path(binary, params, tensors, reps):
    out = subprocess.run([binary, "bench", "optim", "--optimizer", "adamw", "--params",
                          str(params), "--tensors", str(tensors), "--reps", str(reps),
                          "--no-limits", "--json"], check=True, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        row = json.loads(line)
        if " step, " in row["case"] and row["metric"] == "ms/step":
            return row["value"]
    raise SystemExit("optitpu bench optim printed no step time")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--optitpu", required=True, help="the optitpu binary (the C path)")
    ap.add_argument("--params", default="16M")
    ap.add_argument("--tensors", type=int, default=200)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="threads on every side (OPTITPU_THREADS, torch.set_num_threads)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    # before the first run creates optitpu's pool; inherited by the C path's process
    os.environ["OPTITPU_THREADS"] = str(args.threads)
    n = parse_count(args.params)
    sizes = split_sizes(n, args.tensors)
    rng = np.random.default_rng(0)
    ps = [rng.standard_normal(k).astype(np.float32) for k in sizes]
    gs = [rng.standard_normal(k).astype(np.float32) * 1e-2 for k in sizes]
    opt = optitpu.optim.AdamW(ps, lr=1e-3, weight_decay=0.01)
    t0 = time.perf_counter()
    opt.step(grads=gs)
    compile_s = time.perf_counter() - t0
    try:
        import torch

        torch.set_num_threads(args.threads)
        tp = [torch.from_numpy(p.copy()) for p in ps]
        for p, g in zip(tp, gs):
            p.grad = torch.from_numpy(g)
        tq = [torch.from_numpy(p.copy()) for p in ps]
        for p, g in zip(tq, gs):
            p.grad = torch.from_numpy(g)
        opt_t = optitpu.optim.AdamW(tp, lr=1e-3, weight_decay=0.01)
        torch_kind = "torch_fused"
        try:
            torch_fused = torch.optim.AdamW(tq, lr=1e-3, weight_decay=0.01, fused=True)
            torch_fused.step()
        except (RuntimeError, TypeError):  # torch < 2.4: no fused AdamW on CPU; multi-tensor
            torch_kind = "torch_foreach"
            torch_fused = torch.optim.AdamW(tq, lr=1e-3, weight_decay=0.01, foreach=True)
    except ImportError:
        torch = None
    rows = {"c_path": [], "python_numpy": [], "python_torch": [], "torch": []}
    for _ in range(args.rounds):
        rows["c_path"].append(c_path(args.optitpu, n, args.tensors, args.reps))
        rows["python_numpy"].append(median_step(lambda: opt.step(grads=gs), args.reps))
        if torch is not None:
            rows["python_torch"].append(median_step(opt_t.step, args.reps))
            rows["torch"].append(median_step(torch_fused.step, args.reps))
    res = {k: round(statistics.median(v), 2) for k, v in rows.items() if v}
    out = {"benchmark": "python_optim_step", "unit": "ms_per_step", "params": n,
           "threads": args.threads,
           "tensors": args.tensors, "reps": args.reps, "rounds": args.rounds,
           "first_step_s": round(compile_s, 3), "results": res,
           "rounds_raw": {k: [round(x, 2) for x in v] for k, v in rows.items() if v},
           "ratio_python_to_c": round(res["python_numpy"] / res["c_path"], 3)}
    if torch is not None:
        out["torch"] = f"{torch.__version__} {torch_kind}, {torch.get_num_threads()} threads"
        out["ratio_torch_to_python_torch"] = round(res["torch"] / res["python_torch"], 3)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for k, v in res.items():
            print(f"{k:14s} {v:8.2f} ms/step   rounds {out['rounds_raw'][k]}")
        print(f"first step (compile) {compile_s:.2f} s; Python / C {out['ratio_python_to_c']}")
        if torch is not None:
            print(f"{out['torch']} / optitpu on torch tensors {out['ratio_torch_to_python_torch']}")


if __name__ == "__main__":
    main()
