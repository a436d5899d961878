"""bench/run --quick --part 2 (the benchmarks that need no guest and no real host: the rewrite, the
placement, the hook's cost on a fake sysfs tree, the map, the re-tune) runs and writes well-formed
result files. No timing is asserted here. It runs outside the machine scope (tests/conftest.py), beside
the other worker's tests, and reads no configuration of this machine's (conftest points VMTUNE_CONFIG
and VMTUNE_PROFILES at empty ones, and bench/run inherits them)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import ROOT
from bench import common, locality_cost, rewrite_steps
from fixtures.benchrecords import REQUIRED, number as _number

CASES = {"rewrite-throughput", "placement-place-one", "placement-plan-all", "hook-cost", "map", "placement-l3",
         "retune", "rewrite-steps", "rewrite-bound"}
HOOK_VARIANTS = {"python-c-pass", "shell-noop", "untagged", "tagged-ignored-op", "tagged-prepare", "tagged-release",
                 "reap-idle"}
PROFILES = {"balanced", "latency", "realtime", "throughput"}


def test_bench_run_quick(tmp_path: Path):
    out = tmp_path / "results"
    proc = subprocess.run(
        [str(ROOT / "bench" / "run"), "--quick", "--part", "2", "--out", str(out), "--virt-type", "kvm"],
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
    assert by_case["placement-l3"] == {"N=10", "N=100"}
    for rec in records:
        if rec["case"] == "placement-l3":  # the extra domain went beside its GPU, in one L3 domain
            assert rec["fleet"]["placement"]["nodes"] == [3] and len(rec["fleet"]["placement"]["l3"]) == 1
    (again,) = [rec for rec in records if rec["case"] == "retune"]
    assert again["pairs"] > 100 and _number(again["ratio_median"]) and _number(again["spread"]["ms_fresh"]["median"])
    for rec in records:
        if rec["case"] == "rewrite-throughput":
            counts = rec["domains"]
            assert counts["timed"] > 0 and counts["unsupported"] > 0  # the foreign corpus domains
            assert _number(rec["rewrites_per_s"])
    assert by_case["hook-cost"] == HOOK_VARIANTS
    for rec in records:
        if rec["case"] == "hook-cost":
            assert _number(rec["ratio_to_c_pass"]) and _number(rec["ratio_to_shell_noop"]), rec["variant"]
            assert rec["values_tuned_per_prepare"] > 0  # the prepare really tuned the fake host
            if rec["variant"] == "python-c-pass":
                assert rec["ratio_to_c_pass"] == 1
    assert by_case["rewrite-steps"] == set(rewrite_steps.PROFILES)
    assert by_case["rewrite-bound"] == {f"{p} {v}" for p in rewrite_steps.PROFILES for v in rewrite_steps.VARIANTS}
    for rec in records:
        if rec["case"] == "rewrite-steps":
            assert list(rec["steps_us"]) == [label for label, *_ in rewrite_steps.STEPS]
            assert all(_number(v) and v > 0 for v in rec["steps_us"].values()), rec["steps_us"]  # each step ran
        if rec["case"] in ("rewrite-steps", "rewrite-bound"):
            assert rec["domains"] > 20 and _number(rec["mean_ms"]), rec["variant"]
    (mapped,) = [rec for rec in records if rec["case"] == "map"]
    assert mapped["cpus_shown"] == 256 and mapped["claims"] == 40 and _number(mapped["ratio_to_goal"])
    index = json.loads((out / "index.json").read_text())
    assert sorted(index["files"]) == [p.name for p in files]


def test_rewrite_against_says_where_the_difference_is(tmp_path):
    """``--rewrite-against REV``'s ``REV by domain``: each pair's median ms in both trees, the widest
    difference first, and the five widest pairs' part of the whole difference."""
    names = {"latency": [("h", "a.xml"), ("h", "b.xml")], "balanced": [("h", "a.xml")]}
    # three rounds; this tree: a.xml latency 2 ms, b.xml latency 1 ms, a.xml balanced 1 ms; REV 1 ms each
    this = [{"latency": [0.002, 0.001], "balanced": [0.001]}] * 3
    rev = [{"latency": [0.001, 0.001], "balanced": [0.001]}] * 3
    rec = locality_cost._by_domain("abc1234", names, this, rev)
    assert rec["variant"] == "abc1234 by domain" and rec["pairs"] == 3
    first = rec["rows"][0]
    assert (first["domain"], first["profile"], round(first["ms_this"], 3), round(first["ms_rev"], 3)) == \
        ("a.xml", "latency", 2.0, 1.0)
    assert round(first["ratio"], 3) == 0.5 and round(rec["gap_ms"], 3) == 1.0 and round(rec["top5_share"], 3) == 1.0
    assert rec["runs"] == 3 and round(rec["p50_ms"], 3) == 1.0
    context = {"virt_type": "qemu", "machine": {}, "python": "", "lxml": ""}  # what bench/run adds to every result
    common.write_result(tmp_path, {**context, **rec})  # a result as every result is written


def test_rewrite_against_gives_each_profile_its_own_ratio():
    """``--rewrite-against REV``'s figures (bench/locality_cost.py): this tree's rate over REV's,
    paired by round, over every pair and over each profile's pairs apart (issue 33's figure)."""
    # two rounds of 4 pairs each: this tree took 1 ms and 2 ms a pair, REV 1.5 ms both times
    rec = locality_cost._paired("abc1234", "abc1234 latency", 4, 2, [(0.004, 0.006), (0.008, 0.006)])
    assert rec["variant"] == "abc1234 latency" and "the latency profile's pairs only" in rec["description"]
    assert [round(r["ratio"], 3) for r in rec["per_run"]] == [1.5, 0.75]
    assert round(rec["ratio_median"], 3) == round((1.5 + 0.75) / 2, 3)
    assert [round(r["ms_this"], 3) for r in rec["per_run"]] == [1.0, 2.0]
