"""The hook on the common host, for real: ``scripts/cgroup2-guest`` boots Debian trixie (kernel 6.12)
under TCG, once with systemd 257 as PID 1 and once with a shell as PID 1 (cgroup v2 without a
service manager), and tests/guest_cgroup2/scenario.py checks the kernel's and systemd's own files
through a lease of a stand-in domain laid out as libvirt lays it out (see that file).

Skipped, with the reason, where the guest cannot be built or booted here: not root, no QEMU, or no
network to deb.debian.org (the first build fetches the packages; later boots use the cached image).
The two boots run at once (each is one host thread: single-threaded TCG).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUEST = ROOT / "scripts" / "cgroup2-guest"
SCENARIO = ROOT / "tests" / "guest_cgroup2" / "scenario.py"
MIRROR = "http://deb.debian.org/debian/dists/trixie/Release"


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "not root: the guest's image build and virtiofsd need root"
    if not shutil.which("qemu-system-x86_64"):
        return "no qemu-system-x86_64"
    cache = Path(os.environ.get("VMTUNE_CGROUP2_CACHE", "/var/cache/vmtune/cgroup2-guest"))
    if cache.is_dir() and any(cache.glob("*/root.img")):
        return None  # an image is cached (of this recipe or not: the build says)
    try:
        urllib.request.urlopen(MIRROR, timeout=10).close()  # noqa: S310 - a fixed http URL
    except OSError as exc:
        return f"no network to deb.debian.org for the first build of the guest: {exc}"
    return None


@pytest.fixture(scope="module")
def image():
    why = _why_not()
    if why:
        pytest.skip(why)
    proc = subprocess.run([str(GUEST), "--build-only"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_hooks_isolation_on_systemd_and_on_plain_cgroup_v2(image):
    """Both boots pass every check: with systemd, isolate = partition (today's isolation of the
    units and tasks, and the partition beside it); without systemd, isolate = on (the plain cgroup v2
    path). (Each boot runs the other method too by hand: ``scenario.py`` with no ``--isolate``.)"""
    runs = {
        "systemd": [str(GUEST), "--", "python3", str(SCENARIO), "--isolate", "partition"],
        "no-systemd": [str(GUEST), "--no-systemd", "--", "python3", str(SCENARIO), "--isolate", "on"],
    }
    procs = {name: subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name, argv in runs.items()}
    out = {name: proc.communicate(timeout=900)[0] for name, proc in procs.items()}
    for name, proc in procs.items():
        assert proc.returncode == 0 and "\n0 failed\n" in out[name], f"{name}:\n{out[name]}"
        assert out[name].count("FAIL:") == 0
    assert "AllowedCPUs of init.scope leaves out CPU 2" in out["systemd"]
    assert "the vCPU group is an isolated partition" in out["systemd"]
    assert "cpuset.cpus of vmtune-plain leaves out CPU 2" in out["no-systemd"]


def test_a_boot_that_does_not_come_up_is_one_line_within_its_limit(image):
    proc = subprocess.run([str(GUEST), "--boot-timeout", "2", "--", "true"], capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 125
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cgroup2-guest: error: the guest did not start its system "
                                                   "within 2 s; last console line:"), proc.stderr
