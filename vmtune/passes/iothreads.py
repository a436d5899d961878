"""IOThreads: at least one per guest NUMA cell, and every virtio disk assigned to one."""

from ..xml.edits import E, Put, clone
from ..xml.model import Disk, Domain, fill_iothread_ids


def _valid(disk: Disk, ids: list[int]) -> bool:
    return disk.iothread_queues or (disk.iothread is not None and disk.iothread in ids)


def wanted(ctx, dom) -> int:
    """How many iothreads the domain should have (0: leave them alone)."""
    disks = [d for d in dom.disks if d.bus == Disk.BUS_VIRTIO and d.type != Disk.TYPE_VHOSTUSER]
    if not ctx.profile.devices_iothreads or not disks:
        return 0
    return max(1, len(ctx.placement.cells), dom.iothreads, len(dom.iothread_ids()) if dom.iothreadids is not None else 0)


def run(ctx, dom):
    count = wanted(ctx, dom)
    if not count:
        return []
    edits = [Domain.iothreads.edit(dom, count, "a dedicated iothread per guest NUMA cell takes disk I/O off the "
                                   "vCPU and main loop threads")]
    listed = dom.iothreadids
    given = dom.listed_iothread_ids()
    ids = fill_iothread_ids(given, count)
    if listed is not None and len(set(given)) < count:
        new = E("iothreadids")
        for old in listed:
            new.append(clone(old))  # iothreads, their children and any comment or PI among them
        for added in (i for i in ids if i not in given):
            new.append(E("iothread", {"id": added}))
        edits.append(Put(dom.node, new, f"iothreadids lists all {count} iothreads: the ids libvirt "
                                        "fills in (the lowest unused), written out"))
    virtio = [d for d in dom.disks if d.bus == Disk.BUS_VIRTIO and d.type != Disk.TYPE_VHOSTUSER]
    for i, disk in enumerate(virtio):
        if _valid(disk, ids):
            continue
        edits.append(Disk.iothread.edit(disk, ids[i % len(ids)],
                                        "serve this disk from an iothread (every disk gets one; none is left idle)"))
        if disk.driver_name is None:
            edits.append(Disk.driver_name.edit(disk, Disk.DRIVER_NAME_QEMU, "the disk driver is qemu's"))
    return edits
