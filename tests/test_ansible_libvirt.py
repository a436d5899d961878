"""The vmtune.kvm collection for real: ansible-playbook -i localhost, -c local against this machine's libvirtd
(qemu:///system, TCG domains), as root. Run under the shared lock (flock /run/vmtune-dev-libvirt.lock).

The first run of the latency playbook tunes, the second reports changed=0; check mode changes nothing
(virsh dumpxml is identical); a domain that does not fit fails its task with vmtune's one line and nothing
is defined; the role installs vmtune from the wheel and restarts libvirtd only when the hook changed.
The modules run this test venv's vmtune with a temporary config and originals folder. The daemon is
shared: only this test's vmtune-test-* domains are touched, and a test that needs a free CPU for a
dedicated vCPU (or a clean plan to start from) skips when other sessions' domains hold them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from fixtures.ansible_env import COLLECTION, playbook, tasks
from fixtures.libvirt_env import PREFIX, URI, define, minimal_domain, undefine, virsh

import vmtune.config
from vmtune import cli, cpuset
from vmtune.install import reaper

VMTUNE = Path(sys.executable).parent / "vmtune"
PIDFILE = Path("/run/libvirtd.pid")
LATENCY = COLLECTION / "playbooks" / "latency.yml"


@pytest.fixture
def ansible_defaults(libvirtd, tmp_path, tmp_path_factory, monkeypatch):
    """The module defaults (this venv's vmtune, an empty config, originals in tmp) and the environment."""
    try:
        import libvirt  # noqa: F401
    except ImportError:
        pytest.skip("libvirt-python is not installed (scripts/bootstrap --test as root installs it)")
    empty = tmp_path_factory.mktemp("no-profiles")
    config = tmp_path / "vmtune.toml"
    config.write_text("")
    # the same for the in-process CLI calls below
    monkeypatch.delenv("VMTUNE_CONFIG", raising=False)
    monkeypatch.setattr(vmtune.config, "DEFAULT_PATH", str(config))
    monkeypatch.setenv("VMTUNE_PROFILES", str(empty))
    monkeypatch.setenv("VMTUNE_ORIGINALS_DIR", str(tmp_path / "originals"))
    return {"defaults": {"executable": str(VMTUNE), "config": str(config), "originals_dir": str(tmp_path / "originals")},
            "env": {"VMTUNE_PROFILES": str(empty)}, "originals": tmp_path / "originals"}


@pytest.fixture
def names():
    """Unique vmtune-test-ansible-* names sharing one prefix; every one is undefined afterwards."""
    prefix = f"{PREFIX}ansible-{uuid.uuid4().hex[:8]}-"
    made: list[str] = []

    def new(tag: str) -> str:
        made.append(prefix + tag)
        return made[-1]

    new.prefix = prefix
    yield new
    for name in made:
        undefine(name)


def _plan() -> dict:
    from vmtune.placement.audit import audit
    from vmtune.live import connect, domains, hostview

    with connect.connection(URI) as conn:
        host_, every = hostview.of(conn, URI).host, domains.every(conn)  # the host the CLI's plan uses
    return audit(host_, [(d.xml, d.state) for d in every]).to_dict()


def free_or_skip(count: int = 1, clean: bool = False) -> None:
    """Skip unless ``count`` CPUs are free for dedicated vCPUs (and, with ``clean``, the plan has no problem):
    other sessions' domains share this libvirtd."""
    plan = _plan()
    free = sum(len(cpuset.parse(n["free_dedicated"])) for n in plan["nodes"])
    if free < count:
        holders = [r["name"] for r in plan["domains"] if r["dedicated"]]
        pytest.skip(f"{free} CPU(s) free for dedicated vCPUs on this shared host; held by {holders}")
    if clean and plan["problems"]:
        pytest.skip(f"the shared host's plan has problems already (other sessions' domains): {plan['problems']}")


def inactive(name: str) -> str:
    return virsh("dumpxml", "--inactive", name)


def all_names() -> set[str]:
    return set(virsh("list", "--all", "--name").split())


def latency_vars(host: dict, names) -> dict:
    return {"vmtune_pattern": re.escape(names.prefix) + "tune", "vmtune_module_defaults": host["defaults"]}


# -- the latency playbook ----------------------------------------------------------------------------------
def test_playbook_tunes_then_changes_nothing(ansible_defaults, names, tmp_path):
    """Run 1 tags the matching (running) domain latency, defines its tuned XML and moves its threads now; run 2
    reports changed=0 and the XML stays byte for byte; a domain that does not match is not touched. Then
    state=reverted gives the XML from before run 1 back, and a second revert changes nothing."""
    free_or_skip(1, clean=True)
    tune, other = names("tune"), names("other")
    define(minimal_domain(), tune)
    # pinned to the reserved CPU 0, so that it floats over no dedicated CPU and the plan stays clean
    define(minimal_domain().replace("<vcpu>1</vcpu>", "<vcpu placement='static' cpuset='0'>1</vcpu>"), other)
    virsh("start", tune)
    before, other_before = inactive(tune), inactive(other)

    first = playbook(LATENCY, tmp_path, latency_vars(ansible_defaults, names), env=ansible_defaults["env"])
    assert first.rc == 0, first.out + first.err
    assert first.recap["changed"] == 1 and first.recap["failed"] == 0, first.out
    tuned = inactive(tune)
    assert 'profile="latency"' in tuned and "<vcpupin vcpu='0' cpuset=" in tuned
    assert inactive(other) == other_before
    (row,) = [r for r in _plan()["domains"] if r["name"] == tune]
    assert row["profile"] == "latency" and row["dedicated"] and row["state"] == "running"
    live_pin = virsh("vcpupin", tune, "--live").split()
    assert live_pin[-1] == row["dedicated"], live_pin  # moved now (--live), not at the next boot

    second = playbook(LATENCY, tmp_path, latency_vars(ansible_defaults, names), env=ansible_defaults["env"])
    assert second.rc == 0, second.out + second.err
    assert second.recap["changed"] == 0 and second.recap["failed"] == 0, second.out
    assert inactive(tune) == tuned

    step = {"module": "vmtune.kvm.domain", "args": {**ansible_defaults["defaults"], "name": tune, "state": "reverted"}}
    reverted, again = tasks([step, step], tmp_path, ansible_defaults["env"])
    assert reverted["changed"] and not reverted.get("failed"), reverted
    assert inactive(tune) == before
    assert not again["changed"] and not again.get("failed"), again


def test_check_mode_changes_nothing(ansible_defaults, names, tmp_path):
    """--check --diff: the domain task says it would change and shows the tuned XML, and virsh dumpxml (the
    definition and the running domain's) is identical afterwards; no original is kept."""
    free_or_skip(1, clean=True)
    tune = names("tune")
    define(minimal_domain(), tune)
    virsh("start", tune)
    before, live_before = inactive(tune), virsh("dumpxml", tune)
    run = playbook(LATENCY, tmp_path, latency_vars(ansible_defaults, names), check=True, diff=True, env=ansible_defaults["env"])
    assert run.rc == 0, run.out + run.err
    assert run.recap["changed"] == 1, run.out
    assert re.search(r"^\+\s*<vcpupin vcpu=.0. cpuset=", run.out, re.M), run.out
    assert inactive(tune) == before and virsh("dumpxml", tune) == live_before
    assert not ansible_defaults["originals"].exists() or not list(ansible_defaults["originals"].iterdir())


def test_domain_that_does_not_fit_fails_alone(ansible_defaults, names, tmp_path):
    """A latency domain with more vCPUs than the host has CPUs: its task fails with vmtune's one line (exit 3),
    its XML is unchanged, no domain appears or goes, and no original is kept."""
    big = names("tune-big")
    define(minimal_domain(vcpus=os.cpu_count() + 1), big)
    before, every = inactive(big), all_names()
    (result,) = tasks([{"module": "vmtune.kvm.domain",
                        "args": {**ansible_defaults["defaults"], "name": big, "profile": "latency"}}],
                      tmp_path, ansible_defaults["env"])
    assert result["failed"] and result["rc"] == 3, result
    assert result["msg"].startswith("vmtune: error: ") and "\n" not in result["msg"], result["msg"]
    assert big in result["msg"]
    assert inactive(big) == before and all_names() == every
    assert not ansible_defaults["originals"].exists() or not list(ansible_defaults["originals"].iterdir())


# -- what the modules read from the CLI --------------------------------------------------------------------
def _cli_json(capsys, *argv) -> tuple[int, dict]:
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv] + ["--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, json.loads(out)


def test_cli_dry_runs_for_the_modules(ansible_defaults, names, capsys):
    """apply --json carries libvirt's XML and the tuned one; untag --dry-run and revert --dry-run say what they
    would do and change nothing."""
    dom = names("cli")
    define(minimal_domain(), dom)
    rc, applied = _cli_json(capsys, "apply", dom, "--profile", "balanced")
    (row,) = applied["domains"]
    assert rc == 0 and row["defined"] and row["before"].startswith("<domain") and row["xml"].startswith("<domain")
    assert 'profile="balanced"' in row["xml"] and 'profile="balanced"' not in row["before"]
    now = inactive(dom)
    rc, untag = _cli_json(capsys, "untag", dom, "--dry-run")
    assert rc == 0 and untag["previous"] == "balanced" and untag["dry_run"] and inactive(dom) == now
    rc, found = _cli_json(capsys, "revert", dom, "--dry-run")
    assert rc == 0 and found["original"] and found["after"] and not found["reverted"]
    assert found["before"] == virsh("dumpxml", "--inactive", "--security-info", dom) and inactive(dom) == now
    rc, done = _cli_json(capsys, "revert", dom)
    assert rc == 0 and done["reverted"]
    rc, found = _cli_json(capsys, "revert", dom, "--dry-run")
    assert rc == 0 and not found["original"] and found["after"] is None


# -- the role ------------------------------------------------------------------------------------------------
def _libvirtd_pid() -> int | None:
    try:
        pid = int(PIDFILE.read_text().strip())
        return pid if Path(f"/proc/{pid}/comm").read_text().strip() == "libvirtd" else None
    except (OSError, ValueError):
        return None


def _role_book(tmp_path: Path, where: Path, wheel: Path, **over) -> Path:
    settings = {"vmtune_venv": str(where / "venv"), "vmtune_python": sys.executable, "vmtune_wheel": str(wheel),
                "vmtune_wheel_dir": str(where / "wheels"), "vmtune_link": str(where / "bin" / "vmtune"),
                "vmtune_config_path": str(where / "etc" / "vmtune.toml"), "vmtune_hooks_dir": str(where / "hooks"),
                "vmtune_unit_dir": str(where / "units"), "vmtune_cron_file": str(where / "cron.d" / "vmtune"),
                "vmtune_config": {"placement": "pack", "hook": {"on_conflict": "warn"}}, **over}
    book = tmp_path / "role.yml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False,
                                 "roles": [{"role": "vmtune.kvm.host", "vars": settings}]}]))
    return book


def test_role_installs_vmtune_and_restarts_libvirtd_only_when_the_hook_changed(libvirtd, tmp_path):
    """The role on this host (no systemd): run 1 installs the wheel into a venv, links vmtune, writes the config,
    the hook (its #! the venv's python) and the reaper (its units, and a cron file: no systemd here) and restarts libvirtd; run 2 reports changed=0 and libvirtd keeps
    its pid. A check-mode run on new paths writes nothing and restarts nothing. Then a rebuilt wheel of the same
    version (same name, other bytes) replaces the installed code, where pip alone says "Requirement already
    satisfied"."""
    if Path("/run/systemd/system").exists():
        pytest.skip("this host runs systemd: the role restarts libvirt through the service module there")
    from fixtures.wheel import build_wheel

    wheel = build_wheel(tmp_path / "build")
    where = tmp_path / "host"
    book = _role_book(tmp_path, where, wheel)
    pid = _libvirtd_pid()
    assert pid is not None, "libvirtd runs without a pid file in /run"

    first = playbook(book, tmp_path)
    assert first.rc == 0, first.out + first.err
    assert first.recap["changed"] > 0
    hook = where / "hooks" / "qemu.d" / "50-vmtune"
    shebang = hook.read_text().splitlines()[0]
    assert re.fullmatch(rf"#!{re.escape(str(where / 'venv' / 'bin'))}/python[0-9.]*", shebang), shebang
    assert os.readlink(where / "bin" / "vmtune") == str(where / "venv" / "bin" / "vmtune")
    cfg = vmtune.config.load(str(where / "etc" / "vmtune.toml"))
    assert cfg.placement == "pack" and cfg.hook == vmtune.config.HookSettings(on_conflict="warn")
    # the reaper, as `vmtune hook install` writes it for this venv and hooks folder; no systemd here: cron
    python = str(where / "venv" / "bin" / "python")
    for name, text in reaper.units(python, str(where / "hooks")).items():
        assert (where / "units" / name).read_text() == text, name
    assert (where / "cron.d" / "vmtune").read_text().splitlines()[1] == reaper.cron_line(python, str(where / "hooks"))
    restarted = _libvirtd_pid()
    assert restarted not in (None, pid), "the handler did not restart libvirtd"
    assert "RUNNING HANDLER [vmtune.kvm.host : Restart libvirt without systemd]" in first.out

    second = playbook(book, tmp_path)
    assert second.rc == 0, second.out + second.err
    assert second.recap["changed"] == 0, second.out
    assert _libvirtd_pid() == restarted and "RUNNING HANDLER" not in second.out

    fresh = tmp_path / "fresh"
    # the Debian packages were checked by runs 1 and 2 (python-apt reads its cache: 3-4 s a run)
    check = playbook(_role_book(tmp_path, fresh, wheel, vmtune_system_packages=[]), tmp_path, check=True)
    assert check.rc == 0, check.out + check.err
    assert not fresh.exists() or not any(p.is_file() for p in fresh.rglob("*")), list(fresh.rglob("*"))
    assert _libvirtd_pid() == restarted

    rebuilt = build_wheel(tmp_path / "rebuilt", marker="rebuilt")
    assert rebuilt.name == wheel.name and rebuilt.read_bytes() != wheel.read_bytes()
    again = playbook(_role_book(tmp_path, where, rebuilt, vmtune_system_packages=[]), tmp_path)
    assert again.rc == 0, again.out + again.err
    probe = "import vmtune; print(getattr(vmtune, 'ROLE_TEST_MARKER', None))"
    out = subprocess.run([str(where / "venv" / "bin" / "python"), "-I", "-c", probe], cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "rebuilt", "the role copied the new wheel but the venv still runs the old code"
    assert _libvirtd_pid() == restarted  # the hook is the same: no restart
