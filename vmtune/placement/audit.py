"""What is wrong with the domains of one host, and what is left on it. Pure: no libvirt, no I/O.

    from vmtune.placement.audit import audit

    report = audit(host, [(xml_a, "running"), (xml_b, "shut off")], config=cfg)
    report.ok              # True when there is no problem
    report.rows            # one Row per domain, in the order given
    report.problems        # Problems, sorted (kind, then domains)
    report.nodes           # one NodeFree per host node
    report.to_dict()       # the same, JSON-ready (``vmtune plan --json``)

The interface (stable: ``vmtune plan`` and ``vmtune doctor`` both call it)
-------------------------------------------------------------------------
``audit(host, domains, *, config=None) -> Report``

``host``
    a ``vmtune.Host`` whose cells' ``pages`` are the *free* hugepages per size, as
    ``Host.from_sysfs`` reads them and ``vmtune.live.hostview`` gets them from libvirt's
    ``getFreePages``. The hugepages of domains that run now are already out of those counts.
``domains``
    ``(xml, state)`` pairs. ``xml`` is a ``<domain>`` (persistent or live XML), or a
    ``<domstatus>`` as libvirt keeps it in ``/run/libvirt/qemu/NAME.xml`` (its ``<domain>`` is
    read). ``state`` is libvirt's state as virsh prints it: ``"running"``, ``"paused"``,
    ``"shut off"``, ...; every state but ``"shut off"`` holds its hugepages now.
``config``
    a ``vmtune.Config``: its ``reserved_cpus`` (default: ``host.default_reserved()``) and its
    ``profiles_dir``. Default: ``Config()``.

Raises ``InvalidInput`` (one line, naming the domain's position) when an XML is malformed.

What counts
-----------
Every fact about one domain comes from vmtune/placement/holdings.py, the rules the rewriter's ledger and the hook
use too. A domain is *dedicated* when it holds host CPUs for itself: tagged latency/realtime with
pins, or every vCPU pinned to one CPU. A thread *can run* on: its
``<vcpupin>``/``<emulatorpin>``/``<iothreadpin>`` cpuset, else the ``<vcpu cpuset>``, else every
host CPU. Its hugepages are taken per host node and size as libvirt backs each guest cell and memory
device (``Row.pages``; node ``None``: numatune names no node, any node will do). Cores count as the
placement counts them: a thread on the sibling of a dedicated CPU shares its core. One ledger for
the whole host: a shut-off domain still holds its CPUs and memory (it gets them back when it
starts).

Problem kinds (``Problem.kind``; consumers should show kinds they do not know as they are):

``cpu-overlap``      two dedicated domains hold the same host CPU (``cpus``: the shared ones)
``core-overlap``     two dedicated domains on threads of one core, no CPU in common (``cpus``:
                     their CPUs on the shared cores)
``float``            a domain's vCPUs, emulator or iothreads can run on a core that another domain
                     holds as dedicated (``domains``: the floating one first, then the holder);
                     the reserved CPUs never count: they are shared by design
``not-applied``      tagged with a dedicated profile (latency, realtime, or yours) but not every
                     vCPU is pinned to one CPU: ``vmtune apply`` has not run on it
``on-reserved``      tagged with a dedicated profile, with vCPUs pinned to reserved CPUs
``unknown-profile``  tagged with a profile that does not exist here
``hugepages``        the shut-off domains bound to a node (or unbound, for ``nodes`` all of
                     them) need more hugepages of a size than the node has free
``not-live``         (``live_drift``, for callers that have both XMLs of a running domain) its
                     threads run on other CPUs than its definition pins: applied without ``--live``
``housekeeping``     a housekeeping CPU (not held as dedicated) carries more than
                     ``housekeeping.LIMIT`` emulator and iothreads of dedicated domains, each thread
                     counted 1 and split over the CPUs of its pin (``cpus``: those CPUs)

``Report.nodes`` gives per node: its CPUs, the reserved ones, those held as dedicated, those still
free for dedicated vCPUs, its memory, the normal memory bound strictly, what placement sees as
free normal memory, and per hugepage size the free pages, the pages shut-off domains need and what
is left.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from itertools import combinations

from lxml import etree

from . import claims as claims_mod
from .. import config as config_mod
from .. import cpuset, profiles
from . import holdings, housekeeping, locality
from ..xml import units, validate, xmlsafe
from ..errors import InvalidInput
from ..host import Host
from ..xml.model import Domain
from .search import taken_cores

CPU_OVERLAP = "cpu-overlap"
CORE_OVERLAP = "core-overlap"
FLOAT = "float"
NOT_APPLIED = "not-applied"
ON_RESERVED = "on-reserved"
UNKNOWN_PROFILE = "unknown-profile"
HUGEPAGES = "hugepages"
NOT_LIVE = "not-live"
DEVICE_REMOTE = "device-remote"
DEVICE_SHARED = "device-shared"
HOUSEKEEPING = "housekeeping"
KINDS = (CPU_OVERLAP, CORE_OVERLAP, FLOAT, NOT_APPLIED, ON_RESERVED, UNKNOWN_PROFILE, HUGEPAGES, NOT_LIVE,
         DEVICE_REMOTE, DEVICE_SHARED, HOUSEKEEPING)

SHUT_OFF = "shut off"

__all__ = ["KINDS", "NodeFree", "Problem", "Report", "Row", "audit", "holds_now", "live_drift"]


@dataclass(frozen=True)
class Row:
    """One domain, as ``vmtune plan`` shows it."""

    name: str
    uuid: str | None
    profile: str | None  # its tag, None when untagged
    state: str
    vcpus: int
    memory_kib: int
    pinned: frozenset[int]  # every host CPU some <vcpupin> names
    dedicated: frozenset[int]  # the host CPUs it holds for itself (empty: it floats)
    cpuset: frozenset[int] | None  # <vcpu cpuset>, None when absent
    nodes: tuple[int, ...]  # nodes its memory is bound to and its pinned CPUs are on
    hugepage_kib: int | None  # the hugepage size backing most of its memory, None without hugepages
    hugepages: dict[int, int] = field(default_factory=dict)  # node -> pages of hugepage_kib it takes there
    pages: dict[tuple[int | None, int], int] = field(default_factory=dict)  # (node, None: any; size) -> pages

    def to_dict(self) -> dict:
        return {
            "name": self.name, "uuid": self.uuid, "profile": self.profile, "state": self.state,
            "vcpus": self.vcpus, "memory_kib": self.memory_kib,
            "pinned": cpuset.format(self.pinned), "dedicated": cpuset.format(self.dedicated),
            "cpuset": None if self.cpuset is None else cpuset.format(self.cpuset),
            "nodes": list(self.nodes), "hugepage_kib": self.hugepage_kib,
            "hugepages": {str(n): c for n, c in sorted(self.hugepages.items())},
            "pages": {f"{'any' if n is None else n}:{s}": c
                      for (n, s), c in sorted(self.pages.items(), key=lambda kv: (kv[0][0] is None, kv[0]))},
        }


@dataclass(frozen=True)
class Problem:
    kind: str  # one of KINDS
    domains: tuple[str, ...]  # names (the uuid when a domain has no name)
    cpus: frozenset[int] = frozenset()
    nodes: tuple[int, ...] = ()
    message: str = ""  # one line

    def to_dict(self) -> dict:
        return {"kind": self.kind, "domains": list(self.domains), "cpus": cpuset.format(self.cpus),
                "nodes": list(self.nodes), "message": self.message}


@dataclass(frozen=True)
class NodeFree:
    """What is left on one node."""

    node: int
    cpus: frozenset[int]
    reserved: frozenset[int]  # kept for the host, emulators and iothreads
    dedicated: frozenset[int]  # held by domains as dedicated
    free_dedicated: frozenset[int]  # where new dedicated vCPUs can go (whole free cores)
    memory_kib: int  # total; 0 when unknown
    bound_kib: int  # normal memory that domains bind here strictly
    free_kib: int | None  # memory less the free hugepage pool less bound_kib; None when unknown
    hugepages: dict[int, tuple[int, int]] = field(default_factory=dict)  # size KiB -> (free, needed)

    def to_dict(self) -> dict:
        return {
            "node": self.node, "cpus": cpuset.format(self.cpus), "reserved": cpuset.format(self.reserved),
            "dedicated": cpuset.format(self.dedicated), "free_dedicated": cpuset.format(self.free_dedicated),
            "memory_kib": self.memory_kib, "bound_kib": self.bound_kib, "free_kib": self.free_kib,
            "hugepages": {str(size): {"free": free, "needed": need, "left": free - need}
                          for size, (free, need) in sorted(self.hugepages.items())},
        }


@dataclass(frozen=True)
class Report:
    rows: tuple[Row, ...]
    problems: tuple[Problem, ...]
    nodes: tuple[NodeFree, ...]
    # each row's domain as read (the model's view), for callers that draw more of it (vmtune map)
    parsed: tuple[Domain, ...] = field(default=(), compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {"ok": self.ok, "domains": [r.to_dict() for r in self.rows],
                "problems": [p.to_dict() for p in self.problems], "nodes": [n.to_dict() for n in self.nodes]}


def holds_now(state: str) -> bool:
    """True for every libvirt state but shut off: the domain's memory and hugepages are in use."""
    return " ".join(state.lower().replace("_", " ").replace("-", " ").split()) not in (SHUT_OFF, "shutoff")


# -- one domain -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Dom:
    row: Row
    claim: claims_mod.Claim
    vcpu_reach: frozenset[int]  # where its vCPUs without a pin of their own can run
    pinned_reach: frozenset[int]  # where its pinned vCPUs can run
    other_reach: dict[str, frozenset[int]]  # "emulator" / "iothreads" -> where they can run
    holds: bool
    all_single: bool  # every vCPU pinned to exactly one CPU
    dom: Domain


def _domain_of(xml: str | bytes, index: int) -> tuple[str, Domain]:
    where = f"domain XML {xmlsafe.source(xml) or f'#{index + 1}'}"  # its file, else its place
    root = xmlsafe.parse(xml, where)
    if root.tag == "domstatus":
        inner = root.find("domain")
        if inner is None:
            raise InvalidInput(f"{where}: <domstatus> without a <domain>")
        root = inner
    if root.tag != "domain":
        raise InvalidInput(f"{where}: expected a <domain>, got <{root.tag}>")
    text = etree.tostring(root, encoding="unicode")
    dom = Domain(root)
    try:
        validate.check_counts(dom)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from None
    return text, dom


def _reach(dom: Domain, everywhere: frozenset[int]):
    """(where its vCPUs without a pin of their own can run, where its pinned vCPUs can, where its
    emulator and iothreads can) by holdings.reach."""
    r = holdings.reach(dom, everywhere)
    vcpu_reach = r.default if any(v not in r.vcpus for v in range(dom.vcpus)) else frozenset()
    io_reach = frozenset().union(*(r.iothread(i) for i in dom.iothread_ids()))
    other = {"emulator": r.emulator}
    if io_reach:
        other["iothreads"] = io_reach
    return vcpu_reach, holdings.pinned(dom), other


def _read(host: Host, xml: str | bytes, state: str, index: int) -> _Dom:
    text, dom = _domain_of(xml, index)
    claim = claims_mod.read(text, host)
    vcpu_reach, pinned_reach, other = _reach(dom, frozenset(host.cpus))
    pages = {**claim.hugepages, **{(None, size): count for size, count in claim.unbound_pages.items()}}
    held: dict[int, int] = defaultdict(int)  # size -> KiB in pages of that size
    for (_, s), count in pages.items():
        held[s] += s * count
    size = max(held, key=lambda s: (held[s], s)) if held else None
    hugepages = {node: count for (node, s), count in claim.hugepages.items() if s == size}
    cpu_nodes = {host.cpus[c].node for c in pinned_reach if c in host.cpus}
    row = Row(
        name=dom.name or dom.uuid or f"#{index + 1}",
        uuid=dom.uuid,
        profile=dom.tagged_profile,
        state=state,
        vcpus=dom.vcpus,
        memory_kib=dom.memory_kib,
        pinned=pinned_reach,
        dedicated=claim.dedicated,
        cpuset=dom.vcpu_cpuset,
        nodes=tuple(sorted(set(claim.memory) | {n for n, _ in claim.hugepages} | cpu_nodes)),
        hugepage_kib=size,
        hugepages=hugepages,
        pages=pages,
    )
    return _Dom(row, claim, vcpu_reach, pinned_reach, other, holds_now(state), holdings.pinned_alone(dom), dom)


# -- the checks -------------------------------------------------------------------------------------
def _label(d: _Dom) -> str:
    return f"{d.row.name} ({d.row.profile})" if d.row.profile else d.row.name


def _overlaps(host: Host, doms: list[_Dom]) -> list[Problem]:
    out = []
    dedicated = [d for d in doms if d.claim.dedicated]
    for a, b in combinations(dedicated, 2):
        a, b = sorted((a, b), key=lambda d: d.row.name)
        shared = a.claim.dedicated & b.claim.dedicated
        names = (a.row.name, b.row.name)
        if shared:
            out.append(Problem(CPU_OVERLAP, names, shared, _nodes_of(host, shared),
                               f"{_label(a)} and {_label(b)} both hold {_cpus(shared)} as dedicated"))
            continue
        cores = taken_cores(host, a.claim.dedicated) & taken_cores(host, b.claim.dedicated)
        if cores:
            cpus = cores & (a.claim.dedicated | b.claim.dedicated)
            out.append(Problem(CORE_OVERLAP, names, cpus, _nodes_of(host, cpus),
                               f"{_label(a)} and {_label(b)} hold sibling threads of one core "
                               f"({_cpus(cpus)}): each slows the other"))
    return out


def _floats(host: Host, doms: list[_Dom], reserved: frozenset[int]) -> list[Problem]:
    out = []
    # reserved CPUs are the host's shared housekeeping CPUs (where placement puts emulators and
    # iothreads): running there is never a float, whoever pinned a vCPU to them
    holders = [(d, taken_cores(host, d.claim.dedicated) - reserved) for d in doms if d.claim.dedicated]
    for a in doms:
        threads = dict(a.other_reach)
        if a.vcpu_reach:
            threads["vCPUs"] = a.vcpu_reach
        if not a.claim.dedicated and a.pinned_reach:
            threads["vCPUs"] = threads.get("vCPUs", frozenset()) | a.pinned_reach
        for b, cores in holders:
            if b is a:
                continue
            hit = {what: cpus & cores for what, cpus in threads.items() if cpus & cores}
            if not hit:
                continue
            cpus = frozenset().union(*hit.values())
            which = ", ".join(w for w in ("vCPUs", "emulator", "iothreads") if w in hit)
            out.append(Problem(FLOAT, (a.row.name, b.row.name), cpus, _nodes_of(host, cpus),
                               f"{_label(a)}: its {which} can run on {_cpus(cpus)}, "
                               f"on the cores {_label(b)} holds as dedicated (vmtune apply {a.row.name})"))
    return out


def _profiles(doms: list[_Dom], profiles_dir: str | None) -> dict[str, profiles.Profile | None]:
    """The profile of each tag the domains carry, loaded once (None: no such profile here)."""
    known: dict[str, profiles.Profile | None] = {}
    for name in {d.row.profile for d in doms if d.row.profile}:
        try:
            known[name] = profiles.load(name, profiles_dir)
        except InvalidInput:
            known[name] = None
    return known


def _tags(doms: list[_Dom], known: dict[str, profiles.Profile | None], reserved: frozenset[int]) -> list[Problem]:
    out = []
    for d in doms:
        name = d.row.profile
        if not name:
            continue
        prof = known[name]
        if prof is None:
            out.append(Problem(UNKNOWN_PROFILE, (d.row.name,), message=(
                f"{d.row.name} is tagged with profile {name!r}, which does not exist here "
                f"(vmtune profiles lists them)")))
        elif prof.dedicated and not d.all_single:
            out.append(Problem(NOT_APPLIED, (d.row.name,), d.row.pinned, d.row.nodes, (
                f"{d.row.name} is tagged {name} but not every vCPU is pinned to a CPU of its own: "
                f"run vmtune apply {d.row.name}")))
        elif prof.dedicated and d.claim.dedicated & reserved:
            cpus = d.claim.dedicated & reserved
            out.append(Problem(ON_RESERVED, (d.row.name,), cpus, d.row.nodes, (
                f"{d.row.name} ({name}) has vCPUs pinned to the reserved {_cpus(cpus)}, which the host, "
                f"emulators and iothreads share: run vmtune apply {d.row.name}")))
    return out


def _devices(host: Host, doms: list[_Dom], known: dict[str, profiles.Profile | None]) -> list[Problem]:
    """device-remote: a dedicated domain away from every node its passthrough devices hang off;
    device-shared: one device passed through to two domains."""
    out = []
    for d in doms:
        prof = known.get(d.row.profile) if d.row.profile else None
        if prof is None or not prof.dedicated or not d.row.nodes or not d.claim.passthrough:
            continue
        for device in locality.away(locality.locate(host, d.dom).anchors, d.row.nodes):
            out.append(Problem(DEVICE_REMOTE, (d.row.name,), nodes=(device.node,), message=(
                f"{d.row.name} ({d.row.profile}) runs on node(s) {cpuset.format(d.row.nodes)}, and its "
                f"{device.what} is on node {device.node}: every DMA and interrupt crosses nodes "
                f"(vmtune apply {d.row.name} places it beside the device)")))
    for a, b in combinations(doms, 2):
        both = a.claim.passthrough & b.claim.passthrough
        if both:
            a, b = sorted((a, b), key=lambda d: d.row.name)
            what = ", ".join(f"{k} {v}" for k, v in sorted(both))
            out.append(Problem(DEVICE_SHARED, (a.row.name, b.row.name), message=(
                f"{a.row.name} and {b.row.name} both pass through {what}: only one of them can run at a time")))
    return out


def _housekeeping(host: Host, doms: list[_Dom]) -> list[Problem]:
    """housekeeping: a CPU no domain holds as dedicated that runs more than ``housekeeping.LIMIT``
    emulator and iothreads of dedicated domains."""
    loads = housekeeping.load(pin for d in doms for pin in d.claim.helpers)
    held = taken_cores(host, frozenset().union(*(d.claim.dedicated for d in doms)) if doms else frozenset())
    over = {c: n for c, n in housekeeping.crowded(loads).items() if c not in held}
    if not over:
        return []
    cpus = frozenset(over)
    names = tuple(sorted(d.row.name for d in doms if any(pin & cpus for pin in d.claim.helpers)))
    return [Problem(HOUSEKEEPING, names, cpus, _nodes_of(host, cpus), (
        f"{_cpus(cpus)} run up to {max(over.values()):.3g} emulator and iothreads of {len(names)} latency "
        f"domain{'s' if len(names) > 1 else ''} each (more than {housekeeping.LIMIT}): give the host more housekeeping "
        "CPUs (reserved_cpus in /etc/vmtune/vmtune.toml), then vmtune apply them"))]


def _cpus(cpus) -> str:
    return f"CPU{'s' if len(cpus) > 1 else ''} {cpuset.format(cpus)}"


def _hugepages(host: Host, doms: list[_Dom]) -> tuple[list[Problem], dict[tuple[int, int], int]]:
    need: dict[tuple[int, int], int] = defaultdict(int)
    who: dict[tuple[int, int], list[str]] = defaultdict(list)
    unbound: dict[int, int] = defaultdict(int)
    unbound_who: dict[int, list[str]] = defaultdict(list)
    for d in doms:
        if d.holds:
            continue  # its pages are out of the free counts already
        for key, pages in d.claim.hugepages.items():
            need[key] += pages
            who[key].append(d.row.name)
        for size, pages in d.claim.unbound_pages.items():
            unbound[size] += pages
            unbound_who[size].append(d.row.name)
    out = []
    for (node, size), pages in sorted(need.items()):
        free = host.cell(node).pages.get(size, 0) if node in host.node_ids else 0
        if pages > free:
            names = tuple(sorted(who[(node, size)]))
            out.append(Problem(HUGEPAGES, names, nodes=(node,), message=(
                f"node {node} has {free} free {units.size(size)} hugepages; shut-off "
                f"{'domain' if len(names) == 1 else 'domains'} {', '.join(names)} need {pages} there")))
    for size, pages in sorted(unbound.items()):
        left = sum(max(c.pages.get(size, 0) - need.get((c.id, size), 0), 0) for c in host.cells)
        if pages > left:
            names = tuple(sorted(unbound_who[size]))
            out.append(Problem(HUGEPAGES, names, nodes=host.node_ids, message=(
                f"the host has {left} free {units.size(size)} hugepages left; shut-off "
                f"{'domain' if len(names) == 1 else 'domains'} {', '.join(names)} need {pages} on any node")))
    return out, need


def _nodes_of(host: Host, cpus: frozenset[int]) -> tuple[int, ...]:
    return tuple(sorted({host.cpus[c].node for c in cpus if c in host.cpus}))


def _free(host: Host, doms: list[_Dom], reserved: frozenset[int], need) -> tuple[NodeFree, ...]:
    held = frozenset().union(*(d.claim.dedicated for d in doms)) if doms else frozenset()
    blocked = taken_cores(host, held) | taken_cores(host, reserved)
    bound: dict[int, int] = defaultdict(int)
    for d in doms:
        for node, kib in d.claim.memory.items():
            bound[node] += kib
    out = []
    for cell in host.cells:
        cpus = frozenset(cell.cpus)
        pool = sum(size * count for size, count in cell.pages.items())
        out.append(NodeFree(
            node=cell.id,
            cpus=cpus,
            reserved=cpus & reserved,
            dedicated=cpus & held,
            free_dedicated=cpus - blocked,
            memory_kib=cell.memory_kib,
            bound_kib=bound.get(cell.id, 0),
            free_kib=cell.memory_kib - pool - bound.get(cell.id, 0) if cell.memory_kib else None,
            hugepages={size: (count, need.get((cell.id, size), 0)) for size, count in sorted(cell.pages.items())},
        ))
    return tuple(out)


_ORDER = {kind: i for i, kind in enumerate(KINDS)}


def audit(host: Host, domains: list[tuple[str, str]], *, config: config_mod.Config | None = None) -> Report:
    """Rows, problems and what is left per node for ``domains`` (``(xml, state)`` pairs) on ``host``.

    See the module docstring for the interface and what each problem kind means.
    """
    config = config or config_mod.Config()
    doms = [_read(host, xml, state, i) for i, (xml, state) in enumerate(domains)]
    reserved = host.reserved(config)
    pages_problems, need = _hugepages(host, doms)
    known = _profiles(doms, config.profiles_dir)
    problems = (_overlaps(host, doms) + _floats(host, doms, reserved) + _tags(doms, known, reserved)
                + pages_problems + _devices(host, doms, known) + _housekeeping(host, doms))
    problems.sort(key=lambda p: (_ORDER.get(p.kind, len(KINDS)), p.domains, sorted(p.cpus), p.nodes, p.message))
    return Report(tuple(d.row for d in doms), tuple(problems), _free(host, doms, reserved, need),
                  tuple(d.dom for d in doms))


def live_drift(host: Host, persistent_xml: str | bytes, live_xml: str | bytes) -> Problem | None:
    """A ``not-live`` Problem when a running domain's threads may run elsewhere than its definition
    pins them (``vmtune apply`` without ``--live``: the new pins wait for the next start), else None.
    Domains with ``placement='auto'`` (numad chooses at start) are never reported."""
    _, persistent = _domain_of(persistent_xml, 0)
    _, live = _domain_of(live_xml, 1)
    if "auto" in (persistent.vcpu_placement, live.vcpu_placement):
        return None
    everywhere = frozenset(host.cpus)
    want, have = holdings.shape(persistent, everywhere), holdings.shape(live, everywhere)
    differ = sorted((k for k in want.keys() & have.keys() if want[k] != have[k]),
                    key=lambda k: (k.rstrip("0123456789"), int(k[len(k.rstrip("0123456789")):] or 0)))
    if not differ:
        return None
    name = persistent.name or persistent.uuid or "?"
    shown = ", ".join(f"{k} on {_cpus(have[k])} (defined {_cpus(want[k])})" for k in differ[:4])
    more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
    return Problem(NOT_LIVE, (name,), frozenset().union(*(want[k] for k in differ)), (),
                   f"{name} runs with other pins than its definition: {shown}{more}; "
                   f"`vmtune apply --live {name}` moves them now, or they change at its next start")


def with_live_drift(report: Report, host: Host, domains) -> Report:
    """``report`` and a ``live_drift`` problem for each running persistent domain of ``domains``
    (vmtune.live.domains.Defined: ``persistent``, ``xml``, ``live_xml``) whose threads run elsewhere
    than its definition pins them."""
    drift = [live_drift(host, d.xml, d.live_xml) for d in domains if d.persistent and d.live_xml]
    found = tuple(p for p in drift if p)
    return replace(report, problems=report.problems + found) if found else report
