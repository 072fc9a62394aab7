#!/usr/bin/env bash
# tests/bench_cuda_args_test.sh — bench/bench_cuda's bad arguments: each refused with exit 2, one
# error line on stderr naming the argument and what was expected, and the usage on stdout, before
# any CUDA call (so no GPU is needed). Needs MP_BENCH_CUDA (tests/meson.build sets it).
set -uo pipefail
B=${MP_BENCH_CUDA:?MP_BENCH_CUDA is not set (run through meson test)}
D=$(mktemp -d /tmp/mp_bench_cuda_args_XXXXXX)
trap 'rm -rf "$D"' EXIT
fails=0 cases=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect NEEDLE ARGS...: exit 2, stderr one line holding NEEDLE, the usage on stdout
expect() {
    local needle=$1
    shift
    cases=$((cases + 1))
    timeout 20 "$B" "$@" >"$D/stdout" 2>"$D/stderr"
    local st=$?
    [ "$st" = 2 ] || { fail "$*: exit $st, expected 2: $(cat "$D/stderr")"; return; }
    [ "$(wc -l <"$D/stderr")" = 1 ] || { fail "$*: expected one error line, got: $(cat "$D/stderr")"; return; }
    grep -qF -- "$needle" "$D/stderr" || fail "$*: '$needle' not in: $(cat "$D/stderr")"
    grep -q '^usage: bench_cuda' "$D/stdout" || fail "$*: no usage on stdout"
}

expect "argument 3 'Q9_K/Q4_K': expected GATE/DOWN weight types" 10 prefill Q9_K/Q4_K
expect "argument 4 'Q8_K/Q4_K': expected GATE/DOWN weight types" 10 prefill Q3_K/Q4_K Q8_K/Q4_K
expect "argument 3 'Q3_K': expected GATE/DOWN weight types" 10 prefill Q3_K
expect "argument 3 'Q3_K/': expected GATE/DOWN weight types" 10 prefill Q3_K/
expect "argument 3 'Q3_K_SOMETHING_LONG/Q4_K': expected" 10 prefill Q3_K_SOMETHING_LONG/Q4_K
expect "argument 3 'Q3_K/Q4_K': only prefill takes GATE/DOWN type pairs" 10 decode Q3_K/Q4_K
expect "argument 11 'Q4_0/Q4_0': at most 8 GATE/DOWN type pairs" 10 prefill Q4_K/Q6_K Q4_K/Q6_K Q4_K/Q6_K \
    Q4_K/Q6_K Q4_K/Q6_K Q4_K/Q6_K Q4_K/Q6_K Q4_K/Q6_K Q4_0/Q4_0
echo "bench_cuda arguments: $cases cases, $fails failed"
[ "$fails" = 0 ]
