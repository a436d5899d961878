"""Part 1 of issue 5: what a guest gains, measured in real guests started through libvirt.

One stock domain (examples/stock-latency.xml: what an older virt-install leaves, i440fx ``pc``,
an ide disk, an e1000 NIC, a custom qemu64 CPU, a balloon, nothing pinned) boots the benchmark
guest (bench/guestimage.py) in several variants:

- ``stock``: as it is;
- ``tuned``: ``vmtune.rewrite(stock, Host.probe(), profile="latency")``;
- one variant per optimization, each on top of stock: vmtune's own passes run alone on the stock
  domain, with the latency profile and the placement that ``tuned`` gets (so every edit of a
  single variant is one ``tuned`` makes too; the result file lists them, ``changes``):
  ``virtio`` (disk and NIC models: the disks and nics passes with cache/io left alone),
  ``cache-io`` (cache='none' io='native' on the ide disk), ``iothread`` (virtio plus an iothread for
  the disk: an iothread needs a virtio disk, so compare it with ``virtio`` too), ``pinning`` (vCPU
  and emulator pins and the strict numatune), ``hugepages`` (hugepage backing only), ``cpu-mode``
  (host-passthrough on KVM, ``maximum`` on TCG).

Each boot runs three cases in the guest, one after the other: ``guest-disk`` (4 KiB O_DIRECT random
reads on a raw image, queue depth 1), ``guest-net`` (UDP round trips to an echo server on the host,
over the tap libvirt puts on a bridge this module creates and always removes) and ``guest-timer``
(overshoot of a 1 ms clock_nanosleep loop, on an otherwise idle host). A fourth case,
``guest-sched``, runs the timer loop while a second guest (the hog) spins on as many vCPUs as the
host has CPUs: ``stock`` (both domains stock, nothing pinned) against ``tuned`` (each rewritten with
the other as a claim: the latency guest gets dedicated CPUs, the hog, with the balanced profile, a
cpuset that keeps it off them).

The emulator variant is ``tuned`` with its ``<emulatorpin>`` and ``<iothreadpin>`` moved to the
other place vmtune knows (edited here, vmtune unchanged). Under TCG, QEMU's main loop (the emulator
thread) runs the guest's emulated timers, and the latency profile puts it beside the vCPU
(``vmtune.driver.emulator_with_vcpus``, decided by this very comparison): ``tuned-emu-reserved``
moves it to the host's reserved CPU, where isolation also moves all host work (and the hogs). Under
KVM the profile puts it on the reserved CPU, and ``tuned-emu-vcpu`` moves it beside the vCPU. It
runs in disk/net/timer and in both ``guest-sched`` flavours, and its records carry the comparison
with ``tuned`` (``vs_tuned``).

``guest-sched`` has a second flavour where the hog is the host's own work: one unpinned busy
process per online CPU (bench/probe/busyprobe.c ``spin``, the "backup job"), started before the
latency guest and killed after it: ``stock-hosthog``, ``tuned-hosthog`` and the emulator
variant's ``-hosthog``, no hog guest. Their records carry ``vs_stock_hosthog`` (and the
emulator one ``vs_tuned_hosthog``); their ``vs_stock`` is against the hog-guest ``stock``.

The tuned variants run as users run them: with vmtune's hook installed in the real libvirtd for the
whole run (bench/guest_hook.py), so their starts go through the hook's prepare (host tuning,
isolation of their vCPU's CPU) and their stops through its release. Every other variant has the
vmtune tag removed from its metadata (examples/stock-latency.xml is tagged ``latency``), so the hook
ignores it, as it ignores any untagged domain. Each boot records what it saw of the hook (its lease
in the state file while it ran, the isolated CPUs, the host's masks; the lease gone after the stop),
and each record the hook's setup (``setup.hook``).

Variants are interleaved: repetition r boots every variant once, in an order rotated by r. The
figures of one repetition come from one boot; a result holds the median over repetitions and
their spread, and for every variant but stock a comparison against stock (bench/stats.py).
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from lxml import etree

import vmtune
from vmtune import cpuset, driver, passes

from . import debimage, guest_hook, guestimage, stats
from .common import EXAMPLES, ROOT, spread

URI = "qemu:///system"
PREFIX = "vmtune-bench-"
BRIDGE = "vmtbench0"
HOST_IP, GUEST_IP, PREFIXLEN, PORT = "10.213.77.1", "10.213.77.2", 24, 7777
LOG_DIR = Path("/var/log/libvirt/qemu")
SETUP = ROOT / "scripts" / "setup-libvirt"
LOCK = Path("/run/vmtune-bench-guests.lock")
STOCK = EXAMPLES / "stock-latency.xml"
MEMORY_MIB = 128
DISK_MIB = 256
CMDLINE = "console=ttyS0 panic=-1 quiet"
HOG_MAX_VCPUS = 240

CASES = {  # case -> (guest test, what the figure is)
    "guest-disk": ("disk", "latency of one 4 KiB O_DIRECT random read (queue depth 1) from the raw image"),
    "guest-net": ("net", "round-trip time of one 64-byte UDP datagram, guest -> host echo server -> guest"),
    "guest-timer": ("timer", "overshoot of a 1 ms clock_nanosleep(TIMER_ABSTIME) loop, host otherwise idle"),
}
SCHED_CASE = "guest-sched"
SCHED_NOTE = ("overshoot of the 1 ms timer loop in the latency guest while a hog guest spins on "
              "as many vCPUs as the host has CPUs")
SCHED_HOSTHOG_NOTE = ("overshoot of the 1 ms timer loop in the latency guest while one unpinned busy host "
                      "process per online CPU spins (no hog guest)")

# variant -> (passes run alone, profile overrides, what it is)
SINGLE = {
    "virtio": ((passes.disks, passes.nics), {"devices_disk_cache": "keep", "devices_disk_io": "keep"},
               ("ide disk -> virtio-blk, e1000 -> virtio-net with driver name='vhost' (libvirt uses vhost-net "
                "for type='kvm' only): the disks and nics passes, cache/io left alone")),
    "cache-io": ((passes.disks,), {"devices_virtio": False},
                 "cache='none' io='native' on the ide disk: the disks pass without the move to virtio"),
    "iothread": ((passes.disks, passes.iothreads, passes.nics), {"devices_disk_cache": "keep", "devices_disk_io": "keep"},
                 "virtio plus one iothread serving the disk (an iothread needs a virtio disk; compare with virtio)"),
    "pinning": ((passes.pinning, passes.numa), {},
                "vCPU pinned to a dedicated CPU, emulator on the reserved CPU(s), strict numatune: the pinning and numa passes"),
    "hugepages": ((passes.memory,), {"memory_nosharepages": False, "memory_balloon": "keep"},
                  "memory backed by hugepages: the memory pass without nosharepages and without removing the balloon"),
    "cpu-mode": ((passes.cpu_mode,), {},
                 "CPU mode host-passthrough (kvm) or maximum (qemu/TCG) in place of the custom qemu64 model"),
}
# the emulator variant: the other place for the emulator and iothreads (only one of them runs: the
# one that differs from tuned, EMU_RESERVED under TCG and EMU_VCPU under KVM)
EMU_RESERVED, EMU_VCPU = "tuned-emu-reserved", "tuned-emu-vcpu"
EMUS = (EMU_RESERVED, EMU_VCPU)
VARIANTS = ("stock", *SINGLE, "tuned", *EMUS)
HOSTHOG = "-hosthog"
SCHED_VARIANTS = ("stock", "tuned", *EMUS, f"stock{HOSTHOG}", f"tuned{HOSTHOG}", *(f"{e}{HOSTHOG}" for e in EMUS))
# what each variant is also compared with, besides stock (a record key vs_NAME, "-" -> "_")
EXTRA_BASES = {"iothread": ("virtio",), f"tuned{HOSTHOG}": (f"stock{HOSTHOG}",),
               **{e: ("tuned",) for e in EMUS},
               **{f"{e}{HOSTHOG}": (f"tuned{HOSTHOG}", f"stock{HOSTHOG}") for e in EMUS}}
EXPECT = {  # what the guest must see, per variant (a wrong one means the variant did not apply)
    "stock": {"disk": "sda", "nic_driver": "e1000"}, "cache-io": {"disk": "sda", "nic_driver": "e1000"},
    "pinning": {"disk": "sda"}, "hugepages": {"disk": "sda"}, "cpu-mode": {"disk": "sda"},
    "virtio": {"disk": "vda", "nic_driver": "virtio_net"}, "iothread": {"disk": "vda", "nic_driver": "virtio_net"},
    "tuned": {"disk": "vda", "nic_driver": "virtio_net"},
    **{e: {"disk": "vda", "nic_driver": "virtio_net"} for e in EMUS},
}


def tagged(variant: str) -> bool:
    """The variants that keep vmtune's tag (the hook acts on them): the tuned ones."""
    return variant.startswith("tuned")


class Unavailable(Exception):
    """Part 1 cannot run on this machine (the message says why); the rest of the benchmark runs."""


class GuestError(RuntimeError):
    """A guest did not boot or did not report (message has the console and qemu log tails)."""


# -- preflight ----------------------------------------------------------------------------------
def preflight(virt_type: str) -> None:
    """Raise Unavailable unless root, libvirtd (started by scripts/setup-libvirt) and QEMU are here."""
    if os.geteuid() != 0:
        raise Unavailable("needs root (it starts guests through the system libvirtd and creates a bridge)")
    for tool in ("ip",):
        if shutil.which(tool) is None:
            raise Unavailable(f"`{tool}` is not installed")
    try:
        proc = subprocess.run([str(SETUP)], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"scripts/setup-libvirt did not finish: {exc}") from None
    if proc.returncode:
        raise Unavailable(f"scripts/setup-libvirt failed ({proc.returncode}): {(proc.stdout + proc.stderr).strip()[-800:]}")
    if shutil.which("virsh") is None or shutil.which("qemu-system-x86_64") is None:
        raise Unavailable("virsh or qemu-system-x86_64 is missing after scripts/setup-libvirt")
    if virt_type == "kvm":
        if not os.path.exists("/dev/kvm"):
            raise Unavailable("--virt-type kvm, but this host has no /dev/kvm")
        if subprocess.run(["virsh", "-q", "-c", URI, "domcapabilities", "--virttype", "kvm"],
                          capture_output=True, check=False).returncode:
            raise Unavailable("--virt-type kvm, but libvirt reports no KVM support on this host")


# -- virsh and domains --------------------------------------------------------------------------
def virsh(*args: str, check: bool = True, stdin: bytes | None = None) -> str:
    proc = subprocess.run(["virsh", "-q", "-c", URI, *args], input=stdin, capture_output=True, check=False)
    if check and proc.returncode:
        raise GuestError(f"virsh {args[0]}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout.decode(errors="replace")


def _remove_domain(name: str, patience: float = 60) -> None:
    """Destroy and undefine; retried while libvirtd does not answer (someone may restart it)."""
    deadline = time.monotonic() + patience
    while True:
        virsh("destroy", name, check=False)
        virsh("undefine", name, "--nvram", "--managed-save", check=False)
        probe = subprocess.run(["virsh", "-q", "-c", URI, "domstate", name], capture_output=True, text=True,
                               check=False)
        gone = probe.returncode and "failed to get domain" in probe.stderr.lower()
        if gone or time.monotonic() > deadline:
            break
        time.sleep(1)
    (LOG_DIR / f"{name}.console").unlink(missing_ok=True)
    (LOG_DIR / f"{name}.log").unlink(missing_ok=True)


def _remove_our_domains() -> list[str]:
    left = []
    for name in virsh("list", "--all", "--name", check=False).split():
        if name.startswith(PREFIX):
            _remove_domain(name)
            left.append(name)
    return left


def _stale_cleanup(log: Callable[[str], None] | None = None) -> list[str]:
    """Domains, the bridge and the hook a killed earlier run left (we hold the lock: nobody else
    owns them). The domains go first, while the hook is still installed: their stops release
    their leases."""
    left = _remove_our_domains()
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)
        left.append(BRIDGE)
    try:
        if guest_hook.teardown(log) is not None:
            left.append(f"the hook ({guest_hook.HOOK_FILE})")
    except guest_hook.HookError as exc:  # teardown() keeps its mark: the next run tries again
        left.append(f"the hook ({guest_hook.HOOK_FILE}; removal failed: {exc})")
    return left


def stock_domain(virt_type: str, disk: Path | None, mac: str | None, vcpus: int = 1,
                 memory_mib: int = MEMORY_MIB) -> str:
    """examples/stock-latency.xml for this run: its disk is ``disk``, its NIC on our bridge."""
    root = etree.parse(str(STOCK)).getroot()
    root.set("type", virt_type)
    for el in root.findall("uuid"):
        root.remove(el)
    for tag in ("memory", "currentMemory"):
        root.find(tag).set("unit", "MiB")
        root.find(tag).text = str(memory_mib)
    root.find("vcpu").text = str(vcpus)
    devices = root.find("devices")
    disk_el = devices.find("disk")
    if disk is None:
        devices.remove(disk_el)
    else:
        disk_el.find("source").set("file", str(disk))
    nic = devices.find("interface")
    if mac is None:
        devices.remove(nic)
    else:
        nic.set("type", "bridge")
        nic.find("source").attrib.clear()
        nic.find("source").set("bridge", BRIDGE)
        nic.find("mac").set("address", mac)
    return etree.tostring(root, encoding="unicode")


def with_boot(xml: str, image: guestimage.Image, name: str, console: Path, cmdline: str) -> str:
    """The variant's XML with our name, the bench kernel/initrd/cmdline and a file serial console."""
    root = etree.fromstring(xml.encode())
    root.find("name").text = name
    for el in root.findall("uuid"):
        root.remove(el)
    debimage.direct_boot(root, image.kernel, image.initrd, f"{CMDLINE} {cmdline}", console)
    return etree.tostring(root, encoding="unicode")


class Guest:
    def __init__(self, xml: str, image: guestimage.Image, cmdline: str, role: str):
        self.name = f"{PREFIX}{role}-{uuid.uuid4().hex[:8]}"
        self.console = LOG_DIR / f"{self.name}.console"
        self.xml = with_boot(xml, image, self.name, self.console, cmdline)
        self.started = self.up_at = None

    def start(self) -> None:
        virsh("define", "/dev/stdin", stdin=self.xml.encode())
        self.started = time.monotonic()
        virsh("start", self.name)

    def text(self) -> str:
        try:
            return self.console.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait(self, marker: str, timeout: float) -> dict:
        """Poll the console until ``marker`` appears or the guest stops; GuestError on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            parsed = guestimage.parse_console(text)
            if parsed["up"] and self.up_at is None:
                self.up_at = time.monotonic()
            lines = text.replace("\r", "").split("\n")
            if any(line.strip().startswith(marker) for line in lines):
                return parsed
            state = virsh("domstate", self.name, check=False).strip()
            if state and state != "running":
                # it may have printed the marker and powered off since we read the console
                text = self.text()
                if any(line.strip().startswith(marker) for line in text.replace("\r", "").split("\n")):
                    return guestimage.parse_console(text)
                raise GuestError(self._failure(f"stopped ({state}) before {marker}", text))
            if time.monotonic() > deadline:
                raise GuestError(self._failure(f"no {marker} after {timeout:.0f}s", text))
            time.sleep(0.2)

    def _failure(self, what: str, text: str) -> str:
        try:
            log = (LOG_DIR / f"{self.name}.log").read_text(errors="replace")[-1500:]
        except FileNotFoundError:
            log = ""
        return f"{self.name}: {what}\n--- console (tail):\n{text[-2500:]}\n--- qemu log (tail):\n{log}"

    def remove(self) -> None:
        _remove_domain(self.name)


@contextmanager
def running(xml: str, image: guestimage.Image, cmdline: str, role: str) -> Iterator[Guest]:
    g = Guest(xml, image, cmdline, role)
    try:
        g.start()
        yield g
    finally:
        g.remove()


# -- the network: a bridge with the echo server on it --------------------------------------------
@contextmanager
def bridge_with_echo(echo: Path) -> Iterator[None]:
    """Create BRIDGE with HOST_IP and run the echo server on it; always remove both."""
    proc = None
    try:
        for cmd in (["ip", "link", "add", BRIDGE, "type", "bridge", "forward_delay", "0", "stp_state", "0"],
                    ["ip", "addr", "add", f"{HOST_IP}/{PREFIXLEN}", "dev", BRIDGE],
                    ["ip", "link", "set", BRIDGE, "up"]):
            run = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if run.returncode:
                raise GuestError(f"{' '.join(cmd)}: {run.stderr.strip()}")
        proc = subprocess.Popen([str(echo), HOST_IP, str(PORT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        line = proc.stdout.readline()
        if "ready" not in line:
            raise GuestError(f"udpecho did not start: {line}{proc.stderr.read()}")
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)


@contextmanager
def cleanup_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind like Ctrl-C, so every ``finally`` (domains, bridge) runs."""
    def raise_exit(signum, _frame):
        raise SystemExit(128 + signum)
    old = {s: signal.signal(s, raise_exit) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# -- variants -----------------------------------------------------------------------------------
def variant_xmls(stock: str, host: vmtune.Host, config: vmtune.Config) -> dict[str, dict]:
    """{variant: {"xml", "changes", "note", ...}}; the single variants are tuned's passes run alone."""
    tuned = vmtune.rewrite(stock, host, profile="latency", config=config)
    tuned_changes = {(c.element, c.after) for c in tuned.changes}
    tuned_elements = {c.element for c in tuned.changes}

    def in_tuned(c) -> str:
        if (c.element, c.after) in tuned_changes:
            return "same"
        # e.g. <cputune> without the iothreadpin that tuned adds for its iothread
        return "same element, tuned writes more" if c.element in tuned_elements else "not in tuned"
    out = {"stock": {"xml": stock, "changes": [], "note": "examples/stock-latency.xml as it is"}}
    for name, (alone, overrides, note) in SINGLE.items():
        root, ctx = driver.prepare(stock, host, "latency", config=config)
        ctx = dataclasses.replace(ctx, profile=dataclasses.replace(ctx.profile, **overrides))
        changes, warnings = driver.run_passes(root, ctx, passes=alone)
        out[name] = {
            "xml": driver.serialize(root),
            "changes": [{**c.to_dict(), "in_tuned": in_tuned(c)} for c in changes],
            "passes": [p.__name__.rsplit(".", 1)[-1] for p in alone],
            "profile_overrides": overrides,
            "note": note,
            # every element the single variant edits is one the full rewrite edits too
            "subset_of_tuned": all(in_tuned(c) != "not in tuned" for c in changes),
            "warnings": warnings,
        }
    out["tuned"] = {"xml": tuned.xml, "changes": [c.to_dict() for c in tuned.changes],
                    "note": "vmtune.rewrite(stock, profile='latency'): every pass",
                    "placement": tuned.placement, "warnings": list(tuned.warnings)}
    emu, emu_xml, emu_edits = emulator_moved(tuned.xml, config.reserved_cpus)
    out[emu] = {"xml": emu_xml, "changes": [c.to_dict() for c in tuned.changes], "emulator_edits": emu_edits,
                "note": EMU_NOTE[emu], "placement": tuned.placement, "warnings": list(tuned.warnings)}
    for name, info in out.items():
        if not tagged(name):
            info["xml"] = untag(info["xml"])
        info["hook"] = HOOK_NOTE[tagged(name)]
    return out


EMU_NOTE = {
    EMU_RESERVED: ("tuned, with <emulatorpin> and every <iothreadpin> moved to the reserved CPUs (edited by the "
                   "benchmark; under TCG vmtune puts them beside the vCPUs)"),
    EMU_VCPU: ("tuned, with <emulatorpin> and every <iothreadpin> moved to the vCPUs' dedicated CPU(s) (edited by "
               "the benchmark; under KVM vmtune puts them on the reserved CPUs)"),
}
HOOK_NOTE = {True: "tagged: the hook's prepare (host tuning, isolation of the vCPU CPUs) and release run for it",
             False: "vmtune's tag removed: the hook ignores it (exit 0 before reading anything)"}


def untag(xml: str) -> str:
    """``xml`` without vmtune's tag (and without <metadata> if that leaves it empty)."""
    root = etree.fromstring(xml.encode())
    meta = root.find("metadata")
    if meta is not None:
        for el in meta.findall("{https://vmtune.dev/xmlns/1}tune"):
            meta.remove(el)
        if len(meta) == 0:
            root.remove(meta)
    return etree.tostring(root, encoding="unicode")


def emulator_moved(xml: str, reserved: frozenset[int]) -> tuple[str, str, list[dict]]:
    """(variant, ``xml`` with <emulatorpin> and every <iothreadpin> moved, the edits): to the
    ``reserved`` CPUs when vmtune put the emulator beside the vCPUs, else beside the vCPUs."""
    root = etree.fromstring(xml.encode())
    tune = root.find("cputune")
    vcpus = frozenset().union(*(cpuset.parse(p.get("cpuset")) for p in tune.findall("vcpupin")))
    if not vcpus:
        raise GuestError("the tuned domain has no <vcpupin>: nothing to move the emulator next to")
    emu = tune.find("emulatorpin")
    beside = emu is not None and cpuset.parse(emu.get("cpuset") or "") == vcpus
    variant = EMU_RESERVED if beside else EMU_VCPU
    target = cpuset.format(reserved if beside else vcpus)
    edits = []
    if emu is None:
        emu = etree.SubElement(tune, "emulatorpin")
    for el in [emu, *tune.findall("iothreadpin")]:
        edits.append({"element": el.tag + (f"[@iothread='{el.get('iothread')}']" if el.get("iothread") else ""),
                      "before": el.get("cpuset"), "after": target})
        el.set("cpuset", target)
    return variant, etree.tostring(root, encoding="unicode"), edits


def sched_xmls(host: vmtune.Host, config: vmtune.Config, virt_type: str, hog_vcpus: int,
               host_hogs: int) -> dict[str, dict]:
    """The scheduling case's pairs: stock/stock, each tuned with the other as its claim, the
    emulator variant; and the same latency guests with ``host_hogs`` host processes as the hog."""
    lat = stock_domain(virt_type, None, None)
    hog = stock_domain(virt_type, None, None, vcpus=hog_vcpus, memory_mib=MEMORY_MIB + 4 * hog_vcpus)
    hog_root = etree.fromstring(hog.encode())
    hog_root.find("name").text = "hog"
    meta = hog_root.find("metadata")
    hog_root.remove(meta)  # untagged: the hog is not a latency guest
    hog = etree.tostring(hog_root, encoding="unicode")
    lat_tuned = vmtune.rewrite(lat, host, profile="latency", claims=[hog], config=config)
    hog_tuned = vmtune.rewrite(hog, host, profile="balanced", claims=[lat_tuned.xml], config=config)
    emu_name, emu_xml, emu_edits = emulator_moved(lat_tuned.xml, config.reserved_cpus)
    tuned = {"latency": lat_tuned.xml, "hog": hog_tuned.xml,
             "changes": {"latency": [c.to_dict() for c in lat_tuned.changes],
                         "hog": [c.to_dict() for c in hog_tuned.changes]},
             "placement": {"latency": lat_tuned.placement, "hog": hog_tuned.placement},
             "warnings": list(lat_tuned.warnings) + list(hog_tuned.warnings),
             "note": ("latency guest: vmtune latency with the hog as claim; hog: vmtune balanced with the "
                      "tuned latency guest as claim")}
    stock = {"latency": untag(lat), "hog": hog, "changes": {"latency": [], "hog": []},
             "note": "both stock, nothing pinned"}
    emu = {**tuned, "latency": emu_xml, "emulator_edits": emu_edits,
           "note": f"{tuned['note']}; then the latency guest's {EMU_NOTE[emu_name]} (the hog as in tuned)"}
    out = {"stock": stock, "tuned": tuned, emu_name: emu}
    hogs = (f"no hog guest: {host_hogs} unpinned busy host processes, started before the latency guest and "
            "killed after it")
    notes = {"stock": f"latency guest stock (untagged), nothing pinned; {hogs}",
             "tuned": (f"latency guest as in tuned (vCPU on its dedicated CPU, the hook's isolation moves the host "
                       f"processes off it); {hogs}"),
             emu_name: f"latency guest as in {emu_name}; {hogs}"}
    for v in ("stock", "tuned", emu_name):  # the same latency guests, host processes as the hog
        hosthog = {k: val for k, val in out[v].items() if k not in ("hog", "placement", "changes", "warnings")}
        hosthog.update(hog=None, host_hogs=host_hogs, note=notes[v], changes={"latency": out[v]["changes"]["latency"]})
        if v != "stock":
            hosthog["placement"] = {"latency": lat_tuned.placement}
        out[f"{v}{HOSTHOG}"] = hosthog
    for v, info in out.items():
        info["hook"] = HOOK_NOTE[tagged(v)]
    return out


# -- running ------------------------------------------------------------------------------------
def disk_image(path: Path, mib: int = DISK_MIB) -> None:
    """A raw image of ``mib`` MiB of random bytes (allocated: no holes that read for free)."""
    if path.exists() and path.stat().st_size == mib << 20:
        return
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.writelines(os.urandom(1 << 20) for _ in range(mib))
    tmp.chmod(0o644)
    os.replace(tmp, path)


def _mac(i: int) -> str:
    return f"52:54:00:b7:{i >> 8 & 255:02x}:{i & 255:02x}"


def _cmdline(tests: str, cfg: dict) -> str:
    return (f"vmb.tests={tests} vmb.disk_ops={cfg['disk_ops']} vmb.net_ops={cfg['net_ops']} "
            f"vmb.timer_ops={cfg['timer_ops']} vmb.warmup={cfg['warmup']} "
            f"vmb.ip={GUEST_IP}/{PREFIXLEN} vmb.host={HOST_IP} vmb.port={PORT}")


def _qemu_threads(name: str) -> dict[str, str]:
    """Where the guest's QEMU threads may run now: {thread name: CPUs} (libvirt names them with
    debug-threads=on: "CPU 0/TCG" is the vCPU, "qemu-system-x86" the main loop, i.e. the emulator
    thread); file reads only, so it costs the measurement nothing."""
    try:
        pid = int((Path("/run/libvirt/qemu") / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return {}
    out: dict[str, set[str]] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            comm = (task / "comm").read_text().strip()
            mask = next(line.split(":", 1)[1].strip() for line in (task / "status").read_text().splitlines()
                        if line.startswith("Cpus_allowed_list:"))
        except (OSError, StopIteration):
            continue
        out.setdefault(comm, set()).add(mask)
    return {comm: " ".join(sorted(masks)) for comm, masks in sorted(out.items())}


def _observe(g: Guest, variant: str, hook: guest_hook.Session | None) -> dict:
    """What a boot sees once its guest is started (libvirt runs the hook's prepare before ``virsh
    start`` returns, and the guest is still booting): the hook's lease and the isolation, and where
    QEMU's threads may run."""
    out: dict = {"qemu_threads": _qemu_threads(g.name)}
    if hook is not None:
        out["hook"] = hook.during(g.name)
    return out


def _after(g: Guest, out: dict, hook: guest_hook.Session | None) -> None:
    """After the guest is gone: its lease released (the hook's ``release end``)."""
    if hook is not None:
        out.setdefault("hook", {}).update(hook.after(g.name))


def _one_boot(xml: str, image, cfg: dict, role: str, hook: guest_hook.Session | None = None) -> dict:
    with running(xml, image, _cmdline("disk,net,timer", cfg), role) as g:
        # libvirt ran the hook's prepare before ``virsh start`` returned: look now, while the guest
        # boots (a short run can reach DONE and power off a moment after VMB-UP)
        seen = _observe(g, role, hook)
        parsed = g.wait(guestimage.DONE, cfg["timeout_s"])
        parsed["boot_s"] = (g.up_at or time.monotonic()) - g.started
        parsed.update(seen)
    _after(g, parsed, hook)
    return parsed


def _host_hogs(probe: Path, n: int) -> list[subprocess.Popen]:
    """``n`` unpinned busy processes (they die with us: PR_SET_PDEATHSIG)."""
    return [subprocess.Popen([str(probe), "spin"], stdin=subprocess.DEVNULL) for _ in range(n)]


def _affinity(pid: int) -> str:
    try:
        return cpuset.format(frozenset(os.sched_getaffinity(pid)))
    except OSError:
        return "gone"


def _sched_boot(variant: str, pair: dict, image, cfg: dict, hook: guest_hook.Session | None = None,
                probe: Path | None = None) -> dict:
    procs: list[subprocess.Popen] = []
    try:
        if pair.get("host_hogs"):  # like a backup job: running before the latency guest starts
            procs = _host_hogs(probe, pair["host_hogs"])
        hog_guest = running(pair["hog"], image, "vmb.tests=hog", "hog") if pair.get("hog") else nullcontext()
        with hog_guest as hog:
            if hog is not None:
                hog.wait(guestimage.HOG, cfg["timeout_s"])
            ops = dict(cfg, timer_ops=cfg["sched_ops"])
            with running(pair["latency"], image, _cmdline("timer", ops), "lat") as g:
                seen = _observe(g, variant, hook)  # at once: the prepare ran before ``virsh start`` returned
                if procs:  # where the host hogs may run now (isolation takes the vCPU's CPU from them)
                    seen["host_hog_cpus_during"] = sorted({_affinity(p.pid) for p in procs})
                parsed = g.wait(guestimage.DONE, cfg["timeout_s"])
                parsed["boot_s"] = (g.up_at or time.monotonic()) - g.started
                parsed.update(seen)
        _after(g, parsed, hook)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
    return parsed


def _kvm_smoke(image: guestimage.Image, timeout: float = 90) -> None:
    """Unavailable unless a tuned type='kvm' guest boots: /dev/kvm can exist where KVM guests hang."""
    host = vmtune.Host.probe()
    xml = vmtune.rewrite(stock_domain("kvm", None, None), host, profile="latency").xml
    try:
        with running(xml, image, "vmb.tests=", "kvm-smoke") as g:
            g.wait(guestimage.DONE, timeout)
    except GuestError as exc:
        raise Unavailable("--virt-type kvm, but a KVM guest does not boot here: "
                          + " ".join(str(exc).split())[:400]) from None


def _retry(what: str, fn: Callable[[], dict], log: Callable[[str], None], attempts: int = 3) -> dict:
    """fn(), once more if a guest fails (a shared libvirtd: another user may have stopped it)."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except GuestError as exc:
            if attempt == attempts:
                raise
            log(f"part 1: {what} failed, trying again: {str(exc).splitlines()[0]}")
    raise AssertionError("unreachable")


def _check(variant: str, parsed: dict) -> list[str]:
    problems = [f"guest: {w}" for w in parsed["warnings"]]
    for key, want in EXPECT.get(variant, {}).items():
        got = parsed["facts"].get(key)
        if got != want:
            problems.append(f"{variant}: guest reports {key}={got}, expected {want}")
    for test, res in parsed["results"].items():
        if "error" in res or not res.get("n"):
            problems.append(f"{variant}: {test} failed: {res}")
    return problems


def _fail_on(problems: list[str]) -> None:
    if problems:
        raise GuestError("the guest did not measure what was asked:\n" + "\n".join(dict.fromkeys(problems)))


def run(cfg: dict, virt_type: str, log: Callable[[str], None]) -> list[dict]:
    """Run part 1; returns result records (without the common context). Raises Unavailable."""
    preflight(virt_type)
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    from .host_isolation import WORK as ISOLATION_WORK  # (host_isolation imports this module)
    ISOLATION_WORK.mkdir(mode=0o700, exist_ok=True)
    with open(LOCK, "w") as lock, open(ISOLATION_WORK / ".lock", "w") as iso_lock, cleanup_on_signals():
        fcntl.flock(lock, fcntl.LOCK_EX)  # one part-1 run at a time: the bridge and hugepages are shared
        # and never beside the host-isolation case: both have the hook isolate the real host's CPUs,
        # each with a state dir of its own, and two hooks that do not know each other's leases
        # would each restore what the other one isolated
        fcntl.flock(iso_lock, fcntl.LOCK_EX)
        left = _stale_cleanup(log)
        if left:
            log(f"part 1: removed what an earlier run left: {', '.join(left)}")
        # Even SIGKILL must not leave guests, the bridge or the hook behind: a watchdog in its own
        # session holds the lock with us, and cleans up if our end of its pipe closes without "done".
        watchdog = subprocess.Popen([sys.executable, "-m", "bench.guests", "--watchdog"], cwd=ROOT,
                                    stdin=subprocess.PIPE, pass_fds=(lock.fileno(), iso_lock.fileno()),
                                    start_new_session=True)
        try:
            return _run_locked(cfg, virt_type, log)
        except vmtune.VmtuneError as exc:  # e.g. DoesNotFit: no free CPU or hugepages for tuned
            raise GuestError(f"vmtune cannot tune the benchmark domains on this host: {exc}") from None
        except guest_hook.HookError as exc:
            raise GuestError(f"the hook: {exc}") from None
        finally:
            left = _stale_cleanup(log)
            if left:
                log(f"part 1: removed leftovers: {', '.join(left)}")
            try:
                watchdog.stdin.write(b"done\n")
                watchdog.stdin.close()
                watchdog.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                watchdog.kill()


def _watchdog() -> int:
    """Wait for the benchmark to close our stdin; clean up unless it said "done" first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the benchmark
    said = sys.stdin.buffer.read()
    if b"done" not in said:
        _stale_cleanup()
    return 0


def _run_locked(cfg: dict, virt_type: str, log: Callable[[str], None]) -> list[dict]:
    t0 = time.monotonic()
    image = guestimage.build()
    log(f"part 1: guest image ready ({image.kernel_package}, initrd {image.key}) in {time.monotonic() - t0:.0f}s")
    if virt_type == "kvm":
        _kvm_smoke(image)
    disk = guestimage.CACHE_DIR / f"disk-{DISK_MIB}M.raw"
    disk_image(disk)
    from .host_isolation import build_probe, online_cpus  # (host_isolation imports this module)
    probe = build_probe()  # its ``spin`` mode is the host hog
    host = vmtune.Host.probe()
    # vmtune's default: the first core of each node stays with the host (here CPU 0), the rest can
    # be dedicated. Written out so /etc/vmtune/vmtune.toml cannot change what is measured.
    config = vmtune.Config(reserved_cpus=host.default_reserved())
    stock = stock_domain(virt_type, disk, _mac(1))
    variants = variant_xmls(stock, host, config)
    names = [v for v in VARIANTS if v in variants and v in cfg.get("variants", VARIANTS)]
    # the hog spins on every host CPU (more vCPUs than the CPUs left after the reserved ones);
    # i440fx takes at most 255 vCPUs
    hog_vcpus = min(len(host.cpus), HOG_MAX_VCPUS)
    host_hogs = len(online_cpus())
    sched = sched_xmls(host, config, virt_type, hog_vcpus, host_hogs)
    sched_names = [v for v in SCHED_VARIANTS if v in sched and v in cfg.get("sched_variants", SCHED_VARIANTS)]
    context = {
        "host_cpus": sorted(host.cpus), "reserved_cpus": sorted(config.reserved_cpus),
        "guest_memory_mib": MEMORY_MIB, "disk_image_mib": DISK_MIB, "kernel_package": image.kernel_package,
        "hugepages_2m_free_at_start": {c.id: c.pages.get(2048) for c in host.cells},
    }
    runs: dict[str, list[dict]] = {v: [] for v in names}
    sched_runs: dict[str, list[dict]] = {v: [] for v in sched_names}
    # (an interrupted boot may leave its guest: removed before the hook goes, so its release runs)
    with guest_hook.installed(config.reserved_cpus, log, before_teardown=_remove_our_domains) as hook:
        with bridge_with_echo(image.echo_server):
            for r in range(cfg["reps"]):
                order = names[r % len(names):] + names[:r % len(names)] if names else []
                for v in order:
                    t = time.monotonic()
                    parsed = _retry(f"{v} rep {r + 1}",
                                    lambda v=v: _one_boot(variants[v]["xml"], image, cfg, v, hook), log)
                    _fail_on(_check(v, parsed))
                    parsed["loadavg_1min_after"] = os.getloadavg()[0]
                    runs[v].append(parsed)
                    res = parsed["results"]
                    log(f"part 1: rep {r + 1}/{cfg['reps']} {v:14} boot {parsed['boot_s']:.1f}s, "
                        + ", ".join(f"{k} p50 {res[k].get('p50_us', '?')} us" for k in ("disk", "net", "timer") if k in res)
                        + f", timer p99 {res.get('timer', {}).get('p99_us', '?')} us{_hook_word(parsed, v)}"
                        + f" ({time.monotonic() - t:.0f}s)")
        for r in range(cfg["sched_reps"]):
            order = sched_names[r % len(sched_names):] + sched_names[:r % len(sched_names)] if sched_names else []
            for v in order:
                t = time.monotonic()
                parsed = _retry(f"sched {v} rep {r + 1}",
                                lambda v=v: _sched_boot(v, sched[v], image, cfg, hook, probe), log)
                _fail_on(_check(f"sched-{v}", parsed))
                parsed["loadavg_1min_after"] = os.getloadavg()[0]
                sched_runs[v].append(parsed)
                log(f"part 1: sched rep {r + 1}/{cfg['sched_reps']} {v:22} timer p50 "
                    f"{parsed['results'].get('timer', {}).get('p50_us', '?')} us, p99 "
                    f"{parsed['results'].get('timer', {}).get('p99_us', '?')} us{_hook_word(parsed, v)}"
                    f" ({time.monotonic() - t:.0f}s)")
    context["hook"] = hook.status  # complete now: the teardown ran
    records = []
    for case, (test, what) in CASES.items():
        per = {v: [p["results"][test] for p in runs[v]] for v in names}
        for v in names:
            records.append(_record(case, v, what, per, runs[v], virt_type, cfg, context, variants[v]))
    per = {v: [p["results"]["timer"] for p in sched_runs[v]] for v in sched_runs}
    for v, boots in sched_runs.items():
        ctx = {**context, "hog_vcpus": hog_vcpus, "host_hogs": host_hogs}
        what = SCHED_HOSTHOG_NOTE if v.endswith(HOSTHOG) else SCHED_NOTE
        records.append(_record(SCHED_CASE, v, what, per, boots, virt_type, cfg, ctx, sched[v], reps_key="sched_reps"))
    return records


def _hook_word(parsed: dict, variant: str) -> str:
    held = parsed.get("hook", {}).get("lease_held")
    if held is None:
        return ""
    if held:
        return f", hook lease held (isolated {parsed['hook'].get('isolated_cpus')})"
    return ", NO hook lease" if tagged(variant) else ""


# optional per-boot observations copied into a record's per_run
PER_RUN_EXTRA = ("hook", "qemu_threads", "host_hog_cpus_during")


def _record(case, variant, what, per, boots, virt_type, cfg, context, info, reps_key="reps") -> dict:
    mine = per[variant]
    p50 = [r["p50_us"] / 1000 for r in mine]
    p99 = [r["p99_us"] / 1000 for r in mine]
    rec = {
        "case": case,
        "variant": variant,
        "virt_type": virt_type,
        "virt_type_note": ("TCG: QEMU emulates the guest CPU in software; these are not KVM figures"
                           if virt_type == "qemu" else "KVM: hardware virtualization"),
        "what": what,
        "unit_note": "p50_ms/p99_ms: median over repetitions of each boot's percentile over its operations",
        "p50_ms": statistics.median(p50),
        "p99_ms": statistics.median(p99),
        "p50_us": statistics.median(p50) * 1000,
        "p99_us": statistics.median(p99) * 1000,
        "spread": {"p50_ms": spread(p50), "p99_ms": spread(p99)},
        "runs": len(mine),
        "ops_per_run": mine[0]["n"] if mine else 0,
        "per_run": [{**r, "boot_s": round(b["boot_s"], 2), "loadavg_1min_after": b["loadavg_1min_after"],
                     "facts": b["facts"], **{k: b[k] for k in PER_RUN_EXTRA if k in b}}
                    for r, b in zip(mine, boots, strict=True)],
    }
    held = [b.get("hook", {}).get("lease_held") for b in boots]
    rec["hook"] = {
        "tagged": tagged(variant),
        "installed_by": context.get("hook", {}).get("installed_by"),
        # tagged: True when every boot held a lease in the hook's state while its guest ran
        "active": (all(held) if held and None not in held else None) if tagged(variant) else False,
        "boots_with_lease": sum(1 for h in held if h),
        "boots_lease_released": sum(1 for b in boots if b.get("hook", {}).get("lease_released")),
    }
    if variant != "stock" and "stock" in per:
        base = per["stock"]
        rec["vs_stock"] = {k: stats.compare([r[f"{k}_us"] for r in base], [r[f"{k}_us"] for r in mine])
                           for k in ("p50", "p99")}
        if variant.endswith(HOSTHOG):
            rec["vs_stock_note"] = "against the hog-guest stock; vs_stock_hosthog is the same-flavour baseline"
    for extra in EXTRA_BASES.get(variant, ()):
        if extra in per:
            base = per[extra]
            rec[f"vs_{extra.replace('-', '_')}"] = {
                k: stats.compare([r[f"{k}_us"] for r in base], [r[f"{k}_us"] for r in mine]) for k in ("p50", "p99")}
    rec["variant_info"] = {k: v for k, v in info.items() if k not in ("xml", "latency", "hog")}
    rec["domain_xml"] = info.get("xml") or {k: info[k] for k in ("latency", "hog") if info.get(k)} or None
    rec["setup"] = {**context, "reps": cfg[reps_key], "warmup_ops": cfg["warmup"]}
    return rec


if __name__ == "__main__":
    if sys.argv[1:] == ["--watchdog"]:
        sys.exit(_watchdog())
    sys.exit("usage: python -m bench.guests --watchdog (started by bench/run)")
