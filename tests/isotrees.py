"""Fake host trees for the hook's isolation: procfs IRQs, the workqueue mask, cgroup v2 and v1.

``build(env)`` adds them beside the sysfs tree of test_hook's ``env`` (4 online CPUs, 0-3):
``env/proc/irq``, ``env/sys/devices/virtual/workqueue/cpumask`` and ``env/sys/fs/cgroup``.
"""

from __future__ import annotations

from pathlib import Path

IRQS = {1: "0-3", 2: "0-3", 3: "0-1", 4: "2", 5: "0", 6: "1-3"}  # 4: pinned on purpose to CPU 2
V2_GROUPS = {"init.scope": "", "system.slice": "", "user.slice": "0-3", "lxc.payload": "1-3",
             "machine.slice": "", "machine": "", "qemu.libvirt-qemu": "2"}
V1_GROUPS = {"cpuset/cpuset.cpus": "0-3", "cpuset/docker/cpuset.cpus": "0-3"}
LIBVIRT = ("machine.slice", "machine", "qemu.libvirt-qemu")


def put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def build(env: Path, cgroup: str = "v2", systemd: bool = False) -> None:
    proc, sysfs = env / "proc", env / "sys"
    for n, cpus in IRQS.items():
        put(proc / "irq" / str(n) / "smp_affinity_list", cpus)
        put(proc / "irq" / str(n) / "smp_affinity", "f")  # never read: the list form is
    put(proc / "irq" / "default_smp_affinity", "f")
    put(proc / "uptime", "1000.00 1800.00")
    put(sysfs / "devices/virtual/workqueue/cpumask", "f")
    fs = sysfs / "fs" / "cgroup"
    if cgroup == "v2":
        put(fs / "cgroup.controllers", "cpuset cpu io memory pids")
        put(fs / "cpuset.cpus.effective", "0-3")
        for name, cpus in V2_GROUPS.items():
            put(fs / name / "cpuset.cpus", cpus)
    elif cgroup == "v1":
        for rel, cpus in V1_GROUPS.items():
            put(fs / rel, cpus)
    if systemd:
        (env / "run" / "systemd" / "system").mkdir(parents=True)


def tree(env: Path) -> dict[str, str]:
    """Every file of the fake host but the hook's state, for exact before/after comparisons."""
    out = {}
    for top in ("proc", "sys", "run"):
        base = env / top
        if base.exists():
            out.update({str(p.relative_to(env)): p.read_text().strip() for p in sorted(base.rglob("*")) if p.is_file()})
    return out


def irq(env: Path, n: int | str) -> str:
    return (env / "proc" / "irq" / str(n) / "smp_affinity_list").read_text().strip()


def read(env: Path, rel: str) -> str:
    return (env / rel).read_text().strip()


SYSTEMCTL = """#!/bin/sh
# A stub systemctl: records each call, keeps AllowedCPUs per unit in files.
echo "$*" >> "{log}"
case "$1" in
  show) cat "{units}/$5" 2>/dev/null || true ;;
  set-property)
    value="${{4#AllowedCPUs=}}"
    printf '%s\\n' "$value" > "{units}/$3" ;;
  *) exit 1 ;;
esac
"""


def stub_systemctl(env: Path) -> Path:
    """A ``systemctl`` in ``env/bin`` (put it first on PATH); returns its call log."""
    bindir, units, log = env / "bin", env / "units", env / "systemctl.log"
    bindir.mkdir()
    units.mkdir()
    script = bindir / "systemctl"
    script.write_text(SYSTEMCTL.format(log=log, units=units))
    script.chmod(0o755)
    log.write_text("")
    return log
