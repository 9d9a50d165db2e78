#!/usr/bin/env bash
# Formats the repository's C sources with clang-format (the root .clang-format).
#   scripts/format.sh              reformat every tracked C file in place
#   scripts/format.sh --check      list files that differ and exit 1 (nothing is changed)
#   scripts/format.sh [--check] PATH...   only those files or directories
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [[ "${1:-}" == "--check" ]]; then
  check=1
  shift
fi
command -v clang-format >/dev/null || { echo "format: clang-format is missing (apt-get install clang-format)" >&2; exit 1; }
mapfile -t files < <(git ls-files -- "${@:-.}" | grep -E '\.(c|h)$' || true)
[[ ${#files[@]} -gt 0 ]] || { echo "format: no C files"; exit 0; }
if [[ $check -eq 0 ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "needs formatting: $f"
    bad=1
  fi
done
[[ $bad -eq 0 ]] && echo "format: ${#files[@]} files clean"
exit $bad
