"""vmtune doctor (vmtune/doctor/): captured trees with the seeds' problems, the healthy tree, the
output shapes, and this machine for real.

The trees come from doctortrees.py. The clock measurement is injected (``measure=at(MHz)``) on
captured trees: their CPUs are not this machine's.
"""

from __future__ import annotations

import json
import os
import sys

from fixtures import doctortrees as trees
import pytest

from vmtune import cli
from vmtune.doctor import Measurement, Roots, diagnose, measure
from vmtune.doctor.findings import LEVELS

# No /etc/vmtune, $VMTUNE_* or user profiles of the machine (doctortrees.py).
pytestmark = pytest.mark.usefixtures("no_machine_vmtune")

GOVERNOR = "devices/system/cpu/cpufreq/policy0/scaling_governor"
GOVERNORS = "devices/system/cpu/cpufreq/policy*/scaling_governor"  # the source of a finding over every policy


def at(mhz: float):
    """A measurement that finds every CPU at ``mhz``."""
    return lambda cpu: Measurement(mhz, "injected")


def found(report, area: str, *needles: str, level: str | None = None):
    """The findings of ``area`` whose text holds every needle (and that have ``level``)."""
    return [f for f in report.findings if f.area == area and (level is None or f.level == level)
            and all(n in f"{f.source} {f.found} {f.want} {f.fix}" for n in needles)]


def levels(report, area: str) -> set[str]:
    return {f.level for f in report.findings if f.area == area}


def no_crash(report) -> None:
    crashed = [f.line() for f in report.findings if f.source == "vmtune"]
    assert not crashed, crashed


def run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


# -- the healthy host ---------------------------------------------------------------------------------
def test_healthy_tree_has_nothing_to_fix(healthy_host_tree):
    """A host tuned the way vmtune wants it gives no FAIL and no WARN, and the clock measures at 100%."""
    report = diagnose(healthy_host_tree.roots(), measure=at(2400))
    no_crash(report)
    assert not [f.line() for f in report.findings if f.level in ("WARN", "FAIL")]
    assert not report.failed
    assert report.environment.kind == "bare-metal"
    assert found(report, "cpufreq", "2400 MHz under load, 100% of 2400 MHz nominal (base_frequency)", level="OK")
    assert found(report, "cpuidle", "C6 (exit 133 µs) disabled", level="OK")


def test_every_area_reports(healthy_host_tree):
    """Each area says something about the healthy tree, so none is silently left out."""
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert {f.area for f in report.findings} == {"environment", "cpufreq", "cpuidle", "memory", "virt", "tuners",
                                                 "hook", "state", "isolation", "domains"}


# -- frequency ------------------------------------------------------------------------------------------
def test_powersave_at_half_speed_fails(healthy_host_tree):
    """The first seed: powersave, the CPUs at 1.2 GHz of 2.4 under load: FAIL, and the governor named."""
    trees.powersave(healthy_host_tree)
    report = diagnose(healthy_host_tree.roots(), measure=at(1200))
    assert report.failed
    (slow,) = found(report, "cpufreq", "1200 MHz under load, 50% of 2400 MHz nominal", level="FAIL")
    assert "CPUs 0-3" in slow.found  # one thread per core is measured
    assert "performance" in slow.fix
    assert found(report, "cpufreq", GOVERNORS, "powersave", level="WARN")
    assert found(report, "cpufreq", "energy_performance_preference", "power", level="WARN")


@pytest.mark.parametrize("mhz, level", [(3100, "OK"), (2200, "OK"), (2100, "WARN"), (1500, "WARN"), (1400, "FAIL")],
                         ids=["turbo", "92pct", "87pct", "62pct", "58pct"])
def test_measured_clock_levels(healthy_host_tree, mhz, level):
    """WARN below 90% of the nominal maximum, FAIL below 60%."""
    report = diagnose(healthy_host_tree.roots(), measure=at(mhz))
    (measured,) = found(report, "cpufreq", "under load")
    assert measured.level == level, measured.line()


def test_slow_cpus_are_named(healthy_host_tree):
    """Only the slow cores are reported slow; the others are OK on a line of their own."""
    report = diagnose(healthy_host_tree.roots(), measure=lambda cpu: Measurement(1200 if cpu == 2 else 2400, "injected"))
    assert [f.found.rsplit("CPUs ", 1)[1] for f in found(report, "cpufreq", "under load", level="FAIL")] == ["2"]
    assert [f.found.rsplit("CPUs ", 1)[1] for f in found(report, "cpufreq", "under load", level="OK")] == ["0-1,3"]


def test_captured_tree_is_not_measured_on_this_machine(healthy_host_tree, monkeypatch):
    """With a captured sysfs the busy loop never runs: this machine's CPUs are not the tree's."""
    def boom(*args, **kwargs):
        raise AssertionError("measured a captured tree")

    monkeypatch.setattr(measure, "effective_mhz", boom)
    report = diagnose(healthy_host_tree.roots())
    assert found(report, "cpufreq", "clock not measured", level="SKIP")


def test_mixed_governors(healthy_host_tree):
    """Governors that differ between policies are flagged with the CPUs of each."""
    trees.governors(healthy_host_tree, "powersave", cpus=[4, 5, 6, 7])
    report = diagnose(healthy_host_tree.roots(), measure=False)
    (mixed,) = found(report, "cpufreq", "scaling_governor", level="WARN")
    assert mixed.found == "mixed: performance on CPUs 0-3, powersave on CPUs 4-7"


def test_intel_pstate_no_turbo(healthy_host_tree):
    trees.no_turbo(healthy_host_tree)
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert found(report, "cpufreq", "intel_pstate/no_turbo", "1 (turbo off)", level="WARN")


def test_bios_owned_pstates(healthy_host_tree):
    """Bare metal with no cpufreq: the BIOS owns the P-states; the nominal clock comes from the model name."""
    trees.bios_owned(healthy_host_tree)
    report = diagnose(healthy_host_tree.roots(), measure=at(1200))
    assert found(report, "cpufreq", "BIOS owns the P-states", "OS Controlled", level="WARN")
    assert found(report, "cpufreq", "50% of 2400 MHz nominal (model name)", level="FAIL")


def test_guest_is_not_blamed_for_its_host(healthy_host_tree):
    """A KVM guest without cpufreq or C-states is told to ask its host, not that its BIOS owns P-states."""
    trees.guest(healthy_host_tree)
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert report.environment.kind == "vm" and report.environment.hypervisor == "KVM"
    assert levels(report, "cpufreq") == {"SKIP"}
    assert found(report, "cpuidle", "no C-states in this guest", level="SKIP")
    assert found(report, "virt", "current_clocksource", "kvm-clock", level="OK")


@pytest.mark.parametrize("edit, kind, evidence", [
    (lambda t: t.write("proc/cpuinfo", t.read("proc/cpuinfo").replace("vmx", "hypervisor") + "\n"),
     "vm", "hypervisor flag in /proc/cpuinfo"),
    (lambda t: (t.write("sys/class/dmi/id/sys_vendor", "QEMU"), t.write("sys/class/dmi/id/product_name", "Standard PC")),
     "vm", "DMI 'QEMU Standard PC'"),
    (lambda t: t.write(".dockerenv", ""), "container", None),
    (lambda t: t.write("proc/self/mounts", "sysfs /sys sysfs ro,nosuid 0 0"), "container", None),
    (lambda t: None, "bare-metal", None),
], ids=["hypervisor-flag", "dmi", "dockerenv", "read-only-sysfs", "bare-metal"])
def test_environment(healthy_host_tree, edit, kind, evidence):
    """Each sign on its own: the hypervisor flag, a virtual DMI vendor, container markers."""
    edit(healthy_host_tree)
    env = diagnose(healthy_host_tree.roots(), measure=False).environment
    assert env.kind == kind
    assert (evidence in env.evidence) if evidence else not env.evidence


# -- C-states -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("qos, level", [("0", "WARN"), ("n/a", "OK"), ("200", "WARN"), ("100", "OK")],
                         ids=["no-constraint", "polling-only", "limit-above-C6", "limit-below-C6"])
def test_deep_cstates_and_pm_qos(healthy_host_tree, qos, level):
    """C6 enabled is a WARN unless pm_qos_resume_latency_us keeps the CPUs out: 0 means no constraint,
    n/a polling only, N allows states whose exit latency is at most N µs."""
    trees.deep_cstates(healthy_host_tree, qos)
    report = diagnose(healthy_host_tree.roots(), measure=False)
    (c6,) = found(report, "cpuidle", "C6 (exit 133 µs)")
    assert c6.level == level, c6.line()
    if level == "WARN":
        assert "enabled on CPUs 0-7" in c6.found and "cpupower idle-set -D 10" in c6.fix


def test_pm_qos_per_cpu(healthy_host_tree):
    """CPUs whose constraint reads n/a are not counted as reaching C6; the others are."""
    trees.deep_cstates(healthy_host_tree, "0")
    for cpu in (0, 1, 2, 3):
        healthy_host_tree.write(f"sys/devices/system/cpu/cpu{cpu}/power/pm_qos_resume_latency_us", "n/a")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert found(report, "cpuidle", "C6 (exit 133 µs) enabled on CPUs 4-7", level="WARN")
    assert found(report, "cpuidle", "n/a (polling only) on CPUs 0-3, 0 (no constraint) on CPUs 4-7", level="INFO")


def test_idle_poll_on_the_cmdline(healthy_host_tree):
    trees.cmdline(healthy_host_tree, "idle=poll intel_idle.max_cstate=1")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert found(report, "cpuidle", "idle=poll: every idle CPU spins", level="WARN")
    assert found(report, "cpuidle", "intel_idle.max_cstate=1: a static limit", level="INFO")
    assert not found(report, "cpuidle", "no C-state limits")


# -- memory ---------------------------------------------------------------------------------------------
def test_ksm_on(healthy_host_tree):
    trees.ksm_on(healthy_host_tree)
    report = diagnose(healthy_host_tree.roots(), measure=False)
    (ksm,) = found(report, "memory", "ksm/run")
    assert (ksm.level, ksm.want) == ("WARN", "0") and "pages_sharing 51200" in ksm.found


def test_hugepages_short_for_a_running_domain(healthy_host_tree):
    """A running latency domain holds 512 pages of node 0, but the pool was cut to 256: it cannot start again."""
    trees.running(healthy_host_tree, trees.domain("db", [1, 5], mib=1024, node=0))
    trees.hugepages(healthy_host_tree, 0, total=256, free=0)
    report = diagnose(healthy_host_tree.roots(), measure=False)
    (short,) = found(report, "memory", "node0 2M", "db need 512 (running)")
    assert short.level == "FAIL" and "256 total" in short.found and "nr_hugepages" in short.fix
    assert report.failed


def test_hugepages_enough_for_a_running_domain(healthy_host_tree):
    trees.running(healthy_host_tree, trees.domain("db", [1, 5], mib=1024, node=0))
    trees.hugepages(healthy_host_tree, 0, total=1024, free=512)
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert found(report, "memory", "node0 2M: 1024 total, 512 free; db need 512 (running)", level="OK")


def test_hugepages_short_for_a_stopped_domain(healthy_host_tree):
    """A shut-off domain needs its pages free: 1 GiB on node 1 is 512 pages, 100 are free."""
    trees.hugepages(healthy_host_tree, 1, total=100, free=100)
    report = diagnose(healthy_host_tree.roots(), measure=False,
                      domains=[(trees.domain("web", [2, 6], node=1), "shut off")])
    (short,) = found(report, "memory", "node1 2M", "web need 0 (running) + 512 (not running)")
    assert short.level == "FAIL"


def test_hugepages_short_anywhere(healthy_host_tree):
    """A domain backed by hugepages but bound to no node takes them from any node: 100 + 100 < 512."""
    trees.hugepages(healthy_host_tree, 0, total=100, free=100)
    trees.hugepages(healthy_host_tree, 1, total=100, free=100)
    report = diagnose(healthy_host_tree.roots(), measure=False, domains=[(trees.domain("web", [2], node=None), "shut off")])
    (short,) = found(report, "memory", "any node 2M: 200 total, 200 free; web need 0 (running) + 512")
    assert short.level == "FAIL" and "echo 512 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages" in short.fix


# -- virtualization and tuners -------------------------------------------------------------------------
def test_tuned_running_with_its_profile(healthy_host_tree):
    trees.tuned(healthy_host_tree, "throughput-performance")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    (tuned,) = found(report, "tuners", "tuned running (pid 1044), profile throughput-performance (manual)")
    assert tuned.level == "WARN"


def test_missing_kvm_and_vhost(healthy_host_tree):
    healthy_host_tree.remove("dev/kvm")
    healthy_host_tree.remove("dev/vhost-net")
    healthy_host_tree.remove("sys/module/vhost_net")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert found(report, "virt", "dev/kvm", "missing", "modprobe kvm_intel", level="FAIL")
    assert found(report, "virt", "dev/vhost-net", "no vhost_net module", level="WARN")


# -- vmtune's own state and the domains ---------------------------------------------------------------------
def test_overlapping_latency_domains_fail(healthy_host_tree, capsys):
    """Two running latency domains pinned to the same CPUs: the same overlap `vmtune plan` finds; exit 1."""
    trees.running(healthy_host_tree, trees.domain("db1", [1, 5], hugepage_kib=None))
    trees.running(healthy_host_tree, trees.domain("db2", [1, 5], hugepage_kib=None), state="paused")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert found(report, "domains", "db1 (latency, running), db2 (latency, paused)", level="INFO")
    (overlap,) = found(report, "domains", "cpu-overlap", level="FAIL")
    assert "CPUs 1,5" in overlap.found
    rc, out, _ = run(capsys, "doctor", *healthy_host_tree.argv(), "--no-measure")
    assert rc == 1 and "FAIL  domains" in out


def test_status_file_states_are_virsh_words(healthy_host_tree):
    """A status file's state word (libvirt's: blocked, shutdown, nostate) reads as virsh says it;
    a word libvirt does not have is kept as it is."""
    for i, word in enumerate(("blocked", "shutdown", "nostate", "paused", "odd")):
        trees.running(healthy_host_tree, trees.domain(f"d{i}", [1 + i], hugepage_kib=None), state=word)
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert found(report, "domains", "d0 (latency, idle), d1 (latency, in shutdown), d2 (latency, no state), "
                                    "d3 (latency, paused), d4 (latency, odd)", level="INFO")


def test_hook_state_drift_and_stale_leases(healthy_host_tree):
    """The hook's baseline against live values: a governor changed behind its back, overlapping leases,
    and a lease whose domain no longer runs."""
    db1 = trees.domain("db1", [1], hugepage_kib=None)
    trees.running(healthy_host_tree, db1)
    leases = {trees.uuid_of(db1): {"name": "db1", "profile": "latency", "cpus": "1"},
              "u2": {"name": "gone", "profile": "latency", "cpus": "1,2"}}
    baseline = [{"path": GOVERNOR, "before": "powersave", "after": "performance"},
                {"path": "kernel/mm/ksm/run", "before": "1", "after": "0"}]
    trees.hook_state(healthy_host_tree, leases, baseline)
    healthy_host_tree.write(f"sys/{GOVERNOR}", "powersave")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    (drift,) = found(report, "state", GOVERNOR, "but the hook set performance", level="WARN")
    assert drift.found.startswith("powersave")
    assert found(report, "state", "leases db1 and gone share CPUs 1", level="FAIL")
    assert found(report, "state", "lease of gone, which is not running", level="WARN")
    assert not found(report, "state", "lease of db1")


def test_stale_leases_are_judged_as_the_hook_judges_them(healthy_host_tree):
    """The hook's liveness test (alive.py) on the captured tree: a domain whose QEMU runs under its
    UUID keeps its lease; one whose QEMU is gone, or whose pid is another domain's QEMU, is a WARN
    that says `vmtune hook reap`. The doctor itself changes nothing."""
    xmls = {name: trees.domain(name, [cpu], hugepage_kib=None) for name, cpu in (("db1", 1), ("db2", 2), ("db3", 3))}
    for pid, (name, xml) in enumerate(xmls.items(), start=500):
        trees.running(healthy_host_tree, xml)
        healthy_host_tree.write(f"run/libvirt/qemu/{name}.pid", str(pid))
    qemu = "\0".join(["qemu-system-x86_64", "-name", "guest=db1,debug-threads=on", "-uuid", trees.uuid_of(xmls["db1"])])
    healthy_host_tree.write("proc/500/cmdline", qemu)
    healthy_host_tree.write("proc/502/cmdline", qemu.replace("db1", "db3"))  # db3's pid is a QEMU of db1's UUID
    trees.hook_state(healthy_host_tree, {trees.uuid_of(x): {"name": n, "profile": "latency", "cpus": str(i + 1)}
                            for i, (n, x) in enumerate(xmls.items())}, [])
    before = (healthy_host_tree.base / "run/vmtune/state.json").read_text()
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert not found(report, "state", "lease of db1")
    (gone,) = found(report, "state", "lease of db2, which is not running", "(pid 501) is gone", level="WARN")
    assert "vmtune hook reap" in gone.fix
    assert found(report, "state", "lease of db3, which is not running", "pid 502 is not its QEMU", level="WARN")
    assert (healthy_host_tree.base / "run/vmtune/state.json").read_text() == before


def test_a_missing_state_beside_a_baseline_of_leases_is_what_the_hook_refuses(healthy_host_tree):
    """No state.json but a baseline.json that holds a lease: the hook refuses latency starts, so the
    doctor says FAIL (not "no state"), with what to do."""
    healthy_host_tree.write("run/vmtune/baseline.json", json.dumps({"version": 1, "leases": {
        "u1": {"name": "db1", "profile": "latency", "cpus": "1"}}, "baseline": []}))
    report = diagnose(healthy_host_tree.roots(), measure=False)
    (fail,) = found(report, "state", "state.json is missing", "holds 1 lease(s)", level="FAIL")
    assert "vmtune hook reap" in fail.fix
    healthy_host_tree.write("run/vmtune/baseline.json", "{trunc")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert "check by hand" in found(report, "state", "state.json is missing", level="FAIL")[0].fix


def _task(tree, pid: int, comm: str, cpus: str, flags: int = 0, cgroup: str = "0::/") -> None:
    stat = f"{pid} ({comm}) S 1 1 1 0 -1 {flags} " + " ".join(["0"] * 12) + " 4242 0 0"
    tree.write(f"proc/{pid}/cgroup", cgroup)
    tree.write(f"proc/{pid}/task/{pid}/stat", stat)
    tree.write(f"proc/{pid}/task/{pid}/status", f"Name:\t{comm}\nCpus_allowed_list:\t{cpus}")


def _latency(tree, name: str, cpus: list[int], running: bool = True, isolation: dict | None = None) -> None:
    """A lease of ``name`` on ``cpus`` in the hook's state (with the hook's isolation record), its
    domain running (libvirt's status file) or not."""
    xml = trees.domain(name, cpus)
    uuid = xml.split("<uuid>", 1)[1].split("</uuid>", 1)[0]
    if running:
        trees.running(tree, xml)
    lease = {"name": name, "profile": "latency", "cpus": ",".join(map(str, cpus)), "since": 1.0}
    doc = {"version": 1, "leases": {uuid: lease}, "baseline": []}
    if isolation is not None:
        doc["isolation"] = isolation
    tree.write("run/vmtune/state.json", json.dumps(doc))


def test_host_work_on_a_held_cpu_warns(healthy_host_tree):
    """A running latency domain holds CPU 3: a movable task and an IRQ that may run there are a WARN
    with their names; a per-CPU kernel thread, a task pinned there alone, libvirt's QEMU and an IRQ
    bound to CPU 3 alone are not counted."""
    _latency(healthy_host_tree, "db1", [3])
    _task(healthy_host_tree, 100, "backup", "0-7")
    _task(healthy_host_tree, 101, "kworker/3:1", "3", flags=0x04000000)
    _task(healthy_host_tree, 102, "pinned", "3")
    _task(healthy_host_tree, 103, "qemu-system-x86", "0-7", cgroup="0::/machine.slice/machine-qemu\\x2d1\\x2ddb1.scope")
    healthy_host_tree.write("proc/irq/30/smp_affinity_list", "0-7")
    healthy_host_tree.write("proc/irq/31/smp_affinity_list", "3")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    (warn,) = found(report, "isolation", level="WARN")
    assert "CPUs 3" in warn.found and "1 movable task(s) (backup[100])" in warn.found
    assert "1 IRQ(s) (IRQ 30)" in warn.found
    healthy_host_tree.write("proc/100/task/100/status", "Name:\tbackup\nCpus_allowed_list:\t0-2,4-7")
    healthy_host_tree.write("proc/irq/30/smp_affinity_list", "0-2,4-7")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert found(report, "isolation", "no movable host task or IRQ", level="OK")


def test_reserved_cpus_are_the_hosts_rule(healthy_host_tree):
    """With no reserved_cpus in the config, the host's default (the first core of each node: CPUs
    0, 4, 2 and 6 here) stays with the host: a lease on CPU 2 leaves nothing to keep clear, as the
    hook isolates nothing there."""
    _latency(healthy_host_tree, "db1", [2])
    _task(healthy_host_tree, 100, "backup", "0-7")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert found(report, "isolation", "only reserved CPUs", level="INFO")
    assert not found(report, "isolation", level="WARN")


def test_a_lease_whose_domain_is_not_running_is_not_checked(healthy_host_tree):
    """A lease whose domain libvirt no longer runs (no status file) holds no CPU the host must keep
    clear; the state area reports the stale lease."""
    _latency(healthy_host_tree, "gone", [3], running=False)
    _task(healthy_host_tree, 100, "backup", "0-7")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert not found(report, "isolation", level="WARN")
    assert found(report, "isolation", "no lease of a running domain", level="OK")


def test_irqs_the_hook_could_not_move_are_info(healthy_host_tree):
    """While the hook isolates CPU 3, an IRQ there that it has no record of (the kernel refused the
    write: a managed IRQ) is INFO, not a WARN that never goes away; one it moved and that is back
    on CPU 3 is a WARN."""
    records = {"irq:30": {"before": "0-7", "after": "0-2,4-7", "label": "IRQ 30"}}
    _latency(healthy_host_tree, "db1", [3], isolation={"cpus": "3", "irqs": "30-32", "pairs": [], "records": records})
    healthy_host_tree.write("proc/irq/30/smp_affinity_list", "0-7")  # moved back (irqbalance)
    healthy_host_tree.write("proc/irq/32/smp_affinity_list", "2-3")  # managed: refused
    report = diagnose(healthy_host_tree.roots(), measure=False)
    (info,) = found(report, "isolation", "could not move", level="INFO")
    assert "1 IRQ(s)" in info.found and "IRQ 32" in info.found
    (warn,) = found(report, "isolation", level="WARN")
    assert "1 IRQ(s) (IRQ 30)" in warn.found and "IRQ 32" not in warn.found
    healthy_host_tree.write("proc/irq/30/smp_affinity_list", "0-2,4-7")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert not found(report, "isolation", level="WARN")
    assert found(report, "isolation", "no movable host task or IRQ", level="OK")


def test_unreadable_state_and_garbage_do_not_crash(healthy_host_tree):
    """Garbage in the tree gives findings, never a crash."""
    healthy_host_tree.write("run/vmtune/state.json", "{not json")
    healthy_host_tree.write("run/libvirt/qemu/broken.xml", "<domstatus><domain>")
    healthy_host_tree.write("sys/devices/system/cpu/cpufreq/policy0/affected_cpus", "zero")
    healthy_host_tree.write("sys/devices/system/cpu/cpu0/cpuidle/state3/latency", "deep")
    healthy_host_tree.write("sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", "lots")
    report = diagnose(healthy_host_tree.roots(), measure=at(2400))
    no_crash(report)
    (fail,) = found(report, "state", level="FAIL")
    assert fail.found.startswith("damaged: ") and "not JSON" in fail.found and "vmtune hook reap" in fail.fix


def test_connect_without_libvirt_python(healthy_host_tree, monkeypatch):
    """--connect without libvirt-python says so, and the rest of the report still comes."""
    monkeypatch.setitem(sys.modules, "libvirt", None)
    report = diagnose(healthy_host_tree.roots(), measure=False, connect="qemu:///system")
    assert found(report, "domains", "libvirt-python is not installed", level="WARN")
    assert found(report, "memory", "domains unknown")
    assert found(report, "cpufreq", GOVERNORS, level="OK")


class FakeLibvirt:
    """libvirt-python as far as the doctor uses it: one read-only connection and its domains."""

    VIR_ERR_NO_DOMAIN = 42

    class libvirtError(Exception):  # noqa: N801 - libvirt's name
        def get_error_code(self) -> int:
            return 1

    def __init__(self, states=(), refuse: str | None = None, fail: str | None = None):
        self.states, self.refuse, self.fail, self.opened = states, refuse, fail, []

    def registerErrorHandler(self, handler, ctx) -> None:  # noqa: N802 - libvirt's name
        pass

    def open(self, uri):
        raise AssertionError("the doctor opens libvirt read-only")

    def openReadOnly(self, uri):  # noqa: N802 - libvirt's name
        if self.refuse:
            raise self.libvirtError(self.refuse)
        self.opened.append(uri)
        return self

    def listAllDomains(self, flags):  # noqa: N802 - libvirt's name
        if self.fail:
            raise self.libvirtError(self.fail)
        return [FakeDomain(i, state) for i, state in enumerate(self.states)]

    def isAlive(self):  # noqa: N802 - libvirt's name
        return True

    def close(self):
        pass


class FakeDomain:
    def __init__(self, i: int, state: int):
        self.i, self.code = i, state

    def XMLDesc(self, flags):  # noqa: N802 - libvirt's name
        return f"<domain type='kvm'><name>d{self.i}</name></domain>"

    def state(self):
        return [self.code, 0]


def test_connect_reads_every_domain_with_virsh_state_words(monkeypatch):
    """--connect opens libvirt read-only through vmtune.live.connect; a state libvirt has no word
    for is "no state"."""
    from vmtune.doctor import domains

    fake = FakeLibvirt(states=(1, 5, 7, 99))
    monkeypatch.setitem(sys.modules, "libvirt", fake)
    found_, source = domains.from_libvirt("test:///x")
    assert [state for _, state in found_] == ["running", "shut off", "pmsuspended", "no state"]
    assert source == "libvirt test:///x" and fake.opened == ["test:///x"]


@pytest.mark.parametrize("fake", [FakeLibvirt(refuse="no\n  socket"), FakeLibvirt(fail="no\n  socket")],
                         ids=["refused", "list-fails"])
def test_connect_failure_is_said_in_libvirts_words(fake, monkeypatch):
    """A URI libvirt refuses, or a listing that fails: "cannot read the domains of URI: " and
    libvirt's own message on one line."""
    from vmtune.doctor import domains

    monkeypatch.setitem(sys.modules, "libvirt", fake)
    assert domains.from_libvirt("test:///x") == (None, "cannot read the domains of test:///x: no socket")


def test_connect_to_nothing(healthy_host_tree, capsys):
    """An unreachable URI is a WARN line in the report, and libvirt prints nothing of its own."""
    pytest.importorskip("libvirt")
    uri = f"qemu+unix:///system?socket={healthy_host_tree.base}/no-such-socket"
    rc, out, err = run(capsys, "doctor", *healthy_host_tree.argv(), "--no-measure", "--connect", uri)
    assert rc == 0 and err == ""
    (line,) = [line for line in out.splitlines() if line.startswith("WARN  domains")]
    assert f"--connect {uri}  cannot read the domains of {uri}: " in line and "no-such-socket" in line


def test_parts_not_given_are_skipped(healthy_host_tree):
    """A captured sysfs alone: /proc, /dev and /run are not read from this machine."""
    report = diagnose(Roots.given(sysfs=healthy_host_tree.roots().sysfs), measure=False)
    no_crash(report)
    assert report.environment.kind == "unknown"
    assert found(report, "virt", "/dev not read", level="SKIP")
    assert levels(report, "tuners") == {"SKIP"} and levels(report, "state") == {"SKIP"}
    assert found(report, "cpufreq", "scaling_governor", "performance", level="OK")


def test_domains_from_a_real_libvirtd(libvirtd):
    """--connect reads every defined domain with its state; two shut-off latency domains pinned to the
    same CPU are the overlap `vmtune plan` reports."""
    from fixtures.libvirt_env import define, minimal_domain, undefine

    pytest.importorskip("libvirt")
    extra = (f"<metadata><vmtune:tune xmlns:vmtune='{trees.NS}' profile='latency'/></metadata>"
             "<cputune><vcpupin vcpu='0' cpuset='1'/></cputune>")
    names = [define(minimal_domain(extra=extra)) for _ in range(2)]
    try:
        report = diagnose(Roots(), measure=False, connect=libvirtd)
    finally:
        for name in names:
            undefine(name)
    (listing,) = found(report, "domains", f"libvirt {libvirtd}", level="INFO")
    assert all(f"{name} (latency, shut off)" in listing.found for name in names)
    overlaps = found(report, "domains", "cpu-overlap", *names, level="FAIL")
    assert len(overlaps) == 1 and "CPU 1" in overlaps[0].found


# -- the command line ---------------------------------------------------------------------------------------
def test_json_shape(healthy_host_tree, capsys):
    """--json gives {ok, environment, roots, counts, findings} with six strings per finding, and the
    host the domains were judged against (here the tree's sysfs: its status files are this machine's
    system daemon's)."""
    trees.ksm_on(healthy_host_tree)
    rc, out, err = run(capsys, "doctor", *healthy_host_tree.argv(), "--json")
    assert rc == 0 and err == ""
    data = json.loads(out)
    assert set(data) == {"ok", "environment", "roots", "counts", "findings", "host"}
    assert data["host"]["from"] == "sysfs" and data["host"]["sysfs"] == str(healthy_host_tree.base / "sys")
    assert data["ok"] is True
    assert data["environment"]["kind"] == "bare-metal"
    assert data["roots"] == {"sysfs": str(healthy_host_tree.base / "sys"), "proc": str(healthy_host_tree.base / "proc"),
                             "root": str(healthy_host_tree.base)}
    assert sum(data["counts"].values()) == len(data["findings"]) and set(data["counts"]) <= set(LEVELS)
    for finding in data["findings"]:
        assert set(finding) == {"level", "area", "source", "found", "want", "fix"}
        assert all(isinstance(v, str) for v in finding.values()) and finding["level"] in LEVELS
    assert {"level": "WARN", "area": "memory"}.items() <= next(
        f for f in data["findings"] if f["source"].endswith("ksm/run")).items()


def test_json_says_not_ok_on_fail(healthy_host_tree, capsys):
    healthy_host_tree.remove("dev/kvm")
    rc, out, _ = run(capsys, "doctor", *healthy_host_tree.argv(), "--json")
    assert rc == 1 and json.loads(out)["ok"] is False


def test_text_is_one_line_per_finding(healthy_host_tree, capsys):
    trees.powersave(healthy_host_tree)
    rc, out, _ = run(capsys, "doctor", *healthy_host_tree.argv())
    lines = out.splitlines()
    report = diagnose(healthy_host_tree.roots(), measure=False)
    assert rc == 0 and len(lines) == len(report.findings) + 1
    assert lines[-1].startswith("doctor: ") and "WARN" in lines[-1]
    governor = next(line for line in lines if "scaling_governor" in line)
    assert governor.startswith("WARN  cpufreq     ")
    assert f"/sys/{GOVERNORS}  powersave (want performance)  fix: cpupower" in governor


@pytest.mark.parametrize("argv, needle", [
    (["--sysfs", "/nonexistent/sys"], "--sysfs /nonexistent/sys: no such directory"),
    (["--sysfs", "{tmp}"], "does not look like a sysfs tree"),
    (["--proc", "{tmp}"], "does not look like a proc tree"),
    (["--root", "/nonexistent/root"], "--root /nonexistent/root: no such directory"),
], ids=["sysfs-missing", "sysfs-empty", "proc-empty", "root-missing"])
def test_bad_roots_are_one_line_errors(tmp_path, capsys, argv, needle):
    rc, out, err = run(capsys, "doctor", *[a.format(tmp=tmp_path) for a in argv])
    assert rc == 1 and out == ""
    assert err.startswith("vmtune: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert needle in err


# -- the measurement itself -----------------------------------------------------------------------------
def test_perf_counter_plumbing():
    """perf_event_open from ctypes counts: the software task clock reads a plausible, non-zero value
    for a loop that ran (not compared with the wall clock: a loaded machine must not fail this)."""
    counter = measure.Counter.open(measure.PERF_TYPE_SOFTWARE, measure.PERF_COUNT_SW_TASK_CLOCK)
    if counter is None:
        pytest.skip("perf_event_open is not allowed here (perf_event_paranoid or seccomp)")
    try:
        measure.spin(0.05)
        count, running = counter.read()
    finally:
        counter.close()
    assert running > 0 and count > 0
    assert count < 60 * 10**9  # a task clock in ns: under a minute for a 50 ms loop


class FakeCounter:
    def __init__(self, cycles: int, running_ns: int):
        self.value = (cycles, running_ns)

    def read(self):
        return self.value

    def close(self):
        pass


@pytest.mark.parametrize("counter, aperfmperf, want", [
    (lambda: FakeCounter(2_400_000, 1_000_000), True, Measurement(2400, "perf cycles")),
    (lambda: None, True, Measurement(1234.5, "/proc/cpuinfo")),
    (lambda: None, False, Measurement(1500, "scaling_cur_freq")),
    (lambda: FakeCounter(0, 0), False, Measurement(1500, "scaling_cur_freq")),
], ids=["perf", "cpuinfo-aperfmperf", "cur-freq", "perf-counted-nothing"])
def test_measurement_sources(tmp_path, counter, aperfmperf, want):
    """perf cycles first; /proc/cpuinfo only with aperfmperf (else it is the fixed TSC rate); then scaling_cur_freq."""
    cpu = min(os.sched_getaffinity(0))
    flags = "fpu aperfmperf" if aperfmperf else "fpu constant_tsc"
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(f"processor\t: {cpu}\ncpu MHz\t\t: 1234.5\nflags\t\t: {flags}\n\n")
    cur = tmp_path / f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq"
    cur.parent.mkdir(parents=True)
    cur.write_text("1500000\n")
    got = measure.effective_mhz(cpu, str(tmp_path / "sys"), str(tmp_path / "proc"), seconds=0.001, counter=counter)
    assert got == want


def test_effective_mhz_restores_affinity():
    """The busy loop pins itself and puts the affinity back, whatever it could measure."""
    before = os.sched_getaffinity(0)
    cpu = min(before)
    result = measure.effective_mhz(cpu, seconds=0.01)
    assert result is None or (result.mhz > 0 and result.source in ("perf cycles", "/proc/cpuinfo", "scaling_cur_freq"))
    assert os.sched_getaffinity(0) == before
    assert measure.effective_mhz(max(before) + 4096, seconds=0.01) is None  # not ours to run on


# -- this machine -------------------------------------------------------------------------------------------
def test_this_machine(capsys):
    """The doctor on the real /sys and /proc: no crash, a KVM guest seen as one, and what it reports
    matches what the files say."""
    report = diagnose(Roots(), measure=True)
    no_crash(report)
    with open("/proc/cpuinfo") as fh:
        guest = " hypervisor" in fh.read()
    if guest:  # this machine is a KVM guest
        assert report.environment.kind == "vm"
        assert "hypervisor flag in /proc/cpuinfo" in report.environment.evidence
        assert not found(report, "cpufreq", "BIOS owns")
    else:
        assert report.environment.kind in ("bare-metal", "container")
    thp = "/sys/kernel/mm/transparent_hugepage/enabled"
    if os.path.exists(thp):
        with open(thp) as fh:
            selected = fh.read().split("[", 1)[1].split("]", 1)[0]
        assert [f.found for f in found(report, "memory", thp)] == [selected]
    ksm = "/sys/kernel/mm/ksm/run"
    if os.path.exists(ksm):
        with open(ksm) as fh:
            assert found(report, "memory", ksm)[0].found.startswith(fh.read().strip())
    (kvm,) = found(report, "virt", "/dev/kvm")
    assert (kvm.level == "FAIL") == (not os.path.exists("/dev/kvm"))
    if not os.path.isdir("/sys/devices/system/cpu/cpu0/cpuidle") and guest:
        assert found(report, "cpuidle", "no C-states in this guest", level="SKIP")
    rc, out, err = run(capsys, "doctor", "--no-measure")  # domains may come and go in between: judge it alone
    *lines, summary = out.splitlines()
    assert err == "" and rc == (1 if any(line.startswith("FAIL") for line in lines) else 0)
    assert summary.startswith("doctor: ")
    assert sum(int(part.split()[0]) for part in summary[len("doctor: "):].split("  ")[0].split(", ")) == len(lines)


# -- the noise census (issue 17) -------------------------------------------------------------------

def test_the_noise_census_names_what_interrupts_a_held_cpu(healthy_host_tree):
    """db1 holds CPU 3. Over the census, eth0 (which may run elsewhere) and a movable task ran there:
    a WARN naming them; the local timer, an IRQ pinned to CPU 3 alone, RCU and a per-CPU kernel
    thread: an INFO with the kernel command line for CPU 3. The census is in the JSON, as rates."""
    _latency(healthy_host_tree, "db1", [3])
    healthy_host_tree.write("proc/irq/30/smp_affinity_list", "0-7")
    healthy_host_tree.write("proc/irq/32/smp_affinity_list", "3")
    trees.counts(healthy_host_tree)
    trees.ran(healthy_host_tree, 300, "backup", 3, 10)
    trees.ran(healthy_host_tree, 301, "kworker/3:1", 3, 10, cpus="3", flags=0x04000000)
    trees.ran(healthy_host_tree, 302, "idle-one", 3, 10)

    def meanwhile(seconds: float) -> None:
        assert seconds == 0.5
        trees.counts(healthy_host_tree, a=5, b=17, c=8, d=1500, e=19, t=90, r=160)
        trees.ran(healthy_host_tree, 300, "backup", 3, 30)
        trees.ran(healthy_host_tree, 301, "kworker/3:1", 3, 20, cpus="3", flags=0x04000000)

    report = diagnose(healthy_host_tree.roots(), measure=False, census_seconds=0.5, sleep=meanwhile)
    (warn,) = found(report, "noise", level="WARN")
    assert "IRQ 30 (eth0)" in warn.found and "backup[300]" in warn.found and "idle-one" not in warn.found
    (info,) = found(report, "noise", level="INFO")
    assert "nohz_full=3 rcu_nocbs=3 irqaffinity=0-2,4-7" in info.found
    assert "LOC" in info.found or "+" in info.found
    census = report.to_dict()["census"]
    rates = census["per_cpu"]["3"]
    assert rates["interrupts_per_s"]["IRQ 30 (eth0)"] == 20.0 and rates["interrupts_per_s"]["IRQ 32 (nvme0q3)"] == 10.0
    assert rates["interrupts_per_s"]["LOC (Local timer interrupts)"] == 2000.0
    assert rates["softirqs_per_s"] == {"TIMER": 100.0, "RCU": 200.0}
    assert set(rates["tasks_ms"]) == {"backup[300]", "kworker/3:1[301]"}
    assert census["cpus"] == "3" and list(census["per_cpu"]) == ["3"]


def test_no_census_without_a_held_cpu_or_when_asked_for_none(healthy_host_tree):
    """No lease: no census, no ``census`` key; a lease with census_seconds=0: none either."""
    trees.counts(healthy_host_tree)
    report = diagnose(healthy_host_tree.roots(), measure=False, census_seconds=0.5, sleep=lambda s: None)
    assert not found(report, "noise") and "census" not in report.to_dict()
    _latency(healthy_host_tree, "db1", [3])
    report = diagnose(healthy_host_tree.roots(), measure=False, census_seconds=0)
    assert not found(report, "noise") and "census" not in report.to_dict()
    report = diagnose(healthy_host_tree.roots(), measure=False, census_seconds=0.5, sleep=lambda s: None)
    assert found(report, "noise", "nothing interrupted", level="OK")


def test_each_held_cpu_shows_what_it_runs_at(healthy_host_tree):
    """The state area names each held CPU with the lease that owns it and its power state now."""
    xml = trees.domain("db1", [2, 3], hugepage_kib=None)
    trees.hook_state(healthy_host_tree, {trees.uuid_of(xml): {"name": "db1", "profile": "latency", "cpus": "2-3"}}, [])
    report = diagnose(healthy_host_tree.roots(), measure=False)
    shown = found(report, "state", "CPU 2 (db1): ", level="INFO") + found(report, "state", "CPU 3 (db1): ", level="INFO")
    assert [f.found.split(": ", 1)[1] for f in shown] == ["performance, EPP performance, floor 1.2 GHz, idle down to C1E (10 µs)"] * 2
    assert not found(report, "state", "CPU 1 (")
