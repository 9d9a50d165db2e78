#!/usr/bin/env bash
# optitpu compile: kernel count, arena and lower bound, --stats (text and JSON), dumps, -o, and
# clear errors for a bad file, an unknown pass and an arena over its limit.
set -euo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/adam.hlo" <<'HLO'
HloModule adam, input_output_alias={ {0}: (0, {}, may-alias), {1}: (2, {}, may-alias), {2}: (3, {}, may-alias) }

ENTRY main {
  p = f32[1024] parameter(0)
  g = f32[1024] parameter(1)
  m = f32[1024] parameter(2)
  v = f32[1024] parameter(3)
  lr = f32[] parameter(4)
  b1 = f32[] constant(0.9)
  b1b = f32[1024] broadcast(b1), dimensions={}
  c1 = f32[] constant(0.1)
  c1b = f32[1024] broadcast(c1), dimensions={}
  b2 = f32[] constant(0.999)
  b2b = f32[1024] broadcast(b2), dimensions={}
  c2 = f32[] constant(0.001)
  c2b = f32[1024] broadcast(c2), dimensions={}
  eps = f32[] constant(1e-08)
  epsb = f32[1024] broadcast(eps), dimensions={}
  mb = f32[1024] multiply(b1b, m)
  gb = f32[1024] multiply(c1b, g)
  m2 = f32[1024] add(mb, gb)
  gg = f32[1024] multiply(g, g)
  vb = f32[1024] multiply(b2b, v)
  ggb = f32[1024] multiply(c2b, gg)
  v2 = f32[1024] add(vb, ggb)
  sq = f32[1024] sqrt(v2)
  den = f32[1024] add(sq, epsb)
  q = f32[1024] divide(m2, den)
  lrb = f32[1024] broadcast(lr), dimensions={}
  u = f32[1024] multiply(lrb, q)
  p2 = f32[1024] subtract(p, u)
  ROOT out = (f32[1024], f32[1024], f32[1024]) tuple(p2, m2, v2)
}
HLO
out=$("$bin" compile "$work/adam.hlo")
grep -q "^kernels      1 (1 fused)" <<<"$out"
grep -q "^arena        0 bytes (lower bound: peak of live bytes 0)" <<<"$out"
grep -q "^fingerprint  [0-9a-f]\{64\}$" <<<"$out"
# -O0: no fusion, temporaries in the arena beside the lower bound
out=$("$bin" compile "$work/adam.hlo" -O0 --stats)
grep -q "^dce " <<<"$out"
grep -q "^schedule " <<<"$out"
grep -q "^assign-buffers " <<<"$out"
grep -q "(0 fused)" <<<"$out"
grep -q "lower bound: peak of live bytes [1-9]" <<<"$out"
# JSON with stats
json=$("$bin" compile "$work/adam.hlo" --stats --json)
python3 - "$json" <<'PY' 2>/dev/null || grep -q '"kernels":1' <<<"$json"
import json, sys
d = json.loads(sys.argv[1])
assert d["kernels"] == 1 and d["fusions"] == 1, d
assert d["arena_bytes"] == 0 and len(d["fingerprint"]) == 64, d
assert [p["pass"] for p in d["passes"]][-3:] == ["fuse", "schedule", "assign-buffers"], d
PY
# the native-code stage (--stats): compiled into a private cache, then loaded from it; a module
# of small fusions gets none by default; --native off builds none
export OPTITPU_CACHE_DIR=$work/cache
unset OPTITPU_CODEGEN OPTITPU_CODEGEN_MIN_ELEMENTS
out=$("$bin" compile "$work/adam.hlo" --native on --stats)
grep -q "^native code  1 kernel in 1 unit (1 compiled, 0 from cache), [0-9.]* s, cc cpu " <<<"$out"
out=$("$bin" compile "$work/adam.hlo" --native on --stats)
grep -q "^native code  1 kernel in 1 unit (0 compiled, 1 from cache), " <<<"$out"
out=$("$bin" compile "$work/adam.hlo" --stats)
grep -q "^native code  none, " <<<"$out"
out=$("$bin" compile "$work/adam.hlo" --native off --stats)
grep -q "^native code  none, " <<<"$out"
json=$("$bin" compile "$work/adam.hlo" --native on --stats --json)
grep -q '"native": *{[^}]*"units_cached": *1' <<<"$json"
if "$bin" compile "$work/adam.hlo" --native sometimes 2>/dev/null; then echo "bad --native accepted"; exit 1; fi
# dumps after one pass, and -o
"$bin" compile "$work/adam.hlo" --dump-dir "$work/dump" --dump-after fuse -o "$work/adam.otx" >/dev/null
# -o into something that is not a regular file writes into it and leaves it what it was
"$bin" compile "$work/adam.hlo" -o /dev/null >/dev/null
[[ -c /dev/null ]] || { echo "compile -o /dev/null replaced the device"; exit 1; }
ls "$work/dump" | grep -q "fuse.hlo"
ls "$work/dump" | grep -q "fuse.dot"
[[ $(ls "$work/dump" | wc -l) -eq 2 ]]
grep -q "fusion(" "$work/dump/"*.fuse.hlo
head -c 8 "$work/adam.otx" | grep -q OPTITPUX
# errors
err=$work/err
if "$bin" compile "$work/missing.hlo" 2>"$err"; then echo "missing file accepted"; exit 1; fi
grep -q "missing.hlo" "$err"
if "$bin" compile "$work/adam.hlo" --passes cse,bogus 2>"$err"; then echo "bad pass accepted"; exit 1; fi
grep -q "unknown pass 'bogus'" "$err"
if "$bin" compile "$work/adam.hlo" -O0 --arena-limit 1K 2>"$err"; then echo "limit ignored"; exit 1; fi
grep -q "OUT_OF_MEMORY" "$err"
grep -q "peak of live bytes" "$err"
printf 'HloModule bad\nENTRY e {\n  ROOT x = f32[2] add(y, y)\n}\n' >"$work/bad.hlo"
if "$bin" compile "$work/bad.hlo" 2>"$err"; then echo "bad module accepted"; exit 1; fi
grep -q "bad.hlo:3" "$err"
if "$bin" compile 2>"$err"; then echo "no file accepted"; exit 1; fi
# bench compile --sizes: the sizes given, compared as pairs, as JSON; bad lists refused
"$bin" bench compile --sizes 2000,4000,3000 --reps 1 --json >"$work/bc.json"
python3 - "$work/bc.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sizes = [r["case"].split()[0] for r in rows if " instrs -O2 (" in r["case"]]
assert len(sizes) == 3 and all(int(n) >= 2000 for n in sizes), sizes
sc = [r for r in rows if r["case"] == "scaling 2k -> 4k"]
assert len(sc) == 1 and sc[0]["metric"] == "time(2N)/time(N)" and sc[0]["baseline_value"] == 2.0, sc
pr = [r for r in rows if r["case"] == "paired runs 2k -> 4k"]
assert len(pr) == 1 and pr[0]["metric"] == "median run ratio" and pr[0]["value"] > 0, pr
first = [r for r in rows if r["case"].endswith("instrs -O2 first run")]
assert len(first) == 3 and all(r["value"] > 0 for r in first), first
assert not [r for r in rows if "-> 3k" in r["case"]], rows  # an unpaired size: no ratio
PY
for bad in 1999 2000,x 2000,,4000 "" 1,2,3,4,5,6,7,8,9 4000001; do
  if "$bin" bench compile --sizes "$bad" 2>"$err"; then echo "--sizes '$bad' accepted"; exit 1; fi
  grep -q -- "--sizes needs 1 to 8 comma-separated numbers" "$err"
done
if "$bin" bench compile --sizes 2>"$err"; then echo "--sizes without a value accepted"; exit 1; fi
# bench compile --shape all: every graph-shape family compiled at both sizes, rows named after it
"$bin" bench compile --shape all --sizes 2000,4000 --reps 1 --json >"$work/bs.json"
python3 - "$work/bs.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
fams = ["residual", "braid", "fanout", "fanin", "nested", "bcast_reduce", "islands", "wide_tuple",
        "many_params", "dot_sandwich", "random", "random_ops", "fori_unrolled"]
for f in fams:
    runs = [r for r in rows if r["case"].startswith(f + " ") and " instrs -O2 (" in r["case"]]
    assert len(runs) == 2 and all(r["value"] > 0 for r in runs), (f, runs)
    sc = [r for r in rows if r["case"] == f + " scaling 2k -> 4k"]
    assert len(sc) == 1 and sc[0]["value"] > 0, (f, sc)
assert len({r["case"].split()[0] for r in rows}) == len(fams), rows
PY
if "$bin" bench compile --shape residual,nope 2>"$err"; then echo "--shape nope accepted"; exit 1; fi
grep -q "unknown family 'nope' (families: residual, braid" "$err"
echo "compile cli ok"
