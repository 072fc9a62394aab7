#!/usr/bin/env python3
"""bench/flame_csv.py [SRC] DST -- FLAME-MoE-290M's routing (tests/fixtures/traces, or SRC: a CSV
`seq,pos,layer,e0..,w0..`, docs/trace-format.md) as the flame preset's trace CSV for `moeplan
import csv`: its MoE layers 2..26 renumbered to the preset's blocks 0..24, and its sequences, in
order, made one request whose positions continue (bench decodes a replayed trace as one context;
the simulator charges a step's attention at its position in its request). Standard library only."""
import csv
import os
import sys


def main(argv):
    if len(argv) not in (1, 2):
        sys.exit("usage: flame_csv.py [SRC] DST")
    src = argv[0] if len(argv) == 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                       "fixtures", "traces", "flame-moe-290m-prefill-seq0-7.csv")
    tmp = argv[-1] + ".tmp.%d" % os.getpid()
    with open(src) as f, open(tmp, "w", newline="") as g:
        r = csv.DictReader(f)
        w = csv.DictWriter(g, fieldnames=r.fieldnames)
        w.writeheader()
        at, pos = None, -1
        for row in r:
            if (row["seq"], row["pos"]) != at:
                at, pos = (row["seq"], row["pos"]), pos + 1
            row["seq"], row["pos"], row["layer"] = "0", str(pos), str(int(row["layer"]) - 2)
            w.writerow(row)
    os.replace(tmp, argv[-1])


if __name__ == "__main__":
    main(sys.argv[1:])
