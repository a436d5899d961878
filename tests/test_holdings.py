"""What a domain holds on a host (vmtune/placement/holdings.py): each rule once, and every reader of a rule agrees."""

from __future__ import annotations

import types

import pytest
from hypothesis import given

from fixtures import strategies
import vmtune
from conftest import EXAMPLES
from vmtune.placement import audit, claims, holdings
from vmtune import profiles
from vmtune.xml import xmlsafe
from vmtune.hoststate import pages as hugepages
from vmtune.hoststate.kinds import Pool
from vmtune.live import apply
from vmtune.xml.model import Domain

HOST = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())  # 2 MiB is its smallest
EVERY = frozenset(HOST.cpus)
GIB = 1048576


def dom(xml: str) -> Domain:
    return Domain(xmlsafe.parse(xml))


def domain(body: str, memory: str = "<memory unit='GiB'>2</memory>") -> str:
    return (f"<domain type='kvm'><name>d</name>{memory}<vcpu>2</vcpu>{body}"
            "<os><type arch='x86_64'>hvm</type></os></domain>")


def cells(*mib: int, devices: str = "") -> str:
    cell = "".join(f"<cell id='{i}' cpus='{i}' memory='{m}' unit='MiB'/>" for i, m in enumerate(mib))
    return f"<cpu><numa>{cell}</numa></cpu><devices>{devices}</devices>"


def memory(xml: str) -> holdings.Memory:
    return holdings.memory(dom(xml), lambda: 2048)


# -- every reader agrees ----------------------------------------------------------------------------
@given(strategies.memory_domains())
def test_ledger_and_hook_count_the_same_hugepages(xml):
    """The rewriter's ledger (claims) and the hook's top-up (hugepages.needs) count the same
    hugepages per host node and size, whatever the cells, pages, numatune modes and memory devices."""
    ledger = claims.read(xml, HOST).hugepages
    hook = hugepages.needs(dom(xml), lambda: 2048)
    assert {Pool(node, size): pages for (node, size), pages in ledger.items()} == hook


class _Running:
    """A running domain as move_live sees it: its vCPUs and iothreads, and the pins it is given."""

    def __init__(self, vcpus: int, iothreads: list[int]):
        self.vcpu_ids, self.iothread_ids, self.pins = range(vcpus), iothreads, {}

    def vcpus(self):
        return [(v, 1, 0, 0) for v in self.vcpu_ids], None

    def ioThreadInfo(self, _flags):
        return [(i, ()) for i in self.iothread_ids]

    def pinVcpuFlags(self, vcpu, cpumap, _flags):
        self.pins[f"vcpu{vcpu}"] = frozenset(i for i, on in enumerate(cpumap) if on)

    def pinEmulator(self, cpumap, _flags):
        self.pins["emulator"] = frozenset(i for i, on in enumerate(cpumap) if on)

    def pinIOThread(self, iothread, cpumap, _flags):
        self.pins[f"iothread{iothread}"] = frozenset(i for i, on in enumerate(cpumap) if on)


@given(strategies.thread_domains())
def test_apply_live_moves_threads_where_plan_says_they_run(xml):
    """``vmtune apply --live`` pins every thread where ``vmtune plan`` (audit) says it may run."""
    d = dom(xml)
    running = _Running(d.vcpus, d.iothread_ids())
    conn = types.SimpleNamespace(getCPUMap=lambda: (max(HOST.cpus) + 1, None, None))
    real = apply.connect.libvirt
    apply.connect.libvirt = lambda: types.SimpleNamespace(VIR_DOMAIN_AFFECT_LIVE=1)
    try:
        apply.move_live(conn, running, xml, HOST)
    finally:
        apply.connect.libvirt = real
    shape = holdings.shape(d, EVERY)
    assert running.pins == {k: v & EVERY for k, v in shape.items()}
    assert audit.live_drift(HOST, xml, xml) is None


# -- threads ----------------------------------------------------------------------------------------
def test_a_pin_that_names_no_cpu_pins_nothing():
    """An empty <vcpu cpuset>, vcpupin or emulatorpin (libvirt refuses them) leaves the thread where
    an unpinned one runs: every host CPU here."""
    d = dom("<domain><vcpu cpuset=''>2</vcpu><cputune><vcpupin vcpu='0' cpuset=''/><vcpupin vcpu='1'/>"
            "<emulatorpin cpuset=''/></cputune></domain>")
    assert holdings.shape(d, EVERY) == {"vcpu0": EVERY, "vcpu1": EVERY, "emulator": EVERY}


def test_threads_run_on_the_vcpu_cpuset_unless_numad_places_them():
    """Unpinned threads run on the <vcpu cpuset>; with placement='auto' numad chooses: every CPU."""
    static = dom("<domain><vcpu cpuset='2-3'>1</vcpu><iothreads>1</iothreads></domain>")
    assert holdings.shape(static, EVERY) == {"vcpu0": {2, 3}, "emulator": {2, 3}, "iothread1": {2, 3}}
    auto = dom("<domain><vcpu placement='auto' cpuset='2-3'>1</vcpu></domain>")
    assert holdings.reach(auto, EVERY).default == EVERY


def test_iothread_pins_are_read_by_id_as_the_model_reads_ids():
    """iothreadpin ids are read like every id of the model: ' 2' and '02' are iothread 2, 'x' none."""
    d = dom("<domain><vcpu>1</vcpu><iothreadids><iothread id='2'/><iothread id='5'/></iothreadids>"
            "<cputune><iothreadpin iothread=' 2' cpuset='3'/><iothreadpin iothread='x' cpuset='4'/>"
            "<iothreadpin iothread='05' cpuset='6'/></cputune></domain>")
    shape = holdings.shape(d, EVERY)
    assert (shape["iothread2"], shape["iothread5"]) == ({3}, {6})


def test_dedicated_by_tag_or_by_pins_alone():
    """A domain holds its pins as dedicated when tagged latency/realtime or when every vCPU is
    pinned alone; otherwise it holds nothing."""
    pins = "<cputune><vcpupin vcpu='0' cpuset='4'/><vcpupin vcpu='1' cpuset='5-6'/></cputune>"
    tag = "<metadata><vmtune:tune xmlns:vmtune='https://vmtune.dev/xmlns/1' profile='latency'/></metadata>"
    assert holdings.dedicated(dom(f"<domain><vcpu>2</vcpu>{pins}</domain>")) == frozenset()
    assert holdings.dedicated(dom(f"<domain>{tag}<vcpu>2</vcpu>{pins}</domain>")) == {4, 5, 6}
    alone = "<cputune><vcpupin vcpu='0' cpuset='4'/><vcpupin vcpu='1' cpuset='6'/></cputune>"
    assert holdings.dedicated(dom(f"<domain><vcpu>2</vcpu>{alone}</domain>")) == {4, 6}


@pytest.mark.parametrize("name", profiles.BUILTIN + ("custom", None))
def test_dedicated_is_the_tagged_profiles_own_pinning(name):
    """Which tag makes pins dedicated is the profile's own ``cpu_pinning``, not a list of names: a
    profile that dedicates CPUs holds even shared pins, one that pins to a node's shared CPUs holds
    none even when each vCPU has a CPU alone, and a name vmtune does not ship goes by the pins."""
    tag = (f"<metadata><vmtune:tune xmlns:vmtune='https://vmtune.dev/xmlns/1' profile='{name}'/></metadata>"
           if name else "")
    shared = "<cputune><vcpupin vcpu='0' cpuset='4-5'/><vcpupin vcpu='1' cpuset='4-5'/></cputune>"
    alone = "<cputune><vcpupin vcpu='0' cpuset='4'/><vcpupin vcpu='1' cpuset='6'/></cputune>"
    prof = profiles.builtin(name) if name else None
    held_shared = holdings.dedicated(dom(f"<domain>{tag}<vcpu>2</vcpu>{shared}</domain>"))
    held_alone = holdings.dedicated(dom(f"<domain>{tag}<vcpu>2</vcpu>{alone}</domain>"))
    assert held_shared == ({4, 5} if prof is not None and prof.dedicated else frozenset())
    node = prof is not None and prof.cpu_pinning == profiles.Pinning.NODE
    assert held_alone == (frozenset() if node else {4, 6})
    assert (name in profiles.BUILTIN) == (prof is not None)


# -- memory -----------------------------------------------------------------------------------------
def test_each_guest_cell_takes_its_own_page_size():
    """Cell 0 takes the page whose nodeset holds it, cell 1 the page without a nodeset."""
    xml = domain("<memoryBacking><hugepages><page size='2048'/><page size='1' unit='GiB' nodeset='0'/>"
                 "</hugepages></memoryBacking><numatune><memory nodeset='1'/></numatune>" + cells(1024, 512))
    assert memory(xml).hugepages == {(1, GIB): 1, (1, 2048): 256}


def test_a_cell_no_page_covers_and_a_base_size_page_are_ordinary_memory():
    """A cell that no <page> names (and no page without a nodeset) and a page of the base size get
    ordinary pages: normal memory bound to the node, no hugepages."""
    uncovered = domain("<memoryBacking><hugepages><page size='2048' nodeset='0'/></hugepages></memoryBacking>"
                       "<numatune><memory nodeset='1'/></numatune>" + cells(1024, 512))
    assert memory(uncovered) == holdings.Memory({1: 512 * 1024}, {(1, 2048): 512}, {})
    base = domain(f"<memoryBacking><hugepages><page size='{holdings.base_page_kib()}'/></hugepages></memoryBacking>"
                  "<numatune><memory nodeset='0'/></numatune>")
    assert memory(base) == holdings.Memory({0: 2 * GIB}, {}, {})


def test_without_guest_cells_only_the_page_without_a_nodeset_counts():
    """libvirt backs a domain without guest cells with the <page> that has no nodeset only."""
    xml = domain("<memoryBacking><hugepages><page size='1' unit='GiB' nodeset='0'/><page size='2048'/>"
                 "</hugepages></memoryBacking><numatune><memory nodeset='0'/></numatune>")
    assert memory(xml).hugepages == {(0, 2048): 1024}


def test_memory_devices_take_their_own_page_size_and_nodes():
    """A DIMM's <source><pagesize> and <nodemask> win, with or without <hugepages>; a DIMM without a
    page size is normal memory bound to its nodemask; an nvdimm is a file."""
    def dimm(source: str) -> str:
        return (f"<memory model='dimm'><source>{source}</source><target><size unit='GiB'>1</size>"
                "<node>0</node></target></memory>")

    devices = (dimm("<pagesize unit='GiB'>1</pagesize><nodemask>1</nodemask>") + dimm("<nodemask>2</nodemask>")
               + "<memory model='nvdimm'><source><path>/nv</path></source><target><size unit='GiB'>1</size>"
               "<node>0</node></target></memory>")
    xml = domain("<numatune><memory nodeset='0'/></numatune>" + cells(1024, devices=devices),
                 "<memory unit='GiB'>4</memory>")
    assert memory(xml) == holdings.Memory({0: GIB, 2: GIB}, {(1, GIB): 1}, {})


def test_pages_come_from_the_named_nodes_in_every_mode():
    """preferred and interleave take the pages from the nodes they name (while there are any), so
    they count there too; normal memory counts only where it is bound: a strict memnode's nodes, or
    <memory nodeset> when that is strict (libvirt's cgroup), split as one."""
    numatune = ("<numatune><memory mode='strict' nodeset='0-1'/><memnode cellid='0' mode='preferred' nodeset='1'/>"
                "<memnode cellid='1' mode='interleave' nodeset='0-1'/></numatune>")
    huge = domain("<memoryBacking><hugepages/></memoryBacking>" + numatune + cells(1024, 1024))
    assert memory(huge).hugepages == {(1, 2048): 512 + 256, (0, 2048): 256}
    normal = domain(numatune + cells(1024, 1024))
    assert memory(normal).bound_kib == {0: GIB, 1: GIB}
    loose = domain("<numatune><memory mode='preferred' nodeset='0'/><memnode cellid='1' nodeset='1'/></numatune>"
                   + cells(1024, 1024))
    assert memory(loose).bound_kib == {1: GIB}  # only the strict memnode binds


def test_restrictive_binds_by_the_cgroup_alone():
    """restrictive passes no policy to QEMU: the pages come from <memory nodeset>, memnodes aside."""
    xml = domain("<memoryBacking><hugepages/></memoryBacking><numatune><memory mode='restrictive' nodeset='1'/>"
                 "<memnode cellid='0' mode='restrictive' nodeset='0'/></numatune>" + cells(2048))
    assert memory(xml).hugepages == {(1, 2048): 1024}


def test_memory_bound_to_no_node_takes_pages_anywhere():
    """Without a nodeset (or with numad's placement) the pages may come from any node."""
    xml = domain("<memoryBacking><hugepages><page size='1' unit='GiB'/></hugepages></memoryBacking>"
                 "<numatune><memory placement='auto'/></numatune>")
    assert memory(xml) == holdings.Memory({}, {}, {GIB: 2})
    row = audit.audit(HOST, [(xml, "shut off")]).rows[0]
    assert (row.hugepage_kib, row.hugepages, row.pages) == (GIB, {}, {(None, GIB): 2})
    assert row.to_dict()["pages"] == {f"any:{GIB}": 2}
