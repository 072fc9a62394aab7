#!/usr/bin/env python3
"""tests/check_cli_conventions.py: the command-line conventions of every command
(docs/user-guide.md, "Command line conventions"; docs/errors.md, "Exit status").

For every command: --opt=value reads as --opt value; an unknown option is one line with a
suggestion from the command's own options and exit 2; a missing value says "needs a value" only
when the value is missing; `moeplan help CMD` is `moeplan CMD --help`. The llama.cpp aliases give
what the names they stand for give. A bad input file exits 1, a usage error 2, a failure while
working 1, in every command.

The moeplan binary is MP_MOEPLAN, the source tree MP_SOURCE_ROOT (tests/meson.build).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

MOEPLAN = os.environ.get("MP_MOEPLAN", "")
ROOT = os.environ.get("MP_SOURCE_ROOT", "")
failures = []


def fail(what):
    failures.append(what)


def run(*args):
    p = subprocess.run([MOEPLAN, *args], capture_output=True, text=True, errors="replace", timeout=120)
    return p.returncode, p.stdout, p.stderr


def expect(args, code, line=None, contains=None):
    """exit code, and stderr's last line equal to line / containing contains"""
    rc, out, err = run(*args)
    last = err.strip().split("\n")[-1] if err.strip() else ""
    if rc != code:
        fail(f"moeplan {' '.join(args)}: exit {rc}, expected {code}: {err.strip()[:300]}")
    elif line is not None and last != line:
        fail(f"moeplan {' '.join(args)}: stderr {last!r}, expected {line!r}")
    elif contains is not None and contains not in err:
        fail(f"moeplan {' '.join(args)}: stderr lacks {contains!r}: {err.strip()[:300]}")
    return rc, out, err


def same(a, b, streams="all"):
    """two command lines give the same exit code and output (stdout only: streams='out')"""
    ra, rb = run(*a), run(*b)
    if streams == "out":
        ra, rb = ra[:2], rb[:2]
    if ra != rb:
        fail(f"moeplan {' '.join(a)} and moeplan {' '.join(b)} differ: {ra} / {rb}")
    return ra


def main():
    if not MOEPLAN or not ROOT:
        sys.exit("usage: MP_MOEPLAN=moeplan MP_SOURCE_ROOT=DIR check_cli_conventions.py")
    model = os.path.join(ROOT, "tests/fixtures/hf/qwen3moe-tiny-f32.gguf")
    costs = os.path.join(ROOT, "tests/fixtures/costs/fixture.json")
    tmp = tempfile.mkdtemp(prefix="mp_cli_")
    try:
        os.chdir(tmp)
        with open("r.csv", "w") as f:
            f.write("seq,pos,layer,e0,e1,w0,w1\n0,0,0,0,1,0.5,0.3\n0,0,1,2,3,0.6,0.2\n"
                    "0,1,0,0,2,0.5,0.3\n0,1,1,2,0,0.6,0.2\n")
        with open("p.jsonl", "w") as f:
            f.write('"Hello world"\n')
        if run("import", "csv", "r.csv", "--trace", "t.db", "--experts", "4")[0] != 0:
            fail("import csv r.csv: the fixture trace was not made")
        check(model, costs)
    finally:
        os.chdir("/")
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    print(f"command-line conventions: {len(failures)} failures")
    return 1 if failures else 0


def check(model, costs):
    sim = ["t.db", "--costs", costs, "--budget", "64MiB"]
    # (command, the arguments that make it reach its options, a typo and the option it means,
    #  an option that takes a value, a bad value for it that the parser's caller refuses)
    cases = [
        ("run", ["-m", model, "-p", "hi"], "--n-predit", "--n-predict", "--top-k", "-1"),
        ("bench", ["-m", model], "--repetition", "--repetitions", "--repetitions", "0"),
        ("collect", ["-m", model, "--prompts", "p.jsonl", "--trace", "c.db"], "--max-token",
         "--max-tokens", "--max-tokens", "0"),
        ("import", ["csv", "r.csv", "--trace", "i.db"], "--expert", "--experts", "--experts", "0"),
        ("trace", ["materialize", "t.db"], "--no-progres", "--no-progress", None, None),
        ("analyze", ["t.db", "--out", "rep"], "--train-frak", "--train-frac", "--train-frac", "2"),
        ("calibrate", ["-m", model, "--out", "c.json"], "--rep", "--reps", "--reps", "2"),
        ("simulate", sim, "--windwo", "--window", "--window", "0"),
        ("plan", ["t.db", "-m", model, "--costs", costs, "--budget", "64MiB", "-o", "p.strp"],
         "--repetition", "--repetitions", "--repetitions", "0"),
        ("profile", ["inspect", "p.strp"], "--tp", "--top", "--top", "x"),
        ("inspect", [model], "--tensor", "--tensors", None, None),
        ("mkmodel", ["--preset", "tiny", "-o", "m.gguf"], "--skwe", "--skew", "--skew", "-1"),
        ("config", [], "--jsn", "--json", None, None),
    ]
    for cmd, base, typo, meant, vflag, bad in cases:
        see = f"(see moeplan {cmd} --help)"
        # an unknown option: one message, the usage exit code, a suggestion when one is near
        expect([cmd, *base, "--no-such-option"], 2,
               f"moeplan {cmd}: error: unknown option '--no-such-option' {see}")
        expect([cmd, *base, typo], 2,
               f"moeplan {cmd}: error: unknown option '{typo}'; did you mean {meant}? {see}")
        expect([cmd, *base, typo + "=1"], 2,
               f"moeplan {cmd}: error: unknown option '{typo}'; did you mean {meant}? {see}")
        # an abbreviation is not taken for the option
        expect([cmd, *base, meant[:-1]], 2, contains=f"did you mean {meant}?")
        if vflag:
            expect([cmd, *base, vflag], 2, f"moeplan {cmd}: error: option {vflag} needs a value {see}")
            # --opt=value is --opt value: the same refusal of the same value
            rc, _, err = same([cmd, *base, f"{vflag}={bad}"], [cmd, *base, vflag, bad])
            if rc != 2 or bad not in err:
                fail(f"moeplan {cmd} {vflag}={bad}: exit {rc}, expected 2 naming '{bad}': {err.strip()}")
        # help CMD is CMD --help
        rc, out, _ = run("help", cmd)
        if (rc, out) != run(cmd, "--help")[:2] or rc != 0 or not out.startswith("usage:"):
            fail(f"moeplan help {cmd}: exit {rc}, not moeplan {cmd} --help")
    expect(["inspect", model, "--json=1"], 2,
           "moeplan inspect: error: option --json takes no value (see moeplan inspect --help)")
    expect(["help", "simulat"], 2,
           "moeplan: error: unknown command 'simulat'; did you mean simulate? (see moeplan --help)")
    expect(["simulat"], 2,
           "moeplan: error: unknown command 'simulat'; did you mean simulate? (see moeplan --help)")
    # --opt=value works where the value is taken, not only where it is refused
    same(["mkmodel", "--preset=tiny", "--output=m.gguf", "--seed=7", "--dry-run"],
         ["mkmodel", "--preset", "tiny", "--output", "m.gguf", "--seed", "7", "--dry-run"])
    gen = ["run", "-m", model, "-p", "hi", "-n", "4", "--temp", "0.8", "--raw"]
    same([*gen, "--seed=5"], [*gen, "--seed", "5"], streams="out")
    same([*gen, "--seed=5"], [*gen, "-s", "5"], streams="out")
    same([*gen, "--seed=5"], [*gen, "-s5"], streams="out")

    # aliases
    long_prompt = ["run", "-m", model, "-p", "a prompt of more than eight tokens, surely", "-n", "1"]
    for ctx in (["-c", "8"], ["--ctx", "8"], ["--ctx=8"], ["--ctx-size", "8"]):
        expect([*long_prompt, *ctx], 1, contains="more than the context of 8")
    dry = ["bench", "-m", model, "-p", "0", "-n", "2", "--dry-run", "--executor", "cpu"]
    # more threads than the CPUs the process may use: said; as many: not (one allowed CPU, by the
    # affinity mask the child inherits; runtime/cpus.c)
    if hasattr(os, "sched_setaffinity"):
        allowed = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(allowed)})
        try:
            expect([*dry, "-t", "2"], 0, contains="warning: 2 threads, more than the 1 CPU this process may use")
            _, _, err = expect([*dry, "-t", "1"], 0)
            if "more than the" in err:
                fail(f"bench -t 1 on one allowed CPU warned: {err.strip()[:300]}")
            _, out, _ = expect(["bench", "-m", model, "-p", "0", "-n", "1", "-r", "1", "--executor", "cpu",
                                "-o", "json"], 0)
            if json.loads(out)["rows"][0]["threads"] != 1:
                fail(f"bench's default threads on one allowed CPU: {out[:300]}")
        finally:
            os.sched_setaffinity(0, allowed)
    same([*dry, "--n-cpu-moe", "1"], [*dry, "--placement", "layers:1"])
    same([*dry, "--n-cpu-moe=2"], [*dry, "--placement=layers:2"])
    same([*dry, "--cpu-moe"], [*dry, "--placement", "cpu"])
    expect([*dry, "--n-cpu-moe", "x"], 2, contains="--n-cpu-moe 'x': expected a layer count")
    expect([*dry, "--cpu-moe", "--placement", "gpu"], 2, contains="give only one of")
    collect = ["collect", "-m", model, "--prompts", "p.jsonl", "--trace", "g.db", "--max-tokens", "1",
               "--no-progress", "--force"]
    for args in ([*gen, "-n", "1"], dry, collect):
        expect([*args, "-ngl", "99"], 0, contains=f"moeplan {args[0]}: note: -ngl 99 ignored")
        expect([*args, "--n-gpu-layers", "x"], 2, contains="'x'" if args[0] != "collect" else " x:")
    same(["collect", "-m", model, "--prompts", "p.jsonl", "--trace", "c.db", "-t", "5000"],
         ["collect", "-m", model, "--prompts", "p.jsonl", "--trace", "c.db", "-t5000"])
    expect(["collect", "-m", model, "--prompts", "p.jsonl", "--trace", "c.db", "-t", "5000"], 2,
           contains="-t 5000: expected an integer in 0..4096")
    expect(["collect", "-m", model, "--prompts", "p.jsonl", "--trace", "c.db", "-b", "-1"], 2,
           contains="-b -1: expected an integer")
    # the strict parser every command shares: no sign, no blank before the digits
    expect(["collect", "-m", model, "--prompts", "p.jsonl", "--trace", "c.db", "-t", "+2"], 2,
           contains="-t +2: expected an integer in 0..4096")
    expect(["collect", "-m", model, "--prompts", "p.jsonl", "--trace", "c.db", "--max-tokens", " 1"], 2,
           contains="--max-tokens  1: expected an integer in 1..")
    expect(["import", "csv", "r.csv", "--trace", "i2.db", "--experts", "+4"], 2,
           contains="--experts +4: expected an integer in 1..65536")
    expect(["analyze", "t.db", "--validate-only", "-o", "rep"], 2, contains="--validate-only writes nothing")
    expect(["calibrate", "-m", model, "-o", "no/such/dir/c.json"], 1, contains="no/such/dir")
    same(["calibrate", "-m", model, "-o", "no/such/dir/c.json"],
         ["calibrate", "-m", model, "--output=no/such/dir/c.json"])
    expect(["simulate", *sim, "-c", "0"], 2, contains="-c '0': expected an integer")
    expect([*gen, "-t", "0"], 2, contains="'0' for -t: expected an integer 1..1024")
    expect([*gen, "--top-p", "2"], 2, contains="'2' for --top-p: expected a number 0..1")
    expect(["plan", "t.db", "-m", model, "--costs", "c.json", "--budget", "1MiB", "-o", "p.strp", "-r", "0"], 2,
           contains="'0' for -r: expected an integer 1..100")

    # exit codes: a bad input file exits 1 in every command that reads one, a failure while
    # working 1, a usage error 2 (above: an unknown option, in every command)
    missing = "no-such-file"
    bad_input = [
        ["run", "-m", missing, "-p", "hi"],
        ["bench", "-m", missing, "-p", "0", "-n", "1"],
        ["collect", "-m", missing, "--prompts", "p.jsonl", "--trace", "x.db"],
        ["import", "csv", missing, "--trace", "x.db"],
        ["trace", "materialize", missing],
        ["analyze", missing, "--validate-only"],
        ["calibrate", "-m", missing, "--out", "x.json"],
        ["simulate", missing, "--costs", costs, "--budget", "64MiB"],
        ["plan", missing, "-m", model, "--costs", costs, "--budget", "64MiB", "-o", "x.strp"],
        ["profile", "inspect", missing],
        ["inspect", missing],
    ]
    for args in bad_input:
        expect(args, 1, contains=missing)
    failing = [
        long_prompt + ["-c", "8"],                                  # run: the prompt does not fit
        dry + ["--placement", "gpu", "--gpu-budget", "1KiB"],       # bench: the budget is too small
        ["mkmodel", "--preset", "tiny", "-o", "no/such/dir/m.gguf"],  # mkmodel: cannot write
        ["import", "csv", "r.csv", "--trace", "t.db"],              # import: the output exists
    ]
    for args in failing:
        expect(args, 1)
    expect(["config", "extra"], 2, contains="unexpected argument 'extra'")


if __name__ == "__main__":
    sys.exit(main())
