#!/usr/bin/env bash
# The CLI skeleton: --version, help, help COMMAND [SUB], exit codes (0 ok, 1 failure, 2 usage)
# and messages that say what to do; bench limits on small sizes prints every figure as JSON.
# Usage: test_cli.sh OPTITPU_BINARY SOURCE_DIR BUILD_DIR
set -uo pipefail
bin=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/optitpu-cli.XXXXXX")
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
    echo "FAIL $name: exit $rc, want $want (optitpu $*)"; sed 's/^/  | /' "$work/all"; failed=$((failed + 1)); return
  fi
  if [[ -n $pat ]] && ! grep -Eq -- "$pat" "$work/all"; then
    echo "FAIL $name: output lacks /$pat/ (optitpu $*)"; sed 's/^/  | /' "$work/all"; failed=$((failed + 1)); return
  fi
  echo "ok   $name"
  passed=$((passed + 1))
}

version=$(sed -n 's/^project(optitpu VERSION \([0-9.]*\).*/\1/p' "$2/CMakeLists.txt")
expect version 0 "^optitpu $version\$" -- --version
expect version_short 0 "^optitpu $version\$" -- -V
expect help 0 "^usage: optitpu" -- help
expect help_lists_bench 0 "^  bench " -- help
expect help_flag 0 "exit codes: 0 ok, 1 failure, 2 usage error" -- --help
expect help_command 0 "usage: optitpu bench NAME" -- help bench
expect help_subcommand 0 "usage: optitpu bench limits" -- help bench limits
expect command_help_flag 0 "usage: optitpu bench NAME" -- bench --help
expect subcommand_help_flag 0 "--threads N" -- bench limits --help
expect no_command 2 "usage: optitpu" --
expect unknown_command 2 "unknown command 'frobnicate'" -- frobnicate
expect unknown_command_hint 2 "run 'optitpu help' for the list" -- frobnicate
expect unknown_flag 2 "unknown option '--frob'" -- --frob
expect unknown_flag_hint 2 "run 'optitpu help' for usage" -- --frob bench
expect help_unknown 2 "unknown command 'nosuch'" -- help nosuch
expect bench_no_name 0 "benchmarks:" -- bench
expect bench_no_name_lists 0 "^  optim " -- bench
expect bench_unknown 2 "unknown benchmark 'nosuch'.*optitpu bench' for the list" -- bench nosuch
expect limits_unknown_arg 2 "unknown argument '--bogus'" -- bench limits --bogus
expect limits_unknown_arg_hint 2 "run 'optitpu help bench limits' for usage" -- bench limits --bogus
expect limits_bad_threads 2 "--threads needs a number from 1 to 1024" -- bench limits --threads 0
expect limits_missing_value 2 "--threads needs a number" -- bench limits --threads
expect limits_bad_threads_text 2 "--threads needs" -- bench limits --threads two
expect limits_bad_only 2 "--only needs a comma list" -- bench limits --only gpu
expect limits_bad_size 2 "--stream-bytes needs a size" -- bench limits --stream-bytes 12Q
# a runtime failure is exit 1 with the library's message
expect limits_io_failure 1 "IO: .*cannot create a file in /nonexistent" -- \
  bench limits --only disk --file-bytes 4M --tmp-dir /nonexistent

# every figure, once each, as one JSON object per line with the seven keys
expect limits_json 0 "" -- bench limits --json --threads 2 --reps 1 --stream-bytes 2M --file-bytes 4M
lines=$(wc -l <"$work/out")
if [[ $lines -ne 8 ]]; then
  echo "FAIL limits_json_lines: $lines lines, want 8"; failed=$((failed + 1))
else
  echo "ok   limits_json_lines"; passed=$((passed + 1))
fi
bad=0
for c in "memcpy 2 MiB" "STREAM copy" "STREAM scale" "STREAM add" "STREAM triad" "sha256" \
         "file write\\+fsync" "file read"; do
  grep -Eq "\"case\": \"$c" "$work/out" || { echo "  missing figure: $c"; bad=1; }
done
if command -v python3 >/dev/null; then
  python3 - "$work/out" <<'PY' || bad=1
import json, math, sys
keys = ["bench", "case", "metric", "value", "baseline", "baseline_value", "ratio"]
for line in open(sys.argv[1]):
    o = json.loads(line)
    assert list(o) == keys, o
    assert o["bench"] == "limits" and o["metric"] == "GB/s", o
    assert isinstance(o["value"], float) and o["value"] > 0 and math.isfinite(o["value"]), o
PY
else
  grep -Evq '^\{"bench": "limits", "case": "[^"]*", "metric": "GB/s", "value": [0-9.e+-]+, "baseline": null, "baseline_value": null, "ratio": null\}$' "$work/out" && bad=1
fi
if [[ $bad -ne 0 ]]; then
  echo "FAIL limits_json_figures"; sed 's/^/  | /' "$work/out"; failed=$((failed + 1))
else
  echo "ok   limits_json_figures"; passed=$((passed + 1))
fi
expect limits_table 0 "^limits +STREAM triad f64 3x2 MiB, 1 thread +GB/s" -- \
  bench limits --only stream --threads 1 --reps 1 --stream-bytes 2M

# bench optim: small sizes, every row present, one compile, the fused loop agrees
expect optim_bad_params 2 "--params needs a count" -- bench optim --params 0
expect optim_unknown_optimizer 1 "unknown optimizer 'nosuch'" -- bench optim --optimizer nosuch --no-limits
expect optim_json 0 "" -- bench optim --params 4096 --tensors 3 --reps 2 --no-limits --json
bad=0
for c in "adam f32 4096 x3 compile \\(once\\)" "adam f32 4096 x3 step" "adam f32 4096 x3 parameters != loop's" \
         "adam f32 4096 x3, [0-9]+ threads?\"" "adam f32 4096 x3 compiles after 3 steps"; do
  grep -Eq "\"case\": \"$c" "$work/out" || { echo "  missing row: $c"; bad=1; }
done
grep -Eq '"case": "adam f32 4096 x3 compiles after 3 steps", "metric": "count", "value": 1[,.]' "$work/out" || { echo "  compiled more than once"; bad=1; }
grep -Eq '"case": "adam f32 4096 x3 parameters != loop.s", "metric": "elements", "value": 0[,.]' "$work/out" || { echo "  the device optimizer and the loop differ"; bad=1; }
grep -Eq '"case": "adam f32 4096 x3 bytes per step \(profile\)", "metric": "B", "value": 114688[,.]' "$work/out" || { echo "  profile bytes per step is not 28 B x 4096"; bad=1; }
if [[ $bad -ne 0 ]]; then
  echo "FAIL optim_json_rows"; sed 's/^/  | /' "$work/out"; failed=$((failed + 1))
else
  echo "ok   optim_json_rows"; passed=$((passed + 1))
fi
expect optim_table 0 "^optim +lamb f32 1000 x2 step, 1 thread +ms/step" -- bench optim --optimizer lamb --params 1000 --tensors 2 --reps 1 --no-limits --threads 1
# both sides on the same pool, and the labels say how many threads: the step, the fused C loop
# (each thread a slice of every tensor: bit-identical for any thread count), the flat step
expect optim_threads_bad 2 "--threads needs a number" -- bench optim --threads 0
expect optim_threads 0 "" -- bench optim --params 4099 --tensors 3 --reps 2 --no-limits --json --threads 3 --flat
bad=0
grep -Eq '"case": "adam f32 4099 x3 step, 3 threads", "metric": "ms/step", "value": [0-9.e+-]+, "baseline": "fused C loop, 3 threads"' "$work/out" || { echo "  step and loop rows do not both name 3 threads"; bad=1; }
grep -Eq '"case": "adam f32 4099 x3 step CPUs busy \(CPU time / wall time\)", "metric": "CPUs", "value": [0-9.e+-]+, "baseline": "fused C loop CPUs busy, 3 threads", "baseline_value": [0-9.e+-]+, "ratio": null' "$work/out" || { echo "  no CPUs busy row"; bad=1; }
grep -Eq '"case": "adam f32 4099 x3 parameters != loop.s", "metric": "elements", "value": 0[,.]' "$work/out" || { echo "  the loop on 3 threads differs from the step"; bad=1; }
grep -Eq '"case": "adam f32 4099 x3 flat step, 3 threads", "metric": "ms/step", "value": [0-9.e+-]+, "baseline": "per-tensor step, 3 threads"' "$work/out" || { echo "  flat row does not name 3 threads"; bad=1; }
grep -q 'thread)' "$work/out" && { echo "  a label still says (N thread)"; bad=1; }
if [[ $bad -ne 0 ]]; then
  echo "FAIL optim_threads_rows"; sed 's/^/  | /' "$work/out"; failed=$((failed + 1))
else
  echo "ok   optim_threads_rows"; passed=$((passed + 1))
fi
# --flat: the flat-mode wrapper is one kernel and bit-identical to the per-tensor mode
expect optim_flat_json 0 "" -- bench optim --params 4096 --tensors 5 --reps 3 --no-limits --json --flat
bad=0
grep -Eq '"case": "adam f32 4096 x5 flat step, [0-9]+ threads?", "metric": "ms/step", "value": [0-9.e+-]+, "baseline": "per-tensor step, [0-9]+ threads?"' "$work/out" || { echo "  no flat step row"; bad=1; }
grep -Eq '"case": "adam f32 4096 x5 flat kernels", "metric": "count", "value": 1[,.]' "$work/out" || { echo "  flat update is not one kernel"; bad=1; }
grep -Eq '"case": "adam f32 4096 x5 flat parameters != per-tensor.s", "metric": "elements", "value": 0[,.]' "$work/out" || { echo "  flat and per-tensor modes differ"; bad=1; }
if [[ $bad -ne 0 ]]; then
  echo "FAIL optim_flat_rows"; sed 's/^/  | /' "$work/out"; failed=$((failed + 1))
else
  echo "ok   optim_flat_rows"; passed=$((passed + 1))
fi
# lamb in flat mode: per-tensor trust ratios over segments, bit-identical; adafactor refused
expect optim_flat_lamb 0 "" -- bench optim --optimizer lamb --params 1000 --tensors 3 --reps 1 --flat --no-limits --json
if grep -Eq '"case": "lamb f32 1000 x3 flat parameters != per-tensor.s", "metric": "elements", "value": 0[,.]' "$work/out"; then
  echo "ok   optim_flat_lamb_rows"; passed=$((passed + 1))
else
  echo "FAIL optim_flat_lamb_rows"; sed 's/^/  | /' "$work/out"; failed=$((failed + 1))
fi
# memory admission: 4G parameters need 144 GiB (device parameters, gradients, state, the baseline
# loop's arrays); refused before anything is allocated, naming needed and available. Where that
# much is free the case cannot be made and is left out. The address-space limit keeps a build
# without admission from touching the memory (sanitizer builds reserve too much address space
# for one).
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
libs=$(ldd "$bin" 2>/dev/null || true) # read whole: grep -q would cut ldd off (pipefail)
if [[ -n $avail_kb ]] && ((avail_kb < 140 * 1024 * 1024)); then
  limit=
  [[ $libs == *san.so* ]] || limit="ulimit -v 8388608;"
  if bash -c "$limit exec '$bin' bench optim --params 4G --no-limits" >"$work/all" 2>&1; then
    echo "FAIL optim_admission: accepted"; failed=$((failed + 1))
  elif grep -Eq "RESOURCE_EXHAUSTED: bench optim needs 144.00 GiB \(154618822656 bytes\) of host memory .*more than the .* available \(MemAvailable" "$work/all"; then
    echo "ok   optim_admission"; passed=$((passed + 1))
  else
    echo "FAIL optim_admission:"; sed 's/^/  | /' "$work/all"; failed=$((failed + 1))
  fi
fi
# the same in train: 10^10 parameters on 8 devices (1.46 TiB) refused before the replicas allocate
if [[ -n $avail_kb ]] && ((avail_kb < 1500 * 1024 * 1024)); then
  limit=
  [[ $libs == *san.so* ]] || limit="ulimit -v 8388608;"
  if bash -c "$limit exec '$bin' train --hidden 100000,100000 --steps 1 --output-dir '$work/train'" >"$work/all" 2>&1; then
    echo "FAIL train_admission: accepted"; failed=$((failed + 1))
  elif grep -Eq "RESOURCE_EXHAUSTED: train needs 1.46 TiB \(1601216001600 bytes\) of host memory \(8 devices x \(parameters 37.28 GiB" "$work/all"; then
    echo "ok   train_admission"; passed=$((passed + 1))
  else
    echo "FAIL train_admission:"; sed 's/^/  | /' "$work/all"; failed=$((failed + 1))
  fi
fi
expect optim_flat_adafactor 1 "flat mode: optimizer 'adafactor' is not elementwise" -- bench optim --optimizer adafactor --params 1000 --tensors 2 --flat --no-limits

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
