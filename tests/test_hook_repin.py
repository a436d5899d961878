"""The migrate/restore filter (vmtune.hook.repin): re-pin a latency domain for this host, ABI-neutrally."""

from __future__ import annotations

import re

import pytest

import vmtune
from fixtures.hosttrees import write_sysfs
from fixtures.gridhost import make_host
from vmtune import cpuset, hook
from vmtune.hook import repin
from vmtune.hoststate.document import Lease
from vmtune.hoststate.statedir import StateDir
from vmtune.host import Host
from vmtune.xml.model import Domain

UUID = "33333333-3333-4333-8333-333333333333"
# Hand-formatted (single quotes, odd spacing) so that "byte for byte" means something.
DEVICES = """<devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'><driver name='qemu' type='raw'/>
      <source file='/var/lib/x.img'/>   <target dev='vda' bus='virtio'/></disk>
    <interface type='network'><mac address='52:54:00:12:34:56'/><source network='default'/><model type='virtio'/></interface>
    <memballoon model='none'/>
  </devices>"""


def tagged(host: Host, vcpus: int = 2, cells: bool = False) -> str:
    """A latency domain as vmtune's rewriter leaves it for ``host``, with hand-written devices."""
    numa = ""
    if cells:
        half = vcpus // 2
        numa = (f"<cpu><numa><cell id='0' cpus='0-{half - 1}' memory='512' unit='MiB'/>"
                f"<cell id='1' cpus='{half}-{vcpus - 1}' memory='512' unit='MiB'/></numa></cpu>")
    xml = (f"<domain type='kvm'><name>lat</name><uuid>{UUID}</uuid><memory unit='MiB'>1024</memory>"
           f"<vcpu>{vcpus}</vcpu><os><type arch='x86_64' machine='q35'>hvm</type></os>{numa}"
           "<devices><memballoon model='none'/></devices></domain>")
    out = vmtune.rewrite(xml, host, "latency").xml
    return re.sub(r"<devices>.*</devices>", DEVICES, out, flags=re.S)


def strip_mutable(xml: str) -> str:
    """The XML without the parts the filter may change."""
    for tag in ("cputune", "numatune", "hugepages"):
        xml = re.sub(rf"<{tag}(\s[^>]*)?(/>|>.*?</{tag}>)", f"<{tag}/>", xml, flags=re.S)
    return xml


def pins(xml: str) -> dict[int, frozenset[int]]:
    from vmtune.xml import xmlsafe

    return Domain(xmlsafe.parse(xml, "x")).vcpupins()


@pytest.fixture
def place(tmp_path, monkeypatch):
    """Put ``host`` in $VMTUNE_SYSFS and ``leases`` in the state dir; returns a setter."""
    monkeypatch.setenv("VMTUNE_STATE_DIR", str(tmp_path / "state"))
    config = tmp_path / "vmtune.toml"
    config.write_text("")
    monkeypatch.setenv("VMTUNE_CONFIG", str(config))
    (tmp_path / "profiles").mkdir()
    monkeypatch.setenv("VMTUNE_PROFILES", str(tmp_path / "profiles"))
    monkeypatch.setenv("VMTUNE_SYSLOG", "0")
    count = [0]

    def setter(host: Host, held: dict[str, str] | None = None) -> Host:
        count[0] += 1
        sysfs = write_sysfs(host, str(tmp_path / f"host{count[0]}"))
        monkeypatch.setenv("VMTUNE_SYSFS", sysfs)
        store = StateDir(str(tmp_path / "state"))
        with store.locked() as state:
            state.leases.clear()
            for name, cpus in (held or {}).items():
                state.add(f"uuid-{name}", name, "latency", frozenset(cpuset.parse(cpus)))
            store.commit(state)
        return Host.from_sysfs(sysfs)

    return setter


def call(xml: str, op: str = "migrate") -> int:
    return hook.main(["lat", op, "begin", "-"], xml.encode())


@pytest.mark.parametrize("op", ["migrate", "restore"])
def test_same_host_prints_nothing(place, capsys, op):
    host = place(make_host(nodes=2, cores=4, threads=2))
    assert call(tagged(host), op) == 0
    assert capsys.readouterr().out == ""


def test_pins_held_by_a_lease_are_moved_and_nothing_else_changes(place, capsys):
    host = place(make_host(nodes=2, cores=4, threads=2))
    xml = tagged(host)
    before = frozenset().union(*pins(xml).values())
    held = cpuset.format(frozenset().union(*(host.core_of(c) for c in before)))
    place(make_host(nodes=2, cores=4, threads=2), {"other": held})
    assert call(xml) == 0
    out = capsys.readouterr().out
    assert out, "expected a re-pinned XML"
    after = frozenset().union(*pins(out).values())
    assert len(after) == len(before) and not after & cpuset.parse(held)
    assert strip_mutable(out) == strip_mutable(xml)  # devices, cpu, memory, cells: byte for byte
    assert DEVICES in out
    assert out.startswith(xml[: xml.index("<cputune")])  # everything up to cputune untouched


def test_cells_and_memnodes_follow_the_new_host(place, capsys):
    """A two-cell domain moved to a host where its nodes are swapped round: memnode nodesets and pins
    change, guest cells stay byte for byte."""
    host = place(make_host(nodes=2, cores=4, threads=2))
    xml = tagged(host, vcpus=4, cells=True)
    assert "<memnode" in xml
    taken = cpuset.format(frozenset(host.cell(0).cpus))
    place(make_host(nodes=3, cores=4, threads=2), {"other": taken})
    assert call(xml) == 0
    out = capsys.readouterr().out
    assert out and "<memnode" in out
    assert strip_mutable(out) == strip_mutable(xml)
    assert not frozenset().union(*pins(out).values()) & cpuset.parse(taken)


def test_impossible_host_exits_1_with_one_line(place, capsys):
    big = place(make_host(nodes=2, cores=4, threads=2))
    xml = tagged(big, vcpus=6)
    place(make_host(nodes=1, cores=2, threads=1))
    assert call(xml) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert len(out.err.strip().splitlines()) == 1 and "cannot be placed" in out.err


@pytest.mark.parametrize("profile", [None, "balanced"])
def test_untagged_or_not_latency_prints_nothing(place, capsys, profile):
    host = place(make_host(nodes=1, cores=2, threads=1))  # pins below name CPUs this host lacks
    tag = (f'<metadata><vmtune:tune xmlns:vmtune="https://vmtune.dev/xmlns/1" profile="{profile}"/></metadata>'
           if profile else "")
    xml = (f"<domain type='kvm'><name>x</name>{tag}<memory unit='MiB'>128</memory><vcpu>1</vcpu>"
           "<cputune><vcpupin vcpu='0' cpuset='40'/></cputune></domain>")
    assert host
    assert call(xml) == 0 and call(xml, "restore") == 0
    assert capsys.readouterr().out == ""


def test_ledger_from_leases_skips_the_domain_itself():
    led = repin.ledger_from_leases({"u1": Lease("a", cpus=frozenset({2, 3})), "u2": Lease("b", cpus=frozenset({5}))},
                                   "u1", "a")
    assert led.dedicated == frozenset({5}) and [c.name for c in led.claims] == ["b"]


def test_repin_follows_the_l3_domains_and_a_required_device(tmp_path):
    """A restore on a host with L3 domains and the domain's GPU on node 1 (a sysfs tree as the
    kernel lays it out): the filter re-pins through the rewriter's placement, onto node 1 and one
    L3 domain, in the same bytes everywhere else."""
    from pathlib import Path

    from fixtures.devtrees import Pci, Tree
    from fixtures.devtrees import write_sysfs as write_devices

    amd = Host.from_capabilities((Path(__file__).resolve().parents[2] / "shared" / "corpus" / "hosts" /
                                  "lv-caps-x86_64-amd-2socket-8die-smt.xml").read_bytes())
    root = write_sysfs(amd, str(tmp_path))
    write_devices(Tree([Pci("0000:3b:00.0", 1)]), root)
    here = Host.from_sysfs(root, arch="x86_64")
    gpu = ("<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x3b' "
           "slot='0x00' function='0x0'/></source></hostdev>")
    xml = tagged(make_host(2, 8, 2), vcpus=8).replace("<memballoon", gpu + "<memballoon")
    assert {here.cpus[c].node for p in pins(xml).values() for c in p} != {1}  # where the other host put it
    out = repin.filter_xml(xml.encode(), here, {}, vmtune.Config())
    new = [next(iter(p)) for _, p in sorted(pins(out).items())]
    assert {here.cpus[c].node for c in new} == {1}
    assert len({here.l3_of(c) for c in new}) == 1
    assert strip_mutable(out) == strip_mutable(xml)
    assert repin.filter_xml(out.encode(), here, {}, vmtune.Config()) is None  # right here now
