#!/usr/bin/env bash
# tests/hostile_gpu.sh — bad placement inputs handed to the GPU executor. Every case runs twice,
# `--executor cpu` then `--executor gpu`, with the same model and the same bad file; both must exit
# 1 with exactly one error line, the same line, within the time limit (a hang is a failure), and
# the bad file must be unchanged. The inputs: FIFOs, /dev/zero and directories as files, STRP
# profiles truncated, of another geometry, with a pair out of range or twice, placement files with
# a layer missing, an expert out of range, a reversed range, a NUL byte, and a route-replay trace of
# another geometry. Exit 77 (meson: skipped) with the reason where no CUDA device can be used.
# Needs MP_MOEPLAN and MP_SOURCE_ROOT (tests/meson.build sets both).
set -uo pipefail
B=${MP_MOEPLAN:?MP_MOEPLAN is not set (run through meson test)}
ROOT=${MP_SOURCE_ROOT:?MP_SOURCE_ROOT is not set}
MODEL=$ROOT/tests/fixtures/hf/qwen3moe-tiny-f32.gguf
D=$(mktemp -d /tmp/mp_hostile_gpu_XXXXXX)
trap 'rm -rf "$D"' EXIT
cd "$D" || exit 1

if ! timeout 120 "$B" run -m "$MODEL" -p hi -n 1 --executor gpu >probe.out 2>probe.err; then
    echo "SKIP: the GPU executor cannot run here: $(grep -m1 'error' probe.err)"
    exit 77
fi

# the model's MoE geometry, from inspect
read -r L E <<<"$("$B" inspect --json "$MODEL" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["moe_layers"]), d["moe_layers"][0]["experts"])')"
[ -n "$E" ] || { echo "FAIL: inspect --json gave no MoE geometry"; exit 1; }

fails=0 cases=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# case FLAG FILE: both executors refuse FILE given as FLAG with the same single error line
case_() {
    local flag=$1 file=$2 st_cpu st_gpu
    cases=$((cases + 1))
    local before=""
    [ -f "$file" ] && before=$(sha256sum "$file")
    timeout 60 "$B" run -m "$MODEL" -p hi -n 1 --executor cpu "$flag" "$file" >/dev/null 2>cpu.err
    st_cpu=$?
    timeout 120 "$B" run -m "$MODEL" -p hi -n 1 --executor gpu "$flag" "$file" >/dev/null 2>gpu.err
    st_gpu=$?
    if [ "$st_gpu" = 124 ]; then
        fail "hung (timeout) on the GPU executor: $flag $file"
    elif [ "$st_cpu" != 1 ] || [ "$st_gpu" != 1 ]; then
        fail "exit $st_cpu (cpu) / $st_gpu (gpu), expected 1 / 1: $flag $file :: $(head -c 300 gpu.err)"
    elif [ "$(grep -c ': error: ' gpu.err)" != 1 ]; then
        fail "$(grep -c ': error: ' gpu.err) error lines on the GPU executor, expected one: $flag $file :: $(head -c 300 gpu.err)"
    elif [ "$(grep ': error: ' cpu.err)" != "$(grep ': error: ' gpu.err)" ]; then
        fail "the executors refuse $flag $file differently :: cpu: $(grep ': error: ' cpu.err) :: gpu: $(grep ': error: ' gpu.err)"
    fi
    if [ -n "$before" ] && [ "$(sha256sum "$file")" != "$before" ]; then
        fail "changed: $file"
    fi
}

# strp NAME VERSION N_LAYERS N_EXPERTS SLOTS N_RANKED PAIRS... (PAIRS: layer:expert), written by
# tests/strp_compat.py's writer (the published layout, no moeplan code); N_RANKED is the count of
# PAIRS, as the writer sets it
strp() {
    [ "$6" = $(($# - 6)) ] || { echo "FAIL: strp $1: n_ranked $6 but $(($# - 6)) pairs"; exit 1; }
    python3 "$ROOT/tests/strp_compat.py" write "$1" "$2" "$3" "$4" "$5" "${@:7}"
}

mkfifo fifo
mkdir adir
for bad in fifo /dev/zero adir; do
    case_ --profile "$bad"
    case_ --placement-file "$bad"
    case_ --route-replay "$bad"
done

# a valid profile first: both executors must accept it (else the refusals below prove nothing)
strp good.strp 1 "$L" "$E" 2 2 0:1 1:0
for ex in cpu gpu; do
    cases=$((cases + 1))
    timeout 120 "$B" run -m "$MODEL" -p hi -n 1 --executor $ex --profile good.strp >/dev/null 2>good.err ||
        fail "a valid profile was refused by the $ex executor: $(head -c 300 good.err)"
done
head -c 13 good.strp >truncated.strp
case_ --profile truncated.strp
strp layers.strp 1 $((L + 1)) "$E" 2 2 0:1 1:0
case_ --profile layers.strp
strp experts.strp 1 "$L" $((E * 2)) 2 2 0:1 1:0
case_ --profile experts.strp
strp range.strp 1 "$L" "$E" 2 2 0:1 0:"$E"
case_ --profile range.strp
strp twice.strp 1 "$L" "$E" 2 2 0:1 0:1
case_ --profile twice.strp
strp version.strp 7 "$L" "$E" 2 2 0:1 1:0
case_ --profile version.strp

# placement files: a valid one, then one fault each
{ for ((l = 0; l < L; l++)); do echo "$l: 0-1"; done; } >good.txt
for ex in cpu gpu; do
    cases=$((cases + 1))
    timeout 120 "$B" run -m "$MODEL" -p hi -n 1 --executor $ex --placement-file good.txt >/dev/null 2>good.err ||
        fail "a valid placement file was refused by the $ex executor: $(head -c 300 good.err)"
done
head -n $((L - 1)) good.txt >missing.txt
case_ --placement-file missing.txt
{ cat missing.txt; echo "$((L - 1)): $E"; } >expert.txt
case_ --placement-file expert.txt
{ cat missing.txt; echo "$((L - 1)): 3-1"; } >reversed.txt
case_ --placement-file reversed.txt
{ cat missing.txt; printf '%d: 0\0001\n' $((L - 1)); } >nul.txt
case_ --placement-file nul.txt

# a route-replay trace of another geometry (twice the experts)
printf 'seq,pos,layer,e0,e1,w0,w1\n0,0,0,0,%d,0.5,0.3\n' $((E * 2 - 1)) >wide.csv
"$B" import csv wide.csv --trace wide.db --experts $((E * 2)) >/dev/null 2>&1 || fail "import of wide.csv failed"
case_ --route-replay wide.db

echo "hostile GPU inputs: $cases cases, $fails failures"
[ "$fails" = 0 ]
