#!/usr/bin/env bash
# bench/decode_check.sh — the cost file's one-row decode model against `moeplan bench`, one factor
# at a time, on one model: the decode steps that calibrate measured (the all-resident step, the
# decode grid's c = 0 and c = top_k points, far routes off) are run again by bench, as the accuracy
# matrix's rows run (one context of N_LONG positions, graphs, a route source), and beside each the
# time the cost file predicts for it. What each difference tests:
#
#   gpu-router   all experts resident, the model's own router (calibrate's non-MoE step): at N_SHORT
#                positions it is calibrate's own measurement; N_LONG - N_SHORT tests the context term
#   gpu-replay   the same with routes replayed from a trace (uniform over every expert): the route
#                source's own cost per step
#   c0-grid      the grid's pool (the cost file's decode_layers.pool experts a layer, experts 0.. of
#                each layer; min(top_k, n_expert - top_k) for a file that predates it), every route
#                resident, spread over the pool: the grid's c = 0 point as bench runs it
#   c0-bigpool   a pool of n_expert - top_k experts a layer, every route resident, uniform over it:
#                the same layer step with the resident experts' weights spread as a large placement
#                spreads them (c0-bigpool - c0-grid: the pool's size, i.e. the GPU's L2)
#   c0-bigpool-hot  the large pool with the routes of c0-grid: its size alone, without the spread
#   gpu-trace    all experts resident, routes replayed from TRACE (a trace of the model; for the
#                flame preset FLAME's own routing by default, bench/flame_csv.py): real routing
#                against gpu-replay's uniform one
#   cK-grid      the grid's pool, every route cold (the grid's c = top_k point): the CPU level
#   cK-grid-far  the same with --costs, so that the executor runs far routes as the matrix's rows
#                do (the grid's far-on point of the table's f, read from the run's counts)
#   cK-first     one hybrid layer, the first (the grid's pool, every route cold), every other layer
#                resident: what a step with few hybrid layers pays beyond the grid's per-layer
#                level, which spreads the costs of a hybrid step over all its layers (calibrate's
#                decode_layers.hybrid_step measures this step; the model charges it once)
#   cK-last      the same with the last layer hybrid (cK-first - cK-last: the host still
#                launching the step's graph when the first layer hands off)
#   *+stamps     the same with MP_GPU_STEP_STAMPS=1: the host's gap and launch per step beside the
#                GPU's span (docs/runtime.md)
#
#   [MOEPLAN=build/cli/moeplan] [PRESET=flame] [QUANT=q4_k_m] [MODEL=m.gguf] [COSTS=costs.json]
#   [CALIBRATE_ARGS="--rows 1,2,4,16,64 --reps 3"] [REPS=3] [N_SHORT=63] [N_LONG=511] [THREADS=N]
#   [ROUNDS=1] [CONFIGS="gpu-router gpu-replay c0-grid ..."] [TRACE=t.db] [EXECUTOR=gpu]
#   [WORK=/tmp/mp-decode-check] [OUT=out/decode-check] bash bench/decode_check.sh
#
# COSTS: the model's cost file (default: `moeplan calibrate` here, into $OUT/costs.json). ROUNDS:
# the configuration list runs that many times, each configuration a new process (the spread
# between processes beside the spread of repetitions within one). Without far routes (no
# --costs to bench), as the grid's far-off points. Results: $OUT/decode-check.md (the table and
# the differences) and .json (format moeplan-decode-check: per configuration and test, the keys,
# measured and model ms/token), $OUT/bench/*.json, logs in $OUT/logs. EXECUTOR=cpu runs the
# pipeline on a machine without a GPU (its numbers describe nothing). Exit 1 on the first failing
# step.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

MOEPLAN=${MOEPLAN:-build/cli/moeplan}
PRESET=${PRESET:-flame}
QUANT=${QUANT:-q4_k_m}
REPS=${REPS:-3}
N_SHORT=${N_SHORT:-63}
N_LONG=${N_LONG:-511}
THREADS=${THREADS:-$(nproc)}
ROUNDS=${ROUNDS:-1}
EXECUTOR=${EXECUTOR:-gpu}
WORK=${WORK:-/tmp/mp-decode-check}
OUT=${OUT:-out/decode-check}
TRACE=${TRACE:-}
[ -n "$TRACE" ] || [ "$PRESET" != flame ] || [ -n "${MODEL:-}" ] || TRACE=$OUT/traces/flame.db
default_configs="gpu-router gpu-replay c0-grid c0-bigpool c0-bigpool-hot cK-grid cK-grid-far cK-first cK-last"
[ -z "$TRACE" ] || default_configs+=" gpu-trace"
CONFIGS=${CONFIGS:-$default_configs gpu-router+stamps c0-grid+stamps}

die() { echo "decode_check: error: $*" >&2; exit 1; }
log() { echo "[decode_check $(date +%H:%M:%S)] $*" >&2; }
run() { # run STEP LOGNAME CMD...: stdout to $OUT/logs/LOGNAME.out, stderr to $OUT/logs/LOGNAME
    local step=$1 name=$2
    shift 2
    "$@" >"$OUT/logs/$name.out" 2>"$OUT/logs/$name" ||
        die "$step failed ($*): $(tail -n 1 "$OUT/logs/$name") (log: $OUT/logs/$name)"
}

[ -x "$MOEPLAN" ] || die "moeplan binary '$MOEPLAN' not found (build first, or set MOEPLAN)"
for v in REPS N_SHORT N_LONG THREADS ROUNDS; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v '${!v}': expected a positive integer"
done
[ "$N_SHORT" -lt "$N_LONG" ] || die "N_SHORT ($N_SHORT) must be below N_LONG ($N_LONG)"
case "$EXECUTOR" in gpu | cpu) ;; *) die "EXECUTOR '$EXECUTOR': expected gpu or cpu" ;; esac
read -r -a configs <<<"$CONFIGS"
for c in "${configs[@]}"; do
    case "${c%+stamps}" in
    gpu-router | gpu-replay | c0-grid | c0-bigpool | c0-bigpool-hot | cK-grid | cK-grid-far | cK-first | cK-last) ;;
    gpu-trace) [ -n "$TRACE" ] || die "CONFIGS: gpu-trace needs TRACE (a trace of the model's geometry)" ;;
    *) die "CONFIGS: unknown configuration '$c'" ;;
    esac
done
mkdir -p "$OUT/logs" "$OUT/bench" "$OUT/traces" "$WORK" || die "cannot create $OUT and $WORK"

if [ -z "${MODEL:-}" ]; then
    MODEL=$WORK/$PRESET-$QUANT.gguf
    [ -f "$MODEL" ] || { log "mkmodel --preset $PRESET --quant $QUANT"
        run mkmodel mkmodel.log "$MOEPLAN" mkmodel --preset "$PRESET" --quant "$QUANT" --quiet -o "$MODEL"; }
fi
[ -f "$MODEL" ] || die "model '$MODEL' not found"
run inspect inspect.log "$MOEPLAN" inspect --json "$MODEL"
read -r L E K <<<"$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d["moe_layers"]), d["moe_layers"][0]["experts"], [x["value"] for x in d["metadata"] if x["key"].endswith(".expert_used_count")][0])' "$OUT/logs/inspect.log.out")" ||
    die "cannot read the model's geometry from $OUT/logs/inspect.log.out"
[ "$E" -ge $((K + 1)) ] || die "the model has $E experts of top-$K: no pool leaves a route cold"
BIG=$((E - K))

if [ -z "${COSTS:-}" ]; then
    COSTS=$OUT/costs.json
    log "calibrate (${CALIBRATE_ARGS:---rows 1,2,4,16,64 --reps 3})"
    # shellcheck disable=SC2086
    run calibrate calibrate.log "$MOEPLAN" calibrate -m "$MODEL" --out "$COSTS" --force --threads "$THREADS" \
        ${CALIBRATE_ARGS:---rows 1,2,4,16,64 --reps 3}
fi
[ -f "$COSTS" ] || die "cost file '$COSTS' not found"
# the grid's pool: the cost file's (simulator/calibrate_runtime.c), or, in a file that predates it,
# min(top_k, n_expert - top_k)
R=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["decode_layers"]; k,e=int(sys.argv[2]),int(sys.argv[3]); print(d.get("pool", min(k, e - k)))' "$COSTS" "$K" "$E") ||
    die "cannot read the grid's pool from $COSTS"
log "$L MoE layers x $E experts, top-$K; grid pool $R, large pool $BIG experts a layer"

# placements (every layer's experts 0 .. n-1; one layer's, the others all resident) and traces of
# one sequence of N_LONG + 1 rows
for n in "$R" "$BIG"; do
    for ((l = 0; l < L; l++)); do echo "$l: 0-$((n - 1))"; done >"$OUT/traces/pool$n.txt"
done
for one in first last; do
    h=0
    [ $one = first ] || h=$((L - 1))
    for ((l = 0; l < L; l++)); do
        if [ $l = $h ]; then echo "$l: 0-$((R - 1))"; else echo "$l: 0-$((E - 1))"; fi
    done >"$OUT/traces/pool-$one.txt"
done
python3 - "$OUT/traces" "$L" "$E" "$K" "$R" "$BIG" "$((N_LONG + 1))" <<'EOF' || die "writing the traces failed"
import csv, os, random, sys
out, L, E, K, R, BIG, T = sys.argv[1], *map(int, sys.argv[2:])
rng = random.Random(11)
# name: (low, high) of the ids every row draws its K distinct experts from, and the one layer
# that draws from [R, E) instead (None: none)
for name, lo, hi, cold in (("uniform", 0, E, None), ("hot", 0, R, None), ("big", 0, BIG, None),
                           ("cold", R, E, None), ("cold-first", 0, E, 0), ("cold-last", 0, E, L - 1)):
    with open(os.path.join(out, name + ".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["seq", "pos", "layer"] + ["e%d" % i for i in range(K)] + ["w%d" % i for i in range(K)])
        for pos in range(T):
            for layer in range(L):
                ids = rng.sample(range(R, E) if layer == cold else range(lo, hi), K)
                ws = [0.5 + rng.random() for _ in range(K)]
                w.writerow([0, pos, layer] + ids + ["%.6f" % (x / sum(ws)) for x in ws])
EOF
for t in uniform hot big cold cold-first cold-last; do
    run "import $t" "import-$t.log" "$MOEPLAN" import csv "$OUT/traces/$t.csv" --trace "$OUT/traces/$t.db" \
        --experts "$E" --force
done
if [ "$TRACE" = "$OUT/traces/flame.db" ]; then
    run "FLAME's routing" flame-csv.log python3 bench/flame_csv.py "$OUT/traces/flame.csv"
    run "import flame" import-flame.log "$MOEPLAN" import csv "$OUT/traces/flame.csv" --trace "$TRACE" \
        --experts "$E" --force
fi
[ -z "$TRACE" ] || [ -f "$TRACE" ] || die "trace '$TRACE' not found"

# configuration -> bench flags
flags() {
    case "$1" in
    gpu-router) echo "--placement gpu" ;;
    gpu-replay) echo "--placement gpu --route-replay $OUT/traces/uniform.db" ;;
    c0-grid) echo "--placement-file $OUT/traces/pool$R.txt --route-replay $OUT/traces/hot.db" ;;
    c0-bigpool) echo "--placement-file $OUT/traces/pool$BIG.txt --route-replay $OUT/traces/big.db" ;;
    c0-bigpool-hot) echo "--placement-file $OUT/traces/pool$BIG.txt --route-replay $OUT/traces/hot.db" ;;
    gpu-trace) echo "--placement gpu --route-replay $TRACE" ;;
    cK-grid) echo "--placement-file $OUT/traces/pool$R.txt --route-replay $OUT/traces/cold.db" ;;
    cK-grid-far) echo "--placement-file $OUT/traces/pool$R.txt --route-replay $OUT/traces/cold.db --costs $COSTS" ;;
    cK-first | cK-last)
        echo "--placement-file $OUT/traces/pool-${1#cK-}.txt --route-replay $OUT/traces/cold-${1#cK-}.db" ;;
    esac
}
for ((round = 1; round <= ROUNDS; round++)); do
    for c in "${configs[@]}"; do
        base=${c%+stamps}
        envs=()
        [ "$c" = "$base" ] || envs=(MP_GPU_STEP_STAMPS=1)
        tests=$N_LONG
        case "$c" in gpu-router | c0-grid) tests=$N_SHORT,$N_LONG ;; esac
        tag=$c-$round
        log "bench $tag (tg $tests x $REPS)"
        # shellcheck disable=SC2046 # the flags are words without spaces (paths under $OUT)
        run "bench $tag" "bench-$tag.log" env "${envs[@]}" "$MOEPLAN" bench -m "$MODEL" $(flags "$base") -p 0 \
            -n "$tests" --ctx "$((N_LONG + 1))" -r "$REPS" -t "$THREADS" --executor "$EXECUTOR" -o json
        cp "$OUT/logs/bench-$tag.log.out" "$OUT/bench/$tag.json" || die "cannot write $OUT/bench/$tag.json"
        if declare -F pack >/dev/null; then pack || true; fi # under scripts/gpu.sh
    done
done

# the table: each measured row beside the cost file's model of it
python3 - "$OUT" "$COSTS" "$L" "$K" "$R" "$N_SHORT" "$N_LONG" "$ROUNDS" "$EXECUTOR" "$CONFIGS" <<'EOF' || die "the report failed"
import glob, json, os, statistics, sys
out, costs_path = sys.argv[1:3]
L, K, R, n_short, n_long, rounds = map(int, sys.argv[3:9])
executor, configs = sys.argv[9], sys.argv[10].split()
c = json.load(open(costs_path))
nm0 = [p for p in c["non_moe"] if p["rows"] == 1][0]["median_ns"] / 1e3
ctx = c.get("non_moe_context") or {}
grid = c["decode_layers"]
off = {p["cold"]: p for p in grid["points"] if not p["far_on"]}
gpu = [e for e in c["gpu_expert"] if e.get("quant") == grid["quant"]] or c["gpu_expert"]
conc = max(gpu[0]["concurrent"], key=lambda p: p["experts"])["median_ns"] / 1e3
hs = grid.get("hybrid_step") or {"median_ns": 0, "layers": L}
once, share = hs["median_ns"] / 1e3, hs["median_ns"] / 1e3 / hs["layers"]

def nm_at(keys):  # runtime/costs.c mp_costs_decode_non_moe_ns, in us (test_decode_check holds them equal)
    pts = ctx.get("points")
    if pts:  # the measured curve, each end going on with its segment's slope (at least 0)
        xs, ys = [p["keys"] for p in pts], [p["median_ns"] / 1e3 for p in pts]
        if keys >= xs[-1]:
            return max(ys[-1] + max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), 0) * (keys - xs[-1]), 0)
        if keys < xs[0]:
            return max(ys[0] - max((ys[1] - ys[0]) / (xs[1] - xs[0]), 0) * (xs[0] - keys), 0)
        i = next(j for j in range(1, len(xs)) if keys < xs[j])
        return max(ys[i - 1] + (ys[i] - ys[i - 1]) * (keys - xs[i - 1]) / (xs[i] - xs[i - 1]), 0)
    if "per_key_ns" in ctx:  # the linear term of an older cost file
        return max(nm0 + ctx["per_key_ns"] / 1e3 * (keys - ctx["keys"]), 0)
    return nm0

def nm(n):  # the non-MoE time of a tg n row's steps: positions 1 .. n attend 2 .. n + 1 keys (their mean)
    return sum(nm_at(p + 1) for p in range(1, n + 1)) / n, (n + 3) / 2

on = {(p["cold"], p["far"]): p for p in grid["points"] if p["far_on"]}

def moe_model(base, r):  # what the simulator charges for the MoE layers of one step, us
    if base.startswith("gpu-"):
        return L * conc
    if base in ("cK-first", "cK-last"):  # one hybrid layer: its level less its share, the once
        return (L - 1) * conc + off[K]["median_ns"] / 1e3 - share + once
    hyb = once - L * share  # every layer hybrid (simulator/sim_internal.h): 0 when the grid had L layers
    if base == "cK-grid-far" and r.get("far_layers"):  # the far-on point of the f the layers ran
        f = round(r["routes_far"] / max(1, r["hybrid_layer_steps"]))
        t = on[(K, f)]["median_ns"]
        return L * (max(t, off[K]["median_ns"]) if f == 0 else t) / 1e3 + hyb  # as mp_decode_costs_settle
    return L * off[K if base.startswith("cK-grid") else 0]["median_ns"] / 1e3 + hyb

rows = {}
for path in sorted(glob.glob(os.path.join(out, "bench", "*.json"))):
    tag = os.path.basename(path)[:-5]
    cfg = tag.rsplit("-", 1)[0]
    for r in json.load(open(path))["rows"]:
        rows.setdefault((cfg, r["n_gen"]), []).append(r)
lines = ["# Decode steps as bench runs them against the cost file's model", "",
         "costs `%s`; %d MoE layers, top-%d; %d round(s); executor %s; ms/token = the median over a "
         "row's repetitions, the round's median when several." % (costs_path, L, K, rounds, executor), "",
         "| configuration | tg | keys | measured ms/token | reps min-max | model ms/token | diff us/token "
         "| diff us/layer | rt gap us | rt overhead us | launch us | host gap us | GPU span us |",
         "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
meas, doc_rows = {}, []
for cfg in configs:
    base = cfg.replace("+stamps", "")
    for n in (n_short, n_long):
        rs = rows.get((cfg, n))
        if not rs:
            continue
        ms = statistics.median(1e3 / r["median_tok_s"] for r in rs)
        lo = min(1e3 / x for r in rs for x in r["samples_tok_s"])
        hi = max(1e3 / x for r in rs for x in r["samples_tok_s"])
        nmn, keys = nm(n)
        model = (nmn + moe_model(base, rs[0])) / 1e3
        meas[(cfg, n)] = (ms, model)
        doc_rows.append({"configuration": cfg, "n_gen": n, "keys": keys, "measured_ms_per_token": ms,
                         "model_ms_per_token": model, "rounds": len(rs)})
        r0 = rs[0]
        lines.append("| %s | %d | %.0f | %.4f | %.4f-%.4f | %.4f | %+.1f | %+.2f | %s | %s | %.1f | %s | %s |" % (
            cfg, n, keys, ms, lo, hi, model, 1e3 * (ms - model), 1e3 * (ms - model) / L,
            "%.1f" % r0["rt_gap_us"] if "rt_gap_us" in r0 else "-",
            "%.1f" % r0["rt_overhead_us"] if "rt_overhead_us" in r0 else "-", r0.get("graph_launch_us", 0),
            "%.1f" % r0["step_host_gap_us"] if "step_host_gap_us" in r0 else "-",
            "%.1f" % r0["step_gpu_us"] if "step_gpu_us" in r0 else "-"))
if ctx.get("points"):
    context = "the measured curve of %d points, %s keys" % (len(ctx["points"]), ", ".join(
        "%.1f us at %g" % (p["median_ns"] / 1e3, p["keys"]) for p in ctx["points"]))
elif "per_key_ns" in ctx:
    context = "%.1f us at %.1f keys, %.1f ns per key (the linear term of an older cost file)" % (
        nm0, ctx["keys"], ctx["per_key_ns"])
else:
    context = "%.1f us, no context term" % nm0
lines += ["", "Model: the non-MoE time of a one-row step by its keys (%s), averaged over the row's steps, plus "
          "each layer's charge in the simulator: resident, the GPU experts' concurrent point at top_k (%.1f us); "
          "hybrid, the grid's far-off point of its cold routes (c = 0: %.1f us, c = %d: %.1f us; pool %d), less "
          "its share (%.2f us) of what a step with hybrid layers pays once (%.1f us), which such a step pays "
          "whole. What the differences say:" % (context, conc, off[0]["median_ns"] / 1e3, K,
                                                off[K]["median_ns"] / 1e3, R, share, once), ""]

def d(a, b, n):  # measured a - measured b, us/token
    if (a, n) in meas and (b, n) in meas:
        return 1e3 * (meas[(a, n)][0] - meas[(b, n)][0])
    return None

def say(text, v):
    if v is not None:
        lines.append("- %s: %+.1f us/token (%+.2f us per layer)" % (text, v, v / L))

for cfg in ("gpu-router", "c0-grid"):
    if (cfg, n_short) in meas and (cfg, n_long) in meas:
        got = 1e3 * (meas[(cfg, n_long)][0] - meas[(cfg, n_short)][0])
        want = 1e3 * (meas[(cfg, n_long)][1] - meas[(cfg, n_short)][1])
        lines.append("- %s, tg%d - tg%d: measured %+.1f us/token, the context term says %+.1f" % (cfg, n_long, n_short, got, want))
        lines.append("- %s at tg%d against the cost file: %+.1f us/token" % (cfg, n_short, 1e3 * (meas[(cfg, n_short)][0] - meas[(cfg, n_short)][1])))
say("route replay's own cost (gpu-replay - gpu-router, tg%d)" % n_long, d("gpu-replay", "gpu-router", n_long))
say("the trace's routing against uniform routing (gpu-trace - gpu-replay)", d("gpu-trace", "gpu-replay", n_long))
say("hybrid layers with every route resident (c0-grid - gpu-router, tg%d; the grid says %+.1f)" % (
    n_long, L * (off[0]["median_ns"] / 1e3 - conc)), d("c0-grid", "gpu-router", n_long))
say("the pool's size and spread (c0-bigpool - c0-grid)", d("c0-bigpool", "c0-grid", n_long))
say("the pool's size alone (c0-bigpool-hot - c0-grid)", d("c0-bigpool-hot", "c0-grid", n_long))
say("the spread alone (c0-bigpool - c0-bigpool-hot)", d("c0-bigpool", "c0-bigpool-hot", n_long))
for cfg, what in (("cK-grid", "far-off"), ("cK-grid-far", "far-on")):
    if (cfg, n_long) in meas:
        ms, model = meas[(cfg, n_long)]
        lines.append("- every route cold (%s) against the grid's c = %d %s point: %+.1f us/token (%+.1f %%)" % (
            cfg, K, what, 1e3 * (ms - model), 100 * (ms - model) / model))
for one in ("cK-first", "cK-last"):
    if (one, n_long) in meas:
        ms, model = meas[(one, n_long)]
        lines.append("- one hybrid layer (%s, every route cold) against the model: %+.1f us/token (%s)" % (
            one, 1e3 * (ms - model), "the model charges the once of hybrid steps whole" if once else
            "the cost file has no once of hybrid steps: the grid's levels hold 1/%d of it each" % L))
say("the host still launching at the first layer (cK-first - cK-last)", d("cK-first", "cK-last", n_long))
text = "\n".join(lines) + "\n"
doc = {"format": "moeplan-decode-check", "version": 2, "costs": costs_path, "layers": L, "top_k": K,
       "grid_pool": R, "executor": executor, "non_moe_us": nm0, "non_moe_context": ctx,
       "hybrid_step_us": once, "resident_layer_us": conc, "rows": doc_rows}
for name, body in (("decode-check.md", text), ("decode-check.json", json.dumps(doc, indent=1) + "\n")):
    tmp = os.path.join(out, name + ".tmp.%d" % os.getpid())
    with open(tmp, "w") as f:
        f.write(body)
    os.replace(tmp, os.path.join(out, name))
print(text)
EOF
