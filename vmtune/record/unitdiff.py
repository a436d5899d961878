"""The units of a domain, and what a rewrite changed of them: the record vmtune/record/undo.py keeps.

A unit is a child of ``<domain>`` or of ``<devices>`` that a pass may write (``TUNED``,
``TUNED_DEVICES``), named by its key path (vmtune/xml/xmlkeys.py). ``snapshot`` takes them before the
passes run; ``diff`` makes the record of those that changed: each as it was (its text as given,
vmtune/xml/markup.py; a unit vmtune removed with the whitespace before it) and as vmtune wrote it (as
it reads back: whitespace-only text beside children dropped), and where it was. With a Source told
of each change (a rewrite), only the units the passes touched are compared. ``hold`` freezes what
``take_back`` may change, for the writer to compare (``untune``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lxml import etree

from ..xml import xmltext
from ..errors import InvalidInput
from ..xml.model import NS, TAG
# the only places a pass writes (tests/test_properties.py's "nothing lost" holds everything else to
# its input, byte for byte): the units a record keeps, of <domain> and of <devices>
from ..xml.elements import SPECIAL, TUNED, TUNED_DEVICES
from ..xml.xmlkeys import counted, ident_of, parse_node
from ..xml.markup import Changed

if TYPE_CHECKING:
    from ..xml.markup import Source

UNDO = f"{{{NS}}}undo"


VERSION = 1


def _units(root: etree._Element, paths: dict | None = None, held: dict | None = None,
           idents: dict | None = None) -> dict[tuple, tuple[object, int]]:
    """The units of ``root`` by their key path (a tuple of keys): (node, index in its parent).
    Only the tuned tags are keyed: an ordinal counts siblings of one ident, which share a tag.
    ``paths`` gets each unit's child indexes from the root; ``held``: a ``<devices>`` -> its units
    (key, node, index), taken as they are where it has them, else filled in; ``idents``: a device
    -> its ident (keys vmtune never changes), taken where it has it, else filled in."""
    out: dict[tuple, tuple[object, int]] = {}
    seen: dict[tuple, int] = {}
    for index, node in enumerate(counted(root)):
        tag = node.tag
        if tag == "devices":
            ident = (tag,)
            n = seen.get(ident, 0)
            seen[ident] = n + 1
            if held is not None and node in held:
                out.update((key, (child, i)) for key, child, i in held[node])
                continue
            inner: dict[tuple, int] = {}
            mine = [] if held is None else held.setdefault(node, [])
            for i, child in enumerate(counted(node)):
                if child.tag in TUNED_DEVICES:
                    sub = idents.get(child) if idents is not None else None
                    if sub is None:
                        sub = ident_of(child)
                        if idents is not None:
                            idents[child] = sub
                    k = inner.get(sub, 0)
                    inner[sub] = k + 1
                    key = ((*ident, n), (*sub, k))
                    out[key] = (child, i)
                    mine.append((key, child, i))
                    if paths is not None:
                        paths[key] = (index, i)
        elif tag in TUNED:
            ident = ident_of(node) if tag in SPECIAL else (tag,)  # as keyed names it (<memory>: KEYS)
            n = seen.get(ident, 0)
            seen[ident] = n + 1
            out[((*ident, n),)] = (node, index)
            if paths is not None:
                paths[((*ident, n),)] = (index,)
    return out


def lxml_text(node: etree._Element) -> str:
    """lxml's text of ``node`` (as a record compares and keeps it)."""
    return etree.tostring(node, encoding="unicode", with_tail=False)


@dataclass(frozen=True)
class Snapshot:
    """A domain's units as text, and what ``diff`` needs of the rest: taken before the passes run,
    so that no copy of the tree is needed."""

    units: dict  # key path -> (text, index in its parent); the text None: kept by ``source``
    tag: str | None
    metadata: bool
    devices: bool
    where: dict | None = None  # key path -> (child indexes from the root, the unit)
    source: Source | None = None  # the markup.Source the passes tell of each change (``snapshot``)
    blank: dict | None = None  # <devices> or <metadata> of whitespace only -> that whitespace
    held: dict | None = None  # <devices> -> its units (``_units``)
    idents: dict | None = None  # a device unit -> its ident (``_units``)


def snapshot(root: etree._Element, source: Source | None = None) -> Snapshot:
    """``root``'s units as text; with ``source`` (a markup.Source of ``root``, told of each change
    before it is made), only where each unit stands: ``source`` keeps the text of those that change,
    and the record gets them as their text was given."""
    metadata, devices = (next(root.iterchildren(name), None) for name in ("metadata", "devices"))
    tag = xmltext.find(root, f"metadata/{TAG}") if metadata is not None else None
    if tag is not None:
        tag = etree.fromstring(etree.tostring(tag))
        for old in tag.findall(UNDO):
            tag.remove(old)
    paths: dict = {}
    held: dict = {}
    idents: dict = {}
    units = _units(root, paths, held, idents)
    at = None
    if source is not None:
        at = {key: (paths[key], node) for key, (node, _) in units.items()}
        source.watch(node for node, _ in units.values())
    blank = {el.tag: _inside(source, root, el) for el in (devices, metadata)
             if el is not None and len(el) == 0 and el.text and el.text.isspace()}
    texts = {key: (None if source is not None else lxml_text(node), index) for key, (node, index) in units.items()}
    return Snapshot(texts,
                    None if tag is None else etree.tostring(tag, encoding="unicode"),
                    metadata is not None, devices is not None, at, source, blank, held, idents)


def _inside(source: Source | None, root: etree._Element, el: etree._Element) -> str:
    """The whitespace inside ``el`` as given, byte for byte (the parser reads `` \\r\\n`` as
    `` \\n``; ``take_back`` writes it as given)."""
    given = source.given((root.index(el),), el.tag) if source is not None else None
    inside = given[given.index(">") + 1:given.rindex("<")] if given and given[-2] != "/" else ""
    return inside if inside.isspace() else el.text


def hold(source: Source, root: etree._Element) -> None:
    """Freeze in ``source`` (a markup.Source of ``root``) what ``take_back`` may change: the units
    and ``<metadata>`` (copied, to compare), and the children of ``<domain>`` and ``<devices>``,
    which hold them. Nothing else changes, and is written as given."""
    holders = [root, *root.iterfind("devices")]
    units = [node for node, _ in _units(root).values()]
    source.freeze(holders, units + root.findall("metadata"))


def diff(before: etree._Element | Snapshot, after: etree._Element) -> dict:
    """The record of what turns ``before`` (a domain, or its snapshot) into ``after``: each unit
    that differs, as it was (None: vmtune added it) and as vmtune wrote it (None: removed), and
    where it was. A unit written anew reads back without the whitespace beside its children
    (``xmltext.drop_layout``)."""
    was = before if isinstance(before, Snapshot) else snapshot(before)
    source = was.source
    ops = []
    # a <devices> whose children are as they were has the same units (keys vmtune never changes)
    held = {dev: units for dev, units in was.held.items() if dev not in source.kids} \
        if source is not None and was.held else None
    theirs = _units(after, None, held, was.idents) if source is not None else _units(after)
    for key, (old, index) in was.units.items():
        now = theirs.get(key)
        if source is not None:
            _, node = was.where[key]
            if now is not None and now[0] is node and node not in source.dirty:
                continue  # nothing in it changed
            old = source.watched.get(node) or lxml_text(node)  # untouched: as it was (taken out whole)
        new = None if now is None else _new_text(now[0])
        if old != new:
            if source is not None:
                if new is not None:
                    source.canon[now[0]] = Changed(old, new, node)
                old = _as_given(source, *was.where[key], old, new is None)
            ops.append([[list(k) for k in key], old, new, index])
    for key, (node, index) in theirs.items():
        if key not in was.units:
            new = _new_text(node)
            if source is not None:
                source.wrote[node] = new
            ops.append([[list(k) for k in key], None, new, index])
    wrote = xmltext.find(after, f"metadata/{TAG}")
    record = {"v": VERSION, "tag": was.tag, "profile": None if wrote is None else wrote.get("profile"),
              "metadata": was.metadata, "devices": was.devices, "units": ops}
    if was.blank:
        record["blank"] = was.blank  # what <devices> or <metadata> held when vmtune gave it children
    return record


_BLANK = re.compile(r">\s+<")  # whitespace-only text beside a child, maybe


def _new_text(node: etree._Element) -> str:
    """A unit as vmtune wrote it, as it reads back (``<cpu>\\n  </cpu>`` given a child: no blank)."""
    written = lxml_text(node)
    if _BLANK.search(written) is None:
        return written
    xmltext.drop_layout(node)
    return lxml_text(node)


def _as_given(source: Source, path: tuple, node: etree._Element, old: str, gone: bool) -> str:
    """The text unit ``node`` (``old`` as lxml writes it, at ``path``) was given as, where it reads
    back alone as the same unit (a namespace prefix declared above it would not); else ``old``.
    A unit vmtune removed (``gone``) keeps the whitespace before it too: where it goes back."""
    raw = source.given(path, node.tag, gone)
    if raw is None:
        return old
    if node.nsmap:
        try:
            parse_node(raw)
        except (etree.XMLSyntaxError, InvalidInput):
            return old
    return raw
