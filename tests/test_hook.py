"""The libvirt hook (vmtune.hook) against a sysfs-shaped tree in a temporary directory."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.hook import A, B, CPU, HOOK, UUID_A, UUID_B, assert_tuned, call, domain, snapshot, state, value

from vmtune import cli, hook
from vmtune.install import hookfile as install
from vmtune.hoststate import engine, tuning
from vmtune.hoststate.kinds import base, parse_key
from vmtune.hoststate.record import Record
from vmtune.hoststate.statedir import StateDir
from vmtune.roots import Roots


# -- lifecycles ---------------------------------------------------------------------------------

def test_two_vms_host_tuned_until_the_last_stops(fake_host_tree, capsys):
    """The first lease tunes the host, the second leaves it alone, the last release restores it exactly."""
    sysfs = fake_host_tree / "sys"
    before = snapshot(sysfs)
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert_tuned(sysfs)
    tuned = snapshot(sysfs)
    assert call(B, "vm-b", "prepare", "begin") == 0
    assert snapshot(sysfs) == tuned
    assert set(state(fake_host_tree)["leases"]) == {UUID_A, UUID_B}
    assert state(fake_host_tree)["leases"][UUID_A]["cpus"] == "2"
    assert call(A, "vm-a", "release", "end") == 0
    assert snapshot(sysfs) == tuned
    assert list(state(fake_host_tree)["leases"]) == [UUID_B]
    assert call(B, "vm-b", "release", "end") == 0
    assert snapshot(sysfs) == before
    assert state(fake_host_tree) == {"version": 2, "leases": {}, "baseline": None, "isolation": None, "unrestored": []}
    assert capsys.readouterr().out == ""


def test_start_that_fails_after_prepare_restores(fake_host_tree, capsys):
    """prepare begin, then release end failed (the start failed): the host is restored."""
    before = snapshot(fake_host_tree / "sys")
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert call(A, "vm-a", "stopped", "end", "failed") == 0
    assert call(A, "vm-a", "release", "end", "failed") == 0
    assert snapshot(fake_host_tree / "sys") == before
    assert state(fake_host_tree)["leases"] == {}
    assert capsys.readouterr().out == ""


def test_crash_of_one_vm_keeps_the_other_tuned(fake_host_tree):
    """A crashed domain's release drops only its lease; the survivor keeps the host tuned."""
    before = snapshot(fake_host_tree / "sys")
    call(A, "vm-a", "prepare", "begin")
    call(B, "vm-b", "prepare", "begin")
    assert call(A, "vm-a", "release", "end", "crashed") == 0
    assert_tuned(fake_host_tree / "sys")
    assert list(state(fake_host_tree)["leases"]) == [UUID_B]
    call(B, "vm-b", "release", "end", "shutdown")
    assert snapshot(fake_host_tree / "sys") == before


def test_release_of_an_unknown_domain_does_nothing(fake_host_tree):
    """Releasing a domain without a lease changes neither the host nor the leases."""
    call(A, "vm-a", "prepare", "begin")
    tuned, leases_before = snapshot(fake_host_tree / "sys"), state(fake_host_tree)
    assert call(B, "vm-b", "release", "end", "-") == 0
    assert snapshot(fake_host_tree / "sys") == tuned
    assert state(fake_host_tree) == leases_before


def test_an_unreadable_release_drops_only_a_lease_kept_by_name(fake_host_tree, capsys):
    """A release whose XML cannot be parsed cannot tell which domain it is: a lease kept by UUID
    stays, with a warning (the reaper drops it once its domain is gone); a lease kept by name (a
    domain without a UUID) is dropped."""
    before = snapshot(fake_host_tree / "sys")
    call(A, "vm-a", "prepare", "begin")
    nameless = domain("vm-c", UUID_A, pins="3").replace(f"<uuid>{UUID_A}</uuid>", "")
    call(nameless, "vm-c", "prepare", "begin")
    assert set(state(fake_host_tree)["leases"]) == {UUID_A, "name:vm-c"}
    capsys.readouterr()
    broken = '<domain><metadata xmlns:v="https://vmtune.dev/xmlns/1">'
    assert call(broken, "vm-a", "release", "end") == 0
    assert list(state(fake_host_tree)["leases"]) == [UUID_A, "name:vm-c"]
    assert f"the lease of vm-a under UUID {UUID_A} is kept" in capsys.readouterr().err
    assert call(broken, "vm-c", "release", "end") == 0
    assert list(state(fake_host_tree)["leases"]) == [UUID_A]
    assert call(A, "vm-a", "release", "end") == 0
    assert snapshot(fake_host_tree / "sys") == before


def test_reconnect_recreates_a_lost_lease_and_never_fails(fake_host_tree, capsys):
    """reconnect begin makes sure the lease exists, is idempotent, and exits 0 even on conflict or error."""
    assert call(A, "vm-a", "reconnect", "begin") == 0
    assert list(state(fake_host_tree)["leases"]) == [UUID_A]
    assert_tuned(fake_host_tree / "sys")
    first = state(fake_host_tree)
    assert call(A, "vm-a", "reconnect", "begin") == 0
    assert state(fake_host_tree)["baseline"] == first["baseline"]
    clash = domain("vm-c", "33333333-3333-3333-3333-333333333333", pins="2")
    assert call(clash, "vm-c", "reconnect", "begin") == 0  # already running: warn, keep its lease
    assert "vm-a" in capsys.readouterr().err
    assert len(state(fake_host_tree)["leases"]) == 2
    shutil.rmtree(fake_host_tree / "state")
    (fake_host_tree / "state").write_text("not a directory")
    assert call(A, "vm-a", "reconnect", "begin") == 0
    assert capsys.readouterr().out == ""


def test_reconnect_with_the_lease_in_place_keeps_the_baseline(fake_host_tree):
    """A libvirtd restart (reconnect) of running domains changes nothing; the later release restores."""
    before = snapshot(fake_host_tree / "sys")
    call(A, "vm-a", "prepare", "begin")
    saved = state(fake_host_tree)
    assert call(A, "vm-a", "reconnect", "begin") == 0
    assert state(fake_host_tree)["baseline"] == saved["baseline"]
    call(A, "vm-a", "release", "end", "shutdown")
    assert snapshot(fake_host_tree / "sys") == before


# -- conflicts ----------------------------------------------------------------------------------

def test_overlapping_pins_refuse_the_start(fake_host_tree, capsys):
    """vCPU pins overlapping another lease: exit 1, one stderr line naming the other domain and CPUs."""
    call(domain("vm-a", UUID_A, pins="2-3"), "vm-a", "prepare", "begin")
    capsys.readouterr()
    rc = call(domain("vm-b", UUID_B, pins="1,3"), "vm-b", "prepare", "begin")
    out = capsys.readouterr()
    assert rc == 1
    assert out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 1, out.err
    assert "vm-a" in lines[0] and "CPUs 3" in lines[0] and "vm-b" in lines[0]
    assert list(state(fake_host_tree)["leases"]) == [UUID_A]


def test_warn_mode_lets_overlapping_pins_start(fake_host_tree, capsys):
    """on_conflict = "warn": the start goes ahead with a warning naming the other domain."""
    (fake_host_tree / "vmtune.toml").write_text('[hook]\non_conflict = "warn"\n')
    call(domain("vm-a", UUID_A, pins="2-3"), "vm-a", "prepare", "begin")
    assert call(domain("vm-b", UUID_B, pins="3"), "vm-b", "prepare", "begin") == 0
    assert "vm-a" in capsys.readouterr().err
    assert set(state(fake_host_tree)["leases"]) == {UUID_A, UUID_B}


def test_pins_that_do_not_overlap_start(fake_host_tree, capsys):
    """Disjoint pins are no conflict; a prepare again for the same domain is no conflict with itself."""
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert call(B, "vm-b", "prepare", "begin") == 0
    assert len(state(fake_host_tree)["leases"]) == 2


# -- untagged, other ops, dry run ---------------------------------------------------------------

@pytest.mark.parametrize("profile", [None, "balanced", "throughput"])
def test_untagged_or_non_latency_domains_change_nothing(fake_host_tree, capsys, profile):
    """No tag, or a profile without host tuning: exit 0, no output, no state, host untouched."""
    before = snapshot(fake_host_tree / "sys")
    xml = domain("vm-x", UUID_A, profile=profile)
    for op, sub in [("prepare", "begin"), ("start", "begin"), ("reconnect", "begin"), ("release", "end")]:
        assert call(xml, "vm-x", op, sub) == 0
    assert snapshot(fake_host_tree / "sys") == before
    assert not (fake_host_tree / "state" / "state.json").exists()
    assert capsys.readouterr().out == ""


def test_untagged_is_silent_with_a_broken_config_and_state_dir(fake_host_tree, capsys, monkeypatch):
    """Untagged domain, any op, config malformed and state dir impossible: exit 0, nothing printed."""
    (fake_host_tree / "vmtune.toml").write_text("[hook\n")
    (fake_host_tree / "blocker").write_text("")
    monkeypatch.setenv("VMTUNE_STATE_DIR", str(fake_host_tree / "blocker" / "state"))
    xml = domain("vm-x", UUID_A, profile=None)
    for op, sub in [("prepare", "begin"), ("reconnect", "begin"), ("release", "end"), ("migrate", "begin")]:
        assert call(xml, "vm-x", op, sub) == 0
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("op,sub,extra", [
    ("start", "begin", "-"), ("started", "begin", "-"), ("stopped", "end", "-"), ("migrate", "begin", "-"),
    ("restore", "begin", "-"), ("attach", "begin", "-"), ("prepare", "end", "-")])
def test_other_ops_do_nothing(fake_host_tree, capsys, op, sub, extra):
    """Ops the hook does not handle exit 0 and print nothing, for tagged domains too."""
    before = snapshot(fake_host_tree / "sys")
    assert call(A, "vm-a", op, sub, extra) == 0
    assert snapshot(fake_host_tree / "sys") == before
    assert not (fake_host_tree / "state").exists()
    assert capsys.readouterr() == ("", "")


def test_untagged_error_is_logged_and_exits_0(fake_host_tree, capsys):
    """Malformed XML that merely mentions the namespace: log it, exit 0 (we cannot tell it is ours)."""
    rc = call('<domain><!-- https://vmtune.dev/xmlns/1 -->', "vm-x", "prepare", "begin")
    out = capsys.readouterr()
    assert rc == 0 and out.out == "" and "vm-x" in out.err


def test_dry_run_changes_nothing(fake_host_tree, capsys, monkeypatch):
    """VMTUNE_DRY_RUN=1 logs what it would change and writes neither sysfs nor the state dir."""
    monkeypatch.setenv("VMTUNE_DRY_RUN", "1")
    before = snapshot(fake_host_tree / "sys")
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert call(A, "vm-a", "release", "end") == 0
    out = capsys.readouterr()
    assert snapshot(fake_host_tree / "sys") == before
    assert not (fake_host_tree / "state").exists()
    assert "would set" in out.err and out.out == ""


def test_user_profile_with_host_tuning_is_latency(fake_host_tree):
    """A user profile that asks for host tuning takes a lease; the built-in realtime does too."""
    (fake_host_tree / "profiles" / "fast.toml").write_text('inherit = "balanced"\nhost_tuning = true\n')
    call(domain("vm-a", UUID_A, profile="fast"), "vm-a", "prepare", "begin")
    call(domain("vm-b", UUID_B, profile="realtime", pins="3"), "vm-b", "prepare", "begin")
    assert set(state(fake_host_tree)["leases"]) == {UUID_A, UUID_B}


def test_ksm_keep_and_latency_threshold_from_config(fake_host_tree):
    """[hook] ksm = "keep" leaves KSM running; max_cstate_latency_us = 1 also disables C1 and C1E."""
    (fake_host_tree / "vmtune.toml").write_text('[hook]\nksm = "keep"\nmax_cstate_latency_us = 1\n')
    call(A, "vm-a", "prepare", "begin")
    sysfs = fake_host_tree / "sys"
    assert value(sysfs, "kernel/mm/ksm/run") == "1"
    assert [value(sysfs, f"{CPU}/cpu0/cpuidle/state{k}/disable") for k in range(4)] == ["0", "1", "1", "1"]


# -- drift, order, failure to record ------------------------------------------------------------

def test_drifted_value_is_left_alone_with_a_warning(fake_host_tree, capsys):
    """Someone changed cpu1's governor while tuned: it is left alone (with a warning), the rest restored."""
    sysfs = fake_host_tree / "sys"
    before = snapshot(sysfs)
    call(A, "vm-a", "prepare", "begin")
    gov1 = f"{CPU}/cpu1/cpufreq/scaling_governor"
    (sysfs / gov1).write_text("schedutil\n")
    saved = [Record(parse_key("knob", r["path"]), r["before"], r["after"]) for r in state(fake_host_tree)["baseline"]]
    assert [d[0].text for d in engine.verify(Roots(sysfs=str(sysfs)), saved)] == [gov1]
    capsys.readouterr()
    call(A, "vm-a", "release", "end")
    err = capsys.readouterr().err
    assert gov1 in err and "left alone" in err
    after = snapshot(sysfs)
    assert after.pop(gov1) == "schedutil"
    before.pop(gov1)
    assert after == before


def test_restore_sets_the_governor_before_the_epp(fake_host_tree, monkeypatch):
    """Apply writes EPP then governor; restore writes governor then EPP (intel_pstate's rule)."""
    sysfs = str(fake_host_tree / "sys")
    writes: list[str] = []
    real = base.write_file
    monkeypatch.setattr(base, "write_file", lambda root, path, v: (writes.append(path), real(root, path, v)))
    saved = engine.apply(Roots(sysfs=sysfs), tuning.knobs(sysfs))
    cpu0 = [w.rsplit("/", 1)[1] for w in writes if "/cpu0/cpufreq/" in w]
    assert cpu0 == ["energy_performance_preference", "scaling_governor"]
    writes.clear()
    assert engine.restore(Roots(sysfs=sysfs), saved) == []
    cpu0 = [w.rsplit("/", 1)[1] for w in writes if "/cpu0/cpufreq/" in w]
    assert cpu0 == ["scaling_governor", "energy_performance_preference"]


def test_a_lease_that_cannot_be_recorded_undoes_the_tuning(fake_host_tree, capsys, monkeypatch):
    """If the state file cannot be written, the host is restored and the start refused."""
    before = snapshot(fake_host_tree / "sys")

    def fail(self, state):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(StateDir, "commit", fail)
    assert call(A, "vm-a", "prepare", "begin") == 1
    assert snapshot(fake_host_tree / "sys") == before
    assert "No space left" in capsys.readouterr().err


def test_state_file_is_replaced_whole(fake_host_tree):
    """After each call the state file is valid JSON and no temporary file is left behind."""
    call(A, "vm-a", "prepare", "begin")
    call(B, "vm-b", "prepare", "begin")
    assert sorted(p.name for p in (fake_host_tree / "state").iterdir()) == ["baseline.json", "lock", "state.json"]
    assert state(fake_host_tree)["version"] == 2
    assert json.loads((fake_host_tree / "state" / "baseline.json").read_text()) == state(fake_host_tree)  # the completed state


def test_a_damaged_state_fails_closed(fake_host_tree, capsys):
    """An unreadable state file is never replaced by an empty one: a latency prepare is refused with
    one line naming the file and what to do, a release does nothing, and the file stays as it is."""
    (fake_host_tree / "state").mkdir()
    (fake_host_tree / "state" / "state.json").write_text("{nope")
    before = snapshot(fake_host_tree / "sys")
    assert call(A, "vm-a", "prepare", "begin") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "state.json: not JSON" in err[0] and "vmtune hook reap" in err[0]
    assert call(A, "vm-a", "release", "end") == 0
    assert (fake_host_tree / "state" / "state.json").read_text() == "{nope"
    assert snapshot(fake_host_tree / "sys") == before


# -- two processes at once ----------------------------------------------------------------------

def _racer(barrier, xml: str, name: str, queue) -> None:
    barrier.wait()
    queue.put(hook.main([name, "prepare", "begin", "-"], xml.encode()))


def test_racing_prepares_keep_both_leases_and_one_baseline(fake_host_tree):
    """Two prepares in two processes at once: both leases recorded, the baseline saved once (the original)."""
    ctx = multiprocessing.get_context("fork")
    sysfs = fake_host_tree / "sys"
    before = snapshot(sysfs)
    for round_ in range(15):
        xmls = [domain(f"vm-{round_}-{i}", f"{round_:08d}-0000-0000-0000-{i:012d}", pins=str(i)) for i in (0, 1)]
        barrier, queue = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_racer, args=(barrier, x, f"vm-{round_}-{i}", queue)) for i, x in enumerate(xmls)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        assert sorted(queue.get(timeout=5) for _ in procs) == [0, 0]
        got = state(fake_host_tree)
        assert len(got["leases"]) == 2, got
        assert all(rec["before"] != "performance" for rec in got["baseline"]), got["baseline"]
        for i, x in enumerate(xmls):
            call(x, f"vm-{round_}-{i}", "release", "end")
        assert snapshot(sysfs) == before


# -- the executable hook ------------------------------------------------------------------------

def run_hook(xml: str, *args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, str(HOOK), *args], input=xml.encode(), capture_output=True,
                          env=environ, timeout=60, check=False)


def test_hook_script_tunes_and_restores(fake_host_tree):
    """hooks/qemu as a real process: prepare takes the lease and tunes, release restores; stdout stays empty."""
    before = snapshot(fake_host_tree / "sys")
    p = run_hook(A, "vm-a", "prepare", "begin", "-")
    assert (p.returncode, p.stdout) == (0, b""), p.stderr
    assert list(state(fake_host_tree)["leases"]) == [UUID_A]
    assert_tuned(fake_host_tree / "sys")
    p = run_hook(A, "vm-a", "release", "end", "destroyed")
    assert (p.returncode, p.stdout) == (0, b""), p.stderr
    assert snapshot(fake_host_tree / "sys") == before


def test_hook_script_refuses_a_conflict(fake_host_tree):
    """hooks/qemu exits 1 with one stderr line for overlapping pins."""
    run_hook(A, "vm-a", "prepare", "begin", "-")
    p = run_hook(domain("vm-b", UUID_B, pins="2"), "vm-b", "prepare", "begin", "-")
    assert p.returncode == 1 and p.stdout == b""
    assert len(p.stderr.decode().splitlines()) == 1 and "vm-a" in p.stderr.decode()


def test_hook_script_untagged_is_silent_even_with_an_unwritable_state_dir(fake_host_tree, tmp_path):
    """Untagged domain, state dir impossible: exit 0, no stdout, no stderr, no vmtune import."""
    bogus = tmp_path / "file"
    bogus.write_text("")
    before = snapshot(fake_host_tree / "sys")
    xml = domain("vm-x", UUID_A, profile=None)
    for args in (["prepare", "begin", "-"], ["release", "end", "-"], ["migrate", "begin", "-"]):
        p = run_hook(xml, "vm-x", *args, env_extra={"VMTUNE_STATE_DIR": str(bogus / "state")})
        assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    assert snapshot(fake_host_tree / "sys") == before


def test_hook_script_untagged_imports_neither_vmtune_nor_lxml(fake_host_tree):
    """The untagged fast path decides on the bytes before importing vmtune (and so lxml)."""
    p = subprocess.run([sys.executable, "-X", "importtime", str(HOOK), "vm-x", "prepare", "begin", "-"],
                       input=domain("vm-x", UUID_A, profile=None).encode(), capture_output=True, timeout=60,
                       check=False)
    assert p.returncode == 0 and p.stdout == b""
    imported = [line.rsplit("|", 1)[-1].strip() for line in p.stderr.decode().splitlines()]
    assert not [m for m in imported if m.startswith(("vmtune", "lxml"))]


def test_hook_script_tagged_domain_on_an_ignored_op_imports_nothing(fake_host_tree):
    """A tagged domain on an op the hook ignores exits before reading stdin or importing vmtune."""
    for op, sub in [("start", "begin"), ("stopped", "end"), ("prepare", "end"), ("started", "end")]:
        p = subprocess.run([sys.executable, "-X", "importtime", str(HOOK), "vm-a", op, sub, "-"],
                           input=A.encode(), capture_output=True, timeout=60, check=False)
        assert p.returncode == 0 and p.stdout == b""
        imported = [line.rsplit("|", 1)[-1].strip() for line in p.stderr.decode().splitlines()]
        assert not [m for m in imported if m.startswith(("vmtune", "lxml"))], (op, sub)
    assert not (fake_host_tree / "state").exists()


def test_hook_script_ops_are_the_hooks_handled_ops():
    """The ops list in hooks/qemu is vmtune.hook.HANDLED_OPS (install writes it there)."""
    import runpy

    assert runpy.run_path(str(HOOK), run_name="not_main")["OPS"] == hook.HANDLED_OPS
    assert set(hook.HANDLED_OPS) == {("prepare", "begin"), ("release", "end"), ("reconnect", "begin"),
                                     ("started", "begin"), ("migrate", "begin"), ("restore", "begin")}


def test_repo_hook_is_the_installed_script():
    """hooks/qemu is install.script() with a portable #! line."""
    assert HOOK.read_text() == install.script("/usr/bin/env python3")
    assert os.access(HOOK, os.X_OK)


# -- vmtune hook install / uninstall ------------------------------------------------------------

def test_cli_install_and_uninstall(tmp_path, capsys):
    """install writes qemu.d/50-vmtune (executable, #! sys.executable), keeps DIR/qemu; uninstall removes it."""
    hooks_dir = tmp_path / "hooks"
    hooks_dir.mkdir()
    (hooks_dir / "qemu").write_text("#!/bin/sh\necho theirs\n")
    assert cli.main(["hook", "install", "--hooks-dir", str(hooks_dir), "--unit-dir", str(tmp_path / "units")]) == 0
    assert "restart" in capsys.readouterr().out
    target = hooks_dir / "qemu.d" / "50-vmtune"
    assert target.read_text().splitlines()[0] == f"#!{sys.executable}"
    assert os.access(target, os.X_OK)
    assert (hooks_dir / "qemu").read_text() == "#!/bin/sh\necho theirs\n"
    p = subprocess.run([str(target), "vm-x", "prepare", "begin", "-"], input=b"<domain/>", capture_output=True,
                       check=False)
    assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    assert cli.main(["hook", "install", "--hooks-dir", str(hooks_dir), "--unit-dir", str(tmp_path / "units")]) == 0  # again: replaces its own
    assert cli.main(["hook", "uninstall", "--hooks-dir", str(hooks_dir), "--unit-dir", str(tmp_path / "units")]) == 0
    assert not target.exists()
    assert (hooks_dir / "qemu").exists()
    assert cli.main(["hook", "uninstall", "--hooks-dir", str(hooks_dir), "--unit-dir", str(tmp_path / "units")]) == 0
    assert "not installed" in capsys.readouterr().out


def test_cli_install_never_overwrites_a_foreign_file(tmp_path, capsys):
    """A 50-vmtune that is not vmtune's is neither overwritten nor removed (exit 1)."""
    target = tmp_path / "qemu.d" / "50-vmtune"
    target.parent.mkdir(parents=True)
    target.write_text("#!/bin/sh\n")
    assert cli.main(["hook", "install", "--hooks-dir", str(tmp_path), "--unit-dir", str(tmp_path / "units")]) == 1
    assert cli.main(["hook", "uninstall", "--hooks-dir", str(tmp_path), "--unit-dir", str(tmp_path / "units")]) == 1
    assert target.read_text() == "#!/bin/sh\n"
    assert "not vmtune's hook" in capsys.readouterr().err


# -- a real cpuidle state -----------------------------------------------------------------------

def _real_cpuidle_state() -> str | None:
    for state_dir in sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpuidle/state[1-9]*")):
        if (state_dir / "disable").exists():
            return str(state_dir.relative_to("/sys"))
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
@pytest.mark.skipif(_real_cpuidle_state() is None, reason="no cpuidle states on this machine")
def test_real_cpuidle_state_is_disabled_and_restored():
    """On this machine: apply disables a real cpuidle state, restore puts back its value."""
    rel = _real_cpuidle_state() + "/disable"
    key, roots = parse_key("knob", rel), Roots()
    original = engine.live(key, roots)
    want = "0" if original == "1" else "1"
    saved = engine.apply(roots, [engine.Knob(key, want)])
    try:
        assert engine.live(key, roots) == want
        assert saved == [Record(key, original, want)]
    finally:
        assert engine.restore(roots, saved) == []
    assert engine.live(key, roots) == original


# -- HOOKS_DIR/vmtune.env: libvirtd scrubs the hook's environment -------------------------------

def test_installed_hook_reads_vmtune_env_beside_qemu_d(fake_host_tree, tmp_path):
    """Run as libvirt does (env scrubbed to PATH/HOME/LC_ALL), the installed hook takes VMTUNE_*
    from HOOKS_DIR/vmtune.env; other names there are ignored."""
    hooks = tmp_path / "hooks"
    script = install.install(str(hooks))
    (hooks / "vmtune.env").write_text(
        "# test host\n"
        f"VMTUNE_SYSFS={fake_host_tree / 'sys'}\n"
        f"VMTUNE_STATE_DIR='{fake_host_tree / 'state'}'\n"
        f"VMTUNE_CONFIG={fake_host_tree / 'vmtune.toml'}\n"
        "VMTUNE_SYSLOG=0\n"
        "PYTHONPATH=/nonexistent\n"
    )
    scrubbed = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/root", "LC_ALL": "C"}
    p = subprocess.run([str(script), "vm-a", "prepare", "begin", "-"], input=A.encode(), capture_output=True,
                       env=scrubbed, timeout=60, check=False)
    assert (p.returncode, p.stdout) == (0, b""), p.stderr
    assert list(state(fake_host_tree)["leases"]) == [UUID_A]
    assert_tuned(fake_host_tree / "sys")
    p = subprocess.run([str(script), "vm-a", "release", "end", "-"], input=A.encode(), capture_output=True,
                       env=scrubbed, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    assert state(fake_host_tree)["leases"] == {}


def test_env_file_only_applies_to_qemu_d_and_never_overrides(tmp_path, monkeypatch):
    (tmp_path / "vmtune.env").write_text("VMTUNE_SYSFS=/from-file\nVMTUNE_STATE_DIR=/file-state\nOTHER=1\n")
    assert hook.env_file(str(tmp_path / "qemu.d" / "50-vmtune")) == str(tmp_path / "vmtune.env")
    assert hook.env_file(str(tmp_path / "qemu")) is None
    monkeypatch.setenv("VMTUNE_SYSFS", "/from-env")
    monkeypatch.delenv("VMTUNE_STATE_DIR", raising=False)
    monkeypatch.delenv("OTHER", raising=False)
    assert hook.load_env_file(str(tmp_path / "vmtune.env"), os.environ) == {"VMTUNE_STATE_DIR": "/file-state"}
    assert os.environ["VMTUNE_SYSFS"] == "/from-env" and "OTHER" not in os.environ
