"""The hook's cpuset partitions (vmtune/hoststate/kinds/partition.py): ``[hook] isolate =
"partition"`` on a fake cgroup v2 tree (the real kernel's answers are in
tests/guest_cgroup2/scenario.py, run by test_cgroup2_guest.py): at ``started`` the domain's vCPU
groups become isolated partitions, read back, else undone with one warning; release (and a kill at
any write, then the usual orders) gives every file back; a kernel without partitions, cgroup v1 or
an unknown ``isolate`` value never stop a domain.

The fake tree lays the domain out as libvirt does on cgroup v2 without systemd
(``machine/qemu-1-vm-a.libvirt-qemu/libvirt/{emulator,vcpu0}``); the QEMU is a real process whose
command line is vm-a's (hookhost.Libvirt), and its ``/proc/PID/cgroup`` under the fake proc root
names the emulator group. A regular file keeps what is written: the kernel's own verdict is the
root's ``cpuset.cpus.isolated``, which the tests set to say yes (``2``) or no (empty).
"""

from __future__ import annotations

import logging

import pytest
from fixtures.hookhost import Libvirt
from fixtures.isotrees import build, put, tree
from fixtures.hook import A, call, state

from vmtune.hoststate.kinds import KINDS, base, partition

CG = "sys/fs/cgroup"
DOMAIN = "machine/qemu-1-vm-a.libvirt-qemu"
PATH = ["machine", DOMAIN, f"{DOMAIN}/libvirt", f"{DOMAIN}/libvirt/vcpu0"]


@pytest.fixture
def partition_host_tree(fake_host_tree, tmp_path, monkeypatch):
    build(fake_host_tree)
    fs = fake_host_tree / CG
    put(fs / "cpuset.cpus.isolated", "")
    put(fs / "cgroup.subtree_control", "cpuset")
    for group in PATH:
        put(fs / group / "cpuset.cpus.exclusive", "")
        put(fs / group / "cpuset.cpus.partition", "member")
        put(fs / group / "cgroup.subtree_control", "cpuset")
    put(fs / DOMAIN / "libvirt" / "vcpu0" / "cpuset.cpus", "2")
    put(fs / DOMAIN / "libvirt" / "emulator" / "cpuset.cpus", "0-1,3")
    (fake_host_tree / "vmtune.toml").write_text('reserved_cpus = "0"\n[hook]\nisolate = "partition"\n')
    libvirt = Libvirt(fake_host_tree / "libvirt")
    libvirt.start("vm-a", "11111111-1111-1111-1111-111111111111")
    pid = int((fake_host_tree / "libvirt" / "vm-a.pid").read_text())
    put(fake_host_tree / "proc" / str(pid) / "cgroup", f"0::/{DOMAIN}/libvirt/emulator")
    yield fake_host_tree
    libvirt.close()


def files(host, leaf: str) -> list[str]:
    return [(host / CG / g / leaf).read_text().strip() for g in PATH]


def kernel_says_yes(host) -> None:
    put(host / CG / "cpuset.cpus.isolated", "2")


def test_started_makes_the_partition_and_release_gives_every_file_back(partition_host_tree, caplog):
    before = tree(partition_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert files(partition_host_tree, "cpuset.cpus.exclusive") == ["", "", "", ""]  # prepare: no vCPU group yet
    kernel_says_yes(partition_host_tree)
    assert call(A, "vm-a", "started", "begin") == 0
    assert files(partition_host_tree, "cpuset.cpus.exclusive") == ["2", "2", "2", "2"]
    assert files(partition_host_tree, "cpuset.cpus.partition") == ["member", "member", "member", "isolated"]
    assert state(partition_host_tree)["leases"][A_UUID]["partition"] == "2"
    records = state(partition_host_tree)["isolation"]["records"]
    assert records["partition:machine%2Fqemu-1-vm-a.libvirt-qemu%2Flibvirt%2Fvcpu0"]["before"] == "member"
    assert call(A, "vm-a", "started", "begin") == 0  # again: nothing more
    put(partition_host_tree / CG / "cpuset.cpus.isolated", "")
    assert call(A, "vm-a", "release", "end") == 0
    assert tree(partition_host_tree) == before
    assert state(partition_host_tree)["isolation"] is None or not state(partition_host_tree)["isolation"]["records"]


def test_a_tcg_domain_whose_emulator_shares_its_vcpus_cpu_is_one_partition_at_its_libvirt_group(partition_host_tree):
    """Under TCG vmtune pins the emulator beside the vCPUs, and the kernel takes no vCPU group as a
    partition while its sibling shares the CPU ("not exclusive"): the domain's ``libvirt/`` group,
    which holds the emulator and every vCPU, is the partition instead; the release gives it back."""
    fs = partition_host_tree / CG
    put(fs / DOMAIN / "libvirt" / "emulator" / "cpuset.cpus", "2")
    before = tree(partition_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    kernel_says_yes(partition_host_tree)
    assert call(A, "vm-a", "started", "begin") == 0
    assert files(partition_host_tree, "cpuset.cpus.exclusive") == ["2", "2", "2", ""]
    assert files(partition_host_tree, "cpuset.cpus.partition") == ["member", "member", "isolated", "member"]
    assert state(partition_host_tree)["leases"][A_UUID]["partition"] == "2"
    put(fs / "cpuset.cpus.isolated", "")
    assert call(A, "vm-a", "release", "end") == 0
    assert tree(partition_host_tree) == before
    # pinned outside the domain's CPUs, the emulator keeps the vCPU group the partition (the kernel may refuse it)
    put(fs / DOMAIN / "libvirt" / "emulator" / "cpuset.cpus", "2-3")
    assert list(partition.wanted(_roots(partition_host_tree), [_claim(partition_host_tree)])) == [f"{DOMAIN}/libvirt/vcpu0"]


def _roots(host):
    from vmtune.roots import Roots

    return Roots(sysfs=str(host / "sys"), proc=str(host / "proc"), root=str(host))


def _claim(host) -> partition.PartitionClaim:
    return partition.PartitionClaim(int((host / "libvirt" / "vm-a.pid").read_text()), frozenset({2}))


def test_a_partition_the_kernel_does_not_hold_is_undone_with_one_warning(partition_host_tree, caplog):
    """The root's cpuset.cpus.isolated lacks the CPU (an invalid partition): one warning, every
    partition file back, today's isolation holds the CPU."""
    assert call(A, "vm-a", "prepare", "begin") == 0
    between = tree(partition_host_tree)
    with caplog.at_level(logging.WARNING):
        assert call(A, "vm-a", "started", "begin") == 0
    warnings = [r.getMessage() for r in caplog.records if "partition" in r.getMessage()]
    assert len(warnings) == 1 and "cpuset.cpus.isolated lacks CPUs 2" in warnings[0], warnings
    assert tree(partition_host_tree) == between
    assert "partition" not in state(partition_host_tree)["leases"][A_UUID]
    assert state(partition_host_tree)["isolation"]["cpus"] == "2"  # today's isolation


@pytest.mark.parametrize("why", ["no-kernel-support", "cgroup-v1"])
def test_no_partitions_here_is_one_warning_and_todays_isolation(partition_host_tree, caplog, why):
    if why == "no-kernel-support":
        (partition_host_tree / CG / "cpuset.cpus.isolated").unlink()
        expect = "Linux 6.7"
    else:
        (partition_host_tree / CG / "cgroup.controllers").unlink()
        expect = "cgroup v1"
    assert call(A, "vm-a", "prepare", "begin") == 0
    between = tree(partition_host_tree)
    with caplog.at_level(logging.WARNING):
        assert call(A, "vm-a", "started", "begin") == 0
    warnings = [r.getMessage() for r in caplog.records if "no isolated partition" in r.getMessage()]
    assert len(warnings) == 1 and expect in warnings[0], warnings
    assert tree(partition_host_tree) == between
    assert call(A, "vm-a", "release", "end") == 0


def test_a_value_changed_by_hand_is_left_alone(partition_host_tree, caplog):
    before = tree(partition_host_tree)
    call(A, "vm-a", "prepare", "begin")
    kernel_says_yes(partition_host_tree)
    call(A, "vm-a", "started", "begin")
    put(partition_host_tree / CG / "machine" / "cpuset.cpus.exclusive", "2-3")  # the operator's
    with caplog.at_level(logging.WARNING):
        assert call(A, "vm-a", "release", "end") == 0
    assert (partition_host_tree / CG / "machine" / "cpuset.cpus.exclusive").read_text().strip() == "2-3"
    assert any("left alone" in r.getMessage() and "machine" in r.getMessage() for r in caplog.records)
    after = tree(partition_host_tree)
    assert {k for k in before if before[k] != after[k]} == {f"{CG}/machine/cpuset.cpus.exclusive",
                                                             f"{CG}/cpuset.cpus.isolated"}


class Killed(BaseException):
    """A kill: nothing after it in the call runs (the lock and the state file stay as they were)."""


@pytest.mark.parametrize("op", ["started", "release"])
def test_a_kill_at_every_partition_write_then_the_usual_orders(partition_host_tree, monkeypatch, op):
    """A kill at each write of the partition kinds during ``started`` or ``release``; then libvirt's
    usual orders (started again and release; release again): every file as before."""
    real = partition.GroupFile.write
    count = {"n": 0, "at": 0}

    def write(self, item, value):
        count["n"] += 1
        if count["n"] == count["at"]:
            raise Killed
        real(self, item, value)

    monkeypatch.setattr(partition.GroupFile, "write", write)
    before = tree(partition_host_tree)
    points = 5 if op == "started" else 5  # 4 exclusive sets and one partition each way
    for at in range(1, points + 1):
        count.update(n=0, at=0)
        call(A, "vm-a", "prepare", "begin")
        kernel_says_yes(partition_host_tree)
        if op == "release":
            call(A, "vm-a", "started", "begin")
            put(partition_host_tree / CG / "cpuset.cpus.isolated", "")
        count.update(n=0, at=at)
        with pytest.raises(Killed):
            call(A, "vm-a", op, "begin" if op == "started" else "end")
        count.update(n=0, at=0)
        if op == "started":
            assert call(A, "vm-a", "started", "begin") == 0
            assert files(partition_host_tree, "cpuset.cpus.partition")[-1] == "isolated"
            put(partition_host_tree / CG / "cpuset.cpus.isolated", "")
        assert call(A, "vm-a", "release", "end") == 0
        assert tree(partition_host_tree) == before, at


def test_a_kind_that_declares_a_flag_no_code_reads_is_refused():
    class Typo(base.Kind):
        name = "typo"
        section = "isolation"
        quite = True  # quiet, misspelt

    with pytest.raises(TypeError, match="quite is not a flag"):
        base.register(Typo)
    assert "typo" not in KINDS

    class Nowhere(base.Kind):
        name = "nowhere"
        section = "elsewhere"

    with pytest.raises(TypeError, match="section 'elsewhere'"):
        base.register(Nowhere)


def test_every_extra_is_an_option_of_the_hook_settings():
    from dataclasses import fields

    from vmtune.config import HookSettings
    from vmtune.hoststate.kinds import extra_options

    options = set(extra_options().values())
    assert options <= {f.name for f in fields(HookSettings)}
    assert set(extra_options()) == set(HookSettings().extras(extra_options()))  # all on by default


A_UUID = "11111111-1111-1111-1111-111111111111"


def test_the_doctor_says_which_method_holds_each_cpu(partition_host_tree):
    from vmtune.config import Config
    from vmtune.doctor import isolation as doctor
    from vmtune.doctor.findings import Context
    from vmtune.roots import Roots

    call(A, "vm-a", "prepare", "begin")
    kernel_says_yes(partition_host_tree)
    call(A, "vm-a", "started", "begin")
    roots = Roots.from_env({"VMTUNE_SYSFS": str(partition_host_tree / "sys"), "VMTUNE_STATE_DIR": str(partition_host_tree / "state"),
                            "VMTUNE_LIBVIRT_RUNDIR": str(partition_host_tree / "libvirt"), "VMTUNE_PROCFS": "/proc"}).replace(root="/")
    ctx = Context(roots, Config(reserved_cpus=frozenset({0})))
    lines = [f"{f.level} {f.found}" for f in doctor.check(ctx)]
    assert any(line.startswith("INFO CPUs 2: an isolated cpuset partition") and "this kernel makes" in line
               for line in lines), lines
    put(partition_host_tree / CG / "cpuset.cpus.isolated", "")  # the kernel no longer holds it
    lines = [f"{f.level} {f.found}" for f in doctor.check(ctx)]
    assert any(line.startswith("WARN CPUs 2 are recorded as an isolated partition") for line in lines), lines
    call(A, "vm-a", "release", "end")


def test_an_unknown_isolate_value_is_one_line_for_the_cli_and_a_warning_for_the_hook(partition_host_tree, capsys):
    from vmtune.cli import main

    (partition_host_tree / "vmtune.toml").write_text('[hook]\nisolate = "partitoin"\n')
    assert main(["hook", "reap"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vmtune: error: ") and "hook.isolate must be one of" in err
    assert call(A, "vm-a", "prepare", "begin") == 0  # the domain starts; the hook says why it left it alone
    assert "hook.isolate must be one of" in capsys.readouterr().err


@pytest.mark.parametrize("supported", [True, False])
def test_auto_the_default_partitions_where_the_kernel_can_and_says_nothing_where_not(partition_host_tree, caplog, supported):
    (partition_host_tree / "vmtune.toml").write_text('reserved_cpus = "0"\n')  # isolate: auto
    if not supported:
        (partition_host_tree / CG / "cpuset.cpus.isolated").unlink()
    before = tree(partition_host_tree)
    call(A, "vm-a", "prepare", "begin")
    kernel_says_yes(partition_host_tree) if supported else None
    with caplog.at_level(logging.WARNING):
        assert call(A, "vm-a", "started", "begin") == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records
    assert files(partition_host_tree, "cpuset.cpus.partition")[-1] == ("isolated" if supported else "member")
    if supported:
        put(partition_host_tree / CG / "cpuset.cpus.isolated", "")
    assert call(A, "vm-a", "release", "end") == 0
    assert tree(partition_host_tree) == before


def test_two_domains_share_machine_and_each_release_gives_back_its_part(partition_host_tree):
    """vm-b (CPU 3) beside vm-a (CPU 2): the shared group holds both CPUs; vm-a's release leaves
    vm-b's, the last release gives every file back."""
    from fixtures.hook import B, UUID_B

    fs = partition_host_tree / CG
    other = "machine/qemu-2-vm-b.libvirt-qemu"
    for group in (other, f"{other}/libvirt", f"{other}/libvirt/vcpu0"):
        put(fs / group / "cpuset.cpus.exclusive", "")
        put(fs / group / "cpuset.cpus.partition", "member")
    put(fs / other / "libvirt" / "vcpu0" / "cpuset.cpus", "3")
    libvirt = Libvirt(partition_host_tree / "libvirt")
    libvirt.start("vm-b", UUID_B)
    pid = int((partition_host_tree / "libvirt" / "vm-b.pid").read_text())
    put(partition_host_tree / "proc" / str(pid) / "cgroup", f"0::/{other}/libvirt/emulator")
    before = tree(partition_host_tree)
    try:
        call(A, "vm-a", "prepare", "begin")
        call(B, "vm-b", "prepare", "begin")
        put(fs / "cpuset.cpus.isolated", "2-3")
        call(A, "vm-a", "started", "begin")
        call(B, "vm-b", "started", "begin")
        assert (fs / "machine" / "cpuset.cpus.exclusive").read_text().strip() == "2-3"
        assert (fs / other / "libvirt" / "vcpu0" / "cpuset.cpus.partition").read_text().strip() == "isolated"
        put(fs / "cpuset.cpus.isolated", "3")
        call(A, "vm-a", "release", "end")
        assert (fs / "machine" / "cpuset.cpus.exclusive").read_text().strip() == "3"
        assert files(partition_host_tree, "cpuset.cpus.partition")[-1] == "member"
        assert state(partition_host_tree)["leases"][UUID_B]["partition"] == "3"
        put(fs / "cpuset.cpus.isolated", "")
        call(B, "vm-b", "release", "end")
        assert tree(partition_host_tree) == before
    finally:
        libvirt.close()


def test_a_task_whose_affinity_the_kernel_resets_at_a_partition_change_gets_its_own_back(partition_host_tree, monkeypatch):
    """The kernel resets the affinity of every task in the root cgroup when a partition is made or
    undone (seen on 6.12: a kernel thread pinned to CPU 1 became 0-1,3, then 0-3). A task the pass
    did not move gets back the affinity it had when listed, at started and at release."""
    from fixtures.isotrees import Kernel, affinity, set_affinity, task

    from vmtune.hoststate.kinds import tasks

    monkeypatch.setattr(tasks, "setaffinity", Kernel(partition_host_tree))
    pid = task(partition_host_tree, 9_000_001, "1", comm="pinned")
    real = partition.PartitionState.write

    def write(self, item, value):  # the kernel's reset of the root cgroup's tasks
        real(self, item, value)
        set_affinity(partition_host_tree, pid, "0-1,3" if value.strip() == "isolated" else "0-3")

    monkeypatch.setattr(partition.PartitionState, "write", write)
    call(A, "vm-a", "prepare", "begin")
    kernel_says_yes(partition_host_tree)
    call(A, "vm-a", "started", "begin")
    assert files(partition_host_tree, "cpuset.cpus.partition")[-1] == "isolated" and affinity(partition_host_tree, pid) == "1"
    put(partition_host_tree / CG / "cpuset.cpus.isolated", "")
    call(A, "vm-a", "release", "end")
    assert files(partition_host_tree, "cpuset.cpus.partition")[-1] == "member" and affinity(partition_host_tree, pid) == "1"
