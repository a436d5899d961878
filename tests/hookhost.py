"""The host of the reliability trials (test_hook_reliability.py): every kind of write the hook
makes, on a fake tree, and libvirt's run dir.

``build(root, systemd)`` makes, beside fixtures/hook.py's sysfs (4 CPUs with cpufreq, cpuidle, KSM) and
isotrees' IRQs, workqueue mask and cgroup v2 groups:

- a hugepage pool on node 0 behind fixtures/hugepages.py's ``FakeKernel`` (``kernel``): raising
  ``nr_hugepages`` adds free pages, lowering it takes free ones;
- two host tasks under the proc root (``TASKS``). ``TaskAffinity.write`` is a fake ``sched_setaffinity``
  (``fake_task_write``) that sets ``Cpus_allowed_list`` in the task's status file; the real one is
  tried on real processes in test_hook_isolation.py;
- with ``systemd``: ``/run/systemd/system``, and ``systemctl`` answered in-process
  (``FakeSystemctl``) from one file per unit under ``run/units`` (its ``AllowedCPUs``), so the
  units' values are part of the tree that is compared.

``Libvirt`` is libvirt's run dir: a status file, a pid file and a process whose command line is a
QEMU's as libvirt starts it (``-name guest=NAME`` with QEMU's ``,,`` escaping, ``-uuid UUID``) for
every domain that runs. Processes are kept for reuse: starting one costs more than a hook call.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from isotrees import build as build_iso
from fixtures.hugepages import FakeKernel
from fixtures.wait import wait_until

from vmtune.hoststate.kinds import Item, Pool

POOL = "0:2048"
POOL_KEY = Pool(0, 2048)
TASKS = {7001: "backup", 7002: "sshd"}
UNITS = ("init.scope", "system.slice", "user.slice")


def put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def build(root: Path, systemd: bool = False) -> FakeKernel:
    """The fake host's extra parts (see the module); returns the hugepage kernel to install as
    ``base.write_file``."""
    build_iso(root, systemd=systemd)
    for pid, comm in TASKS.items():
        stat = f"{pid} ({comm}) S 1 1 1 0 -1 0 " + " ".join(["0"] * 12) + " 4242 0 0"
        put(root / "proc" / str(pid) / "task" / str(pid) / "stat", stat)
        put(root / "proc" / str(pid) / "task" / str(pid) / "status", f"Name:\t{comm}\nCpus_allowed_list:\t0-3")
    if systemd:
        for unit in UNITS:
            put(root / "run" / "units" / unit, "")
    kernel = FakeKernel(root / "sys", root / "proc")
    kernel.pool(POOL)
    return kernel


def fake_task_write(proc: Path):
    """``TaskAffinity.write`` for the fake tasks: the new affinity goes into the task's status file."""
    def write(self, item: Item, raw: str) -> None:
        status = Path(item.where)  # the task's status file (hoststate/kinds/tasks.py)
        text = status.read_text()
        head = text.split("Cpus_allowed_list:", 1)[0]
        status.write_text(f"{head}Cpus_allowed_list:\t{raw.strip()}\n")
    return write


class FakeSystemctl:
    """``systemctl show -p AllowedCPUs --value UNIT`` and ``set-property --runtime UNIT AllowedCPUs=X``."""

    def __init__(self, folder: Path):
        self.folder = folder

    def __call__(self, *args: str) -> str:
        if args[:1] == ("show",):  # as systemd prints a CPU set: ranges joined by spaces
            return (self.folder / args[-1]).read_text().replace(",", " ")
        if args[:2] == ("set-property", "--runtime"):
            (self.folder / args[2]).write_text(args[3].split("=", 1)[1] + "\n")
            return ""
        raise OSError(f"systemctl {' '.join(args)}: not faked")


def pool_files() -> list[str]:
    return [POOL_KEY.file(leaf) for leaf in ("nr_hugepages", "free_hugepages")]


class Libvirt:
    """libvirt's run dir: ``start(name, uuid)`` writes NAME.xml and NAME.pid for a process whose
    command line is that domain's QEMU; ``stop(name)`` removes them; ``kill(name)`` ends the QEMU
    and leaves them (a QEMU that died)."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(exist_ok=True)
        self.pool: dict[tuple[str, str, bool], subprocess.Popen] = {}

    def qemu(self, name: str, uuid: str, with_uuid: bool = True) -> subprocess.Popen:
        key = (name, uuid, with_uuid)
        if key not in self.pool or self.pool[key].poll() is not None:
            args = ["-name", f"guest={name.replace(',', ',,')},debug-threads=on"]
            args += ["-uuid", uuid] if with_uuid else []
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", *args])
            # the parent of a vfork may run before the exec has set the command line: wait, as libvirt does
            wait_until(Path(f"/proc/{proc.pid}/cmdline").read_bytes, 30, f"{name}'s QEMU to have its command line",
                       interval=0.001)
            self.pool[key] = proc
        return self.pool[key]

    def start(self, name: str, uuid: str, with_uuid: bool = True) -> None:
        proc = self.qemu(name, uuid, with_uuid)
        (self.folder / f"{name}.xml").write_text(f"<domstatus><domain><name>{name}</name><uuid>{uuid}</uuid>"
                                                 "</domain></domstatus>\n")
        (self.folder / f"{name}.pid").write_text(f"{proc.pid}\n")

    def stop(self, name: str) -> None:
        for ext in ("xml", "pid"):
            (self.folder / f"{name}.{ext}").unlink(missing_ok=True)

    def kill(self, name: str) -> None:
        pid = int((self.folder / f"{name}.pid").read_text())
        for proc in self.pool.values():
            if proc.pid == pid:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        for proc in self.pool.values():
            proc.kill()
            proc.wait()
        self.pool.clear()


def memory_dir(fallback: Path) -> Path:
    """A folder on a memory filesystem when there is one (a trial is a few hook calls, each a few
    file writes), else ``fallback``."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        import tempfile

        return Path(tempfile.mkdtemp(prefix="vmtune-sweep-", dir=shm))
    return fallback
