#!/usr/bin/env python3
"""optitpu.optim.AdamW.step() from Python against the C path and torch, in one run.

    python scripts/bench_python_optim.py --optitpu build/optitpu [--params 16M] [--tensors 200]
                                         [--reps 7] [--rounds 3] [--json] [--breakdown]

The parameters are split into tensors with the sizes `optitpu bench optim` uses (a fixed mix
spanning three orders of magnitude). Each round runs the C path (`optitpu bench optim
--optimizer adamw --flat`, ot_tpu_optimizer stepping pool buffers: its per-tensor mode and its
flat mode, the two taking turns), then the Python cases taking turns step by step: the Python
optimizer on NumPy arrays, and where torch is installed the Python optimizer on torch CPU
tensors (default mode, the update run on the tensors' own memory), the Python optimizer with
flat=True on a copy of those tensors (re-pointed into its flat buffers), its compiled flat
update called directly on the same buffers (the step minus it is flat mode's Python layer), and
torch.optim.AdamW(fused=True) on the same tensors (foreach=True on a torch without a fused CPU
AdamW), each the median of `reps` steps after a warm-up. Figures are the medians over rounds;
ratios are Python / C (default mode against the C per-tensor mode, flat against flat) and
torch / Python, every side on --threads threads (default: the CPU count).

--breakdown adds, per round, where the NumPy step's time goes, the cases taking turns step by
step: the NumPy step again, the compiled update called directly on the same arrays (the step
minus it is the Python layer's own work), the same call on copies of every array placed back to
back in one huge-page stream allocation (what the arrays' placement in memory costs), and the
NumPy step, the direct call and the C path on as many 1-element tensors (the fixed per-tensor
cost of the update itself, by side), with torch the Python step on 1-element torch tensors too.
"""

import argparse
import json
import os
import statistics
import subprocess
import time

import numpy as np

import optitpu
from optitpu import _core

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


def c_path(binary, params, tensors, reps, flat=False):
    """The C path's ms per step: per-tensor mode, or with flat (per-tensor, flat) in one run."""
    out = subprocess.run([binary, "bench", "optim", "--optimizer", "adamw", "--params",
                          str(params), "--tensors", str(tensors), "--reps", str(reps),
                          "--no-limits", "--json"] + (["--flat"] if flat else []),
                         check=True, capture_output=True, text=True)
    per, fl = None, None
    for line in out.stdout.splitlines():
        row = json.loads(line)
        if row["metric"] != "ms/step":
            continue
        if " flat step, " in row["case"]:
            fl = row["value"]
        elif " step, " in row["case"] and per is None:
            per = row["value"]
    if per is None or (flat and fl is None):
        raise SystemExit("optitpu bench optim printed no step time")
    return (per, fl) if flat else per


def one_arena(arrays):
    """Copies of arrays back to back in one stream allocation (huge pages), each start 64-byte
    aligned and staggered by 1..7 further cache lines so that neighbours do not alias."""
    pad = [16 * (i % 7 + 1) for i in range(len(arrays))]
    total = sum((a.size + 15) // 16 * 16 + q for a, q in zip(arrays, pad))
    big = np.asarray(_core.full("f32", (total,), 0.0, True))
    out, off = [], 0
    for a, q in zip(arrays, pad):
        v = big[off:off + a.size].reshape(a.shape)
        v[...] = a
        out.append(v)
        off += (a.size + 15) // 16 * 16 + q
    return out


def direct_call(opt):
    """The group's compiled update and its arguments, as step() passes them (NumPy params)."""
    g = opt.param_groups[0]
    subset = tuple(range(len(g["params"])))
    exe, states = opt._executable(0, g, subset)
    ps, sargs = opt._arguments(0, g, subset, exe, states)
    return exe, ps, sargs


def median_steps(steps, reps):
    """Medians of each callable's time, the callables taking turns (a change of load hits all)."""
    for f in steps:
        f()
    ts = [[] for _ in steps]
    for _ in range(reps):
        for f, t in zip(steps, ts):
            t0 = time.perf_counter()
            f()
            t.append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(t) for t in ts]


def breakdown(args, gs, opt, reps, torch):
    exe, pa, sa = direct_call(opt)
    arena = one_arena(list(pa) + list(gs) + list(sa))
    n = len(pa)
    ap, ag, ast = arena[:n], arena[n:2 * n], arena[2 * n:]
    row = dict(zip(("step_numpy_turns", "direct_call", "direct_call_one_arena"), median_steps(
        [lambda: opt.step(grads=gs), lambda: exe(*pa, *gs, *sa, 2.0, 1e-3, donate=True),
         lambda: exe(*ap, *ag, *ast, 2.0, 1e-3, donate=True)], reps)))
    k = len(pa)
    tp = [np.ones(1, np.float32) for _ in range(k)]
    tg = [np.full(1, 1e-2, np.float32) for _ in range(k)]
    tiny = optitpu.optim.AdamW(tp, lr=1e-3, weight_decay=0.01)
    te, tpa, tsa = direct_call(tiny)
    row["tiny_python_numpy"], row["tiny_direct_call"] = median_steps(
        [lambda: tiny.step(grads=tg), lambda: te(*tpa, *tg, *tsa, 2.0, 1e-3, donate=True)],
        5 * reps)
    row["tiny_c_path"] = c_path(args.optitpu, k, k, 5 * reps)
    if torch is not None:
        tt = [torch.ones(1) for _ in range(k)]
        for p in tt:
            p.grad = torch.full((1,), 1e-2)
        tiny_t = optitpu.optim.AdamW(tt, lr=1e-3, weight_decay=0.01)
        row["tiny_python_torch"], row["tiny_python_numpy_turns"] = median_steps(
            [tiny_t.step, lambda: tiny.step(grads=tg)], 5 * reps)
    return row


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
    ap.add_argument("--breakdown", action="store_true",
                    help="also time the direct call, one-arena placement and 1-element tensors")
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
        tf = [torch.from_numpy(p.copy()) for p in ps]
        for p, g in zip(tf, gs):
            p.grad = torch.from_numpy(g.copy())
        opt_f = optitpu.optim.AdamW(tf, lr=1e-3, weight_decay=0.01, flat=True)
        opt_f.step()
        flat_g = opt_f.param_groups[0]["_flat"]
        exe_f = flat_g._compile(opt_f.param_groups[0], flat_g.shapes)[0]
        torch_kind = "torch_fused"
        try:
            torch_fused = torch.optim.AdamW(tq, lr=1e-3, weight_decay=0.01, fused=True)
            torch_fused.step()
        except (RuntimeError, TypeError):  # torch < 2.4: no fused AdamW on CPU; multi-tensor
            torch_kind = "torch_foreach"
            torch_fused = torch.optim.AdamW(tq, lr=1e-3, weight_decay=0.01, foreach=True)
    except ImportError:
        torch = None
    rows = {"c_path": [], "c_path_flat": [], "python_numpy": [], "python_torch": [],
            "python_torch_flat": [], "flat_direct_call": [], "torch": []}
    for _ in range(args.rounds):
        per, fl = c_path(args.optitpu, n, args.tensors, args.reps, flat=True)
        rows["c_path"].append(per)
        rows["c_path_flat"].append(fl)
        cases = {"python_numpy": lambda: opt.step(grads=gs)}
        if torch is not None:
            # the flat step and its direct call each follow a per-tensor case (the same memory
            # traffic before them), torch fused after the direct call
            cases.update(python_torch_flat=opt_f.step, python_torch=opt_t.step,
                         flat_direct_call=lambda: exe_f(*flat_g.args, 2.0, 1e-3, donate=True),
                         torch=torch_fused.step)
        for k, v in zip(cases, median_steps(list(cases.values()), args.reps)):
            rows[k].append(v)
        if args.breakdown:
            for k, v in breakdown(args, gs, opt, args.reps, torch).items():
                rows.setdefault(k, []).append(v)
    res = {k: round(statistics.median(v), 2) for k, v in rows.items() if v}
    out = {"benchmark": "python_optim_step", "unit": "ms_per_step", "params": n,
           "threads": args.threads,
           "tensors": args.tensors, "reps": args.reps, "rounds": args.rounds,
           "first_step_s": round(compile_s, 3), "results": res,
           "rounds_raw": {k: [round(x, 2) for x in v] for k, v in rows.items() if v},
           "ratio_python_to_c": round(res["python_numpy"] / res["c_path"], 3)}
    if args.breakdown:
        # per round (the cases took turns there), then the median over rounds
        r = rows
        out["python_layer_ms"] = round(statistics.median(
            a - b for a, b in zip(r["step_numpy_turns"], r["direct_call"])), 2)
        out["tiny_python_layer_ms"] = round(statistics.median(
            a - b for a, b in zip(r["tiny_python_numpy"], r["tiny_direct_call"])), 3)
        if "tiny_python_torch" in r:
            out["tiny_torch_over_numpy_ms"] = round(statistics.median(
                a - b for a, b in zip(r["tiny_python_torch"], r["tiny_python_numpy_turns"])), 3)
        out["ratio_one_arena_to_direct_call"] = round(statistics.median(
            a / b for a, b in zip(r["direct_call_one_arena"], r["direct_call"])), 3)
        out["ratio_one_arena_to_c"] = round(res["direct_call_one_arena"] / res["c_path"], 3)
    if torch is not None:
        out["torch"] = f"{torch.__version__} {torch_kind}, {torch.get_num_threads()} threads"
        out["ratio_torch_to_python_torch"] = round(res["torch"] / res["python_torch"], 3)
        out["ratio_python_torch_flat_to_c_flat"] = round(
            res["python_torch_flat"] / res["c_path_flat"], 3)
        # per round (the C path ran just before the Python cases), then the median over rounds
        out["ratio_python_torch_flat_to_c_flat_paired"] = round(statistics.median(
            a / b for a, b in zip(rows["python_torch_flat"], rows["c_path_flat"])), 3)
        # the flat step minus its compiled update called directly on the same buffers (the
        # two taking turns): the Python layer's own cost in flat mode
        out["python_layer_flat_ms"] = round(statistics.median(
            a - b for a, b in zip(rows["python_torch_flat"], rows["flat_direct_call"])), 2)
        out["ratio_python_torch_flat_to_c"] = round(res["python_torch_flat"] / res["c_path"], 3)
        out["ratio_torch_to_python_torch_flat"] = round(
            res["torch"] / res["python_torch_flat"], 3)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for k, v in res.items():
            print(f"{k:14s} {v:8.2f} ms/step   rounds {out['rounds_raw'][k]}")
        print(f"first step (compile) {compile_s:.2f} s; Python / C {out['ratio_python_to_c']}")
        if args.breakdown:
            print(f"Python layer (step - direct call) {out['python_layer_ms']} ms, on 1-element "
                  f"tensors {out['tiny_python_layer_ms']} ms; direct call on one arena / on the "
                  f"arrays {out['ratio_one_arena_to_direct_call']}, / C "
                  f"{out['ratio_one_arena_to_c']}")
        if torch is not None:
            print(f"{out['torch']} / optitpu on torch tensors {out['ratio_torch_to_python_torch']}"
                  f", / optitpu flat=True {out['ratio_torch_to_python_torch_flat']}; optitpu "
                  f"flat=True / C flat {out['ratio_python_torch_flat_to_c_flat']} (per round "
                  f"{out['ratio_python_torch_flat_to_c_flat_paired']}), / C per-tensor "
                  f"{out['ratio_python_torch_flat_to_c']}; flat step - direct call "
                  f"{out['python_layer_flat_ms']} ms")


if __name__ == "__main__":
    main()
