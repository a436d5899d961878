"""``vmtune verify`` (vmtune/doctor/verify.py, oslat.py; the adapter vmtune/cli/verify.py): oslat on
the CPUs asked, the doctor's census around it, a verdict.

On a captured tree (fixtures/doctortrees.py) oslat's run is stood in for by a function that grows
the tree's counters and returns the JSON oslat 2.40 writes; on this machine (as root, with rt-tests)
a real oslat runs on CPU 1 beside a busy process pinned there, which the census must name, as the
CPU is and under verify's own lease (which moves it off, and back).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures import doctortrees as trees
from fixtures.wait import wait_until

from vmtune import cli
from vmtune.doctor import verify
from vmtune.doctor.findings import Context
from vmtune.errors import InvalidInput
from vmtune.hoststate.kinds import tasks


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
    assert set(doc) == {"cpus", "pass", "max_us", "seconds", "as_is", "tool", "domain", "pinned_by"} and doc["pass"] is True
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
    for argv in (["verify"], ["verify", "db1", "--cpus", "1"], ["verify", "db1", "--load"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("vmtune: error: verify: ") and err.count("\n") == 1, argv


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


# -- verify's own lease, on this machine ---------------------------------------------------------------

def _watched(pid: int) -> dict:
    """What verify's lease changes and must give back: the hog's affinity, the IRQ and workqueue
    masks, the sysctls, the C-states."""
    out = {"hog": os.sched_getaffinity(pid)}
    for path in ("/proc/irq/default_smp_affinity", "/sys/devices/virtual/workqueue/cpumask",
                 "/proc/sys/kernel/timer_migration", "/proc/sys/kernel/watchdog_cpumask", "/proc/sys/vm/stat_interval",
                 *map(str, Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpuidle/state*/disable"))):
        try:
            out[path] = Path(path).read_text()
        except OSError:
            pass
    return out


def _verify(state: Path, *args: str, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "vmtune", "verify", "--cpus", "1", *args]
    (state.parent / "none.toml").write_text("")  # the defaults, whatever this machine's /etc/vmtune says
    env = {**os.environ, "VMTUNE_STATE_DIR": str(state), "VMTUNE_CONFIG": str(state.parent / "none.toml")}
    cwd = Path(__file__).resolve().parents[1]
    if not wait:
        return subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture
def pinned_hog(tmp_path):
    """A busy process pinned to CPU 1; after the test, whatever it did, ``vmtune hook restore`` on
    its state folder (this machine is not left isolated by a test that failed half-way)."""
    if os.geteuid() != 0 or not shutil.which("oslat") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs root, oslat (rt-tests) and 2 CPUs")
    hog = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", "while True: pass"])
    time.sleep(0.3)
    yield hog
    hog.kill()
    hog.wait()
    (tmp_path / "none.toml").write_text("")
    subprocess.run([sys.executable, "-m", "vmtune", "hook", "restore", "--quiet", "--hooks-dir", str(tmp_path / "hooks")],
                   env={**os.environ, "VMTUNE_STATE_DIR": str(tmp_path / "state"),
                        "VMTUNE_CONFIG": str(tmp_path / "none.toml")}, capture_output=True, timeout=60, check=False)


def test_under_its_own_lease_the_hog_moves_off_and_comes_back(pinned_hog, tmp_path):
    """As is, the hog pinned to CPU 1 is a source and stalls oslat for its time slices; under
    verify's lease it runs elsewhere (it is not among the sources, the largest gap falls), and after
    it every value the lease changed is as before, the hog's affinity first."""
    before = _watched(pinned_hog.pid)
    as_is = _verify(tmp_path / "state", "--seconds", "2", "--as-is", "--json")
    leased = _verify(tmp_path / "state", "--seconds", "2", "--json")
    assert _watched(pinned_hog.pid) == before
    assert as_is.returncode in (0, 1) and leased.returncode in (0, 1), (as_is.stderr, leased.stderr)
    (mine,), (theirs,) = json.loads(as_is.stdout)["cpus"], json.loads(leased.stdout)["cpus"]
    assert any(s["kind"] == "thread" and s["pid"] == pinned_hog.pid for s in mine["sources"])
    assert not any(s["kind"] == "thread" and s["pid"] == pinned_hog.pid for s in theirs["sources"])
    assert theirs["max_us"] < mine["max_us"], (theirs["max_us"], mine["max_us"])
    assert json.loads((tmp_path / "state" / "state.json").read_text())["leases"] == {}


def _children(pid: int) -> dict[int, str]:
    """The live processes whose parent is ``pid``: pid -> comm."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = tasks.stat_fields(text)  # state, ppid, ...
        if fields and int(fields[1]) == pid and fields[0] != "Z":
            found[int(stat.parent.name)] = tasks.comm_of(text)
    return found


def _alive(pid: int) -> bool:
    try:
        fields = tasks.stat_fields(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return False
    return bool(fields) and fields[0] != "Z"


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_killed_mid_run_the_host_comes_back(pinned_hog, tmp_path, how):
    """SIGTERM: verify releases its lease itself. SIGKILL: the lease records verify's process, so
    it is stale at once, and `vmtune hook reap` (the reaper, or the next hook call) gives everything
    back. Either way its oslat and its --load hog die with it (they spun on for the run's 30 s)."""
    before = _watched(pinned_hog.pid)
    state = tmp_path / "state"
    run = _verify(state, "--seconds", "30", "--load", wait=False)
    deadline = time.monotonic() + 30
    while os.sched_getaffinity(pinned_hog.pid) == before["hog"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.sched_getaffinity(pinned_hog.pid) != before["hog"]  # the lease moved it
    # oslat runs now (a signal while the lease is taken is given back the same way)
    wait_until(lambda: "oslat" in _children(run.pid).values(), 30, "verify's oslat", interval=0.05)
    children = _children(run.pid)
    # oslat, and a hog on each other online CPU (started first)
    assert list(children.values()).count("oslat") == 1 and len(children) == os.cpu_count(), children
    run.send_signal(how)
    run.wait(60)
    wait_until(lambda: not any(map(_alive, children)), 10,
               lambda: f"outlived verify: {[children[p] for p in children if _alive(p)]}", interval=0.05)
    if how == signal.SIGKILL:
        assert list(json.loads((state / "state.json").read_text())["leases"]) == [f"verify:{run.pid}"]
        env = {**os.environ, "VMTUNE_STATE_DIR": str(state), "VMTUNE_CONFIG": str(tmp_path / "none.toml")}
        reap = subprocess.run([sys.executable, "-m", "vmtune", "hook", "reap", "--hooks-dir", str(tmp_path / "hooks")],
                              env=env, capture_output=True, text=True, timeout=60)
        assert reap.returncode == 0 and "reaped the lease of vmtune-verify" in reap.stdout, reap
    else:
        assert run.returncode == 128 + signal.SIGTERM
    assert _watched(pinned_hog.pid) == before
    assert json.loads((state / "state.json").read_text())["leases"] == {}


def test_without_oslat_nothing_is_leased(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os.path, "exists", lambda path: False if "oslat" in str(path) else os.path.isdir(path))
    monkeypatch.setenv("VMTUNE_STATE_DIR", str(tmp_path / "state"))
    assert cli.main(["verify", "--cpus", "1", "--seconds", "1"]) == 4
    assert not (tmp_path / "state").exists()


def test_the_prometheus_text_has_each_figure(healthy_host_tree):
    pytest.importorskip("prometheus_client")
    trees.counts(healthy_host_tree)
    done = verify.measure(Context(healthy_host_tree.roots()), frozenset({3}), 2, tool="oslat",
                          run=lambda tool, cpus, main, seconds, out: oslat_json(3, {1: 99, 150: 1}, 180))
    lines = verify.prometheus_text(done).splitlines()
    for sample in ('vmtune_verify_max_latency_us{cpu="3"} 180.0', 'vmtune_verify_stalls{cpu="3",over_us="100"} 1.0',
                   "vmtune_verify_pass 0.0", "vmtune_verify_mark_us 20.0", "vmtune_verify_leased 0.0"):
        assert sample in lines, sample


def test_the_load_is_one_busy_process_per_other_cpu_and_goes_after():
    from vmtune.roots import Roots

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    ctx = Context(Roots())
    online = set(range(os.cpu_count() or 1)) & os.sched_getaffinity(0)
    with verify.load(ctx, frozenset({max(online)})) as pids:
        assert len(pids) == len(online) - 1
        assert all(os.sched_getaffinity(pid) == online - {max(online)} for pid in pids)
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists() and
                not Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")]



def test_a_running_domain_is_judged_by_what_else_ran_on_its_cpus(healthy_host_tree):
    """db1 runs and holds CPU 3 (the hook's lease): no probe, the census alone. eth0 (its affinity
    allows other CPUs) and a movable task ran there: FAIL, naming them; the local timer, an IRQ
    pinned to CPU 3 alone and a per-CPU kernel thread alone: PASS."""
    xml = trees.domain("db1", [3], hugepage_kib=None)
    trees.running(healthy_host_tree, xml)
    trees.hook_state(healthy_host_tree, {trees.uuid_of(xml): {"name": "db1", "profile": "latency", "cpus": "3"}}, [])
    healthy_host_tree.write("proc/irq/30/smp_affinity_list", "0-7")
    healthy_host_tree.write("proc/irq/32/smp_affinity_list", "3")
    trees.counts(healthy_host_tree)
    trees.ran(healthy_host_tree, 300, "backup", 3, 10)
    trees.ran(healthy_host_tree, 301, "kworker/3:1", 3, 10, cpus="3", flags=0x04000000)

    def meanwhile(seconds):
        trees.counts(healthy_host_tree, b=17, c=8, d=1500)
        trees.ran(healthy_host_tree, 300, "backup", 3, 30)
        trees.ran(healthy_host_tree, 301, "kworker/3:1", 3, 20, cpus="3", flags=0x04000000)

    ctx = Context(healthy_host_tree.roots())
    done = verify.running(ctx, "db1", 1, sleep=meanwhile)
    assert not done.passed and done.domain == "db1"
    moved = {s["name"] for r in done.results for s in r.sources if s.get("movable")}
    assert moved == {"IRQ 30 (eth0)", "backup"}
    assert done.lines()[0].startswith("CPU 3: could run elsewhere: backup[300] 200 ms, IRQ 30 (eth0) ×10")

    def quiet(seconds):
        trees.counts(healthy_host_tree, c=8, d=1500)
        trees.ran(healthy_host_tree, 301, "kworker/3:1", 3, 20, cpus="3", flags=0x04000000)

    trees.counts(healthy_host_tree)
    trees.ran(healthy_host_tree, 301, "kworker/3:1", 3, 10, cpus="3", flags=0x04000000)
    assert verify.running(ctx, "db1", 1, sleep=quiet).passed
    with pytest.raises(InvalidInput, match="db2 holds no lease"):
        verify.running(ctx, "db2", 1, sleep=quiet)


def test_a_defined_domain_that_does_not_run_has_its_pins_measured(libvirtd, pinned_hog, tmp_path):
    """A latency-tagged domain libvirt knows, shut off, its vCPU pinned to CPU 1: verify NAME runs
    oslat on CPU 1 under a lease of its profile, as its start would take it, and gives it back."""
    from fixtures.libvirt_env import define, minimal_domain, undefine

    name = define(minimal_domain(extra="<cputune><vcpupin vcpu='0' cpuset='1'/></cputune><metadata><vmtune:tune "
                                       "xmlns:vmtune='https://vmtune.dev/xmlns/1' profile='latency'/></metadata>"))
    (tmp_path / "none.toml").write_text("")
    try:
        before = _watched(pinned_hog.pid)
        argv_done = subprocess.run([sys.executable, "-m", "vmtune", "verify", name, "--seconds", "1", "--json"],
                                   env={**os.environ, "VMTUNE_STATE_DIR": str(tmp_path / "state"),
                                        "VMTUNE_CONFIG": str(tmp_path / "none.toml")},
                                   capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
        assert argv_done.returncode in (0, 1), argv_done.stderr
        (result,) = json.loads(argv_done.stdout)["domains"]
        assert result["pinned_by"] == name and [c["cpu"] for c in result["cpus"]] == [1]
        assert result["cpus"][0]["max_us"] is not None and result["as_is"] is False
        assert not any(s["kind"] == "thread" and s["pid"] == pinned_hog.pid for s in result["cpus"][0]["sources"])
        assert _watched(pinned_hog.pid) == before
    finally:
        undefine(name)
