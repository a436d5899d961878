"""The reaper: ``vmtune-reap.timer`` runs ``vmtune hook reap`` once a minute, so that a lease whose
domain died without a release (libvirtd down, QEMU crashed, a release killed) does not keep the
host tuned until the next hook call, which on a quiet host can be days away.

``vmtune hook install`` writes two units into ``/etc/systemd/system`` (or ``--unit-dir DIR``):

- ``vmtune-reap.service``: ``Type=oneshot``; ``ExecStart`` runs ``vmtune hook reap --quiet
  --hooks-dir HOOKS_DIR`` with the interpreter the hook uses (its ``#!`` line), so both read the
  same ``vmtune.env`` and find the same state;
- ``vmtune-reap.timer``: every minute on the minute and one minute after boot, ``WantedBy=timers.target``.

Where systemd runs (``RUNFS/systemd/system`` exists) and the units went to a folder it reads,
install reloads it and enables the timer (``enable --now``); elsewhere it says so in one line and
gives the equivalent cron line (or what to do with units written elsewhere). A unit
file of that name that is not vmtune's (no ``SIGNATURE`` line) is never overwritten nor removed.
``vmtune hook uninstall`` stops the timer and removes both units.

``idle`` is the reap's fast path: with no state file, or one that holds nothing (no lease, no saved
host state, no isolation, nothing left to restore), the reap has nothing to do and exits before
anything heavy is imported (vmtune/__main__.py), as the hook does for an untagged domain. Standard
library only at import time.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import MutableMapping

UNIT_DIR = "/etc/systemd/system"
UNIT_DIRS = (UNIT_DIR, "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
SERVICE = "vmtune-reap.service"
TIMER = "vmtune-reap.timer"
SIGNATURE = "# vmtune reaper"
STATE_MAX = 16 << 20  # bytes of state.json the fast path reads; a larger one goes the full way
CRON_FILE = "/etc/cron.d/vmtune"
CRON_PLACES = ("etc/crontab", "etc/cron.d", "var/spool/cron/crontabs", "var/spool/cron")

SERVICE_TEXT = """\
{signature}: `vmtune hook install` writes this file, `vmtune hook uninstall` removes it.
[Unit]
Description=vmtune: restore the host tuning of latency domains that no longer run

[Service]
Type=oneshot
ExecStart={command}
"""

TIMER_TEXT = """\
{signature}: `vmtune hook install` writes this file, `vmtune hook uninstall` removes it.
[Unit]
Description=vmtune: reap stale leases of latency domains once a minute

[Timer]
OnBootSec=1min
OnCalendar=minutely
AccuracySec=1s

[Install]
WantedBy=timers.target
"""


def command(python: str | None = None, hooks_dir: str | None = None) -> list[str]:
    """The reap as the timer runs it: the hook's interpreter, ``-m vmtune hook reap``, quiet unless
    there is something to say, with the hook's ``vmtune.env``."""
    from .hookfile import DEFAULT_HOOKS_DIR

    return [python or sys.executable, "-m", "vmtune", "hook", "reap", "--quiet",
            "--hooks-dir", os.path.abspath(hooks_dir or DEFAULT_HOOKS_DIR)]


def _unit_word(arg: str) -> str:
    """``arg`` as one word of a unit's ``ExecStart`` (systemd.service(5): quotes, ``%%``, ``$$``)."""
    text = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{text}"' if not text or any(c.isspace() or c in "'\";" for c in arg) else text


def _cron_word(arg: str) -> str:
    import shlex

    return shlex.quote(arg).replace("%", "\\%")  # cron reads % as a newline


def units(python: str | None = None, hooks_dir: str | None = None) -> dict[str, str]:
    """The two unit files' names and texts (the same for the same arguments)."""
    words = " ".join(_unit_word(arg) for arg in command(python, hooks_dir))
    return {SERVICE: SERVICE_TEXT.format(signature=SIGNATURE, command=words),
            TIMER: TIMER_TEXT.format(signature=SIGNATURE)}


def cron_line(python: str | None = None, hooks_dir: str | None = None) -> str:
    """The line of ``/etc/cron.d/vmtune`` that does what the timer does."""
    return "* * * * * root " + " ".join(_cron_word(arg) for arg in command(python, hooks_dir))


def ours(path: str) -> bool | None:
    """True if ``path`` is a unit vmtune wrote, False if it is someone else's, None if there is none."""
    if not os.path.lexists(path):
        return None
    try:
        with open(path, "rb") as fh:
            return SIGNATURE.encode() in fh.read(1 << 16)
    except OSError:
        return False


def check(unit_dir: str | None = None) -> None:
    """InvalidInput (one line) when a unit of the reaper's names in ``unit_dir`` is not vmtune's."""
    from ..errors import InvalidInput

    for name in (SERVICE, TIMER):
        path = os.path.join(unit_dir or UNIT_DIR, name)
        if ours(path) is False:
            raise InvalidInput(f"{path} exists and is not vmtune's; not overwritten")


def install(unit_dir: str | None, python: str | None, hooks_dir: str | None, systemd: bool) -> list[str]:
    """Write both units (atomically, 0644; never over someone else's) and, where ``systemd`` runs,
    reload it and enable the timer now. Returns what was done, one line each; InvalidInput (one
    line) when a unit is someone else's or systemctl fails."""
    from .. import atomic
    from ..errors import InvalidInput

    folder = unit_dir or UNIT_DIR
    check(folder)
    try:
        os.makedirs(folder, mode=0o755, exist_ok=True)
        for name, text in units(python, hooks_dir).items():
            atomic.replace(os.path.join(folder, name), text.encode("utf-8"), 0o644)
    except OSError as exc:
        raise InvalidInput(f"cannot write the reaper's units in {folder}: {exc.strerror or exc}") from None
    done = [f"installed {os.path.join(folder, SERVICE)} and {TIMER}"]
    if not systemd:
        return done + [f"systemd is not running here, so {TIMER} is not enabled: reap once a minute from cron "
                       f"instead, with this line in {CRON_FILE}: {cron_line(python, hooks_dir)}"]
    if os.path.abspath(folder) not in UNIT_DIRS:
        return done + [f"{folder} is not a folder systemd reads, so {TIMER} is not enabled: copy both units to "
                       f"{UNIT_DIR}, then `systemctl enable --now {TIMER}`"]
    _systemctl(["daemon-reload"], ["enable", "--now", TIMER])
    return done + [f"enabled and started {TIMER}: stale leases are reaped within a minute"]


def uninstall(unit_dir: str | None, systemd: bool) -> list[str]:
    """Stop and disable the timer (where systemd runs) and remove both units; a unit of those names
    that is not vmtune's is left alone, and said so. Returns what was done, one line each."""
    from ..errors import InvalidInput

    folder = unit_dir or UNIT_DIR
    paths = [os.path.join(folder, name) for name in (SERVICE, TIMER)]
    done = [f"{path} is not vmtune's: left alone" for path in paths if ours(path) is False]
    mine = [path for path in paths if ours(path)]
    if not mine:
        return done
    if systemd and ours(paths[1]):
        _systemctl(["disable", "--now", TIMER])
    for path in mine:
        try:
            os.unlink(path)
        except OSError as exc:
            raise InvalidInput(f"cannot remove {path}: {exc.strerror or exc}") from None
    if systemd:
        _systemctl(["daemon-reload"])
    return done + [f"removed {' and '.join(mine)}" + (f"; {TIMER} stopped" if systemd else "")]


def _systemctl(*calls: list[str]) -> None:
    from ..errors import InvalidInput
    from ..host.systemd import systemctl

    for args in calls:
        try:
            systemctl(*args)
        except OSError as exc:
            raise InvalidInput(str(exc).splitlines()[0] if str(exc) else f"systemctl {' '.join(args)} failed") \
                from None


# -- what the doctor reads ----------------------------------------------------------------------------

class Status:
    """Whether the reaper is there: its timer file (or None), enabled and active (None: not known),
    and a cron line that runs ``vmtune hook reap`` (or None). (A plain class: this module is
    imported by the reap's fast path, which imports nothing it can do without.)"""

    __slots__ = ("timer", "enabled", "active", "cron")

    def __init__(self, timer: str | None, enabled: bool | None, active: bool | None, cron: str | None):
        self.timer, self.enabled, self.active, self.cron = timer, enabled, active, cron

    @property
    def reaps(self) -> bool | None:
        """True when something reaps; False when nothing does; None when it cannot be told."""
        if self.cron or (self.timer and self.active):
            return True
        if self.timer and self.active is None:
            return None if self.enabled is None else self.enabled
        return False


def status(root: str = "/", systemd: bool = False) -> Status:
    """The reaper on the host at ``root`` (``/``: this machine, where systemctl is asked too)."""
    timer = next((os.path.join(root, d.lstrip("/"), TIMER) for d in UNIT_DIRS
                  if ours(os.path.join(root, d.lstrip("/"), TIMER))), None)
    enabled = active = None
    if timer is not None:
        enabled = os.path.lexists(os.path.join(root, UNIT_DIR.lstrip("/"), "timers.target.wants", TIMER))
        if systemd and root == "/":
            active = _asked("is-active", "active")
            enabled = _asked("is-enabled", "enabled") or enabled
    return Status(timer, enabled, active, _cron(root))


def _asked(verb: str, want: str) -> bool | None:
    import subprocess

    try:
        done = subprocess.run(["systemctl", verb, TIMER], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() == want


def _cron(root: str) -> str | None:
    """The first crontab line under ``root`` that runs ``vmtune hook reap``, if any."""
    for place in CRON_PLACES:
        path = os.path.join(root, place)
        files = [os.path.join(path, f) for f in sorted(os.listdir(path))] if os.path.isdir(path) else [path]
        for name in files:
            try:
                with open(name, "rb") as fh:
                    lines = fh.read(1 << 16).decode("utf-8", "replace").splitlines()
            except OSError:
                continue
            for line in lines:
                if "hook reap" in line and "vmtune" in line and not line.lstrip().startswith("#"):
                    return f"{name}: {line.strip()}"
    return None


# -- the fast path ------------------------------------------------------------------------------------

NOTHING = "nothing to reap: no lease is held"


def fast(args: list[str], environ: MutableMapping[str, str]) -> int | None:
    """``vmtune hook reap ARGS`` when it has nothing to do: 0, after one line (none with ``--quiet``).
    ``environ``: the process's environment, to which the hooks dir's ``vmtune.env`` is added.
    None when the full reap must run: a lease is held, the state is damaged, or ``ARGS`` are not
    the reap's own (the full parser then says what is wrong)."""
    quiet, hooks_dir, rest = False, None, list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("-q", "--quiet"):
            quiet = True
        elif arg == "--hooks-dir" and rest:
            hooks_dir = rest.pop(0)
        elif arg.startswith("--hooks-dir="):
            hooks_dir = arg.partition("=")[2]
        else:
            return None
    from .envfile import hooks_dir_file, load_env_file
    from .hookfile import DEFAULT_HOOKS_DIR
    from ..roots import STATE_DIR

    load_env_file(hooks_dir_file(hooks_dir or DEFAULT_HOOKS_DIR), environ)
    if not idle(environ.get("VMTUNE_STATE_DIR") or STATE_DIR):
        return None
    if not quiet:
        print(NOTHING)
    return 0


def idle(state_dir: str) -> bool:
    """True when a reap has nothing to do: no state file and no copy of one, or a state file that
    holds nothing. Anything else (a lease, a damaged or unreadable file) is for the full reap."""
    path = os.path.join(state_dir, "state.json")
    if not os.path.lexists(path):
        return not os.path.lexists(os.path.join(state_dir, "baseline.json"))
    try:  # without blocking or following a link: a FIFO or a symlink there is damage, for the full reap
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > STATE_MAX:
            return False
        raw = os.read(fd, STATE_MAX + 1)
        import json

        doc = json.loads(raw)
    except (OSError, ValueError):
        return False
    finally:
        os.close(fd)
    return (isinstance(doc, dict) and doc.get("version") in (1, 2) and doc.get("leases") == {}
            and doc.get("baseline") is None and doc.get("isolation") is None and doc.get("unrestored") == [])
