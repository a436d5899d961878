"""The placement's locality rules (vmtune/placement/search.py, vmtune/placement/locality.py; issue 24) over generated
hosts, loaded from sysfs or from capabilities with node-device XML: L3 domains (none, per socket,
contiguous, interleaved; with SMT and without; several nodes), hybrid hosts, PCI trees with devices
on every node and with none.

Invariants, for domains placed one after another, each with the ones before as claims:
- no dedicated domain spans more L3 domains than the fewest that could hold it, on each node it
  uses, and, placed on one node, than on any other node that could hold it;
- no latency vCPU sits on an efficiency core unless the profile allows it (``cpu_kinds``);
- every passthrough device's node is among the domain's nodes under ``required``;
- every output is valid per libvirt's domain.rng.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

import vmtune
from fixtures.devtrees import Tree, expected, nodedev_xmls, pci_trees
from fixtures.devtrees import write_sysfs as write_devices
from fixtures.hosttrees import caps_xml, machines
from fixtures.hosttrees import write_sysfs as write_host
from fixtures.libvirt_schema import schema_available, validate_domain
from vmtune import cpuset
from vmtune.config import Config
from vmtune.errors import DoesNotFit
from vmtune.host import Host, nodedev
from vmtune.placement.search import taken_cores

PROFILE_DIR = None


def _load(host: Host, offline, tree: Tree, source: str, where: str) -> Host:
    """``host`` and its devices as a user would load them: a sysfs tree, or capabilities with
    ``--nodedev`` files."""
    if source == "sysfs":
        root = write_host(host, where, offline)
        write_devices(tree, root)
        return Host.from_sysfs(root, arch=host.arch)
    paths = []
    for i, xml in enumerate(nodedev_xmls(tree)):
        path = Path(where) / f"dev{i}.xml"
        path.write_text(xml)
        paths.append(str(path))
    loaded = Host.from_capabilities(caps_xml(host, offline))
    return loaded.with_devices(nodedev.load(paths, frozenset(loaded.node_ids))) if paths else loaded


def _domain(i: int, vcpus: int, profile: str, hostdevs: list[str], kind: str = "kvm") -> str:
    devs = "".join(
        f"<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x{a[0:4]}' "
        f"bus='0x{a[5:7]}' slot='0x{a[8:10]}' function='0x{a[11]}'/></source></hostdev>" for a in hostdevs)
    return (f"<domain type='{kind}'><name>vm{i}</name><uuid>00000000-0000-4000-8000-{i:012d}</uuid>"
            f"<metadata><vmtune:tune xmlns:vmtune='https://vmtune.dev/xmlns/1' profile='{profile}'/></metadata>"
            f"<memory unit='MiB'>64</memory><vcpu>{vcpus}</vcpu><os><type arch='x86_64' machine='q35'>hvm</type></os>"
            f"<devices>{devs}</devices></domain>")


@st.composite
def scenes(draw):
    host, offline = draw(machines(arches=("x86_64",), max_nodes=3, hybrid=True, hugepages=False,
                                  memoryless=False, isolated=False, max_cores=6))
    host = replace(host, cells=tuple(replace(c, memory_kib=64 << 20) for c in host.cells))
    tree = draw(pci_trees(host.node_ids))
    source = draw(st.sampled_from(["sysfs", "caps"]))
    addresses = [d.address for d in tree.devices]
    plan = draw(st.lists(st.tuples(st.integers(1, 8), st.sampled_from(["latency", "realtime", "throughput"]),
                                   st.lists(st.sampled_from(addresses), max_size=2, unique=True),
                                   st.sampled_from(["kvm", "qemu"])), min_size=1, max_size=5))
    return host, offline, tree, source, plan


def _free_cores(host: Host, node: int, blocked: frozenset[int], performance_only: bool) -> dict[object, list[int]]:
    """Free cores per L3 domain on ``node`` (each core as its thread count), counted from scratch
    (not the placement's code)."""
    out: dict[object, list[int]] = {}
    seen: set[int] = set()
    for cpu in host.cell(node).cpus:
        core = frozenset(t for t in host.core_of(cpu) if host.cpus[t].node == node)
        if cpu in seen or core & blocked:
            continue
        seen |= core
        if performance_only and host.efficient(min(core)):
            continue
        out.setdefault(host.cpus[min(core)].l3, []).append(len(core))
    return out


def _free_groups(host: Host, node: int, blocked: frozenset[int], smt: str, performance_only: bool) -> list[int]:
    """Free capacity per L3 domain on ``node``, largest first."""
    cores = _free_cores(host, node, blocked, performance_only)
    return sorted((len(c) if smt == "isolate" else sum(c) for c in cores.values()), reverse=True)


def _left_whole(cores: list[int], count: int, smt: str) -> int:
    """Whole cores left in an L3 domain of ``cores`` (thread counts) once ``count`` vCPUs take the
    fewest cores they need, whole ones first."""
    used = 0
    for threads in sorted(cores, reverse=True):
        if count <= 0:
            break
        count -= 1 if smt == "isolate" else threads
        used += 1
    return len(cores) - used


def _fewest_over(host: Host, nodes, blocked, smt: str, performance_only: bool, count: int) -> int:
    """The fewest L3 domains ``count`` vCPUs take on ``nodes`` with a share on each: each node's
    largest, then the largest others (cores of no known L3 count as one domain per node)."""
    groups = [_free_groups(host, n, blocked, smt, performance_only) for n in nodes]
    if not all(groups):
        return 10**6
    total, used = sum(g[0] for g in groups), len(groups)
    for cap in sorted((c for g in groups for c in g[1:]), reverse=True):
        if total >= count:
            break
        total, used = total + cap, used + 1
    return used


def _fewest(caps: list[int], count: int) -> int:
    total = 0
    for i, cap in enumerate(caps):
        total += cap
        if total >= count:
            return i + 1
    return 10**6


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes())
def test_placement_follows_caches_core_kinds_and_devices(scene):
    host, offline, tree, source, plan = scene
    nodes_of = expected(tree, virtual=False)
    with tempfile.TemporaryDirectory() as where:
        loaded = _load(host, offline, tree, source, where)
        reserved = loaded.reserved(Config())
        placed: list[str] = []
        held: frozenset[int] = frozenset()
        for i, (vcpus, profile, hostdevs, kind) in enumerate(plan):
            xml = _domain(i, vcpus, profile, hostdevs, kind)
            try:
                result = vmtune.rewrite(xml, loaded, None, placed)
            except DoesNotFit:
                continue
            out = etree.fromstring(result.xml.encode())
            if schema_available():
                assert validate_domain(result.xml) == []
            placed.append(result.xml)
            if profile == "throughput":
                _check_node_domain(out, hostdevs, nodes_of, result)
                continue
            pins = [int(e.get("cpuset")) for e in out.iterfind("cputune/vcpupin")]
            nodes = cpuset.parse(out.find("numatune/memory").get("nodeset"))
            smt = "isolate" if profile == "realtime" else "threads"
            blocked = taken_cores(loaded, held) | taken_cores(loaded, reserved)
            # core kinds: latency and realtime take performance cores only
            assert not any(loaded.efficient(c) for c in pins), (pins, profile)
            # devices: every passthrough device with a node is on one of the domain's nodes (required)
            for address in hostdevs:
                if nodes_of[("pci", address)] is not None:
                    assert nodes_of[("pci", address)] in nodes, (address, nodes, result.warnings)
            # L3: on each node, the fewest L3 domains that hold its share there
            if loaded.caches:
                for node in nodes:
                    share = [c for c in pins if loaded.cpus[c].node == node]
                    used = {loaded.cpus[c].l3 for c in share}
                    caps = _free_groups(loaded, node, blocked, smt, loaded.hybrid)
                    assert len(used) == _fewest(caps, len(share)), (node, share, caps)
                ids = {loaded.cpus[c].l3 for c in pins}
                # over the nodes it spans: no more than the fewest split over them could take
                assert len(ids) <= _fewest_over(loaded, sorted(nodes), blocked, smt, loaded.hybrid, vcpus), pins
                need = {nodes_of[("pci", a)] for a in hostdevs if nodes_of[("pci", a)] is not None}
                if len(nodes) == 1 and len(need) <= 1:
                    could = {n: _fewest(_free_groups(loaded, n, blocked, smt, loaded.hybrid), vcpus)
                             for n in loaded.node_ids if (not need or n in need) and loaded.cell(n).cpus}
                    assert len(ids) <= min(could.values()), (pins, could)
                    if len(ids) == 1 and None not in ids:
                        # best fit: no L3 domain that holds it all would leave fewer whole cores free
                        (node,) = nodes
                        (l3,) = ids
                        mine = _left_whole(_free_cores(loaded, node, blocked, loaded.hybrid)[l3], vcpus, smt)
                        fits = [_left_whole(cs, vcpus, smt) for n in could
                                for key, cs in _free_cores(loaded, n, blocked, loaded.hybrid).items()
                                if key is not None and (len(cs) if smt == "isolate" else sum(cs)) >= vcpus]
                        assert mine == min(fits), (pins, mine, fits)
            held |= frozenset(pins)


def _check_node_domain(out, hostdevs, nodes_of, result):
    """A throughput domain (device_locality preferred): on its device's node, or warned about it."""
    numa = out.find("numatune/memory")
    if numa is None or numa.get("nodeset") is None:
        return
    nodes = cpuset.parse(numa.get("nodeset"))
    for address in hostdevs:
        node = nodes_of[("pci", address)]
        if node is not None and node not in nodes:
            assert any(address in w for w in result.warnings), (address, result.warnings)


# -- the rules, one example each ----------------------------------------------------------------------
AMD = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "hosts" / "lv-caps-x86_64-amd-2socket-8die-smt.xml"


@pytest.fixture
def amd() -> Host:
    return Host.from_capabilities(AMD.read_bytes())


def _pins(xml: str) -> list[int]:
    return [int(e.get("cpuset")) for e in etree.fromstring(xml.encode()).iterfind("cputune/vcpupin")]


def test_an_8_vcpu_domain_gets_one_whole_l3_not_two_halves(amd):
    """The issue's case: with CPUs 1-3 (L3 0) taken, an 8-vCPU latency domain goes to one whole
    free L3 domain (4 cores and their siblings), never across two."""
    first = vmtune.rewrite(_domain(0, 6, "latency", []), amd)
    assert {amd.l3_of(c) for c in _pins(first.xml)} == {0}
    second = vmtune.rewrite(_domain(1, 8, "latency", []), amd, None, [first.xml])
    assert len({amd.l3_of(c) for c in _pins(second.xml)}) == 1
    assert "placement: L3: 1 of the host's 8 L3 domains" in "\n".join(
        f"placement: {w}" for w in second.placement["why"])


def test_best_fit_keeps_the_large_holes(amd):
    """Two vCPUs go to the L3 domain with the fewest whole cores left over (L3 0, where the
    reserved core leaves three), not to a whole empty one."""
    result = vmtune.rewrite(_domain(0, 2, "latency", []), amd)
    assert {amd.l3_of(c) for c in _pins(result.xml)} == {0}


def test_a_domain_larger_than_an_l3_takes_the_fewest_and_gets_dies(amd):
    """16 vCPUs: two whole L3 domains, 8 vCPUs on each, and a guest die per L3 domain."""
    result = vmtune.rewrite(_domain(0, 16, "latency", []), amd)
    pins = _pins(result.xml)
    assert len({amd.l3_of(c) for c in pins}) == 2
    assert [amd.l3_of(c) for c in pins[:8]] == [amd.l3_of(pins[0])] * 8
    topo = etree.fromstring(result.xml.encode()).find("cpu/topology")
    assert (topo.get("sockets"), topo.get("dies"), topo.get("cores"), topo.get("threads")) == ("1", "2", "4", "2")


def test_a_host_without_caches_is_placed_as_before(amd):
    """The same host with its cache banks left out places as vmtune did before it knew caches."""
    bare = replace(amd, caches=(), cpus={c: replace(cpu, l3=None) for c, cpu in amd.cpus.items()})
    result = vmtune.rewrite(_domain(0, 8, "latency", []), bare)
    assert _pins(result.xml) == [1, 33, 2, 34, 3, 35, 4, 36]
    assert result.placement["l3"] == [] and not result.placement["why"]


def _gpu(tmp_path, node: int) -> str:
    path = tmp_path / "gpu.xml"
    path.write_text("<device><name>pci_0000_3b_00_0</name><parent>computer</parent><capability type='pci'>"
                    "<domain>0</domain><bus>59</bus><slot>0</slot><function>0</function>"
                    f"<numa node='{node}'/></capability></device>")
    return str(path)


def test_required_device_decides_the_node_and_says_so(amd, tmp_path):
    host = amd.with_devices(nodedev.load([_gpu(tmp_path, 1)], frozenset(amd.node_ids)))
    result = vmtune.rewrite(_domain(0, 4, "latency", ["0000:3b:00.0"]), host)
    assert {host.cpus[c].node for c in _pins(result.xml)} == {1}
    assert "device: hostdev 0000:3b:00.0 on node 1: on its node (device_locality = \"required\")" in \
        result.placement["why"]


def test_required_device_that_cannot_be_met_exits_3_naming_it(amd, tmp_path, capsys):
    """Node 1 full: the latency domain does not go to node 0; one line names the device and its node."""
    from vmtune.cli import main

    host = amd.with_devices(nodedev.load([_gpu(tmp_path, 1)], frozenset(amd.node_ids)))
    filler = vmtune.rewrite(_domain(9, 30, "latency", []), host)
    assert {host.cpus[c].node for c in _pins(filler.xml)} == {0}
    filler = vmtune.rewrite(_domain(8, 30, "latency", []), host, None, [filler.xml])  # node 1 now
    (tmp_path / "claim.xml").write_text(filler.xml)
    (tmp_path / "dom.xml").write_text(_domain(0, 4, "latency", ["0000:3b:00.0"]))
    rc = main(["rewrite", str(tmp_path / "dom.xml"), "--host", str(AMD), "--nodedev", _gpu(tmp_path, 1),
               "--claim", str(tmp_path / "claim.xml")])
    err = capsys.readouterr().err
    assert rc == 3 and err.count("\n") == 1 and "hostdev 0000:3b:00.0 is on node 1" in err, err
    # preferred: placed elsewhere, with a warning naming the device
    (tmp_path / "p.toml").write_text('inherit = "latency"\ndevice_locality = "preferred"\n')
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "near.toml").write_text('inherit = "latency"\ndevice_locality = "preferred"\n')
    result = vmtune.rewrite(_domain(0, 4, "latency", ["0000:3b:00.0"]), host, "near", [filler.xml],
                            config=Config(profiles_dir=str(tmp_path / "profiles")))
    assert {host.cpus[c].node for c in _pins(result.xml)} == {0}
    assert any("hostdev 0000:3b:00.0 is on node 1" in w for w in result.warnings)


def test_performance_cores_full_exits_3_unless_any(tmp_path):
    """A hybrid host whose performance cores are taken: exit 3 saying so; cpu_kinds = "any" uses
    the efficiency cores."""
    from fixtures.hosttrees import write_sysfs
    from vmtune.host import Cell, Cpu
    from vmtune.host.topology import EFFICIENCY, PERFORMANCE

    cpus = {c: Cpu(c, 0, 0, 0, c // 2, frozenset({c - c % 2, c - c % 2 + 1}), None, PERFORMANCE) for c in range(8)}
    cpus |= {c: Cpu(c, 0, 0, 0, c, frozenset({c}), None, EFFICIENCY) for c in range(8, 16)}
    host = Host.from_sysfs(write_sysfs(Host("x86_64", (Cell(0, tuple(range(16)), 64 << 20),), cpus), str(tmp_path)),
                           arch="x86_64")
    assert host.hybrid and host.default_reserved() == {8}  # the host keeps an efficiency core
    ok = vmtune.rewrite(_domain(0, 8, "latency", []), host)
    assert all(not host.efficient(c) for c in _pins(ok.xml))
    assert all(host.efficient(c) for c in cpuset.parse(etree.fromstring(ok.xml.encode())
                                                        .find("cputune/emulatorpin").get("cpuset")))
    with pytest.raises(DoesNotFit, match="performance cores"):
        vmtune.rewrite(_domain(1, 2, "latency", []), host, None, [ok.xml])
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "anycore.toml").write_text('inherit = "latency"\n[cpu]\nkinds = "any"\n')
    more = vmtune.rewrite(_domain(1, 2, "latency", []), host, "anycore", [ok.xml],
                          config=Config(profiles_dir=str(tmp_path / "profiles")))
    assert all(host.efficient(c) for c in _pins(more.xml))


# -- found by an outside-style audit: each failed before its fix ------------------------------------
def _grid(nodes: int, l3_per_node: int, cores_per_l3: int, smt: bool, l3_of=None, distances=None) -> Host:
    """``nodes`` x ``l3_per_node`` L3 domains of ``cores_per_l3`` cores; thread t of core k is
    k + t*cores (siblings i and i+N, as on EPYC); ``l3_of(node, index)`` overrides the L3 id."""
    from fixtures.hosttrees import caps_xml
    from vmtune.host import Cell, Cpu
    from vmtune.host.topology import L3

    per = l3_per_node * cores_per_l3
    total = nodes * per
    cpus, groups = {}, {}
    for k in range(total):
        node, index = k // per, (k % per) // cores_per_l3
        l3 = l3_of(node, index) if l3_of else node * l3_per_node + index
        threads = frozenset({k, k + total} if smt else {k})
        for t in threads:
            cpus[t] = Cpu(t, node, node, 0, k % per, threads, l3)
            groups.setdefault(l3, set()).add(t)
    cells = tuple(Cell(n, tuple(sorted(c for c in cpus if cpus[c].node == n)), 64 << 20, {},
                       (distances or {}).get(n, {})) for n in range(nodes))
    host = Host("x86_64", cells, cpus, caches=tuple(L3(i, frozenset(g), 32768) for i, g in sorted(groups.items())))
    return Host.from_capabilities(caps_xml(host))


def _l3s(host: Host, xml: str) -> set:
    return {host.l3_of(c) for c in _pins(xml)}


def test_a_domain_over_two_nodes_takes_the_fewest_l3_domains():
    """15 vCPUs over 2 nodes of 2 L3 domains of 4 cores with SMT: two L3 domains, not three."""
    host = _grid(2, 2, 4, smt=True)
    result = vmtune.rewrite(_domain(0, 15, "latency", []), host)
    assert len(_l3s(host, result.xml)) == 2, result.placement["why"]


def test_an_l3_domain_over_two_nodes_counts_once():
    """Intel SNC: nodes 0 and 1 share L3 0, nodes 2 and 3 L3 1. 8 vCPUs that fit on no one node
    go to nodes 0 and 1 (one L3 domain), not to 0 and 2."""
    distances = {n: {m: 10 if n == m else 12 if n // 2 == m // 2 else 21 for m in range(4)} for n in range(4)}
    host = _grid(4, 1, 3, smt=False, l3_of=lambda node, i: node // 2, distances=distances)
    result = vmtune.rewrite(_domain(0, 4, "latency", []), host)  # 2 free cores per node: two nodes
    assert result.placement["nodes"] in ([0, 1], [2, 3]) and len(_l3s(host, result.xml)) == 1
    assert "no single L3 domain" not in " ".join(result.placement["why"])


def test_best_fit_comes_before_the_spread():
    """a takes 2 of L3 0's 3 free cores; b (1 vCPU) takes the last one, leaving no whole core
    free in a partly used L3 domain, rather than opening one on the emptier node."""
    host = _grid(2, 2, 4, smt=False)
    a = vmtune.rewrite(_domain(0, 2, "latency", []), host)
    b = vmtune.rewrite(_domain(1, 1, "latency", []), host, None, [a.xml])
    assert _l3s(host, a.xml) == _l3s(host, b.xml) == {0}


def test_explain_does_not_blame_the_l3_size_when_devices_split_the_nodes(tmp_path):
    host = _grid(2, 2, 4, smt=False)
    paths = []
    for node, bus in ((0, 59), (1, 60)):
        path = tmp_path / f"gpu{node}.xml"
        path.write_text(f"<device><name>pci_0000_{bus:02x}_00_0</name><capability type='pci'><domain>0</domain>"
                        f"<bus>{bus}</bus><slot>0</slot><function>0</function><numa node='{node}'/></capability></device>")
        paths.append(str(path))
    host = host.with_devices(nodedev.load(paths, frozenset(host.node_ids)))
    result = vmtune.rewrite(_domain(0, 4, "latency", ["0000:3b:00.0", "0000:3c:00.0"]), host)
    assert result.placement["nodes"] == [0, 1]
    assert "no single L3 domain" not in " ".join(result.placement["why"])


@pytest.mark.parametrize("kind", ["block", "bridge"])
def test_a_backing_device_the_host_knows_draws_a_latency_domain_to_its_node(amd, kind):
    """A block disk's device and a bridge's ports are a preference: on a host that knows where they
    hang, a latency domain goes to their node, each node in turn; a host that knows no device reads
    no backing device of a domain (vmtune/placement/locality.py ``uses``: only passthrough ones
    matter there), and places it as it would without one."""
    from vmtune.host.devices import BLOCK, NET, Location, Table
    from vmtune.placement import locality
    from vmtune.xml import xmlsafe
    from vmtune.xml.model import Domain

    device = ("<disk type='block' device='disk'><source dev='/dev/sdb'/><target dev='vda' bus='virtio'/></disk>"
              if kind == "block" else
              "<interface type='bridge'><mac address='52:54:00:00:00:01'/><source bridge='br1'/></interface>")
    xml = ("<domain type='kvm'><name>b</name><memory unit='KiB'>1048576</memory><vcpu>2</vcpu>"
           f"<os><type arch='x86_64'>hvm</type></os><devices>{device}</devices></domain>")
    key = (BLOCK, "sdb") if kind == "block" else (NET, "br1")
    for node in sorted(amd.node_ids):
        near = vmtune.rewrite(xml, amd.with_devices(Table({key: Location(True, node)})), "latency")
        assert etree.fromstring(near.xml.encode()).find("numatune/memory").get("nodeset") == str(node)
    dom = Domain(xmlsafe.parse(xml, "domain XML"))
    assert [u.passthrough for u in locality.uses(dom)] == [False]
    assert locality.uses(dom, backing=False) == () and locality.passthrough(dom) == frozenset()
    assert vmtune.rewrite(xml, amd, "latency").placement == vmtune.rewrite(xml.replace(device, ""), amd, "latency").placement
