"""Shared pieces: the machine description, robust statistics, and result files."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The shared corpus sits beside the checkout (the same rule as tests/conftest.py).
CORPUS = Path(os.environ.get("VMTUNE_CORPUS", ROOT.parent / "shared" / "corpus"))
EXAMPLES = ROOT / "examples"
SCHEMA_VERSION = 1
# Every result file has these keys (tests/test_bench.py checks them).
REQUIRED_KEYS = ("case", "variant", "virt_type", "p50_ms", "p99_ms", "spread", "runs",
                 "machine", "python", "lxml")


def machine() -> dict:
    """CPU model, logical CPUs (the ones this process may use too), kernel and load."""
    model = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    hypervisor = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            hypervisor = bool(re.search(r"^flags\s*:.*\bhypervisor\b", f.read(), re.M))
    except OSError:
        pass
    return {
        "cpu_model": model or platform.processor() or None,
        "cores": os.cpu_count(),
        "usable_cpus": usable,
        "under_hypervisor": hypervisor,
        "kernel": platform.release(),
        "loadavg_at_start": load,
    }


def versions() -> dict:
    from lxml import etree

    import vmtune

    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "python_executable": sys.executable,
        "lxml": ".".join(map(str, etree.LXML_VERSION)),
        "libxml2": ".".join(map(str, etree.LIBXML_VERSION)),
        "vmtune": vmtune.__version__,
        "git": _git(),
    }


def _git() -> str | None:
    """The checkout's commit, with "+dirty" when vmtune/ has uncommitted changes (read-only git)."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "vmtune"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+dirty" if dirty else "")) or None


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (q in [0, 1]) of a non-empty list."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def time_calls(call, times: int) -> tuple[list[float], object]:
    """``call()`` run ``times`` times: the seconds each took, and the last one's result."""
    out, result = [], None
    for _ in range(times):
        t0 = time.perf_counter()
        result = call()
        out.append(time.perf_counter() - t0)
    return out, result


def ms_figures(times: list[float]) -> dict:
    """p50, p99 and mean of call times (seconds), in ms: one run's figures."""
    return {"p50_ms": quantile(times, 0.5) * 1e3, "p99_ms": quantile(times, 0.99) * 1e3,
            "mean_ms": statistics.fmean(times) * 1e3}


def spread(values: list[float]) -> dict:
    """The spread of one figure across repetitions: median, quartiles, min and max."""
    return {
        "median": statistics.median(values),
        "q1": quantile(values, 0.25),
        "q3": quantile(values, 0.75),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def summarize(runs: list[dict], keys: tuple[str, ...]) -> dict:
    """Per-run figures -> {key: spread across runs} for each of ``keys``."""
    return {k: spread([r[k] for r in runs]) for k in keys}


def write_result(out_dir: Path, record: dict) -> Path:
    missing = [k for k in REQUIRED_KEYS if k not in record]
    if missing:
        raise ValueError(f"result {record.get('case')}/{record.get('variant')} lacks {missing}")
    out_dir.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{record['case']}--{record['variant']}") + ".json"
    path = out_dir / name
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def print_table(argv: list[str], case: str, variants, table) -> int:
    """``python -m bench.CASE [DIR]``: the case's table of the results in DIR (default bench/results)."""
    out_dir = Path(argv[0]) if argv else ROOT / "bench" / "results"
    recs = {r["variant"]: r for r in (json.loads(p.read_text()) for p in out_dir.glob(f"{case}--*.json"))}
    if not recs:
        sys.stdout.write(f"no {case} results in {out_dir}\n")
        return 1
    sys.stdout.write(table([recs[v] for v in variants if v in recs]))
    return 0


def commit(rev: str) -> str | None:
    """The short hash of commit ``rev`` in this checkout (None: not a commit here)."""
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", f"{rev}^{{commit}}"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


@contextlib.contextmanager
def worktree(rev: str, log):
    """(short hash, path) of a detached ``git worktree`` of ``rev`` in a temporary folder, removed
    after: the other tree of ``--hook-against``, ``--rewrite-against`` and scripts/same-outputs."""
    label = commit(rev)
    if label is None:
        raise SystemExit(f"bench: {rev} is not a commit here")
    git = ["git", "-C", str(ROOT)]
    parent = Path(tempfile.mkdtemp(prefix=f"vmtune-bench-{label}-"))
    path = parent / label
    subprocess.run(git + ["worktree", "add", "--detach", str(path), label], capture_output=True, check=True)
    log(f"{rev} ({label}) checked out in {path}")
    try:
        yield label, path
    finally:
        subprocess.run(git + ["worktree", "remove", "--force", str(path)], capture_output=True, check=False)
        shutil.rmtree(parent, ignore_errors=True)
        subprocess.run(git + ["worktree", "prune"], capture_output=True, check=False)
