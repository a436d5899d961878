"""A lease's hugepages at prepare: record what it needs, raise the short pools, undo a raise.

The pool arithmetic is in hugepages.py; this is the part of prepare that changes the pools, with
the records in the lease (state.PoolRecord): ``need``, ``added``, and the ``raising`` journal step.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from . import hugepages
from .state import Lease, PoolRecord, Step

log = logging.getLogger("vmtune.hook")


def record_needs(lease: Lease, pages: Mapping[str, int]) -> None:
    """Set each pool's ``need`` from ``pages``; keep what the lease added before (a renewed lease)."""
    old = lease.hugepages
    fresh = {k: PoolRecord(int(pages.get(k, 0)), old[k].added if k in old else 0) for k in sorted(set(old) | set(pages))}
    lease.hugepages = {k: rec for k, rec in fresh.items() if rec.need or rec.added}


def journal(lease: Lease, shorts: Mapping[str, tuple[int, int]]) -> None:
    for k, (nr, short) in shorts.items():
        lease.hugepages[k].raising = Step(nr, nr + short)


def top_up(sysfs: str, lease: Lease, shorts: Mapping[str, tuple[int, int]], others: list[Lease],
           dry_run: bool) -> bool:
    """Raise the short pools; False (pools lowered again, one error line) when still short."""
    if not shorts:
        return True
    if dry_run:
        for k, (nr, short) in shorts.items():
            log.info("dry run: would compact memory and raise %s: %d -> %d", hugepages.describe(k), nr, nr + short)
            lease.hugepages[k].raising = None
        return True
    hugepages.compact(sysfs)
    gained = {k: hugepages.grow(sysfs, k, nr, short) for k, (nr, short) in shorts.items()}
    missing = {k for k, (_, short) in shorts.items() if gained[k] < short}
    if missing:
        for k, got in gained.items():
            if got:
                nr, n = hugepages.plan_shrink(sysfs, k, got, others)
                hugepages.lower(sysfs, k, nr, n)
        what = "; ".join(f"{hugepages.describe(k)}: {lease.hugepages[k].need} needed, the kernel "
                         f"gave {gained[k]} of the {shorts[k][1]} more asked for" for k in sorted(missing))
        log.error("%s: refusing to start: too few free hugepages: %s", lease.name, what)
        return False
    for k, (nr, _) in shorts.items():
        rec = lease.hugepages[k]
        rec.raising = None
        rec.added += gained[k]
        log.info("%s: raised %s: %d -> %d", lease.name, hugepages.describe(k), nr, nr + gained[k])
    return True


def undo(sysfs: str, shorts: Mapping[str, tuple[int, int]], others: list[Lease]) -> None:
    """After an error half-way: lower the pools by what this call raised them."""
    for k, (nr, short) in shorts.items():
        pool = hugepages.read_pool(sysfs, k)
        got = max(0, min(short, pool[0] - nr)) if pool else 0
        if got:
            now, n = hugepages.plan_shrink(sysfs, k, got, others)
            hugepages.lower(sysfs, k, now, n)
