#!/usr/bin/env python3
"""tests/check_gpu_module.py: the moeplan binary needs no CUDA library; the GPU side is one module.

Checks, on the built tree (MP_MOEPLAN: the binary; argv[1]: the GPU module's path, or "" when this
build has none):
  - the binary's NEEDED entries name no CUDA library (cudart, cuBLAS, CUPTI, the driver);
  - a copy of the binary alone in an empty folder (a machine without the module or the CUDA
    libraries, as far as moeplan can tell) imports a CSV trace, analyzes and simulates it, and
    refuses `run --executor gpu` and `collect --cupti` in one line each that says the GPU module is
    not there (a build without CUDA: that it was built without), exit status 1;
  - with CUDA in the build: the module needs the CUDA libraries itself, exports one symbol
    (mp_gpu_module), and a copy of it whose build commit differs from the binary's is refused in
    one line ("belongs to another build"), not loaded.
Exit 0 when all hold, 1 with a line per failure.
"""
import os
import shutil
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


def needed(path):
    out = run(["readelf", "-d", path]).stdout
    return [line.split("[", 1)[1].split("]", 1)[0] for line in out.splitlines() if "(NEEDED)" in line]


CUDA_LIBS = ("libcudart", "libcublas", "libcupti", "libcuda.", "libnvrtc")


def main():
    moeplan = os.environ["MP_MOEPLAN"]
    root = os.environ["MP_SOURCE_ROOT"]
    module = sys.argv[1] if len(sys.argv) > 1 else ""
    libs = needed(moeplan)
    check(libs, f"readelf -d {moeplan} listed no NEEDED entry")
    cuda = [lib for lib in libs if lib.startswith(CUDA_LIBS)]
    check(not cuda, f"moeplan needs CUDA libraries at load time: {cuda}")

    model = os.path.join(root, "tests", "fixtures", "hf", "qwen3moe-tiny-f32.gguf")
    csv_text = ("seq,pos,layer,e0,e1,w0,w1\n0,0,0,0,1,0.5,0.3\n0,0,1,2,3,0.6,0.2\n0,1,0,0,2,0.5,0.3\n"
                "0,1,1,2,0,0.6,0.2\n")
    costs = os.path.join(root, "tests", "fixtures", "costs", "fixture.json")
    with tempfile.TemporaryDirectory() as tmp:
        alone = os.path.join(tmp, "bin")
        os.mkdir(alone)
        exe = os.path.join(alone, "moeplan")
        shutil.copy2(moeplan, exe)
        trace = os.path.join(tmp, "t.db")
        csv = os.path.join(tmp, "r.csv")
        with open(csv, "w") as f:
            f.write(csv_text)
        r = run([exe, "import", "csv", csv, "--trace", trace, "--experts", "4"])
        check(r.returncode == 0, f"import without the module: rc {r.returncode}: {r.stderr.strip()}")
        r = run([exe, "analyze", trace, "-o", os.path.join(tmp, "report")])
        check(r.returncode == 0, f"analyze without the module: rc {r.returncode}: {r.stderr.strip()}")
        r = run([exe, "simulate", trace, "--costs", costs, "--expert", "Q4_K", "--budget", "3000000B",
                 "--non-expert-bytes", "1000000", "--policy", "static-topn"])
        check(r.returncode == 0, f"simulate without the module: rc {r.returncode}: {r.stderr.strip()}")
        r = run([exe, "run", "-m", model, "-p", "hi", "-n", "2", "--executor", "gpu"])
        lines = r.stderr.strip().splitlines()
        want = "GPU module" if module else "built without CUDA"  # a build without CUDA says so instead
        check(r.returncode == 1 and len(lines) == 1 and want in lines[0],
              f"run --executor gpu without the module: rc {r.returncode}, stderr {r.stderr!r}, expected one line "
              f"with {want!r}")
        prompts = os.path.join(tmp, "p.jsonl")
        with open(prompts, "w") as f:
            f.write('"hi"\n')
        r = run([exe, "collect", "-m", model, "--prompts", prompts, "--trace", os.path.join(tmp, "c.db"),
                 "--max-tokens", "2", "--no-progress", "--cupti"])
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and lines and "CUPTI unavailable" in lines[-1],
              f"collect --cupti without the module: rc {r.returncode}, stderr {r.stderr!r}")
        check(not os.path.exists(os.path.join(tmp, "c.db")), "collect --cupti left a trace behind")

        if module:
            mlibs = needed(module)
            check(any(lib.startswith("libcublas") for lib in mlibs),
                  f"the GPU module does not need cuBLAS: {mlibs}")
            syms = run(["nm", "-D", "--defined-only", module]).stdout.split()
            exported = [s for s in syms if s.startswith("mp_")]
            check(exported == ["mp_gpu_module"], f"the GPU module exports {exported}, expected mp_gpu_module alone")
            # another build's module: the same file with its commit string changed
            commit = run([moeplan, "--version"]).stdout.splitlines()[1].split(" ", 1)[1]
            data = open(module, "rb").read()
            marker = commit.encode() + b"\0"
            check(data.count(marker) >= 1, f"the module does not record the commit {commit!r}")
            other = (b"x" if marker[0:1] != b"x" else b"y") + marker[1:]
            tree = os.path.join(tmp, "tree")
            os.makedirs(os.path.join(tree, "cli"))
            os.makedirs(os.path.join(tree, "gpu"))
            shutil.copy2(moeplan, os.path.join(tree, "cli", "moeplan"))
            with open(os.path.join(tree, "gpu", os.path.basename(module)), "wb") as f:
                f.write(data.replace(marker, other))
            r = run([os.path.join(tree, "cli", "moeplan"), "run", "-m", model, "-p", "hi", "-n", "2",
                     "--executor", "gpu"])
            check(r.returncode == 1 and "belongs to another build" in r.stderr,
                  f"a module of another build was not refused: rc {r.returncode}, stderr {r.stderr!r}")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("ok: moeplan needs no CUDA library; the GPU module is found, checked and refused as it should be")
    return 0


if __name__ == "__main__":
    sys.exit(main())
