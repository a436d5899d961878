"""The hook's hugepage top-up at prepare begin and give-back at release end (vmtune.hoststate.pages).

sysfs files do not behave like the kernel, so ``FakeKernel`` (fixtures/hugepages.py) stands in for
``base.write_file``: a write to ``nr_hugepages`` grows a pool out of a per-pool capacity and shrinks
it by free pages only, recording any attempt to shrink it below what is in use.
"""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
from fixtures.hook import UUID_A, UUID_B, call, snapshot, state
from fixtures.hugepages import FakeKernel, hp_domain, pool

from vmtune.xml import model, xmlsafe
from vmtune.hoststate import pages as hugepages
from vmtune.hoststate.document import Lease, PoolShare
from vmtune.hoststate.kinds import Pool, base, parse_key
from vmtune.roots import Roots

P0, P1, G0 = "0:2048", "1:2048", "0:1048576"


def needs(xml: str, default: int = 2048) -> dict[str, int]:
    return {k.text: n for k, n in hugepages.needs(model.Domain(xmlsafe.parse(xml.encode(), "x")), lambda: default).items()}


@pytest.fixture
def hugepage_kernel(fake_host_tree, monkeypatch):
    proc = fake_host_tree / "proc"
    (proc / "sys" / "vm").mkdir(parents=True)
    (proc / "sys" / "vm" / "compact_memory").write_text("")
    fake = FakeKernel(fake_host_tree / "sys", proc)
    for k in (P0, P1, G0, "1:1048576"):
        fake.pool(k)
    monkeypatch.setattr(base, "write_file", fake.write)
    return fake


def lease_pages(root, uuid: str = UUID_A) -> dict:
    return state(root)["leases"][uuid].get("hugepages", {})


# -- what a domain needs ------------------------------------------------------------------------

def test_needs_whole_memory_on_the_bound_node():
    assert needs(hp_domain(mib=1024)) == {P0: 512}
    assert needs(hp_domain(mib=1025)) == {P0: 513}  # a partial page is a whole page
    assert needs(hp_domain(page="<page size='1' unit='GiB'/>", mib=2048)) == {G0: 2}


def test_needs_default_size_and_split_over_the_nodeset():
    """No <page>: the default hugepage size; a nodeset of two nodes splits the memory evenly."""
    xml = hp_domain(page="", numatune="<numatune><memory mode='strict' nodeset='0-1'/></numatune>")
    assert needs(xml, default=2048) == {P0: 256, P1: 256}
    assert needs(xml, default=1048576) == {G0: 1, "1:1048576": 1}  # 512 MiB on each node: a 1G page each


def test_needs_per_guest_cell_with_memnodes_and_page_nodesets():
    """page nodeset names guest cells: cell 0 takes 1G pages on host node 1, cell 1 2M pages on node 0."""
    cells = ("<cpu><numa><cell id='0' cpus='0' memory='2048' unit='MiB'/>"
             "<cell id='1' cpus='1' memory='512' unit='MiB'/></numa></cpu>")
    numatune = ("<numatune><memory mode='strict' nodeset='0-1'/><memnode cellid='0' mode='strict' nodeset='1'/>"
                "<memnode cellid='1' mode='strict' nodeset='0'/></numatune>")
    page = "<page size='1' unit='GiB' nodeset='0'/><page size='2' unit='MiB' nodeset='1'/>"
    assert needs(hp_domain(mib=2560, page=page, numatune=numatune, cells=cells)) == {"1:1048576": 2, P0: 256}
    # a page without nodeset covers the cells the others do not name
    page = "<page size='1' unit='GiB' nodeset='0'/><page size='2048' unit='KiB'/>"
    assert needs(hp_domain(mib=2560, page=page, numatune=numatune, cells=cells)) == {"1:1048576": 2, P0: 256}
    # a cell no page covers gets ordinary pages
    page = "<page size='1' unit='GiB' nodeset='0'/>"
    assert needs(hp_domain(mib=2560, page=page, numatune=numatune, cells=cells)) == {"1:1048576": 2}


def test_needs_counts_cold_plugged_dimms_in_their_cell():
    """A DIMM on guest cell 1 is backed like cell 1: on cell 1's host node, in cell 1's page size."""
    cells = ("<cpu><numa><cell id='0' cpus='0' memory='512' unit='MiB'/>"
             "<cell id='1' cpus='1' memory='512' unit='MiB'/></numa></cpu>")
    numatune = ("<numatune><memnode cellid='0' mode='strict' nodeset='0'/>"
                "<memnode cellid='1' mode='strict' nodeset='1'/></numatune>")
    dimm = "<memory model='dimm'><target><size unit='MiB'>256</size><node>1</node></target></memory>"
    assert needs(hp_domain(mib=1280, numatune=numatune, cells=cells, devices=dimm)) == {P0: 256, P1: 384}


def test_needs_takes_a_memory_devices_own_page_size_and_nodes():
    """A DIMM with its own <source><pagesize> (and <nodemask>) takes those pages, as libvirt does;
    an nvdimm (a file) takes none; a page size of the base page is ordinary memory."""
    cells = ("<cpu><numa><cell id='0' cpus='0' memory='1024' unit='MiB'/>"
             "<cell id='1' cpus='1' memory='1024' unit='MiB'/></numa></cpu>")
    numatune = ("<numatune><memnode cellid='0' mode='strict' nodeset='0'/>"
                "<memnode cellid='1' mode='strict' nodeset='1'/></numatune>")
    page = "<page size='1' unit='GiB'/>"
    own = ("<memory model='dimm'><source><pagesize unit='KiB'>2048</pagesize>{mask}</source><target>"
           "<size unit='MiB'>512</size><node>1</node></target></memory>")
    nvdimm = ("<memory model='nvdimm'><source><path>/tmp/nv</path></source><target><size unit='MiB'>512</size>"
              "<node>0</node></target></memory>")
    base = own.replace("2048", str(os.sysconf("SC_PAGESIZE") // 1024)).replace("{mask}", "")
    got = needs(hp_domain(mib=2560, page=page, numatune=numatune, cells=cells, devices=own.format(mask="") + nvdimm))
    assert got == {G0: 1, "1:1048576": 1, P1: 256}
    got = needs(hp_domain(mib=2560, page=page, numatune=numatune, cells=cells,
                          devices=own.format(mask="<nodemask>0</nodemask>") + base))
    assert got == {G0: 1, "1:1048576": 1, P0: 256}


def test_needs_nothing_without_hugepages_or_a_node_binding():
    assert needs(hp_domain(backing=False)) == {}
    assert needs(hp_domain(numatune="")) == {}
    assert needs(hp_domain(numatune="<numatune><memory mode='strict' placement='auto'/></numatune>")) == {}


def test_default_size_comes_from_meminfo(fake_host_tree):
    (fake_host_tree / "proc").mkdir()
    (fake_host_tree / "proc" / "meminfo").write_text("MemTotal: 100 kB\nHugepagesize:    1048576 kB\n")
    assert hugepages.default_size(Roots.from_env({}, str(fake_host_tree / "sys"))) == 1048576
    assert Roots.from_env({}, "/sys").proc == "/proc"


# -- top-up and give-back -----------------------------------------------------------------------

def test_topup_by_the_shortfall_and_give_back_exactly(fake_host_tree, hugepage_kernel):
    """80 of 100 pages in use elsewhere, the domain needs 512: +492 after compaction; the lease records
    need and added; after the domain ran and stopped, release gives back those 492: pool as before."""
    hugepage_kernel.pool(P0, nr=100, free=20)
    xml = hp_domain(mib=1024)
    assert call(xml, "vm-a", "prepare", "begin") == 0
    assert hugepage_kernel.compactions == 1
    assert hugepage_kernel.read(P0) == (592, 512)
    assert lease_pages(fake_host_tree) == {P0: {"need": 512, "added": 492}}
    hugepage_kernel.use(P0, 512)
    hugepage_kernel.unuse(P0, 512)
    assert call(xml, "vm-a", "release", "end") == 0
    assert hugepage_kernel.read(P0) == (100, 20)
    assert hugepage_kernel.violations == []
    assert state(fake_host_tree)["leases"] == {}


def test_enough_free_pages_change_nothing(fake_host_tree, hugepage_kernel):
    """Free pages enough: no compaction, no write to the pool; the lease records the need, added 0."""
    hugepage_kernel.pool(P0, nr=600, free=600)
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    assert hugepage_kernel.compactions == 0
    assert hugepage_kernel.read(P0) == (600, 600)
    assert lease_pages(fake_host_tree) == {P0: {"need": 512, "added": 0}}
    assert call(hp_domain(mib=1024), "vm-a", "release", "end") == 0
    assert hugepage_kernel.read(P0) == (600, 600)


def test_kernel_gives_too_few_refuses_and_puts_everything_back(fake_host_tree, hugepage_kernel, capsys):
    """The kernel finds 100 of 512 pages: exit 1, one stderr line naming the pool, the pools lowered
    again, no lease, the host knobs untouched (the top-up comes before the tuning)."""
    hugepage_kernel.pool(P0, nr=0, capacity=100)
    before = snapshot(fake_host_tree / "sys")
    capsys.readouterr()
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 1
    err = capsys.readouterr()
    assert err.out == ""
    lines = err.err.splitlines()
    assert len(lines) == 1, err.err
    assert "vm-a" in lines[0] and "node 0 2048 KiB hugepages" in lines[0] and "100" in lines[0]
    assert snapshot(fake_host_tree / "sys") == before
    assert state(fake_host_tree)["leases"] == {} and state(fake_host_tree)["baseline"] is None
    assert hugepage_kernel.violations == []


def test_a_failed_topup_keeps_the_other_leases(fake_host_tree, hugepage_kernel):
    """A refused start restores the state file as it was: the running domain's lease stays whole."""
    hugepage_kernel.pool(P0, nr=0, capacity=600)
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    hugepage_kernel.use(P0, 512)
    saved = state(fake_host_tree)
    assert call(hp_domain("vm-b", UUID_B, mib=1024, pins="3"), "vm-b", "prepare", "begin") == 1
    assert state(fake_host_tree) == saved
    assert hugepage_kernel.read(P0) == (512, 0)


def test_a_pool_the_host_lacks_refuses_the_start(fake_host_tree, hugepage_kernel, capsys):
    """1G pages on node 2 (no such pool): exit 1 with one line, nothing changed."""
    xml = hp_domain(page="<page size='1' unit='GiB'/>", numatune="<numatune><memory nodeset='2'/></numatune>")
    capsys.readouterr()
    assert call(xml, "vm-a", "prepare", "begin") == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "node 2 1048576 KiB hugepages" in lines[0]
    assert not (fake_host_tree / "state" / "state.json").exists() or state(fake_host_tree)["leases"] == {}


def test_two_domains_starting_together_each_get_their_pages(fake_host_tree, hugepage_kernel):
    """B prepares before A's QEMU has taken its pages: B must not count A's free (promised) pages."""
    hugepage_kernel.pool(P0, nr=0)
    a, b = hp_domain(mib=1024), hp_domain("vm-b", UUID_B, mib=512, pins="3")
    assert call(a, "vm-a", "prepare", "begin") == 0
    assert call(b, "vm-b", "prepare", "begin") == 0
    assert hugepage_kernel.read(P0) == (768, 768)
    hugepage_kernel.use(P0, 512)  # both QEMUs start: both find their pages
    hugepage_kernel.use(P0, 256)
    assert lease_pages(fake_host_tree, UUID_B) == {P0: {"need": 256, "added": 256}}
    hugepage_kernel.unuse(P0, 512)
    assert call(a, "vm-a", "release", "end") == 0
    assert hugepage_kernel.read(P0) == (256, 0)
    hugepage_kernel.unuse(P0, 256)
    assert call(b, "vm-b", "release", "end") == 0
    assert hugepage_kernel.read(P0) == (0, 0)
    assert hugepage_kernel.violations == []


def test_a_running_domain_pages_are_not_counted_as_promised(fake_host_tree, hugepage_kernel):
    """A runs (its 512 pages in use); 100 more pages free: B (100) needs no top-up."""
    hugepage_kernel.pool(P0, nr=612, free=612)
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    hugepage_kernel.use(P0, 512)
    assert call(hp_domain("vm-b", UUID_B, mib=200, pins="3"), "vm-b", "prepare", "begin") == 0
    assert lease_pages(fake_host_tree, UUID_B) == {P0: {"need": 100, "added": 0}}
    assert hugepage_kernel.read(P0) == (612, 100)


def test_give_back_never_takes_pages_in_use(fake_host_tree, hugepage_kernel):
    """Pages the lease added that something else now uses stay: only the free ones go back."""
    hugepage_kernel.pool(P0, nr=0)
    xml = hp_domain(mib=200)
    assert call(xml, "vm-a", "prepare", "begin") == 0  # +100
    hugepage_kernel.use(P0, 60)  # not the domain: someone else took 60 of them
    assert call(xml, "vm-a", "release", "end") == 0
    assert hugepage_kernel.read(P0) == (60, 0)
    assert hugepage_kernel.violations == []


def test_give_back_leaves_what_another_lease_still_waits_for(fake_host_tree):
    """150 pages free, another lease needs 120 and uses none yet: at most 30 can go back."""
    fake = FakeKernel(fake_host_tree / "sys", fake_host_tree / "proc")
    fake.pool(P0, nr=150, free=150)
    waiting = [Lease("other", hugepages={pool(P0): PoolShare(need=120)})]
    assert hugepages.spare_pages(str(fake_host_tree / "sys"), pool(P0), 50, waiting) == (150, 30)
    assert hugepages.spare_pages(str(fake_host_tree / "sys"), pool(P0), 50, []) == (150, 50)
    fake.pool(P0, nr=150, free=40)  # 110 in use: counted as that lease's first
    assert hugepages.spare_pages(str(fake_host_tree / "sys"), pool(P0), 50, waiting) == (150, 30)


def test_reconnect_records_the_need_without_topping_up(fake_host_tree, hugepage_kernel):
    """libvirtd restarted: the running domain's lease comes back with its need, nothing is raised."""
    hugepage_kernel.pool(P0, nr=512, free=0)
    assert call(hp_domain(mib=1024), "vm-a", "reconnect", "begin") == 0
    assert lease_pages(fake_host_tree) == {P0: {"need": 512, "added": 0}}
    assert hugepage_kernel.compactions == 0 and hugepage_kernel.read(P0) == (512, 0)


def test_dry_run_only_logs(fake_host_tree, hugepage_kernel, capsys, monkeypatch):
    monkeypatch.setenv("VMTUNE_DRY_RUN", "1")
    hugepage_kernel.pool(P0, nr=0)
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    assert hugepage_kernel.compactions == 0 and hugepage_kernel.read(P0) == (0, 0)
    assert "would compact memory and raise node 0 2048 KiB hugepages: 0 -> 512" in capsys.readouterr().err


def test_config_off_never_touches_the_pools(fake_host_tree, hugepage_kernel):
    (fake_host_tree / "vmtune.toml").write_text('[hook]\nhugepages = "off"\n')
    hugepage_kernel.pool(P0, nr=0)
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    assert hugepage_kernel.compactions == 0 and hugepage_kernel.read(P0) == (0, 0)


def test_no_compact_memory_file_is_skipped(fake_host_tree, hugepage_kernel):
    (fake_host_tree / "proc" / "sys" / "vm" / "compact_memory").unlink()
    hugepage_kernel.pool(P0, nr=0)
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    assert hugepage_kernel.read(P0) == (512, 512) and hugepage_kernel.compactions == 0


# -- a hook killed half-way through the top-up or the give-back -----------------------------------

def _killed_at(path_suffix: str, after: bool, argv: list[str], xml: str) -> None:
    """Run the hook; die (no cleanup, like SIGKILL) at the first write to ``path_suffix``."""
    real = base.write_file

    def write(root, path, value):
        if path.endswith(path_suffix):
            if after:
                real(root, path, value)
            os._exit(9)
        real(root, path, value)

    base.write_file = write
    from vmtune import hook

    hook.main(argv, xml.encode())
    os._exit(0)


def run_killed(path_suffix: str, after: bool, argv: list[str], xml: str) -> int:
    proc = multiprocessing.get_context("fork").Process(target=_killed_at, args=(path_suffix, after, argv, xml))
    proc.start()
    proc.join(60)
    return proc.exitcode


@pytest.mark.parametrize("after", [True, False], ids=["after-the-write", "before-the-write"])
def test_killed_during_the_topup_then_released(fake_host_tree, hugepage_kernel, after):
    """The journal says what the top-up may have added; the release gives back exactly what the
    kernel gave (nothing when the hook died before writing), never the admin's pages."""
    hugepage_kernel.pool(P0, nr=50, free=50)
    xml = hp_domain(mib=1024)
    assert run_killed("/nr_hugepages", after, ["vm-a", "prepare", "begin", "-"], xml) == 9
    rec = lease_pages(fake_host_tree)[P0]
    assert rec["raising"] == {"from": 50, "to": 512}
    assert hugepage_kernel.read(P0) == ((512, 512) if after else (50, 50))
    assert call(xml, "vm-a", "release", "end", "failed") == 0
    assert hugepage_kernel.read(P0) == (50, 50)
    assert state(fake_host_tree)["leases"] == {}


def test_killed_during_the_give_back_then_released_again(fake_host_tree, hugepage_kernel):
    """Release killed after lowering the pool: the next release settles the journal and does not give
    back the same pages twice."""
    hugepage_kernel.pool(P0, nr=50, free=50)
    xml = hp_domain(mib=1024)
    assert call(xml, "vm-a", "prepare", "begin") == 0
    assert hugepage_kernel.read(P0) == (512, 512)
    assert run_killed("/nr_hugepages", True, ["vm-a", "release", "end", "-"], xml) == 9
    assert hugepage_kernel.read(P0) == (50, 50)
    assert lease_pages(fake_host_tree)[P0]["lowering"] == {"from": 512, "to": 50}
    assert call(xml, "vm-a", "release", "end") == 0
    assert hugepage_kernel.read(P0) == (50, 50)
    assert hugepage_kernel.violations == [] and state(fake_host_tree)["leases"] == {}
    assert json.dumps(state(fake_host_tree)).count("lowering") == 0


def test_a_kernel_without_numa_nodes_is_not_checked(fake_host_tree, capsys):
    """No devices/system/node at all: nothing to read or raise; the start goes ahead (libvirt decides)."""
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    assert "hugepages not checked" in capsys.readouterr().err
    assert lease_pages(fake_host_tree) == {P0: {"need": 512, "added": 0}}
