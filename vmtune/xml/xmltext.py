"""Text content and indentation of libvirt XML, safe with comments and processing instructions.

Comments and processing instructions (PIs) may sit anywhere in libvirt XML, inside a text value
too: ``<memory unit='KiB'><!-- c -->2097152</memory>``. libvirt reads a value as XPath
``string()`` does: every text node of the element joined, the comments and PIs left out. lxml
keeps the text after a comment in the comment's ``tail``, so ``el.text`` alone is not the value.

    text(el)              the value, as libvirt reads it
    set_text(el, value)   replace the whole value; the comments and PIs stay (after the value)
    elements(el)          the element children only (no comments, no PIs)
    local_name(tag)       ``{ns}name`` -> ``name``; "" for a comment's or a PI's tag
    indent(root)          indent element-only content; never touch a text value
    drop_layout(root)     drop whitespace-only text beside child nodes (what the parser drops)
    find(el, path)        ``el.find(path)``, in C where the path is plain tag steps
    each(el, path)        ``el.iterfind(path)``, the same way
    Children(el, tags)    el's children of those tags, found once, for many lookups below them
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

from lxml import etree


def local_name(tag: object) -> str:
    """A tag's local name (``{ns}name`` -> ``name``); "" for a comment's or a PI's."""
    if not isinstance(tag, str):
        return ""
    return tag.rpartition("}")[2] if tag[:1] == "{" else tag


def is_element(node: etree._Element) -> bool:
    """An element (not a comment, a PI or an entity: their ``tag`` is not a string)."""
    return isinstance(node.tag, str)


def elements(parent: etree._Element) -> list[etree._Element]:
    return [child for child in parent if is_element(child)]


def text(el: etree._Element) -> str:
    """All text of ``el``, comments and PIs left out: libvirt's (XPath's) string value."""
    if not len(el):  # no child: its text (itertext costs a few µs more)
        return el.text or ""
    return "".join(el.itertext())


def set_text(el: etree._Element, value: str | None) -> None:
    """Make ``value`` the whole text of ``el``: the text between and after its children goes,
    the children (comments, PIs) stay."""
    el.text = value
    for child in el:
        child.tail = None


def _element_only(el: etree._Element) -> bool:
    """Whether ``el`` holds elements and nothing but whitespace around and between its children."""
    kids = list(el)
    return (any(is_element(k) for k in kids) and not (el.text or "").strip()
            and not any((k.tail or "").strip() for k in kids))


def _indent(el: etree._Element, level: int, space: str, base: str = "") -> None:
    inner = "\n" + base + space * level
    el.text = inner
    kids = list(el)
    for kid in kids:
        if is_element(kid) and _element_only(kid):
            _indent(kid, level + 1, space, base)
        kid.tail = inner
    kids[-1].tail = "\n" + base + space * (level - 1)


# What etree.indent would get wrong: text beside a comment, PI or element (a value with a comment
# in it), and a comment or PI in an element without element children (``<name><!-- c --></name>``)
_LXML_WOULD_CHANGE = etree.XPath(
    "boolean(descendant-or-self::*[node()[not(self::text())]][text()[normalize-space()]]"
    " | descendant-or-self::*[comment() or processing-instruction()][not(*)])")


# A cheaper test that holds wherever _LXML_WOULD_CHANGE does (a comment or PI anywhere, or text
# beside element children): most domains have neither, and skip the exact test
_MAYBE_MIXED = etree.XPath("boolean(.//comment() | .//processing-instruction()"
                           " | descendant-or-self::*[*]/text()[normalize-space()])")


def indent(root: etree._Element, space: str = "  ", base: str = "") -> None:
    """Indent like ``etree.indent``, but only where an element holds elements and whitespace:
    mixed content (a value with a comment in it) keeps its text byte for byte, and an element
    without element children (``<memory>``, ``<name>``, ...) is never given whitespace. ``base``:
    the indentation of ``root``'s own line (its tail is left alone)."""
    level = len(base) // len(space) if space else 0
    if base == space * level and (not _MAYBE_MIXED(root) or not _LXML_WOULD_CHANGE(root)):
        etree.indent(root, space=space, level=level)  # the same result where nothing is mixed, and in C
    elif _element_only(root):
        _indent(root, 1, space, base)


# Whitespace-only text beside child nodes: layout, which the parser drops (remove_blank_text)
_LAYOUT = etree.XPath("descendant-or-self::*[node()[not(self::text())]][not(text()[normalize-space()])]/text()")


def drop_layout(root: etree._Element) -> None:
    """Drop the whitespace-only text of elements (``root`` and below) that hold child nodes and no
    other text, as the parser does and libvirt ignores: ``<cpu>\\n  </cpu>`` that vmtune gave a
    child is then the element the output reads back as."""
    for found in _LAYOUT(root):
        if found.is_tail:
            found.getparent().tail = None
        else:
            found.getparent().text = None


_STEP = re.compile(r"(?:\{[^}]*\})?[A-Za-z_][\w.-]*")  # a plain tag step: a name, maybe {namespaced}


@functools.lru_cache(maxsize=1024)
def _steps(path: str) -> tuple[str, ...] | None:
    """The tag steps of ``path`` when each is a plain tag name, maybe namespaced (a namespace's
    URI may hold ``/``); else None."""
    steps, at = [], 0
    while True:
        m = _STEP.match(path, at)
        if m is None:
            return None
        steps.append(m.group())
        at = m.end()
        if at == len(path):
            return tuple(steps)
        if path[at] != "/":
            return None
        at += 1


_KEYED = re.compile(r"((?:\{[^}]*\})?[A-Za-z_][\w.-]*)\[@([A-Za-z_][\w.-]*)='([^']*)'\]")  # tag[@attr='value']


@functools.lru_cache(maxsize=1024)
def _keyed(path: str) -> tuple[tuple[str, ...], str, str, str] | None:
    """(plain steps before it, tag, attribute, value) of a path whose last step is
    ``tag[@attr='value']`` and whose other steps are plain tags; else None."""
    head, _, last = path.rpartition("/")
    m = _KEYED.fullmatch(last)
    if m is None:
        return None
    steps = _steps(head) if head else ()
    return None if steps is None else (steps, *m.groups())


def plain_steps(path: str) -> tuple[str, ...] | None:
    """The tag steps of ``path`` when it is made of plain tag steps only (``find`` follows them
    itself); else None."""
    return _steps(path)


def find(el: etree._Element, path: str) -> etree._Element | None:
    """``el.find(path)``: the first match in document order. A path of plain tag steps
    (``cputune/vcpupin``) is followed with ``iterchildren``, in C, as lxml's ElementPath does it
    step by step in Python, and so is one that ends in ``tag[@attr='value']`` (the edits' keyed
    steps); any other path (other predicates, ``.``, ``*``, ``//``) goes to lxml."""
    steps = _steps(path)
    if steps is None:
        keyed = _keyed(path)
        if keyed is None:
            return el.find(path)
        head, tag, attr, value = keyed
        for parent in (_each(el, head, 0) if head else (el,)):  # the first match in document order
            for child in parent.iterchildren(tag):
                if child.get(attr) == value:
                    return child
        return None
    if len(steps) == 1:
        return next(el.iterchildren(steps[0]), None)
    if len(steps) == 2:  # the usual deeper path (devices/disk, cputune/vcpupin): no recursion
        for child in el.iterchildren(steps[0]):
            found = next(child.iterchildren(steps[1]), None)
            if found is not None:
                return found
        return None
    return _first(el, steps, 0)


def _first(el, steps: tuple[str, ...], i: int):
    if i == len(steps) - 1:
        return next(el.iterchildren(steps[i]), None)
    for child in el.iterchildren(steps[i]):
        found = _first(child, steps, i + 1)
        if found is not None:
            return found
    return None


def each(el: etree._Element, path: str) -> Iterator[etree._Element]:
    """``el.iterfind(path)``: every match in document order, plain tag steps followed with
    ``iterchildren`` (``find``)."""
    steps = _steps(path)
    if steps is None:
        return el.iterfind(path)
    if len(steps) == 1:
        return el.iterchildren(steps[0])
    if len(steps) == 2:  # one <devices>, one <cputune>: its children, without a generator around them
        outer = el.iterchildren(steps[0])
        first = next(outer, None)
        if first is None:
            return iter(())
        if next(outer, None) is None:
            return first.iterchildren(steps[1])
    return _each(el, steps, 0)


def _each(el, steps: tuple[str, ...], i: int) -> Iterator[etree._Element]:
    if i == len(steps) - 1:
        yield from el.iterchildren(steps[i])
        return
    for child in el.iterchildren(steps[i]):
        yield from _each(child, steps, i + 1)


class Children(dict):
    """An element's children of ``tags`` by tag, each tag's in document order: one walk over them
    for the many lookups a reader makes below one element (the checks read a dozen paths of
    ``<domain>``, most of which a domain lacks). ``first`` and ``each`` are ``xmltext.find`` and
    ``xmltext.each`` of a path whose first step is one of ``tags``; any other tag finds nothing."""

    def __init__(self, el, tags: tuple[str, ...]):
        super().__init__()
        for child in el.iterchildren(*tags):  # lxml matches the tags in C: only those are read
            tag = child.tag  # made anew at each read of it
            found = self.get(tag)
            if found is None:
                self[tag] = [child]
            else:
                found.append(child)

    def first(self, tag: str, path: str = ""):
        """The first ``tag/path`` in document order (``path`` "": the first ``tag``), or None."""
        found = self.get(tag)
        if found is None or not path:
            return None if found is None else found[0]
        for parent in found:
            el = find(parent, path)
            if el is not None:
                return el
        return None

    def each(self, tag: str, path: str) -> Iterator:
        """Every ``tag/path``, in document order."""
        found = self.get(tag)
        if found is None:
            return iter(())
        if len(found) == 1:  # one <devices>, one <cputune>: its own, without a generator around it
            return each(found[0], path)
        return (el for parent in found for el in each(parent, path))
