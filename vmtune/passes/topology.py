"""The guest CPU topology, derived from the pins: threads='2' only when vCPU pairs are siblings."""

from ..edits import E, Warn
from ..model import Domain
from ._xml import put_under


def shape(host, placement) -> tuple[int, int, int]:
    """(sockets, cores, threads) for the pinned vCPUs: one socket per guest cell when even."""
    pins = placement.pins
    n = len(pins)
    sizes = {len(c.vcpus) for c in placement.cells}
    sockets = len(placement.cells) if placement.cells and len(sizes) == 1 else 1
    per = n // sockets
    pairs = per % 2 == 0 and all(
        pins[i] != pins[i + 1] and pins[i + 1] in host.core_of(pins[i]) for i in range(0, n, 2)
    )
    threads = 2 if pairs else 1
    return sockets, per // threads, threads


def run(ctx, dom):
    pl = ctx.placement
    if not pl.dedicated:
        return []
    sockets, cores, threads = shape(ctx.host, pl)
    topo = E("topology", {"sockets": sockets, "dies": 1, "cores": cores, "threads": threads})
    why = (f"{sockets} socket(s) x {cores} core(s) x {threads} thread(s), as pinned: "
           + ("vCPU pairs sit on sibling threads" if threads == 2 else "no vCPU pair shares a physical core"))
    edits = [put_under(dom, "cpu", topo, why)]
    if pl.cells and sockets == 1 and len(pl.cells) > 1:
        edits.append(Warn("guest NUMA cells have unequal vCPU counts; the guest sees one socket"))
    if threads == 2 and (ctx.host.vendor or "").upper() == "AMD":
        edits.append(Domain.cpu_feature_policy.at(Domain.FEATURE_TOPOEXT).edit(
            dom, Domain.POLICY_REQUIRE, "AMD guests see SMT siblings only with topoext"))
    return edits
