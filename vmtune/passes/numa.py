"""<numatune> and guest NUMA cells: memory bound to the nodes the vCPUs run on."""

from .. import cpuset
from ..xml import units, xmltext
from ..xml.edits import E, Put, Remove
from ..xml.model import Domain
from ..profiles import Pinning
from . import _cells
from ._xml import comments, copy, put_under

STRICT = Domain.NUMA_MODE_STRICT
AUTO = Domain.NUMA_PLACEMENT_AUTO


def _memory(dom, total_kib: int, reason: str):
    if dom.memory_kib == total_kib:
        return []
    return Domain.memory_kib.edits(dom, total_kib, reason)


def dedicated(ctx, dom):
    pl = ctx.placement
    nodes = cpuset.format(pl.nodes)
    memory = E("memory", {"mode": STRICT, "nodeset": nodes}, into=dom.node)
    new = E("numatune", None, *comments(dom.numatune), memory, into=dom.node)
    for cell in pl.cells:
        new.append(E("memnode", {"cellid": cell.id, "mode": STRICT, "nodeset": cell.node}, into=new))
    where = "the vCPUs' node" if len(pl.nodes) == 1 else "each guest cell's host node"
    edits = [Put(dom.node, new, f"bind guest memory to {where} ({nodes}): no remote memory access")]
    old_cells = dom.cells
    numa = dom.cpu_numa
    if pl.cells:
        mapping = _cells.remap(old_cells, pl.cells) if old_cells else {}
        guest, dropped = _cells.rebuild(dom, pl.cells, mapping)
        why = (f"guest NUMA cells mirror the {len(pl.nodes)} host nodes the vCPUs span"
               if len(pl.cells) > 1 else "one guest cell on one host node (kept for memory hotplug or as before)")
        why = "; ".join([why] + _resized(old_cells, pl, mapping) + dropped)
        edits.append(put_under(dom, "cpu", guest, why))
        total = sum(c.memory_kib for c in pl.cells) + dom.dimm_kib
        edits.extend(_memory(dom, total, "memory equals the sum of the guest cells"))
        edits.extend(_cells.follow(dom, mapping))
    elif numa is not None:
        edits.append(Remove(numa, "all vCPUs and memory sit on one host node: one guest node is the truth"))
        edits.extend(_memory(dom, dom.boot_memory_kib + dom.dimm_kib, "memory keeps the size the guest cells had"))
    return edits


def _resized(old_cells, pl, mapping: dict[int, int]) -> list[str]:
    """A note for each guest cell that keeps its id and vCPUs but not its size: how many KiB
    moved, and why (each cell a whole number of the placement's pages)."""
    out = []
    new = {c.id: c for c in pl.cells}
    for old in old_cells:
        cell = new.get(mapping.get(old.id, old.id))
        if cell is None or cell.id != old.id or frozenset(cell.vcpus) != old.cpus or cell.memory_kib == old.memory_kib:
            continue
        moved = cell.memory_kib - old.memory_kib
        unit = f"whole {units.page(pl.hugepage_kib)} pages" if pl.hugepage_kib else "whole MiB"
        out.append(f"guest cell {cell.id}: {old.memory_kib} -> {cell.memory_kib} KiB ({moved:+d} KiB: each cell is {unit}, "
                   "split as the vCPUs are)")
    return out


PREFERRED = "preferred"


def node(ctx, dom):
    """One node's shared CPUs (throughput): memory preferred there. Its normal pages (no hugetlbfs
    pool backs them) are not bound ``strict``: a strict domain whose node runs out of memory is
    OOM-killed while other nodes have free memory; ``preferred`` takes the pages from another node
    then. A domain's own hugepages come from the pool, as they would under strict."""
    pl = ctx.placement
    target = cpuset.format(pl.nodes)
    memory = E("memory", {"mode": PREFERRED, "nodeset": target}, into=dom.node)
    new = E("numatune", None, *comments(dom.numatune), memory, into=dom.node)
    for cell in dom.cells:
        new.append(E("memnode", {"cellid": cell.id, "mode": PREFERRED, "nodeset": target}, into=new))
    return [Put(dom.node, new, f"keep memory on node {target}, where the vCPUs run; 'preferred', not 'strict': "
                "when the node runs out, normal pages come from another node instead of the guest being OOM-killed")]


def clamp(ctx, dom):
    """Floating domains: nodesets that name nodes this host lacks are fixed, nothing else."""
    old = dom.numatune
    if old is None:
        return []
    host_nodes = frozenset(ctx.host.node_ids)
    new = copy(old, "numatune", into=dom.node)
    changed = False
    for el in xmltext.elements(new):  # a PI's pseudo-attributes are no nodeset
        if el.get("nodeset") is None:
            if (el.tag == "memory" and el.get("placement") is None
                    and dom.vcpu_placement != Domain.VCPU_PLACEMENT_AUTO):
                el.set("placement", AUTO)  # it followed <vcpu placement='auto'>, which is static now
                changed = True
            continue
        nodes = cpuset.parse(el.get("nodeset"))
        if not nodes <= host_nodes:
            el.set("nodeset", cpuset.format((nodes & host_nodes) or host_nodes))
            changed = True
    return [Put(dom.node, new, "the nodeset named NUMA nodes this host does not have, or the memory followed "
                "a numad vCPU placement that is static now (numad still places the memory)")] if changed else []


def run(ctx, dom):
    if ctx.placement.dedicated:
        return dedicated(ctx, dom)
    if ctx.placement.mode == Pinning.NODE and ctx.placement.nodes:
        return node(ctx, dom)
    return clamp(ctx, dom)
