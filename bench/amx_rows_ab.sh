#!/usr/bin/env bash
# bench/amx_rows_ab.sh MOEPLAN OUTDIR — the CPU executor's prefill under several MP_AMX_ROWS
# values (the rows from which each type's prefill GEMM runs on AMX tiles), side by side in one run.
#
# A model (default: LAYERS layers of the qwen3-30b-a3b preset in Q4_K_M, made when missing) is
# calibrated here (`moeplan calibrate --quick --threads THREADS --rows 1,16,64`: its MP_AMX_ROWS
# is calibrate's choice on this host), then `moeplan bench --executor cpu -p P -n 0 -r 3` runs each
# prompt of PP under each arm, ROUNDS times, each round starting one arm later (the host's read
# bandwidth drifts within minutes: only rows measured in turn compare). Arms (ARMS): "calibrated"
# (calibrate's choice), "table" (MP_AMX_ROWS empty: the kernels' table) or a list as the knob takes
# it ("Q4_K:5,Q6_K:5"). OUTDIR/amx-ab.md: per prompt and round each arm's tok/s and its ratio to the
# first arm; then each arm's median ratio per prompt. Knobs: MODEL, LAYERS (default 8), PP (default
# "64 128 512"), ROUNDS (default 3), THREADS (default nproc), ARMS (default "table calibrated").
set -euo pipefail
moeplan=${1:?usage: bench/amx_rows_ab.sh MOEPLAN OUTDIR}
out=${2:?usage: bench/amx_rows_ab.sh MOEPLAN OUTDIR}
layers=${LAYERS:-8}
rounds=${ROUNDS:-3}
threads=${THREADS:-$(nproc)}
read -ra pps <<<"${PP:-64 128 512}"
read -ra arms <<<"${ARMS:-table calibrated}"
for v in "LAYERS=$layers" "ROUNDS=$rounds" "THREADS=$threads" "${pps[@]/#/PP=}"; do
    [[ "${v#*=}" =~ ^[1-9][0-9]{0,4}$ ]] || { echo "amx_rows_ab: ${v%%=*} '${v#*=}': expected a whole number 1..99999" >&2; exit 2; }
done
[ ${#arms[@]} -ge 2 ] || { echo "amx_rows_ab: ARMS '${ARMS:-}': expected two arms or more" >&2; exit 2; }
mkdir -p "$out"
model=${MODEL:-/tmp/mp-bench/qwen3-30b-a3b-q4_k_m-layers-$layers.gguf}
if [ ! -f "$model" ]; then
    mkdir -p "$(dirname "$model")"
    "$moeplan" mkmodel --preset qwen3-30b-a3b --quant q4_k_m --layers "$layers" --quiet -o "$model"
fi
file_of() { # an arm's name in file names: letters, digits and '_' ("Q4_K-5-Q6_K-5")
    echo "${1//[^A-Za-z0-9_]/-}"
}
value_of() { # the MP_AMX_ROWS text of an arm
    case $1 in
    calibrated) python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["device"]["knobs"]["MP_AMX_ROWS"])' \
        "$out/costs.json" ;;
    table) echo "" ;;
    *) echo "$1" ;;
    esac
}
case " ${arms[*]} " in
*" calibrated "*)
    echo "amx_rows_ab: calibrate --quick --threads $threads --rows 1,16,64" >&2
    env -u MP_AMX_ROWS "$moeplan" calibrate -m "$model" --quick --threads "$threads" --rows 1,16,64 \
        --out "$out/costs.json" --force >"$out/calibrate.log" 2>&1 ||
        { echo "amx_rows_ab: calibrate failed: $(tail -1 "$out/calibrate.log")" >&2; exit 1; }
    grep "AMX rows" "$out/calibrate.log" >&2 || true
    ;;
esac
for a in "${arms[@]}"; do
    echo "amx_rows_ab: arm $a: MP_AMX_ROWS='$(value_of "$a")'" >&2
done
for round in $(seq 1 "$rounds"); do
    for p in "${pps[@]}"; do
        n=${#arms[@]}
        for i in $(seq 0 $((n - 1))); do
            a=${arms[$(((i + round - 1) % n))]}
            MP_AMX_ROWS=$(value_of "$a") "$moeplan" bench -m "$model" --executor cpu -t "$threads" -p "$p" -n 0 -r 3 \
                -o json >"$out/$(file_of "$a")-pp$p-$round.json" 2>"$out/$(file_of "$a")-pp$p-$round.log" ||
                { echo "amx_rows_ab: bench failed ($a, pp$p, round $round): $(tail -1 "$out/$(file_of "$a")-pp$p-$round.log")" >&2
                    exit 1; }
        done
    done
done
python3 - "$out" "$rounds" "${pps[*]}" "${arms[@]}" <<'PY' | tee "$out/amx-ab.md"
import json, re, statistics, sys
out, rounds, pps, arms = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
def tok(a, p, r):
    name = re.sub(r"[^A-Za-z0-9_]", "-", a)
    return json.load(open(f"{out}/{name}-pp{p}-{r}.json"))["rows"][0]["median_tok_s"]
print("| prompt | round | " + " | ".join(f"{a} tok/s" for a in arms) + " | " +
      " | ".join(f"{a} / {arms[0]}" for a in arms[1:]) + " |")
print("|---|---:|" + "---:|" * (2 * len(arms) - 1))
ratios = {}
for p in pps:
    for r in range(1, rounds + 1):
        t = [tok(a, p, r) for a in arms]
        for a, v in zip(arms[1:], t[1:]):
            ratios.setdefault((a, p), []).append(v / t[0])
        print(f"| pp{p} | {r} | " + " | ".join(f"{v:.2f}" for v in t) + " | " +
              " | ".join(f"{v / t[0]:.3f}" for v in t[1:]) + " |")
print()
for (a, p), v in ratios.items():
    print(f"{a} / {arms[0]}, pp{p}: median {statistics.median(v):.3f} over {len(v)} rounds ({min(v):.3f}-{max(v):.3f})")
PY
