# bench/model_costs.sh — sourced by the bench scripts that run one model against one cost file
# (split_ab.sh, grid_vs_run.sh): `model_and_costs MOEPLAN OUTDIR THREADS PRESET CALIBRATE_ARGS` sets
# `model` (MODEL, else /tmp/mp-bench/P-Q.gguf for P the PRESET knob or the given preset and Q the
# QUANT knob or q4_k_m, made with mkmodel when missing; MKMODEL_ARGS adds mkmodel arguments, e.g.
# "--layers 40 --experts 256 --expert-ff 512" for the accuracy matrix's qwen3-256 shape, and names
# the file after them) and `costs` (COSTS, else OUTDIR/costs.json,
# calibrated there on THREADS threads with the CALIBRATE_ARGS knob or the given arguments when
# missing; its log OUTDIR/calibrate.log). The caller defines log(). Returns 1 when mkmodel or
# calibrate fails.
model_and_costs() {
    local moeplan=$1 out=$2 threads=$3 preset=${PRESET:-$4} quant=${QUANT:-q4_k_m} args=${CALIBRATE_ARGS:-$5}
    local extra=${MKMODEL_ARGS:-} tag=""
    [ -z "$extra" ] || tag=-$(printf '%s' "$extra" | tr -cs 'A-Za-z0-9' '-' | sed 's/^-*//; s/-*$//')
    model=${MODEL:-/tmp/mp-bench/$preset-$quant$tag.gguf}
    if [ ! -f "$model" ]; then
        mkdir -p "$(dirname "$model")"
        log "generating $model"
        # shellcheck disable=SC2086
        "$moeplan" mkmodel --preset "$preset" --quant "$quant" $extra --threads "$threads" --quiet -o "$model" ||
            return 1
    fi
    costs=${COSTS:-$out/costs.json}
    if [ ! -f "$costs" ]; then
        log "calibrate $args"
        # shellcheck disable=SC2086
        "$moeplan" calibrate -m "$model" --out "$costs" --force --threads "$threads" $args \
            >"$out/calibrate.log" 2>&1 || { log "calibrate failed: $(tail -1 "$out/calibrate.log")"; return 1; }
    fi
}
