#!/usr/bin/env bash
# tests/fuzz/run_long.sh — long libFuzzer runs of prebuilt fuzz binaries on a machine with many
# cores (the GPU machine has no clang: build them where clang is, `CC=clang meson setup build-fuzz
# -Dfuzz=true -Dcuda=disabled && ninja -C build-fuzz tests/fuzz/fuzz_NAME`, and carry the binaries).
#
#   [FUZZ_BIN=build-fuzz/tests/fuzz] [FUZZ_SECONDS=600] [FUZZ_FORKS=cores / targets]
#   [FUZZ_FORKS_trace=N ...] [FUZZ_MAX_LEN_trace=2048 ...] bash tests/fuzz/run_long.sh RESULTS_DIR NAME...
#
# Each target runs at once beside the others for FUZZ_SECONDS, in libFuzzer's fork mode with
# FUZZ_FORKS processes, on the corpus tests/fuzz/corpus-run/NAME (kept between runs; git-ignores
# it) with tests/fuzz/seeds/NAME read only, carrying on past a crash so that one run finds all it
# can. RESULTS_DIR/NAME/ receives the log, the artifacts (crash-*, leak-*, timeout-*, oom-*) and
# summary.txt (executions, coverage, corpus, artifacts, peak RSS). RESULTS_DIR/done is written when
# every target has finished, so that a caller that started this in the background can wait for it.
# Exit status: 0 when no target left an artifact, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/../.."
results=${1:?usage: run_long.sh RESULTS_DIR NAME...}
shift
[ $# -gt 0 ] || { echo "run_long.sh: error: name at least one target (e.g. trace strp)" >&2; exit 2; }
bin=${FUZZ_BIN:-build-fuzz/tests/fuzz}
secs=${FUZZ_SECONDS:-600}
forks=${FUZZ_FORKS:-$(($(nproc) / $#))}
[ "$forks" -ge 1 ] || forks=1
for name in "$@"; do
    [ -x "$bin/fuzz_$name" ] || { echo "run_long.sh: error: $bin/fuzz_$name: no such fuzz binary (build it first)" >&2; exit 2; }
    [ -d "tests/fuzz/seeds/$name" ] || { echo "run_long.sh: error: tests/fuzz/seeds/$name: no seed folder" >&2; exit 2; }
done
mkdir -p "$results" || exit 2
rm -f "$results/done"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
timer=() # peak RSS of the whole fork tree where GNU time is installed
[ -x /usr/bin/time ] && timer=(/usr/bin/time -v)
pids=()
for name in "$@"; do
    out=$results/$name
    mkdir -p "$out" "tests/fuzz/corpus-run/$name"
    forks_var=FUZZ_FORKS_$name
    nf=${!forks_var:-$forks}
    maxlen_var=FUZZ_MAX_LEN_$name
    maxlen=${!maxlen_var:-}
    [ -n "$maxlen" ] || case $name in trace) maxlen=2048 ;; prompts | import_* | placement | costs) maxlen=4096 ;; *) maxlen=65536 ;; esac
    echo "[run_long $(date +%H:%M:%S)] fuzz_$name: $secs s, $nf processes, -max_len=$maxlen"
    (
        start=$(ls "tests/fuzz/corpus-run/$name" | wc -l)
        "${timer[@]}" "$bin/fuzz_$name" -fork="$nf" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
            -max_total_time="$secs" -max_len="$maxlen" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
            -artifact_prefix="$out/" "tests/fuzz/corpus-run/$name" "tests/fuzz/seeds/$name" >"$out/log.txt" 2>&1
        st=$?
        {
            echo "target fuzz_$name, $secs s, -fork=$nf, -max_len=$maxlen, exit $st"
            echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
            echo "corpus: $start inputs at the start, $(ls "tests/fuzz/corpus-run/$name" | wc -l) at the end"
            grep -E '^#[0-9]+' "$out/log.txt" | tail -1
            grep -E 'stat::number_of_executed_units|stat::peak_rss_mb|INFO: fuzzed for' "$out/log.txt" | tail -3
            grep -m1 'Maximum resident set size' "$out/log.txt"
            echo "sanitizer reports: $(grep -c -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$out/log.txt")"
            echo "artifacts: $(find "$out" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)"
        } >"$out/summary.txt"
    ) &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
cat "$results"/*/summary.txt
date >"$results/done"
! find "$results" -mindepth 2 -maxdepth 2 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | grep -q .
