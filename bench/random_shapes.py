#!/usr/bin/env python3
"""bench/random_shapes.py MOEPLAN OUTDIR [N=40] [SEED=1] -- the pipeline on N random model shapes, then
on ceil(N/5) gpt-oss shapes.

Each of the N shapes: an architecture (qwen3moe, olmoe, mixtral, qwen2moe), 1-4 layers, 1-40 experts, top-1 to
top-10 (at most the experts), hidden and expert FFN sizes and for qwen2moe the shared expert's FFN
size (mostly ones the quant's blocks divide; a third of them any multiple of 32, where a K-quant
mix's classes fall back to IQ4_NL, Q5_0, Q5_1 or Q8_0 as llama.cpp's quantizer does), heads, KV heads and head sizes, a quant mix and a layer mix, and for
a quarter of the shapes the experts in one block-of-32 type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL,
MXFP4), all drawn from SEED. The gpt-oss shapes come after them from a stream of their own (so the
N shapes of a seed are the ones the script drew before it drew gpt-oss): the same sizes, a sliding
window of 1-16 positions (the prompts slide past it), YaRN or none, and the mxfp4_moe mix (MXFP4
experts, Q8_0 elsewhere) half of the time. For each: `mkmodel`, then
`collect` (two prompts, 6 tokens, the CPU executor), `analyze` with `--model`, `calibrate --quick`,
`simulate` of the trace with that cost file (which, calibrated without a GPU, it refuses in one
line), then the cost file with synthetic GPU parts (bench/synth_gpu_costs.py: a plain model, not a
measurement; far work in whole experts, halves or thirds, drawn per shape) and `simulate` of every policy with it at two budgets (no expert resident, half of
them) writing the plan's profile, and `profile verify` of that profile against the model: the
decision model and the placements run on the shape, which must succeed. A command that refuses its
input must say so in one line and exit non-zero (mkmodel refusing a shape, simulate refusing a
CPU-only cost file are not failures when they do); any other non-zero exit, a multi-line error, or
a sanitizer report is a failure. Prints one line per shape and a summary; exits 1 when any shape
failed. For finding shapes no preset has that break the pipeline (docs/mkmodel.md). Standard
library only.

bench/random_shapes.py --specs MOEPLAN N SEED prints instead the mkmodel flags of the first N shapes
of SEED (and its gpt-oss ones, as above) that `mkmodel` accepts, separated by ';', for
bench/shape_sweep.sh's SHAPES: the GPU executor, calibrate and plan on shapes no preset has, on the
GPU machine (`SWEEP_SHAPES="$(python3 bench/random_shapes.py --specs build/cli/moeplan 6 5)" bash
scripts/gpu.sh shape-sweep`; mkmodel runs where the script does, in a temporary folder it removes).

--mid (first, before either form) draws instead shapes of the size published models have, in fewer
layers (mid_shape: up to 256 experts, top-16, hidden 3072, expert FFN 2048, a router skew; at most
3 GiB of experts), each architecture among them, from a stream of their own: where a rule tuned on
small shapes or on the presets meets a model's real sizes.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile


QUANTS = ["q4_k_m", "q5_k_m", "q3_k_m", "q2_k", "q8_0", "bf16", "f16", "f32"]


def shape(rng, arch=None, quant=None):
    """One shape's mkmodel flags; arch and quant drawn unless given (the order of draws is the
    script's since before gpt-oss, so a seed's earlier shapes stay as they were)."""
    arch = arch or rng.choice(["qwen3moe", "olmoe", "mixtral", "qwen2moe"])
    quant = quant or rng.choice(QUANTS)
    block = 256 if quant.startswith("q") and quant != "q8_0" else 32
    experts = rng.randint(2 if arch == "mixtral" else 1, 40)
    heads = rng.choice([1, 2, 4, 8])
    head_dim = rng.choice([16, 32, 64, 128, 256])
    if (heads * head_dim) % block and rng.random() < 0.8:  # mostly shapes the quant's blocks fit
        head_dim = max(block // heads, 16)
    def size():  # a third of them any multiple of 32: a K-quant mix's classes then fall back
        return 32 * rng.randint(1, 24) if rng.random() < 1 / 3 else block * rng.randint(1, 3)

    s = {
        "arch": arch, "quant": quant, "layers": rng.randint(1, 4), "experts": experts,
        "top-k": rng.randint(1, min(10, experts)), "hidden": size(),
        "expert-ff": size(), "heads": heads,
        "kv-heads": rng.choice([d for d in (1, 2, 4, 8) if heads % d == 0]),
        "head-dim": head_dim,
        "layer-mix": "llama" if quant in ("q4_k_m", "q5_k_m") and rng.random() < 0.3 else "uniform",
    }
    if arch == "qwen2moe":  # Q/K/V biases and a shared expert of its own size beside the routed ones
        s["shared-ff"] = size()
    if rng.random() < 0.25:  # experts in a block of 32 (every size drawn is a multiple of 32)
        s["type-experts"] = rng.choice(["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "MXFP4"])
        s["layer-mix"] = "uniform"  # the llama layer mix is the q4_k_m/q5_k_m recipe's only
    return s


MID_QUANTS = ["q4_k_m", "q4_k_m", "q5_k_m", "q3_k_m", "q2_k", "q8_0"]
MID_BYTES_MAX = 3 << 30  # the routed experts' bytes at most: a mid shape's model is made in seconds


def mid_shape(rng):
    """A shape of the size published models have, in fewer layers (--mid): 4-12 layers, 4-256 experts
    (half of the time a count models ship with), top-1 to top-16, hidden 1024-3072 and expert FFN
    256-2048 (a sixth of them any multiple of 32), 8-32 heads of 64 or 128, a quant mix, for a fifth
    the experts in a block-of-32 type, and a router popularity skew of 0-1.2; layers and then experts
    are cut until the experts' weights fit MID_BYTES_MAX at 8.5 bits a weight."""
    arch = rng.choice(["qwen3moe", "olmoe", "mixtral", "qwen2moe", "gpt-oss"])
    quant = rng.choice(MID_QUANTS)
    if rng.random() < 0.5:
        experts = rng.choice([8, 16, 32, 60, 64, 128, 160, 256])
    else:
        experts = rng.randint(2 if arch == "mixtral" else 4, 256)
    top_k = min(experts, rng.choice([1, 2, 2, 4, 4, 6, 8, 8, 10, 16]))
    hidden = 256 * rng.randint(4, 12)
    ff = 32 * rng.randint(8, 64) if rng.random() < 1 / 6 else 256 * rng.randint(1, 8)
    heads = rng.choice([8, 16, 32])
    head_dim = rng.choice([64, 128])
    layers = rng.randint(4, 12)
    per_expert = 3 * hidden * ff * 17 // 16  # bytes at 8.5 bits a weight
    while layers > 3 and layers * experts * per_expert > MID_BYTES_MAX:
        layers -= 1
    experts = max(top_k, min(experts, MID_BYTES_MAX // (layers * per_expert)))
    s = {
        "arch": arch, "quant": quant, "layers": layers, "experts": experts, "top-k": top_k, "hidden": hidden,
        "expert-ff": ff, "heads": heads, "kv-heads": rng.choice([d for d in (1, 2, 4, 8) if heads % d == 0]),
        "head-dim": head_dim, "skew": round(rng.uniform(0, 1.2), 2),
        "layer-mix": "llama" if quant in ("q4_k_m", "q5_k_m") and rng.random() < 0.5 else "uniform",
    }
    if arch == "qwen2moe":
        s["shared-ff"] = 256 * rng.randint(2, 16)
    if arch == "gpt-oss":
        s["sliding-window"] = rng.choice([64, 128])
    if rng.random() < 0.2:
        s["type-experts"] = rng.choice(["Q4_0", "Q8_0", "IQ4_NL", "MXFP4", "IQ4_XS"])
        s["layer-mix"] = "uniform"
    return s


def far_split(seed, i, top_k):
    """The synthetic grid's far units per expert for shape i: 1, 2 or 3 (at most 32 / top-k), from a
    stream of its own, so that a seed's shapes stay the ones it drew before; the simulator then
    charges split far routes on random shapes too (the rule gives thirds from top-3 on)."""
    return min(random.Random("far split %d %d" % (seed, i)).choice([1, 2, 3]), max(1, 32 // top_k))


def gptoss_shape(rng):
    """A gpt-oss shape: shape()'s sizes, a window, YaRN or none, and half of them in mxfp4_moe, the
    mix of the published files (MXFP4 experts, Q8_0 elsewhere: blocks of 32)."""
    quant = "mxfp4_moe" if rng.random() < 0.5 else rng.choice(QUANTS)
    s = shape(rng, "gpt-oss", quant)
    if quant == "mxfp4_moe":
        s.pop("type-experts", None)  # the mix names the experts' type
        s["layer-mix"] = "uniform"
    s["sliding-window"] = rng.randint(1, 16)
    s["yarn-factor"] = rng.choice([0, 4, 32])
    s["yarn-ctx"] = rng.choice([64, 4096])
    if not s["yarn-factor"]:  # drawn either way (a seed's shapes stay), given only with YaRN on
        del s["yarn-ctx"]
    return s


def run(cmd, log):
    p = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + p.stdout + p.stderr + "\n")
    return p.returncode, p.stderr


def bad_stderr(err):
    return "Sanitizer" in err or "runtime error:" in err


def mkmodel_refused(err):
    """Whether mkmodel's stderr is a refusal in one line (a shape its blocks do not fit), not a failure."""
    return err.strip() != "" and err.strip().count("\n") == 0 and not bad_stderr(err)


def whole(name, text, lo):
    """text as a whole number of at least lo, else exit with one line naming it."""
    if not text.isdigit() or int(text) < lo:
        sys.exit("random_shapes: %s '%s': expected a whole number of at least %d" % (name, text, lo))
    return int(text)


def shapes(n, seed, mid=False):
    """(i, shape) of seed's n shapes, then its (n + 4) // 5 gpt-oss ones from a stream of their own;
    with mid, n mid_shape()s from a stream of their own (gpt-oss among them)."""
    if mid:
        rng_mid = random.Random("mid %d" % seed)
        for i in range(n):
            yield i, mid_shape(rng_mid)
        return
    rng, rng_oss = random.Random(seed), random.Random("gpt-oss %d" % seed)
    for i in range(n + (n + 4) // 5):
        yield i, shape(rng) if i < n else gptoss_shape(rng_oss)


def flags_of(s):
    return [a for k, v in s.items() for a in ("--" + k, str(v))]


def specs(moeplan, n, seed, mid=False):
    """Print the mkmodel flags of seed's shapes that mkmodel accepts (the first n, then gpt-oss
    ones, as many as main() would run), ';' between them."""
    out, tmp = [], tempfile.mkdtemp(prefix="mp_shape_specs_")
    try:
        for _, s in shapes(n, seed, mid):
            flags = flags_of(s)
            p = subprocess.run([moeplan, "mkmodel", "--quiet", "--force", "-o", os.path.join(tmp, "m.gguf")] + flags,
                               capture_output=True, text=True)
            if p.returncode == 0:
                out.append(" ".join(flags))
            elif not mkmodel_refused(p.stderr):
                sys.exit("random_shapes: mkmodel failed on %s: %s" % (" ".join(flags), p.stderr.strip()[-400:]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(";".join(out))


def main():
    argv = sys.argv[1:]
    mid = bool(argv) and argv[0] == "--mid"
    argv = argv[1:] if mid else argv
    if len(argv) == 4 and argv[0] == "--specs":
        specs(argv[1], whole("N", argv[2], 1), whole("SEED", argv[3], 0), mid)
        return
    if len(argv) < 2 or argv[0].startswith("-"):
        sys.exit("usage: bench/random_shapes.py [--mid] MOEPLAN OUTDIR [N=40] [SEED=1], or [--mid] --specs MOEPLAN N SEED")
    moeplan, out = argv[0], argv[1]
    n = whole("N", argv[2], 1) if len(argv) > 2 else 40
    seed = whole("SEED", argv[3], 0) if len(argv) > 3 else 1
    os.makedirs(out, exist_ok=True)
    prompts = os.path.join(out, "prompts.json")
    with open(prompts, "w") as f:
        json.dump(["the quick brown fox", "MoE experts on the GPU"], f)
    failed = refused = 0
    n_oss = 0 if mid else (n + 4) // 5
    for i, s in shapes(n, seed, mid):
        d = os.path.join(out, "s%03d" % i)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        log, model = os.path.join(d, "log.txt"), os.path.join(d, "m.gguf")
        flags = flags_of(s)
        desc = " ".join(flags)
        rc, err = run([moeplan, "mkmodel", "--quiet", "-o", model] + flags, log)
        if rc != 0:
            if mkmodel_refused(err):
                refused += 1
                print("s%03d refused: %s: %s" % (i, desc, err.strip()))
                continue
            failed += 1
            print("s%03d FAILED mkmodel: %s: %s" % (i, desc, err.strip()[-400:]))
            continue
        steps = [
            ("collect", [moeplan, "collect", "-m", model, "--prompts", prompts, "--trace", os.path.join(d, "t.db"),
                         "--max-tokens", "6", "--executor", "cpu", "--no-progress", "-t", "2"]),
            ("analyze", [moeplan, "analyze", os.path.join(d, "t.db"), "--model", model, "--out", os.path.join(d, "report")]),
            ("calibrate", [moeplan, "calibrate", "-m", model, "--quick", "--out", os.path.join(d, "costs.json"), "-t", "2"]),
            ("simulate", [moeplan, "simulate", os.path.join(d, "t.db"), "--costs", os.path.join(d, "costs.json"),
                          "-m", model, "--budget", "1MiB", "--policy", "plan"]),
            ("synth_gpu_costs", [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                              "synth_gpu_costs.py"),
                                 os.path.join(d, "costs.json"), os.path.join(d, "synth.json"),
                                 "--experts", str(s["experts"]), "--top-k", str(s["top-k"]),
                                 "--far-split", str(far_split(seed, i, s["top-k"]))]),
            ("simulate with synthetic GPU costs",
             [moeplan, "simulate", os.path.join(d, "t.db"), "--costs", os.path.join(d, "synth.json"),
              "--non-expert-bytes", "1000", "--budget", "BUDGETS", "--policy", "all",
              "--emit-profile", os.path.join(d, "plan.strp"), "--profile-policy", "plan"]),
            ("profile verify", [moeplan, "profile", "verify", os.path.join(d, "plan.strp"), "-m", model]),
        ]
        ok = True
        for name, cmd in steps:
            if "BUDGETS" in cmd:  # half of the experts resident (the profile's budget), then none
                with open(os.path.join(d, "costs.json")) as f:
                    expert_bytes = json.load(f)["cpu_expert"][0]["expert_bytes"]
                half = 1000 + s["layers"] * s["experts"] * expert_bytes // 2
                cmd = [a if a != "BUDGETS" else "%dB,1000B" % half for a in cmd]
            rc, err = run(cmd, log)
            one_line_refusal = rc != 0 and err.strip().count("\n") == 0 and "error:" in err
            if name == "simulate" and one_line_refusal and not bad_stderr(err):
                continue
            if rc != 0 or bad_stderr(err):
                failed += 1
                ok = False
                print("s%03d FAILED %s: %s: %s" % (i, name, desc, err.strip()[-400:]))
                break
        if ok:
            print("s%03d ok: %s" % (i, desc))
            os.remove(model)
    kind = "mid shapes" if mid else "%d of them gpt-oss" % n_oss
    print("random_shapes: %d shapes (seed %d; %s): %d ok, %d refused by mkmodel in one line, %d failed" %
          (n + n_oss, seed, kind, n + n_oss - failed - refused, refused, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
