"""What every subcommand's ``--help`` ends with: one or two examples (``EXAMPLES``), and the
formatter that keeps their lines as written while it wraps the prose (``Formatter``). The man page
(vmtune/cli/manual.py) shows the same examples.

An example that uses a file of ``examples/`` names it ``{examples}/FILE``: ``--help`` fills in the
checkout's ``examples/`` when vmtune runs from a checkout, else ``SHIPPED``, where the Debian package
installs them (debian/vmtune.examples); the man page, which only the package installs, ``SHIPPED``.
"""

from __future__ import annotations

import argparse
import os
import textwrap

SHIPPED = "/usr/share/doc/vmtune/examples"

EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "rewrite": (("vmtune rewrite {examples}/stock-latency.xml --explain", "what would change for this host, and why"),
                ("vmtune rewrite dom.xml --profile latency -i", "tune dom.xml in place with the latency profile")),
    "untune": (("vmtune untune dom.xml --diff", "what vmtune changed in dom.xml, put back"),),
    "topology": (("vmtune topology", "this machine's NUMA nodes, their CPUs and the reserved CPUs"),
                 ("vmtune topology --host caps.xml --json", "the host of `virsh capabilities` output")),
    "profiles": (("vmtune profiles", "the built-in and your own profiles"),),
    "hook": (("vmtune hook install", "install the hook and the reaper's timer; then restart libvirtd"),
             ("vmtune hook restore", "release every lease and give the host back what it had")),
    "tag": (("vmtune tag db1 --profile latency", "the hook tunes the host for db1 from its next start"),),
    "untag": (("vmtune untag db1 --dry-run", "what db1's tag says; nothing removed"),),
    "apply": (("vmtune apply --all --dry-run", "the diff of every domain, placed together; nothing defined"),
              ("vmtune apply db1 --live", "define db1 tuned and move its running vCPUs now")),
    "revert": (("vmtune revert db1", "define db1's XML from before vmtune's first apply"),),
    "plan": (("vmtune plan", "every domain of this host, its pins and nodes, and every problem"),
             ("vmtune plan --json | jq .problems", "the problems only")),
    "doctor": (("vmtune doctor", "every check of this host, one line each"),
               ("vmtune doctor --json --census-seconds 0", "as JSON, without the 2 s interrupt census")),
    "map": (("vmtune map", "who holds which CPU of this host, and what is isolated"),
            ("vmtune map --svg host.svg", "the same picture as an SVG file")),
    "status": (("vmtune status", "the hook, the leases held, the CPUs isolated, the host before, the log"),
               ("vmtune status --json | jq .leases", "the leases only")),
    "verify": (("vmtune verify --cpus 2-3", "oslat on CPUs 2 and 3 for 10 s under a lease of its own: the gaps, "
                                             "what ran there, a verdict"),
               ("vmtune verify --cpus 2-3 --as-is", "the same, the CPUs as they are"),
               ("vmtune verify --cpus 1 --seconds 60 --as-is --max-us 40 --json", "a minute, a 40 µs mark, as JSON")),
}


def examples_dir() -> str:
    """The checkout's ``examples/`` when vmtune runs from a checkout, else ``SHIPPED``."""
    checkout = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")
    return checkout if os.path.isdir(checkout) else SHIPPED


def examples(command: str, where: str | None = None) -> tuple[tuple[str, str], ...]:
    """The command's examples (line, what it does), their files in ``where`` (else ``examples_dir()``)."""
    where = where or examples_dir()
    return tuple((line.replace("{examples}", where), what) for line, what in EXAMPLES[command])


def epilog(command: str) -> str:
    """``examples:`` and the command's examples, one per line with what it does."""
    return "examples:\n" + "".join(f"  {line}\n      {what}\n" for line, what in examples(command))


class Formatter(argparse.HelpFormatter):
    """argparse's formatter, but lines that start with two spaces are kept as written (the examples);
    every other paragraph is wrapped as usual."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for para in text.split("\n"):
            if para.startswith("  ") or not para.strip():
                out.append(indent + para)
            else:
                out.append(textwrap.fill(" ".join(para.split()), width, initial_indent=indent,
                                         subsequent_indent=indent))
        return "\n".join(out)


def decorate(sub: argparse._SubParsersAction) -> None:
    """Give every subcommand of ``sub`` its examples and the formatter; one without examples is a bug
    (tests/test_manual.py)."""
    for name, parser in sub.choices.items():
        parser.formatter_class = Formatter
        parser.epilog = epilog(name)
