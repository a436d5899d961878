"""Taking and dropping a lease, under the state lock: the host work of prepare, reconnect and release.

A lease (``prepare begin``; ``reconnect begin`` without the top-up and never refusing):

1. settle what a killed hook left (journal records made exact against sysfs);
2. refuse overlapping vCPU pins (or warn);
3. plan: the hugepage shortfalls, the host knobs (first lease), the pinned CPUs' C-states (scope
   ``pinned``, every lease);
4. journal: commit the lease with every record it may leave (knob values before, pools' ``nr``
   before and target) before any sysfs write;
5. compact memory, raise the short pools, read back; too few: lower them again, put the state file
   back as it was, refuse the start (one line);
6. apply the host knobs and the C-states;
7. isolate the leases' CPUs (isolation/): journal, then move the host's tasks, IRQs, workqueues
   and cgroups off them; refuse the start when no housekeeping CPU would be left;
8. commit the records as the kernel read them back.

A Python error in 5-7 undoes this call's changes and puts the state file back; a kill leaves the
journal for the next call. A release drops the lease, passes C-state records of CPUs another lease
still pins to that lease and restores the rest, gives back the pages the lease added (journalled
the same way), shrinks the isolation to the CPUs the other leases hold, and the last lease
restores the host baseline.
"""

from __future__ import annotations

import copy
import logging
import os

from .. import cpuset
from . import hoststate, hugepages, isolation

log = logging.getLogger("vmtune.hook")


class Hook:
    """One hook call's view of the host: sysfs root, state store, config, dry run."""

    def __init__(self, cfg, sysfs: str | None = None, store=None, dry_run: bool | None = None):
        from .leases import Store

        self.cfg = cfg
        self.dry_run = os.environ.get("VMTUNE_DRY_RUN", "") not in ("", "0") if dry_run is None else dry_run
        self.sysfs = sysfs or os.environ.get("VMTUNE_SYSFS") or "/sys"
        self.store = store or Store(dry_run=self.dry_run)
        self.settings = dict(cfg.hook)
        self.max_latency = int(self.settings.get("max_cstate_latency_us", hoststate.DEFAULT_MAX_CSTATE_LATENCY_US))
        self.pinned = self.settings.get("cstate_scope", "host") == "pinned"
        self.isolate = self.settings.get("isolate", "on") != "off"
        self.roots = isolation.Roots.from_env(self.sysfs, hugepages.procfs_root(self.sysfs))

    # -- isolation -----------------------------------------------------------------------------
    def _reserved(self) -> frozenset[int]:
        if self.cfg.reserved_cpus is not None:
            return frozenset(self.cfg.reserved_cpus)
        try:
            from ..host import Host

            return Host.from_sysfs(self.sysfs).default_reserved()
        except Exception as exc:  # noqa: BLE001 - no topology here: nothing is reserved
            log.debug("no reserved CPUs: %s", exc)
            return frozenset()

    def _isolated(self, held: frozenset[int]) -> frozenset[int]:
        """The CPUs to keep the host's work off: the leases' vCPU CPUs ``held`` less the reserved ones."""
        if not self.isolate:
            return frozenset()
        if not held:
            return frozenset()
        return (held - self._reserved()) & frozenset(hoststate.online_cpus(self.sysfs))

    def _isolate(self, state, cpus: frozenset[int]) -> None:
        """Make the host's isolation match ``cpus``, journal first (isolation.reconcile)."""
        def journal(record: dict) -> None:
            state.isolation = record
            self.store.commit(state)

        state.isolation = isolation.reconcile(state.isolation, cpus, self.roots, journal, dry_run=self.dry_run)

    # -- plans ---------------------------------------------------------------------------------
    def _host_plan(self) -> list[hoststate.Knob]:
        return hoststate.plan(self.sysfs, max_cstate_latency_us=self.max_latency,
                              ksm=str(self.settings.get("ksm", "off")), cstates=not self.pinned)

    def _settle(self, state) -> bool:
        """Journal records left by a killed hook, made exact (see leases.py); True if any."""
        changed = False
        groups = [state.baseline or []] + [lease.get("cstates") or [] for lease in state.leases.values()]
        if any(rec.get("pending") for group in groups for rec in group):
            changed = True
            if state.baseline:
                state.baseline = hoststate.settle(self.sysfs, state.baseline)
            for lease in state.leases.values():
                if lease.get("cstates"):
                    lease["cstates"] = hoststate.settle(self.sysfs, lease["cstates"])
            log.warning("settled the records of a hook that was interrupted")
        for lease in state.leases.values():
            changed = hugepages.settle(self.sysfs, lease) or changed
        return changed

    # -- prepare / reconnect -------------------------------------------------------------------
    def lease(self, dom, refuse_conflicts: bool, top_up: bool = True) -> int:
        """Record the lease and tune the host; 1 if refused (pins overlap, too few hugepages)."""
        with self.store.locked() as state:
            self._settle(state)
            clashes = state.conflicts(dom.uuid, dom.cpus)
            if clashes:
                what = "; ".join(f"domain {other!r} holds CPUs {cpuset.format(cpus)}" for other, cpus in clashes)
                if refuse_conflicts and self.settings.get("on_conflict", "refuse") != "warn":
                    log.error("%s: refusing to start: its vCPU pins overlap another latency domain: %s",
                              dom.name, what)
                    return 1
                log.warning("%s: vCPU pins overlap another latency domain: %s", dom.name, what)
            iso: frozenset[int] | None = self._isolated(state.held_cpus() | dom.cpus)
            if iso and not set(hoststate.online_cpus(self.sysfs)) - iso:
                if refuse_conflicts:
                    log.error("%s: refusing to start: isolating CPUs %s would leave no CPU for the host's own "
                              "work (set reserved_cpus, or [hook] isolate = \"off\")", dom.name, cpuset.format(iso))
                    return 1
                log.warning("%s: isolating CPUs %s would leave no CPU for the host: not isolated",
                            dom.name, cpuset.format(iso))
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
            lease = state.add(dom.uuid, dom.name, dom.profile or "", dom.cpus)
            self._record_needs(lease, dom.pages)
            first = state.baseline is None
            host_knobs = self._host_plan() if first else []
            cs_knobs = hoststate.cstate_plan(self.sysfs, dom.cpus, self.max_latency) if self.pinned else []
            kept = list(lease.get("cstates") or [])
            journal = hoststate.intend(self.sysfs, host_knobs) + hoststate.intend(self.sysfs, cs_knobs)
            if first:
                state.baseline = [r for r in journal if r["path"] in {k.path for k in host_knobs}]
            self._set_cstates(lease, kept + [r for r in journal if r["path"] in {k.path for k in cs_knobs}])
            for k, (nr, short) in shorts.items():
                lease["hugepages"][k]["raising"] = {"from": nr, "to": nr + short}
            if (journal or shorts) and not self.dry_run:
                self.store.commit(state)  # journal first: the records exist before any value changes
            try:
                if not self._top_up(dom.name, lease, shorts, others):
                    self.store.commit(original)
                    return 1
                if first:
                    log.info("%s: first latency lease: saving the host state and tuning the host", dom.name)
                    state.baseline = hoststate.apply(self.sysfs, host_knobs, dry_run=self.dry_run)
                if cs_knobs:
                    self._set_cstates(lease, kept + hoststate.apply(self.sysfs, cs_knobs, dry_run=self.dry_run))
                if iso is not None:
                    self._isolate(state, iso)
                self.store.commit(state)
            except BaseException:
                log.error("%s: cannot take the lease; undoing its changes", dom.name)
                self._undo(journal, lease, shorts, others)
                self._undo_isolation(state, original)
                try:
                    self.store.commit(original)
                except Exception:  # noqa: BLE001,S110 - the journal stays; the next call settles it
                    pass
                raise
            log.info("%s: lease taken (CPUs %s, %d lease(s))", dom.name, cpuset.format(dom.cpus) or "-",
                     len(state.leases))
        return 0

    @staticmethod
    def _record_needs(lease: dict, pages) -> None:
        old = lease.get("hugepages") or {}
        fresh = {k: {"need": int(pages.get(k, 0)), "added": int(old.get(k, {}).get("added", 0))}
                 for k in sorted(set(old) | set(pages))}
        fresh = {k: rec for k, rec in fresh.items() if rec["need"] or rec["added"]}
        if fresh:
            lease["hugepages"] = fresh
        else:
            lease.pop("hugepages", None)

    @staticmethod
    def _set_cstates(lease: dict, records: list[dict]) -> None:
        if records:
            lease["cstates"] = records
        else:
            lease.pop("cstates", None)

    def _top_up(self, name: str, lease: dict, shorts: dict[str, tuple[int, int]], others: list[dict]) -> bool:
        """Raise the short pools; False (pools lowered again, one error line) when still short."""
        if not shorts:
            return True
        if self.dry_run:
            for k, (nr, short) in shorts.items():
                log.info("dry run: would compact memory and raise %s: %d -> %d", hugepages.describe(k), nr, nr + short)
                lease["hugepages"][k].pop("raising", None)
            return True
        hugepages.compact(self.sysfs)
        gained = {k: hugepages.grow(self.sysfs, k, nr, short) for k, (nr, short) in shorts.items()}
        missing = {k: short - gained[k] for k, (_, short) in shorts.items() if gained[k] < short}
        if missing:
            for k, got in gained.items():
                if got:
                    nr, n = hugepages.plan_shrink(self.sysfs, k, got, others)
                    hugepages.lower(self.sysfs, k, nr, n)
            what = "; ".join(f"{hugepages.describe(k)}: {lease['hugepages'][k]['need']} needed, the kernel "
                             f"gave {gained[k]} of the {shorts[k][1]} more asked for" for k in sorted(missing))
            log.error("%s: refusing to start: too few free hugepages: %s", name, what)
            return False
        for k, (nr, short) in shorts.items():
            rec = lease["hugepages"][k]
            rec.pop("raising", None)
            rec["added"] = int(rec.get("added", 0)) + gained[k]
            log.info("%s: raised %s: %d -> %d", name, hugepages.describe(k), nr, nr + gained[k])
        return True

    def _undo(self, journal: list[dict], lease: dict, shorts: dict[str, tuple[int, int]], others: list[dict]) -> None:
        """Best effort after an error half-way: the journalled knobs and this call's pool raises."""
        try:
            hoststate.restore(self.sysfs, hoststate.settle(self.sysfs, copy.deepcopy(journal)), dry_run=self.dry_run)
            if self.dry_run:
                return
            for k, (nr, short) in shorts.items():
                pool = hugepages.read_pool(self.sysfs, k)
                got = max(0, min(short, pool[0] - nr)) if pool else 0
                if got:
                    now, n = hugepages.plan_shrink(self.sysfs, k, got, others)
                    hugepages.lower(self.sysfs, k, now, n)
        except Exception as exc:  # noqa: BLE001 - the journal on disk still says what to undo
            log.error("undoing failed too: %s", exc)

    def _undo_isolation(self, state, original) -> None:
        """After an error half-way: back to the isolation of the leases before this call."""
        if state.isolation == original.isolation:
            return
        try:
            self._isolate(state, self._isolated(original.held_cpus()))
            original.isolation = state.isolation
        except Exception as exc:  # noqa: BLE001 - the journal on disk still says what to undo
            log.error("undoing the isolation failed too: %s", exc)
            original.isolation = state.isolation

    # -- release -------------------------------------------------------------------------------
    def release(self, uuid: str | None, name: str) -> int:
        with self.store.locked() as state:
            settled = self._settle(state)
            key = state.find(uuid, name)
            if key is None:
                if settled:
                    self.store.commit(state)
                return 0
            lease = state.leases[key]
            others = [other for k, other in state.leases.items() if k != key]
            give = hugepages.give_back_plan(self.sysfs, lease, others)
            if give and not self.dry_run:
                for k, (nr, n) in give.items():
                    lease["hugepages"][k]["lowering"] = {"from": nr, "to": nr - n}
                self.store.commit(state)  # journal first, as for the top-up
            # journal first: a kill in here leaves the lease, so the next release does it all again
            self._isolate(state, self._isolated(state.held_cpus(but=key)))
            del state.leases[key]
            hoststate.restore(self.sysfs, self._hand_over(lease, state), dry_run=self.dry_run)
            for k, (nr, n) in give.items():
                added = int(lease["hugepages"][k].get("added", 0))
                if self.dry_run:
                    log.info("dry run: would lower %s: %d -> %d", hugepages.describe(k), nr, nr - n)
                    continue
                given = hugepages.lower(self.sysfs, k, nr, n)
                log.info("%s: gave back %d of the %d %s it added", name, given, added, hugepages.describe(k))
            if not state.leases and state.baseline is not None:
                log.info("%s: last latency lease released: restoring the host state", name)
                hoststate.restore(self.sysfs, state.baseline, dry_run=self.dry_run)
                state.baseline = None
            else:
                log.info("%s: lease released (%d left)", name, len(state.leases))
            self.store.commit(state)
        return 0

    @staticmethod
    def _hand_over(lease: dict, state) -> list[dict]:
        """The lease's C-state records to restore now; those of CPUs another lease still pins pass
        to that lease (the earliest), so the last lease on a CPU restores its original value."""
        back = []
        heirs = sorted(state.leases.values(), key=lambda other: other.get("since", 0))
        for rec in lease.get("cstates") or []:
            cpu = hoststate.cpu_of(rec["path"])
            heir = next((o for o in heirs if cpu is not None and cpu in cpuset.parse(o.get("cpus", ""))), None)
            if heir is None:
                back.append(rec)
            else:
                heir.setdefault("cstates", []).append(rec)
        return back
