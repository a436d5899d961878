"""oslat (rt-tests): an OS latency detector that spins on each CPU it is given and reads the TSC in a
tight loop; every iteration's gap is a sample, and a gap is time the loop did not run (an interrupt,
a softirq, another task, the hypervisor). ``vmtune verify`` and bench/host_noise.py run it so:

    oslat -c CPUS -C MAIN -D SECONDS -b 1024 -q --json=FILE

(the default scheduling class, like a vCPU thread; the main thread on a CPU not measured). oslat 2.40
has no bucket width option, so the histogram has 1024 buckets of 1 µs: bucket ``N`` counts gaps of
[N-1, N) µs, the last one everything from 1023 µs up. Its ``max`` is the exact largest gap.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable

from ..errors import Unavailable

BUCKETS = 1024  # 1 µs buckets up to 1023 µs (the last one holds everything above)
PACKAGE = "rt-tests"
PR_SET_PDEATHSIG = 1


def dies_with_parent(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` (for a process started by a single-threaded one): the child gets SIGKILL
    when the process that starts it dies, even of SIGKILL (prctl PR_SET_PDEATHSIG), so that no
    oslat or load hog spins on for the rest of its run after a killed ``vmtune verify``; then
    ``then()``."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the prctl
            os._exit(1)
        if then is not None:
            then()
    return preexec


def find() -> str:
    """oslat's path; Unavailable (exit 4, one line naming the package) where it is not installed."""
    found = shutil.which("oslat") or ("/usr/bin/oslat" if os.path.exists("/usr/bin/oslat") else None)
    if found is None:
        raise Unavailable(f"oslat is not installed: apt-get install {PACKAGE} (dnf install {PACKAGE} on Fedora "
                          "and RHEL)")
    return found


def argv(oslat: str, cpus, main_cpu: int, seconds: float, out: str) -> list[str]:
    from .. import cpuset

    return [oslat, "-c", cpuset.format(cpus), "-C", str(main_cpu), "-D", f"{max(int(round(seconds)), 1)}",
            "-b", str(BUCKETS), "-q", f"--json={out}"]


def run(oslat: str, cpus, main_cpu: int, seconds: float, out: str, preexec_fn=None) -> dict:
    """Run oslat (it dies with this process) and return its JSON; RuntimeError (its stderr's end)
    when it fails."""
    args = argv(oslat, cpus, main_cpu, seconds, out)
    proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          timeout=seconds + 60, preexec_fn=dies_with_parent(preexec_fn), check=False)  # noqa: PLW1509
    if proc.returncode:
        raise RuntimeError(f"oslat exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-800:].strip()}")
    try:
        with open(out, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"oslat wrote no JSON to {out}: {exc}") from exc


def threads(data: dict) -> dict[int, dict]:
    """oslat's JSON -> CPU -> its thread's result."""
    return {int(t["cpu"]): t for t in (data.get("thread") or {}).values()}


def histogram(thread: dict) -> dict[int, int]:
    """A thread's histogram: bucket label (µs, gaps below it) -> samples."""
    return {int(k.rstrip(":")): int(v) for k, v in thread["histogram"].items()}


def quantile(hist: dict[int, int], q: float) -> int:
    """The bucket label under which a share ``q`` of the samples lies (an upper bound, in µs)."""
    total, seen = sum(hist.values()), 0
    for label in sorted(hist):
        seen += hist[label]
        if seen >= q * total:
            return label
    return max(hist)


def stalls(hist: dict[int, int], over_us: int) -> int:
    """The samples of ``over_us`` µs or more (the buckets labelled above it)."""
    return sum(v for k, v in hist.items() if k > over_us)
