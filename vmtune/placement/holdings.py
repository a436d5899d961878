"""What a domain holds on a host, each rule written once: where its threads may run, the CPUs its
vCPUs are pinned to, whether it holds them as dedicated, and where its memory comes from.

The rewriter's ledger (claims.py), ``vmtune plan`` (audit.py), the hook (hugepage top-up, re-pin),
``vmtune apply`` (live/) and its planner all ask this module. Pure: the model's view of one domain
in, values out; the hook passes in the default hugepage size it reads from meminfo.

Threads. A thread without a pin of its own runs on the ``<vcpu cpuset>``, else on every host CPU;
numad's ``<vcpu placement='auto'>`` counts as every CPU (numad chooses at start). A pin or a
``<vcpu cpuset>`` that names no CPU (empty, or no ``cpuset`` at all: libvirt refuses both) pins
nothing. Ids are read as the model reads every id (``Domain.vcpupins``).

Memory, as libvirt builds QEMU's memory backends: one per guest cell (without cells, one for the
whole ``<memory>``) and one per DIMM or virtio-mem device (nvdimm, virtio-pmem and sgx-epc are
backed by a file or EPC, never by hugepages). A backend's page size is the device's own
``<source><pagesize>``, else the size of the first ``<page>`` whose nodeset holds its guest cell,
else of the ``<page>`` without a nodeset (the only one that counts without guest cells), else, when
``<hugepages>`` has no ``<page>``, the default hugepage size; none of them: ordinary pages, and so
is a page the size of the base page. Its host nodes: the device's own ``<nodemask>``, else its
cell's ``<memnode nodeset>``, else ``<memory nodeset>``; numad's ``placement='auto'`` names none.
Its mode: its cell's memnode's, else ``<memory>``'s, strict by default. QEMU takes the pages from
those nodes' pools in every mode (``preferred`` falls back elsewhere only when they run out,
``interleave`` spreads them), so hugepages count there in every mode: split evenly over the nodes,
each part rounded up to whole pages (QEMU rounds a backend up; which of several nodes gives the
last page is not known, so each may have to). Normal memory counts only where it is
bound: a strict memnode's nodes, or the ``<memory nodeset>`` of a strict (or restrictive) domain,
whose cgroup keeps every thread's memory there, memnodes of other modes included.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from .. import cpuset, profiles
from ..xml import units
from ..xml.model import Domain, MemoryDevice

BINDING_MODES = ("strict", "restrictive")  # modes in which no page comes from another node


# -- threads and pins -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reach:
    """Where each thread of a domain may run."""

    default: frozenset[int]  # a thread without a pin of its own
    vcpus: Mapping[int, frozenset[int]]  # vCPU -> its pin (pinned vCPUs only)
    emulator: frozenset[int]
    iothreads: Mapping[int, frozenset[int]]  # iothread id -> its pin (pinned iothreads only)

    def vcpu(self, vcpu: int) -> frozenset[int]:
        return self.vcpus.get(vcpu, self.default)

    def iothread(self, iothread: int) -> frozenset[int]:
        return self.iothreads.get(iothread, self.default)


def _pins(dom: Domain, path: str, attr: str) -> dict[int, frozenset[int]]:
    out = {}
    for el in dom.iter(path):
        ident, cpus = _int(el.get(attr)), cpuset.parse(el.get("cpuset"))
        if ident is not None and cpus:
            out[ident] = cpus
    return out


def _int(text: str | None) -> int | None:
    try:
        return int(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def reach(dom: Domain, everywhere: frozenset[int]) -> Reach:
    """Where ``dom``'s threads may run on a host whose CPUs are ``everywhere``."""
    given = dom.vcpu_cpuset
    default = everywhere if dom.vcpu_placement == Domain.VCPU_PLACEMENT_AUTO or not given else given
    pin = dom.find("cputune/emulatorpin")
    emulator = (cpuset.parse(pin.get("cpuset")) if pin is not None else frozenset()) or default
    return Reach(default, _pins(dom, "cputune/vcpupin", "vcpu"), emulator,
                 _pins(dom, "cputune/iothreadpin", "iothread"))


def shape(dom: Domain, everywhere: frozenset[int]) -> dict[str, frozenset[int]]:
    """Where each declared thread may run: ``vcpuN``, ``emulator``, ``iothreadN`` (ids as declared)."""
    r = reach(dom, everywhere)
    out = {f"vcpu{v}": r.vcpu(v) for v in range(dom.vcpus)}
    out["emulator"] = r.emulator
    out.update((f"iothread{i}", r.iothread(i)) for i in dom.iothread_ids())
    return out


def pinned(dom: Domain) -> frozenset[int]:
    """Every host CPU a ``<vcpupin>`` names."""
    pins = dom.vcpupins()
    return frozenset().union(*pins.values()) if pins else frozenset()


def alone(pins: dict[int, frozenset[int]], vcpus: int) -> bool:
    """Every one of ``vcpus`` vCPUs pinned to exactly one host CPU (``pins``: vCPU -> its CPUs)."""
    return bool(pins) and all(len(pins.get(v, ())) == 1 for v in range(vcpus))


def pinned_alone(dom: Domain) -> bool:
    """Every vCPU pinned to exactly one host CPU: the rule that makes a domain's pins dedicated
    (claims), a "pinned" domain in a plan (planner), and a fully applied one (audit)."""
    return alone(dom.vcpupins(), dom.vcpus)


def holds_pins(profile: str | None, pins: dict[int, frozenset[int]], vcpus: int) -> bool:
    """Whether a domain tagged ``profile`` with the vCPU pins ``pins`` holds their CPUs for itself:
    tagged with a profile that dedicates CPUs (its ``cpu_pinning``, as vmtune ships the profile:
    ``profiles.builtin``), or every vCPU pinned alone (but never under a profile that pins to a
    node's shared CPUs). ``dedicated`` asks it of a domain, the pinning pass of the pins it writes."""
    tagged = profiles.builtin(profile) if profile else None
    if tagged is not None and tagged.cpu_pinning == profiles.Pinning.NODE:
        return False  # pins vmtune wrote to a node's shared CPUs, never dedicated ones
    return (tagged is not None and tagged.dedicated) or alone(pins, vcpus)


def dedicated(dom: Domain) -> frozenset[int]:
    """The host CPUs ``dom`` holds for itself (``holds_pins``): its pins and its real-time helpers'
    (``rt_helpers``); else none."""
    if holds_pins(dom.tagged_profile, dom.vcpupins(), dom.vcpus):
        return pinned(dom) | rt_helpers(dom)
    return frozenset()


REALTIME = ("fifo", "rr")


def _rt_iothreads(dom: Domain) -> frozenset[int]:
    out: set[int] = set()
    for el in dom.iter("cputune/iothreadsched"):
        if el.get("scheduler") in REALTIME:
            out |= cpuset.parse(el.get("iothreads"))
    return frozenset(out)


def rt_helpers(dom: Domain) -> frozenset[int]:
    """The CPUs of its real-time emulator and iothreads (``fifo``/``rr``) pinned to CPUs of their
    own: held like its vCPUs' (vmtune/placement/housekeeping.py gives them those CPUs)."""
    out: set[int] = set()
    pin = dom.find("cputune/emulatorpin")
    if pin is not None and any(el.get("scheduler") in REALTIME for el in dom.iter("cputune/emulatorsched")):
        out |= cpuset.parse(pin.get("cpuset"))
    rt = _rt_iothreads(dom)
    if rt:
        out |= frozenset().union(*(c for i, c in _pins(dom, "cputune/iothreadpin", "iothread").items() if i in rt))
    return frozenset(out)


def helpers(dom: Domain) -> tuple[frozenset[int], ...]:
    """The pins of a dedicated domain's emulator and iothreads that are not real-time: the threads
    the host's housekeeping CPUs carry (vmtune/placement/housekeeping.py counts them). None for other domains."""
    if not dedicated(dom):
        return ()
    out = []
    pin = dom.find("cputune/emulatorpin")
    emulator = cpuset.parse(pin.get("cpuset")) if pin is not None else frozenset()
    if emulator and not any(el.get("scheduler") in REALTIME for el in dom.iter("cputune/emulatorsched")):
        out.append(emulator)
    rt = _rt_iothreads(dom)
    out += [cpus for i, cpus in sorted(_pins(dom, "cputune/iothreadpin", "iothread").items()) if i not in rt]
    return tuple(out)


# -- memory -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Backend:
    """One QEMU memory backend of a domain."""

    kib: int
    page_kib: int | None  # hugepage size; None: ordinary pages
    nodes: tuple[int, ...]  # host nodes its pages come from; (): not bound, or numad chooses
    bound: tuple[int, ...]  # host nodes its memory may come from at most; (): any
    own: bool  # bound strictly by a memnode or nodemask of its own, not by <memory nodeset> alone


@dataclass(frozen=True)
class Memory:
    """Where a domain's memory comes from."""

    bound_kib: Mapping[int, int] = field(default_factory=dict)  # node -> normal memory KiB bound there
    hugepages: Mapping[tuple[int, int], int] = field(default_factory=dict)  # (node, size KiB) -> pages
    unbound_pages: Mapping[int, int] = field(default_factory=dict)  # size KiB -> pages, on any node
    # node -> normal memory KiB preferred there (mode preferred): it spills elsewhere when the node
    # runs out, so it binds nothing, but it is where the memory is (the placement spreads by it)
    preferred_kib: Mapping[int, int] = field(default_factory=dict)


def split(total: int, nodes) -> dict[int, int]:
    """``total`` split evenly over ``nodes`` (the first takes the remainder)."""
    nodes = list(nodes)
    if not nodes:
        return {}
    share, rest = divmod(total, len(nodes))
    return {n: share + (rest if i == 0 else 0) for i, n in enumerate(nodes)}


@lru_cache(maxsize=1)
def base_page_kib() -> int:
    """The base page of this machine (4 KiB on x86): a "hugepage" of that size is ordinary memory."""
    try:
        return os.sysconf("SC_PAGESIZE") // 1024
    except (ValueError, OSError):
        return 4


def _page_size(dom: Domain, cell: int | None, default_kib: Callable[[], int], limit: int | None) -> int | None:
    """libvirt's page size of guest cell ``cell`` (None: no guest cells), before the base-page rule."""
    hp = dom.find("memoryBacking/hugepages")
    if hp is None:
        return None
    pages = hp.findall("page")
    if not pages:
        return default_kib()
    master = None
    for page in pages:
        nodeset = page.get("nodeset")
        if not nodeset:
            master = page
        elif cell is not None and cell in cpuset.parse(nodeset, limit):
            return _size_of(page, default_kib)
    return None if master is None else _size_of(master, default_kib)


def _size_of(page, default_kib: Callable[[], int]) -> int:
    return units.to_kib(page.get("size"), page.get("unit")) if page.get("size") else default_kib()


def _numatune(dom: Domain, limit: int | None):
    """(``<memory>``'s host nodes, its mode, guest cell -> (its memnode's nodes, mode))."""
    numa = dom.find("numatune/memory")
    mode = (numa.get("mode") if numa is not None else None) or Domain.NUMA_MODE_STRICT
    if numa is not None and numa.get("placement") == Domain.NUMA_PLACEMENT_AUTO:
        return (), mode, {}  # numad chooses (and libvirt takes no memnode with it)
    top = () if numa is None else _nodes(numa.get("nodeset"), limit)
    memnodes = {}
    for el in dom.iter("numatune/memnode"):
        cell = _int(el.get("cellid"))
        if cell is not None and el.get("nodeset"):
            memnodes[cell] = (_nodes(el.get("nodeset"), limit), el.get("mode") or Domain.NUMA_MODE_STRICT)
    return top, mode, memnodes


def backends(dom: Domain, default_kib: Callable[[], int], node_limit: int | None = None) -> list[Backend]:
    """Every memory backend of ``dom`` (see the module docstring): each guest cell's, then each
    DIMM's and virtio-mem's. ``default_kib`` gives the host's default hugepage size when needed;
    ``node_limit`` bounds every node list read (the hook's)."""
    top, top_mode, memnodes = _numatune(dom, node_limit)
    cage = top if top_mode in BINDING_MODES else ()  # libvirt's cgroup keeps all memory on these
    cells = dom.cells
    parts = [(c.id, c.memory_kib, None, None) for c in cells] or [(None, dom.memory_kib, None, None)]
    if cells:
        parts += [(dev.target_node or 0, dev.size_kib, dev.pagesize_kib, dev.nodemask_text)
                  for dev in dom.memory_devices if dev.model in MemoryDevice.RAM_MODELS]
    out = []
    for cell, kib, own_page, mask in parts:
        nodes, mode = memnodes.get(cell, (top, top_mode))
        own = cell in memnodes
        if mode == "restrictive":  # no policy in QEMU: only the cgroup's <memory nodeset>
            nodes, own = top, False
        elif mask:
            nodes, own = _nodes(mask, node_limit), True
        page = own_page or _page_size(dom, cell, default_kib, node_limit)
        binds = mode in BINDING_MODES
        out.append(Backend(kib, None if page == base_page_kib() else page, nodes,
                           nodes if binds else cage, own and binds))
    return out


def _nodes(text: str | None, limit: int | None) -> tuple[int, ...]:
    return tuple(sorted(cpuset.parse(text, limit))) if text else ()


def memory(dom: Domain, default_kib: Callable[[], int], node_limit: int | None = None) -> Memory:
    """Where ``dom``'s memory comes from (see the module docstring)."""
    bound: dict[int, int] = defaultdict(int)
    pages: dict[tuple[int, int], int] = defaultdict(int)
    unbound: dict[int, int] = defaultdict(int)
    caged = 0  # normal memory bound by <memory nodeset> (split as one)
    cage: tuple[int, ...] = ()
    preferred: dict[int, int] = defaultdict(int)
    for b in backends(dom, default_kib, node_limit):
        if b.kib <= 0:
            continue
        if not b.page_kib and b.nodes and not b.bound:
            for node, part in split(b.kib, b.nodes).items():
                preferred[node] += part
        if b.page_kib and b.nodes:
            for node, part in split(b.kib, b.nodes).items():
                if part:
                    pages[(node, b.page_kib)] += -(-part // b.page_kib)
        elif b.page_kib:
            unbound[b.page_kib] += -(-b.kib // b.page_kib)
        elif b.bound and b.own:
            for node, part in split(b.kib, b.bound).items():
                bound[node] += part
        elif b.bound:
            caged, cage = caged + b.kib, b.bound
    for node, part in split(caged, cage).items():
        bound[node] += part
    return Memory(dict(bound), dict(pages), dict(unbound), dict(preferred))
