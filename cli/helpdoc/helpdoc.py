#!/usr/bin/env python3
"""cli/helpdoc/helpdoc.py (man|bash|zsh) MOEPLAN OUT [DOCDIR]: the man page moeplan(1), the bash
completion or the zsh completion of the built moeplan, made from what it prints for --help.

The --help texts are the single source: meson runs this at build time (cli/helpdoc/meson.build),
so the installed page and completions describe exactly the binary beside them.
tests/check_cli_docs.py checks the outputs against --help on its own terms (every word of every
help text in the rendered page, every option of every command offered by both completions).

The help texts follow one layout, which is all this script assumes:
  - `moeplan --help`: a title line "moeplan VERSION — SUMMARY", usage lines, then "commands:"
    and "options:" blocks of two-space-indented "NAME  SUMMARY" lines;
  - `moeplan COMMAND --help`: usage lines ("usage: moeplan COMMAND ...", more lines starting with
    "moeplan"), then text. A line whose first non-blank is "-" followed by a letter or "-" starts
    an option: its tag (flags and their values) ends at the first run of two or more spaces not
    followed by "-"; the rest of the line and the lines below, indented at least as far as the
    description, describe it. A command whose --help does not start with "usage:" (`version`)
    has no options.
"""
import re
import subprocess
import sys

OPTION_LINE = re.compile(r"^(\s*)(-[-A-Za-z].*)$")
# the tag/description gap: two or more spaces, then anything but another flag
GAP = re.compile(r"\s{2,}(?=[^-\s])")
# a flag in a tag: -x or --long-name (lowercase); one with a capital in it is a pattern
# (--type-CLASS), not a flag
FLAG = re.compile(r"(?<![\w-])(-[A-Za-z0-9]|--[a-z0-9][a-z0-9-]*)(?![\w-])")
# a value that is one of a few literal words: --rows all|decode|final, --weights f16|f32
CHOICES = re.compile(r"^[a-z0-9]+(\|[a-z0-9]+)+$")
# the description column of an option line without a description: deeper lines continue it
CONTINUATION_MIN_INDENT = 12


def help_text(moeplan, *args):
    p = subprocess.run([moeplan, *args, "--help"], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        sys.exit(f"helpdoc: {moeplan} {' '.join(args)} --help: exit {p.returncode}: {p.stderr}")
    return p.stdout


class Option:
    def __init__(self, tag, desc):
        self.tag = tag          # "-m, --model PATH"
        self.desc = [desc] if desc else []

    def flags(self):
        return FLAG.findall(self.tag)

    def choices(self):
        """flag -> its literal values, where the tag gives them (--rows all|decode|final)"""
        out = {}
        words = self.tag.replace(",", " ").split()
        for i, w in enumerate(words[:-1]):
            if FLAG.fullmatch(w) and CHOICES.match(words[i + 1]):
                out[w] = words[i + 1].split("|")
        return out

    def summary(self):
        return " ".join(" ".join(self.desc).split())


class Command:
    def __init__(self, name, summary, text):
        self.name, self.summary = name, summary
        self.usage = []    # synopsis lines, without "usage: "
        self.blocks = []   # ("text", [lines]) or ("options", [Option])
        self.subcommands = []
        if text.startswith("usage:"):
            self.parse(text)

    def parse(self, text):
        lines = text.rstrip("\n").split("\n")
        i = 0
        while i < len(lines) and (i == 0 or lines[i].strip().startswith("moeplan ")):
            self.usage.append(lines[i].strip().removeprefix("usage:").strip())
            i += 1
        for u in self.usage:  # `moeplan profile inspect ...`: literal words after the command
            words = u.split()
            sub = words[2] if len(words) > 2 and re.fullmatch(r"[a-z]+", words[2]) else None
            if sub and sub not in self.subcommands:
                self.subcommands.append(sub)
        opts = None
        first_col = None  # where the first description of the option block starts
        last_col = None   # where the last description on an option's own line started
        item_col = None   # where the current option's description starts (None: on no line yet)
        text_col = None   # where the continuation of the last text line starts
        for line in lines[i:]:
            m = OPTION_LINE.match(line)
            indent = len(line) - len(line.lstrip())
            # a description that overflowed its column continues at the block's column
            limit = min(item_col if item_col is not None else CONTINUATION_MIN_INDENT,
                        first_col if first_col is not None else CONTINUATION_MIN_INDENT)
            if m and not (opts and indent >= limit) and not (text_col and indent >= text_col):
                gap = GAP.search(m.group(2))
                if gap:
                    tag, desc = m.group(2)[:gap.start()], m.group(2)[gap.end():]
                    last_col = item_col = len(m.group(1)) + gap.end()
                    first_col = first_col if first_col is not None else item_col
                elif last_col and line[last_col - 1:last_col + 1].startswith(" ") and \
                        line[last_col:last_col + 1].strip():
                    # a tag that fills the column: one space before the option above's description
                    tag, desc = line[:last_col].strip(), line[last_col:]
                    item_col = last_col
                else:
                    tag, desc, item_col = m.group(2).rstrip(), "", None
                if opts is None:
                    opts = []
                    self.blocks.append(("options", opts))
                opts.append(Option(tag, desc))
                text_col = None
            elif opts and line.strip() and indent > 0:
                opts[-1].desc.append(line.strip())
            else:
                opts, first_col, last_col, item_col = None, None, None, None
                # a text line's own columns: lines below that start at its indent, or at its
                # hanging column ("verify   read the profile ..."), continue it, flags or not
                gap = GAP.search(line)
                text_col = indent if indent else (gap.end() if gap and line.strip() else None)
                if self.blocks and self.blocks[-1][0] == "text":
                    self.blocks[-1][1].append(line)
                else:
                    self.blocks.append(("text", [line]))

    def options(self):
        return [o for kind, b in self.blocks if kind == "options" for o in b]

    def flags(self):
        """every flag the command takes, from its option lines and its usage lines, in order"""
        out = []
        for f in [f for o in self.options() for f in o.flags()] + \
                 [f for u in self.usage for f in FLAG.findall(u)]:
            if f not in out:
                out.append(f)
        return out

    def choices(self):
        out = {}
        for o in self.options():
            out.update(o.choices())
        for u in self.usage:  # [--weights f16|f32]
            out.update(Option(u.replace("[", " ").replace("]", " "), "").choices())
        return out

    def flag_summaries(self):
        out = {}
        for o in self.options():
            for f in o.flags():
                out.setdefault(f, o.summary())
        return out


def read_program(moeplan):
    top = help_text(moeplan)
    title = top.split("\n", 1)[0]
    m = re.match(r"moeplan (\S+) \S+ (.*)$", title)
    if not m:
        sys.exit(f"helpdoc: unexpected first line of moeplan --help: {title!r}")
    version, summary = m.group(1), m.group(2)
    usage, commands, options, section = [], [], [], None
    for line in top.split("\n")[1:]:
        more_usage = usage and section is None and line.strip().startswith("moeplan ")
        if line.startswith("usage:") or more_usage:
            usage.append(line.strip().removeprefix("usage:").strip())
        elif line in ("commands:", "options:"):
            section = line[:-1]
        elif section and line.startswith("  ") and line.strip():
            name, _, text = line.strip().partition(" ")
            if section == "commands":
                commands.append(Command(name, text.strip(), help_text(moeplan, name)))
            else:
                gap = GAP.search(line.strip())
                options.append(Option(line.strip()[:gap.start()], line.strip()[gap.end():]))
        elif not line.strip():
            section = None
    if not commands:
        sys.exit("helpdoc: moeplan --help lists no commands")
    return version, summary, usage, commands, options


# --- man page ---------------------------------------------------------------------------------

def roff(text):
    """text -> roff: backslashes, hyphens (so that flags render as ASCII and can be searched),
    non-ASCII characters as groff's \\[uXXXX], and no line that starts as a request"""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\e")
        elif ch == "-":
            out.append("\\-")
        elif ord(ch) > 127:
            out.append("\\[u%04X]" % ord(ch))
        else:
            out.append(ch)
    s = "".join(out)
    return "\\&" + s if s[:1] in (".", "'") else s


def man_text_block(lines):
    """A help paragraph: flowed text when it is plain prose (every line flush left, no columns),
    else the help's own layout, unfilled, so that tables and lists keep their columns."""
    out, para = [], []

    def flush():
        if para:
            prose = all(not l.startswith(" ") and "  " not in l.strip() for l in para)
            if prose:
                out.append(".PP")
                out.extend(roff(l.strip()) for l in para)
            else:
                out.extend([".PP", ".nf"] + [roff(l) for l in para] + [".fi"])
            para.clear()

    for line in lines:
        if line.strip():
            para.append(line)
        else:
            flush()
    flush()
    return out


def man_options(opts):
    out = []
    for o in opts:
        out += [".TP", "\\fB" + roff(o.tag) + "\\fR"]
        out += [roff(d) for d in o.desc] if o.desc else ["\\&"]
    return out


def man(moeplan, docdir):
    version, summary, usage, commands, options = read_program(moeplan)
    out = [
        '.\\" moeplan(1), made by cli/helpdoc/helpdoc.py from the --help of moeplan %s;' % version,
        '.\\" edit the help texts, not this file',
        '.TH MOEPLAN 1 "" "moeplan %s" "moeplan manual"' % roff(version),
        ".nh", ".ad l",
        ".SH NAME", "moeplan \\- " + roff(summary),
        ".SH SYNOPSIS", ".nf"] + ["\\fB" + roff(u) + "\\fR" for u in usage] + [".fi",
        ".SH DESCRIPTION",
        ".PP",
        "moeplan measures which experts of a Mixture\\-of\\-Experts model every token uses, "
        "analyses the routing, simulates expert placements under GPU memory budgets and writes "
        "placement profiles. Each command below has its own options; "
        "\\fBmoeplan\\fR \\fICOMMAND\\fR \\fB\\-\\-help\\fR prints the same text as its "
        "section here.",
        ".SH OPTIONS"] + man_options(options) + [".SH COMMANDS"]
    for c in commands:
        out += [".SS \"moeplan %s\"" % roff(c.name), ".PP", roff(c.summary)]
        if c.usage:
            out += [".PP", ".nf"] + ["\\fB" + roff(u) + "\\fR" for u in c.usage] + [".fi"]
        for kind, block in c.blocks:
            out += man_options(block) if kind == "options" else man_text_block(block)
    out += [".SH FILES",
            ".TP", roff(docdir),
            "the documentation: user\\-guide.md (every command, with examples), design.md, "
            "trace\\-format.md, bench.md and the other pages of docs/, the JSON schemas and the "
            "trace DDL in schemas/, and the license",
            ".SH SEE ALSO",
            "\\fBsqlite3\\fR(1), which reads the traces that \\fBmoeplan collect\\fR and "
            "\\fBmoeplan import\\fR write"]
    return "\n".join(out) + "\n"


# --- completions ------------------------------------------------------------------------------

def shell_words(words):
    for w in words:
        if not re.fullmatch(r"[A-Za-z0-9_.,:=+/-]+", w):
            sys.exit(f"helpdoc: {w!r} cannot be written unquoted into a completion")
    return " ".join(words)


def bash(moeplan):
    version, _, _, commands, options = read_program(moeplan)
    top = [c.name for c in commands] + [f for o in options for f in o.flags()]
    out = [
        "# bash completion for moeplan %s, made by cli/helpdoc/helpdoc.py from its --help;" % version,
        "# edit the help texts, not this file. Commands, their subcommands and options, and the",
        "# values of options that list theirs; anything else completes file names (-o default).",
        "_moeplan()",
        "{",
        "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}",
        "    COMPREPLY=()",
        "    if [ \"$COMP_CWORD\" -eq 1 ]; then",
        "        COMPREPLY=($(compgen -W \"%s\" -- \"$cur\"))" % shell_words(top),
        "        return 0",
        "    fi",
        "    local subcommands= options= values=",
        "    case ${COMP_WORDS[1]} in",
    ]
    for c in commands:
        out.append("    %s)" % c.name)
        if c.subcommands:
            out.append("        subcommands=\"%s\"" % shell_words(c.subcommands))
        out.append("        options=\"%s\"" % shell_words(c.flags()))
        if c.choices():
            out.append("        case $prev in")
            for flag, vals in c.choices().items():
                out.append("        %s) values=\"%s\" ;;" % (flag, shell_words(vals)))
            out.append("        esac")
        out.append("        ;;")
    out += [
        "    *) return 0 ;;",
        "    esac",
        "    if [ -n \"$values\" ]; then",
        "        COMPREPLY=($(compgen -W \"$values\" -- \"$cur\"))",
        "    elif [ -n \"$subcommands\" ] && [ \"$COMP_CWORD\" -eq 2 ]; then",
        "        COMPREPLY=($(compgen -W \"$subcommands\" -- \"$cur\"))",
        "    elif [[ $cur == -* ]]; then",
        "        COMPREPLY=($(compgen -W \"$options\" -- \"$cur\"))",
        "    fi",
        "    return 0",
        "}",
        "complete -o default -F _moeplan moeplan",
    ]
    return "\n".join(out) + "\n"


def zsh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def zsh_item(name, desc, width=72):
    desc = desc if len(desc) <= width else desc[:width - 3].rstrip() + "..."
    return zsh_quote(name.replace(":", "\\:") + (":" + desc if desc else ""))


def zsh(moeplan):
    version, _, _, commands, options = read_program(moeplan)
    out = [
        "#compdef moeplan",
        "# zsh completion for moeplan %s, made by cli/helpdoc/helpdoc.py from its --help;" % version,
        "# edit the help texts, not this file. Commands, their subcommands and options (with the",
        "# first words of their help), and the values of options that list theirs; anything else",
        "# completes file names.",
        "_moeplan() {",
        "  local -a commands options subcommands values",
        "  if (( CURRENT == 2 )); then",
        "    commands=(",
    ]
    out += ["      " + zsh_item(c.name, c.summary) for c in commands]
    out += ["    )", "    options=("]
    out += ["      " + zsh_item(f, o.summary()) for o in options for f in o.flags()]
    out += [
        "    )",
        "    if [[ $PREFIX == -* ]]; then",
        "      _describe -t options 'moeplan option' options",
        "    else",
        "      _describe -t commands 'moeplan command' commands",
        "    fi",
        "    return",
        "  fi",
        "  case $words[2] in",
    ]
    for c in commands:
        out.append("  %s)" % c.name)
        if c.subcommands:
            out.append("    subcommands=(%s)" % " ".join(zsh_quote(s) for s in c.subcommands))
        out.append("    options=(")
        summaries = c.flag_summaries()
        out += ["      " + zsh_item(f, summaries.get(f, "")) for f in c.flags()]
        out.append("    )")
        if c.choices():
            out.append("    case $words[CURRENT-1] in")
            for flag, vals in c.choices().items():
                out.append("    %s) values=(%s) ;;" % (flag, " ".join(zsh_quote(v) for v in vals)))
            out.append("    esac")
        out.append("    ;;")
    out += [
        "  *) _files; return ;;",
        "  esac",
        "  if (( ${#values} )); then",
        "    compadd -a values",
        "  elif (( ${#subcommands} && CURRENT == 3 )); then",
        "    compadd -a subcommands",
        "  elif [[ $PREFIX == -* ]]; then",
        "    _describe -t options 'moeplan option' options",
        "  else",
        "    _files",
        "  fi",
        "}",
        "",
        "if [[ $zsh_eval_context[-1] == loadautofunc ]]; then",
        "  _moeplan \"$@\"",
        "else",
        "  compdef _moeplan moeplan",
        "fi",
    ]
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) not in (4, 5) or sys.argv[1] not in ("man", "bash", "zsh"):
        sys.exit("usage: helpdoc.py (man|bash|zsh) MOEPLAN OUT [DOCDIR]")
    kind, moeplan, path = sys.argv[1:4]
    if kind == "man":
        text = man(moeplan, sys.argv[4] if len(sys.argv) == 5 else "/usr/local/share/doc/moeplan")
    else:
        text = bash(moeplan) if kind == "bash" else zsh(moeplan)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
