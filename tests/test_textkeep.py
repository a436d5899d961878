"""The text kept (vmtune/xml/textkeep.py; issue 32, item 4): the bytes vmtune did not change stay as
they were.

Over the corpus and the examples for every profile, and over generated domains laid out as
``virsh dumpxml``, virt-manager and people write them: the text outside the units vmtune changed
is the input's, byte for byte; ``untune(rewrite(x))`` is ``x``; a rewrite of the output changes
nothing, whitespace-only elements included; and a NIC that libvirt gave a MAC since is still the
NIC the record names.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from lxml import etree

import vmtune
from conftest import CORPUS, EXAMPLES
from fixtures.hosttrees import hosts
from fixtures.strategies import blank_domains, domains, laid_out
from fixtures.virsh import VIRSH, libvirt_accepts, needs_virsh
from vmtune.xml import xmlsafe
from vmtune.xml.markup import LAZY, Source, Unplaced, scan
from vmtune.errors import DoesNotFit, InvalidInput, Unsupported, VmtuneError
from vmtune.xml.xmlkeys import canon, find

PROFILES = ("balanced", "latency", "realtime", "throughput")
HOST = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
FILES = sorted((CORPUS / "domains").glob("*.xml")) + sorted(EXAMPLES.glob("*.xml"))
UNDO = re.compile(r"<vmtune:undo[^>]*>(.*?)</vmtune:undo>", re.S)

# this test's own reading of the markup: a comment, a PI, an end tag (1), a tag's name (2), '/' (3)
MARKUP = re.compile(r"""<!--.*?-->|<\?.*?\?>|<(/?)([^\s/>!?]+)(?:[^>"']|"[^"]*"|'[^']*')*?(/?)>""", re.S)


def spans(text: str) -> dict[tuple, tuple[int, int]]:
    """Child indexes from the root -> (start, end) of each element and comment inside the root."""
    out: dict[tuple, tuple[int, int]] = {}
    stack: list[list] = []  # [path, start, children seen]
    for m in MARKUP.finditer(text):
        if m.group(1):
            path, start, _ = stack.pop()
            out[path] = (start, m.end())
            continue
        if not stack:
            if m.group(2):
                stack.append([(), m.start(), 0])
            continue
        path = (*stack[-1][0], stack[-1][2])
        stack[-1][2] += 1
        if m.group(2) and not m.group(3):
            stack.append([path, m.start(), 0])
        else:
            out[path] = (m.start(), m.end())
    return out


def where(node) -> tuple:
    path = []
    while node.getparent() is not None:
        path.append(node.getparent().index(node))
        node = node.getparent()
    return tuple(reversed(path))


def record(xml: str) -> dict:
    return json.loads(etree.fromstring(f"<x>{UNDO.search(xml).group(1)}</x>").text)


def cut(text: str, units: list, side: int) -> str:
    """``text`` without the units of the record's ``units`` that it holds (``side``: 1 the input,
    2 the output) and without ``<metadata>``, each with the line break and indentation before it
    (a unit vmtune removed: with all the whitespace before it, which the record keeps)."""
    root = xmlsafe.parse(text)
    nodes = [(find(root, unit[0]), side == 1 and unit[2] is None) for unit in units if unit[side] is not None]
    nodes += [(node, False) for node in root.findall("metadata")]
    at = spans(text)
    for (start, end), whole in sorted(((at[where(node)], whole) for node, whole in nodes if node is not None),
                                      reverse=True):
        ws = len(text[:start].rstrip())
        line = text.rfind("\n", ws, start)
        if not whole and line >= 0:
            ws = line - 1 if line and text[line - 1] == "\r" else line
        text = text[:ws] + text[end:]
    return text


def assert_only_units_changed(given: str, written: str) -> None:
    units = record(written)["units"]
    assert cut(given, units, 1) == cut(written, units, 2)


def rewrite_or_skip(xml, host, profile):
    try:
        return vmtune.rewrite(xml, host, profile)
    except (DoesNotFit, Unsupported):
        assume(False)


# -- the corpus and the examples -------------------------------------------------------------------
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_outside_the_units_it_changed_every_byte_is_the_inputs(path):
    """Every corpus domain and example, every profile: cut out the units the record names (and
    ``<metadata>``, which holds the record), and the input and the output are the same text;
    untune gives the input back byte for byte; a second rewrite changes nothing."""
    xml = path.read_text()
    for profile in PROFILES:
        try:
            result = vmtune.rewrite(xml, HOST, profile)
        except VmtuneError:
            continue
        assert_only_units_changed(xml, result.xml)
        assert vmtune.untune(result.xml).xml == xml, profile
        again = vmtune.rewrite(result.xml, HOST, profile)
        assert (again.xml, again.changes) == (result.xml, ()), profile


def test_a_diff_of_a_dumpxml_file_shows_only_the_lines_that_changed(capsys):
    """The issue's case: ``--diff`` on a single-quoted libvirt file re-quoted every attribute
    (139 changed lines for 14 changes). Every line it shows now lies in a unit the record names."""
    from vmtune.cli import main

    path = CORPUS / "domains" / "lv-cpu-host-passthrough.xml"
    host = str(EXAMPLES / "hosts" / "2node-smt.xml")
    assert main(["rewrite", str(path), "--host", host, "--profile", "latency", "--diff"]) == 0
    diff = capsys.readouterr().out
    written = vmtune.rewrite(path.read_text(), HOST, "latency").xml
    units = record(written)["units"]
    given_lines, written_lines = _unit_lines(path.read_text(), units, 1), _unit_lines(written, units, 2)
    old = new = 0
    for line in diff.splitlines()[2:]:
        if line.startswith("@@"):
            old, new = (int(n) for n in re.match(r"@@ -(\d+)(?:,\d+)? \+(\d+)", line).groups())
            continue
        if line.startswith("-"):
            assert old in given_lines, line
            old += 1
        elif line.startswith("+"):
            assert new in written_lines, line
            new += 1
        else:
            old, new = old + 1, new + 1
    assert sum(line.startswith("-") for line in diff.splitlines()[2:]) == 5  # <cpu/>, <clock/>, <memballoon> (3)


def _unit_lines(text: str, units: list, side: int) -> set[int]:
    """The line numbers (from 1) of the units the record names, and of <metadata>."""
    root = xmlsafe.parse(text)
    nodes = [find(root, unit[0]) for unit in units if unit[side] is not None] + root.findall("metadata")
    at = spans(text)
    out: set[int] = set()
    for node in nodes:
        if node is not None:
            start, end = at[where(node)]
            out |= set(range(text.count("\n", 0, start) + 1, text.count("\n", 0, end) + 2))
    return out


# -- generated domains, laid out every way -----------------------------------------------------------
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(domains().flatmap(laid_out), hosts(arches=("x86_64",), max_nodes=3), st.sampled_from(PROFILES))
def test_generated_domains_keep_every_byte_in_either_quotes_and_any_layout(xml, host, profile):
    """Generated domains in single or double quotes, laid out as libvirt does, on one line, or
    oddly (another step, blank lines, spaces between attributes, CRLF, a declaration): only the
    units vmtune changed differ, untune gives back every byte, and rewriting again changes
    nothing."""
    result = rewrite_or_skip(xml, host, profile)
    assert_only_units_changed(xml, result.xml)
    assert vmtune.untune(result.xml).xml == xml
    again = vmtune.rewrite(result.xml, host, profile)
    assert (again.xml, again.changes) == (result.xml, ())


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.sampled_from(FILES).map(lambda p: p.read_text()), domains().flatmap(laid_out),
                 blank_domains().flatmap(laid_out)), st.sampled_from(PROFILES))
def test_the_text_written_reads_back_as_the_domain_vmtune_made(xml, profile):
    """What is written into the text reads back as the tree the passes made, node for node (as
    lxml writes that tree whole: what vmtune wrote before issue 32), whitespace between elements
    apart."""
    from vmtune import driver
    from vmtune.xml.xmlkeys import canon

    result = rewrite_or_skip(xml, HOST, profile)
    whole = driver.serialize(driver.tune(xml, HOST, profile, record=True).root)
    assert canon(xmlsafe.parse(result.xml)) == canon(xmlsafe.parse(whole))


# found by the property below: CRLF line ends after the root only in blank elements that vmtune gives
# children; the tuned text then has none there, and the record's blank text must keep its "\r\n"
CRLF_BLANKS = (
    "<?xml version='1.0' encoding='UTF-8'?>\r\n<!-- a file -->\r\n<domain type='kvm'><name>gen</name>"
    "<uuid>00000000-0000-4000-8000-000000000001</uuid><memory unit='MiB'>256</memory>"
    "<memoryBacking>\r\n</memoryBacking><vcpu placement='static'>2</vcpu><os><type arch='x86_64' "
    "machine='pc'>hvm</type></os><devices>\r\n  </devices></domain>\n")


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blank_domains().flatmap(laid_out), st.sampled_from(PROFILES), st.sampled_from(PROFILES))
@example(CRLF_BLANKS, "latency", "balanced")
def test_whitespace_only_elements_keep_the_record_idempotent(xml, a, b):
    """A tuned element of whitespace only (``<cpu>\\n  </cpu>``, which libxml2 keeps as text) that
    vmtune gives children reads back without that text: the record of a second rewrite is the
    first's, and so is every byte; a rewrite with another profile is the same from either."""
    first = rewrite_or_skip(xml, HOST, a)
    again = vmtune.rewrite(first.xml, HOST, a)
    assert (again.xml, again.changes) == (first.xml, ())
    try:
        direct = vmtune.rewrite(xml, HOST, b)
    except DoesNotFit:
        return
    assert vmtune.rewrite(first.xml, HOST, b).xml == direct.xml


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.sampled_from(FILES).map(lambda p: p.read_text()), domains().flatmap(laid_out)))
def test_a_node_found_by_its_line_is_where_reading_the_text_finds_it(xml):
    """Where the writer finds nodes by the line lxml read them on (vmtune/xml/locate.py), each is
    where reading the whole text finds it (``markup.scan``); where it cannot, it says so."""
    assert found_by_line(xml) <= sum(1 for _ in xmlsafe.parse(xml).iter())


def found_by_line(xml: str) -> int:
    """How many nodes of ``xml`` are found by their line, each checked against ``markup.scan``."""
    root = xmlsafe.parse(xml)
    source = Source(xml, root)
    if source.markup().kids is not LAZY:
        return 0  # the root itself is not found by its line: the text is read through
    found, pending = 1, [(root, source.markup(), scan(xml))]
    while pending:
        node, tok, read = pending.pop()
        try:
            toks = source.kids_of(tok, list(node))
            got = [toks[i] for i in range(len(toks))]
        except Unplaced:
            continue
        located = [(t.start, t.head, t.close, t.end) for t in got]
        assert located == [(t.start, t.head, t.close, t.end) for t in read.kids]
        found += len(got)
        pending += [(kid, t, r) for kid, t, r in zip(node, got, read.kids) if t.kids is LAZY]
    return found


# siblings of one tag on one line, the second asked for alone: the first '<' of the line is the
# first's (found: the record then kept both as the second, and ``untune`` refused it)
TWO_ON_A_LINE = ("<domain type='kvm'>\n  <name>a</name>\n  <memory unit='KiB'>1048576</memory>\n"
                 "  <vcpu placement='static'>2</vcpu>\n  <os>\n    <type arch='x86_64'>hvm</type>\n  </os>\n"
                 "  <devices>\n    <disk type='file' device='cdrom'><target dev='hdc' bus='ide'/></disk>"
                 "<disk type='file' device='disk'><source file='/d.img'/><target dev='hda' bus='ide'/></disk>\n"
                 "  </devices>\n</domain>\n")
# the same with one below the node before it on its line
BELOW_ON_A_LINE = ("<domain type='kvm'>\n  <name>a</name>\n  <vcpu placement='static'>2</vcpu>\n  <numatune>\n"
                   "    <memory mode='strict' nodeset='0'/></numatune><memory unit='KiB'>1048576</memory>\n"
                   "  <os>\n    <type arch='x86_64'>hvm</type>\n  </os>\n  <devices>\n"
                   "    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n  </devices>\n</domain>\n")


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.sampled_from(FILES).map(lambda p: p.read_text()), domains().flatmap(laid_out)))
@example(TWO_ON_A_LINE)
@example(BELOW_ON_A_LINE)
def test_a_node_asked_for_alone_is_where_reading_the_text_finds_it(xml):
    """A child of ``<domain>`` or of one of its children asked for alone, none of its siblings
    before it located (as the record asks for a unit: ``Source.given``), is its text as reading
    the whole text finds it, or None."""
    root, read = xmlsafe.parse(xml), scan(xml)
    for i, (node, tok) in enumerate(zip(root, read.kids)):
        for path, kid, at in [((i,), node, tok), *(((i, j), k, t) for j, (k, t) in enumerate(zip(node, tok.kids or ())))]:
            if isinstance(kid.tag, str):
                given = Source(xml, xmlsafe.parse(xml)).given(path, kid.tag)
                assert given in (None, xml[at.start:at.end]), path


@pytest.mark.parametrize("xml", [TWO_ON_A_LINE, BELOW_ON_A_LINE], ids=["siblings", "below"])
@pytest.mark.parametrize("profile", PROFILES)
def test_nodes_sharing_a_line_come_back_byte_for_byte(xml, profile):
    """A unit that shares its line with the one before it, or with what is below that: untune
    gives every byte back, and only the units vmtune changed differ."""
    result = vmtune.rewrite(xml, HOST, profile)
    assert vmtune.untune(result.xml).xml == xml
    assert_only_units_changed(xml, result.xml)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_files_laid_out_one_node_a_line_are_found_by_their_lines(path):
    """The corpus and the examples (one node a line, as libvirt and virt-manager write) are found
    by their lines whole: the writer never reads them through."""
    xml = path.read_text()
    nodes = sum(1 for _ in xmlsafe.parse(xml).iter())
    if any(len(re.findall(r"<[^/]", line)) > 1 for line in xml.splitlines()):
        assert found_by_line(xml) < nodes  # two nodes on a line: those are read through
    else:
        assert found_by_line(xml) == nodes


# -- what libvirt writes ------------------------------------------------------------------------------
def dumpxml(xml: str) -> str:
    """``xml`` as libvirt writes it back: ``virsh define`` then ``dumpxml --inactive`` (test driver)."""
    name = etree.fromstring(xml.encode()).findtext("name")
    with tempfile.NamedTemporaryFile("w", suffix=".xml") as fh:
        fh.write(xml)
        fh.flush()
        done = subprocess.run([VIRSH, "-q", "-c", "test:///default", f"define {fh.name}; dumpxml --inactive {name}"],
                              capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


@needs_virsh
@pytest.mark.parametrize("path", sorted((CORPUS / "domains").glob("*.xml")), ids=lambda p: p.stem)
def test_files_as_virsh_dumpxml_writes_them_come_back_byte_for_byte(path):
    """Each corpus domain libvirt accepts, as ``virsh dumpxml`` writes it, every profile:
    untune(rewrite(x)) is x byte for byte, and only the units vmtune changed differ."""
    if libvirt_accepts(path.read_bytes()) is not None:
        pytest.skip("libvirt's parser refuses the input")
    given = dumpxml(path.read_text())
    for profile in PROFILES:
        try:
            result = vmtune.rewrite(given, HOST, profile)
        except VmtuneError:
            continue
        assert vmtune.untune(result.xml).xml == given, profile
        assert_only_units_changed(given, result.xml)


@st.composite
def nics_without_mac(draw) -> str:
    xml = draw(domains())
    assume("<interface" in xml)
    return draw(laid_out(re.sub(r"<mac address='[^']*'/>", "", xml)))


@needs_virsh
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nics_without_mac(), st.sampled_from(PROFILES))
def test_a_nic_libvirt_gave_a_mac_is_the_nic_the_record_names(xml, profile):
    """A NIC without <mac>: libvirt fills one in at ``virsh define``. The record keyed it by no
    MAC; after define and dumpxml, untune still finds it (by what vmtune wrote, else by its place
    among such NICs), gives back its model and driver, keeps libvirt's MAC, and blames no hand."""
    result = rewrite_or_skip(xml, HOST, profile)
    assume(libvirt_accepts(result.xml) is None)  # the test driver refuses some (a vhostuser socket): no round trip
    dumped = dumpxml(result.xml)
    back = vmtune.untune(dumped)
    assert [note for note in back.kept if "interface" in note] == []
    given = etree.fromstring(xml.encode()).findall("devices/interface")
    out = etree.fromstring(back.xml.encode()).findall("devices/interface")
    macs = [nic.find("mac").get("address") for nic in etree.fromstring(dumped.encode()).findall("devices/interface")]
    assert [nic.find("mac").get("address") for nic in out] == macs
    assert [(nic.find("model").get("type"), nic.find("driver")) for nic in out] == \
        [(nic.find("model").get("type"), None) for nic in given]
    assert [note for note in vmtune.rewrite(dumped, HOST, profile).kept if "interface" in note] == []


# -- the record ---------------------------------------------------------------------------------------
def test_a_record_as_an_older_vmtune_wrote_it_still_reads():
    """Records written before issue 32 keep each unit as lxml writes it (double quotes, no layout):
    untune reads them and gives back the same domain (laid out anew where it changed)."""
    given = (EXAMPLES / "stock-latency.xml").read_text().replace('"', "'")
    written = vmtune.rewrite(given, HOST, "latency").xml
    rec = record(written)
    for unit in rec["units"]:
        if unit[1] is not None:
            unit[1] = etree.tostring(xmlsafe.parse(unit[1]), encoding="unicode")
    old = etree.Element("x")
    old.text = json.dumps(rec, separators=(",", ":"))
    older = written.replace(UNDO.search(written).group(1), etree.tostring(old, encoding="unicode")[3:-4])
    back = vmtune.untune(older)
    assert back.kept == ()
    assert etree.tostring(xmlsafe.parse(back.xml)) == etree.tostring(xmlsafe.parse(given))


def test_a_record_never_expands_an_entity():
    """The record is read from the domain, which anyone may have written: a unit in it is parsed
    as safely as the domain (no DTD, no entity), and one that tries is refused in one line."""
    written = vmtune.rewrite((EXAMPLES / "stock-latency.xml").read_text(), HOST, "latency").xml
    rec = record(written)
    rec["units"][0][1] = '<!DOCTYPE cpu [<!ENTITY e SYSTEM "file:///etc/hostname">]><cpu>&e;</cpu>'
    old = etree.Element("x")
    old.text = json.dumps(rec)
    bad = written.replace(UNDO.search(written).group(1), etree.tostring(old, encoding="unicode")[3:-4])
    with pytest.raises(InvalidInput) as caught:
        vmtune.untune(bad)
    assert "\n" not in str(caught.value)


@needs_virsh
@pytest.mark.parametrize("profile", ("latency", "realtime"))
def test_a_tuned_domain_through_define_and_dumpxml_is_untuned_with_no_hand_note(profile):
    """libvirt writes each <vcpusched> back one vCPU a piece and may reorder attributes: vmtune
    writes them so, and a unit libvirt only reformatted goes back whole, with no "by hand" note."""
    given = dumpxml((EXAMPLES / "db-4vcpu.xml").read_text())
    tuned = vmtune.rewrite(given, HOST, profile).xml
    back = vmtune.untune(dumpxml(tuned))
    assert back.kept == ()
    assert canon(xmlsafe.parse(back.xml)) == canon(xmlsafe.parse(given))
