"""What a live map reads besides libvirt: the hugepage pools' sizes from sysfs, the hook's state, and
what each CPU the hook holds runs at now (governor, EPP, frequency floor, idle states).

The state is read as the doctor reads it (vmtune/doctor/hookstate.py): with the hook's own reader,
never locked or written; whether a lease's domain still runs is judged as the hook judges it
(alive.py).
"""

from __future__ import annotations

import os
import time
from collections import Counter

from ..host import sysfs as host_sysfs
from ..hoststate import alive, power
from ..hoststate.document import Damaged
from ..hoststate.statedir import peek
from .build import HookView, LeaseView


def page_totals(sysfs: str) -> dict[tuple[int, int], int]:
    """(node, page size KiB) -> pages in the pool (``nr_hugepages``), per node; a kernel without
    NUMA has its pools under ``kernel/mm/hugepages``, node 0's."""
    node_dir = os.path.join(sysfs, host_sysfs.NODE_DIR)
    if not os.path.isdir(node_dir):
        return {(0, size): n for size, n in host_sysfs.pools(os.path.join(sysfs, host_sysfs.POOLS_DIR), "nr_hugepages").items()}
    out = {}
    for name in os.listdir(node_dir):
        if name.startswith("node") and name[4:].isdigit():
            pools = host_sysfs.pools(os.path.join(node_dir, name, "hugepages"), "nr_hugepages")
            out.update(((int(name[4:]), size), n) for size, n in pools.items())
    return out


def hook_view(roots) -> HookView | None:
    """The hook's leases, the CPUs it isolates and what it moved off them; None when the hook has
    no state here (it has not run, or every lease is gone)."""
    state = peek(roots.state, roots.sysfs, owners=roots.root == "/")
    if state is None or isinstance(state, (str, Damaged)):
        return None if state is None else HookView(problem=str(state))
    now = time.time()  # QEMUs are looked up in this machine's /proc, as the hook looks them up
    leases = tuple(LeaseView(x.name, x.profile or None, x.cpus, x.dedicated,
                             alive.why_stale(roots.libvirt, alive.PROC, key, x.name, x.since, now, x.qemu) is not None)
                   for key, x in sorted(state.leases.items(), key=lambda kv: kv[1].name))
    held = tuple(power.held(roots.sysfs, state.leases))
    iso = state.isolation
    if iso is None:
        return HookView(leases, power=held)
    return HookView(leases, iso.cpus, dict(Counter(r.key.kind for r in iso.records.values())), power=held)
