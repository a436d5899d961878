"""``vmtune status`` (vmtune/install/status.py) and the hook's own file (vmtune/install/hookcheck.py), which the
doctor checks too (area ``hook``, vmtune/doctor/hookinstall.py). The host is fixtures/reliability.py's
fake tree with libvirt's run dir and fake QEMU processes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from fixtures.isotrees import tree
from fixtures.hook import A, B, UUID_A, UUID_B, call, state
from fixtures.reliability import clean, lv, prepare, release

from vmtune import cli
from vmtune.install import hookcheck, hookfile
from vmtune.doctor import hookinstall
from vmtune.doctor.findings import Context
from vmtune.roots import Roots
from vmtune.install.status import hook_log


def status(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["status", *args])
    return code, capsys.readouterr().out


def as_json(capsys, *args: str) -> dict:
    code, out = status(capsys, "--json", *args)
    assert code == 0
    return json.loads(out)


def test_nothing_installed_nothing_held(running_host_tree, tmp_path, capsys):
    code, out = status(capsys, "--hooks-dir", str(tmp_path / "hooks"), "-n", "0")
    assert code == 0
    assert out.splitlines()[0] == "vmtune hook: not installed"
    doc = as_json(capsys, "--hooks-dir", str(tmp_path / "hooks"))
    assert doc["active"] is False and doc["leases"] == [] and doc["hook"]["exists"] is False
    assert doc["hook"]["problems"] == [f"{tmp_path}/hooks/qemu.d/50-vmtune does not exist: the hook is not installed"]


def test_leases_isolation_and_the_host_before_while_held_then_nothing(running_host_tree, tmp_path, capsys):
    hooks = str(tmp_path / "hooks")
    assert cli.main(["hook", "install", "--hooks-dir", hooks, "--no-timer"]) == 0
    prepare(running_host_tree, "vm-a", UUID_A, A, 2)
    assert call(A, "vm-a", "started", "begin") == 0
    prepare(running_host_tree, "vm-b", UUID_B, B, 3)
    held = tree(running_host_tree)
    saved = state(running_host_tree)
    code, out = status(capsys, "--hooks-dir", hooks)
    assert tree(running_host_tree) == held  # read-only
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "vmtune hook: installed, 2 lease(s) held: the host is tuned"
    assert any(line.strip().startswith("hook:") and hookfile.HOOK_NAME in line for line in lines)
    lease_a = next(line for line in lines if "vm-a" in line)
    assert "CPUs 2" in lease_a and "QEMU pid" in lease_a and "since 20" in lease_a
    assert "QEMU not started yet" in next(line for line in lines if "vm-b" in line)
    assert any(line.strip().startswith("isolated:  CPUs 2-3") for line in lines)
    assert any(line.strip().startswith("before:") for line in lines)
    doc = as_json(capsys, "--hooks-dir", hooks)
    assert doc["active"] is True and doc["hook"]["ours"] is True and doc["hook"]["exists"] is True
    assert [(lease["name"], lease["uuid"], lease["cpus"]) for lease in doc["leases"]] == [
        ("vm-a", UUID_A, "2"), ("vm-b", UUID_B, "3")]
    assert doc["leases"][0]["qemu"] == saved["leases"][UUID_A]["qemu"]["pid"]
    assert doc["leases"][0]["since"] == saved["leases"][UUID_A]["since"]
    assert doc["isolated"] == saved["isolation"]["cpus"]
    assert doc["before"] == [{k: r[k] for k in ("path", "before", "after")} for r in saved["baseline"]]
    assert doc["before"]  # the fake host's governor and friends were saved
    release(running_host_tree, "vm-a", A)
    release(running_host_tree, "vm-b", B)
    clean(running_host_tree)
    code, out = status(capsys, "--hooks-dir", hooks)
    assert out.splitlines()[0] == "vmtune hook: installed, no lease held: the host is as it was"
    assert "leases:" not in out and "isolated:" not in out


def test_a_lease_whose_domain_died_is_shown_stale(running_host_tree, tmp_path, capsys):
    prepare(running_host_tree, "vm-a", UUID_A, A, 2)
    assert call(A, "vm-a", "started", "begin") == 0
    lv().kill("vm-a")
    doc = as_json(capsys, "--hooks-dir", str(tmp_path / "hooks"))
    assert "is gone" in doc["leases"][0]["stale"] or "exited" in doc["leases"][0]["stale"]
    assert "STALE:" in status(capsys, "--hooks-dir", str(tmp_path / "hooks"))[1]
    assert cli.main(["hook", "reap", "--quiet"]) == 0
    clean(running_host_tree)


def test_a_damaged_state_is_exit_1_with_the_reason(running_host_tree, tmp_path, capsys):
    (running_host_tree / "state").mkdir(exist_ok=True)
    (running_host_tree / "state" / "state.json").write_text("{not json")
    code, out = status(capsys, "--hooks-dir", str(tmp_path / "hooks"))
    assert code == 1 and "state:" in out
    assert json.loads(status(capsys, "--json", "--hooks-dir", str(tmp_path / "hooks"))[1])["state_error"]


def test_lines_is_a_usage_error_past_its_bounds(capsys):
    for bad in ("-1", "abc", "1001"):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["status", "-n", bad])
        assert exit_.value.code == 2
        assert capsys.readouterr().err.startswith("vmtune: error: status: argument -n/--lines")


# -- the hook's file -------------------------------------------------------------------------------

def installed(root: Path, python: str) -> Path:
    path = root / "etc/libvirt/hooks/qemu.d/50-vmtune"
    path.parent.mkdir(parents=True)
    path.write_text(hookfile.script(python))
    path.chmod(0o755)
    return path


def fake_libvirt(root: Path, so: str = "libvirt.so.0.9000.0") -> None:
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / so).write_text("")


def test_a_sound_hook_has_no_problem_and_the_doctor_says_ok(tmp_path):
    python = tmp_path / "usr/bin/python3"
    python.parent.mkdir(parents=True)
    python.write_text("")
    python.chmod(0o755)
    installed(tmp_path, "/usr/bin/python3")
    fake_libvirt(tmp_path)
    found = hookcheck.inspect(root=str(tmp_path))
    assert found.libvirt == "9.0.0" and found.reads_qemu_d and found.ours and found.interpreter_found
    assert found.problems() == []
    ctx = Context(Roots.given(None, None, str(tmp_path), Roots()))
    assert [f.level for f in hookinstall.check(ctx)] == ["OK"]


@pytest.mark.parametrize("fault", ["not executable", "interpreter gone", "old libvirt", "not ours", "dangling link"])
def test_each_fault_of_the_hook_file_is_named(tmp_path, fault):
    python = tmp_path / "usr/bin/python3"
    python.parent.mkdir(parents=True)
    python.write_text("")
    python.chmod(0o755)
    path = installed(tmp_path, "/usr/bin/python3")
    fake_libvirt(tmp_path, "libvirt.so.0.6004.0" if fault == "old libvirt" else "libvirt.so.0.9000.0")
    if fault == "not executable":
        path.chmod(0o644)
    elif fault == "interpreter gone":
        python.unlink()
    elif fault == "not ours":
        path.write_text("#!/usr/bin/python3\nimport sys\n")
    elif fault == "dangling link":
        path.unlink()
        path.symlink_to(tmp_path / "usr/lib/vmtune/libvirt-hook")
    found = hookcheck.inspect(root=str(tmp_path))
    problems = found.problems()
    assert len(problems) == 1, problems
    word = {"not executable": "not executable", "interpreter gone": "is gone", "old libvirt": "6.4.0",
            "not ours": "not vmtune's", "dangling link": "does not exist"}[fault]
    assert word in problems[0]
    findings = hookinstall.check(Context(Roots.given(None, None, str(tmp_path), Roots())))
    assert [f.level for f in findings] == ["FAIL" if fault == "interpreter gone" else "INFO"]


def test_a_symlinked_hook_is_followed_and_named(tmp_path):
    python = tmp_path / "usr/bin/python3"
    python.parent.mkdir(parents=True)
    python.write_text("")
    python.chmod(0o755)
    real = tmp_path / "usr/lib/vmtune/libvirt-hook"
    real.parent.mkdir(parents=True)
    real.write_text(hookfile.script("/usr/bin/python3"))
    real.chmod(0o755)
    link = tmp_path / "etc/libvirt/hooks/qemu.d/50-vmtune"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    found = hookcheck.inspect(root=str(tmp_path))
    assert found.exists and found.ours and found.target == str(real) and found.problems() == []


def test_a_daemon_that_started_before_the_hook_must_restart():
    found = hookcheck.HookFile("/h", exists=True, ours=True, executable=True, interpreter="/usr/bin/python3",
                               interpreter_found=True, libvirt="9.0.0", daemon="libvirtd",
                               daemon_since=time.time() - 60, installed_at=time.time())
    assert found.problems() == ["libvirtd started before the hook was installed: restart it so that it sees the hook"]
    found.daemon_since = found.installed_at + 5
    assert found.problems() == []


def test_a_packaged_hook_was_installed_when_its_link_was_made_not_when_the_package_was_built(tmp_path):
    """dpkg gives the hook's symlink the archive's mtime (the package's build): the time it was
    installed is when the link was made (its ctime), so a libvirtd that started after the build and
    before the install is still told to restart."""
    real = tmp_path / "usr/lib/vmtune/libvirt-hook"
    real.parent.mkdir(parents=True)
    real.write_text(hookfile.script("/usr/bin/python3"))
    link = tmp_path / "etc/libvirt/hooks/qemu.d/50-vmtune"
    link.parent.mkdir(parents=True)
    made = time.time()
    link.symlink_to(real)
    built = made - 30 * 86400
    os.utime(link, (built, built), follow_symlinks=False)  # as dpkg extracts it
    assert os.lstat(link).st_mtime == pytest.approx(built)
    found = hookcheck.inspect(root=str(tmp_path))
    assert found.installed_at >= made - 1, (found.installed_at, made)
    found.daemon, found.daemon_since = "libvirtd", made - 60  # started after the build, before the install
    assert any("started before the hook was installed" in p for p in found.problems()), found.problems()


def test_the_log_lines_come_from_syslog_files(tmp_path):
    log = tmp_path / "var/log/syslog"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"Nov 27 03:00:0{i} h vmtune-hook[{100 + i}]: line {i}\n" for i in range(6))
                   + "Nov 27 03:00:09 h other[1]: not ours\n")
    source, lines = hook_log(3, str(tmp_path))
    assert source == str(log) and [line.rsplit(": ", 1)[1] for line in lines] == ["line 3", "line 4", "line 5"]
    assert hook_log(3, str(tmp_path / "nothing")) == (None, [])


def test_status_is_quick(running_host_tree, tmp_path):
    """Read-only and quick: no lock is taken (a held lock does not make it wait)."""
    from vmtune.hoststate.statedir import StateDir

    prepare(running_host_tree, "vm-a", UUID_A, A, 2)
    store = StateDir(str(running_host_tree / "state"))
    with store.lock():
        assert cli.main(["status", "--hooks-dir", str(tmp_path / "hooks"), "-n", "0"]) == 0
    release(running_host_tree, "vm-a", A)
    clean(running_host_tree)
    assert os.path.exists(running_host_tree / "state" / "state.json")
