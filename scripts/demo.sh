#!/usr/bin/env bash
# Installs what is missing, builds optitpu and runs the main job on its embedded default:
# `optitpu train` — an MLP (64-128-10) trained with Adam on the UCI digits set embedded in the
# library, data-parallel over 8 host devices arranged as a 2x4 torus, with async checkpoints,
# heartbeats and failure detection, a progress bar, and the loss/accuracy curves (SVG + CSV) and a
# Chrome trace written to optitpu-train/. Extra arguments go to `optitpu train` (try
# `scripts/demo.sh --fail-device 3@50`, or `optitpu help train`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target optitpu_cli
exec ./build/optitpu train "$@"
