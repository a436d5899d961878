"""A tiny bootable test guest for TCG: Debian's cloud kernel plus a busybox initramfs.

``kernel_and_initrd()`` returns ``(vmlinuz, initrd)``, built once and cached under CACHE_DIR
(world-readable, so the qemu process can open them). The packages are fetched with
``apt-get download`` and unpacked with ``dpkg-deb``: nothing is installed and no maintainer
script runs. The guest's /init prints, on the serial console::

    VMTUNE-GUEST-UP
    nproc=1
    cpu_model=QEMU Virtual CPU version 2.5+
    ...key=value lines...
    VMTUNE-GUEST-DONE

and then powers off. ``parse_console()`` turns those lines into a dict.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CACHE_DIR = Path(os.environ.get("VMTUNE_GUEST_CACHE", "/var/lib/libvirt/images/vmtune-test"))
MARKER = "VMTUNE-GUEST-UP"
DONE = "VMTUNE-GUEST-DONE"
KERNEL_PACKAGE = "linux-image-cloud-amd64"

INIT = f"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
echo {MARKER}
echo "nproc=$(nproc)"
echo "cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "mem_total_kib=$(grep '^MemTotal' /proc/meminfo | tr -s ' ' | cut -d' ' -f2)"
echo "numa_nodes=$(cat /sys/devices/system/node/online 2>/dev/null)"
echo "clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
echo "hypervisor=$(cat /sys/hypervisor/type 2>/dev/null)$(dmesg | grep -m1 -o 'Hypervisor detected: .*')"
echo "virtio=$(ls /sys/bus/virtio/devices 2>/dev/null | tr '\\n' ' ')"
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
        image_pkg = _kernel_image_package()
        _apt_download(work, image_pkg, "busybox-static")
        vmlinuz = _extract(work, image_pkg, "./boot/")
        busybox = _extract(work, "busybox-static", "./bin/busybox")
        tmp_kernel = work / "vmlinuz"
        shutil.copyfile(next(vmlinuz.glob("boot/vmlinuz-*")), tmp_kernel)
        tmp_initrd = work / "initrd.gz"
        tmp_initrd.write_bytes(gzip.compress(_initramfs((busybox / "bin/busybox").read_bytes())))
        for src, dst in ((tmp_kernel, kernel), (tmp_initrd, initrd)):
            src.chmod(0o644)
            os.replace(src, dst)


def _run(*cmd: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _kernel_image_package() -> str:
    """The versioned linux-image-* package the cloud kernel metapackage depends on."""
    try:
        deps = _run("apt-cache", "depends", KERNEL_PACKAGE)
    except RuntimeError:
        _run("apt-get", "update", "-qq")  # fresh machine without package lists
        deps = _run("apt-cache", "depends", KERNEL_PACKAGE)
    for line in deps.splitlines():
        kind, _, name = line.strip().partition(": ")
        if kind == "Depends" and name.startswith("linux-image-"):
            return name
    raise RuntimeError(f"cannot find the kernel image package behind {KERNEL_PACKAGE}:\n{deps}")


def _apt_download(dest: Path, *packages: str) -> None:
    _run("apt-get", "download", "-qq", *packages, cwd=dest)


def _extract(work: Path, package: str, member: str) -> Path:
    """Unpack one member (file or directory) of the downloaded package into work/package/."""
    (deb,) = work.glob(f"{package}_*.deb")
    dest = work / package
    dest.mkdir()
    tar = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest), member], stdin=tar.stdout, check=True)
    if tar.wait():
        raise RuntimeError(f"dpkg-deb --fsys-tarfile {deb} failed")
    return dest


def _initramfs(busybox: bytes) -> bytes:
    """A cpio (newc) archive: /init, a static busybox and the few nodes it needs."""
    entries = [
        ("dev", 0o040755, b"", 0),
        ("dev/console", 0o020600, b"", os.makedev(5, 1)),
        ("bin", 0o040755, b"", 0),
        ("sbin", 0o040755, b"", 0),
        ("proc", 0o040755, b"", 0),
        ("sys", 0o040755, b"", 0),
        ("bin/busybox", 0o100755, busybox, 0),
        ("init", 0o100755, INIT.encode(), 0),
    ]
    out = io.BytesIO()
    for ino, (name, mode, data, rdev) in enumerate(entries + [("TRAILER!!!", 0, b"", 0)], 1):
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, os.major(rdev), os.minor(rdev), len(name) + 1, 0)
        out.write(b"070701" + b"".join(b"%08X" % f for f in fields) + name.encode() + b"\0")
        out.write(b"\0" * (-out.tell() % 4))
        out.write(data)
        out.write(b"\0" * (-out.tell() % 4))
    return out.getvalue()
