"""The isolation's records and history (vmtune/hoststate/isolation/moves.py): a record stays until its item
is restored, gone or changed by hand; any group name has a key; tasks that inherited a mask the hook
imposed are widened at every shrink; the kernel's read-back is what the record keeps.

Fake trees (isotrees.py), fake tasks under the fake /proc with a fake ``sched_setaffinity``
(``isotrees.Kernel``), the stub systemctl; real child processes where any user may move its own.
"""

from __future__ import annotations

import errno
import json
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from fixtures.isotrees import FAKE_PID, IRQS, affinity, irq, read, task, tree
from fixtures.hook import A, B, call, state
from fixtures.isolation import CG, allowed, needs_two_cpus, systemd_host

from vmtune.hoststate import isolation
from vmtune.hoststate.document import MAX_PAIRS, Isolation, Pair, read_state as decode
from vmtune.hoststate.kinds import Cgroup, Irq, base, files, groups, parse_key, tasks
from vmtune.roots import Roots

NOW_S = 1000.0  # the fake host's uptime: tasks born at NOW_S started while isolated


def records(host) -> dict:
    return state(host).get("isolation", {}).get("records", {})


# -- 1. a record stays until its item is restored, gone, or changed by hand ----------------------------

def test_a_failed_restore_keeps_its_record_and_the_next_call_finishes(isolation_host_tree, monkeypatch, capsys):
    """IRQ 1's restore fails (EBUSY) at the last release: its record stays in the state, the log
    says so, and the next hook call (a release of a domain with no lease) restores it exactly."""
    before = tree(isolation_host_tree)
    call(A, "vm-a", "prepare", "begin")
    real = base.Kind.write

    def busy(self, item, raw):
        if item.key == Irq(1):
            raise OSError(errno.EBUSY, "Device or resource busy")
        real(self, item, raw)

    monkeypatch.setattr(base.Kind, "write", busy)
    capsys.readouterr()
    assert call(A, "vm-a", "release", "end") == 0
    assert "not restored yet, kept for the next call: IRQ 1" in capsys.readouterr().err
    assert irq(isolation_host_tree, 1) == "0-1,3"
    assert records(isolation_host_tree) == {"irq:1": {"before": "0-3", "after": "0-1,3", "label": "IRQ 1"}}
    monkeypatch.setattr(base.Kind, "write", real)
    assert call(B, "vm-b", "release", "end") == 0
    assert tree(isolation_host_tree) == before
    assert state(isolation_host_tree).get("isolation") is None


def test_a_failed_restore_is_tried_again_by_the_next_prepare(isolation_host_tree, affinity_kernel):
    """A task whose restore is refused keeps its record; the next prepare keeps it narrowed for its
    own lease, and that lease's release restores it."""
    pid = task(isolation_host_tree, FAKE_PID, "0-3")
    before = tree(isolation_host_tree)
    call(A, "vm-a", "prepare", "begin")
    affinity_kernel.refuse[pid] = errno.EAGAIN
    call(A, "vm-a", "release", "end")
    assert affinity(isolation_host_tree, pid) == "0-1,3" and f"task:{pid}" in records(isolation_host_tree)
    call(B, "vm-b", "prepare", "begin")
    assert affinity(isolation_host_tree, pid) == "0-2"
    call(B, "vm-b", "release", "end")
    assert tree(isolation_host_tree) == before


def test_a_unit_systemctl_cannot_read_keeps_its_record(isolation_host_tree, monkeypatch):
    """``systemctl show`` fails for system.slice during the release: the unit is not found, so its
    record stays (it is not gone), and the next call restores it."""
    systemd_host(isolation_host_tree, monkeypatch)
    before = tree(isolation_host_tree)
    call(A, "vm-a", "prepare", "begin")
    fail = isolation_host_tree / "systemctl.fail"
    fail.write_text("show -p AllowedCPUs --value system.slice\n")
    call(A, "vm-a", "release", "end")
    assert list(records(isolation_host_tree)) == ["unit:system.slice"]
    fail.unlink()
    call(B, "vm-b", "release", "end")
    assert tree(isolation_host_tree) == before
    assert state(isolation_host_tree).get("isolation") is None


def test_records_of_items_that_are_gone_are_dropped(isolation_host_tree, affinity_kernel):
    """A task that exited, an IRQ whose folder is gone and a cgroup removed while isolated: their
    records go; the rest is restored."""
    import shutil

    pid = task(isolation_host_tree, FAKE_PID, "0-3")
    call(A, "vm-a", "prepare", "begin")
    assert {f"task:{pid}", "irq:1", "cgroup:lxc.payload"} <= set(records(isolation_host_tree))
    shutil.rmtree(isolation_host_tree / "proc" / str(pid))
    shutil.rmtree(isolation_host_tree / "proc/irq/1")
    shutil.rmtree(isolation_host_tree / CG / "lxc.payload")
    call(A, "vm-a", "release", "end")
    assert state(isolation_host_tree).get("isolation") is None
    assert irq(isolation_host_tree, 2) == "0-3"


def test_a_reused_pid_drops_the_record(isolation_host_tree, affinity_kernel):
    """A recorded task whose pid now belongs to a task with another start time: the record goes and
    the new task is not "restored"."""
    pid = task(isolation_host_tree, FAKE_PID, "0-3")
    call(A, "vm-a", "prepare", "begin")
    task(isolation_host_tree, pid, "1", born=NOW_S)  # exited; its pid reused by a task pinned to CPU 1
    call(A, "vm-a", "release", "end")
    assert affinity(isolation_host_tree, pid) == "1"
    assert state(isolation_host_tree).get("isolation") is None


# -- 2. any cgroup name ------------------------------------------------------------------------------

NAMES = ("my+group", "with space", "grüppe", os.fsdecode(b"raw\xff"), "%41", "a" * 255)


def test_any_cgroup_name_is_narrowed_and_restored(isolation_host_tree):
    """Top-level groups named with ``+``, a space, non-ASCII, bytes that are not UTF-8, a ``%`` and
    255 characters: the state file stays readable (prepares are not refused), each group is
    narrowed and restored exactly."""
    for name in NAMES:
        (isolation_host_tree / CG / name).mkdir()
        (isolation_host_tree / CG / name / "cpuset.cpus").write_text("0-3\n")
    before = tree(isolation_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert all(read(isolation_host_tree, f"{CG}/{name}/cpuset.cpus") == "0-1,3" for name in NAMES)
    assert call(B, "vm-b", "prepare", "begin") == 0
    assert all(read(isolation_host_tree, f"{CG}/{name}/cpuset.cpus") == "0-1" for name in NAMES)
    call(A, "vm-a", "release", "end")
    call(B, "vm-b", "release", "end")
    assert tree(isolation_host_tree) == before


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=255).filter(lambda b: b"/" not in b and b"\0" not in b))
def test_every_directory_name_has_a_key_the_state_accepts(raw):
    """Any directory name (1-255 bytes, no ``/`` or NUL) escapes into a key that the state's key rule
    accepts and that gives the name back."""
    name = os.fsdecode(raw)
    for kind in ("cgroup", "unit"):
        key = groups.key_of(kind, name)
        assert parse_key("isolation", key) is not None, key
        assert groups.name_of(key) == name


def test_a_key_read_back_never_leaves_the_cgroup_root(isolation_host_tree, tmp_path):
    """Records whose keys point outside the cgroup root (``..``, a ``/``, a symbolic link to a
    folder outside) or at a unit the hook never sets: nothing outside is written, the records go."""
    outside = isolation_host_tree / "sys" / "fs"
    (outside / "cpuset.cpus").write_text("0-1,3\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "cpuset.cpus").write_text("0-1,3\n")
    (isolation_host_tree / CG / "link").symlink_to(tmp_path / "elsewhere")
    (isolation_host_tree / CG / "a").mkdir()
    rec = {"before": "0-3", "after": "0-1,3", "label": "x"}
    keys = ["cgroup:..", "cgroup:%2E%2E", "cgroup:a%2F..%2F..", "cgroup:link", "unit:--help", "cgroup:machine.slice"]
    assert all(parse_key("isolation", k) is not None for k in keys)
    doc = {"version": 1, "leases": {}, "baseline": None,
           "isolation": {"cpus": "", "irqs": "", "pairs": [], "records": {k: rec for k in keys}}}
    (isolation_host_tree / "state").mkdir(exist_ok=True)
    (isolation_host_tree / "state" / "state.json").write_text(json.dumps(doc))
    before = tree(isolation_host_tree)
    assert call(A, "vm-a", "release", "end") == 0
    assert read(isolation_host_tree, "sys/fs/cpuset.cpus") == "0-1,3"
    assert (tmp_path / "elsewhere" / "cpuset.cpus").read_text() == "0-1,3\n"
    assert tree(isolation_host_tree) == before
    assert state(isolation_host_tree).get("isolation") is None


# -- 3. irqbalance ------------------------------------------------------------------------------------

def test_irqbalance_is_named_in_the_log_whatever_its_cgroup(isolation_host_tree, capsys):
    """irqbalance runs in system.slice, a group narrowed as a whole (so its tasks are not scanned):
    the hook's log still says it runs."""
    task(isolation_host_tree, FAKE_PID, "0-3", comm="irqbalance", cgroup="0::/system.slice/irqbalance.service")
    call(A, "vm-a", "prepare", "begin")
    assert f"irqbalance is running (pid {FAKE_PID})" in capsys.readouterr().err


# -- 4. tasks that inherited a mask the hook imposed ---------------------------------------------------

def test_a_child_forked_while_isolated_is_widened_at_release(isolation_host_tree, affinity_kernel):
    """A child born while CPU 2 is isolated inherits 0-1,3 from its narrowed parent and has no record:
    the release widens it to every CPU. A task that had exactly 0-1,3 before the isolation (pinned
    there on purpose) is left alone."""
    parent = task(isolation_host_tree, FAKE_PID, "0-3")
    pinned = task(isolation_host_tree, FAKE_PID + 1, "0-1,3")
    call(A, "vm-a", "prepare", "begin")
    assert affinity(isolation_host_tree, parent) == "0-1,3"
    child = task(isolation_host_tree, FAKE_PID + 2, "0-1,3", born=NOW_S)
    call(A, "vm-a", "release", "end")
    assert affinity(isolation_host_tree, child) == "0-3"
    assert affinity(isolation_host_tree, parent) == "0-3" and affinity(isolation_host_tree, pinned) == "0-1,3"


def test_inherited_masks_follow_every_shrink(isolation_host_tree, affinity_kernel):
    """Children born under each housekeeping set (0-1,3 while vm-a runs, 0-1 while both run) follow
    every change: widened to 0-2 when vm-a stops, and to every CPU when vm-b stops."""
    parent = task(isolation_host_tree, FAKE_PID, "0-3")
    call(A, "vm-a", "prepare", "begin")
    first = task(isolation_host_tree, FAKE_PID + 1, "0-1,3", born=NOW_S)
    call(B, "vm-b", "prepare", "begin")
    assert affinity(isolation_host_tree, first) == "0-1"
    second = task(isolation_host_tree, FAKE_PID + 2, "0-1", born=NOW_S)
    call(A, "vm-a", "release", "end")
    assert [affinity(isolation_host_tree, p) for p in (parent, first, second)] == ["0-2"] * 3
    third = task(isolation_host_tree, FAKE_PID + 3, "0-2", born=NOW_S)
    call(B, "vm-b", "release", "end")
    assert [affinity(isolation_host_tree, p) for p in (parent, first, second, third)] == ["0-3"] * 4


@pytest.mark.parametrize("phase", ["prepare", "release"])
def test_a_child_forked_between_the_scan_and_its_parents_write_is_caught(isolation_host_tree, affinity_kernel, phase):
    """A fork lands after the hook listed the tasks and before it wrote the parent: the child has the
    parent's old mask. The sweep after the writes narrows it at prepare, and widens it at the last
    release (where it inherited the housekeeping set 0-1,3)."""
    parent = task(isolation_host_tree, FAKE_PID, "0-3")
    child = FAKE_PID + 1
    if phase == "release":
        call(A, "vm-a", "prepare", "begin")
    old = affinity(isolation_host_tree, parent)
    affinity_kernel.before[parent] = lambda: task(isolation_host_tree, child, old, born=NOW_S)
    call(A, "vm-a", phase, "begin" if phase == "prepare" else "end")
    assert affinity(isolation_host_tree, child) == affinity(isolation_host_tree, parent) == ("0-1,3" if phase == "prepare" else "0-3")
    if phase == "prepare":
        call(A, "vm-a", "release", "end")
        assert affinity(isolation_host_tree, child) == "0-3"
    assert state(isolation_host_tree).get("isolation") is None


def test_a_child_of_a_parent_whose_restore_failed_is_widened_by_the_retry(isolation_host_tree, affinity_kernel):
    """The last release cannot restore the parent (still 0-1,3): the history of imposed sets stays
    with its record, so a child it forks afterwards is widened too when the next call restores it."""
    parent = task(isolation_host_tree, FAKE_PID, "0-3")
    call(A, "vm-a", "prepare", "begin")
    affinity_kernel.refuse[parent] = errno.EAGAIN
    call(A, "vm-a", "release", "end")
    child = task(isolation_host_tree, FAKE_PID + 1, "0-1,3", born=NOW_S + 1)
    call(B, "vm-b", "release", "end")
    assert affinity(isolation_host_tree, parent) == affinity(isolation_host_tree, child) == "0-3"
    assert state(isolation_host_tree).get("isolation") is None


def test_the_history_keeps_only_the_current_sets_when_every_task_moved(isolation_host_tree, affinity_kernel):
    """Leases that come and go, over and over: the state never holds more than the current
    housekeeping set and default IRQ mask; none after the last release."""
    task(isolation_host_tree, FAKE_PID, "0-3")
    for _ in range(5):
        for dom, name in ((A, "vm-a"), (B, "vm-b")):
            call(dom, name, "prepare", "begin")
            assert len(state(isolation_host_tree)["isolation"]["pairs"]) <= 2
        call(A, "vm-a", "release", "end")
        task(isolation_host_tree, FAKE_PID + 1, "0-2", born=NOW_S)
        assert len(state(isolation_host_tree)["isolation"]["pairs"]) <= 2
        call(B, "vm-b", "release", "end")
        assert affinity(isolation_host_tree, FAKE_PID + 1) == "0-3"
        assert state(isolation_host_tree).get("isolation") is None


def test_the_history_is_bounded_and_says_what_it_forgets(isolation_host_tree, affinity_kernel, caplog):
    """A pass that could not move a task holding an older imposed set keeps the older sets, but never
    more than MAX_PAIRS: the oldest are forgotten, with a warning."""
    pid = task(isolation_host_tree, FAKE_PID, "0", born=NOW_S)
    pairs = [Pair("task", frozenset({n % 2}), frozenset({2, 3}), float(n)) for n in range(2)]
    pairs += [Pair("irq", frozenset({0}), frozenset({n}), float(n)) for n in range(MAX_PAIRS + 8)]
    affinity_kernel.refuse[pid] = errno.EPERM
    roots = Roots(sysfs=str(isolation_host_tree / "sys"), proc=str(isolation_host_tree / "proc"),
                  cgroupfs=str(isolation_host_tree / CG),
                  runfs=str(isolation_host_tree / "run"), libvirt=str(isolation_host_tree / "lv"))
    with caplog.at_level("WARNING", logger="vmtune.hoststate"):
        out = isolation.reconcile(Isolation(frozenset({2}), frozenset(IRQS), pairs), frozenset({2}), roots,
                                  lambda j: None)
    assert len(out.pairs) == MAX_PAIRS
    assert Pair("task", frozenset({0, 1, 3}), frozenset({2}), NOW_S) in out.pairs  # this pass's set is kept
    assert min(p.since for p in out.pairs) > 1.0  # the oldest are the ones forgotten
    assert "forgot" in caplog.text and "stays so" in caplog.text


@needs_two_cpus
def test_a_real_child_forked_while_isolated_is_widened_at_release(tmp_path, forker):
    """A real process narrowed by the isolation forks; the child (never seen by the hook while
    isolated) gets every CPU back at release, like its parent."""
    proc, fork = forker
    every = allowed(proc.pid)
    cpu = max(every)
    roots = Roots(sysfs="/sys", proc="/proc", cgroupfs=str(tmp_path / "cg"),
                  runfs=str(tmp_path / "run"), libvirt=str(tmp_path / "lv"))
    pids = {proc.pid}
    record = isolation.reconcile(None, frozenset({cpu}), roots, lambda j: None, only=pids)
    time.sleep(0.05)  # a tick after the narrowing: the child is born after it
    child = fork()
    pids.add(child)
    assert allowed(child) == every - {cpu}
    assert isolation.reconcile(record, frozenset(), roots, lambda j: None, only=pids) is None
    assert allowed(child) == every and allowed(proc.pid) == every


# -- 7. read-back, failed groups ------------------------------------------------------------------

def test_a_value_the_kernel_normalises_is_not_a_hand_change(isolation_host_tree, monkeypatch, capsys):
    """A kernel that keeps only part of what was written (IRQ 6 cannot take CPU 3: "1,3" reads back
    "1"): the record keeps what was read back, so the release restores it instead of leaving it
    alone as changed by hand."""
    real = files.IrqAffinity.write

    def chip(self, item, raw):
        real(self, item, "1" if item.key == Irq(6) and raw == "1,3" else raw)

    monkeypatch.setattr(files.IrqAffinity, "write", chip)
    before = tree(isolation_host_tree)
    call(A, "vm-a", "prepare", "begin")
    assert irq(isolation_host_tree, 6) == "1" and records(isolation_host_tree)["irq:6"]["after"] == "1"
    capsys.readouterr()
    call(A, "vm-a", "release", "end")
    assert "left alone" not in capsys.readouterr().err
    assert tree(isolation_host_tree) == before


def test_a_group_that_refuses_its_cpus_has_its_tasks_moved_one_by_one(isolation_host_tree, affinity_kernel, monkeypatch, capsys):
    """system.slice refuses the write (EACCES): the hook says so and narrows its tasks one by one;
    the release restores them, and the group is left as it was."""
    cron = task(isolation_host_tree, FAKE_PID, "0-3", comm="cron", cgroup="0::/system.slice/cron.service")
    real = groups.CgroupCpuset.write

    def refuse(self, item, raw):
        if item.key == Cgroup("system.slice"):
            raise PermissionError(errno.EACCES, "Permission denied")
        real(self, item, raw)

    monkeypatch.setattr(groups.CgroupCpuset, "write", refuse)
    before = tree(isolation_host_tree)
    call(A, "vm-a", "prepare", "begin")
    assert "system.slice: cannot narrow; moving their tasks one by one" in capsys.readouterr().err
    assert affinity(isolation_host_tree, cron) == "0-1,3"
    call(A, "vm-a", "release", "end")
    assert tree(isolation_host_tree) == before
    assert state(isolation_host_tree).get("isolation") is None


def test_a_journal_record_with_a_key_of_an_older_vmtune_still_reads(isolation_host_tree):
    """State files written before names were escaped hold keys like ``cgroup:system.slice``: the same
    keys now, so an isolation recorded then is restored."""
    data = {"version": 1, "leases": {}, "baseline": None,
            "isolation": {"cpus": "2", "irqs": "", "pairs": [],
                          "records": {"cgroup:system.slice": {"before": "", "after": "0-1,3", "label": "x"}}}}
    assert groups.key_of("cgroup", "system.slice") == "cgroup:system.slice"
    assert decode(data, 8).isolation.records[Cgroup("system.slice")].after == "0-1,3"


def test_only_these_tasks_touches_nothing_else(isolation_host_tree, affinity_kernel):
    """``reconcile(..., only=pids)`` (the tests that use the real /proc on their own processes)
    moves those tasks and nothing else: no IRQ, no IRQ mask, no workqueue mask, no group. It once
    narrowed the host's real IRQ and workqueue masks and, with the record dropped, left them so."""
    pid = task(isolation_host_tree, FAKE_PID, "0-3")
    other = task(isolation_host_tree, FAKE_PID + 1, "0-3")
    before = {k: v for k, v in tree(isolation_host_tree).items() if f"/{pid}/" not in k}
    roots = Roots(sysfs=str(isolation_host_tree / "sys"), proc=str(isolation_host_tree / "proc"),
                  cgroupfs=str(isolation_host_tree / "sys" / "fs" / "cgroup"),
                  runfs=str(isolation_host_tree / "run"), libvirt=str(isolation_host_tree / "lv"))
    record = isolation.reconcile(None, frozenset({2}), roots, lambda j: None, only={pid})
    assert affinity(isolation_host_tree, pid) == "0-1,3" and affinity(isolation_host_tree, other) == "0-3"
    assert {k: v for k, v in tree(isolation_host_tree).items() if f"/{pid}/" not in k} == before
    assert {k.text for k in record.records} == {f"task:{pid}"}
    assert isolation.reconcile(record, frozenset(), roots, lambda j: None, only={pid}) is None
    assert affinity(isolation_host_tree, pid) == "0-3"
