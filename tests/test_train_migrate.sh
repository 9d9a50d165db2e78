#!/usr/bin/env bash
# optitpu train --migrate D@S: device D's replica moves to a spare device at step S, verified bit
# for bit, and the run ends with the parameters of a run without the migration (synchronous,
# LocalSGD, int8-compressed; the leader, which evaluates, too); usage errors are clear.
set -euo pipefail
bin=$1
builddir=$3
work=$(mktemp -d "$builddir/train_migrate_XXXXXX")
trap 'rm -rf "$work"' EXIT
sha() { sed -n 's/.*"params_sha256":"\([0-9a-f]*\)".*/\1/p' "$1"; }
common=(--devices 4 --steps 40 --eval-every 10 --ckpt-dir none --json --out "$work/o")

check() { # NAME MIGRATE EXTRA...
  local name=$1 mig=$2
  shift 2
  "$bin" train "${common[@]}" --quiet "$@" >"$work/$name.ref.json"
  "$bin" train "${common[@]}" --migrate "$mig" "$@" >"$work/$name.json" 2>"$work/$name.err"
  local d=${mig%@*} s=${mig#*@}
  grep -q "migration: device $d's replica moved to spare device 4 before step $s (live path, [0-9]* bytes of parameters and optimizer state, read back from device 4 and verified bit for bit" "$work/$name.err" \
    || { echo "$name: no migration logged"; cat "$work/$name.err"; exit 1; }
  grep -q '"migrations":1,' "$work/$name.json"
  [[ -n $(sha "$work/$name.json") && $(sha "$work/$name.json") == $(sha "$work/$name.ref.json") ]] \
    || { echo "$name: parameters after --migrate $mig differ from the run without it"; exit 1; }
}
check sync 2@15
check leader 0@1
check localsgd 1@10 --optimizer sgd --local-sgd 4
check int8 3@20 --grad-compress int8

set +e
"$bin" train --devices 4 --migrate 4@3 >/dev/null 2>"$work/u1"; r1=$?
"$bin" train --devices 4 --migrate 2 >/dev/null 2>"$work/u2"; r2=$?
"$bin" train --devices 4 --migrate 2@0 >/dev/null 2>"$work/u3"; r3=$?
set -e
[[ $r1 -eq 2 && $r2 -eq 2 && $r3 -eq 2 ]] || { echo "usage errors: $r1 $r2 $r3"; exit 1; }
grep -q "the pod's devices are 0..3" "$work/u1"
grep -q "expected D@STEP" "$work/u2"
grep -q "STEP >= 1" "$work/u3"
echo ok
