"""The hook's state is verified, never assumed: kills at every write point, a full disk, damage,
hostile inputs, a held lock, a stdin that never closes (vmtune/hook/leases.py, state.py, alive.py).

The host is test_hook's fake sysfs (4 CPUs, cpufreq, cpuidle, KSM) with isotrees' IRQs, workqueue
and cgroup v2 groups; libvirt's run dir is a folder of the test with a status file and a fake QEMU
process (its command line names ``guest=NAME``) for every domain that "runs".
"""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from killpoints import KILLED, killed_at
from isotrees import build, irq, tree
from test_hook import HOOK, UUID_A, UUID_B, assert_tuned, call, domain, env, state  # noqa: F401 - env is a fixture

from vmtune import cli, cpuset, hook
from vmtune.hook import alive, hoststate, leases
from vmtune.hook.isolation import items

A = domain("vm-a", UUID_A, pins="2")
B = domain("vm-b", UUID_B, pins="3")


class Libvirt:
    """libvirt's run dir for the test: ``start(name, uuid)`` writes NAME.xml and NAME.pid for a
    process whose command line is a QEMU's for that name; ``stop(name)`` removes them."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir()
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, uuid: str) -> None:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "-name",
                                 f"guest={name},debug-threads=on"])
        self.procs[name] = proc
        (self.folder / f"{name}.xml").write_text(f"<domstatus><domain><name>{name}</name><uuid>{uuid}</uuid>"
                                                 "</domain></domstatus>\n")
        (self.folder / f"{name}.pid").write_text(f"{proc.pid}\n")

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            proc.kill()
            proc.wait()
        for ext in ("xml", "pid"):
            (self.folder / f"{name}.{ext}").unlink(missing_ok=True)

    def close(self) -> None:
        for name in list(self.procs):
            self.stop(name)


LV: dict[str, Libvirt] = {}  # the test's libvirt run dir (tests run one at a time)


@pytest.fixture
def host(env, monkeypatch):  # noqa: F811 - env is test_hook's fixture
    build(env)
    (env / "vmtune.toml").write_text('reserved_cpus = "0"\n')
    LV["lv"] = lv = Libvirt(env / "libvirt")
    monkeypatch.setenv("VMTUNE_LIBVIRT_RUNDIR", str(lv.folder))
    monkeypatch.setattr(alive, "GRACE_S", 0.0)
    yield env
    lv.close()


def lv() -> Libvirt:
    return LV["lv"]


def clean(host) -> None:
    """No lease, no baseline, nothing isolated (or no state written at all)."""
    if (host / "state" / "state.json").exists():
        assert state(host)["leases"] == {}
        assert "isolation" not in state(host) and state(host)["baseline"] is None


# -- a kill at every write point, then every order of what may come next ----------------------------

POINTS = [(hoststate, "write"), (items.Kind, "write"),
          (os, "replace"),  # inside every state commit: before the rename
          (os, "fsync")]  # inside every state commit: before the temporary file is whole


def killed(n: int, argv: list[str], xml: str) -> int:
    return killed_at(n, argv, xml, POINTS)


def prepare(host, name: str, uuid: str, xml: str, cpu: int) -> None:
    assert call(xml, name, "prepare", "begin") == 0
    lv().start(name, uuid)
    assert_tuned(host / "sys")
    assert cpu not in cpuset.parse(irq(host, 1))  # isolated


def release(host, name: str, xml: str) -> None:
    lv().stop(name)
    assert call(xml, name, "release", "end") == 0


STEPS = {
    "R": lambda h: release(h, "vm-a", A),
    "C": lambda h: (lv().start("vm-a", UUID_A), call(A, "vm-a", "reconnect", "begin"), assert_tuned(h / "sys")),
    "Bp": lambda h: prepare(h, "vm-b", UUID_B, B, 3),
    "Br": lambda h: release(h, "vm-b", B),
}
AFTER_PREPARE = [["R"], ["C", "R"], ["Bp", "R", "Br"], ["Bp", "Br", "R"], ["C", "Bp", "Br", "R"],
                 ["Bp", "C", "R", "Br"], ["Bp", "Br"]]
AFTER_RELEASE = [["R"], ["Bp", "Br"], ["Bp", "R", "Br"]]


def sweep(host, phase: str, orders: list[list[str]]) -> int:
    """Kill before each write point in turn; after each kill, every order; returns the trials run."""
    before, trials = tree(host), 0
    for order in orders:
        n = 0
        while True:
            if phase == "release":
                prepare(host, "vm-a", UUID_A, A, 2)
                lv().stop("vm-a")  # the domain stopped; its release is killed
            code = killed(n, ["vm-a", phase, "end" if phase == "release" else "begin", "-"], A)
            for step in order:
                STEPS[step](host)
            assert tree(host) == before, f"{phase} killed at point {n}, then {order}"
            clean(host)
            trials += 1
            if code != KILLED:
                break  # the call finished before point n: every point was tried
            n += 1
    return trials


def test_kill_at_every_point_of_prepare_then_every_order(host):
    """SIGKILL-like death before every sysfs write and inside every state commit of vm-a's prepare,
    then release, reconnect and another domain's prepare and release in every order: each prepare
    leaves the host fully tuned, and the end is exact with no lease."""
    trials = sweep(host, "prepare", AFTER_PREPARE)
    print(f"reliability: kill in prepare: {trials} trials held")  # RELIABILITY.md (pytest -s)
    assert trials > 100


def test_kill_at_every_point_of_release_then_what_may_come(host):
    """A release killed at any point, which libvirt never repeats: the next event (another domain's
    prepare) reaps the lease of the stopped domain, and the host ends exact."""
    trials = sweep(host, "release", AFTER_RELEASE)
    print(f"reliability: kill in release: {trials} trials held")  # RELIABILITY.md (pytest -s)
    assert trials > 50


def test_a_killed_commit_leaves_no_temporary_file_behind(host):
    """A kill between a commit's temporary file and its rename leaves ``.state-*.tmp``; the next
    call removes it under the lock."""
    killed(1, ["vm-a", "prepare", "begin", "-"], A)  # point 1: the first fsync is point 0
    call(A, "vm-a", "release", "end")
    assert not [p.name for p in (host / "state").iterdir() if p.name.endswith(".tmp")]


# -- a full or read-only state dir ---------------------------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: root only")


@pytest.fixture
def tiny(host):
    """The state dir on a 64 KiB tmpfs of its own."""
    folder = host / "state"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(folder)], check=True)
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path) -> None:
    with open(folder / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
        except OSError:
            pass


@needs_root
@pytest.mark.parametrize("fault", ["ENOSPC", "EROFS"])
@pytest.mark.parametrize("phase", ["prepare", "release"])
def test_a_full_or_read_only_state_dir_at_each_commit(host, tiny, monkeypatch, fault, phase):
    """The state dir fills up (or turns read-only) at the n-th commit of prepare or release: the
    call fails (a prepare with exit 1), and once there is room again, what comes next ends exact."""
    before = tree(host)
    real = leases.Store.commit
    for n in range(8):
        seen = [0]

        def commit(self, st, final=False, n=n, seen=seen):
            if seen[0] == n:
                if fault == "ENOSPC":
                    _fill(tiny)
                else:
                    subprocess.run(["mount", "-o", "remount,ro", str(tiny)], check=True)
            seen[0] += 1
            return real(self, st, final)

        if phase == "release":
            prepare(host, "vm-a", UUID_A, A, 2)
            lv().stop("vm-a")
        monkeypatch.setattr(leases.Store, "commit", commit)
        rc = call(A, "vm-a", phase, "begin" if phase == "prepare" else "end")
        monkeypatch.setattr(leases.Store, "commit", real)
        (tiny / "filler").unlink(missing_ok=True) if fault == "ENOSPC" else subprocess.run(
            ["mount", "-o", "remount,rw", str(tiny)], check=True)
        if phase == "prepare" and seen[0] > n:
            assert rc == 1
        if phase == "prepare" and rc == 0:
            lv().start("vm-a", UUID_A)
            release(host, "vm-a", A)
        else:
            STEPS["Bp"](host)  # the next event reaps what a failed call left
            STEPS["Br"](host)
        assert tree(host) == before, f"{fault} at commit {n} of {phase}"
        clean(host)


# -- damage fails closed -----------------------------------------------------------------------------

DAMAGE = {
    "truncated": lambda good: good[: len(good) // 2],
    "garbage": lambda good: "\x00\xff garbage",
    "empty": lambda good: "",
    "not an object": lambda good: "[1, 2]",
    "cpus of the wrong type": lambda good: json.dumps({**json.loads(good), "leases": {
        UUID_A: {**json.loads(good)["leases"][UUID_A], "cpus": 5}}}),
    "baseline of the wrong type": lambda good: json.dumps({**json.loads(good), "baseline": "x"}),
    "absolute knob path": lambda good: good.replace('"devices/system/cpu/cpu0/cpufreq/', '"/etc/cpu0/'),
    "knob path with ..": lambda good: good.replace('"devices/system/cpu/cpu0/cpufreq/', '"devices/../../../x/'),
    "CPU beyond the host": lambda good: good.replace('"cpus": "2"', '"cpus": "2,70000"'),
    "bad pool key": lambda good: json.dumps({**json.loads(good), "leases": {
        UUID_A: {**json.loads(good)["leases"][UUID_A], "hugepages": {"x:y": {"need": 1}}}}}),
    "missing": None,
}


@pytest.mark.parametrize("kind", DAMAGE)
def test_damage_fails_closed_and_reap_goes_on_from_the_last_good_copy(host, capsys, kind):
    """A damaged state while vm-a runs on a tuned host: vm-b's prepare is refused with one line
    naming the file, nothing is tuned or restored, no baseline is recorded; ``vmtune hook reap``
    sets the file aside and goes on from baseline.json; then every release ends exact."""
    before = tree(host)
    prepare(host, "vm-a", UUID_A, A, 2)
    tuned = tree(host)
    path = host / "state" / "state.json"
    if DAMAGE[kind] is None:
        path.unlink()
    else:
        path.write_text(DAMAGE[kind](path.read_text()))
    damaged = path.read_bytes() if path.exists() else None
    capsys.readouterr()
    assert call(B, "vm-b", "prepare", "begin") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "state.json" in err[0] and "vmtune hook reap" in err[0], err
    assert call(A, "vm-a", "release", "end") == 0
    assert tree(host) == tuned  # fail closed: nothing restored from a state that cannot be read
    assert (path.read_bytes() if path.exists() else None) == damaged
    assert cli.main(["hook", "reap"]) == 0
    out = capsys.readouterr().out
    assert "damaged" in out and "going on from" in out
    release(host, "vm-a", A)
    assert tree(host) == before
    aside = [p.name for p in (host / "state").iterdir() if ".damaged-" in p.name]
    assert len(aside) == (0 if kind == "missing" else 1)


def test_two_damages_get_two_set_aside_copies(host, capsys):
    for _ in range(2):
        prepare(host, "vm-a", UUID_A, A, 2)
        (host / "state" / "state.json").write_text("{")
        assert cli.main(["hook", "reap"]) == 0
        release(host, "vm-a", A)
    assert len([p for p in (host / "state").iterdir() if ".damaged-" in p.name]) == 2


# -- bounded work, bounded waits ---------------------------------------------------------------------

def test_a_cpuset_bomb_is_refused_without_expanding_it(host, capsys):
    """300 ranges of 65,536 CPUs each in one vcpupin: refused in one line, found before any range
    is expanded (memory stays small), and the host is untouched."""
    bomb = ",".join(f"{i * 65536}-{i * 65536 + 65535}" for i in range(300))
    before = tree(host)
    tracemalloc.start()
    rc = call(domain("vm-bomb", UUID_A, pins=bomb), "vm-bomb", "prepare", "begin")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert rc == 1 and peak < 8 << 20
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "beyond the host's last CPU 4" in err[0]
    assert tree(host) == before


def test_a_held_lock_times_out_naming_its_holder(host, capsys):
    (host / "vmtune.toml").write_text('reserved_cpus = "0"\n[hook]\nlock_timeout_s = 0.3\n')
    (host / "state").mkdir()
    fd = os.open(host / "state" / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert call(A, "vm-a", "prepare", "begin") == 1
    finally:
        os.close(fd)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"held by pid {os.getpid()}" in err[0] and "0.3 s" in err[0]


def test_a_stdin_that_never_closes_times_out(host):
    """The installed-style hook gives up on a stdin that is never closed, and lets the domain be."""
    env = {**os.environ, "VMTUNE_STDIN_TIMEOUT_S": "0.5"}
    proc = subprocess.Popen([sys.executable, str(HOOK), "vm-a", "prepare", "begin", "-"], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdin.write(A.encode()[:20])
    proc.stdin.flush()
    try:
        proc.wait(timeout=20)  # stdin stays open: communicate() would close it
        err = proc.stderr.read()
    finally:
        proc.stdin.close()
    assert proc.returncode == 0 and b"did not arrive in time" in err


# -- the filesystem ------------------------------------------------------------------------------------

def test_a_dangling_lock_symlink_is_refused(host, tmp_path, capsys):
    (host / "state").mkdir()
    outside = tmp_path / "outside-lock"
    (host / "state" / "lock").symlink_to(outside)
    assert call(A, "vm-a", "prepare", "begin") == 1
    assert not outside.exists()
    assert "a symlink" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["dangling symlink", "group-writable", "a file"])
def test_an_untrusted_state_dir_is_refused_in_one_line(host, tmp_path, capsys, kind):
    folder = host / "state"
    if kind == "dangling symlink":
        folder.symlink_to(tmp_path / "nowhere")
    elif kind == "group-writable":
        folder.mkdir()
        folder.chmod(0o775)
    else:
        folder.write_text("")
    assert call(A, "vm-a", "prepare", "begin") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "state dir" in err[0] and "refused" in err[0], err


# -- identity and logs -------------------------------------------------------------------------------

def test_a_domain_with_a_uuid_is_released_by_uuid_only(host):
    """Another domain with vm-a's name and another UUID never drops vm-a's lease."""
    prepare(host, "vm-a", UUID_A, A, 2)
    impostor = domain("vm-a", "99999999-9999-9999-9999-999999999999", pins="2")
    assert call(impostor, "vm-a", "release", "end") == 0
    assert list(state(host)["leases"]) == [UUID_A]
    assert_tuned(host / "sys")


def test_control_characters_in_a_name_cannot_forge_log_lines(host, capsys):
    evil = domain("vm\nvmtune-hook: forged", UUID_A, pins="2")
    call(evil, "x", "prepare", "begin")
    err = capsys.readouterr().err
    assert "\nvmtune-hook: forged" not in err and "vm\\nvmtune-hook: forged" in err


# -- stale leases --------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["no status file", "QEMU gone", "another domain's status"])
def test_a_stale_lease_is_reaped_at_the_next_prepare(host, capsys, how):
    """vm-a's release never came; at vm-b's prepare its lease is reaped exactly as a release would."""
    before = tree(host)
    prepare(host, "vm-a", UUID_A, A, 2)
    if how == "no status file":
        lv().stop("vm-a")
    elif how == "QEMU gone":
        qemu = lv().procs.pop("vm-a")
        qemu.kill()
        qemu.wait()
    else:
        lv().stop("vm-a")
        lv().start("vm-a", "99999999-9999-9999-9999-999999999999")
    capsys.readouterr()
    prepare(host, "vm-b", UUID_B, B, 3)
    assert "vm-a: lease reaped" in capsys.readouterr().err
    assert list(state(host)["leases"]) == [UUID_B]
    release(host, "vm-b", B)
    assert tree(host) == before


def test_a_starting_domain_is_not_reaped(host, monkeypatch):
    """Within the grace period a lease without a status file belongs to a domain that is starting."""
    monkeypatch.setattr(alive, "GRACE_S", 120.0)
    assert call(A, "vm-a", "prepare", "begin") == 0
    prepare(host, "vm-b", UUID_B, B, 3)
    assert set(state(host)["leases"]) == {UUID_A, UUID_B}


def test_hook_reap_for_an_operator(host, capsys):
    before = tree(host)
    prepare(host, "vm-a", UUID_A, A, 2)
    lv().stop("vm-a")
    assert cli.main(["hook", "reap"]) == 0
    assert "reaped the lease of vm-a" in capsys.readouterr().out
    assert tree(host) == before
    clean(host)


def test_every_prepare_completes_what_a_crash_left(host):
    """Class 1 of the trials: vm-a's prepare is killed half-way, vm-b prepares before vm-a's release
    arrives (vm-a still starting): vm-b's prepare leaves the host fully tuned."""
    killed(5, ["vm-a", "prepare", "begin", "-"], A)
    lv().start("vm-a", UUID_A)  # libvirt goes on starting it
    prepare(host, "vm-b", UUID_B, B, 3)
    assert_tuned(host / "sys")


# -- storms ------------------------------------------------------------------------------------------

def _storm(i: int, barrier) -> None:
    uuid = f"{i:08d}-0000-4000-8000-000000000000"
    xml = domain(f"vm-{i}", uuid, pins=str(1 + i % 3))
    barrier.wait()
    for _ in range(3):
        hook.main([f"vm-{i}", "prepare", "begin", "-"], xml.encode())
        hook.main([f"vm-{i}", "release", "end", "-"], xml.encode())
    os._exit(0)


def test_a_storm_of_twenty_domains_ends_exact(host):
    """20 domains start and stop three times each, all at once (pins overlap: on_conflict warn):
    every call waits its turn at the lock, and the host ends exact with no lease."""
    (host / "vmtune.toml").write_text('reserved_cpus = "0"\n[hook]\non_conflict = "warn"\n')
    before = tree(host)
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(20)
    procs = [ctx.Process(target=_storm, args=(i, barrier)) for i in range(20)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 20
    assert tree(host) == before
    clean(host)
