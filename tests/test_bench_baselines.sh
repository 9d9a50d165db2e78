#!/usr/bin/env bash
# The benchmarks compare like with like and say so: bench_dot and bench_adam_fused run on
# OPTITPU_THREADS threads, and every row names the thread count of each side (ours and the
# baseline), for 1 and 2 threads; bench_dot's batched cases have both baselines (the threaded
# cblas_sgemm calls in a row, and the calls split over the same pool; built with oneDNN, its
# dnnl_sgemm rows on the same threads against OpenBLAS); the bf16 cases' baseline is
# cblas_sgemm on the operands' f32 values (the int8 cases' too), the f64 cases' cblas_dgemm. One rep:
# this checks the rows, not the figures (docs/benchmarks.md has those). Skipped (77) when the
# benchmarks are not built (-DOT_BUILD_BENCH=OFF).
# Usage: test_bench_baselines.sh OPTITPU_BINARY SOURCE_DIR BUILD_DIR
set -uo pipefail
build=$3
if [[ ! -x "$build/bench_dot" || ! -x "$build/bench_adam_fused" ]]; then
  echo "SKIPPED: the benchmarks are not built here (-DOT_BUILD_BENCH=ON builds them)"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/optitpu-benchbase.XXXXXX")
trap 'rm -rf "$work"' EXIT
failed=0
for t in 1 2; do
  if OPTITPU_THREADS=$t timeout 300 "$build/bench_dot" --reps 1 --json >"$work/dot$t" 2>&1 &&
    OPTITPU_THREADS=$t timeout 300 "$build/bench_adam_fused" --sizes 1M --reps 1 --no-limits --json \
      >"$work/adam$t" 2>&1 &&
    python3 - "$t" "$work/dot$t" "$work/adam$t" <<'PY'; then
import json, sys
t = int(sys.argv[1])
th = f"{t} thread" + ("s" if t != 1 else "")
dot = [json.loads(l) for l in open(sys.argv[2])]
adam = [json.loads(l) for l in open(sys.argv[3])]
assert len(dot) >= 20 and len(adam) == 2, (dot, adam)
# built with oneDNN: one more row per case, oneDNN's dnnl_sgemm on the same threads
dnnl = [r for r in dot if ", dnnl_sgemm (oneDNN), " in r["case"]]
dot = [r for r in dot if ", dnnl_sgemm (oneDNN), " not in r["case"]]
for r in dnnl:
    assert f", dnnl_sgemm (oneDNN), {t} OpenMP thread{'s' if t != 1 else ''}; bits " in r["case"], r
    assert r["baseline"].endswith(f"OpenBLAS {th}"), r
    assert r["value"] > 0 and r["baseline_value"] > 0, r
for r in dot:
    assert r["case"].endswith(f", compiled dot, {th}"), r
    b = r["baseline"]
    assert b.endswith(f"OpenBLAS {th}") or b.endswith(
        f"split over {t} pool thread{'s' if t != 1 else ''}, OpenBLAS 1 thread each"), r
    assert r["value"] > 0 and r["baseline_value"] > 0, r
batched = {}
for r in dot:
    if " x " in r["case"]:  # batched: "... 4x8 x 256x256x64 ...", "batched 32 x 256^3"
        batched.setdefault(r["case"], []).append(r["baseline"])
assert len(batched) >= 4, batched
def gemm(case):  # the baseline's GEMM, by the case's precision
    return ("cblas_dgemm" if case.startswith("f64 ") else
            "cblas_sgemm on the f32 values" if case.startswith(("bf16 ", "int8 ")) else
            "cblas_sgemm")
for case, bl in batched.items():
    assert len(bl) == 2 and f"{gemm(case)} in a row" in bl[0] and "split" in bl[1], (case, bl)
single = [r for r in dot if r["case"] not in batched]
assert single and all(r["baseline"].startswith(f"{gemm(r['case'])}, OpenBLAS")
                      for r in single), single
assert any(r["case"].startswith("bf16 ") for r in dot), "no bf16 case"
assert any(r["case"].startswith("f64 ") for r in dot), "no f64 case"
for r in adam:
    assert r["case"].endswith(", " + th), r
    assert r["baseline"].endswith(", " + th), r
print(f"ok   {t} thread(s): {len(dot)} dot rows, {len(adam)} adam rows, every side labelled {th}")
PY
    :
  else
    echo "FAIL threads=$t"; sed 's/^/  | /' "$work/dot$t" "$work/adam$t" 2>/dev/null; failed=1
  fi
done
exit $failed
