"""Parsing untrusted XML: no entity expansion, no DTD or network loads, bounded size; and reading it
(``read``: a file or stdin, at most ``MAX_BYTES``, UTF-8)."""

from __future__ import annotations

import re
import sys

from lxml import etree

from .errors import InvalidInput

MAX_BYTES = 8 * 1024 * 1024  # a domain with every device libvirt knows is well under 1 MiB
# the one DOCTYPE accepted: a bare <!DOCTYPE name>, no internal subset, no SYSTEM or PUBLIC id
BARE_DOCTYPE = re.compile(rb"<!DOCTYPE\s+[^\s\[\]<>'\"]+\s*>")


def read(path: str, what: str) -> str:
    """The text of the XML file ``path`` (``-``: stdin): InvalidInput (one line) when it cannot be
    read, is larger than ``MAX_BYTES`` (never more is read) or is not UTF-8."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read {what} {path}: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise InvalidInput(f"{what} {path} is larger than {MAX_BYTES // (1024 * 1024)} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{what} {path} is not UTF-8") from None


def _parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_blank_text=True,
        remove_comments=False,
    )


def parse(xml: str | bytes, what: str = "XML") -> etree._Element:
    """Parse ``xml`` safely and return its root element, or raise InvalidInput in one line."""
    data = xml.encode("utf-8") if isinstance(xml, str) else xml
    if len(data) > MAX_BYTES:
        raise InvalidInput(f"{what} is larger than {MAX_BYTES // (1024 * 1024)} MiB")
    if b"<!ENTITY" in data or data.count(b"<!DOCTYPE") != len(BARE_DOCTYPE.findall(data)):
        raise InvalidInput(f"{what} has a DOCTYPE with declarations or an external id, or an entity "
                           "declaration, which vmtune does not accept")
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else "malformed XML"
        raise InvalidInput(f"{what} is not well-formed: {msg}") from None
    if root is None:
        raise InvalidInput(f"{what} is empty")
    if not _bare(root.getroottree().docinfo):  # what the bytes hid (UTF-16, say): the parser's word
        raise InvalidInput(f"{what} has a DOCTYPE with declarations or an external id, which vmtune does not accept")
    return root


def _bare(info) -> bool:
    """No DOCTYPE, or one that only names the root: nothing to expand, nothing to fetch."""
    dtd = info.internalDTD
    declared = dtd is not None and (any(True for _ in dtd.iterentities()) or bool(dtd.elements()))
    return not (declared or info.system_url or info.public_id or info.externalDTD is not None)
