"""No real-time thread floats, and none crowds the host (passes/pinning.py, vmtune/placement/housekeeping.py).

Properties over generated domains with real-time schedulers of their own (vCPUs, emulator,
iothreads): under every profile, each real-time thread of the output has a CPU of its own, which
no other thread of the domain and no housekeeping CPU shares; the profiles that give no thread a
CPU of its own remove the real-time policy and say so. The domain's own real-time vCPU subset is
kept; the realtime profile's mask leaves vCPU 0 to the guest. <locked/> comes with a hard limit.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from lxml import etree

import vmtune
from fixtures.hosttrees import hosts
from fixtures.strategies import domains
from vmtune import cpuset
from vmtune.errors import DoesNotFit
from vmtune.passes.memory import QEMU_OVERHEAD_KIB
from vmtune.xml.units import to_kib

# half the profile's examples (HYPOTHESIS_PROFILE=thorough runs more): the rewrites here are whole ones
FEWER = settings(max_examples=max(20, settings.default.max_examples // 2),
                 suppress_health_check=[HealthCheck.filter_too_much])

PROFILES = ("balanced", "latency", "realtime", "throughput")
REALTIME = ("fifo", "rr")


@st.composite
def rt_domains(draw) -> str:
    """A generated domain with <vcpusched>, <emulatorsched> and <iothreadsched> of its own."""
    xml = re.sub(r"<cputune>.*?</cputune>", "", draw(domains(max_vcpus=6, virt_types=("kvm",))))
    vcpus = int(re.search(r">(\d+)</vcpu>", xml).group(1))
    iothreads = draw(st.integers(0, 3))
    scheds = ""
    rt_vcpus = draw(st.sets(st.integers(0, vcpus - 1)))
    if rt_vcpus:
        scheds += (f"<vcpusched vcpus='{cpuset.format(rt_vcpus)}' scheduler='{draw(st.sampled_from(REALTIME))}' "
                   f"priority='{draw(st.integers(1, 99))}'/>")
    if draw(st.booleans()):
        policy = draw(st.sampled_from(REALTIME + ("batch",)))
        scheds += f"<emulatorsched scheduler='{policy}'{'' if policy == 'batch' else ' priority=' + chr(39) + '10' + chr(39)}/>"
    if iothreads and draw(st.booleans()):
        scheds += f"<iothreadsched iothreads='{draw(st.integers(1, iothreads))}' scheduler='fifo' priority='5'/>"
    head = f"<iothreads>{iothreads}</iothreads>" if iothreads else ""
    return xml.replace("<os>", f"{head}<cputune>{scheds}</cputune><os>", 1) if scheds else xml


def _threads(root) -> dict[str, frozenset[int]]:
    """Each thread's pin: vcpuN, emulator, iothreadN (pinned ones only)."""
    out = {f"vcpu{e.get('vcpu')}": cpuset.parse(e.get("cpuset")) for e in root.iterfind("cputune/vcpupin")}
    pin = root.find("cputune/emulatorpin")
    if pin is not None:
        out["emulator"] = cpuset.parse(pin.get("cpuset"))
    out.update((f"iothread{e.get('iothread')}", cpuset.parse(e.get("cpuset"))) for e in root.iterfind("cputune/iothreadpin"))
    return out


def _realtime(root) -> set[str]:
    """The threads the output runs real-time."""
    out: set[str] = set()
    for el in root.iterfind("cputune/*"):
        if el.get("scheduler") not in REALTIME:
            continue
        if el.tag == "vcpusched":
            out |= {f"vcpu{v}" for v in cpuset.parse(el.get("vcpus"))}
        elif el.tag == "emulatorsched":
            out.add("emulator")
        elif el.tag == "iothreadsched":
            out |= {f"iothread{i}" for i in cpuset.parse(el.get("iothreads"))}
    return out


x86 = hosts(arches=("x86_64",), max_nodes=3)


@FEWER
@given(rt_domains(), x86, st.sampled_from(PROFILES))
def test_no_real_time_thread_floats_or_crowds_the_host(xml, host, profile):
    """Each real-time thread has one CPU, shared with no other thread of the domain and not a
    housekeeping CPU; without a CPU of its own (shared profiles) the policy goes, with a warning."""
    try:
        result = vmtune.rewrite(xml, host, profile)
    except DoesNotFit:
        assume(False)
    root = etree.fromstring(result.xml.encode())
    pins = _threads(root)
    rt = _realtime(root)
    had = _realtime(etree.fromstring(xml.encode()))
    if profile in ("balanced", "throughput"):
        assert not rt
        assert len([w for w in result.warnings if "removed: the" in w and "real-time thread" in w]) == \
            len([e for e in etree.fromstring(xml.encode()).iterfind("cputune/*") if e.get("scheduler") in REALTIME])
        return
    reserved = host.reserved()
    for thread in rt:
        cpus = pins.get(thread)
        assert cpus is not None and len(cpus) == 1, (thread, cpus)
        assert not cpus & reserved
        assert all(not (other & cpus) for name, other in pins.items() if name != thread), (thread, pins)
    own = {t for t in had if t.startswith("vcpu")}
    if own:
        assert {t for t in rt if t.startswith("vcpu")} == own  # the domain's own subset, kept


@FEWER
@given(domains(max_vcpus=4, virt_types=("kvm",)), hosts(arches=("x86_64",), max_nodes=2, max_cores=6, isolated=False))
def test_the_realtime_profile_leaves_vcpu_0_to_the_guest(xml, host):
    """A domain with no real-time <vcpusched> of its own gets FIFO on every vCPU but 0 (on its
    only vCPU when it has one, with a warning)."""
    try:
        result = vmtune.rewrite(xml, host, "realtime")
    except DoesNotFit:
        assume(False)
    root = etree.fromstring(result.xml.encode())
    vcpus = int(root.findtext("vcpu"))
    rt = {int(t[4:]) for t in _realtime(root) if t.startswith("vcpu")}
    assert rt == (set(range(1, vcpus)) or {0})
    assert (vcpus == 1) == any("one vCPU has no housekeeping vCPU" in w for w in result.warnings)


@given(domains(max_vcpus=4), x86, st.sampled_from(PROFILES), st.booleans())
def test_locked_memory_comes_with_a_hard_limit(xml, host, profile, locked):
    """Every output with <locked/> has a <memtune><hard_limit> of at least the guest's memory plus
    QEMU's own; the domain's own hard limit stays as it was."""
    if locked:
        xml = xml.replace("<vcpu", "<memoryBacking><locked/></memoryBacking><vcpu", 1)
    try:
        result = vmtune.rewrite(xml, host, profile)
    except DoesNotFit:
        assume(False)
    root = etree.fromstring(result.xml.encode())
    assume(root.find("memoryBacking/locked") is not None)
    limit = root.find("memtune/hard_limit")
    assert limit is not None
    memory = to_kib(root.findtext("memory"), root.find("memory").get("unit"))
    assert to_kib(limit.text, limit.get("unit")) >= memory + QEMU_OVERHEAD_KIB


def test_a_hand_set_hard_limit_stays():
    xml = ("<domain type='kvm'><name>l</name><memory unit='GiB'>2</memory><memtune><hard_limit unit='GiB'>3"
           "</hard_limit></memtune><vcpu>2</vcpu><os><type arch='x86_64'>hvm</type></os></domain>")
    host = vmtune.Host.from_capabilities(open("examples/hosts/2node-smt.xml", "rb").read())
    out = vmtune.rewrite(xml, host, "realtime").xml
    assert "<hard_limit unit='GiB'>3</hard_limit>" in out.replace('"', "'")
