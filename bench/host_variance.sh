#!/usr/bin/env bash
# bench/host_variance.sh — how much the same decode varies between processes, and whether pinning
# the pool's threads changes it: ROUNDS rounds, each one `moeplan bench` process per MP_POOL_PIN
# value (0 then 1, alternated), all with the same model, placement and routing.
#
#   MODEL=m.gguf [MOEPLAN=build/cli/moeplan] [PLACEMENT="--placement layers:8"] [ROUNDS=4]
#   [TOKENS=32] [REPS=3] [PINS="0 1"] [EXTRA="--costs c.json"] [OUT=out/host-variance]
#   bash bench/host_variance.sh
#
# Per process it records the decode tok/s (median of REPS), the CPU experts' time per hybrid layer
# step, the host read bandwidth bench measured beside the row, and the transparent huge page
# setting; $OUT/host-variance.md gets one row per process and, per pin value, the spread of tok/s
# and of the CPU experts' time over the rounds ((max - min) / median). The accuracy matrix's
# Mixtral rows are the reason: identical placements measured 30.4 and 40.4 ms/token in two
# processes a minute apart (bench/NOTES-simulator.md). A process-to-process spread that pinning
# removes is the executor's to fix; one that stays is the host's.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

MOEPLAN=${MOEPLAN:-build/cli/moeplan}
PLACEMENT=${PLACEMENT:---placement layers:8}
ROUNDS=${ROUNDS:-4}
TOKENS=${TOKENS:-32}
REPS=${REPS:-3}
PINS=${PINS:-0 1}
EXTRA=${EXTRA:-}
OUT=${OUT:-out/host-variance}
die() { echo "host_variance: error: $*" >&2; exit 1; }
[ -x "$MOEPLAN" ] || die "moeplan binary '$MOEPLAN' not found (build first, or set MOEPLAN)"
{ [ -n "${MODEL:-}" ] && [ -f "$MODEL" ]; } || die "MODEL: expected an existing GGUF file (got '${MODEL:-}')"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS '$ROUNDS': expected a positive integer"
mkdir -p "$OUT/bench" || die "cannot create $OUT"
thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)

for round in $(seq 1 "$ROUNDS"); do
    for pin in $PINS; do
        j=$OUT/bench/pin$pin-$round.json
        echo "[host_variance $(date +%H:%M:%S)] round $round, MP_POOL_PIN=$pin" >&2
        # shellcheck disable=SC2086
        MP_POOL_PIN=$pin "$MOEPLAN" bench -m "$MODEL" $PLACEMENT $EXTRA -p 0 -n "$TOKENS" -r "$REPS" -o json \
            >"$j" 2>"${j%.json}.log" || die "bench (round $round, pin $pin): $(tail -n 1 "${j%.json}.log")"
    done
done

# shellcheck disable=SC2086 # PINS is a list of values
python3 - "$OUT" "$ROUNDS" "$thp" $PINS >"$OUT/host-variance.md" <<'EOF' || die "the table failed"
import json, statistics, sys
out, rounds, thp, pins = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
print(f"transparent huge pages: {thp}\n")
print("| round | MP_POOL_PIN | tok/s | CPU experts µs per hybrid layer step | host read GB/s | share of serial bound |")
print("|---:|---:|---:|---:|---:|---:|")
per = {p: ([], []) for p in pins}
for r in range(1, rounds + 1):
    for p in pins:
        row = json.load(open(f"{out}/bench/pin{p}-{r}.json"))["rows"][-1]
        b = row.get("bound") or {}
        cpu = row.get("cpu_expert_us", 0.0)
        per[p][0].append(row["median_tok_s"])
        per[p][1].append(cpu)
        print(f"| {r} | {p} | {row['median_tok_s']:.2f} | {cpu:.1f} | {b.get('host_read_gbs', 0):.1f} "
              f"| {b.get('share_of_serial_bound', 0):.2f} |")
print("\n| MP_POOL_PIN | tok/s, median of the rounds | spread of tok/s | spread of the CPU experts' time |")
print("|---:|---:|---:|---:|")
def spread(v):
    m = statistics.median(v)
    return 100 * (max(v) - min(v)) / m if m else 0.0
for p in pins:
    tok, cpu = per[p]
    print(f"| {p} | {statistics.median(tok):.2f} | {spread(tok):.1f} % | {spread(cpu):.1f} % |")
EOF
cat "$OUT/host-variance.md"
