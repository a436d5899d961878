"""What other domains on the host already hold: dedicated CPUs, strict-bound memory, hugepages
(each by the rules of holdings.py), and the host devices they pass through (locality.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from . import holdings, housekeeping, locality
from ..xml import validate, xmlsafe
from ..errors import InvalidInput
from ..host import Host
from ..xml.model import Domain


@dataclass(frozen=True)
class Claim:
    """One other domain, as far as placement cares."""

    name: str | None
    uuid: str | None
    profile: str | None
    dedicated: frozenset[int]  # host CPUs its vCPUs hold for themselves
    pinned: frozenset[int]  # every host CPU its vCPUs are pinned to
    memory: Mapping[int, int] = field(default_factory=dict)  # node -> KiB bound strictly
    hugepages: Mapping[tuple[int, int], int] = field(default_factory=dict)  # (node, size KiB) -> pages
    unbound_pages: Mapping[int, int] = field(default_factory=dict)  # size KiB -> pages on any node
    # the host devices it passes through, as (kind, key) of vmtune.placement.locality: one domain at a time has each
    passthrough: frozenset[tuple[str, str]] = frozenset()
    # the pins of its emulator and iothreads, when it is dedicated: what the housekeeping CPUs carry
    helpers: tuple[frozenset[int], ...] = ()
    preferred: Mapping[int, int] = field(default_factory=dict)  # node -> KiB preferred there (not bound)


@dataclass(frozen=True)
class Ledger:
    """All claims on one host added up."""

    claims: tuple[Claim, ...] = ()
    dedicated: frozenset[int] = frozenset()
    memory: Mapping[int, int] = field(default_factory=dict)
    hugepages: Mapping[tuple[int, int], int] = field(default_factory=dict)
    helpers: Mapping[int, float] = field(default_factory=dict)  # CPU -> emulator and iothreads there
    preferred: Mapping[int, int] = field(default_factory=dict)  # node -> KiB preferred there, not bound
    # the claims left out as the domain being placed itself: a warning each (``itself``)
    itself: tuple[str, ...] = ()


def default_page_kib(host: Host) -> int:
    """The default hugepage size as far as ``host`` tells: its smallest pool size, else 2 MiB (the
    hook reads the kernel's from meminfo instead)."""
    sizes = sorted({s for c in host.cells for s in c.pages})
    return sizes[0] if sizes else 2048


@lru_cache(maxsize=4096)
def read(xml: str | bytes, host: Host) -> Claim:
    """What domain ``xml`` holds on ``host`` (cached: planning N domains reads each claim once)."""
    root = xmlsafe.parse(xml, "claimed domain XML")
    if root.tag != "domain":
        name = xmlsafe.source(xml)
        raise InvalidInput(f"a claim{f' ({name})' if name else ''} must be a <domain>, not <{root.tag}>")
    dom = Domain(root)
    validate.check_counts(dom)
    mem = holdings.memory(dom, lambda: default_page_kib(host))
    return Claim(dom.name, dom.uuid, dom.tagged_profile, holdings.dedicated(dom), holdings.pinned(dom),
                 mem.bound_kib, mem.hugepages, mem.unbound_pages, locality.passthrough(dom), holdings.helpers(dom),
                 mem.preferred_kib)


def ledger(claims: Iterable[str | bytes], host: Host, skip_uuid: str | None = None, skip_name: str | None = None) -> Ledger:
    """Add up ``claims``, leaving out the domain being placed (same uuid or name): a domain does
    not block itself, and ``Ledger.itself`` says which claim was left out and why."""
    kept: list[Claim] = []
    itself: list[str] = []
    for xml in claims:
        claim = read(xml, host)
        same = ("uuid" if skip_uuid and claim.uuid == skip_uuid else
                "name" if skip_name and claim.name == skip_name else None)
        if same:
            itself.append(_itself(xml, claim, same))
            continue
        kept.append(claim)
    if not kept:  # no other domain (a rewrite without claims): nothing to add up, the empty ledger
        return Ledger(itself=tuple(itself))
    memory: dict[int, int] = defaultdict(int)
    pages: dict[tuple[int, int], int] = defaultdict(int)
    for claim in kept:
        for node, kib in claim.memory.items():
            memory[node] += kib
        for key, count in claim.hugepages.items():
            pages[key] += count
    dedicated = frozenset().union(*(c.dedicated for c in kept)) if kept else frozenset()
    preferred: dict[int, int] = defaultdict(int)
    for claim in kept:
        for node, kib in claim.preferred.items():
            preferred[node] += kib
    helpers = housekeeping.load(pin for c in kept for pin in c.helpers)
    return Ledger(tuple(kept), dedicated, dict(memory), dict(pages), helpers, dict(preferred), tuple(itself))


def _itself(xml: str | bytes, claim: Claim, same: str) -> str:
    """The warning for a claim that is the domain being placed."""
    source = xmlsafe.source(xml)
    what = f"the claimed domain {source}" if source else "a claimed domain"
    value = claim.uuid if same == "uuid" else claim.name
    return (f"{what} is this domain itself (the same {same}, {value}): left out, as a domain does not hold CPUs, "
            "memory or hugepages against itself")
