"""What vmtune changed in a domain, kept in the domain itself, and how to take it back.

A rewrite records what it changed in ``<metadata><vmtune:tune><vmtune:undo>`` (JSON text: libvirt
keeps foreign metadata verbatim, so it survives ``virsh define`` and ``dumpxml``). The record is
made of units: the children of ``<domain>`` and of ``<devices>`` that a pass may write (``TUNED``:
the CPU, pins, memory and its backing, iothreads, features, clock; disks, NICs, controllers, the
balloon, memory devices); vmtune's tag in ``<metadata>`` is kept apart. For each unit vmtune changed, added or removed, it keeps the
unit as it was and as vmtune wrote it, and where_of it sat; nothing else. Comparing whole units is
one C call each, which keeps a rewrite about as fast as before records.

Units are found by keys that vmtune's own changes never alter: the tag with its key attributes (a
controller's type and index, a ``<hostdev>``'s type), a disk by its source, a NIC by its MAC,
and an ordinal among siblings of the same key; a comment by its text.

``take_back`` puts the domain back as it was before vmtune. A unit still as vmtune wrote it goes
back whole. One changed by hand since is merged finely (``_fine``: attributes and values, child
elements by the same keys, ``<vcpupin>`` by its vcpu, ``<cell>`` by its id, ...): a value that is
no longer what vmtune wrote stays, an element vmtune added keeps what the hand added or changed
in it, an element vmtune removed that the hand put back stays; each is a note ("the hand
wins"). A rewrite of a tuned domain starts from there, so ``rewrite(rewrite(x, A), B)`` is
``rewrite(x, B)``; ``vmtune untune`` is ``take_back`` alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from lxml import etree

from . import xmlsafe, xmltext
from .errors import InvalidInput
from .handmerge import merge, put_back, unadd_node
from .model import NS, TAG
from .xmlkeys import SPECIAL, counted, find, ident_of, keyed, parse_node, where_of
from .xmltext import local_name


UNDO = f"{{{NS}}}undo"


VERSION = 1


# The only places a pass writes (tests/test_properties.py's "nothing lost" holds everything else to
# its input, byte for byte): the units a record keeps, of <domain> and of <devices>
TUNED = frozenset(("cpu", "cputune", "numatune", "vcpu", "memtune", "memoryBacking", "iothreads", "iothreadids",
                   "memory", "currentMemory", "features", "clock"))


TUNED_DEVICES = frozenset(("disk", "interface", "controller", "memballoon", "memory"))


def _units(root) -> dict[tuple, tuple[object, int]]:
    """The units of ``root`` by their key path (a tuple of keys): (node, index in its parent).
    Only the tuned tags are keyed: an ordinal counts siblings of one ident, which share a tag."""
    out: dict[tuple, tuple[object, int]] = {}
    seen: dict[tuple, int] = {}
    for index, node in enumerate(counted(root)):
        tag = node.tag
        if tag == "devices":
            ident = (tag,)
            n = seen.get(ident, 0)
            seen[ident] = n + 1
            inner: dict[tuple, int] = {}
            for i, child in enumerate(counted(node)):
                if child.tag in TUNED_DEVICES:
                    sub = ident_of(child)
                    k = inner.get(sub, 0)
                    inner[sub] = k + 1
                    out[((*ident, n), (*sub, k))] = (child, i)
        elif tag in TUNED:
            ident = ident_of(node) if tag in SPECIAL else (tag,)  # as keyed names it (<memory>: KEYS)
            n = seen.get(ident, 0)
            seen[ident] = n + 1
            out[((*ident, n),)] = (node, index)
    return out


def _text(node) -> str:
    return etree.tostring(node, encoding="unicode", with_tail=False)


@dataclass(frozen=True)
class Snapshot:
    """A domain's units as text, and what ``diff`` needs of the rest: taken before the passes run,
    so that no copy of the tree is needed."""

    units: dict  # key path -> (text, index in its parent)
    tag: str | None
    metadata: bool
    devices: bool


def snapshot(root: etree._Element) -> Snapshot:
    tag = root.find(f"metadata/{TAG}")
    if tag is not None:
        tag = etree.fromstring(etree.tostring(tag))
        for old in tag.findall(UNDO):
            tag.remove(old)
    return Snapshot({key: (_text(node), index) for key, (node, index) in _units(root).items()},
                    None if tag is None else etree.tostring(tag, encoding="unicode"),
                    root.find("metadata") is not None, root.find("devices") is not None)


def diff(before: etree._Element | Snapshot, after: etree._Element) -> dict:
    """The record of what turns ``before`` (a domain, or its snapshot) into ``after``: each unit
    that differs, as it was (None: vmtune added it) and as vmtune wrote it (None: removed), and
    where it was."""
    was = before if isinstance(before, Snapshot) else snapshot(before)
    ops = []
    theirs = _units(after)
    for key, (old, index) in was.units.items():
        new = _text(theirs[key][0]) if key in theirs else None
        if old != new:
            ops.append([[list(k) for k in key], old, new, index])
    for key, (node, index) in theirs.items():
        if key not in was.units:
            ops.append([[list(k) for k in key], None, _text(node), index])
    wrote = after.find(f"metadata/{TAG}")
    return {"v": VERSION, "tag": was.tag, "profile": None if wrote is None else wrote.get("profile"),
            "metadata": was.metadata, "devices": was.devices, "units": ops}


def write(root: etree._Element, record: dict) -> None:
    """Put ``record`` into ``root``'s vmtune tag (which the tag pass wrote)."""
    tag = root.find(f"metadata/{TAG}")
    if tag is None:
        return
    for old in records(root):
        tag.remove(old)
    el = etree.SubElement(tag, UNDO)
    el.set("version", str(VERSION))
    el.text = json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def records(root: etree._Element) -> list[etree._Element]:
    """The record elements in ``root``'s vmtune tag (one, or none)."""
    tag = root.find(f"metadata/{TAG}")
    return [c for c in tag if local_name(c.tag) == "undo"] if tag is not None else []


def recorded(root: etree._Element) -> bool:
    """Whether ``root`` has a record (read or not)."""
    return bool(records(root))


def read(root: etree._Element) -> dict | None:
    """The record in ``root``'s vmtune tag; None without one; InvalidInput when it is damaged."""
    found = records(root)
    if not found:
        return None
    try:
        record = json.loads(xmltext.text(found[0]))
        if record.get("v") != VERSION or not isinstance(record.get("units"), list):
            raise ValueError("not a version 1 record")
    except (ValueError, AttributeError) as exc:
        raise InvalidInput(f"the vmtune record in <metadata> cannot be read ({exc}); remove "
                           "<vmtune:undo> to tune the domain as it is") from None
    return record


def take_back(root: etree._Element) -> tuple[bool, list[str]]:
    """Put ``root`` back as it was before vmtune, by its record (which goes). (Whether it had a
    record, the notes on what stays as the hand left it.)"""
    record = read(root)
    if record is None:
        return False, []
    notes: list[str] = []
    units = record["units"]
    back = []
    for path, old, new, index in units:
        if new is None:
            back.append((path, old, index))
            continue
        parent = root if len(path) == 1 else find(root, path[:1])
        here = dict(keyed(parent)).get(tuple(path[-1])) if parent is not None else None
        if here is None:
            notes.append(f"{where_of(path)}: vmtune {'added' if old is None else 'changed'} it, and it was removed by hand")
        elif _text(here) == new:  # as vmtune wrote it: back whole
            if old is None:
                parent.remove(here)
            else:
                here.addprevious(parse_node(old))
                parent.remove(here)
        elif old is None:
            unadd_node(here, parse_node(new), where_of(path), notes)
        else:
            merge(here, parse_node(old), parse_node(new), path, notes)
    for path, old, index in sorted(back, key=lambda u: (len(u[0]), u[2])):
        parent = root if len(path) == 1 else find(root, path[:1])
        if parent is None:
            notes.append(f"{where_of(path)}: vmtune removed it, and its parent is gone by hand")
            continue
        put_back(parent, tuple(path[-1]), index, parse_node(old), where_of(path), notes)
    if not record.get("devices", True):
        devices = root.find("devices")
        if devices is not None and not counted(devices):
            root.remove(devices)
    _retag(root, record, notes)
    return True, notes


def _retag(root, record: dict, notes: list[str]) -> None:
    """vmtune's tag as it was: the user's own (``vmtune tag``), or none, and no <metadata> that
    vmtune made and left empty; a tag retagged by hand since (another profile) stays, record gone."""
    metadata = root.find("metadata")
    tag = metadata.find(TAG) if metadata is not None else None
    if tag is None:
        return
    if record.get("profile") and tag.get("profile") != record["profile"]:
        notes.append(f"/domain/metadata/vmtune:tune/@profile: {tag.get('profile')!r} by hand (vmtune wrote "
                     f"{record['profile']!r}): kept")
        for old in records(root):
            tag.remove(old)
        return
    if record.get("tag"):
        tag.addprevious(xmlsafe.parse(record["tag"], "the vmtune record's tag"))
    metadata.remove(tag)
    if not record.get("metadata", True) and not counted(metadata):
        metadata.getparent().remove(metadata)  # vmtune made it for its tag


def strip(root: etree._Element) -> None:
    """``root`` without its record (the tag stays): what claims and the hook read is the same."""
    for old in records(root):
        old.getparent().remove(old)
