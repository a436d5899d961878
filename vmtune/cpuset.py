"""libvirt/Linux CPU list syntax: ``0-3,8,^2`` <-> frozenset of ints.

Parsing costs O(text + CPUs), never O(text x CPUs): the ranges are read and checked against the
limit first, then merged, and only their union is expanded, once. Without a ``limit``, ids stop
at ``MAX_ID`` (no kernel has more CPUs), so no text can make a set larger than that.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from .errors import InvalidInput

MAX_ID = 1 << 16  # the default limit: ids below it
MAX_HOST_CPUS = 8192  # the largest NR_CPUS of distribution kernels
MAX_NUMA_NODES = 1024  # the kernel's MAX_NUMNODES at most


def ranges(text: str | None, limit: int | None = None, last: str | None = None,
           ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The (included, excluded) ``(lo, hi)`` ranges of a cpulist, each id checked against
    ``limit`` (default ``MAX_ID``) before anything is expanded: O(text). InvalidInput if bad;
    ``last`` names ``limit - 1`` in the message (default: "the host's last CPU")."""
    include: list[tuple[int, int]] = []
    exclude: list[tuple[int, int]] = []
    top = MAX_ID if limit is None else limit
    for raw in (text or "").strip().split(","):
        part = raw.strip()
        if not part:
            continue
        target = include
        if part.startswith("^"):
            target, part = exclude, part[1:].strip()
        lo_s, dash, hi_s = part.partition("-")
        try:
            lo = int(lo_s)
            hi = int(hi_s) if dash else lo
        except ValueError:
            raise InvalidInput(f"bad cpu list {_short(text)!r}") from None
        if lo < 0 or hi < lo:
            raise InvalidInput(f"bad cpu list {_short(text)!r}")
        if hi >= top:
            last = last or ("the host's last CPU" if limit is not None else "the largest CPU id")
            what = f"cpu list {raw.strip()!r} goes" if dash else f"cpu list names CPU {hi},"
            raise InvalidInput(f"{_short(what, 80)} beyond {last} {top - 1}")
        target.append((lo, hi))
    return include, exclude


def _short(text: str | None, most: int = 120) -> str:
    text = text or ""
    return text if len(text) <= most else text[:most] + "..."


def _union(spans: list[tuple[int, int]]) -> set[int]:
    """Every id of the ranges, each expanded once: O(k log k + ids)."""
    out: set[int] = set()
    end = -1  # ids up to ``end`` are in ``out`` already
    for lo, hi in sorted(spans):
        if hi > end:
            out.update(range(max(lo, end + 1), hi + 1))
            end = hi
    return out


def check(text: str | None, limit: int | None = None, last: str | None = None) -> None:
    """InvalidInput if ``text`` is not a cpulist whose ids are all below ``limit``; expands nothing."""
    ranges(text, limit, last)


def parse(text: str | None, limit: int | None = None) -> frozenset[int]:
    """Parse a cpulist (``"0-3,^2,8"``, Linux sysfs or libvirt syntax); ``""`` and None give {}.

    ``limit``: ids must be below it (the host's possible CPUs; default ``MAX_ID``), checked before
    a range is expanded, so the work is bounded by the text and the limit, never their product.
    """
    include, exclude = ranges(text, limit)
    out = _union(include)
    if exclude:
        out -= _union(exclude)
    return frozenset(out)


_REMEMBERED = 512  # the largest set whose text is remembered: the cache stays small on a host of thousands of CPUs


def format(cpus: Iterable[int]) -> str:  # noqa: A001 - mirrors libvirt's virBitmapFormat
    """Format CPU ids as the shortest libvirt cpulist: ``{0,1,2,5}`` -> ``"0-2,5"``."""
    if isinstance(cpus, frozenset) and len(cpus) <= _REMEMBERED:  # the usual argument, immutable: its text remembered
        return _format_set(cpus)
    return _format(cpus)


@functools.lru_cache(maxsize=1024)  # a rewrite formats the same few sets (pins, nodes, helpers) again and again
def _format_set(cpus: frozenset[int]) -> str:
    return _format(cpus)


def _format(cpus: Iterable[int]) -> str:
    ids = sorted(set(cpus))
    if not ids:
        return ""
    out: list[str] = []
    first = last = ids[0]  # the run being read
    for cpu in ids:
        if cpu > last + 1:  # a gap: the run ends
            out.append(str(first) if first == last else f"{first}-{last}")
            first = cpu
        last = cpu
    out.append(str(first) if first == last else f"{first}-{last}")
    return ",".join(out)


def parse_mask(text: str | None, limit: int | None = None) -> frozenset[int]:
    """Parse a kernel hex CPU mask (``"3"``, ``"00000000,0000000f"``); bad text raises InvalidInput,
    and so does a CPU at or beyond ``limit`` (default ``MAX_ID``)."""
    digits = (text or "").strip().replace(",", "")
    if not digits:
        return frozenset()
    top = MAX_ID if limit is None else limit
    try:
        value = int(digits, 16) if len(digits.lstrip("0")) <= top // 4 + 1 else -1
    except ValueError:
        raise InvalidInput(f"bad cpu mask {_short(text)!r}") from None
    if value < 0 or value.bit_length() > top:
        raise InvalidInput(f"cpu mask {_short(text, 40)!r} names CPUs beyond {top - 1}")
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
