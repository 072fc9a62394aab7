#!/usr/bin/env python3
"""collector/embed_sql.py IN.sql OUT.c SYMBOL — embed a SQL file into C as one string constant.

Used at build time so that the binary creates traces from exactly schemas/trace.sql (the file is
the contract; the C never carries a second copy of the DDL). Needs only the standard library.
"""
import sys


def main():
    src, out, symbol = sys.argv[1], sys.argv[2], sys.argv[3]
    text = open(src, encoding="utf-8").read()
    lines = [f"/* Generated from {src.split('/')[-1]} by collector/embed_sql.py: do not edit. */",
             f"const char {symbol}[] ="]
    for line in text.splitlines(keepends=True):
        esc = line.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        lines.append(f'    "{esc}"')
    lines.append("    ;")
    open(out, "w", encoding="utf-8").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
