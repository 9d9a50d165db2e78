#!/usr/bin/env bash
# optitpu train --mpi --shard-optimizer: 3 processes of one device each shard the optimizer update
# over the processes' communicator (tree reduce-scatter, all-gather) and end bit for bit as the
# in-process sharded run on 3 devices with the tree; their checkpoints hold one optim shard per
# process, byte for byte the in-process run's; a process killed by --fail-device is restarted by
# launch from the sharded checkpoint (process 0 restores and hands every process its block) and
# the job ends as the uninterrupted one; int8 state too. Overlapped (--overlap on): the same
# metrics byte for byte, the communication inside the forward/backward in the merged trace. More
# than one device per process is refused.
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

# overlapped across processes (--overlap on): each parameter's gradients sent to their owners
# and reduced between the backward's kernels, the all-gather received before each parameter's
# first reader in the next forward. 4 processes (from 4 members the tree's order differs from
# rank order): every step's metrics byte for byte the non-overlapped job's and the in-process
# run's, for adam and lamb (whose trust ratios add the norms' all-gather beside the exchange)
ov=(--steps 20 --eval-every 10 --ckpt-dir none --json --shard-optimizer)
for opt in adam lamb; do
  for o in on off; do
    "$bin" launch --np 4 --oversubscribe --max-restarts 0 -- train --mpi --devices 1 "${ov[@]}" \
      --optimizer $opt --overlap $o --out "ov_${opt}_$o" >"ov_${opt}_$o.json" 2>ov.log \
      || { cat ov.log; exit 1; }
  done
  "$bin" train --devices 4 --allreduce tree "${ov[@]}" --optimizer $opt --overlap off --quiet \
    --out "ov_${opt}_in" >"ov_${opt}_in.json"
  grep -q '"overlap":true' "ov_${opt}_on.json" || { echo "$opt: not overlapped"; exit 1; }
  grep -q '"overlap":false' "ov_${opt}_off.json" || { echo "$opt: overlapped with off"; exit 1; }
  cmp "ov_${opt}_on/metrics.csv" "ov_${opt}_off/metrics.csv"
  cmp "ov_${opt}_on/metrics.csv" "ov_${opt}_in/metrics.csv"
  same "$opt overlapped vs not" "ov_${opt}_on.json" "ov_${opt}_off.json"
done
# a process killed at step 25 of an overlapped job: restarted from step 20, the same end
"$bin" launch --np 3 --oversubscribe --ckpt-dir h --max-restarts 2 -- "${job[@]}" --overlap on \
  --ckpt-dir h --out oh --fail-device 1@25 >h.json 2>h.log || { cat h.log; exit 1; }
grep -q '"overlap":true' h.json
grep -q '"start_step":20' h.json
same "overlapped, restarted from the sharded checkpoint" a.json h.json
# the merged trace: on every process the all-gather of steps 1-3 runs inside the next step's
# forward/backward (before a parameter's first reader), and the reduce-scatter inside them too
"$bin" launch --np 2 --oversubscribe --max-restarts 0 -- train --mpi --devices 1 --steps 4 \
  --hidden 64,64 --shard-optimizer --overlap on --ckpt-dir none --quiet --out ot \
  --trace trace.json >/dev/null 2>t.log || { cat t.log; exit 1; }
if command -v python3 >/dev/null; then
  python3 - trace.json <<'PY'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))['traceEvents'] if e.get('ph') == 'X']
def inside(name, pid):
    fb = [(e['ts'], e['ts'] + e['dur']) for e in ev
          if e.get('pid') == pid and e['name'] == 'forward+backward']
    return sum(1 for e in ev if e.get('pid') == pid and e['name'] == name and
               any(a <= e['ts'] and e['ts'] + e['dur'] <= b for a, b in fb))
for pid in range(2):
    if inside('all-gather', pid) < 3:
        sys.exit(f'process {pid}: the all-gather of steps 1-3 not inside the next forward')
if sum(inside('reduce-scatter', pid) for pid in range(2)) < 4:
    sys.exit('fewer than 4 reduce-scatter events inside forward/backward in 4 steps')
PY
else
  echo "python3 missing: the trace's nesting not checked"
fi

# two devices per process: refused on every process, with the reason
if "$bin" launch --np 2 --oversubscribe --max-restarts 0 -- train --mpi --devices 2 \
  --shard-optimizer --steps 5 --ckpt-dir none --out od >/dev/null 2>d.log; then
  echo "--shard-optimizer with two devices per process was accepted"; exit 1
fi
grep -q -- "--shard-optimizer with --mpi takes one device per process (--devices 1, not 2)" d.log
echo "train shard mpi ok"
