"""The hook's isolation on a real kernel and a real systemd, inside ``scripts/cgroup2-guest``.

Run as root in the guest (systemd as PID 1 on cgroup v2, 4 CPUs) by its own /usr/bin/python3,
with the checkout importable (``tests/test_cgroup2_guest.py`` runs it). Each case lays out a domain
as libvirt lays it out on cgroup v2, calls the installed hook as libvirt calls it (prepare, start,
started, then stopped and release), and checks the kernel's and systemd's own files:

- ``systemd``: the hook narrows ``AllowedCPUs`` of init.scope, system.slice and user.slice;
- ``plain``: cgroup v2 without systemd (``scripts/cgroup2-guest --no-systemd``): the top-level
  groups' ``cpuset.cpus``, and the affinity of tasks in the root group.

The case that fits the boot runs (systemd as PID 1 or not).

Each case prints ``ok: ...`` per check and ``FAIL: ...`` for what does not hold; the exit status is
the number of failed checks (0: all held). ``--case NAME`` runs one; ``--keep`` leaves the hook
installed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CG = Path("/sys/fs/cgroup")
HOOKS = Path("/etc/libvirt/hooks")
RUNDIR = Path("/run/libvirt/qemu")
CONFIG = Path("/etc/vmtune/vmtune.toml")
UNITS = ("init.scope", "system.slice", "user.slice")
OURS = ("before.service", "after.service", "machine-qemu")  # the units a case starts and stops
DROP_INS = (Path("/run/systemd/system.control"), Path("/run/systemd/transient"))
HELD = 2  # the domain's vCPU 0 is pinned here; CPU 0 is reserved
NAME, UUID = "vm-a", "5a5a5a5a-0000-4000-8000-00000000000a"
SYSTEMD = Path("/run/systemd/system").is_dir()
# the domain's group, as libvirt names it with systemd (a scope, delegated) and without (machine/)
SCOPE = (CG / "machine.slice" / "machine-qemu\\x2d1\\x2dvm\\x2da.scope" if SYSTEMD
         else CG / "machine" / "qemu-1-vm-a.libvirt-qemu")
MACHINE = SCOPE.parent
DOMAIN = (f"<domain type='kvm'><name>{NAME}</name><uuid>{UUID}</uuid>"
          "<metadata><vmtune:tune xmlns:vmtune='https://vmtune.dev/xmlns/1' profile='latency'/></metadata>"
          f"<memory unit='MiB'>64</memory><vcpu>1</vcpu><cputune><vcpupin vcpu='0' cpuset='{HELD}'/>"
          "<emulatorpin cpuset='0-1,3'/></cputune></domain>")
# A stand-in QEMU: its command line names the domain as libvirt's QEMU does; a thread named as a
# vCPU thread spins (a busy vCPU) and the main thread (the emulator) sleeps.
STANDIN = r"""
import ctypes, os, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
def vcpu():
    libc.prctl(15, b"CPU 0/KVM", 0, 0, 0)
    with open(sys.argv[-1] + ".tid.new", "w") as fh:
        fh.write(str(threading.get_native_id()))
    os.rename(sys.argv[-1] + ".tid.new", sys.argv[-1] + ".tid")
    while True:
        sum(range(10000)); time.sleep(0.01)
threading.Thread(target=vcpu, daemon=True).start()
while True:
    time.sleep(1)
"""

failures: list[str] = []
PLAIN: list[int] = []  # the busy processes in a plain group


def check(ok: bool, what: str) -> None:
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)


def sh(*cmd: str, stdin: str | None = None, check_rc: bool = True) -> str:
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
    if check_rc and proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def cpus(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.replace(" ", ",").split(","):
        if part:
            lo, _, hi = part.partition("-")
            out |= set(range(int(lo), int(hi or lo) + 1))
    return out


# -- what the host looks like ----------------------------------------------------------------------

def allowed(unit: str) -> str:
    return sh("systemctl", "show", "-p", "AllowedCPUs", "--value", unit)


def cpuset_files(skip: tuple[Path, ...]) -> dict[str, str]:
    """Every ``cpuset.*`` file of every group but those under ``skip``: path -> content."""
    out = {}
    for folder, dirs, names in os.walk(CG):
        here = Path(folder)
        if any(here == s or s in here.parents for s in skip):
            dirs[:] = []
            continue
        for name in names:
            if name.startswith("cpuset."):
                value = read(here / name)
                if value is not None:
                    out[str(here / name)] = value
    return out


def drop_ins() -> dict[str, str]:
    """The runtime drop-ins and transient unit files, but those of the units a case starts."""
    out = {}
    for root in DROP_INS:
        for path in sorted(root.rglob("*")) if root.is_dir() else ():
            if path.is_file() and not any(u in str(path) for u in OURS):
                out[str(path)] = read(path) or ""
    return out


PF_NO_SETAFFINITY = 0x04000000  # a kernel thread whose affinity only the kernel sets (workqueue workers)


def affinities() -> dict[tuple[str, str], str]:
    """(tid, start time) -> Cpus_allowed_list, for every thread the hook could move: not those whose
    affinity only the kernel sets (a workqueue rescuer follows its workqueue's masks, which the
    snapshot's files hold, and the kernel applies them to it when it next runs: seen once on 6.12,
    ``kworker/R-kblockd`` still at the narrowed mask just after the release)."""
    out = {}
    for task in Path("/proc").glob("[0-9]*/task/[0-9]*"):
        stat, status = read(task / "stat"), read(task / "status")
        if not stat or not status:
            continue
        fields = stat.rpartition(")")[2].split()
        if int(fields[6]) & PF_NO_SETAFFINITY:
            continue
        start = fields[19]
        for line in status.splitlines():
            if line.startswith("Cpus_allowed_list:"):
                out[(task.name, start)] = line.split(":", 1)[1].strip()
    return out


def kernel_files() -> dict[str, str]:
    """The IRQ masks, the workqueues' masks and the sysctls the isolation writes."""
    paths = [Path("/proc/irq/default_smp_affinity"), Path("/sys/devices/virtual/workqueue/cpumask"),
             Path("/proc/sys/kernel/timer_migration"), Path("/proc/sys/kernel/watchdog_cpumask"),
             Path("/proc/sys/vm/stat_interval")]
    paths += sorted(Path("/sys/bus/workqueue/devices").glob("*/cpumask"))
    paths += sorted(Path("/proc/irq").glob("*/smp_affinity_list"))
    return {str(p): read(p) or "" for p in paths}


def snapshot(skip: tuple[Path, ...]) -> dict:
    return {"units": {u: allowed(u) for u in UNITS} if SYSTEMD else {}, "drop_ins": drop_ins(), "cpuset": cpuset_files(skip),
            "kernel": kernel_files(), "tasks": affinities()}


def compare(before: dict, after: dict, what: str) -> None:
    for part in ("units", "drop_ins", "kernel"):
        check(before[part] == after[part], f"{what}: {part} as before"
              + ("" if before[part] == after[part] else f" (before {before[part]}, after {after[part]})"))
    common = before["cpuset"].keys() & after["cpuset"].keys()
    changed = {k: (before["cpuset"][k], after["cpuset"][k]) for k in sorted(common)
               if before["cpuset"][k] != after["cpuset"][k]}
    check(not changed, f"{what}: every cpuset.* file of the {len(common)} as before" + (f" (changed: {changed})" if changed else ""))
    common = before["tasks"].keys() & after["tasks"].keys()
    moved = {f"{k[0]} {read(Path(f'/proc/{k[0]}/comm'))}": (before["tasks"][k], after["tasks"][k])
             for k in common if before["tasks"][k] != after["tasks"][k]}
    check(not moved, f"{what}: the affinity of each of the {len(common)} threads as before"
          + (f" (changed: {dict(list(moved.items())[:5])})" if moved else ""))


# -- the domain, laid out as libvirt lays it out on cgroup v2 ------------------------------------

class Domain:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.scope_proc: subprocess.Popen | None = None
        self.pid = self.tid = 0

    def start(self) -> None:
        script = self.work / "standin.py"
        script.write_text(STANDIN)
        marker = self.work / "qemu"
        Path(f"{marker}.tid").unlink(missing_ok=True)
        argv = ["/usr/bin/python3", str(script), "-name", f"guest={NAME},debug-threads=on", "-uuid", UUID, str(marker)]
        if SYSTEMD:
            self.scope_proc = subprocess.Popen(["systemd-run", "--quiet", "--scope", f"--unit={SCOPE.name}",
                                                "--slice=machine.slice", "-p", "Delegate=yes", "--", *argv])
        else:  # libvirt without systemd: machine/NAME.libvirt-qemu, made by libvirt itself
            write(CG / "cgroup.subtree_control", "+cpuset")
            SCOPE.mkdir(parents=True)
            write(MACHINE / "cgroup.subtree_control", "+cpuset")
            self.scope_proc = subprocess.Popen(argv)
            write(SCOPE / "cgroup.procs", str(self.scope_proc.pid))
        for _ in range(200):
            if Path(f"{marker}.tid").exists() and read(SCOPE / "cgroup.procs"):
                break
            time.sleep(0.05)
        self.pid = int((SCOPE / "cgroup.procs").read_text().split()[0])
        self.tid = int(Path(f"{marker}.tid").read_text())
        # libvirt's layout: libvirt/ in the machine scope holds the process (the threaded domain
        # root); each vCPU thread in a threaded libvirt/vcpuN, the others in a threaded
        # libvirt/emulator (moved by cgroup.threads); cpuset.cpus as the pins
        lv = SCOPE / "libvirt"
        lv.mkdir()
        write(lv / "cgroup.procs", str(self.pid))
        write(SCOPE / "cgroup.subtree_control", "+cpuset")
        write(lv / "cgroup.subtree_control", "+cpuset")
        for group in ("emulator", "vcpu0"):
            (lv / group).mkdir()
            write(lv / group / "cgroup.type", "threaded")
        write(lv / "vcpu0" / "cpuset.cpus", str(HELD))
        write(lv / "emulator" / "cpuset.cpus", "0-1,3")
        for tid in sorted(int(t.name) for t in Path(f"/proc/{self.pid}/task").iterdir()):
            write(lv / ("vcpu0" if tid == self.tid else "emulator") / "cgroup.threads", str(tid))
        os.sched_setaffinity(self.tid, {HELD})
        RUNDIR.mkdir(parents=True, exist_ok=True)
        (RUNDIR / f"{NAME}.pid").write_text(str(self.pid))
        (RUNDIR / f"{NAME}.xml").write_text(f"<domstatus state='running' pid='{self.pid}'>{DOMAIN}</domstatus>\n")

    def groups(self, method: str = "on") -> dict[str, str | None]:
        """libvirt's groups' cpuset files (with a partition, but the partition's own), the vCPU's."""
        lv = SCOPE / "libvirt"
        # a partition takes its CPUs out of its parents' effective sets: the kernel's doing
        mine = ("cpuset.cpus.exclusive", "cpuset.cpus.exclusive.effective", "cpuset.cpus.partition",
                "cpuset.cpus.effective")
        out = {str(p): read(p) for g in ("", "emulator", "vcpu0") for p in sorted((lv / g).glob("cpuset.*"))
               if method != "partition" or p.name not in mine}
        out["vcpu0 threads"] = read(lv / "vcpu0" / "cgroup.threads")
        out["emulator threads"] = read(lv / "emulator" / "cgroup.threads")
        out["vcpu affinity"] = str(sorted(os.sched_getaffinity(self.tid)))
        return out

    def stop(self) -> None:
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
        if self.scope_proc:
            self.scope_proc.wait(30)
        for f in (f"{NAME}.pid", f"{NAME}.xml"):
            (RUNDIR / f).unlink(missing_ok=True)
        for _ in range(100):
            if not SCOPE.exists():
                break
            if not SYSTEMD:  # libvirt removes its groups itself
                for group in (SCOPE / "libvirt" / "vcpu0", SCOPE / "libvirt" / "emulator", SCOPE / "libvirt", SCOPE):
                    if group.exists():
                        group.rmdir()
            time.sleep(0.05)


def hook(op: str, sub: str, env: dict[str, str]) -> None:
    hook_file = next((HOOKS / "qemu.d").iterdir())
    start = time.monotonic()
    proc = subprocess.run([str(hook_file), NAME, op, sub, "-"], input=DOMAIN, capture_output=True, text=True,
                          env={**os.environ, **env}, check=False)
    check(proc.returncode == 0, f"hook {op} {sub} exits 0 ({time.monotonic() - start:.1f} s)" + (f" (exit {proc.returncode}: {proc.stderr.strip()})"
                                                              if proc.returncode else ""))
    for line in proc.stderr.splitlines():
        print(f"  hook {op}: {line}", flush=True)


def busy(name: str, where: str) -> int:
    """A busy host task, stopped (SIGSTOP) until it is watched, so that it does not slow the hook
    under TCG: a service in system.slice, or a plain process in a group ("": the root)."""
    pid = _busy(name, where)
    os.kill(pid, signal.SIGSTOP)
    return pid


def _busy(name: str, where: str) -> int:
    if where == "service":
        sh("systemd-run", "--quiet", f"--unit={name}", "--", "/bin/sh", "-c", "while :; do :; done")
        for _ in range(100):
            pid = sh("systemctl", "show", "-p", "MainPID", "--value", name, check_rc=False)
            if pid and pid != "0":
                return int(pid)
            time.sleep(0.05)
        raise RuntimeError(f"{name} did not start")
    proc = subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"])
    if where:
        write(CG / where / "cgroup.procs", str(proc.pid))
    PLAIN.append(proc.pid)
    return proc.pid


def where_runs(pid: int, seconds: float = 2.0) -> set[int]:
    """The CPUs ``pid``'s threads were seen on over ``seconds`` (field 39 of their stat), let run
    for that long."""
    seen: set[int] = set()
    os.kill(pid, signal.SIGCONT)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            stat = read(task / "stat")
            if stat:
                seen.add(int(stat.rpartition(")")[2].split()[36]))
        time.sleep(0.01)
    return seen


def allowed_of(pid: int) -> set[int]:
    return set(os.sched_getaffinity(pid))


def effective(pid: int) -> set[int]:
    """The CPUs ``pid``'s cgroup allows: the nearest ``cpuset.cpus.effective`` up its path."""
    group = CG / read(Path(f"/proc/{pid}/cgroup")).split("::", 1)[1].lstrip("/")
    while not (group / "cpuset.cpus.effective").exists():
        group = group.parent
    return cpus(read(group / "cpuset.cpus.effective") or "")


def run_case(case: str, method: str, work: Path) -> None:
    print(f"== {case}, isolate = {method}", flush=True)
    CONFIG.write_text(f'reserved_cpus = "0"\n[hook]\nisolate = "{method}"\n')
    env: dict[str, str] = {}
    plain = CG / "vmtune-plain"
    skip = (MACHINE, CG / "system.slice" / "before.service", CG / "system.slice" / "after.service")
    if case == "systemd":
        before_tasks = {"service": busy("before.service", "service")}
    else:
        write(CG / "cgroup.subtree_control", "+cpuset")
        plain.mkdir(exist_ok=True)
        before_tasks = {"plain-group": busy("", "vmtune-plain"), "root-group": busy("", "")}
    before = snapshot(skip)
    dom = Domain(work)
    try:
        _held(case, method, env, dom, before_tasks, plain)
    finally:
        dom.stop()
        for name in ("before.service", "after.service"):
            sh("systemctl", "stop", name, check_rc=False)
            sh("systemctl", "reset-failed", name, check_rc=False)
        for pid in PLAIN:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        PLAIN.clear()
    hook("release", "end", env)
    for group in sorted(MACHINE.rglob("cpuset.cpus.exclusive")) if MACHINE.exists() else ():
        print(f"  after release: {group.relative_to(CG)} = {read(group)!r}", flush=True)
    after = snapshot(skip)
    compare(before, after, case)
    state = json.loads(read(Path("/run/vmtune/state.json")) or "{}")
    left = (state.get("isolation") or {}).get("records")
    check(not left and not state.get("leases"), f"{case}: no lease and no isolation record left in the hook's state"
          + (f" ({left})" if left else ""))
    if case == "plain":
        plain.rmdir()


def _held(case: str, method: str, env: dict[str, str], dom: Domain, before_tasks: dict[str, int],
          plain: Path) -> None:
    """The lease: prepare, the domain starts, start and started; the checks while it holds CPU 2."""
    hook("prepare", "begin", env)
    dom.start()
    libvirt_groups = dom.groups(method)
    hook("start", "begin", env)
    hook("started", "begin", env)
    held = {HELD}
    if case == "systemd":
        for unit in UNITS:
            now = cpus(allowed(unit))
            check(bool(now) and not now & held, f"AllowedCPUs of {unit} leaves out CPU {HELD}: {allowed(unit)!r}")
    else:
        now = cpus(read(plain / "cpuset.cpus") or "")
        check(bool(now) and not now & held, f"cpuset.cpus of {plain.name} leaves out CPU {HELD}: {sorted(now)}")
    if case == "systemd":
        after_tasks = {"service": busy("after.service", "service")}
    else:
        after_tasks = {"plain-group": busy("", "vmtune-plain"), "root-group": busy("", "")}
    for when, tasks in (("before", before_tasks), ("after", after_tasks)):
        for kind, pid in tasks.items():
            # a task in the root group has all CPUs by its cgroup: its affinity alone keeps it off
            check(not allowed_of(pid) & held and (kind == "root-group" or not effective(pid) & held),
                  f"a {kind} task started {when} the lease may not run on CPU {HELD}: "
                  f"affinity {sorted(allowed_of(pid))}, cgroup effective {sorted(effective(pid))}")
            seen = where_runs(pid)
            check(HELD not in seen, f"a {kind} task started {when} the lease was seen on CPUs {sorted(seen)}")
    now = dom.groups(method)
    diff = {k: (v, now.get(k)) for k, v in libvirt_groups.items() if now.get(k) != v}
    check(not diff, "libvirt's groups and the vCPU thread are untouched"
          + (" (but the partition's files)" if method == "partition" else "") + (f": {diff}" if diff else ""))
    if method == "partition":
        vcpu = SCOPE / "libvirt" / "vcpu0"
        check(read(vcpu / "cpuset.cpus.partition") == "isolated",
              f"the vCPU group is an isolated partition: {read(vcpu / 'cpuset.cpus.partition')!r}")
        check(read(CG / "cpuset.cpus.isolated") == str(HELD),
              f"the root's cpuset.cpus.isolated is {HELD}: {read(CG / 'cpuset.cpus.isolated')!r}")
        path = [g for g in [vcpu, *vcpu.parents] if CG in g.parents]
        check(all(read(g / "cpuset.cpus.exclusive") == str(HELD) for g in path),
              f"cpuset.cpus.exclusive is {HELD} from {path[-1].name} down to vcpu0: "
              f"{[read(g / 'cpuset.cpus.exclusive') for g in path]}")
        check(allowed_of(dom.tid) == held, f"the vCPU thread runs on CPU {HELD}: {sorted(allowed_of(dom.tid))}")
    hook("stopped", "end", env)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--isolate", action="append", choices=("on", "partition"),
                        help="[hook] isolate, a lease each (default: on, then partition)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    work = Path("/run/vmtune-scenario")
    work.mkdir(exist_ok=True)
    CONFIG.parent.mkdir(parents=True, exist_ok=True)
    sh("vmtune", "hook", "install", "--no-timer")
    print(f"kernel {os.uname().release}; systemd {sh('systemctl', '--version').split()[1]}; "
          f"cgroup {sh('stat', '-fc', '%T', str(CG))}; CPUs {os.cpu_count()}", flush=True)
    case = "systemd" if SYSTEMD else "plain"
    for method in args.isolate or ["on", "partition"]:
        try:
            run_case(case, method, work)
        except Exception as exc:  # noqa: BLE001 - one line, then the next case
            import traceback
            traceback.print_exc()
            check(False, f"{case}, isolate = {method}: {type(exc).__name__}: {exc}")
    if not args.keep:
        sh("vmtune", "hook", "uninstall", "--no-timer", check_rc=False)
    print(f"{len(failures)} failed", flush=True)
    return min(len(failures), 100)


if __name__ == "__main__":
    sys.exit(main())
