#!/usr/bin/env python3
"""bench/whole_route_costs.py IN OUT — a cost file whose decode grid counts far work in whole routes.

A grid calibrated with far_split S > 1 (runtime/decide.h: far work in units of 1/S of an expert)
holds, among its points, every whole-route point (far a multiple of S). This keeps those, as far /
S with far_split 1, and the rest of the file as it is: the decision model then chooses among whole
routes only, from the same measurements. For side-by-side runs of split against whole far routes
(bench/split_ab.sh). A file already in whole routes is copied as it is.
"""
import json
import os
import sys


def main():
    if len(sys.argv) != 3:
        print("usage: bench/whole_route_costs.py IN OUT", file=sys.stderr)
        return 2
    src, dst = sys.argv[1], sys.argv[2]
    try:
        with open(src) as f:
            costs = json.load(f)
    except (OSError, ValueError) as e:
        print(f"whole_route_costs: {src}: {e}", file=sys.stderr)
        return 1
    grid = costs.get("decode_layers")
    if not isinstance(grid, dict) or not isinstance(grid.get("points"), list):
        print(f"whole_route_costs: {src}: $.decode_layers.points: expected the decode grid", file=sys.stderr)
        return 1
    split = grid.get("far_split", 1)
    if not isinstance(split, int) or split < 1:
        print(f"whole_route_costs: {src}: $.decode_layers.far_split: expected an integer >= 1", file=sys.stderr)
        return 1
    if split > 1:
        points = []
        for i, p in enumerate(grid["points"]):
            far = p.get("far") if isinstance(p, dict) else None
            if not isinstance(far, int) or far < 0:
                print(f"whole_route_costs: {src}: $.decode_layers.points[{i}].far: expected an integer >= 0",
                      file=sys.stderr)
                return 1
            if far % split == 0:
                points.append(dict(p, far=far // split))
        grid["points"] = points
        grid["far_max"] = int(grid.get("far_max", 0)) // split
        grid["far_split"] = 1
    tmp = dst + ".tmp"
    with open(tmp, "w") as f:
        json.dump(costs, f, indent=1)
        f.write("\n")
    os.replace(tmp, dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
