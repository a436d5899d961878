"""bench/disk_queues.py (issue 35): the versions it reads from ``virsh version``, the two variants as
vmtune writes them (a disk's queues over two iothreads where libvirt >= 10 and QEMU >= 9, one
iothread elsewhere), and the guest's ``diskpar`` test. The case itself boots guests where libvirt
and QEMU are new enough: inside ``scripts/cgroup2-guest --libvirt`` (BENCHMARKS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

import vmtune
from bench import disk_queues, guestimage, guests

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "examples" / "hosts" / "2node-smt.xml"

VIRSH_VERSION = """Compiled against library: libvirt 11.3.0
Using library: libvirt 11.3.0
Using API: QEMU 11.3.0
Running hypervisor: QEMU 10.0.13
"""


def test_versions_from_virsh_version():
    assert disk_queues.parse_versions(VIRSH_VERSION) == {"libvirt": (11, 3, 0), "qemu": (10, 0, 13)}
    assert disk_queues.parse_versions("Using library: libvirt 9.0.0\n") == {"libvirt": (9, 0, 0)}


@pytest.mark.parametrize("have", [{"libvirt": (10, 0, 0), "qemu": (9, 0, 0)}, {"libvirt": (11, 3, 0), "qemu": (10, 0, 13)}])
def test_the_variants_are_what_vmtune_writes_for_each_kind_of_host(have):
    stock = guests.stock_domain("qemu", Path("/var/lib/x/disk.raw"), None, vcpus=disk_queues.VCPUS)
    host = vmtune.Host.from_capabilities(HOST.read_bytes())
    xmls = disk_queues.variant_xmls(stock, host, have)
    one = etree.fromstring(xmls["one-iothread"].encode()).find("devices/disk/driver")
    mapped = etree.fromstring(xmls["queues-mapped"].encode()).find("devices/disk/driver")
    assert one.get("iothread") == "1" and one.find("iothreads") is None
    assert mapped.get("iothread") is None and int(mapped.get("queues")) == disk_queues.VCPUS
    assert [t.get("id") for t in mapped.findall("iothreads/iothread")] == ["1", "2"]


def test_a_variant_vmtune_did_not_write_so_is_an_error():
    stock = guests.stock_domain("qemu", Path("/var/lib/x/disk.raw"), None, vcpus=disk_queues.VCPUS)
    host = vmtune.Host.from_capabilities(HOST.read_bytes())
    with pytest.raises(disk_queues.DiskQueuesError, match="queues-mapped"):
        disk_queues.variant_xmls(stock, host, disk_queues.OLDER)  # a host too old: no mapping to compare


def test_the_guest_reads_from_each_vcpu_at_once_and_says_so_per_vcpu():
    assert "diskpar)" in guestimage.INIT and 'taskset -c "$i" /bin/disklat' in guestimage.INIT
    parsed = guestimage.parse_console("VMB-UP\nVMB-RESULT diskq0 n=100 p50_us=5.0 p99_us=9.0 errors=0\n"
                                      "VMB-RESULT diskq1 n=100 p50_us=6.0 p99_us=8.0 errors=0\nVMB-DONE\n")
    parsed.update(iothreads_listed=[1, 2], iothread_cpu_s={"iothread1": 0.5, "iothread2": 0.25})
    ok, words = disk_queues._function("queues-mapped", parsed)
    assert ok, words
    parsed["iothread_cpu_s"] = {"iothread1": 0.5, "iothread2": 0.0}
    assert not disk_queues._function("queues-mapped", parsed)[0]


def test_only_the_domains_iothreads_are_counted(tmp_path, monkeypatch):
    """QEMU's monitor thread (``IO mon_iothread``) is QEMU's own, not one of the domain's iothreads."""
    run = tmp_path / "run"
    (run / "dq.pid").parent.mkdir(parents=True)
    (run / "dq.pid").write_text("4242\n")
    tasks = tmp_path / "proc" / "4242" / "task"
    for tid, comm in ((1, "qemu-system-x86"), (2, "IO iothread1"), (3, "IO mon_iothread"), (4, "IO iothread2")):
        (tasks / str(tid)).mkdir(parents=True)
        (tasks / str(tid) / "comm").write_text(comm + "\n")
        (tasks / str(tid) / "stat").write_text(f"{tid} ({comm}) S " + " ".join(["0"] * 10) + f" {tid * 100} 50 0 0\n")
    real = Path

    def fake(path, *more):
        p = str(real(path, *more))
        for prefix, to in (("/run/libvirt/qemu", run), ("/proc", tmp_path / "proc")):
            if p.startswith(prefix):
                return real(str(to) + p[len(prefix):])
        return real(p)

    monkeypatch.setattr(disk_queues, "Path", fake)
    cpu = disk_queues._iothread_cpu("dq")
    tick = __import__("os").sysconf("SC_CLK_TCK")
    assert cpu == {"iothread1": 250 / tick, "iothread2": 450 / tick}
