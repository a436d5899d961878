"""The reasons of the changes (vmtune/xml/edits.py, vmtune/passes/): every reason ``--explain`` prints
is true of the XML it describes.

A property over generated domains, hosts and profiles: each change's reason (and each placement
line) that states a fact about the output -- which node the pins are on, which CPUs the emulator
has, which vCPUs share a core, the page size, the memory limit, the queue count, a disk's new name
-- is checked against the output itself, read with lxml, not through vmtune's model.
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
from vmtune.xml.units import to_kib

# half the profile's examples (HYPOTHESIS_PROFILE=thorough runs more): the rewrites here are whole ones
FEWER = settings(max_examples=max(20, settings.default.max_examples // 2),
                 suppress_health_check=[HealthCheck.filter_too_much])

PROFILES = ("balanced", "latency", "realtime", "throughput")


def _pins(root) -> list[int]:
    pins = {int(e.get("vcpu")): cpuset.parse(e.get("cpuset")) for e in root.iterfind("cputune/vcpupin")}
    return [min(pins[v]) for v in sorted(pins)]


def _sharing(host, pins) -> list[tuple[int, ...]]:
    by: dict[frozenset[int], list[int]] = {}
    for v, c in enumerate(pins):
        by.setdefault(frozenset(host.core_of(c)), []).append(v)
    return sorted(tuple(g) for g in by.values() if len(g) > 1)


def _numbers(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def check(reason: str, root, host, result) -> None:
    """Assert what ``reason`` says of the output ``root`` (reasons that state no fact pass)."""
    pins = _pins(root)
    if m := re.search(r"(?:a host CPU per vCPU|the hand's own pins, kept|its pins as they were, kept) on node ([\d,-]+)",
                      reason):
        assert {host.cpus[c].node for c in pins} <= cpuset.parse(m.group(1)), reason
        assert len(set(pins)) == len(pins)
    if m := re.search(r"(emulator and iothreads|emulator|iothreads) on the shared CPUs ([\d,-]+)", reason):
        emulator = cpuset.parse(root.find("cputune/emulatorpin").get("cpuset"))
        said = cpuset.parse(m.group(2))
        if m.group(1).startswith("emulator"):
            assert emulator == said, reason
        assert not said & set(pins)
        for el in root.iterfind("cputune/iothreadpin"):
            cpus = cpuset.parse(el.get("cpuset"))
            assert cpus <= said or f"iothread='{el.get('iothread')}'" in reason or len(cpus) == 1 and \
                root.find("cputune/iothreadsched") is not None, reason
    if "emulator and iothreads beside them" in reason:
        assert cpuset.parse(root.find("cputune/emulatorpin").get("cpuset")) == set(pins) or \
            root.find("cputune/emulatorsched") is not None
    if reason.startswith("as pinned: "):
        groups = _sharing(host, pins)
        topo = root.find("cpu/topology")
        if "vCPU pairs sit on sibling threads" in reason:
            assert topo.get("threads") == "2" and all(any({2 * i, 2 * i + 1} <= set(g) for g in groups)
                                                      for i in range(len(pins) // 2))
        elif "no two vCPUs share a core" in reason:
            assert not groups and topo.get("threads") == "1"
        else:
            m = re.search(r"vCPUs (.*?)(?: and \d+ more pairs)? share a core", reason)
            named = [tuple(int(v) for v in g.split(" and ")) for g in m.group(1).split(", ")]
            assert named == groups[:6] and topo.get("threads") == "1", (reason, groups)
        if "one socket per guest cell" in reason:
            assert int(topo.get("sockets")) == len(root.findall("cpu/numa/cell"))
    if m := re.search(r"bind guest memory to (?:the vCPUs' node|each guest cell's host node) \(([\d,-]+)\)", reason):
        said = cpuset.parse(m.group(1))
        assert cpuset.parse(root.find("numatune/memory").get("nodeset")) == said
        assert {host.cpus[c].node for c in pins} == said
    if m := re.search(r"keep memory on node ([\d,-]+), where the vCPUs run", reason):
        node = cpuset.parse(m.group(1))
        assert cpuset.parse(root.find("numatune/memory").get("nodeset")) == node
        given = root.find("vcpu").get("cpuset")
        reach = cpuset.parse(given) if given else frozenset(host.cpus)
        assert {host.cpus[c].node for c in reach} == node
    if m := re.match(r"(\d+[MG]) hugepages: ", reason):
        size = {"2M": 2048, "1G": 1048576}.get(m.group(1))
        pages = root.findall("memoryBacking/hugepages/page")
        assert size is None or any(to_kib(p.get("size"), p.get("unit")) == size for p in pages), reason
    if m := re.search(r"the guest's (\d+) KiB plus (\d+) KiB for QEMU", reason):
        limit = root.find("memtune/hard_limit")
        assert to_kib(limit.text, limit.get("unit")) == int(m.group(1)) + int(m.group(2))
    if m := re.search(r"multiqueue: one queue per vCPU \(up to (\d+)\)", reason):
        vcpus = int(root.findtext("vcpu") or 1)
        assert all(int(d.get("queues")) == min(vcpus, int(m.group(1)))
                   for d in root.iterfind("devices/interface/driver[@queues]") if d.get("queues"))
    if m := re.search(r"virtio disks are named vdX \((\w+) -> (\w+)\)", reason):
        assert root.find(f"devices/disk/target[@dev='{m.group(2)}']").get("bus") == "virtio"
    if "the emulated HPET" in reason:
        assert root.find("clock/timer[@name='hpet']").get("present") == "no"
    if reason.startswith("guest haltpoll"):
        assert root.find("features/kvm/hint-dedicated").get("state") == "on"
        assert root.find("features/kvm/hidden[@state='on']") is None
    if "Windows uses the paravirtual path" in reason:
        assert result.guest_os is None or result.guest_os.windows
    if "tell the guest its vCPUs own their CPUs" in reason:
        assert pins and all(len(cpuset.parse(e.get("cpuset"))) == 1 for e in root.iterfind("cputune/vcpupin"))
    if m := re.match(r"L3: (\d+) of the host's (\d+) L3 domains", reason):
        assert len({host.l3_of(c) for c in pins}) == int(m.group(1)) and len(host.caches) == int(m.group(2))
    if m := re.match(r"L3 size: .* for (\d+) vCPUs", reason):
        assert int(m.group(1)) == len(pins)


@FEWER
@given(domains(max_vcpus=8), st.one_of(hosts(arches=("x86_64",), max_nodes=3, max_cores=5),
                                       hosts(arches=("x86_64",), max_nodes=2, max_cores=6, uneven_l3=True)),
       st.sampled_from(PROFILES))
def test_no_reason_contradicts_the_xml_it_describes(xml, host, profile):
    try:
        result = vmtune.rewrite(xml, host, profile)
    except DoesNotFit:
        assume(False)
    root = etree.fromstring(result.xml.encode())
    for change in result.changes:
        for part in change.reason.split("; "):
            check(part, root, host, result)
        check(change.reason, root, host, result)
    for why in result.placement.get("why", ()):
        check(why, root, host, result)


def test_the_checks_catch_an_untrue_reason():
    """The checker is not vacuous: a topology reason that names the wrong vCPUs fails it."""
    from conftest import EXAMPLES

    host = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    result = vmtune.rewrite((EXAMPLES / "db-4vcpu.xml").read_bytes(), host, "latency")
    root = etree.fromstring(result.xml.encode())
    check("as pinned: vCPU pairs sit on sibling threads", root, host, result)
    for wrong in ("as pinned: no two vCPUs share a core", "a host CPU per vCPU on node 1, on cores",
                  "emulator and iothreads on the shared CPUs 3", "bind guest memory to the vCPUs' node (1)"):
        try:
            check(wrong, root, host, result)
        except AssertionError:
            continue
        raise AssertionError(f"{wrong!r} passed the check")
