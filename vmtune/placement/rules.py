"""The placement's rules for a dedicated domain, in order: one list, each rule with the score it
gives a place (a field of ``Score``: the lowest wins, rule by rule), what it prefers, what steers it
(a profile key or a setting), and how its score reads. search.py scores the places by them, and
``why_not`` says, for ``rewrite --explain``, which rule made the chosen place win over the best
place on other nodes, with both places by that rule.

A new rule is one entry here, its value in ``search._search``, and its profile key if it has one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from .. import cpuset
from ..xml import units


@dataclass(frozen=True)
class Rule:
    field: str  # the Score field it fills
    kind: type  # the field's type
    name: str  # how --explain names it
    prefers: str  # what it prefers, lower scores first
    steered_by: str = ""  # the profile key or setting that steers it
    show: Callable[[object], str] = str  # a score as a person reads it


def _cache(value) -> str:
    return f"{units.size(int(-value))} of L3 per vCPU"


def _count(what: str) -> Callable[[object], str]:
    return lambda value: f"{value} {what}"


def _yes(yes: str, no: str) -> Callable[[object], str]:
    return lambda value: yes if value else no


RULES: tuple[Rule, ...] = (
    Rule("outside", int, "the domain's bound", "the fewest vCPUs outside the CPUs the domain names (<vcpu cpuset>, "
         "its own pins)", show=_count("vCPUs outside it")),
    Rule("nodes", int, "nodes", "the fewest NUMA nodes", show=_count("nodes")),
    Rule("passthrough_away", int, "passthrough devices", "the nodes of its passthrough devices", "device_locality",
         _count("of their nodes missed")),
    Rule("backing_away", int, "backing devices", "the nodes of the devices behind its disks and NICs",
         show=_count("of their nodes missed")),
    Rule("l3_domains", int, "L3 domains", "the fewest L3 domains", show=_count("L3 domains")),
    Rule("less_cache", float, "L3 size", "the larger L3 per vCPU", show=_cache),
    Rule("whole_left", int, "fit", "the tightest fit: the fewest whole free cores left in the L3 domains taken",
         show=_count("whole cores left")),
    Rule("efficiency", int, "core kind", "performance cores (efficiency threads taken, on a hybrid host)",
         "cpu_kinds", _count("efficiency threads")),
    Rule("pages_short", bool, "its own hugepages", "a pool that holds the domain's own hugepages now",
         show=_yes("the pool short now", "the pool holds them")),
    Rule("no_hugepages", bool, "hugepages", "hugepages over normal pages", "memory_hugepages",
         _yes("normal pages", "hugepages")),
    Rule("uneven", bool, "even shares", "the vCPUs split evenly over the nodes", show=_yes("uneven", "even")),
    Rule("distance", int, "distance", "the shortest NUMA distances between its nodes", show=_count("of distance")),
    Rule("room", int, "room", "the most free CPUs (the fewest under placement = \"pack\")", "placement",
         lambda value: f"{abs(value)} free CPUs"),  # minus the room to spread: shown as the room
    Rule("node_ids", tuple, "node ids", "the lowest node ids (the same input, the same place)"),
)

# A place, scored by RULES in order (a tuple's order: the lowest wins, field by field).
Score = NamedTuple("Score", [(rule.field, rule.kind) for rule in RULES])  # type: ignore[misc]


def deciding(won: Score, lost: Score) -> tuple[int, Rule] | None:
    """The first rule by which ``lost`` scores worse than ``won`` (its number from 1, the rule)."""
    for i, (rule, a, b) in enumerate(zip(RULES, won, lost)):
        if a != b:
            return (i + 1, rule) if a < b else None
    return None


@functools.lru_cache(maxsize=256)
def why_not(won: Score, lost: Score) -> str | None:
    """Why the place scored ``won`` beat the one scored ``lost``: the rule that decided, what it
    prefers, and both places by it (None: it did not win). Remembered by the two scores (tuples of
    numbers): a host's domains of one size score the same places alike."""
    found = deciding(won, lost)
    if found is None:
        return None
    i, rule = found
    steer = f" ({rule.steered_by})" if rule.steered_by else ""
    said = f"{_nodes(won.node_ids)} over {_nodes(lost.node_ids)}: rule {i}, {rule.name}: {rule.prefers}{steer}"
    if rule.field != "node_ids":
        said += f": {rule.show(getattr(won, rule.field))} against {rule.show(getattr(lost, rule.field))}"
    return said


def _nodes(ids: tuple[int, ...]) -> str:
    return f"node{'s' if len(ids) > 1 else ''} {cpuset.format(ids)}"
