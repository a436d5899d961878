"""A version-2 ``state.json`` written by the hook before the host-state redesign (ffcad41, the code
in vmtune/hook/ then) reads, round-trips and is released by the new code (vmtune/hoststate/).

tests/data/state-v2.json was written by the old hook on the fake host this module builds again
(fixtures/hook.py's sysfs, 4 online CPUs and cpu4 offline; hookhost's IRQs, CPU masks, cgroup v2 groups,
host tasks 7001 and 7002, the hugepage pool 0:2048), with ``reserved_cpus = "0"`` and
``[hook] cstate_scope = "pinned"``: prepare vm-c (pinned to CPU 1), vm-a (CPU 2, 64 pages of pool
0:2048) and vm-b (CPU 3), then release vm-c with its C-state restore refused (EBUSY), which left
an ``unrestored`` record. Journal marks were then added by hand, each with the host value it means,
and the old reader (``vmtune.hook.state.decode``) accepted the result:

- baseline: CPU 1's EPP ``pending`` (killed between the journal commit and the write: the file
  still holds ``before``);
- vm-a's pool 0:2048: a ``raising`` step from 64 to 80 (killed before the write: 64 pages);
- isolation record ``irq:1``: ``from`` "0", the value vm-c's release found before it journalled
  the move to "0-1" (killed before the write: the IRQ is still at "0").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.hookhost import build as build_host
from fixtures.hookhost import fake_task_write
from fixtures.isotrees import tree
from fixtures.hook import UUID_A, UUID_B, call, domain
from fixtures.hugepages import hp_domain

from vmtune.hoststate import alive
from vmtune.hoststate.document import Pair, State, pool_step, read_state
from vmtune.hoststate.kinds import (
    KINDS,
    Cgroup,
    Cpufreq,
    CpuMask,
    CState,
    Irq,
    Ksm,
    Pool,
    Task,
    base,
    parse_key,
    tasks,
)
from vmtune.hoststate.record import Record

DATA = Path(__file__).resolve().parent / "data" / "state-v2.json"
LIMIT = 5  # the fake host's CPUs: 0-4 (cpu4 offline)
CONFIG = 'reserved_cpus = "0"\n[hook]\ncstate_scope = "pinned"\n'
A = hp_domain("vm-a", UUID_A, mib=128, pins="2")
B = domain("vm-b", UUID_B, pins="3")


def document() -> dict:
    return json.loads(DATA.read_text())


def text_of(state: State) -> str:
    """The state as the old code's commit wrote it (leases.Store.commit: indented; StateDir.commit
    writes one line now)."""
    return json.dumps(state.to_json(), indent=1, sort_keys=True) + "\n"


# -- reading and writing -------------------------------------------------------------------------

def test_the_old_v2_file_reads_and_round_trips_exactly():
    """The old code's v2 file reads with the new reader, writes back as the same document (and the
    same bytes), and reading that again gives an equal State."""
    doc = document()
    assert doc["version"] == 2
    state = read_state(doc, LIMIT)
    assert json.loads(json.dumps(state.to_json())) == doc
    assert text_of(state) == DATA.read_text()
    again = read_state(json.loads(json.dumps(state.to_json())), LIMIT)
    assert again == state
    assert again.to_json() == state.to_json()


def test_every_record_comes_back_under_its_typed_key():
    """Every record of every section is read as a typed key of a kind of that section whose name is
    the document's, with its values and journal marks kept."""
    doc = document()
    state = read_state(doc, LIMIT)
    a, b = state.leases[UUID_A], state.leases[UUID_B]

    # every section, generically: the key's kind belongs to the section, its name is the document's
    knobs = state.baseline + a.cstates + b.cstates + state.unrestored
    paths = [r["path"] for r in doc["baseline"] + doc["leases"][UUID_A]["cstates"]
             + doc["leases"][UUID_B]["cstates"] + doc["unrestored"]]
    assert [r.key.text for r in knobs] == paths
    assert all(KINDS[r.key.kind].section == "knob" for r in knobs)
    assert {r.key.text for r in state.isolation.records.values()} == set(doc["isolation"]["records"])
    assert all(KINDS[k.kind].section == "isolation" and r.key == k for k, r in state.isolation.records.items())
    assert all(KINDS[k.kind].section == "pool" for lease in state.leases.values() for k in lease.hugepages)

    # the baseline: cpufreq knobs by CPU and attribute, KSM; the pending one marked with its before
    assert [r.key for r in state.baseline] == [
        Cpufreq(0, "energy_performance_preference"), Cpufreq(0, "scaling_governor"),
        Cpufreq(1, "energy_performance_preference"), Cpufreq(1, "scaling_governor"),
        Cpufreq(2, "energy_performance_preference"), Cpufreq(2, "scaling_governor"),
        Cpufreq(3, "scaling_governor"), Ksm()]
    pending = [r for r in state.baseline if r.pending]
    assert pending == [Record(Cpufreq(1, "energy_performance_preference"), "balance_performance", "performance",
                              "balance_performance", pending[0].label)]
    assert state.baseline[-1].key.cpu is None and (state.baseline[-1].before, state.baseline[-1].after) == ("1", "0")

    # the leases: C-states by CPU and state, the pool by node and size with its journal step
    assert (a.name, a.profile, a.cpus, a.dedicated) == ("vm-a", "latency", frozenset({2}), True)
    assert [(r.key, r.before, r.after, r.pending) for r in a.cstates] == [(CState(2, 3), "0", "1", False)]
    assert [(r.key, r.before, r.after, r.pending) for r in b.cstates] == [(CState(3, 3), "0", "1", False)]
    assert list(a.hugepages) == [Pool(0, 2048)] and b.hugepages == {}
    share = a.hugepages[Pool(0, 2048)]
    assert (share.need, share.added) == (64, 64)
    assert share.steps == [pool_step(Pool(0, 2048), 64, 80)]
    assert (share.steps[0].before, share.steps[0].after, share.steps[0].mark) == ("64", "80", "64")
    assert [(r.key, r.before, r.after) for r in state.unrestored] == [(CState(1, 3), "0", "1")]

    # the isolation: tasks by thread id and start time, IRQs, the two masks, cgroups by name
    iso = state.isolation
    assert (iso.cpus, iso.irqs) == (frozenset({2, 3}), frozenset(range(1, 7)))
    assert set(iso.records) == {
        Task(7001, 4242), Task(7002, 4242), Irq(1), Irq(2), Irq(6), CpuMask("irq:default"), CpuMask("wq:cpumask"),
        Cgroup("init.scope"), Cgroup("lxc.payload"), Cgroup("system.slice"), Cgroup("user.slice")}
    sshd = iso.records[Task(7002, 4242)]
    assert (sshd.key.tid, sshd.key.start, sshd.before, sshd.after, sshd.label) == (7002, 4242, "0-3", "0-1",
                                                                                  "sshd[7002]")
    assert parse_key("isolation", "task:7002", "4242") == Task(7002, 4242)
    assert parse_key("isolation", "task:7002", "4243") != sshd.key  # another start: another task
    irq1 = iso.records[Irq(1)]
    assert (irq1.before, irq1.after, irq1.mark) == ("0-3", "0-1", "0")
    assert all(r.mark is None for k, r in iso.records.items() if k != Irq(1))
    assert (iso.records[CpuMask("irq:default")].before, iso.records[CpuMask("irq:default")].after) == ("f", "3")
    assert iso.records[Cgroup("init.scope")].before == ""  # an empty cpuset.cpus: every CPU of the parent
    assert iso.pairs == [Pair("task", frozenset({0, 1}), frozenset({2, 3}), 1000.0),
                         Pair("irq", frozenset({0, 1}), frozenset({2, 3}), 1000.0)]


# -- the new hook releases what the old one tuned ------------------------------------------------

def tuned_tree(before: dict[str, str], doc: dict) -> dict[str, str]:
    """The fake host (isotrees.tree) as the state file says the old hook left it: each record's item
    at its ``after`` (a pending knob at its ``before``, an isolation record with ``from`` at that),
    each pool raised by the pages the leases added."""
    out = dict(before)

    def put(rel: str, value: str) -> None:
        assert rel in out, rel
        out[rel] = value

    knobs = doc["baseline"] + [r for lease in doc["leases"].values() for r in lease["cstates"]] + doc["unrestored"]
    for rec in knobs:
        put("sys/" + rec["path"], rec["before"] if rec.get("pending") else rec["after"])
    for key, rec in doc["isolation"]["records"].items():
        value = rec.get("from", rec["after"])
        kind, _, name = key.partition(":")
        if key == "irq:default":
            put("proc/irq/default_smp_affinity", value)
        elif key == "wq:cpumask":
            put("sys/devices/virtual/workqueue/cpumask", value)
        elif kind == "irq":
            put(f"proc/irq/{name}/smp_affinity_list", value)
        elif kind == "task":
            rel = f"proc/{name}/task/{name}/status"
            put(rel, out[rel].split("Cpus_allowed_list:")[0] + "Cpus_allowed_list:\t" + value)
        elif kind == "cgroup":
            put(f"sys/fs/cgroup/{name}/cpuset.cpus", value)
        else:
            raise AssertionError(f"no file for {key}")
    for lease in doc["leases"].values():
        for k, share in lease["hugepages"].items():
            node, size = k.split(":")
            for leaf in ("nr_hugepages", "free_hugepages"):  # the domain does not run: its pages are free
                rel = f"sys/devices/system/node/node{node}/hugepages/hugepages-{size}kB/{leaf}"
                put(rel, str(int(out[rel]) + share["added"]))
    return out


@pytest.fixture
def old_host(fake_host_tree, monkeypatch):
    """The host the old hook tuned, as its state file says it left it, with that file in the state dir."""
    kernel = build_host(fake_host_tree)
    (fake_host_tree / "vmtune.toml").write_text(CONFIG)
    monkeypatch.setattr(base, "write_file", kernel.write)
    monkeypatch.setattr(tasks.TaskAffinity, "write", fake_task_write(fake_host_tree / "proc"))
    monkeypatch.setattr(alive, "GRACE_S", 1e12)  # the leases are old and no domain runs here: none is reaped
    before = tree(fake_host_tree)
    tuned = tuned_tree(before, document())
    for rel, value in tuned.items():
        if value != before[rel]:
            (fake_host_tree / rel).write_text(value + "\n")
    assert tree(fake_host_tree) == tuned
    folder = fake_host_tree / "state"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    (folder / "state.json").write_bytes(DATA.read_bytes())
    (folder / "state.json").chmod(0o644)
    return fake_host_tree, before, kernel


def test_the_new_hook_releases_the_old_leases_and_restores_the_host(old_host):
    """The new hook, given the old state file on its host, releases both leases and leaves the host
    exactly as it was before the old hook tuned it."""
    root, before, kernel = old_host
    changed = {rel for rel, value in tree(root).items() if value != before[rel]}
    assert len(changed) == 23  # every record's item, the pending one aside, and the pool's two files
    assert "sys/devices/system/cpu/cpu1/cpuidle/state3/disable" in changed  # the unrestored value
    assert call(A, "vm-a", "release", "end") == 0
    doc = json.loads((root / "state" / "state.json").read_text())
    assert list(doc["leases"]) == [UUID_B] and doc["unrestored"] == []
    assert doc["isolation"]["cpus"] == "3"
    assert call(B, "vm-b", "release", "end") == 0
    assert tree(root) == before
    assert json.loads((root / "state" / "state.json").read_text()) == {
        "version": 2, "leases": {}, "baseline": None, "isolation": None, "unrestored": []}
    assert kernel.violations == []
