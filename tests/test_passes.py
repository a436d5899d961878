"""Each pass alone (vmtune/passes/): golden before/after pairs, and no edits on an already tuned domain.

Inputs are files of examples/ or the shared corpus; the expected outputs live in
tests/golden/PASS/CASE.xml. Regenerate them after an intended change with
``VMTUNE_REGEN=1 scripts/test tests/test_passes.py`` and read the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import vmtune
from conftest import CORPUS, EXAMPLES
from vmtune.xml import markup, textkeep, xmlsafe
from vmtune import passes
from vmtune.driver import prepare, run_passes

GOLDEN = Path(__file__).parent / "golden"
HOST = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
PASSES = {p.__name__.rsplit(".", 1)[-1]: p for p in passes.ORDER}

# (pass, case, input, profile)
CASES = [
    ("tag", "no-metadata", EXAMPLES / "db-4vcpu.xml", "latency"),
    ("tag", "libosinfo-metadata-kept", CORPUS / "domains/vm-q35-vcpu-placement-auto.xml", "balanced"),
    ("cpu_mode", "host-model-to-passthrough", EXAMPLES / "db-4vcpu.xml", "latency"),
    ("cpu_mode", "tcg-maximum", EXAMPLES / "stock-latency.xml", "latency"),
    ("disks", "ide-scsi-virtio-mix", CORPUS / "domains/vm-q35-ide-scsi-virtio-disks-virtio-scsi.xml", "latency"),
    ("disks", "scsi-controllers-emptied", CORPUS / "domains/lv-disk-scsi-multiple-controllers.xml", "latency"),
    ("disks", "windows-boot-disk-kept", CORPUS / "domains/vm-win10-i440fx-ide-e1000-network.xml", "latency"),
    ("iothreads", "virtio-disk-gets-iothread", CORPUS / "domains/vm-i440fx-virtio-network-nic.xml", "latency"),
    ("iothreads", "queue-mapping-kept", CORPUS / "domains/lv-iothreads-disk-queues.xml", "latency"),
    ("pinning", "dedicated-4vcpu-smt", EXAMPLES / "db-4vcpu.xml", "latency"),
    ("pinning", "realtime-fifo", CORPUS / "domains/lv-cputune-vcpupin-emulatorpin-vcpusched.xml", "realtime"),
    ("pinning", "balanced-clamps-cpuset", CORPUS / "domains/lv-minimal-i440fx-ide-vcpu-cpuset.xml", "balanced"),
    ("numa", "two-host-nodes", CORPUS / "domains/lv-guest-numa-2cells-topology.xml", "latency"),
    ("numa", "nodeset-beyond-host", CORPUS / "domains/lv-numatune-memnode-3cells-nodeset0-7.xml", "balanced"),
    ("topology", "from-pins-two-sockets", CORPUS / "domains/lv-guest-numa-2cells-topology.xml", "latency"),
    ("memory", "hugepages-no-balloon", EXAMPLES / "stock-latency.xml", "latency"),
    ("memory", "throughput-keeps-balloon", EXAMPLES / "db-4vcpu.xml", "throughput"),
    ("nics", "vhostuser-untouched", CORPUS / "domains/lv-net-vhostuser-rtl8139.xml", "latency"),
    ("nics", "e1000-bridge-multiqueue", EXAMPLES / "db-4vcpu.xml", "latency"),
    ("clock", "hpet-off-kvmclock", EXAMPLES / "db-4vcpu.xml", "latency"),
    ("features", "kvm-hints", EXAMPLES / "db-4vcpu.xml", "latency"),
    ("features", "windows-hyperv", CORPUS / "domains/vm-win11-q35-hyperv-e1000e-bridge.xml", "latency"),
]


def only(pass_name: str, xml: bytes, profile: str) -> tuple[str, list]:
    """The domain with what one pass changed written in (every other byte as given)."""
    root, ctx = prepare(xml, HOST, profile)
    changes, _ = run_passes(root, ctx, (PASSES[pass_name],))
    return textkeep.write(markup.Source(xml.decode(), xmlsafe.parse(xml)), root), changes


def test_every_pass_has_a_golden_case():
    """No pass goes without a before/after example."""
    assert {c[0] for c in CASES} == set(PASSES)


@pytest.mark.parametrize("pass_name,case,source,profile", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_fix(pass_name, case, source, profile):
    """The pass alone turns the input into the golden output, and says why for each change."""
    out, changes = only(pass_name, source.read_bytes(), profile)
    golden = GOLDEN / pass_name / f"{case}.xml"
    if os.environ.get("VMTUNE_REGEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(out)
    assert out == golden.read_text()
    assert all(c.reason for c in changes)


@pytest.mark.parametrize("pass_name,case,source,profile", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_noop(pass_name, case, source, profile):
    """On a domain the whole rewrite already tuned, the pass wants nothing more."""
    tuned = vmtune.rewrite(source.read_bytes(), HOST, profile).xml
    out, changes = only(pass_name, tuned.encode(), profile)
    assert changes == [] and out == tuned
