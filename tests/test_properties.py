"""The rewriter's invariants (vmtune.rewrite, vmtune/driver.py) over generated domains and generated
hosts."""

from __future__ import annotations

from collections import Counter

from hypothesis import assume, given
from hypothesis import strategies as st
from lxml import etree

import vmtune
from conftest import CORPUS, EXAMPLES
from fixtures.hosttrees import hosts
from fixtures.strategies import domains
from vmtune import cpuset
from vmtune.xml import xmltext
from vmtune.errors import DoesNotFit
from vmtune.placement.search import taken_cores

PROFILES = ("balanced", "latency", "realtime", "throughput")
x86_hosts = hosts(arches=("x86_64",), max_nodes=4)

# Everything under these is the rewriter's to change; everything else must come out as it went in.
TUNED = (
    "domain/cpu", "domain/cputune", "domain/numatune", "domain/vcpu", "domain/memtune", "domain/memoryBacking",
    "domain/iothreads", "domain/iothreadids", "domain/memory", "domain/currentMemory",
    "domain/features", "domain/clock", "domain/devices/memballoon", "domain/devices/disk",
    "domain/devices/interface", "domain/devices/controller",
    "domain/metadata/{https://vmtune.dev/xmlns/1}tune",
)


def rewrite_or_skip(xml, host, profile, claims=()):
    try:
        return vmtune.rewrite(xml, host, profile, claims)
    except DoesNotFit:
        assume(False)


def _signatures(root, keep) -> Counter:
    out = Counter()
    for el in root.iter():
        if not isinstance(el.tag, str):
            continue
        path = "/".join(a.tag for a in reversed(list(el.iterancestors()))) + ("/" if el.getparent() is not None else "") + el.tag
        if keep(path):
            out[(path, tuple(sorted(el.attrib.items())), (el.text or "").strip())] += 1
    return out


def untouched(path: str) -> bool:
    return not any(path == t or path.startswith(t + "/") for t in TUNED)


def host_cpus_in(root) -> set[int]:
    used: set[int] = set()
    for el in root.iterfind("cputune/*[@cpuset]"):
        used |= cpuset.parse(el.get("cpuset"))
    vcpu = root.find("vcpu")
    if vcpu is not None and vcpu.get("cpuset"):
        used |= cpuset.parse(vcpu.get("cpuset"))
    return used


@given(domains(), x86_hosts, st.sampled_from(PROFILES))
def test_idempotent(xml, host, profile):
    """Rewriting the output again gives the same bytes."""
    first = rewrite_or_skip(xml, host, profile)
    second = vmtune.rewrite(first.xml, host, profile)
    assert second.xml == first.xml
    assert second.changes == ()


@given(domains(), x86_hosts, st.sampled_from(PROFILES))
def test_nothing_lost(xml, host, profile):
    """Every element outside the tuned areas survives with its attributes and text; so do disk
    sources, MACs and NIC sources, in order."""
    before = etree.fromstring(xml.encode())
    after = etree.fromstring(rewrite_or_skip(xml, host, profile).xml.encode())
    kept, now = _signatures(before, untouched), _signatures(after, untouched)
    assert kept - now == Counter(), "lost outside the tuned areas"
    assert {path for path, _, _ in now - kept} <= {"domain/metadata"}, "added outside the tuned areas"
    for path in ("devices/disk/source", "devices/interface/mac", "devices/interface/source"):
        assert [dict(e.attrib) for e in before.iterfind(path)] == [dict(e.attrib) for e in after.iterfind(path)]


@given(domains(), x86_hosts, st.sampled_from(PROFILES))
def test_pins_inside_host(xml, host, profile):
    """Every CPU and node the output names exists on the host."""
    out = etree.fromstring(rewrite_or_skip(xml, host, profile).xml.encode())
    assert host_cpus_in(out) <= set(host.cpus)
    for el in out.iterfind("numatune/*[@nodeset]"):
        assert cpuset.parse(el.get("nodeset")) <= set(host.node_ids)


@st.composite
def host_and_fitting_domain(draw):
    """A host, and a domain with no more vCPUs than the host has CPUs outside its reserved cores."""
    host = draw(x86_hosts)
    free = len(set(host.cpus) - taken_cores(host, host.default_reserved()))
    assume(free >= 1)
    return host, draw(domains(max_vcpus=min(8, free)))


@given(host_and_fitting_domain(), st.sampled_from(("latency", "realtime")))
def test_dedicated_pins(host_and_xml, profile):
    """A latency VM pins each vCPU to its own host CPU, none reserved, the emulator elsewhere on
    KVM and beside its vCPUs under TCG (not with a FIFO vCPU: realtime keeps it elsewhere), and its
    guest topology multiplies out to its vCPU count."""
    host, xml = host_and_xml
    result = rewrite_or_skip(xml, host, profile)
    out = etree.fromstring(result.xml.encode())
    vcpus = int(out.findtext("vcpu"))
    pins = {int(e.get("vcpu")): cpuset.parse(e.get("cpuset")) for e in out.iterfind("cputune/vcpupin")}
    assert sorted(pins) == list(range(vcpus))
    assert all(len(p) == 1 for p in pins.values())
    flat = [next(iter(p)) for p in pins.values()]
    assert len(set(flat)) == vcpus
    assert not set(flat) & host.default_reserved()
    emulator = cpuset.parse(out.find("cputune/emulatorpin").get("cpuset"))
    iothreads = [cpuset.parse(e.get("cpuset")) for e in out.iterfind("cputune/iothreadpin")]
    if out.get("type") == "qemu" and profile == "latency":
        assert emulator == set(flat)
        assert all(io and io <= set(flat) for io in iothreads)
    else:
        assert emulator and not emulator & set(flat)
        assert all(io and not io & set(flat) for io in iothreads)
    topo = out.find("cpu/topology")
    product = 1
    for attr in ("sockets", "dies", "cores", "threads"):
        product *= int(topo.get(attr))
    assert product == vcpus
    if profile == "realtime":
        cores = [frozenset(host.core_of(c)) for c in flat]
        assert len(set(cores)) == vcpus, "realtime puts one vCPU per physical core"


@given(st.lists(domains(max_vcpus=4), min_size=2, max_size=5), x86_hosts, st.data())
def test_no_overlap_between_vms(xmls, host, data):
    """VMs placed one after another, each with the others as claims, never share a core with
    a latency VM, and batch VMs stay off latency cores."""
    placed: list[tuple[str, str]] = []
    for xml in xmls:
        profile = data.draw(st.sampled_from(PROFILES))
        try:
            result = vmtune.rewrite(xml.replace("<name>gen</name>", f"<name>vm{len(placed)}</name>")
                                    .replace("0000-4000-8000-000000000001", f"0000-4000-8000-{len(placed):012d}"),
                                    host, profile, [x for _, x in placed])
        except DoesNotFit:
            continue
        placed.append((profile, result.xml))
    dedicated = []
    for profile, xml in placed:
        root = etree.fromstring(xml.encode())
        if profile in ("latency", "realtime"):
            dedicated.append(taken_cores(host, frozenset(host_cpus_in(root) - cpuset.parse(
                (root.find("cputune/emulatorpin").get("cpuset"))))))
    for i, a in enumerate(dedicated):
        for b in dedicated[i + 1:]:
            assert not a & b, "two latency VMs share a physical core"
    # batch VMs placed after a latency VM must avoid its cores
    seen_dedicated: frozenset[int] = frozenset()
    for profile, xml in placed:
        root = etree.fromstring(xml.encode())
        cpus = host_cpus_in(root)
        if profile in ("latency", "realtime"):
            emu = cpuset.parse(root.find("cputune/emulatorpin").get("cpuset"))
            seen_dedicated |= taken_cores(host, frozenset(cpus - emu))
        elif seen_dedicated and root.find("vcpu").get("cpuset"):
            assert not cpuset.parse(root.find("vcpu").get("cpuset")) & seen_dedicated


def test_spread_across_nodes_not_packed():
    """Six identical latency VMs on a symmetric 2-node host land three on each node (numad
    put five on one node and one on the other)."""
    host = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_text())
    xml = (EXAMPLES / "db-4vcpu.xml").read_text()
    placed = []
    for i in range(6):
        vm = xml.replace("<name>db</name>", f"<name>db{i}</name>").replace("665544332211", f"6655443322{i:02d}")
        placed.append(vmtune.rewrite(vm, host, "latency", placed and [p.xml for p in placed] or []))
    nodes = Counter(tuple(p.placement["nodes"]) for p in placed)
    assert nodes == Counter({(0,): 3, (1,): 3})


DOCUMENTS = sorted((CORPUS / "domains").glob("*.xml")) + sorted((EXAMPLES / "hosts").glob("*.xml"))


@given(st.sampled_from(DOCUMENTS), st.integers(0, 10_000), st.integers(0, 10_000))
def test_indenting_keeps_text_beside_elements(path, pick, where):
    """Text beside element children (mixed content, as in foreign metadata) keeps every element's
    value byte for byte: before the first child, between two, or after the last."""
    root = etree.fromstring(path.read_bytes())
    parents = [e for e in root.iter(etree.Element) if len(xmltext.elements(e)) > 0]
    parent = parents[pick % len(parents)]
    kids = xmltext.elements(parent)
    slot = where % (len(kids) + 1)
    if slot == 0:
        parent.text = "note"
    else:
        kids[slot - 1].tail = "note"

    def values() -> dict[str, str]:
        return {root.getroottree().getpath(e): xmltext.text(e) for e in root.iter(etree.Element)
                if (e.text or "").strip() or any((k.tail or "").strip() for k in e)}

    before = values()
    xmltext.indent(root)
    assert values() == before


@given(st.sampled_from(DOCUMENTS), st.integers(0, 10_000), st.booleans())
def test_indenting_never_changes_a_value(path, pick, pi):
    """Indenting leaves every text value as it was, with a comment or PI in it or not, and is
    lxml's indent everywhere else."""
    root = etree.fromstring(path.read_bytes())
    leaves = [e for e in root.iter(etree.Element) if len(e) == 0 and (e.text or "").strip()]
    leaf = leaves[pick % len(leaves)]
    note = etree.ProcessingInstruction("note") if pi else etree.Comment("note")
    cut = pick % (len(leaf.text) + 1)
    leaf.text, note.tail = leaf.text[:cut], leaf.text[cut:]
    leaf.append(note)

    def values() -> dict[str, str]:
        return {root.getroottree().getpath(e): xmltext.text(e) for e in root.iter(etree.Element)
                if not xmltext.elements(e)}

    before = values()
    xmltext.indent(root)
    assert values() == before
    leaf.text, note.tail = (leaf.text or "") + (note.tail or ""), None
    leaf.remove(note)
    theirs = etree.fromstring(path.read_bytes())
    etree.indent(theirs, space="  ")
    assert etree.tostring(root) == etree.tostring(theirs)


spans = st.lists(st.tuples(st.booleans(), st.integers(0, 300), st.integers(0, 40)), max_size=30)


@given(spans)
def test_cpuset_parse_is_the_naive_expansion(parts):
    """Merging ranges before expanding them changes nothing: a cpulist of overlapping, repeated and
    excluded ranges parses to what expanding each range in turn gives, and formats back to itself."""
    text = ",".join(f"{'^' if neg else ''}{lo}-{lo + width}" if width else f"{'^' if neg else ''}{lo}"
                    for neg, lo, width in parts)
    include = {i for neg, lo, width in parts if not neg for i in range(lo, lo + width + 1)}
    exclude = {i for neg, lo, width in parts if neg for i in range(lo, lo + width + 1)}
    got = cpuset.parse(text)
    assert got == include - exclude
    assert cpuset.parse(cpuset.format(got)) == got
