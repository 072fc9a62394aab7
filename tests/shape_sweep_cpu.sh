#!/usr/bin/env bash
# tests/shape_sweep_cpu.sh — bench/shape_sweep.sh as a test: small models of shapes no preset has
# (top-1, top-8, 12 and 40 experts, FFN widths of 128 and 320, Q8_0, BF16, Q5_K_M, Q3_K_M) through mkmodel,
# collect and analyze (every route's path recorded), and calibrate; with a CUDA device also plan and
# the adaptive tier. Then a gpt-oss row (biases, sinks, a window of 8 that slides within the prompts,
# YaRN, MXFP4 experts and Q8_0 at a hidden size of 288) in a sweep of its own: bench/shape_sweep.sh's
# default list stays what the GPU machine's shape-sweep stage (scripts/gpu.sh) has measured. Fails
# when any row fails. Needs MP_MOEPLAN (run through meson test).
set -uo pipefail
B=${MP_MOEPLAN:?MP_MOEPLAN is not set (run through meson test)}
src=${MP_SOURCE_ROOT:?MP_SOURCE_ROOT is not set (run through meson test)}
out=$(mktemp -d /tmp/mp_shape_sweep_XXXXXX) || exit 1
trap 'rm -rf "$out"' EXIT

# sweep DIR ROWS [SHAPES]: bench/shape_sweep.sh into DIR (its default shapes unless SHAPES); every
# one of its ROWS rows collected and analyzed, none failed
sweep() {
    local dir=$1 want=$2
    SHAPES=${3:-} MOEPLAN="$B" OUT="$dir" TOKENS=8 bash "$src/bench/shape_sweep.sh" >"$dir.stdout" 2>"$dir.stderr"
    local rc=$?
    cat "$dir.stdout"
    if [ "$rc" != 0 ] || grep -q 'failed' "$dir/shape-sweep.md"; then
        echo "shape_sweep: a row failed (exit $rc):" >&2
        tail -n 5 "$dir.stderr" >&2
        for f in "$dir"/logs/*.log; do
            if grep -qi 'error' "$f"; then echo "--- $f" >&2; tail -n 3 "$f" >&2; fi
        done
        exit 1
    fi
    local rows
    rows=$(grep -c '^| `' "$dir/shape-sweep.md")
    [ "$rows" -ge "$want" ] || { echo "shape_sweep: $rows rows in $dir, expected $want" >&2; exit 1; }
    [ "$(grep -c '^| `[^|]*| ok |' "$dir/shape-sweep.md")" = "$rows" ] ||
        { echo "shape_sweep: not every shape of $dir collected and analyzed" >&2; exit 1; }
}

# a bad tolerance: one line naming it, exit 2, before any work
for bad in abc -5 1e2 10%; do
    PLAN_TOLERANCE=$bad MOEPLAN="$B" OUT="$out/bad" bash "$src/bench/shape_sweep.sh" >"$out/bad.stdout" 2>"$out/bad.stderr"
    rc=$?
    if [ "$rc" != 2 ] || [ "$(wc -l <"$out/bad.stderr")" != 1 ] ||
        ! grep -qF "PLAN_TOLERANCE '$bad': expected a percentage" "$out/bad.stderr" || [ -e "$out/bad" ]; then
        echo "shape_sweep: PLAN_TOLERANCE='$bad' gave exit $rc: $(cat "$out/bad.stderr")" >&2
        exit 1
    fi
done

sweep "$out/default" 10
sweep "$out/gpt-oss" 1 "--arch gpt-oss --experts 16 --top-k 4 --hidden 288 --sliding-window 8"
