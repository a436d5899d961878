"""The host: its topology and what vmtune reads of it.

    topology.py      Host, Cell, Cpu, L3: the NUMA model, its views and the reserved CPUs
    devices.py       where a PCI device, a disk or a NIC hangs (sysfs, or a table)
    nodedev.py       libvirt's node devices (virsh nodedev-dumpxml) as such a table
    capabilities.py  the loader of libvirt's capabilities XML
    sysfs.py         the sysfs and proc readers (online CPUs, CPU lists, meminfo, cpuinfo,
                     hugepage pools) and the loader of a sysfs tree

``from vmtune.host import Host`` loads the topology on first use, so that the hook, which reads
sysfs through sysfs.py, does not load the model where it needs none.
"""

from __future__ import annotations

from importlib import import_module

__all__ = ["Cell", "Cpu", "Host", "L3"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(".topology", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
