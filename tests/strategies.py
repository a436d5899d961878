"""Hypothesis strategies for libvirt domains (hosts come from hosttrees.py)."""

from __future__ import annotations

import re

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


LIBOSINFO = "http://libosinfo.org/xmlns/libvirt/domain/1.0"
# libosinfo ids of each kind: Windows, Linux, a BSD, one that names no OS, a vendor vmtune does not know
OS_IDS = ("http://microsoft.com/win/10", "http://microsoft.com/win/2k22", "http://fedoraproject.org/fedora/40",
          "http://archlinux.org/archlinux/rolling", "http://freebsd.org/freebsd/14.0", "http://libosinfo.org/unknown",
          "http://example.org/someos/1")
# signs of Windows (vmtune/guestos.py): strong ones, then weak ones
STRONG_SIGNS = ("hyperv", "vendor_id", "localtime", "hypervclock")
WEAK_SIGNS = ("kvm_hidden", "hypervisor_off", "tpm", "board_smbios")


def weak_kinds(signs: set) -> set:
    """The weak signs of Windows among ``signs``, KVM hidden counted once however it is hidden (docs/config.md)."""
    return {"kvm_hidden" if s == "hypervisor_off" else s for s in signs & set(WEAK_SIGNS)}


@st.composite
def guest_evidence(draw) -> dict:
    """What a domain says of its guest OS, as fragments of its XML: maybe a libosinfo id, signs of
    Windows (strong and weak, any mix), maybe a direct kernel boot whose <cmdline> names a root disk."""
    os_id = draw(st.sampled_from((None,) * 4 + OS_IDS))
    signs = set(draw(st.lists(st.sampled_from(STRONG_SIGNS + WEAK_SIGNS), unique=True, max_size=4)))
    kernel = not draw(st.integers(0, 5))
    hyperv = "hyperv" in signs or "vendor_id" in signs
    features = ("<hyperv mode='custom'><relaxed state='on'/>"
                + ("<vendor_id state='on' value='whatever'/>" if "vendor_id" in signs else "") + "</hyperv>"
                if hyperv else "")
    features += "<kvm><hidden state='on'/></kvm>" if "kvm_hidden" in signs else ""
    root = draw(st.sampled_from(["sda", "hda", "vda", "sdb"]))
    # the family docs/config.md's rules give: an id decides (libosinfo.org/unknown names no OS), then a
    # direct kernel boot, then one strong sign of Windows or two weak ones
    if os_id and "libosinfo.org/unknown" not in os_id:
        family = ("windows" if "microsoft.com/win" in os_id else
                  "linux" if "fedora" in os_id or "archlinux" in os_id else "other")
    elif kernel:
        family = "linux"
    elif signs & set(STRONG_SIGNS) or len(weak_kinds(signs)) >= 2:
        family = "windows"
    else:
        family = "unknown"
    return {
        "family": family,
        "kvm_hidden": bool(signs & {"kvm_hidden", "hypervisor_off"}),
        "root": root if kernel else None,
        "metadata": f"<libosinfo:libosinfo xmlns:libosinfo='{LIBOSINFO}'><libosinfo:os id='{os_id}'/></libosinfo:libosinfo>"
                    if os_id else "",
        "os": f"<kernel>/boot/vmlinuz</kernel><cmdline>console=ttyS0 root=/dev/{root}1 ro</cmdline>" if kernel else "",
        "sysinfo": "<sysinfo type='smbios'><bios><entry name='vendor'>American Megatrends Inc.</entry></bios></sysinfo>"
                   if "board_smbios" in signs else "",
        "smbios": "<smbios mode='sysinfo'/>" if "board_smbios" in signs else "",
        "features": features,
        "cpu": "<feature policy='disable' name='hypervisor'/>" if "hypervisor_off" in signs else "",
        "offset": "localtime" if "localtime" in signs else "utc",
        "timers": "<timer name='hypervclock' present='yes'/>" if "hypervclock" in signs else "",
        "devices": "<tpm model='tpm-crb'><backend type='emulator' version='2.0'/></tpm>" if "tpm" in signs else "",
    }


@st.composite
def domains(draw, max_vcpus: int = 8, virt_types=("kvm", "qemu"), guest: dict | None = None) -> str:
    """A domain XML of the kind users have: emulated or virtio devices, maybe pins, cells, tags, and
    what it says of its guest OS (``guest``, else drawn from ``guest_evidence``)."""
    vcpus = draw(st.integers(1, max_vcpus))
    mib = draw(st.sampled_from([256, 512, 1000, 1024, 2048, 4096, 3072]))
    virt = draw(st.sampled_from(virt_types))
    guest = guest or draw(guest_evidence())
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
    meta += guest["metadata"]
    if meta:
        parts.append(f"<metadata>{meta}</metadata>")
    parts.append(f"<memory unit='MiB'>{mib}</memory><currentMemory unit='MiB'>{mib}</currentMemory>")
    cpuset_attr = " cpuset='0-3,525'" if draw(st.booleans()) else ""
    parts.append(f"<vcpu placement='static'{cpuset_attr}>{vcpus}</vcpu>")
    if pins:
        parts.append("<cputune>" + "".join(f"<vcpupin vcpu='{v}' cpuset='{v % 3}'/>" for v in range(vcpus)) + "</cputune>")
    parts.append(guest["sysinfo"])
    boot = guest["os"] or "<boot dev='hd'/>"
    parts.append(f"<os><type arch='x86_64' machine='pc'>hvm</type>{boot}{guest['smbios']}</os>")
    parts.append(f"<features><acpi/><apic/>{guest['features']}</features>")
    cpu = f"<cpu mode='custom' match='exact'><model fallback='allow'>qemu64</model>{guest['cpu']}"
    if cells:
        per = vcpus // cells
        kib = mib * 1024 // cells
        cpu += "<numa>" + "".join(
            f"<cell id='{c}' cpus='{c * per}-{(c + 1) * per - 1 if c < cells - 1 else vcpus - 1}' memory='{kib}' unit='KiB'/>"
            for c in range(cells)) + "</numa>"
    parts.append(cpu + "</cpu>")
    parts.append(f"<clock offset='{guest['offset']}'><timer name='rtc' tickpolicy='catchup'/>{guest['timers']}</clock>")
    parts.append("<devices><emulator>/usr/bin/qemu-system-x86_64</emulator>")
    parts += [_disk(i, bus, device, addr) for i, (bus, device, addr) in enumerate(disks)]
    if any(bus == "scsi" for bus, _, _ in disks):
        parts.append("<controller type='scsi' index='0' model='lsilogic'/>")
    parts += [_nic(i, kind, model) for i, (kind, model) in enumerate(nics)]
    parts.append("<serial type='pty'><target port='0'/></serial><console type='pty'><target type='serial' port='0'/></console>")
    parts.append(guest["devices"])
    if balloon:
        parts.append("<memballoon model='virtio'/>")
    parts.append("</devices></domain>")
    return "".join(parts)


PAGE_SIZES = (("2048", "KiB"), ("1", "GiB"), ("1048576", None), ("4", "KiB"), ("2", "M"), (None, None))
NUMA_MODES = (None, "strict", "preferred", "interleave", "restrictive")
HOST_NODESETS = ("0", "1", "0-1", "0,2", "1-3", "^1,0-2")
CELL_NODESETS = ("0", "1", "0-1", "2", "0,2")


def _mode(mode: str | None) -> str:
    return f" mode='{mode}'" if mode else ""


@st.composite
def _memory_devices(draw, cells: int) -> tuple[list[str], int]:
    """DIMM, virtio-mem and nvdimm devices, some with their own page size and host nodes."""
    devices, total = [], 0
    for _ in range(draw(st.integers(0, 3)) if cells else 0):
        model = draw(st.sampled_from(["dimm", "virtio-mem", "nvdimm"]))
        kib = draw(st.sampled_from([524288, 1048576, 1000000]))
        total += kib
        source = ""
        size = draw(st.sampled_from(PAGE_SIZES[:5] + (None,)))
        if size:
            source += f"<pagesize unit='{size[1] or 'KiB'}'>{size[0]}</pagesize>"
        if draw(st.booleans()):
            source += f"<nodemask>{draw(st.sampled_from(HOST_NODESETS))}</nodemask>"
        source += "<path>/var/lib/nv</path>" if model == "nvdimm" else ""
        node = f"<node>{draw(st.integers(0, cells - 1))}</node>" if draw(st.integers(0, 9)) else ""
        block = "<block unit='KiB'>2048</block>" if model == "virtio-mem" else ""
        devices.append(f"<memory model='{model}'>{f'<source>{source}</source>' if source else ''}"
                       f"<target><size unit='KiB'>{kib}</size>{node}{block}</target></memory>")
    return devices, total


@st.composite
def _numatune(draw, cells: int) -> str:
    """<numatune>: a <memory> in any mode (a nodeset or numad's placement) and memnodes in any mode."""
    inner = ""
    auto = False
    if draw(st.integers(0, 4)):
        mode = _mode(draw(st.sampled_from(NUMA_MODES)))
        auto = not draw(st.integers(0, 4))
        inner = f"<memory{mode} placement='auto'/>" if auto else \
            f"<memory{mode} nodeset='{draw(st.sampled_from(HOST_NODESETS))}'/>"
    for cell in range(0 if auto else cells):
        if draw(st.booleans()):
            inner += (f"<memnode cellid='{cell}'{_mode(draw(st.sampled_from(NUMA_MODES)))} "
                      f"nodeset='{draw(st.sampled_from(HOST_NODESETS))}'/>")
    return f"<numatune>{inner}</numatune>"


@st.composite
def memory_domains(draw) -> str:
    """A domain whose memory is the point: guest cells (ids given or implied) of odd sizes, hugepage
    <page>s of several sizes (the base page too) for some guest cells, numatune <memory> and
    <memnode>s in every mode, DIMM, virtio-mem and nvdimm devices with their own page size and host
    nodes."""
    cells = draw(st.integers(0, 3))
    explicit = draw(st.booleans())
    sizes = [draw(st.sampled_from([524288, 1048576, 1049600, 3145735, 1000000])) for _ in range(cells)]
    numa = "".join(f"<cell{f' id={chr(39)}{c}{chr(39)}' if explicit else ''} cpus='{c}' memory='{kib}' unit='KiB'/>"
                   for c, kib in enumerate(sizes))
    devices, dimm_kib = draw(_memory_devices(cells))
    memory = sum(sizes) + dimm_kib if cells else draw(st.sampled_from([1048576, 2097152, 1000001]))
    backing = ""
    if draw(st.integers(0, 3)):
        pages = ""
        for _ in range(draw(st.integers(0, 3))):
            size, unit = draw(st.sampled_from(PAGE_SIZES))
            attrs = f" size='{size}'" + (f" unit='{unit}'" if unit else "") if size else ""
            if cells and draw(st.booleans()):
                attrs += f" nodeset='{draw(st.sampled_from(CELL_NODESETS))}'"
            pages += f"<page{attrs}/>"
        backing = f"<memoryBacking><hugepages>{pages}</hugepages></memoryBacking>"
    numatune = draw(_numatune(cells)) if draw(st.integers(0, 4)) else ""
    tag = draw(st.sampled_from([None, "latency", "balanced"]))
    meta = f"<metadata><vmtune:tune xmlns:vmtune='https://vmtune.dev/xmlns/1' profile='{tag}'/></metadata>" if tag else ""
    return (f"<domain type='kvm'><name>mem</name><uuid>00000000-0000-4000-8000-000000000002</uuid>{meta}"
            f"<memory unit='KiB'>{memory}</memory>{backing}<vcpu placement='static'>{max(cells, 1)}</vcpu>"
            f"{numatune}<os><type arch='x86_64' machine='q35'>hvm</type></os>"
            f"<cpu mode='host-passthrough'>{f'<numa>{numa}</numa>' if cells else ''}</cpu>"
            f"<devices>{''.join(devices)}</devices></domain>")


@st.composite
def thread_domains(draw) -> str:
    """A domain whose threads are the point: a <vcpu cpuset> (absent, empty, a list, numad's),
    vCPU pins (some empty or without a cpuset), an emulator pin, iothreads listed or counted, and
    iothread pins whose ids are spelled oddly."""
    vcpus = draw(st.integers(1, 6))
    cpus = st.sampled_from(["0", "1", "2-3", "1,5", "", None])
    placement = draw(st.sampled_from(["static", "static", "auto"]))
    given = draw(st.sampled_from([None, "", "0-3", "2,6"]))
    vcpu = f"<vcpu placement='{placement}'{'' if given is None else f' cpuset={chr(39)}{given}{chr(39)}'}>{vcpus}</vcpu>"
    pins = ""
    for v in range(vcpus):
        if draw(st.booleans()):
            c = draw(cpus)
            pins += f"<vcpupin vcpu='{v}'{'' if c is None else f' cpuset={chr(39)}{c}{chr(39)}'}/>"
    emulator = draw(cpus)
    if emulator is not None and draw(st.booleans()):
        pins += f"<emulatorpin cpuset='{emulator}'/>"
    count = draw(st.integers(0, 3))
    ids = draw(st.lists(st.integers(1, 6), min_size=count, max_size=count, unique=True)) if count else []
    threads = f"<iothreads>{count}</iothreads>" if count else ""
    if ids and draw(st.booleans()):
        threads += "<iothreadids>" + "".join(f"<iothread id='{i}'/>" for i in ids) + "</iothreadids>"
    for _ in range(draw(st.integers(0, 3))):
        ident = draw(st.sampled_from(["1", "2", " 3", "03", "x", "4"]))
        pins += f"<iothreadpin iothread='{ident}' cpuset='{draw(cpus) or ''}'/>"
    return (f"<domain type='kvm'><name>threads</name><memory unit='MiB'>1024</memory>{vcpu}{threads}"
            f"{f'<cputune>{pins}</cputune>' if pins else ''}<os><type arch='x86_64'>hvm</type></os></domain>")


# -- domains laid out as people and tools write them (issue 32, item 4) ---------------------------------
STEPS = ("  ", "    ", "\t", " ", "   ")


@st.composite
def laid_out(draw, xml: str) -> str:
    """``xml`` (one line, single quotes, no quote in a value) as a file: ``virsh dumpxml``'s way
    (single quotes, two spaces), virt-manager's (double quotes), or odd (another indentation step,
    blank lines, runs of spaces between attributes or attributes on lines of their own, a space
    before ``/>``, trailing spaces, CRLF line ends, an XML declaration and a comment before the
    root), or left on one line."""
    from lxml import etree

    root = etree.fromstring(xml)
    quote = draw(st.sampled_from(["'", '"']))
    if draw(st.integers(0, 5)):
        etree.indent(root, space=draw(st.sampled_from(STEPS)))
    text = etree.tostring(root, encoding="unicode")
    if quote == "'":
        text = text.replace('"', "'")
    if draw(st.booleans()):  # odd
        rnd = draw(st.randoms(use_true_random=False))
        text = re.sub(r"(?<=['\"]) (?=[\w:]+=)", lambda m: " " * rnd.randint(1, 3), text)
        text = re.sub(r"(?<=['\"])/>", lambda m: " />" if rnd.random() < 0.5 else "/>", text)
        text = re.sub(r">\n", lambda m: ">" + " " * rnd.randint(0, 2) + "\n" * rnd.choice((1, 1, 1, 2)), text)
        if rnd.random() < 0.2:  # attributes on lines of their own
            text = re.sub(r"(?<=['\"]) +(?=[\w:]+=)", lambda m: "\n" + " " * rnd.randint(2, 8), text)
        if rnd.random() < 0.3:
            text = f"<?xml version={quote}1.0{quote} encoding={quote}UTF-8{quote}?>\n<!-- a file -->\n" + text
        if rnd.random() < 0.2:
            text = text.replace("\n", "\r\n")
    return text + draw(st.sampled_from(["\n", "", "\n\n"]))


# tuned elements as a hand leaves them empty: whitespace only (libxml2 keeps it where nothing else is)
BLANKS = ((r"<cpu [^>]*>.*?</cpu>", "<cpu mode='custom' match='exact'>\n    </cpu>"),
          (r"<clock [^>]*>.*?</clock>", "<clock offset='utc'>\n  </clock>"),
          (r"<features>.*?</features>", "<features>\n  </features>"),
          (r"<devices>.*?</devices>", "<devices>\n  </devices>"))


@st.composite
def blank_domains(draw) -> str:
    """A domain some of whose tuned elements hold whitespace only (``<cpu>\\n  </cpu>``), with a
    ``<cputune>`` or ``<memoryBacking>`` of whitespace only maybe."""
    xml = draw(domains())
    for found, blank in BLANKS:
        if draw(st.booleans()):
            xml = re.sub(found, blank, xml, count=1, flags=re.S)
    if draw(st.booleans()) and "<cputune>" not in xml:
        xml = xml.replace("</vcpu>", "</vcpu><cputune>\n  </cputune>", 1)
    if draw(st.booleans()):
        xml = xml.replace("<vcpu ", "<memoryBacking>\n</memoryBacking><vcpu ", 1)
    return xml
