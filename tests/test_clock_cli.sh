#!/usr/bin/env bash
# optitpu ntp: serve on a free loopback port (IPv4; IPv6 in test_clock_cli_ipv6.sh), query it as
# a table and as JSON, exit codes (0 ok, 1 no valid reply, 2 usage) and messages; the server stops
# on SIGTERM and reports what it answered.
# Usage: test_clock_cli.sh OPTITPU_BINARY SOURCE_DIR BUILD_DIR
set -uo pipefail
bin=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/optitpu-ntpcli.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
passed=0
failed=0

# expect NAME WANT_RC PATTERN_IN_OUTPUT -- ARGS...  (pattern: grep -E over stdout+stderr)
expect() {
  local name=$1 want=$2 pat=$3
  shift 4
  timeout 30 "$bin" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  cat "$work/out" "$work/err" >"$work/all"
  if [[ $rc -ne $want ]]; then
    echo "FAIL $name: exit $rc, want $want (optitpu $*)"; sed 's/^/  | /' "$work/all"; failed=$((failed + 1)); return
  fi
  if [[ -n $pat ]] && ! grep -Eq -- "$pat" "$work/all"; then
    echo "FAIL $name: output lacks /$pat/ (optitpu $*)"; sed 's/^/  | /' "$work/all"; failed=$((failed + 1)); return
  fi
  echo "ok   $name"
  passed=$((passed + 1))
}

# start_server BIND LOG: runs `optitpu ntp serve` on a free port; sets $port and $spid
start_server() {
  "$bin" ntp serve --bind "$1" --port 0 --duration 60 >"$2" 2>"$2.err" &
  spid=$!
  pids+=("$spid")
  port=""
  for _ in $(seq 100); do
    port=$(sed -n 's/^serving NTP on .* port \([0-9]*\) .*/\1/p' "$2" 2>/dev/null)
    [[ -n $port ]] && break
    sleep 0.05
  done
}

expect help_lists_ntp 0 "^  ntp " -- help
expect help_ntp 0 "usage: optitpu ntp query" -- help ntp
expect help_ntp_serve 0 "usage: optitpu ntp serve" -- help ntp serve
expect ntp_no_sub 2 "missing subcommand" -- ntp
expect ntp_bad_sub 2 "unknown subcommand 'x'" -- ntp x
expect query_no_host 2 "missing HOST" -- ntp query
expect query_bad_samples 2 "--samples wants 1..64" -- ntp query 127.0.0.1 --samples 0
expect query_bad_timeout 2 "--timeout wants seconds" -- ntp query 127.0.0.1 --timeout x
expect query_bad_addr 1 "bad port" -- ntp query 127.0.0.1:99999
expect query_bad_bracket 1 "missing '\\]'" -- ntp query '[::1:123'
expect serve_no_port 2 "--port is required" -- ntp serve
expect serve_bad_stratum 2 "--stratum wants 1..15" -- ntp serve --port 0 --stratum 16
expect serve_bad_bind 1 "cannot resolve 'nope'" -- ntp serve --bind nope --port 0 --duration 0

start_server 127.0.0.1 "$work/s4"
if [[ -z $port ]]; then
  echo "FAIL serve_v4: no port printed"; cat "$work/s4" "$work/s4.err"; failed=$((failed + 1))
else
  echo "ok   serve_v4 (port $port)"; passed=$((passed + 1))
  expect query_table 0 "^offset [-+][0-9.]+ us  delay [0-9.]+ us" -- \
    ntp query "127.0.0.1:$port" --samples 3 --interval 0.05
  expect query_table_counts 0 "packets: accepted 3  timeouts 0" -- \
    ntp query "127.0.0.1:$port" --samples 3 --interval 0.05
  expect query_json 0 '^\{"server":"127.0.0.1:'"$port"'","ok":true,"offset_s":' -- \
    ntp query "127.0.0.1:$port" --samples 2 --interval 0.05 --json
  # python3 is a test dependency (scripts/deps.sh installs it)
  if python3 - "$work/out" <<'PY'; then
import json, sys
o = json.load(open(sys.argv[1]))
# one clock on both ends: the offset error is half the path asymmetry, at most delay / 2
assert o["ok"] and 0 < o["delay_s"] < 1 and abs(o["offset_s"]) <= o["delay_s"] / 2 + 1e-6, o
assert o["stratum"] == 10 and o["ref_id"] == "127.127.1.1" and len(o["samples"]) == 2, o
assert o["packets"]["accepted"] == 2 and sum(o["packets"].values()) == 2, o
PY
    echo "ok   query_json_fields"; passed=$((passed + 1))
  else
    echo "FAIL query_json_fields"; sed 's/^/  | /' "$work/out"; failed=$((failed + 1))
  fi
  kill -TERM "$spid"
  wait "$spid"
  rc=$?
  if [[ $rc -eq 0 ]] && grep -Eq "received 8, answered 8, malformed 0" "$work/s4.err"; then
    echo "ok   serve_sigterm_stats"; passed=$((passed + 1))
  else
    echo "FAIL serve_sigterm_stats: exit $rc"; sed 's/^/  | /' "$work/s4.err"; failed=$((failed + 1))
  fi
  # nothing answers there now: exit 1 within the timeout, with the reason
  expect query_dead 1 "no (valid reply|NTP server)" -- \
    ntp query "127.0.0.1:$port" --samples 2 --interval 0 --timeout 0.2
  expect query_dead_json 1 '"ok":false,"error":"TIMEOUT' -- \
    ntp query "127.0.0.1:$port" --samples 1 --timeout 0.2 --json
fi

# ntp sync: two honest servers and one 5 s ahead (serve --offset): the skewed one is a falseticker
expect sync_no_host 2 "missing HOST" -- ntp sync
expect sync_bad_rounds 2 "--rounds wants 1..100" -- ntp sync 127.0.0.1 --rounds 0
expect serve_bad_offset 2 "--offset wants seconds" -- ntp serve --port 0 --offset x
start_server 127.0.0.1 "$work/a"; pa=$port; spa=$spid
start_server 127.0.0.1 "$work/b"; pb=$port; spb=$spid
"$bin" ntp serve --bind 127.0.0.1 --port 0 --offset 5 --duration 60 >"$work/c" 2>"$work/c.err" &
spc=$!; pids+=("$spc"); pc=""
for _ in $(seq 100); do
  pc=$(sed -n 's/^serving NTP on .* port \([0-9]*\) .*/\1/p' "$work/c" 2>/dev/null)
  [[ -n $pc ]] && break
  sleep 0.05
done
expect skewed_server 0 "^offset \+(4999|5000)[0-9]{3}\.[0-9]+ us" -- \
  ntp query "127.0.0.1:$pc" --samples 1
expect sync_falseticker 0 "^127.0.0.1:$pc +falseticker +\+(4999|5000)[0-9]{3}\." -- \
  ntp sync "127.0.0.1:$pa" "127.0.0.1:$pc" "127.0.0.1:$pb" --interval 0
expect sync_system 0 "^system offset [-+][0-9]+\.[0-9]+ us .* survivors 2$" -- \
  ntp sync "127.0.0.1:$pa" "127.0.0.1:$pc" "127.0.0.1:$pb" --interval 0 --rounds 2
# the honest servers share this host's clock: the system offset (a weighted mean of survivor
# offsets) is within half the largest survivor delay; a fixed bound fails on a loaded machine
if awk '$2 == "survivor" || $2 == "sys_peer" { d = $4 > d ? $4 : d }
        /^system offset/ { o = $3 < 0 ? -$3 : $3 }
        END { exit !(d > 0 && o <= d / 2 + 1) }' "$work/all"; then
  echo "ok   sync_system_bound"; passed=$((passed + 1))
else
  echo "FAIL sync_system_bound"; sed 's/^/  | /' "$work/all"; failed=$((failed + 1))
fi
expect sync_no_majority 1 "no majority of the 2 fit servers" -- \
  ntp sync "127.0.0.1:$pa" "127.0.0.1:$pc" --interval 0
expect sync_json 0 '^\{"ok":true,"offset_s":.*"survivors":2,"servers":\[.*"class":"falseticker"' -- \
  ntp sync "127.0.0.1:$pa" "127.0.0.1:$pc" "127.0.0.1:$pb" --interval 0 --json
kill -TERM "$spa" "$spb" "$spc"; wait "$spa" "$spb" "$spc"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
