"""Hugepages for a latency domain: the top-up at ``prepare begin`` and the give-back at ``release end``.

What a domain needs (``needs``): the hugepages it takes from each host node's pool, by the rules
of facts.py (libvirt's: a page size per guest cell, DIMM and virtio-mem device; the host nodes of its
memnode, ``<memory>`` or the device's own nodemask, in every numatune mode). Memory that
``numatune`` does not bind to nodes (no nodeset, ``placement='auto'``) is left to the kernel: it is
neither counted nor topped up.

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
from collections.abc import Callable, Iterable

from .. import facts
from ..host import sysfs as files
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


def needs(dom, default: Callable[[], int]) -> dict[str, int]:
    """Pages per pool (``"node:size"``) that ``dom`` (a model.Domain) takes from host nodes its
    numatune names (facts.memory: the one rule, the rewriter's ledger uses it too)."""
    pages = facts.memory(dom, default, NODE_LIMIT).hugepages
    return {key(node, size): count for (node, size), count in pages.items()}


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
