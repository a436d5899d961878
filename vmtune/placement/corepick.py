"""Which cores of one NUMA node a dedicated domain takes, and how few L3 domains hold it.

Pure functions of the host and a node's free cores (search.py calls them for every node and
share it weighs): on a hybrid host the performance cores only, or those first (``usable``); the
cores by L3 domain (``by_l3``); how few L3 domains hold a share (``fewest``); and the threads a
share takes: from one L3 domain when one holds it all, the best fit (the fewest whole cores left),
else the largest ones and the best fit for the rest (``pick``).
"""

from __future__ import annotations

from ..host import Host
from ..profiles import CpuKinds


def free_cores(host: Host, node: int, blocked: frozenset[int]) -> list[tuple[int, ...]]:
    """Cores of ``node`` with no thread in ``blocked``; whole cores first, then by first thread."""
    cores = [c for c in host.cores(node) if not blocked.intersection(c)]
    return sorted(cores, key=lambda c: (-len(c), c[0]))


def capacity(cores: list[tuple[int, ...]], smt: str) -> int:
    return len(cores) if smt == "isolate" else sum(map(len, cores))


def take(cores: list[tuple[int, ...]], count: int, smt: str) -> list[int]:
    out: list[int] = []
    for core in cores:
        threads = core[:1] if smt == "isolate" else core
        out.extend(threads[: count - len(out)])
        if len(out) == count:
            break
    return out


def usable(host: Host, cores: list[tuple[int, ...]], kinds: CpuKinds) -> list[tuple[int, ...]]:
    """The cores a dedicated vCPU may take of ``cores``: on a hybrid host the performance cores only
    (``cpu_kinds = "performance"``), or those first (``"any"``)."""
    if not host.hybrid:
        return cores
    if kinds == CpuKinds.PERFORMANCE:
        return [c for c in cores if not host.efficient(c[0])]
    return sorted(cores, key=lambda c: host.efficient(c[0]))  # stable: whole cores first within a kind


def by_l3(host: Host, cores: list[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
    """``cores`` by L3 domain, each in the order given, the domains by their first core there
    (cores of no known L3 form one group: a host without caches is one group per node)."""
    out: dict[int | None, list[tuple[int, ...]]] = {}
    for core in cores:
        out.setdefault(host.l3_of(core[0]), []).append(core)
    return sorted(out.values(), key=lambda g: min(c[0] for c in g))


def fewest(caps: list[int], count: int) -> int:
    """How few of the groups of capacities ``caps`` hold ``count`` vCPUs (len + 1: none do)."""
    total = 0
    for i, cap in enumerate(sorted(caps, reverse=True)):
        total += cap
        if total >= count:
            return i + 1
    return len(caps) + 1


def left_whole(group: list[tuple[int, ...]], count: int, smt: str) -> int:
    """Whole cores of ``group`` left untouched after ``count`` vCPUs are taken from it."""
    used = 0
    for core in group:
        if count <= 0:
            break
        count -= 1 if smt == "isolate" else len(core)
        used += 1
    return len(group) - used


def restrict(cores: list[tuple[int, ...]], only: frozenset[int]) -> list[tuple[int, ...]]:
    """``cores`` with only their threads in ``only`` (cores with none go): a bound of the user's."""
    out = [tuple(t for t in core if t in only) for core in cores]
    return [core for core in out if core]


def pick(groups: list[list[tuple[int, ...]]], count: int, smt: str, sizes: list[int] | None = None,
         first: frozenset[int] = frozenset()) -> list[tuple[int, list[int]]]:
    """(group index, threads) for ``count`` vCPUs: from the fewest groups; where one holds them
    all, the one with the larger L3 (``sizes``: KiB per group, 0 unknown), then the best fit (the
    fewest whole cores left); else the largest, the last one chosen so. With ``first`` (the CPUs the
    user gave the vCPUs), the cores that hold them are taken first, from the groups that hold most."""
    if first:
        return _pick_first(groups, count, smt, first)
    caps = [capacity(g, smt) for g in groups]
    size = sizes or [0] * len(groups)
    m = fewest(caps, count)
    order = sorted(range(len(groups)), key=lambda i: (-caps[i], -size[i], i))
    chosen = order[: m - 1]
    rest = count - sum(caps[i] for i in chosen)
    last = min((i for i in range(len(groups)) if i not in chosen and caps[i] >= rest),
               key=lambda i: (-size[i], left_whole(groups[i], rest, smt), i))
    return [(i, take(groups[i], rest if i == last else caps[i], smt)) for i in sorted(chosen + [last])]


def _pick_first(groups, count: int, smt: str, first: frozenset[int]) -> list[tuple[int, list[int]]]:
    """The threads of ``first`` before any other (under ``isolate``, one a core), from the groups
    that hold most of them; then the rest of those cores (not under ``isolate``) and other cores,
    group by group in the same order."""
    def mine(core) -> bool:
        return bool(first.intersection(core))

    held = [capacity([c for c in g if mine(c)], smt) for g in groups]
    order = sorted(range(len(groups)), key=lambda i: (-held[i], i))
    chosen: dict[int, list[int]] = {}
    left = count
    for i in order:
        units = [tuple(t for t in c if t in first) for c in groups[i] if mine(c)]
        got = take(units, min(left, capacity(units, smt)), smt)
        chosen[i] = got
        left -= len(got)
    for i in order:
        if left <= 0:
            break
        rest = [] if smt == "isolate" else [tuple(t for t in c if t not in first) for c in groups[i] if mine(c)]
        units = [u for u in rest if u] + [c for c in groups[i] if not mine(c)]
        got = take(units, min(left, capacity(units, smt)), smt)
        chosen[i] = chosen[i] + got
        left -= len(got)
    return sorted((i, got) for i, got in chosen.items() if got)
