"""Is this a VM, a container or bare metal? The other checks read what this means for them.

A guest sees its own kernel, not its host's: its cpufreq, C-states and KSM say nothing about the
host's, and a container shares the host's kernel but usually cannot change it (read-only sysfs).
"""

from __future__ import annotations

from dataclasses import dataclass

from .findings import Context, Finding, maker

new = maker("environment")

# DMI vendor/product words -> hypervisor
DMI_WORDS = (("qemu", "KVM"), ("kvm", "KVM"), ("amazon ec2", "KVM"), ("google compute", "KVM"),
             ("vmware", "VMware"), ("virtualbox", "VirtualBox"), ("xen", "Xen"),
             ("virtual machine", "Hyper-V"), ("bochs", "KVM"), ("cloud hypervisor", "KVM"))
CLOCKSOURCE_WORDS = (("kvm-clock", "KVM"), ("xen", "Xen"), ("hyperv_clocksource", "Hyper-V"))
CGROUP_WORDS = ("/docker", "/kubepods", "/lxc", "/libpod", "/containerd", "/machine.slice/")


@dataclass(frozen=True)
class Environment:
    kind: str  # "vm", "container", "bare-metal" or "unknown"
    hypervisor: str | None = None  # "KVM", "Xen", ... when known
    container: str | None = None  # the container marker found
    evidence: tuple[str, ...] = ()
    read_only_sysfs: bool = False

    @property
    def guest(self) -> bool:
        return self.kind == "vm"


def _hypervisor(ctx: Context) -> tuple[str | None, list[str]]:
    """(hypervisor name or "" when a guest of an unknown one, evidence); (None, []) for no sign."""
    evidence: list[str] = []
    name = None
    cpus = ctx.cpuinfo()
    if cpus and "hypervisor" in cpus[0].get("flags", "").split():
        evidence.append("hypervisor flag in /proc/cpuinfo")
    xen = ctx.read("sysfs", "hypervisor/type")
    if xen:
        name = "Xen" if xen == "xen" else xen
        evidence.append(f"/sys/hypervisor/type {xen}")
    dmi = " ".join(filter(None, (ctx.read("sysfs", f"class/dmi/id/{f}") for f in ("sys_vendor", "product_name"))))
    hit = next((hv for word, hv in DMI_WORDS if word in dmi.lower()), None)
    if hit:
        name = name or hit
        evidence.append(f"DMI {dmi!r}")
    clocks = ctx.read("sysfs", "devices/system/clocksource/clocksource0/available_clocksource") or ""
    hit = next(((word, hv) for word, hv in CLOCKSOURCE_WORDS if word in clocks.split() or
                any(c.startswith(word) for c in clocks.split())), None)
    if hit:  # kvm-clock and friends exist only in guests
        name = name or hit[1]
        evidence.append(f"clocksource {hit[0]}")
    if not evidence:
        return None, []
    return name or "", evidence


def _container(ctx: Context) -> str | None:
    for rel in (".dockerenv", "run/.containerenv"):
        if ctx.exists("root", rel):
            return "/" + rel
    systemd = ctx.read("root", "run/systemd/container")
    if systemd:
        return f"/run/systemd/container {systemd}"
    environ = ctx.read("proc", "1/environ") or ""
    for var in environ.split("\0"):
        if var.startswith("container="):
            return f"/proc/1/environ {var}"
    for line in (ctx.read("proc", "1/cgroup") or "").splitlines():
        if any(word in line for word in CGROUP_WORDS):
            return f"/proc/1/cgroup {line.split(':', 2)[-1]}"
    return None


def _sysfs_read_only(ctx: Context) -> bool:
    for line in (ctx.read("proc", "self/mounts") or "").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "sysfs" and parts[1] == "/sys":
            return "ro" in parts[3].split(",")
    return False


def detect(ctx: Context) -> Environment:
    hypervisor, evidence = _hypervisor(ctx)
    container = _container(ctx)
    read_only = _sysfs_read_only(ctx)
    if hypervisor is not None:
        kind = "vm"
    elif container or read_only:
        kind = "container"
    elif ctx.has("proc") and ctx.cpuinfo():
        kind = "bare-metal"
    else:
        kind = "unknown"
    return Environment(kind, hypervisor or None, container, tuple(evidence), read_only)


def check(ctx: Context) -> list[Finding]:
    env = ctx.env = detect(ctx)
    source = ctx.path("proc", "cpuinfo")
    out: list[Finding] = []
    if env.kind == "vm":
        what = f"{env.hypervisor or 'virtual'} guest ({'; '.join(env.evidence)})"
        out.append(new("INFO", source, f"{what}: what follows is this guest's kernel, not its host's",
                       fix="run vmtune doctor on the host to see the host's frequency, C-states and KSM"))
    elif env.kind == "bare-metal":
        out.append(new("INFO", source, "bare metal (no hypervisor flag, no virtual DMI vendor)"))
    elif env.kind == "container":
        out.append(new("INFO", source, "container on a host kernel (no hypervisor flag)"))
    else:
        out.append(new("SKIP", source, "unknown: no proc tree to tell a VM from bare metal",
                       fix="pass --proc DIR with the captured /proc"))
    if env.container:
        what = ("container marker in a guest (a container here, or a file left in the image)" if env.guest
                else "container marker: the kernel is the host's, shared with its other containers")
        out.append(new("INFO", env.container, what))
    if env.read_only_sysfs:
        out.append(new("INFO", ctx.path("proc", "self/mounts"), "sysfs is mounted read-only here",
                       fix="apply the fixes on the host, not in the container"))
    return out
