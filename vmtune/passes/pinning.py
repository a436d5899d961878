"""<vcpu> and <cputune>: dedicated pins, or a cpuset that keeps floating vCPUs off others' cores.

Real-time threads (``fifo``/``rr`` in ``<vcpusched>``, ``<emulatorsched>``, ``<iothreadsched>``)
never float and never crowd the host: under a dedicated profile a real-time vCPU has its CPU, and a
real-time emulator or iothread gets a CPU of its own (placement ``rt``); the domain's own real-time
subset is kept as it is, and the profile's scheduler goes to ``realtime_vcpus`` only where the
domain has none. Under the other profiles, which give no thread a CPU of its own, the real-time
policy goes, with a warning. The hand's ``<emulatorpin>`` and ``<iothreadpin>`` stay where they
avoid the dedicated CPUs (vmtune/placement/intent.py).
"""

from lxml import etree

from .. import cpuset
from ..placement import holdings, housekeeping, intent
from ..xml import xmltext
from ..xml.edits import E, Put, Remove, Warn, clone, insert, insert_all
from ..xml.model import Domain, pins_of
from ..placement.search import taken_cores
from ..profiles import Pinning

PINS = ("vcpupin", "emulatorpin", "iothreadpin")
SCHEDS = ("vcpusched", "emulatorsched", "iothreadsched")


def _clamp(cpus: frozenset[int], allowed: frozenset[int]) -> frozenset[int]:
    inside = cpus & allowed
    return inside if inside else allowed


def _cputune(dom, old, drop: tuple[str, ...]) -> etree._Element:
    """A new ``<cputune>`` with the children of ``old`` (the domain's, or None) but those in ``drop``."""
    new = E("cputune", into=dom.node)
    if old is not None:
        for child in old:
            if not isinstance(child.tag, str) or child.tag not in drop:
                new.append(clone(child))
    return new


def _vcpu(dom, fields: dict, reason: str) -> list:
    """Set fields of ``<vcpu>`` (Domain declarations -> values); without one (libvirt's default:
    1 vCPU), write it out whole, count included, since libvirt refuses a ``<vcpu>`` without a count."""
    if dom.vcpu_element is not None:
        return [edit for prop, value in fields.items() for edit in prop.edits(dom, value, reason)]
    attrs = {prop.attr: prop.text(value) for prop, value in fields.items()}
    return [Put(dom.node, E("vcpu", attrs, text=str(dom.vcpus)), f"no <vcpu>: libvirt's default of {dom.vcpus}, "
                f"written out; {reason}")]


def _put_cputune(dom, old, new, reason):
    """``new`` in place of ``old`` (the domain's ``<cputune>``, or None), or no ``<cputune>`` if it is empty."""
    if len(new) == 0:
        return [Remove(old, reason)] if old is not None else []
    return [Put(dom.node, new, reason)]


def _show(el) -> str:
    return "<" + el.tag + "".join(f" {k}='{v}'" for k, v in el.attrib.items()) + ">"


def _realtime(el) -> bool:
    return isinstance(el.tag, str) and el.tag in SCHEDS and el.get("scheduler") in intent.REALTIME


def _helper_pins(ctx, dom, held: frozenset[int]) -> tuple[frozenset[int], dict[int, frozenset[int]], list]:
    """The emulator's pin and each iothread's: a real-time one on its CPU of its own, the hand's
    where it avoids ``held`` (the dedicated cores), else the placement's housekeeping CPUs (an
    iothread on those of its guest cell's node); and the warnings of what gave way."""
    pl, wants = ctx.placement, ctx.intent
    rt = list(pl.rt)
    warns = []
    if wants.rt_emulator and rt:
        emulator = frozenset({rt.pop(0)})
    elif wants.emulatorpin is not None and not wants.emulatorpin & held:
        emulator = wants.emulatorpin
    else:
        emulator = pl.emulator
        if wants.emulatorpin is not None and wants.emulatorpin != emulator:
            warns.append(Warn(f"<emulatorpin cpuset='{cpuset.format(wants.emulatorpin)}'> moved to "
                              f"{cpuset.format(emulator)}: it ran on the dedicated CPUs "
                              f"{cpuset.format(wants.emulatorpin & held)}"))
    hand = dict(wants.iothreadpins)
    node_of_cell = [c.node for c in pl.cells] or list(pl.nodes)
    iothreads = {}
    for i, iothread in enumerate(dom.iothread_ids()):
        if iothread in wants.rt_iothreads and rt:
            iothreads[iothread] = frozenset({rt.pop(0)})
        elif iothread in hand and not hand[iothread] & held:
            iothreads[iothread] = hand[iothread]
        else:
            local = pl.emulator & frozenset(ctx.host.cell(node_of_cell[i % len(node_of_cell)]).cpus)
            iothreads[iothread] = local or pl.emulator
            if iothread in hand and hand[iothread] != iothreads[iothread]:
                warns.append(Warn(f"<iothreadpin iothread='{iothread}' cpuset='{cpuset.format(hand[iothread])}'> "
                                  f"moved to {cpuset.format(iothreads[iothread])}: it ran on the dedicated CPUs "
                                  f"{cpuset.format(hand[iothread] & held)}"))
    return emulator, iothreads, warns


def _scheds(ctx, dom, new, emulator_rt: bool, rt_iothreads: frozenset[int]) -> list:
    """The real-time schedulers: the domain's own kept (their threads have CPUs of their own), the
    profile's on ``realtime_vcpus`` where the domain has none; those left without a CPU go."""
    p, wants = ctx.profile, ctx.intent
    warns = []
    for el in list(new):
        if not _realtime(el):
            continue
        if el.tag == "emulatorsched" and not emulator_rt:
            new.remove(el)
            warns.append(Warn(f"{_show(el)} removed: no CPU of its own was left for a real-time emulator"))
        elif el.tag == "iothreadsched" and not intent.ids(el.get("iothreads")) <= rt_iothreads:
            new.remove(el)
            warns.append(Warn(f"{_show(el)} removed: no CPU of its own was left for a real-time iothread"))
    if p.cpu_scheduler == "none" or wants.rt_vcpus:
        return warns
    vcpus = intent.realtime_mask(p.cpu_realtime_vcpus, dom.vcpus) or frozenset({0})
    if len(vcpus) == dom.vcpus and dom.vcpus == 1:
        warns.append(Warn("a domain of one vCPU has no housekeeping vCPU: its only vCPU runs real-time "
                          f"({p.cpu_scheduler}), and the guest's own kernel threads share it"))
    # one a vCPU, as libvirt writes them back after a define
    insert_all(new, (E("vcpusched", {"vcpus": vcpu, "scheduler": p.cpu_scheduler, "priority": p.cpu_priority}, into=new)
                     for vcpu in sorted(vcpus)))
    return warns


def dedicated(ctx, dom):
    pl, p, wants = ctx.placement, ctx.profile, ctx.intent
    edits = _vcpu(dom, {Domain.vcpu_placement: Domain.VCPU_PLACEMENT_STATIC, Domain.vcpu_cpuset: None},
                  "every vCPU is pinned explicitly: per-vCPU pins replace the domain-wide cpuset")
    own_rt = bool(wants.rt_vcpus)
    drop = PINS + (("vcpusched",) if p.cpu_scheduler != "none" and not own_rt else ())
    old = dom.cputune
    new = _cputune(dom, old, drop)
    insert_all(new, (E("vcpupin", {"vcpu": vcpu, "cpuset": cpu}, into=new) for vcpu, cpu in enumerate(pl.pins)))
    held = taken_cores(ctx.host, frozenset(pl.pins) | ctx.ledger.dedicated) | frozenset(pl.rt)
    emulator, iothreads, warns = _helper_pins(ctx, dom, held)
    emulator_text = cpuset.format(emulator)  # (the iothreads' CPUs are the emulator's, most often)
    insert(new, E("emulatorpin", {"cpuset": emulator_text}, into=new))
    insert_all(new, (E("iothreadpin", {"iothread": iothread,
                                       "cpuset": emulator_text if cpus == emulator else cpuset.format(cpus)}, into=new)
                     for iothread, cpus in iothreads.items()))
    rt_iothreads = frozenset(i for i, cpus in iothreads.items() if len(cpus) == 1 and next(iter(cpus)) in pl.rt)
    warns += _scheds(ctx, dom, new, emulator <= frozenset(pl.rt) and bool(pl.rt), rt_iothreads)
    nodes = cpuset.format(pl.nodes)
    hand_emulator = emulator == wants.emulatorpin
    hand_io = {i for i, c in wants.iothreadpins if iothreads.get(i) == c}
    placed = (["emulator"] if not hand_emulator and emulator == pl.emulator else []) + \
        (["iothreads"] if any(i not in hand_io and i not in rt_iothreads for i in iothreads) else [])
    if pl.emulator_with_vcpus:
        where = "emulator and iothreads beside them (under TCG the emulator runs the guest's timers)"
    elif placed:
        shared_text = emulator_text if emulator == pl.emulator else cpuset.format(pl.emulator)
        where = f"{' and '.join(placed)} on the shared CPUs {shared_text}"
    else:
        where = ""
    whose = ("the hand's own pins, kept" if wants.hand else "its pins as they were, kept") if pl.hand else \
        "a host CPU per vCPU"
    reason = f"{whose} on node {nodes}, on cores nobody else runs on" + (f"; {where}" if where else "")
    kept = ([f"<emulatorpin> {emulator_text}"] if hand_emulator else []) + \
        [f"<iothreadpin iothread='{i}'> {cpuset.format(c)}" for i, c in wants.iothreadpins if i in hand_io]
    if kept:
        whose = "the hand's" if wants.hand else "its"
        reason += f"; {whose} own pins kept, off the dedicated CPUs: {', '.join(kept)}"
    if pl.rt:
        reason += f"; real-time emulator or iothreads on CPUs of their own ({cpuset.format(pl.rt)})"
    if not pl.emulator_with_vcpus:
        helpers = [emulator] if emulator != frozenset(pl.rt[:1]) or not wants.rt_emulator else []
        helpers += [cpus for i, cpus in iothreads.items() if i not in rt_iothreads]
        loads = dict(ctx.ledger.helpers)
        for cpu, n in housekeeping.load(helpers).items():
            loads[cpu] = loads.get(cpu, 0.0) + n
        crowd = housekeeping.warning(loads, frozenset().union(*helpers) - held if helpers else frozenset())
        warns += [Warn(crowd)] if crowd else []
    return edits + _put_cputune(dom, old, new, reason) + warns


def _no_realtime(ctx, new) -> list:
    """Under a profile that gives no thread a CPU of its own: the real-time schedulers go."""
    warns = []
    for el in list(new):
        if _realtime(el):
            new.remove(el)
            warns.append(Warn(f"{_show(el)} removed: the {ctx.profile.name} profile gives its threads no CPU of "
                              "their own, and a real-time thread on shared CPUs starves the host's work there"))
    return warns


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
    old = dom.cputune
    if old is not None:
        new = _cputune(dom, old, ())
        warns = _no_realtime(ctx, new)
        changed = bool(warns)
        lost = []  # vCPU pins none of whose CPUs stay
        for el in xmltext.elements(new):
            if el.tag in PINS and el.get("cpuset") is not None:
                pins = cpuset.parse(el.get("cpuset"))
                fixed = _clamp(pins, allowed & online)
                if fixed != pins:
                    el.set("cpuset", cpuset.format(fixed))
                    changed = True
                    lost += [el] if el.tag == "vcpupin" and not pins & fixed else []
        unpinned = _unpin_moved(ctx, dom, new, lost)
        if changed:
            why = ("real-time schedulers removed (no CPU of their own under this profile)" if warns else "")
            moved = "pins moved off CPUs that are dedicated to other domains or absent"
            floats = "the vCPUs whose pins had to move float instead (pinned alone, they would hold a shared CPU)"
            reason = "; ".join(w for w in (why, moved if not warns or _moved(old, new) else "",
                                           floats if unpinned else "") if w)
            edits.extend(_put_cputune(dom, old, new, reason))
            edits.extend(warns + unpinned)
    return edits


def _unpin_moved(ctx, dom, new, moved: list) -> list:
    """A floating domain whose pins hold their CPUs as dedicated (holdings.holds_pins: every vCPU
    pinned alone) only because vmtune moved some of them (their CPUs are another domain's now)
    would hold CPUs that other domains may share: the moved pins go, and those vCPUs float over the
    domain's cpuset instead."""
    if not moved:
        return []
    pins = pins_of(el for el in xmltext.elements(new) if el.tag == "vcpupin")
    if not holdings.holds_pins(ctx.profile.name, pins, dom.vcpus):
        return []
    for el in moved:
        new.remove(el)
    gone = ", ".join(f"vCPU {el.get('vcpu')}" for el in moved)
    return [Warn(f"{gone}: pinned to CPUs other domains hold as dedicated; unpinned, to float over the "
                 "domain's cpuset (pinned alone on a CPU vmtune chose, it would hold that CPU as dedicated, "
                 "beside domains that share it)")]


def _moved(old, new) -> bool:
    pins = [(el.tag, el.get("cpuset")) for el in xmltext.elements(old) if el.tag in PINS]
    return pins != [(el.tag, el.get("cpuset")) for el in xmltext.elements(new) if el.tag in PINS]


def run(ctx, dom):
    if ctx.placement.dedicated:
        return dedicated(ctx, dom)
    return shared(ctx, dom)
