#!/usr/bin/env bash
# The MPI communicator tests (tests/test_mpi.c) with 2 processes, oversubscribed.
set -euo pipefail
build=$3
source "$(dirname "$0")/mpi_env.sh"
mpi_skip_unless_built "$build"
timeout 300 mpirun --oversubscribe -x OT_TEST_EXPECT_SHM=1 -np 2 "$build/test_mpi"
