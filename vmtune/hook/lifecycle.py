"""Taking and dropping a lease, under the state lock: the host work of prepare, reconnect and release.

A lease (``prepare begin``; ``reconnect begin`` without the top-up and never refusing):

1. settle what a killed hook left (journal records made exact against sysfs), and reap the
   leases of domains that no longer run (alive.py), exactly as their release would;
2. refuse overlapping vCPU pins (or warn), and a lease that would leave no housekeeping CPU;
3. plan: the hugepage shortfalls, the pinned CPUs' C-states (scope ``pinned``), and the host
   knobs, verified, never assumed: a knob not recorded and not at its value gets a new record (the
   first lease records them all), a recorded knob found back at its original value is written again,
   one changed by hand since is left alone. A prepare after any crash leaves the host fully tuned;
4. journal: commit the lease with every record it may leave (knob values before, pools' ``nr``
   before and target) before any sysfs write;
5. compact memory, raise the short pools, read back; too few: lower them again, put the state file
   back as it was, refuse the start (one line);
6. apply the host knobs and the C-states;
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

from .. import cpuset
from . import alive, hoststate, hugepages, isolation, topup
from .leases import LOCK_TIMEOUT_S, Damaged, LockTimeout, Store, Unsafe
from .state import KnobRecord, Lease, State

log = logging.getLogger("vmtune.hook")
TROUBLE = (Damaged, LockTimeout, Unsafe)


class Hook:
    """One hook call's view of the host: sysfs root, state store, config, dry run."""

    def __init__(self, cfg, sysfs: str | None = None, store: Store | None = None, dry_run: bool | None = None):
        self.cfg = cfg
        self.dry_run = os.environ.get("VMTUNE_DRY_RUN", "") not in ("", "0") if dry_run is None else dry_run
        self.sysfs = sysfs or os.environ.get("VMTUNE_SYSFS") or "/sys"
        self.settings = dict(cfg.hook)
        self.store = store or Store(dry_run=self.dry_run, sysfs=self.sysfs, limit=hoststate.cpu_limit(self.sysfs),
                                    lock_timeout=float(self.settings.get("lock_timeout_s", LOCK_TIMEOUT_S)))
        self.max_latency = int(self.settings.get("max_cstate_latency_us", hoststate.DEFAULT_MAX_CSTATE_LATENCY_US))
        self.pinned = self.settings.get("cstate_scope", "host") == "pinned"
        self.isolate = self.settings.get("isolate", "on") != "off"
        self.roots = isolation.Roots.from_env(self.sysfs, hugepages.procfs_root(self.sysfs))

    def trouble(self, name: str, exc: Exception, refuse: bool) -> int:
        """One line for a state the hook cannot use; 1 (refused) for a prepare, else 0."""
        advice = ""
        if isinstance(exc, Damaged):
            advice = (f"; the last good state is {self.store.baseline_path}: `vmtune hook reap` sets the damaged "
                      "file aside and goes on from it")
        log.error("%s: %s: %s%s", name, "refusing to start" if refuse else "nothing tuned or restored", exc, advice)
        return 1 if refuse else 0

    # -- isolation -----------------------------------------------------------------------------
    def _isolated(self, held: frozenset[int]) -> frozenset[int]:
        """The CPUs to keep the host's work off: the leases' vCPU CPUs ``held`` less the reserved ones."""
        if not self.isolate or not held:
            return frozenset()
        return (held - isolation.reserved(self.sysfs, self.cfg)) & frozenset(hoststate.online_cpus(self.sysfs))

    def _isolate(self, state: State, cpus: frozenset[int]) -> None:
        """Make the host's isolation match ``cpus``, journal first (isolation.reconcile)."""
        def journal(record) -> None:
            state.isolation = record
            self.store.commit(state)

        state.isolation = isolation.reconcile(state.isolation, cpus, self.roots, journal, dry_run=self.dry_run)

    # -- what a killed hook left, and leases whose domain is gone --------------------------------
    def _settle(self, state: State) -> bool:
        """Journal records left by a killed hook, made exact; True if any."""
        changed = False
        groups = [state.baseline or []] + [lease.cstates for lease in state.leases.values()]
        if any(rec.pending for group in groups for rec in group):
            changed = True
            if state.baseline:
                state.baseline = hoststate.settle(self.sysfs, state.baseline)
            for lease in state.leases.values():
                lease.cstates = hoststate.settle(self.sysfs, lease.cstates)
            log.warning("settled the records of a hook that was interrupted")
        for lease in state.leases.values():
            changed = hugepages.settle(self.sysfs, lease) or changed
        return changed

    def _reap(self, state: State, skip: str | None) -> int:
        """Drop, as their release would, the leases whose domain libvirt no longer runs."""
        folder, now, reaped = self.roots.libvirt, time.time(), 0
        for key, lease in sorted(state.leases.items()):
            why = None if key == skip else alive.why_stale(folder, alive.PROC, key, lease.name, lease.since, now)
            if why:
                log.warning("%s: lease reaped: %s", lease.name, why)
                self._drop(state, key)
                reaped += 1
        return reaped

    def reap(self) -> list[str]:
        """``vmtune hook reap``: set a damaged state aside and go on from the last good copy, then
        reap the leases of domains that no longer run. Returns what was done, one line each."""
        done: list[str] = []
        with self.store.lock():
            try:
                state = self.store.read()
            except Damaged as exc:
                done.append(f"damaged: {exc}")
                if os.path.lexists(self.store.path):
                    done.append(f"set aside as {self.store.set_aside(self.store.path)}")
                try:
                    state = self.store.read_baseline() or State()
                    done.append(f"going on from {self.store.baseline_path} ({len(state.leases)} lease(s))")
                except Damaged as again:
                    done.append(f"{again}; set aside as {self.store.set_aside(self.store.baseline_path)}: the "
                                "original host values are lost, check governor, C-states and IRQs by hand")
                    state = State()
            if self._settle(state):
                done.append("settled the journal of an interrupted hook")
            for key in sorted(state.leases):
                lease = state.leases[key]
                why = alive.why_stale(self.roots.libvirt, alive.PROC, key, lease.name, lease.since, time.time())
                if why:
                    done.append(f"reaped the lease of {lease.name}: {why}")
                    self._drop(state, key)
            self.store.commit(state, final=True)
        return done

    # -- prepare / reconnect -------------------------------------------------------------------
    def lease(self, dom, refuse_conflicts: bool, top_up: bool = True) -> int:
        """Record the lease and tune the host; 1 if refused (pins overlap, too few hugepages, no
        housekeeping CPU, a state the hook cannot use)."""
        try:
            with self.store.locked() as state:
                return self._lease(state, dom, refuse_conflicts, top_up)
        except TROUBLE as exc:
            return self.trouble(dom.name, exc, refuse_conflicts)

    def _lease(self, state: State, dom, refuse: bool, top_up: bool) -> int:
        if (self._settle(state) | bool(self._reap(state, skip=dom.uuid))) and not self.dry_run:
            self.store.commit(state, final=True)
        clashes = state.conflicts(dom.uuid, dom.cpus)
        if clashes:
            what = "; ".join(f"domain {other!r} holds CPUs {cpuset.format(cpus)}" for other, cpus in clashes)
            if refuse and self.settings.get("on_conflict", "refuse") != "warn":
                log.error("%s: refusing to start: its vCPU pins overlap another latency domain: %s", dom.name, what)
                return 1
            log.warning("%s: vCPU pins overlap another latency domain: %s", dom.name, what)
        iso: frozenset[int] | None = self._isolated(state.held_cpus() | dom.cpus)
        if iso and not set(hoststate.online_cpus(self.sysfs)) - iso:
            if refuse:
                log.error("%s: refusing to start: isolating CPUs %s would leave no CPU for the host's own work "
                          "(set reserved_cpus, or [hook] isolate = \"off\")", dom.name, cpuset.format(iso))
                return 1
            log.warning("%s: isolating CPUs %s would leave no CPU for the host: not isolated", dom.name,
                        cpuset.format(iso))
            iso = None
        original = copy.deepcopy(state)
        others = [lease for key, lease in state.leases.items() if key != dom.uuid]
        shorts: dict[str, tuple[int, int]] = {}
        if top_up and dom.pages and self.settings.get("hugepages", "top-up") == "top-up":
            try:
                shorts = hugepages.shortfalls(self.sysfs, dict(dom.pages), others)
            except hugepages.Shortage as exc:
                log.error("%s: refusing to start: %s", dom.name, exc)
                return 1
        first = state.baseline is None
        lease = state.add(dom.uuid, dom.name, dom.profile or "", dom.cpus)
        topup.record_needs(lease, dom.pages)
        topup.journal(lease, shorts)
        host_knobs = self._host_plan()
        fresh, again = hoststate.complete(self.sysfs, state.baseline or [], host_knobs)
        cs_knobs = hoststate.cstate_plan(self.sysfs, dom.cpus, self.max_latency) if self.pinned else []
        kept, cs_journal = list(lease.cstates), hoststate.intend(self.sysfs, cs_knobs)
        state.baseline = (state.baseline or []) + fresh
        lease.cstates = kept + cs_journal
        if (fresh or again or cs_journal or shorts) and not self.dry_run:
            self.store.commit(state)  # journal first: the records exist before any value changes
        try:
            if not topup.top_up(self.sysfs, lease, shorts, others, self.dry_run):
                self.store.commit(original, final=True)
                return 1
            if first:
                log.info("%s: first latency lease: saving the host state and tuning the host", dom.name)
            elif fresh or again:
                log.warning("%s: the host was not fully tuned (%d value(s) missing): completing it", dom.name,
                            len(fresh) + len(again))
            self._apply_host(state, fresh, again)
            if cs_knobs:
                lease.cstates = kept + hoststate.apply(self.sysfs, cs_knobs, dry_run=self.dry_run)
            if iso is not None:
                self._isolate(state, iso)
            self.store.commit(state, final=True)
        except BaseException:
            log.error("%s: cannot take the lease; undoing its changes", dom.name)
            self._undo(fresh + cs_journal, shorts, others)
            self._undo_isolation(state, original)
            try:
                self.store.commit(original, final=True)
            except Exception:  # noqa: BLE001,S110 - the journal stays; the next call settles it
                pass
            raise
        log.info("%s: lease taken (CPUs %s, %d lease(s))", dom.name, cpuset.format(dom.cpus) or "-",
                 len(state.leases))
        return 0

    def _host_plan(self) -> list[hoststate.Knob]:
        return hoststate.plan(self.sysfs, max_cstate_latency_us=self.max_latency,
                              ksm=str(self.settings.get("ksm", "off")), cstates=not self.pinned)

    def _apply_host(self, state: State, fresh: list[KnobRecord], again: list[hoststate.Knob]) -> None:
        """Write the missing host knobs; the journal records of ``fresh`` become what was read back."""
        wanted = [hoststate.Knob(r.path, r.after) for r in fresh] + again
        applied = {r.path: r for r in hoststate.apply(self.sysfs, wanted, dry_run=self.dry_run)}
        journal = {r.path for r in fresh}
        state.baseline = ([r for r in state.baseline or [] if r.path not in journal]
                          + [applied[r.path] for r in fresh if r.path in applied])

    def _undo(self, journal: list[KnobRecord], shorts: dict[str, tuple[int, int]], others: list[Lease]) -> None:
        """Best effort after an error half-way: the journalled knobs and this call's pool raises."""
        try:
            hoststate.restore(self.sysfs, hoststate.settle(self.sysfs, copy.deepcopy(journal)), dry_run=self.dry_run)
            if not self.dry_run:
                topup.undo(self.sysfs, shorts, others)
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

    def _drop(self, state: State, key: str) -> None:
        """Everything a release does for the lease ``key``, but the final commit."""
        lease = state.leases[key]
        others = [other for k, other in state.leases.items() if k != key]
        give = hugepages.give_back_plan(self.sysfs, lease, others)
        if give and not self.dry_run:
            for k, (nr, n) in give.items():
                lease.hugepages[k].lowering = topup.Step(nr, nr - n)
            self.store.commit(state)  # journal first, as for the top-up
        # journal first: a kill in here leaves the lease, so the next release does it all again
        self._isolate(state, self._isolated(state.held_cpus(but=key)))
        del state.leases[key]
        hoststate.restore(self.sysfs, self._hand_over(lease, state), dry_run=self.dry_run)
        for k, (nr, n) in give.items():
            if self.dry_run:
                log.info("dry run: would lower %s: %d -> %d", hugepages.describe(k), nr, nr - n)
                continue
            given = hugepages.lower(self.sysfs, k, nr, n)
            log.info("%s: gave back %d of the %d %s it added", lease.name, given, lease.hugepages[k].added,
                     hugepages.describe(k))
        if not state.leases and state.baseline is not None:
            log.info("%s: last latency lease released: restoring the host state", lease.name)
            hoststate.restore(self.sysfs, state.baseline, dry_run=self.dry_run)
            state.baseline = None
        else:
            log.info("%s: lease released (%d left)", lease.name, len(state.leases))

    @staticmethod
    def _hand_over(lease: Lease, state: State) -> list[KnobRecord]:
        """The lease's C-state records to restore now; those of CPUs another lease still pins pass
        to that lease (the earliest), so the last lease on a CPU restores its original value."""
        back = []
        heirs = sorted(state.leases.values(), key=lambda other: other.since)
        for rec in lease.cstates:
            cpu = hoststate.cpu_of(rec.path)
            heir = next((o for o in heirs if cpu is not None and cpu in o.cpus), None)
            if heir is None:
                back.append(rec)
            else:
                heir.cstates.append(rec)
        return back
