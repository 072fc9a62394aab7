#!/usr/bin/env bash
# bench/ab_analyze.sh — wall-clock A/B of two `moeplan analyze` binaries on one trace, alternated
# (A B A B ...) so that both see the same machine load; prints min and median of wall and
# user+sys seconds per binary. A benchmark, not a test: it checks nothing.
#
# usage: bench/ab_analyze.sh BEFORE_BINARY AFTER_BINARY TRACE.db [ROUNDS (default 5)] [TRACE_B.db]
#        TRACE_B: the trace AFTER reads, when it differs (the same routing in another schema
#        version, e.g. a version 1 trace for BEFORE and a version 2 one for AFTER); default TRACE.
set -euo pipefail
A=$1 B=$2 T=$3 N=${4:-5}
TA=$T TB=${5:-$T}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq "$N"); do
    for b in A B; do
        bin=${!b} trace=T$b
        rm -rf "$out/report"
        /usr/bin/time -f "$b %e %U %S" "$bin" analyze "${!trace}" --out "$out/report" 2>&1 >/dev/null | tail -1
    done
done | python3 -c "
import sys, statistics as st
d = {}
for l in sys.stdin:
    b, e, u, s = l.split()
    d.setdefault(b, []).append((float(e), float(u) + float(s)))
for b, v in sorted(d.items()):
    w = [x[0] for x in v]; c = [x[1] for x in v]
    print(b, 'wall min %.3f med %.3f  cpu min %.3f med %.3f' % (min(w), st.median(w), min(c), st.median(c)))
"
