"""vmtune.placement.audit: the problems of a whole host's domains, without libvirt.

Hand-made cases on the example 2-node host, then properties over generated fleets: the problems
found are exactly the pairs that overlap (complete and sound against an oracle computed from what
the generator drew), they do not depend on the order the domains come in, and a fleet placed by the
rewriter in ``vmtune apply --all`` order audits clean.
"""

from __future__ import annotations

import json
import random
from itertools import permutations

import pytest
from conftest import EXAMPLES
from fixtures.hosttrees import hosts
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from lxml import etree
from fixtures.strategies import domains as domain_xmls

import vmtune
import vmtune.xml.model
from vmtune import Config, cpuset
from vmtune.placement.audit import (
    CORE_OVERLAP,
    CPU_OVERLAP,
    FLOAT,
    HOUSEKEEPING,
    HUGEPAGES,
    NOT_APPLIED,
    ON_RESERVED,
    UNKNOWN_PROFILE,
    NOT_LIVE,
    audit,
    holds_now,
    live_drift,
    with_live_drift,
)
from vmtune.errors import DoesNotFit, InvalidInput
from vmtune.host import Host
from vmtune.live import planner
from vmtune.xml.model import Domain

HOST = Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())  # reserved 0,16 / 8,24
NS = "https://vmtune.dev/xmlns/1"


@pytest.fixture(autouse=True)
def no_user_profiles(tmp_path_factory, monkeypatch):
    """Profiles come from the built-ins only, whatever /etc/vmtune holds."""
    monkeypatch.setenv("VMTUNE_PROFILES", str(tmp_path_factory.mktemp("no-profiles")))


def dom(name, vcpus=1, pins=None, tag=None, cpuset_=None, emulator=None, iothreads=(), mib=1024,
        hugepages=None, nodeset=None, uuid=None):
    """A domain XML: ``pins`` one cpuset per vCPU, ``iothreads`` a cpuset per iothread (None: unpinned),
    ``hugepages`` a page size in KiB, ``nodeset`` a strict memory binding."""
    meta = f"<metadata><vmtune:tune xmlns:vmtune='{NS}' profile='{tag}'/></metadata>" if tag else ""
    vcpu_attr = f" cpuset='{cpuset_}'" if cpuset_ else ""
    tune = "".join(f"<vcpupin vcpu='{v}' cpuset='{p}'/>" for v, p in enumerate(pins or ()))
    if emulator:
        tune += f"<emulatorpin cpuset='{emulator}'/>"
    tune += "".join(f"<iothreadpin iothread='{i + 1}' cpuset='{p}'/>" for i, p in enumerate(iothreads) if p)
    backing = f"<memoryBacking><hugepages><page size='{hugepages}' unit='KiB'/></hugepages></memoryBacking>" if hugepages else ""
    numa = f"<numatune><memory mode='strict' nodeset='{nodeset}'/></numatune>" if nodeset is not None else ""
    io = f"<iothreads>{len(iothreads)}</iothreads>" if iothreads else ""
    return (f"<domain type='kvm'><name>{name}</name><uuid>{uuid or _uuid(name)}</uuid>{meta}"
            f"<memory unit='MiB'>{mib}</memory>{backing}<vcpu placement='static'{vcpu_attr}>{vcpus}</vcpu>{io}"
            f"{'<cputune>' + tune + '</cputune>' if tune else ''}{numa}"
            "<os><type arch='x86_64' machine='q35'>hvm</type></os><devices/></domain>")


def _uuid(name: str) -> str:
    digits = "".join(f"{ord(c):02x}" for c in name)[-12:].rjust(12, "0")
    return f"00000000-0000-4000-8000-{digits}"


def kinds(report) -> list[str]:
    return [p.kind for p in report.problems]


def only(report, kind):
    found = [p for p in report.problems if p.kind == kind]
    assert len(found) == 1, report.problems
    return found[0]


# -- overlaps -----------------------------------------------------------------------------------------
def test_two_latency_domains_sharing_a_cpu():
    """Two latency domains pinned to the same CPU: one cpu-overlap naming both and the shared CPU."""
    report = audit(HOST, [(dom("a", 2, ["1", "2"], "latency", emulator="0"), "running"),
                          (dom("b", 2, ["2", "3"], "latency", emulator="0"), "shut off")])
    p = only(report, CPU_OVERLAP)
    assert p.domains == ("a", "b") and p.cpus == {2} and p.nodes == (0,)
    assert "a (latency) and b (latency)" in p.message and "CPU 2" in p.message
    assert not report.ok and kinds(report) == [CPU_OVERLAP]


def test_sibling_threads_are_a_core_overlap():
    """CPUs 1 and 17 are the two threads of one core: holding one each is a core-overlap."""
    report = audit(HOST, [(dom("a", 1, ["1"], "latency", emulator="0"), "running"),
                          (dom("b", 1, ["17"], "latency", emulator="0"), "running")])
    p = only(report, CORE_OVERLAP)
    assert p.domains == ("a", "b") and p.cpus == {1, 17}
    assert kinds(report) == [CORE_OVERLAP]


def test_pinned_untagged_domains_count_as_dedicated():
    """Every vCPU pinned to one CPU holds it, tag or not (the ledger's rule)."""
    report = audit(HOST, [(dom("a", 1, ["5"], emulator="0"), "running"),
                          (dom("b", 1, ["5"], emulator="0"), "running")])
    assert only(report, CPU_OVERLAP).cpus == {5}


def test_disjoint_latency_domains_are_fine():
    report = audit(HOST, [(dom("a", 2, ["1", "17"], "latency", emulator="0,16"), "running"),
                          (dom("b", 2, ["2", "18"], "latency", emulator="0,16"), "running")])
    assert report.ok, report.problems


# -- floating --------------------------------------------------------------------------------------
def test_batch_domain_without_cpuset_floats_onto_latency_cpus():
    """A balanced domain with no cpuset can run anywhere, so on the latency domain's core too."""
    report = audit(HOST, [(dom("lat", 1, ["3"], "latency", emulator="0"), "running"),
                          (dom("web", 2, tag="balanced"), "running")])
    p = only(report, FLOAT)
    assert p.domains == ("web", "lat")
    assert p.cpus == {3, 19}  # the whole core: CPU 3 and its sibling
    assert "vCPUs, emulator" in p.message and "vmtune apply web" in p.message


def test_batch_domain_kept_off_the_core_is_fine():
    cpus = cpuset.format(frozenset(HOST.cpus) - {3, 19})
    report = audit(HOST, [(dom("lat", 1, ["3"], "latency", emulator="0"), "running"),
                          (dom("web", 2, tag="balanced", cpuset_=cpus), "shut off")])
    assert report.ok, report.problems


def test_batch_domain_on_the_sibling_thread_floats():
    """A cpuset that avoids CPU 3 but includes its sibling 19 still shares the core."""
    cpus = cpuset.format(frozenset(HOST.cpus) - {3})
    report = audit(HOST, [(dom("lat", 1, ["3"], "latency", emulator="0"), "running"),
                          (dom("web", 2, cpuset_=cpus), "running")])
    assert only(report, FLOAT).cpus == {19}


def test_pins_override_the_cpuset():
    """Per-vCPU pins and the emulator pin, not the domain-wide cpuset, say where threads run."""
    report = audit(HOST, [(dom("lat", 1, ["3"], "latency", emulator="0"), "running"),
                          (dom("web", 2, ["4-5", "4-5"], cpuset_="3", emulator="6"), "running")])
    assert report.ok, report.problems


def test_reserved_cpus_are_shared_by_design():
    """Nothing floats onto a reserved CPU, even one a domain pins a vCPU to; a latency domain
    pinned there is a problem of its own."""
    report = audit(HOST, [(dom("lat", 1, ["0"], "latency", emulator="16"), "running"),
                          (dom("web", 1, ["0"], tag="balanced"), "running"),
                          (dom("batch", 2), "running")])
    assert kinds(report) == [CPU_OVERLAP, ON_RESERVED], report.problems
    assert only(report, ON_RESERVED).domains == ("lat",) and only(report, ON_RESERVED).cpus == {0}


def test_iothreads_and_emulator_of_a_latency_domain_can_float():
    """A latency domain's emulator and an unpinned iothread on another's core are float problems."""
    report = audit(HOST, [(dom("a", 1, ["1"], "latency", emulator="2", iothreads=["0", None]), "running"),
                          (dom("b", 1, ["2"], "latency", emulator="0"), "running")])
    floats = [p for p in report.problems if p.kind == FLOAT]
    assert [(p.domains, p.cpus) for p in floats] == [(("a", "b"), frozenset(HOST.core_of(2)))]
    assert "emulator, iothreads" in floats[0].message


# -- tags ----------------------------------------------------------------------------------------------
def test_tagged_latency_not_yet_applied():
    """Tagged latency with no pins: not-applied (and it holds nothing, so nothing floats onto it)."""
    report = audit(HOST, [(dom("fresh", 2, tag="latency"), "shut off"), (dom("web", 2), "running")])
    p = only(report, NOT_APPLIED)
    assert p.domains == ("fresh",) and "vmtune apply fresh" in p.message
    assert kinds(report) == [NOT_APPLIED]


def test_half_pinned_latency_domain_is_not_applied():
    report = audit(HOST, [(dom("half", 2, ["1"], "latency", emulator="0"), "shut off")])
    assert kinds(report) == [NOT_APPLIED]


def test_balanced_tag_needs_no_pins_and_unknown_profiles_are_named():
    report = audit(HOST, [(dom("web", 2, tag="balanced"), "running"), (dom("odd", 1, tag="nosuch"), "running")])
    p = only(report, UNKNOWN_PROFILE)
    assert p.domains == ("odd",) and "'nosuch'" in p.message
    assert kinds(report) == [UNKNOWN_PROFILE]


def test_user_profile_that_pins_is_checked(tmp_path):
    """A profile of the user's that inherits latency is dedicated too."""
    (tmp_path / "db.toml").write_text('inherit = "latency"\ndescription = "db"\n')
    report = audit(HOST, [(dom("db1", 2, tag="db"), "shut off")], config=Config(profiles_dir=str(tmp_path)))
    assert kinds(report) == [NOT_APPLIED]


# -- hugepages -----------------------------------------------------------------------------------------
def test_hugepages_a_node_cannot_back():
    """Node 0 has 8 free 1 GiB pages: two shut-off 6 GiB domains bound there need 12."""
    gib = 1048576
    report = audit(HOST, [
        (dom("a", 1, ["1"], "latency", emulator="0", mib=6144, hugepages=gib, nodeset="0"), "shut off"),
        (dom("b", 1, ["2"], "latency", emulator="0", mib=6144, hugepages=gib, nodeset="0"), "shut off"),
    ])
    p = only(report, HUGEPAGES)
    assert p.domains == ("a", "b") and p.nodes == (0,)
    assert "8 free 1 GiB hugepages" in p.message and "need 12" in p.message
    node0 = report.nodes[0]
    assert node0.hugepages[gib] == (8, 12)


def test_running_domains_hugepages_are_already_taken():
    """A running domain's pages are out of the free count already: not counted again."""
    gib = 1048576
    report = audit(HOST, [
        (dom("a", 1, ["1"], "latency", emulator="0", mib=6144, hugepages=gib, nodeset="0"), "running"),
        (dom("b", 1, ["2"], "latency", emulator="0", mib=6144, hugepages=gib, nodeset="0"), "shut off"),
    ])
    assert report.ok, report.problems
    assert report.nodes[0].hugepages[gib] == (8, 6)


def test_unbound_hugepages_count_against_every_node():
    gib = 1048576
    report = audit(HOST, [(dom("a", 2, mib=20 * 1024, hugepages=gib), "shut off")])  # 16 free in all
    p = only(report, HUGEPAGES)
    assert p.nodes == (0, 1) and "need 20 on any node" in p.message
    assert audit(HOST, [(dom("a", 2, mib=16 * 1024, hugepages=gib), "shut off")]).ok


# -- rows, nodes, input ---------------------------------------------------------------------------------
def test_rows_and_free_per_node():
    """Rows keep the order given; free dedicated CPUs are the free cores outside the reserved ones."""
    report = audit(HOST, [(dom("b", 2, ["9", "25"], "latency", emulator="8", mib=2048, nodeset="1"), "paused"),
                          (dom("a", 1, tag="balanced", cpuset_="0-7"), "shut off")])
    b, a = report.rows
    assert (b.name, b.profile, b.state, b.vcpus, b.pinned, b.dedicated, b.nodes) == (
        "b", "latency", "paused", 2, {9, 25}, {9, 25}, (1,))
    assert (a.name, a.pinned, a.dedicated, a.cpuset, a.nodes) == ("a", frozenset(), frozenset(), frozenset(range(8)), ())
    n0, n1 = report.nodes
    assert n0.reserved == {0, 16} and n0.free_dedicated == frozenset(range(1, 8)) | frozenset(range(17, 24))
    assert n1.dedicated == {9, 25} and n1.free_dedicated == frozenset(range(10, 16)) | frozenset(range(26, 32))
    assert n1.bound_kib == 2048 * 1024
    pool = 4096 * 2048 + 8 * 1048576
    assert n1.free_kib == n1.memory_kib - pool - 2048 * 1024
    json.dumps(report.to_dict())  # JSON-ready


def test_reserved_cpus_from_the_config():
    report = audit(HOST, [], config=Config(reserved_cpus=frozenset({7})))
    assert report.nodes[0].reserved == {7} and 7 not in report.nodes[0].free_dedicated
    assert report.nodes[1].reserved == frozenset() and 8 in report.nodes[1].free_dedicated


def test_domstatus_is_read_like_its_domain():
    """libvirt's /run/libvirt/qemu/NAME.xml wraps the live domain in <domstatus>."""
    inner = dom("a", 1, ["1"], "latency", emulator="0")
    status = f"<domstatus state='running' reason='booted' pid='42'><monitor path='/x'/>{inner}</domstatus>"
    plain, wrapped = audit(HOST, [(inner, "running")]), audit(HOST, [(status, "running")])
    assert wrapped.rows == plain.rows


@pytest.mark.parametrize("bad, needle", [
    ("<domain><name>x</name>", "#2"),
    ("<!DOCTYPE d [<!ENTITY e 'x'>]><domain/>", "entity"),
    ("<capabilities/>", "expected a <domain>"),
])
def test_malformed_xml_is_invalid_input(bad, needle):
    with pytest.raises(InvalidInput, match=needle):
        audit(HOST, [(dom("ok"), "running"), (bad, "running")])


def test_holds_now():
    assert not holds_now("shut off") and not holds_now("SHUTOFF") and not holds_now("shut_off")
    assert holds_now("running") and holds_now("paused") and holds_now("in shutdown")


# -- properties ---------------------------------------------------------------------------------------
x86 = hosts(arches=("x86_64",), max_nodes=3)


@st.composite
def fleets(draw, max_domains: int = 6):
    """(host, specs): latency domains pinned by hand (maybe overlapping, maybe with an emulator pin)
    and batch domains with or without a cpuset, on a generated host."""
    host = draw(x86)
    cpus = sorted(host.cpus)
    specs = []
    for i in range(draw(st.integers(1, max_domains))):
        kind = draw(st.sampled_from(["latency", "latency", "batch"]))
        if kind == "latency":
            pins = draw(st.lists(st.sampled_from(cpus), min_size=1, max_size=3))
            emulator = draw(st.none() | st.sets(st.sampled_from(cpus), min_size=1, max_size=2))
            specs.append({"name": f"d{i}", "kind": kind, "pins": pins, "emulator": emulator})
        else:
            allowed = draw(st.none() | st.sets(st.sampled_from(cpus), min_size=1))
            specs.append({"name": f"d{i}", "kind": kind, "cpuset": allowed})
    return host, specs


def fleet_xml(spec) -> str:
    if spec["kind"] == "latency":
        emulator = cpuset.format(spec["emulator"]) if spec["emulator"] else None
        return dom(spec["name"], len(spec["pins"]), [str(p) for p in spec["pins"]], "latency", emulator=emulator)
    allowed = spec["cpuset"]
    return dom(spec["name"], 2, tag="balanced", cpuset_=cpuset.format(allowed) if allowed else None)


def oracle(host: Host, specs) -> set[tuple]:
    """The overlap and float problems, from what was drawn (no XML read)."""
    every = frozenset(host.cpus)
    reserved = host.default_reserved()

    def core(cpus):
        return frozenset(t for c in cpus for t in (host.cpus[c].siblings | {c}) if t in host.cpus)

    held = {s["name"]: frozenset(s["pins"]) for s in specs if s["kind"] == "latency"}
    out = set()
    names = sorted(held)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if held[a] & held[b]:
                out.add((CPU_OVERLAP, (a, b), held[a] & held[b]))
            elif core(held[a]) & core(held[b]):
                out.add((CORE_OVERLAP, (a, b), core(held[a]) & core(held[b]) & (held[a] | held[b])))
    for s in specs:
        reach = (frozenset(s["emulator"] or every) if s["kind"] == "latency"
                 else frozenset(s["cpuset"] or every))
        for b, cpus in held.items():
            hit = reach & (core(cpus) - reserved)
            if b != s["name"] and hit:
                out.add((FLOAT, (s["name"], b), hit))
    return out


def found(report) -> set[tuple]:
    return {(p.kind, p.domains, p.cpus) for p in report.problems if p.kind in (CPU_OVERLAP, CORE_OVERLAP, FLOAT)}


@given(fleets())
def test_overlaps_and_floats_complete_and_sound(fleet):
    """Every pair that shares a CPU or a core, and every domain that can float onto another's
    dedicated core, is reported with exactly those CPUs; and nothing else is."""
    host, specs = fleet
    report = audit(host, [(fleet_xml(s), "shut off") for s in specs])
    assert found(report) == oracle(host, specs)
    assert not [p for p in report.problems if p.kind == NOT_APPLIED]  # every vCPU pinned to one CPU


@given(fleets(), st.randoms(use_true_random=False))
def test_order_of_domains_does_not_matter(fleet, rnd):
    """The problems and the per-node view are the same whatever order the domains come in;
    the rows follow the input order."""
    host, specs = fleet
    pairs = [(fleet_xml(s), rnd.choice(["running", "shut off"])) for s in specs]
    shuffled = pairs[:]
    rnd.shuffle(shuffled)
    a, b = audit(host, pairs), audit(host, shuffled)
    assert a.problems == b.problems
    assert a.nodes == b.nodes
    assert [r.name for r in b.rows] == [vmtune.xml.model.Domain(etree.fromstring(x)).name for x, _ in shuffled]


@given(fleets(max_domains=4))
def test_overlap_problems_are_symmetric(fleet):
    """Each overlapping pair is reported once, whichever of the two comes first."""
    host, specs = fleet
    xmls = [(fleet_xml(s), "running") for s in specs]
    for order in list(permutations(xmls))[:6]:
        report = audit(host, list(order))
        pairs = [p.domains for p in report.problems if p.kind in (CPU_OVERLAP, CORE_OVERLAP)]
        assert len(pairs) == len(set(pairs)) and all(list(d) == sorted(d) for d in pairs)
        assert found(report) == found(audit(host, xmls))


PROFILES = ("latency", "balanced", "throughput", "latency")


def placed_fleet(host, drawn, config=None, warnings=None):
    """Plan ``drawn`` (xml, profile) as ``vmtune apply`` does (vmtune.live.planner: dedicated
    profiles first, each seeing the ones placed before it); those that do not fit are left out.
    ``warnings`` (a list) gets the rewrites' warnings."""
    targets = []
    for i, (xml, profile) in enumerate(drawn):
        xml = xml.replace("<name>gen</name>", f"<name>vm{i}</name>").replace(
            "000000000001</uuid>", f"{i + 1:012d}</uuid>")
        targets.append(planner.Target(str(i), xml, profile))
    while targets:
        try:
            steps = planner.plan(host, targets, config=config)
            if warnings is not None:
                warnings.extend(w for step in steps for w in step.result.warnings)
            return [step.result.xml for step in steps]
        except DoesNotFit as exc:
            name = str(exc).split(":")[0]
            targets = [t for t in targets if f"<name>{name}</name>" not in t.xml]
    return []


# The emulator and iothreads of a dedicated domain go on the node's reserved CPUs; a host whose
# reserved set is empty on a node (isolcpus covering the whole node) leaves them nowhere safe, which
# the audit reports as a float (see test_emulator_without_reserved_cpus_is_reported).
reserved_hosts = hosts(arches=("x86_64",), max_nodes=3, isolated=False)


@given(reserved_hosts, st.lists(st.tuples(domain_xmls(max_vcpus=4), st.sampled_from(PROFILES)), min_size=1, max_size=5))
def test_a_fleet_placed_by_the_rewriter_audits_clean(host, drawn):
    """Domains rewritten one after another in apply --all order, each seeing the ones before it,
    have no overlap, nothing floating onto dedicated cores, no unapplied tag, and hugepages that fit.
    A housekeeping CPU crowded with emulators and iothreads is the one problem a rewrite may leave
    (a host with too few housekeeping CPUs for its latency domains), and then the rewrite said so."""
    said: list[str] = []
    placed = placed_fleet(host, drawn, warnings=said)
    assume(placed)
    report = audit(host, [(xml, "shut off") for xml in placed])
    assert [p.message for p in report.problems if p.kind != HOUSEKEEPING] == []
    if any(p.kind == HOUSEKEEPING for p in report.problems):
        assert any(w.startswith("housekeeping CPU") and "more than" in w for w in said), said


@settings(suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])  # full hosts are assumed away
@given(reserved_hosts, st.lists(st.tuples(domain_xmls(max_vcpus=4), st.sampled_from(PROFILES)), max_size=4),
       st.integers(1, 4))
def test_free_dedicated_is_where_the_next_latency_domain_goes(host, drawn, vcpus):
    """The CPUs the audit reports free for dedicated vCPUs are the ones the rewriter pins the next
    latency domain to."""
    placed = placed_fleet(host, drawn)
    free = frozenset().union(*(n.free_dedicated for n in audit(host, [(x, "shut off") for x in placed]).nodes))
    new = dom("next", vcpus, mib=256)
    try:
        result = vmtune.rewrite(new, host, "latency", placed)
    except DoesNotFit:
        assume(False)
    pins = set(result.placement["vcpupins"].values())
    assert pins <= free, (pins, free)


def test_emulator_without_reserved_cpus_is_reported():
    """With no reserved CPU on the node, the first latency domain's emulator lands on a free CPU
    that a later latency domain may take: the audit says so (a rewriter limit, not hidden)."""
    from vmtune.host import Cell, Cpu

    cpus = {c: Cpu(c, 0, 0, 0, c, frozenset({c})) for c in range(4)}
    host = Host("x86_64", (Cell(0, (0, 1, 2, 3), 16 * 1048576),), cpus)
    cfg = Config(reserved_cpus=frozenset())
    placed = []
    for name in ("a", "b"):
        placed.append(vmtune.rewrite(dom(name, 1, mib=256), host, "latency", placed, config=cfg).xml)
    report = audit(host, [(x, "shut off") for x in placed], config=cfg)
    # a took CPU 0 with its emulator on 1-3; b took CPU 1
    assert [(p.kind, p.domains, p.cpus) for p in report.problems] == [(FLOAT, ("a", "b"), frozenset({1}))]


def test_shuffled_states_only_move_hugepage_needs():
    """Whether a domain runs changes only the hugepage accounting, never the CPU problems."""
    rnd = random.Random(7)
    xmls = [dom("a", 1, ["1"], "latency", emulator="0"), dom("b", 1, ["1"], "latency", emulator="0"), dom("c", 2)]
    base = found(audit(HOST, [(x, "running") for x in xmls]))
    for _ in range(5):
        assert found(audit(HOST, [(x, rnd.choice(["running", "shut off", "paused"])) for x in xmls])) == base


# -- live_drift: a running domain whose threads are not where its definition pins them ------------------
def test_live_drift_names_the_threads_that_run_elsewhere():
    """Applied without --live: the running vCPU and emulator are unpinned, the definition pins them."""
    defined = dom("web", vcpus=2, pins=("2", "3"), emulator="0", iothreads=("16",))
    running = dom("web", vcpus=2, iothreads=("16",))
    problem = live_drift(HOST, defined, running)
    assert problem is not None and problem.kind == NOT_LIVE and problem.domains == ("web",)
    assert problem.cpus == frozenset({0, 2, 3})
    assert "vcpu0 on " in problem.message and "emulator" in problem.message and "iothread" not in problem.message
    assert "\n" not in problem.message and "vmtune apply --live web" in problem.message


@pytest.mark.parametrize("defined, running", [
    (dom("a", vcpus=2, pins=("2", "3"), emulator="0"), dom("a", vcpus=2, pins=("2", "3"), emulator="0")),
    (dom("a", vcpus=1, cpuset_="1-7"), dom("a", vcpus=1, cpuset_="1-7")),
    (dom("a", vcpus=1), dom("a", vcpus=1)),
], ids=["pinned-alike", "cpuset-alike", "floating-alike"])
def test_live_drift_is_none_when_the_pins_agree(defined, running):
    """Identical pins, an identical <vcpu cpuset> or nothing pinned on both sides: no problem."""
    assert live_drift(HOST, defined, running) is None


def test_live_drift_ignores_numad_placement():
    """placement='auto' lets numad choose at start: the live cpuset and emulator pin differ by design."""
    defined = dom("a", vcpus=1).replace("placement='static'", "placement='auto'")
    running = dom("a", vcpus=1, cpuset_="4-7", emulator="4-7").replace("placement='static'", "placement='auto'")
    assert live_drift(HOST, defined, running) is None


def test_with_live_drift_adds_the_running_persistent_domains_problems_only():
    """vmtune plan's report: a not-live problem for a running persistent domain that drifted, and
    none for one that is stopped, transient or where it should be."""
    from vmtune.live.domains import Defined

    defined = dom("web", vcpus=2, pins=("2", "3"), emulator="0")
    drifted = dom("web", vcpus=2)
    every = [Defined("web", "u1", "running", True, defined, drifted),
             Defined("db", "u2", "running", True, defined.replace("web", "db"), defined.replace("web", "db")),
             Defined("off", "u3", "shut off", True, defined.replace("web", "off"), None),
             Defined("tmp", "u4", "running", False, defined.replace("web", "tmp"), drifted.replace("web", "tmp"))]
    report = audit(HOST, [(d.xml, d.state) for d in every])
    merged = with_live_drift(report, HOST, every)
    assert merged.problems[:len(report.problems)] == report.problems
    assert [(p.kind, p.domains) for p in merged.problems[len(report.problems):]] == [(NOT_LIVE, ("web",))]
    assert with_live_drift(report, HOST, every[1:]) is report


def test_a_throughput_domain_pinned_to_a_one_cpu_shared_set_holds_nothing_as_dedicated():
    """Found by the fleet property: node 0's shared set was one CPU (3) when a 1-vCPU throughput
    domain was placed, so its pin looked dedicated ("pinned alone") and a balanced domain placed
    before it, floating over CPU 3, was reported as a float. A throughput pin is on shared CPUs."""
    from vmtune.host.topology import Cell, Cpu

    cells = (Cell(0, (0, 1, 2, 3), 262144, {}, {}), Cell(1, (4, 5, 6, 7), 0, {}, {}), Cell(2, (), 1024, {}, {}))
    cpus = {i: Cpu(i, 0 if i < 4 else 1, None, None, None, frozenset({i}), None, None) for i in range(8)}
    host = Host("x86_64", cells, cpus, frozenset(), "Intel", None, {})

    def dom(n: int, pinned: bool) -> str:
        pins = "".join(f"<vcpupin vcpu='{i}' cpuset='{i}'/>" for i in range(n)) if pinned else ""
        return (f"<domain type='kvm'><name>gen</name><uuid>00000000-0000-4000-8000-000000000001</uuid>"
                f"<memory unit='MiB'>256</memory><vcpu placement='static'>{n}</vcpu>"
                f"{'<cputune>' + pins + '</cputune>' if pins else ''}<os><type arch='x86_64'>hvm</type></os></domain>")

    placed = placed_fleet(host, [(dom(1, False), "latency"), (dom(1, True), "balanced"), (dom(1, True), "throughput"),
                                 (dom(3, True), "balanced")])
    assert len(placed) == 4
    report = audit(host, [(xml, "shut off") for xml in placed])
    assert report.ok, [p.message for p in report.problems]


def test_a_waiting_target_is_claimed_as_the_profile_it_is_about_to_get():
    """Found by the fleet property: vm1 is tagged throughput and pinned alone to CPU 0, and is planned
    as balanced. While vm0 is placed, vm1 waits with its pins, claimed as balanced will hold them
    (dedicated), not as its old tag (throughput: shared), so vm0 does not float onto them."""
    from vmtune.host.topology import Cell, Cpu

    host = Host("x86_64", (Cell(0, (0, 1), 1024, {}, {}),),
                {i: Cpu(i, 0, None, None, None, frozenset({i}), None, None) for i in range(2)}, frozenset(), "Intel",
                None, {})
    dom = ("<domain type='kvm'><name>gen</name><uuid>00000000-0000-4000-8000-000000000001</uuid>{}"
           "<memory unit='MiB'>256</memory><vcpu placement='static'>1</vcpu><cputune><vcpupin vcpu='0' cpuset='0'/>"
           "</cputune><os><type arch='x86_64'>hvm</type></os></domain>")
    tag = "<metadata><vmtune:tune xmlns:vmtune='https://vmtune.dev/xmlns/1' profile='throughput'/></metadata>"
    placed = placed_fleet(host, [(dom.format(""), "balanced"), (dom.format(tag), "balanced")])
    report = audit(host, [(xml, "shut off") for xml in placed])
    assert len(placed) == 2 and report.ok, [p.message for p in report.problems]


def _small_host(n):
    from vmtune.host import Cell, Cpu

    return vmtune.Host(arch="x86_64", cells=(Cell(0, tuple(range(n)), 1024 * 1024),),
                       cpus={i: Cpu(i, 0, 0, None, i, frozenset({i})) for i in range(n)})


@pytest.mark.parametrize("cpus, profile, pin, unpinned", [
    (2, "balanced", None, True),  # one CPU left: pinned alone there it would be held as dedicated
    (3, "balanced", "1-2", False),  # two left: the pin moves to both, and holds neither alone
    (2, "throughput", "1", False),  # a node's shared CPUs: never held as dedicated, the pin moves
])
def test_a_moved_hand_pin_never_makes_a_sharing_domain_hold_a_cpu(cpus, profile, pin, unpinned):
    """A domain pinned alone by hand to a CPU another domain holds as dedicated: under a profile
    whose pins count as dedicated when every vCPU has one CPU (balanced), a pin vmtune moves to a
    single CPU would hold that CPU for it beside the domains that share it. The moved pin goes and
    the vCPU floats, said in a warning; where the pin can span CPUs, or the profile pins to a node's
    shared CPUs, it moves as before."""
    holder = dom("holder", 1, ["0"], mib=256, tag="balanced", uuid="00000000-0000-4000-8000-000000000009")
    xml = dom("vm", 1, ["0"], mib=256, uuid="00000000-0000-4000-8000-000000000001")
    result = vmtune.rewrite(xml, _small_host(cpus), profile, claims=[holder])
    pins = Domain(etree.fromstring(result.xml.encode())).vcpupins()
    assert pins == ({} if pin is None else {0: vmtune.cpuset.parse(pin)})
    assert any("unpinned, to float" in w for w in result.warnings) == unpinned, result.warnings
    reasons = [c.reason for c in result.changes if c.element.startswith("/domain/cputune")]
    assert reasons and not any("real-time" in r for r in reasons)  # the reason says what happened, no more
    assert any("float instead" in r for r in reasons) == unpinned, reasons


def test_a_sharing_domain_pinned_by_hand_beside_another_audits_clean():
    """Two latency domains, a throughput one pinned by hand to CPUs 0 and 1, and two balanced ones
    pinned by hand to CPU 0, on a node of two CPUs (the fleet test_a_fleet_placed_by_the_rewriter_
    audits_clean found). The two balanced domains want the same CPU; the second one's pin has to
    move, and the only CPU left is one the throughput domain planned before it shares. Pinned alone
    there it would hold that CPU as dedicated: its moved pin goes instead, and its vCPU floats."""
    from vmtune.host import Cell, Cpu

    host = vmtune.Host(arch="x86_64", cells=(Cell(0, (), 1024 * 1024), Cell(1, (0, 1), 1024 * 1024)),
                       cpus={i: Cpu(i, 1, 1, None, i, frozenset({i})) for i in (0, 1)})
    uuid = "00000000-0000-4000-8000-000000000001"
    drawn = [(dom("gen", 1, mib=256, uuid=uuid), "latency"), (dom("gen", 1, mib=256, uuid=uuid), "latency"),
             (dom("gen", 2, ["0", "1"], mib=256, uuid=uuid), "throughput"),
             (dom("gen", 1, ["0"], mib=256, uuid=uuid), "balanced"), (dom("gen", 1, ["0"], mib=256, uuid=uuid), "balanced")]
    placed = placed_fleet(host, drawn)
    assert len(placed) >= 3
    report = audit(host, [(xml, "shut off") for xml in placed])
    assert report.ok, [p.message for p in report.problems]
    balanced = [d for d in (Domain(etree.fromstring(xml.encode())) for xml in placed) if d.tagged_profile == "balanced"]
    assert sorted((d.vcpupins() for d in balanced), key=len) == [{}, {0: frozenset({0})}]  # one kept, one floats
