"""What the commands print for people (``--json`` prints the library's ``to_dict()`` instead).

Each function returns text or lines, and prints nothing: the commands print them.
"""

from __future__ import annotations

import difflib
from collections import Counter

from .. import cpuset
from ..xml import units


def diff(before: str, after: str, fromfile: str, tofile: str) -> str:
    """A unified diff of two XML texts."""
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=fromfile, tofile=tofile))


def explain(result) -> list[str]:
    """``rewrite --explain``: one line per change of a vmtune.Result: where, the old and the new
    value (an element by its key fields: ``short``, ``changed``), and the reason; no line longer
    than LINE (``--json`` has every value and reason whole)."""
    lines = [f"profile {result.profile}: {len(result.changes)} change(s)"]
    guest = getattr(result, "guest_os", None)
    lines += [_fit(f"guest OS: {guest.describe()}")] if guest is not None else []
    lines += [_fit(f"placement: {why}") for why in result.placement.get("why", ()) + result.placement.get("why_not", ())]
    lines += [_fit(f"kept by hand: {note}") for note in getattr(result, "kept", ())]
    for c in result.changes:
        before, after = (changed(c.before, c.after) if c.before and c.after and c.before.startswith("<")
                         else (short(c.before), short(c.after)))
        lines.append(_fit(f"{c.element}: {before or '(none)'} -> {after or '(removed)'}  # {c.reason}"))
    return lines


LINE = 200  # the longest line of --explain
VALUE = 48  # the longest value shown whole
ATTRS = 4  # attributes of an element shown


def _fit(line: str) -> str:
    return _cut(line, LINE)


def _parse(value: str):
    from lxml import etree

    try:
        return etree.fromstring(value)
    except etree.XMLSyntaxError:
        return None


def _name(el) -> str:
    from lxml import etree

    return etree.QName(el).localname


def _attrs(el) -> str:
    attrs = list(el.attrib.items())
    return " ".join(f"{k}={_cut(v)}" for k, v in attrs[:ATTRS]) + (" …" if len(attrs) > ATTRS else "")


def _children(el) -> list:
    return [c for c in el if isinstance(c.tag, str)]


def short(value: str | None) -> str | None:
    """A change's value for one line: an attribute's or a text's as it is (cut at VALUE); an
    element as its tag, its first attributes and a count of its children by tag, never whole."""
    if value is None or not value.startswith("<"):
        return None if value is None else _cut(value, VALUE)
    el = _parse(value)
    if el is None:
        return _cut(value, VALUE)
    counts = Counter(_name(child) for child in _children(el))
    inner = ", ".join(f"{n}×{name}" if n > 1 else name for name, n in counts.items())
    text = (el.text or "").strip()
    body = f" {_cut(inner, VALUE)}" if inner else f" {_cut(text)}" if text else ""
    shown = _attrs(el)
    return f"<{_name(el)}{' ' + shown if shown else ''}>{body}"


def changed(before: str, after: str) -> tuple[str, str]:
    """An element replaced by another, by what differs: its attributes as ``short`` gives them,
    and its children as ``+tag`` (added), ``-tag`` (gone) and ``~tag`` (changed), counted."""
    old, new = _parse(before), _parse(after)
    if old is None or new is None or _name(old) != _name(new):
        return short(before) or "", short(after) or ""
    from ..xml import edits

    mine = [edits.show(c) for c in _children(old)]
    theirs = [edits.show(c) for c in _children(new)]
    gone = Counter(_name(el) for el, text in zip(_children(old), mine) if text not in theirs)
    added = Counter(_name(el) for el, text in zip(_children(new), theirs) if text not in mine)
    tally: dict[str, int] = {}
    for tag in list(dict.fromkeys([*gone, *added])):
        g, a = gone[tag], added[tag]
        for sign, n in (("~", min(g, a)), ("+", a - g), ("-", g - a)):
            if n > 0:
                tally[f"{sign}{tag}"] = n
    if not tally:
        return short(before) or "", short(after) or ""
    what = ", ".join(f"{key}×{n}" if n > 1 else key for key, n in tally.items())
    head = lambda el: f"<{_name(el)}{' ' + _attrs(el) if el.attrib else ''}>"  # noqa: E731
    return head(old), f"{head(new)} {_cut(what, VALUE)}"


def _cut(value: str, most: int = 24) -> str:
    """``value`` whole when it fits in ``most`` characters; else its words that fit, whole, and
    " …" (a first word longer than ``most``, a path say, is cut inside it, with "…")."""
    if len(value) <= most:
        return value
    head = value[:most - 1]  # room for the "…"
    space = value.rfind(" ", 0, most - 1)  # the words before it are whole, and " …" fits after them
    words = head[:space].rstrip(" ,;:") if space > 0 else ""
    return f"{words} …" if words else head + "…"


def topology(host, reserved: frozenset[int]) -> list[str]:
    """``vmtune topology``: a summary line, then one line per node."""
    lines = [f"arch {host.arch}  vendor {host.vendor or 'unknown'}  smt {'on' if host.smt else 'off'}  "
             f"isolated {cpuset.format(host.isolated) or '-'}  reserved {cpuset.format(reserved) or '-'}",
             f"{'node':>4}  {'cpus':<16} {'memory MiB':>10}  {'free hugepages':<22} cores (sibling threads)"]
    for cell in host.cells:
        pages = " ".join(f"{units.page(size)}:{count}" for size, count in sorted(cell.pages.items())) or "-"
        cores = " ".join("(" + ",".join(map(str, core)) + ")" for core in host.cores(cell.id)) or "-"
        lines.append(f"{cell.id:>4}  {cpuset.format(cell.cpus) or '-':<16} {cell.memory_kib // 1024:>10}  "
                     f"{pages:<22} {cores}")
    for l3 in host.caches:
        size = f", {units.size(l3.size_kib)}" if l3.size_kib else ""
        lines.append(f"L3 {l3.id}: CPUs {cpuset.format(l3.cpus)}{size}")
    if host.hybrid:
        small = [c for c in host.cpus if host.efficient(c)]
        lines.append(f"efficiency cores: {cpuset.format(small)}; performance: {cpuset.format(set(host.cpus) - set(small))}")
    return lines


def table(rows: list[list[str]]) -> list[str]:
    """Rows as left-aligned columns two spaces apart (the first row is the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


def _domains(report) -> list[str]:
    rows = [["DOMAIN", "PROFILE", "STATE", "VCPUS", "PINNED", "NODES", "HUGEPAGES"]]
    for r in report.rows:
        pages = " ".join(f"{units.page(s)} (any node)" if n is None else f"{n}:{c}x{units.page(s)}"
                         for (n, s), c in sorted(r.pages.items(), key=lambda kv: (kv[0][0] is None, kv[0]))) or "-"
        rows.append([r.name, r.profile or "-", r.state, str(r.vcpus), cpuset.format(r.pinned) or "-",
                     cpuset.format(r.nodes) or "-", pages])
    return table(rows) if report.rows else ["no domains"]


def _nodes(report) -> list[str]:
    rows = [["NODE", "CPUS", "RESERVED", "DEDICATED", "FREE FOR DEDICATED", "MEMORY MiB", "FREE MiB",
             "HUGEPAGES FREE/NEEDED"]]
    for n in report.nodes:
        pages = " ".join(f"{units.page(size)}:{free}/{need}" for size, (free, need) in sorted(n.hugepages.items())) or "-"
        rows.append([str(n.node), cpuset.format(n.cpus) or "-", cpuset.format(n.reserved) or "-",
                     cpuset.format(n.dedicated) or "-", cpuset.format(n.free_dedicated) or "-",
                     str(n.memory_kib // 1024) if n.memory_kib else "?",
                     "?" if n.free_kib is None else str(n.free_kib // 1024), pages])
    return table(rows)


def _problems(report) -> list[str]:
    if report.ok:
        return ["no problems"]
    width = max(len(p.kind) for p in report.problems)
    return ([f"{len(report.problems)} problem{'s' if len(report.problems) != 1 else ''}:"]
            + [f"  {p.kind.ljust(width)}  {p.message}" for p in report.problems])


def plan(report) -> list[str]:
    """``vmtune plan``: the domains, the nodes and the problems of a vmtune.placement.audit.Report."""
    return _domains(report) + [""] + _nodes(report) + [""] + _problems(report)
