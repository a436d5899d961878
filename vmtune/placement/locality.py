"""The host devices a domain uses, and the NUMA node each hangs off on a host.

Passthrough devices are the domain's own and decide where it should run (``device_locality``):
a PCI ``<hostdev>``, an ``<interface type='hostdev'>``, a ``<disk type='nvme'>``, and a mediated
device (``<hostdev type='mdev'>``) by the PCI device it is carved from. Backing devices are a
preference only: a ``<disk type='block'>``'s block device, an ``<interface type='direct'>``'s
(macvtap) NIC and an ``<interface type='bridge'>``'s bridge (by its physical ports). A device
whose address or name cannot be read is left out, as a device the host does not know.

Pure but for the host's device source (``Host.devices``), which may read sysfs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..host import Host
from ..host.devices import BLOCK, MDEV, NET, PCI, PCI_FIELDS, PCI_LIMITS, Location, pci_address
from ..xml.model import Disk, Domain, Hostdev, Interface


@dataclass(frozen=True)
class Anchor:
    """A device a domain uses, on a host node: a passthrough device (hostdev, an NVMe disk, an
    mdev's parent) or a backing one (a block device, a macvtap or bridge port)."""

    node: int
    what: str  # "hostdev 0000:3b:00.0", as the messages name it
    passthrough: bool = True


def away(anchors, nodes) -> list[Anchor]:
    """The passthrough devices among ``anchors`` that hang off a node outside ``nodes``: the one
    rule of "a device away from the domain's nodes" (the placement and its warnings, the audit's
    device-remote, the hook's re-pin under ``required``)."""
    return [a for a in anchors if a.passthrough and a.node not in nodes]


@dataclass(frozen=True)
class Use:
    """One host device a domain uses."""

    kind: str  # host.devices PCI, MDEV, BLOCK or NET
    key: str  # PCI address, mdev UUID, device path, NIC or bridge name
    passthrough: bool
    what: str  # "hostdev 0000:3b:00.0", as messages name it


@functools.lru_cache(maxsize=1024)  # a few spellings (0x0000, 0x00, 0x1f, ...) over and over
def c_number(text: str | None) -> int | None:
    """A number as libvirt reads a PCI address part (C's strtoul base 0: 0x hex, 0 octal, else
    decimal); None when it is not one."""
    value = (text or "").strip().lower()
    try:
        if value.startswith("0x"):
            return int(value[2:], 16)
        return int(value, 8) if len(value) > 1 and value.startswith("0") else int(value, 10)
    except ValueError:
        return None


def _pci(address) -> str | None:
    """``dddd:bb:ss.f`` of an ``<address domain= bus= slot= function=>`` (domain 0 when absent)."""
    if address is None:
        return None
    get = address.get
    parts = [c_number(v) if (v := get(a)) is not None else (0 if a == "domain" else None) for a in PCI_FIELDS]
    for p, top in zip(parts, PCI_LIMITS):
        if p is None or not 0 <= p <= top:
            return None
    return pci_address(*parts)


def uses(dom: Domain, backing: bool = True) -> tuple[Use, ...]:
    """Every host device ``dom`` uses, in document order of its kind; without ``backing``, the
    passthrough ones only (a host that knows no device places by none of the others)."""
    hostdevs: list[Use] = []
    nics: list[Use] = []
    disks: list[Use] = []
    # one walk over <devices> for the three kinds (lxml matches the tags in C), each kind's found in
    # document order; a NIC's or a disk's type is read first, for most of them count for nothing
    for el in (el for devices in dom.node.iterchildren("devices")
               for el in devices.iterchildren(Hostdev.TAG, Interface.TAG, Disk.TAG)):
        tag = el.tag
        if tag == Hostdev.TAG:
            _hostdev(Hostdev(el), hostdevs)
        elif tag == Interface.TAG:
            kind = Interface.type.raw(el)
            if kind == "hostdev" or (backing and kind in ("direct", "bridge")):
                _interface(Interface(el), kind, nics)
        else:
            kind = Disk.type.raw(el)
            if kind == Disk.TYPE_NVME or (backing and kind == "block"):
                _disk(Disk(el), kind, disks)
    return tuple(hostdevs + nics + disks)


def _hostdev(dev: Hostdev, out: list[Use]) -> None:
    """The Use of a ``<hostdev>`` (a PCI device, an mdev), if it names one, onto ``out``."""
    if dev.mode not in (None, "subsystem"):
        return
    if dev.type == "pci":
        addr = _pci(dev.source_address)
        if addr:
            out.append(Use(PCI, addr, True, f"hostdev {addr}"))
    elif dev.type == "mdev":
        source = dev.source_address
        uuid = (source.get("uuid") or "").strip().lower() if source is not None else ""
        if uuid:
            out.append(Use(MDEV, uuid, True, f"mdev {uuid}"))


def _interface(nic: Interface, kind: str, out: list[Use]) -> None:
    """The Use of an ``<interface>`` of type hostdev, direct or bridge, if it names one, onto ``out``."""
    if kind == "hostdev":
        source = nic.source_address
        addr = _pci(source) if source is not None and source.get("type", "pci") == "pci" else None
        if addr:
            out.append(Use(PCI, addr, True, f"interface hostdev {addr}"))
    else:
        source = nic.source
        name = (source.get("dev" if kind == "direct" else "bridge") or "").strip() if source is not None else ""
        if name:
            out.append(Use(NET, name, False, f"interface direct {name}" if kind == "direct" else f"bridge {name}"))


def _disk(disk: Disk, kind: str, out: list[Use]) -> None:
    """The Use of a ``<disk>`` of type nvme or block, if it names one, onto ``out``."""
    source = disk.source
    if kind == Disk.TYPE_NVME:
        addr = _pci(disk.source_address) if source is not None and source.get("type", "pci") == "pci" else None
        if addr:
            out.append(Use(PCI, addr, True, f"disk nvme {addr}"))
    elif source is not None:
        dev = (source.get("dev") or "").strip()
        if dev:
            out.append(Use(BLOCK, dev, False, f"disk {dev}"))


def passthrough(dom: Domain) -> frozenset[tuple[str, str]]:
    """(kind, key) of every device ``dom`` passes through (a PCI device, an mdev)."""
    return frozenset((u.kind, u.key) for u in uses(dom, backing=False))


def shared_with(used: tuple[Use, ...], claims) -> list[str]:
    """A warning per passthrough device of ``used`` (a domain's ``uses``) that another domain
    (``claims``) passes through too: libvirt starts one of them at a time."""
    mine = {(u.kind, u.key): u.what for u in used if u.passthrough}
    if not mine:
        return []
    out = []
    for key, what in mine.items():
        others = sorted(c.name or c.uuid or "?" for c in claims if key in c.passthrough)
        if others:
            out.append(f"{what} is passed through to {', '.join(others)} too: only one of them can run at a time")
    return out


@dataclass(frozen=True)
class Found:
    """A domain's devices on one host: the ones with a node, the passthrough ones the host does
    not know, and each passthrough device's location (the map and the doctor show them)."""

    anchors: tuple[Anchor, ...]
    unknown: tuple[Use, ...]
    located: tuple[tuple[Use, Location], ...]


def locate(host: Host, dom: Domain, used: tuple[Use, ...] | None = None) -> Found:
    """Where ``dom``'s devices (``used``, when read already) hang on ``host`` (InvalidInput for a
    node the host lacks)."""
    anchors, unknown, located = [], [], []
    for use in uses(dom) if used is None else used:
        where = host.devices.locate(use.kind, use.key)
        if use.passthrough:
            located.append((use, where))
            if not where.known:
                unknown.append(use)
        if where.constrains:
            via = f" (on {where.via})" if where.via and use.kind == MDEV else ""
            anchors.append(Anchor(where.node, use.what + via, use.passthrough))
    return Found(tuple(anchors), tuple(unknown), tuple(located))


def unknown_warning(unknown: tuple[Use, ...], known_any: bool) -> str | None:
    """One warning for the passthrough devices the host does not know (the domain may be defined
    on another host), or None."""
    if not unknown:
        return None
    names = ", ".join(u.what for u in unknown)
    if not known_any:
        return (f"{names}: this host's devices are not known (a host from capabilities: give their "
                "`virsh nodedev-dumpxml` with --nodedev), so the device's NUMA node was not looked at")
    return f"{names}: not on this host, so the device's NUMA node was not looked at"


__all__ = ["BLOCK", "MDEV", "NET", "PCI", "Anchor", "Found", "Use", "locate", "passthrough", "shared_with", "uses", "unknown_warning"]
