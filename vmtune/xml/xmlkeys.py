"""Naming the counted of a libvirt domain so that vmtune's own changes never rename them, and
writing them in a form that two formatters agree on (what vmtune's record, vmtune/record/undo.py, keeps).

A node's key is its tag with the attributes that tell it from its siblings (``KEYS``: a
``<vcpupin>``'s vcpu, a ``<cell>``'s id, a controller's type and index, ...), a disk's source, a
NIC's MAC, a comment's text, and an ordinal among siblings of that same key; a path is a list of
keys from ``<domain>``. ``canon`` writes a node with its attributes sorted and whitespace-only text
left out (libvirt may reorder attributes when it formats), and ``digest`` hashes that. A key
libvirt fills in when the domain is defined (``FILLED``: a NIC's MAC, a controller's index) may be
empty in the record and set in the domain: ``filled`` finds that unit all the same. ``parse_node``
reads a unit of the record as safely as the domain itself (no DTD, no entity).
"""

from __future__ import annotations

import hashlib

from lxml import etree

from . import xmlsafe, xmltext
from .elements import KEYS, SPECIAL  # declared with each element
from .model import TAG
from .xmltext import local_name

__all__ = ["ASSIGNED", "FILLED", "KEYS", "canon", "counted", "digest", "filled", "find", "ident_of", "is_leaf", "keyed",
           "other_node", "parse_node", "same", "shallow", "vmtune_tag", "where_of"]


SOURCE_ATTRS = ("file", "dev", "dir", "name", "volume", "pool", "protocol", "type")
_SOURCE_RANK = {name: rank for rank, name in enumerate(SOURCE_ATTRS)}


# what libvirt fills in itself when a domain is defined: not the hand's (a device's address, assigned
# anew when vmtune moves a disk from ide to virtio)
ASSIGNED = ("address",)


# -- keys ------------------------------------------------------------------------------------------
def ident_of(node) -> tuple:
    """What names ``node`` among its siblings, but for an ordinal."""
    tag = node.tag
    if not isinstance(tag, str):
        return ("#comment" if isinstance(node, etree._Comment) else "#pi", node.text or "")
    local = tag if tag[:1] != "{" else local_name(tag)
    if local == "disk":
        for src in node.iterchildren("source"):  # the first
            # the source's attributes that are set, read at once (not asked for one by one), in
            # SOURCE_ATTRS' order (a source has one or two: sorted only where two; a name holds no '=')
            named = [f"{a}={v}" for a, v in src.items() if v and a in _SOURCE_RANK]
            if len(named) > 1:
                named.sort(key=_source_rank)
            return (tag, *named)
        return (tag,)
    if local == "interface":
        mac = next(node.iterchildren("mac"), None)
        return (tag, mac.get("address", "") if mac is not None else "")
    keys = KEYS.get(local)
    return (tag,) if keys is None else (tag, *[node.get(a) or "" for a in keys])


def _source_rank(named: str) -> int:
    return _SOURCE_RANK[named.partition("=")[0]]


def counted(parent) -> list:
    """The children that count: elements, comments and PIs, but vmtune's own tag in <metadata>
    (an entity reference, the one other kind of child, is told by its tag: lxml's ``Entity``)."""
    if parent.tag == "metadata":
        return [c for c in parent if c.tag is not _ENTITY and c.tag != TAG]
    return list(parent.iterchildren(*_COUNTED))  # told apart in C


_ENTITY = etree.Entity  # the tag of every entity reference node
_COUNTED = (etree.Element, etree.Comment, etree.ProcessingInstruction)  # the other kinds (iterchildren's names)


def keyed(parent) -> list[tuple[tuple, object]]:
    """(key, node) for each child that counts, the key its ident and ordinal."""
    seen: dict[tuple, int] = {}
    out = []
    for node in counted(parent):
        tag = node.tag
        ident = (tag,) if isinstance(tag, str) and tag not in SPECIAL and tag[:1] != "{" else ident_of(node)
        n = seen.get(ident, 0)
        seen[ident] = n + 1
        out.append(((*ident, n), node))
    return out


def is_leaf(node) -> bool:
    """No element children: its text is a value."""
    return next(node.iterchildren(tag=etree.Element), None) is None


def canon(node) -> str:
    """``node`` as one string: attributes sorted, whitespace-only text dropped, vmtune's tag left
    out (what a digest and a comparison see: libvirt may reorder attributes when it formats)."""
    tag = node.tag
    if not isinstance(tag, str):
        return f"<!{'c' if isinstance(node, etree._Comment) else 'p'}{node.text or ''}>"
    attrs = " ".join(f"{k}={v!r}" for k, v in sorted(node.attrib.items()))
    kids = counted(node)
    if not any(isinstance(k.tag, str) for k in kids):
        return f"<{tag} {attrs}>{xmltext.text(node).strip()!r}{''.join(canon(k) for k in kids)}</>"
    return f"<{tag} {attrs}>{''.join(canon(k) for k in kids)}</>"


def digest(node) -> str:
    return hashlib.sha256(canon(node).encode()).hexdigest()[:16]


def shallow(node) -> str:
    """A digest of ``node`` without its children: its tag, attributes and text."""
    if not xmltext.is_element(node):
        return digest(node)
    attrs = " ".join(f"{k}={v!r}" for k, v in sorted(node.attrib.items()))
    text = xmltext.text(node).strip() if is_leaf(node) else ""
    return hashlib.sha256(f"<{node.tag} {attrs}>{text!r}".encode()).hexdigest()[:16]


def vmtune_tag(node) -> bool:
    """vmtune's own tag in ``<metadata>``: left out of what the record keeps (``edits.show``)."""
    parent = node.getparent()
    return node.tag == TAG and parent is not None and local_name(parent.tag) == "metadata"


# -- the record --------------------------------------------------------------------------------------
def same(b, a) -> bool:
    """Whether two subtrees are written alike (then nothing in them differs): one C call each."""
    return etree.tostring(b, with_tail=False) == etree.tostring(a, with_tail=False)


# -- what libvirt fills in ------------------------------------------------------------------------------
# The part of a key that libvirt fills in when a domain is defined, where it was left out: a NIC's
# MAC, a controller's index (their place in ``ident_of``); and what it adds to a device then
FILLED = {"interface": 1, "controller": 2}
FILLED_CHILDREN = ("mac", "address", "alias", "target")


def filled(parent, key: tuple, made: str, claimed: set, used: set):
    """The child of ``parent`` that the unit ``key`` became once libvirt filled in what it left
    out (a NIC without a MAC, a controller without an index; vmtune wrote it as ``made``): one of
    the same kind whose key no unit of the record has (``claimed``) and no other unit took
    (``used``), written as vmtune wrote it but for what libvirt adds, else the same ordinal among
    those. None: no such key, or none left."""
    at = FILLED.get(local_name(key[0]))
    if at is None or len(key) <= at + 1 or key[at] != "":
        return None
    rest = key[:at] + key[at + 1:-1]
    alike = [node for k, node in keyed(parent) if k[0] == key[0] and len(k) == len(key) and k[at] != ""
             and k[:at] + k[at + 1:-1] == rest and k not in claimed and node not in used]
    if not alike:
        return None
    want = _bare(parse_node(made))
    return next((node for node in alike if _bare(node) == want), alike[key[-1]] if key[-1] < len(alike) else None)


def _bare(node) -> str:
    """``canon`` of a device without what libvirt fills in."""
    from copy import deepcopy

    node = deepcopy(node)
    for child in [c for c in node if local_name(c.tag) in FILLED_CHILDREN]:
        node.remove(child)
    if local_name(node.tag) == "controller":
        node.attrib.pop("index", None)
    return canon(node)


# -- taking it back -------------------------------------------------------------------------------------
def find(root, path: list):
    node = root
    for key in path:
        node = dict(keyed(node)).get(tuple(key))
        if node is None:
            return None
    return node


def where_of(path: list, name: str | None = None, prefix: list | None = None) -> str:
    """A path of keys as the XPath a user reads (and can give to ``xmllint --xpath``): each step
    its tag, the key's values as a predicate and, after the first of that key, its 1-based place
    among them (``/domain/devices/disk[source/@file='/b.img'][2]``, ``/domain/clock/timer[@name='hpet']``)."""
    steps = []
    for ident in [*(prefix or []), *path]:
        tests = _tests(ident)
        steps.append(_node_test(ident[0]) + (f"[{' and '.join(tests)}]" if tests else "")
                     + (f"[{ident[-1] + 1}]" if ident[-1] else ""))
    return "/domain/" + "/".join(steps) + (f"/@{name}" if name else "")


def _node_test(tag: str) -> str:
    if tag in ("#comment", "#pi"):
        return "comment()" if tag == "#comment" else "processing-instruction()"
    local = local_name(tag)
    return f"*[local-name()={_quote(local)}]" if tag[:1] == "{" else local


def _tests(ident: tuple) -> list[str]:
    """The key of ``ident`` (but its ordinal) as XPath tests: a value it has, or that it has none
    (a disk without a source, a NIC without a MAC: the ordinal counts among those)."""
    tag, vals = ident[0], ident[1:-1]
    local = local_name(tag)
    if tag == "#comment":
        return [f".={_quote(vals[0])}"]
    if tag == "#pi" or tag[:1] == "{":
        return []
    if local == "disk":
        return [f"source/@{v.partition('=')[0]}={_quote(v.partition('=')[2])}" for v in vals] or [
            "not(" + " or ".join(f"source/@{a}[.!='']" for a in SOURCE_ATTRS) + ")"]
    if local == "interface":
        return [f"mac/@address={_quote(vals[0])}" if vals[0] else "not(mac/@address[.!=''])"]
    return [f"@{a}={_quote(v)}" if v else f"not(@{a}[.!=''])" for a, v in zip(KEYS.get(local, ()), vals)]


def _quote(value: str) -> str:
    """An XPath string literal of ``value`` (XPath 1.0 has no escapes: the other quote, or concat)."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    return "concat(" + ", \"'\", ".join(f"'{part}'" for part in value.split("'")) + ")"


def other_node(xml: str):
    """A comment or PI from its text."""
    holder = xmlsafe.parse(f"<x>{xml}</x>", "a node of the vmtune record")
    node = holder[0]
    holder.remove(node)
    return node


def parse_node(text: str):
    """A node of vmtune's record from its text (as lxml wrote it, or as it was given, maybe with
    the whitespace before it: layout, which the domain's parser drops too), parsed as safely as
    the domain."""
    start = text.lstrip()
    if start.startswith(("<!--", "<?")):
        return other_node(start)
    return xmlsafe.parse(start, "a unit of the vmtune record")
