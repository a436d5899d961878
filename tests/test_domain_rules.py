"""The rewriter (vmtune.rewrite) keeps the rules of libvirt's domain parser (the audit of issue 11).

Each case is a domain libvirt accepts; every profile's output must pass libvirt's schema and,
where virsh is installed, ``virsh -c test:///default define`` (libvirt's own parser, in-process,
no daemon, nothing kept).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile

import pytest
from lxml import etree

import vmtune
from conftest import EXAMPLES
from fixtures.libvirt_schema import schema_available, validate_domain
from vmtune.xml.model import Domain

HOST = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
PROFILES = ("balanced", "latency", "realtime", "throughput")
VIRSH = shutil.which("virsh")


def domain(body: str, vcpu: int = 2, memory_kib: int = 1048576, machine: str = "q35", head: str = "") -> str:
    return (f"<domain type='kvm'><name>t</name><memory unit='KiB'>{memory_kib}</memory>{head}<vcpu>{vcpu}</vcpu>"
            f"<os><type arch='x86_64' machine='{machine}'>hvm</type></os>{body}</domain>")


def libvirt_refuses(xml: str) -> str | None:
    """libvirt's error for the domain (None: accepted, or no virsh to ask)."""
    if VIRSH is None:
        return None
    with tempfile.NamedTemporaryFile("wb", suffix=".xml") as fh:
        fh.write(xml.encode())
        fh.flush()
        done = subprocess.run([VIRSH, "-q", "-c", "test:///default", "define", fh.name],
                              capture_output=True, text=True, timeout=60, check=False)
    return None if done.returncode == 0 else (done.stderr.strip() or done.stdout.strip())


def rewrite(xml: str, profile: str) -> etree._Element:
    """The rewrite, checked against libvirt's schema and parser, as a tree."""
    assert libvirt_refuses(xml) is None  # the input is fine
    out = vmtune.rewrite(xml, HOST, profile).xml
    if schema_available():
        assert validate_domain(out) == [], profile
    assert libvirt_refuses(out) is None, profile
    assert vmtune.rewrite(out, HOST, profile).xml == out  # idempotent
    return etree.fromstring(out.encode())


# -- iothreads libvirt fills in ------------------------------------------------------------------

IOTHREADS_PARTLY_LISTED = domain(
    "<devices><controller type='scsi' index='0' model='virtio-scsi'><driver iothread='{ref}'/></controller>{disk}"
    "</devices>", head="<iothreads>4</iothreads><iothreadids><iothread id='2'/></iothreadids>"
    "<cputune><iothreadpin iothread='1' cpuset='3'/></cputune>")
VIRTIO_DISK = "<disk type='file' device='disk'><source file='/a.img'/><target dev='vda' bus='virtio'/></disk>"


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("disk", ["", VIRTIO_DISK], ids=["no-disk", "virtio-disk"])
@pytest.mark.parametrize("ref", [1, 3])
def test_implicit_iothreads_are_iothreads(profile, disk, ref):
    """With 4 iothreads and only id 2 listed, libvirt has iothreads 1-4: references to the implicit
    ones stay valid, no other id is invented, and a dedicated domain pins every one of them."""
    out = rewrite(IOTHREADS_PARTLY_LISTED.format(ref=ref, disk=disk), profile)
    ids = Domain(out).iothread_ids()
    assert ids == [1, 2, 3, 4]
    refs = [int(e.get("iothread")) for e in out.iterfind(".//driver[@iothread]")]
    refs += [int(e.get("iothread")) for e in out.iterfind("cputune/iothreadpin")]
    assert set(refs) <= set(ids)
    if profile in ("latency", "realtime"):
        assert sorted(int(e.get("iothread")) for e in out.iterfind("cputune/iothreadpin")) == ids


# -- a guest cell split over host nodes ----------------------------------------------------------

CACHE = ("<cache level='1' associativity='direct' policy='writeback'><size value='10' unit='KiB'/>"
         "<line value='8' unit='B'/></cache>")
SPLIT_CELL = domain(
    "<cpu mode='host-passthrough'><numa><cell id='0' cpus='0-15' memory='2097152' unit='KiB' memAccess='shared' "
    "discard='yes'><!-- one -->" + CACHE + "</cell></numa></cpu><devices><filesystem type='mount' "
    "accessmode='passthrough'><driver type='virtiofs'/><source dir='/srv'/><target dir='srv'/></filesystem>"
    "</devices>", vcpu=16, memory_kib=2097152)


def test_every_part_of_a_split_cell_keeps_its_attributes():
    """16 vCPUs in one guest cell do not fit one host node of 2node-smt for latency: each guest cell
    that comes of it keeps memAccess='shared' (virtiofs needs it in every cell), discard and the
    cache; the cell's comment goes to one part only."""
    out = rewrite(SPLIT_CELL, "latency")
    cells = out.findall("cpu/numa/cell")
    assert len(cells) > 1
    for cell in cells:
        assert (cell.get("memAccess"), cell.get("discard")) == ("shared", "yes")
        assert cell.find("cache[@level='1']") is not None
    assert etree.tostring(out.find("cpu/numa")).decode().count("<!-- one -->") == 1


# -- memory sources beside hugepages -------------------------------------------------------------

@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("source", ["anonymous", "memfd", "file"])
def test_no_anonymous_memory_source_beside_hugepages(source, profile):
    """libvirt refuses hugepages with an anonymous memory source ('hugepages are not allowed with
    anonymous memory source'): where vmtune adds hugepages the anonymous source goes, with a
    reason; memfd and file sources, which work with hugepages, stay, and so does everything
    where no hugepages come."""
    xml = domain("", head=f"<memoryBacking><source type='{source}'/><access mode='shared'/></memoryBacking>")
    result = vmtune.rewrite(xml, HOST, profile)
    out = rewrite(xml, profile)
    backing = out.find("memoryBacking")
    huge = backing.find("hugepages") is not None
    assert huge == (profile in ("latency", "realtime"))
    assert backing.find("access").get("mode") == "shared"
    kept = [el.get("type") for el in backing.iterfind("source")]
    assert kept == ([] if huge and source == "anonymous" else [source])
    if not kept:
        assert any("anonymous memory source" in c.reason for c in result.changes)


# -- a disk moved off IDE ------------------------------------------------------------------------

@pytest.mark.parametrize("profile", PROFILES)
def test_a_disk_moved_off_ide_loses_its_chs_translation(profile):
    """libvirt takes <geometry trans> on the ide bus only ('CHS translation mode can only be set for
    'ide' bus'): a disk moved to virtio drops trans and keeps its cylinders, heads and sectors."""
    xml = domain("<devices><disk type='file' device='disk'><source file='/g.img'/><target dev='hda' bus='ide'/>"
                 "<geometry cyls='16383' heads='16' secs='63' trans='lba'/></disk></devices>", machine="pc")
    disk = rewrite(xml, profile).find("devices/disk")
    moved = disk.find("target").get("bus") == "virtio"
    assert dict(disk.find("geometry").attrib) == {"cyls": "16383", "heads": "16", "secs": "63",
                                                 **({} if moved else {"trans": "lba"})}
