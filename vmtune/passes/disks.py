"""Disks: virtio-blk with vdX names, cache='none' io='native'; emptied SCSI controllers go.

Which disks move depends on the guest (vmtune/xml/guestos.py), for a disk on a bus the guest has no
driver for vanishes from it, and a boot disk that does cannot boot:

- the boot disk moves under ``boot_disk = "auto"`` (the default) when the guest is known to have
  virtio drivers of its own (Linux, the BSDs), under ``"virtio"`` for any guest but one known to
  lack them (Windows, DOS), and under ``--force-virtio`` for every guest; ``"keep"`` keeps it;
- the other disks move unless the guest is known to lack virtio drivers; then only with
  ``--force-virtio``, or when a virtio-blk disk in the domain says the guest has the driver;
- a disk that a direct kernel boot's ``<cmdline>`` names by ``root=/dev/sdX`` keeps its bus: its
  name would change under the kernel's feet.

Every disk that moves, and every one that stays against the profile, is named in a warning.
"""

import re
from dataclasses import dataclass

from ..xml import guestos
from ._xml import firsts
from ..xml.edits import Remove, Warn
from ..errors import Unsupported
from ..xml.model import Controller, Disk
from ..profiles import BootDisk

NATIVE_IO_TYPES = (Disk.TYPE_FILE, "block", "volume")
# Attributes and children that only emulated buses accept (geometry's cyls, heads and secs are
# fine on virtio; its CHS translation mode libvirt takes on the ide bus only).
EMULATED_ONLY_ATTRS = (Disk.removable, Disk.rotation_rate, Disk.geometry_trans)
EMULATED_ONLY_CHILDREN = ("wwn", "vendor", "product")
# the children those attributes are on (each field one child step below the disk: ``target``, ``geometry``)
EMULATED_ONLY_HOLDERS = tuple(dict.fromkeys(prop.elem_path for prop in EMULATED_ONLY_ATTRS))
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
# root=/dev/sda1, root=/dev/hdb: the disk a direct kernel boot's command line names
CMDLINE_ROOT = re.compile(r"(?:^|\s)root=/dev/((?:sd|hd|xvd)[a-z]+)\d*(?=\s|$)")


def _letters(i: int) -> str:
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(ord("a") + r) + out
    return out


def _kinds(dom) -> list[tuple[Disk, str, str | None]]:
    """Each disk with its device and its bus, read once for the pass's every question."""
    return [(d, d.effective_device, d.bus) for d in dom.disks]


def boot_disk(kinds: list) -> Disk | None:
    """The disk the domain boots from, of its disks' ``_kinds``."""
    disks = [d for d, device, _ in kinds if device == Disk.DEVICE_DISK]
    ordered = [d for d in disks if d.boot_order is not None]
    if ordered:
        return min(ordered, key=lambda d: d.boot_order)
    return disks[0] if disks else None


def virtio_disk(kinds: list) -> Disk | None:
    """A virtio-blk disk the domain has already, of its disks' ``_kinds``: the guest has the
    virtio-blk driver."""
    return next((d for d, device, bus in kinds if device == Disk.DEVICE_DISK and bus == Disk.BUS_VIRTIO), None)


def cmdline_root(dom) -> str | None:
    """The disk (``sda``) that a direct kernel boot's ``<cmdline>`` names as its root, if any."""
    found = CMDLINE_ROOT.search(dom.os_cmdline or "") if dom.kernel is not None else None
    return found.group(1) if found else None


@dataclass(frozen=True)
class BusMoves:
    """The disks this pass moves to virtio, and the warnings that name what moves and what stays."""

    disks: tuple[Disk, ...] = ()
    warnings: tuple[str, ...] = ()


def _boot_moves(ctx, guest) -> bool:
    boot = ctx.profile.boot_disk
    if boot == BootDisk.KEEP:
        return False
    if ctx.force_virtio or guest.virtio is True:
        return True
    return guest.virtio is None and boot == BootDisk.VIRTIO


def plan(ctx, dom, boot: Disk | None, kinds: list) -> BusMoves:
    """Which disks move to virtio and why the others stay (the module docstring says the rules);
    ``boot``: the domain's boot disk (``boot_disk``), ``kinds``: ``_kinds(dom)``."""
    emulated = [d for d, device, bus in kinds if device == Disk.DEVICE_DISK and bus in Disk.REMAP_BUSES]
    if not ctx.profile.devices_virtio or not emulated:
        return BusMoves()
    guest = guestos.of(ctx, dom)
    known = virtio_disk(kinds)
    others_move = ctx.force_virtio or guest.virtio is not False or known is not None
    root = cmdline_root(dom)
    moves, stays, warnings = [], [], []
    for disk in emulated:
        is_boot = boot is not None and disk.node is boot.node
        if root and disk.dev == root:
            warnings.append(f"<cmdline> says root=/dev/{root}: disk {root} stays on {disk.bus}, for on virtio the guest "
                            "names it /dev/vdX and the kernel would not find its root; root=UUID=... or LABEL=... in "
                            "<cmdline> lets it move")
        elif is_boot and not _boot_moves(ctx, guest):
            if ctx.profile.boot_disk == BootDisk.KEEP:
                continue  # the profile's own choice
            if guest.virtio is not False:
                warnings.append(f"guest OS {guest.describe()}: boot disk {disk.dev} stays on {disk.bus}, for a guest "
                                "without virtio-blk in its boot image cannot boot from virtio; boot_disk = \"virtio\" in "
                                "a profile, or --force-virtio, moves it, and a libosinfo id in <metadata> "
                                "(virt-install --osinfo) tells vmtune the OS")
            elif known is not None and others_move:
                warnings.append(f"{guest.name} guest ({guest.source}): boot disk {disk.dev} stays on {disk.bus}: "
                                f"its virtio disk {known.dev} shows the virtio-blk driver is installed, but the guest "
                                "boots from virtio only where that driver starts at boot (else INACCESSIBLE_BOOT_DEVICE); "
                                "--force-virtio moves it")
            else:
                stays.append(f"{disk.dev} ({disk.bus}, the boot disk)")
        elif not is_boot and not others_move:
            stays.append(f"{disk.dev} ({disk.bus})")
        else:
            moves.append(disk)
    if stays:
        many = len(stays) > 1
        warnings.append(f"{guest.name} guest ({guest.source}): disk{'s' if many else ''} {', '.join(stays)} "
                        f"keep{'' if many else 's'} {'their buses' if many else 'its bus'}: the guest may lack virtio "
                        "drivers, and a disk whose bus has no driver vanishes from it (a boot disk: "
                        f"INACCESSIBLE_BOOT_DEVICE); install them{' (virtio-win)' if guest.windows else ''} "
                        "and use --force-virtio")
    return BusMoves(tuple(moves), tuple(warnings))


def _moved_warning(ctx, dom, moved: list[tuple[str, str, str]], kinds: list) -> str:
    """The warning that names each disk but the boot disk that moves (the boot disk has its own)."""
    guest = guestos.of(ctx, dom)
    many = len(moved) > 1
    head = (f"disk{'s' if many else ''} {', '.join(f'{old} ({bus} -> {new})' for old, bus, new in moved)} "
            f"move{'' if many else 's'} to virtio: ")
    if guest.virtio is False:
        known = virtio_disk(kinds)
        return head + ("--force-virtio says the guest has virtio drivers" if ctx.force_virtio or known is None else
                       f"the guest has the virtio-blk driver (its virtio disk {known.dev} says so)")
    them = "them" if many else "it"
    return head + (f"the guest names {them} anew; mount {them} by UUID or LABEL, not by "
                   f"{'their old /dev names' if many else '/dev/' + moved[0][0]}")


def _scsi_users(dom, moved: set, kinds: list) -> tuple[dict[int, int], dict[int, int]]:
    """The devices on each SCSI controller (by index): all of them, and those but the ``moved``
    (``kinds``: ``_kinds(dom)``, whose buses are the disks'). A disk is on one when it is on the
    scsi bus, a hostdev when it has a drive address: only a hostdev's address is read."""
    every: dict[int, int] = {}
    users: dict[int, int] = {}
    hostdevs = [Disk(h.node) for h in dom.hostdevs]  # read as disks: an address
    on = [d for d, _, bus in kinds if bus == Disk.BUS_SCSI]
    on += [h for h in hostdevs if h.address_type == Disk.ADDRESS_DRIVE]
    for disk in on:
        idx = disk.controller or 0
        every[idx] = every.get(idx, 0) + 1
        if disk.node not in moved:
            users[idx] = users.get(idx, 0) + 1
    return every, users


def run(ctx, dom):
    edits = []
    kinds = _kinds(dom)
    boot = boot_disk(kinds)
    moves = plan(ctx, dom, boot, kinds)
    move = list(moves.disks)
    edits += [Warn(w) for w in moves.warnings]
    if boot is not None and any(d.node is boot.node for d in move):
        edits.append(Warn(BOOT_MOVE.format(dev=boot.dev or "?", bus=boot.bus)))
    used = {dev for d, _, bus in kinds if bus == Disk.BUS_VIRTIO and (dev := d.dev)}
    names = (f"vd{_letters(i)}" for i in range(VIRTIO_NAMES))
    moved = []
    for disk in move:
        dev, bus = disk.dev, disk.bus  # (read once: the edits below change neither before they apply)
        name = next((n for n in names if n not in used), None)
        if name is None:
            raise Unsupported(f"no virtio disk name is left for {dev or 'a disk'}: vda to vdzzz "
                              f"({VIRTIO_NAMES} names) are all taken")
        used.add(name)
        why = f"{bus} is emulated; virtio-blk is the paravirtual disk"
        if boot is not None and disk.node is boot.node:
            why = f"the boot disk too: {why} (the warning says what the guest needs)"
        else:
            moved.append((dev or "?", bus, name))
        edits.append(Disk.bus.edit(disk, Disk.BUS_VIRTIO, why))
        edits.append(Disk.dev.edit(disk, name, f"virtio disks are named vdX ({dev} -> {name})"))
        held = firsts(disk.node, EMULATED_ONLY_CHILDREN + ("address",) + EMULATED_ONLY_HOLDERS)
        for prop in EMULATED_ONLY_ATTRS:  # ``prop.raw``, of the children held above
            holder = held.get(prop.elem_path)
            if holder is not None and holder.get(prop.attr) is not None:  # (most disks have none: no edit then)
                edits.append(prop.edit(disk, None, f"'{prop.attr}' is for emulated buses only"))
        for child in EMULATED_ONLY_CHILDREN:
            el = held.get(child)
            if el is not None:
                edits.append(Remove(el, f"<{child}> is for emulated buses only"))
        addr = held.get("address")
        if addr is not None:
            edits.append(Remove(addr, f"the {bus} address does not apply on virtio; libvirt assigns a PCI slot"))
    if moved:
        edits.append(Warn(_moved_warning(ctx, dom, moved, kinds)))
    edits.extend(_driver(ctx, kinds))
    if not move:
        return edits  # no disk moved, no SCSI controller emptied (most domains: no controller read)
    scsi = [ctl for ctl in dom.controllers if ctl.type == Controller.TYPE_SCSI]
    if not scsi:
        return edits  # no SCSI controller to empty
    before, users = _scsi_users(dom, {d.node for d in move}, kinds)
    for ctl in scsi:
        idx = ctl.index or 0
        if before.get(idx) and not users.get(idx):
            edits.append(Remove(ctl.node, f"SCSI controller {idx} has no devices left after the move to virtio"))
    return edits


def _rbd(disk: Disk) -> bool:
    """A Ceph RBD disk: its cache mode is librbd's own cache (writeback, as Nova sets it on purpose),
    not the host's page cache, and it stays as it is."""
    return disk.type == Disk.TYPE_NETWORK and disk.source_protocol == Disk.PROTOCOL_RBD


def _driver(ctx, kinds: list):
    """cache and io on every disk QEMU serves (``kinds``: ``_kinds(dom)``); a driver that gets
    either is named qemu's."""
    p = ctx.profile
    edits = []
    for disk, device, _ in kinds:
        if device != Disk.DEVICE_DISK:
            continue
        kind = disk.type
        if kind in NO_DRIVER_TYPES:
            continue
        driver = []
        if p.devices_disk_cache != "keep" and not (kind == Disk.TYPE_NETWORK and _rbd(disk)):
            driver.append(Disk.cache.edit(disk, p.devices_disk_cache, "cache='none' bypasses the host page cache: "
                                          "no double caching, no host flush stalls"))
        cache = p.devices_disk_cache if p.devices_disk_cache != "keep" else disk.cache
        if p.devices_disk_io != "keep" and (kind or Disk.TYPE_FILE) in NATIVE_IO_TYPES:
            if p.devices_disk_io != Disk.IO_NATIVE or cache in (Disk.CACHE_NONE, Disk.CACHE_DIRECTSYNC):
                driver.append(Disk.io.edit(disk, p.devices_disk_io,
                                           "Linux native AIO submits guest I/O without a userspace thread pool"))
        if driver and disk.driver_name is None:
            driver.append(Disk.driver_name.edit(disk, Disk.DRIVER_NAME_QEMU, "the disk driver is qemu's"))
        edits += driver
    return edits
