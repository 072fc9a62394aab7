#!/usr/bin/env bash
# tests/random_shapes_test.sh — bench/random_shapes.py as a test: 5 shapes of a fixed seed through
# mkmodel, collect, analyze, calibrate --quick and simulate; fails when one fails (the script's exit
# status) or when fewer than 3 went the whole way. Needs MP_MOEPLAN (run through meson test).
set -uo pipefail
B=${MP_MOEPLAN:?MP_MOEPLAN is not set (run through meson test)}
src=${MP_SOURCE_ROOT:?MP_SOURCE_ROOT is not set (run through meson test)}
out=$(mktemp -d /tmp/mp_random_shapes_XXXXXX) || exit 1
trap 'rm -rf "$out"' EXIT
python3 "$src/bench/random_shapes.py" "$B" "$out" 5 3 >"$out/stdout" 2>&1
rc=$?
cat "$out/stdout"
[ "$rc" = 0 ] || { echo "random_shapes: a shape failed (exit $rc)" >&2; exit 1; }
ok=$(grep -c '^s[0-9]* ok:' "$out/stdout")
[ "$ok" -ge 3 ] || { echo "random_shapes: $ok of 5 shapes went the whole way, expected at least 3" >&2; exit 1; }
