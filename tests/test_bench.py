"""bench/run --quick works and writes well-formed result files. No timing is asserted here:
the figures live in BENCHMARKS.md and bench/results/, measured on purpose, not in CI."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import ROOT
from fixtures.benchrecords import REQUIRED, number as _number

# -- part 1: guests through libvirt (root only; TCG here, so --virt-type qemu) --------------------
GUEST_CASES = {"guest-disk", "guest-net", "guest-timer"}
# under TCG vmtune puts the emulator beside the vCPU: the emulator variant moves it to the reserved CPU
GUEST_VARIANTS = {"stock", "virtio", "cache-io", "iothread", "pinning", "hugepages", "cpu-mode", "tuned",
                  "tuned-emu-reserved"}
SINGLE_VARIANTS = GUEST_VARIANTS - {"stock", "tuned", "tuned-emu-reserved"}
SCHED_VARIANTS = {"stock", "tuned", "tuned-emu-reserved", "stock-hosthog", "tuned-hosthog", "tuned-emu-reserved-hosthog"}
SMOKE_VARIANTS = {"stock", "tuned"}
SMOKE_SCHED_VARIANTS = {"tuned", "tuned-hosthog"}


def test_bench_run_smoke_part1(tmp_path: Path):
    """``--smoke --part 1``: each of part 1's scenarios boots once (the variant matrix is --quick's and
    the full run's): stock and tuned for disk/net/timer, and guest-sched beside a hog guest and
    beside host hogs."""
    out = tmp_path / "results"
    proc = subprocess.run(
        [str(ROOT / "bench" / "run"), "--smoke", "--part", "1", "--out", str(out), "--virt-type", "qemu"],
        cwd=tmp_path, capture_output=True, text=True, timeout=1500, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    index = json.loads((out / "index.json").read_text())
    files = sorted(p for p in out.glob("*.json") if p.name != "index.json")
    if os.geteuid() != 0:  # part 1 is skipped with a message, and nothing else runs
        assert index["part1"]["ran"] is False and "root" in index["part1"]["skipped"]
        assert "part 1 (what a guest gains) skipped" in proc.stderr
        assert not files
        return
    assert index["part1"] == {"ran": True}, index["part1"]
    records = [json.loads(p.read_text()) for p in files]
    by_case: dict[str, set] = {}
    for path, rec in zip(files, records):
        missing = [k for k in REQUIRED if k not in rec]
        assert not missing, f"{path.name} lacks {missing}"
        by_case.setdefault(rec["case"], set()).add(rec["variant"])
        assert rec["virt_type"] == "qemu" and "TCG" in rec["virt_type_note"], path.name
        assert _number(rec["p50_ms"]) and _number(rec["p99_ms"]) and rec["p50_ms"] <= rec["p99_ms"], path.name
        for key in ("p50_ms", "p99_ms"):
            s = rec["spread"][key]
            assert s["min"] <= s["q1"] <= s["median"] <= s["q3"] <= s["max"], (path.name, key)
            assert s["n"] == rec["runs"] == len(rec["per_run"]) >= 1, path.name
        for run in rec["per_run"]:
            assert run["n"] == rec["ops_per_run"] > 0 and _number(run["p99_us"]), path.name
            assert run["facts"]["nproc"] == 1, path.name  # the latency guest has one vCPU
        if rec["variant"] == "stock" or rec["case"] not in GUEST_CASES:  # guest-sched has no stock here
            assert "vs_stock" not in rec
        else:
            for k in ("p50", "p99"):
                cmp = rec["vs_stock"][k]
                assert _number(cmp["ratio"]) and isinstance(cmp["verdict"], str), path.name
        if rec["variant"] in SINGLE_VARIANTS:
            info = rec["variant_info"]
            assert info["changes"] and info["subset_of_tuned"] is True, path.name
        assert "<domain" in json.dumps(rec["domain_xml"]), path.name
        # the tuned variants ran through the hook in the real libvirtd: a lease while they ran, none after
        hook = rec["hook"]
        assert hook["tagged"] == rec["variant"].startswith("tuned"), path.name
        assert hook["boots_with_lease"] == (rec["runs"] if hook["tagged"] else 0), path.name
        assert hook["boots_lease_released"] == rec["runs"], path.name
    assert by_case == {**{c: SMOKE_VARIANTS for c in GUEST_CASES}, "guest-sched": SMOKE_SCHED_VARIANTS}
    setup = index["part1_hook"]
    assert setup["installed_by"] == "this run" and setup["teardown"]["removed"] is True, setup
    assert setup["host_restored"] is True and not setup["host_changes"], setup
    facts = {(r["case"], r["variant"]): r["per_run"][0]["facts"] for r in records}
    assert facts[("guest-disk", "stock")]["disk"] == "sda" and facts[("guest-disk", "tuned")]["disk"] == "vda"
    assert facts[("guest-net", "stock")]["nic_driver"] == "e1000"
    assert facts[("guest-net", "tuned")]["nic_driver"] == "virtio_net"
    assert sorted(index["files"]) == [p.name for p in files]


def run_host_part(out: Path, part: str, timeout: int) -> list[dict] | None:
    """``bench/run --smoke --part PART``: its records; None when the part says it cannot run here
    (not root, one CPU), as it must then."""
    proc = subprocess.run([str(ROOT / "bench" / "run"), "--smoke", "--part", part, "--out", str(out)],
                          cwd=out.parent, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ran = json.loads((out / "index.json").read_text())[part.replace("-", "_")]
    if os.geteuid() != 0 or (os.cpu_count() or 1) < 2:
        assert ran["ran"] is False
        return None
    assert ran == {"ran": True}, ran
    return [json.loads(p.read_text()) for p in out.glob(f"{part}--*.json")]


ISOLATION_VARIANTS = {"no-hog", "no-lease", "lease-isolate-off", "lease-isolated"}


def test_bench_run_smoke_host_isolation(tmp_path: Path):
    """``--part host-isolation``: as root with two CPUs, one record per variant with the comparisons
    (the figures are not asserted); the host's IRQ and workqueue masks are as before; else a skip."""
    out = tmp_path / "results"
    masks = ("/proc/irq/default_smp_affinity", "/sys/devices/virtual/workqueue/cpumask",
             *map(str, Path("/proc/irq").glob("*/smp_affinity_list")))  # every IRQ's, as it was
    before = {p: Path(p).read_text() for p in masks if os.path.exists(p)}
    records = run_host_part(out, "host-isolation", 600)
    if records is None:
        return
    assert {r["variant"] for r in records} == ISOLATION_VARIANTS
    for rec in records:
        assert _number(rec["p50_ms"]) and _number(rec["p99_ms"]), rec["variant"]
    isolated = next(r for r in records if r["variant"] == "lease-isolated")
    assert _number(isolated["vs_lease_isolate_off"]["p99"]["ratio"])  # compared with today's behaviour
    assert {p: Path(p).read_text() for p in before if os.path.exists(p)} == {
        p: v for p, v in before.items() if os.path.exists(p)}  # (an IRQ freed meanwhile is no leak)


def _irqbalance_pids() -> set[str]:
    out = set()
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "irqbalance":
                out.add(comm.parent.name)
        except OSError:  # exited meanwhile
            pass
    return out


NOISE_VARIANTS = {"idle", "hogs", "lease-isolate-off", "lease-isolated", "lease-isolated-knobs", "lease-knobs-irqbalance"}


def test_bench_run_smoke_host_noise(tmp_path: Path):
    """``--part host-noise``: as root with two CPUs, one record per variant (the irqbalance one unless
    the bench says why not) with oslat's max, its stalls per minute and the census; the host's IRQ
    affinities, masks and sysctls are as before, and no irqbalance is left running; else a skip."""
    out = tmp_path / "results"
    watched = ("/proc/irq/default_smp_affinity", "/sys/devices/virtual/workqueue/cpumask",
               "/proc/sys/kernel/timer_migration", "/proc/sys/kernel/watchdog_cpumask", "/proc/sys/vm/stat_interval",
               *map(str, Path("/sys/bus/workqueue/devices").glob("*/cpumask")),
               *map(str, Path("/proc/irq").glob("*/smp_affinity_list")))  # every IRQ's, as it was
    before = {p: Path(p).read_text() for p in watched if os.path.exists(p)}
    irqbalance_before = _irqbalance_pids()
    records = run_host_part(out, "host-noise", 300)
    if records is None:
        return
    setup = records[0]["setup"]
    expected = NOISE_VARIANTS if setup["irqbalance_variant_skipped"] is None else NOISE_VARIANTS - {
        "lease-knobs-irqbalance"}
    assert {r["variant"] for r in records} == expected
    for rec in records:
        missing = [k for k in REQUIRED if k not in rec]
        assert not missing, (rec["variant"], missing)
        assert rec["runs"] == len(rec["per_run"]) >= 1 and _number(rec["max_us"]), rec["variant"]
        assert set(rec["stalls_per_min"]) == {"over_10us", "over_50us", "over_100us"}, rec["variant"]
        s = rec["stalls_per_min"]
        assert all(map(_number, s.values())) and s["over_10us"] >= s["over_50us"] >= s["over_100us"], rec["variant"]
        assert _number(rec["census"]["interrupts_per_s_median"]) and rec["census"]["top_interrupts_per_s"]
        assert _number(rec["foreign_cpu_ms_median"]), rec["variant"]
        for run in rec["per_run"]:
            assert run["samples"] > 0 and run["max_us"] >= run["p99_us"] >= 1, rec["variant"]
            assert _number(run["census"]["interrupts_total_per_s"]), rec["variant"]  # 0 under nohz_full
            if rec["lease"]:
                assert run["prepare"]["rc"] == 0 and run["release"]["rc"] == 0, rec["variant"]
        if rec["variant"] != "lease-isolate-off":
            assert rec["vs_lease_isolate_off"]["max"]["n"] == rec["runs"]
    by = {r["variant"]: r for r in records}
    # the knobs are what differs between the two isolated variants, while the lease holds the CPU
    if "/proc/sys/vm/stat_interval" in before:
        assert by["lease-isolated"]["per_run"][0]["knobs_during"]["vm.stat_interval"] == before[
            "/proc/sys/vm/stat_interval"].strip()
        assert by["lease-isolated-knobs"]["per_run"][0]["knobs_during"]["vm.stat_interval"] == "10"
    if "lease-knobs-irqbalance" in by:
        for run in by["lease-knobs-irqbalance"]["per_run"]:
            assert run["irqbalance"]["exit"] is not None  # stopped
    assert setup["host_restored"] is True and not setup["host_changes"], setup["host_changes"]
    assert {p: Path(p).read_text() for p in before if os.path.exists(p)} == {
        p: v for p, v in before.items() if os.path.exists(p)}  # (an IRQ freed meanwhile is no leak)
    assert _irqbalance_pids() <= irqbalance_before  # none of the bench's left running
