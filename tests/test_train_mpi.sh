#!/usr/bin/env bash
# optitpu train across processes: under optitpu launch, 2 processes x 2 devices train together
# (gradients summed by the hierarchical MPI all-reduce, every process's parameters checked equal);
# a process killed by --fail-device is restarted by launch from the newest verified checkpoint and
# the job ends with parameters bit-identical to the uninterrupted run.
set -euo pipefail
bin=$1 build=$3
source "$(dirname "$0")/mpi_env.sh"
mpi_skip_unless_built "$build"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
sha() { sed -n 's/.*"params_sha256":"\([0-9a-f]*\)".*/\1/p' "$1"; }
job=(train --mpi --devices 2 --steps 60 --ckpt-every 20 --eval-every 0 --json)

"$bin" launch --np 2 --oversubscribe -- "${job[@]}" --ckpt-dir a --out oa >a.json 2>a.log \
  || { cat a.log; exit 1; }
grep -q '"final_step":60' a.json
grep -q '"devices_end":4' a.json
[[ -d a/step_00000060 && -s oa/metrics.csv ]]

# device 3 (process 1) dies at step 30; checkpoints at 20, 40, 60
"$bin" launch --np 2 --oversubscribe --ckpt-dir b --max-restarts 2 -- "${job[@]}" --ckpt-dir b \
  --out ob --fail-device 3@30 >b.json 2>b.log || { cat b.log; exit 1; }
grep -q "device 3 (process 1) is killed at step 30" b.log
grep -q "restart 1: resuming from b/step_00000020" b.log
grep -q "resumed from the checkpoint of step 20 on 2 processes\|resumed from the checkpoint of step 20 in b on 2 processes" b.log
grep -q '"start_step":20' b.json
[[ -n $(sha a.json) && $(sha a.json) == $(sha b.json) ]] \
  || { echo "restarted job differs: $(sha a.json) vs $(sha b.json)"; exit 1; }

# a process-count mismatch with the options is refused on every process
if "$bin" launch --np 2 --oversubscribe --max-restarts 0 -- train --mpi --devices 2 \
  --batch-size 3 --steps 5 --ckpt-dir none --out oc >/dev/null 2>c.log; then
  echo "a batch smaller than the pod was accepted"; exit 1
fi
grep -q "batch size 3 is smaller than the 4 devices" c.log
echo "train mpi ok"
