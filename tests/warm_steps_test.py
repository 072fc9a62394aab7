#!/usr/bin/env python3
"""tests/warm_steps_test.py -- bench/warm_steps.py on a trace collected here.

The tiny model (4 layers x 16 experts, top-4) decodes 8 tokens on the CPU into a trace. With every
expert resident every decode layer step is warm and every route on a resident expert; with none,
no step is warm and every step has all 4 routes cold; with the first 8 of 16 resident, the shares
sum to 100 % and match a count made here from the trace's route_choices view. A placement file
without a line for a layer or with a malformed list (named by its line), and a trace that is not
one, are refused with the file's name.
Exit 0 on success, 1 with the first mismatch."""
import collections
import os
import re
import sqlite3
import subprocess
import sys
import tempfile

ROOT = os.environ.get("MP_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), ".."))
SCRIPT = os.path.join(ROOT, "bench", "warm_steps.py")
MOEPLAN = os.environ.get("MP_MOEPLAN", "")


def fail(msg):
    print(f"warm_steps_test: {msg}", file=sys.stderr)
    sys.exit(1)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def placement(d, name, lists):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write("# test placement\n" + "".join(f"{l}: {v}\n" for l, v in enumerate(lists)))
    return path


def shares(out):
    m = re.match(r"decode layer steps: (\d+); warm ([\d.]+) %;(.*); routes on resident experts ([\d.]+) %$", out.strip())
    if not m:
        fail(f"unexpected output: {out!r}")
    cold = {int(c): float(p) for c, p in re.findall(r"(\d+) cold ([\d.]+) %", m.group(3))}
    return int(m.group(1)), float(m.group(2)), cold, float(m.group(4))


def main():
    if not MOEPLAN or not os.access(MOEPLAN, os.X_OK):
        print("SKIP: MP_MOEPLAN is not an executable moeplan")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        model, trace = os.path.join(d, "tiny.gguf"), os.path.join(d, "t.db")
        prompts = os.path.join(d, "p.json")
        with open(prompts, "w") as f:
            f.write('[{"prompt": "warm steps", "max_tokens": 8}]')
        for cmd in ([MOEPLAN, "mkmodel", "--preset", "tiny", "--quiet", "-o", model],
                    [MOEPLAN, "collect", "-m", model, "--prompts", prompts, "--raw-prompts", "--trace", trace,
                     "-t", "1", "--no-progress"]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                fail(f"{' '.join(cmd[:2])}: exit {r.returncode}: {r.stderr}")
        r = run(trace, placement(d, "all.txt", ["all"] * 4))
        n, warm, cold, hits = shares(r.stdout)
        if r.returncode != 0 or n < 4 * 7 or warm != 100.0 or cold or hits != 100.0:
            fail(f"all resident: exit {r.returncode}: {r.stdout}{r.stderr}")
        r = run(trace, placement(d, "none.txt", ["none", "", "none", "none"]))
        n2, warm, cold, hits = shares(r.stdout)
        if r.returncode != 0 or n2 != n or warm != 0.0 or cold != {4: 100.0} or hits != 0.0:
            fail(f"none resident: exit {r.returncode}: {r.stdout}{r.stderr}")
        r = run(trace, placement(d, "half.txt", ["0-7"] * 2 + ["0-3, 4-7"] * 2))
        _, warm, cold, hits = shares(r.stdout)
        # the same count from the trace's view
        db = sqlite3.connect(trace)
        steps = collections.defaultdict(list)
        for req, step, node, row, e in db.execute(
                "SELECT request_id, step, node_index, row, expert_id FROM route_choices"):
            steps[(req, step, node, row)].append(e)
        rows = collections.Counter(k[:3] for k in steps)
        dec = [ids for k, ids in steps.items() if rows[k[:3]] == 1]
        want_warm = 100 * sum(all(e < 8 for e in ids) for ids in dec) / len(dec)
        want_hits = 100 * sum(e < 8 for ids in dec for e in ids) / sum(len(ids) for ids in dec)
        if abs(warm - want_warm) > 0.051 or abs(hits - want_hits) > 0.051 or abs(warm + sum(cold.values()) - 100) > 0.3:
            fail(f"half resident: {r.stdout} against warm {want_warm:.1f} %, hits {want_hits:.1f} %")
        r = run(trace, placement(d, "short.txt", ["all"] * 3))
        if r.returncode == 0 or "short.txt: no line for layer 3" not in r.stderr:
            fail(f"a missing layer: exit {r.returncode}: {r.stderr}")
        r = run(trace, placement(d, "bad.txt", ["all", "all", "3-x", "all"]))
        if r.returncode == 0 or "bad.txt:4: expected 'LAYER: all | none | ids and ranges A-B'" not in r.stderr:
            fail(f"a malformed list: exit {r.returncode}: {r.stderr}")
        r = run(prompts, placement(d, "all.txt", ["all"] * 4))
        if r.returncode == 0 or "p.json" not in r.stderr:
            fail(f"not a trace: exit {r.returncode}: {r.stderr}")
    r = run()
    if r.returncode == 0 or "usage: bench/warm_steps.py" not in r.stderr:
        fail(f"without arguments: exit {r.returncode}: {r.stderr}")
    print("warm_steps_test: ok")


main()
