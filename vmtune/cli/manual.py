"""The man pages and the shell completion, generated from the sources ``--help`` and the loaders use,
so that they cannot drift (tests/test_manual.py regenerates them and compares).

- ``vmtune(8)``: the argparse parser through argparse-manpage, with EXIT STATUS (``cli.EXIT_CODES``),
  ENVIRONMENT (the table of vmtune/roots.py's docstring and the hook's own variables), FILES and
  the examples of every subcommand (helptext.py);
- ``vmtune.toml(5)``: every key of the configuration file from its JSON Schema, with the default of
  ``config.Config``;
- ``vmtune-profiles(5)``: every profile key from its JSON Schema, with the default of
  ``profiles.Profile``, how ``inherit`` works, and the built-in profiles;
- bash and zsh completion through shtab: subcommands, options, files, profile names (``vmtune
  profiles``) and domain names (``virsh list --all --name`` at the ``--connect`` URI typed, else
  libvirt's default, only when libvirt answers within 2 s).

``python -m vmtune.cli.manual ROOT`` writes ``man/`` and ``completion/`` under ROOT (``--check``:
exit 1 when one differs). argparse-manpage and shtab are needed only here (the ``test`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import fields

from .helptext import SHIPPED

DATE = "2026-11-27"  # the pages' date: changed by hand with what they say, so a build is reproducible
PAGES = ("man/vmtune.8", "man/vmtune.toml.5", "man/vmtune-profiles.5")
COMPLETIONS = ("completion/vmtune.bash", "completion/_vmtune")
HOOK_ENV = (("VMTUNE_DRY_RUN", "1: the hook logs what it would do and changes nothing"),
            ("VMTUNE_SYSLOG", "0: the hook logs to stderr only, not to syslog"),
            ("VMTUNE_STDIN_TIMEOUT_S", "how long the hook waits for the domain XML on stdin (default 10)"),
            ("NO_COLOR", "set: vmtune map draws without colour"))
FILES = (("/etc/vmtune/vmtune.toml", "the host configuration: vmtune.toml(5)"),
         ("/etc/vmtune/profiles/NAME.toml", "your own profiles: vmtune-profiles(5)"),
         ("/etc/libvirt/hooks/qemu.d/50-vmtune", "the libvirt hook (libvirt 6.5 or later runs every executable "
                                                "in qemu.d)"),
         ("/etc/libvirt/hooks/vmtune.env", "VMTUNE_* settings for the hook, which libvirt starts with an "
                                           "empty environment; vmtune hook reap and vmtune status read it too"),
         ("/run/vmtune/state.json, baseline.json", "the hook's leases and what the host was before them"),
         ("/var/lib/vmtune/originals", "the XML domains had before vmtune apply, for vmtune revert"),
         ("vmtune-reap.service, vmtune-reap.timer", "the reaper: vmtune hook reap once a minute"),
         (SHIPPED, "the example domains (stock-latency.xml, db-4vcpu.xml, batch-4vcpu.xml), a 2-node host's "
                   "capabilities (hosts/2node-smt.xml) and the domains of the map example (map/), as the "
                   "EXAMPLES below use them"))
SEE_ALSO = r"\fBvmtune.toml\fR(5), \fBvmtune-profiles\fR(5), \fBvirsh\fR(1), \fBlibvirtd\fR(8), \fBtuned-adm\fR(8)"


def roff(text: str) -> str:
    """``text`` safe in a roff line: backslashes and a leading dot or quote escaped."""
    text = text.replace("\\", "\\e")
    return "\\&" + text if text[:1] in (".", "'") else text


def _items(rows) -> str:
    return "\n".join(f".TP\n.B {roff(name)}\n{roff(text)}" for name, text in rows)


def environment() -> list[tuple[str, str]]:
    """The variables of vmtune/roots.py's table, then the hook's own."""
    from .. import roots

    rows: list[tuple[str, str]] = []
    for line in (roots.__doc__ or "").splitlines():
        match = re.match(r"``(\w+)``\s+(.*)$", line)
        if match:
            rows.append((match.group(1), match.group(2)))
        elif rows and line.startswith(" " * 30) and line.strip() and not line.strip().startswith("="):
            rows[-1] = (rows[-1][0], rows[-1][1] + " " + line.strip())
    return [(name, ("default " if text.startswith("``/") else "") + text.replace("``", "")) for name, text in rows] \
        + list(HOOK_ENV)


def _examples() -> str:
    """Every subcommand's examples, with the files the package installs (helptext.SHIPPED)."""
    from .helptext import EXAMPLES, SHIPPED, examples

    out = []
    for command in EXAMPLES:
        for line, what in examples(command, SHIPPED):
            out.append(f".TP\n.B {roff(line)}\n{roff(what)}")
    return "\n".join(out)


def vmtune_page() -> str:
    from argparse_manpage.manpage import Manpage

    from .. import __version__
    from . import EXIT_CODES, parser

    page = Manpage(parser(), _data={"manual_section": 8, "version": __version__, "project_name": "vmtune",
                                    "manual_title": "System Manager's Manual", "date": DATE,
                                    "description": "make KVM guests fast: tune libvirt domains, place them, "
                                                   "and keep the host out of their way"})
    page.add_section("exit status", ">", _items((str(code), text.replace("`", "")) for code, text in EXIT_CODES))
    page.add_section("environment", ">", _items(environment()))
    page.add_section("files", ">", _items(FILES))
    page.add_section("examples", ">", _examples())
    page.add_section("see also", ">", SEE_ALSO)
    return _clean(str(page))


def _clean(text: str) -> str:
    """No trailing blanks (lintian and diff both notice them)."""
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


# -- the two file formats ---------------------------------------------------------------------------

def _schema(name: str) -> dict:
    from .. import schema

    with open(os.path.join(os.path.dirname(schema.__file__), "schemas", name), encoding="utf-8") as fh:
        return json.load(fh)


def _kind(spec: dict) -> str:
    if "enum" in spec:
        return " | ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in spec["enum"])
    kind = spec.get("type", "")
    bounds = [f"{w} {spec[k]}" for k, w in (("minimum", "from"), ("maximum", "to")) if k in spec]
    return " ".join([kind, *bounds]).strip()


def _default(value) -> str | None:
    if value is None:
        return None
    value = getattr(value, "value", value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict | list | tuple | frozenset | set):
        return None if not value else json.dumps(value)
    return str(value)


def _keys(properties: dict, defaults, prefix: str = "") -> list[str]:
    """A ``.TP`` paragraph per key: its name, its values, its default, what it does."""
    out = []
    for key, spec in properties.items():
        name = prefix + key
        if spec.get("type") == "object" and "properties" in spec:
            out.append(f".SS [{roff(name)}]\n{roff(spec.get('description', ''))}")
            out += _keys(spec["properties"], defaults, name + ".")
            continue
        default = defaults(name)
        line = f".TP\n\\fB{roff(key)}\\fR = {roff(_kind(spec) or 'table')}"  # under its [table] heading
        text = spec.get("description", "")
        if default is not None:
            text += f" Default: {default}."
        out.append(f"{line}\n{roff(text)}")
    return out


def _header(title: str, section: int, what: str) -> list[str]:
    from .. import __version__

    return [f'.TH {title.upper()} "{section}" "{DATE}" "vmtune {__version__}" "File Formats Manual"',
            ".SH NAME", f"{title} \\- {what}"]


def config_page() -> str:
    from ..config import Config

    spec = _schema("config.schema.json")
    cfg = Config()

    def defaults(name: str):
        obj = cfg
        for part in name.split("."):
            obj = getattr(obj, part, None)
        return _default(obj)

    lines = _header("vmtune.toml", 5, "vmtune's host configuration")
    lines += [".SH SYNOPSIS", "/etc/vmtune/vmtune.toml", ".SH DESCRIPTION",
              roff("A TOML file; every key is optional. vmtune reads it at every command and hook call "
                   "(--config FILE, else $VMTUNE_CONFIG, else /etc/vmtune/vmtune.toml); a file that does not "
                   "exist is the defaults. A key it does not know, or a value out of its range, is one line "
                   "naming it and exit 1 (the hook: a warning, and the defaults). CPU lists are cpulists as "
                   "the kernel writes them (0-3,8)."),
              ".SH KEYS", *_keys(spec["properties"], defaults),
              ".SH EXAMPLE", ".nf", 'reserved_cpus = "0,1"', 'placement = "spread"', "", "[hook]",
              'isolate = "auto"', 'cstate_scope = "pinned"', ".fi",
              ".SH SEE ALSO", r"\fBvmtune\fR(8), \fBvmtune-profiles\fR(5)"]
    return _clean("\n".join(lines))


def profiles_page() -> str:
    from .. import profiles

    spec = _schema("profile.schema.json")
    base = profiles.Profile(name="")
    names = {f.name for f in fields(base)}

    def defaults(name: str):
        attr = name.replace(".", "_")
        return _default(getattr(base, attr)) if attr in names and name not in ("description", "inherit") else None

    builtin = []
    for name in profiles.BUILTIN:
        loaded = profiles.load(name, None)
        builtin.append((name, loaded.description))
    lines = _header("vmtune-profiles", 5, "vmtune's tuning profiles")
    lines += [".SH SYNOPSIS", "/etc/vmtune/profiles/NAME.toml", ".SH DESCRIPTION",
              roff("A profile says what vmtune rewrites in a domain: a TOML file whose name is the profile's. "
                   "vmtune looks for NAME.toml in $VMTUNE_PROFILES, else profiles_dir of vmtune.toml(5), else "
                   "/etc/vmtune/profiles, then among the built-in ones; a file of yours with a built-in name "
                   "replaces it. A domain names its profile in its vmtune tag (vmtune tag NAME --profile P), "
                   "or --profile names it; the default is balanced. vmtune profiles lists them all, and "
                   "names a profile that does not load with its error (exit 1)."),
              ".SS inherit",
              roff('inherit = "latency" starts from that profile and overrides only the keys given here, '
                   "one by one (a table such as [cpu] is merged key by key, not replaced). The chain may be "
                   "as long as you like; a loop is an error naming the chain, and a profile it cannot find is "
                   "an error naming the folders searched and the profiles they hold. A file of yours named as "
                   "a built-in profile may inherit its own name: it then extends the built-in one. A key not "
                   "given anywhere in the chain has the default below."),
              ".SH KEYS", *_keys(spec["properties"], defaults),
              ".SH BUILT-IN PROFILES", _items(builtin),
              ".SH EXAMPLE", ".nf", "# /etc/vmtune/profiles/db.toml", 'description = "latency, no SMT siblings"',
              'inherit = "latency"', "", "[cpu]", 'smt = "isolate"', ".fi",
              ".SH SEE ALSO", r"\fBvmtune\fR(8), \fBvmtune.toml\fR(5)"]
    return _clean("\n".join(lines))


# -- completion -------------------------------------------------------------------------------------

BASH_PREAMBLE = r"""
# profile names: vmtune profiles' first column
_vmtune_profiles() { compgen -W "$(vmtune profiles 2>/dev/null | awk '{print $1}')" -- "$1"; }
# the libvirt URI typed before (-c URI, --connect URI, --connect=URI), else libvirt's default
_vmtune_uri() {
  local i word uri=${LIBVIRT_DEFAULT_URI:-qemu:///system}
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    case $word in
      -c|--connect) ((i + 1 < COMP_CWORD)) && uri=${COMP_WORDS[i+1]} ;;
      --connect=*) uri=${word#--connect=} ;;
      -c?*) uri=${word#-c} ;;
    esac
  done
  uri=${uri#[\"\']}
  printf '%s\n' "${uri%[\"\']}"
}
# domain names: only when libvirt answers within 2 s (read-only, as --connect's default)
_vmtune_domains() {
  compgen -W "$(timeout 2 virsh -r -c "$(_vmtune_uri)" list --all --name 2>/dev/null)" -- "$1"
}
# bash splits a word at : and = (COMP_WORDBREAKS), so that -c qemu+ssh://h/system would count as
# three arguments: the words before the one completed are glued back as typed (no blank between)
_vmtune() {
  local -a glued=()
  local i word blank rest=$COMP_LINE current=${COMP_WORDS[COMP_CWORD]}
  for ((i = 0; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    blank=${rest%%[![:space:]]*}
    rest=${rest#"$blank"}
    rest=${rest#"$word"}
    if ((i > 0)) && [[ -z $blank ]]; then
      glued[${#glued[@]}-1]+=$word
    else
      glued+=("$word")
    fi
  done
  local COMP_WORDS=("${glued[@]}" "$current") COMP_CWORD=${#glued[@]}
  _shtab_vmtune "$@"
}
"""
ZSH_PREAMBLE = r"""
_vmtune_profiles() { local -a p; p=(${(f)"$(vmtune profiles 2>/dev/null | awk '{print $1}')"}); compadd -a p; }
# the libvirt URI typed before (-c URI, --connect URI, --connect=URI), else libvirt's default
_vmtune_uri() {
  local i uri=${LIBVIRT_DEFAULT_URI:-qemu:///system}
  for (( i = 1; i < CURRENT; i++ )); do
    case $words[i] in
      -c|--connect) (( i + 1 < CURRENT )) && uri=${(Q)words[i+1]} ;;
      --connect=*) uri=${(Q)words[i]#--connect=} ;;
      -c?*) uri=${(Q)words[i]#-c} ;;
    esac
  done
  print -r -- $uri
}
_vmtune_domains() {
  local -a d
  d=(${(f)"$(timeout 2 virsh -r -c "$(_vmtune_uri)" list --all --name 2>/dev/null)"})
  compadd -a d
}
"""
PROFILE = {"bash": "_vmtune_profiles", "zsh": "_vmtune_profiles"}
DOMAIN = {"bash": "_vmtune_domains", "zsh": "_vmtune_domains"}
DOMAIN_COMMANDS = ("tag", "untag", "apply", "revert")


def completing_parser() -> argparse.ArgumentParser:
    """vmtune's parser with what each argument completes to (shtab's ``complete`` attribute)."""
    import shtab

    from . import parser

    top = parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    for command, p in sub.choices.items():
        for action in p._actions:
            if action.dest == "profile":
                action.complete = PROFILE  # type: ignore[attr-defined]
            elif action.dest in ("name", "names") and command in DOMAIN_COMMANDS:
                action.complete = DOMAIN  # type: ignore[attr-defined]
            elif action.metavar in ("DIR",):
                action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
            elif action.metavar and re.search(r"FILE|\.xml|OUT|CAPS", str(action.metavar)):
                action.complete = shtab.FILE  # type: ignore[attr-defined]
    return top


def completion(shell: str) -> str:
    import shtab

    text = shtab.complete(completing_parser(), shell=shell,
                          preamble={"bash": BASH_PREAMBLE, "zsh": ZSH_PREAMBLE})
    if shell == "bash":  # bash calls _vmtune (the preamble's), which calls shtab's with the words glued
        entry = re.compile(r"^(complete .*-F )_shtab_vmtune( vmtune)$", re.M)
        text, found = entry.subn(r"\1_vmtune\2", text)
        if found != 1:
            raise RuntimeError("shtab's bash completion has no one `complete ... -F _shtab_vmtune vmtune`")
    return _clean(text)


EXIT_TABLE = re.compile(r"(<!-- exit-codes:[^\n]*-->\n\| exit \| meaning \|\n\|---\|---\|\n).*?(<!-- /exit-codes -->)", re.S)
CLI_DOC = "docs/cli.md"


def cli_doc(root: str) -> str:
    """docs/cli.md with its exit code table made from ``cli.EXIT_CODES``."""
    from . import EXIT_CODES

    with open(os.path.join(root, CLI_DOC), encoding="utf-8") as fh:
        text = fh.read()
    rows = "".join(f"| {code} | {meaning} |\n" for code, meaning in EXIT_CODES)
    return EXIT_TABLE.sub(lambda m: m.group(1) + rows + m.group(2), text)


def files(root: str = ".") -> dict[str, str]:
    """Path under the checkout -> the text it should have."""
    return {"man/vmtune.8": vmtune_page(), "man/vmtune.toml.5": config_page(),
            "man/vmtune-profiles.5": profiles_page(), "completion/vmtune.bash": completion("bash"),
            "completion/_vmtune": completion("zsh"), CLI_DOC: cli_doc(root)}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    roots = [a for a in argv if a != "--check"]
    root = roots[0] if roots else "."
    stale = []
    for path, text in files(root).items():
        full = os.path.join(root, path)
        try:
            with open(full, encoding="utf-8") as fh:
                same = fh.read() == text
        except FileNotFoundError:
            same = False
        if same:
            continue
        stale.append(path)
        if not check:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as fh:
                fh.write(text)
    for path in stale:
        print(f"{'stale' if check else 'wrote'}: {path}", file=sys.stderr)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
