"""The hook keeps the host's own work off the CPUs of running latency domains (vmtune/hook/isolation).

Fake trees (isotrees.py) for IRQs, the workqueue mask, cgroup v2 without systemd, cgroup v1 and a
stub systemctl; real child processes for tasks (any user may move its own); and, as root, the real
hook against this machine's real /proc.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from fixtures.killpoints import killed_at
from fixtures.isotrees import FAKE_PID, IRQS, LIBVIRT, V1_GROUPS, V2_GROUPS, Kernel, affinity, build, irq, read, task, tree
from fixtures.hook import A, B, HOOK, UUID_A, call, domain, state
from fixtures.isolation import CG, ONLINE, allowed, needs_two_cpus, systemd_host

from vmtune import cpuset
from vmtune.hoststate import isolation
from vmtune.hoststate.document import Isolation
from vmtune.hoststate.kinds import Irq, Task, base, groups, tasks
from vmtune.hoststate.record import Record
from vmtune.roots import Roots


def test_a_lease_moves_host_work_off_its_cpus_and_release_restores_exactly(isolation_host_tree, capsys):
    """IRQs, the default IRQ mask, the workqueue mask and the host's cgroups lose CPU 2 while vm-a
    holds it; an IRQ pinned to CPU 2 alone and libvirt's groups are left alone; release restores
    every file exactly."""
    before = tree(isolation_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert [irq(isolation_host_tree, n) for n in IRQS] == ["0-1,3", "0-1,3", "0-1", "2", "0", "1,3"]
    assert read(isolation_host_tree, "proc/irq/default_smp_affinity") == "b"
    assert read(isolation_host_tree, "sys/devices/virtual/workqueue/cpumask") == "b"
    assert {g: read(isolation_host_tree, f"{CG}/{g}/cpuset.cpus") for g in V2_GROUPS} == {
        "init.scope": "0-1,3", "system.slice": "0-1,3", "user.slice": "0-1,3", "lxc.payload": "1,3",
        "machine.slice": "", "machine": "", "qemu.libvirt-qemu": "2"}
    assert state(isolation_host_tree)["isolation"]["cpus"] == "2"
    assert "move host work off CPUs 2" in capsys.readouterr().err
    assert call(A, "vm-a", "release", "end") == 0
    assert tree(isolation_host_tree) == before
    assert state(isolation_host_tree).get("isolation") is None


def test_two_leases_extend_and_shrink_the_isolation(isolation_host_tree):
    """A second lease extends the isolation to its CPUs, the first one's release shrinks it back to
    the second's, and the last release restores everything."""
    before = tree(isolation_host_tree)
    call(A, "vm-a", "prepare", "begin")
    call(B, "vm-b", "prepare", "begin")
    assert irq(isolation_host_tree, 1) == "0-1" and irq(isolation_host_tree, 6) == "1"
    assert read(isolation_host_tree, f"{CG}/lxc.payload/cpuset.cpus") == "1"
    assert read(isolation_host_tree, "proc/irq/default_smp_affinity") == "3"
    call(A, "vm-a", "release", "end")
    assert irq(isolation_host_tree, 1) == "0-2" and irq(isolation_host_tree, 6) == "1-2" and irq(isolation_host_tree, 4) == "2"
    assert read(isolation_host_tree, "proc/irq/default_smp_affinity") == "7"
    assert state(isolation_host_tree)["isolation"]["cpus"] == "3"
    call(B, "vm-b", "release", "end")
    assert tree(isolation_host_tree) == before


def test_reserved_cpus_are_never_isolated(isolation_host_tree):
    """A lease pinned to the reserved CPU 0 and CPU 2 isolates CPU 2 only."""
    assert call(domain("vm-r", UUID_A, pins="0,2"), "vm-r", "prepare", "begin") == 0
    assert state(isolation_host_tree)["isolation"]["cpus"] == "2"
    assert irq(isolation_host_tree, 5) == "0"


def test_no_housekeeping_cpu_left_refuses_the_start(isolation_host_tree, capsys):
    """With nothing reserved, a lease on every online CPU would leave the host no CPU: refused in
    one line, nothing changed; a reconnect of the same domain is never refused and isolates nothing."""
    (isolation_host_tree / "vmtune.toml").write_text('reserved_cpus = ""\n')
    before = tree(isolation_host_tree)
    everything = domain("vm-all", UUID_A, pins="0-3")
    assert call(everything, "vm-all", "prepare", "begin") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "would leave no CPU for the host's own work" in err[0]
    assert tree(isolation_host_tree) == before
    assert call(everything, "vm-all", "reconnect", "begin") == 0
    assert state(isolation_host_tree).get("isolation") is None
    assert all(irq(isolation_host_tree, n) == IRQS[n] for n in IRQS)


def test_isolate_off_moves_nothing_and_turning_it_off_gives_back(isolation_host_tree):
    """``isolate = "off"``: nothing moves. Turned off while CPUs are isolated: the next release gives
    everything back."""
    before_irqs = {n: irq(isolation_host_tree, n) for n in IRQS}
    (isolation_host_tree / "vmtune.toml").write_text('reserved_cpus = "0"\n[hook]\nisolate = "off"\n')
    call(A, "vm-a", "prepare", "begin")
    assert {n: irq(isolation_host_tree, n) for n in IRQS} == before_irqs
    call(A, "vm-a", "release", "end")
    before = tree(isolation_host_tree)
    (isolation_host_tree / "vmtune.toml").write_text('reserved_cpus = "0"\n')
    call(A, "vm-a", "prepare", "begin")
    assert irq(isolation_host_tree, 1) == "0-1,3"
    (isolation_host_tree / "vmtune.toml").write_text('reserved_cpus = "0"\n[hook]\nisolate = "off"\n')
    call(A, "vm-a", "release", "end")
    assert tree(isolation_host_tree) == before


def test_dry_run_logs_what_would_move_and_writes_nothing(isolation_host_tree, capsys, monkeypatch):
    before = tree(isolation_host_tree)
    monkeypatch.setenv("VMTUNE_DRY_RUN", "1")
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert tree(isolation_host_tree) == before
    assert "dry run: would move host work off CPUs 2" in capsys.readouterr().err


def test_hand_changes_are_kept_with_a_warning(isolation_host_tree, capsys):
    """An IRQ and a cgroup changed by hand while isolated keep their new value at release; the
    rest is restored."""
    before = tree(isolation_host_tree)
    call(A, "vm-a", "prepare", "begin")
    (isolation_host_tree / "proc/irq/1/smp_affinity_list").write_text("1\n")
    (isolation_host_tree / f"{CG}/system.slice/cpuset.cpus").write_text("1-3\n")
    capsys.readouterr()
    call(A, "vm-a", "release", "end")
    err = capsys.readouterr().err
    assert "left alone" in err and "IRQ 1" in err and "cgroup system.slice" in err
    after = tree(isolation_host_tree)
    assert after.pop("proc/irq/1/smp_affinity_list") == "1"
    assert after.pop(f"{CG}/system.slice/cpuset.cpus") == "1-3"
    for rel in ("proc/irq/1/smp_affinity_list", f"{CG}/system.slice/cpuset.cpus"):
        before.pop(rel)
    assert after == before


def test_a_refused_write_is_skipped(isolation_host_tree, monkeypatch):
    """A managed IRQ refuses a new affinity (EIO): it is skipped, the others move, and release
    leaves it as it is."""
    real = base.Kind.write

    def write(self, item, raw):
        if item.key == Irq(2):
            raise OSError(5, "Input/output error")
        real(self, item, raw)

    monkeypatch.setattr(base.Kind, "write", write)
    before = tree(isolation_host_tree)
    call(A, "vm-a", "prepare", "begin")
    assert irq(isolation_host_tree, 2) == "0-3" and irq(isolation_host_tree, 1) == "0-1,3"
    assert "irq:2" not in state(isolation_host_tree)["isolation"]["records"]
    call(A, "vm-a", "release", "end")
    assert tree(isolation_host_tree) == before


def test_a_new_irq_inherits_the_narrowed_default_and_is_widened_at_release(isolation_host_tree):
    """An IRQ that appears while CPU 2 is isolated, with the narrowed default mask, is widened at
    release; an old IRQ with that same mask all along (IRQ 3: 0-1) is not touched."""
    call(A, "vm-a", "prepare", "begin")
    (isolation_host_tree / "proc/irq/9").mkdir()
    (isolation_host_tree / "proc/irq/9/smp_affinity_list").write_text("0-1,3\n")  # default_smp_affinity "b"
    call(A, "vm-a", "release", "end")
    assert irq(isolation_host_tree, 9) == "0-3"
    assert irq(isolation_host_tree, 3) == "0-1"


def test_cgroup_v1_tree_is_never_written(isolation_host_tree):
    """cgroup v1 (like this development machine): no cgroup file is written; tasks carry it."""
    import shutil

    shutil.rmtree(isolation_host_tree / CG)
    build(isolation_host_tree, cgroup="v1")
    call(A, "vm-a", "prepare", "begin")
    assert {rel: read(isolation_host_tree, f"{CG}/{rel}") for rel in V1_GROUPS} == V1_GROUPS
    assert irq(isolation_host_tree, 1) == "0-1,3"


UNITS = ("init.scope", "system.slice", "user.slice")


def test_systemd_slices_get_allowed_cpus_through_systemctl(isolation_host_tree, monkeypatch):
    """With systemd (``/run/systemd/system``) on cgroup v2, the host's slices and init.scope get
    ``AllowedCPUs`` with ``systemctl set-property --runtime``; the cgroup files are left to systemd;
    release resets them with the empty assignment (systemctl(1): "assigning an empty list will
    reset the property") and removes the runtime drop-ins, so none outlives the isolation."""
    log = systemd_host(isolation_host_tree, monkeypatch)
    before = tree(isolation_host_tree)
    cgroup_files = {g: read(isolation_host_tree, f"{CG}/{g}/cpuset.cpus") for g in V2_GROUPS}
    call(A, "vm-a", "prepare", "begin")
    calls = log.read_text().splitlines()
    assert [c for c in calls if c.startswith("set-property")] == [
        f"set-property --runtime {u} AllowedCPUs=0-1,3" for u in UNITS]
    assert {g: read(isolation_host_tree, f"{CG}/{g}/cpuset.cpus") for g in V2_GROUPS} == cgroup_files
    assert read(isolation_host_tree, "run/systemd/system.control/system.slice.d/50-AllowedCPUs.conf").endswith("AllowedCPUs=0-1,3")
    log.write_text("")
    call(A, "vm-a", "release", "end")
    assert [c for c in log.read_text().splitlines() if c.startswith("set-property")] == [
        f"set-property --runtime {u} AllowedCPUs=" for u in UNITS]
    assert tree(isolation_host_tree) == before  # no drop-in left in run/systemd/system.control
    assert not (isolation_host_tree / "run/systemd/system.control/system.slice.d").exists()


def test_a_unit_with_allowed_cpus_of_its_own_gets_them_back(isolation_host_tree, monkeypatch):
    """A unit whose own configuration sets AllowedCPUs (user.slice: 0-3) gets that value back at
    release; the units that had none are reset and keep no drop-in."""
    log = systemd_host(isolation_host_tree, monkeypatch)
    (isolation_host_tree / "units" / "user.slice").write_text("0-3\n")
    call(A, "vm-a", "prepare", "begin")
    log.write_text("")
    call(A, "vm-a", "release", "end")
    assert [c for c in log.read_text().splitlines() if c.startswith("set-property")] == [
        "set-property --runtime init.scope AllowedCPUs=", "set-property --runtime system.slice AllowedCPUs=",
        "set-property --runtime user.slice AllowedCPUs=0-3"]
    control = isolation_host_tree / "run/systemd/system.control"
    assert sorted(str(p.relative_to(control)) for p in control.rglob("*.conf")) == ["user.slice.d/50-AllowedCPUs.conf"]


# -- a kill at every write point ------------------------------------------------------------------

def write_points() -> list[tuple[type, str]]:
    """Every kind's own ``write`` (tasks, units and cgroups override it): the kill points."""
    out, todo = [], [base.Kind]
    while todo:
        kind = todo.pop()
        todo += kind.__subclasses__()
        if "write" in vars(kind):
            out.append((kind, "write"))
    return out


def _writes(host, monkeypatch) -> Counter:
    """The isolation writes vm-a's prepare makes on this tree, by kind (then released)."""
    count: Counter = Counter()
    for owner, name in write_points():
        real = getattr(owner, name)

        def write(self, item, raw, real=real):
            count[item.kind.name] += 1
            real(self, item, raw)

        monkeypatch.setattr(owner, name, write)
    call(A, "vm-a", "prepare", "begin")
    prepared = Counter(count)
    call(A, "vm-a", "release", "end")
    monkeypatch.undo()
    return prepared


def host_tasks(host) -> None:
    """Tasks in the fake /proc: two movable ones in the root group, a per-CPU kernel thread, one
    pinned to CPU 2, and one in system.slice (narrowed with its group)."""
    task(host, FAKE_PID, "0-3")
    task(host, FAKE_PID + 1, "1-3")
    task(host, FAKE_PID + 2, "2", comm="kworker/2:1", flags=tasks.PF_NO_SETAFFINITY)
    task(host, FAKE_PID + 3, "2", comm="pinned")
    task(host, FAKE_PID + 4, "0-3", comm="cron", cgroup="0::/system.slice/cron.service")


@pytest.mark.parametrize("flavour", ["cgroup-v2", "systemd"])
@pytest.mark.parametrize("phase", ["prepare", "release"])
def test_a_kill_at_every_write_point_then_release_restores_exactly(isolation_host_tree, phase, flavour, monkeypatch):
    """SIGKILL-like death (``os._exit``) before each isolation write of prepare, or of release (IRQs,
    masks, cgroups or units, tasks: every kind's own write); then a release (and for prepare, a
    reconnect first) leaves the tree exactly as it was, tasks and runtime drop-ins included."""
    if flavour == "systemd":
        systemd_host(isolation_host_tree, monkeypatch)
    host_tasks(isolation_host_tree)
    monkeypatch.setattr(tasks, "setaffinity", Kernel(isolation_host_tree))
    before = tree(isolation_host_tree)
    with monkeypatch.context() as m:
        kinds = _writes(isolation_host_tree, m)
    # every kind's write is a point: the host knobs' (sysfs, cstate) go through Kind.write too, and
    # so do the sysctls and the watchdog's and the workqueues' masks (issue 17)
    assert set(kinds) == {"sysfs", "cstate", "mask", "sysctl", "irq", "task",
                          "unit" if flavour == "systemd" else "cgroup"}, kinds
    assert kinds["mask"] == 5 and kinds["sysctl"] == 2  # IRQ default, workqueues' global, watchdog, 2 workqueues
    assert kinds["task"] == 2
    assert tree(isolation_host_tree) == before
    for n in range(sum(kinds.values()) + 1):
        if phase == "prepare":
            killed_at(n, ["vm-a", "prepare", "begin", "-"], A, write_points())
            assert call(A, "vm-a", "reconnect", "begin") == 0  # completes the isolation
            assert irq(isolation_host_tree, 1) == "0-1,3" and read(isolation_host_tree, "proc/irq/default_smp_affinity") == "b"
            assert affinity(isolation_host_tree, FAKE_PID) == "0-1,3" and affinity(isolation_host_tree, FAKE_PID + 1) == "1,3"
        else:
            assert call(A, "vm-a", "prepare", "begin") == 0
            killed_at(n, ["vm-a", "release", "end", "-"], A, write_points())
        assert call(A, "vm-a", "release", "end") == 0
        assert tree(isolation_host_tree) == before, f"killed before write {n}"
        assert state(isolation_host_tree).get("isolation") is None


# -- properties -----------------------------------------------------------------------------------

masks = st.frozensets(st.integers(0, 3), min_size=1)


@settings(max_examples=40, deadline=None)
@given(irq_masks=st.lists(masks, min_size=1, max_size=6),
       steps=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.booleans(), masks), min_size=1, max_size=8))
def test_isolation_property(tmp_path_factory, irq_masks, steps):
    """Any sequence of leases starting and stopping: while CPUs are isolated, no IRQ that had a
    housekeeping CPU to begin with runs on an isolated one, and one that had none is untouched;
    when the last lease goes, every file is exactly as it was."""
    base = tmp_path_factory.mktemp("iso")
    (base / "proc" / "irq").mkdir(parents=True)
    (base / "sys" / "devices/system/cpu").mkdir(parents=True)
    (base / "sys" / "devices/system/cpu/online").write_text("0-3\n")
    for n, m in enumerate(irq_masks):
        (base / "proc/irq" / str(n)).mkdir()
        (base / "proc/irq" / str(n) / "smp_affinity_list").write_text(cpuset.format(m) + "\n")
    roots = Roots(sysfs=str(base / "sys"), proc=str(base / "proc"), cgroupfs=str(base / "cg"),
                  runfs=str(base / "run"), libvirt=str(base / "lv"))
    before = tree(base)
    held: dict[str, frozenset[int]] = {}
    record = None
    for name, start, cpus in steps:
        if start:
            held[name] = cpus - {0}
        else:
            held.pop(name, None)
        iso = frozenset().union(*held.values()) if held else frozenset()
        record = isolation.reconcile(record, iso, roots, lambda j: None)
        for n, m in enumerate(irq_masks):
            now = cpuset.parse(irq(base, n))
            assert now == (m if not m - iso else m - iso)
    record = isolation.reconcile(record, frozenset(), roots, lambda j: None)
    assert record is None
    assert tree(base) == before


# -- tasks: real processes ------------------------------------------------------------------------

@needs_two_cpus
def test_tasks_are_narrowed_and_restored(tmp_path, forker):
    """A process and its threads lose the isolated CPU; a child it forks while isolated inherits the
    narrowed affinity and is widened when the isolation ends; the parent gets its own value back."""
    proc, fork = forker
    every = allowed(proc.pid)
    cpu = max(every)
    roots = Roots(sysfs="/sys", proc="/proc", cgroupfs=str(tmp_path / "cg"),
                  runfs=str(tmp_path / "run"), libvirt=str(tmp_path / "lv"))
    journals = []
    pids = {proc.pid}
    record = isolation.reconcile(None, frozenset({cpu}), roots, journals.append, only=pids)
    assert allowed(proc.pid) == every - {cpu}
    assert journals and f"task:{proc.pid}" in {k.text for k in journals[0].records}
    time.sleep(0.05)  # a tick after the narrowing: the child is born after it
    child = fork()
    pids.add(child)
    assert allowed(child) == every - {cpu}
    record = isolation.reconcile(record, frozenset({cpu}), roots, journals.append, only=pids)
    assert {k.text: r for k, r in record.records.items()}[f"task:{child}"].before == cpuset.format(every)  # inherited
    assert isolation.reconcile(record, frozenset(), roots, journals.append, only=pids) is None
    assert allowed(proc.pid) == every
    assert allowed(child) == every


@needs_two_cpus
def test_a_task_pinned_by_hand_is_left_alone(tmp_path, forker):
    """A task changed by hand while isolated keeps its value; one pinned to the isolated CPU alone
    before the isolation is never moved."""
    proc, fork = forker
    every = allowed(proc.pid)
    cpu = max(every)
    pinned = fork()
    os.sched_setaffinity(pinned, {cpu})
    roots = Roots(sysfs="/sys", proc="/proc", cgroupfs=str(tmp_path / "cg"),
                  runfs=str(tmp_path / "run"), libvirt=str(tmp_path / "lv"))
    pids = {proc.pid, pinned}
    record = isolation.reconcile(None, frozenset({cpu}), roots, lambda j: None, only=pids)
    assert allowed(pinned) == {cpu}
    assert f"task:{pinned}" not in {k.text for k in record.records}
    assert allowed(proc.pid) == every - {cpu}
    os.sched_setaffinity(proc.pid, {cpu})  # by hand: neither its original nor what the hook set
    assert isolation.reconcile(record, frozenset(), roots, lambda j: None, only=pids) is None
    assert allowed(proc.pid) == {cpu}
    assert allowed(pinned) == {cpu}


@needs_two_cpus
def test_a_reused_pid_is_never_restored(tmp_path, forker):
    """A record whose start time is not the task's (the pid was reused) is not applied."""
    proc, _ = forker
    every = allowed(proc.pid)
    cpu = max(every)
    roots = Roots(sysfs="/sys", proc="/proc", cgroupfs=str(tmp_path / "cg"),
                  runfs=str(tmp_path / "run"), libvirt=str(tmp_path / "lv"))
    fake = Isolation(frozenset({cpu}), records={
        Task(proc.pid, 1): Record(Task(proc.pid, 1), cpuset.format({cpu}), cpuset.format(every))})
    isolation.reconcile(fake, frozenset(), roots, lambda j: None, only={proc.pid})
    assert allowed(proc.pid) == every


@needs_two_cpus
def test_libvirt_qemu_threads_are_never_moved(tmp_path, forker):
    """A process whose pid is in a domain's NAME.pid in libvirt's run dir is left alone; libvirtd's
    own driver.pid does not count."""
    proc, _ = forker
    every = allowed(proc.pid)
    lv = tmp_path / "lv"
    lv.mkdir()
    (lv / "vm.pid").write_text(f"{proc.pid}\n")
    (lv / "vm.xml").write_text("<domstatus/>\n")
    roots = Roots(sysfs="/sys", proc="/proc", cgroupfs=str(tmp_path / "cg"),
                  runfs=str(tmp_path / "run"), libvirt=str(lv))
    isolation.reconcile(None, frozenset({max(every)}), roots, lambda j: None, only={proc.pid})
    assert allowed(proc.pid) == every
    (lv / "vm.xml").unlink()
    (lv / "vm.pid").rename(lv / "driver.pid")
    record = isolation.reconcile(None, frozenset({max(every)}), roots, lambda j: None, only={proc.pid})
    assert allowed(proc.pid) == every - {max(every)}
    isolation.reconcile(record, frozenset(), roots, lambda j: None, only={proc.pid})
    assert allowed(proc.pid) == every


def test_libvirt_groups_are_recognised():
    for name in LIBVIRT:
        assert groups.is_machine_group(name)
    assert not groups.is_machine_group("system.slice")


# -- the real hook against this machine -----------------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="moves every task of this machine: root only")
@needs_two_cpus
def test_real_hook_isolates_a_busy_process_and_gives_it_back(tmp_path):
    """The installed-style hook (hooks/qemu, this interpreter) against the real /proc and /sys with a
    temporary state dir: a busy child leaves CPU 1 while the lease holds it, and has it back after."""
    cpu = max(ONLINE)
    hog = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    xml = domain("vmtune-test-iso", UUID_A, pins=str(cpu)).encode()
    (tmp_path / "profiles").mkdir()
    (tmp_path / "vmtune.toml").write_text("")
    env = {**os.environ, "VMTUNE_SYSFS": "/sys", "VMTUNE_PROCFS": "/proc", "VMTUNE_STATE_DIR": str(tmp_path / "st"),
           "VMTUNE_CONFIG": str(tmp_path / "vmtune.toml"), "VMTUNE_PROFILES": str(tmp_path / "profiles"),
           "VMTUNE_SYSLOG": "0"}

    def hook(op: str, sub: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(HOOK), "vmtune-test-iso", op, sub, "-"], input=xml, env=env,
                              capture_output=True, timeout=60, check=False)

    def cpus_allowed(pid: int) -> frozenset[int]:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            line = next(x for x in fh if x.startswith("Cpus_allowed_list:"))
        return cpuset.parse(line.split(":", 1)[1])

    try:
        before, mine = cpus_allowed(hog.pid), cpus_allowed(os.getpid())
        assert cpu in before
        done = hook("prepare", "begin")
        assert done.returncode == 0, done.stderr
        assert cpu not in cpus_allowed(hog.pid)
        assert cpu not in cpus_allowed(os.getpid())
    finally:
        done = hook("release", "end")
        try:
            assert done.returncode == 0, done.stderr
            assert cpus_allowed(hog.pid) == before
            assert cpus_allowed(os.getpid()) == mine
        finally:
            hog.kill()
            hog.wait()
