"""What a rewrite of a domain vmtune tuned before changes, from the input as given: the passes'
own changes less those the input had already, and what taking the old tuning back changed that no
pass set again; and the device addresses libvirt assigned since, which stay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lxml import etree

from ..xml import xmltext
from ..xml.edits import show
from .handmerge import AttrOp, OrderOp, RemoveOp, TextOp, full
from ..xml.model import NS, TAG
from ..xml.xmlkeys import find, keyed
from ..xml.xmltext import local_name

if TYPE_CHECKING:
    from ..xml.edits import Change
    from ..xml.markup import Source


# -- what a rewrite of a tuned domain changes ---------------------------------------------------------
def _record(node) -> bool:
    """vmtune's record in its tag: left out of what a change shows (``edits.show``)."""
    parent = node.getparent()
    return local_name(node.tag) == "undo" and parent is not None and parent.tag == TAG


def _bare(el: etree._Element) -> str:
    """An element as one line without vmtune's record (what a change shows)."""
    return show(el, _record)


def _value_at(root: etree._Element, path: str, element: bool) -> str | None:
    """What ``path`` (an XPath a change names) holds in ``root``: an attribute's value, an
    element as one line, or its text; None where there is nothing."""
    elem, _, attr = path.rpartition("/@") if "/@" in path else (path, "", "")
    try:
        found = root.getroottree().xpath(elem, namespaces={"vmtune": NS})
    except etree.XPathError:
        return None
    if len(found) != 1 or not xmltext.is_element(found[0]):
        return None
    if attr:
        return found[0].get(attr)
    return _bare(found[0]) if element else (xmltext.text(found[0]).strip() or None)


def against(given: etree._Element, output: etree._Element, changes: list[Change]) -> list[Change]:
    """The changes from ``given`` (a domain vmtune tuned before, as given) to ``output``: the
    passes' own, less those the input had already, with the input's value as ``before``; and what
    taking the old tuning back changed that no pass set again."""
    from dataclasses import replace

    from ..xml.edits import Change

    out, covered = [], [c.element for c in changes]
    for c in changes:
        element = (c.after or c.before or "").startswith("<")
        now, final = _value_at(given, c.element, element), _value_at(output, c.element, element)
        if now != final:
            out.append(replace(c, before=now, after=final))
    old = next((t.get("profile") for t in given.iterfind(f"metadata/{TAG}")), None)
    why = f"back as it was before vmtune's {old or 'earlier'} tuning (its record)"
    for op in full(given, output):
        if isinstance(op, OrderOp):
            continue
        tree = given if isinstance(op, RemoveOp) else output
        node = find(tree, op.path)
        if node is None:
            continue
        path = tree.getroottree().getpath(node)
        if isinstance(op, AttrOp):
            path += f"/@{op.name}"
            before, after = op.before, op.after
        elif isinstance(op, TextOp):
            before, after = op.before.strip() or None, op.after.strip() or None
        elif isinstance(op, RemoveOp):
            child = dict(keyed(node)).get(tuple(op.key))
            if child is None or not xmltext.is_element(child):
                continue
            path, before, after = tree.getroottree().getpath(child), _bare(child), None
        else:
            path, before, after = path, None, _bare(node)
        if any(path == p or path.startswith(p + "/") for p in covered):
            continue
        out.append(Change(path, before, after, why))
    return out


def keep_assigned(given: etree._Element, output: etree._Element, watch: Source | None = None) -> None:
    """A disk that vmtune moved before, and that libvirt gave an address of its own since (on its
    new bus), keeps that address when it is tuned again: libvirt's, not vmtune's to drop.
    (``watch``: a markup.Source told of each disk before it changes.)"""
    mine = given.find("devices")
    theirs = output.find("devices")
    if mine is None or theirs is None:
        return
    before = dict(keyed(mine))
    for key, disk in keyed(theirs):
        if local_name(disk.tag) != "disk" or disk.find("address") is not None:
            continue
        old = before.get(key)
        if old is None or old.find("address") is None:
            continue
        bus = (old.find("target").get("bus") if old.find("target") is not None else None)
        if bus and bus == (disk.find("target").get("bus") if disk.find("target") is not None else None):
            from ..xml.edits import clone, insert

            if watch is not None:
                watch.touch(disk, kids=True)
            insert(disk, clone(old.find("address")))


def _nodes(root: etree._Element, path: str) -> tuple[etree._Element, str | None] | None:
    """The element (and attribute name) an XPath of a note or a change names, else None."""
    elem, _, attr = path.rpartition("/@") if "/@" in path else (path, "", "")
    try:
        found = root.getroottree().xpath(elem, namespaces={"vmtune": NS})
    except etree.XPathError:
        return None
    return (found[0], attr or None) if len(found) == 1 and xmltext.is_element(found[0]) else None


def truthful(kept: tuple[str, ...], root: etree._Element, changes: list[Change]) -> tuple[str, ...]:
    """The notes of what the hand changed since vmtune's last rewrite ("...: kept"), each still
    true of the output ``root``: where a pass set the value again, the note says so and why."""
    touched = {}
    for change in changes:
        at = _nodes(root, change.element)
        if at is not None:
            touched[at] = change.reason
    out = []
    for note in kept:
        path, sep, rest = note.partition(": ")
        at = _nodes(root, path) if sep and rest.endswith(": kept") else None
        if at is not None and at in touched:
            note = f"{path}: {rest[: -len(': kept')]}: set again by this profile: {touched[at]}"
        out.append(note)
    return tuple(out)
