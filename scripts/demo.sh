#!/usr/bin/env bash
# scripts/demo.sh — the README's first command: the main job end to end on a small generated model.
# Installs what is missing, builds, then:
#   mkmodel (tiny qwen3moe, skewed routers) -> inspect -> collect a routing trace over
#   examples/prompts.jsonl -> analyze it (report/) -> calibrate this machine's costs ->
#   simulate placements under GPU budgets and emit an STRP profile -> inspect and verify it ->
#   generate text with the profile's placement (the GPU executor where a GPU is usable) ->
#   `moeplan plan`: the same budget's profile made and checked against a measured decode.
# On a machine without a GPU, calibrate measures the CPU side only, so the simulation uses the
# cost file measured on an H200 for this same model (examples/costs-h200-tiny.json).
# Everything it writes goes to out/ (git-ignored). On the GPU machine, which reaches no package
# registry, `bash scripts/gpu.sh demo` runs it with DEMO_BUILD=build-gpu (a build made there, no
# setup step).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DEMO_BUILD:-}" ]; then
    bash scripts/setup.sh
    bash scripts/build.sh build
fi
mp=${DEMO_BUILD:-build}/cli/moeplan
mkdir -p out
step() { printf '\n=== %s\n' "$*"; }

step "mkmodel: a tiny Qwen3-MoE with skewed routing"
$mp mkmodel --preset tiny -o out/tiny.gguf --force
step "inspect"
$mp inspect out/tiny.gguf | tail -12
step "collect: routing + timing of every prompt into out/trace.db"
$mp collect -m out/tiny.gguf --prompts examples/prompts.jsonl --trace out/trace.db --force --no-progress
step "analyze: popularity, coverage, locality -> out/report/report.html"
$mp analyze out/trace.db --model out/tiny.gguf --out out/report --force
python3 - <<'PY'
import json
s = json.load(open("out/report/summary.json"))
print("summary.json keys:", ", ".join(sorted(s)[:12]))
PY
step "calibrate: this machine's costs -> out/costs.json"
$mp calibrate -m out/tiny.gguf --out out/costs.json --quick --force
costs=out/costs.json
if python3 -c 'import json,sys; sys.exit(0 if json.load(open("out/costs.json")).get("missing") else 1)'; then
    costs=examples/costs-h200-tiny.json
    echo "(no GPU here: simulating with $costs, measured on an H200 for this model)"
fi
step "simulate: placements under GPU budgets -> out/profile.strp"
# a budget that holds what the runtime keeps on the GPU besides experts at run's default context
# (weights, KV cache, scratch: bench's gpu_fixed_bytes, the same count as --gpu-budget's) and about
# a third of the experts
fixed=$($mp bench -m out/tiny.gguf -p 0 -n 1 -r 1 --ctx 512 --executor cpu -o json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["rows"][0]["gpu_fixed_bytes"])')
budget=$($mp inspect --json out/tiny.gguf | python3 -c '
import json, sys
print(int(sys.argv[1]) + json.load(sys.stdin)["expert_bytes"] // 3)' "$fixed")
$mp simulate out/trace.db -m out/tiny.gguf --costs "$costs" --budget "$budget" \
    --emit-profile out/profile.strp --json out/simulate.json --force
step "profile: inspect and verify against the model"
$mp profile inspect out/profile.strp | head -20
$mp profile verify out/profile.strp -m out/tiny.gguf
step "run: generate text with the profile's placement"
echo "(the tiny model's weights are random: its text is gibberish by design; what the run shows is"
echo " the placement working and the tokens per second)"
exec_flag=()
if [ "$costs" != out/costs.json ]; then
    exec_flag=(--executor cpu)
    echo "(no GPU here: the CPU executor runs every expert; the profile's placement is only checked)"
fi
$mp run -m out/tiny.gguf -p "Explain mixture of experts" -n 32 --profile out/profile.strp --gpu-budget "$budget" \
    --costs "$costs" "${exec_flag[@]}"
step "plan: the same budget's profile made and checked against a measured decode, in one command"
$mp plan out/trace.db -m out/tiny.gguf --costs "$costs" --budget "$budget" -o out/plan.strp --force \
    --verify-tokens 32 "${exec_flag[@]}" | tail -4
