#!/usr/bin/env bash
# bench/split_ab.sh MOEPLAN OUTDIR — split far routes against whole ones, side by side in one run.
#
# A model (default: the mixtral preset in Q4_K_M, top-2 of 8, 114 MB experts; PRESET and QUANT pick
# another, e.g. PRESET=qwen3-30b-a3b, whose grid the rule counts in thirds) decodes under budgets
# or placements that leave most experts in host memory. Its cost file, calibrated here (or COSTS),
# counts far work in units of 1/far_split of an expert (runtime/decide.h); its whole-route twin
# (bench/whole_route_costs.py) keeps only the whole-route points of the same grid. For each budget,
# `moeplan bench --placement fill --gpu-budget B --costs C` (for each of PLACEMENTS, `--placement P`)
# runs with one file then the other, ROUNDS times (each round starts one arm later, so that over as
# many rounds as arms each arm runs once in each position: the host's read bandwidth drifts within
# minutes, so only rows measured in turn compare). The table
# gives each row's tok/s, its routes by path, the host's read bandwidth beside it, what the cores
# and the bus drew reading at once (bench's two-reader probe) and its share of the serial and
# host+bus bounds (bench's `bound`: docs/bench.md); then the knobs the arms ran with where they
# differ (a cost file's calibrated MP_PREFETCH_BYTES among them); then per row the split / whole
# ratio of each round and their median (bench/split_ab_table.py writes them). ARMS="split whole
# off" adds a third arm, the far-off twin (whole_route_costs.py --off: the same grid without its far
# points, so no far route runs), and a
# ratio of each arm to it: what far routes gain on this machine; ARMS="whole off" for a grid in whole
# routes. An arm uN runs the grid in units of 1/N of an expert (whole_route_costs.py --units N, N
# dividing the grid's split): ARMS="split u4 off" with CALIBRATE_ARGS="... --far-units 8" sets
# eighths against quarters. An arm may carry one environment setting after '@', for a knob's A/B on
# the same grid: ARMS="split split@MP_POOL_PIN=1" runs the split grid with the knob off and on.
# Knobs: MODEL (default /tmp/mp-bench/PRESET-QUANT.gguf, made when missing), PRESET (default mixtral),
# QUANT (default q4_k_m), MKMODEL_ARGS (more mkmodel arguments for that model), COSTS, CALIBRATE_ARGS (default "--rows 1,2,4 --reps 3"), BUDGETS (default
# "24GB 16GB 12GB", or none when PLACEMENTS is set), PLACEMENTS (e.g. "layers:24 layers:36"), ROUNDS
# (default 2), REPS (default 2), TG (default 64), THREADS (default nproc), ARMS (default "split whole").
set -euo pipefail
moeplan=${1:?usage: bench/split_ab.sh MOEPLAN OUTDIR}
out=${2:?usage: bench/split_ab.sh MOEPLAN OUTDIR}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-2}
reps=${REPS:-2}
tg=${TG:-64}
read -ra arms_list <<<"${ARMS:-split whole}"
[ ${#arms_list[@]} -gt 0 ] || { echo "split_ab: ARMS is empty: expected split, whole, off or uN" >&2; exit 2; }
arms_all="${arms_list[*]}"
for a in "${arms_list[@]}"; do
    case ${a%%@*} in split | whole | off | u[1-9] | u[1-9][0-9]) ;;
    *) echo "split_ab: ARMS '$a': expected split, whole, off or uN, optionally @VAR=VALUE" >&2; exit 2 ;;
    esac
    [[ $a != *@* || ${a#*@} =~ ^[A-Z_][A-Z0-9_]*=[A-Za-z0-9_.,:/-]*$ ]] ||
        { echo "split_ab: ARMS '$a': expected VAR=VALUE after '@'" >&2; exit 2; }
done
placements=${PLACEMENTS:-}
if [ -n "$placements" ]; then budgets=${BUDGETS:-}; else budgets=${BUDGETS:-24GB 16GB 12GB}; fi
# the rows: a budget (fill under it) or a placement (layers:N, ...); files named by the row
rows="$budgets $placements"
here=$(cd "$(dirname "$0")" && pwd)
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "split_ab: ROUNDS '$rounds': expected a positive integer" >&2; exit 2; }
mkdir -p "$out"
log() { echo "[split_ab $(date +%H:%M:%S)] $*" >&2; }
# shellcheck source=bench/model_costs.sh
. "$here/model_costs.sh"
model_and_costs "$moeplan" "$out" "$threads" mixtral "--rows 1,2,4 --reps 3" || exit 1
python3 "$here/whole_route_costs.py" "$costs" "$out/costs-whole.json"
for a in "${arms_list[@]%%@*}"; do
    case $a in
    off) python3 "$here/whole_route_costs.py" --off "$costs" "$out/costs-off.json" ;;
    u*) python3 "$here/whole_route_costs.py" --units "${a#u}" "$costs" "$out/costs-$a.json" ;;
    esac
done
split=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["decode_layers"].get("far_split", 1))' "$costs")
log "far_split $split in $costs; whole-route twin $out/costs-whole.json"
[ "$split" -gt 1 ] || [[ " $arms_all " != *" split "* ]] || [[ " $arms_all " != *" whole "* ]] ||
    log "the grid counts whole routes: the split and whole arms are the same"
n_arms=${#arms_list[@]}
for round in $(seq 1 "$rounds"); do
    # round r starts at arm (r - 1) mod n and takes them in turn: over n rounds each arm runs once
    # in each position (odd rounds against even ones alone would leave a middle arm in the middle)
    arms=
    for i in $(seq 0 $((n_arms - 1))); do arms+=" ${arms_list[$(((round - 1 + i) % n_arms))]}"; done
    for b in $rows; do
        place=(--placement fill --gpu-budget "$b")
        case $b in *:*) place=(--placement "$b") ;; esac
        for arm in $arms; do
            base=${arm%%@*} setting=()
            [[ $arm != *@* ]] || setting=("${arm#*@}")
            c=$costs
            [ "$base" = split ] || c=$out/costs-$base.json
            tag=${arm//[@=]/-}
            j=$out/bench-${b//:/}-$tag.r$round.json
            log "round $round: $b $arm"
            if ! env "${setting[@]}" "$moeplan" bench -m "$model" -t "$threads" -r "$reps" -o json "${place[@]}" \
                    -p 0 -n "$tg" --costs "$c" >"$j" 2>"${j%.json}.err"; then
                log "$b $arm failed: $(tail -1 "${j%.json}.err")"
            fi
            if declare -F pack >/dev/null; then pack || true; fi
        done
    done
done
python3 "$here/split_ab_table.py" "$out" "$rounds" "$arms_all" $rows
