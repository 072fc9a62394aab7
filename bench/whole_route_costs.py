#!/usr/bin/env python3
"""bench/whole_route_costs.py [--off | --units N] IN OUT — a cost file whose decode grid counts far work in
whole routes (or in coarser units than it was calibrated in).

A grid calibrated with far_split S > 1 (runtime/decide.h: far work in units of 1/S of an expert)
holds, among its points, every whole-route point (far a multiple of S). This keeps those, as far /
S with far_split 1, and the rest of the file as it is: the decision model then chooses among whole
routes only, from the same measurements. For side-by-side runs of split against whole far routes
(bench/split_ab.sh). A file already in whole routes is copied as it is.

With --units N (N dividing the grid's far_split S), the points whose far is a multiple of S / N are
kept, in units of 1/N: e.g. a grid calibrated in eighths (`calibrate --far-units 8`) against its
quarters, from the same measurements. --units 1 is the default.

With --off, only the grid's far-off points are kept (far_max 0): the decision model then runs no far
route, from the same measurements otherwise: the arm that says what far routes gain on this machine.
"""
import json
import os
import sys


def main():
    args = sys.argv[1:]
    usage = "usage: bench/whole_route_costs.py [--off | --units N] IN OUT"
    off = bool(args) and args[0] == "--off"
    units = 1
    if off:
        args = args[1:]
    elif len(args) >= 2 and args[0] == "--units":
        if not (args[1].isascii() and args[1].isdecimal()) or int(args[1]) < 1:
            print(f"whole_route_costs: --units '{args[1]}': expected an integer >= 1", file=sys.stderr)
            return 2
        units, args = int(args[1]), args[2:]
    if len(args) != 2:
        print(usage, file=sys.stderr)
        return 2
    src, dst = args
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
    if split % units:
        print(f"whole_route_costs: {src}: $.decode_layers.far_split: {split} units an expert, not a multiple of "
              f"--units {units}", file=sys.stderr)
        return 1
    step = split // units
    if step > 1:
        points = []
        for i, p in enumerate(grid["points"]):
            far = p.get("far") if isinstance(p, dict) else None
            if not isinstance(far, int) or far < 0:
                print(f"whole_route_costs: {src}: $.decode_layers.points[{i}].far: expected an integer >= 0",
                      file=sys.stderr)
                return 1
            if far % step == 0:
                points.append(dict(p, far=far // step))
        grid["points"] = points
        grid["far_max"] = int(grid.get("far_max", 0)) // step
        grid["far_split"] = units
    if off:
        for i, p in enumerate(grid["points"]):
            if not isinstance(p, dict) or not isinstance(p.get("far_on"), bool):
                print(f"whole_route_costs: {src}: $.decode_layers.points[{i}].far_on: expected true or false",
                      file=sys.stderr)
                return 1
        grid["points"] = [p for p in grid["points"] if not p["far_on"]]
        grid["far_max"] = 0
        grid["far_split"] = 1
    tmp = dst + ".tmp"
    with open(tmp, "w") as f:
        json.dump(costs, f, indent=1)
        f.write("\n")
    os.replace(tmp, dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
