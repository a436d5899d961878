"""Whether a leased domain still runs, from libvirt's own status files (the hook must not call libvirt).

libvirt keeps ``NAME.xml`` (the live status, with the domain's ``<uuid>``) and ``NAME.pid`` for every
running QEMU domain in its state dir: ``/run/libvirt/qemu`` for the system daemon (monolithic or
virtqemud), ``$XDG_RUNTIME_DIR/libvirt/qemu/run`` for a session daemon. ``$VMTUNE_LIBVIRT_RUNDIR``
overrides it (tests, unusual hosts).

A lease is stale when its domain has no status file (and the lease is older than ``GRACE_S``: a
domain that is starting has passed ``prepare`` before libvirt writes its status), when the status
file names another UUID, or when the pid in ``NAME.pid`` is gone or is not a QEMU started for that
name. When the state dir itself does not exist, nothing is known and nothing is stale.
"""

from __future__ import annotations

import os
import re

GRACE_S = 120.0
PROC = "/proc"  # the pids in libvirt's files are this machine's, whatever proc root the hook is given
UUID = re.compile(rb"<uuid>\s*([0-9a-fA-F-]{32,36})\s*</uuid>")


def rundir(runfs: str = "/run") -> str:
    explicit = os.environ.get("VMTUNE_LIBVIRT_RUNDIR")
    if explicit:
        return explicit
    if os.geteuid() != 0 and os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "libvirt", "qemu", "run")
    return os.path.join(runfs, "libvirt", "qemu")


def _read(path: str, limit: int = 1 << 20) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError:
        return None


def why_stale(folder: str, proc: str, key: str, name: str, since: float, now: float) -> str | None:
    """Why the lease ``key`` (a UUID, or ``name:NAME``) of domain ``name`` is stale; None while it
    runs or nothing can be known."""
    if not os.path.isdir(folder) or not name or "/" in name or "\x00" in name or name in (".", ".."):
        return None
    status = _read(os.path.join(folder, f"{name}.xml"))
    if status is None:
        return None if now - since < GRACE_S else f"libvirt has no status file {name}.xml: not running"
    found = UUID.search(status)
    if found and not key.startswith("name:") and found.group(1).decode().lower() != key.lower():
        return f"the running {name} is another domain (UUID {found.group(1).decode()})"
    pid = (_read(os.path.join(folder, f"{name}.pid")) or b"").strip()
    if not pid.isdigit():
        return None  # starting: no pid yet
    cmdline = _read(os.path.join(proc, pid.decode(), "cmdline"))
    if cmdline is None:
        return f"its QEMU (pid {pid.decode()}) is gone"
    if not cmdline:
        return None  # a process that is just starting (or a zombie its parent reaps soon): ask again later
    args = cmdline.split(b"\0")
    wanted = name.encode()
    if not any(a == wanted or a.startswith(b"guest=" + wanted + b",") or a == b"guest=" + wanted for a in args):
        return f"pid {pid.decode()} is not its QEMU"
    return None
