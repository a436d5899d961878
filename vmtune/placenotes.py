"""What the placement says of its choice: a warning per passthrough device it could not place the
domain beside, and the reasons ``rewrite --explain`` prints (the L3 domains, the core kind, the
device nodes that decided the place)."""

from __future__ import annotations

from . import cpuset
from .host import Host
from .profiles import DeviceLocality


def far(req, nodes) -> list[str]:
    """A warning per passthrough device the domain could not be placed beside (``preferred``)."""
    if req.locality == DeviceLocality.IGNORE:
        return []
    return [f"{a.what} is on node {a.node}, and the domain is placed on node(s) {cpuset.format(nodes)}: there is no "
            f"room for it on node {a.node} (device_locality = \"{req.locality}\")"
            for a in req.anchors if a.passthrough and a.node not in nodes]


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
