#!/usr/bin/env bash
# bench/bench_analyze.sh — throughput and peak memory of `moeplan analyze` on synthetic traces
# (bench/gen_routing_trace.c: 48 layers × 128 experts × top-8, 100-token prefill then decode),
# pinned to one core. A benchmark, not a test: it checks nothing, it reports.
#
# usage: bench/bench_analyze.sh [REQUESTS ...]     (default: 25 100; 1000 tokens per request)
# env:   MOEPLAN, GEN   the binaries (default build/cli/moeplan, build/bench/gen_routing_trace)
#        TIME           GNU time (default /usr/bin/time)   WORK  scratch folder (default /tmp)
#        CPU            the core to pin to (default 0)
#        TIMING         1: the traces also hold a timing row per step and layer with served codes,
#                       as a live capture does (the analyzer checks and sums them); default 0
# Prints one line per trace: requests, decisions, seconds, M decisions/s, peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
moeplan=${MOEPLAN:-build/cli/moeplan}
gen=${GEN:-build/bench/gen_routing_trace}
gnutime=${TIME:-/usr/bin/time}
work=${WORK:-/tmp}/mp_bench_analyze
cpu=${CPU:-0}
timing=${TIMING:-0}
[ $# -gt 0 ] || set -- 25 100
mkdir -p "$work"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), pinned to core $cpu"
for n in "$@"; do
    # named by schema version (and timing rows): a trace left by an older build is not reused
    if [ "$timing" = 1 ]; then
        trace=$work/t$n.v2.timing.db
        [ -f "$trace" ] || "$gen" "$trace" "$n" 1000 48 128 8 100 1 2654208 0.8 0 1 >/dev/null
    else
        trace=$work/t$n.v2.db
        [ -f "$trace" ] || "$gen" "$trace" "$n" 1000 >/dev/null
    fi
    rm -rf "$work/report$n"
    taskset -c "$cpu" "$gnutime" -v "$moeplan" analyze "$trace" --out "$work/report$n" \
        >"$work/out$n.txt" 2>"$work/time$n.txt"
    decisions=$(sed -n 's/.*: \([0-9]*\) routing decisions.*/\1/p' "$work/out$n.txt")
    wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time$n.txt")
    user=$(sed -n 's/.*User time (seconds): //p' "$work/time$n.txt")
    sys=$(sed -n 's/.*System time (seconds): //p' "$work/time$n.txt")
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time$n.txt")
    secs=$(python3 -c "p='$wall'.split(':'); print(sum(float(x)*60**i for i,x in enumerate(reversed(p))))")
    python3 -c "print('requests %4d  trace %6.0f MB  decisions %11d  wall %6.2f s  user %5.2f s  sys %5.2f s  %5.1f M decisions/s (wall)  %5.1f M/s (user+sys)  peak RSS %5.1f MB' % ($n, $(stat -c %s "$trace")/1e6, $decisions, $secs, $user, $sys, $decisions/$secs/1e6, $decisions/($user+$sys)/1e6, $rss/1024))"
done
