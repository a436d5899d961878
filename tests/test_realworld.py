"""The rewriter (vmtune.rewrite) over domains and hosts that people published (tests/data/realworld/;
issue 32, item 8).

VFIO gaming VMs (Windows and Linux guests, hand pins, hugepages, hidden KVM, V-cache CCD pins),
OpenStack Nova (pinned, real-time mask), oVirt, KubeVirt; real and constructed `virsh capabilities`
(uneven L3, hybrid, 2-socket, Opteron, Westmere). SOURCES.md says where each file came from.

Each test is a property over the whole corpus: every domain, every profile, on a rotating sample of
four hosts (every host meets many domains; the whole cross product takes ~45 s on one CPU, the
sample about 8 s). Issue 32's properties are tested below, and those of the guest OS and the KVM
hints (parts 2 and 5) in test_guestos.py, over this same corpus; that untune gives every byte back
(part 4) also over files laid out as virsh and virt-manager write them, in test_textkeep.py.
The hybrid-host warning is given under the profiles that dedicate cores (where core kinds decide
anything); the placeholder vCPUs of vfio-win11-ryzen5900x-placeholder-... are checked over these
hosts in test_intent.py.
"""

from __future__ import annotations

import hashlib
import re

import pytest
from lxml import etree

import vmtune
from fixtures.realworld import DATA, DOMAINS, PROFILES, REALWORLD_HOSTS, VMTUNE_NS, outcomes, tuned
from fixtures.libvirt_schema import schema_available, validate_domain
from vmtune import cpuset
from vmtune.xml import units, xmltext
from vmtune.errors import DoesNotFit, InvalidInput, VmtuneError

# Valid XML that this machine's libvirt schema (Debian 12, libvirt 9.0) refuses: the output is
# checked against the schema for every other input (test_schema_verdicts_are_as_listed keeps this honest).
SCHEMA_REFUSES = {
    "kubevirt-hooks-domain-qemu-tcg.xml": "a device of KubeVirt's converter that libvirt 9.0's schema does not take",
    "kubevirt-launcher-domain-x86_64-root.xml": "a device of KubeVirt's converter that libvirt 9.0's schema does not take",
    "kubevirt-launcher-domain-x86_64.xml": "a device of KubeVirt's converter that libvirt 9.0's schema does not take",
    "libvirt-qemu-numa-pinned-rhel.xml": "a MAC address 'aa:ss:bb:cc:dd:ee' (anonymised by hand)",
    "nova-fake-kvm-guest-sev-hugepages-nodesets.xml": "<os><type>linux</type>",
    "nova-rhosp-pinned-2cell-variant.xml": "a uuid of 33 hex digits (anonymised by hand)",
    "nova-rhosp10-pinned-2cell-numatune-strict.xml": "a uuid of 33 hex digits (anonymised by hand)",
    "ovirt-vm-disk-block.xml": "a device of vdsm's test data that the schema does not take",
    "ovirt-vm-spice-restore-numatune.xml": "a cdrom <disk> the schema does not take",
    "ovirt-vm-sriov-hostdev.xml": "a bridge named ';vdsmdummy;'",
    "ovirt-windows10-sysprep-empty-cputune.xml": "a device of vdsm's test data that the schema does not take",
    "vfio-archlinux-ryzen5950x-hyperv-hypervclock-hugepages.xml": "<watchdog model='itco'>, newer than libvirt 9.0",
    "vfio-win10-alyssadev-vcpupin-only.xml": "<audio type='pipewire'>, newer than libvirt 9.0",
    "vfio-win10-ryzen5950x-sotigr-hyperv-custom.xml": "<watchdog model='itco'>, newer than libvirt 9.0",
    "vfio-win10-ryzen9950x3d-vcache-ccd-pinned.xml": "<watchdog model='itco'>, newer than libvirt 9.0",
    "vfio-win11-9070xt-hidden-vendorid.xml": "<watchdog model='itco'>, newer than libvirt 9.0",
    "vfio-win11-iliab1-hidden-pins.xml": "a malformed uuid",
    "vfio-win11-stewi1014-16vcpu-pins.xml": "<audio type='pipewire'>, newer than libvirt 9.0",
}
# Inputs vmtune refuses in one line on every host, and the words that say why (libvirt refuses them too).
REFUSED = {"nova-fake-kvm-guest-sev-hugepages-nodesets.xml": "no such guest NUMA cell"}


# -- the corpus ----------------------------------------------------------------------------------------
def test_files_are_unchanged_and_have_a_source():
    """Every file is the one SOURCES.md describes: its digest is in SHA256SUMS, and SOURCES.md has a
    row for it (a file edited by hand, added without a source or lost, fails here)."""
    sums = dict(reversed(line.split("  ", 1)) for line in (DATA / "SHA256SUMS").read_text().splitlines())
    files = {f"{p.parent.name}/{p.name}": p for p in DATA.glob("*/*.xml")}
    assert set(sums) == set(files)
    for rel, path in files.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == sums[rel], f"{rel} changed"
    sources = (DATA / "SOURCES.md").read_text()
    for path in files.values():
        assert f"| {path.name} |" in sources, f"{path.name} has no row in SOURCES.md"


def test_corpus_has_the_kinds_issue_32_names():
    """At least 25 domains, and each kind issue 32 asks for is there: VFIO Windows and Linux guests,
    Nova (pinned and real-time), oVirt, KubeVirt; hosts with uneven L3 sizes, with uneven SMT widths
    in one socket (hybrid), with two sockets."""
    assert len(DOMAINS) >= 25
    texts = {p.name: p.read_text() for p in DOMAINS}

    def some(*needles):
        return [n for n, t in texts.items() if all(re.search(x, t) for x in needles)]

    assert some("<hostdev", "microsoft.com/win", "<hidden state=.on.", "vendor_id", "<vcpupin", "<hugepages")
    assert some("<hostdev", "archlinux", "<hyperv")
    assert some("nova:instance", "<vcpusched", "<locked")
    assert some("nova:instance", "<vcpupin", "<numatune")
    assert some("ovirt-vm"), some("kubevirt")
    assert some("<vcpu [^>]*enabled=.no.")
    hosts = list(REALWORLD_HOSTS.values())
    assert any(len({c.size_kib for c in h.caches}) > 1 for h in hosts), "no host with uneven L3 sizes"
    assert any(len({len(h.core_of(c)) for c in h.cpus}) > 1 for h in hosts), "no hybrid host"
    assert any(len({c.socket for c in h.cpus.values()}) > 1 and len(h.cells) > 1 for h in hosts)


def test_every_host_loads():
    """Every x86_64 host of the corpus loads, with CPUs on every node that has any, and its L3
    domains cover its CPUs where it gives caches."""
    for name, host in REALWORLD_HOSTS.items():
        assert host.arch == "x86_64" and host.cpus, name
        if host.caches:
            assert set().union(*(c.cpus for c in host.caches)) == set(host.cpus), name


@pytest.mark.skipif(not schema_available(), reason="libvirt's domain.rng is not installed")
def test_schema_verdicts_are_as_listed():
    """libvirt's schema refuses exactly the inputs SCHEMA_REFUSES lists, so the output check below
    covers every other input."""
    refused = {p.name for p in DOMAINS if validate_domain(p.read_bytes())}
    assert refused == set(SCHEMA_REFUSES)


# -- vmtune over the corpus ------------------------------------------------------------------------------
FIT = re.compile(r"(\d+) dedicated vCPUs do not fit: (\d+) free (CPUs|cores) outside the reserved set")
MEMORY = re.compile(r"dedicated vCPUs fit \(\d+ free (?:CPUs|cores)\) but (\d+) KiB of memory does not")


def assert_honestly_does_not_fit(exc: DoesNotFit, host: vmtune.Host, profile: str, where: str):
    """DoesNotFit only under a profile that dedicates CPUs, and only where it is true: more vCPUs
    than the host's CPUs (latency) or cores (realtime) outside its reserved set, or more memory than
    any of its nodes has."""
    assert profile in ("latency", "realtime"), f"{where}: {exc}"
    message = str(exc)
    assert "\n" not in message
    reserved = host.reserved()
    if found := FIT.search(message):
        want, free, unit = int(found[1]), int(found[2]), found[3]
        if unit == "CPUs":
            really = len(set(host.cpus) - reserved)
        else:
            really = sum(1 for n in host.node_ids for core in host.cores(n) if not set(core) & reserved)
        assert free == really and want > free, f"{where}: {message} (the host has {really} free {unit})"
    elif found := MEMORY.search(message):
        biggest = max(cell.memory_kib + sum(size * count for size, count in cell.pages.items())
                      for cell in host.cells)
        assert int(found[1]) > biggest, f"{where}: {message} (the biggest node has {biggest} KiB)"
    else:
        pytest.fail(f"{where}: a DoesNotFit this test does not know: {message}")


EVERY = pytest.mark.parametrize("path", DOMAINS, ids=lambda p: p.stem)
EACH_PROFILE = pytest.mark.parametrize("profile", PROFILES)


@EACH_PROFILE
@EVERY
def test_tuned_refused_or_honestly_too_big(path, profile):
    """On each of its sample hosts the domain is refused in one line (only those in REFUSED), does
    not fit where that is true, or is tuned; never a traceback."""
    for name, host, result in outcomes(path, profile):
        where = f"{path.name} on {name} ({profile})"
        if isinstance(result, DoesNotFit):
            assert_honestly_does_not_fit(result, host, profile, where)
        elif isinstance(result, InvalidInput):
            assert path.name in REFUSED and REFUSED[path.name] in str(result), f"{where}: {result}"
            assert "\n" not in str(result)
        else:
            assert not isinstance(result, VmtuneError), f"{where}: {result!r}"
            assert path.name not in REFUSED, f"{where}: tuned, but libvirt refuses it"


@EACH_PROFILE
@EVERY
def test_output_is_valid_tagged_idempotent_and_untunable(path, profile):
    """A tuned domain carries vmtune's tag and record, has one-line reasons and warnings, is valid for
    libvirt's schema when its input was, is tuned again to the same bytes, and untune gives back the
    input byte for byte (issue 32, item 4)."""
    xml = path.read_bytes()
    check_schema = schema_available() and path.name not in SCHEMA_REFUSES
    for where, host, result, out in tuned(path, profile):
        tag = out.find(f"metadata/{{{VMTUNE_NS}}}tune")
        assert tag is not None and tag.get("profile") == profile, where
        assert tag.find(f"{{{VMTUNE_NS}}}undo") is not None, f"{where}: no record"
        assert all(c.reason and "\n" not in c.reason for c in result.changes), where
        assert all("\n" not in w for w in result.warnings), where
        if check_schema:
            assert validate_domain(result.xml) == [], f"{where}: {validate_domain(result.xml)[:3]}"
        assert vmtune.rewrite(result.xml, host, profile).xml == result.xml, f"{where}: not idempotent"
        back = vmtune.untune(result.xml).xml
        assert back.encode() == xml, f"{where}: untune differs"


# -- issue 32's properties that hold today ---------------------------------------------------------------
def realtime_threads(root) -> tuple[set[int], bool]:
    """The vCPUs with a fifo/rr policy, and whether the emulator has one."""
    vcpus = set()
    for sched in root.iter("vcpusched"):
        if sched.get("scheduler") in ("fifo", "rr"):
            vcpus |= cpuset.parse(sched.get("vcpus"))
    return vcpus, any(e.get("scheduler") in ("fifo", "rr") for e in root.iter("emulatorsched"))


@EACH_PROFILE
@EVERY
def test_no_realtime_thread_floats_or_crowds(path, profile):
    """Under throughput and balanced no vCPU or emulator keeps a fifo/rr policy; under latency and
    realtime each fifo/rr vCPU is pinned to CPUs of its own: no other vCPU, emulator or iothread
    and none of the host's reserved CPUs there (issue 32, part 3)."""
    for where, host, _result, out in tuned(path, profile):
        vcpus, emulator = realtime_threads(out)
        if profile in ("throughput", "balanced"):
            assert not vcpus and not emulator, f"{where}: a real-time policy on shared CPUs"
            continue
        pins = {int(e.get("vcpu")): cpuset.parse(e.get("cpuset")) for e in out.iter("vcpupin")}
        others = [cpuset.parse(e.get("cpuset")) for e in out.iter("emulatorpin")] + \
            [cpuset.parse(e.get("cpuset")) for e in out.iter("iothreadpin")]
        for vcpu in vcpus:
            assert vcpu in pins, f"{where}: real-time vCPU {vcpu} floats"
            mine = pins[vcpu]
            crowd = [o for o in others if o & mine] + [q for k, q in pins.items() if k != vcpu and q & mine]
            assert not crowd and not mine & host.reserved(), f"{where}: real-time vCPU {vcpu} shares CPUs {mine}"


@EVERY
def test_a_domains_own_realtime_mask_is_kept(path):
    """A domain's own vcpusched subset (Nova's hw:cpu_realtime_mask) is what realtime keeps."""
    own = {(e.get("vcpus"), e.get("scheduler")) for e in etree.fromstring(path.read_bytes()).iter("vcpusched")}
    for where, _host, _result, out in tuned(path, "realtime"):
        if own:
            assert {(e.get("vcpus"), e.get("scheduler")) for e in out.iter("vcpusched")} == own, where


@EACH_PROFILE
@EVERY
def test_locked_memory_has_a_hard_limit(path, profile):
    """<locked/> never comes without <memtune><hard_limit>."""
    for where, _host, _result, out in tuned(path, profile):
        if out.find("memoryBacking/locked") is not None:
            assert out.find("memtune/hard_limit") is not None, where


@EACH_PROFILE
@EVERY
def test_existing_hugepages_stay_where_a_node_could_hold_them(path, profile):
    """An existing <hugepages> stays when the pools are short now (every host here has empty pools,
    as a VFIO host has before its prepare hook), on a host with a node of the domain's size."""
    root = etree.fromstring(path.read_bytes())
    if root.find("memoryBacking/hugepages") is None:
        return
    memory = units.to_kib(xmltext.text(root.find("memory")), root.find("memory").get("unit"))
    asked = {units.to_kib(p.get("size"), p.get("unit")) for p in root.iterfind("memoryBacking/hugepages/page")
             if p.get("size")}
    for where, host, result, out in tuned(path, profile):
        unknown = not any(cell.memory_kib for cell in host.cells)  # capabilities without <memory>
        sizes = {s for cell in host.cells for s in cell.pages}
        lacks = len(asked) == 1 and sizes and not asked <= sizes  # a page size the host does not have
        if (unknown or max(cell.memory_kib for cell in host.cells) >= memory) and not lacks:
            assert out.find("memoryBacking/hugepages") is not None, f"{where}: <hugepages> removed"
        elif out.find("memoryBacking/hugepages") is None:
            assert any(w.startswith("hugepages removed:") for w in result.warnings), where


MANAGERS = {"nova:instance": "Nova", "ovirt-vm:vm": "oVirt", "kubevirt.io": "KubeVirt"}


@EACH_PROFILE
@EVERY
def test_a_managed_domain_is_said_to_be_managed(path, profile):
    """A domain whose manager writes it anew (Nova, oVirt, KubeVirt metadata) gets a warning naming
    the manager, whatever the profile."""
    text = path.read_text()
    names = [name for needle, name in MANAGERS.items() if needle in text]
    for where, _host, result, _out in tuned(path, profile):
        if names:
            assert any(names[0] in w for w in result.warnings), f"{where}: no word of {names[0]}"


@EVERY
def test_a_hybrid_host_without_core_kinds_is_said(path):
    """On the hybrid hosts as capabilities show them (cores of two threads and of one in a socket,
    no kinds), every latency rewrite warns that the efficiency cores are not known."""
    for where, host, result, _out in tuned(path, "latency"):
        if host.uneven_smt():
            assert any("cores of uneven thread counts" in w for w in result.warnings), where
