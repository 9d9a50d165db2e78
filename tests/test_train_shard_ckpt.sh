#!/usr/bin/env bash
# optitpu train --shard-optimizer with checkpoints: the optimizer state is saved as one optim shard
# per device, and a run stopped and resumed ends bit for bit as the uninterrupted one whether it
# resumes onto the same device count, another one, or unsharded (and an unsharded checkpoint
# resumes sharded); the sharded and unsharded runs describe the same state layout. A shard file
# missing, or one of another step copied in, fails the step's verification: the resume sets it
# aside and continues from the step before, never mixing shards of two steps. bf16 state too.
set -euo pipefail
bin=$1
builddir=$3
work=$(mktemp -d "$builddir/train_shard_ckpt_XXXXXX")
trap 'rm -rf "$work"' EXIT
sha() { sed -n 's/.*"params_sha256":"\([0-9a-f]*\)".*/\1/p' "$1"; }
same() { # WHAT A B
  [[ -n $(sha "$2") && $(sha "$2") == $(sha "$3") ]] \
    || { echo "$1: $(sha "$2") vs $(sha "$3")"; exit 1; }
}
jobv=(--steps 40 --ckpt-every 10 --eval-every 0 --json --optimizer nadam)
job=("${jobv[@]}" --quiet)

# the reference: unsharded, uninterrupted (nadam: two array slots and a scalar one)
"$bin" train "${job[@]}" --devices 4 --ckpt-dir "$work/ref" --out "$work/o" >"$work/ref.json"

# sharded over 4, stopped after step 25 (checkpoints of steps 10 and 20)
"$bin" train "${job[@]}" --devices 4 --shard-optimizer --ckpt-dir "$work/ck" --stop-after 25 \
  --out "$work/o" >/dev/null
s20=$work/ck/step_00000020
for i in 0 1 2 3; do [[ -s $s20/optim-0000$i-of-00004.safetensors ]]; done
grep -q '"shard_devices": *4' "$s20/manifest.json"
# the layout record is the unsharded run's: either resumes the other
layout() { grep -o 'state_layout[^,]*' "$1" | head -1; }
[[ $(layout "$s20/manifest.json") == $(layout "$work/ref/step_00000020/manifest.json") ]] \
  || { echo "sharded and unsharded state layouts differ"; exit 1; }

resume() { # NAME CKPT REF ARGS...: resume a copy of CKPT with ARGS, compare with run REF
  local name=$1 src=$2 ref=$3
  shift 3
  rm -rf "$work/$name"
  cp -r "$src" "$work/$name"
  "$bin" train "${job[@]}" "$@" --ckpt-dir "$work/$name" --resume --out "$work/o" \
    >"$work/$name.json" 2>"$work/$name.err"
  grep -q '"start_step":20' "$work/$name.json" \
    || { echo "$name: did not resume from step 20"; cat "$work/$name.err"; exit 1; }
  [[ -z $ref ]] || same "$name" "$work/$ref.json" "$work/$name.json"
}
# the unsharded checkpoint of step 20 resumed unsharded on 2, 3 and 5 devices: the references
# for the sharded checkpoint resumed there (the pod's size changes the reduction's order)
rm -rf "$work/ref20" && mkdir -p "$work/ref20"
cp -r "$work/ref/step_00000020" "$work/ref20/"
for n in 2 3 5; do resume "ref_$n" "$work/ref20" "" --devices "$n"; done
resume same4 "$work/ck" ref --devices 4 --shard-optimizer
resume onto2 "$work/ck" ref_2 --devices 2 --shard-optimizer
resume onto3 "$work/ck" ref_3 --devices 3 --shard-optimizer
resume unsharded "$work/ck" ref --devices 4
resume unsharded2 "$work/ck" ref_2 --devices 2
# an unsharded checkpoint resumed sharded
resume from_unsharded "$work/ref20" ref_5 --devices 5 --shard-optimizer

# a shard missing: step 20 is set aside, the run resumes from step 10 and still ends exact
rm -rf "$work/miss" && cp -r "$work/ck" "$work/miss"
rm "$work/miss/step_00000020/optim-00002-of-00004.safetensors"
"$bin" train "${jobv[@]}" --devices 4 --shard-optimizer --ckpt-dir "$work/miss" --resume \
  --out "$work/o" >"$work/miss.json" 2>"$work/miss.err"
grep -q '"start_step":10' "$work/miss.json" || { echo "missing shard: not step 10"; exit 1; }
grep -q "step 20 skipped: CORRUPT_DATA: .*optim-00002-of-00004.safetensors: file missing" \
  "$work/miss.err" \
  || { echo "missing shard: not named"; cat "$work/miss.err"; exit 1; }
[[ -d $work/miss/step_00000020.damaged ]] || { echo "missing shard: step not set aside"; exit 1; }
same "resumed past a missing shard" "$work/ref.json" "$work/miss.json"

# a shard of step 10 copied into step 20: never mixed in
rm -rf "$work/mix" && cp -r "$work/ck" "$work/mix"
cp "$work/mix/step_00000010/optim-00001-of-00004.safetensors" "$work/mix/step_00000020/"
"$bin" train "${job[@]}" --devices 4 --shard-optimizer --ckpt-dir "$work/mix" --resume \
  --out "$work/o" >"$work/mix.json" 2>"$work/mix.err"
grep -q '"start_step":10' "$work/mix.json" || { echo "mixed shards: not step 10"; exit 1; }
same "resumed past a shard of another step" "$work/ref.json" "$work/mix.json"
# bf16 state (rmsprop): the slots are bf16 in the shards and re-cut as bf16 onto 2 devices
jb=(--steps 40 --ckpt-every 10 --eval-every 0 --json --quiet --optimizer rmsprop --state bf16)
"$bin" train "${jb[@]}" --devices 4 --ckpt-dir "$work/bref" --stop-after 25 --out "$work/o" >/dev/null
"$bin" train "${jb[@]}" --devices 2 --ckpt-dir "$work/bref" --resume --out "$work/o" \
  >"$work/bref2.json"
"$bin" train "${jb[@]}" --devices 4 --shard-optimizer --ckpt-dir "$work/bck" --stop-after 25 \
  --out "$work/o" >/dev/null
"$bin" train "${jb[@]}" --devices 2 --shard-optimizer --ckpt-dir "$work/bck" --resume \
  --out "$work/o" >"$work/bsh2.json"
grep -q '"start_step":20' "$work/bsh2.json" || { echo "bf16: did not resume from step 20"; exit 1; }
same "bf16 state resumed onto 2 sharded" "$work/bref2.json" "$work/bsh2.json"
echo ok
