"""<memoryBacking> (hugepages, nosharepages, locked) and the balloon."""

from .. import cpuset
from ..edits import E, Put, Remove, Set, insert
from ._xml import copy, put_under


def _backing(ctx, dom):
    p, pl = ctx.profile, ctx.placement
    old = dom.find("memoryBacking")
    new = copy(old, "memoryBacking")
    reasons = []

    if pl.mode == "dedicated" and p.memory_hugepages:
        for el in new.findall("hugepages"):
            new.remove(el)
        if pl.hugepage_kib:
            nodeset = cpuset.format(c.id for c in pl.cells) if pl.cells else None
            insert(new, E("hugepages", None, E("page", {"size": pl.hugepage_kib, "unit": "KiB", "nodeset": nodeset})))
            reasons.append(f"{pl.hugepage_kib} KiB hugepages: fewer TLB misses, memory that never swaps or moves")
            if dom.memory_kib % pl.hugepage_kib:
                pages = -(-dom.memory_kib // pl.hugepage_kib)
                reasons.append(f"{dom.memory_kib} KiB is not a whole number of pages: QEMU rounds it up to {pages} "
                               f"pages ({pages * pl.hugepage_kib} KiB)")
    for flag, wanted, why in (
        ("nosharepages", p.memory_nosharepages, "no KSM merging: no copy-on-write faults on guest writes"),
        ("locked", p.memory_locked, "locked memory: the host never swaps it out"),
    ):
        if wanted and new.find(flag) is None:
            insert(new, E(flag))
            reasons.append(why)
    if len(new) == 0:
        return [] if old is None else [Remove(old, "hugepages removed: the chosen nodes cannot back this memory")]
    reason = "; ".join(reasons) or "hugepages removed: the chosen nodes cannot back this memory"
    return [Put(dom.node, new, reason)]


def run(ctx, dom):
    edits = _backing(ctx, dom)
    if ctx.profile.memory_balloon == "none":
        edits.append(put_under(dom, "devices", E("memballoon", {"model": "none"}),
                               "no balloon: memory is fixed, no inflate/deflate stalls"))
        if dom.current_memory_kib and dom.current_memory_kib != dom.memory_kib:
            why = "without a balloon the guest always has all its memory"
            edits += [Set(dom.node, "currentMemory", str(dom.memory_kib), why),
                      Set(dom.node, "currentMemory/@unit", "KiB", why)]
    return edits
