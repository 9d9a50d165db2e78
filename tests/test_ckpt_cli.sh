#!/usr/bin/env bash
# optitpu ckpt ls|verify|inspect|export over the committed checkpoint fixture (tests/data/ckpt,
# written by an earlier build: the format must stay readable) and the Python safetensors
# fixtures; a flipped byte and a deleted file make verify exit 1 naming each bad file.
# Usage: test_ckpt_cli.sh OPTITPU_BINARY SOURCE_DIR BUILD_DIR
set -uo pipefail
bin=$1
src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/optitpu-ckpt.XXXXXX")
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

# expect NAME WANT_RC PATTERN_IN_OUTPUT -- ARGS...  (pattern: grep -E over stdout+stderr)
expect() {
  local name=$1 want=$2 pat=$3
  shift 4
  "$bin" "$@" >"$work/out" 2>"$work/err"
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

root=$work/ckpt
mkdir -p "$root"
cp -r "$src/tests/data/ckpt/step_00000100" "$root/"
step=$root/step_00000100

expect help 0 "usage: optitpu ckpt ls DIR" -- help ckpt
expect no_sub 2 "missing subcommand" -- ckpt
expect bad_sub 2 "unknown subcommand 'frob'" -- ckpt frob
expect ls 0 "^100 +committed +3 " -- ckpt ls "$root"
expect ls_json 0 '"step":100,"state":"committed"' -- ckpt ls "$root" --json
expect ls_missing 1 "no such directory" -- ckpt ls "$work/nope"
expect verify_step 0 "^ok .*step 100, 3 files" -- ckpt verify "$step"
expect verify_root 0 "^ok .*step_00000100" -- ckpt verify "$root"
expect inspect_step 0 "p_bf16 +BF16 +\[5,2\]" -- ckpt inspect "$step"
expect inspect_step_manifest 0 "membership epoch 7" -- ckpt inspect "$step"
expect inspect_json 0 '"sha256":"[0-9a-f]{64}"' -- ckpt inspect "$step" --json
expect inspect_py 0 "t_f16 +F16 +\[6\]" -- ckpt inspect "$src/tests/data/safetensors/py/all_dtypes.safetensors"
expect inspect_py_meta 0 "metadata format = np" -- ckpt inspect "$src/tests/data/safetensors/py/all_dtypes.safetensors"
expect inspect_bad 1 "header length .* runs past the end" -- ckpt inspect "$src/tests/data/safetensors/reject/header_past_end.safetensors"
expect export_all 0 "^wrote " -- ckpt export "$step" "$work/all.safetensors"
expect export_inspect 0 "optim.1/v +F32" -- ckpt inspect "$work/all.safetensors"
expect export_role 0 "^wrote " -- ckpt export "$step" "$work/model.safetensors" --role model
expect export_role_inspect 0 "^  +p_f32 +F32" -- ckpt inspect "$work/model.safetensors"
expect export_no_role 1 "no role 'nope'" -- ckpt export "$step" "$work/x.safetensors" --role nope

# a flipped byte in one file and a deleted other file: both named, exit 1
printf 'Z' | dd of="$step/model.safetensors" bs=1 seek=400 conv=notrunc 2>/dev/null
rm "$step/optim-00001-of-00002.safetensors"
expect verify_bad 1 "BAD .*model.safetensors: .*SHA-256 does not match" -- ckpt verify "$step"
expect verify_bad_names_both 1 "BAD .*optim-00001-of-00002.safetensors: .*missing" -- ckpt verify "$root"
expect inspect_refuses_corrupt 1 "CORRUPT_DATA" -- ckpt inspect "$step"
expect export_refuses_corrupt 1 "CORRUPT_DATA" -- ckpt export "$step" "$work/y.safetensors"
mkdir "$root/step_00000200.tmp"
expect verify_skips_tmp 1 "^skip .*step_00000200.tmp" -- ckpt verify "$root"
expect ls_shows_partial 0 "^200 +partial" -- ckpt ls "$root"

# control characters in tensor names and metadata are printed escaped, never raw
esc=$work/esc.safetensors
hdr='{"__metadata__":{"k\u0007":"v\u001b[2J"},"a\u001b[31mb\nc\u0085\\d":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
while (( (${#hdr} + 0) % 8 )); do hdr="$hdr "; done
printf -v len8 '\\x%02x\\x%02x\\x00\\x00\\x00\\x00\\x00\\x00' $(( ${#hdr} & 255 )) $(( ${#hdr} >> 8 ))
{ printf "$len8"; printf '%s' "$hdr"; printf '\x00\x00\x80\x3f'; } >"$esc"
expect inspect_escapes_name 0 'a\\x1b\[31mb\\nc\\u0085\\\\d +F32' -- ckpt inspect "$esc"
expect inspect_escapes_meta 0 'metadata k\\x07 = v\\x1b\[2J' -- ckpt inspect "$esc"
if LC_ALL=C grep -q $'\x1b' "$work/all" || LC_ALL=C grep -q $'\x07' "$work/all"; then
  echo "FAIL inspect_no_raw_controls"; failed=$((failed + 1))
else
  echo "ok   inspect_no_raw_controls"; passed=$((passed + 1))
fi

# the benchmark runs end to end on a small size and prints the common JSON rows
expect bench_json 0 '^\{"bench": "ckpt", "case": "restore\+verify 16 MiB.*"ratio"' -- \
  bench ckpt --size 16M --reps 1 --json --dir "$work"
expect bench_usage 2 "at least 16M" -- bench ckpt --size 1M

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
