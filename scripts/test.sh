#!/usr/bin/env bash
# Installs what is missing (scripts/deps.sh: the build's and every test's packages), builds optitpu
# and runs every test with CTest. A test that cannot run here (a tool or capability missing) is
# reported as skipped with its reason (exit 77, SKIP_RETURN_CODE), never as passed.
#   scripts/test.sh                     release build in build/
#   BUILD_DIR=build-asan SANITIZE=address scripts/test.sh    ASan+UBSan build
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh ${CI:+--ci}
BUILD_DIR=${BUILD_DIR:-build}
SANITIZE=${SANITIZE:-}
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DOT_SANITIZE="$SANITIZE" -DOT_WERROR=ON >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" ${CTEST_ARGS:-}
