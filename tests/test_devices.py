"""Where a host's devices hang (vmtune/host/devices.py, nodedev.py, vmtune/placement/locality.py): sysfs and
libvirt's node devices give the same node for the same machine; a domain's devices are read as
libvirt reads them; bad input is one line."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.devtrees import Pci, Tree, assignable, expected, nodedev_xmls, pci_trees, write_sysfs
from fixtures.hosttrees import hosts
from fixtures.hosttrees import write_sysfs as write_host
from vmtune.placement import locality
from vmtune.xml import xmlsafe
from vmtune.errors import InvalidInput
from vmtune.host import Host, nodedev
from vmtune.host.devices import NO_DEVICES, SysfsDevices, Table
from vmtune.xml.model import Domain

LIBVIRT_NODEDEV = Path(__file__).parent / "data" / "libvirt" / "nodedev"


def _table(xmls: list[str], nodes) -> Table:
    return nodedev.table([nodedev.parse(x, f"#{i}") for i, x in enumerate(xmls)], frozenset(nodes))


def _answers(devices, keys) -> dict:
    out = {}
    for kind, key in keys:
        found = devices.locate(kind, key)
        assert found.known, (kind, key)
        out[(kind, key)] = found.node
    return out


# -- the two sources agree ---------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_sysfs_and_node_devices_give_the_same_nodes(data):
    """Every PCI device, NIC, disk (by name and by /dev path) and mdev has the node the tree says,
    from sysfs (bridges, bonds and device-mapper disks too) and from node-device XML."""
    host = data.draw(hosts(arches=("x86_64",), max_nodes=3, memory_only=False))
    tree = data.draw(pci_trees(host.node_ids))
    with tempfile.TemporaryDirectory() as d:
        root = write_host(host, d)
        write_sysfs(tree, root)
        loaded = Host.from_sysfs(root, arch="x86_64")
        want = expected(tree)
        assert _answers(loaded.devices, want) == want
        physical = expected(tree, virtual=False)
        assert _answers(_table(nodedev_xmls(tree), host.node_ids), physical) == physical
        # partitions hang where their disk does
        for dev in tree.devices:
            for disk in dev.disks:
                assert loaded.devices.locate("block", f"{disk}1").node == want[("block", disk)]


def test_an_unknown_device_is_not_known(tmp_path):
    host = Host.from_capabilities(_caps())
    assert host.devices is NO_DEVICES
    assert not host.devices.locate("pci", "0000:3b:00.0").known
    sysfs = SysfsDevices(str(tmp_path))
    for kind, key in (("pci", "0000:3b:00.0"), ("mdev", "x"), ("block", "/dev/sdz"), ("net", "eth9"),
                      ("pci", "../../etc"), ("net", ".."), ("block", "")):
        assert not sysfs.locate(kind, key).known


def test_this_machines_devices_are_read():
    """This machine's own /sys: every PCI device is known, with a node of this host or none."""
    host = Host.probe()
    names = os.listdir("/sys/bus/pci/devices") if os.path.isdir("/sys/bus/pci/devices") else []
    if not names:
        pytest.skip("this machine has no PCI devices in sysfs")
    for name in names:
        found = host.devices.locate("pci", name)
        assert found.known and (found.node is None or found.node in host.node_ids)
    for name in os.listdir("/sys/class/net"):
        assert host.devices.locate("net", name).known


# -- node-device XML -----------------------------------------------------------------------------------
@pytest.mark.skipif(not LIBVIRT_NODEDEV.is_dir(), reason="libvirt's node-device test data is not in tests/data")
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_sysfs_and_node_devices_list_the_same_assignable_devices(data):
    """The PCI devices bound to vfio-pci, with their nodes, are the assignable ones from sysfs (its
    driver link) and from libvirt's node devices (its <driver>), and no other (a bridge, a device on
    another driver or on none); from --nodedev files, every PCI device given is, with its driver."""
    host = data.draw(hosts(arches=("x86_64",), max_nodes=3, memory_only=False))
    tree = data.draw(pci_trees(host.node_ids))
    want = assignable(tree)
    with tempfile.TemporaryDirectory() as d:
        root = write_host(host, d)
        write_sysfs(tree, root)
        loaded = Host.from_sysfs(root, arch="x86_64")
        got = {a.key: a.location.node for a in loaded.devices.assignable() if a.driver == "vfio-pci"}
        assert got == want and len(loaded.devices.assignable()) == len(want)
        live = _table(nodedev_xmls(tree), host.node_ids)
        assert {a.key: a.location.node for a in live.assignable()} == want
        assert {a.driver for a in live.assignable()} <= {"vfio-pci"}
        paths = []
        for i, xml in enumerate(nodedev_xmls(tree)):
            paths.append(os.path.join(d, f"dev{i}.xml"))
            Path(paths[-1]).write_text(xml)
        given_ = nodedev.load(paths, frozenset(host.node_ids))
        every = {dev.address: dev.driver for dev in tree.devices} | {dev.bridge: "pcieport" for dev in tree.devices
                                                                       if dev.bridge}
        assert {a.key: a.driver for a in given_.assignable()} == every
        chained = loaded.with_devices(given_).devices.assignable()
        assert {a.key for a in chained} == set(every) and all(a.location.known for a in chained)


def test_libvirts_own_node_devices_parse():
    """Every node device of libvirt's own test data (tests/data/libvirt/SOURCES.md) is read; a PCI
    one gives its address, and its node where it has <numa>."""
    found = []
    for path in sorted(LIBVIRT_NODEDEV.glob("*.xml")):
        dev = nodedev.parse(xmlsafe.read(str(path), "node device XML"), path.name)
        found.append(dev)
        root = xmlsafe.parse(path.read_bytes())
        numa = root.find("capability[@type='pci']/numa")
        if numa is not None:
            assert dev.node == int(numa.get("node"))
        if root.find("capability[@type='pci']") is not None:
            assert dev.pci and any(kind == "pci" for kind, _ in dev.keys)
    table = nodedev.table(found)  # no host: any node
    assert all(table.locate(kind, key).known for d in found for kind, key in d.keys)
    assert any(d.node is not None for d in found)


@pytest.mark.parametrize("xml, words", [
    ("<domain/>", "not a node device"),
    ("<device>", "not well-formed"),
    ("<device><name>x</name><capability type='pci'><bus>zz</bus><slot>0</slot><function>0</function></capability></device>", "bad PCI bus"),
    ("<device><name>x</name><capability type='pci'><domain>0</domain></capability></device>", "bus, slot"),
    ("<device><capability type='pci'/></device>", "without a <name>"),
    ("<device><name>p</name><capability type='pci'><domain>0</domain><bus>1</bus><slot>0</slot>"
     "<function>0</function><numa node='one'/></capability></device>", "bad <numa"),
    ("<!DOCTYPE d [<!ENTITY x 'y'>]><device>&x;</device>", "entity"),
])
def test_bad_node_devices_are_one_line(xml, words):
    with pytest.raises(InvalidInput) as err:
        nodedev.parse(xml, "f.xml")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_node_the_host_lacks_is_refused(tmp_path):
    xml = ("<device><name>pci_0000_3b_00_0</name><capability type='pci'><domain>0</domain><bus>59</bus>"
           "<slot>0</slot><function>0</function><numa node='5'/></capability></device>")
    (tmp_path / "d.xml").write_text(xml)
    with pytest.raises(InvalidInput, match="NUMA node 5, which this host does not have"):
        nodedev.load([str(tmp_path / "d.xml")], frozenset({0, 1}))
    host = Host.from_capabilities(_caps())
    root = write_host(host, str(tmp_path / "t"))
    path = Path(root) / "devices" / "pci0000:00" / "0000:3b:00.0"
    path.mkdir(parents=True)
    (path / "numa_node").write_text("7\n")
    os.makedirs(Path(root) / "bus" / "pci" / "devices")
    os.symlink("../../../devices/pci0000:00/0000:3b:00.0", Path(root) / "bus" / "pci" / "devices" / "0000:3b:00.0")
    with pytest.raises(InvalidInput, match="NUMA node 7"):
        Host.from_sysfs(root).devices.locate("pci", "0000:3b:00.0")


# -- a domain's devices ---------------------------------------------------------------------------------
DOMAIN = """<domain type='kvm'><name>d</name><memory>1048576</memory><vcpu>2</vcpu>
<os><type arch='x86_64'>hvm</type></os><devices>
  <hostdev mode='subsystem' type='pci' managed='yes'>
    <source><address domain='0x0000' bus='0x3b' slot='0x00' function='0x1'/></source></hostdev>
  <hostdev mode='subsystem' type='pci'><source><address bus='59' slot='0x1f' function='7'/></source></hostdev>
  <hostdev mode='subsystem' type='pci'><source><address domain='0' bus='010' slot='0' function='0'/></source></hostdev>
  <hostdev mode='subsystem' type='pci'><source><address domain='0' bus='0x3b' slot='0x40' function='0'/></source></hostdev>
  <hostdev mode='subsystem' type='usb'><source><vendor id='0x1234'/><product id='0xbeef'/></source></hostdev>
  <hostdev mode='capabilities' type='storage'><source><block>/dev/sdf</block></source></hostdev>
  <hostdev mode='subsystem' type='mdev' model='vfio-pci'>
    <source><address uuid='C2177883-F1BB-47F0-914D-32A22E3A8804'/></source></hostdev>
  <interface type='hostdev' managed='yes'>
    <source><address type='pci' domain='0x0000' bus='0x81' slot='0x10' function='0x2'/></source></interface>
  <interface type='direct'><source dev='eth0' mode='bridge'/><model type='virtio'/></interface>
  <interface type='bridge'><source bridge='br0'/></interface>
  <interface type='network'><source network='default'/></interface>
  <disk type='nvme' device='disk'><source type='pci' managed='yes' namespace='1'>
    <address domain='0x0000' bus='0x02' slot='0x00' function='0x0'/></source><target dev='vdb' bus='virtio'/></disk>
  <disk type='block' device='disk'><source dev='/dev/sdc'/><target dev='vdc' bus='virtio'/></disk>
  <disk type='file' device='disk'><source file='/var/lib/x.img'/><target dev='vdd' bus='virtio'/></disk>
</devices></domain>"""


def test_a_domains_devices_are_read_as_libvirt_reads_them():
    """PCI addresses in hex, decimal and octal (C's strtoul base 0), the domain part defaulting to 0;
    a slot over 0x1f is no address; USB hostdevs, network NICs and file disks are no host device."""
    uses = locality.uses(Domain(xmlsafe.parse(DOMAIN)))
    assert [(u.kind, u.key, u.passthrough) for u in uses] == [
        ("pci", "0000:3b:00.1", True), ("pci", "0000:3b:1f.7", True), ("pci", "0000:08:00.0", True),
        ("mdev", "c2177883-f1bb-47f0-914d-32a22e3a8804", True), ("pci", "0000:81:10.2", True),
        ("net", "eth0", False), ("net", "br0", False), ("pci", "0000:02:00.0", True), ("block", "/dev/sdc", False)]
    assert [u.what for u in uses][:1] == ["hostdev 0000:3b:00.1"]


def _caps() -> str:
    from fixtures.hosttrees import caps_xml
    from vmtune.host import Cell, Cpu

    cpus = {i: Cpu(i, i // 4, 0, 0, i, frozenset({i})) for i in range(8)}
    cells = (Cell(0, (0, 1, 2, 3), 1 << 22), Cell(1, (4, 5, 6, 7), 1 << 22))
    return caps_xml(Host("x86_64", cells, cpus))


@pytest.mark.parametrize("field, value", [("function", "9"), ("bus", "65536"), ("domain", "-1"), ("slot", "32")])
def test_a_pci_address_out_of_range_is_refused(field, value):
    xml = ("<device><name>p</name><capability type='pci'><domain>0</domain><bus>1</bus><slot>0</slot>"
           "<function>0</function></capability></device>").replace(f"<{field}>", f"<{field}>{value}<!--", 1) \
        .replace(f"</{field}>", f"--></{field}>", 1)
    with pytest.raises(InvalidInput, match=f"PCI {field}"):
        nodedev.parse(xml, "f.xml")


def test_a_bad_numa_node_is_refused_even_when_no_domain_uses_the_device(tmp_path, capsys):
    from vmtune import cli

    root = write_host(Host.from_capabilities(_caps()), str(tmp_path))
    write_sysfs(Tree([Pci("0000:3b:00.0", 1)]), root)
    (Path(root) / "devices/pci0000:00/0000:3b:00.0/numa_node").write_text("5\n")
    for argv in (["topology", "--sysfs", root], ["map", "--sysfs", root]):
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "NUMA node 5" in err


def test_a_tree_copied_with_its_links_followed_keeps_its_nodes(tmp_path):
    """``cp -rL`` of a sysfs tree: bus/pci/devices/ADDR is a folder of its own, with its
    ``numa_node``: the node is still found."""
    import shutil

    from fixtures.devtrees import Pci, Tree

    root = write_host(Host.from_capabilities(_caps()), str(tmp_path / "a"))
    write_sysfs(Tree([Pci("0000:3b:00.0", 1, nets=["eth5"])]), root)
    copy = tmp_path / "b"
    shutil.copytree(Path(root).parent, copy, symlinks=False)
    host = Host.from_sysfs(str(copy / "sys"))
    assert host.devices.locate("pci", "0000:3b:00.0").node == 1
