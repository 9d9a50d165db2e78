#!/usr/bin/env bash
# Tests that need a tool or capability the machine may lack are reported as skipped, never as
# passed: the CTest tests that can skip have SKIP_RETURN_CODE 77 (every test the tests/ globs
# register), the capability cases are tests of their own, and each such test really exits 77
# when what it needs is taken away here (chronyd hidden, mpirun and ip out of PATH, no IPv6
# loopback in a fresh network namespace, no CAP_SYS_ADMIN for the tmpfs). Where this script cannot take a capability away itself (not root, no namespaces) that
# check is skipped and the script exits 77.
# Usage: test_skip_codes.sh OPTITPU_BINARY SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$2
build=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/optitpu-skip.XXXXXX")
trap 'rm -rf "$work"' EXIT
passed=0 failed=0 skipped=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; [[ -f $work/out ]] && sed 's/^/  | /' "$work/out"; failed=$((failed + 1)); }
skip() { echo "skip $1"; skipped=$((skipped + 1)); }

# want_skip NAME -- COMMAND...: the command exits 77 and says why
want_skip() {
  local name=$1
  shift 2
  "$@" >"$work/out" 2>&1
  local rc=$?
  if [[ $rc -eq 77 ]] && grep -Eq "SKIP" "$work/out"; then ok "$name"; else echo "  exit $rc, want 77"; bad "$name"; fi
}

# 1. the registration: SKIP_RETURN_CODE 77 on every test; the capability parts split off
if ctest --test-dir "$build" --show-only=json-v1 >"$work/tests.json" 2>"$work/out" &&
  python3 - "$work/tests.json" <<'PY' >"$work/out" 2>&1; then
import json, sys
tests = {t["name"]: t for t in json.load(open(sys.argv[1]))["tests"]}
def prop(t, name):
    return next((p["value"] for p in t.get("properties", []) if p["name"] == name), None)
# the tests that can skip (the glob-registered programs and scripts all get it; a test added by
# hand that never exits 77 needs none)
can_skip = ["test_clock_chrony", "test_clock_chrony_ipv6", "test_clock_ipv6", "test_ckpt_tmpfs",
            "test_clock_cli_ipv6", "test_mpi_two_hosts_slow", "test_mpi_np2", "test_mpi_np4",
            "test_mpi_launch", "test_train_mpi", "test_bench_baselines", "test_skip_codes",
            "test_unsupported_hardware", "test_harness", "test_clock", "test_ckpt"]
missing = [n for n in can_skip if n not in tests or prop(tests[n], "SKIP_RETURN_CODE") not in (77, "77")]
assert not missing, f"not registered, or no SKIP_RETURN_CODE 77: {missing}"
for prog, part in [("test_clock", "ipv6"), ("test_clock_chrony", "ipv6"), ("test_ckpt", "tmpfs"),
                   ("test_ft_io", "priority")]:
    assert f"{prog}_{part}" in tests, f"{prog}_{part} not registered"
    assert tests[f"{prog}_{part}"]["command"][-1] == part, tests[f"{prog}_{part}"]["command"]
    assert tests[prog]["command"][-2:] == ["--exclude", part], tests[prog]["command"]
for name in ["test_skip_codes", "test_clock_cli_ipv6", "test_mpi_two_hosts_slow", "test_harness"]:
    assert name in tests, f"{name} not registered"
n77 = sum(prop(t, "SKIP_RETURN_CODE") in (77, "77") for t in tests.values())
print(f"{n77} of {len(tests)} tests with SKIP_RETURN_CODE 77")
PY
  ok ctest_skip_return_code
else
  bad ctest_skip_return_code
fi

# 2. chronyd missing
want_skip chrony_missing -- env OT_CHRONYD=/nonexistent/chronyd "$build/test_clock_chrony"
want_skip chrony_missing_ipv6 -- env OT_CHRONYD=/nonexistent/chronyd "$build/test_clock_chrony" ipv6

# 3. mpirun, then ip, missing from PATH (the tools the scripts need, and nothing else)
mkdir -p "$work/bin" "$work/bin_mpi"
for t in bash dirname mktemp rm cat sed grep timeout seq sleep; do
  p=$(command -v "$t") && ln -sf "$p" "$work/bin/$t" && ln -sf "$p" "$work/bin_mpi/$t"
done
want_skip mpi_np2_no_mpirun -- env PATH="$work/bin" bash "$src/tests/test_mpi_np2.sh" "$1" "$src" "$build"
want_skip two_hosts_no_mpirun -- env PATH="$work/bin" bash "$src/tests/test_mpi_two_hosts_slow.sh" "$1" "$src" "$build"
if [[ -x "$build/test_mpi" ]] && p=$(command -v mpirun); then
  ln -sf "$p" "$work/bin_mpi/mpirun"
  want_skip two_hosts_no_ip -- env PATH="$work/bin_mpi" bash "$src/tests/test_mpi_two_hosts_slow.sh" "$1" "$src" "$build"
else
  skip "two_hosts_no_ip (optitpu built without MPI here: the MPI check comes first)"
fi

# 4. no IPv6 loopback: a fresh network namespace with lo up and IPv6 disabled on it
noipv6=(unshare -n sh -c 'ip link set lo up && sysctl -qw net.ipv6.conf.lo.disable_ipv6=1 && exec "$@"' sh)
if [[ $(id -u) -ne 0 ]]; then
  noipv6=(unshare -rn sh -c 'ip link set lo up && sysctl -qw net.ipv6.conf.lo.disable_ipv6=1 && exec "$@"' sh)
fi
if "${noipv6[@]}" true 2>/dev/null; then
  want_skip clock_no_ipv6 -- "${noipv6[@]}" "$build/test_clock" ipv6
  want_skip clock_cli_no_ipv6 -- "${noipv6[@]}" bash "$src/tests/test_clock_cli_ipv6.sh" "$1" "$src" "$build"
  if [[ -x /usr/sbin/chronyd ]] || command -v chronyd >/dev/null; then
    want_skip chrony_no_ipv6 -- "${noipv6[@]}" "$build/test_clock_chrony" ipv6
  else
    skip "chrony_no_ipv6 (chronyd not installed: covered by chrony_missing)"
  fi
else
  skip "clock_no_ipv6, clock_cli_no_ipv6, chrony_no_ipv6 (cannot make a network namespace here)"
fi

# 5. not root: a thread's priority cannot be raised back
nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [[ $(id -u) -ne 0 ]]; then
  want_skip ft_io_priority_not_root -- "$build/test_ft_io" priority
elif command -v setpriv >/dev/null && "${nobody[@]}" test -x "$build/test_ft_io" 2>/dev/null; then
  want_skip ft_io_priority_not_root -- "${nobody[@]}" "$build/test_ft_io" priority
else
  skip "ft_io_priority_not_root (user nobody cannot run $build/test_ft_io here)"
fi

# 6. no CAP_SYS_ADMIN: the tmpfs cannot be mounted
if [[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null; then
  want_skip ckpt_tmpfs_no_sys_admin -- setpriv --inh-caps=-sys_admin --bounding-set=-sys_admin \
    "$build/test_ckpt" tmpfs
else
  want_skip ckpt_tmpfs_unprivileged -- "$build/test_ckpt" tmpfs
fi

echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]] || exit 1
[[ $skipped -eq 0 ]] || exit 77
