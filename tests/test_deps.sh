#!/usr/bin/env bash
# scripts/deps.sh (the test command's installer) against a made-up machine: fake dpkg-query and
# apt-get first in PATH, nothing installed for real. Outside CI it installs what the tests need
# too (python3, iproute2, chrony), chrony left out with a message where another time daemon is
# installed (installing it would replace that daemon), `--ci` adds the CI tools and chrony
# always; nothing is installed, and apt-get update not run, when everything is present.
# Usage: test_deps.sh OPTITPU_BINARY SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/optitpu-deps.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
for t in bash grep; do ln -sf "$(command -v "$t")" "$work/bin/$t"; done
# dpkg-query -W -f=... PKG: "installed" unless PKG is listed in $work/absent
cat >"$work/bin/dpkg-query" <<'SH'
#!/bin/bash
for a in "$@"; do pkg=$a; done
grep -qx "$pkg" "$FAKE_DIR/absent" && exit 1
echo -n "install ok installed"
SH
cat >"$work/bin/apt-get" <<'SH'
#!/bin/bash
echo "apt-get $*" >>"$FAKE_DIR/log"
SH
printf '#!/bin/bash\necho 0\n' >"$work/bin/id" # root: no sudo
chmod +x "$work/bin/"*
passed=0 failed=0
# run NAME "ABSENT PACKAGES" ARGS... ; then check the log with want/never
run() {
  local name=$1 absent=$2
  shift 2
  printf '%s\n' $absent >"$work/absent"
  : >"$work/log"
  FAKE_DIR=$work PATH="$work/bin" bash "$src/scripts/deps.sh" "$@" >"$work/out" 2>&1
  echo "exit $?" >>"$work/out"
  cur=$name
}
want() { grep -Eq -- "$2" "$work/$1" || { echo "FAIL $cur: $1 lacks /$2/"; sed 's/^/  | /' "$work/log" "$work/out"; failed=$((failed + 1)); return 1; }; }
never() { ! grep -Eq -- "$2" "$work/$1" || { echo "FAIL $cur: $1 has /$2/"; sed 's/^/  | /' "$work/log" "$work/out"; failed=$((failed + 1)); return 1; }; }
ok() { echo "ok   $cur"; passed=$((passed + 1)); }

run all_present ""
never log "apt-get" && want out "exit 0" && ok
run test_tools_outside_ci "chrony python3 iproute2 systemd-timesyncd ntp ntpsec openntpd"
want log "apt-get update" && want log "install .*chrony" && want log "install .*python3" &&
  want log "install .*iproute2" && never log "clang" && want out "exit 0" && ok
run chrony_beside_timesyncd "chrony ntp ntpsec openntpd"
never log "chrony" && want out "would replace systemd-timesyncd" && never log "apt-get" && ok
run ci_tools "chrony clang clang-format ntp ntpsec openntpd" --ci
want log "install .*chrony" && want log "install .*clang-format" && want out "exit 0" && ok
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
