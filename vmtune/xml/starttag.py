"""A start tag as given, with its attributes changed as little as it takes (vmtune/xml/textkeep.py):
an attribute that keeps its value keeps its bytes (quotes, spacing, character references), a
changed one is written in its own quotes, a removed one goes with the space before it, and a new
one comes last, in the document's quotes. Namespace declarations stay where they are. Where the
attributes' order changed, they are written in the new order (the declarations first).

Values are escaped as libvirt and lxml escape them: ``&``, ``<``, ``>``, the quote, and tab,
newline and carriage return as character references. ``single`` turns lxml's double-quoted
attributes into single-quoted ones, as ``virsh dumpxml`` writes them.
"""

from __future__ import annotations

import re

from .markup import Mismatch

_NAME = re.compile(r"<([^\s/>]+)")
_ATTR = re.compile(r"""(\s+)([^\s=/>]+)(\s*=\s*)("[^"]*"|'[^']*')""")
_LXML_TAG = re.compile(r"<!--.*?-->|<\?.*?\?>|<[^!?/][^>]*>", re.S)  # in lxml's output: '>' is escaped in values
_DOUBLE = re.compile(r'="([^"]*)"')
XML_NS = "http://www.w3.org/XML/1998/namespace"


def name_of(tag: str) -> str:
    """The element's name as written in start tag ``tag`` (with its prefix)."""
    return _NAME.match(tag).group(1)


def escape(value: str) -> str:
    """Text content, escaped."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#13;")


def quoted(value: str, quote: str) -> str:
    """An attribute value in ``quote``s."""
    value = escape(value).replace(quote, "&apos;" if quote == "'" else "&quot;")
    return quote + value.replace("\n", "&#10;").replace("\t", "&#9;") + quote


_REF = re.compile(r"&(?:(lt|gt|amp|quot|apos)|#(\d+)|#x([0-9a-fA-F]+));")
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}


def unescape(value: str) -> str:
    """An attribute value as written, as the parser reads it (whitespace normalized, references
    replaced)."""
    if "&" not in value and "\t" not in value and "\n" not in value and "\r" not in value:
        return value
    value = value.replace("\r\n", " ").replace("\t", " ").replace("\n", " ").replace("\r", " ")
    return _REF.sub(lambda m: _NAMED[m.group(1)] if m.group(1) else chr(int(m.group(2)) if m.group(2)
                                                                         else int(m.group(3), 16)), value)


def single(xml: str) -> str:
    """lxml's double-quoted attributes in single quotes, as libvirt writes its own elements (an
    element of another namespace, in ``<metadata>``, it writes as libxml2 does: double quotes)."""
    flip = lambda m: "='" + m.group(1).replace("'", "&apos;") + "'"  # noqa: E731
    return _LXML_TAG.sub(lambda m: m.group() if m.group()[1] in "!?" or ":" in name_of(m.group())
                         else _DOUBLE.sub(flip, m.group()), xml)


def quote_of(el, quote: str) -> str:
    """The quotes of ``el``'s new attributes: the document's (``quote``), but for an element of
    another namespace (in ``<metadata>``), which libvirt writes as libxml2 does, in double ones."""
    return '"' if el.tag[:1] == "{" else quote


def changed(tag: str, name: str, old: list | None, new: list, old_el, new_el, quote: str) -> str:
    """Start tag ``tag`` (without its ``>`` or ``/>``) of element ``name``, whose attributes were
    ``old`` (lxml's (name, value) pairs, in order, of element ``old_el``; None: as the tag says),
    with ``new`` ones (those of ``new_el``) instead."""
    pos = len(name) + 1
    parts = _ATTR.findall(tag, pos)
    tail = tag[pos + len("".join(map("".join, parts))):]
    if tail.strip():
        raise Mismatch(tag)
    was, now = {} if old is None else dict(old), dict(new)
    out, decls, given, pieces = [tag[:pos]], [], [], {}
    for ws, raw, eq, value in parts:
        if raw == "xmlns" or raw[:6] == "xmlns:":
            decls.append(ws + raw + eq + value)
            out.append(decls[-1])
            continue
        key = _key(raw, old_el.nsmap) if ":" in raw else raw
        given.append(key)
        if old is None:
            was[key] = unescape(value[1:-1])
        if key in now:
            value = value if now[key] == was.get(key) else quoted(now[key], value[0])
            out.append(pieces.setdefault(key, ws + raw + eq + value))
    if len(given) != len(was) or was.keys() != set(given):
        raise Mismatch(tag)
    kept = [key for key in given if key in now]
    if [key for key, _ in new[:len(kept)]] != kept:  # the attributes' order changed: the new one
        out = [tag[:pos]] + decls + [pieces[key] for key, _ in new if key in pieces]
    for key, value in new:
        if key not in was:
            out.append(f" {_name(key, new_el) if key[0] == '{' else key}={quoted(value, quote)}")
    return "".join(out) + tail


def _key(raw: str, ns: dict) -> str:
    """lxml's name of attribute ``raw`` (``prefix:local`` -> ``{uri}local``)."""
    prefix, _, local = raw.rpartition(":")
    if not prefix:
        return raw
    uri = XML_NS if prefix == "xml" else ns.get(prefix)
    if uri is None:
        raise Mismatch(raw)
    return f"{{{uri}}}{local}"


def _name(key: str, el) -> str:
    """The name to write of ``el``'s attribute ``key`` (lxml's ``{uri}local`` -> ``prefix:local``)."""
    uri, _, local = key[1:].partition("}")
    if uri == XML_NS:
        return f"xml:{local}"
    prefix = next((p for p, u in el.nsmap.items() if u == uri and p), None)
    if prefix is None:
        raise Mismatch(key)
    return f"{prefix}:{local}"
