"""A unit vmtune wrote and the hand changed since, taken back finely: what vmtune changed goes,
what the hand changed stays, and each place the hand wins is a note.

``fine(old, new)`` is what turned ``old`` into ``new`` (vmtune's rewrite), as ops: ``a`` an
attribute (old and new value), ``t`` a value, ``o`` the attributes' order, ``+`` a node added (a
digest of it and of each child), ``-`` a node removed (whole, with where_of it sat). ``merge`` takes
those ops back on the unit as it is now; ``unadd_node`` takes back a unit vmtune added; ``put_back``
puts a removed node back (a device address libvirt assigned since gives way).
"""

from __future__ import annotations

from lxml import etree

from ..xml import xmltext
from ..xml.xmlkeys import ASSIGNED, canon, counted, digest, find, is_leaf, keyed, parse_node, same, shallow, show, where_of
from ..xml.xmltext import local_name


def fine(before, after) -> list:
    """What turns element ``before`` into ``after``, finely: attributes and values, child nodes
    by their keys (the ops ``take_back`` merges a unit changed by hand with)."""
    ops: list = []
    _diff(before, after, [], ops)
    return ops


def _values(b, a, path: list, ops: list) -> None:
    """The ops of ``b``'s attributes and text."""
    names = list(b.attrib)
    if [n for n in a.attrib if n in b.attrib] != [n for n in names if n in a.attrib] or set(names) != set(a.attrib):
        ops.append(["o", path, names])  # the order to put the attributes back in
    for i, (name, value) in enumerate(b.attrib.items()):
        if name not in a.attrib:
            ops.append(["a", path, name, value, None, i])
        elif a.get(name) != value:
            ops.append(["a", path, name, value, a.get(name), None])
    for name, value in a.attrib.items():
        if name not in b.attrib:
            ops.append(["a", path, name, None, value, None])
    if is_leaf(b) and is_leaf(a):
        old, new = xmltext.text(b), xmltext.text(a)
        if old.strip() != new.strip():
            ops.append(["t", path, old, new])


def _diff(b, a, path: list, ops: list) -> None:
    """The ops that turn ``b`` into ``a``, all through."""
    _values(b, a, path, ops)
    mine, theirs = keyed(b), keyed(a)
    there = dict(theirs)
    here = {k for k, _ in mine}
    for index, (key, node) in enumerate(mine):
        if key not in there:
            ops.append(["-", path, index, list(key), show(node)])
        elif xmltext.is_element(node) and not same(node, there[key]):
            _diff(node, there[key], [*path, list(key)], ops)
    for key, node in theirs:
        if key not in here:
            parts = [digest(c) for c in counted(node)] if xmltext.is_element(node) else []
            ops.append(["+", [*path, list(key)], digest(node), shallow(node), parts])


def full(before: etree._Element, after: etree._Element) -> list:
    """Every fine op between two whole domains (what a re-tuning reports; vmtune's tag apart)."""
    return fine(before, after)


def merge(here, old, new, path: list, notes: list[str]) -> None:
    """A unit vmtune changed and the hand changed since: vmtune's own changes taken back finely."""
    ops = fine(old, new)
    holder = etree.Element("holder")  # the fine ops' paths start below the unit
    here.addprevious(holder)
    holder.append(here)
    key = keyed(holder)[0][0]
    rooted = [[o[0], [list(key), *o[1]], *o[2:]] for o in ops]
    _apply(holder, rooted, notes, path[:-1])
    for child in list(holder):
        holder.addprevious(child)
    holder.getparent().remove(holder)


def _apply(root, ops: list, notes: list[str], prefix: list) -> None:
    """Fine ops taken back on ``root``: values first, then what vmtune added, then what it removed."""
    for op in ops:
        if op[0] in ("a", "t"):
            _value(root, op, notes, prefix)
    for op in ops:
        if op[0] == "o":
            _reorder(find(root, op[1]), op[2])
    for op in sorted((o for o in ops if o[0] == "+"), key=lambda o: -len(o[1])):
        _unadd(root, op, notes, prefix)
    for op in sorted((o for o in ops if o[0] == "-"), key=lambda o: (len(o[1]), o[2])):
        _undelete(root, op, notes, prefix)


def unadd_node(node, made, where: str, notes: list[str]) -> None:
    """A unit vmtune added (as ``made``) and the hand changed since: ``_strip_added``."""
    _strip_added(node, [digest(c) for c in counted(made)], shallow(made), where, notes)


def _strip_added(node, parts: list[str], bare: str, where: str, notes: list[str]) -> None:
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


def put_back(parent, key: tuple, index: int, node, where: str, notes: list[str]) -> None:
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


def _value(root, op, notes: list[str], prefix: list | None = None) -> None:
    node = find(root, op[1])
    if op[0] == "a":
        _, path, name, before, after, pos = op
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
    _, path, before, after = op
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


def _reorder(node, names: list[str]) -> None:
    """``node``'s attributes in the order ``names`` gives, any others after them as they are."""
    if node is None:
        return
    items = sorted(node.attrib.items(), key=lambda kv: names.index(kv[0]) if kv[0] in names else len(names))
    node.attrib.clear()
    for k, v in items:
        node.set(k, v)


def _unadd(root, op, notes: list[str], prefix: list | None = None) -> None:
    """Take away what vmtune added: the whole element as vmtune wrote it; else the children it
    wrote that are still as written, and the element too when nothing the hand added or changed
    is left in it."""
    path, made, bare, parts = op[1], op[2], op[3], op[4]
    node = find(root, path)
    where = where_of(path, None, prefix)
    if node is None:
        notes.append(f"{where}: vmtune added it, and it was removed by hand")
        return
    if digest(node) == made:
        node.getparent().remove(node)
        return
    _strip_added(node, parts, bare, where, notes)


def _undelete(root, op, notes: list[str], prefix: list | None = None) -> None:
    _, path, index, key, xml = op
    parent = find(root, path)
    where = where_of([*path, key], None, prefix)
    if parent is None:
        notes.append(f"{where}: vmtune removed it, and its parent is gone by hand")
        return
    put_back(parent, tuple(key), index, parse_node(xml), where, notes)
