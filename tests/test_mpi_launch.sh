#!/usr/bin/env bash
# optitpu launch: a rank killed mid-run -> the job restarts from the newest verified checkpoint and
# ends with the same parameters as an uninterrupted run; a host that is gone -> the job continues
# with fewer processes on the others; --max-restarts 0 -> the failure is reported; bad arguments.
set -euo pipefail
bin=$1 build=$3
source "$(dirname "$0")/mpi_env.sh"
mpi_skip_unless_built "$build"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
sgd=(mpi-sgd --steps 40 --dim 64 --batch 32 --ckpt-every 10)

# the uninterrupted run
"$bin" launch --np 2 --oversubscribe -- "${sgd[@]}" --out ref.npy 2>launch0.log >out0.txt
grep -q "attempt 0 finished" launch0.log

# rank 1 kills itself at step 25 on the first attempt; checkpoints at 10, 20, 30, 40
"$bin" launch --np 2 --oversubscribe --ckpt-dir ck --max-restarts 2 -- "${sgd[@]}" \
  --ckpt-dir ck --die-at 25 --out got.npy 2>launch1.log >out1.txt
grep -q "attempt 0 failed.*cause: .*rank 1.*signal 9" launch1.log || { cat launch1.log; exit 1; }
grep -q "restart 1: resuming from ck/step_00000020 (step 20, verified)" launch1.log
grep -q "attempt 1 resumes at step 20" launch1.log
grep -q "attempt 1 finished" launch1.log
cmp ref.npy got.npy || { echo "restarted run differs from the uninterrupted one"; exit 1; }
[[ "$(grep -o 'sha256(w) = [0-9a-f]*' out0.txt)" == "$(grep -o 'sha256(w) = [0-9a-f]*' out1.txt)" ]]

# a corrupted newest checkpoint is skipped: the restart uses the one before
rm -rf ck; "$bin" launch --np 2 --oversubscribe -- "${sgd[@]}" --ckpt-dir ck --steps 20 2>/dev/null >/dev/null
f=$(ls ck/step_00000020/*.safetensors | head -1)
printf 'X' | dd of="$f" bs=1 seek=100 conv=notrunc 2>/dev/null
"$bin" launch --np 2 --oversubscribe --ckpt-dir ck --max-restarts 1 -- "${sgd[@]}" \
  --ckpt-dir ck --die-at 15 --out got2.npy 2>launch2.log >/dev/null || { cat launch2.log; exit 1; }
grep -q "resuming from ck/step_00000010 (step 10, verified)" launch2.log || { cat launch2.log; exit 1; }

# no restarts allowed: the failure is the result
if "$bin" launch --np 2 --oversubscribe --max-restarts 0 -- "${sgd[@]}" --die-at 5 2>launch3.log >/dev/null; then
  echo "a failed run was reported as success"; exit 1
fi
grep -q "giving up: 0 restarts used" launch3.log

# a host that is gone (nothing can start there): the job continues on the host left, 4 -> 2
"$bin" launch --np 4 --oversubscribe --hosts localhost,optitpu-no-such-host --probe-timeout 20 \
  --max-restarts 1 -- "${sgd[@]}" --steps 5 2>launch4.log >out4.txt || { cat launch4.log; exit 1; }
grep -q "host optitpu-no-such-host does not answer: leaving it out" launch4.log
grep -q "continuing with 2 processes on 1 host" launch4.log
grep -q "5 steps on 2 processes" out4.txt

# usage errors
if "$bin" launch --np 2 2>/dev/null; then echo "launch without a command accepted"; exit 1; fi
if "$bin" launch --np 0 -- mpi-sgd 2>/dev/null; then echo "--np 0 accepted"; exit 1; fi
if "$bin" mpi-sgd --steps nope 2>/dev/null; then echo "bad --steps accepted"; exit 1; fi
echo "launch ok"
