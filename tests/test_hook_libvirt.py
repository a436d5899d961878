"""The hook under the real libvirtd: installed with ``vmtune hook install``, run by the daemon.

libvirtd runs hooks with a scrubbed environment (PATH, HOME, LC_ALL=C and little else), so the
``VMTUNE_*`` variables it is started with never reach the hook: the test points the hook at its
fake sysfs tree and state dir through ``HOOKS_DIR/vmtune.env`` (see vmtune/hook/__init__.py), and
checks that the daemon really scrubs (if a libvirt release stops scrubbing, the env file is still
read, and ``test_libvirtd_scrubs_the_hook_environment`` says so).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

import vmtune
from fixtures.libvirt_env import minimal_domain, started, virsh
from fixtures.hook import CPU, ORIGINAL_GOVERNOR, build_sysfs, snapshot, value
from fixtures.wait import wait_until
from vmtune import cli, cpuset
from vmtune.install import hookfile as install

HOOKS_DIR = Path("/etc/libvirt/hooks")
ENV_FILE = HOOKS_DIR / "vmtune.env"
PIDFILE = Path("/run/libvirtd.pid")
URI = "qemu:///system"
START = Path(__file__).resolve().parents[1] / "scripts" / "libvirtd-start"  # libvirtd -d, until it answers


def _libvirtd_pid() -> int | None:
    try:
        pid = int(PIDFILE.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    return pid if comm == "libvirtd" else None


def restart_libvirtd(extra_env: dict[str, str]) -> None:
    """Stop the running libvirtd (by its pid file), start ``libvirtd -d`` with ``extra_env`` added to
    an environment without VMTUNE_* variables, wait until it answers (scripts/libvirtd-start)."""
    pid = _libvirtd_pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), 30, f"libvirtd (pid {pid}) to stop")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VMTUNE_")}
    environ.update(extra_env)
    subprocess.run([str(START)], env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   check=True, timeout=90)  # until it answers (scripts/libvirtd-start)


@pytest.fixture
def hooked(libvirtd, tmp_path):
    """vmtune's hook installed in /etc/libvirt/hooks and seen by a restarted libvirtd, pointed at a
    fake sysfs tree and a temporary state dir; afterwards the hook is gone and libvirtd restarted
    with its normal environment."""
    hook_file = install.hook_path(str(HOOKS_DIR))
    if hook_file.exists() or ENV_FILE.exists():
        pytest.skip(f"{hook_file} or {ENV_FILE} already exists; not touching a real installation")
    sysfs = build_sysfs(tmp_path / "sys", cpus=2, offline=())
    pool = sysfs / "devices/system/node/node0/hugepages/hugepages-2048kB"  # enough free: no top-up
    pool.mkdir(parents=True)
    for leaf in ("nr_hugepages", "free_hugepages"):
        (pool / leaf).write_text("1024\n")
    config = tmp_path / "vmtune.toml"
    # The daemon is shared: while the hook is installed it also sees other sessions' tagged domains.
    # "warn" keeps it from refusing theirs (or theirs from refusing this test's) over shared pins.
    config.write_text('[hook]\non_conflict = "warn"\n')
    (tmp_path / "profiles").mkdir()
    (tmp_path / "probe").mkdir()
    settings = {
        "VMTUNE_SYSFS": str(sysfs),
        "VMTUNE_STATE_DIR": str(tmp_path / "state"),
        "VMTUNE_CONFIG": str(config),
        "VMTUNE_PROFILES": str(tmp_path / "profiles"),
        "VMTUNE_SYSLOG": "0",
        "VMTUNE_LIBVIRT_RUNDIR": "/run/libvirt/qemu",  # the daemon's own (the default is beside the fake sysfs)
    }
    try:
        assert cli.main(["hook", "install", "--hooks-dir", str(HOOKS_DIR), "--no-timer"]) == 0
        # A probe in qemu.d records the environment libvirtd gives its hooks.
        probe = hook_file.parent / "49-vmtune-test-env-probe"
        probe.write_text(f"#!/bin/sh\nenv > {tmp_path / 'probe'}/\"$1-$2-$3\".env\ncat >/dev/null\n")
        probe.chmod(0o755)
        ENV_FILE.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        restart_libvirtd(settings)  # as asked: the daemon gets them too (they do not reach the hook)
        yield {"sysfs": sysfs, "state": tmp_path / "state" / "state.json", "probe": tmp_path / "probe",
               "settings": settings}
    finally:
        try:
            (hook_file.parent / "49-vmtune-test-env-probe").unlink(missing_ok=True)
            ENV_FILE.unlink(missing_ok=True)
            cli.main(["hook", "uninstall", "--hooks-dir", str(HOOKS_DIR), "--no-timer"])
            try:
                hook_file.parent.rmdir()  # only if empty: qemu.d was created for this test
            except OSError:
                pass
        finally:
            restart_libvirtd({})


def _leases(state: Path) -> dict:
    return json.loads(state.read_text())["leases"] if state.exists() else {}


def test_daemon_runs_the_hook_for_tagged_domains_only(hooked, capsys, monkeypatch):
    """A latency-tagged and an untagged domain run together: one lease (the tagged one), the fake host
    tuned; after both stop, no leases and every fake sysfs value as it was.

    Tagged domains that other sessions start on the same daemon meanwhile get leases too (the hook
    is the daemon's); the checks are about this test's two domains, and the final restore is only
    checked when no such foreign lease is left."""
    sysfs, state = hooked["sysfs"], hooked["state"]
    before = snapshot(sysfs)
    tagged_xml = vmtune.rewrite(minimal_domain(), vmtune.Host.probe(), "latency").xml
    assert "https://vmtune.dev/xmlns/1" in tagged_xml
    with started(tagged_xml, hold=60) as tagged, started(minimal_domain(), hold=60) as plain:
        assert virsh("domstate", tagged.name).strip() == "running"
        assert virsh("domstate", plain.name).strip() == "running"
        leases = _leases(state)
        ours = {key: lease for key, lease in leases.items() if lease["name"] in (tagged.name, plain.name)}
        assert [lease["name"] for lease in ours.values()] == [tagged.name], leases
        assert list(ours) == [virsh("domuuid", tagged.name).strip()]
        # started begin recorded its QEMU (issue 19): the pid libvirt keeps, and that process's start time
        pid = int(Path(f"/run/libvirt/qemu/{tagged.name}.pid").read_text())
        wait_until(lambda: "qemu" in _leases(state).get(list(ours)[0], {}), 20,
                   lambda: f"the lease to name its QEMU: {_leases(state)}")
        qemu = _leases(state)[list(ours)[0]]["qemu"]
        start = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
        assert qemu == {"pid": pid, "start": start}
        if "<hugepages>" in tagged_xml:  # the rewriter backs it with 2M pages on node 0 when this host has them
            assert next(iter(ours.values()))["hugepages"] == {"0:2048": {"need": 64, "added": 0}}
        for cpu in (0, 1):
            assert value(sysfs, f"{CPU}/cpu{cpu}/cpufreq/scaling_governor") == "performance"
        assert value(sysfs, "kernel/mm/ksm/run") == "0"
        assert json.loads(state.read_text())["baseline"]
        _check_live_map(hooked, monkeypatch, capsys, tagged.name, plain.name)
    wait_until(lambda: tagged.name not in [lease["name"] for lease in _leases(state).values()], 20,
               lambda: f"the lease of {tagged.name} to go: {_leases(state)}")
    foreign = _leases(state)
    if foreign:
        pytest.skip(f"other sessions' tagged domains hold leases here: {sorted(v['name'] for v in foreign.values())}")
    assert json.loads(state.read_text())["baseline"] is None
    assert value(sysfs, f"{CPU}/cpu0/cpufreq/scaling_governor") == ORIGINAL_GOVERNOR
    assert snapshot(sysfs) == before


def _check_live_map(hooked, monkeypatch, capsys, tagged: str, plain: str) -> None:
    """``vmtune map`` live, beside the real daemon: both domains running, the tagged one's vCPU on
    the CPU its pin names, held for itself, and the hook's lease for it, not stale."""
    for key in ("VMTUNE_SYSFS", "VMTUNE_STATE_DIR", "VMTUNE_LIBVIRT_RUNDIR"):
        monkeypatch.setenv(key, hooked["settings"][key])
    capsys.readouterr()
    assert cli.main(["map", "--json", "-c", URI]) == 0
    data = json.loads(capsys.readouterr().out)
    domains = {d["name"]: d for d in data["domains"]}
    assert domains[tagged]["active"] and domains[plain]["active"] and domains[tagged]["profile"] == "latency"
    cpus = {c["id"]: c for n in data["nodes"] for core in n["cores"] for c in core["threads"]}
    pins = [t for t in domains[tagged]["threads"] if t["thread"] == "vcpu"]
    for pin in pins:
        (cpu,) = cpuset.parse(pin["cpus"])
        assert cpus[cpu]["role"] == "dedicated" and cpus[cpu]["holder"] == {
            "domain": tagged, "index": list(domains).index(tagged), "thread": "vcpu", "id": pin["id"]}
    (lease,) = [x for x in data["hook"]["leases"] if x["name"] == tagged]
    assert not lease["stale"] and lease["cpus"] == domains[tagged]["dedicated"]


def test_libvirtd_scrubs_the_hook_environment(hooked):
    """What the daemon passes to hooks: the VMTUNE_* it was started with do not arrive (hence
    HOOKS_DIR/vmtune.env)."""
    with started(minimal_domain(), hold=30) as g:
        assert virsh("domstate", g.name).strip() == "running"
        seen = hooked["probe"] / f"{g.name}-prepare-begin.env"
        wait_until(seen.exists, 20, f"{seen} to exist")
        environ = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    daemon = Path(f"/proc/{_libvirtd_pid()}/environ").read_bytes().split(b"\0")
    assert f"VMTUNE_SYSFS={hooked['settings']['VMTUNE_SYSFS']}".encode() in daemon  # the daemon has it
    assert not [k for k in environ if k.startswith("VMTUNE_")], environ  # the hook does not
    assert "PATH" in environ
