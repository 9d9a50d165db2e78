#!/usr/bin/env bash
# optitpu train: a process killed with SIGKILL mid-run and started again with --resume ends with
# parameters bit-identical to an uninterrupted run; --json, the output files, --fail-device, and
# clear usage errors.
set -euo pipefail
bin=$1
builddir=$3
work=$(mktemp -d "$builddir/train_cli_XXXXXX")
trap 'rm -rf "$work"' EXIT
sha() { sed -n 's/.*"params_sha256":"\([0-9a-f]*\)".*/\1/p' "$1"; }

common=(--devices 4 --steps 300 --ckpt-every 20 --eval-every 0 --quiet --json)
"$bin" train "${common[@]}" --ckpt-dir "$work/a" --out "$work/out_a" >"$work/a.json"
grep -q '"final_step":300' "$work/a.json"
[[ -s "$work/out_a/metrics.csv" && -s "$work/out_a/curves.svg" && -s "$work/out_a/trace.json" ]]
[[ $(wc -l <"$work/out_a/metrics.csv") -eq 301 ]]

# the same run, killed once its checkpoint of step 40 is committed
"$bin" train "${common[@]}" --ckpt-dir "$work/b" --out "$work/out_b" >"$work/b0.json" &
pid=$!
for _ in $(seq 1 600); do
  [[ -f "$work/b/step_00000040/manifest.json" ]] && break
  sleep 0.02
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
ls "$work/b" | grep -q '^step_00000040$'
# without --resume an existing checkpoint directory is refused
if "$bin" train "${common[@]}" --ckpt-dir "$work/b" --out "$work/out_b" >/dev/null 2>"$work/err"; then
  echo "a directory with checkpoints was overwritten without --resume"; exit 1
fi
grep -q -- "--resume" "$work/err"
"$bin" train "${common[@]}" --ckpt-dir "$work/b" --out "$work/out_b" --resume >"$work/b.json"
grep -q '"final_step":300' "$work/b.json"
[[ -n $(sha "$work/a.json") && $(sha "$work/a.json") == $(sha "$work/b.json") ]] \
  || { echo "resumed parameters differ: $(sha "$work/a.json") vs $(sha "$work/b.json")"; exit 1; }
start=$(sed -n 's/.*"start_step":\([0-9]*\).*/\1/p' "$work/b.json")
[[ $start -ge 40 ]] || { echo "resume started at $start"; exit 1; }

# a device failure is detected and survived
"$bin" train --devices 4 --steps 60 --fail-device 1@20 --ckpt-dir none --out "$work/out_c" \
  >"$work/c.txt" 2>"$work/c.err"
grep -q "device 1 declared FAILED" "$work/c.err"
grep -q "failures: 1; detected" "$work/c.txt"
grep -q "after shrinking" "$work/c.txt"

# usage errors exit 2 with a message
for bad in "--devices 0" "--fail-device 3" "--model resnet" "--lr -1" "--schedule sawtooth" "--bogus"; do
  set +e
  # shellcheck disable=SC2086
  "$bin" train $bad --out "$work/out_d" >/dev/null 2>"$work/err"
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || { echo "train $bad: exit $rc, want 2"; exit 1; }
  grep -q "optitpu train:" "$work/err"
done
echo "train cli ok"
