#!/usr/bin/env python3
"""bench/cupti_kernels.py TRACE.db [TOP] — where the GPU time of a `moeplan collect --cupti` trace goes.

Per phase (prefill, decode): GPU busy time per step, and the kernels and copies by total time
(sum of end-start), with launches per step and mean µs per launch. Kernel names are shortened to
the function name. Reads the trace's `steps` and `cupti` tables (docs/trace-format.md)."""
import re
import sqlite3
import sys
from collections import defaultdict


def short(name):
    if name is None:
        return "?"
    m = re.match(r"(?:void )?([A-Za-z_][A-Za-z0-9_:]*)", name)
    return m.group(1) if m else name[:60]


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: bench/cupti_kernels.py TRACE.db [TOP]")
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
    phase = {(r, s): (p, n) for r, s, p, n in db.execute("SELECT request_id, step, phase, n_rows FROM steps")}
    agg = defaultdict(lambda: defaultdict(lambda: [0, 0]))  # phase -> name -> [ns, count]
    steps = defaultdict(set)
    rows = defaultdict(int)
    for kind, name, t0, t1, req, step in db.execute(
            "SELECT kind, name, start_ns, end_ns, request_id, step FROM cupti"):
        if req is None:
            ph = "untagged"
        else:
            ph = phase.get((req, step), ("?", 0))[0]
            if (req, step) not in steps[ph]:
                steps[ph].add((req, step))
                rows[ph] += phase.get((req, step), ("?", 0))[1]
        key = short(name) if kind == "kernel" else f"memcpy {name}"
        a = agg[ph][key]
        a[0] += t1 - t0
        a[1] += 1
    for ph, names in agg.items():
        n = max(len(steps[ph]), 1)
        total = sum(v[0] for v in names.values())
        print(f"\n## {ph}: {len(steps[ph])} steps, {rows[ph]} rows, GPU busy {total / n / 1e3:.1f} µs/step"
              f" ({total / max(rows[ph], 1) / 1e3:.2f} µs/row)")
        print("| kernel / copy | % | µs/step | launches/step | µs/launch |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for k, (ns, c) in sorted(names.items(), key=lambda kv: -kv[1][0])[:top]:
            print(f"| {k} | {100 * ns / max(total, 1):.1f} | {ns / n / 1e3:.1f} | {c / n:.1f} | {ns / c / 1e3:.2f} |")


if __name__ == "__main__":
    main()
