#!/usr/bin/env python3
"""Instructions executed by one compile of `optitpu bench compile`'s generated graphs, counted by
valgrind's callgrind, and their scaling count(2N)/count(N) beside linear (2.0).

Wall time on a shared machine also scales with how much of a module's memory the caches hold
(a 100k-instruction compile's working set fits the last-level cache better than a 200k one's);
the instruction count does not, so it shows the algorithms' own scaling: a quadratic pass shows
up here as a ratio well above 2 whatever the machine, while the wall-time ratio printed by the
benchmark moves with the caches and the neighbours.

Each size runs `optitpu bench compile --sizes N --reps 1` (a warm-up compile and one measured:
two compiles) under callgrind, collecting only inside ot_compile and the fingerprint thread, so
building the graph is not counted. The benchmark compiles with native code off
(ot_compile_options.native), so the counts are the compiler's passes, never the system C
compiler's work on generated kernels. Needs valgrind (apt-get install valgrind).

With --cache-sim BYTES, callgrind also simulates a last-level cache of that size (16-way,
64-byte lines; a power of two from 1 MiB) and the script prints its data misses (reads and
writes) per compile beside the instructions: how the same linear work meets a cache the
working set outgrows.

With --shape F[,F...] (or all), the graph-shape families of `bench compile --shape` are counted
instead, at 10k, 20k, 100k and 200k (up to --max); a family's module has about, not exactly,
the size asked for, so its linear baseline is the ratio of the two modules' instruction counts.

usage: scripts/bench_compile_instructions.py [--optitpu build/optitpu] [--max N]
                                             [--shape F[,F...]|all] [--cache-sim BYTES] [--json]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SIZES = [10000, 20000, 100000, 200000, 500000, 1000000]
FAMILIES = ["residual", "braid", "fanout", "fanin", "nested", "bcast_reduce", "islands",
            "wide_tuple", "many_params", "dot_sandwich", "random", "fori_unrolled"]


def count(optitpu, n, tmp, ll, shape=None):
    out = os.path.join(tmp, "cg.%d" % n)
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
           "--toggle-collect=ot_compile", "--toggle-collect=fp_main"]
    if ll:
        cmd += ["--cache-sim=yes", "--LL=%d,16,64" % ll]
    cmd += [optitpu, "bench", "compile", "--sizes", str(n), "--reps", "1"]
    if shape:
        cmd += ["--shape", shape]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("callgrind run failed for %d:\n%s" % (n, r.stderr[-2000:]))
    instrs = None
    for line in r.stdout.splitlines():
        m = re.match(r"compile\s+(?:[a-z_]+ )?(\d+) instrs -O2", line)
        if m:
            instrs = int(m.group(1))
    events, total = None, None
    with open(out) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            if line.startswith("totals:") or line.startswith("summary:"):
                total = [int(v) for v in line.split()[1:]]
    if total is None or instrs is None or not events or len(events) != len(total):
        sys.exit("no event totals for %d in %s" % (n, out))
    # per compile: the warm-up and one measured compile were counted
    ev = {e: v / 2.0 for e, v in zip(events, total)}
    return instrs, ev


def row(json_out, case, metric, value, baseline=None, baseline_value=None):
    ratio = baseline_value / value if baseline_value and value else None
    if json_out:
        print(json.dumps({"bench": "compile-instructions", "case": case, "metric": metric,
                          "value": value, "baseline": baseline,
                          "baseline_value": baseline_value, "ratio": ratio}))
    else:
        b = "%s %.3f ratio %.3f" % (baseline, baseline_value, ratio) if baseline else ""
        print("%-34s %-28s %14.4g  %s" % (case, metric, value, b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--optitpu", default="build/optitpu")
    ap.add_argument("--max", type=int, default=200000,
                    help="largest size (default 200000; 1000000 takes several minutes)")
    ap.add_argument("--cache-sim", type=int, default=0, metavar="BYTES",
                    help="also simulate a last-level cache of BYTES (a power of two)")
    ap.add_argument("--shape", metavar="F[,F...]|all",
                    help="count the graph-shape families of bench compile --shape instead")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.cache_sim and (a.cache_sim < (1 << 20) or a.cache_sim & (a.cache_sim - 1)):
        sys.exit("--cache-sim needs a power of two from 1048576")
    if not shutil.which("valgrind"):
        sys.exit("valgrind not found: apt-get install valgrind")
    if not os.access(a.optitpu, os.X_OK):
        sys.exit("%s is not an executable (build first)" % a.optitpu)
    sizes = [n for n in SIZES if n <= a.max]
    shapes = [None]
    if a.shape:
        shapes = FAMILIES if a.shape == "all" else a.shape.split(",")
        sizes = [n for n in SIZES[:4] if n <= a.max]
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            measure(a, shape, sizes, tmp)


def measure(a, shape, sizes, tmp):
    got, miss, mod = {}, {}, {}
    llname = "%d MiB LL" % (a.cache_sim >> 20)
    prefix = shape + " " if shape else ""
    for n in sizes:
        instrs, ev = count(a.optitpu, n, tmp, a.cache_sim, shape)
        ir = ev["Ir"]
        got[n], mod[n] = ir, instrs
        row(a.json, "%s%d instrs" % (prefix, instrs), "instructions per compile", ir)
        row(a.json, "%s%d instrs" % (prefix, instrs), "instructions per graph instr", ir / instrs)
        if a.cache_sim:
            miss[n] = ev.get("DLmr", 0) + ev.get("DLmw", 0)
            row(a.json, "%s%d instrs" % (prefix, instrs), llname + " data misses per compile",
                miss[n])
        if n // 2 in got:
            lin = mod[n] / mod[n // 2]
            case = "%sscaling %dk -> %dk" % (prefix, n // 2000, n // 1000)
            row(a.json, case, "count(2N)/count(N)", ir / got[n // 2], "linear (%.3g)" % lin, lin)
            if a.cache_sim and miss[n // 2]:
                row(a.json, case, llname + " misses(2N)/misses(N)", miss[n] / miss[n // 2],
                    "linear (%.3g)" % lin, lin)

if __name__ == "__main__":
    main()
