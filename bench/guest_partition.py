"""What an isolated cpuset partition buys over today's isolation: run inside ``scripts/cgroup2-guest``.

    scripts/cgroup2-guest -- python3 bench/guest_partition.py [--seconds 30] [--rounds 2]

A stand-in domain laid out as libvirt lays it out (tests/guest_cgroup2/scenario.py) holds CPU 2 with
a busy vCPU-like thread (it spins, and sleeps 1 ms every 10 ms). Beside it the host is busy: three
spinning services in system.slice and a burst of short-lived processes. For each ``[hook] isolate``
(off, on, partition), interleaved round by round, the hook takes the lease as libvirt calls it, and
over ``--seconds`` the held CPU's scheduler softirqs (``/proc/softirqs`` SCHED), its timer
softirqs, its total interrupts (``/proc/interrupts``, every row) and the host tasks seen running
there are counted; then the lease is released. Prints one JSON line per (round, method), and a
summary line of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "guest_cgroup2"))
import scenario as sc  # noqa: E402 - the stand-in domain and the hook calls

METHODS = ("off", "on", "partition")


def softirqs(cpu: int) -> dict[str, int]:
    lines = Path("/proc/softirqs").read_text().splitlines()
    cols = lines[0].split()
    i = cols.index(f"CPU{cpu}")
    return {ln.split()[0].rstrip(":"): int(ln.split()[1 + i]) for ln in lines[1:]}


def interrupts(cpu: int) -> int:
    lines = Path("/proc/interrupts").read_text().splitlines()
    i = lines[0].split().index(f"CPU{cpu}")
    total = 0
    for ln in lines[1:]:
        parts = ln.split()
        if len(parts) > i + 1 and parts[1 + i].isdigit():
            total += int(parts[1 + i])
    return total


def visitors(cpu: int, skip: set[int], seconds: float) -> int:
    """Samples (every 50 ms) of host threads seen running on ``cpu`` (state R, field 39)."""
    seen = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for stat in Path("/proc").glob("[0-9]*/task/[0-9]*/stat"):
            try:
                text = stat.read_text()
            except OSError:
                continue
            fields = text.rpartition(")")[2].split()
            if len(fields) > 36 and fields[0] == "R" and int(fields[36]) == cpu and int(stat.parent.name) not in skip:
                seen += 1
        time.sleep(0.05)
    return seen


def measure(method: str, seconds: float, work: Path) -> dict:
    sc.CONFIG.write_text(f'reserved_cpus = "0"\n[hook]\nisolate = "{method}"\n')
    dom = sc.Domain(work)
    sc.hook("prepare", "begin", {})
    dom.start()
    sc.hook("start", "begin", {})
    sc.hook("started", "begin", {})
    skip = {dom.tid}
    burst = subprocess.Popen(["/bin/sh", "-c", "while :; do /bin/true; sleep 0.01; done"])
    try:
        s0, i0 = softirqs(sc.HELD), interrupts(sc.HELD)
        seen = visitors(sc.HELD, skip, seconds)
        s1, i1 = softirqs(sc.HELD), interrupts(sc.HELD)
    finally:
        burst.kill()
        burst.wait()
        sc.hook("stopped", "end", {})
        dom.stop()
        sc.hook("release", "end", {})
    return {"method": method, "seconds": seconds, "sched": s1["SCHED"] - s0["SCHED"], "timer": s1["TIMER"] - s0["TIMER"],
            "interrupts": i1 - i0, "host_samples_on_cpu": seen,
            "partition": sc.read(sc.CG / "cpuset.cpus.isolated")}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work = Path("/run/vmtune-bench")
    work.mkdir(exist_ok=True)
    sc.CONFIG.parent.mkdir(parents=True, exist_ok=True)
    sc.sh("vmtune", "hook", "install", "--no-timer")
    sc.STANDIN = sc.STANDIN.replace("time.sleep(0.01)", "time.sleep(0.001) if time.monotonic() % 0.01 < 0.001 else None")
    hogs = [f"hog{i}.service" for i in range(3)]
    for name in hogs:
        sc.sh("systemd-run", "--quiet", f"--unit={name}", "--", "/bin/sh", "-c", "while :; do :; done")
    results: dict[str, list[dict]] = {m: [] for m in METHODS}
    try:
        for r in range(args.rounds):
            order = METHODS if r % 2 == 0 else tuple(reversed(METHODS))
            for method in order:
                row = measure(method, args.seconds, work)
                row["round"] = r
                results[method].append(row)
                print(json.dumps(row), flush=True)
    finally:
        for name in hogs:
            sc.sh("systemctl", "stop", name, check_rc=False)
        sc.sh("vmtune", "hook", "uninstall", "--no-timer", check_rc=False)
    summary = {m: {k: statistics.median(r[k] for r in rows) for k in ("sched", "timer", "interrupts", "host_samples_on_cpu")}
               for m, rows in results.items()}
    print(json.dumps({"summary": summary, "kernel": os.uname().release, "failed_checks": sc.failures}), flush=True)
    return 1 if sc.failures else 0


if __name__ == "__main__":
    sys.exit(main())
