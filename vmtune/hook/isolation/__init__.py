"""Keep the host's own work off the CPUs that running latency domains hold, and give them back.

The isolated set is the union of the leases' vCPU CPUs, less the host's reserved CPUs; every other
online CPU is the housekeeping set. ``reconcile(previous, cpus, roots, commit)`` makes the live host
match an isolated set and returns the new isolation record for the state file. It runs at every
prepare, reconnect and release, so a second lease extends the isolation, its release shrinks it,
and a reconnect completes whatever a crash left undone.

What moves (items.py, tasks.py): every task that accepts a new affinity and is not a thread of a
libvirt-managed QEMU; every IRQ whose affinity can be written, and ``default_smp_affinity``; the
unbound workqueues' ``cpumask``; and the host's cgroups: with systemd on cgroup v2, ``AllowedCPUs``
of ``init.scope``, ``system.slice`` and ``user.slice`` (``systemctl set-property --runtime``);
on cgroup v2 without systemd, ``cpuset.cpus`` of every top-level group but libvirt's. Tasks in a
group that is narrowed as a whole are left to the cgroup. libvirt's machine groups are never touched.

Each item's new value is its original value less the isolated CPUs. An item whose original value
holds only isolated CPUs (pinned there on purpose) is left alone, and so is an item whose value
does not change. The record of a moved item keeps its original value (``before``) and what the
hook wrote (``after``); an item found at neither was changed by hand and is left alone, with a
warning. The records are committed (``commit``) before the first write, so a hook killed half-way
leaves them, and the next call finishes the job: journal first, as for the host knobs.

A task started while CPUs are isolated inherits a narrowed affinity from its parent, and a new IRQ
gets the narrowed ``default_smp_affinity``; neither has a record. Every narrowing leaves a *pair*
(the mask it imposed, the CPUs it removed). A task born after the pair was made (start time), or an
IRQ that did not exist when the isolation began, whose affinity is exactly a pair's mask, is taken
to have inherited it: its original value is the mask plus the removed CPUs. So when the isolation
shrinks, such tasks widen too, and no process stays confined after the last lease. A task that set
exactly that mask itself while the isolation held is widened as well: the two cannot be told apart.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass

from ... import cpuset
from ..hoststate import online_cpus
from ..state import MAX_PAIRS, IsoRecord, Isolation, Pair
from . import items as _items
from .items import Item
from . import tasks

log = logging.getLogger("vmtune.hook")

SHOWN = 3  # names per kind in a log line


@dataclass(frozen=True)
class Roots:
    """Where the host is: ``/sys``, ``/proc``, ``/sys/fs/cgroup``, ``/run`` and libvirt's run dir."""

    sysfs: str = "/sys"
    proc: str = "/proc"
    cgroupfs: str = "/sys/fs/cgroup"
    runfs: str = "/run"
    libvirt: str = "/run/libvirt/qemu"

    @classmethod
    def from_env(cls, sysfs: str, proc: str) -> Roots:
        """``$VMTUNE_CGROUPFS`` (default ``fs/cgroup`` under the sysfs root), ``$VMTUNE_RUNFS``
        (default ``run`` beside it: ``/run`` for ``/sys``) and ``$VMTUNE_LIBVIRT_RUNDIR`` (default
        ``RUNFS/libvirt/qemu``)."""
        from ..alive import rundir

        runfs = os.environ.get("VMTUNE_RUNFS") or os.path.join(os.path.dirname(sysfs.rstrip("/")) or "/", "run")
        return cls(sysfs, proc, os.environ.get("VMTUNE_CGROUPFS") or os.path.join(sysfs, "fs", "cgroup"), runfs,
                   rundir(runfs))

    @property
    def systemd(self) -> bool:
        return os.path.isdir(os.path.join(self.runfs, "systemd", "system"))


def uptime(proc: str) -> float:
    try:
        with open(os.path.join(proc, "uptime"), encoding="ascii") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def collect(roots: Roots, online: frozenset[int], only: Collection[int] | None = None,
            qemu: set[int] | None = None) -> list[Item]:
    """Every item the isolation may move, found on the live host (``only``: tasks of these pids)."""
    groups = list(_items.units(roots.cgroupfs, online) if roots.systemd else _items.cgroups(roots.cgroupfs, online))
    covered = {g.top for g in groups}
    out = groups + list(_items.irqs(roots.proc)) + list(_items.workqueue(roots.sysfs))
    return out + list(tasks.scan(roots.proc, roots.libvirt, covered, only, qemu))


class _Pass:
    """One reconcile: the previous record, the wanted isolated CPUs, and what was found."""

    def __init__(self, previous: Isolation, cpus: frozenset[int], irqs: frozenset[int], since: float):
        self.cpus = cpus
        self.records = dict(previous.records)
        self.pairs = list(previous.pairs)
        self.irqs = irqs
        self.since = since
        self.kept: dict[str, IsoRecord] = {}
        self.new_pairs: list[Pair] = []
        self.moves: list[tuple[Item, str]] = []
        self.by_hand: list[Item] = []

    def original(self, item: Item) -> str | None:
        """The item's value before any isolation; None when it was changed by hand (left alone)."""
        rec = self.records.get(item.key)
        if rec is not None and rec.ident == item.ident:
            if any(item.same(item.raw, v) for v in (rec.before, rec.after, rec.was) if v is not None):
                return rec.before
            self.by_hand.append(item)
            return None
        if item.kind.inherits:
            for pair in self.pairs:
                if self._inherited(item, pair):
                    return item.kind.format(item.cpus | pair.removed)
        return item.raw

    def _inherited(self, item: Item, pair: Pair) -> bool:
        if pair.kind != item.kind.name or item.cpus != pair.mask:
            return False
        if item.kind.name == "irq":
            return int(item.key.split(":", 1)[1]) not in self.irqs
        return item.born is not None and item.born >= pair.since

    def plan(self, item: Item) -> None:
        before = self.original(item)
        if before is None:
            return
        orig = item.kind.parse(before, item)
        target = orig - self.cpus
        want = before
        if target and target != orig:
            want = item.kind.format(target)
            # the journal accepts the value found now too (an earlier call's ``after``)
            was = None if item.same(item.raw, before) or item.same(item.raw, want) else item.raw
            self.kept[item.key] = IsoRecord(before, want, item.label, item.ident, was)
            if item.kind.name == "task" or item.key == "irq:default":  # new IRQs copy the default
                kind = "irq" if item.key == "irq:default" else "task"
                self.new_pairs.append(Pair(kind, target, orig - target, self.since))
        if not item.same(item.raw, want):
            self.moves.append((item, want))

    def merged_pairs(self) -> list[Pair]:
        seen: dict[tuple[str, frozenset[int], frozenset[int]], Pair] = {}
        for pair in self.pairs + self.new_pairs:
            k = (pair.kind, pair.mask, pair.removed)
            if k not in seen or pair.since < seen[k].since:
                seen[k] = pair
        return list(seen.values())[-MAX_PAIRS:]

    def journal(self) -> Isolation:
        by_hand = {i.key for i in self.by_hand}
        records = {k: r for k, r in self.records.items() if k not in by_hand}
        records.update(self.kept)
        return Isolation(self.cpus, self.irqs, self.merged_pairs(), records)

    def final(self, failed: set[str]) -> Isolation | None:
        records = {}
        for key, rec in self.kept.items():
            if key in failed:
                old = self.records.get(key)
                if old is not None:
                    records[key] = old  # still at the value an earlier call wrote
                continue
            records[key] = IsoRecord(rec.before, rec.after, rec.label, rec.ident)
        if not self.cpus:
            return Isolation(records=records) if records else None
        return Isolation(self.cpus, self.irqs, self.merged_pairs(), records)


def reconcile(previous: Isolation | None, cpus: frozenset[int], roots: Roots, commit: Callable[[Isolation], None],
              dry_run: bool = False, only: Collection[int] | None = None) -> Isolation | None:
    """Make the host match the isolated set ``cpus``; return the new isolation record (None: none).

    ``previous`` is the last record (from the state file); ``commit(journal)`` is called with the
    records before the first write. ``only`` limits the tasks to these pids (tests).
    """
    if not cpus and (previous is None or (not previous.records and not previous.pairs)):
        return None
    previous = previous or Isolation()
    online = frozenset(online_cpus(roots.sysfs))
    qemu: set[int] = set()
    found = collect(roots, online, only, qemu)
    # the IRQs that existed when the isolation began: any other one got default_smp_affinity since
    irqs = (previous.irqs if previous.cpus
            else frozenset(int(i.key.split(":", 1)[1]) for i in found if i.kind.name == "irq"))
    run = _Pass(previous, cpus, irqs, uptime(roots.proc))
    for item in found:
        run.plan(item)
    _warn(run, found)
    if dry_run:
        _report(run.moves, set(), cpus, "dry run: would ")
        return previous if previous.cpus or previous.records else None
    if run.moves:
        commit(run.journal())
    failed = _write(run.moves)
    _report(run.moves, failed, cpus, "")
    return run.final(failed)


def _write(moves: list[tuple[Item, str]]) -> set[str]:
    failed = set()
    for item, want in moves:
        try:
            item.kind.write(item, want)
        except OSError as exc:
            failed.add(item.key)
            level = logging.DEBUG if item.kind.name in ("task", "irq") else logging.WARNING
            log.log(level, "%s: cannot set CPUs %s: %s", item.label, want, exc.strerror or exc)
    return failed


def _names(group: list[Item]) -> str:
    more = f", +{len(group) - SHOWN} more" if len(group) > SHOWN else ""
    return ", ".join(i.label for i in group[:SHOWN]) + more


def _warn(run: _Pass, found: list[Item]) -> None:
    if run.by_hand:
        log.warning("changed since vmtune set them, left alone: %s", _names(run.by_hand))
    if run.cpus and any(i.kind.name == "task" and i.label.startswith("irqbalance[") for i in found):
        log.warning("irqbalance is running: it may move IRQs back onto the isolated CPUs %s "
                    "(stop it, or give it IRQBALANCE_BANNED_CPULIST)", cpuset.format(run.cpus))


def _report(moves: list[tuple[Item, str]], failed: set[str], cpus: frozenset[int], prefix: str) -> None:
    done = [item for item, _ in moves if item.key not in failed]
    if not done and not failed:
        return
    counts = Counter(i.kind.name for i in done)
    what = ", ".join(f"{n} {kind}(s)" for kind, n in sorted(counts.items()))
    where = f"off CPUs {cpuset.format(cpus)}" if cpus else "back (no CPU isolated)"
    skipped = f"; {len(failed)} refused (per-CPU kernel threads, managed IRQs, exited tasks)" if failed else ""
    log.info("%smove host work %s: %s%s", prefix, where, what or "nothing", skipped)
