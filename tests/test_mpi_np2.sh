#!/usr/bin/env bash
# The MPI communicator tests (tests/test_mpi.c) with 2 processes, oversubscribed.
set -euo pipefail
build=$3
source "$(dirname "$0")/mpi_env.sh"
mpi_skip_unless_built "$build"
timeout 300 mpirun --oversubscribe -x OT_TEST_EXPECT_SHM=1 -np 2 "$build/test_mpi"
# the benchmark under mpirun: one JSON row per size, ours beside MPI_Allreduce
out=$(timeout 120 mpirun --oversubscribe -np 2 "$1" bench collectives --mpi --sizes 64K,1M --reps 2 \
  --warmup 1 --json)
[[ $(grep -c '"bench": *"collectives_mpi".*"baseline": *"MPI_Allreduce' <<<"$out") -eq 2 ]] ||
  { echo "bench collectives --mpi: expected 2 rows: $out"; exit 1; }
