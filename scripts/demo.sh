#!/usr/bin/env bash
# Installs what is missing, builds optitpu and runs the main job on its embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target optitpu_cli
exec ./build/optitpu --version
