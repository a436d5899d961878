"""Shared test settings: one hypothesis profile, the corpus beside the checkout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("VMTUNE_CORPUS", ROOT.parent / "shared" / "corpus"))
EXAMPLES = ROOT / "examples"
# tests/fixtures/guest.py shares the guest-image plumbing of bench/ (bench/debimage.py), whatever the cwd
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The shared helpers and fixtures (tests/fixtures/): their asserts are rewritten as a test's are, and
# the modules that hold fixtures are plugins, so that every test module may ask for them by name.
pytest.register_assert_rewrite("fixtures")
# The real libvirtd (``libvirtd``) is fixtures/libvirt_env.py's, for every test module that asks for it by name.
pytest_plugins = ["fixtures.hook", "fixtures.isolation", "fixtures.reliability", "fixtures.cli", "fixtures.doctortrees",
                  "fixtures.libvirt_env"]

settings.register_profile(
    "vmtune", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("thorough", max_examples=600, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "vmtune"))


# -- the machine, as the suite found it ------------------------------------------------------------
# Tests that use this machine's real IRQs, sysctls, workqueues and irqbalance (as root) restore
# them; this checks that they did, once, at the end of the session (in the controller, after every
# worker): a stray irqbalance ban, a changed sysctl or a moved IRQ left behind fails the run.

HOST_FILES = ("/proc/sys/kernel/timer_migration", "/proc/sys/vm/stat_interval", "/proc/sys/kernel/watchdog_cpumask",
              "/proc/irq/default_smp_affinity", "/sys/devices/virtual/workqueue/cpumask")


def _machine() -> dict[str, str]:
    """The host values the hook's isolation changes: the files above, every workqueue's cpumask,
    every IRQ's affinity, and whether an irqbalance runs; whether the reaper's units are in
    /etc/systemd/system; and the system libvirtd's domains."""
    import glob
    import subprocess

    paths = list(HOST_FILES) + glob.glob("/sys/bus/workqueue/devices/*/cpumask") + \
        glob.glob("/proc/irq/[0-9]*/smp_affinity_list")
    out = {}
    for path in paths:
        try:
            out[path] = Path(path).read_text().strip()
        except OSError:
            pass
    out["irqbalance running"] = str(subprocess.run(["pgrep", "-x", "irqbalance"], capture_output=True).returncode == 0)
    # the reaper's units and the role's cron file: no test writes them here
    for path in ("/etc/systemd/system/vmtune-reap.service", "/etc/systemd/system/vmtune-reap.timer", "/etc/cron.d/vmtune"):
        out[path] = str(Path(path).exists())
    try:  # the system libvirtd's domains, defined or running: the tests leave none behind
        virsh = subprocess.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"],
                               capture_output=True, text=True, timeout=30)
        if virsh.returncode == 0:
            out["libvirt domains"] = " ".join(sorted(virsh.stdout.split()))
    except (OSError, subprocess.TimeoutExpired):
        pass  # no libvirt here: nothing to leave behind
    return out


def _worker(config) -> bool:
    """Whether this process is a pytest-xdist worker (the controller, or a run without xdist, is not)."""
    return hasattr(config, "workerinput")


def pytest_sessionstart(session):
    """This machine as the suite found it (as root; once, in the controller)."""
    if os.geteuid() == 0 and not _worker(session.config):
        session.config.stash[MACHINE] = _machine()


def pytest_sessionfinish(session, exitstatus):
    """At the end of the session, this machine's sysctls, masks, IRQ affinities, irqbalance and
    the reaper's units are as they were at its start (IRQs that came or went meanwhile aside): a
    run that left one changed fails."""
    before = session.config.stash.get(MACHINE, None)
    if not before:
        return
    after = _machine()
    changed = {k: (v, after[k]) for k, v in before.items() if k in after and after[k] != v}
    if changed:
        sys.stderr.write(f"\nthe test suite left this machine changed (before, after): {changed}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


MACHINE = pytest.StashKey[dict]()


# -- the tests that share this machine -------------------------------------------------------------
# scripts/test runs the suite in two pytest-xdist workers. The modules that use this machine's
# shared parts (the real libvirtd and its guests, the real /sys and /proc the hook's isolation
# writes, irqbalance, the host benchmarks) run one test at a time in one scope ("machine"), in one
# worker; every other module (fake hosts, in-process libvirt parsers, the Ansible collection's
# modules) is a scope of its own, so that its module-scoped fixtures (a built wheel, say) are made
# once. A module that asks for the ``libvirtd`` fixture belongs in MACHINE_MODULES (checked below).
# test_cgroup2_guest changes nothing here, but it waits for the guest boots scripts/test started in the
# background (as test_debian_package waits for the package's build): both go last in this scope
# (WAIT_LAST), when the background work is most likely done, rather than waiting for it early.
MACHINE_MODULES = {"test_bench", "test_ansible_libvirt", "test_cgroup2_guest", "test_debian_package", "test_doctor",
                   "test_hook", "test_hook_irqbalance_real", "test_hook_isolation", "test_hook_isolation_kernel",
                   "test_hook_isolation_records", "test_hook_libvirt", "test_libvirt_harness", "test_libvirt_real",
                   "test_live", "test_guest_l3", "test_verify"}


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduling by scope, with one scope per module but one for all of
    ``MACHINE_MODULES`` (its ``xdist_group`` marks do not reach the test ids under pytest 9)."""
    from xdist.scheduler import LoadScopeScheduling

    class Shared(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "machine" if Path(module).stem in MACHINE_MODULES else module

    return Shared(config, log)


WAIT_LAST = ("test_cgroup2_guest", "test_debian_package")


def pytest_collection_modifyitems(config, items):
    """WAIT_LAST's tests after the others (the machine scope keeps its place: pytest-xdist hands scopes
    out in the order of their first test). A test that asks for the real libvirtd outside
    MACHINE_MODULES is a mistake in this file."""
    last = [item for item in items if Path(str(item.fspath)).stem in WAIT_LAST]
    if last:
        items[:] = [item for item in items if Path(str(item.fspath)).stem not in WAIT_LAST] + last
    stray = sorted({item.module.__name__ for item in items
                    if "libvirtd" in getattr(item, "fixturenames", ()) and item.module is not None
                    and item.module.__name__.rpartition(".")[2] not in MACHINE_MODULES})
    if stray:
        raise pytest.UsageError(f"tests/conftest.py: add {', '.join(stray)} to MACHINE_MODULES (they use libvirtd)")


@pytest.fixture(autouse=True)
def _no_host_config(request, monkeypatch, tmp_path_factory):
    """Outside MACHINE_MODULES, vmtune reads no configuration or profile of this machine's: the
    machine tests write /etc/vmtune (the Ansible role does) while the other worker runs, and a
    `cli.main` there would read it. A test that names its own (monkeypatch.setenv) still does."""
    if Path(str(request.node.fspath)).stem in MACHINE_MODULES:
        return
    empty = tmp_path_factory.getbasetemp() / "no-host-config"  # an empty file: the defaults
    if not (empty / "vmtune.toml").exists():
        (empty / "profiles").mkdir(parents=True, exist_ok=True)
        (empty / "vmtune.toml").write_text("")
    monkeypatch.setenv("VMTUNE_CONFIG", str(empty / "vmtune.toml"))
    monkeypatch.setenv("VMTUNE_PROFILES", str(empty / "profiles"))
