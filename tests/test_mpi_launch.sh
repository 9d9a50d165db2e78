#!/usr/bin/env bash
# optitpu launch running `optitpu train --mpi` (2 processes x 1 device): a process killed mid-run
# -> the job restarts from the newest verified checkpoint and ends with the same parameters as an
# uninterrupted run; a corrupted newest checkpoint -> the launcher names the one before; a host
# that is gone -> the job continues with fewer processes on the others; --max-restarts 0 -> the
# failure is reported; bad arguments.
set -euo pipefail
bin=$1 build=$3
source "$(dirname "$0")/mpi_env.sh"
mpi_skip_unless_built "$build"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
sha() { sed -n 's/.*"params_sha256":"\([0-9a-f]*\)".*/\1/p' "$1"; }
job=(train --mpi --devices 1 --steps 40 --batch-size 32 --ckpt-every 10 --eval-every 0 --json)

# the uninterrupted run
"$bin" launch --np 2 --oversubscribe -- "${job[@]}" --ckpt-dir ref --out oref >ref.json \
  2>launch0.log || { cat launch0.log; exit 1; }
grep -q "attempt 0 finished" launch0.log
[[ -n $(sha ref.json) ]]

# device 1 (process 1) is killed at step 25 on the first attempt; checkpoints at 10, 20, 30, 40
"$bin" launch --np 2 --oversubscribe --ckpt-dir ck --max-restarts 2 -- "${job[@]}" \
  --ckpt-dir ck --out o1 --fail-device 1@25 >got.json 2>launch1.log || { cat launch1.log; exit 1; }
grep -q "attempt 0 failed.*cause: .*rank 1.*signal 9" launch1.log || { cat launch1.log; exit 1; }
grep -q "restart 1: resuming from ck/step_00000020 (step 20, verified)" launch1.log
grep -q "resumed from the checkpoint of step 20 in ck on 2 processes" launch1.log
grep -q "attempt 1 finished" launch1.log
[[ $(sha ref.json) == $(sha got.json) ]] \
  || { echo "restarted run differs from the uninterrupted one"; exit 1; }

# a corrupted newest checkpoint is skipped: the restart uses the one before. The first attempt
# refuses the directory (it holds checkpoints and this run has no --resume); the restart resumes.
"$bin" launch --np 2 --oversubscribe --max-restarts 0 -- "${job[@]}" --stop-after 20 --ckpt-dir d \
  --out od >/dev/null 2>/dev/null
f=$(ls d/step_00000020/*.safetensors | head -1)
printf 'X' | dd of="$f" bs=1 seek=100 conv=notrunc 2>/dev/null
"$bin" launch --np 2 --oversubscribe --ckpt-dir d --max-restarts 1 -- "${job[@]}" \
  --ckpt-dir d --out od >got2.json 2>launch2.log || { cat launch2.log; exit 1; }
grep -q "already holds 2 checkpoint(s)" launch2.log || { cat launch2.log; exit 1; }
grep -q "resuming from d/step_00000010 (step 10, verified)" launch2.log || { cat launch2.log; exit 1; }
[[ $(sha ref.json) == $(sha got2.json) ]] || { echo "run resumed past a corrupt step differs"; exit 1; }

# no restarts allowed: the failure is the result
if "$bin" launch --np 2 --oversubscribe --max-restarts 0 -- "${job[@]}" --ckpt-dir none \
  --out o3 --fail-device 1@5 2>launch3.log >/dev/null; then
  echo "a failed run was reported as success"; exit 1
fi
grep -q "giving up: 0 restarts used" launch3.log

# a host that is gone (nothing can start there): the job continues on the host left, 4 -> 2
"$bin" launch --np 4 --oversubscribe --hosts localhost,optitpu-no-such-host --probe-timeout 20 \
  --max-restarts 1 -- "${job[@]}" --steps 5 --ckpt-dir none --out o4 2>launch4.log >out4.json \
  || { cat launch4.log; exit 1; }
grep -q "host optitpu-no-such-host does not answer: leaving it out" launch4.log
grep -q "continuing with 2 processes on 1 host" launch4.log
grep -q '"final_step":5' out4.json
grep -q '"devices_end":2' out4.json

# usage errors
if "$bin" launch --np 2 2>/dev/null; then echo "launch without a command accepted"; exit 1; fi
if "$bin" launch --np 0 -- train --mpi 2>/dev/null; then echo "--np 0 accepted"; exit 1; fi
if "$bin" train --mpi --steps nope 2>/dev/null; then echo "bad --steps accepted"; exit 1; fi
echo "launch ok"
