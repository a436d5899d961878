"""The domains of a libvirt connection: their XML and their state.

A persistent domain is read as its persistent (inactive) definition: what ``vmtune apply``
rewrites and what the domain gets at its next start; a running one also has its live XML. A
transient domain (``virsh create``) has only the live XML.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidInput
from . import connect

# virDomainState -> the words virsh prints; and libvirt's own words (virDomainStateTypeToString, the
# ``state`` of a status file in /run/libvirt/qemu)
STATES = ("no state", "running", "idle", "paused", "in shutdown", "shut off", "crashed", "pmsuspended")
WORDS = ("nostate", "running", "blocked", "paused", "shutdown", "shutoff", "crashed", "pmsuspended")


@dataclass(frozen=True)
class Defined:
    name: str
    uuid: str
    state: str  # as virsh prints it
    persistent: bool
    xml: str  # the persistent definition; the live XML for a transient domain
    live_xml: str | None  # None when the domain is not active

    @property
    def active(self) -> bool:
        return self.live_xml is not None


def state_text(code: int, unknown: str | None = None) -> str:
    """virsh's word for a virDomainState; ``unknown`` (default ``state N``) for a code it lacks."""
    if 0 <= code < len(STATES):
        return STATES[code]
    return f"state {code}" if unknown is None else unknown


def word_text(word: str) -> str:
    """virsh's word for libvirt's own state word; the word itself when it is not one."""
    return STATES[WORDS.index(word)] if word in WORDS else word


def lookup(conn, name: str, uri: str):
    """The virDomain called ``name``; InvalidInput when libvirt has no such domain."""
    lv = connect.libvirt()
    try:
        return conn.lookupByName(name)
    except lv.libvirtError as exc:
        if exc.get_error_code() == lv.VIR_ERR_NO_DOMAIN:
            raise InvalidInput(f"no domain named {name!r} at {uri}") from None
        raise


def read(dom, secure: bool = False) -> Defined:
    """``dom``'s XML and state. ``secure`` includes passwords and keys (needed to define it back)."""
    lv = connect.libvirt()
    flags = lv.VIR_DOMAIN_XML_SECURE if secure else 0
    persistent = bool(dom.isPersistent())
    active = bool(dom.isActive())
    live = dom.XMLDesc(flags) if active else None
    xml = dom.XMLDesc(flags | lv.VIR_DOMAIN_XML_INACTIVE) if persistent else live
    return Defined(dom.name(), dom.UUIDString(), state_text(dom.state()[0]), persistent, xml, live)


def every(conn, secure: bool = False) -> list[Defined]:
    """Every domain of ``conn``, running or not, by name. One that vanishes while read is left out."""
    lv = connect.libvirt()
    out = []
    for dom in conn.listAllDomains(0):
        try:
            out.append(read(dom, secure))
        except lv.libvirtError as exc:
            if exc.get_error_code() != lv.VIR_ERR_NO_DOMAIN:
                raise
    return sorted(out, key=lambda d: (d.name, d.uuid))
