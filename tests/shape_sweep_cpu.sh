#!/usr/bin/env bash
# tests/shape_sweep_cpu.sh — bench/shape_sweep.sh as a test: small models of shapes no preset has
# (top-1, top-8, 12 and 40 experts, FFN widths of 128 and 320, Q8_0, BF16, Q5_K_M, Q3_K_M) through mkmodel,
# collect and analyze (every route's path recorded), and calibrate; with a CUDA device also plan and
# the adaptive tier. Fails when any row fails. Needs MP_MOEPLAN (run through meson test).
set -uo pipefail
B=${MP_MOEPLAN:?MP_MOEPLAN is not set (run through meson test)}
src=${MP_SOURCE_ROOT:?MP_SOURCE_ROOT is not set (run through meson test)}
out=$(mktemp -d /tmp/mp_shape_sweep_XXXXXX) || exit 1
trap 'rm -rf "$out"' EXIT
MOEPLAN=$B OUT=$out TOKENS=8 bash "$src/bench/shape_sweep.sh" >"$out/stdout" 2>"$out/stderr"
rc=$?
cat "$out/stdout"
if [ "$rc" != 0 ] || grep -q 'failed' "$out/shape-sweep.md"; then
    echo "shape_sweep: a row failed (exit $rc):" >&2
    tail -n 5 "$out/stderr" >&2
    for f in "$out"/logs/*.log; do
        if grep -qi 'error' "$f"; then echo "--- $f" >&2; tail -n 3 "$f" >&2; fi
    done
    exit 1
fi
rows=$(grep -c '^| `' "$out/shape-sweep.md")
[ "$rows" -ge 10 ] || { echo "shape_sweep: $rows rows, expected 10" >&2; exit 1; }
[ "$(grep -c '^| `[^|]*| ok |' "$out/shape-sweep.md")" = "$rows" ] ||
    { echo "shape_sweep: not every shape collected and analyzed" >&2; exit 1; }
