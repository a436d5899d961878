"""The values vmtune reads, checked as libvirt checks them: what libvirt refuses, vmtune refuses in
one line naming the element and the value, before it writes anything.

The rules are libvirt 9.0's, as ``virsh -c test:///default define`` applies them (the tests hold
vmtune to that, value by value), from its parser:

- numbers: ``virStrToLong_ui`` and friends (src/util/virstring.c): C's strtoul in base 10, leading
  white space and a ``+`` taken, nothing after the digits, at most 2**32 - 1 (2**64 - 1 for sizes);
- sizes: ``virParseScaledValue`` and ``virScaleInteger`` (src/util/virutil.c): a whole number, a
  unit of b, bytes, k, KiB, KB, M, ... E, EiB, EB in any case (KiB when there is none);
- CPU and node lists: ``virBitmapParseSeparator`` (src/util/virbitmap.c): ``N``, ``N-M`` (M not
  below N) and ``^N``, comma separated, white space around each, one trailing comma, every id
  below 16384 (``VIR_DOMAIN_CPUMASK_LEN``); a list that names no id at all is refused where libvirt
  refuses it ("Invalid value of 'cpuset'");
- ``<vcpu>`` and its ``current`` (``virDomainVcpuParse``, src/conf/domain_conf.c), the pins
  (``virDomainVcpuPinDefParseXML``, ``virDomainEmulatorPinDefParseXML``,
  ``virDomainIOThreadPinDefParseXML``), ``<iothreads>`` and ``<iothreadids>``
  (``virDomainDefParseIOThreads``), ``<memory>`` and ``<currentMemory>``, the hugepage ``<page>``s
  (``virDomainHugepagesParseXML``, ``virDomainDefPostParseMemory``), the guest NUMA cells and
  ``<numatune>`` (``virDomainNumaDefParseXML``, ``virDomainNumatuneParseXML``, src/conf/numa_conf.c).

Where libvirt accepts something odd, so does vmtune: a ``<vcpupin>`` for a vCPU the domain does
not have, ``current='0'``, a cell without ``cpus``, vCPUs in no cell, cells whose memory does not
add up to ``<memory>``, more ``<iothreadids>`` than ``<iothreads>``.
"""

from __future__ import annotations

import re

from typing import TYPE_CHECKING

from ..errors import InvalidInput
from .units import SCALE
from .xmltext import Children, text as _text

if TYPE_CHECKING:  # the hook's bounds import the limits below without the model
    from .model import Domain

# The limits, each named once (the hook's bounds, the claims, the audit and the rewriter take them here)
CPUMASK_LEN = 16384  # libvirt's VIR_DOMAIN_CPUMASK_LEN: every id of a CPU or node list is below it
# vmtune's bound on <vcpu>: libvirt asks QEMU per machine type, and QEMU's largest (x86 q35) takes
# 4096; a domain with more vCPUs cannot start anywhere vmtune runs
MAX_VCPUS = 4096
MAX_IOTHREADS = 4096  # and on <iothreads>: every reader iterates them
UINT_MAX = 2**32 - 1
ULLONG_MAX = 2**64 - 1
_UNSIGNED = re.compile(r"[ \t\n\v\f\r]*\+?([0-9]+)")  # strtoul: leading space, a sign; digits to the end


def _fail(where: str, why: str) -> InvalidInput:
    return InvalidInput(f"{where}: {why}")


def unsigned(text: str | None, where: str, top: int = UINT_MAX) -> int:
    """A number as libvirt's ``virStrToLong_ui`` reads it."""
    m = _UNSIGNED.fullmatch(text or "")
    value = int(m.group(1)) if m is not None else -1
    if value < 0 or value > top:
        raise _fail(where, f"{_show(text)} is not a whole number from 0 to {top} (libvirt refuses it)")
    return value


def scaled_kib(text: str | None, unit: str | None, where: str) -> int:
    """A size as ``virParseScaledValue`` reads it, in KiB (rounded up, as libvirt does)."""
    value = unsigned(text, where, ULLONG_MAX)
    scale = SCALE.get((unit if unit is not None else "KiB").lower())
    if scale is None:
        raise _fail(where, f"unknown unit {_show(unit)} (libvirt: b, bytes, KiB, KB, MiB, MB, ... EiB, EB)")
    if value * scale > ULLONG_MAX:
        raise _fail(where, f"{value} {unit} is more than libvirt can hold (2**64 bytes)")
    return -(-value * scale // 1024)


# A list of numbers and ranges, nothing else (no white space, no ^N, no trailing comma): most lists
_PLAIN_LIST = re.compile(r"[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*")


def bitmap(text: str | None, where: str, size: int = CPUMASK_LEN) -> frozenset[int]:
    """A CPU or node list as ``virBitmapParseSeparator`` reads it (see the module docstring)."""
    if text and _PLAIN_LIST.fullmatch(text):
        return _plain_bitmap(text, where, size)
    out: set[int] = set()
    s = text or ""
    i, n = 0, len(s)
    bad = _not_a_list(text, where, size)

    def spaces(j: int) -> int:
        while j < n and s[j] in " \t\n\v\f\r":
            j += 1
        return j

    def number(j: int) -> tuple[int, int]:
        k = j
        while k < n and s[k].isdigit() and s[k].isascii():
            k += 1
        if k == j:
            raise bad
        value = int(s[j:k])
        if value >= size:
            raise bad
        return value, k

    if not s:
        raise bad
    while i < n:
        i = spaces(i)
        neg = i < n and s[i] == "^"
        i += neg
        start, i = number(i)
        i = spaces(i)
        if i < n and s[i] == "-":
            if neg:
                raise bad
            last, i = number(spaces(i + 1))
            if last < start:
                raise bad
            out.update(range(start, last + 1))
            i = spaces(i)
        elif neg:
            out.discard(start)
        else:
            out.add(start)
        if i < n and s[i] == ",":
            i = spaces(i + 1)
        elif i < n:
            raise bad
    return frozenset(out)


def _plain_bitmap(text: str, where: str, size: int) -> frozenset[int]:
    """``bitmap`` of a list of numbers and ranges alone (``_PLAIN_LIST``), read by splitting it: the
    parser's result, or its refusal (an id at or past ``size``, a range that runs down), without
    its walk char by char (tests/test_validate.py: a plain list reads as it does with white space)."""
    out: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        start = int(first)
        end = int(last) if last else start
        if start >= size or end >= size or end < start:
            raise _not_a_list(text, where, size)
        if last:
            out.update(range(start, end + 1))
        else:
            out.add(start)
    return frozenset(out)


def _not_a_list(text: str | None, where: str, size: int) -> InvalidInput:
    return _fail(where, f"{_show(text)} is not a CPU list libvirt reads (N, N-M, ^N, comma separated, "
                        f"ids below {size})")


def _show(text: str | None) -> str:
    if text is None:
        return "nothing"
    return repr(text if len(text) <= 60 else text[:60] + "...")


def _some(cpus: frozenset[int], where: str, text: str | None, what: str = "cpuset") -> frozenset[int]:
    if not cpus:
        raise _fail(where, f"{_show(text)} names no {'CPU' if what == 'cpuset' else 'node'} "
                           f"(libvirt: Invalid value of '{what}')")
    return cpus


# -- the checks ---------------------------------------------------------------------------------------
def check_counts(dom: Domain) -> None:
    """InvalidInput (one line) for a ``<vcpu>`` count outside 1..MAX_VCPUS or an ``<iothreads>``
    count outside 0..MAX_IOTHREADS: checked before anything iterates a domain's threads (the
    rewriter, a claim, the audit, the map)."""
    vcpus = dom.vcpus
    if vcpus < 1 or vcpus > MAX_VCPUS:
        raise InvalidInput(f"bad vCPU count {dom.vcpu_text!r}")
    count = dom.iothreads
    if count is not None and not 0 <= count <= MAX_IOTHREADS:
        raise InvalidInput(f"bad iothread count {count} (vmtune takes 0 to {MAX_IOTHREADS})")


# the children of <domain> the checks read
READ = ("vcpu", "iothreads", "iothreadids", "cputune", "cpu", "memory", "currentMemory", "memoryBacking", "numatune")


def check(dom: Domain, tops: Children | None = None) -> None:
    """InvalidInput (one line) for the first value of ``dom`` that libvirt refuses, of those vmtune
    reads (``tops``: its children of at least ``READ``, where a reader of more found them already)."""
    if tops is None:
        tops = Children(dom.node, READ)
    vcpus = _vcpu(tops)
    ids = _iothreads(dom, tops)
    _cputune(tops, ids)
    cells = _cells(tops, vcpus)
    _memory(tops, cells)
    _pages(tops, cells)
    _numatune(tops, cells)


def _vcpu(tops: Children) -> int:
    el = tops.first("vcpu")
    if el is None:
        return 1
    count = unsigned(_text(el), "<vcpu>")
    if count == 0:
        raise _fail("<vcpu>", "0 vCPUs (libvirt refuses a domain without one)")
    if el.get("current") is not None:
        current = unsigned(el.get("current"), "<vcpu current>")
        if current > count:
            raise _fail(f"<vcpu current='{el.get('current')}'>", f"more than the {count} vCPUs "
                        "(libvirt: maximum vCPU count must not be less than current vCPU count)")
    if el.get("cpuset") is not None:
        _some(bitmap(el.get("cpuset"), "<vcpu cpuset>"), "<vcpu cpuset>", el.get("cpuset"))
    return count


def _iothreads(dom: Domain, tops: Children) -> set[int]:
    check_counts(dom)  # vmtune's bounds, before a set of that many ids is made
    el = tops.first("iothreads")
    count = unsigned(_text(el), "<iothreads>") if el is not None and _text(el) else 0  # empty: as if absent
    listed: list[int] = []
    for thread in tops.each("iothreadids", "iothread"):
        where = f"<iothread id={_show(thread.get('id'))}>"
        if thread.get("id") is None:
            raise _fail(where, "an iothread without an id (libvirt refuses it)")
        ident = unsigned(thread.get("id"), where)
        if ident == 0:
            raise _fail(where, "iothread ids start at 1 (libvirt: Zero is not permitted)")
        if ident in listed:
            raise _fail(where, f"iothread id {ident} is listed twice (libvirt refuses a duplicate)")
        listed.append(ident)
    if listed:
        return set(listed) | _filled(listed, count)
    return set(range(1, count + 1))


def _filled(listed: list[int], count: int) -> set[int]:
    """The ids libvirt adds to ``listed`` up to ``count`` (the lowest unused ones)."""
    out, n = set(), 1
    while len(listed) + len(out) < count:
        if n not in listed:
            out.add(n)
        n += 1
    return out


def _pin(el, tag: str) -> frozenset[int]:
    where = f"<{tag} cpuset={_show(el.get('cpuset'))}>" if el.get("cpuset") is not None else f"<{tag}>"
    if el.get("cpuset") is None:
        raise _fail(where, f"no cpuset (libvirt: missing cpuset for {tag})")
    return _some(bitmap(el.get("cpuset"), where), where, el.get("cpuset"))


def _cputune(tops: Children, iothreads: set[int]) -> None:
    if "cputune" not in tops:  # most domains: nothing to check
        return
    seen: set[int] = set()
    for el in tops.each("cputune", "vcpupin"):
        where = f"<vcpupin vcpu={_show(el.get('vcpu'))}>"
        vcpu = unsigned(el.get("vcpu"), where) if el.get("vcpu") is not None else None
        if vcpu is None:
            raise _fail(where, "no vcpu (libvirt refuses it)")
        if vcpu in seen:
            raise _fail(where, f"a second pin for vCPU {vcpu} (libvirt: duplicate vcpupin)")
        seen.add(vcpu)
        _pin(el, "vcpupin")
    emulator = list(tops.each("cputune", "emulatorpin"))
    if len(emulator) > 1:
        raise _fail("<emulatorpin>", "more than one (libvirt: only one emulatorpin is supported)")
    for el in emulator:
        _pin(el, "emulatorpin")
    pinned: set[int] = set()
    for el in tops.each("cputune", "iothreadpin"):
        where = f"<iothreadpin iothread={_show(el.get('iothread'))}>"
        ident = unsigned(el.get("iothread"), where) if el.get("iothread") is not None else None
        if ident is None or ident not in iothreads:
            raise _fail(where, "no such iothread in <iothreads> or <iothreadids> (libvirt: Cannot find 'iothread')")
        if ident in pinned:
            raise _fail(where, f"a second pin for iothread {ident} (libvirt: duplicate iothreadpin)")
        pinned.add(ident)
        _pin(el, "iothreadpin")


def _cells(tops: Children, vcpus: int) -> dict[int, int]:
    """The guest NUMA cells: id -> KiB."""
    out: dict[int, int] = {}
    used: dict[int, int] = {}
    cells = list(tops.each("cpu", "numa/cell"))
    for index, el in enumerate(cells):
        ident = unsigned(el.get("id"), f"<cell id={_show(el.get('id'))}>") if el.get("id") is not None else index
        where = f"<cell id='{ident}'>"
        if ident in out:
            raise _fail(where, f"cell id {ident} twice (libvirt: Duplicate NUMA cell info)")
        if el.get("memory") is None:
            raise _fail(where, "no memory (libvirt: missing element or attribute './@memory')")
        out[ident] = scaled_kib(el.get("memory"), el.get("unit"), f"{where} memory")
        if el.get("cpus") is not None:
            cpus = bitmap(el.get("cpus"), f"{where} cpus")
            if cpus and max(cpus) >= vcpus:
                raise _fail(f"{where} cpus={_show(el.get('cpus'))}", f"names vCPU {max(cpus)} of a domain of "
                            f"{vcpus} (libvirt: CPU IDs in <numa> exceed the <vcpu> count)")
            for cpu in cpus:
                if cpu in used:
                    raise _fail(f"{where} cpus={_show(el.get('cpus'))}", f"vCPU {cpu} is in cell {used[cpu]} "
                                "too (libvirt: NUMA cells have overlapping vCPU ids)")
                used[cpu] = ident
    if out and sorted(out) != list(range(len(out))):
        raise _fail("<numa>", f"cell ids {sorted(out)} are not 0 to {len(out) - 1} (libvirt: non-contiguous "
                    "ranges or ranges not starting from 0 are not allowed)")
    return out


def _memory(tops: Children, cells: dict[int, int]) -> None:
    given = False  # a <memory> with a value
    for tag in ("memory", "currentMemory"):
        el = tops.first(tag)
        value = _text(el) if el is not None else ""
        if value == "":
            continue  # libvirt's XPath readers take an empty value as none
        kib = scaled_kib(value, el.get("unit"), f"<{tag}>")
        if tag == "memory":
            given = True
            if kib == 0 and not any(cells.values()):
                raise _fail("<memory>", "0, and no guest NUMA cell gives the memory either (libvirt: Memory size "
                            "must be specified via <memory> or in the <numa> configuration)")
    if not given and not any(cells.values()):
        raise _fail("<domain>", "no <memory> (libvirt: Memory size must be specified via <memory> or in the "
                    "<numa> configuration)")


def _pages(tops: Children, cells: dict[int, int]) -> None:
    master = None
    taken: dict[int, int] = {}  # guest cell -> page size KiB
    for el in tops.each("memoryBacking", "hugepages/page"):
        where = f"<page size={_show(el.get('size'))}>"
        if el.get("size") is None:
            raise _fail("<page>", "no size (libvirt: missing element or attribute './@size')")
        size = scaled_kib(el.get("size"), el.get("unit"), where)
        if size == 0:
            raise _fail(where, "a hugepage size of 0 (libvirt: hugepage size can't be zero)")
        if el.get("nodeset") is None:
            if master is not None:
                raise _fail(where, f"a second page without a nodeset, beside {master} KiB (libvirt: two master "
                            "hugepages detected)")
            master = size
            continue
        nodes = _some(bitmap(el.get("nodeset"), f"{where} nodeset"), f"{where} nodeset", el.get("nodeset"), "nodeset")
        if cells:
            for node in nodes:
                if node not in cells:
                    raise _fail(f"{where} nodeset={_show(el.get('nodeset'))}", f"guest cell {node} does not "
                                "exist (libvirt: hugepages: node not found)")
        for node in nodes:
            if node in taken:
                raise _fail(f"{where} nodeset={_show(el.get('nodeset'))}", f"guest cell {node} is in the nodeset "
                            f"of the {taken[node]} KiB pages too (libvirt: nodesets of hugepages intersect)")
            taken[node] = size


def _numatune(tops: Children, cells: dict[int, int]) -> None:
    if "numatune" not in tops:  # most domains: nothing to check
        return
    el = tops.first("numatune", "memory")
    if el is not None and el.get("nodeset") is not None:
        where = f"<numatune><memory nodeset={_show(el.get('nodeset'))}>"
        _some(bitmap(el.get("nodeset"), where), where, el.get("nodeset"), "nodeset")
    for el in tops.each("numatune", "memnode"):
        where = f"<memnode cellid={_show(el.get('cellid'))}>"
        cell = unsigned(el.get("cellid"), where) if el.get("cellid") is not None else None
        if cell is None or cell not in cells:
            raise _fail(where, "no such guest NUMA cell (libvirt: Argument 'cellid' in memnode element must "
                        "correspond to existing guest's NUMA cell)")
        if el.get("nodeset") is None:
            raise _fail(where, "no nodeset (libvirt: Missing required nodeset attribute in memnode element)")
        _some(bitmap(el.get("nodeset"), f"{where} nodeset"), f"{where} nodeset", el.get("nodeset"), "nodeset")
