"""`vmtune doctor`: what is wrong with this host, before anyone tunes anything (a thin adapter).

``add_parsers(sub)`` adds the subcommands; ``COMMANDS`` maps each name to ``cmd(args, cfg, roots) -> int``.
Exit 0 when nothing FAILs, 1 when something does (or the input is bad: one ``vmtune: error:`` line);
4 when ``--prometheus`` is asked for and prometheus_client is not installed.
"""

from __future__ import annotations

import argparse
import json

from .argtypes import bounded


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor", help="find what is wrong with this host (read-only)",
        description="Check the host's CPU frequency, C-states, memory, virtualization, other tuners, "
                    "vmtune's own state and its domains; one line per finding. Exit 1 when anything FAILs. "
                    "Give --sysfs/--proc/--root for a captured tree: the parts not given are not read.")
    p.add_argument("--sysfs", metavar="DIR", help="sysfs tree (default /sys)")
    p.add_argument("--proc", metavar="DIR", help="proc tree (default /proc)")
    p.add_argument("--root", metavar="DIR", help="the tree holding dev/, run/ and etc/ (default /)")
    p.add_argument("--connect", metavar="URI",
                   help="read the domains from libvirt and judge them against its host (default: "
                        "/run/libvirt/qemu status files); a URI other than this machine's system daemon "
                        "reads no tree of this machine unless --sysfs/--proc/--root give that host's")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.add_argument("--no-measure", action="store_true",
                   help="skip the busy-loop clock measurement (0.2 s per core, this machine only)")
    p.add_argument("--census-seconds", metavar="S", type=bounded(float, 0, 60, "seconds"), default=None,
                   help="how long to sample what interrupts the CPUs running latency domains hold "
                        "(default 2 on this machine; 0: no census)")
    p.add_argument("--prometheus", metavar="FILE",
                   help="also write the findings and the host's state as node_exporter textfile metrics "
                        "(atomically; needs prometheus_client: pip install vmtune[prometheus])")
    p.add_argument("--config", metavar="FILE", help="host configuration (default /etc/vmtune/vmtune.toml)")


def cmd_doctor(args, cfg, roots) -> int:
    from ..doctor import diagnose, trees
    from ..oneline import escape

    if args.prometheus:
        from ..doctor import prometheus

        prometheus.require()  # before the checks: a missing module is one line, not a wasted run
    report = diagnose(trees(args.connect, args.sysfs, args.proc, args.root, roots), measure=not args.no_measure,
                      census_seconds=args.census_seconds, connect=args.connect, config=cfg)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        for finding in report.findings:
            print(escape(finding.line()))  # names of domains and leases are their own: one line each
        counts = ", ".join(f"{n} {level}" for level, n in report.counts().items())
        print(f"doctor: {counts}" + ("  (exit 1: something FAILs)" if report.failed else ""))
    if args.prometheus:
        prometheus.write(report, args.prometheus)
    return 1 if report.failed else 0


COMMANDS: dict = {"doctor": cmd_doctor}
