"""Validate domain XML against the libvirt RELAX NG schema installed on this machine."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from lxml import etree

DOMAIN_RNG = Path("/usr/share/libvirt/schemas/domain.rng")


def schema_available() -> bool:
    return DOMAIN_RNG.is_file()


@cache
def _schema() -> etree.RelaxNG:
    return etree.RelaxNG(etree.parse(str(DOMAIN_RNG)))


def validate_domain(xml: str | bytes) -> list[str]:
    """Schema errors as 'line N: message' strings; an empty list means valid."""
    try:
        doc = etree.fromstring(xml.encode() if isinstance(xml, str) else xml)
    except etree.XMLSyntaxError as e:
        return [f"not well-formed: {e}"]
    schema = _schema()
    if schema.validate(doc):
        return []
    return [f"line {e.line}: {e.message}" for e in schema.error_log]
