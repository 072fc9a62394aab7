#!/usr/bin/env python3
"""tests/check_install.py MESON BUILD_DIR PREFIX BINDIR MANDIR DATADIR LIBDIR [GPU_MODULE]: `meson install --destdir`
into a temporary directory puts every file of the package where meson.build says: the binary,
moeplan(1), the bash and zsh completions (byte-identical to the build's), and under
share/doc/moeplan README.md, LICENSE and every file of docs/, schemas/ and examples/; the installed
binary finds its libraries, runs and prints the same --version as the built one; man finds the
installed page; with a GPU module in the build (GPU_MODULE, its file name), the module is installed
under LIBDIR/moeplan, its libraries are found, and the installed binary loads it (on a machine
without a device it then says "no CUDA device", not that the module is missing).

MP_SOURCE_ROOT and MP_MOEPLAN (the built binary) come from tests/meson.build.
"""
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


def files_under(top):
    out = set()
    for d, _, names in os.walk(top):
        out |= {os.path.relpath(os.path.join(d, n), top) for n in names}
    return out


def main():
    meson, build, prefix, bindir, mandir, datadir, libdir = sys.argv[1:8]
    module = sys.argv[8] if len(sys.argv) > 8 else ""
    source = os.environ["MP_SOURCE_ROOT"]
    built = os.environ["MP_MOEPLAN"]
    with tempfile.TemporaryDirectory(prefix="mp_install_") as destdir:
        p = run([meson, "install", "-C", build, "--destdir", destdir, "--no-rebuild", "--quiet"])
        installed_ok = p.returncode == 0
        if not check(installed_ok, f"meson install: exit {p.returncode}: {p.stdout}{p.stderr}"):
            return report()
        root = destdir + prefix

        def at(*parts):  # bindir etc. may be relative to the prefix or absolute under it
            return os.path.join(root, *[os.path.relpath(x, prefix) if os.path.isabs(x) else x
                                        for x in parts])

        exe = at(bindir, "moeplan")
        check(os.access(exe, os.X_OK), f"{exe}: not an executable")
        if shutil.which("ldd"):  # every library found without the build directory's run paths
            libs = run(["ldd", exe]).stdout
            check("not found" not in libs, f"ldd {exe}: {libs}")
        installed, expected = run([exe, "--version"]), run([built, "--version"])
        check(installed.returncode == 0 and installed.stdout == expected.stdout,
              f"installed moeplan --version: exit {installed.returncode}, {installed.stdout!r} "
              f"{installed.stderr!r}; the built one prints {expected.stdout!r}")
        check(installed.stdout.startswith("moeplan "), f"--version printed {installed.stdout!r}")
        if module:
            lib = at(libdir, "moeplan", module)
            if check(os.path.isfile(lib), f"{lib}: the GPU module is not installed"):
                if shutil.which("ldd"):
                    libs = run(["ldd", lib]).stdout
                    check("not found" not in libs, f"ldd {lib}: {libs}")
                model = os.path.join(source, "tests", "fixtures", "hf", "qwen3moe-tiny-f32.gguf")
                r = run([exe, "run", "-m", model, "-p", "hi", "-n", "1", "--executor", "gpu"])
                check("not installed beside moeplan" not in r.stderr and "did not load" not in r.stderr
                      and "another build" not in r.stderr,
                      f"the installed moeplan does not load its GPU module: {r.stderr.strip()}")

        generated = os.path.join(build, "cli", "helpdoc")
        for name, path in (("moeplan.1", at(mandir, "man1", "moeplan.1")),
                           ("moeplan", at(datadir, "bash-completion", "completions", "moeplan")),
                           ("_moeplan", at(datadir, "zsh", "site-functions", "_moeplan"))):
            if check(os.path.isfile(path), f"{path}: not installed"):
                check(filecmp.cmp(path, os.path.join(generated, name), shallow=False),
                      f"{path} differs from the build's {name}")

        doc = at(datadir, "doc", "moeplan")
        for f in ("README.md", "LICENSE"):
            if check(os.path.isfile(os.path.join(doc, f)), f"{doc}/{f}: not installed"):
                check(filecmp.cmp(os.path.join(doc, f), os.path.join(source, f), shallow=False),
                      f"{doc}/{f} differs from the source's")
        for sub in ("docs", "schemas", "examples"):
            want = files_under(os.path.join(source, sub))
            got = files_under(os.path.join(doc, sub))
            check(want and not want - got, f"{doc}/{sub}: missing {sorted(want - got)}")

        if shutil.which("man"):
            env = dict(os.environ, MANPATH=at(mandir))
            w = run(["man", "-w", "moeplan"], env=env)
            check(w.returncode == 0 and w.stdout.strip() == at(mandir, "man1", "moeplan.1"),
                  f"man -w moeplan with MANPATH={at(mandir)}: exit {w.returncode}, {w.stdout!r}")
    return report()


def report():
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) not in (8, 9):
        sys.exit("usage: check_install.py MESON BUILD_DIR PREFIX BINDIR MANDIR DATADIR LIBDIR [GPU_MODULE]")
    sys.exit(main())
