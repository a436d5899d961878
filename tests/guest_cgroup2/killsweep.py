"""A SIGKILL at each partition write of ``started`` and ``release``, for real, in the test guest:

    scripts/cgroup2-guest -- python3 tests/guest_cgroup2/killsweep.py

With ``[hook] isolate = "partition"``, each trial takes a lease of the stand-in domain
(scenario.py), then runs the installed hook under ``strace -e inject=write:signal=KILL:when=N``
restricted (``-P``) to the partition's files (every ``cpuset.cpus.exclusive`` from
``machine.slice`` down and the vCPU group's ``cpuset.cpus.partition``), so the kernel kills the
hook at its N-th write of them; then libvirt's usual order follows (after a kill in ``started``:
``started`` again, then the release; after one in ``release``: ``release`` again), and every unit's
``AllowedCPUs``, runtime drop-in, ``cpuset.*`` file and task affinity must be as before the
lease. N runs from 1 until a trial's hook is no longer killed. Prints one line a trial and the
number of kill points covered; exits with the number that did not end exact.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scenario as sc  # noqa: E402


def hook_killed(op: str, sub: str, at: int, paths: list[Path]) -> bool:
    hook_file = next((sc.HOOKS / "qemu.d").iterdir())
    argv = ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=write", "-e", f"inject=write:signal=KILL:when={at}"]
    for p in paths:
        argv += ["-P", str(p)]
    proc = subprocess.run([*argv, str(hook_file), sc.NAME, op, sub, "-"], input=sc.DOMAIN, capture_output=True,
                          text=True, check=False)
    return proc.returncode in (-9, 137)


def trial(op: str, at: int, work: Path) -> tuple[bool, bool]:
    """(the hook was killed, the host ended exact)."""
    skip = (sc.MACHINE,)
    before = sc.snapshot(skip)
    dom = sc.Domain(work)
    sc.hook("prepare", "begin", {})
    dom.start()
    lv = sc.SCOPE / "libvirt"
    paths = [g / "cpuset.cpus.exclusive" for g in (sc.MACHINE, sc.SCOPE, lv, lv / "vcpu0")]
    paths.append(lv / "vcpu0" / "cpuset.cpus.partition")
    if op == "started":
        killed = hook_killed("started", "begin", at, paths)
        sc.hook("started", "begin", {})
    else:
        sc.hook("started", "begin", {})
    sc.hook("stopped", "end", {})
    dom.stop()
    if op == "release":
        killed = hook_killed("release", "end", at, paths)
    sc.hook("release", "end", {})
    failed = len(sc.failures)
    sc.compare(before, sc.snapshot(skip), f"kill {at} in {op}")
    return killed, len(sc.failures) == failed


def main() -> int:
    work = Path("/run/vmtune-killsweep")
    work.mkdir(exist_ok=True)
    sc.CONFIG.parent.mkdir(parents=True, exist_ok=True)
    sc.CONFIG.write_text('reserved_cpus = "0"\n[hook]\nisolate = "partition"\n')
    sc.sh("vmtune", "hook", "install", "--no-timer")
    covered = bad = 0
    for op in ("started", "release"):
        for at in range(1, 20):
            killed, exact = trial(op, at, work)
            print(f"killsweep: {op} kill at partition write {at}: {'killed' if killed else 'not reached'}, "
                  f"{'exact' if exact else 'NOT EXACT'}", flush=True)
            bad += not exact
            if not killed:
                break
            covered += 1
    print(f"killsweep: {covered} kill points covered, {bad} not exact", flush=True)
    os.system("vmtune hook uninstall --no-timer >/dev/null 2>&1")  # noqa: S605,S607
    return bad


if __name__ == "__main__":
    sys.exit(main())
