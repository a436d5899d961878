"""``vmtune status``: what the hook is doing right now (a thin adapter over vmtune/install/status.py).

Exit 0; 1 when the hook's state cannot be read (the hook refuses latency domains until it can).
"""

from __future__ import annotations

import argparse
import json

from .argtypes import bounded

def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="what the hook is doing now: leases, isolated CPUs, the host before (read-only)",
                       description="The libvirt hook installed or not (and for which libvirt), the leases held "
                                   "with their domains and since when, the CPUs isolated and how, what the host "
                                   "was before, the reaper, and the hook's last log lines. Read-only; reads the "
                                   "hooks dir's vmtune.env as the hook does.")
    p.add_argument("--hooks-dir", metavar="DIR", help="libvirt's hooks directory (default /etc/libvirt/hooks)")
    p.add_argument("-n", "--lines", metavar="N", type=bounded(int, 0, 1000, "lines"), default=5,
                   help="how many of the hook's last log lines to show (default 5; 0: none)")
    p.add_argument("--json", action="store_true", help="print it as JSON")
    p.add_argument("--config", metavar="FILE", help="host configuration (default /etc/vmtune/vmtune.toml)")


def cmd_status(args, cfg, roots) -> int:
    from ..oneline import escape
    from ..install.status import status

    now = status(cfg, roots, args.hooks_dir, args.lines)
    if args.json:
        print(json.dumps(now.to_dict(), indent=2))
    else:
        print("\n".join(escape(line) for line in now.lines()))  # domain names are their own: one line each
    return 1 if now.state_error else 0


COMMANDS: dict = {"status": cmd_status}
