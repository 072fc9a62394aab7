#!/usr/bin/env bash
# tests/amx_rows_ab_test.sh — bench/amx_rows_ab.sh: its bad knobs each refused with exit 2 and one
# line naming what was expected before anything is written; a run on the tiny model with three arms
# (the table, a list, calibrate's choice) over two rounds writes each arm's bench rows under names
# of letters, digits and '-', and a table with a row per prompt and round, each arm's tok/s and its
# ratio to the first arm, and a median line per arm and prompt; an arm whose list moeplan refuses
# stops the run with exit 1 naming it. Needs MP_MOEPLAN and MP_SOURCE_ROOT (tests/meson.build).
set -uo pipefail
B=${MP_MOEPLAN:?MP_MOEPLAN is not set (run through meson test)}
ROOT=${MP_SOURCE_ROOT:?MP_SOURCE_ROOT is not set}
S=$ROOT/bench/amx_rows_ab.sh
D=$(mktemp -d /tmp/mp_amx_rows_ab_XXXXXX)
trap 'rm -rf "$D"' EXIT
fails=0 cases=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$B" mkmodel --preset tiny --quiet -o "$D/tiny.gguf" || { echo "FAIL: mkmodel"; exit 1; }

# expect STATUS NEEDLE VAR=VALUE...: the script under those settings exits STATUS with one stderr
# line holding NEEDLE and writes nothing under $D/out
expect() {
    local want=$1 needle=$2
    shift 2
    cases=$((cases + 1))
    env MODEL="$D/tiny.gguf" THREADS=1 "$@" timeout 60 bash "$S" "$B" "$D/out" >"$D/stdout" 2>"$D/stderr"
    local st=$?
    [ "$st" = "$want" ] || { fail "$*: exit $st, expected $want: $(cat "$D/stderr")"; return; }
    [ "$(wc -l <"$D/stderr")" = 1 ] || { fail "$*: expected one error line, got: $(cat "$D/stderr")"; return; }
    grep -qF -- "$needle" "$D/stderr" || fail "$*: '$needle' not in: $(cat "$D/stderr")"
    [ ! -e "$D/out" ] || { fail "$*: wrote $D/out"; rm -rf "$D/out"; }
}
expect 2 "LAYERS 'x': expected a whole number 1..99999" LAYERS=x
expect 2 "ROUNDS '0': expected a whole number 1..99999" ROUNDS=0
expect 2 "PP '6a': expected a whole number 1..99999" PP="8 6a"
expect 2 "THREADS '-1': expected a whole number 1..99999" THREADS=-1
expect 2 "ARMS 'table': expected two arms or more" ARMS=table

# a run: three arms, two rounds, one prompt length
cases=$((cases + 1))
if MODEL="$D/tiny.gguf" THREADS=1 ROUNDS=2 PP=8 ARMS="table Q4_K:5,Q6_K:5 calibrated" \
    bash "$S" "$B" "$D/run" >"$D/stdout" 2>"$D/stderr"; then
    t=$D/run/amx-ab.md
    for a in table Q4_K-5-Q6_K-5 calibrated; do
        for r in 1 2; do
            [ -s "$D/run/$a-pp8-$r.json" ] || fail "no bench rows $a-pp8-$r.json"
        done
    done
    grep -q "^calibrate: AMX rows\|AMX rows not chosen" "$D/run/calibrate.log" || fail "calibrate chose no AMX rows: $(tail -2 "$D/run/calibrate.log")"
    head -1 "$t" | grep -qF "| prompt | round | table tok/s | Q4_K:5,Q6_K:5 tok/s | calibrated tok/s | Q4_K:5,Q6_K:5 / table | calibrated / table |" ||
        fail "table header: $(head -1 "$t")"
    [ "$(grep -c '^| pp8 | [12] | [0-9.]* | [0-9.]* | [0-9.]* | [0-9.]* | [0-9.]* |$' "$t")" = 2 ] || fail "table rows: $(cat "$t")"
    [ "$(grep -c ' / table, pp8: median [0-9.]* over 2 rounds' "$t")" = 2 ] || fail "median lines: $(cat "$t")"
    # the rows ran under their arm's value
    python3 - "$D/run" <<'PY' || fail "an arm's bench rows do not carry its MP_AMX_ROWS"
import json, sys
d = sys.argv[1]
want = {"table": "", "Q4_K-5-Q6_K-5": "Q4_K:5,Q6_K:5",
        "calibrated": json.load(open(f"{d}/costs.json"))["device"]["knobs"]["MP_AMX_ROWS"]}
for arm, value in want.items():
    for r in (1, 2):
        row = json.load(open(f"{d}/{arm}-pp8-{r}.json"))["rows"][0]
        assert row["knobs"]["MP_AMX_ROWS"] == value, (arm, r, row["knobs"]["MP_AMX_ROWS"], value)
PY
else
    fail "three arms: exit $?: $(tail -3 "$D/stderr")"
fi

# an arm moeplan refuses: the run stops naming the arm
cases=$((cases + 1))
MODEL="$D/tiny.gguf" THREADS=1 ROUNDS=1 PP=8 ARMS="table Q3_K:4" bash "$S" "$B" "$D/bad" >"$D/stdout" 2>"$D/stderr"
st=$?
[ "$st" = 1 ] || fail "ARMS with Q3_K:4: exit $st, expected 1"
grep -qF "bench failed (Q3_K:4, pp8, round 1): moeplan: MP_AMX_ROWS=Q3_K:4: Q3_K has no AMX tile GEMM" "$D/stderr" ||
    fail "ARMS with Q3_K:4: $(cat "$D/stderr")"

echo "$cases cases, $fails failed"
[ "$fails" = 0 ]
