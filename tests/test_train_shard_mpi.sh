#!/usr/bin/env bash
# optitpu train --mpi --shard-optimizer: 3 processes of one device each shard the optimizer update
# over the processes' communicator (tree reduce-scatter, all-gather) and end bit for bit as the
# in-process sharded run on 3 devices with the tree; their checkpoints hold one optim shard per
# process, byte for byte the in-process run's; a process killed by --fail-device is restarted by
# launch from the sharded checkpoint (process 0 restores and hands every process its block) and
# the job ends as the uninterrupted one; int8 state too. More than one device per process is
# refused.
set -euo pipefail
bin=$1 build=$3
source "$(dirname "$0")/mpi_env.sh"
mpi_skip_unless_built "$build"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
sha() { sed -n 's/.*"params_sha256":"\([0-9a-f]*\)".*/\1/p' "$1"; }
same() { # WHAT A B
  [[ -n $(sha "$2") && $(sha "$2") == $(sha "$3") ]] \
    || { echo "$1: $(sha "$2") vs $(sha "$3")"; exit 1; }
}
steps=(--steps 30 --ckpt-every 10 --eval-every 0 --json --shard-optimizer)
job=(train --mpi --devices 1 "${steps[@]}")

"$bin" launch --np 3 --oversubscribe --max-restarts 0 -- "${job[@]}" --ckpt-dir a --out oa \
  >a.json 2>a.log || { cat a.log; exit 1; }
grep -q "sharded optimizer update: gradients reduce-scattered (tree) .* over 3 devices" a.log
"$bin" train --devices 3 --allreduce tree "${steps[@]}" --quiet --ckpt-dir b --out ob >b.json
same "across processes vs in one process" a.json b.json
for f in model optim-00000-of-00003 optim-00001-of-00003 optim-00002-of-00003; do
  cmp "a/step_00000020/$f.safetensors" "b/step_00000020/$f.safetensors"
done
grep -q '"shard_devices": *3' a/step_00000020/manifest.json

# process 2 dies at step 25: launch restarts the job from the checkpoint of step 20
"$bin" launch --np 3 --oversubscribe --ckpt-dir c --max-restarts 2 -- "${job[@]}" --ckpt-dir c \
  --out oc --fail-device 2@25 >c.json 2>c.log || { cat c.log; exit 1; }
grep -q "restart 1: resuming from c/step_00000020" c.log
grep -q '"start_step":20' c.json
same "restarted from the sharded checkpoint" a.json c.json

# int8 state: each process holds its block's codes and absmax; bit for bit the in-process run,
# its shards byte for byte, and a restart from the sharded int8 checkpoint ends the same
"$bin" launch --np 3 --oversubscribe --max-restarts 0 -- "${job[@]}" --state int8 \
  --int8-min-size 0 --ckpt-dir e \
  --out oe >e.json 2>e.log || { cat e.log; exit 1; }
"$bin" train --devices 3 --allreduce tree "${steps[@]}" --state int8 \
  --int8-min-size 0 --quiet --ckpt-dir f \
  --out of >f.json
same "int8 state across processes vs in one process" e.json f.json
for f in optim-00000-of-00003 optim-00001-of-00003 optim-00002-of-00003; do
  cmp "e/step_00000020/$f.safetensors" "f/step_00000020/$f.safetensors"
done
"$bin" launch --np 3 --oversubscribe --ckpt-dir g --max-restarts 2 -- "${job[@]}" --state int8 \
  --int8-min-size 0 --ckpt-dir g --out og --fail-device 1@25 >g.json 2>g.log \
  || { cat g.log; exit 1; }
grep -q '"start_step":20' g.json
same "int8: restarted from the sharded checkpoint" e.json g.json

# two devices per process: refused on every process, with the reason
if "$bin" launch --np 2 --oversubscribe --max-restarts 0 -- train --mpi --devices 2 \
  --shard-optimizer --steps 5 --ckpt-dir none --out od >/dev/null 2>d.log; then
  echo "--shard-optimizer with two devices per process was accepted"; exit 1
fi
grep -q -- "--shard-optimizer with --mpi takes one device per process (--devices 1, not 2)" d.log
echo "train shard mpi ok"
