"""The libvirt elements vmtune writes or keys, each declared once: its tag, its parent, the
attributes that tell it from siblings of its tag (its key), its children in libvirt's order, and
whether a pass may write it (a unit of the record).

The tables the other modules used to keep apart are made from ``ELEMENTS``:

- ``ORDER``: libvirt's order of an element's children (virDomainDefFormat and friends), where a new
  child is inserted (vmtune/xml/edits.py);
- ``KEYS`` and ``SPECIAL``: what names a node among its siblings (vmtune/xml/xmlkeys.py), the key
  the record finds its units and their children by;
- ``TUNED`` and ``TUNED_DEVICES``: the children of ``<domain>`` and of ``<devices>`` that a pass may
  write, the units the record keeps (vmtune/record/unitdiff.py).

A new element a pass writes is one line here. Keys are by local name: ``<memory>`` is keyed by its
``model`` as a device, and the same key (empty) names ``<domain>``'s own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Element:
    """One libvirt element, declared once."""

    tag: str
    parent: str
    key: tuple[str, ...] = ()  # the attributes that tell it from siblings of its tag
    children: tuple[str, ...] = ()  # its children in libvirt's order (unknown tags keep their place)
    unit: bool = False  # a pass may write it: a unit of the record (a child of <domain> or <devices>)
    key_of: str = ""  # keyed by more than attributes: "source" (a disk's), "mac" (an interface's)


ELEMENTS = (
    Element("domain", "", children=(
        "name", "uuid", "genid", "title", "description", "metadata", "maxMemory", "memory",
        "currentMemory", "blkiotune", "memtune", "memoryBacking", "vcpu", "vcpus", "iothreads",
        "iothreadids", "defaultiothread", "cputune", "numatune", "resource", "sysinfo",
        "bootloader", "bootloader_args", "os", "idmap", "features", "cpu", "clock", "on_poweroff",
        "on_reboot", "on_crash", "on_lockfailure", "pm", "perf", "devices", "seclabel", "keywrap",
        "launchSecurity",
    )),
    Element("os", "domain", children=(
        "type", "firmware", "loader", "nvram", "varstore", "boot", "bootmenu", "smbios", "bios", "initarg",
        "kernel", "initrd", "cmdline", "dtb", "acpi", "shim",
    )),
    # the units of <domain>
    Element("memory", "domain", unit=True),
    Element("currentMemory", "domain", unit=True),
    Element("memtune", "domain", unit=True, children=("hard_limit", "soft_limit", "swap_hard_limit", "min_guarantee")),
    Element("memoryBacking", "domain", unit=True, children=(
        "hugepages", "nosharepages", "locked", "source", "access", "allocation", "discard")),
    Element("vcpu", "domain", unit=True),
    Element("iothreads", "domain", unit=True),
    Element("iothreadids", "domain", unit=True),
    Element("cputune", "domain", unit=True, children=(
        "shares", "period", "quota", "global_period", "global_quota", "emulator_period",
        "emulator_quota", "iothread_period", "iothread_quota", "vcpupin", "emulatorpin",
        "iothreadpin", "vcpusched", "iothreadsched", "emulatorsched", "cachetune", "memorytune",
    )),
    Element("numatune", "domain", unit=True, children=("memory", "memnode")),
    Element("features", "domain", unit=True, children=(
        "acpi", "apic", "pae", "hap", "viridian", "privnet", "hyperv", "kvm", "xen", "pvspinlock",
        "pmu", "vmport", "gic", "smm", "ioapic", "hpt", "htm", "nested-hv", "msrs", "ccf-assist",
        "cfpc", "sbbc", "ibs", "tcg", "async-teardown", "ras", "ps2",
    )),
    Element("cpu", "domain", unit=True, children=("model", "vendor", "topology", "cache", "maxphysaddr", "feature",
                                                  "numa")),
    Element("clock", "domain", unit=True),
    # the units of <devices>
    Element("disk", "devices", unit=True, key_of="source", children=(
        "driver", "source", "backingStore", "backenddomain", "geometry", "blockio", "target",
        "iotune", "boot", "readonly", "shareable", "transient", "serial", "wwn", "vendor",
        "product", "encryption", "auth", "alias", "address",
    )),
    Element("interface", "devices", unit=True, key_of="mac", children=(
        "mac", "source", "virtualport", "ip", "route", "script", "downscript", "backenddomain",
        "target", "guest", "model", "driver", "backend", "tune", "teaming", "rom", "link",
        "mtu", "coalesce", "bandwidth", "vlan", "port", "boot", "alias", "address", "acpi",
    )),
    Element("controller", "devices", unit=True, key=("type", "index")),
    Element("memballoon", "devices", unit=True),
    Element("memory", "devices", unit=True, key=("model",), children=(  # a memory device, not <domain><memory>
        "uuid", "source", "target", "address", "alias", "acpi")),
    Element("hostdev", "devices", key=("type",)),
    Element("source", "hostdev"),  # what a device passes or uses on the host (read, never written)
    Element("address", "source"),
    # below the units: the children siblings of one tag tell apart
    Element("vcpupin", "cputune", key=("vcpu",)),
    Element("iothreadpin", "cputune", key=("iothread",)),
    Element("vcpusched", "cputune", key=("vcpus",)),
    Element("iothreadsched", "cputune", key=("iothreads",)),
    Element("memnode", "numatune", key=("cellid",)),
    Element("iothread", "iothreadids", key=("id",)),
    Element("page", "hugepages", key=("size", "nodeset")),
    Element("feature", "cpu", key=("name",)),
    Element("cell", "numa", key=("id",)),
    Element("sibling", "distances", key=("id",)),
    Element("latency", "interconnects", key=("initiator", "target", "type", "cache")),
    Element("bandwidth", "interconnects", key=("initiator", "target", "type", "cache")),
    Element("timer", "clock", key=("name",)),
    Element("hyperv", "features", children=(
        "relaxed", "vapic", "spinlocks", "vpindex", "runtime", "synic", "stimer", "reset",
        "vendor_id", "frequencies", "reenlightenment", "tlbflush", "ipi", "evmcs", "avic",
        "emsr_bitmap", "xmm_input",
    )),
    Element("kvm", "features", children=("hidden", "hint-dedicated", "poll-control", "pv-ipi", "dirty-ring")),
)


def _order() -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for el in ELEMENTS:
        if el.children:
            assert el.tag not in out, f"two child orders for <{el.tag}>"
            out[el.tag] = el.children
    return out


def _keys() -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for el in ELEMENTS:
        if el.key:
            assert out.get(el.tag, el.key) == el.key, f"two keys for <{el.tag}>"
            out[el.tag] = el.key
    return out


def declares(parent: str, tag: str) -> bool:
    """Whether ``<tag>`` is declared here as a child of ``<parent>``: an element of its own, or a
    name in its parent's order (what a model view may name: vmtune/xml/model.py's ``Child``)."""
    return any(el.tag == tag and el.parent == parent for el in ELEMENTS) or tag in ORDER.get(parent, ())


ORDER: dict[str, tuple[str, ...]] = _order()  # parent -> its children in libvirt's order
KEYS: dict[str, tuple[str, ...]] = _keys()  # local name -> the attributes that name one of several siblings
SPECIAL = frozenset(KEYS) | {el.tag for el in ELEMENTS if el.key_of}  # tags whose ident is more than the tag
TUNED = frozenset(el.tag for el in ELEMENTS if el.unit and el.parent == "domain")
TUNED_DEVICES = frozenset(el.tag for el in ELEMENTS if el.unit and el.parent == "devices")
