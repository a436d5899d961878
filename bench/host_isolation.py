"""Case ``host-isolation``: does the hook's CPU isolation keep host work off a latency VM's CPUs?

While a lease is held, the hook can "isolate" the CPUs a latency domain's vCPUs pin: move the
host's movable tasks, IRQs and unbound workqueues off them (``[hook] isolate = "on"``). This case
measures that on the host itself, no guest needed (root):

- the probe (bench/probe/busyprobe.c, built here with gcc -O2) stands in for a vCPU thread: pinned
  to the last online CPU (the domain's vCPU pin), every 1 ms deadline (absolute, CLOCK_MONOTONIC)
  it consumes 300 us of its own CPU time (CLOCK_THREAD_CPUTIME_ID) and records deadline -> work
  done. Deadlines already past are skipped and counted (``missed``);
- ordinary host work runs at the same time: one unpinned busy process per online CPU (the "backup
  job"), started before the lease and killed after each repetition.

Why a busy probe and not a sleeping timer loop: a thread that mostly sleeps is favoured by the
scheduler when it wakes (it has lag/vruntime credit over a CPU hog), so it preempts the hog at once
nearly every time; only its rare unlucky wakeups show, so its p99.9 moves and its p99 hardly does.
A busy vCPU uses up that credit and competes with the hog as an equal, which is what isolation is
for. Counting thread CPU time (not wall time) makes the work fixed: time the probe spends preempted
adds to its latency instead of counting as work done.

Variants, interleaved (repetition r runs each once, in an order rotated by r):

- ``no-hog``: the probe alone, no lease: the floor;
- ``no-lease``: hogs, no hook call;
- ``lease-isolate-off``: hogs, and a lease taken through the real hook (hooks/qemu run as libvirt
  runs it, on the real /sys and /proc) with ``[hook] isolate = "off"``: today's behaviour;
- ``lease-isolated``: the same with ``isolate = "on"``.

One repetition: start the hogs, take the lease (``prepare begin``), run the probe, release the lease
(``release end``, always, in a ``finally``), kill the hogs. The hook's exit code must be 0; its
stderr is kept. The hook's state dir and config live in WORK; a run that was killed leaves its
lease there, and the next run releases it first (the probe and the hogs die with the benchmark:
PR_SET_PDEATHSIG). The host's IRQ affinities, default IRQ mask and workqueue mask are read before
the run and after every repetition: a change (a release that did not give everything back, or
someone else) is logged and kept in the records (``setup.host_changes``). So is the CPU time
everybody else used during each repetition (``foreign_cpu_ms``: /proc/stat's busy time less ours):
other work on the machine shows up as noise in every variant.

Per repetition: the probe's p50/p99/p99.9/max; a record holds their medians over repetitions and
spread, and for p50 and p99 the comparison (bench/stats.py) with ``lease-isolate-off`` and with
``no-lease``. ``lease-isolated`` also gets its p99 over ``lease-isolate-off``'s (target: at most
1/5).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from vmtune import cpuset

from . import guestimage, stats
from .common import ROOT, print_table, spread
from .guests import cleanup_on_signals

CASE = "host-isolation"
HOOK = ROOT / "hooks" / "qemu"
PROBE_SRC = ROOT / "bench" / "probe" / "busyprobe.c"
WORK = Path("/run/vmtune-bench-isolation")  # the hook's state dir and config: a killed run's lease is found here
FULL = {"rounds": 8, "periods": 3000, "warmup": 300}  # about 2 minutes
QUICK = {"rounds": 2, "periods": 1500, "warmup": 200}  # about 20 s
SMOKE = {"rounds": 1, "periods": 1000, "warmup": 100}  # each variant once (the test command's run)
SIZES = {"full": FULL, "quick": QUICK, "smoke": SMOKE}
WORK_US, PERIOD_US = 300, 1000
TARGET = 0.2  # isolated p99 / non-isolated p99, at most
VARIANTS = ("no-hog", "no-lease", "lease-isolate-off", "lease-isolated")
ISOLATE = {"lease-isolate-off": "off", "lease-isolated": "on"}  # variants that take a lease
BASES = ("lease-isolate-off", "no-lease")
NAME = "bench-iso"
DOMAIN = ("<domain type='kvm'><name>{name}</name><uuid>5e11a7e0-0000-4000-8000-000000000001</uuid>"
          "<metadata><vmtune:tune xmlns:vmtune=\"https://vmtune.dev/xmlns/1\" profile=\"latency\"/></metadata>"
          "<memory unit='MiB'>128</memory><vcpu>1</vcpu><cputune><vcpupin vcpu='0' cpuset='{cpu}'/></cputune>"
          "</domain>")
# what isolation changes; read before the run and after every repetition, so a host left isolated
# is noticed (tasks come and go: only ours and init's affinity are compared)
WATCHED = ("/sys/devices/virtual/workqueue/cpumask", "/proc/irq/default_smp_affinity")


class Unavailable(Exception):
    """The case cannot run here (not root, one CPU, no oslat for host-noise); the message says why."""


class IsolationError(RuntimeError):
    """A hook call failed, or the probe did not measure."""


def held_cpu(why_root: str) -> tuple[int, frozenset[int]]:
    """(the CPU a case's lease holds: the last online one, the online CPUs). Unavailable when not
    root (``why_root`` says why it is needed) or with one CPU."""
    if os.geteuid() != 0:
        raise Unavailable(f"needs root ({why_root})")
    cpus = online_cpus()
    if len(cpus) < 2:
        raise Unavailable(f"needs at least 2 online CPUs (this host has {len(cpus)})")
    return max(cpus), cpus


def online_cpus() -> frozenset[int]:
    return cpuset.parse(Path("/sys/devices/system/cpu/online").read_text())


def build_probe() -> Path:
    """gcc -O2 the probe into the bench cache, keyed by the source and gcc version."""
    if shutil.which("gcc") is None:
        guestimage.ensure_static_gcc()  # installs gcc (root)
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=False).stdout.split("\n")[0]
    key = hashlib.sha256(PROBE_SRC.read_bytes() + gcc.encode()).hexdigest()[:12]
    cache = guestimage.CACHE_DIR
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"host-busyprobe-{key}"
    if not out.exists():
        tmp = Path(tempfile.mkdtemp(dir=cache))
        try:
            proc = subprocess.run(["gcc", "-O2", "-Wall", "-o", str(tmp / "busyprobe"), str(PROBE_SRC)],
                                  capture_output=True, text=True, check=False)
            if proc.returncode:
                raise IsolationError(f"gcc {PROBE_SRC.name}: {proc.stderr.strip()[-800:]}")
            os.replace(tmp / "busyprobe", out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for old in cache.glob("host-busyprobe-*"):
            if old != out:
                old.unlink(missing_ok=True)
    return out


class Host:
    """The hook's files in WORK, the hook calls, the hogs and the probe."""

    def __init__(self, probe: Path, cpu: int):
        self.probe, self.cpu = probe, cpu
        self.xml = DOMAIN.format(name=NAME, cpu=cpu).encode()
        self.config = WORK / "vmtune.toml"
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"), "LC_ALL": "C",
            "VMTUNE_SYSFS": "/sys", "VMTUNE_PROCFS": "/proc", "VMTUNE_STATE_DIR": str(WORK / "state"),
            "VMTUNE_CONFIG": str(self.config), "VMTUNE_PROFILES": str(WORK / "profiles"), "VMTUNE_SYSLOG": "0",
        }

    def hook(self, op: str, subop: str) -> dict:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, str(HOOK), NAME, op, subop, "-"], input=self.xml,
                              capture_output=True, env=self.env, timeout=120, check=False)
        return {"rc": proc.returncode, "s": round(time.monotonic() - t0, 3),
                "stderr": proc.stderr.decode(errors="replace").strip()}

    def release(self) -> dict:
        """``release end``; IsolationError (the host may still be tuned) unless it exits 0."""
        res = self.hook("release", "end")
        if res["rc"]:
            raise IsolationError(f"the hook's release exited {res['rc']}: the host may still be tuned or "
                                 f"isolated; its state is in {WORK}/state: {res['stderr'][-800:]}")
        return res

    def stale_release(self) -> bool:
        """Release what a killed earlier run left in WORK (its config is still there); True if any."""
        try:
            state = json.loads((WORK / "state" / "state.json").read_text())
        except (OSError, ValueError):
            return False
        if not state.get("leases") or not self.config.exists():
            return False
        self.release()
        return True

    def measure(self, cfg: dict) -> dict:
        argv = [str(self.probe), str(self.cpu), str(cfg["periods"]), str(cfg["warmup"]), str(WORK_US), str(PERIOD_US)]
        timeout = (cfg["periods"] + cfg["warmup"]) * PERIOD_US * 4e-6 + 30
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode:
            raise IsolationError(f"busyprobe exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
        return json.loads(proc.stdout)

    def repetition(self, variant: str, cfg: dict, hogs: int) -> dict:
        """Hogs, lease, probe, release, kill the hogs: one variant's figures and what happened."""
        run: dict = {}
        procs: list[subprocess.Popen] = []
        leased = False
        try:
            for _ in range(hogs if variant != "no-hog" else 0):  # unpinned, like a backup job
                procs.append(subprocess.Popen([str(self.probe), "spin"], stdin=subprocess.DEVNULL))
            if variant in ISOLATE:
                self.config.write_text(f'[hook]\nisolate = "{ISOLATE[variant]}"\n')
                leased = True
                run["prepare"] = self.hook("prepare", "begin")
                if run["prepare"]["rc"]:
                    raise IsolationError(f"the hook's prepare exited {run['prepare']['rc']}: "
                                         f"{run['prepare']['stderr'][-800:]}")
            # where the hogs may run now (isolation should have taken the probe's CPU from them)
            run["hog_cpus_during"] = sorted({cpuset.format(frozenset(os.sched_getaffinity(p.pid))) for p in procs})
            run.update(self.measure(cfg))
        finally:
            try:
                if leased:
                    run["release"] = self.release()
            finally:
                for p in procs:
                    p.kill()
                for p in procs:
                    p.wait()
        run["loadavg_1min_after"] = os.getloadavg()[0]
        return run


def cpu_seconds() -> dict[str, float]:
    """The machine's busy and steal CPU seconds (/proc/stat), and what this process and its
    waited-for children (hogs, probe, hook) used: their difference is everybody else's work."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    t = os.times()
    return {"busy": sum(fields[i] for i in (0, 1, 2, 5, 6)) / tick, "steal": fields[7] / tick,
            "ours": t.user + t.system + t.children_user + t.children_system}


def foreign(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    d = {k: after[k] - before[k] for k in before}
    return {"foreign_cpu_ms": round(max(0.0, d["busy"] - d["ours"]) * 1000), "steal_ms": round(d["steal"] * 1000)}


def watched() -> dict:
    out: dict = {"own_affinity": cpuset.format(frozenset(os.sched_getaffinity(0))),
                 "pid1_affinity": cpuset.format(frozenset(os.sched_getaffinity(1)))}
    for path in WATCHED:
        try:
            out[path] = Path(path).read_text().strip()
        except OSError:
            out[path] = None
    irqs = {}
    for f in sorted(Path("/proc/irq").glob("*/smp_affinity_list")):
        try:
            irqs[f.parent.name] = f.read_text().strip()
        except OSError:
            pass
    out["irq_affinity"] = irqs
    return out


def changes(before: dict, after: dict) -> dict:
    """What differs: {key: [before, after]} (per IRQ for the IRQ affinities)."""
    out = {k: [before.get(k), after.get(k)] for k in before if k != "irq_affinity" and before.get(k) != after.get(k)}
    b, a = before["irq_affinity"], after["irq_affinity"]
    out.update({f"irq {i}": [b.get(i), a.get(i)] for i in sorted(set(b) | set(a), key=int) if b.get(i) != a.get(i)})
    return out


def run(size: str, log: Callable[[str], None]) -> list[dict]:
    """The host-isolation records (without the common context), ``size`` one of ``SIZES``. Raises Unavailable."""
    cpu, cpus = held_cpu("the hook tunes the real /sys, and the probe's CPU is isolated")
    cfg = SIZES[size]
    host = Host(build_probe(), cpu)
    WORK.mkdir(mode=0o700, exist_ok=True)
    with open(WORK / ".lock", "w") as lock, cleanup_on_signals():
        fcntl.flock(lock, fcntl.LOCK_EX)  # one run at a time: the lease and the CPUs are shared
        (WORK / "profiles").mkdir(exist_ok=True)
        if host.stale_release():
            log(f"{CASE}: released the lease an earlier run left in {WORK}")
        before = start = watched()
        isolated_at_start = any(v is not None and not int(v.replace(",", ""), 16) >> cpu & 1
                                for v in (before[p] for p in WATCHED))
        if isolated_at_start:  # every variant then runs with the IRQs and workqueues already off it
            log(f"{CASE}: WARNING: CPU {cpu} looks isolated already (left by someone else?): "
                + ", ".join(f"{p} = {before[p]}" for p in WATCHED))
        runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        changed: list[dict] = []
        for r in range(cfg["rounds"]):
            for v in VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]:
                t0 = cpu_seconds()
                res = host.repetition(v, cfg, hogs=len(cpus))
                res.update(foreign(t0, cpu_seconds()))
                runs[v].append(res)
                log(f"{CASE}: round {r + 1}/{cfg['rounds']} {v:17} p50 {res['p50_us']:7.1f} us  p99 "
                    f"{res['p99_us']:7.1f} us  p99.9 {res['p999_us']:7.1f} us  missed {res['missed']:3}  "
                    f"others' CPU {res['foreign_cpu_ms']} ms")
                diff = changes(before, watched())
                if diff:  # a release that did not give everything back (or someone else)
                    res["host_changed_after"] = diff
                    changed.append({"round": r + 1, "variant": v, "changes": diff})
                    log(f"{CASE}: WARNING: after {v}, the host is not as before the run: {diff}")
                    before = watched()  # report each change once
        after = watched()
    setup = {**cfg, "probe_cpu": cpu, "online_cpus": cpuset.format(cpus), "hogs": len(cpus),
             "work_us": WORK_US, "period_us": PERIOD_US, "domain_xml": host.xml.decode(),
             "interpreter": sys.executable, "hook": str(HOOK), "work_dir": str(WORK),
             "hook_has_isolation": importlib.util.find_spec("vmtune.hoststate.isolation") is not None,
             "host_before": start, "host_after": after, "isolated_at_start": isolated_at_start,
             "host_changes": changed, "host_restored": not changed}
    return [_record(v, runs, setup) for v in VARIANTS]


def _record(variant: str, runs: dict[str, list[dict]], setup: dict) -> dict:
    mine = runs[variant]
    figs = {k: [r[f"{k}_us"] / 1000 for r in mine] for k in ("p50", "p99", "p999", "max")}
    rec = {
        "case": CASE, "variant": variant,
        "virt_type_note": "no guest: the probe is a pinned host thread standing in for a busy vCPU",
        "what": (f"deadline -> {WORK_US} us of the probe's own CPU time done, every {PERIOD_US} us, pinned to "
                 f"CPU {setup['probe_cpu']}" + ("" if variant == "no-hog" else
                                                f", {setup['hogs']} unpinned busy processes running")),
        "unit_note": "p50_ms/p99_ms: median over repetitions of each repetition's percentile over its periods",
        "p50_ms": statistics.median(figs["p50"]), "p99_ms": statistics.median(figs["p99"]),
        "p50_us": statistics.median(figs["p50"]) * 1000, "p99_us": statistics.median(figs["p99"]) * 1000,
        "spread": {f"{k}_ms": spread(v) for k, v in figs.items()},
        "runs": len(mine), "periods_per_run": setup["periods"],
        "foreign_cpu_ms_median": statistics.median(r["foreign_cpu_ms"] for r in mine),
        "isolate": ISOLATE.get(variant), "lease": variant in ISOLATE,
    }
    for base in BASES:
        if base != variant:
            rec[f"vs_{base.replace('-', '_')}"] = {
                k: stats.compare([r[f"{k}_us"] for r in runs[base]], [r[f"{k}_us"] for r in mine]) for k in ("p50", "p99")}
    if variant == "lease-isolated":
        off = [r["p99_us"] for r in runs["lease-isolate-off"]]
        ratio = statistics.median(figs["p99"]) * 1000 / statistics.median(off)
        rec["isolation"] = {"p99_over_isolate_off": ratio, "target_at_most": TARGET, "meets_target": ratio <= TARGET,
                            "p99_over_isolate_off_per_round": [a["p99_us"] / b["p99_us"] for a, b in
                                                               zip(mine, runs["lease-isolate-off"], strict=True)]}
    rec["per_run"] = mine
    rec["setup"] = setup
    return rec


def _foreign_median(rec: dict) -> str:
    values = [r["foreign_cpu_ms"] for r in rec["per_run"] if "foreign_cpu_ms" in r]
    return f"{statistics.median(values):.0f}" if values else "–"


def table(records: list[dict]) -> str:
    """A markdown table of the records (``python -m bench.host_isolation [DIR]`` prints it): per
    variant the median over repetitions (interquartile range; min–max), the p99 comparisons, and
    the median CPU time other processes used during a repetition."""
    def fig(s: dict) -> str:
        us = [s[k] * 1000 for k in ("median", "q1", "q3", "min", "max")]
        return "{:.0f} ({:.0f}–{:.0f}; {:.0f}–{:.0f})".format(*us)

    def cmp(c: dict | None) -> str:
        if not c or c.get("ratio") is None:
            return "–"
        ci = f" [{c['ci95'][0]:.2f}–{c['ci95'][1]:.2f}], p={c['p']:.3f}" if c.get("ci95") else ""
        return f"×{c['ratio']:.2f}{ci}: {c['verdict']}"
    lines = ["| variant | p50 µs | p99 µs | p99.9 µs | max µs | p99 vs lease-isolate-off | p99 vs no-lease "
             "| others' CPU ms |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        s = r["spread"]
        lines.append(f"| {r['variant']} | {fig(s['p50_ms'])} | {fig(s['p99_ms'])} | {fig(s['p999_ms'])} | "
                     f"{fig(s['max_ms'])} | {cmp(r.get('vs_lease_isolate_off', {}).get('p99'))} | "
                     f"{cmp(r.get('vs_no_lease', {}).get('p99'))} | {_foreign_median(r)} |")
    for r in records:
        if "isolation" in r:
            iso = r["isolation"]
            lines.append(f"\nisolated p99 / isolate-off p99 = {iso['p99_over_isolate_off']:.3f} "
                         f"(target ≤ {iso['target_at_most']}: {'met' if iso['meets_target'] else 'not met'}); "
                         f"hook has isolation code: {r['setup']['hook_has_isolation']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    return print_table(argv, CASE, VARIANTS, table)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
