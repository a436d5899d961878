"""vmtune's own state: the hook's leases and saved baseline (vmtune/hook/leases.py) against the
live values (drift), leases that overlap, and leases whose domain no longer runs.

The state file is read with the hook's own reader and validator (leases.Store, state.py), never
locked or written.
"""

from __future__ import annotations

import os

from .. import cpuset
from ..hook import hoststate, leases
from ..hook.state import KnobRecord
from .findings import Context, Finding, maker

new = maker("state")


def state_path(ctx: Context) -> str:
    if ctx.roots.root == "/":
        return os.path.join(leases.state_dir(), leases.STATE_FILE)  # $VMTUNE_STATE_DIR, else /run/vmtune
    return ctx.path("root", os.path.join(leases.DEFAULT_DIR.lstrip("/"), leases.STATE_FILE))


def load(path: str) -> leases.State | str | None:
    """The state; None when there is no file; a string saying why it cannot be read."""
    if not os.path.lexists(path):
        return None
    store = leases.Store(folder=os.path.dirname(path), dry_run=True)
    try:
        return store.read()
    except PermissionError:
        return "permission denied"
    except leases.Damaged as exc:
        return f"damaged: {exc}" if "permission denied" not in str(exc).lower() else "permission denied"


def _running(ctx: Context) -> set[str] | None:
    """UUIDs and names of the running domains, or None when unknown."""
    if ctx.domains is None:
        return None
    from ..audit import holds_now
    from .domains import identity

    out: set[str] = set()
    for xml, state in ctx.domains:
        if holds_now(state):
            out.update(filter(None, identity(xml)))
    return out


def _leases(ctx: Context, state: leases.State, path: str) -> list[Finding]:
    out = []
    rows = [f"{lease.name} ({lease.profile or '?'}, CPUs {cpuset.format(lease.cpus) or '-'})"
            for key, lease in sorted(state.leases.items())]
    out.append(new("INFO", path, f"{len(rows)} lease(s): {', '.join(rows)}"))
    seen: set[frozenset[str]] = set()
    for key, lease in sorted(state.leases.items()):
        for other, shared in state.conflicts(key, lease.cpus):
            pair = frozenset((lease.name, other))
            if pair not in seen:
                seen.add(pair)
                out.append(new("FAIL", path, f"leases {' and '.join(sorted(pair))} share CPUs {cpuset.format(shared)}",
                               "no shared CPUs between latency domains", "vmtune plan, then re-pin one of them"))
    running = _running(ctx)
    if running is not None:
        for key, lease in sorted(state.leases.items()):
            name = lease.name
            if key not in running and name not in running and key.removeprefix("name:") not in running:
                out.append(new("WARN", path, f"lease of {name}, which is not running ({ctx.domains_source}): "
                               "the host stays tuned for it", "a lease per running latency domain",
                               f"start and stop {name} so the hook releases it"))
    return out


def _records(state: leases.State) -> list[KnobRecord]:
    """Every sysfs record the hook keeps: the host baseline, then each lease's C-states."""
    return list(state.baseline or []) + [r for lease in state.leases.values() for r in lease.cstates]


def _baseline(ctx: Context, state: leases.State, path: str) -> list[Finding]:
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
    drifted = hoststate.verify(ctx.roots.sysfs, [r for r in records if not r.pending])
    if not drifted:
        return out + [new("OK", path, f"{len(records) - len(pending)} value(s) still as the hook set them")]
    return out + [new("WARN", ctx.path("sysfs", rel), f"{now if now is not None else 'gone'}, but the hook set "
                      f"{wrote}: changed behind its back; left alone at release", wrote,
                      "find who changed it (tuned? a script?) and set it back") for rel, wrote, now in drifted]


def check(ctx: Context) -> list[Finding]:
    if not ctx.has("root"):
        return [new("SKIP", "(no --root)", "no --root tree given: the hook's state (/run/vmtune) not read")]
    path = state_path(ctx)
    state = load(path)
    if state is None:
        return [new("OK", path, "no state: the hook holds no lease and has not tuned the host")]
    if isinstance(state, str):
        level = "SKIP" if state == "permission denied" else "FAIL"
        return [new(level, path, state, "", "" if level == "SKIP" else
                    "the hook refuses latency domains until `vmtune hook reap` sets it aside and goes on from "
                    "baseline.json")]
    if not state.leases and state.baseline is None:
        return [new("OK", path, "no lease held")]
    return _leases(ctx, state, path) + _baseline(ctx, state, path)
