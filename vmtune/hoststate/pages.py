"""Hugepages for a latency domain: the top-up at ``prepare begin`` and the give-back at ``release end``.

What a domain needs (``needs``): the hugepages it takes from each host node's pool, by the rules
of holdings.py (libvirt's: a page size per guest cell, DIMM and virtio-mem device; the host nodes of its
memnode, ``<memory>`` or the device's own nodemask, in every numatune mode). Memory that
``numatune`` does not bind to nodes (no nodeset, ``placement='auto'``) is left to the kernel: it is
neither counted nor topped up.

Pools are the ``pool`` kind (kinds/host_sysfs.py): ``nr_hugepages`` and ``free_hugepages`` under
``devices/system/node/nodeN/hugepages/hugepages-<size>kB``, keyed ``Pool(node, size)`` (size in
KiB; ``N:S`` in the state, as claims.py prints them), written through the kind. The kind is
counted: a lease records what it needs and what its prepare added (``PoolShare``), never a value
to write back, so a pool's journal step is settled by counting what moved (``settle_steps``), not
by the engine's record rules: pages in use are never taken back.

What is free for a new domain: ``free_hugepages`` less what other leases were promised and do not
use yet. A lease records its ``need`` per pool; pages in use on a pool count against the other
leases' needs first (a running domain holds its pages, a domain still starting holds a promise), so
``pending = max(0, their needs - in use)``. Pages that domains vmtune does not manage use can hide
a pending promise; then the later of two starts fails in QEMU, as it would without the hook.

The top-up writes ``1`` to ``sys/vm/compact_memory`` under the proc root first (skipped when the
file is absent, as in a test tree), journals each raise (a ``raising`` step), raises
``nr_hugepages`` by the shortfall and reads back what the kernel gave. The give-back lowers
``nr_hugepages`` by at most what the lease added, and never by more than is free less what the
other leases still wait for: pages in use are never taken away.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping

from .. import cpuset
from ..placement import holdings
from ..host import sysfs as host_sysfs
from ..host.sysfs import NODE_DIR
from .document import Lease, PoolShare, pool_step
from .kinds import KINDS, Item, Pool, base, read_file

log = logging.getLogger("vmtune.hoststate")

COMPACT = "sys/vm/compact_memory"  # under the proc root
DEFAULT_SIZE_KIB = 2048


class Shortage(Exception):
    """The domain cannot have its hugepages here (one line, for the error log)."""


def default_size(roots) -> int:
    """The kernel's default hugepage size: ``Hugepagesize`` in meminfo, else the smallest size."""
    found = host_sysfs.default_page_kib(roots.sysfs, roots.proc)
    return DEFAULT_SIZE_KIB if found is None else found


def needs(dom, default: Callable[[], int]) -> dict[Pool, int]:
    """Pages per pool that ``dom`` (a model.Domain) takes from host nodes its numatune names
    (holdings.memory: the one rule, the rewriter's ledger uses it too)."""
    pages = holdings.memory(dom, default, cpuset.MAX_NUMA_NODES).hugepages
    return {Pool(node, size): count for (node, size), count in pages.items()}


def read_pool(sysfs: str, k: Pool) -> tuple[int, int] | None:
    """(nr_hugepages, free_hugepages) of a pool, or None when the pool does not exist."""
    try:
        nr = int(read_file(sysfs, k.file("nr_hugepages")) or "")
        free = int(read_file(sysfs, k.file("free_hugepages")) or "")
    except (ValueError, OSError):
        return None
    return nr, free


def pending(k: Pool, nr: int, free: int, others: Iterable[Lease]) -> int:
    """Pages of pool ``k`` promised to ``others`` (leases) and not in use yet."""
    promised = sum(lease.hugepages[k].need for lease in others if k in lease.hugepages)
    return max(0, promised - (nr - free))


def shortfalls(sysfs: str, need: Mapping[Pool, int], others: list[Lease]) -> dict[Pool, tuple[int, int]]:
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
            raise Shortage(f"it needs {want} {k.describe()}, which this host does not have")
        nr, free = pool
        short = want - (free - pending(k, nr, free, others))
        if short > 0:
            out[k] = (nr, short)
    return out


def compact(roots, dry_run: bool = False) -> None:
    """Ask the kernel to compact memory (makes room for huge pages); skipped when absent."""
    if not os.path.exists(os.path.join(roots.proc, COMPACT)):
        return
    if dry_run:
        log.info("dry run: would write 1 to %s", os.path.join(roots.proc, COMPACT))
        return
    try:
        base.write_file(roots.proc, COMPACT, "1")
    except OSError as exc:
        log.warning("cannot compact memory: %s", exc.strerror or exc)


def _set(sysfs: str, k: Pool, nr: int, what: str) -> tuple[int, int] | None:
    try:
        KINDS["pool"].write(Item(k, "", k.describe(), sysfs, k.file()), str(nr))
    except OSError as exc:
        log.warning("cannot %s %s: %s", what, k.describe(), exc.strerror or exc)
    return read_pool(sysfs, k)


def grow(sysfs: str, k: Pool, nr: int, count: int) -> int:
    """Raise pool ``k`` from ``nr`` by ``count`` pages; return how many the kernel gave."""
    now = _set(sysfs, k, nr + count, "raise")
    return max(0, min(count, now[0] - nr)) if now else 0


def spare_pages(sysfs: str, k: Pool, count: int, others: list[Lease]) -> tuple[int, int]:
    """(nr_hugepages now, pages to take off): up to ``count`` free pages ``others`` do not wait for."""
    pool = read_pool(sysfs, k)
    if pool is None or count <= 0:
        return 0, 0
    nr, free = pool
    return nr, max(0, min(count, free - pending(k, nr, free, others), nr))


def lower(sysfs: str, k: Pool, nr: int, count: int) -> int:
    """Lower pool ``k`` from ``nr`` by ``count``; return how many pages the kernel let go."""
    now = _set(sysfs, k, nr - count, "lower")
    return max(0, min(count, nr - now[0])) if now else 0


def settle_steps(sysfs: str, lease: Lease) -> bool:
    """Make exact what a killed hook left in ``lease``: a top-up's journal step (a raise) becomes
    ``added``, a give-back's (a lowering) is taken off ``added``. True if there was any."""
    changed = False
    for k, share in lease.hugepages.items():
        for step in share.steps:
            changed = True
            pool = read_pool(sysfs, k)
            start = int(step.before)
            asked, got = int(step.after) - start, (pool[0] - start if pool else 0)  # + raising, - lowering
            moved = min(abs(asked), abs(got)) if asked * got > 0 else 0
            share.added = max(0, share.added + (moved if asked > 0 else -moved))
            log.warning("%s: an interrupted change of %s moved %d page(s); recorded", lease.name, k.describe(),
                        moved)
        share.steps = []
    return changed


def to_give_back(sysfs: str, lease: Lease, others: list[Lease]) -> dict[Pool, tuple[int, int]]:
    """Pool -> (nr_hugepages now, pages to give back) for what ``lease`` added (release end)."""
    out = {}
    for k, share in sorted(lease.hugepages.items()):
        nr, n = spare_pages(sysfs, k, share.added, others)
        if n > 0:
            out[k] = (nr, n)
    return out


# -- the top-up, at prepare -------------------------------------------------------------------------

def record_needs(lease: Lease, pages: Mapping[Pool, int]) -> None:
    """Set each pool's ``need`` from ``pages``; keep what the lease added before (a renewed lease)."""
    old = lease.hugepages
    fresh = {k: PoolShare(int(pages.get(k, 0)), old[k].added if k in old else 0) for k in sorted(set(old) | set(pages))}
    lease.hugepages = {k: share for k, share in fresh.items() if share.need or share.added}


def journal(lease: Lease, shorts: Mapping[Pool, tuple[int, int]]) -> None:
    for k, (nr, short) in shorts.items():
        lease.hugepages[k].steps = [pool_step(k, nr, nr + short)]


def top_up(roots, lease: Lease, shorts: Mapping[Pool, tuple[int, int]], others: list[Lease], dry_run: bool) -> bool:
    """Raise the short pools; False (pools lowered again, one error line) when still short."""
    if not shorts:
        return True
    if dry_run:
        for k, (nr, short) in shorts.items():
            log.info("dry run: would compact memory and raise %s: %d -> %d", k.describe(), nr, nr + short)
            lease.hugepages[k].steps = []
        return True
    compact(roots)
    gained = {k: grow(roots.sysfs, k, nr, short) for k, (nr, short) in shorts.items()}
    missing = {k for k, (_, short) in shorts.items() if gained[k] < short}
    if missing:
        for k, got in gained.items():
            if got:
                nr, n = spare_pages(roots.sysfs, k, got, others)
                lower(roots.sysfs, k, nr, n)
        what = "; ".join(f"{k.describe()}: {lease.hugepages[k].need} needed, the kernel "
                         f"gave {gained[k]} of the {shorts[k][1]} more asked for" for k in sorted(missing))
        log.error("%s: refusing to start: too few free hugepages: %s", lease.name, what)
        return False
    for k, (nr, _) in shorts.items():
        share = lease.hugepages[k]
        share.steps = []
        share.added += gained[k]
        log.info("%s: raised %s: %d -> %d", lease.name, k.describe(), nr, nr + gained[k])
    return True


def undo(sysfs: str, shorts: Mapping[Pool, tuple[int, int]], others: list[Lease]) -> None:
    """After an error half-way: lower the pools by what this call raised them."""
    for k, (nr, short) in shorts.items():
        pool = read_pool(sysfs, k)
        got = max(0, min(short, pool[0] - nr)) if pool else 0
        if got:
            now, n = spare_pages(sysfs, k, got, others)
            lower(sysfs, k, now, n)
