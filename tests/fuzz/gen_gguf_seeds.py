#!/usr/bin/env python3
"""tests/fuzz/gen_gguf_seeds.py — writes the GGUF fuzz seed corpus (tests/fuzz/seeds/gguf/).

Small hand-built images (standard library only, little-endian, per the GGUF spec) that reach
every branch of the reader's happy path plus a few near-miss edge cases, and a copy of the
GGUFWriter fixture. Regenerate: python3 tests/fuzz/gen_gguf_seeds.py
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "seeds", "gguf")
FIXTURE = os.path.join(HERE, "..", "fixtures", "gguf_pywriter.gguf")


def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def arr(elem_type, n, payload):
    return struct.pack("<IQ", elem_type, n) + payload


def tensor_info(name, ne, ttype, offset):
    return s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + \
        struct.pack("<IQ", ttype, offset)


def image(kvs, infos, data, version=3, alignment=32):
    head = b"GGUF" + struct.pack("<IQQ", version, len(infos), len(kvs)) + b"".join(kvs) + b"".join(infos)
    pad = (-len(head)) % alignment
    return head + b"\0" * pad + data


def write(name, blob):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(blob)


def main():
    os.makedirs(OUT, exist_ok=True)
    every = [
        kv("u8", 0, b"\x07"), kv("i8", 1, b"\xf9"), kv("u16", 2, struct.pack("<H", 65535)),
        kv("i16", 3, struct.pack("<h", -2)), kv("u32", 4, struct.pack("<I", 1 << 31)),
        kv("i32", 5, struct.pack("<i", -5)), kv("f32", 6, struct.pack("<f", 1.5)),
        kv("bool", 7, b"\x01"), kv("str", 8, s("hi\n\"x\"")),
        kv("u64", 10, struct.pack("<Q", 1 << 63)), kv("i64", 11, struct.pack("<q", -1)),
        kv("f64", 12, struct.pack("<d", -0.1)),
        kv("arr.str", 9, arr(8, 3, s("a") + s("") + s("ccc"))),
        kv("arr.i32", 9, arr(5, 2, struct.pack("<ii", -1, 7))),
        kv("arr.f64", 9, arr(12, 1, struct.pack("<d", 2.0))),
        kv("arr.bool", 9, arr(7, 2, b"\x00\x01")),
        kv("arr.empty", 9, arr(8, 0, b"")),
    ]
    f32 = struct.pack("<4f", 1, 2, 3, 4)
    write("empty.gguf", image([], [], b""))
    write("v2.gguf", image([kv("general.architecture", 8, s("olmoe"))], [], b"", version=2))
    write("every_type.gguf", image(every, [tensor_info("t", [4], 0, 0)], f32))
    q8 = bytes(34 * 2)
    infos = [tensor_info("a", [2, 2], 0, 0), tensor_info("b", [32, 2], 8, 32),
             tensor_info("c", [4], 1, 128)]
    data = f32 + bytes(16) + q8 + bytes(128 - 32 - 68) + bytes(8)
    write("three_tensors.gguf", image([kv("general.alignment", 4, struct.pack("<I", 32))], infos, data))
    infos = [tensor_info("x", [1, 1, 1, 1], 30, 0), tensor_info("y", [8], 1, 16)]
    write("align16.gguf", image([kv("general.alignment", 4, struct.pack("<I", 16))], infos,
                                bytes(16) + bytes(16), alignment=16))
    moe = [tensor_info(f"blk.0.ffn_{p}_exps.weight", [32, 1, 2], 8, i * 96) for i, p in
           enumerate(["gate", "up", "down"])]
    write("moe.gguf", image([kv("general.architecture", 8, s("qwen3moe"))], moe, bytes(96 * 3)))
    # Near misses: a row-byte product of exactly 2^64 (must be rejected, not wrap to 0 bytes) and
    # two tensors that touch without overlapping.
    write("bytes_overflow.gguf", image([], [tensor_info("t", [1 << 62], 0, 0)], bytes(32)))
    write("adjacent.gguf", image([], [tensor_info("a", [8], 0, 32), tensor_info("b", [8], 0, 0)],
                                 bytes(64)))
    write("truncated.gguf", image(every, [tensor_info("t", [4], 0, 0)], f32)[:-3])
    if os.path.exists(FIXTURE):
        shutil.copy(FIXTURE, os.path.join(OUT, "pywriter.gguf"))


if __name__ == "__main__":
    main()
