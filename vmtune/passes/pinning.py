"""<vcpu> and <cputune>: dedicated pins, or a cpuset that keeps floating vCPUs off others' cores."""

from lxml import etree

from .. import cpuset, xmltext
from ..edits import E, Put, Remove, clone, insert
from ..model import Domain
from ..profiles import Pinning

PINS = ("vcpupin", "emulatorpin", "iothreadpin")


def _clamp(cpus: frozenset[int], allowed: frozenset[int]) -> frozenset[int]:
    inside = cpus & allowed
    return inside if inside else allowed


def _cputune(dom, drop: tuple[str, ...]) -> etree._Element:
    new = E("cputune")
    old = dom.find("cputune")
    if old is not None:
        for child in old:
            if not isinstance(child.tag, str) or child.tag not in drop:
                new.append(clone(child))
    return new


def _vcpu(dom, fields: dict, reason: str) -> list:
    """Set fields of ``<vcpu>`` (Domain declarations -> values); without one (libvirt's default:
    1 vCPU), write it out whole, count included, since libvirt refuses a ``<vcpu>`` without a count."""
    if dom.find("vcpu") is not None:
        return [prop.edit(dom, value, reason) for prop, value in fields.items()]
    attrs = {prop.attr: prop.text(value) for prop, value in fields.items()}
    return [Put(dom.node, E("vcpu", attrs, text=str(dom.vcpus)), f"no <vcpu>: libvirt's default of {dom.vcpus}, "
                f"written out; {reason}")]


def _put_cputune(dom, new, reason):
    old = dom.find("cputune")
    if len(new) == 0:
        return [Remove(old, reason)] if old is not None else []
    return [Put(dom.node, new, reason)]


def dedicated(ctx, dom):
    pl = ctx.placement
    p = ctx.profile
    edits = _vcpu(dom, {Domain.vcpu_placement: Domain.VCPU_PLACEMENT_STATIC, Domain.vcpu_cpuset: None},
                  "every vCPU is pinned explicitly: per-vCPU pins replace the domain-wide cpuset")
    drop = PINS + (("vcpusched",) if p.cpu_scheduler != "none" else ())
    new = _cputune(dom, drop)
    for vcpu, cpu in enumerate(pl.pins):
        insert(new, E("vcpupin", {"vcpu": vcpu, "cpuset": cpu}))
    insert(new, E("emulatorpin", {"cpuset": cpuset.format(pl.emulator)}))
    node_of_cell = [c.node for c in pl.cells] or list(pl.nodes)
    for i, iothread in enumerate(dom.iothread_ids()):
        node = node_of_cell[i % len(node_of_cell)]
        local = pl.emulator & frozenset(ctx.host.cell(node).cpus)
        insert(new, E("iothreadpin", {"iothread": iothread, "cpuset": cpuset.format(local or pl.emulator)}))
    if p.cpu_scheduler != "none":
        insert(new, E("vcpusched", {"vcpus": cpuset.format(range(len(pl.pins))),
                                    "scheduler": p.cpu_scheduler, "priority": p.cpu_priority}))
    nodes = cpuset.format(pl.nodes)
    if pl.emulator_with_vcpus:
        where = "emulator and iothreads beside them (under TCG the emulator runs the guest's timers)"
    else:
        where = f"emulator and iothreads on the shared CPUs {cpuset.format(pl.emulator)}"
    reason = f"a host CPU per vCPU on node {nodes}, on cores nobody else runs on; {where}"
    return edits + _put_cputune(dom, new, reason)


def shared(ctx, dom):
    """node and float: a cpuset for the vCPUs, and existing pins kept inside it."""
    pl = ctx.placement
    allowed = pl.cpuset if pl.cpuset is not None else frozenset(ctx.host.cpus)
    online = frozenset(ctx.host.cpus)
    edits = []
    current = dom.vcpu_cpuset
    if pl.mode == Pinning.NODE:
        target = pl.cpuset
        why = f"vCPUs stay on node {cpuset.format(pl.nodes)} with their memory, off other domains' dedicated cores" if pl.nodes else "vCPUs stay off other domains' dedicated cores"
    elif pl.cpuset is not None:
        target = _clamp(current, allowed) if current else allowed
        why = "keep floating vCPUs off the cores other domains hold as dedicated"
    elif current and not current <= online:
        target = _clamp(current, online)
        why = "the cpuset named CPUs this host does not have"
    else:
        target = None
    if target is not None:
        value = None if target == online else target
        if value is not None or current:
            edits += _vcpu(dom, {Domain.vcpu_cpuset: value}, why)
        if dom.vcpu_placement == Domain.VCPU_PLACEMENT_AUTO:
            edits += _vcpu(dom, {Domain.vcpu_placement: Domain.VCPU_PLACEMENT_STATIC},
                           "numad placement would ignore the cpuset")
    old = dom.find("cputune")
    if old is not None:
        new = _cputune(dom, ())
        changed = False
        for el in xmltext.elements(new):
            if el.tag in PINS and el.get("cpuset") is not None:
                pins = cpuset.parse(el.get("cpuset"))
                fixed = _clamp(pins, allowed & online)
                if fixed != pins:
                    el.set("cpuset", cpuset.format(fixed))
                    changed = True
        if changed:
            edits.extend(_put_cputune(dom, new, "pins moved off CPUs that are dedicated to other domains or absent"))
    return edits


def run(ctx, dom):
    if ctx.placement.dedicated:
        return dedicated(ctx, dom)
    return shared(ctx, dom)
