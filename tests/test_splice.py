"""vmtune/xml/splice.py: an element found and replaced in the text, every other byte kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from lxml import etree

from fixtures import strategies
from vmtune.xml import splice

PIN = etree.fromstring("<cputune><vcpupin vcpu='0' cpuset='7'/></cputune>")
NEW = '<cputune>\n    <vcpupin vcpu="0" cpuset="7"/>\n  </cputune>'


def doc(before: str = "", cputune: str = "<cputune>\n    <vcpupin vcpu='0' cpuset='1'/>\n  </cputune>",
        after: str = "") -> str:
    return f"<domain type='kvm'>\n  <name>d</name>{before}\n  {cputune}{after}\n  <vcpu>1</vcpu>\n</domain>\n"


def test_replaces_the_element_and_nothing_else():
    """The element's span gets the new element, indented where the old one began."""
    assert splice.put(doc(), "cputune", PIN) == doc(cputune=NEW)


@pytest.mark.parametrize("decoy", [
    "<!-- <cputune><vcpupin vcpu='0' cpuset='0'/></cputune> -->",
    "<description><![CDATA[ <cputune> </cputune> ]]></description>",
    "<?app <cputune/> ?>",
    "<metadata><app xmlns='urn:app'><cputune><vcpupin vcpu='0' cpuset='0'/></cputune></app></metadata>",
    "<a:cputune xmlns:a='urn:a'/>",
    "<title a='x>y' b=\"<cputune>\">t</title>",
    "<cputune xmlns='urn:other'/>",
], ids=["comment", "cdata", "pi", "metadata-default-namespace", "prefixed", "attribute-with-gt", "other-namespace"])
def test_a_decoy_before_the_element_is_never_taken_for_it(decoy):
    """A name in a comment, CDATA, a PI, an attribute value, or an element of another namespace
    (a default xmlns in <metadata> included) before the real element is left alone."""
    assert splice.put(doc(before=decoy), "cputune", PIN) == doc(before=decoy, cputune=NEW)


def test_an_empty_tag_is_replaced_whole():
    """<cputune/> (self-closing) is the element's whole span."""
    assert splice.put(doc(cputune="<cputune />"), "cputune", PIN) == doc(cputune=NEW)


def test_a_missing_element_is_added_last_in_its_parent():
    """No <numatune>: it goes before </domain>, indented as a child of the root."""
    numatune = etree.fromstring("<numatune><memory nodeset='1'/></numatune>")
    out = splice.put(doc(), "numatune", numatune)
    assert out == doc().replace("\n</domain>", '\n  <numatune>\n    <memory nodeset="1"/>\n  </numatune>\n</domain>')
    with pytest.raises(LookupError):
        splice.put(doc(), "memoryBacking/hugepages", numatune)  # no <memoryBacking> to put it in
    with pytest.raises(LookupError):
        splice.put(doc(before="<memoryBacking/>"), "memoryBacking/hugepages", numatune)  # an empty tag


def test_a_nested_element_is_found_by_its_path():
    """hugepages inside memoryBacking, not a <hugepages> elsewhere."""
    text = doc(before="<metadata><hugepages xmlns='urn:x'/></metadata><other><hugepages/></other>\n"
               "  <memoryBacking>\n    <hugepages>\n      <page size='2048'/>\n    </hugepages>\n    <locked/>\n"
               "  </memoryBacking>")
    new = etree.fromstring("<hugepages><page size='2048' nodeset='0'/></hugepages>")
    out = splice.put(text, "memoryBacking/hugepages", new)
    assert out == text.replace("<hugepages>\n      <page size='2048'/>\n    </hugepages>",
                               '<hugepages>\n      <page size="2048" nodeset="0"/>\n    </hugepages>')


def test_the_root_and_absent_paths():
    """``""`` is the root; a path to nothing is None; a path may go below the element put."""
    text = doc()
    assert splice.span(text, "") == (0, len(text) - 1)
    assert splice.span(text, "numatune") is None
    assert splice.span(text, "cputune/vcpupin") is not None


@given(strategies.domains(), strategies.memory_domains())
def test_span_is_the_element_lxml_finds(a, b):
    """For every path, the text at ``span`` parses to the element lxml's ``find`` gives."""
    for xml in (a, b):
        root = etree.fromstring(xml)
        for path in ("cputune", "cputune/vcpupin", "memoryBacking/hugepages", "metadata", "devices", "cpu/numa",
                     "numatune/memnode", "os/type", "nothere"):
            found, at = root.find(path), splice.span(xml, path)
            assert (found is None) == (at is None), path
            if found is not None:
                found.tail = None
                assert etree.tostring(etree.fromstring(xml[at[0]:at[1]]), method="c14n") == \
                    etree.tostring(found, method="c14n"), path
