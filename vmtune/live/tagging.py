"""The vmtune tag through libvirt's metadata API: only ``<metadata>/<vmtune:tune>`` changes.

``setMetadata(VIR_DOMAIN_METADATA_ELEMENT, '<tune profile="P"/>', 'vmtune',
'https://vmtune.dev/xmlns/1', VIR_DOMAIN_AFFECT_CONFIG)`` writes the tag into the persistent
definition (the hook and ``vmtune apply`` read it there); a running domain's live XML is left as
it is.
"""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

from .. import config as config_mod
from .. import profiles
from ..record import undo
from ..xml import xmlsafe
from ..xml.model import NS, Domain
from . import connect

PREFIX = "vmtune"


def _definition(dom) -> Domain:
    """``dom``'s persistent definition (its live XML when it has none)."""
    lv = connect.libvirt()
    xml = dom.XMLDesc(lv.VIR_DOMAIN_XML_INACTIVE) if dom.isPersistent() else dom.XMLDesc(0)
    return Domain(xmlsafe.parse(xml, "domain XML"))


def current(dom) -> str | None:
    """The profile ``dom``'s persistent definition is tagged with, or None."""
    return _definition(dom).tagged_profile


def tag(dom, profile: str, config: config_mod.Config | None = None) -> str | None:
    """Tag ``dom`` with ``profile`` (which must exist); return the profile it had before."""
    config = config or config_mod.Config()
    profiles.load(profile, config.profiles_dir)  # an unknown profile is InvalidInput
    from lxml import etree

    lv = connect.libvirt()
    now = _definition(dom)
    before = now.tagged_profile
    # vmtune's record of its changes stays with the tag (vmtune/record/undo.py), as XML with our prefix.
    # A first tag (or a retag of one) records that vmtune changed nothing else: apply then reads the
    # domain's own settings as the user's, not as an older vmtune's tuning.
    if now.tag is None or undo.tagged_only_now(now.node):  # (the record lives in the tag)
        records = [undo.tagged_only(now.node, profile)]
    else:
        records = undo.records(now.node)
    kept = "".join(etree.tostring(r, encoding="unicode", with_tail=False) for r in records)
    dom.setMetadata(lv.VIR_DOMAIN_METADATA_ELEMENT, f"<tune profile={quoteattr(profile)}>{kept}</tune>", PREFIX, NS,
                    lv.VIR_DOMAIN_AFFECT_CONFIG)
    return before


def untag(dom) -> str | None:
    """Remove the tag; return the profile it had (None: it was not tagged, nothing changed)."""
    lv = connect.libvirt()
    before = current(dom)
    if before is None and not _has_element(dom):
        return None
    dom.setMetadata(lv.VIR_DOMAIN_METADATA_ELEMENT, None, None, NS, lv.VIR_DOMAIN_AFFECT_CONFIG)
    return before


def _has_element(dom) -> bool:
    """A ``<vmtune:tune>`` without a profile attribute is a tag too."""
    return _definition(dom).tag is not None
