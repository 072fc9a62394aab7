#!/usr/bin/env python3
"""bench/accuracy_table.py [--resim MOEPLAN] OUT SHAPE... -- the table of bench/accuracy_matrix.sh
from each shape's results under OUT (OUT/SHAPE/sim-accuracy.json, its bench JSONs, costs.json):
every row with the host's read bandwidth during the run (the mean of bench's probes before and
after its tests) against the calibration's, the largest error, and each budget's measured
plan/first-n-cpu speed ratio. Written to OUT/matrix.md (temporary name, renamed) and printed.

With --resim MOEPLAN, every row is also simulated again at the host bandwidth its run had
(`simulate --host-read-gbs`, with the trace, costs, budget and fixed bytes of the row), the
prediction a drift-aware user gets; the second error column compares that with the measurement.
Standard library only."""
import json
import os
import subprocess
import sys

args = sys.argv[1:]
moeplan = None
if args[:1] == ["--resim"]:
    moeplan, args = args[1], args[2:]
if len(args) < 2:
    sys.exit("usage: accuracy_table.py [--resim MOEPLAN] OUT SHAPE...")
out, shapes = args[0], args[1:]


def run_bandwidth(shape_dir, row):
    """The mean host read bandwidth of the row's bench run (GB/s), or None (no hybrid layer)."""
    try:
        b = json.load(open(os.path.join(shape_dir, "bench", os.path.basename(row["bench"]))))["rows"][0].get("bound")
    except (OSError, ValueError, KeyError, IndexError):
        return None
    if not b or not b.get("host_read_gbs_before") or not b.get("host_read_gbs_after"):
        return None
    return (b["host_read_gbs_before"] + b["host_read_gbs_after"]) / 2


def resimulate(shape_dir, doc, row, gbs):
    """ms/token predicted for the row at host bandwidth gbs (None on failure)."""
    sim_json = os.path.join(shape_dir, "sim", "resim-%d.json" % os.getpid())
    cmd = [moeplan, "simulate", os.path.join(shape_dir, "trace.db"), "--costs", os.path.join(shape_dir, "costs.json"),
           "--non-expert-bytes", "%dB" % doc["gpu_fixed_bytes"], "--budget", "%dB" % row["budget_bytes"],
           "--policy", row["policy"], "--as-decode", "--threads", str(row["threads"]), "--host-read-gbs",
           "%.3f" % gbs, "--json", sim_json, "--force"]
    if subprocess.run(cmd, capture_output=True).returncode != 0:
        return None
    pol = [p for p in json.load(open(sim_json))["budgets"][0]["policies"] if p["policy"] == row["policy"]][0]
    os.unlink(sim_json)
    return (pol["in_sample"]["time_ns"] + pol["held_out"]["time_ns"]) / (
        pol["in_sample"]["tokens"] + pol["held_out"]["tokens"]) / 1e6


head = ("| shape | budget | policy | resident | predicted ms/token | measured ms/token | error % | host GB/s run "
        "(calibrated) | floor ms/token | far % sim/run | cpu % run |")
rule = "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
if moeplan:
    head = head.replace("| host GB/s", "| predicted at the run's GB/s | error % | host GB/s")
    rule += " ---: | ---: |"
lines = [head, rule]
gains, worst, worst_bw, n, within, within_bw = [], 0.0, 0.0, 0, 0, 0
for s in shapes:
    d = os.path.join(out, s)
    p = os.path.join(d, "sim-accuracy.json")
    if not os.path.exists(p):
        lines.append("| %s | (no result) |" % s)
        continue
    doc = json.load(open(p))
    try:
        cal = json.load(open(os.path.join(d, "costs.json")))["host_read"]["gbs"]
    except (OSError, ValueError, KeyError):
        cal = float("nan")
    for r in doc["rows"]:
        n += 1
        worst = max(worst, abs(r["error_pct"]))
        within += abs(r["error_pct"]) <= 10
        bw = run_bandwidth(d, r)
        bw_text = "%.0f (%.0f)" % (bw, cal) if bw else "- (%.0f)" % cal
        resim = ""
        if moeplan:
            pred_bw = resimulate(d, doc, r, bw) if bw else r["predicted_ms_per_token"]
            err_bw = 100 * (pred_bw - r["measured_ms_per_token"]) / r["measured_ms_per_token"] if pred_bw else float("nan")
            worst_bw = max(worst_bw, abs(err_bw))
            within_bw += abs(err_bw) <= 10
            resim = " %.3f | %+.1f |" % (pred_bw or float("nan"), err_bw)
        lines.append("| %s | %s | %s | %d | %.3f | %.3f | %+.1f |%s %s | %.3f | %.1f/%.1f | %.1f |" % (
            s, r["budget"], r["policy"], r["resident_measured"], r["predicted_ms_per_token"],
            r["measured_ms_per_token"], r["error_pct"], resim, bw_text, r["floor_ms_per_token"],
            100 * r["predicted_far_share"], 100 * r["measured_far_share"], 100 * r["measured_cpu_share"]))
    by = {}
    for r in doc["rows"]:
        by.setdefault(r["budget"], {})[r["policy"]] = r["measured_ms_per_token"]
    for b, pol in by.items():
        if "plan" in pol and "first-n-cpu" in pol:
            best = min(pol.values())
            gains.append("| %s | %s | %.2f | %.2f |" % (s, b, pol["first-n-cpu"] / pol["plan"], best / pol["plan"]))
summary = "%d rows; %d within 10 %%, largest |error| %.1f %% (target <= 10 %%)." % (n, within, worst)
if moeplan:
    summary += (" At each run's host bandwidth: %d within 10 %%, largest |error| %.1f %%." % (within_bw, worst_bw))
text = ["# Simulated vs measured decode ms/token, by model shape", ""] + lines + ["", summary, "",
        "## plan against the baselines (measured speed ratios)", "",
        "| shape | budget | plan speed / first-n-cpu speed | plan speed / the fastest measured |", "| --- | --- | ---: | ---: |"] + gains
tmp = os.path.join(out, "matrix.md.tmp.%d" % os.getpid())
with open(tmp, "w") as f:
    f.write("\n".join(text) + "\n")
os.replace(tmp, os.path.join(out, "matrix.md"))
print("\n".join(text))
