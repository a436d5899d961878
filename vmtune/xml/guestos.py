"""The guest OS of a domain, read from the strongest evidence the domain has.

Some of what vmtune writes depends on the guest: a Windows guest has no virtio drivers of its own
(its disks keep their bus), reads Hyper-V enlightenments and no KVM hint. A guest read wrongly as
Linux cannot boot (its boot disk moved to virtio); a guest read wrongly as Windows only misses some
tuning. So the evidence is taken strongest first, and a guest without any is unknown, and kept
safe (docs/config.md, "How vmtune reads the guest OS"):

1. **A libosinfo id** (``<libosinfo:os id=...>`` in ``<metadata>``, written by virt-install,
   virt-manager and GNOME Boxes) decides. libosinfo files every Windows under
   ``http://microsoft.com/win/`` or ``/winnt/``; any other id is not Windows, even beside
   ``<hyperv>`` (Linux guests with Hyper-V enlightenments are common on VFIO hosts). Its vendor
   gives the family (``ID_FAMILIES``); ``http://libosinfo.org/unknown`` says nothing.
2. **A direct kernel boot** (``<os><kernel>``): QEMU loads a Linux kernel; the guest is Linux.
3. **macOS's SMC** (a QEMU argument ``isa-applesmc``): macOS.
4. **Windows' signals.** One strong signal is enough: ``<hyperv>`` or its ``vendor_id``, the clock
   in local time (``offset='localtime'``, ``'timezone'``, or ``basis='localtime'``), the
   ``hypervclock`` timer, Hyper-V flags in a QEMU ``-cpu`` argument, an ACPI SLIC or MSDM table
   (Windows' OEM activation), an SMBIOS string naming Windows or Microsoft, the virtio-win driver
   disc or a Windows install disc in a CD-ROM drive (a disk image's name is only a
   name). Weak signals count only two or more together (``WEAK``): KVM
   hidden (``<kvm><hidden state='on'/>``, the ``hypervisor`` CPU feature disabled, or ``kvm=off``
   in QEMU's ``-cpu``: VFIO users hide KVM from NVIDIA's and anti-cheat drivers on Windows, but
   Nova hides it for any guest), a TPM (Windows 11 needs one; virt-install gives one to UEFI
   guests), the host's SMBIOS or a real board's (anti-cheat again).
5. Else **unknown**. The firmware (BIOS or UEFI), the machine type and the input devices say
   nothing: every OS has them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from enum import StrEnum

from .xmltext import Children, text

QEMU_NS = "http://libvirt.org/schemas/domain/qemu/1.0"
WEAK = 2  # how many weak signals make a Windows guest


class Family(StrEnum):
    WINDOWS = "windows"
    LINUX = "linux"
    OTHER = "other"  # a known OS that is neither: a BSD, macOS, illumos, DOS, ...
    UNKNOWN = "unknown"


class Strength(StrEnum):
    LIBOSINFO = "libosinfo"  # an id decided
    STRONG = "strong"  # a signal that is enough alone
    WEAK = "weak"  # WEAK or more weak signals together
    NONE = "none"  # no evidence that decides


@dataclass(frozen=True)
class GuestOS:
    """What a domain says of its guest OS: the family, the evidence that decided (strongest
    first), how strong it is, and whether the OS has virtio drivers of its own (True: Linux, the
    BSDs, ...; False: Windows, DOS, ...; None: not known)."""

    family: Family
    evidence: tuple[str, ...] = ()
    strength: Strength = Strength.NONE
    name: str = ""  # as a person names it: "Windows", "Linux", "FreeBSD", ...
    virtio: bool | None = None
    outranked: tuple[str, ...] = ()  # Windows' signals that stronger evidence overruled

    @property
    def windows(self) -> bool:
        return self.family == Family.WINDOWS

    def describe(self) -> str:
        """One phrase for --explain and the warnings: ``Windows, from <hyperv>, hypervclock timer``."""
        if self.family == Family.UNKNOWN:
            if not self.evidence:
                return "unknown (no libosinfo id, no sign of Windows)"
            return f"unknown ({', '.join(self.evidence)}: one weak sign of Windows is not enough)"
        return f"{self.name or self.family.value}, {self.source}"

    @property
    def source(self) -> str:
        """What it was read from: ``from libosinfo id http://microsoft.com/win/10``."""
        said = f"from {', '.join(self.evidence)}"
        if self.outranked:
            said += f" (which outranks {', '.join(self.outranked)})"
        return said

    def to_dict(self) -> dict:
        return {"family": self.family.value, "name": self.name, "strength": self.strength.value,
                "evidence": list(self.evidence), "outranked": list(self.outranked),
                "virtio_drivers": self.virtio}


UNKNOWN = GuestOS(Family.UNKNOWN)

# A libosinfo id's vendor (and the start of its path) -> (family, name, virtio drivers of its own).
# From osinfo-db's data/os/VENDOR/*.xml <family> (2026): the first prefix that matches decides.
_LINUX = (Family.LINUX, "Linux", True)
ID_FAMILIES: tuple[tuple[str, tuple[Family, str, bool | None]], ...] = (
    ("microsoft.com/win", (Family.WINDOWS, "Windows", False)),  # win/..., winnt/...
    ("microsoft.com/msdos", (Family.OTHER, "MS-DOS", False)),
    ("freedos.org", (Family.OTHER, "FreeDOS", False)),
    ("novell.com", (Family.OTHER, "NetWare", False)),
    ("guix.gnu.org/guix-system/hurd", (Family.OTHER, "GNU Hurd", False)),
    ("apple.com", (Family.OTHER, "macOS", None)),
    ("sun.com", (Family.OTHER, "Solaris", None)),
    ("oracle.com/solaris", (Family.OTHER, "Solaris", None)),
    ("freebsd.org", (Family.OTHER, "FreeBSD", True)),
    ("netbsd.org", (Family.OTHER, "NetBSD", True)),
    ("openbsd.org", (Family.OTHER, "OpenBSD", True)),
    ("dragonflybsd.org", (Family.OTHER, "DragonFly BSD", True)),
    ("haiku-os.org", (Family.OTHER, "Haiku", True)),
    ("omnios.org", (Family.OTHER, "illumos", True)),
    ("openindiana.org", (Family.OTHER, "illumos", True)),
    ("smartos.org", (Family.OTHER, "illumos", True)),
    ("libosinfo.org/linux", _LINUX),
    *((vendor, _LINUX) for vendor in (
        "almalinux.org", "alpinelinux.org", "altlinux.org", "android-x86.org", "archlinux.org", "asianux.com",
        "cclinux.org", "centos.org", "cirros-cloud.net", "clearlinux.org", "debian.org", "elementary.io",
        "endlessos.com", "euro-linux.com", "fedoraproject.org", "freenix.net", "gentoo.org", "getsol.us",
        "gnome.org", "guix.gnu.org", "hyperbola.info", "mageia.org", "mandriva.com", "manjaro.org",
        "miraclelinux.com", "nixos.org", "openanolis.cn", "opensuse.org", "oracle.com", "pureos.net",
        "redhat.com", "rockylinux.org", "scientificlinux.org", "slackware.com", "suse.com", "system76.com",
        "trisquel.info", "ubuntu.com", "univention.de", "voidlinux.org")),
)
SILENT_IDS = ("libosinfo.org/unknown",)  # ids that name no OS

# SMBIOS makers of real firmware and boards: a domain that copies them hides from anti-cheat
BOARD_MAKERS = re.compile(r"\b(american megatrends|ami|phoenix|insyde|award|asustek|asus|asrock|gigabyte|"
                          r"micro-star|msi|dell|hewlett-packard|hp|lenovo)\b", re.IGNORECASE)
WINDOWS_MEDIA = re.compile(r"^(windows|win[ _-]?(\d|xp|vista|server|srv|2k))", re.IGNORECASE)
HV_FLAG = re.compile(r"(^|,)hv[_-]")
WINDOWS_NAMED = re.compile(r"\b(windows|microsoft)\b", re.IGNORECASE)  # in an SMBIOS string


def _vendor(os_id: str) -> str:
    return re.sub(r"^[a-z]+://", "", os_id.strip().lower())


@functools.lru_cache(maxsize=256)
def from_id(os_id: str) -> GuestOS | None:
    """The guest a libosinfo id says (None: an id that names no OS); remembered, for a host's
    domains name a few ids."""
    bare = _vendor(os_id)
    if not bare or any(bare.startswith(s) for s in SILENT_IDS):
        return None
    evidence = (f"libosinfo id {os_id.strip()}",)
    for prefix, (family, name, virtio) in ID_FAMILIES:
        if bare.startswith(prefix):
            return GuestOS(family, evidence, Strength.LIBOSINFO, name, virtio)
    # a vendor vmtune does not know: not Windows (libosinfo files every Windows under microsoft.com)
    return GuestOS(Family.OTHER, evidence, Strength.LIBOSINFO, "not Windows", None)


_COMMANDLINE, _ARG = f"{{{QEMU_NS}}}commandline", f"{{{QEMU_NS}}}arg"
# the children of <domain> the reading looks below
READ = ("features", "clock", "os", "sysinfo", "devices", "cpu", _COMMANDLINE)


def _qemu_args(tops: Children) -> list[str]:
    """The ``<qemu:commandline>`` arguments of the domain whose children are ``tops``."""
    return [el.get("value") or "" for el in tops.each(_COMMANDLINE, _ARG)]


def _cpu_args(args: list[str]) -> list[str]:
    """The values of QEMU's ``-cpu`` arguments among ``<qemu:commandline>``'s ``args``."""
    return [value for flag, value in zip(args, args[1:]) if flag == "-cpu"]


def kvm_hidden(dom, args: list[str] | None = None) -> str | None:
    """How the domain hides KVM from its guest (then no KVM hint reaches it), or None (``args``:
    its ``<qemu:commandline>`` arguments, where they were read already)."""
    return _hidden(Children(dom.node, READ), args)


def _hidden(tops: Children, args: list[str] | None) -> str | None:
    """``kvm_hidden`` of the domain whose children are ``tops``."""
    hidden = tops.first("features", "kvm/hidden")
    if hidden is not None and hidden.get("state") == "on":
        return "<kvm><hidden state='on'/>"
    for feature in tops.each("cpu", "feature"):
        if feature.get("name") == "hypervisor" and feature.get("policy") in ("disable", "forbid"):
            return f"the hypervisor CPU feature {feature.get('policy')}d"
    if any("kvm=off" in value.split(",") for value in _cpu_args(_qemu_args(tops) if args is None else args)):
        return "kvm=off in QEMU's -cpu"
    return None


def _text(el) -> str:
    """The text of ``el`` (comments and PIs left out), its white space runs made one space."""
    return " ".join(text(el).split())


def windows_signals(dom, args: list[str]) -> tuple[list[str], list[str]]:
    """(strong, weak): the signs of Windows in the domain, each as a person would name it (``args``:
    its ``<qemu:commandline>`` arguments)."""
    return _signals(Children(dom.node, READ), args)[:2]


def _signals(tops: Children, args: list[str]) -> tuple[list[str], list[str], str | None]:
    """``windows_signals``, and ``kvm_hidden`` of the domain (one of the weak signals), whose
    children are ``tops``."""
    strong, weak = [], []
    hyperv = tops.first("features", "hyperv")
    if hyperv is not None:
        strong.append("<hyperv>")
        vendor = next(hyperv.iterchildren("vendor_id"), None)
        if vendor is not None and vendor.get("state") == "on":
            strong.append("Hyper-V vendor_id")
    clock = tops.first("clock")
    if clock is not None:
        if clock.get("offset") in ("localtime", "timezone"):
            strong.append(f"clock offset {clock.get('offset')}")
        elif clock.get("basis") == "localtime":
            strong.append("clock basis localtime")
    if any(t.get("name") == "hypervclock" and t.get("present") != "no" for t in tops.each("clock", "timer")):
        strong.append("hypervclock timer")
    if any(HV_FLAG.search(value) for value in _cpu_args(args)):
        strong.append("Hyper-V flags in QEMU's -cpu")
    for table in tops.each("os", "acpi/table"):
        if (table.get("type") or "").lower() in ("slic", "msdm"):
            strong.append(f"ACPI {table.get('type').upper()} table (Windows activation)")
    sysinfo = [_text(e) for info in tops.get("sysinfo", ()) for e in info.iter("entry")]  # sysinfo//entry
    # the strings one per line, each pattern searched once: a word of one string is one of the lines
    # and no more (no string holds a line end, the patterns none, and \b sees one as an end)
    lines = "\n".join(sysinfo)
    named = [s for s in sysinfo if WINDOWS_NAMED.search(s)] if WINDOWS_NAMED.search(lines) else []
    if named:
        strong.append(f"SMBIOS string '{named[0]}'")
    for disk in tops.each("devices", "disk"):
        if disk.get("device") != "cdrom":
            continue
        source = next(disk.iterchildren("source"), None)  # ``find("source")``, without ElementPath
        path = "" if source is None else source.get("file") or source.get("dev") or source.get("name") or ""
        base = path.rsplit("/", 1)[-1]
        if "virtio-win" in base.lower():
            strong.append(f"virtio-win driver disc {base}")
        elif WINDOWS_MEDIA.match(base):
            strong.append(f"Windows install disc {base}")
    hidden = _hidden(tops, args)
    if hidden:
        weak.append(f"KVM hidden ({hidden})")
    if tops.first("devices", "tpm") is not None:
        weak.append("a TPM")
    smbios = tops.first("os", "smbios")
    if smbios is not None and smbios.get("mode") == "host":
        weak.append("the host's SMBIOS")
    else:
        found = BOARD_MAKERS.search(lines)  # the first of the first string that names one
        board = found.group(0) if found else None
        if board:
            weak.append(f"a real board's SMBIOS ({board})")
    return list(dict.fromkeys(strong)), weak, hidden


def read(dom) -> GuestOS:
    """The guest OS of ``dom`` (a model.Domain), from the strongest evidence it has."""
    return reading(dom)[0]


def reading(dom, tops: Children | None = None) -> tuple[GuestOS, str | None]:
    """``read``, and ``kvm_hidden`` of ``dom``: Windows' signals read it, and the passes want it too
    (the driver reads both once, on the domain as given: ``hidden``). ``tops``: its children of at
    least ``READ``, where a reader of more found them already."""
    found = from_id(dom.os_id or "")
    if tops is None:
        tops = Children(dom.node, READ)  # the dozen paths below read from one walk over <domain>'s children
    args = _qemu_args(tops)
    if found is not None and found.windows:
        return found, _hidden(tops, args)
    strong, weak, hidden = _signals(tops, args)
    if found is not None:
        return replace(found, outranked=tuple(strong + weak)), hidden
    if tops.first("os", "kernel") is not None:
        kernel = GuestOS(Family.LINUX, ("direct kernel boot (<os><kernel>)",), Strength.STRONG, "Linux", True)
        return replace(kernel, outranked=tuple(strong + weak)), hidden
    if any("isa-applesmc" in value for value in args):
        smc = GuestOS(Family.OTHER, ("QEMU's isa-applesmc device (macOS's SMC)",), Strength.STRONG, "macOS", None)
        return replace(smc, outranked=tuple(strong + weak)), hidden
    if strong:
        return GuestOS(Family.WINDOWS, tuple(strong + weak), Strength.STRONG, "Windows", False), hidden
    if len(weak) >= WEAK:
        return GuestOS(Family.WINDOWS, tuple(weak), Strength.WEAK, "Windows", False), hidden
    return GuestOS(Family.UNKNOWN, tuple(weak)), hidden


def of(ctx, dom) -> GuestOS:
    """The guest OS a pass works with: the one the driver read on the domain as given
    (``ctx.guest``), else read from ``dom``."""
    return getattr(ctx, "guest", None) or read(dom)


def hidden(ctx, dom) -> str | None:
    """``kvm_hidden`` as a pass works with it: the driver's, read with ``ctx.guest`` on the domain as
    given (no pass changes how a domain hides KVM: <kvm>'s <hidden>, the hypervisor CPU feature, QEMU's
    arguments), else read from ``dom``."""
    if getattr(ctx, "guest", None) is not None:
        return ctx.kvm_hidden
    return kvm_hidden(dom)
