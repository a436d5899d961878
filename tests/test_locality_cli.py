"""Device locality (vmtune/placement/locality.py, issue 24) through the command line, ``vmtune plan``'s audit
and the doctor: --nodedev, what --explain and topology say, device-remote and device-shared, the
doctor's WARN, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures import doctortrees as trees
from fixtures.devtrees import Pci, Tree
from fixtures.devtrees import write_sysfs as write_devices
from vmtune import cli
from vmtune.placement.audit import DEVICE_REMOTE, DEVICE_SHARED, audit
from vmtune.doctor import diagnose
from vmtune.host import Host, nodedev

# No /etc/vmtune, $VMTUNE_* or user profiles of the machine (doctortrees.py).
pytestmark = pytest.mark.usefixtures("no_machine_vmtune")

AMD = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "hosts" / "lv-caps-x86_64-amd-2socket-8die-smt.xml"
GPU = ("<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x3b' "
       "slot='0x00' function='0x0'/></source></hostdev>")
NODEDEV = ("<device><name>pci_0000_3b_00_0</name><parent>computer</parent><capability type='pci'>"
           "<domain>0</domain><bus>59</bus><slot>0</slot><function>0</function><numa node='{node}'/>"
           "</capability></device>")


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def domain(name: str, vcpus: int, profile: str = "latency", devices: str = GPU) -> str:
    return (f"<domain type='kvm'><name>{name}</name><metadata><vmtune:tune xmlns:vmtune='https://vmtune.dev/xmlns/1' "
            f"profile='{profile}'/></metadata><memory unit='GiB'>2</memory><vcpu>{vcpus}</vcpu>"
            f"<os><type arch='x86_64' machine='q35'>hvm</type></os><devices>{devices}</devices></domain>")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "dom.xml").write_text(domain("db", 8))
    (tmp_path / "gpu1.xml").write_text(NODEDEV.format(node=1))
    return tmp_path


def test_rewrite_with_nodedev_explains_its_place(capsys, files):
    rc, out, err = run(capsys, "rewrite", files / "dom.xml", "--host", AMD, "--nodedev", files / "gpu1.xml", "--explain")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[1].startswith("guest OS: ")
    assert lines[2].startswith("placement: L3: 1 of the host's 8 L3 domains: L3 ")
    assert 'placement: device: hostdev 0000:3b:00.0 on node 1: on its node (device_locality = "required")' in lines
    rc, out, _ = run(capsys, "rewrite", files / "dom.xml", "--host", AMD, "--nodedev", files / "gpu1.xml", "--json")
    placement = json.loads(out)["placement"]
    assert placement["nodes"] == [1] and len(placement["l3"]) == 1 and placement["why"]


def test_without_nodedev_a_capabilities_host_warns_once(capsys, files):
    rc, out, err = run(capsys, "rewrite", files / "dom.xml", "--host", AMD, "-o", files / "out.xml")
    assert rc == 0 and err.count("vmtune: warning:") == 1 and "--nodedev" in err


def test_topology_shows_l3_domains(capsys):
    rc, out, _ = run(capsys, "topology", "--host", AMD)
    assert rc == 0 and "L3 4: CPUs 4-7,36-39, 16 MiB" in out
    rc, out, _ = run(capsys, "topology", "--host", AMD, "--json")
    data = json.loads(out)
    assert len(data["l3"]) == 8 and data["l3"][0] == {"id": 0, "cpus": "0-3,32-35", "size_kib": 16384}


@pytest.mark.parametrize("content, words", [
    ("<domain/>", "not a node device"),
    ("<device><name>x", "not well-formed"),
    (NODEDEV.format(node=5), "NUMA node 5, which this host does not have"),
    (NODEDEV.replace("<bus>59</bus>", "<bus>x</bus>"), "bad PCI bus"),
])
@pytest.mark.parametrize("command", ["rewrite", "map", "topology"])
def test_bad_nodedev_is_one_line_exit_1(capsys, files, content, words, command):
    (files / "bad.xml").write_text(content)
    extra = {"rewrite": [files / "dom.xml"], "map": [], "topology": []}[command]
    host = ["--host", AMD] if command != "map" else ["--host", AMD, "--claim", files / "dom.xml"]
    rc, out, err = run(capsys, command, *extra, *host, "--nodedev", files / "bad.xml")
    assert rc == 1 and err.count("\n") == 1 and err.startswith("vmtune: error: ") and words in err, err
    assert not (files / "out.xml").exists()


def test_missing_nodedev_file_is_one_line(capsys, files):
    rc, _, err = run(capsys, "rewrite", files / "dom.xml", "--host", AMD, "--nodedev", files / "none.xml")
    assert rc == 1 and err.count("\n") == 1 and "cannot read node device XML" in err


def test_a_bad_profile_value_is_one_line(capsys, files, monkeypatch):
    (files / "p").mkdir()
    (files / "p" / "odd.toml").write_text('inherit = "latency"\ndevice_locality = "sometimes"\n')
    (files / "p" / "kinds.toml").write_text('inherit = "latency"\n[cpu]\nkinds = "efficiency"\n')
    monkeypatch.setenv("VMTUNE_PROFILES", str(files / "p"))
    for name in ("odd", "kinds"):
        rc, _, err = run(capsys, "rewrite", files / "dom.xml", "--host", AMD, "--profile", name)
        assert rc == 1 and err.count("\n") == 1 and "vmtune: error:" in err, err


def test_a_cache_bank_naming_cpus_the_host_lacks_is_one_line(capsys, tmp_path):
    text = AMD.read_text().replace("cpus='24-27,56-59'>", "cpus='24-27,56-59,99'>")
    (tmp_path / "caps.xml").write_text(text)
    rc, _, err = run(capsys, "topology", "--host", tmp_path / "caps.xml")
    assert rc == 1 and err.count("\n") == 1 and "CPU(s) 99, which this host does not have" in err


def test_a_shared_cpu_list_naming_cpus_the_host_lacks_is_one_line(capsys, tmp_path):
    from fixtures.hosttrees import write_sysfs

    root = Path(write_sysfs(Host.from_capabilities(AMD.read_bytes()), str(tmp_path)))
    (root / "devices/system/cpu/cpu0/cache/index3/shared_cpu_list").write_text("0-3,32-35,200\n")
    rc, _, err = run(capsys, "topology", "--sysfs", root)
    assert rc == 1 and err.count("\n") == 1 and "200, which this host does not have" in err


# -- plan's audit ------------------------------------------------------------------------------------
def test_plan_reports_a_latency_domain_away_from_its_device(tmp_path):
    """Pinned to node 0 with its GPU on node 1: device-remote, naming the device and its node; a
    second domain with the same GPU: device-shared."""
    host = Host.from_capabilities(AMD.read_bytes())
    (tmp_path / "gpu.xml").write_text(NODEDEV.format(node=1))
    host = host.with_devices(nodedev.load([str(tmp_path / "gpu.xml")], frozenset(host.node_ids)))
    remote = trees.domain("far", [1, 2], node=0, hugepage_kib=None).replace("<devices/>", f"<devices>{GPU}</devices>")
    near = trees.domain("near", [17, 18], node=1, hugepage_kib=None).replace("<devices/>", f"<devices>{GPU}</devices>")
    report = audit(host, [(remote, "running"), (near, "shut off")])
    kinds = {p.kind: p for p in report.problems}
    assert kinds[DEVICE_REMOTE].domains == ("far",) and kinds[DEVICE_REMOTE].nodes == (1,)
    assert "hostdev 0000:3b:00.0 is on node 1" in kinds[DEVICE_REMOTE].message
    assert kinds[DEVICE_SHARED].domains == ("far", "near")
    assert [p.kind for p in audit(host, [(near, "running")]).problems] == []
    # a host that does not know the device: nothing to say
    assert DEVICE_REMOTE not in {p.kind for p in audit(Host.from_capabilities(AMD.read_bytes()),
                                                        [(remote, "running")]).problems}


# -- the doctor -------------------------------------------------------------------------------------
def test_doctor_warns_for_a_running_latency_domain_away_from_its_device(healthy_host_tree):  # noqa: F811
    """The doctor's host tree with the GPU on node 1 (as sysfs lays it out) and a running latency
    domain pinned to node 0: a WARN naming the device; a second one beside the device adds none."""
    write_devices(Tree([Pci("0000:3b:00.0", 1)]), str(healthy_host_tree.base / "sys"))
    xml = trees.domain("far", [1, 5], node=0, hugepage_kib=None).replace("<devices/>", f"<devices>{GPU}</devices>")
    trees.running(healthy_host_tree, xml)
    report = diagnose(healthy_host_tree.roots(), measure=False)
    warned = [f for f in report.findings if f.area == "domains" and "device-remote" in f.source]
    assert len(warned) == 1 and warned[0].level == "WARN" and "hostdev 0000:3b:00.0 is on node 1" in warned[0].found
    trees.running(healthy_host_tree, trees.domain("near", [3, 7], node=1, hugepage_kib=None)
                  .replace("<devices/>", f"<devices>{GPU}</devices>"), state="paused")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert [f.source for f in report.findings if f.area == "domains" and "device-remote" in f.source] == \
        [warned[0].source]
