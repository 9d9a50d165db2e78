#!/usr/bin/env bash
# The MPI communicator tests (tests/test_mpi.c) with 2 processes, oversubscribed.
set -euo pipefail
build=$3
source "$(dirname "$0")/mpi_env.sh"
mpi_skip_unless_built "$build"
timeout 300 mpirun --oversubscribe -x OT_TEST_EXPECT_SHM=1 -np 2 "$build/test_mpi"
# the benchmark under mpirun: one JSON row per size, ours beside MPI_Allreduce
out=$(timeout 120 mpirun --oversubscribe -np 2 "$1" bench collectives --mpi --sizes 64K,1M --reps 2 \
  --warmup 1 --json)
[[ $(grep -c '"bench": *"collectives_mpi".*"baseline": *"MPI_Allreduce' <<<"$out") -eq 2 ]] ||
  { echo "bench collectives --mpi: expected 2 rows: $out"; exit 1; }
# a step's rhythm (--compute-us): one row, the step beside the same CPU work alone; uncalibrated
# (--no-calibrate), auto picks the algorithm optitpu train --mpi --allreduce auto runs (train does
# not calibrate; with one device per process its default, tree, runs the tree instead)
out=$(timeout 120 mpirun --oversubscribe -np 2 "$1" bench collectives --mpi --no-calibrate \
  --sizes 38448 --compute-us 50 --reps 2 --json)
row=$(grep '"case": *"step 50us + allreduce f32 37KiB np2 ' <<<"$out") ||
  { echo "bench collectives --mpi --compute-us: no step row: $out"; exit 1; }
python3 - "$row" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
assert r["baseline"] == "the CPU work alone, no all-reduce", r
assert r["value"] > 0 and r["baseline_value"] >= 50 and r["ratio"] > 0, r
PY
algo=$(sed -n 's/.*np2 \([a-z_]*\)".*/\1/p' <<<"$row")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the 64-128-10 MLP's gradients and loss, correct count: 9,612 f32 = 38,448 bytes
(cd "$tmp" && timeout 120 "$1" launch --np 2 --oversubscribe --max-restarts 0 -- train --mpi \
  --devices 1 --allreduce auto --steps 2 --hidden 128 --ckpt-dir none >/dev/null 2>train.log) ||
  { cat "$tmp/train.log"; exit 1; }
grep -q "gradient all-reduce: 38448 bytes over 2 devices (across processes: $algo)" \
  "$tmp/train.log" || { echo "train --mpi's algorithm is not $algo:"; cat "$tmp/train.log"; exit 1; }
