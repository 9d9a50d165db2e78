#!/usr/bin/env bash
# optitpu train --shard-optimizer (ZeRO-1): the parameters end bit for bit as in the unsharded
# data-parallel run (2, 3, 4 and 5 devices; several elementwise optimizers, lamb and lars, bf16
# state, gradient accumulation, the tree and direct reductions), each device holds about 1/N of the optimizer
# state, and what cannot shard (adafactor's factored moments, a reduction whose order depends
# on the split, --mpi with several devices per process, ...) is refused with a clear message and a non-zero exit (int8 state:
# test_train_shard_int8.sh).
# In one process the sharded step overlaps its reduce-scatter with the backward and its
# all-gather with the next forward (--overlap on; auto, the default, from 1 MiB of gradients:
# off for these models) or not (off), and the unsharded step its all-reduce with the backward
# or not: all four end with the same parameters, and the metrics (every step's loss and
# accuracy, the evaluations between steps) of the overlapped runs are the unsharded
# non-overlapped run's byte for byte; the trace shows the reduce-scatter and the all-gather
# inside forward/backward intervals.
# Checkpoints: test_train_shard_ckpt.sh.
set -euo pipefail
bin=$1
builddir=$3
work=$(mktemp -d "$builddir/train_shard_XXXXXX")
trap 'rm -rf "$work"' EXIT
field() { sed -n "s/.*\"$2\":\"\\{0,1\\}\\([0-9a-z]*\\).*/\\1/p" "$1"; }
common=(--steps 25 --eval-every 10 --ckpt-dir none --json --quiet)

check() { # NAME DEVICES SLOTS EXTRA...: SLOTS array state slots of the optimizer
  local name=$1 n=$2 slots=$3
  shift 3
  "$bin" train "${common[@]}" --out "$work/ref" --devices "$n" "$@" >"$work/$name.ref.json"
  "$bin" train "${common[@]}" --out "$work/o" --devices "$n" --shard-optimizer --overlap on \
    "$@" >"$work/$name.json"
  "$bin" train "${common[@]}" --out "$work/no" --devices "$n" --shard-optimizer --overlap off \
    "$@" >"$work/$name.no.json"
  "$bin" train "${common[@]}" --out "$work/refon" --devices "$n" --overlap on "$@" \
    >"$work/$name.refon.json"
  local a b c d u s
  a=$(field "$work/$name.ref.json" params_sha256)
  b=$(field "$work/$name.json" params_sha256)
  c=$(field "$work/$name.no.json" params_sha256)
  [[ -n $a && $a == "$b" ]] || { echo "$name: sharded parameters $b differ from unsharded $a"; exit 1; }
  [[ $a == "$c" ]] || { echo "$name: --overlap off parameters $c differ from unsharded $a"; exit 1; }
  d=$(field "$work/$name.refon.json" params_sha256)
  [[ $a == "$d" ]] || { echo "$name: unsharded --overlap on parameters $d differ from $a"; exit 1; }
  cmp "$work/ref/metrics.csv" "$work/refon/metrics.csv" \
    || { echo "$name: the unsharded run's metrics differ with --overlap on"; exit 1; }
  grep -q '"overlap":true' "$work/$name.json" && grep -q '"overlap":true' "$work/$name.refon.json"
  grep -q '"overlap":false' "$work/$name.no.json"
  cmp "$work/ref/metrics.csv" "$work/o/metrics.csv" \
    || { echo "$name: the overlapped run's metrics differ from the unsharded run's"; exit 1; }
  grep -q '"shard_optimizer":true' "$work/$name.json"
  grep -q '"shard_optimizer":false' "$work/$name.ref.json"
  # the sharded update's blocks stay on the device (the reduce-scatter writes the gradient
  # block, the all-gather reads the parameter block): no copies between host vectors and the
  # device (they would be a part of their own, "block copies"); its collectives (the norms'
  # all-gathers: lamb, lars) are communication
  for f in "$work/$name.json" "$work/$name.no.json"; do
    if grep -q '"name":"block copies"' "$f"; then echo "$name: block copies in $f"; exit 1; fi
  done
  if [[ " $* " == *" lamb "* || " $* " == *" lars "* ]]; then
    grep -q '"name":"norms all-gather"' "$work/$name.json" \
      || { echo "$name: no norms all-gather part"; exit 1; }
  elif grep -q '"name":"norms all-gather"' "$work/$name.json"; then
    echo "$name: a norms all-gather part without norms"; exit 1
  fi
  u=$(field "$work/$name.ref.json" optim_state_bytes_per_device)
  s=$(field "$work/$name.json" optim_state_bytes_per_device)
  # N blocks cover the parameters; each block is padded by at most 16 elements plus the
  # rounding of P / N, and a scalar slot (nadam) adds 4 bytes per device
  ((s * n >= u && s * n <= u + n * (16 + 1) * 4 * slots + 4 * n)) \
    || { echo "$name: $s bytes of state per device sharded, $u unsharded, $n devices"; exit 1; }
  ((slots == 0 || s * n < u + u / 2)) || { echo "$name: state not sharded ($s vs $u)"; exit 1; }
}
check adam2 2 2
check adam4 4 2
check lion3 3 1 --optimizer lion
check nadam4 4 2 --optimizer nadam
check rmsprop4 4 1 --optimizer rmsprop --state bf16
check adamw_accum 4 2 --optimizer adamw --weight-decay 0.01 --grad-accum 2
check direct5 5 2 --allreduce direct
check sgd4 4 0 --optimizer sgd
# trust ratios: each tensor's norms summed over the devices in the unsharded order
check lamb3 3 2 --optimizer lamb
check lars4 4 1 --optimizer lars --weight-decay 0.001

# the overlapped unsharded step survives a failed device (the exchange is aborted with the
# communicator: the pod shrinks) and follows a migrated replica, bit for bit
"$bin" train --devices 4 --steps 20 --fail-device 1@8 --overlap on --ckpt-dir none --json \
  --quiet --out "$work/o" >"$work/fail.json"
grep -q '"failures":1' "$work/fail.json" && grep -q '"devices_end":3' "$work/fail.json" \
  || { echo "--overlap on: the failed device was not survived"; cat "$work/fail.json"; exit 1; }
"$bin" train --devices 4 --steps 20 --migrate 1@8 --overlap on --ckpt-dir none --json --quiet \
  --out "$work/o" >"$work/mig.json"
"$bin" train --devices 4 --steps 20 --overlap off --ckpt-dir none --json --quiet \
  --out "$work/o" >"$work/mig.ref.json"
[[ $(field "$work/mig.json" params_sha256) == $(field "$work/mig.ref.json" params_sha256) ]] \
  || { echo "--overlap on with --migrate: parameters differ"; exit 1; }

# the log names the reduction and the block
"$bin" train --steps 2 --devices 4 --ckpt-dir none --out "$work/o" --shard-optimizer \
  >/dev/null 2>"$work/log"
grep -q "sharded optimizer update: gradients reduce-scattered (tree) in blocks of 2416 elements over 4 devices" "$work/log" \
  || { echo "no sharding line in the log"; cat "$work/log"; exit 1; }

# the trace: the overlapped communication runs inside forward/backward intervals (between
# their kernels). Deterministically: every device copies the last step's parameters before
# their first reader in its forward (the sharded all-gather), and the device that posts a
# bucket last reduces its part of it in the hook right after the posting kernel — with 2
# devices the largest parameter (64x64) crosses both blocks, so each step one device reduces
# inside its backward (the sharded reduce-scatter, the unsharded all-reduce).
"$bin" train --steps 4 --devices 2 --hidden 64,64 --ckpt-dir none --quiet --out "$work/o" \
  --shard-optimizer --overlap on --trace "$work/trace.json" >/dev/null
"$bin" train --steps 4 --devices 2 --hidden 64,64 --ckpt-dir none --quiet --out "$work/o" \
  --overlap on --trace "$work/trace_ar.json" >/dev/null
# auto: on from 1 MiB of gradients (64-512-512-10: 301,066 parameters)
"$bin" train --steps 2 --devices 2 --hidden 512,512 --ckpt-dir none --json --quiet \
  --out "$work/o" >"$work/auto.json"
grep -q '"overlap":true' "$work/auto.json" || { echo "auto: no overlap at 1.2 MB"; exit 1; }
"$bin" train --steps 2 --devices 2 --ckpt-dir none --json --quiet --out "$work/o" >"$work/auto.json"
grep -q '"overlap":false' "$work/auto.json" || { echo "auto: overlap at 38 KB"; exit 1; }
if command -v python3 >/dev/null; then
  python3 - "$work/trace.json" "$work/trace_ar.json" <<'PY'
import json, sys
def inside(path, name, dev):
    ev = [e for e in json.load(open(path))['traceEvents'] if e.get('ph') == 'X']
    fb = [(e['ts'], e['ts'] + e['dur']) for e in ev
          if e.get('tid') == dev and e['name'] == 'forward+backward']
    return sum(1 for e in ev if e.get('tid') == dev and e['name'] == name and
               any(a <= e['ts'] and e['ts'] + e['dur'] <= b for a, b in fb))
for dev in range(2):
    if inside(sys.argv[1], 'all-gather', dev) < 3:
        sys.exit(f'device {dev}: the all-gather of steps 1-3 not inside the next forward')
for path, name in ((sys.argv[1], 'reduce-scatter'), (sys.argv[2], 'all-reduce')):
    n = sum(inside(path, name, dev) for dev in range(2))
    if n < 4:
        sys.exit(f'{path}: {n} {name} events inside forward/backward in 4 steps')
PY
else
  echo "python3 missing: the trace's nesting not checked"
fi

refused() { # MESSAGE ARGS...
  local msg=$1
  shift
  set +e
  "$bin" train --steps 2 --devices 4 --quiet --out "$work/o" --shard-optimizer "$@" >/dev/null \
    2>"$work/err"
  local rc=$?
  set -e
  [[ $rc -ne 0 ]] || { echo "--shard-optimizer $*: accepted"; exit 1; }
  grep -q -- "$msg" "$work/err" || { echo "--shard-optimizer $*: message"; cat "$work/err"; exit 1; }
}
refused "needs an elementwise optimizer (or one coupling elements by a trust ratio only, as lamb and lars): 'adafactor'" --optimizer adafactor
refused "with --allreduce ring is refused" --allreduce ring
refused "with --mpi takes one device per process (--devices 1, not 4)" --mpi
refused "excludes --grad-compress and --local-sgd" --grad-compress int8
refused "excludes --grad-compress and --local-sgd" --optimizer sgd --local-sgd 2
refused "excludes --fail-device (in one process) and --migrate" --fail-device 1@2
echo ok
