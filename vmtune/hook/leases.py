"""The hook's state: one lease per running latency domain, and the host baseline.

``$VMTUNE_STATE_DIR/state.json`` (default ``/run/vmtune``, so a reboot starts clean)::

    {"version": 1,
     "leases": {"<uuid>": {"name": "db1", "profile": "latency", "cpus": "2-3", "since": 1700000000.0,
                           "hugepages": {"0:2048": {"need": 512, "added": 100}},
                           "cstates": [{"path": "...", "before": "0", "after": "1"}, ...]}},
     "baseline": [{"path": "...", "before": "powersave", "after": "performance"}, ...] | null,
     "isolation": {"cpus": "2-3", "irqs": "0-40", "pairs": [...], "records": {...}}}

``cpus`` are the host CPUs the domain's vCPUs are pinned to. ``baseline`` is what the first lease
changed on the host (hoststate.apply's records); it is null while no lease holds the host tuned.
``hugepages`` (domains backed by hugepages) holds, per ``node:size`` pool, the pages the domain
needs and the pages its prepare added (hugepages.py). ``cstates`` (``cstate_scope = "pinned"``) are
the C-state records of the lease's CPUs; when the lease goes, records of CPUs that another lease
still pins pass to that lease, the others are restored. ``isolation`` (absent while no CPU is
isolated) is what the hook moved off the leases' CPUs: the isolated CPUs, and per moved task, IRQ,
workqueue mask or cgroup its value before and after (isolation/__init__.py).

Journal first: before the hook writes a sysfs value it commits the records it is about to create,
marked ``"pending": true`` (knobs) or ``"raising"``/``"lowering": {"from": nr, "to": nr}`` (pools).
The final commit replaces them with what the kernel read back. A hook killed in between leaves the
journal, and the next call under the lock settles it against sysfs (lifecycle.py), so the release
still restores exactly what was changed. Keys are only ever added, so older readers still work.
Every read-modify-write happens under an exclusive ``flock`` on ``lock`` in the same directory, and
the file is replaced atomically (temporary file, fsync, rename), so two hooks running at once never
lose a lease or save the baseline twice.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .. import cpuset

log = logging.getLogger("vmtune.hook")

DEFAULT_DIR = "/run/vmtune"
STATE_FILE = "state.json"
LOCK_FILE = "lock"
VERSION = 1


def state_dir() -> str:
    return os.environ.get("VMTUNE_STATE_DIR") or DEFAULT_DIR


@dataclass
class State:
    leases: dict[str, dict] = field(default_factory=dict)
    baseline: list[dict[str, str]] | None = None
    isolation: dict | None = None

    def to_dict(self) -> dict:
        out = {"version": VERSION, "leases": self.leases, "baseline": self.baseline}
        if self.isolation is not None:
            out["isolation"] = self.isolation
        return out

    def held_cpus(self, but: str | None = None) -> frozenset[int]:
        """Every CPU a lease's vCPUs are pinned to (``but``: leaving out that lease)."""
        return frozenset().union(*(cpuset.parse(lease.get("cpus", "")) for key, lease in self.leases.items()
                                   if key != but))

    def find(self, uuid: str | None, name: str | None) -> str | None:
        """The key of the lease for this domain: by UUID, else by name."""
        if uuid and uuid in self.leases:
            return uuid
        for key, lease in self.leases.items():
            if name and lease.get("name") == name:
                return key
        return None

    def add(self, uuid: str, name: str, profile: str, cpus: frozenset[int]) -> dict:
        """Record (or renew) the lease; a renewed lease keeps the records of what it changed."""
        old = self.leases.get(uuid) or {}
        lease = {"name": name, "profile": profile, "cpus": cpuset.format(cpus), "since": time.time()}
        for kept in ("hugepages", "cstates"):
            if old.get(kept):
                lease[kept] = old[kept]
        self.leases[uuid] = lease
        return lease

    def conflicts(self, uuid: str, cpus: frozenset[int]) -> list[tuple[str, frozenset[int]]]:
        """(other domain's name, shared CPUs) for every other lease whose pins overlap ``cpus``."""
        out = []
        for key, lease in sorted(self.leases.items(), key=lambda kv: kv[1].get("name", "")):
            if key == uuid:
                continue
            shared = cpus & cpuset.parse(lease.get("cpus", ""))
            if shared:
                out.append((lease.get("name", key), frozenset(shared)))
        return out


class Store:
    """The state file in ``folder``; ``dry_run`` reads but never writes (nor creates the folder)."""

    def __init__(self, folder: str | None = None, dry_run: bool = False):
        self.folder = folder or state_dir()
        self.dry_run = dry_run
        self.path = os.path.join(self.folder, STATE_FILE)

    def read(self) -> State:
        """The state as it is on disk (no lock: for looking, not for changing)."""
        try:
            with open(self.path, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return State()
        except (OSError, ValueError) as exc:
            return self._corrupt(exc)
        if not isinstance(data, dict) or not isinstance(data.get("leases", {}), dict):
            return self._corrupt(ValueError("not a vmtune state object"))
        isolation = data.get("isolation")
        return State(leases=dict(data.get("leases") or {}), baseline=data.get("baseline"),
                     isolation=isolation if isinstance(isolation, dict) else None)

    def _corrupt(self, exc: Exception) -> State:
        log.error("state file %s is unreadable (%s); starting from an empty state", self.path, exc)
        if not self.dry_run:
            try:
                os.replace(self.path, f"{self.path}.corrupt-{int(time.time())}")
            except OSError:
                pass
        return State()

    @contextmanager
    def locked(self) -> Iterator[State]:
        """Hold the exclusive lock and yield the current state; ``commit`` it before leaving."""
        if self.dry_run and not os.path.isdir(self.folder):
            yield State()
            return
        if not self.dry_run:
            os.makedirs(self.folder, mode=0o755, exist_ok=True)
        flags = os.O_RDONLY if self.dry_run else os.O_RDWR | os.O_CREAT
        try:
            fd = os.open(os.path.join(self.folder, LOCK_FILE), flags | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:  # dry run, no lock file yet: nobody has written state here
            yield self.read()
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self.read()
        finally:
            os.close(fd)  # closing drops the lock

    def commit(self, state: State) -> None:
        """Replace the state file atomically (call while holding ``locked``)."""
        if self.dry_run:
            log.info("dry run: state not written (%d lease(s))", len(state.leases))
            return
        fd, tmp = tempfile.mkstemp(prefix=".state-", suffix=".tmp", dir=self.folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(state.to_dict(), fh, indent=1, sort_keys=True)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        try:
            dfd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
