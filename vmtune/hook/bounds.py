"""Every CPU and node list of a domain XML, checked against the host before the hook reads any.

The check (``cpuset.check``) expands nothing, so it costs O(text); after it no list of the domain
can make a set larger than its bound, whatever the XML says, and every later parse costs O(text +
CPUs). The bounds:

- host CPU lists, every ``cpuset`` attribute (``<vcpu>``, ``vcpupin``, ``emulatorpin``,
  ``iothreadpin``): below ``cpus``, the host's possible CPUs (hoststate.cpu_limit). The
  migrate/restore filter passes the largest host a kernel is built for instead: pins of a bigger
  source host are what it re-pins;
- node lists, every ``nodeset`` (numatune's memory and memnodes; hugepage pages, whose nodeset
  names guest cells): below the kernel's MAX_NUMNODES (``NODE_LIMIT``);
- guest vCPU lists (``cpus`` of guest NUMA cells, ``vcpus`` of vcpusched, cachetune and
  memorytune, ``iothreads`` of iothreadsched): below libvirt's ``validate.CPUMASK_LEN``;
- the ``<vcpu>`` count: at most ``validate.MAX_VCPUS``, the bound the rewriter and the claims take.

``<metadata>`` is not read: it belongs to other applications.
"""

from __future__ import annotations

from lxml import etree

from .. import cpuset
from ..errors import InvalidInput
from ..xml.validate import CPUMASK_LEN, MAX_VCPUS

NODE_LIMIT = cpuset.MAX_NUMA_NODES
GUEST_LISTS = ("cpus", "vcpus", "iothreads")


def check(root: etree._Element, cpus: int, last_cpu: str = "the host's last CPU") -> None:
    """InvalidInput (naming the element) for the first list of the domain ``root`` that names a CPU
    or node beyond its bound, or that is not a list; ``cpus``: the host's CPU limit, which
    ``last_cpu`` names in the message."""
    limits = {"cpuset": (cpus, last_cpu), "nodeset": (NODE_LIMIT, "the last NUMA node a kernel has"),
              **dict.fromkeys(GUEST_LISTS, (CPUMASK_LEN, "the last vCPU id libvirt reads"))}
    for top in root.iterchildren(tag=etree.Element):
        if etree.QName(top).localname == "metadata":
            continue
        for el in top.iter(tag=etree.Element):
            for attr, (limit, last) in limits.items():
                text = el.get(attr)
                if text is not None:
                    try:
                        cpuset.check(text, limit, last)
                    except InvalidInput as exc:
                        raise InvalidInput(f"<{etree.QName(el).localname} {attr}>: {exc}") from None
    count = (root.findtext("vcpu") or "").strip()
    if count.isdigit() and (len(count) > 9 or int(count) > MAX_VCPUS):
        raise InvalidInput(f"<vcpu> {count[:12]}: more than {MAX_VCPUS} vCPUs")
