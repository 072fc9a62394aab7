#!/usr/bin/env python3
"""bench/synth_gpu_costs.py IN OUT --experts E --top-k K [--far-split S] -- a cost file with synthetic GPU parts, for
exercising the simulator on a machine without a GPU.

IN is `moeplan calibrate` output from a machine without a CUDA device: its CPU parts are measured and
its GPU parts (gpu_expert, h2d, d2h, sync, decode_layers) are listed in $.missing. OUT is the same
file with those five parts made from a plain model of an H200-like machine, so that `simulate` and
its decision model run on the model's own shape (experts, top-k, expert types and bytes) wherever
CI runs: bench/random_shapes.py uses it for every random shape. The numbers are not a measurement
of anything: $.notes and $.device.gpu say so, and a prediction made with them means nothing.

The model, per expert of B bytes (the CPU entry's expert_bytes; every GPU part in ns):
  gpu_expert   4 us + B / 3000 bytes/ns (HBM) + 0.2 us a row, at 1, 8 and 64 rows;
  h2d, d2h     5 us + bytes / 50 pinned, 8 us + bytes / 20 pageable, at 4 KiB, 1 MiB, 16 MiB;
  sync         10 us;
  decode grid  top-k of E experts, far work in units of 1/S of an expert (far_split S, default 1:
               whole routes; far_max K x S): a layer step with c cold routes takes 20 us + max(CPU
               side, GPU side); far off, the CPU side is c times the CPU entry's one-row time and the
               GPU side 5 us; with f units far (u = f / S experts) the CPU runs c - u and the GPU side
               adds u x (B / 50 + its one-row time). top-k above 32 (the grid's most) leaves
               decode_layers in $.missing, which simulate then names; S above 32 / K is refused.
Standard library only; exit 2 with one line on a bad argument or input.
"""
import json
import sys

MAX_K = 32  # runtime/costs.h MP_COST_DECODE_MAX_K


def fail(msg):
    print("synth_gpu_costs: " + msg, file=sys.stderr)
    sys.exit(2)


def curve(xs, ns, key):
    return [{key: x, "median_ns": round(ns(x)), "spread_ns": 0} for x in xs]


def main():
    args = sys.argv[1:]
    opts = {}
    pos = []
    while args:
        a = args.pop(0)
        if a in ("--experts", "--top-k", "--far-split"):
            if not args or not args[0].isdecimal() or int(args[0]) < 1:
                fail("%s: expected a whole number >= 1" % a)
            opts[a] = int(args.pop(0))
        else:
            pos.append(a)
    if len(pos) != 2 or "--experts" not in opts or "--top-k" not in opts:
        fail("usage: bench/synth_gpu_costs.py IN OUT --experts E --top-k K [--far-split S]")
    src, dst = pos
    experts, top_k, split = opts["--experts"], opts["--top-k"], opts.get("--far-split", 1)
    if top_k > experts:
        fail("--top-k %d: expected at most --experts (%d)" % (top_k, experts))
    if split > 1 and top_k * split > MAX_K:
        fail("--far-split %d: expected at most %d / top-k (%d)" % (split, MAX_K, top_k))
    try:
        with open(src) as f:
            c = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: %s" % (src, e))
    cpu = c.get("cpu_expert") if isinstance(c, dict) else None
    if not cpu or not isinstance(cpu, list) or not isinstance(cpu[0], dict):
        fail("%s: $.cpu_expert: expected calibrate's CPU expert entries" % src)
    one_row = {}
    for e in cpu:
        pts = [p for p in e.get("points", []) if p.get("rows") == 1]
        if not pts:
            fail("%s: $.cpu_expert (%s): expected a point of 1 row" % (src, e.get("quant")))
        one_row[e["quant"]] = pts[0]["median_ns"]
    gpu_row = lambda b, r: 4000 + b / 3000 + 200 * r
    # one GPU entry per expert shape: calibrate writes a CPU entry per thread count, and the
    # simulator refuses a cost file where two GPU entries match one shape
    shapes = {(e["quant"], e["n_embd"], e["n_ff"]): e["expert_bytes"] for e in cpu}
    c["gpu_expert"] = [{"quant": q, "n_embd": n_embd, "n_ff": n_ff, "expert_bytes": b,
                        "points": curve([1, 8, 64], lambda r, b=b: gpu_row(b, r), "rows")}
                       for (q, n_embd, n_ff), b in shapes.items()]
    sizes = [4096, 1 << 20, 16 << 20]
    c["h2d"] = {"pinned": curve(sizes, lambda x: 5000 + x / 50, "bytes"),
                "pageable": curve(sizes, lambda x: 8000 + x / 20, "bytes")}
    c["d2h"] = {"pinned": curve(sizes, lambda x: 5000 + x / 50, "bytes"),
                "pageable": curve(sizes, lambda x: 8000 + x / 20, "bytes")}
    c["sync"] = {"median_ns": 10000, "spread_ns": 0}
    gone = {"gpu_expert", "h2d", "d2h", "sync"}
    e = cpu[0]
    if top_k <= MAX_K:
        b, t_cpu, t_gpu = e["expert_bytes"], one_row[e["quant"]], gpu_row(e["expert_bytes"], 1)
        points = []
        for cold in range(top_k + 1):
            points.append({"cold": cold, "far": 0, "far_on": False, "median_ns": round(20000 + max(cold * t_cpu, 5000)),
                           "spread_ns": 0, "cpu_ns": round(cold * t_cpu), "gpu_ns": 5000})
            for far in range(cold * split + 1):
                u = far / split  # experts' worth on the bus
                side_c, side_g = (cold - u) * t_cpu, 5000 + u * (b / 50 + t_gpu)
                points.append({"cold": cold, "far": far, "far_on": True,
                               "median_ns": round(20000 + max(side_c, side_g)), "spread_ns": 0,
                               "cpu_ns": round(side_c), "gpu_ns": round(side_g)})
        c["decode_layers"] = {"quant": e["quant"], "n_embd": e["n_embd"], "n_ff": e["n_ff"], "n_expert": experts,
                              "top_k": top_k, "far_max": top_k * split, "far_split": split,
                              "threads": e["threads"], "expert_bytes": b,
                              "points": points}
        gone.add("decode_layers")
    missing = [m for m in c.get("missing", []) if m.get("what") not in gone]
    if missing:
        c["missing"] = missing
    else:
        c.pop("missing", None)
    c["notes"] = ("SYNTHETIC GPU parts (bench/synth_gpu_costs.py): gpu_expert, h2d, d2h, sync and decode_layers "
                  "come from a plain model, not a measurement; for exercising the simulator only. " + c.get("notes", ""))
    c.setdefault("device", {})["gpu"] = "synthetic (bench/synth_gpu_costs.py)"
    with open(dst, "w") as f:
        json.dump(c, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
