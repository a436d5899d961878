"""vmtune/placement/intent.py: what the user set on purpose bounds the tuning, and every override is said.

Properties over generated domains and hosts: the domain's own hugepages stay when the pool is short
(and go only where they can never fit, saying why); a <vcpu cpuset> bounds a dedicated placement
(exactly as many vCPUs outside it as its free room lacks, each named); one-CPU-per-vCPU hand pins on
CPUs the profile can use stay as they are; among the L3 domains that fit, the larger cache wins.
"""

from __future__ import annotations

import re
from dataclasses import replace

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from lxml import etree

import vmtune
from fixtures.hosttrees import hosts
from fixtures.strategies import domains
from vmtune import cpuset
from vmtune.placement import intent
from vmtune.errors import DoesNotFit
from vmtune.xml.model import Domain
from vmtune.placement.search import taken_cores

# half the profile's examples (HYPOTHESIS_PROFILE=thorough runs more): the rewrites here are whole ones
FEWER = settings(max_examples=max(20, settings.default.max_examples // 2),
                 suppress_health_check=[HealthCheck.filter_too_much])

DEDICATED = ("latency", "realtime")
TIB = 1 << 30  # KiB


def _roomy(host: vmtune.Host, pages: int = 0) -> vmtune.Host:
    """``host`` with memory no domain runs out of, and ``pages`` free hugepages of each size."""
    cells = tuple(replace(c, memory_kib=TIB, pages={s: pages for s in c.pages}) for c in host.cells)
    return replace(host, cells=cells)


def _plain(xml: str) -> str:
    """A generated domain without its pins, <vcpu cpuset> or guest cells."""
    xml = re.sub(r"<cputune>.*?</cputune>", "", xml)
    xml = re.sub(r"<numa>.*?</numa>", "", xml)
    return xml.replace(" cpuset='0-3,525'", "")


def _pins(out: str) -> list[int]:
    root = etree.fromstring(out.encode())
    pins = {int(e.get("vcpu")): e.get("cpuset") for e in root.iterfind("cputune/vcpupin")}
    return [int(pins[v]) for v in sorted(pins)]


x86 = hosts(arches=("x86_64",), max_nodes=3, memoryless=False, memory_only=False, isolated=False)


# -- hugepages -----------------------------------------------------------------------------------
PAGES = ("", "<page size='2048' unit='KiB'/>", "<page size='1' unit='G'/>", "<page size='16' unit='G'/>")


@FEWER
@given(domains(max_vcpus=4), x86, st.sampled_from(PAGES), st.sampled_from(DEDICATED), st.booleans())
def test_the_domains_own_hugepages_stay_unless_they_can_never_fit(xml, host, page, profile, tiny):
    """A domain's own <hugepages> survive an empty pool; they go only for a page size the host
    lacks or more memory than its node has, and the warning says which, truly."""
    host = _roomy(host, pages=0)
    if tiny:  # nodes too small for the memory
        host = replace(host, cells=tuple(replace(c, memory_kib=65536) for c in host.cells))
    xml = _plain(xml).replace("<vcpu", f"<memoryBacking><hugepages>{page}</hugepages></memoryBacking><vcpu", 1)
    try:
        result = vmtune.rewrite(xml, host, profile)
    except DoesNotFit:
        assume(False)
    out = etree.fromstring(result.xml.encode())
    sizes = {s for c in host.cells for s in c.pages}
    asked = intent.read(Domain(etree.fromstring(xml.encode())), host).page_kib
    gone = [w for w in result.warnings if w.startswith("hugepages removed:")]
    if out.find("memoryBacking/hugepages") is not None:
        assert not gone
        size = result.placement["hugepage_kib"]
        assert (size in sizes or not sizes) and (asked is None or size == asked)
        if not any(c.pages.get(size) for c in host.cells):
            assert any(w.startswith("hugepages kept:") for w in result.warnings)
    else:
        assert len(gone) == 1, result.warnings
        if "does not have" in gone[0]:
            assert sizes and (asked or min(sizes)) not in sizes
        else:
            assert tiny and "more than the node's memory" in gone[0]


# -- a <vcpu cpuset> -----------------------------------------------------------------------------
def _room(host: vmtune.Host, cpus: frozenset[int], smt: str) -> int:
    """How many dedicated vCPUs ``cpus`` hold on an empty host: threads (or cores) of the cores
    outside the reserved ones."""
    blocked = taken_cores(host, host.default_reserved())
    free = [c for c in cpus if c not in blocked]
    return len({host.core_of(c) for c in free}) if smt == "isolate" else len(free)


@FEWER
@given(domains(max_vcpus=6, virt_types=("kvm",)), x86, st.data(), st.sampled_from(DEDICATED))
def test_vcpus_go_inside_the_cpuset_as_far_as_it_holds_them(xml, host, data, profile):
    """Exactly as many vCPUs land outside a <vcpu cpuset> as its free room lacks, and the warning
    names exactly those vCPUs."""
    assume(not host.hybrid)
    host = _roomy(host)
    given_cpus = frozenset(data.draw(st.sets(st.sampled_from(sorted(host.cpus)), min_size=1)))
    xml = _plain(xml).replace("<vcpu placement='static'>", f"<vcpu placement='static' cpuset='{cpuset.format(given_cpus)}'>")
    try:
        result = vmtune.rewrite(xml, host, profile)
    except DoesNotFit:
        assume(False)
    pins = _pins(result.xml)
    outside = [v for v, c in enumerate(pins) if c not in given_cpus]
    smt = "isolate" if profile == "realtime" else "threads"
    assert len(outside) == max(0, len(pins) - _room(host, given_cpus, smt))
    named = [w for w in result.warnings if "outside <vcpu cpuset=" in w]
    if outside:
        assert len(named) == 1 and named[0].startswith(f"vCPU{'s' if len(outside) > 1 else ''} {cpuset.format(outside)} ")
    else:
        assert not named


# -- hand pins -------------------------------------------------------------------------------------
@FEWER
@given(domains(max_vcpus=4, virt_types=("kvm",)), x86, st.data())
def test_hand_pins_the_profile_can_live_with_stay_as_they_are(xml, host, data):
    """One CPU per vCPU, on CPUs of one node that no one holds, stays exactly (latency)."""
    host = _roomy(host)
    blocked = taken_cores(host, host.default_reserved())
    nodes = [c.id for c in host.cells if set(c.cpus) - blocked]
    assume(nodes)
    node = data.draw(st.sampled_from(nodes))
    free = sorted(set(host.cell(node).cpus) - blocked)
    vcpus = Domain(etree.fromstring(xml.encode())).vcpus
    assume(len(free) >= vcpus)
    hand = data.draw(st.permutations(free))[:vcpus]
    pins = "".join(f"<vcpupin vcpu='{v}' cpuset='{c}'/>" for v, c in enumerate(hand))
    xml = _plain(xml).replace("<os>", f"<cputune>{pins}</cputune><os>", 1)
    try:
        result = vmtune.rewrite(xml, host, "latency")
    except DoesNotFit:
        assume(False)
    assert _pins(result.xml) == list(hand)
    assert not any("<vcpupin>s" in w for w in result.warnings)


@FEWER
@given(domains(max_vcpus=4, virt_types=("kvm",)), x86, st.data())
def test_hand_pins_on_held_cpus_are_replaced_and_said(xml, host, data):
    """Hand pins on the host's reserved CPUs give way, with a warning naming them and why."""
    host = _roomy(host)
    reserved = sorted(host.default_reserved())
    vcpus = Domain(etree.fromstring(xml.encode())).vcpus
    hand = [reserved[v % len(reserved)] for v in range(vcpus)]
    assume(len(set(hand)) == vcpus)
    pins = "".join(f"<vcpupin vcpu='{v}' cpuset='{c}'/>" for v, c in enumerate(hand))
    xml = _plain(xml).replace("<os>", f"<cputune>{pins}</cputune><os>", 1)
    try:
        result = vmtune.rewrite(xml, host, "latency")
    except DoesNotFit:
        assume(False)
    assert not set(_pins(result.xml)) & set(reserved)
    said = [w for w in result.warnings if w.startswith("the hand's <vcpupin>s")]
    assert len(said) == 1 and "kept for the host" in said[0]


# -- L3 size ---------------------------------------------------------------------------------------
@FEWER
@given(domains(max_vcpus=4, virt_types=("kvm",)),
       hosts(arches=("x86_64",), max_nodes=2, memoryless=False, memory_only=False, isolated=False, uneven_l3=True,
             max_cores=6, unknown_topology=False, hybrid=False).filter(lambda h: len(h.caches) > 1))
def test_among_the_l3_domains_that_fit_the_larger_cache_wins(xml, host):
    """A latency domain in one L3 domain is in the largest of those whose free room on one node
    holds it all."""
    assume(host.caches and not host.hybrid)
    host = _roomy(host)
    try:
        result = vmtune.rewrite(_plain(xml), host, "latency")
    except DoesNotFit:
        assume(False)
    pins = _pins(result.xml)
    chosen = {host.l3_of(c) for c in pins}
    assume(len(chosen) == 1 and len({host.cpus[c].node for c in pins}) == 1)
    blocked = taken_cores(host, host.default_reserved())
    room: dict[tuple[int, int], int] = {}
    for c in host.cpus:
        if c not in blocked and host.l3_of(c) is not None:
            key = (host.cpus[c].node, host.l3_of(c))
            room[key] = room.get(key, 0) + 1
    fits = [host.cache(l3).size_kib for (_, l3), n in room.items() if n >= len(pins)]
    assert host.cache(chosen.pop()).size_kib == max(fits)
    if len({c.size_kib for c in host.caches}) > 1:
        assert any(w.startswith("L3 size:") for w in result.placement["why"])


def test_an_x3d_gaming_vm_pinned_to_the_vcache_ccd_stays_there():
    """A 7950X3D VM given the 96 MiB CCD keeps it (14 of its 16 CPUs are free: 2 vCPUs go to the
    other CCD, named); without a cpuset, the larger cache wins too."""
    from fixtures.hosttrees import x3d

    host = x3d()
    vcache = cpuset.parse("0-7,16-23")
    xml = ("<domain type='kvm'><name>g</name><memory unit='GiB'>16</memory>"
           "<vcpu placement='static' cpuset='0-7,16-23'>{n}</vcpu><os><type arch='x86_64'>hvm</type></os></domain>")
    whole = vmtune.rewrite(xml.format(n=12), host, "latency")
    assert set(_pins(whole.xml)) <= vcache and not any("outside" in w for w in whole.warnings)
    over = vmtune.rewrite(xml.format(n=16), host, "latency")
    assert [c for c in _pins(over.xml) if c not in vcache] == _pins(over.xml)[14:]
    assert any(w.startswith("vCPUs 14-15 on CPUs") and "outside <vcpu cpuset='0-7,16-23'>" in w for w in over.warnings)
    free = vmtune.rewrite(xml.format(n=8).replace(" cpuset='0-7,16-23'", ""), host, "latency")
    assert set(_pins(free.xml)) <= vcache


# -- disabled placeholder vCPUs --------------------------------------------------------------------
def test_disabled_placeholder_vcpus_are_named_when_they_decide_the_fit():
    """<vcpu current='2'>16</vcpu> pins all 16 (a vCPU enabled later needs its CPU): where that
    spans two nodes, or does not fit, the placeholders are named."""
    from conftest import EXAMPLES

    host = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    xml = ("<domain type='kvm'><name>p</name><memory unit='GiB'>4</memory><vcpu placement='static' current='2'>{n}"
           "</vcpu><os><type arch='x86_64'>hvm</type></os></domain>")
    spans = vmtune.rewrite(xml.format(n=16), host, "latency")
    assert len(spans.placement["nodes"]) == 2
    assert any("14 of the 16 vCPUs are disabled placeholders" in w and "2 enabled vCPUs alone would fit on 1 node"
               in w for w in spans.warnings)
    try:
        vmtune.rewrite(xml.format(n=40), host, "latency")
    except DoesNotFit as exc:
        assert "38 of the 40 vCPUs are disabled placeholders" in str(exc)
    else:
        raise AssertionError("40 dedicated vCPUs fit on a host of 28 free CPUs")
    one = vmtune.rewrite(xml.format(n=4), host, "latency")
    assert not any("placeholders" in w for w in one.warnings)


def test_placeholders_are_named_only_where_they_decide_the_fit():
    """Over the real-world hosts, a published VM with <vcpu current='20'>26</vcpu>: where 26 do not
    fit, the placeholders are named exactly when the 20 enabled vCPUs would fit in the free room."""
    from pathlib import Path

    data = Path(__file__).resolve().parent / "data" / "realworld"
    xml = next((data / "domains").glob("*placeholder*.xml")).read_bytes()
    seen = set()
    for path in sorted((data / "hosts").glob("*.xml")):
        host = vmtune.Host.from_capabilities(path.read_bytes())
        try:
            vmtune.rewrite(xml, host, "latency")
        except DoesNotFit as exc:
            free = int(re.search(r"(\d+) free (?:CPUs|cores)", str(exc)).group(1))
            named = "disabled placeholders" in str(exc)
            assert named == (20 <= free), str(exc)
            seen.add(named)
    assert seen == {True, False}
