#!/usr/bin/env python3
"""tests/whole_route_costs_test.py -- bench/whole_route_costs.py on a split grid written here.

A top-2 grid in quarter experts (far_split 4, far_max 8) with a point for every far unit: the
whole-route twin keeps the points whose far is a multiple of 4, as far / 4, with far_max 2 and
far_split 1, and leaves every other member as it was; a file already in whole routes is copied as
it is; --units 2 keeps the halves (--units 3, 0, x are refused); with --off only the far-off points stay,
with far_max 0; a grid with a fractional far is refused with a one-line error and no output. Exit 0 on success, 1 with the first mismatch."""
import copy
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.environ.get("MP_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), ".."))
SCRIPT = os.path.join(ROOT, "bench", "whole_route_costs.py")


def fail(msg):
    print(f"whole_route_costs_test: {msg}", file=sys.stderr)
    sys.exit(1)


def run(src, dst, *flags):
    return subprocess.run([sys.executable, SCRIPT, *flags, src, dst], capture_output=True, text=True)


def main():
    points = []
    for c in range(3):
        points.append({"cold": c, "far": 0, "far_on": False, "median_ns": 100 + c, "spread_ns": 1,
                       "cpu_ns": 10, "gpu_ns": 5})
        for f in range(4 * c + 1):
            points.append({"cold": c, "far": f, "far_on": True, "median_ns": 1000 * c + f, "spread_ns": 1,
                           "cpu_ns": 10, "gpu_ns": 5})
    doc = {"host_read": {"gbs": 90}, "decode_layers": {"top_k": 2, "far_max": 8, "far_split": 4, "points": points}}
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "split.json"), os.path.join(d, "whole.json")
        with open(src, "w") as f:
            json.dump(doc, f)
        r = run(src, dst)
        if r.returncode:
            fail(f"exit {r.returncode}: {r.stderr}")
        out = json.load(open(dst))
        g = out["decode_layers"]
        if g["far_split"] != 1 or g["far_max"] != 2:
            fail(f"far_split {g['far_split']}, far_max {g['far_max']}: expected 1 and 2")
        got = sorted((p["cold"], p["far"], p["far_on"], p["median_ns"]) for p in g["points"])
        want = sorted([(c, 0, False, 100 + c) for c in range(3)] +
                      [(c, f // 4, True, 1000 * c + f) for c in range(3) for f in range(0, 4 * c + 1, 4)])
        if got != want:
            fail(f"points {got}, expected {want}")
        if out["host_read"] != doc["host_read"]:
            fail("the rest of the file changed")
        # whole routes already: the same grid
        whole = copy.deepcopy(out)
        with open(src, "w") as f:
            json.dump(whole, f)
        if run(src, dst).returncode or json.load(open(dst)) != whole:
            fail("a whole-route file was not copied as it is")
        # quarters to halves: the even far units, halved, far_max 4, far_split 2
        with open(src, "w") as f:
            json.dump(doc, f)
        r = run(src, dst, "--units", "2")
        if r.returncode:
            fail(f"--units 2: exit {r.returncode}: {r.stderr}")
        g = json.load(open(dst))["decode_layers"]
        got = sorted((p["cold"], p["far"], p["far_on"], p["median_ns"]) for p in g["points"])
        want = sorted([(c, 0, False, 100 + c) for c in range(3)] +
                      [(c, f // 2, True, 1000 * c + f) for c in range(3) for f in range(0, 4 * c + 1, 2)])
        if g["far_split"] != 2 or g["far_max"] != 4 or got != want:
            fail(f"--units 2: far_split {g['far_split']}, far_max {g['far_max']}, points {got}")
        # units that do not divide the grid's: refused, nothing written
        os.remove(dst)
        r = run(src, dst, "--units", "3")
        if r.returncode == 0 or "far_split" not in r.stderr or os.path.exists(dst):
            fail(f"--units 3 of quarters: exit {r.returncode}, {r.stderr!r}")
        for bad_units in ("0", "x", "-2", "²"):
            r = run(src, dst, "--units", bad_units)
            if r.returncode != 2 or "--units" not in r.stderr or os.path.exists(dst):
                fail(f"--units {bad_units!r}: exit {r.returncode}, {r.stderr!r}")
        # the far-off twin: the off points only, far_max 0, the rest as it was
        with open(src, "w") as f:
            json.dump(doc, f)
        r = run(src, dst, "--off")
        if r.returncode:
            fail(f"--off: exit {r.returncode}: {r.stderr}")
        out = json.load(open(dst))
        g = out["decode_layers"]
        got = sorted((p["cold"], p["far"], p["far_on"], p["median_ns"]) for p in g["points"])
        if g["far_max"] != 0 or g["far_split"] != 1 or got != [(c, 0, False, 100 + c) for c in range(3)]:
            fail(f"--off: far_max {g['far_max']}, far_split {g['far_split']}, points {got}")
        if out["host_read"] != doc["host_read"]:
            fail("--off: the rest of the file changed")
        # a fractional far: refused, nothing written
        os.remove(dst)
        bad = copy.deepcopy(doc)
        bad["decode_layers"]["points"][3]["far"] = 1.5
        with open(src, "w") as f:
            json.dump(bad, f)
        r = run(src, dst)
        if r.returncode == 0 or "points[3].far" not in r.stderr or os.path.exists(dst):
            fail(f"a fractional far: exit {r.returncode}, {r.stderr!r}, output written: {os.path.exists(dst)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
