#!/usr/bin/env bash
# bench/check_analyze_same.sh — a performance change must not change a result: runs a reference
# `moeplan analyze` binary and the current one on the same trace and diffs the report directories
# (every CSV, the JSON summary, the SVGs and the HTML) byte for byte. A check for optimization
# work, not a unit test: it needs a reference binary built from the commit before the change.
#
# usage: bench/check_analyze_same.sh REF_MOEPLAN TRACE.db [MOEPLAN] [extra analyze flags ...]
#        (MOEPLAN defaults to build/cli/moeplan). Exit 0 when identical, 1 with the diff otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
ref=$1 trace=$2
new=${3:-build/cli/moeplan}
shift $(($# < 3 ? $# : 3))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$ref" analyze "$trace" "$@" --out "$work/ref" >/dev/null
"$new" analyze "$trace" "$@" --out "$work/new" >/dev/null
if diff -r "$work/ref" "$work/new"; then
    echo "identical: $(ls "$work/new" | wc -l) report files ($trace $*)"
else
    echo "DIFFERENT reports ($trace $*)" >&2
    exit 1
fi
