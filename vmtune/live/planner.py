"""The order and the ledger of ``vmtune apply``: pure, no libvirt.

``plan(host, targets, others, config=...)`` rewrites every target, one after the other, and returns
one Step per target in the order they were placed:

- order: domains whose profile pins dedicated CPUs (latency, realtime) first; then domains that
  keep dedicated pins under another profile (every vCPU already pinned to one CPU: the ledger
  counts those as dedicated too); then one-node profiles (throughput); then floating ones
  (balanced). Within a rank, by name, then uuid. So the same host and the same definitions always
  give the same plan, whatever order libvirt lists the domains in.
- ledger: one for the whole host. Each target sees ``others`` (every domain that is not being
  applied, running or not) and the new XML of the targets placed before it. Targets not placed yet
  are left out (they are about to be placed again, so their current pins hold nothing), except
  those that keep pins of their own under a profile that does not place them (the second rank):
  their pins stay claims until they are placed.

A target vmtune does not tune (another arch, not kvm/qemu) is skipped when ``skip_unsupported``
(its Step comes first, with ``error`` set and no result; it stays in every ledger with its current
XML), else it raises ``Unsupported``. Any other error propagates, its message prefixed with the
domain's name: nothing is half planned.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lxml import etree

from .. import config as config_mod
from .. import driver, profiles
from ..placement import holdings
from ..xml import xmlsafe
from ..driver import Result, rewrite
from ..errors import InvalidInput, Unsupported, VmtuneError
from ..host import Host
from ..xml.model import TAG, Domain

RANKS = {"dedicated": 0, "pinned": 1, "node": 2, "float": 3}


@dataclass(frozen=True)
class Target:
    key: str  # what the caller knows the domain by (libvirt: its uuid)
    xml: str  # its persistent XML now
    profile: str | None = None  # --profile; None: its tag, else the default


@dataclass(frozen=True)
class Step:
    target: Target
    name: str
    profile: str  # the profile it was (or would have been) tuned with
    result: Result | None  # None when skipped
    error: VmtuneError | None = None

    @property
    def changed(self) -> bool:
        return self.result is not None and bool(self.result.changes)


def _profile_name(target: Target, dom: Domain) -> str:
    return target.profile or dom.tagged_profile or profiles.DEFAULT


def _as_target(target: Target) -> str:
    """A waiting target's XML as a claim: tagged with the profile it is about to get (its pins are
    claimed as that profile will hold them: a domain tagged throughput now and planned as balanced
    holds its pins alone as dedicated, as it will once planned)."""
    if not target.profile:
        return target.xml
    root = xmlsafe.parse(target.xml, "domain XML")
    tag = root.find(f"metadata/{TAG}")
    if tag is None or tag.get("profile") == target.profile:
        return target.xml
    tag.set("profile", target.profile)
    return etree.tostring(root, encoding="unicode")


def rank(target: Target, host: Host, config: config_mod.Config) -> tuple:
    """The sort key of ``target`` in a plan (see the module docstring)."""
    dom = Domain(xmlsafe.parse(target.xml, "domain XML"))
    name = _profile_name(target, dom)
    try:
        prof = profiles.load(name, config.profiles_dir)
    except InvalidInput:
        prof = profiles.Profile(name)  # floats; its rewrite will say what is wrong
    group = "dedicated" if prof.dedicated else "node" if prof.cpu_pinning == profiles.Pinning.NODE else "float"
    if not prof.dedicated and holdings.pinned_alone(dom):
        group = "pinned"
    return (RANKS[group], dom.name or "", dom.uuid or "", target.key)


def plan(
    host: Host,
    targets: Sequence[Target],
    others: Iterable[str] = (),
    *,
    config: config_mod.Config | None = None,
    force_virtio: bool = False,
    skip_unsupported: bool = False,
) -> list[Step]:
    """Rewrite ``targets`` in plan order, each with ``others`` and the targets placed before it as
    claims. Raises the first error (InvalidInput, DoesNotFit) unless it is Unsupported and
    ``skip_unsupported``."""
    config = config or config_mod.Config()
    others = list(others)
    skipped: list[Step] = []
    todo: list[Target] = []
    for target in targets:
        dom = Domain(xmlsafe.parse(target.xml, "domain XML"))
        try:
            driver.check_domain(dom, host)
        except Unsupported as exc:
            if not skip_unsupported:
                raise Unsupported(f"{dom.name or target.key}: {exc}") from None
            others.append(target.xml)  # it keeps what it holds now
            skipped.append(Step(target, dom.name or target.key, _profile_name(target, dom), None, exc))
            continue
        todo.append(target)
    ordered = sorted(todo, key=lambda t: rank(t, host, config))
    pinned = {t.key for t in ordered if rank(t, host, config)[0] == RANKS["pinned"]}
    placed: list[str] = []
    steps: list[Step] = []
    for i, target in enumerate(ordered):
        dom = Domain(xmlsafe.parse(target.xml, "domain XML"))
        name = dom.name or target.key
        waiting = [_as_target(t) for t in ordered[i + 1:] if t.key in pinned]  # they keep their pins
        try:
            result = rewrite(target.xml, host, target.profile, others + placed + waiting,
                             force_virtio=force_virtio, config=config)
        except VmtuneError as exc:
            raise type(exc)(f"{name}: {exc}") from None
        placed.append(result.xml)
        steps.append(Step(target, name, result.profile, result))
    return skipped + steps
