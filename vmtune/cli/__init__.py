"""The command line: a thin adapter over the library.

Exit codes: 0 done; 1 invalid input (``plan``: a problem found); 2 usage (one line, as every error:
``vmtune: error: COMMAND: ...``); 3 the domain does not fit
on the host; 4 libvirt-python is not installed or libvirt cannot be reached (the live commands).

    offline.py  rewrite, untune, topology, profiles, hook install|uninstall|reap: no libvirt needed
    live.py     tag, untag, apply, revert, plan: the domains libvirt already knows
    doctor.py   doctor: what is wrong with this host
    hostmap.py  map: a picture of the host, live or offline
    format.py   the tables and lines printed for people
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import config as config_mod
from ..atomic import write_atomic  # noqa: F401 - moved to the library; vmtune.cli.write_atomic still works
from ..envfile import hooks_dir_file, load_env_file
from ..errors import VmtuneError
from ..hookfile import DEFAULT_HOOKS_DIR
from ..oneline import escape
from ..roots import Roots
from . import doctor, hostmap, live, offline

COMMANDS = {**offline.COMMANDS, **live.COMMANDS, **doctor.COMMANDS, **hostmap.COMMANDS}


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

    parser = Parser(prog="vmtune", description="Make KVM guests fast.")
    parser.add_argument("--version", action="version", version=f"vmtune {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    offline.add_parsers(sub)  # rewrite, untune, topology, profiles, hook
    live.add_parsers(sub)     # tag, untag, apply, revert, plan: domains libvirt already knows
    doctor.add_parsers(sub)   # doctor: what is wrong with this host
    hostmap.add_parsers(sub)  # map: a picture of the host
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "hook" and args.action == "reap":  # the hook's settings, as the hook reads them
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
