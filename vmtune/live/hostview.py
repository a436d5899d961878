"""The host as libvirt sees it: ``getCapabilities()``, with the free hugepages of each node and
its node devices (``listAllDevices``: where each PCI device, NIC and disk hangs).

libvirt's capabilities list each node's hugepage *pool*; ``getFreePages`` says how many of those
pages are free now, which is what placement and the audit want (the pages of running domains are
already taken). When libvirt runs on this machine, ``isolcpus`` comes from
``/sys/devices/system/cpu/isolated`` (capabilities do not carry it), so the reserved CPUs are the
same as the rewriter's on this host.
"""

from __future__ import annotations

import dataclasses

from ..host import Host
from ..host import sysfs as files
from . import connect

ISOLATED = "/sys/devices/system/cpu/isolated"


def free_pages(conn, host: Host) -> dict[int, dict[int, int]]:
    """Node -> {page size KiB: free pages}, for the hugepage sizes the capabilities list."""
    lv = connect.libvirt()
    out: dict[int, dict[int, int]] = {}
    for cell in host.cells:
        sizes = sorted(cell.pages)
        if not sizes:
            continue
        try:
            found = conn.getFreePages(sizes, cell.id, 1)
        except lv.libvirtError:
            continue  # not supported here: keep the pool counts of the capabilities
        counts = (found or {}).get(cell.id, {})
        out[cell.id] = {int(size): int(count) for size, count in counts.items() if int(size) in cell.pages}
    return out


def devices(conn, nodes: frozenset[int]):
    """libvirt's node devices as a devices Table (host/nodedev.py): where each PCI device, NIC and
    disk hangs; none when libvirt will not list them."""
    from ..host import nodedev
    from ..host.devices import NO_DEVICES

    lv = connect.libvirt()
    try:
        found = [nodedev.parse(d.XMLDesc(0), f"node device {d.name()}") for d in conn.listAllDevices(0)]
    except (lv.libvirtError, AttributeError):
        return NO_DEVICES
    return nodedev.table(found, nodes)


def host(conn) -> Host:
    """The Host of ``conn``: topology from the capabilities, free hugepages, local isolcpus, and
    where its devices hang (libvirt's node devices)."""
    caps = Host.from_capabilities(conn.getCapabilities())
    free = free_pages(conn, caps)
    cells = tuple(dataclasses.replace(c, pages={**c.pages, **free.get(c.id, {})}) for c in caps.cells)
    isolated = files.cpu_list(files.text(ISOLATED)) & frozenset(caps.cpus) if connect.is_local(conn) else frozenset()
    found = dataclasses.replace(caps, cells=cells, isolated=isolated)
    return found.with_devices(devices(conn, frozenset(found.node_ids)))
