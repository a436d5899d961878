"""How a domain's text is written, and new text in that style (vmtune/xml/textkeep.py writes the
changed parts of a domain with it): its quotes (``virsh dumpxml`` writes single ones, virt-manager
double ones; an element of another namespace in ``<metadata>`` libvirt writes as libxml2 does, in
double ones), its line ends, its indentation step, and where a line's indentation is.

``serialize`` writes a whole document as lxml does, indented two spaces like libvirt: what the
writer falls back to where the text cannot be read.
"""

from __future__ import annotations

import re

from lxml import etree

from . import pretty, starttag, xmltext
from .markup import Tok

_PREFIXED = re.compile(r"<[^\s/>:!?]+:")  # an element of another namespace (libvirt writes it in double quotes)
_LONG = 512  # a text this long is held apart while its element is laid out (Style.fresh; a record:
# a few KB of JSON, which each step would read through; matching it this far costs a step a character)
_RUN = re.compile(">[^<]{%d}" % _LONG)  # the start of one
_HELD = re.compile("\x01([0-9]+)\x01")  # where one was (no XML text holds a U+0001)


def serialize(root: etree._Element) -> str:
    """The whole document (comments around the root included), indented two spaces like libvirt
    (text values, comments inside them included, stay as they are)."""
    xmltext.indent(root)
    before = list(root.itersiblings(preceding=True))[::-1]
    after = list(root.itersiblings())
    parts = []
    for node in before + [root] + after:
        tail, node.tail = node.tail, None
        parts.append(etree.tostring(node, encoding="unicode"))
        node.tail = tail
    return "\n".join(parts) + "\n"


def blank(s: str | None) -> bool:
    return not s or s.isspace()


def last_line(ws: str) -> str:
    """The line break and indentation that end ``ws`` (all of it when it has no line break)."""
    i = ws.rfind("\n")
    if i < 0:
        return ws
    return ws[i - 1:] if i and ws[i - 1] == "\r" else ws[i:]


def trail(gap: str) -> str:
    """What ends the line before in whitespace ``gap``: all of it up to its last line break."""
    cut = gap.rfind("\n")
    if cut <= 0 or not blank(gap):
        return ""
    return gap[:cut - 1] if gap[cut - 1] == "\r" else gap[:cut]


class Style:
    """The style of ``text``, whose root element is at ``root``."""

    def __init__(self, text: str, root: Tok):
        self.text, self.root = text, root
        at = text.find("=", root.start)  # the quotes of the root's first attribute
        while at >= 0 and text[at + 1:at + 2] in " \t\r\n":
            at += 1
        self.quote = "'" if at >= 0 and text[at + 1:at + 2] == "'" else '"'
        line = text.find("\n", root.start)
        self.newline = "\r\n" if line > 0 and text[line - 1] == "\r" else "\n"
        self._step: str | None = None

    def indent(self, at: int) -> str | None:
        """The whitespace that starts the line of what starts ``at`` (None: something else is
        before it there)."""
        text = self.text
        prefix = text[text.rfind("\n", 0, at) + 1:at]
        return prefix if not prefix or prefix.isspace() else None  # (blank)

    def step(self) -> str:
        """The indentation step: the root's first child's, else two spaces."""
        if self._step is None:
            text, root = self.text, self.root
            first = text[root.head:max(text.find("<", root.head), root.head)]
            base = self.indent(root.start) or ""
            line = last_line(first).lstrip("\r\n")
            self._step = line[len(base):] if "\n" in first and line.startswith(base) and line != base else "  "
        return self._step

    def deeper(self, tok: Tok) -> str:
        """The whitespace before a first child of ``tok``: its indentation and one step more."""
        indent = self.indent(tok.start)
        return "" if indent is None else self.newline + indent + self.step()

    def fresh(self, node, indent: str | None, xml: str | None = None) -> str:
        """Node ``node``, which vmtune wrote, laid out at ``indent`` (None: on one line); ``xml``:
        lxml's text of it, where it is known already. A long text (vmtune's record: JSON of up to
        tens of KB) is held apart while the rest is laid out (``_held``): each step below would read
        it through again, a few times."""
        tag = node.tag
        element = isinstance(tag, str)
        if xml is None:
            xml = etree.tostring(node, encoding="unicode", with_tail=False)
        texts = None
        nested = element and indent is not None and len(node) > 0  # children to lay out
        if element and len(xml) > _LONG and (nested or self.quote == "'"):
            short, texts = _held(xml)  # (on one line in double quotes, nothing reads it through)
            if texts and self.quote == "'" and tag[:1] != "{" and not _PREFIXED.search(short):
                texts = None  # pretty.single would turn the quotes in the texts too: not held
            elif texts:
                xml = short
        if nested:
            laid = pretty.layout(xml, indent, self.step())
            if laid is None:  # a comment or a PI in it, or text beside elements: lxml lays it out
                xmltext.indent(node, self.step(), indent)
                laid = etree.tostring(node, encoding="unicode", with_tail=False)
                texts = None
            xml = laid
        if element and node.nsmap:
            xml = _undeclared(node, xml)
        if self.quote == "'" and '="' in xml and not (element and tag[:1] == "{"):
            xml = (None if _PREFIXED.search(xml) else pretty.single(xml)) or starttag.single(xml)
        if self.newline == "\r\n":
            xml = xml.replace("\n", "\r\n")
        return _put_back(xml, texts, self.newline) if texts else xml

    def laid(self, was: str, now: str, start: int, end: int) -> str | None:
        """A unit whose text was lxml's ``was`` and is ``now``, written whole, laid out as it was
        given from ``start`` to ``end`` (vmtune/xml/pretty.py); None where it was not given so."""
        indent, step = self.indent(start), self._step or self.step()
        given, raw = pretty.layout(was, indent, step), self.text[start:end]
        if self.quote == "'":  # compared in lxml's double quotes: a quote in a value or a text is not
            raw = None if '"' in raw or "&apos;" in raw else raw.replace("'", '"')
        if given is None or given != raw:
            return None
        written = pretty.layout(now, indent, step)
        if written is not None and self.quote == "'":
            written = pretty.single(written)
        if written is None:
            return None
        return written.replace("\n", "\r\n") if self.newline == "\r\n" else written


def _undeclared(node, xml: str) -> str:
    """``xml`` (lxml's text of ``node``) without the namespace declarations its parent has already."""
    parent = node.getparent()
    scope = parent.nsmap if parent is not None else {}
    mine = node.nsmap  # lxml makes it anew at each ask, from the node and its ancestors
    end = xml.index(">")
    head = xml[:end]
    for prefix, uri in scope.items():
        if mine.get(prefix) == uri:
            head = head.replace(f' xmlns:{prefix}="{uri}"' if prefix else f' xmlns="{uri}"', "", 1)
    return head + xml[end:]


def _held(xml: str) -> tuple[str, list[str]]:
    """``xml`` (lxml's text of an element) with each long text in it (``_LONG``, between a tag's
    ``>`` and the next ``<``) swapped for a short mark, and those texts (none where ``xml`` has a
    comment, a PI or CDATA: a ``>`` in one is not a tag's end). Laying out, taking namespace
    declarations away and turning quotes in tags (starttag.single) read no text, and a mark holds
    no ``<``, ``>``, quote or line end: each gives the same with the texts put back."""
    parts: list[str] = []
    texts: list[str] = []
    at, m = 0, _RUN.search(xml)
    while m is not None:
        end = xml.find("<", m.end())
        if end < 0:
            break
        parts += [xml[at:m.start() + 1], f"\x01{len(texts)}\x01"]
        texts.append(xml[m.start() + 1:end])
        at, m = end, _RUN.search(xml, end)
    if not texts:
        return xml, texts
    parts.append(xml[at:])
    short = "".join(parts)
    return (xml, []) if "<!" in short or "<?" in short else (short, texts)


def _put_back(xml: str, texts: list[str], newline: str) -> str:
    """The texts ``_held`` took from ``xml`` put back in their marks, with ``newline`` line ends."""
    if newline == "\r\n":
        texts = [text.replace("\n", "\r\n") for text in texts]
    return _HELD.sub(lambda m: texts[int(m.group(1))], xml)
