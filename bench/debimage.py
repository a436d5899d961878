"""Guest-image plumbing shared by the benchmark's guest (bench/guestimage.py) and the test guest
(tests/fixtures/guest.py, tests/fixtures/libvirt_env.py): find the linux-image package behind a kernel metapackage,
unpack members of a downloaded .deb without installing it (no maintainer script runs), write a newc
cpio archive, and point a domain at such a kernel and initramfs with a file serial console.
"""

from __future__ import annotations

import io
import os
import subprocess
import tempfile
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


def direct_boot(root: etree._Element, kernel: Path, initrd: Path, cmdline: str, console: Path) -> None:
    """Make domain ``root`` boot ``kernel``/``initrd`` with ``cmdline`` and write its one serial
    console to the file ``console`` (any other boot, serial or console element goes)."""
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
