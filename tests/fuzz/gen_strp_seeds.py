#!/usr/bin/env python3
"""tests/fuzz/gen_strp_seeds.py — writes the STRP seed corpus (tests/fuzz/seeds/strp/): one valid
profile of every table kind, every convention of slots and n_ranked (fewer slots than pairs, as
moeplan's older files; as many, as Strata's and moeplan's files; more), tables that rank experts
after the pairs (u64 counts and f32 frequencies with a layer of zeros and ties), and a few invalid
ones (repeated pair, bad table size, truncation, slots past n_layers x n_experts).
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


def routed_counts(n_layers, n_experts, dense):
    """Counts with ties and zeros; the layers in dense have none (no MoE block)."""
    return [0 if l in dense else random.choice([0, 1, 1, 5, 9]) for l in range(n_layers)
            for _ in range(n_experts)]


def rank_table(n_layers, n_experts, pairs):
    table = [-1] * (n_layers * n_experts)
    for rank, (layer, expert) in enumerate(pairs):
        table[layer * n_experts + expert] = rank
    return table


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
        # slots = n_ranked = the resident set; the counts rank the rest (layer 2 has no routing)
        'resident-u64.strp': profile(4, 8, 5, cells[:5], routed_counts(4, 8, dense=(2,)), 'Q'),
        'no-room-u64.strp': profile(4, 8, 0, [], routed_counts(4, 8, dense=(0, 3)), 'Q'),
        'resident-f32.strp': profile(4, 8, 2, cells[:2], [c / 4.0 for c in routed_counts(4, 8, dense=(1,))], 'f'),
        # Strata's writer: everything ranked, slots = n_ranked, each pair's rank as an int32 table
        'strata-rank.strp': profile(4, 8, 32, cells, rank_table(4, 8, cells), 'i'),
        # more slots than pairs, which Strata's readers load
        'spare-slots.strp': profile(4, 8, 8, cells[:3], rank_table(4, 8, cells[:3]), 'i'),
        'slots-past-cells.strp': profile(4, 8, 33, cells[:3]),
    }
    os.makedirs(OUT, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
