"""Hugepages backend by backend: each guest cell and each RAM memory device is its own QEMU backend.

QEMU rounds a cell's memory up to whole pages (the reason says so, cell by cell). A DIMM or
virtio-mem device it refuses unless its size (for virtio-mem, its block) is a whole number of the
pages libvirt gives it: the device's own ``<source><pagesize>``, else the size of the ``<page>``
whose ``nodeset`` holds the device's target cell. When the domain's page size does not divide a
device, the device gets its own ``<pagesize>``: the largest of the host's hugepage sizes that
divides it. When none does, its cell stays on normal pages (out of the ``<page>``'s nodeset), and
so does the device.
"""

from __future__ import annotations

from ..placement import memfit
from ..xml.edits import Set
from ..xml.model import MemoryDevice


def rounding(cells, dom, size: int) -> list[str]:
    """A reason for each backend (guest cell; without cells, the memory) not a whole number of pages."""
    backends = [(f"guest cell {c.id}: ", c.memory_kib) for c in cells] or [("", dom.boot_memory_kib)]
    out = []
    for what, kib in backends:
        if kib % size:
            pages = -(-kib // size)
            out.append(f"{what}{kib} KiB is not a whole number of pages: QEMU rounds it up to {pages} pages "
                       f"({pages * size} KiB)")
    return out


def devices(host, dom, size: int, cells: frozenset[int]) -> tuple[list[Set], frozenset[int], list[str]]:
    """For the RAM devices in hugepage-backed ``cells`` that ``size`` pages do not divide: the
    edits that give each its own page size, the cells that must stay on normal pages, and why."""
    sizes = memfit.sizes(host)[::-1]  # the host's page sizes, largest first
    edits, normal, notes = [], set(), []
    for dev in dom.memory_devices:
        if (dev.model not in MemoryDevice.RAM_MODELS or dev.pagesize_kib is not None
                or dev.target_node not in cells or not dev.granule_kib or dev.granule_kib % size == 0):
            continue
        what = f"{dev.model} of {dev.size_kib} KiB in guest cell {dev.target_node}"
        own = next((s for s in sizes if dev.granule_kib % s == 0), None)
        if own is None:
            normal.add(dev.target_node)
            notes.append(f"guest cell {dev.target_node} stays on normal pages: its {what} is not a whole number "
                         "of any hugepage size, and QEMU refuses such a backend")
            continue
        why = (f"the {what} is not a whole number of {size} KiB pages, which QEMU refuses for a memory "
               f"device: it takes {own} KiB pages of its own")
        edits += MemoryDevice.pagesize_kib.edits(dev, own, why)
    return edits, frozenset(normal), notes
