"""Hypothesis strategies for libvirt domains (hosts come from hosttrees.py)."""

from __future__ import annotations

from hypothesis import strategies as st

BUSES = ("ide", "sata", "scsi", "virtio", "usb")
NIC_TYPES = ("network", "bridge", "direct", "ethernet", "user", "vhostuser")
NIC_MODELS = ("e1000", "rtl8139", "virtio", "e1000e")


def _disk(i: int, bus: str, device: str, with_address: bool) -> str:
    prefix = {"virtio": "vd", "ide": "hd", "sata": "sd", "scsi": "sd", "usb": "sd"}[bus]
    dev = f"{prefix}{chr(ord('a') + i)}"
    addr = "<address type='drive' controller='0' bus='0' target='0' unit='%d'/>" % i if with_address and bus in ("ide", "sata", "scsi") else ""
    return (f"<disk type='file' device='{device}'><driver name='qemu' type='raw'/>"
            f"<source file='/var/lib/libvirt/images/d{i}.img'/><target dev='{dev}' bus='{bus}'/>{addr}</disk>")


def _nic(i: int, kind: str, model: str) -> str:
    mac = f"52:54:00:00:00:{i:02x}"
    source = {
        "network": "<source network='default'/>", "bridge": "<source bridge='br0'/>",
        "direct": "<source dev='eth0' mode='bridge'/>", "ethernet": "",
        "user": "", "vhostuser": "<source type='unix' path='/tmp/vhost%d.sock' mode='server'/>" % i,
    }[kind]
    model = "virtio" if kind == "vhostuser" else model
    return f"<interface type='{kind}'><mac address='{mac}'/>{source}<model type='{model}'/></interface>"


@st.composite
def domains(draw, max_vcpus: int = 8, virt_types=("kvm", "qemu"), windows: bool | None = None) -> str:
    """A domain XML of the kind users have: emulated or virtio devices, maybe pins, cells, tags."""
    vcpus = draw(st.integers(1, max_vcpus))
    mib = draw(st.sampled_from([256, 512, 1000, 1024, 2048, 4096, 3072]))
    virt = draw(st.sampled_from(virt_types))
    is_windows = draw(st.booleans()) if windows is None else windows
    disks = draw(st.lists(st.tuples(st.sampled_from(BUSES), st.sampled_from(["disk", "disk", "cdrom"]), st.booleans()), max_size=4))
    nics = draw(st.lists(st.tuples(st.sampled_from(NIC_TYPES), st.sampled_from(NIC_MODELS)), max_size=3))
    pins = draw(st.booleans())
    cells = draw(st.sampled_from([0, 0, 1, 2])) if vcpus >= 2 else 0
    tag = draw(st.sampled_from([None, "latency", "balanced", "throughput"]))
    balloon = draw(st.booleans())
    other_meta = draw(st.booleans())
    parts = [f"<domain type='{virt}'>", "<name>gen</name>", "<uuid>00000000-0000-4000-8000-000000000001</uuid>",
             "<title>generated</title>"]
    meta = ""
    if other_meta:
        meta += "<app:info xmlns:app='https://example.com/app'>keep me</app:info>"
    if tag:
        meta += f"<vmtune:tune xmlns:vmtune='https://vmtune.dev/xmlns/1' profile='{tag}'/>"
    if meta:
        parts.append(f"<metadata>{meta}</metadata>")
    parts.append(f"<memory unit='MiB'>{mib}</memory><currentMemory unit='MiB'>{mib}</currentMemory>")
    cpuset_attr = " cpuset='0-3,525'" if draw(st.booleans()) else ""
    parts.append(f"<vcpu placement='static'{cpuset_attr}>{vcpus}</vcpu>")
    if pins:
        parts.append("<cputune>" + "".join(f"<vcpupin vcpu='{v}' cpuset='{v % 3}'/>" for v in range(vcpus)) + "</cputune>")
    parts.append("<os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>")
    features = "<acpi/><apic/>" + ("<hyperv mode='custom'><relaxed state='on'/></hyperv>" if is_windows else "")
    parts.append(f"<features>{features}</features>")
    cpu = "<cpu mode='custom' match='exact'><model fallback='allow'>qemu64</model>"
    if cells:
        per = vcpus // cells
        kib = mib * 1024 // cells
        cpu += "<numa>" + "".join(
            f"<cell id='{c}' cpus='{c * per}-{(c + 1) * per - 1 if c < cells - 1 else vcpus - 1}' memory='{kib}' unit='KiB'/>"
            for c in range(cells)) + "</numa>"
    parts.append(cpu + "</cpu>")
    parts.append("<clock offset='utc'><timer name='rtc' tickpolicy='catchup'/></clock>")
    parts.append("<devices><emulator>/usr/bin/qemu-system-x86_64</emulator>")
    parts += [_disk(i, bus, device, addr) for i, (bus, device, addr) in enumerate(disks)]
    if any(bus == "scsi" for bus, _, _ in disks):
        parts.append("<controller type='scsi' index='0' model='lsilogic'/>")
    parts += [_nic(i, kind, model) for i, (kind, model) in enumerate(nics)]
    parts.append("<serial type='pty'><target port='0'/></serial><console type='pty'><target type='serial' port='0'/></console>")
    if balloon:
        parts.append("<memballoon model='virtio'/>")
    parts.append("</devices></domain>")
    return "".join(parts)
