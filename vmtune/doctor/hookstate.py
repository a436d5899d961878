"""vmtune's own state (area ``state``): the hook's leases and saved baseline (vmtune/hoststate/)
against the live values (drift), leases that overlap, leases whose domain no longer runs, and what
each held CPU runs at now.

The state files are read with the hook's own reader and validator (statedir.py, document.py), never
locked or written, so the doctor calls damaged exactly what the hook refuses (``state.json``
missing while ``baseline.json`` holds leases included). Whether a lease's domain runs is judged as
the hook judges it (alive.py: libvirt's status files, the QEMU's pid): the doctor is read-only, so
a stale lease is a WARN that says ``vmtune hook reap``, which does what the next hook call would.

The reaper (vmtune/install/reaper.py): whether ``vmtune-reap.timer`` is installed and active (or a cron
line runs ``vmtune hook reap``). Leases held with nothing to reap them are a WARN.
"""

from __future__ import annotations

import os
import time

from .. import cpuset
from ..install import reaper
from ..hoststate import alive, engine, power
from ..hoststate.document import Damaged, State
from ..hoststate.record import Record
from ..hoststate.statedir import STATE_FILE, peek
from .findings import Context, Finding, maker

AREA = "state"
new = maker(AREA)


def state_path(ctx: Context) -> str:
    """The hook's state file: this machine's (``Roots.state``: $VMTUNE_STATE_DIR, else /run/vmtune),
    or the one in the --root tree."""
    return os.path.join(ctx.roots.state, STATE_FILE)


def load(ctx: Context, path: str) -> State | Damaged | str | None:
    """The state in ``path`` as the hook reads it; None when neither it nor ``baseline.json`` beside
    it exists; Damaged when the hook would refuse it; "permission denied" when it cannot be read
    (``statedir.peek``)."""
    return peek(os.path.dirname(path), ctx.roots.sysfs if ctx.has("sysfs") else None, owners=ctx.roots.root == "/")


def libvirt_rundir(ctx: Context) -> str:
    """libvirt's run dir as the hook finds it: this machine's, or the one in the --root tree."""
    return ctx.roots.libvirt


def _leases(ctx: Context, state: State, path: str) -> list[Finding]:
    out = []
    rows = [f"{lease.name} ({lease.profile or '?'}, {'' if lease.dedicated else 'shared '}CPUs "
            f"{cpuset.format(lease.cpus) or '-'})"
            for key, lease in sorted(state.leases.items())]
    out.append(new("INFO", path, f"{len(rows)} lease(s): {', '.join(rows)}"))
    out += _power(ctx, state)
    seen: set[frozenset[str]] = set()
    for key, lease in sorted(state.leases.items()):
        for other, shared in state.conflicts(key, lease.cpus) if lease.dedicated else ():
            pair = frozenset((lease.name, other))
            if pair not in seen:
                seen.add(pair)
                out.append(new("FAIL", path, f"leases {' and '.join(sorted(pair))} share CPUs {cpuset.format(shared)}",
                               "no shared CPUs between latency domains", "vmtune plan, then re-pin one of them"))
    return out + _stale(ctx, state, path)


def _power(ctx: Context, state: State) -> list[Finding]:
    """An INFO per held CPU: what it runs at now (governor, EPP, floor, the deepest idle state left,
    hoststate/power.py), with the lease that owns it (the earlier of two)."""
    if not ctx.has("sysfs"):
        return []
    return [new("INFO", ctx.path("sysfs", f"devices/system/cpu/cpu{cpu['cpu']}"),
                f"CPU {cpu['cpu']} ({cpu['lease']}): {cpu['text']}")
            for cpu in power.held(ctx.roots.sysfs, state.leases)]


def _stale(ctx: Context, state: State, path: str) -> list[Finding]:
    """A WARN per lease whose domain is not running (alive.py, as the hook judges it)."""
    folder = libvirt_rundir(ctx)
    if not state.leases:
        return []
    proc = ctx.roots.proc if ctx.has("proc") else None
    found, blind = alive.stale(folder, proc, state.leases, time.time())
    if blind:
        return [new("WARN", folder, "libvirt's run dir does not exist: whether the leases' domains run cannot be "
                    "told, and the hook reaps no lease", "libvirt's run dir",
                    "set VMTUNE_LIBVIRT_RUNDIR in the hook's vmtune.env")]
    return [new("WARN", path, f"lease of {state.leases[key].name}, which is not running ({why}): the host stays "
                "tuned for it", "a lease per running latency domain",
                "`vmtune hook reap` (the next start or stop of a latency domain does it too)")
            for key, why in found.items()]


def _records(state: State) -> list[Record]:
    """Every sysfs record the hook keeps: the host baseline, then each lease's C-states and power
    records (``power_scope = "pinned"``)."""
    return list(state.baseline or []) + [r for lease in state.leases.values() for r in lease.cstates + lease.power]


def _baseline(ctx: Context, state: State, path: str) -> list[Finding]:
    out = []
    if state.baseline is None and state.leases:
        out.append(new("WARN", path, "leases but no saved baseline: the host state was never saved",
                       "a baseline while leases are held", "stop every latency domain, then start them again"))
    if state.baseline is not None and not state.leases:
        out.append(new("WARN", path, f"baseline of {len(state.baseline)} value(s) with no lease: the host is left "
                       "tuned", "no baseline without a lease",
                       "start and stop a latency domain, or write the 'before' values back"))
    records = _records(state)
    pending = [r for r in records if r.pending]
    if pending:
        out.append(new("WARN", path, f"{len(pending)} journal record(s) pending: a hook was interrupted",
                       "none pending", "the next hook call settles them (start or stop any latency domain)"))
    if not records:
        return out
    if not ctx.has("sysfs"):
        return out + [new("SKIP", path, "no sysfs tree given: drift not checked")]
    drifted = engine.verify(ctx.roots, [r for r in records if not r.pending])
    if not drifted:
        return out + [new("OK", path, f"{len(records) - len(pending)} value(s) still as the hook set them")]
    return out + [new("WARN", ctx.path("sysfs", key.text), f"{now if now is not None else 'gone'}, but the hook set "
                      f"{wrote}: changed behind its back; left alone at release", wrote,
                      "find who changed it (tuned? a script?) and set it back") for key, wrote, now in drifted]


def _reaper(ctx: Context, held: int) -> list[Finding]:
    """Whether something reaps stale leases within a minute: a WARN when ``held`` leases and nothing does."""
    found = reaper.status(ctx.roots.root, ctx.roots.root == "/" and ctx.roots.systemd)
    source = found.timer or os.path.join(ctx.roots.root, reaper.UNIT_DIR.lstrip("/"), reaper.TIMER)
    fix = "`vmtune hook install` (writes and enables vmtune-reap.timer), or where systemd does not run, the cron " \
          f"line it prints: {reaper.cron_line()}"
    if found.reaps:
        how = found.cron or f"{reaper.TIMER} " + ("active" if found.active else "enabled")
        return [new("OK", source, f"reaper: {how}: a lease whose domain is gone is reaped within a minute")]
    what = ("installed but not enabled" if found.enabled is False and found.timer else
            "installed, whether it runs cannot be told" if found.timer and found.reaps is None else
            "installed but not active" if found.timer else "not installed")
    if not held:
        return [new("INFO", source, f"reaper: {what}; no lease is held", "", fix)]
    return [new("WARN", source, f"reaper: {what}, and {held} lease(s) held: a lease whose domain dies without a "
                "release keeps the host tuned until the next hook call", "a reaper that runs every minute", fix)]


def check(ctx: Context) -> list[Finding]:
    if not ctx.has("root"):
        return [new("SKIP", "(no --root)", "no --root tree given: the hook's state (/run/vmtune) not read")]
    path = state_path(ctx)
    state = load(ctx, path)
    held = len(state.leases) if isinstance(state, State) else 0
    return _state(ctx, path, state) + _reaper(ctx, held)


def _state(ctx: Context, path: str, state) -> list[Finding]:
    if state is None:
        return [new("OK", path, "no state: the hook holds no lease and has not tuned the host")]
    if isinstance(state, str):
        return [new("SKIP", path, state)]
    if isinstance(state, Damaged):
        return [new("FAIL", path, f"damaged: {state}", "", "the hook refuses latency domains until "
                    + (state.advice or "`vmtune hook reap` sets it aside and goes on from baseline.json"))]
    unrestored = _unrestored(state, path)
    if not state.leases and state.baseline is None:
        return unrestored + [new("OK", path, "no lease held")]
    return unrestored + _leases(ctx, state, path) + _baseline(ctx, state, path)


def _unrestored(state: State, path: str) -> list[Finding]:
    """Values the kernel refused to take back at a stop: the hook tries them again at every call."""
    if not state.unrestored:
        return []
    shown = ", ".join(f"{r.key.text} (to {r.before})" for r in state.unrestored[:3])
    more = f", +{len(state.unrestored) - 3} more" if len(state.unrestored) > 3 else ""
    return [new("WARN", path, f"{len(state.unrestored)} value(s) not restored yet: {shown}{more}",
                "every value the hook changed restored", "the next start, stop or `vmtune hook reap` tries "
                "again; see the hook's log for the kernel's reason")]
