#!/usr/bin/env python3
"""Only kernels/cpu/dispatch.c calls into the units built with wider -m flags than the host may have.

quant_avx2.c, quant_avx512.c and quant_amx.c are compiled with -mavx2, -mavx512* and -mamx-*: the
compiler may put those instructions anywhere in them, even in a table copy or a loop over an array,
so a call into one of them on a CPU without its level dies of SIGILL. dispatch.c probes cpuid and
enters each only at its level. This check reads the object files of a build directory with `nm`:
every global symbol those libraries define may be referenced by dispatch.c's object, by the wide
units themselves (amx's table starts from avx512's, which the amx level implies) and by the test-only
emulations (built from the same sources, run only where their level's CPU is), and by nothing else.

Usage: check_isa_entry.py BUILD_DIR WIDE_LIB.a [WIDE_LIB.a ...]
Exit 0 when the rule holds, 1 with one line per offending reference, 77 (skip) without nm."""
import os
import shutil
import subprocess
import sys

ALLOWED_SUFFIX = "cpu_dispatch.c.o"


def nm(*args):
    out = subprocess.run(["nm", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"check_isa_entry: nm {' '.join(args[:4])}: {out.stderr.strip()}")
    return out.stdout


def defined_globals(lib):
    names = set()
    for line in nm("-g", "--defined-only", lib).splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDRBV":
            names.add(parts[2])
    return names


def undefined(objs):
    """{object: its undefined symbols}, one nm for all of them (-A names each line's file)"""
    out = {o: set() for o in objs}
    for i in range(0, len(objs), 200):
        for line in nm("-u", "-A", *objs[i:i + 200]).splitlines():
            path, _, rest = line.partition(": ")
            if rest.strip() and path in out:
                out[path].add(rest.split()[-1])
    return out


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    if not shutil.which("nm"):
        print("SKIP: nm (binutils) is not installed")
        return 77
    build, libs = argv[1], argv[2:]
    wide = {}
    for lib in libs:
        for name in defined_globals(lib):
            wide[name] = os.path.basename(lib)
    if "mp_type_ops_avx2" not in wide:
        print(f"check_isa_entry: {', '.join(libs)}: no mp_type_ops_avx2 among their symbols: not the kernels' wide units",
              file=sys.stderr)
        return 1
    wide_dirs = {os.path.basename(lib) + ".p" for lib in libs}
    objects = []
    for root, dirs, files in os.walk(build):
        dirs[:] = [d for d in dirs if not d.startswith("meson-")]
        here = os.path.basename(root)
        if here in wide_dirs or "emulated" in here:
            continue
        objects += [os.path.join(root, f) for f in files if f.endswith(".o") and not f.endswith(ALLOWED_SUFFIX)]
    bad = []
    for path, names in sorted(undefined(objects).items()):
        for name in sorted(names & wide.keys()):
            bad.append(f"{os.path.relpath(path, build)}: calls {name} ({wide[name]}), which may run "
                       f"instructions this CPU lacks: call it through kernels/cpu/dispatch.c")
    for line in bad:
        print(line)
    if bad:
        return 1
    print(f"ok: {len(wide)} symbols of the wide units, {len(objects)} other objects: only dispatch.c calls them")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
