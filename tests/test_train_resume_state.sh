#!/usr/bin/env bash
# State beyond parameters and optimizer slots survives checkpoints: with --grad-compress (int8,
# bf16, top-k) every device's error-feedback residuals are checkpointed, so a run stopped and
# resumed, and a run rolled back onto a spare by --recovery restore, end with the uninterrupted
# run's parameters; with --local-sgd every device's own state is, so a resume is exact too; a
# checkpoint of another compression or device count is refused clearly.
set -euo pipefail
bin=$1
builddir=$3
work=$(mktemp -d "$builddir/train_state_XXXXXX")
trap 'rm -rf "$work"' EXIT
sha() { sed -n 's/.*"params_sha256":"\([0-9a-f]*\)".*/\1/p' "$1"; }
same() { # WHAT A B
  [[ -n $(sha "$2") && $(sha "$2") == $(sha "$3") ]] \
    || { echo "$1: $(sha "$2") vs $(sha "$3")"; exit 1; }
}
base=(--devices 4 --steps 60 --ckpt-every 20 --eval-every 0 --json --quiet)

for c in int8 bf16 topk:0.05; do
  d=$work/${c/:/_}
  job=("${base[@]}" --grad-compress "$c")
  "$bin" train "${job[@]}" --ckpt-dir "$d/ref" --out "$d/o" >"$d.ref.json"
  "$bin" train "${job[@]}" --ckpt-dir "$d/ck" --stop-after 45 --out "$d/o" >/dev/null
  "$bin" ckpt ls "$d/ck" >/dev/null
  [[ -s $d/ck/step_00000040/residual.safetensors ]]
  "$bin" train "${job[@]}" --ckpt-dir "$d/ck" --resume --out "$d/o" >"$d.res.json"
  grep -q '"start_step":40' "$d.res.json"
  same "$c resumed" "$d.ref.json" "$d.res.json"
  "$bin" train "${job[@]}" --ckpt-dir "$d/rec" --fail-device 2@50 --recovery restore \
    --out "$d/o" >"$d.rec.json" 2>/dev/null
  grep -q '"failures":1' "$d.rec.json"
  same "$c restored onto a spare" "$d.ref.json" "$d.rec.json"
done

# LocalSGD: between averages every device holds its own parameters and optimizer state; all of
# them are checkpointed, so a run stopped between averages and resumed ends with the
# uninterrupted run's parameters (H = 7: the checkpoint of step 40 falls between averages)
job=("${base[@]}" --local-sgd 7)
"$bin" train "${job[@]}" --ckpt-dir "$work/l_ref" --out "$work/o" >"$work/l_ref.json"
"$bin" train "${job[@]}" --ckpt-dir "$work/l" --stop-after 45 --out "$work/o" >/dev/null
[[ -s $work/l/step_00000040/replica.safetensors ]]
"$bin" train "${job[@]}" --ckpt-dir "$work/l" --resume --out "$work/o" >"$work/l.json"
grep -q '"start_step":40' "$work/l.json"
same "--local-sgd 7 resumed" "$work/l_ref.json" "$work/l.json"

# refusals: another compression, no compression, another device count (nothing moved)
ck=$work/int8/ck
before=$(ls "$ck")
refuse() { # PATTERN ARGS...
  local pat=$1
  shift
  set +e
  "$bin" train "$@" --ckpt-dir "$ck" --resume --out "$work/o" >/dev/null 2>"$work/err"
  local rc=$?
  set -e
  [[ $rc -eq 1 ]] || { echo "resume $*: exit $rc"; cat "$work/err"; exit 1; }
  grep -q -- "$pat" "$work/err" || { echo "resume $*: message"; cat "$work/err"; exit 1; }
}
refuse "saved with --grad-compress int8, this run uses --grad-compress bf16" "${base[@]}" \
  --grad-compress bf16
refuse "holds the error-feedback residuals of 4 devices; this run has 2 (resume with --devices 4" \
  --devices 2 --steps 60 --ckpt-every 20 --eval-every 0 --quiet --grad-compress int8
[[ $(ls "$ck") == "$before" ]] || { echo "a refused resume moved checkpoints"; exit 1; }
ck=$work/l
refuse "holds the LocalSGD state of 4 of its devices; this run has 2 (resume with the same --devices" \
  --devices 2 --steps 60 --ckpt-every 20 --eval-every 0 --quiet --local-sgd 7
ck=$work/exact
"$bin" train "${base[@]}" --ckpt-dir "$ck" --stop-after 25 --out "$work/o" >/dev/null
refuse "saved without --grad-compress, this run uses --grad-compress int8" "${base[@]}" \
  --grad-compress int8
echo ok
