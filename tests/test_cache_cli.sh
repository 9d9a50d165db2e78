#!/usr/bin/env bash
# optitpu run on a compiled executable (the same outputs as running the HLO), run
# --compile-cache (miss then hit), optitpu cache ls / verify / clear with a damaged entry, and
# optitpu train starting again from the cache.
# Every cache lives in a private temporary directory.
set -euo pipefail
bin=$1
src=$2
hlo=$src/tests/data/hlo
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME=$tmp/xdg
unset OPTITPU_CACHE_DIR OPTITPU_CACHE_MAX_BYTES

# An executable file runs as its HLO does, bit for bit (one with two devices included).
for f in tools__data__must_alias.hlo backends__cpu__lite_aot__tests__hlos__multiple_outputs.hlo \
  backends__cpu__benchmarks__hlo__dynamic_slice_loop_1x2048x768_bf16.hlo \
  tools__multihost_hlo_runner__data__sharded_2_devices.hlo; do
  "$bin" compile "$hlo/$f" -o "$tmp/exe.bin" >/dev/null
  "$bin" run "$hlo/$f" --fill random:5 --output-dir "$tmp/h" >/dev/null
  "$bin" run "$tmp/exe.bin" --fill random:5 --output-dir "$tmp/e" >"$tmp/out.txt"
  grep -q "^loaded      executable" "$tmp/out.txt" || { echo "$f: not loaded as an executable"; exit 1; }
  for o in "$tmp"/h/out_*.npy; do cmp "$o" "$tmp/e/$(basename "$o")"; done
  rm -rf "$tmp/h" "$tmp/e"
done
"$bin" run "$tmp/exe.bin" --fill zeros --json --output-dir "$tmp/e" | grep -q '"executable":true'
# -O and --module are the compile's, not the run's
if "$bin" run "$tmp/exe.bin" -O1 --fill zeros --output-dir "$tmp/e" 2>"$tmp/err"; then
  echo "-O with an executable: expected a failure"; exit 1
fi
grep -q "compiled executable: -O and --module do not apply" "$tmp/err"
# a damaged executable file is refused with the reason
cp "$tmp/exe.bin" "$tmp/bad.bin"
printf '\xff' | dd of="$tmp/bad.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
if "$bin" run "$tmp/bad.bin" --fill zeros --output-dir "$tmp/e" 2>"$tmp/err"; then
  echo "damaged executable: expected a failure"; exit 1
fi
grep -q "checksum mismatch" "$tmp/err"

# run --compile-cache: a miss stores the entry, the next run hits it, with the same outputs
f=$hlo/backends__cpu__lite_aot__tests__hlos__dot.hlo
"$bin" run "$f" --fill random:1 --output-dir "$tmp/c1" --compile-cache >"$tmp/o1"
"$bin" run "$f" --fill random:1 --output-dir "$tmp/c2" --compile-cache >"$tmp/o2"
grep -q "compilation cache miss" "$tmp/o1"
grep -q "compilation cache hit" "$tmp/o2"
cmp "$tmp/c1/out_0.npy" "$tmp/c2/out_0.npy"
"$bin" run "$f" --fill random:1 --output-dir "$tmp/c3" --compile-cache -O1 | grep -q "cache miss"
# another build of the same version (a copy whose GNU build ID differs by one byte) misses, so an
# executable compiled by an older build of the compiler is never loaded by a newer one
if command -v readelf >/dev/null && id=$(readelf -n "$bin" | awk '/Build ID:/ {print $3}') && [[ -n $id ]]; then
  python3 - "$bin" "$tmp/other-build" "$id" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
idb = bytes.fromhex(sys.argv[3])
assert data.count(idb) == 1, "the build ID occurs once"
data[data.index(idb)] ^= 0xFF
open(sys.argv[2], "wb").write(data)
PY
  chmod +x "$tmp/other-build"
  export OPTITPU_CACHE_DIR=$tmp/shared-cache
  "$bin" run "$f" --fill random:1 --output-dir "$tmp/c4" --compile-cache | grep -q "cache miss"
  "$tmp/other-build" run "$f" --fill random:1 --output-dir "$tmp/c4" --compile-cache | grep -q "cache miss"
  "$bin" run "$f" --fill random:1 --output-dir "$tmp/c4" --compile-cache | grep -q "cache hit"
  unset OPTITPU_CACHE_DIR
fi
dir=$XDG_CACHE_HOME/optitpu/executables
"$bin" cache ls >"$tmp/ls"
grep -q "^2 entries, [0-9]* bytes of 1073741824, in $dir\$" "$tmp/ls"
[[ $(grep -c '^[0-9a-f]\{64\} ' "$tmp/ls") == 2 ]]
"$bin" cache verify | grep -q "^2 good, 0 removed"
OPTITPU_CACHE_MAX_BYTES=1K "$bin" cache ls | grep -q "bytes of 1024,"

# a damaged entry: verify removes it with a warning and exits 1; a run rebuilds it
entry=$(ls "$dir"/*.otx | head -1)
printf '\x00\x01' | dd of="$entry" bs=1 seek=200 conv=notrunc 2>/dev/null
if "$bin" cache verify >"$tmp/v" 2>"$tmp/err"; then echo "verify: expected exit 1"; exit 1; fi
grep -q "^1 good, 1 removed" "$tmp/v"
grep -q "removing unusable entry" "$tmp/err"
[[ ! -e $entry ]]
"$bin" cache verify | grep -q "^1 good, 0 removed"

# optitpu train: the second start loads every executable from the cache and ends with the same
# parameters, bit for bit, as the first and as a run without the cache
"$bin" cache clear >/dev/null
tr() { "$bin" train --steps 6 --eval-every 3 --json --quiet --out "$tmp/tr" --ckpt-dir none "$@"; }
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
tr >"$tmp/t1.json"
tr >"$tmp/t2.json"
tr --no-compile-cache >"$tmp/t3.json"
[[ $(field "$tmp/t1.json" compile_cache_hits) == 0 && $(field "$tmp/t1.json" compile_cache_misses) == 3 ]]
[[ $(field "$tmp/t2.json" compile_cache_hits) == 3 && $(field "$tmp/t2.json" compile_cache_misses) == 0 ]]
[[ $(field "$tmp/t3.json" compile_cache_hits) == 0 && $(field "$tmp/t3.json" compile_cache_misses) == 0 ]]
sha=$(field "$tmp/t1.json" params_sha256)
[[ $(field "$tmp/t2.json" params_sha256) == "$sha" && $(field "$tmp/t3.json" params_sha256) == "$sha" ]]
"$bin" cache ls | grep -q "^3 entries"
"$bin" cache clear >/dev/null
f=$hlo/backends__cpu__lite_aot__tests__hlos__dot.hlo
"$bin" run "$f" --fill random:1 --output-dir "$tmp/c1" --compile-cache >/dev/null

# --dir, clear, and usage errors
mkdir -p "$tmp/other"
"$bin" cache ls --dir "$tmp/other" | grep -q "^0 entries"
"$bin" cache clear | grep -q "^1 removed from $dir\$"
"$bin" cache ls | grep -q "^0 entries"
"$bin" help cache | grep -q "usage: optitpu cache ls|verify|clear"
set +e
"$bin" cache frobnicate 2>/dev/null; rc=$?
set -e
[[ $rc == 2 ]]
echo "cache CLI: ok"
