#!/usr/bin/env python3
"""tests/calib_curve_ab_test.py -- bench/calib_curve_ab.py's reading of a cost file written here.

curve_stats gives each CPU entry's `concurrent` curve (median us by experts), its largest ratio of a
point to the next one's (mp_cost_cpu_curve_inverted's measure) and the line runtime/decide.c's
expert_split draws through the first and last points: a falling line is flat at the mean of the
two, a line whose fixed part would be negative goes through zero and the last point. Entries
without a curve of two points are left out. Exit 0 on success, 1 with the first mismatch."""
import importlib.util
import json
import os
import sys
import tempfile

ROOT = os.environ.get("MP_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), ".."))
spec = importlib.util.spec_from_file_location("calib_curve_ab", os.path.join(ROOT, "bench", "calib_curve_ab.py"))
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)


def fail(msg):
    print(f"calib_curve_ab_test: {msg}", file=sys.stderr)
    sys.exit(1)


def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def curve(ks, us):
    return [{"experts": k, "median_ns": u * 1e3, "spread_ns": 0} for k, u in zip(ks, us)]


def main():
    entries = [
        {"quant": "MXFP4", "threads": 16, "concurrent": curve([1, 2, 3, 4], [2388, 396, 2584, 3232])},
        {"quant": "Q4_K", "threads": 8, "concurrent": curve([1, 2, 4], [100, 150, 250])},
        {"quant": "Q8_0", "threads": 8, "concurrent": curve([1, 8], [300, 200])},  # falling: flat
        {"quant": "F16", "threads": 8, "concurrent": curve([2, 4], [10, 60])},  # fixed < 0: through 0
        {"quant": "Q6_K", "threads": 8, "concurrent": curve([1], [5])},  # one point: left out
        {"quant": "BF16", "threads": 8},  # no curve: left out
    ]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "costs.json")
        with open(path, "w") as f:
            json.dump({"cpu_expert": entries}, f)
        got = ab.curve_stats(path)
    if [s["quant"] for s in got] != ["MXFP4", "Q4_K", "Q8_0", "F16"]:
        fail(f"entries {[s['quant'] for s in got]}, expected MXFP4, Q4_K, Q8_0, F16")
    want = [  # (worst ratio, fixed us, slope us an expert)
        (2388 / 396, 2388 - (3232 - 2388) / 3, (3232 - 2388) / 3),
        (100 / 150, 50, 50),
        (1.5, 250, 0),
        (10 / 60, 0, 15),
    ]
    for s, (worst, fixed, slope) in zip(got, want):
        for name, a, b in (("worst ratio", s["worst"], worst), ("fixed", s["fixed"], fixed), ("slope", s["slope"], slope)):
            if not close(a, b):
                fail(f"{s['quant']}: {name} {a}, expected {b}")
    print("calib_curve_ab_test: ok")


if __name__ == "__main__":
    main()
