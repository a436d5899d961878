"""The hook's isolation of the kernel's own work (vmtune/hoststate/isolation/, issue 17): while CPUs
are isolated, the kernel's own machinery stays off them too: other CPUs' timers
(``kernel.timer_migration = 0``), the lockup watchdog (``kernel.watchdog_cpumask``), vmstat
(``vm.stat_interval = 10``) and every unbound workqueue that has a cpumask
(``/sys/bus/workqueue/devices/*/cpumask``). Each is journaled, restored exactly and left alone when
changed by hand, as every other isolation item; each can be turned off; a host without one of them
(or a read-only ``/proc/sys``) still gets its lease, with one warning.

The fake host is fixtures/isolation.py's (isotrees.py: the sysctls under ``proc/sys``, the
workqueues ``writeback`` and ``blkcg_punt_bio`` with a cpumask and the per-CPU ``events_percpu``
without one, linked from ``sys/bus/workqueue/devices`` as the kernel links them).
"""

from __future__ import annotations

import errno

import pytest
from fixtures.isotrees import read, tree
from fixtures.hook import A, B, call, state

from vmtune.hoststate.kinds import base

SYSCTL = {"timers": "proc/sys/kernel/timer_migration", "watchdog": "proc/sys/kernel/watchdog_cpumask",
          "vmstat": "proc/sys/vm/stat_interval"}
WQ = "sys/devices/virtual/workqueue"
ORIGINAL = {"timers": "1", "watchdog": "0-3", "vmstat": "1", "writeback": "f", "blkcg_punt_bio": "f"}
OPTION = {"timers": "isolate_timers", "watchdog": "isolate_watchdog", "vmstat": "isolate_vmstat",
          "workqueues": "isolate_workqueues"}


def kernel_values(host) -> dict[str, str]:
    return {**{k: read(host, rel) for k, rel in SYSCTL.items()},
            "writeback": read(host, f"{WQ}/writeback/cpumask"), "blkcg_punt_bio": read(host, f"{WQ}/blkcg_punt_bio/cpumask")}


def test_the_kernel_knobs_follow_the_isolation_and_come_back_exactly(isolation_host_tree):
    """Isolating CPU 2: timer migration off, vmstat every 10 s, the watchdog and both workqueues
    without CPU 2; a second lease (CPU 3) takes CPU 3 off them too, its release gives it back, and
    the last release restores every file exactly. The per-CPU workqueue has no mask and is left."""
    before = tree(isolation_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert kernel_values(isolation_host_tree) == {"timers": "0", "watchdog": "0-1,3", "vmstat": "10", "writeback": "b",
                                   "blkcg_punt_bio": "b"}
    assert call(B, "vm-b", "prepare", "begin") == 0
    assert kernel_values(isolation_host_tree) == {"timers": "0", "watchdog": "0-1", "vmstat": "10", "writeback": "3",
                                   "blkcg_punt_bio": "3"}
    records = state(isolation_host_tree)["isolation"]["records"]
    assert records["sysctl:kernel.timer_migration"] == {"before": "1", "after": "0", "label": "kernel.timer_migration"}
    assert records["wq:writeback"]["before"] == "f" and records["sysctl:kernel.watchdog_cpumask"]["before"] == "0-3"
    assert call(B, "vm-b", "release", "end") == 0
    assert kernel_values(isolation_host_tree)["watchdog"] == "0-1,3" and kernel_values(isolation_host_tree)["timers"] == "0"
    assert call(A, "vm-a", "release", "end") == 0
    assert tree(isolation_host_tree) == before
    assert state(isolation_host_tree).get("isolation") is None


@pytest.mark.parametrize("extra", sorted(OPTION))
def test_each_can_be_turned_off(isolation_host_tree, extra):
    """``[hook] isolate_X = "off"`` leaves that knob alone and isolates the others; turned off while
    a lease holds it, the next call gives it back."""
    before = tree(isolation_host_tree)
    (isolation_host_tree / "vmtune.toml").write_text(f'reserved_cpus = "0"\n[hook]\n{OPTION[extra]} = "off"\n')
    assert call(A, "vm-a", "prepare", "begin") == 0
    untouched = {"timers": ["timers"], "watchdog": ["watchdog"], "vmstat": ["vmstat"],
                 "workqueues": ["writeback", "blkcg_punt_bio"]}[extra]
    changed = {k for k, v in kernel_values(isolation_host_tree).items() if v != ORIGINAL[k]}
    assert changed == set(ORIGINAL) - set(untouched)
    assert call(A, "vm-a", "release", "end") == 0
    assert tree(isolation_host_tree) == before
    # on at prepare, off before the release: the release still restores it
    (isolation_host_tree / "vmtune.toml").write_text('reserved_cpus = "0"\n')
    assert call(A, "vm-a", "prepare", "begin") == 0
    (isolation_host_tree / "vmtune.toml").write_text(f'reserved_cpus = "0"\n[hook]\n{OPTION[extra]} = "off"\n')
    assert call(B, "vm-b", "prepare", "begin") == 0  # a reconcile with it off: given back now
    assert all(kernel_values(isolation_host_tree)[k] == ORIGINAL[k] for k in untouched)
    call(A, "vm-a", "release", "end")
    call(B, "vm-b", "release", "end")
    assert tree(isolation_host_tree) == before


def test_a_value_changed_by_hand_is_left_alone(isolation_host_tree, capsys):
    """vm.stat_interval set to 5 by hand while isolated: left at 5 at release, with a warning; the
    other knobs come back."""
    before = tree(isolation_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    (isolation_host_tree / SYSCTL["vmstat"]).write_text("5\n")
    capsys.readouterr()
    assert call(A, "vm-a", "release", "end") == 0
    assert "left alone" in capsys.readouterr().err and read(isolation_host_tree, SYSCTL["vmstat"]) == "5"
    after = tree(isolation_host_tree)
    assert after.pop(SYSCTL["vmstat"]) == "5"
    before.pop(SYSCTL["vmstat"])
    assert after == before


def test_a_host_without_the_watchdog_file_is_one_warning(isolation_host_tree, capsys):
    """No /proc/sys/kernel/watchdog_cpumask (a kernel without the lockup detector): the lease works,
    the rest is isolated, and the missing file is named once."""
    (isolation_host_tree / SYSCTL["watchdog"]).unlink()
    before = tree(isolation_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    err = capsys.readouterr().err
    assert err.count("watchdog_cpumask does not exist here: skipped") == 1, err
    assert read(isolation_host_tree, SYSCTL["timers"]) == "0" and read(isolation_host_tree, f"{WQ}/writeback/cpumask") == "b"
    assert call(A, "vm-a", "release", "end") == 0
    assert tree(isolation_host_tree) == before


def test_a_read_only_proc_sys_is_a_warning_each_and_the_lease_works(isolation_host_tree, monkeypatch, capsys):
    """A container's read-only /proc/sys (every write there EROFS): the lease is taken, the rest of
    the host is isolated, each refused knob is one warning, and nothing is left recorded."""
    real = base.write_file

    def read_only(root, rel, value):
        if rel.startswith("sys/"):
            raise OSError(errno.EROFS, "Read-only file system")
        real(root, rel, value)

    monkeypatch.setattr(base, "write_file", read_only)
    before = tree(isolation_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    err = capsys.readouterr().err
    for name in ("kernel.timer_migration", "vm.stat_interval", "kernel.watchdog_cpumask"):
        assert err.count(f"{name}: cannot set") == 1, err
    assert read(isolation_host_tree, "proc/irq/default_smp_affinity") == "b"
    assert read(isolation_host_tree, f"{WQ}/writeback/cpumask") == "b"
    assert not any(k.startswith("sysctl:") for k in state(isolation_host_tree)["isolation"]["records"])
    assert call(A, "vm-a", "release", "end") == 0
    assert tree(isolation_host_tree) == before


def _isolation_state(host, records: dict) -> None:
    import json

    doc = {"version": 2, "leases": {}, "baseline": None, "unrestored": [],
           "isolation": {"cpus": "", "irqs": "", "pairs": [], "records": records}}
    (host / "state").mkdir(exist_ok=True)
    (host / "state" / "state.json").write_text(json.dumps(doc))


def test_a_workqueue_name_from_the_state_never_leaves_sysfs(isolation_host_tree, tmp_path, capsys):
    """A record of a workqueue whose folder is a link out of sysfs: nothing outside is written, the
    record goes. One whose name holds a path (``wq:..%2F..``) is no key the state may hold: the
    state is damaged (one line), and nothing is written either."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "cpumask").write_text("b\n")
    (isolation_host_tree / "sys/bus/workqueue/devices/evil").symlink_to(outside)
    rec = {"before": "f", "after": "b", "label": "x"}
    _isolation_state(isolation_host_tree, {"wq:evil": rec})
    before = tree(isolation_host_tree)
    assert call(A, "vm-a", "release", "end") == 0
    assert (outside / "cpumask").read_text() == "b\n"
    assert tree(isolation_host_tree) == before
    assert state(isolation_host_tree).get("isolation") is None
    _isolation_state(isolation_host_tree, {"wq:..%2F..%2F..": rec})
    capsys.readouterr()
    assert call(A, "vm-a", "release", "end") == 0
    assert "is not an item key the isolation writes" in capsys.readouterr().err
    assert (outside / "cpumask").read_text() == "b\n" and tree(isolation_host_tree) == before


def test_a_sysctl_value_that_is_not_a_number_is_damage(isolation_host_tree, capsys):
    """A state whose sysctl record holds ``not-a-number``: damage (one line), and nothing is written
    to /proc/sys."""
    _isolation_state(isolation_host_tree, {"sysctl:kernel.timer_migration": {"before": "not-a-number", "after": "0",
                                                             "label": "kernel.timer_migration"}})
    before = tree(isolation_host_tree)
    capsys.readouterr()
    assert call(A, "vm-a", "release", "end") == 0
    assert "not a whole number" in capsys.readouterr().err
    assert tree(isolation_host_tree) == before
