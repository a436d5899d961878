"""The guest topology's L3 domains (vmtune/passes/topology.py) in a real TCG guest, which sees them:
one die per host L3 domain.

vmtune writes ``<topology dies=...>`` when a domain's vCPUs span several host L3 domains with
equal shares (passes/topology.py). QEMU gives each x86 die its own L3 in CPUID (leaf 4, and leaf
0x8000001D with topoext), and a Linux guest on an Intel CPU, or on an AMD one of family 17h or
later, reads its L3 sharing from there. Under TCG, vmtune writes ``<cpu mode='maximum'>``, whose
CPU QEMU 7.2 gives an AMD vendor and an older family: Linux then puts the L3 at the NUMA node
level, and the dies cannot show (measured: dies=2 gives 0-3 on all four vCPUs, with EPYC and
qemu64 models too). So the guest here runs vmtune's topology, as written, on an Intel model
(Skylake-Server), as a KVM guest's host-passthrough CPU on an Intel host would be. The guest
prints each online vCPU's ``cache/index3/shared_cpu_list`` as ``l3=a;b;...``.

Needs root (the ``libvirtd`` fixture); two guest boots.
"""

from __future__ import annotations

from lxml import etree

from fixtures import guest
import vmtune
from fixtures.hosttrees import caps_xml
from fixtures.libvirt_env import boot, minimal_domain
from vmtune.host import Cell, Cpu, Host
from vmtune.host.topology import L3

INTEL = "<cpu mode='custom' match='exact' check='none'><model fallback='forbid'>Skylake-Server</model></cpu>"


def _host(l3_groups: list[list[int]]) -> Host:
    """One node, no SMT, CPU 0 reserved; the L3 domains ``l3_groups``."""
    ids = sorted(c for g in l3_groups for c in g)
    of = {c: i for i, g in enumerate(l3_groups) for c in g}
    cpus = {c: Cpu(c, 0, 0, 0, c, frozenset({c}), of[c]) for c in ids}
    caches = tuple(L3(i, frozenset(g), 16384) for i, g in enumerate(l3_groups))
    return Host.from_capabilities(caps_xml(Host("x86_64", (Cell(0, tuple(ids), 4 << 20),), cpus, caches=caches)))


def _guest_l3(host: Host) -> tuple[etree._Element, dict[str, str]]:
    """vmtune's topology for a 4-vCPU latency domain on ``host``, booted on the Intel model; the
    rewritten <topology> and what the guest printed."""
    xml = minimal_domain(vcpus=4, memory_mib=256).replace("<features>", "<metadata><vmtune:tune xmlns:vmtune="
                                                            "'https://vmtune.dev/xmlns/1' profile='latency'/>"
                                                            "</metadata><features>")
    tuned = etree.fromstring(vmtune.rewrite(xml, host).xml.encode())
    topology = tuned.find("cpu/topology")
    # this machine has neither the host's CPUs nor its pages: boot the topology alone
    root = etree.fromstring(xml.encode())
    cpu = etree.fromstring(INTEL)
    cpu.append(topology)
    root.insert(list(root).index(root.find("features")) + 1, cpu)
    facts = guest.parse_console(boot(etree.tostring(root, encoding="unicode")))
    assert facts.get("nproc") == "4" and facts.get("l3_level") == "3", facts
    return topology, facts


def test_guest_sees_one_l3_per_host_l3_domain(libvirtd):
    """A domain over two host L3 domains, two vCPUs on each: dies='2', and the guest's vCPUs 0,1
    share one L3 and 2,3 another."""
    topology, facts = _guest_l3(_host([[0, 1, 2], [3, 4]]))
    assert topology.get("dies") == "2", etree.tostring(topology)
    assert facts["l3"].split(";") == ["0-1", "0-1", "2-3", "2-3"], facts


def test_one_host_l3_domain_is_one_guest_l3(libvirtd):
    """The control: the domain fits in one host L3 domain: dies='1', all four vCPUs share one L3."""
    topology, facts = _guest_l3(_host([[0, 1, 2, 3, 4]]))
    assert topology.get("dies") == "1", etree.tostring(topology)
    assert facts["l3"].split(";") == ["0-3"] * 4, facts
