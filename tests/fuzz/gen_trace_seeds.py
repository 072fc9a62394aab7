#!/usr/bin/env python3
"""tests/fuzz/gen_trace_seeds.py — seeds for fuzz_trace (standard library only).

fuzz_trace reads its input as a recipe for a trace's rows (see tests/fuzz/fuzz_trace.c): byte 0
is the flags (nodes - 1 in bits 0-1, run status in bits 2-3, the truncation marker, no footer,
a run row that disagrees), then per node a byte of id width and index step, experts, top-k; then
requests, steps, ids, weights, cuts. Zeros read as a small valid trace, so each seed is zeros with
a few bytes set to reach one branch."""
import os

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds", "trace")
os.makedirs(out, exist_ok=True)


def write(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes(data))


def seed(*set_bytes, n=512):
    b = bytearray(n)
    for at, v in set_bytes:
        b[at] = v
    return b


write("zeros.bin", bytearray(256))  # one node of 1 expert, top-1, one request, one step: valid
write("valid_wider.bin", seed((0, 1), (2, 40), (3, 3), (5, 40), (6, 3), (7, 0x03), n=900))
write("bad_weight.bin", seed((9, 252)))
write("bad_id.bin", seed((2, 9), (8, 251)))
write("four_nodes.bin", seed((0, 3), (1, 0x10), (5, 0x20), (9, 0x08), n=800))
write("running_no_footer.bin", seed((0, 0x28)))
write("truncated_marker.bin", seed((0, 0x10)))
write("run_disagrees.bin", seed((0, 0xC0)))
write("node_index_beyond.bin", seed((0, 1), (1, 0xC0)))
write("wide_ids.bin", seed((1, 0x30), (2, 0xFF), (3, 0x01), n=700))
write("steps_gap.bin", seed((5, 0x02), (6, 0x80)))
write("cut_blobs.bin", seed((5, 0x01), (30, 0xE0)))
# timing rows (bit 3 of the zeros seed's step byte, at 6): tb at 10, the served code at 11
write("served_valid.bin", seed((6, 0x08)))
write("served_tier.bin", seed((6, 0x08), (11, 1)))
write("served_counts_disagree.bin", seed((6, 0x08), (10, 0x08)))
write("served_bad_code.bin", seed((6, 0x08), (11, 253)))
write("served_cut.bin", seed((6, 0x08), (10, 0x01)))
write("served_null.bin", seed((6, 0x08), (10, 0x40)))
write("served_other_node.bin", seed((6, 0x08), (10, 0x04)))
