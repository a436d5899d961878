"""The record of a rewrite (vmtune/record/undo.py, vmtune/record/retune.py; issue 25, parts 1-3): re-tuning is exact
and reversible from the XML alone.

Every rewrite records what it changed inside the domain's vmtune tag; a rewrite of a tuned domain
starts from the domain as it was before vmtune; ``untune`` gives that domain back, with what the
hand changed since kept.
"""

from __future__ import annotations

import json
import re
import statistics

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from lxml import etree

import vmtune
from conftest import CORPUS, EXAMPLES
from fixtures.hosttrees import hosts
from fixtures.libvirt_schema import schema_available, validate_domain
from fixtures.strategies import domains
from fixtures.virsh import VIRSH, libvirt_reads, needs_virsh
from vmtune import driver
from vmtune.errors import DoesNotFit, InvalidInput, VmtuneError

PROFILES = ("balanced", "latency", "realtime", "throughput")
HOST = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
STOCK = (EXAMPLES / "stock-latency.xml").read_text()


def record(xml: str) -> dict:
    found = re.search(r"<vmtune:undo version=\"1\">(.*?)</vmtune:undo>", xml, re.S)
    assert found, "no record"
    return json.loads(etree.fromstring(f"<x>{found.group(1)}</x>").text)


def tuned(xml, host, profile):
    try:
        return vmtune.rewrite(xml, host, profile)
    except DoesNotFit:
        return None


# -- exact and reversible -----------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(domains(), hosts(arches=("x86_64",), max_nodes=3), st.sampled_from(PROFILES), st.sampled_from(PROFILES))
def test_retuning_is_tuning_the_original(xml, host, a, b):
    """rewrite(rewrite(x, A), B) is rewrite(x, B), for generated domains and hosts and every pair of
    profiles: the same XML, placement, guest OS, hand changes kept and warnings, but for the warning
    about an older vmtune's tuning that only x can give (rewrite(x, A) has a record); B refuses
    both alike. untune(rewrite(x, A)) is x; twice A is A once, with no change. (The changes differ:
    the re-tune's are from rewrite(x, A), not from x.)"""
    first = tuned(xml, host, a)
    assume(first is not None)
    assert vmtune.untune(first.xml).xml == xml  # byte for byte
    again = vmtune.rewrite(first.xml, host, a)
    assert again.xml == first.xml and again.changes == ()
    direct = tuned(xml, host, b)
    if direct is None:
        with pytest.raises(DoesNotFit):
            vmtune.rewrite(first.xml, host, b)
        return
    retuned = vmtune.rewrite(first.xml, host, b)
    assert retuned.xml == direct.xml
    assert (retuned.profile, retuned.placement, retuned.guest_os, retuned.kept) == \
        (direct.profile, direct.placement, direct.guest_os, direct.kept)
    assert retuned.warnings == tuple(w for w in direct.warnings if w != driver.OLD_WARNING)


def test_every_corpus_domain_and_pair_of_profiles():
    """The corpus and the examples on the 2-node host, every pair of profiles: the same, and the
    record's size (the closing note's figures) stays small."""
    sizes, pairs = [], 0
    for path in sorted((CORPUS / "domains").glob("*.xml")) + sorted(EXAMPLES.glob("*.xml")):
        xml = path.read_text()
        for a in PROFILES:
            try:
                first = vmtune.rewrite(xml, HOST, a)
            except VmtuneError:
                continue
            sizes.append(len(re.search(r"<vmtune:undo.*?</vmtune:undo>", first.xml, re.S).group(0)))
            assert vmtune.untune(first.xml).xml == xml, (path.name, a)  # byte for byte
            for b in PROFILES:
                try:
                    direct = vmtune.rewrite(xml, HOST, b)
                except VmtuneError:
                    continue
                pairs += 1
                assert vmtune.rewrite(first.xml, HOST, b).xml == direct.xml, (path.name, a, b)
    assert pairs > 300
    # each unit as it was is kept as its text was given (its layout too: untune gives those bytes back)
    assert statistics.median(sizes) < 4096 and max(sizes) < 36864, (statistics.median(sizes), max(sizes))


def test_the_record_is_valid_and_small_and_only_what_was_touched():
    result = vmtune.rewrite(STOCK, HOST, "latency")
    if schema_available():
        assert validate_domain(result.xml) == []
    rec = record(result.xml)
    assert rec["v"] == 1 and rec["profile"] == "latency"
    assert "<name>" not in json.dumps(rec) and "web-latency</name>" not in json.dumps(rec)  # no copy of the domain
    assert "<os>" not in json.dumps(rec) and "<console" not in json.dumps(rec)  # nor of what vmtune did not touch
    touched = {unit[0][-1][0] for unit in rec["units"]}
    assert touched <= {"cpu", "cputune", "numatune", "vcpu", "memoryBacking", "iothreads", "clock", "features",
                       "disk", "interface", "memballoon", "controller"}, touched


def test_the_record_keeps_characters_as_they_are_and_escapes_as_json_does():
    """The record is compact JSON with its characters as written (not \\u escapes), whichever of
    Python's two encoders made it, and reads back whole."""
    from vmtune.record import undo
    for text in ("plain", "café ≠ 💾", "a \\u0041 backslash-u", "tab\there\x01"):
        rec = {"v": 1, "units": [[[["disk", 0]], f"<disk>{text}</disk>", None, 3]]}
        assert undo.dumps(rec) == json.dumps(rec, separators=(",", ":"), ensure_ascii=False)
        assert json.loads(undo.dumps(rec)) == rec
    xml = STOCK.replace("web-latency.img", "größe-café.img", 1)  # a disk vmtune changes: in the record
    result = vmtune.rewrite(xml, HOST, "latency")
    kept = result.xml.split("<vmtune:undo", 1)[1]
    assert "größe-café.img" in kept and "\\u" not in kept
    assert vmtune.untune(result.xml).xml == xml


def test_a_profile_change_leaves_nothing_of_the_old_one():
    """The issue's case: latency, then balanced: no pins, no strict numatune, no hugepages, no
    topology, the balloon back; the changes say what was taken back."""
    latency = vmtune.rewrite(STOCK, HOST, "latency")
    balanced = vmtune.rewrite(latency.xml, HOST, "balanced")
    out = etree.fromstring(balanced.xml.encode())
    for gone in ("cputune", "numatune", "memoryBacking", "cpu/topology"):
        assert out.find(gone) is None, gone
    assert out.find("devices/memballoon").get("model") == "virtio"
    assert balanced.xml == vmtune.rewrite(STOCK, HOST, "balanced").xml
    taken_back = [c for c in balanced.changes if "before vmtune's latency tuning" in c.reason]
    assert {c.element for c in taken_back} >= {"/domain/cputune", "/domain/numatune", "/domain/memoryBacking"}


# -- the hand wins ----------------------------------------------------------------------------------------------
def _tuned_nodes(root) -> list:
    """The elements of the units vmtune's record keeps (what a pass may have written), all through."""
    from vmtune.record.undo import TUNED, TUNED_DEVICES

    units = [c for c in root if c.tag in TUNED]
    units += [c for d in root.iterfind("devices") for c in d if c.tag in TUNED_DEVICES]
    return [e for u in units for e in u.iter() if isinstance(e.tag, str)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(domains(), st.sampled_from(PROFILES), st.data())
def test_any_hand_edit_of_what_vmtune_wrote_is_kept_or_noted(xml, profile, data):
    """Edits by hand of the units vmtune tuned (an attribute set, a child added, an element removed):
    untune and a re-tuning never fail on them, and an attribute the hand set survives untune."""
    first = tuned(xml, HOST, profile)
    assume(first is not None)
    root = etree.fromstring(first.xml.encode())
    nodes = _tuned_nodes(root)
    assume(nodes)
    marks = []
    for i in range(data.draw(st.integers(1, 3), label="edits")):
        nodes = _tuned_nodes(root)
        node = data.draw(st.sampled_from(nodes), label="node")
        how = data.draw(st.sampled_from(["set", "child", "remove"] if node.getparent() is not root else ["set", "child"]),
                        label="how")
        if how == "set":
            name = data.draw(st.sampled_from(sorted(node.attrib) + ["hand"]), label="attr")
            node.set(name, f"hand{i}")
            marks.append((node, name, f"hand{i}"))
        elif how == "child":
            etree.SubElement(node, "hand").set("n", str(i))
        else:
            node.getparent().remove(node)
    marks = [m for m in marks if any(a is root for a in m[0].iterancestors()) and m[0].get(m[1]) == m[2]]
    edited = etree.tostring(root, encoding="unicode")
    back = vmtune.untune(edited)
    out = etree.fromstring(back.xml.encode())
    for node, name, value in marks:
        assert out.xpath(f"//*[@{name}='{value}']"), (root.getroottree().getpath(node), name, back.kept)
    try:
        vmtune.rewrite(edited, HOST, profile)
    except VmtuneError:
        pass


def test_a_pin_moved_by_hand_stays_and_is_input_to_the_next_tuning():
    latency = vmtune.rewrite(STOCK.replace('<vcpu placement="static">1', '<vcpu placement="static">2'), HOST, "latency")
    root = etree.fromstring(latency.xml.encode())
    pin = root.find("cputune/vcpupin[@vcpu='1']")
    pin.set("cpuset", "7")
    moved = etree.tostring(root, encoding="unicode")
    back = vmtune.untune(moved)
    out = etree.fromstring(back.xml.encode())
    assert [(p.get("vcpu"), p.get("cpuset")) for p in out.iterfind("cputune/vcpupin")] == [("1", "7")]
    assert out.find("cputune/emulatorpin") is None and out.find("numatune") is None
    assert any("/domain/cputune: vmtune added it, and it was changed by hand" in k for k in back.kept)
    again = vmtune.rewrite(moved, HOST, "balanced")  # the hand's pin is the input: kept inside the cpuset
    assert etree.fromstring(again.xml.encode()).find("cputune/vcpupin[@vcpu='1']").get("cpuset") == "7"
    assert any("changed by hand" in k for k in again.kept)
    from vmtune.cli import format as fmt

    assert any(line.startswith("kept by hand: ") for line in fmt.explain(again))


def test_a_disk_added_by_hand_stays_and_is_tuned():
    latency = vmtune.rewrite(STOCK, HOST, "latency")
    more = latency.xml.replace("</devices>", "<disk type='file' device='disk'><source file='/var/new.img'/>"
                                             "<target dev='sdb' bus='sata'/></disk></devices>")
    new = "devices/disk[source/@file='/var/new.img']/target/@bus"
    back = etree.fromstring(vmtune.untune(more).xml.encode())
    assert back.xpath(new) == ["sata"]
    again = etree.fromstring(vmtune.rewrite(more, HOST, "latency").xml.encode())
    assert again.xpath(new) == ["virtio"]


def test_an_element_vmtune_added_and_the_hand_removed_says_so():
    latency = vmtune.rewrite(STOCK, HOST, "latency")
    root = etree.fromstring(latency.xml.encode())
    root.remove(root.find("numatune"))
    root.find("cpu").set("mode", "host-model")  # and a value vmtune wrote, changed by hand
    edited = etree.tostring(root, encoding="unicode")
    back = vmtune.untune(edited)
    assert "/domain/numatune: vmtune added it, and it was removed by hand" in back.kept
    assert any(k.startswith("/domain/cpu/@mode: 'host-model' by hand") for k in back.kept)
    assert etree.fromstring(back.xml.encode()).find("cpu").get("mode") == "host-model"
    result = vmtune.rewrite(edited, HOST, "latency")
    assert "/domain/numatune: vmtune added it, and it was removed by hand" in result.kept


def test_an_element_vmtune_added_inside_a_unit_and_the_hand_changed_stays():
    """vmtune changed <cpu> and added its <topology>; the hand changed the topology since: the rest
    of <cpu> goes back, the hand's topology stays, with a note (and a re-tuning starts from that)."""
    latency = vmtune.rewrite(STOCK, HOST, "latency")
    root = etree.fromstring(latency.xml.encode())
    root.find("cpu/topology").set("threads", "2")
    edited = etree.tostring(root, encoding="unicode")
    back = vmtune.untune(edited)
    cpu = etree.fromstring(back.xml.encode()).find("cpu")
    assert (cpu.get("mode"), cpu.findtext("model"), cpu.find("topology").get("threads")) == ("custom", "qemu64", "2")
    assert "/domain/cpu/topology: vmtune added it, and it was changed by hand: what the hand wrote is kept" in back.kept
    again = vmtune.rewrite(edited, HOST, "balanced")
    assert "/domain/cpu/topology: vmtune added it, and it was changed by hand: what the hand wrote is kept" in again.kept


def test_a_tag_changed_by_hand_stays():
    latency = vmtune.rewrite(STOCK, HOST, "latency")
    retagged = latency.xml.replace('profile="latency">', 'profile="throughput">', 1)
    back = etree.fromstring(vmtune.untune(retagged).xml.encode())
    tag = back.find("metadata/{https://vmtune.dev/xmlns/1}tune")
    assert tag.get("profile") == "throughput" and len(tag) == 0


# -- what is not a record ------------------------------------------------------------------------------------
def test_an_older_vmtunes_output_gets_one_warning():
    old = re.sub(r"\s*<vmtune:undo.*?</vmtune:undo>", "", vmtune.rewrite(STOCK, HOST, "latency").xml, flags=re.S)
    result = vmtune.rewrite(old, HOST, "latency")
    assert [w for w in result.warnings if "older vmtune" in w] == [driver.OLD_WARNING]
    assert not [w for w in vmtune.rewrite(STOCK, HOST, "latency").warnings if "older vmtune" in w]


def _tagged_by_vmtune_tag(xml: str, profile: str) -> str:
    """``xml`` as ``vmtune tag`` leaves it (vmtune/live/tagging.py, through libvirt's metadata API):
    the tag in <metadata>, with the record of a first tag."""
    from vmtune.record import undo

    root = etree.fromstring(xml.encode())
    for old in root.findall("metadata/{https://vmtune.dev/xmlns/1}tune"):  # untagged first: a first tag
        old.getparent().remove(old)
    record = undo.tagged_only(root, profile)
    metadata = root.find("metadata")
    if metadata is None:
        metadata = etree.SubElement(root, "metadata")
    tag = etree.SubElement(metadata, "{https://vmtune.dev/xmlns/1}tune", nsmap={"vmtune": "https://vmtune.dev/xmlns/1"})
    tag.set("profile", profile)
    tag.append(record)
    return etree.tostring(root, encoding="unicode")


@pytest.mark.parametrize("cpu", [False, True])
def test_a_domain_just_tagged_is_not_taken_for_an_older_vmtunes_output(cpu):
    """A domain the user set up with settings an older vmtune also wrote (no balloon, a
    host-passthrough CPU: a VFIO user's), then tagged with ``vmtune tag``: its record says vmtune
    changed nothing else, so the rewrite reads those settings as the user's (no "older vmtune"
    warning), and untune gives back the tagged domain, tag included. Without the record the
    warning comes, as for an older vmtune's output."""
    mine = STOCK.replace('<memballoon model="virtio"/>', '<memballoon model="none"/>', 1)
    if cpu:
        mine = re.sub(r"<cpu[^>]*>.*?</cpu>|<cpu[^>]*/>", '<cpu mode="host-passthrough"/>', mine, count=1, flags=re.S)
        assert 'mode="host-passthrough"' in mine
    assert '<memballoon model="none"/>' in mine
    tagged = _tagged_by_vmtune_tag(mine, "latency")
    result = vmtune.rewrite(tagged, HOST)
    assert result.profile == "latency" and not [w for w in result.warnings if "older vmtune" in w]
    assert '<memballoon model="none"/>' in result.xml  # the user's own, kept
    back = etree.fromstring(vmtune.untune(result.xml).xml.encode())
    tag = back.find("metadata/{https://vmtune.dev/xmlns/1}tune")
    assert tag is not None and tag.get("profile") == "latency" and len(tag) == 0
    bare = re.sub(r"<vmtune:undo.*?</vmtune:undo>", "", tagged, flags=re.S)
    assert [w for w in vmtune.rewrite(bare, HOST).warnings if "older vmtune" in w] == [driver.OLD_WARNING]


def test_untune_of_a_domain_vmtune_never_tuned_changes_nothing(tmp_path, capsys):
    from vmtune.cli import main

    back = vmtune.untune(STOCK)
    assert back.changed is False and back.xml == STOCK
    (tmp_path / "d.xml").write_text(STOCK)
    assert main(["untune", str(tmp_path / "d.xml"), "-i"]) == 0
    assert (tmp_path / "d.xml").read_text() == STOCK
    assert "vmtune never tuned it" in capsys.readouterr().err


def test_a_damaged_record_is_one_line(tmp_path, capsys):
    from vmtune.cli import main

    bad = vmtune.rewrite(STOCK, HOST, "latency").xml.replace('{"v":1', '{"v":"one"', 1)
    (tmp_path / "d.xml").write_text(bad)
    for argv in (["untune", str(tmp_path / "d.xml")], ["rewrite", str(tmp_path / "d.xml"), "--host",
                                                       str(EXAMPLES / "hosts" / "2node-smt.xml")]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "the vmtune record in <metadata> cannot be read" in err
    with pytest.raises(InvalidInput):
        vmtune.untune(bad)


def test_untune_on_the_command_line(tmp_path, capsys):
    from vmtune.cli import main

    (tmp_path / "t.xml").write_text(vmtune.rewrite(STOCK, HOST, "latency").xml)
    assert main(["untune", str(tmp_path / "t.xml"), "-o", str(tmp_path / "u.xml")]) == 0
    assert (tmp_path / "u.xml").read_text() == STOCK
    assert main(["untune", str(tmp_path / "t.xml"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["changed"] is True and data["xml"] == STOCK and data["kept"] == []
    assert main(["untune", str(tmp_path / "t.xml"), "--diff"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"--- {tmp_path / 't.xml'}\n+++ {tmp_path / 't.xml'} (before vmtune)\n")
    assert main(["untune", str(tmp_path / "t.xml"), "-i"]) == 0
    assert (tmp_path / "t.xml").read_text() == STOCK


# -- libvirt keeps it -----------------------------------------------------------------------------------------------
@needs_virsh
@pytest.mark.parametrize("profile", PROFILES)
def test_the_record_survives_libvirt_and_untunes_from_there(profile, tmp_path):
    """define + dumpxml --inactive (libvirt's test driver) keeps the record; the domain libvirt gives
    back untunes to what libvirt reads of the original."""
    import subprocess

    result = tuned(STOCK, HOST, profile)
    if result is None:
        pytest.skip("does not fit")
    path = tmp_path / "d.xml"
    path.write_text(result.xml)
    done = subprocess.run([VIRSH, "-q", "-c", "test:///default", f"define {path}; dumpxml --inactive web-latency"],
                          capture_output=True, text=True, timeout=60, check=True)
    assert record(done.stdout) == record(result.xml)
    back = vmtune.untune(done.stdout)
    assert back.changed and libvirt_reads(back.xml) == libvirt_reads(STOCK)


def test_a_note_that_the_hand_wins_is_true_of_the_output():
    """A hand change since the last rewrite that this rewrite sets again is not reported "kept":
    its note says the profile set it again, and why; a note ending ": kept" holds in the output."""
    import re

    from lxml import etree

    host = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    tuned = vmtune.rewrite((EXAMPLES / "db-4vcpu.xml").read_bytes(), host, "latency").xml
    edits = [('cache="none"', 'cache="writeback"'), ('io="native"', 'io="threads"')]
    for old, new in edits:
        hand = tuned.replace(old, new, 1).replace(old.replace('"', "'"), new.replace('"', "'"), 1)
        assert hand != tuned, old
        again = vmtune.rewrite(hand, host, "latency")
        root = etree.fromstring(again.xml.encode())
        assert again.kept, old
        for note in again.kept:
            path, _, rest = note.partition(": ")
            m = re.match(r"'(.*)' by hand \(vmtune wrote '.*'\): kept$", rest)
            if m and "/@" in path:
                elem, _, attr = path.rpartition("/@")
                assert root.xpath(elem)[0].get(attr) == m.group(1), note
            if "set again by this profile" in rest:
                assert not rest.endswith(": kept")


def test_the_record_made_from_what_the_passes_touched_is_the_record_of_the_whole_trees():
    """The record a rewrite makes (only the units of the tags the passes touched, took away or added
    are keyed and compared: keys vmtune never changes) is the record of comparing the whole trees:
    a change inside a device, one that takes a device away (the others keyed as before the
    change), one that adds one; a unit put in the place of another and one added at <domain>'s
    level; a device taken away before another of the same key that changes (whose ordinal moves);
    a <devices> added to a domain without one; a unit added at <domain>'s level beside a device
    changed in place, a unit changed in place beside a device taken away, and both at each level (a
    tag whose units are the same nodes in the same order keeps the keys from before, the units of
    another are keyed anew)."""
    import copy

    from vmtune.record import unitdiff
    from vmtune.xml import edits, markup, xmlsafe

    xml = ("<domain type=\"kvm\"><name>k</name><memory>1048576</memory><vcpu>2</vcpu><cpu mode=\"custom\"/>"
           "<devices><controller type=\"scsi\" index=\"0\"/><controller type=\"usb\" index=\"0\"/>"
           "<disk type=\"file\" device=\"disk\"><source file=\"/a.img\"/><target dev=\"sda\" bus=\"scsi\"/></disk>"
           "<disk type=\"file\" device=\"disk\"><source file=\"/b.img\"/><target dev=\"sdb\" bus=\"scsi\"/></disk>"
           "<disk type=\"file\" device=\"cdrom\"><target dev=\"sdc\" bus=\"sata\"/></disk>"
           "<disk type=\"file\" device=\"cdrom\"><target dev=\"sdd\" bus=\"sata\"/></disk>"
           "</devices></domain>")
    bare = "<domain type=\"kvm\"><name>k</name><memory>1048576</memory><vcpu>2</vcpu></domain>"
    cdroms = "devices/disk[@device='cdrom']"
    changes = (
        (xml, lambda root: [edits.Set(root.find("devices/disk[2]"), "driver/@cache", "none", "test")]),
        (xml, lambda root: [edits.Remove(root.find("devices/disk"), "test")]),
        (xml, lambda root: [edits.Put(root.find("devices"), etree.fromstring('<memballoon model="none"/>'), "test")]),
        (xml, lambda root: [edits.Put(root, etree.fromstring('<cpu mode="host-passthrough"/>'), "test"),
                            edits.Put(root, etree.fromstring('<cputune><emulatorpin cpuset="0"/></cputune>'), "test")]),
        (xml, lambda root: [edits.Set(root.findall(cdroms)[1], "target/@bus", "scsi", "test"),
                            edits.Remove(root.find(cdroms), "test")]),
        (bare, lambda root: [edits.Put(root, etree.fromstring('<devices><memballoon model="none"/></devices>'), "test")]),
        (xml, lambda root: [edits.Put(root, etree.fromstring('<cputune><emulatorpin cpuset="0"/></cputune>'), "test"),
                            edits.Set(root.find("devices/disk[2]"), "driver/@cache", "none", "test")]),
        (xml, lambda root: [edits.Set(root.find("cpu"), "@mode", "host-passthrough", "test"),
                            edits.Remove(root.find("devices/disk"), "test")]),
        (xml, lambda root: [edits.Put(root, etree.fromstring('<cputune><emulatorpin cpuset="0"/></cputune>'), "test"),
                            edits.Set(root.find("cpu"), "@mode", "host-passthrough", "test"),
                            edits.Set(root.find("devices/controller[2]"), "@model", "qemu-xhci", "test"),
                            edits.Remove(root.find("devices/disk"), "test")]),
    )
    for i, (text, change) in enumerate(changes):
        root = xmlsafe.parse(text, "domain XML")
        before = copy.deepcopy(root)
        source = markup.Source(text, root)
        base = unitdiff.snapshot(root, source)
        for edit in change(root):
            edits.applied(edit, source)
        record = unitdiff.diff(base, root)
        assert record["units"] and record["units"] == unitdiff.diff(before, root)["units"], i


def test_the_tags_whose_units_moved_are_those_added_taken_away_or_out_of_order():
    """``unitdiff.moved_tags``: a tag whose nodes are the same, in the same order, before and after has
    not moved; one with a node added or taken away has, and so has one whose nodes changed places
    (edits never do that, but the record must not take it for still)."""
    from vmtune.record import unitdiff

    a1, a2, b1, b2, c1 = (etree.Element(t) for t in ("a", "a", "b", "b", "c"))
    tags = {"a", "b", "c"}
    assert unitdiff.moved_tags([a1, b1, c1], [a1, b1, c1], tags) == set()
    assert unitdiff.moved_tags([a1, b1, c1], [a1, b1, b2, c1], tags) == {"b"}
    assert unitdiff.moved_tags([a1, b1, c1], [b1, c1], tags) == {"a"}
    assert unitdiff.moved_tags([a1, b1, a2, c1], [a2, b1, a1, c1], tags) == {"a"}
    assert unitdiff.moved_tags([a1, b1, a2, b2], [a2, b2, a1, b1, c1], tags) == {"a", "b", "c"}
    assert unitdiff.moved_tags([a1, c1, b1], [c1, a1, b1], tags) == set()  # each tag's own order kept
