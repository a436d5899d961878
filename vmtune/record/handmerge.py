"""A unit vmtune wrote and the hand changed since, taken back finely: what vmtune changed goes,
what the hand changed stays, and each place the hand wins is a note.

``fine(old, new)`` is what turned ``old`` into ``new`` (vmtune's rewrite), as ops (small frozen
dataclasses): ``AttrOp`` an attribute (old and new value), ``TextOp`` a value, ``OrderOp`` the
attributes' order, ``AddOp`` a node added (a digest of it and of each child), ``RemoveOp`` a node
removed (whole, with where it sat). ``merge`` takes those ops back on the unit as it is now;
``unadd_node`` takes back a unit vmtune added; ``put_back`` puts a removed node back (a device
address libvirt assigned since gives way). A path is a list of keys from the unit
(vmtune/xml/xmlkeys.py), each a list as the record keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from lxml import etree

from ..xml import xmltext
from ..xml.edits import show
from ..xml.xmlkeys import (ASSIGNED, canon, counted, digest, find, is_leaf, keyed, parse_node, same, shallow,
                           vmtune_tag, where_of)
from ..xml.xmltext import local_name


Path = list  # keys from the unit, each a list (``xmlkeys.find``)


@dataclass(frozen=True)
class AttrOp:
    """Attribute ``name`` of the element at ``path`` was ``before`` and is ``after`` (None: absent);
    ``pos``: its place among the attributes, when vmtune removed it."""

    path: Path
    name: str
    before: str | None
    after: str | None
    pos: int | None = None


@dataclass(frozen=True)
class TextOp:
    """The value of the element at ``path`` was ``before`` and is ``after``."""

    path: Path
    before: str
    after: str


@dataclass(frozen=True)
class OrderOp:
    """The attributes of the element at ``path`` were in the order ``names``."""

    path: Path
    names: list[str]


@dataclass(frozen=True)
class AddOp:
    """vmtune added the node at ``path``: its ``digest``, its ``shallow`` text (``bare``) and the
    digests of its children (``parts``)."""

    path: Path
    digest: str
    bare: str
    parts: list[str]


@dataclass(frozen=True)
class RemoveOp:
    """vmtune removed the node of ``key``, child ``index`` of the element at ``path``, whose
    text was ``xml``."""

    path: Path
    index: int
    key: list
    xml: str


Op = AttrOp | TextOp | OrderOp | AddOp | RemoveOp


def fine(before: etree._Element, after: etree._Element) -> list[Op]:
    """What turns element ``before`` into ``after``, finely: attributes and values, child nodes
    by their keys (the ops ``take_back`` merges a unit changed by hand with)."""
    ops: list[Op] = []
    _diff(before, after, [], ops)
    return ops


def _values(b: etree._Element, a: etree._Element, path: Path, ops: list[Op]) -> None:
    """The ops of ``b``'s attributes and text."""
    names = list(b.attrib)
    if [n for n in a.attrib if n in b.attrib] != [n for n in names if n in a.attrib] or set(names) != set(a.attrib):
        ops.append(OrderOp(path, names))  # the order to put the attributes back in
    for i, (name, value) in enumerate(b.attrib.items()):
        if name not in a.attrib:
            ops.append(AttrOp(path, name, value, None, i))
        elif a.get(name) != value:
            ops.append(AttrOp(path, name, value, a.get(name)))
    for name, value in a.attrib.items():
        if name not in b.attrib:
            ops.append(AttrOp(path, name, None, value))
    if is_leaf(b) and is_leaf(a):
        old, new = xmltext.text(b), xmltext.text(a)
        if old.strip() != new.strip():
            ops.append(TextOp(path, old, new))


def _diff(b: etree._Element, a: etree._Element, path: Path, ops: list[Op]) -> None:
    """The ops that turn ``b`` into ``a``, all through."""
    _values(b, a, path, ops)
    mine, theirs = keyed(b), keyed(a)
    there = dict(theirs)
    here = {k for k, _ in mine}
    for index, (key, node) in enumerate(mine):
        if key not in there:
            ops.append(RemoveOp(path, index, list(key), show(node, vmtune_tag)))
        elif xmltext.is_element(node) and not same(node, there[key]):
            _diff(node, there[key], [*path, list(key)], ops)
    for key, node in theirs:
        if key not in here:
            parts = [digest(c) for c in counted(node)] if xmltext.is_element(node) else []
            ops.append(AddOp([*path, list(key)], digest(node), shallow(node), parts))


def full(before: etree._Element, after: etree._Element) -> list[Op]:
    """Every fine op between two whole domains (what a re-tuning reports; vmtune's tag apart)."""
    return fine(before, after)


def merge(here: etree._Element, old: etree._Element, new: etree._Element, path: Path, notes: list[str]) -> None:
    """A unit vmtune changed and the hand changed since: vmtune's own changes taken back finely."""
    ops = fine(old, new)
    holder = etree.Element("holder")  # the fine ops' paths start below the unit
    here.addprevious(holder)
    holder.append(here)
    key = keyed(holder)[0][0]
    rooted = [replace(o, path=[list(key), *o.path]) for o in ops]
    _apply(holder, rooted, notes, path[:-1])
    for child in list(holder):
        holder.addprevious(child)
    holder.getparent().remove(holder)


def _apply(root: etree._Element, ops: list[Op], notes: list[str], prefix: Path) -> None:
    """Fine ops taken back on ``root``: values first, then what vmtune added, then what it removed."""
    for op in ops:
        if isinstance(op, (AttrOp, TextOp)):
            _value(root, op, notes, prefix)
    for op in ops:
        if isinstance(op, OrderOp):
            _reorder(find(root, op.path), op.names)
    for op in sorted((o for o in ops if isinstance(o, AddOp)), key=lambda o: -len(o.path)):
        _unadd(root, op, notes, prefix)
    for op in sorted((o for o in ops if isinstance(o, RemoveOp)), key=lambda o: (len(o.path), o.index)):
        _undelete(root, op, notes, prefix)


def unadd_node(node: etree._Element, made: etree._Element, where: str, notes: list[str]) -> None:
    """A unit vmtune added (as ``made``) and the hand changed since: ``_strip_added``."""
    _strip_added(node, [digest(c) for c in counted(made)], shallow(made), where, notes)


def _strip_added(node: etree._Element, parts: list[str], bare: str, where: str, notes: list[str]) -> None:
    """An element vmtune added and the hand changed since: its children still as vmtune wrote them
    (``parts``, their digests) go, and the element too when nothing of the hand's is left in it
    (no child, and its tag, attributes and text as vmtune wrote them: ``bare``, its ``shallow``)."""
    left = list(parts)
    for child in counted(node):
        d = digest(child)
        if d in left:
            left.remove(d)
            node.remove(child)
    if not counted(node) and shallow(node) == bare:
        node.getparent().remove(node)
        return
    notes.append(f"{where}: vmtune added it, and it was changed by hand: what the hand wrote is kept")


def put_back(parent: etree._Element, key: tuple, index: int, node: etree._Element, where: str, notes: list[str]) -> None:
    """A node vmtune removed, back where it was (a device address libvirt assigned since is
    libvirt's, and gives way; another node the hand put there stays)."""
    there = dict(keyed(parent)).get(key)
    if there is not None and xmltext.is_element(node) and local_name(node.tag) in ASSIGNED:
        there.addprevious(node)
        parent.remove(there)
        return
    if there is not None:
        if canon(there) != canon(node):
            notes.append(f"{where}: vmtune removed it, and another was put there by hand: kept")
        return
    nodes = counted(parent)
    if index < len(nodes):
        nodes[index].addprevious(node)
    elif nodes:
        nodes[-1].addnext(node)
    else:
        parent.append(node)


def _value(root: etree._Element, op: AttrOp | TextOp, notes: list[str], prefix: Path | None = None) -> None:
    node = find(root, op.path)
    if isinstance(op, AttrOp):
        path, name, before, after, pos = op.path, op.name, op.before, op.after, op.pos
        where = where_of(path, name, prefix)
        if node is None:
            notes.append(f"{where}: its element is gone by hand; nothing to put back")
            return
        current = node.get(name)
        if current == before:
            return
        if current != after:
            notes.append(f"{where}: {current!r} by hand (vmtune wrote {after!r}): kept")
            return
        if before is None:
            del node.attrib[name]
        elif pos is None:
            node.set(name, before)  # changed in place: it keeps its place
        else:
            items = [(k, v) for k, v in node.attrib.items() if k != name]
            items.insert(min(pos if pos is not None else len(items), len(items)), (name, before))
            node.attrib.clear()
            for k, v in items:
                node.set(k, v)
        return
    path, before, after = op.path, op.before, op.after
    where = where_of(path, None, prefix)
    if node is None:
        notes.append(f"{where}: gone by hand; nothing to put back")
        return
    current = xmltext.text(node)
    if current.strip() == before.strip():
        return
    if current.strip() != after.strip():
        notes.append(f"{where}: {current.strip()!r} by hand (vmtune wrote {after.strip()!r}): kept")
        return
    xmltext.set_text(node, before)


def _reorder(node: etree._Element | None, names: list[str]) -> None:
    """``node``'s attributes in the order ``names`` gives, any others after them as they are."""
    if node is None:
        return
    items = sorted(node.attrib.items(), key=lambda kv: names.index(kv[0]) if kv[0] in names else len(names))
    node.attrib.clear()
    for k, v in items:
        node.set(k, v)


def _unadd(root: etree._Element, op: AddOp, notes: list[str], prefix: Path | None = None) -> None:
    """Take away what vmtune added: the whole element as vmtune wrote it; else the children it
    wrote that are still as written, and the element too when nothing the hand added or changed
    is left in it."""
    path, made, bare, parts = op.path, op.digest, op.bare, op.parts
    node = find(root, path)
    where = where_of(path, None, prefix)
    if node is None:
        notes.append(f"{where}: vmtune added it, and it was removed by hand")
        return
    if digest(node) == made:
        node.getparent().remove(node)
        return
    _strip_added(node, parts, bare, where, notes)


def _undelete(root: etree._Element, op: RemoveOp, notes: list[str], prefix: Path | None = None) -> None:
    path, index, key, xml = op.path, op.index, op.key, op.xml
    parent = find(root, path)
    where = where_of([*path, key], None, prefix)
    if parent is None:
        notes.append(f"{where}: vmtune removed it, and its parent is gone by hand")
        return
    put_back(parent, tuple(key), index, parse_node(xml), where, notes)
