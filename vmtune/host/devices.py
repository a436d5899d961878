"""Where the host's devices hang: the NUMA node of a PCI device, a disk and a NIC, and the PCI
device a mediated device (mdev) is carved from.

A ``Devices`` answers ``locate(kind, key)`` with a ``Location``: whether the host knows the device,
and its node (None: the device has none, as the kernel's ``numa_node`` -1 says). Three sources give
the same answers for the same machine (tests/test_devices.py checks it):

    SysfsDevices   a sysfs tree, read on demand: ``bus/pci/devices/ADDR/numa_node``; a disk's or a
                   NIC's node is the nearest ``numa_node`` up its device path (``class/block/NAME``,
                   ``class/net/NAME``), a virtual one's (device mapper, bridge, bond) the node all
                   its lower devices agree on; an mdev's is its parent's (``bus/mdev/devices/UUID``)
    Table          what ``virsh nodedev-dumpxml`` files say (host/nodedev.py), or libvirt's node
                   devices, live
    Chain          the first source that knows the device

``assignable()`` lists the PCI devices a domain can be given (passthrough-capable, for ``vmtune
map``): those bound to ``vfio-pci`` now (sysfs's ``bus/pci/devices/ADDR/driver``, a node device's
``<driver><name>``), and every PCI device of the ``--nodedev`` files, which the user names on
purpose (a managed hostdev is on its host driver while its domain is shut off). Not every device
with an IOMMU group: on a host with the IOMMU on that is every bridge, controller and NIC.

Keys: a PCI address ``dddd:bb:ss.f`` (lower case hex), an mdev UUID, a disk's device path or name
(``/dev/sda``; a symlink such as ``/dev/disk/by-id/...`` is followed where it exists), a NIC's name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import InvalidInput

PCI = "pci"
MDEV = "mdev"
BLOCK = "block"
NET = "net"
KINDS = (PCI, MDEV, BLOCK, NET)
MAX_DEPTH = 8  # lower devices followed (a bond of VLANs of a bridge ...)
PCI_FIELDS = ("domain", "bus", "slot", "function")  # a PCI address's parts
PCI_LIMITS = (0xFFFF, 0xFF, 0x1F, 7)  # the largest each part can be


@dataclass(frozen=True)
class Location:
    """Where one device hangs: ``known`` by the host or not, and its NUMA node (None: none)."""

    known: bool
    node: int | None = None
    via: str | None = None  # the PCI device its node was read from, when that is another device

    @property
    def constrains(self) -> bool:
        return self.known and self.node is not None


UNKNOWN = Location(False)
VFIO = "vfio-pci"  # the host driver of a PCI device set aside for guests


@dataclass(frozen=True)
class Assignable:
    """A passthrough-capable PCI device (``Devices.assignable``): its address, where it hangs, and
    the host driver it is bound to now (None: not known)."""

    key: str
    location: Location
    driver: str | None = None


def pci_address(domain: int, bus: int, slot: int, function: int) -> str:
    return f"{domain:04x}:{bus:02x}:{slot:02x}.{function:x}"


def block_name(path: str) -> str:
    """The kernel's name of the disk at ``path`` (``/dev/sda`` -> ``sda``): a symlink that exists
    here (``/dev/disk/by-id/...``, ``/dev/mapper/...``) is followed first."""
    try:
        real = os.path.realpath(path) if path.startswith("/dev/") else path
    except (OSError, ValueError):
        real = path
    return os.path.basename(real.rstrip("/"))


def check_node(node: int | None, nodes: frozenset[int] | None, what: str) -> int | None:
    """``node`` as a device's node: -1 (or below) is none; one the host lacks is InvalidInput."""
    if node is None or node < 0:
        return None
    if nodes is not None and node not in nodes:
        raise InvalidInput(f"{what} names NUMA node {node}, which this host does not have "
                           f"(its nodes: {', '.join(map(str, sorted(nodes)))})")
    return node


class Devices:
    """No device known: every ``locate`` is UNKNOWN (a host from capabilities alone)."""

    def locate(self, kind: str, key: str) -> Location:
        return UNKNOWN

    def assignable(self) -> tuple[Assignable, ...]:
        """The PCI devices a domain can be given, by address (the module's docstring says which)."""
        return ()

    def check(self) -> None:
        """InvalidInput when the source names a node the host lacks (sources read ahead check it
        as they load)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


NO_DEVICES = Devices()


class Chain(Devices):
    """The first of several sources that knows a device."""

    def __init__(self, *sources: Devices):
        self.sources = tuple(s for s in sources if s is not NO_DEVICES)

    def locate(self, kind: str, key: str) -> Location:
        for source in self.sources:
            found = source.locate(kind, key)
            if found.known:
                return found
        return UNKNOWN

    def assignable(self) -> tuple[Assignable, ...]:
        """Every source's, each where the chain finds it, with the first driver a source knows."""
        drivers: dict[str, str | None] = {}
        for source in self.sources:
            for dev in source.assignable():
                drivers[dev.key] = drivers.get(dev.key) or dev.driver
        return tuple(Assignable(key, self.locate(PCI, key), drivers[key]) for key in sorted(drivers))


class Table(Devices):
    """Devices listed ahead: (kind, key) -> Location; disks by their kernel name; and the PCI
    devices among them that a domain can be given (address -> driver, None when not known)."""

    def __init__(self, entries: Mapping[tuple[str, str], Location], assignable: Mapping[str, str | None] | None = None):
        self.entries = dict(entries)
        self.drivers = dict(assignable or {})

    def assignable(self) -> tuple[Assignable, ...]:
        return tuple(Assignable(key, self.locate(PCI, key), self.drivers[key]) for key in sorted(self.drivers))

    def locate(self, kind: str, key: str) -> Location:
        if kind == BLOCK:
            key = block_name(key)
        return self.entries.get((kind, key), UNKNOWN)

    def __len__(self) -> int:
        return len(self.entries)


class SysfsDevices(Devices):
    """The devices of the sysfs tree at ``root``, read when asked (and remembered)."""

    def __init__(self, root: str, nodes: frozenset[int] | None = None):
        self.root = root
        self.nodes = nodes
        self._seen: dict[tuple[str, str], Location] = {}

    def __repr__(self) -> str:
        return f"SysfsDevices({self.root!r})"

    def locate(self, kind: str, key: str) -> Location:
        if (kind, key) not in self._seen:
            self._seen[(kind, key)] = self._find(kind, key)
        return self._seen[(kind, key)]

    def _find(self, kind: str, key: str) -> Location:
        if kind == PCI:
            path = os.path.join(self.root, "bus", "pci", "devices", key)
            return self._up(os.path.realpath(path), key) if os.path.isdir(path) and "/" not in key else UNKNOWN
        if kind == MDEV:
            path = os.path.join(self.root, "bus", "mdev", "devices", key)
            if "/" in key or not os.path.isdir(path):
                return UNKNOWN
            parent = os.path.basename(os.path.dirname(os.path.realpath(path)))
            found = self.locate(PCI, parent)
            return Location(True, found.node, parent) if found.known else Location(True, None, parent)
        if kind in (BLOCK, NET):
            name = block_name(key) if kind == BLOCK else key
            return self._class(kind, name, 0) if name and "/" not in name and name not in (".", "..") else UNKNOWN
        return UNKNOWN

    def _class(self, kind: str, name: str, depth: int) -> Location:
        """A disk's or a NIC's location: the nearest ``numa_node`` up its device path; for a
        virtual device, the one node its lower devices (``slaves/``, ``lower_*``, ``brif/``) share."""
        path = os.path.join(self.root, "class", kind, name)
        if not os.path.exists(path):
            return UNKNOWN
        real = os.path.realpath(path)
        found = self._up(real, name)
        if found.node is not None or depth >= MAX_DEPTH:
            return found
        nodes = {self._class(kind, lower, depth + 1).node for lower in self._lowers(kind, real)}
        return Location(True, nodes.pop() if len(nodes) == 1 else None, found.via)

    def _lowers(self, kind: str, path: str) -> list[str]:
        names: list[str] = []
        try:
            if kind == BLOCK:
                names = os.listdir(os.path.join(path, "slaves"))
            else:
                names = [n[len("lower_"):] for n in os.listdir(path) if n.startswith("lower_")]
                if os.path.isdir(os.path.join(path, "brif")):
                    names += os.listdir(os.path.join(path, "brif"))
        except OSError:
            pass
        return sorted(set(names))

    def _up(self, real: str, what: str) -> Location:
        """The nearest ``numa_node`` from ``real`` up to the sysfs root (its ``device/`` first: a
        tree copied with its links followed has the parent there), and the PCI device it is on."""
        top = os.path.realpath(self.root)
        for path in [os.path.join(real, "device", "numa_node")] + _parents(real, top):
            text = _read(path)
            if text is None:
                continue
            try:
                node = int(text)
            except ValueError:
                raise InvalidInput(f"{path}: not a node number: {text[:40]!r}") from None
            where = os.path.basename(os.path.dirname(os.path.realpath(path)))
            return Location(True, check_node(node, self.nodes, f"{path} of {what}"), where if where != what else None)
        return Location(True, None)

    def check(self) -> None:
        """InvalidInput when a PCI device's ``numa_node`` names a node the host lacks (or is no
        number): the commands read every device once, so a broken tree is refused whatever the
        domains use."""
        for name in self._pci_names():
            self.locate(PCI, name)

    def assignable(self) -> tuple[Assignable, ...]:
        """The PCI devices bound to vfio-pci (``bus/pci/devices/ADDR/driver``)."""
        out = []
        for name in self._pci_names():
            driver = os.path.join(self.root, "bus", "pci", "devices", name, "driver")
            if os.path.basename(os.path.realpath(driver)) == VFIO and os.path.islink(driver):
                out.append(Assignable(name, self.locate(PCI, name), VFIO))
        return tuple(out)

    def _pci_names(self) -> list[str]:
        try:
            return sorted(os.listdir(os.path.join(self.root, "bus", "pci", "devices")))
        except OSError:
            return []


def _parents(path: str, top: str) -> list[str]:
    """``numa_node`` of ``path`` and of each folder above it, up to ``top`` (the sysfs root)."""
    out = []
    while path.startswith(top + os.sep):
        out.append(os.path.join(path, "numa_node"))
        path = os.path.dirname(path)
    return out


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None
