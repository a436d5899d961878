"""Power scoped to each lease (vmtune/hoststate/power.py): ``[hook] power_scope = "pinned"`` gives
each lease's CPUs, and only they, its profile's ``[power]`` settings (governor and EPP
``performance``, a frequency floor, a C-state cap), and gives each back when no lease holds the
CPU any more; ``uncore = "max"`` raises the uncore floor while any lease is held, and
``idle_dedicated = "powersave"`` lets the config's ``dedicated_cpus`` that no lease holds save power
meanwhile. ``vmtune status`` shows what each held CPU runs at.

The fake host is fixtures/hook.py's (4 online CPUs, cpu3 without EPP; C-states POLL 0 µs, C1 2 µs,
C1E 10 µs, C6 133 µs) with a frequency floor, a base and a top frequency per CPU, and two uncore
dies. The built-in ``latency`` profile floors at the base frequency and caps C-states at the
config's 10 µs; ``realtime`` floors at the top frequency and caps at 0 µs (POLL only).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.hook import CPU, ORIGINAL_GOVERNOR, UUID_A, UUID_B, call, domain, snapshot, state, value
from fixtures.killpoints import KILLED, killed_at

from vmtune import cli
from vmtune.hoststate.kinds import base

MIN, BASE, TOP = "800000", "2100000", "4500000"
UNCORE = f"{CPU}/intel_uncore_frequency"
PINNED = '[hook]\npower_scope = "pinned"\non_conflict = "warn"\n'


def put(sysfs, rel: str, text: str) -> None:
    path = sysfs / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.fixture
def power_host(fake_host_tree):
    """fixtures/hook.py's fake host with frequencies and uncore dies, power scope pinned."""
    sysfs = fake_host_tree / "sys"
    for cpu in range(5):
        put(sysfs, f"{CPU}/cpu{cpu}/cpufreq/scaling_min_freq", MIN)
        put(sysfs, f"{CPU}/cpu{cpu}/cpufreq/base_frequency", BASE)
        put(sysfs, f"{CPU}/cpu{cpu}/cpufreq/cpuinfo_max_freq", TOP)
    for die in ("package_00_die_00", "package_01_die_00"):
        put(sysfs, f"{UNCORE}/{die}/min_freq_khz", "1200000")
        put(sysfs, f"{UNCORE}/{die}/max_freq_khz", "2400000")
    (fake_host_tree / "vmtune.toml").write_text(PINNED)
    return fake_host_tree


def cpu_power(sysfs, cpu: int) -> dict:
    """What power.py sets on ``cpu``: governor, EPP, floor and each C-state's disable flag."""
    base_dir = f"{CPU}/cpu{cpu}"
    epp = sysfs / base_dir / "cpufreq/energy_performance_preference"
    return {"governor": value(sysfs, f"{base_dir}/cpufreq/scaling_governor"),
            "epp": epp.read_text().strip() if epp.exists() else None,
            "min": value(sysfs, f"{base_dir}/cpufreq/scaling_min_freq"),
            "cstates": "".join(value(sysfs, f"{base_dir}/cpuidle/state{k}/disable") for k in range(4))}


def as_found(cpu: int) -> dict:
    return {"governor": ORIGINAL_GOVERNOR, "epp": None if cpu == 3 else "balance_performance", "min": MIN,
            "cstates": "0000"}


def latency_on(cpu: int) -> dict:
    return {"governor": "performance", "epp": None if cpu == 3 else "performance", "min": BASE, "cstates": "0001"}


def realtime_on(cpu: int) -> dict:
    return {"governor": "performance", "epp": None if cpu == 3 else "performance", "min": TOP, "cstates": "0111"}


def test_two_leases_of_two_profiles_change_their_own_cpus_only(power_host):
    sysfs = power_host / "sys"
    before = snapshot(sysfs)
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "prepare", "begin") == 0
    assert call(domain("vm-b", UUID_B, profile="realtime", pins="3"), "vm-b", "prepare", "begin") == 0
    assert [cpu_power(sysfs, c) for c in range(4)] == [as_found(0), as_found(1), latency_on(2), realtime_on(3)]
    assert value(sysfs, "kernel/mm/ksm/run") == "0"  # KSM stays host-wide
    saved = state(power_host)
    assert all("/cpu2/" in r["path"] for r in saved["leases"][UUID_A]["power"] + saved["leases"][UUID_A]["cstates"])
    assert all("/cpu3/" in r["path"] for r in saved["leases"][UUID_B]["power"] + saved["leases"][UUID_B]["cstates"])
    assert not [r for r in saved["baseline"] if "/cpu" in r["path"]]  # nothing per CPU is the host's
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "release", "end") == 0
    assert [cpu_power(sysfs, c) for c in range(4)] == [as_found(0), as_found(1), as_found(2), realtime_on(3)]
    assert call(domain("vm-b", UUID_B, profile="realtime", pins="3"), "vm-b", "release", "end") == 0
    assert snapshot(sysfs) == before


@pytest.mark.parametrize("first_out", ["vm-a", "vm-b"])
def test_a_cpu_two_leases_hold_is_the_earlier_ones_then_the_others(power_host, first_out):
    """A (latency) holds 2-3, B (realtime) then 3 too: CPU 3 is A's, as A's profile says. When A
    goes, CPU 3 becomes B's, as B's profile says; when B goes first, A keeps it. The last one out
    leaves the host as found."""
    sysfs = power_host / "sys"
    before = snapshot(sysfs)
    doms = {"vm-a": domain("vm-a", UUID_A, pins="2-3"), "vm-b": domain("vm-b", UUID_B, profile="realtime", pins="3")}
    assert call(doms["vm-a"], "vm-a", "prepare", "begin") == 0
    assert call(doms["vm-b"], "vm-b", "prepare", "begin") == 0
    assert [cpu_power(sysfs, c) for c in (2, 3)] == [latency_on(2), latency_on(3)]
    assert call(doms[first_out], first_out, "release", "end") == 0
    if first_out == "vm-a":
        assert [cpu_power(sysfs, c) for c in (2, 3)] == [as_found(2), realtime_on(3)]
    else:
        assert [cpu_power(sysfs, c) for c in (2, 3)] == [latency_on(2), latency_on(3)]
    second = "vm-b" if first_out == "vm-a" else "vm-a"
    assert call(doms[second], second, "release", "end") == 0
    assert snapshot(sysfs) == before


def test_the_host_scope_writes_no_power_records(fake_host_tree):
    """power_scope = "host" (the default): every online CPU as before, and no lease carries power records."""
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "prepare", "begin") == 0
    assert value(fake_host_tree / "sys", f"{CPU}/cpu0/cpufreq/scaling_governor") == "performance"
    assert "power" not in state(fake_host_tree)["leases"][UUID_A]


def shared_policy(sysfs, cpus=(2, 3)) -> None:
    """CPUs ``cpus`` share one cpufreq policy, laid out as the kernel lays it out: each
    ``cpuN/cpufreq`` a link to ``cpufreq/policyM`` (M the first)."""
    first = min(cpus)
    folder = sysfs / CPU / "cpufreq" / f"policy{first}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    (sysfs / CPU / f"cpu{first}" / "cpufreq").rename(folder)
    put(sysfs, f"{CPU}/cpufreq/policy{first}/related_cpus", " ".join(map(str, cpus)))
    for cpu in cpus:
        link = sysfs / CPU / f"cpu{cpu}" / "cpufreq"
        if link.exists():
            for f in link.iterdir():
                f.unlink()
            link.rmdir()
        link.symlink_to(f"../cpufreq/policy{first}")


def test_a_shared_policy_is_set_only_when_its_cpus_are_all_held(power_host, capsys):
    sysfs = power_host / "sys"
    shared_policy(sysfs)
    before = snapshot(sysfs)
    a, b = domain("vm-a", UUID_A, pins="2"), domain("vm-b", UUID_B, pins="3")
    assert call(a, "vm-a", "prepare", "begin") == 0
    assert cpu_power(sysfs, 2) == {**as_found(2), "cstates": "0001"}  # the clock is CPU 3's too: left alone
    assert "spans CPUs 2-3, not all held" in capsys.readouterr().err
    assert call(b, "vm-b", "prepare", "begin") == 0
    assert cpu_power(sysfs, 3) == latency_on(2)  # one clock, held whole now: set, by cpu2's files, as vm-a's
    assert [r["path"] for r in state(power_host)["leases"][UUID_A]["power"]][:1] == [
        f"{CPU}/cpu2/cpufreq/energy_performance_preference"]
    assert call(a, "vm-a", "release", "end") == 0
    assert cpu_power(sysfs, 3) == {**as_found(2), "cstates": "0001"}  # no longer held whole: given back
    assert call(b, "vm-b", "release", "end") == 0
    assert snapshot(sysfs) == before


def test_a_profile_may_set_a_shared_policy_for_one_cpu(power_host):
    sysfs = power_host / "sys"
    shared_policy(sysfs)
    (power_host / "profiles" / "mine.toml").write_text('inherit = "latency"\n[power]\nshared_policy = "set"\n')
    before = snapshot(sysfs)
    assert call(domain("vm-a", UUID_A, profile="mine", pins="2"), "vm-a", "prepare", "begin") == 0
    assert cpu_power(sysfs, 2) == latency_on(2)
    assert call(domain("vm-a", UUID_A, profile="mine", pins="2"), "vm-a", "release", "end") == 0
    assert snapshot(sysfs) == before


@pytest.mark.parametrize("how", ["removed", "broken"])
def test_a_lease_whose_profile_goes_keeps_what_its_cpus_run_at(power_host, capsys, how):
    """vm-a's own profile (realtime's power) is removed or broken while it runs: another domain's
    start and vm-a's reconnect change nothing on its CPU (the config's limit would enable C1 and
    C1E and lower the floor of a running real-time domain), and its release gives everything back."""
    sysfs = power_host / "sys"
    mine = power_host / "profiles" / "mine.toml"
    mine.write_text('inherit = "realtime"\n')
    before = snapshot(sysfs)
    a = domain("vm-a", UUID_A, profile="mine", pins="2")
    assert call(a, "vm-a", "prepare", "begin") == 0
    assert cpu_power(sysfs, 2) == realtime_on(2)
    if how == "removed":
        mine.unlink()
    else:
        mine.write_text("[power\n")
    capsys.readouterr()
    said = "the lease of vm-a keeps what its CPUs run at: its profile mine cannot be read"
    assert call(domain("vm-b", UUID_B, pins="3"), "vm-b", "prepare", "begin") == 0
    assert capsys.readouterr().err.count(said) == 1  # once a call, though the call reads it twice
    assert call(a, "vm-a", "reconnect", "begin") == 0
    assert [cpu_power(sysfs, c) for c in (2, 3)] == [realtime_on(2), latency_on(3)]
    assert call(domain("vm-b", UUID_B, pins="3"), "vm-b", "release", "end") == 0
    assert call(a, "vm-a", "release", "end") == 0
    assert snapshot(sysfs) == before


def test_a_reap_says_each_line_once(power_host, capsys, monkeypatch):
    """``vmtune hook reap`` releases a lease as the hook does, reading the power the others want
    before and after the records move: each line it logs comes once, as in a hook call."""
    from vmtune.hoststate import alive
    sysfs = power_host / "sys"
    before = snapshot(sysfs)
    mine = power_host / "profiles" / "mine.toml"
    mine.write_text('inherit = "realtime"\n')
    a = domain("vm-a", UUID_A, profile="mine", pins="2")
    assert call(a, "vm-a", "prepare", "begin") == 0
    assert call(domain("vm-b", UUID_B, pins="3"), "vm-b", "prepare", "begin") == 0
    (power_host / "libvirt" / "vm-a.xml").write_text(a)  # vm-a runs; vm-b's domain is gone
    mine.unlink()
    monkeypatch.setattr(alive, "GRACE_S", 0.0)
    capsys.readouterr()
    assert cli.main(["hook", "reap"]) == 0
    said = capsys.readouterr()
    assert "reaped the lease of vm-b" in said.out
    assert said.err.count("the lease of vm-a keeps what its CPUs run at: its profile mine cannot be read") == 1
    assert cpu_power(sysfs, 2) == realtime_on(2)
    assert call(a, "vm-a", "release", "end") == 0
    assert snapshot(sysfs) == before


def test_said_once_covers_the_last_resort_that_verify_writes_with():
    """``vmtune verify`` sets up no logging: the engine's warnings go out through Python's last
    resort, which ``said_once`` (around verify's lease and release, which read the power twice)
    covers too: each line once in the block, and again after it."""
    code = ("import logging\nfrom vmtune.oneline import said_once\n"
            "log = logging.getLogger('vmtune.hoststate.power')\n"
            "with said_once():\n    log.warning('the lease keeps it')\n    log.warning('the lease keeps it')\n"
            "log.warning('the lease keeps it')\n")  # after the block: written again
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(Path(cli.__file__).parents[2])})
    assert done.stderr == "the lease keeps it\n" * 2


def test_a_floor_without_a_base_frequency_is_kept(power_host, capsys):
    sysfs = power_host / "sys"
    (sysfs / CPU / "cpu2/cpufreq/base_frequency").unlink()
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "prepare", "begin") == 0
    assert cpu_power(sysfs, 2) == {**latency_on(2), "min": MIN}
    assert "no base_frequency: scaling_min_freq kept" in capsys.readouterr().err


def test_a_floor_is_never_lowered(power_host):
    sysfs = power_host / "sys"
    put(sysfs, f"{CPU}/cpu2/cpufreq/scaling_min_freq", "3000000")  # the admin's own floor, above the base
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "prepare", "begin") == 0
    assert cpu_power(sysfs, 2)["min"] == "3000000"


def test_the_uncore_floor_is_raised_while_any_lease_is_held(power_host):
    sysfs = power_host / "sys"
    (power_host / "vmtune.toml").write_text(PINNED + 'uncore = "max"\n')
    before = snapshot(sysfs)
    a, b = domain("vm-a", UUID_A, pins="2"), domain("vm-b", UUID_B, profile="realtime", pins="3")
    assert call(a, "vm-a", "prepare", "begin") == 0
    assert call(b, "vm-b", "prepare", "begin") == 0
    assert value(sysfs, f"{UNCORE}/package_01_die_00/min_freq_khz") == "2400000"
    assert call(a, "vm-a", "release", "end") == 0
    assert value(sysfs, f"{UNCORE}/package_00_die_00/min_freq_khz") == "2400000"
    assert call(b, "vm-b", "release", "end") == 0
    assert snapshot(sysfs) == before


def test_the_state_reads_back_the_power_records(power_host):
    """A lease's power records are a v2 document's optional ``power`` list, read back by the next call."""
    xml = domain("vm-a", UUID_A, pins="2")
    call(xml, "vm-a", "prepare", "begin")
    records = state(power_host)["leases"][UUID_A]["power"]
    assert [r["path"].rsplit("/", 1)[1] for r in records] == [
        "energy_performance_preference", "scaling_governor", "scaling_min_freq"]
    assert call(xml, "vm-a", "reconnect", "begin") == 0
    assert state(power_host)["leases"][UUID_A]["power"] == records


# -- killed at any point ----------------------------------------------------------------------------
STEPS = [("vm-a", "prepare", "begin"), ("vm-b", "prepare", "begin"), ("vm-a", "release", "end"),
         ("vm-b", "release", "end")]
XML = {"vm-a": domain("vm-a", UUID_A, pins="2-3"), "vm-b": domain("vm-b", UUID_B, profile="realtime", pins="3")}


POINTS = [(base, "write_file"), (os, "replace"), (os, "fsync")]  # each host write, each state commit's two


def _points() -> list[int]:
    """How many kill points each step of STEPS passes, run once to its end."""
    counts = []
    seen = [0]
    real = {(owner, name): getattr(owner, name) for owner, name in POINTS}

    def counting(fn):
        def inner(*args, **kwargs):
            seen[0] += 1
            return fn(*args, **kwargs)
        return inner

    for (owner, name), fn in real.items():
        setattr(owner, name, counting(fn))
    try:
        for name, op, sub in STEPS:
            seen[0] = 0
            assert call(XML[name], name, op, sub) == 0
            counts.append(seen[0])
    finally:
        for (owner, name), fn in real.items():
            setattr(owner, name, fn)
    return counts


def _reset(power_host, before: dict) -> None:
    for rel, text in before.items():
        (power_host / "sys" / rel).write_text(text + "\n")
    shutil.rmtree(power_host / "state", ignore_errors=True)


IDLE = PINNED + 'idle_dedicated = "powersave"\n'


def tuned_by_hand(sysfs, cpus=(1, 3)) -> None:
    """CPUs ``cpus`` as an admin leaves CPUs kept for latency: performance, their deepest state off."""
    for cpu in cpus:
        put(sysfs, f"{CPU}/cpu{cpu}/cpufreq/scaling_governor", "performance")
        put(sysfs, f"{CPU}/cpu{cpu}/cpuidle/state3/disable", "1")


@pytest.mark.parametrize("config", ["pinned", "idle"])
def test_killed_at_any_point_the_host_comes_back_exactly(power_host, config):
    """Two overlapping leases of two profiles, each step killed at each of its kill points in turn.
    Then as libvirt and the reaper go on: a failed start is released, a killed release is done
    again; after a killed start of vm-b, CPUs 2-3 are vm-a's as its profile says, and the host
    ends as found."""
    sysfs = power_host / "sys"
    if config == "idle":
        (power_host / "vmtune.toml").write_text('dedicated_cpus = "1-3"\n' + IDLE)
        tuned_by_hand(sysfs)
    before = snapshot(sysfs)
    counts = _points()
    assert snapshot(sysfs) == before and all(counts)
    for step, count in enumerate(counts):
        for n in range(count):
            _reset(power_host, before)
            for name, op, sub in STEPS[:step]:
                assert call(XML[name], name, op, sub) == 0
            name, op, sub = STEPS[step]
            assert killed_at(n, [name, op, sub, "-"], XML[name], POINTS) == KILLED
            assert call(XML[name], name, "release", "end", "failed" if op == "prepare" else "-") == 0
            if step == 1:
                assert [cpu_power(sysfs, c) for c in (2, 3)] == [latency_on(2), latency_on(3)], n
            for later, lop, lsub in STEPS[step + 1:]:
                if later != name or op != "prepare":  # a start that failed is not released twice
                    assert call(XML[later], later, lop, lsub) == 0
            assert snapshot(sysfs) == before, (STEPS[step], n)


def test_a_second_lease_is_no_sign_of_a_host_left_untuned(power_host, capsys):
    """vm-b's own CPU is tuned for it at its start: no "not fully tuned" warning; one that was
    undone by hand since is."""
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "prepare", "begin") == 0
    capsys.readouterr()
    assert call(domain("vm-b", UUID_B, pins="3"), "vm-b", "prepare", "begin") == 0
    assert "not fully tuned" not in capsys.readouterr().err
    put(power_host / "sys", f"{CPU}/cpu2/cpufreq/scaling_governor", ORIGINAL_GOVERNOR)  # back at its original value
    assert call(domain("vm-b", UUID_B, pins="3"), "vm-b", "reconnect", "begin") == 0
    assert "not fully tuned (1 value(s) missing)" in capsys.readouterr().err
    assert value(power_host / "sys", f"{CPU}/cpu2/cpufreq/scaling_governor") == "performance"


# -- what vmtune status shows -------------------------------------------------------------------------

def test_status_shows_each_held_cpus_power_as_sysfs_reads_it(power_host, tmp_path, capsys):
    """Each held CPU with the lease that owns it (the earlier of two) and what it runs at now; the
    JSON has the same, and the power scope."""
    assert call(domain("vm-a", UUID_A, pins="2-3"), "vm-a", "prepare", "begin") == 0
    assert call(domain("vm-b", UUID_B, profile="realtime", pins="1,3"), "vm-b", "prepare", "begin") == 0
    capsys.readouterr()
    assert cli.main(["status", "--hooks-dir", str(tmp_path / "hooks"), "-n", "0"]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert [line for line in lines if line.startswith(("power:", "CPU "))] == [
        "power:     CPU 1 (vm-b): performance, EPP performance, floor 4.5 GHz, idle down to POLL (0 µs)",
        "CPU 2 (vm-a): performance, EPP performance, floor 2.1 GHz, idle down to C1E (10 µs)",
        "CPU 3 (vm-a): performance, floor 2.1 GHz, idle down to C1E (10 µs)"]
    assert cli.main(["status", "--json", "--hooks-dir", str(tmp_path / "hooks"), "-n", "0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["power_scope"] == "pinned"
    assert [(c["cpu"], c["lease"], c["governor"], c["min_freq_khz"], [s["name"] for s in c["idle_states"]])
            for c in doc["power"]] == [(1, "vm-b", "performance", 4500000, ["POLL"]),
                                       (2, "vm-a", "performance", 2100000, ["POLL", "C1", "C1E"]),
                                       (3, "vm-a", "performance", 2100000, ["POLL", "C1", "C1E"])]


# -- the dedicated CPUs no lease holds --------------------------------------------------------------

def test_idle_dedicated_cpus_save_power_while_others_run(power_host):
    """dedicated_cpus 1-3, tuned by hand for latency: while vm-a holds CPU 2, CPUs 1 and 3 run
    powersave with every idle state; vm-b taking CPU 3 gets it as it was, then as its profile says;
    CPU 2 idles when vm-a goes; the last one out leaves the host as found."""
    sysfs = power_host / "sys"
    (power_host / "vmtune.toml").write_text('dedicated_cpus = "1-3"\n' + IDLE)
    tuned_by_hand(sysfs)
    before = snapshot(sysfs)
    idle = {"governor": "powersave", "min": MIN, "cstates": "0000"}
    a, b = domain("vm-a", UUID_A, pins="2"), domain("vm-b", UUID_B, profile="realtime", pins="3")
    assert call(a, "vm-a", "prepare", "begin") == 0
    assert [cpu_power(sysfs, c) for c in range(4)] == [
        as_found(0), {**as_found(1), **idle}, latency_on(2), {**as_found(3), **idle}]
    assert len(state(power_host)["idle"]) == 4  # two governors, two deep states
    assert call(b, "vm-b", "prepare", "begin") == 0
    assert cpu_power(sysfs, 3) == realtime_on(3)
    assert call(a, "vm-a", "release", "end") == 0
    assert cpu_power(sysfs, 2) == {**as_found(2), **idle}  # as found: it was idle already
    assert cpu_power(sysfs, 1) == {**as_found(1), **idle}
    assert call(b, "vm-b", "release", "end") == 0
    assert snapshot(sysfs) == before
    assert "idle" not in json.loads((power_host / "state" / "state.json").read_text())


@pytest.mark.parametrize("how", ["refused", "failed"])
def test_a_start_that_does_not_happen_leaves_idle_cpus_asleep(power_host, monkeypatch, how):
    """vm-b's start wakes idle CPU 3 for it, then is refused (too few hugepages) or fails half-way:
    CPU 3 is asleep again when the call ends, as the state says, not at the next call."""
    from vmtune.hoststate import pages
    sysfs = power_host / "sys"
    (power_host / "vmtune.toml").write_text('dedicated_cpus = "1-3"\n' + IDLE)
    tuned_by_hand(sysfs)
    before = snapshot(sysfs)
    a = domain("vm-a", UUID_A, pins="2")
    assert call(a, "vm-a", "prepare", "begin") == 0
    asleep = snapshot(sysfs)
    assert cpu_power(sysfs, 3)["governor"] == "powersave"

    def short(*args):
        if how == "refused":
            return False
        raise OSError("the pool cannot grow")
    with monkeypatch.context() as patch:  # (the fixture's own patches stay: its fake host)
        patch.setattr(pages, "top_up", short)
        assert call(domain("vm-b", UUID_B, pins="3"), "vm-b", "prepare", "begin") == 1
    assert snapshot(sysfs) == asleep
    assert call(a, "vm-a", "release", "end") == 0
    assert snapshot(sysfs) == before


def test_idle_dedicated_is_for_the_pinned_power_scope_only(power_host):
    (power_host / "vmtune.toml").write_text('dedicated_cpus = "1-3"\n[hook]\nidle_dedicated = "powersave"\n')
    tuned_by_hand(power_host / "sys")
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "prepare", "begin") == 0
    assert cpu_power(power_host / "sys", 1)["cstates"] == "0001"  # host scope: every CPU's deep state off
    assert "idle" not in state(power_host)


def test_a_reconnect_keeps_a_leases_place_and_its_cpus_as_they_run(power_host):
    """A reconnect (libvirtd came back; vm-a never stopped) keeps vm-a's lease as it was, its
    ``since`` too: vm-a stays the earlier on CPU 3, which runs on as vm-a's latency profile says,
    its records with vm-a's lease (a daemon's restart changes nothing a domain runs on). vm-b's own
    reconnect changes nothing either; the host still comes back exactly."""
    sysfs = power_host / "sys"
    before = snapshot(sysfs)
    a, b = domain("vm-a", UUID_A, pins="2-3"), domain("vm-b", UUID_B, profile="realtime", pins="3")
    assert call(a, "vm-a", "prepare", "begin") == 0
    assert call(b, "vm-b", "prepare", "begin") == 0
    assert cpu_power(sysfs, 3) == latency_on(3)
    since = {key: lease["since"] for key, lease in state(power_host)["leases"].items()}
    records = state(power_host)["leases"][UUID_A]["cstates"]
    for xml, name in ((a, "vm-a"), (b, "vm-b")):
        assert call(xml, name, "reconnect", "begin") == 0
        assert [cpu_power(sysfs, c) for c in (2, 3)] == [latency_on(2), latency_on(3)]
    assert {key: lease["since"] for key, lease in state(power_host)["leases"].items()} == since
    assert state(power_host)["leases"][UUID_A]["cstates"] == records
    assert any("/cpu3/" in r["path"] for r in records)
    assert call(b, "vm-b", "release", "end") == 0
    assert [cpu_power(sysfs, c) for c in (2, 3)] == [latency_on(2), latency_on(3)]
    assert call(a, "vm-a", "release", "end") == 0
    assert snapshot(sysfs) == before


def test_a_start_again_of_a_leased_domain_is_a_new_lease(power_host):
    """A prepare of a domain whose lease is still there (its release was lost) is a new start: the
    lease is renewed, later than vm-b's, and CPU 3 goes to vm-b, the earlier now."""
    sysfs = power_host / "sys"
    before = snapshot(sysfs)
    a, b = domain("vm-a", UUID_A, pins="2-3"), domain("vm-b", UUID_B, profile="realtime", pins="3")
    assert call(a, "vm-a", "prepare", "begin") == 0
    assert call(b, "vm-b", "prepare", "begin") == 0
    assert call(a, "vm-a", "prepare", "begin") == 0
    leases = state(power_host)["leases"]
    assert leases[UUID_A]["since"] > leases[UUID_B]["since"]
    assert [cpu_power(sysfs, c) for c in (2, 3)] == [latency_on(2), realtime_on(3)]
    assert call(b, "vm-b", "release", "end") == 0
    assert call(a, "vm-a", "release", "end") == 0
    assert snapshot(sysfs) == before


def test_a_scope_switched_back_to_host_gives_the_power_records_back(power_host):
    """The config goes back to power_scope = "host" while vm-a holds CPU 2: its release (or a hook
    restore) still gives back the governor, EPP and floor it set, and the host ends as found."""
    sysfs = power_host / "sys"
    before = snapshot(sysfs)
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "prepare", "begin") == 0
    (power_host / "vmtune.toml").write_text("")
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "release", "end") == 0
    assert snapshot(sysfs) == before
    (power_host / "vmtune.toml").write_text(PINNED)
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "prepare", "begin") == 0
    (power_host / "vmtune.toml").write_text("")
    assert call(domain("vm-b", UUID_B, pins="3"), "vm-b", "prepare", "begin") == 0  # host scope: every CPU
    assert "power" not in state(power_host)["leases"][UUID_A]  # given back, the baseline has them now
    assert cpu_power(sysfs, 2)["governor"] == "performance" and cpu_power(sysfs, 2)["min"] == MIN
    assert call(domain("vm-b", UUID_B, pins="3"), "vm-b", "release", "end") == 0
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "release", "end") == 0
    assert snapshot(sysfs) == before


def test_a_floor_above_the_cpus_ceiling_is_the_ceiling(power_host):
    """scaling_max_freq capped below the base frequency: the floor goes to the cap (where the
    kernel would clamp it), so a later call finds it as recorded and writes nothing again."""
    sysfs = power_host / "sys"
    put(sysfs, f"{CPU}/cpu2/cpufreq/scaling_max_freq", "2000000")
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "prepare", "begin") == 0
    assert cpu_power(sysfs, 2)["min"] == "2000000"
    seen = snapshot(sysfs)
    records = state(power_host)["leases"][UUID_A]["power"]
    assert call(domain("vm-b", UUID_B, pins="3"), "vm-b", "prepare", "begin") == 0
    assert call(domain("vm-a", UUID_A, pins="2"), "vm-a", "reconnect", "begin") == 0
    assert {k: v for k, v in snapshot(sysfs).items() if "cpu2" in k} == {k: v for k, v in seen.items() if "cpu2" in k}
    assert state(power_host)["leases"][UUID_A]["power"] == records
