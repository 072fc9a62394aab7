#!/usr/bin/env python3
"""tests/strp_compat.py: STRP profiles between moeplan and the other STRP readers, checked with a
writer and a reader of the published layout that share no code with moeplan's (struct only).

The other readers are Strata's read_expert_profile and the llama.cpp fork's
llama_read_expert_profile. Both read the 24-byte header ("STRP", u32 version, n_layers, n_experts,
slots, n_ranked), refuse a geometry other than the model's, refuse n_ranked > slots ("the header
claims more ranked pairs than slots"), read the n_ranked (u16 layer, u16 expert) pairs, refuse a
pair out of range, and never look past the pairs. Strata's own writer sets slots = n_ranked and
appends an int32 table holding each pair's rank (-1: not ranked).

  strp_compat.py check FILE... [--layers N --experts M]
      Read each FILE as those readers do, plus the layout's own rules (pairs unique, a trailing
      table of 0, 4 or 8 bytes per expert). Exit 0 if every file loads; else print one line naming
      the file, the offset and what was expected, and exit 1. The C tests run it on every profile
      moeplan writes.

  strp_compat.py write FILE VERSION N_LAYERS N_EXPERTS SLOTS [LAYER:EXPERT...]
      Write FILE with that header and those pairs (n_ranked: their count), no table, whatever
      the values: the hostile-input tests make refused profiles with it.

  strp_compat.py selftest
      The meson test `strp_compat` (MP_MOEPLAN: the moeplan binary; MP_SOURCE_ROOT: the tree).
      1. Files written here in every convention (Strata's; moeplan's, slots = n_ranked with a u64
         count table; moeplan's older one, slots < n_ranked; slots > n_ranked; f32 frequencies;
         no table; the recorded profiles under bench/results) are read by `moeplan profile`: its
         resident set must be the first min(slots, n_ranked) pairs and its whole ranking the pairs
         followed by the tail computed here from the table (schemas/strp.md).
      2. Profiles `moeplan simulate --emit-profile` writes, for several policies and budgets, must
         load in the reader here, list exactly their resident set (slots = n_ranked), and carry a
         u64 count table from which the tail computed here is the ranking moeplan reports.
"""
import glob
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

HEADER = struct.Struct("<4s5I")  # magic, version, n_layers, n_experts, slots, n_ranked


class Refused(Exception):
    pass


# ---- the writer: the published layout, nothing of moeplan's ----

def write_profile(path, n_layers, n_experts, slots, pairs, table=None, fmt=None, version=1):
    """table: n_layers * n_experts entries of struct format fmt ('i' int32, 'f' f32, 'Q' u64)."""
    data = HEADER.pack(b"STRP", version, n_layers, n_experts, slots, len(pairs))
    data += b"".join(struct.pack("<HH", layer, expert) for layer, expert in pairs)
    if table is not None:
        assert len(table) == n_layers * n_experts
        data += struct.pack("<%d%s" % (len(table), fmt), *table)
    with open(path, "wb") as f:
        f.write(data)


def rank_table(n_layers, n_experts, pairs):
    """Strata's int32 table: each pair's rank, -1 for an expert not ranked."""
    table = [-1] * (n_layers * n_experts)
    for rank, (layer, expert) in enumerate(pairs):
        table[layer * n_experts + expert] = rank
    return table


# ---- the reader ----

def read_profile(path, n_layers=None, n_experts=None):
    """What read_expert_profile / llama_read_expert_profile accept, and the layout's size rule.
    Returns (header fields, pairs, table width in bytes, table bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER.size:
        raise Refused("offset %d: %d bytes: expected a 24-byte header" % (len(data), len(data)))
    magic, version, layers, experts, slots, n_ranked = HEADER.unpack_from(data)
    if magic != b"STRP":
        raise Refused("offset 0: magic %r: expected b'STRP'" % magic)
    if version != 1:
        raise Refused("offset 4: version %d: expected 1" % version)
    if n_layers is not None and (layers, experts) != (n_layers, n_experts):
        raise Refused("offset 8: %dx%d: expected the model's %dx%d" % (layers, experts, n_layers, n_experts))
    if n_ranked > slots:
        raise Refused("offset 20: the header claims more ranked pairs than slots (n_ranked %d > slots %d): "
                      "expected n_ranked <= slots" % (n_ranked, slots))
    end = HEADER.size + 4 * n_ranked
    if len(data) < end:
        raise Refused("offset %d: the ranked list is truncated: expected %d pairs ending at offset %d"
                      % (len(data), n_ranked, end))
    pairs = [struct.unpack_from("<HH", data, HEADER.size + 4 * i) for i in range(n_ranked)]
    for i, (layer, expert) in enumerate(pairs):
        if layer >= layers or expert >= experts:
            raise Refused("offset %d: pair %d is (layer %d, expert %d): expected < (%d, %d)"
                          % (HEADER.size + 4 * i, i, layer, expert, layers, experts))
    seen = {}
    for i, pair in enumerate(pairs):
        if pair in seen:
            raise Refused("offset %d: pair %d repeats pair %d: expected unique pairs"
                          % (HEADER.size + 4 * i, i, seen[pair]))
        seen[pair] = i
    cells = layers * experts
    rest = len(data) - end
    if rest not in (0, 4 * cells, 8 * cells):
        raise Refused("offset %d: %d bytes after the pairs: expected 0, %d or %d"
                      % (end, rest, 4 * cells, 8 * cells))
    header = {"n_layers": layers, "n_experts": experts, "slots": slots, "n_ranked": n_ranked}
    return header, pairs, rest // cells if cells else 0, data[end:]


def tail(n_layers, n_experts, pairs, weights):
    """The ranking past the pairs (schemas/strp.md): every expert not among the pairs, in a layer
    whose weights are not all zero, by weight descending, then by (layer, expert)."""
    if weights is None:
        return []
    listed = set(pairs)
    out = []
    for layer in range(n_layers):
        row = weights[layer * n_experts:(layer + 1) * n_experts]
        if any(w != 0 for w in row):
            out += [(layer, e) for e in range(n_experts) if (layer, e) not in listed]
    out.sort(key=lambda c: (-weights[c[0] * n_experts + c[1]], c))
    return out


def check(paths, n_layers=None, n_experts=None, quiet=False):
    for path in paths:
        try:
            read_profile(path, n_layers, n_experts)
        except (Refused, OSError) as e:
            if not quiet:
                print("strp_compat: %s: %s" % (path, e.strerror if isinstance(e, OSError) else e))
            return 1
    return 0


# ---- what moeplan makes of a file ----

def moeplan(*args, ok=True):
    r = subprocess.run([os.environ["MP_MOEPLAN"], *args], capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise AssertionError("moeplan %s: exit %d: %s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


def moeplan_reading(path):
    """moeplan profile inspect's header, resident count, ranking and table kind."""
    out = moeplan("profile", "inspect", path, "--top", "4294967295").stdout
    got = {}
    m = re.search(r"^header: +slots (\d+), n_ranked (\d+): (loads in|refused by) ", out, re.M)
    assert m, out
    got["slots"], got["n_ranked"], got["loads"] = int(m.group(1)), int(m.group(2)), m.group(3) == "loads in"
    got["resident"] = int(re.search(r"^resident: +(\d+) ", out, re.M).group(1))
    m = re.search(r"^ranking: +(\d+) = (\d+) pairs \+ (\d+) ranked", out, re.M)
    got["n_ranking"] = int(m.group(1))
    got["table"] = re.search(r"^table: +(\S+)", out, re.M).group(1)
    top = out[out.index("\ntop ") + 1:].splitlines()[1:]
    got["ranking"] = [tuple(int(x) for x in line.split()[1:3]) for line in top]
    assert len(got["ranking"]) == got["n_ranking"], out
    return got


class Cases:
    def __init__(self):
        self.failures = 0
        self.n = 0

    def expect(self, cond, what):
        self.n += 1
        if not cond:
            self.failures += 1
            print("FAIL: %s" % what)


def expect_reading(cases, name, path, n_layers, n_experts, slots, pairs, weights, table):
    """moeplan reads the file as the format says, and the reader here agrees on loading."""
    got = moeplan_reading(path)
    want_ranking = list(pairs) + tail(n_layers, n_experts, pairs, weights)
    cases.expect((got["slots"], got["n_ranked"]) == (slots, len(pairs)), "%s: header %s" % (name, got))
    cases.expect(got["resident"] == min(slots, len(pairs)), "%s: resident %d" % (name, got["resident"]))
    cases.expect(got["ranking"] == want_ranking, "%s: ranking %s, expected %s" % (name, got["ranking"][:20],
                                                                                  want_ranking[:20]))
    cases.expect(got["table"] == table, "%s: table %s, expected %s" % (name, got["table"], table))
    loads = len(pairs) <= slots
    cases.expect(got["loads"] == loads, "%s: moeplan says loads=%s" % (name, got["loads"]))
    cases.expect((check([path], n_layers, n_experts, quiet=True) == 0) == loads, "%s: the reader here disagrees" % name)
    v = moeplan("profile", "verify", path, "--layers", str(n_layers), "--experts", str(n_experts))
    cases.expect("valid STRP v1" in v.stdout, "%s: verify: %s" % (name, v.stdout))


def files_written_here(cases, tmp, root):
    rng = random.Random(7)
    L, E = 6, 4  # blocks 0, 3 and 4 are dense: no pairs, zero table rows
    moe = [1, 2, 5]
    cells = [(layer, e) for layer in moe for e in range(E)]
    counts = [0] * (L * E)
    for layer, e in cells:
        counts[layer * E + e] = rng.choice([0, 3, 3, 7, 12, 40])  # ties and never-routed experts
    by_count = sorted(cells, key=lambda c: (-counts[c[0] * E + c[1]], c))
    resident = by_count[:5]

    def case(name, slots, pairs, table=None, fmt=None, weights=None, kind="none", n_layers=L):
        path = os.path.join(tmp, name + ".strp")
        write_profile(path, n_layers, E, slots, pairs, table, fmt)
        expect_reading(cases, name, path, n_layers, E, slots, pairs, weights, kind)

    # Strata's writer: everything ranked, slots = n_ranked, the rank table
    everything = [(layer, e) for layer in range(3) for e in range(E)]
    rng.shuffle(everything)
    case("strata", len(everything), everything, rank_table(3, E, everything), "i", kind="int32-slot", n_layers=3)
    # slots > n_ranked, which those readers load: the pairs are the resident set
    case("strata-spare-slots", 4, [(1, 2), (0, 0)], rank_table(L, E, [(1, 2), (0, 0)]), "i", kind="int32-slot")
    # moeplan's convention: the resident set as the pairs, the counts rank the rest
    case("moeplan", 5, resident, counts, "Q", counts, "u64-count")
    case("moeplan-no-room", 0, [], counts, "Q", counts, "u64-count")
    # moeplan's older files: every MoE expert listed, the first `slots` resident
    case("moeplan-older", 5, by_count, counts, "Q", counts, "u64-count")
    # f32 frequencies rank the rest too (ties broken by layer, expert)
    freq = [c / 7.0 for c in counts]
    case("f32", 2, resident[:2], freq, "f", struct.unpack("<%df" % len(freq), struct.pack("<%df" % len(freq), *freq)),
         "f32-frequency")
    case("no-table", 3, resident[:3])
    case("zero-table", 2, resident[:2], [0] * (L * E), "i", [0] * (L * E), "4-byte-ambiguous")

    # the reader here refuses what those readers refuse
    bad = os.path.join(tmp, "bad.strp")
    for name, data in [("short", b"STRP\1\0\0\0"), ("magic", HEADER.pack(b"STRQ", 1, 1, 1, 1, 0)),
                       ("more-ranked", HEADER.pack(b"STRP", 1, 1, 2, 1, 2) + struct.pack("<4H", 0, 0, 0, 1)),
                       ("cut", HEADER.pack(b"STRP", 1, 1, 2, 2, 2) + struct.pack("<2H", 0, 0)),
                       ("range", HEADER.pack(b"STRP", 1, 1, 2, 1, 1) + struct.pack("<2H", 0, 2))]:
        with open(bad, "wb") as f:
            f.write(data)
        cases.expect(check([bad], quiet=True) == 1, "the reader here loads a file with a bad %s" % name)

    # the profiles recorded under bench/results: those in moeplan's older convention (every expert
    # listed) read as before, and rewritten with only their resident set listed they give moeplan
    # the same whole ranking; those in the current one (the resident set listed, the counts after
    # it) give the resident set and then the counts' order
    recorded = sorted(glob.glob(os.path.join(root, "bench", "results", "**", "*.strp"), recursive=True))
    cases.expect(len(recorded) > 0, "no recorded profiles under bench/results")
    for path in recorded:
        header, pairs, width, table = read_profile_any(path)
        old = moeplan_reading(path)
        cells_n = header["n_layers"] * header["n_experts"]
        if header["n_ranked"] <= header["slots"]:
            counts = list(struct.unpack("<%dQ" % cells_n, table)) if width == 8 else None
            want = pairs + (tail(header["n_layers"], header["n_experts"], pairs, counts) if counts else [])
            cases.expect(old["ranking"] == want and old["resident"] == header["n_ranked"],
                         "%s: moeplan reads the resident set and the counts' order differently" % path)
            cases.expect(check([path]) == 0, "%s: the reader here refuses it" % path)
            continue
        cases.expect(old["ranking"] == pairs and old["resident"] == header["slots"],
                     "%s: moeplan reads the recorded ranking differently" % path)
        counts = list(struct.unpack("<%dQ" % cells_n, table)) if width == 8 else None
        new = os.path.join(tmp, "rewritten.strp")
        write_profile(new, header["n_layers"], header["n_experts"], header["slots"], pairs[:header["slots"]],
                      counts, "Q")
        cases.expect(tail(header["n_layers"], header["n_experts"], pairs[:header["slots"]], counts)
                     == pairs[header["slots"]:], "%s: the counts do not give the recorded ranking" % path)
        cases.expect(moeplan_reading(new)["ranking"] == pairs, "%s: rewritten, moeplan ranks differently" % path)
        cases.expect(check([new]) == 0, "%s: rewritten, the reader here refuses it" % path)


def read_profile_any(path):
    """read_profile without the n_ranked <= slots rule (for moeplan's older files)."""
    with open(path, "rb") as f:
        data = f.read()
    _, _, layers, experts, slots, n_ranked = HEADER.unpack_from(data)
    end = HEADER.size + 4 * n_ranked
    pairs = [struct.unpack_from("<HH", data, HEADER.size + 4 * i) for i in range(n_ranked)]
    rest = len(data) - end
    return ({"n_layers": layers, "n_experts": experts, "slots": slots, "n_ranked": n_ranked}, pairs,
            rest // (layers * experts), data[end:])


def files_moeplan_writes(cases, tmp, root):
    """simulate --emit-profile over a trace of MoE blocks 1, 2 and 5 (4 experts, top-2)."""
    rng = random.Random(11)
    rows = ["seq,pos,layer,e0,e1,w0,w1"]
    for seq in range(6):
        for pos in range(5):
            for layer in (1, 2, 5):
                first = 0 if rng.random() < 0.5 else rng.randrange(4)
                second = rng.choice([e for e in range(4) if e != first])
                rows.append("%d,%d,%d,%d,%d,0.5,0.3" % (seq, pos, layer, first, second))
    csv = os.path.join(tmp, "r.csv")
    with open(csv, "w") as f:
        f.write("\n".join(rows) + "\n")
    db = os.path.join(tmp, "t.db")
    moeplan("import", "csv", csv, "--trace", db, "--experts", "4")
    costs = os.path.join(root, "tests", "fixtures", "costs", "fixture.json")
    # 1e6-byte experts beyond 1e6 bytes of the rest: room for 0, 5 and all 12 experts
    for budget, room in (("1000000B", 0), ("6000000B", 5), ("20000000B", 12)):
        for policy in ("static-topn", "plan", "first-n-cpu", "best-layers"):
            name = "%s-%s" % (policy, budget)
            path = os.path.join(tmp, name + ".strp")
            moeplan("simulate", db, "--costs", costs, "--expert", "Q4_K", "--budget", budget,
                    "--non-expert-bytes", "1000000", "--policy", policy, "--profile-policy", policy,
                    "--emit-profile", path, "--force")
            cases.expect(check([path], 6, 4) == 0, "%s: the reader here refuses it" % name)
            header, pairs, width, table = read_profile_any(path)
            cases.expect(header["slots"] == header["n_ranked"], "%s: header %s" % (name, header))
            cases.expect(header["n_ranked"] <= room, "%s: %d resident for room of %d" % (name, len(pairs), room))
            cases.expect(width == 8, "%s: table of %d bytes an entry, expected u64 counts" % (name, width))
            counts = list(struct.unpack("<24Q", table))
            ranking = pairs + tail(6, 4, pairs, counts)
            cases.expect(sorted(ranking) == [(layer, e) for layer in (1, 2, 5) for e in range(4)],
                         "%s: the ranking does not hold every MoE expert once: %s" % (name, ranking))
            got = moeplan_reading(path)
            cases.expect(got["ranking"] == ranking and got["loads"], "%s: moeplan reads %s" % (name, got))
            with open(path + ".json") as f:
                manifest = json.load(f)["strp"]
            cases.expect((manifest["slots"], manifest["n_ranked"], manifest["resident"], manifest["n_ranking"])
                         == (header["slots"], header["n_ranked"], len(pairs), len(ranking)),
                         "%s: manifest %s" % (name, manifest))


def selftest():
    root = os.environ["MP_SOURCE_ROOT"]
    cases = Cases()
    with tempfile.TemporaryDirectory(prefix="mp_strp_compat_") as tmp:
        files_written_here(cases, tmp, root)
        files_moeplan_writes(cases, tmp, root)
    print("%d checks, %d failed" % (cases.n, cases.failures))
    return 1 if cases.failures else 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "selftest":
        return selftest()
    if len(argv) >= 7 and argv[1] == "write":
        version, n_layers, n_experts, slots = map(int, argv[3:7])
        pairs = [tuple(map(int, p.split(":"))) for p in argv[7:]]
        write_profile(argv[2], n_layers, n_experts, slots, pairs, version=version)
        return 0
    if len(argv) >= 3 and argv[1] == "check":
        args, geometry = argv[2:], {}
        for flag in ("--layers", "--experts"):
            if flag in args:
                i = args.index(flag)
                geometry[flag] = int(args[i + 1])
                del args[i:i + 2]
        if len(geometry) == 1:
            print("strp_compat: --layers and --experts go together")
            return 2
        return check(args, geometry.get("--layers"), geometry.get("--experts"))
    print("usage: strp_compat.py check FILE... [--layers N --experts M] | strp_compat.py write FILE VERSION "
          "N_LAYERS N_EXPERTS SLOTS [LAYER:EXPERT...] | strp_compat.py selftest")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
