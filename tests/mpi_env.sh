# Sourced by the MPI test scripts: Open MPI settings for this machine (root, few cores) and the
# skip rule (exit 77: CTest's SKIP_RETURN_CODE, reported as skipped). Usage: source mpi_env.sh
# <build dir>
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# an oversubscribed machine: yield instead of spinning in MPI's progress loop
export OMPI_MCA_mpi_yield_when_idle=1
# Open MPI's own allocations are not ours to check for leaks under ASan
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
mpi_skip_unless_built() {
  if [[ ! -x "$1/test_mpi" ]] || ! command -v mpirun >/dev/null; then
    echo "SKIPPED: optitpu was built without MPI or mpirun is missing (install libopenmpi-dev openmpi-bin: scripts/deps.sh)"
    exit 77
  fi
}
