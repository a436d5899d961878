"""The commands that need no libvirt: rewrite, untune, topology, profiles, hook install|uninstall|reap.

``add_parsers(sub)`` adds the subcommands; ``COMMANDS`` maps each name to ``cmd(args, cfg, roots) -> int``.
Exit codes as in vmtune/cli/__init__.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .. import cpuset, profiles
from ..xml import xmlsafe
from ..atomic import write_atomic
from ..driver import rewrite
from ..errors import InvalidInput, UsageError
from ..oneline import escape
from ..host import Host
from . import format as fmt


def host_of(args, sysfs: str | None = None, cfg=None) -> Host:
    """The host of ``--host CAPS.xml`` or ``--sysfs DIR`` (else ``sysfs``, else this machine), with
    the devices of ``--nodedev FILE``s first. ``cfg``: its ``reserved_cpus`` must be CPUs of it."""
    if getattr(args, "host", None):
        host = Host.from_capabilities(xmlsafe.read(args.host, "capabilities XML"))
    else:
        host = Host.from_sysfs(getattr(args, "sysfs", None) or sysfs or "/sys")
        host.devices.check()  # a numa_node naming a node the host lacks is refused, used or not
    if cfg is not None:
        check_reserved(cfg, host)
        if cfg.efficiency_cpus and not host.hybrid:
            host = host.with_efficiency(cfg.efficiency_cpus)
    return with_nodedevs(host, getattr(args, "nodedev", None))


def check_reserved(cfg, host: Host) -> None:
    """One line when the config's ``reserved_cpus`` names CPUs this host does not have (issue 27:
    "0-40" on a 2-CPU host was taken silently, as its CPUs 0-1)."""
    given = cfg.reserved_cpus
    missing = frozenset(given or ()) - frozenset(host.cpus)
    if missing:
        where = f"{cfg.source}: " if cfg.source else ""
        raise InvalidInput(f"{where}reserved_cpus {cpuset.format(given)} names CPUs this host does not have "
                           f"({cpuset.format(missing)}; it has {cpuset.format(frozenset(host.cpus))})")


def with_nodedevs(host: Host, paths: list[str] | None) -> Host:
    """``host`` with the node devices of ``paths`` (``--nodedev``) found first."""
    if not paths:
        return host
    from ..host import nodedev

    return host.with_devices(nodedev.load(paths, frozenset(host.node_ids)))


def add_nodedev_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodedev", metavar="FILE", action="append", default=[],
                   help="where a device hangs: the output of `virsh nodedev-dumpxml` for a PCI device, NIC or disk "
                        "the domains use (repeatable; found before the host's own)")


def _add_host_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--host", metavar="CAPS.xml", help="host topology from `virsh capabilities` output")
    g.add_argument("--sysfs", metavar="DIR", help="host topology from a sysfs tree (default: this machine)")
    add_nodedev_arg(p)
    p.add_argument("--config", metavar="FILE", help="host configuration (default /etc/vmtune/vmtune.toml)")


def _add_domain_args(p: argparse.ArgumentParser) -> None:
    """DOMAIN.xml, and where the result goes (rewrite, untune)."""
    p.add_argument("domain", metavar="DOMAIN.xml", help="domain XML file, or - for stdin")
    out = p.add_mutually_exclusive_group()
    out.add_argument("-o", "--output", metavar="OUT", help="write the result to OUT (atomically)")
    out.add_argument("-i", "--in-place", action="store_true", help="replace DOMAIN.xml (atomically)")


def _add_show_args(p: argparse.ArgumentParser, explain: bool) -> None:
    """What is printed of the result (rewrite, untune)."""
    show = p.add_mutually_exclusive_group()
    show.add_argument("--diff", action="store_true", help="print a unified diff")
    if explain:
        show.add_argument("--explain", action="store_true", help="print one line per change with its reason")
    show.add_argument("--json", action="store_true", help="print the result as JSON")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    rw = sub.add_parser("rewrite", help="tune a domain XML for this host",
                        description="Rewrite a libvirt domain XML for the host's topology.")
    _add_domain_args(rw)
    _add_host_args(rw)
    rw.add_argument("--profile", metavar="NAME", help="profile (default: the domain's tag, else balanced)")
    rw.add_argument("--claim", metavar="OTHER.xml", action="append", default=[],
                    help="another domain on this host whose CPUs, memory and hugepages are taken (repeatable)")
    _add_show_args(rw, explain=True)
    rw.add_argument("--force-virtio", action="store_true",
                    help="the guest has virtio drivers: its disks and NICs move to virtio whatever its OS "
                         "(Windows, unknown), the boot disk too unless boot_disk = 'keep'")

    un = sub.add_parser("untune", help="give back a domain XML as it was before vmtune",
                        description="Put back what vmtune's rewrites changed in a domain XML (by the record it "
                                    "keeps in <metadata>), keeping what was changed by hand since.")
    _add_domain_args(un)
    _add_show_args(un, explain=False)

    topo = sub.add_parser("topology", help="show the host's NUMA topology and reserved CPUs")
    _add_host_args(topo)
    topo.add_argument("--json", action="store_true", help="print as JSON")

    prof = sub.add_parser("profiles", help="list the tuning profiles")
    prof.add_argument("--config", metavar="FILE")
    prof.add_argument("--json", action="store_true")

    hook = sub.add_parser("hook", help="install or remove the libvirt hook and its reaper, reap its stale leases, "
                          "or release them all",
                          description="install: write the hook into HOOKS_DIR/qemu.d and the reaper's timer; "
                                      "uninstall: remove both; reap: release the leases of domains that no longer "
                                      "run (what the timer does once a minute); restore: release every lease, "
                                      "running domains' too, and give the host back what it had before the first.")
    hook.add_argument("action", choices=("install", "uninstall", "reap", "restore"), metavar="ACTION",
                      help="install, uninstall, reap or restore (above)")
    hook.add_argument("--hooks-dir", metavar="DIR", help="libvirt's hooks directory (default /etc/libvirt/hooks); "
                      "reap reads its vmtune.env, as the hook does")
    hook.add_argument("--unit-dir", metavar="DIR", help="where install writes (and uninstall removes) the reaper's "
                      "systemd units vmtune-reap.service and vmtune-reap.timer (default /etc/systemd/system)")
    hook.add_argument("--no-timer", action="store_true", help="install, uninstall: leave the reaper's units out "
                      "(uninstall: where they are)")
    hook.add_argument("-q", "--quiet", action="store_true", help="reap, restore: print only what was done")


def _read_domain(args) -> str | bytes:
    """The domain XML of DOMAIN.xml, or stdin (``-i`` needs a file)."""
    if args.in_place and args.domain == "-":
        raise InvalidInput("-i needs a file, not stdin")
    return xmlsafe.read(args.domain, "domain XML")


def _write_result(args, xml: str, changed: bool = True) -> str | None:
    """Write ``xml`` to ``-o OUT``, or over DOMAIN.xml with ``-i`` where it ``changed``, atomically;
    the file written to (None: stdout is the output)."""
    # -i on a symlink rewrites the file it points to, as sed -i --follow-symlinks would
    target = os.path.realpath(args.domain) if args.in_place else args.output
    if target and (changed or not args.in_place):
        write_atomic(target, xml, mode_from=args.domain if args.in_place else None)
    return target


def _name(args) -> str:
    return "stdin" if args.domain == "-" else args.domain


def cmd_rewrite(args, cfg, roots) -> int:
    source = _read_domain(args)
    claims = [xmlsafe.read(path, "claimed domain XML") for path in args.claim]
    result = rewrite(source, host_of(args, cfg=cfg), args.profile, claims, force_virtio=args.force_virtio, config=cfg)
    target = _write_result(args, result.xml)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    for warning in result.warnings:
        print(f"vmtune: warning: {warning}", file=sys.stderr)
    if args.diff:
        sys.stdout.write(fmt.diff(source, result.xml, _name(args), f"{_name(args)} (vmtune {result.profile})"))
    elif args.explain:
        print("\n".join(fmt.explain(result)))
    elif not target:
        sys.stdout.write(result.xml)
    return 0


def cmd_untune(args, cfg, roots) -> int:
    """``vmtune untune``: the domain as it was before vmtune, what the hand changed since kept."""
    from ..driver import untune

    source = _read_domain(args)
    result = untune(source)
    target = _write_result(args, result.xml, result.changed)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    if not result.changed:
        print(f"vmtune: {_name(args)}: vmtune never tuned it (no record of "
              "vmtune's changes in its <metadata>): nothing changed", file=sys.stderr)
    for note in result.kept:
        print(f"vmtune: kept by hand: {note}", file=sys.stderr)
    if args.diff:
        sys.stdout.write(fmt.diff(source, result.xml, _name(args), f"{_name(args)} (before vmtune)"))
    elif not target:
        sys.stdout.write(result.xml)
    return 0


def cmd_topology(args, cfg, roots) -> int:
    host = host_of(args, cfg=cfg)
    reserved = host.reserved(cfg)
    if args.json:
        print(json.dumps({**host.to_dict(), "reserved": cpuset.format(reserved)}, indent=2))
    else:
        print("\n".join(fmt.topology(host, reserved)))
    return 0


def cmd_profiles(args, cfg, roots) -> int:
    """Every profile; a broken one is listed with its error (exit 1), the others still show."""
    rows, broken = [], {}
    for name in profiles.names(cfg.profiles_dir):
        try:
            rows.append(profiles.load(name, cfg.profiles_dir))
        except InvalidInput as exc:
            broken[name] = str(exc).replace("\n", "\\n")
    if args.json:
        print(json.dumps([p.to_dict() for p in rows] + [{"name": n, "error": e} for n, e in broken.items()],
                         indent=2))
    else:
        for p in rows:
            print(f"{p.name:<12} {p.description}")
    for name, error in broken.items():
        print(f"vmtune: error: profile {name}: {error}", file=sys.stderr)
    return InvalidInput.exit_code if broken else 0


def cmd_hook(args, cfg, roots) -> int:
    """``vmtune hook install|uninstall|reap``: the hook's script and the reaper's units
    (vmtune/install/hookfile.py, vmtune/install/reaper.py), or a reap. Nothing is written when a file of those names
    is someone else's."""
    from ..install import hookfile, reaper

    if args.action in ("reap", "restore"):
        if args.unit_dir or args.no_timer:
            raise UsageError(f"hook {args.action}: --unit-dir and --no-timer are install's and uninstall's "
                             f"(a {args.action} writes no unit)")
        return _reap(cfg, roots, args.quiet, every=args.action == "restore")
    if args.action == "install":
        if not args.no_timer:
            reaper.check(args.unit_dir)  # before anything is written
        path = hookfile.install(args.hooks_dir)
        lines = [f"installed {path}; restart libvirtd (or virtqemud) so that it sees a new hook"]
        if not args.no_timer:
            lines += reaper.install(args.unit_dir, None, args.hooks_dir, roots.systemd)
    else:
        path = hookfile.uninstall(args.hooks_dir)
        lines = [f"removed {path}" if path else f"{hookfile.hook_path(args.hooks_dir)} was not installed"]
        if not args.no_timer:
            lines += reaper.uninstall(args.unit_dir, roots.systemd)
    print("\n".join(escape(line) for line in lines))
    return 0


def _reap(cfg, roots, quiet: bool = False, every: bool = False) -> int:
    """``vmtune hook reap``: what the hook does at every start and stop, for an operator and for the
    reaper's timer (``--quiet``: nothing printed when nothing was done). ``every`` (``hook
    restore``): every lease is released, those of running domains too."""
    from ..hoststate.leases import Leases
    from ..hoststate.statedir import LockTimeout, Unsafe
    from ..oneline import said_once, setup_logging
    from ..install.reaper import NOTHING, idle

    if idle(roots.state):  # as the fast path (vmtune/__main__.py) decides: nothing is written
        done = []
    else:
        setup_logging()  # the hook's own lines (a lease reaped, a value left alone) on stderr
        try:
            leases = Leases(cfg, roots)
            with said_once():  # a release reads what the others want twice, as a hook call does
                done = leases.restore_all() if every else leases.reap()
        except (LockTimeout, Unsafe) as exc:
            raise InvalidInput(str(exc)) from None
        except OSError as exc:
            raise InvalidInput(f"cannot reap: {exc.strerror or exc}") from None
    if not done and not quiet:
        done = ["nothing to restore: no lease is held" if every else
                NOTHING if idle(roots.state) else "nothing to reap: every lease belongs to a running domain"]
    for line in done:
        print(escape(line))  # lease names are the domains' own: one line each
    return 0


COMMANDS = {"rewrite": cmd_rewrite, "untune": cmd_untune, "topology": cmd_topology, "profiles": cmd_profiles,
            "hook": cmd_hook}
