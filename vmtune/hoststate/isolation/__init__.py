"""Keep the host's own work off the CPUs that running latency domains hold, and give them back.

The isolated set is the union of the leases' vCPU CPUs, less the host's reserved CPUs; every other
online CPU is the housekeeping set. ``reconcile(previous, cpus, roots, commit)`` makes the live host
match an isolated set and returns the new isolation record for the state file. It runs at every
prepare, reconnect and release, so a second lease extends the isolation, its release shrinks it,
and a reconnect completes whatever a crash left undone.

What moves (the isolation kinds, kinds/): every task that accepts a new affinity and is not a thread of a
libvirt-managed QEMU; every IRQ whose affinity can be written, and ``default_smp_affinity``; the
unbound workqueues' ``cpumask``; and the host's cgroups: with systemd on cgroup v2, ``AllowedCPUs``
of ``init.scope``, ``system.slice`` and ``user.slice`` (``systemctl set-property --runtime``);
on cgroup v2 without systemd, ``cpuset.cpus`` of every top-level group but libvirt's. Tasks in a
group that is narrowed as a whole are left to the cgroup. libvirt's machine groups are never touched.

Each item's new value is its original value less the isolated CPUs. An item whose original value
holds only isolated CPUs (pinned there on purpose) is left alone, and so is an item whose value
does not change. The record of a moved item keeps its original value (``before``) and what the
kernel read back after the write (``after``); an item found at neither was changed by hand and is
left alone, with a warning. The records are committed (``commit``) before the first write, so a
hook killed half-way leaves them, and the next call finishes the job: journal first, as for the
host knobs. A record stays until its item is restored or provably gone (moves.py), so a restore that
fails is tried again by the next prepare, release or reconnect.

After the writes, a *sweep* lists the tasks again, reading only threads not seen yet: a child
forked between the scan and its parent's write (with the parent's old mask), and the tasks of a
group whose write failed (they are moved one by one), are moved like the others. It repeats until a
round finds nothing to move, at most ``SWEEP_ROUNDS`` times. Tasks that inherited a mask the hook
imposed are widened by the history of imposed housekeeping sets (moves.py).

The kernel's own machinery is kept off too, each piece turned off by its ``[hook]`` extra:
``kernel.timer_migration``, ``vm.stat_interval``, ``kernel.watchdog_cpumask`` and every unbound
workqueue's ``cpumask`` (kinds/files.py). A running irqbalance (a process named ``irqbalance``,
whatever its cgroup) is told over its socket to ban the isolated CPUs (kinds/irqbalance.py); when
its socket does not answer, or that extra is off, the log says it may move IRQs back.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Collection, Iterable

from ... import cpuset
from ...host.sysfs import online_cpus
from ..document import Isolation
from ..engine import write
from ..kinds import GONE, KINDS, Irq, Item, Listing, files, in_section, tasks
from ..kinds.partition import PartitionClaim
from .moves import Move, Moves

log = logging.getLogger("vmtune.hoststate")

SHOWN = 3  # names per kind in a log line
SWEEP_ROUNDS = 3


def uptime(proc: str) -> float:
    try:
        with open(os.path.join(proc, "uptime"), encoding="ascii") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def reserved(sysfs: str, cfg) -> frozenset[int]:
    """The CPUs that always stay with the host: ``Host.reserved(cfg)`` on the host under ``sysfs``
    (the one rule); without a readable topology, only what the config names."""
    try:
        from ...host import Host

        return Host.from_sysfs(sysfs).reserved(cfg)
    except Exception as exc:  # noqa: BLE001 - no topology here: only what the config names
        log.debug("no host topology: %s", exc)
        return frozenset(getattr(cfg, "reserved_cpus", None) or ())


def groups(roots, online: frozenset[int]) -> list[Item]:
    """The host's cgroups the isolation narrows as a whole: systemd units, or cgroup v2 groups."""
    listing = Listing(roots, online, frozenset())
    return [item for kind in in_section("isolation") if kind.holds_tasks for item in kind.items(listing)]


def reconcile(previous: Isolation | None, cpus: frozenset[int], roots, commit: Callable[[Isolation], None],
              dry_run: bool = False, only: Collection[int] | None = None,
              extras: Collection[str] = (), claims: Collection[PartitionClaim] = (),
              evict: bool = False) -> Isolation | None:
    """Make the host match the isolated set ``cpus``; return the new isolation record (None: none).

    ``previous`` is the last record (from the state file); ``commit(journal)`` is called with the
    records before the first write. ``only`` limits the pass to these pids' tasks and nothing else
    (no IRQ, mask or group): tests that use the real ``/proc`` on their own processes. ``extras``:
    the extra items that are on (the kinds' ``extras``: sysctls, the watchdog's and the workqueues'
    masks, irqbalance); the records of one that is off are restored. ``claims``: the domains whose
    vCPU groups are to be isolated partitions (kinds/partition.py). ``evict``: a task pinned to
    isolated CPUs only moves to the others too (``[hook] isolate_pinned``).

    Every isolation kind lists its own items (``Kind.items``): the partitions first, then the groups
    that hold tasks (they cover their tasks), the swept kind (the tasks) last.
    """
    if not cpus and not claims and (previous is None or (not previous.records and not previous.pairs)):
        return None
    previous = previous or Isolation()
    online = frozenset(online_cpus(roots.sysfs))
    listing = Listing(roots, online, cpus, extras, claims, previous.records.keys(), only)
    # the partitions first (undone before systemd may turn the cpuset controller off), then the
    # groups that cover tasks, the swept kind (the tasks) last
    kinds = sorted(in_section("isolation"), key=lambda k: (not k.resets_affinity, not k.holds_tasks, k.swept))
    found = [] if only is not None else [i for k in kinds if not k.swept for i in k.items(listing)]
    listing.covered = {g.top for g in found if g.kind.holds_tasks}
    if only is None and cpus:
        for path in files.missing(roots, extras):
            log.warning("%s does not exist here: skipped", path)
    # the IRQs that existed when the isolation began: any other one got default_smp_affinity since
    irqs = (previous.irqs if previous.cpus or previous.pairs
            else frozenset(i.key.number for i in found if isinstance(i.key, Irq)))
    def enabled(key) -> bool:
        extra = KINDS[key.kind].extra(key)
        return extra is None or extra in extras

    run = Moves(previous, cpus, online, irqs, uptime(roots.proc), enabled, evict)
    swept = [k for k in kinds if k.swept]
    listed = [i for k in swept for i in k.items(listing)]
    for item in found + listed:
        run.decide(item)
    _resolve(run, roots, online)
    _warn(run)
    if dry_run:
        _report(run.moves, set(), cpus, "dry run: would ")
        return previous if previous.cpus or previous.records else None
    failed = _apply(run, list(run.moves), commit)
    if any(m.item.kind.resets_affinity for m in run.moves if m.item.key not in failed):
        _reaffine(run, listed)
    uncovered = {m.item.top for m in run.moves
                 if m.narrowed and m.item.key in failed and m.item.kind.holds_tasks}
    if uncovered:
        log.warning("%s: cannot narrow; moving their tasks one by one", ", ".join(sorted(uncovered)))
    listing.covered -= uncovered
    settled = _sweep(run, listing, swept, commit, failed)
    _report(run.moves, failed, cpus, "")
    if run.kept:
        log.warning("not restored yet, kept for the next call: %s", _names(run.kept))
    return run.final(settled)


def _resolve(run: Moves, roots, online: frozenset[int]) -> None:
    """The records whose item no listing gave: looked up by key (its kind's lookup), decided,
    dropped or kept."""
    for key, rec in run.unseen():
        found = KINDS[key.kind].lookup(key, roots, online)
        if found is GONE:
            run.gone(key)
        elif found is None:
            run.keep(key, rec)
        else:
            run.decide(found)


def _sweep(run: Moves, listing: Listing, swept: list, commit: Callable[[Isolation], None], failed: set) -> bool:
    """List the swept kinds (the tasks) again for items not read yet, and move them; True once a
    round finds none."""
    listing.known |= {str(k.tid) for k in run.seen if isinstance(k, tasks.Task)}  # looked up by key
    for _ in range(SWEEP_ROUNDS):
        start = len(run.moves)
        for item in [i for k in swept for i in k.items(listing)]:
            run.decide(item)
        if len(run.moves) == start:
            return True
        failed |= _apply(run, run.moves[start:], commit)
    log.warning("tasks kept appearing with CPUs to move after %d sweeps: some may stay where they are", SWEEP_ROUNDS)
    return False


def _apply(run: Moves, moves: list[Move], commit: Callable[[Isolation], None]) -> set:
    """Journal, then write each move and read back what the kernel made of it; the keys that failed."""
    if not moves:
        return set()
    commit(run.journal())
    failed = set()
    for move in moves:
        item = move.item
        try:
            back = write(item, move.want)
        except OSError as exc:
            failed.add(item.key)
            kept = run.refused(move, exc)
            level = logging.DEBUG if item.kind.quiet and not kept else logging.WARNING
            log.log(level, "%s: cannot set %s: %s", item.label, move.want or "(empty)", exc.strerror or exc)
            continue
        run.written(move, back)
    return failed


def _reaffine(run: Moves, listed: list[Item]) -> None:
    """After a write that made the kernel reset tasks' affinities (``Kind.resets_affinity``): each
    listed task the pass did not move gets the affinity it had when listed."""
    moved = {m.item.key for m in run.moves}
    back = 0
    for item in listed:
        if item.key in moved:
            continue
        now = item.kind.read(item)
        if now is None or item.same(now, item.raw):
            continue
        try:
            write(item, item.raw)
            back += 1
        except OSError:
            continue  # exited, or its old CPUs are a partition's now
    if back:
        log.info("gave %d task(s) back the affinity the kernel reset when the partition changed", back)


def _names(labels: Iterable[str]) -> str:
    group = list(labels)
    more = f", +{len(group) - SHOWN} more" if len(group) > SHOWN else ""
    return ", ".join(group[:SHOWN]) + more


def _warn(run: Moves) -> None:
    if run.by_hand:
        log.warning("changed since vmtune set them, left alone: %s", _names(i.label for i in run.by_hand))


def _report(moves: list[Move], failed: set, cpus: frozenset[int], prefix: str) -> None:
    done = [m.item for m in moves if m.item.key not in failed]
    if not done and not failed:
        return
    counts = Counter(i.key.kind for i in done)
    what = ", ".join(f"{n} {kind}(s)" for kind, n in sorted(counts.items()))
    where = f"off CPUs {cpuset.format(cpus)}" if cpus else "back (no CPU isolated)"
    quiet = all(m.item.kind.quiet for m in moves if m.item.key in failed)
    why = " (per-CPU kernel threads, managed IRQs, exited tasks)" if quiet else " (see above)"
    skipped = f"; {len(failed)} refused{why}" if failed else ""
    log.info("%smove host work %s: %s%s", prefix, where, what or "nothing", skipped)
