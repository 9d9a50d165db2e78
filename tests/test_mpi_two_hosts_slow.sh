#!/usr/bin/env bash
# Two hosts on one machine: two network namespaces joined by a veth pair (10.213.7.1 and
# 10.213.7.2, addresses that exist only inside these namespaces), mpirun started in the first,
# the second reached through an ssh-less launch agent (`ip netns exec`), every rank talking over
# TCP (Open MPI's tcp btl on the veth only). Runs the MPI collective tests (tests/test_mpi.c)
# across them: the code path of a real two-host job. Cleans up after itself; skipped (exit 77,
# CTest's SKIP_RETURN_CODE, with the reason) only where MPI or ip is missing or namespaces cannot
# be created.
set -euo pipefail
build=$3
source "$(dirname "$0")/mpi_env.sh"
mpi_skip_unless_built "$build"
command -v ip >/dev/null || { echo "SKIPPED: iproute2 (ip) is not installed (scripts/deps.sh)"; exit 77; }
tag=$$
nsa=otmpi-a-$tag nsb=otmpi-b-$tag va=otva$tag vb=otvb$tag
tmp=$(mktemp -d)
cleanup() {
  ip netns del "$nsa" 2>/dev/null || true
  ip netns del "$nsb" 2>/dev/null || true # the veth pair goes with its namespaces
  rm -rf "$tmp"
}
trap cleanup EXIT
if ! err=$(ip netns add "$nsa" 2>&1); then
  echo "SKIPPED: cannot create network namespaces here: $err"
  exit 77
fi
ip netns add "$nsb"
ip link add "$va" type veth peer name "$vb"
ip link set "$va" netns "$nsa"
ip link set "$vb" netns "$nsb"
ip -n "$nsa" addr add 10.213.7.1/24 dev "$va"
ip -n "$nsb" addr add 10.213.7.2/24 dev "$vb"
for ns in "$nsa" "$nsb"; do ip -n "$ns" link set lo up; done
ip -n "$nsa" link set "$va" up
ip -n "$nsb" link set "$vb" up

# the launch agent mpirun calls instead of ssh: AGENT [options] HOST COMMAND
cat >"$tmp/agent.sh" <<AGENT
#!/bin/bash
while [[ "\$1" == -* ]]; do shift; done
host=\$1; shift
case "\$host" in
  10.213.7.1) ns=$nsa ;;
  10.213.7.2) ns=$nsb ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
chmod +x "$tmp/agent.sh"

mpi=(mpirun --oversubscribe --mca plm_rsh_agent "$tmp/agent.sh" --mca btl tcp,self
     --mca btl_tcp_if_include 10.213.7.0/24 --mca oob_tcp_if_include 10.213.7.0/24
     -x OT_TEST_CHUNK=65536 -x OT_TEST_EXPECT_SHM=0)
# one rank per host, then two per host
timeout 400 ip netns exec "$nsa" "${mpi[@]}" -np 2 --host 10.213.7.1:1,10.213.7.2:1 "$build/test_mpi"
timeout 400 ip netns exec "$nsa" "${mpi[@]}" -np 4 --host 10.213.7.1:2,10.213.7.2:2 \
  "$build/test_mpi" allreduce
echo "two hosts ok"
