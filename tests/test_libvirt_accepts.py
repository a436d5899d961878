"""Every domain libvirt itself accepts: no traceback, no invalid output, no wrong refusal (issue 11).

libvirt's parser is the judge: ``virsh -c test:///default define`` runs libvirt's own XML parsing
and validation in-process, with no daemon, and keeps nothing. When it accepts an input, it must
accept vmtune's output too. The classes of the issue each have a minimal case here.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

import vmtune
from conftest import CORPUS, EXAMPLES
from vmtune.errors import DoesNotFit, Unsupported

HOST = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
PROFILES = ("balanced", "latency", "realtime", "throughput")
DOMAINS = sorted((CORPUS / "domains").glob("*.xml"))
VIRSH = shutil.which("virsh")
needs_virsh = pytest.mark.skipif(VIRSH is None, reason="virsh is not installed")


def libvirt_accepts(xml: str | bytes) -> str | None:
    """None when libvirt's parser accepts the domain; else its error."""
    with tempfile.NamedTemporaryFile("wb", suffix=".xml") as fh:
        fh.write(xml.encode() if isinstance(xml, str) else xml)
        fh.flush()
        done = subprocess.run([VIRSH, "-q", "-c", "test:///default", "define", fh.name],
                              capture_output=True, text=True, timeout=60, check=False)
    return None if done.returncode == 0 else (done.stderr.strip() or done.stdout.strip())


def rewrite_or_none(xml, profile, host=HOST):
    try:
        return vmtune.rewrite(xml, host, profile)
    except (DoesNotFit, Unsupported):
        return None


# -- the corpus through libvirt's parser ---------------------------------------------------------

@needs_virsh
@pytest.mark.parametrize("path", DOMAINS, ids=lambda p: p.stem)
def test_valid_in_valid_out(path):
    """A corpus domain libvirt accepts gives, in every profile, an output libvirt accepts."""
    xml = path.read_bytes()
    if libvirt_accepts(xml) is not None:
        pytest.skip(f"libvirt's parser refuses the input itself: {libvirt_accepts(xml)}")
    for profile in PROFILES:
        result = rewrite_or_none(xml, profile)
        if result is not None:
            assert libvirt_accepts(result.xml) is None, (profile, libvirt_accepts(result.xml))


# -- the classes of issue 11, each a minimal case ------------------------------------------------

def domain(body: str = "", vcpu: str = "<vcpu>4</vcpu>", memory: str = "<memory unit='MiB'>1024</memory>",
           arch: str = "x86_64") -> str:
    return (f"<domain type='kvm'><name>t</name>{memory}{vcpu}{body}"
            f"<os><type arch='{arch}' machine='pc'>hvm</type></os></domain>")


CELLS = ("<cpu><numa><cell id='0' cpus='0-1' memory='524288'/><cell id='1' cpus='2-3' memory='524288'{attrs}/>"
         "</numa></cpu>")
CASES = {
    "comment in cputune": domain("<cputune><!-- pinned by hand --><vcpupin vcpu='0' cpuset='1'/></cputune>"),
    "comment in memoryBacking": domain("<memoryBacking><!-- keep --><nosharepages/></memoryBacking>"),
    "comment in numatune": domain("<numatune><!-- numad --><memory mode='strict' nodeset='0'/></numatune>"),
    "processing instruction in cputune": domain("<cputune><?tool x?><vcpupin vcpu='0' cpuset='1'/></cputune>"),
    "no vcpu element": domain(vcpu=""),
    "cells without ids": domain("<cpu><numa><cell cpus='0-1' memory='524288'/><cell cpus='2-3' memory='524288'/>"
                                "</numa></cpu>"),
    "dimm in a merged cell": domain("<maxMemory slots='4' unit='KiB'>4194304</maxMemory>" + CELLS.format(attrs="")
                                    + "<devices><memory model='dimm'><target><size unit='KiB'>524288</size>"
                                    "<node>1</node></target></memory></devices>"),
    "memAccess shared in a merged cell": domain(CELLS.format(attrs=" memAccess='shared'")),
    "placement auto, preferred memory, too big for a node": domain(
        "<numatune><memory mode='preferred'/></numatune>", vcpu="<vcpu placement='auto'>4</vcpu>",
        memory="<memory unit='GiB'>100</memory>"),
    "i686 guest": domain(arch="i686"),
    "memory not a whole number of hugepages": domain(memory="<memory unit='KiB'>219100</memory>"),
}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("case", CASES)
def test_issue_cases_rewrite_idempotently(case, profile):
    """No traceback, no refusal (but 100 GiB for dedicated cores on 64 GiB nodes), and a second
    rewrite changes nothing."""
    result = rewrite_or_none(CASES[case], profile)
    if result is None:
        assert "too big" in case and profile in ("latency", "realtime")
        return
    assert vmtune.rewrite(result.xml, HOST, profile).xml == result.xml


@needs_virsh
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("case", CASES)
def test_issue_cases_stay_acceptable_to_libvirt(case, profile):
    assert libvirt_accepts(CASES[case]) is None  # the input is fine: libvirt says so
    result = rewrite_or_none(CASES[case], profile)
    assert result is None or libvirt_accepts(result.xml) is None


def out(case: str, profile: str = "latency") -> etree._Element:
    return etree.fromstring(vmtune.rewrite(CASES[case], HOST, profile).xml.encode())


def test_comments_and_pis_are_kept():
    assert "pinned by hand" in etree.tostring(out("comment in cputune")).decode()
    assert "<?tool x?>" in etree.tostring(out("processing instruction in cputune")).decode()
    assert "keep" in etree.tostring(out("comment in memoryBacking")).decode()


def test_a_domain_without_vcpu_gets_libvirts_default_of_one():
    for profile in PROFILES:
        vcpu = out("no vcpu element", profile).find("vcpu")
        assert vcpu is None or vcpu.text == "1", profile


def test_cells_without_ids_are_numbered_in_order():
    memnodes = out("cells without ids", "throughput").findall("numatune/memnode")
    assert [m.get("cellid") for m in memnodes] == ["0", "1"]


def test_a_merged_cell_takes_its_devices_and_attributes_along():
    dom = out("dimm in a merged cell")
    cells = [c.get("id") for c in dom.findall("cpu/numa/cell")]
    assert dom.findtext("devices/memory/target/node") in cells
    assert out("memAccess shared in a merged cell").find("cpu/numa/cell").get("memAccess") == "shared"


def test_auto_memory_placement_stays_with_numad():
    """The vCPUs lose numad placement (a cpuset); the memory keeps it explicitly."""
    dom = out("placement auto, preferred memory, too big for a node", "throughput")
    memory = dom.find("numatune/memory")
    assert memory.get("nodeset") is not None or memory.get("placement") == "auto"


def test_i686_guests_run_on_x86_64_hosts_by_the_hosts_own_word():
    """An x86_64 host's capabilities list i686 for kvm; a host that lists no such guest refuses it."""
    assert out("i686 guest").find("os/type").get("arch") == "i686"
    caps = (EXAMPLES / "hosts" / "2node-smt.xml").read_text()
    guest = ("<guest><os_type>hvm</os_type><arch name='{a}'><domain type='kvm'/></arch></guest>")
    only64 = vmtune.Host.from_capabilities(caps.replace("</capabilities>", guest.format(a="x86_64") + "</capabilities>"))
    with pytest.raises(Unsupported, match="does not run natively"):
        vmtune.rewrite(CASES["i686 guest"], only64, "latency")
    both = vmtune.Host.from_capabilities(caps.replace(
        "</capabilities>", guest.format(a="x86_64") + guest.format(a="i686") + "</capabilities>"))
    assert vmtune.rewrite(CASES["i686 guest"], both, "latency").xml


def test_memory_rounded_up_to_whole_hugepages_says_so():
    """A host whose free memory is in 2 MiB pages backs 219,100 KiB with 107 of them, and says why."""
    host = vmtune.Host.from_capabilities((CORPUS / "hosts" / "lv-caps-x86_64-4node-hugepages-nosmt.xml").read_bytes())
    result = vmtune.rewrite(CASES["memory not a whole number of hugepages"], host, "latency")
    assert any("rounds it up to 107 pages" in c.reason for c in result.changes)


# -- properties ----------------------------------------------------------------------------------

def _strip(xml: str) -> str:
    """The document without comments and with whitespace-only text: what is compared."""
    root = etree.fromstring(xml.encode())
    for comment in root.xpath("//comment()"):
        parent = comment.getparent()
        if comment.tail and comment.tail.strip():
            prev = comment.getprevious()
            if prev is not None:
                prev.tail = (prev.tail or "") + comment.tail
            else:
                parent.text = (parent.text or "") + comment.tail
        parent.remove(comment)
    for el in root.iter():
        if el.text is not None and not el.text.strip():
            el.text = None
        if el.tail is not None and not el.tail.strip():
            el.tail = None
    return etree.tostring(root, encoding="unicode")


ACCEPTED = [p for p in DOMAINS if rewrite_or_none(p.read_bytes(), "balanced") is not None]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ACCEPTED), st.sampled_from(PROFILES), st.integers(0, 10_000))
def test_a_comment_anywhere_changes_nothing_but_itself(path, profile, pick):
    """A comment as the first child of any parent element of a corpus domain: no traceback, and the
    same output as without it, apart from the comment itself."""
    root = etree.fromstring(path.read_bytes())
    parents = [el for el in root.iter() if isinstance(el.tag, str) and len(el)]
    target = parents[pick % len(parents)]
    target.insert(0, etree.Comment(" a note "))
    with_comment = etree.tostring(root, encoding="unicode")
    plain = rewrite_or_none(path.read_bytes(), profile)
    noted = rewrite_or_none(with_comment, profile)
    assert (plain is None) == (noted is None)
    if plain is not None:
        assert _strip(noted.xml) == _strip(plain.xml)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([p for p in ACCEPTED if b"<cell" in p.read_bytes()]), st.sampled_from(PROFILES),
       st.integers(0, 2**16))
def test_cells_without_ids_are_the_cells_with_ids_in_order(path, profile, seed):
    """Dropping the ids of a random subset of guest cells (libvirt numbers them in order) changes
    nothing in the output when the ids were 0, 1, 2... already."""
    root = etree.fromstring(path.read_bytes())
    cells = root.findall("cpu/numa/cell")
    if [c.get("id") for c in cells] != [str(i) for i in range(len(cells))]:
        return  # only cells numbered in order can lose their ids without changing meaning
    for cell in random.Random(seed).sample(cells, random.randint(1, len(cells))):
        del cell.attrib["id"]
    plain = rewrite_or_none(path.read_bytes(), profile)
    stripped = rewrite_or_none(etree.tostring(root), profile)
    assert (plain is None) == (stripped is None)
    if plain is not None:
        assert _strip(stripped.xml) == _strip(plain.xml) or re.sub(r' id="\d+"', "", _strip(stripped.xml)) == \
            re.sub(r' id="\d+"', "", _strip(plain.xml))
