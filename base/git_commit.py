#!/usr/bin/env python3
"""base/git_commit.py [--tree] SOURCE_ROOT: print `git describe --tags --always --dirty` of the git
checkout at SOURCE_ROOT, or "unknown" where SOURCE_ROOT has no .git of its own (a release tarball,
even one unpacked inside another repository), git is missing, or git fails. With --tree, a dirty
tree's stamp ends in "+tree." and the first 12 hex digits of the git tree the working tree would
commit as (tracked and untracked files git does not ignore): a copy of the tree whose .git is older
than its files (the GPU machine's) still names its content, and `git log --all --format='%h %T' |
grep ID` finds the commit it was. MP_BUILD_COMMIT in the environment (letters, digits, '.', '_',
'-', '+'; at most 64) replaces either. Meson's vcs_tag runs it at every build (base/meson.build),
scripts/gpu.sh with --tree; nothing it prints goes to stderr."""
import os
import re
import subprocess
import sys
import tempfile


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


def tree_id(root):
    """The id of the git tree the working tree at root would commit as, or None: staged into a
    scratch index (git's own index untouched), so that .gitignore decides as `git add -A` would"""
    git_dir = os.path.join(root, ".git")
    fd, index = tempfile.mkstemp(prefix="mp-index-")
    os.close(fd)
    os.unlink(index)  # git makes it: an empty file is not an index
    env = dict(os.environ, GIT_INDEX_FILE=index)
    git = ["git", "--git-dir", git_dir, "--work-tree", root]
    try:
        added = subprocess.run(git + ["add", "-A", "."], cwd=root, env=env, capture_output=True, timeout=120)
        out = subprocess.run(git + ["write-tree"], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        if os.path.exists(index):
            os.unlink(index)
    tree = out.stdout.strip()
    return tree if added.returncode == 0 and out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", tree) else None


def stamp(root, with_tree=False):
    given = os.environ.get("MP_BUILD_COMMIT", "")
    if re.fullmatch(r"[A-Za-z0-9._+-]{1,64}", given):
        return given
    commit = describe(root)
    if with_tree and commit.endswith("-dirty"):
        tree = tree_id(root)
        if tree:
            commit += "+tree." + tree[:12]
    return commit


if __name__ == "__main__":
    args = sys.argv[1:]
    with_tree = bool(args) and args[0] == "--tree"
    if with_tree:
        args = args[1:]
    if len(args) != 1:
        sys.exit("usage: git_commit.py [--tree] SOURCE_ROOT")
    print(stamp(args[0], with_tree))
