"""libvirt's node devices (``virsh nodedev-dumpxml NAME``, ``nodeDeviceLookupByName().XMLDesc()``)
as a devices Table (host/devices.py).

A PCI device's node is its ``<numa node='N'/>`` (none, or -1: no node). A NIC
(``<capability type='net'>``), a disk (``<capability type='storage'>``, its ``<block>``) and a
mediated device (``<capability type='mdev'>``) hang off the nearest PCI device up their
``<parent>`` chain, as far as the devices given name it. A PCI device's ``<driver><name>`` is the
host driver it is bound to now: the Table lists the PCI devices a domain can be given
(``Devices.assignable``): every one of the ``--nodedev`` files, those on vfio-pci of libvirt's list.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..xml import xmlsafe, xmltext
from ..errors import InvalidInput
from .devices import (BLOCK, MDEV, NET, PCI, PCI_FIELDS, PCI_LIMITS, VFIO, Location, Table, block_name, check_node,
                      pci_address)


@dataclass(frozen=True)
class NodeDevice:
    name: str
    parent: str | None
    keys: tuple[tuple[str, str], ...]  # (kind, key) it answers to
    pci: str | None = None  # its PCI address, for a PCI device
    node: int | None = None  # its own <numa node>, for a PCI device
    driver: str | None = None  # the host driver it is bound to (<driver><name>), when given


def _text(el) -> str:
    return xmltext.text(el) if el is not None else ""


def _number(text: str | None, what: str, where: str) -> int:
    """A number as libvirt writes it in a node device (decimal, or 0x hex)."""
    value = (text or "").strip()
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(value, 10)
    except ValueError:
        raise InvalidInput(f"{where}: bad PCI {what} {value[:40]!r} in a node device") from None


def parse(xml: str | bytes, where: str) -> NodeDevice:
    """One node device; InvalidInput (naming ``where``) when it is not one."""
    root = xmlsafe.parse(xml, f"node device XML {where}")
    if root.tag != "device":
        raise InvalidInput(f"{where}: not a node device (the root element is <{root.tag}>, "
                           "not <device> as virsh nodedev-dumpxml writes)")
    name = _text(root.find("name")).strip()
    if not name:
        raise InvalidInput(f"{where}: a node device without a <name>")
    parent = _text(root.find("parent")).strip() or None
    driver = _text(root.find("driver/name")).strip() or None
    keys: list[tuple[str, str]] = []
    pci = node = None
    for cap in root.findall("capability"):
        kind = cap.get("type")
        if kind == "pci":
            if cap.find("bus") is None or cap.find("slot") is None or cap.find("function") is None:
                raise InvalidInput(f"{where}: a PCI node device without its bus, slot and function")
            parts = [_number(_text(cap.find(f)) or ("0" if f == "domain" else ""), f, where)
                     for f in PCI_FIELDS]
            for value, field, top in zip(parts, PCI_FIELDS, PCI_LIMITS):
                if not 0 <= value <= top:
                    raise InvalidInput(f"{where}: PCI {field} {value} is out of range (0 to {top})")
            pci = pci_address(*parts)
            keys.append((PCI, pci))
            numa = cap.find("numa")
            if numa is not None and numa.get("node") is not None:
                raw = numa.get("node").strip()
                try:
                    node = int(raw)
                except ValueError:
                    raise InvalidInput(f"{where}: bad <numa node={raw[:40]!r}>") from None
        elif kind == "net" and _text(cap.find("interface")).strip():
            keys.append((NET, _text(cap.find("interface")).strip()))
        elif kind == "storage" and _text(cap.find("block")).strip():
            keys.append((BLOCK, block_name(_text(cap.find("block")).strip())))
        elif kind == "mdev":
            uuid = _text(cap.find("uuid")).strip() or _mdev_uuid(name)
            if uuid:
                keys.append((MDEV, uuid.lower()))
    return NodeDevice(name, parent, tuple(keys), pci, node, driver)


def _mdev_uuid(name: str) -> str:
    """The UUID in a node device name ``mdev_d069d019_36ea_4111_8f0a_8c9a70e21366`` (older libvirt)."""
    rest = name[len("mdev_"):] if name.startswith("mdev_") else ""
    parts = rest.split("_")[:5]
    return "-".join(parts) if [len(p) for p in parts] == [8, 4, 4, 4, 12] else ""


def table(devices: list[NodeDevice], nodes: frozenset[int] | None = None, every_pci: bool = False) -> Table:
    """The Table of ``devices``: each one's node is its own (a PCI device's) or its nearest PCI
    parent's among ``devices``; a node the host lacks (``nodes``) is InvalidInput. Its assignable
    devices: those bound to vfio-pci, or with ``every_pci`` every PCI device (``--nodedev``)."""
    by_name = {d.name: d for d in devices}
    entries: dict[tuple[str, str], Location] = {}
    for dev in devices:
        here, via, depth = dev, None, 0
        while here is not None and here.pci is None and depth < 64:
            here, depth = by_name.get(here.parent or ""), depth + 1
        if here is not None and here.pci is not None:
            node = check_node(here.node, nodes, f"node device {here.name}")
            via = here.pci if here is not dev else None
            found = Location(True, node, via)
        else:
            found = Location(True, None)
        for key in dev.keys:
            entries[key] = found
    assignable = {d.pci: d.driver for d in devices if d.pci and (every_pci or d.driver == VFIO)}
    return Table(entries, assignable)


def load(paths: list[str], nodes: frozenset[int] | None = None) -> Table:
    """``--nodedev FILE`` (repeatable): the Table of those files, every PCI device among them
    assignable (the user names it)."""
    return table([parse(xmlsafe.read(path, "node device XML"), path) for path in paths], nodes, every_pci=True)
