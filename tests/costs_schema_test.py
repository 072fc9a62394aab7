#!/usr/bin/env python3
"""schemas/costs.schema.json against the cost files moeplan writes and reads.

The loader (runtime/costs.c) is the authority on a cost file; the schema is its published
description, and drifts unless checked. Every file here is one the loader accepts: the shipped
examples, the test fixtures, the fuzz seeds that are whole files, and one written now by
`moeplan calibrate --quick` on a generated tiny model (CPU parts only on a machine without a GPU,
every part with one). Each must validate against the schema (Draft 2020-12, python3-jsonschema);
and the schema must refuse a member the loader refuses (an unknown key, a host_bus without its
probes). SKIP (77) only where python3-jsonschema is missing: scripts/setup.sh installs it."""
import glob
import json
import os
import subprocess
import sys
import tempfile

try:
    import jsonschema
except ImportError:
    # python3-jsonschema is Debian's: where `python3` on PATH is another interpreter, run under
    # the system's once
    system = "/usr/bin/python3"
    if os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system) and \
            not os.environ.get("MP_COSTS_SCHEMA_SYSTEM"):
        os.execve(system, [system] + sys.argv, dict(os.environ, MP_COSTS_SCHEMA_SYSTEM="1"))
    print("SKIP: python3-jsonschema is not installed (scripts/setup.sh installs it)")
    sys.exit(77)

root = os.environ["MP_SOURCE_ROOT"]
moeplan = os.environ["MP_MOEPLAN"]
schema = json.load(open(os.path.join(root, "schemas", "costs.schema.json")))
# $id is a relative name; the $refs are all "#/$defs/...": without it every validator version
# resolves them in this document (older ones would look the name up as a URL)
schema.pop("$id", None)
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)

files = sorted(glob.glob(os.path.join(root, "examples", "costs-*.json")) +
               glob.glob(os.path.join(root, "tests", "fixtures", "costs", "*.json")) +
               [f for f in glob.glob(os.path.join(root, "tests", "fuzz", "seeds", "costs", "*.json"))
                if os.path.basename(f) != "partial.json"])  # partial.json: a cut file, refused by both
failed = []
with tempfile.TemporaryDirectory() as tmp:
    model, costs = os.path.join(tmp, "tiny.gguf"), os.path.join(tmp, "costs.json")
    for cmd in ([moeplan, "mkmodel", "--preset", "tiny", "--quiet", "-o", model],
                [moeplan, "calibrate", "-m", model, "--out", costs, "--quick", "--rows", "1,4"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"FAIL: {' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    written = json.load(open(costs))
    docs = [(f, json.load(open(f))) for f in files] + [("calibrate --quick (written now)", written)]
    for name, doc in docs:
        errs = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        for e in errs[:3]:
            failed.append(f"{name}: $.{'.'.join(str(p) for p in e.absolute_path)}: {e.message}")
    if len(docs) < 5:
        failed.append(f"only {len(docs)} cost files found under {root}")

    # the schema refuses what the loader refuses
    bad = json.loads(json.dumps(written))
    bad["unknown_member"] = 1
    if validator.is_valid(bad):
        failed.append("an unknown top-level member validates")
    bad = json.loads(json.dumps(written))
    bad["host_bus"] = {"gbs": 3, "cpu_gbs": 2, "bus_gbs": 1, "threads": 4}
    if validator.is_valid(bad):
        failed.append("a host_bus without probes validates")
    bad["host_bus"]["probes"] = 2
    if not validator.is_valid(bad):
        failed.append("a whole host_bus does not validate: " + next(validator.iter_errors(bad)).message)

for f in failed:
    print("FAIL:", f)
print(f"{len(docs)} cost files checked against schemas/costs.schema.json")
sys.exit(1 if failed else 0)
