"""The hook's hugepage top-up at prepare begin and give-back at release end (vmtune.hoststate.pages).

sysfs files do not behave like the kernel, so ``FakeKernel`` stands in for ``base.write_file``: a
write to ``nr_hugepages`` grows a pool out of a per-pool capacity (the memory the kernel can still
turn into huge pages) and shrinks it by free pages only, recording any attempt to shrink it below
what is in use. ``use``/``unuse`` are QEMU taking and freeing the pages.
"""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
from test_hook import UUID_A, UUID_B, call, env, snapshot, state  # noqa: F401 - env is a fixture

from vmtune import model, xmlsafe
from vmtune.hoststate import pages as hugepages
from vmtune.hoststate.document import Lease, PoolShare
from vmtune.hoststate.kinds import Pool, base, parse_key
from vmtune.roots import Roots

TAG = '<metadata><vmtune:tune xmlns:vmtune="https://vmtune.dev/xmlns/1" profile="latency"/></metadata>'
PAGE_2M = "<page size='2048' unit='KiB'/>"
NODE0 = "<numatune><memory mode='strict' nodeset='0'/></numatune>"
P0, P1, G0 = "0:2048", "1:2048", "0:1048576"


def hp_domain(name: str = "vm-a", uuid: str = UUID_A, mib: int = 1024, page: str = PAGE_2M,
              numatune: str = NODE0, cells: str = "", pins: str = "2", backing: bool = True,
              devices: str = "") -> str:
    hugepage_xml = f"<memoryBacking><hugepages>{page}</hugepages></memoryBacking>" if backing else ""
    return (f"<domain type='kvm'><name>{name}</name><uuid>{uuid}</uuid>{TAG}<memory unit='MiB'>{mib}</memory>"
            f"{hugepage_xml}<vcpu>2</vcpu><cputune><vcpupin vcpu='0' cpuset='{pins}'/></cputune>"
            f"{numatune}{cells}<devices>{devices}</devices></domain>")


def needs(xml: str, default: int = 2048) -> dict[str, int]:
    return {k.text: n for k, n in hugepages.needs(model.Domain(xmlsafe.parse(xml.encode(), "x")), lambda: default).items()}


def pool(k: str) -> Pool:
    """The typed key of the pool the state names ``k`` (``node:size``)."""
    return parse_key("pool", k)


class FakeKernel:
    def __init__(self, sysfs, proc):
        self.sysfs, self.proc = str(sysfs), str(proc)
        self.capacity: dict[str, int] = {}
        self.violations: list[str] = []
        self.compactions = 0
        self.real = base.write_file

    def pool(self, k: str, nr: int = 0, free: int | None = None, capacity: int = 100000) -> None:
        for leaf, value in (("nr_hugepages", nr), ("free_hugepages", nr if free is None else free)):
            path = os.path.join(self.sysfs, pool(k).file(leaf))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write(f"{value}\n")
        self.capacity[k] = capacity

    def read(self, k: str) -> tuple[int, int]:
        return hugepages.read_pool(self.sysfs, pool(k))

    def _set(self, k: str, nr: int, free: int) -> None:
        self.real(self.sysfs, pool(k).file("nr_hugepages"), f"{nr}\n")
        self.real(self.sysfs, pool(k).file("free_hugepages"), f"{free}\n")

    def write(self, root: str, path: str, value: str) -> None:
        if root == self.proc and path == hugepages.COMPACT:
            self.compactions += 1
        if root == self.sysfs and path.endswith("/nr_hugepages"):
            k = next(k for k in self.capacity if pool(k).file("nr_hugepages") == path)
            nr, free = self.read(k)
            new = int(value)
            if new >= nr:
                got = min(new - nr, self.capacity[k])
                self.capacity[k] -= got
                self._set(k, nr + got, free + got)
            else:
                if nr - new > free:
                    self.violations.append(f"{k}: {nr} -> {new} with only {free} free")
                drop = min(nr - new, free)
                self.capacity[k] += drop
                self._set(k, nr - drop, free - drop)
            return
        self.real(root, path, value)

    def use(self, k: str, n: int) -> None:
        nr, free = self.read(k)
        assert free >= n, f"QEMU cannot get {n} pages of {k}: {free} free"
        self._set(k, nr, free - n)

    def unuse(self, k: str, n: int) -> None:
        nr, free = self.read(k)
        self._set(k, nr, free + n)


@pytest.fixture
def kernel(env, monkeypatch):  # noqa: F811
    proc = env / "proc"
    (proc / "sys" / "vm").mkdir(parents=True)
    (proc / "sys" / "vm" / "compact_memory").write_text("")
    fake = FakeKernel(env / "sys", proc)
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


def test_default_size_comes_from_meminfo(env):  # noqa: F811
    (env / "proc").mkdir()
    (env / "proc" / "meminfo").write_text("MemTotal: 100 kB\nHugepagesize:    1048576 kB\n")
    assert hugepages.default_size(Roots.from_env({}, str(env / "sys"))) == 1048576
    assert Roots.from_env({}, "/sys").proc == "/proc"


# -- top-up and give-back -----------------------------------------------------------------------

def test_topup_by_the_shortfall_and_give_back_exactly(env, kernel):  # noqa: F811
    """80 of 100 pages in use elsewhere, the domain needs 512: +492 after compaction; the lease records
    need and added; after the domain ran and stopped, release gives back those 492: pool as before."""
    kernel.pool(P0, nr=100, free=20)
    xml = hp_domain(mib=1024)
    assert call(xml, "vm-a", "prepare", "begin") == 0
    assert kernel.compactions == 1
    assert kernel.read(P0) == (592, 512)
    assert lease_pages(env) == {P0: {"need": 512, "added": 492}}
    kernel.use(P0, 512)
    kernel.unuse(P0, 512)
    assert call(xml, "vm-a", "release", "end") == 0
    assert kernel.read(P0) == (100, 20)
    assert kernel.violations == []
    assert state(env)["leases"] == {}


def test_enough_free_pages_change_nothing(env, kernel):  # noqa: F811
    """Free pages enough: no compaction, no write to the pool; the lease records the need, added 0."""
    kernel.pool(P0, nr=600, free=600)
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    assert kernel.compactions == 0
    assert kernel.read(P0) == (600, 600)
    assert lease_pages(env) == {P0: {"need": 512, "added": 0}}
    assert call(hp_domain(mib=1024), "vm-a", "release", "end") == 0
    assert kernel.read(P0) == (600, 600)


def test_kernel_gives_too_few_refuses_and_puts_everything_back(env, kernel, capsys):  # noqa: F811
    """The kernel finds 100 of 512 pages: exit 1, one stderr line naming the pool, the pools lowered
    again, no lease, the host knobs untouched (the top-up comes before the tuning)."""
    kernel.pool(P0, nr=0, capacity=100)
    before = snapshot(env / "sys")
    capsys.readouterr()
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 1
    err = capsys.readouterr()
    assert err.out == ""
    lines = err.err.splitlines()
    assert len(lines) == 1, err.err
    assert "vm-a" in lines[0] and "node 0 2048 KiB hugepages" in lines[0] and "100" in lines[0]
    assert snapshot(env / "sys") == before
    assert state(env)["leases"] == {} and state(env)["baseline"] is None
    assert kernel.violations == []


def test_a_failed_topup_keeps_the_other_leases(env, kernel):  # noqa: F811
    """A refused start restores the state file as it was: the running domain's lease stays whole."""
    kernel.pool(P0, nr=0, capacity=600)
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    kernel.use(P0, 512)
    saved = state(env)
    assert call(hp_domain("vm-b", UUID_B, mib=1024, pins="3"), "vm-b", "prepare", "begin") == 1
    assert state(env) == saved
    assert kernel.read(P0) == (512, 0)


def test_a_pool_the_host_lacks_refuses_the_start(env, kernel, capsys):  # noqa: F811
    """1G pages on node 2 (no such pool): exit 1 with one line, nothing changed."""
    xml = hp_domain(page="<page size='1' unit='GiB'/>", numatune="<numatune><memory nodeset='2'/></numatune>")
    capsys.readouterr()
    assert call(xml, "vm-a", "prepare", "begin") == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "node 2 1048576 KiB hugepages" in lines[0]
    assert not (env / "state" / "state.json").exists() or state(env)["leases"] == {}


def test_two_domains_starting_together_each_get_their_pages(env, kernel):  # noqa: F811
    """B prepares before A's QEMU has taken its pages: B must not count A's free (promised) pages."""
    kernel.pool(P0, nr=0)
    a, b = hp_domain(mib=1024), hp_domain("vm-b", UUID_B, mib=512, pins="3")
    assert call(a, "vm-a", "prepare", "begin") == 0
    assert call(b, "vm-b", "prepare", "begin") == 0
    assert kernel.read(P0) == (768, 768)
    kernel.use(P0, 512)  # both QEMUs start: both find their pages
    kernel.use(P0, 256)
    assert lease_pages(env, UUID_B) == {P0: {"need": 256, "added": 256}}
    kernel.unuse(P0, 512)
    assert call(a, "vm-a", "release", "end") == 0
    assert kernel.read(P0) == (256, 0)
    kernel.unuse(P0, 256)
    assert call(b, "vm-b", "release", "end") == 0
    assert kernel.read(P0) == (0, 0)
    assert kernel.violations == []


def test_a_running_domain_pages_are_not_counted_as_promised(env, kernel):  # noqa: F811
    """A runs (its 512 pages in use); 100 more pages free: B (100) needs no top-up."""
    kernel.pool(P0, nr=612, free=612)
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    kernel.use(P0, 512)
    assert call(hp_domain("vm-b", UUID_B, mib=200, pins="3"), "vm-b", "prepare", "begin") == 0
    assert lease_pages(env, UUID_B) == {P0: {"need": 100, "added": 0}}
    assert kernel.read(P0) == (612, 100)


def test_give_back_never_takes_pages_in_use(env, kernel):  # noqa: F811
    """Pages the lease added that something else now uses stay: only the free ones go back."""
    kernel.pool(P0, nr=0)
    xml = hp_domain(mib=200)
    assert call(xml, "vm-a", "prepare", "begin") == 0  # +100
    kernel.use(P0, 60)  # not the domain: someone else took 60 of them
    assert call(xml, "vm-a", "release", "end") == 0
    assert kernel.read(P0) == (60, 0)
    assert kernel.violations == []


def test_give_back_leaves_what_another_lease_still_waits_for(env):  # noqa: F811
    """150 pages free, another lease needs 120 and uses none yet: at most 30 can go back."""
    fake = FakeKernel(env / "sys", env / "proc")
    fake.pool(P0, nr=150, free=150)
    waiting = [Lease("other", hugepages={pool(P0): PoolShare(need=120)})]
    assert hugepages.spare_pages(str(env / "sys"), pool(P0), 50, waiting) == (150, 30)
    assert hugepages.spare_pages(str(env / "sys"), pool(P0), 50, []) == (150, 50)
    fake.pool(P0, nr=150, free=40)  # 110 in use: counted as that lease's first
    assert hugepages.spare_pages(str(env / "sys"), pool(P0), 50, waiting) == (150, 30)


def test_reconnect_records_the_need_without_topping_up(env, kernel):  # noqa: F811
    """libvirtd restarted: the running domain's lease comes back with its need, nothing is raised."""
    kernel.pool(P0, nr=512, free=0)
    assert call(hp_domain(mib=1024), "vm-a", "reconnect", "begin") == 0
    assert lease_pages(env) == {P0: {"need": 512, "added": 0}}
    assert kernel.compactions == 0 and kernel.read(P0) == (512, 0)


def test_dry_run_only_logs(env, kernel, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setenv("VMTUNE_DRY_RUN", "1")
    kernel.pool(P0, nr=0)
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    assert kernel.compactions == 0 and kernel.read(P0) == (0, 0)
    assert "would compact memory and raise node 0 2048 KiB hugepages: 0 -> 512" in capsys.readouterr().err


def test_config_off_never_touches_the_pools(env, kernel):  # noqa: F811
    (env / "vmtune.toml").write_text('[hook]\nhugepages = "off"\n')
    kernel.pool(P0, nr=0)
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    assert kernel.compactions == 0 and kernel.read(P0) == (0, 0)


def test_no_compact_memory_file_is_skipped(env, kernel):  # noqa: F811
    (env / "proc" / "sys" / "vm" / "compact_memory").unlink()
    kernel.pool(P0, nr=0)
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    assert kernel.read(P0) == (512, 512) and kernel.compactions == 0


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
def test_killed_during_the_topup_then_released(env, kernel, after):  # noqa: F811
    """The journal says what the top-up may have added; the release gives back exactly what the
    kernel gave (nothing when the hook died before writing), never the admin's pages."""
    kernel.pool(P0, nr=50, free=50)
    xml = hp_domain(mib=1024)
    assert run_killed("/nr_hugepages", after, ["vm-a", "prepare", "begin", "-"], xml) == 9
    rec = lease_pages(env)[P0]
    assert rec["raising"] == {"from": 50, "to": 512}
    assert kernel.read(P0) == ((512, 512) if after else (50, 50))
    assert call(xml, "vm-a", "release", "end", "failed") == 0
    assert kernel.read(P0) == (50, 50)
    assert state(env)["leases"] == {}


def test_killed_during_the_give_back_then_released_again(env, kernel):  # noqa: F811
    """Release killed after lowering the pool: the next release settles the journal and does not give
    back the same pages twice."""
    kernel.pool(P0, nr=50, free=50)
    xml = hp_domain(mib=1024)
    assert call(xml, "vm-a", "prepare", "begin") == 0
    assert kernel.read(P0) == (512, 512)
    assert run_killed("/nr_hugepages", True, ["vm-a", "release", "end", "-"], xml) == 9
    assert kernel.read(P0) == (50, 50)
    assert lease_pages(env)[P0]["lowering"] == {"from": 512, "to": 50}
    assert call(xml, "vm-a", "release", "end") == 0
    assert kernel.read(P0) == (50, 50)
    assert kernel.violations == [] and state(env)["leases"] == {}
    assert json.dumps(state(env)).count("lowering") == 0


def test_a_kernel_without_numa_nodes_is_not_checked(env, capsys):  # noqa: F811
    """No devices/system/node at all: nothing to read or raise; the start goes ahead (libvirt decides)."""
    assert call(hp_domain(mib=1024), "vm-a", "prepare", "begin") == 0
    assert "hugepages not checked" in capsys.readouterr().err
    assert lease_pages(env) == {P0: {"need": 512, "added": 0}}
