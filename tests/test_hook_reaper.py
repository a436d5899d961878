"""No stale lease waits for a hook call (issue 19, part 1): the reaper's units (vmtune/install/reaper.py),
the reap's fast path, and no grace once a domain's QEMU has started (vmtune/hoststate/alive.py).

The host is fixtures/reliability.py's (a fake sysfs with isotrees' IRQs, masks and groups, and
libvirt's run dir with fake QEMU processes); units go to a folder of the test, and ``systemctl`` is
isotrees' stub, first on PATH.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.isotrees import stub_systemctl, tree
from fixtures.hook import A, B, HOOK, UUID_A, UUID_B, call, state
from fixtures.reliability import clean, lv, prepare, release
from fixtures.wait import wait_until

from vmtune import cli, hook
from vmtune.install import reaper
from vmtune.doctor import hookstate
from vmtune.doctor.findings import Context
from vmtune.hoststate import alive
from vmtune.roots import Roots

ROOT = Path(__file__).resolve().parent.parent


# -- the units -------------------------------------------------------------------------------------

def install(tmp_path: Path, *extra: str) -> int:
    return cli.main(["hook", "install", "--hooks-dir", str(tmp_path / "hooks"), "--unit-dir", str(tmp_path / "unitfiles"),
                     *extra])


def unit(tmp_path: Path, name: str) -> str:
    return (tmp_path / "unitfiles" / name).read_text()


@pytest.fixture
def no_systemd(tmp_path, monkeypatch):
    """A run root without systemd (``RUNFS/systemd/system`` absent)."""
    monkeypatch.setenv("VMTUNE_RUNFS", str(tmp_path / "run"))
    return tmp_path


def test_install_writes_a_oneshot_service_and_a_timer_every_minute(no_systemd, capsys):
    tmp_path = no_systemd
    assert install(tmp_path) == 0
    service, timer = unit(tmp_path, reaper.SERVICE), unit(tmp_path, reaper.TIMER)
    assert "\nType=oneshot\n" in service
    exec_start = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    words = exec_start.partition("=")[2].split()
    assert words[0] == sys.executable and os.path.isabs(words[0])  # the hook's interpreter
    assert words[1:6] == ["-m", "vmtune", "hook", "reap", "--quiet"]
    assert words[6:] == ["--hooks-dir", str(tmp_path / "hooks")]
    assert "\nOnBootSec=1min\n" in timer and "\nOnCalendar=minutely\n" in timer
    assert "\nWantedBy=timers.target\n" in timer
    out = capsys.readouterr().out
    assert "systemd is not running here" in out and "* * * * * root " + sys.executable in out
    hook_file = tmp_path / "hooks" / "qemu.d" / "50-vmtune"
    assert hook_file.exists()
    first = {p: p.read_bytes() for p in (tmp_path / "unitfiles").iterdir()}
    assert install(tmp_path) == 0  # twice: the same files
    assert {p: p.read_bytes() for p in (tmp_path / "unitfiles").iterdir()} == first


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_the_units_pass_systemd_analyze_verify(no_systemd):
    tmp_path = no_systemd
    assert install(tmp_path) == 0
    units = [str(tmp_path / "unitfiles" / name) for name in (reaper.SERVICE, reaper.TIMER)]
    done = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    mine = [line for line in done.stderr.splitlines() if "vmtune-reap" in line]
    assert not mine, mine


def test_a_timer_with_a_strange_interpreter_path_still_verifies(tmp_path):
    """Spaces, ``%`` and ``$`` in the interpreter's path are quoted as systemd reads them."""
    text = reaper.units("/opt/my venv/100%/$x/bin/python", "/etc/libvirt/hooks")[reaper.SERVICE]
    line = next(row for row in text.splitlines() if row.startswith("ExecStart="))
    assert line.startswith('ExecStart="/opt/my venv/100%%/$$x/bin/python" -m vmtune')


@pytest.mark.parametrize("name", [reaper.SERVICE, reaper.TIMER])
def test_a_unit_that_is_not_vmtunes_is_never_overwritten(no_systemd, capsys, name):
    tmp_path = no_systemd
    theirs = tmp_path / "unitfiles" / name
    theirs.parent.mkdir()
    theirs.write_text("[Unit]\nDescription=theirs\n")
    assert install(tmp_path) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vmtune: error: ") and "not vmtune's" in err
    assert theirs.read_text() == "[Unit]\nDescription=theirs\n"
    assert sorted(p.name for p in theirs.parent.iterdir()) == [name]  # nothing else written
    assert not (tmp_path / "hooks").exists()  # the hook neither
    assert cli.main(["hook", "uninstall", "--hooks-dir", str(tmp_path / "hooks"), "--unit-dir",
                     str(tmp_path / "unitfiles")]) == 0
    assert theirs.read_text() == "[Unit]\nDescription=theirs\n"  # uninstall leaves it too


def test_no_timer_leaves_the_units_out_and_uninstall_removes_them(no_systemd):
    tmp_path = no_systemd
    assert install(tmp_path, "--no-timer") == 0
    assert not (tmp_path / "unitfiles").exists()
    assert install(tmp_path) == 0
    assert cli.main(["hook", "uninstall", "--hooks-dir", str(tmp_path / "hooks"), "--unit-dir",
                     str(tmp_path / "unitfiles")]) == 0
    assert list((tmp_path / "unitfiles").iterdir()) == []
    assert not (tmp_path / "hooks" / "qemu.d" / "50-vmtune").exists()


@pytest.fixture
def systemd(tmp_path, monkeypatch):
    """A run root where systemd runs, isotrees' stub systemctl first on PATH; its call log."""
    (tmp_path / "run" / "systemd" / "system").mkdir(parents=True)
    monkeypatch.setenv("VMTUNE_RUNFS", str(tmp_path / "run"))
    log = stub_systemctl(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return log


def test_where_systemd_runs_install_enables_the_timer_and_uninstall_stops_it(tmp_path, systemd, monkeypatch, capsys):
    monkeypatch.setattr(reaper, "UNIT_DIRS", (*reaper.UNIT_DIRS, str(tmp_path / "unitfiles")))  # one systemd reads
    assert install(tmp_path) == 0
    assert systemd.read_text().splitlines() == ["daemon-reload", "enable --now vmtune-reap.timer"]
    assert "enabled and started vmtune-reap.timer" in capsys.readouterr().out
    assert cli.main(["hook", "uninstall", "--hooks-dir", str(tmp_path / "hooks"), "--unit-dir",
                     str(tmp_path / "unitfiles")]) == 0
    assert systemd.read_text().splitlines()[2:] == ["disable --now vmtune-reap.timer", "daemon-reload"]
    assert list((tmp_path / "unitfiles").iterdir()) == []


def test_units_written_where_systemd_does_not_look_are_not_enabled(tmp_path, systemd, capsys):
    assert install(tmp_path) == 0
    assert not systemd.exists() or systemd.read_text() == ""
    assert "is not a folder systemd reads" in capsys.readouterr().out


def test_a_failing_systemctl_is_one_line_and_a_nonzero_exit(tmp_path, systemd, monkeypatch, capsys):
    monkeypatch.setattr(reaper, "UNIT_DIRS", (*reaper.UNIT_DIRS, str(tmp_path / "unitfiles")))
    (tmp_path / "systemctl.fail").write_text("enable --now vmtune-reap.timer\n")
    assert install(tmp_path) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "systemctl enable --now vmtune-reap.timer" in err


# -- the reap's fast path ----------------------------------------------------------------------------

def reap_process(state_dir: Path, *args: str, hooks_dir: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m vmtune hook reap ARGS`` as the timer runs it, with ``-X importtime``."""
    if hooks_dir is None:  # the fake host's VMTUNE_* settings, which the environment has
        env = {**os.environ, "VMTUNE_STATE_DIR": str(state_dir)}
    else:  # the same settings, from the hooks dir's vmtune.env only
        env = {k: v for k, v in os.environ.items() if not k.startswith("VMTUNE_")}
    return subprocess.run([sys.executable, "-X", "importtime", "-m", "vmtune", "hook", "reap", *args,
                           "--hooks-dir", str(hooks_dir or state_dir / "no-hooks")],
                          capture_output=True, text=True, timeout=60, check=False, env=env, cwd="/")


def imported(done: subprocess.CompletedProcess) -> list[str]:
    return [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]


@pytest.mark.parametrize("how", ["no state", "no lease"])
def test_an_idle_reap_exits_before_importing_anything_heavy(running_host_tree, how):
    """With no state file, or one that holds nothing, the reap imports neither the CLI nor lxml nor
    the host-state engine, writes nothing, and says one line (none with ``--quiet``)."""
    if how == "no lease":
        prepare(running_host_tree, "vm-a", UUID_A, A, 2)
        release(running_host_tree, "vm-a", A)
        clean(running_host_tree)
    before = sorted(os.listdir(running_host_tree / "state")) if (running_host_tree / "state").exists() else None
    done = reap_process(running_host_tree / "state")
    assert done.returncode == 0 and done.stdout == reaper.NOTHING + "\n"
    heavy = [m for m in imported(done) if m.startswith(("vmtune.cli", "vmtune.hoststate", "lxml", "argparse",
                                                          "logging"))]
    assert not heavy
    after = sorted(os.listdir(running_host_tree / "state")) if (running_host_tree / "state").exists() else None
    assert after == before
    quiet = reap_process(running_host_tree / "state", "--quiet")
    assert (quiet.returncode, quiet.stdout) == (0, "")


def test_a_reap_with_a_lease_takes_the_full_path(running_host_tree):
    prepare(running_host_tree, "vm-a", UUID_A, A, 2)
    done = reap_process(running_host_tree / "state", "--quiet")
    assert done.returncode == 0 and done.stdout == ""
    assert "vmtune.hoststate.leases" in imported(done)
    lv().kill("vm-a")  # its QEMU gone, the status files left: stale whatever the grace
    done = subprocess.run([sys.executable, "-m", "vmtune", "hook", "reap", "--quiet", "--hooks-dir",
                           str(running_host_tree / "no-hooks")], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "reaped the lease of vm-a" in done.stdout
    clean(running_host_tree)


def test_the_reap_reads_the_hooks_dirs_env_file(running_host_tree, tmp_path):
    """The timer's reap finds the state the hook uses through ``HOOKS_DIR/vmtune.env``, as the hook does."""
    prepare(running_host_tree, "vm-a", UUID_A, A, 2)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    settings = {k: v for k, v in os.environ.items() if k.startswith("VMTUNE_")}
    (hooks / "vmtune.env").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    lv().kill("vm-a")
    done = reap_process(running_host_tree / "state", hooks_dir=hooks)
    assert done.returncode == 0 and "reaped the lease of vm-a" in done.stdout, done.stderr[-2000:]
    clean(running_host_tree)


def test_the_fast_path_decides_as_the_state_reader(tmp_path):
    """Anything but a state that holds nothing goes the full way: a lease, a baseline, damage."""
    (tmp_path / "state.json").write_text(json.dumps({"version": 2, "leases": {}, "baseline": None,
                                                     "isolation": None, "unrestored": []}))
    assert reaper.idle(str(tmp_path))
    for doc in ({"version": 2, "leases": {"x": {}}, "baseline": None, "isolation": None, "unrestored": []},
                {"version": 2, "leases": {}, "baseline": [], "isolation": None, "unrestored": []},
                {"version": 3, "leases": {}, "baseline": None, "isolation": None, "unrestored": []}, [], "{"):
        (tmp_path / "state.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
        assert not reaper.idle(str(tmp_path)), doc
    (tmp_path / "state.json").unlink()
    (tmp_path / "baseline.json").write_text("{}")
    assert not reaper.idle(str(tmp_path))  # the state is gone and its copy is there: damage
    os.mkfifo(tmp_path / "state.json")
    assert not reaper.idle(str(tmp_path))  # never blocks on a FIFO


# -- no grace once the domain has started ----------------------------------------------------------

def started(name: str, xml: str) -> None:
    assert call(xml, name, "started", "begin") == 0


@pytest.mark.parametrize("status_files", ["left behind", "removed"])
def test_a_crashed_domain_is_stale_at_once_once_started(running_host_tree, capsys, monkeypatch, status_files):
    """With libvirt's 2-minute grace: a lease whose recorded QEMU is gone is reaped at once, whether
    or not libvirt left its status files."""
    monkeypatch.setattr(alive, "GRACE_S", 120.0)
    before = tree(running_host_tree)
    prepare(running_host_tree, "vm-a", UUID_A, A, 2)
    started("vm-a", A)
    qemu = state(running_host_tree)["leases"][UUID_A]["qemu"]
    assert qemu["pid"] == int((lv().folder / "vm-a.pid").read_text())
    lv().kill("vm-a")
    if status_files == "removed":
        lv().stop("vm-a")
    capsys.readouterr()
    assert cli.main(["hook", "reap"]) == 0
    assert f"reaped the lease of vm-a: its QEMU (pid {qemu['pid']}) is gone" in capsys.readouterr().out
    assert tree(running_host_tree) == before
    clean(running_host_tree)


def test_a_pid_that_is_another_process_now_is_stale(running_host_tree, capsys, monkeypatch):
    monkeypatch.setattr(alive, "GRACE_S", 120.0)
    prepare(running_host_tree, "vm-a", UUID_A, A, 2)
    started("vm-a", A)
    doc = state(running_host_tree)
    doc["leases"][UUID_A]["qemu"]["start"] += 1  # the same pid, started at another time
    for name in ("state.json", "baseline.json"):
        (running_host_tree / "state" / name).write_text(json.dumps(doc))
    capsys.readouterr()
    assert cli.main(["hook", "reap"]) == 0
    assert "is another process now" in capsys.readouterr().out


def test_a_zombie_qemu_has_exited():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    pid = child.pid
    def zombie() -> str | None:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat if stat.rpartition(")")[2].split()[0] == "Z" else None

    stat = wait_until(zombie, 5, f"the child {pid} to be a zombie", interval=0.01)
    start = int(stat.rpartition(")")[2].split()[19])
    try:
        assert alive.why_gone("/proc", alive.Qemu(pid, start), UUID_A, "vm-a") == f"its QEMU (pid {pid}) has exited"
    finally:
        child.wait()
    assert alive.why_gone("/proc", alive.Qemu(pid, start), UUID_A, "vm-a") == f"its QEMU (pid {pid}) is gone"


def test_a_domain_still_starting_keeps_its_grace(running_host_tree, monkeypatch):
    """prepare ran, libvirt has no pid yet: the lease waits out the grace, and a started hook with
    no QEMU to name records nothing."""
    monkeypatch.setattr(alive, "GRACE_S", 120.0)
    assert call(A, "vm-a", "prepare", "begin") == 0
    started("vm-a", A)  # no status file, no pid file
    assert "qemu" not in state(running_host_tree)["leases"][UUID_A]
    assert cli.main(["hook", "reap"]) == 0
    assert list(state(running_host_tree)["leases"]) == [UUID_A]


def test_reconnect_records_the_qemu_too(running_host_tree, monkeypatch, capsys):
    monkeypatch.setattr(alive, "GRACE_S", 120.0)
    prepare(running_host_tree, "vm-a", UUID_A, A, 2)
    assert "qemu" not in state(running_host_tree)["leases"][UUID_A]
    assert call(A, "vm-a", "reconnect", "begin") == 0
    pid = state(running_host_tree)["leases"][UUID_A]["qemu"]["pid"]
    assert pid == int((lv().folder / "vm-a.pid").read_text())
    lv().kill("vm-a")
    lv().stop("vm-a")
    capsys.readouterr()
    assert call(B, "vm-b", "prepare", "begin") == 0
    assert f"vm-a: lease reaped: its QEMU (pid {pid}) is gone" in capsys.readouterr().err


def test_a_recorded_qemu_is_judged_without_libvirts_run_dir(running_host_tree, monkeypatch, capsys):
    """The process alone decides: a missing run dir does not keep a lease whose QEMU is gone."""
    monkeypatch.setattr(alive, "GRACE_S", 120.0)
    prepare(running_host_tree, "vm-a", UUID_A, A, 2)
    started("vm-a", A)
    lv().kill("vm-a")
    monkeypatch.setenv("VMTUNE_LIBVIRT_RUNDIR", str(running_host_tree / "nowhere"))
    capsys.readouterr()
    assert cli.main(["hook", "reap"]) == 0
    assert "reaped the lease of vm-a: its QEMU" in capsys.readouterr().out


def test_a_started_hook_never_fails_and_an_untagged_one_writes_nothing(running_host_tree, monkeypatch):
    from fixtures.hook import domain

    untagged = domain("vm-x", UUID_B, profile=None)
    assert call(untagged, "vm-x", "started", "begin") == 0
    assert not (running_host_tree / "state").exists()
    prepare(running_host_tree, "vm-a", UUID_A, A, 2)
    (running_host_tree / "state" / "state.json").write_text("{")  # damaged: the started hook says so, and exits 0
    assert call(A, "vm-a", "started", "begin") == 0


# -- a reap beside hook calls ----------------------------------------------------------------------

def _domain_calls(rounds: int, pid: int, failures, reaped) -> None:
    """vm-a's calls as libvirt makes them, ``rounds`` times; its status files name ``pid``. Each
    round waits, while vm-a runs, for one more reap to finish (``reaped`` counts them)."""
    folder = Path(os.environ["VMTUNE_LIBVIRT_RUNDIR"])
    try:
        for _ in range(rounds):
            seen = reaped.value
            assert hook.main(["vm-a", "prepare", "begin", "-"], A.encode()) == 0
            (folder / "vm-a.xml").write_text(f"<domstatus><domain><name>vm-a</name><uuid>{UUID_A}</uuid>"
                                             "</domain></domstatus>\n")
            (folder / "vm-a.pid").write_text(f"{pid}\n")
            assert hook.main(["vm-a", "started", "begin", "-"], A.encode()) == 0
            leases = json.loads((Path(os.environ["VMTUNE_STATE_DIR"]) / "state.json").read_text())["leases"]
            assert leases[UUID_A]["qemu"]["pid"] == pid, leases  # no reap took a running domain's lease
            deadline = time.monotonic() + 30
            while reaped.value <= seen + 1 and time.monotonic() < deadline:  # one whole reap while it runs
                time.sleep(0.001)
            for name in ("vm-a.xml", "vm-a.pid"):
                (folder / name).unlink()
            assert hook.main(["vm-a", "release", "end", "-"], A.encode()) == 0
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        failures.put(repr(exc))
    failures.close()
    failures.join_thread()  # flushed before the exit
    os._exit(0)


def _reaps(stop, failures, reaped) -> None:
    import contextlib
    import io

    count = 0
    while not stop.is_set():
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = cli.main(["hook", "reap", "--quiet", "--hooks-dir", "/nonexistent"])
        if code != 0:
            failures.put(f"reap exited {code}")
        count += 1
        reaped.value = count
    failures.put(f"reaps {count}")
    failures.close()
    failures.join_thread()
    os._exit(0)


def test_a_reap_beside_hook_calls_is_serialized_by_the_lock(running_host_tree, monkeypatch):
    """Reaps run without pause while a domain starts and stops 30 times (each time at least one
    whole reap while it runs): every reap exits 0, no running domain loses its lease, and the host
    ends exact with no lease. (Without the state lock in the reap it fails: a lease lost, reaps
    that read a half-made state.)"""
    monkeypatch.setattr(alive, "GRACE_S", 120.0)  # libvirt's: the domain between prepare and its pid
    before = tree(running_host_tree)
    qemu = lv().qemu("vm-a", UUID_A)
    ctx = multiprocessing.get_context("fork")
    failures, stop, reaped = ctx.Queue(), ctx.Event(), ctx.Value("i", 0)
    reaps = ctx.Process(target=_reaps, args=(stop, failures, reaped))
    calls = ctx.Process(target=_domain_calls, args=(30, qemu.pid, failures, reaped))
    reaps.start()
    calls.start()
    calls.join(300)
    stop.set()
    reaps.join(60)
    seen = []
    while not failures.empty():
        seen.append(failures.get())
    count = [int(s.split()[1]) for s in seen if s.startswith("reaps ")]
    assert [s for s in seen if not s.startswith("reaps ")] == [] and count and count[0] >= 30, seen
    print(f"reliability: {count[0]} reaps beside 30 starts and stops of a domain held")  # RELIABILITY.md
    assert tree(running_host_tree) == before
    clean(running_host_tree)


# -- the doctor ------------------------------------------------------------------------------------

def _doctor(host: Path, root: Path) -> list:
    roots = Roots.from_env(os.environ).replace(root=str(root))  # the fake host's state; the units under root
    return [f for f in hookstate.check(Context(roots=roots)) if "reaper" in f.found]


def test_the_doctor_warns_when_leases_are_held_and_nothing_reaps_them(running_host_tree, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (finding,) = _doctor(running_host_tree, root)
    assert finding.level == "INFO" and "not installed" in finding.found
    prepare(running_host_tree, "vm-a", UUID_A, A, 2)
    (finding,) = _doctor(running_host_tree, root)
    assert finding.level == "WARN" and "1 lease(s) held" in finding.found and "vmtune hook install" in finding.fix
    units = root / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    for name, text in reaper.units().items():
        (units / name).write_text(text)
    (finding,) = _doctor(running_host_tree, root)
    assert finding.level == "WARN" and "installed but not enabled" in finding.found
    (units / "timers.target.wants").mkdir()
    (units / "timers.target.wants" / reaper.TIMER).symlink_to(units / reaper.TIMER)
    (finding,) = _doctor(running_host_tree, root)
    assert finding.level == "OK" and "enabled" in finding.found


def test_the_doctor_counts_a_cron_line_as_a_reaper(running_host_tree, tmp_path):
    root = tmp_path / "root"
    (root / "etc" / "cron.d").mkdir(parents=True)
    (root / "etc" / "cron.d" / "vmtune").write_text(reaper.cron_line() + "\n")
    prepare(running_host_tree, "vm-a", UUID_A, A, 2)
    (finding,) = _doctor(running_host_tree, root)
    assert finding.level == "OK" and "cron.d/vmtune" in finding.found


def test_the_repo_hook_handles_started(tmp_path):
    """hooks/qemu (and so every installed hook) passes ``started begin`` on to vmtune."""
    import runpy

    assert ("started", "begin") in runpy.run_path(str(HOOK), run_name="not_main")["OPS"]


# -- restore: every lease released, the running domains' too (the package's removal) ----------------

def test_restore_releases_every_lease_and_gives_the_host_back(running_host_tree, capsys, monkeypatch):
    """Two running latency domains and one that died: ``hook restore`` releases all three, the host
    is exactly as before the first lease, and the state holds nothing; a second restore has
    nothing to do. A reap alone would have kept the two running domains' leases."""
    monkeypatch.setattr(alive, "GRACE_S", 120.0)
    before = tree(running_host_tree)
    prepare(running_host_tree, "vm-a", UUID_A, A, 2)
    started("vm-a", A)
    prepare(running_host_tree, "vm-b", UUID_B, B, 2)
    started("vm-b", B)
    assert tree(running_host_tree) != before
    capsys.readouterr()
    assert cli.main(["hook", "reap"]) == 0
    assert set(state(running_host_tree)["leases"]) == {UUID_A, UUID_B}  # both run: a reap keeps them
    lv().kill("vm-b")
    capsys.readouterr()
    assert cli.main(["hook", "restore"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "released the lease of vm-a: its domain still runs, no longer tuned" in out
    assert any(line.startswith("released the lease of vm-b: its QEMU") for line in out)
    assert tree(running_host_tree) == before
    assert not state(running_host_tree).get("leases") and state(running_host_tree).get("baseline") is None
    assert cli.main(["hook", "restore"]) == 0
    assert capsys.readouterr().out == "nothing to restore: no lease is held\n"
    assert cli.main(["hook", "restore", "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    clean(running_host_tree)


def test_restore_takes_no_unit_options(capsys):
    assert cli.main(["hook", "restore", "--no-timer"]) == 2
    assert capsys.readouterr().err.startswith("vmtune: error: hook restore: --unit-dir and --no-timer")


def test_install_over_the_packages_link_is_refused_and_writes_nothing(no_systemd, capsys):
    """The Debian package's hook is a link dpkg owns: `vmtune hook install` would replace it with a file
    (and units overriding the package's) that outlive the package. One line, exit 1, nothing written."""
    tmp_path = no_systemd
    real = tmp_path / "usr/lib/vmtune/libvirt-hook"
    real.parent.mkdir(parents=True)
    real.write_text(hook.__doc__ or "")
    link = tmp_path / "hooks/qemu.d/50-vmtune"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    assert install(tmp_path) == 1
    assert "the vmtune package's hook" in capsys.readouterr().err
    assert link.is_symlink() and not (tmp_path / "unitfiles").exists()


def test_without_libvirts_run_dir_only_recorded_qemus_are_judged(tmp_path):
    """alive.stale, as the hook, `vmtune status` and the doctor judge leases: with no run dir, a lease
    without its QEMU recorded is not judged (blind), one with it still is; with the run dir, both are."""
    from vmtune.hoststate.document import Lease, State

    gone = alive.Qemu(2 ** 22 + 7, 1)  # above pid_max's default: no such process
    leases = {UUID_A: Lease("vm-a", since=1.0), UUID_B: Lease("vm-b", since=1.0, qemu=gone)}
    found, blind = alive.stale(str(tmp_path / "none"), "/proc", leases, time.time())
    assert blind and list(found) == [UUID_B] and "is gone" in found[UUID_B]
    (tmp_path / "run").mkdir()
    found, blind = alive.stale(str(tmp_path / "run"), "/proc", leases, time.time())
    assert not blind and set(found) == {UUID_A, UUID_B}
    ctx = Context(Roots(sysfs=None, proc="/proc", root=str(tmp_path), libvirt=str(tmp_path / "none")))
    (tmp_path / "run" / "vmtune").mkdir(parents=True)
    (tmp_path / "run" / "vmtune" / "state.json").write_text(json.dumps(State(leases=leases).to_json()))
    blind = [f for f in hookstate.check(ctx) if "run dir does not exist" in f.found]
    assert [f.level for f in blind] == ["WARN"], hookstate.check(ctx)
