"""Disks: virtio-blk with vdX names, cache='none' io='native'; emptied SCSI controllers go."""

from ..edits import Remove, Warn
from ..errors import Unsupported
from ..model import Controller, Disk
from ..profiles import BootDisk

NATIVE_IO_TYPES = (Disk.TYPE_FILE, "block", "volume")
# Attributes and children that only emulated buses accept (geometry's cyls, heads and secs are
# fine on virtio; its CHS translation mode libvirt takes on the ide bus only).
EMULATED_ONLY_ATTRS = (Disk.removable, Disk.rotation_rate, Disk.geometry_trans)
EMULATED_ONLY_CHILDREN = ("wwn", "vendor", "product")
# How many vdX names a moved disk may get: vda..vdzzz, the 26 + 26**2 + 26**3 names of one to
# three letters. A bound so that the search for a free name always ends; far more names than
# virtio disks a real domain has.
VIRTIO_NAMES = 26 + 26**2 + 26**3
# The warning when a guest's boot disk moves (a Linux initramfs built host-only, dracut's default on
# Fedora and RHEL, has no virtio_blk; an /etc/fstab naming /dev/sda breaks as well).
BOOT_MOVE = ("boot disk {dev} moves from {bus} to virtio: the guest must have virtio_blk in its initramfs "
             "(dracut --add-drivers virtio_blk, or update-initramfs -u) "
             "and name its disks in /etc/fstab by UUID or LABEL, not /dev/{dev}; boot_disk = \"keep\" in a profile "
             "keeps it on {bus}")
# Disk types whose <driver> cache and io vmtune leaves alone.
NO_DRIVER_TYPES = (Disk.TYPE_VHOSTUSER, Disk.TYPE_NVME)


def _letters(i: int) -> str:
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(ord("a") + r) + out
    return out


def boot_disk(dom) -> Disk | None:
    disks = [d for d in dom.disks if d.effective_device == Disk.DEVICE_DISK]
    ordered = [d for d in disks if d.boot_order is not None]
    if ordered:
        return min(ordered, key=lambda d: d.boot_order)
    return disks[0] if disks else None


def kept_boot_disk(ctx, dom) -> Disk | None:
    """The boot disk that keeps its bus: a Windows guest's (unless --force-virtio), or any guest's
    under ``boot_disk = "keep"``."""
    if (dom.is_windows and not ctx.force_virtio) or ctx.profile.boot_disk == BootDisk.KEEP:
        return boot_disk(dom)
    return None


def moving(ctx, dom) -> list[Disk]:
    """The disks this pass moves to virtio."""
    if not ctx.profile.devices_virtio:
        return []
    keep = kept_boot_disk(ctx, dom)
    return [
        d for d in dom.disks
        if d.effective_device == Disk.DEVICE_DISK and d.bus in Disk.REMAP_BUSES
        and (keep is None or d.node is not keep.node)
    ]


def _scsi_users(dom, moved: set) -> dict[int, int]:
    users: dict[int, int] = {}
    for el in list(dom.iter("devices/disk")) + list(dom.iter("devices/hostdev")):
        if el in moved:
            continue
        disk = Disk(el)
        if disk.address_type == Disk.ADDRESS_DRIVE or (el.tag == "disk" and disk.bus == Disk.BUS_SCSI):
            if disk.bus == Disk.BUS_SCSI or el.tag == "hostdev":
                idx = disk.controller or 0
                users[idx] = users.get(idx, 0) + 1
    return users


def run(ctx, dom):
    edits = []
    move = moving(ctx, dom)
    boot = boot_disk(dom)
    if dom.is_windows and not ctx.force_virtio and ctx.profile.devices_virtio:
        if boot is not None and boot.bus in Disk.REMAP_BUSES:
            edits.append(Warn(f"Windows guest: boot disk {boot.dev} stays on {boot.bus} (the guest may lack "
                              "virtio drivers); install them and use --force-virtio"))
    elif boot is not None and any(d.node is boot.node for d in move):
        edits.append(Warn(BOOT_MOVE.format(dev=boot.dev or "?", bus=boot.bus)))
    used = {d.dev for d in dom.disks if d.bus == Disk.BUS_VIRTIO and d.dev}
    names = (f"vd{_letters(i)}" for i in range(VIRTIO_NAMES))
    for disk in move:
        name = next((n for n in names if n not in used), None)
        if name is None:
            raise Unsupported(f"no virtio disk name is left for {disk.dev or 'a disk'}: vda to vdzzz "
                              f"({VIRTIO_NAMES} names) are all taken")
        used.add(name)
        why = f"{disk.bus} is emulated; virtio-blk is the paravirtual disk"
        if boot is not None and disk.node is boot.node:
            why = f"the boot disk too: {why} (the warning says what the guest needs)"
        edits.append(Disk.bus.edit(disk, Disk.BUS_VIRTIO, why))
        edits.append(Disk.dev.edit(disk, name, f"virtio disks are named vdX ({disk.dev} -> {name})"))
        for prop in EMULATED_ONLY_ATTRS:
            edits.append(prop.edit(disk, None, f"'{prop.attr}' is for emulated buses only"))
        for child in EMULATED_ONLY_CHILDREN:
            el = disk.node.find(child)
            if el is not None:
                edits.append(Remove(el, f"<{child}> is for emulated buses only"))
        addr = disk.node.find("address")
        if addr is not None:
            edits.append(Remove(addr, f"the {disk.bus} address does not apply on virtio; libvirt assigns a PCI slot"))
    edits.extend(_driver(ctx, dom))
    scsi = [ctl for ctl in dom.controllers if ctl.type == Controller.TYPE_SCSI]
    if not scsi or not move:
        return edits  # no SCSI controller to empty (most domains: nothing more to read)
    users = _scsi_users(dom, {d.node for d in move})
    before = _scsi_users(dom, set())
    for ctl in scsi:
        idx = ctl.index or 0
        if before.get(idx) and not users.get(idx):
            edits.append(Remove(ctl.node, f"SCSI controller {idx} has no devices left after the move to virtio"))
    return edits


def _driver(ctx, dom):
    """cache and io on every disk QEMU serves; a driver that gets either is named qemu's."""
    p = ctx.profile
    edits = []
    for disk in dom.disks:
        if disk.effective_device != Disk.DEVICE_DISK or disk.type in NO_DRIVER_TYPES:
            continue
        driver = []
        if p.devices_disk_cache != "keep":
            driver.append(Disk.cache.edit(disk, p.devices_disk_cache, "cache='none' bypasses the host page cache: "
                                          "no double caching, no host flush stalls"))
        cache = p.devices_disk_cache if p.devices_disk_cache != "keep" else disk.cache
        if p.devices_disk_io != "keep" and (disk.type or Disk.TYPE_FILE) in NATIVE_IO_TYPES:
            if p.devices_disk_io != Disk.IO_NATIVE or cache in (Disk.CACHE_NONE, Disk.CACHE_DIRECTSYNC):
                driver.append(Disk.io.edit(disk, p.devices_disk_io,
                                           "Linux native AIO submits guest I/O without a userspace thread pool"))
        if driver and disk.driver_name is None:
            driver.append(Disk.driver_name.edit(disk, Disk.DRIVER_NAME_QEMU, "the disk driver is qemu's"))
        edits += driver
    return edits
