"""``vmtune status``: what the hook is doing right now. Read-only and quick, as ``tuned-adm active``
and ``systemctl status`` are.

    from vmtune.install.status import status

    now = status(cfg, roots)   # HookStatus
    now.lines()                # what ``vmtune status`` prints
    now.to_dict()              # what ``vmtune status --json`` prints

It says: the hook installed or not and for which libvirt (hookcheck.py), the leases held with their
domains and since when, whether each domain still runs (as the hook judges it, alive.py), the CPUs
isolated and by which method (a cpuset partition, or today's isolation: tasks, IRQs and workqueues
moved off), each held CPU's power state as sysfs reads it now (governor, EPP, frequency floor, the
deepest idle state left: hoststate/power.py), what the host was before (the saved baseline: each
value and what the hook set), the values a stop could not restore, the reaper (reaper.py), and the
last lines of the hook's log (journald's ``vmtune-hook`` lines, else syslog's files). The state is
read as the doctor reads it (statedir.peek): never locked, never written.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field

from .. import cpuset
from . import hookcheck, reaper
from ..hoststate import alive
from ..hoststate.power import held
from ..hoststate.document import Damaged, State
from ..hoststate.record import Record
from ..hoststate.statedir import STATE_FILE, peek

LOG_FILES = ("var/log/syslog", "var/log/daemon.log", "var/log/messages")
LOG_TAIL = 1 << 20  # bytes of a syslog file read from its end
IDENT = "vmtune-hook"


@dataclass
class LeaseStatus:
    name: str
    uuid: str
    profile: str
    cpus: str
    since: float
    dedicated: bool
    qemu: int | None  # its QEMU's pid, once started
    partition: str  # the CPUs its vCPU groups hold as isolated partitions
    stale: str | None  # why its domain no longer runs (the next hook call or reap releases it)


@dataclass
class HookStatus:
    hook: hookcheck.HookFile
    state_file: str
    state_error: str | None = None  # the state cannot be read (damaged, permission): the hook refuses
    leases: list[LeaseStatus] = field(default_factory=list)
    isolated: str = ""  # every CPU the hook keeps the host's work off
    partition: str = ""  # those held as isolated cpuset partitions
    method: str = ""  # [hook] isolate
    power_scope: str = ""  # [hook] power_scope
    power: list[dict] = field(default_factory=list)  # each held CPU's power state now (power.CpuPower), and its lease
    before: list[dict] = field(default_factory=list)  # the saved baseline: {"path", "before", "after"}
    unrestored: list[dict] = field(default_factory=list)
    reaper: dict = field(default_factory=dict)
    log_source: str | None = None
    log: list[str] = field(default_factory=list)

    @property
    def active(self) -> bool:
        """The host is tuned for at least one latency domain."""
        return bool(self.leases)

    def to_dict(self) -> dict:
        return {"active": self.active, "hook": self.hook.to_dict(), "state_file": self.state_file,
                "state_error": self.state_error, "leases": [vars(lease) for lease in self.leases],
                "isolated": self.isolated, "partition": self.partition, "isolate": self.method,
                "power_scope": self.power_scope, "power": self.power,
                "before": self.before, "unrestored": self.unrestored, "reaper": self.reaper,
                "log": {"source": self.log_source, "lines": self.log}}

    def lines(self, now: float | None = None) -> list[str]:
        now = time.time() if now is None else now
        hook = self.hook
        if not hook.exists:
            head = "not installed"
        else:
            head = "installed" + (f", {len(self.leases)} lease(s) held: the host is tuned" if self.leases else
                                  ", no lease held: the host is as it was")
        out = [f"vmtune hook: {head}"]
        if hook.exists:
            via = f" -> {hook.target}" if hook.target else ""
            out.append(f"  hook:      {hook.path}{via} ({hook.interpreter or 'no #! line'})")
        libvirt = f"libvirt {hook.libvirt}" if hook.libvirt else "libvirt: version unknown"
        if hook.reads_qemu_d is not None:
            libvirt += " (reads qemu.d)" if hook.reads_qemu_d else " (does not read qemu.d: 6.5 or later does)"
        if hook.daemon:
            libvirt += f"; {hook.daemon} running since {_when(hook.daemon_since, now)}"
        out.append(f"  libvirt:   {libvirt}")
        out += [f"  problem:   {p}" for p in hook.problems() if hook.exists]
        if self.state_error:
            out.append(f"  state:     {self.state_file}: {self.state_error}")
        for i, lease in enumerate(self.leases):
            what = (f"{lease.name}  {lease.profile or '?'}  CPUs {lease.cpus or '-'}"
                    f"{'' if lease.dedicated else ' (shared)'}  since {_when(lease.since, now)}")
            what += f"  QEMU pid {lease.qemu}" if lease.qemu else "  QEMU not started yet"
            if lease.stale:
                what += f"  STALE: {lease.stale}"
            out.append(("  leases:    " if i == 0 else "             ") + what)
        if self.isolated:
            how = f"; as partitions: {self.partition}" if self.partition else ""
            out.append(f"  isolated:  CPUs {self.isolated} (isolate = {self.method}{how})")
        for i, cpu in enumerate(self.power):
            lead = "  power:     " if i == 0 else "             "
            out.append(f"{lead}CPU {cpu['cpu']} ({cpu['lease']}): {cpu['text']}")
        for i, line in enumerate(_grouped(self.before)):
            out.append(("  before:    " if i == 0 else "             ") + line)
        for i, line in enumerate(_grouped(self.unrestored)):
            out.append(("  not back:  " if i == 0 else "             ") + line)
        out.append(f"  reaper:    {self.reaper.get('says', '?')}")
        if self.log:
            out.append(f"  log ({self.log_source}):")
            out += [f"    {line}" for line in self.log]
        else:
            out.append(f"  log:       {self.log_source or 'none found (the hook logs to syslog, facility daemon)'}")
        return out


def _when(stamp: float | None, now: float) -> str:
    if not stamp:
        return "?"
    ago = max(0, int(now - stamp))
    span = f"{ago // 86400} d" if ago >= 86400 else f"{ago // 3600} h" if ago >= 3600 else \
        f"{ago // 60} min" if ago >= 60 else f"{ago} s"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) + f" ({span} ago)"


_CPU = re.compile(r"cpu(\d+)(?=/)")


def _grouped(records: list[dict]) -> list[str]:
    """One line per value, the CPUs of a per-CPU value that was the same on each folded into one."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for rec in records:
        match = _CPU.search(rec["path"])
        pattern = _CPU.sub("cpu{}", rec["path"], count=1) if match else rec["path"]
        groups.setdefault((pattern, rec["before"], rec["after"]), []).append(int(match.group(1)) if match else -1)
    out = []
    for (pattern, before, after), cpus in groups.items():
        path = pattern.replace("{}", f"[{cpuset.format(frozenset(c for c in cpus if c >= 0))}]")
        out.append(f"{path}: was {before.strip() or '(empty)'}, set to {after.strip() or '(empty)'}")
    return out


def _records(records: list[Record]) -> list[dict]:
    return [{"path": r.key.text, "before": r.before, "after": r.after} for r in records]


def status(cfg, roots, hooks_dir: str | None = None, log_lines: int = 5) -> HookStatus:
    """What the hook is doing now on the host of ``roots`` (see the module)."""
    root = roots.root or "/"
    now = HookStatus(hookcheck.inspect(hooks_dir, root), os.path.join(roots.state, STATE_FILE),
                     method=str(cfg.hook.isolate), power_scope=str(cfg.hook.power_scope))
    state = peek(roots.state, roots.sysfs, owners=root == "/")
    if isinstance(state, (Damaged, str)):
        now.state_error = str(state)
    elif isinstance(state, State):
        _read_state(now, state, roots)
    found = reaper.status(root, root == "/" and roots.systemd)
    how = found.cron or (f"{reaper.TIMER} " + ("active" if found.active else "enabled" if found.enabled else
                                               "installed, not enabled") if found.timer else None)
    now.reaper = {"timer": found.timer, "enabled": found.enabled, "active": found.active, "cron": found.cron,
                  "reaps": found.reaps, "says": how or "not installed: stale leases wait for the next hook call"}
    if log_lines > 0:
        now.log_source, now.log = hook_log(log_lines, root)
    return now


def _read_state(now: HookStatus, state: State, roots) -> None:
    now.power = held(roots.sysfs, state.leases)
    stale, _blind = alive.stale(roots.libvirt, roots.proc, state.leases, time.time())
    for key, lease in sorted(state.leases.items(), key=lambda item: item[1].since):
        now.leases.append(LeaseStatus(lease.name, key, lease.profile, cpuset.format(lease.cpus), lease.since,
                                      lease.dedicated, lease.qemu.pid if lease.qemu else None,
                                      cpuset.format(lease.partition), stale.get(key)))
    if state.isolation is not None:
        now.isolated = cpuset.format(state.isolation.cpus)
    now.partition = cpuset.format(frozenset().union(*(lease.partition for lease in state.leases.values())))
    now.before = _records(state.baseline or [])
    now.unrestored = _records(state.unrestored)


def hook_log(count: int, root: str = "/") -> tuple[str | None, list[str]]:
    """The hook's last ``count`` log lines and where they came from: journald (where systemd runs
    on this machine), else the first syslog file that has any."""
    if root == "/" and os.path.isdir("/run/systemd/system") and shutil.which("journalctl"):
        try:
            done = subprocess.run(["journalctl", "-q", "--no-pager", "-o", "short-iso", "-n", str(count),
                                   "-t", IDENT], capture_output=True, text=True, timeout=5, check=False)
        except (OSError, subprocess.SubprocessError):
            done = None
        if done is not None and done.returncode == 0:
            return f"journalctl -t {IDENT}", done.stdout.splitlines()[-count:]
    for name in LOG_FILES:
        path = os.path.join(root, name)
        try:
            with open(path, "rb") as fh:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - LOG_TAIL))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        lines = [line for line in text.splitlines() if f"{IDENT}[" in line]
        if lines:
            return path, lines[-count:]
    return None, []
