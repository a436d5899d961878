"""Virtualization: /dev/kvm, vhost-net, the clocksource, isolated CPUs, and KVM's halt polling."""

from __future__ import annotations

import os

from .. import cpuset
from ..host.sysfs import cpu_list
from .findings import Context, Finding, maker

new = maker("virt")
KVM_MODULES = ("kvm_intel", "kvm_amd", "kvm_pvm", "kvm_arm", "kvm_hv", "kvm_pr")
HALT_POLL = "module/kvm/parameters/halt_poll_ns"


def _kvm(ctx: Context) -> Finding:
    source = ctx.path("root", "dev/kvm")
    if not ctx.has("root"):
        return new("SKIP", source, "no --root tree given: /dev not read")
    modules = [m for m in KVM_MODULES if ctx.exists("sysfs", f"module/{m}")]
    flags = (ctx.cpuinfo() or [{}])[0].get("flags", "").split()
    hw = [f for f in ("vmx", "svm") if f in flags]
    if ctx.exists("root", "dev/kvm"):
        what = f"present (modules: {', '.join(modules) or 'built in'}; {'/'.join(hw) or 'no vmx/svm'} flag)"
        if ctx.roots.root == "/" and not os.access(source, os.R_OK | os.W_OK):
            return new("INFO", source, what + f"; uid {os.getuid()} cannot open it (libvirt's qemu user can)")
        return new("OK", source, what)
    if not hw and ctx.cpuinfo():
        fix = "enable VT-x/AMD-V in the BIOS (in a guest: nested virtualization on its host)"
    else:
        fix = "modprobe kvm_intel (or kvm_amd)"
    return new("FAIL", source, "missing: guests run under TCG emulation, many times slower", "/dev/kvm", fix)


def _vhost(ctx: Context) -> Finding:
    source = ctx.path("root", "dev/vhost-net")
    if not ctx.has("root"):
        return new("SKIP", source, "no --root tree given: /dev not read")
    module = "vhost_net module loaded" if ctx.exists("sysfs", "module/vhost_net") else "no vhost_net module"
    if ctx.exists("root", "dev/vhost-net"):
        return new("OK", source, f"present ({module})")
    return new("WARN", source, f"missing ({module}): virtio-net packets go through QEMU in user space",
               "/dev/vhost-net", "modprobe vhost_net (and add it to /etc/modules-load.d)")


def _clocksource(ctx: Context) -> Finding:
    rel = "devices/system/clocksource/clocksource0/current_clocksource"
    current = ctx.read("sysfs", rel)
    guest = ctx.env is not None and ctx.env.guest
    want = ("kvm-clock", "tsc") if guest else ("tsc",)
    if current is None:
        return new("SKIP", ctx.path("sysfs", rel), "no clocksource in this tree")
    if current in want or (guest and current.startswith(("xen", "hyperv"))):
        return new("OK", ctx.path("sysfs", rel), current)
    return new("WARN", ctx.path("sysfs", rel), f"{current}: every clock read is slow", " or ".join(want),
               "dmesg | grep -i 'clocksource.*unstable' (the TSC was rejected); check the BIOS and tsc= options")


def _isolation(ctx: Context) -> Finding:
    isolated = cpu_list(ctx.read("sysfs", "devices/system/cpu/isolated"))
    nohz = cpu_list(ctx.read("sysfs", "devices/system/cpu/nohz_full"))
    source = ctx.path("sysfs", "devices/system/cpu/isolated")
    if not isolated and not nohz:
        return new("INFO", source, "no isolcpus, no nohz_full: vmtune keeps the first core of each node "
                                   "for the host (reserved_cpus)")
    what = f"isolcpus {cpuset.format(isolated) or '-'}, nohz_full {cpuset.format(nohz) or '-'}"
    if isolated - nohz:
        what += f"; the timer tick still runs on {cpuset.format(isolated - nohz)}"
    return new("INFO", source, what)


def _halt_poll(ctx: Context) -> Finding | None:
    value = ctx.read("sysfs", HALT_POLL)
    if value is None:
        return None
    if value == "0":
        return new("WARN", ctx.path("sysfs", HALT_POLL), "0: every vCPU wake-up pays a full sleep and wake",
                   "> 0 (default 200000)", "echo 200000 > /sys/module/kvm/parameters/halt_poll_ns")
    return new("OK", ctx.path("sysfs", HALT_POLL), f"{value} ns")


def check(ctx: Context) -> list[Finding]:
    out = [_kvm(ctx), _vhost(ctx)]
    if not ctx.has("sysfs"):
        return out + [new("SKIP", "(no --sysfs)", "no sysfs tree given")]
    out += [_clocksource(ctx), _isolation(ctx)]
    halt = _halt_poll(ctx)
    return out + ([halt] if halt else [])
