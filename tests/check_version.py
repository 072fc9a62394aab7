#!/usr/bin/env python3
"""tests/check_version.py VERSION BUILD_OPTIONS: `moeplan --version`, `-V` and `version` print the
same three lines: "moeplan VERSION" (meson's project version), "commit C" with C what
base/git_commit.py says of the source tree, and "build BUILD_OPTIONS" (meson.build's string
for this build directory). And git_commit.py itself: "unknown" for a tree without a .git of its
own, even one inside another git checkout; the short hash of HEAD in a fresh repository;
MP_BUILD_COMMIT's value instead where it is a plain name, and git's where it is not.

The moeplan binary is MP_MOEPLAN, the source tree MP_SOURCE_ROOT (tests/meson.build).
"""
import os
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=60, **kw)


def main():
    version, build_options = sys.argv[1], sys.argv[2]
    moeplan = os.environ["MP_MOEPLAN"]
    root = os.environ["MP_SOURCE_ROOT"]
    git_commit = os.path.join(root, "base", "git_commit.py")

    commit = run([sys.executable, git_commit, root]).stdout.strip()
    expected = f"moeplan {version}\ncommit {commit}\nbuild {build_options}\n"
    for flag in ("--version", "-V", "version"):
        p = run([moeplan, flag])
        check(p.returncode == 0, f"moeplan {flag}: exit {p.returncode}")
        check(p.stdout == expected, f"moeplan {flag} printed {p.stdout!r}, expected {expected!r}")
    check(all(w.split("=")[0] in ("buildtype", "cuda", "sm_arch", "cupti", "sanitize", "fuzz")
              for w in build_options.split()), f"build options {build_options!r}")

    bare = {k: v for k, v in os.environ.items() if k != "MP_BUILD_COMMIT"}
    with tempfile.TemporaryDirectory() as tmp:
        plain = os.path.join(tmp, "tarball")
        os.mkdir(plain)
        out = run([sys.executable, git_commit, plain], env=bare).stdout
        check(out == "unknown\n", f"git_commit.py on a tree without .git printed {out!r}")
        out = run([sys.executable, git_commit, plain], env=dict(bare, MP_BUILD_COMMIT="3f7941e-dirty")).stdout
        check(out == "3f7941e-dirty\n", f"git_commit.py with MP_BUILD_COMMIT printed {out!r}")
        for bad in ("", "a b", "x" * 65, "a;rm"):
            out = run([sys.executable, git_commit, plain], env=dict(bare, MP_BUILD_COMMIT=bad)).stdout
            check(out == "unknown\n", f"git_commit.py with MP_BUILD_COMMIT={bad!r} printed {out!r}")

        repo = os.path.join(tmp, "repo")
        os.mkdir(repo)
        env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org",
                   GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org")
        ok = run(["git", "init", "-q", repo]).returncode == 0
        with open(os.path.join(repo, "f"), "w") as f:
            f.write("x\n")
        ok = ok and run(["git", "-C", repo, "add", "f"]).returncode == 0
        ok = ok and run(["git", "-C", repo, "commit", "-qm", "f"], env=env).returncode == 0
        if not ok:
            print("SKIP: git cannot make a repository here")
            return 77
        head = run(["git", "-C", repo, "rev-parse", "--short", "HEAD"]).stdout.strip()
        out = run([sys.executable, git_commit, repo], env=bare).stdout
        check(out == head + "\n", f"git_commit.py in a clean repository printed {out!r}, HEAD {head}")
        with open(os.path.join(repo, "f"), "w") as f:
            f.write("y\n")
        out = run([sys.executable, git_commit, repo], env=bare).stdout
        check(out == head + "-dirty\n", f"git_commit.py with a modified file printed {out!r}")
        # --tree: a dirty stamp names the tree the files would commit as, an untracked file among
        # them; committing them gives that tree; a clean tree's stamp is the commit alone
        with open(os.path.join(repo, "g"), "w") as f:
            f.write("z\n")
        index = os.path.join(repo, ".git", "index")
        with open(index, "rb") as f:
            before = f.read()
        tree_out = run([sys.executable, git_commit, "--tree", repo], env=bare).stdout
        with open(index, "rb") as f:
            check(f.read() == before, "git_commit.py --tree changed the repository's index")
        ok = run(["git", "-C", repo, "add", "-A"]).returncode == 0
        ok = ok and run(["git", "-C", repo, "commit", "-qm", "g"], env=env).returncode == 0
        tree = run(["git", "-C", repo, "rev-parse", "HEAD^{tree}"]).stdout.strip()
        check(ok and tree_out == head + "-dirty+tree." + tree[:12] + "\n",
              f"git_commit.py --tree printed {tree_out!r}, the files commit as tree {tree}")
        head = run(["git", "-C", repo, "rev-parse", "--short", "HEAD"]).stdout.strip()
        out = run([sys.executable, git_commit, "--tree", repo], env=bare).stdout
        check(out == head + "\n", f"git_commit.py --tree in a clean repository printed {out!r}, HEAD {head}")
        out = run([sys.executable, git_commit, "--tree", repo], env=dict(bare, MP_BUILD_COMMIT="3f7941e")).stdout
        check(out == "3f7941e\n", f"git_commit.py --tree with MP_BUILD_COMMIT printed {out!r}")

        nested = os.path.join(repo, "unpacked")
        os.mkdir(nested)
        out = run([sys.executable, git_commit, nested], env=bare).stdout
        check(out == "unknown\n", f"git_commit.py on a tree inside a checkout printed {out!r}")

    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
