"""Hugepages for a latency domain: the top-up at ``prepare begin`` and the give-back at ``release end``.

What a domain needs (``needs``): ``<memoryBacking><hugepages>``, as libvirt reads it. A ``<page>``'s
``nodeset`` names *guest* NUMA cells (libvirt's meaning; vmtune's rewriter writes it that way): each
cell takes the size of the first page whose nodeset holds it, else of the page without a nodeset,
else (no page at all) the default hugepage size; a cell no page covers gets ordinary pages. The
host nodes come from ``<numatune>``: a cell's ``<memnode nodeset>``, else ``<memory nodeset>``,
split evenly over the nodes as claims.py does. Without guest cells the whole ``<memory>`` is one
cell 0. A DIMM or virtio-mem device counts in its target cell, with its own ``<source><pagesize>``
and ``<nodemask>`` when it has them (libvirt's order). Memory that ``numatune`` does not bind (no
nodeset, ``placement='auto'``) is left to the kernel: it is neither counted nor topped up.

Pools are ``devices/system/node/nodeN/hugepages/hugepages-<size>kB/{nr,free}_hugepages`` under
the sysfs root, keyed ``"N:size"`` (size in KiB, as claims.py prints them).

What is free for a new domain: ``free_hugepages`` less what other leases were promised and do not
use yet. A lease records its ``need`` per pool; pages in use on a pool count against the other
leases' needs first (a running domain holds its pages, a domain still starting holds a promise), so
``pending = max(0, their needs - in use)``. Pages that domains vmtune does not manage use can hide
a pending promise; then the later of two starts fails in QEMU, as it would without the hook.

The top-up writes ``1`` to ``vm/compact_memory`` under the proc root first (``$VMTUNE_PROCFS``,
else ``proc`` beside the sysfs root, so ``/proc`` for ``/sys``; skipped when the file is absent, as
in a test tree), raises ``nr_hugepages`` by the shortfall and reads back what the kernel gave. The
give-back lowers ``nr_hugepages`` by at most what the lease added, and never by more than is free
less what the other leases still wait for: pages in use are never taken away.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Callable, Iterable

from .. import cpuset, units
from ..host import sysfs as files
from ..model import MemoryDevice
from . import hoststate
from .bounds import NODE_LIMIT
from .state import Lease

log = logging.getLogger("vmtune.hook")

NODE_DIR = "devices/system/node"
COMPACT = "sys/vm/compact_memory"  # under the proc root
DEFAULT_SIZE_KIB = 2048


class Shortage(Exception):
    """The domain cannot have its hugepages here (one line, for the error log)."""


def procfs_root(sysfs: str) -> str:
    """``$VMTUNE_PROCFS``, else ``proc`` beside the sysfs root (``/proc`` for ``/sys``)."""
    return os.environ.get("VMTUNE_PROCFS") or os.path.join(os.path.dirname(sysfs.rstrip("/")) or "/", "proc")


def key(node: int, size: int) -> str:
    return f"{node}:{size}"


def split_key(k: str) -> tuple[int, int]:
    node, _, size = k.partition(":")
    return int(node), int(size)


def pool_file(k: str, leaf: str) -> str:
    node, size = split_key(k)
    return f"{NODE_DIR}/node{node}/hugepages/hugepages-{size}kB/{leaf}"


def describe(k: str) -> str:
    node, size = split_key(k)
    return f"node {node} {size} KiB hugepages"


def default_size(sysfs: str) -> int:
    """The kernel's default hugepage size: ``Hugepagesize`` in meminfo, else the smallest size."""
    found = files.default_page_kib(sysfs, procfs_root(sysfs))
    return DEFAULT_SIZE_KIB if found is None else found


def _split(kib: int, nodes: list[int]) -> dict[int, int]:
    share, rest = divmod(kib, len(nodes))
    return {n: share + (rest if i == 0 else 0) for i, n in enumerate(nodes)}


def needs(dom, default: Callable[[], int]) -> dict[str, int]:
    """Pages per pool (``"node:size"``) that ``dom`` (a model.Domain) takes from bound host nodes."""
    hp = dom.find("memoryBacking/hugepages")
    if hp is None:
        return {}
    pages = []
    for page in hp.findall("page"):
        size = units.to_kib(page.get("size"), page.get("unit")) if page.get("size") else None
        pages.append((size, cpuset.parse(page.get("nodeset"), NODE_LIMIT) if page.get("nodeset") else None))

    def size_of(cell: int) -> int | None:
        if not pages:
            return default()
        for size, cells in pages:
            if cells is not None and cell in cells:
                return size or default()
        for size, cells in pages:
            if cells is None:
                return size or default()
        return None

    memory = dom.find("numatune/memory")
    bound = sorted(cpuset.parse(memory.get("nodeset"), NODE_LIMIT)) if memory is not None and memory.get("nodeset") else []
    memnodes = {e.get("cellid"): sorted(cpuset.parse(e.get("nodeset"), NODE_LIMIT))
                for e in dom.iter("numatune/memnode") if e.get("nodeset")}
    out: dict[str, int] = defaultdict(int)
    for cell, kib, own, mask in _backends(dom):
        size = own or size_of(cell)
        nodes = sorted(cpuset.parse(mask, NODE_LIMIT)) if mask else memnodes.get(str(cell)) or bound
        if not size or size == _base_page() or not nodes or kib <= 0:
            continue  # ordinary pages (libvirt reads a page size of the base page so), or not bound
        for node, part in _split(kib, nodes).items():
            if part:
                out[key(node, size)] += -(-part // size)
    return dict(out)


def _base_page() -> int:
    try:
        return os.sysconf("SC_PAGESIZE") // 1024
    except (ValueError, OSError):
        return 4


def _backends(dom) -> list[tuple[int, int, int | None, str | None]]:
    """(guest cell, KiB, own page size, own host nodes) of each memory backend: each cell (without
    cells, the whole memory as cell 0), then each DIMM and virtio-mem device, with its own
    ``<source><pagesize>`` and ``<nodemask>`` when it has them, as libvirt reads them. nvdimm,
    virtio-pmem and sgx-epc devices are backed by a file or EPC, never by hugepages."""
    out = [(c.id, c.memory_kib, None, None) for c in dom.cells] or [(0, dom.memory_kib, None, None)]
    if dom.cells:
        for dev in dom.memory_devices:
            if dev.model in MemoryDevice.RAM_MODELS:
                out.append((dev.target_node or 0, dev.size_kib, dev.pagesize_kib, dev.nodemask_text))
    return out


def read_pool(sysfs: str, k: str) -> tuple[int, int] | None:
    """(nr_hugepages, free_hugepages) of a pool, or None when the pool does not exist."""
    try:
        nr = int(hoststate.read(sysfs, pool_file(k, "nr_hugepages")) or "")
        free = int(hoststate.read(sysfs, pool_file(k, "free_hugepages")) or "")
    except (ValueError, OSError):
        return None
    return nr, free


def pending(k: str, nr: int, free: int, others: Iterable[Lease]) -> int:
    """Pages of pool ``k`` promised to ``others`` (leases) and not in use yet."""
    promised = sum(lease.hugepages[k].need for lease in others if k in lease.hugepages)
    return max(0, promised - (nr - free))


def shortfalls(sysfs: str, need: dict[str, int], others: list[Lease]) -> dict[str, tuple[int, int]]:
    """Pool -> (nr_hugepages now, pages to add) for the pools where ``need`` exceeds what is free.

    Raises Shortage when a pool the domain needs does not exist on this host. A sysfs without
    ``devices/system/node`` (a kernel without NUMA) is not checked: libvirt decides.
    """
    out = {}
    if need and not os.path.isdir(os.path.join(sysfs, NODE_DIR)):
        log.warning("no %s under %s (a kernel without NUMA): hugepages not checked", NODE_DIR, sysfs)
        return out
    for k, want in sorted(need.items()):
        pool = read_pool(sysfs, k)
        if pool is None:
            raise Shortage(f"it needs {want} {describe(k)}, which this host does not have")
        nr, free = pool
        short = want - (free - pending(k, nr, free, others))
        if short > 0:
            out[k] = (nr, short)
    return out


def compact(sysfs: str, dry_run: bool = False) -> None:
    """Ask the kernel to compact memory (makes room for huge pages); skipped when absent."""
    root = procfs_root(sysfs)
    if not os.path.exists(os.path.join(root, COMPACT)):
        return
    if dry_run:
        log.info("dry run: would write 1 to %s", os.path.join(root, COMPACT))
        return
    try:
        hoststate.write(root, COMPACT, "1")
    except OSError as exc:
        log.warning("cannot compact memory: %s", exc.strerror or exc)


def grow(sysfs: str, k: str, nr: int, count: int) -> int:
    """Raise pool ``k`` from ``nr`` by ``count`` pages; return how many the kernel gave."""
    try:
        hoststate.write(sysfs, pool_file(k, "nr_hugepages"), str(nr + count))
    except OSError as exc:
        log.warning("cannot raise %s: %s", describe(k), exc.strerror or exc)
    now = read_pool(sysfs, k)
    return max(0, min(count, now[0] - nr)) if now else 0


def plan_shrink(sysfs: str, k: str, count: int, others: list[Lease]) -> tuple[int, int]:
    """(nr_hugepages now, pages to take off): up to ``count`` free pages ``others`` do not wait for."""
    pool = read_pool(sysfs, k)
    if pool is None or count <= 0:
        return 0, 0
    nr, free = pool
    return nr, max(0, min(count, free - pending(k, nr, free, others), nr))


def lower(sysfs: str, k: str, nr: int, count: int) -> int:
    """Lower pool ``k`` from ``nr`` by ``count``; return how many pages the kernel let go."""
    try:
        hoststate.write(sysfs, pool_file(k, "nr_hugepages"), str(nr - count))
    except OSError as exc:
        log.warning("cannot lower %s: %s", describe(k), exc.strerror or exc)
    now = read_pool(sysfs, k)
    return max(0, min(count, nr - now[0])) if now else 0


def settle(sysfs: str, lease: Lease) -> bool:
    """Make exact what a killed hook left in ``lease``: a top-up journal (``raising``) becomes
    ``added``, a give-back journal (``lowering``) is taken off ``added``. True if there was any."""
    changed = False
    for k, rec in lease.hugepages.items():
        for name in ("raising", "lowering"):
            journal = getattr(rec, name)
            if journal is None:
                continue
            setattr(rec, name, None)
            changed = True
            pool = read_pool(sysfs, k)
            asked, got = journal.to - journal.start, (pool[0] - journal.start if pool else 0)  # + raising, - lowering
            moved = min(abs(asked), abs(got)) if asked * got > 0 else 0
            rec.added = max(0, rec.added + (moved if name == "raising" else -moved))
            log.warning("%s: an interrupted change of %s moved %d page(s); recorded", lease.name, describe(k), moved)
    return changed


def give_back_plan(sysfs: str, lease: Lease, others: list[Lease]) -> dict[str, tuple[int, int]]:
    """Pool -> (nr_hugepages now, pages to give back) for what ``lease`` added (release end)."""
    out = {}
    for k, rec in sorted(lease.hugepages.items()):
        nr, n = plan_shrink(sysfs, k, rec.added, others)
        if n > 0:
            out[k] = (nr, n)
    return out
