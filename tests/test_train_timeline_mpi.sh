#!/usr/bin/env bash
# optitpu train --mpi under optitpu launch writes one Chrome trace for the job: every process's
# events shifted onto process 0's clock by the NTP-measured offset and merged by process 0, which
# states each offset and its error bound. On one host the true offset is 0, so the measured one
# must lie within its bound; and every step's all-reduce, which no member can leave before the
# last one entered, must overlap on every device of both processes within that bound.
set -euo pipefail
bin=$1 build=$3
source "$(dirname "$0")/mpi_env.sh"
mpi_skip_unless_built "$build"
command -v python3 >/dev/null || { echo "SKIPPED: python3 is missing"; exit 77; }
tmp=$(mktemp -d "$build/train_timeline_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$bin" launch --np 2 --oversubscribe -- train --mpi --devices 2 --steps 20 --eval-every 0 \
  --ckpt-dir none --out "$tmp/o" --trace "$tmp/o/job.json" --json >"$tmp/r.json" 2>"$tmp/r.err" \
  || { cat "$tmp/r.err"; exit 1; }
grep -q "trace: process 1's events shifted onto process 0's clock by .* us (NTP, [0-9]* samples, delay .* us; error bound .* us)" "$tmp/r.err"
grep -q "trace: 2 processes merged into $tmp/o/job.json" "$tmp/r.err"
python3 - "$tmp/o/job.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
clk = {c["process"]: c for c in d["otherData"]["clock"]}
assert sorted(clk) == [0, 1], clk
assert clk[0]["offset_ns"] == 0 and clk[0]["error_bound_ns"] == 0, clk[0]
c1 = clk[1]
assert c1["samples"] >= 1 and c1["delay_ns"] > 0 and c1["error_bound_ns"] >= c1["delay_ns"] / 2, c1
assert abs(c1["offset_ns"]) <= c1["error_bound_ns"], f"same host, offset outside its bound: {c1}"
names = [e for e in d["traceEvents"] if e.get("name") == "process_name"]
assert sorted(e["pid"] for e in names) == [0, 1], names
assert "+/-" in names[0]["args"]["name"], names
ar = {}
for e in d["traceEvents"]:
    if e.get("ph") == "X" and e.get("name") == "all-reduce":
        ar.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
assert sorted(ar) == [(0, 0), (0, 1), (1, 0), (1, 1)], sorted(ar)
steps = {len(v) for v in ar.values()}
assert steps == {20}, steps
slack_us = c1["error_bound_ns"] / 1e3
for k in range(20):
    iv = [sorted(v)[k] for v in ar.values()]
    gap = max(s for s, _ in iv) - min(e for _, e in iv)
    assert gap <= slack_us, f"step {k + 1}: the all-reduces do not overlap ({gap:.1f} us > {slack_us:.1f} us)"
print("offset", c1["offset_ns"], "ns, bound", c1["error_bound_ns"], "ns")
PY
echo ok
