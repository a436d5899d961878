"""Fake host trees for the hook's isolation: procfs IRQs and tasks, the workqueue mask, cgroup v2
and v1, and a stub ``systemctl``.

``build(env)`` adds them beside the sysfs tree of fixtures/hook.py's ``fake_host_tree`` (4 online CPUs, 0-3):
``env/proc/irq``, ``env/sys/devices/virtual/workqueue/cpumask`` and its workqueues
(``WORKQUEUES``, linked from ``sys/bus/workqueue/devices``), the sysctls the isolation sets
(``SYSCTLS``, under ``env/proc/sys``) and ``env/sys/fs/cgroup``.
``task(env, pid, ...)`` adds a task under ``env/proc``, and ``Kernel(env)`` stands in for
``sched_setaffinity`` on those tasks (tests put it in ``tasks.setaffinity``). Fake pids are above
any real one (``PID_MAX_LIMIT`` is 4194304), so no real process is ever moved by mistake.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

from vmtune import cpuset
from vmtune.hoststate.kinds import tasks

IRQS = {1: "0-3", 2: "0-3", 3: "0-1", 4: "2", 5: "0", 6: "1-3"}  # 4: pinned on purpose to CPU 2
V2_GROUPS = {"init.scope": "", "system.slice": "", "user.slice": "0-3", "lxc.payload": "1-3",
             "machine.slice": "", "machine": "", "qemu.libvirt-qemu": "2"}
V1_GROUPS = {"cpuset/cpuset.cpus": "0-3", "cpuset/docker/cpuset.cpus": "0-3"}
LIBVIRT = ("machine.slice", "machine", "qemu.libvirt-qemu", "production.partition")
WORKQUEUES = {"writeback": "f", "blkcg_punt_bio": "f", "events_percpu": ""}  # the last one per-CPU: no cpumask
SYSCTLS = {"kernel/timer_migration": "1", "kernel/watchdog_cpumask": "0-3", "vm/stat_interval": "1"}


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
    for name, mask in WORKQUEUES.items():  # as the kernel: a folder each, linked from bus/workqueue/devices
        put(sysfs / "devices/virtual/workqueue" / name / "per_cpu", "0" if mask else "1")
        if mask:
            put(sysfs / "devices/virtual/workqueue" / name / "cpumask", mask)
        link = sysfs / "bus/workqueue/devices" / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():  # build may run twice on one tree
            link.symlink_to(f"../../../devices/virtual/workqueue/{name}")
    for rel, value in SYSCTLS.items():
        put(proc / "sys" / rel, value)
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
# A stub systemctl: records each call; set-property --runtime writes the runtime drop-in as systemd
# does (a transient unit's, init.scope's, under transient/: systemd 257 in tests/guest_cgroup2), show
# reads it (else the unit's own value in {units}/UNIT) and prints it as systemd does.
# A call listed in {fail} fails.
echo "$*" >> "{log}"
case "$1" in show) unit=$5 ;; *) unit=$3 ;; esac
case "$unit" in init.scope) dir=transient ;; *) dir=system.control ;; esac
if [ -f "{fail}" ] && grep -qxF -- "$*" "{fail}"; then echo "stub: failed" >&2; exit 1; fi
case "$1" in
  show)
    f="{run}/systemd/$dir/$5.d/50-AllowedCPUs.conf"
    # printed as systemd prints a CPU set: ranges joined by spaces ("0-1 3")
    {{ if [ -f "$f" ]; then sed -n 's/^AllowedCPUs=//p' "$f"; else cat "{units}/$5" 2>/dev/null || echo; fi; }} | tr ',' ' ' ;;
  set-property)
    mkdir -p "{run}/systemd/$dir/$3.d"
    printf '# created via "systemctl set-property"\\n[Slice]\\n%s\\n' "$4" \\
      > "{run}/systemd/$dir/$3.d/50-AllowedCPUs.conf" ;;
  daemon-reload|enable|disable) ;;  # the reaper's timer (vmtune/reaper.py)
  *) exit 1 ;;
esac
"""


def stub_systemctl(env: Path) -> Path:
    """A ``systemctl`` in ``env/bin`` (put it first on PATH); returns its call log. Calls written
    to ``env/systemctl.fail`` (one a line, as logged) fail; ``env/units/UNIT`` is a unit's own
    ``AllowedCPUs``."""
    bindir, units, log = env / "bin", env / "units", env / "systemctl.log"
    bindir.mkdir()
    units.mkdir()
    script = bindir / "systemctl"
    script.write_text(SYSTEMCTL.format(log=log, units=units, run=env / "run", fail=env / "systemctl.fail"))
    script.chmod(0o755)
    log.write_text("")
    return log


# -- tasks ----------------------------------------------------------------------------------------

FAKE_PID = 5_000_000
BOOT_S = 500.0  # when the fake tasks started (seconds since boot); the fake uptime is 1000 s


def task(env: Path, pid: int, cpus: str, comm: str = "task", born: float = BOOT_S, flags: int = 0,
         cgroup: str = "0::/") -> int:
    """A single-threaded task under ``env/proc`` with affinity ``cpus``; returns its pid."""
    base = env / "proc" / str(pid)
    put(base / "cgroup", cgroup)
    put(base / "comm", comm)
    start = int(born * tasks.TICK)
    put(base / "task" / str(pid) / "stat",
        f"{pid} ({comm}) S 1 1 1 0 -1 {flags} " + " ".join(["0"] * 12) + f" {start} 0 0")
    set_affinity(env, pid, cpus)
    return pid


def set_affinity(env: Path, pid: int, cpus: str) -> None:
    put(env / "proc" / str(pid) / "task" / str(pid) / "status", f"Name:\ttask\nCpus_allowed_list:\t{cpus}")


def affinity(env: Path, pid: int) -> str:
    status = (env / "proc" / str(pid) / "task" / str(pid) / "status").read_text()
    return status.split("Cpus_allowed_list:", 1)[1].strip()


class Kernel:
    """``sched_setaffinity`` for the fake tasks under ``env/proc``: ESRCH for a task that is not
    there, the errno in ``refuse[pid]`` (once), ``limit[pid]`` ANDed in as a cpuset would, and
    ``before[pid]()`` run just before the write (a fork racing the hook)."""

    def __init__(self, env: Path):
        self.env = env
        self.refuse: dict[int, int] = {}
        self.limit: dict[int, frozenset[int]] = {}
        self.before: dict[int, Callable[[], None]] = {}

    def __call__(self, tid: int, cpus) -> None:
        if not (self.env / "proc" / str(tid) / "task" / str(tid) / "status").exists():
            raise ProcessLookupError(errno.ESRCH, "No such process")
        if tid in self.refuse:
            code = self.refuse.pop(tid)
            raise OSError(code, "refused (fake kernel)")
        if tid in self.before:
            self.before.pop(tid)()
        cpus = frozenset(cpus) & self.limit.get(tid, frozenset(cpus))
        if not cpus:
            raise OSError(errno.EINVAL, "Invalid argument")
        set_affinity(self.env, tid, cpuset.format(cpus))


# -- irqbalance -------------------------------------------------------------------------------------

IRQBALANCE_PID = FAKE_PID + 900


class FakeIrqbalance:
    """irqbalance's control socket, answered in-process (tests put it in
    ``vmtune.hoststate.kinds.irqbalance.request``): ``setup`` and ``settings cpus LIST|NULL``.

    Its state is files, so that a forked hook call changes it too and ``tree`` compares it:
    ``run/irqbalance/irqbalance<PID>.sock`` (the socket, empty) holds the ban set over the socket
    (nothing: none, its own applies); its own ban (its environment's) is ``own``. A ban shows at
    once, or with ``lag`` as the real one's: from its next cycle on (``tick``), the last one sent
    (kept meanwhile in ``run/irqbalance/pending``). ``silent``: it answers nothing (not root)."""

    def __init__(self, env: Path, pid: int = IRQBALANCE_PID, own: str = "", silent: bool = False,
                 lag: bool = False):
        self.env, self.pid, self.own, self.silent, self.lag = env, pid, own, silent, lag
        self.calls: list[str] = []
        self.start()

    @property
    def socket(self) -> Path:
        return self.env / "run" / "irqbalance" / f"irqbalance{self.pid}.sock"

    def start(self, pid: int | None = None) -> None:
        """(Re)start it: a new pid, no ban set over the socket."""
        if pid is not None:  # the old process is gone, and its socket with it
            import shutil

            self.socket.unlink(missing_ok=True)
            shutil.rmtree(self.env / "proc" / str(self.pid))
            self.pid = pid
        task(self.env, self.pid, "0-3", comm="irqbalance")
        stat = (self.env / "proc" / str(self.pid) / "task" / str(self.pid) / "stat").read_text()
        put(self.env / "proc" / str(self.pid) / "stat", stat.strip())
        put(self.env / "proc" / str(self.pid) / "environ",
            f"PATH=/usr/bin\0IRQBALANCE_BANNED_CPULIST={self.own}\0" if self.own else "PATH=/usr/bin\0")
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.write_text("")

    @property
    def pending(self) -> Path:
        return self.socket.parent / "pending"

    def tick(self) -> None:
        """Its next cycle: the last ban sent applies."""
        if self.pending.exists():
            self.socket.write_text(self.pending.read_text())
            self.pending.unlink()

    @property
    def ui(self) -> str:
        """The ban set over the socket ("" for none)."""
        return self.socket.read_text().strip() if self.socket.exists() else ""

    @property
    def banned(self) -> frozenset[int]:
        return cpuset.parse(self.ui or self.own)

    def __call__(self, address, text: str) -> bytes:
        if str(address) != str(self.socket):
            raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
        self.calls.append(text)
        if self.silent:
            return b""
        if text == "setup":
            return f"SLEEP 2 BANNED {cpuset.format_mask(self.banned):0>8}".encode()
        if text.startswith("settings cpus "):
            arg = text.split(" ", 2)[2]
            (self.pending if self.lag else self.socket).write_text("" if arg == "NULL" else arg + "\n")
            return b""
        raise AssertionError(f"irqbalance request not faked: {text!r}")
