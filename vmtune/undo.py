"""What vmtune changed in a domain, kept in the domain itself, and how to take it back.

A rewrite records what it changed in ``<metadata><vmtune:tune><vmtune:undo>`` (JSON text: libvirt
keeps foreign metadata verbatim, so it survives ``virsh define`` and ``dumpxml``). The record is
made of units: the children of ``<domain>`` and of ``<devices>`` that a pass may write (``TUNED``:
the CPU, pins, memory and its backing, iothreads, features, clock; disks, NICs, controllers, the
balloon, memory devices); vmtune's tag in ``<metadata>`` is kept apart. For each unit vmtune changed, added or removed, it keeps the
unit as it was and as vmtune wrote it, and where it sat; nothing else. Comparing whole units is
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

import hashlib
import json
from dataclasses import dataclass

from lxml import etree

from . import xmlsafe, xmltext
from .errors import InvalidInput
from .model import NS, TAG

UNDO = f"{{{NS}}}undo"
MARK = "undo"  # in the text of every domain that has a record (a cheap test before a parse)
VERSION = 1
SOURCE_ATTRS = ("file", "dev", "dir", "name", "volume", "pool", "protocol", "type")
# what libvirt fills in itself when a domain is defined: not the hand's (a device's address, assigned
# anew when vmtune moves a disk from ide to virtio)
ASSIGNED = ("address",)
KEYS = {  # local name -> the attributes that name one of several siblings
    "vcpupin": ("vcpu",), "iothreadpin": ("iothread",), "memnode": ("cellid",), "cell": ("id",),
    "feature": ("name",), "timer": ("name",), "iothread": ("id",), "sibling": ("id",),
    "controller": ("type", "index"), "page": ("size", "nodeset"), "vcpusched": ("vcpus",),
    "iothreadsched": ("iothreads",), "latency": ("initiator", "target", "type", "cache"),
    "bandwidth": ("initiator", "target", "type", "cache"), "hostdev": ("type",), "memory": ("model",),
}


# -- keys ------------------------------------------------------------------------------------------
def _local(tag) -> str:
    if not isinstance(tag, str):
        return ""
    return tag.rpartition("}")[2] if tag[:1] == "{" else tag


def _ident(node) -> tuple:
    """What names ``node`` among its siblings, but for an ordinal."""
    tag = node.tag
    if not isinstance(tag, str):
        return ("#comment" if isinstance(node, etree._Comment) else "#pi", node.text or "")
    local = _local(tag)
    if local == "disk":
        src = node.find("source")
        return (tag, *[f"{a}={src.get(a)}" for a in SOURCE_ATTRS if src is not None and src.get(a)])
    if local == "interface":
        mac = node.find("mac")
        return (tag, mac.get("address", "") if mac is not None else "")
    keys = KEYS.get(local)
    return (tag,) if keys is None else (tag, *[node.get(a) or "" for a in keys])


_COUNTED = (etree._Element, etree._Comment, etree._ProcessingInstruction)
_SPECIAL = frozenset(KEYS) | {"disk", "interface"}  # tags whose ident is more than the tag


def _nodes(parent) -> list:
    """The children that count: elements, comments and PIs, but vmtune's own tag in <metadata>."""
    if parent.tag == "metadata":
        return [c for c in parent if c.tag != TAG and isinstance(c, _COUNTED) and not isinstance(c, etree._Entity)]
    return [c for c in parent if isinstance(c, _COUNTED) and not isinstance(c, etree._Entity)]


def _keyed(parent) -> list[tuple[tuple, object]]:
    """(key, node) for each child that counts, the key its ident and ordinal."""
    seen: dict[tuple, int] = {}
    out = []
    for node in _nodes(parent):
        tag = node.tag
        ident = (tag,) if isinstance(tag, str) and tag not in _SPECIAL and tag[:1] != "{" else _ident(node)
        n = seen.get(ident, 0)
        seen[ident] = n + 1
        out.append(((*ident, n), node))
    return out


def _leaf(node) -> bool:
    """No element children: its text is a value."""
    return next(node.iterchildren(tag=etree.Element), None) is None


def _canon(node) -> str:
    """``node`` as one string: attributes sorted, whitespace-only text dropped, vmtune's tag left
    out (what a digest and a comparison see: libvirt may reorder attributes when it formats)."""
    tag = node.tag
    if not isinstance(tag, str):
        return f"<!{'c' if isinstance(node, etree._Comment) else 'p'}{node.text or ''}>"
    attrs = " ".join(f"{k}={v!r}" for k, v in sorted(node.attrib.items()))
    kids = _nodes(node)
    if not any(isinstance(k.tag, str) for k in kids):
        return f"<{tag} {attrs}>{xmltext.text(node).strip()!r}{''.join(_canon(k) for k in kids)}</>"
    return f"<{tag} {attrs}>{''.join(_canon(k) for k in kids)}</>"


def digest(node) -> str:
    return hashlib.sha256(_canon(node).encode()).hexdigest()[:16]


def _shallow(node) -> str:
    """A digest of ``node`` without its children: its tag, attributes and text."""
    if not xmltext.is_element(node):
        return digest(node)
    attrs = " ".join(f"{k}={v!r}" for k, v in sorted(node.attrib.items()))
    text = xmltext.text(node).strip() if _leaf(node) else ""
    return hashlib.sha256(f"<{node.tag} {attrs}>{text!r}".encode()).hexdigest()[:16]


def _show(node) -> str:
    from .edits import show

    if not xmltext.is_element(node):
        return etree.tostring(node, encoding="unicode", with_tail=False)
    copy = etree.fromstring(show(node))
    for tag in copy.iter(TAG):
        if tag.getparent() is not None and _local(tag.getparent().tag) == "metadata":
            tag.getparent().remove(tag)
    return etree.tostring(copy, encoding="unicode")


# -- the record --------------------------------------------------------------------------------------
def _same(b, a) -> bool:
    """Whether two subtrees are written alike (then nothing in them differs): one C call each."""
    return etree.tostring(b, with_tail=False) == etree.tostring(a, with_tail=False)


# The only places a pass writes (tests/test_properties.py's "nothing lost" holds everything else to
# its input, byte for byte): the units a record keeps, of <domain> and of <devices>
TUNED = frozenset(("cpu", "cputune", "numatune", "vcpu", "memoryBacking", "iothreads", "iothreadids", "memory",
                   "currentMemory", "features", "clock"))
TUNED_DEVICES = frozenset(("disk", "interface", "controller", "memballoon", "memory"))


def _units(root) -> dict[tuple, tuple[object, int]]:
    """The units of ``root`` by their key path (a tuple of keys): (node, index in its parent).
    Only the tuned tags are keyed: an ordinal counts siblings of one ident, which share a tag."""
    out: dict[tuple, tuple[object, int]] = {}
    seen: dict[tuple, int] = {}
    for index, node in enumerate(_nodes(root)):
        tag = node.tag
        if tag == "devices":
            ident = (tag,)
            n = seen.get(ident, 0)
            seen[ident] = n + 1
            inner: dict[tuple, int] = {}
            for i, child in enumerate(_nodes(node)):
                if child.tag in TUNED_DEVICES:
                    sub = _ident(child)
                    k = inner.get(sub, 0)
                    inner[sub] = k + 1
                    out[((*ident, n), (*sub, k))] = (child, i)
        elif tag in TUNED:
            ident = _ident(node) if tag in _SPECIAL else (tag,)  # as _keyed names it (<memory>: KEYS)
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


def _fine(before, after) -> list:
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
    if _leaf(b) and _leaf(a):
        old, new = xmltext.text(b), xmltext.text(a)
        if old.strip() != new.strip():
            ops.append(["t", path, old, new])


def _diff(b, a, path: list, ops: list) -> None:
    """The ops that turn ``b`` into ``a``, all through."""
    _values(b, a, path, ops)
    mine, theirs = _keyed(b), _keyed(a)
    there = dict(theirs)
    here = {k for k, _ in mine}
    for index, (key, node) in enumerate(mine):
        if key not in there:
            ops.append(["-", path, index, list(key), _show(node)])
        elif xmltext.is_element(node) and not _same(node, there[key]):
            _diff(node, there[key], [*path, list(key)], ops)
    for key, node in theirs:
        if key not in here:
            parts = [digest(c) for c in _nodes(node)] if xmltext.is_element(node) else []
            ops.append(["+", [*path, list(key)], digest(node), _shallow(node), parts])


def full(before: etree._Element, after: etree._Element) -> list:
    """Every fine op between two whole domains (what a re-tuning reports; vmtune's tag apart)."""
    return _fine(before, after)


def write(root: etree._Element, record: dict) -> None:
    """Put ``record`` into ``root``'s vmtune tag (which the tag pass wrote)."""
    tag = root.find(f"metadata/{TAG}")
    if tag is None:
        return
    for old in [c for c in tag if _local(c.tag) == "undo"]:
        tag.remove(old)
    el = etree.SubElement(tag, UNDO)
    el.set("version", str(VERSION))
    el.text = json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def read(root: etree._Element) -> dict | None:
    """The record in ``root``'s vmtune tag; None without one; InvalidInput when it is damaged."""
    tag = root.find(f"metadata/{TAG}")
    found = [c for c in tag if _local(c.tag) == "undo"] if tag is not None else []
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


# -- taking it back -------------------------------------------------------------------------------------
def _find(root, path: list):
    node = root
    for key in path:
        node = dict(_keyed(node)).get(tuple(key))
        if node is None:
            return None
    return node


def _where(path: list, name: str | None = None, prefix: list | None = None) -> str:
    steps = []
    for ident in [*(prefix or []), *path]:
        local = _local(ident[0]) or ident[0]
        vals = [v for v in ident[1:-1] if v]
        steps.append(local + (f"[{','.join(vals)}]" if vals else "") + (f"[{ident[-1] + 1}]" if ident[-1] else ""))
    return "/domain/" + "/".join(steps) + (f"/@{name}" if name else "")


def _parse_unit(text: str):
    return _other(text) if text.startswith(("<!--", "<?")) else etree.fromstring(text)


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
        parent = root if len(path) == 1 else _find(root, path[:1])
        here = dict(_keyed(parent)).get(tuple(path[-1])) if parent is not None else None
        if here is None:
            notes.append(f"{_where(path)}: vmtune {'added' if old is None else 'changed'} it, and it was removed by hand")
        elif _text(here) == new:  # as vmtune wrote it: back whole
            if old is None:
                parent.remove(here)
            else:
                here.addprevious(_parse_unit(old))
                parent.remove(here)
        elif old is None:
            _unadd_node(here, _parse_unit(new), _where(path), notes)
        else:
            _merge(here, _parse_unit(old), _parse_unit(new), path, notes)
    for path, old, index in sorted(back, key=lambda u: (len(u[0]), u[2])):
        parent = root if len(path) == 1 else _find(root, path[:1])
        if parent is None:
            notes.append(f"{_where(path)}: vmtune removed it, and its parent is gone by hand")
            continue
        _put_back(parent, tuple(path[-1]), index, _parse_unit(old), _where(path), notes)
    if not record.get("devices", True):
        devices = root.find("devices")
        if devices is not None and not _nodes(devices):
            root.remove(devices)
    _retag(root, record, notes)
    return True, notes


def _merge(here, old, new, path: list, notes: list[str]) -> None:
    """A unit vmtune changed and the hand changed since: vmtune's own changes taken back finely."""
    ops = _fine(old, new)
    holder = etree.Element("holder")  # the fine ops' paths start below the unit
    here.addprevious(holder)
    holder.append(here)
    key = _keyed(holder)[0][0]
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
            _reorder(_find(root, op[1]), op[2])
    for op in sorted((o for o in ops if o[0] == "+"), key=lambda o: -len(o[1])):
        _unadd(root, op, notes, prefix)
    for op in sorted((o for o in ops if o[0] == "-"), key=lambda o: (len(o[1]), o[2])):
        _undelete(root, op, notes, prefix)


def _unadd_node(node, made, where: str, notes: list[str]) -> None:
    """A unit vmtune added and the hand changed since: its children as vmtune wrote them go, and
    the unit too when nothing of the hand's is left in it."""
    left = [digest(c) for c in _nodes(made)]
    for child in _nodes(node):
        d = digest(child)
        if d in left:
            left.remove(d)
            node.remove(child)
    if not _nodes(node) and _shallow(node) == _shallow(made):
        node.getparent().remove(node)
        return
    notes.append(f"{where}: vmtune added it, and it was changed by hand: what the hand wrote is kept")


def _put_back(parent, key: tuple, index: int, node, where: str, notes: list[str]) -> None:
    """A node vmtune removed, back where it was (a device address libvirt assigned since is
    libvirt's, and gives way; another node the hand put there stays)."""
    there = dict(_keyed(parent)).get(key)
    if there is not None and xmltext.is_element(node) and _local(node.tag) in ASSIGNED:
        there.addprevious(node)
        parent.remove(there)
        return
    if there is not None:
        if _canon(there) != _canon(node):
            notes.append(f"{where}: vmtune removed it, and another was put there by hand: kept")
        return
    nodes = _nodes(parent)
    if index < len(nodes):
        nodes[index].addprevious(node)
    elif nodes:
        nodes[-1].addnext(node)
    else:
        parent.append(node)


def _value(root, op, notes: list[str], prefix: list | None = None) -> None:
    node = _find(root, op[1])
    if op[0] == "a":
        _, path, name, before, after, pos = op
        where = _where(path, name, prefix)
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
    where = _where(path, None, prefix)
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
    path, made, shallow, parts = op[1], op[2], op[3], op[4]
    node = _find(root, path)
    where = _where(path, None, prefix)
    if node is None:
        notes.append(f"{where}: vmtune added it, and it was removed by hand")
        return
    if digest(node) == made:
        node.getparent().remove(node)
        return
    left = list(parts)
    for child in _nodes(node):
        d = digest(child)
        if d in left:
            left.remove(d)
            node.remove(child)
    if not _nodes(node) and _shallow(node) == shallow:
        node.getparent().remove(node)
        return
    notes.append(f"{where}: vmtune added it, and it was changed by hand: what the hand wrote is kept")


def _undelete(root, op, notes: list[str], prefix: list | None = None) -> None:
    _, path, index, key, xml = op
    parent = _find(root, path)
    where = _where([*path, key], None, prefix)
    if parent is None:
        notes.append(f"{where}: vmtune removed it, and its parent is gone by hand")
        return
    _put_back(parent, tuple(key), index, _parse_unit(xml), where, notes)


def _other(xml: str):
    """A comment or PI from its text."""
    holder = etree.fromstring(f"<x>{xml}</x>")
    node = holder[0]
    holder.remove(node)
    return node


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
        for old in [c for c in tag if _local(c.tag) == "undo"]:
            tag.remove(old)
        return
    if record.get("tag"):
        tag.addprevious(xmlsafe.parse(record["tag"], "the vmtune record's tag"))
    metadata.remove(tag)
    if not record.get("metadata", True) and not _nodes(metadata):
        metadata.getparent().remove(metadata)  # vmtune made it for its tag


def strip(root: etree._Element) -> None:
    """``root`` without its record (the tag stays): what claims and the hook read is the same."""
    tag = root.find(f"metadata/{TAG}")
    for old in [c for c in tag if _local(c.tag) == "undo"] if tag is not None else []:
        tag.remove(old)


# -- what a rewrite of a tuned domain changes ---------------------------------------------------------
def _bare(el) -> str:
    """An element as one line without vmtune's record (what a change shows)."""
    from .edits import show

    copy = etree.fromstring(show(el))
    for rec in [c for c in copy.iter() if _local(c.tag) == "undo" and c.getparent() is not None
                and c.getparent().tag == TAG]:
        rec.getparent().remove(rec)
    return etree.tostring(copy, encoding="unicode")


def _value_at(root, path: str, element: bool) -> str | None:
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


def against(given, output, changes: list) -> list:
    """The changes from ``given`` (a domain vmtune tuned before, as given) to ``output``: the
    passes' own, less those the input had already, with the input's value as ``before``; and what
    taking the old tuning back changed that no pass set again."""
    from dataclasses import replace

    from .edits import Change

    out, covered = [], [c.element for c in changes]
    for c in changes:
        element = (c.after or c.before or "").startswith("<")
        now, final = _value_at(given, c.element, element), _value_at(output, c.element, element)
        if now != final:
            out.append(replace(c, before=now, after=final))
    old = next((t.get("profile") for t in given.iterfind(f"metadata/{TAG}")), None)
    why = f"back as it was before vmtune's {old or 'earlier'} tuning (its record)"
    for op in full(given, output):
        if op[0] == "o":
            continue
        tree = given if op[0] == "-" else output
        node = _find(tree, op[1])
        if node is None:
            continue
        path = tree.getroottree().getpath(node)
        if op[0] == "a":
            path += f"/@{op[2]}"
            before, after = op[3], op[4]
        elif op[0] == "t":
            before, after = op[2].strip() or None, op[3].strip() or None
        elif op[0] == "-":
            child = dict(_keyed(node)).get(tuple(op[3]))
            if child is None or not xmltext.is_element(child):
                continue
            path, before, after = tree.getroottree().getpath(child), _bare(child), None
        else:
            path, before, after = path, None, _bare(node)
        if any(path == p or path.startswith(p + "/") for p in covered):
            continue
        out.append(Change(path, before, after, why))
    return out


def keep_assigned(given, output) -> None:
    """A disk that vmtune moved before, and that libvirt gave an address of its own since (on its
    new bus), keeps that address when it is tuned again: libvirt's, not vmtune's to drop."""
    mine = given.find("devices")
    theirs = output.find("devices")
    if mine is None or theirs is None:
        return
    before = dict(_keyed(mine))
    for key, disk in _keyed(theirs):
        if _local(disk.tag) != "disk" or disk.find("address") is not None:
            continue
        old = before.get(key)
        if old is None or old.find("address") is None:
            continue
        bus = (old.find("target").get("bus") if old.find("target") is not None else None)
        if bus and bus == (disk.find("target").get("bus") if disk.find("target") is not None else None):
            from .edits import clone, insert

            insert(disk, clone(old.find("address")))

