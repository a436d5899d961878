"""Where each node of a domain stands in the text it was parsed from (what vmtune/xml/textkeep.py
writes the changed domain back into).

``scan(text)`` reads the markup: each element's start tag, end tag and children, each comment and
PI, as character spans. lxml's parser (vmtune/xml/xmlsafe.py) drops only blank text, never a node, so
an element's children in the tree and in the markup line up one to one. The text must be
well-formed (it was parsed first); an entity is never expanded here.

Reading the text through costs a Python step per tag; where nodes can be found by the line lxml
read them on (vmtune/xml/locate.py: one node a line, as ``virsh dumpxml`` and virt-manager write), only
the children of what changed are looked for, and only those the writer asks about.

A ``Source`` is a domain's text and its tree, and what became of the tree's nodes: the rewrite's
edits ``touch`` each node before they change it (what it was is kept, and it and its ancestors are
``dirty``); ``untune`` ``freeze``s the elements that hold what may change and copies each node that
may change (vmtune/record/undo.py says which). Every other node is as it was parsed, and the writer copies
its text.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import NamedTuple

from lxml import etree

from . import locate

# an end tag (1), a comment, PI, CDATA section or DOCTYPE (2), else a start tag
_TOKEN = re.compile(r"""<(?:(/)[^>]*|(!--.*?--|\?.*?\?|!\[CDATA\[.*?\]\]|!DOCTYPE[^>]*)"""
                    r"""|[^>"']*(?:(?:"[^"]*"|'[^']*')[^>"']*)*)>""", re.S)


_NAME = re.compile(r"<([^\s/>]+)")
_AFTER_NAME = (" ", "\t", "\r", "\n", "/", ">")  # what ends an element's name in its start tag


class Changed(NamedTuple):
    """A unit the record found changed (vmtune/record/unitdiff.py): lxml's text of it as it was and
    as it is, and the node it was (which the writer may pair it with)."""

    was: str
    now: str
    node: etree._Element


class Mismatch(Exception):
    """The markup does not line up with the tree there."""


class Unplaced(Exception):
    """Nodes could not be found by their lines (vmtune/xml/locate.py): read the text through."""


LAZY = object()  # an element's children not found yet (``Source.kids_of``)


class Tok:
    """A node of the markup: ``start``..``end``; an element's start tag ends at ``head``, its end
    tag starts at ``close`` (None: an empty-element tag); ``kids`` (None: a comment or a PI)."""

    __slots__ = ("start", "head", "close", "end", "kids")

    def __init__(self, start, head, close, end, kids):
        self.start, self.head, self.close, self.end, self.kids = start, head, close, end, kids


class Kids(list):
    """An element's children's markup, read through (``scan``); ``start(i)`` and ``end(i)`` as
    ``_Found`` gives them."""

    __slots__ = ("tok",)

    def start(self, i: int) -> int:
        return self[i].start if i < len(self) else self.tok.close

    def end(self, i: int) -> int:
        return self[i].end if i >= 0 else self.tok.head


def scan(text: str) -> Tok:
    """The root element's markup, its descendants in ``kids``."""
    top = Tok(0, 0, None, None, [])
    stack = [top]
    for m in _TOKEN.finditer(text):
        close, other = m.groups()
        if close:
            tok = stack.pop()
            tok.close, tok.end = m.start(), m.end()
        elif other:
            if other[0] == "?" or other[1] == "-":  # a PI or a comment (CDATA is text)
                stack[-1].kids.append(Tok(m.start(), m.end(), None, m.end(), None))
        else:
            tok = Tok(m.start(), m.end(), None, None, Kids())
            tok.kids.tok = tok
            stack[-1].kids.append(tok)
            if text[m.end() - 2] == "/":  # an empty-element tag
                tok.end = m.end()
            else:
                stack.append(tok)
    roots = [t for t in top.kids if t.kids is not None]
    if len(stack) != 1 or len(roots) != 1 or roots[0].end is None:
        raise Mismatch("the markup does not close")
    return roots[0]


class _Found:
    """An element's children's markup, each found by its line when asked (vmtune/xml/locate.py)."""

    def __init__(self, placed):
        self.placed, self.toks = placed, {}
        self.start, self.end = placed.start, placed.end  # where child i starts and ends

    def __len__(self) -> int:
        return len(self.placed)

    def __getitem__(self, i: int) -> Tok:
        if i < 0:
            i += len(self.placed)
        tok = self.toks.get(i)
        if tok is None:
            start, head, close, end, element = self.placed[i]
            tok = self.toks[i] = Tok(start, head, close, end, (LAZY if close is not None else []) if element else None)
        return tok


def text_of(xml: str | bytes) -> str | None:
    """``xml`` as text (None: bytes that are not UTF-8, written whole then)."""
    if isinstance(xml, str):
        return xml
    try:
        return xml.decode("utf-8")
    except UnicodeDecodeError:
        return None


class Source:
    """A domain's ``text`` and the ``tree`` parsed from it, and what became of the tree's nodes.

    Two ways to know what changed. A rewrite's edits ``touch`` each node before they change it
    (vmtune/xml/edits.py): what it was is kept, and it and its ancestors are ``dirty``; every other
    node is as parsed. ``untune`` (vmtune/record/undo.py's ``hold``) instead ``freeze``s the elements that
    hold what may change and copies each node that may change, to compare with what it became.
    A tree parsed apart from the one that changes (nothing touched or frozen) is compared whole."""

    def __init__(self, text: str, tree: etree._Element):
        self.text, self.tree = text, tree
        self.kids: dict = {}  # node -> its children as given (where they changed, and a holder's)
        self.texts: dict = {}  # node -> its text as given (where it or its attributes changed)
        self.copies: dict = {}  # node -> a copy of it as given
        self.dirty: set = {None}  # nodes changed, or with a change below them (holders too); None: the top
        self.watched: dict = {}  # node -> its text (lxml's) before anything below it changed
        self.canon: dict = {}  # a unit changed -> Changed
        self.wrote: dict = {}  # a unit added -> lxml's text of it (the record's: the writer takes it)
        self._root: Tok | None = None
        self._lines: list[int] = []
        self._kids: dict = {}  # node -> its children, which did not change
        self._within: dict = {}  # a node's path -> its children's markup (``given``: its units, one by one)

    def watch(self, nodes: Iterable) -> None:
        """Keep lxml's text of each of ``nodes`` from before the first change in it."""
        self.watched.update(dict.fromkeys(nodes))

    def touch(self, node, kids: bool = False) -> None:
        """Before ``node`` changes (its attributes, text, or with ``kids`` its children): what it
        was, and that it and its ancestors change. A node made since (no line: not parsed) is
        written whole, and its parent was told when it was put in."""
        if node.sourceline is None:
            return
        if kids:
            if node not in self.kids:
                self.kids[node] = list(node)
        elif node not in self.texts:
            self.texts[node] = node.text
        dirty, watched = self.dirty, self.watched
        while node not in dirty:  # the root's parent (None) is dirty from the start
            dirty.add(node)
            if node in watched:
                watched[node] = etree.tostring(node, encoding="unicode", with_tail=False)
            node = node.getparent()

    def freeze(self, holders: Iterable, nodes: Iterable) -> None:
        """Before the tree changes: the ``holders``' children (they are descended), a copy of each
        of ``nodes`` (compared)."""
        for holder in holders:
            self.touch(holder, kids=True)
        for node in nodes:
            self.copies[node] = copy.deepcopy(node)

    def markup(self) -> Tok:
        """The root's markup: found by its line (its children when asked, ``kids_of``), else
        read through (``scan``)."""
        if self._root is None:
            self._lines = locate.lines(self.text)
            found = locate.root(self.text, self._lines, self.tree)
            self._root = scan(self.text) if found is None else Tok(*found, LAZY)
        return self._root

    def rescan(self) -> None:
        """Read the text through: the nodes could not all be found by their lines."""
        self._root = scan(self.text)
        self._within.clear()

    def kids_of(self, tok: Tok, olds: list) -> list:
        """The markup of an element's children ``olds`` (as given) in ``tok``; Unplaced where
        they cannot be found by their lines."""
        if tok.kids is LAZY:
            tok.kids = _Found(locate.Placed(self.text, self._lines, tok.head, tok.close, olds, Unplaced))
        return tok.kids

    def given_kids(self, node) -> list:
        """``node``'s children as given (before the tree changed)."""
        kids = self.kids.get(node)
        if kids is None:
            kids = self._kids.get(node)
            if kids is None:
                kids = self._kids[node] = list(node)  # not changed: as they are
        return kids

    def _kids_at(self, path: tuple):
        """The markup of the children (as given) of the node at ``path`` (child indexes from the root)."""
        tok, node = self.markup(), self.tree
        for index in path:
            olds = self.given_kids(node)
            tok, node = self.kids_of(tok, olds)[index], olds[index]
        return tok.kids if tok.kids is not LAZY else self.kids_of(tok, self.given_kids(node))

    def given(self, path: tuple, tag: str, gap: bool = False) -> str | None:
        """The text of the node at ``path`` (child indexes from the root) as given, where it is an
        element ``tag`` (``gap``: with the whitespace before it); None where the markup does not
        line up."""
        up, last = path[:-1], path[-1]
        for _ in range(2):
            try:
                kids = self._within.get(up)
                if kids is None:
                    kids = self._within[up] = self._kids_at(up)
                start = kids.start(last)
                before = self.text[kids.end(last - 1):start] if gap else ""
                given = self.text[start:kids.end(last)]
                break
            except Unplaced:
                self.rescan()
            except (Mismatch, IndexError, TypeError):
                return None
        else:
            return None
        local = tag.rpartition("}")[2]
        if not (given.startswith(local, 1) and given.startswith(_AFTER_NAME, len(local) + 1)):  # (without a prefix)
            m = _NAME.match(given)
            if m is None or m.group(1).rpartition(":")[2] != local:
                return None
        return (before if before.isspace() else "") + given
