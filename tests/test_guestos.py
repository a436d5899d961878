"""The guest OS (vmtune/xml/guestos.py, issue 32, parts 2, 5 and 7): the guest OS from the strongest
evidence, safe when unknown; KVM hints that work; a direct kernel boot's root disk; a Ceph RBD
disk's cache.

Properties over generated domains (strategies.guest_evidence says which family each should be
read as, by docs/config.md's rules) and over the real-world corpus (tests/data/realworld/).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from lxml import etree

import vmtune
from conftest import CORPUS
from fixtures.hosttrees import hosts
from fixtures.strategies import domains, guest_evidence
from fixtures.gridhost import domain, make_host
from fixtures.realworld import DOMAINS as REALWORLD
from fixtures.realworld import tuned
from vmtune.xml import guestos
from vmtune import profiles
from vmtune.cli import format as fmt
from vmtune.config import Config
from vmtune.errors import DoesNotFit
from vmtune.xml.model import LIBOSINFO_NS, Domain

PROFILES = ("balanced", "latency", "realtime", "throughput")
x86 = hosts(arches=("x86_64",), max_nodes=3)
HOST = make_host(pages={2048: 8192})
EMULATED = ("ide", "sata", "scsi", "usb")


def rewrite(xml, host, profile, **kw):
    try:
        return vmtune.rewrite(xml, host, profile, **kw)
    except DoesNotFit:
        return None


def disks(root) -> list:
    return list(root.iterfind("devices/disk"))


def bus(disk) -> str | None:
    target = disk.find("target")
    return None if target is None else target.get("bus")


def has_virtio_disk(root) -> bool:
    return any(d.get("device", "disk") == "disk" and bus(d) == "virtio" for d in disks(root))


def kvm_hints(root) -> set[str]:
    hints = {e.tag for e in root.iterfind("features/kvm/*") if e.get("state") == "on"} - {"hidden"}
    hints |= {"kvmclock"} if root.find("clock/timer[@name='kvmclock'][@present='yes']") is not None else set()
    return hints


def moved(before, after) -> list[tuple[str, str]]:
    """(old dev, old bus) of each disk whose bus the rewrite changed (disks keep their order)."""
    old, new = disks(before), disks(after)
    assert len(old) == len(new)
    return [(o.find("target").get("dev"), bus(o)) for o, n in zip(old, new) if bus(o) != bus(n)]


# -- generated domains -------------------------------------------------------------------------------------
@given(st.data(), x86, st.sampled_from(PROFILES))
def test_the_guest_os_is_read_by_the_documented_rules(data, host, profile):
    """A libosinfo id decides; else a direct kernel boot is Linux; else one strong sign of Windows or
    two weak ones make Windows; else the guest is unknown. --explain's second line says which, from
    what, and names every piece of evidence."""
    guest = data.draw(guest_evidence())
    result = rewrite(data.draw(domains(guest=guest)), host, profile)
    assume(result is not None)
    assert result.guest_os.family == guest["family"], result.guest_os
    line = fmt.explain(result)[1]
    assert line.startswith("guest OS: ")
    assert all(e in line for e in result.guest_os.evidence) or len(line) == fmt.LINE


@settings(suppress_health_check=[HealthCheck.filter_too_much])  # a Windows guest with a virtio disk: assumed away
@given(st.data(), x86, st.sampled_from(PROFILES))
def test_a_windows_guest_without_drivers_known_changes_no_disk_bus(data, host, profile):
    """A domain read as Windows (by its id or its signs) with no virtio disk of its own keeps every
    disk on its bus, and the warning names the disks that stay."""
    guest = data.draw(guest_evidence(family="windows"))
    xml = data.draw(domains(guest=guest))
    before = etree.fromstring(xml.encode())
    result = rewrite(xml, host, profile)
    assume(result is not None and guest["family"] == "windows" and not has_virtio_disk(before))
    assert moved(before, etree.fromstring(result.xml.encode())) == []
    for disk in disks(before):
        if bus(disk) in EMULATED and disk.get("device") == "disk" and profile != "keep":
            dev = disk.find("target").get("dev")
            assert any(f"{dev} ({bus(disk)}" in w and "--force-virtio" in w or  # a Windows disk, or
                       f"disk {dev} stays on {bus(disk)}" in w for w in result.warnings), dev  # a <cmdline> root


@given(st.data(), x86, st.sampled_from(PROFILES))
def test_an_unknown_guests_boot_disk_keeps_its_bus_under_the_default_profiles(data, host, profile):
    """A guest whose OS is unknown keeps its boot disk's bus under every built-in profile
    (boot_disk = "auto"), and a warning names the disk and how to move it."""
    guest = data.draw(guest_evidence(family="unknown"))
    xml = data.draw(domains(guest=guest))
    before = etree.fromstring(xml.encode())
    result = rewrite(xml, host, profile)
    assume(result is not None and guest["family"] == "unknown")
    boot = next((d for d in disks(before) if d.get("device") == "disk"), None)
    assume(boot is not None)
    after = etree.fromstring(result.xml.encode())
    assert bus(disks(after)[disks(before).index(boot)]) == bus(boot)
    if bus(boot) in EMULATED:
        dev = boot.find("target").get("dev")
        assert any(f"boot disk {dev} stays on {bus(boot)}" in w and 'boot_disk = "virtio"' in w
                   for w in result.warnings)


@given(domains(), x86, st.sampled_from(PROFILES), st.booleans())
def test_every_disk_whose_bus_changed_is_named_in_a_warning(xml, host, profile, force):
    """Each disk that moves to virtio is named in a warning with its old name and bus."""
    result = rewrite(xml, host, profile, force_virtio=force)
    assume(result is not None)
    for dev, old in moved(etree.fromstring(xml.encode()), etree.fromstring(result.xml.encode())):
        assert any(dev in w and old in w for w in result.warnings), (dev, old, result.warnings)


@given(st.data(), x86, st.sampled_from(PROFILES))
def test_no_kvm_hint_where_kvm_is_hidden_or_for_windows(data, host, profile):
    """hint-dedicated, poll-control and the kvmclock timer are never added where the domain hides
    KVM nor for a Windows guest."""
    guest = data.draw(guest_evidence())
    xml = data.draw(domains(guest=guest))
    result = rewrite(xml, host, profile)
    assume(result is not None)
    before = etree.fromstring(xml.encode())
    if guest["family"] == "windows" or guest["kvm_hidden"]:
        assert kvm_hints(etree.fromstring(result.xml.encode())) <= kvm_hints(before)


@given(domains(), x86, st.sampled_from(PROFILES))
def test_poll_control_comes_only_with_hint_dedicated(xml, host, profile):
    """A poll-control that vmtune writes has hint-dedicated beside it."""
    result = rewrite(xml, host, profile)
    assume(result is not None)
    after = etree.fromstring(result.xml.encode())
    if "poll-control" in kvm_hints(after) - kvm_hints(etree.fromstring(xml.encode())):
        assert "hint-dedicated" in kvm_hints(after)


@given(st.data(), x86, st.sampled_from(PROFILES), st.booleans())
def test_a_kernel_boots_root_disk_keeps_its_bus_and_is_named(data, host, profile, force):
    """The disk that a direct kernel boot's root=/dev/sdX names keeps its bus, and a warning quotes
    the root= and names the disk."""
    guest = data.draw(guest_evidence(kernel_boot=True))
    xml = data.draw(domains(guest=guest))
    result = rewrite(xml, host, profile, force_virtio=force)
    root = guest["root"]
    assume(result is not None and root)
    before = etree.fromstring(xml.encode())
    named = [d for d in disks(before) if d.find("target").get("dev") == root and d.get("device") == "disk"]
    for dev, _ in moved(before, etree.fromstring(result.xml.encode())):
        assert dev != root
    if named and bus(named[0]) in EMULATED and profiles.load(profile).devices_virtio:
        assert any(f"root=/dev/{root}" in w and f"disk {root} stays on {bus(named[0])}" in w for w in result.warnings)


# -- the real-world corpus ---------------------------------------------------------------------------------
# Domains without a libosinfo id, as a person reads them
WITHOUT_ID = {
    "vfio-archlabs-linux-sata-no-osinfo.xml": "unknown",
    "vfio-macos-threadripper-nvme-pins.xml": "other",
    "vfio-steamos-hostdev-no-pins.xml": "unknown",
    "vfio-win10-justarchi-no-osinfo-localtime.xml": "windows",
    "vfio-win10-no-osinfo-localtime-unpinned.xml": "windows",
    "vfio-win10-threadripper-nvme-hostdev-hugepages.xml": "windows",
    "ovirt-windows10-sysprep-empty-cputune.xml": "windows",
    "nova-ocata-realtime4-mask-0-1-vcpusched-2-3.xml": "linux",  # a direct kernel boot
    "nova-fake-kvm-guest-sev-hugepages-nodesets.xml": "unknown",  # KVM hidden alone
    "ovirt-vm-sriov-hostdev.xml": "linux",  # a direct kernel boot
    # KubeVirt's converter with its Hyper-V features on (what KubeVirt's docs give Windows guests)
    "kubevirt-hooks-domain-qemu-tcg.xml": "windows",
    "kubevirt-launcher-domain-x86_64-root.xml": "windows",
    "kubevirt-launcher-domain-x86_64.xml": "windows",
}


@pytest.mark.parametrize("path", REALWORLD, ids=lambda p: p.stem)
def test_corpus_guests_are_read_as_a_person_reads_them(path):
    """Every domain with a libosinfo id is that id's family (the Arch Linux guest with <hyperv> and
    hypervclock is Linux); those without are read as WITHOUT_ID says, or unknown."""
    root = etree.fromstring(path.read_bytes())
    guest = guestos.read(Domain(root))
    os_id = Domain(root).os_id
    if os_id:
        want = "windows" if "microsoft.com/win" in os_id else "linux"
    else:
        want = WITHOUT_ID.get(path.name, "unknown")
    assert guest.family == want, guest


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("path", REALWORLD, ids=lambda p: p.stem)
def test_corpus_disks_hints_and_warnings(path, profile):
    """Over the corpus: no disk of a Windows guest without a virtio disk changes bus, an unknown
    guest's boot disk keeps its bus, every disk that moves is named in a warning, no KVM hint
    where KVM is hidden or for Windows, poll-control only beside hint-dedicated."""
    before = etree.fromstring(path.read_bytes())
    guest = guestos.read(Domain(before))
    hidden = guestos.kvm_hidden(Domain(before))
    for where, _host, result, after in tuned(path, profile):
        changed = moved(before, after)
        if guest.windows and not has_virtio_disk(before):
            assert changed == [], where
        if guest.family == "unknown":
            boot = next((d for d in disks(before) if d.get("device", "disk") == "disk"), None)
            assert boot is None or boot.find("target").get("dev") not in [dev for dev, _ in changed], where
        for dev, old in changed:
            assert any(dev in w and old in w for w in result.warnings), f"{where}: {dev} moved silently"
        added = kvm_hints(after) - kvm_hints(before)
        if guest.windows or hidden:
            assert not added, f"{where}: {added}"
        if "poll-control" in added:
            assert "hint-dedicated" in kvm_hints(after), where


def test_the_arch_guest_with_hyperv_is_linux_and_explain_says_why():
    """The Arch Linux VFIO guest with <hyperv>, vendor_id, localtime and hypervclock is Linux: no
    Windows warning, its boot disk moves with the Linux advice, and --explain names the id and
    the signs it outranks."""
    path = next(p for p in REALWORLD if p.name.startswith("vfio-archlinux"))
    result = vmtune.rewrite(path.read_bytes(), HOST, "balanced")
    assert not [w for w in result.warnings if "Windows" in w]
    assert any("boot disk sda moves from sata to virtio" in w and "initramfs" in w for w in result.warnings)
    line = fmt.explain(result)[1]
    assert line.startswith("guest OS: Linux, from libosinfo id http://archlinux.org/archlinux/rolling")
    assert "<hyperv>" in line and "hypervclock timer" in line


def test_a_windows_guest_without_an_id_keeps_every_disk_and_explain_names_the_signs():
    """A Windows guest known only by <hyperv>, localtime and hypervclock keeps its SATA boot disk,
    and --explain and the warning name that evidence."""
    path = next(p for p in REALWORLD if p.name == "vfio-win10-no-osinfo-localtime-unpinned.xml")
    result = vmtune.rewrite(path.read_bytes(), HOST, "latency")
    after = etree.fromstring(result.xml.encode())
    assert moved(etree.fromstring(path.read_bytes()), after) == []
    line = fmt.explain(result)[1]
    assert line.startswith("guest OS: Windows, from <hyperv>, clock offset localtime, hypervclock timer")
    assert any(w.startswith("Windows guest (from <hyperv>") and "sda (sata, the boot disk)" in w
               for w in result.warnings)


# -- profiles and options ------------------------------------------------------------------------------------
def test_boot_disk_virtio_moves_an_unknown_guests_boot_disk_but_not_a_windows_one(tmp_path):
    """boot_disk = "virtio" set explicitly moves the boot disk of a guest whose OS is unknown; a
    Windows guest's still needs --force-virtio."""
    (tmp_path / "movable.toml").write_text('inherit = "latency"\nboot_disk = "virtio"\n')
    cfg = Config(profiles_dir=str(tmp_path))
    unknown = vmtune.rewrite(domain(), HOST, "movable", config=cfg)
    assert etree.fromstring(unknown.xml.encode()).find("devices/disk/target").get("bus") == "virtio"
    windows = domain(extra="<clock offset='localtime'/>")
    for force, want in ((False, "sata"), (True, "virtio")):
        out = vmtune.rewrite(windows, HOST, "movable", config=cfg, force_virtio=force)
        assert etree.fromstring(out.xml.encode()).find("devices/disk/target").get("bus") == want


def test_a_virtio_disk_says_a_windows_guest_has_the_driver():
    """A Windows guest with a virtio disk already: its other data disks move (named, with the
    disk that proves the driver), its boot disk stays unless --force-virtio."""
    two = domain(extra="<features><hyperv mode='custom'><relaxed state='on'/></hyperv></features>").replace(
        "</devices>", "<disk type='file' device='disk'><source file='/v.img'/><target dev='vda' bus='virtio'/></disk>"
                      "<disk type='file' device='disk'><source file='/d.img'/><target dev='sdb' bus='sata'/></disk>"
                      "</devices>")
    result = vmtune.rewrite(two, HOST, "latency")
    buses = [t.get("bus") for t in etree.fromstring(result.xml.encode()).iterfind("devices/disk/target")]
    assert buses == ["sata", "virtio", "virtio"]
    assert any("sdb (sata -> vdb)" in w and "virtio disk vda" in w for w in result.warnings)
    assert any("boot disk sda stays on sata" in w and "--force-virtio" in w for w in result.warnings)


@pytest.mark.parametrize("cache", [None, "writeback", "none", "directsync"])
@pytest.mark.parametrize("profile", PROFILES)
def test_a_ceph_rbd_disk_keeps_its_cache(cache, profile):
    """A Ceph RBD disk keeps its cache mode (librbd's own cache; Nova sets writeback on purpose)
    under every profile, while a file disk beside it gets the profile's."""
    driver = f"<driver name='qemu' type='raw'{f' cache={chr(39)}{cache}{chr(39)}' if cache else ''}/>"
    rbd = (f"<disk type='network' device='disk'>{driver}<source protocol='rbd' name='vms/uuid_disk'>"
           "<host name='10.0.0.1' port='6789'/></source><target dev='vdb' bus='virtio'/></disk>")
    xml = domain().replace("</devices>", rbd + "</devices>")
    out = etree.fromstring(vmtune.rewrite(xml, HOST, profile).xml.encode())
    rbd_driver = out.find("devices/disk[@type='network']/driver")
    assert (rbd_driver.get("cache") if rbd_driver is not None else None) == cache
    assert out.find("devices/disk[@type='file']/driver").get("cache") == "none"


def test_windows_evidence_in_the_shared_corpus():
    """The shared corpus's Windows 10 domain (libosinfo id, IDE disk) keeps its disk with a warning
    that names the id; its Fedora kitchen sink with <hyperv> is Linux."""
    win = vmtune.rewrite((CORPUS / "domains" / "vm-win10-i440fx-ide-e1000-network.xml").read_bytes(), HOST, "latency")
    assert any("libosinfo id http://microsoft.com/win/10" in w and "--force-virtio" in w for w in win.warnings)
    sink = guestos.read(Domain(etree.fromstring(
        (CORPUS / "domains" / "vm-q35-many-devices-kitchen-sink.xml").read_bytes())))
    assert sink.family == "linux" and "<hyperv>" in sink.outranked


def test_profiles_without_hint_dedicated_write_no_poll_control():
    """throughput and balanced (kvm_poll_control without kvm_hint_dedicated) write no poll-control,
    unless the domain has hint-dedicated of its own."""
    plain = domain()
    own = domain(extra="<features><kvm><hint-dedicated state='on'/></kvm></features>")
    for profile in ("throughput", "balanced"):
        prof = profiles.load(profile)
        assert prof.cpu_kvm_poll_control and not prof.cpu_kvm_hint_dedicated
        assert "poll-control" not in kvm_hints(etree.fromstring(vmtune.rewrite(plain, HOST, profile).xml.encode()))
        assert "poll-control" in kvm_hints(etree.fromstring(vmtune.rewrite(own, HOST, profile).xml.encode()))


def test_a_libosinfo_id_outranks_every_sign():
    """Every id of ID_FAMILIES's vendors decides its family whatever signs of Windows the domain has;
    libosinfo.org/unknown decides nothing."""
    signs = ("<features><hyperv mode='custom'><relaxed state='on'/></hyperv></features>"
             "<clock offset='localtime'><timer name='hypervclock' present='yes'/></clock>")
    for prefix, (family, _name, _virtio) in guestos.ID_FAMILIES:
        meta = (f"<metadata><libosinfo:libosinfo xmlns:libosinfo='{LIBOSINFO_NS}'>"
                f"<libosinfo:os id='http://{prefix}/1'/></libosinfo:libosinfo></metadata>")
        got = guestos.read(Domain(etree.fromstring(domain(extra=meta + signs).encode())))
        assert got.family == family and got.strength == "libosinfo", prefix
    unknown = domain(extra=(f"<metadata><libosinfo:libosinfo xmlns:libosinfo='{LIBOSINFO_NS}'>"
                            "<libosinfo:os id='http://libosinfo.org/unknown'/></libosinfo:libosinfo></metadata>" + signs))
    assert guestos.read(Domain(etree.fromstring(unknown.encode()))).family == "windows"


def test_guest_os_of_a_context_without_one_reads_the_domain():
    """A pass given a context without a guest (a test's, say) reads it from the domain."""
    dom = Domain(etree.fromstring(domain(extra="<clock offset='localtime'/>").encode()))
    assert guestos.of(object(), dom).windows and guestos.of(SimpleNamespace(guest=None), dom).windows
    assert guestos.of(SimpleNamespace(guest=guestos.UNKNOWN), dom) is guestos.UNKNOWN
