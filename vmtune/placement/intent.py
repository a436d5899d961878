"""What the user set on purpose in a domain, read once, for the placement and the passes.

The rewriter's first rule: what the user set on purpose stays, unless the profile cannot live with
it, and then a warning says what changed and why. This module reads the domain as the user gave it
(before the passes; on a re-tune, after vmtune's record took its own changes back):

- **CPUs**: a ``<vcpu cpuset>`` (ignored by libvirt under ``placement='auto'``, and so here), and
  hand ``<vcpupin>``s that stay inside one L3 domain or one node, bound the placement: its vCPUs
  go there as far as the room there holds them (search.py). The CPUs the pins name are taken
  first, and pins of one CPU per vCPU are kept as they are when the placement takes exactly those.
- **Real-time threads**: a ``<vcpusched>``, ``<emulatorsched>`` or ``<iothreadsched>`` with
  ``fifo`` or ``rr``: the domain's own real-time subset, kept where the profile gives those threads
  CPUs of their own (passes/pinning.py).
- **Hugepages**: a ``<hugepages>`` in ``<memoryBacking>``, with the page size it names, kept
  unless it can never fit (search.py).
- **Helper pins**: ``<emulatorpin>`` and ``<iothreadpin>`` set by hand, kept where they avoid the
  dedicated CPUs (passes/pinning.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .. import cpuset
from ..xml import units
from ..host import Host
from ..xml.model import Domain

REALTIME = ("fifo", "rr")


@dataclass(frozen=True)
class Intent:
    """The user's own choices that bound the tuning (see the module docstring)."""

    within: frozenset[int] | None = None  # the host CPUs the user gave the vCPUs; None: no bound
    prefer: frozenset[int] = frozenset()  # the CPUs the hand pins name: taken first
    pins: tuple[int, ...] = ()  # one CPU per vCPU as pinned by hand (every vCPU), else ()
    what: str = ""  # the bound as a warning names it
    rt_vcpus: frozenset[int] = frozenset()  # vCPUs with a real-time <vcpusched> of the domain's own
    rt_emulator: bool = False  # an <emulatorsched> with fifo or rr
    rt_iothreads: frozenset[int] = frozenset()  # iothreads with a real-time <iothreadsched>
    pages: bool = False  # a <hugepages> in <memoryBacking>
    page_kib: int | None = None  # the one page size it names (None: none, or several)
    emulatorpin: frozenset[int] | None = None  # the hand's <emulatorpin>
    iothreadpins: tuple[tuple[int, frozenset[int]], ...] = ()  # the hand's <iothreadpin>s
    hand: bool = True  # read as the user gave it (False: a tuned domain's, whose vCPU pins are vmtune's)

    @property
    def helper_cpus(self) -> frozenset[int]:
        """The CPUs the hand gave the emulator and iothreads (not the real-time ones, whose CPUs
        are their own): the placement leaves them to them where the vCPUs fit elsewhere."""
        if not self.hand:
            return frozenset()
        pins = [c for i, c in self.iothreadpins if i not in self.rt_iothreads]
        if self.emulatorpin is not None and not self.rt_emulator:
            pins.append(self.emulatorpin)
        return frozenset().union(*pins)

    @property
    def rt_threads(self) -> int:
        """How many of its emulator and iothreads run real-time: each needs a CPU of its own."""
        return int(self.rt_emulator) + len(self.rt_iothreads)

    @property
    def realtime(self) -> bool:
        return bool(self.rt_vcpus) or self.rt_threads > 0


NONE = Intent()


def ids(text: str | None, count: int | None = None) -> frozenset[int]:
    try:
        ids = cpuset.parse(text)
    except Exception:  # noqa: BLE001 - validate.py refused a bad list already; unreadable is none
        return frozenset()
    return ids if count is None else frozenset(i for i in ids if i < count)


def _realtime(dom: Domain) -> tuple[frozenset[int], bool, frozenset[int]]:
    vcpus: set[int] = set()
    emulator = False
    iothreads: set[int] = set()
    known: set[int] | None = None  # the domain's iothreads, read at the first <iothreadsched>
    for el in (child for tune in dom.iter("cputune") for child in tune):  # cputune/*[@scheduler]
        if not isinstance(el.tag, str) or el.get("scheduler") not in REALTIME:
            continue
        if el.tag == "vcpusched":
            vcpus |= ids(el.get("vcpus"), dom.vcpus)
        elif el.tag == "emulatorsched":
            emulator = True
        elif el.tag == "iothreadsched":
            known = set(dom.iothread_ids()) if known is None else known
            iothreads |= ids(el.get("iothreads")) & known
    return frozenset(vcpus), emulator, frozenset(iothreads)


def _pages(dom: Domain) -> tuple[bool, int | None]:
    hp = dom.find("memoryBacking/hugepages")
    if hp is None:
        return False, None
    sizes = {units.to_kib(p.get("size"), p.get("unit")) for p in hp.iterchildren("page") if p.get("size")}
    return True, (sizes.pop() if len(sizes) == 1 else None)


def container(host: Host, cpus: frozenset[int]) -> tuple[frozenset[int], str] | None:
    """The L3 domain that holds all of ``cpus``, else the node; None when they span nodes."""
    l3s = {host.l3_of(c) for c in cpus}
    if len(l3s) == 1 and None not in l3s and host.caches:
        l3 = host.cache(l3s.pop())
        return frozenset(l3.cpus) & frozenset(host.cpus), f"L3 {l3.id} (CPUs {cpuset.format(l3.cpus)})"
    nodes = {host.cpus[c].node for c in cpus}
    if len(nodes) == 1:
        node = nodes.pop()
        return frozenset(host.cell(node).cpus), f"node {node}"
    return None


def _cpus(dom: Domain, host: Host) -> tuple[frozenset[int] | None, frozenset[int], tuple[int, ...], str]:
    online = host.cpu_ids
    within, what = None, ""
    given = dom.vcpu_cpuset if dom.vcpu_placement != Domain.VCPU_PLACEMENT_AUTO else None
    if given and given & online:
        within, what = given & online, f"<vcpu cpuset='{cpuset.format(given)}'>"
    count = dom.vcpus
    hand = {v: cpus & online for v, cpus in dom.vcpupins().items() if v < count}
    used = frozenset().union(*hand.values()) if hand else frozenset()
    if not used:
        return within, frozenset(), (), what
    pins: tuple[int, ...] = ()
    if sorted(hand) == list(range(count)) and all(len(c) == 1 for c in hand.values()):
        flat = tuple(next(iter(hand[v])) for v in range(count))
        pins = flat if len(set(flat)) == len(flat) else ()
    box = container(host, used)
    if box is not None:
        cpus, where = box
        named = f"the hand's <vcpupin>s (CPUs {cpuset.format(used)}, in {where})"
        if within is None:
            within, what = cpus, named
        elif within & cpus:
            within, what = within & cpus, f"{what} and {named}"
    return within, used, pins, what


def _helpers(dom: Domain, host: Host) -> tuple[frozenset[int] | None, tuple[tuple[int, frozenset[int]], ...]]:
    online = host.cpu_ids
    pin = dom.find("cputune/emulatorpin")
    emulator = ids(pin.get("cpuset")) if pin is not None else frozenset()
    pins = []
    found = list(dom.iter("cputune/iothreadpin"))
    known = set(dom.iothread_ids()) if found else set()
    for el in found:
        try:
            ident = int(el.get("iothread") or "")
        except ValueError:
            continue
        cpus = ids(el.get("cpuset"))
        if ident in known and cpus and cpus <= online:
            pins.append((ident, cpus))
    return (emulator if emulator and emulator <= online else None), tuple(sorted(pins))


@functools.lru_cache(maxsize=64)
def _plain(pages: bool, page_kib: int | None, hand: bool) -> Intent:
    """The Intent of a domain with no bound, pins or schedulers of its own: one of a few, made once
    (it is immutable)."""
    return Intent(pages=pages, page_kib=page_kib, hand=hand)


def read(dom: Domain, host: Host, hand: bool = True) -> Intent:
    """The user's own choices in ``dom`` (as given, before the passes) on ``host``. Without
    ``hand`` (a tuned domain's pins, which are vmtune's: the hook's re-pin), the cpuset and pins
    bound nothing, and pins of one CPU per vCPU stay only where they still hold; emulator and
    iothread pins off the dedicated CPUs stay either way."""
    pages, page_kib = _pages(dom)
    if dom.find("cputune") is None:  # most domains: no pins, no schedulers
        within = dom.vcpu_cpuset if hand and dom.vcpu_placement != Domain.VCPU_PLACEMENT_AUTO else None
        if not within or not within & host.cpu_ids:
            return _plain(pages, page_kib, hand)
        what = f"<vcpu cpuset='{cpuset.format(within)}'>"
        return Intent(within & host.cpu_ids, what=what, pages=pages, page_kib=page_kib)
    rt_vcpus, rt_emulator, rt_iothreads = _realtime(dom)
    emulatorpin, iothreadpins = _helpers(dom, host)
    within, prefer, pins, what = _cpus(dom, host)
    if not hand:  # a tuned domain's pins stay where they still hold, and bound nothing
        return Intent(pins=pins, rt_vcpus=rt_vcpus, rt_emulator=rt_emulator, rt_iothreads=rt_iothreads, pages=pages,
                      page_kib=page_kib, emulatorpin=emulatorpin, iothreadpins=iothreadpins, hand=False)
    return Intent(within, prefer, pins, what, rt_vcpus, rt_emulator, rt_iothreads, pages, page_kib,
                  emulatorpin, iothreadpins)


def realtime_mask(spec: str, vcpus: int) -> frozenset[int]:
    """The vCPUs of a profile's ``realtime_vcpus`` (a cpulist of vCPU ids; exclusions only start
    from every vCPU) for a domain of ``vcpus``."""
    include, exclude = cpuset.ranges(spec)
    base = cpuset.parse(spec) if include else frozenset(range(vcpus)) - cpuset.parse(
        ",".join(f"{lo}-{hi}" for lo, hi in exclude))
    return frozenset(v for v in base if v < vcpus)
