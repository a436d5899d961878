"""``--explain`` (vmtune/cli/format.py) can be read, and a boot disk never moves silently (issue 25,
parts 5 and 6)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lxml import etree

import vmtune
from conftest import CORPUS, EXAMPLES
from fixtures.gridhost import GIB, domain, make_host
from vmtune.cli import format as fmt
from vmtune.config import Config
from vmtune.xml.edits import Change
from vmtune.errors import VmtuneError

HOST = make_host(pages={2048: 8192})
LINUX = ("<metadata><libosinfo:libosinfo xmlns:libosinfo='http://libosinfo.org/xmlns/libvirt/domain/1.0'>"
         "<libosinfo:os id='http://fedoraproject.org/fedora/40'/></libosinfo:libosinfo></metadata>")


def _bus(result) -> str:
    return etree.fromstring(result.xml.encode()).find("devices/disk/target").get("bus")


# -- the boot disk -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("profile", ["latency", "throughput", "balanced"])
def test_a_linux_boot_disk_moves_with_a_warning_that_says_what_the_guest_needs(profile):
    result = vmtune.rewrite(domain(extra=LINUX), HOST, profile)
    assert _bus(result) == "virtio"
    (warning,) = [w for w in result.warnings if "boot disk" in w]
    assert "boot disk sda moves from sata to virtio" in warning
    for needed in ("virtio_blk", "initramfs", "dracut --add-drivers virtio_blk", "update-initramfs",
                   "/etc/fstab", "/dev/sda", 'boot_disk = "keep"'):
        assert needed in warning, needed
    (move,) = [c for c in result.changes if c.element.endswith("target/@bus")]
    assert move.reason.startswith("the boot disk too")
    assert [line for line in fmt.explain(result) if line.startswith(move.element)]  # a line of its own


def test_boot_disk_keep_leaves_the_boot_disk_and_moves_the_others(tmp_path):
    (tmp_path / "keepboot.toml").write_text('inherit = "latency"\nboot_disk = "keep"\n')
    two = domain(extra=LINUX).replace("</devices>", "<disk type='file' device='disk'><source file='/y.img'/>"
                                         "<target dev='sdb' bus='sata'/></disk></devices>")
    result = vmtune.rewrite(two, HOST, "keepboot", config=Config(profiles_dir=str(tmp_path)))
    buses = [t.get("bus") for t in etree.fromstring(result.xml.encode()).iterfind("devices/disk/target")]
    assert buses == ["sata", "virtio"]
    assert not [w for w in result.warnings if "boot disk" in w]


def test_a_boot_disk_on_virtio_already_says_nothing():
    result = vmtune.rewrite(domain().replace("dev='sda' bus='sata'", "dev='vda' bus='virtio'"), HOST, "latency")
    assert not [w for w in result.warnings if "boot disk" in w]


def test_a_windows_guest_still_keeps_its_boot_disk():
    win = CORPUS / "domains" / "vm-win10-i440fx-ide-e1000-network.xml"
    result = vmtune.rewrite(win.read_bytes(), HOST, "latency")
    assert _bus(result) == "ide" and any("Windows guest" in w for w in result.warnings)
    assert not [w for w in result.warnings if "moves from" in w]


# -- --explain ---------------------------------------------------------------------------------------------
def test_explain_lines_are_short_over_the_corpus():
    """Every line of --explain, for every corpus domain and profile on three hosts, is at most
    200 characters, and no element is printed whole (no markup of a child in a line)."""
    hosts = [make_host(), make_host(nodes=4, cores=2, threads=1, pages={2048: 4096, GIB: 4}),
             vmtune.Host.from_capabilities((CORPUS / "hosts" / "lv-caps-x86_64-amd-2socket-8die-smt.xml").read_bytes())]
    paths = sorted((CORPUS / "domains").glob("*.xml")) + sorted(EXAMPLES.glob("*.xml"))
    lines = 0
    for host in hosts:
        for path in paths:
            for profile in ("balanced", "latency", "realtime", "throughput"):
                try:
                    result = vmtune.rewrite(path.read_bytes(), host, profile)
                except VmtuneError:
                    continue
                for line in fmt.explain(result):
                    lines += 1
                    assert len(line) <= fmt.LINE, line
                    assert "</" not in line and "/>" not in line, line
    assert lines > 1000


def test_an_element_is_shown_by_what_changed_in_it():
    before = "<cputune><shares>2048</shares><vcpupin vcpu='0' cpuset='1'/></cputune>"
    after = "<cputune><shares>2048</shares><vcpupin vcpu='0' cpuset='3'/><vcpupin vcpu='1' cpuset='4'/>" \
            "<emulatorpin cpuset='0'/></cputune>"
    assert fmt.changed(before, after) == ("<cputune>", "<cputune> ~vcpupin, +vcpupin, +emulatorpin")
    assert fmt.short(after) == "<cputune> shares, 2×vcpupin, emulatorpin"
    assert fmt.short("<topology sockets='1' dies='2' cores='4' threads='2'/>") == \
        "<topology sockets=1 dies=2 cores=4 threads=2>"
    assert fmt.short("x" * 100).endswith("…") and len(fmt.short("x" * 100)) == fmt.VALUE


def test_a_resized_guest_cell_says_how_many_kib_moved_and_why():
    """Two guest cells of 1000 and 1048 MiB over two host nodes with 2 MiB pages: each becomes a
    whole number of pages, split as the vCPUs are, and the reason gives each cell's move."""
    cells = ("<cpu><numa><cell id='0' cpus='0-5' memory='1000' unit='MiB'/>"
             "<cell id='1' cpus='6-11' memory='1048' unit='MiB'/></numa></cpu>")
    xml = domain(vcpus=12, mib=2048, extra=cells)
    result = vmtune.rewrite(xml, make_host(pages={2048: 4096}), "latency")
    (change,) = [c for c in result.changes if c.element == "/domain/cpu/numa"]
    assert "guest cell 0: 1024000 -> 1048576 KiB (+24576 KiB: each cell is whole 2M pages" in change.reason
    assert "guest cell 1: 1073152 -> 1048576 KiB (-24576 KiB" in change.reason


WORDS = st.lists(st.text(alphabet="abcdefghij(),;:'/-0123456789×", min_size=1, max_size=30), min_size=1, max_size=60)


@given(path_words=st.integers(1, 8), reason=WORDS, value=WORDS)
def test_a_long_line_is_cut_after_a_whole_word(path_words, reason, value):
    """A line of --explain longer than LINE ends with " …" after a word that the full line has
    whole (a space or a comma follows it there), and so does a value cut at VALUE; only a first
    word longer than the limit is cut inside, with "…"."""
    element = "/domain/" + "/".join(["devices"] * path_words)
    change = Change(element, None, " ".join(value), " ".join(reason))
    result = SimpleNamespace(profile="latency", changes=[change], placement={}, kept=())
    (line,) = fmt.explain(result)[1:]
    shown = fmt.short(change.after)
    full = f"{element}: (none) -> {shown}  # {change.reason}"
    for cut, whole, most in ((line, full, fmt.LINE), (shown, change.after, fmt.VALUE)):
        assert len(cut) <= most
        if cut == whole:
            continue
        if cut.endswith(" …"):
            kept = cut[:-2]
            assert whole.startswith(kept) and whole[len(kept)] in " ,;:", (cut, whole)
        else:
            assert cut.endswith("…") and " " not in whole[:most - 1], (cut, whole)
