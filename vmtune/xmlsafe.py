"""Parsing untrusted XML: no entity expansion, no DTD or network loads, bounded size."""

from __future__ import annotations

from lxml import etree

from .errors import InvalidInput

MAX_BYTES = 8 * 1024 * 1024  # a domain with every device libvirt knows is well under 1 MiB


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
    if b"<!ENTITY" in data or b"<!DOCTYPE" in data:
        raise InvalidInput(f"{what} has a DOCTYPE or entity declaration, which vmtune does not accept")
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else "malformed XML"
        raise InvalidInput(f"{what} is not well-formed: {msg}") from None
    if root is None:
        raise InvalidInput(f"{what} is empty")
    return root
