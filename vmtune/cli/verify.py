"""``vmtune verify``: oslat on the CPUs meant for latency domains, with what ran there and a verdict
(a thin adapter over vmtune/doctor/verify.py).

Exit 0 when every CPU's largest gap is within ``--max-us``, 1 when one is not, 2 for a usage error,
4 when oslat is not installed (one line naming the package).
"""

from __future__ import annotations

import argparse
import contextlib
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
                                   "them as they are. For a running latency DOMAIN, whose vCPUs run on its CPUs, "
                                   "it reports what else ran there, and passes when nothing that could run "
                                   "elsewhere did. Needs root.")
    p.add_argument("domains", metavar="DOMAIN", nargs="*",
                   help="a running latency domain: what else ran on its CPUs (its vCPUs run there, so no probe)")
    p.add_argument("--cpus", metavar="LIST", help="the host CPUs to measure (a libvirt cpulist): CPUs no running "
                                                  "domain holds")
    p.add_argument("--seconds", metavar="N", type=bounded(int, 1, 3600, "seconds"), default=DEFAULT_SECONDS,
                   help=f"how long oslat runs (default {DEFAULT_SECONDS})")
    p.add_argument("--as-is", action="store_true", help="measure the CPUs as they are, nothing changed")
    p.add_argument("--profile", metavar="P", default="latency",
                   help="the profile of verify's own lease (default latency): the power its CPUs get")
    p.add_argument("--max-us", metavar="N", type=bounded(int, 1, 10_000_000, "max-us"), default=DEFAULT_MAX_US,
                   help=f"the largest gap that passes, in µs (default {DEFAULT_MAX_US})")
    p.add_argument("--load", action="store_true",
                   help="a busy process on each of the other CPUs meanwhile (the host's own work at its worst)")
    p.add_argument("-c", "--connect", metavar="URI", default=None,
                   help="libvirt URI of a DOMAIN that does not run (default qemu:///system)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--prometheus", metavar="FILE",
                   help="also write the result as node_exporter textfile metrics to FILE (atomically; needs "
                        "prometheus_client: pip install vmtune[prometheus])")
    p.add_argument("--config", metavar="FILE", help="host configuration (default /etc/vmtune/vmtune.toml)")


def cmd_verify(args, cfg, roots) -> int:
    from .. import cpuset
    from ..atomic import write_atomic
    from ..doctor.findings import Context
    from ..doctor.verify import lease_of, prometheus_text, running
    from ..errors import UsageError

    if bool(args.domains) == bool(args.cpus):
        raise UsageError("verify: give either running domains or --cpus (see vmtune verify --help)")
    ctx = Context(roots, cfg)
    if args.domains:
        if args.load or args.as_is or args.prometheus:
            raise UsageError("verify: --load, --as-is and --prometheus go with --cpus (a running domain's CPUs "
                             "are measured as they are, by the census alone)")
        found = [running(ctx, name, args.seconds) if lease_of(ctx, name) else _defined(ctx, name, args)
                 for name in args.domains]
        if args.json:
            print(json.dumps({"domains": [v.to_dict() for v in found], "pass": all(v.passed for v in found)},
                             indent=2))
        else:
            print("\n".join(line for v in found for line in v.lines()))
        return 0 if all(v.passed for v in found) else 1
    cpus = cpuset.parse(args.cpus)
    if not cpus:
        raise UsageError("verify: --cpus names no CPU")
    done = _measured(ctx, cpus, args, args.profile, args.as_is, args.load)
    if args.prometheus:
        write_atomic(args.prometheus, prometheus_text(done), mode=0o644)
    if args.json:
        print(json.dumps(done.to_dict(), indent=2))
    else:
        print("\n".join(done.lines()))
    return 0 if done.passed else 1


def _measured(ctx, cpus, args, profile: str, as_is: bool, load_others: bool):
    """oslat on ``cpus``: under a lease of ``profile`` unless ``as_is``, beside a load on the other
    CPUs with ``load_others``. oslat (and prometheus_client, when asked for) are looked for before
    any lease: without them, nothing is changed."""
    from ..doctor import oslat, prometheus
    from ..doctor.verify import check, held, load, measure

    check(ctx, cpus)
    tool = oslat.find()
    if args.prometheus:
        prometheus.require()
    with contextlib.ExitStack() as stack:
        if not as_is:
            stack.enter_context(held(ctx, cpus, profile))
        if load_others:
            stack.enter_context(load(ctx, cpus))
        return measure(ctx, cpus, args.seconds, args.max_us, tool=tool, as_is=as_is)


def _defined(ctx, name: str, args):
    """A domain libvirt knows that does not run: its pinned CPUs measured by oslat under a lease of
    its profile, as its start would take them."""
    from ..doctor.verify import defined_pins
    from ..errors import InvalidInput
    from ..live import connect, domains

    uri = args.connect or connect.DEFAULT_URI
    with connect.connection(uri, read_only=True) as conn:
        found = domains.read(domains.lookup(conn, name, uri))
    if found.state != "shut off":
        raise InvalidInput(f"verify: {name} is {found.state} but holds no lease of the hook: not tagged with a latency "
                           "profile (vmtune tag NAME --profile latency), or the hook is not installed")
    pins, profile = defined_pins(found.xml)
    if not pins:
        raise InvalidInput(f"verify: {name} pins no vCPU to host CPUs: nothing to verify (vmtune apply pins it)")
    done = _measured(ctx, pins, args, profile or "latency", as_is=False, load_others=False)
    done.pinned_by = name
    return done


COMMANDS: dict = {"verify": cmd_verify}
