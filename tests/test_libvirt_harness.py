"""The integration harness itself (tests/fixtures/libvirt_env.py, guest.py): libvirtd comes up, a test
guest boots, the schema validates."""

from __future__ import annotations

import pytest

from fixtures import guest
from conftest import CORPUS
from fixtures.libvirt_env import VirshError, define, minimal_domain, started, virsh
from fixtures.libvirt_schema import schema_available, validate_domain

# Corpus domains that the installed domain.rng (libvirt 9.0, Debian 12) rejects; the comment is the
# element whose removal makes the file valid (found by bisection), usually syntax of a newer libvirt.
CORPUS_INVALID = {
    "lv-guest-numa-2cells-topology.xml",  # <topology clusters='1'>
    "lv-hyperv-enlightenments-i440fx.xml",  # <hyperv><emsr_bitmap/>
    "lv-iothreads-disk-queues.xml",  # <disk><driver><iothreads> (per-queue iothread mapping)
    "lv-q35-vcpu-static-numatune-auto-iothreadpin.xml",  # <watchdog model='itco'>
    "vm-q35-many-devices-kitchen-sink.xml",  # <cpu><numa><interconnects>, container <os> init* items, ...
    "vm-q35-vcpu-placement-auto.xml",  # <sysinfo type='fwcfg'><entry file=...>
    "vm-xen-nics-bridge-direct-ethernet-network-user.xml",  # <uuid> apart from <name>; vnc display/xauth
}
CORPUS_FILES = sorted((CORPUS / "domains").glob("*.xml"))


@pytest.fixture(scope="session")
def schema(request):
    if not schema_available():
        request.getfixturevalue("libvirtd")  # installs libvirt, which ships the schemas
    assert schema_available(), "no /usr/share/libvirt/schemas/domain.rng"


def test_minimal_guest_boots(libvirtd):
    """A guest boots to its facts and is gone afterwards. The daemon may be shared with other test
    sessions, so only this test's own domain is looked for."""
    with started(minimal_domain()) as g:
        console = g.wait()
    assert guest.MARKER in console, console[-2000:]
    facts = guest.parse_console(console)
    assert facts["nproc"] == "1"
    assert facts["cpu_model"]
    assert g.name not in virsh("list", "--all", "--name").split()


def test_started_guest_can_be_inspected_while_running(libvirtd):
    with started(minimal_domain(extra="<cputune><vcpupin vcpu='0' cpuset='0'/></cputune>"), hold=10) as g:
        g.wait(guest.MARKER)
        assert virsh("domstate", g.name).strip() == "running"
        assert virsh("vcpupin", g.name).split() == ["0", "0"]
    assert g.name not in virsh("list", "--all", "--name").split()


def test_define_error_carries_libvirts_message(libvirtd):
    bad = minimal_domain("<memoryBacking><hugepages><page size='2048' unit='KiB' nodeset='1'/></hugepages></memoryBacking>")
    with pytest.raises(VirshError, match="hugepages: node 1 not found"):
        define(bad)


def test_schema_accepts_minimal_domain(schema):
    assert validate_domain(minimal_domain()) == []


def test_schema_rejects_invalid_domain(schema):
    errors = validate_domain(minimal_domain().replace("<vcpu>1</vcpu>", "<vcpu>abc</vcpu>"))
    assert errors and any("vcpu" in e for e in errors), errors
    assert validate_domain("<domain type='qemu'><name>x</name>") != []  # not well-formed


def test_corpus_invalid_list_names_corpus_files():
    assert CORPUS_INVALID <= {p.name for p in CORPUS_FILES}


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.stem)
def test_corpus_domain_against_schema(schema, path):
    errors = validate_domain(path.read_bytes())
    if path.name in CORPUS_INVALID:
        assert errors, f"{path.name} now validates: drop it from CORPUS_INVALID"
    else:
        assert errors == [], errors[:3]
