"""A tiny bootable test guest for TCG: Debian's cloud kernel plus a busybox initramfs.

``kernel_and_initrd()`` returns ``(vmlinuz, initrd)``, built once and cached under CACHE_DIR
(world-readable, so the qemu process can open them). The packages are fetched with
``apt-get download`` and unpacked with ``dpkg-deb``: nothing is installed and no maintainer
script runs. The guest's /init prints, on the serial console::

    VMTUNE-GUEST-UP
    nproc=1
    cpu_model=QEMU Virtual CPU version 2.5+
    ...                  (cpu_flags, mem_total_kib, numa_nodes, clocksource, virtio, disks,
    VMTUNE-GUEST-DONE     nics as "eth0:<rx queues>", vda_io=ok|fail if there is a /dev/vda)

and then powers off. ``parse_console()`` turns those lines into a dict. The virtio drivers
(modules in this kernel) are in the initramfs; the /dev/vda check reads the first 64 KiB with
O_DIRECT and writes the same bytes back. ``vmtune.hold=N`` on the kernel cmdline keeps the guest
up N more seconds before DONE.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from bench import debimage  # the .deb and cpio plumbing the benchmark's guest uses too

CACHE_DIR = Path(os.environ.get("VMTUNE_GUEST_CACHE", "/var/lib/libvirt/images/vmtune-test"))
MARKER = "VMTUNE-GUEST-UP"
DONE = "VMTUNE-GUEST-DONE"
KERNEL_PACKAGE = "linux-image-cloud-amd64"

# Virtio drivers are modules in the cloud kernel; loaded in dependency order.
MODULES = (
    "virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci"
    " virtio_blk failover net_failover virtio_net virtio_balloon"
).split()

INIT = f"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
for m in {" ".join(MODULES)}; do insmod /lib/modules/$m.ko 2>/dev/null; done
echo {MARKER}
echo "nproc=$(nproc)"
echo "cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "mem_total_kib=$(grep '^MemTotal' /proc/meminfo | tr -s ' ' | cut -d' ' -f2)"
echo "numa_nodes=$(cat /sys/devices/system/node/online)"
echo "l3=$(for c in $(ls -d /sys/devices/system/cpu/cpu[0-9]* | sed 's/.*cpu//' | sort -n); do [ "$(cat /sys/devices/system/cpu/cpu$c/online 2>/dev/null || echo 1)" = 1 ] && echo "$(cat /sys/devices/system/cpu/cpu$c/cache/index3/shared_cpu_list 2>/dev/null)"; done | tr '\\n' ';' | sed 's/;$//')"
echo "l3_level=$(cat /sys/devices/system/cpu/cpu0/cache/index3/level 2>/dev/null)"
echo "clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
echo "virtio=$(ls /sys/bus/virtio/devices 2>/dev/null | tr '\\n' ' ')"
echo "disks=$(ls /sys/block | grep -v '^loop\\|^ram' | tr '\\n' ' ')"
echo "nics=$(for n in $(ls /sys/class/net | grep -v '^lo$'); do echo -n "$n:$(ls -d /sys/class/net/$n/queues/rx-* | wc -l) "; done)"
if [ -b /dev/vda ]; then
    io=fail
    dd if=/dev/vda of=/tmp/blk bs=64k count=1 iflag=direct 2>/dev/null \\
        && dd if=/tmp/blk of=/dev/vda bs=64k count=1 oflag=direct conv=fsync 2>/dev/null && io=ok
    echo "vda_io=$io"
fi
hold=$(sed -n 's/.*vmtune.hold=\\([0-9]*\\).*/\\1/p' /proc/cmdline)
[ -n "$hold" ] && sleep "$hold"
echo {DONE}
poweroff -f
"""


def kernel_and_initrd() -> tuple[Path, Path]:
    """Paths of the cached guest kernel and initramfs, building them on first use."""
    kernel = CACHE_DIR / "vmlinuz"
    initrd = CACHE_DIR / f"initrd-{hashlib.sha256(INIT.encode()).hexdigest()[:12]}.gz"
    if kernel.exists() and initrd.exists():
        return kernel, initrd
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    CACHE_DIR.chmod(0o755)
    with open(CACHE_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test sessions build it once
        if not (kernel.exists() and initrd.exists()):
            _build(kernel, initrd)
    return kernel, initrd


def parse_console(text: str) -> dict[str, str]:
    """The key=value lines the guest printed between MARKER and DONE."""
    lines = text.replace("\r", "").split("\n")
    if MARKER not in lines:
        return {}
    out = {}
    for line in lines[lines.index(MARKER) + 1 :]:
        if line == DONE:
            break
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value.strip()
    return out


def _build(kernel: Path, initrd: Path) -> None:
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        work = Path(tmp)
        work.chmod(0o755)  # apt-get download runs as _apt when it can
        image_pkg = debimage.kernel_image_package(KERNEL_PACKAGE)
        debimage.run("apt-get", "download", "-qq", image_pkg, "busybox-static", cwd=work)
        vmlinuz = _extract(work, image_pkg, "./boot/")
        busybox = _extract(work, "busybox-static", "./bin/busybox")
        modules = _extract(work, image_pkg, *(f"*/{m}.ko" for m in MODULES))
        tmp_kernel = work / "vmlinuz"
        shutil.copyfile(next(vmlinuz.glob("boot/vmlinuz-*")), tmp_kernel)
        tmp_initrd = work / "initrd.gz"
        kos = {m: next(modules.rglob(f"{m}.ko")).read_bytes() for m in MODULES}
        tmp_initrd.write_bytes(gzip.compress(_initramfs((busybox / "bin/busybox").read_bytes(), kos)))
        for src, dst in ((tmp_kernel, kernel), (tmp_initrd, initrd)):
            src.chmod(0o644)
            os.replace(src, dst)
    for old in CACHE_DIR.glob("initrd-*.gz"):  # built from an older INIT
        if old != initrd:
            old.unlink()


def _extract(work: Path, package: str, *members: str) -> Path:
    """Unpack members (tar wildcards) of the one downloaded ``package`` into a fresh directory."""
    (deb,) = work.glob(f"{package}_*.deb")
    return debimage.extract(deb, work, *members)


def _initramfs(busybox: bytes, modules: dict[str, bytes]) -> bytes:
    """A cpio (newc) archive: /init, a static busybox, kernel modules and the few nodes needed."""
    return debimage.cpio([
        *debimage.SKELETON,
        ("bin/busybox", 0o100755, busybox, 0),
        *((f"lib/modules/{m}.ko", 0o100644, ko, 0) for m, ko in modules.items()),
        ("init", 0o100755, INIT.encode(), 0),
    ])
