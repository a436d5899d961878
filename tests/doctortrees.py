"""Captured host trees for ``vmtune doctor``: a healthy KVM host, and the known problems as edits.

``healthy(path)`` writes ``path/sys``, ``path/proc`` and the root files (``path/dev``,
``path/run``, ``path/etc``) of a bare-metal Intel host that is tuned the way vmtune wants it:
2 NUMA nodes of 2 cores x 2 threads, intel_pstate with the performance governor, C6 disabled, KSM
off, THP madvise, 2 MiB hugepages on both nodes, /dev/kvm and /dev/vhost-net, no other tuner.
Each problem function edits such a tree into one of the cases the seeds describe.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hosttrees import write_sysfs

import vmtune.config
from vmtune.doctor import Roots
from vmtune.host import Cell, Cpu, Host

NOMINAL_KHZ = 2400000  # "Intel(R) Xeon(R) CPU E5-2630 v3 @ 2.40GHz"
TURBO_KHZ = 3200000
NS = "https://vmtune.dev/xmlns/1"
CSTATES = (("POLL", 0), ("C1", 2), ("C1E", 10), ("C6", 133))  # name, exit latency µs
CPU = "sys/devices/system/cpu"


class Tree:
    def __init__(self, base: Path):
        self.base = Path(base)

    def write(self, rel: str, text: str) -> Path:
        path = self.base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if text.endswith("\n") or text == "" else text + "\n")
        return path

    def read(self, rel: str) -> str:
        return (self.base / rel).read_text().strip()

    def remove(self, rel: str) -> None:
        path = self.base / rel
        shutil.rmtree(path) if path.is_dir() else path.unlink()

    def roots(self) -> Roots:
        return Roots(str(self.base / "sys"), str(self.base / "proc"), str(self.base))

    def argv(self) -> list[str]:
        return ["--sysfs", str(self.base / "sys"), "--proc", str(self.base / "proc"), "--root", str(self.base)]

    @property
    def cpus(self) -> list[int]:
        return list(range(8))


def _host() -> Host:
    # node n holds cores 2n, 2n+1; thread t of core k is CPU k + 4t (Intel numbering)
    cpus = {}
    for core in range(4):
        for t in range(2):
            cid = core + 4 * t
            cpus[cid] = Cpu(cid, node=core // 2, socket=core // 2, core=core % 2, siblings=frozenset({core, core + 4}))
    cells = tuple(Cell(n, tuple(sorted(c for c in cpus if cpus[c].node == n)), 16 * 1024 * 1024, {2048: 1024},
                       {0: 10 if n == 0 else 21, 1: 21 if n == 0 else 10}) for n in (0, 1))
    return Host("x86_64", cells, cpus, vendor="Intel")


def healthy(path: Path) -> Tree:
    tree = Tree(path)
    write_sysfs(_host(), str(tree.base))
    flags = "fpu vme de pse tsc msr pae mce cx8 apic vmx constant_tsc aperfmperf nonstop_tsc"
    tree.write("proc/cpuinfo", "".join(
        f"processor\t: {c}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU E5-2630 v3 @ 2.40GHz\n"
        f"cpu MHz\t\t: 2400.000\nflags\t\t: {flags}\n\n" for c in tree.cpus))
    tree.write("proc/cmdline", "BOOT_IMAGE=/vmlinuz-6.1.0 root=/dev/sda1 ro quiet")
    tree.write("proc/sys/kernel/numa_balancing", "0")
    tree.write("proc/self/mounts", "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0")
    tree.write("proc/1/comm", "systemd")
    tree.write("proc/812/comm", "libvirtd")
    for cpu in tree.cpus:
        pol = f"{CPU}/cpufreq/policy{cpu}"
        for name, value in (("affected_cpus", cpu), ("related_cpus", cpu), ("scaling_driver", "intel_pstate"),
                            ("scaling_governor", "performance"), ("scaling_available_governors", "performance powersave"),
                            ("energy_performance_preference", "performance"), ("base_frequency", NOMINAL_KHZ),
                            ("cpuinfo_max_freq", TURBO_KHZ), ("cpuinfo_min_freq", 1200000),
                            ("scaling_max_freq", TURBO_KHZ), ("scaling_min_freq", 1200000),
                            ("scaling_cur_freq", NOMINAL_KHZ)):
            tree.write(f"{pol}/{name}", str(value))
        for i, (name, latency) in enumerate(CSTATES):
            state = f"{CPU}/cpu{cpu}/cpuidle/state{i}"
            tree.write(f"{state}/name", name)
            tree.write(f"{state}/latency", str(latency))
            tree.write(f"{state}/disable", "1" if latency > 10 else "0")
        tree.write(f"{CPU}/cpu{cpu}/power/pm_qos_resume_latency_us", "0")
    for name, value in (("status", "active"), ("no_turbo", "0"), ("max_perf_pct", "100"), ("min_perf_pct", "30")):
        tree.write(f"{CPU}/intel_pstate/{name}", value)
    tree.write(f"{CPU}/cpuidle/current_driver", "intel_idle")
    tree.write(f"{CPU}/cpuidle/current_governor_ro", "menu")
    tree.write("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never")
    tree.write("sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never")
    tree.write("sys/kernel/mm/ksm/run", "0")
    tree.write("sys/kernel/mm/ksm/pages_sharing", "0")
    tree.write("sys/devices/system/clocksource/clocksource0/current_clocksource", "tsc")
    tree.write("sys/devices/system/clocksource/clocksource0/available_clocksource", "tsc hpet acpi_pm")
    tree.write("sys/module/kvm/parameters/halt_poll_ns", "200000")
    tree.write("sys/module/kvm_intel/parameters/nested", "Y")
    tree.write("sys/module/vhost_net/refcnt", "0")
    tree.write("dev/kvm", "")
    tree.write("dev/vhost-net", "")
    (tree.base / "run/libvirt/qemu").mkdir(parents=True, exist_ok=True)
    return tree


# -- the problems ---------------------------------------------------------------------------------
def governors(tree: Tree, governor: str, cpus=None, epp: str | None = None) -> None:
    for cpu in tree.cpus if cpus is None else cpus:
        tree.write(f"{CPU}/cpufreq/policy{cpu}/scaling_governor", governor)
        tree.write(f"{CPU}/cpufreq/policy{cpu}/energy_performance_preference", epp or governor)


def powersave(tree: Tree) -> None:
    """The first seed: powersave (EPP power) and the CPUs at 1.2 GHz of 2.4 under load."""
    governors(tree, "powersave", epp="power")
    for cpu in tree.cpus:
        tree.write(f"{CPU}/cpufreq/policy{cpu}/scaling_cur_freq", "1200000")


def deep_cstates(tree: Tree, qos: str = "0") -> None:
    """C6 (133 µs exit) enabled everywhere; ``qos`` in every CPU's pm_qos_resume_latency_us."""
    for cpu in tree.cpus:
        tree.write(f"{CPU}/cpu{cpu}/cpuidle/state3/disable", "0")
        tree.write(f"{CPU}/cpu{cpu}/power/pm_qos_resume_latency_us", qos)


def ksm_on(tree: Tree) -> None:
    tree.write("sys/kernel/mm/ksm/run", "1")
    tree.write("sys/kernel/mm/ksm/pages_sharing", "51200")


def no_turbo(tree: Tree) -> None:
    tree.write(f"{CPU}/intel_pstate/no_turbo", "1")


def bios_owned(tree: Tree) -> None:
    """Bare metal without cpufreq: the BIOS owns the P-states (no OS-controlled power management)."""
    tree.remove(f"{CPU}/cpufreq")
    tree.remove(f"{CPU}/intel_pstate")


def cmdline(tree: Tree, extra: str) -> None:
    tree.write("proc/cmdline", tree.read("proc/cmdline") + " " + extra)


def tuned(tree: Tree, profile: str = "virtual-host") -> None:
    tree.write("proc/1044/comm", "tuned")
    tree.write("etc/tuned/active_profile", profile)
    tree.write("etc/tuned/profile_mode", "manual")


def guest(tree: Tree) -> None:
    """The same tree as a KVM guest sees itself: hypervisor flag, kvm-clock, no cpufreq, no C-states."""
    tree.write("proc/cpuinfo", tree.read("proc/cpuinfo").replace("aperfmperf", "hypervisor") + "\n")
    tree.write("sys/devices/system/clocksource/clocksource0/available_clocksource", "kvm-clock tsc acpi_pm")
    tree.write("sys/devices/system/clocksource/clocksource0/current_clocksource", "kvm-clock")
    bios_owned(tree)
    for cpu in tree.cpus:
        tree.remove(f"{CPU}/cpu{cpu}/cpuidle")


def hugepages(tree: Tree, node: int, total: int, free: int, size: int = 2048) -> None:
    hp = f"sys/devices/system/node/node{node}/hugepages/hugepages-{size}kB"
    tree.write(f"{hp}/nr_hugepages", str(total))
    tree.write(f"{hp}/free_hugepages", str(free))


def domain(name: str, pins: list[int], mib: int = 1024, node: int | None = 0, profile: str | None = "latency",
           hugepage_kib: int | None = 2048) -> str:
    """A (tuned-looking) domain XML: one vCPU per pin, memory strictly on ``node``."""
    tag = f"<metadata><vmtune:tune xmlns:vmtune='{NS}' profile='{profile}'/></metadata>" if profile else ""
    backing = (f"<memoryBacking><hugepages><page size='{hugepage_kib}' unit='KiB'/></hugepages></memoryBacking>"
               if hugepage_kib else "")
    numa = f"<numatune><memory mode='strict' nodeset='{node}'/></numatune>" if node is not None else ""
    tune = "".join(f"<vcpupin vcpu='{v}' cpuset='{p}'/>" for v, p in enumerate(pins))
    uuid = f"00000000-0000-4000-8000-{abs(hash(name)) % 10**12:012d}"
    return (f"<domain type='kvm'><name>{name}</name><uuid>{uuid}</uuid>{tag}<memory unit='MiB'>{mib}</memory>"
            f"{backing}<vcpu placement='static'>{len(pins)}</vcpu><cputune>{tune}</cputune>{numa}"
            "<os><type arch='x86_64' machine='q35'>hvm</type></os><devices/></domain>")


def uuid_of(xml: str) -> str:
    return xml.split("<uuid>", 1)[1].split("</uuid>", 1)[0]


def running(tree: Tree, xml: str, state: str = "running") -> None:
    """libvirt's status file for a running domain: ``<domstatus>`` around its live XML."""
    name = xml.split("<name>", 1)[1].split("</name>", 1)[0]
    tree.write(f"run/libvirt/qemu/{name}.xml",
               f"<domstatus state='{state}' reason='booted' pid='4242'>\n"
               "  <monitor path='/var/lib/libvirt/qemu/domain-1/monitor.sock' type='unix'/>\n"
               f"  {xml.replace('<domain ', '<domain id=' + repr('1') + ' ', 1)}\n</domstatus>")


def hook_state(tree: Tree, leases: dict, baseline: list | None) -> None:
    tree.write("run/vmtune/state.json", json.dumps({"version": 1, "leases": leases, "baseline": baseline}))


# -- the fixtures of the doctor's test files ------------------------------------------------------
@pytest.fixture
def no_machine_vmtune(tmp_path_factory, monkeypatch):
    """No /etc/vmtune, $VMTUNE_* or user profiles of the machine leak into a test."""
    empty = tmp_path_factory.mktemp("no-config")
    for var in ("VMTUNE_CONFIG", "VMTUNE_STATE_DIR", "VMTUNE_SYSFS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(vmtune.config, "DEFAULT_PATH", str(empty / "no-such-vmtune.toml"))
    monkeypatch.setenv("VMTUNE_PROFILES", str(empty))


@pytest.fixture
def healthy_host_tree(tmp_path):
    """A healthy host tree (``healthy``) under the test's temporary folder."""
    return healthy(tmp_path / "host")
