"""``vmtune verify``: oslat on the CPUs meant for latency domains, with what ran there and a verdict
(a thin adapter over vmtune/doctor/verify.py).

Exit 0 when every CPU's largest gap is within ``--max-us``, 1 when one is not, 2 for a usage error,
4 when oslat is not installed (one line naming the package).
"""

from __future__ import annotations

import argparse
import json

from .argtypes import bounded


def add_parsers(sub: argparse._SubParsersAction) -> None:
    from ..doctor.verify import DEFAULT_MAX_US, DEFAULT_SECONDS

    p = sub.add_parser("verify", help="measure whether CPUs meant for latency domains are quiet (oslat), and what "
                                      "ran there",
                       description="Runs oslat (rt-tests) on each of --cpus for --seconds and reads the interrupts, "
                                   "softirqs and host threads that ran there meanwhile; prints per CPU the largest "
                                   "gap, the 99th and 99.9th percentiles, the stalls of 10, 100 and 1,000 µs or "
                                   "more and their sources, and a verdict against --max-us (default "
                                   f"{DEFAULT_MAX_US} µs: Red Hat's oslat mark for real-time virtualization). "
                                   "Without --as-is, verify first takes a lease of its own for the CPUs, as a "
                                   "latency domain's start would (the host's work kept off them, pinned tasks too; "
                                   "power as --profile says), and releases it however it ends; --as-is measures "
                                   "them as they are. Needs root.")
    p.add_argument("--cpus", metavar="LIST", required=True, help="the host CPUs to measure (a libvirt cpulist)")
    p.add_argument("--seconds", metavar="N", type=bounded(int, 1, 3600, "seconds"), default=DEFAULT_SECONDS,
                   help=f"how long oslat runs (default {DEFAULT_SECONDS})")
    p.add_argument("--as-is", action="store_true", help="measure the CPUs as they are, nothing changed")
    p.add_argument("--profile", metavar="P", default="latency",
                   help="the profile of verify's own lease (default latency): the power its CPUs get")
    p.add_argument("--max-us", metavar="N", type=bounded(int, 1, 10_000_000, "max-us"), default=DEFAULT_MAX_US,
                   help=f"the largest gap that passes, in µs (default {DEFAULT_MAX_US})")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--config", metavar="FILE", help="host configuration (default /etc/vmtune/vmtune.toml)")


def cmd_verify(args, cfg, roots) -> int:
    from .. import cpuset
    from ..doctor.findings import Context
    from ..doctor import oslat
    from ..doctor.verify import check, held, measure

    cpus = cpuset.parse(args.cpus)
    if not cpus:
        from ..errors import UsageError
        raise UsageError("verify: --cpus names no CPU")
    ctx = Context(roots, cfg)
    check(ctx, cpus)
    tool = oslat.find()  # before any lease: without oslat, nothing is changed
    if args.as_is:
        done = measure(ctx, cpus, args.seconds, args.max_us, tool=tool)
    else:
        with held(ctx, cpus, args.profile):
            done = measure(ctx, cpus, args.seconds, args.max_us, tool=tool, as_is=False)
    if args.json:
        print(json.dumps(done.to_dict(), indent=2))
    else:
        print("\n".join(done.lines()))
    return 0 if done.passed else 1


COMMANDS: dict = {"verify": cmd_verify}
