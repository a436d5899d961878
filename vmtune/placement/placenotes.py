"""What the placement says of its choice: a warning per passthrough device it could not place the
domain beside, and the reasons ``rewrite --explain`` prints (the L3 domains, the core kind, the
device nodes that decided the place)."""

from __future__ import annotations

from .. import cpuset
from . import locality
from ..xml import units
from ..host import Host
from ..profiles import DeviceLocality


def far(req, nodes) -> list[str]:
    """A warning per passthrough device the domain could not be placed beside (``preferred``)."""
    if req.locality == DeviceLocality.IGNORE:
        return []
    return [f"{a.what} is on node {a.node}, and the domain is placed on node(s) {cpuset.format(nodes)}: there is no "
            f"room for it on node {a.node} (device_locality = \"{req.locality}\")"
            for a in locality.away(req.anchors, nodes)]


def reasons(host: Host, req, nodes, pins: list[int], caches: list[int | None]) -> list[str]:
    """What decided the place, for ``--explain``: the L3 domains, the core kind (of ``pins``, the
    dedicated vCPUs' CPUs), the device nodes."""
    out = []
    if caches:
        ids = sorted(set(caches))  # type: ignore[arg-type]
        each = ", ".join(f"L3 {i} (CPUs {cpuset.format(host.cache(i).cpus)})" for i in ids[:4])
        each += f", and {len(ids) - 4} more" if len(ids) > 4 else ""
        many = "" if len(ids) <= len(nodes) else (" (no single L3 domain had room for them all)" if len(nodes) == 1
                                                   else f" (the fewest over {len(nodes)} nodes)")
        out.append(f"L3: {len(ids)} of the host's {len(host.caches)} L3 domains: {each}{many}")
    # L3 domains of unequal sizes (looked at only for dedicated vCPUs on known caches): the larger per vCPU won
    if caches and pins and len({c.size_kib for c in host.caches if c.size_kib}) > 1:
        kib = sum(host.cache(i).size_kib for i in set(caches))  # type: ignore[arg-type]
        each = ", ".join(f"L3 {c.id} {units.size(c.size_kib)} (CPUs {cpuset.format(c.cpus)})" for c in host.caches[:6])
        out.append(f"L3 size: {units.size(kib)} for {len(pins)} vCPUs ({units.size(kib // len(pins))} each), of the "
                   f"host's {each}: among the L3 domains that fit, the larger cache per vCPU")
    if host.hybrid and pins:  # dedicated vCPUs: the cores they took
        small = [c for c in pins if host.efficient(c)]
        out.append(f"core kind: {'performance cores only' if not small else 'efficiency cores too: ' + cpuset.format(small)}"
                   f" (cpu_kinds = \"{req.kinds}\")")
    for a in req.anchors:
        if a.passthrough and req.locality == DeviceLocality.IGNORE:
            continue
        rule = f"device_locality = \"{req.locality}\"" if a.passthrough else "a backing device: a preference only"
        place = "on its node" if a.node in nodes else "not on its node"
        out.append(f"device: {a.what} on node {a.node}: {place} ({rule})")
    return out


def pages(req, nodes, fit) -> list[str]:
    """What became of hugepages: none free now (the profile's), kept though short (the domain's
    own), or gone because they can never fit."""
    if fit.short:
        where = cpuset.format(nodes)
        pages = -(-req.memory_kib // fit.size)
        then = ("the hook tops up the pool when the domain starts" if req.topped_up else
                f"allocate them before it starts (echo N > /sys/devices/system/node/nodeN/hugepages/"
                f"hugepages-{fit.size}kB/nr_hugepages, or a prepare hook)")
        return [f"hugepages kept: node(s) {where} have fewer free {units.page(fit.size)} pages than the {pages} this "
                f"domain needs now; {then}"]
    if fit.gone:
        return [f"hugepages removed: {fit.gone}; memory is on normal pages"]
    if req.hugepages and fit.size is None:
        return [f"no hugepages: node(s) {cpuset.format(nodes)} lack enough free hugepages of any size for "
                f"{req.memory_kib} KiB (each guest cell rounded up to whole pages); memory stays on normal pages"]
    return []


def outside(host: Host, req, pins, reserved: frozenset[int], ledger) -> list[str]:
    """A warning naming the vCPUs placed outside the user's bound (``req.within``), and why."""
    if req.within is None:
        return []
    out = [v for v, c in enumerate(pins) if c not in req.within]
    if not out:
        return []
    held = frozenset().union(*(host.core_of(c) for c in ledger.dedicated if c in host.cpus)) & req.within
    mine = frozenset().union(*(host.core_of(c) for c in reserved if c in host.cpus)) & req.within
    because = []
    if mine:
        because.append(f"CPUs {cpuset.format(mine)} are kept for the host: reserved_cpus")
    if held:
        holders = sorted({c.name or c.uuid or "?" for c in ledger.claims if c.dedicated & req.within})
        because.append(f"CPUs {cpuset.format(held)} are held by {', '.join(holders) or 'other domains'}")
    if req.smt == "isolate":
        because.append("the profile puts one vCPU per core")
    room = len(pins) - len(out)
    return [f"vCPU{'s' if len(out) > 1 else ''} {cpuset.format(out)} on CPU{'s' if len(out) > 1 else ''} "
            f"{cpuset.format(pins[v] for v in out)}, outside {req.within_what}: it has room for {room} of the "
            f"{len(pins)} vCPUs" + (f" ({'; '.join(because)})" if because else "")]


def hand_replaced(req, why: str) -> str:
    """The warning when the hand's own pins (one CPU per vCPU) give way to the placement's."""
    return f"{req.hand_said} <vcpupin>s (CPUs {cpuset.format(req.hand_pins)}) are replaced: {why}"


def rt_short(req, rt) -> list[str]:
    """A warning when real-time emulator or iothreads lack CPUs of their own."""
    if len(rt) >= req.rt_threads:
        return []
    return [f"{req.rt_threads - len(rt)} real-time emulator or iothread(s) get no CPU of their own on the domain's "
            "nodes: their real-time scheduler is removed"]


def placeholders(req, room: int | None = None) -> str:
    """Words for a message whose fit the disabled placeholder vCPUs decide (with ``room``: only
    when the enabled vCPUs alone would fit in it)."""
    if req.active is None or req.active >= req.vcpus or room is not None and req.active > room:
        return ""
    return (f"; {req.vcpus - req.active} of the {req.vcpus} vCPUs are disabled placeholders (<vcpu current='"
            f"{req.active}'> or enabled='no'), which still need a CPU each to be enabled later")
