"""The host loaders (vmtune/host/capabilities.py, sysfs.py): libvirt capabilities XML and sysfs must
describe the same machine the same way."""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fixtures.hosttrees import caps_view, caps_xml, hosts, machines, write_sysfs
from vmtune import cpuset
from vmtune.xml import xmlsafe
from vmtune.errors import InvalidInput
from vmtune.host import Cpu, Host
from vmtune.host.topology import L3

CORPUS = Path(os.environ.get("VMTUNE_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "corpus"))
HOST_FILES = sorted((CORPUS / "hosts").glob("*.xml"))


def load(name: str) -> Host:
    return Host.from_capabilities((CORPUS / "hosts" / name).read_bytes())


def sysfs_view(host: Host) -> Host:
    """What sysfs can know of a capabilities host: only Intel/AMD vendors (from cpuinfo)."""
    return replace(host, vendor=host.vendor if host.vendor in ("Intel", "AMD") else None)


# -- every corpus file ----------------------------------------------------------------------------
@pytest.mark.parametrize("path", HOST_FILES, ids=lambda p: p.stem)
def test_corpus_capabilities_load_consistently(path):
    host = Host.from_capabilities(path.read_bytes())
    assert host.cells and host.cpus
    assert list(host.node_ids) == sorted(set(host.node_ids))
    assert host.isolated == frozenset()
    in_cells = [c for cell in host.cells for c in cell.cpus]
    assert sorted(in_cells) == sorted(host.cpus)  # every CPU in exactly one cell
    for cell in host.cells:
        assert list(cell.cpus) == sorted(cell.cpus)
        assert all(host.cpus[c].node == cell.id for c in cell.cpus)
        assert 4 not in cell.pages  # the base page is never a hugepage pool
    for cpu in host.cpus.values():
        assert cpu.id in cpu.siblings


@pytest.mark.parametrize("path", HOST_FILES, ids=lambda p: p.stem)
def test_corpus_sysfs_tree_loads_equal(path, tmp_path):
    host = Host.from_capabilities(path.read_bytes())
    root = write_sysfs(host, str(tmp_path))
    assert Host.from_sysfs(root, arch=host.arch) == sysfs_view(host)


@pytest.mark.parametrize("path", HOST_FILES, ids=lambda p: p.stem)
def test_corpus_caps_xml_round_trips(path):
    host = Host.from_capabilities(path.read_bytes())
    assert Host.from_capabilities(caps_xml(host)) == host


# -- facts the corpus README states -----------------------------------------------------------------
def test_skylake_one_node_smt():
    host = load("vm-caps-x86_64-1node-skylake-smt.xml")
    assert (host.arch, host.vendor, host.node_ids) == ("x86_64", "Intel", (0,))
    assert host.cell(0).cpus == tuple(range(8))
    assert host.cpus[0] == Cpu(0, 0, socket=0, die=0, core=0, siblings=frozenset({0, 4}), l3=0)
    assert host.cores(0) == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert host.caches == (L3(0, frozenset(range(8)), 8192),)  # <bank id='0' level='3' size='8' unit='MiB' cpus='0-7'/>
    assert host.smt
    assert host.cell(0).memory_kib == 32731708
    assert host.cell(0).pages == {2048: 0, 1048576: 0}
    assert host.cell(0).distances == {0: 10}


def test_westmere_bare_ids_are_online_with_unknown_topology():
    host = load("lv-caps-x86_64-2node-westmere-bare-cpu-ids.xml")
    assert host.node_ids == (0, 1)
    assert host.cell(0).cpus == tuple(range(0, 24, 2))
    assert host.cell(1).cpus == tuple(range(1, 24, 2))
    assert host.cpus[3] == Cpu(3, 1, None, None, None, frozenset({3}))
    assert not host.smt
    assert host.vendor == "Intel"
    assert [c.memory_kib for c in host.cells] == [12572412, 12582908]
    assert all(c.pages == {} and c.distances == {} for c in host.cells)


def test_i686_cells_without_memory():
    host = load("lv-caps-i686-2node-no-memory-element.xml")
    assert host.arch == "i686"
    assert len(host.cpus) == 16
    assert [(c.memory_kib, dict(c.pages), dict(c.distances)) for c in host.cells] == [(0, {}, {})] * 2


def test_hmat_memory_only_node():
    host = load("lv-caps-x86_64-2node-memory-only-node-hmat.xml")
    assert host.cell(0).cpus == tuple(range(24))
    assert host.cell(1).cpus == ()
    assert host.cell(1).memory_kib == 2097152
    assert host.cell(1).pages == {2048: 6144, 1048576: 8192}
    assert host.cores(1) == []
    assert host.default_reserved() == {0}


def test_amd_siblings_i_and_i_plus_32():
    host = load("lv-caps-x86_64-amd-2socket-8die-smt.xml")
    assert host.cell(0).cpus == tuple(range(16)) + tuple(range(32, 48))
    assert host.cell(1).cpus == tuple(range(16, 32)) + tuple(range(48, 64))
    for i in range(32):
        assert host.core_of(i) == {i, i + 32}
    assert host.cpus[4].die == 2 and host.cpus[20].die == 6
    # The file has no <vendor> element (only <arch>), so the loader cannot claim "AMD".
    assert host.vendor is None


def test_4node_hugepages_differ_per_node():
    host = load("lv-caps-x86_64-4node-hugepages-nosmt.xml")
    assert host.node_ids == (0, 1, 2, 3)
    assert [c.cpus for c in host.cells] == [tuple(range(i, i + 4)) for i in (0, 4, 8, 12)]
    assert [dict(c.pages) for c in host.cells] == [
        {2048: 4096, 1048576: 6144},
        {2048: 6144, 1048576: 8192},
        {2048: 8192, 1048576: 10240},
        {2048: 10240, 1048576: 12288},
    ]
    assert all(c.distances == {} for c in host.cells)
    assert not host.smt


def test_duplicate_cpu_ids_keep_the_first():
    host = load("lv-caps-x86_64-4node-distances-duplicate-cpu-ids.xml")
    assert [c.cpus for c in host.cells] == [(0,), (1,), (2,), (3,)]
    assert host.cpus[1] == Cpu(1, 1, socket=1, die=None, core=1, siblings=frozenset({1}))
    assert host.cell(2).distances == {0: 20, 1: 20, 2: 10, 3: 20}


def test_three_dies_repeat_core_ids():
    host = load("lv-caps-x86_64-1node-2socket-3dies.xml")
    assert (host.cpus[2].socket, host.cpus[2].die, host.cpus[2].core) == (0, 1, 0)
    assert (host.cpus[10].socket, host.cpus[10].die, host.cpus[10].core) == (1, 2, 0)
    assert host.cores(0) == [(i,) for i in range(12)]


def test_ppc64le_smt8_excludes_64k_base_page():
    host = load("vm-caps-ppc64le-2node-smt8.xml")
    assert (host.arch, host.vendor) == ("ppc64le", "IBM")
    assert [len(c.cpus) for c in host.cells] == [48, 48]
    assert host.core_of(9) == frozenset(range(8, 16))
    assert host.cell(0).pages == {16384: 0, 16777216: 0}


def test_aarch64_clusters_no_smt():
    host = load("vm-caps-aarch64-2node-clusters.xml")
    assert [len(c.cpus) for c in host.cells] == [80, 80]
    assert not host.smt
    assert host.cell(1).pages == {64: 0, 2048: 0, 32768: 0, 1048576: 0}  # 64K is a hugepage on 4K arm64
    assert host.cell(1).distances == {0: 20, 1: 10}


# -- capabilities edge cases ------------------------------------------------------------------------
def _caps(cpus: str, pages: str = "") -> str:
    return (
        "<capabilities><host><cpu><arch>x86_64</arch></cpu><topology><cells num='1'>"
        f"<cell id='0'>{pages}<cpus num='9'>{cpus}</cpus></cell></cells></topology></host></capabilities>"
    )


def test_bare_cpus_among_full_ones_are_offline():
    host = Host.from_capabilities(
        _caps("<cpu id='0' socket_id='0' core_id='0' siblings='0-1'/><cpu id='1'/>"
              "<cpu id='2' socket_id='0' core_id='1' siblings='2'/>")
    )
    assert set(host.cpus) == {0, 2}
    assert host.cell(0).cpus == (0, 2)
    assert host.core_of(0) == {0}  # the offline sibling is not a usable thread


def test_cell_without_pages_next_to_cells_with_pages():
    xml = (
        "<capabilities><host><cpu><arch>x86_64</arch></cpu><topology><cells num='2'>"
        "<cell id='0'><pages unit='KiB' size='4'>10</pages><pages unit='MiB' size='2'>7</pages>"
        "<cpus num='1'><cpu id='0'/></cpus></cell>"
        "<cell id='2'><memory unit='GiB'>1</memory><cpus num='1'><cpu id='1'/></cpus></cell>"
        "</cells></topology></host></capabilities>"
    )
    host = Host.from_capabilities(xml)
    assert host.node_ids == (0, 2)
    assert host.cell(0).pages == {2048: 7}
    assert host.cell(2).pages == {}
    assert host.cell(2).memory_kib == 1024 * 1024


@pytest.mark.parametrize(
    "xml, message",
    [
        ("<capabilities><host>", "capabilities XML"),  # xmlsafe names the input
        ((CORPUS / "domains" / "lv-cputune-vcpupin-emulatorpin-vcpusched.xml"), "root element is <domain>"),
        ("<capabilities><host><cpu><arch>x86_64</arch></cpu></host></capabilities>", "no NUMA topology"),
        ("<capabilities><host><topology><cells num='0'/></topology></host></capabilities>", "no NUMA cells"),
        (_caps("<cpu id='zero'/>"), "bad cpu id"),
        (_caps("<cpu id='0' socket_id='0' core_id='0' siblings='0-x'/>"), "bad cpu list"),
        ("<!DOCTYPE x [<!ENTITY a 'b'>]><capabilities/>", "capabilities XML"),
    ],
    ids=["malformed", "domain-xml", "no-topology", "no-cells", "bad-cpu-id", "bad-siblings", "doctype"],
)
def test_bad_capabilities_raise_invalid_input(xml, message):
    if isinstance(xml, Path):
        xml = xml.read_bytes()
    with pytest.raises(InvalidInput, match=message) as exc:
        Host.from_capabilities(xml)
    assert "\n" not in str(exc.value)


# -- sysfs specifics --------------------------------------------------------------------------------
def test_node_cpulist_with_offline_cpus_is_intersected(tmp_path):
    host = load("vm-caps-x86_64-1node-skylake-smt.xml")
    online = replace(host, cpus={c: replace(host.cpus[c], siblings=frozenset({c})) for c in range(4)},
                     cells=(replace(host.cell(0), cpus=(0, 1, 2, 3)),))
    root = write_sysfs(online, str(tmp_path), offline={c: 0 for c in range(4, 8)})
    assert (tmp_path / "sys/devices/system/node/node0/cpulist").read_text() == "0-7\n"
    loaded = Host.from_sysfs(root, arch="x86_64")
    assert loaded.cell(0).cpus == (0, 1, 2, 3)
    assert set(loaded.cpus) == {0, 1, 2, 3}
    assert loaded.offline == {4: 0, 5: 0, 6: 0, 7: 0}


def test_an_online_cpu_in_no_node_list_is_on_the_first_node(tmp_path):
    """A node folder without a cpulist (a partial tree): its CPUs are not lost, they go where the
    kernel puts a CPU without NUMA information, on the first node."""
    host = load("vm-caps-x86_64-1node-skylake-smt.xml")
    root = write_sysfs(host, str(tmp_path))
    (tmp_path / "sys/devices/system/node/node0/cpulist").unlink()
    loaded = Host.from_sysfs(root, arch="x86_64")
    assert set(loaded.cpus) == set(host.cpus) and loaded.cell(0).cpus == tuple(sorted(host.cpus))


def test_missing_topology_files_mean_unknown(tmp_path):
    host = load("vm-caps-x86_64-1node-skylake-smt.xml")
    root = write_sysfs(host, str(tmp_path))
    shutil.rmtree(os.path.join(root, "devices/system/cpu/cpu1/topology"))
    os.remove(os.path.join(root, "devices/system/cpu/cpu2/topology/die_id"))
    loaded = Host.from_sysfs(root)
    assert loaded.cpus[1] == Cpu(1, 0, None, None, None, frozenset({1}), l3=0)
    assert loaded.cpus[2] == Cpu(2, 0, socket=0, die=None, core=2, siblings=frozenset({2, 6}), l3=0)


def test_no_node_directory_is_one_node(tmp_path):
    host = load("vm-caps-x86_64-1node-skylake-smt.xml")
    host = replace(host, cells=(replace(host.cell(0), distances={}, pages={2048: 3}),))
    root = write_sysfs(host, str(tmp_path), numa=False)
    assert not os.path.exists(os.path.join(root, "devices/system/node"))
    assert Host.from_sysfs(root, arch="x86_64") == host


def test_proc_defaults_beside_root_and_can_be_given(tmp_path):
    host = load("vm-caps-x86_64-1node-skylake-smt.xml")  # Intel
    root = write_sysfs(host, str(tmp_path / "a"))
    assert Host.from_sysfs(root).vendor == "Intel"
    assert Host.from_sysfs(root + "/").vendor == "Intel"
    other = tmp_path / "b"
    (other).mkdir()
    (other / "cpuinfo").write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n")
    assert Host.from_sysfs(root, proc=str(other)).vendor == "AMD"
    os.remove(tmp_path / "a/proc/cpuinfo")
    assert Host.from_sysfs(root).vendor is None


def test_arch_defaults_to_this_machine(tmp_path):
    root = write_sysfs(load("lv-caps-x86_64-4node-hugepages-nosmt.xml"), str(tmp_path))
    assert Host.from_sysfs(root).arch == platform.machine()
    assert Host.from_sysfs(root, arch="ppc64le").arch == "ppc64le"


def test_sysfs_without_cpu_online_is_invalid(tmp_path):
    with pytest.raises(InvalidInput, match="cpu/online"):
        Host.from_sysfs(str(tmp_path))
    root = write_sysfs(load("vm-caps-x86_64-1node-skylake-smt.xml"), str(tmp_path))
    os.remove(os.path.join(root, "devices/system/cpu/online"))
    with pytest.raises(InvalidInput):
        Host.from_sysfs(root)


def test_probe_this_machine():
    online_file = Path("/sys/devices/system/cpu/online")
    if not online_file.exists():
        pytest.skip("no sysfs here")
    host = Host.probe()
    online = cpuset.parse(online_file.read_text())
    assert len(host.cells) >= 1
    assert set(host.cpus) == online
    assert sorted(c for cell in host.cells for c in cell.cpus) == sorted(online)
    assert host.arch == platform.machine()
    assert host.default_reserved() <= online


# -- default_reserved ---------------------------------------------------------------------------------
def test_default_reserved_first_core_of_each_node():
    assert load("vm-caps-x86_64-1node-skylake-smt.xml").default_reserved() == {0, 4}
    assert load("lv-caps-x86_64-amd-2socket-8die-smt.xml").default_reserved() == {0, 32, 16, 48}
    assert load("lv-caps-x86_64-4node-hugepages-nosmt.xml").default_reserved() == {0, 4, 8, 12}
    assert load("vm-caps-ppc64le-2node-smt8.xml").default_reserved() == set(range(8)) | set(range(48, 56))


def test_default_reserved_with_isolcpus_is_everything_not_isolated(tmp_path):
    host = load("vm-caps-x86_64-1node-skylake-smt.xml")
    assert replace(host, isolated=frozenset({2, 3, 6, 7})).default_reserved() == {0, 1, 4, 5}
    root = write_sysfs(replace(host, isolated=frozenset({1, 2, 3, 5, 6, 7})), str(tmp_path))
    loaded = Host.from_sysfs(root)
    assert loaded.isolated == {1, 2, 3, 5, 6, 7}
    assert loaded.default_reserved() == {0, 4}


# -- generated hosts ---------------------------------------------------------------------------------
@given(machines(hybrid=True), st.sampled_from(["pmu", "capacity"]))
def test_generated_hosts_load_the_same_from_both_sources(machine, kinds_by):
    """L3 domains (none, per socket, contiguous, interleaved), hybrid hosts (by Intel's PMUs or by
    cpu_capacity), offline CPUs: sysfs gives the host, capabilities all of it but the core kinds
    and isolcpus, which it cannot know."""
    host, offline = machine
    with tempfile.TemporaryDirectory() as d:
        from_sysfs = Host.from_sysfs(write_sysfs(host, d, offline, kinds_by=kinds_by), arch=host.arch)
    from_caps = Host.from_capabilities(caps_xml(host, offline))
    assert from_sysfs == host
    assert from_caps == caps_view(host)
    assert from_sysfs.offline == from_caps.offline == offline  # vmtune map shows them, on their node


@given(st.data())
def test_strategy_arguments_narrow(data):
    host = data.draw(hosts(max_nodes=1, sparse_ids=False, smt=True, isolated=False, hugepages=False))
    assert host.node_ids == (0,) and host.smt and not host.isolated
    assert all(c.pages == {} for c in host.cells)
    host = data.draw(hosts(max_nodes=3, smt=False, memory_only=False, memoryless=False))
    assert not host.smt and all(c.cpus and c.memory_kib for c in host.cells)
    host, offline = data.draw(machines(offline=False))
    assert not offline


# -- libvirt's own test data: a sysfs tree and the capabilities libvirt makes of it -------------------
VIRCAPS = Path(__file__).parent / "data" / "libvirt" / "vircaps2xmldata"  # tests/data/libvirt/SOURCES.md
VIRCAPS_CASES = [("linux-caches", "vircaps-x86_64-caches.xml"), ("linux-resctrl", "vircaps-x86_64-resctrl.xml"),
                 ("linux-resctrl-skx", "vircaps-x86_64-resctrl-skx.xml"),
                 ("linux-resctrl-skx-twocaches", "vircaps-x86_64-resctrl-skx-twocaches.xml"),
                 ("linux-basic", "vircaps-x86_64-basic.xml")]


def _libvirt_tree(case: str, tmp_path) -> str:
    """A sysfs root whose devices/system is libvirt's fake tree of ``case``."""
    root = tmp_path / "sys"
    (root / "devices").mkdir(parents=True)
    (root / "devices" / "system").symlink_to((VIRCAPS / case / "system").resolve())
    return str(root)


@pytest.mark.skipif(not VIRCAPS.is_dir(), reason="libvirt's vircaps2xmldata is not in tests/data")
@pytest.mark.parametrize("case, caps", VIRCAPS_CASES, ids=[c for c, _ in VIRCAPS_CASES])
def test_libvirts_sysfs_trees_give_the_l3_domains_of_its_capabilities(case, caps, tmp_path):
    """libvirt's own fake sysfs trees (vircaps2xmltest.c) and the capabilities libvirt writes of
    them: the same CPUs, nodes and L3 domains (ids, CPUs, sizes) from both loaders. The sizes and
    pools of libvirt's memory mock are not in the trees, so only the topology is compared."""
    from_sysfs = Host.from_sysfs(_libvirt_tree(case, tmp_path), arch="x86_64")
    from_caps = Host.from_capabilities((VIRCAPS / caps).read_bytes())
    assert from_sysfs.caches == from_caps.caches
    assert {c: (cpu.node, cpu.l3) for c, cpu in from_sysfs.cpus.items()} == \
        {c: (cpu.node, cpu.l3) for c, cpu in from_caps.cpus.items()}
    if case == "linux-resctrl":
        assert [(l3.id, l3.cpus, l3.size_kib) for l3 in from_caps.caches] == \
            [(0, frozenset(range(6)), 15360), (1, frozenset(range(6, 12)), 15360)]
    if case == "linux-basic":
        assert from_caps.caches == ()


@pytest.mark.parametrize("name", sorted(p.name for p in (Path(__file__).parent / "data" / "libvirt" / "capabilities")
                                        .glob("*.xml")) if (Path(__file__).parent / "data" / "libvirt").is_dir() else [])
def test_libvirts_capabilities_with_caches_load(name):
    """libvirt's own capabilities test data with cache banks: every L3 bank becomes an L3 domain of
    online CPUs, each CPU in at most one (a bank id repeated at level 2 is another cache)."""
    path = Path(__file__).parent / "data" / "libvirt" / "capabilities" / name
    host = Host.from_capabilities(path.read_bytes())
    root = xmlsafe.parse(path.read_bytes())
    banks = [b for b in root.iter("bank") if b.get("level") == "3"]
    named = frozenset().union(*(cpuset.parse(b.get("cpus")) for b in banks)) if banks else frozenset()
    assert frozenset().union(*(l3.cpus for l3 in host.caches)) == named & frozenset(host.cpus)
    assert {l3.id for l3 in host.caches} <= {int(b.get("id")) for b in banks}
    seen: set[int] = set()
    for l3 in host.caches:
        assert l3.cpus <= set(host.cpus) and not l3.cpus & seen
        seen |= l3.cpus
        assert all(host.cpus[c].l3 == l3.id for c in l3.cpus)


def test_l3_ids_repeated_per_socket_are_two_domains_in_both_loaders(tmp_path):
    """A kernel that numbers L3 caches per socket (ids 0, 1 on each), and the capabilities libvirt
    makes of it (two banks with id 0): four L3 domains, numbered alike by both loaders."""
    cpus = {c: Cpu(c, 0, c // 8, 0, c % 8, frozenset({c}), (c // 4) % 2) for c in range(16)}
    from vmtune.host import Cell

    host = Host("x86_64", (Cell(0, tuple(range(16)), 1 << 20),), cpus,
                caches=(L3(0, frozenset({0, 1, 2, 3, 8, 9, 10, 11}), 8192), L3(1, frozenset({4, 5, 6, 7, 12, 13, 14, 15}), 8192)))
    root = write_sysfs(host, str(tmp_path))
    caps = caps_xml(host).replace("cpus='0-3,8-11'", "cpus='0-3'").replace("cpus='4-7,12-15'", "cpus='4-7'")
    caps = caps.replace("    </cache>", "      <bank id='0' level='3' type='both' size='8' unit='MiB' cpus='8-11'/>\n"
                                       "      <bank id='1' level='3' type='both' size='8' unit='MiB' cpus='12-15'/>\n"
                                       "    </cache>")
    for c in range(16):  # sysfs: each socket's own L3s
        shared = [c - c % 4 + i for i in range(4)]
        (Path(root) / f"devices/system/cpu/cpu{c}/cache/index3/shared_cpu_list").write_text(cpuset.format(shared) + "\n")
    from_sysfs, from_caps = Host.from_sysfs(root, arch="x86_64"), Host.from_capabilities(caps)
    assert from_sysfs.caches == from_caps.caches
    assert [sorted(l3.cpus) for l3 in from_caps.caches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert [l3.id for l3 in from_caps.caches] == [0, 1, 2, 3]


def test_an_l3_without_an_id_is_left_out_by_both_loaders(tmp_path):
    """libvirt leaves a cache without an ``id`` file out of its capabilities; so does sysfs."""
    host = load("vm-caps-x86_64-1node-skylake-smt.xml")
    root = write_sysfs(host, str(tmp_path))
    for c in range(8):
        os.remove(os.path.join(root, f"devices/system/cpu/cpu{c}/cache/index3/id"))
    assert Host.from_sysfs(root, arch="x86_64").caches == ()
