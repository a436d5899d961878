"""Host knobs the hook tunes while a latency VM runs, with tuned's apply / verify / restore lifecycle.

A knob is a sysfs file and the value vmtune wants in it. ``apply`` reads each value before it
writes, and returns what it changed as ``KnobRecord(path, before, after)`` (``after`` is what the
kernel reads back). ``restore`` walks those records backwards, so a governor is restored before
its energy_performance_preference, and writes ``before`` back only where the live value is still
the one vmtune wrote: a value someone changed since is left alone, with a warning.

``intend`` is the journal of an ``apply``: the same records, marked pending, with the wanted value
as ``after``; the hook commits them before it writes anything. ``settle`` turns the journal of a
hook that died into exact records (a knob still at ``before`` was never written), and ``restore``
skips a knob that is already back at ``before``, so restoring twice is harmless.

All paths are relative to the sysfs root (``/sys``, or ``$VMTUNE_SYSFS`` in tests).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .. import cpuset
from ..host import sysfs as files
from ..host.sysfs import CPU_DIR, online_cpus
from .state import KnobRecord, Lease

log = logging.getLogger("vmtune.hook")

KSM_RUN = "kernel/mm/ksm/run"
PERFORMANCE = "performance"
DEFAULT_MAX_CSTATE_LATENCY_US = 10


@dataclass(frozen=True)
class Knob:
    """One sysfs file (relative to the sysfs root) and the value vmtune wants in it."""

    path: str
    want: str


def read(sysfs: str, path: str) -> str | None:
    """The knob's live value, stripped; None if the file does not exist (any other error is raised)."""
    return files.value(os.path.join(sysfs, path), absent=FileNotFoundError)


def write(sysfs: str, path: str, value: str) -> None:
    with open(os.path.join(sysfs, path), "w", encoding="ascii") as fh:
        fh.write(value)


def cpu_limit(sysfs: str, default: int = cpuset.MAX_HOST_CPUS) -> int:
    """One past the highest CPU id the kernel may ever use (``possible``, ``present``, ``online``
    and the ``cpuN`` directories), so a CPU list from outside can be bounded by the host."""
    ids = set(files.cpu_dirs(sysfs))
    for name in ("possible", "present", "online"):  # a garbled file: the others still count
        ids |= files.cpu_list(files.text(os.path.join(sysfs, CPU_DIR, name)))
    return max(ids) + 1 if ids else default


def _cpufreq_knobs(sysfs: str, cpu: int) -> list[Knob]:
    base = f"{CPU_DIR}/cpu{cpu}/cpufreq"
    if read(sysfs, f"{base}/scaling_governor") is None:
        return []
    available = read(sysfs, f"{base}/scaling_available_governors")
    if available is not None and PERFORMANCE not in available.split():
        log.warning("cpu%d: no %s governor (available: %s); cpufreq left alone", cpu, PERFORMANCE, available)
        return []
    knobs = []
    # EPP first: intel_pstate refuses a non-performance EPP under the performance governor, so the
    # governor is set last and (restore walks backwards) restored first.
    if read(sysfs, f"{base}/energy_performance_preference") is not None:
        knobs.append(Knob(f"{base}/energy_performance_preference", PERFORMANCE))
    knobs.append(Knob(f"{base}/scaling_governor", PERFORMANCE))
    return knobs


def _cpuidle_knobs(sysfs: str, cpu: int, max_latency_us: int) -> list[Knob]:
    base = Path(sysfs, CPU_DIR, f"cpu{cpu}", "cpuidle")
    states = sorted((p for p in base.glob("state*") if p.name[5:].isdigit()), key=lambda p: int(p.name[5:]))
    knobs = []
    for state in states:
        rel = f"{CPU_DIR}/cpu{cpu}/cpuidle/{state.name}"
        try:
            latency = int(read(sysfs, f"{rel}/latency") or "")
        except ValueError:
            continue
        if latency > max_latency_us and read(sysfs, f"{rel}/disable") is not None:
            knobs.append(Knob(f"{rel}/disable", "1"))
    return knobs


def plan(sysfs: str, max_cstate_latency_us: int = DEFAULT_MAX_CSTATE_LATENCY_US, ksm: str = "off",
         cpus: list[int] | None = None, cstates: bool = True) -> list[Knob]:
    """The host's low-latency state, in the order to apply it: per CPU EPP then governor, the
    C-states deeper than ``max_cstate_latency_us`` (unless ``cstates`` is false: scope ``pinned``
    leaves them to ``cstate_plan``), then KSM off (unless ``ksm == "keep"``)."""
    targets = online_cpus(sysfs) if cpus is None else sorted(cpus)
    knobs: list[Knob] = []
    for cpu in targets:
        knobs += _cpufreq_knobs(sysfs, cpu)
    if cstates:
        knobs += cstate_plan(sysfs, targets, max_cstate_latency_us)
    if ksm == "off" and read(sysfs, KSM_RUN) is not None:
        knobs.append(Knob(KSM_RUN, "0"))
    return knobs


def cstate_plan(sysfs: str, cpus, max_cstate_latency_us: int = DEFAULT_MAX_CSTATE_LATENCY_US) -> list[Knob]:
    """The C-states deeper than ``max_cstate_latency_us`` on those of ``cpus`` that are online."""
    online = set(online_cpus(sysfs))
    knobs: list[Knob] = []
    for cpu in sorted(set(cpus) & online):
        knobs += _cpuidle_knobs(sysfs, cpu, max_cstate_latency_us)
    return knobs


def cpu_of(path: str) -> int | None:
    """The CPU a knob belongs to (``devices/system/cpu/cpuN/...``), None for host-wide knobs."""
    m = re.match(rf"{CPU_DIR}/cpu(\d+)/", path)
    return int(m.group(1)) if m else None


def intend(sysfs: str, knobs: list[Knob]) -> list[KnobRecord]:
    """The journal for ``apply``: a pending record for every knob that is not at its value yet.

    Written to the state file before any sysfs value changes, so that a hook killed half-way
    leaves a record of everything it may have changed (``settle`` and ``restore`` read it).
    """
    out = []
    for knob in knobs:
        before = read(sysfs, knob.path)
        if before is not None and before != knob.want:
            out.append(KnobRecord(knob.path, before, knob.want, pending=True))
    return out


def complete(sysfs: str, saved: list[KnobRecord], knobs: list[Knob]) -> tuple[list[KnobRecord], list[Knob]]:
    """What is still missing for the host to be tuned as ``saved`` says (verify, never assume):
    (journal records for the knobs not saved yet and not at their value, the saved knobs found back
    at their original value). A saved knob at any other value was changed by hand: left alone."""
    by_path = {r.path: r for r in saved}
    fresh: list[KnobRecord] = []
    again: list[Knob] = []
    for knob in knobs:
        now = read(sysfs, knob.path)
        if now is None or now == knob.want:
            continue
        rec = by_path.get(knob.path)
        if rec is None:
            fresh.append(KnobRecord(knob.path, now, knob.want, pending=True))
        elif now == rec.before:
            again.append(knob)
    return fresh, again


def complete_cstates(sysfs: str, leases: Mapping[str, Lease], max_latency_us: int = DEFAULT_MAX_CSTATE_LATENCY_US,
                     ) -> tuple[dict[str, list[KnobRecord]], list[Knob]]:
    """Scope ``pinned``: what is missing for every lease's CPUs to have their deep C-states off, as
    ``complete`` sees it against the C-state records of all leases: (per lease key, journal records
    for its CPUs' knobs nobody recorded; the recorded knobs found back at their original value). A
    CPU two leases pin goes to the earlier one, which is also the one that restores it last."""
    recorded = [r for lease in leases.values() for r in lease.cstates]
    planned: set[str] = set()
    fresh_by: dict[str, list[KnobRecord]] = {}
    again: list[Knob] = []
    for key, lease in sorted(leases.items(), key=lambda kv: (kv[1].since, kv[0])):
        knobs = [k for k in cstate_plan(sysfs, lease.cpus, max_latency_us) if k.path not in planned]
        planned.update(k.path for k in knobs)
        fresh, back = complete(sysfs, recorded, knobs)
        if fresh:
            fresh_by[key] = fresh
        again += back
    return fresh_by, again


def settle(sysfs: str, records: list[KnobRecord]) -> list[KnobRecord]:
    """Journal records of a hook that died, made exact: a knob still at ``before`` was never
    written (dropped); the others become ordinary records (``restore`` judges them)."""
    out = []
    for rec in records:
        if rec.pending:
            now = read(sysfs, rec.path)
            if now is None or now == rec.before:
                continue
            rec = KnobRecord(rec.path, rec.before, rec.after)
        out.append(rec)
    return out


def apply(sysfs: str, knobs: list[Knob], dry_run: bool = False) -> list[KnobRecord]:
    """Set every knob that is not already at its value; return what was changed, in order.

    A knob that cannot be written is logged and skipped (the rest of the host still gets tuned).
    """
    saved: list[KnobRecord] = []
    for knob in knobs:
        before = read(sysfs, knob.path)
        if before is None or before == knob.want:
            continue
        if dry_run:
            log.info("dry run: would set %s: %s -> %s", knob.path, before, knob.want)
            continue
        try:
            write(sysfs, knob.path, knob.want)
        except OSError as exc:
            log.warning("cannot set %s to %s: %s", knob.path, knob.want, exc.strerror or exc)
            continue
        after = read(sysfs, knob.path)
        if after is None or after == before:
            continue
        saved.append(KnobRecord(knob.path, before, after))
    if saved:
        log.info("host tuned: %d value(s) changed", len(saved))
    return saved


def verify(sysfs: str, saved: list[KnobRecord]) -> list[tuple[str, str, str | None]]:
    """The records whose live value is no longer what vmtune wrote: (path, wrote, now)."""
    drifted = []
    for rec in saved:
        now = read(sysfs, rec.path)
        if now != rec.after:
            drifted.append((rec.path, rec.after, now))
    return drifted


def restore(sysfs: str, saved: list[KnobRecord], dry_run: bool = False,
            failed: list[KnobRecord] | None = None) -> list[str]:
    """Write back the values ``apply`` saved, newest first; return the paths left alone.

    A value that someone changed since vmtune wrote it is theirs now: it is left alone, with a
    warning. A value that cannot be written back is logged and skipped, and its record goes into
    ``failed`` (oldest first), for the caller to keep and try again.
    """
    left: list[str] = []
    for rec in reversed(saved):
        path, before, after = rec.path, rec.before, rec.after
        now = read(sysfs, path)
        if now is None:
            log.warning("%s is gone; not restored", path)
            left.append(path)
            continue
        if now == before:  # already the original (a journal record the hook never got to write)
            continue
        if now != after:
            log.warning("%s was changed since vmtune set it to %s (now %s); left alone, not restored to %s",
                        path, after, now, before)
            left.append(path)
            continue
        if dry_run:
            log.info("dry run: would restore %s: %s -> %s", path, now, before)
            continue
        try:
            write(sysfs, path, before)
        except OSError as exc:
            log.warning("cannot restore %s to %s: %s%s", path, before, exc.strerror or exc,
                        "; kept, to try again at the next start or stop" if failed is not None else "")
            left.append(path)
            if failed is not None:
                failed.insert(0, KnobRecord(path, before, after))
    return left
