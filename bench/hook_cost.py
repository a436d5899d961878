"""Part 2 of issue 5, second bullet: what the libvirt hook costs per call, run as libvirt runs it.

libvirt starts a new process for every hook call: ``HOOK NAME OP SUBOP -`` with the domain XML on
stdin, and waits for it. Each sample here is one such process (``subprocess.run``: fork, exec,
interpreter start, the hook, exit, wait), timed as wall time from this process. The hook runs as
``sys.executable hooks/qemu ...``: the interpreter ``vmtune hook install`` writes into the ``#!``
line, never the ``python3`` on PATH (here a pyenv shim that costs more than the hook itself). Its
environment is what libvirtd gives hooks (PATH, HOME, LC_ALL=C) plus the ``VMTUNE_*`` variables
that point it at a sysfs tree in a temporary directory (syslog off).

Variants:

- ``python-c-pass``: ``sys.executable -c pass``, the floor of any hook written in Python;
- ``shell-noop``: a ``#!/bin/sh`` script that exits 0, the floor of any hook at all;
- ``untagged``: ``prepare begin`` of an untagged domain (decided on the stdin bytes);
- ``tagged-ignored-op``: ``started begin`` of a latency domain (decided on argv, stdin unread);
- ``tagged-prepare`` / ``tagged-release``: ``prepare begin`` then ``release end`` of a latency
  domain (examples/stock-latency.xml rewritten for examples/hosts/2node-smt.xml) on the fake
  sysfs tree on ``/dev/shm`` (tmpfs, as ``/run`` is on a real host; the state dir too): the
  lease, the first lease's host tuning (8 CPUs: EPP, governor, deep C-states; KSM)
  with its journal, and the restore. Its hugepage pool has enough free pages, so there is no
  top-up (a tree of plain files cannot stand in for the kernel's allocator).

Variants are interleaved: round r runs every variant ``inner`` times, in an order that rotates
with r (a prepare is always followed by its release). Per round: p50 and p99 of the calls, and
each variant's p50 over the p50 of ``python-c-pass`` and of ``shell-noop`` in the same round. A
result reports the median over rounds and its spread.
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import EXAMPLES, ROOT, quantile, summarize

HOOK = ROOT / "hooks" / "qemu"
FULL = {"runs": 7, "inner": 15}
QUICK = {"runs": 3, "inner": 5}
CPUS = 8
SHM = "/dev/shm"  # tmpfs, like /run on a real host (here /run and /tmp are ext4: 3 ms per fsync)
VARIANTS = ("python-c-pass", "shell-noop", "untagged", "tagged-ignored-op", "tagged-prepare", "tagged-release")
BASELINES = ("python-c-pass", "shell-noop")


def build_sysfs(root: Path, cpus: int = CPUS, pools: dict[str, int] | None = None) -> Path:
    """A sysfs-shaped tree: ``cpus`` online CPUs with cpufreq (governor ``powersave``, EPP) and
    four cpuidle states (POLL, C1, C1E, C6 at 0/2/10/133 us), KSM running, and a hugepage pool with
    ``free`` pages for every ``"node:size"`` in ``pools``."""
    def put(rel: str, value: str) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")

    cpu_dir = "devices/system/cpu"
    put(f"{cpu_dir}/online", f"0-{cpus - 1}")
    for cpu in range(cpus):
        base = f"{cpu_dir}/cpu{cpu}"
        put(f"{base}/cpufreq/scaling_governor", "powersave")
        put(f"{base}/cpufreq/scaling_available_governors", "performance powersave")
        put(f"{base}/cpufreq/energy_performance_preference", "balance_performance")
        for k, (name, latency) in enumerate([("POLL", 0), ("C1", 2), ("C1E", 10), ("C6", 133)]):
            put(f"{base}/cpuidle/state{k}/name", name)
            put(f"{base}/cpuidle/state{k}/latency", str(latency))
            put(f"{base}/cpuidle/state{k}/disable", "0")
    put("kernel/mm/ksm/run", "1")
    for pool, free in (pools or {}).items():
        node, _, size = pool.partition(":")
        base = f"devices/system/node/node{node}/hugepages/hugepages-{size}kB"
        put(f"{base}/nr_hugepages", str(free))
        put(f"{base}/free_hugepages", str(free))
    return root


def tagged_domain() -> bytes:
    """examples/stock-latency.xml as ``vmtune rewrite --profile latency`` leaves it for the example host."""
    import vmtune

    host = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    return vmtune.rewrite((EXAMPLES / "stock-latency.xml").read_bytes(), host, "latency").xml.encode()


def untagged_domain() -> bytes:
    return (EXAMPLES / "stock-latency.xml").read_bytes().replace(b"https://vmtune.dev/xmlns/1", b"urn:other")


class Bench:
    """The temporary host (sysfs tree, state dir, config) and the commands of every variant."""

    def __init__(self, tmp: Path):
        from vmtune import model, xmlsafe
        from vmtune.hoststate import pages

        self.tmp = tmp
        self.tagged, self.untagged = tagged_domain(), untagged_domain()
        if b"https://vmtune.dev/xmlns/1" in self.untagged:
            raise SystemExit("bench: examples/stock-latency.xml is tagged; the untagged case needs it untagged")
        dom = model.Domain(xmlsafe.parse(self.tagged, "bench domain"))
        name = dom.name
        need = {k.text: n for k, n in pages.needs(dom, lambda: 2048).items()}
        self.sysfs = build_sysfs(tmp / "sys", pools={k: n + 64 for k, n in need.items()})
        (tmp / "profiles").mkdir()
        (tmp / "vmtune.toml").write_text("")
        self.noop = Path(tempfile.mkdtemp(prefix="vmtune-bench-noop-")) / "noop-hook"  # /dev/shm may be noexec
        self.noop.write_text("#!/bin/sh\nexit 0\n")
        self.noop.chmod(0o755)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"), "LC_ALL": "C",
            "VMTUNE_SYSFS": str(self.sysfs), "VMTUNE_STATE_DIR": str(tmp / "state"),
            "VMTUNE_CONFIG": str(tmp / "vmtune.toml"), "VMTUNE_PROFILES": str(tmp / "profiles"), "VMTUNE_SYSLOG": "0",
        }
        hook = [sys.executable, str(HOOK)]
        self.commands = {
            "python-c-pass": ([sys.executable, "-c", "pass"], self.tagged),
            "shell-noop": ([str(self.noop), name, "prepare", "begin", "-"], self.tagged),
            "untagged": (hook + [name, "prepare", "begin", "-"], self.untagged),
            "tagged-ignored-op": (hook + [name, "started", "begin", "-"], self.tagged),
            "tagged-prepare": (hook + [name, "prepare", "begin", "-"], self.tagged),
            "tagged-release": (hook + [name, "release", "end", "destroyed"], self.tagged),
        }

    def call(self, variant: str) -> float:
        argv, stdin = self.commands[variant]
        t0 = time.perf_counter()
        proc = subprocess.run(argv, input=stdin, capture_output=True, env=self.env, check=False, timeout=60)
        dt = time.perf_counter() - t0
        if proc.returncode != 0 or proc.stdout:
            raise SystemExit(f"bench: {variant} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
        return dt

    def check(self) -> dict:
        """One prepare/release, not timed: the prepare must tune the tree and the release restore it."""
        before = self._snapshot()
        self.call("tagged-prepare")
        tuned = self._snapshot()
        changed = sum(1 for k, v in tuned.items() if before.get(k) != v)
        self.call("tagged-release")
        if changed == 0 or self._snapshot() != before:
            raise SystemExit(f"bench: the hook did not tune and restore the tree ({changed} values changed)")
        return {"values_tuned_per_prepare": changed, "domain_xml_bytes": len(self.tagged)}

    def _snapshot(self) -> dict[str, str]:
        return {str(p): p.read_text().strip() for p in self.sysfs.rglob("*") if p.is_file()}


def run(quick: bool, log) -> list[dict]:
    """The hook-cost records (same shape as bench/costs.py's)."""
    cfg = QUICK if quick else FULL
    runs, inner = cfg["runs"], cfg["inner"]
    shm = os.path.isdir(SHM) and os.access(SHM, os.W_OK)
    tmp = Path(tempfile.mkdtemp(prefix="vmtune-bench-hook-", dir=SHM if shm else None))
    bench = None
    try:
        bench = Bench(tmp)
        facts = bench.check()
        slots = ("python-c-pass", "shell-noop", "untagged", "tagged-ignored-op", "tagged-lifecycle")
        rounds: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for r in range(runs):
            order = slots[r % len(slots):] + slots[:r % len(slots)]
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            gc.collect()
            for slot in order:
                for _ in range(inner):
                    if slot == "tagged-lifecycle":
                        times["tagged-prepare"].append(bench.call("tagged-prepare"))
                        times["tagged-release"].append(bench.call("tagged-release"))
                    else:
                        times[slot].append(bench.call(slot))
            p50 = {v: quantile(t, 0.5) for v, t in times.items()}
            for v, t in times.items():
                rounds[v].append({
                    "p50_ms": p50[v] * 1e3,
                    "p99_ms": quantile(t, 0.99) * 1e3,
                    "mean_ms": statistics.fmean(t) * 1e3,
                    "ratio_to_c_pass": p50[v] / p50["python-c-pass"],
                    "ratio_to_shell_noop": p50[v] / p50["shell-noop"],
                    "samples": len(t),
                })
            log(f"hook-cost: round {r + 1}/{runs} done")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if bench is not None:
            shutil.rmtree(bench.noop.parent, ignore_errors=True)
    out = []
    for v in VARIANTS:
        s = summarize(rounds[v], ("p50_ms", "p99_ms", "mean_ms", "ratio_to_c_pass", "ratio_to_shell_noop"))
        out.append({
            "case": "hook-cost", "variant": v,
            "description": "one hook call as libvirt makes it: a new process, XML on stdin, wall time until it exits",
            "command": _shown(bench.commands[v][0]),
            "p50_ms": s["p50_ms"]["median"], "p99_ms": s["p99_ms"]["median"],
            "ratio_to_c_pass": s["ratio_to_c_pass"]["median"],
            "ratio_to_shell_noop": s["ratio_to_shell_noop"]["median"],
            "spread": s, "runs": runs, "calls_per_run": inner, "baseline": v in BASELINES,
            "interpreter": sys.executable, "sysfs_cpus": CPUS, **facts,
            "tree_and_state_dir": f"{SHM} (tmpfs)" if shm else f"{tempfile.gettempdir()} (not tmpfs)",
            "per_run": rounds[v],
        })
    return out


def _shown(argv: list[str]) -> str:
    return " ".join(Path(a).name if a.startswith((SHM, tempfile.gettempdir())) else a for a in argv)
