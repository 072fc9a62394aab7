#!/usr/bin/env bash
# bench/cpu_decode.sh MOEPLAN [MODEL] — CPU decode speed against the host memory-bandwidth bound.
#
# Decode reads every active weight once per token: the non-expert weights (minus the embedding
# table, of which one row is read), plus top-k experts per MoE layer. The bound is
#   tok/s_max = measured read bandwidth (bench/mp_membw, all threads) / active bytes per token,
# and the result is reported as a fraction of it. MODEL defaults to the qwen3-30b-a3b preset in the
# q4_k_m mix (experts Q4_K, expert down projections Q6_K), generated on first use.
set -euo pipefail
moeplan=${1:?usage: bench/cpu_decode.sh MOEPLAN [MODEL]}
bindir=$(dirname "$moeplan")/..
model=${2:-/tmp/mp-bench/qwen3-30b-a3b-q4_k_m.gguf}
threads=${THREADS:-$(nproc)}
n_gen=${N_GEN:-64}
if [ ! -f "$model" ]; then
    mkdir -p "$(dirname "$model")"
    echo "cpu_decode: generating $model"
    start=$SECONDS
    "$moeplan" mkmodel --preset qwen3-30b-a3b --quant q4_k_m --threads "$threads" --quiet -o "$model"
    echo "cpu_decode: mkmodel took $((SECONDS - start)) s ($(du -h "$model" | cut -f1))"
fi
bw=$("$bindir/bench/mp_membw" --gib "${MEMBW_GIB:-8}" --threads "$threads" --reps 5)
echo "$bw"
bw_gbs=$(sed -E 's/membw: ([0-9.]+) GB\/s.*/\1/' <<<"$bw")
active=$("$moeplan" inspect --json --tensors "$model" | python3 -c '
import json, sys
d = json.load(sys.stdin)
meta = {m["key"]: m["value"] for m in d["metadata"]}
arch = meta["general.architecture"]
top_k = int(meta[arch + ".expert_used_count"])
embd = next(t for t in d["tensors"] if t["name"] == "token_embd.weight")
rows = embd["shape"][1]
active = d["non_expert_bytes"] - embd["bytes"] + embd["bytes"] // rows
active += sum(top_k * l["bytes_per_expert"] for l in d["moe_layers"])
print(active)')
echo "active weight bytes per token: $active ($(python3 -c "print(f'{$active/1e9:.3f}')") GB)"
for rep in 1 2 3; do
    "$moeplan" run -m "$model" --raw -p "The history of computing began with mechanical calculators" \
        -n "$n_gen" -t "$threads" --executor cpu 2>&1 >/dev/null | grep -i "decode" | tail -1
done | tee /tmp/mp-cpu-decode.txt
python3 - "$bw_gbs" "$active" /tmp/mp-cpu-decode.txt <<'PY'
import re, statistics, sys
bw, active = float(sys.argv[1]) * 1e9, int(sys.argv[2])
vals = []
for line in open(sys.argv[3]):
    m = re.search(r"([0-9.]+)\s*tok/s", line.split("decode", 1)[-1])
    if m:
        vals.append(float(m.group(1)))
bound = bw / active
med = statistics.median(vals)
print(f"decode tok/s: median {med:.2f} of {len(vals)} runs {vals}; bound {bound:.2f} tok/s "
      f"({bw/1e9:.1f} GB/s / {active/1e9:.3f} GB); ratio {med/bound:.2f}")
PY
