#!/usr/bin/env bash
# tests/hostile.sh — the hostile-input suite: what a user (or an accident) can hand every command.
# FIFOs, /dev/zero and directories where files belong; outputs that are inputs; existing outputs
# without --force; a file-size limit (ulimit -f) under every writer; kill -9 in the middle of a
# collect, an analyze and a trace materialize. Each case asserts the exit status, one clear error line, pre-existing
# files byte for byte, and no temporaries left (after kill -9: the old output untouched, and what
# the killed run left refused by the analyzer). Needs MP_MOEPLAN and MP_SOURCE_ROOT
# (tests/meson.build sets both). Every command runs under `timeout`: a hang is a failure, not a
# stuck CI.
set -uo pipefail
B=${MP_MOEPLAN:?MP_MOEPLAN is not set (run through meson test)}
ROOT=${MP_SOURCE_ROOT:?MP_SOURCE_ROOT is not set}
MODEL=$ROOT/tests/fixtures/hf/qwen3moe-tiny-f32.gguf
COSTS_SRC=$ROOT/tests/fixtures/costs/fixture.json
D=$(mktemp -d /tmp/mp_hostile_XXXXXX)
trap 'rm -rf "$D"' EXIT
cd "$D" || exit 1
fails=0 cases=0

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# run EXPECTED_STATUS NEEDLE CMD...: the status, and stderr holding exactly one error line with
# NEEDLE (notes may come before it).
run() {
    local want=$1 needle=$2
    shift 2
    cases=$((cases + 1))
    timeout 20 "$@" >out.txt 2>err.txt
    local st=$?
    local errors
    errors=$(grep -c ': error: ' err.txt)
    if [ "$st" = 124 ]; then
        fail "hung (timeout): $*"
    elif [ "$st" != "$want" ]; then
        fail "exit $st, expected $want: $* :: $(head -c 300 err.txt)"
    elif [ "$want" != 0 ] && [ "$errors" != 1 ]; then
        fail "$errors error lines, expected one: $* :: $(head -c 300 err.txt)"
    elif [ -n "$needle" ] && ! grep -qF -- "$needle" err.txt; then
        fail "stderr lacks '$needle': $* :: $(head -c 300 err.txt)"
    fi
}

snapshot() { sha256sum "$@" 2>/dev/null | sort > snap.txt; }
unchanged() {
    sha256sum $(cut -d' ' -f3 snap.txt) 2>/dev/null | sort | cmp -s - snap.txt || fail "changed: $*"
}
no_temporaries() {
    local left
    left=$(find . -name '*.tmp.*' -o -name '*.old.*' -o -name '*-wal' -o -name '*-shm' -o -name '*-journal' -o -name '*.partial-*')
    [ -z "$left" ] || { fail "temporaries left ($*): $left"; rm -rf $left; }
}

# ---- inputs to work with ----
cp "$COSTS_SRC" costs.json
printf 'seq,pos,layer,e0,e1,w0,w1\n0,0,0,0,1,0.5,0.3\n0,0,1,2,3,0.6,0.2\n0,1,0,0,2,0.5,0.3\n0,1,1,2,0,0.6,0.2\n1,0,0,0,3,0.5,0.3\n1,0,1,2,1,0.6,0.2\n' > r.csv
run 0 "" "$B" import csv r.csv --trace t.db --experts 4
printf '"Hello world"\n{"prompt": "What is a mixture of experts?", "max_tokens": 4}\n' > p.jsonl
SIM="--costs costs.json --expert Q4_K --budget 3000000B --non-expert-bytes 1000000"
mkfifo fifo
mkdir adir

# ---- FIFOs, /dev/zero, directories: refused at once, never a blocking open ----
for bad in fifo /dev/zero adir; do
    kind="expected a regular file"
    run 1 "$kind" "$B" inspect "$bad"
    run 1 "$kind" "$B" profile inspect "$bad"
    run 1 "$kind" "$B" analyze "$bad" --out rep
    run 1 "$kind" "$B" analyze "$bad" --validate-only
    run 1 "$kind" "$B" simulate "$bad" $SIM
    run 1 "$kind" "$B" simulate t.db --costs "$bad" --budget 1GiB
    run 1 "$kind" "$B" run -m "$bad" -p hi -n 1
    run 1 "$kind" "$B" run -m "$MODEL" -f "$bad" -n 1
    run 1 "$kind" "$B" run -m "$MODEL" -p hi -n 1 --raw --route-replay "$bad"
    run 1 "$kind" "$B" run -m "$MODEL" -p hi -n 1 --executor cpu --profile "$bad"
    run 1 "$kind" "$B" run -m "$MODEL" -p hi -n 1 --executor cpu --placement-file "$bad"
    run 1 "$kind" "$B" bench -m "$bad" -p 0 -n 2
    run 1 "$kind" "$B" import csv "$bad" --trace x.db
    run 1 "$kind" "$B" collect -m "$MODEL" --prompts "$bad" --trace c.db --no-progress
    run 1 "$kind" "$B" calibrate -m "$bad" --out c.json
    run 1 "$kind" "$B" trace materialize "$bad"
done
[ ! -e rep ] && [ ! -e x.db ] && [ ! -e c.db ] && [ ! -e c.json ] || fail "a refused run left an output"
no_temporaries "non-regular inputs"

# ---- outputs that are inputs (compared by device and inode), and existing outputs ----
ln t.db hard.db
snapshot t.db costs.json "$MODEL" p.jsonl
run 2 "the same file as the trace" "$B" simulate t.db $SIM --json t.db
run 2 "the same file as the trace" "$B" simulate t.db $SIM --json hard.db --force
run 2 "the same file as --costs" "$B" simulate t.db $SIM --svg costs.json --force
run 2 "the same file as the trace" "$B" simulate t.db $SIM --emit-profile ./t.db --force
run 2 "the same file as --json" "$B" simulate t.db $SIM --json o.json --svg ./o.json
run 2 "the same file as --json" "$B" simulate t.db $SIM --json p.strp.json --emit-profile p.strp
run 2 "the same file as the input" "$B" import csv r.csv --trace r.csv --force
run 2 "the same file as the model" "$B" collect -m "$MODEL" --prompts p.jsonl --trace "$MODEL" --force --no-progress
run 2 "the same file as the prompt file" "$B" collect -m "$MODEL" --prompts p.jsonl --trace t2.db --results p.jsonl --no-progress
run 2 "the same file as the model" "$B" calibrate -m "$MODEL" --out "$MODEL" --force
run 2 "is also an input trace" "$B" analyze t.db --out hard.db
unchanged "an aliasing output"
echo old > o.json
snapshot o.json t.db
run 1 "file exists (use --force" "$B" simulate t.db $SIM --json o.json
run 1 "file exists (use --force" "$B" import csv r.csv --trace t.db
run 1 "exists (pass --force" "$B" analyze t.db --out adir
unchanged "an existing output without --force"
mkdir -p rep2 && cp t.db rep2/t.db
snapshot rep2/t.db
run 1 "holds 't.db', which is not a file of a moeplan report" "$B" analyze rep2/t.db --out rep2 --force
unchanged "analyze --force over a directory holding its input"
run 1 "No such file or directory" "$B" simulate t.db $SIM --json no/such/dir/o.json
run 1 "No such file or directory" "$B" analyze t.db --out no/such/dir
no_temporaries "aliasing outputs"

# ---- a file-size limit under every writer: EFBIG reported in one line, nothing replaced ----
for i in 1 2 3 4 5 6 7 8; do echo "{\"prompt\": \"Hello world number $i, tell me about experts\"}"; done > many.jsonl
run 0 "" "$B" collect -m "$MODEL" --prompts many.jsonl --trace big.db --max-tokens 8 --no-progress
run 0 "" "$B" analyze big.db --out rep3
run 0 "" "$B" simulate t.db $SIM --json s.json --svg s.svg --emit-profile s.strp
run 0 "" "$B" mkmodel --preset tiny -o m.gguf --quiet
snapshot big.db big.results.json rep3/* s.json s.svg s.strp s.strp.json m.gguf t.db
limited=(bash -c 'ulimit -f "$0" && exec "$@"') # limited BLOCKS CMD...: CMD under ulimit -f
run 1 "File too large (the file-size limit, ulimit -f)" "${limited[@]}" 16 "$B" collect -m "$MODEL" --prompts many.jsonl --trace big.db --max-tokens 8 --no-progress --force
run 1 "File too large (the file-size limit, ulimit -f)" "${limited[@]}" 16 "$B" import csv r.csv --trace t.db --force
run 1 "File too large (the file-size limit, ulimit -f)" "${limited[@]}" 4 "$B" analyze big.db --out rep3 --force
run 1 "File too large (the file-size limit, ulimit -f)" "${limited[@]}" 1 "$B" simulate t.db $SIM --json s.json --svg s.svg --emit-profile s.strp --force
# the copy of the trace fits, the table does not: the trace stays as it was
run 1 "File too large (the file-size limit, ulimit -f)" "${limited[@]}" $(( $(stat -c %s big.db) / 1024 + 8 )) "$B" trace materialize big.db
run 1 "File too large (the file-size limit, ulimit -f)" "${limited[@]}" 64 "$B" mkmodel --preset tiny -o m.gguf --force --quiet
unchanged "a write past the file-size limit"
no_temporaries "file-size limit"

# ---- kill -9: the old output survives; what the killed run left is refused ----
# long enough that no run finishes before its kill (200 prompts x 16 tokens took under 1 s on the
# 2-core development machine; this is 40 times the work)
for i in $(seq 1 2000); do echo "\"Prompt number $i about experts and routing\""; done > long.jsonl
snapshot big.db
for delay in 0.05 0.2 0.5 1.0; do
    cases=$((cases + 1))
    "$B" collect -m "$MODEL" --prompts long.jsonl --trace big.db --max-tokens 64 --no-progress --force >/dev/null 2>&1 &
    pid=$!
    sleep "$delay"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    st=$?
    [ "$st" = 137 ] || fail "collect was to be killed at ${delay}s but ended by itself (exit $st): lengthen long.jsonl"
    unchanged "big.db after collect was killed at ${delay}s"
    for left in big.db.tmp.*; do
        case $left in *-wal | *-shm | *-journal) continue ;; esac
        [ -e "$left" ] || continue
        timeout 20 "$B" analyze "$left" --validate-only >/dev/null 2>err.txt
        st=$?
        [ "$st" = 1 ] && [ "$(grep -c ': error: ' err.txt)" = 1 ] && grep -qF "$left" err.txt ||
            fail "the temporary of a killed collect was not refused (exit $st): $(head -c 300 err.txt)"
        rm -f "$left" "$left"-wal "$left"-shm "$left"-journal
    done
done
snapshot rep3/*
for delay in 0.01 0.05; do
    cases=$((cases + 1))
    "$B" analyze big.db --out rep3 --force >/dev/null 2>&1 &
    pid=$!
    sleep "$delay"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    unchanged "rep3 after analyze was killed at ${delay}s"
    rm -rf rep3.tmp.* rep3.old.*
done
[ -d rep3 ] || fail "analyze --force killed mid-run lost the old report"
# trace materialize killed at any moment: the trace is as it was, or has the whole table (the
# copy is renamed over it only once complete); either way every reader accepts it
awk 'BEGIN { print "seq,pos,layer,e0,e1,e2,e3,w0,w1,w2,w3"
             for (s = 0; s < 40; s++) for (p = 0; p < 256; p++) for (l = 0; l < 8; l++) {
                 a = (s + p + l) % 32; print s "," p "," l "," a "," (a + 1) % 32 "," (a + 5) % 32 "," (a + 9) % 32 ",0.4,0.3,0.2,0.1" } }' > routes.csv
run 0 "" "$B" import csv routes.csv --trace routes.db
for delay in 0.02 0.1 0.3 3; do
    cases=$((cases + 1))
    cp routes.db m.db
    before=$(sha256sum < m.db)
    "$B" trace materialize m.db --no-progress >/dev/null 2>&1 &
    pid=$!
    sleep "$delay"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    after=$(sha256sum < m.db)
    timeout 60 "$B" analyze m.db --validate-only >/dev/null 2>err.txt ||
        fail "after trace materialize was killed at ${delay}s the trace is refused: $(head -c 300 err.txt)"
    rm -f m.db.tmp.*
    timeout 60 "$B" trace materialize m.db --no-progress >out.txt 2>err.txt ||
        fail "after trace materialize was killed at ${delay}s it does not run again: $(head -c 300 err.txt)"
    if [ "$after" = "$before" ]; then # killed before the rename: the trace as it was
        grep -q "routes table: 327680 rows" out.txt ||
            fail "killed at ${delay}s, the trace as it was, yet materialized again: $(cat out.txt)"
    else # after it: the whole table
        grep -q "has the routes table already" out.txt ||
            fail "killed at ${delay}s, the trace is neither as it was nor whole: $(cat out.txt)"
    fi
done
no_temporaries "kill -9"

echo "hostile inputs: $cases cases, $fails failures"
[ "$fails" = 0 ]
