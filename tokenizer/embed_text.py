#!/usr/bin/env python3
"""tokenizer/embed_text.py INPUT OUTPUT SYMBOL — turn a UTF-8 text file into a C source that defines
`const char SYMBOL[]` (NUL-terminated) and `const size_t SYMBOL_len` (bytes, without the NUL).
Used at build time to embed the default vocabulary corpus; the text stays readable in git."""
import sys


def main():
    src, dst, sym = sys.argv[1:4]
    data = open(src, "rb").read()
    data.decode("utf-8")  # fail the build on a corpus that is not UTF-8
    out = [f"/* generated from {src.split('/')[-1]} by embed_text.py; do not edit */",
           "#include <stddef.h>",
           f"const char {sym}[] = {{"]
    for i in range(0, len(data), 16):
        out.append("    " + ", ".join(f"0x{b:02x}" for b in data[i:i + 16]) + ",")
    out.append("    0x00};")
    out.append(f"const size_t {sym}_len = {len(data)};")
    with open(dst, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
