#!/usr/bin/env bash
# Installs the Debian packages optitpu needs, only those missing. Idempotent; quick (one dpkg
# query) when everything is present. Runs apt-get as root, or through sudo.
#   scripts/deps.sh            build + test dependencies
#   scripts/deps.sh --ci       also the tools CI uses (clang for fuzzers, chrony, Open MPI)
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev libssl-dev libjansson-dev
      libopenmpi-dev openmpi-bin iproute2)
if [[ "${1:-}" == "--ci" ]]; then
  pkgs+=(clang clang-format libclang-rt-14-dev chrony python3)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
echo "deps: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
