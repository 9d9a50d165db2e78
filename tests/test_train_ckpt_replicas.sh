#!/usr/bin/env bash
# optitpu train --ckpt-replicas: every checkpoint is copied to DIR.replicaN and verified; a resume
# repairs a corrupt primary copy from a replica and a corrupt replica copy from the primary and
# ends bit-identical to an uninterrupted run; when no copy verifies it stops with a clear error
# and moves nothing.
set -euo pipefail
bin=$1
builddir=$3
work=$(mktemp -d "$builddir/train_replicas_XXXXXX")
trap 'rm -rf "$work"' EXIT
sha() { sed -n 's/.*"params_sha256":"\([0-9a-f]*\)".*/\1/p' "$1"; }
flip() { printf '\xff' | dd of="$1" bs=1 seek=200 conv=notrunc status=none; }
common=(--devices 2 --steps 60 --ckpt-every 20 --eval-every 0 --json)

"$bin" train "${common[@]}" --quiet --ckpt-dir "$work/ref" --out "$work/o_ref" >"$work/ref.json"
"$bin" train "${common[@]}" --quiet --ckpt-dir "$work/ck" --ckpt-replicas 2 --stop-after 45 \
  --out "$work/o" >/dev/null
for d in ck ck.replica1 ck.replica2; do
  [[ $(ls "$work/$d") == $'step_00000020\nstep_00000040' ]] || { echo "$d: $(ls "$work/$d")"; exit 1; }
  "$bin" ckpt verify "$work/$d" >/dev/null
done
# one bit flipped in the primary's model file and in replica 1's optimizer file of step 40
flip "$work/ck/step_00000040/model.safetensors"
flip "$(ls "$work"/ck.replica1/step_00000040/optim*.safetensors | head -1)"
"$bin" train "${common[@]}" --ckpt-dir "$work/ck" --ckpt-replicas 2 --resume --out "$work/o" \
  >"$work/r.json" 2>"$work/r.err"
grep -q '"start_step":40' "$work/r.json" || { cat "$work/r.err"; exit 1; }
grep -q "step 40: the copy in $work/ck was repaired from a replica" "$work/r.err"
grep -q "replica copy $work/ck.replica1/step_00000040 repaired from $work/ck/step_00000040" "$work/r.err"
[[ -n $(sha "$work/ref.json") && $(sha "$work/ref.json") == $(sha "$work/r.json") ]] \
  || { echo "resumed parameters differ: $(sha "$work/ref.json") vs $(sha "$work/r.json")"; exit 1; }
for d in ck ck.replica1 ck.replica2; do
  "$bin" ckpt verify "$work/$d" >/dev/null || { echo "$d does not verify after the resume"; exit 1; }
  ls "$work/$d" | grep -q '^step_00000060$'
done

# every copy of the only checkpoint damaged: a clear error, nothing moved or deleted
"$bin" train "${common[@]}" --quiet --ckpt-dir "$work/b" --ckpt-replicas 1 --stop-after 25 \
  --out "$work/ob" >/dev/null
flip "$work/b/step_00000020/model.safetensors"
flip "$work/b.replica1/step_00000020/model.safetensors"
before=$(cd "$work" && find b b.replica1 -type f | sort | xargs md5sum)
if "$bin" train "${common[@]}" --quiet --ckpt-dir "$work/b" --ckpt-replicas 1 --resume \
  --out "$work/ob" >/dev/null 2>"$work/b.err"; then
  echo "a resume with no verifying copy succeeded"; exit 1
fi
grep -q "no copy of any checkpoint in $work/b or its 1 replica(s) verifies" "$work/b.err"
grep -q "nothing was moved" "$work/b.err"
[[ $(cd "$work" && find b b.replica1 -type f | sort | xargs md5sum) == "$before" ]] \
  || { echo "the failed resume changed the checkpoint directories"; exit 1; }

# usage errors
set +e
"$bin" train --ckpt-dir none --ckpt-replicas 1 >/dev/null 2>"$work/u.err"; rc=$?
set -e
[[ $rc -eq 2 ]] && grep -q -- "--ckpt-replicas needs checkpoints" "$work/u.err"
echo ok
