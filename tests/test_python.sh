#!/usr/bin/env bash
# The Python package (python/, docs/python.md): a virtual environment in the build tree, the
# package built against this tree's liboptitpu.so and installed into it with its test
# dependencies (numpy, pytest, ml_dtypes, safetensors from the package index; jax CPU too unless
# OPTITPU_PY_JAX=0), then its pytest suite. Tests whose library is not installed (torch, jax) are
# reported by pytest as skipped. Skipped as a whole (77) only when no venv or pip can be set up
# here, or in a sanitizer build (its instrumented library cannot load into an uninstrumented
# interpreter without preloading the sanitizer runtime; .ci/run leaves label `python` out there).
# Usage: test_python.sh OPTITPU_BINARY SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$2
build=$(cd "$3" && pwd)
san=$(sed -n 's/^OT_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
if [[ -n $san ]]; then
  echo "skipped: a $san-sanitized liboptitpu does not load into an uninstrumented python"
  exit 77
fi
py=${PYTHON:-python3}
command -v "$py" >/dev/null || { echo "skipped: python3 is missing"; exit 77; }
venv=$build/python-venv
if [[ ! -x $venv/bin/python ]] && ! "$py" -m venv "$venv" >"$build/python-venv.log" 2>&1; then
  rm -rf "$venv"
  echo "skipped: '$py -m venv' fails here (python3-venv missing?):"; cat "$build/python-venv.log"
  exit 77
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
# the dependencies once per venv (a stamp marks a complete install)
deps=("setuptools>=64" wheel numpy pytest ml_dtypes safetensors)
[[ ${OPTITPU_PY_JAX:-1} == 0 ]] || deps+=("jax[cpu]")
stamp=$venv/.deps-$(echo "${deps[*]}" | cksum | cut -d' ' -f1)
if [[ ! -f $stamp ]]; then
  if ! "${pip[@]}" install "${deps[@]}" >"$build/python-deps.log" 2>&1; then
    echo "skipped: pip cannot install the test dependencies (${deps[*]}):"
    tail -5 "$build/python-deps.log"
    exit 77
  fi
  touch "$stamp"
fi
# built from a copy, so that the source tree gets no build/ or egg-info of setuptools
pkg=$build/python-pkg
rm -rf "$pkg"
cp -r "$src/python" "$pkg"
rm -rf "$pkg/build" "$pkg"/*.egg-info
OPTITPU_BUILD_DIR=$build "${pip[@]}" install --no-build-isolation --no-deps --force-reinstall "$pkg"
cd "$build"
export OPTITPU_SOURCE_DIR=$(cd "$src" && pwd) PYTHONDONTWRITEBYTECODE=1 XDG_CACHE_HOME=${XDG_CACHE_HOME:-$build/test-cache}
exec "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$pkg/tests"
