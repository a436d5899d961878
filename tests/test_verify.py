"""``vmtune verify`` (vmtune/doctor/verify.py, oslat.py; the adapter vmtune/cli/verify.py): oslat on
the CPUs asked, the doctor's census around it, a verdict.

On a captured tree (fixtures/doctortrees.py) oslat's run is stood in for by a function that grows
the tree's counters and returns the JSON oslat 2.40 writes; on this machine (as root, with rt-tests)
a real oslat runs on CPU 1 beside a busy process pinned there, which the census must name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures import doctortrees as trees

from vmtune import cli
from vmtune.doctor import verify
from vmtune.doctor.findings import Context
from vmtune.errors import InvalidInput


def oslat_json(cpu: int, hist: dict[int, int], top: int) -> dict:
    """What oslat --json writes for one thread (its keys as 2.40 writes them)."""
    return {"file_version": 1, "rt_test_version:": "2.40", "num_threads": 1,
            "thread": {"0": {"cpu": cpu, "freq": 2100, "min": 1, "avg": 1.0, "max": top, "duration": 2.0,
                             "histogram": {str(k): v for k, v in hist.items()}}}}


def test_the_figures_and_what_ran_there(healthy_host_tree):
    """CPU 3 for 2 s: the largest gap as oslat says, p99 and p99.9 from its 1 µs buckets, the stalls
    of 10, 100 and 1,000 µs or more, and the sources that grew meanwhile, threads first."""
    trees.counts(healthy_host_tree)
    trees.ran(healthy_host_tree, 300, "backup", 3, 10)
    calls = []

    def run(tool, cpus, main, seconds, out):
        calls.append((tool, cpus, main, seconds))
        trees.counts(healthy_host_tree, b=17, d=1500, t=90)
        trees.ran(healthy_host_tree, 300, "backup", 3, 30)
        return oslat_json(3, {1: 990_000, 2: 9_000, 12: 900, 150: 90, 1023: 10}, 4_321)

    done = verify.measure(Context(healthy_host_tree.roots()), frozenset({3}), 2, tool="/usr/bin/oslat", run=run)
    assert calls == [("/usr/bin/oslat", frozenset({3}), 0, 2)]  # the main thread on the first CPU not measured
    (cpu,) = done.results
    assert (cpu.cpu, cpu.max_us, cpu.p99_us, cpu.p999_us) == (3, 4_321, 1, 2)  # 99% and 99.9% are under 1 and 2 µs
    assert cpu.stalls == {10: 1000, 100: 100, 1000: 10}
    assert cpu.sources[0] == {"kind": "thread", "name": "backup", "pid": 300, "count": 200}  # 20 ticks
    kinds = {(s["kind"], s["name"]): s["count"] for s in cpu.sources}
    assert kinds[("irq", "IRQ 30 (eth0)")] == 10 and kinds[("interrupt", "LOC (Local timer interrupts)")] == 1000
    assert kinds[("softirq", "TIMER")] == 50
    assert not done.passed and done.to_dict()["pass"] is False
    assert done.lines()[-1] == ("FAIL: the largest gap is 4321 µs (CPU 3), the mark 20 µs, over 2 s as the CPUs are")
    assert verify.measure(Context(healthy_host_tree.roots()), frozenset({3}), 2, 5_000, tool="oslat", run=run).passed


def test_the_json_has_the_documented_shape(healthy_host_tree):
    trees.counts(healthy_host_tree)
    done = verify.measure(Context(healthy_host_tree.roots()), frozenset({2, 3}), 1, tool="oslat",
                          run=lambda tool, cpus, main, seconds, out: {"thread": {
                              str(i): oslat_json(c, {1: 100}, 1)["thread"]["0"] for i, c in enumerate(sorted(cpus))}})
    doc = done.to_dict()
    assert set(doc) == {"cpus", "pass", "max_us", "seconds", "as_is", "tool"} and doc["pass"] is True
    assert [set(c) for c in doc["cpus"]] == [{"cpu", "max_us", "p99_us", "p999_us", "samples", "stalls", "sources"}] * 2
    assert doc["cpus"][0]["stalls"] == {"over_10us": 0, "over_100us": 0, "over_1000us": 0}


def test_cpus_that_are_not_online_or_leave_none_for_oslat_are_one_line(healthy_host_tree):
    with pytest.raises(InvalidInput, match="CPUs 9 are not online"):
        verify.measure(Context(healthy_host_tree.roots()), frozenset({9}), 1, tool="oslat", run=None)
    with pytest.raises(InvalidInput, match="every online CPU: oslat needs one more"):
        verify.main_cpu(frozenset(range(8)), list(range(8)))


def test_without_oslat_exit_4_names_the_package(monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os.path, "exists", lambda path: False if "oslat" in str(path) else os.path.isdir(path))
    code = cli.main(["verify", "--cpus", "1", "--as-is", "--seconds", "1"])
    err = capsys.readouterr().err
    assert code == 4 and err.count("\n") == 1
    assert err.startswith("vmtune: error: oslat is not installed: apt-get install rt-tests")


def test_usage_errors_are_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["verify", "--cpus", "1", "--as-is", "--seconds", "0"])
    assert exc.value.code == 2 and "seconds" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("oslat"), reason="needs root and oslat (rt-tests)")
def test_a_real_oslat_names_a_hog_pinned_on_the_cpu(tmp_path):
    """A busy process pinned to CPU 1: verify --as-is --json names it (its pid) among CPU 1's
    sources, and its largest gap is the hog's time slice, far over the mark: exit 1."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    hog = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        proc = subprocess.run([sys.executable, "-m", "vmtune", "verify", "--cpus", "1", "--seconds", "2", "--as-is",
                               "--json"], capture_output=True, text=True, timeout=120,
                              cwd=Path(__file__).resolve().parents[1])
    finally:
        hog.kill()
        hog.wait()
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    (cpu,) = doc["cpus"]
    assert any(s["kind"] == "thread" and s["pid"] == hog.pid for s in cpu["sources"]), cpu["sources"]
    assert cpu["max_us"] > doc["max_us"] and cpu["stalls"]["over_100us"] > 0
