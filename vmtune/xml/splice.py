"""Put new elements into a domain's XML text, every other byte left as it came.

Why text and not a tree: libvirt reads the hook's output for ``migrate begin`` and ``restore
begin`` as the new domain XML and checks it against the running guest's ABI. The re-pin
(hook/repin.py) promises an ABI-neutral change -- only the ``cpuset`` of the pins, the numatune
nodesets and the hugepage nodesets differ -- and the way to keep that promise checkable is that
nothing else differs, byte for byte. A round trip through lxml would re-indent the document,
re-quote attributes, turn CDATA and character references into text and drop the XML
declaration: each harmless to libvirt, none of them visible as "only the pins changed" in a diff.

``span`` finds an element by its path of child names from the root (``"cputune"``,
``"memoryBacking/hugepages"``), as lxml's ``root.find(path)`` does: the first such element in no
namespace. It reads the markup itself, so a name in a comment, a CDATA section, a processing
instruction or an attribute value (``'>'`` is allowed there) is never taken for an element, and
neither is an element of the same name in another namespace (``<metadata>``'s children, a default
``xmlns`` included). The text must be well-formed (vmtune parses it first): this module never
expands an entity and refuses a DOCTYPE.
"""

from __future__ import annotations

import copy
import re

from lxml import etree

from . import xmltext
from ..errors import InvalidInput

# A start tag: its name, its attributes (quoted values may hold '>' and '/'), and '/' when empty.
_START = re.compile(r"""<([^\s/>]+)((?:\s+[^\s=/>]+\s*=\s*(?:"[^"]*"|'[^']*'))*)\s*(/?)>""")
_ATTR = re.compile(r"""([^\s=]+)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_SKIP = (("<!--", "-->"), ("<![CDATA[", "]]>"), ("<?", "?>"))


def _tags(text: str):
    """(start, end, name, kind, attributes) of each tag in document order; kind is ``open``,
    ``empty`` or ``close``. Comments, CDATA sections and PIs are stepped over."""
    i = 0
    while (lt := text.find("<", i)) >= 0:
        skip = next(((o, c) for o, c in _SKIP if text.startswith(o, lt)), None)
        if skip:
            i = text.index(skip[1], lt + len(skip[0])) + len(skip[1])
        elif text.startswith("<!", lt):
            raise InvalidInput("the domain XML has a DOCTYPE, which vmtune does not accept")
        elif text.startswith("</", lt):
            i = text.index(">", lt) + 1
            yield lt, i, text[lt + 2:i - 1].strip(), "close", ""
        else:
            m = _START.match(text, lt)
            if m is None:
                raise InvalidInput(f"the domain XML is not well-formed at character {lt}")
            i = m.end()
            yield lt, i, m.group(1), "empty" if m.group(3) else "open", m.group(2)


def _default_ns(attrs: str, inherited: str) -> str:
    for m in _ATTR.finditer(attrs):
        if m.group(1) == "xmlns":
            return m.group(2) if m.group(2) is not None else m.group(3)
    return inherited


def span(text: str, path: str) -> tuple[int, int] | None:
    """The character span of the first element at ``path`` below the root (``""``: the root),
    from its ``<`` to the end of its end tag (or of its empty tag); None when there is none."""
    want = [p for p in path.split("/") if p]
    stack: list[tuple[str, bool]] = []  # (default namespace, on the path so far) per open element
    start = None
    for lo, hi, name, kind, attrs in _tags(text):
        if kind == "close":
            stack.pop()
            if start is not None and len(stack) == len(want):
                return start, hi
            continue
        ns = _default_ns(attrs, stack[-1][0] if stack else "")
        depth = len(stack)  # 0: the root
        on_path = depth == 0 or (stack[-1][1] and depth <= len(want) and not ns and name == want[depth - 1])
        if start is None and on_path and depth == len(want):
            if kind == "empty":
                return lo, hi
            start = lo
        if kind == "open":
            stack.append((ns, on_path))
    return None


def _indent_of(text: str, start: int) -> str:
    line_start = text.rfind("\n", 0, start) + 1
    prefix = text[line_start:start]
    return prefix if prefix.strip() == "" else "  "


def _serialize(el: etree._Element, indent: str) -> str:
    el = copy.deepcopy(el)
    el.tail = None
    xmltext.indent(el)
    lines = etree.tostring(el, encoding="unicode").split("\n")
    return "\n".join([lines[0]] + [indent + line for line in lines[1:]])


def put(text: str, path: str, new: etree._Element) -> str:
    """``text`` with the element at ``path`` replaced by ``new`` (indented two spaces a level, its
    first line where the old one began), or, without one, ``new`` added as the last child of its
    parent. LookupError when the parent is missing or an empty tag."""
    found = span(text, path)
    if found is not None:
        start, end = found
        return text[:start] + _serialize(new, _indent_of(text, start)) + text[end:]
    parent = span(text, path.rpartition("/")[0])
    close = None if parent is None else text.rfind("</", parent[0], parent[1])
    if close is None or close <= parent[0]:
        raise LookupError(f"no element to put <{new.tag}> into at {path!r}")
    indent = _indent_of(text, close) + "  "
    return text[:close] + "  " + _serialize(new, indent) + "\n" + text[close:]
