"""The libvirt qemu hook: host low-latency state while latency VMs run, with leases.

libvirt runs ``qemu NAME OP SUBOP EXTRA`` with the domain XML on stdin. ``main`` handles:

- an op outside ``HANDLED_OPS``, any domain: exit 0, silent, without reading stdin; an untagged
  domain (no ``https://vmtune.dev/xmlns/1`` in the XML bytes), any op: exit 0, silent. Both are
  decided before anything heavy is imported, and ``hooks/qemu`` makes the same two checks before
  importing vmtune (``vmtune hook install`` writes ``HANDLED_OPS`` into it: vmtune/install/hookfile.py);
- ``prepare begin`` of a latency-tagged domain (its profile has ``host_tuning``:
  ``profiles.tunes_host``): take a lease with the host CPUs its vCPUs pin (vmtune/hoststate/leases.py).
  vCPU pins that overlap another lease refuse the start (exit 1, one stderr line) unless the
  config's ``[hook] on_conflict = "warn"``. Hugepage pools on the domain's nodes that are short get
  topped up (hoststate/pages.py; too few after compaction: exit 1, one line, pools and state as
  before). The first lease saves the host state and tunes the host (hoststate/tuning.py); with
  ``cstate_scope = "pinned"`` only the leases' pinned CPUs get their deep C-states disabled. Every
  prepare and reconnect completes whatever any lease lacks (a crash);
- ``release end ANY``: drop the lease (a domain with a UUID is matched by it only; a release whose
  XML has no UUID or cannot be read drops only a lease kept by name); give back the hugepages it
  added while they are free; restore its CPUs' C-states unless another lease pins them (scope
  pinned); the last lease restores the saved host state;
- ``started begin``: never fails; records the domain's QEMU (pid and start time) in its lease, so
  that the lease is stale as soon as that process is gone (vmtune/hoststate/alive.py);
- ``reconnect begin``: never fails; makes sure the running domain has its lease (no top-up), and
  records its QEMU as ``started begin`` does;
- ``migrate begin`` / ``restore begin``: print the domain re-pinned for this host, or nothing when
  it is already right here; exit 1 when it cannot be placed here (repin.py);
- every other op: exit 0, print nothing.

This package is an adapter: the host-state engine (vmtune/hoststate/) does the work. It parses
the domain's XML once per call; every CPU and node list of a latency domain's XML is checked
against the host before the hook reads any (bounds.py), in every op: one domain's XML never makes
the hook do more work than the host has CPUs.

Crash safety: the records of what a lease will change are committed to the state file before the
first host write ("journal first", hoststate/engine.py); a hook killed half-way leaves them, and
the next call settles them so that the release restores exactly.

Logs go to stderr and syslog, never stdout. The environment is read here, once, into one
``Roots`` (vmtune/roots.py: ``VMTUNE_SYSFS``, ``VMTUNE_PROCFS``, ``VMTUNE_STATE_DIR``, ...);
``VMTUNE_DRY_RUN=1`` logs and changes nothing; ``VMTUNE_SYSLOG=0`` keeps syslog out.

libvirtd runs hooks with a scrubbed environment (libvirt 9.0 passes only PATH, HOME, LC_ALL=C and a
few more), so ``VMTUNE_*`` variables set on the daemon never reach the hook. When the hook runs as
``HOOKS_DIR/qemu.d/50-vmtune``, ``HOOKS_DIR/vmtune.env`` supplies them (vmtune/install/envfile.py); a
variable already in the environment wins.
"""


from __future__ import annotations

import logging
import os
import sys

from ..install.envfile import env_file, load_env_file
from ..install.hookfile import HANDLED_OPS, MARK, REPIN_OPS, STARTED_OPS

log = logging.getLogger("vmtune.hook")

__all__ = ["HANDLED_OPS", "MARK", "env_file", "load_env_file", "main"]


def _request(name: str, root, dom, roots, dedicated: bool):
    """The lease a latency domain asks for. Every CPU and node list of its XML is checked against
    the host first (bounds.py: an id past the last possible CPU is an error, found before any range
    is expanded), so one domain's XML can never make the hook do more work than the host has CPUs."""
    from ..placement import holdings
    from ..errors import InvalidInput
    from ..host.sysfs import cpu_limit
    from ..hoststate import pages
    from ..hoststate.leases import LeaseRequest
    from . import bounds

    cpus: frozenset[int] = frozenset()
    need: dict = {}
    error = None
    try:
        bounds.check(root, cpu_limit(roots.sysfs))  # first: every list below is bounded by the host
        cpus = holdings.pinned(dom)
        need = pages.needs(dom, lambda: pages.default_size(roots))
    except InvalidInput as exc:
        error = str(exc)
    name, uuid = _identity(name, dom)
    return LeaseRequest(name=name, uuid=uuid, profile=dom.tagged_profile, cpus=cpus, pages=need, error=error,
                   dedicated=dedicated)


def _identity(name: str, dom) -> tuple[str, str]:
    """(name, lease key) of a domain: libvirt's NAME argument is the exact name (its status file is
    NAME.xml; the model's is stripped); the key is its UUID, else ``name:NAME``."""
    name = name or dom.name
    return name, dom.uuid or f"name:{name}"


def _config(roots):
    from .. import config as config_mod

    return config_mod.load(roots.config, roots.profiles)


def _leases_of(name: str, data: bytes, roots, dry_run: bool, doing: str):
    """(name, UUID or None, Leases) for a call that needs only the domain's name and UUID: no pin is
    read, and neither an unreadable XML nor a broken config stops it (``doing`` says what goes on)."""
    from ..config import Config
    from ..hoststate.leases import Leases

    try:
        from ..xml import model, xmlsafe

        name, uuid = _identity(name, model.Domain(xmlsafe.parse(data, "domain XML")))
    except Exception as exc:  # noqa: BLE001 - an unreadable XML still releases a lease kept by name
        log.warning("%s: cannot read the domain XML (%s); %s by name (a lease kept by UUID stays)", name, exc, doing)
        uuid = None
    try:
        cfg = _config(roots)
    except Exception as exc:  # noqa: BLE001 - a broken config must not keep the host tuned
        log.warning("%s: %s; %s with the default settings", name, exc, doing)
        cfg = Config(profiles_dir=roots.profiles)
    return name, uuid, Leases(cfg, roots, dry_run)


def _release(name: str, data: bytes, roots, dry_run: bool) -> int:
    name, uuid, leases = _leases_of(name, data, roots, dry_run, "releasing")
    return leases.release(uuid, name)


def _started(name: str, data: bytes, roots, dry_run: bool) -> int:
    from ..install.reaper import idle

    name, uuid, leases = _leases_of(name, data, roots, dry_run, "recording its QEMU")
    if not idle(leases.store.folder):  # no lease held: nothing to lock nor write (as the idle reap)
        leases.started(uuid, name)
    return 0  # libvirt stops a domain whose started hook fails: never


def _run(argv: list[str], data: bytes, roots, dry_run: bool) -> int:
    name = argv[0] if argv else "?"
    op = (argv[1] if len(argv) > 1 else "", argv[2] if len(argv) > 2 else "")
    if op == ("release", "end"):
        return _release(name, data, roots, dry_run)
    if op in STARTED_OPS:
        return _started(name, data, roots, dry_run)
    if op in REPIN_OPS:
        from . import repin

        return repin.run(name, data, _config(roots), roots, sys.stdout)
    # prepare begin / reconnect begin: only latency-tagged domains matter
    from ..xml import model, xmlsafe
    from .. import profiles

    try:
        root = xmlsafe.parse(data, "domain XML")
        dom = model.Domain(root)
        cfg = _config(roots)
        latency = profiles.host_tuning(dom.tagged_profile, cfg.profiles_dir)
    except Exception as exc:  # noqa: BLE001 - we cannot tell it is ours: log, let it start
        log.error("%s: %s %s: ignoring the domain: %s", name, *op, exc)
        return 0
    if latency is None:
        return 0
    from ..hoststate.leases import Leases

    prepare = op == ("prepare", "begin")
    request = _request(name, root, dom, roots, latency.dedicated)
    if request.error:
        log.error("%s: %s: %s", request.name, "refusing to start" if prepare else "not tuned", request.error)
        return 1 if prepare else 0
    return Leases(cfg, roots, dry_run).lease(request, refuse_conflicts=prepare, top_up=prepare, running=not prepare)


def main(argv: list[str] | None = None, stdin: bytes | str | None = None) -> int:
    """Run one hook call: ``argv`` is ``[NAME, OP, SUBOP, EXTRA]``, ``stdin`` the domain XML."""
    if argv is None:
        argv = sys.argv[1:]
    op = tuple(argv[1:3])
    if op not in HANDLED_OPS:
        return 0  # an op the hook ignores (libvirt ignores EPIPE when a hook leaves stdin unread)
    try:
        if stdin is None:
            stdin = sys.stdin.buffer.read()
        data = stdin.encode("utf-8") if isinstance(stdin, str) else bytes(stdin)
    except Exception:  # noqa: BLE001 - cannot tell whose domain: not ours
        return 0
    if MARK not in data:
        return 0  # untagged: not ours
    name = argv[0] if argv else "?"
    try:
        from ..oneline import said_once, setup_logging
        from ..roots import Roots

        load_env_file(env_file(), os.environ)
        setup_logging(syslog=os.environ.get("VMTUNE_SYSLOG", "1") != "0")
        dry_run = os.environ.get("VMTUNE_DRY_RUN", "") not in ("", "0")
        with said_once():
            return _run(list(argv), data, Roots.from_env(os.environ), dry_run)
    except Exception as exc:  # noqa: BLE001 - the hook's last line of defence
        log.error("%s: %s %s failed: %s: %s", name, *op, type(exc).__name__, exc)
        return 1 if op == ("prepare", "begin") else 0  # never 1 at started: libvirt would stop the domain
