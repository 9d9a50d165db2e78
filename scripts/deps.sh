#!/usr/bin/env bash
# Installs the Debian packages optitpu needs to build and to run every test, only those missing.
# Idempotent; quick (one dpkg query per package, apt-get update only when something is missing)
# when everything is present. Runs apt-get as root, or through sudo.
#   scripts/deps.sh            build + test dependencies: what every test needs that a package
#                              provides (Open MPI for the MPI tests, iproute2 for the two-host
#                              test, python3 for the CLI tests, python3-venv and python3-dev for
#                              the Python package's test, chrony for test_clock_chrony; oneDNN
#                              for the fast convolution's kernels, optional to the build; SLEEF
#                              for the vector math of generated code and the reference)
#   scripts/deps.sh --ci       also the tools CI uses (clang for fuzzers, clang-format)
# chrony is the one exception to "install what is missing": on a machine that already has another
# NTP daemon (systemd-timesyncd, ntp, ntpsec, openntpd), installing chrony would replace that
# daemon (the packages conflict), so outside CI it is left out with a message and test_clock_chrony
# reports itself skipped there. The tests run chronyd themselves (foreground, -x: never touching
# the clock); they need only its binary.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev libdnnl-dev libsleef-dev libssl-dev libjansson-dev
      libopenmpi-dev openmpi-bin iproute2 python3 python3-venv python3-dev util-linux)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
if [[ "${1:-}" == "--ci" ]]; then
  pkgs+=(clang clang-format libclang-rt-14-dev chrony)
elif ! installed chrony; then
  other=""
  for d in systemd-timesyncd ntp ntpsec openntpd; do installed "$d" && other=$d; done
  if [[ -n $other ]]; then
    echo "deps: not installing chrony: it would replace $other, this machine's time daemon;" \
         "test_clock_chrony will be reported skipped (apt-get install chrony to run it)" >&2
  else
    pkgs+=(chrony)
  fi
fi
missing=()
for p in "${pkgs[@]}"; do
  installed "$p" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
echo "deps: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null; then
    if [[ "${missing[*]}" == chrony ]]; then # only a test's peer: that test reports itself skipped
      echo "deps: no root or sudo to install chrony; test_clock_chrony will be reported skipped" >&2
      exit 0
    fi
    echo "deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
