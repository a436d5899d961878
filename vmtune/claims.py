"""What other domains on the host already hold: dedicated CPUs, strict-bound memory, hugepages."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from . import cpuset, units, xmlsafe
from .errors import InvalidInput
from .host import Host
from .model import Domain

DEDICATED_PROFILES = ("latency", "realtime")


@dataclass(frozen=True)
class Claim:
    """One other domain, as far as placement cares."""

    name: str | None
    uuid: str | None
    profile: str | None
    dedicated: frozenset[int]  # host CPUs its vCPUs hold for themselves
    pinned: frozenset[int]  # every host CPU its vCPUs are pinned to
    memory: Mapping[int, int] = field(default_factory=dict)  # node -> KiB bound strictly
    hugepages: Mapping[tuple[int, int], int] = field(default_factory=dict)  # (node, size KiB) -> pages


@dataclass(frozen=True)
class Ledger:
    """All claims on one host added up."""

    claims: tuple[Claim, ...] = ()
    dedicated: frozenset[int] = frozenset()
    memory: Mapping[int, int] = field(default_factory=dict)
    hugepages: Mapping[tuple[int, int], int] = field(default_factory=dict)


def hugepage_size(dom: Domain, host: Host) -> int | None:
    hp = dom.find("memoryBacking/hugepages")
    if hp is None:
        return None
    page = hp.find("page")
    if page is not None and page.get("size"):
        return units.to_kib(page.get("size"), page.get("unit"))
    sizes = sorted({s for c in host.cells for s in c.pages})
    return sizes[0] if sizes else 2048  # libvirt uses the default hugepage size


def _split(total: int, nodes: list[int]) -> dict[int, int]:
    if not nodes:
        return {}
    share, rest = divmod(total, len(nodes))
    return {n: share + (rest if i == 0 else 0) for i, n in enumerate(nodes)}


def _bound_memory(dom: Domain) -> dict[int, int]:
    """Node -> KiB for the memory a domain binds strictly (memnodes per guest cell, else <memory>)."""
    mode = dom.numa_mode or "strict"
    if dom.find("numatune/memory") is None or mode != "strict" or dom.numa_placement == "auto":
        return {}
    nodes = sorted(dom.numa_nodeset)
    out: dict[int, int] = defaultdict(int)
    cells = {c.id: c.memory_kib for c in dom.cells}
    memnodes = {int(e.get("cellid", -1)): e for e in dom.iter("numatune/memnode")}
    spread_kib = 0
    for cell_id, kib in cells.items():
        node_el = memnodes.get(cell_id)
        if node_el is not None and (node_el.get("mode") or "strict") == "strict":
            for n, part in _split(kib, sorted(cpuset.parse(node_el.get("nodeset")))).items():
                out[n] += part
        else:
            spread_kib += kib
    if not cells:
        spread_kib = dom.memory_kib
    for n, part in _split(spread_kib, nodes).items():
        out[n] += part
    return dict(out)


@lru_cache(maxsize=4096)
def read(xml: str | bytes, host: Host) -> Claim:
    """What domain ``xml`` holds on ``host`` (cached: planning N domains reads each claim once)."""
    root = xmlsafe.parse(xml, "claimed domain XML")
    if root.tag != "domain":
        raise InvalidInput(f"a claim must be a <domain>, not <{root.tag}>")
    dom = Domain(root)
    pins = dom.vcpupins()
    pinned = frozenset().union(*pins.values()) if pins else frozenset()
    profile = dom.tagged_profile
    dedicated = pinned if (profile in DEDICATED_PROFILES or dom.every_vcpu_pinned_alone) else frozenset()
    memory = _bound_memory(dom)
    hugepages: dict[tuple[int, int], int] = {}
    size = hugepage_size(dom, host)
    if size:
        for node, kib in memory.items():
            hugepages[(node, size)] = -(-kib // size)
        memory = {}
    return Claim(dom.name, dom.uuid, profile, dedicated, pinned, memory, hugepages)


def ledger(claims: Iterable[str | bytes], host: Host, skip_uuid: str | None = None, skip_name: str | None = None) -> Ledger:
    """Add up ``claims``, leaving out the domain being placed (same uuid or name)."""
    kept: list[Claim] = []
    for xml in claims:
        claim = read(xml, host)
        if (skip_uuid and claim.uuid == skip_uuid) or (skip_name and claim.name == skip_name):
            continue
        kept.append(claim)
    memory: dict[int, int] = defaultdict(int)
    pages: dict[tuple[int, int], int] = defaultdict(int)
    for claim in kept:
        for node, kib in claim.memory.items():
            memory[node] += kib
        for key, count in claim.hugepages.items():
            pages[key] += count
    dedicated = frozenset().union(*(c.dedicated for c in kept)) if kept else frozenset()
    return Ledger(tuple(kept), dedicated, dict(memory), dict(pages))
