#!/usr/bin/env bash
# Installs what is missing, builds optitpu and runs the main job on its embedded default.
# Until `optitpu train` exists, the most end-to-end command is `optitpu run` on a JAX program from
# the conformance corpus: an MLP forward+backward step (JAX's own HLO) is compiled (-O2: passes,
# fusion, scheduling, buffer assignment), run on a host device with the recorded inputs 5 times,
# profiled (per-kernel times, FLOPs, bytes, memory events) and written as a Chrome trace.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target optitpu_cli
./build/optitpu --version
case=tests/data/jax/mlp_forward_backward
args=()
for f in "$case"/input_*.npy; do
  k=${f##*/input_}
  args+=(--input "${k%.npy}=$f")
done
echo "(optitpu train is not built yet; running the most end-to-end command: optitpu run on JAX's"
echo " MLP forward+backward step, with a profile and a Chrome trace in build/demo_trace.json)"
exec ./build/optitpu run "$case/module.hlo" "${args[@]}" --output-dir build/demo_out --repeat 5 \
  --trace build/demo_trace.json --summary
