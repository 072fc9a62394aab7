#!/usr/bin/env bash
# bench/bench_routes.sh — sqlite3 queries on the route_choices view against the same queries on
# the routes table of `moeplan trace materialize`, on a synthetic trace (bench/gen_routing_trace.c:
# REQUESTS × 1000 tokens, 48 layers × 128 experts × top-8, 100-token prefill then decode).
# Prints the materialization's time, size and peak memory, then per query the CPU and wall time on
# the view and on the table, and whether the two answers are the same. A benchmark, not a test.
#
# usage: bench/bench_routes.sh [REQUESTS]     (default 100: 38.4 M decisions)
# env:   MOEPLAN, GEN   the binaries (default build/cli/moeplan, build/bench/gen_routing_trace)
#        SQLITE3        the sqlite3 shell (default sqlite3)   TIME  GNU time (default /usr/bin/time)
#        WORK           scratch folder (default /tmp)         VIEW=0 skips the view's queries
#        VIEW_TIMEOUT   seconds (wall) a query on the view may take (default 900): a query that
#                       joins the view re-decodes the trace per outer row and takes hours
set -euo pipefail
cd "$(dirname "$0")/.."
moeplan=${MOEPLAN:-build/cli/moeplan}
gen=${GEN:-build/bench/gen_routing_trace}
sqlite=${SQLITE3:-sqlite3}
gnutime=${TIME:-/usr/bin/time}
work=${WORK:-/tmp}/mp_bench_routes
n=${1:-100}
mkdir -p "$work"
trace=$work/t$n.db
[ -f "$trace" ] || "$gen" "$trace" "$n" 1000 >/dev/null
rm -f "$work/m$n.db"
cp "$trace" "$work/m$n.db"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "sqlite3 $("$sqlite" --version | cut -d' ' -f1), moeplan $("$moeplan" --version | awk '$1 == "commit" { print $2 }')"
"$gnutime" -f "%e %U %S %M" -o "$work/time" "$moeplan" trace materialize "$work/m$n.db" --no-progress >/dev/null
read -r wall user sys rss <"$work/time"
printf 'materialize: %s decisions, trace %.1f MB -> %.1f MB, wall %s s, user %s s, sys %s s, peak RSS %.0f MB\n' \
    "$("$sqlite" "$work/m$n.db" "SELECT count(*) FROM routes")" "$(stat -c %s "$trace" | awk '{print $1/1e6}')" \
    "$(stat -c %s "$work/m$n.db" | awk '{print $1/1e6}')" "$wall" "$user" "$sys" "$(awk "BEGIN{print $rss/1024}")"

# name|query, with SRC for the view or the table
queries=(
    "count|SELECT count(*) FROM SRC"
    "layer 12 top 10|SELECT expert_id, count(*) AS n FROM SRC WHERE node_index = 12 GROUP BY expert_id ORDER BY n DESC, expert_id LIMIT 10"
    "never used per layer|SELECT n.node_index, n.n_experts - count(DISTINCT c.expert_id) FROM nodes n LEFT JOIN SRC c ON c.node_index = n.node_index GROUP BY n.node_index"
    "top-1 weight per layer|SELECT node_index, avg(weight) FROM SRC WHERE rank = 0 GROUP BY node_index"
    "one request|SELECT count(*), avg(rank) FROM SRC WHERE request_id = 42"
    "per expert id|SELECT expert_id, sum(n) FROM (SELECT node_index, expert_id, count(*) AS n FROM SRC GROUP BY node_index, expert_id) GROUP BY expert_id ORDER BY 2 DESC, 1 LIMIT 10"
    "co-occurrence layer 12|SELECT a.expert_id, b.expert_id, count(*) AS n FROM SRC a JOIN SRC b ON b.request_id = a.request_id AND b.step = a.step AND b.node_index = a.node_index AND b.row = a.row AND b.rank > a.rank WHERE a.node_index = 12 GROUP BY 1, 2 ORDER BY n DESC, 1, 2 LIMIT 10"
)
run() { # db query out [timeout] -> "user wall", or "- -" when the timeout stopped it
    if ! "$gnutime" -f "%U %e" -o "$work/qtime" timeout "${4:-0}" "$sqlite" "$1" "$2" >"$3"; then
        echo "- -"
        return
    fi
    cat "$work/qtime"
}
for item in "${queries[@]}"; do
    name=${item%%|*}
    q=${item#*|}
    read -r tu tw < <(run "$work/m$n.db" "${q//SRC/routes}" "$work/table.out")
    if [ "${VIEW:-1}" = 0 ] || [ "$name" = "co-occurrence layer 12" ]; then
        # the view's self-join decodes the whole trace once per outer row: not run
        printf '%-24s view: not run                 table: user %6.2f s, wall %6.2f s\n' "$name" "$tu" "$tw"
        continue
    fi
    read -r vu vw < <(run "$trace" "${q//SRC/route_choices}" "$work/view.out" "${VIEW_TIMEOUT:-900}")
    if [ "$vu" = - ]; then
        printf '%-24s view: stopped after %s s        table: user %6.2f s, wall %6.2f s\n' "$name" \
            "${VIEW_TIMEOUT:-900}" "$tu" "$tw"
        continue
    fi
    same=$(cmp -s "$work/view.out" "$work/table.out" && echo same || echo DIFFERENT)
    printf '%-24s view: user %7.2f s, wall %7.2f s   table: user %6.2f s, wall %6.2f s   answers %s\n' \
        "$name" "$vu" "$vw" "$tu" "$tw" "$same"
done
