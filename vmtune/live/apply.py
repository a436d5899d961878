"""``vmtune apply`` and ``vmtune revert`` over a libvirt connection.

``apply`` reads the host of the URI (``hostview.of``: this machine's sysfs for its system daemon,
libvirt's host for any other) and every domain (domains), plans the targets
(planner: dedicated profiles first, one ledger for the whole host), and then, unless it is a dry
run: keeps each changed domain's XML as its original (originals; only before the first apply),
defines the new XML (unless the domain's definition changed since it was read: then it stops
there), and with ``live`` moves a running domain's vCPUs, emulator and iothreads onto
the new pins. When libvirt refuses one definition, the domains defined before it in the same run
get their previous XML back, and the error is raised.

Hugepages: the host's free pages exclude what running domains hold, while the ledger counts every
domain's claim, running or not; so the pages that running domains hold (by their live XML) are
added back to the host before planning, and each page is counted once.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..placement import claims as claims_mod
from .. import config as config_mod
from .. import cpuset
from ..placement import holdings
from ..xml import xmlsafe
from ..errors import InvalidInput, VmtuneError
from ..host import Host
from ..xml.model import Domain
from . import connect, domains, hostview, planner
from .originals import Originals

NEXT_BOOT = "memory binding, hugepages and device changes take effect at the next boot"


@dataclass
class Outcome:
    """What happened to one domain."""

    name: str
    uuid: str
    state: str
    active: bool
    step: planner.Step
    before: str
    defined: bool = False
    original_saved: bool = False
    live: dict | None = None  # what --live moved: {"vcpus": {v: cpus}, "emulator": cpus, "iothreads": {id: cpus}}
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        result = self.step.result
        return {
            "name": self.name,
            "uuid": self.uuid,
            "state": self.state,
            "profile": self.step.profile,
            "skipped": str(self.step.error) if self.step.error else None,
            "changed": self.step.changed,
            "defined": self.defined,
            "original_saved": self.original_saved,
            "changes": [c.to_dict() for c in result.changes] if result else [],
            "placement": result.placement if result else None,
            "warnings": list(result.warnings) if result else [],
            "live": self.live,
            "notes": list(self.notes),
        }


def with_held_pages(host: Host, every: Sequence[domains.Defined]) -> Host:
    """``host`` with the hugepages that running domains hold added back to the free counts."""
    held: dict[tuple[int, int], int] = defaultdict(int)
    for d in every:
        if d.live_xml:
            for key, pages in claims_mod.read(d.live_xml, host).hugepages.items():
                held[key] += pages
    if not held:
        return host
    cells = []
    for cell in host.cells:
        pages = dict(cell.pages)
        for (node, size), count in held.items():
            if node == cell.id and size in pages:
                pages[size] += count
        cells.append(dataclasses.replace(cell, pages=pages))
    return dataclasses.replace(host, cells=tuple(cells))


def _select(conn, uri: str, every: list[domains.Defined], names: Sequence[str] | None,
            match: Sequence[str]) -> list[domains.Defined]:
    if names is None:
        chosen = [d for d in every if d.persistent and (not match or any(fnmatch.fnmatchcase(d.name, g) for g in match))]
        return chosen
    by_uuid = {d.uuid: d for d in every}
    chosen, seen = [], set()
    for name in names:
        uuid = domains.lookup(conn, name, uri).UUIDString()
        if uuid in seen:
            continue
        seen.add(uuid)
        d = by_uuid.get(uuid)
        if d is None:  # defined after the listing
            d = domains.read(conn.lookupByUUIDString(uuid), secure=True)
            every.append(d)
        if not d.persistent:
            raise InvalidInput(f"{name} is a transient domain (virsh create): vmtune apply tunes defined "
                               "domains; virsh define its XML first")
        chosen.append(d)
    return chosen


def cpumap(cpus: frozenset[int], ncpus: int) -> tuple[bool, ...]:
    return tuple(i in cpus for i in range(ncpus))


def move_live(conn, dom, new_xml: str, host: Host) -> dict:
    """Pin a running domain's vCPUs, emulator and iothreads as ``new_xml`` says, now
    (VIR_DOMAIN_AFFECT_LIVE). Threads without a pin of their own go where libvirt would start them
    (holdings.reach: the ``<vcpu cpuset>``, else every host CPU)."""
    live = connect.libvirt().VIR_DOMAIN_AFFECT_LIVE
    ncpus = conn.getCPUMap()[0]
    reach = holdings.reach(Domain(xmlsafe.parse(new_xml, "domain XML")), frozenset(c for c in host.cpus if c < ncpus))
    moved: dict = {"vcpus": {}, "emulator": None, "iothreads": {}}
    for vcpu in sorted(info[0] for info in dom.vcpus()[0]):
        cpus = reach.vcpu(vcpu)
        dom.pinVcpuFlags(vcpu, cpumap(cpus, ncpus), live)
        moved["vcpus"][str(vcpu)] = cpuset.format(cpus)
    dom.pinEmulator(cpumap(reach.emulator, ncpus), live)
    moved["emulator"] = cpuset.format(reach.emulator)
    for iothread in sorted(info[0] for info in dom.ioThreadInfo(live)):
        cpus = reach.iothread(iothread)
        dom.pinIOThread(iothread, cpumap(cpus, ncpus), live)
        moved["iothreads"][str(iothread)] = cpuset.format(cpus)
    return moved


def apply(
    conn,
    uri: str,
    names: Sequence[str] | None,
    *,
    match: Sequence[str] = (),
    profile: str | None = None,
    live: bool = False,
    dry_run: bool = False,
    config: config_mod.Config | None = None,
    force_virtio: bool = False,
    originals: Originals | None = None,
    seen: hostview.Seen | None = None,
) -> list[Outcome]:
    """Tune ``names`` (None: every defined domain, or those whose name matches a ``match`` glob),
    on the host of ``uri`` (``seen``; default ``hostview.of(conn, uri)``, this machine's /sys for
    its system daemon).

    Returns one Outcome per domain in plan order (skipped domains first). Nothing is defined when
    ``dry_run``, or when planning fails (InvalidInput, DoesNotFit: the message names the domain).
    """
    config = config or config_mod.Config()
    originals = originals or Originals()
    every = domains.every(conn, secure=True)
    chosen = _select(conn, uri, every, names, match)
    if not chosen:
        raise InvalidInput("no defined domain matches " + " ".join(repr(g) for g in match) if match
                           else "there is no defined domain to apply")
    seen = seen or hostview.of(conn, uri)
    host = with_held_pages(seen.host, every)
    by_uuid = {d.uuid: d for d in chosen}
    targets = [planner.Target(d.uuid, d.xml, profile) for d in chosen]
    others = [d.xml for d in every if d.uuid not in by_uuid]
    steps = planner.plan(host, targets, others, config=config, force_virtio=force_virtio,
                         skip_unsupported=names is None)
    outcomes = []
    for s in steps:
        d = by_uuid[s.target.key]
        outcomes.append(Outcome(s.name, d.uuid, d.state, d.active, s, d.xml))
    if dry_run:
        return outcomes
    _define(conn, uri, outcomes, originals)
    for o in outcomes:
        if not o.active:
            continue
        # --live also moves a domain whose definition was right already but whose threads are not
        # (applied earlier without --live): moving threads that are in place already is harmless
        if live and (o.defined or _drifted(host, o.step.result.xml, by_uuid[o.uuid].live_xml)):
            dom = conn.lookupByUUIDString(o.uuid)
            with connect.failures(conn, uri, f"{o.name}: --live"):
                o.live = move_live(conn, dom, o.step.result.xml, host)
            o.notes.append(f"vCPUs, emulator and iothreads moved now; {NEXT_BOOT}")
        elif o.defined:
            o.notes.append("the new definition takes effect at the next boot (--live moves vCPUs, emulator "
                           "and iothreads now)")
    return outcomes


def _drifted(host: Host, xml: str, live_xml: str | None) -> bool:
    from ..placement.audit import live_drift

    return bool(live_xml) and live_drift(host, xml, live_xml) is not None


def _define(conn, uri: str, outcomes: list[Outcome], originals: Originals) -> None:
    lv = connect.libvirt()
    done: list[Outcome] = []
    for o in outcomes:
        if not o.step.changed:
            continue
        try:
            now = conn.lookupByUUIDString(o.uuid).XMLDesc(lv.VIR_DOMAIN_XML_INACTIVE | lv.VIR_DOMAIN_XML_SECURE)
            if now != o.before:
                raise VmtuneError("its definition changed while vmtune planned it; run vmtune apply again")
            o.original_saved = originals.save(o.uuid, o.before)
            conn.defineXML(o.step.result.xml)
        except (lv.libvirtError, VmtuneError) as exc:
            _roll_back(conn, done + [o], originals)
            why = connect.message(exc)
            undone = f"; the {len(done)} domain(s) defined before it have their previous XML again" if done else ""
            with connect.failures(conn, uri):
                conn.getLibVersion()  # a dropped connection says so (Unavailable)
            what = why if isinstance(exc, VmtuneError) else f"libvirt refused the tuned XML: {why}"
            raise VmtuneError(f"{o.name}: {what}{undone}") from None
        o.defined = True
        done.append(o)


def _roll_back(conn, outcomes: list[Outcome], originals: Originals) -> None:
    for o in reversed(outcomes):
        try:
            if o.defined:
                conn.defineXML(o.before)
            if o.original_saved:
                originals.remove(o.uuid)
        except Exception:  # noqa: BLE001,S110 - best effort: the error that started this is raised
            pass


@dataclass
class Reverted:
    name: str
    uuid: str
    state: str

    def to_dict(self) -> dict:
        return {"name": self.name, "uuid": self.uuid, "state": self.state, "reverted": True}


@dataclass
class Original:
    """What ``vmtune revert`` would define: the domain's XML now, and the one from before its first apply."""

    name: str
    uuid: str
    state: str
    now: str
    original: str | None  # None: never applied, or reverted already
    source: str | None = None  # "kept" (the originals store), "record" (vmtune's record in the XML), None

    def to_dict(self) -> dict:
        return {"name": self.name, "uuid": self.uuid, "state": self.state, "reverted": False,
                "original": self.original is not None, "source": self.source, "before": self.now,
                "after": self.original}


def original_of(conn, uri: str, name: str, originals: Originals | None = None) -> Original:
    """The kept original of ``name`` (checked to be that domain's), and its XML now; nothing changes."""
    dom = domains.lookup(conn, name, uri)
    uuid = dom.UUIDString()
    originals = originals or Originals()
    original = originals.load(uuid)
    if original is not None:
        kept = Domain(xmlsafe.parse(original, "original domain XML"))
        if (kept.uuid or "").lower() != uuid.lower():
            raise InvalidInput(f"{originals.path(uuid)} belongs to another domain (uuid {kept.uuid})")
    lv = connect.libvirt()
    now = dom.XMLDesc(lv.VIR_DOMAIN_XML_INACTIVE | lv.VIR_DOMAIN_XML_SECURE)
    source = "kept" if original is not None else None
    if original is None:  # no copy kept: vmtune's record in the domain itself, if it has one
        from ..driver import untune

        back = untune(now)
        original, source = (back.xml, "record") if back.changed else (None, None)
    return Original(dom.name(), uuid, domains.state_text(dom.state()[0]), now, original, source)


def revert(conn, uri: str, name: str, originals: Originals | None = None) -> Reverted:
    """Define again the XML ``name`` had before vmtune's first apply, then forget it: the copy kept
    in the originals store, else what vmtune's record in the domain gives back (``untune``)."""
    originals = originals or Originals()
    found = original_of(conn, uri, name, originals)
    if found.original is None:
        raise InvalidInput(f"{name}: no original XML in {originals.folder} and no record of vmtune's changes "
                           "in its <metadata> (vmtune never changed it, or it was reverted already)")
    conn.defineXML(found.original)
    if found.source == "kept":
        originals.remove(found.uuid)
    return Reverted(found.name, found.uuid, found.state)
