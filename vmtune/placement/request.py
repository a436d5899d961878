"""The placement's request for one domain, built once from the domain, its profile, the
configuration and what the user set on purpose (vmtune/placement/intent.py), and the placement it
gets (search.py): floating, on one node's shared CPUs, or dedicated. The driver asks ``place``; the
warnings of the devices the domain uses and of a hybrid host described by capabilities come with it.
"""

from __future__ import annotations

from dataclasses import replace

from .. import cpuset
from ..host import Host
from ..profiles import DeviceLocality, Pinning
from ..xml.model import Domain, MemoryDevice
from . import intent as intent_mod
from . import locality
from . import search as placement_mod


def emulator_with_vcpus(virt_type: str, profile, wants: intent_mod.Intent = intent_mod.NONE) -> bool:
    """Whether a dedicated domain's emulator and iothreads run on its vCPUs' CPUs.

    Under TCG (``type='qemu'``) QEMU's main loop, the emulator thread, runs the guest's emulated
    timers: on the reserved CPUs, beside the host's work, it makes the guest's timer tail 4-12
    times longer than beside the vCPUs (BENCHMARKS.md, part 1, ``tuned-emu-vcpu``). Under KVM the
    timers are in the kernel, and the emulator stays off the dedicated CPUs. A FIFO vCPU (the
    realtime profile, or the domain's own real-time <vcpusched>) would starve a thread beside it, so
    it keeps the emulator away too."""
    return virt_type == "qemu" and profile.cpu_scheduler == "none" and not wants.rt_vcpus


def place(profile, host: Host, ledger, reserved: frozenset[int], dom: Domain, config,
          wants: intent_mod.Intent = intent_mod.NONE) -> placement_mod.Placement:
    """Where ``dom`` goes on ``host`` under ``profile``, beside ``ledger``'s domains."""
    spread = config.placement != "pack"
    used = locality.uses(dom, backing=host.devices_known)  # a backing device only counts where its node is known
    shared = tuple(locality.shared_with(used, ledger.claims))
    if profile.cpu_pinning == Pinning.FLOAT:
        req = placement_mod.Request(vcpus=dom.vcpus, memory_kib=dom.boot_memory_kib, spread=spread)
        placed = placement_mod.shared(host, ledger, req, one_node=False)
        return replace(placed, warnings=placed.warnings + shared) if shared else placed
    found = locality.locate(host, dom, used)
    near = dict(anchors=found.anchors, locality=profile.device_locality, kinds=profile.cpu_kinds)
    unknown = locality.unknown_warning(found.unknown, host.devices_known) \
        if profile.device_locality != DeviceLocality.IGNORE else None
    req = build(profile, dom, config, spread, near, wants)
    placed = placement_mod.dedicated(host, reserved, ledger, req) if profile.dedicated else \
        placement_mod.shared(host, ledger, req, one_node=True)
    more = ((unknown,) if unknown else ()) + shared + _kinds_unknown(profile, host)
    return replace(placed, warnings=placed.warnings + more) if more else placed


def _kinds_unknown(profile, host: Host) -> tuple[str, ...]:
    """A warning when the host looks hybrid but does not say which cores are which (capabilities)."""
    sockets = host.uneven_smt() if profile.dedicated else ()
    if not sockets:
        return ()
    return (f"socket {cpuset.format(sockets)} has cores of uneven thread counts, the sign of a hybrid CPU whose "
            "efficiency cores this host description does not name: dedicated vCPUs may land on efficiency cores; "
            "rewrite on the host itself (sysfs says which cores are which) or set efficiency_cpus in "
            "/etc/vmtune/vmtune.toml",)


def _active(dom: Domain) -> int | None:
    """The vCPUs enabled at boot when fewer than ``<vcpu>``: ``current``, else those of ``<vcpus>``
    not ``enabled='no'``."""
    current = dom.vcpu_element
    count = None
    if current is not None and (current.get("current") or "").strip().isdecimal():
        count = int(current.get("current"))
    elif dom.find("vcpus") is not None:
        count = dom.vcpus - sum(1 for el in dom.iter("vcpus/vcpu") if el.get("enabled") == "no")
    return count if count is not None and 0 < count < dom.vcpus else None


def build(profile, dom: Domain, config, spread: bool, near: dict, wants: intent_mod.Intent) -> placement_mod.Request:
    """The request of a domain whose profile pins its vCPUs (dedicated CPUs, or a node's shared
    ones), built once: its size, the profile's rules, the devices it uses (``near``) and the bounds
    the user set (``wants``)."""
    if profile.dedicated:
        rt = wants.rt_threads if profile.cpu_scheduler != "none" or wants.realtime else 0
        return placement_mod.Request(
            vcpus=dom.vcpus,
            memory_kib=dom.boot_memory_kib,
            smt=config.smt.get(profile.name, profile.cpu_smt),
            hugepages=profile.memory_hugepages,
            spread=spread,
            cell_when_single=dom.find("cpu/numa/cell") is not None or dom.has_max_memory,  # ``dom.cells``, not made
            emulator_with_vcpus=emulator_with_vcpus(dom.type, profile, wants),
            devices=tuple((dev.target_node or 0, dev.size_kib, dev.granule_kib) for dev in dom.memory_devices
                          if dev.model in MemoryDevice.RAM_MODELS and dev.pagesize_kib is None and dev.size_kib),
            within=wants.within, prefer=wants.prefer, hand_pins=wants.pins, within_what=wants.what,
            hand_helpers=wants.helper_cpus, hand_said="the hand's" if wants.hand else "the domain's",
            pages_kept=wants.pages and profile.memory_hugepages, page_kib=wants.page_kib,
            topped_up=profile.host_tuning and config.hook.hugepages == "top-up",
            rt_threads=rt, helpers=1 + max(dom.iothreads, len(dom.listed_iothread_ids())) - rt,
            active=_active(dom),
            **near,
        )
    return placement_mod.Request(vcpus=dom.vcpus, memory_kib=dom.boot_memory_kib, spread=spread,
                                 within=wants.within, within_what=wants.what, **near)
