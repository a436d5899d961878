"""The hook's isolation (vmtune/hoststate/isolation/) on hosts unlike the usual test tree: possible
but offline CPUs, systemd's own way of printing a CPU set, libvirt's partitions, a latency profile
that does not dedicate CPUs, and a state the hook could not read back.

The fake host is fixtures/hook.py's (CPUs 0-3 online, CPU 4 possible but offline) with isotrees' IRQs,
workqueue and cgroup v2; CPU 0 reserved.
"""

from __future__ import annotations

import errno
import shutil

import pytest
from fixtures.isotrees import FAKE_PID, affinity, irq, put, read, task, tree
from fixtures.hook import A, UUID_A, call, domain, state
from fixtures.isolation import CG

from vmtune.hoststate.document import Isolation, State
from vmtune.hoststate.kinds import Unit, tasks
from vmtune.hoststate.record import Record
from vmtune.hoststate.statedir import StateDir

NOW_S = 1000.0


def test_a_child_that_kept_an_offline_cpu_is_widened_at_release(isolation_host_tree, affinity_kernel):
    """Since Linux 6.2 a task keeps the offline CPUs of its mask: narrowed to 0-1,3-4, its child
    inherits 0-1,3-4, not the housekeeping set 0-1,3. Both get every CPU back at the last release."""
    task(isolation_host_tree, FAKE_PID, "0-4")
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert affinity(isolation_host_tree, FAKE_PID) == "0-1,3-4"
    child = task(isolation_host_tree, FAKE_PID + 1, "0-1,3-4", born=NOW_S)
    assert call(A, "vm-a", "release", "end") == 0
    assert affinity(isolation_host_tree, FAKE_PID) == "0-4"
    assert affinity(isolation_host_tree, child) == "0-4"


def test_a_new_irq_under_a_default_with_offline_cpus_is_widened_at_release(isolation_host_tree):
    """The default mask holds every possible CPU (1f); a new IRQ gets the narrowed default less the
    offline CPUs (0-1,3), and gets the isolated CPU back at release."""
    put(isolation_host_tree / "proc/irq/default_smp_affinity", "1f")
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert read(isolation_host_tree, "proc/irq/default_smp_affinity") == "1b"
    put(isolation_host_tree / "proc/irq/9/smp_affinity_list", "0-1,3")
    assert call(A, "vm-a", "release", "end") == 0
    assert irq(isolation_host_tree, 9) == "0-3"
    assert read(isolation_host_tree, "proc/irq/default_smp_affinity") == "1f"


def test_a_group_left_with_offline_cpus_only_is_not_narrowed(isolation_host_tree):
    """A group on 2,4 (4 offline) would keep only the offline CPU: cgroup v2 then falls back to the
    parent's CPUs, the isolated one included. Left alone, like a group on isolated CPUs only."""
    put(isolation_host_tree / CG / "lxc.payload/cpuset.cpus", "2,4")
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert read(isolation_host_tree, f"{CG}/lxc.payload/cpuset.cpus") == "2,4"


def test_a_libvirt_partition_is_never_narrowed(isolation_host_tree):
    """Without systemd, a domain's <resource><partition>/production</partition> is the top-level
    group production.partition, with the VM's own groups inside."""
    put(isolation_host_tree / CG / "production.partition/cpuset.cpus", "")
    put(isolation_host_tree / CG / "production.partition/vm.libvirt-qemu/cpuset.cpus", "2")
    before = read(isolation_host_tree, f"{CG}/production.partition/cpuset.cpus")
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert read(isolation_host_tree, f"{CG}/production.partition/cpuset.cpus") == before


def test_a_latency_profile_pinned_to_shared_cpus_isolates_nothing(isolation_host_tree):
    """A profile with host tuning but ``pinning = "node"`` pins vCPUs to the node's shared CPUs:
    not dedicated, so they are not isolated, and another domain may overlap them."""
    (isolation_host_tree / "profiles").mkdir(exist_ok=True)
    (isolation_host_tree / "profiles" / "lat-node.toml").write_text('inherit = "latency"\n[cpu]\npinning = "node"\n')
    before = tree(isolation_host_tree)
    shared = domain("vm-n", UUID_A, profile="lat-node", pins="1-3")
    assert call(shared, "vm-n", "prepare", "begin") == 0
    lease = state(isolation_host_tree)["leases"][UUID_A]
    assert lease["dedicated"] is False and lease["cpus"] == "1-3"
    assert state(isolation_host_tree).get("isolation") is None
    assert read(isolation_host_tree, "proc/irq/default_smp_affinity") == before["proc/irq/default_smp_affinity"]
    other = domain("vm-b", "22222222-2222-2222-2222-222222222222", pins="2")
    assert call(other, "vm-b", "prepare", "begin") == 0  # no conflict with shared CPUs
    assert state(isolation_host_tree)["isolation"]["cpus"] == "2"  # only the dedicated one's CPU
    assert call(other, "vm-b", "release", "end") == 0
    assert call(shared, "vm-n", "release", "end") == 0
    assert tree(isolation_host_tree) == before


def test_systemd_prints_allowed_cpus_with_spaces(isolation_host_tree, monkeypatch):
    """``systemctl show -p AllowedCPUs --value`` prints "0-1 3" (isotrees' stub does the same): read
    as a CPU list, so the state stays readable and the release restores exactly."""
    from fixtures.isolation import systemd_host

    systemd_host(isolation_host_tree, monkeypatch)
    (isolation_host_tree / "vmtune.toml").write_text('reserved_cpus = "0"\n')
    before = tree(isolation_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    units = {k: r for k, r in state(isolation_host_tree)["isolation"]["records"].items() if k.startswith("unit:")}
    assert units and not any(" " in r["after"] for r in units.values()), units
    assert call(A, "vm-a", "release", "end") == 0
    assert state(isolation_host_tree).get("isolation") is None
    assert tree(isolation_host_tree) == before
    assert call(A, "vm-a", "prepare", "begin") == 0


def test_a_state_that_would_not_read_back_is_never_written(tmp_path):
    """The commit checks what it writes with the reader: a value the reader refuses is an OSError
    (the caller's prepare fails), and the file on disk stays the last good one."""
    store = StateDir(str(tmp_path / "state"), limit=8)
    good = State()
    with store.lock():
        store.commit(good, final=True)
    on_disk = (tmp_path / "state" / "state.json").read_bytes()
    bad = State(isolation=Isolation(frozenset({2}), frozenset(), [],
                                    {Unit("system.slice"): Record(Unit("system.slice"), "0-3", "0-1 3",
                                                                  label="unit system.slice")}))
    with store.lock(), pytest.raises(OSError) as err:
        store.commit(bad)
    assert err.value.errno == errno.EINVAL and "would not read back" in str(err.value)
    assert (tmp_path / "state" / "state.json").read_bytes() == on_disk
    shutil.rmtree(tmp_path / "state")


def test_the_doctor_counts_no_task_that_could_only_go_to_an_offline_cpu(isolation_host_tree):
    """A task on 2,4 (4 offline) cannot leave CPU 2: not a stray for the doctor; one on 1-2 is."""
    from vmtune.doctor.isolation import strays

    stuck, movable = task(isolation_host_tree, FAKE_PID, "2,4"), task(isolation_host_tree, FAKE_PID + 1, "1-2")
    found, _ = strays(str(isolation_host_tree / "proc"), str(isolation_host_tree / "run/libvirt/qemu"), frozenset({2}),
                      frozenset(range(4)))
    keys = {t.key.text for t in found}
    assert f"task:{movable}" in keys and f"task:{stuck}" not in keys
    found, _ = strays(str(isolation_host_tree / "proc"), str(isolation_host_tree / "run/libvirt/qemu"),
                      frozenset({2}))  # online not known
    assert f"task:{stuck}" in {t.key.text for t in found}
