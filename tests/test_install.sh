#!/usr/bin/env bash
# Installs the build into a temporary prefix with `cmake --install`, then builds a small consumer
# program against it four ways (pkg-config shared and static, find_package shared and static) and
# runs each. Usage: test_install.sh OPTITPU_BINARY SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$2
build=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/optitpu-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "FAIL: $*" >&2; exit 1; }

# A sanitizer build installs instrumented libraries; the consumer needs the same runtime.
san=$(sed -n 's/^OT_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
case "$san" in
  address) sanflags="-fsanitize=address,undefined" ;;
  thread) sanflags="-fsanitize=thread" ;;
  *) sanflags="" ;;
esac
# a fuzzer build instruments the library with coverage hooks, ASan and UBSan
if grep -q '^OT_BUILD_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  sanflags="-fsanitize=fuzzer-no-link,address,undefined"
fi
cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
cc=${cc:-cc}

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
libdir=$(dirname "$(find "$prefix" -name liboptitpu.a | head -1)")
[[ -f $prefix/include/optitpu/optitpu.h ]] || fail "headers not installed"
[[ -x $prefix/bin/optitpu ]] || fail "optitpu not installed"
[[ -f $libdir/pkgconfig/optitpu.pc ]] || fail "optitpu.pc not installed"
"$prefix/bin/optitpu" --version | grep "^optitpu [0-9]" >/dev/null || fail "installed optitpu --version"
# only OT_API symbols are exported from the shared library
nm -D --defined-only "$libdir/liboptitpu.so" | awk '{print $3}' | grep -v '^ot_' | grep -v '^_' \
  && fail "liboptitpu.so exports symbols without the ot_ prefix"
nm -D --defined-only "$libdir/liboptitpu.so" | grep ' ot_npy_parse$' >/dev/null || fail "ot_npy_parse not exported"

export PKG_CONFIG_PATH=$libdir/pkgconfig
pkg-config --exists optitpu || fail "pkg-config cannot find optitpu"
[[ $(pkg-config --modversion optitpu) == $("$prefix/bin/optitpu" --version | cut -d' ' -f2) ]] \
  || fail "pkg-config version differs from optitpu --version"

# pkg-config, shared
# shellcheck disable=SC2046,SC2086
$cc $sanflags -o "$work/pc_shared" "$src/tests/install/consumer.c" $(pkg-config --cflags --libs optitpu) \
  -Wl,-rpath,"$libdir" || fail "pkg-config shared build"
"$work/pc_shared" || fail "pkg-config shared consumer"
readelf -d "$work/pc_shared" | grep 'liboptitpu.so' >/dev/null || fail "pc_shared does not use liboptitpu.so"

# pkg-config, static: the archive by name, its dependencies from --static
# shellcheck disable=SC2046,SC2086
$cc $sanflags -o "$work/pc_static" "$src/tests/install/consumer.c" $(pkg-config --cflags optitpu) \
  $(pkg-config --static --libs optitpu | sed 's/-loptitpu\b/-l:liboptitpu.a/') || fail "pkg-config static build"
"$work/pc_static" || fail "pkg-config static consumer"
readelf -d "$work/pc_static" | grep 'liboptitpu.so' >/dev/null && fail "pc_static links liboptitpu.so"

# find_package, shared and static
CFLAGS="$sanflags" LDFLAGS="$sanflags" CC=$cc cmake -S "$src/tests/install" -B "$work/cm" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$work/cm.log" 2>&1 \
  || { cat "$work/cm.log"; fail "find_package configure"; }
cmake --build "$work/cm" >"$work/cmb.log" 2>&1 || { cat "$work/cmb.log"; fail "find_package build"; }
"$work/cm/consumer_shared" || fail "find_package shared consumer"
"$work/cm/consumer_static" || fail "find_package static consumer"
readelf -d "$work/cm/consumer_shared" | grep 'liboptitpu.so' >/dev/null || fail "consumer_shared does not use liboptitpu.so"
readelf -d "$work/cm/consumer_static" | grep 'liboptitpu.so' >/dev/null && fail "consumer_static links liboptitpu.so"
echo "install test: 4 consumers built and ran (pkg-config and find_package, shared and static)"
