"""libvirt/Linux CPU list syntax: ``0-3,8,^2`` <-> frozenset of ints."""

from __future__ import annotations

from collections.abc import Iterable

from .errors import InvalidInput


def parse(text: str | None, limit: int | None = None) -> frozenset[int]:
    """Parse a cpulist (``"0-3,^2,8"``, Linux sysfs or libvirt syntax); ``""`` and None give {}.

    ``limit``: ids must be below it (the host's possible CPUs), checked before a range is expanded,
    so the work is bounded by the limit, not by the text.
    """
    if text is None:
        return frozenset()
    include: set[int] = set()
    exclude: set[int] = set()
    for raw in text.strip().split(","):
        part = raw.strip()
        if not part:
            continue
        target = include
        if part.startswith("^"):
            target, part = exclude, part[1:].strip()
        try:
            if "-" in part:
                lo_s, hi_s = part.split("-", 1)
                lo, hi = int(lo_s), int(hi_s)
                if lo < 0 or hi < lo:
                    raise ValueError
                if limit is not None and hi >= limit:
                    raise InvalidInput(f"cpu list {raw.strip()!r} goes beyond the host's last CPU {limit - 1}")
                if hi - lo > 1 << 16:
                    raise InvalidInput(f"cpu list range too large: {raw.strip()!r}")
                target.update(range(lo, hi + 1))
            else:
                value = int(part)
                if value < 0:
                    raise ValueError
                if limit is not None and value >= limit:
                    raise InvalidInput(f"cpu list names CPU {value}, beyond the host's last CPU {limit - 1}")
                target.add(value)
        except ValueError:
            raise InvalidInput(f"bad cpu list {text!r}") from None
    return frozenset(include - exclude)


def format(cpus: Iterable[int]) -> str:  # noqa: A001 - mirrors libvirt's virBitmapFormat
    """Format CPU ids as the shortest libvirt cpulist: ``{0,1,2,5}`` -> ``"0-2,5"``."""
    ids = sorted(set(cpus))
    out: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def parse_mask(text: str | None) -> frozenset[int]:
    """Parse a kernel hex CPU mask (``"3"``, ``"00000000,0000000f"``); bad text raises InvalidInput."""
    digits = (text or "").strip().replace(",", "")
    if not digits:
        return frozenset()
    try:
        value = int(digits, 16)
    except ValueError:
        raise InvalidInput(f"bad cpu mask {text!r}") from None
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


def format_mask(cpus: Iterable[int]) -> str:
    """Format CPU ids as a kernel hex mask, 32-bit words joined by commas: ``{0, 1, 33}`` -> ``"2,00000003"``."""
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if not value:
            break
    head, *rest = reversed(words)
    return ",".join([f"{head:x}"] + [f"{w:08x}" for w in rest])
