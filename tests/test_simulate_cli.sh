#!/usr/bin/env bash
# optitpu simulate: the table on TPU presets, JSON, the SVG, the host model, and clear errors
# (batch not divisible, too many chips, a model that does not fit, bad arguments).
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect_fail() { # rc pattern args...
    local rc=$1 pat=$2
    shift 2
    local got=0
    "$bin" simulate "$@" >"$tmp/out" 2>"$tmp/err" || got=$?
    if [[ $got -ne $rc ]]; then
        echo "simulate $*: exit $got, wanted $rc"
        cat "$tmp/out" "$tmp/err"
        exit 1
    fi
    grep -q -- "$pat" "$tmp/out" "$tmp/err" || { echo "simulate $*: no '$pat'"; cat "$tmp/err"; exit 1; }
}

"$bin" help simulate | grep -q -- "--shard-optimizer"
out=$("$bin" simulate --preset v5p-4x4x8 --batch 1024 --hidden 512,512 --svg "$tmp/s.svg")
grep -q "device v5p: 459 TFLOP/s" <<<"$out"
grep -q "^   128 v5p-4x4x8 " <<<"$out"
grep -q "^    64 v5p-4x4x4 " <<<"$out"
grep -q "^     1 v5p-1x1x1 " <<<"$out"
grep -q "<polyline" "$tmp/s.svg"
grep -q "</svg>" "$tmp/s.svg"

# JSON: one object per chip count and a summary; step = compute + exposed comm + optimizer
"$bin" simulate --preset v5e-16x16 --batch 512 --chips 1,16,256 --mtbf-hours 10000 --json >"$tmp/j"
python3 - "$tmp/j" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert "summary" in rows[-1] and rows[-1]["summary"]["fits"] == 3, rows[-1]
res = [r["result"] for r in rows[:-1]]
assert [r["chips"] for r in res] == [1, 16, 256]
for r in res:
    assert r["host_s"] == 0  # a TPU's input pipeline is not in the step
    assert abs(r["step_s"] - (r["compute_s"] + r["exposed_comm_s"] + r["optimizer_s"])) < 1e-12
    assert 0 < r["goodput"] <= 1 and r["optimal_ckpt_every"] >= 1
assert res[0]["comm_s"] == 0 and res[2]["comm_s"] > 0
assert rows[2]["topology"] == "v5e-16x16"
PY

# errors with numbers
expect_fail 2 "batch 1000 is not divisible by the data-parallel degree 16 (1000 = 16 x 62 + 8)" \
    --preset v5e-4x4 --batch 1000 --chips 16
expect_fail 2 "the preset v5e-4x4 has 16 chips" --preset v5e-4x4 --chips 32
expect_fail 1 "does not fit on 1 chip" --preset v5e-2x2 --batch 4 --chips 1 \
    --hidden 32768,32768 --inputs 4096
grep -q "GiB of HBM" "$tmp/out"
expect_fail 1 "fits on none" --preset v5e-2x2 --batch 4 --hidden 49152,49152 --inputs 4096
"$bin" simulate --preset v5e-2x2 --batch 4 --hidden 49152,49152 --inputs 4096 --shard-optimizer \
    --json >"$tmp/j" 2>/dev/null && { echo "a job that fits nowhere succeeded"; exit 1; }
python3 - "$tmp/j" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows[-1]["summary"]["fits"] == 0 and rows[-1]["summary"]["does_not_fit"] == 3
for r in rows[:-1]:
    assert not r["result"]["fits"] and "does not fit on" in r["error"], r
    assert r["result"]["mem_total"] > r["result"]["mem_capacity"]
PY
expect_fail 1 "no v5e topology has 17 chips (preset v5e-16x16)" --preset v5e-16x16 --chips 17 --batch 17
expect_fail 1 "TPU v5p pods have at most 8960 chips" --preset v5p-16x20x30
expect_fail 2 "--preset ring-8 has no chip model" --preset ring-8
expect_fail 2 "--state: f32 or bf16" --preset v4-2x2x2 --state f16
# bf16 state: 2 + 2 bytes of Adam state a parameter instead of 4 + 4
f32=$("$bin" simulate --preset v4-2x2x2 --chips 1 --batch 8 --hidden 2048 --json | head -1)
b16=$("$bin" simulate --preset v4-2x2x2 --chips 1 --batch 8 --hidden 2048 --state bf16 --json | head -1)
python3 -c 'import json,sys; a=json.loads(sys.argv[1])["result"]; b=json.loads(sys.argv[2])["result"]; assert b["mem_optimizer"]*2 == a["mem_optimizer"] and b["optimizer_s"] < a["optimizer_s"], (a, b)' "$f32" "$b16"
expect_fail 1 "unknown kind 'v9'" --preset v9-4
expect_fail 2 "--allreduce" --allreduce fastest
expect_fail 2 "--batch: a positive integer" --batch -3
expect_fail 2 "--chips" --preset v4-4x4x4 --chips 1,x
expect_fail 1 "cannot open model" --preset v4-4x4x4 --model "$tmp/nope.hlo"
expect_fail 1 "direct does not implement" --preset v4-2x2x2 --allreduce direct --batch 8

# an HLO file: a parameter whose shape an output repeats is a parameter, the rest is the batch
cat >"$tmp/step.hlo" <<'HLO'
HloModule step
ENTRY main {
  w = f32[256,256] parameter(0)
  x = f32[64,256] parameter(1)
  y = f32[64,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  g = f32[256,256] dot(x, y), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT t = (f32[256,256]) tuple(g)
}
HLO
out=$("$bin" simulate --preset v4-2x2x2 --model "$tmp/step.hlo" --batch 64 --chips 1,8)
grep -q "0.06554 M parameters" <<<"$out"
grep -q "^     8 v4-2x2x2 " <<<"$out"

# the host model (measured here) with in-process devices
out=$("$bin" simulate --preset host-2 --batch 64 2>/dev/null)
grep -q "^     2 host-2 " <<<"$out"

# the validation benchmark: predicted beside measured, in one run (figures are not asserted):
# the benchmark's structure and its memory rows (accounting, not timing)
"$bin" bench simulate --devices 1,2 --steps 20 --reps 1 --window-ms 10 --mpi none --json >"$tmp/b"
python3 - "$tmp/b" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if r["case"].startswith("train mlp") and r["case"].endswith("dev: step")]
tmem = [r for r in rows if r["case"].startswith("train mlp") and r["case"].endswith("per device")]
ars = [r for r in rows if r["case"].startswith("allreduce")]
mem = [r for r in rows if r["case"].startswith("step memory")]
assert len(steps) == 2 and len(tmem) == 2 and len(ars) == 3 and len(mem) == 3, rows
for r in steps + tmem + ars + mem:
    assert r["value"] > 0 and r["baseline_value"] > 0 and r["ratio"] > 0, r
# term by term: compute and the optimizer beside the timeline's forward+backward and optimizer
terms = [r for r in rows if r["case"].endswith(("dev: compute", "dev: optimizer"))]
assert len(terms) == 4, rows
for r in terms:
    assert r["value"] > 0 and r["baseline_value"] > 0 and r["ratio"] > 0, r
    assert r["baseline"].startswith("train timeline: "), r
# memory is accounting, not timing: the prediction against optitpu train's pool peaks
for r in tmem:
    assert 0.95 <= r["ratio"] <= 1.05, r
# rows without a baseline (the host model's figures, the load) have no ratio
plain = [r for r in rows if r["baseline"] is None]
assert len(plain) == 6, plain
for r in plain:
    assert r["ratio"] is None and r["baseline_value"] is None and r["value"] > 0, r
assert not [r for r in rows if "MPI" in r["case"]], rows
PY
# with MPI built and mpirun present: 2 processes under optitpu launch, the transport at the
# gradients' size and the step, each beside its measurement
if command -v mpirun >/dev/null &&
  ! "$bin" bench simulate --mpi 2 --bad 2>&1 | grep -q "built without MPI"; then
  source "$(dirname "$0")/mpi_env.sh" # Open MPI's own allocations are not ours (ASan)
  "$bin" bench simulate --devices 1 --steps 20 --reps 1 --window-ms 10 --mpi 2 --json >"$tmp/m"
  python3 - "$tmp/m" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
mpi = [r for r in rows if "MPI" in r["case"]]
step = [r for r in mpi if r["case"].endswith("2 MPI processes: step")]
terms = [r for r in mpi if r["case"].endswith(("compute", "exposed all-reduce", "optimizer"))]
assert mpi[0]["case"].startswith("MPI all-reduce") and len(step) == 1 and len(terms) == 3, rows
for r in [mpi[0]] + step + terms:
    assert r["value"] > 0 and r["baseline_value"] > 0 and r["ratio"] > 0, r
PY
fi
# --kernels: one row per kernel of each device count's step executable and one for the whole
"$bin" bench simulate --kernels --devices 1,8 --window-ms 10 --json >"$tmp/k"
python3 - "$tmp/k" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for per in (128, 16):
    ks = [r for r in rows if r["case"].startswith("batch %d kernel " % per)]
    whole = [r for r in rows if r["case"] == "batch %d step executable alone" % per]
    assert len(ks) >= 10 and len(whole) == 1, rows
    assert all(r["value"] > 0 for r in ks + whole), ks
    assert whole[0]["baseline_value"] > 0 and whole[0]["ratio"] > 0, whole
PY
echo "simulate cli ok"
