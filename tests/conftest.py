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
# tests/guest.py shares the guest-image plumbing of bench/ (bench/debimage.py), whatever the cwd
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

settings.register_profile(
    "vmtune", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("thorough", max_examples=600, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "vmtune"))

# The real-libvirtd fixture, for every test module that asks for it by name.
from libvirt_env import libvirtd  # noqa: E402,F401


# -- the machine, as the suite found it ------------------------------------------------------------
# Tests that use this machine's real IRQs, sysctls, workqueues and irqbalance (as root) restore
# them; this checks that they did, once, at the end of the session: a stray irqbalance ban, a
# changed sysctl or a moved IRQ left behind fails the run.

HOST_FILES = ("/proc/sys/kernel/timer_migration", "/proc/sys/vm/stat_interval", "/proc/sys/kernel/watchdog_cpumask",
              "/proc/irq/default_smp_affinity", "/sys/devices/virtual/workqueue/cpumask")


def _machine() -> dict[str, str]:
    """The host values the hook's isolation changes: the files above, every workqueue's cpumask,
    every IRQ's affinity, and whether an irqbalance runs; and whether the reaper's units are in
    /etc/systemd/system."""
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
    for unit in ("vmtune-reap.service", "vmtune-reap.timer"):  # the reaper's units: no test writes them here
        out[unit] = str(Path("/etc/systemd/system", unit).exists())
    return out


@pytest.fixture(scope="session", autouse=True)
def machine_as_found():
    """At the end of the session, this machine's sysctls, masks, IRQ affinities and irqbalance are
    as they were at its start (IRQs that came or went meanwhile aside)."""
    before = _machine() if os.geteuid() == 0 else {}
    yield
    if not before:
        return
    after = _machine()
    changed = {k: (v, after[k]) for k, v in before.items() if k in after and after[k] != v}
    assert not changed, f"the test suite left this machine changed (before, after): {changed}"
