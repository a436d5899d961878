"""Guest NUMA cells rebuilt by the numa pass: which old cell went where, and what follows them.

When the latency profile merges or renumbers guest cells, everything that names a cell must
follow: a memory device's ``<target><node>`` (dimm, nvdimm, virtio-mem, virtio-pmem, sgx-epc), a
PCI expander bus's ``<target><node>``, and the cell attributes a device relies on (``memAccess=
'shared'`` for vhost-user and virtiofs, ``discard``) survive a merge. A new cell keeps what its
old cell held (distances renumbered, caches, comments); a merged cell keeps what all its old
cells agree on (passes/_hmat.py for distances and interconnects); a cell split over several host
nodes gives each part its attributes and caches. A cell without vCPUs (a
memory-only cell) merges into the cells with vCPUs: the latency profile binds every guest byte
to the host node of the vCPUs that use it.
"""

from __future__ import annotations

from lxml import etree

from .. import cpuset
from ..xml import xmltext
from ..xml.edits import E, Set, clone, show
from ..xml.model import KIB, CellRef
from . import _hmat
from ._xml import comments

CELL_ATTRS = ("memAccess", "discard")
# when merged cells disagree, the value a device may depend on wins
WINS = {"memAccess": ("shared", "private"), "discard": ("yes", "no")}
REFS = ("devices/memory/target", "devices/controller/target")


def remap(old_cells, new_cells) -> dict[int, int]:
    """Old guest cell id -> the new cell that holds most of its vCPUs (a cell without vCPUs keeps
    its id when the new cells have it, else goes to the first)."""
    ids = [c.id for c in new_cells]
    out = {}
    for old in old_cells:
        overlap = max(new_cells, key=lambda c: (len(old.cpus & frozenset(c.vcpus)), -c.id))
        if old.cpus & frozenset(overlap.vcpus):
            out[old.id] = overlap.id
        else:
            out[old.id] = old.id if old.id in ids else ids[0]
    return out


def sources(old_cells, mapping: dict[int, int], new_cell) -> list:
    """The old cells behind ``new_cell``: those that went to it, and those some of whose vCPUs it
    holds (a cell the placement split over several host nodes is behind each of its parts)."""
    vcpus = frozenset(new_cell.vcpus)
    return [c for c in old_cells if mapping.get(c.id) == new_cell.id or c.cpus & vcpus]


def merged_attrs(behind) -> dict[str, str]:
    """The attributes of a new cell: from every old cell ``behind`` it (``sources``). A device that
    needs shared memory (virtiofs, vhost-user) needs it in every cell, so each part of a split cell
    keeps it."""
    out = {}
    for attr in CELL_ATTRS:
        values = {c.node.get(attr) for c in behind if c.node.get(attr)}
        if len(values) == 1:
            out[attr] = values.pop()
        elif values:
            out[attr] = next((v for v in WINS[attr] if v in values), sorted(values)[0])
    return out


def follow(dom, mapping: dict[int, int]) -> list[Set]:
    """Point every ``<target><node>`` at the cell its old cell became."""
    edits = []
    for path in REFS:
        for target in map(CellRef, dom.iter(path)):
            old = target.cell
            if old is not None and mapping.get(old, old) != old:
                new = mapping[old]
                why = f"guest cell {CellRef.cell.raw(target.node)} is now part of cell {new}"
                edits.append(CellRef.cell.edit(target, new, why))
    return edits


def _content(cell: etree._Element, sources, row: dict[int, int] | None, copy_notes: bool = True) -> list[str]:
    """Fill new ``cell`` with the children of its old cells ``sources``: comments and PIs all
    (with ``copy_notes``), ``<distances>`` as ``row``, other elements (``<cache>``) when every old
    cell has them alike."""
    notes, kept, placed = [], set(), False
    for src in sources:
        for child in src.node:
            if not xmltext.is_element(child):
                if copy_notes:
                    cell.append(clone(child))
            elif child.tag == "distances":  # rebuilt, its comments and PIs with it
                if row and not placed:
                    cell.append(_hmat.distances_element(row))
                placed = True
                (cell.find("distances") if row else cell).extend(comments(child) if copy_notes else ())
            elif show(child) not in kept:
                text = show(child)
                if all(any(show(c) == text for c in xmltext.elements(s.node)) for s in sources):
                    kept.add(text)
                    cell.append(clone(child))
                else:
                    notes.append(f"<{child.tag}> of guest cell {src.id} dropped: the cells merged into cell "
                                 f"{cell.get('id')} differ in it")
    if row and not placed:
        cell.insert(0, _hmat.distances_element(row))
    return notes


def _loose(numa: etree._Element | None) -> tuple[list, list]:
    """Comments and PIs of ``<numa>`` (not in a cell): those before the first cell, the rest."""
    lead, trail, after_cell = [], [], False
    for child in numa if numa is not None else ():
        if child.tag == "cell":
            after_cell = True
        elif child.tag != "interconnects":
            (trail if after_cell else lead).append(clone(child))
    return lead, trail


def rebuild(dom, new_cells, mapping: dict[int, int]) -> tuple[etree._Element, list[str]]:
    """The new ``<numa>``: a ``<cell>`` per placed cell with what its old cells held, then the
    interconnects renumbered; and a note for everything that could not come along."""
    old_numa, old_cells = dom.cpu_numa, dom.cells
    rows, note = _hmat.distances(old_cells, [c.id for c in new_cells], mapping)
    notes = [note] if note else []
    notes += [f"guest cell {c.id} has no vCPUs: its memory goes to the cells with vCPUs, each on its vCPUs' host "
              "node (no guest memory stays remote from every vCPU)" for c in old_cells if not c.cpus]
    lead, trail = _loose(old_numa)
    numa = E("numa", None, *lead)
    made = {}
    for cell in new_cells:
        behind = sources(old_cells, mapping, cell)
        el = E("cell", {"id": cell.id, "cpus": cpuset.format(cell.vcpus), "memory": cell.memory_kib, "unit": KIB,
                        **merged_attrs(behind)})
        # a part split off a cell holds what that cell held (its caches; comments stay with the first part)
        went = [c for c in behind if mapping.get(c.id) == cell.id]
        notes += _content(el, went or behind, rows.get(cell.id), copy_notes=bool(went))
        numa.append(el)
        made[cell.id] = el
    links, more = _hmat.interconnects(old_numa.find("interconnects") if old_numa is not None else None, mapping, made)
    for child in trail + ([links] if links is not None else []):
        numa.append(child)
    return numa, notes + more
