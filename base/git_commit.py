#!/usr/bin/env python3
"""base/git_commit.py SOURCE_ROOT: print `git describe --tags --always --dirty` of the git
checkout at SOURCE_ROOT, or "unknown" where SOURCE_ROOT has no .git of its own (a release tarball,
even one unpacked inside another repository), git is missing, or git fails. MP_BUILD_COMMIT in the
environment (letters, digits, '.', '_', '-', '+'; at most 64) replaces it: for a copy of the tree
whose .git is not the tree's (the GPU machine's copy stamped an older commit). Meson's vcs_tag runs
it at every build (base/meson.build); nothing it prints goes to stderr."""
import os
import re
import subprocess
import sys


def describe(root):
    git_dir = os.path.join(root, ".git")  # a directory, or a file naming one (a worktree)
    if not os.path.exists(git_dir):
        return "unknown"
    try:
        out = subprocess.run(["git", "--git-dir", git_dir, "--work-tree", root,
                              "describe", "--tags", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else "unknown"


def stamp(root):
    given = os.environ.get("MP_BUILD_COMMIT", "")
    if re.fullmatch(r"[A-Za-z0-9._+-]{1,64}", given):
        return given
    return describe(root)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: git_commit.py SOURCE_ROOT")
    print(stamp(sys.argv[1]))
