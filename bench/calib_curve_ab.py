#!/usr/bin/env python3
"""bench/calib_curve_ab.py MODEL ROUNDS OUTDIR MOEPLAN_A [MOEPLAN_B ...] -- calibrate's CPU expert
curves from two or more builds, alternated, on a host with bursts of other work.

Each round runs `MOEPLAN calibrate -m MODEL --quick` once per build (the order rotating round by
round) while BURST_PROCS processes (default: the CPU count) each spin BURST_MS ms (default 150) of
every PERIOD_MS ms (default 1000), a neighbour that comes and goes as a busy host's do; BURST_MS=0
runs without it. CAL_ARGS adds calibrate flags (e.g. "-t 2"). For each cost file it prints the
CPU entries' `concurrent` curves (median us by experts in one call), their largest ratio of a
point to the next one's (a call of fewer experts taking longer than one of more: noise; runtime/
costs.h, mp_cost_cpu_curve_inverted), and the line the simulator draws through the first and last
points (fixed part and slope per expert, runtime/decide.c expert_split), then per build the spread
of those over the rounds. The cost files stay in OUTDIR. Standard library only.
"""
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time


def burner(burst_s, period_s, stop):
    while not stop.is_set():
        t0 = time.monotonic()
        while time.monotonic() - t0 < burst_s:
            pass
        stop.wait(max(0.0, period_s - burst_s))


def curve_stats(path):
    with open(path) as f:
        c = json.load(f)
    out = []
    for e in c.get("cpu_expert", []):
        pts = e.get("concurrent", [])
        if len(pts) < 2:
            continue
        ks = [p["experts"] for p in pts]
        ys = [p["median_ns"] / 1e3 for p in pts]
        worst = max(a / b if b > 0 else float("inf") for a, b in zip(ys, ys[1:]))
        slope = (ys[-1] - ys[0]) / (ks[-1] - ks[0])
        fixed = ys[0] - slope * ks[0]
        if slope < 0:
            slope, fixed = 0.0, (ys[0] + ys[-1]) / 2
        if fixed < 0:
            fixed, slope = 0.0, ys[-1] / ks[-1]
        out.append({"quant": e["quant"], "threads": e["threads"], "ys": ys, "worst": worst,
                    "fixed": fixed, "slope": slope})
    return out


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    model, rounds, outdir, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    os.makedirs(outdir, exist_ok=True)
    burst_ms = float(os.environ.get("BURST_MS", "150"))
    period_ms = float(os.environ.get("PERIOD_MS", "1000"))
    procs = int(os.environ.get("BURST_PROCS", str(os.cpu_count() or 1)))
    extra = os.environ.get("CAL_ARGS", "").split()
    stop = multiprocessing.Event()
    burners = []
    if burst_ms > 0:
        for _ in range(procs):
            p = multiprocessing.Process(target=burner, args=(burst_ms / 1e3, period_ms / 1e3, stop), daemon=True)
            p.start()
            burners.append(p)
    print(f"# model {model}; bursts: {procs} x {burst_ms:g} ms of every {period_ms:g} ms; calibrate --quick {' '.join(extra)}")
    per_build = {i: [] for i in range(len(builds))}
    try:
        for r in range(rounds):
            order = [(i + r) % len(builds) for i in range(len(builds))]
            for i in order:
                out = os.path.join(outdir, f"r{r + 1}-b{i}.json")
                t0 = time.monotonic()
                res = subprocess.run([builds[i], "calibrate", "-m", model, "--quick", "--force", "--out", out] + extra,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                secs = time.monotonic() - t0
                if res.returncode != 0:
                    sys.exit(f"calib_curve_ab: {builds[i]} calibrate failed: {res.stderr.strip().splitlines()[-1:]}")
                warned = "a CPU call of" in res.stderr
                for s in curve_stats(out):
                    per_build[i].append(s)
                    print(f"round {r + 1} build {i} ({secs:.1f} s) {s['quant']} t{s['threads']}: "
                          f"{' '.join(f'{y:.0f}' for y in s['ys'])} us; worst ratio {s['worst']:.2f}; "
                          f"fixed {s['fixed']:.0f} + {s['slope']:.1f} us/expert{'; warned' if warned else ''}",
                          flush=True)
    finally:
        stop.set()
        for p in burners:
            p.join()
    for i, b in enumerate(builds):
        ss = per_build[i]
        if not ss:
            continue
        w = [s["worst"] for s in ss]
        fx = [s["fixed"] for s in ss]
        sl = [s["slope"] for s in ss]
        print(f"build {i} ({b}): {len(ss)} curves; worst ratio median {statistics.median(w):.2f}, max {max(w):.2f}, "
              f"past 1.5 in {sum(x > 1.5 for x in w)}; fixed {min(fx):.0f}-{max(fx):.0f} us (median "
              f"{statistics.median(fx):.0f}); slope {min(sl):.1f}-{max(sl):.1f} us/expert (median {statistics.median(sl):.1f})")


if __name__ == "__main__":
    main()
