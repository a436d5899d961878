"""The commands over a live libvirt: tag, untag, apply, revert, plan (a thin adapter).

``add_parsers(sub)`` adds the subcommands; ``COMMANDS`` maps each name to ``cmd(args, cfg, roots) -> int``.
The work is in vmtune/live/ and vmtune/placement/audit.py. ``plan`` and ``apply`` take the host of the URI as every
live command does (vmtune/live/hostview.py ``of``: this machine's sysfs, ``VMTUNE_SYSFS``, for its system
daemon; the host libvirt describes for any other URI; ``--json`` says which, as ``host``); tag, untag and
revert use no host. Exit codes as in vmtune/cli/__init__.py: 0 done; 1 invalid input (an unknown domain,
libvirt refusing an XML) or, for ``plan``, a problem found; 2 usage; 3 a domain does not fit; 4
libvirt-python is missing (the message says how to get it) or libvirt cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import format as fmt
from .offline import add_nodedev_arg


def _common(p: argparse.ArgumentParser) -> None:
    from ..live.connect import DEFAULT_URI

    p.add_argument("-c", "--connect", metavar="URI", default=DEFAULT_URI, help=f"libvirt URI (default {DEFAULT_URI})")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--config", metavar="FILE", help="host configuration (default /etc/vmtune/vmtune.toml)")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    tag = sub.add_parser("tag", help="tag a libvirt domain with a profile (its metadata only)",
                         description="Write the vmtune tag into a domain's persistent definition; nothing else changes.")
    tag.add_argument("name", metavar="NAME", help="domain name")
    tag.add_argument("--profile", metavar="P", required=True, help="profile name (vmtune profiles lists them)")
    _common(tag)

    untag = sub.add_parser("untag", help="remove the vmtune tag from a libvirt domain",
                           description="Remove the vmtune tag from a domain's persistent definition; nothing else changes.")
    untag.add_argument("name", metavar="NAME", help="domain name")
    untag.add_argument("--dry-run", action="store_true", help="say what the tag is; remove nothing")
    _common(untag)

    ap = sub.add_parser("apply", help="tune libvirt domains in place (define the rewritten XML)",
                        description="Rewrite each domain's persistent XML for this host and define it. "
                                    "The first apply keeps the XML it replaced for vmtune revert.")
    ap.add_argument("names", metavar="NAME", nargs="*", help="domain names")
    ap.add_argument("--all", action="store_true", help="every defined domain (latency ones placed first)")
    ap.add_argument("--match", metavar="GLOB", action="append", default=[],
                    help="with --all: only domains whose name matches GLOB (repeatable); the others stay claims")
    ap.add_argument("--profile", metavar="P", help="profile for every domain (default: each one's tag, else balanced)")
    ap.add_argument("--live", action="store_true",
                    help="also move running domains' vCPUs, emulator and iothreads onto the new pins now")
    ap.add_argument("--dry-run", action="store_true", help="print the diff per domain; define nothing")
    ap.add_argument("--force-virtio", action="store_true",
                    help="the guest has virtio drivers: its disks and NICs move to virtio whatever its OS "
                         "(Windows, unknown), the boot disk too unless boot_disk = 'keep'")
    _common(ap)
    ap.set_defaults(usage_error=ap.error)

    rv = sub.add_parser("revert", help="define a domain's XML from before vmtune's first apply",
                        description="Define again the XML the domain had before vmtune's first apply.")
    rv.add_argument("name", metavar="NAME", help="domain name")
    rv.add_argument("--dry-run", action="store_true",
                    help="say whether there is an original to define (--json: both XMLs); define nothing")
    _common(rv)

    plan = sub.add_parser("plan", help="every domain of the host, and what is wrong (exit 1 if anything)",
                          description="One table for the whole host: domains, their pins, nodes and hugepages, "
                                      "what is left per node, and every problem. Exit 1 when there is a problem.")
    _common(plan)
    add_nodedev_arg(plan)


def _host(conn, args, roots):
    """The host of ``--connect`` (``hostview.of``, the one rule), with the ``--nodedev`` files."""
    from ..live import hostview

    return hostview.of(conn, args.connect, sysfs=roots.sysfs, proc=roots.proc, nodedev=getattr(args, "nodedev", ()))


# -- tag, untag -----------------------------------------------------------------------------------------
def cmd_tag(args, cfg, roots) -> int:
    from ..live import connect, domains, tagging

    with connect.connection(args.connect) as conn:
        dom = domains.lookup(conn, args.name, args.connect)
        before = tagging.tag(dom, args.profile, cfg)
        name, uuid = dom.name(), dom.UUIDString()
    if args.json:
        print(json.dumps({"name": name, "uuid": uuid, "profile": args.profile, "previous": before}, indent=2))
    elif before == args.profile:
        print(f"{name}: already tagged {args.profile}")
    else:
        print(f"{name}: tagged {args.profile}" + (f" (was {before})" if before else ""))
    return 0


def cmd_untag(args, cfg, roots) -> int:
    from ..live import connect, domains, tagging

    with connect.connection(args.connect) as conn:
        dom = domains.lookup(conn, args.name, args.connect)
        before = tagging.current(dom) if args.dry_run else tagging.untag(dom)
        name, uuid = dom.name(), dom.UUIDString()
    if args.json:
        print(json.dumps({"name": name, "uuid": uuid, "previous": before, "dry_run": args.dry_run}, indent=2))
    elif args.dry_run:
        print(f"{name}: tagged {before}; dry run, nothing removed" if before else f"{name}: not tagged")
    else:
        print(f"{name}: untagged (was {before})" if before else f"{name}: was not tagged")
    return 0


# -- apply, revert --------------------------------------------------------------------------------------
def cmd_apply(args, cfg, roots) -> int:
    from ..live import apply as apply_mod
    from ..live import connect
    from ..live.originals import Originals

    if args.all and args.names:
        args.usage_error("name domains or give --all, not both")
    if not args.all and not args.names:
        args.usage_error("name at least one domain, or give --all")
    if args.match and not args.all:
        args.usage_error("--match goes with --all")
    with connect.connection(args.connect) as conn:
        seen = _host(conn, args, roots)
        outcomes = apply_mod.apply(
            conn, args.connect, None if args.all else args.names, match=args.match, profile=args.profile,
            live=args.live, dry_run=args.dry_run, config=cfg, force_virtio=args.force_virtio,
            originals=Originals(roots.originals), seen=seen)
    if args.json:
        print(json.dumps({"dry_run": args.dry_run, "domains": [_apply_row(o, args.dry_run) for o in outcomes],
                          "host": seen.to_dict()}, indent=2))
        return 0
    for o in outcomes:
        _print_outcome(o, args.dry_run)
    return 0


def _apply_row(o, dry_run: bool) -> dict:
    row = o.to_dict()
    # both XMLs, for orchestration code that shows its own diff (the Ansible collection)
    row["before"] = _libvirt_xml(o) if o.step.result else None
    row["xml"] = o.step.result.xml if o.step.result else None
    if dry_run:
        row["diff"] = _diff(o) if o.step.changed else ""
    return row


def _print_outcome(o, dry_run: bool) -> None:
    step = o.step
    for warning in step.result.warnings if step.result else ():
        print(f"vmtune: warning: {o.name}: {warning}", file=sys.stderr)
    if step.error is not None:
        print(f"{o.name}: skipped: {step.error}")
    elif dry_run:
        if step.changed:
            sys.stdout.write(_diff(o))
        print(f"{o.name}: {step.profile}: {_count(step)}; dry run, nothing defined", file=sys.stderr)
    else:
        what = f"{_count(step)}, defined" if o.defined else "unchanged"
        print(f"{o.name}: {step.profile}: {what}")
    if o.live:
        vcpus = " ".join(f"{v}->{c}" for v, c in o.live["vcpus"].items())
        iothreads = " ".join(f"{i}->{c}" for i, c in o.live["iothreads"].items())
        print(f"{o.name}: live: vCPUs {vcpus or '-'}; emulator {o.live['emulator']}; iothreads {iothreads or '-'}")
    for note in o.notes:
        print(f"{o.name}: {o.state}: {note}")


def _count(step) -> str:
    n = len(step.result.changes)
    return f"{n} change{'s' if n != 1 else ''}"


def _libvirt_xml(o) -> str:
    """libvirt's XML, as libvirt wrote it: the rewrite keeps every byte it did not change, so that a
    diff of the two shows only what changed."""
    return o.before


def _diff(o) -> str:
    return fmt.diff(_libvirt_xml(o), o.step.result.xml, f"{o.name} (libvirt)", f"{o.name} (vmtune {o.step.profile})")


def cmd_revert(args, cfg, roots) -> int:
    from ..live import apply as apply_mod
    from ..live import connect
    from ..live.originals import Originals

    originals = Originals(roots.originals)
    with connect.connection(args.connect) as conn:
        if args.dry_run:
            return _revert_dry_run(args, apply_mod.original_of(conn, args.connect, args.name, originals))
        done = apply_mod.revert(conn, args.connect, args.name, originals)
    if args.json:
        print(json.dumps(done.to_dict(), indent=2))
        return 0
    print(f"{done.name}: reverted to the XML it had before vmtune's first apply")
    if done.state != "shut off":
        print(f"{done.name}: {done.state}: the definition takes effect at the next boot")
    return 0


def _revert_dry_run(args, found) -> int:
    if args.json:
        print(json.dumps({**found.to_dict(), "dry_run": True}, indent=2))
    elif found.original is None:
        print(f"{found.name}: no original XML (vmtune apply never changed it, or it was reverted already)")
    else:
        print(f"{found.name}: would define the XML it had before vmtune's first apply; dry run, nothing defined")
    return 0


# -- plan -----------------------------------------------------------------------------------------------
def cmd_plan(args, cfg, roots) -> int:
    from ..placement.audit import audit, with_live_drift
    from ..live import connect, domains

    with connect.connection(args.connect) as conn:
        seen = _host(conn, args, roots)
        every = domains.every(conn)
    host = seen.host
    report = with_live_drift(audit(host, [(d.xml, d.state) for d in every], config=cfg), host, every)
    if args.json:
        print(json.dumps({**report.to_dict(), "uri": args.connect, "host": seen.to_dict()}, indent=2))
    else:
        print("\n".join(fmt.plan(report)))
    return 0 if report.ok else 1


COMMANDS = {"tag": cmd_tag, "untag": cmd_untag, "apply": cmd_apply, "revert": cmd_revert, "plan": cmd_plan}
