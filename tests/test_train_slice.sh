#!/usr/bin/env bash
# optitpu train --slice PRESET:SHAPE: two jobs placed on one pod preset train side by side on
# disjoint slices (the second is placed around the first, which holds its devices while it runs);
# a job killed with SIGKILL frees its slice; bad shapes and contradicting flags are clear usage
# errors.
set -euo pipefail
bin=$1
builddir=$3
work=$(mktemp -d "$builddir/train_slice_XXXXXX")
trap 'kill -9 $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
export OPTITPU_SLICE_DIR=$work/registry
devs() { sed -n 's/.*"slice_devices":\[\([0-9,]*\)\].*/\1/p' "$1"; }
common=(--eval-every 0 --ckpt-dir none --json)
wait_for() { # FILE PATTERN
  for _ in $(seq 1 1000); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.01
  done
  echo "timed out waiting for '$2' in $1"; cat "$1"; exit 1
}

# job A holds half of a 2x2x2 pod while job B is placed and trains on the other half
"$bin" train --slice v4-2x2x2:2x2x1 --steps 20000 "${common[@]}" --out "$work/a" \
  >"$work/a.json" 2>"$work/a.err" &
pa=$!
wait_for "$work/a.err" "slice v4-2x2x2:2x2x1: devices"
"$bin" train --slice v4-2x2x2:2x2x1 --steps 60 "${common[@]}" --out "$work/b" \
  >"$work/b.json" 2>"$work/b.err"
grep -q "4 of its 8 devices held by other jobs), topology v4-2x2x2\[2x2x1\]" "$work/b.err" \
  || { cat "$work/b.err"; exit 1; }
grep -q '"final_step":60' "$work/b.json"
grep -q '"devices_end":4' "$work/b.json"
kill -0 "$pa" || { echo "job A ended before job B was done"; exit 1; }
# the pod is full while A runs and B's slice is taken by C: a clear error
"$bin" train --slice v4-2x2x2:2x2x1 --steps 20000 "${common[@]}" --out "$work/c" \
  >"$work/c.json" 2>"$work/c.err" &
pc=$!
wait_for "$work/c.err" "slice v4-2x2x2:2x2x1: devices"
set +e
"$bin" train --slice v4-2x2x2:1x1x1 --steps 5 "${common[@]}" --out "$work/d" >/dev/null \
  2>"$work/d.err"
rc=$?
set -e
[[ $rc -eq 1 ]] || { echo "a full pod gave exit $rc"; exit 1; }
grep -q "no contiguous 1x1x1 slice is free (0 devices free" "$work/d.err" \
  || { cat "$work/d.err"; exit 1; }
# A and C share no device and cover the pod; B had A's complement
a_devs=$(sed -n 's/.*slice v4-2x2x2:2x2x1: devices \([0-9,]*\) of.*/\1/p' "$work/a.err")
c_devs=$(sed -n 's/.*slice v4-2x2x2:2x2x1: devices \([0-9,]*\) of.*/\1/p' "$work/c.err")
[[ $(echo "$a_devs,$c_devs" | tr , '\n' | sort -n | uniq | wc -l) -eq 8 ]] \
  || { echo "slices overlap: $a_devs / $c_devs"; exit 1; }
[[ $(devs "$work/b.json") == "$c_devs" ]] || { echo "B $(devs "$work/b.json"), C $c_devs"; exit 1; }
# killed jobs free their slices: the whole pod is free again
kill -9 "$pa" "$pc"
wait "$pa" "$pc" 2>/dev/null || true
"$bin" train --slice v4-2x2x2:2x2x2 --steps 5 --batch-size 64 "${common[@]}" --out "$work/e" \
  >"$work/e.json" 2>"$work/e.err"
[[ $(devs "$work/e.json") == "0,1,2,3,4,5,6,7" ]] || { echo "full pod: $(devs "$work/e.json")"; exit 1; }

# usage errors (exit 2)
for bad in "v4-2x2x2:3x1x1" "v4-2x2x2" "v4-2x2x2:0x2" "nosuch-2x2:1x1"; do
  set +e
  "$bin" train --slice "$bad" --steps 1 >/dev/null 2>"$work/u.err"
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || { echo "--slice $bad: exit $rc"; cat "$work/u.err"; exit 1; }
done
grep -q "unknown" "$work/u.err" || grep -q "nosuch" "$work/u.err"
for extra in "--devices 3" "--topology ring-4" "--migrate 1@2" "--recovery restore"; do
  set +e
  # shellcheck disable=SC2086
  "$bin" train --slice v4-2x2x2:2x2x1 $extra --steps 1 >/dev/null 2>"$work/u.err"
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || { echo "--slice with $extra: exit $rc"; exit 1; }
done
echo ok
