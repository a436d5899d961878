"""Part 1's tuned guests run with vmtune's hook in the real libvirtd, as users run them.

A user who rewrites a domain with the latency profile also installs the hook: the start of a
latency-tagged domain then goes through ``prepare begin`` (host tuning, hugepage top-up, and the
isolation of the CPUs its vCPUs pin: host tasks, IRQs and unbound workqueues move off them), its
stop through ``release end``. So a part-1 run (bench/guests.py) installs the hook once, before its
first guest, and removes it after its last:

1. ``MARK`` is written first (what this run installed), so a run killed half-way is undone by the
   next run's stale cleanup, or by the part-1 watchdog at once (bench/guests.py);
2. the hook's settings of its own, under ``WORK`` (so no other lease or config is involved): a
   state dir, a config (``reserved_cpus`` as the benchmark's rewrite uses, ``[hook] isolate =
   "on"`` written out, ``on_conflict = "warn"`` so that another session's tagged domain on this
   shared daemon is never refused because of ours, nor ours because of it) and an empty profiles
   dir (the built-in profiles). libvirtd scrubs the hook's environment, so they reach it through
   ``HOOKS_DIR/vmtune.env`` (vmtune/hook/__init__.py), which starts with ``HEADER``;
3. ``.venv/bin/python -m vmtune hook install --hooks-dir /etc/libvirt/hooks --no-timer`` (``qemu.d/50-vmtune``;
   the reaper's timer is not the benchmark's to install);
4. libvirtd restarted so that it sees the hook (no systemd here: SIGTERM to the pid in
   /run/libvirtd.pid, ``libvirtd -d`` without VMTUNE_* variables, until ``virsh version`` answers).

The teardown runs in a ``finally``, after the guests are gone (their stops released their
leases): the hook uninstalled, the env file removed, libvirtd restarted, and then any lease left in
the state dir released with the hook's own ``release end`` (a tagged domain another session
started meanwhile: with the hook gone its release would never come, and the host would stay tuned
and isolated). The host's isolation-relevant settings (IRQ affinities, default IRQ mask, unbound
workqueue mask, pid 1's and our affinity, KSM, C-states, governors) are read before the install
and after the teardown; a difference is logged and kept in the records.

If ``HOOKS_DIR/qemu.d/50-vmtune`` exists before the run, it is someone else's: it is left alone
(not installed again, not removed, libvirtd not restarted) and the records say so. Its state dir
(the ``VMTUNE_STATE_DIR`` of an existing vmtune.env, else /run/vmtune) is still read, so each
tuned boot still says whether it held a lease. A ``vmtune.env`` that is not ours, without the hook
file, is left alone too, and the hook is not installed (it would read someone else's settings).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lxml import etree

from vmtune import cpuset

from .common import ROOT

HOOKS_DIR = Path("/etc/libvirt/hooks")
QEMU_D = HOOKS_DIR / "qemu.d"
HOOK_FILE = QEMU_D / "50-vmtune"
ENV_FILE = HOOKS_DIR / "vmtune.env"
WORK = Path("/run/vmtune-bench-guests")
STATE_DIR = WORK / "hook-state"
CONFIG = WORK / "vmtune.toml"
PROFILES = WORK / "profiles"
MARK = WORK / "hook-installed.json"
HEADER = "# written by vmtune's bench/guests.py for one part-1 run, removed at its end\n"
HOOK_SCRIPT = ROOT / "hooks" / "qemu"
PIDFILE = Path("/run/libvirtd.pid")
URI = "qemu:///system"
DEFAULT_STATE_DIR = Path("/run/vmtune")
NS = "https://vmtune.dev/xmlns/1"
WORKQUEUE_MASK = Path("/sys/devices/virtual/workqueue/cpumask")
DEFAULT_IRQ_MASK = Path("/proc/irq/default_smp_affinity")


class HookError(RuntimeError):
    """Installing or removing the hook, or restarting libvirtd, failed (the message says how)."""


def python() -> str:
    """The interpreter the hook is installed with (it runs under it): the venv's."""
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("VMTUNE_")}


def hook_env(state_dir: Path = STATE_DIR) -> dict[str, str]:
    """The VMTUNE_* settings the hook gets (through ENV_FILE)."""
    return {"VMTUNE_STATE_DIR": str(state_dir), "VMTUNE_CONFIG": str(CONFIG),
            "VMTUNE_PROFILES": str(PROFILES), "VMTUNE_SYSLOG": "0"}


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _env_file_settings() -> dict[str, str]:
    out = {}
    for line in (_read(ENV_FILE) or "").splitlines():
        key, sep, val = line.strip().partition("=")
        if sep and key.strip().startswith("VMTUNE_"):
            out[key.strip()] = val.strip().strip("'\"")
    return out


# -- libvirtd -------------------------------------------------------------------------------------
def _comm(pid: int) -> str | None:
    return _read(Path(f"/proc/{pid}/comm"))


def libvirtd_pids() -> list[int]:
    """The running libvirtd: the pid in its pid file, else what `pgrep -x libvirtd` finds."""
    try:
        pid = int(PIDFILE.read_text().strip())
        if _comm(pid) == "libvirtd":
            return [pid]
    except (OSError, ValueError):
        pass
    proc = subprocess.run(["pgrep", "-x", "libvirtd"], capture_output=True, text=True, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def _answers() -> bool:
    return subprocess.run(["virsh", "-c", URI, "version"], capture_output=True, check=False,
                          stdin=subprocess.DEVNULL).returncode == 0


def restart_libvirtd(log: Callable[[str], None] | None = None, patience: float = 60) -> float:
    """Stop libvirtd (SIGTERM, by pid) and start ``libvirtd -d`` again; seconds until it answers.
    Running guests survive (libvirtd reconnects to them, through the hook's ``reconnect``)."""
    t0 = time.monotonic()
    killed = libvirtd_pids()
    for pid in killed:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and _comm(pid) == "libvirtd":
            if time.monotonic() > deadline:
                raise HookError(f"libvirtd (pid {pid}) did not stop within 30 s of SIGTERM")
            time.sleep(0.1)
    # close_fds (the default): libvirtd must not inherit the benchmark's lock
    proc = subprocess.run([str(ROOT / "scripts" / "libvirtd-start")], env=_clean_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=90, check=False)  # libvirtd -d, until it answers
    if proc.returncode:
        # someone else (scripts/setup-libvirt, a test's restart) started one after ours stopped: it
        # read the hooks dir as it is now, which is all a restart is for
        others = [p for p in libvirtd_pids() if p not in killed]
        if not others:
            raise HookError(f"scripts/libvirtd-start exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-400:]}")
        if log:
            log(f"part 1: libvirtd was started by someone else meanwhile (pid {others[0]}): using it")
    deadline = time.monotonic() + patience
    while not _answers():
        if time.monotonic() > deadline:
            raise HookError(f"libvirtd does not answer {patience:.0f} s after a restart")
        time.sleep(0.2)
    took = time.monotonic() - t0
    if log:
        log(f"part 1: libvirtd restarted ({took:.1f}s)")
    return took


# -- the host's isolation-relevant settings --------------------------------------------------------
def snapshot() -> dict:
    """What the hook's tuning and isolation change, as the host has it now."""
    out: dict = {"pid1_affinity": cpuset.format(frozenset(os.sched_getaffinity(1))),
                 "bench_affinity": cpuset.format(frozenset(os.sched_getaffinity(0))),
                 str(WORKQUEUE_MASK): _read(WORKQUEUE_MASK), str(DEFAULT_IRQ_MASK): _read(DEFAULT_IRQ_MASK),
                 "/sys/kernel/mm/ksm/run": _read(Path("/sys/kernel/mm/ksm/run"))}
    cpu = Path("/sys/devices/system/cpu")
    for f in sorted(cpu.glob("cpu[0-9]*/cpufreq/scaling_governor")) + sorted(cpu.glob("cpu[0-9]*/cpuidle/state*/disable")):
        out[str(f)] = _read(f)
    irqs = {}
    for f in sorted(Path("/proc/irq").glob("*/smp_affinity_list")):
        value = _read(f)
        if value is not None:
            irqs[f.parent.name] = value
    out["irq_affinity"] = irqs
    return out


# what put_back() may write: the isolation's host-wide masks (tasks come and go: never written)
PUT_BACK = (str(WORKQUEUE_MASK), str(DEFAULT_IRQ_MASK))


def leases_anywhere(extra: tuple[Path, ...] = ()) -> list[str]:
    """Leases held in the state dirs this machine's hooks use (ours, the default, host-isolation's)."""
    held = []
    for d in (STATE_DIR, DEFAULT_STATE_DIR, Path("/run/vmtune-bench-isolation/state"), *extra):
        for lease in ((read_state(d) or {}).get("leases") or {}).values():
            held.append(f"{lease.get('name')} ({d})")
    return held


def put_back(before: dict, diff: dict) -> dict:
    """Write back the IRQ affinities and the two masks that differ from ``before``: the last lease
    is gone, so the host must not stay isolated. {what: result}."""
    done = {}
    for key in PUT_BACK:
        if key in diff and before.get(key) is not None:
            done[key] = _write(Path(key), before[key])
    for irq, value in before.get("irq_affinity", {}).items():
        if f"irq {irq}" in diff:
            done[f"irq {irq}"] = _write(Path(f"/proc/irq/{irq}/smp_affinity_list"), value)
    return done


def _write(path: Path, value: str) -> str:
    try:
        path.write_text(value + "\n")
        return f"-> {value}"
    except OSError as exc:
        return f"refused: {exc.strerror or exc}"


def changes(before: dict, after: dict) -> dict:
    """{key: [before, after]} for what differs (per IRQ for the IRQ affinities)."""
    out = {k: [before.get(k), after.get(k)] for k in sorted(set(before) | set(after))
           if k != "irq_affinity" and before.get(k) != after.get(k)}
    b, a = before.get("irq_affinity", {}), after.get("irq_affinity", {})
    out.update({f"irq {i}": [b.get(i), a.get(i)] for i in sorted(set(b) | set(a), key=int) if b.get(i) != a.get(i)})
    return out


# -- the hook's state --------------------------------------------------------------------------
def read_state(state_dir: Path) -> dict | None:
    try:
        return json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None


class Session:
    """The hook as this run found or installed it, and what each boot saw of it."""

    def __init__(self, status: dict, state_dir: Path | None):
        self.status = status
        self.state_dir = state_dir

    @property
    def installed_here(self) -> bool:
        return self.status.get("installed_by") == "this run"

    def during(self, name: str) -> dict:
        """While domain ``name`` runs: its lease in the state file, the isolation, the host masks."""
        out: dict = {"bench_affinity": cpuset.format(frozenset(os.sched_getaffinity(0))),
                     "workqueue_cpumask": _read(WORKQUEUE_MASK), "default_smp_affinity": _read(DEFAULT_IRQ_MASK)}
        if self.state_dir is None:
            return {"lease_held": None, **out}
        state = read_state(self.state_dir) or {}
        leases = state.get("leases") or {}
        mine = [{"uuid": k, **{f: v.get(f) for f in ("profile", "cpus")}} for k, v in leases.items()
                if v.get("name") == name]
        iso = state.get("isolation") or {}
        return {"lease_held": bool(mine), "lease": mine[0] if mine else None, "leases_total": len(leases),
                "isolated_cpus": iso.get("cpus"), "isolation_records": len(iso.get("records") or {}),
                "host_knobs_tuned": len(state.get("baseline") or []), **out}

    def after(self, name: str, wait_s: float = 10) -> dict:
        """After domain ``name`` stopped: its lease gone (libvirt runs ``release end`` as it stops)."""
        if self.state_dir is None:
            return {"lease_released": None}
        deadline = time.monotonic() + wait_s
        while True:
            state = read_state(self.state_dir) or {}
            held = any(v.get("name") == name for v in (state.get("leases") or {}).values())
            if not held or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        iso = state.get("isolation") or {}
        return {"lease_released": not held, "isolated_cpus_after": iso.get("cpus"),
                "leases_after": len(state.get("leases") or {}),
                "bench_affinity_after": cpuset.format(frozenset(os.sched_getaffinity(0)))}


# -- install and teardown ------------------------------------------------------------------------
def _vmtune(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([python(), "-m", "vmtune", *args], cwd=ROOT, env=_clean_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120, check=False)


def _write_mark(mark: dict) -> None:
    tmp = MARK.with_suffix(".tmp")
    tmp.write_text(json.dumps(mark) + "\n")
    os.replace(tmp, MARK)


def _release_left(state_dir: Path, log: Callable[[str], None] | None) -> list[str]:
    """Release every lease still in ``state_dir`` with the hook's own ``release end`` (the hook is
    uninstalled by now: those releases would never come); returns the names."""
    state = read_state(state_dir)
    if not state:
        return []
    done = []
    env = {**_clean_env(), **hook_env(state_dir), "LC_ALL": "C"}
    for key, lease in sorted((state.get("leases") or {}).items()):
        name = str(lease.get("name") or key)
        root = etree.Element("domain")
        etree.SubElement(root, "name").text = name
        if not key.startswith("name:"):
            etree.SubElement(root, "uuid").text = key
        meta = etree.SubElement(root, "metadata")
        etree.SubElement(meta, f"{{{NS}}}tune", nsmap={"vmtune": NS}).set("profile", str(lease.get("profile") or "latency"))
        proc = subprocess.run([python(), str(HOOK_SCRIPT), name, "release", "end", "-"], input=etree.tostring(root),
                              env=env, capture_output=True, timeout=120, check=False)
        done.append(name)
        if log:
            log(f"part 1: WARNING: released the lease of {name!r} left in {state_dir} (hook exit {proc.returncode}) "
                f"{proc.stderr.decode(errors='replace').strip()[-300:]}")
    return done


def teardown(log: Callable[[str], None] | None = None) -> dict | None:
    """Undo what MARK says this (or a killed earlier) run installed; None if nothing. Each step
    runs even when an earlier one failed; a HookError at the end names the failures."""
    try:
        mark = json.loads(MARK.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        mark = {"hook": True, "env": True, "created_qemu_d": False}
    out: dict = {"errors": []}
    if mark.get("hook") and HOOK_FILE.exists():
        proc = _vmtune("hook", "uninstall", "--hooks-dir", str(HOOKS_DIR), "--no-timer")
        out["uninstall"] = (proc.stdout + proc.stderr).strip()
        if proc.returncode:
            out["errors"].append(f"vmtune hook uninstall exited {proc.returncode}: {out['uninstall'][-300:]}")
    if mark.get("env") and (_read(ENV_FILE) or "").startswith(HEADER.strip()):
        ENV_FILE.unlink(missing_ok=True)
    if mark.get("created_qemu_d"):
        try:
            QEMU_D.rmdir()  # only if empty
        except OSError:
            pass
    if mark.get("restart", True):
        try:
            out["libvirtd_restart_s"] = round(restart_libvirtd(log), 1)
        except HookError as exc:
            out["errors"].append(str(exc))
    out["released_left"] = _release_left(STATE_DIR, log)
    if not out["errors"]:
        MARK.unlink(missing_ok=True)
    out["removed"] = not HOOK_FILE.exists() or not mark.get("hook")
    if log:
        log(f"part 1: hook removed{', libvirtd restarted' if 'libvirtd_restart_s' in out else ''}"
            + (f"; ERRORS: {out['errors']}" if out["errors"] else ""))
    return out


def _config_text(reserved: frozenset[int]) -> str:
    return (f'reserved_cpus = "{cpuset.format(reserved)}"\n'
            '[hook]\nisolate = "on"\non_conflict = "warn"\n')


@contextmanager
def installed(reserved: frozenset[int], log: Callable[[str], None],
              before_teardown: Callable[[], list[str]] | None = None) -> Iterator[Session]:
    """The hook installed and seen by libvirtd for the ``with`` body, then removed (see the module
    docstring); a Session whose ``status`` the records carry. ``before_teardown`` removes the
    caller's guests that are left (an interrupted boot), while the hook can still release them."""
    WORK.mkdir(mode=0o700, parents=True, exist_ok=True)
    status: dict = {"hooks_dir": str(HOOKS_DIR), "hook_file": str(HOOK_FILE), "env_file": str(ENV_FILE)}
    if HOOK_FILE.exists():
        theirs = _env_file_settings()
        state_dir = Path(theirs.get("VMTUNE_STATE_DIR") or DEFAULT_STATE_DIR)
        status.update(installed_by="someone else", active="unknown: not installed by this run, left alone",
                      their_env=theirs, state_dir=str(state_dir))
        log(f"part 1: {HOOK_FILE} exists already (someone else's): left alone, libvirtd not restarted; "
            f"reading leases from {state_dir}")
        yield Session(status, state_dir)
        return
    if ENV_FILE.exists() and not (_read(ENV_FILE) or "").startswith(HEADER.strip()):
        status.update(installed_by=None, active=False,
                      why=f"{ENV_FILE} exists and is not this benchmark's: the hook would read its settings")
        log(f"part 1: WARNING: {status['why']}; the hook is NOT installed, tuned guests run without it")
        yield Session(status, None)
        return
    before = snapshot()
    STATE_DIR.mkdir(mode=0o755, exist_ok=True)
    PROFILES.mkdir(mode=0o755, exist_ok=True)
    CONFIG.write_text(_config_text(reserved))
    _write_mark({"hook": True, "env": True, "created_qemu_d": not QEMU_D.exists(), "restart": True})
    status.update(installed_by="this run", active=True, state_dir=str(STATE_DIR), env=hook_env(),
                  config=CONFIG.read_text(), interpreter=python())
    t0 = time.monotonic()
    try:
        ENV_FILE.write_text(HEADER + "".join(f"{k}={v}\n" for k, v in hook_env().items()))
        proc = _vmtune("hook", "install", "--hooks-dir", str(HOOKS_DIR), "--no-timer")
        if proc.returncode:
            raise HookError(f"vmtune hook install exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-400:]}")
        status["install"] = proc.stdout.strip()
        status["libvirtd_restart_s"] = round(restart_libvirtd(), 1)
        log(f"part 1: hook installed ({HOOK_FILE}, state in {STATE_DIR}), libvirtd restarted "
            f"({time.monotonic() - t0:.1f}s)")
        yield Session(status, STATE_DIR)
    finally:
        try:
            left = before_teardown() if before_teardown else []
            if left:
                log(f"part 1: removed before the hook's teardown: {', '.join(left)}")
        finally:
            status["teardown"] = teardown(log)
        status["host_changes"] = changes(before, snapshot())
        status["host_restored"] = not status["host_changes"]
        if status["host_changes"]:
            log(f"part 1: WARNING: after the hook's teardown the host is not as before the install: "
                f"{status['host_changes']}")
            held = leases_anywhere()
            if held:
                log(f"part 1: leases are held ({', '.join(held)}): the host's masks are left as they are")
            else:  # no lease anywhere: nothing may stay isolated
                status["host_put_back"] = put_back(before, status["host_changes"])
                if status["host_put_back"]:
                    log(f"part 1: no lease is held anywhere: put back {status['host_put_back']}")
        errors = (status["teardown"] or {}).get("errors")
        if errors:
            raise HookError("removing the hook: " + "; ".join(errors))
