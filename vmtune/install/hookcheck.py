"""The hook as installed: the file libvirt runs, whether it can run, and whether libvirt reads it.

``inspect(hooks_dir, root)`` looks at ``HOOKS_DIR/qemu.d/50-vmtune`` (vmtune/install/hookfile.py) under the
filesystem ``root`` and, on this machine (``root`` is ``/``), at libvirt: its version (``virtqemud``
or ``libvirtd --version``, else the name of ``libvirt.so.0.MMMmmm.0``) and when its daemon started.
``HookFile.problems()`` says, one line each, why libvirt would not run it: not there, not
vmtune's, not executable, an interpreter that is gone, a libvirt older than 6.5 (which reads only
``HOOKS_DIR/qemu``, not ``qemu.d``), or a daemon that started before the hook was installed (libvirt
looks for hooks when it starts). ``vmtune status`` and the doctor both read it. Read-only.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
from dataclasses import asdict, dataclass

from .hookfile import DEFAULT_HOOKS_DIR, SIGNATURE, hook_path

QEMU_D = (6, 5)  # the first libvirt that runs every executable in HOOKS_DIR/qemu.d
DAEMONS = ("virtqemud", "libvirtd")  # the modular daemon first: where both exist, it runs the QEMU hooks
LIBRARY_GLOBS = ("usr/lib/*/libvirt.so.0.*", "usr/lib64/libvirt.so.0.*", "usr/lib/libvirt.so.0.*")


@dataclass
class HookFile:
    path: str
    exists: bool = False
    ours: bool = False  # it carries vmtune's signature
    target: str | None = None  # where a symlink points (the Debian package installs one)
    executable: bool = False
    interpreter: str | None = None  # its #! line
    interpreter_found: bool = False
    libvirt: str | None = None  # libvirt's version, "9.0.0"; None: not known
    daemon: str | None = None  # the daemon that runs now, and since when (epoch seconds)
    daemon_since: float | None = None
    installed_at: float | None = None  # when the file was made: the later of its mtime and ctime (the link's own)

    @property
    def reads_qemu_d(self) -> bool | None:
        version = parse_version(self.libvirt)
        return None if version is None else version[:2] >= QEMU_D

    @property
    def broken(self) -> bool:
        """libvirt would try to run it and fail, which fails the start of every domain."""
        return self.exists and self.executable and bool(self.interpreter) and not self.interpreter_found

    def problems(self) -> list[str]:
        """Why libvirt would not run the hook (none: it will), one line each."""
        if not self.exists:
            return [f"{self.path} does not exist: the hook is not installed"]
        out = []
        if not self.ours:
            out.append(f"{self.path} is not vmtune's hook (no '{SIGNATURE}' line)")
        if not self.executable:
            out.append(f"{self.path} is not executable: libvirt skips it (chmod 755)")
        if self.interpreter and not self.interpreter_found:
            out.append(f"its interpreter {self.interpreter} is gone: libvirt fails every domain's start while "
                       "it cannot run the hook; `vmtune hook install` writes it again for the Python that runs "
                       "vmtune now")
        if self.reads_qemu_d is False:
            out.append(f"libvirt {self.libvirt} runs only HOOKS_DIR/qemu, not qemu.d/ (6.5 or later does)")
        if self.daemon_since is not None and self.installed_at is not None and self.daemon_since + 1 < self.installed_at:
            out.append(f"{self.daemon} started before the hook was installed: restart it so that it sees the hook")
        return out

    def to_dict(self) -> dict:
        return {**asdict(self), "reads_qemu_d": self.reads_qemu_d, "problems": self.problems()}


def parse_version(text: str | None) -> tuple[int, ...] | None:
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(g or 0) for g in match.groups()) if match else None


def inspect(hooks_dir: str | None = None, root: str = "/") -> HookFile:
    """The hook under ``root`` (see the module); libvirt's version and daemon only on this machine."""
    path = str(hook_path(hooks_dir or DEFAULT_HOOKS_DIR))
    found = HookFile(path)
    local = os.path.join(root, path.lstrip("/"))
    try:
        info = os.lstat(local)
    except OSError:
        info = None
    if info is not None:
        # dpkg gives a packaged file (the hook's symlink) the archive's mtime, the package's build; its
        # ctime is when it was made here
        found.installed_at = max(info.st_mtime, info.st_ctime)
        if os.path.islink(local):
            found.target = os.readlink(local)
        found.exists = os.path.exists(local)  # a dangling link is no hook
    if found.exists:
        try:
            with open(local, "rb") as fh:
                head = fh.read(4096).decode("utf-8", "replace")
        except OSError:
            head = ""
        found.ours = SIGNATURE in head
        found.executable = os.access(local, os.X_OK) if root == "/" else bool(os.stat(local).st_mode & 0o111)
        first = head.splitlines()[0] if head else ""
        if first.startswith("#!"):
            found.interpreter = first[2:].strip().split()[0] if first[2:].strip() else None
            if found.interpreter:
                exe = os.path.join(root, found.interpreter.lstrip("/"))
                found.interpreter_found = os.path.isfile(exe) and os.access(exe, os.X_OK)
    found.libvirt = _version(root)
    if root == "/":
        found.daemon, found.daemon_since = _daemon()
    return found


def _version(root: str) -> str | None:
    """libvirt's version: its daemon's answer on this machine, else the library's file name."""
    if root == "/":
        for daemon in DAEMONS:
            try:
                done = subprocess.run([daemon, "--version"], capture_output=True, text=True, timeout=3, check=False)
            except (OSError, subprocess.SubprocessError):
                continue
            version = parse_version(done.stdout)
            if done.returncode == 0 and version:
                return ".".join(map(str, version))
    for pattern in LIBRARY_GLOBS:
        for name in sorted(glob.glob(os.path.join(root, pattern))):
            match = re.search(r"libvirt\.so\.0\.(\d+)\.(\d+)$", name)
            if match:  # 0.9000.0 is 9.0.0, 0.6005.0 is 6.5.0
                number = int(match.group(1))
                return f"{number // 1000}.{number % 1000}.{match.group(2)}"
    return None


def _daemon(run: str = "/run", proc: str = "/proc") -> tuple[str | None, float | None]:
    """The libvirt daemon that runs now (by its pid file) and when it started (epoch seconds)."""
    for daemon in DAEMONS:
        try:
            with open(os.path.join(run, f"{daemon}.pid")) as fh:
                pid = int(fh.read().split()[0])
            with open(os.path.join(proc, str(pid), "stat")) as fh:
                ticks = int(fh.read().rpartition(")")[2].split()[19])
            with open(os.path.join(proc, "stat")) as fh:
                boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
        except (OSError, ValueError, IndexError, StopIteration):
            continue
        return daemon, boot + ticks / os.sysconf("SC_CLK_TCK")
    return None, None
