#!/usr/bin/env bash
# optitpu run: the runnable modules of tests/data/hlo, JAX corpus cases compared with XLA's
# expected outputs, --devices with collectives, --json, --trace, and clear errors for bad input.
set -euo pipefail
bin=$1
src=$2
hlo=$src/tests/data/hlo
jax=$src/tests/data/jax
cmp="python3 $src/scripts/npy_compare.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Modules of tests/data/hlo that run (the heavy ones, which the reference kernels take seconds to
# minutes for, and those with unimplemented features are listed in docs/runtime.md).
runnable=(
  backends__cpu__benchmarks__hlo__jax.issue.33666.linx.frag_0100.module_0005.hlo
  backends__cpu__benchmarks__hlo__jax.issue.33666.linx.frag_0428.module_0002.hlo
  backends__cpu__benchmarks__hlo__topk_logits_k10_1x50000_bf16.hlo
  backends__cpu__benchmarks__hlo__dynamic_slice_loop_1x2048x768_bf16.hlo
  backends__cpu__lite_aot__tests__hlos__add.hlo
  backends__cpu__lite_aot__tests__hlos__dot.hlo
  backends__cpu__lite_aot__tests__hlos__multiple_outputs.hlo
  tools__data__add.hlo
  tools__data__hlo_isolation_cli_test.hlo
  tools__data__large_constant.hlo
  tools__data__must_alias.hlo
  tools__multihost_hlo_runner__data__sharded_2_devices.hlo
  tools__multihost_hlo_runner__data__single_device.hlo
  tools__multihost_hlo_runner__data__while_with_known_trip_count.hlo
)
for f in "${runnable[@]}"; do
  "$bin" run "$hlo/$f" --fill random:7 --output-dir "$tmp/h" >"$tmp/out.txt" || { echo "run $f failed"; exit 1; }
  grep -q "^output 0" "$tmp/out.txt" || { echo "$f: no output"; exit 1; }
  [[ -s $tmp/h/out_0.npy ]]
done
# -O0 and -O2 agree bit for bit
"$bin" run "$hlo/tools__data__must_alias.hlo" --fill random:3 --output-dir "$tmp/o2" >/dev/null
"$bin" run "$hlo/tools__data__must_alias.hlo" --fill random:3 --output-dir "$tmp/o0" -O0 >/dev/null
cmp "$tmp/o0/out_0.npy" "$tmp/o2/out_0.npy"
# --repeat: inputs are uploaded once and kept, a donated one uploaded again before each run, so
# the last of several runs gives the first run's result (a reused donated input would be doubled)
"$bin" run "$hlo/tools__data__must_alias.hlo" --fill random:3 --output-dir "$tmp/or" --repeat 3 >/dev/null
cmp "$tmp/o2/out_0.npy" "$tmp/or/out_0.npy"
"$bin" run "$hlo/tools__data__add.hlo" --fill random:3 --output-dir "$tmp/a1" >/dev/null
"$bin" run "$hlo/tools__data__add.hlo" --fill random:3 --output-dir "$tmp/a3" --repeat 3 >/dev/null
cmp "$tmp/a1/out_0.npy" "$tmp/a3/out_0.npy"

# Unimplemented features: a clear error naming the feature
expect_fail() { # file, message fragment, extra args...
  local f=$1 msg=$2
  shift 2
  if "$bin" run "$hlo/$f" --fill zeros --output-dir "$tmp/x" "$@" >/dev/null 2>"$tmp/err"; then
    echo "$f: expected a failure"; exit 1
  fi
  grep -q -- "$msg" "$tmp/err" || { echo "$f: wrong message:"; cat "$tmp/err"; exit 1; }
}
expect_fail backends__cpu__benchmarks__hlo__jax.issue.33666.linx.frag_0100.module_0009.hlo 'target "Sharding" is not implemented'
expect_fail backends__cpu__tests__thunk_coverage__cpu.hlo "opcode 'rng-get-and-update-state' is not supported"
expect_fail hlo__translate__hlo_to_mhlo__tests__import.hlo "opcode 'after-all' is not supported"
expect_fail tools__multihost_hlo_runner__data__dynamic_shaped_arguments.hlo "dynamic dimensions"
expect_fail tools__multihost_hlo_runner__data__single_device_tupled.hlo "parameter 0 (arg_tuple) is a tuple"
expect_fail hlo__builder__tests__math_atan.hlo "holds 4 modules separated by '// -----'; choose one with --module K"
expect_fail hlo__builder__tests__math_atan.hlo 'target "xla_builder.math.Atan" is not implemented' --module 0
expect_fail hlo__builder__tests__math_atan.hlo 'target "xla_builder.math.Atan" is not implemented' --module 2
expect_fail hlo__builder__tests__math_atan.hlo "the file holds 4 modules" --module 9

# JAX corpus cases: inputs by number and by name, outputs against XLA's at the stated tolerance
for case in adam_update_optax mlp_forward_backward softmax_cross_entropy layer_norm attention_causal while_data_dependent cnn_forward_backward; do
  d=$jax/$case
  args=()
  n=$(ls "$d"/input_*.npy | wc -l)
  for ((k = 0; k < n; k++)); do args+=(--input "$k=$d/input_$k.npy"); done
  "$bin" run "$d/module.hlo" "${args[@]}" --output-dir "$tmp/$case" >/dev/null
  tol=$(python3 -c "
import json,sys
c=[c for c in json.load(open('$jax/cases.json'))['cases'] if c['name']=='$case'][0]
t=c.get('tolerance') or {'exact': True}
print('--exact' if t.get('exact') else '--rtol %g --atol %g' % (t.get('rtol',0), t.get('atol',0)))")
  m=$(ls "$d"/expected_*.npy | wc -l)
  for ((k = 0; k < m; k++)); do
    # shellcheck disable=SC2086
    $cmp "$tmp/$case/out_$k.npy" "$d/expected_$k.npy" $tol || { echo "$case output $k differs"; exit 1; }
  done
done
# parameters by name give the same results as by number
d=$jax/adam_update_optax
args=()
for k in 0 2 3 4 5 6 7 8; do args+=(--input "$k=$d/input_$k.npy"); done
"$bin" run "$d/module.hlo" "${args[@]}" --input "a_1_.1=$d/input_1.npy" --output-dir "$tmp/byname" >/dev/null
cmp "$tmp/byname/out_0.npy" "$tmp/adam_update_optax/out_0.npy"

# --json and --trace
d=$jax/adam_update_optax
args=()
for k in 0 1 2 3 4 5 6 7 8; do args+=(--input "$k=$d/input_$k.npy"); done
"$bin" run "$d/module.hlo" "${args[@]}" --output-dir "$tmp/j" --json --repeat 3 --trace "$tmp/t.json" >"$tmp/j.json"
python3 - "$tmp/j.json" "$tmp/t.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["repeat"] == 3 and len(r["run_ms"]) == 3 and len(r["outputs"]) == 7, r
t = json.load(open(sys.argv[2]))
ev = t["traceEvents"]
assert any(e["ph"] == "X" and e.get("cat") == "compile" for e in ev)
assert sum(1 for e in ev if e["ph"] == "X" and e["tid"] == 0) == 3 * r["kernels"]
assert any(e["ph"] == "C" for e in ev)
for e in ev:
    for k in ("ph", "pid", "tid", "name"):
        assert k in e, e
    if e["ph"] in ("X", "C"):
        assert "ts" in e, e
    if e["ph"] == "X":
        assert e["dur"] >= 0
PY
# --warmup 2 --profile warmup: 3 timed runs, and the trace holds only the 2 warm-up runs' kernels;
# the donated input is uploaded again before every run, so the results are the same
"$bin" run "$d/module.hlo" "${args[@]}" --output-dir "$tmp/w" --json --repeat 3 --warmup 2 \
  --profile warmup --trace "$tmp/tw.json" >"$tmp/w.json"
python3 - "$tmp/w.json" "$tmp/tw.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["repeat"] == 3 and len(r["run_ms"]) == 3, r
ev = json.load(open(sys.argv[2]))["traceEvents"]
assert sum(1 for e in ev if e["ph"] == "X" and e["tid"] == 0) == 2 * r["kernels"]
PY
for k in 0 1 2 3 4 5 6; do cmp "$tmp/j/out_$k.npy" "$tmp/w/out_$k.npy"; done
expect_usage() { # message fragment, args...
  local msg=$1
  shift
  if "$bin" run "$d/module.hlo" "${args[@]}" --output-dir "$tmp/x" "$@" >/dev/null 2>"$tmp/err"; then
    echo "run $*: expected a usage error"; exit 1
  fi
  grep -q -- "$msg" "$tmp/err" || { echo "run $*: wrong message:"; cat "$tmp/err"; exit 1; }
}
expect_usage "--profile warmup needs --warmup" --profile warmup
expect_usage "--profile takes all or warmup" --warmup 1 --profile some
expect_usage "--warmup needs a count" --warmup -1

# --devices 4: a module with replica_count=4 and collectives
cat >"$tmp/ar.hlo" <<'H'
HloModule ar, replica_count=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[3] parameter(0)
  id = u32[] replica-id()
  f = f32[] convert(id)
  b = f32[3] broadcast(f), dimensions={}
  y = f32[3] add(x, b)
  ROOT r = f32[3] all-reduce(y), replica_groups={{0,1,2,3}}, to_apply=add
}
H
"$bin" run "$tmp/ar.hlo" --fill zeros --devices 4 --output-dir "$tmp/ar" | grep -q "devices     4 (one replica or partition each)"
python3 - "$tmp/ar/out_0.npy" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
assert struct.unpack("<3f", d[-12:]) == (6.0, 6.0, 6.0), d[-12:]
PY
if "$bin" run "$tmp/ar.hlo" --fill zeros --devices 2 >/dev/null 2>"$tmp/err"; then exit 1; fi
grep -q "replica_count=4, num_partitions=1; run it with --devices 4" "$tmp/err"

# Bad input: a clear error naming the thing
bad() { # message fragment, args...
  local msg=$1
  shift
  if "$bin" run "$@" >/dev/null 2>"$tmp/err"; then echo "accepted: $*"; exit 1; fi
  grep -q -- "$msg" "$tmp/err" || { echo "wrong message for $*:"; cat "$tmp/err"; exit 1; }
}
d=$jax/adam_update_optax
bad "no parameter named or numbered '99'" "$d/module.hlo" --fill zeros --input "99=$d/input_0.npy" --output-dir "$tmp/b"
bad "parameter 1 (a_1_.1) expects f32\[3\], the file holds f32\[4,3\]" "$d/module.hlo" --fill zeros --input "1=$d/input_0.npy" --output-dir "$tmp/b"
bad "expects f32\[4,3\], the file holds s32\[\]" "$d/module.hlo" --fill zeros --input "0=$d/input_8.npy" --output-dir "$tmp/b"
bad "given twice" "$d/module.hlo" --fill zeros --input "0=$d/input_0.npy" --input "0=$d/input_0.npy"
bad "has no --input (or use --fill)" "$d/module.hlo" --input "0=$d/input_0.npy"
bad "OUT_OF_MEMORY" "$hlo/backends__cpu__lite_aot__tests__hlos__dot.hlo" --fill zeros --device-memory 1K --output-dir "$tmp/b"
bad "requested" "$hlo/backends__cpu__lite_aot__tests__hlos__dot.hlo" --fill zeros --device-memory 1K --output-dir "$tmp/b"
bad "IO: open .*missing.hlo: No such file" "$tmp/missing.hlo" --fill zeros
bad "random:SEED or zeros" "$d/module.hlo" --fill ones
bad "/dev/null is a device, not a file of HLO text" /dev/null --fill zeros
printf 'HloModule e\n' >"$tmp/empty.hlo"
bad "expected a computation, got end of input" "$tmp/empty.hlo" --fill zeros

# Memory admission: a run that cannot fit is refused before anything is allocated, naming what it
# needs and what there is (4 PB of parameters: refused on any machine; without admission the
# host allocation itself fails, with another error)
printf 'HloModule pb\nENTRY e {\n  p = f32[1000000000000000] parameter(0)\n  ROOT n = f32[1000000000000000] negate(p)\n}\n' >"$tmp/pb.hlo"
bad "RESOURCE_EXHAUSTED: run .*pb.hlo needs 14.21 PiB (16000000000000000 bytes) of host memory (inputs 3.55 PiB" "$tmp/pb.hlo" --fill zeros
bad "more than the .* available (MemAvailable" "$tmp/pb.hlo" --fill zeros
# --device-memory caps what each device must hold, host-side inputs included in the decision
bad "RESOURCE_EXHAUSTED: run .*pb.hlo needs 7.11 PiB (8000000000000000 bytes) on each device (input buffers 3.55 PiB" "$tmp/pb.hlo" --fill zeros --device-memory 8G
bad "more than the device's 8.00 GiB (8589934592 bytes) of memory" "$tmp/pb.hlo" --fill zeros --device-memory 8G
printf 'HloModule s\nENTRY e {\n  p = f32[74] parameter(0)\n  ROOT n = f32[74] negate(p)\n}\n' >"$tmp/small.hlo"
# an input file far larger than its parameter is refused from its size, before it is read
truncate -s 2G "$tmp/big.npy"
bad "the file holds 2147483648 bytes, parameter 0 (p) is f32\[74\] (296 bytes)" "$tmp/small.hlo" --input "0=$tmp/big.npy" --output-dir "$tmp/b"
rm -f "$tmp/big.npy"
# a device below 2 MiB serves small buffers (296 bytes here) instead of a false out-of-memory
"$bin" run "$tmp/small.hlo" --fill zeros --device-memory 1M --output-dir "$tmp/s" >"$tmp/small.txt"
grep -q "^output 0    f32\[74\]" "$tmp/small.txt"
echo "run cli ok"
