"""What vmtune changed in a domain, kept in the domain itself, and how to take it back
(vmtune/record/unitdiff.py makes the record).

A rewrite records what it changed in ``<metadata><vmtune:tune><vmtune:undo>`` (JSON text: libvirt
keeps foreign metadata verbatim, so it survives ``virsh define`` and ``dumpxml``). The record is
made of units: the children of ``<domain>`` and of ``<devices>`` that a pass may write (``TUNED``:
the CPU, pins, memory and its backing, iothreads, features, clock; disks, NICs, controllers, the
balloon, memory devices); vmtune's tag in ``<metadata>`` is kept apart. For each unit vmtune
changed, added or removed, it keeps the unit as it was and as vmtune wrote it, and where_of it sat;
nothing else. The unit as it was is its text as given (its quotes and layout; a unit vmtune removed
with the whitespace before it), so that ``untune`` gives back those very bytes (vmtune/xml/textkeep.py);
a record of an older vmtune keeps it as lxml writes it, and reads the same. Only the units the
passes touched (a markup.Source is told of each change) are compared, a C call each.
As vmtune wrote it, a unit is as it reads back: whitespace-only text beside children, which the
parser drops, is dropped (``<cpu>\\n  </cpu>`` given a topology), so that the record of a rewrite
of the output is the same record.

Units are found by keys that vmtune's own changes never alter: the tag with its key attributes (a
controller's type and index, a ``<hostdev>``'s type), a disk by its source, a NIC by its MAC,
and an ordinal among siblings of the same key; a comment by its text. A key libvirt fills in at
``virsh define`` where the input left it out (a NIC's MAC, a controller's index) still finds its
unit: ``xmlkeys.filled``.

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
from typing import TYPE_CHECKING

from lxml import etree

from ..xml import xmlsafe, xmltext
from ..errors import InvalidInput
from .handmerge import merge, put_back, unadd_node
from ..xml.model import NSMAP, TAG
from .unitdiff import TUNED, TUNED_DEVICES, UNDO, VERSION, Snapshot, diff, hold, lxml_text, snapshot
from ..xml.xmlkeys import canon, counted, filled, find, keyed, parse_node, where_of
from ..xml.xmltext import local_name

if TYPE_CHECKING:
    from ..xml.markup import Source

__all__ = ["TUNED", "TUNED_DEVICES", "UNDO", "VERSION", "Snapshot", "diff", "dumps", "hold", "read", "recorded",
           "records", "snapshot", "strip", "tagged_only", "tagged_only_now", "take_back", "write"]


def write(root: etree._Element, record: dict, watch: Source | None = None) -> None:
    """Put ``record`` into ``root``'s vmtune tag (which the tag pass wrote; ``watch``: a
    markup.Source told of it before it changes)."""
    tag = xmltext.find(root, f"metadata/{TAG}")
    if tag is None:
        return
    if watch is not None:
        watch.touch(tag, kids=True)
    for old in _undos(tag):
        tag.remove(old)
    _holding(etree.SubElement(tag, UNDO), record)


def _holding(el: etree._Element, record: dict) -> etree._Element:
    """``el`` (a ``<vmtune:undo>``) holding ``record``, as every record is kept."""
    el.set("version", str(VERSION))
    el.text = dumps(record)
    return el


def dumps(record: dict) -> str:
    """``record`` as compact JSON, other than ASCII characters as they are. Python's ASCII-only
    encoder is the faster one (about 40% on a large record): a record it escaped nothing in is the
    same text either way, and one with ``\\u`` in it is encoded again, its characters kept."""
    text = _ascii(record)
    return text if "\\u" not in text else _UNICODE.encode(record)


# made once (json.dumps with separators makes one a call), and without the check for circular
# references (a quarter of the time: a record is lists, strings and numbers the diff made anew)
_ASCII = json.JSONEncoder(separators=(",", ":"), check_circular=False)
_UNICODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False)


def _ascii_once():
    """``_ASCII.encode``, with json's C encoder made once where there is one (``encode`` makes it
    anew at each call, as ``_ASCII`` was made: no indent, no sorting; a record holds no float)."""
    make = json.encoder.c_make_encoder
    if make is None:
        return _ASCII.encode
    one = make(None, _ASCII.default, json.encoder.encode_basestring_ascii, None, _ASCII.key_separator,
               _ASCII.item_separator, False, False, True)
    return lambda record: "".join(one(record, 0))


_ascii = _ascii_once()


def tagged_only(root: etree._Element, profile: str) -> etree._Element:
    """The record of a domain that ``vmtune tag`` tags with ``profile`` for the first time: vmtune
    changed nothing in it but the tag, which is the hand's (``take_back`` leaves it as set). A
    rewrite then starts from the domain as it is, and does not take the user's own settings for
    an older vmtune's tuning (``driver.OLD_TUNING``)."""
    tag = etree.Element(TAG, nsmap=NSMAP)
    tag.set("profile", profile)
    record = {"v": VERSION, "tag": etree.tostring(tag, encoding="unicode"), "profile": profile,
              "metadata": root.find("metadata") is not None, "devices": root.find("devices") is not None,
              "units": []}
    return _holding(etree.Element(UNDO, nsmap=NSMAP), record)


def tagged_only_now(root: etree._Element) -> bool:
    """Whether ``root``'s record is ``tagged_only``'s: no unit changed (vmtune only tagged it)."""
    try:
        record = read(root)
    except InvalidInput:
        return False
    return record is not None and record["units"] == [] and bool(record.get("tag"))


def records(root: etree._Element) -> list[etree._Element]:
    """The record elements in ``root``'s vmtune tag (one, or none)."""
    tag = xmltext.find(root, f"metadata/{TAG}")
    return _undos(tag) if tag is not None else []


def _undos(tag: etree._Element) -> list[etree._Element]:
    return [c for c in tag if local_name(c.tag) == "undo"]


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


def take_back(root: etree._Element, restored: dict | None = None) -> tuple[bool, list[str]]:
    """Put ``root`` back as it was before vmtune, by its record (which goes). (Whether it had a
    record, the notes on what stays as the hand left it.) ``restored`` gets each unit put back
    whole, with its text as the record keeps it."""
    restored = {} if restored is None else restored
    record = read(root)
    if record is None:
        return False, []
    notes: list[str] = []
    units = record["units"]
    back = []
    claimed = {(len(u[0]), tuple(u[0][-1])) for u in units}
    used: set = set()
    for path, old, new, index in units:
        if new is None:
            back.append((path, old, index))
            continue
        parent = root if len(path) == 1 else find(root, path[:1])
        here = dict(keyed(parent)).get(tuple(path[-1])) if parent is not None else None
        if here is None and parent is not None:  # a MAC or an index libvirt filled in since
            here = filled(parent, tuple(path[-1]), new, {k for n, k in claimed if n == len(path)}, used)
        if here is not None:
            used.add(here)
        if here is None:
            notes.append(f"{where_of(path)}: vmtune {'added' if old is None else 'changed'} it, and it was removed by hand")
        elif lxml_text(here) == new or canon(here) == canon(parse_node(new)):  # as vmtune wrote it (libvirt
            # and vmtune's writer may order the attributes otherwise): back whole
            if old is None:
                parent.remove(here)
            else:
                node = parse_node(old)
                restored[node] = old
                here.addprevious(node)
                parent.remove(here)
        elif old is None:
            unadd_node(here, parse_node(new), where_of(path), notes)
        else:
            merge(here, parse_node(old), parse_node(new), path, notes)
    _retag(root, record, notes)  # first: the <metadata> vmtune made would stand in the places below
    for path, old, index in sorted(back, key=lambda u: (len(u[0]), u[2])):
        parent = root if len(path) == 1 else find(root, path[:1])
        if parent is None:
            notes.append(f"{where_of(path)}: vmtune removed it, and its parent is gone by hand")
            continue
        node = parse_node(old)
        restored[node] = old
        put_back(parent, tuple(path[-1]), index, node, where_of(path), notes)
    if not record.get("devices", True):
        devices = root.find("devices")
        if devices is not None and not counted(devices):
            root.remove(devices)
    for name, text in (record.get("blank") or {}).items():
        el = root.find(name) if isinstance(name, str) and isinstance(text, str) and text.isspace() else None
        if el is not None and len(el) == 0 and not el.text:
            el.text = text.replace("\r\n", "\n")  # as the parser reads it
            if el.text != text and not el.attrib:  # line ends the document's style may not give: as given
                restored[el] = f"<{name}>{text}</{name}>"
    return True, notes


def _retag(root: etree._Element, record: dict, notes: list[str]) -> None:
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
        _retag_as(tag, xmlsafe.parse(record["tag"], "the vmtune record's tag"))
        return
    metadata.remove(tag)
    if not record.get("metadata", True) and not counted(metadata):
        metadata.getparent().remove(metadata)  # vmtune made it for its tag


def _retag_as(tag: etree._Element, was: etree._Element) -> None:
    """The user's own tag back: ``was``'s attributes and children in ``tag`` (which keeps its
    place, and so its text)."""
    tag.attrib.clear()
    for name, value in was.attrib.items():
        tag.set(name, value)
    for child in list(tag):
        tag.remove(child)
    tag.text = was.text
    for child in was:
        tag.append(child)


def strip(root: etree._Element) -> None:
    """``root`` without its record (the tag stays): what claims and the hook read is the same."""
    for old in records(root):
        old.getparent().remove(old)
