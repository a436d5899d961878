"""Choosing host nodes, CPUs and hugepages for one domain, given what others hold.

Pure functions of (host, reserved CPUs, ledger, request). A dedicated vCPU gets a host CPU on a
physical core that nobody else uses: not the host's reserved cores, not a core that holds
another domain's dedicated CPU. Among the places that fit, the rules of rules.py decide, in their
order (``Score``: one named field each, compared in that order):

1. the fewest vCPUs outside the user's bound (``<vcpu cpuset>``, hand pins: vmtune/intent.py),
   where there is one;
2. the fewest NUMA nodes (without a bound they come first: the search stops at the fewest that fit);
3. the nodes of the devices it uses (``Anchor``): a passthrough device's node must be one of the
   domain's nodes under ``required`` and should be under ``preferred``; a backing device's (a
   block device, a macvtap or bridge port) should be;
4. the fewest L3 domains (``Host.caches``; one over two nodes counts once), the larger L3 per vCPU,
   and the one that fits best: left with the fewest whole free cores, which keeps large holes for
   large domains (corepick.py);
5. performance cores on a hybrid host: only those under ``cpu_kinds = "performance"``, first
   under ``"any"``;
6. then, as before caches were known: the pool as it is over the domain's own pages kept short,
   hugepages over none, even shares, short distances, and the spread across nodes (or the
   packing, with ``placement = "pack"``); the lowest node ids last.

The best place of other nodes than the chosen one is kept too: ``why_not`` says the rule it lost by
(``rewrite --explain``).

A host without cache information, core kinds or devices is placed exactly as before them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import combinations

from . import corepick, housekeeping, memfit, placenotes, rules
from .. import cpuset
from .claims import Ledger
from ..errors import DoesNotFit
from ..host import Host
from .locality import Anchor
from .rules import Score
from ..profiles import CpuKinds, DeviceLocality, Pinning

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
    # the user's own choices (vmtune/placement/intent.py): the CPUs the vCPUs were given (a bound: inside as far
    # as it holds them), the hand-pinned CPUs (taken first), one CPU per vCPU pinned by hand (kept
    # when the placement takes exactly those), and how a warning names the bound
    within: frozenset[int] | None = None
    prefer: frozenset[int] = frozenset()
    hand_pins: tuple[int, ...] = ()
    hand_helpers: frozenset[int] = frozenset()  # the CPUs of the hand's emulator and iothread pins
    hand_said: str = "the hand's"  # whose pins ``hand_pins`` are, as warnings name them
    within_what: str = ""
    pages_kept: bool = False  # the domain has <hugepages> of its own: kept when short now
    page_kib: int | None = None  # the page size it names (None: vmtune's choice)
    topped_up: bool = False  # the hook tops up the hugepage pool at start (a latency profile's)
    rt_threads: int = 0  # real-time emulator and iothreads: a CPU of their own each
    helpers: int = 1  # emulator and iothreads that run on the housekeeping CPUs
    active: int | None = None  # enabled vCPUs at boot (<vcpu current>, enabled='no'), when fewer

    @property
    def device_nodes(self) -> tuple[frozenset[int], frozenset[int]]:
        """(The nodes of its passthrough devices, as ``locality`` weighs them; of its backing ones.)
        Worked out once a request, beside its fields (not functools.cached_property, whose lock
        costs more than the sets on a request made for each rewrite)."""
        found = self.__dict__.get("_device_nodes")
        if found is None:
            need = frozenset(a.node for a in self.anchors if a.passthrough) \
                if self.locality != DeviceLocality.IGNORE else frozenset()
            backing = frozenset(a.node for a in self.anchors if not a.passthrough)
            found = self.__dict__["_device_nodes"] = (need, backing)
        return found

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
    hugepage_gone: str = ""  # why the domain's own hugepages cannot stay
    warnings: tuple[str, ...] = field(default=())
    l3: tuple[tuple[int, ...], ...] = ()  # the vCPUs on each L3 domain, in vCPU order (dedicated, caches known)
    why: tuple[str, ...] = ()  # what decided the place: L3 domains, core kind, device nodes (--explain)
    why_not: tuple[str, ...] = ()  # the best place on other nodes, and the rule it lost by (rules.why_not)
    rt: tuple[int, ...] = ()  # a CPU of its own for each real-time emulator and iothread (dedicated)
    hand: bool = False  # the pins are the hand's own, kept as they were

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
            "rt": cpuset.format(self.rt),
            "why": list(self.why),
            "why_not": list(self.why_not),
        }


def taken_cores(host: Host, cpus: frozenset[int]) -> frozenset[int]:
    """Every online thread of every core that holds one of ``cpus``, worked out once per host and
    set of CPUs (the same reserved and held sets come back domain after domain)."""
    if not cpus:
        return frozenset()
    cpus = cpus if isinstance(cpus, frozenset) else frozenset(cpus)  # a key of the memo
    memo = host.__dict__.setdefault("_taken_cores", {})  # a cache beside the fields: not compared
    found = memo.get(cpus)
    if found is None:
        if len(memo) >= _MEMO:
            memo.clear()
        out: set[int] = set()
        for cpu in cpus:
            out |= host.core_of(cpu) if cpu in host.cpus else {cpu}
        found = memo[cpus] = frozenset(out)
    return found


def _distance(host: Host, nodes: tuple[int, ...]) -> int:
    """The NUMA distances between ``nodes``, added up: worked out once per host and choice of nodes."""
    known = host.__dict__.setdefault("_distances", {})  # a cache beside the fields: not compared
    found = known.get(nodes)
    if found is None:
        found = known[nodes] = sum(host.cell(a).distances.get(b, 0) for a, b in combinations(nodes, 2))
    return found


def dedicated(host: Host, reserved: frozenset[int], ledger: Ledger, req: Request) -> Placement:
    """Place ``req.vcpus`` dedicated vCPUs and their memory by the rules of the module docstring:
    the hand's own pins as they are where they hold; else inside ``req.within`` where it holds them
    all; else with as few vCPUs outside it as the room allows (each named in a warning)."""
    blocked = taken_cores(host, ledger.dedicated) | taken_cores(host, reserved)
    free = _free(host, blocked)
    hand = _hand(host, ledger, req, blocked)
    if hand is not None:
        return _build(host, reserved, blocked, ledger, req, *hand, hand=True)
    best = None
    if req.hand_helpers:  # the CPUs the hand gave the emulator and iothreads stay theirs where the vCPUs fit elsewhere
        spare = taken_cores(host, req.hand_helpers)
        avoid = {n: [c for c in cs if not spare.intersection(c)] for n, cs in free.items()}
        best = _search(host, ledger, req, avoid, only=req.within) if req.within is not None else None
        if best is None:
            best = _search(host, ledger, req, avoid, first=req.within or frozenset(), fewest=req.within is None)
    if best is None and req.within is not None:
        best = _search(host, ledger, req, free, only=req.within)
    if best is None:
        best = _search(host, ledger, req, free, first=req.within or frozenset(), fewest=req.within is None)
    if best is None:
        raise _why_not(host, reserved, ledger, req, free)
    placed = _build(host, reserved, blocked, ledger, req, *best)
    if req.active is not None and len(placed.nodes) > 1:  # would the enabled vCPUs alone fit on fewer?
        fewer = _search(host, ledger, replace(req, vcpus=req.active, within=None), free)
        if fewer is not None and len(fewer[0]) < len(placed.nodes):
            placed = replace(placed, warnings=placed.warnings + (
                f"the domain spans nodes {cpuset.format(placed.nodes)} for its {req.vcpus} vCPUs"
                + placenotes.placeholders(req) + f"; its {req.active} enabled vCPUs alone would fit on "
                f"{len(fewer[0])} node{'s' if len(fewer[0]) > 1 else ''}",))
    return placed


def _search(host: Host, ledger: Ledger, req: Request, free, only: frozenset[int] | None = None,
            first: frozenset[int] = frozenset(), fewest: bool = True):
    """The best (nodes, threads per node, memory fit) by the rules, on ``free`` cores (only those
    threads of ``only``, when given; ``first``'s threads taken before others); None: nothing fits.
    Without ``fewest``, the fewest vCPUs outside ``req.within`` come before the fewest nodes."""
    cores, groups, caps, gcaps, sizes, scored = _tables(host, free, req.kinds, req.smt, only)
    required = req.locality == DeviceLocality.REQUIRED
    prefer = req.prefer or first
    n = req.vcpus
    mine = {x: corepick.capacity(corepick.restrict(cs, req.within), req.smt) for x, cs in cores.items()} \
        if req.within is not None and only is None else {}
    best = rival = None
    for k in range(1, len(cores) + 1):
        for nodes in combinations(sorted(cores), k):
            off = req.off_devices(nodes)
            if required and off[0]:
                continue
            wants = [mine[x] for x in nodes] if mine else None
            for shares in _shares(n, [caps[x] for x in nodes], [gcaps[x] for x in nodes], wants):
                fit = memfit.fit(host, ledger, nodes, shares, req)
                if fit is None:
                    continue
                room = sum(caps[x] for x in nodes)
                seen = (nodes, tuple(shares), prefer)  # the same on the same free cores: worked out once
                score = scored.get(seen)
                if score is None:
                    if len(scored) >= _MEMO * 16:  # hand pins of many kinds on the same free cores
                        scored.clear()
                    score = scored[seen] = _scored(host, groups, sizes, nodes, shares, req.smt, prefer)
                l3, cache, left, small, threads = score
                outside = 0 if req.within is None else sum(t not in req.within for ts in threads for t in ts)
                key = Score(outside, 0 if fewest else k, *off, l3, -cache, left, small, fit.short, fit.size is None,
                            any(a != shares[0] for a in shares), _distance(host, nodes),
                            -room if req.spread else room, nodes)
                if best is None or key < best[0]:
                    if best is not None and best[1] != nodes:
                        rival = best[0]
                    best = (key, nodes, threads, fit)
                elif nodes != best[1] and (rival is None or key < rival):
                    rival = key
        if best is not None and fewest:
            break
    if best is None:
        return None
    said = rules.why_not(best[0], rival) if rival is not None else None  # never of the best's nodes
    return (*best[1:], said)


class _Free(dict):
    """Each node's free cores (``_free``), and the search's tables of them by (core kinds, smt)."""

    __slots__ = ("tables",)


def _free(host: Host, blocked: frozenset[int]) -> _Free:
    """Each node's cores with no thread in ``blocked`` (corepick.free_cores), worked out once per
    host and ``blocked``: a host's domains are placed one after another beside the same few
    blocked sets (the planner, the hook, orchestration code). The search only reads them."""
    memo = host.__dict__.setdefault("_free_cores", {})  # a cache beside the fields: not compared
    found = memo.get(blocked)
    if found is None:
        if len(memo) >= _MEMO:
            memo.clear()
        found = memo[blocked] = _Free((c.id, corepick.free_cores(host, c.id, blocked)) for c in host.cells if c.cpus)
        found.tables = {}
    return found


_MEMO = 256  # blocked sets remembered a host (a planner's fleet makes one a domain placed)


def _tables(host: Host, free, kinds: CpuKinds, smt: str, only: frozenset[int] | None):
    """(cores, L3 groups, capacities, capacities per group, L3 KiB per group) of each node of
    ``free`` that the search weighs, and the scores of shares of them (``_score``, filled in as the
    search weighs them); of ``_free``'s cores (no ``only``), worked out once."""
    memo = free.tables if only is None and isinstance(free, _Free) else None
    found = memo.get((kinds, smt)) if memo is not None else None
    if found is not None:
        return found
    cores = {n: corepick.usable(host, cs, kinds) for n, cs in free.items()}
    if only is not None:
        cores = {n: corepick.restrict(cs, only) for n, cs in cores.items()}
    groups = {n: corepick.by_l3(host, cs) for n, cs in cores.items()}
    caps = {n: corepick.capacity(cs, smt) for n, cs in cores.items()}
    gcaps = {n: [corepick.capacity(g, smt) for g in gs] for n, gs in groups.items()}
    sizes = {n: [_l3_size(host, g) for g in gs] for n, gs in groups.items()}
    tables = cores, groups, caps, gcaps, sizes, {}
    if memo is not None:
        memo[(kinds, smt)] = tables
    return tables


def _l3_size(host: Host, group) -> int:
    """The size of the L3 domain of a group of cores (0: unknown)."""
    l3 = host.l3_of(group[0][0]) if group else None
    return host.cache(l3).size_kib if l3 is not None and host.caches else 0


def _hand(host: Host, ledger: Ledger, req: Request, blocked: frozenset[int]):
    """(nodes, threads per node, memory fit) of the hand's own pins (one CPU per vCPU) when the
    profile can live with them: no CPU reserved or another's, one vCPU per core under ``isolate``,
    performance cores under ``cpu_kinds = "performance"``, inside the bound, the memory fits."""
    pins = req.hand_pins
    if not pins or len(pins) != req.vcpus or _hand_not(host, req, blocked):
        return None
    nodes = tuple(dict.fromkeys(host.cpus[c].node for c in pins))
    if req.locality == DeviceLocality.REQUIRED and req.off_devices(nodes)[0]:
        return None
    threads = [[c for c in pins if host.cpus[c].node == x] for x in nodes]
    fit = memfit.fit(host, ledger, nodes, [len(t) for t in threads], req)
    return None if fit is None else (nodes, threads, fit)


def _hand_not(host: Host, req: Request, blocked: frozenset[int]) -> str:
    """Why the profile cannot live with the hand's pins ("" when it can, memory aside): pins over
    several nodes give way too (the fewest nodes come first)."""
    pins = req.hand_pins
    if any(c not in host.cpus for c in pins):
        return "they name CPUs this host does not have"
    taken = blocked.intersection(pins)
    if taken:
        own = req.hand_helpers - frozenset(pins)
        hint = (f"; a reserved_cpus of the CPUs you keep for the host (your emulator's and iothreads' "
                f"{cpuset.format(own)}?) keeps these pins") if own else ""
        return f"{'CPUs' if len(taken) > 1 else 'CPU'} {cpuset.format(taken)} {'are' if len(taken) > 1 else 'is'} " \
               f"kept for the host (reserved_cpus) or held by another domain{hint}"
    if req.smt == "isolate" and len({host.core_of(c) for c in pins}) < len(pins):
        return "two vCPUs share a core, and the profile puts one vCPU per core (smt = \"isolate\")"
    if host.hybrid and req.kinds == CpuKinds.PERFORMANCE and any(host.efficient(c) for c in pins):
        return "they take efficiency cores, and the profile takes performance cores only (cpu_kinds)"
    if req.within is not None and not set(pins) <= req.within:
        return f"they leave {req.within_what}"
    nodes = {host.cpus[c].node for c in pins}
    if len(nodes) > 1:
        return f"they span nodes {cpuset.format(nodes)}, and the profile puts a domain on the fewest nodes that hold it"
    return ""


def _scored(host: Host, groups, sizes, nodes, shares, smt: str, prefer: frozenset[int]):
    """``_score``, with the threads each node's picks take (a tuple a node, never changed: the
    search remembers them beside the score)."""
    l3, cache, left, small, picks = _score(host, groups, sizes, nodes, shares, smt, prefer)
    return l3, cache, left, small, tuple(tuple(t for _, chosen in picked for t in chosen) for picked in picks)


def _score(host: Host, groups, sizes, nodes, shares, smt: str, prefer: frozenset[int]):
    """(L3 domains, L3 KiB per vCPU, whole cores left free in them, efficiency threads, the picks)
    of taking ``shares`` on ``nodes``: an L3 domain over two nodes (Intel's SNC) counts once; cores
    of no known L3 count as one domain per node and leave nothing to fit, as before caches were
    known."""
    picks = [corepick.pick(groups[x], s, smt, sizes[x], prefer) for x, s in zip(nodes, shares)]
    ids: set = set()
    left = small = kib = 0
    for x, chosen in zip(nodes, picks):
        for i, threads in chosen:
            l3 = host.l3_of(groups[x][i][0][0])
            ident = ("node", x) if l3 is None else l3
            if ident not in ids:
                kib += sizes[x][i]
            ids.add(ident)
            if l3 is not None:
                left += corepick.left_whole(groups[x][i], len(threads), smt)
            if host.hybrid:
                small += sum(host.efficient(c) for c in threads)
    return len(ids), kib / max(sum(shares), 1), left, small, picks


def _why_not(host, reserved, ledger, req, free) -> DoesNotFit:
    """Why ``req`` fits nowhere: its device's node, the performance cores, memory, or CPUs (and the
    disabled placeholder vCPUs, when the enabled ones alone would fit)."""
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
                              "\"required\"; \"preferred\" places the domain elsewhere with a warning)"
                              + placenotes.placeholders(req))
    n = req.vcpus
    unit = "cores" if req.smt == "isolate" else "CPUs"
    caps = {x: corepick.capacity(corepick.usable(host, cs, req.kinds), req.smt) for x, cs in free.items()}
    total = sum(caps.values())
    if host.hybrid and req.kinds == CpuKinds.PERFORMANCE:
        every = sum(corepick.capacity(cs, req.smt) for cs in free.values())
        if every >= n > total:
            return DoesNotFit(f"{n} dedicated vCPUs do not fit on the performance cores: {total} free "
                              f"performance {unit} are left ({every} with the efficiency cores; the profile's "
                              "cpu_kinds = \"any\" allows them)" + placenotes.placeholders(req, total))
    if total >= n:
        return DoesNotFit(
            f"{n} dedicated vCPUs fit ({total} free {unit}) but {req.memory_kib} KiB of memory does not: "
            "no node has that much normal memory or matching free hugepages left"
        )
    return DoesNotFit(
        f"{n} dedicated vCPUs do not fit: {total} free {unit} outside the reserved set "
        f"({cpuset.format(reserved) or 'none'}) and other domains' dedicated CPUs" + placenotes.placeholders(req, total)
    )


def _shares(n: int, caps: list[int], gcaps: list[list[int]], wants: list[int] | None = None) -> list[list[int]]:
    """vCPU counts per node: an even split first, then the greedy uneven one, then the one over
    the fewest L3 domains (``gcaps``: each node's capacity per L3 domain); with ``wants`` (each
    node's room inside the user's bound), first the split that fills that room."""
    k = len(caps)
    out: list[list[int]] = []
    if wants is not None and k > 1 and sum(caps) >= n:
        split = [min(w, c) for w, c in zip(wants, caps)]
        over = sum(split) - n
        for i in reversed(range(k)):  # too much room inside: less from the last nodes
            cut = min(over, split[i] - 1)
            split[i] -= max(cut, 0)
            over -= max(cut, 0)
        left = n - sum(split)
        for i in range(k):  # too little: the rest where there is room
            more = min(left, caps[i] - split[i])
            split[i] += more
            left -= more
        if left == 0 and over <= 0 and all(x > 0 for x in split):
            out.append(split)
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


def _runs(host: Host, pins: list[int], start: int) -> list[tuple[int | None, tuple[int, ...]]]:
    """(L3 id, vCPUs) of each run of consecutive vCPUs on one L3 domain; vCPUs from ``start``."""
    out: list[tuple[int | None, tuple[int, ...]]] = []
    for i, cpu in enumerate(pins, start):
        l3 = host.l3_of(cpu)
        if out and out[-1][0] == l3:
            out[-1] = (l3, out[-1][1] + (i,))
        else:
            out.append((l3, (i,)))
    return out


def _paired(host: Host, took: list[int]) -> list[int]:
    """``took`` (one node's threads) with the threads of each core together, whole pairs before
    lone threads within each L3 domain: the guest's threads='2' needs pairs 0 and 1, 2 and 3, ..."""
    if not took or len(host.core_of(took[0])) <= 1 or _whole_pairs(host, took):
        return took  # no sibling threads, or the pairs are whole already (corepick takes a core's threads together)
    out: list[int] = []
    for _, run in _runs(host, took, 0):
        cpus = [took[i] for i in run]
        cores: dict[frozenset[int], list[int]] = {}
        for cpu in cpus:
            cores.setdefault(frozenset(host.core_of(cpu)), []).append(cpu)
        out += [c for core in cores.values() if len(core) > 1 for c in core]
        out += [c for core in cores.values() if len(core) == 1 for c in core]
    return out


def _whole_pairs(host: Host, took: list[int]) -> bool:
    """Whether each core's threads in ``took`` are next to each other, the cores taken whole first."""
    seen: set[int] = set()
    lone = False
    i = 0
    while i < len(took):
        core = host.core_of(took[i])
        n = 1
        while i + n < len(took) and took[i + n] in core:
            n += 1
        if core & seen or (lone and n > 1):
            return False
        lone = lone or n == 1
        seen |= core
        i += n
    return True


def _build(host, reserved, blocked, ledger, req, nodes, threads, fit, why_not: str | None = None,
           hand: bool = False) -> Placement:
    pins: list[int] = []
    cells: list[GuestCell] = []
    runs: list[tuple[int | None, tuple[int, ...]]] = []
    uncelled = len(nodes) == 1 and not req.cell_when_single  # one node, no guest NUMA cell asked for
    for cell_id, (node, took, kib) in enumerate(zip(nodes, threads, fit.parts)):
        first = len(pins)
        if not hand:
            took = _paired(host, took)
            runs += _runs(host, took, first)
        pins.extend(took)
        if not uncelled:
            cells.append(GuestCell(cell_id, node, tuple(range(first, len(pins))), kib))
    if hand:  # the hand's order: the cells hold each node's vCPUs, the runs follow the vCPUs
        pins = list(req.hand_pins)
        cells = [GuestCell(i, x, tuple(v for v, c in enumerate(pins) if host.cpus[c].node == x), kib)
                 for i, (x, kib) in enumerate(zip(nodes, fit.parts))]
        runs = _runs(host, pins, 0)
    if uncelled:
        cells = []
    caches = [l3 for l3, _ in runs]
    known = None not in caches and bool(host.caches) and (not hand or len(set(caches)) == len(caches))
    taken = blocked | taken_cores(host, frozenset(pins))
    rt = housekeeping.rt_cpus(host, taken, nodes, tuple(pins), req.rt_threads)
    emulator = frozenset(pins) if req.emulator_with_vcpus else housekeeping.choose(
        host, reserved, blocked | frozenset(rt), nodes, frozenset(pins), ledger.helpers, req.helpers)
    warnings = placenotes.pages(req, nodes, fit) + placenotes.far(req, nodes)
    if any(not host.cell(x).memory_kib for x in nodes):
        warnings.append(f"memory size of node(s) {cpuset.format(nodes)} is unknown; memory fit not checked")
    warnings += placenotes.outside(host, req, pins, reserved, ledger)
    if req.hand_pins and not hand:
        warnings.append(placenotes.hand_replaced(req, _hand_not(host, req, blocked) or
                                                 "their memory does not fit on their nodes"))
    warnings += placenotes.rt_short(req, rt)
    return Placement(
        mode=Pinning.DEDICATED,
        nodes=tuple(nodes),
        pins=tuple(pins),
        cells=tuple(cells),
        emulator=emulator,
        emulator_with_vcpus=req.emulator_with_vcpus,
        hugepage_kib=fit.size,
        hugepage_why=fit.why,
        hugepage_gone=fit.gone,
        warnings=tuple(warnings),
        l3=tuple(vcpus for _, vcpus in runs) if known else (),
        why=tuple(placenotes.reasons(host, req, nodes, pins, caches if known else [])),
        rt=rt,
        hand=hand,
        why_not=(why_not,) if why_not else (),
    )


def shared(host: Host, ledger: Ledger, req: Request, one_node: bool) -> Placement:
    """Floating vCPUs: kept off dedicated cores; with ``one_node``, on one node with its memory,
    the node of the devices it uses first (``req.anchors``, as ``dedicated`` weighs them)."""
    free = host.cpu_ids - taken_cores(host, ledger.dedicated)
    if not free:
        raise DoesNotFit("every host CPU is dedicated to another domain; nothing is left to share")
    if not one_node:
        return Placement(mode=Pinning.FLOAT, cpuset=free if ledger.dedicated else None)
    best = None
    for cell in host.cells:
        local = free & host.cpus_of((cell.id,))
        if not local:
            continue
        off = req.off_devices((cell.id,))
        if req.locality == DeviceLocality.REQUIRED and off[0]:
            continue
        avail = memfit.normal_free(host, ledger, cell.id)
        if avail is not None and avail < req.memory_kib:
            continue
        # spread by the memory other domains left on the node (bound there, or preferred), then by
        # its shared CPUs
        room = (avail if avail is not None else 0) - ledger.preferred.get(cell.id, 0)
        spread = (-room, -len(local), cell.id) if req.spread else (room, len(local), cell.id)
        mine = -len(local & req.within) if req.within is not None else 0  # the user's CPUs first
        key = (mine,) + off + spread
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
    warnings = placenotes.far(req, (node,))
    if req.within is not None and local & req.within:
        if not req.within & free <= local:
            warnings.append(f"{req.within_what} narrowed to CPUs {cpuset.format(local & req.within)}: the profile keeps "
                            f"the vCPUs on one node with their memory (node {node})")
        local = local & req.within
    return Placement(mode=Pinning.NODE, nodes=(node,), cpuset=local, warnings=tuple(warnings),
                     why=tuple(placenotes.reasons(host, req, (node,), [], [])))
