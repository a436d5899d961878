"""bench/run --quick works and writes well-formed result files. No timing is asserted here:
the figures live in BENCHMARKS.md and bench/results/, measured on purpose, not in CI."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

from conftest import ROOT

REQUIRED = ("case", "variant", "virt_type", "p50_ms", "p99_ms", "spread", "runs",
            "machine", "python", "lxml")
CASES = {"rewrite-throughput", "placement-place-one", "placement-plan-all"}
PROFILES = {"balanced", "latency", "realtime", "throughput"}


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def test_bench_run_quick(tmp_path: Path):
    out = tmp_path / "results"
    proc = subprocess.run(
        [str(ROOT / "bench" / "run"), "--quick", "--out", str(out), "--virt-type", "kvm"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = sorted(p for p in out.glob("*.json") if p.name != "index.json")
    records = [json.loads(p.read_text()) for p in files]
    assert records, "no result files"
    for path, rec in zip(files, records):
        missing = [k for k in REQUIRED if k not in rec]
        assert not missing, f"{path.name} lacks {missing}"
        assert rec["virt_type"] == "kvm", path.name
        assert rec["case"] in CASES and isinstance(rec["variant"], str) and rec["variant"], path.name
        assert _number(rec["p50_ms"]) and _number(rec["p99_ms"]), path.name
        assert rec["machine"]["cores"] and "cpu_model" in rec["machine"], path.name
        assert rec["python"] and rec["lxml"], path.name
        for key in ("p50_ms", "p99_ms"):
            s = rec["spread"][key]
            assert s["min"] <= s["q1"] <= s["median"] <= s["q3"] <= s["max"], (path.name, key)
            assert s["n"] == rec["runs"] >= 2, path.name
    by_case = {}
    for rec in records:
        by_case.setdefault(rec["case"], set()).add(rec["variant"])
    assert by_case.keys() == CASES
    assert by_case["rewrite-throughput"] == PROFILES
    assert by_case["placement-place-one"] == by_case["placement-plan-all"]
    for rec in records:
        if rec["case"] == "rewrite-throughput":
            counts = rec["domains"]
            assert counts["timed"] > 0 and counts["unsupported"] > 0  # the foreign corpus domains
            assert _number(rec["rewrites_per_s"])
    index = json.loads((out / "index.json").read_text())
    assert sorted(index["files"]) == [p.name for p in files]
