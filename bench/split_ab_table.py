#!/usr/bin/env python3
"""bench/split_ab_table.py OUTDIR ROUNDS 'ARMS' ROW... -- bench/split_ab.sh's tables from the
`moeplan bench -o json` files it wrote (OUTDIR/bench-ROW-ARM.rR.json, ROW without ':' and ARM with
'@' and '=' as '-'): one line per row, arm and round (tok/s, routes by path, the sides of a hybrid
layer, the share of warm layer steps and their GPU side, the host's bandwidths, the shares of the
bounds), then the knobs the arms ran with where they
differ (an arm's name says its cost file and its @VAR=VALUE, not what it took from the cost file,
such as calibrate's prefetch distance), then each arm against each later one, round by round and
their median. A file that is missing or not bench's JSON is said in its line."""
import json, os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sides import sides

if len(sys.argv) < 5:
    sys.exit("usage: bench/split_ab_table.py OUTDIR ROUNDS 'ARMS' ROW...")
out, rounds, arm_names, budgets = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
print("| row | arm | round | tok/s median | routes gpu/cpu/far (split) % | GPU / CPU side us (GPU led) | warm layer steps % (GPU us) | host GB/s | CPU experts GB/s | host+bus GB/s | share of serial bound | share of host+bus bound |")
print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
speed = {}
# each arm's knobs, from its first row read (the JSON rows' knobs): an arm's name says its cost file
# and its @VAR=VALUE, not what it took from the cost file (calibrate's prefetch distance)
knobs = {}
for b in budgets:
    for arm in arm_names:
        for rnd in range(1, rounds + 1):
            tag = arm.replace("@", "-").replace("=", "-")
            path = f"{out}/bench-{b.replace(':', '')}-{tag}.r{rnd}.json"
            try:
                r = json.load(open(path))["rows"][0]
            except Exception as e:
                print(f"| {b} | {arm} | {rnd} | failed: {e} | | | | | | | |")
                continue
            tot = sum(r.get(k, 0) for k in ("routes_gpu", "routes_cpu", "routes_copied", "routes_far")) or 1
            pct = lambda k: 100 * r.get(k, 0) / tot
            bo = r.get("bound") or {}
            f = lambda k: f"{bo[k]:.2f}" if isinstance(bo.get(k), (int, float)) else "-"
            speed[(b, arm, rnd)] = r["median_tok_s"]
            if "knobs" in r:
                knobs.setdefault(arm, r["knobs"])
            cpu_gbs = f"{r['cpu_expert_gbs']:.1f}" if r.get("cpu_expert_gbs") else "-"
            warm = f"{r['rt_warm_pct']:.1f} ({r.get('rt_warm_gpu_us', 0):.1f})" if r.get("rt_warm_pct") else "-"
            print(f"| {b} | {arm} | {rnd} | {r['median_tok_s']:.2f} | {pct('routes_gpu'):.1f}/{pct('routes_cpu'):.1f}/"
                  f"{pct('routes_far'):.1f} ({pct('routes_split'):.1f}) | {sides(r)} | {warm} | {f('host_read_gbs')} | {cpu_gbs} | {f('hostbus_gbs')} "
                  f"| {f('share_of_serial_bound')} | {f('share_of_hostbus_bound')} |")
# the knobs the arms ran with where they differ
differ = sorted({k for a in knobs for k in knobs[a] if len({str(knobs[x].get(k)) for x in knobs}) > 1})
if differ:
    print()
    for arm in arm_names:
        if arm in knobs:
            print(f"{arm} ran with " + ", ".join(f"{k}={knobs[arm].get(k)}" for k in differ))
# each arm against each later one (split / whole, split / off, ...), in the order ARMS names them
pairs = [(a, b) for i, a in enumerate(arm_names) for b in arm_names[i + 1:]]
for a, b_arm in pairs:
    print()
    print(f"| row | {a} / {b_arm}, each round | median |")
    print("| --- | --- | ---: |")
    for b in budgets:
        ratios = [speed[(b, a, n)] / speed[(b, b_arm, n)] for n in range(1, rounds + 1)
                  if (b, a, n) in speed and (b, b_arm, n) in speed and speed[(b, b_arm, n)] > 0]
        med = f"{statistics.median(ratios):.3f}" if ratios else "-"
        print(f"| {b} | {', '.join(f'{x:.3f}' for x in ratios) or '-'} | {med} |")
