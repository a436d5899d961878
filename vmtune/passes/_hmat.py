"""What a guest NUMA cell says about the others, carried over when the numa pass rebuilds the cells.

Two things name other cells: a cell's ``<distances>`` (``<sibling id value>``, the ACPI SLIT) and
the ``<interconnects>`` of ``<numa>`` (``<latency>``/``<bandwidth>`` with ``initiator``, ``target``
and ``cache``, the ACPI HMAT). ``mapping`` says which new cell each old cell went to. Renumbered
cells take their values along. When cells merge, a value stays only where every old pair behind a
new pair agrees; values inside a merged cell go. What cannot be carried over goes with a note,
and nothing is left that names a cell (or a cell's cache) that is no longer there. QEMU wants a
distance for every pair of cells when any is given, so distances go all together or not at all.
"""

from __future__ import annotations

from lxml import etree

from .. import cpuset
from ..xml import xmltext
from ..xml.edits import E, clone

LOCAL = 10  # libvirt's and ACPI's distance of a cell to itself


def _old_distances(old_cells) -> dict[int, dict[int, int]]:
    out: dict[int, dict[int, int]] = {}
    for cell in old_cells:
        for sib in cell.node.iterfind("distances/sibling"):
            sid, value = sib.get("id") or "", sib.get("value") or ""
            if sid.isdigit() and value.isdigit():
                out.setdefault(cell.id, {})[int(sid)] = int(value)
    return out


def distances(old_cells, new_ids: list[int], mapping: dict[int, int]) -> tuple[dict[int, dict[int, int]], str | None]:
    """New cell -> {sibling -> distance}, and a note when the old distances could not be kept."""
    old = _old_distances(old_cells)
    if not old:
        return {}, None
    pairs: dict[tuple[int, int], set[int]] = {}
    inside = set()
    for a, row in old.items():
        for b, value in row.items():
            if a == b or b not in mapping:
                continue
            key = (mapping[a], mapping[b])
            if key[0] == key[1]:
                inside.add(key[0])  # a distance inside a merged cell is gone: it is one cell now
            else:
                pairs.setdefault(key, set()).add(value)
    note = (f"guest NUMA distances inside merged cell(s) {cpuset.format(inside)} dropped: each is one cell now"
            if inside else None)
    clash = sorted(k for k, v in pairs.items() if len(v) > 1)
    missing = [(a, b) for a in new_ids for b in new_ids
               if a < b and (a, b) not in pairs and (b, a) not in pairs]
    if clash or missing:
        why = (f"merged cells had different distances to cell {clash[0][1]}" if clash
               else f"no distance between the new cells {missing[0][0]} and {missing[0][1]} is known")
        return {}, f"guest NUMA distances dropped: {why} (QEMU wants one for every pair of cells)"
    out: dict[int, dict[int, int]] = {a: {} for a in new_ids}
    with_self = {mapping[a] for a, row in old.items() if a in row}
    for a in new_ids:
        if a in with_self:
            out[a][a] = LOCAL
    for (a, b), values in pairs.items():
        out[a][b] = values.pop()
    return {a: dict(sorted(row.items())) for a, row in out.items() if row}, note


def distances_element(row: dict[int, int]) -> etree._Element:
    return E("distances", None, *(E("sibling", {"id": sid, "value": value}) for sid, value in row.items()))


def _cache_levels(cell: etree._Element) -> set[str]:
    return {c.get("level") for c in cell.iterfind("cache") if c.get("level")}


def interconnects(old: etree._Element | None, mapping: dict[int, int],
                  new_cells: dict[int, etree._Element]) -> tuple[etree._Element | None, list[str]]:
    """The ``<interconnects>`` with initiator and target renumbered; entries that merged cells
    made ambiguous, or whose target cache is gone, dropped with a note."""
    if old is None:
        return None, []
    notes: list[str] = []
    new = E("interconnects", dict(old.attrib))
    seen: dict[tuple, tuple] = {}
    dropped: set[tuple] = set()
    entries: list[tuple[tuple, etree._Element]] = []
    for el in old:
        if not xmltext.is_element(el):
            entries.append(((), clone(el)))
            continue
        ini, tgt = (el.get("initiator") or ""), (el.get("target") or "")
        if not (ini.isdigit() and tgt.isdigit()) or int(ini) not in mapping or int(tgt) not in mapping:
            notes.append(f"HMAT {el.tag} {ini}->{tgt} dropped: no such guest cell")
            continue
        a, b = mapping[int(ini)], mapping[int(tgt)]
        key = (el.tag, a, b, el.get("cache"), el.get("type"))
        value = (el.get("value"), el.get("unit"))
        if a == b and int(ini) != int(tgt):
            notes.append(f"HMAT {el.tag} {ini}->{tgt} dropped: cells {ini} and {tgt} are one cell now")
            continue
        if el.get("cache") and el.get("cache") not in _cache_levels(new_cells[b]):
            notes.append(f"HMAT {el.tag} {ini}->{tgt} dropped: cell {b} has no level {el.get('cache')} cache now")
            continue
        if key in seen and seen[key] != value:
            dropped.add(key)
            notes.append(f"HMAT {el.tag} {a}->{b} dropped: the cells merged into them disagree on its value")
            continue
        if key not in seen:
            seen[key] = value
            copy = clone(el)
            copy.set("initiator", str(a))
            copy.set("target", str(b))
            entries.append((key, copy))
    for key, el in entries:
        if not key or key not in dropped:
            new.append(el)
    if not xmltext.elements(new):
        return None, notes + ["<interconnects> dropped: no entry is left"]
    return new, notes
