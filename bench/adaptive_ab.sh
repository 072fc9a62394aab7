#!/usr/bin/env bash
# bench/adaptive_ab.sh — the adaptive tier against the best static profile at the same GPU budget,
# measured side by side in one run: decode tok/s of the trace's routing replayed (bench
# --route-replay), static rows and adaptive rows alternated ROUNDS times.
#
#   MODEL=m.gguf COSTS=costs.json TRACE=trace.db [MOEPLAN=build/cli/moeplan]
#   [BUDGETS="8GiB 12GiB 16GiB"; "+SIZE": SIZE beyond the runtime's fixed part; "fX": room for the
#   share X of the model's experts beyond it]
#   [POLICY=cost] [SLOTS=10%] [STATIC=plan] [ROUNDS=2] [REPS=1] [THREADS=N] [OUT=out/adaptive-ab]
#   bash bench/adaptive_ab.sh
#
# Per budget B: `moeplan simulate --policy STATIC --emit-profile` plans the static profile for B
# from the trace; then, ROUNDS times, `moeplan bench --profile P --gpu-budget B` (static: the
# profile's experts while they fit) and the same with `--adaptive POLICY --adaptive-slots SLOTS`
# (the tier takes its share of the budget first, the profile's best-ranked experts the rest).
# Every row decodes the trace's rows once per repetition (-p 0 -n T-1 --ctx T) with the executor
# deciding far routes and pricing the tier from COSTS. $OUT/adaptive-ab.md: per budget, each side's
# median over its rounds, the ratio adaptive / static, the spread over rounds, and the tier's
# share of routes served, late routes, admissions and bytes copied; and `moeplan simulate --adaptive`'s
# prediction of both sides (the tier with the slots the runtime gave it). A failing step stops the script
# with "adaptive_ab: error: STEP: ..." and exit 1 (logs in $OUT/logs/).
set -uo pipefail
cd "$(dirname "$0")/.."

MOEPLAN=${MOEPLAN:-build/cli/moeplan}
BUDGETS=${BUDGETS:-8GiB 12GiB 16GiB}
POLICY=${POLICY:-cost}
SLOTS=${SLOTS:-10%}
STATIC=${STATIC:-plan}
ROUNDS=${ROUNDS:-2}
REPS=${REPS:-1}
OUT=${OUT:-out/adaptive-ab}
THREADS=${THREADS:-}

die() { echo "adaptive_ab: error: $*" >&2; exit 1; }
log() { echo "[adaptive_ab $(date +%H:%M:%S)] $*" >&2; }
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

[ -x "$MOEPLAN" ] || die "moeplan binary '$MOEPLAN' not found (build first, or set MOEPLAN)"
for v in MODEL COSTS TRACE; do
    [ -n "${!v:-}" ] && [ -f "${!v}" ] || die "$v: expected an existing file (got '${!v:-}')"
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS '$ROUNDS': expected a positive integer"
mkdir -p "$OUT/logs" "$OUT/bench" "$OUT/profiles" || die "cannot create $OUT"
thr=()
[ -n "$THREADS" ] && thr=(--threads "$THREADS")

# the trace's rows per layer, and the runtime's GPU memory besides experts for that context
"$MOEPLAN" simulate "$TRACE" --costs "$COSTS" -m "$MODEL" --budget 1TiB --policy static-topn --as-decode \
    --json "$OUT/rows.json" --force "${thr[@]}" >"$OUT/logs/rows.out" 2>"$OUT/logs/rows.log" ||
    die "rows: $(tail -n 1 "$OUT/logs/rows.log")"
T=$(json "$OUT/rows.json" "int(sum(d['budgets'][0]['policies'][0][k]['tokens'] for k in ('in_sample', 'held_out')))")
[[ "$T" =~ ^[0-9]+$ ]] && [ "$T" -ge 2 ] || die "rows: cannot read the trace's row count (got '$T')"
"$MOEPLAN" bench -m "$MODEL" -p 0 -n 1 -r 1 --ctx "$T" --executor cpu "${thr[@]}" -o json \
    >"$OUT/bench/fixed.json" 2>"$OUT/logs/fixed.log" || die "fixed bytes: $(tail -n 1 "$OUT/logs/fixed.log")"
FIXED=$(json "$OUT/bench/fixed.json" "int(d['rows'][0]['gpu_fixed_bytes'])")
log "trace: $T rows per layer; runtime's GPU memory besides experts: $FIXED bytes"

results=$OUT/results.jsonl
: >"$results" || die "cannot write $results"
EXPERTS=$("$MOEPLAN" inspect --json "$MODEL" 2>"$OUT/logs/inspect.log" | python3 -c 'import json,sys; print(json.load(sys.stdin)["expert_bytes"])') ||
    die "inspect: $(tail -n 1 "$OUT/logs/inspect.log")"
for b in $BUDGETS; do
    bb=$(python3 bench/budget_bytes.py "$b" "$FIXED" "$EXPERTS" 2>"$OUT/logs/budget.err") || die "BUDGETS: $(cat "$OUT/logs/budget.err")"
    prof=$OUT/profiles/$b.strp
    log "budget $b: simulate --policy $STATIC"
    "$MOEPLAN" simulate "$TRACE" --costs "$COSTS" -m "$MODEL" --ctx-size "$T" --budget "$bb" --policy "$STATIC" \
        --profile-policy "$STATIC" --as-decode --emit-profile "$prof" --json "$OUT/sim-$b.json" --force "${thr[@]}" \
        >"$OUT/logs/sim-$b.out" 2>"$OUT/logs/sim-$b.log" || die "simulate $b: $(tail -n 1 "$OUT/logs/sim-$b.log")"
    for round in $(seq 1 "$ROUNDS"); do
        for side in static adaptive; do
            extra=()
            [ "$side" = adaptive ] && extra=(--adaptive "$POLICY" --adaptive-slots "$SLOTS")
            j=$OUT/bench/$b-$side-$round.json
            log "budget $b, round $round: $side"
            "$MOEPLAN" bench -m "$MODEL" --profile "$prof" --gpu-budget "$bb" --costs "$COSTS" --route-replay "$TRACE" \
                "${extra[@]}" -p 0 -n $((T - 1)) --ctx "$T" -r "$REPS" --executor gpu "${thr[@]}" -o json \
                >"$j" 2>"$OUT/logs/bench-$b-$side-$round.log" ||
                die "bench $b $side: $(tail -n 1 "$OUT/logs/bench-$b-$side-$round.log")"
            python3 - "$b" "$side" "$round" "$j" >>"$results" <<'EOF' || die "reading $j failed"
import json, sys
budget, side, rnd, path = sys.argv[1:5]
r = json.load(open(path))["rows"][0]
routes = max(1, r["routes_gpu"] + r["routes_cpu"] + r["routes_copied"] + r["routes_far"])
print(json.dumps({"budget": budget, "side": side, "round": int(rnd), "tok_s": sorted(r["samples_tok_s"])[len(r["samples_tok_s"]) // 2],
                  "resident": r["experts_resident"], "adaptive": r["adaptive"], "slots": r["adaptive_slots"],
                  "tier_share": r["tier_hits"] / routes, "tier_late": r["tier_late"], "admissions": r["tier_admissions"],
                  "evictions": r["tier_evictions"], "copy_bytes": r["tier_copy_bytes"],
                  "host_gbs": r.get("bound", {}).get("host_read_gbs"), "commit": r["moeplan_commit"]}))
EOF
        done
    done
    # the prediction: the same profile's policy with the tier the runtime gave (its slots, as bench
    # reported them), from the same trace and costs
    slots=$(json "$OUT/bench/$b-adaptive-$ROUNDS.json" "int(d['rows'][0]['adaptive_slots'])")
    log "budget $b: simulate --adaptive $POLICY --adaptive-slots $slots"
    if [ "$slots" -gt 0 ]; then
        "$MOEPLAN" simulate "$TRACE" --costs "$COSTS" -m "$MODEL" --ctx-size "$T" --budget "$bb" --policy "$STATIC" \
            --as-decode --adaptive "$POLICY" --adaptive-slots "$slots" --json "$OUT/sim-adaptive-$b.json" --force \
            "${thr[@]}" >"$OUT/logs/sim-adaptive-$b.out" 2>"$OUT/logs/sim-adaptive-$b.log" ||
            die "simulate --adaptive $b: $(tail -n 1 "$OUT/logs/sim-adaptive-$b.log")"
        python3 - "$b" "$STATIC" "$OUT/sim-adaptive-$b.json" >>"$results" <<'EOF' || die "reading the prediction failed"
import json, sys
budget, static, path = sys.argv[1:4]
pol = [x for x in json.load(open(path))["budgets"][0]["policies"] if x["policy"] == static][0]
def ms(o):
    tok = o["in_sample"]["tokens"] + o["held_out"]["tokens"]
    return (o["in_sample"]["time_ns"] + o["held_out"]["time_ns"]) / tok / 1e6
print(json.dumps({"budget": budget, "side": "predicted", "static_ms": ms(pol), "adaptive_ms": ms(pol["adaptive"]),
                  "slots": pol["adaptive"]["slots"]}))
EOF
    fi
done

python3 - "$results" "$OUT/adaptive-ab.md" "$POLICY" "$SLOTS" "$STATIC" "$ROUNDS" <<'EOF' || die "table failed"
import json, os, statistics, sys
src, dst, policy, slots, static, rounds = sys.argv[1:7]
rows = [json.loads(l) for l in open(src)]
out = ["| budget | %s tok/s (rounds) | adaptive %s %s tok/s (rounds) | adaptive / static | tier slots | "
       "routes on tier slots | late | admissions | evictions | copied | predicted static / adaptive tok/s "
       "(error against measured) |" % (static, policy, slots),
       "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
for b in dict.fromkeys(r["budget"] for r in rows):
    s = [r for r in rows if r["budget"] == b and r["side"] == "static"]
    a = [r for r in rows if r["budget"] == b and r["side"] == "adaptive"]
    p = [r for r in rows if r["budget"] == b and r["side"] == "predicted"]
    ms, ma = statistics.median(x["tok_s"] for x in s), statistics.median(x["tok_s"] for x in a)
    last = a[-1]
    pred = "-"
    if p:
        ps, pa = 1e3 / p[0]["static_ms"], 1e3 / p[0]["adaptive_ms"]
        pred = "%.2f / %.2f (%+.1f %% / %+.1f %%)" % (ps, pa, 100 * (ps / ms - 1), 100 * (pa / ma - 1))
    out.append("| %s | %.2f (%s) | %.2f (%s) | %.3f | %d | %.1f %% | %d | %d | %d | %.2f GB | %s |" % (
        b, ms, " / ".join("%.2f" % x["tok_s"] for x in s), ma, " / ".join("%.2f" % x["tok_s"] for x in a),
        ma / ms, last["slots"], 100 * last["tier_share"], last["tier_late"], last["admissions"], last["evictions"],
        last["copy_bytes"] / 1e9, pred))
out.append("")
out.append("Static and adaptive rows alternated %s times in one run (commit %s); the tier's counts are "
           "its last round's." % (rounds, rows[0]["commit"]))
open(dst + ".tmp", "w").write("\n".join(out) + "\n")
os.replace(dst + ".tmp", dst)
print("\n".join(out))
EOF
