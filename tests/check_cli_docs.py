#!/usr/bin/env python3
"""tests/check_cli_docs.py MAN BASH ZSH: the man page and the bash and zsh completions that the
build made (cli/helpdoc) say what the binary's --help texts say, read here on the test's own
terms rather than through the generator's parser.

- moeplan(1), rendered by groff: every word of every command's --help, in order, within that
  command's section; every top-level option line and every command's summary.
- bash (sourced into bash, its completion function called as readline would) and zsh (the
  completion function run under zsh, compsys's _describe, compadd and _files replaced by
  functions that print what they are given): position 1 offers the commands and the top-level
  options; `moeplan C -` offers every flag that C's --help names anywhere (-x, --name), and
  nothing it does not name; a flag the text names but the completion does not offer must be one
  of another command that the text refers to, which C refuses as an unknown option; a usage line
  `moeplan C WORD` offers WORD as a subcommand; `FLAG a|b|c` offers a, b and c after FLAG.

The moeplan binary is MP_MOEPLAN (tests/meson.build).
"""
import os
import re
import shutil
import subprocess
import sys

MOEPLAN = os.environ.get("MP_MOEPLAN", "")
FLAG = re.compile(r"(?<![\w-])(-[A-Za-z0-9]|--[a-z0-9][a-z0-9-]*)(?![\w-])")
failures = []


def fail(what):
    failures.append(what)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)


def help_of(*cmd):
    p = run([MOEPLAN, *cmd, "--help"])
    if p.returncode != 0:
        fail(f"moeplan {' '.join(cmd)} --help: exit {p.returncode}")
    return p.stdout


def program():
    """(commands {name: summary}, top-level option lines, per-command help texts)"""
    top = help_of()
    commands, options, section = {}, [], None
    for line in top.split("\n"):
        if line in ("commands:", "options:"):
            section = line
        elif not line.strip():
            section = None
        elif section == "commands:":
            m = re.match(r"^  ([a-z]+) +(.*)$", line)
            commands[m.group(1)] = m.group(2)
        elif section == "options:":
            options.append(line.strip())
    if len(commands) < 10:
        fail(f"moeplan --help lists {len(commands)} commands")
    # `moeplan version --help` prints the version: only a text that starts "usage:" is a help text
    helps = {c: help_of(c) for c in commands}
    return commands, options, {c: t for c, t in helps.items() if t.startswith("usage:")}


def expected(name, text):
    """what the completions must offer for `moeplan NAME ...`, from its help text"""
    usage = [l.strip() for l in text.split("\n") if re.match(r"^(usage: |\s+)moeplan %s\b" % name, l)]
    literal = re.compile(r"(?:usage: )?moeplan %s ([a-z]+)(?: |$)" % name)
    subcommands = {m.group(1) for m in map(literal.match, usage) if m}
    choice = re.compile(r"(--[a-z][a-z0-9-]*) ([a-z0-9]+(?:\|[a-z0-9]+)+)(?![\w|])")
    values = {m.group(1): m.group(2).split("|") for m in choice.finditer(text)}
    return set(FLAG.findall(text)), subcommands, values


def refuses_as_unknown(name, flag):
    p = run([MOEPLAN, name, flag, "1"])
    return p.returncode == 2 and "unknown option" in p.stderr


# --- the completions, asked through each shell ---------------------------------------------

BASH_ASK = r'''
source "$1"; shift
spec=$(complete -p moeplan)
case $spec in *"-F _moeplan"*"moeplan"*) ;; *) echo "complete -p moeplan: $spec" >&2; exit 1 ;; esac
case $spec in *"-o default"*) ;; *) echo "no file-name fallback: $spec" >&2; exit 1 ;; esac
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=()
_moeplan moeplan "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
'''

ZSH_ASK = r'''
_describe() { local -a items; items=("${(@P)${@[-1]}}"); print -rl -- "${items[@]%%:*}" }
compadd() { if [[ $1 == -a ]]; then print -rl -- "${(@P)2}"; else print -rl -- "${@:#--}"; fi }
_files() { print -r -- "<files>" }
compdef() { print -r -- "<compdef $*>" }
source "$1"; shift
words=("$@"); CURRENT=$#; PREFIX=${words[-1]}
_moeplan
'''


def ask(shell, path, words):
    """what `shell` offers for the last of words (the words up to the cursor)"""
    if shell == "bash":
        p = run(["bash", "--norc", "--noprofile", "-c", BASH_ASK, "_", path, *words])
    else:
        p = run(["zsh", "-f", "-c", ZSH_ASK, "_", path, *words])
    if p.returncode != 0:
        fail(f"{shell} completion of {words}: exit {p.returncode}: {p.stderr.strip()}")
    out = [w for w in p.stdout.split("\n") if w and not w.startswith("<compdef")]
    if shell == "zsh":  # compsys filters by the prefix; the stand-ins do not
        out = [w for w in out if w.startswith(words[-1]) or w == "<files>"]
    return out


def check_completion(shell, path, commands, top_options, helps):
    top = set(commands) | {f for line in top_options for f in FLAG.findall(line)}
    got = set(ask(shell, path, ["moeplan", ""])) | set(ask(shell, path, ["moeplan", "-"]))
    if got != top:
        fail(f"{shell}: position 1 offers {sorted(got)}, --help lists {sorted(top)}")
    for name, text in helps.items():
        flags, subcommands, values = expected(name, text)
        offered = set(ask(shell, path, ["moeplan", name, "-"]))
        if subcommands:  # flags come after the subcommand
            offered = set(ask(shell, path, ["moeplan", name, sorted(subcommands)[0], "-"]))
        for f in sorted(offered - flags):
            fail(f"{shell}: moeplan {name} offers {f}, which its --help does not name")
        for f in sorted(flags - offered):
            if not refuses_as_unknown(name, f):
                fail(f"{shell}: moeplan {name} --help names {f}, which the completion does not "
                     "offer and the command does not refuse as unknown")
        at2 = set(ask(shell, path, ["moeplan", name, ""])) - {"<files>"}
        if at2 != subcommands:
            fail(f"{shell}: moeplan {name} offers {sorted(at2)} as subcommands, its usage lines "
                 f"{sorted(subcommands)}")
        for flag, vals in values.items():
            got = set(ask(shell, path, ["moeplan", name, flag, ""]))
            if got != set(vals):
                fail(f"{shell}: moeplan {name} {flag} offers {sorted(got)}, its --help {vals}")
    # a word that is not an option completes file names (bash: -o default; zsh: _files)
    files = ask(shell, path, ["moeplan", "run", "-m", ""])
    if files not in ([], ["<files>"]):
        fail(f"{shell}: moeplan run -m offers {files}, not file names")


# --- the man page --------------------------------------------------------------------------

def rendered(man):
    p = run(["groff", "-man", "-Tutf8", "-P-cbou", man])
    if p.returncode != 0 or p.stderr.strip():
        fail(f"groff {man}: exit {p.returncode}: {p.stderr.strip()}")
    text = p.stdout
    for a, b in (("\u2010", "-"), ("\u2212", "-"), ("\u2019", "'"), ("\u2018", "`")):
        text = text.replace(a, b)
    return text


def missing_words(words, within):
    """the first of words that is not found, in order, within (None: all are)"""
    j = 0
    for i, w in enumerate(words):
        while j < len(within) and within[j] != w:
            j += 1
        if j == len(within):
            return i
        j += 1
    return None


def check_man(man, commands, top_options, helps, version):
    page = rendered(man)
    sections, current = {"": []}, ""
    for line in page.split("\n"):
        m = re.match(r"^   moeplan ([a-z]+)$", line)
        if m:
            current = m.group(1)
            sections[current] = []
        sections[current].append(line)
    words = {k: " ".join(v).split() for k, v in sections.items()}
    if version not in page.split():
        fail(f"moeplan(1) does not name version {version}")
    for line in top_options:
        if missing_words(line.split(), words[""]) is not None:
            fail(f"moeplan(1) lacks the top-level option line {line!r}")
    for name, text in helps.items():
        if name not in words:
            fail(f"moeplan(1) has no section 'moeplan {name}'")
            continue
        if missing_words(commands[name].split(), words[name]) is not None:
            fail(f"moeplan(1), moeplan {name}: lacks the summary {commands[name]!r}")
        want = text.split()
        want = want[1:] if want[:1] == ["usage:"] else want
        i = missing_words(want, words[name])
        if i is not None:
            fail(f"moeplan(1), moeplan {name}: --help's words from {' '.join(want[i:i + 8])!r} "
                 "on are not in the section, in order")


def main():
    if len(sys.argv) != 4 or not MOEPLAN:
        sys.exit("usage: MP_MOEPLAN=moeplan check_cli_docs.py MAN BASH ZSH")
    man, bash, zsh = sys.argv[1:]
    commands, top_options, helps = program()
    version = run([MOEPLAN, "--version"]).stdout.split("\n")[0].split()[-1]
    missing = [t for t in ("groff", "bash", "zsh") if not shutil.which(t)]
    if missing:  # scripts/setup.sh installs them
        print(f"SKIP: {', '.join(missing)} not installed (scripts/setup.sh installs them)")
        return 77
    check_man(man, commands, top_options, helps, version)
    check_completion("bash", bash, commands, top_options, helps)
    check_completion("zsh", zsh, commands, top_options, helps)
    for f in failures:
        print("FAIL:", f)
    print(f"{len(helps)} commands checked in moeplan(1), bash and zsh: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
