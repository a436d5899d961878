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
- ``tagged-ignored-op``: ``start begin`` of a latency domain (decided on argv, stdin unread; before
  issue 19 this was ``started begin``, which the hook now handles);
- ``reap-idle``: ``sys.executable -m vmtune hook reap --quiet`` with an empty state dir, as the
  reaper's timer runs it every minute on a host with no lease (vmtune/install/reaper.py's fast path);
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

``against=REV`` (``bench/run --part 2 --hook-against REV``) also times REV's hook in the same
rounds: ``git worktree add --detach`` of REV in a temporary folder (removed at the end), and the
variants ``SHORT:untagged``, ``SHORT:tagged-ignored-op``, ``SHORT:tagged-prepare`` and
``SHORT:tagged-release`` (SHORT: REV's short hash), each run as ``sys.executable WORKTREE/hooks/qemu
...`` with ``PYTHONPATH=WORKTREE`` and a sysfs tree, state dir and config of its own, built the same
way. PYTHONPATH wins over the venv's editable install (setuptools appends its finder to
``sys.meta_path``, after the path-based finder); ``Bench.check`` runs each revision's prepare once
under ``python -v`` and fails unless every vmtune module came from that revision's tree. Each of
REV's slots runs beside the current one (which of the two goes first alternates by round), and its
records also carry ``ratio_to_current``: its p50 over the current variant's in the same round.
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import EXAMPLES, ROOT, quantile, summarize, worktree

HOOK = ROOT / "hooks" / "qemu"
FULL = {"runs": 7, "inner": 15}
QUICK = {"runs": 3, "inner": 5}
CPUS = 8
SHM = "/dev/shm"  # tmpfs, like /run on a real host (here /run and /tmp are ext4: 3 ms per fsync)
VARIANTS = ("python-c-pass", "shell-noop", "untagged", "tagged-ignored-op", "tagged-prepare", "tagged-release",
            "reap-idle")
BASELINES = ("python-c-pass", "shell-noop")
HOOK_VARIANTS = ("untagged", "tagged-ignored-op", "tagged-prepare", "tagged-release")  # also timed for --hook-against


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

    def __init__(self, tmp: Path, against: tuple[str, Path] | None = None):
        """``against``: (label, worktree) of an older revision whose hook is timed too."""
        from vmtune.xml import model, xmlsafe
        from vmtune.hoststate import pages

        self.tmp = tmp
        self.tagged, self.untagged = tagged_domain(), untagged_domain()
        if b"https://vmtune.dev/xmlns/1" in self.untagged:
            raise SystemExit("bench: examples/stock-latency.xml is tagged; the untagged case needs it untagged")
        dom = model.Domain(xmlsafe.parse(self.tagged, "bench domain"))
        self.name = name = dom.name
        self.pools = {k.text: n + 64 for k, n in pages.needs(dom, lambda: 2048).items()}
        self.noop = Path(tempfile.mkdtemp(prefix="vmtune-bench-noop-")) / "noop-hook"  # /dev/shm may be noexec
        self.noop.write_text("#!/bin/sh\nexit 0\n")
        self.noop.chmod(0o755)
        self.last_stderr = ""
        # per prefix ("" for this tree, "LABEL:" for --hook-against): its sysfs tree and source root
        self.sysfs: dict[str, Path] = {}
        self.source: dict[str, Path] = {}
        self.env = self._host("", tmp, ROOT)
        self.commands: dict[str, tuple[list[str], bytes, dict[str, str]]] = {
            "python-c-pass": ([sys.executable, "-c", "pass"], self.tagged, self.env),
            "shell-noop": ([str(self.noop), name, "prepare", "begin", "-"], self.tagged, self.env),
            "reap-idle": ([sys.executable, "-m", "vmtune", "hook", "reap", "--quiet", "--hooks-dir", str(tmp / "hooks")],
                          b"", {**self.env, "VMTUNE_STATE_DIR": str(tmp / "reap-state")}),
        }
        self._hook_variants("", HOOK, self.env)
        if against is not None:
            label, worktree = against
            env = {**self._host(f"{label}:", tmp / label, worktree), "PYTHONPATH": str(worktree)}
            self._hook_variants(f"{label}:", worktree / "hooks" / "qemu", env)

    def _host(self, prefix: str, where: Path, source: Path) -> dict[str, str]:
        """A sysfs tree, state dir, empty config and profiles dir under ``where``; the hook's environment."""
        where.mkdir(parents=True, exist_ok=True)
        self.sysfs[prefix] = build_sysfs(where / "sys", pools=self.pools)
        self.source[prefix] = source
        (where / "profiles").mkdir()
        (where / "vmtune.toml").write_text("")
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"), "LC_ALL": "C",
            "VMTUNE_SYSFS": str(where / "sys"), "VMTUNE_STATE_DIR": str(where / "state"),
            "VMTUNE_CONFIG": str(where / "vmtune.toml"), "VMTUNE_PROFILES": str(where / "profiles"),
            "VMTUNE_SYSLOG": "0",
        }

    def _hook_variants(self, prefix: str, hook_path: Path, env: dict[str, str]) -> None:
        hook, name = [sys.executable, str(hook_path)], self.name
        self.commands.update({
            f"{prefix}untagged": (hook + [name, "prepare", "begin", "-"], self.untagged, env),
            f"{prefix}tagged-ignored-op": (hook + [name, "start", "begin", "-"], self.tagged, env),
            f"{prefix}tagged-prepare": (hook + [name, "prepare", "begin", "-"], self.tagged, env),
            f"{prefix}tagged-release": (hook + [name, "release", "end", "destroyed"], self.tagged, env),
        })

    def call(self, variant: str, flags: tuple[str, ...] = ()) -> float:
        """One timed call. ``flags`` go to the interpreter (for the untimed checks only)."""
        argv, stdin, env = self.commands[variant]
        if flags:
            argv = [argv[0], *flags, *argv[1:]]
        t0 = time.perf_counter()
        proc = subprocess.run(argv, input=stdin, capture_output=True, env=env, check=False, timeout=60, cwd=ROOT)
        dt = time.perf_counter() - t0
        if proc.returncode != 0 or proc.stdout:
            raise SystemExit(f"bench: {variant} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
        self.last_stderr = proc.stderr.decode(errors="replace")
        return dt

    def check(self, prefix: str = "") -> dict:
        """One prepare/release, not timed: the prepare must tune the tree and the release restore it.
        The prepare runs under ``python -v``: every vmtune module it loads must come from the
        revision's own tree (``ROOT`` for this one, the worktree for ``--hook-against``)."""
        before = self._snapshot(prefix)
        self.call(f"{prefix}tagged-prepare", ("-v",))
        loaded = sorted(set(re.findall(r"^# code object from '?([^'\n]*/vmtune/[^'\n]*?)'?$",
                                       self.last_stderr, re.MULTILINE)))
        package = self.source[prefix].resolve() / "vmtune"
        foreign = [p for p in loaded if not Path(p).resolve().is_relative_to(package)]
        if not loaded or foreign:
            raise SystemExit(f"bench: {prefix}tagged-prepare loaded vmtune from elsewhere than {package}: "
                             f"{foreign[:3] or 'no vmtune module'}")
        tuned = self._snapshot(prefix)
        changed = sum(1 for k, v in tuned.items() if before.get(k) != v)
        self.call(f"{prefix}tagged-release")
        if changed == 0 or self._snapshot(prefix) != before:
            raise SystemExit(f"bench: the {prefix or 'current '}hook did not tune and restore the tree "
                             f"({changed} values changed)")
        facts = {"values_tuned_per_prepare": changed, "domain_xml_bytes": len(self.tagged)}
        if not prefix:  # the idle reap takes the fast path: the reaper's module, never the CLI's
            self.call("reap-idle", ("-X", "importtime"))
            modules = {line.rsplit("|", 1)[-1].strip() for line in self.last_stderr.splitlines()}
            if "vmtune.install.reaper" not in modules or "vmtune.cli" in modules:
                raise SystemExit("bench: the idle reap did not take its fast path")
        if prefix:
            facts |= {"vmtune_loaded_from": str(package), "vmtune_modules_per_prepare": len(loaded)}
        return facts

    def _snapshot(self, prefix: str = "") -> dict[str, str]:
        root = self.sysfs[prefix]
        return {str(p.relative_to(root)): p.read_text().strip() for p in root.rglob("*") if p.is_file()}


def run(quick: bool, log, against: str | None = None) -> list[dict]:
    """The hook-cost records (same shape as bench/costs.py's). ``against``: a revision whose hook
    is timed too, in the same rounds (see the module's docstring)."""
    if against is None:
        return _run(quick, log, None)
    with worktree(against, log) as tree:
        return _run(quick, log, tree)


def _run(quick: bool, log, against: tuple[str, Path] | None) -> list[dict]:
    cfg = QUICK if quick else FULL
    runs, inner = cfg["runs"], cfg["inner"]
    shm = os.path.isdir(SHM) and os.access(SHM, os.W_OK)
    tmp = Path(tempfile.mkdtemp(prefix="vmtune-bench-hook-", dir=SHM if shm else None))
    bench = None
    label = against[0] if against else None
    variants = VARIANTS + tuple(f"{label}:{v}" for v in HOOK_VARIANTS if label)
    try:
        bench = Bench(tmp, against)
        facts = {"": bench.check()}
        if label:
            facts[f"{label}:"] = bench.check(f"{label}:")
        slots = ("python-c-pass", "shell-noop", "reap-idle", "untagged", "tagged-ignored-op", "tagged-lifecycle")
        rounds: dict[str, list[dict]] = {v: [] for v in variants}
        for r in range(runs):
            if label:
                # each of the older hook's slots beside this one's; which goes first alternates by round
                pairs = [(s, f"{label}:{s}") if r % 2 == 0 else (f"{label}:{s}", s) for s in slots[3:]]
                base = slots[:3] + tuple(s for pair in pairs for s in pair)
            else:
                base = slots
            order = base[r % len(base):] + base[:r % len(base)]
            times: dict[str, list[float]] = {v: [] for v in variants}
            gc.collect()
            for slot in order:
                for _ in range(inner):
                    if slot.endswith("tagged-lifecycle"):
                        prefix = slot[:-len("tagged-lifecycle")]
                        times[f"{prefix}tagged-prepare"].append(bench.call(f"{prefix}tagged-prepare"))
                        times[f"{prefix}tagged-release"].append(bench.call(f"{prefix}tagged-release"))
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
                if label and v.startswith(f"{label}:"):
                    rounds[v][-1]["ratio_to_current"] = p50[v] / p50[v.split(":", 1)[1]]
            log(f"hook-cost: round {r + 1}/{runs} done")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if bench is not None:
            shutil.rmtree(bench.noop.parent, ignore_errors=True)
    out = []
    for v in variants:
        older = bool(label) and v.startswith(f"{label}:")
        keys = ("p50_ms", "p99_ms", "mean_ms", "ratio_to_c_pass", "ratio_to_shell_noop")
        s = summarize(rounds[v], keys + (("ratio_to_current",) if older else ()))
        rec = {
            "case": "hook-cost", "variant": v,
            "description": "one hook call as libvirt makes it: a new process, XML on stdin, wall time until it exits",
            "command": _shown(bench.commands[v][0]),
            "p50_ms": s["p50_ms"]["median"], "p99_ms": s["p99_ms"]["median"],
            "ratio_to_c_pass": s["ratio_to_c_pass"]["median"],
            "ratio_to_shell_noop": s["ratio_to_shell_noop"]["median"],
            "spread": s, "runs": runs, "calls_per_run": inner, "baseline": v in BASELINES,
            "interpreter": sys.executable, "sysfs_cpus": CPUS, **facts[f"{label}:" if older else ""],
            "tree_and_state_dir": f"{SHM} (tmpfs)" if shm else f"{tempfile.gettempdir()} (not tmpfs)",
            "per_run": rounds[v],
        }
        if older:
            rec["command"] = f"PYTHONPATH=<worktree of {label}> " + rec["command"].replace(
                " qemu ", f" <worktree of {label}>/hooks/qemu ", 1)
            rec["revision"] = label
            rec["ratio_to_current"] = s["ratio_to_current"]["median"]
        elif label:
            rec["compared_with"] = label
        out.append(rec)
    return out


def _shown(argv: list[str]) -> str:
    return " ".join(Path(a).name if a.startswith((SHM, tempfile.gettempdir())) else a for a in argv)
