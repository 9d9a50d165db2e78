#!/usr/bin/env bash
# Builds every libFuzzer target (fuzz/fuzz_NAME.c) with clang and runs each for SECONDS (default
# 20). Seeds come from tests/data/NAME/ and fuzz/corpus/NAME/ when they exist; new inputs go to a
# temporary corpus that is thrown away. A crash, leak, sanitizer report or timeout fails the run.
#   scripts/fuzz.sh [SECONDS] [NAME...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
command -v clang >/dev/null || { echo "fuzz: clang is missing (scripts/deps.sh --ci installs it)" >&2; exit 1; }
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
CC=clang cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOT_BUILD_FUZZ=ON \
  -DOT_BUILD_TESTS=OFF -DOT_BUILD_BENCH=OFF -DOT_WERROR=ON >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for src in fuzz/fuzz_*.c; do
    [[ -e $src ]] || continue
    n=$(basename "$src" .c)
    targets+=("${n#fuzz_}")
  done
fi
[[ ${#targets[@]} -gt 0 ]] || { echo "fuzz: no targets in fuzz/"; exit 0; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
work=$(mktemp -d "${TMPDIR:-/tmp}/optitpu-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  bin=$BUILD_DIR/fuzz_$t
  [[ -x $bin ]] || { echo "fuzz: $bin was not built" >&2; exit 1; }
  mkdir -p "$work/$t"
  seeds=()
  for d in "tests/data/$t" "fuzz/corpus/$t"; do [[ -d $d ]] && seeds+=("$d"); done
  echo "fuzz_$t: ${secs}s, seeds: ${seeds[*]:-none}"
  "$bin" -seed=1 -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/" "$work/$t" "${seeds[@]}" >"$work/$t.log" 2>&1 || {
    tail -60 "$work/$t.log"
    mkdir -p fuzz-artifacts && cp "$work"/crash-* "$work"/leak-* "$work"/timeout-* fuzz-artifacts/ 2>/dev/null || true
    echo "fuzz_$t FAILED (reproducers, if any, in fuzz-artifacts/)" >&2
    exit 1
  }
  grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "$work/$t.log" | tail -1
done
echo "fuzz: ${#targets[@]} target(s) ran ${secs}s each without a finding"
