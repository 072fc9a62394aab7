#!/usr/bin/env python3
"""tests/fuzz/gen_strp_seeds.py — writes the STRP seed corpus (tests/fuzz/seeds/strp/): one valid
profile of every table kind, and a few invalid ones (repeated pair, bad table size, truncation).
Run from the repository root; deterministic (fixed random seed)."""
import os
import random
import struct

OUT = 'tests/fuzz/seeds/strp'


def profile(n_layers, n_experts, slots, pairs, table=None, fmt=None):
    b = b'STRP' + struct.pack('<5I', 1, n_layers, n_experts, slots, len(pairs))
    for layer, expert in pairs:
        b += struct.pack('<HH', layer, expert)
    if table is not None:
        b += struct.pack('<%d%s' % (len(table), fmt), *table)
    return b


def main():
    random.seed(1)
    cells = [(l, e) for l in range(4) for e in range(8)]
    random.shuffle(cells)
    seeds = {
        'none.strp': profile(4, 8, 5, cells[:10]),
        'u64.strp': profile(4, 8, 5, cells[:10], [random.randrange(1 << 40) for _ in range(32)], 'Q'),
        'i32.strp': profile(4, 8, 3, cells[:6], [-1] * 32, 'i'),
        'f32.strp': profile(4, 8, 3, cells[:6], [random.random() for _ in range(32)], 'f'),
        'zero4.strp': profile(4, 8, 3, cells[:6], [0] * 32, 'i'),
        'qwen-geom.strp': profile(48, 128, 4, [(0, 1), (47, 127), (3, 3), (10, 0)]),
        'empty-ranked.strp': profile(2, 2, 0, []),
        'repeat.strp': profile(4, 8, 2, [(1, 1), (2, 2), (1, 1)]),
        'badtable.strp': profile(4, 8, 2, [(1, 1), (2, 2)]) + b'\0' * 7,
        'trunc.strp': profile(4, 8, 5, cells[:10])[:30],
        # a count table whose total passes 2^64 - 1 (refused: sums of counts must not wrap)
        'regress_count_sum_wraps.strp': profile(2, 2, 1, [(0, 1)], [(1 << 64) - 1, 1, 0, 0], 'Q'),
        'u64-max-total.strp': profile(2, 2, 1, [(0, 1)], [(1 << 64) - 2, 1, 0, 0], 'Q'),
        'f32-wide.strp': profile(16, 64, 8, cells[:8], [1.0] * 1024, 'f'),
    }
    os.makedirs(OUT, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
