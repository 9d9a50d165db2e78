#!/bin/sh
# Compares `optitpu hlo print` (canonical, --short and --no-metadata, each with and without
# --split-input-file) of two optitpu binaries over HLO files: stdout, stderr and exit status must
# be byte-identical. For refactors of the HLO reader and printer.
#   usage: scripts/hlo_print_compare.sh OLD_OPTITPU NEW_OPTITPU FILE_OR_DIR...
# Prints each differing file and mode; exits 1 if any differ.
set -u
old=$1 new=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0 bad=0
for f in $(find "$@" -type f -name '*.hlo' | sort); do
    n=$((n + 1))
    for mode in "" "--short" "--no-metadata" "--split-input-file" "--short --split-input-file"; do
        # shellcheck disable=SC2086
        "$old" hlo print "$f" $mode >"$tmp/o.out" 2>"$tmp/o.err"
        echo "rc=$?" >>"$tmp/o.err"
        # shellcheck disable=SC2086
        "$new" hlo print "$f" $mode >"$tmp/n.out" 2>"$tmp/n.err"
        echo "rc=$?" >>"$tmp/n.err"
        if ! cmp -s "$tmp/o.out" "$tmp/n.out" || ! cmp -s "$tmp/o.err" "$tmp/n.err"; then
            echo "DIFFER: $f [$mode]"
            bad=$((bad + 1))
        fi
    done
done
echo "$n files, $bad differing runs"
[ "$bad" -eq 0 ]
