"""The knob kinds, registered in one table (``KINDS``): everything the host-state engine may change.

======  ===========================================  =========  ================================
kind    what                                         section    module
======  ===========================================  =========  ================================
sysfs   a cpufreq governor or EPP, KSM's ``run``     knob       files.py
cstate  a CPU's idle state ``disable`` flag           knob       files.py
mask    the IRQ default and workqueue masks,         isolation  files.py
        kernel.watchdog_cpumask, each workqueue's
irq     an IRQ's affinity                            isolation  files.py
task    a thread's affinity (thread id + start)      isolation  tasks.py
cgroup  a top-level cgroup v2 ``cpuset.cpus``        isolation  groups.py
unit    a systemd unit's ``AllowedCPUs``             isolation  groups.py
pool    a node's hugepage pool (counted)             pool       files.py
sysctl  kernel.timer_migration, vm.stat_interval     isolation  files.py
irqbalance  the CPUs a running irqbalance bans       isolation  irqbalance.py
exclusive   a cgroup v2 group's                      isolation  partition.py
            ``cpuset.cpus.exclusive``
partition   a vCPU group's ``cpuset.cpus.partition``  isolation  partition.py
======  ===========================================  =========  ================================

Each kind declares itself once: its flags, its section, its ``[hook]`` extras, and ``items`` (what
it lists for a reconcile); ``register`` rejects a flag no code reads.

base.py has what they share: the key, the live item, the one file reader and writer.
"""

from __future__ import annotations

from functools import lru_cache

from . import files, groups, irqbalance, partition, tasks  # noqa: F401 - each registers its kinds
from .base import KINDS, Item, Key, Kind, Listing, extra_options, read_file, write_file
from .files import CState, Cpufreq, CpuMask, Irq, Ksm, Pool, Sysctl, UncoreMin, Workqueue
from .groups import Cgroup, Unit
from .tasks import GONE, Gone, Task


def in_section(section: str) -> list[Kind]:
    """The kinds whose records the state document keeps in ``section``, in the table's order."""
    return [kind for kind in KINDS.values() if kind.section == section]


@lru_cache(maxsize=1 << 14)
def parse_key(section: str, text: str, ident: str = "") -> Key | None:
    """The key the state document names ``text`` in ``section``; None when no kind of it has one.
    (Remembered: a hook call reads each name of the state twice or more, and keys are immutable.)"""
    for kind in in_section(section):
        key = kind.parse_key(text, ident)
        if key is not None:
            return key
    return None


__all__ = ["GONE", "KINDS", "CState", "Listing", "extra_options", "Cgroup", "CpuMask", "Cpufreq", "Gone", "Irq", "Item", "Key", "Kind", "Ksm", "UncoreMin",
           "Pool", "Sysctl", "Task", "Unit", "Workqueue", "in_section", "parse_key", "read_file", "write_file"]
