"""The command line: a thin adapter over the library.

Exit codes: ``EXIT_CODES`` below (vmtune(8) and docs/cli.md are made from it). Every error is one
line, ``vmtune: error: ...``; a usage error names the command (``vmtune: error: rewrite: ...``).

    offline.py  rewrite, untune, topology, profiles, hook install|uninstall|reap|restore: no libvirt
    live.py     tag, untag, apply, revert, plan: the domains libvirt already knows
    doctor.py   doctor: what is wrong with this host
    hostmap.py  map: a picture of the host, live or offline
    status.py   status: what the hook is doing now
    verify.py   verify: oslat on the CPUs meant for latency domains, and what ran there
    format.py   the tables and lines printed for people
    helptext.py the examples every --help ends with    argtypes.py  numbers within bounds
    manual.py   the man pages and the completion, generated (python -m vmtune.cli.manual ROOT)
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import config as config_mod
from ..atomic import write_atomic  # noqa: F401 - moved to the library; vmtune.cli.write_atomic still works
from ..install.envfile import hooks_dir_file, load_env_file
from ..errors import VmtuneError
from ..install.hookfile import DEFAULT_HOOKS_DIR
from ..oneline import escape
from ..roots import Roots
from . import doctor, helptext, hostmap, live, offline, status, verify

# Every exit code of the command line (the man page's EXIT STATUS is made from this).
# docs/cli.md's table is made from it too (python -m vmtune.cli.manual).
EXIT_CODES = (
    (0, "done"),
    (1, "invalid input: malformed XML (the error names the file, its line and column), an unknown profile, a "
        "foreign arch, a Xen or LXC domain, a configuration that does not fit the host, a domain libvirt does not know or refuses, a hook state that cannot be read "
        "(`vmtune: error: ...` on stderr, one line); `plan`: a problem found; `doctor`: a check FAILs; "
        "`verify`: a CPU's largest gap is over --max-us"),
    (2, "usage: one line too, naming the command and its `--help`; an option the command would ignore is one "
        "(`map --connect` with `--host` or `--claim`, `hook reap --unit-dir`), and so is `doctor "
        "--census-seconds` outside 0-60"),
    (3, "the domain does not fit on the host (CPUs, memory or hugepages)"),
    (4, "the live commands: libvirt's Python binding is not installed (the message names the command that "
        "installs it) or libvirt cannot be reached at `--connect`; `doctor --prometheus` without "
        "prometheus_client; `verify` without oslat (the message names the package)"),
    (130, "interrupted (Ctrl-C)"),
)

# The subcommands, by module, in the order --help lists them: each module has COMMANDS (name ->
# its function) and add_parsers. A new subcommand is a module here and its place in this list.
GROUPS = (
    offline,  # rewrite, untune, topology, profiles, hook
    live,     # tag, untag, apply, revert, plan: domains libvirt already knows
    doctor,   # doctor: what is wrong with this host
    hostmap,  # map: a picture of the host
    status,   # status: what the hook is doing now
    verify,   # verify: whether CPUs meant for latency domains are quiet
)
COMMANDS = {name: run for group in GROUPS for name, run in group.COMMANDS.items()}


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line (``vmtune: error: rewrite: ...``, exit 2)
    like every other error of vmtune's; ``--help`` still prints the whole usage. Its subparsers are
    of this class too (argparse makes them with the parent's class)."""

    def error(self, message: str):
        where = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        self.exit(2, f"vmtune: error: {escape(where + message)} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    """vmtune's argument parser (the Ansible modules' tests parse their calls with it)."""
    from .. import __version__

    parser = Parser(prog="vmtune", formatter_class=helptext.Formatter, description=(
        "Make KVM guests fast. vmtune rewrites libvirt domain XML for the host's NUMA topology (rewrite, "
        "untune, topology, profiles); tunes the domains libvirt already knows, placed together (tag, untag, "
        "apply, revert, plan); draws who holds which CPU (map); says what is wrong with a host (doctor); and, "
        "through its libvirt hook, keeps the host in a low-latency state while latency-tagged domains run "
        "(hook, status). Every COMMAND --help ends with examples."))
    parser.add_argument("--version", action="version", version=f"vmtune {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.add_parsers(sub)
    helptext.decorate(sub)  # every --help ends with examples
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "status" or (args.command == "hook" and args.action in ("reap", "restore")):
            # the hook's settings, as the hook reads them
            load_env_file(hooks_dir_file(args.hooks_dir or DEFAULT_HOOKS_DIR), os.environ)
        roots = Roots.from_env(os.environ)  # the one read of the environment
        cfg = config_mod.load(getattr(args, "config", None) or roots.config, roots.profiles)
        return COMMANDS[args.command](args, cfg, roots)
    except VmtuneError as exc:
        # one line, whatever the message quotes (file names, attribute values with &#10;)
        print(f"vmtune: error: {escape(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
