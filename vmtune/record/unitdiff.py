"""The units of a domain, and what a rewrite changed of them: the record vmtune/record/undo.py keeps.

A unit is a child of ``<domain>`` or of ``<devices>`` that a pass may write (``TUNED``,
``TUNED_DEVICES``), named by its key path (vmtune/xml/xmlkeys.py). ``snapshot`` takes them before the
passes run; ``diff`` makes the record of those that changed: each as it was (its text as given,
vmtune/xml/markup.py; a unit vmtune removed with the whitespace before it) and as vmtune wrote it (as
it reads back: whitespace-only text beside children dropped), and where it was. With a Source told
of each change (a rewrite), only the units of the tags the passes touched, took away or added are
keyed and compared (an ordinal counts siblings of one ident, which share a tag). ``hold`` freezes what
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


def _units(root: etree._Element) -> dict[tuple, tuple[object, int]]:
    """The units of ``root`` by their key path (a tuple of keys): (node, index in its parent)."""
    top = counted(root)
    devs = {el: counted(el) for el in top if el.tag == "devices"}
    every = _keyed(top, devs, TUNED, dict.fromkeys(devs, TUNED_DEVICES), {})
    return {key: (node, index) for key, (node, index, _) in every.items()}


def lxml_text(node: etree._Element) -> str:
    """lxml's text of ``node`` (as a record compares and keeps it)."""
    return etree.tostring(node, encoding="unicode", with_tail=False)


@dataclass(frozen=True)
class Snapshot:
    """A domain's units as text, and what ``diff`` needs of the rest: taken before the passes run,
    so that no copy of the tree is needed."""

    units: dict | None  # key path -> (text, index in its parent); None: keyed by ``diff`` (``source``)
    tag: str | None
    metadata: bool
    devices: bool
    source: Source | None = None  # the markup.Source the passes tell of each change (``snapshot``)
    blank: dict | None = None  # <devices> or <metadata> of whitespace only -> that whitespace
    top: list | None = None  # with ``source``: <domain>'s children that count, as given
    devs: dict | None = None  # with ``source``: each <devices> of them -> its children that count, as given


def snapshot(root: etree._Element, source: Source | None = None) -> Snapshot:
    """``root``'s units as text; with ``source`` (a markup.Source of ``root``, told of each change
    before it is made), only the children of ``<domain>`` and of its ``<devices>`` as they stand:
    ``source`` keeps the text of the units that change, and ``diff`` keys only those (and their
    siblings of the same tag), the record getting them as their text was given."""
    metadata, devices = next(root.iterchildren("metadata"), None), next(root.iterchildren("devices"), None)
    tag = xmltext.find(root, f"metadata/{TAG}") if metadata is not None else None
    if tag is not None and tag.find(UNDO) is not None:  # the tag without its record: a copy
        tag = etree.fromstring(etree.tostring(tag))
        for old in tag.findall(UNDO):
            tag.remove(old)
    blank = {el.tag: _inside(source, root, el) for el in (devices, metadata)
             if el is not None and len(el) == 0 and el.text and el.text.isspace()}
    said = None if tag is None else etree.tostring(tag, encoding="unicode", with_tail=False)
    if source is not None:
        top = counted(root)
        devs = {el: counted(el) for el in root.iterchildren("devices")}
        source.watch([n for n in top if n.tag in TUNED] +
                     [c for kids in devs.values() for c in kids if c.tag in TUNED_DEVICES])
        return Snapshot(None, said, metadata is not None, devices is not None, source, blank, top, devs)
    texts = {key: (lxml_text(node), index) for key, (node, index) in _units(root).items()}
    return Snapshot(texts, said, metadata is not None, devices is not None, None, blank)


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
    if was.units is None:
        ops = _touched(was, after)
    else:
        ops = []
        theirs = _units(after)
        for key, (old, index) in was.units.items():
            now = theirs.get(key)
            new = None if now is None else _new_text(now[0])
            if old != new:
                ops.append([[list(k) for k in key], old, new, index])
        for key, (node, index) in theirs.items():
            if key not in was.units:
                ops.append([[list(k) for k in key], None, _new_text(node), index])
    wrote = xmltext.find(after, f"metadata/{TAG}")
    record = {"v": VERSION, "tag": was.tag, "profile": None if wrote is None else wrote.get("profile"),
              "metadata": was.metadata, "devices": was.devices, "units": ops}
    if was.blank:
        record["blank"] = was.blank  # what <devices> or <metadata> held when vmtune gave it children
    return record


def _touched(was: Snapshot, after: etree._Element) -> list:
    """The record's units of a rewrite (a ``Snapshot`` with a Source): ``diff``'s comparison, key by
    key, of the units of the tags something changed in (a unit touched, taken away or added) at
    ``<domain>``'s level and in each ``<devices>``. A unit of any other tag is the same node under
    the same key before and after (its siblings of that tag, which its ordinal counts, are as they
    were, and keys vmtune never changes), untouched: ``diff`` would pass it over. A ``<devices>``
    added or taken away: every unit is keyed."""
    source = was.source
    dirty = source.dirty
    top0, devs0 = was.top, was.devs
    top1 = counted(after)
    devs1 = {el: (devs0[el] if el in devs0 and el not in dirty else counted(el))
             for el in after.iterchildren("devices")}
    if list(devs0) != list(devs1):
        tags, inner = TUNED, dict.fromkeys([*devs0, *devs1], TUNED_DEVICES)
    else:
        tags = _changed_tags(top0, top1, dirty, TUNED)
        inner = {el: _changed_tags(devs0[el], devs1[el], dirty, TUNED_DEVICES) for el in devs0 if el in dirty}
    idents: dict = {}
    mine = _keyed(top0, devs0, tags, inner, idents)
    theirs = _theirs(mine, top0, top1, devs0, devs1, tags, inner, idents)
    ops = []
    watched, canon = source.watched, source.canon
    for key, (node, index, path) in mine.items():
        now = theirs.get(key)
        if now is not None and now[0] is node and node not in dirty:
            continue  # nothing in it changed
        old = watched.get(node) or lxml_text(node)  # untouched: as it was (taken out whole)
        new = None if now is None else _new_text(now[0])
        if old != new:
            if new is not None:
                canon[now[0]] = Changed(old, new, node)
            ops.append([list(map(list, key)), _as_given(source, path, node, old, new is None), new, index])
    for key, (node, index, _) in theirs.items():
        if key not in mine:
            new = source.wrote[node] = _new_text(node)
            ops.append([list(map(list, key)), None, new, index])
    return ops


def _theirs(mine: dict, top0: list, top1: list, devs0: dict, devs1: dict, tags, inner: dict, idents: dict) -> dict:
    """``_keyed`` of the units after (``top1``, ``devs1``), given ``mine``, those before. A key
    counts only siblings of its unit's tag (an ident starts with the tag), so where a tag's units
    are the same nodes in the same order before and after (changed in place: none added, taken
    away or moved), each keeps its key from ``mine`` (idents are shared); only the units of the
    other tags are keyed anew."""
    if list(devs0) != list(devs1):
        return _keyed(top1, devs1, tags, inner, idents)
    moved = moved_tags(top0, top1, tags)
    inside = {el: m for el, want in inner.items() if want and (m := moved_tags(devs0[el], devs1[el], want))}
    if not moved and not inside:
        return mine
    theirs = _keyed(top1, devs1, moved, inside, idents)
    numbers = [inside.get(el, ()) for el in devs0]  # a device's key starts ("devices", n)
    for key, value in mine.items():
        if key[0][0] not in moved if len(key) == 1 else key[1][0] not in numbers[key[0][1]]:
            theirs[key] = value
    return theirs


def moved_tags(was: list, now: list, tags) -> set:
    """The tags of ``tags`` whose nodes among ``was`` are not those among ``now``, in the same order."""
    mine, theirs = [n for n in was if n.tag in tags], [n for n in now if n.tag in tags]
    if mine == theirs:
        return set()
    moved = {n.tag for n in set(mine) ^ set(theirs)}  # a node added or taken away
    if [n for n in mine if n.tag not in moved] == [n for n in theirs if n.tag not in moved]:
        return moved  # and the rest in the same order, each tag's
    before: dict = {}
    after: dict = {}
    for nodes, of in ((mine, before), (theirs, after)):  # one out of its place: tag by tag
        for n in nodes:
            of.setdefault(n.tag, []).append(n)
    return {tag for tag in tags if before.get(tag) != after.get(tag)}


def _changed_tags(was: list, now: list, dirty: set, units: frozenset) -> set:
    """The tags of ``units`` among siblings ``was`` (as given) and ``now`` of which one changed,
    was taken away or was added."""
    given, kept = set(was), set(now)
    changed = (given & dirty) | (given ^ kept)  # as sets, in C: the siblings are read once each
    return {tag for n in changed if (tag := n.tag) in units}


def _keyed(top: list, devs: dict, tags, inner: dict, idents: dict) -> dict:
    """key path -> (unit, index in its parent, child indexes from the root) of the units of
    ``top`` (``<domain>``'s children) whose tag is in ``tags``, and of each ``<devices>``'s
    children (``devs``) whose tag is in its ``inner``: ``_units``' keys, for those tags."""
    out: dict = {}
    seen: dict[tuple, int] = {}
    for index, node in enumerate(top):
        tag = node.tag
        if tag == "devices":
            n = seen.get(("devices",), 0)
            seen[("devices",)] = n + 1
            wanted = inner.get(node)
            if not wanted:
                continue
            count: dict[tuple, int] = {}
            at = ("devices", n)
            for i, child in enumerate(devs[node]):
                if child.tag in wanted:
                    sub = idents.get(child)
                    if sub is None:
                        sub = idents[child] = ident_of(child)
                    k = count.get(sub, 0)
                    count[sub] = k + 1
                    out[(at, (*sub, k))] = (child, i, (index, i))
        elif tag in tags:
            ident = ident_of(node) if tag in SPECIAL else (tag,)  # as keyed names it (<memory>: KEYS)
            n = seen.get(ident, 0)
            seen[ident] = n + 1
            out[((*ident, n),)] = (node, index, (index,))
    return out


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
