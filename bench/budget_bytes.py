#!/usr/bin/env python3
"""bench/budget_bytes.py BUDGET FIXED [EXPERT_BYTES] -- a bench script's budget as moeplan's --gpu-budget takes it.

BUDGET is passed through as it is (16GiB, 12GB, a byte count), or is relative to the runtime's GPU
memory besides experts, FIXED bytes (weights + KV cache + scratch, bench's gpu_fixed_bytes):
  +SIZE  SIZE for experts beyond FIXED (SIZE: a number with B, KiB, MiB, GiB, KB, MB or GB, or bytes)
  fX     room for the share X of the model's expert bytes (EXPERT_BYTES, inspect's expert_bytes)
Prints the budget in bytes (or BUDGET unchanged); a malformed one prints a line on stderr and exits 1.
"""
import re
import sys

UNITS = {None: 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def main(argv):
    if len(argv) not in (3, 4):
        sys.exit("usage: budget_bytes.py BUDGET FIXED [EXPERT_BYTES]")
    budget, fixed = argv[1], int(argv[2])
    if budget.startswith("f"):
        if len(argv) != 4 or not re.fullmatch(r"[0-9]*\.?[0-9]+", budget[1:]):
            sys.exit("budget '%s': expected fX with X a share and the model's expert bytes given" % budget)
        print(int(float(budget[1:]) * int(argv[3])) + fixed)
    elif budget.startswith("+"):
        m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(B|KiB|MiB|GiB|KB|MB|GB)?", budget[1:])
        if not m:
            sys.exit("budget '%s': expected +SIZE with SIZE like 3MiB, 512KiB or 1000000" % budget)
        print(int(float(m.group(1)) * UNITS[m.group(2)]) + fixed)
    else:
        print(budget)


if __name__ == "__main__":
    main(sys.argv)
