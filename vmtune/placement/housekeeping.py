"""The host's housekeeping CPUs: where latency domains' emulators and iothreads run, how many of
those threads share each CPU, and the CPUs of their real-time threads.

A dedicated domain's vCPUs have cores of their own; its emulator and iothreads run on the host's
housekeeping CPUs (the reserved ones: ``reserved_cpus``, else the first core of each node), beside
the host's own work. Every such thread counts 1, split evenly over the CPUs of its pin (a thread
pinned to 4 CPUs counts a quarter on each). The placement pins a domain's emulator and iothreads
to the housekeeping CPUs nearest its vCPUs: those in its L3 domains, else on its nodes, else all;
a nearer set whose CPUs would carry more than ``LIMIT`` such threads each gives way to a wider one.
(Where the domain's nodes have no housekeeping CPU, the nodes' free CPUs take them, as before.)
Where even that cannot keep the count at ``LIMIT``, the rewrite warns and ``vmtune plan`` reports
a ``housekeeping`` problem: the host needs more housekeeping CPUs (``reserved_cpus``).

A real-time emulator or iothread (``fifo``/``rr``) gets a CPU of its own instead (``rt_cpus``):
never a housekeeping CPU, never a vCPU's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .. import cpuset
from ..errors import DoesNotFit
from ..host import Host

# emulator and iothreads of latency domains on one housekeeping CPU, at most, before the rewrite
# warns and ``vmtune plan`` reports it: an emulator is mostly idle, an iothread busy while its
# disks are; four such threads leave a housekeeping CPU time for the host's own work
LIMIT = 4


def load(helpers: Iterable[frozenset[int]]) -> dict[int, float]:
    """Per CPU, how many emulator and iothreads run there: each of ``helpers`` (a thread's pin)
    counts 1, split over its CPUs."""
    out: dict[int, float] = {}
    for cpus in helpers:
        share = 1 / len(cpus) if cpus else 0.0  # the same for each of its CPUs
        for cpu in cpus:
            out[cpu] = out.get(cpu, 0.0) + share
    return out


def crowded(loads: Mapping[int, float], within: frozenset[int] | None = None) -> dict[int, float]:
    """The CPUs (of ``within``, default all) that carry more than ``LIMIT`` threads."""
    return {c: n for c, n in loads.items() if n > LIMIT + 1e-9 and (within is None or c in within)}


def warning(loads: Mapping[int, float], cpus: frozenset[int]) -> str | None:
    """A warning when one of ``cpus`` carries more than ``LIMIT`` emulator and iothreads."""
    over = crowded(loads, cpus)
    if not over:
        return None
    most = max(over.values())
    return (f"housekeeping CPU{'s' if len(over) > 1 else ''} {cpuset.format(over)} run{'' if len(over) > 1 else 's'} "
            f"up to {most:.3g} emulator and iothreads of latency domains each (more than {LIMIT}): give the host "
            "more housekeeping CPUs (reserved_cpus in /etc/vmtune/vmtune.toml, docs/config.md)")


def choose(host: Host, reserved: frozenset[int], blocked: frozenset[int], nodes, pins: frozenset[int],
           loads: Mapping[int, float], threads: int) -> frozenset[int]:
    """The CPUs for the emulator and iothreads (``threads`` of them) of a domain whose vCPUs take
    ``pins`` on ``nodes``: the housekeeping CPUs of its L3 domains, of its nodes, or all of them,
    the nearest that stays within ``LIMIT`` threads a CPU (else the least loaded). Where its nodes
    have no housekeeping CPU, their free CPUs (as before housekeeping was counted), else any. On a
    hybrid host, the efficiency cores of a choice where it has any."""
    local = host.cpus_of(tuple(nodes))
    l3s = {host.l3_of(c) for c in pins} - {None}
    near = frozenset().union(*(host.cache(i).cpus for i in l3s)) if l3s and host.caches else frozenset()
    everywhere = host.cpu_ids
    elsewhere = blocked - reserved
    hybrid = host.hybrid

    def kind(choice: frozenset[int]) -> frozenset[int]:
        if not hybrid:  # no efficiency core anywhere: the choice as it is
            return choice
        return frozenset(c for c in choice if host.efficient(c)) or choice

    def most(choice: frozenset[int]) -> float:
        return max(loads.get(c, 0.0) + threads / len(choice) for c in choice)

    if (reserved & local) - pins:
        found: list[frozenset[int]] = []  # the choices weighed, nearest first, each once
        for level in (near, local, everywhere):  # the first that stays within LIMIT, looked at no further
            choice = (reserved & level) - pins
            if not choice:
                continue
            choice = kind(choice)
            if choice in found:
                continue
            if most(choice) <= LIMIT:
                return choice
            found.append(choice)
        return min(found, key=lambda s: (most(s), found.index(s)))
    for level in (local - elsewhere - pins, reserved & everywhere - pins, everywhere - elsewhere - pins):
        if level:
            return kind(level)
    raise DoesNotFit("no CPU is left for the emulator and iothreads outside the dedicated vCPUs")


def rt_cpus(host: Host, blocked: frozenset[int], nodes, pins: tuple[int, ...], count: int) -> tuple[int, ...]:
    """``count`` CPUs of their own for real-time emulator or iothreads, on the domain's nodes, its
    L3 domains first and whole free cores first; fewer when the nodes have no more."""
    if not count:
        return ()
    l3s = {host.l3_of(c) for c in pins}
    taken = set(blocked) | set(pins)
    out: list[int] = []
    for node in nodes:
        cores = [c for c in host.cores(node) if not taken.intersection(c)]
        cores += [c for c in host.cores(node) if taken.intersection(c) and set(c) - taken]
        cores.sort(key=lambda c: (bool(taken.intersection(c)), host.l3_of(c[0]) not in l3s, c[0]))
        for core in cores:
            free = [t for t in core if t not in taken]
            if free and len(out) < count:
                out.append(free[0])
                taken.update(core)
    return tuple(out)
