"""The host's NUMA topology: nodes, their CPUs, cores, L3 caches, core kinds, memory and free
hugepages, and where its devices hang (host/devices.py).

Two loaders fill the same model and must agree for the same machine:
``Host.from_capabilities`` reads ``virsh capabilities`` XML (capabilities.py), ``Host.from_sysfs``
reads the Linux sysfs layout (sysfs.py; ``Host.probe()`` is this machine). The loaders return plain
fields and this module builds the Host, so neither loader imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from .. import cpuset
from . import sysfs
from .devices import NO_DEVICES, Devices
from .sysfs import EFFICIENCY, PERFORMANCE

__all__ = ["EFFICIENCY", "PERFORMANCE", "Cell", "Cpu", "Host", "L3"]


@dataclass(frozen=True)
class Cpu:
    """One online logical CPU (a hardware thread)."""

    id: int
    node: int
    socket: int | None = None
    die: int | None = None
    core: int | None = None
    siblings: frozenset[int] = frozenset()  # the threads of its physical core, itself included
    l3: int | None = None  # the id of its L3 cache (an L3 domain); None when unknown
    kind: str | None = None  # PERFORMANCE or EFFICIENCY on a hybrid host; None: the host has one kind


@dataclass(frozen=True)
class L3:
    """One L3 cache and the online CPUs that share it (an L3 domain)."""

    id: int
    cpus: frozenset[int]
    size_kib: int = 0  # 0 when unknown


@dataclass(frozen=True)
class Cell:
    """One NUMA node."""

    id: int
    cpus: tuple[int, ...] = ()  # online CPU ids, ascending
    memory_kib: int = 0  # total memory of the node; 0 when unknown
    pages: Mapping[int, int] = field(default_factory=dict)  # hugepage size KiB -> free pages
    distances: Mapping[int, int] = field(default_factory=dict)  # node id -> distance


@dataclass(frozen=True)
class Host:
    """A host's NUMA topology; immutable, comparable, hashable by identity only."""

    arch: str
    cells: tuple[Cell, ...]
    cpus: Mapping[int, Cpu]  # online CPUs by id
    isolated: frozenset[int] = frozenset()  # /sys/devices/system/cpu/isolated (isolcpus)
    vendor: str | None = None  # "Intel", "AMD", ... when known
    guest_arches: frozenset[str] | None = field(default=None, compare=False)  # KVM guest arches (<guest>)
    # CPUs the host has but are offline now: id -> node (``vmtune map`` shows them; nothing is placed there)
    offline: Mapping[int, int] = field(default_factory=dict, compare=False)
    caches: tuple[L3, ...] = ()  # the L3 domains, by id; () when the host gives no cache information
    # where its PCI devices, disks and NICs hang (host/devices.py); none known by default
    devices: Devices = field(default=NO_DEVICES, compare=False)
    # what runs here, as the live connection says (getLibVersion, getVersion); None: not known
    libvirt_version: tuple[int, int, int] | None = field(default=None, compare=False)
    qemu_version: tuple[int, int, int] | None = field(default=None, compare=False)

    __hash__ = object.__hash__

    # -- derived views ------------------------------------------------------------------------
    def cell(self, node: int) -> Cell:
        for c in self.cells:
            if c.id == node:
                return c
        raise KeyError(node)

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(c.id for c in self.cells)

    def core_of(self, cpu: int) -> frozenset[int]:
        """The online threads of ``cpu``'s physical core (just ``{cpu}`` when unknown), worked out
        once per CPU (the placement asks for a core a few dozen times a rewrite)."""
        known = self.__dict__.setdefault("_core_of", {})  # a cache beside the fields: not compared
        found = known.get(cpu)
        if found is None:
            c = self.cpus[cpu]
            found = known[cpu] = frozenset(s for s in (c.siblings or {cpu}) if s in self.cpus) | {cpu}
        return found

    def cores(self, node: int) -> list[tuple[int, ...]]:
        """The physical cores of ``node`` as ascending thread tuples, ordered by first thread
        (worked out once per node: a Host never changes)."""
        known = self.__dict__.setdefault("_cores", {})  # a cache beside the fields: not compared
        if node not in known:
            seen: set[int] = set()
            out: list[tuple[int, ...]] = []
            for cpu in self.cell(node).cpus:
                if cpu in seen:
                    continue
                core = tuple(sorted(t for t in self.core_of(cpu) if self.cpus[t].node == node))
                seen.update(core)
                out.append(core)
            known[node] = tuple(out)
        return list(known[node])

    @property
    def smt(self) -> bool:
        return any(len(self.core_of(c)) > 1 for c in self.cpus)

    @cached_property
    def hybrid(self) -> bool:
        """Performance and efficiency cores (Intel hybrid, big.LITTLE): the kinds are known."""
        return any(c.kind == EFFICIENCY for c in self.cpus.values())

    @property
    def devices_known(self) -> bool:
        """Whether the host has a source of devices (sysfs, ``--nodedev``, libvirt's node devices);
        a host from capabilities alone has none."""
        return self.devices is not NO_DEVICES

    def efficient(self, cpu: int) -> bool:
        return self.cpus[cpu].kind == EFFICIENCY

    def l3_of(self, cpu: int) -> int | None:
        return self.cpus[cpu].l3 if cpu in self.cpus else None

    def cache(self, l3: int) -> L3:
        for c in self.caches:
            if c.id == l3:
                return c
        raise KeyError(l3)

    @cached_property
    def cpu_ids(self) -> frozenset[int]:
        """The online CPU ids, as a set (worked out once: a Host never changes)."""
        return frozenset(self.cpus)

    def cpus_of(self, nodes: tuple[int, ...]) -> frozenset[int]:
        """The online CPUs of ``nodes``, worked out once per choice of nodes."""
        known = self.__dict__.setdefault("_cpus_of", {})  # a cache beside the fields: not compared
        found = known.get(nodes)
        if found is None:
            found = known[nodes] = frozenset(c for x in nodes for c in self.cell(x).cpus)
        return found

    def reserved(self, config=None) -> frozenset[int]:
        """The CPUs kept for the host here: the config's ``reserved_cpus`` when it sets them, else
        ``default_reserved()``; only CPUs this host has. The one rule every caller uses."""
        given = getattr(config, "reserved_cpus", None)
        if given is None:
            return self._reserved_here
        return frozenset(given) & self.cpu_ids

    @cached_property
    def _reserved_here(self) -> frozenset[int]:  # ``reserved`` without a config's: worked out once
        return self.default_reserved() & self.cpu_ids

    def default_reserved(self) -> frozenset[int]:
        """CPUs kept for the host, the emulator and iothreads.

        With ``isolcpus`` set: every online CPU that is not isolated. Otherwise the first
        physical core (all its threads) of each NUMA node; on a hybrid host its first efficiency
        core, where it has one (the performance cores are for the vCPUs).
        """
        return self._default_reserved

    @cached_property
    def _default_reserved(self) -> frozenset[int]:  # a Host does not change: worked out once
        if self.isolated:
            return frozenset(self.cpus) - self.isolated
        out: set[int] = set()
        for cell in self.cells:
            cores = self.cores(cell.id)
            small = [c for c in cores if self.efficient(c[0])]
            if small or cores:
                out.update((small or cores)[0])
        return frozenset(out)

    def to_dict(self) -> dict:
        """A JSON-ready view (``vmtune topology --json``)."""
        return {
            "arch": self.arch,
            "vendor": self.vendor,
            "isolated": cpuset.format(self.isolated),
            "l3": [{"id": c.id, "cpus": cpuset.format(c.cpus), "size_kib": c.size_kib} for c in self.caches],
            "efficiency": cpuset.format(c for c in self.cpus if self.efficient(c)),
            "nodes": [
                {
                    "id": c.id,
                    "cpus": cpuset.format(c.cpus),
                    "cores": [list(core) for core in self.cores(c.id)],
                    "memory_kib": c.memory_kib,
                    "free_hugepages": {str(k): v for k, v in sorted(c.pages.items())},
                    "distances": {str(k): v for k, v in sorted(c.distances.items())},
                }
                for c in self.cells
            ],
        }

    # -- loaders ------------------------------------------------------------------------------
    @classmethod
    def from_capabilities(cls, xml: str | bytes) -> Host:
        from . import capabilities  # on first use: the hook never reads capabilities

        return cls.build(capabilities.load(xml))

    @classmethod
    def from_sysfs(cls, root: str = "/sys", proc: str | None = None, arch: str | None = None) -> Host:
        from .devices import SysfsDevices

        host = cls.build(sysfs.load(root, proc=proc, arch=arch))
        return replace(host, devices=SysfsDevices(root, frozenset(host.node_ids)))

    def with_devices(self, devices: Devices) -> Host:
        """This host, its devices found first in ``devices`` (``--nodedev`` files, libvirt's node
        devices), then where it found them before."""
        from .devices import Chain

        return replace(self, devices=Chain(devices, self.devices))

    def with_efficiency(self, cpus: frozenset[int]) -> Host:
        """This host with ``cpus`` its efficiency cores and the others performance cores: the core
        kinds a host read from capabilities cannot know (the config's ``efficiency_cpus``)."""
        if not cpus & frozenset(self.cpus):
            return self
        kinds = {c: replace(cpu, kind=EFFICIENCY if c in cpus else PERFORMANCE) for c, cpu in self.cpus.items()}
        return replace(self, cpus=kinds)

    def uneven_smt(self) -> tuple[int, ...]:
        """The sockets whose cores have uneven numbers of threads (their siblings as the host lists
        them, offline ones included): the sign of a hybrid CPU (Intel's performance cores have two
        threads, its efficiency cores one) whose core kinds the host does not say."""
        return self._uneven_smt

    @cached_property
    def _uneven_smt(self) -> tuple[int, ...]:
        if self.hybrid:
            return ()
        widths: dict[int | None, set[int]] = {}
        for cpu in self.cpus.values():
            widths.setdefault(cpu.socket, set()).add(len(cpu.siblings or {cpu.id}))
        return tuple(sorted(s for s, w in widths.items() if len(w) > 1 and s is not None))

    @classmethod
    def probe(cls) -> Host:
        return cls.from_sysfs("/sys")

    @classmethod
    def build(cls, fields: Mapping) -> Host:
        """The Host of a loader's fields: ``cells`` and ``cpus`` are lists of the fields of each
        Cell and Cpu (as dicts), the CPUs in ascending order."""
        cells = tuple(Cell(**cell) for cell in fields["cells"])
        cpus = {cpu["id"]: Cpu(**cpu) for cpu in fields["cpus"]}
        caches = tuple(L3(**c) for c in fields.get("caches", ()))
        return cls(**{**fields, "cells": cells, "cpus": cpus, "caches": caches})
