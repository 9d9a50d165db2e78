#!/usr/bin/env bash
# optitpu train across processes: under optitpu launch, 2 processes x 2 devices train together
# (gradients summed by the hierarchical MPI all-reduce, every process's parameters checked equal);
# a process killed by --fail-device is restarted by launch from the newest verified checkpoint and
# the job ends with parameters bit-identical to the uninterrupted run. With one device per process
# and --allreduce tree (the default) the all-reduce overlaps the backward (--overlap on), the same
# bits.
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

# a damaged newest checkpoint under launch: the job stopped at 55, a bit of step 50 flipped; the
# resumed job (process 0 restores and broadcasts) falls back to 40, sets 50 aside and saves it
# again; then it is killed at step 57 and launch's restart resumes from the new step 50
"$bin" launch --np 2 --oversubscribe --max-restarts 0 -- "${job[@]}" --ckpt-every 10 \
  --stop-after 55 --ckpt-dir d --out od >/dev/null 2>d0.log || { cat d0.log; exit 1; }
printf '\x01' | dd of=d/step_00000050/model.safetensors bs=1 seek=5000 conv=notrunc 2>/dev/null
"$bin" launch --np 2 --oversubscribe --ckpt-dir d --max-restarts 2 -- "${job[@]}" --ckpt-every 10 \
  --resume --fail-device 3@57 --ckpt-dir d --out od >d.json 2>d.log || { cat d.log; exit 1; }
grep -q "checkpoint step 50 skipped: .*set aside as d/step_00000050.damaged" d.log
grep -q "restart 1: resuming from d/step_00000050" d.log
grep -q '"start_step":50' d.json
[[ $(sha a.json) == $(sha d.json) ]] || { echo "damaged-checkpoint job differs"; exit 1; }

# a process-count mismatch with the options is refused on every process
if "$bin" launch --np 2 --oversubscribe --max-restarts 0 -- train --mpi --devices 2 \
  --batch-size 3 --steps 5 --ckpt-dir none --out oc >/dev/null 2>c.log; then
  echo "a batch smaller than the pod was accepted"; exit 1
fi
grep -q "batch size 3 is smaller than the 4 devices" c.log

# --grad-accum across processes: 2 processes x 1 device accumulating 2 micro-batches of 64 is the
# same job, bit for bit, as 2 local devices doing so (the same shards, two-term sums)
"$bin" launch --np 2 --oversubscribe --max-restarts 0 -- train --mpi --devices 1 --batch-size 64 \
  --grad-accum 2 --steps 20 --eval-every 0 --json --ckpt-dir none --out oe >e.json 2>e.log \
  || { cat e.log; exit 1; }
"$bin" train --devices 2 --batch-size 64 --grad-accum 2 --steps 20 --eval-every 0 --json --quiet \
  --ckpt-dir none --out of >f.json
[[ -n $(sha e.json) && $(sha e.json) == $(sha f.json) ]] \
  || { echo "--grad-accum across processes differs: $(sha e.json) vs $(sha f.json)"; exit 1; }
# --local-sgd across processes: the pod's all-reduce averages the parameters, the same bits as in
# one process
"$bin" launch --np 2 --oversubscribe --max-restarts 0 -- train --mpi --devices 1 --local-sgd 3 \
  --steps 20 --eval-every 0 --json --ckpt-dir none --out oh >h.json 2>h.log || { cat h.log; exit 1; }
"$bin" train --devices 2 --local-sgd 3 --steps 20 --eval-every 0 --json --quiet --ckpt-dir none \
  --out oi >i.json
[[ -n $(sha h.json) && $(sha h.json) == $(sha i.json) ]] \
  || { echo "--local-sgd across processes differs: $(sha h.json) vs $(sha i.json)"; exit 1; }
# the all-reduce overlapped with the backward across processes (one device each, --allreduce
# tree, the default: the tree over the processes, whose per-element order the overlapped
# exchange keeps): 4
# processes (from 4 members the tree's order differs from rank order), with 2 accumulated
# micro-batches too: every step's metrics byte for byte the non-overlapped job's and the
# in-process tree run's
ov=(--steps 20 --eval-every 10 --json --ckpt-dir none --allreduce tree)
for acc in 1 2; do
  for o in on off; do
    "$bin" launch --np 4 --oversubscribe --max-restarts 0 -- train --mpi --devices 1 "${ov[@]}" \
      --grad-accum $acc --overlap $o --out "ov$acc$o" >"ov$acc$o.json" 2>"ov$acc$o.log" \
      || { cat "ov$acc$o.log"; exit 1; }
  done
  "$bin" train --devices 4 "${ov[@]}" --grad-accum $acc --quiet --out "ov${acc}in" \
    >"ov${acc}in.json"
  grep -q '"overlap":true' "ov${acc}on.json" || { echo "accum $acc: not overlapped"; exit 1; }
  grep -q "gradient all-reduce overlapped with the backward: .*(tree order)" "ov${acc}on.log"
  grep -q '"overlap":false' "ov${acc}off.json" || { echo "accum $acc: overlapped with off"; exit 1; }
  cmp "ov${acc}on/metrics.csv" "ov${acc}off/metrics.csv"
  cmp "ov${acc}on/metrics.csv" "ov${acc}in/metrics.csv"
  [[ -n $(sha "ov${acc}on.json") && $(sha "ov${acc}on.json") == $(sha "ov${acc}off.json") ]] \
    || { echo "accum $acc: overlapped across processes differs"; exit 1; }
done
# with --allreduce auto the processes' all-reduce picks its own algorithm, whose order depends on
# the split: --overlap on does not overlap there
"$bin" launch --np 2 --oversubscribe --max-restarts 0 -- train --mpi --devices 1 --steps 3 \
  --allreduce auto --json --ckpt-dir none --overlap on --out oj >j.json 2>j.log \
  || { cat j.log; exit 1; }
grep -q '"overlap":false' j.json
# --grad-compress has no MPI form: refused, not ignored
if "$bin" launch --np 2 --oversubscribe --max-restarts 0 -- train --mpi --devices 1 \
  --grad-compress int8 --steps 5 --ckpt-dir none --out og >/dev/null 2>g.log; then
  echo "--grad-compress was accepted with --mpi"; exit 1
fi
grep -q -- "--grad-compress is not available with --mpi" g.log
echo "train mpi ok"
