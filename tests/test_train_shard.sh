#!/usr/bin/env bash
# optitpu train --shard-optimizer (ZeRO-1): the parameters end bit for bit as in the unsharded
# data-parallel run (2, 3, 4 and 5 devices; several elementwise optimizers, lamb and lars, bf16
# state, gradient accumulation, the tree and direct reductions), each device holds about 1/N of the optimizer
# state, and what cannot shard (adafactor's factored moments, a reduction whose order depends
# on the split, --mpi with several devices per process, ...) is refused with a clear message and a non-zero exit (int8 state:
# test_train test_shard_refused).
# In one process the sharded step overlaps its reduce-scatter with the backward and its
# all-gather with the next forward (the default) or not (--no-overlap), and the unsharded step
# its all-reduce with the backward or not: all four end with the same parameters, and the
# metrics (every step's loss and accuracy, the evaluations between steps) of the overlapped
# runs are the unsharded non-overlapped run's byte for byte; the trace shows the reduce-scatter
# and the all-gather inside forward/backward intervals.
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
  "$bin" train "${common[@]}" --out "$work/o" --devices "$n" --shard-optimizer "$@" \
    >"$work/$name.json"
  "$bin" train "${common[@]}" --out "$work/no" --devices "$n" --shard-optimizer --no-overlap \
    "$@" >"$work/$name.no.json"
  "$bin" train "${common[@]}" --out "$work/refno" --devices "$n" --no-overlap "$@" \
    >"$work/$name.refno.json"
  local a b c d u s
  a=$(field "$work/$name.ref.json" params_sha256)
  b=$(field "$work/$name.json" params_sha256)
  c=$(field "$work/$name.no.json" params_sha256)
  [[ -n $a && $a == "$b" ]] || { echo "$name: sharded parameters $b differ from unsharded $a"; exit 1; }
  [[ $a == "$c" ]] || { echo "$name: --no-overlap parameters $c differ from unsharded $a"; exit 1; }
  d=$(field "$work/$name.refno.json" params_sha256)
  [[ $a == "$d" ]] || { echo "$name: unsharded --no-overlap parameters $d differ from $a"; exit 1; }
  cmp "$work/ref/metrics.csv" "$work/refno/metrics.csv" \
    || { echo "$name: the unsharded run's metrics differ with --no-overlap"; exit 1; }
  cmp "$work/ref/metrics.csv" "$work/o/metrics.csv" \
    || { echo "$name: the overlapped run's metrics differ from the unsharded run's"; exit 1; }
  grep -q '"shard_optimizer":true' "$work/$name.json"
  grep -q '"shard_optimizer":false' "$work/$name.ref.json"
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

# the log names the reduction and the block
"$bin" train --steps 2 --devices 4 --ckpt-dir none --out "$work/o" --shard-optimizer \
  >/dev/null 2>"$work/log"
grep -q "sharded optimizer update: gradients reduce-scattered (tree) in blocks of 2416 elements over 4 devices" "$work/log" \
  || { echo "no sharding line in the log"; cat "$work/log"; exit 1; }

# the trace: on every device the overlapped reduce-scatter and all-gather (sharded) or
# all-reduce (unsharded) run inside forward/backward intervals (between its kernels)
"$bin" train --steps 4 --devices 4 --hidden 64,64 --ckpt-dir none --quiet --out "$work/o" \
  --shard-optimizer --trace "$work/trace.json" >/dev/null
"$bin" train --steps 4 --devices 4 --hidden 64,64 --ckpt-dir none --quiet --out "$work/o" \
  --trace "$work/trace_ar.json" >/dev/null
if command -v python3 >/dev/null; then
  python3 - "$work/trace.json" "$work/trace_ar.json" <<'PY'
import json, sys
for path, names in ((sys.argv[1], ('reduce-scatter', 'all-gather')),
                    (sys.argv[2], ('all-reduce',))):
    ev = [e for e in json.load(open(path))['traceEvents'] if e.get('ph') == 'X']
    for dev in range(4):
        fb = [(e['ts'], e['ts'] + e['dur']) for e in ev
              if e.get('tid') == dev and e['name'] == 'forward+backward']
        for name in names:
            inside = sum(1 for e in ev if e.get('tid') == dev and e['name'] == name and
                         any(a <= e['ts'] and e['ts'] + e['dur'] <= b for a, b in fb))
            if inside == 0:
                sys.exit(f'{path}: device {dev}: no {name} event inside forward/backward')
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
