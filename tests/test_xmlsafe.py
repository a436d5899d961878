"""Untrusted XML (vmtune/xml/xmlsafe.py): a bare DOCTYPE is read as libvirt reads it; anything a DTD
could expand or fetch is refused in one line."""

from __future__ import annotations

import pytest

from vmtune.xml import xmlsafe
from vmtune.errors import InvalidInput

DOMAIN = "<domain type='kvm'><name>d</name></domain>"


@pytest.mark.parametrize("doctype", ["<!DOCTYPE domain>", "<!DOCTYPE  domain \n>", "<!DOCTYPE other>\n"])
def test_a_bare_doctype_is_accepted(doctype):
    """<!DOCTYPE name> declares nothing and names nothing to fetch: libvirt takes it, so does vmtune."""
    assert xmlsafe.parse(doctype + DOMAIN).tag == "domain"


@pytest.mark.parametrize("doctype", [
    "<!DOCTYPE domain []>",
    "<!DOCTYPE domain [<!ELEMENT domain ANY>]>",
    "<!DOCTYPE domain [<!ENTITY a 'b'>]>",
    "<!DOCTYPE domain SYSTEM 'file:///etc/passwd'>",
    "<!DOCTYPE domain PUBLIC '-//x//y' 'http://example.com/y.dtd'>",
    "<!DOCTYPE domain><!-- <!ENTITY a 'b'> -->",
])
def test_a_doctype_with_a_subset_or_an_id_is_refused(doctype):
    """An internal subset (even empty), a SYSTEM or PUBLIC id, an entity declaration: refused."""
    with pytest.raises(InvalidInput, match="DOCTYPE"):
        xmlsafe.parse(doctype + DOMAIN)


@pytest.mark.parametrize("doctype", ["<!DOCTYPE d [<!ENTITY a 'b'>]>", "<!DOCTYPE d SYSTEM 'x.dtd'>",
                                     "<!DOCTYPE d [<!ELEMENT d ANY>]>"])
def test_utf16_hides_no_declaration(doctype):
    """In UTF-16 the bytes show no '<!DOCTYPE': the parser's own view of the DTD refuses it."""
    data = f"<?xml version='1.0' encoding='UTF-16'?>{doctype}{DOMAIN}".encode("utf-16")
    with pytest.raises(InvalidInput, match="DOCTYPE"):
        xmlsafe.parse(data)
    assert xmlsafe.parse(f"<?xml version='1.0' encoding='UTF-16'?><!DOCTYPE d>{DOMAIN}".encode("utf-16")).tag == "domain"

