"""``vmtune verify``: a measured acceptance of CPUs meant for latency domains, on the user's own host.

oslat (oslat.py) spins on each of the CPUs for ``seconds``; around it the doctor's census
(noise.py) reads ``/proc/interrupts``, ``/proc/softirqs`` and every host thread's run time, so that
each CPU's figures come with what ran there. Per CPU: the largest gap (oslat's exact maximum), the
99th and 99.9th percentiles (upper bounds, from its 1 µs buckets), the stalls of 10, 100 and 1,000 µs
or more, and the sources: IRQs by number and name, the architecture's own interrupts (the local
timer ``LOC``, rescheduling ``RES``, ...), softirqs by kind, threads by name and id with their run
time. The verdict: every CPU's largest gap at most ``max_us``.

``DEFAULT_MAX_US`` is Red Hat's pass mark for oslat in its real-time virtualization guide (20 µs;
cyclictest's is 40 µs). On a virtual machine (this project's test machines are) the hypervisor's own
stalls of a few milliseconds are measured too: the verdict is then a FAIL whatever the host does.

Without ``as_is``, ``held`` takes a lease of verify's own for the CPUs first, through the hook's
own code (vmtune/hoststate/leases.py), as a latency domain's start would: the host's work kept off
them (with ``[hook] isolate_pinned`` on: a task pinned to them alone moves too, so that what is
measured is what a vCPU there would get), power as its profile says; and it releases the lease
however the measurement ends (SIGTERM and Ctrl-C included). The lease is keyed ``verify:PID`` and
records verify's own process: killed (SIGKILL), it is stale at once, and the next hook call or the
reaper gives everything back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import signal
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .. import cpuset
from ..errors import InvalidInput
from ..host.sysfs import online_cpus
from . import noise, oslat
from .findings import Context

DEFAULT_MAX_US = 20  # Red Hat's oslat pass mark (real-time virtualization guide)
DEFAULT_SECONDS = 10
STALLS_US = (10, 100, 1000)
_TASK = re.compile(r"^(?P<comm>.*)\[(?P<tid>\d+)\]$")


@dataclass
class CpuResult:
    """One CPU's figures and what ran there."""

    cpu: int
    max_us: int | None  # oslat's figures; None for a running domain's CPU (no probe runs there)
    p99_us: int | None
    p999_us: int | None
    samples: int | None
    stalls: dict[int, int]  # µs -> samples of that many µs or more
    sources: list[dict] = field(default_factory=list)  # {kind, name, pid?, count, movable?}, the most first

    def to_dict(self) -> dict:
        return {"cpu": self.cpu, "max_us": self.max_us, "p99_us": self.p99_us, "p999_us": self.p999_us,
                "samples": self.samples, "stalls": {f"over_{k}us": v for k, v in self.stalls.items()},
                "sources": self.sources}


@dataclass
class Verification:
    """What ``verify`` measured, and its verdict against ``max_us``."""

    cpus: frozenset[int]
    seconds: float
    max_us: int
    as_is: bool
    results: list[CpuResult]
    tool: str
    domain: str | None = None  # a running domain's CPUs: the census alone (``running``)
    pinned_by: str | None = None  # a defined domain that does not run, whose pinned CPUs these are

    @property
    def passed(self) -> bool:
        if self.domain is not None:  # nothing that could run elsewhere ran on its CPUs
            return not any(s.get("movable") for r in self.results for s in r.sources)
        return all(r.max_us is not None and r.max_us <= self.max_us for r in self.results)

    def to_dict(self) -> dict:
        return {"cpus": [r.to_dict() for r in self.results], "pass": self.passed, "max_us": self.max_us,
                "seconds": self.seconds, "as_is": self.as_is, "tool": self.tool, "domain": self.domain,
                "pinned_by": self.pinned_by}

    def lines(self, shown: int = 3) -> list[str]:
        """A table, a CPU a row, then the verdict."""
        if self.domain is not None:
            return self._census_lines(shown)
        out = [f"{'CPU':>4} {'max µs':>8} {'p99 µs':>7} {'p99.9 µs':>8} {'>10µs':>7} {'>100µs':>7} {'>1ms':>6}"
               "  what ran there (the most first)"]
        for r in self.results:
            what = ", ".join(_said(s) for s in r.sources[:shown]) or "nothing counted"
            if len(r.sources) > shown:
                what += f", +{len(r.sources) - shown} more"
            out.append(f"{r.cpu:>4} {r.max_us:>8} {r.p99_us:>7} {r.p999_us:>8} {r.stalls[10]:>7} {r.stalls[100]:>7} "
                       f"{r.stalls[1000]:>6}  {what}")
        worst = max(self.results, key=lambda r: r.max_us)
        verdict = "PASS" if self.passed else "FAIL"
        whose = f", {self.pinned_by}'s pinned CPUs" if self.pinned_by else ""
        out.append(f"{verdict}: the largest gap is {worst.max_us} µs (CPU {worst.cpu}), the mark {self.max_us} µs, "
                   f"over {self.seconds:g} s {'as the CPUs are' if self.as_is else 'under a lease'}{whose}")
        return out


    def _census_lines(self, shown: int) -> list[str]:
        out = []
        for r in self.results:
            moved = [s for s in r.sources if s.get("movable")]
            what = ", ".join(_said(s) for s in (moved or r.sources)[:shown]) or "nothing counted"
            out.append(f"CPU {r.cpu}: {'could run elsewhere: ' if moved else ''}{what}")
        verdict = "PASS" if self.passed else "FAIL"
        why = ("nothing that could run elsewhere ran there" if self.passed else
               "host work that could run elsewhere ran there (`vmtune status`: is the hook's isolation on?)")
        out.append(f"{verdict}: {self.domain}'s CPUs over {self.seconds:g} s: {why}")
        return out


def _said(source: dict) -> str:
    if source["kind"] == "thread":
        return f"{source['name']}[{source['pid']}] {source['count']} ms"
    return f"{source['name']} ×{source['count']}"


def sources(census: noise.Census, cpu: int, movable: bool = False) -> list[dict]:
    """What ran on ``cpu`` during the census, the most first: IRQs (``irq``, by number and name), the
    architecture's interrupts (``interrupt``), softirqs (``softirq``), threads (``thread``: name, id
    and its run time in ms as ``count``). ``movable``: each IRQ and thread says whether it could run
    elsewhere (the census's judgement: its affinity allows another CPU)."""
    out = []
    for label, count in census.interrupts.get(cpu, {}).items():
        kind = "irq" if label.startswith("IRQ ") else "interrupt"
        out.append({"kind": kind, "name": label, "count": count})
        if movable and kind == "irq":
            out[-1]["movable"] = label in census.movable_irqs
    out += [{"kind": "softirq", "name": label, "count": count} for label, count in census.softirqs.get(cpu, {}).items()]
    for label, ms in census.tasks.get(cpu, {}).items():
        m = _TASK.match(label)
        name, tid = (m.group("comm"), int(m.group("tid"))) if m else (label, None)
        out.append({"kind": "thread", "name": name, "pid": tid, "count": round(ms)})
        if movable:
            out[-1]["movable"] = label in census.movable_tasks
    rank = {"thread": 0, "irq": 1, "interrupt": 2, "softirq": 3}  # a thread's ms outweighs a count
    return sorted(out, key=lambda s: (rank[s["kind"]], -s["count"], s["name"]))


def main_cpu(cpus: frozenset[int], online: list[int]) -> int:
    """The CPU oslat's main thread waits on: the first online one not measured."""
    spare = [c for c in online if c not in cpus]
    if not spare:
        raise InvalidInput(f"CPUs {cpuset.format(cpus)} are every online CPU: oslat needs one more for its main "
                           "thread (and the host one for itself)")
    return spare[0]


def check(ctx: Context, cpus: frozenset[int]) -> int:
    """InvalidInput (one line) unless ``cpus`` are online and leave one for oslat's main thread:
    that one."""
    online = online_cpus(ctx.roots.sysfs)
    missing = cpus - frozenset(online)
    if missing:
        raise InvalidInput(f"CPUs {cpuset.format(missing)} are not online (online: {cpuset.format(online)})")
    return main_cpu(cpus, online)


def measure(ctx: Context, cpus: frozenset[int], seconds: float, max_us: int = DEFAULT_MAX_US, *,
            tool: str | None = None, as_is: bool = True, run: Callable | None = None) -> Verification:
    """oslat on ``cpus`` for ``seconds``, with the census around it (``run``: how oslat runs, for
    the tests: the arguments of ``oslat.run``)."""
    main = check(ctx, cpus)
    tool = tool or oslat.find()
    found: dict = {}
    with tempfile.TemporaryDirectory(prefix="vmtune-verify-") as work:
        out = os.path.join(work, "oslat.json")

        def spin(_seconds: float) -> None:  # the census's wait: oslat's run
            found.update((run or oslat.run)(tool, cpus, main, seconds, out))

        census = noise.take(ctx, cpus, seconds, sleep=spin)
    per = oslat.threads(found)
    results = []
    for cpu in sorted(cpus):
        if cpu not in per:
            raise RuntimeError(f"oslat measured no thread on CPU {cpu}")
        hist = oslat.histogram(per[cpu])
        results.append(CpuResult(cpu, int(per[cpu]["max"]), oslat.quantile(hist, 0.99), oslat.quantile(hist, 0.999),
                                 sum(hist.values()), {x: oslat.stalls(hist, x) for x in STALLS_US},
                                 sources(census, cpu)))
    return Verification(cpus, seconds, max_us, as_is, results, tool)


LEASE_NAME = "vmtune-verify"


@contextlib.contextmanager
def held(ctx: Context, cpus: frozenset[int], profile: str = "latency") -> Iterator[str]:
    """A lease of verify's own on ``cpus`` while the block runs (its key), released however it
    ends; InvalidInput (one line) when the hook's rules refuse it (CPUs a running latency domain
    holds, no CPU left for the host, a state it cannot read)."""
    from ..config import Isolate
    from ..hoststate import alive
    from ..hoststate.leases import LeaseRequest, Leases
    from ..oneline import said_once

    me = alive.process(os.getpid(), ctx.roots.proc or alive.PROC)
    key = f"{alive.OWN}{os.getpid()}"
    cfg = dataclasses.replace(ctx.cfg, hook=dataclasses.replace(ctx.cfg.hook, isolate_pinned=Isolate.ON))
    leases = Leases(cfg, ctx.roots)
    said = _Said()
    log = logging.getLogger("vmtune.hoststate")
    previous = signal.signal(signal.SIGTERM, _terminate)  # from before the lease: a SIGTERM anywhere releases it
    with said_once():  # the lease and its release read what the others want twice, as a hook call does
        try:
            log.addHandler(said)
            try:
                refused = leases.lease(LeaseRequest(LEASE_NAME, key, profile, cpus), refuse_conflicts=True,
                                       top_up=False, owner=me)
            finally:
                log.removeHandler(said)
            if refused:
                raise InvalidInput(f"verify: no lease for CPUs {cpuset.format(cpus)}: {said.last or 'refused'}")
            yield key
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the release is not cut short
            try:
                leases.release(key, LEASE_NAME)  # none taken (refused, interrupted): nothing to give back
            finally:
                signal.signal(signal.SIGTERM, previous)


class _Said(logging.Handler):
    """The last error the hook's code logged (why a lease was refused)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.last = record.getMessage()


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)  # the lease's release runs (``held``'s finally)


@contextlib.contextmanager
def load(ctx: Context, cpus: frozenset[int]) -> Iterator[list[int]]:
    """A busy process on each online CPU but ``cpus`` (the housekeeping ones: the host's own
    work, a backup job) while the block runs; their pids."""
    import subprocess
    import sys

    rest = [c for c in online_cpus(ctx.roots.sysfs) if c not in cpus]
    pinned = oslat.dies_with_parent(lambda: os.sched_setaffinity(0, rest))  # no hog outlives a killed verify
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                             preexec_fn=pinned) for _ in rest]  # noqa: PLW1509
    try:
        yield [h.pid for h in hogs]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def prometheus_text(done: Verification) -> str:
    """The result as node_exporter textfile metrics (prometheus.py's writer): per CPU the largest
    gap, p99, p99.9, the stalls by threshold and what ran there; the verdict and the mark."""
    import time

    from .prometheus import Metrics

    m = Metrics()
    for r in done.results:
        m.set("vmtune_verify_max_latency_us", "the largest gap oslat measured on the CPU", r.max_us, cpu=r.cpu)
        m.set("vmtune_verify_p99_latency_us", "the 99th percentile of oslat's gaps (an upper bound)", r.p99_us,
              cpu=r.cpu)
        m.set("vmtune_verify_p999_latency_us", "the 99.9th percentile of oslat's gaps (an upper bound)", r.p999_us,
              cpu=r.cpu)
        for over, n in r.stalls.items():
            m.set("vmtune_verify_stalls", "oslat's gaps of at least over_us µs", n, cpu=r.cpu, over_us=over)
        for source in r.sources:
            m.set("vmtune_verify_source_count", "what ran on the CPU meanwhile: events (a thread: its run ms)",
                  source["count"], cpu=r.cpu, kind=source["kind"], name=source["name"])
    m.set("vmtune_verify_pass", "1 when every CPU's largest gap is within the mark", 1 if done.passed else 0)
    m.set("vmtune_verify_mark_us", "the largest gap that passes", done.max_us)
    m.set("vmtune_verify_seconds", "how long oslat ran", done.seconds)
    m.set("vmtune_verify_leased", "1 when the CPUs were measured under verify's own lease", 0 if done.as_is else 1)
    m.set("vmtune_verify_timestamp_seconds", "when the verification ended", time.time())
    return m.text()


def running(ctx: Context, name: str, seconds: float, sleep: Callable[[float], None] | None = None) -> Verification:
    """A running latency domain's CPUs (its lease's, less the host's reserved ones): no probe runs
    there (its vCPUs do), so what else ran on them over ``seconds``, and a verdict: PASS when
    nothing that could run elsewhere (an IRQ or a host thread whose affinity allows another CPU)
    did. InvalidInput (one line) when no running domain of that name holds a lease."""
    from .isolation import held_cpus

    mine = lease_of(ctx, name)
    if not mine:
        raise InvalidInput(f"verify: {name} holds no lease of the hook: it is not running, or not tagged with a "
                           "latency profile (vmtune status lists the leases)")
    cpus = held_cpus(ctx, mine)
    if not cpus:
        raise InvalidInput(f"verify: {name}'s CPUs are all the host's reserved ones: nothing of its own to verify")
    census = noise.take(ctx, cpus, seconds, **({"sleep": sleep} if sleep else {}))
    results = [CpuResult(cpu, None, None, None, None, {}, sources(census, cpu, movable=True)) for cpu in sorted(cpus)]
    return Verification(cpus, seconds, 0, True, results, "census", domain=name)


def lease_of(ctx: Context, name: str) -> dict:
    """The hook's leases of the running domain ``name`` (none when it does not run or holds none)."""
    from .hookstate import load, state_path
    from .isolation import live_leases

    state = load(ctx, state_path(ctx))
    leases = live_leases(ctx, state) if hasattr(state, "leases") else {}
    return {k: lease for k, lease in leases.items() if lease.name == name}


def defined_pins(xml: str) -> tuple[frozenset[int], str | None]:
    """The host CPUs a defined domain's vCPUs are pinned to (every ``<vcpupin>``'s, else its
    ``<vcpu cpuset>``), and its vmtune profile (None: untagged)."""
    from ..xml import xmlsafe
    from ..xml.model import Domain

    dom = Domain(xmlsafe.parse(xml, "domain XML"))
    pins = frozenset().union(*dom.vcpupins().values()) if dom.vcpupins() else frozenset()
    if not pins and dom.vcpu_cpuset:
        pins = frozenset(dom.vcpu_cpuset)
    return pins, dom.tagged_profile
