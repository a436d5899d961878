"""IOThreads: at least one per guest NUMA cell, and every virtio disk assigned to one; where the
host runs libvirt 10.0 and QEMU 9.0 or later, each virtio disk's queues go over several of them.

One iothread per disk is the conservative form, and the default offline. libvirt 10.0 with QEMU 9.0
maps one disk's queues over several iothreads (``<driver queues='N'><iothreads><iothread id=…/>``:
the queues go round-robin over them, the form libvirt's documentation prefers), which takes the
single iothread's ceiling off a disk that many vCPUs use. The versions come from the live
connection (``Host.libvirt_version``, ``qemu_version``), else from the config's ``libvirt_version``
and ``qemu_version``. A disk gets ``min(vCPUs, the CPUs its iothreads may run on)`` iothreads, and
``queues`` one per vCPU where it names none; fewer than 2: one iothread, as before. A disk the hand
gave an iothread or a mapping keeps it.
"""

from ..xml.edits import E, Put, clone
from ..xml.model import Disk, Domain, fill_iothread_ids

QUEUE_MAPPING = {"libvirt": (10, 0), "qemu": (9, 0)}  # a disk's queues over several iothreads, since


def _disks(dom) -> list[Disk]:
    return [d for d in dom.disks if d.bus == Disk.BUS_VIRTIO and d.type != Disk.TYPE_VHOSTUSER]


def versions(ctx) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """The libvirt and QEMU the output is for: the live host's, else the config's (None: unknown)."""
    host, config = ctx.host, ctx.config
    return (host.libvirt_version or config.libvirt_version, host.qemu_version or config.qemu_version)


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def per_disk(ctx, dom) -> tuple[int, str]:
    """How many iothreads each disk's queues go over (1: one iothread per disk), and why."""
    lib, qemu = versions(ctx)
    if lib is None or qemu is None:
        return 1, "libvirt's and QEMU's versions are not known (offline: libvirt_version and qemu_version in the config)"
    if lib < QUEUE_MAPPING["libvirt"] or qemu < QUEUE_MAPPING["qemu"]:
        return 1, (f"libvirt {_dotted(lib)} with QEMU {_dotted(qemu)}: a disk's queues go over several iothreads "
                   "from libvirt 10.0 with QEMU 9.0")
    helpers = ctx.placement.emulator or ctx.placement.cpuset or frozenset()
    n = min(dom.vcpus, len(helpers))
    why = (f"{n} iothreads: one per vCPU ({dom.vcpus}) up to the {len(helpers)} host CPUs its iothreads run on "
           f"(libvirt {_dotted(lib)}, QEMU {_dotted(qemu)} map a disk's queues over them)")
    return (n, why) if n >= 2 else (1, why)


def wanted(ctx, dom, n: int, disks: list[Disk]) -> int:
    """How many iothreads the domain should have (0: leave them alone), where a disk not yet served
    would get its queues over ``n`` of them (``per_disk``); ``disks``: its virtio disks (``_disks``)."""
    if not ctx.profile.devices_iothreads or not disks:
        return 0
    mapped = n if any(not d.iothread_queues and d.iothread is None for d in disks) else 1
    return max(1, len(ctx.placement.cells), mapped, dom.iothreads,
               len(dom.iothread_ids()) if dom.iothreadids is not None else 0)


def run(ctx, dom):
    n, why = per_disk(ctx, dom)
    disks = _disks(dom)
    count = wanted(ctx, dom, n, disks)
    if not count:
        return []
    edits = [Domain.iothreads.edit(dom, count, "a dedicated iothread per guest NUMA cell takes disk I/O off the "
                                   "vCPU and main loop threads" if n < 2 else f"disk I/O off the vCPU and main loop "
                                   f"threads: {why}")]
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
    for i, disk in enumerate(disks):
        thread = disk.iothread
        if disk.iothread_queues or (thread is not None and thread in ids):  # served already
            continue
        if n >= 2 and thread is None:
            edits.append(_mapped(disk, [ids[(i * n + k) % len(ids)] for k in range(n)], dom.vcpus, why))
            continue
        edits.append(Disk.iothread.edit(disk, ids[i % len(ids)],
                                        "serve this disk from an iothread (every disk gets one; none is left idle)"))
        if disk.driver_name is None:
            edits.append(Disk.driver_name.edit(disk, Disk.DRIVER_NAME_QEMU, "the disk driver is qemu's"))
    return edits


def _mapped(disk: Disk, ids: list[int], vcpus: int, why: str) -> Put:
    """The disk's ``<driver>`` with its queues over the iothreads ``ids`` (round-robin, libvirt's
    preferred form): its attributes and children kept, ``queues`` one per vCPU where it has none."""
    old = disk.driver
    driver = E("driver", {"name": Disk.DRIVER_NAME_QEMU}) if old is None else clone(old)
    if driver.get("name") is None:
        driver.set("name", Disk.DRIVER_NAME_QEMU)
    if driver.get("queues") is None:
        driver.set("queues", str(vcpus))
    driver.append(E("iothreads", None, *(E("iothread", {"id": i}) for i in sorted(ids))))
    return Put(disk.node, driver, f"this disk's queues go over iothreads {', '.join(map(str, sorted(ids)))}: {why}")
