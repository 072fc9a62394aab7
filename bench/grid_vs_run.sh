#!/usr/bin/env bash
# bench/grid_vs_run.sh MOEPLAN OUTDIR — the CPU side of hybrid layers in a decode against the decode
# grid point that charges it, side by side in one run.
#
# The simulator charges a hybrid layer step with c cold routes, f of them far, at the cost file's
# decode grid point (c, f) (runtime/decide.h), whose cpu_ns is the CPU experts' share. The grid
# measures every layer hybrid, with the cold routes drawn from the experts outside a pool as large
# as the device holds. A decode of `--placement layers:N` (N layers' experts all on the host, the
# others all resident: first-n-cpu) runs every route of a host layer cold, at the same point. This
# script calibrates a model (or takes COSTS), then runs `moeplan bench` for each of PLACEMENTS
# (default "layers:ALL layers:3/4 layers:1/2 layers:1/4" of the model's MoE layers), with the cost
# file and with its far-off twin (whole_route_costs.py --off: the grid's far-off points, so no far
# route runs), ROUNDS times alternated, and prints per row: routes per hybrid layer step on the CPU
# and far, the run's cpu_expert_us, the grid point's cpu_ns, their ratio, and the host's read
# bandwidth beside it. A ratio near 1 at layers:ALL (the grid's own configuration, every layer
# hybrid) and above it at fewer host layers says the interleaving of host and resident layers
# costs the CPU side; a ratio above 1 at layers:ALL says the experts' spread does (the grid reads
# the few experts outside its pool, a run all of them). For whole far routes: a row whose far work
# is split along the FFN rows (top-2 models) says so, as bench's counters do not give its units.
# Knobs: PRESET (default olmoe), QUANT (default q4_k_m), MKMODEL_ARGS, MODEL, COSTS, CALIBRATE_ARGS
# (default "--rows 1 --reps 3"), PLACEMENTS, ROUNDS (default 2), TG (default 64), THREADS (default nproc).
set -euo pipefail
moeplan=${1:?usage: bench/grid_vs_run.sh MOEPLAN OUTDIR}
out=${2:?usage: bench/grid_vs_run.sh MOEPLAN OUTDIR}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-2}
tg=${TG:-64}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "grid_vs_run: ROUNDS '$rounds': expected a positive integer" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
log() { echo "[grid_vs_run $(date +%H:%M:%S)] $*" >&2; }
# shellcheck source=bench/model_costs.sh
. "$here/model_costs.sh"
model_and_costs "$moeplan" "$out" "$threads" olmoe "--rows 1 --reps 3" || exit 1
python3 "$here/whole_route_costs.py" --off "$costs" "$out/costs-off.json"
n_moe=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["decode_layers"]["hybrid_step"]["layers"])' "$costs")
if [ -z "${PLACEMENTS:-}" ]; then
    placements="layers:$n_moe layers:$((n_moe * 3 / 4)) layers:$((n_moe / 2)) layers:$((n_moe / 4))"
else
    placements=$PLACEMENTS
fi
for round in $(seq 1 "$rounds"); do
    arms="far off"
    [ $((round % 2)) = 1 ] || arms="off far"
    for p in $placements; do
        for arm in $arms; do
            c=$costs
            [ "$arm" = far ] || c=$out/costs-off.json
            j=$out/bench-${p//[:\/]/}-$arm.r$round.json
            log "round $round: $p, far routes $arm"
            "$moeplan" bench -m "$model" -t "$threads" -r 1 -o json --placement "$p" -p 0 -n "$tg" --costs "$c" \
                >"$j" 2>"${j%.json}.err" || log "$p $arm failed: $(tail -1 "${j%.json}.err")"
        done
    done
done
python3 - "$out" "$costs" "$rounds" $placements <<'PY'
import json, sys
out, costs, rounds, places = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
d = json.load(open(costs))["decode_layers"]
K, split = d["top_k"], d.get("far_split", 1)
pts = {(p["cold"], p["far"], p["far_on"]): p for p in d["points"]}
print("| placement | far routes | round | tok/s | CPU routes / hybrid step | far routes / hybrid step | run cpu_expert_us | grid point (cold, far) | grid cpu_us | run / grid | host GB/s |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
for p in places:
    for arm in ("far", "off"):
        for rnd in range(1, rounds + 1):
            path = "%s/bench-%s-%s.r%d.json" % (out, p.replace(":", "").replace("/", ""), arm, rnd)
            try:
                b = json.load(open(path))["rows"][0]
            except (OSError, ValueError, KeyError, IndexError) as e:
                print("| %s | %s | %d | failed: %s | | | | | | | |" % (p, arm, rnd, e))
                continue
            hs = b.get("hybrid_layer_steps") or 0
            if not hs:
                print("| %s | %s | %d | %.2f | no hybrid layer step | | | | | | |" % (p, arm, rnd, b["median_tok_s"]))
                continue
            cpu, far = b["routes_cpu"] / hs, b["routes_far"] / hs
            if b.get("routes_split"):  # a split route counts as CPU and far: its units are not in the counters
                print("| %s | %s | %d | %.2f | %.2f | %.2f | %.1f | split routes: the point is not known | | | |" % (
                    p, arm, rnd, b["median_tok_s"], cpu, far, b.get("cpu_expert_us") or float("nan")))
                continue
            # a host layer runs every route cold: the point (top_k, far work in the grid's units)
            key = (K, round(far * split), True) if arm == "far" else (K, 0, False)
            g = pts.get(key)
            g_us = g["cpu_ns"] / 1e3 if g else float("nan")
            run_us = b.get("cpu_expert_us") or float("nan")
            host = (b.get("bound") or {}).get("host_read_gbs")
            print("| %s | %s | %d | %.2f | %.2f | %.2f | %.1f | (%d, %d%s) | %.1f | %.2f | %s |" % (
                p, arm, rnd, b["median_tok_s"], cpu, far, run_us, key[0], key[1], "" if key[2] else ", off", g_us,
                run_us / g_us if g_us == g_us and g_us > 0 else float("nan"), "%.0f" % host if host else "-"))
PY
