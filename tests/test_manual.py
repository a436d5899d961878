"""The man pages, the shell completion and the examples of ``--help`` (vmtune/cli/manual.py,
vmtune/cli/helptext.py): generated from the parser and the schemas, committed, and current."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vmtune import cli, config, profiles
from vmtune.cli import helptext

ROOT = Path(__file__).resolve().parents[1]
manual = pytest.importorskip("vmtune.cli.manual")
pytest.importorskip("argparse_manpage")
pytest.importorskip("shtab")


def subparsers() -> dict[str, argparse.ArgumentParser]:
    top = cli.parser()
    return next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_the_committed_pages_and_completions_are_current():
    """`python -m vmtune.cli.manual .` writes them: a change of an option, a key or a default that
    is not regenerated fails here."""
    for path, text in manual.files(str(ROOT)).items():
        assert (ROOT / path).read_text() == text, f"{path} is stale: run .venv/bin/python -m vmtune.cli.manual ."


def test_every_option_of_every_help_is_in_the_man_page():
    page = (ROOT / "man/vmtune.8").read_text().replace("\\-", "-")
    for name, parser in subparsers().items():
        assert f"vmtune {name}" in page
        shown = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", parser.format_help())) - {"-h", "--help"}
        for option in shown:
            assert option in page, f"vmtune {name}: {option} is in --help but not in vmtune(8)"
        for action in parser._actions:
            for option in set(action.option_strings) - {"-h", "--help"}:
                assert option in page
            if action.choices and not isinstance(action, argparse._SubParsersAction):
                for choice in action.choices:
                    assert str(choice) in page
    for code, _ in cli.EXIT_CODES:
        assert f".B {code}\n" in page
    for section in ("EXIT STATUS", "ENVIRONMENT", "FILES", "EXAMPLES", "SEE ALSO"):
        assert f".SH {section}" in page
    for name in ("VMTUNE_SYSFS", "VMTUNE_STATE_DIR", "VMTUNE_CONFIG", "VMTUNE_PROFILES", "VMTUNE_DRY_RUN"):
        assert f".B {name}\n" in page


def _schema_keys(spec: dict, prefix: str = "") -> list[str]:
    out = []
    for key, sub in spec["properties"].items():
        if sub.get("type") == "object" and "properties" in sub:
            out += _schema_keys(sub, prefix + key + ".")
        else:
            out.append(prefix + key)
    return out


def test_every_config_key_is_in_vmtune_toml_5_with_its_default():
    page = (ROOT / "man/vmtune.toml.5").read_text()
    spec = json.loads((ROOT / "vmtune/schemas/config.schema.json").read_text())
    keys = _schema_keys(spec)
    assert "hook.isolate" in keys and "reserved_cpus" in keys
    cfg = config.Config()
    for key in keys:
        leaf = key.rsplit(".", 1)[-1]
        entry = re.search(r"\\fB" + re.escape(leaf) + r"\\fR = [^\n]*\n([^\n]*)", page)
        assert entry, f"{key} is not in vmtune.toml(5)"
        value = cfg
        for part in key.split("."):
            value = getattr(value, part, None)
        if value is not None and not isinstance(value, dict | frozenset):
            shown = manual._default(value)
            assert f"Default: {shown}." in entry.group(1), (key, shown)
    for field in (f.name for f in dataclasses.fields(config.HookSettings)):
        assert f"\\fB{field}\\fR = " in page, f"[hook] {field} is a setting the page does not name"


def test_every_profile_key_is_in_vmtune_profiles_5_and_inherit_is_explained():
    page = (ROOT / "man/vmtune-profiles.5").read_text()
    spec = json.loads((ROOT / "vmtune/schemas/profile.schema.json").read_text())
    for key in _schema_keys(spec):
        assert f"\\fB{key.rsplit('.', 1)[-1]}\\fR = " in page, key
    assert ".SS inherit" in page
    for name in profiles.BUILTIN:
        assert f".B {name}\n" in page


@pytest.mark.skipif(not shutil.which("groff"), reason="no groff")
def test_the_pages_render_without_a_warning():
    for page in manual.PAGES:
        done = subprocess.run(["groff", "-man", "-ww", "-z", "-K", "utf8", str(ROOT / page)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stderr == "", (page, done.stderr)


# -- --help's examples ------------------------------------------------------------------------------

def test_every_subcommand_has_examples_and_each_parses():
    parsers = subparsers()
    assert set(helptext.EXAMPLES) == set(parsers), "a subcommand without examples (or examples of none)"
    for name, parser in parsers.items():
        text = parser.format_help()
        assert text.rstrip().splitlines()[-2 * len(helptext.EXAMPLES[name]) - 1] == "examples:"
        for line, _what in helptext.examples(name):
            assert f"  {line}\n" in text
            words = shlex.split(line.split("|")[0])
            assert words[0] == "vmtune" and words[1] == name
            cli.parser().parse_args(words[1:])  # exits 2 on a usage error


def test_the_examples_keep_their_lines_and_the_prose_is_still_wrapped():
    text = subparsers()["status"].format_help()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "  vmtune status --json | jq .leases\n" in text


# -- completion -----------------------------------------------------------------------------------------

BASH = r'''
source "$1"
t() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}
      COMPREPLY=(); _vmtune; echo "${COMPREPLY[*]}"; }
t vmtune st
t vmtune rewrite --prof
t vmtune rewrite --profile l
t vmtune hook re
t vmtune tag d
t vmtune apply ""
'''


def _complete(tmp_path: Path, virsh: str) -> list[str]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "vmtune").write_text(f"#!/bin/sh\nexec {sys.executable} -m vmtune \"$@\"\n")
    (bindir / "virsh").write_text(virsh)
    for f in bindir.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["bash", "-c", BASH, "bash", str(ROOT / "completion/vmtune.bash")], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.skipif(not shutil.which("bash"), reason="no bash")
def test_bash_completes_subcommands_options_profiles_and_domains(tmp_path):
    out = _complete(tmp_path, "#!/bin/sh\ncase \"$*\" in *'list --all --name'*) printf 'db1\\ndb2\\nweb\\n';; esac\n")
    assert out == ["status", "--profile", "latency", "reap restore", "db1 db2", "db1 db2 web"]


@pytest.mark.skipif(not shutil.which("bash"), reason="no bash")
def test_bash_completion_does_not_wait_for_a_libvirt_that_does_not_answer(tmp_path):
    """virsh hanging (libvirtd wedged): no domain names, and the completion returns (timeout 2)."""
    out = _complete(tmp_path, "#!/bin/sh\nexec sleep 20\n")
    assert out[-2:] == ["", ""]
    assert out[:4] == ["status", "--profile", "latency", "reap restore"]


# a command line as typed, and its words as bash splits them (COMP_WORDBREAKS: at : and =) -> the URI
CONNECT = [
    ("vmtune tag -c test:///default d", ["vmtune", "tag", "-c", "test", ":", "///default", "d"], "test:///default"),
    ("vmtune apply --connect=qemu+ssh://root@h/system d",
     ["vmtune", "apply", "--connect", "=", "qemu+ssh", ":", "//root@h/system", "d"], "qemu+ssh://root@h/system"),
    ("vmtune untag --connect qemu:///session d", ["vmtune", "untag", "--connect", "qemu", ":", "///session", "d"],
     "qemu:///session"),
    ("vmtune revert d", ["vmtune", "revert", "d"], "qemu:///system"),
]


@pytest.mark.skipif(not shutil.which("bash"), reason="no bash")
def test_bash_completion_asks_the_libvirt_of_a_typed_connect(tmp_path):
    """Domain names come from the URI typed with -c or --connect (as bash splits it into words at
    : and =), else from LIBVIRT_DEFAULT_URI, else qemu:///system: the stub virsh records its URI."""
    log = tmp_path / "virsh.log"
    script = ['source "$1"',
              'c() { COMP_LINE=$1; COMP_POINT=${#1}; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($#-1)); '
              'COMPREPLY=(); _vmtune; echo "${COMPREPLY[*]}"; }']
    for line, words, _uri in CONNECT:
        script.append(" ".join(shlex.quote(w) for w in ["c", line, *words]))
    script.append("LIBVIRT_DEFAULT_URI=test:///env c 'vmtune tag d' vmtune tag d")
    virsh = f"#!/bin/sh\necho \"$*\" >> {log}\ncase \"$*\" in *'list --all --name'*) printf 'db1\\ndb2\\n';; esac\n"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "virsh").write_text(virsh)
    (bindir / "virsh").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "LIBVIRT_DEFAULT_URI"}
    env["PATH"] = f"{bindir}:{env['PATH']}"
    done = subprocess.run(["bash", "-c", "\n".join(script), "bash", str(ROOT / "completion/vmtune.bash")], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["db1 db2"] * (len(CONNECT) + 1)
    asked = [line.split(" ")[2] for line in log.read_text().splitlines()]
    assert asked == [uri for *_, uri in CONNECT] + ["test:///env"]


def test_every_option_in_docs_cli_synopsis_is_one_its_command_takes():
    """docs/cli.md's synopsis is a summary by hand: each of its lines names a subcommand, and each
    option it shows is one that subcommand takes (the man page has them all)."""
    text = (ROOT / "docs/cli.md").read_text()
    synopsis = text.split("## Synopsis", 1)[1].split("```", 2)[1]
    parsers, command, seen = subparsers(), None, set()
    for line in synopsis.splitlines():
        words = line.split()
        if words[:1] == ["vmtune"]:
            command = words[1] if len(words) > 1 and words[1] in parsers else None
            seen.add(command)
        if command is None:
            continue
        known = {o for a in parsers[command]._actions for o in a.option_strings}
        for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", line):
            assert option in known, f"docs/cli.md: vmtune {command} has no {option}"
    assert seen - {None} == set(parsers) - {"doctor"}, "a subcommand missing from docs/cli.md's synopsis"
