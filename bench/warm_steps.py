#!/usr/bin/env python3
"""bench/warm_steps.py TRACE.db PLACEMENT_FILE -- how a trace's decode layer steps fall under a
placement: the share of one-row steps of each MoE node whose routes all find resident experts
(warm: nothing for the cores or the bus; bench's `rt_warm_pct`), and the shares with 1, 2, ...
cold routes, over all nodes; then the share of routes on resident experts.

PLACEMENT_FILE is a placement file (docs/placement.md: `LAYER: LIST`, LIST `all`, `none`, empty,
or ids and ranges A-B; `#` comments), read here only as far as this count needs: its layers are the
trace's node indices. The trace is read through its `route_choices` view (docs/trace-format.md).
Exit 1 with a line naming the file where either cannot be read."""
import collections
import sqlite3
import sys


def placement(path, n_experts):
    resident = {}
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        sys.exit(f"warm_steps: {path}: {e.strerror}")
    for no, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        layer, sep, items = line.partition(":")
        try:
            layer = int(layer)
            items = items.strip()
            ids = set()
            if items == "all":
                ids = set(range(n_experts))
            elif items not in ("", "none"):
                for it in items.split(","):
                    a, _, b = it.strip().partition("-")
                    ids.update(range(int(a), int(b or a) + 1))
        except ValueError:
            sys.exit(f"warm_steps: {path}:{no}: expected 'LAYER: all | none | ids and ranges A-B'")
        if not sep:
            sys.exit(f"warm_steps: {path}:{no}: expected 'LAYER: LIST'")
        resident[layer] = ids
    return resident


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: bench/warm_steps.py TRACE.db PLACEMENT_FILE")
    try:
        db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
        n_experts = db.execute("SELECT max(n_experts) FROM nodes").fetchone()[0]
        rows = db.execute("SELECT request_id, step, node_index, row, expert_id FROM route_choices").fetchall()
    except sqlite3.Error as e:
        sys.exit(f"warm_steps: {sys.argv[1]}: {e}")
    resident = placement(sys.argv[2], n_experts)
    steps = collections.defaultdict(list)
    for req, step, node, row, e in rows:
        steps[(req, step, node, row)].append(e)
    n_rows = collections.Counter(k[:3] for k in steps)
    cold = collections.Counter()
    routes = hits = 0
    for key, ids in steps.items():
        if n_rows[key[:3]] != 1:  # prefill rows: not a decode layer step
            continue
        if key[2] not in resident:
            sys.exit(f"warm_steps: {sys.argv[2]}: no line for layer {key[2]}")
        c = sum(e not in resident[key[2]] for e in ids)
        cold[c] += 1
        routes += len(ids)
        hits += len(ids) - c
    total = sum(cold.values())
    if not total:
        sys.exit(f"warm_steps: {sys.argv[1]}: no one-row (decode) step")
    print(f"decode layer steps: {total}; warm {100 * cold[0] / total:.1f} %; " +
          ", ".join(f"{c} cold {100 * cold[c] / total:.1f} %" for c in sorted(cold) if c) +
          f"; routes on resident experts {100 * hits / routes:.1f} %")


main()
