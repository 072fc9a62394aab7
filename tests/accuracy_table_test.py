#!/usr/bin/env python3
"""tests/accuracy_table_test.py -- bench/accuracy_table.py on a matrix written here: the CPU
experts' rate of a run beside the decode grid's.

One shape, a grid of top-2 experts of 100 MB whose all-cold far-off point's CPU side took 2 ms
(100 GB/s), and three rows: one from a bench file with cpu_expert_us (100 CPU routes over 50
hybrid layer steps of 2.5 ms each: 80 GB/s); one without it whose every hybrid layer step was all
cold and ran no far route (the round-trip gap, 3.225 ms, less its overhead, 0.1 ms: 64 GB/s); one
without it whose steps were not all cold (not known); and one measured in two rounds (2.5 and 2 ms:
80 and 100 GB/s, probes of 80 and 100 GB/s), whose cells are the rounds' means (90). Checked: each row's "run (grid)" cell, the host
bandwidth cell from the bench probes, the error count and the plan/first-n-cpu ratio; and that the
table is written to OUT/matrix.md. Exit 0 on success, 1 with the first mismatch."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.environ.get("MP_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), ".."))


def write(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f)


def sim(cold_per_step, steps):
    """A simulation JSON whose policy 'P' had `steps` hybrid layer steps of `cold_per_step` cold
    routes (of 2) each."""
    split = {"decisions": 2 * steps, "hits": (2 - cold_per_step) * steps, "cpu_layer_invocations": steps}
    return {"budgets": [{"policies": [{"policy": "P", "in_sample": split,
                                        "held_out": {k: 0 for k in split}}]}]}


def bench(extra):
    row = {"routes_cpu": 100, "routes_far": 0, "hybrid_layer_steps": 50, "rt_gap_us": 3225.0,
           "rt_overhead_us": 100.0, "bound": {"host_read_gbs_before": 70.0, "host_read_gbs_after": 90.0}}
    row.update(extra)
    return {"rows": [row]}


def row(budget, policy, err, tag):
    return {"budget": budget, "policy": policy, "resident_measured": 3, "predicted_ms_per_token": 1.0 + err / 100,
            "measured_ms_per_token": 1.0, "error_pct": err, "floor_ms_per_token": 0.5, "predicted_far_share": 0,
            "measured_far_share": 0, "measured_cpu_share": 0.5, "simulation": "/elsewhere/sim/%s.json" % tag,
            "bench": "/elsewhere/bench/%s.json" % tag}


def main():
    with tempfile.TemporaryDirectory() as out:
        d = os.path.join(out, "shape")
        for sub in ("sim", "bench"):
            os.makedirs(os.path.join(d, sub))
        write(os.path.join(d, "costs.json"), {"host_read": {"gbs": 80.0}, "decode_layers": {
            "top_k": 2, "expert_bytes": 100000000, "points": [
                {"cold": 2, "far": 0, "far_on": False, "cpu_ns": 2000000, "median_ns": 2010000},
                {"cold": 2, "far": 1, "far_on": True, "cpu_ns": 1000000, "median_ns": 2500000}]}})
        rows = [row("8GiB", "first-n-cpu", -12.0, "a"), row("8GiB", "plan", -5.0, "b"), row("16GiB", "P", 3.0, "c"),
                row("16GiB", "Q", 4.0, "d")]
        rows[3]["bench_rounds"] = ["/elsewhere/bench/d.r1.json", "/elsewhere/bench/d.r2.json"]
        write(os.path.join(d, "sim-accuracy.json"), {"gpu_fixed_bytes": 1, "rows": rows})
        write(os.path.join(d, "bench", "a.json"), bench({"cpu_expert_us": 2500.0}))
        write(os.path.join(d, "bench", "b.json"), bench({}))
        write(os.path.join(d, "bench", "c.json"), bench({}))
        write(os.path.join(d, "bench", "d.r1.json"), bench({"cpu_expert_us": 2500.0}))
        write(os.path.join(d, "bench", "d.r2.json"), bench({"cpu_expert_us": 2000.0, "bound": {
            "host_read_gbs_before": 90.0, "host_read_gbs_after": 110.0}}))
        for tag, policy, cold in (("a", "first-n-cpu", 2), ("b", "plan", 2), ("c", "P", 1), ("d", "Q", 2)):
            doc = sim(cold, 50)
            doc["budgets"][0]["policies"][0]["policy"] = policy
            write(os.path.join(d, "sim", tag + ".json"), doc)
        p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "accuracy_table.py"), out, "shape"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit("accuracy_table.py failed: " + p.stderr)
        lines = {l.split("|")[3].strip(): l for l in p.stdout.splitlines() if l.startswith("| shape |")}
        want = {"first-n-cpu": "| 80 (80) | 80.0 (100.0) |", "plan": "| 80 (80) | 64.0 (100.0) |",
                "P": "| 80 (80) | - (100.0) |", "Q": "| 90 (80) | 90.0 (100.0) |"}
        for policy, cells in want.items():
            if cells not in lines.get(policy, ""):
                sys.exit("row %s: want %r in %r" % (policy, cells, lines.get(policy)))
        if "4 rows; 3 within 10 %, largest |error| 12.0 %" not in p.stdout:
            sys.exit("summary: " + p.stdout)
        if "| shape | 8GiB | 1.00 | 1.00 |" not in p.stdout:
            sys.exit("ratios: " + p.stdout)
        with open(os.path.join(out, "matrix.md")) as f:
            if f.read() != p.stdout:
                sys.exit("matrix.md differs from what was printed")


if __name__ == "__main__":
    main()
