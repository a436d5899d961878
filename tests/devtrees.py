"""Test helpers: a host's PCI devices, NICs, disks and mdevs, drawn by hypothesis and written both
as the kernel lays them out in sysfs and as libvirt's node devices (``virsh nodedev-dumpxml``).

``pci_trees(node_ids)`` draws a ``Tree``; ``write_sysfs(tree, sys_root)`` writes
``devices/pci*/...`` with the ``bus/pci/devices``, ``bus/mdev/devices``, ``class/net`` and
``class/block`` links as relative symlinks (bridges, bonds and device-mapper disks as virtual
devices with ``brif/``, ``lower_*`` and ``slaves/``); ``nodedev_xmls(tree)`` gives one XML per
device, parents included (a SCSI disk's chain of scsi, scsi_target and scsi_host devices).
``expected(tree)`` is what every source must answer: ``(kind, key) -> node or None``; ``assignable(tree)``
the PCI devices bound to vfio-pci, as ``Devices.assignable`` must list them (sysfs, libvirt's list).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from hypothesis import strategies as st


@dataclass
class Pci:
    address: str  # dddd:bb:ss.f
    node: int  # -1: none
    bridge: str | None = None  # the PCI bridge above it (its own directory), if any
    nets: list[str] = field(default_factory=list)
    disks: list[str] = field(default_factory=list)  # sdX (behind SCSI) or nvmeXn1
    mdevs: list[str] = field(default_factory=list)  # UUIDs
    numa_written: str = "node"  # nodedev: "node" writes <numa node=N/>, "omit" leaves it out when N is -1
    driver: str | None = None  # the host driver it is bound to: vfio-pci (set aside for guests), another, none


@dataclass
class Tree:
    devices: list[Pci]
    bridges: dict[str, list[str]] = field(default_factory=dict)  # virtual NIC -> its ports (NIC names)
    mappers: dict[str, list[str]] = field(default_factory=dict)  # dm-N -> its slaves (disk names)


def _uuid(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-{n:012x}"


@st.composite
def pci_trees(draw, node_ids: tuple[int, ...]) -> Tree:
    """A PCI tree: devices on every node and with none (-1), NICs, disks and mdevs under them,
    a bridge or bond over NICs, a device-mapper disk over disks."""
    count = draw(st.integers(1, 6))
    devices, nets, disks = [], [], []
    for i in range(count):
        bus = 0x10 * (i + 1)
        node = draw(st.sampled_from(list(node_ids) + [-1]))
        dev = Pci(f"0000:{bus:02x}:00.0", node, f"0000:{bus - 1:02x}:01.0" if draw(st.booleans()) else None,
                  numa_written=draw(st.sampled_from(["node", "omit"])),
                  driver=draw(st.sampled_from(["vfio-pci", "nvidia", None])))
        if draw(st.booleans()):
            dev.nets.append(f"enp{bus}s0")
        if draw(st.booleans()):
            dev.disks.append(draw(st.sampled_from([f"sd{chr(97 + i)}", f"nvme{i}n1"])))
        if draw(st.booleans()):
            dev.mdevs.append(_uuid(i + 1))
        nets += dev.nets
        disks += dev.disks
        devices.append(dev)
    tree = Tree(devices)
    if nets and draw(st.booleans()):
        tree.bridges[draw(st.sampled_from(["br0", "bond0"]))] = sorted(draw(st.sets(st.sampled_from(nets), min_size=1)))
    if disks and draw(st.booleans()):
        tree.mappers["dm-0"] = sorted(draw(st.sets(st.sampled_from(disks), min_size=1)))
    return tree


def _node(tree: Tree, *, net: str | None = None, disk: str | None = None) -> int | None:
    for dev in tree.devices:
        if net in dev.nets or disk in dev.disks:
            return dev.node if dev.node >= 0 else None
    return None


def expected(tree: Tree, virtual: bool = True) -> dict[tuple[str, str], int | None]:
    """(kind, key) -> the node every source must give (None: no node). ``virtual``: bridges,
    bonds and device-mapper disks too (sysfs knows them, node devices do not)."""
    out: dict[tuple[str, str], int | None] = {}
    for dev in tree.devices:
        node = dev.node if dev.node >= 0 else None
        out[("pci", dev.address)] = node
        out.update({("net", n): node for n in dev.nets})
        out.update({("block", d): node for d in dev.disks})
        out.update({("block", f"/dev/{d}"): node for d in dev.disks})
        out.update({("mdev", u): node for u in dev.mdevs})
    if virtual:
        for name, ports in tree.bridges.items():
            nodes = {_node(tree, net=p) for p in ports}
            out[("net", name)] = nodes.pop() if len(nodes) == 1 else None
        for name, slaves in tree.mappers.items():
            nodes = {_node(tree, disk=s) for s in slaves}
            out[("block", name)] = nodes.pop() if len(nodes) == 1 else None
    return out


def assignable(tree: Tree) -> dict[str, int | None]:
    """The PCI devices bound to vfio-pci: address -> node (None: none)."""
    return {d.address: (d.node if d.node >= 0 else None) for d in tree.devices if d.driver == "vfio-pci"}


# -- sysfs ------------------------------------------------------------------------------------------
def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="ascii") as fh:
        fh.write(text)


def _link(link: str, target: str) -> None:
    """A relative symlink ``link`` -> ``target``, as sysfs makes them."""
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(os.path.relpath(target, os.path.dirname(link)), link)


def write_sysfs(tree: Tree, sys_root: str) -> None:
    """The tree under ``sys_root`` as the kernel lays it out."""
    devices = os.path.join(sys_root, "devices")
    for i, dev in enumerate(tree.devices):
        top = os.path.join(devices, f"pci0000:{i:02x}")
        here = os.path.join(top, dev.bridge) if dev.bridge else top
        if dev.bridge:
            _write(os.path.join(here, "numa_node"), f"{dev.node}\n")  # a bridge has the node of its bus
        path = os.path.join(here, dev.address)
        _write(os.path.join(path, "numa_node"), f"{dev.node}\n")
        _write(os.path.join(path, "vendor"), "0x10de\n")
        _link(os.path.join(sys_root, "bus", "pci", "devices", dev.address), path)
        if dev.driver:
            driver = os.path.join(sys_root, "bus", "pci", "drivers", dev.driver)
            os.makedirs(driver, exist_ok=True)
            _link(os.path.join(path, "driver"), driver)
        for net in dev.nets:
            _write(os.path.join(path, "net", net, "address"), "52:54:00:00:00:01\n")
            _link(os.path.join(sys_root, "class", "net", net), os.path.join(path, "net", net))
        for disk in dev.disks:
            if disk.startswith("nvme"):
                where = os.path.join(path, "nvme", disk[:-2], disk)
            else:
                where = os.path.join(path, "host0", "target0:0:0", "0:0:0:0", "block", disk)
            _write(os.path.join(where, "size"), "2048\n")
            _write(os.path.join(where, f"{disk}1", "partition"), "1\n")  # a partition below it
            _link(os.path.join(sys_root, "class", "block", disk), where)
            _link(os.path.join(sys_root, "class", "block", f"{disk}1"), os.path.join(where, f"{disk}1"))
        for uuid in dev.mdevs:
            _write(os.path.join(path, uuid, "uevent"), "MDEV_TYPE=nvidia-11\n")
            _link(os.path.join(sys_root, "bus", "mdev", "devices", uuid), os.path.join(path, uuid))
    virtual = os.path.join(devices, "virtual")
    for name, ports in tree.bridges.items():
        path = os.path.join(virtual, "net", name)
        _write(os.path.join(path, "address"), "52:54:00:00:00:02\n")
        _link(os.path.join(sys_root, "class", "net", name), path)
        for port in ports:
            _link(os.path.join(path, f"lower_{port}"), os.path.join(sys_root, "class", "net", port))
            if name.startswith("br"):
                _link(os.path.join(path, "brif", port), os.path.join(sys_root, "class", "net", port, "brport"))
    for name, slaves in tree.mappers.items():
        path = os.path.join(virtual, "block", name)
        _write(os.path.join(path, "size"), "4096\n")
        _link(os.path.join(sys_root, "class", "block", name), path)
        for slave in slaves:
            _link(os.path.join(path, "slaves", slave), os.path.join(sys_root, "class", "block", slave))


# -- node devices ------------------------------------------------------------------------------------
def _pci_name(address: str) -> str:
    return "pci_" + address.replace(":", "_").replace(".", "_")


def nodedev_xmls(tree: Tree) -> list[str]:
    """One ``virsh nodedev-dumpxml`` text per device of the tree (physical ones: libvirt lists no
    bridge, bond or device-mapper disk)."""
    out = []
    for i, dev in enumerate(tree.devices):
        domain, bus, rest = dev.address.split(":")
        slot, function = rest.split(".")
        parent = _pci_name(dev.bridge) if dev.bridge else "computer"
        if dev.bridge:
            b_bus, b_rest = dev.bridge.split(":")[1:]
            out.append(_pci_xml(dev.bridge, "computer", int(b_bus, 16), int(b_rest.split(".")[0], 16),
                                int(b_rest.split(".")[1], 16), dev.node, dev.numa_written, "pcieport"))
        out.append(_pci_xml(dev.address, parent, int(bus, 16), int(slot, 16), int(function, 16), dev.node,
                            dev.numa_written, dev.driver))
        name = _pci_name(dev.address)
        for net in dev.nets:
            out.append(f"<device>\n  <name>net_{net}_52_54_00_00_00_01</name>\n  <parent>{name}</parent>\n"
                       f"  <capability type='net'>\n    <interface>{net}</interface>\n"
                       f"    <address>52:54:00:00:00:01</address>\n  </capability>\n</device>\n")
        for disk in dev.disks:
            above = name
            if not disk.startswith("nvme"):
                chain = [(f"scsi_host{i}", "scsi_host", f"<host>{i}</host>"),
                         (f"scsi_target{i}_0_0", "scsi_target", f"<target>target{i}:0:0</target>"),
                         (f"scsi_{i}_0_0_0", "scsi", f"<host>{i}</host><bus>0</bus><target>0</target><lun>0</lun>")]
                for cname, ctype, body in chain:
                    out.append(f"<device><name>{cname}</name><parent>{above}</parent>"
                               f"<capability type='{ctype}'>{body}</capability></device>")
                    above = cname
            out.append(f"<device>\n  <name>block_{disk}_SERIAL{i}</name>\n  <parent>{above}</parent>\n"
                       f"  <capability type='storage'>\n    <block>/dev/{disk}</block>\n"
                       f"    <drive_type>disk</drive_type>\n  </capability>\n</device>\n")
        for uuid in dev.mdevs:
            out.append(f"<device>\n  <name>mdev_{uuid.replace('-', '_')}</name>\n  <parent>{name}</parent>\n"
                       f"  <capability type='mdev'>\n    <type id='nvidia-11'/>\n    <uuid>{uuid}</uuid>\n"
                       f"    <iommuGroup number='{i}'/>\n  </capability>\n</device>\n")
    return out


def _pci_xml(address: str, parent: str, bus: int, slot: int, function: int, node: int, numa: str,
             driver: str | None) -> str:
    numa_el = "" if node < 0 and numa == "omit" else f"    <numa node='{node}'/>\n"
    driver_el = f"  <driver>\n    <name>{driver}</name>\n  </driver>\n" if driver else ""
    return (f"<device>\n  <name>{_pci_name(address)}</name>\n  <parent>{parent}</parent>\n"
            f"{driver_el}  <capability type='pci'>\n"
            f"    <class>0x030000</class>\n    <domain>0</domain>\n    <bus>{bus}</bus>\n    <slot>{slot}</slot>\n"
            f"    <function>{function}</function>\n    <product id='0x1db6'>GV100GL</product>\n"
            f"    <vendor id='0x10de'>NVIDIA Corporation</vendor>\n{numa_el}  </capability>\n</device>\n")
