#!/usr/bin/env python3
"""tests/split_ab_table_test.py -- bench/split_ab_table.py on bench rows written here.

One row (layers:2), two arms (split, and split@MP_PREFETCH_BYTES=2048), two rounds: each row's line
has its tok/s, routes by path and warm layer steps (a share and their GPU side, "-" without); the arms' knobs are said where they differ (the split arm ran at
the cost file's 16384) and only those; the ratio table gives each round's split / 2048 and their
median. A missing file is said in its line and leaves its round out of the ratios; without
arguments the script says its usage. Exit 0 on success, 1 with the first mismatch."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.environ.get("MP_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), ".."))
SCRIPT = os.path.join(ROOT, "bench", "split_ab_table.py")


def fail(msg):
    print(f"split_ab_table_test: {msg}", file=sys.stderr)
    sys.exit(1)


def row(tok_s, prefetch):
    r = {"median_tok_s": tok_s, "routes_gpu": 30, "routes_cpu": 50, "routes_far": 20,
         "routes_split": 0, "knobs": {"MP_ISA": "best", "MP_PREFETCH_BYTES": prefetch}}
    if prefetch == 2048:  # warm layer steps: their share and their GPU side
        r.update(rt_warm_pct=62.5, rt_warm_gpu_us=88.31)
    return {"rows": [r]}


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def main():
    arms = "split split@MP_PREFETCH_BYTES=2048"
    with tempfile.TemporaryDirectory() as d:
        for name, rnd, tok_s, prefetch in [("split", 1, 100.0, 16384), ("split", 2, 110.0, 16384),
                                           ("split-MP_PREFETCH_BYTES-2048", 1, 50.0, 2048),
                                           ("split-MP_PREFETCH_BYTES-2048", 2, 100.0, 2048)]:
            with open(os.path.join(d, f"bench-layers2-{name}.r{rnd}.json"), "w") as f:
                json.dump(row(tok_s, prefetch), f)
        r = run(d, "2", arms, "layers:2")
        if r.returncode != 0:
            fail(f"exit {r.returncode}: {r.stderr}")
        lines = r.stdout.splitlines()
        want = ["| layers:2 | split | 1 | 100.00 | 30.0/50.0/20.0 (0.0) | - | - |",
                "| layers:2 | split@MP_PREFETCH_BYTES=2048 | 2 | 100.00 | 30.0/50.0/20.0 (0.0) | - | 62.5 (88.3) |",
                "split ran with MP_PREFETCH_BYTES=16384",
                "split@MP_PREFETCH_BYTES=2048 ran with MP_PREFETCH_BYTES=2048",
                "| layers:2 | 2.000, 1.100 | 1.550 |"]
        for w in want:
            if not any(l.startswith(w) for l in lines):
                fail(f"no line starting {w!r} in:\n{r.stdout}")
        if any("MP_ISA" in l for l in lines):
            fail(f"a knob the arms share is listed:\n{r.stdout}")
        # round 2 of the 2048 arm missing: its line says so, the ratios keep round 1 alone
        os.remove(os.path.join(d, "bench-layers2-split-MP_PREFETCH_BYTES-2048.r2.json"))
        r = run(d, "2", arms, "layers:2")
        if r.returncode != 0 or "| layers:2 | split@MP_PREFETCH_BYTES=2048 | 2 | failed: " not in r.stdout or \
                "| layers:2 | 2.000 | 2.000 |" not in r.stdout:
            fail(f"with a file missing: exit {r.returncode}:\n{r.stdout}{r.stderr}")
    r = run()
    if r.returncode == 0 or "usage: bench/split_ab_table.py" not in r.stderr:
        fail(f"without arguments: exit {r.returncode}: {r.stderr}")
    print("split_ab_table_test: ok")


main()
