#!/usr/bin/env bash
# bench/gpu_bench.sh MOEPLAN OUTDIR — `moeplan bench` rows of the GPU executor on the qwen3-30b-a3b
# preset (q4_k_m mix, generated on first use), side by side in one run:
#   all experts on the GPU: pp512, pp2048, tg128
#   --placement layers:N for N = 12 24 36 48 (llama.cpp's --n-cpu-moe N): tg128 (and pp512)
#   --placement fill under budgets emulating 24 / 16 / 12 / 8 GB cards: tg128, pp512
#   --placement layers:N and layers-last:N under the 16 / 12 / 8 GB budgets, N the fewest CPU
#   layers that fit (found by bisection with `bench --executor cpu --dry-run`, which checks the
#   placement against the budget for the same tests and runs nothing): tg128, pp512 (configs
#   lfitB, llfitB)
# Each configuration is one `moeplan bench -o json` call (JSON in OUTDIR/bench-<name>.json); a
# markdown table of all rows goes to stdout. Knobs: THREADS (default nproc), REPS (default 3),
# CONFIGS (names below, default all), PP / TG (test sizes), MODEL, QUANT (the generated preset's
# mix: q4_k_m, the default, or q8_0; MODEL must exist, the preset is generated only without it), COSTS (the model's cost file: the executor decides its far
# routes from it; without it, none), ROUNDS (default 1: the configurations run ROUNDS times in turn,
# config after config, into bench-<name>.r<N>.json; the host's read bandwidth drifts within minutes,
# so only alternated rounds compare). The table gives each row the host read bandwidth bench
# measured beside it, its share of the bound (max(GPU part, CPU expert bytes / that bandwidth, far
# bytes / bus) + round trips) and of the serial bound, and with ROUNDS > 1 each configuration's
# spread over its rounds ((max - min) / median of the rounds' medians).
set -euo pipefail
moeplan=${1:?usage: bench/gpu_bench.sh MOEPLAN OUTDIR}
out=${2:?usage: bench/gpu_bench.sh MOEPLAN OUTDIR}
quant=${QUANT:-q4_k_m} # the preset's mix when MODEL is not given (q4_k_m or q8_0: the peer comparison's two)
model=${MODEL:-/tmp/mp-bench/qwen3-30b-a3b-$quant.gguf}
threads=${THREADS:-$(nproc)}
reps=${REPS:-3}
rounds=${ROUNDS:-1}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_bench: ROUNDS '$rounds': expected a positive integer" >&2; exit 2; }
# a MODEL that is not there is a mistake (a typo would otherwise get the 30B preset generated under its name)
[ -z "${MODEL:-}" ] || [ -f "$MODEL" ] ||
    { echo "gpu_bench: MODEL '$MODEL': no such file (leave MODEL unset for the generated qwen3-30b-a3b preset)" >&2; exit 2; }
mkdir -p "$out"
if [ ! -f "$model" ]; then
    mkdir -p "$(dirname "$model")"
    echo "gpu_bench: generating $model" >&2
    "$moeplan" mkmodel --preset qwen3-30b-a3b --quant "$quant" --threads "$threads" --quiet -o "$model"
fi
declare -A flags=(
    [gpu]="--placement gpu -p ${PP_ALL:-512,2048} -n ${TG:-128}"
    [ncpu12]="--placement layers:12 -p 0 -n ${TG:-128}"
    [ncpu24]="--placement layers:24 -p 0 -n ${TG:-128}"
    [ncpu36]="--placement layers:36 -p 0 -n ${TG:-128}"
    [ncpu48]="--placement layers:48 -p ${PP:-512} -n ${TG:-128}"
    [fill24]="--placement fill --gpu-budget 24GB -p ${PP:-512} -n ${TG:-128}"
    [fill16]="--placement fill --gpu-budget 16GB -p ${PP:-512} -n ${TG:-128}"
    [fill12]="--placement fill --gpu-budget 12GB -p ${PP:-512} -n ${TG:-128}"
    [fill8]="--placement fill --gpu-budget 8GB -p ${PP:-512} -n ${TG:-128}"
)
# the fewest layers N for which --placement MODE:N fits BUDGET for the row's own tests (bench
# --dry-run: the placement's budget check for that context and batch, nothing runs); nothing
# printed when even every layer on the CPU does not fit
n_moe_layers= # the model's MoE layers, read once (by the loop below, not inside $(fit_layers ...))
fit_layers() {
    local mode=$1 budget=$2 lo=0 hi=$n_moe_layers mid
    fits() {
        "$moeplan" bench -m "$model" -t "$threads" --executor cpu --placement "$mode:$1" --gpu-budget "$budget" \
            -p "${PP:-512}" -n "${TG:-128}" --dry-run >/dev/null 2>&1
    }
    fits "$hi" || return 0
    while [ "$lo" -lt "$hi" ]; do
        mid=$(((lo + hi) / 2))
        if fits "$mid"; then hi=$mid; else lo=$((mid + 1)); fi
    done
    echo "$lo"
}
for b in 16 12 8; do
    for m in layers layers-last; do
        name=$([ $m = layers ] && echo lfit$b || echo llfit$b)
        flags[$name]="FIT $m ${b}GB"
    done
done
configs=${CONFIGS:-gpu ncpu12 ncpu24 ncpu36 ncpu48 fill24 fill16 fill12 fill8 lfit16 lfit12 lfit8 llfit16 llfit12 llfit8}
# the JSON of configuration $1 in round $2 (one round: the name it always had)
result() { if [ "$rounds" = 1 ]; then echo "$out/bench-$1.json"; else echo "$out/bench-$1.r$2.json"; fi; }
for round in $(seq 1 "$rounds"); do
for c in $configs; do
    if [[ ${flags[$c]} == FIT* ]]; then
        read -r _ m b <<<"${flags[$c]}"
        [ -n "$n_moe_layers" ] || n_moe_layers=$("$moeplan" inspect "$model" --json |
            python3 -c 'import json,sys; print(len(json.load(sys.stdin)["moe_layers"]))')
        n=$(fit_layers "$m" "$b")
        if [ -z "$n" ]; then
            echo "gpu_bench: $c: no $m:N fits $b" >&2
            echo '{"rows": []}' >"$(result "$c" "$round")"
            continue
        fi
        flags[$c]="--placement $m:$n --gpu-budget $b -p ${PP:-512} -n ${TG:-128}"
    fi
    [ "$rounds" = 1 ] || echo "gpu_bench: round $round" >&2
    echo "gpu_bench: $c: ${flags[$c]}" >&2
    j=$(result "$c" "$round")
    # shellcheck disable=SC2086
    if ! "$moeplan" bench -m "$model" -t "$threads" -r "$reps" -o json ${flags[$c]} ${COSTS:+--costs "$COSTS"} \
            >"$j" 2>"${j%.json}.err"; then
        echo "gpu_bench: $c failed: $(tail -1 "${j%.json}.err")" >&2
    fi
    # under scripts/gpu.sh: bring back what has finished, should the call's time run out
    if declare -F pack >/dev/null; then pack || true; fi
done
done
MP_BENCH_DIR=$(cd "$(dirname "$0")" && pwd) python3 - "$out" "$rounds" $configs <<'PY'
import json, os, statistics, sys
sys.path.insert(0, os.environ["MP_BENCH_DIR"])
from bench_sides import sides
out, rounds, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| config | round | placement | budget | gpu experts GiB | test | tok/s median | min | max | routes gpu/cpu/copy/far % | rt overhead us | GPU / CPU side us (GPU led) | host GB/s | CPU experts GB/s | bound tok/s | share of bound | share of serial bound | host+bus GB/s | share of host+bus bound |")
print("| --- | ---: | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
medians = {}
for c in configs:
    for rnd in range(1, rounds + 1):
        path = f"{out}/bench-{c}.json" if rounds == 1 else f"{out}/bench-{c}.r{rnd}.json"
        try:
            d = json.load(open(path))
        except Exception as e:
            print(f"| {c} | {rnd} | failed: {e} | | | | | | | | | | | | | | | | |")
            continue
        for r in d["rows"]:
            keys = ("routes_gpu", "routes_cpu", "routes_copied", "routes_far")
            tot = sum(r.get(k, 0) for k in keys) or 1
            paths = "/".join(f"{100*r.get(k, 0)/tot:.1f}" for k in keys)
            rt = f'{r["rt_overhead_us"]:.1f}' if r["rt_measured"] else "-"
            b = r.get("bound")
            host = f'{b["host_read_gbs"]:.1f}' if b and b.get("host_read_gbs") else "-"
            bound = f'{b["bound_tok_s"]:.2f}' if b else "-"
            share = f'{b["share_of_bound"]:.2f}' if b else "-"
            serial = f'{b["share_of_serial_bound"]:.2f}' if b and "share_of_serial_bound" in b else "-"
            num = lambda k: f"{b[k]:.2f}" if b and isinstance(b.get(k), (int, float)) else "-"
            cpu_gbs = f'{r["cpu_expert_gbs"]:.1f}' if r.get("cpu_expert_gbs") else "-"
            medians.setdefault((c, r["test"]), []).append(r["median_tok_s"])
            print(f'| {c} | {rnd} | {r["placement"]} | {r["gpu_budget"] or "none"} | {r["gpu_expert_bytes"]/2**30:.2f} '
                  f'| {r["test"]} | {r["median_tok_s"]:.2f} | {r["min_tok_s"]:.2f} | {r["max_tok_s"]:.2f} | {paths} '
                  f'| {rt} | {sides(r)} | {host} | {cpu_gbs} | {bound} | {share} | {serial} | {num("hostbus_gbs")} | {num("share_of_hostbus_bound")} |')
if rounds > 1:
    print()
    print("| config | test | tok/s, median of the rounds | spread over the rounds |")
    print("| --- | --- | ---: | ---: |")
    for (c, test), v in medians.items():
        m = statistics.median(v)
        print(f"| {c} | {test} | {m:.2f} | {100 * (max(v) - min(v)) / m:.1f} % |")
PY
