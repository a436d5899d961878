"""Taking and dropping a lease, under the state lock: the host work of prepare, reconnect and release.

A lease (``prepare begin``; ``reconnect begin`` without the top-up and never refusing):

1. settle what a killed hook left (journal records made exact against sysfs), and reap the
   leases of domains that no longer run (alive.py), exactly as their release would;
2. refuse overlapping vCPU pins (or warn), and a lease that would leave no housekeeping CPU;
3. find what is missing: the hugepage shortfalls, and the host knobs and C-states (scope
   ``host``: every CPU's; scope ``pinned``: those of every lease's CPUs, not only this one's; with
   ``power_scope = "pinned"`` each lease's governor, EPP, floor and C-states by its profile, after
   each record is handed to the lease that owns its CPU now and the idle dedicated CPUs a lease
   takes are given back: power.py), verified, never assumed: a knob not recorded and not at its
   value gets a new record (the first lease records them all), a recorded knob found back at its
   original value is written again, one changed by hand since is left alone. A prepare or
   reconnect after any crash leaves the host fully tuned for every lease;
4. journal: commit the lease with every record it may leave (knob values before, pools' ``nr``
   before and target) before any sysfs write;
5. compact memory, raise the short pools, read back (pages.py); too few: lower them again, put the
   state file back as it was, refuse the start (one line);
6. apply the host knobs and the C-states (tuning.py, through the engine);
7. isolate the leases' CPUs (isolation/): journal, then move the host's tasks, IRQs, workqueues
   and cgroups off them;
8. commit the records as the kernel read them back (``final``: baseline.json too).

A Python error in 5-7 undoes this call's changes and puts the state file back; a kill leaves the
journal for the next call. A release (and a reap) shrinks the isolation to the CPUs the other
leases hold, drops the lease, passes C-state records of CPUs another lease still pins to that lease
and restores the rest, gives back the pages the lease added (journalled the same way), and the
last lease restores the host baseline. A release without a lease still tries again what a failed
restore of the isolation left.

A damaged state file, a state dir the hook may not trust, or a lock held past its cap: one line,
and a prepare is refused (exit 1); nothing is tuned through a state the hook cannot read.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from .. import cpuset
from ..config import Config, CStateScope, HugepagePolicy, IdleDedicated, Isolate, IsolateMethod, OnConflict, PowerScope
from ..host.sysfs import cpu_limit, online_cpus
from . import alive, engine, isolation, pages, power, tuning
from .document import Damaged, Lease, State, pool_step
from .engine import Knob
from .kinds import Pool, extra_options, partition
from .kinds.partition import PartitionClaim
from .record import Record
from .statedir import LockTimeout, StateDir, Unsafe

log = logging.getLogger("vmtune.hoststate")
TROUBLE = (Damaged, LockTimeout, Unsafe)


class LeaseRequest(NamedTuple):
    """A latency domain asking for a lease: what the hook read of its XML."""

    name: str
    uuid: str  # its UUID, else ``name:NAME``: the lease's key
    profile: str | None
    cpus: frozenset[int]  # host CPUs the vCPUs are pinned to
    pages: Mapping[Pool, int] = {}  # hugepages needed per pool (never changed)
    error: str | None = None  # what is wrong with its pins or nodesets (the prepare is refused)
    dedicated: bool = True  # its profile pins vCPUs to CPUs of their own (Lease.dedicated)


@dataclass
class Missing:
    """What a lease's call found missing on the host: journal records of host knobs (``fresh``) and,
    with scope pinned, of C-states per lease key (``cstates``) and with power scope pinned of each
    lease's cpufreq knobs (``power``); recorded knobs back at their original value (``again``)."""

    fresh: list[Record] = field(default_factory=list)
    again: list[Knob] = field(default_factory=list)
    cstates: dict[str, list[Record]] = field(default_factory=dict)
    power: dict[str, list[Record]] = field(default_factory=dict)
    idle: list[Record] = field(default_factory=list)  # of the dedicated CPUs no lease holds

    @property
    def journal(self) -> list[Record]:
        return self.fresh + [r for by in (self.power, self.cstates) for records in by.values() for r in records] \
            + self.idle

    def __len__(self) -> int:
        return len(self.journal) + len(self.again)


def _settled(records: list[Record], journal: list[Record], applied: dict) -> list[Record]:
    """``records`` with the ``journal`` records among them replaced by what was applied."""
    ids = {id(r) for r in journal}
    return [r for r in records if id(r) not in ids] + [applied[r.key] for r in journal if r.key in applied]


class Leases:
    """One call's view of the host and its leases: the roots, the state folder, the settings, dry run."""

    def __init__(self, cfg: Config, roots, dry_run: bool = False):
        self.cfg = cfg
        self.roots = roots
        self.sysfs = roots.sysfs
        self.dry_run = dry_run
        self.settings = cfg.hook
        self.store = StateDir(roots.state, dry_run=dry_run, sysfs=self.sysfs, limit=cpu_limit(self.sysfs),
                              lock_timeout=self.settings.lock_timeout_s)
        self.power = self.settings.power_scope == PowerScope.PINNED  # power.py: each lease's CPUs, its profile's
        self.pinned = self.settings.cstate_scope == CStateScope.PINNED or self.power
        # the dedicated CPUs no lease holds save power while others run (power scope pinned only)
        self.idle = self.power and self.settings.idle_dedicated == IdleDedicated.POWERSAVE and bool(cfg.dedicated_cpus)
        self.isolate = self.settings.isolate != IsolateMethod.OFF
        self.partition = self.settings.isolate in (IsolateMethod.PARTITION, IsolateMethod.AUTO)
        self.asked = self.settings.isolate == IsolateMethod.PARTITION  # else auto: no warning where none can be made

    def trouble(self, name: str, exc: Exception, refuse: bool) -> int:
        """One line for a state the hook cannot use; 1 (refused) for a prepare, else 0."""
        advice = ""
        if isinstance(exc, Damaged):
            advice = "; " + (exc.advice or f"the last good state is {self.store.baseline_path}: `vmtune hook reap` "
                             "sets the damaged file aside and goes on from it")
        log.error("%s: %s: %s%s", name, "refusing to start" if refuse else "nothing tuned or restored", exc, advice)
        return 1 if refuse else 0

    # -- isolation -----------------------------------------------------------------------------
    def _isolated(self, held: frozenset[int]) -> frozenset[int]:
        """The CPUs to keep the host's work off: the leases' vCPU CPUs ``held`` less the reserved ones."""
        if not self.isolate or not held:
            return frozenset()
        return (held - isolation.reserved(self.sysfs, self.cfg)) & frozenset(online_cpus(self.sysfs))

    def _isolate(self, state: State, cpus: frozenset[int], but: str | None = None) -> None:
        """Make the host's isolation match ``cpus`` and the leases' partitions (but ``but``'s),
        journal first (isolation.reconcile). A partition the kernel does not hold as isolated is
        undone at once, with a warning: its lease keeps today's isolation."""
        def journal(record) -> None:
            state.isolation = record
            self.store.commit(state)

        def parted() -> list[Lease]:
            """The leases (but ``but``'s) whose started domain claims partitions."""
            return [lease for key, lease in sorted(state.leases.items())
                    if key != but and lease.partition and lease.qemu is not None]

        def reconcile(dry_run: bool) -> None:
            claims = [PartitionClaim(lease.qemu.pid, lease.partition) for lease in parted()]  # type: ignore[union-attr]
            state.isolation = isolation.reconcile(state.isolation, cpus, self.roots, journal, dry_run=dry_run,
                                                  extras=self.settings.extras(extra_options()), claims=claims,
                                                  evict=self.settings.isolate_pinned == Isolate.ON)

        reconcile(self.dry_run)
        if self.dry_run:
            return
        bad = False
        for lease in parted():
            why = partition.refused(self.roots, lease.qemu.pid, lease.partition)  # type: ignore[union-attr]
            if why:
                log.warning("%s: no isolated partition: %s; undone, today's isolation holds CPUs %s", lease.name,
                            why, cpuset.format(lease.partition))
                lease.partition = frozenset()
                bad = True
        if bad:
            reconcile(False)

    def _partition(self, state: State, key: str) -> bool:
        """``started`` with ``isolate = "partition"``: the lease's vCPU groups become isolated cpuset
        partitions, read back from the kernel (else undone, with one warning); True if the state changed."""
        lease = state.leases[key]
        if lease.partition:  # made already, or a call killed half-way: completed (verify, never assume)
            self._isolate(state, self._isolated(state.held_cpus()))
            return True
        cpus = self._isolated(lease.cpus) if lease.dedicated else frozenset()
        why = partition.supported(self.roots.cgroupfs)
        if why is None and (lease.qemu is None or not cpus):
            why = "it has no started QEMU" if lease.qemu is None else "it holds no isolated CPU of its own"
        if why is not None:
            log.log(logging.WARNING if self.asked else logging.DEBUG,
                    "%s: no isolated partition: %s; today's isolation holds its CPUs", lease.name, why)
            return False
        lease.partition = cpus
        self._isolate(state, self._isolated(state.held_cpus()))
        if lease.partition:
            log.info("%s: CPUs %s are an isolated cpuset partition (cpuset.cpus.isolated: %s)", lease.name,
                     cpuset.format(lease.partition), cpuset.format(partition.isolated(self.roots)) or "-")
        return True

    # -- what a killed hook left, and leases whose domain is gone --------------------------------
    def _settle(self, state: State) -> bool:
        """Journal records left by a killed hook, made exact; True if any."""
        changed = False
        groups = [state.baseline or [], state.idle] + [g for lease in state.leases.values()
                                                       for g in (lease.cstates, lease.power)]
        if any(rec.pending for group in groups for rec in group):
            changed = True
            if state.baseline:
                state.baseline = engine.settle_journal(self.roots, state.baseline)
            state.idle = engine.settle_journal(self.roots, state.idle)
            for lease in state.leases.values():
                lease.cstates = engine.settle_journal(self.roots, lease.cstates)
                lease.power = engine.settle_journal(self.roots, lease.power)
            log.warning("settled the records of a hook that was interrupted")
        for lease in state.leases.values():
            changed = pages.settle_steps(self.sysfs, lease) or changed
        if state.unrestored and not self.dry_run:  # restores that failed before: tried again first
            kept: list[Record] = []
            engine.restore(self.roots, state.unrestored, failed=kept)
            changed = changed or kept != state.unrestored
            state.unrestored = kept
        return changed

    def _stale(self, state: State, skip: str | None = None) -> list[tuple[str, str]]:
        """(key, why) of the leases but ``skip`` whose domain libvirt no longer runs (alive.py): a
        lease whose QEMU was recorded by that process alone, the others by libvirt's status files.
        Those, with a warning, are not judged when libvirt's run dir does not exist: nothing is
        reaped blind."""
        folder = self.roots.libvirt
        found, blind = alive.stale(folder, alive.PROC, {k: v for k, v in state.leases.items() if k != skip},
                                   time.time())
        if blind:
            log.warning("libvirt's run dir %s does not exist: cannot tell which domains run, no lease reaped but "
                        "those whose QEMU is recorded (set VMTUNE_LIBVIRT_RUNDIR in the hook's vmtune.env)", folder)
        return sorted(found.items())

    def _reap(self, state: State, skip: str | None) -> int:
        """Drop, as their release would, the leases whose domain libvirt no longer runs."""
        stale = self._stale(state, skip)
        for key, why in stale:
            log.warning("%s: lease reaped: %s", state.leases[key].name, why)
            self._drop(state, key)
        return len(stale)

    def reap(self) -> list[str]:
        """``vmtune hook reap``: set a damaged state aside and go on from the last good copy, reap
        the leases of domains that no longer run, and complete the isolation of the others' CPUs
        (what a restarted irqbalance lost). Returns what was done, one line each."""
        done: list[str] = []
        with self.store.lock():
            state = self._read_settled(done)
            for key, why in self._stale(state):
                done.append(f"reaped the lease of {state.leases[key].name}: {why}")
                self._drop(state, key)
            if state.leases or state.isolation is not None:
                left = copy.deepcopy(state.isolation)
                self._isolate(state, self._isolated(state.held_cpus()))
                if state.isolation != left:
                    done.append("completed the isolation of the leases' CPUs")
            self.store.commit(state, final=True)
        return done

    def restore_all(self) -> list[str]:
        """``vmtune hook restore``: release every lease, those of running domains too, and restore
        the host to what it was before the first (the package's removal runs it, so that no host is
        left tuned with no vmtune to untune it). Returns what was done, one line each."""
        done: list[str] = []
        with self.store.lock():
            state = self._read_settled(done)
            stale = dict(self._stale(state))
            for key in sorted(state.leases, key=lambda k: state.leases[k].since, reverse=True):
                name = state.leases[key].name
                self._drop(state, key, complete=False)
                done.append(f"released the lease of {name}: " + (stale[key] if key in stale else
                                                                  "its domain still runs, no longer tuned"))
            if state.isolation is not None:
                self._isolate(state, frozenset())
            if state.baseline is not None:
                engine.restore(self.roots, state.baseline, dry_run=self.dry_run, failed=state.unrestored)
                state.baseline = None
                done.append("restored the host state")
            if state.unrestored:
                kept: list[Record] = []
                engine.restore(self.roots, state.unrestored, failed=kept)
                state.unrestored = kept
            self.store.commit(state, final=True)
            for rec in state.unrestored:
                done.append(f"could not restore {rec.key.text}: the next call tries again; check it by hand")
        return done

    def _read_settled(self, done: list[str]) -> State:
        """Under the lock, for a reap or a restore: the state, a damaged one set aside for the last
        good copy, with what a killed hook left settled; what was done goes to ``done``."""
        try:
            state = self.store.read()
        except Damaged as exc:
            done.append(f"damaged: {exc}")
            state = self._recover(done)
        if self._settle(state):
            done.append("settled the journal of an interrupted hook")
        return state

    def _recover(self, done: list[str]) -> State:
        """After damage, under the lock: set ``state.json`` aside and go on from ``baseline.json``; if
        that is damaged too, set it aside and go on from empty (the operator was told to check)."""
        if os.path.lexists(self.store.path):
            done.append(f"set aside as {self.store.set_aside(self.store.path)}")
        try:
            state = self.store.read_baseline() or State()
            done.append(f"going on from {self.store.baseline_path} ({len(state.leases)} lease(s))")
            return state
        except Damaged as again:
            done.append(f"{again}; set aside as {self.store.set_aside(self.store.baseline_path)}: the "
                        "original host values are lost, check governor, C-states and IRQs by hand")
            return State()

    # -- started: the domain's QEMU runs -------------------------------------------------------
    def started(self, uuid: str | None, name: str) -> int:
        """``started begin``: record the lease's QEMU (pid and start time), so that from now on the
        lease is stale as soon as that process is gone (alive.py). Never refuses: 0. The hook calls it
        only when the state holds something (``install.reaper.idle``, the reap's fast path): with no
        lease held, nothing is locked or written."""
        try:
            with self.store.locked() as state:
                key = state.find(uuid, name)
                changed = key is not None and self._record_qemu(state, key)
                if key is not None and self.partition:
                    changed = self._partition(state, key) or changed
                if changed and not self.dry_run:
                    self.store.commit(state, final=True)
        except TROUBLE as exc:
            return self.trouble(name, exc, refuse=False)
        return 0

    def _record_qemu(self, state: State, key: str) -> bool:
        """Record the QEMU that libvirt runs for the lease ``key``; True if the lease changed."""
        lease = state.leases[key]
        qemu = alive.qemu_of(self.roots.libvirt, alive.PROC, key, lease.name)
        if qemu is None:
            log.warning("%s: libvirt names no QEMU of this domain yet: its lease keeps the start's grace", lease.name)
            return False
        if qemu == lease.qemu:
            return False
        lease.qemu = qemu
        log.info("%s: its QEMU is pid %d: the lease ends with it", lease.name, qemu.pid)
        return True

    # -- prepare / reconnect -------------------------------------------------------------------
    def lease(self, dom: LeaseRequest, refuse_conflicts: bool, top_up: bool = True, running: bool = False,
              owner: alive.Qemu | None = None) -> int:
        """Record the lease and tune the host; 1 if refused (pins overlap, too few hugepages, no
        housekeeping CPU, a state the hook cannot use). ``owner``: the process whose life is the
        lease's (``vmtune verify``'s own, keyed ``alive.OWN``), recorded with it, journal first."""
        try:
            with self.store.locked() as state:
                return self._lease(state, dom, refuse_conflicts, top_up, running, owner)
        except TROUBLE as exc:
            return self.trouble(dom.name, exc, refuse_conflicts)

    def _lease(self, state: State, dom: LeaseRequest, refuse: bool, top_up: bool, running: bool,
               owner: alive.Qemu | None = None) -> int:
        if (self._settle(state) | bool(self._reap(state, skip=dom.uuid))) and not self.dry_run:
            self.store.commit(state, final=True)
        if not self._admit(state, dom, refuse):
            return 1
        mine = dom.cpus if dom.dedicated else frozenset()
        iso: frozenset[int] | None = self._isolated(state.held_cpus(but=dom.uuid) | mine)
        if iso and not set(online_cpus(self.sysfs)) - iso:
            if refuse:
                log.error("%s: refusing to start: isolating CPUs %s would leave no CPU for the host's own work "
                          "(set reserved_cpus, or [hook] isolate = \"off\")", dom.name, cpuset.format(iso))
                return 1
            log.warning("%s: isolating CPUs %s would leave no CPU for the host: not isolated", dom.name,
                        cpuset.format(iso))
            iso = None
        original = copy.deepcopy(state)
        others = [lease for key, lease in state.leases.items() if key != dom.uuid]
        shorts: dict[Pool, tuple[int, int]] = {}
        if top_up and dom.pages and self.settings.hugepages == HugepagePolicy.TOP_UP:
            try:
                shorts = pages.shortfalls(self.sysfs, dict(dom.pages), others)
            except pages.Shortage as exc:
                log.error("%s: refusing to start: %s", dom.name, exc)
                return 1
        first = state.baseline is None
        lease = state.add(dom.uuid, dom.name, dom.profile or "", dom.cpus, dom.dedicated, running)
        if running:  # reconnect: the domain runs, its QEMU is there to record
            self._record_qemu(state, dom.uuid)
        if owner is not None:
            lease.qemu = owner
        pages.record_needs(lease, dom.pages)
        pages.journal(lease, shorts)
        return self._tune(state, original, lease, first, shorts, others, iso)

    def _admit(self, state: State, dom: LeaseRequest, refuse: bool) -> bool:
        """False (one error line) when the domain's vCPU pins overlap another lease's and overlaps
        are refused; a warning when they are allowed."""
        clashes = state.conflicts(dom.uuid, dom.cpus) if dom.dedicated else []
        if not clashes:
            return True
        what = "; ".join(f"domain {other!r} holds CPUs {cpuset.format(cpus)}" for other, cpus in clashes)
        if refuse and self.settings.on_conflict != OnConflict.WARN:
            log.error("%s: refusing to start: its vCPU pins overlap another latency domain: %s", dom.name, what)
            return False
        log.warning("%s: vCPU pins overlap another latency domain: %s", dom.name, what)
        return True

    def _tune(self, state: State, original: State, lease: Lease, first: bool, shorts: dict[Pool, tuple[int, int]],
              others: list[Lease], iso: frozenset[int] | None) -> int:
        """Journal, top up, complete the host's tuning for every lease, isolate, commit (steps 4-8)."""
        woken = self._wake(state)
        self._reconcile(state)
        todo = self._missing(state)
        if (todo or shorts) and not self.dry_run:
            self.store.commit(state)  # journal first: the records exist before any value changes
        try:
            if not pages.top_up(self.roots, lease, shorts, others, self.dry_run):
                self.store.commit(original, final=True)
                self._sleep(woken)
                return 1
            if first:
                log.info("%s: first latency lease: saving the host state and tuning the host", lease.name)
            else:
                # power scope pinned: a new lease's CPUs are tuned for it, which is not a lack
                lacking = len(todo.fresh) + len(todo.again) if self.power else len(todo)
                if lacking:
                    log.warning("%s: the host was not fully tuned (%d value(s) missing): completing it", lease.name,
                                lacking)
            self._complete(state, todo)
            if iso is not None:
                self._isolate(state, iso)
            self.store.commit(state, final=True)
        except BaseException:
            log.error("%s: cannot take the lease; undoing its changes", lease.name)
            self._undo(todo.journal, shorts, others)
            self._undo_isolation(state, original)
            try:
                self.store.commit(original, final=True)
                self._sleep(woken)
            except Exception:  # noqa: BLE001,S110 - the journal stays; the next call settles it
                pass
            raise
        log.info("%s: lease taken (CPUs %s, %d lease(s))", lease.name, cpuset.format(lease.cpus) or "-",
                 len(state.leases))
        return 0

    def _missing(self, state: State) -> Missing:
        """What the host lacks for every lease (verify, never assume), its journal records already in
        ``state``: host knobs nobody recorded go into the baseline; with scope pinned, each lease's
        CPUs' C-states nobody recorded go into the earliest lease pinning them; with power scope
        pinned, each lease's power knobs into it (power.py), and the idle dedicated CPUs' into the
        state's ``idle``."""
        latency = self.settings.max_cstate_latency_us
        host = tuning.knobs(self.sysfs, max_cstate_latency_us=latency, ksm=self.settings.ksm, cstates=not self.pinned,
                            cpufreq=not self.power, uncore=self.settings.uncore)
        fresh, again = engine.complete(self.roots, state.baseline or [], host)
        cstates: dict[str, list[Record]] = {}
        freq: dict[str, list[Record]] = {}
        if self.power:
            freq, cstates, more = power.for_leases(self.roots, state.leases, self.settings, self.cfg.profiles_dir)
            again += more
        elif self.pinned:
            cstates, more = tuning.cstates_for_leases(self.roots, state.leases, latency)
            again += more
        state.baseline = (state.baseline or []) + fresh
        for key, records in cstates.items():
            state.leases[key].cstates += records
        for key, records in freq.items():
            state.leases[key].power += records
        idle: list[Record] = []
        if self.idle:
            idle, more = engine.complete(self.roots, state.idle, self._idle_knobs(state))
            state.idle += idle
            again += more
        return Missing(fresh, again, cstates, freq, idle)

    def _idle_knobs(self, state: State) -> list[Knob]:
        return power.idle_knobs(self.sysfs, power.idle_cpus(self.sysfs, self.cfg.dedicated_cpus, state.leases))

    def _reconcile(self, state: State, loose: list[tuple[str, Record]] = ()) -> None:
        """Power scope pinned: each lease's records to the lease that owns their CPU now, the rest
        (and ``loose``: a lease's that goes) written back (power.reconcile). Scope host: the
        leases' power records (of a pinned scope since switched off) and ``loose`` ones written
        back; the host-wide tuning then completes what it wants (a lease's C-states stay its own,
        as ``cstate_scope`` says)."""
        if self.power:
            back = power.reconcile(state.leases, self.sysfs, self.settings, self.cfg.profiles_dir, loose)
        else:
            back = [rec for lease in state.leases.values() for rec in lease.power]
            back += [rec for group, rec in loose if group == "power"]
            for lease in state.leases.values():
                lease.power = []
            if not back:
                return
        engine.restore(self.roots, back, dry_run=self.dry_run, failed=state.unrestored)

    def _wake(self, state: State) -> list[Record]:
        """Give back the idle records of dedicated CPUs a lease holds now (or of all, with no lease),
        before the leases' own values are taken: what a lease records is then what the CPU had.
        Returns those records (``_sleep`` puts them back where the lease is not taken after all)."""
        if not state.idle:
            return []
        keep = {k.key for k in self._idle_knobs(state)} if self.idle else set()
        back = [r for r in state.idle if r.key not in keep]
        if back:
            state.idle = [r for r in state.idle if r.key in keep]
            engine.restore(self.roots, back, dry_run=self.dry_run, failed=state.unrestored)
        return back

    def _sleep(self, woken: list[Record]) -> None:
        """A start refused or failed after ``_wake``, the state as before it committed (its idle
        records kept): those CPUs idle again as the records say, not at the next call."""
        if woken:
            engine.apply(self.roots, [Knob(r.key, r.after) for r in woken], dry_run=self.dry_run)

    def _complete(self, state: State, todo: Missing) -> None:
        """Write what is missing; each journal record becomes what the kernel read back (or goes)."""
        wanted = [Knob(r.key, r.after) for r in todo.journal] + todo.again
        applied = {r.key: r for r in engine.apply(self.roots, wanted, dry_run=self.dry_run)}
        state.baseline = _settled(state.baseline or [], todo.fresh, applied)
        for key, records in todo.cstates.items():
            lease = state.leases[key]
            lease.cstates = _settled(lease.cstates, records, applied)
        for key, records in todo.power.items():
            lease = state.leases[key]
            lease.power = _settled(lease.power, records, applied)
        state.idle = _settled(state.idle, todo.idle, applied)

    def _undo(self, journal: list[Record], shorts: dict[Pool, tuple[int, int]], others: list[Lease]) -> None:
        """Best effort after an error half-way: the journalled knobs and this call's pool raises."""
        try:
            engine.restore(self.roots, engine.settle_journal(self.roots, copy.deepcopy(journal)), dry_run=self.dry_run)
            if not self.dry_run:
                pages.undo(self.sysfs, shorts, others)
        except Exception as exc:  # noqa: BLE001 - the journal on disk still says what to undo
            log.error("undoing failed too: %s", exc)

    def _undo_isolation(self, state: State, original: State) -> None:
        """After an error half-way: back to the isolation of the leases before this call."""
        if state.isolation == original.isolation:
            return
        try:
            self._isolate(state, self._isolated(original.held_cpus()))
        except Exception as exc:  # noqa: BLE001 - the journal on disk still says what to undo
            log.error("undoing the isolation failed too: %s", exc)
        original.isolation = state.isolation

    # -- release -------------------------------------------------------------------------------
    def release(self, uuid: str | None, name: str) -> int:
        try:
            with self.store.locked() as state:
                changed = self._settle(state)
                key = state.find(uuid, name)
                if key is None and (not uuid or uuid.startswith("name:")):  # no UUID: by name only
                    for kept in state.named(name):
                        log.warning("%s: released without a UUID: the lease of %s under UUID %s is kept (it is "
                                    "reaped once its domain no longer runs)", name, name, kept)
                changed = bool(self._reap(state, skip=key)) or changed
                if key is not None:
                    self._drop(state, key)
                    changed = True
                elif state.isolation is not None:  # what a failed restore left: tried again
                    left = copy.deepcopy(state.isolation)
                    self._isolate(state, self._isolated(state.held_cpus()))
                    changed = changed or state.isolation != left
                if changed:
                    self.store.commit(state, final=True)
        except TROUBLE as exc:
            return self.trouble(name, exc, refuse=False)
        return 0

    def _drop(self, state: State, key: str, complete: bool = True) -> None:
        """Everything a release does for the lease ``key``, but the final commit; with power scope
        pinned, what the other leases then lack is completed (unless ``complete`` is false: they go too)."""
        lease = state.leases[key]
        others = [other for k, other in state.leases.items() if k != key]
        give = pages.to_give_back(self.sysfs, lease, others)
        if give and not self.dry_run:
            for k, (nr, n) in give.items():
                lease.hugepages[k].steps = [pool_step(k, nr, nr - n)]
            self.store.commit(state)  # journal first, as for the top-up
        # journal first: a kill in here leaves the lease, so the next release does it all again
        self._isolate(state, self._isolated(state.held_cpus(but=key)), but=key)
        del state.leases[key]
        if self.power:
            self._reconcile(state, [(group, rec) for group in ("power", "cstates") for rec in getattr(lease, group)])
        else:
            engine.restore(self.roots, self._hand_over(lease, state), dry_run=self.dry_run, failed=state.unrestored)
            self._reconcile(state, [("power", rec) for rec in lease.power])  # a pinned power scope's, since off
        self._wake(state)
        if self.power and state.leases and complete:  # what the heirs want at another value than the lease had
            todo = self._missing(state)
            if todo:
                if not self.dry_run:
                    self.store.commit(state)  # journal first
                self._complete(state, todo)
        for k, (nr, n) in give.items():
            if self.dry_run:
                log.info("dry run: would lower %s: %d -> %d", k.describe(), nr, nr - n)
                continue
            given = pages.lower(self.sysfs, k, nr, n)
            log.info("%s: gave back %d of the %d %s it added", lease.name, given, lease.hugepages[k].added,
                     k.describe())
        if not state.leases and state.baseline is not None:
            log.info("%s: last latency lease released: restoring the host state", lease.name)
            engine.restore(self.roots, state.baseline, dry_run=self.dry_run, failed=state.unrestored)
            state.baseline = None
        else:
            log.info("%s: lease released (%d left)", lease.name, len(state.leases))

    @staticmethod
    def _hand_over(lease: Lease, state: State) -> list[Record]:
        """The lease's C-state records to restore now; those of CPUs another lease still pins pass
        to that lease (the earliest), so the last lease on a CPU restores its original value."""
        back = []
        heirs = sorted(state.leases.values(), key=lambda other: other.since)
        for rec in lease.cstates:
            cpu = rec.key.cpu
            heir = next((o for o in heirs if cpu is not None and cpu in o.cpus), None)
            if heir is None:
                back.append(rec)
            else:
                heir.cstates.append(rec)
        return back
