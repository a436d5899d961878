"""Choosing host nodes, CPUs and hugepages for one domain, given what others hold.

Pure functions of (host, reserved CPUs, ledger, request). A dedicated vCPU gets a host CPU on a
physical core that nobody else uses: not the host's reserved cores, not a core that holds
another domain's dedicated CPU. Among the places that fit, the rules, in order:

1. the fewest NUMA nodes;
2. the nodes of the devices it uses (``Anchor``): a passthrough device's node must be one of the
   domain's nodes under ``required`` and should be under ``preferred``; a backing device's (a
   block device, a macvtap or bridge port) should be;
3. the fewest L3 domains (``Host.caches``; one over two nodes counts once), the one that fits
   best when one holds it all: the one left with the fewest whole free cores, which keeps large
   holes for large domains (corepick.py);
4. performance cores on a hybrid host: only those under ``cpu_kinds = "performance"``, first
   under ``"any"``;
5. then, as before caches were known: hugepages over none, even shares, short distances, and the
   spread across nodes (or the packing, with ``placement = "pack"``).

A host without cache information, core kinds or devices is placed exactly as before them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import combinations

from . import corepick, cpuset, placenotes, units
from .claims import Ledger
from .errors import DoesNotFit
from .host import Host
from .locality import Anchor
from .profiles import CpuKinds, DeviceLocality, Pinning

MIB = 1024


@dataclass(frozen=True)
class GuestCell:
    id: int
    node: int
    vcpus: tuple[int, ...]
    memory_kib: int


@dataclass(frozen=True)
class Request:
    vcpus: int
    memory_kib: int
    smt: str = "threads"  # or "isolate"
    hugepages: bool = True
    spread: bool = True
    cell_when_single: bool = False  # keep one guest NUMA cell when everything fits on one node
    emulator_with_vcpus: bool = False  # the emulator and iothreads share the dedicated CPUs (TCG)
    # RAM memory devices (DIMM, virtio-mem) without a page size of their own: (guest cell, KiB, the
    # size their page must divide). Backed like their cell, they count where it lands.
    devices: tuple[tuple[int, int, int], ...] = ()
    anchors: tuple[Anchor, ...] = ()  # the devices it uses, by node
    locality: DeviceLocality = DeviceLocality.PREFERRED  # what a passthrough device's node means
    kinds: CpuKinds = CpuKinds.ANY  # which cores of a hybrid host its dedicated vCPUs may take

    @cached_property
    def device_nodes(self) -> tuple[frozenset[int], frozenset[int]]:
        """(The nodes of its passthrough devices, as ``locality`` weighs them; of its backing ones.)"""
        need = frozenset(a.node for a in self.anchors if a.passthrough) \
            if self.locality != DeviceLocality.IGNORE else frozenset()
        return need, frozenset(a.node for a in self.anchors if not a.passthrough)

    def off_devices(self, nodes) -> tuple[int, int]:
        """How many nodes of its passthrough devices (as ``locality`` weighs them) and of its
        backing devices ``nodes`` miss: the placement's first rules after the fewest nodes."""
        need, backing = self.device_nodes
        return len(need.difference(nodes)), len(backing.difference(nodes))


@dataclass(frozen=True)
class Placement:
    mode: Pinning
    nodes: tuple[int, ...] = ()
    pins: tuple[int, ...] = ()  # host CPU of each vCPU (dedicated)
    cells: tuple[GuestCell, ...] = ()
    emulator: frozenset[int] = frozenset()  # emulator and iothreads (dedicated)
    emulator_with_vcpus: bool = False  # ``emulator`` is the vCPUs' own dedicated CPUs
    cpuset: frozenset[int] | None = None  # where floating vCPUs may run (node, float)
    hugepage_kib: int | None = None
    hugepage_why: str = ""  # why this page size, when there was a choice (for --explain)
    warnings: tuple[str, ...] = field(default=())
    l3: tuple[tuple[int, ...], ...] = ()  # the vCPUs on each L3 domain, in vCPU order (dedicated, caches known)
    why: tuple[str, ...] = ()  # what decided the place: L3 domains, core kind, device nodes (--explain)

    @property
    def dedicated(self) -> bool:
        """The vCPUs have host CPUs of their own (the profile's ``Profile.dedicated``)."""
        return self.mode == Pinning.DEDICATED

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "nodes": list(self.nodes),
            "vcpupins": {str(v): c for v, c in enumerate(self.pins)},
            "cells": [
                {"id": c.id, "node": c.node, "vcpus": cpuset.format(c.vcpus), "memory_kib": c.memory_kib}
                for c in self.cells
            ],
            "emulator": cpuset.format(self.emulator),
            "cpuset": None if self.cpuset is None else cpuset.format(self.cpuset),
            "hugepage_kib": self.hugepage_kib,
            "l3": [cpuset.format(vcpus) for vcpus in self.l3],
            "why": list(self.why),
        }


def taken_cores(host: Host, cpus: frozenset[int]) -> frozenset[int]:
    """Every online thread of every core that holds one of ``cpus``."""
    out: set[int] = set()
    for cpu in cpus:
        out |= host.core_of(cpu) if cpu in host.cpus else {cpu}
    return frozenset(out)


def _normal_free(host: Host, ledger: Ledger, node: int) -> int | None:
    cell = host.cell(node)
    if not cell.memory_kib:
        return None  # unknown
    pool = sum(size * count for size, count in cell.pages.items())
    return cell.memory_kib - pool - ledger.memory.get(node, 0)


def _pages_free(host: Host, ledger: Ledger, node: int, size: int) -> int:
    return host.cell(node).pages.get(size, 0) - ledger.hugepages.get((node, size), 0)


def _backs(host: Host, ledger: Ledger, split: list[tuple[int, int]], size: int, req: Request) -> bool:
    """Whether free pages of ``size`` back every (node, KiB) of ``split`` and the memory devices
    there, each backend rounded up to whole pages (QEMU rounds a hugepage-backed memory up to its
    page size). A device whose size ``size`` does not divide gets pages of its own (passes/_pages.py):
    not counted here."""
    need: dict[int, int] = {}
    for node, kib in split:
        need[node] = need.get(node, 0) + -(-kib // size)
    for node, kib in _device_split(split, req, size):
        need[node] = need.get(node, 0) + kib // size
    return all(_pages_free(host, ledger, node, size) >= pages for node, pages in need.items())


def _device_split(split: list[tuple[int, int]], req: Request, size: int | None) -> list[tuple[int, int]]:
    """(node, KiB) of each memory device: on the node of the guest cell it targets (the last one
    when there are fewer); with ``size``, only the devices whose granule ``size`` divides."""
    if not split:
        return []
    return [(split[min(cell, len(split) - 1)][0], kib) for cell, kib, granule in req.devices
            if size is None or granule % size == 0]


def _split_memory(total: int, shares: list[int], granule: int) -> list[int]:
    n = sum(shares)
    parts = [(total * s // n) // granule * granule for s in shares]
    parts[-1] += total - sum(parts)
    return parts


# Rounding waste of at most 1/NEGLIGIBLE of the memory counts as none: then the larger page wins.
NEGLIGIBLE = 1024


def _waste(parts: list[int], size: int) -> int:
    """KiB lost rounding each part (a guest cell, its own backend) up to whole pages of ``size``."""
    return sum(-(-p // size) * size - p for p in parts)


def _page_choice(fits: dict[int, tuple[list[int], int]], memory_kib: int) -> tuple[int, str]:
    """Of the page sizes whose free pages back the memory (size -> (parts, waste)), the one that
    wastes least; a negligible waste counts as none and the larger page wins ties. And why."""
    def key(size: int) -> tuple[int, int]:
        waste = fits[size][1]
        return (0 if waste * NEGLIGIBLE <= memory_kib else waste, -size)

    size = min(fits, key=key)
    if len(fits) == 1:
        return size, ""
    wasted = ", ".join(f"{units.page(s)} pages {fits[s][1]} KiB" for s in sorted(fits))
    return size, (f"{units.page(size)} pages waste least rounding each guest cell up to whole pages ({wasted}; "
                  f"a waste under 1/{NEGLIGIBLE} of the memory counts as none, and the larger page wins)")


def _memory_fit(host: Host, ledger: Ledger, nodes: tuple[int, ...], shares: list[int], req: Request):
    """(hugepage size or None, memory per node, why that size) when memory fits, else None."""
    sizes = sorted({s for c in host.cells for s in c.pages}) if req.hugepages else []
    fits = {}
    for size in [s for s in sizes if s <= req.memory_kib]:  # a page larger than all memory is all waste
        parts = _split_memory(req.memory_kib, shares, size)
        if all(p > 0 for p in parts) and _backs(host, ledger, list(zip(nodes, parts)), size, req):
            fits[size] = (parts, _waste(parts, size))
    if fits:
        size, why = _page_choice(fits, req.memory_kib)
        return size, fits[size][0], why
    parts = _split_memory(req.memory_kib, shares, MIB)
    need = dict(zip(nodes, parts))
    for node, kib in _device_split(list(zip(nodes, parts)), req, None):
        need[node] += kib
    for node, kib in need.items():
        free = _normal_free(host, ledger, node)
        if free is not None and free < kib:
            return None
    return None, parts, ""


def _distance(host: Host, nodes: tuple[int, ...]) -> int:
    return sum(host.cell(a).distances.get(b, 0) for a, b in combinations(nodes, 2))


def dedicated(host: Host, reserved: frozenset[int], ledger: Ledger, req: Request) -> Placement:
    """Place ``req.vcpus`` dedicated vCPUs and their memory by the rules of the module docstring."""
    blocked = taken_cores(host, ledger.dedicated) | taken_cores(host, reserved)
    free = {c.id: corepick.free_cores(host, c.id, blocked) for c in host.cells if c.cpus}
    cores = {n: corepick.usable(host, cs, req.kinds) for n, cs in free.items()}
    groups = {n: corepick.by_l3(host, cs) for n, cs in cores.items()}
    caps = {n: corepick.capacity(cs, req.smt) for n, cs in cores.items()}
    gcaps = {n: [corepick.capacity(g, req.smt) for g in gs] for n, gs in groups.items()}
    required = req.locality == DeviceLocality.REQUIRED
    n = req.vcpus
    for k in range(1, len(cores) + 1):
        best = None
        for nodes in combinations(sorted(cores), k):
            off = req.off_devices(nodes)
            if required and off[0]:
                continue
            for shares in _shares(n, [caps[x] for x in nodes], [gcaps[x] for x in nodes]):
                fit = _memory_fit(host, ledger, nodes, shares, req)
                if fit is None:
                    continue
                size, parts, why = fit
                room = sum(caps[x] for x in nodes)
                l3, left, small, picks = _score(host, groups, nodes, shares, req.smt)
                key = off + (l3, left, small, size is None, any(a != shares[0] for a in shares),
                             _distance(host, nodes), -room if req.spread else room, nodes)
                if best is None or key < best[0]:
                    best = (key, nodes, picks, size, parts, why)
        if best is not None:
            _, nodes, picks, size, parts, why = best
            return _build(host, reserved, blocked, groups, req, nodes, picks, (size, why), parts)
    raise _why_not(host, reserved, ledger, req, caps, free)


def _score(host: Host, groups, nodes, shares, smt: str):
    """(L3 domains, whole cores left free in them, efficiency threads, the picks) of taking
    ``shares`` on ``nodes``: an L3 domain over two nodes (Intel's SNC) counts once; cores of no
    known L3 count as one domain per node and leave nothing to fit, as before caches were known."""
    picks = [corepick.pick(groups[x], s, smt) for x, s in zip(nodes, shares)]
    ids: set = set()
    left = small = 0
    for x, chosen in zip(nodes, picks):
        for i, threads in chosen:
            l3 = host.l3_of(groups[x][i][0][0])
            ids.add(("node", x) if l3 is None else l3)
            if l3 is not None:
                left += corepick.left_whole(groups[x][i], len(threads), smt)
            if host.hybrid:
                small += sum(host.efficient(c) for c in threads)
    return len(ids), left, small, picks


def _why_not(host, reserved, ledger, req, caps, free) -> DoesNotFit:
    """Why ``req`` fits nowhere: its device's node, the performance cores, memory, or CPUs."""
    from dataclasses import replace

    if req.locality == DeviceLocality.REQUIRED and any(a.passthrough for a in req.anchors):
        try:
            dedicated(host, reserved, ledger, replace(req, locality=DeviceLocality.IGNORE))
        except DoesNotFit:
            pass
        else:
            far = [a for a in req.anchors if a.passthrough]
            where = "; ".join(f"{a.what} is on node {a.node}" for a in far)
            return DoesNotFit(f"{where}: {req.vcpus} dedicated vCPUs and {req.memory_kib} KiB do not fit on "
                              f"node(s) that include {'it' if len(far) == 1 else 'them'} (device_locality = "
                              "\"required\"; \"preferred\" places the domain elsewhere with a warning)")
    n = req.vcpus
    unit = "cores" if req.smt == "isolate" else "CPUs"
    if host.hybrid and req.kinds == CpuKinds.PERFORMANCE:
        every = sum(corepick.capacity(cs, req.smt) for cs in free.values())
        if every >= n > sum(caps.values()):
            return DoesNotFit(f"{n} dedicated vCPUs do not fit on the performance cores: {sum(caps.values())} free "
                              f"performance {unit} are left ({every} with the efficiency cores; the profile's "
                              "cpu_kinds = \"any\" allows them)")
    total = sum(caps.values())
    if total >= n:
        return DoesNotFit(
            f"{n} dedicated vCPUs fit ({total} free {unit}) but {req.memory_kib} KiB of memory does not: "
            "no node has that much normal memory or matching free hugepages left"
        )
    return DoesNotFit(
        f"{n} dedicated vCPUs do not fit: {total} free {unit} outside the reserved set "
        f"({cpuset.format(reserved) or 'none'}) and other domains' dedicated CPUs"
    )


def _shares(n: int, caps: list[int], gcaps: list[list[int]]) -> list[list[int]]:
    """vCPU counts per node: an even split first, then the greedy uneven one, then the one over
    the fewest L3 domains (``gcaps``: each node's capacity per L3 domain)."""
    k = len(caps)
    out: list[list[int]] = []
    if n % k == 0 and all(c >= n // k for c in caps):
        out.append([n // k] * k)
    if k > 1 and sum(caps) >= n:
        left, uneven = n, []
        for i, c in enumerate(caps):
            rest = k - i - 1
            take = min(c, left - rest)
            uneven.append(take)
            left -= take
        if left == 0 and all(x > 0 for x in uneven) and uneven not in out:
            out.append(uneven)
        fewest = _l3_split(n, gcaps)
        if fewest is not None and fewest not in out:
            out.append(fewest)
    return out


def _l3_split(n: int, gcaps: list[list[int]]) -> list[int] | None:
    """vCPU counts per node over the fewest L3 domains: each node's largest domain, then the
    largest others until they hold ``n``; what is over comes off the last domain taken (None:
    a node has no room)."""
    if not all(gcaps):
        return None
    firsts = [max(g) for g in gcaps]
    shares = list(firsts)
    rest = sorted(((c, i) for i, g in enumerate(gcaps) for c in sorted(g, reverse=True)[1:]), reverse=True)
    last = min(range(len(shares)), key=lambda i: (firsts[i], -i))
    for cap, i in rest:
        if sum(shares) >= n:
            break
        shares[i] += cap
        last = i
    over = sum(shares) - n
    if over < 0:
        return None
    for i in [last] + [j for j in range(len(shares)) if j != last]:  # what is over, off the last taken first
        cut = min(over, shares[i] - 1)
        shares[i] -= cut
        over -= cut
    return shares if over == 0 else None


def _build(host, reserved, blocked, groups, req, nodes, picks, page, parts) -> Placement:
    size, why = page
    pins: list[int] = []
    cells: list[GuestCell] = []
    l3: list[tuple[int, ...]] = []
    caches: list[int | None] = []
    for cell_id, (node, chosen, kib) in enumerate(zip(nodes, picks, parts)):
        first = len(pins)
        for i, threads in chosen:
            l3.append(tuple(range(len(pins), len(pins) + len(threads))))
            caches.append(host.l3_of(groups[node][i][0][0]))
            pins.extend(threads)
        cells.append(GuestCell(cell_id, node, tuple(range(first, len(pins))), kib))
    if len(nodes) == 1 and not req.cell_when_single:
        cells = []
    warnings = []
    if req.hugepages and size is None:
        warnings.append(
            f"no hugepages: node(s) {cpuset.format(nodes)} lack enough free hugepages of any size for "
            f"{req.memory_kib} KiB (each guest cell rounded up to whole pages); memory stays on normal pages"
        )
    if any(not host.cell(x).memory_kib for x in nodes):
        warnings.append(f"memory size of node(s) {cpuset.format(nodes)} is unknown; memory fit not checked")
    warnings += placenotes.far(req, nodes)
    known = None not in caches
    return Placement(
        mode=Pinning.DEDICATED,
        nodes=tuple(nodes),
        pins=tuple(pins),
        cells=tuple(cells),
        emulator=frozenset(pins) if req.emulator_with_vcpus else _emulator(host, reserved, blocked, nodes, frozenset(pins)),
        emulator_with_vcpus=req.emulator_with_vcpus,
        hugepage_kib=size,
        hugepage_why=why,
        warnings=tuple(warnings),
        l3=tuple(l3) if known and host.caches else (),
        why=tuple(placenotes.reasons(host, req, nodes, pins, caches if known and host.caches else [])),
    )


def _emulator(host: Host, reserved: frozenset[int], blocked: frozenset[int], nodes, pins: frozenset[int]) -> frozenset[int]:
    """Non-dedicated CPUs for the emulator and iothreads: the node(s)' reserved CPUs first; on a
    hybrid host, the efficiency cores of a choice where it has any."""
    local = frozenset(c for x in nodes for c in host.cell(x).cpus)
    dedicated_elsewhere = blocked - reserved
    for choice in (reserved & local, local - dedicated_elsewhere - pins,
                   reserved & frozenset(host.cpus), frozenset(host.cpus) - dedicated_elsewhere - pins):
        choice = choice - pins
        small = frozenset(c for c in choice if host.efficient(c))
        if choice:
            return small or choice
    raise DoesNotFit("no CPU is left for the emulator and iothreads outside the dedicated vCPUs")


def shared(host: Host, ledger: Ledger, req: Request, one_node: bool) -> Placement:
    """Floating vCPUs: kept off dedicated cores; with ``one_node``, on one node with its memory,
    the node of the devices it uses first (``req.anchors``, as ``dedicated`` weighs them)."""
    free = frozenset(host.cpus) - taken_cores(host, ledger.dedicated)
    if not free:
        raise DoesNotFit("every host CPU is dedicated to another domain; nothing is left to share")
    if not one_node:
        return Placement(mode=Pinning.FLOAT, cpuset=free if ledger.dedicated else None)
    best = None
    for cell in host.cells:
        local = free & frozenset(cell.cpus)
        if not local:
            continue
        off = req.off_devices((cell.id,))
        if req.locality == DeviceLocality.REQUIRED and off[0]:
            continue
        avail = _normal_free(host, ledger, cell.id)
        if avail is not None and avail < req.memory_kib:
            continue
        # spread by the memory other domains left on the node, then by its shared CPUs
        room = avail if avail is not None else 0
        spread = (-room, -len(local), cell.id) if req.spread else (room, len(local), cell.id)
        key = off + spread
        if best is None or key < best[0]:
            best = (key, cell.id, local)
    need = req.device_nodes[0]
    if best is None and req.locality == DeviceLocality.REQUIRED and need:
        far = "; ".join(f"{a.what} is on node {a.node}" for a in req.anchors if a.passthrough)
        raise DoesNotFit(f"{far}: the domain's vCPUs and {req.memory_kib} KiB do not fit on "
                         f"{'that node' if len(need) == 1 else 'one node with all of them'} "
                         "(device_locality = \"required\")")
    if best is None:
        return Placement(
            mode=Pinning.NODE,
            cpuset=free,
            warnings=(f"{req.memory_kib // MIB} MiB does not fit on one node; vCPUs and memory are not bound to a node",),
        )
    _, node, local = best
    return Placement(mode=Pinning.NODE, nodes=(node,), cpuset=local, warnings=tuple(placenotes.far(req, (node,))),
                     why=tuple(placenotes.reasons(host, req, (node,), [], [])))
