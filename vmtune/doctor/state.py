"""vmtune's own state: the hook's leases and saved baseline (vmtune/hook/leases.py) against the
live values (drift), leases that overlap, and leases whose domain no longer runs.

The state file is read, never locked or written (``leases.Store`` would move a corrupt file aside).
"""

from __future__ import annotations

import json
import os

from .. import cpuset
from ..hook import hoststate, leases
from .findings import Context, Finding, cpulist, maker

new = maker("state")


def state_path(ctx: Context) -> str:
    if ctx.roots.root == "/":
        return os.path.join(leases.state_dir(), leases.STATE_FILE)  # $VMTUNE_STATE_DIR, else /run/vmtune
    return ctx.path("root", os.path.join(leases.DEFAULT_DIR.lstrip("/"), leases.STATE_FILE))


def _load(path: str) -> leases.State | str | None:
    """The state; None when there is no file; a string saying why it cannot be read."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except PermissionError:
        return "permission denied"
    except (OSError, ValueError) as exc:
        return f"unreadable: {exc}"
    if not isinstance(data, dict) or not isinstance(data.get("leases", {}), dict):
        return "unreadable: not a vmtune state object"
    baseline = data.get("baseline")
    held = {str(k): v for k, v in (data.get("leases") or {}).items() if isinstance(v, dict)}
    isolation = data.get("isolation")
    return leases.State(leases=held, baseline=baseline if isinstance(baseline, list) else None,
                        isolation=isolation if isinstance(isolation, dict) else None)


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
    rows = [f"{lease.get('name', key)} ({lease.get('profile') or '?'}, CPUs {lease.get('cpus') or '-'})"
            for key, lease in sorted(state.leases.items())]
    out.append(new("INFO", path, f"{len(rows)} lease(s): {', '.join(rows)}"))
    seen: set[frozenset[str]] = set()
    for key, lease in sorted(state.leases.items()):
        for other, shared in state.conflicts(key, cpulist(str(lease.get("cpus", "")))):
            pair = frozenset((lease.get("name", key), other))
            if pair not in seen:
                seen.add(pair)
                out.append(new("FAIL", path, f"leases {' and '.join(sorted(pair))} share CPUs {cpuset.format(shared)}",
                               "no shared CPUs between latency domains", "vmtune plan, then re-pin one of them"))
    running = _running(ctx)
    if running is not None:
        for key, lease in sorted(state.leases.items()):
            name = lease.get("name", key)
            if key not in running and name not in running and key.removeprefix("name:") not in running:
                out.append(new("WARN", path, f"lease of {name}, which is not running ({ctx.domains_source}): "
                               "the host stays tuned for it", "a lease per running latency domain",
                               f"start and stop {name} so the hook releases it"))
    return out


def _records(state: leases.State) -> list[dict]:
    """Every sysfs record the hook keeps: the host baseline, then each lease's C-states."""
    out = [r for r in state.baseline or [] if isinstance(r, dict) and "path" in r and "after" in r]
    for lease in state.leases.values():
        out += [r for r in lease.get("cstates") or [] if isinstance(r, dict) and "path" in r and "after" in r]
    return out


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
    pending = [r for r in records if r.get("pending")]
    if pending:
        out.append(new("WARN", path, f"{len(pending)} journal record(s) pending: a hook was interrupted",
                       "none pending", "the next hook call settles them (start or stop any latency domain)"))
    if not records:
        return out
    if not ctx.has("sysfs"):
        return out + [new("SKIP", path, "no sysfs tree given: drift not checked")]
    drifted = hoststate.verify(ctx.roots.sysfs, [r for r in records if not r.get("pending")])
    if not drifted:
        return out + [new("OK", path, f"{len(records) - len(pending)} value(s) still as the hook set them")]
    return out + [new("WARN", ctx.path("sysfs", rel), f"{now if now is not None else 'gone'}, but the hook set "
                      f"{wrote}: changed behind its back; left alone at release", wrote,
                      "find who changed it (tuned? a script?) and set it back") for rel, wrote, now in drifted]


def check(ctx: Context) -> list[Finding]:
    if not ctx.has("root"):
        return [new("SKIP", "(no --root)", "no --root tree given: the hook's state (/run/vmtune) not read")]
    path = state_path(ctx)
    state = _load(path)
    if state is None:
        return [new("OK", path, "no state: the hook holds no lease and has not tuned the host")]
    if isinstance(state, str):
        level = "SKIP" if state == "permission denied" else "FAIL"
        return [new(level, path, state, "", "" if level == "SKIP" else
                    "keep a copy, then remove it once no latency VM runs (the hook starts afresh)")]
    if not state.leases and state.baseline is None:
        return [new("OK", path, "no lease held")]
    return _leases(ctx, state, path) + _baseline(ctx, state, path)
