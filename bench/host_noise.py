"""Case ``host-noise``: what still stalls a held CPU, measured with oslat (rt-tests) while a lease holds it.

``host-isolation`` measures a busy probe's deadlines; this case measures the CPU itself, the way
real-time people do: oslat (Debian package ``rt-tests``, installed here with apt-get when missing)
spins on the held CPU (the last online one, as in ``host-isolation``: the domain's vCPU pin) and
reads the TSC in a tight loop; every iteration's gap is one sample, and a gap is time the loop did
not run: an interrupt, a softirq, another task, the hypervisor. It runs as
``oslat -c CPU -C CPU0 -D SECONDS -b 1024 --json=FILE`` (default scheduling class, like a vCPU
thread; the main thread on another CPU). oslat 2.40 has no bucket width option (``-W`` came later),
so the histogram has 1024 buckets of 1 us: bucket ``N`` counts gaps of [N-1, N) us, the last one
everything from 1023 us up. oslat's ``Maximum`` is the exact largest gap (to the microsecond, not
bucketed). A stall over X us is one sample of X us or more (the buckets labelled above X); stalls
per minute divide their count by oslat's measured duration.

Variants, interleaved (repetition r runs each once, in an order rotated by r):

- ``idle``: oslat alone: the floor;
- ``hogs``: one unpinned busy process per online CPU (the "backup job"), no lease;
- ``lease-isolate-off``: hogs, and a lease through the real hook (hooks/qemu run as libvirt runs
  it, on the real /sys and /proc) with ``[hook] isolate = "off"``;
- ``lease-isolated``: the same with ``isolate = "on"`` and every knob of issue 17 off
  (``isolate_timers``, ``_watchdog``, ``_vmstat``, ``_workqueues``, ``_irqbalance``): the isolation
  as it was before;
- ``lease-isolated-knobs``: the same with everything on (the default);
- ``lease-knobs-irqbalance``: the same, with a real irqbalance (``/usr/sbin/irqbalance``, installed
  when missing without letting the package start it) started by the bench in the foreground with
  ``--interval=2`` before the lease, so the hook bans the held CPU over its socket; killed after the
  repetition. Left out (with the reason in the records) when irqbalance cannot be had, or when an
  irqbalance the bench did not start already runs (it would run under every variant).

One repetition: start the hogs (and irqbalance, then wait ``settle_s`` for its first placement),
take the lease (``prepare begin``), with irqbalance wait ``settle_s`` again (its ban takes effect
after up to two intervals) and ask it for its ban (``setup``), run oslat, release the lease
(``release end``, always, in a ``finally``), stop irqbalance, kill the hogs. The hook's exit code
must be 0. Around oslat, /proc/interrupts and /proc/softirqs are read: their growth on the held CPU
per second, by source, is the variant's census (the doctor's parsing, vmtune/doctor/noise.py). The
CPU time everybody else used during the repetition is kept as ``foreign_cpu_ms``, as in
``host-isolation``.

The host is left as it was. irqbalance moves IRQs and never moves them back, so every IRQ's
``smp_affinity_list`` is read before the run (and kept in WORK, so a run killed half-way is undone by
the next one), and after each repetition what changed is put back: after the irqbalance variant that
is expected (counted in ``irqbalance_irq_moves_put_back``); after any other, it is a release that did
not give everything back, and is also recorded as a host change. The IRQ affinities,
``default_smp_affinity``, the workqueue masks (global and per workqueue) and
``kernel.timer_migration``, ``kernel.watchdog_cpumask``, ``vm.stat_interval`` are compared at the end
with the start: ``setup.host_restored``. The lease's state and config live in host-isolation's WORK
directory, under its lock: the two cases (and part 1) never run at the same time.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from vmtune import cpuset
from vmtune.doctor import oslat
from vmtune.doctor.noise import read_table
from vmtune.hoststate.kinds import irqbalance as irqbalance_kind

from . import stats
from .common import print_table, spread
from .guests import cleanup_on_signals
from .host_isolation import HOOK, WORK, Host, Unavailable, build_probe, changes, cpu_seconds, foreign, held_cpu
from .host_isolation import watched as isolation_watched

CASE = "host-noise"
FULL = {"rounds": 6, "seconds": 15, "settle_s": 5.0}  # about 11 minutes here
QUICK = {"rounds": 2, "seconds": 1, "settle_s": 1.0}  # about 35 s here
SMOKE = {"rounds": 1, "seconds": 1, "settle_s": 0.5}  # each variant once (the test command's run)
SIZES = {"full": FULL, "quick": QUICK, "smoke": SMOKE}
BUCKETS = oslat.BUCKETS  # oslat -b: 1 us buckets up to 1023 us (the last one holds everything above)
THRESHOLDS_US = (10, 50, 100)
IRQBALANCE = Path("/usr/sbin/irqbalance")
IRQBALANCE_RUN = Path("/run/irqbalance")  # where it binds irqbalance<PID>.sock (the hook's first choice)
IRQBALANCE_INTERVAL_S = 2
VARIANTS = ("idle", "hogs", "lease-isolate-off", "lease-isolated", "lease-isolated-knobs", "lease-knobs-irqbalance")
KNOBS = ("isolate_timers", "isolate_watchdog", "isolate_vmstat", "isolate_workqueues", "isolate_irqbalance")
CONFIGS = {  # the lease variants' [hook] section
    "lease-isolate-off": {"isolate": "off"},
    "lease-isolated": {"isolate": "on", **{k: "off" for k in KNOBS}},
    "lease-isolated-knobs": {"isolate": "on", **{k: "on" for k in KNOBS}},
    "lease-knobs-irqbalance": {"isolate": "on", **{k: "on" for k in KNOBS}},
}
WITH_IRQBALANCE = "lease-knobs-irqbalance"
BASE = "lease-isolate-off"
BEFORE_KNOBS = "lease-isolated"  # the isolation before issue 17: the knobs' own effect is measured against it
SYSCTLS = ("/proc/sys/kernel/timer_migration", "/proc/sys/kernel/watchdog_cpumask", "/proc/sys/vm/stat_interval")
KNOB_FILES = {**{p: p[len("/proc/sys/"):].replace("/", ".") for p in SYSCTLS},
              "/sys/devices/virtual/workqueue/cpumask": "workqueue cpumask"}  # read while oslat runs
SAVED = WORK / "host-noise-before.json"  # the host as the run found it; removed when the run ends
TOP = 6  # census sources shown per variant
BANDS = ((0, 1), (1, 2), (2, 5), (5, 10), (10, 20), (20, 50), (50, 100), (100, 200), (200, 500), (500, 1023),
         (1023, None))  # gaps [lo, hi) us, from the 1 us buckets


class NoiseError(RuntimeError):
    """A hook call failed, oslat did not measure, or irqbalance did not start."""


# -- packages --------------------------------------------------------------------------------------
def _irqbalance_pids() -> set[int]:
    out = set()
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "irqbalance":
                out.add(int(comm.parent.name))
        except OSError:
            pass
    return out


def _apt_install(package: str) -> str:
    """apt-get install PACKAGE, with maintainer scripts kept from starting services (policy-rc.d
    exit 101, as scripts/setup-libvirt does); '' or the end of apt's output."""
    policy = Path("/usr/sbin/policy-rc.d")
    created = not policy.exists()
    if created:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        for cmd in (["apt-get", "update", "-qq"],
                    ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package]):
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
            if proc.returncode:
                return (proc.stdout + proc.stderr).strip()[-800:]
    finally:
        if created:
            policy.unlink(missing_ok=True)
    return ""


def ensure_oslat(log: Callable[[str], None]) -> str:
    """oslat's path, installing rt-tests when missing (root); Unavailable if that fails."""
    found = shutil.which("oslat") or ("/usr/bin/oslat" if os.path.exists("/usr/bin/oslat") else None)
    if found:
        return found
    log(f"{CASE}: installing rt-tests (oslat) with apt-get")
    err = _apt_install("rt-tests")
    found = shutil.which("oslat") or ("/usr/bin/oslat" if os.path.exists("/usr/bin/oslat") else None)
    if not found:
        raise Unavailable(f"needs oslat (Debian package rt-tests); apt-get install rt-tests failed: {err}")
    return found


def ensure_irqbalance(log: Callable[[str], None]) -> str | None:
    """None when irqbalance is (or was made) available; else why not."""
    if IRQBALANCE.exists():
        return None
    log(f"{CASE}: installing irqbalance with apt-get (not started: policy-rc.d)")
    before = _irqbalance_pids()
    err = _apt_install("irqbalance")
    for pid in _irqbalance_pids() - before:  # started by the package despite policy-rc.d: ours to stop
        log(f"{CASE}: the irqbalance package started pid {pid}; stopping it")
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    return None if IRQBALANCE.exists() else f"irqbalance is not installed and apt-get install failed: {err}"


# -- the host's state ------------------------------------------------------------------------------
def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _watched() -> dict:
    """host-isolation's watched state (IRQ affinities, default IRQ mask, global workqueue mask, our
    and init's affinity), and each workqueue's cpumask and the three sysctls the knobs change."""
    out = isolation_watched()
    for f in sorted(Path("/sys/bus/workqueue/devices").glob("*/cpumask")):
        out[str(f)] = _read(str(f))
    for path in SYSCTLS:
        out[path] = _read(path)
    return out


def _put_back(start: dict, now: dict) -> dict:
    """Write back what differs from ``start``: {key: "put back" | error}."""
    done = {}
    for key, (was, is_now) in changes(start, now).items():
        if was is None or is_now is None:  # an IRQ freed or new, a file gone: nothing to write
            continue
        try:
            if key.startswith("irq "):
                Path(f"/proc/irq/{key[4:]}/smp_affinity_list").write_text(was)
            elif key in ("own_affinity", "pid1_affinity"):
                os.sched_setaffinity(0 if key == "own_affinity" else 1, cpuset.parse(was))
            else:
                Path(key).write_text(was)
            done[key] = "put back"
        except (OSError, ValueError) as exc:
            done[key] = f"failed: {exc}"
    return done


def _undo_killed_run(log: Callable[[str], None]) -> dict:
    """A run killed half-way left its start state in SAVED: put the host back to it first."""
    try:
        saved = json.loads(SAVED.read_text())
    except (OSError, ValueError):
        return {}
    now = _watched()
    saved["own_affinity"] = now["own_affinity"]  # the killed process's, not ours
    done = _put_back(saved, now)
    SAVED.unlink(missing_ok=True)
    if done:
        log(f"{CASE}: put back what an earlier, killed run left: {done}")
    return done


# -- one repetition --------------------------------------------------------------------------------
def _census(before: tuple, after: tuple, cpu: int, seconds: float) -> dict:
    """What grew on ``cpu`` between two reads of (/proc/interrupts, /proc/softirqs), per second."""
    out: dict = {"seconds": round(seconds, 3)}
    for (cpus, counts, labels), (cpus2, counts2, _), name in zip(before, after, ("interrupts", "softirqs")):
        rates = {}
        if cpu in cpus and cpu in cpus2:
            for source, values in counts2.items():
                grew = values[cpus2.index(cpu)] - counts.get(source, [0] * len(cpus))[cpus.index(cpu)]
                if grew > 0:
                    rates[labels.get(source, source)] = round(grew / seconds, 2)
        out[f"{name}_per_s"] = dict(sorted(rates.items(), key=lambda kv: -kv[1]))
        out[f"{name}_total_per_s"] = round(sum(rates.values()), 2)
    return out


def _tables() -> tuple:
    return tuple(read_table(_read(f"/proc/{name}")) for name in ("interrupts", "softirqs"))


def oslat_figures(data: dict, cpu: int) -> dict:
    """One oslat --json result -> the figures (raises NoiseError if it did not measure ``cpu``).
    Bucket label N counts gaps of [N-1, N) us; a stall over X us is a gap of X us or more."""
    threads = data.get("thread") or {}
    if len(threads) != 1:
        raise NoiseError(f"oslat measured {len(threads)} threads, not 1: {json.dumps(data)[:400]}")
    t = next(iter(threads.values()))
    if int(t["cpu"]) != cpu:
        raise NoiseError(f"oslat ran on CPU {t['cpu']}, not {cpu}")
    hist = oslat.histogram(t)
    duration = float(t["duration"])
    stalls = {x: oslat.stalls(hist, x) for x in THRESHOLDS_US}
    return {
        "max_us": int(t["max"]), "min_us": int(t["min"]), "avg_us": float(t["avg"]),
        "duration_s": duration, "samples": sum(hist.values()), "counter_mhz": t.get("freq"),
        "p50_us": oslat.quantile(hist, 0.5), "p99_us": oslat.quantile(hist, 0.99),
        "p999999_us": oslat.quantile(hist, 0.999999),
        **{f"stalls_over_{x}us": stalls[x] for x in THRESHOLDS_US},
        **{f"stalls_over_{x}us_per_min": stalls[x] * 60 / duration for x in THRESHOLDS_US},
        "histogram_bands": {(f"{lo}-{hi}us" if hi else f">={lo}us"): sum(v for k, v in hist.items()
                                                                      if lo < k <= (hi or 10 ** 9))
                            for lo, hi in BANDS},
        "oslat_version": data.get("rt_test_version:") or data.get("rt_test_version"),
    }


class Bench:
    """The hook (host-isolation's Host), the hogs, irqbalance and oslat on the held CPU."""

    def __init__(self, host: Host, oslat: str, cpu: int, main_cpu: int):
        self.host, self.oslat, self.cpu, self.main_cpu = host, oslat, cpu, main_cpu

    def measure(self, cfg: dict) -> dict:
        out = WORK / "oslat.json"
        out.unlink(missing_ok=True)
        argv = [self.oslat, "-c", str(self.cpu), "-C", str(self.main_cpu), "-D", str(cfg["seconds"]),
                "-b", str(BUCKETS), f"--json={out}"]
        before, t0 = _tables(), time.monotonic()
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              timeout=cfg["seconds"] + 60, preexec_fn=oslat.dies_with_parent(),
                              check=False)
        wall, after = time.monotonic() - t0, _tables()
        if proc.returncode:
            raise NoiseError(f"oslat exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-800:]}")
        try:
            data = json.loads(out.read_text())
        except (OSError, ValueError) as exc:
            raise NoiseError(f"oslat wrote no JSON to {out}: {exc}") from exc
        return {**oslat_figures(data, self.cpu), "oslat_argv": " ".join(argv),
                "census": _census(before, after, self.cpu, wall)}

    def start_irqbalance(self, settle: float) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith("IRQBALANCE_")}  # its own ban: none
        with open(WORK / "irqbalance.log", "wb") as logf:  # the last one's
            proc = subprocess.Popen([str(IRQBALANCE), "--foreground", f"--interval={IRQBALANCE_INTERVAL_S}"],
                                    stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                    preexec_fn=oslat.dies_with_parent())  # noqa: PLW1509 - one thread
        sock = IRQBALANCE_RUN / f"irqbalance{proc.pid}.sock"
        deadline = time.monotonic() + 10
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                self.stop_irqbalance(proc)
                raise NoiseError(f"irqbalance (pid {proc.pid}) did not make its socket {sock} "
                                 f"(exit {proc.returncode}); see {WORK / 'irqbalance.log'}")
            time.sleep(0.05)
        time.sleep(settle)  # its first placement
        return proc

    @staticmethod
    def stop_irqbalance(proc: subprocess.Popen) -> dict:
        alive = proc.poll() is None
        if alive:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return {"pid": proc.pid, "alive_until_stopped": alive, "exit": proc.returncode}

    def ban(self, proc: subprocess.Popen) -> str | None:
        """irqbalance's banned CPUs now (its ``setup`` reply), as a CPU list."""
        try:
            reply = irqbalance_kind.request(str(IRQBALANCE_RUN / f"irqbalance{proc.pid}.sock"), "setup")
        except OSError as exc:
            return f"no answer: {exc}"
        cpus = irqbalance_kind.banned(reply)
        return None if cpus is None else cpuset.format(cpus)

    def repetition(self, variant: str, cfg: dict, hogs: int) -> dict:
        run: dict = {}
        procs: list[subprocess.Popen] = []
        irqb: subprocess.Popen | None = None
        leased = False
        try:
            for _ in range(hogs if variant != "idle" else 0):  # unpinned, like a backup job
                procs.append(subprocess.Popen([str(self.host.probe), "spin"], stdin=subprocess.DEVNULL))
            if variant == WITH_IRQBALANCE:
                irqb = self.start_irqbalance(cfg["settle_s"])
                run["irqbalance_ban_before_lease"] = self.ban(irqb)
            if variant in CONFIGS:
                self.host.config.write_text("[hook]\n" + "".join(f'{k} = "{v}"\n' for k, v in CONFIGS[variant].items()))
                leased = True
                run["prepare"] = self.host.hook("prepare", "begin")
                if run["prepare"]["rc"]:
                    raise NoiseError(f"the hook's prepare exited {run['prepare']['rc']}: "
                                     f"{run['prepare']['stderr'][-800:]}")
            if irqb is not None:
                time.sleep(cfg["settle_s"])  # the ban takes effect after up to two intervals
                run["irqbalance_ban"] = self.ban(irqb)
            run["hog_cpus_during"] = sorted({cpuset.format(frozenset(os.sched_getaffinity(p.pid))) for p in procs})
            now = _watched()
            run["irqs_allowing_cpu"] = sorted((k for k, v in now["irq_affinity"].items()
                                               if self.cpu in cpuset.parse(v)), key=int)
            run["knobs_during"] = {name: now.get(path) for path, name in KNOB_FILES.items()}
            run.update(self.measure(cfg))
        finally:
            try:
                if leased:
                    run["release"] = self.host.release()
            finally:
                if irqb is not None:
                    run["irqbalance"] = self.stop_irqbalance(irqb)
                for p in procs:
                    p.kill()
                for p in procs:
                    p.wait()
        return run


# -- the run ---------------------------------------------------------------------------------------
def run(size: str, log: Callable[[str], None]) -> list[dict]:
    """The host-noise records (without the common context), ``size`` one of ``SIZES``. Raises Unavailable."""
    cpu, cpus = held_cpu("the hook tunes the real /sys; oslat pins and locks memory")
    cfg = SIZES[size]
    oslat = ensure_oslat(log)
    no_irqbalance = ensure_irqbalance(log)
    bench = Bench(Host(build_probe(), cpu), oslat, cpu, min(cpus - {cpu}))
    WORK.mkdir(mode=0o700, exist_ok=True)
    created_run_dir = False
    with open(WORK / ".lock", "w") as lock, cleanup_on_signals():
        fcntl.flock(lock, fcntl.LOCK_EX)  # one run at a time: the lease and the CPUs are shared
        (WORK / "profiles").mkdir(exist_ok=True)
        if bench.host.stale_release():
            log(f"{CASE}: released the lease an earlier run left in {WORK}")
        undone = _undo_killed_run(log)  # what the release did not give back (irqbalance's moves)
        theirs = sorted(_irqbalance_pids())
        if theirs:  # it would run under every variant, and two would fight: no irqbalance variant
            no_irqbalance = f"an irqbalance the bench did not start runs (pid {', '.join(map(str, theirs))})"
            log(f"{CASE}: WARNING: {no_irqbalance}: every variant runs with it")
        variants = VARIANTS if no_irqbalance is None else tuple(v for v in VARIANTS if v != WITH_IRQBALANCE)
        if no_irqbalance:
            log(f"{CASE}: no {WITH_IRQBALANCE} variant: {no_irqbalance}")
        start = _watched()
        SAVED.write_text(json.dumps(start))
        runs: dict[str, list[dict]] = {v: [] for v in variants}
        changed: list[dict] = []
        irq_moves = 0
        try:
            if WITH_IRQBALANCE in variants and not IRQBALANCE_RUN.exists():
                IRQBALANCE_RUN.mkdir(mode=0o755)  # so it binds its socket file there
                created_run_dir = True
            for r in range(cfg["rounds"]):
                for v in variants[r % len(variants):] + variants[:r % len(variants)]:
                    t0 = cpu_seconds()
                    res = bench.repetition(v, cfg, hogs=len(cpus))
                    res.update(foreign(t0, cpu_seconds()))
                    diff = changes(start, _watched())
                    if diff:  # irqbalance's moves (expected), or a release that did not give everything back
                        res["put_back"] = _put_back(start, _watched())
                        expected = {k for k in diff if k.startswith("irq ")} if v == WITH_IRQBALANCE else set()
                        irq_moves += len(expected)
                        res["irqbalance_irq_moves"] = len(expected)
                        unexpected = {k: d for k, d in diff.items() if k not in expected}
                        if unexpected:
                            res["host_changed_after"] = unexpected
                            changed.append({"round": r + 1, "variant": v, "changes": unexpected})
                            log(f"{CASE}: WARNING: after {v}, the host was not as before the run "
                                f"(put back): {unexpected}")
                    runs[v].append(res)
                    log(f"{CASE}: round {r + 1}/{cfg['rounds']} {v:22} max {res['max_us']:6} us  stalls/min "
                        + " ".join(f">={x}us {res[f'stalls_over_{x}us_per_min']:8.0f}" for x in THRESHOLDS_US)
                        + f"  IRQs/s {res['census']['interrupts_total_per_s']:7.0f}  others' CPU "
                          f"{res['foreign_cpu_ms']} ms" + (f"  ban {res.get('irqbalance_ban')}"
                                                           if v == WITH_IRQBALANCE else ""))
        finally:
            final_put_back = _put_back(start, _watched())  # after a failure too: never leave it moved
            if created_run_dir:
                try:
                    IRQBALANCE_RUN.rmdir()
                except OSError:
                    pass
            SAVED.unlink(missing_ok=True)
        after = _watched()
    left = changes(start, after)
    setup = {**cfg, "cpu": cpu, "oslat_main_cpu": bench.main_cpu, "online_cpus": cpuset.format(cpus),
             "hogs": len(cpus), "buckets": BUCKETS, "bucket_width_us": 1, "thresholds_us": list(THRESHOLDS_US),
             "oslat": oslat, "irqbalance": str(IRQBALANCE), "irqbalance_interval_s": IRQBALANCE_INTERVAL_S,
             "irqbalance_variant_skipped": no_irqbalance, "foreign_irqbalance": theirs,
             "domain_xml": bench.host.xml.decode(), "interpreter": sys.executable, "hook": str(HOOK),
             "work_dir": str(WORK), "variants": list(variants), "configs": {v: CONFIGS.get(v) for v in variants},
             "undone_from_killed_run": undone, "host_before": start, "host_after": after,
             "host_changes": changed, "irqbalance_irq_moves_put_back": irq_moves,
             "put_back_at_end": final_put_back, "host_left_changed": left,
             "host_restored": not changed and not left}
    return [_record(v, runs, setup) for v in variants]


def _median_rates(per_run: list[dict], key: str) -> list[list]:
    """Per source, the median rate over repetitions (0 where a repetition saw none), highest first."""
    sources = {s for r in per_run for s in r["census"][key]}
    med = {s: statistics.median(r["census"][key].get(s, 0.0) for r in per_run) for s in sources}
    return [[s, round(v, 2)] for s, v in sorted(med.items(), key=lambda kv: -kv[1]) if v > 0][:TOP]


def _record(variant: str, runs: dict[str, list[dict]], setup: dict) -> dict:
    mine = runs[variant]
    figs = {"max_us": [r["max_us"] for r in mine], "p50_ms": [r["p50_us"] / 1000 for r in mine],
            "p99_ms": [r["p99_us"] / 1000 for r in mine],
            **{f"stalls_over_{x}us_per_min": [r[f"stalls_over_{x}us_per_min"] for r in mine] for x in THRESHOLDS_US},
            "interrupts_per_s": [r["census"]["interrupts_total_per_s"] for r in mine],
            "softirqs_per_s": [r["census"]["softirqs_total_per_s"] for r in mine],
            "foreign_cpu_ms": [r["foreign_cpu_ms"] for r in mine]}
    rec = {
        "case": CASE, "variant": variant,
        "virt_type_note": "no guest: oslat spins on the held CPU, standing in for a busy vCPU",
        "what": (f"oslat on CPU {setup['cpu']} for {setup['seconds']} s per repetition"
                 + ("" if variant == "idle" else f", {setup['hogs']} unpinned busy processes running")
                 + (f", a lease with [hook] {CONFIGS[variant]}" if variant in CONFIGS else "")
                 + (", irqbalance running" if variant == WITH_IRQBALANCE else "")),
        "unit_note": ("max_us: median over repetitions of oslat's maximum gap; stalls_per_min: median over "
                      "repetitions of gaps >= X us per minute; p50_ms/p99_ms: median of each repetition's "
                      "percentile of the loop's gaps (1 us buckets, upper bound)"),
        "p50_ms": statistics.median(figs["p50_ms"]), "p99_ms": statistics.median(figs["p99_ms"]),
        "max_us": statistics.median(figs["max_us"]),
        "stalls_per_min": {f"over_{x}us": statistics.median(figs[f"stalls_over_{x}us_per_min"]) for x in THRESHOLDS_US},
        "spread": {k: spread(v) for k, v in figs.items()},
        "runs": len(mine), "seconds_per_run": setup["seconds"],
        "foreign_cpu_ms_median": statistics.median(figs["foreign_cpu_ms"]),
        "census": {"cpu": setup["cpu"], "interrupts_per_s_median": statistics.median(figs["interrupts_per_s"]),
                   "softirqs_per_s_median": statistics.median(figs["softirqs_per_s"]),
                   "top_interrupts_per_s": _median_rates(mine, "interrupts_per_s"),
                   "top_softirqs_per_s": _median_rates(mine, "softirqs_per_s")},
        "lease": variant in CONFIGS, "config": CONFIGS.get(variant), "irqbalance": variant == WITH_IRQBALANCE,
    }
    for base in (BASE, BEFORE_KNOBS):
        if base != variant and base in runs and (base == BASE or variant in ("lease-isolated-knobs", WITH_IRQBALANCE)):
            rec[f"vs_{base.replace('-', '_')}"] = {
                "max": stats.compare([r["max_us"] for r in runs[base]], figs["max_us"]),
                "stalls_over_10us": stats.compare([r["stalls_over_10us_per_min"] for r in runs[base]],
                                                  figs["stalls_over_10us_per_min"])}
    rec["per_run"] = mine
    rec["setup"] = setup
    return rec


# -- the table -------------------------------------------------------------------------------------
def table(records: list[dict]) -> str:
    """Markdown tables of the records (``python -m bench.host_noise [DIR]`` prints them): per variant
    the median over repetitions (interquartile range; min–max), the comparisons with
    ``lease-isolate-off``, and the census on the held CPU."""
    def fig(s: dict, fmt: str = "{:.0f}") -> str:
        return (f"{fmt} ({fmt}–{fmt}; {fmt}–{fmt})").format(*(s[k] for k in ("median", "q1", "q3", "min", "max")))

    def cmp(c: dict | None) -> str:
        if not c or c.get("ratio") is None:
            return "–"
        if not c.get("ci95"):
            return f"×{c['ratio']:.2f} (too few runs)"
        return f"×{c['ratio']:.2f} [{c['ci95'][0]:.2f}–{c['ci95'][1]:.2f}], p={c['p']:.3f}: {c['verdict']}"
    lines = [("| variant | max µs | stalls ≥10 µs /min | ≥50 µs /min | ≥100 µs /min | max vs isolate-off "
              "| ≥10 µs vs isolate-off | others' CPU ms |"), "|---|---|---|---|---|---|---|---|"]
    for r in records:
        s = r["spread"]
        vs = r.get("vs_lease_isolate_off", {})
        lines.append(f"| {r['variant']} | {fig(s['max_us'])} | {fig(s['stalls_over_10us_per_min'])} | "
                     f"{fig(s['stalls_over_50us_per_min'])} | {fig(s['stalls_over_100us_per_min'])} | "
                     f"{cmp(vs.get('max'))} | {cmp(vs.get('stalls_over_10us'))} | {r['foreign_cpu_ms_median']:.0f} |")
    knobbed = [r for r in records if "vs_lease_isolated" in r]
    if knobbed:
        lines += ["", "| variant | max vs lease-isolated (knobs off) | ≥10 µs vs lease-isolated |", "|---|---|---|"]
        lines += [f"| {r['variant']} | {cmp(r['vs_lease_isolated']['max'])} | "
                  f"{cmp(r['vs_lease_isolated']['stalls_over_10us'])} |" for r in knobbed]
    lines += ["", f"Census on CPU {records[0]['census']['cpu']} during oslat (median per second over repetitions):", "",
              "| variant | IRQs/s | softirqs/s | top IRQ sources /s | top softirqs /s |", "|---|---|---|---|---|"]
    def top(rows: list) -> str:  # "LOC (Local timer interrupts)" -> "LOC"; device IRQs keep their name
        return ", ".join(f"{name if name.startswith('IRQ') else name.split(' (')[0]} {rate:.0f}"
                         for name, rate in rows[:4]) or "–"
    for r in records:
        c = r["census"]
        lines.append(f"| {r['variant']} | {c['interrupts_per_s_median']:.0f} | {c['softirqs_per_s_median']:.0f} | "
                     f"{top(c['top_interrupts_per_s'])} | {top(c['top_softirqs_per_s'])} |")
    setup = records[0]["setup"]
    ran = WITH_IRQBALANCE in setup["variants"]
    lines.append(f"\nhost restored: {setup['host_restored']} (irqbalance's IRQ moves put back: "
                 f"{setup['irqbalance_irq_moves_put_back']}); irqbalance variant: "
                 + ("ran" if ran else f"skipped: {setup['irqbalance_variant_skipped']}"))
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    return print_table(argv, CASE, VARIANTS, table)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
