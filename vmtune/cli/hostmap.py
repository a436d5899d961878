"""``vmtune map``: the picture of the host (a thin adapter over vmtune/hostmap/).

Live (the default): the topology and hugepage pools from sysfs, every domain libvirt has (running
and defined), and the hook's leases and isolation. Offline, with ``--host CAPS.xml`` and/or
``--claim DOM.xml``: the same inputs as ``rewrite``, so a plan can be looked at before it is
applied. Exit codes as ``rewrite``'s (vmtune/cli/__init__.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .. import xmlsafe
from ..atomic import write_atomic
from ..errors import Unavailable
from ..host import Host
from .offline import add_nodedev_arg, host_of, with_nodedevs


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


def _domains(uri: str | None) -> tuple[list[tuple[str, str]], list[str]]:
    """Every domain libvirt has, as (XML, state): the live XML of a running one; or none and why."""
    from ..live import connect, domains

    try:
        with connect.connection(uri or connect.DEFAULT_URI, read_only=True) as conn:
            every = domains.every(conn)
    except Unavailable as exc:
        return [], [f"{exc}: the map shows the host without domains"]
    return [(d.live_xml or d.xml, d.state) for d in every], []


def local_system(uri: str) -> bool:
    """Whether ``uri`` is this machine's system QEMU daemon, whose host is this machine's sysfs (any
    other URI's host is the one libvirt describes: one host per URI)."""
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    return parts.scheme in ("qemu", "qemu+unix") and parts.hostname in (None, "", "localhost") and parts.path == "/system"


def _connected(uri: str, nodedev: list[str], cfg):
    """The map of the host behind ``uri``: its topology, free hugepages and node devices from
    libvirt (live/hostview.py), and its domains. Unreachable: one line, exit 4."""
    from ..hostmap import build
    from ..live import connect, domains, hostview

    with connect.connection(uri, read_only=True) as conn:
        pools = Host.from_capabilities(conn.getCapabilities())
        host = hostview.host(conn)
        every = domains.every(conn)
    totals = {(cell.id, size): n for cell in pools.cells for size, n in cell.pages.items()}
    return build.build(with_nodedevs(host, nodedev), [(d.live_xml or d.xml, d.state) for d in every], config=cfg,
                       mode="live", page_totals=totals)


def use_color(choice: str) -> bool:
    """``--color``: auto is on a terminal, unless NO_COLOR is set (or TERM is dumb)."""
    if choice != "auto":
        return choice == "always"
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def cmd_map(args, cfg, roots) -> int:
    from ..hostmap import build, live, svg, text

    if args.svg == "":
        args.usage_error("--svg needs a file name, or - for stdout")
    if args.connect and (args.host or args.claim):
        args.usage_error("--connect reads a live host; --host and --claim draw one offline: give one or the other")
    if args.host or args.claim:
        host = host_of(args, roots.sysfs, cfg)
        found = [(xmlsafe.read(path, "claimed domain XML"), "claim") for path in args.claim]
        hostmap = build.build(host, found, config=cfg)
    elif args.connect and not local_system(args.connect):
        if args.sysfs:
            args.usage_error("--connect to another daemon draws its host from libvirt; --sysfs is this machine's")
        hostmap = _connected(args.connect, args.nodedev, cfg)
    else:
        sysfs = args.sysfs or roots.sysfs
        host = Host.from_sysfs(sysfs)
        host.devices.check()
        host = with_nodedevs(host, args.nodedev)
        found, notes = _domains(args.connect)
        hostmap = build.build(host, found, config=cfg, mode="live", hook=live.hook_view(roots),
                              page_totals=live.page_totals(sysfs), warnings=notes)
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
