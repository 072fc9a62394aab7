#!/usr/bin/env bash
# bench/accuracy_matrix.sh — simulated against measured decode ms/token across model shapes. For each
# shape: a generated model (moeplan mkmodel), this machine's costs for it (moeplan calibrate), a
# routing trace of its geometry (bench/gen_routing_trace's skewed synthetic routing, or a real
# trace), then bench/sim_accuracy.sh over BUDGETS x POLICIES (predicted by simulate, measured by
# bench with the trace's routing replayed, the executor deciding far routes from the same costs).
# One table of every row follows, with each budget's measured speed of plan over first-n-cpu (what
# a user gains over llama.cpp's --n-cpu-moe), and every row simulated again at its run's host
# bandwidth and at the level its CPU experts ran at (bench/accuracy_table.py --resim).
#
#   [MOEPLAN=build/cli/moeplan] [GEN=build/bench/gen_routing_trace] [SHAPES="qwen3-q4 mixtral-q4 ..."]
#   [POLICIES="first-n-cpu static-topn plan"] [THREADS=N (default: all CPUs)] [WORK=/tmp/mp-matrix]
#   [OUT=out/accuracy-matrix] [CALIBRATE_ARGS="--rows 1,2,4 --reps 3"] [REPS=1] [ROUNDS=1] [KEEP_MODELS=0]
#   [BUDGETS="+8GiB +16GiB": every shape's budgets instead of its own] [REUSE_COSTS=0]
#   bash bench/accuracy_matrix.sh
#
# Shapes: name, model, trace (REQUESTS x TOKENS synthetic decode rows, Zipf exponent 1.0 with
# temporal locality, seed 7), budgets. "fX" is a budget with room for the share X of the model's
# experts beyond what the runtime holds besides them (small models, where 8-24 GB hold everything):
#   qwen3-q4    --preset qwen3-30b-a3b --quant q4_k_m (48 x 128 experts, top-8, 2.9 MB experts)
#   qwen3-q8    --preset qwen3-30b-a3b --quant q8_0 (4.9 MB experts)
#   qwen3-q4-llama  the same with --layer-mix llama: llama.cpp's Q4_K_M, the experts' down Q6_K in 24
#               layers (3.1 MB experts) and Q4_K in 24 (2.7 MB)
#   mixtral-q4  --preset mixtral --quant q4_k_m (32 x 8 experts, top-2, 114 MB experts)
#   qwen3-256   --preset qwen3-30b-a3b --layers 40 --experts 256 --expert-ff 512 (top-8, 2.0 MB experts)
#   olmoe-q4    --preset olmoe --quant q4_k_m (16 x 64 experts, top-8, 4.1 MB experts): f0.25 .. f0.9
#   flame       --preset flame with FLAME-MoE-290M's real routing (tests/fixtures/traces: 8 sequences
#               x 64 tokens, 25 layers x 64 experts, top-6), imported as one sequence of 512
#               positions: bench decodes the trace's rows as one context, and the simulator charges
#               a step's attention by its position in its request (180 ns per key of context on the
#               H200 is 40 us of a ~1 ms token between 8 requests of 64 and one of 512): f0.25 .. f0.9
# REPS: measured repetitions of each row's decode (bench -r; the row's median), after a warm-up.
# ROUNDS: bench processes per row, alternated over the rows (bench/sim_accuracy.sh: the row's
# measured speed is the median of every round's samples).
# REUSE_COSTS=1: a shape whose folder has a costs.json from an earlier run (KEEP_MODELS=1 kept the
# same model) is not calibrated again; the log says so.
# Models are deleted after their shape (they are tens of GB) unless KEEP_MODELS=1. Results:
# $OUT/<shape>/sim-accuracy.{md,json} and $OUT/matrix.md. A failing shape is reported and the next
# one runs; the exit status is 1 when any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

MOEPLAN=${MOEPLAN:-build/cli/moeplan}
GEN=${GEN:-build/bench/gen_routing_trace}
SHAPES=${SHAPES:-qwen3-q4 mixtral-q4 olmoe-q4 qwen3-256 flame qwen3-q8}
POLICIES=${POLICIES:-first-n-cpu static-topn plan}
THREADS=${THREADS:-$(nproc)}
WORK=${WORK:-/tmp/mp-matrix}
OUT=${OUT:-out/accuracy-matrix}
CALIBRATE_ARGS=${CALIBRATE_ARGS:---rows 1,2,4 --reps 3}
REPS=${REPS:-1}
ROUNDS=${ROUNDS:-1}
BIG_BUDGETS="8GiB 12GiB 16GiB 24GiB"
SMALL_BUDGETS="f0.25 f0.5 f0.75 f0.9"

log() { echo "[accuracy_matrix $(date +%H:%M:%S)] $*" >&2; }
[ -x "$MOEPLAN" ] || { echo "accuracy_matrix: error: $MOEPLAN not found (build first)" >&2; exit 1; }
[ -x "$GEN" ] || { echo "accuracy_matrix: error: $GEN not found (build first)" >&2; exit 1; }
mkdir -p "$WORK" "$OUT" || exit 1

# shape NAME -> "MKMODEL_FLAGS|TRACE|BUDGETS" (TRACE: synthetic REQUESTS TOKENS, or flame)
shape() {
    case "$1" in
    qwen3-q4) echo "--preset qwen3-30b-a3b --quant q4_k_m|synthetic 2 40|$BIG_BUDGETS" ;;
    qwen3-q8) echo "--preset qwen3-30b-a3b --quant q8_0|synthetic 2 40|$BIG_BUDGETS" ;;
    qwen3-q4-llama) echo "--preset qwen3-30b-a3b --quant q4_k_m --layer-mix llama|synthetic 2 40|$BIG_BUDGETS" ;;
    mixtral-q4) echo "--preset mixtral --quant q4_k_m|synthetic 2 24|$BIG_BUDGETS" ;;
    qwen3-256) echo "--preset qwen3-30b-a3b --quant q4_k_m --layers 40 --experts 256 --expert-ff 512|synthetic 2 40|$BIG_BUDGETS" ;;
    olmoe-q4) echo "--preset olmoe --quant q4_k_m|synthetic 2 40|$SMALL_BUDGETS" ;;
    flame) echo "--preset flame --quant q4_k_m|flame|$SMALL_BUDGETS" ;;
    *) return 1 ;;
    esac
}

# json FILE EXPR: a Python expression on the parsed document d
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

failed=0
for name in $SHAPES; do
    spec=$(shape "$name") || { log "unknown shape $name"; failed=1; continue; }
    IFS='|' read -r mk tr budgets <<<"$spec"
    budgets=${BUDGETS:-$budgets}
    dir=$OUT/$name
    mkdir -p "$dir"
    model=$WORK/$name.gguf
    t0=$(date +%s)
    if [ ! -f "$model" ]; then
        log "$name: mkmodel $mk"
        # shellcheck disable=SC2086
        if ! "$MOEPLAN" mkmodel $mk --threads "$THREADS" --quiet -o "$model" >"$dir/mkmodel.log" 2>&1; then
            log "$name: mkmodel failed: $(tail -1 "$dir/mkmodel.log")"
            failed=1
            continue
        fi
    fi
    "$MOEPLAN" inspect --json "$model" >"$dir/inspect.json" || { failed=1; continue; }
    read -r L E K EB EXPERTS <<<"$(json "$dir/inspect.json" \
        '"%d %d %d %d %d" % (len(d["moe_layers"]), d["moe_layers"][0]["experts"], [x["value"] for x in d["metadata"] if x["key"].endswith(".expert_used_count")][0], d["moe_layers"][0]["bytes_per_expert"], d["expert_bytes"])')"
    log "$name: $L MoE layers x $E experts, top-$K, $EB-byte experts ($EXPERTS bytes in all)"
    costs=$dir/costs.json
    if [ "${REUSE_COSTS:-0}" = 1 ] && [ -f "$costs" ]; then
        log "$name: calibrate skipped (REUSE_COSTS=1): $costs"
    else
        [ "${REUSE_COSTS:-0}" = 1 ] && log "$name: no $costs to reuse (REUSE_COSTS=1): calibrating"
        log "$name: calibrate ($CALIBRATE_ARGS)"
        # shellcheck disable=SC2086
        if ! "$MOEPLAN" calibrate -m "$model" --out "$costs" --force --threads "$THREADS" $CALIBRATE_ARGS \
            >"$dir/calibrate.log" 2>&1; then
            log "$name: calibrate failed: $(tail -1 "$dir/calibrate.log")"
            failed=1
            continue
        fi
    fi
    trace=$dir/trace.db
    rm -f "$trace"
    if [ "$tr" = flame ]; then
        # FLAME's layers as the preset's blocks, its sequences as one request (bench/flame_csv.py)
        python3 bench/flame_csv.py "$dir/flame.csv" || { failed=1; continue; }
        "$MOEPLAN" import csv "$dir/flame.csv" --trace "$trace" --experts "$E" >"$dir/import.log" 2>&1 ||
            { log "$name: import failed: $(tail -1 "$dir/import.log")"; failed=1; continue; }
    else
        read -r _ reqs toks <<<"$tr"
        "$GEN" "$trace" "$reqs" "$toks" "$L" "$E" "$K" 1 7 "$EB" 1.0 >"$dir/trace.log" 2>&1 ||
            { log "$name: trace failed: $(tail -1 "$dir/trace.log")"; failed=1; continue; }
    fi
    bb=""
    for b in $budgets; do
        case "$b" in
        f*) bb="$bb +$(python3 -c 'import sys; print(int(float(sys.argv[1]) * int(sys.argv[2])))' "${b#f}" "$EXPERTS")B" ;;
        *) bb="$bb $b" ;;
        esac
    done
    log "$name: sim_accuracy, budgets$bb, policies $POLICIES"
    if ! MOEPLAN="$MOEPLAN" MODEL="$model" COSTS="$costs" TRACE="$trace" BUDGETS="${bb# }" POLICIES="$POLICIES" \
        THREADS="$THREADS" REPS="$REPS" ROUNDS="$ROUNDS" EXECUTOR=gpu OUT="$dir" bash bench/sim_accuracy.sh >"$dir/sim-accuracy.log" 2>&1; then
        log "$name: sim_accuracy failed: $(tail -1 "$dir/sim-accuracy.log")"
        failed=1
    fi
    log "$name: done in $(($(date +%s) - t0)) s"
    [ "${KEEP_MODELS:-0}" = 1 ] || rm -f "$model"
    # under scripts/gpu.sh: bring back what has finished, should the call's time run out
    if declare -F pack >/dev/null; then pack || true; fi
done

python3 bench/accuracy_table.py --resim "$MOEPLAN" "$OUT" $SHAPES || failed=1
exit $failed
