#!/usr/bin/env python3
"""bench/accuracy_table.py [--resim MOEPLAN [--model GGUF]] OUT SHAPE... -- the table of bench/accuracy_matrix.sh
from each shape's results under OUT (OUT/SHAPE/sim-accuracy.json, its bench JSONs, costs.json):
every row with the host's read bandwidth during the run (the mean of bench's probes before and
after its tests; over the rounds, when sim_accuracy.sh ran several) against the calibration's, the
CPU experts' own rate in the run (its mean over the rounds) against the decode grid's, the largest error, and each budget's measured plan/first-n-cpu speed ratio.
Written to OUT/matrix.md (temporary name, renamed) and printed.

The CPU rate: the bytes of the CPU routes over the time the host spent in CPU experts, from
bench's cpu_expert_us; for bench files without it, from the round-trip gap less its overhead
where that gap is all CPU (no far route ran and every hybrid layer step had every route cold:
whole CPU layers), else not known ("-"). The grid's: the far-off all-cold point's experts' bytes
over its CPU time. Experts of a few hundred KB are read from the host's caches, not its memory
(flame): their rate says little.

With --resim MOEPLAN, every row is also simulated again (`simulate --host-read-gbs`, with the
trace, costs, budget and fixed bytes of the row; --model: with -m GGUF too, which a model whose
layers' experts differ in type needs): at the host bandwidth its probes read, and at
the level its CPU experts ran at: the calibration's host_read scaled by the CPU experts' predicted
time per token (the simulation's cpu_expert_ns: each hybrid layer step's decode grid point's CPU
share) over their measured one (bench's cpu_expert_us x hybrid_layer_steps / gpu_steps), route mix
for route mix, which scales the CPU's costs by measured / predicted (as `plan`'s check does). The
gap between that error and the row's own is the host's drift; what remains is the model's. The
decision model decides far routes again from the scaled costs, as a runtime calibrated at that
level would: a prediction marked * runs other far routes than the run did (a whole CPU layer of
Mixtral at 89 GB/s turns one far route on), so part of its error is that choice's. Standard
library only."""
import json
import os
import subprocess
import sys

args = sys.argv[1:]
moeplan = model = None
if args[:1] == ["--resim"]:
    moeplan, args = args[1], args[2:]
if args[:1] == ["--model"]:  # the shape's model (one shape): simulate -m, as sim_accuracy.sh ran it
    model, args = args[1], args[2:]
if len(args) < 2:
    sys.exit("usage: accuracy_table.py [--resim MOEPLAN [--model GGUF]] OUT SHAPE...")
out, shapes = args[0], args[1:]


def bench_rows(shape_dir, row):
    """The row's bench JSON rows, one per round (sim_accuracy.sh's ROUNDS; one file before it had
    rounds); a round whose file cannot be read is None."""
    rows = []
    for path in row.get("bench_rounds") or [row["bench"]]:
        try:
            rows.append(json.load(open(os.path.join(shape_dir, "bench", os.path.basename(path))))["rows"][0])
        except (OSError, ValueError, KeyError, IndexError):
            rows.append(None)
    return rows


def mean_known(values):
    """The mean of the values that are not None, or None when there are none."""
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def run_bandwidth(b):
    """The mean host read bandwidth of bench's probes (GB/s), or None (no hybrid layer)."""
    bound = b.get("bound") if b else None
    if not bound or not bound.get("host_read_gbs_before") or not bound.get("host_read_gbs_after"):
        return None
    return (bound["host_read_gbs_before"] + bound["host_read_gbs_after"]) / 2


def all_cold(shape_dir, row, top_k):
    """Whether every hybrid layer step of the row's simulation had all its routes cold."""
    try:
        sim = json.load(open(os.path.join(shape_dir, "sim", os.path.basename(row["simulation"]))))
        pol = [p for p in sim["budgets"][0]["policies"] if p["policy"] == row["policy"]][0]
    except (OSError, ValueError, KeyError, IndexError):
        return False
    cold = sum(pol[s]["decisions"] - pol[s]["hits"] for s in ("in_sample", "held_out"))
    steps = sum(pol[s]["cpu_layer_invocations"] for s in ("in_sample", "held_out"))
    return steps > 0 and cold == steps * top_k


def cpu_rates(shape_dir, row, b, costs):
    """(run, grid) GB/s of the CPU experts, each None when not known."""
    grid = costs.get("decode_layers") if costs else None
    if not grid:
        return None, None
    K, eb = grid["top_k"], grid["expert_bytes"]
    p = [x for x in grid["points"] if not x["far_on"] and x["cold"] == K and x.get("cpu_ns", 0) > 0]
    grid_rate = K * eb / p[0]["cpu_ns"] if p else None
    if not b or not b.get("routes_cpu") or not b.get("hybrid_layer_steps"):
        return None, grid_rate
    if b.get("cpu_expert_us") is not None:
        cpu_us = b["cpu_expert_us"]
    elif not b.get("routes_far") and all_cold(shape_dir, row, K):
        cpu_us = b["rt_gap_us"] - b["rt_overhead_us"]
    else:
        return None, grid_rate
    ns = cpu_us * 1e3 * b["hybrid_layer_steps"]
    return (b["routes_cpu"] * eb / ns if ns > 0 else None), grid_rate


def run_cpu_ms(b):
    """The CPU experts' measured time per token of a bench row (ms), 0 when no route ran on the CPU,
    None when the row does not say (bench files before cpu_expert_us)."""
    if not b:
        return None
    if not b.get("routes_cpu") and not b.get("routes_split"):
        return 0.0
    if b.get("cpu_expert_us") is None or not b.get("gpu_steps"):
        return None
    return b["cpu_expert_us"] * b["hybrid_layer_steps"] / b["gpu_steps"] / 1e3


def resimulate(shape_dir, doc, row, gbs=None):
    """(ms/token predicted for the row at host bandwidth gbs (None: the calibration's), its share of
    far routes, its CPU experts' ms/token), (None, None, None) on failure."""
    sim_json = os.path.join(shape_dir, "sim", "resim-%d.json" % os.getpid())
    cmd = [moeplan, "simulate", os.path.join(shape_dir, "trace.db"), "--costs", os.path.join(shape_dir, "costs.json"),
           "--non-expert-bytes", "%dB" % doc["gpu_fixed_bytes"], "--budget", "%dB" % row["budget_bytes"],
           "--policy", row["policy"], "--as-decode", "--threads", str(row["threads"]), "--json", sim_json, "--force"]
    if gbs:
        cmd += ["--host-read-gbs", "%.3f" % gbs]
    if model:
        cmd += ["-m", model]
    if subprocess.run(cmd, capture_output=True).returncode != 0:
        return None, None, None
    pol = [p for p in json.load(open(sim_json))["budgets"][0]["policies"] if p["policy"] == row["policy"]][0]
    os.unlink(sim_json)
    total = lambda k: pol["in_sample"].get(k, 0) + pol["held_out"].get(k, 0)
    return (total("time_ns") / total("tokens") / 1e6, total("routes_far") / max(1, total("decisions")),
            total("cpu_expert_ns") / total("tokens") / 1e6)


def err_pct(pred, meas):
    return 100 * (pred - meas) / meas if pred else float("nan")


head = ("| shape | budget | policy | resident | predicted ms/token | measured ms/token | error % | host GB/s run "
        "(calibrated) | CPU experts GB/s run (grid) | floor ms/token | far % sim/run | cpu % run |")
rule = "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
if moeplan:
    head = head.replace("| host GB/s", "| predicted at the run's GB/s | error % | predicted at the run's CPU level "
                        "| error % | host GB/s")
    rule += " ---: | ---: | ---: | ---: |"
lines = [head, rule]
gains, n, count = [], 0, {"own": [0, 0.0], "bw": [0, 0.0], "cpu": [0, 0.0, 0]}
for s in shapes:
    d = os.path.join(out, s)
    p = os.path.join(d, "sim-accuracy.json")
    if not os.path.exists(p):
        lines.append("| %s | (no result) |" % s)
        continue
    doc = json.load(open(p))
    try:
        costs = json.load(open(os.path.join(d, "costs.json")))
        cal = costs["host_read"].get("level_gbs", costs["host_read"]["gbs"])  # the level the grid measured at
    except (OSError, ValueError, KeyError):
        costs, cal = None, float("nan")
    for r in doc["rows"]:
        n += 1
        meas = r["measured_ms_per_token"]
        count["own"][0] += abs(r["error_pct"]) <= 10
        count["own"][1] = max(count["own"][1], abs(r["error_pct"]))
        # over the rounds: the mean of the probes' bandwidth and of the CPU experts' rate
        runs = bench_rows(d, r)
        bw = mean_known([run_bandwidth(b) for b in runs])
        bw_text = "%.0f (%.0f)" % (bw, cal) if bw else "- (%.0f)" % cal
        rates = [cpu_rates(d, r, b, costs) for b in runs]
        run_rate, grid_rate = mean_known([x[0] for x in rates]), rates[0][1]
        rate_text = "%s (%s)" % ("%.1f" % run_rate if run_rate else "-", "%.1f" % grid_rate if grid_rate else "-")
        resim = ""
        if moeplan:
            pred_bw = resimulate(d, doc, r, bw)[0] if bw else r["predicted_ms_per_token"]
            e_bw = err_pct(pred_bw, meas)
            count["bw"][0] += abs(e_bw) <= 10
            count["bw"][1] = max(count["bw"][1], abs(e_bw))
            meas_cpu = mean_known([run_cpu_ms(b) for b in runs])
            pred_cpu_ms = resimulate(d, doc, r)[2] if meas_cpu else None
            pred_cpu, far = ((resimulate(d, doc, r, cal * pred_cpu_ms / meas_cpu)[:2]
                              if meas_cpu and pred_cpu_ms and cal == cal else (None, None))
                             if r["measured_cpu_share"] > 0
                             else (r["predicted_ms_per_token"], r["predicted_far_share"]))
            if pred_cpu:
                e_cpu = err_pct(pred_cpu, meas)
                count["cpu"][0] += abs(e_cpu) <= 10
                count["cpu"][1] = max(count["cpu"][1], abs(e_cpu))
                count["cpu"][2] += 1
                # *: the CPU's level moved the far decisions off the run's (docstring)
                cpu_text = " %.3f%s | %+.1f |" % (pred_cpu, "*" if abs(far - r["measured_far_share"]) > 1e-6 else "",
                                                  e_cpu)
            else:
                cpu_text = " - | - |"
            resim = " %.3f | %+.1f |%s" % (pred_bw or float("nan"), e_bw, cpu_text)
        lines.append("| %s | %s | %s | %d | %.3f | %.3f | %+.1f |%s %s | %s | %.3f | %.1f/%.1f | %.1f |" % (
            s, r["budget"], r["policy"], r["resident_measured"], r["predicted_ms_per_token"], meas,
            r["error_pct"], resim, bw_text, rate_text, r["floor_ms_per_token"],
            100 * r["predicted_far_share"], 100 * r["measured_far_share"], 100 * r["measured_cpu_share"]))
    by = {}
    for r in doc["rows"]:
        by.setdefault(r["budget"], {})[r["policy"]] = r["measured_ms_per_token"]
    for b, pol in by.items():
        if "plan" in pol and "first-n-cpu" in pol:
            best = min(pol.values())
            gains.append("| %s | %s | %.2f | %.2f |" % (s, b, pol["first-n-cpu"] / pol["plan"], best / pol["plan"]))
summary = "%d rows; %d within 10 %%, largest |error| %.1f %% (target <= 10 %%)." % (n, count["own"][0], count["own"][1])
if moeplan:
    summary += (" At each run's host bandwidth: %d within 10 %%, largest |error| %.1f %%." % tuple(count["bw"]))
    summary += (" At each run's CPU level (%d rows where it is known or no route ran on the CPU): %d within 10 %%, "
                "largest |error| %.1f %%." % (count["cpu"][2], count["cpu"][0], count["cpu"][1]))
text = ["# Simulated vs measured decode ms/token, by model shape", ""] + lines + ["", summary, "",
        "## plan against the baselines (measured speed ratios)", "",
        "| shape | budget | plan speed / first-n-cpu speed | plan speed / the fastest measured |", "| --- | --- | ---: | ---: |"] + gains
tmp = os.path.join(out, "matrix.md.tmp.%d" % os.getpid())
with open(tmp, "w") as f:
    f.write("\n".join(text) + "\n")
os.replace(tmp, os.path.join(out, "matrix.md"))
print("\n".join(text))
