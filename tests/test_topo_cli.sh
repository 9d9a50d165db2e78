#!/usr/bin/env bash
# optitpu topo: text, JSON and DOT output, routes, and a clear error for a bad preset.
set -euo pipefail
bin=$1
out=$("$bin" topo --preset v4-4x4x4)
grep -q "devices   64" <<<"$out"
grep -q "50.00 GB/s" <<<"$out"
grep -q "^ring      0 " <<<"$out"
"$bin" topo --preset v4-4x4x4 --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["devices"]==64 and len(d["ring"])==64, d' 2>/dev/null \
  || "$bin" topo --preset v4-4x4x4 --json | grep -q '"devices":64'
[[ $("$bin" topo --preset torus-2x4 --dot | grep -c -- ' -- ') -eq 12 ]]
"$bin" topo --preset mesh-4x4 --route 0 15 | grep -q "route     0 -> 15, 6 hops: 0 1 2 3 7 11 15"
"$bin" topo --preset mesh-3x3 | grep -q "ring      none"
err=$(mktemp)
if "$bin" topo --preset v9-1 2>"$err"; then echo "bad preset accepted"; exit 1; fi
grep -q "unknown kind 'v9'" "$err"
rm -f "$err"
echo "topo cli ok"
