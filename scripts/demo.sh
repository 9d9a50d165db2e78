#!/usr/bin/env bash
# Installs what is missing, builds optitpu and runs the main job on its embedded default.
# Until `optitpu train` exists, the most end-to-end command is `optitpu bench limits`: it measures
# this machine's memory, hashing and disk limits, the figures every benchmark compares against.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target optitpu_cli
./build/optitpu --version
echo "(optitpu train is not built yet; running the most end-to-end command: optitpu bench limits)"
exec ./build/optitpu bench limits
