#!/usr/bin/env bash
# optitpu train --shard-optimizer --state int8 --int8-min-size 0 (ZeRO-1 with 8-bit block-wise
# state): every tensor is quantized (a device's block mixes tensors), each on whole quantization
# blocks of its own, the devices' blocks whole quantization blocks, so the parameters end bit for
# bit as in the same run without --shard-optimizer (adam, adamw with gradient accumulation, lion;
# 2-5 devices; --overlap on and off) and each device holds about 1/N of its state. Checkpoints hold
# one optim shard per device (codes u8, absmax f32 per block), describe the unsharded run's
# layout, and resume bit for bit onto the same device count, another one, or unsharded (and an
# unsharded checkpoint resumes sharded). Refused with the reason: --shard-optimizer --state int8
# without --int8-min-size 0 (the opt-in to quantizing every tensor), an optimizer without the
# fused int8 kernel, a checkpoint of another state layout (unsharded int8 with the default
# minimum size). Across processes: test_train_shard_mpi.sh.
set -euo pipefail
bin=$1
builddir=$3
work=$(mktemp -d "$builddir/train_shard_int8_XXXXXX")
trap 'rm -rf "$work"' EXIT
field() { sed -n "s/.*\"$2\":\"\\{0,1\\}\\([0-9a-z]*\\).*/\\1/p" "$1"; }
common=(--steps 25 --eval-every 10 --ckpt-dir none --json --quiet --state int8 --int8-min-size 0)

check() { # NAME DEVICES EXTRA...
  local name=$1 n=$2
  shift 2
  "$bin" train "${common[@]}" --out "$work/ref" --devices "$n" "$@" >"$work/$name.ref.json"
  "$bin" train "${common[@]}" --out "$work/o" --devices "$n" --shard-optimizer --overlap on \
    "$@" >"$work/$name.json"
  "$bin" train "${common[@]}" --out "$work/no" --devices "$n" --shard-optimizer --overlap off \
    "$@" >"$work/$name.no.json"
  local a b c u s
  a=$(field "$work/$name.ref.json" params_sha256)
  b=$(field "$work/$name.json" params_sha256)
  c=$(field "$work/$name.no.json" params_sha256)
  [[ -n $a && $a == "$b" ]] || { echo "$name: sharded parameters $b differ from unsharded $a"; exit 1; }
  [[ $a == "$c" ]] || { echo "$name: --overlap off parameters $c differ from unsharded $a"; exit 1; }
  cmp "$work/ref/metrics.csv" "$work/o/metrics.csv" \
    || { echo "$name: the sharded run's metrics differ from the unsharded run's"; exit 1; }
  grep -q '"shard_optimizer":true' "$work/$name.json"
  u=$(field "$work/$name.ref.json" optim_state_bytes_per_device)
  s=$(field "$work/$name.json" optim_state_bytes_per_device)
  # N blocks of whole quantization blocks: the head's block and each block's rounding up
  ((s * n >= u && s * n <= u + (n + 1) * 260 * 2)) \
    || { echo "$name: $s bytes of state per device sharded, $u unsharded, $n devices"; exit 1; }
}
check adam4 4
check adamw_accum3 3 --optimizer adamw --weight-decay 0.01 --grad-accum 2
check lion5 5 --optimizer lion --lr 0.0005
check adam2_wide 2 --hidden 96,64

# the default minimum size quantizes only tensors of 4096 elements: other bits than sharded
"$bin" train "${common[@]}" --int8-min-size 4096 --out "$work/d" --devices 4 >"$work/default.json"
[[ $(field "$work/default.json" params_sha256) != $(field "$work/adam4.json" params_sha256) ]] \
  || { echo "--int8-min-size 4096 gave the bits of quantizing every tensor"; exit 1; }

# refusals, with the reason and a non-zero exit
refused() { # WHAT MESSAGE ARGS...
  local what=$1 msg=$2
  shift 2
  if "$bin" train --steps 2 --ckpt-dir none --out "$work/o" --quiet "$@" >/dev/null 2>"$work/err"; then
    echo "$what was accepted"; exit 1
  fi
  grep -q -- "$msg" "$work/err" || { echo "$what: no reason"; cat "$work/err"; exit 1; }
}
refused "sharded int8 without the opt-in" "give --int8-min-size 0 to accept that" \
  --devices 2 --shard-optimizer --state int8
refused "a minimum size with --shard-optimizer" "quantizes every tensor" \
  --devices 2 --shard-optimizer --state int8 --int8-min-size 4096
refused "rmsprop with int8 state sharded" "does not take int8 state with this optimizer" \
  --devices 2 --shard-optimizer --state int8 --int8-min-size 0 --optimizer rmsprop

# checkpoints: sharded over 4, stopped after step 25 (checkpoints of steps 10 and 20)
job=(--steps 40 --ckpt-every 10 --eval-every 0 --json --quiet --state int8 --int8-min-size 0)
"$bin" train "${job[@]}" --devices 4 --ckpt-dir "$work/ref" --out "$work/o" >"$work/ref.json"
"$bin" train "${job[@]}" --devices 4 --shard-optimizer --ckpt-dir "$work/ck" --stop-after 25 \
  --out "$work/o" >/dev/null
s20=$work/ck/step_00000020
for i in 0 1 2 3; do [[ -s $s20/optim-0000$i-of-00004.safetensors ]]; done
grep -q '"shard_devices": *4' "$s20/manifest.json"
grep -aq 'shard2.exp_avg_sq.absmax' "$s20/optim-00002-of-00004.safetensors" \
  || { echo "no absmax in the shard"; exit 1; }
layout() { grep -o 'state_layout[^,]*' "$1" | head -1; }
[[ $(layout "$s20/manifest.json") == $(layout "$work/ref/step_00000020/manifest.json") ]] \
  || { echo "sharded and unsharded int8 state layouts differ"; exit 1; }
resume() { # NAME CKPT REF ARGS...
  local name=$1 src=$2 ref=$3
  shift 3
  rm -rf "$work/$name"
  cp -r "$src" "$work/$name"
  "$bin" train "${job[@]}" "$@" --ckpt-dir "$work/$name" --resume --out "$work/o" \
    >"$work/$name.json" 2>"$work/$name.err"
  grep -q '"start_step":20' "$work/$name.json" \
    || { echo "$name: did not resume from step 20"; cat "$work/$name.err"; exit 1; }
  [[ -z $ref ]] || [[ $(field "$work/$ref.json" params_sha256) == $(field "$work/$name.json" params_sha256) ]] \
    || { echo "$name: parameters differ from $ref"; exit 1; }
}
rm -rf "$work/ref20" && mkdir -p "$work/ref20"
cp -r "$work/ref/step_00000020" "$work/ref20/"
for n in 2 3 5; do resume "ref_$n" "$work/ref20" "" --devices "$n"; done
resume same4 "$work/ck" ref --devices 4 --shard-optimizer
resume onto2 "$work/ck" ref_2 --devices 2 --shard-optimizer
resume onto3 "$work/ck" ref_3 --devices 3 --shard-optimizer
resume unsharded "$work/ck" ref --devices 4
resume unsharded2 "$work/ck" ref_2 --devices 2
resume from_unsharded "$work/ref20" ref_5 --devices 5 --shard-optimizer
# an unsharded checkpoint of another layout (tensors under 4096 elements in f32): refused
"$bin" train "${job[@]}" --int8-min-size 4096 --devices 4 --ckpt-dir "$work/dck" --stop-after 25 \
  --out "$work/o" >/dev/null
if "$bin" train "${job[@]}" --devices 4 --shard-optimizer --ckpt-dir "$work/dck" --resume \
  --out "$work/o" >/dev/null 2>"$work/err"; then
  echo "a checkpoint of another state layout was resumed"; exit 1
fi
grep -q "has another optimizer state layout" "$work/err" || { cat "$work/err"; exit 1; }
echo ok
