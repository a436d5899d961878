"""libvirt's memory units (``<memory unit='GiB'>``) in KiB, as virScaleInteger reads them."""

from __future__ import annotations

from ..errors import InvalidInput

SCALE = {  # a unit (lower case) in bytes: virScaleInteger's table
    "b": 1, "bytes": 1,
    "k": 1024, "kib": 1024, "kb": 1000,
    "m": 1024**2, "mib": 1024**2, "mb": 1000**2,
    "g": 1024**3, "gib": 1024**3, "gb": 1000**3,
    "t": 1024**4, "tib": 1024**4, "tb": 1000**4,
    "p": 1024**5, "pib": 1024**5, "pb": 1000**5,
    "e": 1024**6, "eib": 1024**6, "eb": 1000**6,
}


def to_kib(value: str | int | None, unit: str | None = None, default_unit: str = "KiB") -> int:
    """Convert ``value`` in ``unit`` (libvirt spelling, KiB by default) to whole KiB, rounding up."""
    if value is None:
        return 0
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidInput(f"bad memory size {value!r}") from None
    scale = SCALE.get((unit or default_unit).strip().lower())
    if scale is None or number < 0:
        raise InvalidInput(f"bad memory unit {unit!r}")
    return -(-number * scale // 1024)


def page(kib: int) -> str:
    """A page size the short way: ``2M``, ``1G``, ``4K`` (tables, one-line findings)."""
    return f"{kib // 1048576}G" if kib >= 1048576 else f"{kib // 1024}M" if kib >= 1024 else f"{kib}K"


def size(kib: int) -> str:
    """A size in words: ``1 GiB``, ``2 MiB``, ``4 KiB`` (whole GiB only as GiB)."""
    if kib >= 1048576 and kib % 1048576 == 0:
        return f"{kib // 1048576} GiB"
    return f"{kib // 1024} MiB" if kib >= 1024 else f"{kib} KiB"
