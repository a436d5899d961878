"""The Host loader of libvirt's capabilities XML (``virsh capabilities``, ``getCapabilities()``).

It and the sysfs loader (sysfs.py) must give equal Hosts for the same machine
(tests/test_host.py checks it), so the conventions are shared: ``Cell.pages`` holds hugepage sizes
only (never the base page), ``Cpu.siblings`` always contains the CPU itself, unknown topology is
``None`` with ``siblings == {id}``, and offline CPUs appear only in ``offline`` (id -> node).

``load`` returns the fields of a Host as plain values (each cell and CPU a dict of its fields);
``Host.from_capabilities`` builds the Host of them, so this module does not import the topology.
"""

from __future__ import annotations

from .. import cpuset
from ..xml import units, xmlsafe, xmltext
from ..errors import InvalidInput
from .sysfs import l3_domains


def _int(value: str | None, what: str) -> int:
    """A whole number not below 0 (ids, counts, distances)."""
    try:
        number = int(str(value).strip())
    except ValueError:
        number = -1
    if number < 0:
        raise InvalidInput(f"capabilities XML: bad {what} {value!r}")
    return number


def _opt_int(elem, attr: str) -> int | None:
    """A topology id; any whole number (libvirt writes -1 where the kernel gives none)."""
    value = elem.get(attr)
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        raise InvalidInput(f"capabilities XML: bad cpu {attr} {value!r}") from None


def _page_kib(elem) -> int:
    return units.to_kib(elem.get("size"), elem.get("unit"))


def _is_bare(cpu) -> bool:
    """``<cpu id='N'/>``: libvirt's form for an offline CPU (or any CPU, in old libvirt)."""
    return not any(cpu.get(a) is not None for a in ("socket_id", "die_id", "core_id", "siblings"))


def _cell(ce, node: int, base_page: int | None, all_bare: bool, cpus: dict[int, dict],
          offline: dict[int, int]) -> dict:
    """One ``<cell>``'s fields; its online CPUs not seen yet are added to ``cpus``, its offline
    ones to ``offline``."""
    mem = ce.find("memory")
    memory_kib = units.to_kib(xmltext.text(mem), mem.get("unit")) if mem is not None else 0
    pages = {
        _page_kib(p): _int(xmltext.text(p), "pages count")
        for p in ce.findall("pages")
        if p.get("size") is not None and _page_kib(p) != base_page
    }
    distances = {
        _int(s.get("id"), "distance sibling id"): _int(s.get("value"), "distance value")
        for s in ce.findall("distances/sibling")
    }
    ids: list[int] = []
    for c in ce.findall("cpus/cpu"):
        cid = _int(c.get("id"), "cpu id")
        if _is_bare(c) and not all_bare:
            offline.setdefault(cid, node)  # an offline CPU
            continue
        if cid in cpus:
            continue  # a duplicate id (keep the first)
        cpus[cid] = {"id": cid, "node": node, "socket": _opt_int(c, "socket_id"), "die": _opt_int(c, "die_id"),
                     "core": _opt_int(c, "core_id"), "siblings": cpuset.parse(c.get("siblings")) | {cid}}
        ids.append(cid)
    return {"id": node, "cpus": tuple(sorted(ids)), "memory_kib": memory_kib, "pages": pages, "distances": distances}


def load(xml: str | bytes) -> dict:
    """The fields of the Host that capabilities XML describes; InvalidInput when it is not that."""
    root = xmlsafe.parse(xml, "capabilities XML")
    if root.tag != "capabilities":
        name = xmlsafe.source(xml)
        raise InvalidInput(f"not libvirt capabilities XML{f' ({name})' if name else ''}: the root element is "
                           f"<{root.tag}>")
    host = root.find("host")
    topology = host.find("topology") if host is not None else None
    if topology is None:
        raise InvalidInput("capabilities XML has no NUMA topology")
    cell_elems = topology.findall("cells/cell")
    if not cell_elems:
        raise InvalidInput("capabilities XML has no NUMA cells")

    # The smallest page size anywhere in <host> is the base page (4 KiB on x86, 64 KiB on
    # ppc64le); it is ordinary memory, not a hugepage pool.
    sizes = [_page_kib(p) for p in host.iter("pages") if p.get("size") is not None]
    base_page = min(sizes) if sizes else None
    # Bare <cpu id='N'/> means offline, unless every CPU is bare (libvirt before topology).
    all_bare = all(_is_bare(c) for c in topology.iter("cpu"))

    cells: dict[int, dict] = {}
    cpus: dict[int, dict] = {}
    offline: dict[int, int] = {}
    for ce in cell_elems:
        node = _int(ce.get("id"), "cell id")
        if node not in cells:
            cells[node] = _cell(ce, node, base_page, all_bare, cpus, offline)
    offline = {c: n for c, n in sorted(offline.items()) if c not in cpus}
    caches, l3 = _caches(host, frozenset(cpus), frozenset(offline))
    for cid, ident in l3.items():
        cpus[cid]["l3"] = ident
    return {"arch": (host.findtext("cpu/arch") or "").strip(), "cells": [cells[n] for n in sorted(cells)],
            "cpus": [cpus[c] for c in sorted(cpus)], "isolated": frozenset(), "offline": offline, "caches": caches,
            "vendor": (host.findtext("cpu/vendor") or "").strip() or None, "guest_arches": _native_guests(root)}


def _caches(host, online: frozenset[int], offline: frozenset[int]) -> tuple[list[dict], dict[int, int]]:
    """The L3 domains of ``<cache>``'s ``<bank level='3' id=... cpus=... size=... unit=...>``, by
    the rules the sysfs loader uses (``sysfs.l3_domains``); a bank naming a CPU the host does not
    have is InvalidInput."""
    found = []
    for bank in host.findall("cache/bank"):
        if (bank.get("level") or "").strip() != "3" or bank.get("id") is None:
            continue
        cpus = cpuset.parse(bank.get("cpus"))
        if cpus - online - offline:
            raise InvalidInput(f"capabilities XML: L3 cache bank {bank.get('id')!r} names CPU(s) "
                               f"{cpuset.format(cpus - online - offline)}, which this host does not have")
        if cpus & online:
            found.append((_int(bank.get("id"), "cache bank id"), cpus & online,
                          units.to_kib(bank.get("size"), bank.get("unit"), "B")))
    return l3_domains(found)


def _native_guests(root) -> frozenset[str] | None:
    """The guest arches the host runs with KVM (``<guest>`` entries with ``<domain type='kvm'>``:
    i686 on x86_64, say); None when the capabilities list no guest at all."""
    guests = root.findall("guest")
    if not guests:
        return None
    return frozenset(g.find("arch").get("name") for g in guests
                     if g.find("arch") is not None and g.find("arch").get("name")
                     and any(d.get("type") == "kvm" for d in g.findall("arch/domain")))
