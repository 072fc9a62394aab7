#!/usr/bin/env python3
"""tests/check_narration.py: the tree states facts about the project, not the story of its making.

Fails (exit 1), printing FILE:LINE: TEXT for each hit, where a tracked file's text numbers the
work sessions or the runs on the GPU machine that produced it, or names the people behind them,
or where a tracked path is named by a session or a run (bench/results/*-s13/, *call4*). A
measurement is a dated record instead: machine, date, commit where known, command, numbers
(docs/benchmarks.md).

Scans `git ls-files` of the source root (MP_SOURCE_ROOT, else this file's parent's parent).
Skipped: files with a NUL byte in their first 8 KiB (binary), GGUF/SQLite/STRP data, and
tests/fixtures/ (generated data). Outside a git checkout (a release tarball) it reports SKIP
(exit 77). Run by `meson test` (suite lint) and so by scripts/test.sh and .ci/run.

The patterns spell their spaces as [ ] so that this file does not match itself.
"""
import os
import re
import subprocess
import sys

# Text: sessions by ordinal or by position, issue numbers, numbered runs on the GPU machine
# ("call" and a number), people.
TEXT = re.compile(
    r"\b(first|second|third|[a-z]*(fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|teenth|tieth)"
    r"|[0-9]+(st|nd|rd|th))[ ]sessions?\b"
    r"|\b(this|next|same|previous|last|earlier|later|that)[ ]sessions?\b"
    r"|\b(two|three|four|five|several|both|earlier|previous|later|last|other|those|these)"
    r"[ ]sessions\b"
    r"|\bsessions?[ ][0-9]+\b"
    r"|\bissue[ ][0-9]+"
    r"|\bdevice[ ]calls?\b"
    r"|\bcalls?[ ][0-9]+\b"
    r"|\bs[0-9]+[ ]calls?\b"
    r"|\bthe[ ]lead\b"
    r"|\blea[d].s\b"
    r"|\bother[ ]helpers\b",
    re.IGNORECASE)

# Paths: a file or folder named by session (-s13-, -s13., -s13/ or a final -s13) or by call.
PATH = re.compile(r"-s[0-9]+([-./]|$)|call[0-9]", re.IGNORECASE)

SKIP_SUFFIXES = (".gguf", ".db", ".strp")
SKIP_PREFIXES = ("tests/fixtures/",)



# What opens a continued comment or quote line ("// ", "# ", " * ", "> "), dropped before a line
# is joined to the one above it.
CONTINUATION = re.compile(r"^\s*(//+|#+|\*+|/\*+|--|>+)?\s*")


def split_hit(line, next_line):
    """A match that a line break cuts in two ("the fifth" / "session"): found in the line joined
    to the start of the next, and reported on the first line only."""
    joined = line.rstrip() + " "
    cut = len(joined)
    joined += CONTINUATION.sub("", next_line, count=1)
    return any(m.start() < cut - 1 and m.end() > cut for m in TEXT.finditer(joined))


def main():
    root = os.environ.get("MP_SOURCE_ROOT") or os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                             capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        print("SKIP: %s is not a git checkout (git ls-files failed)" % root)
        return 77
    hits = 0
    for raw in out.split(b"\0"):
        if not raw:
            continue
        path = raw.decode("utf-8", "replace")
        if PATH.search(path):
            print("%s: named by a session or a call" % path)
            hits += 1
        if path.endswith(SKIP_SUFFIXES) or path.startswith(SKIP_PREFIXES):
            continue
        full = os.path.join(root, path)
        try:
            with open(full, "rb") as f:
                data = f.read()
        except OSError:  # listed but absent (a deleted, uncommitted file)
            continue
        if b"\0" in data[:8192]:
            continue
        lines = data.decode("utf-8", "replace").splitlines()
        for n, line in enumerate(lines, 1):
            if TEXT.search(line) or split_hit(line, lines[n] if n < len(lines) else ""):
                print("%s:%d: %s" % (path, n, line.strip()[:200]))
                hits += 1
    if hits:
        print("%d narrating place(s): state the fact (machine, date, commit, command, numbers) "
              "instead of the session, call or person behind it" % hits)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
