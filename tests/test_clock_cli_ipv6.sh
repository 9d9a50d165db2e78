#!/usr/bin/env bash
# optitpu ntp over IPv6: serve on a free port of ::1 and query it there. Skipped (exit 77, CTest's
# SKIP_RETURN_CODE) when this machine has no IPv6 loopback (::1 not among the addresses in
# /proc/net/if_inet6); test_clock_cli.sh covers IPv4.
# Usage: test_clock_cli_ipv6.sh OPTITPU_BINARY SOURCE_DIR BUILD_DIR
set -uo pipefail
bin=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/optitpu-ntpcli6.XXXXXX")
spid=""
cleanup() {
  [[ -n $spid ]] && kill "$spid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

if ! grep -Eq '^0{31}1 ' /proc/net/if_inet6 2>/dev/null; then
  echo "SKIPPED: no IPv6 loopback (::1) on this machine"
  exit 77
fi
"$bin" ntp serve --bind '[::1]' --port 0 --duration 60 >"$work/s6" 2>"$work/s6.err" &
spid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/^serving NTP on .* port \([0-9]*\) .*/\1/p' "$work/s6" 2>/dev/null)
  [[ -n $port ]] && break
  sleep 0.05
done
if [[ -z $port ]]; then
  echo "FAIL serve_v6: no port printed"; sed 's/^/  | /' "$work/s6" "$work/s6.err"; exit 1
fi
echo "ok   serve_v6 (port $port)"
timeout 30 "$bin" ntp query "[::1]:$port" --samples 2 --interval 0.05 >"$work/out" 2>&1
rc=$?
if [[ $rc -ne 0 ]] || ! grep -Eq "^server \[::1\]:$port  stratum 10" "$work/out"; then
  echo "FAIL query_v6: exit $rc"; sed 's/^/  | /' "$work/out"; exit 1
fi
echo "ok   query_v6"
kill -TERM "$spid"
wait "$spid"
rc=$?
spid=""
if [[ $rc -ne 0 ]] || ! grep -Eq "received 2, answered 2, malformed 0" "$work/s6.err"; then
  echo "FAIL serve_v6_sigterm_stats: exit $rc"; sed 's/^/  | /' "$work/s6.err"; exit 1
fi
echo "ok   serve_v6_sigterm_stats"
echo "3 passed, 0 failed"
