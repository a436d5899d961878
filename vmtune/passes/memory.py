"""<memoryBacking> (hugepages, nosharepages, locked) and the balloon."""

from .. import cpuset
from ..xml import units, xmltext
from ..xml.edits import E, Put, Remove, insert
from ..xml.model import KIB, Domain
from . import _pages
from ._xml import comments, copy, put_under


def _hugepages(ctx, dom, new) -> tuple[list[str], list]:
    """Put the placement's page size into ``new`` (a <memoryBacking>): the reasons, and the edits
    that give memory devices the page size is wrong for their own (passes/_pages.py)."""
    pl = ctx.placement
    pages = list(xmltext.each(new, "hugepages"))
    kept = [n for el in pages for n in comments(el)]
    old_pages = bool(pages)
    for el in pages:
        new.remove(el)
    size = pl.hugepage_kib
    if not size:
        had = old_pages and pl.hugepage_gone
        return ([f"hugepages removed: {pl.hugepage_gone}"] if had else []), []
    cells = frozenset(c.id for c in pl.cells)
    edits, normal, why = _pages.devices(ctx.host, dom, size, cells)
    if cells and cells <= normal:
        return why, edits
    nodeset = cpuset.format(cells - normal) if cells else None
    insert(new, E("hugepages", None, *kept, E("page", {"size": size, "unit": KIB, "nodeset": nodeset}, into=new), into=new))
    reasons = [f"{units.page(size)} hugepages: fewer TLB misses, never swapped or moved"]
    reasons += [pl.hugepage_why] if pl.hugepage_why else []
    huge = [c for c in pl.cells if c.id not in normal]
    return reasons + _pages.rounding(huge, dom, size) + why, edits


def _no_anonymous_source(new) -> list[str]:
    """With hugepages in ``new``, drop an anonymous ``<source>``, which libvirt refuses beside them."""
    anonymous = [el for el in xmltext.each(new, "source") if el.get("type") == Domain.MEMORY_SOURCE_ANONYMOUS]
    if xmltext.find(new, "hugepages") is None or not anonymous:
        return []
    for el in anonymous:
        new.remove(el)
    return ["the anonymous memory source goes: libvirt refuses it with hugepages, which come from hugetlbfs "
            "(file and memfd sources work with hugepages and are kept)"]


def _backing(ctx, dom):
    p, pl = ctx.profile, ctx.placement
    old = dom.memory_backing
    new = copy(old, "memoryBacking", into=dom.node)
    reasons, edits = [], []
    if pl.dedicated and p.memory_hugepages:
        reasons, edits = _hugepages(ctx, dom, new)
        reasons += _no_anonymous_source(new)
    for flag, wanted, why in (
        ("nosharepages", p.memory_nosharepages, "no KSM merging (no copy-on-write faults)"),
        ("locked", p.memory_locked, "locked memory: the host never swaps it out"),
    ):
        if wanted and xmltext.find(new, flag) is None:
            insert(new, E(flag, into=new))
            reasons.append(why)
    gone = "hugepages removed: " + (pl.hugepage_gone or "the chosen nodes cannot back this memory")
    edits += _hard_limit(dom, new)
    if len(new) == 0:
        return edits if old is None else [Remove(old, "; ".join(reasons) or gone)] + edits
    return [Put(dom.node, new, "; ".join(reasons) or gone)] + edits


# QEMU's own memory beside the guest's, as libvirt counts it for a domain whose memory must be locked
# (qemuDomainGetMemLockLimitBytes: the guest's memory plus 1 GiB, for VFIO's MMIO space and QEMU)
QEMU_OVERHEAD_KIB = 1024 * 1024


def _hard_limit(dom, backing) -> list:
    """``<locked/>`` with no ``<memtune><hard_limit>``: libvirt then lifts the memlock limit
    altogether (unlimited), and a runaway QEMU can lock all of the host's memory. Write the limit
    libvirt's docs ask for: the domain's largest memory plus QEMU's own."""
    if xmltext.find(backing, "locked") is None or dom.hard_limit is not None:
        return []
    top = max(dom.memory_kib, dom.max_memory_kib or 0)
    limit = top + QEMU_OVERHEAD_KIB
    why = (f"locked memory needs a hard limit, or libvirt lifts the memlock limit altogether: the guest's "
           f"{top} KiB plus {QEMU_OVERHEAD_KIB} KiB for QEMU itself (libvirt's own allowance for locked "
           "VFIO memory); raise it for large video memory or many devices")
    memtune = dom.memtune
    el = E("hard_limit", {"unit": KIB}, text=str(limit), into=dom.node)
    if memtune is None:
        return [Put(dom.node, E("memtune", None, el, into=dom.node), why)]
    return [Put(memtune, el, why)]


def run(ctx, dom):
    edits = _backing(ctx, dom)
    if ctx.profile.memory_balloon == "none":
        edits.append(put_under(dom, "devices", E("memballoon", {"model": "none"}, into=dom.node),
                               "no balloon: memory is fixed, no inflate/deflate stalls"))
        current = dom.current_memory_kib  # (each read once: a Size finds its element anew each read)
        if current:
            memory = dom.memory_kib
            if current != memory:
                why = "without a balloon the guest always has all its memory"
                edits += Domain.current_memory_kib.edits(dom, memory, why)
    return edits
