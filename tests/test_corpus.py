"""The rewriter (vmtune.rewrite, vmtune/driver.py) over every real domain of the shared corpus,
through every profile, on every x86 corpus host."""

from __future__ import annotations

import pytest
from lxml import etree

import vmtune
from conftest import CORPUS, EXAMPLES
from fixtures.corpus import NEWER_THAN_SCHEMA, REFUSED
from fixtures.libvirt_schema import schema_available, validate_domain
from vmtune.errors import DoesNotFit, Unsupported

DOMAINS = sorted((CORPUS / "domains").glob("*.xml"))
PROFILES = ("balanced", "latency", "realtime", "throughput")
HOSTS = {p.name: vmtune.Host.from_capabilities(p.read_bytes())
         for p in sorted((CORPUS / "hosts").glob("*.xml")) + [EXAMPLES / "hosts" / "2node-smt.xml"]}
X86_HOSTS = {name: h for name, h in HOSTS.items() if h.arch == "x86_64"}
def test_corpus_is_there():
    """The corpus beside the checkout has its 30 domains and 10 hosts."""
    assert len(DOMAINS) == 30 and len(HOSTS) == 11


@pytest.mark.parametrize("path", [p for p in DOMAINS if p.name in REFUSED], ids=lambda p: p.stem)
def test_foreign_domains_are_refused(path):
    """Non-x86 and non-kvm/qemu domains are refused in one line, on every host and profile."""
    for host in X86_HOSTS.values():
        for profile in PROFILES:
            with pytest.raises(Unsupported) as err:
                vmtune.rewrite(path.read_bytes(), host, profile)
            assert "\n" not in str(err.value)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("path", [p for p in DOMAINS if p.name not in REFUSED], ids=lambda p: p.stem)
def test_corpus_domain(path, profile):
    """The domain is tuned (or honestly does not fit), idempotently, and libvirt's schema
    accepts the output whenever it accepted the input."""
    xml = path.read_bytes()
    check_schema = schema_available() and path.name not in NEWER_THAN_SCHEMA
    fitted = 0
    for name, host in X86_HOSTS.items():
        try:
            result = vmtune.rewrite(xml, host, profile)
        except DoesNotFit as exc:
            assert profile in ("latency", "realtime"), f"{name}: {exc}"
            continue
        fitted += 1
        assert vmtune.rewrite(result.xml, host, profile).xml == result.xml, name
        out = etree.fromstring(result.xml.encode())
        assert out.find("metadata/{https://vmtune.dev/xmlns/1}tune").get("profile") == profile
        assert all(c.reason and "\n" not in c.reason for c in result.changes)
        if check_schema:
            assert validate_domain(result.xml) == [], f"{name}: {validate_domain(result.xml)[:3]}"
    # Shared-CPU profiles fit anywhere; dedicated ones may honestly need a bigger host.
    assert fitted or profile in ("latency", "realtime"), "fits on no corpus host at all"


@pytest.mark.parametrize("path", [p for p in DOMAINS if p.name not in REFUSED and p.name not in NEWER_THAN_SCHEMA], ids=lambda p: p.stem)
def test_corpus_inputs_valid_where_expected(path):
    """The inputs this test treats as schema-valid really are (so the output check means something)."""
    if not schema_available():
        pytest.skip("libvirt's domain.rng is not installed")
    assert validate_domain(path.read_bytes()) == []


TAG_RNG = etree.RelaxNG(etree.parse(str(EXAMPLES.parent / "schemas" / "vmtune-tag.rng")))


@pytest.mark.parametrize("profile", PROFILES)
def test_tag_matches_its_schema(profile):
    """The tag a rewrite leaves validates against schemas/vmtune-tag.rng; a bad one does not."""
    result = vmtune.rewrite((EXAMPLES / "db-4vcpu.xml").read_bytes(), HOSTS["2node-smt.xml"], profile)
    tag = etree.fromstring(result.xml.encode()).find("metadata/{https://vmtune.dev/xmlns/1}tune")
    assert TAG_RNG.validate(etree.ElementTree(tag)), TAG_RNG.error_log
    bad = etree.fromstring('<t:tune xmlns:t="https://vmtune.dev/xmlns/1" profile="../x"/>')
    assert not TAG_RNG.validate(etree.ElementTree(bad))
