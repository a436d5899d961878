"""The rewriter (vmtune.rewrite) against the real libvirtd: virsh define accepts the output, and a
tuned guest boots.

Needs root (scripts/setup-libvirt installs and starts libvirtd); guests run under TCG, so kvm
domains are defined as type='qemu' (libvirt refuses type='kvm' without /dev/kvm).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from lxml import etree

from fixtures import guest
import vmtune
from conftest import CORPUS, EXAMPLES
from fixtures.libvirt_env import VirshError, boot, define, undefine, virsh
from fixtures.corpus import NEWER_THAN_SCHEMA, REFUSED
from vmtune.errors import DoesNotFit

EXAMPLE_HOST = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
DOMAINS = [p for p in sorted((CORPUS / "domains").glob("*.xml")) if p.name not in REFUSED | NEWER_THAN_SCHEMA]
IMAGES = Path("/var/lib/libvirt/images")


def as_qemu(xml: bytes) -> bytes:
    root = etree.fromstring(xml)
    root.set("type", "qemu")
    return etree.tostring(root)


@pytest.mark.parametrize("profile", ["latency", "balanced"])
@pytest.mark.parametrize("path", DOMAINS, ids=lambda p: p.stem)
def test_virsh_defines_the_output(libvirtd, path, profile):
    """libvirtd accepts every tuned corpus domain (the ones its schema knows) as a definition."""
    source = as_qemu(path.read_bytes())
    try:
        result = vmtune.rewrite(source, EXAMPLE_HOST, profile)
    except DoesNotFit:
        pytest.skip("does not fit on the example host")
    try:
        undefine(define(source.decode()))
    except VirshError as exc:
        pytest.skip(f"this libvirt refuses the untouched input too: {str(exc).splitlines()[-1]}")
    name = define(result.xml)
    try:
        dumped = etree.fromstring(virsh("dumpxml", "--inactive", name).encode())
        tag = dumped.find("metadata/{https://vmtune.dev/xmlns/1}tune")
        assert tag is not None and tag.get("profile") == profile
        pins = [e.get("cpuset") for e in dumped.iterfind("cputune/vcpupin")]
        assert pins == [e.get("cpuset") for e in etree.fromstring(result.xml.encode()).iterfind("cputune/vcpupin")]
    finally:
        undefine(name)


@pytest.fixture()
def disk_image():
    IMAGES.mkdir(parents=True, exist_ok=True)
    path = IMAGES / "vmtune-test-web-latency.img"
    subprocess.run(["qemu-img", "create", "-q", "-f", "raw", str(path), "16M"], check=True)
    yield path
    path.unlink(missing_ok=True)


def test_tuned_example_boots_on_this_machine(libvirtd, disk_image):
    """The README's example, tuned for this very host, boots to a shell under libvirt, with
    its pins, iothread, virtio disk and virtio NIC in place."""
    from fixtures.libvirt_env import private_bridge

    with private_bridge() as bridge:
        # the NIC on a bridge of the test's own: libvirt's 'default' network needs dnsmasq and a
        # firewall the host may not give, and is not what this test is about
        xml = (EXAMPLES / "stock-latency.xml").read_text().replace(
            "/var/lib/libvirt/images/web-latency.img", str(disk_image)).replace(
            '<interface type="network">', '<interface type="bridge">').replace(
            '<source network="default"/>', f'<source bridge="{bridge}"/>')
        assert bridge in xml
        host = vmtune.Host.probe()
        result = vmtune.rewrite(xml, host)
        tuned = etree.fromstring(result.xml.encode())
        assert tuned.find("devices/disk/target").get("bus") == "virtio"
        assert tuned.find("cputune/vcpupin") is not None
        assert tuned.find("devices/interface/model").get("type") == "virtio"
        console = boot(result.xml)
    assert guest.DONE in console, console[-2000:]
    seen = guest.parse_console(console)
    assert seen["nproc"] == tuned.findtext("vcpu")
    assert "vda" in seen["disks"].split(), seen  # the IDE disk came up as virtio-blk
    assert seen["vda_io"] == "ok", seen  # O_DIRECT I/O through cache='none' io='native' + iothread
    assert seen["nics"].startswith("eth0"), seen  # the e1000 NIC is now virtio-net


def test_windows_tuning_boots_under_tcg(libvirtd):
    """A Windows-flagged domain gets only the Hyper-V enlightenments TCG can start with."""
    from fixtures.libvirt_env import minimal_domain

    xml = minimal_domain(features="<hyperv mode='custom'><relaxed state='on'/></hyperv>")
    result = vmtune.rewrite(xml, vmtune.Host.probe(), "latency")
    assert etree.fromstring(result.xml.encode()).find("features/hyperv/vpindex") is None
    assert guest.DONE in boot(result.xml)


FREE_2M = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")


def test_hugepage_backed_guest_runs_from_the_pool(libvirtd):
    """A latency guest small enough for the free 2 MiB pages gets hugepages, and while it runs
    its memory comes out of the hugepage pool, with its vCPU on the pinned host CPU."""
    from fixtures.libvirt_env import minimal_domain, started

    host = vmtune.Host.probe()
    free = host.cell(host.node_ids[0]).pages.get(2048, 0)
    if free < 64:
        pytest.skip(f"only {free} free 2 MiB pages (setup-libvirt reserves 128)")
    result = vmtune.rewrite(minimal_domain(memory_mib=128), host, "latency")
    assert result.placement["hugepage_kib"] == 2048, result.warnings
    with started(result.xml, hold=3) as g:
        g.wait(guest.MARKER, timeout=60)
        in_use = free - int(FREE_2M.read_text())
        info = virsh("vcpuinfo", g.name)
    assert in_use >= 64, f"{in_use} pages taken from the pool"
    running_on = re.search(r"^CPU:\s+(\d+)", info, re.M).group(1)
    assert int(running_on) == result.placement["vcpupins"]["0"], info
