"""The paths vmtune prints (vmtune/xml/edits.py; ``--explain``, ``Change.element``, the notes of what
the hand changed) are XPath: each selects what it names in the domain it describes, 1-based as XPath
is."""

from __future__ import annotations

from lxml import etree

import vmtune
from conftest import CORPUS, EXAMPLES
from fixtures.gridhost import make_host
from vmtune.xml import xmlsafe
from vmtune.cli import format as fmt
from vmtune.errors import VmtuneError
from vmtune.record.retune import _value_at
from vmtune.xml.xmlkeys import keyed, where_of

DOMAINS = sorted((CORPUS / "domains").glob("*.xml")) + sorted(EXAMPLES.glob("*.xml"))
DB = EXAMPLES / "db-4vcpu.xml"


def _walk(node, path):
    for key, child in keyed(node):
        yield [*path, list(key)], child
        if isinstance(child.tag, str):
            yield from _walk(child, [*path, list(key)])


def test_every_key_path_selects_its_node_first():
    """For every element, comment and PI of every corpus domain, the path of its key (what the
    record keeps, and what a note of a hand's change names) is an XPath whose first match is it."""
    nodes = 0
    for source in DOMAINS:
        root = xmlsafe.parse(source.read_bytes())
        if root.tag != "domain":
            continue
        for path, node in _walk(root, []):
            found = root.getroottree().xpath(where_of(path))
            assert found and found[0] is node, (source.name, where_of(path))
            nodes += 1
    assert nodes > 2000


def test_every_explain_path_selects_the_value_it_shows():
    """Every change's path, over the corpus and the four profiles, selects in the output exactly
    the value the change says is there now (a path taken before a later edit added a sibling of
    its tag would select both, or the wrong one)."""
    host = make_host()
    checked = 0
    for source in DOMAINS:
        for profile in ("balanced", "latency", "realtime", "throughput"):
            try:
                result = vmtune.rewrite(source.read_bytes(), host, profile)
            except VmtuneError:
                continue
            out = etree.fromstring(result.xml.encode())
            for c in result.changes:
                if c.after is None:
                    continue
                element = c.after.startswith("<")
                assert _value_at(out, c.element, element) == c.after, (source.name, profile, c.element)
                checked += 1
    assert checked > 1000


def test_the_second_disk_is_disk_2_everywhere():
    """The second disk is ``disk[2]`` in --explain, and a hand's change to it is named by an XPath
    that selects it in the output."""
    host = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    first = vmtune.rewrite(DB.read_bytes(), host, "latency")
    lines = fmt.explain(first)
    assert any(line.startswith("/domain/devices/disk[2]/target/@bus: sata -> virtio") for line in lines), lines
    assert not [line for line in lines if "[0]" in line]
    by_hand = first.xml.replace('<target dev="vdb" bus="virtio"/>', '<target dev="vdb" bus="scsi"/>')
    assert by_hand != first.xml
    again = vmtune.untune(by_hand)
    (note,) = [k for k in again.kept if "/target/@bus" in k]
    where = note.partition(": ")[0]
    assert where == "/domain/devices/disk[source/@dev='/dev/vg0/db-data']/target/@bus", note
    assert _value_at(etree.fromstring(again.xml.encode()), where, False) == "scsi"


def test_keys_count_elements_comments_and_pis_but_not_entity_references():
    """A key's ordinal counts the children that count (vmtune/xml/xmlkeys.py ``counted``): elements,
    comments and PIs, never an entity reference (which a domain vmtune parses cannot hold, for it
    refuses entity declarations), and in <metadata> never vmtune's own tag; a disk is named by its
    source's attributes that are set, an interface by its MAC."""
    from vmtune.xml.xmlkeys import counted, ident_of
    from vmtune.xml.model import TAG

    devices = etree.fromstring("<devices><disk><source file='/a' dev=''/></disk><!--c--><?pi x?>"
                               "<interface><mac address='52:54:00:00:00:01'/></interface><disk/></devices>")
    devices.insert(1, etree.Entity("ref"))
    assert [c.tag for c in counted(devices)] == ["disk", etree.Comment, etree.PI, "interface", "disk"]
    assert [key for key, _ in keyed(devices)] == [("disk", "file=/a", 0), ("#comment", "c", 0), ("#pi", "x", 0),
                                                  ("interface", "52:54:00:00:00:01", 0), ("disk", 0)]
    assert ident_of(devices[0]) == ("disk", "file=/a")  # dev='' is not set
    metadata = etree.fromstring("<metadata><other xmlns='urn:x'/></metadata>")
    metadata.append(etree.Element(TAG))
    assert [c.tag for c in counted(metadata)] == ["{urn:x}other"]
