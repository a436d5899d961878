"""The hook's C-state scope (vmtune/hoststate/tuning.py): ``[hook] cstate_scope = "pinned"`` turns
deep C-states off only on the leased domains' pinned CPUs.

"Restore exactly" with per-lease records: each lease records the C-state values it changed on its
CPUs. When it goes, the records of CPUs another lease still pins pass to that lease (the value
stays off), the rest are written back. So the last lease on a CPU restores the value that CPU had
before the first one, whatever the order of the releases.
"""

from __future__ import annotations

import pytest
from fixtures.hook import CPU, UUID_A, UUID_B, call, domain, snapshot, state, value

UUID_C = "33333333-3333-3333-3333-333333333333"


@pytest.fixture
def pinned(fake_host_tree):
    (fake_host_tree / "vmtune.toml").write_text('[hook]\ncstate_scope = "pinned"\non_conflict = "warn"\n')
    return fake_host_tree


def deep(sysfs, cpu: int) -> str:
    return value(sysfs, f"{CPU}/cpu{cpu}/cpuidle/state3/disable")


def deep_states(sysfs) -> list[str]:
    return [deep(sysfs, cpu) for cpu in range(4)]


def test_only_the_pinned_cpus_lose_their_deep_cstates(pinned):
    """The first lease tunes governor and KSM host-wide but C-states on its CPU only; a later lease
    extends the limit to its CPUs; each lease records what it changed."""
    sysfs = pinned / "sys"
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "prepare", "begin") == 0
    assert deep_states(sysfs) == ["0", "0", "1", "0"]
    assert value(sysfs, f"{CPU}/cpu0/cpufreq/scaling_governor") == "performance"
    assert value(sysfs, "kernel/mm/ksm/run") == "0"
    assert not [r for r in state(pinned)["baseline"] if "cpuidle" in r["path"]]
    assert [r["path"] for r in state(pinned)["leases"][UUID_A]["cstates"]] == [f"{CPU}/cpu2/cpuidle/state3/disable"]
    assert call(domain("vm-b", UUID_B, pins="0-1"), "vm-b", "prepare", "begin") == 0
    assert deep_states(sysfs) == ["1", "1", "1", "0"]
    assert len(state(pinned)["leases"][UUID_B]["cstates"]) == 2


def test_release_restores_that_leases_cpus_only(pinned):
    sysfs = pinned / "sys"
    before = snapshot(sysfs)
    call(domain("vm-a", UUID_A, pins="2"), "vm-a", "prepare", "begin")
    call(domain("vm-b", UUID_B, pins="3"), "vm-b", "prepare", "begin")
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "release", "end") == 0
    assert deep_states(sysfs) == ["0", "0", "0", "1"]
    assert value(sysfs, f"{CPU}/cpu2/cpufreq/scaling_governor") == "performance"  # host state stays
    assert call(domain("vm-b", UUID_B, pins="3"), "vm-b", "release", "end") == 0
    assert snapshot(sysfs) == before


@pytest.mark.parametrize("first_out", ["vm-a", "vm-b"])
def test_a_cpu_two_leases_pin_is_restored_by_the_last_one(pinned, first_out):
    """A pins 2-3, B pins 3 (allowed with on_conflict = warn). Whichever goes first, CPU 3 keeps its
    deep C-state off while the other runs, and gets its original value back when both are gone."""
    sysfs = pinned / "sys"
    before = snapshot(sysfs)
    doms = {"vm-a": domain("vm-a", UUID_A, pins="2-3"), "vm-b": domain("vm-b", UUID_B, pins="3")}
    call(doms["vm-a"], "vm-a", "prepare", "begin")
    call(doms["vm-b"], "vm-b", "prepare", "begin")
    assert not state(pinned)["leases"][UUID_B]["cstates"]  # CPU 3 was already off: nothing to record
    second = "vm-b" if first_out == "vm-a" else "vm-a"
    assert call(doms[first_out], first_out, "release", "end") == 0
    assert deep(sysfs, 3) == "1"
    assert deep(sysfs, 2) == ("0" if first_out == "vm-a" else "1")
    (survivor,) = state(pinned)["leases"].values()
    assert f"{CPU}/cpu3/cpuidle/state3/disable" in [r["path"] for r in survivor["cstates"]]
    assert call(doms[second], second, "release", "end") == 0
    assert snapshot(sysfs) == before


def test_records_pass_to_the_lease_that_still_pins_the_cpu(pinned):
    """Three leases on CPU 1: the record moves from lease to lease until the last restores it."""
    sysfs = pinned / "sys"
    before = snapshot(sysfs)
    doms = [(f"vm-{i}", uuid, domain(f"vm-{i}", uuid, pins="1")) for i, uuid in enumerate((UUID_A, UUID_B, UUID_C))]
    for name, _, xml in doms:
        call(xml, name, "prepare", "begin")
    for name, _, xml in doms[:2]:
        call(xml, name, "release", "end")
        assert deep(sysfs, 1) == "1"
    assert call(doms[2][2], doms[2][0], "release", "end") == 0
    assert snapshot(sysfs) == before


def test_a_cpu_already_off_stays_off(pinned):
    """CPU 2's deep state was disabled before vmtune (by the admin): nothing to record, left off."""
    sysfs = pinned / "sys"
    (sysfs / f"{CPU}/cpu2/cpuidle/state3/disable").write_text("1\n")
    before = snapshot(sysfs)
    call(domain("vm-a", UUID_A, pins="2"), "vm-a", "prepare", "begin")
    assert not state(pinned)["leases"][UUID_A]["cstates"]
    call(domain("vm-a", UUID_A, pins="2"), "vm-a", "release", "end")
    assert snapshot(sysfs) == before


def test_a_value_changed_while_pinned_is_left_alone(pinned, capsys):
    sysfs = pinned / "sys"
    call(domain("vm-a", UUID_A, pins="2"), "vm-a", "prepare", "begin")
    (sysfs / f"{CPU}/cpu2/cpuidle/state3/disable").write_text("0\n")
    (sysfs / f"{CPU}/cpu2/cpuidle/state2/disable").write_text("1\n")
    capsys.readouterr()
    call(domain("vm-a", UUID_A, pins="2"), "vm-a", "release", "end")
    assert deep(sysfs, 2) == "0"
    assert value(sysfs, f"{CPU}/cpu2/cpuidle/state2/disable") == "1"  # not vmtune's: not touched


def test_threshold_and_unpinned_domain(pinned):
    """max_cstate_latency_us = 1 also disables C1/C1E on the pinned CPU; a domain with no pins
    changes no C-state in scope pinned."""
    (pinned / "vmtune.toml").write_text('[hook]\ncstate_scope = "pinned"\nmax_cstate_latency_us = 1\n')
    sysfs = pinned / "sys"
    call(domain("vm-x", UUID_C, pins=None), "vm-x", "prepare", "begin")
    assert deep_states(sysfs) == ["0"] * 4
    call(domain("vm-a", UUID_A, pins="0"), "vm-a", "prepare", "begin")
    assert [value(sysfs, f"{CPU}/cpu0/cpuidle/state{k}/disable") for k in range(4)] == ["0", "1", "1", "1"]
    assert [value(sysfs, f"{CPU}/cpu1/cpuidle/state{k}/disable") for k in range(4)] == ["0"] * 4


def test_reconnect_in_pinned_scope_keeps_the_records(pinned):
    sysfs = pinned / "sys"
    before = snapshot(sysfs)
    xml = domain("vm-a", UUID_A, pins="2")
    call(xml, "vm-a", "prepare", "begin")
    records = state(pinned)["leases"][UUID_A]["cstates"]
    assert call(xml, "vm-a", "reconnect", "begin") == 0
    assert state(pinned)["leases"][UUID_A]["cstates"] == records
    call(xml, "vm-a", "release", "end")
    assert snapshot(sysfs) == before
