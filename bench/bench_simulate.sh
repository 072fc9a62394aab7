#!/usr/bin/env bash
# bench/bench_simulate.sh [BUILD_DIR] — routing decisions per second of `moeplan simulate`'s replay,
# per policy, on one core (taskset -c 0), on the real FLAME-MoE routing trace (imported from
# ../shared/data/traces), as prefill steps and as decode (--as-decode). Numbers: bench/NOTES-simulator.md.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
csv=${MP_FLAME_CSV:-../shared/data/traces/flame-moe-290m-prefill.csv}
[ -f "$csv" ] || csv=/work/shared/data/traces/flame-moe-290m-prefill.csv
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/cli/moeplan" import csv "$csv" --trace "$tmp/flame.db" --experts 64 >/dev/null
costs=${MP_SIM_COSTS:-bench/results/2026-12-02-h200-accuracy-matrix-calibrate-regime/flame/costs.json} # a calibration of the flame preset on the H200 (the decode grid must be of the trace's shape; the replay's speed does not depend on the numbers)
for mode in "" "--as-decode"; do
    for slots in 400 800; do
        taskset -c 0 "$build/bench/bench_simulate" "$tmp/flame.db" "$costs" --expert Q4_K --reps 5 \
            --budget-slots "$slots" $mode
        echo
    done
done
