"""The ``migrate begin`` / ``restore begin`` filter: re-pin a latency domain for this host.

libvirt reads the hook's stdout as the new domain XML for these two ops (empty stdout: keep it).
``filter_xml`` returns the XML re-pinned for this host, ``None`` when the domain is already right
here (or not latency-tagged), and raises DoesNotFit when it cannot be placed here.

Only ABI-neutral parts change: the ``cpuset`` of ``cputune``'s vcpupin/emulatorpin/iothreadpin,
``numatune``'s memory and memnode ``nodeset``, and hugepage ``page`` nodesets. The placement is
the rewriter's (``driver.tune`` with the placement passes); those elements are spliced into the
incoming text (vmtune/xml/splice.py says why), so every other byte (devices, CPU model and topology,
memory sizes, guest NUMA cells) is what came in. A placement that would need different guest NUMA cells is
refused rather than applied.

The host comes from sysfs (``Roots.sysfs``: its L3 domains, core kinds and devices too, so the
re-pin follows the rewriter's rules), the other domains' dedicated CPUs from the leases: the hook
never calls libvirt. Under ``device_locality = "required"`` a passthrough device away from every
node of the domain's vCPUs makes the pins wrong here too.
"""

from __future__ import annotations

import copy
import logging

from lxml import etree

from .. import cpuset, profiles
from ..placement import holdings, locality
from ..xml import splice
from ..placement.claims import Claim, Ledger
from ..errors import DoesNotFit
from ..host import Host
from ..hoststate.document import Lease
from ..xml.model import Domain

PINS = ("vcpupin", "emulatorpin", "iothreadpin")
log = logging.getLogger("vmtune.hook")  # the hook's logger (hook/__init__.py sets its handlers)


def ledger_from_leases(leases: dict[str, Lease], skip_uuid: str | None, skip_name: str | None) -> Ledger:
    """A Ledger of the other leased domains' dedicated CPUs (leases know no memory)."""
    kept = []
    skip = skip_uuid or (f"name:{skip_name}" if skip_name else None)  # a domain with a UUID: by UUID only
    for key, lease in sorted(leases.items()):
        if key == skip:
            continue
        kept.append(Claim(lease.name, key, lease.profile, lease.cpus if lease.dedicated else frozenset(), lease.cpus))
    dedicated = frozenset().union(*(c.dedicated for c in kept)) if kept else frozenset()
    return Ledger(tuple(kept), dedicated)


def _problems(dom: Domain, host: Host, ledger: Ledger, required: bool = False) -> list[str]:
    """Why the domain's current pins are not right on ``host`` (empty: keep them); ``required``:
    a passthrough device away from every node of its vCPUs is one (``device_locality``)."""
    from ..placement.search import taken_cores

    out = []
    online = frozenset(host.cpus)
    if len(dom.vcpupins()) < dom.vcpus:
        out.append("not every vCPU is pinned")
    vcpu_cpus = holdings.pinned(dom)
    if not vcpu_cpus <= online:
        out.append(f"CPUs {cpuset.format(vcpu_cpus - online)} are not online here")
    taken = taken_cores(host, ledger.dedicated)
    if vcpu_cpus & taken:
        out.append(f"CPUs {cpuset.format(vcpu_cpus & taken)} are held by another latency domain")
    for el in [*dom.iter("cputune/emulatorpin"), *dom.iter("cputune/iothreadpin")]:
        cpus = cpuset.parse(el.get("cpuset") or "")
        if not cpus <= online or cpus & ledger.dedicated:
            out.append(f"{el.tag} {el.get('cpuset')} is not usable here")
    nodes = frozenset(host.node_ids)
    for el in [*dom.iter("numatune/memory"), *dom.iter("numatune/memnode")]:
        if el.get("nodeset") is not None and not cpuset.parse(el.get("nodeset")) <= nodes:
            out.append(f"numatune nodeset {el.get('nodeset')} names nodes this host lacks")
    bound = dom.numa_nodeset if dom.find("numatune/memory") is not None else None
    if bound and vcpu_cpus <= online:
        far = {host.cpus[c].node for c in vcpu_cpus} - set(bound)
        if far:
            out.append(f"vCPUs run on node(s) {cpuset.format(far)} outside the memory nodeset")
    if required and vcpu_cpus and vcpu_cpus <= online:
        nodes = {host.cpus[c].node for c in vcpu_cpus}
        out += [f"{device.what} is on node {device.node}, away from its vCPUs (node {cpuset.format(nodes)})"
                for device in locality.away(locality.locate(host, dom).anchors, nodes)]
    return out


def _cells(dom: Domain) -> list[tuple[int, frozenset[int]]]:
    return sorted((c.id, frozenset(c.cpus)) for c in dom.cells)


def _place(xml: bytes, host: Host, ledger: Ledger, cfg) -> etree._Element:
    """The domain as the rewriter's placement passes leave it on ``host`` (a new tree)."""
    from .. import driver
    from ..passes import PLACEMENT

    return driver.tune(xml, host, ledger=ledger, passes=PLACEMENT, config=cfg).root


def _new_cputune(old: etree._Element | None, placed: etree._Element | None) -> etree._Element:
    new = etree.Element("cputune") if old is None else copy.deepcopy(old)
    fresh = [copy.deepcopy(el) for el in (placed if placed is not None else []) if el.tag in PINS]
    first = next((i for i, el in enumerate(new) if el.tag in PINS), len(new))
    for el in [el for el in new if el.tag in PINS]:
        new.remove(el)
    for i, el in enumerate(fresh):
        new.insert(first + i, el)
    return new


def _new_numatune(old: etree._Element | None, placed: etree._Element | None) -> etree._Element | None:
    if placed is None:
        return None
    if old is None:
        return copy.deepcopy(placed)
    new = copy.deepcopy(old)
    mem, pmem = new.find("memory"), placed.find("memory")
    if mem is not None and pmem is not None and pmem.get("nodeset") is not None:
        mem.set("nodeset", pmem.get("nodeset"))
    elif mem is None and pmem is not None:
        new.insert(0, copy.deepcopy(pmem))
    pnodes = {el.get("cellid"): el.get("nodeset") for el in placed.findall("memnode")}
    for el in new.findall("memnode"):
        if pnodes.get(el.get("cellid")) is not None:
            el.set("nodeset", pnodes[el.get("cellid")])
    return new


def _sig(el: etree._Element | None, attr: str) -> list:
    if el is None:
        return []
    return [(c.tag, c.get("vcpu"), c.get("iothread"), c.get("cellid"), c.get("size"),
             frozenset(cpuset.parse(c.get(attr))) if c.get(attr) is not None else None)
            for c in el.iter(etree.Element) if c is not el]  # elements only: a PI has pseudo-attributes


def filter_xml(xml: bytes, host: Host, leases: dict[str, Lease], cfg, limit: int = 0) -> str | None:
    """The domain XML re-pinned for ``host``, or None when it is already right here. Its CPU lists
    are checked first against the largest host (``limit``, this host's CPU limit, if larger):
    pins of a bigger source host are what the filter re-pins."""
    from ..xml import xmlsafe
    from ..errors import InvalidInput
    from . import bounds

    root = xmlsafe.parse(xml, "domain XML")
    dom = Domain(root)
    profile = profiles.host_tuning(dom.tagged_profile, cfg.profiles_dir)
    if profile is None:
        return None
    required = profile.device_locality == profiles.DeviceLocality.REQUIRED
    try:
        bounds.check(root, max(limit, cpuset.MAX_HOST_CPUS), "the last CPU of any host")
    except InvalidInput as exc:
        raise DoesNotFit(str(exc)) from None
    ledger = ledger_from_leases(leases, dom.uuid, dom.name)
    if not _problems(dom, host, ledger, required):
        return None
    placed = Domain(_place(xml, host, ledger, cfg))  # raises DoesNotFit
    if _cells(placed) != _cells(dom):
        raise DoesNotFit("placing it here would change its guest NUMA cells "
                         f"({len(dom.cells)} -> {len(placed.cells)}); not an ABI-neutral change")
    still = _problems(placed, host, ledger, required)
    if still:
        raise DoesNotFit("; ".join(still))
    text = xml.decode("utf-8")
    old_ct, new_ct = dom.find("cputune"), _new_cputune(dom.find("cputune"), placed.find("cputune"))
    if _sig(old_ct, "cpuset") != _sig(new_ct, "cpuset"):
        text = splice.put(text, "cputune", new_ct)
    old_nt = dom.find("numatune")
    new_nt = _new_numatune(old_nt, placed.find("numatune"))
    if new_nt is not None and _sig(old_nt, "nodeset") != _sig(new_nt, "nodeset"):
        text = splice.put(text, "numatune", new_nt)
    old_hp, new_hp = dom.find("memoryBacking/hugepages"), placed.find("memoryBacking/hugepages")
    if old_hp is not None and new_hp is not None:
        hp = copy.deepcopy(old_hp)
        fresh = {p.get("size"): p.get("nodeset") for p in new_hp.findall("page")}
        for page in hp.findall("page"):
            if fresh.get(page.get("size")) is not None:
                page.set("nodeset", fresh[page.get("size")])
        if _sig(old_hp, "nodeset") != _sig(hp, "nodeset"):
            text = splice.put(text, "memoryBacking/hugepages", hp)
    return None if text == xml.decode("utf-8") else text


def run(name: str, data: bytes, cfg, roots, out) -> int:
    """The hook op: print the re-pinned XML to ``out`` (or nothing); 1 when it cannot be placed."""
    from ..host.sysfs import cpu_limit
    from ..hoststate.statedir import Damaged, StateDir

    try:
        host = Host.from_sysfs(roots.sysfs)
        limit = cpu_limit(roots.sysfs)
        try:
            current = StateDir(roots.state, sysfs=roots.sysfs, limit=limit).read().leases
        except Damaged as exc:  # placed without the other leases; the prepare refuses anyway
            log.warning("%s: %s; re-pinned without the other latency domains' CPUs", name, exc)
            current = {}
        new = filter_xml(data, host, current, cfg, limit)
    except DoesNotFit as exc:
        log.error("%s: cannot be placed on this host: %s", name, " ".join(str(exc).split()))
        return 1
    if new is not None:
        log.info("%s: re-pinned for this host", name)
        out.write(new)
        out.flush()
    return 0
