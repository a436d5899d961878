"""Edits: what a pass wants changed, and the one driver that applies them.

A pass never touches the tree. It returns edits anchored on elements of the tree it was shown:

    Set(anchor, "driver/@cache", "none", reason)    set (or, with None, remove) an attribute or text
    Put(parent, element, reason)                    put a whole child in place of the same-tag one
    Remove(element, reason)                         remove an element
    Warn(message)                                   no change, a warning for the user

A pass gets a Set from the field's declaration (vmtune/xml/model.py): ``Disk.cache.edit(disk, "none",
reason)``. New elements are inserted in libvirt's canonical order, so output is deterministic.
"""

from __future__ import annotations

import functools
import re
from copy import deepcopy
from dataclasses import dataclass
from collections.abc import Callable
from typing import Union

from lxml import etree

from . import xmltext
from .elements import ORDER  # libvirt's order of children (declared with each element); unknown tags keep their place


# The edits and the changes are frozen dataclasses made by the dozen a rewrite (a hundred and more
# for a domain of many devices): each fills its fields in one step, where a frozen dataclass's own
# __init__ sets them one by one through object.__setattr__ (twice the time). Equality, hashing,
# ``dataclasses.replace`` and the rest are the dataclass's.
@dataclass(frozen=True, init=False)
class Set:
    anchor: etree._Element
    path: str  # "a/b/@attr", "@attr" or "a/b" (text)
    value: str | None
    reason: str

    def __init__(self, anchor: etree._Element, path: str, value: str | None, reason: str):
        self.__dict__.update(anchor=anchor, path=path, value=value, reason=reason)


@dataclass(frozen=True, init=False)
class Put:
    parent: etree._Element
    element: etree._Element
    reason: str

    def __init__(self, parent: etree._Element, element: etree._Element, reason: str):
        self.__dict__.update(parent=parent, element=element, reason=reason)


@dataclass(frozen=True, init=False)
class Remove:
    element: etree._Element
    reason: str

    def __init__(self, element: etree._Element, reason: str):
        self.__dict__.update(element=element, reason=reason)


@dataclass(frozen=True)
class Warn:
    message: str


Edit = Union[Set, Put, Remove, Warn]


@dataclass(frozen=True, init=False)
class Change:
    """One change made to the domain: where, what was there, what is there now, and why."""

    element: str  # XPath of the element (and /@attr) touched
    before: str | None
    after: str | None
    reason: str

    def __init__(self, element: str, before: str | None, after: str | None, reason: str):
        self.__dict__.update(element=element, before=before, after=after, reason=reason)

    def to_dict(self) -> dict:
        return {"element": self.element, "before": self.before, "after": self.after, "reason": self.reason}


def E(tag: str, attrs: dict[str, object] | None = None, *children: etree._Element, text: str | None = None,
      into: etree._Element | None = None) -> etree._Element:
    """Build a detached element; attribute values are stringified, None values dropped. ``into``: an
    element of the document it will go into (the domain's): made in that document, where a new element
    would make a document of its own, and lxml would move it into the domain's when it is put there."""
    el = etree.Element(tag) if into is None else into.makeelement(tag)
    if attrs:
        set_ = el.set  # one by one, in order: lxml takes a dict of attributes at a third more than this
        for k, v in attrs.items():
            if v is not None:
                set_(k, str(v))
    for child in children:
        el.append(child)
    if text is not None:
        el.text = text
    return el


def clone(el: etree._Element) -> etree._Element:
    """A detached deep copy of ``el`` without its tail: an element, a comment or a processing
    instruction (libvirt keeps comments and PIs wherever they are, and so does vmtune)."""
    out = deepcopy(el)
    out.tail = None
    return out


def show(el: etree._Element | None, leave_out: Callable[[etree._Element], bool] | None = None) -> str | None:
    """A node as one line of XML, its layout dropped (a comment or a PI as it is): what a change
    shows and the record keeps. ``leave_out``: a test of the elements below it to leave out
    (vmtune's own tag, its record)."""
    if el is None:
        return None
    if not isinstance(el.tag, str):
        return etree.tostring(el, encoding="unicode", with_tail=False)
    text = _one_line(el)
    if leave_out is None:
        return text
    copy = etree.fromstring(text)
    for node in [n for n in copy.iter(etree.Element) if n is not copy and leave_out(n)]:
        node.getparent().remove(node)
    return etree.tostring(copy, encoding="unicode")


def _one_line(el: etree._Element) -> str:
    for e in el.iter():
        text, tail = e.text, (e.tail if e is not el else None)
        if (text is not None and not text.strip()) or (tail is not None and not tail.strip()):
            break
    else:  # no layout to drop (an element vmtune built): written as it is, without a copy
        return etree.tostring(el, encoding="unicode", with_tail=False)
    copy = clone(el)
    for e in copy.iter():
        if e.text is not None and not e.text.strip():
            e.text = None
        if e.tail is not None and not e.tail.strip():
            e.tail = None  # layout only; the text after a comment inside a value stays
    return etree.tostring(copy, encoding="unicode")


_RANKS: dict[str, dict[str, int]] = {parent: {name: i for i, name in enumerate(order)} for parent, order in ORDER.items()}


def insert(parent: etree._Element, child: etree._Element) -> None:
    """Insert ``child`` into ``parent`` at its canonical place among the existing children: before
    the first ordered child where that one ranks above it (a document out of order keeps its
    order), else after the last ordered child that ranks at most as it does."""
    tag = parent.tag  # a plain tag is its own local name: taken apart only where namespaced
    ranks = _RANKS.get(tag)
    if ranks is None and tag[:1] == "{":
        ranks = _RANKS.get(xmltext.local_name(tag))
    rank = None if ranks is None else _rank(ranks, child.tag)
    if rank is None:
        parent.append(child)
        return
    get = ranks.get
    first = None
    for existing in parent:
        first = get(existing.tag)  # ``_rank``, written out (as below)
        if first is None and isinstance(existing.tag, str) and existing.tag[:1] == "{":
            first = get(xmltext.local_name(existing.tag))
        if first is not None:
            break
    if first is None:  # no ordered child
        parent.append(child)
        return
    if first > rank:
        existing.addprevious(child)
        return
    for existing in parent.iterchildren(reversed=True):  # from the end: the usual case (pins added one by one) stops at once
        tag = existing.tag
        other = get(tag)  # ``_rank``, written out: a call less a child
        if other is None:
            if not isinstance(tag, str) or tag[:1] != "{" or (other := get(xmltext.local_name(tag))) is None:
                continue
        if other <= rank:
            existing.addnext(child)
            return


def insert_all(parent: etree._Element, children) -> None:
    """``insert`` each of ``children``, all of one tag, in turn, without a scan of the parent for
    each: from the second on, ``insert`` puts a child right after the last child of its rank or
    below, which the one before it then is (the first may stand before a child of its rank that
    came out of order, and the second then goes after that one), so the third and later go right
    after the one before."""
    before = None
    for i, child in enumerate(children):
        if i < 2:
            insert(parent, child)
        else:
            before.addnext(child)
        before = child


def _rank(ranks: dict[str, int], tag) -> int | None:
    """``ranks`` of a child's tag by its local name: a plain tag is its own (a comment's or a PI's
    tag is no name, and ranks nothing), and only a namespaced one is taken apart."""
    rank = ranks.get(tag)
    if rank is None and isinstance(tag, str) and tag[:1] == "{":
        return ranks.get(xmltext.local_name(tag))
    return rank


_STEP = re.compile(r"^([\w.-]+)(?:\[@([\w.-]+)='([^']*)'\])?$")


def _walk(anchor: etree._Element, steps: tuple[tuple[str, bool], ...], create: bool, watch=None) -> etree._Element | None:
    """Follow the ``_walked`` steps of ``a/b[@name='x']/c`` below ``anchor``, creating missing steps
    when ``create``."""
    node = anchor
    for step, plain in steps:
        nxt = next(node.iterchildren(step), None) if plain else xmltext.find(node, step)
        if nxt is None:
            if not create:
                return None
            tag, attr, value = _made(step)
            nxt = node.makeelement(tag)  # in its document: a detached element would make one of its own
            if attr:
                nxt.set(attr, value)
            if watch is not None:
                watch.touch(node, True)
            insert(node, nxt)
        node = nxt
    return node


@functools.lru_cache(maxsize=512)
def _made(step: str) -> tuple[str, str | None, str | None]:
    """(tag, attribute, value) of a step ``_walk`` creates (``b[@name='x']``), remembered: the
    passes create a few dozen kinds."""
    match = _STEP.match(step)
    if match is None:
        raise ValueError(f"cannot create path step {step!r}")
    return match.groups()


@functools.lru_cache(maxsize=512)
def _steps(elem_path: str) -> tuple[str, ...]:
    """The steps of an element path (``a/./b`` -> a, b), remembered: the passes use a few dozen."""
    return tuple(s for s in elem_path.split("/") if s and s != ".")


_PLAIN = re.compile(r"[\w.-]+")


@functools.lru_cache(maxsize=512)
def _walked(elem_path: str) -> tuple[tuple[str, bool], ...]:
    """``_steps``, each with whether it is a plain tag (``xmltext.find`` of it is its first child of
    that tag, taken here without the path's second reading)."""
    return tuple((step, _PLAIN.fullmatch(step) is not None) for step in _steps(elem_path))


@functools.lru_cache(maxsize=512)
def split_path(path: str) -> tuple[str, str | None]:
    """A Set's path as (element path, attribute): ``"a/b/@x"`` -> ``("a/b", "x")``, ``"@x"`` ->
    ``("", "x")``, ``"a/b"`` (the text of b) -> ``("a/b", None)``."""
    elem, _, attr = path.rpartition("@") if "@" in path else (path, "", "")
    return elem.rstrip("/"), attr or None


@functools.lru_cache(maxsize=512)
def _target(path: str) -> tuple[tuple[tuple[str, bool], ...], str | None]:
    """A Set's path as (``_walked`` steps of its element path, attribute), remembered: what
    ``applied`` reads of every Set, in one call."""
    elem_path, attr = split_path(path)
    return _walked(elem_path), attr


def _path(el: etree._Element) -> str:
    return el.getroottree().getpath(el)


def apply(edit: Edit, watch=None) -> Change | None:
    """Apply one edit; return the Change it made, or None when it changed nothing."""
    done = applied(edit, watch)
    return done.change if done is not None else None


class Applied:
    """A change made, and the element it touched (None: an element it removed), for ``settle``. The
    XPath of a touched element is taken once, when the change is asked for (``settle``), or before
    the element leaves the tree (``applied`` of a later Remove or Put: ``_leaving``)."""

    __slots__ = ("node", "attr", "before", "after", "reason", "element")

    def __init__(self, node: etree._Element | None, attr: str | None, before: str | None, after: str | None,
                 reason: str, element: str | None = None):
        self.node, self.attr, self.before, self.after, self.reason = node, attr, before, after, reason
        self.element = element  # None: not taken yet (``node`` is in the tree)

    def where(self) -> str:
        """The XPath of the element (and /@attr) as the tree stands now."""
        return _path(self.node) + (f"/@{self.attr}" if self.attr else "")

    @property
    def change(self) -> Change:
        if self.element is None:
            self.element = self.where()
        return Change(self.element, self.before, self.after, self.reason)


def _leaving(gone: etree._Element, done: list[Applied] | None) -> None:
    """Before ``gone`` leaves the tree: the paths of the changes made in it, as they stand."""
    inside = set(gone.iter())  # the nodes of ``gone``'s subtree (a unit: a few)
    for d in done or ():
        if d.node in inside and d.element is None:  # (most changes are elsewhere: the set first)
            d.element = d.where()


def settle(done: list[Applied], root: etree._Element) -> list[Change]:
    """The changes, each naming its element by its XPath in ``root`` as the edits left it: a path
    taken when an edit was applied would go stale when a later edit adds a sibling of its tag (the one
    ``timer`` is then ``timer[1]``, and ``timer`` names both) or removes one before it. An element
    no longer in ``root`` (removed, or replaced whole) keeps the path it had last there."""
    getpath = root.getroottree().getpath  # one tree for every path (a node's own getroottree is made anew each ask)
    paths: dict = {}  # a node's path, taken once: several changes touch one node (a disk's driver, its target)
    for d in done:
        # a node that left the tree had its path taken as it left (``_leaving``); asked now, lxml would
        # name it from the top of what left, which stays in root's document (its getroot() is root).
        # ``Applied.where``, written out: a call less a change, a few dozen a rewrite
        node = d.node
        if node is not None and d.element is None:
            path = paths.get(node)
            if path is None:
                path = paths[node] = getpath(node)
            d.element = path + "/@" + d.attr if d.attr else path
    return [Change(d.element, d.before, d.after, d.reason) for d in done]  # each element named above


def applied(edit: Edit, watch=None, done: list[Applied] | None = None) -> Applied | None:
    """``apply``, with the element the Change is about (``settle``). ``watch`` (a markup.Source)
    is told of each node before it changes (``touch``), so that the domain's text keeps every byte
    of what did not. ``done``: the changes applied before, whose paths are taken before an element
    they are in leaves the tree."""
    if isinstance(edit, Set):
        steps, attr = _target(edit.path)
        if steps:
            node = _walk(edit.anchor, steps, edit.value is not None, watch)
            if node is None:
                return None
        else:  # the anchor's own attribute or text: no walk
            node = edit.anchor
        if attr:
            before = node.get(attr)
            if before == edit.value:
                return None
            if watch is not None:
                watch.touch(node)
            if edit.value is None:
                del node.attrib[attr]
            else:
                node.set(attr, edit.value)
            return Applied(node, attr, before, edit.value, edit.reason)
        before = xmltext.text(node).strip() or None
        if before == edit.value:
            return None
        if watch is not None:
            watch.touch(node)
        xmltext.set_text(node, edit.value)  # the whole value: text after a comment too
        return Applied(node, None, before, edit.value, edit.reason)
    if isinstance(edit, Put):
        old = xmltext.find(edit.parent, edit.element.tag)
        before = show(old)
        after = show(edit.element)
        if before == after:
            return None
        if watch is not None:
            watch.touch(edit.parent, True)
        if old is not None:
            _leaving(old, done)
            old.addprevious(edit.element)
            edit.parent.remove(old)
        else:
            insert(edit.parent, edit.element)
        return Applied(edit.element, None, before, after, edit.reason)
    if isinstance(edit, Remove):
        parent = edit.element.getparent()
        if parent is None:
            return None
        where, before = _path(edit.element), show(edit.element)
        _leaving(edit.element, done)
        if watch is not None:
            watch.touch(parent, True)
        parent.remove(edit.element)
        return Applied(None, None, before, None, edit.reason, where)
    return None
