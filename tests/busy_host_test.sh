#!/usr/bin/env bash
# tests/busy_host_test.sh — the busy-host bench's bad input: bench/host_load's arguments and
# bench/busy_host.sh's knobs, each refused with exit 2 (host_load) or 1 (busy_host.sh) and one error
# line naming what was expected, before any load starts or any decode runs; and busy_host.sh's rows
# and tables with its arms, on a stand-in for moeplan's bench. Needs MP_MOEPLAN,
# MP_HOST_LOAD and MP_SOURCE_ROOT (tests/meson.build sets them); no GPU: every case stops before
# the first CUDA call.
set -uo pipefail
B=${MP_MOEPLAN:?MP_MOEPLAN is not set (run through meson test)}
L=${MP_HOST_LOAD:?MP_HOST_LOAD is not set}
ROOT=${MP_SOURCE_ROOT:?MP_SOURCE_ROOT is not set}
MODEL=$ROOT/tests/fixtures/hf/qwen3moe-tiny-f32.gguf
D=$(mktemp -d /tmp/mp_busy_host_XXXXXX)
trap 'rm -rf "$D"' EXIT
fails=0 cases=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect STATUS NEEDLE CMD...: exit STATUS, stderr one line holding NEEDLE, nothing under $D/out
expect() {
    local want=$1 needle=$2
    shift 2
    cases=$((cases + 1))
    timeout 20 "$@" >"$D/stdout" 2>"$D/stderr"
    local st=$?
    [ "$st" = "$want" ] || { fail "$*: exit $st, expected $want: $(cat "$D/stderr")"; return; }
    [ "$(wc -l <"$D/stderr")" = 1 ] || { fail "$*: expected one error line, got: $(cat "$D/stderr")"; return; }
    grep -qF -- "$needle" "$D/stderr" || fail "$*: '$needle' not in: $(cat "$D/stderr")"
    [ ! -e "$D/out" ] || { fail "$*: wrote $D/out"; rm -rf "$D/out"; }
}

expect 2 "unknown argument '--bogus'" "$L" --bogus
expect 2 "--mode 'ram': expected d2h, cpu or wr" "$L" --mode ram
expect 2 "expected --gib in 0.25..1024" "$L" --gib 0.1
expect 2 "--threads in 1..1024" "$L" --threads 0
expect 2 "--skip in 0..1024" "$L" --skip -1
expect 2 "--seconds >= 0" "$L" --seconds -1
expect 2 "--threads 1024 and --skip 1: this host has" "$L" --mode cpu --threads 1024 --skip 1 --gib 1
cases=$((cases + 1))
"$L" --help | grep -q "usage: host_load" || fail "host_load --help: no usage"
# the core neighbours run without a GPU: each moves bytes for half a second and says how many
for mode in cpu wr; do
    cases=$((cases + 1))
    timeout 20 "$L" --mode $mode --threads 1 --gib 0.25 --seconds 0.5 2>"$D/stderr" || fail "host_load --mode $mode: exit $?"
    if ! grep -qE "^host_load: $mode 1 threads on CPUs [0-9]+-[0-9]+ [0-9.]+ GB/s over 0\.[5-9]" "$D/stderr" ||
        grep -qE " 0\.0 GB/s" "$D/stderr"; then
        fail "host_load --mode $mode: $(cat "$D/stderr")"
    fi
done

# busy_host.sh with these knobs, then the case's (env: the later setting wins)
bh=(env MOEPLAN="$B" HOST_LOAD="$L" MODEL="$MODEL" OUT="$D/out")
S=$ROOT/bench/busy_host.sh
expect 1 "LOADS 'ram': expected none, noneN, or d2h, cpuN and wrN joined by '+'" "${bh[@]}" LOADS="none ram" bash "$S"
expect 1 "LOADS 'wr0': expected none, noneN, or d2h, cpuN and wrN joined by '+'" "${bh[@]}" LOADS="wr0" bash "$S"
expect 1 "LOADS 'd2h+': an empty part" "${bh[@]}" LOADS="d2h+" bash "$S"
# readers on every CPU of this host (parts of at most 99), leaving moeplan none
all=$(nproc) every=
while [ "$all" -gt 0 ]; do
    n=$((all < 99 ? all : 99))
    every=${every:+$every+}cpu$n
    all=$((all - n))
done
expect 1 "LOADS '$every': expected fewer than this host's" "${bh[@]}" LOADS="$every" bash "$S"
expect 1 "LOADS 'cpu1+wr$(($(nproc) - 1))': expected fewer than this host's" "${bh[@]}" LOADS="cpu1+wr$(($(nproc) - 1))" bash "$S"
expect 1 "ARMS 'x@lower=1': expected NAME or NAME@VAR=VALUE" "${bh[@]}" ARMS="on x@lower=1" bash "$S"
expect 1 "ARMS 'on on@MP_POOL_PIN=1': expected each arm's NAME once" "${bh[@]}" ARMS="on on@MP_POOL_PIN=1" bash "$S"
expect 1 "ROUNDS '0': expected a positive integer" "${bh[@]}" ROUNDS=0 bash "$S"
expect 1 "MODEL: expected an existing GGUF file" "${bh[@]}" MODEL="$D/missing.gguf" bash "$S"
expect 1 "COSTS '$D/none.json': no such file" "${bh[@]}" COSTS="$D/none.json" bash "$S"
expect 1 "host_load binary '$D/no-load' not found" "${bh[@]}" HOST_LOAD="$D/no-load" LOADS="none d2h" bash "$S"

# the rows and tables on a stand-in for moeplan (no GPU): a bench row whose tok/s is 100, or 110
# under the second arm's setting, alternated over two rounds; the table names each row's arm and
# gives the second arm over the first
cases=$((cases + 1))
cat >"$D/fake-moeplan" <<'FAKE'
#!/usr/bin/env bash
t=100; [ "${MP_POOL_PIN:-}" = 1 ] && t=110
printf '{"rows": [{"threads": 2, "median_tok_s": %s, "cpu_expert_gbs": 50, "routes_gpu": 3, "routes_cpu": 1, "routes_far": 0, "routes_split": 0, "bound": {"host_read_gbs": 80, "hostbus_gbs": 120, "share_of_hostbus_bound": 0.9, "share_of_serial_bound": 0.8}}]}\n' "$t"
FAKE
chmod +x "$D/fake-moeplan"
env MOEPLAN="$D/fake-moeplan" MODEL="$MODEL" OUT="$D/ok" LOADS=none PLACEMENTS=layers:2 ROUNDS=2 \
    ARMS="base pin@MP_POOL_PIN=1" bash "$S" >"$D/stdout" 2>"$D/stderr" || fail "busy_host.sh with a stand-in bench: $(tail -n 2 "$D/stderr")"
md=$D/ok/busy-host.md
for want in "| layers:2 | none | base | 1 | 2 | 100.00 |" "| layers:2 | none | pin | 2 | 2 | 110.00 |" \
    "| layers:2 | none | 1.100 |"; do
    grep -qF -- "$want" "$md" 2>/dev/null || fail "busy-host.md lacks '$want': $(cat "$md" 2>/dev/null)"
done
[ "$(find "$D/ok/bench" -name "*.json" 2>/dev/null | wc -l)" = 4 ] || fail "expected 4 rows (2 arms x 2 rounds): $(ls "$D/ok/bench")"

# a row beside a writer on the last CPU (the stand-in on the others): the writer runs while the row
# does and leaves its line in the load's log
cases=$((cases + 1))
env MOEPLAN="$D/fake-moeplan" HOST_LOAD="$L" MODEL="$MODEL" OUT="$D/wr" LOADS="none1 wr1" PLACEMENTS=layers:2 \
    ROUNDS=1 bash "$S" >"$D/stdout" 2>"$D/stderr" || fail "busy_host.sh beside wr1: $(tail -n 2 "$D/stderr")"
grep -qE "^\| layers:2 \| wr1 \| default \| 1 \| 2 \| 100\.00 \| [0-9]+\.[0-9] \|" "$D/wr/busy-host.md" 2>/dev/null ||
    fail "busy-host.md lacks the wr1 row with the writer's GB/s: $(cat "$D/wr/busy-host.md" 2>/dev/null)"
cat "$D"/wr/bench/*.load 2>/dev/null | grep -qE "^host_load: wr 1 threads on CPUs $(($(nproc) - 1))-$(($(nproc) - 1)) " ||
    fail "no writer's line in the load log: $(cat "$D"/wr/bench/*.load 2>/dev/null)"

echo "busy_host_test: $cases cases, $fails failed"
[ "$fails" = 0 ]
