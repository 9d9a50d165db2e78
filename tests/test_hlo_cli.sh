#!/usr/bin/env bash
# optitpu hlo check|print|dot|stats: exit codes (0 ok, 1 failure, 2 usage), located errors,
# print as a fixed point, the short form, lit-style files, DOT and JSON stats; bench ir runs.
# Usage: test_hlo_cli.sh OPTITPU_BINARY SOURCE_DIR BUILD_DIR
set -uo pipefail
bin=$1
src=$2
data=$src/tests/data/hlo
work=$(mktemp -d "${TMPDIR:-/tmp}/optitpu-hlo-cli.XXXXXX")
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

# expect NAME WANT_RC PATTERN_IN_OUTPUT -- ARGS...  (pattern: grep -E over stdout+stderr)
expect() {
  local name=$1 want=$2 pat=$3
  shift 4
  "$bin" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  cat "$work/out" "$work/err" >"$work/all"
  if [[ $rc -ne $want ]]; then
    echo "FAIL $name: exit $rc, want $want (optitpu $*)"; sed 's/^/  | /' "$work/all" | head -20; failed=$((failed + 1)); return
  fi
  if [[ -n $pat ]] && ! grep -Eq -- "$pat" "$work/all"; then
    echo "FAIL $name: output lacks /$pat/ (optitpu $*)"; sed 's/^/  | /' "$work/all" | head -20; failed=$((failed + 1)); return
  fi
  echo "ok   $name"
  passed=$((passed + 1))
}
check() { # NAME CONDITION-COMMAND...
  local name=$1
  shift
  if "$@"; then echo "ok   $name"; passed=$((passed + 1)); else echo "FAIL $name"; failed=$((failed + 1)); fi
}

maxtext=$data/tools__benchmarks__hlo__nv_maxtext_1n1g_jit_train_step_before_optimization.hlo
expect check-ok 0 "ok: module jit_train_step, 87 computations, 1947 instructions" -- hlo check "$maxtext"
expect check-lenient 0 "ok: module module, 3 computations" -- hlo check "$data/tools__multihost_hlo_runner__data__while_with_known_trip_count.hlo"
expect check-unimplemented 1 "UNIMPLEMENTED: .*dynamic_shaped_arguments.hlo:3:47: dynamic dimensions" -- hlo check "$data/tools__multihost_hlo_runner__data__dynamic_shaped_arguments.hlo"
expect check-split 0 "ok: module einsum_diag" -- hlo check --split-input-file "$data/hlo__builder__tests__matrix_einsum.hlo"
expect check-no-split 1 "a second HloModule header.*pass --split-input-file" -- hlo check "$data/hlo__builder__tests__matrix_einsum.hlo"
expect check-missing 1 "IO: open $work/nope.hlo" -- hlo check "$work/nope.hlo"
printf 'HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[3] negate(x)\n}\n' >"$work/bad.hlo"
expect check-shape-error 1 "bad.hlo:4:19: y: negate: declared shape f32\[3\] disagrees with the inferred shape f32\[2\]" -- hlo check "$work/bad.hlo"
printf 'ENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] frobnicate(x)\n}\n' >"$work/bad2.hlo"
expect check-unknown-opcode 1 "bad2.hlo:3:19: unknown opcode 'frobnicate'" -- hlo check "$work/bad2.hlo"
expect check-stdin 0 "<stdin>: ok" -- hlo check - <"$data/tools__data__add.hlo"
# input that is not a file of text: refused at once (a device never ends), and text over 1 GiB
# refused from its size (a sparse file: nothing is written or read)
check dev-zero-refused bash -c "timeout 20 '$bin' hlo check /dev/zero 2>&1 | grep -q '/dev/zero is a device, not a file of HLO text'"
expect directory 1 "is a directory, not HLO text" -- hlo check "$work"
truncate -s 1100M "$work/huge.hlo"
expect too-large 1 "RESOURCE_EXHAUSTED: .*huge.hlo holds 1153433600 bytes; HLO text over 1073741824 bytes \(1 GiB\) is refused" -- hlo check "$work/huge.hlo"
rm -f "$work/huge.hlo"
check pipe-binary bash -c "head -c 300000 /dev/zero | '$bin' hlo check - 2>&1 | grep -q '<stdin>: a NUL byte at byte 0: binary data'"
expect process-substitution 0 "ok: module" -- hlo check <(cat "$data/tools__data__add.hlo")
# what XLA refuses: bytes that are not UTF-8 (never printed back raw), nesting 100,000 deep
printf 'ENTRY e {\n  ROOT x = f32[2] parameter(0), metadata={op_name="a\377"}\n}\n' >"$work/latin1.hlo"
expect not-utf8 1 "latin1.hlo:2:53: byte 0xff is not valid UTF-8" -- hlo print "$work/latin1.hlo"
python3 -c "print('ENTRY e {\n  ROOT x = f32[2] parameter(0), frontend_attributes=' + '{' * 100000 + '\n}')" >"$work/deep.hlo"
expect deep-nesting 1 "deep.hlo:2:[0-9]+: brackets nested more than 64 deep" -- hlo check "$work/deep.hlo"
expect usage-no-file 2 "FILE is required" -- hlo check
expect usage-bad-sub 2 "unknown subcommand 'frob'" -- hlo frob x
expect usage-bad-opt 2 "unknown option '--frob'" -- hlo print --frob x
expect help 0 "optitpu hlo stats FILE" -- help hlo

# print is a fixed point, also through the short (JAX-like) form
expect print 0 "" -- hlo print "$maxtext" -o "$work/p1.hlo"
check print-header grep -q "^HloModule jit_train_step" "$work/p1.hlo"
expect print-again 0 "" -- hlo print "$work/p1.hlo" -o "$work/p2.hlo"
check print-fixed-point cmp -s "$work/p1.hlo" "$work/p2.hlo"
expect print-short 0 "" -- hlo print --short --no-metadata "$maxtext" -o "$work/s1.hlo"
check print-short-has-no-percent bash -c "! grep -q '%' '$work/s1.hlo'"
expect print-short-parses 0 "ok: module jit_train_step" -- hlo check "$work/s1.hlo"
expect print-split 0 "// -----" -- hlo print --split-input-file "$data/hlo__builder__tests__matrix_einsum.hlo"

# dot and stats
expect dot 0 "" -- hlo dot "$data/tools__data__isolate_hlo_test.hlo" -o "$work/g.dot"
check dot-content grep -q 'digraph "complex_conv"' "$work/g.dot"
check dot-edges grep -Eq 'n[0-9]+ -> n[0-9]+;' "$work/g.dot"
expect dot-fusion-cluster 0 'subgraph cluster_[0-9]+ \{' -- hlo dot "$data/tools__data__hlo_isolation_cli_test.hlo"
check dot-fusion-root grep -q "style=dashed" "$work/out"
expect dot-computation 0 "digraph \"region_1.268\"" -- hlo dot "$maxtext" --computation region_1.268
expect dot-no-computation 1 "NOT_FOUND: no computation named 'nope'" -- hlo dot "$maxtext" --computation nope
expect stats 0 "convolution +1" -- hlo stats "$data/tools__data__isolate_hlo_test.hlo"
expect stats-json 0 '"opcodes":\{.*"convolution":1' -- hlo stats --json "$data/tools__data__isolate_hlo_test.hlo"
# python3 is a test dependency (scripts/deps.sh installs it)
"$bin" hlo stats --json "$maxtext" >"$work/s.json"
check stats-json-valid python3 -c "import json,sys; d=json.load(open('$work/s.json')); assert d['instructions']==1947 and d['computations']==87 and sum(d['opcodes'].values())==1947"

# the benchmark runs (tiny size) and prints JSON rows in the common format
expect bench-ir 0 '"bench": "ir".*"metric": "ratio"' -- bench ir --n 2000 --reps 1 --json

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
