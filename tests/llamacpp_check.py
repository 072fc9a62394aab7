#!/usr/bin/env python3
"""tests/llamacpp_check.py — checks `moeplan simulate --emit-llamacpp` against the GGUF itself,
with no moeplan code: its own GGUF reader, llama.cpp's sizes and Python's regex engine.

usage: llamacpp_check.py MODEL.gguf REPORT.json CTX BUDGET_BYTES[,...] [COMPUTE_BYTES]

For every budget of the simulate JSON report: the KV cache, weights and compute buffers equal
an independent calculation from the GGUF's metadata and tensor list (KV: n_ctx padded to 256 x
sum over blocks of head_count_kv x (key_length + value_length) x 2 bytes, F16); the command's
-ot regex (re.search, as llama.cpp's std::regex_search) or --n-cpu-moe N (llama.cpp's
common/common.h: one regex blk\\.i + LLM_FFN_EXPS_REGEX per block i < N) selects exactly the
expert tensors of whole blocks and nothing else; -ot is printed only when those blocks are not a
prefix; and what the GPU then holds fits the budget. With COMPUTE_BYTES (simulate's
--llamacpp-compute-buffer) the compute buffers are expected to be that instead of the estimate. Prints one line per budget:
`budget B: cpu blocks 1,2 via -ot` (or `via --n-cpu-moe`, `none`, `no command`)."""
import json
import re
import shlex
import struct
import sys

# ggml type id -> (bytes per block, elements per block): public ggml facts (ggml/include/ggml.h)
TYPE_SIZE = {0: (4, 1), 1: (2, 1), 2: (18, 32), 3: (20, 32), 6: (22, 32), 7: (24, 32), 8: (34, 32),
             9: (36, 32), 10: (84, 256), 11: (110, 256), 12: (144, 256), 13: (176, 256),
             14: (210, 256), 15: (292, 256), 20: (18, 32), 30: (2, 1), 39: (17, 32)}
EXPS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"  # llama.cpp common/common.h LLM_FFN_EXPS_REGEX
EXPERT = re.compile(r"^blk\.(\d+)" + EXPS)


def read_gguf(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return vals[0] if len(vals) == 1 else vals

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    assert data[:4] == b"GGUF", path
    pos = 4
    _version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    kv = {}
    for _ in range(n_kv):
        key = string()
        kv[key] = value(take("I"))
    tensors = {}
    for _ in range(n_tensors):
        name = string()
        n_dims = take("I")
        ne = [take("Q") for _ in range(n_dims)]
        ttype, _offset = take("I"), take("Q")
        block_bytes, block_elems = TYPE_SIZE[ttype]
        n = 1
        for d in ne:
            n *= d
        tensors[name] = (ne, n // block_elems * block_bytes)
    return kv, tensors


def expected(kv, tensors, ctx):
    arch = kv["general.architecture"]
    g = lambda k, d=None: kv.get(arch + "." + k, d)
    n_block, n_embd, n_head = g("block_count"), g("embedding_length"), g("attention.head_count")
    head_kv = g("attention.head_count_kv", n_head)
    k_len = g("attention.key_length", n_embd // n_head)
    v_len = g("attention.value_length", n_embd // n_head)
    cells = (ctx + 255) // 256 * 256
    kv_bytes = sum((head_kv[i] if isinstance(head_kv, list) else head_kv) * (k_len + v_len)
                   for i in range(n_block)) * cells * 2
    weights = sum(b for name, (ne, b) in tensors.items() if not EXPERT.search(name) and name != "token_embd.weight")
    if "output.weight" not in tensors:
        weights += tensors["token_embd.weight"][1]
    n_vocab = tensors["token_embd.weight"][0][1]
    used, ff = g("expert_used_count", 0), g("expert_feed_forward_length", 0)
    compute = 4 * 512 * (n_vocab + n_head * cells + 2 * used * ff + used * n_embd + 8 * n_embd)
    return kv_bytes, cells, weights, compute


def selected(cmd, names):
    """The tensors the command keeps on the CPU, and how it says so."""
    args = shlex.split(cmd)
    assert args[:2] == ["llama-server", "-m"] and args[3:5] == ["-ngl", "99"], cmd
    if "-ot" in args:
        pattern, buft = args[args.index("-ot") + 1].rsplit("=", 1)
        assert buft == "CPU", cmd
        rx = re.compile(pattern)
        return {n for n in names if rx.search(n)}, "-ot"
    if "--n-cpu-moe" in args:
        n = int(args[args.index("--n-cpu-moe") + 1])
        rxs = [re.compile(r"blk\.%d" % i + EXPS) for i in range(n)]
        return {t for t in names if any(r.search(t) for r in rxs)}, "--n-cpu-moe"
    assert len(args) == 7, cmd
    return set(), None


def main():
    model, report, ctx, budgets = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
    kv, tensors = read_gguf(model)
    kv_bytes, cells, weights, compute = expected(kv, tensors, ctx)
    if len(sys.argv) > 5:
        compute = int(sys.argv[5])
    by_block = {}
    for name, (_ne, b) in tensors.items():
        m = EXPERT.search(name)
        if m:
            by_block.setdefault(int(m.group(1)), set()).add(name)
    rep = json.load(open(report))
    ok = True
    for i, entry in enumerate(rep["budgets"]):
        lc, budget = entry["llamacpp"], int(budgets[i])
        got = (lc["kv_bytes"], lc["kv_cells"], lc["weights_bytes"], lc["compute_bytes"])
        if got != (kv_bytes, cells, weights, compute):
            print("budget %d: kv, cells, weights, compute %s, expected %s" % (budget, got, (kv_bytes, cells, weights, compute)))
            ok = False
            continue
        fixed = kv_bytes + weights + compute
        if "command" not in lc:
            if fixed <= budget:
                print("budget %d: no command, yet llama.cpp's %d bytes fit" % (budget, fixed))
                ok = False
            print("budget %d: no command" % budget)
            continue
        args = shlex.split(lc["command"])
        assert args[2] == model and args[5:7] == ["-c", str(ctx)], lc["command"]
        cpu, how = selected(lc["command"], tensors)
        blocks = sorted({int(EXPERT.search(n).group(1)) for n in cpu if EXPERT.search(n)})
        whole = set().union(*[by_block[b] for b in blocks]) if blocks else set()
        if cpu != whole:
            print("budget %d: the command selects %s, expected the expert tensors of whole blocks %s" %
                  (budget, sorted(cpu ^ whole), blocks))
            ok = False
        prefix = blocks == sorted(by_block)[:len(blocks)]
        if how == "-ot" and prefix:
            print("budget %d: -ot for the prefix blocks %s, expected --n-cpu-moe" % (budget, blocks))
            ok = False
        gpu_experts = sum(tensors[n][1] for b in by_block if b not in blocks for n in by_block[b])
        if gpu_experts != lc["gpu_expert_bytes"] or fixed + gpu_experts > budget:
            print("budget %d: GPU experts %d bytes (report %d) + %d over the budget" %
                  (budget, gpu_experts, lc["gpu_expert_bytes"], fixed))
            ok = False
        print("budget %d: cpu blocks %s via %s" % (budget, ",".join(map(str, blocks)) or "none", how))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
