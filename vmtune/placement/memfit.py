"""Whether a dedicated domain's memory fits on a choice of host nodes, and on which pages.

Pure functions of (host, ledger, nodes, the vCPU share of each node, request). The memory is split
over the nodes as the vCPUs are; each part is one QEMU backend, rounded up to whole pages.

- **Hugepages the profile wants** (``memory_hugepages``): of the host's page sizes whose free pages
  back every part, the one that wastes least rounding up (a negligible waste counts as none, and the
  larger page wins); when none has enough free pages now, normal pages, with a warning.
- **Hugepages the domain has** (its own ``<hugepages>``): kept, with the page size it names, even
  when the pool is short now (``Fit.short``): VFIO users allocate pages in a prepare hook, and
  vmtune's hook tops the pool up at start. They go only where they can never fit: a page size the
  host does not have, or a part larger than its node's memory (``Fit.gone`` says which). A host
  that names no page sizes, or not its nodes' memory, cannot say that: they stay.
- **Normal pages**: each part must fit in its node's free normal memory (its memory less the
  hugepage pool less what other domains bind there strictly), when that is known.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..xml import units
from .claims import Ledger
from ..host import Host

MIB = 1024
DEFAULT_PAGE_KIB = 2048  # the default hugepage size where the host names none (x86's)


@dataclass(frozen=True)
class Fit:
    size: int | None  # hugepage size KiB; None: normal pages
    parts: list[int]  # KiB per node
    why: str = ""  # why this page size, when there was a choice
    short: bool = False  # the domain's own hugepages, kept though the pool is short now
    gone: str = ""  # why the domain's own hugepages cannot stay (normal pages then)


def sizes(host: Host) -> list[int]:
    """The host's hugepage sizes, smallest first: worked out once per host (the search asks for
    each choice of nodes it weighs). The list is shared: read it, do not change it."""
    found = host.__dict__.get("_page_sizes")  # a cache beside the fields: not compared
    if found is None:
        found = host.__dict__["_page_sizes"] = sorted({s for c in host.cells for s in c.pages})
    return found


def _normal_free(host: Host, ledger: Ledger, node: int) -> int | None:
    cell = host.cell(node)
    if not cell.memory_kib:
        return None  # unknown
    pool = sum(size * count for size, count in cell.pages.items())
    return cell.memory_kib - pool - ledger.memory.get(node, 0)


def _pages_free(host: Host, ledger: Ledger, node: int, size: int) -> int:
    return host.cell(node).pages.get(size, 0) - ledger.hugepages.get((node, size), 0)


def _backs(host: Host, ledger: Ledger, split: list[tuple[int, int]], size: int, req) -> bool:
    """Whether free pages of ``size`` back every (node, KiB) of ``split`` and the memory devices
    there, each backend rounded up to whole pages (QEMU rounds a hugepage-backed memory up to its
    page size). A device whose size ``size`` does not divide gets pages of its own (passes/_pages.py):
    not counted here."""
    need: dict[int, int] = {}
    for node, kib in split:
        need[node] = need.get(node, 0) + -(-kib // size)
    if req.devices:  # most domains have no memory device
        for node, kib in _device_split(split, req, size):
            need[node] = need.get(node, 0) + kib // size
    for node, pages in need.items():
        if _pages_free(host, ledger, node, size) < pages:
            return False
    return True


def _device_split(split: list[tuple[int, int]], req, size: int | None) -> list[tuple[int, int]]:
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
    return _choice(tuple((size, waste) for size, (_, waste) in fits.items()), memory_kib)


@functools.lru_cache(maxsize=256)
def _choice(wastes: tuple[tuple[int, int], ...], memory_kib: int) -> tuple[int, str]:
    """``_page_choice`` of its (size, waste) pairs, remembered: the search weighs the same sizes
    on each choice of nodes, and a host's domains come in a few sizes."""
    waste_of = dict(wastes)

    def key(size: int) -> tuple[int, int]:
        waste = waste_of[size]
        return (0 if waste * NEGLIGIBLE <= memory_kib else waste, -size)

    size = min(waste_of, key=key)
    if len(waste_of) == 1:
        return size, ""
    wasted = ", ".join(f"{units.page(s)} pages {waste_of[s]} KiB" for s in sorted(waste_of))
    return size, (f"{units.page(size)} pages waste least rounding each guest cell up to whole pages ({wasted}; "
                  f"a waste under 1/{NEGLIGIBLE} of the memory counts as none, and the larger page wins)")


def _kept(host: Host, nodes: tuple[int, ...], shares: list[int], req) -> Fit | None:
    """The domain's own hugepages when no size backs it now: its page size, unless it can never fit."""
    have = sizes(host)
    size = req.page_kib or (have[0] if have else DEFAULT_PAGE_KIB)
    if have and size not in have:  # a host that lists no page sizes (capabilities without <pages>) cannot tell
        named = units.page(req.page_kib) if req.page_kib else "huge"
        return Fit(None, [], gone=f"the domain's <hugepages> asks for {named} pages, which this host does not have")
    parts = _split_memory(req.memory_kib, shares, size)
    if not all(p > 0 for p in parts):
        return None
    for node, kib in zip(nodes, parts):
        total = host.cell(node).memory_kib
        if total and -(-kib // size) * size > total:
            return Fit(None, [], gone=f"{kib} KiB of it on node {node} is more than the node's memory ({total} KiB)")
    return Fit(size, parts, short=True)


def fit(host: Host, ledger: Ledger, nodes: tuple[int, ...], shares: list[int], req) -> Fit | None:
    """How the memory fits on ``nodes`` with these vCPU ``shares`` (the module docstring); None when
    it does not."""
    wanted = req.hugepages or req.pages_kept
    choices = sizes(host) if wanted else []
    if req.pages_kept and req.page_kib:
        choices = [s for s in choices if s == req.page_kib]
    fits = {}
    for size in [s for s in choices if s <= req.memory_kib]:  # a page larger than all memory is all waste
        parts = _split_memory(req.memory_kib, shares, size)
        if min(parts) > 0 and _backs(host, ledger, list(zip(nodes, parts)), size, req):  # a part a node: never empty
            fits[size] = (parts, _waste(parts, size))
    if fits:
        size, why = _page_choice(fits, req.memory_kib)
        return Fit(size, fits[size][0], why)
    gone = ""
    if req.pages_kept:
        kept = _kept(host, nodes, shares, req)
        if kept is None or kept.size is not None:
            return kept
        gone = kept.gone
    parts = _split_memory(req.memory_kib, shares, MIB)
    need = dict(zip(nodes, parts))
    if req.devices:
        for node, kib in _device_split(list(zip(nodes, parts)), req, None):
            need[node] += kib
    for node, kib in need.items():
        free = _normal_free(host, ledger, node)
        if free is not None and free < kib:
            return None
    return Fit(None, parts, gone=gone)


def normal_free(host: Host, ledger: Ledger, node: int) -> int | None:
    """Free normal memory of ``node`` for a domain bound there (None: unknown)."""
    return _normal_free(host, ledger, node)
