"""The state folder: ``state.json`` in ``Roots.state`` (``$VMTUNE_STATE_DIR``, default ``/run/vmtune``,
so a reboot starts clean), read and written only under an exclusive ``flock`` on ``lock`` beside it.

The state's shape, reader and validator are in document.py. ``StateDir`` adds the file handling:

- the folder must be a directory (not a symlink) owned by root (or by the user running the tests)
  with mode 0755 or less; anything else is refused with one line (``Unsafe``);
- the lock and the state files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and must be regular
  files (a FIFO never blocks the hook); a state file must be owned by root (or the user running
  the tests) with mode 0755 or less, as the folder, or it is damage;
- the lock wait is capped (``lock_timeout``, ``[hook] lock_timeout_s``, 30 s by default), then one
  line names the pid that holds it (``LockTimeout``);
- temporary files a killed commit left (``.state-*.tmp``) are removed under the lock;
- a commit replaces ``state.json`` atomically (atomic.replace). The last commit of a hook call
  (``final``) also replaces ``baseline.json``, a second copy of the completed state. When
  ``state.json`` is damaged the original host values are still there (``vmtune hook reap``);
- a damaged ``state.json`` (not a regular file, not the hook's, not JSON, out of shape, missing
  while ``baseline.json`` holds leases or is damaged itself) raises ``Damaged``; it is never
  replaced by an empty state, and no baseline is taken over it. Only ``set_aside``, under the lock,
  moves it, to a name no other set-aside copy has.

Journal first: before the hook writes a sysfs value it commits the records it is about to create
(``pending`` knobs, ``raising``/``lowering`` pool steps, isolation records). A hook killed in
between leaves the journal, and the next call under the lock settles it against sysfs
(leases.py), so the release still restores exactly what was changed.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .. import atomic, cpuset
from ..config import HookSettings
from ..host.sysfs import cpu_limit
from .document import Damaged, State, read_state

log = logging.getLogger("vmtune.hoststate")

STATE_FILE = "state.json"
BASELINE_FILE = "baseline.json"
LOCK_FILE = "lock"
TMP_PREFIX = ".state-"
LOCK_TIMEOUT_S = HookSettings.lock_timeout_s
DEFAULT_CPU_LIMIT = cpuset.MAX_HOST_CPUS

PERMISSION_DENIED = "permission denied"

__all__ = ["BASELINE_FILE", "STATE_FILE", "Damaged", "LockTimeout", "State", "StateDir", "Unsafe", "peek"]


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a file"


class Unsafe(Exception):
    """The state folder is not one the hook may trust (one line)."""


class LockTimeout(Exception):
    """Another process held the state lock past the wait cap (one line naming it)."""


def lock_holder(fd: int) -> str:
    """``pid N (comm)`` of the process holding the flock on ``fd``'s file (``/proc/locks``)."""
    info = os.fstat(fd)
    # /proc/locks names a file as MAJOR:MINOR:INODE, the device numbers in hex (fs/locks.c)
    file_id = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            for line in fh:
                words = line.split()
                if len(words) >= 6 and words[1] == "FLOCK" and words[5] == file_id:
                    pid = words[4]
                    try:
                        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as comm:
                            return f"pid {pid} ({comm.read().strip()})"
                    except OSError:
                        return f"pid {pid}"
    except OSError:
        pass
    return "an unknown process"


class StateDir:
    """The state files in ``folder``; ``dry_run`` reads but never writes (nor creates the folder).

    ``limit`` bounds the CPU ids the state may name (the host's possible CPUs); ``sysfs`` is the
    root every knob path must resolve inside. ``owners``: whether a file's owner and mode are
    checked (the doctor reading a captured tree, which any user may have copied, does not).
    """

    def __init__(self, folder: str, dry_run: bool = False, sysfs: str | None = None,
                 limit: int = DEFAULT_CPU_LIMIT, lock_timeout: float = LOCK_TIMEOUT_S, owners: bool = True):
        self.folder = folder
        self.dry_run = dry_run
        self.owners = owners
        self.sysfs = sysfs
        self.limit = limit
        self.lock_timeout = lock_timeout
        self.path = os.path.join(self.folder, STATE_FILE)
        self.baseline_path = os.path.join(self.folder, BASELINE_FILE)

    # -- reading -------------------------------------------------------------------------------
    def _load(self, path: str) -> State | None:
        """The state in ``path``; None when there is no such file; Damaged when it cannot be trusted:
        not a regular file (a FIFO would block, so nothing waits on it), written by another user or
        writable by others (the test as for the folder), not JSON, out of shape."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            what = "a symlink" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
            raise Damaged(f"{path}: {what}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Damaged(f"{path}: {_kind(st.st_mode)}, not a regular file")
            if self.owners and (st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o7777 & ~0o755):
                raise Damaged(f"{path}: owned by uid {st.st_uid} with mode {st.st_mode & 0o7777:04o}, not written by "
                              "the hook (want owned by root, mode 0755 or less)")
            with os.fdopen(os.dup(fd), "rb") as fh:
                raw = fh.read()
        except OSError as exc:
            raise Damaged(f"{path}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise Damaged(f"{path}: not JSON ({'empty' if not raw.strip() else exc})") from None
        try:
            return read_state(data, self.limit, self.sysfs)
        except Damaged as exc:
            raise Damaged(f"{path}: {exc}") from None

    def read(self) -> State:
        """The state as it is on disk (no lock: for looking; ``locked`` for changing). Damaged if it
        cannot be trusted, and so when ``state.json`` is missing while ``baseline.json`` holds
        leases or cannot be read itself: no state is assumed empty over a copy that may not be."""
        try:
            state = self._load(self.path)
        except Damaged as exc:
            try:
                good = self._load(self.baseline_path) is not None
            except Damaged:
                good = False
            raise Damaged(str(exc), advice=None if good else self._lost(f"{self.baseline_path} cannot be read "
                                                                        "either")) from None
        if state is not None:
            return state
        try:
            copy = self._load(self.baseline_path)
        except Damaged as exc:
            raise Damaged(f"{self.path} is missing and {exc}", advice=self._lost()) from None
        if copy is not None and not copy.empty:
            raise Damaged(f"{self.path} is missing, but {self.baseline_path} holds {len(copy.leases)} lease(s) "
                          "and the host's original values")
        return State()

    def _lost(self, why: str = "") -> str:
        return (f"{why + ': ' if why else ''}`vmtune hook reap` sets the damaged files aside and starts from "
                "empty; first check by hand that the host's governors, C-states, KSM and IRQ masks hold their "
                "original values")

    def read_baseline(self) -> State | None:
        """The copy of the last completed state (``baseline.json``); None if there is none."""
        return self._load(self.baseline_path)

    # -- the folder and the lock ---------------------------------------------------------------
    def check_folder(self) -> bool:
        """Create the folder if needed; Unsafe if it is not a directory the hook may trust.
        False when it does not exist (dry run)."""
        try:
            st = os.lstat(self.folder)
        except FileNotFoundError:
            if self.dry_run:
                return False
            os.makedirs(self.folder, mode=0o755, exist_ok=True)
            os.chmod(self.folder, 0o755)  # whatever the umask made of it
            st = os.lstat(self.folder)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
            raise Unsafe(f"state dir {self.folder} is {kind}: refused (want a directory owned by root, mode 0755 or less)")
        if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o7777 & ~0o755:
            raise Unsafe(f"state dir {self.folder} is owned by uid {st.st_uid} with mode {st.st_mode & 0o7777:04o}: "
                         "refused (want owned by root, mode 0755 or less)")
        return True

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the exclusive lock (wait at most ``lock_timeout``); remove stale temporary files."""
        if not self.check_folder():
            yield
            return
        flags = ((os.O_RDONLY if self.dry_run else os.O_RDWR | os.O_CREAT) | os.O_NOFOLLOW | os.O_NONBLOCK
                 | os.O_CLOEXEC)
        path = os.path.join(self.folder, LOCK_FILE)
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:  # dry run, no lock file yet: nobody has written state here
            yield
            return
        except OSError as exc:
            raise Unsafe(f"lock {path}: {'a symlink' if exc.errno == errno.ELOOP else exc.strerror}: refused") from None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise Unsafe(f"lock {path}: {_kind(mode)}, not a regular file: refused")
            self._wait(fd, path)
            if not self.dry_run:
                self._sweep()
            yield
        finally:
            os.close(fd)  # closing drops the lock

    def _wait(self, fd: int, path: str) -> None:
        deadline = time.monotonic() + self.lock_timeout
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"the state lock {path} is held by {lock_holder(fd)} for more than "
                                      f"{self.lock_timeout:g} s") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)

    def _sweep(self) -> None:
        """Remove the temporary files of commits that were killed (we hold the lock: none is live)."""
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        for name in names:
            if name.startswith(TMP_PREFIX) and name.endswith(".tmp"):
                try:
                    os.unlink(os.path.join(self.folder, name))
                except OSError:
                    pass

    @contextmanager
    def locked(self) -> Iterator[State]:
        """Hold the lock and yield the current state (Damaged if it cannot be trusted)."""
        with self.lock():
            yield self.read()

    # -- writing -------------------------------------------------------------------------------
    def commit(self, state: State, final: bool = False) -> None:
        """Replace the state file atomically (call while holding the lock); ``final`` (the last
        commit of a hook call) also replaces the copy in ``baseline.json``."""
        if self.dry_run:
            log.info("dry run: state not written (%d lease(s))", len(state.leases))
            return
        # one line, by json's C encoder: an indent makes json encode in Python, at 4x the cost, in
        # every commit of every hook call (`vmtune status` and `python3 -m json.tool` show it laid out)
        text = json.dumps(state.to_json(), sort_keys=True) + "\n"
        try:  # never write what the next call could not read: the file on disk stays the last good one
            read_state(json.loads(text), self.limit, self.sysfs)
        except Damaged as exc:
            raise OSError(errno.EINVAL, f"{self.path}: not written: it would not read back: {exc}") from None
        data = text.encode("utf-8")
        atomic.replace(self.path, data, 0o644, prefix=TMP_PREFIX)
        if final:
            atomic.replace(self.baseline_path, data, 0o644, prefix=TMP_PREFIX)

    def set_aside(self, path: str) -> str:
        """Move a damaged file (``self.path`` or ``self.baseline_path``) to a name no other set-aside
        copy has; return that name. Call under the lock."""
        stamp = f"{time.strftime('%Y%m%dT%H%M%S')}.{time.time_ns() % 10**9:09d}.{os.getpid()}"
        target = f"{path}.damaged-{stamp}"
        os.rename(path, target)
        return target


def peek(folder: str, sysfs: str | None = None, owners: bool = True) -> State | Damaged | str | None:
    """The state in ``folder`` as the hook reads it, for looking only (never locked nor written):
    None when neither ``state.json`` nor ``baseline.json`` is there; Damaged when the hook would
    refuse it; ``PERMISSION_DENIED`` when it cannot be read. ``sysfs``: the tree whose CPUs bound
    the ids (None: the default bound). The doctor and ``vmtune map`` read it this way."""
    if not os.path.lexists(os.path.join(folder, STATE_FILE)) and not os.path.lexists(
            os.path.join(folder, BASELINE_FILE)):
        return None
    store = StateDir(folder, dry_run=True, sysfs=sysfs, limit=cpu_limit(sysfs) if sysfs else DEFAULT_CPU_LIMIT,
                     owners=owners)
    try:
        return store.read()
    except PermissionError:
        return PERMISSION_DENIED
    except Damaged as exc:
        return PERMISSION_DENIED if PERMISSION_DENIED in str(exc).lower() else exc
