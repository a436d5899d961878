"""Placement (vmtune/placement/search.py) and the guest topology built from it, on hand-made hosts."""

from __future__ import annotations

import pytest
from lxml import etree

import vmtune
from fixtures.gridhost import GIB, domain, make_host
from vmtune import Config, cpuset
from vmtune.errors import DoesNotFit
from vmtune.host import Cell, Host


def named(xml, name):
    return xml.replace("<name>vm</name>", f"<name>{name}</name>").replace("111111111111</uuid>", f"{abs(hash(name)) % 10**12:012d}</uuid>")


def tree(result):
    return etree.fromstring(result.xml.encode())


def pins(result):
    return [int(e.get("cpuset")) for e in tree(result).iterfind("cputune/vcpupin")]


def topology(result):
    t = tree(result).find("cpu/topology")
    return tuple(int(t.get(a)) for a in ("sockets", "cores", "threads"))


def test_sibling_pairs_become_guest_threads():
    """Four vCPUs on an SMT host take two whole cores and the guest sees cores=2 threads=2."""
    host = make_host()
    r = vmtune.rewrite(domain(4), host, "latency")
    p = pins(r)
    assert p[1] in host.core_of(p[0]) and p[3] in host.core_of(p[2])
    assert topology(r) == (1, 2, 2)


def test_odd_vcpus_are_not_shown_as_threads():
    """Three vCPUs cannot be sibling pairs: threads='1', cores='3'."""
    assert topology(vmtune.rewrite(domain(3), make_host(), "latency")) == (1, 3, 1)


def test_no_smt_host_gives_single_threads():
    """Without SMT every vCPU is its own core."""
    assert topology(vmtune.rewrite(domain(4), make_host(threads=1, cores=6), "latency")) == (1, 4, 1)


def test_realtime_leaves_siblings_idle():
    """realtime puts one vCPU per physical core; the guest sees no threads."""
    host = make_host()
    r = vmtune.rewrite(domain(2), host, "realtime")
    p = pins(r)
    assert host.core_of(p[0]) != host.core_of(p[1])
    assert topology(r) == (1, 2, 1)
    out = tree(r)
    assert out.find("cputune/vcpusched").get("scheduler") == "fifo"
    assert out.find("memoryBacking/locked") is not None
    assert out.find("features/pmu").get("state") == "off"


def test_reserved_core_is_never_a_vcpu_pin():
    """The first core of each node (both threads) is left to the host, the emulator and iothreads."""
    host = make_host()
    reserved = host.default_reserved()
    assert reserved == {0, 8, 4, 12}
    r = vmtune.rewrite(domain(6), host, "latency")
    assert not set(pins(r)) & reserved
    emulator = cpuset.parse(tree(r).find("cputune/emulatorpin").get("cpuset"))
    assert emulator <= reserved and emulator <= set(host.cell(r.placement["nodes"][0]).cpus)


def test_isolcpus_defines_the_reserved_set():
    """With isolcpus set, every CPU that is not isolated is reserved."""
    host = make_host(isolated={2, 3, 10, 11})
    assert host.default_reserved() == set(host.cpus) - {2, 3, 10, 11}
    r = vmtune.rewrite(domain(2), host, "latency")
    assert set(pins(r)) <= {2, 3, 10, 11}


def test_config_reserved_cpus_override():
    """reserved_cpus from the config replaces the default reserved set."""
    host = make_host(nodes=1, cores=4, threads=1)
    r = vmtune.rewrite(domain(2), host, "latency", config=Config(reserved_cpus=frozenset({2, 3})))
    assert set(pins(r)) == {0, 1}


def test_too_big_for_one_node_splits_into_guest_cells():
    """A VM larger than any node spans the fewest nodes, with one guest cell and one socket
    per node, memnodes, and memory in proportion to the vCPUs."""
    host = make_host(nodes=2, cores=4, threads=2)  # 6 free threads per node
    r = vmtune.rewrite(domain(8, mib=8192), host, "latency")
    out = tree(r)
    cells = out.findall("cpu/numa/cell")
    assert [c.get("cpus") for c in cells] == ["0-3", "4-7"]
    assert [int(c.get("memory")) for c in cells] == [4 * GIB, 4 * GIB]
    assert out.find("numatune/memory").get("nodeset") == "0-1"
    assert [(m.get("cellid"), m.get("nodeset")) for m in out.iterfind("numatune/memnode")] == [("0", "0"), ("1", "1")]
    assert topology(r) == (2, 2, 2)
    for cell, node in ((range(0, 4), 0), (range(4, 8), 1)):
        assert all(host.cpus[pins(r)[v]].node == node for v in cell)


def test_one_node_when_it_fits():
    """A VM that fits on one node gets no guest NUMA cells and a single-node strict binding."""
    r = vmtune.rewrite(domain(4), make_host(), "latency")
    out = tree(r)
    assert out.find("cpu/numa") is None
    assert out.find("numatune/memory").attrib == {"mode": "strict", "nodeset": str(r.placement["nodes"][0])}


def test_existing_guest_cells_collapse_when_one_node_fits():
    """Guest cells that spanned nodes collapse into one cell when one node has room."""
    extra = ("<cpu><numa><cell id='0' cpus='0-1' memory='1048576' unit='KiB' memAccess='shared'/>"
             "<cell id='1' cpus='2-3' memory='1048576' unit='KiB'/></numa></cpu>")
    r = vmtune.rewrite(domain(4, mib=2048, extra=extra), make_host(), "latency")
    cells = tree(r).findall("cpu/numa/cell")
    assert len(cells) == 1
    assert cells[0].get("memory") == str(2 * GIB) and cells[0].get("memAccess") == "shared"


def test_1g_hugepages_preferred():
    """When 1 GiB pages can back the memory they are used, with nosharepages."""
    host = make_host(pages={2048: 4096, GIB: 8})
    r = vmtune.rewrite(domain(2, mib=4096), host, "latency")
    mb = tree(r).find("memoryBacking")
    assert mb.find("hugepages/page").get("size") == str(GIB)
    assert mb.find("nosharepages") is not None
    assert r.placement["hugepage_kib"] == GIB


def test_2m_hugepages_when_1g_does_not_divide():
    """Memory that is not a whole number of GiB falls back to 2 MiB pages."""
    r = vmtune.rewrite(domain(2, mib=1536), make_host(pages={2048: 4096, GIB: 8}), "latency")
    assert tree(r).find("memoryBacking/hugepages/page").get("size") == "2048"


def test_no_hugepages_is_a_warning():
    """Without enough free hugepages the VM runs on normal pages and the user is told."""
    r = vmtune.rewrite(domain(2), make_host(pages={2048: 10}), "latency")
    assert tree(r).find("memoryBacking/hugepages") is None
    assert any("hugepages" in w for w in r.warnings)


def test_the_no_hugepages_warning_says_what_was_looked_for():
    """Sizes need not divide the memory (it is rounded up to whole pages): the warning says so."""
    r = vmtune.rewrite(domain(2, mib=1025), make_host(pages={2048: 10, GIB: 0}), "latency")
    (warning,) = [w for w in r.warnings if "hugepages" in w]
    assert "divides" not in warning and "rounded up to whole pages" in warning


def kib_domain(vcpus: int, kib: int) -> str:
    return domain(vcpus).replace("<memory unit='MiB'>4096</memory>", f"<memory unit='KiB'>{kib}</memory>")


def test_the_page_size_that_wastes_least():
    """1 GiB and 1 KiB: two 1 GiB pages would waste nearly 1 GiB, 2 MiB pages less than 2 MiB."""
    r = vmtune.rewrite(kib_domain(2, GIB + 1), make_host(pages={2048: 4096, GIB: 8}), "latency")
    assert r.placement["hugepage_kib"] == 2048
    reason = next(c.reason for c in r.changes if c.element == "/domain/memoryBacking")
    assert "2M pages waste least" in reason and "1G pages 1048575 KiB" in reason


def test_a_negligible_waste_lets_the_larger_page_win():
    """4 GiB less 2 MiB: 1 GiB pages waste 2 MiB (under 1/1024 of the memory), so they win over
    2 MiB pages that waste nothing; deterministically, whatever order the host lists sizes in."""
    for pages in ({2048: 4096, GIB: 8}, {GIB: 8, 2048: 4096}):
        r = vmtune.rewrite(kib_domain(2, 4 * GIB - 2048), make_host(pages=pages), "latency")
        assert r.placement["hugepage_kib"] == GIB
    r = vmtune.rewrite(kib_domain(2, 3 * GIB - 2048), make_host(pages={2048: 4096, GIB: 8}), "latency")
    assert r.placement["hugepage_kib"] == GIB  # 2 MiB of 3 GiB: under 1/1024 too
    r = vmtune.rewrite(kib_domain(2, 2 * GIB - 2048), make_host(pages={2048: 4096, GIB: 8}), "latency")
    assert r.placement["hugepage_kib"] == 2048  # 2 MiB of 2 GiB less 2 MiB: just over 1/1024
    r = vmtune.rewrite(kib_domain(2, GIB + 2048), make_host(pages={2048: 4096, GIB: 8}), "latency")
    assert r.placement["hugepage_kib"] == 2048  # 1022 MiB of 1 GiB is not negligible


def test_hugepage_capable_node_preferred():
    """Among nodes that fit, the one that can back the VM with hugepages wins over a freer one."""
    host = make_host(pages={GIB: 0})
    cells = list(host.cells)
    cells[1] = Cell(1, cells[1].cpus, cells[1].memory_kib, {GIB: 4}, cells[1].distances)
    host = Host(host.arch, tuple(cells), host.cpus, host.isolated, host.vendor)
    r = vmtune.rewrite(domain(2, mib=4096), host, "latency")
    assert r.placement["nodes"] == [1] and r.placement["hugepage_kib"] == GIB


def test_claimed_hugepages_are_subtracted():
    """Hugepages that a claimed domain binds on a node are not offered again."""
    host = make_host(nodes=1, cores=8, pages={GIB: 4})
    first = vmtune.rewrite(named(domain(2, mib=4096), "a"), host, "latency")
    assert first.placement["hugepage_kib"] == GIB
    second = vmtune.rewrite(named(domain(2, mib=4096), "b"), host, "latency", [first.xml])
    assert second.placement["hugepage_kib"] is None


def test_claims_cores_are_not_reused():
    """A second latency VM never gets a thread of a core the first one holds."""
    host = make_host(nodes=1, cores=6)
    first = vmtune.rewrite(named(domain(3), "a"), host, "latency")
    second = vmtune.rewrite(named(domain(3), "b"), host, "latency", [first.xml])
    held = set().union(*(host.core_of(c) for c in pins(first)))
    assert not set(pins(second)) & held


def test_a_host_that_placed_others_places_as_a_fresh_one():
    """The search works out a host's free cores and their tables once per set of blocked cores
    (search._free): a host that placed domains beside other claims, and the same domain again
    without them, places each as a host that never placed any."""
    host = make_host(nodes=2, cores=8)
    kept = []  # each domain's rewrite beside the ones before it, the next one's claims
    for i, (vcpus, profile) in enumerate([(4, "latency"), (2, "realtime"), (6, "latency"), (3, "latency")]):
        placed = {}
        for claims in ([r.xml for r in kept], []):
            for each in ("realtime", "latency") if profile == "latency" else ("latency", "realtime"):  # isolate, threads
                warm = vmtune.rewrite(named(domain(vcpus), f"vm{i}"), host, each, claims)
                cold = vmtune.rewrite(named(domain(vcpus), f"vm{i}"), make_host(nodes=2, cores=8), each, claims)
                assert (warm.placement, warm.xml) == (cold.placement, cold.xml)
                placed.setdefault(each, warm)
        kept.append(placed[profile])
    held = [pin for r in kept for pin in pins(r)]
    assert len(held) == len(set(held)) == 4 + 2 + 6 + 3


def test_the_search_remembers_nothing_that_differs_between_requests():
    """The same free cores weighed for requests that differ in size, smt or the CPUs to take first
    (the hand's pins) give each its own place, as on a fresh host."""
    from vmtune.placement import claims, search

    requests = [search.Request(vcpus=n, memory_kib=GIB, smt=smt, prefer=prefer)
                for prefer in (frozenset(), frozenset({3, 11}), frozenset({13})) for smt in ("threads", "isolate")
                for n in (1, 2, 3)]
    warm = make_host(nodes=2, cores=8)
    for req in requests + requests[::-1]:
        fresh = make_host(nodes=2, cores=8)
        want = search.dedicated(fresh, fresh.reserved(), claims.ledger((), fresh), req)
        assert search.dedicated(warm, warm.reserved(), claims.ledger((), warm), req) == want


def test_untagged_claim_with_single_cpu_pins_counts_as_dedicated():
    """A claim whose every vCPU is pinned to one CPU holds those CPUs even without a tag."""
    host = make_host(nodes=1, cores=4, threads=1)
    other = ("<domain type='kvm'><name>o</name><memory>1024</memory><vcpu>2</vcpu>"
             "<cputune><vcpupin vcpu='0' cpuset='1'/><vcpupin vcpu='1' cpuset='2'/></cputune>"
             "<os><type>hvm</type></os></domain>")
    r = vmtune.rewrite(domain(1), host, "latency", [other])
    assert pins(r) == [3]


def test_balanced_keeps_off_dedicated_cores():
    """A balanced VM's cpuset excludes every core a latency claim holds."""
    host = make_host(nodes=1, cores=4)
    lat = vmtune.rewrite(named(domain(2), "lat"), host, "latency")
    bal = vmtune.rewrite(named(domain(2), "bal"), host, "balanced", [lat.xml])
    held = set().union(*(host.core_of(c) for c in pins(lat)))
    allowed = cpuset.parse(tree(bal).find("vcpu").get("cpuset"))
    assert allowed and not allowed & held


def test_throughput_binds_one_node_shared_cpus():
    """throughput: a vCPU cpuset on one node's shared CPUs and strict memory on that node."""
    host = make_host()
    r = vmtune.rewrite(domain(4), host, "throughput")
    out = tree(r)
    node = r.placement["nodes"][0]
    assert cpuset.parse(out.find("vcpu").get("cpuset")) == set(host.cell(node).cpus)
    assert out.find("numatune/memory").get("nodeset") == str(node)
    assert out.find("memoryBacking") is None and out.find("devices/memballoon") is None


def test_amd_threads_require_topoext():
    """On AMD with threads='2' the guest needs topoext to see the siblings."""
    r = vmtune.rewrite(domain(2), make_host(vendor="AMD"), "latency")
    assert tree(r).find("cpu/feature[@name='topoext']").get("policy") == "require"
    r = vmtune.rewrite(domain(2), make_host(vendor="Intel"), "latency")
    assert tree(r).find("cpu/feature[@name='topoext']") is None


def test_pack_policy_fills_one_node_first():
    """placement = "pack" puts the second VM on the node the first one used."""
    host = make_host()
    cfg = Config(placement="pack")
    a = vmtune.rewrite(named(domain(2), "a"), host, "latency", config=cfg)
    b = vmtune.rewrite(named(domain(2), "b"), host, "latency", [a.xml], config=cfg)
    assert a.placement["nodes"] == b.placement["nodes"]
    spread_b = vmtune.rewrite(named(domain(2), "b"), host, "latency", [a.xml])
    assert spread_b.placement["nodes"] != a.placement["nodes"]


def test_does_not_fit_names_the_shortage():
    """Too many vCPUs raise DoesNotFit that says how many CPUs are free."""
    with pytest.raises(DoesNotFit, match="12 free CPUs"):
        vmtune.rewrite(domain(13), make_host(), "latency")
    with pytest.raises(DoesNotFit, match="memory"):
        vmtune.rewrite(domain(2, mib=64 * 1024), make_host(mem_gib=16), "latency")


def test_memory_only_node_is_not_given_vcpus():
    """A node with memory but no CPUs never hosts dedicated vCPUs."""
    host = make_host(nodes=1)
    cells = host.cells + (Cell(2, (), 64 * GIB, {}, {}),)
    host = Host(host.arch, cells, host.cpus, host.isolated, host.vendor)
    r = vmtune.rewrite(domain(2), host, "latency")
    assert r.placement["nodes"] == [0]


def test_claimed_strict_memory_is_subtracted():
    """Memory another domain binds strictly to a node is not offered again: the next VM that
    would not fit beside it goes to the other node."""
    host = make_host(mem_gib=16)
    big = vmtune.rewrite(named(domain(2, mib=12 * 1024), "big"), host, "latency")
    assert big.placement["hugepage_kib"] is None
    nxt = vmtune.rewrite(named(domain(2, mib=8 * 1024), "next"), host, "latency", [big.xml])
    assert nxt.placement["nodes"] != big.placement["nodes"]
    # 4 GiB are left beside "big" and 8 GiB beside "next": a third 8 GiB VM fits only there
    third = vmtune.rewrite(named(domain(2, mib=8 * 1024), "third"), host, "latency", [big.xml, nxt.xml])
    assert third.placement["nodes"] == nxt.placement["nodes"]
    with pytest.raises(DoesNotFit, match="memory"):
        vmtune.rewrite(named(domain(2, mib=8 * 1024), "fourth"), host, "latency", [big.xml, nxt.xml, third.xml])


def test_throughput_vms_spread_by_memory():
    """Throughput VMs bound to one node each alternate between equal nodes instead of filling
    node 0 first (the numad lesson for shared CPUs)."""
    host = make_host(mem_gib=64)
    placed = []
    for i in range(4):
        placed.append(vmtune.rewrite(named(domain(2, mib=8192), f"t{i}"), host, "throughput", [p.xml for p in placed]))
    assert [p.placement["nodes"][0] for p in placed].count(0) == 2


def test_claims_are_read_once():
    """Planning many domains reads each claim's XML once, not once per rewrite."""
    from vmtune.placement import claims

    host = make_host()
    xml = vmtune.rewrite(named(domain(2), "c"), host, "latency").xml
    claims.read.cache_clear()
    for i in range(3):
        vmtune.rewrite(named(domain(1), f"n{i}"), host, "latency", [xml])
    assert claims.read.cache_info().misses == 1


def _with_dimm(dimm_mib: int, boot_mib: int = 1024) -> str:
    """A latency domain with one guest cell of ``boot_mib`` and a DIMM of ``dimm_mib`` in it."""
    total = boot_mib + dimm_mib
    return domain(2, mib=total, extra=(
        f"<maxMemory slots='4' unit='MiB'>{total * 4}</maxMemory>"
        f"<cpu><numa><cell id='0' cpus='0-1' memory='{boot_mib}' unit='MiB'/></numa></cpu>")).replace(
        "</devices>", f"<memory model='dimm'><target><size unit='MiB'>{dimm_mib}</size><node>0</node></target>"
        "</memory></devices>")


def test_the_hugepage_fit_counts_the_dimms_the_pages_back():
    """A DIMM in a hugepage-backed cell takes pages from the same pool: 1024 MiB of cell and 512 MiB
    of DIMM need 768 pages of 2 MiB. With 600 free per node the domain gets no hugepages (a
    warning), where counting the cell alone would promise pages QEMU cannot get; with 800 it does."""
    short = vmtune.rewrite(_with_dimm(512), make_host(pages={2048: 600}), "latency")
    assert short.placement["hugepage_kib"] is None and any("no hugepages" in w for w in short.warnings)
    enough = vmtune.rewrite(_with_dimm(512), make_host(pages={2048: 800}), "latency")
    assert enough.placement["hugepage_kib"] == 2048
    assert tree(enough).find("memoryBacking/hugepages") is not None
