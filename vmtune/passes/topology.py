"""The guest CPU topology, derived from the pins: threads='2' only when vCPU pairs are siblings,
one socket per guest NUMA cell, and one die per L3 domain when the vCPUs span several with equal
shares (QEMU gives each x86 die its own L3, so the guest sees which vCPUs share one)."""

from ..xml.edits import E, Warn
from ..xml.model import Domain
from ._xml import put_under


X86 = ("x86_64", "i686")


def _dies(host, placement, sockets: int) -> int:
    """Guest dies per socket: one per L3 domain when every socket spans the same number of them
    with equal shares (x86 only, where QEMU has dies and gives each its L3); else 1."""
    groups = placement.l3
    if host.arch not in X86 or len(groups) < 2 or len(groups) % sockets:
        return 1
    return len(groups) // sockets if len({len(g) for g in groups}) == 1 else 1


def shape(host, placement) -> tuple[int, int, int, int]:
    """(sockets, dies, cores, threads) for the pinned vCPUs: one socket per guest cell when even,
    one die per L3 domain when even."""
    pins = placement.pins
    n = len(pins)
    sizes = {len(c.vcpus) for c in placement.cells}
    sockets = len(placement.cells) if placement.cells and len(sizes) == 1 else 1
    dies = _dies(host, placement, sockets)
    per = n // sockets // dies
    pairs = per % 2 == 0 and all(
        pins[i] != pins[i + 1] and pins[i + 1] in host.core_of(pins[i]) for i in range(0, n, 2)
    )
    threads = 2 if pairs else 1
    return sockets, dies, per // threads, threads


def sharing(host, pins) -> list[tuple[int, ...]]:
    """The vCPUs that share a physical core (each group in vCPU order, groups by first vCPU)."""
    by_core: dict[frozenset[int], list[int]] = {}
    for vcpu, cpu in enumerate(pins):
        by_core.setdefault(frozenset(host.core_of(cpu)), []).append(vcpu)
    return sorted(tuple(v) for v in by_core.values() if len(v) > 1)


def _said(groups: list[tuple[int, ...]], threads: int) -> str:
    """How the pins are, in words that are true of them."""
    if threads == 2:
        return "vCPU pairs sit on sibling threads"
    if not groups:
        return "no two vCPUs share a core"
    named = ", ".join(" and ".join(str(v) for v in g) for g in groups[:6])
    more = f" and {len(groups) - 6} more pairs" if len(groups) > 6 else ""
    return (f"vCPUs {named}{more} share a core (sibling threads), the others have one alone; the guest is told one "
            "thread per core (threads='2' needs every vCPU pair, 0 and 1, 2 and 3, ..., on siblings)")


def run(ctx, dom):
    pl = ctx.placement
    if not pl.dedicated:
        return []
    sockets, dies, cores, threads = shape(ctx.host, pl)
    topo = E("topology", {"sockets": sockets, "dies": dies, "cores": cores, "threads": threads}, into=dom.node)
    why = ("as pinned: " + _said(sharing(ctx.host, pl.pins), threads)
           + ("; one socket per guest cell" if sockets > 1 else "")
           + ("; one die per host L3 domain, so the guest sees which vCPUs share one" if dies > 1 else ""))
    edits = [put_under(dom, "cpu", topo, why)]
    if pl.cells and sockets == 1 and len(pl.cells) > 1:
        edits.append(Warn("guest NUMA cells have unequal vCPU counts; the guest sees one socket"))
    if threads == 2 and (ctx.host.vendor or "").upper() == "AMD":
        edits.append(Domain.cpu_feature_policy.at(Domain.FEATURE_TOPOEXT).edit(
            dom, Domain.POLICY_REQUIRE, "AMD guests see SMT siblings only with topoext"))
    return edits
