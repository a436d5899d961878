"""bench/debimage.py's PVH kernel: the ELF inside a compressed vmlinuz, booted without the
decompressor that takes about 6 s under TCG (the benchmark's guests, test_bench.py, boot it)."""

from __future__ import annotations

import gzip
import lzma
import os
import struct

from bench import debimage


def _elf(notes: list[tuple[bytes, int, bytes]]) -> bytes:
    """A 64-bit little-endian ELF with one PT_NOTE segment holding ``notes`` (owner, type, desc)."""
    pad = lambda b: b.ljust((len(b) + 3) // 4 * 4, b"\0")  # noqa: E731
    body = b"".join(struct.pack("<III", len(n), len(d), t) + pad(n) + pad(d) for n, t, d in notes)
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 2, 0x3E, 1, 0, 64, 0, 0, 64,
                                                                   56, 1, 0, 0, 0)
    segment = struct.pack("<IIQQQQQQ", 4, 4, 64 + 56, 0, 0, len(body), len(body), 4)
    return header + segment + body


PVH = _elf([(b"GNU\0", 3, b"build-id"), (b"Xen\0", 18, struct.pack("<I", 0x1000008))])
NO_PVH = _elf([(b"Xen\0", 6, b"linux\0"), (b"GNU\0", 18, b"\0" * 4)])  # type 18, but not Xen's


def test_the_elf_inside_an_xz_or_gzip_vmlinuz_is_kept_beside_it_once(tmp_path):
    for name, packed in (("xz", lzma.compress(PVH, format=lzma.FORMAT_XZ)), ("gz", gzip.compress(PVH))):
        vmlinuz = tmp_path / f"vmlinuz-{name}"
        vmlinuz.write_bytes(b"MZ setup code \x1f\x8b\x08 not a payload " + packed + b"\0" * 64)
        out = debimage.pvh_kernel(vmlinuz)
        assert out == tmp_path / f"vmlinuz-{name}.pvh" and out.read_bytes() == PVH, name
        assert oct(out.stat().st_mode & 0o777) == "0o644"  # the qemu user reads it
        made = out.stat().st_mtime_ns
        assert debimage.pvh_kernel(vmlinuz) == out and out.stat().st_mtime_ns == made  # made once
        os.utime(vmlinuz, ns=(made + 10**9, made + 10**9))  # a newer vmlinuz: made again
        assert debimage.pvh_kernel(vmlinuz) == out and out.stat().st_mtime_ns > made
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vmlinuz-gz", "vmlinuz-gz.pvh", "vmlinuz-xz", "vmlinuz-xz.pvh"]


def test_a_kernel_without_a_pvh_entry_or_another_compression_boots_as_it_is(tmp_path):
    for name, data in (("no-note", lzma.compress(NO_PVH, format=lzma.FORMAT_XZ)),
                       ("lz4", b"\x02\x21\x4c\x18" + os.urandom(256)), ("not-elf", gzip.compress(b"plain text"))):
        vmlinuz = tmp_path / f"vmlinuz-{name}"
        vmlinuz.write_bytes(b"setup " + data)
        assert debimage.pvh_kernel(vmlinuz) == vmlinuz, name
    assert not list(tmp_path.glob("*.pvh")) and not list(tmp_path.glob("*.tmp"))
