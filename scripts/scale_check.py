#!/usr/bin/env python3
"""Compiles each shape of scripts/gen_scale_hlo.py at N and 2N (and more doublings) with a small
stack, and prints the whole process's time (parse, verify, compile), each pass's time and the
ratio per doubling. A ratio far above 2 at a size where the time is not noise marks a pass that
is not linear or n log n; a crash under the small stack marks recursion as deep as the graph.

  scripts/scale_check.py --optitpu build-rel/optitpu [--sizes 10000,20000] [--stack-kb 256]
                         [--reps 2] [--only SHAPE,...]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run_once(optitpu, path, stack_kb):
    def limit():
        resource.setrlimit(resource.RLIMIT_STACK, (stack_kb * 1024, stack_kb * 1024))

    t0 = time.perf_counter()
    p = subprocess.run([optitpu, "compile", path, "--native", "off", "--stats", "--json"],
                       capture_output=True, text=True, preexec_fn=limit)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        return None, wall, (p.stderr.strip().splitlines() or ["signal %d" % -p.returncode])[-1]
    d = json.loads(p.stdout)
    passes = {}
    for e in d["passes"]:
        passes[e["pass"]] = passes.get(e["pass"], 0.0) + e["time_ms"] / 1e3
    passes["(compile)"] = d["compile_s"]
    passes["(process)"] = wall
    return passes, wall, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--optitpu", required=True)
    ap.add_argument("--sizes", default="10000,20000")
    ap.add_argument("--stack-kb", type=int, default=256)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    shapes = subprocess.run([sys.executable, os.path.join(HERE, "gen_scale_hlo.py"), "--list"],
                            capture_output=True, text=True, check=True).stdout.split()
    if a.only:
        shapes = [s for s in shapes if s in a.only.split(",")]
    worst = 0.0
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            res = []
            for n in sizes:
                path = os.path.join(tmp, f"{shape}_{n}.hlo")
                with open(path, "w") as f:
                    subprocess.run([sys.executable, os.path.join(HERE, "gen_scale_hlo.py"), shape,
                                    str(n)], stdout=f, check=True)
                best = None
                err = None
                for _ in range(a.reps):
                    p, _, err = run_once(a.optitpu, path, a.stack_kb)
                    if p is None:
                        break
                    best = p if best is None else {k: min(v, best.get(k, v)) for k, v in p.items()}
                if err:
                    print(f"{shape:18} n={n:8}: FAILED: {err}")
                    failed = True
                    break
                res.append((n, best))
            for (n0, p0), (n1, p1) in zip(res, res[1:]):
                keys = sorted(p1, key=lambda k: -p1[k])
                cells = []
                for k in keys:
                    if k not in p0 or (p1[k] < 0.02 and not k.startswith("(")):
                        continue
                    r = p1[k] / max(p0[k], 1e-6)
                    if p1[k] >= 0.05:
                        worst = max(worst, r)
                    cells.append(f"{k} {p0[k]:.3f}->{p1[k]:.3f} x{r:.2f}")
                print(f"{shape:18} {n0}->{n1}: " + "; ".join(cells))
                sys.stdout.flush()
    print(f"worst ratio among timings >= 50 ms: {worst:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
