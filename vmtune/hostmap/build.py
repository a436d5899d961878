"""The map of one host: every CPU with what holds it, what is isolated, memory and pages per node.

``build`` makes the model that the terminal view (text.py), the SVG (svg.py) and the JSON
(``HostMap.to_dict``) draw. It decides nothing of its own: the domains' rows, problems and bound
memory are ``audit.audit``'s (claims.py and holdings.py rules), where each thread may run is
``holdings.reach``, the reserved CPUs are ``Host.reserved``, the cores are ``Host.cores``.

A CPU's role, the first that holds:

``offline``    the host has it, but it is offline now
``dedicated``  a domain's vCPU holds it for itself (``holdings.dedicated``: tagged latency or realtime
               with pins, or every vCPU pinned alone), or its real-time emulator or iothread does
``reserved``   kept for the host, emulators and iothreads (``Host.reserved``)
``shared``     threads of domains that do not hold it for themselves are pinned there
``sibling``    nothing pinned, and a sibling thread of its core is dedicated: placement keeps it
               off limits to others (``placement.taken_cores``), so the core stays the holder's
``isolated``   nothing pinned, and isolated: by the hook now, or by ``isolcpus``
``free``       nothing pinned

``isolated`` is also a mark of its own (``MapCpu.isolated``), whatever the role. A CPU's pins are
every vCPU, emulator and iothread that may run there by its pin, or by the ``<vcpu cpuset>`` where
it has no pin of its own; a thread with neither floats over the host and is pinned nowhere.

Each CPU carries its L3 domain and core kind as the host has them (``Host.l3_of``, ``Cpu.kind``);
each node its L3 domains (``MapNode.groups``: its cores by L3, the order the views draw) and the
passthrough devices that hang off it, held by a domain (devices.py, ``locality.locate``) or free
(passthrough-capable: ``Devices.assignable``); the map the devices of no node, or that the host
does not know.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import NamedTuple

from ..placement import audit as audit_mod
from .. import config as config_mod
from .. import cpuset
from ..placement import holdings
from ..host import Host
from ..host.sysfs import EFFICIENCY
from ..placement.search import taken_cores
from . import names
from .devices import MapDevice, collect_devices

LABEL = 6  # a domain's name in a CPU's label: at most this long (names.short)
OVERLAPS = (audit_mod.CPU_OVERLAP, audit_mod.CORE_OVERLAP, audit_mod.FLOAT)  # marked on their CPUs


class Role(StrEnum):
    OFFLINE = "offline"
    DEDICATED = "dedicated"
    RESERVED = "reserved"
    SHARED = "shared"
    SIBLING = "sibling"
    ISOLATED = "isolated"
    FREE = "free"


class Thread(StrEnum):
    VCPU = "vcpu"
    EMULATOR = "emulator"
    IOTHREAD = "iothread"


class Pin(NamedTuple):
    """One thread of one domain that may run on a CPU."""

    domain: int  # index into HostMap.domains
    thread: Thread
    id: int | None  # vCPU or iothread id; None for the emulator


class PinnedThread(NamedTuple):
    """One thread of a domain and where its pin lets it run."""

    thread: Thread
    id: int | None
    cpus: frozenset[int]


@dataclass(frozen=True)
class MapDomain:
    name: str
    label: str  # its name shortened to LABEL, unique among the map's domains, never a role's word (names.short)
    uuid: str | None
    profile: str | None
    state: str  # libvirt's ("running", "shut off", ...), or "claim" offline
    active: bool  # holds its memory now: every state but shut off
    vcpus: int
    dedicated: frozenset[int]
    threads: tuple[PinnedThread, ...]  # each pinned thread and where it may run
    outside: frozenset[int] = frozenset()  # CPUs its pins name that this host does not have

    def to_dict(self) -> dict:
        return {"name": self.name, "label": self.label, "uuid": self.uuid, "profile": self.profile,
                "state": self.state, "active": self.active, "vcpus": self.vcpus,
                "dedicated": cpuset.format(self.dedicated),
                "threads": [{"thread": t.thread.value, "id": t.id, "cpus": cpuset.format(t.cpus)}
                            for t in self.threads],
                "outside": cpuset.format(self.outside)}


@dataclass(frozen=True)
class MapCpu:
    id: int
    role: Role
    holder: Pin | None  # the dedicated vCPU, or the one thread pinned to a shared CPU
    pins: tuple[Pin, ...] = ()
    isolated: bool = False
    problems: tuple[str, ...] = ()  # audit problem kinds that name this CPU (overlaps, floats)
    l3: int | None = None  # the id of its L3 domain; None when unknown (and offline)
    kind: str | None = None  # "performance" or "efficiency" on a hybrid host; None on others

    @property
    def efficient(self) -> bool:
        return self.kind == EFFICIENCY


@dataclass(frozen=True)
class PagePool:
    size_kib: int
    total: int
    free: int
    claimed: int  # pages the domains take here (running or not)

    def to_dict(self) -> dict:
        return {"size_kib": self.size_kib, "total": self.total, "free": self.free, "claimed": self.claimed}


@dataclass(frozen=True)
class MapL3:
    """One L3 domain as a node shows it; one that spans nodes is shown under each."""

    id: int
    cpus: frozenset[int]  # its CPUs on this node
    size_kib: int  # 0 when unknown
    elsewhere: tuple[int, ...] = ()  # the other nodes it spans

    def to_dict(self) -> dict:
        return {"id": self.id, "cpus": cpuset.format(self.cpus), "size_kib": self.size_kib,
                "other_nodes": list(self.elsewhere)}


Group = tuple[MapL3 | None, tuple[tuple[MapCpu, ...], ...]]  # an L3 domain (None: unknown) and its cores


@dataclass(frozen=True)
class MapNode:
    id: int
    cores: tuple[tuple[MapCpu, ...], ...]  # online cores (sibling threads), then each offline CPU alone
    memory_kib: int  # 0 when unknown
    bound_kib: int  # normal memory the domains bind here strictly
    pages: tuple[PagePool, ...] = ()
    caches: tuple[MapL3, ...] = ()  # its L3 domains, by id
    devices: tuple[MapDevice, ...] = ()  # the passthrough devices that hang off it, held or free

    def groups(self) -> tuple[Group, ...]:
        """Its cores by L3 domain (a core's first thread's), the domains in the order of their
        first core, cores in their order; the cores of no known L3 (offline ones) last, in a group
        of None. A node without L3 domains is one group of None: every core, as it is."""
        caches = {c.id: c for c in self.caches}
        by_l3: dict[int | None, list[tuple[MapCpu, ...]]] = {}
        for core in self.cores:
            key = core[0].l3 if core[0].l3 in caches else None
            by_l3.setdefault(key, []).append(core)
        order = [k for k in by_l3 if k is not None] + ([None] if None in by_l3 else [])
        return tuple((caches.get(k) if k is not None else None, tuple(by_l3[k])) for k in order)


@dataclass(frozen=True)
class LeaseView:
    """One of the hook's leases, as the map shows it."""

    name: str
    profile: str | None
    cpus: frozenset[int]
    dedicated: bool
    stale: bool  # its domain no longer runs: the next reap gives the host back


@dataclass(frozen=True)
class HookView:
    """What the hook holds now (live maps only): its leases, the CPUs it isolates, what it moved."""

    leases: tuple[LeaseView, ...] = ()
    isolated: frozenset[int] = frozenset()
    moved: Mapping[str, int] = field(default_factory=dict)  # knob kind -> items moved off (irq, task, ...)
    problem: str | None = None  # the state could not be read: why
    # each held CPU's power state now (hoststate/power.py's CpuPower.to_dict, with "lease": its owner)
    power: tuple[dict, ...] = ()

    def to_dict(self) -> dict:
        return {"leases": [{"name": x.name, "profile": x.profile, "cpus": cpuset.format(x.cpus),
                            "dedicated": x.dedicated, "stale": x.stale} for x in self.leases],
                "isolated": cpuset.format(self.isolated), "moved": dict(sorted(self.moved.items())),
                "problem": self.problem, "power": [{k: v for k, v in p.items() if k != "text"} for p in self.power]}


@dataclass(frozen=True)
class HostMap:
    mode: str  # "live" or "offline"
    arch: str
    nodes: tuple[MapNode, ...]
    domains: tuple[MapDomain, ...]
    reserved: frozenset[int]
    isolcpus: frozenset[int]
    hook: HookView | None = None
    problems: tuple[audit_mod.Problem, ...] = ()
    unbound_pages: Mapping[int, int] = field(default_factory=dict)  # size KiB -> pages on any node
    warnings: tuple[str, ...] = ()
    devices: tuple[MapDevice, ...] = ()  # passthrough devices on no node, or that the host does not know
    devices_known: bool = False  # the host has a source of devices (sysfs, --nodedev); else none is known

    @property
    def cpus(self) -> list[MapCpu]:
        return [cpu for node in self.nodes for core in node.cores for cpu in core]

    @property
    def smt(self) -> bool:
        return any(len(core) > 1 for node in self.nodes for core in node.cores)

    @property
    def hybrid(self) -> bool:
        """Efficiency cores among its CPUs (the views mark them)."""
        return any(c.efficient for c in self.cpus)

    def owner(self, cpu: MapCpu) -> int | None:
        """The domain a view colours the CPU with: its holder's, or on a shared CPU the one domain
        whose threads are pinned there (None: several, or none)."""
        if cpu.holder is not None:
            return cpu.holder.domain
        found = {p.domain for p in cpu.pins}
        return found.pop() if cpu.role == Role.SHARED and len(found) == 1 else None

    def label(self, cpu: MapCpu) -> str:
        """What a view writes on a CPU: ``web:v3``, ``web:emu``, ``web:io1``; a shared CPU where
        several threads of one domain may run, the domain's label; else the role's word."""
        pin = cpu.holder
        if pin is None:
            owner = self.owner(cpu)
            if owner is not None:
                return self.domains[owner].label
            return {Role.RESERVED: "host", Role.OFFLINE: "off"}.get(cpu.role, cpu.role.value)
        what = {Thread.VCPU: f"v{pin.id}", Thread.EMULATOR: "emu", Thread.IOTHREAD: f"io{pin.id}"}[pin.thread]
        return f"{self.domains[pin.domain].label}:{what}"

    def describe(self, pin: Pin) -> str:
        """A pin in words: ``web vCPU 3``, ``web emulator``, ``web iothread 1``."""
        what = {Thread.VCPU: f"vCPU {pin.id}", Thread.EMULATOR: "emulator",
                Thread.IOTHREAD: f"iothread {pin.id}"}[pin.thread]
        return f"{self.domains[pin.domain].name} {what}"

    def to_dict(self) -> dict:
        def pin(p: Pin) -> dict:
            return {"domain": self.domains[p.domain].name, "index": p.domain, "thread": p.thread.value, "id": p.id}

        def cpu(c: MapCpu) -> dict:
            return {"id": c.id, "role": c.role.value, "holder": None if c.holder is None else pin(c.holder),
                    "label": self.label(c), "isolated": c.isolated, "problems": list(c.problems),
                    "pins": [pin(p) for p in c.pins], "l3": c.l3, "kind": c.kind}

        domain_names = [d.name for d in self.domains]

        return {
            "version": 1, "mode": self.mode, "arch": self.arch,
            "reserved": cpuset.format(self.reserved), "isolcpus": cpuset.format(self.isolcpus),
            "nodes": [{"id": n.id, "memory_kib": n.memory_kib, "bound_kib": n.bound_kib,
                       "hugepages": [p.to_dict() for p in n.pages],
                       "cores": [{"threads": [cpu(c) for c in core]} for core in n.cores],
                       "l3": [c.to_dict() for c in n.caches],
                       "devices": [d.to_dict(domain_names) for d in n.devices]} for n in self.nodes],
            "unbound_hugepages": {str(k): v for k, v in sorted(self.unbound_pages.items())},
            "domains": [d.to_dict() for d in self.domains],
            "devices": [d.to_dict(domain_names) for d in self.devices], "devices_known": self.devices_known,
            "hook": None if self.hook is None else self.hook.to_dict(),
            "problems": [p.to_dict() for p in self.problems],
            "warnings": list(self.warnings),
        }


# -- building it ------------------------------------------------------------------------------------
def _threads(dom) -> tuple[tuple[PinnedThread, ...], list[int]]:
    """Where each thread may run by a pin or the ``<vcpu cpuset>`` (floating threads left out); and
    the ids of ``<vcpupin>``s that name no vCPU of the domain (left out too)."""
    r = holdings.reach(dom, frozenset())  # no pin, no cpuset: the empty set, pinned nowhere
    pins = dom.vcpupins()
    stray = sorted(v for v in pins if not 0 <= v < dom.vcpus)
    vcpus = {**{v: r.default for v in range(dom.vcpus)}, **{v: c for v, c in pins.items() if 0 <= v < dom.vcpus}}
    out = [PinnedThread(Thread.VCPU, v, cpus) for v, cpus in sorted(vcpus.items())]
    out.append(PinnedThread(Thread.EMULATOR, None, r.emulator))
    out += [PinnedThread(Thread.IOTHREAD, i, r.iothread(i)) for i in sorted(dom.iothread_ids())]
    return tuple(t for t in out if t.cpus), stray


def _domains(host: Host, domains: Sequence[tuple[str | bytes, str]], report) -> tuple[list[MapDomain], list[str]]:
    """The map's domains, and a warning for each pin it cannot show where it says."""
    out, notes = [], []
    known = frozenset(host.cpus) | frozenset(host.offline)
    labels = names.short([row.name for row in report.rows], LABEL)
    for i, ((_, state), row, dom) in enumerate(zip(domains, report.rows, report.parsed)):
        threads, stray = _threads(dom)
        every = frozenset().union(*(t.cpus for t in threads))
        out.append(MapDomain(row.name, labels[i], row.uuid, row.profile, state,
                             audit_mod.holds_now(state), row.vcpus, row.dedicated, threads, every - known))
        if every - known:
            notes.append(f"{row.name} pins threads to {cpuset.format(every - known)}, which this host does not have")
        if every & frozenset(host.offline):
            notes.append(f"{row.name} pins threads to {cpuset.format(every & frozenset(host.offline))}, "
                         f"which are offline")
        if stray:
            notes.append(f"{row.name} has <vcpupin> for vCPU {cpuset.format(stray)}, which it does not have "
                         f"({row.vcpus} vCPUs): not shown")
    return out, notes


def _pins_by_cpu(doms: list[MapDomain]) -> dict[int, list[Pin]]:
    out: dict[int, list[Pin]] = defaultdict(list)
    for i, dom in enumerate(doms):
        for placed in dom.threads:
            pin = Pin(i, placed.thread, placed.id)
            for cpu in placed.cpus:
                out[cpu].append(pin)
    return out


def _cpu(cpu: int, offline: bool, pins: list[Pin], doms: list[MapDomain], reserved: frozenset[int],
         isolated: frozenset[int], taken: frozenset[int], problems: tuple[str, ...]) -> MapCpu:
    # a dedicated CPU's holder: the vCPU pinned there, else the real-time emulator or iothread
    # (holdings.rt_helpers) that has it to itself
    holders = [p for p in pins if p.thread == Thread.VCPU and cpu in doms[p.domain].dedicated]
    holders = holders or [p for p in pins if cpu in doms[p.domain].dedicated]
    if offline:
        role, holder = Role.OFFLINE, None
    elif holders:
        role, holder = Role.DEDICATED, holders[0]
    elif cpu in reserved:
        role, holder = Role.RESERVED, None
    elif pins:
        role, holder = Role.SHARED, pins[0] if len(pins) == 1 else None
    else:
        role = Role.SIBLING if cpu in taken else Role.ISOLATED if cpu in isolated else Role.FREE
        holder = None
    return MapCpu(cpu, role, holder, tuple(pins), cpu in isolated, problems)


def _caches(host: Host, node: int) -> tuple[MapL3, ...]:
    """The L3 domains with CPUs on ``node``, by id: their CPUs there, and the other nodes they span."""
    out = []
    for cache in host.caches:
        nodes = {host.cpus[c].node for c in cache.cpus if c in host.cpus}
        if node in nodes:
            here = frozenset(c for c in cache.cpus if c in host.cpus and host.cpus[c].node == node)
            out.append(MapL3(cache.id, here, cache.size_kib, tuple(sorted(nodes - {node}))))
    return tuple(sorted(out, key=lambda c: c.id))


def _pages(host: Host, node: int, report, totals: Mapping[tuple[int, int], int] | None) -> tuple[PagePool, ...]:
    claimed: dict[int, int] = defaultdict(int)
    held: dict[int, int] = defaultdict(int)  # by domains that hold their pages now
    for row in report.rows:
        for (n, size), count in row.pages.items():
            if n == node:
                claimed[size] += count
                held[size] += count if audit_mod.holds_now(row.state) else 0
    cell = host.cell(node)
    out = []
    for size in sorted(set(cell.pages) | set(claimed) | {s for n, s in (totals or {}) if n == node}):
        if totals is None:  # capabilities: the pool before the claims take their pages
            total = cell.pages.get(size, 0)
            free = max(total - held[size], 0)
        else:  # live: the pool and what is free in it now
            total, free = totals.get((node, size), 0), cell.pages.get(size, 0)
        out.append(PagePool(size, total, free, claimed[size]))
    return tuple(out)


def build(host: Host, domains: Sequence[tuple[str | bytes, str]] = (), *, config: config_mod.Config | None = None,
          mode: str = "offline", hook: HookView | None = None,
          page_totals: Mapping[tuple[int, int], int] | None = None, warnings: Sequence[str] = ()) -> HostMap:
    """The map of ``host`` with ``domains`` (``(xml, state)`` pairs, as ``audit.audit`` takes them).

    ``page_totals``: (node, size KiB) -> pages in the pool, when ``host``'s pages are the free ones
    (a live host); without it, ``host``'s pages are the pools (capabilities) and the pages of the
    domains that hold theirs now are taken out of them. ``hook``: what the hook holds (live).
    Raises InvalidInput (one line) for a malformed domain, as ``audit`` does."""
    config = config or config_mod.Config()
    report = audit_mod.audit(host, list(domains), config=config)
    doms, notes = _domains(host, domains, report)
    pins = _pins_by_cpu(doms)
    reserved = host.reserved(config)
    isolated = host.isolated | (hook.isolated if hook else frozenset())
    taken = taken_cores(host, frozenset().union(*(d.dedicated for d in doms)) & frozenset(host.cpus))
    marks: dict[int, set[str]] = defaultdict(set)
    for problem in report.problems:
        if problem.kind in OVERLAPS:
            for cpu in problem.cpus:
                marks[cpu].add(problem.kind)
    devices = collect_devices(host, report.parsed)
    nodes = []
    for cell in host.cells:
        def made(cpu: int, offline: bool = False) -> MapCpu:
            plain = _cpu(cpu, offline, pins.get(cpu, []), doms, reserved, isolated, taken,
                         tuple(sorted(marks.get(cpu, ()))))
            return plain if offline else replace(plain, l3=host.l3_of(cpu), kind=host.cpus[cpu].kind)

        cores = [tuple(made(c) for c in core) for core in host.cores(cell.id)]
        cores += [(made(c, offline=True),) for c, n in sorted(host.offline.items()) if n == cell.id]
        free = next(f for f in report.nodes if f.node == cell.id)
        nodes.append(MapNode(cell.id, tuple(cores), cell.memory_kib, free.bound_kib,
                             _pages(host, cell.id, report, page_totals), _caches(host, cell.id),
                             tuple(d for d in devices if d.node == cell.id)))
    unbound: dict[int, int] = defaultdict(int)
    for row in report.rows:
        for (n, size), count in row.pages.items():
            if n is None:
                unbound[size] += count
    return HostMap(mode, host.arch, tuple(nodes), tuple(doms), reserved, host.isolated, hook,
                   report.problems, dict(unbound), tuple(warnings) + tuple(notes),
                   tuple(d for d in devices if d.node not in host.node_ids), host.devices_known)
