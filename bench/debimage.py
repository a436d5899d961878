"""Guest-image plumbing shared by the benchmark's guest (bench/guestimage.py) and the test guest
(tests/fixtures/guest.py, tests/fixtures/libvirt_env.py): find the linux-image package behind a kernel metapackage,
unpack members of a downloaded .deb without installing it (no maintainer script runs), write a newc
cpio archive, and point a domain at such a kernel and initramfs with a file serial console.

A domain boots the kernel uncompressed where it can (``pvh_kernel``): Debian's vmlinuz is an xz
payload that its own decompressor unpacks in about 6 s under TCG, before the kernel's first line;
the ELF inside it has a PVH entry point (Xen's PHYS32_ENTRY note), which QEMU enters directly. A
guest then boots in about 4 s instead of 10.
"""

from __future__ import annotations

import io
import lzma
import os
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

from lxml import etree


class BuildError(RuntimeError):
    """A guest image could not be built (the message says what is missing)."""


def run(*cmd: str, cwd: Path | None = None) -> str:
    """``cmd``'s stdout; BuildError with its stderr when it fails."""
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise BuildError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def kernel_image_package(metapackage: str) -> str:
    """The versioned linux-image-* package that ``metapackage`` depends on."""
    try:
        deps = run("apt-cache", "depends", metapackage)
    except BuildError:
        run("apt-get", "update", "-qq")  # a fresh machine without package lists
        deps = run("apt-cache", "depends", metapackage)
    for line in deps.splitlines():
        kind, _, name = line.strip().partition(": ")
        if kind == "Depends" and name.startswith("linux-image-"):
            return name
    raise BuildError(f"cannot find the kernel image package behind {metapackage}:\n{deps}")


def extract(deb: Path, work: Path, *members: str) -> Path:
    """Unpack members (tar wildcards) of ``deb`` into a fresh directory under ``work``."""
    dest = Path(tempfile.mkdtemp(dir=work))
    tar = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "--wildcards", "-C", str(dest), *members], stdin=tar.stdout, check=True)
    if tar.wait():
        raise BuildError(f"dpkg-deb --fsys-tarfile {deb} failed")
    return dest


# The directories and device node every initramfs here starts with: (name, mode, data, rdev).
SKELETON = [
    ("dev", 0o040755, b"", 0),
    ("dev/console", 0o020600, b"", os.makedev(5, 1)),
    ("bin", 0o040755, b"", 0),
    ("sbin", 0o040755, b"", 0),
    ("proc", 0o040755, b"", 0),
    ("sys", 0o040755, b"", 0),
    ("tmp", 0o041777, b"", 0),
    ("lib", 0o040755, b"", 0),
    ("lib/modules", 0o040755, b"", 0),
]


def cpio(entries) -> bytes:
    """A cpio archive in the kernel's newc format of ``(name, mode, data, rdev)`` entries."""
    out = io.BytesIO()
    for ino, (name, mode, data, rdev) in enumerate([*entries, ("TRAILER!!!", 0, b"", 0)], 1):
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, os.major(rdev), os.minor(rdev), len(name) + 1, 0)
        out.write(b"070701" + b"".join(b"%08X" % f for f in fields) + name.encode() + b"\0")
        out.write(b"\0" * (-out.tell() % 4))
        out.write(data)
        out.write(b"\0" * (-out.tell() % 4))
    return out.getvalue()


def _child(root: etree._Element, tag: str) -> etree._Element:
    el = root.find(tag)
    return el if el is not None else etree.SubElement(root, tag)


# an ELF note of Xen's: the 32-bit entry point that QEMU's PVH boot enters (XEN_ELFNOTE_PHYS32_ENTRY)
PVH_NOTE = (b"Xen\0", 18)


def pvh_kernel(vmlinuz: Path) -> Path:
    """The kernel inside ``vmlinuz`` as an ELF that QEMU boots by its PVH entry, kept beside it
    (``NAME.pvh``, made once); ``vmlinuz`` itself where there is none (another compression, no note)."""
    out = vmlinuz.with_name(vmlinuz.name + ".pvh")
    try:
        if out.stat().st_mtime_ns >= vmlinuz.stat().st_mtime_ns:
            return out
    except FileNotFoundError:
        pass
    elf = _unpacked(vmlinuz.read_bytes())
    if elf is None or not _has_note(elf, *PVH_NOTE):
        return vmlinuz
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    tmp.write_bytes(elf)
    tmp.chmod(0o644)
    os.replace(tmp, out)
    return out


def _unpacked(image: bytes) -> bytes | None:
    """The ELF a bzImage carries, compressed with xz or gzip (the first payload that unpacks to one)."""
    for magic, unpack in ((b"\xfd7zXZ\x00", lambda d: lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(d)),
                          (b"\x1f\x8b\x08", lambda d: zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(d))):
        at = image.find(magic)
        while at >= 0:
            try:
                out = unpack(image[at:])
            except (lzma.LZMAError, zlib.error):
                out = b""
            if out[:4] == b"\x7fELF":
                return out
            at = image.find(magic, at + 1)
    return None


def _has_note(elf: bytes, name: bytes, kind: int) -> bool:
    """Whether a 64-bit little-endian ELF has note ``kind`` of owner ``name`` in a PT_NOTE segment."""
    if elf[4:6] != b"\x02\x01":  # ELFCLASS64, little-endian
        return False
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    size, count = struct.unpack_from("<HH", elf, 0x36)
    for i in range(count):
        ptype, = struct.unpack_from("<I", elf, phoff + i * size)
        if ptype != 4:  # PT_NOTE
            continue
        offset, = struct.unpack_from("<Q", elf, phoff + i * size + 8)
        filesz, = struct.unpack_from("<Q", elf, phoff + i * size + 32)
        at, end = offset, offset + filesz
        while at + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, at)
            owner = elf[at + 12:at + 12 + namesz]
            if owner == name and ntype == kind:
                return True
            at += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def direct_boot(root: etree._Element, kernel: Path, initrd: Path, cmdline: str, console: Path) -> None:
    """Make domain ``root`` boot ``kernel``/``initrd`` with ``cmdline`` (the kernel uncompressed
    where it can: ``pvh_kernel``) and write its one serial console to the file ``console`` (any
    other boot, serial or console element goes)."""
    kernel = pvh_kernel(kernel)
    os_el = _child(root, "os")
    for tag in ("boot", "kernel", "initrd", "cmdline"):
        for el in os_el.findall(tag):
            os_el.remove(el)
    for tag, text in (("kernel", kernel), ("initrd", initrd), ("cmdline", cmdline.strip())):
        etree.SubElement(os_el, tag).text = str(text)
    devices = _child(root, "devices")
    for el in devices.findall("serial") + devices.findall("console"):
        devices.remove(el)
    serial = etree.SubElement(devices, "serial", type="file")
    etree.SubElement(serial, "source", path=str(console))
    etree.SubElement(serial, "target", port="0")
