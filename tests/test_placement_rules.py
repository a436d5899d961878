"""vmtune/placement/rules.py: the placement's rules as one ordered list, the Score they give a
place, and the rule that decided between the chosen place and the best one on other nodes
(``why_not``, which ``rewrite --explain`` prints)."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import vmtune
from conftest import EXAMPLES
from fixtures.hosttrees import hosts
from fixtures.strategies import domains
from vmtune import Config
from vmtune.cli import format as fmt
from vmtune.errors import DoesNotFit
from vmtune.placement import rules
from vmtune.placement.rules import RULES, Score

HOST = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())  # reserved 0,16 / 8,24
SAID = re.compile(r"nodes? ([0-9,-]+) over nodes? ([0-9,-]+): rule ([0-9]+), ([^:]+): ")


def _score(**over) -> Score:
    base = dict(outside=0, nodes=1, passthrough_away=0, backing_away=0, l3_domains=1, less_cache=-1024.0,
                whole_left=2, efficiency=0, pages_short=False, no_hugepages=False, uneven=False, distance=0,
                room=-8, node_ids=(0,))
    return Score(**{**base, **over})


def test_score_has_one_field_per_rule_in_the_rules_order():
    assert [r.field for r in RULES] == list(_score()._asdict()) and len({r.name for r in RULES}) == len(RULES)


WORSE = {"outside": 1, "nodes": 2, "passthrough_away": 1, "backing_away": 1, "l3_domains": 2, "less_cache": -512.0,
         "whole_left": 3, "efficiency": 1, "pages_short": True, "no_hugepages": True, "uneven": True, "distance": 10,
         "room": -4}  # a worse score than _score()'s by each rule but the last


@given(st.integers(0, len(RULES) - 2), st.data())
def test_the_first_differing_rule_decides(k, data):
    """Two places that tie on every rule before rule k+1 and differ there: that rule decides,
    whatever the later rules say, and only for the place it favours."""
    field = RULES[k].field
    won, lost = _score(), _score(**{field: WORSE[field], "node_ids": (1,)})
    later = [r.field for r in RULES[k + 1:-1]]
    if later:  # the later rules favour the loser: they change nothing
        turned = data.draw(st.lists(st.sampled_from(later), unique=True))
        won = won._replace(**{f: WORSE[f] for f in turned})
    assert rules.deciding(won, lost) == (k + 1, RULES[k])
    assert rules.deciding(lost, won) is None
    said = rules.why_not(won, lost)
    assert said.startswith(f"node 0 over node 1: rule {k + 1}, {RULES[k].name}: {RULES[k].prefers}")


def test_equal_places_tie_on_node_ids_and_a_place_never_beats_itself():
    assert rules.deciding(_score(), _score()) is None
    assert rules.why_not(_score(), _score(node_ids=(1,))) == \
        "node 0 over node 1: rule 14, node ids: the lowest node ids (the same input, the same place)"


def _claim(cpus: str) -> str:
    pins = "".join(f"<vcpupin vcpu='{v}' cpuset='{c}'/>" for v, c in enumerate(vmtune.cpuset.parse(cpus)))
    n = len(vmtune.cpuset.parse(cpus))
    return (f"<domain type='kvm'><name>other</name><uuid>00000000-0000-4000-8000-00000000000f</uuid>"
            f"<memory unit='MiB'>512</memory><vcpu>{n}</vcpu><cputune>{pins}</cputune>"
            f"<os><type arch='x86_64'>hvm</type></os></domain>")


def test_spread_and_pack_say_the_room_decided():
    """Another domain holds four CPUs of node 0: spread puts a latency domain on node 1, the one
    with more room, and pack on node 0; --explain names rule 13 and the free CPUs of each."""
    xml = (EXAMPLES / "stock-latency.xml").read_text()
    claims = [_claim("1-2,17-18")]
    spread = vmtune.rewrite(xml, HOST, "latency", claims=claims)
    packed = vmtune.rewrite(xml, HOST, "latency", claims=claims, config=Config(placement="pack"))
    assert spread.placement["nodes"] == [1] and packed.placement["nodes"] == [0]
    assert spread.placement["why_not"] == [
        "node 1 over node 0: rule 13, room: the most free CPUs (the fewest under placement = \"pack\") (placement): "
        "14 free CPUs against 10 free CPUs"]
    assert packed.placement["why_not"] == [
        "node 0 over node 1: rule 13, room: the most free CPUs (the fewest under placement = \"pack\") (placement): "
        "10 free CPUs against 14 free CPUs"]
    assert f"placement: {spread.placement['why_not'][0]}" in fmt.explain(spread)


# small generated hosts often cannot hold a latency domain (DoesNotFit, assumed away): in some runs most
# inputs, which Hypothesis's health check would take for a strategy gone wrong
@settings(suppress_health_check=[HealthCheck.filter_too_much])
@given(domains(max_vcpus=6, virt_types=("kvm",)), hosts(arches=("x86_64",), max_nodes=3), st.sampled_from(("latency", "realtime")))
def test_why_not_names_the_chosen_nodes_and_another_place_by_a_rule_of_the_list(xml, host, profile):
    """Whatever the host and domain: at most one line, naming the nodes the domain got, other
    nodes, and a rule of RULES by its number and name; a host of one node has no other place."""
    try:
        result = vmtune.rewrite(xml, host, profile)
    except DoesNotFit:
        assume(False)
    lines = result.placement["why_not"]
    assert len(lines) <= 1
    if len([c for c in host.cells if c.cpus]) == 1:
        assert lines == []
    for line in lines:
        m = SAID.match(line)
        assert m, line
        won, lost, number, name = m.groups()
        assert vmtune.cpuset.parse(won) == set(result.placement["nodes"]) and won != lost
        assert RULES[int(number) - 1].name == name
