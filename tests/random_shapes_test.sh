#!/usr/bin/env bash
# tests/random_shapes_test.sh — bench/random_shapes.py as a test: 5 shapes of a fixed seed and one
# gpt-oss shape through mkmodel, collect, analyze, calibrate --quick, simulate, simulate with synthetic
# GPU costs (bench/synth_gpu_costs.py) and profile verify; fails when one fails (the script's exit
# status), when fewer than 4 went the whole way or the gpt-oss one did not. Also the bench scripts' own arguments that this
# and split_ab.sh take (and gpu_bench.sh's MODEL): a bad one is refused in one line naming it, exit status non-zero, before any
# work; bench_kernels --prefetch's list and --isa likewise, and small runs of it (the GEMV, the GEMM by
# activation rows, at a named level) that print each distance's column; `random_shapes.py --specs` gives shapes mkmodel makes. Needs MP_MOEPLAN and MP_BENCH_KERNELS (run through meson test).
set -uo pipefail
B=${MP_MOEPLAN:?MP_MOEPLAN is not set (run through meson test)}
src=${MP_SOURCE_ROOT:?MP_SOURCE_ROOT is not set (run through meson test)}
out=$(mktemp -d /tmp/mp_random_shapes_XXXXXX) || exit 1
trap 'rm -rf "$out"' EXIT
# refuse: the command, then the text its one line must hold
refuse() {
    local want=$1
    shift
    local msg rc
    msg=$("$@" 2>&1 >/dev/null)
    rc=$?
    [ "$rc" != 0 ] && [ "$(printf '%s\n' "$msg" | wc -l)" = 1 ] && [[ "$msg" == *"$want"* ]] ||
        { echo "random_shapes: '$*' gave exit $rc and '$msg', expected a non-zero exit and one line with '$want'" >&2; exit 1; }
}
refuse "N 'abc': expected a whole number of at least 1" python3 "$src/bench/random_shapes.py" "$B" "$out/x" abc
refuse "SEED '-1': expected a whole number of at least 0" python3 "$src/bench/random_shapes.py" "$B" "$out/x" 2 -1
refuse "ARMS 'split@foo': expected VAR=VALUE after '@'" env ARMS="split@foo" bash "$src/bench/split_ab.sh" "$B" "$out/x"
refuse "ARMS 'bogus': expected split, whole, off or uN" env ARMS=bogus bash "$src/bench/split_ab.sh" "$B" "$out/x"
refuse "ROUNDS 'x': expected a positive integer" env ROUNDS=x bash "$src/bench/grid_vs_run.sh" "$B" "$out/x"
refuse "MODEL '$out/none.gguf': no such file" env MODEL="$out/none.gguf" bash "$src/bench/gpu_bench.sh" "$B" "$out/x"
refuse "--top-k 9: expected at most --experts (8)" python3 "$src/bench/synth_gpu_costs.py" "$out/no.json" "$out/x" \
    --experts 8 --top-k 9
refuse "$out/no.json: [Errno 2]" python3 "$src/bench/synth_gpu_costs.py" "$out/no.json" "$out/x" --experts 8 --top-k 2
refuse "usage: bench/synth_gpu_costs.py IN OUT --experts E --top-k K" python3 "$src/bench/synth_gpu_costs.py" "$out/x"
refuse "--far-split 5: expected at most 32 / top-k (8)" python3 "$src/bench/synth_gpu_costs.py" "$out/no.json" "$out/x" \
    --experts 8 --top-k 8 --far-split 5
K=${MP_BENCH_KERNELS:?MP_BENCH_KERNELS is not set (run through meson test)}
refuse "--prefetch 0,abc: expected at most 16 distances 0..65536 in bytes, comma-separated" "$K" --prefetch 0,abc
refuse "--prefetch 70000: expected at most 16 distances" "$K" --prefetch 70000
refuse "--isa avx9: expected avx2, avx512 or amx" "$K" --isa avx9 --prefetch 0
refuse "--isa avx2 picks --prefetch's level: give --prefetch too" "$K" --isa avx2
refuse "--cols 100: expected a multiple of 256 in 256..65536" "$K" --cols 100
refuse "--cols 4096x: expected a multiple of 256" "$K" --cols 4096x
table=$("$K" --mb 1 --reps 1 --type Q8_0 --gemm 4 --cols 1536) ||
    { echo "random_shapes: bench_kernels --gemm --cols failed" >&2; exit 1; }
printf '%s\n' "$table" | grep -q 'n_cols 1536' && printf '%s\n' "$table" | grep -qE '^Q8_0 +[0-9]+ +4 ' ||
    { echo "random_shapes: bench_kernels --cols 1536 did not set the rows' length: $table" >&2; exit 1; }
# where the CPU has the amx level, the tiles' crossover line after the type's rows, naming the table's
if printf '%s\n' "$table" | grep -q 'dispatched isa amx'; then
    printf '%s\n' "$table" | tail -1 | grep -qE '^Q8_0: the tiles (ahead of avx512 from 4 rows of those timed|behind avx512 at the most rows timed) \(the table: from [0-9]+\)$' ||
        { echo "random_shapes: bench_kernels --gemm on an AMX host printed no crossover line for Q8_0: $table" >&2; exit 1; }
else
    ! printf '%s\n' "$table" | grep -q 'the tiles' ||
        { echo "random_shapes: bench_kernels --gemm without the amx level printed a crossover line: $table" >&2; exit 1; }
fi
# --isa at a level this CPU lacks: refused in one line before any output; where it has the level, a table
if [[ "$table" != *'dispatched isa amx'* ]]; then
    refuse "--isa amx: this CPU has no such level for Q8_0 (its best: " "$K" --mb 1 --reps 1 --type Q8_0 --isa amx --prefetch 0
    [ -z "$("$K" --mb 1 --reps 1 --type Q8_0 --isa amx --prefetch 0 2>/dev/null)" ] ||
        { echo "random_shapes: bench_kernels --isa amx without the level printed a table's start" >&2; exit 1; }
fi
table=$("$K" --mb 1 --reps 1 --type Q8_0 --prefetch 2048,0,4096) ||
    { echo "random_shapes: bench_kernels --prefetch failed" >&2; exit 1; }
printf '%s\n' "$table" | grep -qE '^Q8_0 +[0-9.]+ \(1\.00x\) +[0-9.]+ \([0-9.]+x\) +[0-9.]+ \([0-9.]+x\)$' ||
    { echo "random_shapes: bench_kernels --prefetch printed no row of three distances: $table" >&2; exit 1; }
table=$("$K" --mb 1 --reps 1 --type Q8_0 --gemm 4,7 --prefetch 0,2048) ||
    { echo "random_shapes: bench_kernels --gemm --prefetch failed" >&2; exit 1; }
for rows in 4 7; do
    printf '%s\n' "$table" | grep -qE "^Q8_0 +$rows +[0-9.]+ \(1\.00x\) +[0-9.]+ \([0-9.]+x\)\$" ||
        { echo "random_shapes: bench_kernels --gemm 4,7 --prefetch 0,2048 printed no row of $rows rows at two distances: $table" >&2; exit 1; }
done
table=$("$K" --mb 1 --reps 1 --type Q4_K --gemm 4 --prefetch 0,2048 --isa avx2) ||
    { echo "random_shapes: bench_kernels --isa avx2 failed" >&2; exit 1; }
printf '%s\n' "$table" | grep -q 'isa avx2;' && printf '%s\n' "$table" | grep -qE '^Q4_K +4 +[0-9.]+ \(1\.00x\)' ||
    { echo "random_shapes: bench_kernels --isa avx2 did not time the avx2 level: $table" >&2; exit 1; }
refuse "N '0': expected a whole number of at least 1" python3 "$src/bench/random_shapes.py" --specs "$B" 0 3
[ ! -e "$out/x" ] || { echo "random_shapes: a refused run wrote $out/x" >&2; exit 1; }
# --specs: the mkmodel flags of seed 3's 5 shapes and its gpt-oss one that mkmodel accepts, ';'
# between them, each of which mkmodel then makes (bench/shape_sweep.sh's SHAPES)
specs=$(python3 "$src/bench/random_shapes.py" --specs "$B" 5 3) ||
    { echo "random_shapes: --specs failed" >&2; exit 1; }
IFS=';' read -r -a spec_list <<<"$specs"
[ "${#spec_list[@]}" -ge 4 ] || { echo "random_shapes: --specs gave ${#spec_list[@]} shapes, expected at least 4: $specs" >&2; exit 1; }
[[ "${spec_list[-1]}" == "--arch gpt-oss "* ]] || { echo "random_shapes: --specs' last shape is not gpt-oss: $specs" >&2; exit 1; }
for spec in "${spec_list[@]}"; do
    # shellcheck disable=SC2086
    "$B" mkmodel --quiet --force -o "$out/spec.gguf" $spec 2>"$out/spec.err" ||
        { echo "random_shapes: mkmodel refused --specs' '$spec': $(cat "$out/spec.err")" >&2; exit 1; }
done
rm -f "$out/spec.gguf" "$out/spec.err"
python3 "$src/bench/random_shapes.py" "$B" "$out" 5 3 >"$out/stdout" 2>&1
rc=$?
cat "$out/stdout"
[ "$rc" = 0 ] || { echo "random_shapes: a shape failed (exit $rc)" >&2; exit 1; }
ok=$(grep -c '^s[0-9]* ok:' "$out/stdout")
[ "$ok" -ge 4 ] || { echo "random_shapes: $ok of 6 shapes went the whole way, expected at least 4" >&2; exit 1; }
grep -q '^s005 ok: --arch gpt-oss ' "$out/stdout" ||
    { echo "random_shapes: the gpt-oss shape (s005) did not go the whole way" >&2; exit 1; }
# some shape's synthetic grid counted far work in parts of an expert, and its simulate ran with it
split=$(python3 -c 'import json,sys
n = 0
for p in sys.argv[1:]:
    d = json.load(open(p)).get("decode_layers", {})
    n += d.get("far_split", 1) > 1 and any(q["far"] % d["far_split"] for q in d["points"] if q["far_on"])
print(n)' "$out"/s*/synth.json)
[ "$split" -ge 1 ] || { echo "random_shapes: no shape's synthetic grid had split far units" >&2; exit 1; }
