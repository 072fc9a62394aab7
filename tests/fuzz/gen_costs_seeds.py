#!/usr/bin/env python3
"""tests/fuzz/gen_costs_seeds.py — writes tests/fuzz/seeds/costs/cpu_only.json: the cost fixture
(tests/fixtures/costs/fixture.json) without its GPU parts, each listed in $.missing, as a file
from `moeplan calibrate` on a machine without a GPU looks; and optional_fields.json: the fixture
with the optional runtime measurements (the older linear context term); context_curve.json: the
fixture with the measured context curve and the grid's optional pool, steps and hybrid_step;
split_grid.json: far work in quarter experts; host_level.json: host_read with the grid's level;
device_knobs.json: the knobs calibrate ran under, a retired and an unknown one among them, beside
the two readers' probe.
Standard library only."""
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "..", "fixtures", "costs", "fixture.json")) as f:
    costs = json.load(f)
missing = []
for key in ["gpu_expert", "h2d", "d2h", "sync", "decode_layers"]:
    del costs[key]
    missing.append({"what": key, "why": "no CUDA device"})
costs["missing"] = missing
costs["notes"] = "fuzz seed: the fixture without its GPU parts (a CPU-only cost file)"
with open(os.path.join(here, "seeds", "costs", "cpu_only.json"), "w") as f:
    f.write(json.dumps(costs, indent=1) + "\n")

# optional_fields.json: the fixture with the optional non_moe_context and the members older
# calibrations wrote (hybrid_layer, cpu_decode_layer, far_decode_layer: accepted and ignored), so
# the fuzzer starts from those parsers too
with open(os.path.join(here, "..", "fixtures", "costs", "fixture.json")) as f:
    costs = json.load(f)
costs["hybrid_layer"] = {"median_ns": 27000, "spread_ns": 300}
costs["cpu_decode_layer"] = {"experts": 8, "threads": 16, "median_ns": 316000, "spread_ns": 4000}
costs["far_decode_layer"] = {"experts": 8, "far": 2, "threads": 16, "median_ns": 245700, "spread_ns": 2500}
costs["non_moe_context"] = {"keys": 4.5, "per_key_ns": 41.25}
costs["notes"] = ("fuzz seed: the fixture with the optional non_moe_context and the members of older "
                  "calibrations")
with open(os.path.join(here, "seeds", "costs", "optional_fields.json"), "w") as f:
    f.write(json.dumps(costs, indent=1) + "\n")

# context_curve.json: the measured context curve and the grid's optional members
with open(os.path.join(here, "..", "fixtures", "costs", "fixture.json")) as f:
    costs = json.load(f)
costs["non_moe_context"] = {"points": [{"keys": 33.5, "median_ns": 500000, "spread_ns": 900},
                                       {"keys": 160.5, "median_ns": 563500, "spread_ns": 1100},
                                       {"keys": 2080.5, "median_ns": 803500, "spread_ns": 2000}]}
costs["decode_layers"]["pool"] = 2
costs["decode_layers"]["steps"] = 64
costs["decode_layers"]["hybrid_step"] = {"median_ns": 37000, "spread_ns": 900, "layers": 25}
costs["notes"] = "fuzz seed: the fixture with the measured context curve and the grid's optional members"
with open(os.path.join(here, "seeds", "costs", "context_curve.json"), "w") as f:
    f.write(json.dumps(costs, indent=1) + "\n")

# split_grid.json: a grid that counts far work in quarter experts (far_split), with a point of
# three quarters of one cold route far
with open(os.path.join(here, "..", "fixtures", "costs", "fixture.json")) as f:
    costs = json.load(f)
grid = costs["decode_layers"]
grid["far_split"] = 4
grid["far_max"] = 8
grid["points"][5]["far"] = 3
costs["notes"] = "fuzz seed: the fixture's decode grid in quarter experts (far_split 4)"
with open(os.path.join(here, "seeds", "costs", "split_grid.json"), "w") as f:
    f.write(json.dumps(costs, indent=1) + "\n")

# host_level.json: host_read with the level the decode grid's probes read (level_gbs, level_probes)
with open(os.path.join(here, "..", "fixtures", "costs", "fixture.json")) as f:
    costs = json.load(f)
costs["host_read"]["level_gbs"] = 42.5
costs["host_read"]["level_probes"] = 5
costs["notes"] = "fuzz seed: the fixture with the host level of the grid's probes"
with open(os.path.join(here, "seeds", "costs", "host_level.json"), "w") as f:
    f.write(json.dumps(costs, indent=1) + "\n")

# device_knobs.json: $.device.knobs as calibrate writes them (a retired name and an unknown one
# too, which the loader skips) and $.host_bus, which settles the grid's far points
with open(os.path.join(here, "..", "fixtures", "costs", "fixture.json")) as f:
    costs = json.load(f)
costs["device"]["knobs"] = {"MP_ISA": "amx", "MP_POOL_PIN": 0, "MP_MOE_PIPE_UNITS": 8, "MP_GPU_GRAPHS": 1,
                            "MP_GPU_HOST_EXPERTS": "pinned", "MP_CUDA_PDL": 1, "MP_HANG_DUMP_S": 0,
                            "MP_MOE_PART_STREAM": 1, "MP_NOT_A_KNOB": "x"}
costs["device"]["knobs_set"] = {"MP_ISA": "env"}
costs["host_bus"] = {"gbs": 60.0, "cpu_gbs": 35.5, "bus_gbs": 24.5, "threads": 16, "probes": 8}
costs["notes"] = "fuzz seed: the fixture with the knobs calibrate ran under and the two readers' probe"
with open(os.path.join(here, "seeds", "costs", "device_knobs.json"), "w") as f:
    f.write(json.dumps(costs, indent=1) + "\n")
