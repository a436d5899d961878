"""The housekeeping CPUs (vmtune/placement/housekeeping.py): latency domains' emulators and iothreads go to
the housekeeping CPUs nearest their vCPUs, are counted, and a crowded one is said by the rewrite and
reported by ``vmtune plan``."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, assume, given, settings
from lxml import etree

import vmtune
from conftest import EXAMPLES
from fixtures.hosttrees import hosts
from fixtures.strategies import domains
from vmtune.placement import audit, housekeeping
from vmtune import cpuset
from vmtune.errors import DoesNotFit

# half the profile's examples (HYPOTHESIS_PROFILE=thorough runs more): the rewrites here are whole ones
FEWER = settings(max_examples=max(20, settings.default.max_examples // 2),
                 suppress_health_check=[HealthCheck.filter_too_much])

HOST = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())


def _small(i: int) -> str:
    return (f"<domain type='kvm'><name>small{i}</name><uuid>00000000-0000-4000-8000-{i:012d}</uuid>"
            "<memory unit='MiB'>512</memory><vcpu>1</vcpu><iothreads>1</iothreads>"
            "<os><type arch='x86_64'>hvm</type></os><devices><disk type='file' device='disk'>"
            f"<source file='/images/s{i}.img'/><target dev='vda' bus='virtio'/></disk></devices></domain>")


def test_load_splits_each_thread_over_its_pin():
    assert housekeeping.load([frozenset({0, 16}), frozenset({0})]) == {0: 1.5, 16: 0.5}


def test_crowded_housekeeping_cpus_are_said_and_planned():
    """Small latency domains one after another: their emulators and iothreads share the node's
    reserved core; once a CPU carries more than LIMIT of them the rewrite warns and plan reports
    it, and not before."""
    xmls: list[str] = []
    warned = []
    for i in range(12):
        result = vmtune.rewrite(_small(i), HOST, "latency", xmls)
        xmls.append(result.xml)
        warned.append(any(w.startswith("housekeeping CPU") for w in result.warnings))
        report = audit.audit(HOST, [(x, "shut off") for x in xmls])
        loads = housekeeping.load(pin for x in xmls for pin in vmtune.placement.claims.read(x, HOST).helpers)
        over = housekeeping.crowded(loads)
        assert bool(over) == any(p.kind == audit.HOUSEKEEPING for p in report.problems)
        assert warned[-1] == bool(over)
    assert warned[-1] and not warned[0]
    problem = next(p for p in report.problems if p.kind == audit.HOUSEKEEPING)
    assert problem.cpus <= HOST.reserved() and "reserved_cpus" in problem.message


def test_more_housekeeping_cpus_take_the_load():
    """The same domains with two reserved cores a node leave no CPU over the limit."""
    cfg = vmtune.Config(reserved_cpus=cpuset.parse("0-1,16-17,8-9,24-25"))
    xmls: list[str] = []
    for i in range(12):
        result = vmtune.rewrite(_small(i), HOST, "latency", xmls, config=cfg)
        assert not any(w.startswith("housekeeping CPU") for w in result.warnings)
        xmls.append(result.xml)
    report = audit.audit(HOST, [(x, "shut off") for x in xmls], config=cfg)
    assert not any(p.kind == audit.HOUSEKEEPING for p in report.problems)


x86 = hosts(arches=("x86_64",), max_nodes=3, hybrid=False, isolated=False)


@FEWER
@given(domains(max_vcpus=4, virt_types=("kvm",)), x86)
def test_the_emulator_goes_to_the_nearest_housekeeping_cpus(xml, host):
    """A latency domain alone on a host: its emulator is pinned to the reserved CPUs of its L3
    domains where there are any, else to those of its nodes."""
    host = replace(host, cells=tuple(replace(c, memory_kib=1 << 30) for c in host.cells))
    try:
        result = vmtune.rewrite(xml, host, "latency")
    except DoesNotFit:
        assume(False)
    root = etree.fromstring(result.xml.encode())
    pins = frozenset(int(e.get("cpuset")) for e in root.iterfind("cputune/vcpupin"))
    emulator = cpuset.parse(root.find("cputune/emulatorpin").get("cpuset"))
    reserved = host.reserved()
    l3s = {host.l3_of(c) for c in pins} - {None}
    near = frozenset(c for c in reserved if host.l3_of(c) in l3s)
    local = frozenset(c for c in reserved if host.cpus[c].node in {host.cpus[p].node for p in pins})
    if near:
        assert emulator == near
    elif local:
        assert emulator == local


def test_iothreads_the_hand_spread_over_cores_stay_spread():
    """Nine iothreads pinned by hand over three cores (not the reserved one) stay where they are,
    and the vCPUs take other cores; the emulator's hand pin stays too."""
    pins = "".join(f"<iothreadpin iothread='{i + 1}' cpuset='{c},{c + 16}'/>" for i, c in enumerate([5, 6, 7] * 3))
    xml = ("<domain type='kvm'><name>io</name><memory unit='GiB'>4</memory><vcpu>4</vcpu><iothreads>9</iothreads>"
           f"<cputune><emulatorpin cpuset='5,21'/>{pins}</cputune><os><type arch='x86_64'>hvm</type></os></domain>")
    result = vmtune.rewrite(xml, HOST, "latency")
    root = etree.fromstring(result.xml.encode())
    kept = {e.get("iothread"): e.get("cpuset") for e in root.iterfind("cputune/iothreadpin")}
    assert kept == {str(i + 1): f"{c},{c + 16}" for i, c in enumerate([5, 6, 7] * 3)}
    assert root.find("cputune/emulatorpin").get("cpuset") == "5,21"
    vcpus = {int(e.get("cpuset")) for e in root.iterfind("cputune/vcpupin")}
    assert not vcpus & {5, 6, 7, 21, 22, 23}
    assert not any("moved to" in w for w in result.warnings)
