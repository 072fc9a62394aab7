#!/usr/bin/env python3
"""tests/fuzz/gen_costs_seeds.py — writes tests/fuzz/seeds/costs/cpu_only.json: the cost fixture
(tests/fixtures/costs/fixture.json) without its GPU parts, each listed in $.missing, as a file
from `moeplan calibrate` on a machine without a GPU looks. Standard library only."""
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "..", "fixtures", "costs", "fixture.json")) as f:
    costs = json.load(f)
missing = []
for key in ["gpu_expert", "h2d", "d2h", "sync"]:
    del costs[key]
    missing.append({"what": key, "why": "no CUDA device"})
costs["missing"] = missing
costs["notes"] = "fuzz seed: the fixture without its GPU parts (a CPU-only cost file)"
with open(os.path.join(here, "seeds", "costs", "cpu_only.json"), "w") as f:
    f.write(json.dumps(costs, indent=1) + "\n")
