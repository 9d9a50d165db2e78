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
# A killed run's metrics.csv holds its rows as they were written: every step up to its committed
# checkpoint STEP at least, each the uninterrupted run's row, each once (a last row cut off by the
# kill, without its newline, aside).
killed_rows_ok() { # FILE STEP
  [[ -s $1 ]] || { echo "the killed run left no $1"; exit 1; }
  local whole
  whole=$(wc -l <"$1") # lines with their newline
  [[ $whole -gt $2 ]] || { echo "$1 of the killed run has $whole lines, want > $2"; exit 1; }
  cmp -n "$(head -n "$whole" "$1" | wc -c)" "$1" "$work/out_a/metrics.csv" \
    || { echo "the killed run's rows in $1 differ from the uninterrupted run's"; exit 1; }
}
killed_rows_ok "$work/out_b/metrics.csv" 40
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
# the killed run's rows up to the resumed step, then the resumed run's: every step once
cmp "$work/out_b/metrics.csv" "$work/out_a/metrics.csv" \
  || { echo "metrics.csv after a kill and a resume is not the uninterrupted run's"; exit 1; }

# a rollback to a checkpoint (--recovery restore) rewrites the rows after it: killed once the
# redone steps are saved at step 60, the file holds every step once
"$bin" train "${common[@]}" --fail-device 2@55 --recovery restore --ckpt-dir "$work/r" \
  --out "$work/out_r" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [[ -f "$work/r/step_00000060/manifest.json" ]] && break
  sleep 0.02
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
killed_rows_ok "$work/out_r/metrics.csv" 60

# a device failure is detected and survived
"$bin" train --devices 4 --steps 60 --fail-device 1@20 --ckpt-dir none --out "$work/out_c" \
  >"$work/c.txt" 2>"$work/c.err"
grep -q "device 1 declared FAILED" "$work/c.err"
grep -q "failures: 1; detected" "$work/c.txt"
grep -q "after shrinking" "$work/c.txt"

# the issue's case: a flipped bit in the newest checkpoint; the resume falls back to step 40, sets
# step 50 aside (listed as damaged), saves it again, ends bit-identical to an uninterrupted run,
# and metrics.csv holds every step once
small=(--devices 2 --steps 60 --ckpt-every 10 --eval-every 0 --quiet --json)
"$bin" train "${small[@]}" --ckpt-dir "$work/e_ref" --out "$work/out_e_ref" >"$work/e_ref.json"
"$bin" train "${small[@]}" --stop-after 55 --ckpt-dir "$work/e" --out "$work/out_e" >/dev/null
[[ $(wc -l <"$work/out_e/metrics.csv") -eq 56 ]]
printf '\x01' | dd of="$work/e/step_00000050/model.safetensors" bs=1 seek=5000 conv=notrunc 2>/dev/null
"$bin" train "${small[@]}" --resume --ckpt-dir "$work/e" --out "$work/out_e" >"$work/e.json" 2>"$work/e.err" \
  || { cat "$work/e.err"; echo "resume after a damaged checkpoint failed"; exit 1; }
[[ $(sha "$work/e.json") == $(sha "$work/e_ref.json") ]] || { echo "resume after damage differs"; exit 1; }
grep -q '"start_step":40' "$work/e.json"
"$bin" ckpt ls "$work/e" | grep -Eq '^50 +damaged .*step_00000050.damaged$'
"$bin" ckpt verify "$work/e/step_00000050" >/dev/null
cmp "$work/out_e/metrics.csv" "$work/out_e_ref/metrics.csv" \
  || { echo "metrics.csv after the resume is not the uninterrupted run's"; exit 1; }
# a resume under another optimizer is refused and names both
if "$bin" train "${small[@]}" --resume --optimizer sgd --ckpt-dir "$work/e" --out "$work/out_e" \
  >/dev/null 2>"$work/err"; then
  echo "an Adam checkpoint resumed under SGD"; exit 1
fi
grep -q "optimizer 'adam'; this run uses 'sgd'" "$work/err"

# the end of a run is saved (default --ckpt-every 100); --no-final-ckpt opts out
"$bin" train --devices 2 --steps 50 --eval-every 0 --quiet --ckpt-dir "$work/f" --out "$work/out_f" >/dev/null
"$bin" ckpt verify "$work/f/step_00000050" >/dev/null
"$bin" train --devices 2 --steps 50 --eval-every 0 --quiet --no-final-ckpt --ckpt-dir "$work/g" \
  --out "$work/out_g" >/dev/null
[[ -z $(ls "$work/g") ]] || { echo "--no-final-ckpt saved"; exit 1; }
# (the help is written to a file first: grep -q leaving early would cut the pipe under pipefail)
"$bin" help train >"$work/help.txt"
grep -q -- "--no-final-ckpt" "$work/help.txt"
# a stopped run without an evaluation says so (no -100%)
"$bin" train --devices 2 --steps 50 --eval-every 0 --stop-after 5 --ckpt-dir none --out "$work/out_h" \
  >"$work/h.txt"
grep -q "no test accuracy measured" "$work/h.txt"
if grep -q -- "-100" "$work/h.txt"; then echo "a made-up accuracy is printed"; exit 1; fi

# nested output, checkpoint and trace directories are created with their parents
"$bin" train --devices 2 --steps 3 --eval-every 0 --quiet --output-dir "$work/n1/a/b" \
  --ckpt-dir "$work/n2/c/d" --trace "$work/n3/e/t.json" >/dev/null
[[ -s "$work/n1/a/b/metrics.csv" && -d "$work/n2/c/d/step_00000003" && -s "$work/n3/e/t.json" ]]

# an explicit topology that contradicts --devices is refused
set +e
"$bin" train --topology torus-2x4 --devices 3 --out "$work/out_t" >/dev/null 2>"$work/err"
rc=$?
set -e
[[ $rc -eq 2 ]] || { echo "--topology torus-2x4 --devices 3: exit $rc, want 2"; exit 1; }
grep -q "torus-2x4 has 8 devices but --devices is 3" "$work/err"

# --grad-accum K on one device is batch x K on K devices (K = 2: the same bits); the summary and
# --json give the all-reduce bytes, which --grad-compress int8 divides by 4
"$bin" train --devices 1 --batch-size 32 --grad-accum 2 --steps 20 --eval-every 0 --quiet --json \
  --ckpt-dir none --out "$work/out_acc" >"$work/acc.json"
"$bin" train --devices 2 --batch-size 64 --steps 20 --eval-every 0 --quiet --json \
  --ckpt-dir none --out "$work/out_wide" >"$work/wide.json"
[[ $(sha "$work/acc.json") == $(sha "$work/wide.json") ]] \
  || { echo "--grad-accum 2 on 1 device differs from batch x 2 on 2 devices"; exit 1; }
grep -q '"allreduce_bytes_per_step":38448,' "$work/wide.json"
"$bin" train --devices 2 --steps 20 --eval-every 0 --quiet --grad-compress int8 --ckpt-dir none \
  --out "$work/out_i8" >"$work/i8.txt"
grep -q "all-reduce: 9622 bytes per device per step" "$work/i8.txt"
grep -q -- "--grad-accum 4" "$work/help.txt"
grep -q -- "--grad-compress int8" "$work/help.txt"
grep -q -- "--local-sgd 8" "$work/help.txt"
# --grad-compress cannot run under --mpi (its resume: test_train_resume_state.sh)
for bad in "--mpi"; do
  set +e
  # shellcheck disable=SC2086
  "$bin" train --grad-compress bf16 $bad --ckpt-dir "$work/gc" --out "$work/out_gc" >/dev/null 2>"$work/err"
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || { echo "train --grad-compress bf16 $bad: exit $rc, want 2"; exit 1; }
  grep -q -- "--grad-compress" "$work/err"
done

# --state bf16 keeps the moments in bf16: a run resumes from its own checkpoint, an f32-state
# run does not take it (the state's dtypes differ)
"$bin" train --devices 2 --steps 20 --eval-every 0 --quiet --state bf16 --ckpt-dir "$work/sb" \
  --out "$work/out_sb" >/dev/null
"$bin" train --devices 2 --steps 30 --eval-every 0 --quiet --state bf16 --ckpt-dir "$work/sb" \
  --resume --out "$work/out_sb" >"$work/sb.txt"
grep -q "(10 this run)" "$work/sb.txt"
set +e
"$bin" train --devices 2 --steps 40 --eval-every 0 --quiet --ckpt-dir "$work/sb" --resume \
  --out "$work/out_sb" >/dev/null 2>"$work/err"
rc=$?
set -e
[[ $rc -eq 1 ]] || { echo "f32 state resumed a bf16-state checkpoint: exit $rc"; exit 1; }
# --state int8 (8-bit block-wise moments for the tensors of 4096 elements and more): resumes
# from its own checkpoint, and a bf16-state run does not take it
"$bin" train --devices 2 --steps 20 --eval-every 0 --quiet --state int8 --ckpt-dir "$work/s8" \
  --out "$work/out_s8" >/dev/null
"$bin" train --devices 2 --steps 30 --eval-every 0 --quiet --state int8 --ckpt-dir "$work/s8" \
  --resume --out "$work/out_s8" >"$work/s8.txt"
grep -q "(10 this run)" "$work/s8.txt"
set +e
"$bin" train --devices 2 --steps 40 --eval-every 0 --quiet --state bf16 --ckpt-dir "$work/s8" \
  --resume --out "$work/out_s8" >/dev/null 2>"$work/err"
rc=$?
set -e
[[ $rc -eq 1 ]] || { echo "bf16 state resumed an int8-state checkpoint: exit $rc"; exit 1; }
grep -q -- "--state F " "$work/help.txt"

# usage errors exit 2 with a message
for bad in "--state int4" "--devices 0" "--fail-device 3" "--model resnet" "--lr -1" "--schedule sawtooth" "--bogus" \
  "--grad-accum 0" "--grad-compress int4" "--grad-compress topk:2" "--local-sgd 0" \
  "--local-sgd 4 --grad-compress bf16" "--local-sgd 4 --resume --mpi" "--local-sgd 4 --fail-device 1@5"; do
  set +e
  # shellcheck disable=SC2086
  "$bin" train $bad --out "$work/out_d" >/dev/null 2>"$work/err"
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || { echo "train $bad: exit $rc, want 2"; exit 1; }
  grep -q "optitpu train:" "$work/err"
done
echo "train cli ok"
