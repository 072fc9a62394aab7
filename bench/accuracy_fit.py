#!/usr/bin/env python3
"""bench/accuracy_fit.py OUT SHAPE... -- what an accuracy matrix's errors scale with: per shape, the
measured minus predicted decode time per token (us) of every row, least-squares fitted on counts
its run recorded, one set of counts at a time:
  H        hybrid layer steps per token
  gpu_hyb  routes served by resident experts in hybrid layers, per token
  gpu_res  routes of the all-resident layers, per token ((layers - H) x top_k)
  cpu, far routes run on the CPU and far, per token
A constant that fits as well as any count says the error is per token; a count whose coefficient
takes the error away says what it is per. Reads OUT/SHAPE/sim-accuracy.json, the bench JSONs it
names (under OUT/SHAPE/bench) and the simulations (OUT/SHAPE/sim, for the layer count); bench
files before gpu_steps divide by the repetitions x the trace's rows. Prints per row the error and
the counts, then each fit's coefficients, rms and largest residual. Standard library only."""
import json
import os
import sys

SETS = [[], ["H"], ["gpu_hyb"], ["gpu_res"], ["cpu"], ["far"], ["gpu_hyb", "H"], ["gpu_hyb", "gpu_res"],
        ["gpu_hyb", "cpu"], ["gpu_hyb", "far"]]


def lstsq(x, y):
    """Coefficients of the least-squares fit y ~ x (rows of features), by the normal equations;
    None when they are singular."""
    n = len(x[0])
    a = [[sum(r[i] * r[j] for r in x) for j in range(n)] + [sum(r[i] * v for r, v in zip(x, y))] for i in range(n)]
    for i in range(n):
        p = max(range(i, n), key=lambda k: abs(a[k][i]))
        if abs(a[p][i]) < 1e-9:
            return None
        a[i], a[p] = a[p], a[i]
        for k in range(n):
            if k != i:
                f = a[k][i] / a[i][i]
                a[k] = [u - f * v for u, v in zip(a[k], a[i])]
    return [a[i][n] / a[i][i] for i in range(n)]


def rows_of(out, shape):
    d = os.path.join(out, shape)
    doc = json.load(open(os.path.join(d, "sim-accuracy.json")))
    rows = []
    for r in doc["rows"]:
        b = json.load(open(os.path.join(d, "bench", os.path.basename(r["bench"]))))["rows"][0]
        sim = json.load(open(os.path.join(d, "sim", os.path.basename(r["simulation"]))))
        L = sim["trace_geometry"]["moe_layers"]
        K = sim["trace_geometry"]["top_k"]
        steps = b.get("gpu_steps") or b["repetitions"] * doc["trace_rows_per_layer"]
        h = b["hybrid_layer_steps"] / steps
        rows.append({"budget": r["budget"], "policy": r["policy"],
                     "err_us": 1e3 * (r["measured_ms_per_token"] - r["predicted_ms_per_token"]),
                     "H": h, "gpu_res": (L - h) * K, "gpu_hyb": b["routes_gpu"] / steps - (L - h) * K,
                     "cpu": b["routes_cpu"] / steps, "far": b["routes_far"] / steps})
    return rows


def main(argv):
    if len(argv) < 2:
        sys.exit("usage: accuracy_fit.py OUT SHAPE...")
    out = argv[0]
    for shape in argv[1:]:
        rows = rows_of(out, shape)
        print("%s: measured - predicted, us/token, by row" % shape)
        print("  %-14s %-12s %8s %6s %8s %8s %7s %7s" % ("budget", "policy", "err_us", "H", "gpu_hyb", "gpu_res",
                                                       "cpu", "far"))
        for r in rows:
            print("  %-14s %-12s %8.1f %6.1f %8.1f %8.1f %7.1f %7.1f" % (r["budget"], r["policy"], r["err_us"], r["H"],
                                                                       r["gpu_hyb"], r["gpu_res"], r["cpu"], r["far"]))
        y = [r["err_us"] for r in rows]
        for names in SETS:
            x = [[1.0] + [r[n] for n in names] for r in rows]
            c = lstsq(x, y)
            if c is None:
                print("  fit const%s: singular" % "".join(" + " + n for n in names))
                continue
            res = [v - sum(a * b for a, b in zip(xr, c)) for xr, v in zip(x, y)]
            print("  fit %-26s %s   rms %.1f, largest %.1f us" % (
                "const" + "".join(" + " + n for n in names) + ":",
                ", ".join(["%.1f" % c[0]] + ["%s %.3f" % (n, v) for n, v in zip(names, c[1:])]),
                (sum(v * v for v in res) / len(res)) ** 0.5, max(abs(v) for v in res)))


if __name__ == "__main__":
    main(sys.argv[1:])
