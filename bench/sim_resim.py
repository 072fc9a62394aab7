#!/usr/bin/env python3
"""bench/sim_resim.py — predict a finished sim-accuracy run again with another cost file.

usage: bench/sim_resim.py MOEPLAN SIM_ACCURACY_DIR COSTS MODEL TRACE [--threads N]

For every row of SIM_ACCURACY_DIR/sim-accuracy.json (bench/sim_accuracy.sh's output), runs
`moeplan simulate --policy profile --placement-profile` with the row's emitted profile, so the
placement is the one the bench ran, under the row's budget and the run's fixed GPU bytes, with
COSTS; prints a markdown table: the old prediction, the new one, the measurement and both errors.
Nothing is measured: this separates a cost model's error from its placement decisions.
"""
import json
import os
import subprocess
import sys
import tempfile


def main():
    args = sys.argv[1:]
    threads = []
    if "--threads" in args:
        i = args.index("--threads")
        threads = ["--threads", args[i + 1]]  # the cost file's CPU entry of N threads
        del args[i:i + 2]
    if len(args) != 5:
        sys.exit(__doc__.strip().splitlines()[2])
    moeplan, run_dir, costs, model, trace = args
    acc = json.load(open(os.path.join(run_dir, "sim-accuracy.json")))
    fixed = acc["gpu_fixed_bytes"]
    rows = acc["rows"]
    print(f"costs `{costs}` against the measurements of `{run_dir}`\n")
    print("| budget | policy | predicted before | error | predicted with these costs | measured | error |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    worst, within = 0.0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in rows:
            prof = os.path.join(run_dir, "profiles", f'{r["budget"]}-{r["policy"]}.strp')
            simj = os.path.join(tmp, "sim.json")
            cmd = [moeplan, "simulate", trace, "--costs", costs, "-m", model, "--non-expert-bytes",
                   str(fixed), "--budget", str(r["budget_bytes"]), "--policy", "profile",
                   "--placement-profile", prof, "--as-decode", "--json", simj] + threads
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"sim_resim: {' '.join(cmd)}: {p.stderr.strip().splitlines()[-1]}")
            sim = json.load(open(simj))
            pol = [x for x in sim["budgets"][0]["policies"] if x["policy"] == "profile"][0]
            ins, held = pol["in_sample"], pol["held_out"]
            pred = (ins["time_ns"] + held["time_ns"]) / (ins["tokens"] + held["tokens"]) / 1e6
            meas = r["measured_ms_per_token"]
            err = 100.0 * (pred - meas) / meas
            worst = max(worst, abs(err))
            within += abs(err) <= 10.0
            print(f'| {r["budget"]} | {r["policy"]} | {r["predicted_ms_per_token"]:.3f} | {r["error_pct"]:+.1f} % '
                  f'| {pred:.3f} | {meas:.3f} | {err:+.1f} % |')
    print(f"\nlargest |error| {worst:.1f} %, rows within 10 %: {within} of {len(rows)}")


if __name__ == "__main__":
    main()
