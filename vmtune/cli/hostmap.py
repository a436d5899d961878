"""``vmtune map``: the picture of the host (a thin adapter over vmtune/hostmap/).

Live (the default): the host of the URI (vmtune/live/hostview.py ``of``, the rule every live command
uses: this machine's sysfs for its system daemon, with the hook's leases and isolation; the host
libvirt describes for any other URI), and every domain libvirt has (running and defined). Offline,
with ``--host CAPS.xml`` and/or
``--claim DOM.xml``: the same inputs as ``rewrite``, so a plan can be looked at before it is
applied. Exit codes as ``rewrite``'s (vmtune/cli/__init__.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..xml import xmlsafe
from ..atomic import write_atomic
from ..errors import Unavailable
from .offline import add_nodedev_arg, host_of


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("map", help="a picture of the host: who holds which CPU, what is isolated, pages per node",
                       description="Draw the host's NUMA nodes, cores and threads with the domains on them. "
                                   "Live by default; offline with --host and --claim, as rewrite takes them.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--host", metavar="CAPS.xml", help="offline: host topology from `virsh capabilities` output")
    src.add_argument("--sysfs", metavar="DIR", help="host topology from a sysfs tree (default: this machine)")
    p.add_argument("--claim", metavar="DOM.xml", action="append", default=[],
                   help="offline: a domain on the host (repeatable), as rewrite --claim takes it")
    add_nodedev_arg(p)
    p.add_argument("--config", metavar="FILE", help="host configuration (default /etc/vmtune/vmtune.toml)")
    p.add_argument("-c", "--connect", metavar="URI", default=None, help="live: libvirt URI (default qemu:///system)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the map's model as JSON (schemas/map.schema.json)")
    out.add_argument("--svg", metavar="FILE", help="write the picture as a standalone SVG to FILE (- for stdout)")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour the terminal view (auto: on a terminal, unless NO_COLOR is set)")
    p.set_defaults(usage_error=p.error)


def _live(uri: str | None, sysfs: str, proc: str | None, nodedev: list[str], cfg, roots):
    """The live map of ``uri``'s host (``hostview.of``) with its domains. This machine's system
    daemon's host is drawn without its domains when libvirt cannot be reached (one warning);
    another daemon's host is libvirt's: unreachable, it is one line, exit 4."""
    from ..hostmap import build, live
    from ..live import connect, domains, hostview

    uri = uri or connect.DEFAULT_URI
    notes: list[str] = []
    try:
        with connect.connection(uri, read_only=True) as conn:
            seen = hostview.of(conn, uri, sysfs=sysfs, proc=proc, nodedev=nodedev)
            found = [(d.live_xml or d.xml, d.state) for d in domains.every(conn)]
    except Unavailable as exc:
        if not hostview.local_system(uri):
            raise
        seen = hostview.of(None, uri, sysfs=sysfs, proc=proc, nodedev=nodedev)
        found, notes = [], [f"{exc}: the map shows the host without domains"]
    return build.build(seen.host, found, config=cfg, mode="live", hook=live.hook_view(roots) if seen.local else None,
                       page_totals=seen.page_totals, warnings=notes)


def use_color(choice: str) -> bool:
    """``--color``: auto is on a terminal, unless NO_COLOR is set (or TERM is dumb)."""
    if choice != "auto":
        return choice == "always"
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def cmd_map(args, cfg, roots) -> int:
    from ..hostmap import build, svg, text

    if args.svg == "":
        args.usage_error("--svg needs a file name, or - for stdout")
    if args.connect and (args.host or args.claim):
        args.usage_error("--connect reads a live host; --host and --claim draw one offline: give one or the other")
    if args.host or args.claim:
        host = host_of(args, roots.sysfs, cfg)
        found = [(xmlsafe.read(path, "claimed domain XML"), "claim") for path in args.claim]
        hostmap = build.build(host, found, config=cfg)
    else:
        from ..live import hostview

        if args.sysfs and not hostview.local_system(args.connect):
            args.usage_error("--connect to another daemon draws its host from libvirt; --sysfs is this machine's")
        hostmap = _live(args.connect, args.sysfs or roots.sysfs, None if args.sysfs else roots.proc, args.nodedev,
                        cfg, roots)
    if args.json:
        print(json.dumps(hostmap.to_dict(), indent=2))
    elif args.svg == "-":
        sys.stdout.write(svg.render(hostmap))
    elif args.svg:
        write_atomic(args.svg, svg.render(hostmap))
    else:
        print("\n".join(text.render(hostmap, color=use_color(args.color))))
    return 0


COMMANDS = {"map": cmd_map}
