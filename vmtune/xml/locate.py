"""Where nodes stand in a domain's text, found by the line lxml read each on (``sourceline``), so
that the text is not read through: the writer (vmtune/xml/textkeep.py) only needs where the nodes it
changes and their neighbours stand.

A node is found at the first ``<`` of its line when its start tag is there: so ``virsh dumpxml``
and virt-manager lay every node out. Each is checked: its name, its place after the one before
it (which starts, with all below it, on a line above), nothing but whitespace between siblings, the end tag's name. Where anything does not hold (a
document on one line, two nodes on a line, a start tag over several lines) the answer is None, and
markup.scan reads the text through instead.
"""

from __future__ import annotations

import re
from itertools import accumulate

from lxml import etree

_START = re.compile(r"""<([^\s/>!?]+)(?:\s+[^\s=/>]+\s*=\s*(?:"[^"]*"|'[^']*'))*\s*/?>""")


def lines(text: str) -> list[int]:
    """How many characters but line ends come before each line (line N, as libxml2 counts them,
    at index N - 1): it starts at ``lines[N - 1] + N - 1`` (a sum the caller makes, not one a line)."""
    return list(accumulate(map(len, text.split("\n")), initial=0))


def _blank(text: str, lo: int, hi: int) -> bool:
    return lo == hi or text[lo:hi].isspace()


def raw_name(node) -> str:
    """An element's name as written (with its prefix)."""
    tag = node.tag
    local = tag.rpartition("}")[2] if tag[:1] == "{" else tag  # (QName's localname, without making one)
    prefix = node.prefix
    return f"{prefix}:{local}" if prefix else local


def root(text: str, starts: list[int], tree) -> tuple | None:
    """(start, head, close, end) of the root element, or None."""
    line = tree.sourceline
    if not line or line >= len(starts):
        return None
    start = text.find("<", starts[line - 1] + line - 1, starts[line] + line)
    name = raw_name(tree)
    m = _START.match(text, start) if start >= 0 else None
    if m is None or m.group(1) != name or text[m.end() - 2] == "/":
        return None
    end = len(text)
    while end and text[end - 1].isspace():  # (len(text.rstrip()), without a copy of the text)
        end -= 1
    close = text.rfind("<", m.end(), end)
    if close < 0 or text[close:end] != f"</{name}>":
        return None
    return start, m.end(), close, end


class Placed:
    """The markup of an element's children ``olds`` (as given, between the end of its start tag
    ``head`` and its end tag ``close``), each found by its line when asked (``[i]``: a tuple
    (start, head, close, end, element); close None for an empty element tag, element False for a
    comment or PI). Unplaced where one cannot be told this way."""

    def __init__(self, text: str, starts: list[int], head: int, close: int, olds: list, unplaced: type):
        self.text, self.lines, self.head, self.close, self.olds = text, starts, head, close, olds
        self._starts: dict[int, int] = {len(olds): close}
        self._ends: dict[int, int] = {-1: head}
        self.unplaced = unplaced

    def __len__(self) -> int:
        return len(self.olds)

    def start(self, i: int) -> int:
        """Where child ``i`` starts (``close`` past the last)."""
        found = self._starts.get(i)
        if found is None:
            node, text, lines = self.olds[i], self.text, self.lines
            line = node.sourceline
            if not line or line >= len(lines):
                raise self.unplaced(i)
            lo = lines[line - 1] + line - 1
            found = text.find("<", lo if lo > self.head else self.head, lines[line] + line)
            if found < 0 or i and _last_line(self.olds[i - 1]) == line:
                raise self.unplaced(i)  # (a node before it on its line: the first '<' there is not its)
            tag = node.tag
            if isinstance(tag, str):  # its name, then what ends a name in a start tag
                name = raw_name(node) if tag[:1] == "{" else tag
                ok = text.startswith(name, found + 1) and text.startswith(_AFTER_NAME, found + 1 + len(name))
            else:
                ok = text.startswith(_other(node), found)
            if not ok:
                raise self.unplaced(i)
            self._starts[i] = found
        return found

    def end(self, i: int) -> int:
        """Where child ``i`` ends (``head`` before the first): the last '>' before the next,
        with nothing but whitespace between."""
        found = self._ends.get(i)
        if found is None:
            starts = self._starts
            nxt = starts.get(i + 1)
            if nxt is None:
                nxt = self.start(i + 1)
            start = starts.get(i)
            text = self.text
            found = text.rfind(">", self.start(i) if start is None else start, nxt) + 1
            if found <= 0 or found != nxt and not text[found:nxt].isspace():  # (_blank)
                raise self.unplaced(i)
            self._ends[i] = found
        return found

    def __getitem__(self, i: int) -> tuple:
        if i < 0:
            i += len(self.olds)
        text, node = self.text, self.olds[i]
        start, end = self.start(i), self.end(i)
        if not _blank(text, self.end(i - 1), start):
            raise self.unplaced(i)
        tag = node.tag
        if not isinstance(tag, str):
            return start, end, None, end, False
        m = _START.match(text, start)
        head = -1 if m is None else m.end()
        if head < 0 or head > end:
            raise self.unplaced(i)
        if head == end and text[end - 2] == "/":
            return start, end, None, end, True
        close = text.rfind("<", head, end)
        name = raw_name(node) if tag[:1] == "{" else tag
        if text[close:end] != f"</{name}>":
            raise self.unplaced(i)
        return start, head, close, end, True


_AFTER_NAME = (" ", "\t", "\r", "\n", "/", ">")  # what follows an element's name in its start tag


def _last_line(node) -> int | None:
    """The line the last node of ``node``'s subtree starts on: lines only grow in document order,
    so a node starts on the line of the one after ``node``'s subtree only where that one does."""
    while len(node):
        node = node[-1]
    return node.sourceline


def _other(node) -> str:
    """A comment's or PI's text as lxml writes it (as it was given)."""
    return etree.tostring(node, encoding="unicode", with_tail=False)
